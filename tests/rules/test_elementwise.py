"""einad.rules.elementwise (and the Tensor operators and `einad.ops` functions built on it:
round, angle, comparisons): values against numpy, gradients against closed forms and float64
central differences, gradcheck to second order, float32 and complex dtypes, Jacobians through
the batch rules, replay under ea.jit, derivatives at singular points that never warn; and on
every array library (the `lib` fixture: numpy, array-api-strict, torch, dask): results of the
input's library, float32 kept, dask lazy, torch gradients equal to torch.autograd's."""

import functools
import inspect
import warnings
from typing import Any

import numpy as np
import pytest

import einad as ea
from einad import arrays, core
from einad.core import Primitive, batch_rules, bind, strip, zero_derivative
from einad.rules import elementwise, indexing, reductions
from einad.rules.elementwise import (
    BINARY,
    BITWISE,
    CONSTANT,
    GENERIC,
    PREDICATES,
    PRIMITIVES,
    STANDARD,
    UNARY,
)
from einad.util import wrap
from tests.support import op_table
from tests.support.arraylibs import load
from tests.support.checks import (
    BIG,
    check_lib,
    drop_rules,
    finite_value_and_gradient,
    forget_rules,
    lib_value,
    uniform_away_from_zero,
)
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, check_op, numeric_grad, numeric_jvp, numeric_vjp
from tests.support.op_table import normal, one, uniform

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted


# -- every elementwise op on numpy: values, closed-form derivatives, central differences ------


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


# name: (numpy reference, closed-form derivative, low, high of the test domain)
UNARY_CASES = {
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
    return uniform_away_from_zero(lo, hi, shape, seed, away=0.05, dtype=dtype)


@both_modes
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_value_and_gradient(lib, name):
    """The value against numpy's function and the gradient against the closed form (einad's on
    numpy for the ops without one here: EVERYDAY checks those against numpy), on every library:
    results of the input's library, dask lazy; on numpy also the VJP against central differences."""
    op = getattr(ea, name)
    if name in UNARY_CASES:
        ref, deriv, lo, hi = UNARY_CASES[name]
        x = _domain(lo, hi)
    else:
        ref, deriv = getattr(np, name), None
        x = uniform_away_from_zero(*_unary_domain(name))
    with lib.lazy():
        y = op(lib.asarray(x))
        g = ea.grad(lambda v: ea.sum(op(v)))(lib.asarray(x))
    check_lib(lib, y, ref(x), rtol=1e-7, atol=1e-8)
    want = deriv(x) if deriv is not None else ea.grad(lambda v: ea.sum(op(v)))(x)
    check_lib(lib, g, want, rtol=1e-7, atol=1e-8)
    if lib.name == "numpy":
        check_op(op, ref, x)


@both_modes
@pytest.mark.parametrize("name", sorted(UNARY_CASES))
def test_unary_float32_stays_float32(name):
    ref, deriv, lo, hi = UNARY_CASES[name]
    op = getattr(ea, name)
    x = _domain(lo, hi, dtype=np.float32)
    out = op(x)
    assert out.dtype == np.float32
    assert_close(out.numpy(), ref(x.astype(np.float64)).astype(np.float32), rtol=1e-5, atol=1e-6)
    g = ea.grad(lambda x: ea.sum(op(x)))(x)
    assert g.dtype == np.float32
    assert_close(g, deriv(x.astype(np.float64)).astype(np.float32), rtol=1e-4, atol=1e-5)


# name: (numpy reference, d/dx, d/dy)
BINARY_CASES = {
    "add": (np.add, lambda x, y: np.ones_like(x * y), lambda x, y: np.ones_like(x * y)),
    "subtract": (np.subtract, lambda x, y: np.ones_like(x * y), lambda x, y: -np.ones_like(x * y)),
    "multiply": (np.multiply, lambda x, y: y + 0 * x, lambda x, y: x + 0 * y),
    "divide": (np.divide, lambda x, y: 1 / y + 0 * x, lambda x, y: -x / y**2),
    "power": (np.power, lambda x, y: y * x ** (y - 1), lambda x, y: x**y * np.log(x)),
    "maximum": (np.maximum, lambda x, y: (x > y) + 0.0, lambda x, y: (y > x) + 0.0),
    "minimum": (np.minimum, lambda x, y: (x < y) + 0.0, lambda x, y: (y < x) + 0.0),
}


BROADCASTS = [((2, 3), (2, 3)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((3,), (2, 3)), ((2, 3), ()), ((), (4,))]


@both_modes
@pytest.mark.parametrize("shapes", BROADCASTS, ids=str)
@pytest.mark.parametrize("name", sorted(BINARY_CASES))
def test_binary_value_and_gradient_with_broadcasting(name, shapes):
    ref, dx, dy = BINARY_CASES[name]
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


@both_modes
@pytest.mark.parametrize("name", sorted(BINARY_CASES))
def test_binary_closed_form_gradient(name):
    _, dx, dy = BINARY_CASES[name]
    op = getattr(ea, name)
    x = _domain(0.5, 2.0, (2, 3), seed=3)
    y = _domain(0.5, 2.0, (2, 3), seed=4)
    gx, gy = ea.grad(lambda x, y: ea.sum(op(x, y)), (0, 1))(x, y)
    assert_close(gx, dx(x, y))
    assert_close(gy, dy(x, y))


@both_modes
@pytest.mark.parametrize("name", sorted(BINARY_CASES))
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


@both_modes
@pytest.mark.parametrize("name", sorted(BINARY_CASES))
def test_binary_tangent_has_the_result_dtype_when_a_float64_constant_promotes(name):
    """float32 x with a float64 constant (an array, or numpy's float64 scalar: not weak under
    NEP 50) gives a float64 result, and its tangent is float64 too, as JAX's: a linear entry
    (add, subtract) used to pass the float32 tangent on as it was."""
    op = getattr(ea, name)
    x = _domain(0.5, 2.0, (2, 3), seed=5, dtype=np.float32)
    for c in (_domain(0.5, 2.0, (3,), seed=6), np.float64(1.5)):
        for f in (lambda x, c=c: op(x, c), lambda x, c=c: op(c, x)):
            out, t = ea.jvp(f, (x,), (np.ones_like(x),))
            assert out.dtype == np.float64
            assert t.dtype == out.dtype
            assert ea.jacfwd(f)(x).dtype == np.float64
            assert ea.grad(lambda x, f=f: ea.sum(f(x)))(x).dtype == np.float32  # the input's


@both_modes
@pytest.mark.parametrize("zero", [0, 0.0, -0.0, False])
def test_dividing_by_a_python_zero_has_numpys_infinite_slope(zero):
    """d(x / 0)/dx is 1/0: numpy's infinity of the zero's sign, as JAX gives (Python's own 1 / 0
    raised ZeroDivisionError from inside the rule, in both modes)."""
    x = np.array([1.0, -2.0])
    slope = np.full(2, np.copysign(np.inf, zero))
    with np.errstate(divide="ignore"):
        assert_close(ea.grad(lambda x: ea.sum(x / zero))(x), slope)
        assert_close(ea.jvp(lambda x: ea.divide(x, zero), (x,), (np.ones(2),))[1], slope)
        x32 = x.astype(np.float32)  # the infinity is a Python float: weak, float32 stays float32
        assert ea.grad(lambda x: ea.sum(x / zero))(x32).dtype == np.float32


@both_modes
def test_power_with_special_integer_exponents():
    x = np.array([-1.5, 0.0, 2.0])
    for p in (0, 1, 2, 3):
        assert_close(ea.power(x, p).numpy(), x**p)
        assert_close(ea.grad(lambda x, p=p: ea.sum(x**p))(x), p * x ** (p - 1) if p else np.zeros(3))


@both_modes
def test_power_gradient_in_the_exponent_at_a_zero_base_is_finite():
    # d/dy 0**y = 0 for y > 0; the rule must not produce nan from log(0).
    g = ea.grad(lambda y: ea.sum(ea.power(np.array([0.0, 2.0]), y)))(np.array([2.0, 3.0]))
    assert_close(g, np.array([0.0, 8.0 * np.log(2.0)]))


# -- mixed expressions ------------------------------------------------------------------------


@both_modes
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
        (lambda x: x % 1.0, lambda x: x % 1.0),  # (numpy's mod: the divisor's sign, as PyTorch's and JAX's %)
        (lambda x: 5.0 % x, lambda x: 5.0 % x),
        (lambda x: -a % x, lambda x: -a % x),
    ]
    for f, ref in cases:
        out = f(ea.tensor(x))
        assert isinstance(out, ea.Tensor)
        check_op(f, ref, x)


@both_modes
def test_ndarray_on_the_left_of_a_traced_tensor_keeps_the_derivative():
    a = np.array([2.0, 3.0])
    assert_close(ea.grad(lambda x: ea.sum(a * x))(np.ones(2)), a)
    assert_close(ea.grad(lambda x: ea.sum(2.0 - x))(np.ones(2)), -np.ones(2))
    assert_close(ea.grad(lambda x: ea.sum(a / x))(np.ones(2)), -a)


def test_a_gradient_that_is_a_users_array_is_a_fresh_copy():
    """The gradient of sum(x * c) is `c` itself: under a cotangent of ones the slope is handed on
    as a read-only view (no multiplication), so the gradient returned is a writable copy of it,
    never `c`'s memory.

    Kills: _scale 27 (a writable view: the gradient was `c`'s memory)."""
    c, x = np.array([1.0, -2.0, 3.0]), np.array([0.5, 0.25, 2.0])
    for f in (lambda v: ea.sum(v * c), lambda v: ea.sum(c * v), lambda v: ea.sum(ea.multiply(v, c))):
        g = ea.grad(f)(x)
        np.testing.assert_array_equal(g, c)
        assert g.flags.writeable and not np.shares_memory(g, c)


@both_modes
def test_sigmoid_is_stable():
    value, grad = finite_value_and_gradient(ea.sigmoid, BIG)
    assert_close(value, [0.0, 0.5, 1.0])
    assert_close(grad, [0.0, 0.5, 0.0])


@both_modes
def test_softplus_is_stable():
    value, grad = finite_value_and_gradient(ea.softplus, BIG)
    assert_close(value, [0.0, np.log(2.0), 1000.0])
    assert_close(grad, [0.0, 1.0, 3.0])


@both_modes
def test_maximum_minimum_ties_share_the_gradient():
    x, y = np.array([1.0, 2.0, 5.0]), np.array([1.0, 3.0, 4.0])
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.maximum(x, y)), (0, 1))(x, y)
    assert_close(gx, [0.5, 0.0, 1.0])
    assert_close(gy, [0.5, 1.0, 0.0])
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.minimum(x, y)), (0, 1))(x, y)
    assert_close(gx, [0.5, 1.0, 0.0])
    assert_close(gy, [0.5, 0.0, 1.0])


