"""The tracing core: primitives, traces, `bind` (the reverse pass is `transforms.autodiff`'s).

A value flowing through einad code is either a plain array ("constant") or a
`Tensor` boxed by one *trace*. Every transformation call (`grad`, `jvp`, ...)
opens a new trace with a level taken from a process-wide counter, so a trace
opened inside another always has the higher level. A Tensor's ``_value`` is the
value one level down: an array, or a Tensor of an enclosing trace. That is how
nesting is kept apart: `bind` hands an operation to the trace of highest level
among its arguments; that trace unboxes its own Tensors, binds the operation
again on the unboxed values (which reaches the next trace down), and boxes the
result. Arguments from other traces pass through as constants, so the
perturbations of two transformations never mix.

What einad knows of a primitive (its derivative and batching rules, its lowering, whether it
is linear, elementwise, ..., whether its result may share an operand's memory) is declared
once, by `declare` next to the primitive, and read from the primitive's attributes (`jvp_rules`
and the other tables are read-only views of them). Rules are written with
einad operations, so the derivative program is traced by any enclosing
transformation like any other code. A primitive that has no rule for a mode
raises `NotImplementedError` there, never a silent zero.

Transformations enter and leave their trace through `tracing`, which marks the
trace dead on exit: a Tensor of a dead trace (a tracer leaked out of its
transformation) raises `TracerError` where it is used. `Staged` is the value a
staging trace (`einad.program`) boxes: it carries the concrete value computed
while tracing, but refuses to be read as a number, so a Python branch on it, or
a rule that reads a value instead of staging an operation, fails loudly instead
of freezing a constant into the program.
"""

from __future__ import annotations

import itertools
import math
import threading
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ContextDecorator, contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar, cast

import numpy as np
import numpy.typing as npt

from . import arrays
from .aliases import Array, Axis, DTypeLike, Shape
from .arrays import np_dtype, to_numpy
from .errors import UNKNOWN_SIZES, TracerError, unknown_sizes
from .strides import Strides, c_strides, indexed, is_c_contiguous, reshaped

_levels = itertools.count(1)
_node_seq = itertools.count()  # `next` is atomic: safe across threads

Params: TypeAlias = dict[str, Any]
"""A primitive's static parameters (subscripts, axes, shapes, ...)."""

VJPRule: TypeAlias = Callable[[Any, Any, Sequence[Any], Params, list[bool]], Sequence[Any]]
"""``vjp(g, ans, vals, params, needed)``: one cotangent (or None) per operand."""

JVPRule: TypeAlias = Callable[[list[Any], Any, Sequence[Any], Params], Any]
"""``jvp(tangents, ans, vals, params)``: the output tangent, or None for zero."""

KeepRule: TypeAlias = Callable[[list[bool]], tuple[Sequence[bool], bool]]
"""``keep(needed)``: which operand values, and whether the result, a VJP reads."""


BatchRule: TypeAlias = Callable[["Primitive", list[Any], list[bool], Params, int], Any]
"""``rule(prim, vals, batched, params, size)``: `prim` on values with a leading batch axis."""

ResidualRule: TypeAlias = Callable[[Sequence[Any], Params, list[bool]], tuple[Any, Any]]
"""``residual(vals, params, needed)``: ``(out, saved)``, the result and what the VJP rule reads
as `ans` (`needed`: which operands the reverse pass will ask a cotangent for)."""

LowerRule: TypeAlias = Callable[[Params, Sequence[Shape]], Callable[..., Any]]
"""``lower(params, shapes)``: the primitive as a function of its arrays, its plans made once."""

ReplayRule: TypeAlias = Callable[[Sequence[Any], Params], Any]
"""``replay(vals, params)``: the primitive applied again to (possibly traced) values, through the
entry point a user's call takes, for `program.run_graph`."""

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T", bound="Trace")


Aliasing: TypeAlias = Literal["fresh", "view", "may_view"]
"""Whether a primitive's result shares memory with an operand: ``"fresh"`` (a new array of its
own, shared with nothing), ``"view"`` (it shares an operand's memory: a reshape, a basic index,
the identity) or ``"may_view"`` (it may, depending on the values or the library: numpy's
``real`` of a real array is the array itself)."""
ALIASING: tuple[Aliasing, ...] = ("fresh", "view", "may_view")


class Primitive:
    """A named operation with an implementation on arrays, and everything einad knows about it.

    ``impl(*arrays, **params)`` computes on plain arrays; arrays are positional,
    static parameters (subscripts, axes, shapes) go by keyword. What the
    transformations, the passes and the code generator need to know of it is
    entered once, by `declare`, next to the primitive in its rules module, and
    read from these attributes (a primitive made but not declared has
    ``aliasing`` None, which `tests/test_registry.py` refuses):

    - ``jvp``, ``vjp``, ``structured_vjp``, ``keep``, ``residual``: its derivative rules
      (`JVPRule`, `VJPRule`, `KeepRule`, `ResidualRule`), None where absent;
      ``zero_derivative``: its derivative is zero wherever it exists (no rule needed);
      ``jvp_with_primal``: its JVP rule computes the result too, ``jvp(tangents, None, vals,
      params) -> (out, tangent)``, called instead of `impl` by a forward trace (custom_jvp: the
      user's rule alone runs, as in JAX).
    - ``batch``: how `vmap` applies it (`BatchRule`), or `LOOP` (one call per example).
    - ``lower``: ``lower(params, shapes)``, the function a compiled program calls (its plans
      made once); None: `impl` with the params bound.
    - ``replay``: ``replay(vals, params)``, how `program.run_graph` applies it again (a staged
      program replayed under a transformation): the entry point a user's call takes, which may
      bind another primitive than the staged one (einsum: `contract`, so that a reverse trace
      takes a staged network as one tree); None: `bind`.
    - ``aliasing``: an `Aliasing` kind, or a function ``(params, n_operands) -> kind``
      (see `result_aliasing`).
    - ``linear`` (in its array operands), ``elementwise`` (one scalar function of
      broadcast operands), ``commutative`` (two operands that can be exchanged without
      changing a bit of the result), ``zero_at_zero`` (f(0) == 0, so it maps a diagonal
      to a diagonal), ``accepts_out`` (its numpy implementation takes ``out=``, as a ufunc),
      ``program_only`` (it exists only inside compiled programs: no transformation sees it).
    """

    __slots__ = (
        "accepts_out",
        "aliasing",
        "batch",
        "commutative",
        "elementwise",
        "impl",
        "jvp",
        "jvp_with_primal",
        "keep",
        "linear",
        "lower",
        "name",
        "program_only",
        "replay",
        "residual",
        "structured_vjp",
        "vjp",
        "zero_at_zero",
        "zero_derivative",
    )

    jvp: JVPRule | None
    vjp: VJPRule | None
    structured_vjp: VJPRule | None
    keep: KeepRule | None
    residual: ResidualRule | None
    batch: BatchRule | None
    lower: LowerRule | None
    replay: ReplayRule | None
    aliasing: Aliasing | Callable[[Params, int], Aliasing] | None

    def __init__(self, name: str, impl: Callable[..., Any]) -> None:
        if name in primitives:
            raise ValueError(
                f"a primitive named {name!r} exists already: a program names its equations by it"
            )
        self.name = name
        self.impl = impl
        self.jvp = self.vjp = self.structured_vjp = self.keep = self.residual = None
        self.batch = self.lower = self.replay = self.aliasing = None
        self.zero_derivative = self.linear = self.elementwise = self.commutative = False
        self.jvp_with_primal = False
        self.zero_at_zero = self.accepts_out = self.program_only = False
        primitives[name] = self

    def __repr__(self) -> str:
        return self.name

    def result_aliasing(self, params: Params, n_operands: int) -> Aliasing:
        """Whether this primitive's result, with these params and operands, may share their memory."""
        kind = self.aliasing
        if kind is None:
            raise TypeError(f"the primitive {self.name!r} declares no aliasing kind (see core.declare)")
        return kind if isinstance(kind, str) else kind(params, n_operands)


primitives: dict[str, Primitive] = {}
"""Every primitive, by its name (unique: a program's listing names each equation by it)."""
LOOP: BatchRule = cast("BatchRule", "loop")
"""The batching rule that says: `vmap` loops over the batch, one call per example (declared,
so that the registry test tells a primitive without a rule from one that loops on purpose).
A batching rule may also return `NotImplemented` for a case it does not cover: that call loops."""


