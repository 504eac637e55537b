"""A whole contraction tree planned once: its forward and its gradient sweep.

A contraction of three or more operands differentiated in first-order reverse mode
is one node (`einsum.sliced_einsum_p` with no slices; which contractions, see
`einsum.contract`). Its value, its one-pass value-and-gradient and its VJP run here, from
a `TreePlan` made on first use per subscripts, shapes, path and differentiated operands
(`tree_plan`, cached). A forward alone (no operand differentiated) runs eager einsum's
pairwise steps instead (`forward_plan`), on the same buffers and programs: through this
tree's layouts, chosen for the sweep too, it was measured 17-41% slower on contractions of
large bonds.

* **Layouts.** Every intermediate's axis order is chosen from the result down: each
  product asks for its operands in the layout it reads as it lies, and the product
  that makes an intermediate grants the first layout asked that its matrix product
  writes as it lies (`_choose_layouts`). A pullback writes a cotangent in the order
  the next pullbacks read, or the operand's own. `TreePlan.copies` counts the copies
  that remain, forward and sweep, from each value's order in memory; the chosen layouts
  are kept only where they copy less than letters in order of appearance.
* **Copies made once.** Where no layout serves both the step that writes a value and the
  step that reads it (on a network's large intermediates, usually: the two steps group
  its letters differently), the value is laid out once, where it is made (an input:
  before the forward), in the order its reader takes, and the sweep, which reads it
  again in the same groups, reads that copy. A cotangent that its step's two pullbacks
  would each copy is laid out once, as the forward wrote its value, when that costs
  less. On cotengra's random regular networks this halves the sweep's copies.
* **Steps.** Every forward product and every pullback has its `executor._PairPlan`
  made with the plan (`_Pair`): at run time a step is a tuple lookup and one call, one
  ``numpy.dot`` (``numpy.matmul`` with batch letters) on views where the layouts allow,
  with no tracing and no plan lookup; whether an operand is a view is decided once per
  layout it comes in. A copy that remains goes through `_copy_into`: where numpy's
  strided copy would run inner loops of two elements (networks of bond 2), it is one
  ``numpy.take`` through an index made once (2-4 times faster; ``mode="clip"``, since
  take's default mode copies through a temporary as large as its result).
* **Buffers.** Intermediates, copies and cotangents are written (``out=``) into buffers
  of a pool the plan keeps between calls (`_Pool`): a value's buffer serves a later step
  once the value is let go, and the next call finds the buffers mapped and touched. A
  fresh large array is a fresh mapping whose every page faults on first touch: on
  benchmark n1 1,100 faults per forward and 1,700 per value-and-gradient, a third to a
  half of the forward's time. A pooled plan's arrays below `POOL_MIN`, a plan's without a
  pool from `FRESH_RECYCLE`, and the other large arrays made afresh at every call that die
  within it (a scalar contraction's packed value and gradients, `einsum_vg`; a compiled
  kernel's outputs under ``ea.jit``) take memory that `memory.recycled` keeps once nothing
  refers to it: glibc's malloc gives such memory back to the system between calls, and
  benchmark m1 faulted 1,600 pages a call (recycled, none: its jitted value-and-gradient 9.7
  ms instead of 12.6 on two threads).
  The value and gradients returned are arrays of their own: a gradient is written straight
  into the caller's array where its product writes it in the operand's order
  (`Pullback.direct`), else copied there once, transposed (`Pullback.turn`).
* **The sweep** pulls the cotangent back from the result to every differentiated
  operand through the forward's kept intermediates, one pairwise product per step
  and operand: all N gradients for about twice the forward's work (the bound for
  all environments of a tree). Each value is let go as soon as its last pullback
  has read it (`Pullback.release`), and a step pulls back to its smaller operand
  first, so that the larger operand is gone before its cotangent, as large, is
  made (and that cotangent takes its buffer). A scalar contraction's value and gradients take one call
  (`value_and_grad`).
* **The program.** Walking the steps costs a few microseconds of Python per step (look-ups,
  layout checks, buffers asked for), more than the matrix products of a bond-2 network's
  tiny steps. So a scalar contraction's value-and-gradient runs as a `_Program`, made on
  its first call per operand dtypes: every step's decisions taken once (`_Pair.emit`) on
  buffers of the program's own, and bound into a list of numpy calls on fixed views
  (``a.dot(b, out)``, ``numpy.matmul``, a copy or a gather), which a call runs in turn after
  copying the operands into its input buffers; the value and gradients are then copied
  out, so nothing returned is the program's memory. Its buffers are a pool's: kept under
  `POOL_BUDGET`, retired by `release_pools`. Plans of large operands (over
  `PROGRAM_INPUTS` elements, where the copies in and out would cost more than the steps'
  Python), plans whose values together are too large to keep between calls
  (`PROGRAM_VALUES`) and gradients on a diagonal walk the steps (`PROGRAMS` turns programs
  off). A forward alone (`forward_plan`) runs as a program on the same terms, and only from
  `PROGRAM_STEPS` steps on (`value`).

* **Other libraries** (torch, CuPy, JAX, array-api-strict; not dask's blocks, whose steps stay
  pairwise nodes): the same plan runs with the standard's operations (`lib_forward`,
  `lib_sweep`): each product as its `_PairPlan` lays it out, ``permute_dims`` and ``reshape``
  (a view where the library's strides allow, else its copy) around one ``matmul``, and each
  value laid out once (`_LayOut.lib`) where the plan says, so the layouts chosen for numpy save
  torch's and CuPy's copies too (each pairwise step its own node copied an operand about every
  other step, and the reverse pass copied again). No buffers or programs: the library allocates.
  On the benchmark's networks n1-n4 and m1 with torch, the value-and-gradient takes 0.68-0.78
  of the pairwise nodes' time (alternating in one process).

Everything else here is numpy's. This module sits below `rules.einsum` and imports only the
arrays' helpers, the executor and the subscripts.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, cast

import numpy as np

from . import kernels, memory
from .aliases import Array, Path, Shape
from .arrays import writes_in_place
from .executor import (
    _expression,
    _LibPlan,
    _pair_plan,
    _PairPlan,
    _prefix,
    lib_product,
    loop_head,
    merges_without_copy,
    outer_operands,
    presum,
    spread,
    step,
)
from .subscripts import numpy_subscripts, pairwise_steps, unique

Run = Callable[..., Any]
"""A planned product: takes its operands' arrays, returns the result."""


@dataclass(frozen=True)
class Product:
    """One planned product: ``run(*values[args])`` is the value `result` (ids: operands
    ``0..n-1``, then step t's result ``n + t``)."""

    args: tuple[int, ...]
    result: int
    run: Run
    copies: int


@dataclass(frozen=True)
class Pullback:
    """The cotangent of value `target` read off step `step`: ``run(*values[args])``, where
    the id `_COTANGENT` stands for the step's cotangent. An operand's is then put in its own
    layout by `spread` ``(src, dst, shape)`` (a transpose, or a broadcast over the letters only
    it has, or a diagonal for a repeated letter) when its letters differ from ``src``."""

    step: int
    target: int
    args: tuple[int, ...]
    run: Run
    spread: tuple[str, str, Shape] | None
    copies: int
    turn: tuple[int, ...] | None = None
    """Where `spread` is a transpose only (the same letters, none repeated): its axes, read as
    ``r.transpose(turn)`` (numpy's copy into the gradient, without `spread`'s look-ups)."""
    direct: bool = False
    """Whether `run` takes the operand's gradient as ``dest=`` (`_Pair`), to write it in place
    (an operand's gradient that needs no `spread`)."""
    release: tuple[int, ...] = ()
    """The values the sweep lets go once this pullback is done: the step's operands that no
    later pullback of the step reads, and (`_COTANGENT`) the step's cotangent after its last."""
    ct_copy: str | None = None
    """The memory order `run` copies the step's cotangent into (None: it reads it as it lies):
    a layout the planner may give the cotangent once, for all the step's pullbacks."""


@dataclass(frozen=True)
class TreePlan:
    """The forward products and the pullbacks of one contraction tree, planned once.

    `forward` runs in order; `backward` lists, last step first, the pullbacks of the
    values a differentiated operand depends on. `kept` are the intermediates the
    pullbacks read (the forward keeps them), each let go by the sweep right after its last
    reader (`Pullback.release`). `copies` counts the transposing copies of one
    forward and one sweep (see `_copies`).
    """

    n: int
    wrt: tuple[int, ...]
    forward: tuple[Product, ...]
    backward: tuple[Pullback, ...]
    kept: frozenset[int]
    pooled: bool = True
    """Whether every step writes a fresh array (no step may return a view of its operand), so
    that a value's buffer can be handed to a later step once the value is let go, and some
    buffer is as large as `POOL_MIN` (a plan of small arrays only pays for the bookkeeping)."""
    pools: list[_Pool] = field(default_factory=list, compare=False, hash=False, repr=False)
    """The buffers of earlier calls, handed to the next (see `_Pool`)."""
    programmable: bool = False
    """Whether `value_and_grad` runs as a `_Program` (every step a pair product or a copy, no
    gradient on a diagonal of repeated letters, the inputs under `PROGRAM_INPUTS` elements)."""
    programs: list[_Program] = field(default_factory=list, compare=False, hash=False, repr=False)
    """The programs of earlier calls (each with its buffers), handed to the next."""
    shapes: tuple[Shape, ...] | None = None
    """The operands' shapes without the letters of size 1 everywhere, which the plan drops
    (`_drop_ones`); None where it drops none. The public functions view the operands, the
    cotangent and the gradients so (reshapes), and the value back in `out_shape`."""
    out_shape: Shape = ()

    @property
    def held(self) -> int:
        """The bytes of the buffers the plan keeps for its next calls (`pools`): memory a call
        finds allocated, which a per-call measure of allocations (tracemalloc) does not see."""
        return sum(pool.held for pool in list(self.pools)) + sum(p.pool.held for p in list(self.programs))

    @property
    def copies(self) -> int:
        """The elements one forward and one sweep copy into their matrix products' operands, as
        planned (a product left to numpy.einsum's loop counts as copying both operands)."""
        return sum(p.copies for p in self.forward) + sum(p.copies for p in self.backward)


# -- planning --------------------------------------------------------------------------------