@both_modes
def test_abs_and_relu_subgradient_is_zero_at_zero():
    x = np.array([-2.0, 0.0, 3.0])
    assert_close(ea.grad(lambda x: ea.sum(ea.abs(x)))(x), [-1.0, 0.0, 1.0])
    assert_close(ea.grad(lambda x: ea.sum(abs(x)))(x), [-1.0, 0.0, 1.0])
    assert_close(ea.grad(lambda x: ea.sum(ea.relu(x)))(x), [0.0, 0.0, 1.0])
    assert_close(ea.relu(x).numpy(), [0.0, 0.0, 3.0])


@both_modes
def test_relu_selects_its_slope_so_an_infinite_tangent_below_zero_gives_zero():
    """relu's slope is a mask that selects (JAX's and PyTorch's relu): where the input is at or
    below 0 the derivative is 0 even when the incoming tangent or cotangent is infinite or nan
    (sqrt's at 0), never 0 * inf = nan; above 0 it passes unchanged."""
    x = np.array([0.0, 4.0, 9.0])
    f = lambda x: ea.relu(ea.sqrt(x) - 1)  # at 0: relu's input is -1, sqrt's slope is inf
    slope = np.array([0.0, 0.25, 1 / 6])  # the closed form: 1 / (2 sqrt(x)) where sqrt(x) > 1, else 0
    _, t = ea.jvp(f, (x,), (np.ones(3),))
    assert_close(t, slope)
    assert_close(np.diag(ea.jacfwd(f)(x)), slope)
    y = np.array([-1.0, 0.0, 4.0])  # sqrt(relu(x)): relu's cotangent is inf at and below 0
    assert_close(ea.grad(lambda x: ea.sum(ea.sqrt(ea.relu(x))))(y), [0.0, 0.0, 0.25])


def test_abs_of_complex_values_has_slope_conj_over_modulus_and_zero_at_zero():
    """d|z| = conj(z)/|z| (the gradient of sum |z|, JAX's convention), and 0 at z = 0 (the zero
    modulus replaced by 1 before the division): no nan in the gradient nor in the JVP.

    The slope's own derivative along t (forward over reverse) is that of conj(z)/|z|, and at
    z = 0 that of conj(z)/1 (JAX's too: it replaces the zero modulus by 1): conj(t).

    Kills: _abs_slope 15, 22, 23, 29 (the zero test broken: 0/0 at z = 0), 30 (conj(z)/2 at 0)."""
    z = np.array([0j, 3 + 4j, -2j, -1.5 + 0j])
    modulus = np.where(z == 0, 1, np.abs(z))
    slope = lambda v: ea.grad(lambda u: ea.sum(ea.abs(u)))(v)
    np.testing.assert_allclose(slope(z), np.conj(z) / modulus, rtol=1e-12, atol=0)
    t = np.array([1 + 2j, 0.5 - 1j, 2 + 0j, 1j])
    _, tangent = ea.jvp(ea.abs, (z,), (t,))
    d_modulus = np.real(np.conj(z) * t) / modulus
    np.testing.assert_allclose(tangent, d_modulus, rtol=1e-12, atol=0)
    assert tangent.dtype == np.float64
    _, d_slope = ea.jvp(slope, (z,), (t,))
    want = np.conj(t) / modulus - np.conj(z) * d_modulus / modulus**2
    np.testing.assert_allclose(d_slope, want, rtol=1e-12)


@both_modes
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


# -- the everyday elementwise ops: one table, every check --------------------------------


def _mod_args(dtype=np.float64):
    x = uniform(3.2, 3.8) * np.where(op_table.RNG.random((3, 4)) < 0.5, -1, 1)  # x / y far from integers
    return x.astype(dtype), uniform(1.5, 1.55, dtype=dtype)


# name: (einad function, numpy reference, arguments maker (dtype -> args), complex inputs allowed)
EVERYDAY = {
    "log2": (ea.log2, np.log2, lambda dt: (uniform(0.3, 3, dtype=dt),), True),
    "log10": (ea.log10, np.log10, lambda dt: (uniform(0.3, 3, dtype=dt),), True),
    "exp2": (ea.exp2, np.exp2, one, True),
    "arcsinh": (ea.arcsinh, np.arcsinh, one, True),
    "arccosh": (ea.arccosh, np.arccosh, lambda dt: (uniform(1.2, 3, dtype=dt),), True),
    "arctanh": (ea.arctanh, np.arctanh, lambda dt: (uniform(-0.8, 0.8, dtype=dt),), True),
    "arctan2": (ea.arctan2, np.arctan2, lambda dt: (normal(dtype=dt), normal(dtype=dt)), False),
    "hypot": (ea.hypot, np.hypot, lambda dt: (normal(dtype=dt), normal(dtype=dt)), False),
    "logaddexp": (ea.logaddexp, np.logaddexp, lambda dt: (normal(dtype=dt), normal(dtype=dt)), False),
    "mod": (ea.mod, np.mod, _mod_args, False),
    "sinc": (ea.sinc, np.sinc, one, True),
    "logaddexp2": (ea.logaddexp2, np.logaddexp2, lambda dt: (normal(dtype=dt), normal(dtype=dt)), False),
    "conj": (ea.conj, np.conj, one, True),
    "real": (ea.real, np.real, one, True),
    "imag": (ea.imag, np.imag, one, True),
    "angle": (ea.angle, np.angle, one, True),
}


@both_modes
@pytest.mark.parametrize(("check", "name"), op_table.cases(EVERYDAY))
def test_everyday(check, name):
    check(EVERYDAY[name])


def test_every_new_primitive_has_a_batch_rule():
    prims = [PRIMITIVES[n] for n in ("log2", "log10", "exp2", "arcsinh", "arccosh", "arctanh", "arctan2")]
    prims += [PRIMITIVES[n] for n in ("hypot", "logaddexp", "mod", "imag", "round", "isnan", "isinf")]
    prims += [PRIMITIVES[n] for n in ("sinc", "logaddexp2")]
    prims += [indexing.take_along_p, indexing.scatter_along_p, indexing.argsort_p, indexing.argmax_p]
    prims += [indexing.argmin_p, reductions.cumsum_p, reductions.cumprod_p]
    assert all(p in batch_rules for p in prims), [p for p in prims if p not in batch_rules]


@both_modes
@pytest.mark.parametrize("name", sorted(CONSTANT))
def test_constant_ops(lib, name):
    """sign, floor, ceil, round, floor_divide: numpy's values exactly, float32 kept, and a zero
    derivative (a `zero_derivative` primitive: the gradient of sum(op(v) * v) is op(v))."""
    x = uniform_away_from_zero(-3, 3, (3, 4)) * 1.37
    op, ref = getattr(ea, name), getattr(np, name)
    if (
        getattr(ref, "nin", 1) == 2
    ):  # (floor_divide: by a negative divisor, a Python number, which keeps float32)
        op, ref = (lambda v, f=op: f(v, -0.7)), (lambda v, f=ref: f(v, -0.7))
    with lib.lazy():
        y = op(lib.asarray(x))
        y32 = op(lib.asarray(x.astype(np.float32)))
        g = ea.grad(lambda v: ea.sum(op(v) * v))(lib.asarray(x))
    np.testing.assert_array_equal(lib_value(lib, y, np.float64), ref(x))
    lib_value(lib, y32, np.float32)
    check_lib(lib, g, ref(x), rtol=1e-7, atol=1e-8)
    assert PRIMITIVES[name] in zero_derivative


@both_modes
def test_integer_ops_outside_the_standard_are_numpys_on_every_library(lib):
    """gcd, lcm and bitwise_count (numpy's, not the standard's): on each library through the
    standard's functions (`GENERIC`: Euclid's rounds, shifts), numpy's values and dtypes, the
    most negative integer and zeros among them; integers of two kinds promote as numpy's; the
    square of booleans is numpy's int8 (torch's own square gave int64)."""
    # (int16: dask runs every round its integers can need, 26 for 16 bits, and one shift per bit)
    i = np.array([[-(2**14), -1, 5, 0, 12, -18]], np.int16)
    j = np.array([[3], [0], [-8]], np.int16)
    small, signed = np.array([3, 250, 0], np.uint8), np.array([6, -4, 0], np.int8)
    most_negative = np.array([-(2**15), -1, 5, 0], np.int16)
    with lib.lazy():
        got = [
            ea.gcd(lib.asarray(i), lib.asarray(j)),
            ea.lcm(lib.asarray(i), lib.asarray(j)),
            ea.gcd(lib.asarray(small), lib.asarray(signed)),
            ea.bitwise_count(lib.asarray(most_negative)),
            ea.bitwise_count(lib.asarray(signed)),
            ea.bitwise_count(lib.asarray(np.array([True, False]))),
            ea.square(lib.asarray(np.array([True, False]))),  # (numpy's int8; torch's own int64)
        ]
    want = [
        np.gcd(i, j),
        np.lcm(i, j),
        np.gcd(small, signed),
        np.bitwise_count(most_negative),
        np.bitwise_count(signed),
        np.bitwise_count(np.array([True, False])),
        np.square(np.array([True, False])),
    ]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(lib_value(lib, g, w.dtype), w)


