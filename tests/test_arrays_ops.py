"""Elementwise operations and reductions on every array library (issue 10).

Each test runs on numpy, array-api-strict, torch (CPU) and dask (the `lib` fixture):
values and gradients against einad on numpy on the same data, results of the
input's library (array-api-strict refuses numpy arrays mixed into its own, so a
kernel or rule reaching numpy on its arrays fails there), float32 kept float32,
dask results lazy (no computation inside einad); on torch, gradients against
torch.autograd on the same functions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import einad as ea
from einad.core import strip
from einad.rules.elementwise import BINARY, CONSTANT, GENERIC, PREDICATES, PRIMITIVES, STANDARD, UNARY

# -- helpers ------------------------------------------------------------------------------------

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


def _data(lo: float, hi: float, shape: tuple[int, ...] = (5,), seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).uniform(lo, hi, shape)
    x[np.abs(x) < 0.1] = 0.3  # away from kinks at 0 (abs, relu, sign)
    return x


def _raw(t: Any) -> Any:
    """The library array inside an einad result."""
    return strip(t)


def _check(lib: Any, got: Any, want: Any, rtol: float = 1e-7, dtype: Any = None) -> None:
    """`got` is an array of `lib` (lazy on dask) whose values are `want`'s."""
    got = _raw(got)
    assert lib.owns(got), f"a {type(got).__module__} result on {lib.name} input"
    want = np.asarray(_raw(want))
    value = lib.numpy(got)
    assert value.shape == want.shape
    assert value.dtype == (want.dtype if dtype is None else dtype)
    np.testing.assert_allclose(value, want, rtol=rtol, atol=rtol)


def _unary_domain(name: str) -> tuple[float, float]:
    return DOMAIN.get(name, (-2, 2))


# -- every elementwise op: values and gradients ----------------------------------------------


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_value_and_gradient(lib, name):
    x = _data(*_unary_domain(name))
    op = getattr(ea, name)
    with lib.lazy():
        y = op(lib.asarray(x))
        g = ea.grad(lambda v: ea.sum(op(v)))(lib.asarray(x))
    _check(lib, y, op(x))
    _check(lib, g, ea.grad(lambda v: ea.sum(op(v)))(x))


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_value_and_both_gradients(lib, name):
    (lx, hx), (ly, hy) = DOMAIN2.get(name, ((-2, 2), (-2, 2)))
    x, y = _data(lx, hx, (2, 3), seed=1), _data(ly, hy, (3,), seed=2)  # broadcast
    op = getattr(ea, name)

    def f(a, b):
        return ea.sum(op(a, b) * ea.sin(a))

    with lib.lazy():
        z = op(lib.asarray(x), lib.asarray(y))
        gx, gy = ea.grad(f, argnums=(0, 1))(lib.asarray(x), lib.asarray(y))
    _check(lib, z, op(x, y))
    want_x, want_y = ea.grad(f, argnums=(0, 1))(x, y)
    _check(lib, gx, want_x)
    _check(lib, gy, want_y)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_with_a_python_number(lib, name):
    """A Python number operand, on either side, keeps the array's dtype (numpy's weak scalars)."""
    (lx, hx), _ = DOMAIN2.get(name, ((-2, 2), (-2, 2)))
    x = _data(lx, hx).astype(np.float32)
    c = 1.5 if name != "power" else 2
    op = getattr(ea, name)
    with lib.lazy():
        right = op(lib.asarray(x), c)
        g = ea.grad(lambda v: ea.sum(op(v, c)))(lib.asarray(x))
    _check(lib, right, op(x, c), rtol=1e-5, dtype=np.float32)
    _check(lib, g, ea.grad(lambda v: ea.sum(op(v, c)))(x), rtol=1e-5, dtype=np.float32)
    if name != "power":  # 1.5 ** x: a positive base
        c = 0.8 if name == "mod" else c
        x = np.abs(x) + 0.5
        _check(lib, op(c, lib.asarray(x)), op(c, x), rtol=1e-5, dtype=np.float32)


