"""Planning contractions larger than memory: paths, slices, schedules and their costs.

Pure planning on letters and sizes; nothing here touches an array.

A contraction is *sliced* when its path has an intermediate larger than the
memory limit: a few indices are cut into chunks, every combination of chunks
(a *slice*) is contracted along the same path, and the results are summed (or,
for an output index, written side by side). Each slice's intermediates are
smaller by the product of the chunk counts of the sliced letters they hold.

* `plan` chooses a path and the slices: the path the strategy finds when one
  fits the limit, else slices found by `greedy_slices` and, when cotengra is
  installed, by cotengra's `SliceFinder`, each coarsened to fewer chunks that
  still fit (`coarsen`); the plan with fewer flops (forward plus gradient) wins.
* `object_path` asks a path-optimizer object (opt_einsum's ``RandomGreedy``,
  cotengra's ``HyperOptimizer``) for its path once per contraction, keyed by the
  object's identity in a weak table, so the object is never asked twice and
  never kept alive by einad.
* `schedule` turns a path and its slices into the steps an executor runs: the
  steps that no sliced letter reaches are *hoisted* (computed once), the others
  are run once per slice. `estimate` counts the flops and the peak memory of the
  forward and of the gradient sweep (which recomputes each slice's
  intermediates) on that schedule.
* `describe` bundles it for `einad.contract_path` and `einad explain`.

"The memory limit" counts elements of intermediates: the operands, the result
and the gradients are the caller's and are not counted.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import itertools
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeAlias

import numpy as np
import opt_einsum as oe
from opt_einsum.contract import PathInfo

from .aliases import MemoryLimit, Path
from .cluster import Layout
from .errors import EinsumError
from .executor import _pair_plan, merges_without_copy
from .subscripts import pairwise_steps, vjp_operands


class _Deferred:
    """A module imported when first read: cotengra takes ~0.1 s to import (a quarter of einad's
    own import), and only the planning of a sliced contraction reads it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self.name), attr)


# optional: pip install 'einad[tn]' (None where absent)
cotengra: Any = _Deferred("cotengra") if importlib.util.find_spec("cotengra") is not None else None

Slices: TypeAlias = tuple[tuple[str, int], ...]
"""The sliced letters with their number of chunks, in order of first appearance."""

Shapes: TypeAlias = tuple[tuple[int, ...], ...]


