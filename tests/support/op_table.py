"""The checks every row of an op table gets (the everyday ops of tests/rules: elementwise,
reductions, indexing, indexed updates). A row is ``(einad function, numpy reference,
arguments maker (dtype -> args), complex inputs allowed)``; each check takes one row.
The test modules run them eagerly and with every transformation jitted (`jit_mode`)."""

import numpy as np

import einad as ea
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, numeric_grad

RNG = np.random.default_rng(14)


def uniform(lo, hi, shape=(3, 4), dtype=np.float64):
    return RNG.uniform(lo, hi, shape).astype(dtype)


def normal(shape=(3, 4), dtype=np.float64):
    z = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        z = z + 1j * RNG.standard_normal(shape)
    return z.astype(dtype)


def one(dtype):
    return (normal(dtype=dtype),)


def as_tensor_fn(f):
    """`f` called with Tensors, so that Tensor methods (x.at) work on numpy inputs too."""
    return lambda *a: f(*[ea.tensor(x) if isinstance(x, np.ndarray) else x for x in a])


def loss(f):
    def loss(*args):
        y = as_tensor_fn(f)(*args)
        return ea.sum(ea.real(y * ea.conj(y)) * np.linspace(0.5, 1.5, y.size).reshape(y.shape))

    return loss


def value_matches_numpy(row):
    f, ref, make, _ = row
    for dt in (np.float64, np.float32):
        args = make(dt)
        out = as_tensor_fn(f)(*args)
        expected = ref(*args)
        assert isinstance(out, ea.Tensor)
        assert out.dtype == expected.dtype, (dt, out.dtype, expected.dtype)
        assert_close(out.numpy(), expected, rtol=1e-5 if dt == np.float32 else 1e-12)


def gradcheck_both_modes(row):
    f, _, make, _ = row
    assert ea.gradcheck(as_tensor_fn(f), *make(np.float64))


def gradcheck_of_the_gradient(row):
    """Second order: the gradient of a scalar loss is itself differentiable, in both modes."""
    f, _, make, _ = row
    args = make(np.float64)
    grad = ea.grad(loss(f), argnums=tuple(range(len(args))))
    assert ea.gradcheck(grad, *args, atol=1e-5, rtol=1e-4)


def gradient_matches_central_differences_of_numpy(row):
    f, ref, make, _ = row
    args = make(np.float64)
    w = np.linspace(0.5, 1.5, np.size(ref(*args))).reshape(np.shape(ref(*args)))
    grads = ea.grad(lambda *a: ea.sum(as_tensor_fn(f)(*a) * w), argnums=tuple(range(len(args))))(*args)
    for k, g in enumerate(grads):
        assert_close(g, numeric_grad(lambda *a: np.sum(ref(*a) * w), *args, argnum=k), rtol=1e-6, atol=1e-7)


def float32_gradients_stay_float32(row):
    f, _, make, _ = row
    args = make(np.float32)
    grads = ea.grad(loss(f), argnums=tuple(range(len(args))))(*args)
    assert all(g.dtype == np.float32 for g in grads), [g.dtype for g in grads]


def complex_inputs(row):
    f, ref, make, _ = row
    args = make(np.complex128)
    out = as_tensor_fn(f)(*args)
    expected = ref(*args)
    assert out.dtype == expected.dtype, (out.dtype, expected.dtype)
    assert_close(out.numpy(), expected, rtol=1e-12)
    assert ea.gradcheck(as_tensor_fn(f), *args)


def jacobians_forward_and_reverse_agree(row):
    """jacfwd and jacrev push a whole basis through the batch rules in one pass."""
    f, _, make, _ = row
    args = make(np.float64)
    g = as_tensor_fn(f)
    for k in range(len(args)):
        fwd = ea.jacfwd(g, argnums=k)(*args)
        rev = ea.jacrev(g, argnums=k)(*args)
        assert_close(fwd, rev, rtol=1e-10, atol=1e-12)


def compiled_gradient_replays_on_new_inputs(row):
    """A jitted gradient is traced once; on new values it must not reuse the traced ones
    (a sort's permutation, a mask): it matches the eager gradient at the new point."""
    f, _, make, _ = row
    first, second = make(np.float64), make(np.float64)
    nums = tuple(range(len(first)))
    jitted = ea.jit(ea.grad(loss(f), argnums=nums))
    jitted(*first)
    for got, want in zip(jitted(*second), ea.grad(loss(f), argnums=nums)(*second)):
        assert_close(got, want, rtol=1e-10)
    assert_close(compiled(ea.jit(as_tensor_fn(f)))(*second), as_tensor_fn(f)(*second).numpy(), rtol=1e-12)


CHECKS = [
    value_matches_numpy,
    gradcheck_both_modes,
    gradcheck_of_the_gradient,
    gradient_matches_central_differences_of_numpy,
    float32_gradients_stay_float32,
    complex_inputs,
    jacobians_forward_and_reverse_agree,
    compiled_gradient_replays_on_new_inputs,
]


def cases(table):
    """pytest parameters (check, name): every check of every row, the complex check only for
    the rows that take complex inputs. The checks: value and dtype against numpy (float64,
    float32, complex where numpy has it), gradcheck in both modes and of the gradient, central
    differences of numpy, float32 gradients, jacfwd == jacrev through the batch rules, and a
    jitted gradient replayed on new inputs."""
    import pytest

    return [
        pytest.param(check, name, id=f"{check.__name__}-{name}")
        for check in CHECKS
        for name in sorted(table)
        if check is not complex_inputs or table[name][3]
    ]