@pytest.mark.parametrize("name", sorted(CONSTANT))
def test_constant_ops(lib, name):
    x = _data(-3, 3) * 1.37
    op = getattr(ea, name)
    with lib.lazy():
        y = op(lib.asarray(x))
        g = ea.grad(lambda v: ea.sum(op(v) * v))(lib.asarray(x))
    _check(lib, y, op(x))
    _check(lib, g, op(x))  # d(op(v) v) = op(v): op's own derivative is zero


def test_round_decimals(lib):
    x = np.array([0.123, -2.567, 10.0449, 3.5])
    _check(lib, ea.round(lib.asarray(x), 2), np.round(x, 2))
    _check(lib, ea.round(lib.asarray(x)), np.round(x))


@pytest.mark.parametrize("name", sorted(PREDICATES))
def test_predicates(lib, name):
    x = np.array([[0.5, -1.0, np.inf], [np.nan, 2.0, -np.inf]])
    y = np.array([0.5, 1.0, np.inf])
    op = getattr(ea, name)
    args = (x,) if name.startswith("is") else (x, y)
    with lib.lazy():
        got = op(*[lib.asarray(a) for a in args])
    _check(lib, got, op(*args), dtype=np.dtype(bool))
    if len(args) == 2:  # against a Python number: numpy's comparison
        _check(lib, op(lib.asarray(x), 0.5), op(x, 0.5), dtype=np.dtype(bool))


@pytest.mark.parametrize("name", ["conj", "real", "imag"])
def test_complex_parts(lib, name):
    z = _data(-2, 2) + 1j * _data(-2, 2, seed=3)
    op = getattr(ea, name)

    def f(v):
        return ea.sum(ea.real(op(v) * ea.conj(op(v))))

    with lib.lazy():
        got = op(lib.asarray(z))
        g = ea.grad(f)(lib.asarray(z))
    _check(lib, got, op(z))
    _check(lib, g, ea.grad(f)(z))


def test_table_names_every_op():
    """Every elementwise op has its standard name or a generic kernel (what other libraries run)."""
    for name in [*UNARY, *BINARY, *CONSTANT, *PREDICATES, "conj", "real", "imag"]:
        assert name in STANDARD or name in GENERIC, name
    assert STANDARD["arcsin"] == "asin" and STANDARD["power"] == "pow" and STANDARD["mod"] == "remainder"


# -- dtypes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["exp", "sigmoid", "softplus", "relu", "arcsin", "exp2", "abs"])
def test_float32_stays_float32(lib, name):
    x = _data(-0.9, 0.9).astype(np.float32)
    op = getattr(ea, name)
    with lib.lazy():
        y = op(lib.asarray(x) * 0.5)
        g = ea.grad(lambda v: ea.sum(op(v * 0.5)))(lib.asarray(x))
    _check(lib, y, op(x * 0.5), rtol=1e-6, dtype=np.float32)
    _check(lib, g, ea.grad(lambda v: ea.sum(op(v * 0.5)))(x), rtol=1e-6, dtype=np.float32)


def test_integers_promote_as_numpy(lib):
    """Integer operands go to float64 where numpy's result is floating (sin, divide, arctan2)."""
    i = np.arange(1, 7, dtype=np.int64).reshape(2, 3)
    for got, want in [
        (ea.sin(lib.asarray(i)), ea.sin(i)),
        (ea.divide(lib.asarray(i), 4), ea.divide(i, 4)),
        (ea.arctan2(lib.asarray(i), lib.asarray(i[::-1].copy())), ea.arctan2(i, i[::-1].copy())),
        (ea.multiply(lib.asarray(i), 0.5), ea.multiply(i, 0.5)),
        (ea.less(lib.asarray(i), 2.5), ea.less(i, 2.5)),
        (ea.add(lib.asarray(i), 2), ea.add(i, 2)),
    ]:
        _check(lib, got, want)


# -- reductions --------------------------------------------------------------------------------

