"""einad.numpy_api, numpy's functions on Tensors: every numpy function and ufunc einad dispatches,
run on a constant Tensor and traced under ea.grad, against numpy itself.

A case is numpy code (``np.sum(np.sin(x), axis=0)``): run on an ndarray it is the reference,
run on a Tensor it must dispatch to einad. The module runs twice, eager and with every
transformation jitted.
"""

import numpy as np
import pytest

import einad as ea
from einad import numpy_compositions
from einad.core import numpy_functions
from einad.rules import elementwise
from einad.rules.elementwise import TABLE
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, numeric_grad

pytestmark = pytest.mark.usefixtures("jit_mode")

RNG = np.random.default_rng(7)
X = RNG.uniform(0.5, 2.0, (3, 4))  # positive, inside every domain below
Y = RNG.uniform(0.5, 2.0, (3, 4))
V = RNG.uniform(0.5, 2.0, (4,))
I34 = np.array([[2, 0, 3, 1], [1, 1, 0, 2], [3, 3, 2, 0]])

# numpy callable (or (ufunc, method)): a function of x written with numpy, differentiable in x
DIFFERENTIABLE = {
    np.add: lambda x: np.add(x, Y),
    np.subtract: lambda x: np.subtract(Y, x),
    np.multiply: lambda x: np.multiply(x, x),
    np.divide: lambda x: np.divide(1.0, x),
    np.power: lambda x: np.power(x, 2.5),
    np.negative: lambda x: np.negative(x),
    np.positive: lambda x: np.positive(x) * 2.0,
    np.reciprocal: lambda x: np.reciprocal(x),
    np.exp: lambda x: np.exp(x) * 2,
    np.exp2: lambda x: np.exp2(x),
    np.expm1: lambda x: np.expm1(x),
    np.log: lambda x: np.log(x),
    np.log2: lambda x: np.log2(x),
    np.log10: lambda x: np.log10(x),
    np.log1p: lambda x: np.log1p(x),
    np.sin: lambda x: np.sin(x),
    np.cos: lambda x: np.cos(x),
    np.tan: lambda x: np.tan(x / 2),
    np.arcsin: lambda x: np.arcsin(x / 3),
    np.arccos: lambda x: np.arccos(x / 3),
    np.arctan: lambda x: np.arctan(x),
    np.sinh: lambda x: np.sinh(x),
    np.cosh: lambda x: np.cosh(x),
    np.tanh: lambda x: np.tanh(x),
    np.arcsinh: lambda x: np.arcsinh(x),
    np.arccosh: lambda x: np.arccosh(x + 1),
    np.arctanh: lambda x: np.arctanh(x / 3),
    np.sqrt: lambda x: np.sqrt(x),
    np.square: lambda x: np.square(x),
    np.absolute: lambda x: np.abs(x - 1.25),
    np.maximum: lambda x: np.maximum(x, Y),
    np.minimum: lambda x: np.minimum(Y, x),
    np.arctan2: lambda x: np.arctan2(x, Y - 1),
    np.hypot: lambda x: np.hypot(x, Y),
    np.logaddexp: lambda x: np.logaddexp(x, Y),
    np.remainder: lambda x: np.mod(x + 3.5, 2.25),
    np.conjugate: lambda x: np.conj(x) * 3,
    np.matmul: lambda x: np.ones((2, 3)) @ x @ V,
    (np.add, "reduce"): lambda x: np.add.reduce(x, axis=1),
    (np.multiply, "reduce"): lambda x: np.multiply.reduce(x),
    (np.maximum, "reduce"): lambda x: np.maximum.reduce(x, axis=1, keepdims=True),
    (np.minimum, "reduce"): lambda x: np.minimum.reduce(x),
    (np.logaddexp, "reduce"): lambda x: np.logaddexp.reduce(x, axis=1),
    (np.add, "accumulate"): lambda x: np.add.accumulate(x, axis=1),
    (np.multiply, "accumulate"): lambda x: np.multiply.accumulate(x),
    (np.maximum, "accumulate"): lambda x: np.maximum.accumulate(x, axis=1),
    (np.minimum, "accumulate"): lambda x: np.minimum.accumulate(x),
    np.sum: lambda x: np.sum(x, axis=0),
    np.mean: lambda x: np.mean(x, axis=1, keepdims=True),
    np.var: lambda x: np.var(x, axis=0, ddof=1),
    np.std: lambda x: np.std(x),
    np.prod: lambda x: np.prod(x, axis=1),
    np.max: lambda x: np.max(x, axis=0),
    np.amax: lambda x: np.amax(x),
    np.min: lambda x: np.min(x, axis=1),
    np.amin: lambda x: np.amin(x, axis=0, keepdims=True),
    np.cumsum: lambda x: np.cumsum(x, axis=0),
    np.cumprod: lambda x: np.cumprod(x, axis=1),
    np.einsum: lambda x: (
        np.einsum("ij,j->i", x, V) + np.einsum("ij->i", x, dtype=np.complex128, order="C").real
    ),
    np.dot: lambda x: np.dot(x, V),
    np.vdot: lambda x: np.vdot(x, Y),
    np.inner: lambda x: np.inner(x, Y),
    np.outer: lambda x: np.outer(x[0], V),
    np.tensordot: lambda x: np.tensordot(x, Y, axes=([1], [1])),
    np.trace: lambda x: np.trace(x, offset=1),
    np.diagonal: lambda x: np.diagonal(x),
    np.transpose: lambda x: np.transpose(x),
    np.moveaxis: lambda x: np.moveaxis(x[None], 0, -1),
    np.tril: lambda x: np.tril(x, -1),
    np.triu: lambda x: np.triu(x, 1),
    np.swapaxes: lambda x: np.swapaxes(x, 0, 1),
    np.reshape: lambda x: np.reshape(x, (2, 6)),
    np.ravel: lambda x: np.ravel(x),
    np.squeeze: lambda x: np.squeeze(x[:, :1]),
    np.expand_dims: lambda x: np.expand_dims(x, 1),
    np.broadcast_to: lambda x: np.broadcast_to(x[0], (2, 4)),
    np.concatenate: lambda x: np.concatenate([x, Y, x], axis=1),
    np.stack: lambda x: np.stack([x, Y], axis=-1),
    np.vstack: lambda x: np.vstack([x, V]),
    np.hstack: lambda x: np.hstack([x[0], V]),
    np.split: lambda x: np.split(x, 2, axis=1)[1],
    np.flip: lambda x: np.flip(x, axis=0),
    np.clip: lambda x: np.clip(x, 0.8, 1.5),
    np.sort: lambda x: np.sort(x, axis=0),
    np.take: lambda x: np.take(x, [1, 1, 0], axis=0),
    np.take_along_axis: lambda x: np.take_along_axis(x, I34, axis=1),
    np.pad: lambda x: np.pad(x, 1, mode="edge"),
    np.roll: lambda x: np.roll(x, 1, axis=1),
    np.diff: lambda x: np.diff(x, 2, axis=1, prepend=0.5) + np.diff(x, axis=0, append=Y[:1]).sum(),
    np.tile: lambda x: np.tile(x, 2),
    np.repeat: lambda x: np.repeat(x, 2, axis=0),
    np.real: lambda x: np.real(x),
    np.imag: lambda x: np.imag(x) + x,
    np.angle: lambda x: np.angle(x) + x,
    np.copy: lambda x: np.copy(x),
    np.atleast_1d: lambda x: np.atleast_1d(x[0, 0]) * 2,
    np.atleast_2d: lambda x: np.atleast_2d(x[0], V)[0] + np.atleast_2d(x[1]),
    np.atleast_3d: lambda x: np.atleast_3d(x) + np.atleast_3d(x[0])[0],
    np.diag: lambda x: np.diag(x[0], -1)[:4, :4] + np.diag(np.diag(x, 1), 1),
    np.kron: lambda x: np.kron(x[:2, :2], Y[0]),
    # numpy.linalg, as einad.linalg
    np.linalg.cholesky: lambda x: np.linalg.cholesky(x @ x.T + np.eye(3)),
    np.linalg.cond: lambda x: np.linalg.cond(x),
    np.linalg.cross: lambda x: np.linalg.cross(x[:, :3], Y[:, 1:]),
    np.linalg.det: lambda x: np.linalg.det(x[:, :3]),
    np.linalg.diagonal: lambda x: np.linalg.diagonal(x, offset=1),
    np.linalg.eig: lambda x: np.abs(np.linalg.eig(x[:, :3]).eigenvalues),
    np.linalg.eigh: lambda x: np.linalg.eigh(x @ x.T).eigenvalues,
    np.linalg.eigvals: lambda x: np.abs(np.linalg.eigvals(x[:, 1:])),
    np.linalg.eigvalsh: lambda x: np.linalg.eigvalsh(x @ x.T, UPLO="U"),
    np.linalg.inv: lambda x: np.linalg.inv(x[:, :3]),
    np.linalg.lstsq: lambda x: np.linalg.lstsq(x.T, V, rcond=None)[0],
    np.linalg.matmul: lambda x: np.linalg.matmul(x, Y.T),
    np.linalg.matrix_norm: lambda x: np.linalg.matrix_norm(x, ord=2),
    np.linalg.matrix_power: lambda x: np.linalg.matrix_power(x[:, :3], 3),
    np.linalg.matrix_transpose: lambda x: np.linalg.matrix_transpose(x),
    np.linalg.multi_dot: lambda x: np.linalg.multi_dot([x, Y.T, x]),
    np.linalg.norm: lambda x: np.linalg.norm(x, axis=1),
    np.linalg.outer: lambda x: np.linalg.outer(x[0], V),
    np.linalg.pinv: lambda x: np.linalg.pinv(x),
    np.linalg.qr: lambda x: np.linalg.qr(x.T).R,
    np.linalg.slogdet: lambda x: np.linalg.slogdet(x[:, :3]).logabsdet,
    np.linalg.solve: lambda x: np.linalg.solve(x[:, :3], V[:3]),
    np.linalg.svd: lambda x: np.linalg.svd(x).S,
    np.linalg.svdvals: lambda x: np.linalg.svdvals(x),
    np.linalg.tensordot: lambda x: np.linalg.tensordot(x, Y, axes=([1], [1])),
    np.linalg.tensorinv: lambda x: np.linalg.tensorinv(x[:, :3] + 2 * np.eye(3), ind=1),
    np.linalg.tensorsolve: lambda x: np.linalg.tensorsolve(x[:, :3] + 2 * np.eye(3), V[:3]),
    np.linalg.trace: lambda x: np.linalg.trace(x, offset=1),
    np.linalg.vecdot: lambda x: np.linalg.vecdot(x, Y),
    np.linalg.vector_norm: lambda x: np.linalg.vector_norm(x, ord=3),
}

