"""The structural operations built on the einsum: broadcasting, joining, splitting,
and selecting (`where`). Reshaping, casting and indexing are below the einsum, in
`einad.rules.shape`; the functional index updates (`x.at[i]`) are in `einad.rules.indexing`.

Each is linear in its array operands, so each rule is the operation's transpose
(VJP) and the operation itself applied to the tangent (JVP). Summing a
broadcast back is an einsum (`einsum.sum_to_shape`).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import arrays
from ..aliases import Shape
from ..core import ArrayLike, Params, Primitive, Tensor, Value, bind, declare, view
from ..errors import unknown_sizes
from ..util import (
    dtype_of,
    foreign,
    normalize_axis,
    raw,
    shape_of,
    to_array_operand,
    to_operand,
    wrap,
)
from .einsum import _letters, spread, sum_to_shape
from .shape import (
    _astype_impl,
    _ghost,
    _shape_only,
    astype,
    expand_dims,
    getitem,
    getitem_raw,
    reshape,
    reshape_raw,
    zeros_like,
)

# -- broadcast_to ----------------------------------------------------------------------


def shapes_alike(xs: Shape, shape: Shape) -> bool:
    """Whether shapes `xs` and `shape` are the same where their sizes are known and unknown at the
    same places. An unknown size (nan: a dask array of unknown chunk sizes) is unequal to itself;
    two are taken alike, as dask's own elementwise operations take them (a tangent of shape
    (nan, 3) needs no broadcast to its primal's (nan, 3), and dask cannot reshape it)."""
    return len(xs) == len(shape) and all(
        a == b or (unknown_sizes((a,)) and unknown_sizes((b,))) for a, b in zip(xs, shape)
    )


def broadcast_raw(x: Value, shape: Sequence[int]) -> Value:
    """`x` repeated to `shape`: its broadcast axes squeezed away, then a `spread`.

    Broadcasting is repeating along indices the value does not have, which is
    exactly `spread` (the VJP helper of einsum): no primitive or rule of its own.
    """
    shape = tuple(shape)
    xs = shape_of(x)
    if xs == shape or shapes_alike(xs, shape):
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
    np.broadcast_to(_ghost(shape_of(x)), tuple(shape))  # numpy's ValueError if x does not fit shape
    return wrap(broadcast_raw(x, tuple(shape)))


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
    parts = [t if t is not None else zeros_like(v) for t, v in zip(ts, vals)]
    return bind(concat_p, parts, p)


def _concat_impl(*xs: Any, axis: int) -> Any:
    xp = arrays.namespace(*xs)
    if xp is np:
        return np.concatenate(xs, axis=axis)
    dt = np.result_type(*(dtype_of(x) for x in xs))  # numpy's promotion (the standard refuses mixed kinds)
    return xp.concat([x if dtype_of(x) == dt else _astype_impl(x, dt) for x in xs], axis=axis)


