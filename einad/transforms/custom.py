"""User-defined derivatives and rematerialization: `custom_vjp`, `custom_jvp`, `checkpoint`.

Each is one primitive whose parameter ``call`` holds the user's function (and
rules) and the structure of its arguments; the operands are the argument
leaves. So a staged program keeps one equation per call, and replaying that
program under a transformation (``grad(jit(f))``) binds the primitive again and
meets the same rules. The primitive's `impl` runs the user's function on plain
arrays: its Python (branches included) runs on values, at every call.

* ``custom_vjp_call``: a reverse trace computes it with its residual rule, the
  user's ``fwd`` run on the unboxed values (lower traces record its
  operations), and keeps the residuals on the node for ``bwd``. Forward mode
  differentiates the undecorated function (JAX refuses instead).
* ``custom_jvp_call``: forward mode calls the user's rule; reverse mode is
  the transpose of the rule's tangent map, taken by reverse mode through the
  rule as a function of the tangents (the rule must be linear in them).
* ``checkpoint``: a reverse trace keeps only the operands; the VJP rule runs
  ``vjp(f)`` again, so `f`'s intermediates live only during its own pullback.

The function must return one array (a primitive has one result); a pytree
result raises TypeError. Batching uses `vmap`'s per-example loop, which keeps
the primitive, and so the custom rules, for each example.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import arrays
from ..core import Params, Primitive, Staged, Tensor, bind, rules, strip
from ..errors import TracerError
from ..pytree import TreeDef, tree_flatten, tree_unflatten
from ..rules.structural import broadcast_to
from ..util import dtype_of, shape_of, to_operand, wrap
from . import autodiff as transforms

_NUMBERS = (bool, int, float, complex)


class _Call:
    """The static part of one custom call: the user's function, its rules, its arguments' structure.

    It prints as the function's name in a program listing.
    """

    __slots__ = ("bwd", "fn", "fwd", "jvp", "name", "tree")

    def __init__(
        self,
        fn: Callable[..., Any],
        tree: TreeDef,
        fwd: Callable[..., Any] | None = None,
        bwd: Callable[..., Any] | None = None,
        jvp: Callable[..., Any] | None = None,
    ) -> None:
        self.fn, self.tree, self.fwd, self.bwd, self.jvp = fn, tree, fwd, bwd, jvp
        self.name = getattr(fn, "__name__", "f")

    def __repr__(self) -> str:
        return self.name

    def args(self, vals: Sequence[Any]) -> list[Any]:
        """The user's positional arguments from operand values (arrays given as Tensors)."""
        return list(tree_unflatten(self.tree, [_arg(v) for v in vals]))


def _arg(v: Any) -> Any:
    """An operand as the user's code sees it: a Tensor (traced or constant), or a Python number."""
    return v if isinstance(v, _NUMBERS) else wrap(v)


def _result(out: Any, name: str, what: str = "function") -> Any:
    """The one array a custom function returned, as a value one level down (or TypeError)."""
    array = isinstance(out, (np.ndarray, np.generic, *_NUMBERS)) or arrays.is_array(out)
    if not (type(out) is Tensor or array):
        raise TypeError(
            f"the custom {what} {name!r} must return one array, got {type(out).__name__}: "
            "custom_vjp, custom_jvp and checkpoint functions have a single array output"
        )
    return to_operand(out)


def _operands(args: Sequence[Any]) -> tuple[list[Any], TreeDef]:
    leaves, tree = tree_flatten(list(args))
    return [to_operand(x) for x in leaves], tree


def _impl(*vals: Any, call: _Call) -> Any:
    """Run the user's function on plain arrays; the result is an array of its own."""
    out = _result(call.fn(*call.args(vals)), call.name)
    if type(out) is Tensor:
        raise TracerError(
            f"the custom function {call.name!r} closes over a value traced by {out._trace!r}: "
            "pass that value as an argument instead"
        )
    if not arrays.is_array(out):
        out = np.asarray(out)
    elif not arrays.is_numpy(out):
        return out  # another library's array: einad never writes into those
    if any(isinstance(v, np.ndarray) and np.may_share_memory(out, v) for v in vals):
        out = out.copy()  # a program may hand the result on or write into it
    return out


def _zeros_like(v: Any) -> Any:
    return arrays.zeros(_concrete(v), shape_of(v), dtype_of(v))


def _concrete(v: Any) -> Any:
    """The plain array under every trace (a staged value's concrete one): its library and device."""
    v = strip(v)
    return v.concrete if type(v) is Staged else v


def _like(t: Any, ans: Any, name: str) -> Any:
    """A tangent or cotangent with the shape of `ans` (user rules may return a broadcastable one)."""
    t = _result(t, name, "rule")
    return t if shape_of(t) == shape_of(ans) else broadcast_to(t, shape_of(ans))


