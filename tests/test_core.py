"""einad.core: the tracing core (traces, `bind`, the `Tensor` box, the `Staged` value `ea.jit`
traces with, and the imperative graph `Tensor.backward` differentiates).

These tests pin what core shows the user directly: a Tensor's repr (constant, requiring grad,
traced by a transformation, staged by `ea.jit`, lazy on dask); the exact messages of its errors
(a jit-staged value read as a number, a tracer used after its transformation returned, len() of
a 0-d tensor, numpy functions einad lacks on traced Tensors, in-place updates of leaves); Python
conversions (int, complex, operator.index, item); numpy functions einad lacks running on constant
Tensors (their arguments passed on unchanged in form); comparisons of constants giving numpy
arrays; in-place operators keeping the tensor's identity; and gradients and cotangents a user
gives kept in the tensor's own array library.
"""

import math
import operator
import re
from collections import namedtuple

import numpy as np
import pytest

import einad as ea
from einad import core
from einad.core import Structured
from tests.support.numerics import assert_close

# -- repr ---------------------------------------------------------------------------------------


def test_repr_of_a_constant_tensor_is_its_values_and_dtype():
    assert repr(ea.tensor([1.0, 2.0])) == "tensor([1., 2.], dtype=float64)"
    assert repr(ea.tensor([1, 2, 3], dtype=np.int32)) == "tensor([1, 2, 3], dtype=int32)"
    assert repr(ea.tensor(2.5)) == "tensor(2.5, dtype=float64)"
    # rows after the first are indented under "tensor(", as numpy indents under "array("
    assert repr(ea.tensor([[1.0, 2.0], [3.0, 4.0]])) == (
        "tensor([[1., 2.],\n        [3., 4.]], dtype=float64)"
    )


def test_repr_of_a_tensor_that_requires_grad_says_so():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    assert repr(w) == "tensor([1., 2.], dtype=float64, requires_grad=True)"
    # a result computed from it belongs to the same imperative graph
    assert repr(w * 2) == "tensor([2., 4.], dtype=float64, requires_grad=True)"


def test_repr_of_a_traced_tensor_names_its_trace():
    seen = []

    def f(x):
        seen.append(repr(x))
        return (x * x).sum()

    ea.grad(f)(np.array([1.0, 2.0]))
    ea.jvp(f, (np.array([1.0, 2.0]),), (np.array([1.0, 0.0]),))
    assert re.fullmatch(r"tensor\(\[1\., 2\.\], dtype=float64, traced by <reverse trace \d+>\)", seen[0])
    assert re.fullmatch(r"tensor\(\[1\., 2\.\], dtype=float64, traced by <forward trace \d+>\)", seen[1])


def test_repr_of_a_staged_tensor_shows_shape_and_dtype_not_a_value():
    seen = []

    @ea.jit
    def f(x, s):
        seen.append(repr(x))
        seen.append(repr(s))
        return x * s

    f(np.ones((2, 3), dtype=np.float32), np.array(2.0))
    assert re.fullmatch(r"tensor\(<staged float32\[2, 3\]>, traced by <staging trace \d+>\)", seen[0])
    assert re.fullmatch(r"tensor\(<staged float64\[\]>, traced by <staging trace \d+>\)", seen[1])


def test_repr_of_a_dask_tensor_does_not_compute_it():
    da = pytest.importorskip("dask.array")
    from dask.callbacks import Callback

    t = ea.tensor(da.ones(3, chunks=3))
    computed = []
    with Callback(start=lambda dsk: computed.append(1)):
        text = repr(t)
    assert not computed
    assert re.fullmatch(
        r"tensor\(dask\.array<[^>]*, shape=\(3,\), dtype=float64, [^>]*>, dtype=float64\)", text
    )


# -- values staged by ea.jit refuse to be read ----------------------------------------------------


def _staged_message(what):
    return (
        f"^{re.escape(what)} of a value traced by einad\\.jit \\(or make_graph\\): its value is not known "
        "when the program is built\\. Mark the argument it comes from static "
        "\\(static_argnums / static_argnames\\), or write the choice with ea\\.where$"
    )


@pytest.mark.parametrize(
    ("read", "what"),
    [
        (bool, "bool()"),
        (int, "int()"),
        (float, "float()"),
        (complex, "complex()"),
        # a float tensor too: under jit the value is unknown, so it is the TracerError,
        # not the "only an integer tensor" TypeError an eager float tensor gets
        (operator.index, "int()"),
        (ea.Tensor.item, "float()"),
        (ea.Tensor.numpy, "numpy conversion"),
    ],
    ids=["bool", "int", "float", "complex", "index", "item", "numpy"],
)
def test_jit_refuses_to_read_a_staged_value_naming_the_conversion_and_the_ways_out(read, what):
    @ea.jit
    def f(x):
        read(x)
        return x

    with pytest.raises(ea.TracerError, match=_staged_message(what)):
        f(np.array(1.5))


