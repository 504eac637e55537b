"""Fusion: which equations of a program run together as one compiled loop (einad.jit's ``llvm``
backend; the kernels themselves are written and compiled by `einad.kernels`).

`schedule` walks the optimized program in order and gathers its elementwise equations into
groups, each one loop over one shape (the *loop shape*):

* an elementwise operation (the table of `rules.elementwise`, ``where``, ``astype``), a
  broadcast (a ``spread`` that only repeats) or an einsum that sums nothing (a product with
  broadcasting) whose result has the loop shape is a *loop* step: computed per element, its
  operands read through their strides (a smaller operand broadcast, as numpy broadcasts it);
* a one-operand einsum that sums a loop value is a *sum* step: accumulated as the loop runs
  (a total, or along the letters it keeps);
* a 0-d elementwise operation is a *pre* step (once, before the loop) or, when it reads a
  total, a *post* step (once, after the loop).

An equation joins the open groups whose values it reads (merging them), or the latest open
group of its loop shape (independent work of one shape, done in the same pass). A group is
*closed* once an equation outside it reads one of its values: it runs where its last member
stood, so it may only gain members while none of its values has been read elsewhere. Every
group then runs where its last member stands: each of its inputs is computed before, and
each of its values read after. Only values read outside the group (or returned) are written
to memory. A group runs as a kernel when that saves numpy passes (`_passes`): a single
ufunc is left to numpy, which has its own fast loop for it; and so is a group that reads and
writes more than `kernels.ARGS_COMPILED` arrays (compiling it costs more than it saves).

Equations of dtypes or operations the kernels lack (complex numbers, integer arithmetic, an
operation with no kernel step) stay numpy calls, and so do the functions numpy computes
faster with its own vectorized loops on long arrays (`kernels.numpy_faster`: tanh or exp on
more than 256 elements); `Schedule.unfused` says why for each elementwise one.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import kernels
from ..aliases import Shape
from ..core import Primitive, QuietRules, declare
from ..program import Equation, Graph, Lit
from ..rules.einsum import einsum_p, spread_p
from ..rules.shape import astype_p
from ..rules.structural import where_p
from ..subscripts import unique


def _unfusable(*args: Any, **params: Any) -> Any:
    raise TypeError("a fused kernel's placeholder equation is not run as a primitive")


fused_p = declare(Primitive("fused", _unfusable), program_only=True, aliasing="fresh")
"""The placeholder of a kernel's outputs in a `Schedule`'s program (never bound): each output a
new array the kernel's caller allocates."""

_HORIZONTAL = 16
"""How many of the latest groups an equation that reads none may join (independent work of
one shape done in the same loop)."""
_HEAVY = {"sigmoid": 5, "softplus": 6, "logaddexp": 4}
"""numpy passes over the data for the composite kernels (rules.elementwise._sigmoid, ...)."""


@dataclass(eq=False)
class FusedKernel:
    """One fused loop of a program: its equations, inputs and outputs, and the compiled kernel."""

    equations: list[Equation]
    inputs: list[str]
    """The variables it reads (program inputs, constants, other equations' results)."""
    outputs: list[str]
    """The variables it writes (those read after it, or returned)."""
    shape: Shape
    spec: kernels.KernelSpec
    args: list[str]
    """The variable each kernel argument reads, in the kernel's order (one may be read twice,
    along different axes)."""
    compiled: kernels.Kernel | None = None

    def arguments(self, values: Sequence[Any]) -> list[Any]:
        """The kernel's arguments for these values of `inputs` (0-d ones as numbers)."""
        env = dict(zip(self.inputs, values))
        out = []
        for a, v in zip(self.spec.args, self.args):
            x = env[v]
            out.append(x if a.axes is not None else float(x) if a.dtype.kind == "f" else int(x))
        return out

    def finish(self, events: int, values: Sequence[Any], outs: Sequence[Any]) -> Sequence[Any]:
        """The outputs, after a call of the kernel on `values` that returned `events` (not 0).

        Misaligned arrays: the kernel runs again on aligned copies. A NaN or an infinity made
        by one of the user's steps: numpy computes the equations again, so that it warns (or
        raises) exactly as it does without kernels, and its results are returned.
        """
        assert self.compiled is not None
        if events & kernels.MISALIGNED:
            values = [np.array(v) if isinstance(v, np.ndarray) else v for v in values]
            for o, out in zip(self.spec.outs, outs):
                if o.zeroed:
                    out[...] = 0
            events = self.compiled.fn(*self.arguments(values), *outs)
        if events & kernels.NONFINITE:
            return self.run_numpy(values)
        return outs

    def run_numpy(self, values: Sequence[Any]) -> list[Any]:
        """The outputs computed by numpy, one equation at a time (derivative rules' steps quiet)."""
        env = dict(zip(self.inputs, values))
        for e in self.equations:
            args = [a.value if isinstance(a, Lit) else env[a] for a in e.inputs]
            with QuietRules() if e.quiet else nullcontext():
                env[e.output] = e.prim.impl(*args, **e.params)
        return [env[v] for v in self.outputs]

    def __repr__(self) -> str:
        return f"<FusedKernel over {self.shape}: {len(self.equations)} equations>"

    def __str__(self) -> str:
        shape = ",".join(map(str, self.shape))
        head = f"fused[{shape}] ({', '.join(self.inputs)}) -> ({', '.join(self.outputs)})"
        return "\n".join([head, *(f"    {e}" for e in self.equations)])


