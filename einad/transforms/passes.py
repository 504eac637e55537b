"""Optimization passes on programs: each a pure function from a `Graph` to a `Graph`.

A pass never changes the program it is given; it returns a new one that
computes the same outputs from the same inputs (up to floating-point rounding),
with every equation's shape and dtype unchanged. Output variables may be
renamed (an output that was ``x * 1`` becomes ``x``). `optimize` runs them in a
loop until nothing changes:

* `dce`: equations no output reaches, and constants nothing reads, are dropped.
* `cse`: equations with one primitive, equal parameters and the same operands
  are computed once; constants with equal contents are stored once.
* `simplify`: a constant that holds one value everywhere becomes a scalar
  literal where broadcasting allows; ``x * 1``, ``x / 1``, ``x + 0``, ``x - 0``,
  ``x ** 1`` and an einsum operand of ones go away when the result has exactly
  `x`'s shape and dtype (a cast stays, as an `astype`).
* `algebra`: chains of constant scalings fold into one (``c2 * (c1 * x)`` is one multiply),
  signs move out of products and into sums, ``x + x`` is ``2 * x``, ``x * x`` is
  ``square(x)``, and a sigmoid of what a softplus also reads is computed from the softplus.
* `fold_spreads`: elementwise work on `spread` outputs (the structured
  cotangents the einsum VJP makes: broadcasts and diagonals) is done on their
  small sources (``spread(a) + spread(b)`` is ``spread(a + b)``), and an einsum
  reading a spread reads its source instead, the broadcast letters dropped and
  the diagonal letters merged into one.
* `merge_einsums`: an einsum whose result only one einsum reads becomes part of
  it, following both einsums' paths (or opt_einsum's plan of the whole network,
  where that is cheaper), so that a network contracted one piece at a time is
  one einsum again.

`plan_buffers` does not change the program: it says where a code generator may
write an elementwise result into the memory of an operand that dies there.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeAlias

import numpy as np

from ..aliases import Shape
from ..core import Primitive
from ..program import Atom, Equation, Graph, Lit, _typestr
from ..rules.einsum import einsum_p, einsum_path, path_flops, spread_p
from ..rules.elementwise import PRIMITIVES
from ..rules.shape import astype_p, ones_like_p, reshape_p
from ..subscripts import fresh_symbols, numpy_subscripts, unique

Aval: TypeAlias = tuple[Shape, np.dtype[Any]]
"""A variable's shape and dtype."""

Result: TypeAlias = "Atom | list[Equation] | None"
"""What a local rule makes of an equation: keep it (None), equations replacing it
(the last one defines its output), or an atom its output is renamed to."""

Rule: TypeAlias = Callable[[Equation, "_Rewriter"], Result]

_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
"""The index letters numpy's einsum accepts (the passes never go beyond them)."""

_P = PRIMITIVES
_ADD, _SUB, _MUL, _DIV, _POW, _NEG = (
    _P[n] for n in ("add", "subtract", "multiply", "divide", "power", "negative")
)
# -- reading a program ------------------------------------------------------------------------


def use_counts(graph: Graph) -> Counter[str]:
    """How many times each variable is read: as an operand (once per position) or as an output."""
    uses: Counter[str] = Counter()
    for e in graph.equations:
        uses.update(a for a in e.inputs if isinstance(a, str))
    uses.update(o for o in graph.outputs if isinstance(o, str))
    return uses


def _einsum_only(graph: Graph) -> set[str]:
    """Variables read only as einsum operands (not by other primitives, not as outputs)."""
    other = {o for o in graph.outputs if isinstance(o, str)}
    read: set[str] = set()
    for e in graph.equations:
        names = {a for a in e.inputs if isinstance(a, str)}
        read |= names
        if e.prim is not einsum_p:
            other |= names
    return read - other


def _scalar(value: Any) -> Any:
    """A Python or numpy scalar's value, or None for anything with a shape."""
    return value if np.ndim(value) == 0 else None


def _dtype(value: Any) -> np.dtype[Any]:
    d = getattr(value, "dtype", None)
    return np.dtype(d) if d is not None else np.result_type(value)


def _broadcast(shapes: Sequence[Shape]) -> Shape | None:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


# -- rebuilding a program -------------------------------------------------------------------


def _one_value(k: np.ndarray) -> bool:
    """Whether every element of `k` has the bits of its first: ``==`` alone would take
    ``[0.0, -0.0]`` for one value, and ``1 / k`` tells them apart."""
    if not bool(np.all(k == k.flat[0])):
        return False
    if k.dtype.kind not in "fc":
        return True
    first = k.flat[0]
    parts = (k.real, k.imag) if k.dtype.kind == "c" else (k,)
    signs = (first.real, first.imag) if k.dtype.kind == "c" else (first,)
    return all(bool(np.all(np.signbit(p) == np.signbit(s))) for p, s in zip(parts, signs))


