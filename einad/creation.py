"""Array creation with numpy's names and signatures, as Tensors: ``ea.zeros``, ``ea.arange``,
``ea.asarray``, ...

What ``jnp.zeros`` is to a JAX user and ``torch.zeros`` to a PyTorch one: the numbers are
constants (a Tensor of zeros has no derivative), except where a Tensor goes in: ``asarray`` and
``array`` of nested lists holding Tensors stack them (each element keeps its derivative, as
``jnp.asarray([x, y])`` does), ``full`` and ``full_like`` of a Tensor fill value broadcast it
(differentiable in it), and ``*_like`` of a Tensor of another library (torch, cupy) make their
Tensor in that library. numpy's ``order`` arguments are accepted and have no effect (a Tensor's
memory layout is not observable). As in PyTorch, ``requires_grad=True`` makes the new Tensor a
leaf whose ``.grad`` `Tensor.backward` fills (``ea.zeros(3, requires_grad=True)``). autoray's
``do("zeros", ..., like=t)`` runs these (`autoray_backend`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import arrays, numpy_compositions, ops
from .aliases import DTypeLike
from .core import ArrayLike, Tensor, alias
from .util import dtype_of, raw, shape_of


def _leaf(t: Tensor, requires_grad: bool) -> Tensor:
    """`t`, made a leaf of the imperative graph where asked (PyTorch's ``requires_grad=True``:
    `Tensor.backward` fills its ``.grad``; refused, as there, for other than float and complex)."""
    return t.requires_grad_() if requires_grad else t


def _holds_tensor(obj: Any) -> bool:
    if type(obj) is Tensor:
        return True
    return isinstance(obj, (list, tuple)) and any(_holds_tensor(o) for o in obj)


def _stacked(obj: Any) -> Any:
    """Nested lists of Tensors and numbers as one Tensor: stacked, so each element keeps its derivative."""
    if isinstance(obj, (list, tuple)):
        return ops.stack([_stacked(o) for o in obj])
    return obj


def array(
    obj: Any, dtype: DTypeLike | None = None, copy: Any = True, order: str = "K", ndmin: int = 0
) -> Tensor:
    """numpy.array for einad: a Tensor as a new Tensor object of the same value (``copy=True``,
    numpy's default: a write into it, ``t[i] = v``, leaves `obj` alone; its array is shared, since
    einad never writes into one), nested lists holding Tensors stacked (differentiable), anything
    else a constant Tensor (an array of another library stays in its library)."""
    if type(obj) is Tensor or _holds_tensor(obj):
        out: Tensor = _stacked(obj)
        out = out.astype(dtype) if dtype is not None else out
        if copy and out is obj:
            out = alias(obj)
    else:
        out = Tensor(obj, dtype=dtype)
    missing = int(ndmin) - out.ndim
    return ops.reshape(out, (1,) * missing + out.shape) if missing > 0 else out


def asarray(obj: Any, dtype: DTypeLike | None = None, order: str = "K", **kwargs: Any) -> Tensor:
    """numpy.asarray for einad (``jnp.asarray``): a Tensor of `dtype` as it is (traced, it stays
    differentiable), anything else as `array` makes it."""
    return array(obj, dtype, copy=False)


def zeros(shape: Any, dtype: DTypeLike = float, order: str = "C", *, requires_grad: bool = False) -> Tensor:
    """numpy.zeros, a constant Tensor (a leaf with `requires_grad`)."""
    return _leaf(Tensor(np.zeros(shape, dtype=dtype)), requires_grad)


def ones(shape: Any, dtype: DTypeLike = float, order: str = "C", *, requires_grad: bool = False) -> Tensor:
    """numpy.ones, a constant Tensor (a leaf with `requires_grad`)."""
    return _leaf(Tensor(np.ones(shape, dtype=dtype)), requires_grad)


def empty(shape: Any, dtype: DTypeLike = float, order: str = "C", *, requires_grad: bool = False) -> Tensor:
    """numpy.empty, a constant Tensor (of zeros: an einad value is never filled in afterwards)."""
    return zeros(shape, dtype, requires_grad=requires_grad)


def full(
    shape: Any,
    fill_value: Any,
    dtype: DTypeLike | None = None,
    order: str = "C",
    *,
    requires_grad: bool = False,
) -> Tensor:
    """numpy.full, a constant Tensor (a leaf with `requires_grad`); a Tensor `fill_value`
    broadcast (differentiable in it)."""
    if _holds_tensor(fill_value):
        fill = _stacked(fill_value)
        fill = fill if dtype is None else fill.astype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        return _leaf(ops.broadcast_to(fill, shape) * 1, requires_grad)  # (its own, not a view of the fill)
    return _leaf(Tensor(np.full(shape, fill_value, dtype=dtype)), requires_grad)


def eye(
    N: int,
    M: int | None = None,
    k: int = 0,
    dtype: DTypeLike = float,
    order: str = "C",
    *,
    requires_grad: bool = False,
) -> Tensor:
    """numpy.eye, a constant Tensor (a leaf with `requires_grad`)."""
    return _leaf(Tensor(np.eye(N, M, k, dtype=dtype)), requires_grad)


def identity(n: int, dtype: DTypeLike = float, *, requires_grad: bool = False) -> Tensor:
    """numpy.identity, a constant Tensor (a leaf with `requires_grad`)."""
    return eye(n, dtype=dtype, requires_grad=requires_grad)


def arange(*args: Any, dtype: DTypeLike | None = None, requires_grad: bool = False) -> Tensor:
    """numpy.arange (``start, stop, step``), a constant Tensor (a leaf with `requires_grad`)."""
    return _leaf(Tensor(np.arange(*args, dtype=dtype)), requires_grad)


def linspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: DTypeLike | None = None,
    axis: int = 0,
    *,
    requires_grad: bool = False,
) -> Any:
    """numpy.linspace, a constant Tensor (with `retstep`, the step too, as numpy's; a leaf with
    `requires_grad`); of Tensor `start` or `stop`, differentiable in them, as jnp.linspace
    (`numpy_compositions.linspace`, what ``np.linspace`` of a Tensor runs)."""
    if _holds_tensor(start) or _holds_tensor(stop):
        start, stop = (asarray(v) if _holds_tensor(v) else v for v in (start, stop))
        out = numpy_compositions.linspace(start, stop, num, endpoint, retstep, dtype, axis)
        return (_leaf(out[0], requires_grad), out[1]) if retstep else _leaf(out, requires_grad)
    if retstep:
        values, step = np.linspace(start, stop, num, endpoint, retstep=True, dtype=dtype, axis=axis)
        return _leaf(Tensor(values), requires_grad), step
    return _leaf(Tensor(np.linspace(start, stop, num, endpoint, dtype=dtype, axis=axis)), requires_grad)


def indices(dimensions: Sequence[int], dtype: Any = int, sparse: bool = False) -> Any:
    """numpy.indices, a constant Tensor (a tuple of them with `sparse`)."""
    if sparse:
        return tuple(Tensor(g) for g in np.indices(tuple(dimensions), dtype=dtype, sparse=True))
    return Tensor(np.indices(tuple(dimensions), dtype=dtype))


def full_like(
    a: ArrayLike,
    fill_value: Any,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    """numpy.full_like, a constant Tensor of `a`'s shape (or `shape`), dtype (or `dtype`) and
    library (a leaf with `requires_grad`); a Tensor `fill_value` broadcast (differentiable in it)."""
    dt = dtype_of(a) if dtype is None else dtype
    shape = shape_of(a) if shape is None else shape
    if _holds_tensor(fill_value):
        return full(shape, fill_value, dt, requires_grad=requires_grad)
    return _leaf(Tensor(arrays.asarray(raw(a), np.full(shape, fill_value, dtype=dt))), requires_grad)


def zeros_like(
    a: ArrayLike,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    """numpy.zeros_like: `full_like` of 0."""
    return full_like(a, 0, dtype, order, subok, shape, requires_grad=requires_grad)


def ones_like(
    a: ArrayLike,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    """numpy.ones_like: `full_like` of 1."""
    return full_like(a, 1, dtype, order, subok, shape, requires_grad=requires_grad)


def empty_like(
    a: ArrayLike,
    dtype: DTypeLike | None = None,
    order: str = "K",
    subok: bool = True,
    shape: Any = None,
    *,
    requires_grad: bool = False,
) -> Tensor:
    """numpy.empty_like: zeros (an einad value is never filled in afterwards)."""
    return full_like(a, 0, dtype, order, subok, shape, requires_grad=requires_grad)


__all__ = [
    "arange",
    "array",
    "asarray",
    "empty",
    "empty_like",
    "eye",
    "full",
    "full_like",
    "identity",
    "indices",
    "linspace",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
]