def _batch_concat(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    out = [v if b else broadcast_raw(v, (size,) + shape_of(v)) for v, b in zip(vals, batched)]
    return bind(prim, out, {"axis": params["axis"] + 1})


concat_p = declare(
    Primitive("concatenate", _concat_impl),
    vjp=_concat_vjp,
    jvp=_concat_jvp,
    keep=_shape_only,
    batch=_batch_concat,
    aliasing="fresh",
    linear=True,
)


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
    like = foreign(arrays)  # numbers join the library of the arrays beside them
    xs = [to_array_operand(a, like) for a in arrays]
    if not xs:
        raise ValueError("need at least one array to stack")
    shapes = {shape_of(x) for x in xs}
    if len(shapes) != 1:
        raise ValueError(f"all input arrays must have the same shape, got {sorted(shapes)}")
    nd = len(shape_of(xs[0])) + 1
    axis = normalize_axis(axis, nd)
    return concatenate([expand_dims(x, axis) for x in xs], axis=axis)


def split(x: ArrayLike, indices_or_sections: int | Sequence[int], axis: int = 0) -> list[Tensor]:
    """Split `x` along `axis` into equal sections or at the given indices, as numpy.split: of a
    Tensor, views (numpy's ``x[i:j]``), which a write into reaches the Tensor."""
    base, x = x, to_array_operand(x)
    nd = len(shape_of(x))
    axis = normalize_axis(axis, nd)
    n = shape_of(x)[axis]
    # plain numbers: a Tensor given to numpy's split would dispatch back here
    spec = np.asarray(indices_or_sections).tolist()
    pieces = np.split(_ghost(n), spec)  # numpy's errors (sections that do not divide)
    if not isinstance(spec, list):
        edges = [k * (n // len(pieces)) for k in range(len(pieces) + 1)]
    else:  # numpy's pieces x[i:j] between the given indices, which need not increase
        edges = [0, *(int(i) for i in spec), n]
    head = (slice(None),) * axis
    parts = [head + (slice(a, b),) for a, b in itertools.pairwise(edges)]
    return [view(getitem(x, part), base, part) for part in parts]


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
    z = zeros_scalar(ans)
    out = where_raw(c, z if tx is None else tx, z if ty is None else ty)
    return broadcast_raw(out, shape_of(ans))


def zeros_scalar(like: Any) -> Any:
    """A zero of `like`'s dtype to select with: numpy's 0-d array, or the number 0 on another
    library (`where` gives it `like`'s dtype)."""
    if arrays.xp_of(raw(like)) is np:
        return np.zeros((), dtype=dtype_of(like))
    return 0


def _where_impl(c: Any, x: Any, y: Any) -> Any:
    xp = arrays.namespace(c, x, y)
    if xp is np:
        return np.where(c, x, y)
    arrays.check_broadcast((c, x, y))
    like = c if arrays.is_array(c) else x if arrays.is_array(x) else y
    # numpy's result dtype (numbers weak, as the standard's), each operand an array of it
    dt = np.result_type(*(v if isinstance(v, (bool, int, float, complex)) else dtype_of(v) for v in (x, y)))
    x, y = (
        _astype_impl(v, dt)
        if arrays.is_array(v)
        else xp.asarray(v, dtype=arrays.lib_dtype(xp, dt), device=arrays.device(like))
        for v in (x, y)
    )
    if not arrays.is_array(c):
        c = xp.asarray(c, device=arrays.device(like))
    return xp.where(c, x, y)


def align(vals: Sequence[Any], batched: Sequence[bool], size: int) -> list[Any]:
    """Batched operands (batch axis first) with singleton axes after it, so that numpy's
    broadcasting lines up the batch axis of operands of different ranks (vmap's elementwise rule)."""
    rank = max((len(shape_of(v)) - (1 if b else 0) for v, b in zip(vals, batched)), default=0)
    out = []
    for v, b in zip(vals, batched):
        if b:
            s = shape_of(v)
            v = reshape_raw(v, (size,) + (1,) * (rank - len(s) + 1) + tuple(s[1:]))
        out.append(v)
    return out


def batch_elementwise(
    prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int
) -> Any:
    """The batching rule of an elementwise primitive of two or more operands."""
    return bind(prim, align(vals, batched, size), params)


def _batch_where(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    vals = align(vals, batched, size)
    rank = max(len(shape_of(v)) + (0 if b else 1) for v, b in zip(vals, batched))
    vals = [  # (a Python number stays one: weak, as numpy's promotion takes it beside float32)
        v
        if b or isinstance(v, (bool, int, float, complex, np.generic))  # (a numpy scalar: any library's)
        else reshape_raw(v, (1,) * (rank - len(shape_of(v))) + shape_of(v))
        for v, b in zip(vals, batched)
    ]
    out = bind(prim, vals, params)
    return broadcast_raw(out, np.broadcast_shapes(*(shape_of(v) for v in vals)))


where_p = declare(
    Primitive("where", _where_impl),
    vjp=_where_vjp,
    jvp=_where_jvp,
    keep=lambda needed: ((True, False, False), False),
    batch=_batch_where,
    aliasing="fresh",
    elementwise=True,
    linear=True,  # in x and y (the condition is boolean)
)


def where_raw(c: Any, x: Value, y: Value) -> Value:
    """`where` for rules: `c` is a boolean (a comparison's result), so it carries no derivative."""
    return bind(where_p, (c, x, y), {})


def masked(x: Value, where: ArrayLike, fill: Any, what: str) -> Value:
    """`x` with the elements a reduction's ``where=`` mask leaves out replaced by `fill`, the
    reduction's identity (numpy's and JAX's ``where=``: those elements take no part, and get
    no derivative). The mask is boolean and broadcasts to `x`'s shape.

    Raises:
        TypeError: If the mask is not boolean.
        ValueError: If it does not broadcast to `x`'s shape.
    """
    mask = to_array_operand(where, like=x)
    if dtype_of(mask) != np.bool_:
        raise TypeError(f"{what}: where= takes a boolean mask, got dtype {dtype_of(mask)}")
    shape, ms = shape_of(x), shape_of(mask)
    try:
        fits = np.broadcast_shapes(ms, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{what}: the where= mask of shape {ms} does not broadcast to the shape {shape}")
    return where_raw(mask, x, fill)


def where(condition: ArrayLike, x: ArrayLike, y: ArrayLike) -> Tensor:
    """Elementwise select: `x` where `condition` holds, else `y`, with numpy broadcasting.

    Differentiable in `x` and `y`, never in `condition`.
    """
    x, y = to_operand(x), to_operand(y)
    # a Python condition becomes an array of the branches' library (numpy's beside torch is refused)
    c = to_array_operand(condition, like=y if isinstance(x, (bool, int, float, complex)) else x)
    if dtype_of(c) != np.bool_:
        c = astype(c, np.bool_)  # a cast to bool has no derivative (astype cuts it)
    return wrap(where_raw(c, x, y))
