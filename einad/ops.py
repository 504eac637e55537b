"""Every public operation in one namespace (what `einad.<op>` and Tensor methods call)."""

from __future__ import annotations

from . import structural
from .core import Tensor
from .einsum import (
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
from .elementwise import public_binary, public_unary
from .reductions import clip, log_softmax, logsumexp, max, mean, min, prod, softmax, var
from .structural import (
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
from .util import ArrayLike, to_operand, wrap

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
isfinite = public_unary("isfinite")
equal = public_binary("equal")
not_equal = public_binary("not_equal")
less = public_binary("less")
less_equal = public_binary("less_equal")
greater = public_binary("greater")
greater_equal = public_binary("greater_equal")


def stop_gradient(x: ArrayLike) -> Tensor:
    """The value of `x` with a zero derivative, in every enclosing transformation.

    Use it to treat part of a computation as a constant, or to read a traced
    value as a number without differentiating through it.
    """
    return wrap(structural.stop_gradient(to_operand(x)))


__all__ = [
    "abs",
    "add",
    "arccos",
    "arcsin",
    "arctan",
    "astype",
    "broadcast_to",
    "ceil",
    "clip",
    "concatenate",
    "cos",
    "cosh",
    "diagonal",
    "divide",
    "dot",
    "einsum",
    "equal",
    "exp",
    "expand_dims",
    "expm1",
    "flip",
    "floor",
    "getitem",
    "greater",
    "greater_equal",
    "inner",
    "isfinite",
    "less",
    "less_equal",
    "log",
    "log1p",
    "log_softmax",
    "logsumexp",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "moveaxis",
    "multiply",
    "negative",
    "not_equal",
    "outer",
    "power",
    "prod",
    "relu",
    "reshape",
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
