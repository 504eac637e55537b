"""Every public operation in one namespace (what `einad.<op>` and Tensor methods call)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import FunctionType
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from .aliases import Axis, DTypeLike
from .core import ArrayLike, Tensor, _unbox_bool, bind, exported, layout_view, view
from .rules import elementwise
from .rules.elementwise import PRIMITIVES, TABLE, public
from .rules.indexing import IndexUpdate, argmax, argmin, argsort, repeat, sort, take
from .rules.linear import (
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
from .rules.reductions import (
    clip,
    cumprod,
    cumsum,
    log_softmax,
    logsumexp,
    max,
    mean,
    min,
    prod,
    softmax,
    std,
    var,
)
from .rules.shape import astype, astype_p, expand_dims, flip, getitem, squeeze
from .rules.shape import ravel as _ravel
from .rules.shape import reshape as _reshape
from .rules.shape import stop_gradient as _stop_gradient
from .rules.structural import broadcast_to, concatenate, split, stack, where
from .strides import Strides
from .util import dtype_of, normalize_axis, to_operand, wrap

# One public function per entry of the elementwise table (`ea.exp`, `ea.add`, ...): adding an
# entry exports it, and numpy's function of the same name dispatches to it (numpy_api).
ELEMENTWISE: dict[str, Callable[..., Tensor]] = {name: public(name) for name in TABLE}
globals().update(ELEMENTWISE)
if TYPE_CHECKING:  # what type checkers see of the names made above

    def __getattr__(name: str) -> Callable[..., Tensor]: ...


def round(x: ArrayLike, decimals: int = 0) -> Tensor:
    """Round to `decimals` decimal places (half to even), as numpy.round; its derivative is zero."""
    return wrap(bind(PRIMITIVES["round"], (to_operand(x),), {"decimals": int(decimals)}))


ELEMENTWISE["round"] = round  # the table's entry, with numpy's `decimals`


def conj(x: ArrayLike) -> Tensor:
    """The complex conjugate, as numpy.conj (a real `x` is returned as it is); linear, differentiable."""
    return wrap(elementwise.conj(to_operand(x)))


def real(x: ArrayLike) -> Tensor:
    """The real part, as numpy.real (a real `x` is returned as it is); linear, differentiable.
    Of a Tensor, a view, as numpy's: ``z.real[i] = v`` sets the real parts of `z`'s elements."""
    out = wrap(elementwise.real(to_operand(x)))
    if type(x) is not Tensor:
        return out
    if dtype_of(x).kind != "c":  # (numpy's x.real of a real x: its own elements)
        return layout_view(out, x, real, lambda r: r, lambda strides: strides)
    return layout_view(out, x, real, lambda r: r + 1j * imag(x), _part)


def imag(x: ArrayLike) -> Tensor:
    """The imaginary part, as numpy.imag (zeros for a real `x`); linear, differentiable.
    Of a complex Tensor, a view, as numpy's: ``z.imag[i] = v`` sets the imaginary parts."""
    out = wrap(elementwise.imag(to_operand(x)))
    if type(x) is not Tensor or dtype_of(x).kind != "c":
        return out
    return layout_view(out, x, imag, lambda r: real(x) + 1j * r, _part)


def _part(strides: Strides) -> Strides:
    """The strides of a complex array's real or imaginary part, in elements of the part's dtype
    (half the complex one's: numpy's ``z.real`` steps over the imaginary parts)."""
    return tuple([2 * s for s in strides])


def angle(z: ArrayLike, deg: bool = False) -> Tensor:
    """The argument of complex values, as numpy.angle: ``arctan2(imag(z), real(z))``.

    Differentiable for complex `z`; for real `z` it is 0 or pi, with derivative zero.
    """
    z = to_operand(z)
    if dtype_of(z).kind == "c":
        out = bind(PRIMITIVES["arctan2"], (elementwise.imag(z), elementwise.real(z)), {})
    else:
        out = bind(PRIMITIVES["arctan2"], (0, _stop_gradient(z)), {})
    return wrap(out * (180 / np.pi) if deg else out)


