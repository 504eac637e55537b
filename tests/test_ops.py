"""Elementwise, reduction and structural operations: values against numpy,
gradients against closed forms and float64 central differences."""

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close, check_op, numeric_grad

pytestmark = pytest.mark.usefixtures("jit_mode")


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# name: (numpy reference, closed-form derivative, low, high of the test domain)
UNARY = {
    "negative": (np.negative, lambda x: -np.ones_like(x), -2, 2),
    "exp": (np.exp, np.exp, -2, 2),
    "log": (np.log, lambda x: 1 / x, 0.2, 3),
    "log1p": (np.log1p, lambda x: 1 / (1 + x), -0.5, 2),
    "expm1": (np.expm1, np.exp, -2, 2),
    "sin": (np.sin, np.cos, -3, 3),
    "cos": (np.cos, lambda x: -np.sin(x), -3, 3),
    "tan": (np.tan, lambda x: 1 / np.cos(x) ** 2, -1.2, 1.2),
    "tanh": (np.tanh, lambda x: 1 - np.tanh(x) ** 2, -2, 2),
    "sinh": (np.sinh, np.cosh, -2, 2),
    "cosh": (np.cosh, np.sinh, -2, 2),
    "arcsin": (np.arcsin, lambda x: 1 / np.sqrt(1 - x**2), -0.9, 0.9),
    "arccos": (np.arccos, lambda x: -1 / np.sqrt(1 - x**2), -0.9, 0.9),
    "arctan": (np.arctan, lambda x: 1 / (1 + x**2), -3, 3),
    "sqrt": (np.sqrt, lambda x: 0.5 / np.sqrt(x), 0.2, 3),
    "square": (np.square, lambda x: 2 * x, -2, 2),
    "abs": (np.abs, np.sign, -2, 2),
    "sign": (np.sign, np.zeros_like, -2, 2),
    "sigmoid": (_sigmoid, lambda x: _sigmoid(x) * (1 - _sigmoid(x)), -4, 4),
    "relu": (lambda x: np.maximum(x, 0), lambda x: (x > 0).astype(x.dtype), -2, 2),
    "softplus": (lambda x: np.log1p(np.exp(x)), _sigmoid, -4, 4),
}


def _domain(lo, hi, shape=(2, 3), seed=0, dtype=np.float64):
    x = np.random.default_rng(seed).uniform(lo, hi, shape)
    x[np.abs(x) < 0.05] = 0.3  # keep away from kinks (abs, relu, sign)
    return x.astype(dtype)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_value_and_gradient(name):
    ref, deriv, lo, hi = UNARY[name]
    op = getattr(ea, name)
    x = _domain(lo, hi)
    check_op(op, ref, x)
    g = ea.grad(lambda x: ea.sum(op(x)))(x)
    assert_close(g, deriv(x))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float32_stays_float32(name):
    ref, deriv, lo, hi = UNARY[name]
    op = getattr(ea, name)
    x = _domain(lo, hi, dtype=np.float32)
    out = op(x)
    assert out.dtype == np.float32
    assert_close(out.numpy(), ref(x.astype(np.float64)).astype(np.float32), rtol=1e-5, atol=1e-6)
    g = ea.grad(lambda x: ea.sum(op(x)))(x)
    assert g.dtype == np.float32
    assert_close(g, deriv(x.astype(np.float64)).astype(np.float32), rtol=1e-4, atol=1e-5)


# name: (numpy reference, d/dx, d/dy)
BINARY = {
    "add": (np.add, lambda x, y: np.ones_like(x * y), lambda x, y: np.ones_like(x * y)),
    "subtract": (np.subtract, lambda x, y: np.ones_like(x * y), lambda x, y: -np.ones_like(x * y)),
    "multiply": (np.multiply, lambda x, y: y + 0 * x, lambda x, y: x + 0 * y),
    "divide": (np.divide, lambda x, y: 1 / y + 0 * x, lambda x, y: -x / y**2),
    "power": (np.power, lambda x, y: y * x ** (y - 1), lambda x, y: x**y * np.log(x)),
    "maximum": (np.maximum, lambda x, y: (x > y) + 0.0, lambda x, y: (y > x) + 0.0),
    "minimum": (np.minimum, lambda x, y: (x < y) + 0.0, lambda x, y: (y < x) + 0.0),
}

BROADCASTS = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((3,), (2, 3)), ((2, 3), ()), ((), (4,))]


