"""User-defined derivatives and rematerialization: `custom_vjp`, `custom_jvp`, `checkpoint`.

Each is one primitive whose parameter ``call`` (a `_Call`) holds the user's function and
rules as *flat* functions of the operands, as JAX flattens them: the operands are the array
leaves of the arguments (those at ``nondiff_argnums`` included, marked as receiving no
derivative); the other leaves of those arguments (functions, strings, numbers of the
user's own) are kept in the call. The function's output, any pytree, is one array for the
primitive: a single array stays itself, several are raveled and joined (`_Out`), and the
user's call splits them again with einad operations, so every transformation sees one
result. A staged program keeps one equation per call, and replaying that program under a
transformation (``grad(jit(f))``) binds the primitive again and meets the same rules. The
primitive's `impl` runs the user's function on plain arrays: its Python (branches included)
runs on values, at every call.

* ``custom_vjp_call``: a reverse trace computes it with its residual rule, the user's
  ``fwd`` run on the unboxed values (lower traces record its operations), and keeps the
  residuals on the node for ``bwd``. Forward mode uses the same rule: the JVP along ``t``
  is ``J t``, and ``bwd`` is ``g -> Jᵀ g``, so the JVP is the transpose of ``bwd`` in ``g``,
  taken by einad's reverse mode through ``bwd`` (``bwd`` must be linear in ``g``, as a VJP is).
* ``custom_jvp_call``: forward mode calls the user's rule for the result and the tangent
  together (``jvp_with_primal``); reverse mode is the transpose of the rule's tangent map,
  recorded by reverse mode through the rule as a function of the tangents when the forward
  pass runs it for the result (the rule must be linear in the tangents). Either way the
  function itself does not run, as in JAX.
* ``checkpoint``: a reverse trace keeps only the operands; the VJP rule runs ``vjp(f)``
  again, so `f`'s intermediates live only during its own pullback.

Batching maps the function and its rules with `vmap` into a new call of the same primitive
(one call of the user's code per `vmap`, the custom rule kept for any derivative taken
outside); where the function reads a batched value as a Python number (a branch on it) the
batch falls back to one call per example.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np

from .. import arrays
from ..aliases import Shape
from ..core import Params, Primitive, QuietRules, Tensor, alias, bind, declare
from ..errors import TracerError, check_callable
from ..pytree import TreeDef, tree_flatten, tree_map, tree_unflatten
from ..rules.linear import sum as _sum
from ..rules.shape import astype, getitem_raw, reshape_raw
from ..rules.structural import broadcast_to, concat_p
from ..util import dtype_of, raw, shape_of, to_array_operand, to_operand, wrap
from . import autodiff as transforms
from .batching import vmap

_NUMBERS = (bool, int, float, complex)

FlatFn = Callable[[Sequence[Any]], Any]


class _Call:
    """The static part of one custom call: the user's function and rules as flat functions.

    ``fn(vals) -> out``; ``fwd(vals) -> (out, residuals)``; ``bwd(residuals, g)`` -> one
    cotangent (or None) per operand; ``jvp(vals, tangents) -> (out, tangent)`` (no None among the
    tangents). `out` is one array (several outputs joined by `_Out`). `nondiff` marks the
    operands that get no derivative (the arrays of ``nondiff_argnums``). It prints as the
    function's name in a program listing.
    """

    __slots__ = ("bwd", "fn", "fwd", "jvp", "name", "nondiff")

    def __init__(
        self,
        name: str,
        fn: FlatFn,
        nondiff: Sequence[bool],
        fwd: FlatFn | None = None,
        bwd: Callable[[Any, Any], list[Any]] | None = None,
        jvp: Callable[[Sequence[Any], Sequence[Any]], Any] | None = None,
    ) -> None:
        self.name, self.fn, self.nondiff = name, fn, tuple(nondiff)
        self.fwd, self.bwd, self.jvp = fwd, bwd, jvp

    def __repr__(self) -> str:
        return self.name


def _is_array(x: Any) -> bool:
    return type(x) is Tensor or isinstance(x, (np.ndarray, np.generic)) or arrays.is_array(x)


def _arg(v: Any) -> Any:
    """An operand as the user's code sees it: a Tensor (traced or constant; an `alias` of a traced
    one, which the code may assign into), or a Python number."""
    if type(v) is Tensor:
        return alias(v)
    return v if isinstance(v, _NUMBERS) else wrap(v)


def _given(tree: Any) -> Any:
    """`tree` (residuals, cotangents) as a user's rule receives it: each Tensor an `alias`."""
    return tree_map(lambda x: alias(x) if type(x) is Tensor else x, tree)


def _zeros_like(v: Any) -> Any:
    return arrays.zeros(raw(v), shape_of(v), dtype_of(v))


def _typestr(shape: tuple[int, ...], dtype: np.dtype[Any]) -> str:
    return f"{dtype.name}{list(shape)}"


def _is_value(x: Any) -> bool:
    """Whether `x` may be a leaf of an output, a cotangent or a tangent: an array or a number."""
    return _is_array(x) or isinstance(x, _NUMBERS)


