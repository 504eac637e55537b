"""Numerical edge cases (docs/guarantees.md): NaN and inf, extreme inputs, size-0 arrays, float32.

* NaN and inf propagate through values as numpy's do, and through derivatives
  wherever calculus defines them (exp'(-inf) = 0, tanh'(inf) = 0, ...).
* The stable operations stay finite, values and derivatives, at +-1000 and +-1e300.
* Size-0 arrays give size-0 derivatives of the right shape and dtype in every transformation.
* float32 in gives float32 out through every transformation, with float32 inside too.

The complex convention has its own file, tests/guarantees/test_complex.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import einad as ea
from tests.support.api_ops import BINARY, NUMPY_UNARY
from tests.support.strategies import einsum_cases, random_array

MODES = ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")
SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.5, 1e300, -1e300, 1e-300])

UNARY = NUMPY_UNARY  # compared with numpy function by function


def close_special(a, b, rtol=1e-14):
    """Same NaN and inf positions (and signs), finite values equal to rounding."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return False
    if not np.array_equal(a[np.isinf(a)], b[np.isinf(a)]) or not np.array_equal(np.isinf(a), np.isinf(b)):
        return False
    fin = np.isfinite(a)
    return np.allclose(a[fin], b[fin], rtol=rtol, atol=0)


def same(a, b):
    """Bitwise-equal values up to NaN payloads, and equal dtypes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


# -- NaN and inf: values ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", UNARY)
def test_unary_values_at_special_points_are_numpys(name, dtype):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = SPECIAL.astype(dtype)  # 1e300 overflows float32: numpy warns
        expected = getattr(np, name)(x)
        got = getattr(ea, name)(x).numpy()
    assert same(got, expected), (name, got, expected)


@pytest.mark.parametrize("name", BINARY)
def test_binary_values_at_special_points_are_numpys(name):
    x, y = np.meshgrid(SPECIAL, SPECIAL)
    with np.errstate(all="ignore"):
        expected = getattr(np, name)(x, y)
        got = getattr(ea, name)(x, y).numpy()
    assert same(got, expected), name


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "max", "min", "var"])
def test_reductions_propagate_nan_and_inf_as_numpy(name):
    rows = np.array([[1.0, np.nan, 2.0], [np.inf, 1.0, 2.0], [-np.inf, np.inf, 0.0], [1.0, 2.0, 3.0]])
    with np.errstate(all="ignore"):
        for axis in (None, 0, 1):
            expected = getattr(np, name)(rows, axis=axis)
            got = getattr(ea, name)(rows, axis=axis).numpy()
            assert np.array_equal(got, expected, equal_nan=True), (name, axis, got, expected)


def test_stable_ops_at_special_points():
    inf, nan = np.inf, np.nan
    x = np.array([nan, inf, -inf, 0.0])
    np.testing.assert_array_equal(ea.sigmoid(x).numpy(), [nan, 1.0, 0.0, 0.5])
    np.testing.assert_array_equal(ea.softplus(x).numpy(), [nan, inf, 0.0, np.log(2.0)])
    np.testing.assert_array_equal(ea.relu(x).numpy(), np.maximum(x, 0))
    # logsumexp and friends: where the naive numpy formula is exact, the same numbers
    with np.errstate(all="ignore"):
        for row in ([-inf, 1.0], [-inf, -inf], [inf, 1.0], [nan, 1.0], [inf, -inf], [-inf, 0.0, 1.0]):
            row = np.array(row)
            naive_lse = np.log(np.sum(np.exp(row)))
            assert close_special(ea.logsumexp(row).numpy(), naive_lse), row
            assert close_special(ea.softmax(row).numpy(), np.exp(row) / np.sum(np.exp(row))), row
            if np.isfinite(naive_lse):
                assert close_special(ea.log_softmax(row).numpy(), row - naive_lse), row


# -- NaN and inf: einsum, random specs ----------------------------------------------------------------


@given(einsum_cases(dtypes=(np.float64,)), st.data())
def test_einsum_nan_lands_where_numpys_does(case, data):
    """A NaN in one operand poisons exactly the outputs numpy's einsum poisons (every
    grouping of the sum contains the NaN term), and the other outputs agree."""
    spec, shapes, types, seed = case
    assume(all(all(shape) for shape in shapes))  # empty sums: test_an_empty_sum_is_zero_next_to_nan_and_inf
    rng = np.random.default_rng(seed)
    args = [random_array(rng, s, t) for s, t in zip(shapes, types)]
    k = data.draw(st.integers(0, len(args) - 1), label="poisoned operand")
    idx = data.draw(st.integers(0, args[k].size - 1), label="position")
    args[k].reshape(-1)[idx] = np.nan
    expected = np.einsum(spec, *args)
    got = ea.einsum(spec, *args).numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=spec)
    fin = ~np.isnan(expected)
    np.testing.assert_allclose(got[fin], expected[fin], rtol=1e-10, atol=1e-10)


@given(einsum_cases(dtypes=(np.float64,)), st.data())
def test_einsum_inf_lands_where_numpys_does(case, data):
    """With positive operands (no cancellation, no 0 * inf) an inf gives inf in exactly
    numpy's outputs, in any grouping of the sum."""
    spec, shapes, _types, seed = case
    assume(all(all(shape) for shape in shapes))
    rng = np.random.default_rng(seed)
    args = [rng.uniform(0.5, 2.0, s) for s in shapes]
    k = data.draw(st.integers(0, len(args) - 1), label="operand")
    idx = data.draw(st.integers(0, args[k].size - 1), label="position")
    args[k].reshape(-1)[idx] = np.inf
    expected = np.einsum(spec, *args)
    got = ea.einsum(spec, *args).numpy()
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected), err_msg=spec)
    assert not np.isnan(got).any(), spec
    fin = np.isfinite(expected)
    np.testing.assert_allclose(got[fin], expected[fin], rtol=1e-10)


