"""quimb's `TNOptimizer` with einad's derivatives: ``autodiff_backend="einad"``.

quimb optimizes a tensor network's arrays (or its parametrized tensors' parameters) against a
loss through one of its autodiff handlers, each a small class that makes the loss's value, its
value and gradient, and a Hessian-vector product from the loss written on arrays. `EinadHandler`
is einad's, in the form of quimb's handler for JAX: `ea.value_and_grad`, and for ``hessp``
forward over reverse, each staged by `ea.jit` unless ``jit_fn=False`` (a loss that reads values
to decide, as quimb's SVD truncation by a cutoff does, cannot be staged: pass ``jit_fn=False``
to `TNOptimizer`). Gradients are conjugated for quimb, as its JAX handler does (einad's gradient
of a real function of complex values is JAX's), and so are Hessian-vector products, which quimb's
JAX handler leaves as they are: for complex arrays its ``hessp`` is not the derivative of its
gradient, einad's is (tests/workflows/test_quimb_optimizer.py checks both against central
differences of the gradient).

Importing this module adds the handler to quimb's table. Nobody needs to: ``import einad``
imports it as soon as quimb's optimizer module is loaded, before einad or after it
(`einad.post_import`)::

    import einad
    import quimb.tensor as qtn

    opt = qtn.TNOptimizer(psi, loss_fn, norm_fn, autodiff_backend="einad")

quimb is an optional dependency (the ``[tn]`` extra): without it this module raises ImportError.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import quimb.tensor.optimize as _optimize

from . import creation
from .pytree import tree_map
from .transforms.autodiff import grad, jvp, value_and_grad
from .transforms.jit import jit

BACKEND = "einad"
"""The name `TNOptimizer`'s ``autodiff_backend`` takes."""


class EinadHandler:
    """A quimb autodiff handler (`TNOptimizer`'s ``autodiff_backend="einad"``): quimb calls
    `setup_fn` with the loss as a function of a pytree of arrays, then `value`,
    `value_and_grad` and `hessp` on numpy arrays, and takes numpy arrays back."""

    def __init__(self, jit_fn: bool = True, device: Any = None) -> None:
        if device not in (None, "cpu"):
            raise ValueError(f"einad's quimb handler computes on the CPU, not on device={device!r}")
        self.jit_fn = jit_fn

    def to_variable(self, x: Any) -> Any:
        return creation.asarray(x)

    def to_constant(self, x: Any) -> Any:
        return creation.asarray(x)

    def setup_fn(self, fn: Callable[[Any], Any]) -> None:
        def hvp(primals: Any, tangents: Any) -> Any:
            return jvp(grad(fn), (primals,), (tangents,))[1]

        both = value_and_grad(fn)
        stage = jit if self.jit_fn else (lambda f: f)
        self._fn, self._value_and_grad, self._hvp = stage(fn), stage(both), stage(hvp)

    def value(self, arrays: Any) -> Any:
        return np.asarray(self._fn(arrays))

    def value_and_grad(self, arrays: Any) -> tuple[Any, Any]:
        loss, grads = self._value_and_grad(arrays)
        return np.asarray(loss), tree_map(lambda g: np.conj(np.asarray(g)), grads)

    def hessp(self, primals: Any, tangents: Any) -> Any:
        """The derivative of `value_and_grad`'s gradient along `tangents`: forward over reverse,
        conjugated as that gradient is."""
        return tree_map(lambda h: np.conj(np.asarray(h)), self._hvp(primals, tangents))


def register() -> None:
    """Make ``autodiff_backend="einad"`` a name quimb's `TNOptimizer` knows (its handler table
    has no public way in: the table itself is written)."""
    _optimize._BACKEND_HANDLERS[BACKEND] = EinadHandler


register()

__all__ = ["BACKEND", "EinadHandler", "register"]