def _copies(
    plan: _PairPlan, specs: tuple[str, str], memory: tuple[str, str], so: str, size: dict[str, int]
) -> tuple[int, str, tuple[str | None, str | None]]:
    """The elements a pair plan copies, given the order its operands lie in memory (`memory`:
    their letters, outermost first); the order its result lies in; and for each operand
    that the product copies, the order it copies it into (None for one read as it lies).

    A matrix product reads an operand as a view when each group of its letters (batch, kept,
    contracted) is contiguous in memory, whatever the groups' order (`merges_without_copy`),
    and writes its result in the order batch, left, right (then viewed in `so`'s order); a
    broadcast multiply or a one-pass einsum copies nothing."""
    sa, sb = specs
    ma, mb = memory
    contiguous = ma == sa and mb == sb
    if plan.outer:
        return 0, so, (None, None)
    if not plan.gemm or (plan.matvec and not contiguous):
        # numpy.einsum lays its result out as its operands lie (order="K"): the larger's order.
        # It copies nothing, but its loop is far slower than a copy and BLAS: counted as the
        # copies of both operands, so that a layout never trades a copy for it
        larger = ma if _volume(ma, size) >= _volume(mb, size) else mb
        rank = {c: i for i, c in enumerate(larger)}
        return (
            _volume(sa, size) + _volume(sb, size),
            "".join(sorted(so, key=lambda c: rank.get(c, len(rank)))),
            (None, None),
        )
    if plan.swap:
        sa, sb, ma, mb = sb, sa, mb, ma
    ra = "".join([c for c in unique(sa) if c in sb or c in so])
    rb = "".join([c for c in unique(sb) if c in sa or c in so])
    copied = 0
    reads: list[str | None] = []
    for spec, kept, mem, perm, groups in (
        (sa, ra, ma, plan.perm_a, list(plan.groups_a)),
        (sb, rb, mb, plan.perm_b, list(plan.groups_b)),
    ):
        fresh = kept != spec  # summed or diagonalized first: a fresh array
        mem = kept if fresh else mem
        strides = _strides(mem, size)
        read = "".join([kept[i] for i in perm])
        if merges_without_copy(strides, size, list(read), groups):
            reads.append(None)
        else:
            copied += _volume(kept, size)
            reads.append(None if fresh else read)
    written = [""] * len(so)
    for i, j in enumerate(plan.perm_out):
        written[j] = so[i]
    if plan.swap:
        reads.reverse()
    return copied, "".join(written), (reads[0], reads[1])


Planned = tuple[Run, tuple[int, ...], int, str, tuple[str | None, ...]]
"""A planned product (`_product`'s)."""


def _strides(mem: str, size: dict[str, int]) -> dict[str, int]:
    """Each letter's stride, in elements, in a C-contiguous array whose letters lie as `mem`."""
    strides, step = {}, 1
    for c in reversed(mem):
        strides[c] = step
        step *= size[c]
    return strides


def _product(
    specs: Sequence[str],
    out: str,
    shapes: Sequence[Shape],
    memory: Sequence[str],
    looped: bool = False,
    memo: dict[Any, Planned] | None = None,
) -> Planned:
    """A planned product of `specs` (lying in memory in the orders `memory`) to `out`: the
    function, the order it takes the operands in (positions into `specs`), the elements it
    copies, the order its result lies in, and for each operand (as in `specs`) the order it
    is copied into, or None (read as it lies). A pair keeps the larger operand's order; with
    `looped`, it may loop over letters one operand has to write `out` as it lies; with
    `SUMMED_AS_LYING`, it sums its letters in the order an operand lies in where that copies
    less.

    A pair's plan is kept in `memo` (one planning's: `tree_plan`'s four plans of a tree share
    most of their products, and a looped plan all those whose pair cannot loop)."""
    if len(specs) == 2:
        if memo is None:
            return _pair_product(specs, out, shapes, memory, looped)
        key = (*specs, out, *shapes, *memory, looped)
        planned = memo.get(key)
        if planned is None:
            if looped and not _loops(specs, out, shapes):
                planned = _product(specs, out, shapes, memory, False, memo)
            else:
                planned = _pair_product(specs, out, shapes, memory, looped)
            memo[key] = planned
        return planned
    order = tuple(range(len(specs)))
    none = (None,) * len(specs)
    if len(specs) == 1:
        run = functools.partial(np.einsum, numpy_subscripts(f"{specs[0]}->{out}"))
        return _Unpooled(run, tuple(specs), out), order, 0, out, none
    text = ",".join(specs) + "->" + out  # an explicit path's N-operand step
    return _Unpooled(_expression(text, tuple(shapes), "auto", None), tuple(specs), out), order, 0, out, none


def _kept_first(specs: Sequence[str], shapes: Sequence[Shape]) -> int:
    """Which operand of a pair a product keeps the order of (`_pair_plan`'s first): the larger,
    or the first where a letter is broadcast (`_pair_plan` takes a letter's size from its second
    operand: a label broadcast from size 1 keeps the order it was written in)."""
    da, db = dict(zip(specs[0], shapes[0])), dict(zip(specs[1], shapes[1]))
    broadcast = any(db[c] != d for c, d in da.items() if c in db)
    return 0 if broadcast or math.prod(shapes[0]) >= math.prod(shapes[1]) else 1


def _loops(specs: Sequence[str], out: str, shapes: Sequence[Shape]) -> bool:
    """Whether a pair's product may loop over letters one operand has (`_pair_plan`'s
    `prefix`, `loop_head`): where it may not, its looped plans are its plain ones. (Whether it
    may does not depend on the order the product sums its letters in.)"""
    a = _kept_first(specs, shapes)
    return loop_head(specs[a], specs[1 - a], out, shapes[a], shapes[1 - a]) is not None


def _pair_product(
    specs: Sequence[str], out: str, shapes: Sequence[Shape], memory: Sequence[str], looped: bool
) -> Planned:
    """`_product` of a pair."""
    a = _kept_first(specs, shapes)
    b = 1 - a
    size = dict(zip(specs[a], shapes[a])) | dict(zip(specs[b], shapes[b]))
    summed = set(specs[a]) & set(specs[b]) - set(out)
    best: tuple[_PairPlan, int, str, tuple[str | None, str | None]] | None = None
    # the summed letters in the first operand's letter order (`_pair_plan`'s own), else in
    # the order either operand lies in, whichever copies least; each order planned once
    own = "".join(c for c in unique(specs[a]) if c in summed)
    lying = [memory[x] for x in (a, b)] if SUMMED_AS_LYING else []
    for letters in dict.fromkeys([own, *("".join(c for c in m if c in summed) for m in lying)]):
        summed_order = None if letters == own else letters
        plan = _pair_plan(specs[a], specs[b], out, shapes[a], shapes[b], looped, summed_order)
        copied, written, reads = _copies(plan, (specs[a], specs[b]), (memory[a], memory[b]), out, size)
        if best is None or copied < best[1]:
            best = (plan, copied, written, reads)
        if not copied:
            break
    assert best is not None
    plan, copied, written, reads = best
    return _Pair(plan), (a, b), copied, written, reads if a == 0 else reads[::-1]


class _Unpooled:
    """A step that allocates its own result (numpy.einsum's, opt_einsum's: possibly a view of
    an operand, so that a plan with one is not `TreePlan.pooled`): ``ins -> out``."""

    __slots__ = ("ins", "out", "run")

    def __init__(self, run: Run, ins: tuple[str, ...], out: str) -> None:
        self.run, self.ins, self.out = run, ins, out

    def __call__(self, pool: Any, *xs: Any) -> Any:
        return self.run(*xs)

    def lib(self, xp: ModuleType, *xs: Any) -> Any:
        """The step on arrays of another library (`xp`): its einsum, or the standard's."""
        return step(xp, self.ins, self.out, list(xs))


class _Then:
    """`run`'s result laid out by `lay` (a `_LayOut`); the result as `run` wrote it is let go at
    once."""

    __slots__ = ("lay", "run")

    def __init__(self, run: Any, lay: _LayOut) -> None:
        self.run: Any = run  # a `_Pair` or a `_Then`
        self.lay = lay

    def __call__(self, pool: Any, *xs: Any) -> Any:
        r = self.run(pool, *xs)
        y = self.lay(pool, r)
        pool.put(r)
        return y

    def emit(self, build: _Builder, *xs: Any) -> Any:
        """What `__call__` does, bound into `build`'s program (see `_Builder`)."""
        r = self.run.emit(build, *xs)
        y = self.lay.emit(build, r)
        build.pool.put(r)
        return y

    def lib(self, xp: ModuleType, *xs: Any) -> Any:
        return self.lay.lib(xp, self.run.lib(xp, *xs))


class _LayOut:
    """The copy of a value indexed by `spec` that lies in memory in the order `order` (its
    axes still in `spec`'s order), always in a buffer of its own."""

    __slots__ = ("back", "perm")

    def __init__(self, spec: str, order: str) -> None:
        self.perm = tuple(spec.index(c) for c in order)
        self.back = tuple(self.perm.index(i) for i in range(len(self.perm)))

    def __call__(self, pool: Any, x: Any) -> Any:
        view = x.transpose(self.perm)
        out = pool.get(view.shape, x.dtype)
        _copy_into(out, view)
        return out.transpose(self.back)

    def emit(self, build: _Builder, x: Any) -> Any:
        view = x.transpose(self.perm)
        out = build.pool.get(view.shape, x.dtype)
        build.copy(out, view)
        return out.transpose(self.back)

    def lib(self, xp: ModuleType, x: Any) -> Any:
        """The copy on another library's array, where its arrays are strided views (torch's,
        CuPy's: a reshape of a transposed view copies it in that order); elsewhere `x` itself
        (JAX's arrays have no layout to choose, every transpose is a copy)."""
        if not writes_in_place(x):
            return x
        view = xp.permute_dims(x, self.perm)
        out = xp.reshape(xp.reshape(view, (-1,)), tuple(view.shape))
        return xp.permute_dims(out, self.back)


# -- running: buffers, copies and matrix products ------------------------------------------------

POOL_MIN = 32768
"""Elements from which a step's buffer comes from the pool of the call (`_Pool`): an array
of 256 KiB or more (float64) is a fresh mapping from the system allocator, whose every page
faults on first touch (on a 2^18-element intermediate about 0.1 ms; 1,100 faults per forward
of benchmark n1, a third of its time). Smaller ones are `memory.recycled`'s (from 128 KiB, memory
kept between calls once nothing refers to it; below, malloc's): pooled, they took benchmark
m1's first-call peak from 12.1 to 15.7 MiB, recycled to 12.6."""


class _Pool:
    """The scratch buffers of one call of a plan: a buffer let go (`put`) serves the next step
    that asks for as many bytes, or up to half as many (`get`), and the buffers outlive the call in the plan's
    `TreePlan.pools`, so that the next call finds them touched and mapped, as a compiled
    program's preassigned buffers are. Only intermediates are taken from it: the value and
    the gradients a call returns are arrays of their own. `fresh` counts the buffers made."""

    __slots__ = ("__weakref__", "bound", "free", "fresh", "generation", "held", "least", "owned", "waiting")

    def __init__(self, least: int | None = None) -> None:
        self.waiting = False  # whether it waits in its plan for the next call
        self.free: dict[int, list[Any]] = {}
        self.owned: dict[int, Any] = {}  # id -> the buffer: kept alive, so no id is ever reused
        self.fresh = 0
        self.held = 0  # the bytes of the buffers in `owned`
        self.least = least  # the fewest elements a pooled buffer holds (None: `POOL_MIN`)
        self.generation = 0  # how many times `release` let the buffers go
        self.bound: list[list[Any]] = []  # a `_Program`'s lists of views of the buffers
        _POOLS.add(self)

    def get(self, shape: Shape, dtype: Any) -> Any:
        size = math.prod(shape)
        dtype = np.dtype(dtype)
        least = POOL_MIN if self.least is None else self.least
        nbytes = size * dtype.itemsize
        if size < least or dtype.hasobject:  # (an array of objects is no view of bytes)
            if nbytes < memory.RECYCLE_MIN:  # (no Python call more for the many small ones)
                return np.empty(shape, dtype)
            return memory.recycled(shape, dtype)  # (a large one's memory kept: `memory`)
        raw = self._fit(nbytes)
        if raw is None:
            raw = np.empty(nbytes, np.uint8)
            self.owned[id(raw)] = raw
            self.fresh += 1
            self.held += nbytes
        return raw[:nbytes].view(dtype).reshape(shape)

    def _fit(self, nbytes: int) -> Any:
        """A free buffer of `nbytes`, or else the smallest free one up to twice as large."""
        stack = self.free.get(nbytes)
        if stack:
            return stack.pop()
        best = 0
        for have, stack in self.free.items():
            if stack and nbytes < have <= 2 * nbytes and (not best or have < best):
                best = have
        return self.free[best].pop() if best else None

    def release(self) -> None:
        """Let every buffer go (one in use stays with its value, and is not taken back); a
        `_Program` bound to the buffers is no longer run."""
        self.free.clear()
        self.owned.clear()
        self.held = 0
        self.generation += 1
        for views in self.bound:  # (a program's views hold its buffers alive)
            views.clear()

    def settle(self) -> None:
        """Keep only the free buffers: those still in use, or never let go, are no longer the
        pool's (a loop's pool between two rounds, whose values are all gone by then: a buffer
        a round did not give back is not held on to for the rounds after it)."""
        self.owned = {id(raw): raw for stack in self.free.values() for raw in stack}
        self.held = sum(int(raw.nbytes) for raw in self.owned.values())

    def put(self, x: Any) -> None:
        """Let go of `x` (a value no step reads any more): its buffer, if the pool made it,
        serves a later step."""
        base: Any = x
        while isinstance(base.base, np.ndarray):  # (an unpickled array's base is its bytes)
            base = base.base
        raw = self.owned.get(id(base))
        if raw is not None and raw is base:
            self.free.setdefault(int(raw.nbytes), []).append(raw)