class _Rewriter:
    """A program being rebuilt in order, one equation at a time.

    Operands are renamed as earlier equations were replaced; `producer` maps a
    variable to the equation (of the new program) that computes it; `uses`
    counts reads in the original program, plus the reads an alias inherits, so
    it never counts too few (a dead equation's reads still count until `dce`).
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.avals: dict[str, Aval] = dict(graph.avals)
        self.const_values: dict[str, Any] = dict(graph.const_values)
        self.const_types: dict[str, str] = dict(graph.consts)
        self.equations: list[Equation] = []
        self.producer: dict[str, Equation] = {}
        self.rename: dict[str, Atom] = {}
        self.retracted: set[str] = set()
        self.uses = use_counts(graph)
        self.outputs = {o for o in graph.outputs if isinstance(o, str)}
        self.einsum_only = _einsum_only(graph)
        self.scalar_inputs = {n for n in graph.input_names if graph.avals[n][0] == ()}
        self._fresh = graph.fresh_names()

    def atom(self, a: Atom) -> Atom:
        return self.rename.get(a, a) if isinstance(a, str) else a

    def renamed(self, e: Equation) -> Equation:
        if not self.rename:  # (nothing renamed yet: the walk reads no operand of a wide einsum)
            return e
        inputs = [self.atom(a) for a in e.inputs]
        if all(x is y for x, y in zip(inputs, e.inputs)):
            return e
        return dataclasses.replace(e, inputs=inputs)

    def aval(self, a: Atom) -> Aval:
        """A variable's shape and dtype; a literal's shape and the dtype numpy gives it alone."""
        if isinstance(a, Lit):
            return np.shape(a.value), _dtype(a.value)
        return self.avals[a]

    def fresh(self, shape: Shape, dtype: np.dtype[Any]) -> str:
        name = next(self._fresh)
        self.avals[name] = (shape, dtype)
        return name

    def const(self, value: Any) -> str:
        """A new constant holding `value`."""
        value = np.asarray(value)
        n = 0
        while f"k{n}" in self.avals:
            n += 1
        name = f"k{n}"
        self.avals[name] = (value.shape, value.dtype)
        self.const_values[name] = value
        self.const_types[name] = _typestr(value.shape, value.dtype)
        return name

    def const_value(self, a: Atom) -> Any:
        """The numpy array a constant's name stands for (None for variables and literals).

        Another library's constant (a program staged on torch or dask arrays) is opaque to
        the passes: they read no values out of it (a dask array would have to be computed).
        """
        v = self.const_values.get(a) if isinstance(a, str) else None
        return v if isinstance(v, np.ndarray) else None

    def uniform(self, a: Atom) -> Any:
        """The one value `a` holds everywhere, as a scalar (of `a`'s dtype where it is a variable); else None.

        A literal, a constant holding one value, a `ones_like`, or a broadcast
        (a spread with no diagonal and no sum) of one of those.
        """
        if isinstance(a, Lit):
            return _scalar(a.value)
        value: Any = None
        k = self.const_value(a)
        e = self.producer.get(a)
        if k is not None and k.size > 0 and _one_value(k):
            value = k.flat[0]
        elif e is not None and e.prim is ones_like_p:
            value = 1
        elif e is not None and e.prim is spread_p and _is_broadcast(e):
            value = self.uniform(e.inputs[0])
        return None if value is None else np.asarray(value, dtype=self.avals[a][1])[()]

    def strong(self, a: Atom) -> bool:
        """Whether numpy's promotion sees `a` with the dtype the program records for it.

        A 0-d program input may be a Python number (``jit`` stages scalars
        weakly typed), which promotes differently from its recorded float64,
        and so may a literal: neither replaces a variable, nor its spread a
        spread of it. A literal holding a numpy value is strong.
        """
        if isinstance(a, Lit):
            return isinstance(a.value, (np.ndarray, np.generic))
        return a not in self.scalar_inputs

    def alone(self, a: Atom) -> bool:
        """Whether `a` is a variable read once, by the equation at hand, and not an output."""
        return isinstance(a, str) and self.uses[a] == 1 and a not in self.outputs

    def emit(self, e: Equation) -> None:
        self.equations.append(e)
        self.producer[e.output] = e
        self.avals[e.output] = (e.shape, e.dtype)

    def alias(self, name: str, a: Atom) -> None:
        """Read `a` wherever `name` was read."""
        self.rename[name] = a
        if isinstance(a, str):
            self.uses[a] += self.uses[name]
            if name in self.outputs:
                self.outputs.add(a)

    def retract(self, name: str) -> None:
        """Leave out the equation already emitted for `name`, which nothing reads any more (an
        einsum merged into its reader: `merge_einsums`). It stays `producer`, for the walk."""
        self.retracted.add(name)

    def finish(self) -> Graph:
        """The new program; constants nothing reads are left out."""
        outputs = [self.atom(o) for o in self.graph.outputs]
        if self.retracted:
            self.equations = [e for e in self.equations if e.output not in self.retracted]
        read = {a for e in self.equations for a in e.inputs if isinstance(a, str)}
        read |= {o for o in outputs if isinstance(o, str)}
        consts = [(n, t) for n, t in self.const_types.items() if n in read]
        names = [n for n, _ in self.graph.inputs] + [n for n, _ in consts]
        names += [e.output for e in self.equations]
        return dataclasses.replace(
            self.graph,
            inputs=list(self.graph.inputs),
            consts=consts,
            equations=self.equations,
            outputs=outputs,
            const_values={n: self.const_values[n] for n, _ in consts},
            avals={n: self.avals[n] for n in names},
        )


def rewrite(graph: Graph, rule: Rule, rename: dict[str, Atom] | None = None) -> Graph:
    """Rebuild `graph` with `rule` applied to each equation in program order.

    The rule sees the equation with its operands renamed (so chains of
    rewrites collapse in one walk) and returns None to keep it, a list of
    equations whose last one defines the same output, or an atom to read
    instead of its output. `rename` renames variables before the walk.
    """
    rw = _Rewriter(graph)
    for name, a in (rename or {}).items():
        rw.alias(name, a)
    for e in graph.equations:
        e = rw.renamed(e)
        result = rule(e, rw)
        if result is None:
            rw.emit(e)
        elif isinstance(result, list):
            last = result[-1]
            assert (last.output, last.shape, last.dtype) == (e.output, e.shape, e.dtype), (last, e)
            for new in result:
                rw.emit(new)
        else:
            rw.alias(e.output, result)
    return rw.finish()


def _eq(prim: Primitive, params: dict[str, Any], inputs: list[Atom], out: str, aval: Aval) -> Equation:
    return Equation(prim, params, inputs, out, aval[0], aval[1])


# -- dead-code elimination ------------------------------------------------------------------


def _live(graph: Graph) -> set[str]:
    """The variables some output depends on (one backward walk)."""
    live = {o for o in graph.outputs if isinstance(o, str)}
    for e in reversed(graph.equations):
        if e.output in live:
            live.update(a for a in e.inputs if isinstance(a, str))
    return live


def dce(graph: Graph) -> Graph:
    """Drop the equations no output depends on, and the constants nothing reads.

    Every primitive is a pure function of its operands, so an equation whose
    result no output reads (directly or through other equations) cannot change
    an output. One backward walk marks what the outputs need. In
    forward-over-reverse programs this drops the primal value and the primal
    gradient that the tangent of the gradient does not read.
    """
    live = _live(graph)
    kept = [e for e in graph.equations if e.output in live]
    consts = [(n, t) for n, t in graph.consts if n in live]
    names = [n for n, _ in graph.inputs] + [n for n, _ in consts] + [e.output for e in kept]
    return dataclasses.replace(
        graph,
        inputs=list(graph.inputs),
        consts=consts,
        equations=kept,
        outputs=list(graph.outputs),
        const_values={n: graph.const_values[n] for n, _ in consts},
        avals={n: graph.avals[n] for n in names},
    )


# -- common subexpressions ------------------------------------------------------------------


def params_key(value: Any) -> Hashable:
    """A hashable key equal for parameter values a primitive treats alike.

    Arrays (integer or boolean indices) compare by dtype, shape and bytes;
    dtypes by their full description; floats by `repr`, so ``0.0`` and ``-0.0``
    differ and a NaN equals itself; ints and bools differ (``True`` is not ``1``
    to numpy's indexing). An object of any other type is equal only to itself.
    """
    if isinstance(value, dict):
        return ("dict", tuple(sorted((str(k), params_key(v)) for k, v in value.items())))
    if type(value) is tuple and _plain(value):  # an einsum's subscripts, path, wrt: as they are
        return ("plain", value)
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(params_key(v) for v in value))
    if isinstance(value, slice):
        return ("slice", params_key(value.start), params_key(value.stop), params_key(value.step))
    if isinstance(value, np.ndarray):
        return ("ndarray", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        return ("generic", value.dtype.str, value.tobytes())
    if isinstance(value, np.dtype):
        return ("dtype", value.str, str(value))
    if isinstance(value, (float, complex)):
        return (type(value).__name__, repr(value))
    if value is None or value is Ellipsis or isinstance(value, (bool, int, str)):
        return (type(value).__name__, value)
    return ("object", type(value).__name__, id(value))


def _plain(value: tuple[Any, ...]) -> bool:
    """Whether `value` holds only strings, or only ints (not bools), or only tuples of ints:
    then tuples of such values compare as their keys would (a string never equals an int), at
    the cost of one pass over them, however many operands an einsum has."""
    if all(type(v) is str for v in value) or all(type(v) is int for v in value):
        return True
    return all(type(v) is tuple and all(type(i) is int for i in v) for v in value)


def _atom_key(a: Atom) -> tuple[str, Hashable]:
    return ("var", a) if isinstance(a, str) else ("lit", a.key())


def equation_key(e: Equation) -> Hashable:
    """Equal for equations that compute the same value (commutative operands sorted)."""
    operands = [_atom_key(a) for a in e.inputs]
    if e.prim.commutative:
        operands.sort()
    return (e.prim.name, id(e.prim), params_key(e.params), tuple(operands), e.shape, e.dtype.str)


def _same_consts(graph: Graph) -> dict[str, Atom]:
    """Each constant whose contents equal an earlier one's, mapped to that earlier one."""
    first: dict[Hashable, str] = {}
    rename: dict[str, Atom] = {}
    for name, _ in graph.consts:
        v = graph.const_values[name]
        if not isinstance(v, (np.ndarray, np.generic)):
            continue  # another library's array: its contents are not read (a dask array stays lazy)
        v = np.asarray(v)
        key = (v.dtype.str, v.shape, v.tobytes())
        rename_to = first.setdefault(key, name)
        if rename_to != name:
            rename[name] = rename_to
    return rename


def cse(graph: Graph) -> Graph:
    """Compute each distinct expression once; store each distinct constant once.

    Two equations with the same primitive, equal parameters (`params_key`) and
    the same operands (variables by name, literals by `Lit.key`; in either
    order for add, multiply, equal and not_equal, which IEEE arithmetic makes
    exactly commutative) compute the same value, since primitives are pure:
    the later one's output is read from the earlier one. Constants with equal
    dtype, shape and bytes are merged first, so expressions over them match.
    Where the earlier one is a derivative rule's (quiet) and the later one the
    user's, the one kept warns as the user's step does without jit.
    """
    seen: dict[Hashable, tuple[str, int]] = {}  # key -> output, position in the new program

    def rule(e: Equation, rw: _Rewriter) -> Result:
        key = equation_key(e)
        if key in seen:
            output, at = seen[key]
            first = rw.equations[at]
            if first.quiet and not e.quiet:
                rw.equations[at] = rw.producer[output] = dataclasses.replace(first, quiet=False)
            return output
        seen[key] = (e.output, len(rw.equations))  # (kept: emitted next, at this position)
        return None

    return rewrite(graph, rule, _same_consts(graph))


# -- symbolic ones and zeros ------------------------------------------------------------------


def _uniform_to_literal(e: Equation, rw: _Rewriter) -> Equation:
    """An elementwise equation with each operand of one value replaced by a scalar of its dtype.

    Constants of one value, ones_like results and broadcasts of such values
    (see `_Rewriter.uniform`) become numpy scalars, where the other operands
    broadcast to the result's shape by themselves; a numpy scalar keeps the
    operand's dtype in numpy's promotion (NEP 50), so the result's dtype and
    values are unchanged.
    """
    if not e.prim.elementwise:
        return e
    inputs = list(e.inputs)
    for i, a in enumerate(inputs):
        value = None if isinstance(a, Lit) else rw.uniform(a)
        others = [rw.aval(b)[0] for j, b in enumerate(inputs) if j != i]
        if value is not None and _broadcast(others or [()]) == e.shape:
            inputs[i] = Lit(value)
    return e if inputs == e.inputs else dataclasses.replace(e, inputs=inputs)


def _same_as(x: Atom, e: Equation, rw: _Rewriter) -> Result:
    """`x` as `e`'s result: `x` itself if it has e's type, a cast if only the dtype differs."""
    if not rw.strong(x):
        return None
    shape, dtype = rw.aval(x)
    if shape != e.shape:
        return None  # a broadcast: kept as it is
    if dtype == e.dtype:
        return x
    return [_eq(astype_p, {"dtype": e.dtype}, [x], e.output, (e.shape, e.dtype))]


def _is(rw: _Rewriter, a: Atom, value: int) -> bool:
    v = rw.uniform(a)
    return v is not None and bool(v == value)


def _neutral(e: Equation, rw: _Rewriter) -> Result:
    """``x*1, 1*x, x/1, x**1, x+0, 0+x, x-0`` -> x; ``0-x`` -> ``-x``."""
    if len(e.inputs) != 2:
        return None
    x, y = e.inputs
    if e.dtype.kind == "c" and e.prim is not _ADD and e.prim is not _SUB:
        return None  # a complex product with 1 + 0j turns an infinite part's 0 into NaN
    if e.prim is _MUL or e.prim is _ADD:
        unit = 1 if e.prim is _MUL else 0
        if _is(rw, y, unit):
            return _same_as(x, e, rw)
        if _is(rw, x, unit):
            return _same_as(y, e, rw)
    if (e.prim is _DIV or e.prim is _POW) and _is(rw, y, 1):
        return _same_as(x, e, rw)
    if e.prim is _SUB and _is(rw, y, 0):
        return _same_as(x, e, rw)
    if e.prim is _SUB and _is(rw, x, 0) and rw.strong(y) and rw.aval(y) == (e.shape, e.dtype):
        return [_eq(_NEG, {}, [y], e.output, (e.shape, e.dtype))]
    return None


def _einsum_ones(e: Equation, rw: _Rewriter) -> Result:
    """Drop the einsum operands that hold ones and whose letters other operands index too.

    Every term of the sum is multiplied by one: nothing changes, as long as the
    dropped operand brings no letter of its own (that would be a broadcast or a
    count) and does not take part in the result's dtype.
    """
    if e.prim is not einsum_p or len(e.inputs) < 2 or e.dtype.kind == "c":
        return None
    specs: list[str] = list(e.params["inputs"])
    keep = list(range(len(specs)))
    for k in range(len(specs)):
        if len(keep) < 2 or not _is(rw, e.inputs[k], 1):
            continue  # (before joining the others' letters: a wide einsum's walk stays linear)
        others = "".join(specs[j] for j in keep if j != k)
        if set(specs[k]) <= set(others):
            rest = [j for j in keep if j != k]
            if np.result_type(*[rw.aval(e.inputs[j])[1] for j in rest]) == e.dtype:
                keep = rest
    if len(keep) == len(specs):
        return None
    new_specs = tuple(specs[j] for j in keep)
    operands = [e.inputs[j] for j in keep]
    if len(keep) == 1 and new_specs[0] == e.params["output"]:
        return _same_as(operands[0], e, rw)
    params = _einsum_params(e, new_specs, e.params["output"])
    return [dataclasses.replace(e, params=params, inputs=operands)]


def _einsum_params(e: Equation, inputs: tuple[str, ...], output: str) -> dict[str, Any]:
    """An einsum's parameters with new subscripts; an explicit path no longer fits, so "auto"."""
    optimize = e.params.get("optimize", "auto")
    return {
        "inputs": inputs,
        "output": output,
        "optimize": optimize if isinstance(optimize, str) else "auto",
        "memory_limit": e.params.get("memory_limit"),
    }


def _identity(e: Equation, rw: _Rewriter) -> Result:
    """Operations that return their operand: an einsum ``ij->ij``, a reshape or spread to itself."""
    p = e.params
    same = (
        (e.prim is einsum_p and len(e.inputs) == 1 and p["inputs"][0] == p["output"])
        or (e.prim is spread_p and p["src"] == p["dst"])
        or (e.prim is reshape_p and isinstance(e.inputs[0], str) and rw.aval(e.inputs[0])[0] == e.shape)
        or (e.prim is astype_p and isinstance(e.inputs[0], str) and rw.aval(e.inputs[0])[1] == e.dtype)
    )
    if same and rw.strong(e.inputs[0]) and rw.aval(e.inputs[0]) == (e.shape, e.dtype):
        return e.inputs[0]
    return None


def _scalar_constant(e: Equation, rw: _Rewriter) -> Result:
    """A 0-d `ones_like`, or a 0-d elementwise op on literals only: its value, as a literal.

    The value is the one the program computes (the primitive run on the
    literals), held as a numpy scalar of the result's dtype.
    """
    if e.shape != ():
        return None
    if e.prim is ones_like_p:
        return Lit(np.ones((), dtype=e.dtype)[()])
    if e.prim.elementwise and all(isinstance(a, Lit) for a in e.inputs):
        value = e.prim.impl(*[a.value for a in e.inputs if isinstance(a, Lit)], **e.params)
        return Lit(np.asarray(value, dtype=e.dtype)[()])
    return None


def _simplify_rule(e: Equation, rw: _Rewriter) -> Result:
    new = _uniform_to_literal(e, rw)
    for rule in (_scalar_constant, _identity, _neutral, _einsum_ones):
        result = rule(new, rw)
        if result is not None:
            return result
    return None if new is e else [new]


def simplify(graph: Graph) -> Graph:
    """Remove multiplications by one and additions of zero, literal or constant.

    A constant holding a single value (a gradient's seed of ones, a broadcast
    scale) becomes a scalar literal of its dtype wherever the other operands
    already have the result's shape; then ``x * 1``, ``x / 1``, ``x ** 1``,
    ``x + 0`` and ``x - 0`` read `x` itself when it has the result's shape and
    dtype (exact in IEEE arithmetic, up to the sign of a zero sum), and become
    an `astype` when only the dtype differs; ``0 - x`` becomes ``-x``. An
    einsum drops operands of ones whose letters other operands index, and an
    identity einsum, reshape, spread or cast disappears.
    """
    return rewrite(graph, _simplify_rule)


# -- algebra: scalings, signs, squares, derivatives from forward values --------------------------------

_SQUARE, _EXPM1, _SIGMOID, _SOFTPLUS = (_P[n] for n in ("square", "expm1", "sigmoid", "softplus"))


def _scaling(e: Equation | None) -> tuple[Any, Atom] | None:
    """``(c, x)`` when `e` is ``c * x`` (either order) for a finite real scalar literal `c` and a
    variable `x` of `e`'s type (the scaling then changes no dtype)."""
    if e is None or e.prim is not _MUL or e.dtype.kind != "f":
        return None
    for c, x in ((e.inputs[0], e.inputs[1]), (e.inputs[1], e.inputs[0])):
        if isinstance(c, Lit) and isinstance(x, str):
            v = c.value
            if np.ndim(v) == 0 and not np.iscomplexobj(v) and np.isfinite(v):
                return v, x
    return None


def _scaled(e: Equation, c: Any, x: Atom, rw: _Rewriter) -> Result:
    """`e` as ``c * x`` in e's dtype (``-x`` for -1, `x` itself for 1), when `x` has e's type."""
    if not rw.strong(x) or rw.aval(x) != (e.shape, e.dtype):
        return None
    with np.errstate(all="ignore"):
        k = np.asarray(c, dtype=e.dtype)[()]
    if not np.isfinite(k):
        return None
    if k == 1:
        return x
    if k == -1:
        return [dataclasses.replace(e, prim=_NEG, params={}, inputs=[x])]
    return [dataclasses.replace(e, prim=_MUL, params={}, inputs=[Lit(k), x])]


def _product(rw: _Rewriter, c1: Any, c2: Any, dtype: np.dtype[Any]) -> Any:
    """Two scalings' factors as one, computed in the result's dtype."""
    with np.errstate(all="ignore"):
        return np.multiply(np.asarray(c1, dtype=dtype), np.asarray(c2, dtype=dtype))[()]


def _algebra_rule(e: Equation, rw: _Rewriter, softplus: dict[Atom, str]) -> Result:
    """One equation of `algebra`; `softplus` maps each operand of a softplus seen so far to its result."""
    if e.dtype.kind != "f":
        return None
    x = e.inputs[0] if e.inputs else None
    alone = rw.alone(x) if isinstance(x, str) else False
    inner = rw.producer.get(x) if isinstance(x, str) else None
    if e.prim is _SOFTPLUS and isinstance(x, str):
        softplus.setdefault(x, e.output)
        return None
    if e.prim is _SIGMOID and x in softplus and rw.aval(softplus[x]) == (e.shape, e.dtype):
        # sigmoid(x) = 1 - exp(-softplus(x)), from the forward's value: three cheap passes
        # instead of the stable sigmoid's own (an exp, two divisions and a select)
        minus, em1 = rw.fresh(e.shape, e.dtype), rw.fresh(e.shape, e.dtype)
        return [
            dataclasses.replace(e, prim=_NEG, inputs=[softplus[x]], output=minus),
            dataclasses.replace(e, prim=_EXPM1, inputs=[minus], output=em1),
            dataclasses.replace(e, prim=_NEG, inputs=[em1]),
        ]
    if e.prim is _ADD and len(e.inputs) == 2:
        a, b = e.inputs
        if a == b and isinstance(a, str):  # x + x is 2 * x, exactly
            return _scaled(e, 2, a, rw)
        for p, q in ((a, b), (b, a)):  # x + (-y) is x - y, exactly
            neg = rw.producer.get(q) if isinstance(q, str) else None
            if neg is not None and neg.prim is _NEG and rw.alone(q) and neg.dtype == e.dtype:
                return [dataclasses.replace(e, prim=_SUB, inputs=[p, neg.inputs[0]])]
    if e.prim is _SUB and len(e.inputs) == 2:
        neg = rw.producer.get(e.inputs[1]) if isinstance(e.inputs[1], str) else None
        if neg is not None and neg.prim is _NEG and rw.alone(e.inputs[1]) and neg.dtype == e.dtype:
            return [dataclasses.replace(e, prim=_ADD, inputs=[e.inputs[0], neg.inputs[0]])]
    if e.prim is _NEG and alone and inner is not None:
        if inner.prim is _NEG:  # -(-x) is x
            return _scaled(e, 1, inner.inputs[0], rw)
        sc = _scaling(inner)
        if sc is not None:  # -(c x) is (-c) x
            return _scaled(e, _product(rw, -1, sc[0], e.dtype), sc[1], rw)
    if e.prim is _POW and len(e.inputs) == 2 and isinstance(e.inputs[1], Lit) and isinstance(x, str):
        two = e.inputs[1].value
        if not np.iscomplexobj(two) and np.ndim(two) == 0 and two == 2 and rw.aval(x) == (e.shape, e.dtype):
            return [dataclasses.replace(e, prim=_SQUARE, params={}, inputs=[x])]  # pow(x, 2) is x * x
    if e.prim is _MUL and len(e.inputs) == 2:
        a, b = e.inputs
        if a == b and isinstance(a, str) and rw.aval(a) == (e.shape, e.dtype):
            return [dataclasses.replace(e, prim=_SQUARE, inputs=[a])]  # one operand read, not two
        sc = _scaling(e)
        if sc is not None:
            c, v = sc
            below = rw.producer.get(v) if isinstance(v, str) else None
            if rw.alone(v) and below is not None:
                sc2 = _scaling(below)
                if sc2 is not None:  # c2 (c1 x) is (c1 c2) x: one pass instead of two
                    return _scaled(e, _product(rw, c, sc2[0], e.dtype), sc2[1], rw)
                if below.prim is _NEG:  # c (-x) is (-c) x
                    return _scaled(e, _product(rw, -1, c, e.dtype), below.inputs[0], rw)
            return None
        for p, q in ((a, b), (b, a)):  # (-x) y is -(x y), exactly: the sign moves out to meet others
            neg = rw.producer.get(p) if isinstance(p, str) else None
            if neg is not None and neg.prim is _NEG and rw.alone(p) and neg.dtype == e.dtype:
                mid = rw.fresh(e.shape, e.dtype)
                inputs = [neg.inputs[0], q] if p == a else [q, neg.inputs[0]]
                return [
                    dataclasses.replace(e, inputs=inputs, output=mid),
                    dataclasses.replace(e, prim=_NEG, inputs=[mid]),
                ]
    return None


def algebra(graph: Graph) -> Graph:
    """Fewer and cheaper elementwise passes, by real-number identities that hold in floating point.

    * Scalings fold: ``c2 * (c1 * x)`` is ``(c1 c2) * x`` (the factors multiplied in the
      result's dtype), ``-(c x)`` is ``(-c) x``, ``c (-x)`` is ``(-c) x``, ``-(-x)`` is ``x``, and
      a factor 1 or -1 leaves ``x`` or ``-x``. Folding two factors may differ from applying them
      in turn in the last bit.
    * Signs move out of products (``(-x) y`` is ``-(x y)``) and into sums (``x + (-y)`` is
      ``x - y``, ``x - (-y)`` is ``x + y``), and ``x + x`` is ``2 * x``: exact, and they let the
      scalings meet and fold (a Hessian-vector product's ``-(2 (f c))`` becomes ``-2 (f c)``).
    * ``x * x`` is ``square(x)``: one operand read instead of two, the same bits; so is
      ``x ** 2`` (numpy's own power takes that shortcut; a compiled kernel would call pow).
    * ``sigmoid(x)`` where the program computes ``softplus(x)`` (the logistic loss and its
      derivative) is ``-expm1(-softplus(x))``: a derivative read from the forward's value.

    Each rewrite applies where the inner value is read by this equation alone (so its pass is
    saved, not repeated), on real floating-point values; a softplus no output needs (dead code,
    for `dce`) is not brought back to life.
    """
    softplus: dict[Atom, str] = {}
    live = _live(graph)

    def rule(e: Equation, rw: _Rewriter) -> Result:
        if e.prim is _SOFTPLUS and e.output not in live:
            return None
        return _algebra_rule(e, rw, softplus)

    return rewrite(graph, rule)


# -- structured cotangents: spreads --------------------------------------------------------------


def _spread_source(rw: _Rewriter, a: Atom, einsum_use: bool = False) -> Equation | None:
    """The spread computing `a`, if it may be folded away: `a` is read only where it is folded."""
    if not isinstance(a, str):
        return None
    e = rw.producer.get(a)
    if e is None or e.prim is not spread_p or not rw.strong(e.inputs[0]):
        return None
    ok = a in rw.einsum_only if einsum_use else rw.alone(a)
    return e if ok else None


def _is_broadcast(spread: Equation) -> bool:
    """A spread that only repeats (no diagonal, so no zeros) and sums nothing."""
    src, dst = spread.params["src"], spread.params["dst"]
    return unique(dst) == dst and set(src) <= set(dst)


def _sums_nothing(spread: Equation) -> bool:
    """A spread that keeps every source letter (summing some first commutes with no elementwise op)."""
    return set(spread.params["src"]) <= set(spread.params["dst"])


def const_source(value: Any, src: str, dst: str, shape: Shape) -> Any:
    """The array `x` with ``spread(x, src, dst, shape) == value`` exactly, or None if there is none.

    Reads one element of each broadcast line and the diagonal, then checks the
    spread of that rebuilds `value` bit for bit (so off-diagonal zeros and
    repeated lines are verified, not assumed).
    """
    value = np.asarray(value)
    if value.shape != tuple(shape) or value.size == 0 or not set(src) <= set(dst) or unique(src) != src:
        return None
    u = unique(dst)
    diag = np.einsum(numpy_subscripts(f"{dst}->{u}"), value)  # the letters may be any index's
    line = diag[tuple(slice(None) if c in src else 0 for c in u)]
    present = "".join(c for c in u if c in src)
    x = np.ascontiguousarray(np.einsum(numpy_subscripts(f"{present}->{src}"), line))
    rebuilt = np.asarray(spread_p.impl(x, src=src, dst=dst, shape=tuple(shape)), dtype=value.dtype)
    # bit for bit: `==` takes -0.0 for 0.0 (and 1 / x tells them apart)
    same = np.ascontiguousarray(rebuilt).tobytes() == np.ascontiguousarray(value).tobytes()
    return x if same else None


def _respread(e: Equation, s: Equation, prim: Primitive, inputs: list[Atom], rw: _Rewriter) -> list[Equation]:
    """``prim(inputs)`` on the small sources, then the spread `s` onto e's output."""
    src_shape = rw.aval(s.inputs[0])[0]
    mid = rw.fresh(src_shape, e.dtype)
    return [
        _eq(prim, dict(e.params), inputs, mid, (src_shape, e.dtype)),
        _eq(spread_p, dict(s.params), [mid], e.output, (e.shape, e.dtype)),
    ]


def _fold_unary(e: Equation, rw: _Rewriter) -> Result:
    """``f(spread(a)) -> spread(f(a))``: for a broadcast any f; for a diagonal, f with f(0) = 0."""
    if not e.prim.elementwise or len(e.inputs) != 1:
        return None
    s = _spread_source(rw, e.inputs[0])
    if s is None or not _sums_nothing(s) or not (_is_broadcast(s) or e.prim.zero_at_zero):
        return None
    return _respread(e, s, e.prim, [s.inputs[0]], rw)


def _other_source(e: Equation, s: Equation, other: Atom, rw: _Rewriter) -> Atom | None:
    """What stands for `other` next to the source of the spread `s`, in ``e.prim(spread, other)``."""
    src, dst, shape = s.params["src"], s.params["dst"], s.params["shape"]
    t = _spread_source(rw, other)
    if t is not None and (t.params["dst"], t.params["shape"]) == (dst, shape) and _sums_nothing(t):
        # one spread spec, or a source whose letters end s's source (numpy broadcasts it there)
        return t.inputs[0] if src.endswith(t.params["src"]) else None
    k = rw.const_value(other)
    if k is not None:
        x = const_source(k, src, dst, shape)
        return None if x is None else rw.const(x)
    if isinstance(other, Lit) and np.ndim(other.value) == 0:
        # a scalar: any op on a broadcast; on a diagonal, only a finite factor keeps the zeros
        finite = bool(np.all(np.isfinite(other.value)))
        if _is_broadcast(s) or (e.prim is _MUL and finite):
            return other
    return None


def _fold_binary(e: Equation, rw: _Rewriter) -> Result:
    """``spread(a) (+|-|*) spread(b) -> spread(a (+|-|*) b)`` for one spread spec.

    The other operand may also be a constant that is the spread of a smaller
    array (checked exactly, see `const_source`), or a scalar. On a diagonal,
    ``0 + 0``, ``0 - 0`` and ``0 * 0`` are 0, so the sum, difference and product
    of two spreads are the spread of the sum, difference and product.
    """
    if e.prim not in (_ADD, _SUB, _MUL) or len(e.inputs) != 2:
        return None
    for i in (0, 1):
        s = _spread_source(rw, e.inputs[i])
        if s is None or not _sums_nothing(s):
            continue
        other = _other_source(e, s, e.inputs[1 - i], rw)
        if other is None:
            continue
        inputs = [s.inputs[0], other] if i == 0 else [other, s.inputs[0]]
        if _broadcast([rw.aval(a)[0] for a in inputs]) != rw.aval(s.inputs[0])[0]:
            continue
        return _respread(e, s, e.prim, inputs, rw)
    return None


def _fold_broadcast_operand(e: Equation, rw: _Rewriter) -> Result:
    """An elementwise op reads a trailing broadcast's source itself: numpy broadcasting repeats it.

    A spread that only repeats along leading letters (its source's letters are
    the last ones of `dst`, in order) is what numpy's broadcasting does to the
    source anyway, when the other operands give the result its full shape.
    """
    if not e.prim.elementwise:
        return None
    inputs = list(e.inputs)
    for i, a in enumerate(inputs):
        s = rw.producer.get(a) if isinstance(a, str) else None
        if s is None or s.prim is not spread_p or not rw.strong(s.inputs[0]) or not _is_broadcast(s):
            continue
        src, dst = s.params["src"], s.params["dst"]
        trial = inputs[:i] + [s.inputs[0]] + inputs[i + 1 :]
        if dst.endswith(src) and _broadcast([rw.aval(b)[0] for b in trial]) == e.shape:
            inputs = trial
    return None if inputs == e.inputs else [dataclasses.replace(e, inputs=inputs)]


class _Classes:
    """Union-find over index letters (a tiny one: programs have few letters)."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        while self.parent.setdefault(x, x) != x:
            x = self.parent[x]
        return x

    def union(self, x: str, y: str) -> None:
        self.parent[self.find(x)] = self.find(y)


def _letter_sizes(specs: Sequence[str], shapes: Sequence[Shape]) -> dict[str, int]:
    return {c: d for spec, shape in zip(specs, shapes) for c, d in zip(spec, shape)}


def fold_spread_spec(
    inputs: tuple[str, ...], output: str, k: int, src: str, dst: str
) -> tuple[tuple[str, ...], str, str] | None:
    """The einsum `inputs->output` with operand k, a ``spread(src -> dst)``, replaced by its source.

    Positions pair operand k's letters with the spread's `dst` letters. Letters
    linked through a repeated `dst` letter (a diagonal: zero off it) must be
    equal, so each class of linked letters is renamed to one of its letters
    (an output letter if it has one). The source reads its `src` letters
    through their classes (where the einsum repeats a letter, it reads the
    source's diagonal); a `src` letter not in `dst` (summed by the spread) gets
    a fresh letter, summed inside the operand. Returns ``(inputs, output,
    vanished)``: `vanished` lists, by their old names, the letters that now
    index nothing (a broadcast the einsum summed: a factor of its size). None
    if two output letters would become one (the result itself is a diagonal)
    or an output letter would index no operand (the result is a broadcast).
    """
    classes = _Classes()
    for c, d in zip(inputs[k], dst):
        classes.union("e" + c, "d" + d)
    rep: dict[str, str] = {}
    for c in output + "".join(inputs):  # output letters first: they name their class
        rep.setdefault(classes.find("e" + c), c)
    name = {c: rep[classes.find("e" + c)] for c in output + "".join(inputs)}
    if len({name[c] for c in output}) != len(output):
        return None
    extra = iter(fresh_symbols(set(name) | set(name.values()), len(src)))
    fresh = {c: next(extra) for c in unique(src) if c not in dst}
    source = "".join(rep[classes.find("d" + c)] if c in dst else fresh[c] for c in src)
    new_inputs = tuple(source if j == k else "".join(name[c] for c in spec) for j, spec in enumerate(inputs))
    new_output = "".join(name[c] for c in output)
    if not set(new_output) <= set("".join(new_inputs)):
        return None  # the einsum returns the broadcast: a letter no operand would index
    after = set("".join(new_inputs)) | set(new_output)
    vanished = "".join(c for c in unique("".join(name[c] for c in "".join(inputs))) if c not in after)
    return new_inputs, new_output, vanished


def _ascii(inputs: Sequence[str], output: str) -> bool:
    """Whether numpy's einsum accepts these letters (fresh symbols may go beyond a-zA-Z)."""
    return set("".join(inputs) + output) <= _LETTERS


def _count(n: int, dtype: np.dtype[Any]) -> Any:
    """The count `n` as a 0-d array of `dtype`, the factor that the sum of n copies is of one
    copy, or None where there is none: integers wrap as their sums do (300 copies of an int8
    add up to 44 times one, where 300 itself does not fit), a boolean einsum ORs (any count is
    its truth), and a float count must be finite (70000 is inf in float16; the sum is 70000 x)."""
    with np.errstate(over="ignore"):
        k = np.asarray(n).astype(dtype)
    return None if dtype.kind in "fc" and not np.isfinite(k) else k


def _fold_into_einsum(e: Equation, rw: _Rewriter) -> Result:
    """An einsum reading a spread (read only by einsums) reads the spread's source instead.

    Repeating along a letter is that letter being absent from the operand; a
    diagonal is its letters being one. A broadcast letter the einsum summed
    contributes its size as a factor (an operand with no letters). The
    spread's dense array is never made. A factor its dtype cannot hold (see `_count`)
    leaves the spread as it is.
    """
    if e.prim is not einsum_p:
        return None
    specs: tuple[str, ...] = tuple(e.params["inputs"])
    output: str = e.params["output"]
    operands = list(e.inputs)
    for k in range(len(operands)):
        s = _spread_source(rw, operands[k], einsum_use=True)
        folded = None if s is None else fold_spread_spec(specs, output, k, s.params["src"], s.params["dst"])
        if s is None or folded is None or not _ascii(folded[0], folded[1]):
            continue
        sizes = _letter_sizes(specs, [rw.aval(a)[0] for a in operands])
        factor = _count(math.prod(sizes[c] for c in folded[2]), e.dtype)
        if factor is None:
            continue
        specs, output, vanished = folded
        operands[k] = s.inputs[0]
        if vanished:
            operands.append(Lit(factor))
            specs = (*specs, "")
    if operands == e.inputs:
        return None
    return [dataclasses.replace(e, params=_einsum_params(e, specs, output), inputs=operands)]


def fold_spreads(graph: Graph) -> Graph:
    """Do elementwise work and contractions on the sources of `spread`s, not on their dense arrays.

    The einsum VJP returns a cotangent as ``spread(a)``: a broadcast along the
    letters its operand alone has, or a diagonal for its repeated letters. A
    spread read only where it is folded (for einsums: read only by einsums) is
    folded: ``spread(a) + spread(b)`` (one spec) is ``spread(a + b)``, likewise
    ``-`` and ``*``, a scalar, a constant that is itself such a spread, and a
    unary op (on a diagonal, one with f(0) = 0); an einsum reads ``a`` with the
    spread's letters. An elementwise op reads the source of a broadcast along
    leading letters, which numpy's broadcasting repeats by itself. Each fold
    leaves the spread dead, for `dce`.
    """
    return rewrite(graph, _fold_spreads_rule)


def _fold_spreads_rule(e: Equation, rw: _Rewriter) -> Result:
    for rule in (_fold_unary, _fold_binary, _fold_broadcast_operand, _fold_into_einsum):
        result = rule(e, rw)
        if result is not None:
            return result
    return None


# -- einsum chains ------------------------------------------------------------------------------


def merge_spec(
    inputs: tuple[str, ...],
    output: str,
    k: int,
    inner_inputs: tuple[str, ...],
    inner_output: str,
    letters: set[str] | None = None,
    inner_letters: set[str] | None = None,
) -> tuple[tuple[str, ...], str, set[str]]:
    """The subscripts of `inputs->output` with operand k, the result of
    `inner_inputs->inner_output`, replaced by the inner einsum's operands: the operands',
    the output's, and a set holding every letter they use.

    An einsum's letters are its own, so either side may be renamed; the one with fewer
    operands is (a network merged one product at a time renames the product, not the
    network). Renaming the outer einsum: operand k's letters take the inner output's names
    by position, and a letter of its own that the inner einsum also has gets a fresh one.
    Renaming the inner einsum (also where operand k reads a diagonal, two of its letters
    naming one of the inner output's): its output letters take operand k's names, and a
    letter it summed that the outer einsum also has gets a fresh one, so it is summed in
    the merged einsum too. `letters` and `inner_letters`, the two einsums' letters where
    the caller knows them (a superset does: it only renames more), may be updated and
    handed back. Set operations and one `str.translate` of the renamed side: no walk over
    the other.
    """
    if letters is None:
        letters = set("".join(inputs)) | set(output)
    if inner_letters is None:
        inner_letters = set("".join(inner_inputs))
    spec = inputs[k]
    if len(inner_inputs) > len(inputs) and len(set(spec)) == len(spec):
        table, used = _renaming(dict(zip(spec, inner_output)), letters, inner_letters)
        renamed = tuple(",".join(inputs).translate(table).split(","))
        return renamed[:k] + tuple(inner_inputs) + renamed[k + 1 :], output.translate(table), used
    table, used = _renaming(dict(zip(inner_output, spec)), inner_letters, letters)
    spliced = tuple(",".join(inner_inputs).translate(table).split(",")) if inner_inputs else ()
    return inputs[:k] + spliced + inputs[k + 1 :], output, used


def _renaming(name: dict[str, str], own: set[str], kept: set[str]) -> tuple[dict[int, str], set[str]]:
    """`merge_spec`'s renaming of one einsum (letters `own`) spliced beside another (letters
    `kept`): `name` (its letters read through the other's) and a fresh letter for each other
    letter of its own that the other has too, as a `str.translate` table; and every letter
    either uses (`kept`, updated)."""
    clashing = sorted((own - name.keys()) & kept)
    kept |= own
    name.update(zip(clashing, fresh_symbols(kept, len(clashing))))
    kept.update(name.values())
    return str.maketrans(name), kept


class _Slot:
    """An operand or an intermediate of a composed contraction path (`_Composed`); `sub` is the
    slot read in its place once an inner einsum's result is spliced in there."""

    __slots__ = ("sub",)

    def __init__(self) -> None:
        self.sub: _Slot | None = None


@dataclasses.dataclass
class _Composed:
    """The path of an einsum merged from others, kept as a tree until the merging is done.

    `leaves` holds a slot per operand, in operand order; `steps` the einsum's own path
    (each step: the slots it reads and the slot it makes); `inners` the composed paths
    spliced into it, in the order they were merged. Splicing is a constant amount of work
    (a slot's `sub`, a slice of `leaves`), where rewriting positional paths costs a walk
    over the whole network at every merge; `flat_path` turns the tree into an opt_einsum
    path once, at the root.
    """

    leaves: list[_Slot]
    steps: list[tuple[tuple[_Slot, ...], _Slot]]
    inners: list[_Composed]

    @classmethod
    def of(cls, path: Sequence[Sequence[int]], n: int) -> _Composed:
        leaves = [_Slot() for _ in range(n)]
        work, steps = list(leaves), []
        for step in path:
            made = _Slot()
            steps.append((tuple(work[i] for i in step), made))
            for i in sorted(step, reverse=True):
                del work[i]
            work.append(made)
        return cls(leaves, steps, [])

    def splice(self, k: int, inner: _Composed) -> None:
        """Put `inner`'s operands in operand k's place, reading its result where k was read.
        A one-operand inner einsum's step is dropped: the merged contraction does its
        transposing or summing in the steps that read its operand."""
        if len(inner.leaves) == 1:
            return  # (operand k's slot now stands for the inner operand)
        self.leaves[k].sub = inner.steps[-1][1]
        self.leaves[k : k + 1] = inner.leaves
        self.inners.append(inner)

    def copy(self) -> _Composed:
        """The same tree with slots of its own (an inner einsum merged at several places)."""
        new: dict[int, _Slot] = {}

        def slot(s: _Slot) -> _Slot:
            t = new.get(id(s))
            if t is None:
                t = new[id(s)] = _Slot()
                if s.sub is not None:  # (a result's slot: it has none itself)
                    t.sub = slot(s.sub)
            return t

        copies: dict[int, _Composed] = {}
        for c in self._order():  # (each piece's inners before it)
            steps = [(tuple(map(slot, reads)), slot(made)) for reads, made in c.steps]
            copies[id(c)] = _Composed([slot(s) for s in c.leaves], steps, [copies[id(i)] for i in c.inners])
        return copies[id(self)]

    def _order(self) -> list[_Composed]:
        """Every piece, in the order their steps run: each piece's inners (the last merged
        first, each with its own inners before it), then its own steps. No recursion: a
        chain of a thousand products is a thousand deep."""
        order: list[_Composed] = []
        stack: list[tuple[_Composed, bool]] = [(self, False)]
        while stack:
            c, expanded = stack.pop()
            if expanded:
                order.append(c)
                continue
            stack.append((c, True))
            stack.extend((i, False) for i in c.inners)  # (popped last merged first)
        return order

    def flat_path(self) -> tuple[tuple[int, ...], ...]:
        """The opt_einsum path: positions into the operands left, each step's result
        appended. A Fenwick tree counts the operands left before each one, so the whole
        path takes n log n steps, not a list search per position."""
        n = len(self.leaves)
        key = {id(s): i for i, s in enumerate(self.leaves)}  # operands 0..n-1, then results
        order = self._order()
        total = n + sum(len(c.steps) for c in order)
        tree = [0] * (total + 1)

        def add(i: int, d: int) -> None:
            i += 1
            while i <= total:
                tree[i] += d
                i += i & -i

        def before(i: int) -> int:
            count = 0
            while i > 0:
                count += tree[i]
                i -= i & -i
            return count

        for i in range(n):
            add(i, 1)
        made = n
        path = []
        for c in order:
            for reads, result in c.steps:
                keys = []
                for s in reads:
                    while s.sub is not None:
                        s = s.sub
                    keys.append(key[id(s)])
                path.append(tuple(before(i) for i in keys))
                for i in keys:
                    add(i, -1)
                key[id(result)] = made
                add(made, 1)
                made += 1
        return tuple(path)


def merge_path(
    outer: tuple[tuple[int, ...], ...], n_outer: int, k: int, inner: tuple[tuple[int, ...], ...], n_inner: int
) -> tuple[tuple[int, ...], ...]:
    """The path of the einsum `merge_spec` makes: the inner einsum's path on its operands (now at
    positions k .. k + n_inner - 1), then the outer one's, its operand k being the inner result.

    Both are opt_einsum paths (positions into the list of operands left, each step's result
    appended). A one-operand inner einsum's step is dropped: the merged contraction does its
    transposing or summing in the outer steps that read its operand. (`merge_einsums` composes
    a merged tree's pieces this way, once, at its root: `_Composed`.)
    """
    composed = _Composed.of(outer, n_outer)
    composed.splice(k, _Composed.of(inner, n_inner))
    return composed.flat_path()


def _is_permutation(e: Equation) -> bool:
    """A one-operand einsum that only reorders axes: merging it duplicates no work."""
    if e.prim is not einsum_p or len(e.inputs) != 1:
        return False
    spec, out = e.params["inputs"][0], e.params["output"]
    return unique(spec) == spec and sorted(spec) == sorted(out)


def _inner_einsum(a: Atom, e: Equation, rw: _Rewriter) -> Equation | None:
    """The einsum computing operand `a` of einsum `e`, if it may be merged into `e`.

    It must be read by `e` alone (or only transpose and be read only by
    einsums, or be read only by `e`, at several positions, and cost little: see
    `_cheap_to_repeat`), and compute in `e`'s arithmetic: a boolean einsum's sums
    are ORs, which do not merge into a numeric one's sums, and a float32 einsum's
    products, rounded to float32, would be computed in double inside a float64 one
    (a real einsum merges into a complex one of its precision: the same numbers).
    """
    if not isinstance(a, str):
        return None
    inner = rw.producer.get(a)
    if inner is None or inner.prim is not einsum_p:
        return None
    if not (
        rw.alone(a)
        or (_is_permutation(inner) and a in rw.einsum_only)
        or (a not in rw.outputs and rw.uses[a] == e.inputs.count(a) and _cheap_to_repeat(inner, e, rw))
    ):
        return None
    same = inner.dtype == e.dtype or (
        inner.dtype.kind == "f" and e.dtype.kind == "c" and 2 * inner.dtype.itemsize == e.dtype.itemsize
    )
    return inner if same else None


def _cheap_to_repeat(inner: Equation, e: Equation, rw: _Rewriter) -> bool:
    """Whether computing `inner` once more for each time `e` reads it costs little: its operands'
    and result's elements are fewer than an eighth of `e`'s operands' (a product of a few small
    tensors inside a network, which a shared-subexpression pass made one value)."""
    size = sum(math.prod(rw.aval(x)[0]) for x in inner.inputs) + math.prod(inner.shape)
    return 8 * size * e.inputs.count(inner.output) <= sum(math.prod(rw.aval(x)[0]) for x in e.inputs)


def _path_of(e: Equation, rw: _Rewriter) -> tuple[tuple[int, ...], ...]:
    """The path `e` follows: its given one, or the one its strategy finds."""
    return einsum_path(e.params, tuple(rw.aval(x)[0] for x in e.inputs))


@dataclasses.dataclass
class _Merging:
    """What `merge_einsums` keeps between its two walks: the merged einsums' paths as trees
    (by output), the strategies of those no given path reached (see `_merge_rule`), and the
    positions of the einsum results each declined (the only operands worth a second look
    once it is spliced into another: a chain's merges look at two operands each, not all);
    how many of an einsum's reads were spliced (`spliced`: at all of them, it is retracted);
    and each merged einsum's letters (`letters`, handed to `merge_spec` when it is spliced)."""

    composed: dict[str, _Composed] = dataclasses.field(default_factory=dict)
    strategies: dict[str, str] = dataclasses.field(default_factory=dict)
    declined: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    spliced: Counter[str] = dataclasses.field(default_factory=Counter)
    letters: dict[str, set[str]] = dataclasses.field(default_factory=dict)

    def of(self, e: Equation, rw: _Rewriter) -> _Composed:
        """The path of einsum `e` as a tree (its own: a fresh one, if `e` was never merged)."""
        c = self.composed.get(e.output)
        return _Composed.of(_path_of(e, rw), len(e.inputs)) if c is None else c


def _merge_rule(e: Equation, rw: _Rewriter, m: _Merging) -> Result:
    """Splice into einsum `e` each einsum operand it may absorb (see `_inner_einsum`), along
    both einsums' paths (the inner one's, then the outer's: `_Composed`, made a path by
    `_merged_path` once the walk is done). `m.strategies` records the merged einsums that no
    given path reached (an einsum staged with an explicit path, the user's or cotengra's), by
    output: their strategy, for `_merged_path`."""
    if e.prim is not einsum_p:
        return None
    specs: tuple[str, ...] = tuple(e.params["inputs"])
    output: str = e.params["output"]
    operands = list(e.inputs)
    composed: _Composed | None = None  # (made at the first merge: most merge nothing)
    given = isinstance(e.params.get("optimize"), tuple)
    letters: set[str] | None = None  # (every letter of the einsum merged so far)
    todo = list(range(len(operands)))  # positions to look at, ascending
    declined: list[int] = []  # positions of einsum results not merged
    while todo:
        k = todo.pop(0)
        a = operands[k]
        inner = _inner_einsum(a, e, rw)
        if inner is None:
            made_by = rw.producer.get(a) if isinstance(a, str) else None
            if made_by is not None and made_by.prim is einsum_p:
                declined.append(k)
            continue
        if composed is None:
            composed = m.of(e, rw)
        piece = m.of(inner, rw)
        alone = rw.alone(a)
        composed.splice(k, piece if alone else piece.copy())
        m.spliced[inner.output] += 1
        if m.spliced[inner.output] == rw.uses[inner.output] and inner.output not in rw.outputs:
            rw.retract(inner.output)  # (read nowhere now: its many operands left in no later walk)
        if inner.output not in m.strategies:  # (a merged one's path was composed, not given)
            given = given or inner.output in m.composed or isinstance(inner.params.get("optimize"), tuple)
        if letters is None:
            letters = set("".join(specs)) | set(output)
        inner_letters = m.letters.pop(inner.output, None) if alone else None
        specs, output, letters = merge_spec(
            specs, output, k, inner.params["inputs"], inner.params["output"], letters, inner_letters
        )
        operands[k : k + 1] = inner.inputs
        # the spliced operands may merge in turn: those the inner einsum declined (the rest
        # it merged or cannot: not einsum results), at their positions here
        again = m.declined.get(inner.output, range(len(inner.inputs)))
        todo = [k + j for j in again] + [j + len(inner.inputs) - 1 for j in todo]
    if composed is None:
        return None
    params = _einsum_params(e, specs, output)
    if not given or params["memory_limit"] is not None:
        m.strategies[e.output] = params["optimize"]
    params["optimize"] = composed  # (a path once the walk is done: `_merged_path`)
    m.composed[e.output] = composed
    m.declined[e.output] = declined
    if letters is not None:
        m.letters[e.output] = letters
    return [dataclasses.replace(e, params=params, inputs=operands)]


def _merged_path(e: Equation, rw: _Rewriter, m: _Merging) -> Result:
    """A merged einsum's path: its pieces' composed once, or, where no given path reached it,
    its strategy's plan of the whole network if that costs fewer operations; one with a memory
    limit follows the plan made within the limit (the pieces' intermediates may be larger).
    Asked once per merged einsum, not at each of the merges that made it (one merged into
    another einsum since was retracted by the first walk)."""
    composed = m.composed.get(e.output) if e.prim is einsum_p else None
    if composed is None:
        return None
    path = composed.flat_path()
    strategy = m.strategies.get(e.output)
    if strategy is not None:
        specs, output = e.params["inputs"], e.params["output"]
        shapes = tuple(rw.aval(x)[0] for x in e.inputs)
        planned = einsum_path({**e.params, "optimize": strategy}, shapes)
        if e.params["memory_limit"] is not None or path_flops(specs, output, shapes, planned) < path_flops(
            specs, output, shapes, path
        ):
            path = planned
    return [dataclasses.replace(e, params={**e.params, "optimize": path})]


def merge_einsums(graph: Graph) -> Graph:
    """Merge each einsum read by one einsum alone into it: one multi-operand einsum.

    Contraction is associative, so contracting the inner einsum's operands
    inside the outer one gives the same sums. The merged einsum follows the two
    einsums' paths, the inner one's first (`merge_path`), so it never costs more
    than they did; where no piece was given a path, it follows instead the plan
    of the outer einsum's strategy for the whole merged network when that is
    cheaper (one plan of the whole may beat the order the program was written or
    differentiated in, and a greedy plan of a large network may be far worse
    than the order a library contracted it in); under a memory limit, the plan
    made within it. An einsum read twice or returned as an output is not merged
    (that would redo its work), except a pure transpose read only by einsums,
    which is merged into every reader since reading it in another order costs
    nothing, and a small product read only by one einsum, at several places
    (`_cheap_to_repeat`).

    Two walks: the first splices (the paths kept as trees, `_Composed`), the second
    makes each surviving merged einsum's path once. The work grows with the network, not
    its square, for a network contracted one product at a time (quimb's, cotengra's).
    """
    m = _Merging()
    merged = rewrite(graph, lambda e, rw: _merge_rule(e, rw, m))
    return rewrite(merged, lambda e, rw: _merged_path(e, rw, m)) if m.composed else merged


# -- the pipeline ----------------------------------------------------------------------------------

PIPELINE: tuple[Callable[[Graph], Graph], ...] = (
    dce,
    simplify,
    algebra,
    cse,
    fold_spreads,
    merge_einsums,
    dce,
)
"""One round of `optimize`: clear the dead first (so their reads block no fold), then simplify,
fold scalings and signs, share, fold spreads and merge, and clear what those left dead."""


def optimize(graph: Graph, max_rounds: int = 8) -> Graph:
    """Run the `PIPELINE` until the program stops changing (at most `max_rounds` rounds).

    One fold may enable another (a spread folded into an add leaves an add of
    a constant that `simplify` turns into a literal), so the passes repeat; the
    program shrinks in every round that changes it, and the cap bounds the rest.
    """
    for _ in range(max_rounds):
        new = graph
        for p in PIPELINE:
            new = p(new)
        if _same_text(new, graph):
            return new
        graph = new
    return graph


def _same_text(new: Graph, old: Graph) -> bool:
    """Whether `new` prints as `old` (the test `optimize` stops on: ``str(new) == str(old)``),
    without printing either whole. The passes hand on an equation they leave alone as the
    same object, so only the equations they rebuilt are printed (an einsum of a thousand
    operands takes ~0.1 s); each prints on one line (no name, letter or parameter holds a line
    break), so programs of different lengths differ."""
    if len(new.equations) != len(old.equations) or new.inputs != old.inputs or new.consts != old.consts:
        return False
    if [str(o) for o in new.outputs] != [str(o) for o in old.outputs]:
        return False
    return all(a is b or str(a) == str(b) for a, b in zip(new.equations, old.equations))


# -- buffer reuse ------------------------------------------------------------------------------------


def _fresh(e: Equation) -> bool:
    """Whether `e` returns an array of its own (not a view, not an operand, not a numpy scalar):
    its primitive declares the result fresh (`Primitive.aliasing`)."""
    if e.shape == ():
        return False  # a ufunc on 0-d arrays returns a numpy scalar: no buffer to write into
    return e.prim.result_aliasing(e.params, len(e.inputs)) == "fresh"


def _last_uses(graph: Graph) -> dict[str, int]:
    """The index of the last equation reading each variable (outputs: past the end)."""
    last: dict[str, int] = {}
    for i, e in enumerate(graph.equations):
        for a in e.inputs:
            if isinstance(a, str):
                last[a] = i
    for o in graph.outputs:
        if isinstance(o, str):
            last[o] = len(graph.equations)
    return last


def plan_buffers(graph: Graph) -> dict[int, str]:
    """For each equation a code generator may run as ``ufunc(..., out=buffer)``: the operand to overwrite.

    Equation i (an elementwise primitive whose kernel is a numpy ufunc) may
    write its result into the memory of an operand `x` when `x` has exactly the
    result's shape and dtype, `x` was made by an operation that declares its result
    fresh (`Primitive.aliasing`: an elementwise op, a cast, a contraction of two or more
    operands, a fused kernel's output: never a program input or constant, never a view such
    as a reshape, an index, a broadcast or a transpose), and no variable sharing
    that memory (`x`, views of it) is read after equation i or returned. A
    ufunc gives the right result when an operand overlaps its output (numpy
    copies where the overlap needs it), so `x` may also be read by equation i
    itself through another operand. The result then owns that memory, and may
    give it on in turn.

    Returns:
        ``{equation index: operand variable}``; the program is unchanged.
    """
    last = _last_uses(graph)
    external = frozenset({"<external>"})  # inputs' and constants' memory is never written
    buffers: dict[str, frozenset[str]] = {n: external for n, _ in graph.inputs + graph.consts}
    readers: dict[str, list[str]] = {}  # buffer -> the variables that may read it
    owner: dict[str, str] = {}  # buffer -> the variable holding all of it, writable
    plan: dict[int, str] = {}
    for i, e in enumerate(graph.equations):
        donor = _donor(i, e, graph, buffers, readers, owner, last)
        if donor is not None:
            plan[i] = donor
            mine = buffers[donor]
        elif _fresh(e):
            mine = frozenset({e.output})
        else:  # it may share memory with any operand
            mine = frozenset().union(*(buffers[a] for a in e.inputs if isinstance(a, str)))
        buffers[e.output] = mine
        if donor is not None or _fresh(e):
            owner[next(iter(mine))] = e.output
        for b in mine:
            readers.setdefault(b, []).append(e.output)
    return plan


def _donor(
    i: int,
    e: Equation,
    graph: Graph,
    buffers: dict[str, frozenset[str]],
    readers: dict[str, list[str]],
    owner: dict[str, str],
    last: dict[str, int],
) -> str | None:
    """The first operand whose memory equation i may write its result into (see `plan_buffers`)."""
    if not e.prim.accepts_out or e.shape == ():
        return None
    for a in e.inputs:
        if not isinstance(a, str) or graph.avals[a] != (e.shape, e.dtype) or len(buffers[a]) != 1:
            continue
        (b,) = buffers[a]
        if owner.get(b) == a and all(last.get(v, -1) <= i for v in readers[b]):
            return a
    return None