# numpy callable: a function of x whose result is an integer, boolean or metadata (no derivative)
CONSTANT = {
    np.equal: lambda x: np.equal(x, x[0]),
    np.not_equal: lambda x: np.not_equal(x[0], x),
    np.less: lambda x: np.less(x, 1.0),
    np.less_equal: lambda x: np.less_equal(x, Y),
    np.greater: lambda x: np.greater(x, 1.0),
    np.greater_equal: lambda x: np.greater_equal(Y, x),
    np.isfinite: lambda x: np.isfinite(x),
    np.isnan: lambda x: np.isnan(x),
    np.isinf: lambda x: np.isinf(x),
    np.sign: lambda x: np.sign(x - 1),
    np.floor: lambda x: np.floor(x * 3),
    np.ceil: lambda x: np.ceil(x * 3),
    np.rint: lambda x: np.rint(x * 3),
    np.round: lambda x: np.round(x, 1),
    np.around: lambda x: np.around(x * 3),
    np.argsort: lambda x: np.argsort(x, axis=0),
    np.argmax: lambda x: np.argmax(x, axis=1),
    np.argmin: lambda x: np.argmin(x),
    np.any: lambda x: np.any(x > 1.0, axis=0, keepdims=True),
    np.all: lambda x: np.all(x > 0.5, axis=1),
    np.floor_divide: lambda x: np.floor_divide(x * 6 - 6, Y - 1.25),  # (both signs, a zero quotient)
    np.signbit: lambda x: np.signbit(np.floor(x) - 1.0) != np.signbit(-(x - x)),  # (-0.0 among them)
    # the bitwise ufuncs, on integers made from x (and on masks: the logical operations)
    np.bitwise_and: lambda x: np.bitwise_and((x * 8).astype(np.int64), 6),
    np.bitwise_or: lambda x: np.bitwise_or(np.int16(9), (x * 8).astype(np.int16)),
    np.bitwise_xor: lambda x: np.bitwise_xor(x > 1.0, np.greater(Y, 1.0)),
    np.invert: lambda x: np.invert((x * 8).astype(np.uint8)),
    np.left_shift: lambda x: np.left_shift((x * 8).astype(np.int32), np.arange(4)),
    np.right_shift: lambda x: np.right_shift(1000, (x * 4).astype(np.int64)),
    np.bitwise_count: lambda x: np.bitwise_count((x * 8 - 9).astype(np.int16)),  # (of |x|: negatives too)
    np.gcd: lambda x: np.gcd((x * 8).astype(np.int64), np.array([12, -18, 0, 7])),
    np.lcm: lambda x: np.lcm(np.int8(-6), (x * 8).astype(np.int8)),
    (np.logical_and, "reduce"): lambda x: np.logical_and.reduce(np.greater(x, 0.7), axis=0),
    (np.logical_or, "reduce"): lambda x: np.logical_or.reduce(np.greater(x, 1.5)),
    np.shape: lambda x: np.shape(x),
    np.ndim: lambda x: np.ndim(x),
    np.size: lambda x: np.size(x, 1),
    np.result_type: lambda x: np.result_type(x, 1.0),
    np.iscomplexobj: lambda x: np.iscomplexobj(x),
    np.isrealobj: lambda x: np.isrealobj(x),
    np.linalg.matrix_rank: lambda x: np.linalg.matrix_rank(x[:, :3] - x[:, 3:]),
    np.isclose: lambda x: np.isclose(x, np.where(Y > 1.0, x + 1e-9, Y), rtol=1e-7),
    np.allclose: lambda x: np.allclose(x, x + 1e-9),
    np.count_nonzero: lambda x: np.count_nonzero(x > 1.0, axis=1),
    np.zeros_like: lambda x: np.zeros_like(x),
    np.ones_like: lambda x: np.ones_like(x, dtype=np.float32),
    np.empty_like: lambda x: np.empty_like(x).shape,
    np.full_like: lambda x: np.full_like(x, 3.0),
}