def reshape(x: ArrayLike, shape: int | Sequence[int], order: str = "C") -> Tensor:
    """The same elements in a new shape, as numpy.reshape; one dimension may be -1.

    ``order="F"`` reads and places the elements in Fortran (column-major) order, as numpy's
    and JAX's: a C-order reshape between two reversals of the axes (transposing einsums).
    JAX's ``"A"`` (by memory layout, which a Tensor does not expose) is not offered.

    Raises:
        ValueError: If the size does not fit `shape`, or `order` is not 'C', 'F' or 'A'.
        NotImplementedError: For ``order="A"``.
    """
    if order == "C":
        return _reshape(x, shape)
    if order == "A":
        raise NotImplementedError("reshape with order='A' is not offered (as in JAX): use 'C' or 'F'")
    if order != "F":
        raise ValueError(f"reshape's order is one of 'C', 'F' or 'A', got {order!r}")
    x = to_operand(x)
    dims = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    flipped = _reshape(transpose(x), dims[::-1])  # (transpose reverses the axes by default)
    return transpose(flipped)


def ravel(x: ArrayLike, order: str = "C") -> Tensor:
    """The elements as a 1-D Tensor, as numpy.ravel (``order="F"``: column by column): of a
    Tensor that lies in that order, a view (numpy's rule; `rules.shape.ravel`)."""
    if order == "C":
        return _ravel(x)
    if order == "F":
        return _ravel(transpose(x))
    return reshape(x, -1, order)  # (its message for another order)


def stop_gradient(x: ArrayLike) -> Tensor:
    """The value of `x` with a zero derivative, in every enclosing transformation.

    Use it to treat part of a computation as a constant, or to read a traced
    value as a number without differentiating through it.
    """
    return wrap(_stop_gradient(to_operand(x)))


__all__ = [
    "IndexUpdate",
    "angle",
    "astype",
    "broadcast_to",
    "clip",
    "concatenate",
    "conj",
    "diagonal",
    "dot",
    "einsum",
    "expand_dims",
    "flip",
    "getitem",
    "imag",
    "inner",
    "log_softmax",
    "logsumexp",
    "matmul",
    "max",
    "mean",
    "min",
    "moveaxis",
    "outer",
    "prod",
    "ravel",
    "real",
    "reshape",
    "softmax",
    "split",
    "squeeze",
    "stack",
    "stop_gradient",
    "sum",
    "tensordot",
    "trace",
    "transpose",
    "var",
    "where",
]
__all__ += list(ELEMENTWISE)

# The operations a rules module exports itself (`core.export`): each is ``einad.<name>`` too.
EXPORTED: dict[str, Callable[..., Tensor]] = {name: fn for name, (fn, _) in exported.items()}
globals().update(EXPORTED)
__all__ += list(EXPORTED)


# -- Tensor's methods -----------------------------------------------------------------------
# `einad.core` defines Tensor below every operation, so its operators and methods are attached
# here, in the public layer, once at import (core declares them for type checkers only).