def _got(x: Any) -> str:
    """What a rule returned, for an error message: ``a tuple of 3``, ``Tensor``."""
    return f"a {type(x).__name__} of {len(x)}" if isinstance(x, (tuple, list)) else type(x).__name__


def _pair(x: Any) -> bool:
    return isinstance(x, (tuple, list)) and len(x) == 2


def _fitted(x: Any, shape: tuple[int, ...]) -> Any | None:
    """`x` broadcast to `shape` (a rule may return a cotangent or tangent that broadcasts to
    its value's shape, a scalar say), or None if it does not."""
    if shape_of(x) == shape:
        return x
    try:
        fits = np.broadcast_shapes(shape_of(x), shape) == shape
    except ValueError:
        fits = False
    return to_operand(broadcast_to(x, shape)) if fits else None


# -- the arguments of one call -------------------------------------------------------------


def _positional(
    fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], what: str, defaults: bool = True
) -> list[Any]:
    """The call's arguments as positional ones: keywords placed by `fn`'s signature and, with
    `defaults`, the defaults of the parameters not given filled in, as JAX's custom rules do (so
    that ``f(x)`` and ``f(x, y=2.0)`` have the same arguments, and ``bwd`` the same cotangents)."""
    if not kwargs and not defaults:
        return list(args)
    try:
        bound = inspect.signature(fn).bind(*args, **kwargs)
    except (TypeError, ValueError) as e:
        if not kwargs and isinstance(e, ValueError):  # no signature to read (a builtin): as given
            return list(args)
        raise TypeError(f"{what}: {e}") from None
    bound.apply_defaults()
    passed = [k for k in bound.kwargs if k in kwargs]  # keyword-only parameters left out keep their defaults
    if passed:
        raise TypeError(f"{what}: keyword-only arguments ({', '.join(passed)}) cannot be passed to it")
    return list(bound.args)


def _argnums(nums: Any, keyword: str, what: str) -> tuple[int, ...]:
    """`nums` (an int or a sequence of ints) as a tuple, or TypeError."""
    items = (nums,) if isinstance(nums, (int, np.integer)) else nums
    if not isinstance(items, (tuple, list)) or not all(
        isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)) for i in items
    ):
        raise TypeError(f"{what}: {keyword} must be an int or a tuple of ints, got {nums!r}")
    return tuple(int(i) for i in items)


def _with_names(
    fn: Callable[..., Any], nums: tuple[int, ...], names: str | Sequence[str], keyword: str, what: str
) -> tuple[int, ...]:
    """`nums` with the positions of the parameters `names` added (JAX's ``*_argnames``)."""
    names = (names,) if isinstance(names, str) else tuple(names)
    if not names:
        return nums
    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # (a builtin without a signature)
        raise TypeError(f"{what}: {keyword} needs a function whose parameters Python can read") from None
    out = set(nums)
    for n in names:
        if n not in params:
            raise ValueError(f"{what}: {keyword} names {n!r}, which is not a parameter of {_name(fn)!r}")
        out.add(params.index(n))
    return tuple(sorted(out))