# Every other entry of the elementwise table that numpy has under the same name, as written:
# x in (0.5, 2), and y = Y for a binary one (a new table entry is tested here by itself).
for _name in TABLE:
    _f = getattr(np, _name, None)
    if _f in numpy_functions and _f not in DIFFERENTIABLE and _f not in CONSTANT:
        _cases = CONSTANT if _name in {*elementwise.CONSTANT, *elementwise.PREDICATES} else DIFFERENTIABLE
        _cases[_f] = (lambda x, _f=_f: _f(x, Y)) if getattr(_f, "nin", 1) == 2 else (lambda x, _f=_f: _f(x))


def _key(k):
    return f"{k[0].__name__}.{k[1]}" if isinstance(k, tuple) else k.__name__


OUTERS = [k for k in numpy_functions if isinstance(k, tuple) and k[1] == "outer"]


@pytest.mark.parametrize("key", OUTERS, ids=_key)
def test_every_binary_ufuncs_outer_is_numpys_and_differentiable(key):
    """``np.add.outer(t, u)`` and every binary ufunc's outer (TypeErrors before): the ufunc
    on every pair, as numpy's; differentiable where the ufunc is."""
    ufunc = key[0]
    a, b = X[0], Y[:2]  # (4,) against (2, 4): a result of shape (4, 2, 4)
    if ufunc is np.ldexp:  # (its exponents are integers)
        b = np.arange(-4, 4).reshape(2, 4)
    integers = (np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift, np.gcd, np.lcm)
    if ufunc in integers:
        a, b = (a * 8).astype(np.int64), np.arange(8).reshape(2, 4)
    want = ufunc.outer(a, b)
    got = ufunc.outer(ea.tensor(a), b)
    got = np.asarray(got.numpy() if isinstance(got, ea.Tensor) else got)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-12)
    if want.dtype.kind == "f" and ufunc not in (np.floor_divide, np.fmod, np.remainder, np.heaviside):
        g = ea.grad(lambda x: np.sum(ufunc.outer(x, b)))(a)
        assert_close(g, numeric_grad(lambda x: np.sum(ufunc.outer(x, b)), a), rtol=1e-5, atol=1e-6)