def _jvp_of(call: _Call, tangents: list[Any], vals: Sequence[Any]) -> Any:
    """The tangent of the undecorated function: forward mode through `call.fn`."""
    idx = [i for i, t in enumerate(tangents) if t is not None]

    def partial(*d: Any) -> Any:
        leaves = list(vals)
        for i, x in zip(idx, d):
            leaves[i] = x
        return call.fn(*call.args(leaves))

    _, t = transforms.jvp(partial, [vals[i] for i in idx], [tangents[i] for i in idx])
    return to_operand(t)


def _pullback_of(f: Callable[..., Any], vals: Sequence[Any], g: Any, needed: list[bool]) -> list[Any | None]:
    """The cotangents of the operands `needed`, by reverse mode through ``f(*vals)``."""
    idx = [i for i, n in enumerate(needed) if n]

    def partial(*d: Any) -> Any:
        leaves = list(vals)
        for i, x in zip(idx, d):
            leaves[i] = x
        return f(*leaves)

    _, pull = transforms.vjp(partial, *[vals[i] for i in idx])
    cts: list[Any | None] = [None] * len(vals)
    for i, c in zip(idx, pull(g)):
        cts[i] = c
    return cts


# -- custom_vjp ----------------------------------------------------------------------------------


def _vjp_residuals(vals: Sequence[Any], params: Params, needed: list[bool]) -> tuple[Any, Any]:
    call: _Call = params["call"]
    assert call.fwd is not None
    pair = call.fwd(*call.args(vals))
    if not (isinstance(pair, tuple) and len(pair) == 2):
        raise TypeError(f"the fwd of custom_vjp {call.name!r} must return a pair (output, residuals)")
    return _result(pair[0], call.name, "fwd"), pair[1]


def _custom_vjp_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    call: _Call = params["call"]
    assert call.bwd is not None
    cts = call.bwd(ans, _arg(g))
    n = len(call.tree.children)
    if not isinstance(cts, (tuple, list)) or len(cts) != n:
        raise TypeError(
            f"the bwd of custom_vjp {call.name!r} must return a tuple of {n} cotangent(s), "
            f"one per argument (None for zero), got {type(cts).__name__}"
        )
    flat: list[Any] = []
    for sub, c in zip(call.tree.children, cts):
        leaves = [None] * sub.num_leaves if c is None else tree_flatten(c)[0]
        if len(leaves) != sub.num_leaves:
            raise TypeError(f"the bwd of custom_vjp {call.name!r} returned {c!r} for an argument {sub}")
        flat += leaves
    return [None if c is None else _like(c, v, call.name) for c, v in zip(flat, vals)]


custom_vjp_p = rules(
    Primitive("custom_vjp_call", _impl),
    vjp=_custom_vjp_vjp,
    jvp=lambda ts, ans, vals, p: _jvp_of(p["call"], ts, vals),
    residual=_vjp_residuals,
)


class custom_vjp:  # lower case: JAX's name, used as a decorator
    """A function with a reverse-mode derivative of your own, as ``jax.custom_vjp``.

    Decorate the function, then give its rule with ``f.defvjp(fwd, bwd)``:
    ``fwd(*args)`` returns ``(output, residuals)`` and ``bwd(residuals, g)``
    returns a tuple with one cotangent per argument (None for zero; a pytree
    for a pytree argument). Every reverse-mode transformation (`grad`, `vjp`,
    `jacrev`, ``Tensor.backward``), also through `jit` and `vmap`, runs `fwd` in
    the forward pass and `bwd` in the reverse pass; `fwd` and `bwd` are
    themselves differentiated for higher orders. Forward mode (`jvp`,
    `jacfwd`) differentiates the undecorated function (JAX raises there).

    The function takes arrays (or pytrees of them) and returns one array. It
    runs on plain arrays, so Python may branch on its values, even under `jit`.

    Example::

        @ea.custom_vjp
        def clip_gradient(x):
            return x

        clip_gradient.defvjp(lambda x: (x, None), lambda res, g: (ea.clip(g, -1.0, 1.0),))
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.fwd: Callable[..., Any] | None = None
        self.bwd: Callable[..., Any] | None = None
        functools.update_wrapper(self, fn)

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Set the rule: ``fwd(*args) -> (output, residuals)``, ``bwd(residuals, g) -> cotangents``."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any) -> Tensor:
        if self.fwd is None or self.bwd is None:
            raise TypeError(f"custom_vjp {self.fn.__name__!r} has no rule: call its defvjp(fwd, bwd) first")
        vals, tree = _operands(args)
        return wrap(bind(custom_vjp_p, vals, {"call": _Call(self.fn, tree, fwd=self.fwd, bwd=self.bwd)}))


# -- custom_jvp ----------------------------------------------------------------------------------


def _rule_tangent(call: _Call, vals: Sequence[Any], tangents: Sequence[Any]) -> Any:
    """The tangent output of the user's rule, zeros standing for absent tangents."""
    assert call.jvp is not None
    ts = [_zeros_like(v) if t is None else t for v, t in zip(vals, tangents)]
    pair = call.jvp(tuple(call.args(vals)), tuple(call.args(ts)))
    if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
        raise TypeError(f"the jvp rule of custom_jvp {call.name!r} must return (primal_out, tangent_out)")
    return pair[1]