@dataclass(eq=False)
class Schedule:
    """A program with its fused groups in place (`fused_p` equations, one per output, at the
    group's place: each reads all the group's inputs), and the kernels in order."""

    graph: Graph
    kernels: list[FusedKernel]
    unfused: dict[str, str] = field(default_factory=dict)
    """Elementwise variables computed by numpy instead, with the reason."""


# -- which equations a kernel may compute --------------------------------------------------------


@dataclass
class _Role:
    kind: str  # "loop", "sum" or "scalar" (0-d)
    op: str  # the kernel step
    compute: np.dtype[Any]
    keep: tuple[int, ...] = ()
    maps: dict[int, tuple[int | None, ...]] = field(default_factory=dict)
    """For operands read with other axes than the result's (a broadcast spread, an einsum):
    operand position -> the loop axis each of its axes follows."""
    weight: int = 1


def _dtype(graph: Graph, a: Any) -> Any:
    """A variable's dtype, or a literal's value for numpy's promotion (numbers weak)."""
    if isinstance(a, Lit):
        v = a.value
        return v if isinstance(v, (bool, int, float)) else np.asarray(v).dtype
    return graph.avals[a][1]


def _role(e: Equation, graph: Graph) -> tuple[_Role | None, str]:
    """What `e` is in a kernel, or None and why it is not in one."""
    for a in e.inputs:
        if isinstance(a, Lit):
            if np.ndim(a.value) != 0 or np.iscomplexobj(a.value):
                return None, "a literal kernels do not take"
        elif not kernels.loadable(graph.avals[a][1]):
            return None, f"{graph.avals[a][1]} operands are computed by numpy"
    if not kernels.writable(e.dtype):
        return None, f"{e.dtype} results are computed by numpy"
    if e.prim is einsum_p:
        return _einsum_role(e, graph)
    if e.prim is spread_p:
        src, dst = e.params["src"], e.params["dst"]
        if unique(dst) != dst or not set(src) <= set(dst) or unique(src) != src:
            return None, "a spread onto a diagonal"
        shape = graph.avals[e.inputs[0]][0] if isinstance(e.inputs[0], str) else ()
        axes = tuple(None if shape[k] == 1 else dst.index(c) for k, c in enumerate(src))
        return _Role("loop", "astype", e.dtype, maps={0: axes}, weight=0), ""
    if e.prim is astype_p:
        src = _dtype(graph, e.inputs[0])  # (a literal's too: a float16 one a gradient's seed made)
        if (
            not isinstance(src, np.dtype)
            or not kernels.loadable(src)
            or (e.dtype.kind != "f" and e.dtype != np.bool_)
        ):
            return None, "a cast kernels do not make"
        return _kind(e, _Role("", "astype", src, weight=int(src != e.dtype)))
    if e.prim is where_p:
        if e.dtype.kind != "f":
            return None, f"{e.dtype} results are computed by numpy"
        return _kind(e, _Role("", "where", e.dtype))
    if not e.prim.elementwise:
        return None, ""
    name = e.prim.name
    if name not in kernels.OPS:
        return None, f"kernels have no step for {name}"
    if set(e.params) - {"decimals"} or e.params.get("decimals", 0) != 0:
        return None, f"{name} with parameters {e.params}"
    if name in kernels.PREDICATES:
        compute = np.result_type(*(_dtype(graph, a) for a in e.inputs))
    else:
        compute = e.dtype
    if compute not in kernels.FLOATS:
        return None, f"{name} computed in {compute}"
    missing = kernels.missing_symbols(name, compute)
    if missing:
        return None, f"this process has no {missing}"
    size = math.prod(e.shape)
    if kernels.numpy_faster(name, compute, size):
        return None, f"numpy's vectorized {name} is faster on {size} elements"
    return _kind(e, _Role("", name, compute, weight=_HEAVY.get(name, 1)))


