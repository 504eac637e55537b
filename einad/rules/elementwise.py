"""Elementwise operations and their derivative table.

Each entry is the operation's numpy implementation and its local derivative,
written in einad operations (so it differentiates again). One entry gives both
modes: the JVP is ``tangent * f'`` and the VJP is ``cotangent * f'`` summed back
to the operand's shape. The constants 1 and -1 mark linear entries, which skip
the multiplication.

Other array libraries: `STANDARD` gives each operation its name in the Python
array API standard (``arcsin`` is ``asin``, ``power`` is ``pow``, ``mod`` is
``remainder``), and `GENERIC` a kernel written with the library's standard
functions for the few the standard lacks (``relu``, ``sigmoid``, ``softplus``,
``exp2``). A primitive's implementation runs the numpy kernel on numpy arrays and
numbers (one type check), and the library's function otherwise, with its operands
first cast as numpy would (the result dtype is numpy's, Python numbers are weak: a
float32 tensor times 0.5 stays float32).
"""

from __future__ import annotations

import dis
import functools
import inspect
import math
import operator
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from .. import arrays
from ..core import (
    IMPERATIVE,
    Aliasing,
    ArrayLike,
    KeepRule,
    Meta,
    Primitive,
    ReverseTrace,
    Tensor,
    Trace,
    bind,
    declare,
    grad_enabled,
    record,
    ride_along,
)
from ..util import dtype_of, shape_of, to_operand, wrap
from .einsum import sum_to_shape
from .shape import astype, zeros_like
from .structural import batch_elementwise, broadcast_raw, where_raw, zeros_scalar

Kernel: TypeAlias = Callable[..., Any]
"""A numpy implementation on plain arrays."""

Partial: TypeAlias = int | Callable[..., Any]
"""A local derivative: a function of the operands and the result, or the constant 1 or -1."""

# -- stable numpy kernels -----------------------------------------------------------


def _floating(x: npt.ArrayLike) -> npt.NDArray[Any]:
    """`x` as an array; booleans and integers in the floating dtype numpy's `exp` takes them to
    (float16 for bool and uint8, float64 for int64): negating an unsigned integer wraps around."""
    x = np.asarray(x)
    if x.dtype.kind in "biu":
        return x.astype(np.exp.resolve_dtypes((x.dtype, None))[1])
    return x


def _sigmoid(x: npt.ArrayLike) -> Any:
    if type(x) is np.ndarray and x.dtype.kind == "f" and x.ndim:
        # 1 / (1 + e) where x >= 0, else e / (1 + e), with e = exp(-|x|) (exact at any magnitude):
        # six passes, in place where they can be, and the numerator picked by a maximum
        # (max(e, 1) = 1, max(e, 0) = e) rather than `np.where` (its Python dispatcher, two more
        # passes and two more arrays)
        e = np.abs(x)
        np.negative(e, out=e)
        np.exp(e, out=e)
        d = np.add(e, 1.0)
        np.maximum(e, x >= 0, out=e)
        return np.divide(e, d, out=d)
    x = _floating(x)
    if x.dtype.kind == "c":
        return 1 / (1 + np.exp(-x))
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: npt.ArrayLike) -> Any:
    x = _floating(x)
    if x.dtype.kind == "c":
        return np.log1p(np.exp(x))
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _softplus_slope(x: Any, y: Any) -> Any:
    """softplus'(x) = sigmoid(x). Of numpy values, read off the forward's value `y` =
    softplus(x) as ``-expm1(-y)`` = 1 - exp(-y): three cheap passes (a negation, an expm1 and a
    negation in place) where the stable sigmoid takes about ten, and exact at both ends (where x
    is very negative, y ~ e^x and expm1 keeps its digits; 1 at x = +inf, 0 at -inf). Of traced
    values, one operation, ``sigmoid(x)``, whose own derivative is cheap (a second order records
    one node, not three); `einad.jit`'s algebra pass reads it off the softplus in a program."""
    if type(y) is np.ndarray:
        s = np.negative(y)
        np.expm1(s, out=s)
        return np.negative(s, out=s)
    return sigmoid(x)


def _relu(x: Any) -> Any:
    return np.maximum(x, 0)


def _tie(a: Any, b: Any, z: Any, better: str) -> Any:
    """Where `a` wins against `b`: 1; where they tie: 1/2 (ties share); else 0 (in `z`'s dtype)."""
    dt = dtype_of(z)
    return astype(compare(better, a, b), dt) + 0.5 * astype(compare("equal", a, b), dt)


def _pow_dx(x: Any, y: Any, z: Any) -> Any:
    if isinstance(y, (int, float)) and not isinstance(y, bool):
        if y == 0:
            return 0
        if y == 1:
            return 1
        if y == 2:
            return 2 * x
    return y * x ** (y - 1)


def _abs_slope(x: Any, y: Any) -> Any:
    """d|x|: sign(x) for real x (0 at 0); conj(x)/|x| for complex x (JAX's convention)."""
    if dtype_of(x).kind != "c":
        return bind(PRIMITIVES["sign"], (x,), {})
    return conj(x) / where_raw(compare("equal", y, 0), 1, y)


def _reciprocal(y: Any) -> Any:
    """``1 / y``; of a Python number 0, numpy's answer (an infinity of the zero's sign), where
    Python's division raises (the slope of ``x / 0``, of a mean over an empty axis)."""
    if type(y) in (bool, int, float) and y == 0:
        return math.copysign(math.inf, y)
    if type(y) is complex and y == 0:
        return complex(math.inf, math.nan)
    return 1 / y


def _nonzero(v: Any) -> Any:
    """`v` with its zeros replaced by 1: a divisor for a branch a `where` masks at those zeros."""
    return where_raw(compare("equal", v, 0), 1, v)


_LN2 = float(np.log(2.0))
_LN10 = float(np.log(10.0))
_SINC_C1, _SINC_C3 = -(float(np.pi) ** 2) / 3, float(np.pi) ** 4 / 30  # sinc' = C1 x + C3 x**3 + ...


def _sinc_slope(x: Any, y: Any) -> Any:
    """sinc'(x) = (cos(pi x) - sinc(x)) / x, and its Taylor series where |x| < 1e-3: the quotient
    cancels there (its own derivative at 1e-9 is -pi**2, not sinc''(0) = -pi**2/3) and is 0/0 at 0."""
    small = compare("less", real(x * conj(x)), 1e-6)
    xs = where_raw(small, x, 0)  # the series at 0 where it is not taken: x * x overflows at 1e155,
    series = xs * (_SINC_C1 + _SINC_C3 * (xs * xs))  # and its zero cotangent times inf was nan
    return where_raw(small, series, (cos(np.pi * x) - y) / where_raw(small, 1, x))


def _pow_dy(x: Any, y: Any, z: Any) -> Any:
    """d(x**y)/dy = x**y log x; 0 where x = 0 (JAX's convention: 0**y is flat in y there)."""
    zero = compare("equal", x, 0)
    if type(x) in (int, float, complex):  # a Python number (2.0 ** t): weak, and so is its log
        # (numpy's log of it is a float64 scalar, which made the slope of a float32 power float64)
        ln = 0.0 if x == 0 else complex(np.log(x)) if type(x) is complex else float(np.log(x))
        return where_raw(zero, 0, z * ln)
    return where_raw(zero, 0, _times(z, log(where_raw(zero, 1, x))))


# -- the table -------------------------------------------------------------------------