@pytest.mark.filterwarnings("ignore:invalid value encountered")  # (inf - inf, inside array_api_strict)
@pytest.mark.filterwarnings("ignore:overflow encountered")  # (past the largest float; dask computes later)
def test_spacing_is_numpys_on_every_library_at_special_values(lib):
    """numpy.spacing through the standard's nextafter: the gap away from zero, negative below
    zero and positive at -0.0, nan at infinities and nan, inf past the largest float."""
    x = np.array([-0.0, 0.0, -1.0, 3.5, 1e-310, -np.inf, np.nan, np.finfo(np.float64).max])
    with np.errstate(over="ignore"), lib.lazy():
        got, got32 = ea.spacing(lib.asarray(x)), ea.spacing(lib.asarray(x[:5].astype(np.float32)))
        want, want32 = np.spacing(x), np.spacing(x[:5].astype(np.float32))
    np.testing.assert_array_equal(lib_value(lib, got, np.float64), want)
    np.testing.assert_array_equal(np.signbit(lib_value(lib, got)), np.signbit(want))
    np.testing.assert_array_equal(lib_value(lib, got32, np.float32), want32)


def test_round_decimals(lib):
    """round(x, decimals) as numpy rounds (exactly numpy's digits on numpy), eager and jitted; integers
    too (a negative `decimals` rounds them to tens, hundreds: other libraries once returned them as
    they were), and integers past 2**53 stay exact (no float64 round trip).

    Kills: _round_xp 4, 6 (integers with decimals >= 0 sent through float64)."""
    for x in (np.array([0.123, -2.567, 10.0449, 3.5]), np.array([1.2345, -2.5, 0.5, 2.675])):
        for d in (0, 1, 2, -1):
            got = ea.round(lib.asarray(x), d)
            check_lib(lib, got, np.round(x, d), rtol=1e-7, atol=1e-7)
            if lib.name == "numpy":
                np.testing.assert_array_equal(got.numpy(), np.round(x, d))
        check_lib(lib, ea.round(lib.asarray(x)), np.round(x), rtol=1e-7, atol=1e-7)
        jitted = compiled(ea.jit(lambda x: ea.round(x, 2)))(lib.asarray(x))
        check_lib(lib, jitted, np.round(x, 2), rtol=1e-7, atol=1e-7)
        if lib.name == "numpy":
            np.testing.assert_array_equal(jitted, np.round(x, 2))
    i = np.array([15, 25, -35, 44, 7, 149])  # integers keep their dtype; to tens and hundreds half to even
    for d in (1, 2, -1, -2):
        check_lib(lib, ea.round(lib.asarray(i), d), np.round(i, d), rtol=0, atol=0)
    big = np.array([2**53 + 1, -(2**53) - 3, 2**62 + 7])  # exact (assert_allclose compares in float64)
    for got in (ea.round(lib.asarray(big)), *(ea.round(lib.asarray(big), d) for d in (0, 1, 2))):
        np.testing.assert_array_equal(lib_value(lib, got, np.int64), big)


def test_round_plans_each_decimals_apart(lib, monkeypatch):
    """numpy rounds booleans to 0 decimals (float16) and refuses to round them to 2 (it cannot
    multiply booleans by 100 in place); other libraries follow numpy whichever came first: a plan
    (the dtype numpy computes in) made for one `decimals` is not reused for another. Bug fixed: the
    plans were keyed without `decimals`, so round(b, 2) gave float16 after a round(b).

    Kills: _target 20 (the plan worked out without the keyword arguments)."""
    b = np.array([True, False])
    with pytest.raises(TypeError):
        np.round(b, 2)
    for first in (None, 0):
        for cache in ("_targets", "_direct"):
            monkeypatch.setattr(elementwise, cache, {})
        if first is not None:
            try:
                check_lib(lib, ea.round(lib.asarray(b), first), np.round(b, first))
            except TypeError as e:  # array-api-strict and dask have no float16
                assert "no dtype float16" in str(e), e
        with pytest.raises(TypeError):
            ea.round(lib.asarray(b), 2)


def test_round_decimals_of_numbers_and_numpy_scalars():
    """A Python number or a numpy scalar (no array: the primitive runs numpy's kernel on it, not
    through the fast path of numpy arrays) is rounded to its `decimals` too, in numpy's dtype.

    Kills: _foreign 4 (the keyword arguments dropped on numpy scalars and numbers)."""
    for x in (1.2345, -2.675, np.float64(1.2345), np.float32(-2.675), np.float64(1234.5)):
        for d in (0, 2, -1):
            got = ea.round(x, d).numpy()
            np.testing.assert_array_equal(got, np.round(x, d))
            assert got.dtype == np.result_type(x)


@both_modes
def test_sinc_at_zero_and_its_derivatives():
    x = np.array([0.0, 1e-9, 0.5, -1.0, 2.5])
    assert_close(ea.sinc(x), np.sinc(x), rtol=1e-15)
    g = ea.grad(lambda v: ea.sum(ea.sinc(v)))(x)
    want = np.where(x == 0, 0.0, (np.cos(np.pi * x) - np.sinc(x)) / np.where(x == 0, 1, x))
    assert_close(g, want, rtol=1e-7, atol=1e-7)
    assert g[0] == 0.0
    x2 = np.array([0.3, -0.7, 1.9])  # the derivative differentiates again (einad operations)
    assert ea.gradcheck(lambda v: ea.sum(ea.grad(lambda w: ea.sum(ea.sinc(w)))(v) ** 2), x2)
    # the second derivative at 0 is sinc''(0) = -pi**2/3 (Taylor: sinc x = 1 - (pi x)**2 / 6 + ...)
    d2 = ea.grad(ea.grad(lambda w: ea.sinc(w)))(0.0)
    assert_close(d2, -(np.pi**2) / 3, rtol=1e-12)
    h = np.diag(ea.hessian(lambda v: ea.sum(ea.sinc(v)))(x))
    p = np.pi * x[2:]  # away from 0, sinc'' = pi**2 ((2 - p**2) sin p - 2 p cos p) / p**3
    assert_close(h[2:], np.pi**2 * ((2 - p**2) * np.sin(p) - 2 * p * np.cos(p)) / p**3, rtol=1e-9)
    assert_close(h[:2], np.full(2, -(np.pi**2) / 3), rtol=1e-6)
    # near 0 the slope is its series, to the x**3 term: -pi**2 x / 3 + pi**4 x**3 / 30 - pi**6 x**5 / 840
    xs = np.array([9e-4, -5e-4])
    want = -(np.pi**2) * xs / 3 + np.pi**4 * xs**3 / 30 - np.pi**6 * xs**5 / 840
    assert_close(ea.grad(lambda v: ea.sum(ea.sinc(v)))(xs), want, rtol=1e-12)
    d4 = ea.grad(ea.grad(ea.grad(ea.grad(ea.sinc))))(0.0)
    assert_close(d4, np.pi**4 / 5, rtol=1e-12)  # the fourth derivative at 0: 24 pi**4 / 120


def test_sinc_at_zero_on_every_library(lib):
    """sinc(0) = 1 and sinc(1/pi) = sin(1) on every library (the generic kernel's guarded division)."""
    x = np.array([0.0, 1 / np.pi, -0.5, 2.5])
    check_lib(lib, ea.sinc(lib.asarray(x)), np.sinc(x), rtol=1e-12, atol=1e-15)


def test_exp2_is_the_librarys_own_where_it_has_one(lib):
    """exp2, which the standard lacks, runs the library's own exp2 where it has one (torch, dask:
    its results to the last bit, which 2**x through pow differs from on some of these points), and
    2**x through the standard's pow where it has not (array-api-strict)."""
    x = np.linspace(-5, 5, 201)
    got = lib.numpy(strip(ea.exp2(lib.asarray(x))))
    own = getattr(lib.module, "exp2", None)
    if own is None:
        assert_close(got, np.exp2(x), rtol=1e-14)
    else:
        np.testing.assert_array_equal(got, lib.numpy(own(lib.asarray(x))))


@both_modes
def test_sinc_second_derivative_is_finite_at_huge_arguments():
    """sinc'' = -pi**2 sinc(x) - 2 sinc'(x) / x, sinc' = (cos(pi x) - sinc(x)) / x, and both
    modes of the second order agree with it at |x| > 1e154 too, where the slope's Taylor branch
    (not taken there) squared x to inf and its zero cotangent times inf was nan."""
    x = np.array([1e200, -1e300, 1e160, 3.7])
    s = np.sinc(x)
    d = (np.cos(np.pi * x) - s) / x
    dd = -(np.pi**2) * s - 2 * d / x
    slope = ea.grad(lambda y: ea.sum(ea.sinc(y)))
    assert_close(ea.grad(lambda x: ea.sum(slope(x)))(x), dd, rtol=1e-10)
    assert_close(ea.jvp(slope, (x,), (np.ones(4),))[1], dd, rtol=1e-10)


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.bool_, np.int8, np.int64])
def test_sigmoid_and_softplus_of_integers_and_booleans_in_numpys_float_dtype(dtype):
    """Of booleans and integers, in the dtype numpy's exp gives them (float16 for uint8 and bool):
    the stable kernels negated |x|, which wraps around for unsigned integers (sigmoid(uint8 1) was
    0, softplus inf) and raises for booleans."""
    x = np.array([0, 1, 2, 100]).astype(dtype)
    xf = x.astype(np.float64)
    ft = np.exp(x[:1]).dtype  # (of 0: no overflow warning)
    for name, ref in (("sigmoid", 1 / (1 + np.exp(-xf))), ("softplus", np.logaddexp(0.0, xf))):
        out = getattr(ea, name)(x).numpy()
        assert out.dtype == ft
        assert_close(out, ref.astype(ft), rtol=1e-3)


