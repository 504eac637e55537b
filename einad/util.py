"""Small helpers shared by the operation modules: type aliases, shapes, dtypes, conversion."""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
from numpy.exceptions import AxisError

from . import arrays
from .aliases import Shape
from .arrays import is_array, np_dtype
from .core import ArrayLike, Staged, Tensor, Value, _box, as_array, strip


def shape_of(x: Any) -> Shape:
    """Shape of an array, Tensor, numpy scalar or Python number."""
    if type(x) is np.ndarray:
        shape: Shape = x.shape
        return shape
    s = getattr(x, "shape", None)
    return tuple(s) if s is not None else np.shape(x)


def dtype_of(x: Any) -> np.dtype[Any]:
    """Dtype of an array, Tensor, numpy scalar or Python number (numpy's promotion for numbers)."""
    if type(x) is np.ndarray or type(x) is Tensor:  # (a Tensor's dtype is numpy's already)
        return x.dtype
    d = getattr(x, "dtype", None)
    if d is None:
        return np.result_type(x)
    return d if isinstance(d, np.dtype) else np_dtype(d)  # (a numpy scalar's: no np_dtype call)


def result_dtype(*values: Any) -> np.dtype[Any]:
    """numpy's result dtype for operands `values` (arrays, Tensors, dtypes, numbers), Python numbers
    weak as in numpy 2: a float32 array and 0 give float32, not the float64 of ``dtype_of(0)``."""
    return np.result_type(*[v if type(v) in (bool, int, float, complex) else dtype_of(v) for v in values])


_foreign_types: set[type] = set()
"""Array types of other libraries whose arrays are always numeric (checked once, then trusted)."""


def _numeric_only(t: type) -> bool:
    """Whether every array of type `t` is numeric: true of the array API libraries einad
    supports (torch, dask, CuPy, array-api-strict have no string or object dtypes)."""
    return t.__module__.split(".")[0] in ("torch", "array_api_strict", "cupy")


def to_operand(x: ArrayLike) -> Value:
    """What an operation works on: a traced Tensor, or a plain numeric array.

    Python numbers stay Python numbers (numpy then keeps float32 float32).
    """
    if type(x) is Tensor:
        return x if x._trace is not None else x._value
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biufc":
            raise TypeError(f"einad works on numeric arrays; got an array of dtype {x.dtype}")
        # a subclass (quimb's qarray, np.matrix) as a plain ndarray, as np.asarray gives it
        return x if type(x) is np.ndarray else x.view(np.ndarray)
    if type(x) in _foreign_types:  # another library's array, of a type seen before
        # (a torch tensor's own requires_grad: einad differentiates; torch would record einad's ops)
        return arrays.detached(x)  # type: ignore[no-any-return]
    if isinstance(x, (bool, int, float, complex)):
        return x
    if isinstance(x, np.generic):
        if not isinstance(x, (np.number, np.bool_)) or np.dtype(type(x)).kind not in "biufc":
            raise TypeError(f"einad works on numbers; got {type(x).__name__}")
        return x
    if is_array(x):  # another library's array (torch, dask, ...)
        foreign: Any = x
        if np_dtype(foreign.dtype).kind not in "biufc":
            raise TypeError(f"einad works on numeric arrays; got an array of dtype {foreign.dtype}")
        if not hasattr(foreign, "concrete") and _numeric_only(type(foreign)):
            _foreign_types.add(type(foreign))
        return arrays.detached(foreign)  # type: ignore[no-any-return]
    return as_array(x)


def to_array_operand(x: ArrayLike, like: Any = None) -> Value:
    """Like `to_operand`, but Python numbers become 0-d arrays (for ops that need a shape):
    numpy's, or those of `like`'s library and device when `like` (any value) is given."""
    x = to_operand(x)
    if isinstance(x, (bool, int, float, complex)):
        if like is not None and arrays.xp_of(raw(like)) is not np:
            return lib_array(like, np.asarray(x))  # type: ignore[no-any-return]
        return np.asarray(x)
    return x


def foreign(values: Any) -> Any:
    """The first of `values` over an array of a library other than numpy, or None: the `like`
    of `to_array_operand` for the Python numbers among them (``stack([t, 0.0])`` with a torch
    `t` stacks a torch 0.0)."""
    for v in values:
        r = raw(v)
        if is_array(r) and not arrays.is_numpy(r):
            return v
    return None


def raw(x: Any) -> Any:
    """The array under `x`: every Tensor layer removed, a value staged by `einad.jit` as the
    concrete array it stands for. Only for reading its library, device, shape or dtype."""
    x = strip(x)
    return x.concrete if type(x) is Staged else x


def lib_array(like: Any, a: Any) -> Any:
    """The numpy array (or number) `a` as an array of `like`'s library and device, dtype kept
    (numpy's own `a` when `like` is of numpy): index arrays, masks and constants that einad
    computes with numpy from static information (shapes, indices) join an operand this way."""
    return arrays.asarray(raw(like), a)


def wrap(x: Value) -> Tensor:
    """Box a raw result as a constant Tensor (traced Tensors pass through)."""
    if type(x) is Tensor:
        return x
    if not isinstance(x, (np.ndarray, np.generic)) and not is_array(x):
        x = np.asarray(x)
    return _box(x, None, None, None)


# -- axes, as numpy checks them ------------------------------------------------------------


def integer(value: Any, what: str) -> int:
    """`value` as a Python int (ints, numpy integers, anything with ``__index__``; not bools).

    Raises:
        TypeError: Naming `what`, for a float, a string, a bool or any other non-integer.
    """
    if not isinstance(value, (bool, np.bool_)):
        try:
            return operator.index(value)
        except TypeError as err:
            if type(err) is not TypeError:  # e.g. a TracerError: it says more than we would
                raise
    raise TypeError(f"{what} must be an integer, got {value!r} ({type(value).__name__})")


def normalize_axis(axis: Any, ndim: int, what: str = "axis") -> int:
    """One axis of an `ndim`-dimensional array, in ``range(ndim)``.

    Raises:
        numpy.exceptions.AxisError: If it is out of range (no wrapping modulo `ndim`).
        TypeError: If it is not an integer.
    """
    a = integer(axis, what)
    if not -ndim <= a < ndim:
        raise AxisError(a, ndim, None if what == "axis" else what)
    return a % ndim


def normalize_axes(axis: Any, ndim: int, what: str = "axis") -> tuple[int, ...]:
    """An axis or a sequence of distinct axes (all of them for None), each in ``range(ndim)``.

    Raises:
        numpy.exceptions.AxisError: If an axis is out of range.
        ValueError: If an axis is repeated.
        TypeError: If `axis` is not an integer, a sequence of them, or None.
    """
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, (list, tuple, range)) or (isinstance(axis, np.ndarray) and axis.ndim == 1):
        items = list(axis)
    else:
        try:
            items = [integer(axis, what)]
        except TypeError as err:
            if type(err) is not TypeError:  # a TracerError: an axis computed inside einad.jit
                raise
            raise TypeError(
                f"{what} must be an integer, a tuple of integers or None, "
                f"got {axis!r} ({type(axis).__name__})"
            ) from None
    out = tuple(normalize_axis(a, ndim, what) for a in items)
    if len(set(out)) != len(out):
        raise ValueError(f"repeated axis in {what} {axis!r}")
    return out
