"""einad.rules.shape: reshape, expand_dims, squeeze, flip, astype, stop_gradient, Tensor
attributes, and indexing (x[...], its scatter gradient, and the x.at[...] updates built on it):
values against numpy, gradients against central differences, float32 kept, batched without a
loop; and on every array library (`lib`): numpy's index semantics, results of the input's
library, dask lazy, torch gradients equal to torch.autograd's."""

import math
import re

import numpy as np
import pytest

import einad as ea
from einad.core import Primitive, bind, keep_rules
from einad.rules import shape
from einad.transforms.batching import vmap
from einad.util import raw, shape_of, wrap
from tests.support import op_table
from tests.support.arraylibs import load
from tests.support.checks import (
    case_params,
    check_case,
    check_lib,
    cotangent_probe,
    family,
    forget_rules,
    lib_value,
    np_add,
    np_set,
    np_ufunc_at,
)
from tests.support.numerics import assert_close, peak_bytes
from tests.support.op_table import normal

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

A = np.random.default_rng(8).standard_normal((2, 3, 4))
B = np.random.default_rng(9).standard_normal((2, 2, 4))
A_MASK = A > 0

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4))
MASK = X > 0
IDX2 = np.array([[1, 1], [0, 3]])
ROW_MASK = np.array([True, False, True])
NO_INDEX = np.zeros(0, dtype=np.int64)


# name: (f(m, *args) written once for m = einad and m = numpy, args)
SHAPE = {
    "reshape": (lambda m, x: m.reshape(x, (4, -1)), (A,)),
    "reshape int": (lambda m, x: m.reshape(x, 24), (A,)),
    "reshape ones beside -1": (lambda m, x: m.reshape(x, (1, 2, 1, -1)), (A,)),
    "reshape method": (lambda m, x: x.reshape(4, 6), (A,)),
    "reshape method tuple": (lambda m, x: x.reshape((6, 4)), (A,)),
    "expand_dims": (lambda m, x: m.expand_dims(x, 1), (A,)),
    "expand_dims negative tuple": (lambda m, x: m.expand_dims(x, (0, -1)), (A,)),
    "squeeze all": (lambda m, x: m.squeeze(x), (A[:1, :, :1],)),
    "squeeze axis": (lambda m, x: m.squeeze(x, 2), (A[:1, :, :1],)),
    "squeeze method": (lambda m, x: x.squeeze(0), (A[:1, :, :1],)),
    "flip all": (lambda m, x: m.flip(x), (A,)),
    "flip axis": (lambda m, x: m.flip(x, 1), (A,)),
    "flip axes": (lambda m, x: m.flip(x, (0, -1)), (A,)),
    "getitem basic": (lambda m, x: x[1, :, ::2], (A,)),
    "getitem ellipsis": (lambda m, x: x[..., -1], (A,)),
    "getitem newaxis": (lambda m, x: x[None, 0, 1:], (A,)),
    "getitem negative step": (lambda m, x: x[:, ::-2], (A,)),
    "getitem integer array": (lambda m, x: x[:, np.array([0, 2, 2, 1, 0])], (A,)),
    "getitem list": (lambda m, x: x[[1, 1, 0]], (A,)),
    "getitem two arrays": (lambda m, x: x[np.array([0, 1, 1]), np.array([2, 2, 0])], (A,)),
    "getitem array and slice": (lambda m, x: x[np.array([[0, 1], [1, 1]]), 1:], (A,)),
    "getitem boolean mask": (lambda m, x: x[A_MASK], (A,)),
}


@both_modes
@pytest.mark.parametrize(
    ("check", "name"),
    case_params(SHAPE, float32=["reshape", "flip all", "getitem integer array", "expand_dims"]),
)
def test_shape_op(check, name):
    check(*SHAPE[name])


def test_squeeze_and_expand_dims_refusals_are_numpys_errors_naming_the_problem():
    """squeeze of an axis not of size 1 is a ValueError naming the axis and its size; expand_dims
    without an axis a TypeError saying what an axis must be: numpy's exceptions, clearer words."""
    for f, args, error, message in (
        ("squeeze", (A[:1], 1), ValueError, "^squeeze: axis 1 has size 3, not 1$"),
        (
            "expand_dims",
            (A, None),
            TypeError,
            "^expand_dims: axis must be an integer or a tuple of integers, not None$",
        ),
    ):
        with pytest.raises(error):
            getattr(np, f)(*args)
        with pytest.raises(error, match=message):
            getattr(ea, f)(*args)


# (shape, einad's message) for reshaping A (24 elements)
RESHAPE_REFUSALS = [
    ((-1, -1), "invalid shape (-1, -1): at most one -1 and no other negative size"),
    ((2, -2), "invalid shape (2, -2): at most one -1 and no other negative size"),
    ((0, -1), "cannot reshape an array of size 24 into shape (0, -1)"),
    ((5, -1), "cannot reshape an array of size 24 into shape (5, -1)"),
    ((5, 5), "cannot reshape an array of size 24 into shape (5, 5)"),
    ((2**64,), f"cannot reshape an array of size 24 into shape ({2**64},)"),  # beyond int64
]


def test_reshape_refusals_are_value_errors_naming_the_shape():
    """A shape the size does not fit, two -1s or another negative size is a ValueError naming the
    array's size and the shape asked for (numpy refuses the same, but for other negative sizes,
    which it reads as -1); an empty array leaves a -1 beside a 0 undetermined. A size beyond
    int64 is no OverflowError: the sizes are multiplied exactly.
    Kills: _resolve_shape (its checks, their messages)."""
    for new_shape, message in RESHAPE_REFUSALS:
        if new_shape != (2, -2):
            with pytest.raises(ValueError):
                np.reshape(A, new_shape)
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            ea.reshape(A, new_shape)
    with pytest.raises(ValueError, match=re.escape("array of size 0 into shape (0, -1)")):
        ea.reshape(np.ones((0, 3)), (0, -1))