REDUCTIONS = ["max", "min", "prod", "mean", "var", "std", "logsumexp", "softmax", "log_softmax", "sum"]


@pytest.mark.parametrize(
    ("name", "axis"), [(n, 1) for n in REDUCTIONS] + [(n, None) for n in ("max", "prod", "var", "logsumexp")]
)
def test_reduction_value_and_gradient(lib, name, axis):
    x = _data(0.3, 2, (2, 4), seed=5)
    op = getattr(ea, name)

    def f(v):
        return ea.sum(op(v, axis=axis) * ea.cos(op(v, axis=axis)))

    with lib.lazy():
        y = op(lib.asarray(x), axis=axis)
        g = ea.grad(f)(lib.asarray(x))
    _check(lib, y, op(x, axis=axis))
    _check(lib, g, ea.grad(f)(x))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("axis", [0, 1, None])
def test_scan_value_and_gradient(lib, name, axis):
    x = _data(0.5, 1.5, (3, 4), seed=6)
    op = getattr(ea, name)

    def f(v):
        return ea.sum(op(v, axis=axis) * ea.sin(op(v, axis=axis)))

    with lib.lazy():
        y = op(lib.asarray(x), axis=axis)
        g = ea.grad(f)(lib.asarray(x))
    _check(lib, y, op(x, axis=axis))
    _check(lib, g, ea.grad(f)(x))


@pytest.mark.parametrize("name", ["prod", "cumprod"])
def test_products_exact_at_zeros(lib, name):
    """The zero-aware rules (no division by zero) on every library; on dask without a compute."""
    x = np.array([[0.0, 2.0, 3.0], [1.5, 0.0, 0.0], [2.0, 0.5, 4.0]])
    op = getattr(ea, name)
    with lib.lazy():
        g = ea.grad(lambda v: ea.sum(op(v, axis=1)))(lib.asarray(x))
    _check(lib, g, ea.grad(lambda v: ea.sum(op(v, axis=1)))(x))


def test_max_ties_share_and_clip(lib):
    x = np.array([[1.0, 3.0, 3.0], [0.5, -1.0, 2.0]])
    with lib.lazy():
        g = ea.grad(lambda v: ea.sum(ea.max(v, axis=1)))(lib.asarray(x))
        c = ea.clip(lib.asarray(x), -0.5, 2.5)
        gc = ea.grad(lambda v: ea.sum(ea.clip(v, -0.5, 2.5) ** 2))(lib.asarray(x))
    _check(lib, g, np.array([[0, 0.5, 0.5], [0, 0, 1.0]]))
    _check(lib, c, np.clip(x, -0.5, 2.5))
    _check(lib, gc, ea.grad(lambda v: ea.sum(ea.clip(v, -0.5, 2.5) ** 2))(x))


def test_reductions_keep_float32(lib):
    x = _data(0.3, 2, (2, 4)).astype(np.float32)
    for name in ["max", "prod", "mean", "var", "logsumexp", "softmax"]:
        op = getattr(ea, name)
        with lib.lazy():
            y = op(lib.asarray(x), axis=-1)
            g = ea.grad(lambda v, op=op: ea.sum(op(v, axis=-1)))(lib.asarray(x))
        _check(lib, y, op(x, axis=-1), rtol=1e-5, dtype=np.float32)
        _check(lib, g, ea.grad(lambda v, op=op: ea.sum(op(v, axis=-1)))(x), rtol=1e-5, dtype=np.float32)
    i = np.arange(1, 7, dtype=np.int32)  # numpy's result dtypes: prod and cumsum of int32 in int64
    _check(lib, ea.prod(lib.asarray(i)), ea.prod(i))
    _check(lib, ea.cumsum(lib.asarray(i)), ea.cumsum(i))


# -- higher order, mixed traced/plain operands, jit's buffers ------------------------------------


