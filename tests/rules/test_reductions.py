"""einad.rules.reductions: sums' relatives (mean, var, std, max, min, prod, logsumexp, softmax,
log_softmax, cumsum, cumprod, clip): values against numpy, gradients against closed forms and
central differences (ties shared, products exact at zeros), numerically stable at huge inputs,
float32 kept; and on every array library (`lib`): results of the input's library, dask lazy."""

import warnings

import numpy as np
import pytest

import einad as ea
from einad import core
from einad.rules import reductions
from einad.util import wrap
from tests.support import op_table
from tests.support.checks import (
    BIG,
    STABLE_WEIGHTS,
    case_params,
    check_lib,
    finite_value_and_gradient,
    forget_rules,
    lib_value,
    uniform_away_from_zero,
)
from tests.support.jax_reference import jax_reference
from tests.support.numerics import assert_close, check_op, numeric_grad
from tests.support.op_table import one

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

W = STABLE_WEIGHTS  # the weights of finite_value_and_gradient's loss

A = np.random.default_rng(8).standard_normal((2, 3, 4))
B = np.random.default_rng(9).standard_normal((2, 2, 4))


# -- numerically stable operations ---------------------------------------------------------


@both_modes
def test_logsumexp_is_stable():
    for x, expected in (
        (np.array([1000.0, 1000.0]), 1000 + np.log(2)),
        (np.array([-1000.0, -1000.0]), -1000 + np.log(2)),
        (BIG, 1000.0),
    ):
        value, _ = finite_value_and_gradient(ea.logsumexp, x)
        assert_close(value, expected)
    assert_close(ea.grad(ea.logsumexp)(np.array([1000.0, 1000.0])), [0.5, 0.5])
    assert_close(ea.grad(ea.logsumexp)(BIG), [0.0, 0.0, 1.0])


@both_modes
def test_softmax_and_log_softmax_are_stable():
    value, grad = finite_value_and_gradient(ea.softmax, BIG)
    assert_close(value, [0.0, 0.0, 1.0])
    assert_close(grad, [0.0, 0.0, 0.0])
    value, grad = finite_value_and_gradient(ea.log_softmax, BIG)
    assert_close(value, [-2000.0, -1000.0, 0.0])
    assert_close(grad, W - np.array([0.0, 0.0, 1.0]) * W.sum())
    value, _ = finite_value_and_gradient(ea.softmax, np.array([1000.0, 1000.0]))
    assert_close(value, [0.5, 0.5])


def _logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


def _softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


X3 = np.random.default_rng(7).standard_normal((2, 3, 4))


@both_modes
@pytest.mark.parametrize(
    "kwargs", [{}, {"axis": 1}, {"axis": (0, 2)}, {"axis": -1, "keepdims": True}, {"keepdims": True}], ids=str
)
def test_logsumexp(kwargs):
    check_op(lambda x: ea.logsumexp(x, **kwargs), lambda x: _logsumexp(x, **kwargs), X3)


def test_logsumexp_weights_and_sign_as_scipy():
    """scipy's and JAX's ``b`` (weights) and ``return_sign`` (TypeErrors before): the log of
    the weighted sum's magnitude and its sign, stable at large magnitudes; gradients in x and
    b by central differences (and at 1000, the closed form)."""
    x = np.array([[1000.0, 999.0, -3.0], [2.0, 0.5, 1.0]])
    w = np.array([[1.0, -2.0, 0.5], [-1.0, 3.0, 0.25]])
    value, sign = ea.logsumexp(x, axis=1, b=w, return_sign=True)
    s0 = 1.0 - 2.0 * np.exp(-1.0) + 0.5 * np.exp(-1003.0)  # the sum relative to e^1000 (negative)
    assert_close(value[0], 1000.0 + np.log(np.abs(s0)))
    s1 = -np.exp(2.0) + 3.0 * np.exp(0.5) + 0.25 * np.exp(1.0)
    assert_close(value[1], np.log(np.abs(s1)))
    assert_close(sign, [np.sign(s0), np.sign(s1)])
    assert_close(ea.logsumexp(x[1], b=np.abs(w[1])), np.log(np.sum(np.abs(w[1]) * np.exp(x[1]))))
    kept, kept_sign = ea.logsumexp(x, b=w, keepdims=True, return_sign=True)
    assert kept.shape == kept_sign.shape == (1, 1)
    with np.errstate(invalid="ignore"):
        assert np.isnan(ea.logsumexp(np.array([0.0, 1.0]), b=np.array([1.0, -1.0])).numpy())  # scipy's nan
    ea.gradcheck(lambda a, b: ea.logsumexp(a, b=b, return_sign=True)[0], x[1], w[1])
    g = ea.grad(lambda a: ea.logsumexp(a, b=np.array([1.0, 3.0])))(np.array([1000.0, 1000.0]))
    assert_close(g, [0.25, 0.75])


@both_modes
def test_logsumexp_reduces_every_axis_by_default():
    assert ea.logsumexp(X3).shape == ()
    assert_close(ea.logsumexp(X3).numpy(), np.log(np.exp(X3).sum()))


@both_modes
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_softmax_and_log_softmax(axis):
    kw = {} if axis is None else {"axis": axis}
    ax = -1 if axis is None else axis  # the default is the last axis
    check_op(lambda x: ea.softmax(x, **kw), lambda x: _softmax(x, ax), X3)
    check_op(lambda x: ea.log_softmax(x, **kw), lambda x: np.log(_softmax(x, ax)), X3)
    assert_close(ea.softmax(X3, **kw).numpy().sum(axis=ax), np.ones(np.delete(X3.shape, ax)))


@both_modes
def test_stable_ops_keep_float32():
    x = BIG.astype(np.float32)
    for f in (ea.sigmoid, ea.softplus, ea.logsumexp, ea.softmax, ea.log_softmax):
        assert f(x).dtype == np.float32
        g = ea.grad(lambda x, f=f: ea.sum(f(x)))(x)
        assert g.dtype == np.float32 and np.all(np.isfinite(g))


# -- reductions ----------------------------------------------------------------------------------

REDUCE_KWARGS = [{}, {"axis": 1}, {"axis": (0, 2)}, {"axis": -1, "keepdims": True}, {"keepdims": True}]


@both_modes
@pytest.mark.parametrize("kwargs", REDUCE_KWARGS, ids=str)
@pytest.mark.parametrize("name", ["mean", "max", "min", "prod", "var"])
def test_reductions(name, kwargs):
    check_op(lambda x: getattr(ea, name)(x, **kwargs), lambda x: getattr(np, name)(x, **kwargs), X3)
    check_op(lambda x: getattr(x, name)(**kwargs), lambda x: getattr(np, name)(x, **kwargs), X3)