@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_value_and_gradient_with_broadcasting(name, shapes):
    ref, dx, dy = BINARY[name]
    op = getattr(ea, name)
    x = _domain(0.5, 2.0, shapes[0], seed=1)
    y = _domain(0.5, 2.0, shapes[1], seed=2)
    check_op(op, ref, x, y)
    # The gradient of sum(op(x, y)) is the partial derivative summed back to each input's shape.
    full = np.broadcast_shapes(x.shape, y.shape)
    X, Y = np.broadcast_to(x, full), np.broadcast_to(y, full)
    sx, sy = ea.grad(lambda x, y: ea.sum(op(x, y)), (0, 1))(x, y)
    assert sx.shape == x.shape and sy.shape == y.shape
    assert_close(sx.sum(), dx(X, Y).sum())
    assert_close(sy.sum(), dy(X, Y).sum())
    assert_close(sx, numeric_grad(lambda x: np.sum(ref(x, y)), x))
    assert_close(sy, numeric_grad(lambda y: np.sum(ref(x, y)), y))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_closed_form_gradient(name):
    _, dx, dy = BINARY[name]
    op = getattr(ea, name)
    x = _domain(0.5, 2.0, (2, 3), seed=3)
    y = _domain(0.5, 2.0, (2, 3), seed=4)
    gx, gy = ea.grad(lambda x, y: ea.sum(op(x, y)), (0, 1))(x, y)
    assert_close(gx, dx(x, y))
    assert_close(gy, dy(x, y))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_float32_stays_float32(name):
    op = getattr(ea, name)
    x = _domain(0.5, 2.0, (2, 3), seed=5, dtype=np.float32)
    y = _domain(0.5, 2.0, (3,), seed=6, dtype=np.float32)
    for args in ((x, y), (x, 2.0), (3.0, y)):
        out = op(*args)
        assert out.dtype == np.float32, args
        assert_close(out.numpy(), getattr(np, name)(*args), rtol=1e-6)
    gx, gy = ea.grad(lambda x, y: ea.sum(op(x, y)), (0, 1))(x, y)
    assert gx.dtype == np.float32 and gy.dtype == np.float32
    assert gx.shape == x.shape and gy.shape == y.shape
    assert ea.grad(lambda x: ea.sum(op(x, 2.0)))(x).dtype == np.float32


def test_power_with_special_integer_exponents():
    x = np.array([-1.5, 0.0, 2.0])
    for p in (0, 1, 2, 3):
        assert_close(ea.power(x, p).numpy(), x**p)
        assert_close(ea.grad(lambda x, p=p: ea.sum(x**p))(x), p * x ** (p - 1) if p else np.zeros(3))


def test_power_gradient_in_the_exponent_at_a_zero_base_is_finite():
    # d/dy 0**y = 0 for y > 0; the rule must not produce nan from log(0).
    g = ea.grad(lambda y: ea.sum(ea.power(np.array([0.0, 2.0]), y)))(np.array([2.0, 3.0]))
    assert_close(g, np.array([0.0, 8.0 * np.log(2.0)]))


# -- mixed expressions ------------------------------------------------------------------------


def test_mixed_expressions_with_arrays_and_scalars_are_tensors_and_differentiable():
    a = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    x = np.array([0.7, 1.3, 2.1])
    cases = [
        (lambda x: a * x, lambda x: a * x),
        (lambda x: x * a, lambda x: x * a),
        (lambda x: 2.0 - x, lambda x: 2.0 - x),
        (lambda x: a - x, lambda x: a - x),
        (lambda x: a + x, lambda x: a + x),
        (lambda x: a / x, lambda x: a / x),
        (lambda x: 3.0 / x, lambda x: 3.0 / x),
        (lambda x: x / 3, lambda x: x / 3),
        (lambda x: 2.0**x, lambda x: 2.0**x),
        (lambda x: x**2.5, lambda x: x**2.5),
        (lambda x: a @ x, lambda x: a @ x),
        (lambda x: -x + 1, lambda x: -x + 1),
        (lambda x: abs(x - 1.5), lambda x: abs(x - 1.5)),
    ]
    for f, ref in cases:
        out = f(ea.tensor(x))
        assert isinstance(out, ea.Tensor)
        check_op(f, ref, x)


