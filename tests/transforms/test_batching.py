"""einad.transforms.batching, ea.vmap: JAX's in_axes/out_axes, per-example gradients,
composition with jit and itself, every batched function against a loop over the examples, and
vmap on every array library.

Every test runs eagerly and with every transformation jitted (the `jit_mode` mark), on
every library too."""

import numpy as np
import pytest

import einad as ea
from tests.support.functions import X3, Y3, lib_arrays, lib_result
from tests.support.jitting import compiled
from tests.support.numerics import assert_close

pytestmark = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

RNG = np.random.default_rng(0)
A = RNG.standard_normal((5, 3, 4))
B = RNG.standard_normal((4, 2))
V = RNG.standard_normal((5, 4))


def test_a_mapped_einsum_is_one_contraction_with_a_letter_more():
    f = ea.vmap(lambda a, b: ea.einsum("ij,jk->ik", a, b), in_axes=(0, None))
    assert_close(f(A, B), np.einsum("nij,jk->nik", A, B))
    graph = ea.make_graph(f)(A, B)
    assert [e.op for e in graph.equations] == ["einsum"], str(graph)
    assert graph.einsums == ["aij,jk->aik"]


@pytest.mark.parametrize("in_axes", [0, (0, 0), [0, 0], (0, None), (1, None), (-1, None), (None, 1)])
def test_in_axes(in_axes):
    x = RNG.standard_normal((4, 6))
    y = RNG.standard_normal((4, 6))
    f = ea.vmap(lambda x, y: ea.sum(ea.sin(x)) * ea.sum(y**2), in_axes=in_axes)
    spec = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes, in_axes)
    want = []
    size = x.shape[spec[0]] if spec[0] is not None else y.shape[spec[1]]
    for n in range(size):
        xi = x if spec[0] is None else np.take(x, n, axis=spec[0])
        yi = y if spec[1] is None else np.take(y, n, axis=spec[1])
        want.append(np.sum(np.sin(xi)) * np.sum(yi**2))
    assert_close(f(x, y), np.array(want))