ATS = [k for k in numpy_functions if isinstance(k, tuple) and k[1] == "at"]
# ufuncs whose derivative is zero or undefined at the points below (their values are still numpy's)
STEPS = {np.floor, np.ceil, np.rint, np.trunc, np.fix, np.sign, np.floor_divide, np.fmod, np.remainder}
STEPS |= {np.heaviside, np.spacing, np.nextafter, np.divmod}


@pytest.mark.parametrize("key", ATS, ids=_key)
def test_every_ufuncs_at_writes_into_a_tensor_as_numpy_into_an_array(key):
    """``np.add.at(t, idx, b)`` and every ufunc's ``at`` (TypeErrors before): the Tensor takes
    numpy's values, the ufunc applied in turn where an index repeats, and the call returns None;
    differentiable where the ufunc is (central differences, in the tensor written into and the
    operand); an ndarray to write into is refused, not written."""
    ufunc = key[0]
    idx = ([0, 2, 0], [1, 3, 1])  # (0, 1) twice
    a, b = X.copy(), Y[0, :3].copy()
    floating = f"{'d' * ufunc.nin}->d" in ufunc.types
    if not floating:
        a, b = (X * 8).astype(np.int64), np.array([1, 2, 3])
    if ufunc is np.ldexp:
        b = np.array([1, -2, 3])
    operand = () if ufunc.nin == 1 else (b,)
    want = a.copy()
    with np.errstate(all="ignore"):
        ufunc.at(want, idx, *operand)
        t = ea.tensor(a)
        assert ufunc.at(t, idx, *operand) is None
    assert t.dtype == want.dtype
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-12, equal_nan=True)
    np.testing.assert_array_equal(a, X if floating else (X * 8).astype(np.int64))
    if floating and ufunc not in STEPS and np.all(np.isfinite(want)):

        def loss(x, *operand):
            h = x * 1.0
            ufunc.at(h, idx, *operand)
            return np.sum(h * h)

        ea.gradcheck(loss, a, *operand)
    if operand:
        with pytest.raises(TypeError, match=r"writes into its first argument, a ndarray"):
            ufunc.at(a.copy(), idx, ea.tensor(b))