def test_ndarray_on_the_left_of_a_traced_tensor_keeps_the_derivative():
    a = np.array([2.0, 3.0])
    assert_close(ea.grad(lambda x: ea.sum(a * x))(np.ones(2)), a)
    assert_close(ea.grad(lambda x: ea.sum(2.0 - x))(np.ones(2)), -np.ones(2))
    assert_close(ea.grad(lambda x: ea.sum(a / x))(np.ones(2)), -a)


# -- numerically stable operations ----------------------------------------------------------------

BIG = np.array([-1000.0, 0.0, 1000.0])
W = np.array([1.0, 2.0, 3.0])


def _finite_value_and_gradient(f, x):
    value = f(x).numpy()
    grad = ea.grad(lambda x: ea.sum(f(x) * W[: x.shape[-1]]))(x)
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
    return value, grad


def test_sigmoid_is_stable():
    value, grad = _finite_value_and_gradient(ea.sigmoid, BIG)
    assert_close(value, [0.0, 0.5, 1.0])
    assert_close(grad, [0.0, 0.5, 0.0])


def test_softplus_is_stable():
    value, grad = _finite_value_and_gradient(ea.softplus, BIG)
    assert_close(value, [0.0, np.log(2.0), 1000.0])
    assert_close(grad, [0.0, 1.0, 3.0])


def test_logsumexp_is_stable():
    for x, expected in (
        (np.array([1000.0, 1000.0]), 1000 + np.log(2)),
        (np.array([-1000.0, -1000.0]), -1000 + np.log(2)),
        (BIG, 1000.0),
    ):
        value, _ = _finite_value_and_gradient(ea.logsumexp, x)
        assert_close(value, expected)
    assert_close(ea.grad(ea.logsumexp)(np.array([1000.0, 1000.0])), [0.5, 0.5])
    assert_close(ea.grad(ea.logsumexp)(BIG), [0.0, 0.0, 1.0])


def test_softmax_and_log_softmax_are_stable():
    value, grad = _finite_value_and_gradient(ea.softmax, BIG)
    assert_close(value, [0.0, 0.0, 1.0])
    assert_close(grad, [0.0, 0.0, 0.0])
    value, grad = _finite_value_and_gradient(ea.log_softmax, BIG)
    assert_close(value, [-2000.0, -1000.0, 0.0])
    assert_close(grad, W - np.array([0.0, 0.0, 1.0]) * W.sum())
    value, _ = _finite_value_and_gradient(ea.softmax, np.array([1000.0, 1000.0]))
    assert_close(value, [0.5, 0.5])


def _logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


X3 = np.random.default_rng(7).standard_normal((2, 3, 4))


@pytest.mark.parametrize(
    "kwargs", [{}, {"axis": 1}, {"axis": (0, 2)}, {"axis": -1, "keepdims": True}, {"keepdims": True}], ids=str
)
def test_logsumexp(kwargs):
    check_op(lambda x: ea.logsumexp(x, **kwargs), lambda x: _logsumexp(x, **kwargs), X3)


def test_logsumexp_reduces_every_axis_by_default():
    assert ea.logsumexp(X3).shape == ()
    assert_close(ea.logsumexp(X3).numpy(), np.log(np.exp(X3).sum()))


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_softmax_and_log_softmax(axis):
    kw = {} if axis is None else {"axis": axis}
    ax = -1 if axis is None else axis  # the default is the last axis
    check_op(lambda x: ea.softmax(x, **kw), lambda x: _softmax(x, ax), X3)
    check_op(lambda x: ea.log_softmax(x, **kw), lambda x: np.log(_softmax(x, ax)), X3)
    assert_close(ea.softmax(X3, **kw).numpy().sum(axis=ax), np.ones(np.delete(X3.shape, ax)))


def test_stable_ops_keep_float32():
    x = BIG.astype(np.float32)
    for f in (ea.sigmoid, ea.softplus, ea.logsumexp, ea.softmax, ea.log_softmax):
        assert f(x).dtype == np.float32
        g = ea.grad(lambda x, f=f: ea.sum(f(x)))(x)
        assert g.dtype == np.float32 and np.all(np.isfinite(g))


# -- reductions ----------------------------------------------------------------------------------

REDUCE_KWARGS = [{}, {"axis": 1}, {"axis": (0, 2)}, {"axis": -1, "keepdims": True}, {"keepdims": True}]