_POOLS: weakref.WeakSet[_Pool] = weakref.WeakSet()


def pooled_bytes() -> int:
    """The bytes of every plan's pooled buffers and of the recycled arrays (`memory`):
    memory a call finds allocated by an earlier call, which a measure of the call's own
    allocations (tracemalloc) does not see."""
    return sum(pool.held for pool in list(_POOLS)) + memory.held()


def release_pools() -> None:
    """Let go of every plan's pooled buffers and of the recycled arrays: the next call of each
    plan makes its own again (to measure a call's memory from nothing, or to give the memory
    back)."""
    for pool in list(_POOLS):
        pool.release()
    memory.release()


class _Fresh:
    """No pool: every buffer is a new array, and nothing is let go early (a value that leaves
    the call, or a plan whose steps may return views)."""

    __slots__ = ()

    @staticmethod
    def get(shape: Shape, dtype: Any) -> Any:
        if math.prod(shape) * np.dtype(dtype).itemsize < FRESH_RECYCLE:
            return np.empty(shape, dtype)
        return memory.recycled(shape, dtype)  # (a large one's memory kept: `memory`)

    @staticmethod
    def put(x: Any) -> None:
        pass


_FRESH = _Fresh()

FRESH_RECYCLE = 1 << 19
"""The fewest bytes of an array without a pool (`_Fresh`) whose memory is recycled (512 KiB).
Recycled, benchmark case 3's eager value-and-gradient (a non-scalar tree's sweep on arrays of
1 MiB) and m2's jitted one (quimb's short einsums) stopped faulting 1,500 and 1,400 pages a
call: 7.7 -> 5.0 ms and 16.0 -> 13.3 ms (one thread, alternating in one process). From 128 KiB,
m2 kept dead buffers of 128-256 KiB that other sizes could not take, its first-call peak 11.6 ->
14.4 MiB; from 512 KiB, 13.9 (manual's 12.3)."""


POOL_BUDGET = 64 << 20
"""The bytes of buffers all plans together keep between calls. A call whose pool would take
the total above it lets its buffers go when it ends (it still reuses them within the call):
a large contraction, eager or jitted, holds no memory once it has returned, and only small,
repeated programs (where the page faults cost most) keep theirs."""


def _checkout(plan: TreePlan) -> Any:
    if not plan.pooled:
        return _FRESH
    try:
        pool = plan.pools.pop()
    except IndexError:
        return _Pool()
    pool.waiting = False
    return pool


def _checkin(plan: TreePlan, pool: Any) -> None:
    if pool is _FRESH:
        return
    kept = sum([p.held for p in list(_POOLS) if p.waiting])  # (a pool dropped with its plan is gone)
    if kept + pool.held <= POOL_BUDGET:
        pool.waiting = True
        plan.pools.append(pool)
    else:
        pool.release()


GATHER_RUN = 4
"""A transposing copy whose innermost loop (the trailing axes of the source that merge) is
shorter than this (elements) is a `numpy.take` through a precomputed index: numpy's strided
copy of a network of bond 2 spends its time in inner loops of two elements (0.5-1 ms for 2^18
elements, 2-4 times take's); from loops of four on, the strided copy is as fast or faster."""
GATHER_MAX = 1 << 22
"""The largest copy done by `numpy.take` (its index: 8 bytes an element, kept per layout)."""


COMPILED_COPIES = True
"""Whether copies run as compiled loops (`kernels.copy_kernel`, in tiles where they transpose)
where llvmlite is installed (the ``fast`` extra), instead of numpy's copy or gather: a
program's copies of `kernels.COPY_MIN` elements or more, a walked step's of `WALKED_COPY_MIN`."""


def compiled_copy(out: Any, view: Any) -> tuple[Callable[..., Any], tuple[Any, Any]] | None:
    """``out[...] = view`` as a compiled copy's call, ``(kernel, (source, destination))`` on
    views of the two in the kernel's loop order; None where numpy's copy serves as well (a short
    copy, a long contiguous run), or where llvmlite is missing or `COMPILED_COPIES` is off."""
    call = _copy_call(out, view)
    return None if call is None else (kernels.copy_kernel(*call[0]), call[1])


def _copy_call(out: Any, view: Any) -> tuple[tuple[int, int, int], tuple[Any, Any]] | None:
    """`compiled_copy`'s kernel, as `kernels.copy_kernels`' key, and its views; not compiled."""
    if not COMPILED_COPIES or view.size < kernels.COPY_MIN or kernels.unavailable() is not None:
        return None
    if view.dtype != out.dtype or not out.flags.c_contiguous or out.size != view.size:
        return None
    views = kernels.copy_views(out.reshape(view.shape), view)
    if views is None:
        return None
    last = views[0].shape[-1]
    inner = last if last <= kernels.COPY_UNROLLED else 0
    rank = kernels.copy_rank(views[0].ndim)
    if rank > views[0].ndim:  # (leading axes of size 1, looped over once: views still)
        views = tuple(v.reshape((1,) * (rank - v.ndim) + v.shape) for v in views)
    return (rank, view.itemsize, inner), views


def _copy_into(out: Any, view: Any) -> None:
    """Copy `view` (a transposed view of a dense array) into the C-contiguous `out`: a large
    one as a compiled copy (`compiled_copy`, its views made at each call: `WALKED_COPY_MIN`)."""
    if view.size >= WALKED_COPY_MIN:
        compiled = compiled_copy(out, view)
        if compiled is not None:
            compiled[0](*compiled[1])
            return
    index = _gather_index(view.shape, view.strides, view.itemsize) if view.size >= 256 else None
    if index is None:
        np.copyto(out, view)
    else:
        np.take(np.ravel(view, order="K"), index, out=out.reshape(-1), mode="clip")


WALKED_COPY_MIN = 1 << 13
"""The fewest elements a walked step's copy (`_copy_into`) runs compiled from: making the
kernel's views costs about 2 µs a call (the loop order planned once per layout), which copies
of 2^13 elements or more repay (benchmark case 10's slices: copies in runs of 7 and 8
elements, 10.6 -> 7.6 ms and 14.0 -> 9.1 ms each, two fifths of a slice's time being copies)."""


GATHER_BUDGET = 64 << 20
"""The bytes of gather indices kept (`_GATHERS`, the oldest dropped first): an index takes 8
bytes an element, as much as the float64 value it lays out."""

_GATHERS: dict[tuple[Shape, tuple[int, ...], int], Any] = {}
_GATHER_LOCK = threading.Lock()


def _gather_index(shape: Shape, strides: tuple[int, ...], itemsize: int) -> Any:
    """`_make_gather_index`, kept while `GATHER_BUDGET` allows."""
    key = (shape, strides, itemsize)
    try:
        return _GATHERS[key]
    except KeyError:
        pass
    index = _make_gather_index(shape, strides, itemsize)
    with _GATHER_LOCK:  # (threads sharing a plan: one of them trims at a time)
        if index is not None:
            held = sum(i.nbytes for i in _GATHERS.values() if i is not None)
            while _GATHERS and held + index.nbytes > GATHER_BUDGET:
                dropped = _GATHERS.pop(next(iter(_GATHERS)))
                held -= 0 if dropped is None else dropped.nbytes
        if len(_GATHERS) >= 4096:  # the layouts of many plans: the oldest go
            del _GATHERS[next(iter(_GATHERS))]
        _GATHERS[key] = index
    return index


