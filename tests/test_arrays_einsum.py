"""einsum, its front ends and its derivatives on every array library (issue 10).

Each test runs on numpy, array-api-strict (no einsum: the standard's permute_dims,
reshape and matmul), torch (CPU) and dask (lazy), and compares values and gradients
with einad's on numpy (itself checked against central differences elsewhere). Results
must be arrays of the inputs' library, in their dtype; dask results must stay lazy.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import einad as ea
from tests.support.numerics import reference_einsum
from tests.support.strategies import einsum_specs


def _check(lib, x, expected, rtol=1e-10, atol=1e-12):
    """`x` is an array of `lib` (lazy on dask), with `expected`'s shape, dtype and values."""
    if isinstance(x, ea.Tensor):
        x = x._value
    assert lib.owns(x), f"a {type(x).__name__} result, not {lib.name}'s"
    if lib.name == "dask":
        import dask.array as da

        assert isinstance(x, da.Array), "dask results stay lazy"
    got = lib.numpy(x)
    expected = np.asarray(expected)
    assert got.shape == expected.shape, f"shape {got.shape} != {expected.shape}"
    assert got.dtype == expected.dtype, f"dtype {got.dtype} != {expected.dtype}"
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


_OUT = "ΑΒΓΔΕΖΗΘ"  # letters for the loss's contraction with the cotangent


def _vjp_all(lib, f, ops, seed=1, rtol=1e-10, atol=1e-12):
    """f's value and every operand's VJP on `lib` and on numpy, checked equal.

    The VJP is the gradient of ``<f(ops), u>`` (an einsum with a random `u`), so the
    test needs no other op; complex values go through `ea.vjp`.
    """
    expected = f(*ops)
    shape, dtype = expected.shape, expected.dtype
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(shape)
    if dtype.kind == "c":
        u = u + 1j * rng.standard_normal(shape)
    u = u.astype(dtype)
    xs = [lib.asarray(o) for o in ops]
    _check(lib, f(*xs), expected._value, rtol=rtol, atol=atol)
    if dtype.kind == "c":
        want = ea.vjp(f, *ops)[1](u)
        grads = ea.vjp(f, *xs)[1](lib.asarray(u))
    else:
        out = _OUT[: len(shape)]
        argnums = tuple(range(len(ops)))
        want = ea.grad(lambda *a: ea.einsum(f"{out},{out}->", f(*a), u), argnums=argnums)(*ops)
        w = lib.asarray(u)
        grads = ea.grad(lambda *a: ea.einsum(f"{out},{out}->", f(*a), w), argnums=argnums)(*xs)
    assert len(grads) == len(ops)
    for g, w in zip(grads, want):
        _check(lib, g, w, rtol=rtol, atol=atol)


def _ops(shapes, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(s) for s in shapes]
    if np.dtype(dtype).kind == "c":
        out = [o + 1j * rng.standard_normal(o.shape) for o in out]
    return [o.astype(dtype) for o in out]


def _spec(spec, **kw):
    return lambda *ops: ea.einsum(spec, *ops, **kw)


