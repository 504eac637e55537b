"""Small helpers shared by the operation modules: shapes, dtypes, conversion."""

from __future__ import annotations

from typing import Any

import numpy as np

from .core import Tensor, _box, as_array


def shape_of(x: Any) -> tuple[int, ...]:
    """Shape of an array, Tensor, numpy scalar or Python number."""
    s = getattr(x, "shape", None)
    return tuple(s) if s is not None else np.shape(x)


def dtype_of(x: Any) -> np.dtype:
    d = getattr(x, "dtype", None)
    return d if d is not None else np.result_type(x)


def to_operand(x: Any) -> Any:
    """What an operation works on: a traced Tensor, or a plain numeric array.

    Python numbers stay Python numbers (numpy then keeps float32 float32).
    """
    if type(x) is Tensor:
        return x if x._trace is not None else x._value
    if isinstance(x, np.ndarray):
        if x.dtype.kind not in "biufc":
            raise TypeError(f"einad works on numeric arrays; got an array of dtype {x.dtype}")
        return x
    if isinstance(x, (bool, int, float, complex, np.generic)):
        if isinstance(x, np.generic) and np.dtype(type(x)).kind not in "biufc":
            raise TypeError(f"einad works on numbers; got {type(x).__name__}")
        return x
    return as_array(x)


def to_array_operand(x: Any) -> Any:
    """Like `to_operand`, but Python numbers become 0-d arrays (for ops that need a shape)."""
    x = to_operand(x)
    if isinstance(x, (bool, int, float, complex)):
        return np.asarray(x)
    return x


def wrap(x: Any) -> Tensor:
    """Box a raw result as a constant Tensor (traced Tensors pass through)."""
    if type(x) is Tensor:
        return x
    if not isinstance(x, (np.ndarray, np.generic)):
        x = np.asarray(x)
    return _box(x, None, None, None)