def _prod(xs: Iterator[int] | Sequence[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out


def check_limit(memory_limit: MemoryLimit) -> MemoryLimit:
    """`memory_limit` checked, with opt_einsum's -1 ("no limit") read as None.

    The public functions call it first, so that every call gets the same error for a
    bad limit (however many operands) and -1 plans, caches and stages as None does.

    Raises:
        EinsumError: If it is not None, -1, ``"max_input"`` or a positive int.
    """
    if memory_limit is None or memory_limit == "max_input":
        return memory_limit
    if isinstance(memory_limit, (bool, np.bool_)) or not isinstance(memory_limit, (int, np.integer)):
        raise EinsumError(
            f"memory_limit must be a number of elements, 'max_input' or -1 (no limit), got {memory_limit!r}"
        )
    memory_limit = int(memory_limit)  # a numpy integer too (a size computed with numpy), as a key
    if memory_limit == -1:
        return None
    if memory_limit < 1:
        raise EinsumError(f"memory_limit must be at least 1 element (or -1: no limit), got {memory_limit}")
    return memory_limit


def resolve_limit(memory_limit: MemoryLimit, shapes: Shapes) -> int | None:
    """The limit in elements (``"max_input"`` is the largest operand's size; None: no limit)."""
    limit = check_limit(memory_limit)
    if isinstance(limit, str):  # "max_input"
        return max((_prod(s) for s in shapes), default=1)
    return limit


def _text(inputs: tuple[str, ...], output: str) -> str:
    return ",".join(inputs) + "->" + output


def oe_path(
    inputs: tuple[str, ...], output: str, shapes: Shapes, optimize: Any, limit: int | None = None
) -> Path:
    """opt_einsum's path for the contraction (an `EinsumError` when it cannot plan it)."""
    text = _text(inputs, output)
    try:
        path, _ = oe.contract_path(text, *shapes, shapes=True, optimize=optimize, memory_limit=limit)
    except (ValueError, KeyError, TypeError) as err:
        raise EinsumError(f"cannot plan the contraction {text!r} with optimize={optimize!r}: {err}") from None
    except RuntimeError:  # e.g. 'dp' finds no path when an operand is empty
        path, _ = oe.contract_path(text, *shapes, shapes=True, optimize="greedy", memory_limit=limit)
    return tuple(tuple(int(i) for i in step) for step in path)


# -- optimizer objects: asked once per contraction, remembered by identity ----------------

_object_paths: dict[int, dict[tuple[Any, ...], Path]] = {}  # id(optimizer) -> its answers
_object_lock = threading.Lock()


def object_path(optimizer: Any, inputs: tuple[str, ...], output: str, shapes: Shapes) -> Path:
    """The path `optimizer` (a PathOptimizer or any opt_einsum-style callable) gives.

    The answer is remembered per object and per contraction, so einad never asks
    the same object twice about one contraction. The table is keyed by the
    object's identity (not its equality) and an entry goes when its object is
    collected, so einad keeps no optimizer alive. Asking an object about a
    second, different contraction is the object's business: opt_einsum's
    ``RandomGreedy`` refuses, which surfaces as an `EinsumError`.
    """
    key = (inputs, output, shapes)
    with _object_lock:
        table = _object_paths.get(id(optimizer))
        if table is None:
            table = {}
            try:
                weakref.finalize(optimizer, _object_paths.pop, id(optimizer), None)
                _object_paths[id(optimizer)] = table
            except TypeError:  # not weakly referenceable: nothing is remembered
                pass
        path = table.get(key)
    if path is None:
        path = oe_path(inputs, output, shapes, optimizer)
        with _object_lock:
            table[key] = path
    return path


# -- sizes along a path ---------------------------------------------------------------------


def _part(c: str, sizes: dict[str, int], chunks: dict[str, int]) -> int:
    """The size of letter `c` in the largest chunk."""
    m = chunks.get(c, 1)
    return -(-sizes[c] // m)


def _size(spec: str, sizes: dict[str, int], chunks: dict[str, int]) -> int:
    return _prod(_part(c, sizes, chunks) for c in spec)


def _steps(
    inputs: tuple[str, ...], output: str, path: Path
) -> tuple[tuple[tuple[int, ...], tuple[str, ...], str], ...]:
    return pairwise_steps(inputs, output, path)


def largest(
    inputs: tuple[str, ...], output: str, path: Path, sizes: dict[str, int], chunks: dict[str, int]
) -> int:
    """The largest intermediate (every step's result but the last) of one slice, in elements."""
    steps = _steps(inputs, output, path)
    return max((_size(out, sizes, chunks) for _, _, out in steps[:-1]), default=0)


def _flop(ins: tuple[str, ...], out: str, sizes: dict[str, int]) -> int:
    letters = set("".join(ins)) | set(out)
    inner = bool(set("".join(ins)) - set(out))
    return int(oe.helpers.flop_count(letters, inner, len(ins), sizes))


def _forward_flops(
    inputs: tuple[str, ...], output: str, path: Path, sizes: dict[str, int], chunks: dict[str, int]
) -> int:
    """Total forward flops of the sliced contraction (hoisted steps counted once)."""
    return estimate(
        schedule(inputs, output, _shapes(inputs, sizes), path, _slices(inputs, chunks))
    ).forward_flops


def _shapes(inputs: tuple[str, ...], sizes: dict[str, int]) -> Shapes:
    return tuple(tuple(sizes[c] for c in s) for s in inputs)


def _slices(inputs: tuple[str, ...], chunks: dict[str, int]) -> Slices:
    order = dict.fromkeys("".join(inputs))
    return tuple((c, chunks[c]) for c in order if chunks.get(c, 1) > 1)


# -- finding slices ---------------------------------------------------------------------------


def greedy_slices(
    inputs: tuple[str, ...],
    output: str,
    sizes: dict[str, int],
    path: Path,
    limit: int,
    replan: Callable[[dict[str, int]], Path | None] | None = None,
) -> tuple[Path, dict[str, int]]:
    """Slice until every intermediate of one slice fits `limit`.

    Each round halves the chunk size of the letter that most reduces the
    largest intermediate (ties: the smallest total excess over the limit, then
    the fewest flops, then the first letter). `replan(chunks)`, when given,
    may return a better path for the sliced sizes (re-planning with
    opt_einsum), which is adopted when its largest intermediate is smaller.
    """
    chunks: dict[str, int] = {}
    order = list(dict.fromkeys("".join(inputs)))
    while True:
        steps = _steps(inputs, output, path)
        big = [out for _, _, out in steps[:-1] if _size(out, sizes, chunks) > limit]
        if not big:
            return path, chunks
        cands = [c for c in order if any(c in out for out in big) and _part(c, sizes, chunks) > 1]
        if not cands:  # cannot happen for limit >= 1: every letter can be cut to size 1
            raise EinsumError(
                f"no slicing fits the contraction {_text(inputs, output)!r} in {limit} elements"
            )

        scores = {
            c: _score(inputs, output, sizes, path, limit, _halve(c, sizes, chunks), order.index(c))
            for c in cands
        }
        chunks = _halve(min(cands, key=scores.__getitem__), sizes, chunks)
        if replan is not None:
            better = replan(chunks)
            if better is not None and largest(inputs, output, better, sizes, chunks) < largest(
                inputs, output, path, sizes, chunks
            ):
                path = better


def _halve(c: str, sizes: dict[str, int], chunks: dict[str, int]) -> dict[str, int]:
    """`chunks` with letter `c` cut into chunks of half the size."""
    t = -(-_part(c, sizes, chunks) // 2)
    return {**chunks, c: -(-sizes[c] // t)}


def _score(
    inputs: tuple[str, ...],
    output: str,
    sizes: dict[str, int],
    path: Path,
    limit: int,
    chunks: dict[str, int],
    rank: int,
) -> tuple[int, int, int, int]:
    """How good slicing `chunks` is: its largest intermediate, its total excess over the
    limit, its flops (then the letter's rank, to break ties)."""
    outs = [_size(out, sizes, chunks) for _, _, out in _steps(inputs, output, path)[:-1]]
    excess = sum(max(0, s - limit) for s in outs)
    return max(outs, default=0), excess, _forward_flops(inputs, output, path, sizes, chunks), rank


def cotengra_slices(
    inputs: tuple[str, ...], output: str, sizes: dict[str, int], path: Path, limit: int
) -> dict[str, int] | None:
    """cotengra's `SliceFinder` on the contraction tree of `path` (each sliced letter cut to
    size 1; `coarsen` merges chunks back). None when cotengra is absent or fails."""
    if cotengra is None:
        return None
    try:
        tree = cotengra.ContractionTree.from_path(
            list(inputs), output, dict(sizes), path=[list(p) for p in path]
        )
        sliced = tree.slice(target_size=max(limit, 1), seed=0)
        letters = list(sliced.sliced_inds)
    except (ValueError, KeyError, TypeError, RuntimeError, IndexError, AssertionError, ImportError):
        return None  # (an ImportError: cotengra found but broken, at its first use)
    return {c: sizes[c] for c in letters if sizes[c] > 1}


def coarsen(
    inputs: tuple[str, ...],
    output: str,
    sizes: dict[str, int],
    path: Path,
    limit: int,
    chunks: dict[str, int],
) -> dict[str, int]:
    """Merge chunks back while every intermediate still fits: each round cuts the chunk
    count of the letter where that removes the most slices (to the fewest chunks that fit)."""
    chunks = {c: m for c, m in chunks.items() if m > 1}
    while True:
        best: tuple[float, str, int] | None = None
        for c in sorted(chunks):
            lo, hi = 1, chunks[c]  # the smallest m in [lo, hi] that fits (hi does)
            while lo < hi:
                mid = (lo + hi) // 2
                if largest(inputs, output, path, sizes, {**chunks, c: mid}) <= limit:
                    hi = mid
                else:
                    lo = mid + 1
            gain = chunks[c] / hi
            if hi < chunks[c] and (best is None or gain > best[0]):
                best = (gain, c, hi)
        if best is None:
            return chunks
        _, c, m = best
        chunks = {k: v for k, v in {**chunks, c: m}.items() if v > 1}


def _is_pairwise(path: Path) -> bool:
    return all(len(step) <= 2 for step in path)


@functools.lru_cache(maxsize=1024)
def plan(
    inputs: tuple[str, ...], output: str, shapes: Shapes, optimize: str | Path, memory_limit: MemoryLimit
) -> tuple[Path, Slices]:
    """The path and the slices for a contraction under `memory_limit`.

    `optimize` is an opt_einsum strategy name or an explicit path (an optimizer
    object is turned into its path by `object_path` first). Without a limit, or
    when the strategy's path (or opt_einsum's memory-limited one) keeps every
    intermediate within it, nothing is sliced. Otherwise letters are sliced:
    by `greedy_slices` (re-planning with opt_einsum for a strategy name; an
    explicit path is kept) and, where installed, by cotengra's finder along the
    path; the cheaper of the two plans is taken.
    """
    sizes: dict[str, int] = {}
    for spec, shape in zip(inputs, shapes):
        sizes.update(zip(spec, shape))
    explicit = isinstance(optimize, tuple)
    path = optimize if isinstance(optimize, tuple) else oe_path(inputs, output, shapes, optimize)
    limit = resolve_limit(memory_limit, shapes)
    if limit is None or len(inputs) <= 2 or 0 in sizes.values():
        return path, ()
    if largest(inputs, output, path, sizes, {}) <= limit:
        return path, ()
    if not explicit:
        limited = oe_path(inputs, output, shapes, optimize, limit)
        if _is_pairwise(limited) and largest(inputs, output, limited, sizes, {}) <= limit:
            return limited, ()
    # the greedy choice, and cotengra's where installed: the cheaper plan wins (on a
    # tie the greedy one, so that a plan does not depend on cotengra needlessly)
    replan = None if explicit else _replanner(inputs, output, sizes, optimize, limit)
    gpath, greedy = greedy_slices(inputs, output, sizes, path, limit, replan)
    plans = [(gpath, coarsen(inputs, output, sizes, gpath, limit, greedy))]
    found = cotengra_slices(inputs, output, sizes, path, limit)
    if found is not None:
        plans.append((path, coarsen(inputs, output, sizes, path, limit, found)))
    path, chunks = min(plans, key=lambda pc: _cost(inputs, output, shapes, pc[0], _slices(inputs, pc[1])))
    return path, _slices(inputs, chunks)


def _cost(
    inputs: tuple[str, ...], output: str, shapes: Shapes, path: Path, slices: Slices
) -> tuple[int, int]:
    """What a plan costs: the flops of a forward and a gradient, then the number of slices."""
    c = estimate(schedule(inputs, output, shapes, path, slices))
    return c.forward_flops + c.gradient_flops, c.n_slices


def _replanner(
    inputs: tuple[str, ...], output: str, sizes: dict[str, int], strategy: Any, limit: int
) -> Callable[[dict[str, int]], Path | None]:
    def replan(chunks: dict[str, int]) -> Path | None:
        shapes = tuple(tuple(_part(c, sizes, chunks) for c in s) for s in inputs)
        return oe_path(inputs, output, shapes, strategy)

    return replan


# -- the schedule an executor runs ----------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One step of a schedule: contract the values `args` (ids) by ``ins -> out`` into id `result`."""

    args: tuple[int, ...]
    result: int
    ins: tuple[str, ...]
    out: str


@dataclass(frozen=True)
class Schedule:
    """How to run a sliced contraction.

    Ids ``0..n-1`` are the operands, ``n + t`` is the result of step t.
    `hoisted` steps depend on no sliced letter and run once; `looped` steps run
    once per slice. `bounds` holds, per sliced letter, its chunks as
    ``(start, stop)`` ranges; a slice is one chunk of every sliced letter.
    """

    inputs: tuple[str, ...]
    output: str
    sizes: tuple[tuple[str, int], ...]
    slices: Slices
    steps: tuple[Step, ...]
    hoisted: tuple[int, ...]
    looped: tuple[int, ...]
    varies: frozenset[int]
    bounds: tuple[tuple[tuple[int, int], ...], ...]

    @property
    def n_slices(self) -> int:
        """The number of slices."""
        return _prod(len(b) for b in self.bounds)

    def ranges(self) -> Iterator[dict[str, tuple[int, int]]]:
        """Each slice as ``{letter: (start, stop)}``."""
        letters = [c for c, _ in self.slices]
        for combo in itertools.product(*self.bounds):
            yield dict(zip(letters, combo))

    def slice_ranges(self, i: int) -> dict[str, tuple[int, int]]:
        """Slice `i` (in the order `ranges` yields them) as ``{letter: (start, stop)}``."""
        out: dict[str, tuple[int, int]] = {}
        for (c, _), bounds in zip(reversed(self.slices), reversed(self.bounds)):
            i, r = divmod(i, len(bounds))
            out[c] = bounds[r]
        return {c: out[c] for c, _ in self.slices}

    @staticmethod
    def index(spec: str, ranges: dict[str, tuple[int, int]]) -> tuple[slice, ...]:
        """The basic index that cuts an array indexed by `spec` to the slice `ranges`."""
        return tuple(slice(*ranges[c]) if c in ranges else slice(None) for c in spec)

    def needs(self, leaves: frozenset[int]) -> frozenset[int]:
        """The ids whose value depends on one of the operands `leaves`."""
        need = set(leaves)
        for st in self.steps:
            if any(a in need for a in st.args):
                need.add(st.result)
        return frozenset(need)

    def rerun(self, need: frozenset[int]) -> frozenset[int]:
        """The looped steps a gradient sweep (for the ids `need`) recomputes in each slice.

        A step's pullback to one operand reads the values of its other operands, so
        a value is read when a sibling needs a cotangent; the steps that produce
        those values, and the steps those read, are rerun. The last step never is
        (its result is the contraction's), nor, when only some operands are
        differentiated, the steps no pullback reads.
        """
        producer = {st.result: t for t, st in enumerate(self.steps)}
        looped = set(self.looped)
        read: set[int] = set()
        for t in self.looped:
            st = self.steps[t]
            if st.result in need:
                read.update(a for a in st.args if any(b in need for b in st.args if b != a))
        rerun: set[int] = set()
        todo = [producer[a] for a in read if a in producer and producer[a] in looped]
        while todo:
            t = todo.pop()
            if t not in rerun:
                rerun.add(t)
                todo.extend(
                    producer[a] for a in self.steps[t].args if a in producer and producer[a] in looped
                )
        return frozenset(rerun)


def _bounds(d: int, m: int) -> tuple[tuple[int, int], ...]:
    """A letter of size `d` cut into `m` chunks whose sizes differ by at most one, the larger
    first: the slices a thread (or a chain of tasks) runs change shape once, where their
    buffers cannot serve the next slice (`rules.einsum._Scratch`), not at every other chunk."""
    q, r = divmod(d, m)
    return tuple((i * q + min(i, r), (i + 1) * q + min(i + 1, r)) for i in range(m))


@functools.lru_cache(maxsize=1024)
def schedule(inputs: tuple[str, ...], output: str, shapes: Shapes, path: Path, slices: Slices) -> Schedule:
    """The schedule of the contraction along `path` with `slices` (no slices: one pass)."""
    sizes: dict[str, int] = {}
    for spec, shape in zip(inputs, shapes):
        sizes.update(zip(spec, shape))
    n = len(inputs)
    sliced = {c for c, _ in slices}
    varies = {k for k, s in enumerate(inputs) if sliced & set(s)} if slices else set(range(n))
    work = list(range(n))
    steps: list[Step] = []
    for t, (positions, ins, out) in enumerate(pairwise_steps(inputs, output, path)):
        args = tuple(work[p] for p in positions)
        for p in sorted(positions, reverse=True):
            del work[p]
        work.append(n + t)
        steps.append(Step(args, n + t, ins, out))
        if any(a in varies for a in args):
            varies.add(n + t)
    hoisted = tuple(t for t, st in enumerate(steps) if st.result not in varies)
    looped = tuple(t for t, st in enumerate(steps) if st.result in varies)
    return Schedule(
        inputs=inputs,
        output=output,
        sizes=tuple(sorted(sizes.items())),
        slices=slices,
        steps=tuple(steps),
        hoisted=hoisted,
        looped=looped,
        varies=frozenset(varies),
        bounds=tuple(_bounds(sizes[c], m) for c, m in slices),
    )


# -- what a schedule costs --------------------------------------------------------------------


@dataclass(frozen=True)
class Costs:
    """Flops and peak memory (in elements) of the forward and of the gradient.

    The peaks count intermediates, cotangents and the transposing copies a matrix product
    makes of its operands, with `workers` slices in flight at once; `slice_forward_peak`
    and `slice_gradient_peak` are one slice's share.
    """

    n_slices: int
    largest: int  # the largest intermediate of one slice
    forward_flops: int
    gradient_flops: int
    forward_peak: int
    gradient_peak: int
    slice_forward_peak: int = 0
    slice_gradient_peak: int = 0
    workers: int = 1


def _spec_of(s: Schedule, i: int) -> str:
    n = len(s.inputs)
    return s.inputs[i] if i < n else s.steps[i - n].out


Strides: TypeAlias = dict[str, int]
"""Where each letter steps in memory, in elements (the layout of a value)."""


def _c_strides(order: str, parts: dict[str, int]) -> Strides:
    """The strides of a C-contiguous array whose axes are the letters `order`."""
    out: Strides = {}
    step = 1
    for c in reversed(order):
        out[c] = step
        step *= parts[c]
    return out


def _viewable(strides: Strides, order: list[str], groups: list[int], parts: dict[str, int]) -> bool:
    """Whether the axes `order` of a value laid out as `strides` merge into `groups` (axis
    counts per merged dimension) without a copy: the executor's own test, on letters."""
    return merges_without_copy(strides, parts, order, groups)


def _step_copies(
    ins: tuple[str, ...], out: str, parts: dict[str, int], layouts: tuple[Strides, ...]
) -> tuple[int, Strides]:
    """The elements a pairwise step allocates besides its result (the sums of letters only
    one operand has, and the copies that lay an operand out for one matrix product, as
    einsum's executor makes them), and the layout of its result."""
    if len(ins) != 2:
        return 0, _c_strides(out, parts)
    shapes = [tuple(parts[c] for c in spec) for spec in ins]
    plan = _pair_plan(ins[0], ins[1], out, shapes[0], shapes[1])
    (sa, sb), (la, lb) = ins, layouts
    if plan.swap:
        sa, sb, la, lb = sb, sa, lb, la
    ra = "".join(c for c in dict.fromkeys(sa) if c in sb or c in out)
    rb = "".join(c for c in dict.fromkeys(sb) if c in sa or c in out)
    extra = 0
    if plan.pre_a is not None:
        extra += _prod(parts[c] for c in ra)
        la = _c_strides(ra, parts)
    if plan.pre_b is not None:
        extra += _prod(parts[c] for c in rb)
        lb = _c_strides(rb, parts)
    if plan.outer or not plan.gemm:
        return extra, _c_strides(out, parts)  # a broadcast product, or one numpy.einsum pass
    batch = [c for c in out if c in ra and c in rb]
    inner = [c for c in ra if c in rb and c not in out]
    left = [c for c in out if c in ra and c not in rb]
    right = [c for c in out if c in rb and c not in ra]
    if plan.matvec and not (
        _viewable(la, list(ra), [len(ra)], parts) and _viewable(lb, list(rb), [len(rb)], parts)
    ):
        return extra, _c_strides(out, parts)  # not contiguous: numpy.einsum, no copy
    lead = [len(batch)] if batch else []
    if not _viewable(la, batch + left + inner, lead + [len(left), len(inner)], parts):
        extra += _prod(parts[c] for c in ra)
    if not _viewable(lb, batch + inner + right, lead + [len(inner), len(right)], parts):
        extra += _prod(parts[c] for c in rb)
    return extra, _c_strides("".join(batch + left + right), parts)


@functools.lru_cache(maxsize=1024)
def estimate(s: Schedule, workers: int = 1) -> Costs:
    """Count the schedule: the forward (hoisted steps once, looped steps per slice) and the
    gradient of every operand (per slice: recompute the looped intermediates but the last,
    then pull the cotangent back through each step; then the hoisted steps once). For a
    scalar contraction a reverse pass computes the gradients with the value, in the
    forward's pass over the slices (`einsum.sliced_vg_p`): nothing is recomputed.

    Peaks count the intermediates and cotangents alive at once and the copies the matrix
    products make, with `workers` slices in flight; not the operands, the result or the
    gradients.
    """
    sizes = dict(s.sizes)
    chunks = dict(s.slices)
    n = len(s.inputs)
    parts = {c: _part(c, sizes, chunks) for c in sizes}

    def full(i: int) -> int:
        return _prod(sizes[c] for c in _spec_of(s, i))

    def part(i: int) -> int:  # its size in one slice
        return _size(_spec_of(s, i), sizes, chunks) if i in s.varies else full(i)

    def repeat(st: Step) -> int:  # how often a looped step's full work is done
        letters = set("".join(st.ins)) | set(st.out)
        return _prod(m for c, m in chunks.items() if c not in letters)

    fused = bool(s.slices) and s.output == ""
    fwd = sum(_flop(s.steps[t].ins, s.steps[t].out, sizes) for t in s.hoisted)
    loop = [(s.steps[t], _flop(s.steps[t].ins, s.steps[t].out, sizes) * repeat(s.steps[t])) for t in s.looped]
    fwd += sum(f for _, f in loop)
    need = s.needs(frozenset(range(n)))
    rerun = s.rerun(need) if s.slices and not fused else frozenset()  # a sliced sweep recomputes
    grad = sum(f for t, (_, f) in zip(s.looped, loop) if t in rerun)
    for st, f in loop:
        grad += f * sum(1 for a in st.args if a in need)
    for t in s.hoisted:
        st = s.steps[t]
        grad += _flop(st.ins, st.out, sizes) * sum(1 for a in st.args if a in need)

    def looped_value(a: int) -> bool:
        return a >= n and a in s.varies

    # layouts: an operand's slice keeps the operand's strides; a step's result is laid
    # out as its matrix product leaves it
    layout: dict[int, Strides] = {k: _c_strides(spec, sizes) for k, spec in enumerate(s.inputs)}
    copies: dict[int, int] = {}
    for t, st in enumerate(s.steps):
        step_parts = parts if st.result in s.varies else sizes
        copies[t], layout[st.result] = _step_copies(
            st.ins, st.out, step_parts, tuple(layout[a] for a in st.args)
        )

    # forward peak: the hoisted values the loop reads, plus one slice's live values per worker
    consumer = {a: st.result for st in s.steps for a in st.args}
    feeds_loop = [s.steps[t].result for t in s.hoisted if consumer[s.steps[t].result] in s.varies]
    live = hoisted_peak = 0
    for t in s.hoisted:
        st = s.steps[t]
        hoisted_peak = max(hoisted_peak, live + copies[t] + full(st.result))
        live += full(st.result)
        live -= sum(full(a) for a in st.args if a >= n)
    kept = sum(full(a) for a in feeds_loop)
    live = slice_fwd = 0
    for t in s.looped:
        st = s.steps[t]
        slice_fwd = max(slice_fwd, live + copies[t] + part(st.result))
        live += part(st.result)
        live -= sum(part(a) for a in st.args if looped_value(a))
    forward_peak = max(hoisted_peak, kept + workers * slice_fwd)

    # gradient peak: every hoisted value and the cotangent accumulators of those the
    # loop reads stay; in a slice, its recomputed values, then the cotangents as
    # each step is pulled back (a step's value and cotangent go once it is done)
    base = sum(full(s.steps[t].result) for t in s.hoisted)
    base += sum(full(a) for a in feeds_loop if a in need)
    final = s.looped[-1] if s.looped else -1
    live = sum(part(s.steps[t].result) for t in s.looped if t != final)
    slice_grad = slice_fwd if fused else live
    for t in reversed(s.looped):
        st = s.steps[t]
        cots = sum(part(a) for a in st.args if a in need)
        pull = 0  # the copies of the largest pullback of this step
        for j, a in enumerate(st.args):
            if a in need and len(st.args) == 2:
                spec, kept_j, _ = vjp_operands(st.ins, st.out, j)
                other = st.args[1 - j]
                pulled, _ = _step_copies(spec, kept_j, parts, (_c_strides(st.out, parts), layout[other]))
                pull = max(pull, pulled)
        slice_grad = max(slice_grad, live + cots + pull)
        if t != final:
            live -= part(st.result)
        for a in st.args:
            if looped_value(a):
                live -= part(a) if a not in need else 0
    live = peak = 0
    for t in reversed(s.hoisted):
        st = s.steps[t]
        if st.result not in need:
            continue
        peak = max(peak, live + sum(full(a) for a in st.args if a in need) + copies[t])
        live += sum(full(a) for a in st.args if a in need and a >= n)
    gradient_peak = base + max(workers * slice_grad, peak)
    largest_part = max((part(st.result) for st in s.steps[:-1]), default=0)
    return Costs(
        n_slices=s.n_slices,
        largest=largest_part,
        forward_flops=fwd,
        gradient_flops=grad,
        forward_peak=forward_peak,
        gradient_peak=gradient_peak,
        slice_forward_peak=slice_fwd,
        slice_gradient_peak=slice_grad,
        workers=workers,
    )


threads: int | None = None
"""How many threads run the slices of a sliced contraction (forward and gradient sweep).

None (the default): as many as there are cores, but no more than keep ``threads`` slices'
intermediates within the memory limit together (so usually 1 when the slices were cut to
the limit); an int: that many, whatever the memory (each thread holds one slice's
intermediates). Set it as ``einad.slicing.threads = 2``."""


def workers(s: Schedule, memory_limit: MemoryLimit, gradient: bool = False) -> int:
    """The number of threads that run the slices of `s` (see `threads`)."""
    if s.n_slices <= 1:
        return 1
    if threads is not None:
        return max(1, min(int(threads), s.n_slices))
    sizes = dict(s.sizes)
    limit = resolve_limit(memory_limit, _shapes(s.inputs, sizes))
    c = estimate(s)
    per = c.slice_gradient_peak if gradient else c.slice_forward_peak
    fit = limit // max(per, 1) if limit is not None else 1
    return max(1, min(os.cpu_count() or 1, s.n_slices, fit))


# -- the report of einad.contract_path -----------------------------------------------------


class ContractionInfo(PathInfo):  # type: ignore[misc]  # opt_einsum is untyped
    """opt_einsum's `PathInfo` for the chosen path (on the full shapes), plus the slicing
    and the cost of the gradient.

    Attributes:
        sliced_indices: The letters sliced, in the subscripts' letters (empty: none); a
            dimension of a ``...`` shows as ``"...[i]"``, the ellipsis's i-th dimension
            (from the left).
        slices: ``{letter: number of chunks}`` for each sliced letter.
        n_slices: The number of slices (1 when nothing is sliced).
        memory_limit: The limit in elements, or None.
        slice_largest_intermediate: The largest intermediate of one slice, in elements.
        forward_flops: Flops of the (sliced) forward.
        gradient_flops: Flops of the gradient of every operand, after the forward
            (for a sliced contraction, the sweep that recomputes each slice).
        forward_peak: The most elements held in intermediates at once in the forward.
        gradient_peak: The same for the gradient (intermediates kept for it and
            cotangents, those of a slice's operands included before they are added into
            the gradients; not the operands, the result or the whole gradients). Peaks are
            totals: they may exceed `memory_limit`, which bounds each intermediate.
        threads: The threads the slices run on (`threads`); the peaks count one
            slice's intermediates per thread.
        scalar: Whether the result is a scalar (then a reverse pass computes the
            gradients with the value, and `gradient_flops` holds no recomputation).
        slice_forward_peak: What one slice of the forward holds at once, in elements
            (one thread's share of `forward_peak`).
        slice_gradient_peak: The same for one slice of the gradient.
        partial_size: The elements of one partial result when the slices run as tasks on
            an executor: every operand's gradient, the cotangents of the hoisted values the
            slices read, and the value.
        data_size: The elements an executor's workers are sent once per call: the
            operands and, for a gradient, the cotangent of the result.
        hoisted_size: The elements of the values of the steps that no sliced letter
            reaches (computed once per call, kept by every worker for a gradient).
        executor: Where `contract_path` was told the slices run (``"dask"``, the
            executor's class name), or None (the in-process thread pool).
        tasks: With an executor: the tasks the slices are cut into (`cluster.layout`);
            None without.
        batch: With an executor: the most slices in one task.
        reduction_depth: With a dask executor: the levels of the tree of sums of the
            tasks' partial results (0 for other executors, whose caller sums them).
        executor_threads: With an executor: the slices it runs at once (its worker
            threads).
        worker_peak: With an executor: the most elements one worker holds during a
            gradient, a bound: the data and the hoisted values, then per thread of the
            worker one slice (`slice_gradient_peak`) and one partial result, or, summing
            the partial results at the end, two of them (`set_layout`).
    """

    sliced_indices: tuple[str, ...]
    slices: dict[str, int]
    n_slices: int
    memory_limit: int | None
    slice_largest_intermediate: int
    forward_flops: int
    gradient_flops: int
    forward_peak: int
    gradient_peak: int
    threads: int
    scalar: bool
    slice_forward_peak: int
    slice_gradient_peak: int
    partial_size: int
    data_size: int = 0
    hoisted_size: int = 0
    executor: str | None = None
    tasks: int | None = None
    batch: int | None = None
    reduction_depth: int | None = None
    executor_threads: int | None = None
    worker_peak: int | None = None
    _layout: Layout | None = None

    def set_layout(self, layout: Layout) -> None:
        """Report the slices as run in tasks cut as `layout` says."""
        self._layout = layout
        self.executor = layout.name
        self.tasks, self.batch = layout.tasks, layout.batch
        self.reduction_depth, self.executor_threads = layout.depth, layout.threads
        # A thread adds its tasks' slices into one partial result, in place; a sum reads
        # two partial results and writes into the first; a futures executor's worker runs
        # one task (its caller sums).
        slices = layout.per_worker * (self.slice_gradient_peak + self.partial_size)
        sums = 2 * self.partial_size if layout.where == "dask" else 0
        self.worker_peak = self.data_size + self.hoisted_size + max(slices, sums)

    def __repr__(self) -> str:
        return str(super().__repr__()) + "\n" + "\n".join(self.summary())

    def summary(self) -> list[str]:
        """The slicing and gradient lines, as `einad explain` prints them."""
        lines = []
        if self.memory_limit is not None:
            if self.sliced_indices:
                cut = ", ".join(f"{c!r} into {m}" for c, m in self.slices.items())
                lines.append(
                    f"memory limit {self.memory_limit:,} elements: no pairwise path fits; "
                    f"sliced {cut} ({self.n_slices} slices)"
                )
            else:
                lines.append(f"memory limit {self.memory_limit:,} elements: fits, nothing sliced")
        if self.sliced_indices:
            lines.append(f"  largest intermediate per slice {self.slice_largest_intermediate:,} elements")
        lines.append(f"  forward   FLOPs {self.forward_flops:,}, peak {self.forward_peak:,} elements")
        lines.append(f"  gradient  FLOPs {self.gradient_flops:,}, peak {self.gradient_peak:,} elements")
        if self.sliced_indices and self.scalar:
            lines.append(
                "  (a scalar contraction: a reverse pass computes the gradients with the value, "
                "in one pass over the slices, recomputing nothing)"
            )
        elif self.sliced_indices:
            lines.append(
                "  (the gradient of every operand is one sweep over the slices: each slice's "
                "intermediates are recomputed and the cotangent pulled back through them)"
            )
        if self._layout is not None:
            lines.append(f"  {self._layout.describe()}")
            lines.append(
                f"  a worker holds at most {self.worker_peak:,} elements in the gradient: the data "
                f"({self.data_size:,}) and hoisted values ({self.hoisted_size:,}), and per thread one "
                f"slice (peak {self.slice_gradient_peak:,}) and one partial result ({self.partial_size:,})"
            )
        elif self.sliced_indices and self.threads > 1:
            lines.append(f"  slices run on {self.threads} threads (peaks: one slice per thread)")
        return lines


def _hoisted_read(s: Schedule) -> list[int]:
    """The hoisted values the looped steps read (a sweep sums their cotangents per slice)."""
    n = len(s.inputs)
    return sorted({a for t in s.looped for a in s.steps[t].args if a >= n and a not in s.varies})


def describe(
    inputs: tuple[str, ...],
    output: str,
    shapes: Shapes,
    path: Path,
    slices: Slices,
    memory_limit: MemoryLimit,
    labels: dict[str, str] | None = None,
) -> ContractionInfo:
    """The `ContractionInfo` of a planned contraction (`labels`: how to show letters the
    user did not write, such as an ellipsis's dimensions)."""
    show = labels or {}
    _, base = oe.contract_path(_text(inputs, output), *shapes, shapes=True, optimize=[list(p) for p in path])
    info: ContractionInfo = ContractionInfo.__new__(ContractionInfo)
    info.__dict__.update(base.__dict__)
    s = schedule(inputs, output, shapes, path, slices)
    sizes_ = dict(s.sizes)
    costs = estimate(s, workers(s, memory_limit, False))
    info.gradient_peak = estimate(s, workers(s, memory_limit, True)).gradient_peak
    info.threads = workers(s, memory_limit, True)
    info.scalar = output == ""
    info.sliced_indices = tuple(show.get(c, c) for c, _ in slices)
    info.slices = {show.get(c, c): m for c, m in slices}
    info.n_slices = costs.n_slices
    info.memory_limit = resolve_limit(memory_limit, shapes)
    info.slice_largest_intermediate = costs.largest
    info.slice_forward_peak = costs.slice_forward_peak
    info.slice_gradient_peak = costs.slice_gradient_peak
    data = sum(_prod(sh) for sh in shapes)
    read = sum(_prod(sizes_[c] for c in _spec_of(s, a)) for a in _hoisted_read(s))
    info.partial_size = data + (output == "") + read
    info.data_size = data + _prod(sizes_[c] for c in output)
    info.hoisted_size = sum(_prod(sizes_[c] for c in s.steps[t].out) for t in s.hoisted)
    info.forward_flops = costs.forward_flops
    info.gradient_flops = costs.gradient_flops
    info.forward_peak = costs.forward_peak
    if info.largest_intermediate is None:  # pragma: no cover - opt_einsum always sets it
        info.largest_intermediate = Decimal(0)
    return info
