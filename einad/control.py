"""JAX's structured control flow (``jax.lax.fori_loop``, ``scan``, ``cond``, ``switch``,
``while_loop``) as Python control flow over einad operations.

einad traces Python, so a loop is its body run once per iteration: differentiable in every
mode (reverse mode through `while_loop` too, which JAX refuses), mapped by `vmap`, and
unrolled into the program under `einad.jit` (a program grows with the trip count; JAX
compiles one loop instead). A branch whose predicate is known runs alone; where it is not
(staged by `jit`, or one value per example under `vmap`) both branches run and `where`
selects, which is what JAX's `cond` does under `vmap`.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

from . import ops
from .errors import TracerError
from .pytree import tree_flatten, tree_map, tree_unflatten
from .util import shape_of

__all__ = ["cond", "fori_loop", "scan", "switch", "while_loop"]


def _static_int(value: Any, what: str) -> int:
    """A loop bound as a Python int: known eagerly and under grad; inside `jit`, a static one."""
    try:
        return operator.index(value)
    except TracerError:
        raise TracerError(
            f"{what}: a loop bound computed inside einad.jit is not known while the program is staged "
            "(einad unrolls the loop): pass it as a Python int, or mark it static (static_argnums)"
        ) from None
    except TypeError:
        return int(value)


def fori_loop(
    lower: int, upper: int, body_fun: Callable[[int, Any], Any], init_val: Any, *, unroll: Any = None
) -> Any:
    """``for i in range(lower, upper): val = body_fun(i, val)``, as ``jax.lax.fori_loop``.

    `i` is a Python int (JAX passes a traced integer; an int indexes and computes alike). The
    bounds must be known (Python ints, or values known eagerly or under `grad`); ``unroll``
    (JAX's) is taken and changes nothing: the loop is always unrolled.
    """
    val = init_val
    for i in range(_static_int(lower, "fori_loop"), _static_int(upper, "fori_loop")):
        val = body_fun(i, val)
    return val


def scan(
    f: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any = None,
    length: int | None = None,
    reverse: bool = False,
    unroll: Any = 1,
) -> tuple[Any, Any]:
    """``jax.lax.scan``: `f(carry, x) -> (carry, y)` over the leading axis of `xs` (a pytree),
    returning the last carry and the `y`s stacked along a new leading axis (a pytree like
    each `y`; None where `f` gives None). Without `xs`, `length` iterations with ``x = None``.
    ``reverse`` runs from the last slice to the first (the `y`s keep the slices' order);
    ``unroll`` (JAX's) is taken and changes nothing: the loop is always unrolled.
    """
    leaves, tree = tree_flatten(xs)
    if any(not shape_of(x) for x in leaves):
        raise ValueError("scan's xs are arrays with a leading axis to scan over, not 0-d values")
    lengths = {shape_of(x)[0] for x in leaves}
    if length is not None:
        lengths.add(_static_int(length, "scan"))
    if len(lengths) != 1:
        raise ValueError(
            "scan got no xs and no length"
            if not lengths
            else f"scan got xs of leading sizes {sorted(lengths)}"
            + ("" if length is None else f" and length={length}")
        )
    (n,) = lengths
    order = range(n - 1, -1, -1) if reverse else range(n)
    carry, ys = init, []
    for k in order:
        x = tree_unflatten(tree, [leaf[k] for leaf in leaves]) if leaves else None
        carry, y = f(carry, x)
        ys.append(y)
    if reverse:
        ys.reverse()
    if not ys:
        return carry, None
    return carry, tree_map(lambda *parts: ops.stack(parts), ys[0], *ys[1:]) if ys[0] is not None else None


def _known_bool(pred: Any) -> bool | None:
    """The predicate's truth where it is known; None where it is staged by `jit` or mapped by `vmap`."""
    try:
        return bool(pred)
    except TracerError:
        return None


def _select(choose: Callable[[Sequence[Any]], Any], outs: Sequence[Any], what: str) -> Any:
    """The branches' outputs, leaf by leaf, combined by `choose` (a `where` of the branches'
    leaves); the branches must return one structure."""
    flat = [tree_flatten(o) for o in outs]
    if any(tree != flat[0][1] for _, tree in flat):
        raise TypeError(
            f"{what}: the branches return different structures: {', '.join(str(t) for _, t in flat)}"
        )
    chosen = [choose(parts) for parts in zip(*(leaves for leaves, _ in flat))]
    return tree_unflatten(flat[0][1], chosen)


def cond(pred: Any, true_fun: Callable[..., Any], false_fun: Callable[..., Any], *operands: Any) -> Any:
    """``true_fun(*operands)`` if `pred` else ``false_fun(*operands)``, as ``jax.lax.cond``.

    A known predicate runs one branch. A predicate staged by `jit` or mapped by `vmap` runs
    both and selects each output with `where` (the branches must return the same structure);
    the derivative is the chosen branch's alone (the branch not taken sees its operands without
    a derivative, so a nan slope there stays out). As with `where`, numpy's floating-point
    warnings of the branch not taken show (``sqrt`` of the negatives the other branch handles).
    """
    flag = _known_bool(pred)
    if flag is not None:
        return true_fun(*operands) if flag else false_fun(*operands)
    outs = [true_fun(*_when(pred, operands)), false_fun(*_when(ops.equal(pred, False), operands))]
    return _select(lambda parts: ops.where(pred, parts[0], parts[1]), outs, "cond")


def _when(chosen: Any, operands: Sequence[Any]) -> Any:
    """The operands as a branch sees them where `chosen` is False: without a derivative, so
    that the branch's slope there (a nan of ``sqrt`` at the negatives another branch takes)
    reaches a stopped copy, not the operands (one `where` on the outputs alone would pass
    ``0 * nan`` back)."""
    return tree_map(lambda v: ops.where(chosen, v, ops.stop_gradient(v)), list(operands))


def switch(index: Any, branches: Sequence[Callable[..., Any]], *operands: Any) -> Any:
    """``branches[index](*operands)``, the index clamped into range, as ``jax.lax.switch``; an
    index staged by `jit` or mapped by `vmap` runs every branch and selects, as `cond`."""
    if not branches:
        raise ValueError("switch needs at least one branch")
    last = len(branches) - 1
    try:
        k: int | None = int(index)  # (JAX's index is a scalar: a float is truncated, as int())
    except TracerError:  # staged by jit, or one per example under vmap
        k = None
    if k is not None:
        return branches[min(max(k, 0), last)](*operands)
    clamped = ops.clip(index, 0, last)
    outs = [b(*_when(ops.equal(clamped, j), operands)) for j, b in enumerate(branches)]

    def pick(parts: Sequence[Any]) -> Any:
        out = parts[last]
        for j in range(last - 1, -1, -1):
            out = ops.where(ops.equal(clamped, j), parts[j], out)
        return out

    return _select(pick, outs, "switch")


def while_loop(cond_fun: Callable[[Any], Any], body_fun: Callable[[Any], Any], init_val: Any) -> Any:
    """``while cond_fun(val): val = body_fun(val)``, as ``jax.lax.while_loop``, and
    differentiable in reverse mode too. The condition must be known at each step: inside
    `einad.jit` or `vmap` (where it is not) a TracerError names what to write instead."""
    val = init_val
    while True:
        flag = _known_bool(cond_fun(val))
        if flag is None:
            raise TracerError(
                "while_loop with a condition computed inside einad.jit or mapped by vmap: einad "
                "unrolls the loop, so the number of iterations must be known; use fori_loop with "
                "known bounds (or run the loop outside the transformation)"
            )
        if not flag:
            return val
        val = body_fun(val)