@pytest.mark.parametrize(
    "spec, operands",
    [
        (",a->", (np.nan, np.ones(0))),
        ("i,ja->ij", (np.array([np.inf, 1.0]), np.ones((2, 0)))),
        ("ab,bc->ac", (np.array([[np.nan, 1.0]]), np.ones((2, 0)))),  # output (1, 0): fine either way
        ("a,bc->a", (np.array([np.nan, -np.inf]), np.ones((3, 0)))),
        ("ij,jk,kl->il", (np.full((2, 2), np.inf), np.ones((2, 0)), np.ones((0, 2)))),
    ],
)
def test_an_empty_sum_is_zero_next_to_nan_and_inf(spec, operands):
    """A sum over an index of size 0 has no terms: numpy gives exactly 0 there, whatever
    the other operands hold (NaN * 0 is never formed)."""
    expected = np.einsum(spec, *operands)
    with np.errstate(all="ignore"):
        got = ea.einsum(spec, *operands).numpy()
    assert same(got, expected), (spec, got, expected)


@given(einsum_cases(max_operands=4, dtypes=(np.float64,)), st.data())
def test_einsum_gradient_ignores_nan_in_its_own_operand(case, data):
    """einsum is linear in each operand: d/dx_k never reads x_k, so NaN or inf in x_k
    leaves x_k's gradient finite and equal to the gradient at any other x_k."""
    spec, shapes, types, seed = case
    rng = np.random.default_rng(seed)
    args = [random_array(rng, s, t) for s, t in zip(shapes, types)]
    k = data.draw(st.integers(0, len(args) - 1), label="operand")
    u = rng.standard_normal(np.shape(np.einsum(spec, *args)))
    f = lambda *a: ea.einsum(spec, *a)
    clean = ea.vjp(f, *args)[1](u)[k]
    poisoned = list(args)
    poisoned[k] = np.where(rng.random(shapes[k]) < 0.5, np.nan, np.inf)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = ea.vjp(f, *poisoned)[1](u)[k]
    assert np.isfinite(g).all(), spec
    np.testing.assert_allclose(g, clean, rtol=1e-12, atol=1e-12)


# -- NaN and inf: derivatives where calculus defines them ------------------------------------------

INF = np.inf
DERIVATIVES = [  # (op, x, f'(x))
    ("exp", -INF, 0.0),
    ("exp", INF, INF),
    ("exp", np.nan, np.nan),
    ("tanh", INF, 0.0),
    ("tanh", -INF, 0.0),
    ("arctan", INF, 0.0),
    ("arctan", -INF, 0.0),
    ("sigmoid", INF, 0.0),
    ("sigmoid", -INF, 0.0),
    ("softplus", INF, 1.0),
    ("softplus", -INF, 0.0),
    ("log", INF, 0.0),
    ("log", 0.0, INF),
    ("sqrt", INF, 0.0),
    ("sqrt", 0.0, INF),
    ("square", INF, INF),
    ("square", -INF, -INF),
    ("log1p", INF, 0.0),
    ("expm1", -INF, 0.0),
    ("sin", np.nan, np.nan),
    ("tanh", np.nan, np.nan),
    ("sigmoid", np.nan, np.nan),
    ("softplus", np.nan, np.nan),
    ("log", np.nan, np.nan),
    ("sqrt", np.nan, np.nan),
    ("sigmoid", 1e300, 0.0),
    ("softplus", 1e300, 1.0),
    ("softplus", -1e300, 0.0),
]