@both_modes
@pytest.mark.parametrize("name", ["logaddexp", "logaddexp2"])
def test_logaddexp_slopes_at_an_infinite_operand(name):
    """d/dx log(e^x + e^y) = 1 / (1 + e^(y - x)): 1 where x = inf > y, 0 where y = inf > x, as
    PyTorch's (and JAX's at x = inf): exp(x - z) was exp(inf - inf) = nan there, and a zero
    tangent of y = inf gave 0 * nan = nan in forward mode."""
    op = getattr(ea, name)
    x = np.array([np.inf, np.inf, 1.0, -np.inf, 3.0])
    y = np.array([1.0, -np.inf, np.inf, 2.0, -np.inf])
    gx, gy = ea.grad(lambda a, b: ea.sum(op(a, b)), argnums=(0, 1))(x, y)
    assert_close(gx, [1.0, 1.0, 0.0, 0.0, 1.0])
    assert_close(gy, [0.0, 0.0, 1.0, 1.0, 0.0])
    _, tx = ea.jvp(op, (x, y), (np.ones(5), np.zeros(5)))
    assert_close(tx, gx)


@both_modes
def test_logaddexp2_is_stable_and_its_gradient_symmetric():
    x, y = np.array([1000.0, -1000.0, 3.0, -np.inf]), np.array([1000.0, -1001.0, -2.0, 0.0])
    assert_close(ea.logaddexp2(x, y), np.logaddexp2(x, y), rtol=1e-15)
    gx, gy = ea.grad(lambda a, b: ea.sum(ea.logaddexp2(a, b)), argnums=(0, 1))(x, y)
    assert_close(gx, 1 / (1 + 2.0 ** (y - x)), rtol=1e-12)  # 2**x / (2**x + 2**y), overflow-free
    assert_close(gx + gy, np.ones(4), rtol=1e-12)  # the two partials are 2**x/(...) and 2**y/(...)
    assert ea.gradcheck(lambda a, b: ea.sum(ea.logaddexp2(a, b) ** 2), x[2:3], y[2:3])


@both_modes
def test_hypot_gradient_at_the_origin_is_zero():
    g = ea.grad(lambda x, y: ea.sum(ea.hypot(x, y)), argnums=(0, 1))(np.zeros(2), np.array([0.0, 2.0]))
    assert_close(g[0], [0.0, 0.0])
    assert_close(g[1], [0.0, 1.0])


@both_modes
def test_angle_of_real_values_is_constant_in_them():
    x = np.array([-2.0, -0.0, 0.0, 3.0])
    np.testing.assert_array_equal(ea.angle(x).numpy(), np.angle(x))
    np.testing.assert_array_equal(ea.angle(x, deg=True).numpy(), np.angle(x, deg=True))
    assert_close(ea.grad(lambda x: ea.sum(ea.angle(x)))(x), np.zeros(4))


@both_modes
def test_imag_of_real_values_is_zero():
    x = normal()
    np.testing.assert_array_equal(ea.imag(x).numpy(), np.imag(x))
    assert_close(ea.grad(lambda x: ea.sum(ea.imag(x) + x))(x), np.ones_like(x))


@both_modes
def test_real_imag_and_conj_are_tensor_attributes_as_on_ndarrays():
    """quimb calls ``data.conj()`` on its arrays directly; numpy code reads ``x.real``."""
    z = normal() + 1j * normal()
    t = ea.tensor(z)
    np.testing.assert_array_equal(t.real.numpy(), z.real)
    np.testing.assert_array_equal(t.imag.numpy(), z.imag)
    np.testing.assert_array_equal(t.conj().numpy(), z.conj())
    assert ea.gradcheck(lambda z: (z.real * 2 + z.imag, z.conj() * z), z)


# -- derivative rules never warn, eager or compiled --------------------------------------------------


def _masked_sqrt(x):
    return ea.sum(ea.where(x > 0, ea.sqrt(ea.abs(x)), 0.0) + ea.log(ea.abs(x) + 1.0))