# name: (numpy kernel, d/dx as a function of the operand x and the result y)
UNARY: dict[str, tuple[Kernel, Partial]] = {
    "negative": (np.negative, -1),
    "exp": (np.exp, lambda x, y: y),
    "log": (np.log, lambda x, y: 1 / x),
    "log1p": (np.log1p, lambda x, y: 1 / (1 + x)),
    "expm1": (np.expm1, lambda x, y: y + 1),
    "sin": (np.sin, lambda x, y: cos(x)),
    "cos": (np.cos, lambda x, y: -sin(x)),
    "tan": (np.tan, lambda x, y: 1 + y * y),
    "tanh": (np.tanh, lambda x, y: 1 - y * y),
    "sinh": (np.sinh, lambda x, y: cosh(x)),
    "cosh": (np.cosh, lambda x, y: sinh(x)),
    "arcsin": (np.arcsin, lambda x, y: 1 / sqrt(1 - x * x)),
    "arccos": (np.arccos, lambda x, y: -1 / sqrt(1 - x * x)),
    "arctan": (np.arctan, lambda x, y: 1 / (1 + x * x)),
    "sqrt": (np.sqrt, lambda x, y: 0.5 / y),
    "square": (np.square, lambda x, y: 2 * x),
    "abs": (np.abs, lambda x, y: _abs_slope(x, y)),  # subgradient 0 at 0
    "relu": (_relu, lambda x, y: compare("greater", x, 0)),  # a mask (SELECTS); subgradient 0 at 0
    "sigmoid": (_sigmoid, lambda x, y: y * (1 - y)),
    "softplus": (_softplus, lambda x, y: _softplus_slope(x, y)),
    "log2": (np.log2, lambda x, y: 1 / (x * _LN2)),
    "log10": (np.log10, lambda x, y: 1 / (x * _LN10)),
    "exp2": (np.exp2, lambda x, y: y * _LN2),
    "arcsinh": (np.arcsinh, lambda x, y: 1 / sqrt(x * x + 1)),
    "arccosh": (np.arccosh, lambda x, y: 1 / (sqrt(x - 1) * sqrt(x + 1))),  # the principal branch
    "arctanh": (np.arctanh, lambda x, y: 1 / (1 - x * x)),
    "sinc": (np.sinc, lambda x, y: _sinc_slope(x, y)),
}

# name: (numpy kernel, d/dx, d/dy), each a function of x, y and the result z
BINARY: dict[str, tuple[Kernel, Partial, Partial]] = {
    "add": (np.add, 1, 1),
    "subtract": (np.subtract, 1, -1),
    "multiply": (np.multiply, lambda x, y, z: y, lambda x, y, z: x),
    "divide": (np.true_divide, lambda x, y, z: _reciprocal(y), lambda x, y, z: -z / y),
    "power": (np.power, _pow_dx, _pow_dy),
    "maximum": (
        np.maximum,
        lambda x, y, z: _tie(x, y, z, "greater"),
        lambda x, y, z: _tie(y, x, z, "greater"),
    ),
    "minimum": (np.minimum, lambda x, y, z: _tie(x, y, z, "less"), lambda x, y, z: _tie(y, x, z, "less")),
    "arctan2": (np.arctan2, lambda x, y, z: y / (x * x + y * y), lambda x, y, z: -x / (x * x + y * y)),
    "hypot": (np.hypot, lambda x, y, z: x / _nonzero(z), lambda x, y, z: y / _nonzero(z)),  # 0 at (0, 0)
    # e^x / (e^x + e^y) as sigmoid(x - y), not exp(x - z): 1 and 0 at x = inf > y (not inf - inf)
    "logaddexp": (np.logaddexp, lambda x, y, z: sigmoid(x - y), lambda x, y, z: sigmoid(y - x)),
    "logaddexp2": (
        np.logaddexp2,
        lambda x, y, z: sigmoid((x - y) * _LN2),
        lambda x, y, z: sigmoid((y - x) * _LN2),
    ),
    "mod": (np.mod, 1, lambda x, y, z: -floor(x / y)),  # x - floor(x / y) * y
    # the next float after x towards y: x moved by one unit in the last place, slope 1 in x
    "nextafter": (np.nextafter, 1, lambda x, y, z: zeros_like(z)),
}

# Not differentiable: the derivative is zero wherever it exists.
CONSTANT: dict[str, Kernel] = {
    "sign": np.sign,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
    "floor_divide": np.floor_divide,  # (numpy's: x // 0 is ±inf for floats, 0 for integers)
    "spacing": np.spacing,  # the distance to the next float away from zero: a step function of x
}

# Boolean results, zero derivative: comparisons (binary) and tests (unary).
PREDICATES: dict[str, Kernel] = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "less": np.less,
    "less_equal": np.less_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "isfinite": np.isfinite,
    "isnan": np.isnan,
    "isinf": np.isinf,
    "signbit": np.signbit,  # (-0.0 and -nan too)
}

# Integer (or boolean) results of integer or boolean operands, zero derivative: the bitwise
# operations, Python's operators ``& | ^ ~ << >>`` on Tensors (floating operands are numpy's
# TypeError, as in numpy, JAX and PyTorch).
BITWISE: dict[str, Kernel] = {
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
    "invert": np.invert,
    "left_shift": np.left_shift,
    "right_shift": np.right_shift,
    "bitwise_count": np.bitwise_count,  # (the number of 1 bits of |x|, as uint8)
    "gcd": np.gcd,  # (of integers only, as numpy's)
    "lcm": np.lcm,
}


# The name of each operation in the Python array API standard (2024.12), which other
# libraries are reached by; `GENERIC` below gives the few the standard lacks.
STANDARD: dict[str, str] = {
    "negative": "negative",
    "exp": "exp",
    "log": "log",
    "log1p": "log1p",
    "expm1": "expm1",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "tanh": "tanh",
    "sinh": "sinh",
    "cosh": "cosh",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "sqrt": "sqrt",
    "square": "square",
    "abs": "abs",
    "log2": "log2",
    "log10": "log10",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
    "add": "add",
    "subtract": "subtract",
    "multiply": "multiply",
    "divide": "divide",
    "power": "pow",
    "maximum": "maximum",
    "minimum": "minimum",
    "arctan2": "atan2",
    "hypot": "hypot",
    "logaddexp": "logaddexp",
    "mod": "remainder",  # both take the sign of the divisor
    "sign": "sign",
    "floor": "floor",
    "ceil": "ceil",
    "round": "round",
    "floor_divide": "floor_divide",
    "signbit": "signbit",
    "equal": "equal",
    "not_equal": "not_equal",
    "less": "less",
    "less_equal": "less_equal",
    "greater": "greater",
    "greater_equal": "greater_equal",
    "isfinite": "isfinite",
    "isnan": "isnan",
    "isinf": "isinf",
    "bitwise_and": "bitwise_and",
    "bitwise_or": "bitwise_or",
    "bitwise_xor": "bitwise_xor",
    "invert": "bitwise_invert",
    "left_shift": "bitwise_left_shift",
    "right_shift": "bitwise_right_shift",
    "nextafter": "nextafter",
    "conj": "conj",
    "real": "real",
    "imag": "imag",
}


def _sigmoid_xp(xp: ModuleType, x: Any) -> Any:
    if dtype_of(x).kind == "c":
        return 1 / (1 + xp.exp(-x))
    e = xp.exp(-xp.abs(x))
    return xp.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus_xp(xp: ModuleType, x: Any) -> Any:
    if dtype_of(x).kind == "c":
        return xp.log1p(xp.exp(x))
    return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


def _exp2_xp(xp: ModuleType, x: Any) -> Any:
    exp2 = getattr(xp, "exp2", None)  # not in the standard; torch and dask have it
    return exp2(x) if exp2 is not None else xp.pow(arrays.asarray(x, 2, dtype_of(x)), x)