@pytest.mark.parametrize("kwargs", REDUCE_KWARGS, ids=str)
@pytest.mark.parametrize("name", ["mean", "max", "min", "prod", "var"])
def test_reductions(name, kwargs):
    check_op(lambda x: getattr(ea, name)(x, **kwargs), lambda x: getattr(np, name)(x, **kwargs), X3)
    check_op(lambda x: getattr(x, name)(**kwargs), lambda x: getattr(np, name)(x, **kwargs), X3)


@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "var", "logsumexp"])
def test_reductions_keep_float32(name):
    x = X3.astype(np.float32)
    for kwargs in ({}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}):
        out = getattr(ea, name)(x, **kwargs)
        assert out.dtype == np.float32
        ref = _logsumexp if name == "logsumexp" else getattr(np, name)
        assert_close(out.numpy(), ref(X3, **kwargs).astype(np.float32), rtol=1e-5, atol=1e-6)
        g = ea.grad(lambda x, kwargs=kwargs: ea.sum(getattr(ea, name)(x, **kwargs)))(x)
        assert g.dtype == np.float32 and g.shape == x.shape


@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_var_ddof(ddof):
    x = X3
    check_op(lambda x: ea.var(x, ddof=ddof), lambda x: np.var(x, ddof=ddof), x)
    check_op(lambda x: ea.var(x, axis=1, ddof=ddof), lambda x: np.var(x, axis=1, ddof=ddof), x)
    n = x.size
    assert_close(ea.grad(lambda x: ea.var(x, ddof=ddof))(x), 2 * (x - x.mean()) / (n - ddof))
    assert_close(ea.tensor(x).var(axis=2, ddof=ddof).numpy(), x.var(axis=2, ddof=ddof))


def test_var_defaults_to_ddof_zero():
    x = np.array([1.0, 2.0, 4.0])
    assert_close(ea.var(x).numpy(), np.var(x))


def test_mean_gradient():
    x = np.arange(6.0).reshape(2, 3)
    assert_close(ea.grad(ea.mean)(x), np.full((2, 3), 1 / 6))
    assert_close(ea.grad(lambda x: ea.sum(ea.mean(x, axis=0)))(x), np.full((2, 3), 1 / 2))


@pytest.mark.parametrize("op, pick", [(ea.max, np.argmax), (ea.min, np.argmin)])
def test_max_min_gradient_without_ties_is_an_indicator(op, pick):
    x = np.array([[0.3, -1.0, 2.0], [4.0, 0.1, -3.0]])
    expected = np.zeros_like(x)
    expected.flat[pick(x)] = 1.0
    assert_close(ea.grad(op)(x), expected)


def test_max_ties_share_the_gradient():
    x = np.array([1.0, 3.0, 3.0, 2.0])
    g = ea.grad(ea.max)(x)
    assert_close(g, [0.0, 0.5, 0.5, 0.0])
    assert_close(g.sum(), 1.0)
    x = np.array([[1.0, 1.0, 1.0], [0.0, 2.0, 2.0]])
    u = np.array([3.0, -2.0])
    g = ea.grad(lambda x: ea.sum(ea.max(x, axis=1) * u))(x)
    assert_close(g, [[1.0, 1.0, 1.0], [0.0, -1.0, -1.0]])
    assert_close(g.sum(axis=1), u)  # each row's share sums to the incoming gradient


def test_min_ties_share_the_gradient():
    x = np.array([[2.0, 0.5], [0.5, 0.5]])
    g = ea.grad(ea.min)(x)
    assert_close(g, [[0.0, 1 / 3], [1 / 3, 1 / 3]])
    g = ea.grad(lambda x: ea.sum(ea.min(x, axis=0, keepdims=True) * 2.0))(x)
    assert_close(g, [[0.0, 1.0], [2.0, 1.0]])


def test_maximum_minimum_ties_share_the_gradient():
    x, y = np.array([1.0, 2.0, 5.0]), np.array([1.0, 3.0, 4.0])
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.maximum(x, y)), (0, 1))(x, y)
    assert_close(gx, [0.5, 0.0, 1.0])
    assert_close(gy, [0.5, 1.0, 0.0])
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.minimum(x, y)), (0, 1))(x, y)
    assert_close(gx, [0.5, 1.0, 0.0])
    assert_close(gy, [0.5, 0.0, 1.0])


