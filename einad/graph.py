"""`make_graph`: run a function once and show the program it executed.

A `GraphTrace` is a trace like any other: it boxes the inputs and records every
primitive that reaches it as one equation. Because gradients are programs too,
``make_graph(grad(f))`` lists the forward ops followed by the derivative ops,
where the einsum VJPs show their permuted subscripts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .core import Params, Primitive, Tensor, Trace, _box, bind, strip
from .pytree import tree_flatten, tree_unflatten
from .util import DTypeLike, dtype_of, shape_of


@dataclass
class Equation:
    """One line of a program: ``output:type = op[params] inputs``."""

    op: str
    params: Params
    inputs: list[str]
    output: str
    type: str

    @property
    def subscripts(self) -> str | None:
        """For an einsum, its subscripts as ``"ij,jk->ik"``; else None."""
        if self.op != "einsum":
            return None
        return f"{','.join(self.params['inputs'])}->{self.params['output']}"

    def __str__(self) -> str:
        return f"{self.output}:{self.type} = {self.op}{_params(self)} {' '.join(self.inputs)}".rstrip()


@dataclass
class Graph:
    """A traced program: typed inputs, constants, equations in order, outputs.

    Printing it shows the program in a jaxpr-like text form, one equation per line.

    Attributes:
        inputs: ``(name, type)`` of each input leaf, in argument order; a type reads
            like ``f64[3,4]``.
        consts: ``(name, type)`` of each array constant the program reads.
        equations: The operations in execution order (each one `Equation`).
        outputs: The variable (or literal) of each output leaf.
    """

    inputs: list[tuple[str, str]]
    consts: list[tuple[str, str]]
    equations: list[Equation] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        head = " ".join(f"{n}:{t}" for n, t in self.inputs)
        if self.consts:
            head = " ".join(f"{n}:{t}" for n, t in self.consts) + " ; " + head
        lines = [f"{{ lambda {head} ."]
        lines += [f"    {e}" for e in self.equations]
        lines.append(f"  in ({', '.join(self.outputs)}) }}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """Graphviz source: values as ellipses, operations as boxes."""
        out = ["digraph einad {", "  rankdir=TB;", '  node [fontname="monospace"];']
        # Variables are the inputs, constants and equation outputs; anything else an
        # equation mentions is a literal (2.0, True, nan, ...) and gets no node or edge.
        known = {n for n, _ in self.inputs} | {n for n, _ in self.consts} | {e.output for e in self.equations}
        for n, t in self.inputs:
            out.append(f'  "{n}" [label="{n}: {t}", shape=ellipse, style=filled, fillcolor="#dde8f6"];')
        for n, t in self.consts:
            out.append(f'  "{n}" [label="{n}: {t}", shape=ellipse, style=dashed];')
        for i, e in enumerate(self.equations):
            op = f"op{i}"
            out.append(f'  "{op}" [label="{e.op}{_params(e)}", shape=box];')
            for src in e.inputs:
                if src in known:
                    out.append(f'  "{src}" -> "{op}";')
            out.append(f'  "{e.output}" [label="{e.output}: {e.type}", shape=ellipse];')
            out.append(f'  "{op}" -> "{e.output}";')
        for o in self.outputs:
            if o in known:
                out.append(f'  "{o}" [peripheries=2];')
        out.append("}")
        return "\n".join(out)

    @property
    def einsums(self) -> list[str]:
        """The subscripts of every einsum equation, in program order."""
        return [s for e in self.equations if (s := e.subscripts) is not None]


def _params(e: Equation) -> str:
    if e.op == "einsum":
        return f"[{e.subscripts}]"
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


def _type(v: Any) -> str:
    return f"{_dtype(dtype_of(v))}[{','.join(str(d) for d in shape_of(v))}]"


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


class GraphTrace(Trace):
    """Records each primitive applied to its Tensors, in order."""

    __slots__ = ("_alive", "_fresh", "_names", "graph")
    kind = "graph"

    def __init__(self) -> None:
        super().__init__()
        self.graph = Graph(inputs=[], consts=[])
        self._names: dict[int, str] = {}
        self._fresh = _names()
        self._alive: list[Any] = []  # everything named stays alive, so no id is reused

    def _remember(self, x: Any, name: str) -> str:
        self._names[id(x)] = name
        self._alive.append(x)
        return name

    def new_input(self, value: Any) -> Tensor:
        """Box `value` as the next input of the program."""
        t = _box(value, self, None, None)
        self.graph.inputs.append((self._remember(t, next(self._fresh)), _type(value)))
        return t

    def name_of(self, x: Any) -> str:
        """A traced value's variable, a scalar's literal, or an array constant's name."""
        if id(x) in self._names:
            return self._names[id(x)]
        v = strip(x)
        if np.ndim(v) == 0:
            return repr(np.asarray(v).item())
        name = self._remember(x, f"k{len(self.graph.consts)}")
        self.graph.consts.append((name, _type(v)))
        return name

    def process(self, prim: Primitive, args: Sequence[Any], params: Params) -> Tensor:
        vals = [a._value if getattr(a, "_trace", None) is self else a for a in args]
        out = bind(prim, vals, params)
        t = _box(out, self, None, None)
        inputs = [self.name_of(a) for a in args]
        name = self._remember(t, next(self._fresh))
        self.graph.equations.append(Equation(prim.name, params, inputs, name, _type(out)))
        return t


def make_graph(f: Callable[..., Any]) -> Callable[..., Graph]:
    """``make_graph(f)(*args)`` runs `f` once and returns its program as a `Graph`.

    Every primitive `f` applies to its inputs becomes one equation, so the
    program of ``grad(f)`` shows the derivative's einsums with their permuted
    subscripts.

    Args:
        f: The function to trace; its arguments may be pytrees of arrays.

    Returns:
        A function taking `f`'s arguments and returning the `Graph` of that call.
    """

    def graph_f(*args: Any) -> Graph:
        trace = GraphTrace()
        flat, td = tree_flatten(list(args))
        boxed = []
        for x in flat:
            v = x if getattr(x, "_trace", None) is not None else np.asarray(strip(x))
            boxed.append(trace.new_input(v))
        out = f(*tree_unflatten(td, boxed))
        trace.graph.outputs = [trace.name_of(o) for o in tree_flatten(out)[0]]
        return trace.graph

    return graph_f