def _custom_jvp_jvp(tangents: list[Any], ans: Any, vals: Sequence[Any], params: Params) -> Any:
    return _like(_rule_tangent(params["call"], vals, tangents), ans, params["call"].name)


def _custom_jvp_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    call: _Call = params["call"]
    zeros = [_zeros_like(v) for v in vals]
    idx = [i for i, n in enumerate(needed) if n]

    def tangent_map(*ts: Any) -> Any:  # linear in the tangents: its transpose is the VJP
        full: list[Any] = list(zeros)
        for i, t in zip(idx, ts):
            full[i] = t
        return _like(_rule_tangent(call, vals, full), ans, call.name)

    _, pull = transforms.vjp(tangent_map, *[zeros[i] for i in idx])
    cts: list[Any] = [None] * len(vals)
    for i, c in zip(idx, pull(g)):
        cts[i] = c
    return cts


custom_jvp_p = rules(
    Primitive("custom_jvp_call", _impl),
    jvp=_custom_jvp_jvp,
    vjp=_custom_jvp_vjp,
    keep=lambda needed: ([True] * len(needed), False),
)


class custom_jvp:  # lower case: JAX's name, used as a decorator
    """A function with a forward-mode derivative of your own, as ``jax.custom_jvp``.

    Decorate the function, then give its rule with ``f.defjvp(rule)`` (or
    decorate the rule with ``@f.defjvp``): ``rule(primals, tangents)`` takes two
    tuples with one entry per argument and returns ``(primal_out,
    tangent_out)``; a tangent the caller does not differentiate is zeros.
    `jvp`, `jacfwd` and `hessian` call the rule; reverse mode (`grad`, `vjp`,
    `jacrev`) uses its transpose, taken by reverse mode through the rule as a
    function of the tangents, so the rule must be linear in the tangents (as
    a JVP is). Higher orders differentiate the rule. The function takes
    arrays (or pytrees of them) and returns one array.

    Example (a log(1 + e^x) whose derivative stays finite for large x)::

        @ea.custom_jvp
        def log1pexp(x):
            return ea.log(1.0 + ea.exp(x))

        @log1pexp.defjvp
        def log1pexp_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return log1pexp(x), t * (1.0 - 1.0 / (1.0 + ea.exp(x)))
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.rule: Callable[..., Any] | None = None
        functools.update_wrapper(self, fn)

    def defjvp(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """Set the rule ``rule(primals, tangents) -> (primal_out, tangent_out)``; returns `rule`."""
        self.rule = rule
        return rule

    def __call__(self, *args: Any) -> Tensor:
        if self.rule is None:
            raise TypeError(f"custom_jvp {self.fn.__name__!r} has no rule: call its defjvp(rule) first")
        vals, tree = _operands(args)
        return wrap(bind(custom_jvp_p, vals, {"call": _Call(self.fn, tree, jvp=self.rule)}))


# -- checkpoint ----------------------------------------------------------------------------------


def _checkpoint_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    call: _Call = params["call"]
    return _pullback_of(lambda *v: call.fn(*call.args(v)), vals, g, needed)


checkpoint_p = rules(
    Primitive("checkpoint", _impl),
    vjp=_checkpoint_vjp,
    jvp=lambda ts, ans, vals, p: _jvp_of(p["call"], ts, vals),
    keep=lambda needed: ([True] * len(needed), False),  # the operands, never the intermediates
)


def checkpoint(f: Callable[..., Any]) -> Callable[..., Tensor]:
    """`f` recomputed in the reverse pass instead of remembered (``jax.checkpoint``, remat).

    Values and derivatives are `f`'s. A reverse pass keeps only `f`'s arguments
    through the forward pass, not its intermediates, and runs `f` again when
    the cotangent reaches it: memory for compute. Wrapping each block of a
    deep chain bounds the memory of `grad` by the blocks' boundaries plus one
    block's intermediates. `f` takes arrays (or pytrees of them) and returns one
    array; forward mode differentiates `f` directly.
    """

    @functools.wraps(f)
    def checkpointed(*args: Any) -> Tensor:
        vals, tree = _operands(args)
        return wrap(bind(checkpoint_p, vals, {"call": _Call(f, tree)}))

    return checkpointed
