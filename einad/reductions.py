"""Reductions that are not plain sums, and the numerically stable compositions.

`max`, `min` and `prod` are primitives with one rule each; `mean`, `var`,
`logsumexp`, `softmax`, `log_softmax` and `clip` are compositions of other
operations and need no rule of their own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .core import Params, Primitive, Staged, Tensor, bind, rules, strip
from .einsum import sum_raw
from .elementwise import PRIMITIVES, compare, exp, log
from .structural import astype, broadcast_raw, reshape_raw, stop_gradient, where_raw
from .util import (
    ArrayLike,
    Axis,
    Shape,
    Value,
    dtype_of,
    normalize_axes,
    shape_of,
    to_array_operand,
    to_operand,
    wrap,
)

# -- max and min: tied extremes share the gradient -----------------------------------------


def _keep(v: Value, shape: Shape, axes: tuple[int, ...]) -> Value:
    """Reshape a reduced value so it broadcasts against the unreduced `shape`."""
    return reshape_raw(v, tuple(1 if i in axes else d for i, d in enumerate(shape)))


def _extreme_weights(x: Any, ans: Any, axes: tuple[int, ...]) -> Any:
    """Weights with zero derivative: 1/count on the elements equal to the extreme, 0 elsewhere."""
    shape = shape_of(x)
    hit = astype(compare("equal", x, _keep(stop_gradient(ans), shape, axes)), dtype_of(x))
    return hit / sum_raw(hit, axes, keepdims=True)


def _extreme_prim(name: str, kernel: Callable[..., Any]) -> Primitive:
    prim = Primitive(name, lambda x, axes: kernel(x, axis=axes))

    def vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
        x = vals[0]
        w = _extreme_weights(x, ans, p["axes"])
        return [_keep(g, shape_of(x), p["axes"]) * w]

    def jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
        w = _extreme_weights(vals[0], ans, p["axes"])
        return sum_raw(ts[0] * w, p["axes"])

    return rules(prim, vjp=vjp, jvp=jvp)


max_p = _extreme_prim("max", np.max)
min_p = _extreme_prim("min", np.min)


def _reduce(prim: Primitive, x: ArrayLike, axis: Axis, keepdims: bool) -> Tensor:
    x = to_array_operand(x)
    shape = shape_of(x)
    axes = normalize_axes(axis, len(shape))
    out = bind(prim, (x,), {"axes": axes})
    if keepdims:
        out = _keep(out, shape, axes)
    return wrap(out)


def max(x: ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Largest element along `axis`; tied maxima share the gradient equally."""
    return _reduce(max_p, x, axis, keepdims)


