"""einad: einsum-centric automatic differentiation for numpy.

Every linear operation is one `einsum` primitive whose derivatives come from
permuting its subscripts; reverse mode, forward mode and any nesting of them
are built on one small tracing core.
"""

from .core import Tensor
from .errors import EinsumError, GradcheckError
from .ops import (
    abs,
    add,
    arccos,
    arcsin,
    arctan,
    broadcast_to,
    clip,
    concatenate,
    cos,
    cosh,
    diagonal,
    divide,
    dot,
    einsum,
    exp,
    expand_dims,
    expm1,
    flip,
    inner,
    log,
    log1p,
    log_softmax,
    logsumexp,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    moveaxis,
    multiply,
    negative,
    outer,
    power,
    prod,
    relu,
    reshape,
    sigmoid,
    sign,
    sin,
    sinh,
    softmax,
    softplus,
    split,
    sqrt,
    square,
    squeeze,
    stack,
    stop_gradient,
    subtract,
    sum,
    tan,
    tanh,
    tensordot,
    trace,
    transpose,
    var,
    where,
)
from .graph import Graph, make_graph
from .testing import gradcheck
from .transforms import grad, hessian, hvp, jacfwd, jacobian, jacrev, jvp, value_and_grad, vjp

__version__ = "0.1.0"


def tensor(data, dtype=None, requires_grad: bool = False) -> Tensor:
    """Make a Tensor from array-like `data` (float64 for Python floats, as numpy).

    With ``requires_grad=True`` the tensor is a leaf of the imperative graph:
    call ``y.backward()`` on a result and read ``tensor.grad``.
    """
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


__all__ = [name for name in dir() if not name.startswith("_")]