def _round_xp(xp: ModuleType, x: Any, decimals: int = 0) -> Any:
    kind = dtype_of(x).kind
    if decimals < 0 and kind in "iu":  # to tens, hundreds: numpy's method, in float64, back to x's dtype
        scale = 10.0**-decimals
        return xp.astype(xp.round(xp.astype(x, arrays.lib_dtype(xp, np.float64)) / scale) * scale, x.dtype)
    if decimals == 0 or kind not in "fc":
        return xp.round(x)
    scale = 10.0**decimals  # numpy's own method: round(x * 10**d) / 10**d
    return xp.round(x * scale) / scale


def _sinc_xp(xp: ModuleType, x: Any) -> Any:
    px = x * np.pi
    zero = px == 0
    safe = xp.where(zero, xp.ones_like(px), px)
    return xp.where(zero, xp.ones_like(px), xp.sin(safe) / safe)


def _logaddexp2_xp(xp: ModuleType, x: Any, y: Any) -> Any:
    gap = xp.where(x == y, xp.zeros_like(x), xp.abs(x - y))  # 0, not nan, for equal infinities
    return xp.maximum(x, y) + xp.log1p(xp.exp(-gap * _LN2)) / _LN2


def _spacing_xp(xp: ModuleType, x: Any) -> Any:
    """numpy.spacing: the gap to the next float away from zero (nan at infinities; negative
    for x < 0, positive at -0.0), from the standard's `nextafter`."""
    size = xp.abs(x)
    gap = xp.nextafter(size, xp.full_like(size, np.inf)) - size
    return xp.where(x < 0, -gap, gap)


def _gcd_xp(xp: ModuleType, x: Any, y: Any) -> Any:
    """numpy.gcd of integers: Euclid's algorithm on every pair at once, until every remainder
    is 0; a lazy array (dask) is not read: it runs the most rounds its integers can need
    (Fibonacci's bound, about 1.44 per bit)."""
    a, b = xp.broadcast_arrays(xp.abs(x), xp.abs(y))
    lazy = arrays.library(a) == "dask"
    for _ in range(math.ceil(1.45 * dtype_of(a).itemsize * 8) + 2):
        live = b != 0
        if not lazy and not bool(xp.any(live)):
            break
        a, b = xp.where(live, b, a), xp.where(live, a % xp.where(live, b, xp.ones_like(b)), b)
    return a