def _kind(e: Equation, role: _Role) -> tuple[_Role, str]:
    role.kind = "scalar" if e.shape == () else "loop"
    return role, ""


def _einsum_role(e: Equation, graph: Graph) -> tuple[_Role | None, str]:
    """A one-operand einsum that sums (a sum step), or an einsum that sums nothing (a product)."""
    specs: Sequence[str] = e.params["inputs"]
    out: str = e.params["output"]
    if e.dtype.kind != "f" or any(unique(s) != s for s in specs) or unique(out) != out:
        return None, ""
    letters = set("".join(specs))
    if len(specs) == 1 and set(out) < letters:
        spec = specs[0]
        return _Role("sum", "sum", e.dtype, keep=tuple(spec.index(c) for c in out)), ""
    if not letters <= set(out) or e.shape == ():
        return None, ""
    maps = {}
    for k, (a, spec) in enumerate(zip(e.inputs, specs)):
        shape = graph.avals[a][0] if isinstance(a, str) else ()
        maps[k] = tuple(None if shape[j] == 1 else out.index(c) for j, c in enumerate(spec))
    weight = max(len(specs) - 1, 0) if all(unique(s) == s for s in specs) else 1
    return _Role("loop", "multiply" if len(specs) > 1 else "astype", e.dtype, maps=maps, weight=weight), ""


# -- grouping ---------------------------------------------------------------------------------------


@dataclass(eq=False)
class _Group:
    shape: Shape
    members: list[int] = field(default_factory=list)
    phase: dict[str, str] = field(default_factory=dict)  # member variable -> pre, loop, sum, post
    open: bool = True


def _passes(group: _Group, roles: dict[int, _Role]) -> int:
    return sum(roles[i].weight for i in group.members)


def schedule(graph: Graph) -> Schedule:
    """Group `graph`'s elementwise equations into kernels (see the module docstring) and compile
    them; the result's graph has each kernel's outputs as `fused_p` equations at its place."""
    eqs = graph.equations
    owner: dict[str, _Group] = {}  # variable -> the group computing it
    roles: dict[int, _Role] = {}
    unfused: dict[str, str] = {}
    groups: list[_Group] = []

    def close_readers(i: int, keep: _Group | None) -> None:
        for a in eqs[i].inputs:
            g = owner.get(a) if isinstance(a, str) else None
            if g is not None and g is not keep:
                g.open = False

    for i, e in enumerate(eqs):
        role, why = _role(e, graph)
        if role is None:
            if why and (e.prim.elementwise or e.prim is astype_p):
                unfused[e.output] = why
            close_readers(i, None)
            continue
        roles[i] = role
        target = _join(i, e, role, owner, groups)
        if target is None:
            target = _Group(e.shape if role.kind != "sum" else _operand_shape(e, graph))
            groups.append(target)
        target.members.append(i)
        owner[e.output] = target
        target.phase[e.output] = _phase(e, role, target)
        close_readers(i, target)

    readers: dict[str, list[int]] = {}
    for i, e in enumerate(eqs):
        for a in e.inputs:
            if isinstance(a, str):
                readers.setdefault(a, []).append(i)
    kernels_: list[FusedKernel] = []
    for g in groups:
        if g.members and _passes(g, roles) >= 2:
            k = _kernel(g, graph, roles, readers)
            arrays = len(k.spec.args) + len(k.spec.outs)
            if arrays > kernels.ARGS_COMPILED:
                limit = kernels.ARGS_COMPILED
                why = f"its loop reads and writes {arrays} arrays (kernels.ARGS_COMPILED: {limit})"
                unfused.update((eqs[i].output, why) for i in g.members)
                continue
            kernels_.append(k)
    if kernels_:
        compiled = kernels.compile_kernels([k.spec for k in kernels_])
        for k, c in zip(kernels_, compiled.kernels):
            k.compiled = c
    return Schedule(_placed(graph, kernels_), kernels_, unfused)