def _make_gather_index(shape: Shape, strides: tuple[int, ...], itemsize: int) -> Any:
    """The flat positions, in memory order, of a dense array seen through `strides`, read in C
    order: the index of `_copy_into`'s gather; None where a strided copy is as fast (a long
    contiguous inner run), or the array is not dense, or too large."""
    size = math.prod(shape)
    if size > GATHER_MAX or any(s <= 0 for s, d in zip(strides, shape) if d > 1):
        return None
    run, step = 1, None  # the innermost loop numpy's copy would run: the trailing axes that merge
    for d, s in zip(reversed(shape), reversed(strides)):
        if d == 1:
            continue
        if step is not None and s != step:
            break
        run, step = run * d, s * d
    if run >= GATHER_RUN:
        return None
    expect = itemsize  # dense: the strides, smallest first, step through memory without a gap
    for s, d in sorted((s, d) for s, d in zip(strides, shape) if d > 1):
        if s != expect:
            return None
        expect *= d
    index = np.zeros((), np.intp)
    for d, s in zip(shape, strides):
        index = index[..., None] + np.arange(d, dtype=np.intp) * (s // itemsize)
    return index.reshape(-1)


class _Pair:
    """A planned pairwise product (`executor._PairPlan`) that writes into its call's buffers:
    each operand as a view where its letter groups allow, else copied once into a buffer
    (`_copy_into`); one ``numpy.dot`` (``numpy.matmul`` with batch letters, or for a matrix
    of spaced rows, a slice's, which numpy.dot would copy) into a buffer; the result viewed in
    the output's order. Whether an operand is a view, and which product, is decided once per
    layout of the operands it meets (`seen`, keyed by their strides)."""

    __slots__ = ("identity", "libs", "mm_shape", "out_shape", "plan", "seen")

    def __init__(self, plan: _PairPlan) -> None:
        self.plan = plan
        self.out_shape = tuple(plan.dims[i] for i in plan.perm_out)
        self.mm_shape = plan.mm_shape
        self.identity = plan.perm_out == tuple(range(len(plan.perm_out)))
        self.seen: dict[tuple[Any, ...], tuple[bool, bool, bool | None]] = {}
        self.libs: _LibSteps | None = None  # (`lib`'s, made on its first call)

    def lib(self, xp: ModuleType, a: Any, b: Any) -> Any:
        """The product on arrays of another library (`xp`), as the plan lays it out: the
        standard's ``permute_dims`` and ``reshape`` (a view where the strides allow, else a
        copy: the library decides, as numpy's reshape) around one ``matmul``, or a broadcast
        multiply; letters only one operand has summed first (`executor.step`). Every product
        is a matrix product here: no library but numpy gets `_loop_pair`'s one pass."""
        libs = self.libs
        if libs is None:
            libs = self.libs = _LibSteps.of(self.plan)
        if libs.swap:
            a, b = b, a
        if libs.pre_a is not None:
            a = step(xp, *libs.pre_a, [a])
        if libs.pre_b is not None:
            b = step(xp, *libs.pre_b, [b])
        return libs.product(xp, a, b)

    def __call__(self, pool: Any, a: Any, b: Any, dest: Any = None) -> Any:
        """The product of `a` and `b`, in a buffer of `pool`'s, or in `dest` (an operand's
        gradient: a C-contiguous array of the result's shape) where the product writes its
        result as it lies in that order; then `dest` itself is returned."""
        plan = self.plan
        # (numpy's result type is in native byte order, as `numpy.dot`'s `out` must be)
        dtype = a.dtype if a.dtype == b.dtype and a.dtype.isnative else np.result_type(a, b)
        if dest is not None and not (dest.dtype == dtype and dest.flags.c_contiguous):
            dest = None
        if plan.outer:
            out = dest if dest is not None else pool.get(self.out_shape, dtype)
            return np.multiply(*outer_operands(plan, a, b), out=out)
        if not plan.gemm or (plan.matvec and not (a.flags.c_contiguous and b.flags.c_contiguous)):
            return _loop_pair(plan, a, b)
        if plan.swap:
            a, b = b, a
        if plan.pre_a is not None:
            a = presum(plan.pre_a, a, b)
        if plan.pre_b is not None:
            b = presum(plan.pre_b, b, a)
        a = a.transpose(plan.perm_a)
        b = b.transpose(plan.perm_b)
        key = (a.strides, b.strides)
        views = self.seen.get(key)
        if views is None:
            views = (_merges(a, plan.shape_a), _merges(b, plan.shape_b), None)
        if views[0]:
            a = a.reshape(plan.shape_a)
        else:
            a = _copied(pool, a, plan.shape_a)
        if views[1]:
            b = b.reshape(plan.shape_b)
        else:
            b = _copied(pool, b, plan.shape_b)
        if dest is not None and self.identity:
            out = dest.reshape(self.mm_shape)  # (a view: `dest` is C-contiguous)
        else:
            dest = None
            out = pool.get(self.mm_shape, dtype)
        dot = views[2]
        if dot is None:  # (decided once per layout, as the views are)
            # numpy.dot copies a matrix of spaced rows (a slice's), which numpy.matmul reads
            dot = len(self.mm_shape) == 2 and a.flags.forc and b.flags.forc
            self.seen[key] = (views[0], views[1], dot)
        if dot:
            np.dot(a, b, out=out)
        else:
            np.matmul(a, b, out=out)
        if not views[0]:
            pool.put(a)
        if not views[1]:
            pool.put(b)
        if dest is not None:
            return dest
        out = out.reshape(plan.dims)
        return out if self.identity else out.transpose(plan.perm_out)

    def emit(self, build: _Builder, a: Any, b: Any, dest: Any = None) -> Any:
        """What `__call__` does, bound into `build`'s program: the same decisions, taken once on
        the program's buffers (`a`, `b` and `dest` are), and every numpy call appended to it."""
        plan, pool = self.plan, build.pool
        build.contractions += not plan.outer
        dtype = np.result_type(a, b)
        if dest is not None and not (dest.dtype == dtype and dest.flags.c_contiguous):
            dest = None
        temps = []
        loop = not plan.gemm or (plan.matvec and not (a.flags.c_contiguous and b.flags.c_contiguous))
        if plan.outer or not loop:
            if plan.swap:
                a, b = b, a
            for pre, x, i in ((plan.pre_a, a, 0), (plan.pre_b, b, 1)):
                if pre is not None:
                    ins, outs = pre.split("->")
                    size = dict(zip(ins, x.shape))
                    y = pool.get(tuple(size[c] for c in outs), dtype)  # (summed as promoted: `presum`)
                    build.ops.append((functools.partial(_C_EINSUM, pre, out=y, dtype=dtype), (x,)))
                    temps.append(y)
                    a, b = (y, b) if i == 0 else (a, y)
        else:  # numpy.einsum's one pass, into a buffer (counted as copying both, as planned)
            build.copied += a.size + b.size
            out = pool.get(self.out_shape, dtype)
            build.ops.append((functools.partial(_C_EINSUM, plan.text, out=out), (a, b)))
            return out
        if plan.outer:
            out = dest if dest is not None else pool.get(self.out_shape, dtype)
            perm, shape = plan.view_a
            va = a.transpose(perm).reshape(shape)
            perm, shape = plan.view_b
            build.ops.append((np.multiply, (va, b.transpose(perm).reshape(shape), out)))
            for y in temps:
                pool.put(y)
            return out
        a = a.transpose(plan.perm_a)
        b = b.transpose(plan.perm_b)
        key = (a.strides, b.strides)
        views = self.seen.get(key)
        if views is None:  # (the check reshapes: a copy, where it is no view)
            views = self.seen[key] = (_merges(a, plan.shape_a), _merges(b, plan.shape_b), None)
        mm = []
        for x, shape, view in ((a, plan.shape_a, views[0]), (b, plan.shape_b, views[1])):
            if not view:
                y = pool.get(x.shape, x.dtype)
                build.copy(y, x)
                temps.append(y)
                x = y
            mm.append(x.reshape(shape))
        a, b = mm
        if dest is not None and self.identity:
            out = dest.reshape(self.mm_shape)
        else:
            dest = None
            out = pool.get(self.mm_shape, dtype)
        if len(self.mm_shape) == 2:  # (the method: numpy.dot's dispatch is a Python call)
            build.ops.append((a.dot, (b, out)))
        else:
            build.ops.append((np.matmul, (a, b, out)))
        for y in temps:
            pool.put(y)
        if dest is not None:
            return dest
        out = out.reshape(plan.dims)
        return out if self.identity else out.transpose(plan.perm_out)


@dataclass(frozen=True)
class _LibSteps:
    """A `_PairPlan` as `_Pair.lib` runs it on another library's arrays: the operands swapped,
    each one's letters only it has summed or diagonalized (``(ins, out)`` for `executor.step`),
    then the product as its `executor._LibPlan` (`product`: the operands permuted and reshaped
    as the pair plan lays them out, one matmul or broadcast multiply, the result laid out)."""

    swap: bool
    pre_a: tuple[tuple[str], str] | None
    pre_b: tuple[tuple[str], str] | None
    product: _LibPlan

    @staticmethod
    def of(plan: _PairPlan) -> _LibSteps:
        ins, so = plan.spec.split("->")
        sa, sb = ins.split(",")
        if plan.swap:
            sa, sb = sb, sa
        ra = "".join(c for c in unique(sa) if c in sb or c in so)
        rb = "".join(c for c in unique(sb) if c in sa or c in so)
        pre_a = None if ra == sa else ((sa,), ra)
        pre_b = None if rb == sb else ((sb,), rb)
        if plan.outer:  # (each operand viewed along the output's letters, then multiplied)
            (pa, shape_a), (pb, shape_b) = plan.view_a, plan.view_b
            product = lib_product(pa, shape_a, pb, shape_b, None, tuple(range(len(so))))
        else:
            product = lib_product(
                plan.perm_a, plan.shape_a, plan.perm_b, plan.shape_b, plan.dims, plan.perm_out
            )
        return _LibSteps(plan.swap, pre_a, pre_b, product)


def _merges(view: Any, shape: Shape) -> bool:
    """Whether `view` reshapes to `shape` as a view (numpy's own decision)."""
    return bool(np.may_share_memory(view.reshape(shape), view))


SUMMED_AS_LYING = True
"""Whether a planned product may contract its summed letters in the order either operand lies
in, not only in its first operand's letter order (`_product` keeps the order copying least:
an intermediate whose memory is not its letter order then need not be copied; read when a
plan is made)."""

LOOPED = True
"""Whether `tree_plan` also plans layouts with products looped over letters one operand has
(`executor._prefix`), which write a result in the order its reader takes as it lies, and keeps
that plan where it copies least (read when a plan is made: clear `tree_plan`'s cache after
changing it)."""

SCRATCH_MIN = POOL_MIN
"""Elements from which a loop's buffers come from its pool (`scratch`): a large array is a
fresh mapping that faults its pages in; a smaller one is `memory.recycled`'s (memory kept once
nothing refers to it, from 128 KiB; below, malloc's free lists, which also serve a later,
larger array, where a pool's free buffer serves only one as large or up to twice smaller),
so the loop's peak stays about its values' own."""


def scratch() -> _Pool:
    """A pool for a loop that runs the same steps again and again on arrays of the same shapes
    (a sliced contraction's slices, `rules.einsum`): buffers of `SCRATCH_MIN` elements or
    more; `_Pool.settle` between rounds, `_Pool.release` when the shapes change."""
    return _Pool(least=SCRATCH_MIN)


@functools.lru_cache(maxsize=1024)
def pair_step(sa: str, sb: str, so: str, shape_a: Shape, shape_b: Shape) -> _Pair:
    """The product ``sa,sb->so`` of operands of these shapes (no letter broadcast from size 1)
    as a step writing into a pool's buffers: ``pair_step(...)(pool, a, b)``, whose result is
    a buffer of `pool`'s or a fresh array, never a view of an operand."""
    return _Pair(_pair_plan(sa, sb, so, shape_a, shape_b))


def _copied(pool: Any, view: Any, shape: Shape) -> Any:
    """`view` copied into a buffer of the call (`_copy_into`), merged to `shape`."""
    out = pool.get(view.shape, view.dtype)
    _copy_into(out, view)
    return out.reshape(shape)


def _loop_pair(plan: _PairPlan, a: Any, b: Any) -> Any:
    """A product numpy.einsum runs in one pass (a memory-bound one whose operands a matrix
    product would copy): a fresh array, copying nothing."""
    return np.einsum(plan.text, a, b)


def _follow(inputs: tuple[str, ...], output: str, path: Path) -> tuple[list[tuple[int, ...]], list[str]]:
    """Each step's value ids along `path`, and every value's letters (`pairwise_steps`')."""
    n = len(inputs)
    work = list(range(n))
    specs = list(inputs)
    args_of: list[tuple[int, ...]] = []
    for t, (positions, _, out) in enumerate(pairwise_steps(inputs, output, path)):
        args_of.append(tuple(work[p] for p in positions))
        for p in sorted(positions, reverse=True):
            del work[p]
        work.append(n + t)
        specs.append(out)
    return args_of, specs


def _choose_layouts(
    n: int, args_of: list[tuple[int, ...]], specs: list[str], size: dict[str, int], looped: bool = False
) -> None:
    """Choose every intermediate's axis order, in place in `specs`, from the result down.

    A pairwise product reads its operands as it lies when each of their letter groups
    (batch, kept, contracted) is one contiguous block in the order the product uses, and it
    writes its result as it lies in the order batch, then one operand's kept letters, then
    the other's. So each step, from the last to the first, asks its intermediate operands
    for the layouts it reads as they lie (its result's order fixes their batch and kept
    letters; the contracted letters take the order of an operand that is an input, whose
    layout is given). The step that makes an intermediate grants the first layout asked
    that it can write, else writes its own (and the reader copies). Copies are pushed to the
    inputs, which are the small arrays of a network.
    """
    last = len(args_of) - 1
    wants: dict[int, list[str]] = {}
    for t in range(last, -1, -1):
        args = args_of[t]
        if len(args) != 2:
            continue
        a, b = args
        sets = [set(specs[a]), set(specs[b])]
        if _volume(specs[a], size) < _volume(specs[b], size):
            a, b = b, a
            sets.reverse()
        keep = set(specs[n + t])
        batch = sets[0] & sets[1] & keep
        left, right = (sets[0] - sets[1]) & keep, (sets[1] - sets[0]) & keep
        inner_size = _volume("".join(sets[0] & sets[1] - keep), size)
        if t < last:  # the result's order is the caller's
            asked = wants.pop(n + t, [])
            specs[n + t] = _grant(asked, specs[n + t], batch, left, right, inner_size if looped else 0, size)
        order = specs[n + t]
        inner = _inner_order(a, b, sets[0] & sets[1] - keep, specs, n)
        bo = "".join(c for c in order if c in batch)
        lo = "".join(c for c in order if c in left)
        ro = "".join(c for c in order if c in right)
        if a >= n:
            wants[a] = [bo + lo + inner, bo + inner + lo]
        if b >= n:
            wants[b] = [bo + inner + ro, bo + ro + inner]


def _volume(spec: str, size: dict[str, int]) -> int:
    return math.prod([size[c] for c in spec])


def _grant(
    asked: list[str],
    natural: str,
    batch: set[str],
    left: set[str],
    right: set[str],
    inner: int = 0,
    size: dict[str, int] | None = None,
) -> str:
    """The first layout `asked` that a product writes as it lies (batch, then the left and the
    right letters as two blocks; given the product's `inner` size, also a head of letters looped
    over, then two blocks: `executor._prefix`); else batch, left, right in the order of the
    first asked."""
    for order in asked:
        nb = len(batch)
        head, rest = set(order[:nb]), order[nb:]
        nl = len(left)
        if head == batch and (
            (set(rest[:nl]) == left and set(rest[nl:]) == right)
            or (set(rest[: len(right)]) == right and set(rest[len(right) :]) == left)
        ):
            return order
        if inner and size is not None:
            ra, rb = "".join(batch | left), "".join(batch | right)
            if _prefix(order, ra, rb, [c for c in order if c in batch], inner, size):
                return order
    ref = asked[0] if asked else natural
    rank = {c: i for i, c in enumerate(ref)}
    return "".join(
        sorted(batch, key=rank.__getitem__)
        + sorted(left, key=rank.__getitem__)
        + sorted(right, key=rank.__getitem__)
    )


def _inner_order(a: int, b: int, inner: set[str], specs: list[str], n: int) -> str:
    """The order a product contracts its `inner` letters in: an input's own (the larger's
    when both are inputs; `a` is the larger), since an input's layout is given."""
    source = specs[a] if a < n or b >= n else specs[b]
    return "".join(c for c in unique(source) if c in inner)


@functools.lru_cache(maxsize=256)
def tree_plan(
    inputs: tuple[str, ...],
    output: str,
    shapes: tuple[Shape, ...],
    path: Path,
    wrt: tuple[int, ...],
    layouts: bool = True,
    looped: bool = True,
) -> TreePlan:
    """Plan the forward and the sweep of the contraction ``inputs -> output`` along `path`
    (opt_einsum's explicit path) for the gradients of the operands `wrt`.

    `layouts=False` keeps each intermediate's letters in order of appearance instead of
    choosing its layout (the baseline that shows what the choice saves). `looped=False` plans
    no product looped over letters one operand has (`LOOPED`): a sliced contraction's slices,
    whose loops of thousands of 80^3-150^3 matrix products ran slower than the copies they
    save (case 10 at n = 150: 19.6 s a value-and-gradient with them, 15.6 without).
    """
    if layouts:  # the chosen layouts, unless they copy more than letters in order of appearance
        memo: dict[Any, Planned] = {}  # the products the plans share, each planned once
        chosen = _tree_plan(inputs, output, shapes, path, wrt, True, False, memo)
        if chosen.copies == 0:  # nothing can copy less (a network of bond-1 tensors: every letter dropped)
            return chosen
        others = [_tree_plan(inputs, output, shapes, path, wrt, False, False, memo)]
        # both with looped products too (granting them may copy more, or less), unless they
        # are the plans above: a bond-2 network's products are too small to loop
        if LOOPED and looped and not _loop_free(inputs, output, shapes, path, memo):
            others[:0] = [
                _tree_plan(inputs, output, shapes, path, wrt, layouts, True, memo)
                for layouts in (True, False)
            ]
        return min(chosen, *others, key=lambda p: p.copies)
    return _tree_plan(inputs, output, shapes, path, wrt, False)


def _loop_free(
    inputs: tuple[str, ...], output: str, shapes: tuple[Shape, ...], path: Path, memo: dict[Any, Planned]
) -> bool:
    """Whether a tree's plans with looped products are its plans without, given the products
    those made (`memo`): none of them may loop (`_loops`), and the layouts chosen where a
    product may loop are the layouts chosen where none may. Planned again, every step would
    then decide as it did."""
    if any(_loops(key[:2], key[2], key[3:5]) for key in memo):
        return False
    _, _, inputs, _, size, args_of, specs = _steps_of(inputs, output, shapes, path)
    plain, looped = list(specs), list(specs)
    _choose_layouts(len(inputs), args_of, plain, size)
    _choose_layouts(len(inputs), args_of, looped, size, True)
    return plain == looped


def _tree_plan(
    inputs: tuple[str, ...],
    output: str,
    shapes: tuple[Shape, ...],
    path: Path,
    wrt: tuple[int, ...],
    layouts: bool,
    looped: bool = False,
    memo: dict[Any, Planned] | None = None,
) -> TreePlan:
    given, out_shape, inputs, shapes, size, args_of, specs = _steps_of(inputs, output, shapes, path)
    n = len(inputs)
    if layouts:
        _choose_layouts(n, args_of, specs, size, looped)
    all_shapes = list(shapes) + [tuple(size[c] for c in spec) for spec in specs[n:]]
    memory = list(inputs)  # each value's letters in memory order (an input is C-contiguous)
    forward: list[Product] = []
    first: list[Product] = []  # inputs laid out once, before the forward
    produced = list(inputs)  # each value's letters in the order its step writes them
    for t, args in enumerate(args_of):
        picked = [specs[a] for a in args]
        step_shapes = [all_shapes[a] for a in args]
        run, order, copies, written, reads = _product(
            picked, specs[n + t], step_shapes, [memory[a] for a in args], looped, memo
        )
        if any(reads):
            # Each operand it would copy is laid out once, where it is made (an intermediate)
            # or before the forward (an input): the sweep reads it again in the same groups.
            for a, want in zip(args, reads):
                if want is None:
                    continue
                memory[a] = want
                lay = _LayOut(specs[a], want)
                vol = _volume(want, size)
                if a >= n:
                    p = forward[a - n]
                    forward[a - n] = Product(p.args, p.result, _Then(p.run, lay), p.copies + vol)
                else:
                    first.append(Product((a,), a, lay, vol))
            run, order, copies, written, _ = _product(
                picked, specs[n + t], step_shapes, [memory[a] for a in args], looped, memo
            )
        memory.append(written)
        produced.append(written)
        forward.append(Product(tuple(args[i] for i in order), n + t, run, copies))
    forward[:0] = first
    need = set(wrt)
    for t, args in enumerate(args_of):
        if any(a in need for a in args):
            need.add(n + t)
    backward: list[Pullback] = []
    kept: set[int] = set()
    layout = {len(specs) - 1: (specs[-1], specs[-1])}  # each cotangent's letters, and in memory
    laid = {p.result for p in first}
    made: dict[int, int] = {}  # an intermediate's cotangent -> its pullback's place in `backward`
    for t in reversed(range(len(args_of))):
        args = args_of[t]
        if n + t not in need:
            continue
        pullbacks = functools.partial(_step_pullbacks, t, args_of, need, n, specs, memory, size, looped, memo)
        planned = pullbacks(layout[n + t])
        if n + t in made:
            # The cotangent laid out once, when that costs less than its readers' copies: as the
            # forward wrote its value (each of this step's operand groups in one run), or as one
            # of its readers would copy it (then the others read that copy too).
            letters, lies = layout[n + t]
            wants = [produced[n + t], *(q.ct_copy for q, _ in planned if q.ct_copy is not None)]
            best = sum(q.copies for q, _ in planned)
            for want in dict.fromkeys(w for w in wants if w != lies and sorted(w) == sorted(letters)):
                other = pullbacks((letters, want))
                cost = _volume(want, size) + sum(q.copies for q, _ in other)
                if cost < best:
                    best, layout[n + t], planned = cost, (letters, want), other
            if layout[n + t][1] != lies:
                k = made[n + t]
                q = backward[k]
                run = _Then(q.run, _LayOut(letters, layout[n + t][1]))
                vol = _volume(letters, size)
                backward[k] = dataclasses.replace(q, run=run, copies=q.copies + vol, direct=False)
        # the pullback to the smaller operand first: it reads the larger one, which is then let
        # go before the larger one's cotangent is made (and can take its buffer)
        planned.sort(key=lambda q: _volume(specs[q[0].target], size))
        for pullback, lay_of in planned:
            others = tuple(i for i in pullback.args if i != _COTANGENT)
            kept.update(o for o in others if o >= n or o in laid)
            layout[pullback.target] = lay_of
            if pullback.target >= n:
                made[pullback.target] = len(backward)
            backward.append(pullback)
    return TreePlan(
        shapes=None if given is None else shapes,
        out_shape=out_shape,
        n=n,
        wrt=tuple(wrt),
        forward=tuple(forward),
        backward=_releases(backward),
        kept=frozenset(kept),
        # a pool only where some buffer is as large as POOL_MIN (every buffer, an intermediate,
        # a copy or a cotangent, is as large as one of the values); below, it is bookkeeping only
        pooled=all(len(args) == 2 for args in args_of)
        and max(math.prod(size[c] for c in spec) for spec in specs) >= POOL_MIN,
        programmable=all(isinstance(p.run, (_Pair, _Then, _LayOut)) for p in forward)
        and all(isinstance(q.run, (_Pair, _Then)) for q in backward)
        and all(q.spread is None or len(set(q.spread[1])) == len(q.spread[1]) for q in backward)
        and _fits_program(shapes, specs, size),
    )


@functools.lru_cache(maxsize=256)
def forward_plan(inputs: tuple[str, ...], output: str, shapes: tuple[Shape, ...], path: Path) -> TreePlan:
    """Plan the value alone of the contraction ``inputs -> output`` along `path`: eager einsum's
    pairwise steps (`executor._pair_plan`, each intermediate's letters in the order
    `pairwise_steps` names them), run on a pool's buffers (`_Pair`) and, for small operands,
    as a `_Program` (see `value`).

    Not `tree_plan`'s layouts: they serve the sweep too, and on large bonds the copies they
    leave read memory across the grain (benchmark n4: as many elements copied as these
    steps copy, in three times the time; the forward 27% slower).
    """
    given, out_shape, inputs, shapes, size, args_of, specs = _steps_of(inputs, output, shapes, path)
    n = len(inputs)
    memory = list(inputs)  # each value's letters in memory order
    forward: list[Product] = []
    for t, args in enumerate(args_of):
        picked = [specs[a] for a in args]
        step_shapes = [tuple(size[c] for c in specs[a]) for a in args]
        if len(args) == 2:
            plan = _pair_plan(picked[0], picked[1], specs[n + t], step_shapes[0], step_shapes[1])
            copied, written, _ = _copies(
                plan, (picked[0], picked[1]), (memory[args[0]], memory[args[1]]), specs[n + t], size
            )
            run: Run = _Pair(plan)
        else:
            run, _, copied, written, _ = _product(
                picked, specs[n + t], step_shapes, [memory[a] for a in args]
            )
        memory.append(written)
        forward.append(Product(args, n + t, run, copied))
    return TreePlan(
        shapes=None if given is None else shapes,
        out_shape=out_shape,
        n=n,
        wrt=(),
        forward=tuple(forward),
        backward=(),
        kept=frozenset(),
        pooled=all(len(args) == 2 for args in args_of)
        and max(math.prod(size[c] for c in spec) for spec in specs) >= POOL_MIN,
        programmable=len(forward) >= PROGRAM_STEPS
        and all(isinstance(p.run, _Pair) for p in forward)
        and _fits_program(shapes, specs, size),
    )


def _steps_of(
    inputs: tuple[str, ...], output: str, shapes: tuple[Shape, ...], path: Path
) -> tuple[Any, Shape, tuple[str, ...], tuple[Shape, ...], dict[str, int], list[tuple[int, ...]], list[str]]:
    """What both planners start from: the contraction without its letters of size 1
    (`_drop_ones`: None where none is dropped, and the value's shape), its operands' letters
    and shapes then, each letter's size, and each step's value ids and every value's letters
    (`_follow`)."""
    given, out_shape = _drop_ones(inputs, output, shapes)
    if given is not None:
        inputs, output, shapes = given
    size: dict[str, int] = {}
    for spec, shape in zip(inputs, shapes):
        size.update(zip(spec, shape))
    args_of, specs = _follow(inputs, output, path)
    return given, out_shape, inputs, shapes, size, args_of, specs


def _drop_ones(
    inputs: tuple[str, ...], output: str, shapes: tuple[Shape, ...]
) -> tuple[tuple[tuple[str, ...], str, tuple[Shape, ...]] | None, Shape]:
    """The contraction without its letters of size 1 in every operand (None where it has none),
    and the shape of its value. Such a letter neither sums nor broadcasts anything; dropped,
    a network of bond-1 tensors (quimb's boundary bonds, the planning report's networks) has
    no step of more than numpy's 64 axes, and fewer letters per step to lay out."""
    size = {c: 1 for spec in inputs for c in spec}
    for spec, shape in zip(inputs, shapes):
        for c, d in zip(spec, shape):
            if d != 1:
                size[c] = d
    out_shape = tuple(size[c] for c in output)
    ones = {c for c, d in size.items() if d == 1}
    if not ones:
        return None, out_shape
    kept = tuple("".join(c for c in spec if c not in ones) for spec in inputs)
    squeezed = tuple(
        tuple(d for c, d in zip(spec, shape) if c not in ones) for spec, shape in zip(inputs, shapes)
    )
    return (kept, "".join(c for c in output if c not in ones), squeezed), out_shape


def _fits_program(shapes: tuple[Shape, ...], specs: list[str], size: dict[str, int]) -> bool:
    """Whether a plan's operands (`shapes`) and all its values (`specs`) are small enough for a
    `_Program` (see `PROGRAM_INPUTS` and `PROGRAM_VALUES`)."""
    return (
        sum(math.prod(s) for s in shapes) <= PROGRAM_INPUTS
        and sum(_volume(spec, size) for spec in specs) <= PROGRAM_VALUES
    )


def _releases(backward: list[Pullback]) -> tuple[Pullback, ...]:
    """`backward` with each pullback's `Pullback.release`: an operand of a step is let go after
    the step's last pullback that reads it, the step's cotangent after its last pullback."""
    out: list[Pullback] = []
    read_later: set[int] = set()  # what the step's later pullbacks read
    for k in reversed(range(len(backward))):
        p = backward[k]
        last = k + 1 == len(backward) or backward[k + 1].step != p.step
        if last:
            read_later = set()
        release = tuple(i for i in p.args if i != _COTANGENT and i not in read_later)
        out.append(dataclasses.replace(p, release=release + ((_COTANGENT,) if last else ())))
        read_later.update(p.args)
    return tuple(out[::-1])


def _step_pullbacks(
    t: int,
    args_of: list[tuple[int, ...]],
    need: set[int],
    n: int,
    specs: list[str],
    memory: list[str],
    size: dict[str, int],
    looped: bool,
    memo: dict[Any, Planned] | None,
    ct: tuple[str, str],
) -> list[tuple[Pullback, tuple[str, str]]]:
    """Step t's pullbacks to each of its operands that needs a cotangent, for the step's own
    cotangent lying as `ct` says (letters, memory order)."""
    args = args_of[t]
    out = []
    for j, a in enumerate(args):
        if a in need:
            blocks = _blocks(specs, args_of[a - n]) if a >= n else ()
            out.append(
                _pullback(t, a, ct, args[:j] + args[j + 1 :], specs, memory, size, blocks, looped, memo)
            )
    return out


def _pullback(
    t: int,
    a: int,
    ct: tuple[str, str],
    others: tuple[int, ...],
    specs: list[str],
    memory: list[str],
    size: dict[str, int],
    blocks: tuple[set[str], ...] = (),
    looped: bool = False,
    memo: dict[Any, Planned] | None = None,
) -> tuple[Pullback, tuple[str, str]]:
    """The pullback of step t to its operand `a`: the cotangent (letters and memory order
    `ct`) contracted with the step's other operands to `a`'s letters that appear elsewhere;
    and the letters and memory order of what it writes, in `a`'s own order or the one its
    product writes as it lies, whichever copies less (the pullbacks that read that cotangent
    take it as it lies; an operand's gradient is put in its own order, or spread, as it is
    written out)."""
    target = specs[a]
    elsewhere = set(ct[0]).union(*(specs[o] for o in others))
    kept = "".join(c for c in unique(target) if c in elsewhere)
    in_specs = [ct[0]] + [specs[o] for o in others]
    in_shapes = [tuple(size[c] for c in spec) for spec in in_specs]
    in_memory = [ct[1]] + [memory[o] for o in others]
    if len(in_specs) == 2:
        orders = [_natural(in_specs, in_shapes, set(kept))] + ([target] if kept == target else [])
        if blocks and set(memory[a]) == set(kept):
            orders.append(memory[a])  # as `a` lies: read as it lies by its own step's pullbacks
        # each distinct order's product planned once: the cheapest is the one kept (the first
        # of equal cost, as `min` picks)
        products = {
            o: _product(in_specs, o, in_shapes, in_memory, looped, memo) for o in dict.fromkeys(orders)
        }

        def cost(o: str) -> int:  # copies now, then when `a`'s step's pullbacks read it, or
            _, _, copies, written, _ = products[o]  # when it is put
            if blocks:
                return copies + (0 if _contiguous_blocks(written, blocks) else _volume(kept, size))
            return copies + (0 if written == target else _volume(kept, size))

        kept = min(products, key=cost)
        product = products[kept]
    else:
        product = _product(in_specs, kept, in_shapes, in_memory, looped, memo)
    run, order, copies, written, _ = product
    ids = (_COTANGENT, *others)
    put = None if kept == target else (kept, target, tuple(size[c] for c in target))
    direct = isinstance(run, _Pair) and put is None and (run.plan.outer or (run.plan.gemm and run.identity))
    turn = None
    if put is not None and len(set(target)) == len(target) and sorted(kept) == sorted(target):
        turn = tuple(kept.index(c) for c in target)
    ct_copy = product[4][0]
    pullback = Pullback(t, a, tuple(ids[i] for i in order), run, put, copies, turn, direct, ct_copy=ct_copy)
    return pullback, (kept, written)


def _blocks(specs: list[str], args: tuple[int, ...]) -> tuple[set[str], ...]:
    """The letter groups in which a step's pullbacks read its result's cotangent: batch, and
    each operand's own kept letters (a pair's; none for another step)."""
    if len(args) != 2:
        return ()
    sa, sb = set(specs[args[0]]), set(specs[args[1]])
    return (sa & sb, sa - sb, sb - sa)


def _contiguous_blocks(order: str, blocks: tuple[set[str], ...]) -> bool:
    """Whether each group of `blocks` is one run of `order` (no groups: nothing to read)."""
    for group in blocks:
        at = [i for i, c in enumerate(order) if c in group]
        if at and at[-1] - at[0] + 1 != len(at):
            return False
    return True


def _natural(specs: list[str], shapes: list[Shape], keep: set[str]) -> str:
    """The order in which a pair's product writes the letters `keep` as it lies: batch and
    left letters in the larger operand's order (the one `_product` keeps), then the right
    letters in the other's."""
    a, b = (0, 1) if math.prod(shapes[0]) >= math.prod(shapes[1]) else (1, 0)
    sa, sb = specs[a], specs[b]
    batch = [c for c in unique(sa) if c in sb and c in keep]
    left = [c for c in unique(sa) if c not in sb and c in keep]
    right = [c for c in unique(sb) if c not in sa and c in keep]
    return "".join(batch + left + right)


_COTANGENT = -1
"""The id a pullback's `args` give the cotangent it pulls back."""


# -- running ---------------------------------------------------------------------------------


def _forward(
    plan: TreePlan, arrays: Sequence[Array], keep: bool = False, pool: Any = None, value: bool = True
) -> tuple[Any, dict[int, Any]]:
    """`forward` on operands without the plan's dropped letters."""
    own = pool is None and not keep
    if own:
        pool = _checkout(plan)
    elif pool is None:
        pool = _FRESH
    vals: dict[int, Any] = dict(enumerate(arrays))
    kept = plan.kept if keep else frozenset()
    last = plan.forward[-1].result
    for p in plan.forward if value else plan.forward[:-1]:
        xs = [vals[a] if a in kept else vals.pop(a) for a in p.args]
        vals[p.result] = p.run(_FRESH if p.result == last else pool, *xs)  # (the value: its own array)
        for a, x in zip(p.args, xs):
            if a not in kept and a != p.result:
                pool.put(x)
    if not value:  # (the last product's operands that no pullback reads go back to the pool)
        for a in plan.forward[-1].args:
            if a not in kept and a in vals:
                pool.put(vals.pop(a))
    result = vals.pop(last) if value else None
    if own:
        _checkin(plan, pool)
    return result, {k: v for k, v in vals.items() if k in kept}


def _sweep(
    plan: TreePlan,
    g: Any,
    arrays: Sequence[Array],
    kept: dict[int, Any],
    grads: dict[int, Any],
    pool: Any = None,
    on_grad: Callable[[int, Any], None] | None = None,
    consume: bool = False,
) -> None:
    """`sweep` on operands, cotangent and gradients without the plan's dropped letters."""
    if pool is None:
        pool = _FRESH
    vals: dict[int, Any] = dict(enumerate(arrays))
    vals.update(kept)
    if consume:  # (the caller's dict no longer holds them: each goes after its last reader)
        kept.clear()
    cts: dict[int, Any] = {plan.forward[-1].result: g}
    n = plan.n
    step = -1
    ct = g
    for p in plan.backward:
        if p.step != step:
            step = p.step
            ct = cts.pop(n + step)
        args = [ct if i == _COTANGENT else vals[i] for i in p.args]
        if p.target < n and on_grad is not None:  # handed over at once, its buffer then reused
            r = p.run(pool, *args)
            on_grad(p.target, _as_operand(p, r))
            pool.put(r)
        elif p.target < n and p.direct and grads[p.target] is not None:
            out = grads[p.target]
            r = p.run(pool, *args, dest=out)  # into the gradient, where the product can
            if r is not out:
                out[...] = r
                pool.put(r)
        elif p.target < n:
            out = grads[p.target]
            # a gradient that is the product's own array leaves the call: not a pooled buffer
            r = p.run(_FRESH if out is None and p.spread is None else pool, *args)
            if p.spread is not None:
                s = _as_operand(p, r)
                if out is None:
                    grads[p.target] = np.array(s)
                else:
                    out[...] = s
                pool.put(r)
            elif out is None:
                grads[p.target] = r
            else:
                out[...] = r
                pool.put(r)
        else:
            cts[p.target] = p.run(pool, *args)
        for i in p.release:  # (an operand of the caller's is no buffer of the pool's: left alone)
            pool.put(ct if i == _COTANGENT else vals.pop(i))


def _as_operand(p: Pullback, r: Any) -> Any:
    """The product `r` of a pullback to an operand, as that operand lies: transposed (`turn`)
    or spread over its repeated letters (`spread`), or `r` itself."""
    if p.spread is None:
        return r
    return r.transpose(p.turn) if p.turn is not None else spread(r, *p.spread)


def _value_and_grad(plan: TreePlan, arrays: Sequence[Array], grads: dict[int, Any]) -> Any:
    """`value_and_grad` on operands and gradients without the plan's dropped letters."""
    program = _program(plan, arrays)
    if program is not None:
        value = program.run(arrays, grads)
        _program_in(plan, program)
        return value
    pool = _checkout(plan)
    value, kept = _forward(plan, arrays, keep=True, pool=pool)
    _sweep(plan, np.ones((), dtype=np.result_type(value)), arrays, kept, grads, pool, consume=True)
    _checkin(plan, pool)
    return value


def _value(plan: TreePlan, arrays: Sequence[Array]) -> Any:
    """`value` on operands without the plan's dropped letters."""
    program = _program(plan, arrays)
    if program is not None:
        out = program.run(arrays, {})
        _program_in(plan, program)
        return out
    return _forward(plan, arrays)[0]


def forward(
    plan: TreePlan, arrays: Sequence[Array], keep: bool = False, pool: Any = None, value: bool = True
) -> tuple[Any, dict[int, Any]]:
    """The contraction's value, and (with `keep`) the intermediates the sweep reads.

    Without `keep` the intermediates are the buffers of a pool of the plan's (`_Pool`),
    each handed on once its reader is done; `pool` (value_and_grad's) keeps the kept ones
    in it for the sweep. The value is always an array of its own. `value=False` (with `keep`)
    stops before the last product, whose result no pullback reads, and returns None for it:
    a sweep that is given its cotangent (a vjp's) needs only the intermediates."""
    if plan.shapes is None:
        return _forward(plan, arrays, keep, pool, value)
    result, kept = _forward(plan, _operands(plan, arrays), keep, pool, value)
    return (None if result is None else result.reshape(plan.out_shape)), kept


def sweep(
    plan: TreePlan,
    g: Any,
    arrays: Sequence[Array],
    kept: dict[int, Any],
    grads: dict[int, Any],
    pool: Any = None,
    on_grad: Callable[[int, Any], None] | None = None,
    consume: bool = False,
) -> None:
    """Pull the cotangent `g` of the result back to the operands: each differentiated operand
    k's gradient is written into ``grads[k]`` (an array of its shape, overwritten), or, where
    that is None, becomes it. With `pool` (the forward's), the cotangents and the kept
    intermediates are its buffers, each handed on once its last pullback has read it. With
    `on_grad`, each gradient is handed to ``on_grad(k, gradient)`` as soon as it is made
    instead (a view of a buffer the sweep reuses once the call returns: a sliced
    contraction's slices add it in at once, `rules.einsum`), and `grads` is not written. With
    `consume`, `kept` is emptied as the sweep starts, so that each intermediate goes after its
    last reader (a `kept` swept once; a vjp called again sweeps its `kept` again)."""
    if plan.shapes is None:
        return _sweep(plan, g, arrays, kept, grads, pool, on_grad, consume)
    g, operands = np.reshape(g, _dropped(plan.out_shape)), _operands(plan, arrays)
    if on_grad is not None:
        given = on_grad  # (each gradient back in its operand's shape)
        shaped = lambda k, r: given(k, r.reshape(arrays[k].shape))
        _sweep(plan, g, operands, kept, grads, pool, shaped, consume)
        return None
    views = _gradients(plan, grads)
    _sweep(plan, g, operands, kept, views, pool, consume=consume)
    _restore(arrays, grads, views)
    return None


def value_and_grad(plan: TreePlan, arrays: Sequence[Array], grads: dict[int, Any]) -> Any:
    """A scalar contraction's value, its gradients (for a cotangent of 1) written into `grads`
    (each an array of its operand's shape, overwritten; where None, a new array)."""
    if plan.shapes is None:
        return _value_and_grad(plan, arrays, grads)
    views = _gradients(plan, grads)
    value = _value_and_grad(plan, _operands(plan, arrays), views)
    _restore(arrays, grads, views)
    return value


def value_and_grad_into(plan: TreePlan, arrays: Sequence[Array], flat: Any, start: int) -> Any:
    """`value_and_grad` with the gradients of `plan.wrt` written into ``flat[start:]``, laid end
    to end in that order, each raveled (`einsum_vg`'s layout), by the plan's `_Program` in one
    copy (`_Program.run_into`); None, with nothing written, where the plan runs no program."""
    program = _program(plan, arrays)
    if program is None:
        return None
    if program.grad_block.dtype != flat.dtype:  # (the layout holds, not the dtype: not here)
        _program_in(plan, program)
        return None
    value = program.run_into(arrays, flat, start)
    _program_in(plan, program)
    return value


def end_to_end(block: Any, shapes: Sequence[Shape]) -> list[Any]:
    """Views of `block` (a flat array) in these shapes, laid end to end (a program's gradient
    buffers; `einsum_vg`'s flat result's gradient blocks)."""
    views, at = [], 0
    for shape in shapes:
        size = math.prod(shape)
        views.append(block[at : at + size].reshape(shape))
        at += size
    return views


def value(plan: TreePlan, arrays: Sequence[Array]) -> Any:
    """The value of a plan's contraction alone (an array of its own; `forward_plan`'s plans):
    its `_Program` where it has one, else its steps walked on a pool's buffers."""
    if plan.shapes is None:
        return _value(plan, arrays)
    return _value(plan, _operands(plan, arrays)).reshape(plan.out_shape)


def _operands(plan: TreePlan, arrays: Sequence[Array]) -> list[Any]:
    """The operands without the letters of size 1 that the plan dropped (views, as a rule)."""
    return [x.reshape(shape) for x, shape in zip(arrays, cast("tuple[Shape, ...]", plan.shapes))]


def _gradients(plan: TreePlan, grads: dict[int, Any]) -> dict[int, Any]:
    """The gradient arrays seen without the letters of size 1 the plan dropped."""
    shapes = cast("tuple[Shape, ...]", plan.shapes)
    return {k: None if g is None else g.reshape(shapes[k]) for k, g in grads.items()}


def _restore(arrays: Sequence[Array], grads: dict[int, Any], views: dict[int, Any]) -> None:
    """Each gradient in its operand's shape: a new one reshaped; one written into a copy (a
    caller's array that no reshape views) copied back."""
    for k, g in grads.items():
        r = views[k]
        if g is None:
            grads[k] = r.reshape(arrays[k].shape)
        elif not np.may_share_memory(r, g):
            g[...] = r.reshape(g.shape)


def _dropped(shape: Shape) -> Shape:
    return tuple(d for d in shape if d != 1)


# -- other libraries' arrays: the plan's steps in the standard's operations ----------------


def lib_forward(plan: TreePlan, xp: ModuleType, arrays: Sequence[Any]) -> tuple[Any, dict[int, Any]]:
    """`forward` with `keep` on arrays of another library (`xp`: torch, CuPy, JAX,
    array-api-strict; not dask's blocks): the value and the intermediates the sweep reads.
    Each product runs as the plan lays it out (`_Pair.lib`), so the layouts chosen for the
    forward and the sweep together save the library's copies as they save numpy's; no
    buffers, no programs (the library allocates)."""
    vals: dict[int, Any] = dict(enumerate(_lib_operands(plan, xp, arrays)))
    kept = plan.kept
    for p in plan.forward:
        xs = [vals[a] if a in kept else vals.pop(a) for a in p.args]
        vals[p.result] = p.run.lib(xp, *xs)  # type: ignore[attr-defined]
    result = vals.pop(plan.forward[-1].result)
    if plan.shapes is not None:
        result = xp.reshape(result, plan.out_shape)
    return result, {k: v for k, v in vals.items() if k in kept}


def lib_sweep(
    plan: TreePlan,
    xp: ModuleType,
    g: Any,
    arrays: Sequence[Any],
    kept: dict[int, Any],
    spread_as: Callable[[Any, str, str, Shape], Any],
) -> dict[int, Any]:
    """`sweep` on arrays of another library (`lib_forward`'s `kept`): each differentiated
    operand's gradient, by operand. `spread_as(x, src, dst, shape)` puts a pullback's product
    over its operand's broadcast or repeated letters (the caller's: it sits above this module)."""
    operands = _lib_operands(plan, xp, arrays)
    if plan.shapes is not None:
        g = xp.reshape(g, _dropped(plan.out_shape))
    vals: dict[int, Any] = dict(enumerate(operands))
    vals.update(kept)
    n = plan.n
    cts: dict[int, Any] = {plan.forward[-1].result: g}
    grads: dict[int, Any] = {}
    step_, ct = -1, g
    for p in plan.backward:
        if p.step != step_:
            step_ = p.step
            ct = cts.pop(n + step_)
        r = p.run.lib(xp, *(ct if i == _COTANGENT else vals[i] for i in p.args))  # type: ignore[attr-defined]
        if p.target >= n:
            cts[p.target] = r
        elif p.spread is None:
            grads[p.target] = r
        elif p.turn is not None:
            grads[p.target] = xp.permute_dims(r, p.turn)
        else:
            grads[p.target] = spread_as(r, *p.spread)
        for i in p.release:
            if i != _COTANGENT:
                vals.pop(i, None)
    if plan.shapes is not None:
        grads = {k: xp.reshape(r, tuple(arrays[k].shape)) for k, r in grads.items()}
    return grads


def _lib_operands(plan: TreePlan, xp: ModuleType, arrays: Sequence[Any]) -> list[Any]:
    """`_operands` on another library's arrays."""
    if plan.shapes is None:
        return list(arrays)
    return [xp.reshape(x, shape) for x, shape in zip(arrays, plan.shapes)]


# -- the program of a value-and-gradient -------------------------------------------------------

PROGRAMS = True
"""Whether `value_and_grad` runs a plan's `_Program` (False: each call walks the plan's steps)."""

PROGRAM_INPUTS = 1 << 18
"""The most elements the operands of a plan run as a `_Program` hold together: the program copies
them in and its gradients out (two passes over them, and buffers of twice their bytes kept
between calls), which the tiny steps of a network repay many times, larger operands not. At
2^18 (2 MiB of float64), the MPS energy of benchmark m1 (L = 32, D = 32: 126,000 elements of
operands) runs as programs: its jitted value-and-gradient 10.3 -> 6.4 ms and forward 2.8 -> 1.9
ms (2026-11-28, separate processes alternating, two threads), for a first call's peak 5.9 MiB
higher (19.8 -> 25.7 MiB, staging included; the benchmark's, one call: 12.6 -> 18.5 MiB) and
17.9 MiB kept between calls instead of 12.0 (pools and recycled memory); at 2^16 it walked
its steps."""


PROGRAM_VALUES = 1 << 21
"""The most elements the operands and intermediates of a plan run as a `_Program` hold together:
a program keeps a buffer for each (and for the sweep's cotangents) between calls, within
`POOL_BUDGET` (2^21 complex128 elements: 32 MiB); a larger one would be let go after each call
and made again at the next, at more cost than walking the steps (benchmark n4's values: 2^20)."""


PROGRAM_STEPS = 8
"""The fewest pairwise steps a forward alone (`forward_plan`) has to run as a `_Program`: a program
saves a few microseconds of Python a step and keeps its buffers between calls, so a short
contraction (a staged program of many three- or four-operand einsums, as quimb's contraction
of benchmark m2 makes) walks its steps instead (there, 23 programs kept 24 MiB for 0.2 ms)."""


_C_EINSUM: Callable[..., Any] = getattr(getattr(np, "_core", np).multiarray, "c_einsum", np.einsum)
"""numpy.einsum's C loop, where this numpy has it where numpy 2 does: numpy.einsum's checks of
its arguments are Python calls (six per call), which a program's one-pass steps do without.
(A private name, so numpy.einsum where it is not there.)"""


class _Builder:
    """A `_Program` being made: its numpy calls (`ops`, each ``(function, arguments)``) and the
    pool its buffers come from. A step's ``emit`` takes the decisions its ``__call__`` takes
    at every call (layouts, views or copies, buffers), once, on the program's own arrays."""

    __slots__ = ("compiled", "contractions", "copied", "ops", "pool")

    def __init__(self, pool: _Pool) -> None:
        self.pool = pool
        self.ops: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.copied = 0  # the elements the steps copy (as `TreePlan.copies` counts them)
        self.contractions = 0  # the products that sum a letter (not outer products)
        self.compiled: list[tuple[int, tuple[int, int, int]]] = []  # compiled copies: op, kernel

    def copy(self, out: Any, view: Any, counted: bool = True) -> None:
        """`_copy_into`, bound: a compiled copy (`compiled_copy`: its kernel compiled with the
        program's others, `finish`), a gather through its index, or numpy's strided copy;
        `counted` adds it to the steps' copies (a gradient put into its place is not)."""
        self.copied += view.size if counted else 0
        call = _copy_call(out, view)
        if call is not None:
            self.compiled.append((len(self.ops), call[0]))
            self.ops.append((_copy_unbound, call[1]))
            return
        index = _gather_index(view.shape, view.strides, view.itemsize) if view.size >= 256 else None
        if index is not None:
            flat = np.ravel(view, order="K")
            if np.may_share_memory(flat, view):  # (a view of the buffer, read at every run)
                self.ops.append((flat.take, (index, None, out.reshape(-1), "clip")))
                return
        self.ops.append((out.__setitem__, (Ellipsis, view)))  # (numpy.copyto's dispatch: a Python call)

    def finish(self) -> list[tuple[Callable[..., Any], tuple[Any, ...]]]:
        """The program's calls, its compiled copies bound to their kernels (those not compiled
        yet compiled together: `kernels.copy_kernels`)."""
        kernel = kernels.copy_kernels([key for _, key in self.compiled])
        for (i, _), fn in zip(self.compiled, kernel):
            self.ops[i] = (fn, self.ops[i][1])
        return self.ops


def _copy_unbound(src: Any, dst: Any) -> None:
    """A compiled copy whose kernel `_Builder.finish` has not bound yet (never called)."""
    raise AssertionError("a program's copy was not bound to its kernel")


class _Program:
    """A value-and-gradient of one plan bound to buffers of its own: every step of the forward
    and the sweep made once into a numpy call on fixed views (``numpy.dot(a, b, out)``, a
    copy), so that a call runs them in turn with no decision, look-up or shape computed per
    step. A call copies the operands into the program's input buffers, runs the calls, and
    copies the gradients out of its gradient buffers (and returns a copy of the value): what
    it returns is never the program's memory. Made per plan and `key` (the operands'
    dtypes); its buffers are a `_Pool`'s, so that `release_pools` (the pool's
    `generation`) retires it and the pools' `POOL_BUDGET` bounds what programs keep."""

    __slots__ = (
        "contractions",
        "copied",
        "generation",
        "grad_block",
        "ins",
        "key",
        "ops",
        "outs",
        "pool",
        "value",
    )

    def __init__(self, key: tuple[Any, ...]) -> None:
        self.key = key
        self.pool = _Pool(least=0)  # every buffer, however small, is the program's
        self.generation = self.pool.generation
        self.ins: list[Any] = []  # the operands' buffers
        self.outs: list[tuple[int, Any]] = []  # the gradients' buffers, by operand
        self.grad_block: Any = None  # ... as one flat array, in `plan.wrt`'s order
        self.ops: list[tuple[Callable[..., Any], tuple[Any, ...]]] = []
        self.value: Any = None
        self.copied = 0  # the elements its steps copy, and its products that sum a letter
        self.contractions = 0

    @staticmethod
    def build(plan: TreePlan, key: tuple[Any, ...], arrays: Sequence[Array]) -> _Program | None:
        """The program of `plan` for operands like `arrays` (their dtypes; their shapes without
        the letters of size 1 the plan dropped), or None where a dtype holds objects (not bytes
        to view). Its gradients are of the operands' common dtype."""
        dtype = np.result_type(*arrays)
        if any(np.dtype(d).hasobject for d in (*key, dtype)):
            return None
        shapes = [x.shape for x in arrays] if plan.shapes is None else plan.shapes
        self = _Program(key)
        pool = self.pool
        build = _Builder(pool)
        self.ins = [pool.get(shape, x.dtype) for shape, x in zip(shapes, arrays)]
        pool.bound = [self.ops, self.ins, self.outs]  # (emptied when the pool lets its buffers go)
        n = plan.n
        # the gradients' buffers: views of one block, laid end to end in `plan.wrt`'s order
        self.grad_block = pool.get((sum(arrays[k].size for k in plan.wrt),), dtype)
        gbuf = dict(zip(plan.wrt, end_to_end(self.grad_block, [shapes[k] for k in plan.wrt])))
        written: set[int] = set()
        vals: dict[int, Any] = dict(enumerate(self.ins))
        kept = plan.kept
        last = plan.forward[-1].result
        for p in plan.forward:
            xs = [vals[a] if a in kept else vals.pop(a) for a in p.args]
            vals[p.result] = cast(Any, p.run).emit(build, *xs)
            if p.result != last:
                for a, x in zip(p.args, xs):
                    # (an operand as given stays: the sweep reads it, as the forward's caller's)
                    if a not in kept and a != p.result and (a >= n or x is not self.ins[a]):
                        pool.put(x)
        self.value = vals.pop(last)
        vals = dict(enumerate(self.ins)) | {k: v for k, v in vals.items() if k in kept}
        seed = np.ones((), np.result_type(self.value))  # (not the pool's: never written over)
        cts: dict[int, Any] = {last: seed}
        step = -1
        ct = seed
        for q in plan.backward:
            run = cast(Any, q.run)
            if q.step != step:
                step = q.step
                ct = cts.pop(n + step)
            args = [ct if i == _COTANGENT else vals[i] for i in q.args]
            if q.target >= n:
                cts[q.target] = run.emit(build, *args)
            else:
                out = gbuf[q.target]
                written.add(q.target)
                r = run.emit(build, *args, dest=out) if q.direct else run.emit(build, *args)
                if r is not out:
                    s = r
                    if q.turn is not None:
                        s = r.transpose(q.turn)
                    elif q.spread is not None:  # a broadcast along the letters only `q.target` has
                        s = spread(r, *q.spread)
                        assert s.base is not None, "a broadcast is a view of the product"
                    build.copy(out, s, counted=False)
                    pool.put(r)  # (the product's own buffer, which a broadcast view may not reach)
            for i in q.release:
                pool.put(ct if i == _COTANGENT else vals.pop(i))
        for k in plan.wrt:
            if k not in written:  # (no pullback reaches it: a zero)
                gbuf[k][...] = 0
            self.outs.append((k, gbuf[k]))
        self.ops[:] = build.finish()
        self.copied, self.contractions = build.copied, build.contractions
        return self

    def _compute(self, arrays: Sequence[Array]) -> None:
        """The operands copied into the program's buffers (any shape of each operand's elements:
        with or without the letters of size 1 the plan dropped), and every call run."""
        for buf, x in zip(self.ins, arrays):
            buf[...] = x.reshape(buf.shape)
        for fn, args in self.ops:
            fn(*args)

    def run_into(self, arrays: Sequence[Array], flat: Any, start: int) -> Any:
        """`run`, the gradients written into ``flat[start:]`` laid end to end in `plan.wrt`'s
        order (each raveled: the layout of `einsum_vg`'s result) by one copy of the gradients'
        block (a hundred gradients: 65 -> 15 µs)."""
        self._compute(arrays)
        flat[start : start + self.grad_block.size] = self.grad_block
        return self.value.copy()

    def run(self, arrays: Sequence[Array], grads: dict[int, Any]) -> Any:
        """The value (an array of its own); the gradients written into `grads`."""
        self._compute(arrays)
        for k, buf in self.outs:
            out = grads[k]
            if out is None:
                grads[k] = buf.copy()
            else:
                out[...] = buf
        return self.value.copy()


def _program(plan: TreePlan, arrays: Sequence[Array]) -> _Program | None:
    """The plan's program for operands like `arrays`, taken out of those it keeps (hand it back
    with `_program_in`) or made; None where the plan runs no program."""
    if not (PROGRAMS and plan.programmable):
        return None
    key = tuple([x.dtype for x in arrays])
    program = _program_out(plan, key)
    return _Program.build(plan, key, arrays) if program is None else program


def _program_out(plan: TreePlan, key: tuple[Any, ...]) -> _Program | None:
    """A program of `plan`'s for `key` that no call runs now and whose buffers were not let go."""
    programs = plan.programs
    for _ in range(len(programs)):
        try:
            program = programs.pop()
        except IndexError:  # (another thread took it)
            return None
        if program.pool.generation != program.generation:
            continue  # its buffers were let go (`release_pools`): dropped
        if program.key == key:
            program.pool.waiting = False
            return program
        programs.insert(0, program)
    return None


def _program_in(plan: TreePlan, program: _Program) -> None:
    """Keep `program` for the plan's next calls, if its buffers fit `POOL_BUDGET` beside the
    other waiting pools (else they go, as a pool's do)."""
    kept = sum([p.held for p in list(_POOLS) if p.waiting])
    if kept + program.pool.held <= POOL_BUDGET:
        program.pool.waiting = True
        plan.programs.append(program)
    else:
        program.pool.release()
