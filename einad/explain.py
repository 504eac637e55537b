"""`einad explain`: what einad does with one einsum, as text.

For subscripts and operand shapes it prints the canonical subscripts, the
opt_einsum contraction path with its cost, the cost of the gradient (and, under
a memory limit, the slicing: `slicing.plan`), and for each operand the einsum
that gives its VJP (the permuted subscripts) and its JVP (the same subscripts
with the tangent in that operand's place).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .errors import EinsumError
from .slicing import MemoryLimit, describe, plan
from .subscripts import parse, vjp_spec


def parse_shapes(text: str) -> tuple[tuple[int, ...], ...]:
    """``"3x4,4x5"`` -> ((3, 4), (4, 5)); an empty item (or ``()``) is a scalar."""
    shapes: list[tuple[int, ...]] = []
    for item in text.split(","):
        item = item.strip()
        if item in ("", "()", "scalar"):
            shapes.append(())
            continue
        try:
            dims = tuple(int(d) for d in item.lower().split("x"))
        except ValueError:
            raise EinsumError(f"cannot read the shape {item!r}: write dimensions like 3x4") from None
        if any(d < 0 for d in dims):
            raise EinsumError(f"shape {item!r} has a negative dimension")
        shapes.append(dims)
    return tuple(shapes)


def _shape(s: Sequence[int]) -> str:
    return "(" + ", ".join(str(d) for d in s) + ("," if len(s) == 1 else "") + ")"


def explain(
    subscripts: str, shapes: Sequence[Sequence[int]], optimize: str = "auto", memory_limit: MemoryLimit = None
) -> str:
    """The explanation as a string; raises `EinsumError` for bad subscripts or shapes."""
    shapes = tuple(tuple(int(d) for d in s) for s in shapes)
    spec = parse(subscripts, shapes)
    squeezed = tuple(tuple(d for a, d in enumerate(s) if a not in ax) for s, ax in zip(shapes, spec.squeeze))
    sizes = dict(spec.sizes)
    out_shape = tuple(sizes[c] for c in spec.output)
    lines = [
        f"einsum      {subscripts}",
        f"normalized  {spec.text}",
        f"shapes      {', '.join(_shape(s) for s in shapes)} -> {_shape(out_shape)}",
    ]
    for k, ax in enumerate(spec.squeeze):
        if ax:
            lines.append(
                f"            operand {k}: size-1 axes {list(ax)} broadcast (squeezed before contracting)"
            )
    lines.append("")
    if len(shapes) >= 2:
        path, slices = plan(spec.inputs, spec.output, squeezed, optimize, memory_limit)
        info = describe(spec.inputs, spec.output, squeezed, path, slices, memory_limit)
        lines.append(f"contraction path ({optimize!r}): {[tuple(p) for p in path]}")
        for n, step in enumerate(info.contraction_list, 1):
            lines.append(f"  step {n}: {step[2]}")
        lines.append(
            f"  FLOPs {int(info.opt_cost):,} (naive {int(info.naive_cost):,}), "
            f"largest intermediate {int(info.largest_intermediate):,} elements"
        )
        if len(shapes) > 2 or memory_limit is not None:  # a network: what its gradient costs
            lines.extend(info.summary())
    else:
        lines.append("contraction path: one operand, one numpy.einsum call")
    names = [chr(ord("A") + k) for k in range(len(shapes))]
    for k, (s, name) in enumerate(zip(spec.inputs, names)):
        text, kept, target = vjp_spec(spec.inputs, spec.output, k)
        others = [n for j, n in enumerate(names) if j != k]
        lines.append("")
        lines.append(f"operand {k} ({name}): {s or 'scalar'}  {_shape(squeezed[k])}")
        lines.append(f"  VJP  {text:<24} (cotangent{''.join(', ' + o for o in others)})")
        if kept != target:
            notes = []
            rep = sorted({c for c in target if target.count(c) > 1})
            only = sorted({c for c in target if c not in kept and c not in rep})
            if rep:
                notes.append("onto the diagonal of " + ", ".join(repr(c) for c in rep))
            if only:
                notes.append("broadcast along " + ", ".join(repr(c) for c in only))
            lines.append(f"       then spread {kept or 'scalar'} -> {target}: {'; '.join(notes)}")
        jvp_ops = [("d" + n if j == k else n) for j, n in enumerate(names)]
        lines.append(f"  JVP  {spec.text:<24} ({', '.join(jvp_ops)})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m einad`` and the ``einad`` console script."""
    parser = argparse.ArgumentParser(prog="einad", description="einad command-line tools")
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("explain", help="show an einsum's path and its VJP/JVP einsums")
    ex.add_argument("subscripts", help='einsum subscripts, e.g. "ij,jk->ik"')
    ex.add_argument("--shapes", required=True, help="operand shapes, e.g. 3x4,4x5 (empty item: a scalar)")
    ex.add_argument("--optimize", default="auto", help="opt_einsum path strategy (default: auto)")
    ex.add_argument(
        "--memory-limit",
        type=int,
        default=None,
        metavar="N",
        help="largest intermediate allowed, in elements: slice the contraction when no path fits",
    )
    args = parser.parse_args(argv)
    try:
        print(explain(args.subscripts, parse_shapes(args.shapes), args.optimize, args.memory_limit))
    except EinsumError as err:
        print(f"einad explain: error: {err}", file=sys.stderr)
        return 2
    return 0
