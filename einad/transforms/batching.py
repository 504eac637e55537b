"""Batching: run a function once on a stack of inputs (`vmap`).

A `BatchTrace` boxes values that carry an extra leading axis (the batch); its
Tensors report the per-example shape, so code and derivative rules written for
one example run unchanged. Each primitive declares its batching rule, next to it in its rules
module (`Primitive.batch`): an einsum gets one extra index (one contraction for the whole
stack), elementwise operations align the batch axis, axis arguments shift by one. A primitive
that declares `core.LOOP`, or a rule that returns `NotImplemented` for a case it leaves out,
runs once per example, which is always correct; a primitive with no rule is an error.

`jacrev` uses this to pull a whole stack of cotangents through the reverse pass
at once, and `jacfwd` a whole stack of tangents through the forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.exceptions import AxisError

from .. import arrays
from ..arrays import is_array
from ..core import LOOP, Params, Primitive, Tensor, Trace, _box, bind, strip, tracing
from ..errors import check_callable
from ..pytree import node_children, tree_flatten, tree_unflatten
from ..rules.linear import moveaxis
from ..rules.shape import getitem_raw, reshape_raw
from ..rules.structural import broadcast_raw, concat_p
from ..util import dtype_of, integer, normalize_axis, shape_of

# -- the trace --------------------------------------------------------------------------


class BatchTrace(Trace):
    """Values carry a leading batch axis of length `size`."""

    __slots__ = ("size",)
    kind = "batch"
    batched = True

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def process(self, prim: Primitive, args: Sequence[Any], params: Params) -> Tensor:
        vals: list[Any] = []
        batched: list[bool] = []
        for a in args:
            if type(a) is Tensor and a._trace is self:
                vals.append(a._value)
                batched.append(True)
            else:
                vals.append(a)
                batched.append(False)
        rule = prim.batch
        if rule is None:
            raise NotImplementedError(f"einad has no batching rule for the primitive {prim.name!r}")
        out = NotImplemented if rule is LOOP else rule(prim, vals, batched, params, self.size)
        if out is NotImplemented:  # declared (LOOP), or a case the rule leaves to a loop
            out = _loop(prim, vals, batched, params, self.size)
        return _box(out, self, None, None)


def _loop(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """Apply `prim` to one example at a time and stack the results."""
    rows = []
    for i in range(size):
        r = bind(prim, [getitem_raw(v, i) if b else v for v, b in zip(vals, batched)], params)
        rows.append(reshape_raw(r, (1,) + shape_of(r)))
    return bind(concat_p, rows, {"axis": 0}) if len(rows) > 1 else rows[0]


# -- vmap -------------------------------------------------------------------------------------


def stacked(f: Callable[..., Any], out_axes: Any = 0) -> Callable[..., Any]:
    """`f` mapped over the leading axis of every argument; results are raw stacked values
    (along `out_axes`, as `vmap`'s; None for results that do not depend on the arguments).

    The Jacobians use it to push a whole basis through the rules at once.
    """
    return _vmap(f, 0, out_axes, raw=True)


def _leaf_axes(spec: Any, tree: Any, what: str) -> list[Any]:
    """One axis (int or None) per leaf of `tree`, from `spec`: an int/None for a whole
    subtree, or a node of the same kind as `tree` (JAX's prefix rule; registered nodes too)."""
    if spec is None or isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return [spec] * len(tree_flatten(tree)[0])
    if isinstance(spec, (tuple, list)) and isinstance(tree, (tuple, list)) and len(spec) == len(tree):
        return [a for s, t in zip(spec, tree) for a in _leaf_axes(s, t, what)]
    if isinstance(spec, dict) and isinstance(tree, dict) and set(spec) == set(tree):
        flat_keys = tree_flatten({k: k for k in tree})[0]  # the order tree_flatten gives the values
        return [a for k in flat_keys for a in _leaf_axes(spec[k], tree[k], what)]
    s, t = node_children(spec), node_children(tree)
    if s is None:
        raise TypeError(f"vmap {what} holds ints and None (in a pytree), got {spec!r}")
    if t is not None and type(spec) is type(tree) and len(s[0]) == len(t[0]) and bool(s[1] == t[1]):
        return [a for sc, tc in zip(s[0], t[0]) for a in _leaf_axes(sc, tc, what)]
    whose = "arguments" if what == "in_axes" else "results"
    structure = tree_flatten(tree)[1]
    raise ValueError(f"vmap {what}={spec!r} does not match the structure of the {whose}, {structure}")


def _plain(x: Any) -> Any:
    """An untraced value as an array: another library's array stays in its library."""
    x = strip(x)
    return arrays.detached(x) if is_array(x) else np.asarray(x)


def _unmapped_result(o: Any, f: Callable[..., Any]) -> Any:
    """A result of `f` that does not depend on the mapped arguments, as a value; TypeError if it
    is not an array or a number (as JAX refuses it)."""
    v = o if type(o) is Tensor and o._trace is not None else _plain(o)
    if np.dtype(dtype_of(v)).kind not in "biufc":
        what = getattr(f, "__name__", "f")
        raise TypeError(f"vmap: {what} returned a value of type {type(o).__name__}, not an array")
    return v


def _result(v: Any) -> Any:
    """A result as the caller should see it: a traced Tensor, or an array of the inputs' library."""
    if type(v) is Tensor:
        if v._trace is not None:
            return v
        v = v._value
    return v if is_array(v) else np.asarray(v)


def vmap(
    f: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0, axis_size: int | None = None
) -> Callable[..., Any]:
    """Map `f` over an axis of its arguments, in one traced run (JAX's `vmap`).

    Batching an einsum is adding one letter to its subscripts, so a mapped
    contraction is one contraction; every other primitive declares its batching
    rule too (a few declare a loop over the batch, which is always correct).

    Args:
        f: The function; its arguments and results may be pytrees of arrays.
        in_axes: The axis to map of each argument: an int or None (not mapped)
            for all, or a tuple with one entry per positional argument, each an
            int, None, or a pytree of them matching that argument. Keyword
            arguments are mapped along their leading axis (as in JAX).
        out_axes: Where the mapped axis goes in each result, likewise (None: the
            result must not depend on the mapped arguments).
        axis_size: The length of the mapped axis (JAX's keyword): needed where no argument
            is mapped (each result then repeats along it); else it must equal the mapped
            arguments' length.

    Returns:
        The mapped function. At top level its results are arrays of the inputs' library; inside
        another transformation, traced Tensors. It composes with `grad` (per-example
        gradients: ``vmap(grad(loss), in_axes=(None, 0))``), `jit` and itself.

    Raises:
        ValueError: If the mapped axes have different lengths (or not `axis_size`), or no
            argument is mapped and `axis_size` is not given.
        TypeError: If `axis_size` is not an int (ValueError: negative).
    """
    check_callable(f, "vmap")
    if axis_size is not None and integer(axis_size, "vmap: axis_size") < 0:
        raise ValueError(f"vmap: axis_size cannot be negative, got {axis_size!r}")
    return _vmap(f, in_axes, out_axes, raw=False, axis_size=axis_size)


def _argument_name(td: Any, k: int, keywords: bool) -> str:
    """Leaf `k` of vmap's arguments (a list, whose last entry is the keyword arguments' dict when
    `keywords`), named for an error: ``argument 1['w']``, ``keyword argument 'scale'``."""
    path = td.leaf_paths("")[k]
    position, rest = path[1:].split("]", 1)
    if keywords and int(position) == len(td.children) - 1:
        end = rest.index("]")  # rest is "['name']" and the path inside that argument
        return f"keyword argument {rest[1:end]}{rest[end + 1 :]}"
    return f"argument {position}{rest}"


def _vmap(
    f: Callable[..., Any], in_axes: Any, out_axes: Any, raw: bool, axis_size: int | None = None
) -> Callable[..., Any]:
    name = f"vmap({getattr(f, '__name__', 'f')})"

    def mapped(*args: Any, **kwargs: Any) -> Any:
        spec = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if kwargs:  # (as JAX: keyword arguments are mapped along their leading axis, whatever in_axes)
            spec, args = (*spec, 0), (*args, kwargs)
        axes = _leaf_axes(tuple(spec), tuple(args), "in_axes")
        flat, td = tree_flatten(list(args))
        sizes: set[int] = set()
        values: list[Any] = []
        for k, (x, ax) in enumerate(zip(flat, axes)):
            if ax is None and not (type(x) is Tensor or is_array(x) or isinstance(x, np.generic)):
                values.append(x)  # a Python number stays one, weakly typed (and hashable for jit), as in
                continue  # JAX; a function, a string, an object of the user's reaches `f` as it is
            v: Any = x if type(x) is Tensor and x._trace is not None else _plain(x)
            if ax is not None:
                if not -len(shape_of(v)) <= ax < len(shape_of(v)):
                    where = _argument_name(td, k, bool(kwargs))
                    raise AxisError(ax, len(shape_of(v)), f"vmap's in_axes for {where} (shape {shape_of(v)})")
                a = normalize_axis(ax, len(shape_of(v)), "in_axes")
                sizes.add(shape_of(v)[a])
                if a:
                    v = moveaxis(v, a, 0)
                    v = v if v._trace is not None else v._value
            values.append(v)
        if axis_size is not None:
            if sizes - {axis_size}:
                raise ValueError(
                    f"vmap: axis_size is {axis_size}, but the mapped axes have length {sorted(sizes)}"
                )
            sizes = {int(axis_size)}
        if not sizes:
            raise ValueError(
                "vmap needs at least one mapped argument (in_axes is None for all), or axis_size"
            )
        if len(sizes) != 1:
            raise ValueError(f"vmap needs one length along the mapped axes, got {sorted(sizes)}")
        size = sizes.pop()
        with tracing(BatchTrace(size)) as trace:
            boxed = [v if ax is None else _box(v, trace, None, None) for v, ax in zip(values, axes)]
            given = tree_unflatten(td, boxed)
            out = f(*given[:-1], **given[-1]) if kwargs else f(*given)
            out_flat, out_td = tree_flatten(out)
            oaxes = [0] * len(out_flat) if out_axes == 0 else _leaf_axes(out_axes, out, "out_axes")
            results: list[Any] = []
            for o, ax in zip(out_flat, oaxes):
                batched = type(o) is Tensor and o._trace is trace
                if ax is None:
                    if batched:
                        raise ValueError(
                            "vmap: out_axes is None for a result that depends on the mapped arguments"
                        )
                    results.append(o)
                    continue
                if batched:
                    v = o._value
                else:
                    v = _unmapped_result(o, f)
                    v = broadcast_raw(v, (size,) + shape_of(v))
                a = normalize_axis(ax, len(shape_of(v)), "out_axes")
                if a:
                    v = moveaxis(v, 0, a)
                results.append(v)
        return tree_unflatten(out_td, results if raw else [_result(r) for r in results])

    mapped.__name__ = mapped.__qualname__ = name
    return mapped