class _TensorMethods(Tensor):  # a subclass only so that `self` type-checks as a Tensor
    @property
    def T(self) -> Tensor:
        """The transpose (axes reversed), as `einad.transpose`."""
        return transpose(self)

    @property
    def real(self) -> Tensor:
        """The real part, as `einad.real` (numpy's ``ndarray.real``)."""
        return real(self)

    @property
    def imag(self) -> Tensor:
        """The imaginary part, as `einad.imag` (numpy's ``ndarray.imag``)."""
        return imag(self)

    @property
    def mT(self) -> Tensor:
        """The last two axes interchanged (each matrix of a stack transposed), as numpy's, JAX's
        and PyTorch's ``mT``; ValueError for fewer than 2 dimensions, as numpy's."""
        if self.ndim < 2:
            raise ValueError(f"mT (matrix transpose) needs at least 2 dimensions, got {self.ndim}")
        return self.swapaxes(-2, -1)

    def conj(self) -> Tensor:
        """The complex conjugate, as `einad.conj` (numpy's ``ndarray.conj``)."""
        return conj(self)

    def conjugate(self) -> Tensor:
        """numpy's other name for `conj`."""
        return conj(self)

    def take(self, indices: ArrayLike, axis: int | None = None) -> Tensor:
        """Elements at `indices` along `axis` (of the flattened tensor by default), as
        `einad.take` and numpy's ``ndarray.take`` (PyTorch's ``take`` is the default)."""
        return take(self, indices, axis=axis)

    def detach(self) -> Tensor:
        """A new Tensor with this value (sharing its memory) and no derivative.

        Outside transformations it is a constant that requires no grad, as
        PyTorch's ``detach``; on a traced value it is `einad.stop_gradient`.
        """
        return stop_gradient(self)

    # -- operators ----------------------------------------------------------

    def __add__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["add"](self, other)

    def __radd__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["add"](other, self)

    def __sub__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["subtract"](self, other)

    def __rsub__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["subtract"](other, self)

    def __mul__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["multiply"](self, other)

    def __rmul__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["multiply"](other, self)

    def __truediv__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["divide"](self, other)

    def __rtruediv__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["divide"](other, self)

    def __pow__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["power"](self, other)

    def __rpow__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["power"](other, self)

    def __mod__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["mod"](self, other)

    def __rmod__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["mod"](other, self)

    def __floordiv__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["floor_divide"](self, other)

    def __rfloordiv__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["floor_divide"](other, self)

    def __divmod__(self, other: ArrayLike) -> tuple[Tensor, Tensor]:
        return ELEMENTWISE["floor_divide"](self, other), ELEMENTWISE["mod"](self, other)

    def __rdivmod__(self, other: ArrayLike) -> tuple[Tensor, Tensor]:
        return ELEMENTWISE["floor_divide"](other, self), ELEMENTWISE["mod"](other, self)

    def __round__(self, ndigits: int | None = None) -> Tensor:
        return round(self, 0 if ndigits is None else ndigits)

    def __matmul__(self, other: ArrayLike) -> Tensor:
        return matmul(self, other)

    def __rmatmul__(self, other: ArrayLike) -> Tensor:
        return matmul(other, self)

    # The bitwise operators: integers and booleans (``&`` of two masks is their logical and),
    # not differentiable, as numpy's

    def __and__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["bitwise_and"](self, other)

    def __rand__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["bitwise_and"](other, self)

    def __or__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["bitwise_or"](self, other)

    def __ror__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["bitwise_or"](other, self)

    def __xor__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["bitwise_xor"](self, other)

    def __rxor__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["bitwise_xor"](other, self)

    def __lshift__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["left_shift"](self, other)

    def __rlshift__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["left_shift"](other, self)

    def __rshift__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["right_shift"](self, other)

    def __rrshift__(self, other: ArrayLike) -> Tensor:
        return ELEMENTWISE["right_shift"](other, self)

    def __invert__(self) -> Tensor:
        return ELEMENTWISE["invert"](self)

    # In place, as PyTorch: on a leaf that requires grad only under `no_grad`, where the

    # tensor takes the new value and stays the same leaf. Traced by a transformation,

    # `x -= y` rebinds the name to ``x - y`` (functional, as in JAX): so not always `self` (PYI034).

    def __iadd__(self, other: ArrayLike) -> Tensor:
        return self._inplace(ELEMENTWISE["add"], other, "+=")

    def __isub__(self, other: ArrayLike) -> Tensor:
        return self._inplace(ELEMENTWISE["subtract"], other, "-=")

    def __imul__(self, other: ArrayLike) -> Tensor:
        return self._inplace(ELEMENTWISE["multiply"], other, "*=")

    def __itruediv__(self, other: ArrayLike) -> Tensor:
        return self._inplace(ELEMENTWISE["divide"], other, "/=")

    def __ipow__(self, other: ArrayLike) -> Tensor:
        return self._inplace(ELEMENTWISE["power"], other, "**=")

    def __imatmul__(self, other: ArrayLike) -> Tensor:
        return self._inplace(matmul, other, "@=")

    def __neg__(self) -> Tensor:
        return ELEMENTWISE["negative"](self)

    def __abs__(self) -> Tensor:
        return ELEMENTWISE["abs"](self)

    def __getitem__(self, index: Any) -> Tensor:
        return view(getitem(self, index), self, index)  # (basic indexing: a view, which writes through)

    # Comparisons are not differentiable: numpy booleans, or a traced boolean

    # Tensor where a staging trace (jit) or vmap must see the operation.

    def __lt__(self, other: ArrayLike) -> Any:
        return _unbox_bool(ELEMENTWISE["less"](self, other))

    def __le__(self, other: ArrayLike) -> Any:
        return _unbox_bool(ELEMENTWISE["less_equal"](self, other))

    def __gt__(self, other: ArrayLike) -> Any:
        return _unbox_bool(ELEMENTWISE["greater"](self, other))

    def __ge__(self, other: ArrayLike) -> Any:
        return _unbox_bool(ELEMENTWISE["greater_equal"](self, other))

    # ``t == None`` is False and ``t != None`` True (Python's identity fallback, as in PyTorch and
    # JAX), so that idioms such as ``if x == None`` and ``x in (None, ...)`` work on Tensors

    def __eq__(self, other: object) -> Any:
        if other is None:
            return NotImplemented
        return _unbox_bool(ELEMENTWISE["equal"](self, cast("ArrayLike", other)))

    def __ne__(self, other: object) -> Any:
        if other is None:
            return NotImplemented
        return _unbox_bool(ELEMENTWISE["not_equal"](self, cast("ArrayLike", other)))

    # -- methods mirroring the functions -------------------------------------

    def sum(
        self,
        axis: Axis = None,
        keepdims: bool = False,
        *,
        dtype: DTypeLike | None = None,
        initial: ArrayLike | None = None,
        where: ArrayLike | None = None,
    ) -> Tensor:
        """Sum over `axis` (all by default), as `einad.sum`."""
        return sum(self, axis=axis, keepdims=keepdims, dtype=dtype, initial=initial, where=where)

    def mean(
        self,
        axis: Axis = None,
        keepdims: bool = False,
        *,
        dtype: DTypeLike | None = None,
        where: ArrayLike | None = None,
    ) -> Tensor:
        """Arithmetic mean along `axis`, as `einad.mean`."""
        return mean(self, axis=axis, keepdims=keepdims, dtype=dtype, where=where)

    def var(
        self,
        axis: Axis = None,
        ddof: float = 0,
        keepdims: bool = False,
        *,
        dtype: DTypeLike | None = None,
        where: ArrayLike | None = None,
        mean: ArrayLike | None = None,
        correction: float | None = None,
    ) -> Tensor:
        """Variance along `axis`, as `einad.var`."""
        return var(
            self,
            axis=axis,
            ddof=ddof,
            keepdims=keepdims,
            dtype=dtype,
            where=where,
            mean=mean,
            correction=correction,
        )

    def max(
        self,
        axis: Axis = None,
        keepdims: bool = False,
        *,
        initial: ArrayLike | None = None,
        where: ArrayLike | None = None,
    ) -> Tensor:
        """Largest element along `axis`, as `einad.max`."""
        return max(self, axis=axis, keepdims=keepdims, initial=initial, where=where)

    def min(
        self,
        axis: Axis = None,
        keepdims: bool = False,
        *,
        initial: ArrayLike | None = None,
        where: ArrayLike | None = None,
    ) -> Tensor:
        """Smallest element along `axis`, as `einad.min`."""
        return min(self, axis=axis, keepdims=keepdims, initial=initial, where=where)

    def prod(
        self,
        axis: Axis = None,
        keepdims: bool = False,
        *,
        dtype: DTypeLike | None = None,
        initial: ArrayLike | None = None,
        where: ArrayLike | None = None,
    ) -> Tensor:
        """Product along `axis`, as `einad.prod`."""
        return prod(self, axis=axis, keepdims=keepdims, dtype=dtype, initial=initial, where=where)

    def any(self, axis: Axis = None, keepdims: bool = False, *, where: ArrayLike | None = None) -> Tensor:
        """Whether any element along `axis` is nonzero, as `einad.any` (a boolean Tensor)."""
        return EXPORTED["any"](self, axis=axis, keepdims=keepdims, where=where)

    def all(self, axis: Axis = None, keepdims: bool = False, *, where: ArrayLike | None = None) -> Tensor:
        """Whether every element along `axis` is nonzero, as `einad.all` (a boolean Tensor)."""
        return EXPORTED["all"](self, axis=axis, keepdims=keepdims, where=where)

    def reshape(self, *shape: int | Sequence[int], order: str = "C") -> Tensor:
        """The same elements in a new shape, given as ``reshape(2, 3)`` or ``reshape((2, 3))``;
        ``order`` as `einad.reshape`'s."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        dims = cast("tuple[int, ...]", shape)  # ints now, else reshape raises
        return _reshape(self, dims) if order == "C" else reshape(self, dims, order)

    def transpose(self, *axes: int | Sequence[int]) -> Tensor:
        """Permuted axes, given as ``transpose(1, 0)`` or ``transpose((1, 0))``; reversed by default
        (and for ``transpose(None)``, as numpy's)."""
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = () if axes[0] is None else tuple(axes[0])
        return transpose(self, cast("tuple[int, ...]", axes) or None)  # ints now, else transpose raises

    def dot(self, other: ArrayLike) -> Tensor:
        """The dot product with `other`, as `einad.dot`."""
        return dot(self, other)

    def exp(self) -> Tensor:
        """The elementwise exponential, as `einad.exp`."""
        return ELEMENTWISE["exp"](self)

    def log(self) -> Tensor:
        """The elementwise natural logarithm, as `einad.log`."""
        return ELEMENTWISE["log"](self)

    def squeeze(self, axis: Axis = None) -> Tensor:
        """Drop size-1 axes (all of them by default), as `einad.squeeze`."""
        return squeeze(self, axis)

    def std(
        self,
        axis: Axis = None,
        ddof: float = 0,
        keepdims: bool = False,
        *,
        dtype: DTypeLike | None = None,
        where: ArrayLike | None = None,
        mean: ArrayLike | None = None,
        correction: float | None = None,
    ) -> Tensor:
        """Standard deviation along `axis`, as `einad.std` (numpy's ``ddof=0``; PyTorch's default is 1)."""
        return std(
            self,
            axis=axis,
            ddof=ddof,
            keepdims=keepdims,
            dtype=dtype,
            where=where,
            mean=mean,
            correction=correction,
        )

    def cumsum(self, axis: int | None = None, *, dtype: DTypeLike | None = None) -> Tensor:
        """Cumulative sum along `axis` (of the flattened tensor by default), as `einad.cumsum`."""
        return cumsum(self, axis, dtype=dtype)

    def cumprod(self, axis: int | None = None, *, dtype: DTypeLike | None = None) -> Tensor:
        """Cumulative product along `axis` (of the flattened tensor by default), as `einad.cumprod`."""
        return cumprod(self, axis, dtype=dtype)

    def clip(self, min: ArrayLike | None = None, max: ArrayLike | None = None) -> Tensor:  # noqa: A002
        """Values limited to ``[min, max]`` (either may be None), as `einad.clip`."""
        return clip(self, min, max)

    def clamp(self, min: ArrayLike | None = None, max: ArrayLike | None = None) -> Tensor:  # noqa: A002
        """PyTorch's name for `clip`."""
        return clip(self, min, max)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index of the largest element along `axis` (of the flattened tensor by default), the
        first one on ties, as `einad.argmax`; an integer tensor, not differentiable."""
        return argmax(self, axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        """Index of the smallest element along `axis`, as `einad.argmin`."""
        return argmin(self, axis, keepdims)

    def argsort(self, axis: int | None = -1) -> Tensor:
        """The indices that sort the tensor along `axis`, as `einad.argsort`."""
        return argsort(self, axis)

    def sort(self, axis: int | None = -1) -> Tensor:
        """The elements sorted along `axis`, as `einad.sort`: a new Tensor (JAX's method; numpy's
        sorts in place and returns None)."""
        return sort(self, axis)

    def repeat(self, repeats: int | Sequence[int], axis: int | None = None) -> Tensor:
        """Each element repeated, as `einad.repeat` (numpy's ``ndarray.repeat``)."""
        return repeat(self, repeats, axis)

    def ptp(self, axis: Axis = None, keepdims: bool = False) -> Tensor:
        """The range ``max - min`` along `axis`, as numpy's ``ptp``."""
        return max(self, axis=axis, keepdims=keepdims) - min(self, axis=axis, keepdims=keepdims)

    def block_until_ready(self) -> Tensor:
        """The Tensor itself (JAX's method): einad computes as it is called, so a value is ready
        when it is returned (a lazy array's library computes on conversion)."""
        return self

    def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
        """The diagonal (an einsum), as `einad.diagonal`."""
        return diagonal(self, offset, axis1, axis2)

    def trace(
        self, offset: int = 0, axis1: int = 0, axis2: int = 1, *, dtype: DTypeLike | None = None
    ) -> Tensor:
        """The sum of the diagonal, as `einad.trace`."""
        return trace(self, offset, axis1, axis2, dtype=dtype)

    def round(self, decimals: int = 0) -> Tensor:
        """Rounded to `decimals` decimal places (half to even), as `einad.round`."""
        return round(self, decimals)

    def pow(self, exponent: ArrayLike) -> Tensor:
        """``self ** exponent``, as PyTorch's ``pow``."""
        return ELEMENTWISE["power"](self, exponent)

    # -- PyTorch's and numpy's everyday shape methods ------------------------------------------

    def clone(self) -> Tensor:
        """A copy with its own array, differentiable (the gradient flows to this tensor), as PyTorch's."""
        return wrap(bind(astype_p, (to_operand(self),), {"dtype": self.dtype}))

    def copy(self) -> Tensor:
        """numpy's name for `clone`."""
        return self.clone()

    def view(self, *shape: int | Sequence[int]) -> Tensor:
        """The same elements in a new shape, as PyTorch's ``view`` (and `reshape`): a view, a
        write into which reaches this tensor (and the other way round), where numpy's reshape
        is one (`reshape`'s rule; elsewhere, a reshape of a transpose say, a tensor of its own,
        where PyTorch raises)."""
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer, Sequence)):
            raise TypeError(
                f"view() takes a shape; einad does not reinterpret memory as another dtype "
                f"({shape[0]!r}): use astype for a conversion"
            )
        return self.reshape(*shape)

    def unsqueeze(self, dim: int) -> Tensor:
        """A size-1 axis inserted at `dim` (negative counts from the end of the result), as PyTorch's."""
        return expand_dims(self, dim)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """Axes `start_dim` to `end_dim` merged into one, as PyTorch's; all of them by default
        (numpy's ``flatten()``). A 0-d tensor gives shape ``(1,)``. A tensor of its own, as
        numpy's copy (not a view, as `reshape` and `ravel` are)."""
        shape = self.shape
        if not shape:
            normalize_axis(start_dim, 1, "start_dim")
            normalize_axis(end_dim, 1, "end_dim")
            return _reshape(self, (1,), view=False)  # (a new tensor: its shape is new)
        s = normalize_axis(start_dim, len(shape), "start_dim")
        e = normalize_axis(end_dim, len(shape), "end_dim")
        if s > e:
            raise ValueError(f"flatten() has start_dim {start_dim} after end_dim {end_dim}")
        out = _reshape(self, (*shape[:s], math.prod(shape[s : e + 1]), *shape[e + 1 :]), view=False)
        return out.clone() if out is self else out  # (a copy, as numpy's, of the same shape too)

    def ravel(self, order: str = "C") -> Tensor:
        """The elements as a 1-D tensor, as numpy's ``ravel`` (``order="F"``: column by column)."""
        return ravel(self, order)

    def swapaxes(self, axis1: int, axis2: int) -> Tensor:
        """Axes `axis1` and `axis2` interchanged, as numpy's (and PyTorch's) ``swapaxes``."""
        perm = list(range(self.ndim))
        a, b = normalize_axis(axis1, self.ndim), normalize_axis(axis2, self.ndim)
        perm[a], perm[b] = perm[b], perm[a]
        return transpose(self, tuple(perm))

    def numel(self) -> int:
        """The number of elements (`size`), as PyTorch's ``numel()``."""
        return self.size

    def dim(self) -> int:
        """The number of dimensions (`ndim`), as PyTorch's ``dim()``."""
        return self.ndim

    # -- in place, as PyTorch's: a new array for the tensor, never written into ---------------

    def zero_(self) -> Tensor:
        """Set every element to 0 in place and return the tensor, as PyTorch's ``zero_``.

        The tensor gets a new array: the one it had (perhaps shared with a
        detached tensor) is never written into. On a leaf that requires grad
        only under `einad.no_grad` (else RuntimeError); on a computed tensor it
        is recorded (its gradient is then zero), and inside a transformation
        traced, as ``t[...] = 0`` is.
        """
        return self._inplace_method(0, "zero_()")

    def fill_(self, value: ArrayLike) -> Tensor:
        """Set every element to `value` in place and return the tensor, as PyTorch's ``fill_``
        (differentiable in `value`); as `zero_`, it never writes into an array."""
        return self._inplace_method(value, "fill_()")

    def fill(self, value: ArrayLike) -> None:
        """Set every element to `value` in place, as numpy's ``ndarray.fill`` (which returns None);
        `fill_` is PyTorch's, returning the tensor."""
        self._inplace_method(value, "fill()")

    def _inplace_method(self, value: ArrayLike, name: str) -> Tensor:
        self._assign(..., value, name)  # (as ``t[...] = value``: recorded, or traced inside a transformation)
        return self

    @property
    def at(self) -> IndexUpdate:
        """Functional updates, as JAX's: ``x.at[idx].set(v)``, ``x.at[idx].add(v)`` return new tensors.

        The index may be computed inside `einad.jit` or mapped by `vmap` (a scatter then).
        """
        return IndexUpdate(self)

    def astype(self, dtype: DTypeLike) -> Tensor:
        """The value cast to `dtype`; differentiable (the cotangent is cast back)."""
        return wrap(astype(self, dtype))