def min(x: ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Smallest element along `axis`; tied minima share the gradient equally."""
    return _reduce(min_p, x, axis, keepdims)


# -- prod: exact at zeros ------------------------------------------------------------------


def _prod_others(x: Any, axes: tuple[int, ...]) -> Any:
    """d prod / d x_i: the product of the other elements, never dividing by zero.

    Where an axis holds zeros, the zero elements are kept as traced values
    (their sum `z`), so the result is exact to second order: with one zero the
    others' derivative is ``z * p / x_i``, with two the zeros' is ``(z - x_i) * p``.
    """
    shape = shape_of(x)
    zero = compare("equal", x, 0)
    count = sum_raw(astype(zero, np.int64), axes, keepdims=True)
    nonzero = where_raw(zero, 1, x)
    p = _keep(bind(prod_p, (nonzero,), {"axes": axes}), shape, axes)
    seen = strip(count)
    if type(seen) is not Staged and not np.any(seen):  # known here, not in a program: no zeros
        return p / nonzero
    z = sum_raw(where_raw(zero, x, 0), axes, keepdims=True)
    one = where_raw(zero, p, z * p / nonzero)
    two = where_raw(zero, (z - x) * p, 0)
    by_count = where_raw(compare("equal", count, 2), two, 0)
    by_count = where_raw(compare("equal", count, 1), one, by_count)
    return where_raw(compare("equal", count, 0), p / nonzero, by_count)


prod_p = Primitive("prod", lambda x, axes: np.prod(x, axis=axes))
rules(
    prod_p,
    vjp=lambda g, ans, vals, p, needed: [
        _keep(g, shape_of(vals[0]), p["axes"]) * _prod_others(vals[0], p["axes"])
    ],
    jvp=lambda ts, ans, vals, p: sum_raw(ts[0] * _prod_others(vals[0], p["axes"]), p["axes"]),
)


def prod(x: ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Product along `axis`; its gradient is exact where elements are zero."""
    return _reduce(prod_p, x, axis, keepdims)


# -- compositions ------------------------------------------------------------------------------


def _count(shape: Shape, axes: tuple[int, ...]) -> int:
    return int(np.prod([shape[a] for a in axes], dtype=np.int64))


def mean(x: ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean along `axis` (a sum, then a division)."""
    x = to_array_operand(x)
    shape = shape_of(x)
    n = _count(shape, normalize_axes(axis, len(shape)))
    return wrap(sum_raw(x, axis, keepdims) / n)


def var(x: ArrayLike, axis: Axis = None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """Variance along `axis` with `ddof` delta degrees of freedom (numpy's default 0)."""
    x = to_array_operand(x)
    shape = shape_of(x)
    n = _count(shape, normalize_axes(axis, len(shape)))
    d = x - mean(x, axis, keepdims=True)
    from .elementwise import conj, real

    return wrap(sum_raw(real(d * conj(d)), axis, keepdims) / (n - ddof))


def _inexact(x: ArrayLike) -> Value:
    """`x` as an array operand; booleans and integers in float64, as numpy's `mean` computes them.

    (Shifting an int8 array by its maximum would wrap around, and numpy subtracts no booleans.)
    """
    x = to_array_operand(x)
    return x if dtype_of(x).kind in "fc" else astype(x, np.float64)


def _stable_shift(x: Any, axes: tuple[int, ...]) -> Any:
    """The max along `axes` (kept dims) with zero derivative; 0 where it is not finite."""
    shape = shape_of(x)
    if 0 in shape:
        return np.zeros([1] * len(shape), dtype_of(x))
    m = _keep(bind(max_p, (stop_gradient(x),), {"axes": axes}), shape, axes)
    return where_raw(bind(PRIMITIVES["isfinite"], (m,), {}), m, np.zeros((), dtype_of(x)))


def _logsumexp(x: Value, axes: tuple[int, ...], keepdims: bool) -> Any:
    m = _stable_shift(x, axes)
    out = log(sum_raw(exp(x - m), axes, keepdims=True)) + m
    if not keepdims:
        out = reshape_raw(out, tuple(d for i, d in enumerate(shape_of(x)) if i not in axes))
    return out


def logsumexp(x: ArrayLike, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) along `axis` (all axes by default), stable at any magnitude.

    Booleans and integers are computed in float64.
    """
    x = _inexact(x)
    return wrap(_logsumexp(x, normalize_axes(axis, len(shape_of(x))), keepdims))


def _log_softmax(x: Any, axes: tuple[int, ...]) -> Any:
    s = x - _stable_shift(x, axes)
    return s - log(sum_raw(exp(s), axes, keepdims=True))


def log_softmax(x: ArrayLike, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along `axis` (the last by default); booleans and integers in float64."""
    x = _inexact(x)
    return wrap(_log_softmax(x, normalize_axes(axis, len(shape_of(x)))))


def softmax(x: ArrayLike, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis` (the last by default).

    Booleans and integers are computed in float64.
    """
    x = _inexact(x)
    axes = normalize_axes(axis, len(shape_of(x)))
    e = exp(x - _stable_shift(x, axes))
    return wrap(e / sum_raw(e, axes, keepdims=True))


def clip(x: ArrayLike, a_min: ArrayLike | None, a_max: ArrayLike | None) -> Tensor:
    """Limit values to [a_min, a_max]; the gradient passes where a_min <= x <= a_max.

    As numpy: ``minimum(maximum(x, a_min), a_max)``, so a_max wins where a_min > a_max.
    """
    x = to_array_operand(x)
    a_min = None if a_min is None else to_operand(a_min)
    a_max = None if a_max is None else to_operand(a_max)
    out = x
    if a_min is not None:
        out = where_raw(compare("less", x, a_min), a_min, out)
    if a_max is not None:
        out = where_raw(compare("greater", out, a_max), a_max, out)
    bounds = [shape_of(b) for b in (a_min, a_max) if b is not None]
    return wrap(broadcast_raw(out, np.broadcast_shapes(shape_of(x), *bounds)))
