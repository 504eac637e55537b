"""Operations that select with index arrays: take, take_along_axis, sort and the arg-functions,
the moves written with them (pad, roll, tile, repeat), and JAX's functional updates ``x.at[i]``.

Two primitives do the work. ``take_along_axis`` gathers the elements an integer
array names along one axis (numpy's function, with its broadcasting); its
transpose ``scatter_add_along_axis`` adds a cotangent back into those places
(``numpy.add.at``, so repeated indices accumulate). Both are linear in their
array operand, each is the other's VJP, and each is its own JVP. The indices are
an *operand*, not a static parameter: a value-dependent permutation (``argsort``,
``argmax``) stays an operation in a staged program, so `sort` is ``argsort``
followed by a gather and needs no rule of its own.

``argsort``, ``argmax`` and ``argmin`` are primitives with integer results and a
zero derivative.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import arrays
from ..aliases import Array, Shape
from ..arrays import is_array
from ..core import ArrayLike, Params, Primitive, Tensor, Value, bind, declare
from ..errors import TracerError
from ..util import (
    dtype_of,
    integer,
    lib_array,
    normalize_axes,
    raw,
    shape_of,
    to_array_operand,
    to_operand,
    wrap,
)
from .einsum import sum_to_shape
from .elementwise import PRIMITIVES, apply2, compare
from .reductions import batch_axis, mean
from .reductions import max as _max
from .reductions import min as _min
from .shape import (
    _clean_index,
    _gather_template,
    _ghost,
    _has_int_array,
    astype,
    gather_raw,
    gather_scatter_raw,
    getitem,
    getitem_raw,
    index_places,
    indices_read,
    last_writes,
    last_writes_p,
    reshape_raw,
    scatter_raw,
    traced_index,
)
from .structural import broadcast_raw, concatenate, where_raw, zeros_scalar

# -- the gather and its transpose ----------------------------------------------------------


def _scatter_along_impl(g: Any, index: Any, axis: int, shape: Shape) -> Array:
    """Zeros of `shape` with `g` added at `index` along `axis` (the transpose of take_along_axis)."""
    xp = arrays.namespace(g, index)
    if xp is not np:
        return _scatter_along_any(xp, g, index, axis, shape)  # type: ignore[no-any-return]
    g, index = np.asarray(g), np.asarray(index)
    both = np.broadcast_shapes(g.shape, index.shape)
    g, index = np.broadcast_to(g, both), np.broadcast_to(index, both)
    out = np.zeros(shape, dtype=g.dtype)
    nd = len(shape)
    where = tuple(
        index if d == axis else np.arange(shape[d]).reshape([-1 if k == d else 1 for k in range(nd)])
        for d in range(nd)
    )
    np.add.at(out, where, g)  # repeated indices accumulate
    return out


# On other libraries than numpy the indices are an array of that library, maybe computed (an
# `argsort`) and lazy (dask): no numpy bookkeeping on them. The gather is the library's
# `take_along_axis` (the standard's, 2024.12), or where it has none (dask) one `take` from the
# flattened array at the flat positions. The scatter-add compares the indices with each place
# (a one-hot array of ``indices.size * shape[axis]`` elements, summed over the indices' axis):
# exact and deterministic on every library, repeated indices included, with the standard's
# operations only -- its memory and work grow with the axis' length squared.


def _nonnegative(xp: Any, index: Any, n: int) -> Any:
    """The indices as the library's int64, numpy's negative ones (counted from the end) made
    non-negative. A narrower or unsigned index would overflow the sums with `n` and the strides
    that follow (uint8 positions past 255), and torch gathers only with int64."""
    if index.dtype != xp.int64:
        index = xp.astype(index, xp.int64)
    return xp.where(index < 0, index + n, index)


def _take_along_impl(x: Any, index: Any, axis: int) -> Any:
    xp = arrays.namespace(x, index)
    if xp is np:
        return np.take_along_axis(x, index, axis=axis)
    xs, js = shape_of(x), shape_of(index)
    both = np.broadcast_shapes(xs[:axis] + (1,) + xs[axis + 1 :], js[:axis] + (1,) + js[axis + 1 :])
    x = _broadcast_any(xp, x, both[:axis] + (xs[axis],) + both[axis + 1 :])
    index = _nonnegative(
        xp, _broadcast_any(xp, index, both[:axis] + (js[axis],) + both[axis + 1 :]), xs[axis]
    )
    along = getattr(xp, "take_along_axis", None)
    if along is not None:
        return along(x, index, axis=axis)
    # the flat position of each element named: index * stride(axis) + the other coordinates'
    xs, js = shape_of(x), shape_of(index)
    strides = [math.prod(xs[d + 1 :]) for d in range(len(xs))]
    flat = index * strides[axis]
    for d, n in enumerate(js):
        if d != axis and n > 1:
            at = xp.arange(n, dtype=index.dtype, device=arrays.device(index))
            flat = flat + xp.reshape(at * strides[d], tuple(n if k == d else 1 for k in range(len(js))))
    return xp.reshape(xp.take(xp.reshape(x, (-1,)), xp.reshape(flat, (-1,)), axis=0), js)


def _broadcast_any(xp: Any, x: Any, shape: Shape) -> Any:
    return x if shape_of(x) == tuple(shape) else xp.broadcast_to(x, tuple(shape))


def _scatter_along_any(xp: Any, g: Any, index: Any, axis: int, shape: Shape) -> Any:
    both = np.broadcast_shapes(shape_of(g), shape_of(index))
    g, index = _broadcast_any(xp, g, both), _broadcast_any(xp, index, both)
    n = shape[axis]
    index = _nonnegative(xp, index, n)
    places = xp.arange(n, dtype=index.dtype, device=arrays.device(index))
    hot = xp.astype(xp.expand_dims(index, axis=-1) == places, g.dtype)  # both + (n,)
    out = xp.sum(xp.expand_dims(g, axis=-1) * hot, axis=axis, dtype=g.dtype)
    nd = len(shape)
    out = xp.permute_dims(out, tuple(range(axis)) + (nd - 1,) + tuple(range(axis, nd - 1)))
    summed = tuple(d for d in range(nd) if d != axis and shape[d] != both[d])  # broadcast axes of x
    return xp.sum(out, axis=summed, keepdims=True, dtype=g.dtype) if summed else out


take_along_p = Primitive("take_along_axis", _take_along_impl)
scatter_along_p = Primitive("scatter_add_along_axis", _scatter_along_impl)


def take_along_raw(x: Value, index: Value, axis: int) -> Value:
    return bind(take_along_p, (x, index), {"axis": axis})


def scatter_along_raw(g: Value, index: Value, axis: int, shape: Sequence[int]) -> Value:
    return bind(scatter_along_p, (g, index), {"axis": axis, "shape": tuple(shape)})


def _batch_along(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """take_along_axis and its scatter: an unbatched operand gets a size-1 batch axis, which
    numpy's broadcasting of the array against the indices lines up."""
    vals = [v if b else reshape_raw(v, (1,) + shape_of(v)) for v, b in zip(vals, batched)]
    new = {**params, "axis": params["axis"] + 1}
    if "shape" in params:
        new["shape"] = (size,) + tuple(params["shape"])
    return bind(prim, vals, new)