def test_abs_and_relu_subgradient_is_zero_at_zero():
    x = np.array([-2.0, 0.0, 3.0])
    assert_close(ea.grad(lambda x: ea.sum(ea.abs(x)))(x), [-1.0, 0.0, 1.0])
    assert_close(ea.grad(lambda x: ea.sum(abs(x)))(x), [-1.0, 0.0, 1.0])
    assert_close(ea.grad(lambda x: ea.sum(ea.relu(x)))(x), [0.0, 0.0, 1.0])
    assert_close(ea.relu(x).numpy(), [0.0, 0.0, 3.0])


def test_prod_gradient_with_zeros():
    g = ea.grad(ea.prod)(np.array([2.0, 4.0, 3.0]))
    assert_close(g, [12.0, 6.0, 8.0])
    g = ea.grad(ea.prod)(np.array([2.0, 0.0, 3.0]))  # one zero: the product of the others there
    assert_close(g, [0.0, 6.0, 0.0])
    g = ea.grad(ea.prod)(np.array([2.0, 0.0, 0.0]))  # two zeros: zero everywhere
    assert_close(g, [0.0, 0.0, 0.0])
    x = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0], [1.0, 2.0, 3.0]])
    g = ea.grad(lambda x: ea.sum(ea.prod(x, axis=1)))(x)
    assert_close(g, [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0], [6.0, 3.0, 2.0]])
    assert_close(g, numeric_grad(lambda x: np.prod(x, axis=1).sum(), x))
    assert np.all(np.isfinite(g))


def test_prod_second_derivative_with_a_zero():
    # d2/dx0 dx1 of x0 x1 x2 is x2, also where x0 == 0.
    h = ea.hessian(ea.prod)(np.array([0.0, 2.0, 3.0]))
    assert_close(h, [[0.0, 3.0, 2.0], [3.0, 0.0, 0.0], [2.0, 0.0, 0.0]])


# -- structural operations ---------------------------------------------------------------------------

A = np.random.default_rng(8).standard_normal((2, 3, 4))
B = np.random.default_rng(9).standard_normal((2, 2, 4))

MASK = A > 0
COND = np.array([True, False, True, False])

# name: (f(m, *args) written once for m = einad and m = numpy, args)
STRUCTURAL = {
    "reshape": (lambda m, x: m.reshape(x, (4, -1)), (A,)),
    "reshape int": (lambda m, x: m.reshape(x, 24), (A,)),
    "reshape method": (lambda m, x: x.reshape(4, 6), (A,)),
    "reshape method tuple": (lambda m, x: x.reshape((6, 4)), (A,)),
    "broadcast_to": (lambda m, x: m.broadcast_to(x, (5, 2, 3, 4)), (A,)),
    "broadcast_to size-1": (lambda m, x: m.broadcast_to(x, (3, 2, 4)), (A[:1, :1],)),
    "expand_dims": (lambda m, x: m.expand_dims(x, 1), (A,)),
    "expand_dims negative tuple": (lambda m, x: m.expand_dims(x, (0, -1)), (A,)),
    "squeeze all": (lambda m, x: m.squeeze(x), (A[:1, :, :1],)),
    "squeeze axis": (lambda m, x: m.squeeze(x, 2), (A[:1, :, :1],)),
    "squeeze method": (lambda m, x: x.squeeze(0), (A[:1, :, :1],)),
    "concatenate": (lambda m, a, b: m.concatenate([a, b], axis=1), (A, B)),
    "concatenate same twice": (lambda m, a, b: m.concatenate([a, b, a], axis=1), (A, B)),
    "concatenate negative axis": (lambda m, a: m.concatenate([a, a * 2], axis=-1), (A,)),
    "stack": (lambda m, a, b: m.stack([a, b]), (A[:, :2], B)),
    "stack axis": (lambda m, a, b: m.stack([a, b], axis=-1), (A[:, :2], B)),
    "flip all": (lambda m, x: m.flip(x), (A,)),
    "flip axis": (lambda m, x: m.flip(x, 1), (A,)),
    "flip axes": (lambda m, x: m.flip(x, (0, -1)), (A,)),
    "moveaxis": (lambda m, x: m.moveaxis(x, 0, -1), (A,)),
    "moveaxis lists": (lambda m, x: m.moveaxis(x, [0, 1], [-1, 0]), (A,)),
    "where": (lambda m, a, b: m.where(MASK, a, b), (A, B[0, :1, :1])),
    "where scalar branch": (lambda m, a: m.where(MASK, a, 0.0), (A,)),
    "where broadcast condition": (lambda m, a, b: m.where(COND, a, b), (A, B[0, 0])),
    "clip": (lambda m, x: m.clip(x, -0.5, 0.5), (A,)),
    "clip no lower": (lambda m, x: m.clip(x, None, 0.5), (A,)),
    "clip no upper": (lambda m, x: m.clip(x, -0.5, None), (A,)),
    "clip array bounds": (
        lambda m, x, lo, hi: m.clip(x, lo, hi),
        (A, np.array([-0.5, -0.1, -0.2, -1.0]), np.array([[[0.3]], [[1.0]]])),
    ),
    "getitem basic": (lambda m, x: x[1, :, ::2], (A,)),
    "getitem ellipsis": (lambda m, x: x[..., -1], (A,)),
    "getitem newaxis": (lambda m, x: x[None, 0, 1:], (A,)),
    "getitem negative step": (lambda m, x: x[:, ::-2], (A,)),
    "getitem integer array": (lambda m, x: x[:, np.array([0, 2, 2, 1, 0])], (A,)),
    "getitem list": (lambda m, x: x[[1, 1, 0]], (A,)),
    "getitem two arrays": (lambda m, x: x[np.array([0, 1, 1]), np.array([2, 2, 0])], (A,)),
    "getitem array and slice": (lambda m, x: x[np.array([[0, 1], [1, 1]]), 1:], (A,)),
    "getitem boolean mask": (lambda m, x: x[MASK], (A,)),
}