def test_a_staged_value_refuses_operator_index():
    # No public path reaches Staged.__index__ (Tensor.__index__ reads a staged value with int(),
    # which is Staged.__int__), so this one builds the staged value directly.
    from einad.core import Staged

    with pytest.raises(ea.TracerError, match=_staged_message("int()")):
        operator.index(Staged(np.array(3)))


# -- a tracer used after its transformation returned ------------------------------------------------

_DEAD = (
    r"^a value traced by <reverse trace \d+> was used after that transformation returned "
    r"\(it leaked out, e\.g\. saved in a list or a global, or written into a tensor made "
    r"outside the function: t\[i\] = v\): return it from the transformed function instead$"
)


@pytest.mark.parametrize(
    "use",
    [float, bool, int, complex, operator.index, ea.Tensor.item, np.asarray, lambda t: t + 1],
    ids=["float", "bool", "int", "complex", "index", "item", "asarray", "add"],
)
def test_a_leaked_tracer_names_its_dead_transformation(use):
    leaked = []

    def f(x):
        leaked.append(x)
        return x.sum()

    ea.grad(f)(np.array([1.0]))
    with pytest.raises(ea.TracerError, match=_DEAD):
        use(leaked[0])


# -- conversions of constant tensors ----------------------------------------------------------------


def test_python_conversions_of_a_constant_tensor():
    assert int(ea.tensor(3.7)) == 3
    assert complex(ea.tensor(1.0 + 2.0j)) == 1.0 + 2.0j
    assert float(ea.tensor(2.5)) == 2.5
    assert operator.index(ea.tensor(3)) == 3
    assert [10, 20, 30][ea.tensor(1)] == 20
    assert ea.tensor([2.5]).item() == 2.5
    assert type(ea.tensor(3).item()) is int
    t = ea.tensor(np.arange(6.0).reshape(2, 3))  # numpy's item(i) and item(i, j)
    assert (t.item(4), t.item(1, 0), t.item(-1)) == (4.0, 3.0, 5.0)
    with pytest.raises(ValueError, match="size 1"):
        t.item()


def test_a_python_float_of_a_differentiated_value_is_refused_not_a_dropped_derivative():
    """``float(x)`` and ``complex(x)`` inside grad or jvp would give a number without the
    derivative (``math.exp(x)``, ``array[i] = x``: a wrong gradient, silently); they are a
    TypeError naming ``item()``, which means it. ``bool`` and ``int`` still read values for
    control flow, and the imperative graph's tensors give their numbers, as PyTorch's."""
    refusal = (
        r"float\(\) of a value traced by <(reverse|forward) trace \d+> would drop its derivative.*t\.item\(\)"
    )
    for transform in (ea.grad, lambda f: lambda x: ea.jvp(f, (x,), (np.ones(2),))[1]):
        with pytest.raises(TypeError, match=refusal):
            transform(lambda x: ea.sum(x) * math.exp(x[0]))(np.ones(2))
        with pytest.raises((TypeError, ValueError)):  # (numpy, refused a float, tries a sequence)
            transform(lambda x: ea.sum(x) + np.array([0.0, x[0]]).sum())(np.ones(2))
    with pytest.raises(TypeError, match=r"complex\(\) of a value traced"):
        ea.grad(lambda x: ea.sum(x) * abs(complex(x[0])))(np.ones(2))
    assert_close(ea.grad(lambda x: ea.sum(x) * x[0].item())(np.array([2.0, 3.0])), [2.0, 2.0])
    assert_close(
        ea.grad(lambda x: x[0] * 3.0 if x[0] > 0 and int(x[1]) == 3 else x[1])(np.array([2.0, 3.0])),
        [3.0, 0.0],
    )
    w = ea.tensor(2.5, requires_grad=True)
    assert float(w) == 2.5 and float(w * 2.0) == 5.0


def test_only_an_integer_tensor_is_an_index():
    with pytest.raises(TypeError, match=r"^only an integer tensor can be an index, got dtype float64$"):
        operator.index(ea.tensor(1.0))


def test_len_of_a_0d_tensor_is_a_type_error():
    assert len(ea.tensor([1.0, 2.0, 3.0])) == 3
    with pytest.raises(TypeError, match=r"^len\(\) of a 0-d tensor$"):
        len(ea.tensor(1.0))


def test_comparing_constant_tensors_gives_a_numpy_boolean_array():
    out = ea.tensor([1.0, -1.0]) > 0
    assert type(out) is np.ndarray
    np.testing.assert_array_equal(out, [True, False])
    assert type(ea.tensor([1.0, 2.0]) == ea.tensor([1.0, 3.0])) is np.ndarray


def test_a_tensor_compared_with_none_is_not_none_as_in_torch_and_jax():
    t = ea.tensor([1.0, 2.0])
    assert (t == None) is False and (t != None) is True  # noqa: E711 (the operator is the subject)
    assert (None == t) is False and t not in (None,) and [None, t].index(t) == 1  # noqa: E711
    inside = []
    ea.grad(lambda x: inside.append((x == None, x != None)) or ea.sum(x))(np.ones(2))  # noqa: E711
    staged = ea.jit(lambda x: x * 2.0 if x != None else x)(np.ones(2))  # noqa: E711
    assert inside == [(False, True)] and np.array_equal(staged, [2.0, 2.0])


