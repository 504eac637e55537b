"""einad: einsum-centric automatic differentiation for numpy.

Every linear operation is one `einsum` primitive whose derivatives come from
permuting its subscripts; reverse mode, forward mode and any nesting of them
are built on one small tracing core.
"""

import importlib as _importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from . import (
    array_api,  # (also gives Tensors their __array_namespace__)
    fft,
    numpy_api,  # noqa: F401  (fills the table numpy's functions on Tensors dispatch to)
    special,
)
from . import autoray_backend as _autoray_backend
from . import einops_backend as _einops_backend  # noqa: F401  (einops finds it: einops.rearrange(t, ...))
from . import post_import as _post_import
from .aliases import DTypeLike
from .control import cond, fori_loop, scan, switch, while_loop
from .core import ArrayLike, Tensor, enable_grad, no_grad
from .creation import (
    arange,
    array,
    asarray,
    empty,
    empty_like,
    eye,
    full,
    full_like,
    identity,
    indices,
    linspace,
    ones,
    ones_like,
    zeros,
    zeros_like,
)
from .errors import EinsumError, GradcheckError, TracerError
from .expression import ContractExpression, contract_expression, contract_path
from .flatten import ravel_pytree
from .ops import ELEMENTWISE as _ELEMENTWISE
from .ops import EXPORTED as _EXPORTED
from .ops import (
    angle,
    broadcast_to,
    clip,
    concatenate,
    conj,
    diagonal,
    dot,
    einsum,
    expand_dims,
    flip,
    imag,
    inner,
    log_softmax,
    logsumexp,
    matmul,
    max,
    mean,
    min,
    moveaxis,
    outer,
    prod,
    ravel,
    real,
    reshape,
    softmax,
    split,
    squeeze,
    stack,
    stop_gradient,
    sum,
    tensordot,
    trace,
    transpose,
    var,
    where,
)
from .program import Graph, make_graph
from .pytree import (
    register_pytree_node,
    tree_all,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_reduce,
    tree_structure,
    tree_unflatten,
)
from .rules import linalg
from .rules.indexing import (
    argmax,
    argmin,
    argsort,
    diff,
    pad,
    repeat,
    roll,
    sort,
    take,
    take_along_axis,
    tile,
)
from .rules.reductions import cumprod, cumsum, std
from .testing import gradcheck
from .transforms.autodiff import FLOAT0 as float0
from .transforms.autodiff import (
    grad,
    hessian,
    hvp,
    jacfwd,
    jacobian,
    jacrev,
    jvp,
    linearize,
    value_and_grad,
    vjp,
)
from .transforms.batching import vmap
from .transforms.custom import checkpoint, custom_jvp, custom_vjp
from .transforms.jit import Program, jit

globals().update(_ELEMENTWISE)  # ea.exp, ea.add, ...: one per entry of the elementwise table
globals().update(_EXPORTED)  # the operations a rules module exports itself (core.export)
if TYPE_CHECKING:  # what type checkers see of them

    def __getattr__(name: str) -> Callable[..., Tensor]: ...


__version__ = "0.1.0"


_T = TypeVar("_T")


def block_until_ready(x: _T) -> _T:
    """`x` itself (``jax.block_until_ready``, for timing loops written for JAX): einad computes
    as it is called, so a value is ready when it is returned; any pytree passes through."""
    return x