@pytest.mark.parametrize("name, x, slope", DERIVATIVES, ids=[f"{n}({x})" for n, x, _ in DERIVATIVES])
def test_derivative_at_special_points(name, x, slope):
    f = getattr(ea, name)
    with np.errstate(all="ignore"):
        g = ea.grad(f)(np.float64(x))
        _, t = ea.jvp(f, (np.float64(x),), (np.float64(1.0),))
        (h,) = ea.vjp(f, np.array([x]))[1](np.array([1.0]))
    for what, got in (("grad", g), ("jvp", t), ("vjp", h[0])):
        assert same(np.float64(got), np.float64(slope)), (name, x, what, got, slope)


def test_products_with_inf_and_nan_follow_the_partials():
    """d(x*y)/dx = y, exactly, even where x is inf or NaN (no division by x)."""
    x = np.array([np.inf, np.nan, 1.0, -np.inf])
    y = np.array([0.0, 2.0, np.inf, 3.0])
    with np.errstate(invalid="ignore"):  # the forward's inf * 0 warns, as numpy's does
        gx, gy = ea.grad(lambda a, b: ea.sum(a * b), argnums=(0, 1))(x, y)
        assert same(gx, y) and same(gy, x)
        gx, gy = ea.grad(lambda a, b: ea.einsum("i,i->", a, b), argnums=(0, 1))(x, y)
    assert same(gx, y) and same(gy, x)
    # d(x/y)/dx = 1/y -> 0 at y = inf; d(x/y)/dy = -x/y^2 -> -0 at y = inf
    gx, gy = ea.grad(lambda a, b: ea.sum(a / b), argnums=(0, 1))(np.array([1.0]), np.array([np.inf]))
    assert gx[0] == 0.0 and gy[0] == 0.0


def test_logsumexp_gradient_at_minus_infinity_is_softmax():
    x = np.array([-np.inf, 0.0, 1.0])
    g = ea.grad(ea.logsumexp)(x)
    want = np.array([0.0, 1.0, np.e]) / (1.0 + np.e)
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, want, rtol=1e-14)
    hv = ea.hvp(ea.logsumexp, (x,), (np.array([0.0, 1.0, 0.0]),))[0]
    assert np.isfinite(hv).all() and hv[0] == 0.0


# -- extreme finite inputs: the stable operations ------------------------------------------------------

EXTREMES = [1000.0, -1000.0, 1e300, -1e300]


@pytest.mark.parametrize("x", EXTREMES)
def test_sigmoid_and_softplus_at_extremes(x):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        s, ds = ea.value_and_grad(lambda t: ea.sum(ea.sigmoid(t)))(np.array([x]))
        p, dp = ea.value_and_grad(lambda t: ea.sum(ea.softplus(t)))(np.array([x]))
        hs = ea.hessian(lambda t: ea.sum(ea.softplus(t)))(np.array([x]))
    assert s == (1.0 if x > 0 else 0.0) and ds[0] == 0.0
    assert p == (x if x > 0 else 0.0), p
    assert dp[0] == (1.0 if x > 0 else 0.0)
    assert np.isfinite(hs).all() and hs[0, 0] == 0.0