class _Args:
    """How one call's positional arguments become the primitive's operands, and back.

    Every leaf of an argument not in `nondiff` is an operand (numbers and arrays; anything
    else is a TypeError naming the argument). In a `nondiff` argument, array leaves are
    operands marked `nondiff` (no derivative flows to them, and a traced one stays traced,
    so `jit` and `vmap` see it); other leaves are kept as they are.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        what: str,
        args: list[Any],
        nondiff: tuple[int, ...],
        operands: list[Any],
        keyword: str = "nondiff_argnums",
    ) -> None:
        """Fill `operands` (the caller's list: a call keeps no operand alive) from `args`."""
        self.fn = fn
        n = len(args)
        for i in nondiff:
            if not -n <= i < n:
                raise ValueError(
                    f"{what}: {keyword} {nondiff!r} is out of range for a call with {n} argument(s)"
                )
        self.nondiff_pos = tuple(sorted({i % n for i in nondiff}))
        self.diff_pos = tuple(i for i in range(n) if i not in self.nondiff_pos)
        leaves, self.tree = tree_flatten(args)
        self.owner: list[int] = [i for i, c in enumerate(self.tree.children) for _ in range(c.num_leaves)]
        self.slot: list[int | None] = []  # per leaf: its operand, or None for a leaf kept as it is
        self.static: list[Any] = []
        self.nondiff: list[bool] = []
        for k, (leaf, i) in enumerate(zip(leaves, self.owner)):
            kept = i in self.nondiff_pos
            if kept and not _is_array(leaf):
                self.slot.append(None)
                self.static.append(leaf)
                continue
            try:
                v = to_operand(leaf)
            except TypeError:
                hint = "" if kept else f"; list its position in {keyword} to pass it as it is"
                raise TypeError(
                    f"{what}: {self.label(k)} is a {type(leaf).__name__}, not an array{hint}"
                ) from None
            self.slot.append(len(operands))
            self.static.append(None)
            operands.append(v)
            self.nondiff.append(kept)
        self.shapes = [shape_of(v) for v in operands]
        self.dtypes = [dtype_of(v) for v in operands]
        self.nondiff_ops = [j for j, nd in enumerate(self.nondiff) if nd]

    def label(self, leaf: int) -> str:
        """How the user names a leaf: ``argument 1 (params['w'])``."""
        i = self.owner[leaf]
        first = self.owner.index(i)
        path = self.tree.children[i].leaf_paths()[leaf - first]
        return f"argument {i} ({_param_name(self.fn, i)}{path})"

    def args(self, vals: Sequence[Any]) -> list[Any]:
        """The user's positional arguments from operand values (None for values not at hand)."""
        leaves = [
            self.static[k] if s is None else _arg(vals[s]) if vals[s] is not None else None
            for k, s in enumerate(self.slot)
        ]
        return list(tree_unflatten(self.tree, leaves))

    def split(self, vals: Sequence[Any]) -> tuple[list[Any], tuple[Any, ...]]:
        """The arguments at ``nondiff_argnums`` (in that order), and the others (a tuple)."""
        args = self.args(vals)
        return [args[i] for i in self.nondiff_pos], tuple(args[i] for i in self.diff_pos)

    def nondiff_args(self, nd_vals: Sequence[Any]) -> list[Any]:
        """The arguments at ``nondiff_argnums`` from the values of the nondiff operands only."""
        vals: list[Any] = [None] * len(self.nondiff)
        for j, v in zip(self.nondiff_ops, nd_vals):
            vals[j] = v
        return self.split(vals)[0]

    def cotangents(self, cts: Any, who: str) -> list[Any]:
        """One cotangent (or None) per operand from what a ``bwd`` returned, checked against
        the arguments: one entry per differentiable argument, of its structure and shapes."""
        n = len(self.diff_pos)
        if not isinstance(cts, (tuple, list)) or len(cts) != n:
            names = ", ".join(_param_name(self.fn, i) for i in self.diff_pos)
            raise TypeError(
                f"{who} must return a tuple of {n} cotangent(s), one per differentiable argument "
                f"({names}; None for zero), got {_got(cts)}"
            )
        out: list[Any] = [None] * len(self.nondiff)
        for i, c in zip(self.diff_pos, cts):
            sub = self.tree.children[i]
            first = self.owner.index(i) if sub.num_leaves else 0
            ct_leaves, ct_tree = tree_flatten(c)
            picked = _up_to(ct_tree, sub)
            if picked is None:
                raise TypeError(
                    f"{who} returned a cotangent of structure {ct_tree} for argument {i} "
                    f"({_param_name(self.fn, i)}), which has structure {sub}"
                )
            it = iter(ct_leaves)
            for k, take in enumerate(picked):
                leaf = first + k
                ct = next(it) if take else None
                if ct is not None:
                    j = self.slot[leaf]
                    assert j is not None
                    out[j] = self._checked(ct, j, leaf, who)
        return out

    def _checked(self, ct: Any, j: int, leaf: int, who: str) -> Any:
        return _rule_value(ct, self.shapes[j], self.dtypes[j], who, "cotangent", self.label(leaf))


def _rule_value(x: Any, shape: Shape, dt: np.dtype[Any], who: str, kind: str, of: str) -> Any:
    """A (co)tangent a user's rule returned for `of` (shape `shape`, dtype `dt`), as an operand
    fitted to that shape; TypeError or ValueError naming the rule, the argument or output, and
    the expected and given type."""
    if not _is_value(x):
        raise TypeError(f"{who} returned a {type(x).__name__} as the {kind} of {of}")
    x = to_operand(x)
    if dtype_of(x).kind == "c" and dt.kind != "c":
        raise TypeError(
            f"{who} returned a complex {kind} ({_typestr(shape_of(x), dtype_of(x))}) "
            f"for {of}, which is real ({_typestr(shape, dt)})"
        )
    fitted = _fitted(x, shape)
    if fitted is None:
        raise ValueError(f"{who} returned a {kind} of shape {shape_of(x)} for {of}, which has shape {shape}")
    return fitted


def _up_to(ct: TreeDef, arg: TreeDef) -> list[bool] | None:
    """Per leaf of `arg`, whether `ct` has a value for it (False: None stands for zeros there);
    None if `ct` does not have `arg`'s structure."""
    if ct.node_type is type(None) and arg.node_type is not type(None):
        return [False] * arg.num_leaves
    if arg.is_leaf:
        return [True] if ct.is_leaf else None
    if ct.node_type is not arg.node_type or ct.aux != arg.aux or len(ct.children) != len(arg.children):
        return None
    picked: list[bool] = []
    for c, a in zip(ct.children, arg.children):
        sub = _up_to(c, a)
        if sub is None:
            return None
        picked += sub
    return picked


def _param_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in params if p.kind in kinds)


def _param_name(fn: Callable[..., Any], i: int) -> str:
    names = _param_names(fn)
    return names[i] if i < len(names) else f"args[{i}]"


# -- the output of one call ----------------------------------------------------------------