def test_second_derivatives(lib):
    x = _data(0.3, 1.5, (3,), seed=7)

    def f(v):
        return ea.sum(ea.sin(v) * ea.exp(v) + ea.power(v, 3) + ea.logsumexp(v) + ea.softplus(v))

    t = _data(-1, 1, (3,), seed=8)
    with lib.lazy():
        _, h = ea.jvp(ea.grad(f), (lib.asarray(x),), (lib.asarray(t),))  # forward over reverse
        gg = ea.grad(lambda v: ea.sum(ea.grad(f)(v) ** 2))(lib.asarray(x))
    _check(lib, h, ea.jvp(ea.grad(f), (x,), (t,))[1])
    _check(lib, gg, ea.grad(lambda v: ea.sum(ea.grad(f)(v) ** 2))(x))


@pytest.mark.parametrize("name", ["divide", "power", "arctan2", "hypot", "logaddexp", "mod"])
def test_binary_one_operand_traced(lib, name):
    """Gradient in one operand with the other a plain array of the same library (and the
    Hessian-vector product through it: the derivative mixes plain and traced values)."""
    (lx, hx), (ly, hy) = DOMAIN2.get(name, ((-2, 2), (-2, 2)))
    x, y = _data(lx, hx, (3,), seed=8), _data(ly, hy, (3,), seed=9)
    op = getattr(ea, name)
    X = lib.asarray(x)

    def f(b, a=X):
        return ea.sum(op(a, b) * b)

    def f_np(b):
        return ea.sum(op(x, b) * b)

    with lib.lazy():
        g = ea.grad(f)(lib.asarray(y))
        h = ea.grad(lambda b: ea.sum(ea.grad(f)(b)))(lib.asarray(y))
    _check(lib, g, ea.grad(f_np)(y))
    _check(lib, h, ea.grad(lambda b: ea.sum(ea.grad(f_np)(b)))(y))


def test_kernels_take_jits_out_buffer(lib):
    """`einad.jit` hands numpy ufunc kernels a dying buffer as ``out=``; other libraries ignore it."""
    x, y = _data(-2, 2), _data(0.5, 2, seed=1)
    for name in ["add", "multiply", "sin", "exp", "maximum"]:
        prim = PRIMITIVES[name]
        args = (x, y) if name in BINARY else (x,)
        buf = lib.asarray(np.empty_like(x))
        got = prim.impl(*[lib.asarray(a) for a in args], out=buf)
        _check(lib, got, prim.impl(*args))


# -- one library per call ----------------------------------------------------------------------


def test_strict_array_stays_strict():
    xp = pytest.importorskip("array_api_strict")
    xp.set_array_api_strict_flags(api_version="2024.12")
    x = xp.asarray([0.5, 1.0, 2.0])
    y = _raw(ea.exp(x))
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
    x = torch.from_numpy(_data(0.3, 2, (3, 4), seed=10).astype(dtype))
    name, f, f_torch = _torch_cases(x.dtype)[case]
    g = ea.grad(f)(x)
    xt = x.clone().requires_grad_(True)
    f_torch(xt).backward()
    assert isinstance(g, torch.Tensor) and g.dtype == x.dtype, name
    torch.testing.assert_close(g, xt.grad, rtol=1e-5 if dtype == "float32" else 1e-10, atol=1e-6)


def test_jit_elementwise_and_reductions(lib):
    """A jitted chain of elementwise ops (numpy ufuncs get `out=` buffers) and reductions."""
    x = _data(0.3, 2, (3, 4), seed=11)

    def f(v):
        a = ea.exp(ea.sin(v) * 2.0) + ea.sigmoid(v) - ea.sqrt(v)
        return ea.sum(ea.logsumexp(a * ea.log(v), axis=1) + ea.max(a, axis=1) * ea.prod(v, axis=1))

    with lib.lazy():
        y = ea.jit(f)(lib.asarray(x))
        g = ea.jit(ea.grad(f))(lib.asarray(x))
    _check(lib, y, f(x), rtol=1e-12)
    _check(lib, g, ea.grad(f)(x), rtol=1e-12)


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