@pytest.mark.parametrize(
    "shape, new",
    [
        ((2, 3, 4), (4, 6)),
        ((2, 3, 4), (-1, 2)),
        ((6, 4), (2, 3, 2, 2)),
        ((3,), (3, 1)),
        ((), (1, 1)),
        ((0, 3), (3, -1)),
    ],
)
def test_reshape_in_fortran_order_as_numpy_in_every_mode(shape, new):
    """numpy's and JAX's ``order="F"`` (a TypeError before): the elements read and placed column
    by column, through ea.reshape, the method, ea.ravel, Tensor.ravel and numpy's functions;
    differentiable (the gradient is the F-order reshape back), staged and mapped."""
    x = np.arange(1.0, math.prod(shape) + 1).reshape(shape)
    want = np.reshape(x, new, order="F")
    assert_close(ea.reshape(x, new, order="F"), want)
    assert_close(ea.tensor(x).reshape(*new, order="F"), want)
    assert_close(np.reshape(ea.tensor(x), new, order="F"), want)
    assert_close(ea.jit(lambda a: ea.reshape(a, new, order="F"))(x), want)
    assert_close(ea.ravel(x, order="F"), np.ravel(x, order="F"))
    assert_close(np.ravel(ea.tensor(x), "F"), np.ravel(x, order="F"))
    assert_close(ea.tensor(x).ravel("F"), np.ravel(x, order="F"))
    ct = np.arange(want.size, dtype=float).reshape(want.shape) ** 2
    g = ea.grad(lambda a: ea.sum(ea.reshape(a, new, order="F") * ct))(x)
    assert_close(g, np.reshape(ct, shape, order="F"))
    _, t = ea.jvp(lambda a: ea.reshape(a, new, order="F"), (x,), (x**2,))
    assert_close(t, np.reshape(x**2, new, order="F"))
    mapped = ea.vmap(lambda a: ea.reshape(a, new, order="F"))(np.stack([x, -x]))
    assert_close(mapped[1], -want)


def test_reshape_orders_other_than_c_and_f():
    with pytest.raises(NotImplementedError, match="order='A' is not offered"):
        ea.reshape(A, (4, 6), order="A")
    with pytest.raises(ValueError, match="order is one of 'C', 'F' or 'A', got 'X'"):
        ea.tensor(A).reshape(4, 6, order="X")
    assert_close(ea.reshape(A, (4, -1), order="C"), A.reshape(4, -1))


def test_a_reshape_to_the_arrays_own_shape_is_no_operation():
    """Asking for the shape an array has (with one size given as -1) returns the array itself: no
    reshape is computed, and none is recorded for the gradient.
    Kills: _resolve_shape leaving the -1 in the shape (then it differs from the array's)."""
    assert raw(ea.reshape(A, (2, 3, -1))) is A
    assert raw(ea.reshape(A, (-1, 3, 4))) is A


@both_modes
def test_cotangents_reach_a_value_in_its_dtype():
    """grad seeds the reverse pass with a one of the output's dtype, and astype's VJP casts the
    cotangent back to the dtype of its operand: a float32 value receives float32 cotangents (and
    the backward pass computes in float32) even when the computation after it is in float64.
    Kills: ones_like's dtype (float64 seed); _astype_back casting to float64."""
    x32 = np.array([0.5, -1.0, 2.0], dtype=np.float32)
    probe, seen = cotangent_probe()
    g = ea.grad(lambda x: probe(ea.sum(x)))(x32)
    assert seen == [np.float32]
    np.testing.assert_array_equal(g, np.ones(3, np.float32), strict=True)
    probe, seen = cotangent_probe()
    g = ea.grad(lambda x: ea.sum(ea.sin(probe(x).astype(np.float64))))(x32)
    assert seen == [np.float32]
    assert_close(g, np.cos(x32.astype(np.float64)).astype(np.float32), rtol=1e-6)


@both_modes
def test_a_cast_to_integers_has_derivative_zero_as_in_jax():
    """x.astype(int) moves in steps: its gradient and tangent are zero (JAX's convert_element_type),
    never the float cotangent truncated to an integer (which gave [0, 0, 1] here).
    Kills: astype without the stop_gradient before an integer or boolean cast."""
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.3, -0.7, 1.1])
    f = lambda x: ea.sum(x.astype(np.int64) * w) + ea.sum(x.astype(bool) * x)
    np.testing.assert_array_equal(ea.grad(f)(x), np.ones(3))  # only the second factor x
    _, t = ea.jvp(lambda x: x.astype(np.int32) * w, (x,), (np.ones(3),))
    np.testing.assert_array_equal(t, np.zeros(3))


def test_checking_an_index_costs_a_byte_per_selected_element():
    """getitem and x.at[...] let numpy check the index on a zero-memory int8 stand-in of the array:
    where numpy must copy (an integer-array index), the copy is one byte per selected element, so
    indexing an int8 array peaks at about twice its result (the result, the check's copy).
    Kills: _ghost's int8 (a float64 stand-in: 8 bytes per element, a peak of 9 results; 2.0 with int8)."""
    x = np.zeros((1000, 1000), dtype=np.int8)
    rows = np.arange(1000)
    for f in (lambda x: ea.tensor(x)[rows], lambda x: ea.tensor(x).at[rows].add(1)):
        peak = peak_bytes(f, x) / x.nbytes
        assert peak < 4, f"peak {peak:.2f} times the result"