def tensor(data: ArrayLike, dtype: DTypeLike | None = None, requires_grad: bool = False) -> Tensor:
    """Make a Tensor from array-like `data` (float64 for Python floats, as numpy).

    With ``requires_grad=True`` the tensor is a leaf of the imperative graph:
    call ``y.backward()`` on a result and read ``tensor.grad``. The derivative
    transformations (`einad.grad`, `einad.vjp`, ...) take such a tensor as its
    value and return numpy arrays; `einad.jit` records into the imperative graph,
    so ``ea.jit(loss)(w).backward()`` works.

    Args:
        data: A number, a nested list, a numpy array or a Tensor. The value is
            copied (as ``torch.tensor`` does): the Tensor never shares memory with
            `data`, and in-place updates (``w -= ...`` under `no_grad`) give it a
            new array, never writing into one.
        dtype: The numpy dtype; numpy's choice for `data` by default.
        requires_grad: Make the tensor a leaf whose gradient `Tensor.backward` accumulates.
            Needs a floating-point or complex dtype.

    Returns:
        A new Tensor holding `data`.

    Raises:
        TypeError: If `data` is not numeric, or `requires_grad` is set for an integer dtype.
        TracerError: If `data` is a value traced by a transformation (inside `grad`, `jit`,
            `vmap`, ...): a constant made of it would cut its derivative or freeze its value.
            Use the value itself, or `einad.stop_gradient` for a value without derivative.
    """
    return Tensor(data, dtype=dtype, requires_grad=requires_grad)


__all__ = [
    "ContractExpression",
    "EinsumError",
    "GradcheckError",
    "Graph",
    "Program",
    "Tensor",
    "TracerError",
    "angle",
    "arange",
    "argmax",
    "argmin",
    "argsort",
    "array",
    "array_api",
    "asarray",
    "block_until_ready",
    "broadcast_to",
    "checkpoint",
    "clip",
    "concatenate",
    "cond",
    "conj",
    "contract_expression",
    "contract_path",
    "cumprod",
    "cumsum",
    "custom_jvp",
    "custom_vjp",
    "diagonal",
    "diff",
    "dot",
    "einsum",
    "empty",
    "empty_like",
    "enable_grad",
    "expand_dims",
    "eye",
    "fft",
    "flip",
    "float0",
    "fori_loop",
    "full",
    "full_like",
    "grad",
    "gradcheck",
    "hessian",
    "hvp",
    "identity",
    "imag",
    "indices",
    "inner",
    "jacfwd",
    "jacobian",
    "jacrev",
    "jit",
    "jvp",
    "linalg",
    "linearize",
    "linspace",
    "log_softmax",
    "logsumexp",
    "make_graph",
    "matmul",
    "max",
    "mean",
    "min",
    "moveaxis",
    "no_grad",
    "ones",
    "ones_like",
    "outer",
    "pad",
    "prod",
    "ravel",
    "ravel_pytree",
    "real",
    "register_pytree_node",
    "repeat",
    "reshape",
    "roll",
    "scan",
    "softmax",
    "sort",
    "special",
    "split",
    "squeeze",
    "stack",
    "std",
    "stop_gradient",
    "sum",
    "switch",
    "take",
    "take_along_axis",
    "tensor",
    "tensordot",
    "tile",
    "trace",
    "transpose",
    "tree_all",
    "tree_flatten",
    "tree_leaves",
    "tree_map",
    "tree_reduce",
    "tree_structure",
    "tree_unflatten",
    "value_and_grad",
    "var",
    "vjp",
    "vmap",
    "where",
    "while_loop",
    "zeros",
    "zeros_like",
]
__all__ += list(_ELEMENTWISE)  # the elementwise table's operations
__all__ += list(_EXPORTED)  # and those the rules modules export (core.export)
# quimb and cotengra reach einad through autoray (when it is installed), which finds these names here
_autoray_backend.register(__all__)


def _plug_into_quimb() -> None:
    """quimb's `TNOptimizer` takes ``autodiff_backend="einad"``: einad/quimb_optimizer.py, which
    imports quimb, imported once quimb's optimizer module is (this package's own submodule, by
    name: quimb is an optional dependency that importing einad never loads)."""
    _importlib.import_module(f"{__name__}.quimb_optimizer")


# whether quimb's optimizer module is loaded before einad or after
_post_import.after_import("quimb.tensor.optimize", _plug_into_quimb)


def __dir__() -> list[str]:
    """``dir(einad)``: the public names, each documented in docs/api.md (the submodules are
    the implementation: importable, not listed)."""
    return sorted(__all__)