@pytest.mark.parametrize("name", sorted(STRUCTURAL))
def test_structural(name):
    f, args = STRUCTURAL[name]
    check_op(lambda *a: f(ea, *a), lambda *a: f(np, *a), *args)


@pytest.mark.parametrize("sections, axis", [(2, 2), ([1, 3], 1), (3, -2), ([1], 0)], ids=str)
def test_split(sections, axis):
    pieces = ea.split(A, sections, axis=axis)
    expected = np.split(A, sections, axis=axis)
    assert len(pieces) == len(expected)
    for p, e in zip(pieces, expected):
        assert isinstance(p, ea.Tensor)
        assert_close(p.numpy(), e)
    w = [np.random.default_rng(k).standard_normal(e.shape) for k, e in enumerate(expected)]
    g = ea.grad(lambda x: sum(ea.sum(p * wk) for p, wk in zip(ea.split(x, sections, axis=axis), w)))(A)
    assert_close(g, np.concatenate(w, axis=axis))


def test_split_unused_piece_gets_zero_gradient():
    g = ea.grad(lambda x: ea.sum(ea.split(x, 3, axis=1)[1]))(A)
    expected = np.zeros_like(A)
    expected[:, 1] = 1.0
    assert_close(g, expected)


def test_integer_array_indexing_accumulates_repeated_indices():
    x = np.arange(4.0)
    g = ea.grad(lambda x: ea.sum(x[np.array([0, 0, 2, 0, 3])]))(x)
    assert_close(g, [3.0, 0.0, 1.0, 1.0])
    g = ea.grad(lambda x: ea.sum(x[[1, 1]] * np.array([2.0, 5.0])))(x)
    assert_close(g, [0.0, 7.0, 0.0, 0.0])
    m = np.arange(6.0).reshape(2, 3)
    g = ea.grad(lambda m: ea.sum(m[np.array([0, 0, 1]), np.array([2, 2, 0])]))(m)
    assert_close(g, [[0.0, 0.0, 2.0], [1.0, 0.0, 0.0]])


def test_basic_indexing_gradient_is_a_scatter():
    x = np.arange(6.0).reshape(2, 3)
    g = ea.grad(lambda x: ea.sum(x[1, 1:] * np.array([2.0, 3.0])))(x)
    assert_close(g, [[0.0, 0.0, 0.0], [0.0, 2.0, 3.0]])
    g = ea.grad(lambda x: x[0, 2] * x[0, 2])(x)
    assert_close(g, [[0.0, 0.0, 4.0], [0.0, 0.0, 0.0]])


def test_iterating_a_tensor_is_differentiable():
    x = np.array([1.0, 2.0, 3.0])
    g = ea.grad(lambda x: sum(xi * xi for xi in x))(x)
    assert_close(g, 2 * x)


