"""Programs: the IR a function is staged into, the trace that stages it, and its interpreter.

A `Graph` is a jaxpr-like program: typed inputs, constants, equations (one
primitive applied to variables and literals, giving one variable), outputs.
`StagingTrace` builds one: it boxes each input as a `Staged` value and records
every primitive that reaches it as an equation. Everything computed from the
inputs is an equation, comparisons, masks and stabilizing shifts included (the
rules are written so that they stage those as operations); only arrays the
function closes over, literals and the seeds of gradients are constants.

`run_graph` interprets a program by binding each equation's primitive again,
so a program runs on arrays, and under any transformation: the gradient of a
program is the gradient of its equations. `make_graph(f)(*args)` returns the
program `f` runs at the shapes and dtypes of `args`; calling that `Graph` with
new arguments of the same shapes and dtypes runs it, and calling it with others
is a TypeError naming both (`check_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import arrays, cluster
from .aliases import DTypeLike, Shape
from .core import Params, Primitive, QuietRules, Staged, Tensor, Trace, _box, bind, in_rules, tracing
from .errors import TracerError, check_callable
from .pytree import TreeDef, tree_flatten, tree_unflatten
from .util import shape_of

# -- the IR ---------------------------------------------------------------------------


class Lit:
    """A literal operand of an equation: a Python or numpy scalar (or a 0-d array)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def key(self) -> tuple[str, str, str]:
        """Equal for literals that are interchangeable (same type, dtype and value)."""
        v = self.value
        return (type(v).__name__, str(getattr(v, "dtype", "")), repr(arrays.to_numpy(v).item()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return str(self) == other
        return isinstance(other, Lit) and self.key() == other.key()

    def __hash__(self) -> int:
        return hash(self.key())

    def __str__(self) -> str:
        return repr(arrays.to_numpy(self.value).item())

    __repr__ = __str__


Atom = str | Lit
"""An equation operand: a variable's name, or a literal."""


@dataclass(eq=False)
class Equation:
    """One line of a program: ``output:type = op[params] inputs``."""

    prim: Primitive
    params: Params
    inputs: list[Atom]
    output: str
    shape: Shape
    dtype: np.dtype[Any]
    quiet: bool = False
    """Staged by a derivative rule: runs with numpy's floating-point warnings off (see
    `core.QuietRules`), as it did while tracing."""

    @property
    def op(self) -> str:
        """The primitive's name."""
        return self.prim.name

    @property
    def type(self) -> str:
        """The output's type, as ``f64[3,4]``."""
        return _typestr(self.shape, self.dtype)

    @property
    def subscripts(self) -> str | None:
        """For an einsum, its subscripts as ``"ij,jk->ik"``; else None."""
        if self.op not in ("einsum", "sliced_einsum"):
            return None
        return f"{','.join(self.params['inputs'])}->{self.params['output']}"

    def __str__(self) -> str:
        args = " ".join(str(a) for a in self.inputs)
        return f"{self.output}:{self.type} = {self.op}{_params(self)} {args}".rstrip()


@dataclass(eq=False)
class Graph:
    """A program: typed inputs, constants, equations in order, outputs.

    Printing it shows the program in a jaxpr-like text form, one equation per
    line; calling it runs it (see `run_graph`) on arguments of the pytree
    structure, shapes and dtypes it was traced with. Arguments of another
    signature raise a `TypeError` naming, for each leaf that differs, the type
    the program takes and the one given (``this program takes f64[4] for input a,
    got f64[2]``): a program's steps are planned for its input types, and would
    otherwise compute wrong numbers. A Python number is taken as the 0-d array
    numpy makes of it, as `make_graph` staged numbers (``2.0`` is an ``f64[]``,
    ``2`` an ``i64[]``).

    Attributes:
        inputs: ``(name, type)`` of each input leaf, in argument order; a type reads
            like ``f64[3,4]``.
        consts: ``(name, type)`` of each array constant the program reads.
        equations: The operations in execution order (each one `Equation`).
        outputs: The variable (or literal) of each output leaf.
        const_values: The value of each constant, by name.
        avals: ``(shape, dtype)`` of every input, constant and equation output, by name.
    """

    inputs: list[tuple[str, str]]
    consts: list[tuple[str, str]]
    equations: list[Equation] = field(default_factory=list)
    outputs: list[Atom] = field(default_factory=list)
    const_values: dict[str, Any] = field(default_factory=dict)
    avals: dict[str, tuple[Shape, np.dtype[Any]]] = field(default_factory=dict)
    in_tree: TreeDef | None = None
    out_tree: TreeDef | None = None
    weak_inputs: dict[str, type] = field(default_factory=dict)
    """The inputs staged as Python numbers (`einad.jit`'s weakly typed scalars), by name, with
    the number's type; every other input was staged as an array."""

    def __str__(self) -> str:
        head = " ".join(f"{n}:{t}" for n, t in self.inputs)
        if self.consts:
            head = " ".join(f"{n}:{t}" for n, t in self.consts) + " ; " + head
        lines = [f"{{ lambda {head} ."]
        lines += [f"    {e}" for e in self.equations]
        lines.append(f"  in ({', '.join(str(o) for o in self.outputs)}) }}")
        return "\n".join(lines)

    def __call__(self, *args: Any) -> Any:
        flat, td = tree_flatten(list(args))
        if self.in_tree is not None and td != self.in_tree:
            raise TypeError(f"this program takes arguments structured as {self.in_tree}, got {td}")
        out = run_graph(self, check_inputs(self.input_types(), flat))
        return out if self.out_tree is None else tree_unflatten(self.out_tree, out)

    @property
    def input_names(self) -> list[str]:
        """The inputs' variable names, in order."""
        return [n for n, _ in self.inputs]

    def input_types(self) -> list[InputType]:
        """What each input leaf accepts, in order (see `check_inputs`)."""
        return [InputType(n, *self.avals[n], self.weak_inputs.get(n)) for n in self.input_names]

    def to_dot(self) -> str:
        """Graphviz source: values as ellipses, operations as boxes."""
        out = ["digraph einad {", "  rankdir=TB;", '  node [fontname="monospace"];']
        for n, t in self.inputs:
            out.append(f'  "{n}" [label="{n}: {t}", shape=ellipse, style=filled, fillcolor="#dde8f6"];')
        for n, t in self.consts:
            out.append(f'  "{n}" [label="{n}: {t}", shape=ellipse, style=dashed];')
        for i, e in enumerate(self.equations):
            op = f"op{i}"
            out.append(f'  "{op}" [label="{_dot_escaped(e.op + _params(e))}", shape=box];')
            for src in e.inputs:
                if isinstance(src, str):  # literals get no node and no edge
                    out.append(f'  "{src}" -> "{op}";')
            out.append(f'  "{e.output}" [label="{e.output}: {e.type}", shape=ellipse];')
            out.append(f'  "{op}" -> "{e.output}";')
        for o in self.outputs:
            if isinstance(o, str):
                out.append(f'  "{o}" [peripheries=2];')
        out.append("}")
        return "\n".join(out)

    @property
    def einsums(self) -> list[str]:
        """The subscripts of every einsum equation, in program order."""
        return [s for e in self.equations if (s := e.subscripts) is not None]

    def fresh_names(self) -> Iterator[str]:
        """Variable names this program does not use yet."""
        used = set(self.avals)
        return (n for n in _names() if n not in used)


def _dot_escaped(text: str) -> str:
    """`text` inside a Graphviz string: einsum indices may be any character, '"' and '\\' too."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


_NUMBERS = (bool, int, float, complex)
"""Python's number types: weakly typed in numpy's promotion (NEP 50)."""


@dataclass(frozen=True)
class InputType:
    """The type one input leaf of a program takes: the signature it was staged for.

    An array (or a numpy scalar) of `shape` and `dtype`; or, for an input staged as
    a Python number (`weak` is its type: `einad.jit` traces numbers weakly typed), a
    Python number of exactly that type, since numpy promotes numbers and arrays
    differently.
    """

    name: str
    shape: Shape
    dtype: np.dtype[Any]
    weak: type | None = None

    def accepts(self, v: Any) -> bool:
        """Whether the plain value `v` (a number already made an array, see `check_inputs`) is
        of this type."""
        if self.weak is not None:
            return type(v) is self.weak
        return shape_of(v) == self.shape and _dtype_of(v) == self.dtype

    def __str__(self) -> str:
        return _typestr(self.shape, self.dtype) if self.weak is None else f"Python {self.weak.__name__}"


def _given(v: Any) -> str:
    """The type of a plain value, as a program's listing writes it (a number: its Python type)."""
    if type(v) in _NUMBERS:
        return f"Python {type(v).__name__}"
    return _typestr(shape_of(v), _dtype_of(v))


def check_inputs(types: Sequence[InputType], leaves: Sequence[Any]) -> list[Any]:
    """`leaves` as a program's inputs, after checking them against the program's `types`.

    A Python number given for an array input becomes the 0-d array numpy makes of
    it (as `stage` makes it when it does not keep numbers weakly typed); the
    other leaves are kept as they are (Tensors too, checked by their values).
    The check compares shapes and dtypes only, so it is cheap enough for every
    call of a compiled program.

    Raises:
        TypeError: If a leaf is not of its input's type, naming for each such leaf
            the type the program takes and the type given; or if the number of
            leaves differs.
    """
    if len(leaves) != len(types):
        raise TypeError(f"this program takes {len(types)} input leaves, got {len(leaves)}")
    ready = list(leaves)
    wrong = []
    for k, (t, x) in enumerate(zip(types, leaves)):
        given = concrete(x)
        v = np.asarray(given) if t.weak is None and type(given) in _NUMBERS else given
        if not t.accepts(v):
            wrong.append(f"{t} for input {t.name}, got {_given(given)}")
        elif v is not given:
            ready[k] = v
    if wrong:
        raise TypeError(
            "this program takes "
            + "; ".join(wrong)
            + " (a program runs at the signature it was staged for; ea.jit compiles one per signature)"
        )
    return ready


def _params(e: Equation) -> str:
    p = e.params
    sliced = "".join(f" {c}/{m}" for c, m in p.get("slices", ()))
    sliced = f"; sliced{sliced}" if sliced else ""
    if p.get("executor") is not None:  # where the slices run as tasks
        sliced += f"; on {cluster.name(p['executor'])}"
    if e.op in ("einsum", "sliced_einsum"):
        return f"[{e.subscripts}{sliced}]"
    if e.op == "einsum_vg":
        return f"[{','.join(p['inputs'])}->{p['output']}; wrt {','.join(map(str, p['wrt']))}{sliced}]"
    if e.op == "einsum_vjp":
        wrt = ",".join(str(k) for k in p["wrt"] if k not in p["zero"])
        return f"[{','.join(p['inputs'])}->{p['output']}; wrt {wrt}{sliced}]"
    shown = {k: v for k, v in e.params.items() if k not in ("optimize", "memory_limit")}
    if not shown:
        return ""
    return "[" + ", ".join(f"{k}={_short(v)}" for k, v in shown.items()) + "]"


def _short(v: Any) -> str:
    if isinstance(v, np.dtype):
        return _dtype(v)
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, tuple):
        return "(" + ",".join(_short(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, slice):
        return ":".join("" if x is None else str(x) for x in (v.start, v.stop, v.step)).rstrip(":") or ":"
    return str(v)


_DTYPES = {
    "float64": "f64",
    "float32": "f32",
    "float16": "f16",
    "complex128": "c128",
    "complex64": "c64",
    "int64": "i64",
    "int32": "i32",
    "bool": "bool",
}


def _dtype(dt: DTypeLike) -> str:
    name: str = np.dtype(dt).name
    return _DTYPES.get(name, name)


def _typestr(shape: Shape, dtype: DTypeLike) -> str:
    return f"{_dtype(dtype)}[{','.join(str(d) for d in shape)}]"


def _names() -> Iterator[str]:
    """Fresh variable names: a, b, ..., z, aa, ab, ..."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    n = 0
    while True:
        k, name = n, ""
        while True:
            name = letters[k % 26] + name
            k = k // 26 - 1
            if k < 0:
                break
        n += 1
        yield name


# -- staging -----------------------------------------------------------------------------


class ClosedOverTracer(TracerError):
    """The staged function used a value traced by an enclosing transformation (a closure)."""


def _is_literal(v: Any) -> bool:
    return isinstance(v, (bool, int, float, complex, np.generic)) or (
        isinstance(v, np.ndarray) and v.ndim == 0
    )


class StagingTrace(Trace):
    """Records each primitive applied to its Tensors as an equation of `graph`.

    Values are computed while tracing (so shapes and dtypes are numpy's own),
    but boxed as `Staged`, which refuses to be read: the program cannot depend
    on the values it was traced with. `optimizing`: the program is staged to be optimized
    and compiled (`ea.jit`), so a reverse pass traced in it may stage its function on its
    own first and differentiate that program optimized (`autodiff`); `make_graph` lists
    the derivative of the function as written.
    """

    __slots__ = ("_alive", "_fresh", "_names", "graph", "optimizing")
    kind = "staging"

    def __init__(self, optimizing: bool = False) -> None:
        super().__init__()
        self.optimizing = optimizing
        self.graph = Graph(inputs=[], consts=[])
        self._names: dict[int, str] = {}
        self._fresh = _names()
        self._alive: list[Any] = []  # everything named stays alive, so no id is reused

    def _remember(self, x: Any, name: str, value: Any) -> str:
        self._names[id(x)] = name
        self._alive.append(x)
        self.graph.avals[name] = (shape_of(value), _dtype_of(value))
        return name

    def rebinding(self, t: Tensor, out: Tensor) -> None:
        if out._trace is self:  # `t` is named as the value it now holds (and kept alive, as every named one)
            self._names[id(t)] = self._names[id(out)]
            self._alive.append(t)

    def new_input(self, value: Any) -> Tensor:
        """Box `value` as the next input of the program."""
        t = _box(Staged(value), self, None, None)
        name = self._remember(t, next(self._fresh), value)
        self.graph.inputs.append((name, _typestr(*self.graph.avals[name])))
        if type(value) in _NUMBERS:
            self.graph.weak_inputs[name] = type(value)
        return t

    def atom(self, x: Any) -> Atom:
        """A staged value's variable, a scalar's literal, or an array constant's name."""
        if type(x) is Tensor:
            if x._trace is self:
                return self._names[id(x)]
            if x._trace is not None:
                raise ClosedOverTracer(
                    f"the staged function uses a value traced by {x._trace!r}, an enclosing "
                    "transformation (a closure over a traced value): pass it as an argument instead"
                )
            x = x._value
        if id(x) in self._names:
            return self._names[id(x)]
        if _is_literal(x):
            return Lit(x)
        v = x if arrays.is_array(x) else np.asarray(x)  # another library's constant stays in it
        if isinstance(v, np.ndarray) and (v.flags.writeable or v.base is not None):
            # the value it holds now: the program reads its constants as they were when it was
            # traced, and the passes fold some of them into its equations (a closed-over array
            # the caller changes in place later must change none of its results)
            v = v.copy()
        name = f"k{len(self.graph.consts)}"
        while name in self.graph.avals:
            name += "_"
        self._remember(x, name, v)
        self.graph.consts.append((name, _typestr(*self.graph.avals[name])))
        self.graph.const_values[name] = v
        return name

    def process(self, prim: Primitive, args: Sequence[Any], params: Params) -> Tensor:
        inputs = [self.atom(a) for a in args]
        vals = [_concrete(a) for a in args]
        out = prim.impl(*vals, **params)
        t = _box(Staged(out), self, None, None)
        name = self._remember(t, next(self._fresh), out)
        shape, dtype = self.graph.avals[name]
        self.graph.equations.append(Equation(prim, params, inputs, name, shape, dtype, in_rules()))
        return t


def _dtype_of(v: Any) -> np.dtype[Any]:
    d = getattr(v, "dtype", None)
    return arrays.np_dtype(d) if d is not None else np.result_type(v)


def _concrete(x: Any) -> Any:
    """The plain value of `x` under every trace, staged ones included.

    A value batched by `vmap` is stored with one leading axis per batching
    trace; its first example stands for it (a program is staged per example), and zeros
    for an example of an empty batch.
    """
    batched = 0
    while type(x) is Tensor:
        batched += bool(x._trace is not None and x._trace.batched)
        x = x._value
    v = x.concrete if type(x) is Staged else x
    if not batched:
        return v
    if 0 in tuple(v.shape[:batched]):
        return arrays.zeros(v, tuple(v.shape[batched:]), arrays.np_dtype(v.dtype))
    return v[(0,) * batched + (...,)]  # the trailing ... for the array API


def concrete(x: Any) -> Any:
    """A user's leaf as a program input: its value under every trace (Python scalars kept)."""
    v = _concrete(x)
    if isinstance(v, (bool, int, float, complex, np.ndarray, np.generic)):
        return v
    if arrays.is_array(v):  # another library's array stays in its library (and on its device),
        return arrays.detached(v)  # without a torch tensor's own autograd record
    return np.asarray(v)


def traced_leaf(x: Any) -> bool:
    """Whether staging takes this pytree leaf as an input (arrays, Tensors, numbers); other
    leaves (strings, hashable objects) are static: closed over."""
    return (
        type(x) is Tensor
        or isinstance(x, (np.ndarray, np.generic, bool, int, float, complex))
        or arrays.is_array(x)
    )


def put_leaves(flat: Sequence[Any], positions: Sequence[int], leaves: Sequence[Any]) -> list[Any]:
    """`flat` with `leaves` in the given positions: a staged function's traced leaves put back
    among its static ones."""
    merged = list(flat)
    for k, leaf in zip(positions, leaves):
        merged[k] = leaf
    return merged


def stage(
    f: Callable[..., Any],
    flat_args: Sequence[Any],
    in_tree: TreeDef,
    weak_scalars: bool = False,
    optimizing: bool = False,
) -> tuple[Graph, list[Any]]:
    """Trace ``f(*tree_unflatten(in_tree, flat_args))`` into a program.

    Returns the program and the output leaves' values seen while tracing. With
    `weak_scalars`, Python numbers stay Python numbers (weakly typed, as numpy's
    promotion treats them); otherwise they become 0-d arrays. `optimizing`: the
    program is to be optimized (see `StagingTrace`).
    """
    values = [concrete(x) for x in flat_args]
    if not weak_scalars:
        values = [np.asarray(v) if isinstance(v, (bool, int, float, complex)) else v for v in values]
    trace = StagingTrace(optimizing)
    with tracing(trace):
        boxed = [trace.new_input(v) for v in values]
        out = f(*tree_unflatten(in_tree, boxed))
        out_flat, out_tree = tree_flatten(out)
        graph = trace.graph
        graph.outputs = [trace.atom(o) for o in out_flat]
    graph.in_tree, graph.out_tree = in_tree, out_tree
    return graph, [_concrete(o) for o in out_flat]


def run_graph(graph: Graph, args: Sequence[Any]) -> list[Any]:
    """Interpret `graph` on the flat input leaves `args`: each equation's primitive bound again.

    On arrays this computes the program; on traced values the enclosing
    transformations see each primitive, so programs differentiate and batch. A primitive
    with a ``replay`` rule is applied through it (an einsum through `contract`, so that a
    staged network is one tree to an enclosing reverse trace, as the user's call was).
    """
    if len(args) != len(graph.inputs):
        raise TypeError(f"this program takes {len(graph.inputs)} input leaves, got {len(args)}")
    env: dict[str, Any] = dict(graph.const_values)
    env.update(zip(graph.input_names, args))

    def read(a: Atom) -> Any:
        return a.value if isinstance(a, Lit) else env[a]

    for e in graph.equations:
        replay = e.prim.replay
        with QuietRules() if e.quiet else nullcontext():
            vals = [read(a) for a in e.inputs]
            env[e.output] = bind(e.prim, vals, e.params) if replay is None else replay(vals, e.params)
    return [read(o) for o in graph.outputs]


def make_graph(f: Callable[..., Any]) -> Callable[..., Graph]:
    """``make_graph(f)(*args)`` stages `f` at the shapes and dtypes of `args` into a `Graph`.

    Every primitive applied to values computed from the inputs becomes one
    equation (comparisons, masks and shifts included), so the program replays:
    calling the returned `Graph` on new arguments of the same shapes and dtypes
    gives what `f` gives. ``make_graph(grad(f))`` lists the derivative program,
    whose einsums carry the permuted subscripts.

    Args:
        f: The function to trace; its arguments may be pytrees of arrays.

    Returns:
        A function taking `f`'s arguments and returning the `Graph` of that call.

    Raises:
        TracerError: If `f` branches in Python on a value computed from its inputs.
    """
    check_callable(f, "make_graph")

    def graph_f(*args: Any) -> Graph:
        flat, td = tree_flatten(list(args))
        return stage(f, flat, td)[0]

    return graph_f