def test_every_dispatched_function_is_tested():
    # (the compositions are tested by tests/test_numpy_compositions.py, which checks it has them all)
    compositions = {*numpy_compositions.FUNCTIONS, *numpy_compositions.UFUNCS}
    outers, ats = set(OUTERS), set(ATS)  # (every binary ufunc's outer, every ufunc's at: swept above)
    transforms = {getattr(np.fft, name) for name in ea.fft.__all__}  # (tests/test_fft.py has them all)
    swept = set(DIFFERENTIABLE) | set(CONSTANT) | compositions | outers | ats | transforms
    assert set(numpy_functions) == swept


@pytest.mark.parametrize("key", list(DIFFERENTIABLE), ids=_key)
def test_differentiable_numpy_function_on_a_constant_tensor(key):
    f = DIFFERENTIABLE[key]
    out = f(ea.tensor(X))
    assert isinstance(out, ea.Tensor)
    expected = f(X)
    assert out.dtype == expected.dtype
    assert_close(out.numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("key", list(DIFFERENTIABLE), ids=_key)
def test_differentiable_numpy_function_traced(key):
    """The numpy code runs traced under ea.grad: its gradient is numpy's by central differences."""
    f = DIFFERENTIABLE[key]
    w = np.linspace(0.5, 1.5, np.size(f(X))).reshape(np.shape(f(X)))
    g = ea.grad(lambda x: np.sum(f(x) * w))(X)
    assert_close(g, numeric_grad(lambda x: np.sum(f(x) * w), X), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("key", list(CONSTANT), ids=_key)
def test_non_differentiable_numpy_function(key):
    f = CONSTANT[key]
    expected = f(X)
    got = f(ea.tensor(X))
    if isinstance(expected, np.ndarray):
        got = np.asarray(got.numpy() if isinstance(got, ea.Tensor) else got)
        assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
        np.testing.assert_array_equal(got, expected)
        # traced: under jit it is an equation of the program, replayed on new inputs
        np.testing.assert_array_equal(compiled(ea.jit(f))(Y), f(Y))
    else:
        assert got == expected
    # on a traced Tensor too, inside a differentiated function (which it does not change)
    assert_close(ea.grad(lambda x: (f(x), np.sum(x * 2.0))[1])(X), np.full_like(X, 2.0))


def test_comparisons_give_booleans_as_operators_do():
    t = ea.tensor(X)
    for op, fn in ((np.greater, lambda a: a > 1.0), (np.less_equal, lambda a: a <= 1.0)):
        got, want = op(t, 1.0), fn(t)
        assert type(got) is type(want) and np.array_equal(got, want)
    inside = []
    ea.grad(lambda x: inside.append((np.greater(x, 1.0), x > 1.0)) or np.sum(x))(X)
    (got, want), *_ = inside
    assert type(got) is type(want) and got.dtype == bool  # numpy booleans, or a staged Tensor under jit


def test_mixed_arithmetic_with_the_ndarray_on_either_side():
    a = np.arange(4.0)
    f = lambda x: np.sum(a * x + x * a - a / x + a @ x + np.float64(2.0) * x)
    ref = lambda x: np.sum(a * x + x * a - a / x + a @ x + 2.0 * x)
    assert_close(ea.grad(f)(V), numeric_grad(ref, V))
    assert isinstance(a - ea.tensor(V), ea.Tensor)


def test_asarray_of_a_constant_tensor_still_works():
    t = ea.tensor(X)
    np.testing.assert_array_equal(np.asarray(t), X)
    np.testing.assert_array_equal(np.array(t, dtype=np.float32), X.astype(np.float32))
    with pytest.raises(TypeError, match="traced Tensor"):
        ea.grad(lambda x: np.sum(np.asarray(x)))(X)


def test_float32_stays_float32():
    x = X.astype(np.float32)
    f = lambda x: np.sum(np.exp(x) * 2.0 + np.mean(x, axis=0) + np.sort(x, axis=1) * np.float32(3))
    assert f(ea.tensor(x)).dtype == np.float32
    assert ea.grad(f)(x).dtype == np.float32


def test_a_numpy_program_under_every_transformation():
    def loss(w, b):
        h = np.tanh(np.einsum("ij,j->i", X, w) + b)
        return np.mean(np.square(h - 0.5)) + 0.1 * np.sum(np.abs(w))

    w, b = V, 0.3
    ref_g = numeric_grad(lambda w: loss(w, b), w)
    assert_close(ea.grad(loss)(w, b), ref_g)
    assert_close(ea.jacfwd(loss)(w, b), ref_g)
    assert_close(ea.jacrev(loss)(w, b), ref_g)
    h = ea.hessian(loss)(w, b)
    assert_close(h, h.T)


# -- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda t: np.i0(t[0]), "numpy.i0"),
        (lambda t: np.shares_memory(t, t), "numpy.shares_memory"),
        (lambda t: np.maximum.reduceat(t, [0, 2], axis=1), "numpy.maximum.reduceat"),
        (lambda t: np.add.reduceat(t, [0, 1]), "numpy.add.reduceat"),
        (lambda t: np.subtract.reduce(t), "numpy.subtract.reduce"),
    ],
)
def test_a_numpy_function_einad_does_not_implement_is_a_type_error_naming_it(call, name):
    with pytest.raises(TypeError, match=rf"einad does not implement {name}\b"):
        ea.grad(lambda x: np.sum(call(x)))(X)
    # on a constant Tensor no derivative is at stake: numpy runs on its value
    np.testing.assert_array_equal(call(ea.tensor(X)), call(X))


