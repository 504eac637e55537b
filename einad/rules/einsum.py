"""THE linear primitive: `einsum`, and every linear helper written as one call of it.

The primitive ``einsum_p`` contracts operands whose subscripts are canonical
(see `subscripts.parse`). Its derivative rules are the whole of einad's linear
calculus:

* VJP for operand k: contract the cotangent with the other operands to operand
  k's subscripts (`subscripts.vjp_spec`), then `spread` the result back over
  the letters only operand k has (broadcast) and its repeated letters (the
  diagonal), since numpy cannot write ``"i->ii"``. The reverse pass gets that
  last step as a `Spread` (the small result and where it goes), so cotangents
  landing on one diagonal are summed small and written out once.
* JVP: the sum over operands with a tangent of the same einsum with that
  operand replaced by its tangent.

``spread_p`` is the one structural helper the VJP needs; it is linear, its VJP
is a one-operand einsum and its JVP is itself.

opt_einsum chooses the contraction path (cached per subscripts, shapes,
`optimize` and `memory_limit`); einad executes it, one pairwise step at a time
(`executor`): on numpy arrays each step is one ``numpy.matmul`` or one
memory-bound pass, on any other library's arrays the library's einsum or the
array API standard's operations. With no trace involved the whole einsum is one
primitive call. Traced, three or more operands are bound as one node that keeps
the intermediates and gets all N gradients for about twice the forward's work:
a planned tree (`network`) in first-order reverse mode (on any library's arrays but
dask's blocks), else the pairwise steps, one node each, whose
derivative program is pairwise too (see `contract`).
"""

from __future__ import annotations

import collections
import functools
import itertools
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any, TypeAlias

import numpy as np
import opt_einsum as oe

from .. import cluster, executor
from ..aliases import Array, Axis, DTypeLike, MemoryLimit, Path, Shape
from ..arrays import (
    asarray,
    blocked,
    device,
    is_array,
    lib_dtype,
    namespace,
    ones,
    writes_in_place,
    xp_of,
    zeros,
)
from ..core import (
    IMPERATIVE,
    LOOP,
    Aliasing,
    Meta,
    Params,
    Primitive,
    QuietRules,
    ReverseTrace,
    Staged,
    Structured,
    Tensor,
    Trace,
    Value,
    bind,
    declare,
    grad_enabled,
    record,
    strip,
)
from ..errors import EinsumError
from ..executor import _pair, _pair_plan, _run_pair
from ..memory import recycled
from ..network import end_to_end as tree_end_to_end
from ..network import forward as tree_forward
from ..network import forward_plan, pair_step, scratch, tree_plan
from ..network import lib_forward as tree_lib_forward
from ..network import lib_sweep as tree_lib_sweep
from ..network import sweep as tree_sweep
from ..network import value as tree_value
from ..network import value_and_grad as tree_value_and_grad
from ..network import value_and_grad_into as tree_value_and_grad_into
from ..slicing import Schedule, Slices, object_path, schedule, workers
from ..slicing import plan as slice_plan
from ..subscripts import (
    fresh_symbols,
    numpy_subscripts,
    pairwise_steps,
    unique,
    vjp_operands,
)
from ..util import dtype_of, normalize_axes, shape_of
from .shape import astype, reshape_raw

Optimize: TypeAlias = bool | str | Sequence[Any] | Callable[..., Any] | None
"""einsum's `optimize`: True/False/None, an opt_einsum strategy name, an explicit path,
or a path-optimizer object (opt_einsum's ``PathOptimizer``s, cotengra's optimizers)."""

Strategy: TypeAlias = str | Path | Callable[..., Any]
"""A normalized `optimize`: a strategy name, an explicit path, or an optimizer object."""

try:  # numpy.einsum's own kernel, which it calls without a path (saves its Python wrapper)
    from numpy._core.multiarray import c_einsum as _c_einsum
except ImportError:  # pragma: no cover (another numpy layout)
    _c_einsum = np.einsum

# A path's pairwise steps: (positions to pop, their subscripts, the step's output).
Steps: TypeAlias = tuple[tuple[tuple[int, ...], tuple[str, ...], str], ...]


def _einsum_impl(
    *arrays: Array,
    inputs: tuple[str, ...],
    output: str,
    optimize: str | Path = "auto",
    memory_limit: MemoryLimit = None,
) -> Any:
    try:
        if len(arrays) <= 2 and type(arrays[0]) is np.ndarray and type(arrays[-1]) is np.ndarray:
            xp = np  # (one or two numpy arrays, the eager common case: `namespace` not asked)
        else:
            xp = namespace(*arrays)
    except TypeError:  # 0-d numpy arrays (a number jit cast) among another library's: numbers
        arrays = tuple(a[()] if type(a) is np.ndarray and a.ndim == 0 else a for a in arrays)
        xp = namespace(*arrays)
    if xp is not np:
        arrays = tuple(_adopt(arrays))
    for a in arrays:
        if 0 in a.shape:  # an empty sum is exactly zero, whatever the other operands hold
            size = {c: d for spec, x in zip(inputs, arrays) for c, d in zip(spec, x.shape)}
            dt = np.result_type(*(dtype_of(x) for x in arrays))
            return zeros(arrays[0], tuple(size[c] for c in output), dt)
    if len(arrays) > 2:
        arrays = _promoted(xp, arrays)
    if xp is not np:
        if len(arrays) <= 2:
            return executor.step(xp, inputs, output, arrays)
        steps = _plan(inputs, output, tuple(tuple(a.shape) for a in arrays), optimize, memory_limit)
        return _follow(steps, arrays, executor.runner(xp))
    if len(arrays) == 1:
        x = arrays[0]
        sum_plan = _narrow_sum(inputs[0], output) if x.dtype in _NARROW else None
        if sum_plan is not None and math.prod([x.shape[i] for i in sum_plan[0]]) >= NARROW_SUM_MIN:
            axes, order = sum_plan
            with np.errstate(over="ignore", invalid="ignore"):  # (quiet, as einsum's sums are)
                out = np.add.reduce(x, axis=axes)
            return out if order is None else out.transpose(order)
        return _c_einsum(numpy_subscripts(inputs[0] + "->" + output), arrays[0])
    if len(arrays) == 2:
        return _pair(arrays[0], arrays[1], inputs[0], inputs[1], output)
    shapes = tuple(a.shape for a in arrays)
    return tree_value(
        forward_plan(inputs, output, shapes, _path(inputs, output, shapes, optimize, memory_limit)), arrays
    )


_NARROW = frozenset(map(np.dtype, ("float32", "complex64")))
NARROW_SUM_MIN = 4096
"""The fewest elements an output element sums for `np.sum` (its call costs a few microseconds
more than einsum's; fewer addends lose little to einsum's order)."""
"""Dtypes whose one-operand sums go to `np.sum` (`_narrow_sum`). (Not float16: numpy's einsum
adds float16 in float32, np.sum along a non-contiguous axis in float16, stalling at 2048.)"""


@functools.lru_cache(maxsize=1024)
def _narrow_sum(spec: str, output: str) -> tuple[tuple[int, ...], tuple[int, ...] | None] | None:
    """A one-operand einsum that sums (and has no repeated index) as `np.sum`'s axes and the
    transpose after it (None: none), or None. For float32 and complex64 sums of at least
    `NARROW_SUM_MIN` addends: numpy's einsum adds a row up one element after another (a
    float32 sum of 2**20 values is off by ~1e-5), `np.sum` pairwise, as the sums users
    compare with."""
    axes = tuple(i for i, c in enumerate(spec) if c not in output)
    if not axes or len(set(spec)) != len(spec):
        return None  # (a transpose stays numpy's view; a diagonal, einsum's)
    left = [c for c in spec if c in output]
    order = None if left == list(output) else tuple(left.index(c) for c in output)
    return axes, order