class _Out:
    """The output of a custom function: its structure and each leaf's shape and dtype.

    The first run records them; later runs (the function, its ``fwd``, a JVP rule's
    tangent) must match. Several leaves are raveled and joined into one array of their
    common dtype (`pack`), which `unpack` splits again with einad operations.
    """

    __slots__ = ("dtype", "dtypes", "name", "shapes", "tree", "who")

    def __init__(self, name: str) -> None:
        self.name = name
        self.tree: TreeDef | None = None
        self.shapes: list[tuple[int, ...]] = []
        self.dtypes: list[np.dtype[Any]] = []
        self.dtype: np.dtype[Any] = np.dtype(float)
        self.who = ""

    def describe(self) -> str:
        leaves = ", ".join(_typestr(s, d) for s, d in zip(self.shapes, self.dtypes))
        return f"{self.tree} of {leaves}" if self.tree is not None and not self.tree.is_leaf else leaves

    def pack(self, out: Any, who: str) -> Any:
        """`out` (the function's or ``fwd``'s output) as the primitive's one array."""
        leaves, tree = tree_flatten(out)
        for k, x in enumerate(leaves):
            if not _is_value(x):
                where = tree.leaf_paths("output")[k]
                raise TypeError(f"{who} returned a {type(x).__name__} as {where}: outputs are arrays")
        ops = [to_operand(x) for x in leaves]
        shapes, dtypes = [shape_of(x) for x in ops], [dtype_of(x) for x in ops]
        if self.tree is None:
            self.tree, self.shapes, self.dtypes, self.who = tree, shapes, dtypes, who
            self.dtype = np.result_type(*dtypes) if dtypes else np.dtype(float)
        elif (tree, shapes, dtypes) != (self.tree, self.shapes, self.dtypes):
            mine = _Out(self.name)
            mine.tree, mine.shapes, mine.dtypes = tree, shapes, dtypes
            raise TypeError(f"{who} returned {mine.describe()}, but {self.who} returned {self.describe()}")
        return self._join(ops)

    def pack_tangent(self, t: Any, who: str) -> Any:
        """A tangent of the output (from a JVP rule) as one array; shapes may broadcast."""
        assert self.tree is not None, "the output is recorded before a rule runs"
        leaves, tree = tree_flatten(t)
        if tree != self.tree:
            raise TypeError(
                f"{who} returned a tangent of structure {tree}, but the output has structure {self.tree}"
            )
        paths = self.tree.leaf_paths("output")
        ops = []
        for x, shape, dt, path in zip(leaves, self.shapes, self.dtypes, paths):
            fitted = _rule_value(x, shape, dt, who, "tangent", path)
            ops.append(astype(fitted, dt) if dt.kind in "fc" else fitted)
        return self._join(ops)

    def _join(self, ops: list[Any]) -> Any:
        if len(ops) == 1:
            return ops[0]
        if not ops:
            return np.zeros(0)
        parts = [reshape_raw(astype(to_array_operand(x), self.dtype), (-1,)) for x in ops]
        return bind(concat_p, parts, {"axis": 0})

    def unpack(self, packed: Any) -> Any:
        """The output pytree (of Tensors) from the primitive's array."""
        assert self.tree is not None
        if len(self.shapes) == 1:
            return tree_unflatten(self.tree, [wrap(packed)])
        leaves = []
        start = 0
        for shape, dt in zip(self.shapes, self.dtypes):
            size = math.prod(shape)
            x = reshape_raw(getitem_raw(packed, slice(start, start + size)), shape)
            leaves.append(wrap(astype(x, dt)))
            start += size
        return tree_unflatten(self.tree, leaves)


def _impl(*vals: Any, call: _Call) -> Any:
    """Run the user's function on plain arrays; the result is an array of its own."""
    out = call.fn(vals)
    if type(out) is Tensor:
        if out._trace is not None:
            raise TracerError(
                f"the custom function {call.name!r} closes over a value traced by {out._trace!r}: "
                "pass that value as an argument instead"
            )
        out = out._value
    if not arrays.is_array(out):
        out = np.asarray(out)
    elif not arrays.is_numpy(out):
        return out  # another library's array: einad never writes into those
    if any(isinstance(v, np.ndarray) and np.may_share_memory(out, v) for v in vals):
        out = out.copy()  # a program may hand the result on or write into it
    return out


def _pullback_of(f: FlatFn, vals: Sequence[Any], g: Any, needed: list[bool]) -> list[Any | None]:
    """The cotangents of the operands `needed`, by reverse mode through ``f(vals)``."""
    idx = [i for i, n in enumerate(needed) if n]

    def partial(*d: Any) -> Any:
        leaves = list(vals)
        for i, x in zip(idx, d):
            leaves[i] = x
        return f(leaves)

    _, pull = transforms.vjp(partial, *[vals[i] for i in idx])
    cts: list[Any | None] = [None] * len(vals)
    for i, c in zip(idx, pull(g)):
        cts[i] = c
    return cts


