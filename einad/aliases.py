"""Type aliases shared by every layer (pure typing; `Value` and `ArrayLike` name `Tensor`, so
they live in `einad.core`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, TypeAlias

import numpy.typing as npt

Array: TypeAlias = npt.NDArray[Any]
"""A numpy array of any dtype."""

DTypeLike: TypeAlias = npt.DTypeLike
"""Anything `numpy.dtype` accepts."""

Shape: TypeAlias = tuple[int, ...]
"""An array shape."""

Axis: TypeAlias = int | Sequence[int] | None
"""One axis, several axes, or None for all of them."""

Path: TypeAlias = tuple[tuple[int, ...], ...]
"""A contraction path: the operand positions each step contracts (opt_einsum's convention)."""

MemoryLimit: TypeAlias = int | Literal["max_input"] | None
"""The largest intermediate allowed, in elements; ``"max_input"``: the largest operand's size;
None or -1 (opt_einsum's spelling): no limit."""