def test_linear_enters_a_linear_primitives_rules():
    """`_linear(prim, transpose, apply)`, called here on a primitive of the test's own (a reshape
    scaled by k): the VJP is `transpose` of the cotangent (closed form: reshaped back and scaled),
    the JVP is `apply` of the tangent, and the VJP reads no value (only shapes and dtypes).

    Kills: _linear (the rules it enters; those of reshape, astype, getitem run at import)."""
    probe = Primitive("scaled_reshape", lambda x, shape, k: np.reshape(x, shape) * k)
    shape._linear(
        probe,
        lambda g, x, p: shape.reshape_raw(g, shape_of(x)) * p["k"],
        lambda t, p: shape.reshape_raw(t, p["shape"]) * p["k"],
        aliasing="may_view",
        batch=shape._batch_reshape,
    )
    assert probe.linear and probe.aliasing == "may_view" and probe.batch is shape._batch_reshape
    x, u, t = A, np.random.default_rng(4).standard_normal((6, 4)), A[::-1] + 1.0
    params = {"shape": (6, 4), "k": 3.0}

    def f(v):
        return wrap(bind(probe, (v,), params))

    with forget_rules(probe):
        value, pullback = ea.vjp(f, x)
        (g,) = pullback(u)
        _, tangent = ea.jvp(f, (x,), (t,))
        assert_close(value, 3.0 * x.reshape(6, 4))
        assert_close(g, 3.0 * u.reshape(x.shape))
        assert_close(tangent, 3.0 * t.reshape(6, 4))
        assert keep_rules[probe]([True]) == ((False,), False)


