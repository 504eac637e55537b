"""The exceptions einad raises for bad input and failed gradient checks."""

import math
from typing import Any


class EinsumError(ValueError):
    """Malformed einsum subscripts, or operands that do not fit them."""


class GradcheckError(AssertionError):
    """A derivative disagrees with central differences (raised by `gradcheck`)."""


class TracerError(TypeError):
    """A traced value used where its value is unknown or its transformation has ended.

    Raised for Python control flow on a value staged by `einad.jit` (``if x > 0``,
    ``float(x)``), and for a traced value used after the transformation that made
    it returned (saved in a list or a global and used later).
    """


def check_callable(f: Any, name: str, usage: str = "") -> None:
    """A transformation's function argument is a function. ``einad.grad(f(x))``, the value where
    the function belongs, is a TypeError where it is written (JAX's, at ``jax.grad``), not a
    "not callable" from deep inside the call; `usage` shows the call as it should be."""
    if not callable(f):
        how = usage or f"einad.{name}(f)(x), not einad.{name}(f(x))"
        raise TypeError(f"einad.{name} takes a function, got {type(f).__name__}: write {how}")


def unknown_sizes(shape: Any) -> bool:
    """Whether `shape` has a dimension of unknown size: nan (a dask array of unknown chunk
    sizes, after a boolean mask) or None (the array API's unknown dimension)."""
    return any(d is None or math.isnan(d) for d in shape)


UNKNOWN_SIZES = "call its .compute_chunk_sizes() first (dask's advice for unknown chunk sizes)"
"""What the errors about shapes of unknown size (`unknown_sizes`) tell the user to do."""
