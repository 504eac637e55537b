"""Executing a contraction, one step at a time, on any array library.

einsum.py plans a contraction (opt_einsum's path, `slicing`'s slices) and runs it
step by step; this module runs one step. Two executors, chosen by the arrays'
library (`arrays.namespace`):

* **numpy** (the default, benchmarked against opt_einsum): a pairwise step gets a
  `_PairPlan`, made once per subscripts and shapes (`_pair_plan`, cached), that runs
  it as one ``numpy.matmul`` on transposed views reshaped without copies where the
  strides allow (batched where the step has batch letters, which opt_einsum hands to
  the slower ``numpy.einsum``), with the operands swapped when that makes the
  product come out in the output's layout (and, for a tree plan that asks, looped over
  letters one operand has, so that an output order no block order gives comes out as
  it lies: `_prefix`); a memory-bound step (nothing kept on
  one side, or nothing contracted) is one ``numpy.einsum`` or broadcast multiply
  pass. `_run_pair` executes a plan, `_pair` plans and executes, `_raw_step` runs
  one step of a path (opt_einsum's expression for an explicit path's N-operand step).
* **any other library** (PyTorch, CuPy, dask.array, array-api-strict): `step`. One or
  two floating operands of distinct letters (not dask's blocks) run as a `_LibPlan`, made
  once per subscripts and shapes: the standard's ``sum``, ``permute_dims`` and ``reshape``
  around one ``matmul`` or broadcast multiply. Any other step goes to the library's own
  ``einsum`` where it has one, else to the contraction written with the array API
  standard's ``permute_dims``, ``reshape``, ``matmul``, ``sum`` and basic slicing alone:
  no strides assumed and nothing written in place (dask stays lazy); a diagonal's
  cotangent is written into zeros where the library writes in place (`spread_written`).
  It takes what the grammar produces: letters repeated inside an operand
  (diagonals), letters only one operand has (summed first), outer products, batch
  letters, 0-d operands, any number of operands, and any dtype numpy's einsum
  takes, with numpy's result dtype (operands of two dtypes are promoted first;
  integers narrower than 64 bits are contracted in int64 and cast back, which
  wraps as numpy does, since libraries sum them in a wider type or refuse).

`runner(xp)` is the step function for library `xp`: ``runner(xp)(ins, out, picked)``.
This module sits below einsum.py and never imports it.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import opt_einsum as oe

from .aliases import Array, MemoryLimit, Path, Shape
from .arrays import blocked, lib_dtype, np_dtype
from .memory import RECYCLE_MIN, recycled
from .subscripts import numpy_subscripts, unique

# -- numpy: tuned pairwise plans ------------------------------------------------------------
#
# opt_einsum chooses the path; each pairwise step runs as one `numpy.matmul`
# (batched where the step has batch indices, which opt_einsum would hand to the
# slower `numpy.einsum`), with the operands ordered so the result comes out in
# the requested layout whenever a swap can achieve it.


class _PairPlan:
    """How to contract two arrays as ``matmul((B, L, K), (B, K, R))``."""

    __slots__ = (
        "dims",
        "gemm",
        "groups_a",
        "groups_b",
        "head",
        "matvec",
        "mm_shape",
        "mm_size",
        "outer",
        "perm_a",
        "perm_b",
        "perm_out",
        "pre_a",
        "pre_b",
        "shape_a",
        "shape_b",
        "spec",
        "swap",
        "view_a",
        "view_b",
    )

    spec: str  # the step as "sa,sb->so", in einad's letters
    outer: bool  # nothing contracted: a broadcast multiply
    view_a: tuple[tuple[int, ...], Shape]  # (perm, shape) aligning each operand with the output
    view_b: tuple[tuple[int, ...], Shape]
    swap: bool  # exchange the operands so the product comes out in the output's layout
    pre_a: str | None  # one-operand einsum summing (or diagonalizing) letters only it has
    pre_b: str | None
    perm_a: tuple[int, ...]  # axes to (batch, left, inner) and (batch, inner, right)
    perm_b: tuple[int, ...]
    shape_a: Shape  # the matmul operands' shapes
    shape_b: Shape
    matvec: bool  # one side keeps no letter: memory bound
    gemm: bool  # whether matmul runs the step (else numpy.einsum does)
    dims: Shape  # the matmul result's shape before the final transpose
    perm_out: tuple[int, ...]
    groups_a: tuple[int, ...]  # axes of the transposed operands merged into each matmul axis
    groups_b: tuple[int, ...]
    mm_shape: Shape  # the matmul result's shape
    mm_size: int  # its elements
    head: str  # the letters a looped product loops over, as leading matmul axes (`_prefix`)

    @property
    def text(self) -> str:
        """The step in letters numpy.einsum knows (as `pre_a` and `pre_b`), for the steps it runs:
        worked out when asked, so a matrix product's step may have more than numpy's 52 letters."""
        return numpy_subscripts(self.spec)


PREFIX_MIN = 1 << 15
"""Multiply-adds each matrix product of a batched plan must have for `_pair_plan` to loop over
letters only one operand has (`prefix=True`): below, numpy.matmul's call per matrix and BLAS's
start-up outweigh the copy the loop saves."""


PREFIX_SIDE = 32
"""Rows and columns each matrix product of such a loop must have: a thin product packs the
operand repeated along the loop (broadcast) once per matrix, for few multiply-adds."""


def _prefix(
    so: str, ra: str, rb: str, batch: list[str], nk: int, size: dict[str, int]
) -> tuple[str, list[str], list[str]] | None:
    """The shortest head of `so` holding every batch letter, after which `so` is one block of
    one operand's kept letters, then one of the other's: the letters a product loops over (as
    batch axes, each operand broadcast along the ones it lacks) so that it writes its result in
    `so`'s order (`nk`: the elements of the letters summed). None where there is none, or where
    each product would be small."""
    for p in range(len(batch), len(so) - 1):
        head, rest = so[:p], so[p:]
        if not set(batch) <= set(head):
            continue
        turns = sum(1 for x, y in itertools.pairwise(rest) if (x in ra) != (y in ra))
        if turns != 1:
            continue
        left = [c for c in rest if c in ra]
        right = [c for c in rest if c in rb]
        nl, nr = math.prod([size[c] for c in left]), math.prod([size[c] for c in right])
        if min(nl, nr) >= PREFIX_SIDE and nl * nr * nk >= PREFIX_MIN:
            return head, left, right
    return None


def _letters(
    sa: str, sb: str, so: str, shape_a: Shape, shape_b: Shape
) -> tuple[dict[str, int], str, str, list[str], list[str], list[str], list[str]]:
    """The letters of ``sa,sb->so`` as a product takes them: each letter's size, each
    operand's letters once summed first (letters only one operand needs are summed, and
    repeated ones diagonalized, before the product), and the batch, left, right (in `so`'s
    order) and summed letters (in `sa`'s)."""
    size = dict(zip(sa, shape_a))
    size.update(zip(sb, shape_b))
    ra = "".join([c for c in unique(sa) if c in sb or c in so])
    rb = "".join([c for c in unique(sb) if c in sa or c in so])
    batch = [c for c in so if c in ra and c in rb]
    left = [c for c in so if c in ra and c not in rb]
    right = [c for c in so if c in rb and c not in ra]
    inner = [c for c in ra if c in rb and c not in so]
    return size, ra, rb, batch, left, right, inner


def loop_head(
    sa: str, sb: str, so: str, shape_a: Shape, shape_b: Shape
) -> tuple[str, list[str], list[str]] | None:
    """The letters a product of ``sa,sb->so`` loops over to write `so` as it lies (`_prefix`:
    the head, and the two blocks after it), where `so` is no batch-left-right block order;
    None where it writes `so` as one matrix product, or where no loop would pay."""
    na, nb = math.prod(shape_a), math.prod(shape_b)
    if min(na, nb) < PREFIX_SIDE or na * nb < PREFIX_MIN:  # (left <= a, right and inner <= b)
        return None
    size, ra, rb, batch, left, right, inner = _letters(sa, sb, so, shape_a, shape_b)
    nl, nk, nr = (math.prod([size[c] for c in cs]) for cs in (left, inner, right))
    if min(nl, nr) < PREFIX_SIDE or nl * nk * nr < PREFIX_MIN:  # (nor will any head's blocks)
        return None
    if not inner or "".join(batch + left + right) == so or "".join(batch + right + left) == so:
        return None
    return _prefix(so, ra, rb, batch, nk, size)


@functools.lru_cache(maxsize=8192)
def _pair_plan(
    sa: str, sb: str, so: str, shape_a: Shape, shape_b: Shape, prefix: bool = False, summed: str | None = None
) -> _PairPlan:
    """How to run ``sa,sb->so`` (see `_PairPlan`). With `prefix`, a result order that is no
    batch-left-right block order may still be written as it lies: a head of letters looped
    over, then two blocks (`_prefix`; a tree plan asks for such orders, so that the next
    product reads its operand as a view)."""
    looped = loop_head(sa, sb, so, shape_a, shape_b) if prefix else None
    if prefix and looped is None:
        return _pair_plan(sa, sb, so, shape_a, shape_b, False, summed)
    size, ra, rb, batch, left, right, inner = _letters(sa, sb, so, shape_a, shape_b)
    if summed is not None and sorted(summed) == sorted(inner):
        inner = list(summed)
    plan = _PairPlan()
    plan.spec = f"{sa},{sb}->{so}"
    plan.head = ""
    # Nothing contracted: a broadcast multiply writes the output in its own layout.
    plan.outer = not inner
    if plan.outer:
        plan.view_a = _broadcast_view(ra, so, size)
        plan.view_b = _broadcast_view(rb, so, size)

    def prod(cs: list[str]) -> int:
        return math.prod([size[c] for c in cs])

    if looped is not None:
        return _looped_plan(plan, sa, sb, so, ra, rb, looped, inner, size)
    plan.swap = (
        bool(inner and left and right)
        and "".join(batch + right + left) == so
        and "".join(batch + left + right) != so
    )
    if plan.swap:
        sa, sb, ra, rb, left, right = sb, sa, rb, ra, right, left
    plan.pre_a = numpy_subscripts(f"{sa}->{ra}") if ra != sa else None
    plan.pre_b = numpy_subscripts(f"{sb}->{rb}") if rb != sb else None
    nb, nl, nk, nr = prod(batch), prod(left), prod(inner), prod(right)
    plan.perm_a = tuple(ra.index(c) for c in batch + left + inner)
    plan.perm_b = tuple(rb.index(c) for c in batch + inner + right)
    lead = [len(batch)] if batch else []
    plan.groups_a, plan.groups_b = (*lead, len(left), len(inner)), (*lead, len(inner), len(right))
    if batch:
        plan.shape_a, plan.shape_b = (nb, nl, nk), (nb, nk, nr)
    else:
        plan.shape_a, plan.shape_b = (nl, nk), (nk, nr)
    plan.mm_shape = (*plan.shape_a[:-1], nr)
    plan.mm_size = math.prod(plan.mm_shape)
    # A true (batched) matrix product pays for its transposing copies. A product
    # that keeps nothing on one side is memory bound: it goes to matmul (BLAS
    # gemv) only when neither operand needs a copy, else numpy.einsum does it
    # in one pass.
    plan.matvec = not (left and right)
    if plan.matvec:
        plan.gemm = (
            bool(inner)
            and _view_ok(ra, plan.perm_a, list(plan.groups_a), size)
            and _view_ok(rb, plan.perm_b, list(plan.groups_b), size)
        )
    else:
        plan.gemm = True
    plan.dims = tuple(size[c] for c in batch + left + right)
    order = batch + left + right
    plan.perm_out = tuple(order.index(c) for c in so)
    return plan


def _looped_plan(
    plan: _PairPlan,
    sa: str,
    sb: str,
    so: str,
    ra: str,
    rb: str,
    looped: tuple[str, list[str], list[str]],
    inner: list[str],
    size: dict[str, int],
) -> _PairPlan:
    """`plan` as a product looped over the head letters `looped[0]` (`_prefix`): numpy.matmul
    of ``(..., L, K)`` and ``(..., K, R)`` views whose leading axes are the head's, each
    operand's of size 1 where it lacks the letter (broadcast), the result written in order."""
    head, left, right = looped
    plan.head = head
    plan.swap = head + "".join(left + right) != so  # (the other operand's block first)
    if plan.swap:
        sa, sb, ra, rb, left, right = sb, sa, rb, ra, right, left
    plan.pre_a = numpy_subscripts(f"{sa}->{ra}") if ra != sa else None
    plan.pre_b = numpy_subscripts(f"{sb}->{rb}") if rb != sb else None
    nl, nk, nr = (math.prod([size[c] for c in cs]) for cs in (left, inner, right))
    heads_a, heads_b = [c for c in head if c in ra], [c for c in head if c in rb]
    plan.perm_a = tuple(ra.index(c) for c in heads_a + left + inner)
    plan.perm_b = tuple(rb.index(c) for c in heads_b + inner + right)
    plan.groups_a = (*[1] * len(heads_a), len(left), len(inner))
    plan.groups_b = (*[1] * len(heads_b), len(inner), len(right))
    plan.shape_a = (*[size[c] if c in ra else 1 for c in head], nl, nk)
    plan.shape_b = (*[size[c] if c in rb else 1 for c in head], nk, nr)
    plan.mm_shape = (*[size[c] for c in head], nl, nr)
    plan.mm_size = math.prod(plan.mm_shape)
    plan.matvec, plan.gemm = False, True
    plan.dims = tuple(size[c] for c in head + "".join(left + right))
    plan.perm_out = tuple(range(len(plan.dims)))
    return plan


def _view_ok(spec: str, perm: tuple[int, ...], groups: list[int], size: dict[str, int]) -> bool:
    """Whether a C-contiguous array indexed by `spec`, transposed by `perm`, can be
    reshaped into `groups` (axis counts per merged dimension) without a copy."""
    shape = [size[c] for c in spec]
    strides = [math.prod(shape[i + 1 :]) for i in range(len(shape))]
    return merges_without_copy(strides, shape, list(perm), groups)


def merges_without_copy(strides: Any, sizes: Any, order: Sequence[Any], groups: Sequence[int]) -> bool:
    """Whether the axes `order` (keys into `strides` and `sizes`: positions or letters) of a
    strided value merge into `groups` (axis counts per merged dimension) without a copy, as
    numpy's reshape of a transpose decides. Size-1 axes merge with anything."""
    pos = 0
    for g in groups:
        axes = [a for a in order[pos : pos + g] if sizes[a] != 1]
        pos += g
        for x, y in itertools.pairwise(axes):
            if strides[x] != strides[y] * sizes[y]:
                return False
    return True


def _broadcast_view(spec: str, out: str, size: dict[str, int]) -> tuple[tuple[int, ...], Shape]:
    """(perm, shape) that show an array indexed by `spec` along the axes of `out`."""
    perm = tuple(spec.index(c) for c in out if c in spec)
    return perm, tuple(size[c] if c in spec else 1 for c in out)


def _pair(a: Array, b: Array, sa: str, sb: str, so: str) -> Any:
    """Contract two arrays by ``sa,sb->so``: one matmul, or one numpy.einsum pass."""
    return _run_pair(_pair_plan(sa, sb, so, a.shape, b.shape), a, b)


def presum(pre: str, x: Array, other: Array) -> Any:
    """The one-operand einsum `pre` (a step's sum of the letters only `x` has) of `x`, computed
    in the dtype the step computes in, `x`'s promoted with `other`'s, as numpy.einsum promotes
    its operands before it sums (a bool operand's sum is no logical or, an int8's or a float16's
    no overflow)."""
    if x.dtype == other.dtype:
        return np.einsum(pre, x)
    return np.einsum(pre, x, dtype=np.result_type(x, other))


def outer_operands(plan: _PairPlan, a: Array, b: Array) -> tuple[Any, Any]:
    """The two views of an outer-product step (`plan.outer`) whose broadcast product is its result."""
    if plan.pre_a is not None:
        a = presum(plan.pre_a, a, b)
    if plan.pre_b is not None:
        b = presum(plan.pre_b, b, a)
    perm, shape = plan.view_a
    a = a.transpose(perm).reshape(shape)
    perm, shape = plan.view_b
    return a, b.transpose(perm).reshape(shape)


def _run_pair(plan: _PairPlan, a: Array, b: Array) -> Any:
    """Contract two arrays as `plan` says."""
    if plan.outer:
        return np.multiply(*outer_operands(plan, a, b), order="C")  # laid out as `so` says
    if not plan.gemm or (plan.matvec and not (a.flags.c_contiguous and b.flags.c_contiguous)):
        return np.einsum(plan.text, a, b)
    if plan.swap:
        a, b = b, a
    if plan.pre_a is not None:
        a = presum(plan.pre_a, a, b)
    if plan.pre_b is not None:
        b = presum(plan.pre_b, b, a)
    a = a.transpose(plan.perm_a).reshape(plan.shape_a)
    b = b.transpose(plan.perm_b).reshape(plan.shape_b)
    if plan.mm_size * a.itemsize < RECYCLE_MIN:
        out = np.matmul(a, b)  # (small: malloc's; no Python call more on an eager step)
    else:  # a large product's memory kept between calls (`memory`)
        out = np.matmul(a, b, out=recycled(plan.mm_shape, np.result_type(a, b)))
    out = out.reshape(plan.dims)
    if plan.perm_out != tuple(range(len(plan.perm_out))):
        out = out.transpose(plan.perm_out)
    return out


def _raw_step(ins: tuple[str, ...], out: str, picked: list[Any]) -> Any:
    """One step of a path on numpy arrays."""
    if len(picked) == 2:
        return _pair(picked[0], picked[1], ins[0], ins[1], out)
    text = ",".join(ins) + "->" + out  # an explicit path's N-operand step
    return _expression(text, tuple(x.shape for x in picked), "auto", None)(*picked)


@functools.lru_cache(maxsize=1024)
def _expression(text: str, shapes: tuple[Shape, ...], optimize: str | Path, memory_limit: MemoryLimit) -> Any:
    return oe.contract_expression(text, *shapes, optimize=optimize, memory_limit=memory_limit)


def spread(x: Any, src: str, dst: str, shape: Shape) -> Array:
    """The numpy array indexed by `dst` (shape `shape`) holding `x` (indexed by `src`): the
    transpose of the one-operand step ``dst -> src``.

    Letters of `dst` missing from `src` are broadcast (a read-only view); letters repeated
    in `dst` put `x` on that diagonal, zeros elsewhere (one pass over the result).
    """
    u, x = spread_source(x, src, dst, shape)
    if u == dst:
        return np.broadcast_to(x, shape)
    out = np.zeros(shape, dtype=x.dtype)
    np.einsum(numpy_subscripts(dst + "->" + u), out)[...] = x  # a writable view of the diagonal
    return out


def spread_source(x: Any, src: str, dst: str, shape: Shape) -> tuple[str, Array]:
    """`dst`'s distinct letters, and `x` laid out along them (size 1 where broadcast)."""
    u, present, view = spread_layout(src, dst, shape)
    x = np.asarray(x)
    if present != src:
        x = np.einsum(numpy_subscripts(src + "->" + present), x)
    return u, x.reshape(view)


@functools.lru_cache(maxsize=4096)
def spread_layout(src: str, dst: str, shape: Shape) -> tuple[str, str, Shape]:
    """`dst`'s distinct letters, `src`'s letters in their order, and the shape that lays
    an array indexed by those along them."""
    u = unique(dst)
    dims = dict(zip(dst, shape))
    return u, "".join(c for c in u if c in src), tuple(dims[c] if c in src else 1 for c in u)


@functools.lru_cache(maxsize=1024)
def _diagonal_layout(
    dst: str, shape: Shape
) -> tuple[Shape, tuple[slice, ...], Shape, tuple[int, ...] | None]:
    """How `spread_written` lays out a `dst` that repeats letters: each distinct letter's axes
    side by side and merged into one (size n**k for k copies), on which its diagonal is every
    ((n**k - 1) // (n - 1))-th element; that array's shape, the slices picking the diagonals, the
    shape with the copies apart again, and the permutation back to `dst` (None: none)."""
    u = unique(dst)
    groups = [[i for i, c in enumerate(dst) if c == d] for d in u]
    merged, picks, apart = [], [], []
    for idx in groups:
        n, k = shape[idx[0]], len(idx)
        merged.append(n**k)
        picks.append(slice(None, None, sum(n**j for j in range(k)) if n > 1 else 1))
        apart.extend([n] * k)
    order = tuple(i for idx in groups for i in idx)
    perm = tuple(order.index(i) for i in range(len(dst)))
    return tuple(merged), tuple(picks), tuple(apart), _perm(perm)


def spread_written(xp: ModuleType, x: Any, src: str, dst: str, shape: Shape) -> Any:
    """`spread` of `x` (indexed by `src`) into `dst`, which repeats letters, on a library that
    writes in place (`arrays.writes_in_place`): zeros written along the diagonals with one
    strided assignment, where a mask of the repeated letters would cost a boolean array and a
    ``where`` pass as large as the result (torch: 7.8 ms against 5.3 for 2000 x 2000)."""
    _, present, view = spread_layout(src, dst, shape)
    if present != src:
        x = step(xp, (src,), present, [x])
    x = xp.reshape(x, view)  # (u's order: a size-1 axis where src lacks the letter, broadcast)
    merged, picks, apart, perm = _diagonal_layout(dst, shape)
    out = xp.zeros(merged, dtype=x.dtype, device=getattr(x, "device", None))
    out[picks] = x
    out = xp.reshape(out, apart)
    return out if perm is None else xp.permute_dims(out, perm)


def runner(xp: ModuleType) -> Callable[[tuple[str, ...], str, list[Any]], Any]:
    """The function running one step ``(ins, out, picked)`` of a path on arrays of library `xp`."""
    return _raw_step if xp is np else functools.partial(step, xp)


# -- any other library: the library's einsum, or the standard's operations -------------------

_ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_WIDE = frozenset({np.dtype(np.int64), np.dtype(np.uint64)})


def _rename(ins: Sequence[str], out: str) -> str | None:
    """``ins->out`` in the letters a-z, A-Z (a library's einsum may accept no others);
    None for a step of more than 52 distinct letters."""
    letters = dict.fromkeys("".join(ins) + out)
    if len(letters) > len(_ASCII):
        return None
    table = str.maketrans(dict(zip(letters, _ASCII)))
    return ",".join(s.translate(table) for s in ins) + "->" + out.translate(table)


def _diagonal(xp: ModuleType, x: Any, spec: str) -> tuple[Any, str]:
    """`x` with each repeated letter of `spec` reduced to its diagonal: (array, letters once).

    The two axes go last and are merged; the diagonal is every (n+1)-th element.
    """
    while len(set(spec)) < len(spec):
        c = next(c for c in spec if spec.count(c) > 1)
        i = spec.index(c)
        j = spec.index(c, i + 1)
        n = x.shape[i]
        rest = [k for k in range(len(spec)) if k not in (i, j)]
        x = xp.permute_dims(x, (*rest, i, j))
        x = xp.reshape(x, (*(x.shape[k] for k in range(len(rest))), n * n))
        x = x[..., :: n + 1]
        spec = "".join(spec[k] for k in rest) + c
    return x, spec


def _prepare(xp: ModuleType, x: Any, spec: str, keep: str) -> tuple[Any, str]:
    """Diagonals taken and letters not in `keep` summed away."""
    x, spec = _diagonal(xp, x, spec)
    drop = tuple(i for i, c in enumerate(spec) if c not in keep)
    if drop:
        x = xp.sum(x, axis=drop, dtype=x.dtype)
        spec = "".join(c for c in spec if c in keep)
    return x, spec


def _arrange(xp: ModuleType, x: Any, spec: str, order: str) -> Any:
    perm = tuple(spec.index(c) for c in order)
    return x if perm == tuple(range(len(perm))) else xp.permute_dims(x, perm)


def _standard(xp: ModuleType, ins: Sequence[str], out: str, picked: Sequence[Any]) -> Any:
    """The contraction with the standard's operations only."""
    if len(picked) == 1:
        x, spec = _prepare(xp, picked[0], ins[0], out)
        return _arrange(xp, x, spec, out)
    if len(picked) > 2:  # fold from the left, keeping what later operands or the output need
        a, sa = picked[0], ins[0]
        for k in range(1, len(picked)):
            later = "".join(ins[k + 1 :]) + out
            keep = "".join(dict.fromkeys(c for c in sa + ins[k] if c in later))
            a = _standard(xp, (sa, ins[k]), keep, (a, picked[k]))
            sa = keep
        return _standard(xp, (sa,), out, (a,))
    a, sa = _prepare(xp, picked[0], ins[0], ins[1] + out)
    b, sb = _prepare(xp, picked[1], ins[1], sa + out)
    batch = "".join(c for c in sa if c in sb and c in out)
    contracted = "".join(c for c in sa if c in sb and c not in out)
    free_a = "".join(c for c in sa if c not in sb)
    free_b = "".join(c for c in sb if c not in sa)
    size = dict(zip(sa, a.shape)) | dict(zip(sb, b.shape))

    def prod(letters: str) -> int:
        n = 1
        for c in letters:
            n *= size[c]
        return n

    bsh = tuple(size[c] for c in batch)
    a = xp.reshape(_arrange(xp, a, sa, batch + free_a + contracted), bsh + (prod(free_a), prod(contracted)))
    b = xp.reshape(_arrange(xp, b, sb, batch + contracted + free_b), bsh + (prod(contracted), prod(free_b)))
    c = xp.matmul(a, b)
    c = xp.reshape(c, bsh + tuple(size[c] for c in free_a + free_b))
    return _arrange(xp, c, batch + free_a + free_b, out)


def _aligned(x: Any, spec: str) -> Any:
    """`x` with the axes of a letter it repeats chunked alike, for a chunked library
    (dask.array), whose einsum pairs those axes' blocks one for one."""
    chunks = getattr(x, "chunks", None)
    if chunks is None or len(set(spec)) == len(spec):
        return x
    want = {i: chunks[spec.index(c)] for i, c in enumerate(spec) if chunks[i] != chunks[spec.index(c)]}
    return x.rechunk(want) if want else x


class _LibPlan:
    """How to run a one- or two-operand step of distinct letters with the standard's operations:
    each operand's letters only it has summed away (`drop_*`), then a matrix product of the
    operands laid out as ``(batch, left, inner)`` and ``(batch, inner, right)`` (`perm_*`,
    `shape_*`), or, with nothing contracted, a broadcast multiply; the result laid out as
    the output asks (`dims`, `perm_out`). An identity permutation or reshape is None."""

    __slots__ = ("dims", "drop_a", "drop_b", "perm_a", "perm_b", "perm_out", "shape_a", "shape_b")

    drop_a: tuple[int, ...] | None  # axes only this operand has, summed first
    drop_b: tuple[int, ...] | None
    perm_a: tuple[int, ...] | None  # to (batch, left, inner) and (batch, inner, right)
    perm_b: tuple[int, ...] | None
    shape_a: Shape | None  # their letters merged into the matrix product's axes
    shape_b: Shape | None
    dims: Shape | None  # the product's result, one axis per letter; None: a multiply
    perm_out: tuple[int, ...] | None

    def __init__(self) -> None:
        self.drop_a = self.drop_b = self.perm_a = self.perm_b = self.perm_out = None
        self.shape_a = self.shape_b = self.dims = None

    def __call__(self, xp: ModuleType, a: Any, b: Any = None) -> Any:
        a = _lay(xp, a, self.drop_a, self.perm_a, self.shape_a)
        if b is None:
            return a
        b = _lay(xp, b, self.drop_b, self.perm_b, self.shape_b)
        c = a @ b if self.dims is not None else a * b  # (None: a broadcast multiply)
        if self.dims is not None and self.dims != tuple(c.shape):
            c = xp.reshape(c, self.dims)
        return c if self.perm_out is None else xp.permute_dims(c, self.perm_out)


def _lay(
    xp: ModuleType, x: Any, drop: tuple[int, ...] | None, perm: tuple[int, ...] | None, shape: Shape | None
) -> Any:
    """One operand of a `_LibPlan`: its axes `drop` summed, then permuted and reshaped."""
    if drop:
        x = xp.sum(x, axis=drop, dtype=x.dtype)
    if perm is not None:
        x = xp.permute_dims(x, perm)
    return x if shape is None else xp.reshape(x, shape)


def _perm(perm: tuple[int, ...]) -> tuple[int, ...] | None:
    return None if perm == tuple(range(len(perm))) else perm


def lib_product(
    perm_a: tuple[int, ...],
    shape_a: Shape,
    perm_b: tuple[int, ...],
    shape_b: Shape,
    dims: Shape | None,
    perm_out: tuple[int, ...],
) -> _LibPlan:
    """The `_LibPlan` of a product laid out elsewhere (a `network` tree's pair, from its
    `_PairPlan`): each operand permuted and reshaped, then ``a @ b`` reshaped to `dims` (None:
    the broadcast ``a * b``) and permuted."""
    plan = _LibPlan()
    plan.perm_a, plan.perm_b, plan.perm_out = _perm(perm_a), _perm(perm_b), _perm(perm_out)
    plan.shape_a, plan.shape_b, plan.dims = shape_a, shape_b, dims
    return plan


@functools.lru_cache(maxsize=4096)
def _lib_plan(ins: tuple[str, ...], out: str, shapes: tuple[Shape, ...]) -> _LibPlan | None:
    """The `_LibPlan` of the step ``ins->out`` on operands of `shapes`; None where an operand
    repeats a letter (a diagonal: the library's einsum, or `_standard`, runs it)."""
    if any(len(set(spec)) != len(spec) for spec in ins):
        return None
    plan = _LibPlan()
    if len(ins) == 1:
        (spec,) = ins
        plan.drop_a = tuple(i for i, c in enumerate(spec) if c not in out) or None
        kept = [c for c in spec if c in out]
        plan.perm_a = _perm(tuple(kept.index(c) for c in out))
        return plan
    sa, sb = ins
    size, ra, rb, batch, left, right, inner = _letters(sa, sb, out, *shapes)
    plan.drop_a = tuple(i for i, c in enumerate(sa) if c not in ra) or None
    plan.drop_b = tuple(i for i, c in enumerate(sb) if c not in rb) or None

    def dims(cs: list[str]) -> Shape:
        return tuple(size[c] for c in cs)

    def prod(cs: list[str]) -> int:
        return math.prod(dims(cs))

    if inner:  # (batch, left, inner) @ (batch, inner, right)
        plan.perm_a = _perm(tuple(ra.index(c) for c in batch + left + inner))
        plan.perm_b = _perm(tuple(rb.index(c) for c in batch + inner + right))
        lead = (prod(batch),) if batch else ()
        shape_a, shape_b = (*lead, prod(left), prod(inner)), (*lead, prod(inner), prod(right))
        plan.shape_a = None if shape_a == dims(batch + left + inner) else shape_a
        plan.shape_b = None if shape_b == dims(batch + inner + right) else shape_b
        plan.dims = dims(batch + left + right)
    else:  # a broadcast multiply: each operand laid along (batch, left, right), 1 where it has none
        plan.perm_a = _perm(tuple(ra.index(c) for c in batch + left))
        plan.perm_b = _perm(tuple(rb.index(c) for c in batch + right))
        plan.shape_a = (*dims(batch + left), *(1 for _ in right)) if right else None
        plan.shape_b = (*dims(batch), *(1 for _ in left), *dims(right)) if left else None
    order = batch + left + right
    plan.perm_out = _perm(tuple(order.index(c) for c in out))
    return plan


def step(xp: ModuleType, ins: Sequence[str], out: str, picked: Sequence[Any]) -> Any:
    """``einsum(",".join(ins) + "->" + out, *picked)`` on the arrays of library `xp` (not numpy).

    The result has numpy's einsum dtype: the operands' promoted dtype. One or two floating
    operands without a repeated letter and without blocks (dask's) run as their `_LibPlan`,
    made once per subscripts and shapes: a few view operations and one matrix product or
    multiply, where a library's einsum parses the subscripts again each call (torch's costs
    ten times its ``matmul`` on small arrays). Other steps go to the library's einsum.
    """
    dts = [np_dtype(x.dtype) for x in picked]
    dt = dts[0] if all(d == dts[0] for d in dts) else np.result_type(*dts)
    work = dt
    if dt.kind in "biu" and dt not in _WIDE:
        work = np.dtype(np.int64)  # libraries sum these in int64 or refuse to mix them
    if any(d != work for d in dts):
        target = lib_dtype(xp, work)
        picked = [x if d == work else xp.astype(x, target) for x, d in zip(picked, dts)]
    if len(picked) <= 2 and work.kind in "fc" and not any(blocked(x) for x in picked):
        plan = _lib_plan(tuple(ins), out, tuple(tuple(x.shape) for x in picked))
        if plan is not None:  # (a floating dtype is its own working dtype: no cast back)
            return plan(xp, *picked)
    einsum: Callable[..., Any] | None = getattr(xp, "einsum", None)
    text = None if einsum is None else _rename(ins, out)
    if text is not None:
        picked = [_aligned(x, s) for x, s in zip(picked, ins)]
    r = _standard(xp, ins, out, picked) if einsum is None or text is None else einsum(text, *picked)
    if np_dtype(r.dtype) != dt:
        r = xp.astype(r, lib_dtype(xp, dt))
    return r