def _operand_shape(e: Equation, graph: Graph) -> Shape:
    a = e.inputs[0]
    return graph.avals[a][0] if isinstance(a, str) else ()


def _phase(e: Equation, role: _Role, g: _Group) -> str:
    if role.kind == "sum":
        return "sum"
    if role.kind == "loop":
        return "loop"
    reads_sum = any(isinstance(a, str) and g.phase.get(a) in ("sum", "post") for a in e.inputs)
    return "post" if reads_sum else "pre"


def _join(i: int, e: Equation, role: _Role, owner: dict[str, _Group], groups: list[_Group]) -> _Group | None:
    """The open group equation i joins (merging the open groups it reads), or None for a new one."""
    sources = [owner[a] for a in e.inputs if isinstance(a, str) and a in owner]
    if role.kind == "sum":
        a = e.inputs[0]
        g = owner.get(a) if isinstance(a, str) else None
        if g is not None and g.open and g.phase[str(a)] == "loop":
            return g
        return None
    if role.kind == "scalar":
        # a 0-d step joins an open group it reads: after the loop if it reads a sum
        usable = list({id(g): g for g in sources if g.open}.values())
        if not usable:
            return None
        target = next((g for g in usable if not _loopless(g)), usable[0])
        for g in usable:
            if g is not target and (g.shape == target.shape or _loopless(g)):
                _merge(target, g, owner, groups)
        return target
    # a loop step: the open groups of its shape whose loop or pre values it reads, and the
    # open 0-d groups it reads (their steps become pre steps)
    picked: list[_Group] = []
    identity = tuple(range(len(e.shape)))
    # groups it cannot join: one whose loop value it reads along other axes than its own (only
    # an argument can be), or whose sum it reads (known only once the loop is done)
    blocked = [
        owner[a]
        for k, a in enumerate(e.inputs)
        if isinstance(a, str)
        and a in owner
        and (
            owner[a].phase[a] == "loop"
            and role.maps.get(k, identity) != identity
            or owner[a].phase[a] in ("sum", "post")
        )
    ]
    for a in e.inputs:
        g = owner.get(a) if isinstance(a, str) else None
        if g is None or not g.open or g in picked or g in blocked:
            continue
        same_loop = g.shape == e.shape and g.phase[str(a)] in ("loop", "pre")
        if same_loop or _loopless(g):  # (a 0-d group: its steps become pre steps)
            picked.append(g)
    same = [g for g in picked if g.shape == e.shape]
    if not same:
        recent = groups[-_HORIZONTAL:]  # (a bound on the search: programs may have many groups)
        latest = next(
            (g for g in reversed(recent) if g.open and g.shape == e.shape and g.members and g not in blocked),
            None,
        )
        if latest is not None:
            same = [latest]
    if not same and not picked:
        return None
    target = same[0] if same else picked[0]
    target.shape = e.shape  # (a 0-d group's steps become the loop's pre steps)
    for g in picked + [g for g in same if g not in picked]:
        if g is not target:
            _merge(target, g, owner, groups)
    return target


def _loopless(g: _Group) -> bool:
    """A group of 0-d steps only (no loop, no sum): its steps may become another loop's pre steps."""
    return all(ph == "pre" for ph in g.phase.values())


def _merge(into: _Group, g: _Group, owner: dict[str, _Group], groups: list[_Group]) -> None:
    """Move `g`'s members into `into`."""
    for v, ph in g.phase.items():
        into.phase[v] = ph
        owner[v] = into
    into.members = sorted(into.members + g.members)
    g.members = []
    g.open = False
    groups.remove(g)