@pytest.mark.parametrize("big", [1000.0, 1e300])
def test_logsumexp_softmax_log_softmax_at_extremes(big):
    x = np.array([[big, -big, 0.0], [big, big, big], [-big, -big, -big], [big, 0.0, 0.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lse = ea.logsumexp(x, axis=1).numpy()
        sm = ea.softmax(x).numpy()
        lsm = ea.log_softmax(x).numpy()
        g = ea.grad(lambda t: ea.sum(ea.logsumexp(t, axis=1)))(x)
        h = ea.hvp(lambda t: ea.sum(ea.log_softmax(t)[:, 0]), (x,), (np.ones_like(x),))[0]
    assert np.isfinite(lse).all() and np.isfinite(sm).all() and np.isfinite(lsm).all()
    np.testing.assert_allclose(lse, [big, big + np.log(3), -big + np.log(3), big], rtol=1e-15)
    third = [1 / 3] * 3
    np.testing.assert_allclose(sm, [[1, 0, 0], third, third, [1, 0, 0]], rtol=1e-12, atol=0)
    np.testing.assert_allclose(lsm[1], [-np.log(3)] * 3, rtol=1e-12)
    assert lsm[0, 0] == 0.0 and lsm[0, 1] == -2 * big and lsm[0, 2] == -big
    np.testing.assert_allclose(g, [[1, 0, 0], third, third, [1, 0, 0]], rtol=1e-12, atol=0)  # d lse = softmax
    assert np.isfinite(h).all()


@pytest.mark.parametrize("x", [1000.0, -1000.0, 80.0, -80.0])
def test_stable_ops_in_float32(x):
    t = np.array([x, 0.0], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name in ("sigmoid", "softplus", "softmax", "log_softmax", "logsumexp"):
            val = getattr(ea, name)(t)
            g = ea.grad(lambda v, name=name: ea.sum(getattr(ea, name)(v)))(t)
            assert val.dtype == np.float32 and g.dtype == np.float32, name
            assert np.isfinite(val.numpy()).all() and np.isfinite(g).all(), (name, val, g)


# -- size-0 arrays -----------------------------------------------------------------------------------

EMPTY_CASES = [  # (function of x, x's shape)
    (lambda x: ea.sum(ea.tanh(ea.einsum("ij,jk->ik", x, np.ones((3, 2), x.dtype)))), (0, 3)),
    (lambda x: ea.einsum("ij,ij->", x, x), (2, 0)),
    (lambda x: ea.sum(ea.exp(x) * 2.0), (0,)),
    (lambda x: ea.sum(ea.logsumexp(x, axis=1)), (0, 3)),
    (lambda x: ea.sum(ea.softmax(x)), (2, 0)),
    (lambda x: ea.sum(ea.reshape(x, (-1,)) ** 2), (3, 0, 2)),
    (lambda x: ea.einsum("ii", x), (0, 0)),
    (lambda x: ea.sum(ea.concatenate([x, x], axis=0)), (0, 2)),
    (lambda x: ea.einsum("...i,i->...", x, np.ones(2, x.dtype)).sum(), (0, 2)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("k", range(len(EMPTY_CASES)))
def test_size_zero_inputs_give_size_zero_derivatives(k, dtype):
    f, shape = EMPTY_CASES[k]
    x = np.zeros(shape, dtype=dtype)
    v = np.zeros(shape, dtype=dtype)
    checks = {
        "grad": ea.grad(f)(x),
        "vjp": ea.vjp(f, x)[1](np.ones((), dtype=dtype))[0],
        "hvp " + MODES[0]: ea.hvp(f, (x,), (v,), mode=MODES[0])[0],
        "hvp " + MODES[1]: ea.hvp(f, (x,), (v,), mode=MODES[1])[0],
        "hvp " + MODES[2]: ea.hvp(f, (x,), (v,), mode=MODES[2])[0],
    }
    for what, g in checks.items():
        assert isinstance(g, np.ndarray), what
        assert g.shape == shape and g.dtype == dtype, (what, g.shape, g.dtype)
    _, t = ea.jvp(f, (x,), (v,))
    assert np.shape(t) == () and t == 0 and t.dtype == dtype


@pytest.mark.parametrize("k", range(len(EMPTY_CASES)))
def test_size_zero_jacobians_and_hessians(k):
    f, shape = EMPTY_CASES[k]
    x = np.zeros(shape)
    for jac in (ea.jacrev, ea.jacfwd):
        j = jac(f)(x)
        assert j.shape == shape and j.dtype == np.float64, (jac.__name__, j.shape, j.dtype)
    h = ea.hessian(f)(x)
    assert h.shape == shape + shape and h.dtype == np.float64, (h.shape, h.dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_size_zero_jacobians_keep_shape_and_dtype(dtype):
    x = np.zeros((0, 2), dtype=dtype)
    h = ea.hessian(lambda t: ea.sum(ea.exp(t)))(x)
    assert h.shape == (0, 2, 0, 2) and h.dtype == dtype, ("hessian", h.shape, h.dtype)
    for jac in (ea.jacfwd, ea.jacrev):
        j = jac(lambda t: ea.exp(t) * 2.0)(x)  # size-0 in, size-0 out
        assert j.shape == (0, 2, 0, 2) and j.dtype == dtype, (jac.__name__, j.shape, j.dtype)
        j = jac(lambda t: ea.sum(t) + np.ones(3, dtype=dtype))(x)  # size-0 in, size-3 out
        assert j.shape == (3, 0, 2) and j.dtype == dtype, (jac.__name__, j.shape, j.dtype)
        j = jac(lambda t: ea.einsum("ij,j->ji", np.ones((3, 2), dtype=dtype), ea.sum(t, axis=0)))(
            np.ones((0, 2), dtype)
        )
        assert j.shape == (2, 3, 0, 2) and j.dtype == dtype, (jac.__name__, j.shape, j.dtype)


def test_contraction_over_an_empty_index():
    a, b = np.ones((2, 0)), np.ones((0, 3))
    out, pullback = ea.vjp(lambda p, q: ea.einsum("ij,jk->ik", p, q), a, b)
    assert same(out, np.zeros((2, 3)))
    ga, gb = pullback(np.ones((2, 3)))
    assert ga.shape == (2, 0) and gb.shape == (0, 3)
    _, t = ea.jvp(lambda p, q: ea.einsum("ij,jk->ik", p, q), (a, b), (a, b))
    assert same(t, np.zeros((2, 3)))


# -- float32 stays float32 --------------------------------------------------------------------------


def _model(W, dtypes_seen):
    def f(x):
        h = ea.einsum("ij,j->i", W, x)
        parts = [
            ea.sum(ea.sigmoid(h) * 2.0),
            ea.sum(ea.softplus(h)),
            -ea.sum(ea.tanh(x)) / 3,
            ea.logsumexp(x),
            ea.mean(ea.softmax(x) ** 2),
            ea.var(x),
            ea.max(x),
            ea.sum(ea.sqrt(ea.exp(x))),
            ea.log_softmax(x)[0],
            ea.sum(ea.abs(x)),
            ea.prod(x),
            ea.sum(ea.matmul(W, x) / 4.0),
            ea.sum(ea.where(x > 0, x, 0.5 * x)),
            ea.sum(ea.log1p(x * x)),
            ea.sum(1.0 - ea.cos(x)),
        ]
        y = parts[0]
        for p in parts[1:]:
            y = y + p
        dtypes_seen.update([h.dtype, y.dtype] + [p.dtype for p in parts])
        return y

    return f


def test_float32_in_float32_out_through_every_transformation():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(3).astype(np.float32)
    v = rng.standard_normal(3).astype(np.float32)
    W = rng.standard_normal((2, 3)).astype(np.float32)
    seen: set = set()
    f = _model(W, seen)
    results = {
        "value": f(x),
        "grad": ea.grad(f)(x),
        "value_and_grad value": ea.value_and_grad(f)(x)[0],
        "value_and_grad grad": ea.value_and_grad(f)(x)[1],
        "vjp out": ea.vjp(f, x)[0],
        "vjp": ea.vjp(f, x)[1](np.float32(1.0))[0],
        "jvp out": ea.jvp(f, (x,), (v,))[0],
        "jvp tangent": ea.jvp(f, (x,), (v,))[1],
        "jacfwd": ea.jacfwd(f)(x),
        "jacrev": ea.jacrev(f)(x),
        "hessian": ea.hessian(f)(x),
        "grad of grad": ea.grad(lambda t: ea.sum(ea.grad(f)(t)))(x),
        "jacfwd of vector": ea.jacfwd(lambda t: ea.tanh(ea.einsum("ij,j->i", W, t)))(x),
        "jacrev of vector": ea.jacrev(lambda t: ea.tanh(ea.einsum("ij,j->i", W, t)))(x),
    }
    for mode in MODES:
        results["hvp " + mode] = ea.hvp(f, (x,), (v,), mode=mode)[0]
    for what, r in results.items():
        assert r.dtype == np.float32, (what, r.dtype)
    assert seen == {np.dtype(np.float32)}, seen  # float32 inside every trace too
    # and the numbers are the float64 ones to float32 accuracy
    f64 = _model(W.astype(np.float64), set())
    np.testing.assert_allclose(results["grad"], ea.grad(f64)(x.astype(np.float64)), rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(
        results["hvp fwd-over-rev"],
        ea.hvp(f64, (x.astype(np.float64),), (v.astype(np.float64),))[0],
        rtol=2e-3,
        atol=2e-3,
    )
    t = ea.tensor(x, requires_grad=True)
    f(t).backward()
    assert t.grad.dtype == np.float32