@pytest.mark.parametrize(
    "call",
    [
        lambda t: np.sin(t, out=np.zeros((3, 4))),
        lambda t: np.sum(t, out=np.zeros(())),
        lambda t: np.add.reduce(t, out=np.zeros(4)),
        lambda t: np.add(np.zeros((3, 4)), t, out=np.zeros((3, 4))),
    ],
)
def test_out_an_ndarray_is_a_type_error(call):
    with pytest.raises(TypeError, match="out="):
        call(ea.tensor(X))


def test_reshapes_copy_argument_is_numpys():
    """numpy 2.1's ``np.reshape(a, shape, copy=...)``: True gives a Tensor of its own, False a
    view or numpy's ValueError (a transpose flattened), None a view where numpy's is; a program
    writing through each leaves numpy's values, and its gradient central differences'."""

    def program(a):
        np.reshape(a, (12,), copy=True)[0] = -1.0  # (a copy: a stays)
        np.reshape(a, (6, 2), copy=False)[1] = 0.5
        np.reshape(a[1], (2, 2), copy=None)[0] *= 3.0
        np.reshape(a.T, (12,), copy=None)[0] = 9.0  # (numpy copies: a stays)
        return a

    want = program(X.copy())
    np.testing.assert_array_equal(program(ea.tensor(X)).numpy(), want)
    with pytest.raises(ValueError, match="Unable to avoid creating a copy"):
        np.reshape(ea.tensor(X).T, (12,), copy=False)
    assert ea.gradcheck(lambda x: ea.sum(program(x * x) * x), X)


def _written_out(a, out):
    """numpy's out= idioms, each result written into `out`'s arrays (made by `out` of a shape):
    ndarrays for numpy, Tensors for einad. Returns every array written and what each call
    returned, to compare."""
    w = out((3, 4))
    got = [np.multiply(a, a, out=w), np.sin(w, out=w)]  # in place, as numpy code writes it
    s, r = out(()), out((4,))
    got += [np.sum(w, out=s), np.add.reduce(a, out=r), np.add(1.0, a[0], out=r)]  # (+ broadcast)
    q, m = out((4,)), out((4,))
    got += [*np.divmod(a[1] * 7.0, 2.0, out=(q, m)), np.clip(a, 0.6, 1.5, out=out((3, 4)))]
    return [w, s, r, q, m, *got]


def test_out_a_tensor_is_written_as_numpy_writes_an_array():
    """``out=`` a Tensor: ufuncs, their reduce, reductions and other numpy functions write the
    result into it (``t[...] = v``, traced inside transformations) and return it, as numpy
    returns its out= array; a ufunc's output that 'same_kind' casting refuses is refused."""
    want = _written_out(X, np.zeros)
    got = _written_out(ea.tensor(X), lambda shape: ea.tensor(np.zeros(shape)))
    for g, w in zip(got, want):
        assert type(g) is ea.Tensor
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-14)
    t = ea.tensor(X)
    assert np.exp(t, out=t) is t and np.add(t, 1.0, out=(t,)) is t
    np.testing.assert_allclose(t.numpy(), np.exp(X) + 1.0)
    with pytest.raises(TypeError, match="'same_kind'"):
        np.add(t, 0.5, out=ea.tensor(np.zeros((3, 4), int)))

    def loss(x):
        return ea.sum(_written_out(x, lambda shape: ea.tensor(np.zeros(shape)))[0] * x)

    assert ea.gradcheck(loss, X)
    assert_close(ea.jit(ea.grad(loss))(X), ea.grad(loss)(X))


