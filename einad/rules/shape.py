"""Structural primitives below the einsum: reshape, astype, getitem and its transpose
(scatter-add), stop_gradient and ones_like.

Each is linear in its array operand, so each rule is the operation's transpose (VJP) and
the operation itself applied to the tangent (JVP). They use no contraction, which is why the
einsum module can build on them (reshaping a squeezed operand, casting a cotangent back).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import arrays
from ..aliases import Array, Axis, DTypeLike, Shape
from ..core import (
    Aliasing,
    ArrayLike,
    BatchRule,
    Params,
    Primitive,
    Staged,
    Tensor,
    Value,
    bind,
    contiguous,
    declare,
    layout_view,
    mapped,
    reshape_strides,
    ride_along,
    strip,
    view,
)
from ..errors import TracerError
from ..strides import Strides, reshaped
from ..util import (
    dtype_of,
    integer,
    lib_array,
    normalize_axes,
    shape_of,
    to_array_operand,
    wrap,
)


def _shape_only(needed: list[bool]) -> tuple[tuple[bool, ...], bool]:
    """The `keep_rules` entry of a linear op: its rule reads only shapes and dtypes."""
    return (False,) * len(needed), False


def _linear(
    prim: Primitive,
    transpose: Callable[[Any, Any, Params], Any],
    apply: Callable[[Any, Params], Any],
    *,
    aliasing: Aliasing,
    batch: BatchRule,
) -> None:
    """Declare a one-operand linear primitive: its VJP is its transpose, its JVP itself."""
    declare(
        prim,
        vjp=lambda g, ans, vals, p, needed: [transpose(g, vals[0], p)],
        jvp=lambda ts, ans, vals, p: apply(ts[0], p),
        keep=_shape_only,
        batch=batch,
        aliasing=aliasing,
        linear=True,
    )


# -- stop_gradient: the identity, with derivative zero in every mode ---------------

stop_gradient_p = declare(
    Primitive("stop_gradient", lambda x: x), zero_derivative=True, batch=ride_along, aliasing="view"
)


def stop_gradient(x: Any) -> Any:
    """`x` with a zero derivative (internal: a raw value passes through untouched)."""
    return bind(stop_gradient_p, (x,), {}) if type(x) is Tensor and x._trace is not None else x


# -- ones_like: the seed of a gradient ------------------------------------------------

ones_like_p = declare(
    Primitive("ones_like", lambda x: arrays.ones(x, shape_of(x), dtype_of(x))),
    zero_derivative=True,
    batch=ride_along,
    aliasing="fresh",
)


def ones_like(x: Any) -> Any:
    """Ones of `x`'s shape and dtype: an array, or an equation where `x` is staged (a program's
    gradient seed stays symbolic, so its optimizer sees the ones)."""
    if type(x) is Tensor and x._trace is not None:
        # under differentiating traces alone the ones are a constant (each trace's `process`
        # would hand them on as they are): made here from the value beneath, without binding
        v: Any = x
        while type(v) is Tensor:
            t = v._trace
            if t is not None and (t.dead or t.kind not in ("reverse", "forward")):
                # a batched or staged value beneath (or a leaked one: bind says so): the primitive
                return bind(ones_like_p, (x,), {})
            v = v._value
        x = v
    if type(x) is np.ndarray or isinstance(x, np.generic):  # (a gradient's seed: numpy's constructors)
        return np.array(1, dtype=x.dtype) if x.shape == () else np.ones(x.shape, dtype=x.dtype)
    return arrays.ones(x, shape_of(x), dtype_of(x))


# -- reshape ---------------------------------------------------------------------


def _reshape_impl(x: Any, shape: Shape) -> Any:
    xp = arrays.xp_of(x)
    if xp is np:
        return np.reshape(x, shape)
    if 0 in shape_of(x):  # nothing to move (dask's reshape fails on an empty array)
        return arrays.zeros(x, _resolve_shape(0, shape), dtype_of(x))
    try:
        return xp.reshape(x, shape)
    except NotImplementedError:  # dask reshapes only by merging or splitting axes: merge all, then split
        return xp.reshape(xp.reshape(x, (-1,)), shape)


reshape_p = Primitive("reshape", _reshape_impl)


def reshape_raw(x: Value, shape: Sequence[int]) -> Value:
    if shape_of(x) == tuple(shape):
        return x
    return bind(reshape_p, (x,), {"shape": tuple(shape)})


def _batch_reshape(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, {**params, "shape": (size,) + tuple(params["shape"])})


_linear(
    reshape_p,
    lambda g, x, p: reshape_raw(g, shape_of(x)),
    lambda t, p: reshape_raw(t, p["shape"]),
    aliasing="may_view",  # numpy's reshape copies only what it cannot view
    batch=_batch_reshape,
)


def _ghost(shape: int | Sequence[int]) -> Array:
    """A zero-memory int8 array of `shape`, to let numpy check shapes and axes."""
    return np.broadcast_to(np.zeros((), dtype=np.int8), shape)


def _resolve_shape(size: int, shape: Sequence[int]) -> Shape:
    shape = tuple(integer(d, "a shape's size") for d in shape)
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"invalid shape {shape}: at most one -1 and no other negative size")
    known = math.prod(d for d in shape if d != -1)  # exact: an int64 product could overflow and wrap
    if -1 in shape:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif known != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
    return shape


def reshape(x: ArrayLike, shape: int | Sequence[int], *, view: bool = True) -> Tensor:
    """The same elements in a new shape, as numpy.reshape (C order): of a Tensor, a view, which
    a write into reaches the Tensor, where numpy's reshape is one (by the strides numpy would
    give the Tensor, `core.reshape_strides`: a tensor of its own, ``x[0]``, ``x.T.T``; not ``x.T``);
    ``view=False``: not a view (numpy's ``flatten``; of the same shape, `x` itself).

    One dimension of `shape` may be -1: it is inferred from the size.

    Raises:
        ValueError: If the size does not fit `shape`.
    """
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    new = _resolve_shape(math.prod(shape_of(x)), tuple(shape))
    views = view and (type(x) is not Tensor or reshape_strides(x, new) is not None)
    return _reshaped(x, new, views)


def ravel(x: ArrayLike) -> Tensor:
    """The elements as a 1-D Tensor in C order, as numpy.ravel: of a Tensor that lies in C
    order (`core.contiguous`), a view; else a tensor of its own (where numpy's
    ``reshape(-1)`` may still be a view: ``x[:, ::2]``)."""
    return _reshaped(x, (math.prod(shape_of(x)),), type(x) is not Tensor or contiguous(x))


def _reshaped(x: ArrayLike, new: Shape, views: bool) -> Tensor:
    """`x` in the shape `new` (of `x`'s size, no -1); a view of a Tensor `x` where `views`
    (`core.layout_view`): numpy's reshape views an array whose strides allow it, its squeeze
    and expand_dims any array."""
    base, x = x, to_array_operand(x)
    xs = shape_of(x)
    out = wrap(reshape_raw(x, new))
    if not views:
        return out

    def strides(s: Strides) -> Strides:
        placed = reshaped(xs, s, new)
        assert placed is not None, "a reshape is a view only where numpy's is"
        return placed

    look, back = (lambda b: reshape(b, new)), (lambda r: reshape(r, xs))
    return layout_view(out, base, look, back, strides)


def expand_dims(x: ArrayLike, axis: int | Sequence[int]) -> Tensor:
    """Insert size-1 axes at the positions `axis`, as numpy.expand_dims (of a Tensor, a view)."""
    base, x = x, to_array_operand(x)
    if axis is None:
        raise TypeError("expand_dims: axis must be an integer or a tuple of integers, not None")
    n = len(axis) if isinstance(axis, (list, tuple, range, np.ndarray)) else 1
    axes = normalize_axes(axis, len(shape_of(x)) + n)  # positions in the result
    rest = iter(shape_of(x))
    return _reshaped(base, tuple(1 if a in axes else next(rest) for a in range(len(shape_of(x)) + n)), True)


def squeeze(x: ArrayLike, axis: Axis = None) -> Tensor:
    """Drop size-1 axes (those in `axis`, or all of them), as numpy.squeeze (of a Tensor, a view)."""
    base, x = x, to_array_operand(x)
    axes = normalize_axes(axis, len(shape_of(x)))
    if axis is None:
        axes = tuple(a for a in axes if shape_of(x)[a] == 1)
    for a in axes:
        if shape_of(x)[a] != 1:
            raise ValueError(f"squeeze: axis {a} has size {shape_of(x)[a]}, not 1")
    return _reshaped(base, tuple(d for a, d in enumerate(shape_of(x)) if a not in axes), True)


# -- astype ---------------------------------------------------------------------------------


def _astype_impl(x: Any, dtype: DTypeLike) -> Any:
    xp = arrays.xp_of(x)
    if xp is np:
        x = np.asarray(x)
        if x.dtype.kind == "c" and np.dtype(dtype).kind not in "bc":  # to bool: nonzero, as numpy
            x = x.real
        return x.astype(dtype)
    dt = np.dtype(dtype)
    if dtype_of(x).kind == "c" and dt.kind != "c":
        if dt.kind == "b":  # the standard casts no complex to bool
            return x != 0
        x = xp.real(x)
    return xp.astype(x, arrays.lib_dtype(xp, dt))


astype_p = Primitive("astype", _astype_impl)


def astype(x: Value, dtype: DTypeLike) -> Value:
    """`x` cast to `dtype` (returned unchanged if it has that dtype); the cotangent is cast back.

    A cast to an integer or boolean dtype has derivative zero, as in JAX: its values
    move in steps, and a float cotangent cast to an integer would be truncated.
    """
    dtype = np.dtype(dtype)
    if dtype_of(x) == dtype:
        return x
    if dtype.kind in "biu" and dtype_of(x).kind in "fc":
        x = stop_gradient(x)
    return bind(astype_p, (x,), {"dtype": dtype})


def _astype_back(g: Any, x: Any, p: Params) -> Any:
    return astype(g, dtype_of(x))


_linear(astype_p, _astype_back, lambda t, p: astype(t, p["dtype"]), aliasing="fresh", batch=ride_along)


# -- indexing -------------------------------------------------------------------------------


def traced_index(i: Any) -> bool:
    """Whether an index item is known only per call or per example: a value staged by
    `einad.jit` (or `make_graph`), or mapped by `vmap`. Integer ones are operands of a gather
    or a scatter (`_gather_template`); every other index is a static parameter."""
    return type(i) is Tensor and (mapped(i) or type(strip(i)) is Staged)


def _refuse_traced(i: Any) -> Exception:
    """The error for a traced index item that cannot be an operand: a boolean mask (the
    result's shape would depend on its values), or an array of another dtype (numpy's IndexError)."""
    dt = dtype_of(i)
    if dt.kind != "b":
        return IndexError(f"arrays used as indices must be of integer or boolean type, not {dt}")
    if mapped(i):
        return IndexError(
            f"an index mapped by vmap must be an integer array, not {dt} "
            "(a boolean mask would give each example its own shape)"
        )
    return TracerError(
        "indexing with a boolean mask computed inside einad.jit (or make_graph): the result's "
        "shape would depend on the mask's values, which are not known when the program is built. "
        "Select with ea.where(mask, x, 0) (a result of x's shape), or compute the mask outside "
        "the jitted function (static_argnums)"
    )


def _clean_index(index: Any) -> Any:
    """Make an index free of Tensors; integer arrays stay arrays (a static parameter)."""
    if isinstance(index, tuple):
        return tuple(_clean_index(i) for i in index)
    if type(index) is Tensor:
        if traced_index(index):  # (an integer one is a gather's operand: `_gather_template`)
            raise _refuse_traced(index)
        index = strip(index)
    if arrays.is_array(index) and not isinstance(index, np.ndarray):
        index = arrays.to_numpy(index)  # another library's array: static data, as a list is (dask: computed)
    if isinstance(index, list):
        index = np.asarray(index)
    if isinstance(index, np.ndarray) and index.dtype.kind not in "biu":
        raise IndexError(f"arrays used as indices must be of integer or boolean type, not {index.dtype}")
    return index


def _has_int_array(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, np.ndarray) and i.dtype.kind in "iu" for i in items)


# On numpy, indexing is numpy's. On the other libraries (the standard indexes with integers and
# slices, strictly only when every axis is named; one integer array in `take`; torch has no
# negative steps; dask no multi-array indexes), einad computes numpy's semantics itself:
# - a basic index (integers, slices, None, Ellipsis): a key naming every axis with integers
#   and positive-step slices, then `flip` along the negative-step slices' axes, then a reshape
#   for the None axes; its transpose writes the cotangent into zeros (`__setitem__` on a fresh
#   array: dask records it lazily);
# - one integer array among slices (``x[idx]``, ``x[:, idx]``): the slices, then `take` along
#   the array's axis;
# - any other index (several arrays, boolean masks, integers mixed with arrays): numpy computes
#   the flat positions the index names, and one `take` gathers them from the flattened array.
# The scatter-adds (the transposes of the last two) are gathers too: see `_scatter_add_take`.


def _getitem_impl(x: Any, index: Any) -> Any:
    xp = arrays.xp_of(x)
    if xp is np:  # (a Python number: a weakly typed one staged by jit)
        return np.asarray(x)[index]
    return _getitem_any(xp, x, index)


def _is_basic(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return not any(isinstance(i, (np.ndarray, bool, np.bool_)) for i in items)


def _basic_key(index: Any, shape: Shape) -> tuple[tuple[Any, ...], tuple[int, ...]]:
    """A basic index (already checked by numpy) as a key naming every axis of `shape` with
    non-negative integers and positive-step slices, and the axes of ``x[key]`` to reverse after."""
    items = index if isinstance(index, tuple) else (index,)
    named = sum(i is not None and i is not Ellipsis for i in items)
    key: list[Any] = []
    flips: list[int] = []
    kept = 0  # the axes of x[key] so far
    for i in items:
        if i is None:
            continue
        if i is Ellipsis:
            key.extend([slice(None)] * (len(shape) - named))
            kept += len(shape) - named
            continue
        n = shape[len(key)]
        if isinstance(i, slice):
            start, stop, step = i.indices(n)
            if step < 0:
                r = range(start, stop, step)
                i = slice(r[-1], r[0] + 1, -step) if len(r) else slice(0, 0)
                flips.append(kept)
            else:
                i = slice(start, stop, step)
            kept += 1
        else:
            i = integer(i, "an index") % n
        key.append(i)
    key.extend([slice(None)] * (len(shape) - len(key)))
    return tuple(key), tuple(flips)


def _one_array(index: Any, shape: Shape) -> tuple[tuple[Any, ...], int, Array] | None:
    """For an index of slices (and Ellipsis) and one integer array of 1 or more dimensions: the
    index with the array replaced by ``slice(None)``, the array's axis, and the array (made
    non-negative). None for any other index."""
    items = index if isinstance(index, tuple) else (index,)
    at = [j for j, i in enumerate(items) if isinstance(i, np.ndarray)]
    if len(at) != 1 or not all(isinstance(i, (slice, np.ndarray)) or i is Ellipsis for i in items):
        return None
    j = at[0]
    a = items[j]
    if a.dtype.kind not in "iu" or a.ndim == 0:
        return None
    # after an Ellipsis the array's axis counts from the end: each item after it names one axis
    k = len(shape) - (len(items) - j) if any(i is Ellipsis for i in items[:j]) else j
    a = np.where(a < 0, a + shape[k], a)
    return items[:j] + (slice(None),) + items[j + 1 :], k, a


def _getitem_any(xp: Any, x: Any, index: Any) -> Any:
    """``x[index]`` with numpy's semantics on an array of library `xp` (not numpy)."""
    shape = shape_of(x)
    out_shape = _ghost(shape)[index].shape
    if _is_basic(index):
        key, flips = _basic_key(index, shape)
        y = x[key]
        if flips:
            y = xp.flip(y, axis=flips)
    else:
        one = _one_array(index, shape)
        if one is not None:
            rest, k, idx = one
            y = xp.take(_getitem_any(xp, x, rest), lib_array(x, idx.ravel()), axis=k)
        else:
            places = np.arange(math.prod(shape)).reshape(shape)[index]
            y = xp.take(_reshape_impl(x, (-1,)), lib_array(x, places.ravel()), axis=0)
    return y if tuple(y.shape) == out_shape else _reshape_impl(y, out_shape)


def _scatter_add_take(xp: Any, g: Any, idx: Array, m: int, axis: int) -> Any:
    """Zeros with `m` places along `axis`, ``g[..., j, ...]`` added at place ``idx[j]``, built
    without writes: with no repeated index it is one `take` of `g` (a zero slab appended) by the
    inverse map; a repeated index splits into layers (its 1st, 2nd, ... occurrences), one
    `take` each, summed in order."""
    n = idx.size
    shape = list(shape_of(g))
    shape[axis] = 1
    gz = xp.concat([g, xp.zeros(tuple(shape), dtype=g.dtype, device=arrays.device(g))], axis=axis)
    order = np.argsort(idx, kind="stable")
    ranked = idx[order]
    occurrence = np.empty(n, dtype=np.int64)
    occurrence[order] = np.arange(n) - np.searchsorted(ranked, ranked, side="left")
    out: Any = None
    for layer in range(int(occurrence.max()) + 1 if n else 1):
        inverse = np.full(m, n, dtype=np.int64)
        mine = np.flatnonzero(occurrence == layer)
        inverse[idx[mine]] = mine
        part = xp.take(gz, lib_array(g, inverse), axis=axis)
        out = part if out is None else out + part
    return out


def _scatter_any(xp: Any, g: Any, index: Any, shape: Shape) -> Any:
    """The transpose of `_getitem_any`: zeros of `shape` with `g` added at `index`."""
    if _is_basic(index):
        key, flips = _basic_key(index, shape)
        keyed = _ghost(shape)[key].shape
        if tuple(g.shape) != keyed:
            g = _reshape_impl(g, keyed)
        if flips:
            g = xp.flip(g, axis=flips)
        out = xp.zeros(shape, dtype=g.dtype, device=arrays.device(g))
        if 0 not in keyed:  # (dask refuses an empty write)
            out[key] = g  # a fresh array (dask: a lazy write)
        return out
    one = _one_array(index, shape)
    if one is not None:
        rest, k, idx = one
        sub = list(_ghost(shape)[rest].shape)
        g = _reshape_impl(g, (*sub[:k], idx.size, *sub[k + 1 :]))
        return _scatter_any(xp, _scatter_add_take(xp, g, idx.ravel(), sub[k], k), rest, shape)
    size = math.prod(shape)
    places = np.arange(size).reshape(shape)[index]
    flat = _scatter_add_take(xp, _reshape_impl(g, (-1,)), places.ravel(), size, 0)
    return _reshape_impl(flat, shape)


getitem_p = Primitive("getitem", _getitem_impl)


def _scatter_impl(g: Any, index: Any, shape: Shape) -> Array:
    xp = arrays.xp_of(g)
    if xp is not np:
        return _scatter_any(xp, g, index, shape)  # type: ignore[no-any-return]
    out = np.zeros(shape, dtype=np.asarray(g).dtype)
    if _has_int_array(index):
        np.add.at(out, index, g)  # integer arrays may repeat an element
    else:
        out[index] = g
    return out


scatter_p = Primitive("scatter_add", _scatter_impl)


def getitem_raw(x: Value, index: Any) -> Value:
    return bind(getitem_p, (x,), {"index": index})


def scatter_raw(g: Value, index: Any, shape: Sequence[int]) -> Value:
    return bind(scatter_p, (g,), {"index": index, "shape": tuple(shape)})


def _moves_axes(index: Any) -> bool:
    """Whether a leading batch slice would not stay first: numpy puts the dimensions of
    advanced indices (arrays, and integers next to arrays) first when they are not adjacent."""
    items = index if isinstance(index, tuple) else (index,)
    if not any(isinstance(i, np.ndarray) for i in items):
        return False
    advanced = [k for k, i in enumerate(items) if isinstance(i, (np.ndarray, int, np.integer))]
    return advanced[-1] - advanced[0] + 1 != len(advanced)


def _batch_index(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """getitem and its scatter under vmap: a full slice first (separated advanced indices would
    move axes: those become one gather or scatter of the whole batch, see `_open_mesh`)."""
    index = params["index"]
    if _moves_axes(index):
        shape = tuple(params["shape"]) if "shape" in params else shape_of(vals[0])[1:]
        mesh = _open_mesh(index, shape, [], size, True)
        if mesh is None:
            return NotImplemented
        if "shape" in params:
            return gather_scatter_raw(vals[0], [], mesh[0], (size, *shape))
        return gather_raw(vals[0], [], mesh[0])
    index = index if isinstance(index, tuple) else (index,)
    new = dict(params, index=(slice(None),) + index)
    if "shape" in params:
        new["shape"] = (size,) + tuple(params["shape"])
    return bind(prim, vals, new)


_linear(
    getitem_p,
    lambda g, x, p: scatter_raw(g, p["index"], shape_of(x)),
    lambda t, p: getitem_raw(t, p["index"]),
    aliasing="may_view",  # a basic index is a view, an advanced one a copy
    batch=_batch_index,
)
_linear(
    scatter_p,
    lambda g, x, p: getitem_raw(g, p["index"]),
    lambda t, p: scatter_raw(t, p["index"], p["shape"]),
    aliasing="fresh",
    batch=_batch_index,
)


# -- indexing with traced index arrays (computed inside jit, mapped by vmap): the arrays are operands --


class _Slot:
    """Where a traced index array stands in a gather's index (the gather's operands hold them)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "*"


_SLOT = _Slot()


def _filled(index: tuple[Any, ...], arrays_: Sequence[Any]) -> tuple[Any, ...]:
    it = iter(arrays_)
    return tuple(_clean_index(next(it)) if i is _SLOT else i for i in index)


# A traced index is only known when the program runs (or per example), so numpy's bounds check
# happens then: an index out of range raises numpy's IndexError at the call that gives it (JAX
# clamps a gather's index and drops a scatter's update instead). Negative indices count from the
# end, as in numpy and JAX.
gather_p = Primitive("gather", lambda x, *idx, index: _getitem_impl(x, _filled(index, idx)))
gather_scatter_p = Primitive(
    "gather_scatter_add", lambda g, *idx, index, shape: _scatter_impl(g, _filled(index, idx), shape)
)


def gather_raw(x: Value, idx: Sequence[Value], index: tuple[Any, ...]) -> Value:
    return bind(gather_p, (x, *idx), {"index": index})


def gather_scatter_raw(g: Value, idx: Sequence[Value], index: tuple[Any, ...], shape: Shape) -> Value:
    return bind(gather_scatter_p, (g, *idx), {"index": index, "shape": tuple(shape)})


def indices_read(needed: list[bool]) -> tuple[tuple[bool, ...], bool]:
    """`keep` of an operation of an array and its index operands (gathers, scatters): the rules
    read the index operands, never the array operand or the result."""
    return (False,) + (True,) * (len(needed) - 1), False


def _probe_block(index: tuple[Any, ...], shape: Shape, slots: Sequence[Shape], k: int) -> int:
    """Where numpy puts the `k` dimensions of an index's arrays in ``x[index]`` (x of `shape`;
    the slots' arrays of shapes `slots`): in place of the first array when the arrays and
    integers stand together, else first. Read from numpy itself, by giving the arrays a leading
    axis of two lengths and seeing which axis of the result changes."""

    def result(m: int) -> Shape:
        it = iter(slots)
        probe = []
        for i in index:
            s = next(it) if i is _SLOT else getattr(i, "shape", None)  # (None: a slice, None, ...)
            probe.append(i if s is None else np.zeros((m, *(1,) * (k - len(s)), *s), np.intp))
        out: Shape = _ghost(shape)[tuple(probe)].shape
        return out

    return next(r for r, (a, b) in enumerate(zip(result(2), result(3))) if a != b)


def _open_mesh(
    index: Any, shape: Shape, slots: Sequence[tuple[Any, bool]], size: int, batch_axis: bool
) -> tuple[tuple[Any, ...], list[Any]] | None:
    """An index for a whole batch, each example indexed as `index` indexes one (of `shape`):
    every item an integer array (a slice becomes its positions), shaped so that numpy's
    broadcasting lays the result out as ``(size,) + x[index].shape``, an example's result at its
    place in the batch. `slots`: the values of the index's traced arrays, with whether each
    is batched (its leading axis); `batch_axis`: the array indexed has a batch axis first.
    Returns the index (slots where the traced arrays go) and those arrays reshaped; None for
    an index with a boolean item (the caller loops)."""
    items = index if isinstance(index, tuple) else (index,)
    if any(isinstance(i, (bool, np.bool_)) or getattr(i, "dtype", None) == np.bool_ for i in items):
        return None
    per = [shape_of(v)[1:] if b else shape_of(v) for v, b in slots]
    out = _ghost(shape)[_filled(items, [np.zeros(s, np.intp) for s in per])].shape
    arrays_ = [i.shape for i in items if isinstance(i, np.ndarray)] + per
    k = len(np.broadcast_shapes(*arrays_)) if arrays_ else 0
    p = _probe_block(items, shape, per, k) if arrays_ else 0
    n = len(out)
    free = iter(r for r in range(n) if not p <= r < p + k)  # the result's axes of slices and Nones
    named = sum(i is not None and i is not Ellipsis for i in items)
    rest = [slice(None)] * (len(shape) - named)
    expanded = [j for i in items for j in (rest if i is Ellipsis else [i])]
    if not any(i is Ellipsis for i in items):
        expanded += rest

    def placed(s: Shape, first: int) -> Shape:  # an array's shape in the block of the arrays' axes
        return (first,) + (1,) * (p + k - len(s)) + tuple(s) + (1,) * (n - p - k)

    mesh: list[Any] = [np.arange(size).reshape((size,) + (1,) * n)] if batch_axis else []
    ops: list[Any] = []
    it = iter(slots)
    axis = 0
    for i in expanded:
        if i is None:
            next(free)
            continue
        if isinstance(i, slice):
            r = next(free)
            at = np.arange(shape[axis])[i]
            mesh.append(at.reshape((1,) * (1 + r) + (at.size,) + (1,) * (n - r - 1)))
        elif i is _SLOT:
            v, b = next(it)
            ops.append(reshape_raw(v, placed(shape_of(v)[1:] if b else shape_of(v), size if b else 1)))
            mesh.append(_SLOT)
        elif isinstance(i, np.ndarray):
            mesh.append(i.reshape(placed(i.shape, 1)))
        else:  # an integer: numpy broadcasts it as a 0-d array among arrays
            mesh.append(i)
        axis += 1
    return tuple(mesh), ops


def _every_example(v: Any, size: int) -> Any:
    """An unbatched value given a batch axis: each example's copy of it (a gather by zeros, whose
    transpose sums the examples' cotangents back)."""
    return getitem_raw(reshape_raw(v, (1, *shape_of(v))), np.zeros(size, np.intp))


def _batch_gather(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """A gather of a batch: one gather, by the index `_open_mesh` makes for the whole batch."""
    shape = shape_of(vals[0])[1:] if batched[0] else shape_of(vals[0])
    mesh = _open_mesh(params["index"], shape, list(zip(vals[1:], batched[1:])), size, batched[0])
    if mesh is None:
        return NotImplemented
    return bind(prim, (vals[0], *mesh[1]), {"index": mesh[0]})


def _batch_gather_scatter(
    prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int
) -> Any:
    """The transpose of a batched gather: one scatter into the whole batch."""
    shape = tuple(params["shape"])
    mesh = _open_mesh(params["index"], shape, list(zip(vals[1:], batched[1:])), size, True)
    if mesh is None:
        return NotImplemented
    g = vals[0] if batched[0] else _every_example(vals[0], size)
    return bind(prim, (g, *mesh[1]), {"index": mesh[0], "shape": (size, *shape)})


declare(
    gather_p,
    vjp=lambda g, ans, vals, p, needed: [
        gather_scatter_raw(g, vals[1:], p["index"], shape_of(vals[0])),
        *[None] * (len(vals) - 1),
    ],
    jvp=lambda ts, ans, vals, p: None if ts[0] is None else gather_raw(ts[0], vals[1:], p["index"]),
    keep=indices_read,
    batch=_batch_gather,
    aliasing="fresh",
    linear=True,  # in the array (the indices are integers)
)
declare(
    gather_scatter_p,
    vjp=lambda g, ans, vals, p, needed: [gather_raw(g, vals[1:], p["index"]), *[None] * (len(vals) - 1)],
    jvp=lambda ts, ans, vals, p: (
        None if ts[0] is None else gather_scatter_raw(ts[0], vals[1:], p["index"], p["shape"])
    ),
    keep=indices_read,
    batch=_batch_gather_scatter,
    aliasing="fresh",
    linear=True,
)


def index_places(shape: Shape, index: Any) -> Array:
    """The flat positions, in an array of `shape`, of the elements ``x[index]`` names (numpy's
    indexing rules, on a ramp), in ``x[index]``'s shape."""
    places: Array = np.arange(math.prod(shape)).reshape(shape)[index]
    return places


def last_writes(shape: Shape, index: Any) -> Array:
    """Over the elements ``x[index]`` names: True where no later element of the index names the
    same place (the write that stays, in numpy's ``x[index] = v``)."""
    places = index_places(shape, index)
    flat = places.ravel()
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    last = np.zeros(flat.size, dtype=bool)
    last[flat.size - 1 - first_from_end] = True
    return last.reshape(places.shape)


def _last_writes_impl(*idx: Any, index: tuple[Any, ...], shape: Shape) -> Any:
    out = last_writes(shape, _filled(index, idx))
    return lib_array(idx[0], out) if arrays.is_array(idx[0]) else out


def _batch_last_writes(
    prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int
) -> Any:
    """Over a batch: the examples' places are apart in the batch's array, so one call."""
    shape = tuple(params["shape"])
    mesh = _open_mesh(params["index"], shape, list(zip(vals, batched)), size, True)
    if mesh is None:
        return NotImplemented
    return bind(prim, mesh[1], {"index": mesh[0], "shape": (size, *shape)})


last_writes_p = declare(  # the `last_writes` of an index with traced arrays: the arrays are operands
    Primitive("last_writes", _last_writes_impl),
    zero_derivative=True,
    batch=_batch_last_writes,
    aliasing="fresh",
)


def _refuse_traced_slices(items: Sequence[Any]) -> None:
    for i in items:
        if isinstance(i, slice) and any(traced_index(b) for b in (i.start, i.stop, i.step)):
            raise TracerError(
                "x[i:j] with a bound computed inside einad.jit (or mapped by vmap): a slice's "
                "length must be known when the program is built, and here it depends on the "
                "bound's value. Mark the argument static (static_argnums), or gather a window of "
                "fixed length with x[i + np.arange(n)]"
            )


def _gather_template(shape: Shape, index: Any) -> tuple[tuple[Any, ...], list[Value], Shape] | None:
    """For an index with traced integer items (see `traced_index`): the index with each of them
    replaced by a slot, those items (the operands), and the shape ``x[index]`` has; None when no
    item is traced. The index's structure is checked here, at the user's call (numpy's
    IndexError); its values only when the program runs."""
    items = index if isinstance(index, tuple) else (index,)
    _refuse_traced_slices(items)
    idx: list[Value] = [i for i in items if traced_index(i)]
    if not idx:
        return None
    for i in idx:
        if dtype_of(i).kind not in "iu":
            raise _refuse_traced(i)
    template = tuple(_SLOT if traced_index(i) else _clean_index(i) for i in items)
    example: Any = _filled(template, [np.zeros(shape_of(i), np.intp) for i in idx])
    return template, idx, _ghost(shape)[example].shape


def getitem(x: ArrayLike, index: Any) -> Tensor:
    """x[index]: basic, integer-array and boolean-mask indexing with numpy's semantics, differentiable.

    The same on every array library: integer and boolean index arrays may be lists, numpy
    arrays or arrays of `x`'s library (static data: a dask index array is computed); the
    result and its gradient are arrays of `x`'s library (lazy on dask). Under `vmap`, an
    integer index array may be mapped (``vmap(lambda i: x[i])``: one gather for the batch), or
    computed inside `einad.jit` (an integer or an integer array that is an argument of the
    jitted function or computed from one): a gather, an operation of the program, so each call
    reads the elements its own index names. Such an index is checked when the program runs
    (an index out of range is an IndexError then). A boolean mask or a slice bound computed
    inside `einad.jit` is a TracerError: the result's shape would depend on its value.
    """
    x = to_array_operand(x)
    traced = _gather_template(shape_of(x), index)
    if traced is not None:
        template, idx, _ = traced
        return wrap(gather_raw(x, idx, template))
    index = _clean_index(index)
    _ghost(shape_of(x))[index]  # let numpy raise its IndexError here, at the user's call
    return wrap(getitem_raw(x, index))


def flip(x: ArrayLike, axis: Axis = None) -> Tensor:
    """Reverse the order of elements along `axis` (all axes by default), as numpy.flip: of a
    Tensor, a view (numpy's ``x[::-1]``), which a write into reaches the Tensor."""
    base, x = x, to_array_operand(x)
    nd = len(shape_of(x))
    idx = [slice(None)] * nd
    for a in normalize_axes(axis, nd):
        idx[a] = slice(None, None, -1)
    return view(getitem(x, tuple(idx)), base, tuple(idx))


def zeros_like(x: Any) -> Any:
    """Zeros of `x`'s shape and dtype, in its library and on its device."""
    return arrays.zeros(strip(x), shape_of(x), dtype_of(x))
