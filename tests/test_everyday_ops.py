"""The everyday ops of issue 14: values against numpy, gradcheck in both modes, second order,
float32 and complex where numpy has them, Jacobians through the batch rules, and replay under
ea.jit (this module runs twice, eager and with every transformation jitted)."""

import warnings

import numpy as np
import pytest

import einad as ea
from einad.core import batch_rules, zero_derivative
from einad.rules import indexing, reductions
from einad.rules.elementwise import PRIMITIVES
from einad.transforms.batching import vmap
from tests.support.numerics import assert_close, numeric_grad

pytestmark = pytest.mark.usefixtures("jit_mode")

RNG = np.random.default_rng(14)


def _uniform(lo, hi, shape=(3, 4), dtype=np.float64):
    return RNG.uniform(lo, hi, shape).astype(dtype)


def _normal(shape=(3, 4), dtype=np.float64):
    z = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        z = z + 1j * RNG.standard_normal(shape)
    return z.astype(dtype)


def _one(dtype):
    return (_normal(dtype=dtype),)


def _mod_args(dtype=np.float64):
    x = _uniform(3.2, 3.8) * np.where(RNG.random((3, 4)) < 0.5, -1, 1)  # x / y far from integers
    return x.astype(dtype), _uniform(1.5, 1.55, dtype=dtype)


IDX = np.array([[2, 0, 3], [1, 1, 0], [3, 3, 2]])  # repeated indices: the VJP accumulates
ROWS = np.array([2, 0, 2])  # a repeated row: set keeps the last write, add adds twice
ORDER = np.array([[1, 0, 3, 2], [3, 2, 1, 0], [0, 1, 2, 3]])

