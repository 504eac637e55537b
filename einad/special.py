"""`einad.special`: the functions of ``scipy.special`` (and ``jax.scipy.special``) that
differentiable code reaches for and einad's operations compute exactly: the entropy terms that
are 0 where their first argument is (``xlogy``, ``xlog1py``, ``entr``, ``rel_entr``), `logit`,
and, under scipy's names, `expit`, `logsumexp`, `softmax` and `log_softmax`.

The entropy terms are `custom_jvp` functions with JAX's rules: the value at ``x = 0`` is 0
(not ``0 * log 0``, a nan), and the derivative is the smooth function's (``d/dx xlogy(x, y) =
log y``, also at ``x = 0``), never a nan that a ``where`` would leave behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import ops
from .rules.reductions import log_softmax, logsumexp, softmax
from .transforms.custom import custom_jvp
from .util import dtype_of

__all__ = ["entr", "expit", "log_softmax", "logit", "logsumexp", "rel_entr", "softmax", "xlog1py", "xlogy"]


def _inexact(*xs: Any) -> list[Any]:
    """The operands in their common floating-point dtype (integers in float64, as scipy)."""
    dt = np.result_type(*(dtype_of(x) for x in xs))
    dt = dt if dt.kind in "fc" else np.dtype(np.float64)
    return [ops.astype(x, dt) if dtype_of(x) != dt else x for x in xs]


def _x_times(log: Callable[[Any], Any], hole: float, denominator: Callable[[Any], Any], name: str) -> Any:
    """``x * log(y)`` for `log` (log or log1p), 0 where ``x == 0`` (`hole`, a `y` where `log` is
    finite, stands in for `y` there), as a `custom_jvp` with JAX's derivative
    ``(log y, x / denominator(y))``, ``denominator(y)`` being ``1 / log'(y)``."""

    def value(x: Any, y: Any) -> Any:
        zero = ops.equal(x, 0)
        return ops.where(zero, 0.0, x * log(ops.where(zero, hole, y)))

    value.__name__ = name
    f = custom_jvp(value)

    @f.defjvp
    def _jvp(primals: Any, tangents: Any) -> Any:
        (x, y), (tx, ty) = primals, tangents
        return f(x, y), tx * log(y) + ty * x / denominator(y)

    return f


# (the table's entries: mypy 2.4.1 crashes on `ops.log`, a name ops makes at import, as a value)
_xlogy = _x_times(ops.ELEMENTWISE["log"], 1.0, lambda y: y, "xlogy")
_xlog1py = _x_times(ops.ELEMENTWISE["log1p"], 0.0, lambda y: 1 + y, "xlog1py")


def xlogy(x: Any, y: Any) -> Any:
    """``x * log(y)``, 0 where ``x == 0`` (also where ``y == 0``), as ``scipy.special.xlogy``;
    its derivative is ``(log y, x / y)`` everywhere (JAX's)."""
    return _xlogy(*_inexact(x, y))


def xlog1py(x: Any, y: Any) -> Any:
    """``x * log1p(y)``, 0 where ``x == 0``, as ``scipy.special.xlog1py`` (JAX's derivative)."""
    return _xlog1py(*_inexact(x, y))


@custom_jvp
def _entr(x: Any) -> Any:
    positive = ops.greater(x, 0)
    value = -x * ops.log(ops.where(positive, x, 1.0))
    return ops.where(positive, value, ops.where(ops.equal(x, 0), 0.0, -np.inf))


@_entr.defjvp
def _entr_jvp(primals: Any, tangents: Any) -> Any:
    (x,), (t,) = primals, tangents
    return _entr(x), -(1 + ops.log(x)) * t


def entr(x: Any) -> Any:
    """``-x log x`` for ``x > 0``, 0 at 0 and -inf below, as ``scipy.special.entr`` (the
    derivative ``-(1 + log x)``: +inf at 0, as the function's slope there)."""
    return _entr(*_inexact(x))


def rel_entr(x: Any, y: Any) -> Any:
    """``x log(x / y)`` for positive `x` and `y`, 0 where ``x == 0 <= y``, inf elsewhere, as
    ``scipy.special.rel_entr`` (a term of the Kullback-Leibler divergence). Its derivative is
    the formula's where both are positive and 0 elsewhere (JAX's: selected, not -inf at 0)."""
    x, y = _inexact(x, y)
    both = ops.where(ops.greater(x, 0), ops.greater(y, 0), False)
    ratio = ops.where(both, x, 1.0) / ops.where(both, y, 1.0)
    value = ops.where(both, x * ops.log(ratio), np.inf)
    return ops.where(ops.where(ops.equal(x, 0), ops.greater_equal(y, 0), False), 0.0, value)


def logit(p: Any) -> Any:
    """``log(p / (1 - p))``, as ``scipy.special.logit`` (the inverse of `expit`)."""
    (p,) = _inexact(p)
    return ops.log(p) - ops.log1p(-p)


def expit(x: Any) -> Any:
    """``1 / (1 + exp(-x))``, as ``scipy.special.expit``: einad's `sigmoid`, stable at any x."""
    return ops.sigmoid(x)