# -- numpy functions einad does not implement ------------------------------------------------------

Pair = namedtuple("Pair", "a b")


def test_numpy_functions_einad_lacks_run_on_constant_tensors_with_their_arguments_as_given():
    t = ea.tensor(np.arange(6.0).reshape(2, 3))
    # the arguments as numpy gets them: constant Tensors become their (read-only) arrays inside
    # containers; a tuple stays a tuple (histogramdd reads a sequence of arrays as one array per
    # coordinate, an array as rows of points), a tuple subclass arrives as a list of the arrays
    plain = core._plain(((t, [t[0], None]), {"w": t, "n": None}))
    assert type(plain[0]) is tuple and type(plain[0][1]) is list and plain[1]["n"] is None
    assert type(plain[0][0]) is np.ndarray and not plain[0][0].flags.writeable
    pair = Pair(ea.tensor([0.0, 1.0, 2.0]), ea.tensor([3.0, 4.0, 5.0]))
    assert type(core._plain(pair)) is list
    seen = []
    ea.grad(lambda x: seen.append(core._plain([x, t])) or ea.sum(x))(np.ones(2))
    assert seen == [None]  # a traced Tensor inside: numpy would drop its derivative
    # a ufunc einad lacks (numpy.frompyfunc makes one), with its keyword arguments
    halve = np.frompyfunc(lambda v: v / 2, 1, 1)
    np.testing.assert_array_equal(halve(t), np.arange(6.0).reshape(2, 3) / 2)
    assert halve(t, dtype=object).dtype == object
    # a ufunc method einad lacks, an index tuple among its arguments
    np.testing.assert_array_equal(np.add.reduceat(t[0], (0, 2)), [1.0, 2.0])
    # a function einad lacks, its array given by keyword
    np.testing.assert_array_equal(np.i0(x=t[0]), np.i0(np.arange(3.0)))


def _not_implemented(name):
    return (
        f"^einad does not implement {re.escape(name)} for traced Tensors \\(numpy would drop their "
        "derivative\\): use an einad operation instead$"
    )


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda w: np.isnat(w), "numpy.isnat"),
        (lambda w: np.hypot.reduce(w), "numpy.hypot.reduce"),  # a ufunc method: named with it
        (lambda w: np.i0(w), "numpy.i0"),
        # a traced Tensor only among the keyword arguments
        (lambda w: np.i0(x=w), "numpy.i0"),
    ],
    ids=["ufunc", "ufunc method", "function", "keyword"],
)
def test_numpy_functions_einad_lacks_refuse_traced_tensors(call, name):
    def f(w):
        call(w)
        return w.sum()

    with pytest.raises(TypeError, match=_not_implemented(name)):
        ea.grad(f)(np.array([1.0, 2.0, 3.0]))


# -- in-place operators -------------------------------------------------------------------------


def test_in_place_update_of_a_leaf_that_requires_grad_is_refused_outside_no_grad():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(
        RuntimeError,
        match=re.escape(
            "a leaf tensor that requires grad is being used in an in-place operation (-=): "
            "update parameters inside `with einad.no_grad():`"
        )
        + "$",
    ):
        w -= 1.0
    with ea.no_grad():
        w -= 1.0
    assert w.requires_grad and w.is_leaf
    np.testing.assert_array_equal(w.numpy(), [0.0, 1.0])


def test_in_place_update_of_a_constant_by_a_tensor_that_requires_grad_keeps_the_tensor():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    c = ea.tensor([1.0, 1.0])
    alias = c
    c += w
    assert c is alias  # the same tensor, now computed from w
    assert alias.requires_grad and not alias.is_leaf
    np.testing.assert_array_equal(alias.numpy(), [2.0, 3.0])
    alias.sum().backward()
    np.testing.assert_array_equal(w.grad, [1.0, 1.0])

    d = ea.tensor([1.0, 1.0])
    with pytest.raises(ValueError, match=r"would change the tensor's shape from \(2,\) to \(3, 2\)"):
        d += ea.tensor(np.ones((3, 2)), requires_grad=True)
    np.testing.assert_array_equal(d.numpy(), [1.0, 1.0])


# -- gradients and cotangents the user gives stay in the tensor's library --------------------------


def _other_library(lib):
    if lib.name == "numpy":
        pytest.skip("needs an array library other than numpy")
    return "dask" if lib.name == "dask" else lib.name


def test_a_gradient_or_cotangent_of_another_library_is_a_type_error_naming_both(lib):
    name = _other_library(lib)
    x = ea.tensor(lib.asarray(np.array([1.0, 2.0])), requires_grad=True)
    both = rf"arrays of two libraries in one call: numpy \(ndarray\) and {name} "
    with pytest.raises(TypeError, match=both):
        x.grad = np.ones(2)
    with pytest.raises(TypeError, match=both):
        x.grad = ea.tensor(np.ones(2))  # a Tensor holding a numpy array
    with pytest.raises(TypeError, match=both):
        (x * 1.0).backward(np.ones(2))
    assert x.grad is None


