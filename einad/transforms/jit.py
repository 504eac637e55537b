"""`einad.jit`: stage a function once per signature, optimize it, compile it to Python, replay.

The first call for an input signature (pytree structure, the shape and dtype
of every array leaf, the type of every Python scalar, the values of the static
arguments) stages the function into a `Graph` (`program.stage`), optimizes it
(`passes.optimize`) and compiles it: each equation becomes one line of a
generated Python function that calls the primitive's lowered form (its
implementation with every plan, such as an einsum's contraction path and
pairwise layouts, made at compile time) on plain arrays. No Tensor, node or
trace exists at call time. Variables are deleted after their last use, so
intermediates are freed as early as in eager mode, and an elementwise step
writes into the memory of an operand that dies there (`passes.plan_buffers`).
With the ``llvm`` backend (the default where llvmlite is installed), the groups of
elementwise equations that `fusion.schedule` forms run as compiled kernels instead, one
line (one call) each.

Staging computes every value (`program.StagingTrace` runs each primitive), so the
call that stages a program returns the values staging computed rather than running
the program on the same arguments again: the first call computes once, as an
eager call does. Its results are handed over as the program hands over its own
(`_handovers`: copies where one could share memory with an argument, a constant or
another result), so they are the caller's arrays either way. They come from the
program before optimization, so they may differ from a later call's in rounding.

A program runs on the array library of its inputs, on their device: both are part
of the signature, so ``jit(f)`` called on numpy arrays and then on torch tensors
compiles two programs. A numpy program calls the lowered forms and writes into
dying buffers; another library's program calls the primitives' implementations
(which reach the library through `einad.arrays`), writes nothing in place, and
holds its constants and literals as that library's arrays (`to_library`).

Called with traced arguments (``grad(jit(f))``, ``vmap(jit(f))``), a jitted
function runs its cached program through the interpreter, so the enclosing
transformation sees every equation, and `f`'s Python does not run again.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import itertools
import linecache
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from .. import arrays, kernels
from ..core import Tensor
from ..errors import TracerError, check_callable
from ..memory import recycled
from ..program import (
    ClosedOverTracer,
    Graph,
    InputType,
    Lit,
    check_inputs,
    concrete,
    put_leaves,
    run_graph,
    stage,
    traced_leaf,
)
from ..pytree import TreeDef, tree_flatten, tree_unflatten
from ..util import integer, shape_of
from .fusion import FusedKernel, fused_p, schedule
from .passes import optimize, plan_buffers

_programs = itertools.count()


@dataclass(eq=False)
class Program(Graph):
    """An optimized, compiled program (what `jitted.lower(*args)` returns).

    ``str(program)`` is the optimized listing; ``program.source`` is the Python
    function it was compiled to; calling it runs the compiled function on
    arguments of the signature it was compiled for. Called inside a transformation
    (``ea.grad(program)``, ``ea.jvp``, ``ea.vmap``...), it runs its optimized equations as
    einad operations instead, so the transformation differentiates (or maps) it. Arguments of another pytree
    structure, shape or dtype raise a `TypeError` naming, for each leaf that
    differs, the type the program takes and the one given (``this program takes
    f64[4] for input a, got f64[2]``), as a `Graph` does; an input traced as a
    Python number (weakly typed) takes a Python number of the same type. The
    jitted function itself compiles a new program for a new signature instead.

    With the ``llvm`` backend, ``program.kernels`` lists the fused kernels the source
    calls (each one's equations, inputs and outputs), ``program.unfused`` the elementwise
    variables left to numpy and why, and ``program.fallback`` why no kernel is used at all
    (llvmlite missing, arrays of another library).
    """

    source: str = ""
    fn: Callable[..., Any] | None = None
    xp: Any = np
    """The array library the program computes with (the module `einad.arrays.namespace` gives)."""
    in_types: tuple[InputType, ...] = ()
    """What each input leaf takes (`Graph.input_types`, computed once when compiling)."""
    backend: str = "numpy"
    """``"llvm"`` when the program's elementwise work runs in compiled kernels, else ``"numpy"``."""
    kernels: tuple[FusedKernel, ...] = ()
    """The fused kernels the program calls, in order (``llvm`` backend)."""
    fallback: str | None = None
    """Why the program runs without compiled kernels although the ``llvm`` backend was asked
    for (or is the default): llvmlite missing, arrays of another library; None otherwise."""
    unfused: dict[str, str] = dataclasses.field(default_factory=dict)
    """The elementwise variables numpy computes in an ``llvm`` program, with the reason
    (complex numbers, integer arithmetic, an operation kernels lack)."""

    def compile(self) -> Program:
        """The program itself: it is compiled when lowered (so JAX's idiom
        ``jit(f).lower(x).compile()(x)`` runs here too)."""
        return self

    def as_text(self) -> str:
        """The optimized listing, ``str(program)`` (JAX's ``Lowered.as_text``)."""
        return str(self)

    def __call__(self, *args: Any) -> Any:
        flat, td = tree_flatten(list(args))
        if self.in_tree is not None and td != self.in_tree:
            raise TypeError(f"this program takes arguments structured as {self.in_tree}, got {td}")
        if any(type(x) is Tensor and x._trace is not None for x in flat):
            # Under a transformation (grad, jvp, vmap, ...): the optimized equations run one by
            # one as einad operations, which that transformation sees (the compiled function
            # computes on plain arrays and would hide the inputs' derivatives)
            return super().__call__(*args)
        assert self.fn is not None
        plain = [concrete(x) for x in flat]
        xp = arrays.namespace(*plain)
        if xp is not self.xp and any(not isinstance(x, (bool, int, float, complex)) for x in plain):
            raise TypeError(
                f"this program computes on {_lib_name(self.xp)} arrays, got {_lib_name(xp)} ones: lower it "
                "again with those (jit(f).lower(...)), or call the jitted function, which compiles "
                "a program per array library"
            )
        out = self.fn(*check_inputs(self.in_types, plain))
        return (
            out
            if self.out_tree is None
            else tree_unflatten(self.out_tree, [_result(o, self.xp) for o in out])
        )


def _lib_name(xp: Any) -> str:
    """A library's name as users write it: ``torch`` for array-api-compat's torch namespace."""
    return str(xp.__name__).split(".")[-1]


# -- compiling a program to Python ------------------------------------------------------------


BACKENDS = ("llvm", "numpy")
"""The backends of `jit`: compiled kernels for the elementwise work (the default when llvmlite
is installed), or numpy calls only."""


def _fallback(backend: str, xp: Any) -> str | None:
    """Why a program asked to use `backend` on arrays of `xp` runs without compiled kernels."""
    if backend == "numpy":
        return None
    if xp is not np:
        name = xp.__name__.removeprefix("array_api_compat.").split(".")[0]
        return f"arrays of {name}: compiled kernels run on numpy arrays only"
    return kernels.unavailable()


def compile_graph(graph: Graph, xp: Any = np, device: Any = None, backend: str = "numpy") -> Program:
    """Generate and compile the straight-line Python function that runs `graph`.

    `xp` is the array library the program runs on (numpy by default; `graph`'s constants
    and literals are then of that library, see `to_library`). numpy programs call each
    primitive's lowered form (its plans made now) and write elementwise results into dying
    operands (``out=``); other libraries call the primitives' implementations, which reach
    the library through its namespace, and never write in place. With ``backend="llvm"`` a
    numpy program runs its fused groups of elementwise equations as compiled kernels
    (`fusion.schedule`), one call each.
    """
    native = xp is np
    fallback = _fallback(backend, xp)
    fused = schedule(graph) if backend == "llvm" and fallback is None else None
    steps = fused.graph if fused is not None else graph
    names: dict[str, str] = {}
    namespace: dict[str, Any] = {}

    def var(n: str) -> str:
        if n not in names:
            names[n] = f"v_{n}"
        return names[n]

    def atom(a: str | Lit) -> str:
        if isinstance(a, Lit):
            key = f"c{len(namespace)}"
            namespace[key] = a.value
            return key
        return var(a)

    for n, v in graph.const_values.items():
        namespace[var(n)] = v
    last_use: dict[str, int] = {}
    for i, e in enumerate(steps.equations):
        for a in e.inputs:
            if isinstance(a, str):
                last_use[a] = i
    kept = {o for o in graph.outputs if isinstance(o, str)} | set(graph.const_values)
    params = ", ".join(var(n) for n in graph.input_names)
    lines = [f"def program({params}):"]
    # equation index -> a dying operand whose memory the ufunc reuses (numpy programs only)
    buffers = plan_buffers(steps) if native else {}
    quiet = False  # inside a `with errstate(...)` block: equations staged by derivative rules
    for i, e in enumerate(steps.equations):
        if e.quiet != quiet:
            quiet = e.quiet
            if quiet:
                lines.append('    with errstate(all="ignore"):  # derivative rules: no numpy warnings')
        pad = "        " if quiet else "    "
        if e.prim is fused_p:
            if e.params["index"] == 0:
                lines += _kernel_call(e.params["kernel"], var, namespace)
            gone = sorted({a for a in e.inputs if isinstance(a, str) and last_use[a] == i and a not in kept})
            if gone:
                lines.append(f"    del {', '.join(var(a) for a in gone)}")
            continue
        fn = f"f{i}"
        shapes = [graph.avals[a][0] if isinstance(a, str) else shape_of(a.value) for a in e.inputs]
        lower = e.prim.lower if native else None
        if lower is not None:
            namespace[fn] = lower(e.params, shapes)
        elif e.params:
            namespace[fn] = functools.partial(e.prim.impl, **e.params)
        else:
            namespace[fn] = e.prim.impl
        args = ", ".join(atom(a) for a in e.inputs)
        if i in buffers:
            args += f", out={var(buffers[i])}"
        lines.append(f"{pad}{var(e.output)} = {fn}({args})  # {e.op}")
        dead = sorted({a for a in e.inputs if isinstance(a, str) and last_use[a] == i and a not in kept})
        if dead:
            lines.append(f"{pad}del {', '.join(var(a) for a in dead)}")
    namespace["errstate"] = np.errstate
    namespace.update(_handover_functions(xp, device))
    outs = ", ".join(_returns(graph, [atom(o) for o in graph.outputs]))
    lines.append(f"    return ({outs}{',' if len(graph.outputs) == 1 else ''})")
    source = "\n".join(lines) + "\n"
    filename = f"<einad program {next(_programs)}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102  (our own generated code)
    base = {f.name: getattr(graph, f.name) for f in fields(Graph)}
    return Program(
        **base,
        source=source,
        fn=namespace["program"],
        xp=xp,
        in_types=tuple(graph.input_types()),
        backend="llvm" if fused is not None else "numpy",
        kernels=tuple(fused.kernels) if fused is not None else (),
        fallback=fallback,
        unfused=dict(fused.unfused) if fused is not None else {},
    )


def _kernel_call(k: FusedKernel, var: Callable[[str], str], namespace: dict[str, Any]) -> list[str]:
    """The lines that run a fused kernel: its outputs allocated, the call, and the rare cases
    (a NaN or an infinity made by the user's steps: numpy's warnings; misaligned arrays)."""
    assert k.compiled is not None
    n = sum(1 for key in namespace if key.startswith("kernel"))
    namespace[f"kernel{n}"] = k.compiled.fn
    namespace[f"finish{n}"] = k.finish
    # a large output's memory serves a later call once the program lets it go (`memory`)
    namespace["empty"], namespace["zeros"] = recycled, functools.partial(recycled, zero=True)
    lines = []
    outs = [var(o.name[2:]) for o in k.spec.outs]
    for o, name in zip(k.spec.outs, outs):
        dt = f"dtype_{o.dtype.name}"
        namespace[dt] = o.dtype
        lines.append(f"    {name} = {'zeros' if o.zeroed else 'empty'}({o.shape!r}, {dt})")
    args = []
    for a, v in zip(k.spec.args, k.args):
        if a.axes is not None:
            args.append(var(v))
        else:
            args.append(f"{'float' if a.dtype.kind == 'f' else 'int'}({var(v)})")
    ops = " ".join(e.op for e in k.equations)
    if len(ops) > 60:
        ops = ops[:57] + "..."
    lines.append(f"    events = kernel{n}({', '.join(args + outs)})  # fused: {ops}")
    inputs = ", ".join(var(v) for v in k.inputs) + ("," if len(k.inputs) == 1 else "")
    lhs = ", ".join(outs) + ("," if len(outs) == 1 else "")
    lines.append(
        "    if events:  # a NaN or an infinity in the user's steps (numpy warns), or misaligned arrays"
    )
    lines.append(f"        {lhs} = finish{n}(events, ({inputs}), ({lhs}))")
    dtypes = {f"v_{e.output}": e.dtype for e in k.equations}
    for o, name in zip(k.spec.outs, outs):
        if o.dtype != dtypes[o.name]:  # a sum added up in a wider accumulator (kernels.Out)
            dt = f"dtype_{dtypes[o.name].name}"
            namespace[dt] = dtypes[o.name]
            lines.append(
                "    with errstate(over='ignore'):  # (beyond float32's range: its inf, as a total's)"
            )
            lines.append(f"        {name} = {name}.astype({dt}, copy=False)")
    return lines


_LITERAL = "<literal>"
"""The root of a view of a literal (the program's own value, shared by every call)."""


def _roots(graph: Graph) -> dict[str, frozenset[str]]:
    """For each variable, the variables whose memory it may share: itself alone where its
    primitive declares the result fresh (`Primitive.aliasing`), else its operands' roots."""
    root = {n: frozenset({n}) for n in (*graph.input_names, *graph.const_values)}
    for e in graph.equations:
        if e.prim.result_aliasing(e.params, len(e.inputs)) == "fresh":
            root[e.output] = frozenset({e.output})
            continue
        mine = {r for a in e.inputs if isinstance(a, str) for r in root[a]}
        if any(isinstance(a, Lit) for a in e.inputs):
            mine.add(_LITERAL)
        root[e.output] = frozenset(mine)
    return root


def _handovers(graph: Graph) -> list[str | None]:
    """How each output of `graph` becomes the caller's own array (results never share memory
    with what the caller holds, and can be written to): ``"copy"`` where it could share memory
    with an input, a constant or an earlier output; ``"owned"`` where it may be a view of a
    fresh array, possibly read-only (a broadcast): copied only then; None where it is fresh."""
    roots = _roots(graph)
    external = {*graph.input_names, *graph.const_values, _LITERAL}
    seen: set[str] = set()
    out: list[str | None] = []
    for o in graph.outputs:
        root = roots[o] if isinstance(o, str) else None
        if root is None or not root.isdisjoint(external) or not root.isdisjoint(seen):
            out.append("copy")
        else:
            out.append(None if root == {o} else "owned")
            seen.update(root)
    return out


def _handover_functions(xp: Any, device: Any) -> dict[str, Callable[[Any], Any]]:
    """The functions `_handovers` names, for arrays of library `xp` on `device`."""
    if xp is np:
        return {"copy": np.array, "owned": _owned}
    # arrays of other libraries: a copy in the library, and no read-only flags to check
    return {"copy": functools.partial(_library_copy, xp, device), "owned": _same}


def _returns(graph: Graph, exprs: list[str]) -> list[str]:
    """The expressions returning the outputs, each handed over as `_handovers` says."""
    return [expr if how is None else f"{how}({expr})" for how, expr in zip(_handovers(graph), exprs)]


def _handed_over(graph: Graph, values: Sequence[Any], xp: Any, device: Any) -> list[Any]:
    """The output `values` of `graph` made the caller's own, as a compiled program makes its
    outputs (`_handovers`): what the call that staged `graph` returns (see `jit`)."""
    functions = _handover_functions(xp, device)
    return [v if how is None else functions[how](v) for how, v in zip(_handovers(graph), values)]


def _owned(x: Any) -> Any:
    """`x`, or a copy when it is a read-only view (such as a broadcast)."""
    return x if getattr(x, "flags", None) is None or x.flags.writeable else np.array(x)


def _same(x: Any) -> Any:
    return x


def _library_copy(xp: Any, device: Any, x: Any) -> Any:
    """A copy of `x` in library `xp` (a number, such as a literal output, becomes a 0-d array)."""
    if arrays.is_array(x) and not arrays.is_numpy(x):
        return xp.asarray(x, copy=True)
    return _convert(xp, device, x)


def _convert(xp: Any, device: Any, x: Any) -> Any:
    """A numpy array or number as an array of library `xp` on `device`, its dtype kept."""
    a = np.asarray(x)
    dt = arrays.lib_dtype(xp, a.dtype)
    value = a.item() if a.ndim == 0 else (a if a.dtype.kind == "c" else a.tolist())
    return xp.asarray(value, dtype=dt, device=device)


def to_library(graph: Graph, xp: Any, device: Any) -> Graph:
    """`graph` with its numpy constants and numpy literals as arrays of library `xp`, once.

    Staging on another library's arrays records that library's arrays, but literals
    (numpy scalars) and constants the passes make (`passes.simplify`) are numpy's; a
    library such as array-api-strict refuses numpy values mixed into its own. Python
    numbers stay Python numbers (weakly typed in every library).
    """
    if xp is np:
        return graph

    def lit(a: Any) -> Any:
        if isinstance(a, Lit) and isinstance(a.value, (np.ndarray, np.generic)):
            return Lit(_convert(xp, device, a.value))
        return a

    consts = {
        n: _convert(xp, device, v) if isinstance(v, (np.ndarray, np.generic)) else v
        for n, v in graph.const_values.items()
    }
    equations = [dataclasses.replace(e, inputs=[lit(a) for a in e.inputs]) for e in graph.equations]
    return dataclasses.replace(
        graph, equations=equations, outputs=[lit(o) for o in graph.outputs], const_values=consts
    )


def _result(o: Any, xp: Any) -> Any:
    """A program's output as the caller sees it: numpy for numpy programs, else the library's."""
    if type(o) is Tensor:
        return o
    if xp is np:
        return np.asarray(o)
    return o


# -- jit -----------------------------------------------------------------------------------------


def _leaf_signature(x: Any) -> Hashable:
    if not traced_leaf(x):
        try:
            hash(x)
        except TypeError:
            raise TypeError(
                f"einad.jit traces arrays and numbers; a {type(x).__name__} argument is taken "
                "as static and must then be hashable"
            ) from None
        return ("static", type(x), x)
    v = concrete(x)
    if isinstance(v, np.ndarray):
        return ("array", v.shape, v.dtype.str)
    if isinstance(v, (bool, int, float, complex)):
        return ("python", type(v).__name__)  # weakly typed, as numpy's promotion treats it
    if isinstance(v, np.generic):
        return ("scalar", v.dtype.str)
    # another library's array: a program runs on one library, on one device
    return ("array", type(v), str(arrays.device(v)), tuple(v.shape), arrays.np_dtype(v.dtype).str)


def _direct_key(args: tuple[Any, ...]) -> tuple[Any, ...] | None:
    """The shapes and dtypes of `args` when every one is a numpy array (jit's direct dispatch),
    else None. Two calls with equal keys have equal signatures (`_leaf_signature`)."""
    key: list[Any] = []
    for a in args:
        if type(a) is not np.ndarray:
            return None
        key.append(a.shape)
        key.append(a.dtype.str)
    return tuple(key)


def _static_both_ways(
    f: Callable[..., Any], nums: tuple[int, ...], names: tuple[str, ...]
) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """`nums` and `names` completed from `f`'s signature, as JAX does: a static argument is
    static however it is passed, by position or by keyword (a parameter named in `names` is
    static at its position too, one numbered in `nums` under its name too). Where `f` has no
    signature Python can read, they are kept as given. A number past `f`'s positional
    parameters, or a name that is none of its parameters, is a ValueError here, as JAX's (unless
    `f` takes ``*args`` or ``**kwargs``)."""
    for i in nums:
        integer(i, "jit: static_argnums")
    if not all(isinstance(n, str) for n in names):
        raise TypeError(f"jit: static_argnames must be strings, got {names!r}")
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return nums, names
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    kinds = {p.kind for p in params}
    n = len(positional)
    fname = getattr(f, "__qualname__", "the function")
    if inspect.Parameter.VAR_POSITIONAL not in kinds and any(not -n <= i < n for i in nums):
        raise ValueError(
            f"einad.jit: static_argnums={nums} names an argument that {fname} does not have: it "
            f"takes {n} positional argument(s)"
        )
    keywords = {p.name for p in params if p.kind is not p.POSITIONAL_ONLY}
    unknown = [k for k in names if k not in keywords]
    if inspect.Parameter.VAR_KEYWORD not in kinds and unknown:
        raise ValueError(
            f"einad.jit: static_argnames names {', '.join(map(repr, unknown))}, which {fname} does not take"
        )
    more_nums, more_names = list(nums), list(names)
    for i, p in enumerate(positional):
        if i in nums and p.kind is p.POSITIONAL_OR_KEYWORD and p.name not in more_names:
            more_names.append(p.name)
        if p.name in names and i not in more_nums:
            more_nums.append(i)
    return tuple(more_nums), tuple(more_names)


def jit(
    f: Callable[..., Any],
    static_argnums: int | Sequence[int] = (),
    static_argnames: str | Sequence[str] = (),
    backend: str | None = None,
    *,
    donate_argnums: int | Sequence[int] = (),
    donate_argnames: str | Sequence[str] = (),
) -> Callable[..., Any]:
    """Compile `f`: trace it once per input signature, optimize, and replay the compiled program.

    The first call for a signature returns the values computed while staging (it does not
    run the new program on the same arguments again); later calls run the program.

    Args:
        f: The function; its arguments and results may be pytrees of arrays.
        static_argnums: Positional arguments that are not traced: their values
            (hashable) are part of the signature, and Python may branch on them.
        static_argnames: Keyword arguments that are not traced, likewise.
        backend: ``"llvm"``: chains of elementwise operations (with the sums that end them)
            run as fused kernels compiled by LLVM (the ``fast`` extra: llvmlite), the rest
            as numpy calls; ``"numpy"``: numpy calls only. None (the default): ``"llvm"``
            when llvmlite is installed, else ``"numpy"`` (the program's ``fallback`` says
            why). Values, gradients and the signature cache are the same either way.
        donate_argnums: JAX's keywords, taken for code written for ``jax.jit``: JAX may reuse a
        donate_argnames: donated argument's buffer for a result; einad never writes into an
            argument (its programs reuse buffers of their own between calls), so they change
            nothing. Checked as JAX checks them: integers, and strings.

    Returns:
        A function with `f`'s signature, returning arrays of its inputs' library (pytrees of them)
        at top level, and traced Tensors inside another transformation. It has
        ``lower(*args, **kwargs)`` (the optimized `Program` for that signature)
        and ``cache_size()`` (the number of compiled signatures).

    Raises:
        TypeError: When the traced arguments are arrays of two libraries (naming both).
        TracerError: When `f` turns a traced value into a Python bool, int or
            float (an ``if`` on it): mark that argument static, or use `einad.where`.
        ValueError: For a backend other than those above.
        ImportError: For ``backend="llvm"`` where llvmlite cannot run (the reason).
    """
    check_callable(f, "jit")
    if backend is not None and backend not in BACKENDS:
        raise ValueError(
            f"einad.jit's backend is one of {', '.join(map(repr, BACKENDS))} or None, got {backend!r}"
        )
    if backend == "llvm":
        missing = kernels.unavailable()
        if missing is not None:
            raise ImportError(f"ea.jit(backend='llvm') cannot compile kernels here: {missing}")
    chosen = backend or "llvm"
    donated_nums = donate_argnums if isinstance(donate_argnums, (list, tuple)) else (donate_argnums,)
    for donated in donated_nums:
        integer(donated, "jit: donate_argnums")  # (a hint only: see the docstring)
    donated_names = (donate_argnames,) if isinstance(donate_argnames, str) else tuple(donate_argnames)
    if not all(isinstance(n, str) for n in donated_names):
        raise TypeError(f"jit: donate_argnames must be strings, got {donate_argnames!r}")
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
    names = (static_argnames,) if isinstance(static_argnames, str) else tuple(static_argnames)
    nums, names = _static_both_ways(f, nums, names)
    cache: dict[Hashable, Program] = {}
    # The common call, positional numpy arrays only (no static arguments), keyed by the arrays'
    # shapes and dtypes alone: its program, found without flattening or signing the arguments.
    direct: dict[tuple[Any, ...], Program] = {}

    def split(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Hashable, list[Any], TreeDef]:
        pos = {i % len(args) for i in nums if -len(args) <= i < len(args)}
        # each static value with its type: 1, 1.0 and True are equal and hash alike, but `f`'s
        # Python may tell them apart (and numpy's promotion does), as JAX's cache does
        static = tuple((i, type(args[i]), args[i]) for i in sorted(pos)) + tuple(
            sorted(((k, type(kwargs[k]), kwargs[k]) for k in names if k in kwargs), key=lambda s: s[0])
        )
        try:
            hash(static)
        except TypeError:
            raise TypeError("einad.jit's static arguments must be hashable") from None
        dyn = (
            [a for i, a in enumerate(args) if i not in pos],
            {k: v for k, v in kwargs.items() if k not in names},
        )
        flat, tree = tree_flatten(dyn)
        sig = tuple(_leaf_signature(x) for x in flat)
        return (len(args), static, tree, sig), flat, tree

    def build(
        args: tuple[Any, ...], kwargs: dict[str, Any], flat: list[Any], tree: TreeDef
    ) -> tuple[Program, list[Any]]:
        """Stage, optimize and compile `f` for these arguments; return the program and the
        results of this call, computed while staging (and handed over as the program would)."""
        pos = {i % len(args) for i in nums if -len(args) <= i < len(args)}

        traced = [k for k, x in enumerate(flat) if traced_leaf(x)]

        def call(*leaves: Any) -> Any:
            dyn_args, dyn_kwargs = tree_unflatten(tree, put_leaves(flat, traced, leaves))
            it = iter(dyn_args)
            full = [args[i] if i in pos else next(it) for i in range(len(args))]
            return f(*full, **{**{k: kwargs[k] for k in names if k in kwargs}, **dyn_kwargs})

        leaves = [flat[k] for k in traced]
        values = [concrete(x) for x in leaves]
        xp = arrays.namespace(*values)  # a TypeError naming both for two libraries
        foreign = [v for v in values if arrays.is_array(v) and not arrays.is_numpy(v)]
        device = arrays.device(foreign[0]) if foreign else None
        graph, outputs = stage(call, leaves, tree_flatten(leaves)[1], weak_scalars=True, optimizing=True)
        program = compile_graph(to_library(optimize(graph), xp, device), xp, device, chosen)
        return program, _handed_over(graph, outputs, xp, device)

    def program_for(
        args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> tuple[Program | None, list[Any], list[Any] | None]:
        """The program for the signature of these arguments, their traced leaves, and, when
        this call staged the program, the results staging computed (else None)."""
        key, leaves, tree = split(args, kwargs)
        flat = [x for x in leaves if traced_leaf(x)]
        program = cache.get(key)
        if program is not None:
            return program, flat, None
        try:
            program, results = build(args, kwargs, leaves, tree)
        except ClosedOverTracer:
            return None, flat, None  # f closes over an enclosing transformation's tracer: no program
        cache[key] = program
        return program, flat, results

    @functools.wraps(f)
    def jitted(*args: Any, **kwargs: Any) -> Any:
        key = _direct_key(args) if not kwargs and not nums and not names else None
        if key is not None:
            program = direct.get(key)
            if program is not None:  # what the general path below does for these arguments
                assert program.fn is not None and program.out_tree is not None
                out = program.fn(*args)
                if program.out_tree.node_type is None:  # one array
                    return np.asarray(out[0])
                return tree_unflatten(program.out_tree, [np.asarray(o) for o in out])
        program, flat, staged = program_for(args, kwargs)
        if key is not None and program is not None and program.xp is np:
            direct[key] = program
        if program is None:
            return f(*args, **kwargs)
        assert program.out_tree is not None
        if any(type(x) is Tensor and x._trace is not None for x in flat):
            out = run_graph(program, flat)  # the enclosing transformations see each equation
            return tree_unflatten(program.out_tree, [_result(o, program.xp) for o in out])
        if staged is not None:
            out = staged  # staging computed the results already: the first call computes once
        else:
            assert program.fn is not None
            out = program.fn(*[concrete(x) for x in flat])
        if program.xp is np:
            return tree_unflatten(program.out_tree, [np.asarray(o) for o in out])
        return tree_unflatten(program.out_tree, list(out))

    def lower(*args: Any, **kwargs: Any) -> Program:
        """The optimized, compiled program for the signature of these arguments."""
        program, _, _ = program_for(args, kwargs)
        if program is None:
            raise TracerError("this function closes over a value traced by an enclosing transformation")
        return program

    jitted.lower = lower  # type: ignore[attr-defined]
    jitted.cache_size = lambda: len(cache)  # type: ignore[attr-defined]
    return jitted