# name: (einad function, numpy reference, arguments maker (dtype -> args), complex inputs allowed)
OPS = {
    "log2": (ea.log2, np.log2, lambda dt: (_uniform(0.3, 3, dtype=dt),), True),
    "log10": (ea.log10, np.log10, lambda dt: (_uniform(0.3, 3, dtype=dt),), True),
    "exp2": (ea.exp2, np.exp2, _one, True),
    "arcsinh": (ea.arcsinh, np.arcsinh, _one, True),
    "arccosh": (ea.arccosh, np.arccosh, lambda dt: (_uniform(1.2, 3, dtype=dt),), True),
    "arctanh": (ea.arctanh, np.arctanh, lambda dt: (_uniform(-0.8, 0.8, dtype=dt),), True),
    "arctan2": (ea.arctan2, np.arctan2, lambda dt: (_normal(dtype=dt), _normal(dtype=dt)), False),
    "hypot": (ea.hypot, np.hypot, lambda dt: (_normal(dtype=dt), _normal(dtype=dt)), False),
    "logaddexp": (ea.logaddexp, np.logaddexp, lambda dt: (_normal(dtype=dt), _normal(dtype=dt)), False),
    "mod": (ea.mod, np.mod, _mod_args, False),
    "sinc": (ea.sinc, np.sinc, _one, True),
    "logaddexp2": (ea.logaddexp2, np.logaddexp2, lambda dt: (_normal(dtype=dt), _normal(dtype=dt)), False),
    "conj": (ea.conj, np.conj, _one, True),
    "real": (ea.real, np.real, _one, True),
    "imag": (ea.imag, np.imag, _one, True),
    "angle": (ea.angle, np.angle, _one, True),
    "std": (lambda x: ea.std(x, axis=1), lambda x: np.std(x, axis=1), _one, True),
    "std_ddof": (
        lambda x: ea.std(x, axis=0, ddof=1, keepdims=True),
        lambda x: np.std(x, axis=0, ddof=1, keepdims=True),
        _one,
        True,
    ),
    "cumsum": (lambda x: ea.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1), _one, True),
    "cumprod": (ea.cumprod, np.cumprod, _one, True),
    "cumprod_axis": (
        lambda x: ea.cumprod(x, axis=0),
        lambda x: np.cumprod(x, axis=0),
        _one,
        True,
    ),
    "sort": (ea.sort, np.sort, _one, True),
    "sort_axis0": (lambda x: ea.sort(x, axis=0), lambda x: np.sort(x, axis=0), _one, True),
    "sort_flat": (lambda x: ea.sort(x, axis=None), lambda x: np.sort(x, axis=None), _one, True),
    "take": (lambda x: ea.take(x, IDX, axis=1), lambda x: np.take(x, IDX, axis=1), _one, True),
    "take_flat": (lambda x: ea.take(x, [5, -1, 5]), lambda x: np.take(x, [5, -1, 5]), _one, True),
    "take_one": (lambda x: ea.take(x, 2, axis=0), lambda x: np.take(x, 2, axis=0), _one, True),
    "take_along_axis": (
        lambda x: ea.take_along_axis(x, ORDER[:, :3], axis=1),
        lambda x: np.take_along_axis(x, ORDER[:, :3], axis=1),
        _one,
        True,
    ),
    "take_along_axis_broadcast": (
        lambda x: ea.take_along_axis(x, np.array([[0, 2, 2, 1, 0]]), axis=0),
        lambda x: np.take_along_axis(x, np.array([[0, 2, 2, 1, 0]]), axis=0),
        lambda dt: (_normal((3, 1), dtype=dt),),
        True,
    ),
    "pad": (
        lambda x, c: ea.pad(x, ((1, 0), (2, 1)), constant_values=c),
        lambda x, c: np.pad(x, ((1, 0), (2, 1)), constant_values=c),
        lambda dt: (_normal(dtype=dt), _normal((), dtype=dt)),
        True,
    ),
    "pad_reflect": (
        lambda x: ea.pad(x, 2, mode="reflect"),
        lambda x: np.pad(x, 2, mode="reflect"),
        _one,
        True,
    ),
    "pad_wrap": (
        lambda x: ea.pad(x, (1, 5), mode="wrap"),
        lambda x: np.pad(x, (1, 5), mode="wrap"),
        _one,
        True,
    ),
    "roll": (lambda x: ea.roll(x, 3), lambda x: np.roll(x, 3), _one, True),
    "roll_axes": (
        lambda x: ea.roll(x, (1, -5), axis=(0, 1)),
        lambda x: np.roll(x, (1, -5), axis=(0, 1)),
        _one,
        True,
    ),
    "tile": (lambda x: ea.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2)), _one, True),
    "repeat": (
        lambda x: ea.repeat(x, 2, axis=1),
        lambda x: np.repeat(x, 2, axis=1),
        _one,
        True,
    ),
    "repeat_counts": (
        lambda x: ea.repeat(x, [2, 0, 1], axis=0),
        lambda x: np.repeat(x, [2, 0, 1], axis=0),
        _one,
        True,
    ),
    "at_set": (
        lambda x, v: x.at[ROWS].set(v),
        lambda x, v: _np_set(x, ROWS, v),
        lambda dt: (_normal(dtype=dt), _normal((3, 4), dtype=dt)),
        True,
    ),
    "at_set_slice": (
        lambda x, v: x.at[1:, ::2].set(v),
        lambda x, v: _np_set(x, (slice(1, None), slice(None, None, 2)), v),
        lambda dt: (_normal(dtype=dt), _normal((2,), dtype=dt)),
        True,
    ),
    "at_add": (
        lambda x, v: x.at[ROWS, 1].add(v),
        lambda x, v: _np_add(x, (ROWS, 1), v),
        lambda dt: (_normal(dtype=dt), _normal((3,), dtype=dt)),
        True,
    ),
}


def _np_set(x, index, v):
    out = np.array(x)
    out[index] = v
    return out


def _np_add(x, index, v):
    out = np.array(x)
    np.add.at(out, index, np.broadcast_to(v, out[index].shape))
    return out