def _elementwise_method(name: str) -> Callable[[Tensor], Tensor]:
    op = ELEMENTWISE[name]

    def method(self: Tensor) -> Tensor:
        return op(self)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The elementwise ``{name}``, as `einad.{name}` (differentiable)."
    return method


# the one-argument operations that PyTorch or numpy also have as methods
TENSOR_ELEMENTWISE = (
    "abs", "ceil", "cos", "cosh", "expm1", "floor", "log10", "log1p", "log2", "relu", "sigmoid",
    "sign", "sin", "sinh", "sqrt", "square", "tan", "tanh",
)  # fmt: skip
for _name in TENSOR_ELEMENTWISE:
    setattr(Tensor, _name, _elementwise_method(_name))

for _name, _method in vars(_TensorMethods).items():
    if isinstance(_method, (FunctionType, property)):  # not what Python puts in a class body
        setattr(Tensor, _name, _method)

# ``x + y`` and its kind call the public operation itself, one call less per operation on the
# eager path (issue 25); the methods above say what they do, for readers and type checkers.
for _name, _op in (
    ("add", "add"),
    ("sub", "subtract"),
    ("mul", "multiply"),
    ("truediv", "divide"),
    ("pow", "power"),
):
    setattr(Tensor, f"__{_name}__", ELEMENTWISE[_op])