@both_modes
def test_integer_array_indexing_accumulates_repeated_indices():
    x = np.arange(4.0)
    g = ea.grad(lambda x: ea.sum(x[np.array([0, 0, 2, 0, 3])]))(x)
    assert_close(g, [3.0, 0.0, 1.0, 1.0])
    g = ea.grad(lambda x: ea.sum(x[[1, 1]] * np.array([2.0, 5.0])))(x)
    assert_close(g, [0.0, 7.0, 0.0, 0.0])
    m = np.arange(6.0).reshape(2, 3)
    g = ea.grad(lambda m: ea.sum(m[np.array([0, 0, 1]), np.array([2, 2, 0])]))(m)
    assert_close(g, [[0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])


@both_modes
def test_basic_indexing_gradient_is_a_scatter():
    x = np.arange(6.0).reshape(2, 3)
    g = ea.grad(lambda x: ea.sum(x[1, 1:] * np.array([2.0, 3.0])))(x)
    assert_close(g, [[0.0, 0.0, 0.0], [0.0, 2.0, 3.0]])
    g = ea.grad(lambda x: x[0, 2] * x[0, 2])(x)
    assert_close(g, [[0.0, 0.0, 4.0], [0.0, 0.0, 0.0]])


@both_modes
def test_iterating_a_tensor_is_differentiable():
    x = np.array([1.0, 2.0, 3.0])
    g = ea.grad(lambda x: sum(xi * xi for xi in x))(x)
    assert_close(g, 2 * x)


# -- stop_gradient and Tensor attributes -------------------------------------------------------------------


@both_modes
def test_stop_gradient():
    x = np.array([1.0, -2.0, 3.0])
    assert_close(ea.stop_gradient(x).numpy(), x)
    assert isinstance(ea.stop_gradient(x), ea.Tensor)
    assert_close(ea.grad(lambda x: ea.sum(ea.stop_gradient(x)))(x), np.zeros(3))
    assert_close(ea.grad(lambda x: ea.sum(ea.stop_gradient(x) * x))(x), x)  # not 2x
    # Nested: the inner gradient is stop_gradient(y) * x at y = x, and stop_gradient stops the
    # outer derivative too, so the outer gradient is x (not 2x, nor 4x without stop_gradient).
    f = lambda x: ea.sum(ea.grad(lambda y: ea.sum(ea.stop_gradient(y) * y * x))(x))
    assert_close(ea.grad(f)(x), x)


@both_modes
def test_tensor_attributes():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    t = ea.tensor(x)
    assert t.shape == (2, 3) and t.ndim == 2 and t.size == 6 and t.dtype == np.float32
    assert isinstance(t.numpy(), np.ndarray)
    np.testing.assert_array_equal(np.asarray(t), x)
    np.testing.assert_array_equal(t.T.numpy(), x.T)
    assert ea.tensor([1.0]).dtype == np.float64
    assert ea.tensor([1, 2], dtype=np.float32).dtype == np.float32


# -- x.at[...]: one table, every check -----------------------------------------------------


ROWS = np.array([2, 0, 2])  # a repeated row: set keeps the last write, add adds twice


def _ufunc_row(method, ufunc, index, v_shape, complex_ok, x=normal, shift=0.0):
    """An EVERYDAY row for ``x.at[index].<method>(v)`` against numpy's ``ufunc.at`` on a copy."""
    return (
        lambda a, v: getattr(a.at[index], method)(v),
        lambda a, v: np_ufunc_at(ufunc, a, index, v),
        lambda dt: (x(dtype=dt), normal(v_shape, dtype=dt) + shift),
        complex_ok,
    )


# name: (einad function, numpy reference, arguments maker (dtype -> args), complex inputs allowed)
EVERYDAY = {
    "at_set": (
        lambda x, v: x.at[ROWS].set(v),
        lambda x, v: np_set(x, ROWS, v),
        lambda dt: (normal(dtype=dt), normal((3, 4), dtype=dt)),
        True,
    ),
    "at_set_slice": (
        lambda x, v: x.at[1:, ::2].set(v),
        lambda x, v: np_set(x, (slice(1, None), slice(None, None, 2)), v),
        lambda dt: (normal(dtype=dt), normal((2,), dtype=dt)),
        True,
    ),
    "at_add": (
        lambda x, v: x.at[ROWS, 1].add(v),
        lambda x, v: np_add(x, (ROWS, 1), v),
        lambda dt: (normal(dtype=dt), normal((3,), dtype=dt)),
        True,
    ),
    # JAX's other updates, each applied in turn where an index repeats (numpy's ufunc.at)
    "at_multiply": _ufunc_row("multiply", np.multiply, ROWS, (3, 4), True),
    "at_divide": _ufunc_row("divide", np.divide, (ROWS, slice(1, None)), (3, 3), True, shift=3.0),
    "at_power": _ufunc_row(
        "power", np.power, ROWS, (4,), False, x=lambda dtype: np.abs(normal(dtype=dtype)) + 0.5
    ),
    "at_min": _ufunc_row("min", np.minimum, ROWS, (3, 4), False),
    "at_max": _ufunc_row("max", np.maximum, (slice(None, None, 2), ROWS), (2, 3), False),
    "at_apply": (
        lambda x: x.at[ROWS].apply(ea.sin),
        lambda x: np_ufunc_at(np.sin, x, ROWS),
        lambda dt: (normal(dtype=dt),),
        True,
    ),
}


@both_modes
@pytest.mark.parametrize(("check", "name"), op_table.cases(EVERYDAY))
def test_everyday(check, name):
    check(EVERYDAY[name])


@both_modes
def test_at_set_with_repeated_indices_keeps_the_last_write():
    x = np.zeros(4)
    out = ea.tensor(x).at[np.array([1, 1, 3])].set(np.array([5.0, 6.0, 7.0]))
    want = np.zeros(4)
    want[[1, 1, 3]] = [5.0, 6.0, 7.0]
    np.testing.assert_array_equal(out.numpy(), want)
    gx, gv = ea.grad(lambda x, v: ea.sum(x.at[np.array([1, 1, 3])].set(v) * np.arange(4.0)), (0, 1))(
        np.ones(4), np.ones(3)
    )
    assert_close(gx, [0.0, 0.0, 2.0, 0.0])
    assert_close(gv, [0.0, 1.0, 3.0])


@both_modes
def test_at_leaves_the_input_untouched_and_checks_the_index():
    x = ea.tensor(np.arange(4.0))
    x.at[0].set(9.0)
    x.at[1].add(9.0)
    np.testing.assert_array_equal(x.numpy(), np.arange(4.0))
    assert x.at[2].get().numpy() == 2.0
    with pytest.raises(IndexError):
        x.at[7].set(1.0)
    with pytest.raises(ValueError):
        x.at[:2].set(np.ones(3))
    with pytest.raises(TypeError, match="complex"):
        x.at[0].set(1j)
    x32 = ea.tensor(np.arange(4.0, dtype=np.float32))
    with pytest.raises(TypeError, match="^cannot write complex values into a tensor of dtype float32$"):
        x32.at[1:3].add(np.array([1.0, 1j]))  # not the real part


@pytest.mark.parametrize("other", ["numpy", "array_api_strict", "torch", "dask"])
@pytest.mark.parametrize("method", ["set", "add"])
def test_at_refuses_a_value_of_another_library_naming_both(lib, other, method):
    """``x.at[i].set(v)`` with `v` of another library than `x`'s is a TypeError naming both, as
    every other operation's. It was not checked: a numpy `x` took an array-api-strict `v` (numpy
    result) or a dask one (a dask result), a torch `x` a numpy `v`, and the other pairs failed
    inside the libraries ("Expected Array or Python scalar", "unsupported operand type(s)")."""
    if other == lib.name:
        pytest.skip("one library")
    found = load(other)
    if found is None:
        pytest.skip(f"{other} is not installed")
    x = ea.tensor(lib.asarray(np.zeros((2, 3))))
    v = found.asarray(np.ones(3))
    with pytest.raises(
        TypeError, match=rf"(?s)arrays of two libraries.*({lib.name}.*{other}|{other}.*{lib.name})"
    ):
        getattr(x.at[0], method)(v)
    # of its own library, or a number: taken (numpy's assignment)
    check_lib(lib, getattr(x.at[0], method)(lib.asarray(np.ones(3))), np_set(np.zeros((2, 3)), 0, 1.0))
    check_lib(lib, getattr(x.at[1], method)(2.0), np_set(np.zeros((2, 3)), 1, 2.0))


@pytest.mark.parametrize("method", ["multiply", "divide", "power", "min", "max", "apply"])
def test_the_other_updates_on_every_library_apply_in_turn_at_a_repeated_index(lib, method):
    """JAX's `.multiply` ... `.apply` on each library: a place named twice is updated twice, as
    numpy's ``ufunc.at`` does, and the gradient goes to each write (a round each, gathered and
    written); the value keeps `x`'s library and dtype."""
    x = np.abs(RNG.standard_normal((4, 3))) + 0.5
    v = np.abs(RNG.standard_normal((3, 3))) + 0.5
    rows = np.array([1, 3, 1])
    ufunc = {"min": np.minimum, "max": np.maximum, "apply": np.sin}.get(method) or getattr(np, method)
    if method == "apply":
        update, want = (lambda t: t.at[rows].apply(ea.sin)), np_ufunc_at(ufunc, x, rows)
    else:
        update, want = (lambda t: getattr(t.at[rows], method)(lib.asarray(v))), np_ufunc_at(ufunc, x, rows, v)
    check_lib(lib, update(ea.tensor(lib.asarray(x))), want)
    if lib.name == "numpy":
        ea.gradcheck(lambda t: ea.sum(ea.cos(update(t))), ea.tensor(x))


def test_at_takes_jaxs_hints_and_refuses_the_modes_it_does_not_offer():
    """`indices_are_sorted` and `unique_indices` are taken (hints: the result is the same); JAX's
    out-of-range modes (clip, drop, fill) are a NotImplementedError, never a silent different
    rule, and an unknown keyword is a TypeError."""
    x = ea.tensor(np.arange(4.0))
    assert_close(
        x.at[np.array([0, 2])].set(7.0, unique_indices=True, indices_are_sorted=True), [7.0, 1.0, 7.0, 3.0]
    )
    assert_close(x.at[1].add(1.0, mode="promise_in_bounds"), [0.0, 2.0, 2.0, 3.0])
    for mode in ("clip", "drop", "fill"):
        with pytest.raises(NotImplementedError, match=f"mode='{mode}'.*IndexError"):
            x.at[1].multiply(2.0, mode=mode)
    with pytest.raises(TypeError, match="unexpected keyword.*'wrap'"):
        x.at[1].set(2.0, wrap=True)
    with pytest.raises(TypeError, match="takes a function, got float"):
        x.at[1].apply(2.0)


@both_modes
def test_at_takes_a_value_that_fits_the_places_as_numpys_assignment_does():
    """The value of ``x.at[index].set(v)`` (and of ``.add``) fits as in numpy's ``x[index] = v``:
    it broadcasts to the indexed places' shape once leading size-1 axes are dropped; anything else
    is a ValueError naming both shapes. (A (2, 1) value for two places used to be taken, mutual
    broadcasting being checked; a (1, 1, 2) one failed with an IndexError.)
    Kills: _prepare's shape check (dropped, or given one shape)."""
    x, mid = np.arange(4.0), (slice(1, 3),)
    for v in (np.array([[7.0, 8.0]]), np.array([[[7.0, 8.0]]]), np.array([7.0]), 7.0):
        np.testing.assert_array_equal(ea.tensor(x).at[mid].set(v).numpy(), np_set(x, mid, v))
        np.testing.assert_array_equal(ea.tensor(x).at[mid].add(v).numpy(), np_set(x, mid, x[mid] + v))
    g = ea.grad(lambda v: ea.sum(ea.tensor(x).at[1:3].set(v) * x))(np.ones((1, 1, 2)))
    np.testing.assert_array_equal(g, [[[1.0, 2.0]]], strict=True)
    for v in (np.ones((2, 1)), np.ones(3), np.ones((2, 1, 2))):
        with pytest.raises(ValueError):
            np_set(x, mid, v)
        message = f"could not broadcast input array from shape {v.shape} into shape (2,)"
        for method in ("set", "add"):
            with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
                getattr(ea.tensor(x).at[1:3], method)(v)
    # places of two axes: every axis of the value is checked against its own (Kills: _prepare 43, 45)
    x2, rows = np.arange(12.0).reshape(3, 4), (slice(0, 2),)
    for v in (np.ones((1, 4)), np.ones((2, 1)), np.ones(4)):
        np.testing.assert_array_equal(ea.tensor(x2).at[rows].set(v).numpy(), np_set(x2, rows, v))
    for v in (np.ones((3, 4)), np.ones((2, 3))):
        with pytest.raises(ValueError):
            np_set(x2, rows, v)
        message = f"could not broadcast input array from shape {v.shape} into shape (2, 4)"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            ea.tensor(x2).at[rows].set(v)


@both_modes
def test_at_under_a_traced_function():
    def f(x):
        return ea.sum(x.at[0].set(x[1] * 2.0) ** 2)

    x = np.array([1.0, 2.0, 3.0])
    assert_close(ea.grad(f)(x), [0.0, 2 * 4.0 * 2.0 + 2 * 2.0, 6.0])  # (2 x1)^2 + x1^2 + x2^2


@both_modes
@pytest.mark.parametrize(
    "index",
    [
        (np.array([2, 0, 2]),),
        (slice(None), np.array([[1, 0], [3, 3]])),
        (1, np.array([0, 2])),
        (np.array([1, 0]), slice(None), np.array([0, 2])),  # separated: numpy moves axes (a loop)
        (Ellipsis, np.array([0, 5, 5])),
        (None, np.array([1, 2]), 0),
        (np.array([True, False, True]),),
    ],
    ids=lambda index: " ".join(str(index).split()),  # one line: numpy prints a 2-d array on two
)
def test_integer_array_indexing_batches_without_a_loop_where_axes_stay(index):
    """x[idx] and x.at[idx] under vmap (what jacfwd and jacrev run): the batch axis stays first."""
    x = op_table.RNG.standard_normal((5, 3, 4, 6))
    got = vmap(lambda t: t[index] * 2.0)(x)
    np.testing.assert_array_equal(np.asarray(got), np.stack([xi[index] * 2.0 for xi in x]))
    f = lambda t: t.at[index].add(1.0) * t
    assert_close(ea.jacfwd(f)(x[0]), ea.jacrev(f)(x[0]))


# -- on every array library ----------------------------------------------------------------


# name: (einad function, numpy reference, arguments, differentiated argnums), on every library
LIB_CASES = {
    "shapes": (
        *family(
            (lambda x: ea.reshape(x, (4, 3)), lambda x: x.reshape(4, 3)),
            (lambda x: ea.reshape(x, (2, -1, 2)), lambda x: x.reshape(2, -1, 2)),
            (lambda x: ea.expand_dims(x, (0, 2)), lambda x: np.expand_dims(x, (0, 2))),
            (
                lambda x: ea.squeeze(ea.reshape(x, (1, 3, 1, 4)), 2),
                lambda x: np.squeeze(x.reshape(1, 3, 1, 4), 2),
            ),
            (
                lambda x: ea.broadcast_to(ea.reshape(x, (3, 1, 4)), (2, 3, 2, 4)),
                lambda x: np.broadcast_to(x.reshape(3, 1, 4), (2, 3, 2, 4)),
            ),
        ),
        (X,),
        (0,),
    ),
    "getitem_basic": (
        *family(
            (lambda x: x[1:3, ::2], lambda x: x[1:3, ::2]),
            (lambda x: x[::-2, 1], lambda x: x[::-2, 1]),
            (lambda x: x[None, ..., -1], lambda x: x[None, ..., -1]),
            (lambda x: x[2], lambda x: x[2]),
            (lambda x: x[1, 2:0:-1], lambda x: x[1, 2:0:-1]),
            (lambda x: x[1:, None, ::-1], lambda x: x[1:, None, ::-1]),  # a new axis inside
            # 3-d: a reversed axis after an Ellipsis or after two kept axes
            (lambda x: ea.reshape(x, (3, 2, 2))[1:, ..., ::-1], lambda x: x.reshape(3, 2, 2)[1:, ..., ::-1]),
            (lambda x: ea.reshape(x, (3, 2, 2))[1:, :, ::-1], lambda x: x.reshape(3, 2, 2)[1:, :, ::-1]),
        ),
        (X,),
        (0,),
    ),
    "getitem_one_array": (
        *family(
            (lambda x: x[[0, 2, 0, 0]], lambda x: x[[0, 2, 0, 0]]),
            (lambda x: x[:, [3, -1, 0]], lambda x: x[:, [3, -1, 0]]),
            (lambda x: x[::-1, IDX2], lambda x: x[::-1, IDX2]),
            # after an Ellipsis: the array's axis counted from the end
            (lambda x: x[..., [3, -1, 0]], lambda x: x[..., [3, -1, 0]]),
            (lambda x: x[..., [2, 0], :], lambda x: x[..., [2, 0], :]),
            (lambda x: x[..., [1, 1], 1:], lambda x: x[..., [1, 1], 1:]),
        ),
        (X,),
        (0,),
    ),
    # the backward pass's appended zero slab keeps float32; an empty index array has no occurrences
    "getitem_float32_and_empty": (
        *family(
            (lambda x: x[[0, 2, 0, 0]], lambda x: x[[0, 2, 0, 0]]),
            (lambda x: x[[0, 1, 0], [1, 2, 1]], lambda x: x[[0, 1, 0], [1, 2, 1]]),
            (lambda x: x[:, NO_INDEX] + 1, lambda x: x[:, NO_INDEX] + 1),
        ),
        (X.astype(np.float32),),
        (0,),
    ),
    "getitem_arrays": (
        *family(
            (lambda x: x[[0, 1, 0], [1, 2, 1]], lambda x: x[[0, 1, 0], [1, 2, 1]]),
            (lambda x: x[1, [0, 0, 3]], lambda x: x[1, [0, 0, 3]]),
            (lambda x: x[None, [2, 2], 1:], lambda x: x[None, [2, 2], 1:]),
        ),
        (X,),
        (0,),
    ),
    "getitem_masks": (
        *family(
            (lambda x: x[MASK], lambda x: x[MASK]),
            (lambda x: x[ROW_MASK], lambda x: x[ROW_MASK]),
            (lambda x: x[:, MASK[0]], lambda x: x[:, MASK[0]]),
        ),
        (X,),
        (0,),
    ),
    "flip": (
        *family((lambda x: ea.flip(x), np.flip), (lambda x: ea.flip(x, 1), lambda x: np.flip(x, 1))),
        (X,),
        (0,),
    ),
    "astype": (lambda x: x.astype(np.float32), lambda x: x.astype(np.float32), (X,), (0,)),
    "at": (
        *family(
            (lambda x, y: x.at[1:].set(y[0]), lambda x, y: np_set(x, (slice(1, None),), y[0])),
            (lambda x, y: x.at[[2, 0, 2]].set(y), lambda x, y: np_set(x, ([2, 0, 2],), y)),
            (
                lambda x, y: x.at[:, [1, 1, 3]].add(y[:, :3]),
                lambda x, y: np_add(x, (slice(None), [1, 1, 3]), y[:, :3]),
            ),
            (lambda x, y: x.at[0, 1].add(2.0), lambda x, y: np_add(x, (0, 1), 2.0)),
        ),
        (X, Y),
        (0, 1),
    ),
}


LIB_CASES["at_float32"] = (  # the zero slab of the scatter-add and a number written keep float32
    *LIB_CASES["at"][:2],
    (X.astype(np.float32), Y.astype(np.float32)),
    (0, 1),
)


@pytest.mark.parametrize("name", sorted(LIB_CASES))
def test_on_every_library(lib, name):
    """The value equals numpy's and is of the input's library; the gradient of <w, f(x)> equals
    einad's on numpy and is of the library; on dask nothing is computed inside einad."""
    check_case(lib, LIB_CASES[name], RNG)


def test_a_repeated_index_adds_in_index_order_like_numpy(lib):
    """The gradient of x[idx] adds the cotangent's entries of a repeated place in index order, as
    numpy's np.add.at, on every library: with 1e16 + 1 - 1e16 the order shows in the value.
    Kills: _scatter_add_take's stable sort made numpy's default (unstable beyond 16 entries)."""
    idx = np.tile(np.array([2, 0, 1]), 20)
    w = np.tile(np.array([1e16, 1.0, -1e16, 1.0, 0.5]), 12)
    g = ea.grad(lambda x: ea.sum(x[idx] * lib.asarray(w)))(lib.asarray(np.ones(3)))
    want = np.zeros(3)
    np.add.at(want, idx, w)
    np.testing.assert_array_equal(lib_value(lib, g, np.float64), want)


def test_astype_complex_to_bool_is_nonzero_like_numpy(lib):
    """A complex number cast to bool is True where it is nonzero, its imaginary part included
    (a cast to a real dtype drops that part; one to bool does not, nor one to another complex
    dtype), on every library."""
    z = np.array([0, 1j, 2.5, -1 + 0j, 0.5 - 2j])
    np.testing.assert_array_equal(
        lib_value(lib, ea.tensor(lib.asarray(z)).astype(bool), np.dtype(bool)), z.astype(bool)
    )
    assert_close(lib_value(lib, ea.tensor(lib.asarray(z)).astype(np.float64)), z.real)
    c64 = lib_value(lib, ea.tensor(lib.asarray(z)).astype(np.complex64), np.dtype(np.complex64))
    np.testing.assert_array_equal(c64, z.astype(np.complex64))


def test_one_index_array_off_numpy_is_gathered_along_its_axis_without_a_flat_map(lib):
    """x[rows] with one integer array off numpy is a `take` along that array's axis, and its VJP a
    scatter-add along it: numpy never makes the map of x's flat positions (8 bytes per element of
    x) that other indices need. tracemalloc sees numpy's memory only, so on torch and dask the
    peak stays far below x's size. (Values: test_on_every_library[*-getitem_one_array].)
    Kills: _getitem_any and _scatter_any skipping `_one_array` (the flat-position path).
    Measured (x 400 x 1000 float64, 4 rows; in x's size): getitem 0.003 (torch) / 0.009 (dask),
    its VJP 0.02 / 0.09; through the flat positions 1.0 / 1.0 and 2.1 / 4.1."""
    if lib.name in ("numpy", "array_api_strict"):
        pytest.skip(f"{lib.name}'s arrays are numpy's: their memory is in the peak too")
    x = lib.asarray(RNG.standard_normal((400, 1000)))
    rows = np.array([3, 1, 4, 1])
    ones = lib.asarray(np.ones((4, 1000)))
    with lib.lazy():
        for f in (lambda x: ea.tensor(x)[rows], lambda x: ea.vjp(lambda x: x[rows], x)[1](ones)):
            peak = peak_bytes(f, x) / 3.2e6
            assert peak < 0.5, f"peak {peak:.2f} times x's size"


def test_index_of_the_library(lib):
    """An index given as an array of the library itself (torch's tensor, a strict array) is
    static data, as a list is; a boolean mask selects as numpy's does."""
    if lib.name == "dask":  # a dask index is computed (it fixes the result's shape)
        pytest.skip("dask: a dask index array is computed, tested in test_dask_index_is_computed")
    x = lib.asarray(X)
    idx = lib.asarray(np.array([2, 0, 2]))
    assert_close(lib_value(lib, ea.tensor(x)[idx]), X[[2, 0, 2]])
    assert_close(lib_value(lib, ea.tensor(x)[lib.asarray(MASK)]), X[MASK])
    g = ea.grad(lambda x: ea.einsum("ij,ij->", x[idx], x[idx]))(x)
    assert_close(lib_value(lib, g), ea.grad(lambda x: ea.einsum("ij,ij->", x[[2, 0, 2]], x[[2, 0, 2]]))(X))


def test_dask_index_is_computed():
    """A dask array used as an index is static data: einad computes it (once), and the result
    and its gradient stay lazy."""
    da = pytest.importorskip("dask.array")
    x = da.from_array(X, chunks=2)
    idx = da.from_array(np.array([2, 0, 2]), chunks=2)
    y = raw(ea.tensor(x)[idx])
    assert isinstance(y, da.Array)
    assert_close(y.compute(), X[[2, 0, 2]])


def test_getitem_negative_step_scatter_duplicates_float32(lib):
    """float32 stays float32 through indexing, scatter-adds and joins, on every library."""
    x32 = X.astype(np.float32)

    def loss(x):
        y = ea.concatenate([x[[1, 1, 0]], ea.flip(x, 0)[::-1], ea.pad(x, 1)[1:-1, 1:-1]], axis=0)
        return ea.einsum("ij,ij->", y, y)

    x = lib.asarray(x32)
    with lib.lazy():
        g = ea.grad(loss)(x)
    got = lib_value(lib, g, np.float32)
    assert_close(got, ea.grad(loss)(X).astype(np.float32), rtol=1e-5, atol=1e-5)


def test_reshape_dask_any_shape():
    """dask reshapes only by merging or splitting axes: any other reshape goes through 1-D, lazily."""
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.arange(24.0).reshape(4, 6), chunks=(3, 4))
    with load("dask").lazy():
        y = raw(ea.reshape(x, (6, 4)))
    assert isinstance(y, da.Array)
    np.testing.assert_array_equal(y.compute(), np.arange(24.0).reshape(6, 4))


