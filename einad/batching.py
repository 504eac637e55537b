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
from typing import Any, TypeAlias

import numpy as np

from .core import Params, Primitive, Tensor, Trace, _box, bind
from .einsum import contract, spread
from .pytree import tree_flatten, tree_unflatten
from .util import Shape, shape_of

BatchRule: TypeAlias = Callable[[Primitive, list[Any], list[bool], Params, int], Any]
"""``rule(prim, vals, batched, params, size)``: `prim` applied to values with a leading batch axis."""

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
        rule = RULES.get(prim.name, _loop)
        return _box(rule(prim, vals, batched, params, self.size), self, None, None)


def _phys(v: Any) -> Shape:
    """The shape of a value as stored (for a batched value: batch axis first)."""
    return shape_of(v)


# -- rules ----------------------------------------------------------------------------------


def _align(vals: Sequence[Any], batched: Sequence[bool], size: int) -> list[Any]:
    """Give batched operands singleton axes so numpy broadcasting lines up the batch axis."""
    rank = max((len(_phys(v)) - (1 if b else 0) for v, b in zip(vals, batched)), default=0)
    from .structural import reshape_raw

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
    from .structural import broadcast_raw

    c, x, y = vals
    if not (batched[1] or batched[2]):
        raise AssertionError("where's condition is never batched")
    x, y = _align([x, y], batched[1:], size)
    rank = max(len(_phys(x)), len(_phys(y)), np.ndim(c) + 1)
    c = np.reshape(c, (1,) * (rank - np.ndim(c)) + np.shape(c))
    out = bind(prim, [c, x, y], params)
    return broadcast_raw(out, np.broadcast_shapes(np.shape(c), _phys(x), _phys(y)))


def _einsum(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    from .subscripts import fresh_symbols

    inputs, output = params["inputs"], params["output"]
    beta = fresh_symbols(set("".join(inputs) + output), 1)[0]
    new_inputs = tuple(beta + s if b else s for s, b in zip(inputs, batched))
    return contract(new_inputs, beta + output, vals, params["optimize"], params["memory_limit"])


def _spread(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    from .subscripts import fresh_symbols

    beta = fresh_symbols(set(params["src"] + params["dst"]), 1)[0]
    return spread(vals[0], beta + params["src"], beta + params["dst"], (size,) + params["shape"])


def _reshape(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, {**params, "shape": (size,) + tuple(params["shape"])})


def _same(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, params)


def _axes(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    return bind(prim, vals, {**params, "axes": tuple(a + 1 for a in params["axes"])})


def _has_array(index: Any) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, np.ndarray) for i in items)


def _index(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    index = params["index"]
    if _has_array(index):  # advanced indexing may move axes: stay exact with a loop
        return _loop(prim, vals, batched, params, size)
    index = index if isinstance(index, tuple) else (index,)
    new = dict(params, index=(slice(None),) + index)
    if "shape" in params:
        new["shape"] = (size,) + tuple(params["shape"])
    return bind(prim, vals, new)


def _concat(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    from .structural import broadcast_raw

    out = [v if b else broadcast_raw(v, (size,) + _phys(v)) for v, b in zip(vals, batched)]
    return bind(prim, out, {"axis": params["axis"] + 1})


def _loop(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """Apply `prim` to one example at a time and stack the results."""
    from .structural import concat_p, getitem_raw, reshape_raw

    rows = []
    for i in range(size):
        r = bind(prim, [getitem_raw(v, i) if b else v for v, b in zip(vals, batched)], params)
        rows.append(reshape_raw(r, (1,) + _phys(r)))
    return bind(concat_p, rows, {"axis": 0}) if len(rows) > 1 else rows[0]


def _build_rules() -> dict[str, BatchRule]:
    from .elementwise import BINARY, CONSTANT, UNARY

    rules: dict[str, BatchRule] = {}
    for name in [*UNARY, *CONSTANT, "conj", "real"]:  # one operand: the batch axis just rides along
        rules[name] = _same
    for name in BINARY:
        rules[name] = _elementwise
    rules.update(
        einsum=_einsum,
        spread=_spread,
        reshape=_reshape,
        astype=_same,
        getitem=_index,
        scatter_add=_index,
        concatenate=_concat,
        where=_where,
        max=_axes,
        min=_axes,
        prod=_axes,
    )
    return rules


RULES = _build_rules()


# -- vmap -------------------------------------------------------------------------------------


def vmap(f: Callable[..., Any]) -> Callable[..., Any]:
    """Map `f` over the leading axis of every argument, in one traced run.

    Every argument (a pytree of arrays) must have the same leading length.
    Outputs get that leading axis too (an output that does not depend on the
    inputs is broadcast along it).
    """

    def mapped(*args: Any) -> Any:
        flat, td = tree_flatten(list(args))
        sizes = {shape_of(x)[0] for x in flat}
        if len(sizes) != 1:
            raise ValueError(f"vmap needs one leading length across arguments, got {sorted(sizes)}")
        size = sizes.pop()
        trace = BatchTrace(size)
        boxed = [_box(x if type(x) is Tensor else np.asarray(x), trace, None, None) for x in flat]
        out = f(*tree_unflatten(td, boxed))
        out_flat, out_td = tree_flatten(out)
        results: list[Any] = []
        for o in out_flat:
            if type(o) is Tensor and o._trace is trace:
                results.append(o._value)
            else:
                from .structural import broadcast_raw

                v = o if type(o) is Tensor and o._trace is not None else np.asarray(o)
                results.append(broadcast_raw(v, (size,) + shape_of(v)))
        return tree_unflatten(out_td, results)

    return mapped