# (id, function of the operands, operand shapes): the grammar einsum accepts.
CASES = [
    ("matmul", _spec("ij,jk->ik"), [(2, 3), (3, 4)]),
    ("batch-matmul", _spec("bij,bjk->bik"), [(2, 2, 3), (2, 3, 4)]),
    ("trace", _spec("ii->"), [(3, 3)]),
    ("diagonal", _spec("ii->i"), [(3, 3)]),
    ("repeated", _spec("iij->ji"), [(3, 3, 2)]),
    ("repeated-pair", _spec("ii,i->i"), [(3, 3), (3,)]),
    ("three-times", _spec("iii,ij->j"), [(2, 2, 2), (2, 3)]),
    ("outer", _spec("i,j->ij"), [(3,), (4,)]),
    ("summed-letters", _spec("ijk,jk->i"), [(2, 3, 4), (3, 4)]),
    ("sum-all", _spec("ij->"), [(2, 3)]),
    ("implicit", _spec("ij,jk"), [(2, 3), (3, 4)]),
    ("ellipsis", _spec("...ij,...jk->...ik"), [(2, 2, 3), (3, 4)]),
    ("summed-ellipsis", _spec("...ij->ij"), [(2, 2, 3)]),
    ("scalar-operand", _spec(",ij->ij"), [(), (2, 3)]),
    ("scalars", _spec(",->"), [(), ()]),
    ("size-1-broadcast", _spec("ij,ij->ij"), [(2, 3), (1, 3)]),
    ("three-optimal", _spec("ij,jk,kl->li", optimize="optimal"), [(2, 3), (3, 4), (4, 2)]),
    ("four-greedy", _spec("ab,bc,cd,da->", optimize="greedy"), [(2, 3), (3, 4), (4, 2), (2, 2)]),
    ("explicit-path", _spec("ij,jk,kl->il", optimize=[(1, 2), (0, 1)]), [(2, 3), (3, 4), (4, 2)]),
    ("one-step-path", _spec("ij,jk,kl->il", optimize=False), [(2, 3), (3, 4), (4, 2)]),
    ("unicode", _spec("αβ,βγ->γα"), [(2, 3), (3, 4)]),
    ("interleaved", lambda a, b: ea.einsum(a, [0, "j"], b, ["j", 2], [2, 0]), [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_einsum_value_and_gradients(lib, case):
    _, f, shapes = case
    _vjp_all(lib, f, _ops(shapes))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex(lib, dtype):
    rtol = 1e-5 if dtype == "complex64" else 1e-10
    _vjp_all(lib, _spec("ij,jk,kk->ik"), _ops([(2, 3), (3, 3), (3, 3)], dtype=dtype), rtol=rtol, atol=rtol)


def test_float32_stays_float32(lib):
    a, b = _ops([(2, 3), (3, 3)], dtype=np.float32)
    x, y = lib.asarray(a), lib.asarray(b)
    out = ea.einsum("ij,jj->ij", x, y)
    _check(lib, out, np.einsum("ij,jj->ij", a, b), rtol=1e-6)
    loss = lambda x, y: ea.einsum("ij,jj,ij->", x, y, x)
    ga, gb = ea.grad(loss, argnums=(0, 1))(x, y)
    wa, wb = ea.grad(loss, argnums=(0, 1))(a, b)
    _check(lib, ga, wa, rtol=1e-5)
    _check(lib, gb, wb, rtol=1e-5)
    # a Python number operand takes float32 too
    _check(lib, ea.einsum(",ij->ij", 2.0, x), 2 * a, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_einsum_keeps_numpy_dtype(lib, dtype):
    a = np.arange(12).reshape(3, 4).astype(dtype)
    b = np.arange(4 * 3).reshape(4, 3).astype(dtype) - 5
    for spec, ops in [("ij,jk->ik", (a, b)), ("ii->", (b[:3],)), ("ij->j", (a,)), ("ij,ji->", (a, b))]:
        _check(lib, ea.einsum(spec, *[lib.asarray(o) for o in ops]), np.einsum(spec, *ops))


def test_mixed_dtypes_promote_as_numpy(lib):
    a = _ops([(2, 3)])[0].astype(np.float32)
    b = np.arange(6).reshape(3, 2)
    _check(
        lib, ea.einsum("ij,jk->ik", lib.asarray(a), lib.asarray(b)), np.einsum("ij,jk->ik", a, b), rtol=1e-6
    )


def test_empty_operand_gives_zeros(lib):
    a, b = np.zeros((2, 0)), np.ones((0, 3))
    _check(lib, ea.einsum("ij,jk->ik", lib.asarray(a), lib.asarray(b)), np.zeros((2, 3)))


def test_jvp(lib):
    ops = _ops([(2, 3), (3, 3), (3,)])
    tans = _ops([(2, 3), (3, 3), (3,)], seed=7)
    f = lambda a, b, c: ea.einsum("ij,jj,j->i", a, b, c)
    want_v, want_t = ea.jvp(f, ops, tans)
    v, t = ea.jvp(f, [lib.asarray(o) for o in ops], [lib.asarray(t) for t in tans])
    _check(lib, v, want_v)
    _check(lib, t, want_t)


def test_second_order(lib):
    # d/dy <grad_x f(x, y), w>: the inner gradient is a broadcast (a Spread) of y's row sums
    x, y, w = _ops([(2, 3), (3, 3), (2, 3)])
    f = lambda x, y: ea.einsum("ij,jk->", x, y)
    h = lambda x, y, w: ea.grad(lambda y: ea.einsum("ij,ij->", ea.grad(f)(x, y), w))(y)
    _check(lib, h(*[lib.asarray(o) for o in (x, y, w)]), h(x, y, w))


# -- the front ends: each one einsum ---------------------------------------------------------

FRONT = [
    ("matmul", ea.matmul, [(2, 3, 4), (4, 2)]),
    ("matmul-vector", ea.matmul, [(3,), (2, 3, 4)]),
    ("dot", ea.dot, [(2, 3), (4, 3, 2)]),
    ("inner", ea.inner, [(2, 3), (4, 3)]),
    ("outer", ea.outer, [(2, 3), (4,)]),
    ("tensordot", lambda a, b: ea.tensordot(a, b, axes=([1, 0], [2, 0])), [(3, 2, 4), (3, 5, 2)]),
    ("tensordot-int", lambda a, b: ea.tensordot(a, b, axes=1), [(2, 3), (3, 4)]),
    ("trace", ea.trace, [(3, 3, 2)]),
    ("trace-axes", lambda a: ea.trace(a, axis1=2, axis2=0), [(3, 2, 3)]),
    ("trace-offset", lambda a: ea.trace(a, offset=1), [(3, 4)]),
    ("diagonal", lambda a: ea.diagonal(a, axis1=1, axis2=2), [(2, 3, 3)]),
    ("diagonal-offset", lambda a: ea.diagonal(a, offset=-1), [(4, 3)]),
    ("transpose", ea.transpose, [(2, 3, 4)]),
    ("transpose-axes", lambda a: ea.transpose(a, (1, 2, 0)), [(2, 3, 4)]),
    ("moveaxis", lambda a: ea.moveaxis(a, 0, -1), [(2, 3, 4)]),
    ("sum", ea.sum, [(2, 3)]),
    ("sum-axes", lambda a: ea.sum(a, axis=(0, 2)), [(2, 3, 4)]),
    ("sum-keepdims", lambda a: ea.sum(a, axis=1, keepdims=True), [(2, 3, 4)]),
]


@pytest.mark.parametrize("case", FRONT, ids=[c[0] for c in FRONT])
def test_front_ends(lib, case):
    _, f, shapes = case
    _vjp_all(lib, f, _ops(shapes))


def test_integer_sum_accumulates_as_numpy(lib):
    a = np.array([[100, 100], [100, 27]], dtype=np.int8)
    _check(lib, ea.sum(lib.asarray(a)), np.sum(a))
    _check(lib, ea.trace(lib.asarray(a)), np.trace(a))


# -- random specs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["array_api_strict", "torch"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=einsum_specs())
def test_random_specs(name, case):
    from tests.support.arraylibs import load

    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    if name == "array_api_strict":
        lib.module.set_array_api_strict_flags(api_version="2024.12")
    spec, shapes, seed = case
    ops = _ops(shapes, seed=seed)
    _check(lib, ea.einsum(spec, *[lib.asarray(o) for o in ops]), reference_einsum(spec, *ops))
    _vjp_all(lib, _spec(spec), ops, seed=seed + 1)


# -- sliced contractions (issue 11 on other libraries) ---------------------------------------------

SLICED = [
    ("abc,ade,bdf,cef->", [(4, 4, 4)] * 4, 64),  # scalar result
    ("abc,ade,bdf->cef", [(4, 3, 5), (4, 2, 3), (3, 2, 4)], 20),  # output letters sliced
    ("aabc,ade,bdf,cef->f", [(3, 3, 4, 2), (3, 3, 4), (4, 3, 2), (2, 4, 2)], 10),  # a repeated index
]


@pytest.mark.parametrize("case", SLICED, ids=[c[0] for c in SLICED])
def test_sliced_einsum(lib, case):
    eq, shapes, limit = case
    ops = _ops(shapes)
    _, info = ea.contract_path(eq, *ops, memory_limit=limit)
    assert info.sliced_indices, "the limit must force slicing"
    _vjp_all(lib, _spec(eq, memory_limit=limit), ops)


def test_sliced_second_order(lib):
    eq, shapes, limit = SLICED[1]
    ops = _ops([*shapes, (5, 3, 4)])

    def h(x, y, z, w):  # d/dz <grad_x <einsum(x, y, z), w>, x>: sliced sweeps differentiated
        f = lambda x, y, z: ea.einsum("cef,cef->", ea.einsum(eq, x, y, z, memory_limit=limit), w)
        return ea.grad(lambda z: ea.einsum("abc,abc->", ea.grad(f)(x, y, z), x))(z)

    _check(lib, h(*[lib.asarray(o) for o in ops]), h(*ops), rtol=1e-9)


def test_contract_expression(lib):
    expr = ea.contract_expression("ij,jk,kl->il", (2, 3), (3, 4), (4, 2))
    _vjp_all(lib, expr, _ops([(2, 3), (3, 4), (4, 2)]))


# -- ea.jit --------------------------------------------------------------------------------------


def test_jit(lib):
    f = lambda a, b, c: ea.einsum("ij,jk,kk->ik", a, b, c)
    loss = lambda a, b, c, d: ea.einsum("ij,jk,kk,il->", a, b, c, d)
    ops = _ops([(2, 3), (3, 3), (3, 3), (2, 4)])
    xs = [lib.asarray(o) for o in ops]
    _check(lib, ea.jit(f)(*xs[:3]), f(*ops[:3])._value)
    argnums = (0, 1, 2, 3)
    want = ea.grad(loss, argnums=argnums)(*ops)
    for got, w in zip(ea.jit(ea.grad(loss, argnums=argnums))(*xs), want):
        _check(lib, got, w)
    # a Python number operand, traced weakly: float32 stays float32
    x = ops[0].astype(np.float32)
    scale = ea.jit(lambda x, s: ea.einsum(",ij->ij", s, x))
    _check(lib, scale(lib.asarray(x), 2.0), 2 * x, rtol=1e-6)


# -- the executor's standard-only path, and what einsum refuses -----------------------------------

STANDARD = [
    (("ii",), "i", [(3, 3)]),
    (("iij",), "ji", [(3, 3, 2)]),
    (("ij",), "", [(2, 3)]),
    (("bij", "bjk"), "bki", [(2, 2, 3), (2, 3, 4)]),
    (("", "ij"), "ij", [(), (2, 3)]),
    (("i", "j"), "ij", [(3,), (4,)]),
    (("iji", "j"), "", [(3, 2, 3), (2,)]),
    (("ij", "jk", "kl"), "li", [(2, 3), (3, 4), (4, 2)]),
]


class _WithoutEinsum:
    """A library's namespace with no einsum: `executor.step` takes the standard's path."""

    def __init__(self, xp):
        self._xp = xp

    def __getattr__(self, name):
        if name == "einsum":
            raise AttributeError(name)
        return getattr(self._xp, name)


@pytest.mark.parametrize("dtype", ["float32", "complex128", "int32", "int64"])
def test_standard_path(lib, dtype):
    """The contraction written with permute_dims/reshape/matmul/sum alone (what a library
    without einsum gets) on every library, with numpy's result dtype."""
    from einad import executor
    from einad.arrays import namespace

    if lib.name == "numpy":
        pytest.skip("numpy takes its own executor")
    for ins, out, shapes in STANDARD:
        ops = _ops(shapes, dtype="complex128" if dtype == "complex128" else "float64")
        ops = [(3 * o).astype(dtype) for o in ops]
        xs = [lib.asarray(o) for o in ops]
        want = np.einsum(",".join(ins) + "->" + out, *ops)
        got = executor.step(_WithoutEinsum(namespace(*xs)), ins, out, xs)
        _check(lib, got, want, rtol=1e-5 if dtype == "float32" else 1e-10)


def test_dask_is_never_computed():
    """A sliced gradient and a gradient written onto a diagonal build dask graphs, never run them."""
    from tests.support.arraylibs import load

    lib = load("dask")
    if lib is None:
        pytest.skip("dask is not installed")
    from dask.callbacks import Callback

    computed = []
    ops = [lib.asarray(o) for o in _ops([(3, 3, 4, 2), (3, 3, 4), (4, 3, 2), (2, 4, 2)])]
    f = lambda *xs: ea.einsum("aabc,ade,bdf,cef->", *xs, memory_limit=10)
    with Callback(start=computed.append):
        grads = ea.grad(f, argnums=(0, 1, 2, 3))(*ops)
        grads += ea.grad(lambda a, b: ea.einsum("iibc,ade->", a, b), argnums=(0, 1))(ops[0], ops[1])
        assert not computed, "einad computed a dask array"
        grads[0].compute()  # (the callback does see a compute)
    assert computed
    assert all(lib.owns(x) for x in grads)


def test_two_libraries_refused(lib):
    if lib.name == "numpy":
        pytest.skip("needs a second library")
    with pytest.raises(TypeError, match=r"numpy.*" + ("dask" if lib.name == "dask" else lib.name)):
        ea.einsum("i,i->", np.ones(3), lib.asarray(np.ones(3)))