def ride_along(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """The batching rule of a primitive that maps over leading axes already (an elementwise op of
    one operand, numpy.linalg's): the batch axis is one more of them."""
    return bind(prim, vals, params)


numpy_functions: dict[Any, Callable[..., Any]] = {}
"""numpy's functions and ufuncs on Tensors: ``np.sum`` (or ``np.add``, or ``(np.add, "reduce")``
for a ufunc method) -> a function taking numpy's arguments and running einad's operation.
Filled by `einad.numpy_api`; what is not here raises a TypeError naming it."""
exported: dict[str, tuple[Callable[..., Any], Any]] = {}
"""Public operations declared by their rules module with `export`: name -> (function, the numpy
function that dispatches to it, or None). `einad.ops` exports each as ``einad.<name>`` and
`einad.numpy_api` makes numpy's function run it, so a rules module adds an operation alone."""


def declare(
    prim: Primitive,
    *,
    aliasing: Aliasing | Callable[[Params, int], Aliasing],
    jvp: JVPRule | None = None,
    vjp: VJPRule | None = None,
    keep: KeepRule | None = None,
    batch: BatchRule | None = None,
    residual: ResidualRule | None = None,
    structured_vjp: VJPRule | None = None,
    lower: LowerRule | None = None,
    replay: ReplayRule | None = None,
    zero_derivative: bool = False,
    jvp_with_primal: bool = False,
    linear: bool = False,
    elementwise: bool = False,
    commutative: bool = False,
    zero_at_zero: bool = False,
    accepts_out: bool = False,
    program_only: bool = False,
) -> Primitive:
    """Declare what einad knows of `prim` (the one way it is said, once per primitive; see `Primitive`).

    A `structured_vjp` may return `Structured` cotangents; without a `vjp`, the
    plain VJP is that rule with its results made dense.

    Raises:
        ValueError: If `prim` was declared already, `aliasing` is not an `Aliasing` kind
            (or a function giving one), or `jvp_with_primal` is set without a `jvp`.
    """
    if prim.aliasing is not None:
        raise ValueError(f"the primitive {prim.name!r} is declared already: one declaration per primitive")
    if aliasing not in ALIASING and not callable(aliasing):
        raise ValueError(f"aliasing is one of {', '.join(map(repr, ALIASING))}, got {aliasing!r}")
    if jvp_with_primal and jvp is None:
        raise ValueError(f"the primitive {prim.name!r} declares jvp_with_primal without a jvp rule")
    if structured_vjp is not None and vjp is None:
        vjp = _densified(structured_vjp)
    prim.aliasing = aliasing
    prim.jvp, prim.vjp, prim.structured_vjp, prim.keep = jvp, vjp, structured_vjp, keep
    prim.residual, prim.batch, prim.lower, prim.replay = residual, batch, lower, replay
    prim.zero_derivative, prim.linear, prim.elementwise = zero_derivative, linear, elementwise
    prim.jvp_with_primal = jvp_with_primal
    prim.commutative, prim.zero_at_zero = commutative, zero_at_zero
    prim.accepts_out, prim.program_only = accepts_out, program_only
    return prim


def export(numpy: Any = None) -> Callable[[_F], _F]:
    """Decorate a rules module's public operation: ``einad.<its name>``, and numpy's function
    `numpy` (if given) dispatching to it on Tensors (see `exported`)."""

    def register(fn: _F) -> _F:
        name = fn.__name__
        if name in exported:
            raise ValueError(f"an operation named {name!r} is exported already")
        exported[name] = (fn, numpy)
        return fn

    return register


class _Declared(Mapping[Primitive, Any]):
    """A read-only table of one declared attribute, keyed by primitive (the form rules had before
    `declare`): the primitives of the registry for which the attribute is set."""

    __slots__ = ("_attr",)

    def __init__(self, attr: str) -> None:
        self._attr = attr

    def __getitem__(self, prim: Primitive) -> Any:
        value = getattr(prim, self._attr, None) if type(prim) is Primitive else None
        if value is None or value is False:
            raise KeyError(prim)
        return value

    def __iter__(self) -> Iterator[Primitive]:
        return (p for p in list(primitives.values()) if p in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


jvp_rules: Mapping[Primitive, JVPRule] = _Declared("jvp")
"""``jvp(tangents, ans, vals, params)``: the output tangent (None for zero)."""
vjp_rules: Mapping[Primitive, VJPRule] = _Declared("vjp")
"""``vjp(g, ans, vals, params, needed)``: one cotangent (or None) per operand."""
keep_rules: Mapping[Primitive, KeepRule] = _Declared("keep")
"""``keep(needed)``: which operand values, and whether the result, the VJP reads (absent: all)."""
batch_rules: Mapping[Primitive, BatchRule] = _Declared("batch")
"""How `vmap` applies a primitive to batched values (`LOOP`: one call per example)."""
residual_rules: Mapping[Primitive, ResidualRule] = _Declared("residual")
"""How a reverse trace computes a primitive whose VJP reads values other than its result
(`custom_vjp`'s residuals, a scalar sliced einsum's gradient made with its forward): instead
of `bind`, ``residual(vals, params, needed) -> (out, saved)``,
computed with einad operations on the unboxed values (so lower traces record them); the
node keeps `saved` in place of the result, and only the operands' `Meta`."""
lower_rules: Mapping[Primitive, LowerRule] = _Declared("lower")
"""``lower(params, shapes)``: the primitive as a function of its arrays, with its plans made
once (what `einad.jit`'s compiled programs call); absent: `impl` with the params bound."""
structured_vjp_rules: Mapping[Primitive, VJPRule] = _Declared("structured_vjp")
"""VJPs that may return `Structured` cotangents; only the reverse pass (`backward_pass`) calls them.

The same primitive's `vjp_rules` entry gives the same cotangents made dense.
"""
zero_derivative: Mapping[Primitive, bool] = _Declared("zero_derivative")
"""Primitives whose derivative is zero wherever it exists (comparisons, sign, floor, ...)."""
program_only: Mapping[Primitive, bool] = _Declared("program_only")
"""Primitives that exist only inside a compiled program, after the passes (a fused kernel's
placeholder): no transformation ever sees one, so they declare no rule."""


def _densified(rule: VJPRule) -> VJPRule:
    """`rule` with every `Structured` cotangent it returns made dense."""

    def vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> Sequence[Any]:
        return [dense(c) for c in rule(g, ans, vals, params, needed)]

    return vjp


class Structured:
    """A cotangent held in a cheaper form than its dense value while `backward_pass` sums it.

    A `structured_vjp_rules` entry may return one (einsum's VJP returns a
    `Spread`: the small array its dense cotangent would be written from). The
    pass adds two of a kind without densifying (`plus`); when nothing is traced
    it adds one into a buffer it owns in place (`add_into`); and it makes the
    value dense (`dense`: einad operations, so an enclosing trace records them)
    only where a rule or a leaf needs it. No rule ever receives one.
    """

    __slots__ = ()

    shape: Shape
    dtype: np.dtype[Any]

    @property
    def traced(self) -> bool:
        """Whether the value depends on a Tensor of some trace (then only `plus` and `dense` apply)."""
        raise NotImplementedError

    def dense(self) -> Any:
        """The value as an einad value (a plain array when nothing is traced)."""
        raise NotImplementedError

    def plus(self, other: Structured) -> Structured | None:
        """The sum with `other` in this form, or None if the sum does not have it."""
        raise NotImplementedError

    def add_into(self, buf: Array) -> None:
        """``buf += self`` in place; only when not `traced`, into `buf` of this shape
        whose dtype holds the sum."""
        raise NotImplementedError


def dense(c: Any) -> Any:
    """`c` as an einad value: a `Structured` cotangent made dense, anything else unchanged."""
    return c.dense() if isinstance(c, Structured) else c


def _no_rule(prim: Primitive, mode: str) -> NotImplementedError:
    return NotImplementedError(f"einad has no {mode} rule for the primitive {prim.name!r}")


class Node:
    """One operation in a reverse trace's graph (or, with no `prim`, an input).

    A node holds its parent nodes and only the values its VJP reads: operand
    values the rule does not need are replaced by their `Meta` (shape and
    dtype), so the graph does not keep forward intermediates alive for nothing.
    """

    __slots__ = (
        "__weakref__", "ans", "hooks", "needed", "params", "parents", "prim", "seq", "tensor", "vals",
    )  # fmt: skip

    def __init__(
        self,
        prim: Primitive | None,
        params: Params | None,
        parents: tuple[Node | None, ...],
        vals: Sequence[Any] | None,
        ans: Any,
        needed: list[bool] | None = None,
    ) -> None:
        self.prim = prim
        self.params = params
        self.parents = parents
        self.vals = vals
        self.ans = ans
        # which parents are nodes (the VJP's `needed`), worked out once where the node is made
        self.needed = [p is not None for p in parents] if needed is None else needed
        # imperative leaves, and results that retain_grad(): a weak reference to their Tensor
        self.tensor: weakref.ref[Tensor] | None = None
        # `Tensor.register_hook`'s hooks, run on the node's cotangent: ``hook(g, create_graph) -> g``
        self.hooks: list[Any] | None = None
        self.seq = next(_node_seq)  # creation order: parents always have smaller numbers


class Meta:
    """The shape and dtype of a value a rule does not read (a stand-in in `Node.vals`)."""

    __slots__ = ("dtype", "shape")

    def __init__(self, v: Any) -> None:
        if type(v) is np.ndarray:
            self.shape: Shape = v.shape
            self.dtype: np.dtype[Any] | None = v.dtype
            return
        if type(v) is Tensor:  # (its dtype is numpy's already)
            s = v.shape
            self.shape, self.dtype = s if type(s) is tuple else tuple(s), v.dtype
            return
        self.shape = tuple(getattr(v, "shape", ()))
        self.dtype = np_dtype(v.dtype) if hasattr(v, "dtype") else np.result_type(v)

    def __repr__(self) -> str:
        return f"Meta({self.shape}, {self.dtype})"


def _meta(v: Any) -> Meta:
    """`Meta(v)` in one call where `v` is a Tensor over a numpy value (a nested transformation's
    operand): its layers walked here, without the constructor and the Tensor's `shape` and
    `dtype` properties (`record` makes one for each value a nested node does not keep)."""
    x, drop = v, 0
    while type(x) is Tensor:
        t = x._trace
        if t is not None and t.batched:
            drop += 1
        x = x._value
    if type(x) is not np.ndarray and not isinstance(x, np.generic):
        if x is not v or not hasattr(x, "dtype"):
            return Meta(v)
        m = _new(Meta)  # a plain array of another library
        m.shape, m.dtype = tuple(x.shape), np_dtype(x.dtype)
        return m
    m = _new(Meta)
    m.shape, m.dtype = x.shape[drop:] if drop else x.shape, x.dtype
    return m


def leaf_node() -> Node:
    """A graph node with no operation: an input of a reverse trace."""
    return Node(None, None, (), (), None)


_new = object.__new__


def record(
    out: Any,
    trace: Trace,
    prim: Primitive,
    params: Params,
    parents: tuple[Node | None, ...],
    needed: list[bool],
    vals: Sequence[Any],
    ans: Any,
    keep_vals: Sequence[bool] | None = None,
    keep_ans: bool = True,
) -> Tensor:
    """`out` boxed by the reverse `trace`, with its node: `prim` on `vals` giving `ans` (what the
    VJP reads as the result). The values the VJP does not read (`keep_vals`, `keep_ans` False:
    a keep rule's answer) are kept as their `Meta`. The node, the Tensor and a numpy array's
    Meta are made here without calling their constructors: every operation a reverse trace
    records comes through (the eager hot path), and so is that of a numpy scalar or of a Tensor
    of an unbatched trace over a numpy array (a second order's); another Tensor's is `_meta`'s."""
    if keep_vals is not None and False in keep_vals:
        saved = []
        for v, keep in zip(vals, keep_vals):
            if not keep:
                x = v._value if type(v) is Tensor and v._trace is not None and not v._trace.batched else v
                if type(x) is np.ndarray or isinstance(x, np.generic):
                    m = _new(Meta)
                    m.shape, m.dtype = x.shape, x.dtype
                    v = m
                else:
                    v = _meta(v)
            saved.append(v)
        vals = saved
    if not keep_ans:
        x = ans._value if type(ans) is Tensor and ans._trace is not None and not ans._trace.batched else ans
        if type(x) is np.ndarray or isinstance(x, np.generic):
            m = _new(Meta)
            m.shape, m.dtype = x.shape, x.dtype
            ans = m
        else:
            ans = _meta(ans)
    node = _new(Node)
    node.prim, node.params, node.parents, node.needed = prim, params, parents, needed
    node.vals, node.ans = tuple(vals), ans
    node.tensor = node.hooks = None
    node.seq = next(_node_seq)
    t = _new(Tensor)
    t._value, t._trace, t._node, t._tangent, t._grad = out, trace, node, None, None
    return t


class Trace:
    """A transformation in progress; `level` orders nested transformations.

    Make one inside `tracing`, which marks it `dead` when the transformation returns.
    """

    __slots__ = ("dead", "level")
    kind = "trace"
    batched = False  # True where values carry a leading batch axis (see batching.py)

    def __init__(self, level: int | None = None) -> None:
        self.level = next(_levels) if level is None else level
        self.dead = False

    def __repr__(self) -> str:
        return f"<{self.kind} trace {self.level}>"

    # the context of the transformation's body (see `tracing`): a class's, not a generator's
    # (`contextlib` costs four more calls, and every transformation call enters one)
    def __enter__(self: _T) -> _T:  # noqa: PYI019 (typing.Self is 3.11+)
        return self

    def __exit__(self, *exc: object) -> None:
        self.dead = True

    def process(self, prim: Primitive, args: Sequence[Any], params: Params) -> Value:
        """Apply `prim` to `args`, some of them Tensors of this trace (each subclass says how)."""
        raise NotImplementedError

    def rebinding(self, t: Tensor, out: Tensor) -> None:
        """Tensor `t`, of this trace or about to be, takes `out`'s value and place (``t[i] = v``
        inside a transformation, `Tensor._rebind`); a trace that knows its values by the
        Tensor objects holding them updates what it knows here. Most know them by nothing."""


class ReverseTrace(Trace):
    """Records each operation as a `Node` for a later reverse pass."""

    __slots__ = ("assigned",)
    kind = "reverse"
    keeps_operands = False  # whether a residual rule's node keeps its operands (see ImperativeTrace)

    def __init__(self, level: int | None = None) -> None:
        super().__init__(level)
        # the inputs the function assigned into (``x[i] = v``), by box id: each box's own value
        # and leaf node, which its gradient is taken for (`inputs`); None while there are none
        self.assigned: dict[int, tuple[Any, Node]] | None = None

    def rebinding(self, t: Tensor, out: Tensor) -> None:
        node = t._node
        if t._trace is self and node is not None and node.prim is None and out._node is not node:
            if self.assigned is None:
                self.assigned = {}
            self.assigned.setdefault(id(t), (t._value, node))

    def inputs(self, boxed: list[Tensor]) -> list[Tensor]:
        """`boxed`, the function's inputs, as they were given to it: a box the function assigned
        into holds the assignment's result now, and is replaced by a box of its own leaf."""
        kept = self.assigned or {}
        given = []
        for b in boxed:
            if id(b) in kept:
                value, node = kept[id(b)]
                b = _box(value, self, node, None)
            given.append(b)
        return given

    def process(self, prim: Primitive, args: Sequence[Any], params: Params) -> Value:
        vals: list[Any] = []
        parents: list[Node | None] = []
        needed: list[bool] = []
        nested = False  # whether a value is itself traced (by an enclosing transformation)
        for a in args:
            if type(a) is Tensor and a._trace is self:
                v = a._value
                parents.append(a._node)
                needed.append(a._node is not None)
            else:
                v = a
                parents.append(None)
                needed.append(False)
            vals.append(v)
            nested = nested or type(v) is Tensor
        residual = prim.residual
        if residual is not None:
            out, saved = residual(vals, params, needed)
            kept = tuple(vals) if self.keeps_operands else tuple(Meta(v) for v in vals)
            return record(out, self, prim, params, tuple(parents), needed, kept, saved)
        out = bind(prim, vals, params) if nested else prim.impl(*vals, **params)
        if prim.vjp is None:
            if prim.zero_derivative or True not in needed:
                return out
            raise _no_rule(prim, "reverse-mode (VJP)")
        keep = prim.keep
        keep_vals, keep_ans = (None, True) if keep is None else keep(needed)
        return record(out, self, prim, params, tuple(parents), needed, vals, out, keep_vals, keep_ans)


class ForwardTrace(Trace):
    """Carries a tangent beside each value and pushes it through JVP rules."""

    __slots__ = ()
    kind = "forward"

    def process(self, prim: Primitive, args: Sequence[Any], params: Params) -> Value:
        vals: list[Any] = []
        tangents: list[Any] = []
        nested = False  # whether a value is itself traced (by an enclosing transformation)
        for a in args:
            if type(a) is Tensor and a._trace is self:
                v = a._value
                vals.append(v)
                tangents.append(a._tangent)
                nested = nested or type(v) is Tensor
            else:
                vals.append(a)
                tangents.append(None)
                nested = nested or type(a) is Tensor
        rule = prim.jvp
        joint = prim.jvp_with_primal  # the rule computes the result as well: no `impl` first
        if not joint:
            out = bind(prim, vals, params) if nested else prim.impl(*vals, **params)
            if rule is None:
                if prim.zero_derivative or all(t is None for t in tangents):
                    return out
                raise _no_rule(prim, "forward-mode (JVP)")
        assert rule is not None
        # the rule runs quietly, as under QuietRules (inline, `_quiet_state` too: every forward
        # operation comes here), and its tangent is boxed without the Tensor's constructor
        depth = getattr(_local, "quiet", 0)
        _local.quiet = depth + 1
        token = None
        if depth == 0:
            now = _errstate.get()
            memo = _quiet_memo
            token = _errstate.set(memo[1] if memo[0] is now else _quiet_for(now))
        try:
            if joint:
                out, tangent = rule(tangents, None, vals, params)
            else:
                tangent = rule(tangents, out, vals, params)
        finally:
            _local.quiet = depth
            if token is not None:
                _errstate.reset(token)
        if tangent is None:
            return out
        t = _new(Tensor)
        t._value, t._trace, t._node, t._tangent, t._grad = out, self, None, tangent, None  # type: ignore[assignment]
        return t


class ImperativeTrace(ReverseTrace):
    """The imperative (PyTorch-style) graph that `Tensor.backward` differentiates.

    Like any reverse trace, except that it records nothing while `no_grad` is
    on: operations then see its Tensors as their values, and give constants.
    A node made by a residual rule keeps its operands beside the residuals:
    ``backward(create_graph=True)`` computes the residuals again from them, as
    einad operations, so that the gradient it records is differentiable
    through them too.
    """

    __slots__ = ()
    keeps_operands = True

    def rebinding(self, t: Tensor, out: Tensor) -> None:
        pass  # (its leaves are the user's, whose assignments `Tensor._inplace` takes)

    def process(self, prim: Primitive, args: Sequence[Any], params: Params) -> Value:
        if not grad_enabled():
            return bind(prim, [value_of(a, self) for a in args], params)
        return super().process(prim, args, params)


# Tensors made with requires_grad=True live in this one trace, the lowest of all
# levels. It never ends. grad, vjp, jvp and the Jacobians take its Tensors as their
# values; ea.jit runs its program through it, so a jitted loss still backpropagates.
IMPERATIVE = ImperativeTrace(level=0)

_local = threading.local()


def grad_enabled() -> bool:
    """Whether the imperative graph records operations (False inside `no_grad`, on this thread)."""
    return not getattr(_local, "no_grad", 0)


class _GradMode(ContextDecorator):
    """A context manager that is also a decorator, with or without parentheses (as PyTorch's)."""

    def __new__(cls, func: Callable[..., Any] | None = None) -> Any:
        if func is None:
            return super().__new__(cls)
        if not callable(func):
            raise TypeError(
                f"einad.{cls.__name__} takes no arguments: use `with einad.{cls.__name__}():`, "
                f"or decorate a function with @einad.{cls.__name__} (got {func!r})"
            )
        return cls()(func)  # bare @decorator: the function, wrapped


class no_grad(_GradMode):
    """Stop recording the imperative graph, as ``torch.no_grad``: a context manager or a decorator.

    Inside, operations on tensors that require grad record nothing: their
    results are constants. Use it to update parameters in place::

        with ea.no_grad():
            w -= lr * w.grad  # w stays a leaf that requires grad
        w.grad = None

    As a decorator it takes parentheses or not (``@ea.no_grad`` and
    ``@ea.no_grad()`` are the same). It concerns the imperative graph only
    (`Tensor.backward`), on the current thread: transformations (`einad.grad`,
    `einad.jit`, ...) called inside it work as anywhere else, and inside a
    transformed function it does not stop that transformation's derivative
    (use `einad.stop_gradient` there).
    """

    def __enter__(self) -> None:
        _local.no_grad = getattr(_local, "no_grad", 0) + 1

    def __exit__(self, *exc: object) -> None:
        _local.no_grad -= 1


class enable_grad(_GradMode):
    """Record the imperative graph again inside `no_grad`, as ``torch.enable_grad``.

    A context manager or a decorator (with parentheses or not); on leaving it,
    recording is as it was before.
    """

    def __enter__(self) -> None:
        saved: list[int] = _local.__dict__.setdefault("grad_saved", [])
        saved.append(getattr(_local, "no_grad", 0))
        _local.no_grad = 0

    def __exit__(self, *exc: object) -> None:
        _local.no_grad = _local.grad_saved.pop()


class _ErrstateShim:  # (for a numpy without the context variable; its test substitutes it)
    """numpy's error-state variable as `_quiet_state` uses it, made of `np.errstate`."""

    def get(self) -> None:
        return None

    def set(self, state: Any) -> Any:
        token = np.errstate(all="ignore")
        token.__enter__()
        return token

    def reset(self, token: Any) -> None:
        token.__exit__(None, None, None)


try:  # numpy's error state is a context variable holding an opaque state (numpy >= 2.0)
    from numpy._core._multiarray_umath import _make_extobj  # type: ignore[import-not-found]
    from numpy._core._ufunc_config import _extobj_contextvar as _errstate  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover (np.errstate then: ten times the cost)
    _errstate = _ErrstateShim()
    _make_extobj = lambda **kw: None

_quiet_memo: tuple[Any, Any] = (None, None)
"""(numpy's error state, the same state with every floating-point error ignored): the state a
rule last ran in, from the state around it (one entry: another state is worked out anew)."""


def _quiet_for(now: Any) -> Any:
    """numpy's error state `now` with every floating-point error ignored (and kept in the memo)."""
    global _quiet_memo
    _quiet_memo = (now, _make_extobj(all="ignore"))  # (made from the current state: `now`)
    return _quiet_memo[1]


def _quiet_state() -> Any:
    """Make numpy's error state quiet: its context variable set to the current state with every
    error ignored (numpy's own `np.errstate(all="ignore")` makes that state anew at each entry:
    ten times the cost); the token for ``_errstate.reset``. `ForwardTrace.process` does the
    same inline."""
    now = _errstate.get()
    memo = _quiet_memo
    return _errstate.set(memo[1] if memo[0] is now else _quiet_for(now))


class QuietRules:
    """The context derivative rules run in: numpy's floating-point warnings are off.

    A rule may compute a branch that a `where` then masks (``1 / x`` at ``x = 0``,
    ``log(0)``), or a derivative that is rightly infinite; the user sees its result,
    never a numpy warning from inside einad. What a rule stages is marked quiet too
    (`in_rules`), so a compiled program runs those equations under the same errstate.
    Re-entrant: only the outermost entry touches numpy's error state (`_quiet_state`).
    `ForwardTrace.process` does the same inline around each JVP rule.
    """

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        depth = getattr(_local, "quiet", 0)
        _local.quiet = depth + 1
        self._token = _quiet_state() if depth == 0 else None

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _local.quiet -= 1
        if self._token is not None:
            _errstate.reset(self._token)


def in_rules() -> bool:
    """Whether a derivative rule is running on this thread (see `QuietRules`)."""
    return getattr(_local, "quiet", 0) > 0


def tracing(trace: _T) -> _T:
    """`trace` as the context of a transformation's body: ``with tracing(ReverseTrace()) as t:``
    (a `Trace` is its own context manager); the trace is dead once the body returns.

    No stack of traces is kept: `bind` finds the innermost trace among its operands (the
    highest `level`), so a transformation is in progress exactly while its values are."""
    return trace


def dead_tracer(trace: Trace) -> TracerError:
    return TracerError(
        f"a value traced by {trace!r} was used after that transformation returned "
        "(it leaked out, e.g. saved in a list or a global, or written into a tensor made "
        "outside the function: t[i] = v): return it from the transformed function instead"
    )


class Staged:
    """The value of a Tensor staged into a program: shape, dtype, and the value seen while tracing.

    Reading it as a number or an array raises `TracerError`: the program must not
    depend on the value it happened to be traced with.
    """

    __slots__ = ("concrete", "dtype", "shape")

    def __init__(self, concrete: Any) -> None:
        self.concrete = concrete
        self.shape: Shape = tuple(getattr(concrete, "shape", ()))
        d = getattr(concrete, "dtype", None)
        self.dtype: np.dtype[Any] = np.result_type(concrete) if d is None else np_dtype(d)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def _refuse(self, what: str) -> TracerError:
        return TracerError(
            f"{what} of a value traced by einad.jit (or make_graph): its value is not known "
            "when the program is built. Mark the argument it comes from static "
            "(static_argnums / static_argnames), or write the choice with ea.where"
        )

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._refuse("numpy conversion")

    def __bool__(self) -> bool:
        raise self._refuse("bool()")

    def __float__(self) -> float:
        raise self._refuse("float()")

    def __int__(self) -> int:
        raise self._refuse("int()")

    def __index__(self) -> int:
        raise self._refuse("int()")

    def __complex__(self) -> complex:
        raise self._refuse("complex()")

    def __repr__(self) -> str:
        return f"Staged({self.shape}, {self.dtype})"


def bind(prim: Primitive, args: Sequence[Any], params: Params) -> Value:
    """Apply `prim` to `args`: on arrays directly, else through the top trace."""
    top: Trace | None = None
    level = -1
    for a in args:
        if type(a) is Tensor:
            t = a._trace
            if t is not None and t.level > level:
                top = t
                level = t.level
    if top is None:
        out: Value = prim.impl(*[a._value if type(a) is Tensor else a for a in args], **params)
        return out
    if top.dead:
        raise dead_tracer(top)
    return top.process(prim, args, params)


class Hook:
    """A function `Tensor.register_hook` registered, with the shape and dtype of the gradient it takes."""

    __slots__ = ("dtype", "fn", "shape")

    def __init__(self, fn: Callable[[Any], Any], shape: Shape, dtype: np.dtype[Any]) -> None:
        self.fn, self.shape, self.dtype = fn, shape, dtype


class HookHandle:
    """What `Tensor.register_hook` returns: ``remove()`` unregisters the hook (as PyTorch's handle)."""

    __slots__ = ("_entry", "_hooks")

    def __init__(self, hooks: list[Any], entry: Hook) -> None:
        self._hooks, self._entry = hooks, entry

    def remove(self) -> None:
        """Unregister the hook (a second call does nothing)."""
        if self._entry in self._hooks:
            self._hooks.remove(self._entry)

    def __enter__(self) -> HookHandle:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


class GradFn:
    """A node of the imperative graph, as `Tensor.grad_fn` shows it (PyTorch's ``grad_fn``).

    ``name()`` names the operation that computed the tensor (``"MultiplyBackward"``,
    ``"EinsumBackward"``), or ``"AccumulateGrad"`` for a leaf reached through
    `next_functions`; ``variable`` is that leaf. Two GradFns of the same node are equal.
    """

    __slots__ = ("_node",)

    def __init__(self, node: Node) -> None:
        self._node = node

    def name(self) -> str:
        """The operation's name, in PyTorch's spelling."""
        prim = self._node.prim
        if prim is None:
            return "AccumulateGrad"
        return "".join(w.capitalize() for w in prim.name.split("_")) + "Backward"

    @property
    def next_functions(self) -> tuple[tuple[GradFn | None, int], ...]:
        """One ``(GradFn or None, 0)`` per operand: None for a constant operand."""
        return tuple((None if p is None else GradFn(p), 0) for p in self._node.parents)

    @property
    def variable(self) -> Tensor | None:
        """The leaf tensor of an ``AccumulateGrad`` (None for an operation, or a leaf no longer alive)."""
        ref = self._node.tensor
        return ref() if ref is not None and self._node.prim is None else None

    def __eq__(self, other: object) -> bool:
        return type(other) is GradFn and other._node is self._node

    def __hash__(self) -> int:
        return id(self._node)

    def __repr__(self) -> str:
        return f"<{self.name()}>"


class Tensor:
    """The array type that flows through einad code; wraps a numpy array.

    Make one with `einad.tensor`. Operators and methods call einad operations,
    so everything a Tensor does is differentiable.

    Imperative use, as in PyTorch: a tensor made with ``requires_grad=True``
    is a leaf of the imperative graph; `backward` accumulates into its
    `grad`. In-place operators (``-=``, ``+=``, ``*=``, ``/=``, ``**=``,
    ``@=``) give the tensor a new array (never writing into one); on a leaf
    that requires grad they are allowed only under `einad.no_grad`, where the
    tensor stays the same leaf. Inside a transformation the tensor takes the
    traced result, as it does eagerly: every name for it sees the update (as
    numpy's and PyTorch's), and so do item assignments (``t[i] = v``) and
    writes through views (``t[0][1] = v``).
    """

    __slots__ = ("__weakref__", "_grad", "_node", "_tangent", "_trace", "_value")
    __array_priority__ = 1000

    _value: Array | np.number[Any] | np.bool_ | Tensor  # a numpy value, or a Tensor one level down
    _trace: Trace | None
    _node: Node | None
    _tangent: Any
    _grad: Array | Tensor | None

    def __init__(self, data: ArrayLike, dtype: DTypeLike | None = None, requires_grad: bool = False) -> None:
        self._value = as_array(data, dtype, copy=True)  # the Tensor's own array, as torch.tensor's
        self._trace = None
        self._node = None
        self._tangent = None
        self._grad = None
        if requires_grad:
            self.requires_grad_()

    # -- attributes -----------------------------------------------------
    @property
    def shape(self) -> Shape:
        """The shape (inside `vmap`, the shape of one example)."""
        # each batched level down to the array strips one leading axis (walked, not recursed)
        x: Any = self
        drop = 0
        while type(x) is Tensor:
            t = x._trace
            if t is not None and t.batched:
                drop += 1
            x = x._value
        s: Shape = x.shape
        return s[drop:] if drop else s

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return math.prod(self.shape)

    @property
    def itemsize(self) -> int:
        """The bytes of one element, as numpy's ``ndarray.itemsize``."""
        return self.dtype.itemsize

    @property
    def nbytes(self) -> int:
        """The bytes of all elements, as numpy's ``ndarray.nbytes``."""
        return self.size * self.dtype.itemsize

    @property
    def device(self) -> Any:
        """The device of the array beneath, as the array API's ``x.device``: numpy's ``"cpu"``,
        a torch or CuPy array's own device."""
        x: Any = self
        while type(x) is Tensor:
            x = x._value
        where = arrays.device(x)
        return "cpu" if where is None else where

    @property
    def dtype(self) -> np.dtype[Any]:
        """The dtype, described by numpy's dtype object whatever library holds the value."""
        x: Any = self._value
        while type(x) is Tensor:
            x = x._value
        d = x.dtype  # (numpy's, for numpy arrays and scalars: no np_dtype call)
        return d if type(x) is np.ndarray or isinstance(d, np.dtype) else np_dtype(d)

    @property
    def requires_grad(self) -> bool:
        """Whether the tensor belongs to the imperative graph that `backward` differentiates.

        Setting it is `requires_grad_`.
        """
        return self._trace is IMPERATIVE

    @requires_grad.setter
    def requires_grad(self, requires_grad: bool) -> None:
        self.requires_grad_(requires_grad)

    def requires_grad_(self, requires_grad: bool = True) -> Tensor:
        """Make this tensor a leaf of the imperative graph (or a constant again), in place.

        As PyTorch's: it returns the tensor itself, so ``w = ea.tensor(a).requires_grad_()``
        works, and ``h.detach().requires_grad_()`` makes an intermediate result a leaf.

        Args:
            requires_grad: Whether `backward` should accumulate a gradient into it.

        Returns:
            This tensor.

        Raises:
            TypeError: If the dtype is not floating-point or complex.
            RuntimeError: If the tensor is traced by a transformation, or is a
                computed (non-leaf) result and `requires_grad` is False.
        """
        trace = self._trace
        if trace is not None and trace is not IMPERATIVE:
            raise RuntimeError(
                "requires_grad_() on a value traced by a transformation (einad.grad, jit, ...): "
                "the transformation already differentiates its inputs"
            )
        if requires_grad == self.requires_grad:
            return self
        if not self.is_leaf:
            raise RuntimeError(
                "requires_grad_(False) on a tensor computed from tensors that require grad: "
                "only leaves can change it; use detach() for a constant with this value"
            )
        if requires_grad:
            if not np.issubdtype(self.dtype, np.inexact):
                raise TypeError(
                    f"only floating-point or complex tensors can require gradients, got dtype {self.dtype}"
                )
            self._trace = IMPERATIVE
            self._node = leaf_node()
            self._node.tensor = weakref.ref(self)
        else:
            if self._node is not None:
                self._node.tensor = None  # a graph recorded before no longer fills its .grad
            self._trace = self._node = None
        return self

    @property
    def grad(self) -> Array | Tensor | None:
        """The gradient `backward` accumulated into this leaf, or None: an array of its shape, of the
        tensor's library and on its device (a numpy array for a numpy tensor).

        None until the first `backward` reaching the tensor, and on tensors that
        do not require grad. Set it to None to start accumulating afresh. After
        ``backward(create_graph=True)`` it is an einad Tensor instead, recorded in
        the imperative graph (it requires grad where it depends on a leaf), so it
        can be differentiated again. On a computed (non-leaf) tensor it is None,
        with a `UserWarning`, unless the tensor called `retain_grad` or was among a
        backward's `inputs`.
        """
        if self._grad is None and self._trace is IMPERATIVE and not self.is_leaf and not self.retains_grad:
            warnings.warn(
                "the .grad of a tensor that is not a leaf is None: backward() accumulates gradients "
                "into leaves only (tensors made with requires_grad=True). For the gradient of an "
                "intermediate result h, call h.retain_grad() before backward(), make it a leaf "
                "(h = h.detach().requires_grad_()), or use einad.grad / einad.vjp",
                UserWarning,
                stacklevel=2,
            )
        return self._grad

    @grad.setter
    def grad(self, value: ArrayLike | None) -> None:
        if value is None:
            self._grad = None
            return
        if type(value) is Tensor and value._trace is IMPERATIVE:  # a gradient that is differentiable
            if value.shape != self.shape or value.dtype != self.dtype:
                raise ValueError(
                    f"a gradient of shape {value.shape} and dtype {value.dtype} for a tensor of "
                    f"shape {self.shape} and dtype {self.dtype}"
                )
            self._grad = value
            return
        g = self._in_my_library(value)
        if tuple(g.shape) != self.shape:
            raise ValueError(f"a gradient of shape {tuple(g.shape)} for a tensor of shape {self.shape}")
        if np_dtype(g.dtype).kind == "c" and self.dtype.kind != "c":
            raise TypeError(
                f"a complex gradient (dtype {np_dtype(g.dtype)}) for a real tensor (dtype {self.dtype}): "
                "its imaginary part would be lost"
            )
        self._grad = arrays.cast(g, self.dtype)

    def _in_my_library(self, value: Any) -> Any:
        """`value` (a gradient or cotangent the user gives) as an array of this tensor's library.

        Numbers and lists become arrays of the library, on the tensor's device; an array of
        another library is a TypeError naming both.
        """
        mine = strip(self)
        if type(mine) is Staged:
            mine = mine.concrete
        g = as_array(value)
        if arrays.xp_of(mine) is np and arrays.is_numpy(g):
            return g
        if arrays.is_array(value) or type(value) is Tensor:
            arrays.namespace(g, mine)  # TypeError for two libraries
            return g
        # integers and bools take the tensor's dtype, as numpy's promotion would give them
        dt = g.dtype if g.dtype.kind in "fc" else np_dtype(mine.dtype)
        return arrays.asarray(mine, g, dt)

    @property
    def is_leaf(self) -> bool:
        """Whether the tensor is an input of its graph rather than an operation's result."""
        return self._node is None or self._node.prim is None

    def _imperative_node(self, what: str) -> Node:
        """This tensor's node in the imperative graph, or RuntimeError saying why `what` needs one."""
        if self._trace is not IMPERATIVE or self._node is None:
            if self._trace is not None:
                raise RuntimeError(
                    f"{what} on a value traced by a transformation (einad.grad, jit, ...): it concerns "
                    "the imperative graph of tensors made with requires_grad=True"
                )
            raise RuntimeError(
                f"{what} on a tensor that does not require grad: make it with "
                "ea.tensor(data, requires_grad=True), or call t.requires_grad_()"
            )
        return self._node

    @property
    def grad_fn(self) -> GradFn | None:
        """The operation that computed this tensor in the imperative graph, as PyTorch's ``grad_fn``.

        None on leaves and on tensors that do not require grad; otherwise a
        `GradFn` naming the operation (``grad_fn.name()``, e.g. ``"MultiplyBackward"``)
        and leading to its inputs' (``grad_fn.next_functions``).
        """
        node = self._node
        if self._trace is not IMPERATIVE or node is None or node.prim is None:
            return None
        return GradFn(node)

    def retain_grad(self) -> None:
        """Make `backward` fill this computed tensor's `grad` too, as PyTorch's ``retain_grad``.

        The gradient accumulates over backward calls like a leaf's; it is taken
        after the tensor's hooks (`register_hook`) have run. On a leaf it does
        nothing (a leaf's gradient is always kept).

        Raises:
            RuntimeError: If the tensor does not require grad.
        """
        node = self._imperative_node("retain_grad()")
        if node.prim is not None:
            node.tensor = weakref.ref(self)

    @property
    def retains_grad(self) -> bool:
        """Whether `retain_grad` was called on this computed tensor (False on leaves, as in PyTorch)."""
        node = self._node
        if self._trace is not IMPERATIVE or node is None:
            return False
        return node.prim is not None and node.tensor is not None

    def register_hook(self, hook: Callable[[Any], Any]) -> HookHandle:
        """Call ``hook(grad)`` each time `backward` computes the gradient of this tensor, as PyTorch's.

        `grad` is the gradient as ``.grad`` would hold it: an array of the
        tensor's shape, dtype and library (read-only for numpy: a hook must not
        write into it), or an einad Tensor during ``backward(create_graph=True)``.
        A hook that returns a value (not None) replaces the gradient: the
        backward pass goes on with it, and a leaf accumulates it into ``.grad``.
        Several hooks run in the order they were registered, each given the
        previous one's result.

        Returns:
            A handle whose ``remove()`` unregisters the hook (also a context manager
            that removes it on exit).

        Raises:
            RuntimeError: If the tensor does not require grad.
        """
        if not callable(hook):
            raise TypeError(f"register_hook takes a function of the gradient, got {hook!r}")
        node = self._imperative_node("register_hook()")
        if node.hooks is None:
            node.hooks = []
        entry = Hook(hook, self.shape, self.dtype)
        node.hooks.append(entry)
        return HookHandle(node.hooks, entry)

    def tolist(self) -> Any:
        """The value as (nested lists of) Python numbers, as numpy's and PyTorch's ``tolist``."""
        return to_numpy(self._number()).tolist()

    def __setitem__(self, index: Any, value: Any) -> None:
        """``t[index] = value``, as numpy's and PyTorch's: the tensor takes a new value with those
        elements replaced (``t.at[index].set(value)``, `value` cast to the tensor's dtype as numpy
        casts it), never writing into an array: the old one, perhaps the user's, and every graph
        that recorded it stay as they were (`_write`, as ``t += 1``).

        Inside a transformation (``grad``, ``jit``, ``vmap``, ...) the same: the tensor takes the
        traced result (`_rebind`), so code written for numpy or the array API that fills an array
        element by element is differentiated, staged and batched as ``t = t.at[index].set(value)``
        would be. Every name for the tensor sees the new value. A tensor read from another by basic
        indexing is a view (`view`): a write into it is a write into that one too, as numpy's. A
        transformation's argument that the function writes into is still differentiated as given.
        """
        self._assign(index, value, "t[...] = v")

    def _assign(self, index: Any, value: Any, symbol: str) -> None:
        """``self[index] = value``, spelled `symbol` in messages (``zero_()``, ``fill_()`` too)."""
        if type(value) is Tensor and _holds(self, value, index):
            return  # ``x[i] += v``: the view x[i] wrote itself into x already
        if self._trace is None and id(self) not in _views and _assigns_plainly(self._value, index, value):
            # a constant written with constants (a buffer filled eagerly): numpy's assignment into
            # a copy of the array, the tensor's new one (what ``at[index].set`` computes, in one call)
            new = self._value.copy()
            new[index] = value._value if type(value) is Tensor else value
            self._value = new
            if id(self) in _bases:
                _refresh(self)
            return
        self._write(lambda t: t.at[index].set(value), symbol)  # (`set` casts as numpy's assignment)

    def _write(self, op: Callable[[Tensor], Tensor], symbol: str) -> None:
        """This tensor takes ``op(self)`` as its value, a write in place spelled `symbol` in
        messages (item assignment, in-place operators, numpy's writers such as ``np.put`` and
        ``np.add.at``): of its shape and cast to its dtype (`_fits`), a new array (the old one,
        perhaps the user's, and every graph that recorded it stay as they were), recorded in the
        imperative graph as PyTorch records it; inside a transformation the traced result
        (`_rebind`); into a view, through its base (`view`)."""
        seen = _views.get(id(self))
        if seen is not None:  # a view: the write applies to its base's elements, as numpy's
            _, base, where, synced = seen
            now = self if synced is base._value else where.look(base)  # (what the base holds there)
            self._through(base, where, self._fits(op(now), symbol), symbol)
            return
        trace = self._trace
        if trace is not None and trace is not IMPERATIVE:  # the traced result, as eagerly
            self._rebind(self._fits(op(self), symbol))
            return
        recording = grad_enabled()
        if recording and trace is IMPERATIVE and self.is_leaf:
            raise RuntimeError(
                f"a leaf tensor that requires grad is being used in an in-place operation ({symbol}): "
                "update parameters inside `with einad.no_grad():`"
            )
        out = self._fits(op(self), symbol)
        if out._trace is not None and out._trace is not IMPERATIVE:
            self._rebind(out)  # written with a value a transformation traces: so is this tensor now
            return
        # a new array; under `no_grad` the tensor keeps its place in the imperative graph,
        # otherwise it becomes the result (a constant updated by a tensor that requires grad then
        # requires grad)
        self._value = out._value
        if recording:
            old = self._node
            self._trace, self._node = out._trace, out._node
            if old is not None and old.prim is not None and old.tensor is not None and out._node is not None:
                # retain_grad follows the tensor to its new value (hooks stay with the old one), as in PyTorch
                old.tensor, out._node.tensor = None, old.tensor
        if id(self) in _bases:
            _refresh(self)

    def _through(self, base: Tensor, where: Basic | Layout, region: Tensor, symbol: str) -> None:
        """This view of `base` (read by `where`) takes the new value `region` of those elements,
        written into `base` first (and so on through `base`'s own base)."""
        kids = _bases[id(base)]
        kids.discard(id(self))  # (the base's write refreshes its other views; this one takes `region`)
        try:
            where.put(base, region, symbol)
        finally:
            kids.add(id(self))
            _bases[id(base)] = kids
        self._rebind(region)
        ref, _, _, _ = _views[id(self)]
        _views[id(self)] = (ref, base, where, base._value)  # (`_holds`: the two agree now)

    def _rebind(self, out: Tensor) -> None:
        """This tensor becomes `out` (most often a value of a transformation's trace): its value,
        trace, node and tangent are `out`'s. The traces it leaves and joins are told first
        (`Trace.rebinding`): a reverse trace keeps an input's own leaf, a staging trace names
        this tensor as `out`'s variable. After the transformation returns, the tensor is one
        of its dead values, as any value it traced (a tensor made outside the function and
        assigned into inside it raises when used later: make it inside)."""
        old, new = self._trace, out._trace
        if old is not None:
            old.rebinding(self, out)
        if new is not None and new is not old:
            new.rebinding(self, out)
        self._value, self._trace, self._node, self._tangent = out._value, new, out._node, out._tangent
        if id(self) in _bases:
            _refresh(self)

    if TYPE_CHECKING:  # attached by einad.ops at import (the public layer)

        @property
        def T(self) -> Tensor: ...
        @property
        def real(self) -> Tensor: ...
        @property
        def imag(self) -> Tensor: ...
        def conj(self) -> Tensor: ...
        def conjugate(self) -> Tensor: ...
        @property
        def mT(self) -> Tensor: ...
        def detach(self) -> Tensor: ...
        def __add__(self, other: ArrayLike) -> Tensor: ...
        def __radd__(self, other: ArrayLike) -> Tensor: ...
        def __sub__(self, other: ArrayLike) -> Tensor: ...
        def __rsub__(self, other: ArrayLike) -> Tensor: ...
        def __mul__(self, other: ArrayLike) -> Tensor: ...
        def __rmul__(self, other: ArrayLike) -> Tensor: ...
        def __truediv__(self, other: ArrayLike) -> Tensor: ...
        def __rtruediv__(self, other: ArrayLike) -> Tensor: ...
        def __pow__(self, other: ArrayLike) -> Tensor: ...
        def __rpow__(self, other: ArrayLike) -> Tensor: ...
        def __mod__(self, other: ArrayLike) -> Tensor: ...
        def __rmod__(self, other: ArrayLike) -> Tensor: ...
        def __floordiv__(self, other: ArrayLike) -> Tensor: ...
        def __rfloordiv__(self, other: ArrayLike) -> Tensor: ...
        def __divmod__(self, other: ArrayLike) -> tuple[Tensor, Tensor]: ...
        def __rdivmod__(self, other: ArrayLike) -> tuple[Tensor, Tensor]: ...
        def __round__(self, ndigits: int | None = None) -> Tensor: ...
        def __matmul__(self, other: ArrayLike) -> Tensor: ...
        def __rmatmul__(self, other: ArrayLike) -> Tensor: ...
        def __iadd__(self, other: ArrayLike) -> Tensor: ...  # noqa: PYI034
        def __isub__(self, other: ArrayLike) -> Tensor: ...  # noqa: PYI034
        def __imul__(self, other: ArrayLike) -> Tensor: ...  # noqa: PYI034
        def __itruediv__(self, other: ArrayLike) -> Tensor: ...  # noqa: PYI034
        def __ipow__(self, other: ArrayLike) -> Tensor: ...  # noqa: PYI034
        def __imatmul__(self, other: ArrayLike) -> Tensor: ...  # noqa: PYI034
        def __neg__(self) -> Tensor: ...
        def __abs__(self) -> Tensor: ...
        def __getitem__(self, index: Any) -> Tensor: ...
        def __lt__(self, other: ArrayLike) -> Any: ...
        def __le__(self, other: ArrayLike) -> Any: ...
        def __gt__(self, other: ArrayLike) -> Any: ...
        def __ge__(self, other: ArrayLike) -> Any: ...
        def __eq__(self, other: object) -> Any: ...
        def __ne__(self, other: object) -> Any: ...
        def sum(
            self,
            axis: Axis = None,
            keepdims: bool = False,
            *,
            dtype: DTypeLike | None = None,
            initial: ArrayLike | None = None,
            where: ArrayLike | None = None,
        ) -> Tensor: ...
        def mean(
            self,
            axis: Axis = None,
            keepdims: bool = False,
            *,
            dtype: DTypeLike | None = None,
            where: ArrayLike | None = None,
        ) -> Tensor: ...
        def var(
            self,
            axis: Axis = None,
            ddof: float = 0,
            keepdims: bool = False,
            *,
            dtype: DTypeLike | None = None,
            where: ArrayLike | None = None,
            mean: ArrayLike | None = None,
            correction: float | None = None,
        ) -> Tensor: ...
        def max(
            self,
            axis: Axis = None,
            keepdims: bool = False,
            *,
            initial: ArrayLike | None = None,
            where: ArrayLike | None = None,
        ) -> Tensor: ...
        def min(
            self,
            axis: Axis = None,
            keepdims: bool = False,
            *,
            initial: ArrayLike | None = None,
            where: ArrayLike | None = None,
        ) -> Tensor: ...
        def prod(
            self,
            axis: Axis = None,
            keepdims: bool = False,
            *,
            dtype: DTypeLike | None = None,
            initial: ArrayLike | None = None,
            where: ArrayLike | None = None,
        ) -> Tensor: ...
        def any(
            self, axis: Axis = None, keepdims: bool = False, *, where: ArrayLike | None = None
        ) -> Tensor: ...
        def all(
            self, axis: Axis = None, keepdims: bool = False, *, where: ArrayLike | None = None
        ) -> Tensor: ...
        def reshape(self, *shape: int | Sequence[int], order: str = "C") -> Tensor: ...
        def transpose(self, *axes: int | Sequence[int]) -> Tensor: ...
        def dot(self, other: ArrayLike) -> Tensor: ...
        def exp(self) -> Tensor: ...
        def log(self) -> Tensor: ...
        def squeeze(self, axis: Axis = None) -> Tensor: ...
        @property
        def at(self) -> Any: ...
        @property
        def flat(self) -> Any: ...
        @flat.setter
        def flat(self, value: Any) -> None: ...
        def astype(self, dtype: DTypeLike) -> Tensor: ...
        def std(
            self,
            axis: Axis = None,
            ddof: float = 0,
            keepdims: bool = False,
            *,
            dtype: DTypeLike | None = None,
            where: ArrayLike | None = None,
            mean: ArrayLike | None = None,
            correction: float | None = None,
        ) -> Tensor: ...
        def cumsum(self, axis: int | None = None) -> Tensor: ...
        def cumprod(self, axis: int | None = None) -> Tensor: ...
        def clip(self, min: ArrayLike | None = None, max: ArrayLike | None = None) -> Tensor: ...  # noqa: A002
        def clamp(self, min: ArrayLike | None = None, max: ArrayLike | None = None) -> Tensor: ...  # noqa: A002
        def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor: ...
        def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor: ...
        def argsort(self, axis: int | None = -1) -> Tensor: ...
        def diagonal(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor: ...
        def trace(self, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor: ...
        def round(self, decimals: int = 0) -> Tensor: ...
        def pow(self, exponent: ArrayLike) -> Tensor: ...
        def clone(self) -> Tensor: ...
        def copy(self) -> Tensor: ...
        def view(self, *shape: int | Sequence[int]) -> Tensor: ...
        def unsqueeze(self, dim: int) -> Tensor: ...
        def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor: ...
        def ravel(self, order: str = "C") -> Tensor: ...
        def sort(self, axis: int | None = -1) -> Tensor: ...
        def repeat(self, repeats: int | Sequence[int], axis: int | None = None) -> Tensor: ...
        def ptp(self, axis: Axis = None, keepdims: bool = False) -> Tensor: ...
        def block_until_ready(self) -> Tensor: ...
        def swapaxes(self, axis1: int, axis2: int) -> Tensor: ...
        def numel(self) -> int: ...
        def dim(self) -> int: ...
        def zero_(self) -> Tensor: ...
        def fill_(self, value: ArrayLike) -> Tensor: ...
        def fill(self, value: ArrayLike) -> None: ...
        def _inplace_method(self, value: ArrayLike, name: str) -> Tensor: ...
        # the elementwise methods (`einad.ops.TENSOR_ELEMENTWISE`)
        def abs(self) -> Tensor: ...
        def ceil(self) -> Tensor: ...
        def cos(self) -> Tensor: ...
        def cosh(self) -> Tensor: ...
        def expm1(self) -> Tensor: ...
        def floor(self) -> Tensor: ...
        def log10(self) -> Tensor: ...
        def log1p(self) -> Tensor: ...
        def log2(self) -> Tensor: ...
        def relu(self) -> Tensor: ...
        def sigmoid(self) -> Tensor: ...
        def sign(self) -> Tensor: ...
        def sin(self) -> Tensor: ...
        def sinh(self) -> Tensor: ...
        def sqrt(self) -> Tensor: ...
        def square(self) -> Tensor: ...
        def tan(self) -> Tensor: ...
        def tanh(self) -> Tensor: ...

    def numpy(self) -> Array:
        """The value as a numpy array, detached from every trace (copied off its device).

        A numpy value comes as a read-only view, as JAX's ``np.asarray`` gives one: the
        tensor's own array, which graphs that recorded the tensor read again in `backward`
        (and which may be a view of the user's array), is never written through it.
        ``np.array(t)`` gives a writable copy.
        """
        out: Array = _read_only(to_numpy(strip(self)))
        return out

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> Array:
        if self._trace is not None and self._trace is not IMPERATIVE:
            if self._trace.dead:
                raise dead_tracer(self._trace)
            if type(self._value) is Staged:  # a value of jit's trace itself: not known yet
                raise self._value._refuse("numpy conversion")
            raise TracerError(
                "a traced Tensor cannot be converted to a numpy array inside a transformation "
                "(numpy functions would silently drop its derivative): use einad operations, "
                "or einad.stop_gradient(x) to take the value without its derivative"
            )
        arr: Array = to_numpy(strip(self))
        if copy:  # numpy's protocol: np.array(t) asks for an array of its own
            return np.array(arr, dtype=dtype)
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            return arr.astype(dtype)  # (a new array)
        arr = _read_only(arr)
        return arr

    # numpy's dispatch protocols: `np.sin(t)`, `ndarray * t`, `np.sum(t, axis=0)` run einad's
    # operations (see `numpy_functions`), so numpy code stays traced and differentiable.
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        impl = numpy_functions.get(ufunc if method == "__call__" else (ufunc, method))
        if impl is None:
            if method == "at" and type(inputs[0]) is Tensor:
                raise TypeError(
                    f"numpy.{ufunc.__name__}.at writes into its first operand, and einad never writes "
                    "into an array: write t = t.at[index].add(v) (or .set(v)) for a new tensor"
                )
            plain = _plain((inputs, kwargs))
            if plain is not None:  # only constant Tensors: numpy on their values loses nothing
                return getattr(ufunc, method)(*plain[0], **plain[1])
            name = ufunc.__name__ if method == "__call__" else f"{ufunc.__name__}.{method}"
            raise TypeError(_not_implemented(f"numpy.{name}"))
        return impl(*inputs, **kwargs)

    def __array_function__(
        self, func: Callable[..., Any], types: Sequence[type], args: Sequence[Any], kwargs: dict[str, Any]
    ) -> Any:
        impl = numpy_functions.get(func)
        if impl is None:
            plain = _plain((args, kwargs))
            if plain is not None:  # only constant Tensors: numpy on their values loses nothing
                return func(*plain[0], **plain[1])
            raise TypeError(_not_implemented(f"{func.__module__}.{func.__name__}"))
        return impl(*args, **kwargs)

    def __repr__(self) -> str:
        v = strip(self)
        if type(v) is Staged:
            return f"tensor(<staged {v.dtype}{list(v.shape)}>, traced by {self._trace!r})"
        if arrays.library(v) == "dask":  # printing does not compute a lazy array
            body = repr(v)
        else:
            body = np.array2string(to_numpy(v), separator=", ", prefix="tensor(")
        extra = ""
        if self._trace is IMPERATIVE:
            extra = ", requires_grad=True"
        elif self._trace is not None:
            extra = f", traced by {self._trace!r}"
        return f"tensor({body}, dtype={self.dtype}{extra})"

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self) -> Iterator[Tensor]:
        for i in range(len(self)):
            yield self[i]

    def __contains__(self, value: Any) -> bool:
        """``value in t``, as numpy's and PyTorch's: whether some element equals `value` (a value, read)."""
        return bool(np.any(to_numpy(self._number()) == to_numpy(strip(value))))

    def _number(self) -> Any:
        """The value as Python control flow sees it: known under grad/jvp, refused under jit
        and, for a value that depends on a mapped argument, under vmap (one Python number
        cannot stand for a batch of values)."""
        if self._trace is not None and self._trace.dead:
            raise dead_tracer(self._trace)
        x: Any = self
        while type(x) is Tensor:
            if x._trace is not None and x._trace.batched:
                raise TracerError(
                    f"a value mapped by vmap ({x._trace!r}) was read as a Python number (bool, "
                    "float, int, item): each example has its own value. Write the choice with ea.where"
                )
            x = x._value
        return x

    def __float__(self) -> float:
        value = self._number()  # (first: a staged or mapped value's refusal says more)
        if type(value) is not Staged:
            self._keeps_derivative("float()")
        return float(value)

    def __int__(self) -> int:
        return int(self._number())

    def __index__(self) -> int:
        v = self._number()
        if type(v) is not Staged and np_dtype(v.dtype).kind not in "biu":
            raise TypeError(f"only an integer tensor can be an index, got dtype {v.dtype}")
        return int(v)  # a Staged value refuses with TracerError

    def __complex__(self) -> complex:
        value = self._number()
        if type(value) is not Staged:
            self._keeps_derivative("complex()")
        return complex(value)

    def _keeps_derivative(self, call: str) -> None:
        """Refuse a Python number of a value a transformation differentiates: the number would
        carry no derivative, silently (``math.exp(x)``, ``ndarray[i] = x``). `item()` is the
        spelling that means it; ``bool``, ``int`` and indices take values for control flow, whose
        derivative is zero anyway. The imperative graph's tensors give theirs, as PyTorch's."""
        trace = self._trace
        kind = trace.kind if trace is not None and trace is not IMPERATIVE and not trace.dead else None
        if kind in _DIFFERENTIATING:
            raise TypeError(
                f"{call} of a value traced by {trace!r} would drop its derivative (a Python number "
                "carries none): use einad operations on the Tensor (ea.exp, not math.exp; write it "
                "into a Tensor, not a numpy array), or t.item() for its value without its derivative"
            )

    def __bool__(self) -> bool:
        return bool(self._number())

    def __format__(self, spec: str) -> str:
        if spec and self.shape == ():  # f"{loss:.4f}", as numpy's and PyTorch's 0-d values allow
            return format(self.item(), spec)
        return super().__format__(spec)  # (a spec for more elements: TypeError, as numpy's)

    def item(self, *args: Any) -> Any:
        """The value of a one-element tensor as a Python number (ValueError for more elements),
        as PyTorch's; with numpy's arguments, the element at a flat index (``t.item(3)``) or a
        multi-index (``t.item(1, 0)``)."""
        v = self._number()
        return to_numpy(v).item(*args) if type(v) is not Staged else float(v)

    __hash__ = object.__hash__

    if TYPE_CHECKING:  # attached by einad.transforms.autodiff (the imperative reverse pass)

        def backward(
            self,
            cotangent: ArrayLike | None = None,
            retain_graph: bool | None = None,
            create_graph: bool = False,
            *,
            gradient: ArrayLike | None = None,
        ) -> None: ...

    def _inplace(self, op: Callable[[Tensor, ArrayLike], Tensor], other: ArrayLike, symbol: str) -> Tensor:
        """``self op= other``: this tensor takes the result's value (`_write`), never writing into
        an array, inside a transformation too: every name for the tensor sees the update, as
        numpy's and PyTorch's."""
        self._write(lambda t: op(t, other), symbol)
        return self

    def _fits(self, out: Tensor, symbol: str) -> Tensor:
        """`out`, the result of an in-place `symbol`, as this tensor can take it: of its shape
        (else ValueError), cast to its dtype where numpy's ``same_kind`` casting allows (else
        TypeError)."""
        if out.shape != self.shape:
            raise ValueError(
                f"in-place {symbol} would change the tensor's shape from {self.shape} to {out.shape}"
            )
        if out.dtype != self.dtype:
            if not np.can_cast(out.dtype, self.dtype, "same_kind"):
                raise TypeError(f"in-place {symbol} cannot cast the result's {out.dtype} to {self.dtype}")
            out = out.astype(self.dtype)
        return out

    def __pos__(self) -> Tensor:
        return self


Value: TypeAlias = Array | np.number[Any] | np.bool_ | int | float | complex | Tensor
"""What flows through einad code: a numpy array, numpy scalar, Python number, or a traced `Tensor`."""

ArrayLike: TypeAlias = Tensor | npt.ArrayLike
"""What the public operations accept: a `Tensor`, or anything numpy converts to a numeric array."""


_DIFFERENTIATING = ("reverse", "forward")
"""The kinds of trace whose values carry a derivative (`Tensor._keeps_derivative`)."""


def _not_implemented(name: str) -> str:
    return (
        f"einad does not implement {name} for traced Tensors (numpy would drop their "
        "derivative): use an einad operation instead"
    )


def _read_only(arr: Any) -> Any:
    """A numpy array as a read-only view (other values as they are): what a Tensor hands to numpy."""
    if type(arr) is np.ndarray and arr.flags.writeable:
        arr = arr.view()
        arr.flags.writeable = False
    return arr


# -- views ------------------------------------------------------------------------------------------

_views: dict[int, tuple[_ViewRef, Tensor, Basic | Layout, Any]] = {}
"""The Tensors read from another by basic indexing or a layout (`view`), by id: (a weak
reference to the view, which drops its entry when it goes, its base, how it reads the base (a
`Basic` index or a `Layout`), and the base's value when the two last agreed)."""


class Basic:
    """How a view by basic indexing holds some of its base's elements (``x[0]``, ``x[:, 1:]``,
    a row of ``for row in x``): each method as `Layout`'s, for ``base[index]``."""

    __slots__ = ("index",)

    def __init__(self, index: Any) -> None:
        self.index = index

    def look(self, base: Tensor) -> Tensor:
        """The view's elements, as the base holds them now."""
        return base[self.index]

    def put(self, base: Tensor, region: Tensor, symbol: str) -> None:
        """The base takes `region` as those elements (a write spelled `symbol`)."""
        base._assign(self.index, region, symbol)

    def strides(self, base: Tensor, s: Strides) -> Strides:
        """The view's strides from its base's `s` (numpy's, `einad.strides`)."""
        return indexed(base.shape, s, self.index)

    def same(self, index: Any) -> bool:
        """Whether `index` is this view's (``x[i] += v`` writes its view ``x[i]`` back at ``i``)."""
        a, b = self.index, index
        a, b = (a if type(a) is tuple else (a,)), (b if type(b) is tuple else (b,))
        return len(a) == len(b) and all(type(i) is type(j) and i == j for i, j in zip(a, b))


class Layout:
    """How a view holds every element of its base in another layout (numpy's views by
    transpose, reshape, squeeze, expand_dims, a complex part): `look` reads the view from the
    base, `back` lays a value of the view's shape out as the base's (`look`'s inverse);
    `placed` gives the view's strides from the base's, as numpy's view would have them
    (`einad.strides`). Its methods are `Basic`'s."""

    __slots__ = ("back", "look", "placed")

    def __init__(
        self,
        look: Callable[[Tensor], Tensor],
        back: Callable[[Tensor], Tensor],
        placed: Callable[[Strides], Strides],
    ) -> None:
        self.look, self.back, self.placed = look, back, placed

    def put(self, base: Tensor, region: Tensor, symbol: str) -> None:
        base._assign(Ellipsis, self.back(region), symbol)  # every element, as the base lays them out

    def strides(self, base: Tensor, s: Strides) -> Strides:
        return self.placed(s)

    def same(self, index: Any) -> bool:
        return False  # (a write names its place by an index, never by a layout)


def strides_of(t: Any) -> Strides:
    """`t`'s strides, in elements, as numpy would lay out the view `t` is (by indexing, a
    `Layout`, and so on through its base), every Tensor of its own taken to lie in C order."""
    seen = _views.get(id(t))
    if seen is None:
        return c_strides(t.shape)
    _, base, where, _ = seen
    return where.strides(base, strides_of(base))


def viewed_from(t: Any, base: Any) -> bool:
    """Whether `t` is `base` or a view of it (through views of views), sharing its elements."""
    while t is not base:
        seen = _views.get(id(t))
        if seen is None:
            return False
        t = seen[1]
    return True


def contiguous(t: Any) -> bool:
    """Whether `t` lies in C order as far as einad's views tell (`strides_of`): numpy's ravel is
    a view of such an array only."""
    return _views.get(id(t)) is None or is_c_contiguous(t.shape, strides_of(t))


def reshape_strides(t: Any, shape: Shape) -> Strides | None:
    """The strides of numpy's reshape of the view `t` into `shape` where it is a view, else None
    (a Tensor of its own lies in C order: always a view)."""
    if _views.get(id(t)) is None:
        return c_strides(shape)
    return reshaped(t.shape, strides_of(t), shape)


def layout_view(
    t: Tensor,
    base: Any,
    look: Callable[[Tensor], Tensor],
    back: Callable[[Tensor], Tensor],
    strides: Callable[[Strides], Strides],
) -> Tensor:
    """`t`, read from `base` by `look` (every element, laid out anew: a transpose, a reshape),
    made a view of `base` when `base` is a Tensor (`view`): a write into either is a write
    into both, as numpy's. `strides`: the view's strides from the base's (`Layout`)."""
    return view(t, base, Layout(look, back, strides))


_bases: dict[int, set[int]] = {}
"""The ids of each base's live views, by the base's id (a base lives as long as a view of it)."""


def _basic(index: Any, ndim: int) -> bool:
    """Whether `index` into an array of `ndim` axes is numpy's basic indexing (integers, slices
    of integers, None, ...) whose result is a view of the array: not an integer for every axis,
    which numpy answers with a scalar, a copy. (Exact types first: every ``t[i]`` asks.)"""
    items = index if type(index) is tuple else (index,)
    integers = 0
    for i in items:
        kind = type(i)
        if kind is int:
            integers += 1
        elif i is None or i is Ellipsis:
            continue
        elif kind is slice:
            if not (_bound(i.start) and _bound(i.stop) and _bound(i.step)):
                return False
        elif isinstance(i, np.integer):  # (a bool is neither: numpy's mask)
            integers += 1
        else:
            return False
    return integers < ndim or len(items) > integers


def _bound(b: Any) -> bool:
    return b is None or type(b) is int or isinstance(b, np.integer)


class _ViewRef(weakref.ref):  # type: ignore[type-arg]
    """A weak reference to a view that drops the view's entry of `_views` when the view goes."""

    __slots__ = ("key",)
    key: int


def _forget(ref: _ViewRef) -> None:
    entry = _views.pop(ref.key, None)
    if entry is not None:
        kids = _bases.get(id(entry[1]))
        if kids is not None:
            kids.discard(ref.key)
            if not kids:
                del _bases[id(entry[1])]


def view(t: Tensor, base: Any, index: Any) -> Tensor:
    """`t`, read as ``base[index]`` (held as a `Basic`) or by a `Layout` of `base`, made a view of
    `base` where numpy's ``base[index]`` is one (`_basic`; a layout's caller decides): as numpy's
    views, a write into it (``t[i] = v``, ``t += v``, ``t.zero_()``) is a write into `base` too, so
    ``x[0][1] = v``, ``for row in x: row[:] = ...`` and ``x.T[0] = v`` change `x`; and a write
    into `base` changes it (`_refresh`)."""
    if type(base) is not Tensor:
        return t  # (a user's array: einad never writes into it)
    if t is not base and (type(index) is Layout or _basic(index, base.ndim)):
        ref = _ViewRef(t, _forget)
        ref.key = id(t)
        _views[ref.key] = (ref, base, index if type(index) is Layout else Basic(index), base._value)
        kids = _bases.get(id(base))
        if kids is None:
            kids = _bases[id(base)] = set()
        kids.add(ref.key)
    return t


def _refresh(t: Tensor) -> None:
    """`t` took a new value: each live view of it takes its elements (and so on through views of
    views), as numpy's views share the memory a write changed."""
    for key in list(_bases.get(id(t), ())):
        entry = _views.get(key)
        if entry is None:
            continue  # (gone while an earlier one was refreshed)
        ref, _, where, synced = entry
        v = ref()
        if v is not None and synced is not t._value:
            v._rebind(where.look(t))
            _views[key] = (ref, t, where, t._value)


def _assigns_plainly(array: Any, index: Any, value: Any) -> bool:
    """Whether ``array[index] = value`` is numpy's own business: a numpy array written with a
    number or numpy value (a constant Tensor's too) of a kind it holds (complex into a real
    array is einad's TypeError, not numpy's dropped imaginary part), at an index of no Tensors."""
    if type(array) is not np.ndarray:
        return False
    if type(value) is Tensor:
        if value._trace is not None:
            return False
        value = value._value
    if type(value) in (int, float, bool):
        pass
    elif type(value) is np.ndarray or isinstance(value, np.generic):
        if value.dtype.kind == "c" and array.dtype.kind != "c":
            return False
    else:
        return False
    for i in index if type(index) is tuple else (index,):
        if type(i) is Tensor:
            return False
    return True


def _holds(base: Tensor, value: Tensor, index: Any) -> bool:
    """Whether `value` is a view of ``base[index]`` that agrees with `base` as it is now (the
    view ``x[i]`` of ``x[i] += v`` after it wrote itself into `x`)."""
    seen = _views.get(id(value))
    return seen is not None and seen[1] is base and seen[3] is base._value and seen[2].same(index)


def _plain(x: Any) -> Any:
    """`x` (nested tuples, lists, dicts) with each constant Tensor replaced by its array
    (read-only: numpy's in-place functions, ``np.copyto(t, v)``, cannot write into it),
    or None when it holds a traced Tensor (whose derivative numpy would drop)."""
    if type(x) is Tensor:
        return None if x._trace is not None else _read_only(x._value)
    if isinstance(x, (tuple, list)):
        items = [_plain(v) for v in x]
        if any(i is None and v is not None for i, v in zip(items, x)):
            return None
        return type(x)(items) if type(x) in (tuple, list) else items
    if isinstance(x, dict):
        plain = {k: _plain(v) for k, v in x.items()}
        return None if any(plain[k] is None and x[k] is not None for k in x) else plain
    return x


def _unbox_bool(t: Tensor) -> Any:
    return t._value if t._trace is None else t


arrays.own_type(Tensor)  # (it speaks the array API, `einad.array_api`: not another library's array)


def _box(value: Any, trace: Trace | None, node: Node | None, tangent: Any) -> Tensor:
    t = Tensor.__new__(Tensor)
    t._value = value
    t._trace = trace
    t._node = node
    t._tangent = tangent
    t._grad = None
    return t


def box(value: Any, trace: Trace, tangent: Any = None) -> Tensor:
    """Make `value` an input of `trace` (a leaf of a reverse trace, or a primal of a forward one).

    The leaf node and the Tensor are made here without their constructors (every
    transformation call boxes its inputs)."""
    if type(value) is not np.ndarray and type(value) is not Tensor:
        # (a torch tensor's own requires_grad: einad differentiates; torch would record einad's ops,
        # and its results would be torch tensors that require grad, whose .numpy() refuses)
        value = arrays.detached(value)
        if trace.kind == "reverse" and unknown_sizes(getattr(value, "shape", ())):
            raise ValueError(
                f"reverse mode needs the shape of every input it differentiates, and this "
                f"{arrays.library(value)} array's shape {tuple(value.shape)} has unknown sizes: "
                + UNKNOWN_SIZES
            )
    node = None
    if trace.kind == "reverse":
        node = _new(Node)
        node.prim = node.params = node.ans = node.tensor = node.hooks = None
        node.parents, node.vals, node.needed = (), (), []
        node.seq = next(_node_seq)
    t = _new(Tensor)
    t._value, t._trace, t._node, t._tangent, t._grad = value, trace, node, tangent, None
    return t


def alias(t: Tensor) -> Tensor:
    """A new Tensor object standing for `t` in every trace (its value, trace, node and tangent):
    what einad hands the user's code it runs inside a rule (a custom function's body, its rules'
    arguments, residuals and cotangents), so that an assignment there (``x[i] = v`` rebinds the
    object assigned into, `Tensor._rebind`) never reaches an object einad keeps: a box's value,
    a node's operands, a saved residual."""
    a = _box(t._value, t._trace, t._node, t._tangent)
    if t._trace is not None:
        t._trace.rebinding(a, t)  # (a staging trace names `a` as `t`)
    return a


def strip(x: Any) -> Any:
    """The plain value of `x` with every trace removed (a constant)."""
    while type(x) is Tensor:
        x = x._value
    return x


def mapped(x: Any) -> bool:
    """Whether a layer of `x` is a vmap's: its plain value then holds the whole batch."""
    while type(x) is Tensor:
        if x._trace is not None and x._trace.batched:
            return True
        x = x._value
    return False


def as_array(data: ArrayLike, dtype: DTypeLike | None = None, copy: bool = False) -> Array:
    """Convert user data to a numeric numpy array (a new one with `copy`), or raise TypeError
    (TracerError for a value mapped by vmap: one array cannot stand for each example's)."""
    if type(data) is Tensor:
        if mapped(data):
            raise TracerError(
                "a value mapped by vmap was converted to a constant array (ea.tensor): each "
                "example has its own value. Use the value itself (it is already a Tensor), or "
                "ea.stop_gradient(x) for its value without its derivative"
            )
        if data._trace is not None and data._trace is not IMPERATIVE and not data._trace.dead:
            raise TracerError(
                "a value traced by a transformation (grad, jvp, jit, ...) was converted to a "
                "constant array (ea.tensor), which would cut its derivative or freeze its value "
                "silently. Use the value itself (it is already a Tensor), or ea.stop_gradient(x) "
                "for its value without its derivative"
            )
        data = strip(data)
    arr: Any
    if arrays.is_array(data) and not arrays.is_numpy(data):
        data = arrays.detached(data)  # a torch tensor's own requires_grad: einad's tensor(..) decides
        xp = arrays.xp_of(data)
        arr = data if dtype is None else xp.astype(data, arrays.lib_dtype(xp, dtype))
        arr = xp.asarray(arr, copy=True) if copy else arr
    else:
        try:
            arr = np.array(data, dtype=dtype) if copy else np.asarray(data, dtype=dtype)
        except TracerError:
            if not isinstance(data, (list, tuple)):
                raise
            raise TracerError(
                "a list holding traced Tensors was given where an array goes, and einad does not "
                "make it an array implicitly (numpy would drop their derivatives): stack them with "
                "ea.stack([...]) or ea.asarray([...]), which are differentiable"
            ) from None
    if np_dtype(arr.dtype).kind not in "biufc":
        raise TypeError(f"einad works on numeric arrays; got {type(data).__name__} with dtype {arr.dtype}")
    out: Array = arr  # an array of numpy or of another library (typed as numpy's)
    return out


def traced(x: Any) -> bool:
    """Whether `x` is a Tensor of a transformation (not a constant, not of the imperative graph).

    The differentiating transformations take the other Tensors as their values:
    they return plain arrays at top level even for inputs that require grad.
    Inside ``backward(create_graph=True)`` (`recording_backward`) the imperative
    graph's Tensors count as traced, so that a rule which calls a transformation
    (`checkpoint`'s VJP runs `vjp`) stays differentiable in them.
    """
    if type(x) is not Tensor or x._trace is None:
        return False
    return x._trace is not IMPERATIVE or getattr(_local, "recording_backward", 0) > 0


@contextmanager
def recording_backward() -> Iterator[None]:
    """The context of ``backward(create_graph=True)`` on this thread (see `traced`)."""
    _local.recording_backward = getattr(_local, "recording_backward", 0) + 1
    try:
        yield
    finally:
        _local.recording_backward -= 1


def check_cotangent(ct_dtype: np.dtype[Any], out_dtype: np.dtype[Any]) -> None:
    """A complex cotangent for a real output is a TypeError: its imaginary part has no meaning there."""
    if ct_dtype.kind == "c" and out_dtype.kind != "c":
        raise TypeError(
            f"a complex cotangent (dtype {ct_dtype}) for a real output (dtype {out_dtype}): "
            "pass a real cotangent, or make the output complex"
        )


def value_of(x: Any, trace: Trace) -> Any:
    """Unbox `x` if it belongs to `trace`, else return it unchanged."""
    if type(x) is Tensor and x._trace is trace:
        return x._value
    return x