def _tangent_of(f: FlatFn, tangents: list[Any], vals: Sequence[Any], nondiff: Sequence[bool]) -> Any:
    """The tangent of ``f(vals)`` by forward mode through it (nondiff operands held fixed)."""
    idx = [i for i, t in enumerate(tangents) if t is not None and not nondiff[i]]
    if not idx:
        return None

    def partial(*d: Any) -> Any:
        leaves = list(vals)
        for i, x in zip(idx, d):
            leaves[i] = x
        return f(leaves)

    _, t = transforms.jvp(partial, [vals[i] for i in idx], [tangents[i] for i in idx])
    return to_operand(t)


# -- batching --------------------------------------------------------------------------------


class _Kept:
    """Residuals across `vmap`: the traced leaves go through the map (batched), the others
    (Python objects, constants) are kept as they are, with the structure."""

    __slots__ = ("flags", "static", "tree")

    def __init__(self) -> None:
        self.tree: TreeDef | None = None
        self.flags: list[bool] = []
        self.static: list[Any] = []

    def split(self, res: Any) -> list[Any]:
        leaves, self.tree = tree_flatten(res)
        self.flags = [type(x) is Tensor and x._trace is not None for x in leaves]
        self.static = [None if t else x for x, t in zip(leaves, self.flags)]
        return [x for x, t in zip(leaves, self.flags) if t]

    def join(self, traced: Sequence[Any]) -> Any:
        assert self.tree is not None
        it = iter(traced)
        return tree_unflatten(self.tree, [next(it) if t else s for s, t in zip(self.static, self.flags)])


def _batched_call(call: _Call, batched: list[bool]) -> _Call:
    """`call` mapped over the leading axis of the `batched` operands: the function and its
    rules under `vmap`, so the user's code runs once for the whole batch."""
    axes = tuple(0 if b else None for b in batched)

    def fn(vals: Sequence[Any]) -> Any:
        return vmap(lambda *v: call.fn(v), in_axes=axes)(*vals)

    fwd = bwd = jvp = None
    if call.fwd is not None:
        user_fwd, user_bwd = call.fwd, call.bwd
        assert user_bwd is not None

        def fwd(vals: Sequence[Any]) -> Any:
            kept = _Kept()

            def one(*v: Any) -> Any:
                out, res = user_fwd(v)
                return out, kept.split(res)

            out, traced = vmap(one, in_axes=axes)(*vals)
            return out, (kept, traced)

        def bwd(res: Any, g: Any) -> list[Any]:
            kept, traced = res
            cts = vmap(lambda r, gi: user_bwd(kept.join(r), gi), in_axes=(0, 0))(traced, g)
            return [c if c is None or b else to_operand(_sum(c, axis=0)) for c, b in zip(cts, batched)]

    if call.jvp is not None:
        user_jvp = call.jvp
        both = (list(axes), list(axes))

        def jvp(vals: Sequence[Any], tangents: Sequence[Any]) -> Any:
            return vmap(lambda v, t: user_jvp(v, t), in_axes=both)(list(vals), list(tangents))

    return _Call(f"vmap({call.name})", fn, call.nondiff, fwd=fwd, bwd=bwd, jvp=jvp)