def test_a_numpy_tensor_refuses_a_gradient_of_another_library(lib):
    name = _other_library(lib)
    x = ea.tensor(np.array([1.0, 2.0]), requires_grad=True)
    with pytest.raises(TypeError, match=rf"arrays of two libraries in one call: {name} .* and numpy"):
        x.grad = lib.asarray(np.ones(2))


class Marked(np.ndarray):
    """A subclass of numpy's array, as quimb's qarray (its dense operators) is."""


def test_a_subclass_of_numpys_array_is_a_numpy_array():
    """In every position of every kind of operation, eagerly and traced: einad computes on it as
    on the plain array (np.asarray's view), and its Tensors hold plain arrays."""
    a = np.array([[1.0, -2.0], [0.5, 3.0]])
    m = a.copy().view(Marked)
    x = np.array([[0.3, 0.7], [-1.1, 0.2]])
    for got, want in [
        (ea.exp(m), np.exp(a)),
        (ea.conj(m * 1j), np.conj(a * 1j)),
        (ea.tensor(x) * m, x * a),
        (m * ea.tensor(x), x * a),  # (numpy's operator, then Tensor.__array_ufunc__)
        (-1j * ea.tensor(0.5) * m, -0.5j * a),
        (ea.einsum("ij,jk->ik", m, ea.tensor(x)), a @ x),
        (ea.sum(m, axis=0), a.sum(axis=0)),
        (ea.linalg.inv(m), np.linalg.inv(a)),
    ]:
        assert type(got) is ea.Tensor and type(got.numpy()) is np.ndarray
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-14)
    loss = lambda v: ea.sum(ea.real(ea.exp(1j * v * m)) * v)
    plain = lambda v: ea.sum(ea.real(ea.exp(1j * v * a)) * v)
    assert_close(ea.grad(loss)(x), ea.grad(plain)(x))
    assert_close(ea.jit(ea.grad(loss))(x), ea.grad(loss)(x))
    assert ea.gradcheck(loss, x)


def test_numbers_and_lists_become_arrays_of_the_tensors_library(lib):
    x = ea.tensor(lib.asarray(np.array([1.0, 2.0], dtype=np.float32)), requires_grad=True)
    x.grad = [1, 2]
    assert lib.owns(x.grad) and ea.tensor(x.grad).dtype == np.float32
    np.testing.assert_array_equal(lib.numpy(x.grad), [1.0, 2.0])
    for cotangent in ([3.0, 4.0], [3, 4]):  # integers take the output's dtype, as numpy promotes them
        x.grad = None
        (x * 2.0).backward(cotangent)
        assert lib.owns(x.grad) and ea.tensor(x.grad).dtype == np.float32
        np.testing.assert_array_equal(lib.numpy(x.grad), [6.0, 8.0])


def test_a_gradient_of_a_dtype_the_library_lacks_is_a_type_error_naming_it():
    da = pytest.importorskip("dask.array", reason="dask is not installed (pip install einad[test])")
    x = ea.tensor(da.from_array(np.array([1.0, 2.0], dtype=np.float32)), requires_grad=True)
    with pytest.raises(TypeError, match="has no dtype float16"):  # dask's namespace has no float16
        x.grad = [np.float16(1), np.float16(2)]


def test_a_tensor_staged_by_jit_takes_a_gradient_of_its_library(lib):
    if lib.name == "dask":
        pytest.skip("only the eager libraries are staged here")
    seen = []

    @ea.jit
    def f(x):
        x.grad = [1.0, 2.0]
        seen.append(x.grad)
        x.grad = lib.asarray(np.array([3.0, 4.0]))
        seen.append(x.grad)
        return x * 2.0

    f(lib.asarray(np.array([1.0, 2.0])))
    assert all(lib.owns(g) for g in seen)
    np.testing.assert_array_equal(lib.numpy(seen[0]), [1.0, 2.0])
    np.testing.assert_array_equal(lib.numpy(seen[1]), [3.0, 4.0])


# -- numpy conversion and requires_grad_ --------------------------------------------------------


def test_numpy_conversion_of_a_traced_tensor_is_refused_naming_the_ways_out():
    def f(x):
        np.asarray(x)
        return ea.sum(x)

    message = (
        "^a traced Tensor cannot be converted to a numpy array inside a transformation \\(numpy "
        "functions would silently drop its derivative\\): use einad operations, or "
        "einad.stop_gradient\\(x\\) to take the value without its derivative$"
    )
    with pytest.raises(TypeError, match=message):
        ea.grad(f)(np.ones(2))


def test_a_list_of_traced_tensors_where_an_array_goes_points_to_stack():
    """numpy's habit, ``sum([a, b])``, with einad's functions on traced Tensors: the error says
    to stack them (the message of a single tensor's conversion spoke of einad operations, which
    ea.sum is)."""
    for make in (lambda a: ea.sum([a[0], a[1] * 2.0]), lambda a: a + [a[0], 1.0]):
        with pytest.raises(ea.TracerError, match=r"ea\.stack"):
            ea.grad(lambda a, make=make: ea.sum(make(a)))(np.ones(2))
    assert_close(ea.grad(lambda a: ea.sum(ea.stack([a[0], a[1] * 2.0])))(np.ones(2)), [1.0, 2.0])