def test_writing_a_tensor_into_an_ndarray_in_place_is_a_type_error():
    a = np.zeros(4)
    with pytest.raises(TypeError, match="a = a \\+ t"):
        a += ea.tensor(V)
    np.testing.assert_array_equal(a, np.zeros(4))


def test_ufunc_methods_refuse_what_numpy_would_refuse_and_name_what_they_do_not_take():
    """np.add.accumulate(x, axis=None) is numpy's ValueError for more than one axis (never a
    flattened scan), and a 1-D array's axis 0; initial= and where= name the method."""
    with pytest.raises(ValueError, match="multiple axes"):
        np.add.accumulate(X, axis=None)  # numpy itself
    with pytest.raises(ValueError, match="multiple axes"):
        np.add.accumulate(ea.tensor(X), axis=None)
    np.testing.assert_array_equal(np.add.accumulate(ea.tensor(V), axis=None), np.add.accumulate(V, axis=None))
    for call, match in (
        (lambda t: np.add.reduce(t, initial=1.0), "numpy.add.reduce .*initial=1.0"),
        (lambda t: np.maximum.reduce(t, where=t > 1, initial=0.0), "numpy.maximum.reduce .*(where|initial)="),
        (lambda t: np.multiply.reduce(t, 1, None, None, False, 2.0), "numpy.multiply.reduce .*initial=2.0"),
    ):
        with pytest.raises(TypeError, match=match):
            call(ea.tensor(X))
    np.testing.assert_array_equal(np.add.reduce(ea.tensor(X), where=True), np.add.reduce(X))


def test_numpy_never_writes_into_a_tensors_array():
    """np.array(t) is a copy of its own; np.asarray(t), t.numpy() and numpy's fallback on a
    constant Tensor see the tensor's array read-only: a write through them would change the
    tensor, every graph that saved it, and the user's array when the tensor is a view of it."""
    x = ea.tensor(V, requires_grad=True)
    e = ea.exp(x)  # exp's derivative reads its saved result
    copy = np.array(e)
    copy[:] = 0.0
    for view in (np.asarray(e), e.numpy()):
        with pytest.raises(ValueError, match="read-only"):
            view[:] = 0.0
    np.testing.assert_array_equal(np.asarray(e), np.exp(V))
    ea.sum(e).backward()
    assert_close(x.grad, np.exp(V))
    a = X.copy()
    t = ea.reshape(a, (4, 3))  # a view of the user's array
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(t).sort(axis=0)
    # numpy's writers give the Tensor a new value (tests/test_numpy_compositions.py), never
    # writing into its array, which is the user's
    want = X.reshape(4, 3).copy()
    for write in (
        lambda y: np.put(y, [0], 5.0),
        lambda y: np.fill_diagonal(y, 5.0),
        lambda y: np.add.at(y, [0, 0], 1.0),
        lambda y: np.multiply(y, 2.0, out=y),
        lambda y: y[1:].fill(-1.0),  # (numpy's method, through a view)
    ):
        write(t)
        write(want)
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(a, X)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda t: np.sin(t, where=np.ones((3, 4), bool)), "numpy.sin.*where"),
        (lambda t: np.add(t, t, dtype=np.float32), "numpy.add.*dtype"),
        (lambda t: np.cumsum(t, out=np.empty(12)), "numpy.cumsum.*out"),
        (
            lambda t: np.einsum("ij->i", t, dtype=np.float32),
            "cast an operand of dtype float64 to float32.*'safe'",
        ),
        (lambda t: np.sort(t, order="x"), "order"),
        (lambda t: np.einsum_path("ij,jk", t, t.T, einsum_call=True), "einsum_call"),
    ],
)
def test_arguments_einad_cannot_honour_are_type_errors_naming_the_function(call, match):
    with pytest.raises(TypeError, match=match):
        call(ea.tensor(X))


