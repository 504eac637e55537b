"""Type aliases shared by every layer (pure typing; `Value` and `ArrayLike` name `Tensor`, so
they live in `einad.core`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeAlias

import numpy.typing as npt

Array: TypeAlias = npt.NDArray[Any]
"""A numpy array of any dtype."""

DTypeLike: TypeAlias = npt.DTypeLike
"""Anything `numpy.dtype` accepts."""

Shape: TypeAlias = tuple[int, ...]
"""An array shape."""

Axis: TypeAlias = int | Sequence[int] | None
"""One axis, several axes, or None for all of them."""
