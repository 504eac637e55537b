"""einad as an einops backend: ``einops.rearrange``, ``reduce``, ``repeat`` and ``einsum`` on Tensors.

einops finds the backend of a tensor among the subclasses of its ``AbstractBackend`` whose
framework is imported; importing einad defines `EinadBackend` when einops is installed (an
optional dependency: without it einad imports and this module defines nothing). Every
method is one of einad's operations, so an einops expression on Tensors is traced,
differentiable in every mode, staged by `einad.jit` and mapped by `einad.vmap`;
``einops.einsum`` is `einad.einsum` (one primitive, its path from opt_einsum).

(``einops.array_api``'s functions need no backend: they take a Tensor's namespace,
`einad.array_api`.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import ops
from .core import Tensor
from .rules.indexing import tile

_backends: Any
try:  # an optional dependency: without einops there is no backend to define
    from einops import _backends
except ImportError:  # pragma: no cover - exercised where einops is absent
    _backends = None


if _backends is not None:

    class EinadBackend(_backends.AbstractBackend):  # type: ignore[misc]
        """einops' operations on einad Tensors, each an einad operation."""

        framework_name = "einad"

        def is_appropriate_type(self, tensor: Any) -> bool:
            return type(tensor) is Tensor

        def from_numpy(self, x: Any) -> Tensor:
            return Tensor(x)

        def to_numpy(self, x: Tensor) -> Any:
            return x.numpy()

        def arange(self, start: int, stop: int) -> Tensor:
            return Tensor(np.arange(start, stop))

        def reduce(self, x: Tensor, operation: str, axes: tuple[int, ...]) -> Tensor:
            return getattr(ops, operation)(x, axis=axes)  # type: ignore[no-any-return]

        def stack_on_zeroth_dimension(self, tensors: list[Any]) -> Tensor:
            return ops.stack(tensors)

        def add_axis(self, x: Tensor, new_position: int) -> Tensor:
            return ops.expand_dims(x, new_position)

        def tile(self, x: Tensor, repeats: tuple[int, ...]) -> Tensor:
            return tile(x, repeats)

        def concat(self, tensors: list[Any], axis: int) -> Tensor:
            return ops.concatenate(tensors, axis=axis)

        def is_float_type(self, x: Tensor) -> bool:
            return x.dtype.kind in "fc"

        def einsum(self, pattern: str, *x: Any) -> Tensor:
            return ops.einsum(pattern, *x)