@both_modes
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "prod", "var", "logsumexp", "softmax"])
def test_reductions_keep_float32(lib, name):
    """float32 in, float32 out (value against numpy's float64 result, gradient against einad's on
    numpy), for every axis form, on every library; dask lazy."""
    x = X3.astype(np.float32)
    op = getattr(ea, name)
    ref = {"logsumexp": _logsumexp, "softmax": _softmax}.get(name) or getattr(np, name)
    forms = (
        [{"axis": -1}]
        if name == "softmax"
        else [{}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}, {"axis": -1}]
    )
    for kwargs in forms:
        loss = lambda v, kwargs=kwargs: ea.sum(op(v, **kwargs))
        with lib.lazy():
            y = op(lib.asarray(x), **kwargs)
            g = ea.grad(loss)(lib.asarray(x))
        check_lib(lib, y, ref(X3, **kwargs).astype(np.float32), rtol=1e-5, atol=1e-6, dtype=np.float32)
        check_lib(lib, g, ea.grad(loss)(x), rtol=1e-5, atol=1e-5, dtype=np.float32)


def test_integer_reductions_take_numpys_result_dtype(lib):
    i = np.arange(1, 7, dtype=np.int32)  # numpy's result dtypes: prod and cumsum of int32 in int64
    check_lib(lib, ea.prod(lib.asarray(i)), ea.prod(i), rtol=1e-7, atol=1e-7)
    check_lib(lib, ea.cumsum(lib.asarray(i)), ea.cumsum(i), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", ["sum", "mean", "prod", "var", "std", "cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.complex128])
def test_a_reductions_dtype_keyword_computes_in_that_dtype_as_numpy(lib, name, dtype):
    """numpy's and JAX's `dtype=` (refused as an unexpected keyword before): the elements are
    cast to it first, so an int8 sum or mean wraps as numpy's and a float32 mean of integers is
    float32 (var/std of an integer dtype, which numpy truncates step by step, is a TypeError);
    the same through the method and ``np.<name>``, and
    differentiable (the cotangent cast back to the input's dtype)."""
    if dtype is np.complex128 and lib.name == "torch" and name in ("var", "std"):
        pytest.skip("torch computes no variance of complex numbers")
    x = np.array([[100, 27, 3], [90, 5, -8]], dtype=np.int16)
    axis = None if name in ("cumprod", "std") else 0
    if name in ("var", "std") and dtype is np.int8:  # numpy truncates each step: not followed
        with pytest.raises(TypeError, match="var and std take a floating-point or complex dtype"):
            getattr(ea, name)(lib.asarray(x), dtype=dtype)
        return
    want = getattr(np, name)(x, axis=axis, dtype=dtype)
    check_lib(lib, getattr(ea, name)(lib.asarray(x), axis=axis, dtype=dtype), want, dtype=want.dtype)
    check_lib(lib, getattr(ea.tensor(lib.asarray(x)), name)(axis, dtype=dtype), want, dtype=want.dtype)
    if lib.name == "numpy":
        assert_close(getattr(np, name)(ea.tensor(x), axis, dtype), want)  # numpy's third place
    if np.dtype(dtype).kind == "f":
        w = np.linspace(0.5, 1.5, 6).reshape(2, 3)
        g = ea.grad(lambda a: ea.sum(getattr(ea, name)(a, axis=axis, dtype=dtype) ** 2))(w)
        h = ea.grad(lambda a: ea.sum(getattr(ea, name)(a.astype(dtype), axis=axis) ** 2))(w)
        assert g.dtype == np.float64
        assert_close(g, h)


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("max", {}),
        ("min", {"axis": 0}),
        ("prod", {"axis": 1}),
        ("cumsum", {"axis": 1}),
        ("cumprod", {}),
        ("argmax", {"axis": 1}),
        ("argmin", {}),
        ("argsort", {"axis": 0}),
        ("sort", {"axis": 1}),
    ],
)
def test_boolean_reductions_and_sorts_as_numpy_on_every_library(lib, name, kwargs):
    """numpy reduces, scans and sorts booleans (max: any; prod and the scans in int64; False
    sorts first); the standard's functions take no booleans: array-api-strict refused all nine
    ("Only real numeric dtypes are allowed") and torch's argmax and argmin refused them."""
    b = np.array([[True, False, True], [False, False, True]])
    with lib.lazy():
        got = getattr(ea, name)(lib.asarray(b), **kwargs)
    want = np.argsort(b, kind="stable", **kwargs) if name == "argsort" else getattr(np, name)(b, **kwargs)
    assert lib_value(lib, got, want.dtype).tolist() == want.tolist()


@both_modes
@pytest.mark.parametrize("ddof", [0, 1, 2])
def test_var_ddof(ddof):
    x = X3
    check_op(lambda x: ea.var(x, ddof=ddof), lambda x: np.var(x, ddof=ddof), x)
    check_op(lambda x: ea.var(x, axis=1, ddof=ddof), lambda x: np.var(x, axis=1, ddof=ddof), x)
    n = x.size
    assert_close(ea.grad(lambda x: ea.var(x, ddof=ddof))(x), 2 * (x - x.mean()) / (n - ddof))
    assert_close(ea.tensor(x).var(axis=2, ddof=ddof).numpy(), x.var(axis=2, ddof=ddof))


@both_modes
@pytest.mark.parametrize("name", ["var", "std"])
def test_var_with_ddof_at_least_the_count_follows_numpy(name):
    """numpy divides by max(n - ddof, 0): ddof >= n gives inf (nan with no spread or no elements),
    never the negative variance that dividing by n - ddof < 0 gave (and -0.0 for an empty axis)."""
    op = getattr(ea, name)
    cases = [(np.array([1.0, 2.0]), 3), (np.array([1.0, 2.0]), 2), (np.array([3.0]), 1)]
    cases += [(np.ones((2, 0)), 1), (np.array([1.0, 1.0]), 5)]
    for x, ddof in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "Degrees of freedom <= 0"
            expected = getattr(np, name)(x, axis=-1, ddof=ddof)
        with np.errstate(divide="ignore", invalid="ignore"):
            assert_close(op(x, axis=-1, ddof=ddof).numpy(), expected)


@both_modes
def test_var_defaults_to_ddof_zero():
    x = np.array([1.0, 2.0, 4.0])
    assert_close(ea.var(x).numpy(), np.var(x))