declare(
    take_along_p,
    vjp=lambda g, ans, vals, p, needed: [scatter_along_raw(g, vals[1], p["axis"], shape_of(vals[0])), None],
    jvp=lambda ts, ans, vals, p: None if ts[0] is None else take_along_raw(ts[0], vals[1], p["axis"]),
    keep=indices_read,
    batch=_batch_along,
    aliasing="fresh",
    linear=True,  # in the array (the indices are integers)
)
declare(
    scatter_along_p,
    vjp=lambda g, ans, vals, p, needed: [
        sum_to_shape(take_along_raw(g, vals[1], p["axis"]), shape_of(vals[0])),
        None,
    ],
    jvp=lambda ts, ans, vals, p: (
        None if ts[0] is None else scatter_along_raw(ts[0], vals[1], p["axis"], p["shape"])
    ),
    keep=indices_read,
    batch=_batch_along,
    aliasing="fresh",
    linear=True,
)


def _index_operand(indices: ArrayLike, like: Value, n: int | None, axis: int) -> Value:
    """Indices as an operand: a traced integer Tensor stays traced; anything else an integer array,
    of the library of `like` (the indexed array) when given as numbers, a list or numpy's array.

    Given so, they are checked here against the `n` places along `axis` (unless `n` is None:
    they are wrapped or clipped): numpy's IndexError at the call, where the other libraries'
    gathers would wrap or clamp an index out of range.
    """
    idx = to_array_operand(indices)
    if dtype_of(idx).kind not in "iu":
        raise IndexError(f"indices must be integers, got dtype {dtype_of(idx)}")
    if isinstance(idx, np.ndarray) and n is not None:
        out = idx[(idx < -n) | (idx >= n)]
        if out.size:
            raise IndexError(f"index {out.flat[0]} is out of bounds for axis {axis} with size {n}")
    if isinstance(idx, np.ndarray):
        idx = lib_array(like, idx)
    return idx


def _flat(x: Value) -> Value:
    return reshape_raw(x, (math.prod(shape_of(x)),))


def _axis(axis: int, nd: int) -> int:
    return normalize_axes(axis, nd)[0]


def take_along_axis(arr: ArrayLike, indices: ArrayLike, axis: int | None = -1) -> Tensor:
    """The elements of `arr` that `indices` name along `axis`, as numpy.take_along_axis.

    `indices` has `arr`'s number of dimensions and broadcasts against it outside
    `axis`; with ``axis=None`` both are flattened. Linear in `arr` (its VJP adds
    the cotangent back at the indices); the indices may be computed (``argsort``)
    and stay an operation under `einad.jit`.

    Raises:
        IndexError: If `indices` is not an integer array or an index is out of range.
        ValueError: If `indices` and `arr` differ in their number of dimensions.
    """
    x = to_array_operand(arr)
    if axis is None:
        x = _flat(x)
    nd = len(shape_of(x))
    at = 0 if axis is None else _axis(axis, nd)
    idx = _index_operand(indices, x, shape_of(x)[at], at)
    if axis is None:
        idx = _flat(idx)
    if len(shape_of(idx)) != nd:
        raise ValueError(f"take_along_axis: indices have {len(shape_of(idx))} dimensions, the array has {nd}")
    return wrap(take_along_raw(x, idx, at))