def _as_tensor_fn(f):
    """`f` called with Tensors, so that Tensor methods (x.at) work on numpy inputs too."""
    return lambda *a: f(*[ea.tensor(x) if isinstance(x, np.ndarray) else x for x in a])


def _loss(f):
    def loss(*args):
        y = _as_tensor_fn(f)(*args)
        return ea.sum(ea.real(y * ea.conj(y)) * np.linspace(0.5, 1.5, y.size).reshape(y.shape))

    return loss


NAMES = sorted(OPS)


@pytest.mark.parametrize("name", NAMES)
def test_value_matches_numpy(name):
    f, ref, make, _ = OPS[name]
    for dt in (np.float64, np.float32):
        args = make(dt)
        out = _as_tensor_fn(f)(*args)
        expected = ref(*args)
        assert isinstance(out, ea.Tensor), name
        assert out.dtype == expected.dtype, (name, dt, out.dtype, expected.dtype)
        assert_close(out.numpy(), expected, rtol=1e-5 if dt == np.float32 else 1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_both_modes(name):
    f, _, make, _ = OPS[name]
    assert ea.gradcheck(_as_tensor_fn(f), *make(np.float64))


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_of_the_gradient(name):
    """Second order: the gradient of a scalar loss is itself differentiable, in both modes."""
    f, _, make, _ = OPS[name]
    args = make(np.float64)
    grad = ea.grad(_loss(f), argnums=tuple(range(len(args))))
    assert ea.gradcheck(grad, *args, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", NAMES)
def test_gradient_matches_central_differences_of_numpy(name):
    f, ref, make, _ = OPS[name]
    args = make(np.float64)
    w = np.linspace(0.5, 1.5, np.size(ref(*args))).reshape(np.shape(ref(*args)))
    grads = ea.grad(lambda *a: ea.sum(_as_tensor_fn(f)(*a) * w), argnums=tuple(range(len(args))))(*args)
    for k, g in enumerate(grads):
        assert_close(g, numeric_grad(lambda *a: np.sum(ref(*a) * w), *args, argnum=k), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", NAMES)
def test_float32_gradients_stay_float32(name):
    f, _, make, _ = OPS[name]
    args = make(np.float32)
    grads = ea.grad(_loss(f), argnums=tuple(range(len(args))))(*args)
    assert all(g.dtype == np.float32 for g in grads), [g.dtype for g in grads]


@pytest.mark.parametrize("name", [n for n in NAMES if OPS[n][3]])
def test_complex_inputs(name):
    f, ref, make, _ = OPS[name]
    args = make(np.complex128)
    out = _as_tensor_fn(f)(*args)
    expected = ref(*args)
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    assert_close(out.numpy(), expected, rtol=1e-12)
    assert ea.gradcheck(_as_tensor_fn(f), *args)


@pytest.mark.parametrize("name", NAMES)
def test_jacobians_forward_and_reverse_agree(name):
    """jacfwd and jacrev push a whole basis through the batch rules in one pass."""
    f, _, make, _ = OPS[name]
    args = make(np.float64)
    g = _as_tensor_fn(f)
    for k in range(len(args)):
        fwd = ea.jacfwd(g, argnums=k)(*args)
        rev = ea.jacrev(g, argnums=k)(*args)
        assert_close(fwd, rev, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_compiled_gradient_replays_on_new_inputs(name):
    """A jitted gradient is traced once; on new values it must not reuse the traced ones
    (a sort's permutation, a mask): it matches the eager gradient at the new point."""
    f, _, make, _ = OPS[name]
    first, second = make(np.float64), make(np.float64)
    nums = tuple(range(len(first)))
    compiled = ea.jit(ea.grad(_loss(f), argnums=nums))
    compiled(*first)
    for got, want in zip(compiled(*second), ea.grad(_loss(f), argnums=nums)(*second)):
        assert_close(got, want, rtol=1e-10)
    assert_close(ea.jit(_as_tensor_fn(f))(*second), _as_tensor_fn(f)(*second).numpy(), rtol=1e-12)


def test_every_new_primitive_has_a_batch_rule():
    prims = [PRIMITIVES[n] for n in ("log2", "log10", "exp2", "arcsinh", "arccosh", "arctanh", "arctan2")]
    prims += [PRIMITIVES[n] for n in ("hypot", "logaddexp", "mod", "imag", "round", "isnan", "isinf")]
    prims += [PRIMITIVES[n] for n in ("sinc", "logaddexp2")]
    prims += [indexing.take_along_p, indexing.scatter_along_p, indexing.argsort_p, indexing.argmax_p]
    prims += [indexing.argmin_p, reductions.cumsum_p, reductions.cumprod_p]
    assert all(p in batch_rules for p in prims), [p for p in prims if p not in batch_rules]


# -- integer results and zero derivatives ---------------------------------------------------------

ARG_OPS = {
    "argmax": (lambda x: ea.argmax(x, axis=1), lambda x: np.argmax(x, axis=1)),
    "argmax_flat": (ea.argmax, np.argmax),
    "argmax_keepdims": (lambda x: ea.argmax(x, 0, keepdims=True), lambda x: np.argmax(x, 0, keepdims=True)),
    "argmin": (lambda x: ea.argmin(x, axis=0), lambda x: np.argmin(x, axis=0)),
    "argmin_flat_keepdims": (lambda x: ea.argmin(x, keepdims=True), lambda x: np.argmin(x, keepdims=True)),
    "argsort": (ea.argsort, np.argsort),
    "argsort_flat": (lambda x: ea.argsort(x, axis=None), lambda x: np.argsort(x, axis=None)),
}


@pytest.mark.parametrize("name", sorted(ARG_OPS))
def test_arg_functions_are_integers_with_no_derivative(name):
    f, ref = ARG_OPS[name]
    x = _normal()
    out = f(x)
    assert out.dtype.kind == "i" and out.dtype == ref(x).dtype
    np.testing.assert_array_equal(out.numpy(), ref(x))
    np.testing.assert_array_equal(ea.jit(f)(x), ref(x))
    # used as indices inside a differentiated function: a gather, differentiable in x only
    g = ea.grad(lambda x: ea.sum(ea.take_along_axis(ea.reshape(x, (-1,)), ea.reshape(f(x), (-1,)), 0)))(x)
    want = np.zeros(x.size)
    np.add.at(want, ref(x).ravel(), 1.0)
    assert_close(g, want.reshape(x.shape))


def test_argsort_is_stable_on_ties():
    x = np.array([2.0, 1.0, 2.0, 1.0, 2.0])
    np.testing.assert_array_equal(ea.argsort(x).numpy(), [1, 3, 0, 2, 4])


@pytest.mark.parametrize("name", ["floor", "ceil", "round"])
def test_rounding_has_a_zero_derivative(name):
    op = getattr(ea, name)
    x = _uniform(-3, 3)
    np.testing.assert_array_equal(op(x).numpy(), getattr(np, name)(x))
    assert op(x.astype(np.float32)).dtype == np.float32
    assert_close(ea.grad(lambda x: ea.sum(op(x) * x))(x), getattr(np, name)(x))
    assert PRIMITIVES[name] in zero_derivative


def test_round_with_decimals():
    x = np.array([1.2345, -2.5, 0.5, 2.675])
    for d in (0, 1, 2, -1):
        np.testing.assert_array_equal(ea.round(x, d).numpy(), np.round(x, d))
    np.testing.assert_array_equal(ea.jit(lambda x: ea.round(x, 2))(x), np.round(x, 2))


# -- special points ------------------------------------------------------------------------------


def test_cumprod_derivatives_are_exact_at_zeros():
    x = np.array([[1.5, 0.0, 2.0, -1.0, 0.0, 3.0], [0.0, 2.0, 0.5, 0.0, 1.0, 2.0]])
    w = np.linspace(1, 2, x.size).reshape(x.shape)
    loss = lambda x: ea.sum(ea.cumprod(x, axis=1) * w)
    ref = lambda x: np.sum(np.cumprod(x, axis=1) * w)
    assert_close(ea.grad(loss)(x), numeric_grad(ref, x))
    _, t = ea.jvp(loss, (x,), (np.ones_like(x),))
    assert_close(t, numeric_grad(ref, x).sum())
    one_zero = np.array([1.5, 0.0, 2.0, -1.0])  # second order: exact with one zero per lane
    loss1 = lambda x: ea.sum(ea.cumprod(x) * np.arange(1.0, 5.0))
    h = ea.hessian(loss1)(one_zero)
    hn = np.stack([numeric_grad(lambda x, i=i: ea.grad(loss1)(x)[i], one_zero) for i in range(4)])
    assert_close(h, hn, atol=1e-6)


def test_sinc_at_zero_and_its_derivatives():
    x = np.array([0.0, 1e-9, 0.5, -1.0, 2.5])
    assert_close(ea.sinc(x), np.sinc(x), rtol=1e-15)
    g = ea.grad(lambda v: ea.sum(ea.sinc(v)))(x)
    want = np.where(x == 0, 0.0, (np.cos(np.pi * x) - np.sinc(x)) / np.where(x == 0, 1, x))
    assert_close(g, want, rtol=1e-7, atol=1e-7)
    assert g[0] == 0.0
    x2 = np.array([0.3, -0.7, 1.9])  # the derivative differentiates again (einad operations)
    assert ea.gradcheck(lambda v: ea.sum(ea.grad(lambda w: ea.sum(ea.sinc(w)))(v) ** 2), x2)


def test_logaddexp2_is_stable_and_its_gradient_symmetric():
    x, y = np.array([1000.0, -1000.0, 3.0, -np.inf]), np.array([1000.0, -1001.0, -2.0, 0.0])
    assert_close(ea.logaddexp2(x, y), np.logaddexp2(x, y), rtol=1e-15)
    gx, gy = ea.grad(lambda a, b: ea.sum(ea.logaddexp2(a, b)), argnums=(0, 1))(x, y)
    assert_close(gx, 1 / (1 + 2.0 ** (y - x)), rtol=1e-12)  # 2**x / (2**x + 2**y), overflow-free
    assert_close(gx + gy, np.ones(4), rtol=1e-12)  # the two partials are 2**x/(...) and 2**y/(...)
    assert ea.gradcheck(lambda a, b: ea.sum(ea.logaddexp2(a, b) ** 2), x[2:3], y[2:3])


def test_hypot_gradient_at_the_origin_is_zero():
    g = ea.grad(lambda x, y: ea.sum(ea.hypot(x, y)), argnums=(0, 1))(np.zeros(2), np.array([0.0, 2.0]))
    assert_close(g[0], [0.0, 0.0])
    assert_close(g[1], [0.0, 1.0])


def test_angle_of_real_values_is_constant_in_them():
    x = np.array([-2.0, -0.0, 0.0, 3.0])
    np.testing.assert_array_equal(ea.angle(x).numpy(), np.angle(x))
    np.testing.assert_array_equal(ea.angle(x, deg=True).numpy(), np.angle(x, deg=True))
    assert_close(ea.grad(lambda x: ea.sum(ea.angle(x)))(x), np.zeros(4))


def test_imag_of_real_values_is_zero():
    x = _normal()
    np.testing.assert_array_equal(ea.imag(x).numpy(), np.imag(x))
    assert_close(ea.grad(lambda x: ea.sum(ea.imag(x) + x))(x), np.ones_like(x))


def test_sort_gradient_goes_back_to_the_unsorted_places():
    x = np.array([3.0, -1.0, 2.0, 0.5])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    g = ea.grad(lambda x: ea.sum(ea.sort(x) * w))(x)
    assert_close(g, np.array([4.0, 1.0, 3.0, 2.0]))


def test_take_modes():
    x = np.arange(5.0)
    for mode in ("wrap", "clip"):
        idx = np.array([-7, 0, 4, 6, 12])
        np.testing.assert_array_equal(ea.take(x, idx, mode=mode).numpy(), np.take(x, idx, mode=mode))
    with pytest.raises(IndexError):
        ea.take(x, [5])
    with pytest.raises(IndexError, match="integers"):
        ea.take(x, [0.5])


def test_computed_indices_stay_operations_under_jit():
    """take with indices computed inside the jitted function: no index is frozen in the program."""
    f = ea.jit(lambda x: ea.take(x, ea.argmax(x)))
    assert f(np.array([1.0, 5.0, 2.0])) == 5.0
    assert f(np.array([7.0, 5.0, 2.0])) == 7.0
    g = ea.jit(lambda x, i: ea.take(x, i, axis=0))  # indices as a traced argument
    np.testing.assert_array_equal(g(np.arange(4.0), np.array([3, 3, 0])), [3.0, 3.0, 0.0])
    np.testing.assert_array_equal(g(np.arange(4.0), np.array([1, 2, 0])), [1.0, 2.0, 0.0])
    assert g.cache_size() == 1
    program = ea.make_graph(lambda x: ea.sort(x))(np.ones(3))
    assert [e.op for e in program.equations] == ["argsort", "take_along_axis"]


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


def test_at_under_a_traced_function():
    def f(x):
        return ea.sum(x.at[0].set(x[1] * 2.0) ** 2)

    x = np.array([1.0, 2.0, 3.0])
    assert_close(ea.grad(f)(x), [0.0, 2 * 4.0 * 2.0 + 2 * 2.0, 6.0])  # (2 x1)^2 + x1^2 + x2^2


def test_pad_refuses_unsupported_modes():
    with pytest.raises(NotImplementedError, match="linear_ramp"):
        ea.pad(np.ones(3), 1, mode="linear_ramp")
    with pytest.raises(ValueError, match="negative"):
        ea.pad(np.ones(3), -1)


# -- derivative rules never warn, eager or compiled --------------------------------------------------


def _masked_sqrt(x):
    return ea.sum(ea.where(x > 0, ea.sqrt(ea.abs(x)), 0.0) + ea.log(ea.abs(x) + 1.0))


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
        compiled = ea.jit(ea.grad(f))
        np.testing.assert_array_equal(compiled(x), eager)
        np.testing.assert_array_equal(compiled(x), eager)  # the compiled program, run again
        ea.hvp(f, (x,), (np.ones(2),))
        ea.jacfwd(ea.grad(f))(x)
    assert "errstate" in ea.jit(ea.grad(f)).lower(x).source


def test_power_gradient_in_the_exponent_at_a_zero_base_and_negative_exponent():
    with warnings.catch_warnings(), np.errstate(divide="ignore"):  # the forward's 0 ** -1 is numpy's
        warnings.simplefilter("error")  # an inf * 0 ('invalid') in the rule would fail here
        g = ea.grad(lambda y: ea.sum(ea.power(np.array([0.0, 0.0, 2.0]), y)))(np.array([-1.0, 0.5, 3.0]))
    assert_close(g, [0.0, 0.0, 8.0 * np.log(2.0)])


def test_forward_values_warn_as_numpy_does():
    with pytest.warns(RuntimeWarning, match="divide by zero"):
        ea.log(np.zeros(1))


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
    ids=str,
)
def test_integer_array_indexing_batches_without_a_loop_where_axes_stay(index):
    """x[idx] and x.at[idx] under vmap (what jacfwd and jacrev run): the batch axis stays first."""
    x = RNG.standard_normal((5, 3, 4, 6))
    got = vmap(lambda t: t[index] * 2.0)(x)
    np.testing.assert_array_equal(np.asarray(got), np.stack([xi[index] * 2.0 for xi in x]))
    f = lambda t: t.at[index].add(1.0) * t
    assert_close(ea.jacfwd(f)(x[0]), ea.jacrev(f)(x[0]))