def test_numpy_conversion_of_a_constant_tensor_takes_a_dtype_without_copying_when_it_can():
    t = ea.tensor(np.array([1.5, 2.5]))
    as32 = np.asarray(t, dtype=np.float32)
    assert as32.dtype == np.float32
    np.testing.assert_array_equal(as32, [1.5, 2.5])
    assert np.shares_memory(np.asarray(t, dtype=np.float64), np.asarray(t))  # same dtype: no copy


def test_requires_grad_inside_a_transformation_is_refused():
    def f(x):
        x.requires_grad_()
        return ea.sum(x)

    message = (
        "^requires_grad_\\(\\) on a value traced by a transformation \\(einad.grad, jit, ...\\): "
        "the transformation already differentiates its inputs$"
    )
    with pytest.raises(RuntimeError, match=message):
        ea.grad(f)(np.ones(2))


def test_requires_grad_false_on_a_computed_tensor_is_refused():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2.0
    message = (
        "^requires_grad_\\(False\\) on a tensor computed from tensors that require grad: only "
        "leaves can change it; use detach\\(\\) for a constant with this value$"
    )
    with pytest.raises(RuntimeError, match=message):
        h.requires_grad_(False)
    assert h.requires_grad_(True) is h  # no change asked: the tensor itself


def test_a_tensor_built_directly_is_a_constant_unless_asked():
    assert not ea.Tensor([1.0, 2.0]).requires_grad
    assert ea.Tensor([1.0, 2.0], requires_grad=True).requires_grad


# -- declarations ----------------------------------------------------------------------------------
# `core.declare` is the one way what einad knows of a primitive is said (docs/design.md, "How a
# primitive is declared"); it is called at import for einad's own primitives, so a test declares
# one of its own to see each attribute set, the tables read from them, and a structured VJP made
# dense.


class _Doubled(Structured):
    """A cotangent held as half of its dense value."""

    __slots__ = ("half",)

    def __init__(self, half):
        self.half = half

    def dense(self):
        return 2 * self.half


def _structured_vjp(g, ans, vals, params, needed):
    return [_Doubled(g * params["k"] + vals[0] * ans) if needed[0] else None]


def test_declare_sets_each_attribute_the_tables_read_and_makes_a_structured_vjp_dense():
    jvp = lambda tangents, ans, vals, params: tangents[0]
    keep = lambda needed: (needed, False)
    batch = lambda *args: None
    residual = lambda *args: None
    lower = lambda params, shapes: None
    probe = core.Primitive("probe", lambda x, k: x)
    explicit = core.Primitive("probe_explicit", lambda x, k: x)
    dense_vjp = lambda g, ans, vals, params, needed: [g]
    undeclared = (probe.jvp, probe.vjp, probe.keep, probe.batch, probe.residual, probe.lower, probe.aliasing)
    assert undeclared == (None,) * 7
    flags = ("zero_derivative", "linear", "elementwise", "commutative", "zero_at_zero", "accepts_out")
    assert all(getattr(probe, f) is False for f in (*flags, "program_only"))
    with pytest.raises(ValueError, match="a primitive named 'probe' exists already: a program names"):
        core.Primitive("probe", lambda x: x)
    declared = core.declare(
        probe,
        jvp=jvp,
        keep=keep,
        batch=batch,
        residual=residual,
        structured_vjp=_structured_vjp,
        lower=lower,
        aliasing="view",
        **dict.fromkeys(flags, True),
    )
    assert declared is probe
    assert (probe.jvp, probe.keep, probe.batch, probe.residual, probe.lower) == (
        jvp,
        keep,
        batch,
        residual,
        lower,
    )
    assert probe.structured_vjp is _structured_vjp and probe.aliasing == "view"
    assert all(getattr(probe, f) is True for f in flags) and probe.program_only is False
    # the tables are read-only views of the declarations
    assert core.structured_vjp_rules[probe] is _structured_vjp and core.lower_rules[probe] is lower
    assert core.jvp_rules[probe] is jvp and core.keep_rules[probe] is keep
    assert core.batch_rules[probe] is batch and core.residual_rules[probe] is residual
    assert probe in core.zero_derivative and probe not in core.program_only
    assert probe in list(core.jvp_rules) and len(core.jvp_rules) == len(list(core.jvp_rules))
    assert not hasattr(core.jvp_rules, "__setitem__") and "probe" not in core.jvp_rules
    g, ans, x = np.array([1.0, 2.0]), np.array([3.0, 5.0]), np.array([7.0, 11.0])
    (c,) = core.vjp_rules[probe](g, ans, [x], {"k": 10.0}, [True])
    np.testing.assert_array_equal(c, 2 * (10.0 * g + x * ans))  # dense, from every argument
    assert probe.vjp(g, ans, [x], {"k": 10.0}, [False]) == [None]
    # a primitive with both keeps its own plain VJP, and declares nothing it was not given
    core.declare(explicit, vjp=dense_vjp, structured_vjp=_structured_vjp, aliasing="fresh")
    assert core.vjp_rules[explicit] is dense_vjp
    for table in (core.jvp_rules, core.keep_rules, core.batch_rules, core.residual_rules, core.lower_rules):
        assert explicit not in table
        with pytest.raises(KeyError) as missing:
            table[explicit]
        assert missing.value.args == (explicit,)
    assert explicit not in core.zero_derivative and explicit in list(core.vjp_rules)
    assert all(getattr(explicit, f) is False for f in (*flags, "program_only"))  # the defaults
    # a table is keyed by primitives only: another object with the attribute is not in it
    assert namedtuple("Impostor", "jvp")(jvp) not in core.jvp_rules
    linear = core._Declared("linear")
    assert probe in linear and explicit not in linear and core.primitives["einsum"] in linear
    assert explicit.result_aliasing({}, 1) == "fresh"


