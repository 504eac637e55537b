"""Batching: run a function once on a stack of inputs (`vmap`).

A `BatchTrace` boxes values that carry an extra leading axis (the batch); its
Tensors report the per-example shape, so code and derivative rules written for
one example run unchanged. Each primitive has a batching rule: an einsum gets
one extra index (one contraction for the whole stack), elementwise operations
align the batch axis, axis arguments shift by one. A primitive without a rule
falls back to a loop, which is always correct.

`jacrev` uses this to pull a whole stack of cotangents through the reverse pass
at once, and `jacfwd` a whole stack of tangents through the forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..aliases import Shape
from ..arrays import is_array
from ..core import LOOP, Params, Primitive, Tensor, Trace, _box, batch_rules, bind, strip, tracing
from ..pytree import tree_flatten, tree_unflatten
from ..rules.einsum import contract, einsum_p, sliced_einsum_p, spread, spread_p
from ..rules.elementwise import BINARY, CONSTANT, PREDICATES, PRIMITIVES, UNARY
from ..rules.indexing import argmax_p, argmin_p, argsort_p, scatter_along_p, take_along_p
from ..rules.linear import moveaxis
from ..rules.reductions import cumprod_p, cumsum_p, max_p, min_p, prod_p
from ..rules.shape import (
    astype_p,
    getitem_p,
    getitem_raw,
    ones_like_p,
    reshape_p,
    reshape_raw,
    scatter_p,
    stop_gradient_p,
)
from ..rules.structural import broadcast_raw, concat_p, where_p
from ..subscripts import fresh_symbols
from ..util import normalize_axis, shape_of

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
        rule = batch_rules.get(prim, _loop)
        if rule is LOOP:  # declared: one call per example
            rule = _loop
        return _box(rule(prim, vals, batched, params, self.size), self, None, None)


def _phys(v: Any) -> Shape:
    """The shape of a value as stored (for a batched value: batch axis first)."""
    return shape_of(v)


# -- rules ----------------------------------------------------------------------------------


def _align(vals: Sequence[Any], batched: Sequence[bool], size: int) -> list[Any]:
    """Give batched operands singleton axes so numpy broadcasting lines up the batch axis."""
    rank = max((len(_phys(v)) - (1 if b else 0) for v, b in zip(vals, batched)), default=0)
    out = []
    for v, b in zip(vals, batched):
        if b:
            s = _phys(v)
            v = reshape_raw(v, (size,) + (1,) * (rank - len(s) + 1) + tuple(s[1:]))
        out.append(v)
    return out


def _elementwise(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, _align(vals, batched, size), params)


def _where(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    vals = _align(vals, batched, size)
    rank = max(len(_phys(v)) + (0 if b else 1) for v, b in zip(vals, batched))
    vals = [
        v if b else reshape_raw(v, (1,) * (rank - len(_phys(v))) + _phys(v)) for v, b in zip(vals, batched)
    ]
    out = bind(prim, vals, params)
    return broadcast_raw(out, np.broadcast_shapes(*(_phys(v) for v in vals)))


def _einsum(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    inputs, output = params["inputs"], params["output"]
    beta = fresh_symbols(set("".join(inputs) + output), 1)[0]
    new_inputs = tuple(beta + s if b else s for s, b in zip(inputs, batched))
    return contract(
        new_inputs,
        beta + output,
        vals,
        params["optimize"],
        params["memory_limit"],
        params.get("executor"),
        params.get("progress", False),
    )


def _spread(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    beta = fresh_symbols(set(params["src"] + params["dst"]), 1)[0]
    return spread(vals[0], beta + params["src"], beta + params["dst"], (size,) + params["shape"])


def _reshape(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, {**params, "shape": (size,) + tuple(params["shape"])})


def _same(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, params)


def _axes(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, {**params, "axes": tuple(a + 1 for a in params["axes"])})


def _axis(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, {**params, "axis": params["axis"] + 1})


def _along(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """take_along_axis and its scatter: an unbatched operand gets a size-1 batch axis, which
    numpy's broadcasting of the array against the indices lines up."""
    vals = [v if b else reshape_raw(v, (1,) + _phys(v)) for v, b in zip(vals, batched)]
    new = {**params, "axis": params["axis"] + 1}
    if "shape" in params:
        new["shape"] = (size,) + tuple(params["shape"])
    return bind(prim, vals, new)


