"""The few structural operations that are not einsums: reshaping, broadcasting,
indexing, joining, casting and selecting.

Each is linear in its array operands, so each rule is the operation's transpose
(VJP) and the operation itself applied to the tangent (JVP). Summing a
broadcast back is an einsum (`einsum.sum_to_shape`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import arrays
from .core import Params, Primitive, Staged, Tensor, bind, rules, strip, zero_derivative
from .einsum import _letters, spread, sum_to_shape
from .errors import TracerError
from .util import (
    Array,
    ArrayLike,
    Axis,
    DTypeLike,
    Shape,
    Value,
    dtype_of,
    integer,
    normalize_axes,
    normalize_axis,
    shape_of,
    to_array_operand,
    to_operand,
    wrap,
)


def _shape_only(needed: list[bool]) -> tuple[tuple[bool, ...], bool]:
    """The `keep_rules` entry of a linear op: its rule reads only shapes and dtypes."""
    return (False,) * len(needed), False


def _linear(
    prim: Primitive, transpose: Callable[[Any, Any, Params], Any], apply: Callable[[Any, Params], Any]
) -> None:
    """Enter the rules of a one-operand linear primitive."""
    rules(
        prim,
        vjp=lambda g, ans, vals, p, needed: [transpose(g, vals[0], p)],
        jvp=lambda ts, ans, vals, p: apply(ts[0], p),
        keep=_shape_only,
    )


# -- stop_gradient: the identity, with derivative zero in every mode ---------------

stop_gradient_p = Primitive("stop_gradient", lambda x: x)
zero_derivative.add(stop_gradient_p)


def stop_gradient(x: Any) -> Any:
    """`x` with a zero derivative (internal: a raw value passes through untouched)."""
    return bind(stop_gradient_p, (x,), {}) if type(x) is Tensor and x._trace is not None else x


# -- ones_like: the seed of a gradient ------------------------------------------------

ones_like_p = Primitive("ones_like", lambda x: arrays.ones(x, shape_of(x), dtype_of(x)))
zero_derivative.add(ones_like_p)


def ones_like(x: Any) -> Any:
    """Ones of `x`'s shape and dtype: an array, or an equation where `x` is staged (a program's
    gradient seed stays symbolic, so its optimizer sees the ones)."""
    if type(x) is Tensor and x._trace is not None:
        return bind(ones_like_p, (x,), {})
    return arrays.ones(x, shape_of(x), dtype_of(x))


# -- reshape ---------------------------------------------------------------------

reshape_p = Primitive("reshape", lambda x, shape: np.reshape(x, shape))


def reshape_raw(x: Value, shape: Sequence[int]) -> Value:
    if shape_of(x) == tuple(shape):
        return x
    return bind(reshape_p, (x,), {"shape": tuple(shape)})


_linear(
    reshape_p,
    lambda g, x, p: reshape_raw(g, shape_of(x)),
    lambda t, p: reshape_raw(t, p["shape"]),
)


def _ghost(shape: int | Sequence[int]) -> Array:
    """A zero-memory int8 array of `shape`, to let numpy check shapes and axes."""
    return np.broadcast_to(np.zeros((), dtype=np.int8), shape)


def _resolve_shape(size: int, shape: Sequence[int]) -> Shape:
    shape = tuple(integer(d, "a shape's size") for d in shape)
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise ValueError(f"invalid shape {shape}: at most one -1 and no other negative size")
    known = int(np.prod([d for d in shape if d != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or size % known:
            raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
        shape = tuple(size // known if d == -1 else d for d in shape)
    elif known != size:
        raise ValueError(f"cannot reshape an array of size {size} into shape {shape}")
    return shape


def reshape(x: ArrayLike, shape: int | Sequence[int]) -> Tensor:
    """The same elements in a new shape, as numpy.reshape (C order).

    One dimension of `shape` may be -1: it is inferred from the size.

    Raises:
        ValueError: If the size does not fit `shape`.
    """
    x = to_array_operand(x)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    xs = shape_of(x)
    return wrap(reshape_raw(x, _resolve_shape(int(np.prod(xs, dtype=np.int64)), tuple(shape))))


def expand_dims(x: ArrayLike, axis: int | Sequence[int]) -> Tensor:
    """Insert size-1 axes at the positions `axis`, as numpy.expand_dims."""
    x = to_array_operand(x)
    if axis is None:
        raise TypeError("expand_dims: axis must be an integer or a tuple of integers, not None")
    n = len(axis) if isinstance(axis, (list, tuple, range, np.ndarray)) else 1
    axes = normalize_axes(axis, len(shape_of(x)) + n)  # positions in the result
    rest = iter(shape_of(x))
    return reshape(x, tuple(1 if a in axes else next(rest) for a in range(len(shape_of(x)) + n)))


def squeeze(x: ArrayLike, axis: Axis = None) -> Tensor:
    """Drop size-1 axes (those in `axis`, or all of them), as numpy.squeeze."""
    x = to_array_operand(x)
    axes = normalize_axes(axis, len(shape_of(x)))
    if axis is None:
        axes = tuple(a for a in axes if shape_of(x)[a] == 1)
    for a in axes:
        if shape_of(x)[a] != 1:
            raise ValueError(f"squeeze: axis {a} has size {shape_of(x)[a]}, not 1")
    return reshape(x, tuple(d for a, d in enumerate(shape_of(x)) if a not in axes))


# -- broadcast_to ----------------------------------------------------------------------


def broadcast_raw(x: Value, shape: Sequence[int]) -> Value:
    """`x` repeated to `shape`: its broadcast axes squeezed away, then a `spread`.

    Broadcasting is repeating along indices the value does not have, which is
    exactly `spread` (the VJP helper of einsum): no primitive or rule of its own.
    """
    shape = tuple(shape)
    xs = shape_of(x)
    if xs == shape:
        return x
    lead = len(shape) - len(xs)
    letters = _letters(len(shape))
    keep = [i for i in range(lead, len(shape)) if xs[i - lead] == shape[i]]
    x = reshape_raw(x, tuple(shape[i] for i in keep))
    return spread(x, "".join(letters[i] for i in keep), letters, shape)


def broadcast_to(x: ArrayLike, shape: int | Sequence[int]) -> Tensor:
    """`x` repeated along new or size-1 axes to `shape`, as numpy.broadcast_to.

    A `spread` along the repeated axes: its VJP sums the cotangent back over them
    (one einsum).

    Raises:
        ValueError: If `x` cannot be broadcast to `shape` (numpy's message).
    """
    x = to_array_operand(x)
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    np.broadcast_shapes(shape_of(x), tuple(shape))  # raises numpy's ValueError on mismatch
    return wrap(broadcast_raw(x, tuple(shape)))


# -- astype ---------------------------------------------------------------------------------


def _astype_impl(x: Any, dtype: DTypeLike) -> Any:
    x = np.asarray(x)
    if x.dtype.kind == "c" and np.dtype(dtype).kind != "c":
        x = x.real
    return x.astype(dtype)


astype_p = Primitive("astype", _astype_impl)


def astype(x: Value, dtype: DTypeLike) -> Value:
    """`x` cast to `dtype` (returned unchanged if it has that dtype); the cotangent is cast back."""
    dtype = np.dtype(dtype)
    if dtype_of(x) == dtype:
        return x
    return bind(astype_p, (x,), {"dtype": dtype})


def _astype_back(g: Any, x: Any, p: Params) -> Any:
    return astype(g, dtype_of(x))


_linear(astype_p, _astype_back, lambda t, p: astype(t, p["dtype"]))


# -- indexing -------------------------------------------------------------------------------


def _clean_index(index: Any) -> Any:
    """Make an index free of Tensors; integer arrays stay arrays (a static parameter)."""
    if isinstance(index, tuple):
        return tuple(_clean_index(i) for i in index)
    if type(index) is Tensor:
        index = strip(index)
        if type(index) is Staged:
            raise TracerError(
                "indexing with an array computed inside einad.jit: the index is a static "
                "parameter of the program. Pass it as a static argument (static_argnums) or "
                "compute it outside the jitted function"
            )
    if isinstance(index, list):
        index = np.asarray(index)
    if isinstance(index, np.ndarray) and index.dtype.kind not in "biu":
        raise IndexError(f"arrays used as indices must be of integer or boolean type, not {index.dtype}")
    return index


def _has_int_array(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, np.ndarray) and i.dtype.kind in "iu" for i in items)


getitem_p = Primitive("getitem", lambda x, index: x[index])


def _scatter_impl(g: Any, index: Any, shape: Shape) -> Array:
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


_linear(
    getitem_p,
    lambda g, x, p: scatter_raw(g, p["index"], shape_of(x)),
    lambda t, p: getitem_raw(t, p["index"]),
)
_linear(
    scatter_p,
    lambda g, x, p: getitem_raw(g, p["index"]),
    lambda t, p: scatter_raw(t, p["index"], p["shape"]),
)


def getitem(x: ArrayLike, index: Any) -> Tensor:
    """x[index]: basic and integer-array indexing, differentiable."""
    x = to_array_operand(x)
    index = _clean_index(index)
    _ghost(shape_of(x))[index]  # let numpy raise its IndexError here, at the user's call
    return wrap(getitem_raw(x, index))


def flip(x: ArrayLike, axis: Axis = None) -> Tensor:
    """Reverse the order of elements along `axis` (all axes by default), as numpy.flip."""
    x = to_array_operand(x)
    nd = len(shape_of(x))
    idx = [slice(None)] * nd
    for a in normalize_axes(axis, nd):
        idx[a] = slice(None, None, -1)
    return getitem(x, tuple(idx))


# -- joining and splitting ---------------------------------------------------------------


def _concat_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    axis = p["axis"]
    out: list[Any] = []
    start = 0
    for v, need in zip(vals, needed):
        n = shape_of(v)[axis]
        idx = (slice(None),) * axis + (slice(start, start + n),)
        out.append(getitem_raw(g, idx) if need else None)
        start += n
    return out


def _concat_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    from .elementwise import zeros_like

    parts = [t if t is not None else zeros_like(v) for t, v in zip(ts, vals)]
    return bind(concat_p, parts, p)


concat_p = Primitive("concatenate", lambda *xs, axis: np.concatenate(xs, axis=axis))
rules(concat_p, vjp=_concat_vjp, jvp=_concat_jvp, keep=_shape_only)


def concatenate(arrays: Sequence[ArrayLike], axis: int | None = 0) -> Tensor:
    """Join arrays along an existing axis, as numpy.concatenate (flattened first for ``axis=None``).

    Raises:
        ValueError: If there are no arrays, they are 0-d, or their shapes differ
            outside `axis`.
        numpy.exceptions.AxisError: If `axis` is out of range.
    """
    xs = [to_array_operand(a) for a in arrays]
    if not xs:
        raise ValueError("need at least one array to concatenate")
    if axis is None:
        xs = [reshape(x, (-1,)) for x in xs]
        axis = 0
    nd = len(shape_of(xs[0]))
    if nd == 0:
        raise ValueError("zero-dimensional arrays cannot be concatenated")
    axis = normalize_axis(axis, nd)
    first = shape_of(xs[0])
    for k, x in enumerate(xs):
        s = shape_of(x)
        if len(s) != nd or s[:axis] + s[axis + 1 :] != first[:axis] + first[axis + 1 :]:
            raise ValueError(
                f"concatenate: array {k} has shape {s}, which does not match {first} outside axis {axis}"
            )
    if len(xs) == 1:
        return wrap(xs[0])
    return wrap(bind(concat_p, xs, {"axis": axis}))


def stack(arrays: Sequence[ArrayLike], axis: int = 0) -> Tensor:
    """Join arrays of one shape along a new axis, as numpy.stack.

    Raises:
        ValueError: If there are no arrays or their shapes differ.
    """
    xs = [to_array_operand(a) for a in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    shapes = {shape_of(x) for x in xs}
    if len(shapes) != 1:
        raise ValueError(f"all input arrays must have the same shape, got {sorted(shapes)}")
    nd = len(shape_of(xs[0])) + 1
    axis = normalize_axis(axis, nd)
    return concatenate([expand_dims(x, axis) for x in xs], axis=axis)


def split(x: ArrayLike, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split `x` along `axis` into equal sections or at the given indices, as numpy.split."""
    x = to_array_operand(x)
    nd = len(shape_of(x))
    axis = normalize_axis(axis, nd)
    pieces = np.split(_ghost(shape_of(x)[axis]), indices_or_sections)
    out: list[Tensor] = []
    start = 0
    for p in pieces:
        idx = (slice(None),) * axis + (slice(start, start + len(p)),)
        out.append(getitem(x, idx))
        start += len(p)
    return out


# -- where ------------------------------------------------------------------------------


def _where_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    c, x, y = vals
    out: list[Any] = [None]
    for v, need, pick in ((x, needed[1], True), (y, needed[2], False)):
        if not need:
            out.append(None)
            continue
        z = zeros_scalar(g)
        sel = where_raw(c, g, z) if pick else where_raw(c, z, g)
        out.append(sum_to_shape(sel, shape_of(v), dtype_of(v)))
    return out


def _where_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    c, _, _ = vals
    tx, ty = ts[1], ts[2]
    if tx is None and ty is None:
        return None
    z = np.zeros((), dtype=dtype_of(ans))
    out = where_raw(c, z if tx is None else tx, z if ty is None else ty)
    return broadcast_raw(out, shape_of(ans))


def zeros_scalar(like: Any) -> Array:
    return np.zeros((), dtype=dtype_of(like))


where_p = Primitive("where", lambda c, x, y: np.where(c, x, y))
rules(where_p, vjp=_where_vjp, jvp=_where_jvp, keep=lambda needed: ((True, False, False), False))


def where_raw(c: Any, x: Value, y: Value) -> Value:
    """`where` for rules: `c` is a boolean (a comparison's result), so it carries no derivative."""
    return bind(where_p, (c, x, y), {})


def where(condition: ArrayLike, x: ArrayLike, y: ArrayLike) -> Tensor:
    """Elementwise select: `x` where `condition` holds, else `y`, with numpy broadcasting.

    Differentiable in `x` and `y`, never in `condition`.
    """
    c = to_array_operand(condition)
    if dtype_of(c) != np.bool_:
        c = astype(stop_gradient(c), np.bool_)
    return wrap(where_raw(c, to_operand(x), to_operand(y)))


# -- functional index updates: x.at[idx].set(v) / .add(v) -----------------------------------------


class IndexUpdate:
    """What ``x.at`` returns: index it to name the elements to update (JAX's `.at`)."""

    __slots__ = ("_x",)

    def __init__(self, x: ArrayLike) -> None:
        self._x = x

    def __getitem__(self, index: Any) -> IndexedUpdate:
        return IndexedUpdate(self._x, index)


class IndexedUpdate:
    """``x.at[index]``: `set`, `add` and `get` return new tensors; `x` is never modified."""

    __slots__ = ("_index", "_x")

    def __init__(self, x: ArrayLike, index: Any) -> None:
        self._x = x
        self._index = index

    def _prepare(self, v: ArrayLike) -> tuple[Value, Any, Shape, Value]:
        x = to_array_operand(self._x)
        index = _clean_index(self._index)
        shape = shape_of(x)
        target = _ghost(shape)[index].shape  # numpy's IndexError here, at the user's call
        v = to_operand(v)
        if dtype_of(v).kind == "c" and dtype_of(x).kind != "c":
            raise TypeError(f"cannot write complex values into a tensor of dtype {dtype_of(x)}")
        np.broadcast_shapes(shape_of(v), target)  # numpy's ValueError if v does not fit
        v = astype(v, dtype_of(x)) if not isinstance(v, (int, float, complex)) else np.asarray(v, dtype_of(x))
        return x, index, shape, broadcast_raw(v, target)

    def get(self) -> Tensor:
        """``x[index]``."""
        return getitem(self._x, self._index)

    def add(self, v: ArrayLike) -> Tensor:
        """A copy of `x` with `v` added at `index` (repeated indices add repeatedly).

        Differentiable in `x` (the identity) and in `v` (gathered from the cotangent).
        """
        x, index, shape, v = self._prepare(v)
        return wrap(x + scatter_raw(v, index, shape))

    def set(self, v: ArrayLike) -> Tensor:
        """A copy of `x` with `v` written at `index` (where an index repeats, the last write wins,
        as numpy's assignment).

        Differentiable in `x` (zero at the written places) and in `v`.
        """
        x, index, shape, v = self._prepare(v)
        keep = np.ones(shape, dtype=bool)
        keep[index] = False
        if _has_int_array(index):
            v = where_raw(_last_writes(shape, index), v, zeros_scalar(v))
        return wrap(where_raw(keep, x, zeros_scalar(x)) + scatter_raw(v, index, shape))


def _last_writes(shape: Shape, index: Any) -> Array:
    """Over the indexed elements: True where no later element of the index writes the same place."""
    places: Array = np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)[index]
    flat = places.ravel()
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    last = np.zeros(flat.size, dtype=bool)
    last[flat.size - 1 - first_from_end] = True
    return last.reshape(places.shape)