def test_declare_refuses_a_second_declaration_and_an_unknown_aliasing_kind():
    probe = core.Primitive("probe_twice", lambda x: x)
    with pytest.raises(ValueError, match="aliasing is one of 'fresh', 'view', 'may_view', got 'copy'"):
        core.declare(probe, aliasing="copy")
    assert probe.aliasing is None  # nothing was declared
    with pytest.raises(TypeError, match="the primitive 'probe_twice' declares no aliasing kind"):
        probe.result_aliasing({}, 1)
    core.declare(probe, aliasing=lambda params, n: "fresh" if params["copy"] else "view")
    assert probe.result_aliasing({"copy": True}, 1) == "fresh"
    assert probe.result_aliasing({"copy": False}, 1) == "view"
    with pytest.raises(ValueError, match="the primitive 'probe_twice' is declared already"):
        core.declare(probe, aliasing="fresh")
    assert probe.result_aliasing({"copy": False}, 1) == "view"  # the first declaration stands


def test_export_names_an_operation_once():
    def probe_op(x):
        return x

    try:
        assert core.export(numpy=np.fix)(probe_op) is probe_op
        assert core.exported["probe_op"] == (probe_op, np.fix)
        with pytest.raises(ValueError, match="an operation named 'probe_op' is exported already"):
            core.export()(probe_op)
        assert core.exported["probe_op"] == (probe_op, np.fix)
    finally:
        core.exported.pop("probe_op", None)


def test_as_array_converts_keeps_the_library_and_copies_only_when_asked(lib):
    """`core.as_array`: an array of any library (or a Tensor of one) stays of that library;
    `dtype` converts it; `copy` makes an independent array, and without it the array itself
    is returned (no copy); a non-numeric input is refused naming its type and dtype."""
    x = np.arange(6.0).reshape(2, 3)
    a = lib.asarray(x)
    assert core.as_array(a) is a
    for data in (a, ea.tensor(a)):
        got = core.as_array(data, dtype=np.float32)
        assert lib.owns(got) and got.dtype == lib.asarray(x.astype(np.float32)).dtype
        np.testing.assert_array_equal(lib.numpy(got), x)
    if lib.name in ("numpy", "torch"):  # libraries with writable arrays: the copy is independent
        c = core.as_array(a, copy=True)
        assert c is not a
        c[0, 0] = 7.0
        assert lib.numpy(a)[0, 0] == 0.0
    with pytest.raises(TypeError, match=r"got ndarray with dtype <U1"):
        core.as_array(np.array(["a"]))


def test_a_trace_takes_the_level_it_is_given_or_the_next_one():
    """The imperative trace is made at import with level 0, below every transformation; a trace
    given no level takes the next one. Kills: Trace.__init__ 3 (the level given ignored)"""
    assert core.Trace(level=0).level == 0 and core.IMPERATIVE.level == 0
    a, b = core.Trace(), core.Trace()
    assert 0 < a.level < b.level


def test_a_mapped_value_read_as_a_number_says_each_example_has_its_own():
    message = (
        r"^a value mapped by vmap \(<batch trace \d+>\) was read as a Python number \(bool, float, int, "
        r"item\): each example has its own value. Write the choice with ea.where$"
    )
    for read in (float, int, bool, lambda x: x.item()):
        with pytest.raises(ea.TracerError, match=message):
            ea.vmap(read)(np.ones(2))


def test_a_node_holds_what_it_was_made_with():
    """`core.Node`: the operation, its parameters, parent nodes, kept values and answer as
    given; `needed` worked out from the parents (a parent that is a node needs a cotangent)
    unless given; no Tensor or hooks yet; a creation number above its parents'."""
    parent = core.leaf_node()
    prim = core.Primitive("node_test_identity", lambda x: x)
    params, vals, ans = {"k": 1}, [np.ones(2), np.zeros(2)], np.arange(2.0)
    node = core.Node(prim, params, (parent, None), vals, ans)
    assert node.prim is prim and node.params is params and node.parents == (parent, None)
    assert node.vals is vals and node.ans is ans
    assert node.needed == [True, False]
    assert node.tensor is None and node.hooks is None
    assert node.seq > parent.seq
    given = core.Node(prim, params, (parent, None), vals, ans, needed=[False, False])
    assert given.needed == [False, False] and given.seq > node.seq