def test_out_axes_and_pytrees():
    params = {"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)}
    xs = RNG.standard_normal((3, 7))  # 7 examples along axis 1

    def f(p, x):
        return {"y": x @ p["w"] + p["b"], "c": ea.sum(p["w"])}

    out = ea.vmap(f, in_axes=({"w": None, "b": None}, 1), out_axes={"y": 1, "c": None})(params, xs)
    assert_close(out["y"], (xs.T @ params["w"] + params["b"]).T)
    assert_close(out["c"], params["w"].sum())
    with pytest.raises(ValueError, match="out_axes"):
        ea.vmap(lambda x: x * 2, out_axes=None)(np.ones(3))


def test_per_example_gradients():
    def loss(w, x):
        return ea.sum(ea.tanh(x @ w) ** 2)

    w = RNG.standard_normal((4, 2))
    per_example = ea.vmap(ea.grad(loss), in_axes=(None, 0))(w, V)
    for n in range(V.shape[0]):
        assert_close(per_example[n], ea.grad(loss)(w, V[n]))
    assert per_example.shape == (5, 4, 2)


def test_vmap_composes_with_jit_grad_and_itself():
    f = lambda x: ea.sum(ea.exp(x) * x)
    xs = RNG.standard_normal((3, 4, 2))
    want = np.exp(xs) * (xs + 1)
    assert_close(ea.vmap(ea.vmap(ea.grad(f)))(xs), want)
    assert_close(compiled(ea.jit(ea.vmap(ea.grad(f))))(xs), want)
    assert_close(ea.vmap(ea.jit(ea.grad(f)))(xs), want)
    # the gradient of a mapped function sums over the examples
    assert_close(ea.grad(lambda xs: ea.sum(ea.vmap(f)(xs)))(xs), want)


def test_errors():
    with pytest.raises(ValueError, match="one length"):
        ea.vmap(lambda x, y: x + y)(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least one"):
        ea.vmap(lambda x: x, in_axes=None)(np.ones(3))
    with pytest.raises(ValueError, match="in_axes"):
        ea.vmap(lambda x, y: x + y, in_axes=(0, 0, 0))(np.ones(3), np.ones(3))
    with pytest.raises(np.exceptions.AxisError):
        ea.vmap(lambda x: x, in_axes=2)(np.ones((3, 2)))


def test_an_axis_out_of_range_names_the_argument_it_maps():
    """A mapped axis a leaf lacks named only the axis ("in_axes: axis 0 is out of bounds for
    array of dimension 0"): the argument, the keyword (mapped along 0, as in JAX) or the leaf
    of a pytree, with its shape, is named now."""
    x = np.ones((3, 4))
    cases = [
        (
            lambda: ea.vmap(lambda a, scale=1.0: a * scale)(x, scale=2.0),
            r"keyword argument 'scale' \(shape \(\)\)",
        ),
        (lambda: ea.vmap(lambda a: a, in_axes=2)(x), r"argument 0 \(shape \(3, 4\)\): axis 2"),
        (
            lambda: ea.vmap(lambda p: p["w"], in_axes=({"w": 1, "b": 2},))({"w": x, "b": x}),
            r"argument 0\['b'\]",
        ),
        (lambda: ea.vmap(lambda a, d: a)(x, {"k": [np.ones(3), np.float64(2.0)]}), r"argument 1\['k'\]\[1\]"),
    ]
    for call, where in cases:
        with pytest.raises(np.exceptions.AxisError, match=rf"^vmap's in_axes for {where}"):
            call()
    assert_close(ea.vmap(lambda a, scale=1.0: a * scale)(x, scale=np.full(3, 2.0)), 2.0 * x)


class _Pair:
    """A user's pytree node (registered below), for in_axes/out_axes of its own type."""

    def __init__(self, a, b):
        self.a, self.b = a, b


ea.register_pytree_node(_Pair, lambda p: ((p.a, p.b), None), lambda aux, children: _Pair(*children))


def test_axes_of_a_registered_node_type_and_errors_that_show_the_structure():
    # JAX's prefix rule holds for any node type: in_axes=_Pair(0, 1) was refused; the messages
    # printed every array of the arguments ("the structure of in array([[...") and a float
    # axis was a ValueError (JAX: TypeError)
    a, b = RNG.standard_normal((3, 2)), RNG.standard_normal((2, 3))
    f = ea.vmap(lambda p: _Pair(p.a * p.b.T, p.b), in_axes=(_Pair(0, 1),), out_axes=_Pair(0, 1))
    out = f(_Pair(a, b))
    assert_close(out.a, a * b.T)
    assert_close(out.b, b)
    mismatch = r"in_axes=\(0, 0, 0\) does not match the structure of the arguments, \(\*, \*\)$"
    with pytest.raises(ValueError, match=mismatch):
        ea.vmap(lambda x, y: x + y, in_axes=(0, 0, 0))(a, a)
    with pytest.raises(ValueError, match=r"structure of the results, \(\*, \*\)$"):
        ea.vmap(lambda x: (x, x), out_axes=(0,))(a)
    with pytest.raises(TypeError, match="ints and None"):
        ea.vmap(lambda x: x, in_axes=1.0)(a)


def test_keyword_arguments_are_mapped_along_their_leading_axis_as_in_jax():
    """JAX maps a keyword argument along axis 0 whatever in_axes says (in_axes names the
    positional ones); einad refused keywords."""
    x, y = RNG.standard_normal((2, 4, 3))
    f = lambda a, b=None, c=2.0: ea.sum(a * b) * c
    loop = lambda a, b, **kw: np.array([float(f(a[i], b[i], **kw)) for i in range(4)])
    assert_close(ea.vmap(f)(x, b=y), loop(x, y), rtol=1e-12)
    assert_close(ea.vmap(f, in_axes=1)(x.T, b=y), loop(x, y), rtol=1e-12)
    c = np.arange(1.0, 5.0)
    assert_close(ea.vmap(f, in_axes=(None,))(x[0], b=y, c=c), loop(np.broadcast_to(x[0], (4, 3)), y) * c / 2)
    assert_close(ea.vmap(ea.grad(f))(x, b=y), 2.0 * y, rtol=1e-12)
    with pytest.raises(ValueError, match="one length"):
        ea.vmap(f)(x, b=np.ones((3, 3)))


def test_a_mapped_value_read_as_a_python_number_is_a_tracer_error():
    # one number cannot stand for a batch: refused, as jit refuses a staged value (numpy raised
    # "only 0-dimensional arrays can be converted" before), also for a batch of one
    branch = lambda x: x if float(ea.sum(x)) > 0 else -x
    for size in (3, 1):
        with pytest.raises(ea.TracerError, match="mapped by vmap .* read as a Python number"):
            ea.vmap(branch)(np.ones((size, 2)))
    with pytest.raises(ea.TracerError):  # (under jit_mode, grad is staged: its refusal comes first)
        ea.vmap(ea.grad(lambda x: ea.sum(branch(x))))(np.ones((3, 2)))
    with pytest.raises(ea.TracerError, match="mapped by vmap"):
        ea.vmap(lambda x: x[0].item())(np.ones((3, 2)))
    # a value that does not depend on the mapped argument is a number as before
    assert_close(
        ea.vmap(lambda x, y: x * float(ea.sum(y)), in_axes=(0, None))(np.ones((3, 2)), np.ones(2)),
        np.full((3, 2), 2.0),
    )


def test_an_index_mapped_by_vmap_gathers_each_examples_own_elements(jit_mode):
    # x[i] with i mapped took the whole stack of indices as every example's index: a result of
    # shape (3, 3, 2) where JAX (and a loop) give (3, 2)
    x = RNG.standard_normal((3, 5, 4))
    i = np.array([[1, 4], [0, -1], [3, 3]])
    j = np.array([[0, 2], [1, 1], [3, 0]])
    loop = lambda f: np.stack([f(b) for b in range(3)])
    assert_close(ea.vmap(lambda x, i: x[i])(x, i), loop(lambda b: x[b][i[b]]))
    assert_close(ea.vmap(lambda x, i, j: x[i, j])(x, i, j), loop(lambda b: x[b][i[b], j[b]]))
    assert_close(ea.vmap(lambda x, j: x[1:, j])(x, j), loop(lambda b: x[b][1:, j[b]]))
    assert_close(ea.vmap(lambda i: ea.tensor(x[0])[i])(np.arange(5)), x[0])
    # the gather is linear in x: its gradient adds 2 x[i] back at i (twice at a repeated index)
    want = np.zeros_like(x)
    for b in range(3):
        np.add.at(want[b], i[b], 2 * x[b][i[b]])
    assert_close(ea.vmap(ea.grad(lambda x, i: ea.sum(x[i] ** 2)))(x, i), want)
    assert_close(ea.grad(lambda x: ea.sum(ea.vmap(lambda x, i: x[i] ** 2)(x, i)))(x), want)
    tangent = ea.vmap(lambda x, i: ea.jvp(lambda x: x[i] ** 2, (x,), (x,))[1])(x, i)
    assert_close(tangent, loop(lambda b: 2 * x[b][i[b]] ** 2))
    with pytest.raises(IndexError, match="mapped by vmap must be an integer array"):
        ea.vmap(lambda x, m: x[m])(x, x[:, :, 0] > 0)
    # an update at a mapped index is a scatter per example (a repeated index adds twice)
    want = x.copy()
    for b in range(3):
        np.add.at(want[b], i[b], 1.0)
    assert_close(ea.vmap(lambda x, i: x.at[i].add(1.0))(x, i), want)


def test_a_mapped_index_is_one_gather_or_scatter_for_the_whole_batch(jit_mode):
    """x[i], x.at[i] with i mapped, and indices whose arrays numpy moves to the front: one
    gather (scatter) of the whole batch, each example's result in its place, equal to a loop
    over the examples with numpy. Each looped (one gather and one concatenation per example)."""
    x = RNG.standard_normal((3, 4, 5, 6))
    i, k = np.array([[0, -1], [2, 2], [3, 1]]), np.array([[[5]], [[0]], [[-2]]])
    v = RNG.standard_normal((3, 2, 5))

    def np_set(x, i, v):
        y = x.copy()
        y[i, :, 0] = v  # the last write of a repeated place stays
        return y

    def np_add(x, i, v):
        y = x.copy()
        np.add.at(y, (i, slice(None), 0), v)
        return y

    cases = {  # (einad's, numpy's), each a function of (x, i, k, v) for one example
        "slices_between": (lambda x, i, k, v: x[i, :, k],) * 2,
        "none_and_ellipsis": (lambda x, i, k, v: x[None, i, ..., 1],) * 2,
        "steps_then_array": (lambda x, i, k, v: x[::-2, None, 1:4:2, k],) * 2,
        "integer_between": (lambda x, i, k, v: x[i, 3, k],) * 2,
        "constant_separated": (lambda x, i, k, v: x[[0, 1], :, [2, 3]],) * 2,
        "add": (lambda x, i, k, v: x.at[i, :, 0].add(v), lambda x, i, k, v: np_add(x, i, v)),
        "set": (lambda x, i, k, v: x.at[i, :, 0].set(v), lambda x, i, k, v: np_set(x, i, v)),
    }
    for name, (f, ref) in cases.items():
        want = np.stack([ref(x[b], i[b], k[b], v[b]) for b in range(3)])
        assert_close(ea.vmap(f)(x, i, k, v), want)
        assert_close(ea.jit(ea.vmap(f))(x, i, k, v), want)
        assert_close(ea.vmap(ea.jit(f))(x, i, k, v), want)
        ops = [e.op for e in ea.make_graph(ea.vmap(f))(x, i, k, v).equations]
        assert "concatenate" not in ops, (name, ops)
        assert ops.count("gather") + ops.count("gather_scatter_add") <= 2, (name, ops)
    # the gradient of the batch's gather is the batch's scatter (a repeated index adds twice)
    g = ea.grad(lambda x: ea.sum(ea.vmap(lambda x, i: x[i, :, 1] ** 2)(x, i)))(x)
    want = np.zeros_like(x)
    for b in range(3):
        np.add.at(want[b], (i[b], slice(None), 1), 2 * x[b][i[b], :, 1])
    assert_close(g, want)


def test_a_mapped_value_made_a_constant_tensor_is_a_tracer_error():
    # ea.tensor(x) of a mapped x copied the whole stack into each example: shape (3, 3, 2)
    # where the loop gives (3, 2); refused, as jit refuses it, and an unmapped value still converts
    x = RNG.standard_normal((3, 2))
    with pytest.raises(ea.TracerError, match="mapped by vmap.*ea.tensor"):
        ea.vmap(lambda x: ea.tensor(x) * 2.0)(x)
    f = ea.vmap(lambda x, y: ea.tensor(y) * x, in_axes=(0, None))
    assert_close(f(x, x[0]), x * x[0])


def test_a_differentiated_or_staged_value_made_a_constant_tensor_is_a_tracer_error():
    """ea.tensor(x) of a value traced by grad silently cut its derivative (a zero gradient, where
    jnp.array keeps it and torch.tensor warns), and under jit failed as a numpy conversion that
    suggested static arguments; both name ea.tensor now. The imperative graph keeps torch's
    detaching copy, and a constant made from a plain array still converts."""
    x = RNG.standard_normal(3)
    for transform in (ea.grad, lambda f: ea.jit(f), lambda f: lambda x: ea.jvp(f, (x,), (x,))):
        with pytest.raises(ea.TracerError, match=r"traced by a transformation.*\(ea.tensor\).*stop_gradient"):
            transform(lambda x: ea.sum(ea.tensor(x) ** 2))(x)
    assert_close(ea.grad(lambda x: ea.sum(ea.tensor(np.arange(3.0)) * x))(x), np.arange(3.0))
    w = ea.tensor(x, requires_grad=True)
    copy = ea.tensor(w * 2.0)
    assert not copy.requires_grad
    assert_close(copy, 2.0 * x)


@pytest.mark.parametrize("size", [0, 1, 3])
def test_a_jitted_function_mapped_over_a_batch_of_any_size(size):
    # an empty batch had no first example to stage the program with: IndexError from program.py
    x = RNG.standard_normal((size, 4)).astype(np.float32)
    g = ea.vmap(ea.jit(ea.grad(lambda x: ea.sum(ea.sin(x) * x))))(x)
    assert g.shape == (size, 4) and g.dtype == np.float32
    assert_close(g, np.cos(x) * x + np.sin(x), rtol=1e-5)
    out = ea.vmap(ea.vmap(ea.jit(lambda x: x * 2.0)), in_axes=1)(np.ones((2, size, 3)))
    assert out.shape == (size, 2, 3)


def test_results_are_numpy_at_top_level_and_float32_stays():
    out = ea.vmap(lambda x: x * 2.0)(np.ones((2, 3), np.float32))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    # a Python number among where's branches stays weak when mapped (it was made an int64 or
    # float64 array to line it up with the batch, so float32 came back float64; jacfwd of max,
    # whose forward rule selects with a 0, maps that where)
    x = np.array([[1.0, -2.0, 3.0], [-1.0, 0.5, 2.0]], np.float32)
    for f in (lambda x: ea.where(x > 0, x, 0), lambda x: ea.where(x > 0, 0.5, x)):
        out = ea.vmap(f)(x)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, np.stack([f(r) for r in x]))
    assert ea.jacfwd(ea.max)(x[0]).dtype == np.float32


def test_an_unmapped_python_number_reaches_the_function_as_a_python_number():
    # as in JAX (in_axes None passes the leaf as it is): it was made a float64 array, so float32
    # came back float64, and a jitted function's static argument was refused as unhashable
    x = RNG.standard_normal((3, 4)).astype(np.float32)
    seen = []
    out = ea.vmap(lambda x, s: seen.append(type(s)) or x * s, in_axes=(0, None))(x, 2.0)
    assert seen == [float] and out.dtype == np.float32
    assert_close(out, 2.0 * x)
    power = ea.jit(lambda x, k: ea.sum(x**k), static_argnums=1)
    assert_close(ea.vmap(power, in_axes=(0, None))(x, 3), np.sum(x**3, axis=1), rtol=1e-5)
    assert_close(ea.vmap(ea.grad(power), in_axes=(0, None))(x, 3), 3 * x**2, rtol=1e-5)


def test_an_unmapped_leaf_that_is_not_an_array_reaches_the_function_and_a_result_must_be_one():
    # a function or a string with in_axes None became a 0-d object or string array ("'numpy.ndarray'
    # object is not callable"); a string result came back as an array of strings (JAX refuses it)
    x = RNG.standard_normal((3, 4))
    assert_close(ea.vmap(lambda x, f: f(x), in_axes=(0, None))(x, ea.sin), np.sin(x))
    assert_close(ea.vmap(lambda x, s: x * len(s), in_axes=(0, None))(x, "abc"), 3 * x)
    assert_close(ea.vmap(ea.jit(lambda x, s: x * len(s)), in_axes=(0, None))(x, "abc"), 3 * x)
    with pytest.raises(TypeError, match="returned a value of type str, not an array"):
        ea.vmap(lambda x: (x, "done"))(x)


# -- the everyday and linalg functions, mapped: vmap equals a loop over the examples ---------------

XS = RNG.uniform(0.5, 1.5, (4, 3, 3)) + 2 * np.eye(3)  # 4 well-conditioned 3x3 examples
YS = RNG.uniform(0.5, 1.5, (4, 3, 3))

MAPPED = {
    "less": lambda x, y: ea.less(x, y),
    "equal": lambda x, y: ea.equal(x, x * (y > 1)),
    "isfinite": lambda x, y: ea.isfinite(ea.where(y > 1, np.inf, x)),
    "cumsum": lambda x, y: ea.cumsum(x * y, axis=1),
    "cumprod": lambda x, y: ea.cumprod(x, axis=0) * y,
    "std": lambda x, y: ea.std(x * y, axis=0),
    "sort": lambda x, y: ea.sort(x * y, axis=-1),
    "argsort": lambda x, y: ea.argsort(x - y, axis=0),
    "argmax": lambda x, y: ea.argmax(x * y),
    "take": lambda x, y: ea.take(x * y, np.array([2, 0, 2]), axis=1),
    "take_along_axis": lambda x, y: ea.take_along_axis(x, ea.argsort(y, axis=1), axis=1),
    "roll": lambda x, y: ea.roll(x * y, 1, axis=0),
    "tile": lambda x, y: ea.tile(x + y, (1, 2)),
    "repeat": lambda x, y: ea.repeat(x * y, 2, axis=0),
    "pad": lambda x, y: ea.pad(x * y, 1),
    "arctan2": lambda x, y: ea.arctan2(x, y),
    "hypot": lambda x, y: ea.hypot(x, y),
    "logaddexp": lambda x, y: ea.logaddexp(x, y),
    "log2 exp2 arcsinh": lambda x, y: ea.log2(x) + ea.exp2(y) + ea.arcsinh(x * y),
    "mod floor": lambda x, y: ea.mod(x * 3, y) + ea.floor(x * y),
    "complex parts": lambda x, y: (
        ea.real(ea.conj(x + 1j * y) * 2) + ea.imag(x + 1j * y) + ea.angle(x + 1j * y)
    ),
    "at": lambda x, y: x.at[0, 1].add(y[2, 2]),
    "cumsum no axis": lambda x, y: ea.cumsum(x * y),
    "linalg.inv": lambda x, y: ea.linalg.inv(x) * y,
    "linalg.solve": lambda x, y: ea.linalg.solve(x, y),
    "linalg.det": lambda x, y: ea.linalg.det(x) * y,
    "linalg.slogdet": lambda x, y: ea.linalg.slogdet(x).logabsdet + y,
    "linalg.cholesky": lambda x, y: ea.linalg.cholesky(x @ x.T) * y,
    "linalg.eigh": lambda x, y: ea.linalg.eigh(x + x.T).eigenvalues * y[0],
    "linalg.svd": lambda x, y: ea.linalg.svd(x, compute_uv=False) * y[0],
    "linalg.qr": lambda x, y: ea.abs(ea.linalg.qr(x).R) * y,
    "linalg.norm": lambda x, y: ea.linalg.norm(x * y, axis=0),
}


@pytest.mark.parametrize("name", sorted(MAPPED))
def test_vmap_equals_a_loop_over_examples(name):
    f = MAPPED[name]
    want = np.stack([np.asarray(f(ea.tensor(x), ea.tensor(y)).numpy()) for x, y in zip(XS, YS)])
    got = ea.vmap(f)(XS, YS)
    assert got.dtype == want.dtype
    assert_close(got, want)
    if np.issubdtype(want.dtype, np.floating):  # and the per-example gradients
        loss = lambda x, y: ea.sum(f(x, y) ** 2)
        want_g = np.stack([ea.grad(loss)(x, y) for x, y in zip(XS, YS)])
        assert_close(ea.vmap(ea.grad(loss))(XS, YS), want_g, rtol=1e-6, atol=1e-9)


# -- every array library ---------------------------------------------------------------------------


def _row_loss(a, b):
    return ea.sum(ea.einsum("i,ij->j", a, b) * a)


def test_vmap(lib):
    x, y = lib_arrays(lib, X3, Y3)
    with lib.lazy():
        rows = ea.vmap(lambda a: ea.einsum("i,ij->j", a, y) * a)(x)
        per_example = ea.vmap(ea.grad(_row_loss), in_axes=(0, None))(x, y)
    assert_close(lib_result(lib, rows), ea.vmap(lambda a: ea.einsum("i,ij->j", a, Y3) * a)(X3))
    expected = ea.vmap(ea.grad(_row_loss), in_axes=(0, None))(X3, Y3)
    assert_close(lib_result(lib, per_example), expected)


def test_axis_size_maps_a_function_of_no_mapped_argument_as_in_jax():
    x = np.array([1.0, 2.0])
    out = ea.vmap(lambda a: a * 2.0, in_axes=None, axis_size=3)(x)
    np.testing.assert_array_equal(out, np.broadcast_to(2 * x, (3, 2)))
    assert ea.vmap(lambda: ea.tensor(1.0), axis_size=0)().shape == (0,)
    # under grad: each of the 4 copies of sin(x) sends back cos(x)
    g = ea.grad(lambda a: ea.sum(ea.vmap(lambda: ea.sin(a), in_axes=(), axis_size=4)()))(x)
    assert_close(g, 4 * np.cos(x))
    np.testing.assert_array_equal(ea.vmap(lambda a: a + 1, axis_size=2)(x), x + 1)  # it agrees
    with pytest.raises(ValueError, match="axis_size is 3, but the mapped axes have length"):
        ea.vmap(lambda a: a, axis_size=3)(x)
    with pytest.raises(ValueError, match="axis_size cannot be negative"):
        ea.vmap(lambda a: a, axis_size=-1)
    with pytest.raises(TypeError, match="axis_size must be an integer"):
        ea.vmap(lambda a: a, axis_size=2.0)
    with pytest.raises(ValueError, match="or axis_size"):
        ea.vmap(lambda a: a, in_axes=None)(x)