def test_where_gradient_goes_to_the_chosen_branch():
    c = np.array([True, False, True])
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.where(c, x, y) * np.array([1.0, 2.0, 3.0])), (0, 1))(
        np.ones(3), np.ones(3)
    )
    assert_close(gx, [1.0, 0.0, 3.0])
    assert_close(gy, [0.0, 2.0, 0.0])


def test_clip_gradient_passes_only_inside_the_bounds():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0])
    assert_close(ea.clip(x, -1.0, 1.0).numpy(), np.clip(x, -1.0, 1.0))
    assert_close(ea.grad(lambda x: ea.sum(ea.clip(x, -1.0, 1.0)))(x), [0.0, 1.0, 1.0, 1.0, 0.0])


def test_clip_with_crossed_bounds_follows_numpy():
    # numpy.clip is minimum(maximum(x, a_min), a_max): where a_min > a_max every value is a_max.
    x = np.array([0.0, 2.0, 5.0])
    assert_close(ea.clip(x, 3.0, 1.0).numpy(), np.clip(x, 3.0, 1.0))
    lo, hi = np.array([3.0, 0.0, 3.0]), np.array([1.0, 4.0, 1.0])
    assert_close(ea.clip(x, lo, hi).numpy(), np.clip(x, lo, hi))
    glo, ghi = ea.grad(lambda lo, hi: ea.sum(ea.clip(x, lo, hi)), (0, 1))(lo, hi)
    assert_close(glo, [0.0, 0.0, 0.0])
    assert_close(ghi, [1.0, 0.0, 1.0])


def test_broadcast_to_gradient_sums_back():
    x = np.array([[1.0], [2.0]])
    g = ea.grad(lambda x: ea.sum(ea.broadcast_to(x, (3, 2, 4)) * 2.0))(x)
    assert g.shape == (2, 1)
    assert_close(g, np.full((2, 1), 24.0))


@pytest.mark.parametrize(
    "name",
    [
        "reshape",
        "concatenate",
        "stack",
        "flip all",
        "moveaxis",
        "where",
        "getitem integer array",
        "clip",
        "broadcast_to",
        "expand_dims",
    ],
)
def test_structural_float32_stays_float32(name):
    f, args = STRUCTURAL[name]
    args32 = tuple(a.astype(np.float32) for a in args)
    assert f(ea, *[ea.tensor(a) for a in args32]).dtype == np.float32
    grads = ea.grad(lambda *a: ea.sum(f(ea, *a)), tuple(range(len(args32))))(*args32)
    assert all(g.dtype == np.float32 for g in grads)


# -- stop_gradient and comparisons -------------------------------------------------------------------


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


def test_comparisons_give_boolean_arrays(jit_mode):
    x = np.array([1.0, 2.0, 3.0])
    t = ea.tensor(x)
    for result, expected in (
        (t < 2, x < 2),
        (t <= 2, x <= 2),
        (t > 2, x > 2),
        (t >= 2, x >= 2),
        (t == 2, x == 2),
        (t != 2, x != 2),
        (t < ea.tensor([3.0, 2.0, 1.0]), x < np.array([3.0, 2.0, 1.0])),
        (2 < t, 2 < x),
    ):
        assert isinstance(result, np.ndarray) and result.dtype == np.bool_
        np.testing.assert_array_equal(result, expected)

    seen = []

    def f(x):
        seen.append(x > 1.5)
        return ea.sum(ea.where(x > 1.5, x, 0.0))

    assert_close(ea.grad(f)(x), [0.0, 1.0, 1.0])
    if jit_mode == "eager":  # a comparison under grad is a plain boolean array
        assert isinstance(seen[0], np.ndarray) and seen[0].dtype == np.bool_
    else:  # under jit it is an equation of the program: a staged boolean Tensor
        assert isinstance(seen[0], ea.Tensor) and seen[0].dtype == np.bool_


def test_tensor_attributes():
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    t = ea.tensor(x)
    assert t.shape == (2, 3) and t.ndim == 2 and t.size == 6 and t.dtype == np.float32
    assert isinstance(t.numpy(), np.ndarray)
    np.testing.assert_array_equal(np.asarray(t), x)
    np.testing.assert_array_equal(t.T.numpy(), x.T)
    assert ea.tensor([1.0]).dtype == np.float64
    assert ea.tensor([1, 2], dtype=np.float32).dtype == np.float32