def _batch(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """The batching rule of the three primitives: the same primitive on the mapped call, or,
    where the user's code reads a batched value as a number, one call per example (`NotImplemented`
    tells `vmap` to loop)."""
    try:
        return bind(prim, vals, {**params, "call": _batched_call(params["call"], batched)})
    except TracerError:
        return NotImplemented


# -- custom_vjp ----------------------------------------------------------------------------------


def _vjp_residuals(vals: Sequence[Any], params: Params, needed: list[bool]) -> tuple[Any, Any]:
    call: _Call = params["call"]
    assert call.fwd is not None
    out, res = call.fwd(vals)
    return to_operand(out), res


def _custom_vjp_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    call: _Call = params["call"]
    assert call.bwd is not None
    cts = call.bwd(ans, g)
    return [c if n else None for c, n in zip(cts, needed)]  # None for the nondiff operands already


def _custom_vjp_jvp(tangents: list[Any], ans: Any, vals: Sequence[Any], params: Params) -> Any:
    """``J t`` from ``bwd: g -> Jᵀ g``: the transpose of `bwd` in `g`, by reverse mode through it."""
    call: _Call = params["call"]
    assert call.fwd is not None and call.bwd is not None
    idx = [i for i, t in enumerate(tangents) if t is not None and not call.nondiff[i]]
    if not idx or dtype_of(ans).kind not in "fc":
        return None
    _, res = call.fwd(vals)
    bwd = call.bwd

    def transposed(g: Any) -> list[Any]:  # g -> Jᵀ g, the entries of the operands with a tangent
        cts = bwd(res, g)
        return [_zeros_like(vals[i]) if cts[i] is None else cts[i] for i in idx]

    _, pull = transforms.vjp(transposed, _zeros_like(ans))
    (t,) = pull([tangents[i] for i in idx])
    return to_operand(t)


custom_vjp_p = declare(
    Primitive("custom_vjp_call", _impl),
    vjp=_custom_vjp_vjp,
    jvp=_custom_vjp_jvp,
    residual=_vjp_residuals,
    batch=_batch,
    aliasing="may_view",  # the user's function may return an operand (or a view of one)
)


class _CustomFunction:
    """What `custom_vjp` and `custom_jvp` share: the decorated function, the arguments it does not
    differentiate (``nondiff_argnums`` and ``nondiff_argnames``), and a call bound to them."""

    kind = ""
    """"custom_vjp" or "custom_jvp", for the messages."""

    def __init__(
        self,
        fn: Callable[..., Any],
        nondiff_argnums: int | Sequence[int] = (),
        nondiff_argnames: str | Sequence[str] = (),
    ) -> None:
        check_callable(fn, self.kind, f"@einad.{self.kind} above a def, or einad.{self.kind}(f)")
        self.fn = fn
        what = f"{self.kind} {_name(fn)!r}"
        nums = _argnums(nondiff_argnums, "nondiff_argnums", what)
        self.nondiff_argnums = _with_names(fn, nums, nondiff_argnames, "nondiff_argnames", what)
        functools.update_wrapper(cast(Any, self), fn)  # (callable: each subclass has __call__)

    def _bound(
        self, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[str, _Args, _Out, list[Any], FlatFn]:
        """A call's parts: its description, its arguments split (differentiated ones appended to
        the operands list), the packing of its output, the operands, and the function on them."""
        name = _name(self.fn)
        what = f"{self.kind} {name!r}"
        operands: list[Any] = []
        a = _Args(self.fn, what, _positional(self.fn, args, kwargs, what), self.nondiff_argnums, operands)
        out = _Out(name)
        fn = self.fn

        def flat_fn(vals: Sequence[Any]) -> Any:
            return out.pack(fn(*a.args(vals)), repr(name))

        return what, a, out, operands, flat_fn


class custom_vjp(_CustomFunction):  # lower case: JAX's name, used as a decorator
    """A function with a reverse-mode derivative of your own, as ``jax.custom_vjp``.

    Decorate the function, then give its rule with ``f.defvjp(fwd, bwd)``: ``fwd`` takes
    the function's arguments and returns ``(output, residuals)``; ``bwd(residuals, g)``
    takes the residuals and a cotangent of the output's structure and returns a tuple with
    one cotangent per argument (None for zero, also inside a pytree; a pytree for a pytree
    argument). The function may take and return pytrees of arrays.

    ``nondiff_argnums`` (JAX's convention) lists the arguments that are not differentiated:
    functions, strings, shapes, or arrays that are held fixed. ``fwd`` still takes every
    argument in its place; ``bwd`` takes them first, ``bwd(*nondiff_args, residuals, g)``,
    and returns cotangents for the other arguments only. An array at such a position may
    be traced (JAX refuses that for custom_vjp): no derivative flows to it.
    ``nondiff_argnames`` names such arguments instead (they join ``nondiff_argnums`` in
    the order of the parameters).

    Every reverse-mode transformation (`grad`, `vjp`, `jacrev`, ``Tensor.backward``), also
    through `jit` and `vmap`, runs ``fwd`` in the forward pass and ``bwd`` in the reverse pass;
    ``fwd`` and ``bwd`` are themselves differentiated for higher orders. Forward mode (`jvp`,
    `jacfwd`, reverse-over-forward) uses the same rule, transposed: ``bwd`` is the map
    ``g -> Jᵀ g``, so the tangent is ``J t``, computed by reverse mode through ``bwd`` as a
    function of ``g`` (JAX raises there instead). So ``bwd`` must be linear in ``g``, as every
    VJP is (a straight-through estimator, a mask, a scaling are; clipping ``g`` itself is not,
    and forward mode then uses its derivative at ``g = 0``). `vmap` maps the function, ``fwd``
    and ``bwd`` once for the whole batch.

    The function runs on plain arrays, so Python may branch on its values, even under `jit`.

    Example::

        @ea.custom_vjp
        def straight_through_round(x):
            return ea.round(x)

        straight_through_round.defvjp(lambda x: (ea.round(x), None), lambda res, g: (g,))
    """

    kind = "custom_vjp"
    fwd: Callable[..., Any] | None = None
    bwd: Callable[..., Any] | None = None

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        """Set the rule: ``fwd(*args) -> (output, residuals)``,
        ``bwd(*nondiff_args, residuals, g) -> cotangents``."""
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        user_fwd, user_bwd = self.fwd, self.bwd
        if user_fwd is None or user_bwd is None:
            raise TypeError(f"{self.kind} {_name(self.fn)!r} has no rule: call its defvjp(fwd, bwd) first")
        what, a, out, operands, flat_fn = self._bound(args, kwargs)

        def flat_fwd(vals: Sequence[Any]) -> Any:
            pair = user_fwd(*a.args(vals))
            if not _pair(pair):
                raise TypeError(f"the fwd of {what} must return a pair (output, residuals), got {_got(pair)}")
            return out.pack(pair[0], f"the fwd of {what}"), (pair[1], [vals[j] for j in a.nondiff_ops])

        def flat_bwd(res: Any, g: Any) -> list[Any]:
            user_res, nd_vals = res
            cts = user_bwd(*a.nondiff_args(nd_vals), _given(user_res), _given(out.unpack(g)))
            return a.cotangents(cts, f"the bwd of {what}")

        call = _Call(_name(self.fn), flat_fn, a.nondiff, fwd=flat_fwd, bwd=flat_bwd)
        return out.unpack(bind(custom_vjp_p, operands, {"call": call}))


def _name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", "f")


# -- custom_jvp ----------------------------------------------------------------------------------


def _full_tangents(vals: Sequence[Any], tangents: Sequence[Any]) -> list[Any]:
    return [_zeros_like(v) if t is None else t for v, t in zip(vals, tangents)]


def _custom_jvp_jvp(tangents: list[Any], ans: None, vals: Sequence[Any], params: Params) -> tuple[Any, Any]:
    """``(out, tangent)`` from the user's rule alone (declared ``jvp_with_primal``): the function
    itself does not run, as in JAX. Without a tangent to push, the call binds as it is."""
    call: _Call = params["call"]
    assert call.jvp is not None
    if all(t is None or nd for t, nd in zip(tangents, call.nondiff)):
        return bind(custom_jvp_p, vals, params), None
    out, tangent = call.jvp(vals, _full_tangents(vals, tangents))
    return out, tangent


def _custom_jvp_residual(vals: Sequence[Any], params: Params, needed: list[bool]) -> tuple[Any, Any]:
    """The result and the pullback, from one run of the user's rule (JAX linearizes the rule; the
    function itself does not run): the pullback is the transpose of the rule's tangent map,
    recorded by reverse mode through the rule as a function of the tangents (linear in them)."""
    call: _Call = params["call"]
    assert call.jvp is not None
    rule = call.jvp
    idx = [i for i, n in enumerate(needed) if n and not call.nondiff[i]]
    if not idx:
        return bind(custom_jvp_p, vals, params), None
    zeros = [_zeros_like(v) for v in vals]

    def tangent_map(*ts: Any) -> tuple[Any, Any]:  # (the tangent, the result as aux)
        full: list[Any] = list(zeros)
        for i, t in zip(idx, ts):
            full[i] = t
        out, tangent = rule(vals, full)
        return tangent, out

    with QuietRules():  # (a rule, as every derivative rule runs: no numpy warning from it)
        _, pull, out = transforms.vjp(tangent_map, *[zeros[i] for i in idx], has_aux=True)
    return to_operand(out), (idx, pull)


def _custom_jvp_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    cts: list[Any] = [None] * len(vals)
    if ans is None:  # no operand asked for a cotangent when the residual was made
        return cts
    idx, pull = ans
    for i, c in zip(idx, pull(g)):
        cts[i] = c
    return cts


custom_jvp_p = declare(
    Primitive("custom_jvp_call", _impl),
    jvp=_custom_jvp_jvp,
    jvp_with_primal=True,
    vjp=_custom_jvp_vjp,
    residual=_custom_jvp_residual,
    batch=_batch,
    aliasing="may_view",
)


class custom_jvp(_CustomFunction):  # lower case: JAX's name, used as a decorator
    """A function with a forward-mode derivative of your own, as ``jax.custom_jvp``.

    Decorate the function, then give its rule with ``f.defjvp(rule)`` (or decorate the
    rule with ``@f.defjvp``): ``rule(primals, tangents)`` takes two tuples with one entry
    per argument and returns ``(primal_out, tangent_out)``, the tangent of the output's
    structure; a tangent the caller does not differentiate is zeros. The function may take
    and return pytrees of arrays.

    ``nondiff_argnums`` (JAX's convention) lists the arguments that are not differentiated:
    the rule takes them first, ``rule(*nondiff_args, primals, tangents)``, and `primals` and
    `tangents` hold the other arguments only. An array at such a position may be traced; it
    is held fixed (JAX's ``stop_gradient``). ``nondiff_argnames`` names such arguments
    instead (they join ``nondiff_argnums`` in the order of the parameters).

    `jvp`, `jacfwd` and `hessian` call the rule; reverse mode (`grad`, `vjp`, `jacrev`) uses
    its transpose, taken by reverse mode through the rule as a function of the tangents, so
    the rule must be linear in the tangents (as a JVP is). Higher orders differentiate the
    rule. As in JAX, wherever a derivative reaches the call the rule alone runs, once, and
    gives the result too: the function itself runs only without one. `vmap` maps the
    function and the rule once for the whole batch.

    Example (a log(1 + e^x) whose derivative stays finite for large x)::

        @ea.custom_jvp
        def log1pexp(x):
            return ea.log(1.0 + ea.exp(x))

        @log1pexp.defjvp
        def log1pexp_jvp(primals, tangents):
            (x,), (t,) = primals, tangents
            return log1pexp(x), t * (1.0 - 1.0 / (1.0 + ea.exp(x)))
    """

    kind = "custom_jvp"
    rule: Callable[..., Any] | None = None

    def defjvp(self, rule: Callable[..., Any]) -> Callable[..., Any]:
        """Set the rule ``rule(*nondiff_args, primals, tangents) -> (primal_out, tangent_out)``;
        returns `rule`."""
        self.rule = rule
        return rule

    def defjvps(self, *jvps: Callable[..., Any] | None) -> None:
        """JAX's shorthand for a rule that is a sum: one function per argument,
        ``jvp_i(tangent_i, primal_out, *primals)``, giving that argument's part of the output's
        tangent (None: the output does not depend on it).

        Raises:
            TypeError: With `nondiff_argnums` (as JAX), or not one function per argument.
        """
        what = f"custom_jvp {_name(self.fn)!r}"
        if self.nondiff_argnums:
            raise TypeError(f"{what}: defjvps cannot be used with nondiff_argnums; use defjvp")

        def rule(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
            if len(jvps) != len(primals):
                raise TypeError(f"{what}: defjvps got {len(jvps)} functions for {len(primals)} arguments")
            ans = self(*primals)  # (the rule's own call: higher orders differentiate it with this rule)
            total = None
            for jvp_i, t in zip(jvps, tangents):
                if jvp_i is not None:
                    part = jvp_i(t, ans, *primals)
                    total = part if total is None else tree_map(lambda a, b: a + b, total, part)
            return ans, (tree_map(_zeros_like, ans) if total is None else total)

        self.defjvp(rule)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        rule = self.rule
        if rule is None:
            raise TypeError(f"{self.kind} {_name(self.fn)!r} has no rule: call its defjvp(rule) first")
        what, a, out, operands, flat_fn = self._bound(args, kwargs)

        def flat_jvp(vals: Sequence[Any], tangents: Sequence[Any]) -> Any:
            nd_args, primals = a.split(vals)
            _, ts = a.split(tangents)
            pair = rule(*nd_args, primals, ts)
            if not _pair(pair):
                raise TypeError(
                    f"the jvp rule of {what} must return a pair (primal_out, tangent_out), got {_got(pair)}"
                )
            who = f"the jvp rule of {what}"
            return to_array_operand(out.pack(pair[0], who)), out.pack_tangent(pair[1], who)

        call = _Call(_name(self.fn), flat_fn, a.nondiff, jvp=flat_jvp)
        return out.unpack(bind(custom_jvp_p, operands, {"call": call}))


# -- checkpoint ----------------------------------------------------------------------------------


def _checkpoint_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    call: _Call = params["call"]
    needed = [n and not nd for n, nd in zip(needed, call.nondiff)]
    return _pullback_of(call.fn, vals, g, needed)


checkpoint_p = declare(
    Primitive("checkpoint", _impl),
    vjp=_checkpoint_vjp,
    jvp=lambda ts, ans, vals, p: _tangent_of(p["call"].fn, ts, vals, p["call"].nondiff),
    keep=lambda needed: ([True] * len(needed), False),  # the operands, never the intermediates
    batch=_batch,
    aliasing="may_view",
)


def checkpoint(
    f: Callable[..., Any],
    *,
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    prevent_cse: bool = True,
    policy: Callable[..., Any] | None = None,
) -> Callable[..., Any]:
    """`f` recomputed in the reverse pass instead of remembered (``jax.checkpoint``, remat).

    Values and derivatives are `f`'s. A reverse pass keeps only `f`'s arguments through the
    forward pass, not its intermediates, and runs `f` again when the cotangent reaches it:
    memory for compute. Wrapping each block of a deep chain bounds the memory of `grad` by
    the blocks' boundaries plus one block's intermediates. `f` takes and returns pytrees of
    arrays; forward mode differentiates `f` directly, and `vmap` maps `f` once for the batch.

    ``static_argnums`` (JAX's keyword) lists the arguments passed to `f` as they are, not
    differentiated: functions, strings, shapes (an array there is held fixed);
    ``static_argnames`` names them instead.
    ``prevent_cse`` (JAX's) is taken and changes nothing: in a staged program the forward
    of `f` is one ``checkpoint`` equation, which no pass can merge the recomputation into. A
    ``policy`` (JAX's choice of intermediates to keep) is not offered: every intermediate is
    recomputed (NotImplementedError for one).
    """
    check_callable(f, "checkpoint")
    what = f"checkpoint {_name(f)!r}"
    if policy is not None:
        raise NotImplementedError(
            f"{what}: a checkpoint policy (which intermediates to save) is not offered; einad "
            "recomputes every intermediate of f. Checkpoint a smaller function to keep more"
        )
    nums = _with_names(
        f, _argnums(static_argnums, "static_argnums", what), static_argnames, "static_argnames", what
    )

    @functools.wraps(f)
    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        operands: list[Any] = []
        given = _positional(f, args, kwargs, what, defaults=False)
        a = _Args(f, what, given, nums, operands, "static_argnums")
        out = _Out(_name(f))

        def flat_fn(vals: Sequence[Any]) -> Any:
            return out.pack(f(*a.args(vals)), repr(_name(f)))

        return out.unpack(bind(checkpoint_p, operands, {"call": _Call(_name(f), flat_fn, a.nondiff)}))

    return checkpointed