def test_a_leaf_node_is_an_input_of_no_operation():
    """`core.leaf_node` (an imperative leaf's node, `requires_grad_`) and the leaves `core.box`
    makes for a reverse trace are alike: no operation, parameters, parents, values or answer,
    nothing needed, no Tensor or hooks, numbered in creation order."""
    first = core.leaf_node()
    x = ea.tensor(np.ones(3), requires_grad=True)
    with core.ReverseTrace() as trace:
        boxed = core.box(np.ones(3), trace)
    for node in (first, x._node, boxed._node):
        assert type(node) is core.Node
        assert node.prim is None and node.params is None and node.ans is None
        assert node.parents == () and node.vals == () and node.needed == []
        assert node.hooks is None
    assert first.tensor is None and x._node.tensor() is x and boxed._node.tensor is None
    assert first.seq < x._node.seq < boxed._node.seq
    tangent = np.zeros(3)
    with core.ForwardTrace() as forward:  # a forward trace's input: a primal, no graph node
        primal = core.box(np.ones(3), forward, tangent)
    assert primal._node is None and primal._tangent is tangent and primal._trace is forward


def test_the_meta_of_a_nested_tensor_over_numpy_is_made_without_its_constructor(monkeypatch):
    """`core._meta` walks a Tensor's layers down to its numpy value and makes the Meta there (a
    second order's nodes make one per value they do not keep): the shape and dtype of the
    value, less one leading axis per batched layer; the generic `Meta(v)` only for values of
    other kinds. Observed by counting `Meta.__init__` calls."""
    calls = []
    real = core.Meta.__init__

    def counted(self, v):
        calls.append(v)
        real(self, v)

    monkeypatch.setattr(core.Meta, "__init__", counted)
    x = np.ones((2, 3), np.float32)
    with core.ReverseTrace() as outer:
        inner = core.box(core.box(x, outer), core.ReverseTrace())
        m = core._meta(inner)
    assert (m.shape, m.dtype) == ((2, 3), np.float32) and calls == []
    m = core._meta(core.box(np.float64(2.0), outer))
    assert (m.shape, m.dtype) == ((), np.float64) and calls == []
    m = core._meta(3.0)  # a Python number: the generic path
    assert m.shape == () and len(calls) == 1


def test_a_node_keeps_what_its_vjp_does_not_read_as_metas_made_in_place(monkeypatch):
    """`record` keeps, of the values a node's VJP does not read (its keep rule's answer), only
    their shape and dtype: a `Meta`, made in place for a numpy array or scalar and for a
    nested transformation's Tensor over one (no `_meta`, no `Meta.__init__`: every recorded
    operation comes through here), by `_meta` for another library's array. Observed: the
    node's Metas, and the calls counted."""
    torch = pytest.importorskip("torch", reason="the generic path is shown on a torch tensor")
    metas, inits = [], []
    real_meta, real_init = core._meta, core.Meta.__init__

    def init(self, v):
        inits.append(v)
        real_init(self, v)

    monkeypatch.setattr(core, "_meta", lambda v: metas.append(v) or real_meta(v))
    monkeypatch.setattr(core.Meta, "__init__", init)
    x, y = np.arange(3.0, dtype=np.float32), np.full(3, 2.0, np.float32)

    def kept(node):  # (shape, dtype) of what a node keeps as a Meta, its result last
        return [(v.shape, np.dtype(v.dtype)) for v in (*node.vals, node.ans) if type(v) is core.Meta]

    with core.ReverseTrace() as t:
        product = core.box(x, t) * y  # the VJP reads y, not x or the product
        total = core.box(np.float32(2.0), t) + y  # reads neither operand nor the sum
    assert kept(product._node) == [((3,), np.float32)] * 2
    assert kept(total._node) == [((), np.float32), ((3,), np.float32), ((3,), np.float32)]
    with core.ReverseTrace() as outer, core.ReverseTrace() as inner:
        nested = core.box(core.box(x, outer), inner) * y  # a second order's node
        both = core.box(core.box(x, outer), inner) + core.box(core.box(y, outer), inner)
    assert type(nested._value) is core.Tensor
    assert kept(nested._node) == [((3,), np.float32)] * 2
    assert kept(both._node) == [((3,), np.float32)] * 3
    assert metas == [] and inits == []
    with core.ReverseTrace() as t:
        other = core.box(torch.arange(3.0), t) * torch.full((3,), 2.0)
    assert kept(other._node) == [((3,), np.float32)] * 2
    assert len(metas) == 2  # another library's values: the generic path


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_derivative_rules_reuse_the_quiet_error_state(monkeypatch, mode):
    """A derivative rule runs under numpy's error state with every error ignored, made from the
    state around it once and kept (`core._quiet_memo`): inline around each JVP rule
    (`ForwardTrace.process`), by the outermost `QuietRules` entry around each VJP rule
    (`_quiet_state`). A pass of many operations makes it once, not once per rule (numpy's
    `np.errstate` would make it anew at each entry); under another state around it, once more."""
    made = []
    real = core._make_extobj
    monkeypatch.setattr(core, "_make_extobj", lambda **kw: made.append(kw) or real(**kw))
    monkeypatch.setattr(core, "_quiet_memo", (None, None))

    def f(x):
        for _ in range(5):
            x = ea.sin(x) * 2.0 + ea.exp(-x)
        return ea.sum(x)

    def run():
        if mode == "forward":
            return ea.jvp(f, (np.ones(3),), (np.ones(3),))[1]
        return ea.grad(f)(np.ones(3))

    first = run()
    assert made == [{"all": "ignore"}]
    with np.errstate(over="raise"):  # another state around: made anew from it, once
        np.testing.assert_array_equal(run(), first)
        run()
    assert len(made) == 2