@both_modes
@pytest.mark.parametrize(
    "f",
    [
        _masked_sqrt,
        lambda x: ea.sum(ea.sqrt(x)),  # sqrt'(0) = inf: the number, no warning
        lambda x: ea.sum(ea.arcsin(x / 4.0) + ea.arctan2(x, x)),  # arcsin'(1) = inf; 0/0 at (0, 0)
        lambda x: ea.sum(ea.hypot(x, x) + ea.std(x * 0.0)),  # std of a constant: 0 * inf
    ],
)
def test_derivatives_at_masked_and_singular_points_do_not_warn(f):
    x = np.array([0.0, 4.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        eager = ea.grad(f)(x)
        jitted = ea.jit(ea.grad(f))
        np.testing.assert_array_equal(jitted(x), eager)  # staging
        np.testing.assert_array_equal(jitted(x), eager)  # the compiled program
        ea.hvp(f, (x,), (np.ones(2),))
        ea.jacfwd(ea.grad(f))(x)
    assert "errstate" in ea.jit(ea.grad(f), backend="numpy").lower(x).source


@both_modes
def test_power_gradient_in_the_exponent_at_a_zero_base_and_negative_exponent():
    with warnings.catch_warnings(), np.errstate(divide="ignore"):  # the forward's 0 ** -1 is numpy's
        warnings.simplefilter("error")  # an inf * 0 ('invalid') in the rule would fail here
        g = ea.grad(lambda y: ea.sum(ea.power(np.array([0.0, 0.0, 2.0]), y)))(np.array([-1.0, 0.5, 3.0]))
    assert_close(g, [0.0, 0.0, 8.0 * np.log(2.0)])


@both_modes
def test_forward_values_warn_as_numpy_does():
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        ea.log(np.zeros(1))


# -- on every array library --------------------------------------------------------------------

# op: (low, high) of the data the op is tested on (away from poles and branch cuts)
DOMAIN = {
    "log": (0.2, 3),
    "log2": (0.2, 3),
    "log10": (0.2, 3),
    "sqrt": (0.2, 3),
    "log1p": (-0.5, 2),
    "arcsin": (-0.9, 0.9),
    "arccos": (-0.9, 0.9),
    "arctanh": (-0.9, 0.9),
    "arccosh": (1.2, 3),
    "tan": (-1.2, 1.2),
}


# binary op: the domains of its two operands
DOMAIN2 = {
    "power": ((0.5, 2), (-2, 2)),
    "divide": ((-2, 2), (0.5, 2)),
    "mod": ((-3, 3), (0.7, 2)),
}


def _unary_domain(name: str) -> tuple[float, float]:
    return DOMAIN.get(name, (-2, 2))


# -- every elementwise op: values and gradients on every library -------------------------------


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_value_and_both_gradients(lib, name):
    (lx, hx), (ly, hy) = DOMAIN2.get(name, ((-2, 2), (-2, 2)))
    x, y = (
        uniform_away_from_zero(lx, hx, (2, 3), seed=1),
        uniform_away_from_zero(ly, hy, (3,), seed=2),
    )  # broadcast
    op = getattr(ea, name)

    def f(a, b):
        return ea.sum(op(a, b) * ea.sin(a))

    with lib.lazy():
        z = op(lib.asarray(x), lib.asarray(y))
        gx, gy = ea.grad(f, argnums=(0, 1))(lib.asarray(x), lib.asarray(y))
    check_lib(lib, z, op(x, y), rtol=1e-7, atol=1e-7)
    want_x, want_y = ea.grad(f, argnums=(0, 1))(x, y)
    check_lib(lib, gx, want_x, rtol=1e-7, atol=1e-7)
    check_lib(lib, gy, want_y, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_a_python_number(lib, name):
    """A Python number operand, on either side, keeps the array's dtype (numpy's weak scalars)."""
    (lx, hx), _ = DOMAIN2.get(name, ((-2, 2), (-2, 2)))
    x = uniform_away_from_zero(lx, hx).astype(np.float32)
    c = 1.5 if name != "power" else 2
    op = getattr(ea, name)
    with lib.lazy():
        right = op(lib.asarray(x), c)
        g = ea.grad(lambda v: ea.sum(op(v, c)))(lib.asarray(x))
    check_lib(lib, right, op(x, c), rtol=1e-5, atol=1e-5, dtype=np.float32)
    check_lib(lib, g, ea.grad(lambda v: ea.sum(op(v, c)))(x), rtol=1e-5, atol=1e-5, dtype=np.float32)
    if name != "power":  # 1.5 ** x: a positive base
        c = 0.8 if name == "mod" else c
        x = np.abs(x) + 0.5
        check_lib(lib, op(c, lib.asarray(x)), op(c, x), rtol=1e-5, atol=1e-5, dtype=np.float32)


@pytest.mark.parametrize(
    "op",
    [
        lambda v: v * np.float64(2.0),
        lambda v: np.float64(1.5) / v,
        lambda v: v ** np.float64(3.0),
        lambda v: ea.arctan2(np.float64(0.5), v),
        lambda v: ea.hypot(np.float64(0.5), v),
        lambda v: 2.0**v,
        lambda v: np.float64(2.0) ** v,
    ],
    ids=["mul", "rdiv", "pow", "arctan2", "hypot", "rpow", "rpow_numpy"],
)
def test_numpy_scalar_operand_in_every_mode(lib, op):
    """A numpy scalar operand next to another library's array, in the derivative rules: on
    array-api-strict its operators refused the numpy scalar (TypeError: Expected Array or Python
    scalar) in grad, jacfwd and hessian, and under vmap (so hessian) `where` made the 0-d numpy
    condition of ``2.0 ** x``'s slope an array beside a torch or dask one (TypeError: arrays of two
    libraries in one call)."""
    x = np.array([0.3, 0.7, 1.4])
    loss = lambda v: ea.sum(op(v))
    xs = lib.asarray(x)
    with lib.lazy():
        got = (ea.grad(loss)(xs), ea.jacfwd(op)(xs), ea.jacrev(op)(xs), ea.hessian(loss)(xs))
    want = (ea.grad(loss)(x), ea.jacfwd(op)(x), ea.jacrev(op)(x), ea.hessian(loss)(x))
    for g, w in zip(got, want):
        check_lib(lib, g, w, rtol=1e-10, atol=1e-12)


def test_power_of_a_python_number_keeps_float32_in_forward_mode(lib):
    """``2.0 ** x`` of float32 `x` is float32, and so is its tangent: its slope took numpy's log of
    the number, a float64 scalar, which made the tangent (and jacfwd's Jacobian) float64."""
    x = np.array([0.3, 0.7, 1.4], dtype=np.float32)
    xs = lib.asarray(x)
    with lib.lazy():
        out, tangent = ea.jvp(lambda v: 2.0**v, (xs,), (xs,))
        jac = ea.jacfwd(lambda v: 2.0**v)(xs)
    check_lib(lib, out, 2.0**x, rtol=1e-6, atol=1e-6, dtype=np.float32)
    check_lib(lib, tangent, 2.0**x * np.log(2.0) * x, rtol=1e-6, atol=1e-6, dtype=np.float32)
    check_lib(lib, jac, np.diag(2.0**x * np.log(2.0)), rtol=1e-6, atol=1e-6, dtype=np.float32)


@pytest.mark.parametrize("name", sorted(PREDICATES))
def test_predicates(lib, name):
    x = np.array([[0.5, -1.0, np.inf], [np.nan, 2.0, -np.inf]])
    y = np.array([0.5, 1.0, np.inf])
    op = getattr(ea, name)
    args = (x, y) if getattr(np, name).nin == 2 else (x,)
    with lib.lazy():
        got = op(*[lib.asarray(a) for a in args])
    check_lib(lib, got, op(*args), dtype=np.dtype(bool), rtol=1e-7, atol=1e-7)
    if len(args) == 2:  # against a Python number: numpy's comparison
        check_lib(lib, op(lib.asarray(x), 0.5), op(x, 0.5), dtype=np.dtype(bool), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", ["conj", "real", "imag"])
def test_complex_parts(lib, name):
    z = uniform_away_from_zero(-2, 2) + 1j * uniform_away_from_zero(-2, 2, seed=3)
    op = getattr(ea, name)

    def f(v):
        return ea.sum(ea.real(op(v) * ea.conj(op(v))))

    with lib.lazy():
        got = op(lib.asarray(z))
        g = ea.grad(f)(lib.asarray(z))
    check_lib(lib, got, op(z), rtol=1e-7, atol=1e-7)
    check_lib(lib, g, ea.grad(f)(z), rtol=1e-7, atol=1e-7)


def test_a_real_operand_of_a_complex_product_has_a_real_gradient():
    """x real (broadcast), y complex: the product and its cotangent are complex; x's gradient is
    the real part of the sum that reaches it, in x's dtype. Closed form: d/dx sum(real(x * y))
    = real(y) summed over the broadcast axis. Kills: einsum.sum_to_shape 34"""
    x = uniform_away_from_zero(-2, 2, shape=(3,))
    y = uniform_away_from_zero(-2, 2, shape=(2, 3)) + 1j * uniform_away_from_zero(-2, 2, (2, 3), seed=3)
    g = ea.grad(lambda x: ea.sum(ea.real(x * y)))(x)
    assert g.dtype == np.float64
    assert_close(g, y.real.sum(axis=0), rtol=1e-12)
    leaf = ea.tensor(x, requires_grad=True)  # backward() stores what reaches the leaf as it is
    ea.sum(ea.real(leaf * y)).backward()
    assert leaf.grad.dtype == np.float64
    assert_close(leaf.grad, y.real.sum(axis=0), rtol=1e-12)


def test_internal_conj_and_real_of_real_values_are_the_values_themselves():
    """`elementwise.conj` and `elementwise.real` (the rules' internal forms) hand a real value back as
    it is, raw or traced: no copy, no operation recorded; complex values get numpy's conjugate and
    real part.

    Kills: conj 1, real 1 (a conj or real operation bound on real values too)."""
    for v in (np.array([1.5, -2.0]), np.arange(3), np.float32(2.5)):
        assert elementwise.conj(v) is v and elementwise.real(v) is v
    seen = []

    def f(v):
        seen.append((type(v), elementwise.conj(v) is v, elementwise.real(v) is v))
        return ea.sum(v * v)

    assert_close(ea.grad(f)(np.array([1.0, 2.0])), [2.0, 4.0])
    assert seen == [(ea.Tensor, True, True)]
    z = np.array([1 + 2j, -3j])
    np.testing.assert_array_equal(elementwise.conj(z), np.conj(z))
    np.testing.assert_array_equal(elementwise.real(z), np.real(z))


def test_table_names_every_op():
    """Every elementwise op has its standard name or a generic kernel (what other libraries run)."""
    for name in [*UNARY, *BINARY, *CONSTANT, *PREDICATES, *BITWISE, "conj", "real", "imag"]:
        assert name in STANDARD or name in GENERIC, name
    assert STANDARD["arcsin"] == "asin" and STANDARD["power"] == "pow" and STANDARD["mod"] == "remainder"


def test_a_decorated_derivative_entry_keeps_the_values_it_reads():
    """A node keeps the values its derivative entries read, found from their bytecode
    (`_reads`). An entry behind a ``functools.wraps`` decorator is read through to the
    function it wraps: the wrapper's own ``*args`` would read as "no parameter", the node
    would keep none of the values the rule needs, and its VJP would fail (mutmut wraps
    every function so, which is how this was found)."""

    def d(x, y, z):
        return y * x

    @functools.wraps(d)
    def wrapped(*args):
        return d(*args)

    assert elementwise._reads(d) == elementwise._reads(wrapped) == (0, 1)
    assert elementwise._keeper((d, d))([True, False]) == ((True, True), False)
    assert elementwise._keeper((wrapped, d))([True, False]) == ((True, True), False)
    assert elementwise._reads(lambda x, y, z: 1.0) == ()


def test_reads_names_whole_parameters_and_those_inner_functions_capture():
    """`_reads` finds a parameter by its whole name (``operand``, not its letters), and counts a
    parameter an inner function captures (a cell variable: the entry itself never loads it, the
    inner function does). An entry reading its operand only so once made its node keep nothing,
    and the VJP then read a placeholder for the value; built into a primitive, it now
    differentiates."""

    def slope(operand, result):
        def twice():  # d/dx x**2: the operand is read only by this function
            return 2 * operand

        return twice()

    assert elementwise._reads(slope) == (0,)
    assert elementwise._reads(lambda operand, result: result * operand) == (0, 1)
    assert elementwise._reads(lambda operand, result: result) == (1,)
    prim = elementwise._unary_prim("square_probe", np.square, slope)
    with forget_rules(prim):
        x = np.array([0.5, -1.5, 2.0])
        assert_close(ea.grad(lambda v: ea.sum(wrap(bind(prim, (v,), {}))))(x), 2 * x)


# -- the factories, called again: every table entry as they build it -------------------------------
# PRIMITIVES, the public operations and the internal ones are built when the module is imported.
# These tests build each entry again with the same factories (`_unary_prim`, `_binary_prim`,
# `_impl`, `_keeper`, `public`, `_raw1`) and check what they make against numpy and central
# differences, on numpy and on array-api-strict (the library path of `_impl`'s functions).

STRICT = load("array_api_strict")
needs_strict = pytest.mark.skipif(STRICT is None, reason="array-api-strict is not installed")


@pytest.fixture
def rebuild(monkeypatch):
    """``rebuild(name)``: the entry `name` built again by the factories and put in PRIMITIVES in
    place of the import-time primitive (a public operation made after it uses it); the library
    path's caches start empty (it plans with the kernel it is given). All undone after the test."""
    made = []
    for cache in ("_targets", "_library_kernels", "_direct"):
        monkeypatch.setattr(elementwise, cache, {})

    def build(name):
        monkeypatch.delitem(ea.core.primitives, name)  # made again, as the module makes it
        if name in UNARY:
            prim = elementwise._unary_prim(name, *UNARY[name])
        elif name in BINARY:
            prim = elementwise._binary_prim(name, *BINARY[name])
        else:  # as the module makes them: a primitive with no rules, its derivative zero
            kernel = {**CONSTANT, **PREDICATES}[name]
            prim = elementwise._declare(
                Primitive(name, elementwise._impl(name, kernel)), kernel, zero_derivative=True
            )
        made.append(prim)
        monkeypatch.setitem(PRIMITIVES, name, prim)
        return prim

    yield build
    drop_rules(*made)


def _no_library_path(*args):
    raise AssertionError("numpy operands went through the other-library path (_foreign)")


def _public(name, arity):
    """`elementwise.public(name)`, checked as an operation of `arity` operands named `name`."""
    op = elementwise.public(name)
    assert op.__name__ == op.__qualname__ == name
    assert len(inspect.signature(op).parameters) == arity
    if name in elementwise._DOCS:
        assert op.__doc__ == elementwise._DOCS[name]
    else:
        assert op.__doc__.startswith(f"Elementwise {name}"), op.__doc__
    return op


def _reference(name):
    return UNARY_CASES[name][0] if name in UNARY_CASES else getattr(np, name)


@needs_strict
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_prim_builds_each_entry(rebuild, monkeypatch, name):
    """`_unary_prim` on a UNARY entry, and `public` on the primitive: a one-operand operation named
    after the entry, with numpy's values (on numpy arrays the kernel itself, honouring ``out=``;
    numpy scalars too), its VJP and JVP (real, and complex where numpy's function is complex: its
    value too, also on array-api-strict) against central differences, a linear entry keeping no
    values; and on array-api-strict arrays of that library with the same values and derivatives."""
    prim = rebuild(name)
    assert prim.name == name
    op = _public(name, 1)
    ref = _reference(name)
    x = uniform_away_from_zero(*_unary_domain(name), (2, 3), seed=21)
    t, w = normal((2, 3)), normal((2, 3))
    with monkeypatch.context() as m:
        m.setattr(elementwise, "_foreign", _no_library_path)
        check_op(op, ref, x, rtol=1e-5, atol=1e-7)
        if isinstance(UNARY[name][0], np.ufunc):
            buffer = np.empty_like(x)
            assert prim.impl(x, out=buffer) is buffer
            assert_close(buffer, ref(x))
    assert_close(prim.impl(x[0, 1]), ref(x[0, 1]))
    _, dy = ea.jvp(op, (x,), (t,))
    assert_close(dy, numeric_jvp(ref, (x,), (t,)), rtol=1e-5, atol=1e-7)
    if name != "relu":  # a complex point near the real domain, a complex tangent
        z, tz = x + 0.25j * normal((2, 3)), t + 1j * normal((2, 3))
        value, dz = ea.jvp(op, (z,), (tz,))
        assert_close(value, ref(z), rtol=1e-12, atol=1e-12)
        assert_close(dz, numeric_jvp(ref, (z,), (tz,)), rtol=1e-5, atol=1e-7)
        check_lib(STRICT, op(STRICT.asarray(z)), ref(z), rtol=1e-12, atol=1e-12)
    if UNARY[name][1] == -1:  # linear: its VJP reads no value
        assert core.keep_rules[prim]([True]) == ((False,), False)
    X = STRICT.asarray(x)
    check_lib(STRICT, op(X), ref(x), rtol=1e-12, atol=1e-12)
    g = ea.grad(lambda v: ea.sum(op(v) * STRICT.asarray(w)))(X)
    check_lib(STRICT, g, numeric_vjp(ref, (x,), w), rtol=1e-5, atol=1e-7)
    _, dy = ea.jvp(op, (X,), (STRICT.asarray(t),))
    check_lib(STRICT, dy, numeric_jvp(ref, (x,), (t,)), rtol=1e-5, atol=1e-7)


def _cotangent_dtype_probe(seen, key):
    """The identity, with a VJP of its own that records the dtype of the cotangent it receives."""
    probe = ea.custom_vjp(lambda v: v)

    def bwd(residuals, g):
        seen[key] = strip(g).dtype
        return (g,)

    probe.defvjp(lambda v: (v, None), bwd)
    return probe


def _with(args, argnum, v):
    """`args` with the one at `argnum` replaced by `v`."""
    return [v if k == argnum else a for k, a in enumerate(args)]


def _first_derivatives(op, args, argnum, tangent):
    """In the operand `argnum` (the other held constant): u -> the gradient of sum(op(...) * u),
    and u -> the JVP of op along `tangent`."""
    return (
        lambda u: ea.grad(lambda s: ea.sum(op(*_with(args, argnum, s)) * s))(u),
        lambda u: ea.jvp(lambda s: op(*_with(args, argnum, s)), (u,), (tangent,))[1],
    )


@needs_strict
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_prim_builds_each_entry(rebuild, monkeypatch, name):
    """`_binary_prim` on a BINARY entry, and `public` on the primitive: a two-operand operation
    named after the entry, with numpy's values and broadcasting (the kernel itself on numpy values,
    ``out=`` honoured), both VJPs against central differences (together, and each with the other
    operand constant: a node keeps only what that partial reads), each cotangent in its operand's
    dtype (float32 and float64 operands) and a float32 tangent float32, the JVP along both tangents
    and along one (broadcast to the result's shape), second derivatives with one operand traced and
    the other plain; on array- api-strict the same, Python numbers on either side too."""
    prim = rebuild(name)
    assert prim.name == name
    op = _public(name, 2)
    ref = getattr(np, name)
    (lx, hx), (ly, hy) = DOMAIN2.get(name, ((-2, 2), (-2, 2)))
    x, y = uniform_away_from_zero(lx, hx, (2, 3), seed=22), uniform_away_from_zero(ly, hy, (3,), seed=23)
    tx, ty, w = normal((2, 3)), normal((3,)), normal((2, 3))
    with monkeypatch.context() as m:
        m.setattr(elementwise, "_foreign", _no_library_path)
        check_op(op, ref, x, y, rtol=1e-5, atol=1e-7)
        for args in ((x, 1.5), (1.5, np.abs(x) + 0.5)):
            assert_close(op(*args).numpy(), ref(*args))
        buffer = np.empty_like(x)
        assert prim.impl(x, y, out=buffer) is buffer
        assert_close(buffer, ref(x, y))
    if name in ("add", "subtract"):  # linear: its VJP reads no value
        assert core.keep_rules[prim]([True, True]) == ((False, False), False)
    gx = ea.grad(lambda a: ea.sum(op(a, y) * w))(x)
    gy = ea.grad(lambda b: ea.sum(op(x, b) * w))(y)
    assert_close(gx, numeric_vjp(ref, (x, y), w, argnum=0), rtol=1e-5, atol=1e-7)
    assert_close(gy, numeric_vjp(ref, (x, y), w, argnum=1), rtol=1e-5, atol=1e-7)
    seen = {}  # the dtype of the cotangent each operand receives: its own
    probe_x, probe_y = _cotangent_dtype_probe(seen, "x"), _cotangent_dtype_probe(seen, "y")
    g32, g64 = ea.grad(lambda a, b: ea.sum(op(probe_x(a), probe_y(b))), (0, 1))(x.astype(np.float32), y)
    assert g32.dtype == np.float32 and g64.dtype == np.float64
    assert seen == {"x": np.float32, "y": np.float64}
    x32, y32, tx32, ty32 = (a.astype(np.float32) for a in (x, y, tx, ty))
    assert ea.jvp(op, (x32, y32), (tx32, ty32))[1].dtype == np.float32  # and the tangent its primal's
    _, dz = ea.jvp(op, (x, y), (tx, ty))
    assert_close(dz, numeric_jvp(ref, (x, y), (tx, ty)), rtol=1e-5, atol=1e-7)
    _, dz = ea.jvp(lambda b: op(x, b), (y,), (ty,))
    assert_close(dz, numeric_jvp(lambda b: ref(x, b), (y,), (ty,)), rtol=1e-5, atol=1e-7)
    x0 = np.array(x[0, 0])
    _, dz = ea.jvp(lambda a: op(a, y), (x0,), (np.array(1.0),))
    assert_close(dz, numeric_jvp(lambda a: ref(a, y), (x0,), (1.0,)), rtol=1e-5, atol=1e-7)
    # on array-api-strict
    X, Y = STRICT.asarray(x), STRICT.asarray(y)
    check_lib(STRICT, op(X, Y), ref(x, y), rtol=1e-12, atol=1e-12)
    check_lib(STRICT, op(X, 1.5), ref(x, 1.5), rtol=1e-12, atol=1e-12)
    check_lib(STRICT, op(1.5, STRICT.asarray(np.abs(x) + 0.5)), ref(1.5, np.abs(x) + 0.5), rtol=1e-12)
    check_lib(STRICT, prim.impl(X, Y, out=STRICT.asarray(np.empty_like(x))), ref(x, y), rtol=1e-12)
    gx, gy = ea.grad(lambda a, b: ea.sum(op(a, b) * STRICT.asarray(w)), (0, 1))(X, Y)
    check_lib(STRICT, gx, numeric_vjp(ref, (x, y), w, argnum=0), rtol=1e-5, atol=1e-7)
    check_lib(STRICT, gy, numeric_vjp(ref, (x, y), w, argnum=1), rtol=1e-5, atol=1e-7)
    x1, t1 = x[0], tx[0]  # one shape: the second derivatives' references are central differences
    for argnum in (0, 1):  # the other operand plain: derivatives of derivatives mixing the two
        on_numpy = _first_derivatives(op, (x1, y), argnum, t1)
        on_strict = _first_derivatives(op, (STRICT.asarray(x1), Y), argnum, STRICT.asarray(t1))
        for first, first_strict in zip(on_numpy, on_strict):
            second = ea.grad(lambda u, f=first: ea.sum(f(u)))((x1, y)[argnum])
            assert_close(
                second, numeric_grad(lambda u, f=first: np.sum(f(u)), (x1, y)[argnum]), rtol=1e-5, atol=1e-6
            )
            got = ea.grad(lambda u, f=first_strict: ea.sum(f(u)))(STRICT.asarray((x1, y)[argnum]))
            check_lib(STRICT, got, second, rtol=1e-10, atol=1e-10)


@needs_strict
@pytest.mark.parametrize("name", sorted([*CONSTANT, *PREDICATES]))
def test_impl_builds_each_constant_and_boolean_entry(rebuild, monkeypatch, name):
    """`_impl` on a CONSTANT or PREDICATES kernel, and `public` on the primitive: one operand or two
    as numpy's function takes (the comparisons two, the tests and sign, floor, ceil, round one),
    numpy's values exactly (the kernel itself on numpy values; round's ``decimals`` passed on), a
    zero derivative; on array-api-strict the same values, against Python numbers too."""
    prim = rebuild(name)
    ref = getattr(np, name)
    binary = getattr(ref, "nin", 1) == 2
    op = _public(name, 2 if binary else 1)
    if name in PREDICATES:
        x, y = np.array([[0.5, -1.0, np.inf], [np.nan, 2.0, -np.inf]]), np.array([0.5, 1.0, np.inf])
    else:
        x, y = uniform_away_from_zero(-3, 3, (2, 3), seed=24) * 1.37, np.array([0.7, -1.3, 2.0])
    args = (x, y) if binary else (x,)
    with monkeypatch.context() as m:
        m.setattr(elementwise, "_foreign", _no_library_path)
        np.testing.assert_array_equal(op(*args).numpy(), ref(*args))
        if binary:
            np.testing.assert_array_equal(op(x, 0.5).numpy(), ref(x, 0.5))
            np.testing.assert_array_equal(op(0.5, x).numpy(), ref(0.5, x))
        if name == "round":
            np.testing.assert_array_equal(prim.impl(x, decimals=1), np.round(x, 1))
    strict_args = [STRICT.asarray(a) for a in args]
    check_lib(STRICT, op(*strict_args), ref(*args), rtol=0, atol=0)
    if binary:
        check_lib(STRICT, op(strict_args[0], 0.5), ref(x, 0.5), rtol=0, atol=0)
        check_lib(STRICT, op(0.5, strict_args[0]), ref(0.5, x), rtol=0, atol=0)
    if name == "round":
        check_lib(STRICT, prim.impl(strict_args[0], decimals=1), np.round(x, 1), rtol=1e-12, atol=1e-12)
    if name in CONSTANT:  # op(v) is constant in v
        assert_close(ea.grad(lambda v: ea.sum(op(*args[:0], v, *args[1:]) * v))(x), ref(*args))


@pytest.mark.parametrize("name", ["exp", "log", "sin", "cos", "sinh", "cosh", "sqrt", "sigmoid", "floor"])
def test_raw1_makes_the_internal_operations(name):
    """`_raw1(name)`, the internal form of an entry the derivative table uses: a raw numpy array in
    gives numpy's value as a raw array out; a traced value in is differentiated."""
    f, ref = elementwise._raw1(name), _reference(name)
    x = uniform_away_from_zero(*_unary_domain(name), (3,), seed=25) * (1.37 if name == "floor" else 1)
    y = f(x)
    assert type(y) is np.ndarray
    assert_close(y, ref(x))
    want = np.zeros(3) if name == "floor" else numeric_grad(lambda v: np.sum(ref(v)), x)
    assert_close(ea.grad(lambda v: ea.sum(f(v)))(x), want, rtol=1e-5, atol=1e-7)


# -- dtypes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["exp", "sigmoid", "softplus", "relu", "arcsin", "exp2", "abs"])
def test_float32_stays_float32(lib, name):
    x = uniform_away_from_zero(-0.9, 0.9).astype(np.float32)
    op = getattr(ea, name)
    with lib.lazy():
        y = op(lib.asarray(x) * 0.5)
        g = ea.grad(lambda v: ea.sum(op(v * 0.5)))(lib.asarray(x))
    check_lib(lib, y, op(x * 0.5), rtol=1e-6, atol=1e-6, dtype=np.float32)
    check_lib(lib, g, ea.grad(lambda v: ea.sum(op(v * 0.5)))(x), rtol=1e-6, atol=1e-6, dtype=np.float32)


def test_integers_promote_as_numpy(lib, monkeypatch):
    """Integer operands go to float64 where numpy's result is floating (sin, divide, arctan2), and
    stay integers where it is (add), whatever was planned before for the same dtypes (the plans
    start empty here, an integer sum first: the sine of integers is still float64); numpy scalars
    convert as numpy's dtype rules say (np.float32 with float32 stays float32); an int16 operand beside
    float32 is cast to float32, not float64.

    Kills: _foreign 94 (the cast to float64 whatever numpy's dtype)."""
    for cache in ("_targets", "_direct"):
        monkeypatch.setattr(elementwise, cache, {})
    i = np.arange(1, 7, dtype=np.int64).reshape(2, 3)
    f = np.array([0.5, 1.5, 2.5], dtype=np.float32)
    for got, want in [
        (ea.add(lib.asarray(i), lib.asarray(i)), np.add(i, i)),
        (ea.sin(lib.asarray(i)), ea.sin(i)),
        (ea.divide(lib.asarray(i), 4), ea.divide(i, 4)),
        (ea.arctan2(lib.asarray(i), lib.asarray(i[::-1].copy())), ea.arctan2(i, i[::-1].copy())),
        (ea.multiply(lib.asarray(i), 0.5), ea.multiply(i, 0.5)),
        (ea.less(lib.asarray(i), 2.5), ea.less(i, 2.5)),
        (ea.add(lib.asarray(i), 2), ea.add(i, 2)),
        (ea.add(lib.asarray(i), np.int64(2)), np.add(i, np.int64(2))),
        (ea.multiply(lib.asarray(f), np.float32(0.5)), np.multiply(f, np.float32(0.5))),
        (ea.add(lib.asarray(i.astype(np.int16)), lib.asarray(f)), np.add(i.astype(np.int16), f)),  # float32
    ]:
        check_lib(lib, got, want, rtol=1e-7, atol=1e-7)


# -- higher order, mixed traced/plain operands, jit's buffers ------------------------------------


def test_second_derivatives(lib):
    x = uniform_away_from_zero(0.3, 1.5, (3,), seed=7)

    def f(v):
        return ea.sum(ea.sin(v) * ea.exp(v) + ea.power(v, 3) + ea.logsumexp(v) + ea.softplus(v))

    t = uniform_away_from_zero(-1, 1, (3,), seed=8)
    with lib.lazy():
        _, h = ea.jvp(ea.grad(f), (lib.asarray(x),), (lib.asarray(t),))  # forward over reverse
        gg = ea.grad(lambda v: ea.sum(ea.grad(f)(v) ** 2))(lib.asarray(x))
    check_lib(lib, h, ea.jvp(ea.grad(f), (x,), (t,))[1], rtol=1e-7, atol=1e-7)
    check_lib(lib, gg, ea.grad(lambda v: ea.sum(ea.grad(f)(v) ** 2))(x), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", ["divide", "power", "arctan2", "hypot", "logaddexp", "mod"])
def test_binary_one_operand_traced(lib, name):
    """Gradient in one operand with the other a plain array of the same library (and the
    Hessian-vector product through it: the derivative mixes plain and traced values)."""
    (lx, hx), (ly, hy) = DOMAIN2.get(name, ((-2, 2), (-2, 2)))
    x, y = uniform_away_from_zero(lx, hx, (3,), seed=8), uniform_away_from_zero(ly, hy, (3,), seed=9)
    op = getattr(ea, name)
    X = lib.asarray(x)

    def f(b, a=X):
        return ea.sum(op(a, b) * b)

    def f_np(b):
        return ea.sum(op(x, b) * b)

    with lib.lazy():
        g = ea.grad(f)(lib.asarray(y))
        h = ea.grad(lambda b: ea.sum(ea.grad(f)(b)))(lib.asarray(y))
    check_lib(lib, g, ea.grad(f_np)(y), rtol=1e-7, atol=1e-7)
    check_lib(lib, h, ea.grad(lambda b: ea.sum(ea.grad(f_np)(b)))(y), rtol=1e-7, atol=1e-7)


def test_kernels_take_jits_out_buffer(lib):
    """`einad.jit` hands numpy ufunc kernels a dying buffer as ``out=``; other libraries ignore it."""
    x, y = uniform_away_from_zero(-2, 2), uniform_away_from_zero(0.5, 2, seed=1)
    for name in ["add", "multiply", "sin", "exp", "maximum"]:
        prim = PRIMITIVES[name]
        args = (x, y) if name in BINARY else (x,)
        buf = lib.asarray(np.empty_like(x))
        got = prim.impl(*[lib.asarray(a) for a in args], out=buf)
        check_lib(lib, got, prim.impl(*args), rtol=1e-7, atol=1e-7)


# -- one library per call ----------------------------------------------------------------------


def test_strict_array_stays_strict():
    xp = pytest.importorskip("array_api_strict")
    xp.set_array_api_strict_flags(api_version="2024.12")
    x = xp.asarray([0.5, 1.0, 2.0])
    y = strip(ea.exp(x))
    assert type(y) is type(x)
    g = ea.grad(lambda v: ea.sum(ea.exp(v) * ea.sigmoid(v)))(x)
    assert type(g) is type(x)
    with pytest.raises(TypeError):  # array-api-strict itself refuses numpy arrays mixed in
        xp.exp(np.ones(3)) + x


def test_mixing_libraries_is_a_type_error_naming_both():
    torch = pytest.importorskip("torch")
    t = torch.ones(3, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"(?s)torch.*numpy|numpy.*torch"):
        ea.add(t, np.ones(3))
    with pytest.raises(TypeError, match=r"(?s)torch.*numpy|numpy.*torch"):
        ea.maximum(np.ones(3), t)


# -- torch: against torch.autograd --------------------------------------------------------------


def _torch_cases(dtype: Any) -> list[tuple[str, Any, Any]]:
    import torch

    w = torch.arange(4.0, dtype=dtype)

    return [
        ("sin", lambda v: ea.sum(ea.sin(v)), lambda v: torch.sin(v).sum()),
        ("exp*log", lambda v: ea.sum(ea.exp(v) * ea.log(v)), lambda v: (torch.exp(v) * torch.log(v)).sum()),
        ("softplus", lambda v: ea.sum(ea.softplus(v)), lambda v: torch.nn.functional.softplus(v).sum()),
        ("max", lambda v: ea.sum(ea.max(v, axis=1) ** 2), lambda v: (torch.amax(v, dim=1) ** 2).sum()),
        (
            "logsumexp",
            lambda v: ea.sum(ea.logsumexp(v, axis=0) * w),
            lambda v: (torch.logsumexp(v, dim=0) * w).sum(),
        ),
        (
            "pow*atan2",
            lambda v: ea.sum(ea.power(v, 1.5) * ea.arctan2(v, 2.0)),
            lambda v: (v**1.5 * torch.atan2(v, torch.tensor(2.0, dtype=v.dtype))).sum(),
        ),
    ]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", range(6))
def test_torch_gradients_match_autograd(case, dtype):
    torch = pytest.importorskip("torch")
    x = torch.from_numpy(uniform_away_from_zero(0.3, 2, (3, 4), seed=10).astype(dtype))
    name, f, f_torch = _torch_cases(x.dtype)[case]
    g = ea.grad(f)(x)
    xt = x.clone().requires_grad_(True)
    f_torch(xt).backward()
    assert isinstance(g, torch.Tensor) and g.dtype == x.dtype, name
    torch.testing.assert_close(g, xt.grad, rtol=1e-5 if dtype == "float32" else 1e-10, atol=1e-6)


def test_jit_elementwise_and_reductions(lib):
    """A jitted chain of elementwise ops (numpy ufuncs get `out=` buffers) and reductions."""
    x = uniform_away_from_zero(0.3, 2, (3, 4), seed=11)

    def f(v):
        a = ea.exp(ea.sin(v) * 2.0) + ea.sigmoid(v) - ea.sqrt(v)
        return ea.sum(ea.logsumexp(a * ea.log(v), axis=1) + ea.max(a, axis=1) * ea.prod(v, axis=1))

    with lib.lazy():
        y = compiled(ea.jit(f))(lib.asarray(x))
        g = compiled(ea.jit(ea.grad(f)))(lib.asarray(x))
    check_lib(lib, y, f(x), rtol=1e-12, atol=1e-12)
    check_lib(lib, g, ea.grad(f)(x), rtol=1e-12, atol=1e-12)


def test_an_op_on_arrays_that_need_no_cast_plans_once(lib, monkeypatch):
    """The per-op saving on other libraries: after the first call, an elementwise op whose
    operands need no cast goes straight to the library's kernel (no dtype planning)."""
    if lib.name == "numpy":
        pytest.skip("numpy arrays take numpy's kernels directly; there is nothing to plan")
    from einad.rules import elementwise

    x = lib.asarray(np.linspace(0.1, 0.9, 6))
    ea.sin(x)  # plans and caches
    calls = []
    real = elementwise._target
    monkeypatch.setattr(elementwise, "_target", lambda *a: calls.append(a) or real(*a))
    y = ea.sin(x)
    assert calls == []
    np.testing.assert_allclose(lib.numpy(y), np.sin(np.linspace(0.1, 0.9, 6)))
    ea.sin(lib.asarray(np.arange(3)))  # integers are cast to float64: planned
    assert calls


def test_forward_mode_of_elementwise_ops_on_dask_arrays_of_unknown_chunk_sizes():
    """A dask array of unknown chunk sizes (after a boolean mask) has nan among its sizes, and
    nan is unequal to itself: jvp refused a tangent of shape (nan, 3) for a primal of shape
    (nan, 3), and the tangent of ``v * v`` was "broadcast" to the primal's (nan, 3), a reshape
    dask refused. The tangents stay lazy and take the closed
    forms (2 v t, t, 3 v² t, the masked t)."""
    da = pytest.importorskip("dask.array")
    a = np.random.default_rng(3).uniform(-1.0, 1.0, (6, 3))
    t = np.random.default_rng(4).standard_normal((6, 3))
    keep = a[:, 0] > -0.5
    x = da.from_array(a, chunks=(2, 2))[da.from_array(keep, chunks=2)]
    v = da.from_array(t, chunks=(2, 2))[da.from_array(keep, chunks=2)]
    assert np.isnan(x.shape[0])
    au, tu = a[keep], t[keep]
    cases = [
        (lambda z: z * z, 2 * au * tu),
        (lambda z: ea.add(z, 2.0), tu),
        (lambda z: ea.power(z, 3.0), 3 * au**2 * tu),
        (lambda z: ea.where(z > 0, z, 0.0), np.where(au > 0, tu, 0.0)),
    ]
    for f, want in cases:
        _, tangent = ea.jvp(f, (x,), (v,))
        assert isinstance(tangent, da.Array)
        assert_close(np.asarray(tangent.compute()), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "call",
    [
        ea.add,
        ea.maximum,
        ea.arctan2,
        lambda x, y: ea.tensor(x) * y,
        lambda x, y: ea.where(ea.tensor(y) > 1, x, 0.0),
    ],
    ids=["add", "maximum", "arctan2", "operator", "where"],
)
def test_shapes_that_do_not_broadcast_are_numpys_value_error_on_every_library(lib, call):
    """Operands whose shapes do not broadcast are a ValueError, as numpy's, naming both shapes, on every
    library: torch raised a RuntimeError of its own ("The size of tensor a (4) must match ..."),
    which an ``except ValueError`` written for numpy missed."""
    a, b = np.ones((3, 4)), np.ones((3, 2))
    with pytest.raises(ValueError):
        np.add(a, b)  # numpy's
    with pytest.raises(ValueError, match="broadcast"):
        call(lib.asarray(a), lib.asarray(b))


def test_python_numbers_reach_a_library_of_the_2024_standard_as_they_are(lib, monkeypatch):
    """``t * 2.0``, ``t ** 2``, ``t + 1`` on arrays of another library in numpy's computing dtype:
    the library gets the Python number itself (the standard's 2024.12 takes it, weak), not a
    0-d array made of it (which torch's pow ran 5x slower with); where numpy would compute in
    another dtype (int32 * 2.5: float64) the operands are still cast first. numpy's values and
    dtypes either way.

    Kills: `_foreign` without its weak-number path (a 0-d array per number), or one taking it
    where the dtypes differ (torch: int32 * 2.5 gives float32)."""
    if lib.name == "numpy":
        pytest.skip("numpy's own ufuncs take Python numbers")
    made = []
    real = arrays.asarray
    monkeypatch.setattr(arrays, "asarray", lambda *a, **k: made.append(a) or real(*a, **k))
    x = np.array([0.5, -1.5, 2.0], np.float32)
    with lib.lazy():
        got = [ea.multiply(lib.asarray(x), 2.0), ea.power(lib.asarray(x), 2), ea.add(1, lib.asarray(x))]
    assert made == []
    for g, w in zip(got, [x * 2.0, x**2, 1 + x]):
        np.testing.assert_array_equal(lib_value(lib, g, np.float32), w)
    i = np.array([1, -2, 3], np.int32)
    with lib.lazy():
        mixed = ea.multiply(lib.asarray(i), 2.5)
    np.testing.assert_array_equal(lib_value(lib, mixed, np.float64), i * 2.5)


def test_python_ints_out_of_an_integer_dtypes_range_are_numpys_on_every_library(lib):
    """numpy 2 compares a uint8 array with -3 or 300 as the values are (all False for ``<
    -3``) and refuses arithmetic with them (OverflowError); torch cast -3 to 253 and answered
    ``x < -3`` True without a word, or refused 300 with its own error. Every library now gives
    numpy's answers and errors."""
    u = np.array([1, 2, 255], np.uint8)
    s = np.array([-128, 0, 127], np.int8)
    with lib.lazy():
        x, y = lib.asarray(u), lib.asarray(s)
        got = [
            ea.less(x, -3),
            ea.greater_equal(x, -3),
            ea.equal(x, 300),
            ea.not_equal(y, 300),
            ea.less(y, -200),
        ]
    want = [u < -3, u >= -3, u == 300, s != 300, s < -200]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(lib_value(lib, g, np.dtype(bool)), w)
    for op, v in [(ea.add, -3), (ea.multiply, 300), (ea.maximum, -1), (ea.subtract, 256)]:
        with pytest.raises(OverflowError, match=rf"Python integer {v} out of bounds for uint8"):
            op(lib.asarray(u), v)


def test_complex_numbers_are_ordered_as_numpy_orders_them_on_every_library(lib):
    """numpy orders complex numbers by their real parts, then their imaginary parts (a nan
    imaginary part leaves a comparison of real parts undecided), and its maximum and minimum keep
    the first operand where it holds a nan; the standard leaves complex order undefined (torch
    and array-api-strict refuse it). Every library gives numpy's results, ties, nans and
    infinities included, against a Python complex on either side and after promoting float32 to
    complex64, on the second call as on the first (dask lazily).

    Kills: `_kernel_for` (complex comparisons to the library's own function), the `_COMPLEX_ORDER`
    test in `_foreign`'s direct plan or its weak path, `_complex_order`'s nan terms."""
    nan, inf = np.nan, np.inf
    vals = [1 + 2j, 1 + 3j, 1 - 1j, 0j, -2 + 0j]
    vals += [complex(nan, 1), complex(1, nan), complex(inf, 0), complex(-inf, 2)]
    a = np.array([x for x in vals for _ in vals])
    b = np.array([y for _ in vals for y in vals])
    halves = (np.arange(a.size) % 4).astype(np.float32)
    for name in sorted(elementwise._COMPLEX_ORDER):
        op, ref = getattr(ea, name), getattr(np, name)
        cases = [
            ((lib.asarray(a), lib.asarray(b)), (a, b)),
            ((lib.asarray(a), 1 + 3j), (a, 1 + 3j)),
            ((1 + 3j, lib.asarray(a)), (1 + 3j, a)),
            ((lib.asarray(halves), lib.asarray(b.astype(np.complex64))), (halves, b.astype(np.complex64))),
        ]
        for args, np_args in cases:
            with np.errstate(invalid="ignore"):
                want = ref(*np_args)
            for _ in range(2):
                with lib.lazy(), np.errstate(invalid="ignore"):
                    got = op(*args)
                np.testing.assert_array_equal(lib_value(lib, got, want.dtype), want, err_msg=name)


def test_booleans_add_multiply_and_compare_as_numpy_on_every_library(lib):
    """numpy adds booleans as logical or and multiplies them as logical and (so do its maximum and
    minimum), and orders False before True; the standard defines those on numbers only
    (array-api-strict refuses them on booleans). Every library gives numpy's booleans, beside a
    Python bool too, on the second call as on the first.

    Kills: `_kernel_for`'s boolean branch, `_boolean`'s logical table or its order."""
    a = np.array([True, True, False, False])
    b = np.array([True, False, True, False])
    for name in ("add", "multiply", "maximum", "minimum", "less", "less_equal", "greater", "greater_equal"):
        op, ref = getattr(ea, name), getattr(np, name)
        pairs = (((lib.asarray(a), lib.asarray(b)), (a, b)), ((lib.asarray(a), True), (a, True)))
        for args, np_args in pairs:
            want = ref(*np_args)
            for _ in range(2):
                with lib.lazy():
                    got = op(*args)
                np.testing.assert_array_equal(lib_value(lib, got, want.dtype), want, err_msg=name)