def _moves_axes(index: Any) -> bool:
    """Whether a leading batch slice would not stay first: numpy puts the dimensions of
    advanced indices (arrays, and integers next to arrays) first when they are not adjacent."""
    items = index if isinstance(index, tuple) else (index,)
    if not any(isinstance(i, np.ndarray) for i in items):
        return False
    advanced = [k for k, i in enumerate(items) if isinstance(i, (np.ndarray, int, np.integer))]
    return advanced[-1] - advanced[0] + 1 != len(advanced)


def _index(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    index = params["index"]
    if _moves_axes(index):  # separated advanced indices move axes: stay exact with a loop
        return _loop(prim, vals, batched, params, size)
    index = index if isinstance(index, tuple) else (index,)
    new = dict(params, index=(slice(None),) + index)
    if "shape" in params:
        new["shape"] = (size,) + tuple(params["shape"])
    return bind(prim, vals, new)


def _concat(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    out = [v if b else broadcast_raw(v, (size,) + _phys(v)) for v, b in zip(vals, batched)]
    return bind(prim, out, {"axis": params["axis"] + 1})


def _loop(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """Apply `prim` to one example at a time and stack the results."""
    rows = []
    for i in range(size):
        r = bind(prim, [getitem_raw(v, i) if b else v for v, b in zip(vals, batched)], params)
        rows.append(reshape_raw(r, (1,) + _phys(r)))
    return bind(concat_p, rows, {"axis": 0}) if len(rows) > 1 else rows[0]


def _register() -> None:

    unary = [*UNARY, *CONSTANT, "conj", "real", "imag", "isfinite"]
    for name in unary:  # one operand: the batch axis just rides along
        batch_rules[PRIMITIVES[name]] = _same
    for name in [*BINARY, *(p for p in PREDICATES if p not in unary)]:
        batch_rules[PRIMITIVES[name]] = _elementwise
    batch_rules.update(
        {
            einsum_p: _einsum,
            sliced_einsum_p: _einsum,  # re-planned (and re-sliced) with the batch letter
            spread_p: _spread,
            reshape_p: _reshape,
            astype_p: _same,
            stop_gradient_p: _same,
            ones_like_p: _same,
            getitem_p: _index,
            scatter_p: _index,
            concat_p: _concat,
            where_p: _where,
            max_p: _axes,
            min_p: _axes,
            prod_p: _axes,
            cumsum_p: _axis,
            cumprod_p: _axis,
            argsort_p: _axis,
            argmax_p: _axis,
            argmin_p: _axis,
            take_along_p: _along,
            scatter_along_p: _along,
        }
    )


_register()


# -- vmap -------------------------------------------------------------------------------------


def stacked(f: Callable[..., Any]) -> Callable[..., Any]:
    """`f` mapped over the leading axis of every argument; results are raw stacked values.

    The Jacobians use it to push a whole basis through the rules at once.
    """
    return _vmap(f, 0, 0, raw=True)


def _leaf_axes(spec: Any, tree: Any, what: str) -> list[Any]:
    """One axis (int or None) per leaf of `tree`, from `spec`: an int/None for a whole
    subtree, or a container of the same kind as `tree` (JAX's prefix rule)."""
    if spec is None or isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        return [spec] * len(tree_flatten(tree)[0])
    if isinstance(spec, (tuple, list)) and isinstance(tree, (tuple, list)) and len(spec) == len(tree):
        return [a for s, t in zip(spec, tree) for a in _leaf_axes(s, t, what)]
    if isinstance(spec, dict) and isinstance(tree, dict) and set(spec) == set(tree):
        flat_keys = tree_flatten({k: k for k in tree})[0]  # the order tree_flatten gives the values
        return [a for k in flat_keys for a in _leaf_axes(spec[k], tree[k], what)]
    raise ValueError(f"vmap {what}={spec!r} does not match the structure of {what[:-5]} {tree!r}")


def _plain(x: Any) -> Any:
    """An untraced value as an array: another library's array stays in its library."""
    x = strip(x)
    return x if is_array(x) else np.asarray(x)


def _result(v: Any) -> Any:
    """A result as the caller should see it: a traced Tensor, or an array of the inputs' library."""
    if type(v) is Tensor:
        if v._trace is not None:
            return v
        v = v._value
    return v if is_array(v) else np.asarray(v)


def vmap(f: Callable[..., Any], in_axes: Any = 0, out_axes: Any = 0) -> Callable[..., Any]:
    """Map `f` over an axis of its arguments, in one traced run (JAX's `vmap`).

    Batching an einsum is adding one letter to its subscripts, so a mapped
    contraction is one contraction; every other primitive has a batching rule
    too (a loop over the batch is the fallback for ones without).

    Args:
        f: The function; its arguments and results may be pytrees of arrays.
        in_axes: The axis to map of each argument: an int or None (not mapped)
            for all, or a tuple with one entry per positional argument, each an
            int, None, or a pytree of them matching that argument.
        out_axes: Where the mapped axis goes in each result, likewise (None: the
            result must not depend on the mapped arguments).

    Returns:
        The mapped function. At top level its results are arrays of the inputs' library; inside
        another transformation, traced Tensors. It composes with `grad` (per-example
        gradients: ``vmap(grad(loss), in_axes=(None, 0))``), `jit` and itself.

    Raises:
        ValueError: If the mapped axes have different lengths, or no argument is mapped.
    """
    return _vmap(f, in_axes, out_axes, raw=False)


def _vmap(f: Callable[..., Any], in_axes: Any, out_axes: Any, raw: bool) -> Callable[..., Any]:
    name = f"vmap({getattr(f, '__name__', 'f')})"

    def mapped(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            raise TypeError(
                f"{name} takes its arguments by position (in_axes names each one's axis), "
                f"got the keyword argument(s) {', '.join(map(repr, kwargs))}"
            )
        spec = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        axes = _leaf_axes(tuple(spec), tuple(args), "in_axes")
        flat, td = tree_flatten(list(args))
        sizes: set[int] = set()
        values: list[Any] = []
        for x, ax in zip(flat, axes):
            v: Any = x if type(x) is Tensor and x._trace is not None else _plain(x)
            if ax is not None:
                a = normalize_axis(ax, len(shape_of(v)), "in_axes")
                sizes.add(shape_of(v)[a])
                if a:
                    v = moveaxis(v, a, 0)
                    v = v if v._trace is not None else v._value
            values.append(v)
        if not sizes:
            raise ValueError("vmap needs at least one mapped argument (in_axes is None for all)")
        if len(sizes) != 1:
            raise ValueError(f"vmap needs one length along the mapped axes, got {sorted(sizes)}")
        size = sizes.pop()
        with tracing(BatchTrace(size)) as trace:
            boxed = [v if ax is None else _box(v, trace, None, None) for v, ax in zip(values, axes)]
            out = f(*tree_unflatten(td, boxed))
            out_flat, out_td = tree_flatten(out)
            oaxes = [0] * len(out_flat) if raw else _leaf_axes(out_axes, out, "out_axes")
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
                    v = o if type(o) is Tensor and o._trace is not None else _plain(o)
                    v = broadcast_raw(v, (size,) + shape_of(v))
                a = normalize_axis(ax, len(shape_of(v)), "out_axes")
                if a:
                    v = moveaxis(v, 0, a)
                results.append(v)
        return tree_unflatten(out_td, results if raw else [_result(r) for r in results])

    mapped.__name__ = mapped.__qualname__ = name
    return mapped