def _promoted(xp: ModuleType, arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """Operands of mixed dtypes cast to the dtype numpy's einsum computes in: all operands
    promoted at once, not pair by pair along the path (int8, uint16 and float32 give float32;
    pairwise, int8 and uint16 would give int32, and int32 with float32 float64)."""
    first = arrays[0].dtype
    if all(a.dtype == first for a in arrays[1:]):
        return arrays
    dt = np.result_type(*(dtype_of(a) for a in arrays))
    if xp is np:
        return tuple(a if a.dtype == dt else a.astype(dt) for a in arrays)
    lib_dt = lib_dtype(xp, dt)
    return tuple(a if dtype_of(a) == dt else xp.astype(a, lib_dt) for a in arrays)


def _adopt(arrays: Sequence[Any]) -> Sequence[Any]:
    """`arrays` with the numbers among them (numpy scalars, Python numbers, weakly typed as
    numpy promotes them) made arrays of the other arrays' library, on their device."""
    if all(is_array(a) and not isinstance(a, np.generic) for a in arrays):
        return arrays
    like = next(a for a in arrays if is_array(a) and not isinstance(a, np.generic))
    dts = [dtype_of(a) for a in arrays if is_array(a)]
    return [
        a if is_array(a) and not isinstance(a, np.generic) else asarray(like, a, np.result_type(a, *dts))
        for a in arrays
    ]


def _follow(steps: Steps, operands: Sequence[Any], step: Callable[..., Any]) -> Any:
    """Run the pairwise `steps` of a path: `step(inputs, output, operands)` for each."""
    work = list(operands)
    for positions, ins, out in steps:
        picked = [work[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del work[p]
        work.append(step(ins, out, picked))
    return work[0]


einsum_p = Primitive("einsum", _einsum_impl)


def _lower_einsum(params: Params, shapes: Sequence[Shape]) -> Callable[..., Any]:
    """The einsum as a function of its arrays with every plan made now (for `einad.jit`).

    The plans are numpy's (`executor._pair_plan`; three or more operands: `network.forward_plan`,
    the very plan eager einsum runs): `einad.jit` lowers the programs of numpy arrays only
    (other libraries' programs call `_einsum_impl`). Should a lowered function
    meet anything but numpy arrays (another library's, or a numpy scalar an earlier step
    returned), it hands them to `_einsum_impl`: one type check per call.
    """
    inputs, output = params["inputs"], params["output"]
    generic = functools.partial(_einsum_impl, **params)
    if any(0 in s for s in shapes) or len(shapes) == 1:
        return generic
    if len(shapes) == 2:
        pair_plan = _pair_plan(inputs[0], inputs[1], output, tuple(shapes[0]), tuple(shapes[1]))

        def pair(a: Any, b: Any) -> Any:
            if type(a) is np.ndarray and type(b) is np.ndarray:
                return _run_pair(pair_plan, a, b)
            return generic(a, b)

        return pair
    shapes = tuple(tuple(s) for s in shapes)
    path = _path(inputs, output, shapes, params["optimize"], params["memory_limit"])
    plan = forward_plan(inputs, output, shapes, path)  # (eager einsum's, the same object)

    def run(*arrays: Any) -> Any:
        if not all(type(a) is np.ndarray for a in arrays):
            return generic(*arrays)
        return tree_value(plan, _promoted(np, arrays))

    return run


@functools.lru_cache(maxsize=4096)
def _path(
    inputs: tuple[str, ...],
    output: str,
    shapes: tuple[Shape, ...],
    optimize: str | Path,
    memory_limit: MemoryLimit,
) -> Path:
    """opt_einsum's explicit path for the contraction (an explicit `optimize` is itself)."""
    if isinstance(optimize, tuple) and _fits(inputs, output, shapes, optimize):
        # as opt_einsum hands it back, without its costing of every step (a 1,000-tensor
        # network's path: a quarter of a second)
        return tuple(tuple(int(i) for i in p) for p in optimize)
    text = ",".join(inputs) + "->" + output
    try:
        path, _ = oe.contract_path(text, *shapes, shapes=True, optimize=optimize, memory_limit=memory_limit)
    except (ValueError, KeyError, TypeError) as err:
        # not naming `text`: its letters may be einad's, not the user's
        raise EinsumError(
            f"cannot plan a contraction of {len(inputs)} operands with optimize={optimize!r}: {err}"
        ) from None
    except RuntimeError:  # e.g. 'dp' finds no path when an operand is empty
        path, _ = oe.contract_path(text, *shapes, shapes=True, optimize="greedy", memory_limit=memory_limit)
    return tuple(tuple(int(i) for i in p) for p in path)


def einsum_path(params: Params, shapes: tuple[Shape, ...]) -> Path:
    """The path an einsum equation with these parameters follows on operands of these shapes."""
    if len(shapes) <= 2 and not isinstance(params.get("optimize"), tuple):
        return ((0,),) if len(shapes) == 1 else ((0, 1),)
    return _path(params["inputs"], params["output"], shapes, params["optimize"], params.get("memory_limit"))


def path_flops(inputs: tuple[str, ...], output: str, shapes: tuple[Shape, ...], path: Path) -> int:
    """opt_einsum's count of the operations of a contraction along `path` (its ``opt_cost``):
    each step costs the product of its letters' sizes times its operands less one, plus one
    where it sums a letter away. Counted in one walk, each letter's number of live operands
    kept (with one for the output), so a step looks at its own letters only: opt_einsum's
    count takes a union over every operand left at each step, quadratic in a network merged
    from a thousand products (`passes.merge_einsums` asks for it once per merged network)."""
    size: dict[str, int] = {}
    for term, shape in zip(inputs, shapes):
        for c, d in zip(term, shape):
            if size.get(c, 1) == 1:
                size[c] = d
    live = [frozenset(term) for term in inputs]
    count = collections.Counter(c for term in live for c in term)
    count.update(output)
    total = 0
    for step in path:
        picked = [live[i] for i in step]
        for i in sorted(step, reverse=True):
            del live[i]
        letters = frozenset().union(*picked)
        count.subtract(c for term in picked for c in term)
        kept = frozenset(c for c in letters if count[c] > 0)
        total += math.prod(size[c] for c in letters) * (max(1, len(step) - 1) + (len(kept) < len(letters)))
        count.update(kept)
        live.append(kept)
    return total


def _fits(inputs: tuple[str, ...], output: str, shapes: tuple[Shape, ...], path: Path) -> bool:
    """Whether opt_einsum would take the explicit `path` for the contraction without an error:
    each operand's letters as many as its axes, a letter's sizes equal (or 1), the output's
    letters once each and all from the operands, no character opt_einsum's parser reads
    specially, and each step's positions distinct and in range, down to one operand.
    (Otherwise `_path` asks opt_einsum, which raises its own error.)"""
    size: dict[str, int] = {}
    for term, shape in zip(inputs, shapes):
        if len(term) != len(shape):
            return False
        for c, d in zip(term, shape):
            had = size.setdefault(c, d)
            if had == 1:
                size[c] = d  # (opt_einsum's rule: a size 1 gives way to the next one)
            elif d not in (1, had):
                return False
    text = "".join(inputs) + output
    if len(inputs) != len(shapes) or any(c in text for c in "-.> ,"):
        return False
    if len(set(output)) != len(output) or any(c not in size for c in output):
        return False
    left = len(inputs)
    for step in path:
        if not step or len(set(step)) != len(step) or not all(type(i) is int and 0 <= i < left for i in step):
            return False
        left -= len(step) - 1
    return left == 1


@functools.lru_cache(maxsize=4096)
def _plan(
    inputs: tuple[str, ...],
    output: str,
    shapes: tuple[Shape, ...],
    optimize: str | Path,
    memory_limit: MemoryLimit,
) -> Steps:
    return pairwise_steps(inputs, output, _path(inputs, output, shapes, optimize, memory_limit))


def _recorded(operands: Sequence[Value], params: Params, trace: Trace) -> Tensor | None:
    """The einsum of one or two `operands` (Tensors of `trace`, a live reverse trace, and numpy
    arrays) recorded in `trace` as its `process` would, without `bind` and `process` (the eager
    lane, as the elementwise operations'): numpy's contraction of numpy values; of values traced
    by an enclosing transformation (a second order), their einsum (this lane again in a reverse
    trace, else `bind`). None where it does not take them (another trace's Tensor, another
    library's array, nothing to differentiate): `bind` then."""
    vals: list[Any] = []
    parents: list[Any] = []
    needed: list[bool] = []
    nested = False
    for a in operands:
        if type(a) is Tensor:
            if a._trace is not trace:
                return None
            v = a._value
            if type(v) is Tensor:
                nested = True
            elif type(v) is not np.ndarray:
                return None
            parents.append(a._node)
            needed.append(a._node is not None)
        elif type(a) is np.ndarray:
            v = a
            parents.append(None)
            needed.append(False)
        else:
            return None
        vals.append(v)
    if True not in needed:
        return None
    if nested:
        if trace.__class__ is not ReverseTrace:
            return None
        t = (vals[0] if type(vals[0]) is Tensor else vals[-1])._trace
        out: Any = None
        if t is not None and t.__class__ is ReverseTrace and not t.dead:
            out = _recorded(vals, params, t)
        if out is None:
            out = bind(einsum_p, vals, params)
    else:
        out = _einsum_impl(*vals, **params)
    keep = _kept.get(tuple(needed))  # (`_einsum_keep`'s table, read inline)
    kept, keep_ans = _einsum_keep(needed) if keep is None else keep
    return record(out, trace, einsum_p, params, tuple(parents), needed, vals, out, kept, keep_ans)


def traced_steps(
    inputs: tuple[str, ...], output: str, shapes: tuple[Shape, ...], optimize: str | Path = "auto"
) -> Steps:
    """The pairwise steps `contract` binds, one node each, when an operand is traced (3 or more
    operands; fewer are one node): what the reverse pass differentiates, last step first."""
    return _plan(inputs, output, shapes, optimize, None)


def contract(
    inputs: tuple[str, ...],
    output: str,
    operands: Sequence[Value],
    optimize: Strategy = "auto",
    memory_limit: MemoryLimit = None,
    executor: Any = None,
    progress: bool = False,
) -> Value:
    """Contract canonical subscripts; returns a raw array when nothing is traced.

    This is the internal entry point the rules use; `einsum` parses and wraps.
    An optimizer object is asked for its path once (`slicing.object_path`); with
    a `memory_limit` that no pairwise path meets, the contraction is sliced
    (`slicing.plan`) and bound as one `sliced_einsum_p` equation, whose slices run
    on `executor` (None: the in-process thread pool; see `contract_planned`).
    """
    if len(operands) == 1 and inputs[0] == output:
        return operands[0]
    if len(operands) <= 2 and isinstance(optimize, (str, tuple)) and memory_limit is None:
        # one or two operands, a named strategy or a path: one equation, as below (the common case)
        params: Params = {
            "inputs": inputs,
            "output": output,
            "optimize": optimize,
            "memory_limit": memory_limit,
        }
        a = operands[0] if type(operands[0]) is Tensor else operands[-1]
        if type(a) is np.ndarray and type(operands[0]) is np.ndarray:  # numpy arrays: what bind does
            out: Value = _einsum_impl(*operands, **params)  # type: ignore[arg-type]
            return out
        trace = a._trace if type(a) is Tensor else None
        if (  # a live reverse trace, or the imperative graph recording: the lane (`_recorded`)
            trace is not None
            and not trace.dead
            and (trace.__class__ is ReverseTrace or (trace is IMPERATIVE and grad_enabled()))
        ):
            t = _recorded(operands, params, trace)
            if t is not None:
                return t
        return bind(einsum_p, operands, params)
    shapes = tuple(shape_of(x) for x in operands)
    if not isinstance(optimize, (str, tuple)):
        optimize = object_path(optimize, inputs, output, shapes)
    if memory_limit is not None and len(operands) > 2:
        path, slices = slice_plan(inputs, output, shapes, optimize, memory_limit)
        return contract_planned(inputs, output, operands, path, slices, memory_limit, executor, progress)
    traced = any(type(x) is Tensor and x._trace is not None for x in operands)
    if not traced or len(operands) <= 2:
        return bind(
            einsum_p,
            operands,
            {"inputs": inputs, "output": output, "optimize": optimize, "memory_limit": memory_limit},
        )
    dts = [dtype_of(x) for x in operands]
    if any(d != dts[0] for d in dts[1:]):  # promoted all at once, as `_promoted` does untraced
        dt = np.result_type(*dts)
        operands = [x if d == dt else astype(x, dt) for x, d in zip(operands, dts)]
    path = _path(inputs, output, shapes, optimize, memory_limit)
    kind = _one_trace(operands)
    if kind == "reverse" and output and _staged(operands):
        kind = None  # a staged sweep of a non-scalar tree would recompute its forward: pairwise
    if kind == "reverse":  # first-order reverse mode: the whole tree is one node
        params = {"inputs": inputs, "output": output, "optimize": path, "memory_limit": None, "slices": ()}
        return bind(sliced_einsum_p, operands, params)
    if kind == "staging":  # a staged forward: one equation, lowered along the same path
        return bind(
            einsum_p, operands, {"inputs": inputs, "output": output, "optimize": path, "memory_limit": None}
        )
    result: Value = _follow(pairwise_steps(inputs, output, path), operands, _traced_step)
    return result


def _trace_kinds(values: Sequence[Any]) -> set[str]:
    """The kinds of every trace boxing the values, every level down."""
    kinds: set[str] = set()
    for x in values:
        while type(x) is Tensor and x._trace is not None:
            kinds.add(x._trace.kind)
            x = x._value
    return kinds


def _staged(operands: Sequence[Value]) -> bool:
    """Whether a staging trace (`einad.jit`, `make_graph`) boxes any operand, at any level."""
    return "staging" in _trace_kinds(operands)


def _one_trace(operands: Sequence[Value]) -> str | None:
    """The kind of the one trace that boxes the operands, every level down, a staging trace
    innermost aside (`einad.jit` compiles what it records); None for two or more.

    ``"reverse"`` is first-order reverse mode (eager, or staged by `einad.jit` for a scalar
    result, see `contract`; any library's arrays but dask's blocks), where one tree node
    pays: its sweep reads the forward's
    intermediates, and a scalar's value and gradients take one call. Any other nesting keeps
    pairwise nodes, whose derivatives are pairwise again (a tree node's own derivatives
    recontract the whole tree).
    """
    traces: set[Any] = set()
    foreign = False
    for x in operands:
        while type(x) is Tensor and x._trace is not None:
            traces.add(x._trace)
            x = x._value
        x = x.concrete if type(x) is Staged else x
        if not isinstance(x, (np.ndarray, np.generic)):
            if blocked(x):
                return None  # dask's blocks: each pairwise step in its own einsum
            foreign = True
    if len(traces) > 1:  # an operand staged only (a constant of the trace above it) is no other trace
        traces = {t for t in traces if t.kind != "staging"}
    if len(traces) != 1:
        return None
    kind: str = next(iter(traces)).kind
    if foreign and kind != "reverse":
        return None  # another library's arrays: a tree in first-order reverse mode only
    return kind


def contract_planned(
    inputs: tuple[str, ...],
    output: str,
    operands: Sequence[Value],
    path: Path,
    slices: Slices,
    memory_limit: MemoryLimit,
    executor: Any = None,
    progress: bool = False,
) -> Value:
    """Contract along a planned `path`: one sliced equation when `slices`, else as `contract`.

    `memory_limit` is kept in a sliced equation's parameters, so the contractions
    its derivatives make are planned within it too. So are `executor` (where the
    slices run: a `dask.distributed.Client` or a `concurrent.futures.Executor`, see
    `cluster`; None, the in-process thread pool, is left out) and `progress` (a bar
    over the slices; False is left out): the derivatives' slices run there too, and
    `einad.jit` compiles the equation with them. Both are static parameters, compared
    by identity, never traced. A contraction that is not sliced runs in the caller's
    process whatever `executor` says.
    """
    cluster.kind(executor)  # a TypeError at the call for anything else
    if slices:
        params = {
            "inputs": inputs,
            "output": output,
            "optimize": path,
            "memory_limit": memory_limit,
            "slices": slices,
        }
        if executor is not None:
            params["executor"] = executor
        if progress:
            params["progress"] = True
        return bind(sliced_einsum_p, operands, params)
    return contract(inputs, output, operands, path)


def _traced_step(ins: tuple[str, ...], out: str, picked: list[Any]) -> Any:
    """One step of a path on traced values: one node per pairwise step."""
    if len(picked) <= 2:
        return contract(ins, out, picked)
    # an explicit path asked for an N-operand step: one node, the general rule
    whole = (tuple(range(len(picked))),)
    return bind(einsum_p, picked, {"inputs": ins, "output": out, "optimize": whole, "memory_limit": None})


# -- spread: the inverse shape of a one-operand einsum ------------------------------


def _spread_impl(x: Any, src: str, dst: str, shape: Shape) -> Any:
    """An array indexed by `dst` (shape `shape`) holding `x` (indexed by `src`).

    Letters of `dst` missing from `src` are broadcast; letters repeated in `dst`
    put `x` on that diagonal, zeros elsewhere. Costs one pass over the result.
    """
    if xp_of(x) is not np:
        return _spread_any(x, src, dst, shape)
    return executor.spread(x, src, dst, shape)


def _spread_any(x: Any, src: str, dst: str, shape: Shape) -> Any:
    """`_spread_impl` on a library other than numpy, with the standard's operations: a `dst`
    that repeats a letter written into zeros where the library writes in place
    (`executor.spread_written`); else, with no writes (dask stays lazy, JAX's arrays are
    immutable), `x` laid along `dst` (size 1 at a repeated letter's later places), masked by
    the identity of each repeated letter, broadcast."""
    xp = xp_of(x)
    u, present, view = executor.spread_layout(src, dst, shape)
    if u != dst and writes_in_place(x):  # zeros, the diagonals written
        return executor.spread_written(xp, x, src, dst, shape)
    if present != src:
        x = executor.step(xp, (src,), present, [x])
    if u == dst:
        return xp.broadcast_to(xp.reshape(x, view), shape)
    first = {c: dst.index(c) for c in u}
    x = xp.reshape(x, tuple(view[u.index(c)] if i == first[c] else 1 for i, c in enumerate(dst)))
    mask: Any = None
    for i, c in enumerate(dst):
        if i != first[c]:
            n = shape[i]
            eye = xp.eye(n, dtype=xp.bool, device=device(x))
            eye = xp.reshape(eye, tuple(n if k in (first[c], i) else 1 for k in range(len(dst))))
            mask = eye if mask is None else mask & eye
    zero = xp.zeros((), dtype=x.dtype, device=device(x))
    return xp.broadcast_to(xp.where(mask, x, zero), shape)


spread_p = Primitive("spread", _spread_impl)


def spread(x: Value, src: str, dst: str, shape: Sequence[int]) -> Value:
    if src == dst:
        return x
    if (
        not src
        and (type(x) is np.ndarray or isinstance(x, np.generic))
        and x.shape == ()
        and x.dtype.kind in "biufc"
        and len(set(dst)) == len(dst)
    ):
        # a numpy number broadcast (the cotangent of a sum, of a mean): the read-only view with
        # zero strides that numpy.broadcast_to makes, by ndarray's constructor (no Python frames)
        out: np.ndarray = np.ndarray(tuple(shape), x.dtype, x, 0, (0,) * len(dst))
        out.flags.writeable = False
        return out
    return bind(spread_p, (x,), {"src": src, "dst": dst, "shape": tuple(shape)})


def _batch_spread(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    beta = fresh_symbols(set(params["src"] + params["dst"]), 1)[0]
    return spread(vals[0], beta + params["src"], beta + params["dst"], (size,) + params["shape"])


def _spread_aliasing(params: Params, n_operands: int) -> Aliasing:
    """A broadcast is a (read-only) view of its operand; a diagonal is written into new zeros."""
    dst = params["dst"]
    return "fresh" if len(set(dst)) < len(dst) else "view"


declare(
    spread_p,
    vjp=lambda g, ans, vals, p, needed: [contract((p["dst"],), p["src"], [g])],
    keep=lambda needed: ((False,), False),
    jvp=lambda ts, ans, vals, p: spread(ts[0], p["src"], p["dst"], p["shape"]),
    batch=_batch_spread,
    aliasing=_spread_aliasing,
    linear=True,
)


def _plain(x: Value) -> Any:
    """The array inside an untraced value."""
    return x._value if type(x) is Tensor else x


def _traced(x: Any) -> bool:
    return type(x) is Tensor and x._trace is not None


class Spread(Structured):
    """The cotangent ``spread(x, src, dst, shape)``, kept as its small source `x`.

    Einsum's VJP gives an operand with repeated letters (a trace's, a
    diagonal's) its cotangent this way. Two spreads to the same place add their
    sources; added to a dense array the pass owns, `x` is added onto that
    array's diagonal (or broadcast over it) in place; `dense` is one `spread`.
    """

    __slots__ = ("dst", "dtype", "shape", "src", "x")

    def __init__(
        self, x: Value, src: str, dst: str, shape: Shape, dtype: np.dtype[Any] | None = None
    ) -> None:
        """`dtype`: `x`'s, when the caller knows it."""
        self.x = x
        self.src = src
        self.dst = dst
        self.shape = shape
        self.dtype = dtype_of(x) if dtype is None else dtype

    def __repr__(self) -> str:
        return f"Spread({self.src or 'scalar'} -> {self.dst}, {self.shape}, {self.dtype})"

    @property
    def traced(self) -> bool:
        return _traced(self.x)

    def dense(self) -> Value:
        return spread(self.x, self.src, self.dst, self.shape)

    def plus(self, other: Structured) -> Structured | None:
        """Spreads to the same place add in the space of their sources' letters.

        ``spread(x, "", "ii") + spread(y, "i", "ii")`` is ``spread(x + y, "i", "ii")``:
        each source is first spread (broadcast) to the union of the letters.
        """
        if type(other) is not Spread or (other.dst, other.shape) != (self.dst, self.shape):
            return None
        src = "".join(c for c in unique(self.dst) if c in self.src or c in other.src)
        dims = dict(zip(self.dst, self.shape))
        shape = tuple(dims[c] for c in src)
        if self.traced or other.traced:
            x: Any = spread(self.x, self.src, src, shape)
            y: Any = spread(other.x, other.src, src, shape)
            # einad's add through Tensor's operator (one of the two is traced)
            return Spread(x + y if type(x) is Tensor else y.__radd__(x), src, self.dst, self.shape)
        # plain arrays: laid out along `src` with size-1 axes, which the add broadcasts
        x, y = _plain(self.x), _plain(other.x)
        xp = namespace(x, y)
        if xp is np:
            x = executor.spread_source(x, self.src, src, shape)[1]
            y = executor.spread_source(y, other.src, src, shape)[1]
            return Spread(np.add(x, y), src, self.dst, self.shape)
        like = y if xp_of(x) is np else x  # (one of them is the library's)
        x, y = _laid_along(xp, like, x, self.src, src, shape), _laid_along(xp, like, y, other.src, src, shape)
        return Spread(xp.add(x, y), src, self.dst, self.shape)

    def add_into(self, buf: Array) -> None:
        u, x = executor.spread_source(_plain(self.x), self.src, self.dst, self.shape)
        view = buf if u == self.dst else np.einsum(numpy_subscripts(self.dst + "->" + u), buf)  # writable
        np.add(view, x, out=view)


def _laid_along(xp: ModuleType, like: Any, x: Any, src: str, letters: str, shape: Shape) -> Any:
    """`x` (indexed by `src`: an array of library `xp`, or numpy's, made one like `like`) laid
    out along the distinct `letters` (of sizes `shape`), with size 1 where it has none of them:
    `executor.spread_source` for any library."""
    _, present, view = executor.spread_layout(src, letters, shape)
    if xp_of(x) is np:
        x = asarray(like, np.asarray(x), dtype_of(x))
    if present != src:
        x = executor.step(xp, (src,), present, [x])
    return xp.reshape(x, view)


def _varies(x: Any) -> bool:
    """Whether `x` is a Tensor of a trace that differentiates (a staged or batched value is a
    constant to the passes `Pending.inner` serves)."""
    return type(x) is Tensor and x._trace is not None and x._trace.kind in ("reverse", "forward")


class Pending(Structured):
    """The cotangent ``contract(inputs, output, operands)``, not contracted yet.

    Einsum's VJP gives an operand its cotangent this way while `deferring` is on (a reverse
    pass run with ``lazy_leaves``: a Hessian-vector product's inner gradient). The pass makes
    it dense like any `Structured` cotangent where a rule or a sum needs it; one that reaches
    an input leaves the pass as it is, so that the HVP applies the contraction to only what
    it reads: the tangent alone (`tangent`: forward over reverse, whose primal gradient is
    discarded) or its inner product with the direction (`inner`: reverse over reverse, where
    the untraced operands meet the direction first and the traced cotangent last, so the
    outer reverse pass reads that small product instead of contracting them again).
    """

    __slots__ = ("dtype", "inputs", "operands", "optimize", "output", "shape")

    def __init__(
        self,
        inputs: tuple[str, ...],
        output: str,
        operands: Sequence[Value],
        optimize: Any,
        shape: Shape,
        dtype: np.dtype[Any] | None = None,
    ) -> None:
        """`dtype`: the dense value's, when the caller knows it (else the first operand's)."""
        self.inputs, self.output, self.operands, self.optimize = inputs, output, tuple(operands), optimize
        self.shape = shape
        self.dtype = dtype_of(operands[0]) if dtype is None else dtype

    def __repr__(self) -> str:
        return f"Pending({','.join(self.inputs)}->{self.output}, {self.shape}, {self.dtype})"

    @property
    def x(self) -> Value:
        """The cotangent it contracts (whose library `autodiff._numpy_source` asks for)."""
        return self.operands[0]

    @property
    def traced(self) -> bool:
        return any(_traced(x) for x in self.operands)

    def dense(self) -> Value:
        return contract(self.inputs, self.output, self.operands, self.optimize)

    def plus(self, other: Structured) -> Structured | None:
        return None

    def add_into(self, buf: Array) -> None:
        np.add(buf, _plain(self.dense()), out=buf)

    def tangent(self, trace: Any) -> Value | None:
        """The tangent of the dense value under the forward `trace` (its operands are that
        trace's Tensors or constants to it), without computing the value: the einsum's JVP.
        None when no operand carries a tangent."""
        vals: list[Any] = []
        tangents: list[Any] = []
        for x in self.operands:
            if type(x) is Tensor and x._trace is trace:
                vals.append(x._value)
                tangents.append(x._tangent)
            else:
                vals.append(x)
                tangents.append(None)
        params = {
            "inputs": self.inputs,
            "output": self.output,
            "optimize": self.optimize,
            "memory_limit": None,
        }
        out: Value | None = _einsum_jvp(tangents, None, vals, params)
        return out

    def inner(self, v: Value) -> Value:
        """``sum(dense * v)`` (no conjugate), contracting the untraced operands with `v` first.

        The product of the constant ones (with `v` when `v` is one) is one contraction
        to the letters the traced operands share with it; the traced operands meet it last, so an
        enclosing reverse pass pulls back through that small product alone.
        """
        ins = (*self.inputs, self.output)
        ops = [*self.operands, v]
        fixed_ins: list[str] = []
        fixed: list[Any] = []
        moving_ins: list[str] = []
        moving: list[Any] = []
        for s, x in zip(ins, ops):  # (loops, not comprehensions: every reverse-over-reverse HVP)
            t = x._trace if type(x) is Tensor else None
            if t is not None and t.kind in ("reverse", "forward"):  # (`_varies`, inline)
                moving_ins.append(s)
                moving.append(x)
            else:
                fixed_ins.append(s)
                fixed.append(x)
        if len(fixed) < 2 or not moving:
            return contract(ins, "", ops, self.optimize if len(ops) <= 2 else "auto")
        wanted = "".join(moving_ins)
        kept = ""
        for s in fixed_ins:
            for c in s:
                if c in wanted and c not in kept:
                    kept += c
        small = contract(tuple(fixed_ins), kept, fixed)
        return contract((*moving_ins, kept), "", [*moving, small])


def _one_dtype(values: Sequence[Any], dt: np.dtype[Any]) -> bool:
    """Whether every value is of dtype `dt` (a pending cotangent needs no cast)."""
    for x in values:
        if (x.dtype if type(x) in _SHAPED else dtype_of(x)) != dt:
            return False
    return True


_SHAPED = frozenset({np.ndarray, Tensor, Meta})
"""Values whose ``dtype`` is numpy's and ``shape`` a tuple (`dtype_of` and `shape_of` not asked)."""


_defer = threading.local()


class deferring(QuietRules):
    """The context of a lazy reverse pass: while on (this thread), einsum's VJP returns `Pending`
    cotangents (see `Pending`), and the rules run quiet (`QuietRules`: one context for both)."""

    __slots__ = ("saved",)

    def __enter__(self) -> None:
        QuietRules.__enter__(self)
        self.saved = getattr(_defer, "on", False)
        _defer.on = True

    def __exit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        _defer.on = self.saved
        QuietRules.__exit__(self, typ, exc, tb)


# -- the rules ------------------------------------------------------------------------


def _einsum_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    """Operand k's cotangent: the contraction to its kept letters, cast to its dtype,
    then spread to its subscripts (returned as a `Spread`, see `Structured`)."""
    if (
        sum(needed) > 1
        and len(vals) > 2
        and params["memory_limit"] is None
        and "batch" not in _trace_kinds([g, *vals])
    ):
        # two or more cotangents of a tree: one sweep through its intermediates (it reads every
        # operand, which the node keeps since each cotangent reads the others)
        return _tree_vjp(g, vals, params, needed)
    return _operand_vjps(g, vals, params, needed)


def _operand_vjps(g: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    """Each operand's cotangent by its own contraction (`_einsum_vjp`'s; for a batch of
    cotangents, `vmap`'s, each of them one batched contraction)."""
    inputs, output = params["inputs"], params["output"]
    opt, mem = params["optimize"], params["memory_limit"]
    if not isinstance(opt, str):
        opt = "auto"  # a path of the forward's operands: the pullbacks' contractions plan their own
    grads: list[Any] = []
    defer = mem is None and getattr(_defer, "on", False)
    # a scalar cotangent of one (the seed of a scalar's gradient) multiplies nothing: it is left
    # out of the contraction, so a scalar einsum's cotangent is the other operand itself
    # (``einsum("i,i->", a, b)``: b), a read-only view where it is a plain numpy array
    ones = type(g) is np.ndarray and g.ndim == 0 and bool(g == 1)
    for k, need in enumerate(needed):
        if not need:
            grads.append(None)
            continue
        ins, kept, target = vjp_operands(inputs, output, k)
        others = list(vals[:k]) + list(vals[k + 1 :])
        v = vals[k]  # (an array, a Tensor or a Meta: their own dtype and shape, read directly)
        dt = v.dtype if type(v) in _SHAPED else dtype_of(v)
        if defer and kept == target and _one_dtype([g, *others], dt):
            shape = v.shape if type(v) in _SHAPED else shape_of(v)
            grads.append(Pending(ins, kept, [g, *others], opt, shape, dt))
            continue
        if ones and others and (_one_dtype(others, g.dtype) or _sums_alike(g, others)):
            r = contract(ins[1:], kept, others, opt, mem)
            if type(r) is np.ndarray:
                for x in others:
                    if r is x:
                        r = r.view()
                        r.flags.writeable = False
                        break
        else:
            r = contract(ins, kept, [g] + others, opt, mem)
        rt = type(r)  # (arrays, Tensors and numpy scalars: their dtypes read directly)
        if (r.dtype if rt in _SHAPED or isinstance(r, np.generic) else dtype_of(r)) != dt:  # type: ignore[union-attr]
            r = astype(r, dt)  # on the small array: the cast commutes with the spread
            rt = type(r)
        if kept == target:
            grads.append(r)
        else:  # (kept small: two cotangents of one place add their sources, then spread once)
            grads.append(Spread(r, kept, target, v.shape if type(v) in _SHAPED else shape_of(v), dt))
    return grads


def _sums_alike(g: Any, others: Sequence[Any]) -> bool:
    """Whether the operands `others` contract in the dtype they do with the cotangent `g` among
    them (then a cotangent of one may be left out; else leaving it out would sum a float16 or an
    int operand in its own dtype, where the forward sums it promoted)."""
    dts = [dtype_of(x) for x in others]
    return bool(np.result_type(*dts) == np.result_type(g.dtype, *dts))


def _tree_vjp(g: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    """The cotangents of an einsum of three or more operands (a staged contraction run under
    `grad`, or a merged one): one sweep along its path (`einsum_vjp_p`), not one whole
    contraction per operand."""
    inputs, output, opt = params["inputs"], params["output"], params["optimize"]
    if not isinstance(opt, tuple):
        opt = _path(inputs, output, tuple(shape_of(v) for v in vals), opt, None)
    wrt = tuple(k for k, n in enumerate(needed) if n)
    sweep = {"inputs": inputs, "output": output, "optimize": opt, "memory_limit": None, "slices": ()}
    flat = bind(einsum_vjp_p, [g, *vals], {**sweep, "wrt": wrt, "zero": ()})
    return _unpack(flat, vals, wrt)


def _einsum_jvp(tangents: list[Any], ans: Any, vals: Sequence[Any], params: Params) -> Any:
    inputs, output = params["inputs"], params["output"]
    out: Any = None
    for k, t in enumerate(tangents):
        if t is None:
            continue
        operands = list(vals)
        operands[k] = t
        term = contract(inputs, output, operands, params["optimize"], params["memory_limit"])
        if out is None:
            out = term
        elif type(term) is Tensor and type(out) is not Tensor:
            out = term.__radd__(out)  # array-api-strict's operators refuse a Tensor on their right
        else:
            out = out + term
    return out


def _einsum_keep(needed: list[bool]) -> tuple[tuple[bool, ...], bool]:
    """Operand k's VJP reads every other operand; nothing reads the result."""
    key = tuple(needed)
    kept = _kept.get(key)
    if kept is None:  # worked out once per mask
        kept = _kept[key] = tuple(any(n for j, n in enumerate(key) if j != i) for i in range(len(key))), False
    return kept


_kept: dict[tuple[bool, ...], tuple[tuple[bool, ...], bool]] = {}


def _batch_einsum(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """One more letter, on the batched operands and the result: one contraction for the batch
    (a sliced einsum is planned, and sliced, again with it)."""
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


def _einsum_aliasing(params: Params, n_operands: int) -> Aliasing:
    """A product of two or more operands is a new array; one operand's einsum may be its view
    (numpy's transposes and diagonals are)."""
    return "fresh" if n_operands >= 2 else "may_view"


def _replay_einsum(vals: Sequence[Any], params: Params) -> Any:
    """A staged einsum applied again (`program.run_graph`): through `contract`, as the user's call
    went, so that a reverse trace takes a staged network of three or more operands as one tree
    (one sweep through the forward's kept intermediates), not as an einsum whose VJP recomputes
    them. One with a memory limit stays that einsum, whose VJP plans the cotangents' contractions
    within the limit too."""
    if params["memory_limit"] is not None:
        return bind(einsum_p, vals, params)
    return contract(params["inputs"], params["output"], vals, params["optimize"])


declare(
    einsum_p,
    structured_vjp=_einsum_vjp,
    replay=_replay_einsum,
    jvp=_einsum_jvp,
    keep=_einsum_keep,
    batch=_batch_einsum,
    lower=_lower_einsum,
    aliasing=_einsum_aliasing,
    linear=True,
)


# -- sliced contractions: one equation, the gradient one sweep -------------------------------
#
# A sliced einsum (`slicing.plan` chose its path and slices) is one equation of
# ``sliced_einsum_p``: its implementation contracts slice by slice along the
# path and accumulates. Its VJP is one ``einsum_vjp_p`` equation: per slice, it
# recomputes that slice's intermediates and pulls the cotangent back through
# them, adding each operand's gradient into its slice, so the backward pass
# keeps to the limit too (a checkpoint of each slice, not of the whole). Its
# result packs the gradients of the operands `wrt` into one flat array that
# ``unpack_p`` views one by one. The JVP of a sliced einsum is the sum of sliced
# einsums with a tangent in one operand's place; the rules of ``einsum_vjp_p``
# are again sliced einsums and sweeps, so the derivative program differentiates
# again, to any order.


def _is_looped(s: Schedule, i: int) -> bool:
    return i >= len(s.inputs) and i in s.varies


def _pullback(ins: tuple[str, ...], out: str, j: int, ct: Any, operands: Sequence[Any], shape: Shape) -> Any:
    """The cotangent of operand `j` (of `shape`) of the step ``ins -> out``: the permuted
    subscripts, reading every operand but `j`."""
    spec, kept, target = vjp_operands(ins, out, j)
    others = list(operands[:j]) + list(operands[j + 1 :])
    r = _einsum_impl(ct, *others, inputs=spec, output=kept)
    if kept != target:
        r = _spread_impl(r, kept, target, shape)
    return r


def _pullback_in(
    sc: _Scratch | None,
    ins: tuple[str, ...],
    out: str,
    j: int,
    ct: Any,
    operands: Sequence[Any],
    shape: Shape,
) -> tuple[Any, bool]:
    """`_pullback`, as a pairwise step in a buffer of `sc`'s pool where it is one; and whether
    it is (then the value is no view of `ct` or of an operand, and its buffer the pool's)."""
    if sc is not None and len(ins) == 2:
        spec, kept, target = vjp_operands(ins, out, j)
        r = sc.product(spec, kept, [ct, operands[1 - j]])
        if r is not None:
            if kept == target:
                return r, True
            spread_ = _spread_impl(r, kept, target, shape)
            if spread_.base is None:  # (a diagonal, written into zeros of its own)
                sc.pool.put(r)
            return spread_, True
    return _pullback(ins, out, j, ct, operands, shape), False


def _over_slices(
    s: Schedule,
    memory_limit: MemoryLimit,
    gradient: bool,
    body: Callable[[dict[str, tuple[int, int]]], None],
    progress: bool = False,
) -> None:
    """Run ``body(ranges)`` for every slice in this process: one after the other, or spread
    over a pool of `slicing.workers` threads (numpy's matrix products release the GIL). Each
    thread takes every w-th slice; `body` adds into shared arrays under `_add_lock`.

    An exception names the slice it came from (`cluster.in_slice`); it, or Ctrl-C, stops
    the other threads before their next slice, and the pool is empty when this returns.
    """
    n = s.n_slices
    w = workers(s, memory_limit, gradient)
    bar = cluster.Progress(n, progress)
    stop = threading.Event()

    def share(first: int) -> None:
        for i in range(first, n, w):
            if stop.is_set():
                return
            ranges = s.slice_ranges(i)
            try:
                body(ranges)
            except Exception as err:
                stop.set()
                cluster.in_slice(err, i, n, ranges)
                raise
            bar.update(1)

    try:
        if w <= 1:
            share(0)
        else:
            with ThreadPoolExecutor(max_workers=w, thread_name_prefix="einad-slice") as pool:
                futures = [pool.submit(share, i) for i in range(w)]
                try:
                    for f in futures:
                        f.result()
                except BaseException:
                    stop.set()  # the other threads stop before their next slice
                    raise
    finally:
        bar.close()


_add_lock = threading.Lock()
"""Serializes the additions of slices into shared results and gradients (a small part of a
slice's work; the contractions themselves run in parallel)."""


def _hoisted(s: Schedule, arrays: Sequence[Any], keep_all: bool) -> dict[int, Any]:
    """The operands and the hoisted steps' values (only those the loop reads unless `keep_all`)."""
    n = len(s.inputs)
    xp = namespace(*arrays)
    run = executor.runner(xp)
    vals: dict[int, Any] = dict(enumerate(arrays))
    left = {a for t in s.looped for a in s.steps[t].args}  # hoisted values the loop reads
    for t in s.hoisted:
        st = s.steps[t]
        vals[st.result] = run(st.ins, st.out, [vals[a] for a in st.args])
        if not keep_all:
            for a in st.args:
                if a >= n and a not in left:
                    del vals[a]
    return vals


class _Scratch:
    """The buffers of the slices one thread (or one chain of tasks on a dask worker) runs, on
    numpy arrays.

    Every slice runs the same steps on arrays of the same shapes, so the buffers one slice
    lets go serve the next (`network.scratch`): a slice's large intermediates are made once
    per thread, not once per slice, and do not fault their pages in again (the kernel
    zeroes every page of a fresh mapping: on benchmark case 10 a sixth of a worker's time).
    A pairwise step and its pullbacks run as `network.pair_step`s, whose results are
    buffers of the pool (or fresh), never views of their operands; a value is given back
    (`free`) when it is gone, if a pairwise step made it (`mine`) and one read it, so that
    nothing else can be a view of its buffer. Other steps run as before. Between slices the
    pool keeps only its free buffers (`begin`), and none when the slice's shapes change
    (a letter's chunks differ by one, the larger first, `slicing._bounds`: a pool fitting
    the smaller slice's requests into the larger one's buffers could miss some and make
    more beside them, past the slice bound `memory_limit` plans for).
    """

    __slots__ = ("mine", "pool", "sizes")

    def __init__(self) -> None:
        self.pool = scratch()
        self.sizes: tuple[int, ...] | None = None
        self.mine: set[int] = set()  # ids of the slice's values in buffers of a pairwise step

    @staticmethod
    def of(local: threading.local | None, arrays: Sequence[Any]) -> _Scratch | None:
        """The calling thread's scratch in `local` (None: a task's, which the next tasks of
        its chain on a dask worker share, `cluster.kept`); None unless every array is numpy's."""
        if not all(type(x) is np.ndarray for x in arrays):
            return None
        if local is None:
            task: _Scratch = cluster.kept(_Scratch)
            return task
        scratch_: _Scratch | None = getattr(local, "scratch", None)
        if scratch_ is None:
            scratch_ = local.scratch = _Scratch()
        return scratch_

    def begin(self, ranges: dict[str, tuple[int, int]]) -> None:
        self.mine.clear()
        sizes = tuple(hi - lo for lo, hi in ranges.values())
        if sizes != self.sizes:
            self.pool.release()
            self.sizes = sizes
        else:
            self.pool.settle()

    def product(self, ins: tuple[str, ...], out: str, picked: Sequence[Any]) -> Any:
        """Step ``ins -> out`` of two numpy arrays in a buffer of the pool, or None (another
        step, or a letter broadcast from size 1)."""
        if len(picked) != 2:
            return None
        a, b = picked
        if type(a) is not np.ndarray or type(b) is not np.ndarray:
            return None
        sizes = dict(zip(ins[0], a.shape))
        if any(sizes.get(c, d) != d for c, d in zip(ins[1], b.shape)):
            return None
        return pair_step(ins[0], ins[1], out, a.shape, b.shape)(self.pool, a, b)

    def free(self, i: int, x: Any) -> None:
        """Value `i` (`x`) is gone: its buffer serves a later step, if a pairwise step made it."""
        if i in self.mine and x is not None:
            self.mine.discard(i)
            self.pool.put(x)


def _slice_step(
    sc: _Scratch | None, run: Callable[..., Any], ins: tuple[str, ...], out: str, picked: list[Any]
) -> tuple[Any, bool]:
    """One looped step of a slice: a pairwise product in a buffer of `sc`'s pool where it is
    one (True: a value of its own), else `run`'s (False: maybe a view of an operand)."""
    r = None if sc is None else sc.product(ins, out, picked)
    return (run(ins, out, picked), False) if r is None else (r, True)


def _forward_slice(
    s: Schedule,
    arrays: Sequence[Any],
    vals: dict[int, Any],
    run: Callable[..., Any],
    ranges: dict[str, Any],
    scratch_: _Scratch | None = None,
) -> Any:
    """One slice of the forward: its looped steps, reading the operands' slices and the
    hoisted values `vals`; returns its part of the result (in a buffer of `scratch_`'s, if
    given, which the caller gives back when it has added it)."""
    n = len(s.inputs)
    if scratch_ is not None:
        scratch_.begin(ranges)
    local = {k: arrays[k][s.index(s.inputs[k], ranges)] for k in range(n) if k in s.varies}
    for t in s.looped:
        st = s.steps[t]
        picked = [local.pop(a) if a in local else vals[a] for a in st.args]
        local[st.result], own = _slice_step(scratch_, run, st.ins, st.out, picked)
        if own and scratch_ is not None:
            scratch_.mine.add(st.result)
            for i, a in enumerate(st.args):
                scratch_.free(a, picked[i])  # (read by this step alone)
        del picked
    return local.pop(s.steps[-1].result)


def _result_buffer(like: Any, shape: Shape, dtype: np.dtype[Any]) -> Any:
    """Zeros to add slices into: a numpy array, or `_Blocks` for another library."""
    return np.zeros(shape, dtype=dtype) if xp_of(like) is np else _Blocks(like, shape, dtype)


def _run_sliced(
    s: Schedule,
    arrays: Sequence[Any],
    memory_limit: MemoryLimit = None,
    where: Any = None,
    progress: bool = False,
) -> Any:
    """The forward of a sliced contraction: hoisted steps once, the rest per slice; on the
    thread pool, or as tasks on the executor `where` (`cluster.run`)."""
    if where is not None:
        prepare = functools.partial(_prepare_forward, s) if s.hoisted else None
        work = cluster.Work(prepare, functools.partial(_forward_batch, s), _plus_arrays, None)
        out = cluster.run(where, work, arrays, s.n_slices, progress)
        return np.asarray(out) if isinstance(out, np.generic) else out
    run = executor.runner(namespace(*arrays))
    vals = _hoisted(s, arrays, keep_all=False)
    sizes = dict(s.sizes)
    shape = tuple(sizes[c] for c in s.output)
    dtype = np.result_type(*(dtype_of(a) for a in arrays))
    result = _result_buffer(arrays[0], shape, dtype)

    local = threading.local()
    final = s.steps[-1].result

    def body(ranges: dict[str, tuple[int, int]]) -> None:
        scratch_ = _Scratch.of(local, arrays)
        part = _forward_slice(s, arrays, vals, run, ranges, scratch_)
        with _add_lock:
            _add_at(result, s.index(s.output, ranges), part)
        if scratch_ is not None:
            scratch_.free(final, part)

    _over_slices(s, memory_limit, False, body, progress)
    return _total(result)


# The tasks of a sliced call on an executor (`cluster.Work`): module-level functions of the
# schedule and the call's data, so that they pickle by name to any worker that imports einad.


def _prepare_forward(s: Schedule, *arrays: Any) -> dict[int, Any]:
    """The hoisted values the forward's slices read (not the operands, which every task has)."""
    n = len(s.inputs)
    return {k: v for k, v in _hoisted(s, arrays, keep_all=False).items() if k >= n}


def _prepare_sweep(s: Schedule, g: Any, *arrays: Any) -> dict[int, Any]:
    """Every hoisted value (a sweep pulls back through all of them at the end)."""
    n = len(s.inputs)
    return {k: v for k, v in _hoisted(s, arrays, keep_all=True).items() if k >= n}


def _values(arrays: Sequence[Any], shared: dict[int, Any] | None) -> dict[int, Any]:
    vals = dict(enumerate(arrays))
    vals.update(shared or {})
    return vals


def _each_slice(s: Schedule, slices: range, body: Callable[[dict[str, tuple[int, int]]], None]) -> None:
    """``body(ranges)`` for the slices `slices` of a task, one after the other: an exception
    names its slice, and a task whose call was cancelled stops before its next slice."""
    for i in slices:
        if cluster.cancelled():
            raise cluster.Cancelled(f"the call was cancelled before slice {i}")
        ranges = s.slice_ranges(i)
        try:
            body(ranges)
        except Exception as err:
            cluster.in_slice(err, i, s.n_slices, ranges)
            raise


def _carried(carry: Any, like: Any, shape: Shape, dtype: np.dtype[Any]) -> tuple[Any, Any]:
    """The buffer a task adds its slices into, and what is left of `carry` to add at the end.

    `carry` is the partial result of the tasks before this one on its worker, or None. A
    writable numpy array of the buffer's shape and dtype is adopted: the task adds into it in
    place (it is the carry's only reader: `cluster.run`), so a worker holds one partial result
    per thread, not one per task. Anything else (read-only, another library's array) is added
    at the end instead (`_settle`).
    """
    if (
        isinstance(carry, np.ndarray)
        and carry.flags.writeable
        and carry.shape == tuple(shape)
        and carry.dtype == dtype
        and xp_of(like) is np
    ):
        return carry, None
    return _result_buffer(like, shape, dtype), carry


def _settle(buf: Any, left: Any) -> Any:
    """The array `buf` holds, plus what `_carried` left over."""
    out = _total(buf)
    return out if left is None else _plus_arrays(out, left)


def _forward_batch(
    s: Schedule, slices: range, shared: dict[int, Any] | None, carry: Any, *arrays: Any
) -> Any:
    """A task of the forward: the sum of its slices, laid out as the result, added to `carry`
    (the partial result of the tasks before it, None for the first; written in place)."""
    vals = _values(arrays, shared)
    run = executor.runner(namespace(*arrays))
    sizes = dict(s.sizes)
    dtype = np.result_type(*(dtype_of(a) for a in arrays))
    result, left = _carried(carry, arrays[0], tuple(sizes[c] for c in s.output), dtype)
    del carry

    scratch_ = _Scratch.of(None, arrays)
    final = s.steps[-1].result

    def body(ranges: dict[str, tuple[int, int]]) -> None:
        part = _forward_slice(s, arrays, vals, run, ranges, scratch_)
        _add_at(result, s.index(s.output, ranges), part)
        if scratch_ is not None:
            scratch_.free(final, part)

    _each_slice(s, slices, body)
    return _settle(result, left)


def _plus_arrays(a: Any, b: Any) -> Any:
    """``a + b``, written into `a` when it is a writable numpy array that holds the sum (the
    callers own `a`: a task's carry, or the first input of a sum, read by nothing else)."""
    if (
        isinstance(a, np.ndarray)
        and a.flags.writeable
        and isinstance(b, (np.ndarray, np.generic))
        and a.shape == np.shape(b)
        and np.result_type(a, b) == a.dtype
    ):
        a += b
        return a
    return a + b


_Partial: TypeAlias = tuple[dict[int, Any], dict[int, Any], Any]
"""What a task of a sweep returns: its slices' part of each gradient (by operand), of the
cotangents of the hoisted values the slices read (by value id), and of a scalar
contraction's value (`fused`; else None). A plain tuple of dicts of arrays, gradients
first, so that dask sends it array by array without pickling the arrays (its scheduler
pickles with protocol 4, which copies the arrays into the pickle)."""


def _plus_partials(a: _Partial, b: _Partial) -> _Partial:
    """The sum of two `_Partial`s, added into `a`'s arrays where they are writable numpy
    arrays (`_plus_arrays`; `a` is read by nothing else)."""
    (ga, acc_a, va), (gb, acc_b, vb) = a, b
    return (
        {k: _plus_arrays(ga[k], gb[k]) for k in ga},
        {k: _plus_arrays(acc_a[k], acc_b[k]) for k in acc_a},
        None if va is None else _plus_arrays(va, vb),
    )


def _sweep_batch(
    s: Schedule,
    wrt: tuple[int, ...],
    fused: bool,
    slices: range,
    shared: dict[int, Any] | None,
    carry: _Partial | None,
    g: Any,
    *arrays: Any,
) -> _Partial:
    """A task of a sweep: its slices' parts of the gradients (and of the value when `fused`),
    added to `carry` (the partial result of the tasks before it, None for the first; its
    arrays written in place)."""
    vals = _values(arrays, shared)
    dt = np.result_type(dtype_of(g), *(dtype_of(x) for x in arrays))
    carried: _Partial = carry if carry is not None else ({}, {}, None)
    del carry
    grads, left = {}, {}
    for k in wrt:
        grads[k], left[k] = _carried(carried[0].get(k), g, tuple(arrays[k].shape), dt)
    sw = _Sweep(s, g, arrays, vals, grads, fused, threading.Lock(), task=True)
    acc_left = {}
    for a in sw.acc:  # (the accumulators of the hoisted values' cotangents)
        sw.acc[a], acc_left[a] = _carried(carried[1].get(a), g, tuple(vals[a].shape), dt)
    value_left = None
    if carried[2] is not None and fused:
        sw.total, value_left = _carried(carried[2], sw.total, (), dt)
    del carried
    _each_slice(s, slices, sw.slice)
    return (
        {k: _settle(b, left[k]) for k, b in grads.items()},
        {a: _settle(b, acc_left[a]) for a, b in sw.acc.items()},
        _settle(sw.total, value_left) if fused else None,
    )


def _sweep_finish(
    s: Schedule,
    wrt: tuple[int, ...],
    fused: bool,
    total: _Partial,
    shared: dict[int, Any] | None,
    g: Any,
    *arrays: Any,
) -> _Partial:
    """The last task of a sweep: the summed cotangents of the hoisted values pulled back through
    the hoisted steps, into the summed gradients (in place where `_carried` can: `total` is
    read by nothing else)."""
    vals = _values(arrays, shared)
    dt = np.result_type(dtype_of(g), *(dtype_of(x) for x in arrays))
    summed, acc, value = total
    del total
    grads = {}
    for k in wrt:
        grads[k], left = _carried(summed[k], g, tuple(arrays[k].shape), dt)
        if left is not None:  # (another library's arrays: summed as one block)
            _add_at(grads[k], (), left)
    sw = _Sweep(s, g, arrays, vals, grads, fused, threading.Lock())
    sw.acc = dict(acc)
    sw.pull_hoisted()
    return ({k: _total(b) for k, b in grads.items()}, {}, value)


class _Blocks:
    """An array summed from blocks, for libraries other than numpy, never written into (dask
    stays lazy): `add` sums what lands on one block; `value` lays the blocks side by side
    (concatenation), zeros where nothing landed (off a repeated letter's diagonal, or the
    slices of another task)."""

    def __init__(self, like: Any, shape: Shape, dtype: np.dtype[Any]) -> None:
        self.like, self.shape, self.dtype = like, shape, dtype
        self.parts: dict[tuple[tuple[int, int], ...], Any] = {}

    def add(self, index: tuple[slice, ...], x: Any) -> None:
        """``self[index] += x``; `index` cuts every axis (``()``: `x` is the whole array)."""
        key = tuple(sl.indices(n)[:2] for sl, n in zip(index, self.shape)) if index else ()
        self.parts[key] = x if key not in self.parts else self.parts[key] + x

    def value(self) -> Any:
        xp = xp_of(self.like)
        nd = len(self.shape)
        if () in self.parts:
            out = self.parts[()]
        elif not self.parts:
            out = zeros(self.like, self.shape, self.dtype)
        else:
            cuts = []  # each axis cut at every block's edges, so that the cuts cover it
            for axis, n in enumerate(self.shape):
                edges = sorted({0, n} | {e for k in self.parts for e in k[axis]})
                cuts.append(list(itertools.pairwise(edges)))

            def build(axis: int, key: tuple[tuple[int, int], ...]) -> Any:
                if axis == nd:
                    found = self.parts.get(key)
                    if found is None:  # a block no slice reaches (off a repeated letter's diagonal)
                        found = zeros(self.like, tuple(b - a for a, b in key), self.dtype)
                    return found
                blocks = [build(axis + 1, (*key, r)) for r in cuts[axis]]
                return blocks[0] if len(blocks) == 1 else xp.concat(blocks, axis=axis)

            out = build(0, ())
        if dtype_of(out) != self.dtype:
            out = xp.astype(out, lib_dtype(xp, self.dtype))
        return out


def _add_at(buf: Any, index: tuple[slice, ...], x: Any) -> None:
    """``buf[index] += x``: in place into a numpy array, recorded by a `_Blocks`."""
    if type(buf) is _Blocks:
        buf.add(index, x)
    else:
        buf[index] += x


def _total(buf: Any) -> Any:
    """The array a buffer of `_add_at` holds."""
    return buf.value() if type(buf) is _Blocks else buf


TREE_SLICES = True
"""Whether a gradient sweep runs each slice's looped steps as one planned tree (`_Tree`,
`network.tree_plan`) where they are pairs of numpy arrays, rather than step by step."""


@dataclass(frozen=True)
class _Tree:
    """A schedule's looped steps as one contraction tree (`network.tree_plan`'s terms): the
    values they read from outside (operands, sliced or not, and hoisted values: `ids`, indexed
    by `specs`), the path that contracts them step by step, and the letters of its result."""

    ids: tuple[int, ...]
    specs: tuple[str, ...]
    path: tuple[tuple[int, ...], ...]
    output: str

    @staticmethod
    def of(s: Schedule) -> _Tree | None:
        """The looped steps as a tree, or None where one of them is not a pair."""
        n = len(s.inputs)
        steps = [s.steps[t] for t in s.looped]
        if not steps or any(len(st.args) != 2 for st in steps):
            return None
        made = {st.result for st in steps}
        ids = tuple(dict.fromkeys(a for st in steps for a in st.args if a not in made))
        live, path = list(ids), []
        for st in steps:
            at = [live.index(a) for a in st.args]
            path.append(tuple(at))
            for i in sorted(at, reverse=True):
                del live[i]
            live.append(st.result)
        specs = tuple(s.inputs[a] if a < n else s.steps[a - n].out for a in ids)
        return _Tree(ids, specs, tuple(path), steps[-1].out)


class _Sweep:
    """One gradient sweep over a schedule's slices, adding the gradient of ``<g, contraction>``
    w.r.t. operand k into ``grads[k]`` (under `lock`).

    `slice(ranges)`, per slice: recompute the slice's intermediates that the pullbacks read
    (all but the last when every operand is differentiated: `Schedule.rerun`), then pull the
    slice of `g` back through the looped steps, adding each operand's cotangent into its
    slice of the gradient; the cotangents of hoisted values are summed in `acc`, and
    `pull_hoisted`, after the last slice, pulls them back through the hoisted steps once.

    `fused` (a scalar contraction, `g` = 1): each slice runs its whole forward first, so
    the same pass also sums the contraction's value into `total`; the values no pullback
    reads are let go as soon as the forward has used them.
    """

    def __init__(
        self,
        s: Schedule,
        g: Any,
        arrays: Sequence[Any],
        vals: dict[int, Any],
        grads: dict[int, Any],
        fused: bool,
        lock: Any,
        task: bool = False,
    ) -> None:
        n = len(s.inputs)
        self.s, self.g, self.arrays, self.vals, self.grads = s, g, arrays, vals, grads
        self.fused, self.lock = fused, lock
        xp = namespace(g, *arrays)
        self.run = executor.runner(xp)
        self.need = need = s.needs(frozenset(grads))
        dt = np.result_type(dtype_of(g), *(dtype_of(x) for x in arrays))
        self.acc: dict[int, Any] = {}  # cotangents of the hoisted values the loop reads
        for t in s.looped:
            for a in s.steps[t].args:
                if a >= n and a not in s.varies and a in need:
                    self.acc[a] = _result_buffer(g, tuple(vals[a].shape), dt)
        self.final = s.steps[-1].result
        self.rerun = s.rerun(need)
        self.producer = {st.result: t for t, st in enumerate(s.steps)}
        self.sizes = dict(s.sizes)
        # the summed value (`fused`): numpy's in place; another library's summed as arrays
        self.total: Any = np.zeros((), dtype=dt) if xp is np else None
        # each thread's `_Scratch` (a task's: its chain's, `_Scratch.of`)
        self.local = None if task else threading.local()
        self.tree = tree = _Tree.of(s) if TREE_SLICES else None
        # (the tree's operands that need a gradient: the same for every slice)
        self.tree_wrt = () if tree is None else tuple(k for k, a in enumerate(tree.ids) if a in need)

    def slice(self, ranges: dict[str, tuple[int, int]]) -> None:
        s, g, arrays, vals, need, run = self.s, self.g, self.arrays, self.vals, self.need, self.run
        fused, rerun, producer, sizes = self.fused, self.rerun, self.producer, self.sizes
        n = len(s.inputs)
        sc = _Scratch.of(self.local, [g, *arrays])
        if sc is not None:
            sc.begin(ranges)
            if self.tree is not None:
                self._tree_slice(self.tree, sc, ranges)
                return
        viewing: set[int] = set()  # steps run otherwise than by a pairwise step: maybe views
        local = {k: arrays[k][s.index(s.inputs[k], ranges)] for k in range(n) if k in s.varies}
        for t in s.looped:
            st = s.steps[t]
            if fused or t in rerun:
                picked = [local.get(a, vals.get(a)) for a in st.args]
                local[st.result], own = _slice_step(sc, run, st.ins, st.out, picked)
                if own and sc is not None:
                    sc.mine.add(st.result)
                else:
                    viewing.add(t)
                del picked
            if fused:  # drop what no pullback reads (the operands' slices are views)
                for a in st.args:
                    if _is_looped(s, a) and producer[a] not in rerun:
                        if sc is not None and t not in viewing:
                            sc.free(a, local.get(a))
                        local.pop(a, None)
        if fused:
            part = local.pop(self.final)
            with self.lock:
                if type(self.total) is np.ndarray:
                    self.total[()] += part
                else:
                    self.total = part if self.total is None else self.total + part
            if sc is not None:
                sc.free(self.final, part)
            del part
        cot = {self.final: g[s.index(s.output, ranges)]}
        pooled_cts: set[int] = set()  # the cotangents in buffers of `sc`'s pool
        for t in reversed(s.looped):
            st = s.steps[t]
            if st.result not in cot:  # no operand below it is differentiated
                continue
            ct = cot.pop(st.result)
            # (a value that no pullback of this step reads was not recomputed: None)
            operands: list[Any] = [
                local.pop(a, None) if _is_looped(s, a) else local.get(a, vals.get(a)) for a in st.args
            ]
            specs = [s.inputs[a] if a < n else s.steps[a - n].out for a in st.args]
            shapes = [
                tuple(ranges[c][1] - ranges[c][0] if c in ranges else sizes[c] for c in x) for x in specs
            ]
            # Smallest first: the last pullback does not read its own operand, which is
            # let go before it runs (a large intermediate and its cotangent never coexist;
            # with a pool, the cotangent takes its buffer).
            order = sorted(
                (j for j, a in enumerate(st.args) if a in need),
                key=lambda j: math.prod(shapes[j]),
            )
            keeper = None if t in viewing else sc  # (no value of this step is a view of another)
            ct_read = True  # whether every pullback made a value of its own (none a view of `ct`)
            for i, j in enumerate(order):
                a = st.args[j]
                if i == len(order) - 1:
                    if keeper is not None:
                        keeper.free(a, operands[j])
                    operands[j] = None
                r, pooled = _pullback_in(sc, st.ins, st.out, j, ct, operands, shapes[j])
                ct_read = ct_read and pooled
                if a < n:
                    with self.lock:
                        _add_at(self.grads[a], s.index(s.inputs[a], ranges) if a in s.varies else (), r)
                elif a in s.varies:
                    cot[a] = r
                    if pooled:
                        pooled_cts.add(a)
                    pooled = False  # (kept: given back when its own step has read it)
                else:
                    with self.lock:
                        _add_at(self.acc[a], (), r)
                if pooled and sc is not None:
                    sc.pool.put(r)
                del r
            if keeper is not None:
                for i, a in enumerate(st.args):
                    keeper.free(a, operands[i])
            if sc is not None and ct_read and st.result in pooled_cts:
                pooled_cts.discard(st.result)
                sc.pool.put(ct)
            del ct, operands

    def _tree_slice(self, tree: _Tree, sc: _Scratch, ranges: dict[str, tuple[int, int]]) -> None:
        """`slice` as one planned contraction tree (`network.tree_plan`, planned once per
        slice shape): the forward and the pullbacks of the slice's looped steps with their
        layouts chosen together, where step by step each pairwise product lays out its
        operands for itself (case 10 at n = 150: four copies of the largest intermediate or
        its cotangent a slice, one planned; 19.1 -> 15.6 s a value-and-gradient). No looped
        products (`tree_plan`'s `looped`). Its buffers are the thread's `_Scratch`'s (`sc`,
        begun for this slice), kept from slice to slice; each gradient is added in as the sweep
        makes it, its buffer then reused."""
        s, n, wrt = self.s, len(self.s.inputs), self.tree_wrt
        picked = [
            self.arrays[a][s.index(s.inputs[a], ranges)] if a < n and a in s.varies else self.vals[a]
            for a in tree.ids
        ]
        shapes = tuple(x.shape for x in picked)
        plan = tree_plan(tree.specs, tree.output, shapes, tree.path, wrt, looped=False)
        # (a cotangent given, the slice's own value is not needed: the last product is left out)
        value, kept = tree_forward(plan, picked, keep=True, pool=sc.pool, value=self.fused)
        if self.fused:
            with self.lock:
                self.total[()] += value
            g = np.ones((), np.result_type(value))
        else:
            g = self.g[s.index(s.output, ranges)]

        def add(k: int, r: Any) -> None:  # (each gradient as the sweep makes it)
            a = tree.ids[k]
            with self.lock:
                if a < n:
                    _add_at(self.grads[a], s.index(s.inputs[a], ranges) if a in s.varies else (), r)
                else:
                    _add_at(self.acc[a], (), r)

        tree_sweep(plan, g, picked, kept, dict.fromkeys(wrt), pool=sc.pool, on_grad=add, consume=True)

    def pull_hoisted(self) -> None:
        """After the slices: the hoisted values' summed cotangents, pulled back once."""
        s, acc, vals, n = self.s, self.acc, self.vals, len(self.s.inputs)
        for t in reversed(s.hoisted):
            st = s.steps[t]
            if st.result not in acc:
                continue
            ct = _total(acc.pop(st.result))
            operands = [vals[a] for a in st.args]
            for j, a in enumerate(st.args):
                if a in self.need:
                    r = _pullback(st.ins, st.out, j, ct, operands, operands[j].shape)
                    if a < n:
                        _add_at(self.grads[a], (), r)
                    else:
                        acc[a] = r


def _sweep(
    s: Schedule,
    g: Any,
    arrays: Sequence[Any],
    grads: dict[int, Any],
    memory_limit: MemoryLimit = None,
    fused: bool = False,
    where: Any = None,
    progress: bool = False,
) -> Any:
    """Add the gradient of ``<g, contraction>`` w.r.t. operand k into ``grads[k]`` (see
    `_Sweep`): on the thread pool, or as tasks on the executor `where` (`cluster.run`),
    whose summed gradients are added in at the end. Returns the value when `fused`."""
    if where is not None:
        wrt = tuple(grads)
        work = cluster.Work(
            functools.partial(_prepare_sweep, s) if s.hoisted else None,
            functools.partial(_sweep_batch, s, wrt, fused),
            _plus_partials,
            functools.partial(_sweep_finish, s, wrt, fused),
        )
        summed, _, value = cluster.run(where, work, (g, *arrays), s.n_slices, progress)
        for k, r in summed.items():
            _add_at(grads[k], (), r)
        return value
    vals = _hoisted(s, arrays, keep_all=True)
    sw = _Sweep(s, g, arrays, vals, grads, fused, _add_lock)
    _over_slices(s, memory_limit, True, sw.slice, progress)
    sw.pull_hoisted()
    return sw.total


def _sliced_impl(
    *arrays: Any,
    inputs: tuple[str, ...],
    output: str,
    optimize: Path,
    memory_limit: MemoryLimit,
    slices: Slices,
    executor: Any = None,
    progress: bool = False,
) -> Any:
    if any(0 in a.shape for a in arrays):
        return _einsum_impl(*arrays, inputs=inputs, output=output)
    # mixed dtypes: all promoted at once, as `_einsum_impl` does (pair by pair, two float32
    # operands of a float64 contraction would be contracted in float32)
    xp = namespace(*arrays)
    arrays = _promoted(xp, tuple(arrays))
    shapes = tuple(a.shape for a in arrays)
    if not slices and xp is np:  # one tree: planned once
        return tree_value(forward_plan(inputs, output, shapes, optimize), arrays)
    if not slices:  # another library's: eager einsum's pairwise steps
        return _einsum_impl(*arrays, inputs=inputs, output=output, optimize=optimize)
    s = schedule(inputs, output, shapes, optimize, slices)
    return _run_sliced(s, arrays, memory_limit, executor, progress)


sliced_einsum_p = Primitive("sliced_einsum", _sliced_impl)


def _grad_blocks(
    flat: Any, arrays: Sequence[Any], wrt: tuple[int, ...], skip: tuple[int, ...], start: int
) -> dict[int, Any]:
    """Views of the gradient blocks of the operands `wrt` in `flat` from `start` (not `skip`'s)."""
    blocks = tree_end_to_end(flat[start:], [arrays[k].shape for k in wrt])
    return {k: block for k, block in zip(wrt, blocks) if k not in skip}


def _block_total(vals: Sequence[Any], wrt: tuple[int, ...]) -> int:
    """The elements of the gradient blocks of the operands `wrt`."""
    return sum(math.prod(shape_of(vals[k])) for k in wrt)


def _einsum_vjp_impl(
    g: Any,
    *arrays: Any,
    inputs: tuple[str, ...],
    output: str,
    optimize: Path,
    memory_limit: MemoryLimit,
    slices: Slices,
    wrt: tuple[int, ...],
    zero: tuple[int, ...],
    executor: Any = None,
    progress: bool = False,
) -> Any:
    """The gradients of ``<g, contraction>`` w.r.t. the operands `wrt`, raveled one after
    the other into one flat array; the blocks of the operands in `zero` stay zero."""
    xp = namespace(g, *arrays)
    arrays = _promoted(xp, tuple(arrays))  # (as the forward: all at once)
    sizes = [math.prod(arrays[k].shape) for k in wrt]
    grads: dict[int, Any] = {}
    if xp is np:
        g = np.asarray(g)
        flat = recycled((sum(sizes),), np.result_type(g, *arrays), zero=True)
        grads = _grad_blocks(flat, arrays, wrt, zero, 0)
    else:  # the gradients summed block by block, then raveled and laid end to end
        g = _adopt((g, *arrays))[0]
        dt = np.result_type(dtype_of(g), *(dtype_of(a) for a in arrays))
        grads = {k: _Blocks(g, tuple(arrays[k].shape), dt) for k in wrt if k not in zero}
    if grads and 0 not in g.shape and all(0 not in a.shape for a in arrays):
        shapes = tuple(a.shape for a in arrays)
        if not slices and xp is np:  # one tree: the forward keeps what the sweep reads
            plan = tree_plan(inputs, output, shapes, optimize, tuple(grads))
            _, kept = tree_forward(plan, arrays, keep=True)
            tree_sweep(plan, g, arrays, kept, grads)
        else:
            s = schedule(inputs, output, shapes, optimize, slices)
            _sweep(s, g, arrays, grads, memory_limit, False, executor, progress)
    if xp is np:
        return flat
    blocks = [
        xp.reshape(_total(grads[k]), (-1,)) if k in grads else zeros(g, (size,), dt)
        for k, size in zip(wrt, sizes)
    ]
    return blocks[0] if len(blocks) == 1 else xp.concat(blocks) if blocks else zeros(g, (0,), dt)


einsum_vjp_p = Primitive("einsum_vjp", _einsum_vjp_impl)


def _sliced_vg_impl(
    *arrays: Any,
    inputs: tuple[str, ...],
    output: str,
    optimize: Path,
    memory_limit: MemoryLimit,
    slices: Slices,
    wrt: tuple[int, ...],
    executor: Any = None,
    progress: bool = False,
) -> Array:
    """A scalar sliced contraction and its gradients for a cotangent of 1, in one pass over
    the slices: ``[value, gradient of operand wrt[0] raveled, ...]`` in one flat array."""
    xp = namespace(*arrays)
    if xp is not np and executor is None and all(0 not in a.shape for a in arrays):
        # another library: one tree, its forward keeping what its sweep reads (`network`); sliced
        # (or dask's blocks), each slice's forward then its pullbacks, the slices' values summed
        # (a sweep after the whole forward would compute the intermediates again)
        arrays = _promoted(xp, tuple(arrays))
        dt = np.result_type(*(dtype_of(a) for a in arrays))
        shapes = tuple(tuple(a.shape) for a in arrays)
        one = ones(arrays[0], (), dt)
        if not slices and not any(blocked(a) for a in arrays):
            plan = tree_plan(inputs, output, shapes, optimize, wrt)
            value, kept = tree_lib_forward(plan, xp, arrays)
            grads = tree_lib_sweep(plan, xp, one, arrays, kept, _spread_impl)
        else:
            blocks = {k: _Blocks(arrays[0], shapes[k], dt) for k in wrt}
            s = schedule(inputs, output, shapes, optimize, slices)
            value = _sweep(s, one, arrays, blocks, memory_limit, True, None, progress)
            grads = {k: _total(b) for k, b in blocks.items()}
        packed: Array = xp.concat([xp.reshape(value, (1,)), *(xp.reshape(grads[k], (-1,)) for k in wrt)])
        return packed
    if xp is not np:  # (on an executor: the forward, then the sweep, laid end to end)
        where = {"executor": executor, "progress": progress}
        value = _sliced_impl(
            *arrays,
            inputs=inputs,
            output=output,
            optimize=optimize,
            memory_limit=memory_limit,
            slices=slices,
            **where,
        )
        g = xp.ones_like(value)
        grads = _einsum_vjp_impl(
            g,
            *arrays,
            inputs=inputs,
            output=output,
            optimize=optimize,
            memory_limit=memory_limit,
            slices=slices,
            wrt=wrt,
            zero=(),
            **where,
        )
        joined: Array = xp.concat([xp.reshape(value, (1,)), xp.astype(grads, value.dtype)])
        return joined
    total = _block_total(arrays, wrt)
    dt = np.result_type(*arrays)
    arrays = _promoted(np, tuple(arrays))  # (as the forward: all at once)
    shapes = tuple(a.shape for a in arrays)
    if not slices and all(a.size for a in arrays):  # one tree: value and gradients in one call
        plan = tree_plan(inputs, output, shapes, optimize, wrt)
        flat: Array = recycled((1 + total,), dt)  # (dies within a staged program: recycled)
        value = tree_value_and_grad_into(plan, arrays, flat, 1)  # (its program: written whole)
        if value is None:
            flat.fill(0)
            value = tree_value_and_grad(plan, arrays, _grad_blocks(flat, arrays, wrt, (), 1))
        flat[0] = value
        return flat
    flat = recycled((1 + total,), dt, zero=True)
    if all(a.size for a in arrays):  # sliced: the slices' value and gradients summed into `flat`
        grads = _grad_blocks(flat, arrays, wrt, (), 1)
        s = schedule(inputs, output, shapes, optimize, slices)
        flat[0] = _sweep(s, np.ones((), dt), arrays, grads, memory_limit, True, executor, progress)
    return flat


sliced_vg_p = Primitive("einsum_vg", _sliced_vg_impl)
"""A scalar sliced einsum with its unit-cotangent gradients (what a reverse trace computes for
a scalar `sliced_einsum_p`, so that value and gradient take one pass over the slices)."""


def _unpack_impl(flat: Any, offset: int, shape: Shape) -> Any:
    size = math.prod(shape)
    xp = xp_of(flat)
    if xp is not np:
        return xp.reshape(flat[offset : offset + size], shape)
    return flat[offset : offset + size].reshape(shape)


def _lower_unpack(params: Params, shapes: Sequence[Shape]) -> Callable[..., Any]:
    """`unpack_p` for `einad.jit`'s numpy programs: the block's slice made once (a value and
    gradient unpacks a block per operand: 1.5 -> 0.4 µs each, 132 of them per call of benchmark
    m1's); anything but a numpy array goes to `_unpack_impl`."""
    offset, shape = params["offset"], tuple(params["shape"])
    block = slice(offset, offset + math.prod(shape))

    def unpack(flat: Any) -> Any:
        return flat[block].reshape(shape) if type(flat) is np.ndarray else _unpack_impl(flat, offset, shape)

    return unpack


def _place_impl(x: Any, offset: int, total: int) -> Any:
    xp = xp_of(x)
    if xp is not np:  # zeros, x, zeros laid end to end: no writes
        x = xp.reshape(x, (-1,))
        dt = dtype_of(x)
        rest = total - offset - x.shape[0]
        return xp.concat([zeros(x, (offset,), dt), x, zeros(x, (rest,), dt)])
    x = np.asarray(x)
    out = np.zeros(total, dtype=x.dtype)
    out[offset : offset + x.size] = x.reshape(-1)
    return out


unpack_p = Primitive("unpack", _unpack_impl)
"""A block of a flat array, reshaped (a view): how a gradient comes out of `einsum_vjp_p`."""
place_p = Primitive("place", _place_impl)
"""A flat array of zeros holding `x`, raveled, at `offset`: the transpose of `unpack_p`."""

declare(
    unpack_p,
    vjp=lambda g, ans, vals, p, needed: [
        bind(place_p, [g], {"offset": p["offset"], "total": shape_of(vals[0])[0]})
    ],
    jvp=lambda ts, ans, vals, p: bind(unpack_p, [ts[0]], p),
    keep=lambda needed: ((False,), False),
    batch=LOOP,  # under vmap, per example (a flat block's offset is per example too)
    lower=_lower_unpack,
    aliasing="view",
    linear=True,
)
declare(
    place_p,
    vjp=lambda g, ans, vals, p, needed: [
        bind(unpack_p, [g], {"offset": p["offset"], "shape": shape_of(vals[0])})
    ],
    jvp=lambda ts, ans, vals, p: bind(place_p, [ts[0]], p),
    keep=lambda needed: ((False,), False),
    batch=LOOP,
    aliasing="fresh",
    linear=True,
)


def _forward_params(params: Params) -> Params:
    """A sliced equation's parameters as its forward's (its executor and progress kept)."""
    keys = ("inputs", "output", "optimize", "memory_limit", "slices", "executor", "progress")
    return {k: params[k] for k in keys if k in params}


def _unpack(
    flat: Any, vals: Sequence[Any], wrt: tuple[int, ...], offset: int = 0, cast: bool = True
) -> list[Any]:
    """Views of each operand's block of `flat` (the layout of `einsum_vjp_p`), cast to its
    dtype unless not `cast`."""
    out: list[Any] = [None] * len(vals)
    for k in wrt:
        shape = shape_of(vals[k])
        r = bind(unpack_p, [flat], {"offset": offset, "shape": shape})
        dt = dtype_of(vals[k])
        out[k] = astype(r, dt) if cast and dtype_of(r) != dt else r
        offset += math.prod(shape)
    return out


def _add(a: Any, b: Any) -> Any:
    return b if a is None else a + b


class _Unit:
    """What a reverse trace keeps of a scalar sliced einsum: its `sliced_vg_p` result `flat`
    (value and gradients for a cotangent of 1, of the operands `wrt`) and the operands."""

    __slots__ = ("flat", "vals", "wrt")

    def __init__(self, flat: Any, vals: list[Any], wrt: tuple[int, ...]) -> None:
        self.flat: Any = flat
        self.vals, self.wrt = vals, wrt


def _sliced_residual(vals: Sequence[Any], params: Params, needed: list[bool]) -> tuple[Any, Any]:
    """A reverse trace's forward of a sliced einsum. A scalar one computes its gradients
    along with its value, in one pass over the slices (`sliced_vg_p`): the VJP then only
    scales them by the cotangent, where a sweep would recompute every slice. Otherwise the
    forward alone, keeping the operands for the sweep."""
    wrt = tuple(k for k, n in enumerate(needed) if n)
    xp = _untraced(vals) if params["output"] and wrt and not params["slices"] else None
    if xp is not None:  # a tree on arrays (eager): the forward keeps what its sweep reads, for the VJP
        shapes = tuple(tuple(v.shape) for v in vals)
        plan = tree_plan(params["inputs"], params["output"], shapes, params["optimize"], wrt)
        if xp is np:
            value, kept = tree_forward(plan, vals, keep=True)
        else:
            value, kept = tree_lib_forward(plan, xp, vals)
        return value, _Kept(plan, kept, list(vals), xp)
    if params["output"] or not wrt or not vg_fusion:
        return bind(sliced_einsum_p, vals, params), list(vals)
    flat = bind(sliced_vg_p, vals, {**params, "wrt": wrt})
    out = bind(unpack_p, [flat], {"offset": 0, "shape": ()})
    return out, _Unit(flat, list(vals), wrt)


def _untraced(vals: Sequence[Any]) -> ModuleType | None:
    """The library of the values where they are arrays of one library, none of them empty or
    blocked (dask's), none traced or staged: a planned tree runs on them (`network`); else None."""
    if all(type(v) is np.ndarray and v.size for v in vals):
        return np
    if any(type(v) in (Tensor, Staged) or not is_array(v) or isinstance(v, np.generic) for v in vals):
        return None
    try:
        xp = namespace(*vals)
    except TypeError:  # arrays of several libraries
        return None
    if xp is np or any(0 in v.shape or blocked(v) for v in vals):
        return None
    return xp


class _Kept:
    """What a reverse trace keeps of a tree on arrays (`_sliced_residual`): its plan, the
    forward's intermediates its sweep reads, the operands, and their library."""

    __slots__ = ("kept", "plan", "vals", "xp")

    def __init__(self, plan: Any, kept: dict[int, Any], vals: list[Any], xp: ModuleType) -> None:
        self.plan, self.kept, self.vals, self.xp = plan, kept, vals, xp

    def takes(self, g: Any) -> bool:
        """Whether the sweep takes the cotangent `g` as it is: an array of the operands' library."""
        if self.xp is np:
            return isinstance(g, (np.ndarray, np.generic))
        return type(g) not in (Tensor, Staged) and is_array(g) and namespace(g) is self.xp

    def sweep(self, g: Any) -> list[Any]:
        """Each differentiated operand's cotangent for the cotangent `g` (an array), in its dtype."""
        if self.xp is np:
            grads: dict[int, Any] = dict.fromkeys(self.plan.wrt)
            tree_sweep(self.plan, np.asarray(g), self.vals, self.kept, grads)
        else:
            grads = tree_lib_sweep(self.plan, self.xp, g, self.vals, self.kept, _spread_impl)
        out: list[Any] = [None] * len(self.vals)
        for k, r in grads.items():
            dk = dtype_of(self.vals[k])
            out[k] = r if dtype_of(r) == dk else astype(r, dk)  # a real operand's: the real part
        return out


vg_fusion = True
"""Whether a reverse trace computes a scalar sliced einsum's gradients with its value (one
pass over the slices); False: the forward, then a sweep that recomputes each slice."""


def _scaled_blocks(unit: _Unit, g: Any, needed: list[bool]) -> list[Any] | None:
    """The unit gradients times a concrete `g`, in place in the buffer, which is handed out
    (so the gradients cost no second buffer); None when `g` is traced, or the buffer
    cannot hold the product, or it was handed out already."""
    flat = unit.flat
    if flat is None or not isinstance(flat, np.ndarray) or not isinstance(g, (np.ndarray, np.generic)):
        return None
    g = np.asarray(g)
    if g.shape != () or not np.can_cast(g.dtype, flat.dtype, "same_kind"):
        return None
    unit.flat = None  # a second VJP call sweeps
    if g != 1:
        np.multiply(flat[1:], g, out=flat[1:])
    out: list[Any] = [None] * len(needed)
    for k, block in _grad_blocks(flat, unit.vals, unit.wrt, (), 1).items():
        if needed[k]:
            dt = dtype_of(unit.vals[k])
            out[k] = block if block.dtype == dt else astype(block, dt)  # a real one: the real part
    return out


def _sliced_vjp(g: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    if isinstance(ans, _Kept):  # a tree's forward kept its intermediates: one sweep through them
        if ans.takes(g):
            return ans.sweep(g)
        ans = ans.vals  # a traced cotangent: the sweep as an equation, differentiable again
    if isinstance(ans, _Unit) and ans.flat is not None:  # gradients for a cotangent of 1: times g
        done = _scaled_blocks(ans, g, needed)
        if done is not None:
            return done
        # scaled in the packed dtype, then cast: a real operand's gradient among complex
        # ones is the real part of the product, not g times the real part. The gradients'
        # blocks are scaled as one (one product, not one per operand), then viewed
        total = sum(math.prod(shape_of(ans.vals[k])) for k in ans.wrt)
        block = bind(unpack_p, [ans.flat], {"offset": 1, "shape": (total,)})
        scaled = contract(("", "a"), "a", [g, block])
        grads = _unpack(scaled, ans.vals, ans.wrt, cast=False)
        out: list[Any] = [None] * len(needed)
        for k in ans.wrt:
            if needed[k]:
                out[k] = grads[k]
                dt = dtype_of(ans.vals[k])
                if dtype_of(out[k]) != dt:
                    out[k] = astype(out[k], dt)
        return out
    if isinstance(ans, _Unit):
        vals = ans.vals
    if isinstance(ans, list):  # a residual: the operands themselves
        vals = ans
    if not params["slices"] and "batch" in _trace_kinds([g, *vals]):
        # a batch of cotangents (vmap of the pullback: jacrev): each operand's, batched
        return [r.dense() if isinstance(r, Structured) else r for r in _operand_vjps(g, vals, params, needed)]
    wrt = tuple(k for k, n in enumerate(needed) if n)
    flat = bind(einsum_vjp_p, [g, *vals], {**params, "wrt": wrt, "zero": ()})
    return _unpack(flat, vals, wrt)


def _sliced_jvp(tangents: list[Any], ans: Any, vals: Sequence[Any], params: Params) -> Any:
    out: Any = None
    for k, t in enumerate(tangents):
        if t is not None:
            operands = list(vals)
            operands[k] = t
            out = _add(out, bind(sliced_einsum_p, operands, params))
    return out


def _reads_all(needed: list[bool]) -> tuple[tuple[bool, ...], bool]:
    """A sweep recomputes the contraction: it reads every operand (never the result)."""
    return (any(needed),) * len(needed), False


declare(
    sliced_einsum_p,
    vjp=_sliced_vjp,
    jvp=_sliced_jvp,
    keep=_reads_all,
    residual=_sliced_residual,
    batch=_batch_einsum,  # re-planned (and re-sliced) with the batch letter
    aliasing=_einsum_aliasing,
    linear=True,
)


def _vg_parts(params: Params, vals: Sequence[Any]) -> tuple[Params, Params, Any]:
    """`sliced_vg_p`'s parameters as the forward's and as its sweep's, and the cotangent 1."""
    forward = _forward_params(params)
    dt = np.result_type(*(dtype_of(v) for v in vals))
    like = strip(vals[0])
    like = like.concrete if type(like) is Staged else like  # the library of the operands, even staged
    return forward, {**forward, "wrt": params["wrt"], "zero": ()}, ones(like, (), dt)


def _sliced_vg_jvp(tangents: list[Any], ans: Any, vals: Sequence[Any], params: Params) -> Any:
    # [value; gradients for g = 1]: the value's tangent, then the sweep's with g fixed at 1
    forward, sweep, one = _vg_parts(params, vals)
    total = 1 + _block_total(vals, params["wrt"])
    out: Any = None
    tv = _sliced_jvp(tangents, None, vals, forward)
    if tv is not None:
        out = bind(place_p, [tv], {"offset": 0, "total": total})
    tg = _einsum_vjp_jvp([None, *tangents], None, [one, *vals], sweep)
    if tg is not None:
        out = _add(out, bind(place_p, [tg], {"offset": 1, "total": total}))
    return out


def _sliced_vg_vjp(c: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    forward, sweep, one = _vg_parts(params, vals)
    total = 1 + _block_total(vals, params["wrt"])
    c0 = bind(unpack_p, [c], {"offset": 0, "shape": ()})
    out = _sliced_vjp(c0, None, vals, forward, needed)
    cg = bind(unpack_p, [c], {"offset": 1, "shape": (total - 1,)})
    more = _einsum_vjp_vjp(cg, None, [one, *vals], sweep, [False, *needed])[1:]
    return [b if a is None else a if b is None else a + b for a, b in zip(out, more)]


declare(sliced_vg_p, vjp=_sliced_vg_vjp, jvp=_sliced_vg_jvp, keep=_reads_all, batch=LOOP, aliasing="fresh")


def _einsum_vjp_jvp(tangents: list[Any], ans: Any, vals: Sequence[Any], params: Params) -> Any:
    # Multilinear: the gradient block of operand k reads the cotangent and every
    # operand but k, so a tangent in operand j's place leaves block j at zero.
    g, operands = vals[0], list(vals[1:])
    out: Any = None
    if tangents[0] is not None:
        out = bind(einsum_vjp_p, [tangents[0], *operands], params)
    for j, t in enumerate(tangents[1:]):
        if t is None:
            continue
        zero = tuple(sorted(set(params["zero"]) | ({j} & set(params["wrt"]))))
        if set(params["wrt"]) <= set(zero):
            continue
        sub = list(operands)
        sub[j] = t
        out = _add(out, bind(einsum_vjp_p, [g, *sub], {**params, "zero": zero}))
    return out


def _einsum_vjp_vjp(c: Any, ans: Any, vals: Sequence[Any], params: Params, needed: list[bool]) -> list[Any]:
    # <c, flat> = sum over blocks k of <g, contraction with c_k in operand k's place>:
    # its gradient in g is that contraction, in operand j (j != k) the block j of a
    # sweep over the same operands.
    g, operands = vals[0], list(vals[1:])
    forward = _forward_params(params)
    want = tuple(j for j, n in enumerate(needed[1:]) if n)
    dg: Any = None
    flat: Any = None
    offset = 0
    for k in params["wrt"]:
        shape = shape_of(operands[k])
        size = math.prod(shape)
        if k in params["zero"]:
            offset += size
            continue
        sub = list(operands)
        sub[k] = bind(unpack_p, [c], {"offset": offset, "shape": shape})
        offset += size
        if needed[0]:
            dg = _add(dg, bind(sliced_einsum_p, sub, forward))
        if set(want) - {k}:
            zero = (k,) if k in want else ()
            flat = _add(flat, bind(einsum_vjp_p, [g, *sub], {**forward, "wrt": want, "zero": zero}))
    out: list[Any] = [None] * len(vals)
    if dg is not None:
        dt = dtype_of(g)
        out[0] = astype(dg, dt) if dtype_of(dg) != dt else dg
    if flat is not None:
        out[1:] = _unpack(flat, operands, want)
    return out


declare(
    einsum_vjp_p,
    vjp=_einsum_vjp_vjp,
    jvp=_einsum_vjp_jvp,
    keep=_reads_all,
    batch=LOOP,
    aliasing="fresh",  # every gradient packed into one new flat array
    linear=True,
)


# -- sums as einsums (used by the rules above the einsum) ----------------------------------


# -- the linear helpers: each ONE einsum ----------------------------------------------
#
# Each helper checks its arguments the way numpy does (axes in range, contracted
# sizes equal) before building its subscripts, so that no message names a letter
# the user never wrote, and einsum's size-1 broadcasting of a label cannot stand
# in for numpy's refusal of a mismatched contraction.


@functools.lru_cache(maxsize=1024)
def _letters(n: int, skip: str = "") -> str:
    """`n` index letters not in `skip` (the same for the same arguments: kept, not made per call)."""
    return "".join(fresh_symbols(set(skip), n))


@functools.cache
def accumulator(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype numpy sums `dtype` in: booleans and small integers widen to the platform's integer."""
    summed: np.dtype[Any] = np.sum(np.zeros(0, dtype)).dtype
    return summed


def _accumulate(x: Value) -> Value:
    """`x` cast to the dtype numpy sums it in (unchanged for floats and wide integers)."""
    dt = dtype_of(x)
    to = accumulator(dt)
    return x if to == dt else astype(x, to)


def sum_raw(x: Value, axis: Axis = None, keepdims: bool = False) -> Value:
    """`sum` for internal use: returns a raw array when `x` is not traced."""
    shape = shape_of(x)
    return sum_axes(x, shape, normalize_axes(axis, len(shape)), keepdims)


def sum_axes(x: Value, shape: Shape, axes: tuple[int, ...], keepdims: bool = False) -> Value:
    """`sum_raw` over `axes` (normalized) of `x`, whose shape is `shape`."""
    s = _letters(len(shape))
    out = contract((s,), "".join(c for i, c in enumerate(s) if i not in axes), [_accumulate(x)])
    if keepdims:
        out = reshape_raw(out, tuple(1 if i in axes else d for i, d in enumerate(shape)))
    return out


def sum_to_shape(g: Value, shape: Sequence[int], dtype: DTypeLike | None = None) -> Value:
    """Sum a broadcast cotangent back to `shape` (an einsum, then a reshape)."""
    gs = shape_of(g)
    if gs != tuple(shape):
        lead = len(gs) - len(shape)
        s = _letters(len(gs))
        keep = [i for i in range(lead, len(gs)) if shape[i - lead] == gs[i]]
        g = contract((s,), "".join(s[i] for i in keep), [g])
        if len(keep) != len(shape):
            g = reshape_raw(g, tuple(shape))
    if dtype is not None and dtype_of(g) != dtype:
        g = astype(g, dtype)
    return g
