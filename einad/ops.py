"""Every public operation in one namespace (what `einad.<op>` and Tensor methods call)."""

from __future__ import annotations

import numpy as np

from .core import Tensor, bind
from .rules import elementwise, structural
from .rules.einsum import (
    diagonal,
    dot,
    einsum,
    inner,
    matmul,
    moveaxis,
    outer,
    sum,
    tensordot,
    trace,
    transpose,
)
from .rules.elementwise import PRIMITIVES, public_binary, public_unary
from .rules.reductions import clip, log_softmax, logsumexp, max, mean, min, prod, softmax, var
from .rules.structural import (
    IndexUpdate,
    astype,
    broadcast_to,
    concatenate,
    expand_dims,
    flip,
    getitem,
    reshape,
    split,
    squeeze,
    stack,
    where,
)
from .util import ArrayLike, dtype_of, to_operand, wrap

add = public_binary("add")
subtract = public_binary("subtract")
multiply = public_binary("multiply")
divide = public_binary("divide")
power = public_binary("power")
maximum = public_binary("maximum")
minimum = public_binary("minimum")

negative = public_unary("negative")
exp = public_unary("exp")
log = public_unary("log")
log1p = public_unary("log1p")
expm1 = public_unary("expm1")
sin = public_unary("sin")
cos = public_unary("cos")
tan = public_unary("tan")
tanh = public_unary("tanh")
sinh = public_unary("sinh")
cosh = public_unary("cosh")
arcsin = public_unary("arcsin")
arccos = public_unary("arccos")
arctan = public_unary("arctan")
sqrt = public_unary("sqrt")
square = public_unary("square")
abs = public_unary("abs")
relu = public_unary("relu")
sigmoid = public_unary("sigmoid")
softplus = public_unary("softplus")
sign = public_unary("sign")
floor = public_unary("floor")
ceil = public_unary("ceil")
log2 = public_unary("log2")
log10 = public_unary("log10")
exp2 = public_unary("exp2")
arcsinh = public_unary("arcsinh")
arccosh = public_unary("arccosh")
arctanh = public_unary("arctanh")
arctan2 = public_binary("arctan2")
hypot = public_binary("hypot")
logaddexp = public_binary("logaddexp")
mod = public_binary("mod")
isfinite = public_unary("isfinite")
isnan = public_unary("isnan")
isinf = public_unary("isinf")
equal = public_binary("equal")
not_equal = public_binary("not_equal")
less = public_binary("less")
less_equal = public_binary("less_equal")
greater = public_binary("greater")
greater_equal = public_binary("greater_equal")


def round(x: ArrayLike, decimals: int = 0) -> Tensor:
    """Round to `decimals` decimal places (half to even), as numpy.round; its derivative is zero."""
    return wrap(bind(PRIMITIVES["round"], (to_operand(x),), {"decimals": int(decimals)}))


def conj(x: ArrayLike) -> Tensor:
    """The complex conjugate, as numpy.conj (a real `x` is returned as it is); linear, differentiable."""
    return wrap(elementwise.conj(to_operand(x)))


def real(x: ArrayLike) -> Tensor:
    """The real part, as numpy.real (a real `x` is returned as it is); linear, differentiable."""
    return wrap(elementwise.real(to_operand(x)))


def imag(x: ArrayLike) -> Tensor:
    """The imaginary part, as numpy.imag (zeros for a real `x`); linear, differentiable."""
    return wrap(elementwise.imag(to_operand(x)))


def angle(z: ArrayLike, deg: bool = False) -> Tensor:
    """The argument of complex values, as numpy.angle: ``arctan2(imag(z), real(z))``.

    Differentiable for complex `z`; for real `z` it is 0 or pi, with derivative zero.
    """
    z = to_operand(z)
    if dtype_of(z).kind == "c":
        out = bind(PRIMITIVES["arctan2"], (elementwise.imag(z), elementwise.real(z)), {})
    else:
        out = bind(PRIMITIVES["arctan2"], (0, structural.stop_gradient(z)), {})
    return wrap(out * (180 / np.pi) if deg else out)


def stop_gradient(x: ArrayLike) -> Tensor:
    """The value of `x` with a zero derivative, in every enclosing transformation.

    Use it to treat part of a computation as a constant, or to read a traced
    value as a number without differentiating through it.
    """
    return wrap(structural.stop_gradient(to_operand(x)))


__all__ = [
    "IndexUpdate",
    "abs",
    "add",
    "angle",
    "arccos",
    "arccosh",
    "arcsin",
    "arcsinh",
    "arctan",
    "arctan2",
    "arctanh",
    "astype",
    "broadcast_to",
    "ceil",
    "clip",
    "concatenate",
    "conj",
    "cos",
    "cosh",
    "diagonal",
    "divide",
    "dot",
    "einsum",
    "equal",
    "exp",
    "exp2",
    "expand_dims",
    "expm1",
    "flip",
    "floor",
    "getitem",
    "greater",
    "greater_equal",
    "hypot",
    "imag",
    "inner",
    "isfinite",
    "isinf",
    "isnan",
    "less",
    "less_equal",
    "log",
    "log1p",
    "log2",
    "log10",
    "log_softmax",
    "logaddexp",
    "logsumexp",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mod",
    "moveaxis",
    "multiply",
    "negative",
    "not_equal",
    "outer",
    "power",
    "prod",
    "real",
    "relu",
    "reshape",
    "round",
    "sigmoid",
    "sign",
    "sin",
    "sinh",
    "softmax",
    "softplus",
    "split",
    "sqrt",
    "square",
    "squeeze",
    "stack",
    "stop_gradient",
    "subtract",
    "sum",
    "tan",
    "tanh",
    "tensordot",
    "trace",
    "transpose",
    "var",
    "where",
]