# -- a group as a kernel ---------------------------------------------------------------------------


def _kernel(g: _Group, graph: Graph, roles: dict[int, _Role], readers: dict[str, list[int]]) -> FusedKernel:
    """The kernel spec of group `g`: its arguments, steps in order, and outputs (`readers`:
    the equations reading each variable)."""
    members = {graph.equations[i].output for i in g.members}
    inside = set(g.members)
    read_after = {v for v in members if any(j not in inside for j in readers.get(v, ()))}
    returned = {o for o in graph.outputs if isinstance(o, str)}
    args: dict[tuple[str, tuple[int | None, ...] | None], kernels.Arg] = {}
    inputs: list[str] = []
    steps: list[kernels.Step] = []
    rank = len(g.shape)

    def arg(a: str, axes: tuple[int | None, ...] | None) -> str:
        shape, dtype = graph.avals[a]
        if shape == ():
            axes = None
        elif axes is None:  # numpy broadcasting: trailing axes line up
            lead = rank - len(shape)
            axes = tuple(None if d == 1 else lead + k for k, d in enumerate(shape))
        key = (a, axes)
        if key not in args:
            args[key] = kernels.Arg(f"a{len(args)}", dtype, axes)
            if a not in inputs:
                inputs.append(a)
        return args[key].name

    for i in g.members:
        e, role = graph.equations[i], roles[i]
        phase = g.phase[e.output]
        operands: list[kernels.Operand] = []
        for k, a in enumerate(e.inputs):
            if isinstance(a, Lit):
                operands.append(kernels.Const(a.value))
            elif a in members:
                assert g.phase[a] != "loop" or role.maps.get(k) in (None, tuple(range(rank))), (e, k)
                operands.append(f"v_{a}")
            else:
                operands.append(arg(a, role.maps.get(k)))
        op = role.op
        if role.kind == "loop" and role.op == "multiply" and len(operands) != 2:
            # an einsum product of several operands: a chain of multiplies
            name = f"v_{e.output}"
            acc = operands[0]
            for k, x in enumerate(operands[1:]):
                out = name if k == len(operands) - 2 else f"{name}_{k}"
                steps.append(kernels.Step(out, "multiply", (acc, x), e.dtype, e.dtype, phase))
                acc = out
            continue
        steps.append(
            kernels.Step(
                f"v_{e.output}",
                op,
                tuple(operands),
                e.dtype,
                role.compute,
                "loop" if phase == "sum" else phase,
                checked=not e.quiet,
                keep=role.keep,
            )
        )
    outputs = [graph.equations[i].output for i in g.members]
    outputs = [v for v in outputs if v in read_after or v in returned]
    kept = {graph.equations[i].output for i in g.members if roles[i].keep}
    outs = tuple(
        kernels.Out(
            f"v_{v}",
            graph.avals[v][0],
            kernels.accumulator(graph.avals[v][1]) if v in kept else graph.avals[v][1],
            zeroed=g.phase[v] == "sum",
        )
        for v in outputs
    )
    spec = kernels.KernelSpec(g.shape, tuple(args.values()), tuple(steps), outs)
    equations = [graph.equations[i] for i in g.members]
    return FusedKernel(equations, inputs, outputs, g.shape, spec, [v for v, _ in args])


def _placed(graph: Graph, fused: list[FusedKernel]) -> Graph:
    """`graph` with each kernel's equations replaced by its outputs' placeholders, at its last member."""
    if not fused:
        return graph
    index = {id(e): i for i, e in enumerate(graph.equations)}
    at: dict[int, FusedKernel] = {}
    dropped: set[int] = set()
    for k in fused:
        positions = [index[id(e)] for e in k.equations]
        dropped.update(positions)
        at[max(positions)] = k
    equations: list[Equation] = []
    for i, e in enumerate(graph.equations):
        here = at.get(i)
        if here is not None:
            for j, v in enumerate(here.outputs):
                shape, dtype = graph.avals[v]
                params = {"kernel": here, "index": j}
                equations.append(Equation(fused_p, params, list(here.inputs), v, shape, dtype))
        elif i not in dropped:
            equations.append(e)
    return dataclasses.replace(graph, equations=equations)