def take(a: ArrayLike, indices: ArrayLike, axis: int | None = None, mode: str = "raise") -> Tensor:
    """Elements of `a` at `indices` along `axis` (of the flattened `a` by default), as numpy.take.

    The result's shape is ``a.shape[:axis] + indices.shape + a.shape[axis+1:]``.
    `mode` is numpy's: ``"raise"`` (an index out of range is an IndexError),
    ``"wrap"`` or ``"clip"``. Linear in `a`: one gather, whose VJP scatters back.
    """
    x = to_array_operand(a)
    if axis is None:
        x, axis = _flat(x), 0
    s = shape_of(x)
    axis = _axis(axis, len(s))
    n = s[axis]
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(f"take: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    if n == 0 and math.prod(np.shape(indices)):  # (no place to take, wrap or clip to: numpy's IndexError)
        raise IndexError(f"cannot take elements from axis {axis}, which is empty")
    if (
        mode != "raise"
        and n
        and (isinstance(indices, np.ndarray) or not (type(indices) is Tensor or is_array(indices)))
    ):
        plain = np.asarray(indices)  # numbers, a list, numpy's array: wrapped or clipped here
        if plain.dtype.kind in "iu":
            indices, mode = (np.mod(plain, n) if mode == "wrap" else np.clip(plain, 0, n - 1)), "raise"
    idx = _index_operand(indices, x, n if mode == "raise" else None, axis)
    if mode == "wrap":
        idx = bind(PRIMITIVES["mod"], (idx, n), {})
    elif mode == "clip":
        idx = bind(PRIMITIVES["minimum"], (bind(PRIMITIVES["maximum"], (idx, 0), {}), n - 1), {})
    t = shape_of(idx)
    rest = s[axis + 1 :]
    if not t:  # one index: gather a slab of width 1, then drop the axis
        out = take_along_raw(x, reshape_raw(idx, (1,) * len(s)), axis)
        return wrap(reshape_raw(out, s[:axis] + rest))
    # Line the index's dimensions up at `axis`; gather broadcasts the rest.
    xb = reshape_raw(x, s[: axis + 1] + (1,) * (len(t) - 1) + rest)
    ib = reshape_raw(idx, (1,) * axis + t + (1,) * len(rest))
    return wrap(take_along_raw(xb, ib, axis))


# -- sorting and the arg-functions: integer results, zero derivative -------------------------


def _argsort_impl(x: Any, axis: int) -> Any:
    xp = arrays.xp_of(x)
    if xp is np:
        return np.argsort(x, axis=axis, kind="stable")
    return xp.argsort(arrays.ordered(xp, x), axis=axis, stable=True)


def _arg_impl(name: str) -> Any:
    def impl(x: Any, axis: int) -> Any:
        xp = arrays.xp_of(x)
        return getattr(xp, name)(arrays.ordered(xp, x), axis=axis)

    impl.__name__ = f"_{name}_impl"
    return impl


argsort_p = declare(
    Primitive("argsort", _argsort_impl), zero_derivative=True, batch=batch_axis, aliasing="fresh"
)
argmax_p = declare(
    Primitive("argmax", _arg_impl("argmax")), zero_derivative=True, batch=batch_axis, aliasing="fresh"
)
argmin_p = declare(
    Primitive("argmin", _arg_impl("argmin")), zero_derivative=True, batch=batch_axis, aliasing="fresh"
)


def argsort(a: ArrayLike, axis: int | None = -1) -> Tensor:
    """Indices that sort `a` along `axis` (the flattened `a` for None), as numpy.argsort.

    Always a stable sort (ties keep their order). An integer result, not differentiable.
    """
    x = to_array_operand(a)
    if axis is None:
        x, axis = _flat(x), 0
    return wrap(bind(argsort_p, (x,), {"axis": _axis(axis, len(shape_of(x)))}))


def sort(a: ArrayLike, axis: int | None = -1) -> Tensor:
    """`a` sorted along `axis` (the flattened `a` for None), as numpy.sort.

    ``take_along_axis(a, argsort(a))``: differentiable, the cotangent goes back to
    each element's place before sorting.
    """
    x = to_array_operand(a)
    if axis is None:
        x, axis = _flat(x), 0
    axis = _axis(axis, len(shape_of(x)))
    return wrap(take_along_raw(x, bind(argsort_p, (x,), {"axis": axis}), axis))


def _arg_extreme(prim: Primitive, a: ArrayLike, axis: int | None, keepdims: bool) -> Tensor:
    x = to_array_operand(a)
    shape = shape_of(x)
    if axis is None:
        out = bind(prim, (_flat(x),), {"axis": 0})
        return wrap(reshape_raw(out, (1,) * len(shape)) if keepdims else out)
    axis = _axis(axis, len(shape))
    out = bind(prim, (x,), {"axis": axis})
    if keepdims:
        out = reshape_raw(out, shape[:axis] + (1,) + shape[axis + 1 :])
    return wrap(out)


def argmax(a: ArrayLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the largest element along `axis` (of the flattened `a` by default), as numpy.argmax.

    The first one on ties. An integer result, not differentiable.
    """
    return _arg_extreme(argmax_p, a, axis, keepdims)


def argmin(a: ArrayLike, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the smallest element along `axis` (of the flattened `a` by default), as numpy.argmin.

    The first one on ties. An integer result, not differentiable.
    """
    return _arg_extreme(argmin_p, a, axis, keepdims)


# -- moves: pad, roll, tile, repeat -------------------------------------------------------------


def _pairs(width: Any, nd: int, what: str) -> list[tuple[int, int]]:
    """numpy's (before, after) per axis, from an int, a pair, or one pair per axis."""
    w = np.asarray(width)
    if w.dtype.kind not in "iu" or w.ndim > 2:
        raise TypeError(f"{what} must be integers: an int, a (before, after) pair, or one pair per axis")
    try:
        pairs = np.broadcast_to(w, (nd, 2))
    except ValueError:
        raise ValueError(f"{what} {width!r} does not fit an array of {nd} dimensions") from None
    if (pairs < 0).any():
        raise ValueError(f"{what} cannot be negative, got {width!r}")
    return [(int(b), int(a)) for b, a in pairs]


_INDEX_MODES = ("edge", "reflect", "symmetric", "wrap")
_STAT_MODES = {"maximum": _max, "minimum": _min, "mean": mean, "median": None}
_MODE_KEYWORDS: dict[str, tuple[str, ...]] = {
    "constant": ("constant_values",),
    "empty": (),
    "edge": (),
    "wrap": (),
    "reflect": ("reflect_type",),
    "symmetric": ("reflect_type",),
    "linear_ramp": ("end_values",),
    **dict.fromkeys(_STAT_MODES, ("stat_length",)),
}


def pad(
    array: ArrayLike,
    pad_width: Any,
    mode: str = "constant",
    constant_values: ArrayLike | None = None,
    *,
    stat_length: Any = None,
    end_values: ArrayLike | None = None,
    reflect_type: str | None = None,
) -> Tensor:
    """`array` padded along every axis, as numpy.pad, in every mode of numpy's but a callable.

    ``"constant"`` (`constant_values`: one value, or numpy's pairs per axis and side; Tensors
    are differentiable too), ``"empty"`` (zeros, as JAX's: numpy leaves the values undefined),
    ``"edge"``, ``"wrap"``, ``"reflect"`` and ``"symmetric"`` (with numpy's `reflect_type`,
    ``"odd"`` reflecting through the edge value), ``"linear_ramp"`` (from `end_values` to the
    edge) and the statistics ``"maximum"``, ``"minimum"``, ``"mean"``, ``"median"`` of the
    `stat_length` elements next to each side (all of the axis by default; integer arrays get
    the rounded mean and median, as numpy's). Axes are padded in order, each from the array
    the ones before it made, as numpy does. Each mode is a composition of einad operations
    (concatenations, gathers, reductions), so it differentiates in every mode.

    Raises:
        NotImplementedError: For a callable `mode`.
        ValueError: For a mode numpy.pad does not have, a keyword the mode does not take, a
            `stat_length` of 0, or an empty axis padded in any mode but ``"constant"`` and
            ``"empty"``.
    """
    x = to_array_operand(array)
    s = shape_of(x)
    pairs = _pairs(pad_width, len(s), "pad_width")
    if callable(mode):
        raise NotImplementedError("einad.pad: a callable mode is not supported (numpy's padding function)")
    if mode not in _MODE_KEYWORDS:
        raise ValueError(
            f"pad: mode {mode!r} is not a mode of numpy.pad; use one of {', '.join(_MODE_KEYWORDS)}"
        )
    given = {"constant_values": constant_values, "stat_length": stat_length, "end_values": end_values}
    given["reflect_type"] = reflect_type
    extra = sorted(k for k, v in given.items() if v is not None and k not in _MODE_KEYWORDS[mode])
    if extra:  # (numpy's message)
        raise ValueError(f"unsupported keyword arguments for mode '{mode}': {set(extra)}")
    if mode in ("constant", "empty"):
        values = _side_values(0 if constant_values is None else constant_values, x, len(s), "constant_values")
        for axis, (before, after) in enumerate(pairs):
            x = _join(x, axis, values(axis, 0), before, values(axis, 1), after)
        return wrap(x)
    for axis, (before, after) in enumerate(pairs):
        if (before or after) and s[axis] == 0:  # (numpy's message, with the axis of `array`)
            raise ValueError(f"can't extend empty axis {axis} using modes other than 'constant' or 'empty'")
    x = wrap(x)  # (the compositions below as Tensor arithmetic: any library's arrays, traced or not)
    if mode == "linear_ramp":
        ends = _side_values(0 if end_values is None else end_values, x, len(s), "end_values")
        for axis, (before, after) in enumerate(pairs):
            x = _ramps(x, axis, ends(axis, 0), before, ends(axis, 1), after)
        return wrap(x)
    if mode in _STAT_MODES:
        lengths = _stat_lengths(stat_length, len(s))
        for axis, (before, after) in enumerate(pairs):
            n = shape_of(x)[axis]
            stats = [
                _stat(mode, x, axis, n if k is None else min(k, n), side)
                for side, k in enumerate(lengths[axis])
            ]
            x = _join(x, axis, stats[0], before, stats[1], after)
        return wrap(x)
    if reflect_type not in (None, "even", "odd"):
        raise ValueError(f"pad: reflect_type must be 'even' or 'odd', got {reflect_type!r}")
    for axis, (before, after) in enumerate(pairs):
        if not (before or after):
            continue
        if reflect_type == "odd" and shape_of(x)[axis] > 1:
            x = _reflect_odd(x, axis, before, after, include_edge=mode == "symmetric")
            continue
        source = np.pad(np.arange(shape_of(x)[axis]), (before, after), mode=mode)  # type: ignore[call-overload]
        x = take(x, source, axis=axis)
    return wrap(x)


def _side_values(values: Any, like: Any, nd: int, what: str) -> Callable[[int, int], Any]:
    """numpy's per-axis, per-side values (a scalar, or pairs broadcast to ``(nd, 2)``), in the
    array's dtype: ``value(axis, side)``."""
    c = to_array_operand(values, like=like)
    c = wrap(astype(c, dtype_of(like)))  # numpy casts the value to the array's dtype
    if shape_of(c) == ():
        return lambda axis, side: c
    try:
        np.broadcast_shapes(shape_of(c), (nd, 2))
    except ValueError:
        raise ValueError(f"{what} of shape {shape_of(c)} does not fit an array of {nd} dimensions") from None
    both = broadcast_raw(c, (nd, 2))
    return lambda axis, side: getitem_raw(both, (axis, side))


def _stat_lengths(stat_length: Any, nd: int) -> list[tuple[int | None, int | None]]:
    if stat_length is None:
        return [(None, None)] * nd
    pairs = _pairs(stat_length, nd, "stat_length")
    if any(0 in pair for pair in pairs):  # (numpy's message)
        raise ValueError("stat_length of 0 yields no value for padding")
    return [(b, a) for b, a in pairs]


def _block(value: Any, x: Any, axis: int, width: int) -> Any:
    """`value` (a scalar, or `x`'s shape with 1 along `axis`) spread over `width` along `axis`."""
    shape = shape_of(x)
    return broadcast_raw(value, shape[:axis] + (width,) + shape[axis + 1 :])


def _join(x: Any, axis: int, left: Any, before: int, right: Any, after: int) -> Any:
    """`x` with `left` spread over `before` places in front along `axis`, `right` over `after` behind."""
    if not (before or after):
        return x
    parts = [_block(left, x, axis, before)] if before else []
    parts.append(x)
    if after:
        parts.append(_block(right, x, axis, after))
    return concatenate(parts, axis=axis)


def _along(x: Any, axis: int, start: int, stop: int) -> Tensor:
    """``x[..., start:stop, ...]`` along `axis`, as a Tensor (for the arithmetic around it)."""
    return wrap(getitem_raw(x, (slice(None),) * axis + (slice(start, stop),)))


def _stat(mode: str, x: Any, axis: int, length: int, side: int) -> Any:
    """The statistic `mode` of the `length` elements at one end of `axis` (kept as an axis of 1),
    in `x`'s dtype (integers: the mean and median rounded, as numpy's)."""
    n = shape_of(x)[axis]
    region = _along(x, axis, 0, length) if side == 0 else _along(x, axis, n - length, n)
    if mode == "median":
        ordered = sort(region, axis=axis)
        low, high = (length - 1) // 2, length // 2
        stat: Any = _along(ordered, axis, low, low + 1)
        if high != low:
            stat = (stat + _along(ordered, axis, high, high + 1)) / 2
        if dtype_of(x).kind in "fc":  # numpy's median is nan where the lane holds one (sorted last)
            last = _along(ordered, axis, length - 1, length)
            stat = where_raw(bind(PRIMITIVES["isnan"], (last,), {}), last, stat)
    else:
        stat = _STAT_MODES[mode](region, axis, keepdims=True)  # type: ignore[misc]
    if dtype_of(x).kind in "iub" and dtype_of(stat).kind not in "iub":
        stat = bind(PRIMITIVES["round"], (stat,), {})
    return astype(stat, dtype_of(x))


def _ramps(x: Any, axis: int, start: Any, before: int, stop: Any, after: int) -> Any:
    """numpy's linear ramps: from `start` to the first element over `before` places, and from
    the last element to `stop` over `after` (each ``linspace(end, edge, width, endpoint=False)``,
    the one behind reversed; integers rounded down, as numpy's linspace into an integer dtype)."""
    n = shape_of(x)[axis]
    parts = [_ramp(x, axis, start, before, 0, True)] if before else []
    parts.append(x)
    if after:
        parts.append(_ramp(x, axis, stop, after, n - 1, False))
    return concatenate(parts, axis=axis) if len(parts) > 1 else x


def _ramp(x: Any, axis: int, end: Any, width: int, edge: int, forward: bool) -> Any:
    """One side's ramp between `end` and the element at `edge` (see `_ramps`)."""
    nd, dt = len(shape_of(x)), dtype_of(x)
    steps = np.arange(width) if forward else np.arange(width - 1, -1, -1)
    frac = (steps / width).reshape((1,) * axis + (width,) + (1,) * (nd - axis - 1))
    frac = lib_array(x, frac.astype(dt if dt.kind in "fc" else np.float64))
    ramp = end + (_along(x, axis, edge, edge + 1) - end) * frac
    if dt.kind in "iub":
        ramp = bind(PRIMITIVES["floor"], (ramp,), {})
    return astype(ramp, dt)


def _reflect_odd(x: Any, axis: int, before: int, after: int, include_edge: bool) -> Any:
    """numpy's odd reflection (``2 * edge - mirrored``): chunks no longer than the part already
    filled, each reflected through the edge of what is there so far, as numpy.pad fills them."""
    period = shape_of(x)[axis]
    offset = 1 if include_edge else 0
    while before or after:
        n = shape_of(x)[axis]
        filled = n // period * period if include_edge else (n - 1) // (period - 1) * (period - 1)
        parts = []
        if before:
            chunk = min(filled, before)
            mirrored = take(x, np.arange(chunk - offset, -offset, -1), axis=axis)
            parts.append(-mirrored + 2 * _along(x, axis, 0, 1))
            before -= chunk
        parts.append(x)
        if after:
            chunk = min(filled, after)
            mirrored = take(x, n - 1 - np.arange(1 - offset, chunk + 1 - offset), axis=axis)
            parts.append(-mirrored + 2 * _along(x, axis, n - 1, n))
            after -= chunk
        x = concatenate(parts, axis=axis)
    return x


def roll(a: ArrayLike, shift: int | Sequence[int], axis: int | Sequence[int] | None = None) -> Tensor:
    """Elements shifted cyclically by `shift` along `axis` (of the flattened `a` by default),
    as numpy.roll: two slices joined the other way round (linear)."""
    x = to_array_operand(a)
    shape = shape_of(x)
    if axis is None:
        return wrap(reshape_raw(roll(_flat(x), shift, 0), shape))
    shifts, axes = np.broadcast_arrays(np.asarray(shift), np.asarray(axis))
    out: Value = x
    for k, ax in zip(shifts.ravel(), axes.ravel()):
        ax = _axis(int(ax), len(shape))
        n = shape[ax]
        k = int(k) % n if n else 0
        if k:
            head = (slice(None),) * ax
            out = concatenate(
                [getitem(out, head + (slice(n - k, None),)), getitem(out, head + (slice(0, n - k),))], ax
            )
    return wrap(out)


def tile(a: ArrayLike, reps: int | Sequence[int]) -> Tensor:
    """`a` repeated `reps` times along each axis, as numpy.tile: a reshape, a broadcast
    (one `spread`, whose VJP is an einsum summing the copies) and a reshape.

    Raises:
        TypeError: If a count is not an integer (numpy's refusal: never truncated).
        ValueError: If a count is negative.
    """
    x = to_array_operand(a)
    # a number, a sequence or an array (0-d too) of them, as numpy takes them
    r = tuple(integer(k, "tile: each of reps") for k in np.asarray(reps, dtype=object).reshape(-1))
    if any(k < 0 for k in r):
        raise ValueError(f"tile: reps cannot be negative, got {reps!r}")
    s = shape_of(x)
    nd = max(len(r), len(s))
    s = (1,) * (nd - len(s)) + s
    r = (1,) * (nd - len(r)) + r
    x = reshape_raw(x, tuple(d for n in s for d in (1, n)))
    x = broadcast_raw(x, tuple(d for k, n in zip(r, s) for d in (k, n)))
    return wrap(reshape_raw(x, tuple(k * n for k, n in zip(r, s))))


def repeat(a: ArrayLike, repeats: int | Sequence[int], axis: int | None = None) -> Tensor:
    """Each element repeated `repeats` times along `axis` (of the flattened `a` by default),
    as numpy.repeat. One count for all: a broadcast; one count per element: a gather."""
    x = to_array_operand(a)
    if axis is None:
        x, axis = _flat(x), 0
    s = shape_of(x)
    axis = _axis(axis, len(s))
    counts = np.asarray(repeats)
    if counts.dtype.kind not in "iu" or (counts < 0).any():
        raise ValueError(f"repeat: repeats must be non-negative integers, got {repeats!r}")
    if counts.size == 1:
        k = int(counts.reshape(()))
        x = reshape_raw(x, s[: axis + 1] + (1,) + s[axis + 1 :])
        x = broadcast_raw(x, s[: axis + 1] + (k,) + s[axis + 1 :])
        return wrap(reshape_raw(x, s[:axis] + (s[axis] * k,) + s[axis + 1 :]))
    if counts.shape != (s[axis],):
        raise ValueError(f"repeat: {counts.size} counts for an axis of length {s[axis]}")
    return take(x, np.repeat(np.arange(s[axis]), counts), axis=axis)


def diff(
    a: ArrayLike,
    n: int = 1,
    axis: int = -1,
    prepend: ArrayLike | None = None,
    append: ArrayLike | None = None,
) -> Tensor:
    """The `n`-th forward differences along `axis`, as numpy.diff: ``a[1:] - a[:-1]`` (of
    booleans, ``!=``), `n` times, after `prepend` and `append` are joined on (a number is
    broadcast to one slice). Linear in `a`: its derivative is the differences' transpose."""
    x = to_array_operand(a)
    shape = shape_of(x)
    if not shape:
        raise ValueError("diff requires input that is at least one dimensional")
    n = integer(n, "diff: n")
    if n < 0:
        raise ValueError(f"order must be non-negative but got {n}")
    ax = normalize_axes(axis, len(shape))[0]

    def slab(extra: ArrayLike) -> Any:  # a number is broadcast to one slice along the axis
        e = to_array_operand(extra, like=x)
        return e if shape_of(e) else broadcast_raw(e, (*shape[:ax], 1, *shape[ax + 1 :]))

    parts = [x]
    if prepend is not None:
        parts.insert(0, slab(prepend))
    if append is not None:
        parts.append(slab(append))
    if len(parts) > 1:
        x = concatenate(parts, axis=ax)
    lead = (slice(None),) * ax
    for _ in range(n):
        later, earlier = getitem_raw(x, (*lead, slice(1, None))), getitem_raw(x, (*lead, slice(None, -1)))
        boolean = dtype_of(x) == np.bool_  # numpy's diff of booleans: whether they differ
        x = compare("not_equal", later, earlier) if boolean else apply2("subtract", later, earlier)
    return wrap(x)


# -- functional index updates: x.at[idx].set(v), .add(v), .multiply(v), .min(v), ... ------------


class IndexUpdate:
    """What ``x.at`` returns: index it to name the elements to update (JAX's `.at`)."""

    __slots__ = ("_x",)

    def __init__(self, x: ArrayLike) -> None:
        self._x = x

    def __getitem__(self, index: Any) -> IndexedUpdate:
        return IndexedUpdate(self._x, index)


def _check_hints(hints: dict[str, Any]) -> None:
    """JAX's `.at` keywords: `indices_are_sorted` and `unique_indices` are hints that change
    nothing here; of the modes only the default is offered (an index out of range is an
    IndexError), never JAX's clipping, dropping or filling."""
    unknown = set(hints) - {"indices_are_sorted", "unique_indices", "mode"}
    if unknown:
        raise TypeError(f"x.at[...] got unexpected keyword arguments {sorted(unknown)}")
    mode = hints.get("mode")
    if mode not in (None, "promise_in_bounds"):
        raise NotImplementedError(
            f"x.at[...] with mode={mode!r}: einad raises IndexError for an index out of range "
            "(clip or filter the index first)"
        )


def _fitted(x: Value, value: Value, places: Shape) -> Value | None:
    """`value` as numpy's assignment writes it into places of shape `places` of `x`: its leading
    size-1 axes dropped and cast to `x`'s dtype, broadcasting to `places` (None where it does
    not: the caller says why); a complex value into a real `x` is a TypeError."""
    if dtype_of(value).kind == "c" and dtype_of(x).kind != "c":
        raise TypeError(f"cannot write complex values into a tensor of dtype {dtype_of(x)}")
    vs = shape_of(value)
    lead = max(len(vs) - len(places), 0)
    if any(d != 1 for d in vs[:lead]) or any(d not in (1, p) for d, p in zip(vs[::-1], places[::-1])):
        return None
    value = reshape_raw(value, vs[lead:])
    if isinstance(value, (int, float, complex)):
        fitted: Value = lib_array(x, np.asarray(value, dtype_of(x)))
        return fitted
    return astype(value, dtype_of(x))


class IndexedUpdate:
    """``x.at[index]``: each method returns a new tensor; `x` is never modified.

    `set` and `add` take an index computed inside `einad.jit` or mapped by `vmap` (a scatter of
    the program); `multiply`, `divide`, `power`, `min`, `max` and `apply` take such an index
    when it is integers only (no index array, so no place is written twice).
    """

    __slots__ = ("_index", "_x")

    def __init__(self, x: ArrayLike, index: Any) -> None:
        self._x = x
        self._index = index

    def _prepare(self, v: ArrayLike) -> tuple[Value, Any, Shape, Value, list[Value] | None]:
        """`x`, the index (a template with slots where its traced arrays go, see
        `shape.traced_index`), x's shape, `v` broadcast to the indexed places, and the traced
        index arrays (None when there are none)."""
        x = to_array_operand(self._x)
        shape = shape_of(x)
        traced = _gather_template(shape, self._index)
        idx: list[Value] | None = None
        if traced is not None:
            index, idx, target = traced
        else:
            index = _clean_index(self._index)
            target = _ghost(shape)[index].shape  # numpy's IndexError here, at the user's call
        value = to_operand(v)
        arrays.namespace(raw(x), raw(value))  # values of another library: TypeError naming both
        fitted = _fitted(x, value, target)
        if fitted is None:
            vs = shape_of(value)
            raise ValueError(f"could not broadcast input array from shape {vs} into shape {target}")
        return x, index, shape, broadcast_raw(fitted, target), idx

    def _masked(self, v: ArrayLike) -> tuple[Value, Value, Value] | None:
        """For an index that is one boolean mask computed inside `einad.jit` or mapped by `vmap`
        (its places known only when the program runs, or per example): `x`, the mask with an
        axis of size 1 for each axis of `x` it does not cover, and `v` cast to `x`'s dtype, so
        that ``x.at[mask].set(v)`` is ``where(mask, v, x)`` (``.add``: ``x + where(mask, v,
        0)``), as in JAX. `v` is then one value for every selected place: a scalar, or an array
        of the shape one selected place has (numpy's assignment of a value per place needs the
        count of places). None for every other index."""
        mask = self._index[0] if type(self._index) is tuple and len(self._index) == 1 else self._index
        if not (traced_index(mask) and dtype_of(mask).kind == "b"):
            return None
        x = to_array_operand(self._x)
        shape, covered = shape_of(x), shape_of(mask)
        if shape[: len(covered)] != covered:
            raise IndexError(
                f"boolean index of shape {covered} does not match the indexed array's leading "
                f"dimensions {shape[: len(covered)]}"
            )
        place = shape[len(covered) :]
        value = to_operand(v)
        fitted = _fitted(x, value, place)
        if fitted is None:
            raise TracerError(
                f"x.at[mask] with a boolean mask computed inside einad.jit (or mapped by vmap) writes "
                f"one value to every selected place, of shape {place} or one that broadcasts to it; "
                f"got a value of shape {shape_of(value)}, one per place, whose count is known only "
                "when the program runs. Write ea.where(mask, v, x) with v of x's shape"
            )
        return x, reshape_raw(mask, covered + (1,) * len(place)), fitted

    def get(self, **hints: Any) -> Tensor:
        """``x[index]``."""
        _check_hints(hints)
        return getitem(self._x, self._index)

    def add(self, v: ArrayLike, **hints: Any) -> Tensor:
        """A copy of `x` with `v` added at `index` (repeated indices add repeatedly).

        Differentiable in `x` (the identity) and in `v` (gathered from the cotangent). The
        index may be computed inside `einad.jit` or mapped by `vmap` (see `getitem`): a
        scatter-add of the program, whose index is checked when it runs.
        """
        _check_hints(hints)
        masked = self._masked(v)
        if masked is not None:
            x, mask, v = masked
            return wrap(x + where_raw(mask, v, zeros_scalar(v)))
        x, index, shape, v, idx = self._prepare(v)
        if idx is not None:
            return wrap(x + gather_scatter_raw(v, idx, index, shape))
        return wrap(x + scatter_raw(v, index, shape))

    def set(self, v: ArrayLike, **hints: Any) -> Tensor:
        """A copy of `x` with `v` written at `index` (where an index repeats, the last write wins,
        as numpy's assignment, also for an index computed inside `einad.jit` or mapped by `vmap`).

        Differentiable in `x` (zero at the written places) and in `v` (the cotangent at each
        place goes to the write that stays there).
        """
        _check_hints(hints)
        masked = self._masked(v)
        if masked is not None:
            x, mask, v = masked
            return wrap(where_raw(mask, v, x))
        x, index, shape, v, idx = self._prepare(v)
        if idx is not None:
            return wrap(_traced_set(x, index, shape, v, idx))
        if _has_int_array(index):
            v = where_raw(lib_array(x, last_writes(shape, index)), v, zeros_scalar(v))
        return wrap(_write(x, index, shape, v))

    def multiply(self, v: ArrayLike, **hints: Any) -> Tensor:
        """A copy of `x` with the elements at `index` multiplied by `v` (where an index repeats,
        by each of its values in turn, as ``numpy.multiply.at``); differentiable in `x` and `v`."""
        _check_hints(hints)
        return combined(self, v, lambda a, b: apply2("multiply", a, b))

    def divide(self, v: ArrayLike, **hints: Any) -> Tensor:
        """A copy of `x` with the elements at `index` divided by `v` (in turn where an index
        repeats); the quotient is cast to `x`'s dtype, as JAX's."""
        _check_hints(hints)
        return combined(self, v, lambda a, b: apply2("divide", a, b))

    def power(self, v: ArrayLike, **hints: Any) -> Tensor:
        """A copy of `x` with the elements at `index` raised to the power `v` (in turn where an
        index repeats)."""
        _check_hints(hints)
        return combined(self, v, lambda a, b: apply2("power", a, b))

    def min(self, v: ArrayLike, **hints: Any) -> Tensor:
        """A copy of `x` with each element at `index` replaced by its minimum with `v` (with all
        of its values where an index repeats); ties share the gradient, as `minimum`'s."""
        _check_hints(hints)
        return combined(self, v, lambda a, b: apply2("minimum", a, b))

    def max(self, v: ArrayLike, **hints: Any) -> Tensor:
        """A copy of `x` with each element at `index` replaced by its maximum with `v` (with all
        of its values where an index repeats); ties share the gradient, as `maximum`'s."""
        _check_hints(hints)
        return combined(self, v, lambda a, b: apply2("maximum", a, b))

    def apply(
        self,
        func: Callable[[Tensor], ArrayLike],
        **hints: Any,
    ) -> Tensor:
        """A copy of `x` with the elementwise `func` applied at `index` (once for each time an
        index names a place, as ``numpy.negative.at``); `func` sees only the selected elements."""
        _check_hints(hints)
        if not callable(func):
            raise TypeError(f"x.at[...].apply takes a function, got {type(func).__name__}")
        x = to_array_operand(self._x)
        return combined(self, zeros_scalar(x), lambda a, _: to_operand(func(wrap(a))))


def combined(update: IndexedUpdate, v: ArrayLike, op: Callable[[Value, Value], Value]) -> Tensor:
    """``x.at[index]`` (`update`) with ``x[index] = op(x[index], v)``, one round for each time a
    place is named again (the rounds write distinct places, so each is a gather, `op` and a
    write): the updates ``multiply`` to ``apply`` are this with one elementwise `op`, and so
    is numpy's ``ufunc.at`` with any binary ufunc (`numpy_api`)."""
    x, index, shape, v, idx = update._prepare(v)
    dtype = dtype_of(x)
    if idx is not None:
        if any(shape_of(i) for i in idx) or _has_int_array(index):
            raise TracerError(
                "x.at[index] with an index array computed inside einad.jit or mapped by vmap "
                "takes .set, .add and .get only (the places it writes twice are known only when "
                "it runs); compute the index outside the transformation"
            )
        new = astype(op(gather_raw(x, idx, index), v), dtype)
        return wrap(_traced_set(x, index, shape, new, idx))
    rounds = _write_rounds(shape, index)
    if rounds is None:  # no place named twice: one round on the index as given
        return wrap(_write(x, index, shape, astype(op(getitem_raw(x, index), v), dtype)))
    flat, values = reshape_raw(x, (-1,)), reshape_raw(v, (-1,))
    size = (math.prod(shape),)
    for places, writes in rounds:
        new = op(getitem_raw(flat, (places,)), getitem_raw(values, (writes,)))
        flat = _write(flat, (places,), size, astype(new, dtype))
    return wrap(reshape_raw(flat, shape))


def _write_rounds(shape: Shape, index: Any) -> list[tuple[Array, Array]] | None:
    """The writes of ``x[index]``, in rounds that name distinct places: round k holds each
    place's k-th write, as (flat places, positions in the flattened ``x[index]``); None when no
    place is named twice."""
    if not _has_int_array(index):
        return None
    flat = index_places(shape, index).ravel()
    if flat.size == 0:
        return None
    order = np.argsort(flat, kind="stable")  # each place's writes together, in their order
    ordered, k = flat[order], np.arange(flat.size)
    first = np.maximum.accumulate(np.where(np.r_[True, ordered[1:] != ordered[:-1]], k, 0))
    rank = np.empty(flat.size, dtype=np.int64)
    rank[order] = k - first  # how many earlier writes name the same place
    if rank.max() == 0:
        return None
    return [(flat[rank == k], np.flatnonzero(rank == k)) for k in range(int(rank.max()) + 1)]


def _write(x: Value, index: Any, shape: Shape, v: Value) -> Value:
    """`x` with `v` written at `index`, which names each place once: differentiable in `x` (zero
    at the written places) and in `v`."""
    keep = np.ones(shape, dtype=bool)
    keep[index] = False
    return where_raw(lib_array(x, keep), x, zeros_scalar(x)) + scatter_raw(v, index, shape)


def _traced_set(x: Value, index: tuple[Any, ...], shape: Shape, v: Value, idx: list[Value]) -> Value:
    """``x.at[index].set(v)`` for an index with traced arrays `idx`: the places written are those
    a scatter of ones reaches, and only the last write of a repeated place scatters its value."""
    if any(shape_of(i) for i in idx) or _has_int_array(index):  # (integers alone cannot repeat)
        v = where_raw(bind(last_writes_p, idx, {"index": index, "shape": shape}), v, zeros_scalar(v))
    ones = lib_array(x, np.ones(shape_of(v), dtype=np.int64))
    written = astype(gather_scatter_raw(ones, idx, index, shape), np.bool_)
    return where_raw(written, zeros_scalar(x), x) + gather_scatter_raw(v, idx, index, shape)