# -- torch: gradients against torch.autograd -------------------------------------------------


def test_torch_autograd_getitem_duplicates_pad_concat():
    torch = pytest.importorskip("torch")
    x32 = X.astype(np.float32)
    w = RNG.standard_normal((5, 6)).astype(np.float32)
    idx = [2, 0, 2, 2, 1]

    def einad_loss(x):
        y = ea.concatenate([x[idx][:, 1:], ea.pad(x[idx][:, :2], ((0, 0), (1, 0)))], axis=1)
        return ea.einsum("ij,ij->", y, torch.from_numpy(w))

    tx = torch.from_numpy(x32.copy()).requires_grad_(True)
    ty = torch.cat([tx[idx][:, 1:], torch.nn.functional.pad(tx[idx][:, :2], (1, 0))], dim=1)
    (ty * torch.from_numpy(w)).sum().backward()

    g = ea.grad(einad_loss)(torch.from_numpy(x32.copy()))
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float32
    assert_close(g.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


EDGE_INDICES = [
    (),
    Ellipsis,
    (0, 1, 2),
    (slice(None), None, 1, [0, 0]),
    ([[0], [1]], slice(None), [1, 2]),
    (Ellipsis, [0, 3], None),
    (np.array(1),),
    (0, slice(None), np.array([True, False, True, True])),
    (slice(5, 1, -2),),
    (slice(None), slice(3, None)),
    (-1, [-1], slice(None, None, -3)),
]


def test_indices_given_as_tensors_and_the_indices_refused():
    """A constant Tensor indexes as its array does; an integer index computed inside ea.jit is a
    gather (tests/transforms/test_jit.py), a boolean mask (but for an update of one value at its
    places) or a slice bound computed there is refused with the way out; an array of floats is
    numpy's IndexError."""
    x = np.arange(12.0).reshape(3, 4)
    np.testing.assert_array_equal(np.asarray(ea.tensor(x)[ea.tensor(np.array([2, 0]))]), x[[2, 0]])
    g = ea.grad(lambda v: ea.sum(v[ea.tensor(np.array([2, 0, 2]))]))(x)
    np.testing.assert_array_equal(g, np.array([[1.0] * 4, [0.0] * 4, [2.0] * 4]))
    np.testing.assert_array_equal(ea.jit(lambda v: v[ea.argmax(v, axis=0)])(x), x[np.argmax(x, axis=0)])
    message = (
        "indexing with a boolean mask computed inside einad.jit (or make_graph): the result's shape "
        "would depend on the mask's values, which are not known when the program is built. Select "
        "with ea.where(mask, x, 0) (a result of x's shape), or compute the mask outside the jitted "
        "function (static_argnums)"
    )
    with pytest.raises(ea.TracerError, match=f"^{re.escape(message)}$"):
        ea.jit(lambda v: v[v > 2.0])(x)
    # an update of one value at every place of such a mask is a where (test_indexing.py)
    np.testing.assert_array_equal(ea.jit(lambda v: v.at[v > 2.0].set(0.0))(x), np.where(x > 2.0, 0.0, x))
    with pytest.raises(ea.TracerError, match=r"a slice's length must be known .* x\[i \+ np.arange\(n\)\]"):
        ea.jit(lambda v, i: v[i : i + 2])(x, 1)
    refusal = "^arrays used as indices must be of integer or boolean type, not float64$"
    with pytest.raises(IndexError, match=refusal):
        ea.tensor(x)[np.array([0.0, 1.0])]


_ALL = slice(None)
# an index into shape (2, 3, 4): (the index with the array made a slice, its axis, the array) or None
ONE_ARRAY = [
    (np.array([0, -1]), ((_ALL,), 0, [0, 1])),
    ((_ALL, np.array([[0, -1]])), ((_ALL, _ALL), 1, [[0, 2]])),
    ((Ellipsis, np.array([0, -1])), ((Ellipsis, _ALL), 2, [0, 3])),
    ((Ellipsis, np.array([1]), slice(1, None)), ((Ellipsis, _ALL, slice(1, None)), 1, [1])),
    ((np.array([1], np.uint8), _ALL, slice(1, None)), ((_ALL, _ALL, slice(1, None)), 0, [1])),
    (np.array(1), None),  # a 0-d array is an integer
    ((np.array([0]), np.array([1])), None),
    ((0, np.array([1])), None),
    ((None, np.array([1])), None),
    (np.array([True, False]), None),
]


@pytest.mark.parametrize(("index", "expected"), ONE_ARRAY)
def test_one_array_finds_the_array_and_the_axis_it_indexes(index, expected):
    """`_one_array` picks out the indices that other libraries gather with one `take` along an axis
    (the others go through numpy's flat positions, a gather from the whole flattened array)."""
    got = shape._one_array(index, (2, 3, 4))
    if expected is None:
        assert got is None
    else:
        assert got[:2] == expected[:2]
        np.testing.assert_array_equal(got[2], expected[2], strict=False)


def test_getitem_edge_indices(lib):
    """numpy's semantics for mixed, empty and separated indices: values and gradients."""
    x3 = np.arange(24.0).reshape(2, 3, 4)
    x = lib.asarray(x3)
    for index in EDGE_INDICES:
        w = RNG.standard_normal(x3[index].shape)
        assert_close(lib_value(lib, ea.tensor(x)[index]), x3[index])
        with lib.lazy():
            g = ea.grad(lambda x, w, index=index: ea.einsum("...,...->", x[index], w))(x, lib.asarray(w))
        want = ea.grad(lambda x, w, index=index: ea.einsum("...,...->", x[index], w))(x3, w)
        assert_close(lib_value(lib, g), want)