@both_modes
def test_mean_gradient():
    x = np.arange(6.0).reshape(2, 3)
    assert_close(ea.grad(ea.mean)(x), np.full((2, 3), 1 / 6))
    assert_close(ea.grad(lambda x: ea.sum(ea.mean(x, axis=0)))(x), np.full((2, 3), 1 / 2))


@both_modes
@pytest.mark.parametrize("name", ["mean", "var", "std"])
def test_gradient_of_a_reduction_over_an_empty_axis_is_empty(name):
    """A mean (var, std) over an axis of size 0: numpy's nan values, and the gradient an empty
    array of the input's shape, as JAX gives (the count 0 made the divide rule's 1 / 0 raise
    ZeroDivisionError)."""
    op = getattr(ea, name)
    x = np.ones((3, 0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy's "Degrees of freedom <= 0", ...
        expected = getattr(np, name)(x, axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert_close(op(x, axis=1).numpy(), expected)
        for axis in (None, 1):
            g = ea.grad(lambda x, axis=axis: ea.sum(op(x, axis=axis)))(x)
            assert g.shape == x.shape and g.dtype == x.dtype


@both_modes
@pytest.mark.parametrize("op, pick", [(ea.max, np.argmax), (ea.min, np.argmin)])
def test_max_min_gradient_without_ties_is_an_indicator(op, pick):
    x = np.array([[0.3, -1.0, 2.0], [4.0, 0.1, -3.0]])
    expected = np.zeros_like(x)
    expected.flat[pick(x)] = 1.0
    assert_close(ea.grad(op)(x), expected)


@both_modes
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


@both_modes
def test_min_ties_share_the_gradient():
    x = np.array([[2.0, 0.5], [0.5, 0.5]])
    g = ea.grad(ea.min)(x)
    assert_close(g, [[0.0, 1 / 3], [1 / 3, 1 / 3]])
    g = ea.grad(lambda x: ea.sum(ea.min(x, axis=0, keepdims=True) * 2.0))(x)
    assert_close(g, [[0.0, 1.0], [2.0, 1.0]])


@both_modes
@pytest.mark.parametrize("op", [ea.max, ea.min])
def test_max_min_forward_mode_ignores_the_tangents_of_the_other_elements(op):
    # an infinite or nan tangent of an element that is not the extreme (sqrt's at 0, as quimb's
    # eig-based SVD gives its zero singular values) must not reach the extreme's tangent (JAX: 1)
    x = np.array([3.0, -3.0, 0.5])
    for bad in (np.nan, np.inf):
        t = np.array([1.0, 1.0, bad])
        _, dout = ea.jvp(op, (x,), (t,))
        assert_close(dout, 1.0)
    sign = 1.0 if op is ea.max else -1.0  # the extreme at 4, away from sqrt's infinite slope at 0
    jac = ea.jacfwd(lambda x: op(sign * ea.sqrt(x)))(np.array([4.0, 0.0, 1.0]))
    assert_close(jac, [sign * 0.25, 0.0, 0.0])


@both_modes
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


@both_modes
def test_prod_second_derivative_with_a_zero():
    # d2/dx0 dx1 of x0 x1 x2 is x2, also where x0 == 0.
    h = ea.hessian(ea.prod)(np.array([0.0, 2.0, 3.0]))
    assert_close(h, [[0.0, 3.0, 2.0], [3.0, 0.0, 0.0], [2.0, 0.0, 0.0]])


@both_modes
def test_prod_hessian_in_lanes_of_no_one_two_and_three_zeros():
    """d2 prod / dx_i dx_j is the product of the lane's others (i != j, same lane), 0 on the
    diagonal and across lanes: each lane's count of zeros takes its own branch of the rule."""
    x = np.array([[1.5, 2.0, 3.0, 0.5], [0.0, 2.0, 3.0, 5.0], [0.0, 2.0, 0.0, 3.0], [0.0, 0.0, 4.0, 0.0]])
    w = np.array([1.0, 2.0, -1.0, 3.0])
    grad = np.zeros_like(x)
    hess = np.zeros(x.shape * 2)
    for r in range(4):
        for i in range(4):
            grad[r, i] = w[r] * np.prod(np.delete(x[r], i))
            for j in range(4):
                if i != j:
                    hess[r, i, r, j] = w[r] * np.prod(np.delete(x[r], [i, j]))
    f = lambda v: ea.sum(ea.prod(v, axis=1) * w)
    assert_close(ea.grad(f)(x), grad)
    assert_close(ea.hessian(f)(x), hess)


# -- clip ----------------------------------------------------------------------------------


# name: (f(m, *args) written once for m = einad and m = numpy, args)
CLIP = {
    "clip": (lambda m, x: m.clip(x, -0.5, 0.5), (A,)),
    "clip no lower": (lambda m, x: m.clip(x, None, 0.5), (A,)),
    "clip no upper": (lambda m, x: m.clip(x, -0.5, None), (A,)),
    "clip array bounds": (
        lambda m, x, lo, hi: m.clip(x, lo, hi),
        (A, np.array([-0.5, -0.1, -0.2, -1.0]), np.array([[[0.3]], [[1.0]]])),
    ),
    "clip bounds of more dimensions": (  # the result takes the bounds' shape
        lambda m, x, lo: m.clip(x, lo, None),
        (A[0, 0], np.array([[-0.5], [0.2]])),
    ),
    "clip upper bound of more dimensions": (
        lambda m, x, hi: m.clip(x, None, hi),
        (A[0, 0], np.array([[-0.5], [0.2]])),
    ),
}


@both_modes
@pytest.mark.parametrize(("check", "name"), case_params(CLIP, float32=["clip"]))
def test_clip(check, name):
    check(*CLIP[name])


@both_modes
def test_clip_gradient_passes_only_inside_the_bounds():
    x = np.array([-2.0, -0.5, 0.0, 0.5, 2.0])
    assert_close(ea.clip(x, -1.0, 1.0).numpy(), np.clip(x, -1.0, 1.0))
    assert_close(ea.grad(lambda x: ea.sum(ea.clip(x, -1.0, 1.0)))(x), [0.0, 1.0, 1.0, 1.0, 0.0])


@both_modes
def test_clip_passes_no_slope_at_a_nan():
    """A nan is not within the bounds: its value stays nan (numpy's) and its slope is 0 in both
    modes, as JAX's and PyTorch's; a nan tangent or cotangent elsewhere does not leak into it."""
    x = np.array([np.nan, -2.0, 0.5, 2.0])
    for lo, hi in ((-1.0, 1.0), (None, 1.0), (-1.0, None)):
        f = lambda x, lo=lo, hi=hi: ea.clip(x, lo, hi)
        np.testing.assert_array_equal(f(x).numpy(), np.clip(x, lo, hi))
        inside = np.array([0.0, lo is None, 1.0, hi is None], dtype=float)
        assert_close(ea.grad(lambda x, f=f: ea.sum(f(x)))(x), inside)
        assert_close(ea.jvp(f, (x,), (np.ones(4),))[1], inside)
    torch = pytest.importorskip("torch")
    t = torch.tensor(x, requires_grad=True)
    torch.clamp(t, -1.0, 1.0).sum().backward()
    assert_close(t.grad.numpy(), ea.grad(lambda x: ea.sum(ea.clip(x, -1.0, 1.0)))(x))


@both_modes
def test_clip_with_crossed_bounds_follows_numpy():
    # numpy.clip is minimum(maximum(x, a_min), a_max): where a_min > a_max every value is a_max.
    x = np.array([0.0, 2.0, 5.0])
    assert_close(ea.clip(x, 3.0, 1.0).numpy(), np.clip(x, 3.0, 1.0))
    lo, hi = np.array([3.0, 0.0, 3.0]), np.array([1.0, 4.0, 1.0])
    assert_close(ea.clip(x, lo, hi).numpy(), np.clip(x, lo, hi))
    glo, ghi = ea.grad(lambda lo, hi: ea.sum(ea.clip(x, lo, hi)), (0, 1))(lo, hi)
    assert_close(glo, [0.0, 0.0, 0.0])
    assert_close(ghi, [1.0, 0.0, 1.0])


# -- the everyday reductions: one table, every check ---------------------------------------


# name: (einad function, numpy reference, arguments maker (dtype -> args), complex inputs allowed)
EVERYDAY = {
    "std": (lambda x: ea.std(x, axis=1), lambda x: np.std(x, axis=1), one, True),
    "std_ddof": (
        lambda x: ea.std(x, axis=0, ddof=1, keepdims=True),
        lambda x: np.std(x, axis=0, ddof=1, keepdims=True),
        one,
        True,
    ),
    "cumsum": (lambda x: ea.cumsum(x, axis=1), lambda x: np.cumsum(x, axis=1), one, True),
    "cumprod": (ea.cumprod, np.cumprod, one, True),
    "cumprod_axis": (
        lambda x: ea.cumprod(x, axis=0),
        lambda x: np.cumprod(x, axis=0),
        one,
        True,
    ),
}


@both_modes
@pytest.mark.parametrize(("check", "name"), op_table.cases(EVERYDAY))
def test_everyday(check, name):
    check(EVERYDAY[name])


# -- special points ------------------------------------------------------------------------------


@both_modes
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


def _cumprod_hessians(x):
    """d2 cumprod(x)_k / dx_a dx_b of a 1-D `x`: the product of the x_i, i <= k, other than x_a
    and x_b (for a != b, both <= k), else 0."""
    n = len(x)
    h = np.zeros((n, n, n))
    for k, a, b in np.ndindex(n, n, n):
        if a != b and a <= k and b <= k:
            h[k, a, b] = np.prod([x[i] for i in range(k + 1) if i not in (a, b)])
    return h


@both_modes
def test_cumprod_forward_over_forward_is_exact_with_one_zero_per_lane():
    """The JVP of cumprod's JVP, along each lane: the closed-form second derivative, where a lane
    has no zero, one zero first, one in the middle (the running product is 0 after a zero, its
    derivative is not)."""
    x = np.array([[1.5, 0.0, 2.0, -1.0], [0.0, 2.0, 0.5, 3.0], [1.5, 2.5, 0.0, -1.0], [0.5, 2.0, -1.5, 3.0]])
    t, u = np.random.default_rng(12).standard_normal((2, *x.shape))
    _, second = ea.jvp(lambda x: ea.jvp(lambda v: ea.cumprod(v, axis=1), (x,), (t,))[1], (x,), (u,))
    want = [np.einsum("kab,a,b->k", _cumprod_hessians(row), tr, ur) for row, tr, ur in zip(x, t, u)]
    assert_close(second, np.array(want))


@both_modes
def test_cumprod_second_derivatives_are_exact_with_two_and_three_zeros_per_lane():
    """The closed-form second derivative (JAX's too) in lanes of two and three zeros, in every
    mode: at a lane's second zero the derivative is the product without it, 0 in value but not
    in its derivative along the first zero (it was a constant 0, so d2/dx_first dx_second was
    lost: the Hessian was not even symmetric)."""
    x = np.array([[0.0, 3.0, 0.0, 2.0], [1.5, 0.0, 0.0, -1.0], [0.0, 0.0, 0.0, 2.0], [2.0, 0.0, 1.5, 0.0]])
    t, u = np.random.default_rng(13).standard_normal((2, *x.shape))
    w = np.linspace(1.0, 2.0, 4)
    for row, ur in zip(x, u):
        want = np.einsum("kab,k->ab", _cumprod_hessians(row), w)
        loss = lambda v: ea.sum(ea.cumprod(v) * w)
        assert_close(ea.hessian(loss)(row), want)
        assert_close(ea.jacrev(ea.grad(loss))(row), want)
        for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
            assert_close(ea.hvp(loss, (row,), (ur,), mode=mode)[0], want @ ur)
    _, second = ea.jvp(lambda x: ea.jvp(lambda v: ea.cumprod(v, axis=1), (x,), (t,))[1], (x,), (u,))
    want = [np.einsum("kab,a,b->k", _cumprod_hessians(row), tr, ur) for row, tr, ur in zip(x, t, u)]
    assert_close(second, np.array(want))


# -- on every array library --------------------------------------------------------------------

REDUCTIONS = ["max", "min", "prod", "mean", "var", "std", "logsumexp", "softmax", "log_softmax", "sum"]


SCANS = ["cumsum", "cumprod"]
# (name, axis, data (low, high, shape, seed), the function of the result in the loss)
REDUCTION_CASES = (
    [(n, 1, (0.3, 2, (2, 4), 5), ea.cos) for n in REDUCTIONS]
    + [(n, None, (0.3, 2, (2, 4), 5), ea.cos) for n in ("max", "prod", "var", "logsumexp")]
    + [(n, axis, (0.5, 1.5, (3, 4), 6), ea.sin) for axis in (0, 1, None) for n in SCANS]
)


@pytest.mark.parametrize(
    ("name", "axis", "data", "outer"), REDUCTION_CASES, ids=[f"{c[0]}-{c[1]}" for c in REDUCTION_CASES]
)
def test_reduction_value_and_gradient(lib, name, axis, data, outer):
    """Reductions and scans: value and the gradient of sum(r * outer(r)) equal einad's on numpy."""
    x = uniform_away_from_zero(*data)
    op = getattr(ea, name)

    def f(v):
        return ea.sum(op(v, axis=axis) * outer(op(v, axis=axis)))

    with lib.lazy():
        y = op(lib.asarray(x), axis=axis)
        g = ea.grad(f)(lib.asarray(x))
    check_lib(lib, y, op(x, axis=axis), rtol=1e-7, atol=1e-7)
    check_lib(lib, g, ea.grad(f)(x), rtol=1e-7, atol=1e-7)


# log(0), and 0/0 in dask's dtype probe
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
@pytest.mark.parametrize("name", ["logsumexp", "softmax", "log_softmax"])
def test_stable_ops_of_an_empty_array(lib, name):
    """An empty float32 array: the result is numpy's (empty, or logsumexp's -inf over an empty
    axis), float32 and of the library, and so is the gradient (zeros)."""
    x = np.zeros((0, 3), np.float32)
    op = getattr(ea, name)
    expected = np.full(3, -np.inf, np.float32) if name == "logsumexp" else x  # log of an empty sum

    def finite_sum(v):  # logsumexp's -inf left out of the loss
        y = op(v, axis=0)
        return ea.sum(ea.where(ea.isfinite(y), y, 0.0))

    with lib.lazy():
        y = op(lib.asarray(x), axis=0)
        g = ea.grad(finite_sum)(lib.asarray(x))
    check_lib(lib, y, expected)
    check_lib(lib, g, x)


@pytest.mark.parametrize("name", ["logsumexp", "softmax", "log_softmax"])
def test_stable_ops_shift_lanes_of_length_one_too(name):
    """A (1, n) array of large values: the shift by the lane's max keeps it finite."""
    x = np.array([[1000.0, 1000.0, 999.0]])
    ref = {"logsumexp": _logsumexp(x - 1000, axis=1) + 1000, "softmax": _softmax(x - 1000, 1)}
    ref["log_softmax"] = np.log(ref["softmax"])
    assert_close(getattr(ea, name)(x, axis=1), ref[name])
    assert_close(getattr(ea, name)(x.T, axis=0), ref[name].T)


@pytest.mark.parametrize("name", ["prod", "cumprod"])
def test_products_exact_at_zeros(lib, name):
    """The zero-aware rules (no division by zero) on every library; on dask without a compute."""
    x = np.array([[0.0, 2.0, 3.0], [1.5, 0.0, 0.0], [2.0, 0.5, 4.0]])
    op = getattr(ea, name)
    with lib.lazy():
        g = ea.grad(lambda v: ea.sum(op(v, axis=1)))(lib.asarray(x))
    check_lib(lib, g, ea.grad(lambda v: ea.sum(op(v, axis=1)))(x), rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("name", ["prod", "cumprod"])
def test_products_forward_mode_and_hvps_on_every_library(lib, name):
    """jacfwd (a batched tangent, so a Tensor, beside the plain running product) and the
    rev-over-fwd HVP (a plain tangent beside a traced product) of prod and cumprod: on
    array-api-strict the rules put a plain array on the left of a Tensor, whose operators refuse
    one (TypeError: Expected Array or Python scalar; got Tensor)."""
    x = np.array([[0.0, 2.0, 3.0], [1.5, 0.0, 0.5]])
    v = np.array([[0.3, -1.0, 2.0], [1.0, 0.5, -0.5]])
    op = getattr(ea, name)
    f = lambda a: op(a, axis=1)
    loss = lambda a: ea.sum(ea.sin(f(a)))
    with lib.lazy():
        jf = ea.jacfwd(f)(lib.asarray(x))
        hs = ea.hessian(loss)(lib.asarray(x))
        hvps = [
            ea.hvp(loss, (lib.asarray(x),), (lib.asarray(v),), mode=m)[0]
            for m in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")
        ]
    check_lib(lib, jf, ea.jacrev(f)(x), rtol=1e-10, atol=1e-12)
    check_lib(lib, hs, ea.hessian(loss)(x), rtol=1e-10, atol=1e-12)
    for h in hvps:
        check_lib(lib, h, ea.hvp(loss, (x,), (v,))[0], rtol=1e-10, atol=1e-12)


def test_max_ties_share_and_clip(lib):
    x = np.array([[1.0, 3.0, 3.0], [0.5, -1.0, 2.0]])
    with lib.lazy():
        g = ea.grad(lambda v: ea.sum(ea.max(v, axis=1)))(lib.asarray(x))
        c = ea.clip(lib.asarray(x), -0.5, 2.5)
        gc = ea.grad(lambda v: ea.sum(ea.clip(v, -0.5, 2.5) ** 2))(lib.asarray(x))
    check_lib(lib, g, np.array([[0, 0.5, 0.5], [0, 0, 1.0]]), rtol=1e-7, atol=1e-7)
    check_lib(lib, c, np.clip(x, -0.5, 2.5), rtol=1e-7, atol=1e-7)
    check_lib(lib, gc, ea.grad(lambda v: ea.sum(ea.clip(v, -0.5, 2.5) ** 2))(x), rtol=1e-7, atol=1e-7)


def test_clip_of_a_number_between_bounds_of_a_library(lib):
    """``clip(2.0, lo, hi)`` with array bounds broadcasts the number, as numpy's clip: with bounds
    of torch, array-api-strict or dask, the number became a numpy array beside them ("arrays of
    two libraries"); it now joins the bounds' library, and the gradient in a bound is the
    closed form (1 where the bound is taken, 0 elsewhere)."""
    lo, hi = np.array([0.5, 2.5, 1.0]), np.array([1.5, 3.0, 1.8])
    with lib.lazy():
        only_lo = ea.clip(2.0, lib.asarray(lo), None)
        only_hi = ea.clip(2.0, None, lib.asarray(hi))
        both = ea.clip(2.0, 0.0, lib.asarray(hi))
        g_lo, g_hi = ea.grad(lambda a, b: ea.sum(ea.clip(2.0, a, b)), (0, 1))(
            lib.asarray(lo), lib.asarray(hi)
        )
    check_lib(lib, only_lo, np.clip(2.0, lo, None))
    check_lib(lib, only_hi, np.clip(2.0, None, hi))
    check_lib(lib, both, np.clip(2.0, 0.0, hi))
    check_lib(lib, g_lo, ((lo > 2.0) & (np.maximum(2.0, lo) <= hi)).astype(float))  # [0, 1, 0]
    check_lib(lib, g_hi, (np.maximum(2.0, lo) > hi).astype(float))  # [1, 0, 1]


@pytest.mark.parametrize("name", ["max", "min"])
def test_max_min_derivatives_of_float32_are_float32_in_both_modes(lib, name):
    """float32 in: the tie-sharing weights are float32 too, so the JVP's tangent (which nothing
    casts back) is float32, like the VJP's gradient; values the closed form (1/count on the ties).

    Kills: _extreme_weights 5, 23 (the weights in float64: a float64 tangent)."""
    x = np.array([[1.0, 3.0, 3.0], [0.5, -1.0, 2.0]], np.float32)
    t = np.array([[1.0, 2.0, -4.0], [3.0, 5.0, 0.5]], np.float32)
    hit = x == getattr(np, name)(x, axis=1, keepdims=True)
    weights = hit / hit.sum(axis=1, keepdims=True)
    op = getattr(ea, name)
    with lib.lazy():
        _, tangent = ea.jvp(lambda v: op(v, axis=1), (lib.asarray(x),), (lib.asarray(t),))
        g = ea.grad(lambda v: ea.sum(op(v, axis=1) * 3.0))(lib.asarray(x))
    check_lib(lib, tangent, (t * weights).sum(axis=1), rtol=1e-6, atol=1e-6, dtype=np.float32)
    check_lib(lib, g, 3.0 * weights, rtol=1e-6, atol=1e-6, dtype=np.float32)


# -- the factories, called by the test ---------------------------------------------------------
# max_p, min_p and the primitives' implementations are built at import; these tests build fresh
# ones, so a broken factory (or a broken rule inside one) fails here, not only at import.


@pytest.mark.parametrize("name", ["max", "min"])
def test_extreme_prim_builds_the_extreme_and_its_tie_sharing_derivatives(lib, name):
    """`_extreme_prim(name, kernel)` makes a primitive named `name` whose value is numpy's along
    its axes, on every library, and whose VJP and JVP share a tie's derivative equally among the
    tied elements (closed forms: weights 1/count on the extremes of each row, 0 elsewhere).

    Kills: _extreme_prim (the primitive, its implementation, its vjp and jvp)."""
    kernel = getattr(np, name)
    del core.primitives[name]  # made again, as the module makes it (the registry is restored after)
    prim = reductions._extreme_prim(name, kernel)
    x = np.array([[3.0, 1.0, 3.0, 1.0], [0.5, -1.0, 2.0, 0.0], [4.0, 4.0, 4.0, 4.0]])
    u, t = np.array([2.0, -3.0, 1.5]), np.arange(12.0).reshape(3, 4) - 5.0
    hit = x == kernel(x, axis=1, keepdims=True)
    weights = hit / hit.sum(axis=1, keepdims=True)

    def f(v):
        return wrap(core.bind(prim, (v,), {"axes": (1,)}))

    with forget_rules(prim):
        assert prim.name == name
        with lib.lazy():
            value, pullback = ea.vjp(f, lib.asarray(x))
            (g,) = pullback(lib.asarray(u))
            _, tangent = ea.jvp(f, (lib.asarray(x),), (lib.asarray(t),))
        check_lib(lib, value, kernel(x, axis=1))
        check_lib(lib, g, u[:, None] * weights)
        check_lib(lib, tangent, (t * weights).sum(axis=1))


def _sum_in(dtype):
    """A kernel whose result dtype is not its operand's: a sum accumulated in `dtype`."""
    return lambda x, axis: np.sum(x, axis=axis, dtype=dtype)


# (name, numpy kernel, the standard's function, the parameter's name, operand dtype, its value)
IMPL_CASES = [
    ("max", np.max, "max", "axes", np.float64, (1,)),
    ("min", np.min, "min", "axes", np.int32, (0, 2)),
    ("prod", np.prod, "prod", "axes", np.int32, (1,)),  # numpy: int32 -> int64
    ("cumsum", np.cumsum, "cumulative_sum", "axis", np.int32, 1),  # int32 -> int64
    ("sum_in_float32", _sum_in(np.float32), "sum", "axes", np.int32, (1,)),
    ("sum_in_float64", _sum_in(np.float64), "sum", "axes", np.int32, (2,)),
    ("mean", np.mean, "mean", "axes", np.float32, (1,)),  # float32 kept: no dtype= (mean takes none)
]


def test_impl_runs_numpys_kernel_or_the_standards_function_in_numpys_dtype(lib, monkeypatch):
    """`_impl(name, kernel, standard, param)` runs `kernel` on numpy arrays, and the standard's
    function of the operand's library elsewhere, giving numpy's result (value, shape, dtype): it
    asks for numpy's result dtype with ``dtype=`` only where it differs from the operand's (the
    standard's mean takes no dtype=), and each kernel's result dtype is its own (computed here:
    the cache starts empty; the int32 operands get int64, float32, float64 and int32 results).

    Kills: _impl (the implementation it makes)."""
    monkeypatch.setattr(reductions, "_result_dtypes", {})
    x = np.random.default_rng(5).integers(-3, 4, (2, 3, 4))
    for name, kernel, standard, param, dtype, axis in IMPL_CASES:
        impl = reductions._impl(name, kernel, standard, param)
        a = x.astype(dtype)
        with lib.lazy():
            out = impl(lib.asarray(a), **{param: axis})
        check_lib(lib, out, kernel(a, axis=axis), rtol=1e-6)


def test_impl_runs_numpys_kernel_on_numpy_scalars():
    """A numpy scalar (what a full reduction of a numpy array gives) goes to numpy's kernel too:
    the result is numpy's, of numpy's scalar type (prod of int32 in int64)."""
    for name, kernel, standard, param, dtype, _ in IMPL_CASES:
        if param == "axes":
            impl = reductions._impl(name, kernel, standard, param)
            got, want = impl(dtype(3), axes=()), kernel(dtype(3), axis=())
            assert type(got) is type(want) and got == want, (name, got, want)


def test_mean_var_std_of_dask_arrays_with_unknown_chunk_sizes():
    """A dask array of unknown chunk sizes (after boolean indexing) has nan among its dimensions:
    mean, var and std divided by that nan and gave nan everywhere (dask's own mean is right);
    the count is now counted lazily, and the results stay lazy and in the input's dtype."""
    da = pytest.importorskip("dask.array")
    a = np.random.default_rng(0).uniform(0.2, 1.0, (6, 4))
    x = da.from_array(a, chunks=(2, 2))
    xu, au = x[x[:, 0] > 0.5], a[a[:, 0] > 0.5]
    assert np.isnan(xu.shape[0])
    cases = [
        (ea.mean(xu, axis=0), au.mean(0)),
        (ea.mean(xu), au.mean()),
        (ea.mean(xu[:, :2], axis=1), au[:, :2].mean(1)),
        (ea.var(xu, axis=0), au.var(0)),
        (ea.std(xu, ddof=1), au.std(ddof=1)),
        (ea.tensor(xu).mean(axis=0), au.mean(0)),
        (ea.var(xu.astype(np.float32), axis=0, keepdims=True), au.astype(np.float32).var(0, keepdims=True)),
    ]
    for got, want in cases:
        value = got._value
        assert isinstance(value, da.Array)
        assert_close(np.asarray(value.compute()), want, rtol=1e-6, atol=1e-6)
        assert value.dtype == want.dtype


def test_shapes_of_unknown_size_are_refused_where_einad_needs_them():
    """einsum plans from the operands' sizes and reverse mode seeds and broadcasts cotangents to
    the inputs' shapes: with a dask array of unknown chunk sizes, einsum said "size nan in
    operand 0 and size nan in operand 1" and grad failed deep inside numpy's broadcast_to; both
    now say what is unknown and what to do. Forward mode and eager elementwise work stay lazy."""
    da = pytest.importorskip("dask.array")
    a = np.random.default_rng(1).uniform(-1.0, 1.0, (6, 4))
    x = da.from_array(a, chunks=(2, 2))
    xu, au = x[x[:, 0] > 0], a[a[:, 0] > 0]
    for f in (lambda v: ea.einsum("ij,ij->", v, v), lambda v: ea.einsum("ij->j", v)):
        with pytest.raises(
            ea.EinsumError, match=r"operand 0 has dimensions of unknown size .*compute_chunk_sizes"
        ):
            f(xu)
    for f in (lambda v: ea.sum(ea.sin(v)), lambda v: ea.sum(v * v)):
        with pytest.raises(
            ValueError, match=r"reverse mode .* shape \(nan, 4\) has unknown sizes.*compute_chunk_sizes"
        ):
            ea.grad(f)(xu)
    _, tangent = ea.jvp(lambda v: ea.sum(ea.sin(v)), (xu,), (xu,))
    assert_close(np.asarray(tangent.compute()), np.sum(np.cos(au) * au), rtol=1e-12, atol=1e-12)
    known = xu.compute_chunk_sizes()  # (what the messages advise)
    assert_close(ea.grad(lambda v: ea.einsum("ij,ij->", v, v))(known).compute(), 2 * au, rtol=1e-12, atol=0)


# -- any and all -----------------------------------------------------------------------------

_TRUTH_INPUTS = [
    np.array([[1.0, 0.0, -2.0], [0.0, 0.0, 0.0]]),
    np.array([[np.nan, 0.0], [3.0, 4.0]]),  # a nan is nonzero
    np.zeros((0, 3)),  # any of nothing is False, all of nothing True
    np.array([[True, False], [True, True]]),
    np.array([[0, 7], [1, 2]], np.int32),
    np.array([[1 + 0j, 0j], [1j, 1]]),
]


@pytest.mark.parametrize("name", ["any", "all"])
@pytest.mark.parametrize("x", _TRUTH_INPUTS, ids=lambda x: f"{x.dtype}{x.shape}")
@pytest.mark.parametrize("axis", [None, 0, 1, -1, (0, 1), ()])
@pytest.mark.parametrize("keepdims", [False, True])
def test_any_and_all_follow_numpy_eagerly_staged_and_as_methods(name, x, axis, keepdims):
    want = getattr(np, name)(x, axis=axis, keepdims=keepdims)
    fn = getattr(ea, name)
    for got in (
        fn(x, axis=axis, keepdims=keepdims),
        getattr(ea.tensor(x), name)(axis, keepdims),
        getattr(np, name)(ea.tensor(x), axis=axis, keepdims=keepdims),  # numpy's dispatch
        ea.jit(lambda v: fn(v, axis=axis, keepdims=keepdims))(x),
    ):
        assert np.asarray(got).dtype == np.bool_
        np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.parametrize("name", ["any", "all"])
def test_any_and_all_are_batched_per_example(name):
    x = np.array([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    fn = getattr(ea, name)
    np.testing.assert_array_equal(ea.vmap(fn)(x), getattr(np, name)(x, axis=1))
    np.testing.assert_array_equal(ea.vmap(fn, in_axes=1)(x), getattr(np, name)(x, axis=0))
    np.testing.assert_array_equal(ea.vmap(lambda r: fn(r, axis=0))(x), getattr(np, name)(x, axis=1))


def test_any_steers_a_traced_choice_and_passes_no_derivative():
    # the choice is made per call inside the program (an equation), not frozen at tracing
    f = ea.jit(lambda x: ea.sum(ea.where(ea.any(x < 0), -x, x) ** 2))
    assert f(np.array([1.0, 2.0])) == 5.0 and f(np.array([1.0, -2.0])) == 5.0
    g = ea.grad(lambda x: ea.sum(ea.where(ea.all(x > 0, axis=0), x, 3 * x)))
    np.testing.assert_array_equal(g(np.array([[1.0, -1.0], [2.0, 2.0]])), [[1.0, 3.0], [1.0, 3.0]])
    value, tangent = ea.jvp(ea.any, (np.array([0.0, 2.0]),), (np.ones(2),))
    assert value == True and not np.any(tangent)  # noqa: E712 (a numpy bool)


def test_clip_takes_numpys_min_and_max_keywords():
    x = np.array([-2.0, 0.5, 3.0])
    np.testing.assert_array_equal(ea.clip(x, min=0.0), np.clip(x, 0.0, None))
    np.testing.assert_array_equal(ea.clip(x, max=1.0), np.clip(x, None, 1.0))
    np.testing.assert_array_equal(np.clip(ea.tensor(x), min=0.0, max=1.0).numpy(), np.clip(x, 0.0, 1.0))
    np.testing.assert_array_equal(ea.grad(lambda v: ea.sum(ea.clip(v, min=0.0, max=1.0)))(x), [0.0, 1.0, 0.0])
    with pytest.raises(TypeError, match="not both"):
        ea.clip(x, 0.0, min=1.0)


# -- numpy's and JAX's where= and initial= -----------------------------------------------------

MASK = np.random.default_rng(11).random((3, 4)) > 0.35  # broadcasts to A's (2, 3, 4)
MASKED = [
    ("sum", {"axis": (0, 2), "where": MASK, "initial": 0.25}),
    ("sum", {"axis": None, "where": MASK[:, :1], "keepdims": True}),
    ("mean", {"axis": 1, "where": MASK}),
    ("var", {"axis": (1, 2), "where": MASK, "ddof": 1}),
    ("std", {"axis": -1, "where": MASK}),
    ("prod", {"axis": 2, "where": MASK, "initial": 1.5}),
    ("max", {"axis": 1, "where": MASK, "initial": 0.2}),
    ("min", {"axis": None, "where": MASK, "initial": 0.0}),
    ("max", {"axis": 0, "initial": 0.3}),
]


def jax_masked(jax, x, cts, ts):
    """JAX's values, gradients (of each case's output against a cotangent) and tangents, as one
    jitted program (one compilation, where eager JAX compiles each operation of each case)."""
    jnp = jax.numpy

    def everything():
        out = []
        for (name, kwargs), ct, t in zip(MASKED, cts, ts):
            f = lambda a, name=name, kwargs=kwargs: getattr(jnp, name)(a, **kwargs)
            out += [f(x), jax.grad(lambda a, f=f, ct=ct: jnp.sum(f(a) * ct))(x), jax.jvp(f, (x,), (t,))[1]]
        return out

    return jax.jit(everything)()


@pytest.mark.filterwarnings("ignore:invalid value")  # (a lane that keeps no element: nan, as numpy's)
def test_where_and_initial_of_reductions_follow_numpy_and_jax_in_every_mode():
    """numpy's and JAX's `where=` (the elements where the mask is False take no part and get no
    derivative) and `initial=` (one more element: added, multiplied, or joined by maximum),
    refused as unexpected keywords before: values as numpy's, through the function, the method
    and ``np.<name>``; gradients and tangents as JAX's, eager and jitted; mapped by vmap."""
    rng = np.random.default_rng(12)
    outs = [getattr(np, name)(A, **kwargs) for name, kwargs in MASKED]
    cts = [rng.standard_normal(np.shape(o)) for o in outs]
    ts = [rng.standard_normal(A.shape) for _ in MASKED]
    ref = jax_reference("tests.rules.test_reductions", "jax_masked", A, cts, ts)
    for k, ((name, kwargs), want, ct, t) in enumerate(zip(MASKED, outs, cts, ts)):
        f = lambda a, name=name, kwargs=kwargs: getattr(ea, name)(a, **kwargs)
        assert_close(f(A), want)
        assert_close(getattr(ea.tensor(A), name)(**kwargs), want)
        assert_close(getattr(np, name)(ea.tensor(A), **kwargs), want)
        assert_close(ref[3 * k], want)  # (the reference computes what numpy does)
        loss = lambda a, f=f, ct=ct: ea.sum(f(a) * ct)
        assert_close(ea.grad(loss)(A), ref[3 * k + 1])
        assert_close(ea.jit(ea.grad(loss))(A), ref[3 * k + 1])
        assert_close(ea.jvp(f, (A,), (t,))[1], ref[3 * k + 2])
        mapped = ea.vmap(f)(np.stack([A, 2 * A]))
        assert_close(mapped[1], getattr(np, name)(2 * A, **kwargs))


def test_where_leaves_out_elements_that_would_poison_the_result_and_its_gradient():
    # a mask is a select, not a multiplication by 0 or 1: an inf or nan left out reaches neither
    # the value nor the gradient
    x = np.array([[1.0, np.inf, 2.0], [np.nan, 3.0, 4.0]])
    finite = np.isfinite(x)
    tame = np.where(finite, x, 7.0)  # the left-out elements replaced by any finite values
    for name in ("sum", "mean", "prod", "var", "std"):
        f = lambda a, name=name: getattr(ea, name)(a, axis=1, where=finite)
        assert_close(f(x), getattr(np, name)(x, axis=1, where=finite))
        g = ea.grad(lambda a, f=f: ea.sum(f(a)))(x)
        assert np.all(g[~finite] == 0), (name, g)
        assert_close(g, ea.grad(lambda a, f=f: ea.sum(f(a)))(tame))  # as if they were not there
    assert_close(
        ea.grad(lambda a: ea.sum(ea.mean(a, axis=1, where=finite)))(x), [[0.5, 0, 0.5], [0, 0.5, 0.5]]
    )
    g = ea.grad(lambda a: ea.sum(ea.max(a, axis=1, where=finite, initial=-10.0)))(x)
    assert_close(g, [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])


@pytest.mark.filterwarnings("ignore:Mean of empty slice", "ignore:invalid value")
def test_where_with_a_traced_mask_and_initial_alone():
    x = A
    f = ea.jit(lambda a: ea.mean(a, axis=0, where=a > 0))
    assert_close(f(x), np.mean(x, axis=0, where=x > 0))
    assert_close(f(-x), np.mean(-x, axis=0, where=-x > 0))  # the mask staged, not a constant
    assert_close(ea.sum(np.arange(4), initial=0.7), np.sum(np.arange(4), initial=0.7))  # cast first
    assert ea.sum(np.arange(4), initial=0.7).dtype == np.int64
    assert_close(ea.max(np.zeros((0, 3)), axis=0, initial=1.5), np.full(3, 1.5))  # nothing but initial
    assert_close(ea.any(A > 1, axis=1, where=MASK), np.any(A > 1, axis=1, where=MASK))
    assert_close(ea.all(A > -1, where=False), True)
    assert_close(ea.grad(lambda a: ea.max(a, initial=10.0))(A), np.zeros_like(A))  # initial wins


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: ea.max(A, where=MASK), ValueError, "'maximum' does not have an identity.*'initial'"),
        (lambda: ea.sum(A, where=MASK.astype(int)), TypeError, "sum: where= takes a boolean mask"),
        (lambda: ea.mean(A, where=np.ones((2, 4), bool)), ValueError, r"shape \(2, 4\) does not broadcast"),
        (lambda: ea.sum(A[0], where=np.ones((2, 3, 4), bool)), ValueError, "does not broadcast to the shape"),
    ],
    ids=["max-without-initial", "integer-mask", "mask-of-another-shape", "mask-larger-than-x"],
)
def test_a_bad_where_or_a_missing_initial_is_refused_at_the_call(call, error, match):
    with pytest.raises(error, match=match):
        call()