@pytest.mark.parametrize(
    "call",
    [
        lambda a: np.sum(a, 0, np.float32),
        lambda a: np.sum(a, 1, None, None, True),
        lambda a: np.mean(a, 0, None, None, True),
        lambda a: np.max(a, 1, None, True),
        lambda a: np.var(a, None, None, None, 1),
        lambda a: np.cumsum(a, 1, np.float32),
        lambda a: np.take(a, [1, 13], None, None, "wrap"),
        lambda a: np.trace(a, 1, 0, 1, np.float32),
    ],
)
def test_numpys_positional_dtype_out_and_keepdims_mean_what_they_mean_in_numpy(call):
    """Arguments given in numpy's places for dtype, out, keepdims or mode reached einad's
    functions by position: ``np.sum(t, 0, np.float32)`` set keepdims (a (1, 3) float64 result,
    silently), ``np.max(t, 1, None, True)`` was refused. From numpy's dtype or out on, they go by
    numpy's names now."""
    want = call(X)
    got = call(ea.tensor(X))
    assert np.shape(got) == want.shape and np.asarray(got).dtype == want.dtype
    assert_close(got, want)


def test_isclose_and_allclose_follow_numpy_at_infinities_and_nans_and_stage_under_jit():
    """np.isclose/np.allclose on Tensors were numpy's on the values only (a TypeError inside a
    differentiated function): now einad operations, with numpy's rules for infinities (equal
    only with the same sign) and nans (`equal_nan`), no inf - inf warning, a Python bool from
    allclose as numpy gives, and under jit a staged boolean that ea.where can use."""
    a = np.array([1.0, np.inf, -np.inf, np.nan, 2.0, 1e-9, np.inf])
    b = np.array([1.0 + 1e-6, np.inf, np.inf, np.nan, 2.1, 0.0, 5.0])
    for kwargs in ({}, {"equal_nan": True}, {"rtol": 0.1}, {"atol": 0.0}):
        np.testing.assert_array_equal(
            np.isclose(ea.tensor(a), b, **kwargs).numpy(), np.isclose(a, b, **kwargs)
        )
        np.testing.assert_array_equal(
            np.isclose(b, ea.tensor(a), **kwargs).numpy(), np.isclose(b, a, **kwargs)
        )
    same = np.allclose(ea.tensor(a), a, equal_nan=True)
    assert same is True and np.allclose(ea.tensor(a), a) is False
    pick = ea.jit(lambda x, y: ea.where(np.allclose(x, y), x, -x))
    assert_close(pick(X, X + 1e-9), X)
    assert_close(pick(X, X + 1.0), -X)
    # under vmap, too, a batched boolean (a TypeError reading a mapped value before)
    mapped = ea.vmap(lambda x, y: np.allclose(x, y))(X, np.stack([X[0], X[1] + 1.0, *X[2:]]))
    np.testing.assert_array_equal(mapped, [True, False] + [True] * (len(X) - 2))


def test_numpy_2_keywords_of_the_variance_and_the_joins():
    """numpy 2's var/std ``mean=`` and the array API's ``correction=``, and the joins' ``dtype=``
    and ``casting=`` (TypeErrors before); the same on einad's functions and methods."""
    m = X.mean(axis=1, keepdims=True)
    for name in ("var", "std"):
        assert_close(getattr(np, name)(ea.tensor(X), axis=1, mean=m), getattr(np, name)(X, axis=1, mean=m))
        assert_close(getattr(ea.tensor(X), name)(correction=1), getattr(np, name)(X, correction=1))
        assert_close(
            getattr(ea, name)(X, axis=0, correction=0.5), getattr(np, name)(X, axis=0, correction=0.5)
        )
        with pytest.raises(ValueError, match="ddof and correction"):
            getattr(ea, name)(X, ddof=1, correction=1)
    # a mean given is differentiated as given: computed from x, the gradient is var's own
    g = ea.grad(lambda x: ea.var(x, axis=1, mean=ea.mean(x, axis=1, keepdims=True)).sum())(X)
    assert_close(g, ea.grad(lambda x: ea.var(x, axis=1).sum())(X))
    t32 = ea.tensor(X.astype(np.float32))
    for join, args in [
        (np.concatenate, ([t32, Y], 1)),
        (np.stack, ([t32, t32], -1)),
        (np.vstack, ([t32, Y],)),
        (np.hstack, ([t32, V[:3, None]],)),
    ]:
        for dtype in (np.float32, np.complex128):
            got = join(*args, dtype=dtype)
            want = join(*[[np.asarray(a) for a in args[0]], *args[1:]], dtype=dtype)
            assert got.dtype == want.dtype
            assert_close(got, want)
    with pytest.raises(
        TypeError, match="numpy.concatenate: cannot cast an operand of dtype float64 to int32"
    ):
        np.concatenate([ea.tensor(X)], dtype=np.int32)
    assert np.concatenate([ea.tensor(X)], dtype=np.int32, casting="unsafe").dtype == np.int32