def test_quiet_rules_silence_numpy_and_only_the_outermost_entry_sets_the_state(monkeypatch):
    """Inside `QuietRules` numpy raises and warns about nothing (a rule's masked branch, a
    rightly infinite derivative), whatever the state around it; leaving restores that state.
    Re-entrant: only the outermost entry sets numpy's error state (counted)."""
    calls = []
    real = core._quiet_state
    monkeypatch.setattr(core, "_quiet_state", lambda: calls.append(1) or real())
    one, zero = np.float64(1.0), np.float64(0.0)
    with np.errstate(all="raise"):
        with core.QuietRules():
            assert one / zero == np.inf
            with core.QuietRules():
                assert np.log(zero) == -np.inf
            assert np.isnan(zero / zero)
        with pytest.raises(FloatingPointError):
            one / zero  # (the state around it, back)
    assert len(calls) == 1


def test_a_trace_is_alive_until_its_transformation_returns():
    """A new trace is not dead (`dead` is False, a bool), and leaving its context marks it dead."""
    with core.ReverseTrace() as t:
        assert t.dead is False and t.level > 0
    assert t.dead is True


def test_a_reverse_trace_runs_a_plain_operation_by_its_implementation(monkeypatch):
    """`ReverseTrace.process` of an operation whose operands are no other transformation's
    values runs the primitive's implementation itself: `bind` again (the dispatch through
    every trace, for the same value) only when an operand is itself traced (a nested
    transformation). Observed by counting the `bind` calls the trace makes."""
    prim = core.declare(
        core.Primitive("process_test_square", np.square),
        vjp=lambda g, ans, vals, params, needed: [2.0 * g * vals[0]],
        aliasing="fresh",
    )
    real = core.bind
    seen = []

    def counted(p, args, params):
        seen.append(p.name)
        return real(p, args, params)

    x = np.array([1.0, -2.0, 3.0])
    with core.ReverseTrace() as trace:
        t = core.box(x, trace)
        monkeypatch.setattr(core, "bind", counted)
        out = trace.process(prim, [t], {})
        monkeypatch.setattr(core, "bind", real)
    assert seen == [] and out._trace is trace
    np.testing.assert_array_equal(out._value, x**2)
    with core.ReverseTrace() as outer:
        nested = core.box(core.box(x, outer), core.ReverseTrace())
        monkeypatch.setattr(core, "bind", counted)
        out = nested._trace.process(prim, [nested], {})
        monkeypatch.setattr(core, "bind", real)
    assert seen == ["process_test_square"]  # the value beneath is the outer trace's: bound there
    np.testing.assert_array_equal(out._value._value, x**2)


def test_floor_division_divmod_and_round_on_tensors_as_numpy():
    """Python's //, divmod and round() on Tensors (TypeErrors before), as numpy's arrays give
    them: floor division exact where numpy's is (5.3 // 0.1 is 52), integers for integers, and
    no derivative through the quotient."""
    x = np.array([7.5, -2.5, 3.0, 5.3])
    t = ea.tensor(x)
    np.testing.assert_array_equal(t // 2.0, x // 2.0)
    np.testing.assert_array_equal(10.0 // t, 10.0 // x)
    np.testing.assert_array_equal(t // 0.1, x // 0.1)
    q, r = divmod(t, 2.0)
    np.testing.assert_array_equal(q, x // 2.0)
    np.testing.assert_array_equal(r, x % 2.0)
    np.testing.assert_array_equal(divmod(3.0, t)[0], 3.0 // x)
    i = np.array([7, -3, 9])
    got = ea.tensor(i) // 2
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, i // 2)
    np.testing.assert_array_equal(round(t), np.round(x))
    np.testing.assert_array_equal(round(t, 1), np.round(x, 1))
    np.testing.assert_allclose(ea.grad(lambda a: ea.sum(a // 2.0 + a))(x), np.ones(4))  # the quotient is flat
    np.testing.assert_array_equal(ea.jit(lambda a: a // 0.7)(x), x // 0.7)