def _lcm_xp(xp: ModuleType, x: Any, y: Any) -> Any:
    """numpy.lcm of integers: ``|x| // gcd * |y|``, 0 where either is."""
    g = _gcd_xp(xp, x, y)
    return xp.where(g == 0, g, xp.abs(x) // xp.where(g == 0, xp.ones_like(g), g) * xp.abs(y))


def _bitwise_count_xp(xp: ModuleType, x: Any) -> Any:
    """numpy.bitwise_count: the 1 bits of ``|x|`` (uint8), bit by bit with the standard's shifts."""
    u8 = arrays.lib_dtype(xp, np.uint8)
    if dtype_of(x).kind == "b":
        return xp.astype(x, u8)
    size = xp.abs(x)  # (the most negative integer stays itself: its one bit, as numpy counts)
    count = xp.zeros_like(size)
    for k in range(dtype_of(x).itemsize * 8):
        count = count + ((size >> k) & 1)
    return xp.astype(count, u8)


# Kernels written with the standard's functions, for the operations it lacks (or whose
# numpy keyword arguments it lacks), as ``kernel(xp, *arrays, **params)``.
GENERIC: dict[str, Callable[..., Any]] = {
    "relu": lambda xp, x: xp.maximum(x, 0),
    "sigmoid": _sigmoid_xp,
    "softplus": _softplus_xp,
    "exp2": _exp2_xp,
    "round": _round_xp,
    "sinc": _sinc_xp,
    "logaddexp2": _logaddexp2_xp,
    "frexp_exponent": lambda xp, x: _library_kernel(xp, "frexp")(x)[1],
    "spacing": _spacing_xp,
    "gcd": _gcd_xp,
    "lcm": _lcm_xp,
    "bitwise_count": _bitwise_count_xp,
}


# What the passes know of an operation beyond its kernel and derivative (declared with it below).
ZERO_AT_ZERO = frozenset(
    {
        *("negative", "sin", "tan", "tanh", "sinh", "arcsin", "arctan", "sqrt", "square", "abs"),
        *("relu", "expm1", "log1p", "sign", "floor", "ceil", "round", "conj", "real"),
    }
)
"""Unary operations with f(0) == 0: they map a diagonal (zeros elsewhere) to a diagonal."""
SELECTS = frozenset({"relu"})
"""Unary operations whose derivative is a boolean mask: it selects the tangent (and the cotangent)
rather than multiplying it, so an infinite or nan one where the mask is False gives 0."""
COMMUTATIVE = frozenset({"add", "multiply", "equal", "not_equal"})
"""Binary operations whose operands can be exchanged without changing a bit of the result."""
MAY_VIEW = frozenset({"real", "imag", "conj"})
"""Operations whose result may be a view of the operand: numpy's real of a real array is the
array, its real and imag of a complex one are views, torch's conj is a lazy view."""


# -- turning the table into primitives -------------------------------------------------

# The types whose values the numpy kernel takes as they are: numpy arrays and scalars, Python numbers.
_NUMPY_TYPES = frozenset({np.ndarray, bool, int, float, complex, *np.sctypeDict.values()})
_NUMBERS = (bool, int, float, complex)


def _impl(name: str, kernel: Kernel) -> Kernel:
    """The primitive implementation of `name`: `kernel` on numpy values, the library's function otherwise.

    Keyword arguments pass on to the kernel (``out=`` from `einad.jit`, ``decimals`` for round).
    Arrays of another library whose dtypes need no cast (and, for two, of one shape) go
    straight to the function `_direct` holds for them, planned by `_foreign` on the first call.
    """
    if getattr(kernel, "nin", 1) == 2:

        def impl2(x: Any, y: Any, **kw: Any) -> Any:
            tx = type(x)
            if tx in _NUMPY_TYPES and type(y) in _NUMPY_TYPES:
                return kernel(x, y, **kw)
            if not kw:
                ty = type(y)
                if tx is ty:
                    fast = _direct.get((name, tx, x.dtype, y.dtype))
                    if fast is not None and x.shape == y.shape:
                        return fast(x, y)
                elif ty is float or ty is complex or ty is int:
                    fast = _weak.get((name, tx, x.dtype, ty))
                    if fast is not None:
                        return fast(x, y)
                elif tx is float or tx is complex or tx is int:
                    fast = _weak.get((name, tx, ty, y.dtype))
                    if fast is not None:
                        return fast(x, y)
            return _foreign(name, kernel, (x, y), kw)

        return impl2

    def impl1(x: Any, **kw: Any) -> Any:
        if type(x) is np.ndarray:
            return kernel(x, **kw)
        if not kw:
            fast = _direct.get((name, type(x), getattr(x, "dtype", None)))
            if fast is not None:
                return fast(x)
        return _foreign(name, kernel, (x,), kw)

    return impl1


_targets: dict[tuple[Any, ...], np.dtype[Any]] = {}
_library_kernels: dict[tuple[ModuleType, str], Kernel] = {}
_direct: dict[tuple[Any, ...], Kernel] = {}
"""(name, array type, its dtype for each operand) -> the library's function, for arrays of one
type that need no cast: a binary operation's is the array's own operator where the standard
defines one (`_OPERATORS`: the library's function itself, where array-api-compat's wrapper
would fix promotions that operands of one dtype do not have)."""

_weak: dict[tuple[Any, ...], Kernel] = {}
"""(name, array type, its dtype, number type), or (name, number type, array type, its dtype) ->
the library's function, for an array and a Python float, complex or int that the library takes
as it is (weak, in the array's dtype, as numpy computes; `_foreign` plans it). An int beside a
floating array only: beside an integer one, whether numpy takes it depends on its value
(`_int_in_range`)."""

_OPERATORS: dict[str, Kernel] = {
    "add": operator.add,
    "subtract": operator.sub,
    "multiply": operator.mul,
    "divide": operator.truediv,
    "floor_divide": operator.floordiv,
    "remainder": operator.mod,
    "pow": operator.pow,
    "equal": operator.eq,
    "not_equal": operator.ne,
    "less": operator.lt,
    "less_equal": operator.le,
    "greater": operator.gt,
    "greater_equal": operator.ge,
    "bitwise_and": operator.and_,
    "bitwise_or": operator.or_,
    "bitwise_xor": operator.xor,
    "bitwise_left_shift": operator.lshift,
    "bitwise_right_shift": operator.rshift,
}
"""The standard's binary functions that are an array's operators, by the standard's names."""


def _target(name: str, kernel: Kernel, keys: tuple[Any, ...], kw: dict[str, Any]) -> np.dtype[Any]:
    """The dtype numpy computes `name` in for operands of these dtypes (a type for a Python number).

    numpy's rules, worked out by numpy on 0-d stand-ins: Python numbers are weak (they
    take the array's dtype), and integers go to floating point for a floating result.
    The keyword arguments are part of the plan: numpy's answer may depend on them (booleans
    round to float16 with 0 decimals and are refused with 2).
    """
    key = (name, *keys, *kw.items())
    out = _targets.get(key)
    if out is None:
        probes = [k(1) if isinstance(k, type) else np.ones((), k) for k in keys]
        with np.errstate(all="ignore"):
            result = np.result_type(kernel(*probes, **kw))
        common = np.result_type(*probes)
        # a floating result of integers (or booleans) is computed in it, and so is an integer
        # one of booleans (numpy's square of booleans is int8: torch's would be int64)
        out = (
            result
            if (result.kind in "fc" and common.kind in "biu") or (result.kind in "iu" and common.kind == "b")
            else common
        )
        _targets[key] = out
    return out


_COMPLEX_ORDER = frozenset({"less", "less_equal", "greater", "greater_equal", "maximum", "minimum"})
"""Operations numpy defines on complex numbers by its order (real parts first, then imaginary),
which the standard leaves undefined (torch and array-api-strict refuse them): `_complex_order`."""


def _complex_order(xp: ModuleType, name: str, x: Any, y: Any) -> Any:
    """numpy's `name` of complex `x` and `y` with the standard's real operations: ``x < y`` where
    the real parts are less and neither imaginary part is nan, or the real parts are equal and
    the imaginary parts less (numpy's CLT; CLE, CGT, CGE alike); maximum keeps `x` where
    ``x >= y`` or `x` has a nan, else `y` (minimum with ``<=``), as numpy's loops do."""
    if name in ("maximum", "minimum"):
        keep = _complex_order(xp, "greater_equal" if name == "maximum" else "less_equal", x, y)
        return xp.where(keep | xp.isnan(xp.real(x)) | xp.isnan(xp.imag(x)), x, y)
    xr, xi, yr, yi = xp.real(x), xp.imag(x), xp.real(y), xp.imag(y)
    strict, tie = {
        "less": (operator.lt, operator.lt),
        "less_equal": (operator.lt, operator.le),
        "greater": (operator.gt, operator.gt),
        "greater_equal": (operator.gt, operator.ge),
    }[name]
    return (strict(xr, yr) & ~xp.isnan(xi) & ~xp.isnan(yi)) | ((xr == yr) & tie(xi, yi))


_BOOLEAN = {"add": "logical_or", "maximum": "logical_or", "multiply": "logical_and", "minimum": "logical_and"}
"""numpy's arithmetic of two booleans, as the standard's logical functions (the standard defines
``+``, ``*``, maximum and minimum on numbers only: array-api-strict refuses them on booleans)."""


def _boolean(xp: ModuleType, name: str, x: Any, y: Any) -> Any:
    """numpy's `name` of two boolean arrays with the standard's functions: `_BOOLEAN`'s logical
    ones, and the comparisons of False and True as of 0 and 1 (numpy orders False first)."""
    logical = _BOOLEAN.get(name)
    if logical is not None:
        return getattr(xp, logical)(x, y)
    return _library_kernel(xp, name)(xp.astype(x, xp.uint8), xp.astype(y, xp.uint8))


def _kernel_for(xp: ModuleType, name: str, target: np.dtype[Any]) -> Kernel:
    """The library's function for `name` computed in `target` (`_library_kernel`), numpy's
    where the standard defines none: complex numbers' order (`_COMPLEX_ORDER`), booleans'
    arithmetic and order (`_boolean`)."""
    if target.kind == "c" and name in _COMPLEX_ORDER:
        return functools.partial(_complex_order, xp, name)
    if target.kind == "b" and (name in _BOOLEAN or name in _COMPLEX_ORDER):
        return functools.partial(_boolean, xp, name)
    return _library_kernel(xp, name)


def _library_kernel(xp: ModuleType, name: str) -> Kernel:
    fn = _library_kernels.get((xp, name))
    if fn is None:
        generic = GENERIC.get(name)
        if generic is not None:
            fn = functools.partial(generic, xp)
        else:  # the standard's function, or where it has none (gcd, spacing) the library's own
            fn = getattr(xp, STANDARD.get(name, name), None)
            if fn is None:
                lib = xp.__name__
                raise TypeError(f"einad's {name} needs {lib}.{name}, which {lib} does not have")
        _library_kernels[(xp, name)] = fn
    return fn


_WEAK = frozenset({int, float, complex})
"""Python numbers a library of the standard's 2024.12 takes beside arrays (not bools: the
standard pairs them with boolean arrays only, numpy with any)."""


@functools.cache
def _takes_scalars(xp: ModuleType) -> bool:
    """Whether the library's namespace follows the standard's 2024.12 or later, whose binary
    elementwise functions take a Python number for one operand."""
    return str(getattr(xp, "__array_api_version__", "")) >= "2024.12"


def _int_in_range(name: str, target: np.dtype[Any], xs: tuple[Any, ...]) -> np.dtype[Any]:
    """numpy 2's rule for a Python int outside the range of the integer dtype it would be
    computed in (``uint8_array < -3``): a comparison compares the values as they are (in a
    dtype that holds both), anything else is numpy's OverflowError, where a library would cast
    the number and wrap it (torch: -3 as 253) without a word."""
    info, wide = np.iinfo(target), np.iinfo(np.int64)
    for v in xs:
        if type(v) is int and not info.min <= v <= info.max:
            if name not in PREDICATES:
                raise OverflowError(f"Python integer {v} out of bounds for {target}")
            # (int64 where it holds both: libraries lack comparisons of the wider unsigned dtypes)
            fits = target != np.uint64 and wide.min <= v <= wide.max
            return np.dtype(np.int64) if fits else np.dtype(np.float64)
    return target


def _foreign(name: str, kernel: Kernel, xs: tuple[Any, ...], kw: dict[str, Any]) -> Any:
    """`name` on operands that are not all numpy: through their library's standard function.

    The operands are cast to the dtype numpy would compute in first, and numbers
    become 0-d arrays of it on the arrays' device, so every library gives numpy's
    result dtype.
    """
    xp = arrays.namespace(*xs)
    if xp is np:  # numpy scalars, numbers, subclasses of numpy arrays
        return kernel(*xs, **kw)
    kw.pop("out", None)  # a buffer `einad.jit` offers to numpy's ufuncs
    if len(xs) > 1:
        arrays.check_broadcast(xs)
    # The common case, every operand an array of the library of one dtype: planned once, then
    # `_impl` calls the function directly (the key puts each type before its dtype: array-api-strict
    # warns when its dtypes are compared with numpy's)
    if not kw and all(arrays.is_array(v) and not arrays.is_numpy(v) for v in xs):
        dts = tuple(dtype_of(v) for v in xs)
        if all(k == _target(name, kernel, dts, kw) for k in dts):  # no cast needed
            fast = _kernel_for(xp, name, dts[0])
            if len(xs) == 2 and name not in GENERIC and fast is _library_kernel(xp, name):
                fast = _OPERATORS.get(STANDARD.get(name, name), fast)
            if all(type(v) is type(xs[0]) for v in xs):
                _direct[(name, type(xs[0])) + tuple([v.dtype for v in xs])] = fast
            return fast(*xs)
    keys = tuple(type(v) if isinstance(v, _NUMBERS) else dtype_of(v) for v in xs)
    target = _target(name, kernel, keys, kw)
    if target.kind in "iu" and int in keys:
        target = _int_in_range(name, target, xs)
    # Python numbers beside arrays of numpy's computing dtype: the standard's 2024.12 takes them
    # as they are, weak (the result keeps the arrays' dtype, numpy's too), where a 0-d array of
    # each costs its making and, on torch, a slower kernel (pow: 5x)
    if (
        not kw
        and name not in GENERIC
        and _takes_scalars(xp)
        and all(
            type(v) in _WEAK if isinstance(k, type) else k == target and not arrays.is_numpy(v)
            for v, k in zip(xs, keys)
        )
        and _kernel_for(xp, name, target) is _library_kernel(xp, name)
    ):
        fast = _OPERATORS.get(STANDARD.get(name, name), _library_kernel(xp, name))
        if len(xs) == 2 and (int not in keys or target.kind in "fc"):  # (an int: beside floats)
            x, y = xs
            _weak[
                (name, type(x), x.dtype, type(y))
                if isinstance(keys[1], type)
                else (name, type(x), type(y), y.dtype)
            ] = fast
        return fast(*xs)
    like = next(v for v in xs if arrays.is_array(v) and not arrays.is_numpy(v))
    operands = []
    for v, k in zip(xs, keys):
        if isinstance(k, type) or arrays.is_numpy(v):  # a number
            v = arrays.asarray(like, v.item() if isinstance(v, np.generic) else v, target)
        elif k != target:
            v = xp.astype(v, arrays.lib_dtype(xp, target))
        operands.append(v)
    return _kernel_for(xp, name, target)(*operands, **kw)


def _scale(g: Any, d: Partial, *args: Any) -> Any:
    """``g * d(*args)``; the markers 1 and -1 mean ``g`` and ``-g``."""
    if not callable(d):
        return g if d == 1 else -g
    return _times(g, d(*args))


def _times(g: Any, r: Any) -> Any:
    """``g * r``, `r` a local derivative: `_scale` once `r` is computed."""
    tr = type(r)
    if tr not in _NUMPY_TYPES or (isinstance(r, np.generic) and type(g) not in _NUMPY_TYPES):
        # Another library's array, or a Tensor (of one), or a numpy scalar (the slope at a numpy
        # scalar operand) beside one: the multiply primitive applies numpy's promotion on every
        # library (a boolean slope times a float32 cotangent is float32), and array-api-strict
        # refuses a numpy scalar in its own `*`. Two arrays of one library, dtype and shape
        # need none of that: the library's own multiply.
        if tr is type(g) and tr is not Tensor and r.dtype == g.dtype and r.shape == g.shape:
            return g * r
        return apply2("multiply", g, r)
    st = g.strides if type(g) is np.ndarray else None
    if (
        st  # (a 0-d cotangent multiplies a 0-d value: no cheaper than asking whether it is one)
        and st[-1] == 0  # (a broadcast constant: see _is_ones)
        and _is_ones(g)
        and type(r) is np.ndarray
        and r.shape == g.shape
        and r.dtype == g.dtype
    ):
        # A cotangent of ones (the seed of a sum): the product is `r` itself. A
        # read-only view lets it flow on without a copy, and makes any top-level
        # gradient that is still this view a fresh copy (see transforms._grad_out).
        view = r.view()
        view.flags.writeable = False
        return view
    return g * r


def _is_ones(g: Any) -> bool:
    """Whether `g` is a constant array of ones stored as one broadcast element."""
    return type(g) is np.ndarray and not any(g.strides) and g.size > 0 and bool(g.flat[0] == 1)


def _reads(d: Partial) -> tuple[int, ...]:
    """Which of its parameters a derivative entry reads, by position (from its bytecode).

    Lets a node keep only those values alive; constants read nothing. A decorated entry is read
    through to the function it wraps (``functools.wraps``), whose parameters are the real ones.
    A parameter an inner function captures (a cell variable) is read, by that function.
    """
    if not callable(d):
        return ()
    fn = inspect.unwrap(d)
    code = fn.__code__
    params = code.co_varnames[: code.co_argcount]
    loaded: set[str] = set(code.co_cellvars)
    for ins in dis.get_instructions(fn):
        if ins.opname.startswith("LOAD_FAST"):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            loaded.update(names)
    return tuple(i for i, n in enumerate(params) if n in loaded)


def _keeper(partials: Sequence[Partial]) -> KeepRule:
    """The `keep_rules` entry of an elementwise op with these partials (operands, then result)."""
    reads = [_reads(d) for d in partials]
    n = len(partials)
    answers: dict[tuple[bool, ...], tuple[tuple[bool, ...], bool]] = {}

    def keep(needed: list[bool]) -> tuple[tuple[bool, ...], bool]:
        key = tuple(needed)
        if key not in answers:  # at most 2**n masks: worked out once each
            used = {i for need, r in zip(key, reads) if need for i in r}
            answers[key] = tuple(i in used for i in range(n)), n in used
        return answers[key]

    return keep


def _select(mask: Any, t: Any) -> Any:
    """`t` where the boolean slope `mask` holds, else 0: a mask (relu's) selects rather than
    multiplies, so an infinite or nan `t` where it is False gives 0, not nan (JAX's and
    PyTorch's relu: ``relu(sqrt(x) - 1)`` has tangent 0 at x = 0, where sqrt's is infinite)."""
    return where_raw(mask, t, zeros_scalar(t))


def _unary_vjp(d: Partial, mask: bool = False) -> Any:
    """The VJP of a unary entry with derivative `d`: ``g * d(x, y)``, multiplied here where
    both are numpy arrays and `g` is not a broadcast constant (the eager hot path: no
    `_times` call; `_times` passes a seed of ones on as a view of the derivative). A `mask`
    entry (`SELECTS`) selects instead (`_select`)."""
    if not callable(d):
        return lambda g, y, vals, p, needed: [g if d == 1 else -g]
    if mask:
        return lambda g, y, vals, p, needed: [_select(d(vals[0], y), g)]

    def vjp(g: Any, y: Any, vals: Sequence[Any], p: Any, needed: list[bool]) -> list[Any]:
        r = d(vals[0], y)
        if type(r) is np.ndarray and type(g) is np.ndarray:
            st = g.strides
            if st and st[-1] != 0:
                return [g * r]
        return [_times(g, r)]

    return vjp


def _unary_jvp(d: Partial, mask: bool = False) -> Any:
    """The JVP of a unary entry with derivative `d`: ``t * d(x, y)`` (a real tangent for a real
    result), multiplied here where both are numpy arrays and `t` is not a broadcast constant
    (every forward operation on numpy values: no `_scale`, `_times` and `_real_if` calls). A
    `mask` entry (`SELECTS`) selects instead (`_select`)."""
    if not callable(d):
        return lambda ts, y, vals, p: _real_if(y, ts[0] if d == 1 else -ts[0])
    if mask:
        return lambda ts, y, vals, p: _select(d(vals[0], y), ts[0])

    def jvp(ts: list[Any], y: Any, vals: Sequence[Any], p: Any) -> Any:
        t = ts[0]
        r = d(vals[0], y)
        if type(r) is np.ndarray and type(t) is np.ndarray and type(y) is np.ndarray:
            st = t.strides
            if st and st[-1] != 0:
                out = t * r
                return real(out) if out.dtype.kind == "c" and y.dtype.kind != "c" else out
        return _real_if(y, _times(t, r))

    return jvp


def _declare(prim: Primitive, kernel: Kernel, **rules: Any) -> Primitive:
    """Declare the elementwise primitive `prim` whose numpy kernel is `kernel`, with `rules`
    (its derivative rules, or ``zero_derivative=True``), and the properties of the tables above."""
    name = prim.name
    nin = 2 if name in BINARY else getattr(kernel, "nin", 1)
    aliasing: Aliasing = "may_view" if name in MAY_VIEW else "fresh"
    return declare(
        prim,
        batch=ride_along if nin == 1 else batch_elementwise,
        aliasing=aliasing,
        elementwise=True,
        linear=name in ("negative", "add", "subtract", "conj", "real", "imag"),
        commutative=name in COMMUTATIVE,
        zero_at_zero=name in ZERO_AT_ZERO,
        accepts_out=isinstance(kernel, np.ufunc),
        **rules,
    )


def _unary_prim(name: str, kernel: Kernel, d: Partial) -> Primitive:
    return _declare(
        Primitive(name, _impl(name, kernel)),
        kernel,
        vjp=_unary_vjp(d, name in SELECTS),
        jvp=_unary_jvp(d, name in SELECTS),
        keep=_keeper((d,)),
    )


def _real_if(ans: Any, tangent: Any) -> Any:
    """A real-valued result has a real tangent (``abs`` of a complex value, say)."""
    if dtype_of(tangent).kind == "c" and dtype_of(ans).kind != "c":
        return real(tangent)
    return tangent


def _boxed(*vals: Any) -> tuple[Any, ...]:
    """`vals` with plain arrays of libraries other than numpy boxed as constant Tensors.

    For a derivative mixing a traced operand with a plain one: array-api-strict's
    operators refuse einad's Tensors (``plain * traced`` raises where numpy, torch and
    dask hand the operation to the Tensor), so the plain one is made a Tensor first.
    """
    return tuple(
        [
            v if type(v) in _LOCAL else wrap(v) if arrays.is_array(v) and not arrays.is_numpy(v) else v
            for v in vals
        ]
    )


def _lib_scalars(*vals: Any) -> tuple[Any, ...]:
    """`vals` with numpy scalars made 0-d arrays (same dtype) of the library of a plain array of
    another library among them: the derivative rules combine them with that array, and
    array-api-strict's operators refuse a numpy scalar (while numpy's scalar on the left of one
    of its arrays turns the array into a numpy array)."""
    if not any(isinstance(v, np.generic) for v in vals):
        return vals
    like = next(
        (v for v in vals if type(v) not in _LOCAL and arrays.is_array(v) and not arrays.is_numpy(v)), None
    )
    if like is None:
        return vals
    return tuple([arrays.asarray(like, v, v.dtype) if isinstance(v, np.generic) else v for v in vals])


_LOCAL = frozenset({Tensor, Meta}) | _NUMPY_TYPES
"""What `_boxed` passes on without asking which library it is of (each of the derivative rules
of a binary operation with one traced operand asks: a numpy operand next to a traced one)."""


def _plus(a: Any, b: Any) -> Any:
    """``a + b``: through the add primitive unless `a` is numpy's (a plain array of
    array-api-strict refuses a Tensor on its right)."""
    return a + b if type(a) in _NUMPY_TYPES else apply2("add", a, b)


_SHAPED = frozenset({np.ndarray, Meta, Tensor, *np.sctypeDict.values()})
"""Values whose ``shape`` and ``dtype`` attributes are numpy's (numpy arrays and scalars, Metas,
Tensors): shapes and dtypes compared directly, without `shape_of` and `dtype_of`."""


def _binary_prim(name: str, kernel: Kernel, dx: Partial, dy: Partial) -> Primitive:
    prim = Primitive(name, _impl(name, kernel))
    partials = (dx, dy)
    # each partial as (function, 0), or (None, its marker 1 or -1)
    terms = tuple((None, d) if isinstance(d, int) else (d, 0) for d in partials)

    def vjp(g: Any, z: Any, vals: Sequence[Any], p: Any, needed: list[bool]) -> list[Any]:
        x, y = vals
        if not (type(x) in _LOCAL and type(y) in _LOCAL and type(z) in _LOCAL):
            # (a plain value of another library among them)
            x, y, z = (
                _boxed(x, y, z) if (type(x) is Tensor) is not (type(y) is Tensor) else _lib_scalars(x, y, z)
            )
        out: list[Any] = []
        plain = False  # whether `g` is a numpy array that is not a broadcast constant (see _times)
        if type(g) is np.ndarray:
            st = g.strides
            plain = bool(st) and st[-1] != 0
        for v, need, (d, sign) in zip(vals, needed, terms):
            if not need:
                out.append(None)
                continue
            if d is None:  # a linear entry
                r = g if sign == 1 else -g
            else:
                r = d(x, y, z)
                r = g * r if plain and type(r) is np.ndarray else _times(g, r)
            if (
                (type(r) is type(v) and type(r) not in _NUMBERS_SET)
                or (type(r) in _SHAPED and type(v) in _SHAPED)
            ) and (r.shape == v.shape and r.dtype == v.dtype):
                # the common case (numpy arrays and scalars, under enclosing transformations too;
                # two arrays of another library): nothing to sum or cast
                out.append(r)
            else:
                out.append(sum_to_shape(r, shape_of(v), dtype_of(v)))
        return out

    def jvp(ts: list[Any], z: Any, vals: Sequence[Any], p: Any) -> Any:
        x, y = vals
        if not (type(x) in _LOCAL and type(y) in _LOCAL and type(z) in _LOCAL):
            # (a plain value of another library among them)
            x, y, z = (
                _boxed(x, y, z) if (type(x) is Tensor) is not (type(y) is Tensor) else _lib_scalars(x, y, z)
            )
        out: Any = None
        for t, (d, sign) in zip(ts, terms):
            if t is None:
                continue
            if d is None:  # a linear entry
                term = t if sign == 1 else -t
            else:  # `_scale`, inline: a numpy tangent that is not a broadcast constant multiplies here
                r = d(x, y, z)
                st = t.strides if type(t) is np.ndarray else None
                term = t * r if st and st[-1] != 0 and type(r) in _NUMPY_TYPES else _times(t, r)
            out = term if out is None else _plus(out, term)
        if out is None:
            return None
        if type(out) in _SHAPED and type(z) in _SHAPED:  # (numpy arrays, Tensors: shapes read once)
            if out.shape != z.shape:
                out = broadcast_raw(out, z.shape)
            if out.dtype != z.dtype:  # (a linear entry passes a float32 tangent on as it is, where
                out = astype(out, z.dtype)  # a float64 operand without one made the result float64)
        else:
            if shape_of(out) != shape_of(z):
                out = broadcast_raw(out, shape_of(z))
            if dtype_of(out) != dtype_of(z):
                out = astype(out, dtype_of(z))
        return out

    return _declare(prim, kernel, vjp=vjp, jvp=jvp, keep=_keeper(partials))


PRIMITIVES: dict[str, Primitive] = {}
for _name, (_kernel, _d) in UNARY.items():
    PRIMITIVES[_name] = _unary_prim(_name, _kernel, _d)
for _name, (_kernel, _dx, _dy) in BINARY.items():
    PRIMITIVES[_name] = _binary_prim(_name, _kernel, _dx, _dy)
for _name, _kernel in {**CONSTANT, **PREDICATES, **BITWISE}.items():
    PRIMITIVES[_name] = _declare(Primitive(_name, _impl(_name, _kernel)), _kernel, zero_derivative=True)


def _frexp_exponent(x: Any, **kw: Any) -> Any:
    """The integer exponent numpy.frexp gives (int32; 0 at 0, inf and nan)."""
    return np.frexp(x)[1]


# Not an operation of the table (no einad.<name>): the part of numpy.frexp that is a step
# function, from which `numpy_compositions` writes frexp (its mantissa is ``x * 2**-e``).
PRIMITIVES["frexp_exponent"] = _declare(
    Primitive("frexp_exponent", _impl("frexp_exponent", _frexp_exponent)),
    _frexp_exponent,
    zero_derivative=True,
)


_multiply = PRIMITIVES["multiply"]


def compare(name: str, x: Any, y: Any) -> Any:
    """The comparison `name` (a PREDICATES entry) as an operation (internal: raw in, raw out)."""
    return bind(PRIMITIVES[name], (x, y), {})


# -- complex values: conj and real are R-linear, so each is its own JVP and VJP ----------------

_no_values = lambda needed: ((False,), False)
conj_p = PRIMITIVES["conj"] = _declare(
    Primitive("conj", _impl("conj", np.conj)),
    np.conj,
    vjp=lambda g, ans, vals, p, needed: [conj(g)],
    jvp=lambda ts, ans, vals, p: conj(ts[0]),
    keep=_no_values,
)
real_p = PRIMITIVES["real"] = _declare(
    Primitive("real", _impl("real", np.real)),
    np.real,
    vjp=lambda g, ans, vals, p, needed: [astype(g, dtype_of(vals[0]))],
    jvp=lambda ts, ans, vals, p: real(ts[0]),
    keep=_no_values,
)


imag_p = PRIMITIVES["imag"] = _declare(
    Primitive("imag", _impl("imag", np.imag)),
    np.imag,
    # Re(u t) = g Im(t) for every t: u = -i g (the bilinear pairing, JAX's convention)
    vjp=lambda g, ans, vals, p, needed: [astype(g, dtype_of(vals[0])) * -1j],
    jvp=lambda ts, ans, vals, p: imag(ts[0]),
    keep=_no_values,
)


def imag(x: Any) -> Any:
    """Imaginary part (internal); of a real value, zeros with no derivative."""
    if dtype_of(x).kind != "c":
        return zeros_like(x)
    return bind(imag_p, (x,), {})


def conj(x: Any) -> Any:
    """Complex conjugate (internal: a raw array in gives a raw array out)."""
    return x if dtype_of(x).kind != "c" else bind(conj_p, (x,), {})


def real(x: Any) -> Any:
    """Real part (internal: a raw array in gives a raw array out)."""
    return x if dtype_of(x).kind != "c" else bind(real_p, (x,), {})


def _raw1(name: str) -> Callable[[Any], Any]:
    prim = PRIMITIVES[name]
    kernel = UNARY[name][0] if name in UNARY else CONSTANT[name]

    lane = name in UNARY

    def op(x: Any) -> Any:
        if type(x) is np.ndarray:  # what `bind` would do with a plain array, without its calls
            return kernel(x)
        if lane and type(x) is Tensor and x._node is not None:
            trace = x._trace
            if (
                trace is not None
                and not trace.dead
                and (trace.__class__ is ReverseTrace or (trace is IMPERATIVE and grad_enabled()))
            ):
                t = _recorded1(name, x, trace)
                if t is not None:
                    return t
        return bind(prim, (x,), {})

    return op


# Internal versions: a raw array in gives a raw array out (used by the rules).
# (Declared, so the table above can use them before they are made.)
exp: Callable[[Any], Any]
log: Callable[[Any], Any]
sin: Callable[[Any], Any]
cos: Callable[[Any], Any]
sinh: Callable[[Any], Any]
cosh: Callable[[Any], Any]
sqrt: Callable[[Any], Any]
sigmoid: Callable[[Any], Any]
floor: Callable[[Any], Any]
exp, log, sin, cos, sinh, cosh, sqrt, sigmoid, floor = (
    _raw1(n) for n in ("exp", "log", "sin", "cos", "sinh", "cosh", "sqrt", "sigmoid", "floor")
)


# One-line docstrings of the public operations that are not numpy functions, or not differentiable.
_DOCS = {
    "relu": "Elementwise max(x, 0); differentiable (subgradient 0 at 0).",
    "sigmoid": "Elementwise logistic sigmoid 1 / (1 + exp(-x)), stable at any magnitude; differentiable.",
    "softplus": "Elementwise log(1 + exp(x)), stable at any magnitude; differentiable.",
    "abs": "Elementwise absolute value, as numpy.abs; differentiable (subgradient 0 at 0).",
    "maximum": "Elementwise maximum with numpy broadcasting; tied operands share the gradient.",
    "minimum": "Elementwise minimum with numpy broadcasting; tied operands share the gradient.",
    "nextafter": "The next float after x towards y, as numpy.nextafter; derivative 1 in x, 0 in y.",
}
for _name in CONSTANT:
    _DOCS[_name] = f"Elementwise {_name}, as numpy.{_name}; its derivative is zero."
for _name in PREDICATES:
    _DOCS[_name] = f"Elementwise {_name}, as numpy.{_name}: a boolean result, not differentiable."
for _name in BITWISE:
    _DOCS[_name] = f"Elementwise {_name} of integers or booleans, as numpy.{_name}; not differentiable."
_DOCS["gcd"] = "Elementwise greatest common divisor of integers, as numpy.gcd; not differentiable."
_DOCS["lcm"] = "Elementwise least common multiple of integers, as numpy.lcm; not differentiable."
_DOCS["frexp_exponent"] = "The integer exponent of numpy.frexp; not differentiable (internal)."


# -- the eager fast lane (issue 25) ------------------------------------------------------------
# First-order reverse mode on numpy values is what eager code runs most: a live reverse trace
# (`grad`, `value_and_grad`, `vjp`, or the imperative graph while gradients are on) recording
# an operation whose operands are its own Tensors holding numpy values, or plain numbers and
# arrays. The public operations of the table's differentiable entries record those directly:
# the numpy kernel, then the node (`core.record`) with the values the VJP reads, worked out once
# per primitive here instead of through `bind`, `process`, the implementation and the keep rule.
# Values of another library take the same lane through the implementation (`_impl`'s direct
# call); everything else (forward mode, vmap, jit, constants of another library) binds.


_NUMBERS_SET = frozenset(_NUMBERS)
"""The constant operands the lane takes as they are (what `to_operand` returns unchanged), with
numeric numpy arrays."""


def _recorded1(name: str, x: Tensor, trace: Trace) -> Tensor | None:
    """The unary `name` (a `UNARY` entry) of `x` (a Tensor with a node of `trace`, live)
    recorded in `trace`, as its `process` would: the kernel on a numpy value, the implementation
    on another library's array; on a value traced by an enclosing transformation (a second
    order), that value's result (the lane again for a reverse trace, else `bind`). None where a
    traced value is not a reverse trace's."""
    v = x._value
    if type(v) in _NUMPY_TYPES:
        out = _KERNEL1[name](v)
    elif type(v) is Tensor and trace.__class__ is ReverseTrace:
        t = v._trace
        out = None
        if t is not None and t.__class__ is ReverseTrace and v._node is not None and not t.dead:
            out = _recorded1(name, v, t)
        if out is None:
            out = bind(PRIMITIVES[name], (v,), {})
    elif type(v) is not Tensor:  # another library's array: its implementation
        out = PRIMITIVES[name].impl(v)
    else:
        return None
    keep_x, keep_y = _KEEP1[name]
    return record(out, trace, PRIMITIVES[name], {}, (x._node,), [True], (v,), out, keep_x, keep_y)


def _recorded2(name: str, x: Any, y: Any, trace: Trace) -> Tensor | None:
    """The binary `name` (a `BINARY` entry) of `x` and `y` (Tensors of `trace`, live, or
    constants: numbers and numeric numpy arrays) recorded in `trace`, as its `process` would (see
    `_recorded1`); None where the lane does not take them (another trace's Tensor among them,
    nothing to record, a constant array of another library)."""
    xv: Any
    yv: Any
    if type(x) is Tensor:
        xv, px, ok = x._value, x._node, x._trace is trace
    else:
        xv, px = x, None
        ok = type(x) in _NUMBERS_SET or (type(x) is np.ndarray and x.dtype.kind in "biufc")
    if type(y) is Tensor:
        yv, py, ok = y._value, y._node, ok and y._trace is trace
    else:
        yv, py = y, None
        ok = ok and (type(y) in _NUMBERS_SET or (type(y) is np.ndarray and y.dtype.kind in "biufc"))
    if not ok:
        return None
    keep_both, keep_x, keep_y = _KEEP2[name]
    if px is not None and py is not None:
        needed, (kept, ka) = [True, True], keep_both
    elif px is not None:
        needed, (kept, ka) = [True, False], keep_x
    elif py is not None:
        needed, (kept, ka) = [False, True], keep_y
    else:
        return None
    if type(xv) in _NUMPY_TYPES and type(yv) in _NUMPY_TYPES:
        out = _KERNEL2[name](xv, yv)
    elif (type(xv) is Tensor or type(yv) is Tensor) and trace.__class__ is ReverseTrace:
        # a second order: the values are traced by an enclosing transformation
        t = xv._trace if type(xv) is Tensor else yv._trace
        out = None
        if t is not None and t.__class__ is ReverseTrace and not t.dead:
            out = _recorded2(name, xv, yv, t)
        if out is None:
            out = bind(PRIMITIVES[name], (xv, yv), {})
    elif type(xv) is not Tensor and type(yv) is not Tensor:  # another library's arrays
        out = PRIMITIVES[name].impl(xv, yv)
    else:
        return None
    return record(out, trace, PRIMITIVES[name], {}, (px, py), needed, (xv, yv), out, kept, ka)


_KERNEL1: dict[str, Kernel] = {n: k for n, (k, _) in UNARY.items()}
_KERNEL2: dict[str, Kernel] = {n: k for n, (k, _, _) in BINARY.items()}
_KEEP1: dict[str, tuple[Any, bool]] = {n: _keeper((d,))([True]) for n, (_, d) in UNARY.items()}
_KEEP2: dict[str, tuple[Any, Any, Any]] = {
    n: (k([True, True]), k([True, False]), k([False, True]))
    for n, k in ((n, _keeper((dx, dy))) for n, (_, dx, dy) in BINARY.items())
}
"""The lane's kernels and keep masks (operands kept, result kept), per needed mask."""


def apply2(name: str, x: Any, y: Any) -> Any:
    """The binary `name` (a `BINARY` entry) as the rules apply it (raw in, raw out): the lane
    where `x` or `y` is a Tensor it takes, else `bind`."""
    trace = x._trace if type(x) is Tensor else y._trace if type(y) is Tensor else None
    if (  # (the lane's traces, inline: a live reverse trace, or the imperative graph recording)
        trace is not None
        and not trace.dead
        and (trace.__class__ is ReverseTrace or (trace is IMPERATIVE and grad_enabled()))
    ):
        t = _recorded2(name, x, y, trace)
        if t is not None:
            return t
    return bind(PRIMITIVES[name], (x, y), {})


def public_unary(name: str) -> Callable[[ArrayLike], Tensor]:
    """The public one-operand operation `name`, taking any array-like and returning a Tensor."""
    prim = PRIMITIVES[name]
    lane = name in UNARY
    if lane:
        kernel = UNARY[name][0]
        keep_x, keep_y = _KEEP1[name]

    def op(x: ArrayLike) -> Tensor:
        if type(x) is Tensor:
            trace = x._trace
            if (
                lane
                and trace is not None
                and x._node is not None
                and not trace.dead
                and (trace.__class__ is ReverseTrace or (trace is IMPERATIVE and grad_enabled()))
            ):
                v = x._value
                if type(v) in _NUMPY_TYPES:  # first order: inline (every eager operation comes here)
                    out = kernel(v)
                    return record(out, trace, prim, {}, (x._node,), [True], (v,), out, keep_x, keep_y)
                t = _recorded1(name, x, trace)  # a second order
                if t is not None:
                    return t
        if type(x) is not Tensor or x._trace is None:  # (a traced Tensor is its own operand)
            x = to_operand(x)
        out = bind(prim, (x,), {})
        return out if type(out) is Tensor else wrap(out)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = _DOCS.get(name, f"Elementwise {name}, as numpy.{name}; differentiable.")
    return op


def public_binary(name: str) -> Callable[[ArrayLike, ArrayLike], Tensor]:
    """The public two-operand operation `name`, with numpy broadcasting."""
    prim = PRIMITIVES[name]
    lane = name in BINARY
    if lane:
        kernel = BINARY[name][0]
        keep_both, keep_x, keep_y = _KEEP2[name]

    def op(x: ArrayLike, y: ArrayLike) -> Tensor:
        trace = x._trace if type(x) is Tensor else y._trace if type(y) is Tensor else None
        if (
            lane
            and trace is not None
            and not trace.dead
            and (trace.__class__ is ReverseTrace or (trace is IMPERATIVE and grad_enabled()))
        ):
            xv: Any
            yv: Any
            if type(x) is Tensor:
                xv, px, ok = x._value, x._node, x._trace is trace
            else:
                xv, px = x, None
                ok = type(x) in _NUMBERS_SET or (type(x) is np.ndarray and x.dtype.kind in "biufc")
            if type(y) is Tensor:
                yv, py, ok = y._value, y._node, ok and y._trace is trace
            else:
                yv, py = y, None
                ok = ok and (type(y) in _NUMBERS_SET or (type(y) is np.ndarray and y.dtype.kind in "biufc"))
            if ok and type(xv) in _NUMPY_TYPES and type(yv) in _NUMPY_TYPES:
                # first order: inline (every eager operation comes here)
                if px is not None and py is not None:
                    needed, (kept, ka) = [True, True], keep_both
                elif px is not None:
                    needed, (kept, ka) = [True, False], keep_x
                elif py is not None:
                    needed, (kept, ka) = [False, True], keep_y
                else:
                    needed = []
                if needed:
                    out = kernel(xv, yv)
                    return record(out, trace, prim, {}, (px, py), needed, (xv, yv), out, kept, ka)
            elif ok:
                t = _recorded2(name, x, y, trace)  # a second order
                if t is not None:
                    return t
        if type(x) is not Tensor or x._trace is None:  # (a traced Tensor is its own operand)
            x = to_operand(x)
        if type(y) is not Tensor or y._trace is None:
            y = to_operand(y)
        out = bind(prim, (x, y), {})
        return out if type(out) is Tensor else wrap(out)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = _DOCS.get(
        name, f"Elementwise {name} with numpy broadcasting; differentiable in both operands."
    )
    return op


TABLE: tuple[str, ...] = (*UNARY, *BINARY, *CONSTANT, *PREDICATES, *BITWISE)
"""Every operation of the table, each exported as ``einad.<name>`` (einad.ops)."""


def public(name: str) -> Callable[..., Tensor]:
    """The public operation `name` of the table: one operand or two, as its kernel takes."""
    binary = name in BINARY or getattr({**CONSTANT, **PREDICATES, **BITWISE}.get(name), "nin", 1) == 2
    return public_binary(name) if binary else public_unary(name)


frexp_exponent = public_unary("frexp_exponent")
"""numpy.frexp's exponent of an array-like, a Tensor (for `numpy_compositions.frexp`)."""
