"""`einad explain`: what einad does with one einsum, as text.

For subscripts and operand shapes it prints the canonical subscripts, the
opt_einsum contraction path with its cost and the pairwise steps einad runs, the
cost of the gradient (and, under a memory limit, the slicing: `slicing.plan`), and
for each operand the einsum that gives its VJP (the permuted subscripts) and its
JVP (the same subscripts with the tangent in that operand's place). With three
operands or more, a traced einsum is bound as its pairwise steps, so the reverse
pass runs each step's two VJPs, last step first: that backward pass is listed too.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .aliases import MemoryLimit
from .errors import EinsumError
from .rules.einsum import traced_steps
from .rules.linear import normalize_optimize
from .slicing import check_limit, describe, plan
from .subscripts import ellipsis_labels, parse, vjp_spec


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
    memory_limit = check_limit(memory_limit)
    normalize_optimize(optimize)  # an unknown strategy is an error for any number of operands, as in einsum
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
    names = [chr(ord("A") + k) for k in range(len(shapes))]
    steps: list[tuple[str, tuple[str, ...], tuple[str, ...], str, str]] = []
    if len(shapes) >= 2:
        path, slices = plan(spec.inputs, spec.output, squeezed, optimize, memory_limit)
        info = describe(
            spec.inputs, spec.output, squeezed, path, slices, memory_limit, ellipsis_labels(subscripts, spec)
        )
        lines.append(f"contraction path ({optimize!r}): {[tuple(p) for p in path]}")
        if len(shapes) >= 3:  # the steps einad binds, and the names of their operands
            work = list(names)
            planned = traced_steps(spec.inputs, spec.output, tuple(squeezed), optimize)
            for n, (positions, ins, out) in enumerate(planned, 1):
                picked = tuple(work[p] for p in positions)
                for p in sorted(positions, reverse=True):
                    del work[p]
                result = "out" if n == len(planned) else f"T{n}"
                work.append(result)
                steps.append((",".join(ins) + "->" + out, ins, picked, out, result))
                lines.append(f"  step {n}: {steps[-1][0]:<24} ({', '.join(picked)} -> {result})")
        else:
            lines.append(f"  step 1: {spec.text}")
        lines.append(
            f"  FLOPs {int(info.opt_cost):,} (naive {int(info.naive_cost):,}), "
            f"largest intermediate {int(info.largest_intermediate):,} elements"
        )
        if len(shapes) > 2 or memory_limit is not None:  # a network: what its gradient costs
            lines.extend(info.summary())
    else:
        lines.append("contraction path: one operand, one numpy.einsum call")
    for k, (s, name) in enumerate(zip(spec.inputs, names)):
        text, kept, target = vjp_spec(spec.inputs, spec.output, k)
        others = [n for j, n in enumerate(names) if j != k]
        lines.append("")
        lines.append(f"operand {k} ({name}): {s or 'scalar'}  {_shape(squeezed[k])}")
        lines.append(f"  VJP  {text:<24} (cotangent{''.join(', ' + o for o in others)})")
        lines += _spread_note(kept, target, "       ")
        jvp_ops = [("d" + n if j == k else n) for j, n in enumerate(names)]
        lines.append(f"  JVP  {spec.text:<24} ({', '.join(jvp_ops)})")
    if steps:
        lines.append("")
        lines.append("backward pass (one sweep, planned with the forward: VJPs last step first;")
        lines.append("the N-operand VJPs above are the same algebra, run as these pairwise einsums)")
        for n, (text, ins, picked, out, result) in reversed(list(enumerate(steps, 1))):
            lines.append(f"  step {n}: {text}")
            seed = "cotangent" if result == "out" else "d" + result
            for k, name in enumerate(picked):
                vjp, kept, target = vjp_spec(ins, out, k)
                lines.append(f"    d{name:<4} {vjp:<24} ({seed}, {picked[1 - k]})")
                lines += _spread_note(kept, target, "          ")
    return "\n".join(lines)


def _spread_note(kept: str, target: str, indent: str) -> list[str]:
    """The `spread` a VJP needs after its einsum, as a line (none when it needs none)."""
    if kept == target:
        return []
    notes = []
    rep = sorted({c for c in target if target.count(c) > 1})
    only = sorted({c for c in target if c not in kept and c not in rep})
    if rep:
        notes.append("onto the diagonal of " + ", ".join(repr(c) for c in rep))
    if only:
        notes.append("broadcast along " + ", ".join(repr(c) for c in only))
    return [f"{indent}then spread {kept or 'scalar'} -> {target}: {'; '.join(notes)}"]


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
        help="largest intermediate allowed, in elements (-1: none): slice the contraction when no path fits",
    )
    args = parser.parse_args(argv)
    try:
        print(explain(args.subscripts, parse_shapes(args.shapes), args.optimize, args.memory_limit))
    except EinsumError as err:
        print(f"einad explain: error: {err}", file=sys.stderr)
        return 2
    return 0
