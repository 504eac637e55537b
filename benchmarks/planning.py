"""How long einad takes to plan a large network (issue 22): a report, no assertion.

    python -m benchmarks.planning              # 250 and 1000 tensors
    python -m benchmarks.planning --quick      # random regular graphs of 50 and 100 tensors, seconds
    python -m benchmarks --planning            # the same section after the suite's table

For each network, cotengra's greedy path, and then, each in a fresh Python process (so that
no cache filled by another measurement helps; einad's modules are warmed up first on a
two-operand einsum, as the suite's `Engine.warm_up` does):

* ``lower``: ``ea.jit(ea.value_and_grad(f, argnums=all)).lower(*xs)``, staging (which runs the
  contraction once on the operands), optimizing and compiling the program;
* ``pairwise``: the same for an ``f`` that contracts the network one two-operand einsum per
  step of the path, as quimb and cotengra do, which ``ea.jit`` merges back into one network
  (`passes.merge_einsums`): how the merging grows with the tensors;
* ``1st vg``: the first eager ``ea.value_and_grad(f, argnums=all)(*xs)`` call, and ``2nd vg``, the
  second one in the same process: the difference is what einad plans and caches on a first call.

The operands have bond 1 (every index of size 1), so contracting costs next to nothing and
the times are planning and Python per step. The path is found on the network's bond-2 sizes:
with every size 1 the greedy scores tie and it builds intermediates of hundreds of indices.
(At bond 2 no engine could run these contractions: the greedy intermediates of the random
graphs have 2^49 and 2^222 elements.)

The networks: random 3-regular graphs (``cotengra.utils.randreg_equation(n, 3)``) of 250 and
1000 tensors, as issue 22 asks, and 2D lattices of 10x25 and 10x100 tensors. On numpy, einad
runs each pairwise step as one ``numpy.einsum``, which takes at most 52 distinct indices, and
the greedy paths of these random graphs have wider steps (`widest_step`): their rows show
einad's error; the lattices (widest step 20) show how planning grows with the tensor count.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter

REQUIRES = ("cotengra", "networkx")  # networkx makes cotengra's random regular graphs
FULL = ["randreg:250", "randreg:1000", "lattice:10x25", "lattice:10x100"]
QUICK = ["randreg:50", "randreg:100"]  # (one family: the suite's quick run times it in 6 processes)
TIMEOUT_S = 300  # per measurement (one process)


def network(spec: str):
    """cotengra's ``(inputs, output, shapes, size_dict)`` for ``randreg:N`` or ``lattice:AxB``,
    every index of size 2 (the path search sees these sizes; the operands get size 1)."""
    import cotengra as ctg

    kind, _, size = spec.partition(":")
    if kind == "randreg":
        return ctg.utils.randreg_equation(int(size), 3, d_min=2, d_max=2, seed=0)
    if kind == "lattice":
        return ctg.utils.lattice_equation([int(d) for d in size.split("x")], d_min=2, d_max=2)
    raise ValueError(f"unknown network {spec!r}: randreg:N or lattice:AxB")


def label(spec: str) -> str:
    kind, _, size = spec.partition(":")
    if kind == "randreg":
        return f"randreg_equation({size}, 3)"
    return f"lattice_equation([{size.replace('x', ', ')}])"


def greedy_path(con) -> list[tuple[int, int]]:
    """cotengra's greedy path (deterministic), in opt_einsum's linear format."""
    import cotengra as ctg

    path = ctg.array_contract_path(con.inputs, con.output, con.size_dict, optimize="greedy", cache=False)
    return [tuple(int(i) for i in step) for step in path]


def widest_step(inputs, output, path) -> int:
    """The most distinct indices any pairwise step of `path` touches (both operands together)."""
    terms = [frozenset(t) for t in inputs]
    holders = Counter(ix for t in terms for ix in t)  # terms holding each index, the output counted
    holders.update(output)
    widest = 0
    for step in path:
        a, b = (terms[i] for i in step)
        for i in sorted(step, reverse=True):
            terms.pop(i)
        widest = max(widest, len(a | b))
        holders.subtract(a)
        holders.subtract(b)
        kept = frozenset(ix for ix in a | b if holders[ix] > 0)  # another term or the output holds it
        holders.update(kept)
        terms.append(kept)
    return widest


# -- one measurement, in its own process -------------------------------------------------------


def pairwise_contraction(inputs, output, path):
    """A function contracting the network one two-operand ``ea.einsum`` per step of `path`, as
    quimb and cotengra do (each step keeps the indices another term or the output holds: the
    steps `einad.subscripts.pairwise_steps` names)."""
    import einad as ea
    from einad.subscripts import pairwise_steps

    words = tuple("".join(t) for t in inputs)  # (cotengra's terms are sequences of indices)
    steps = pairwise_steps(words, "".join(output), tuple(tuple(p) for p in path))

    def contract(*ops):
        arrays = list(ops)
        for positions, ins, out in steps:
            picked = [arrays[i] for i in positions]
            for i in sorted(positions, reverse=True):
                del arrays[i]
            arrays.append(ea.einsum(",".join(ins) + "->" + out, *picked))
        (result,) = arrays
        return result

    return contract


def measure(spec: str, mode: str) -> dict:
    """Time `mode` (``lower``, ``pairwise`` or ``eager``) on network `spec`; the child process's
    work. ``pairwise`` lowers the gradient of the network contracted one einsum per step."""
    import numpy as np

    import einad as ea

    from .cases import network_equation

    con = network(spec)
    path = greedy_path(con)
    eq = network_equation(con.inputs, con.output)
    xs = [np.ones([1] * len(term)) for term in con.inputs]
    argnums = tuple(range(len(xs)))

    def f(*ops):
        return ea.einsum(eq, *ops, optimize=path)

    # warm einad's modules up on another einsum, so that no one-time start-up is counted
    small = ea.value_and_grad(lambda a, b: ea.einsum("ij,jk->", a, b), argnums=(0, 1))
    small(np.ones((2, 2)), np.ones((2, 2)))
    ea.jit(small)(np.ones((2, 2)), np.ones((2, 2)))
    out: dict = {}
    try:
        if mode in ("lower", "pairwise"):
            g = f if mode == "lower" else pairwise_contraction(con.inputs, con.output, path)
            staged = ea.jit(ea.value_and_grad(g, argnums=argnums))
            t0 = time.perf_counter()
            staged.lower(*xs)
            out[f"{mode}_s"] = time.perf_counter() - t0
        else:
            vg = ea.value_and_grad(f, argnums=argnums)
            for key in ("first_vg_s", "second_vg_s"):
                t0 = time.perf_counter()
                vg(*xs)
                out[key] = time.perf_counter() - t0
    except Exception as err:
        out["error"] = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return out


def _in_child(spec: str, mode: str) -> dict:
    """`measure` in a fresh interpreter; its one line of JSON, or the reason there is none."""
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "benchmarks.planning", "--measure", spec, mode],
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {TIMEOUT_S} s"}
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"error": f"exit status {proc.returncode}: {tail}"}
    return json.loads(lines[-1])


# -- the report ------------------------------------------------------------------------------


def run(quick: bool) -> list[dict]:
    """One record per network: its size, its path's search time and widest step, the timings."""
    records = []
    for spec in QUICK if quick else FULL:
        con = network(spec)
        t0 = time.perf_counter()
        path = greedy_path(con)
        search = time.perf_counter() - t0
        record = {
            "network": label(spec),
            "tensors": len(con.inputs),
            "indices": len(con.size_dict),
            "path_search_s": search,
            "widest_step": widest_step(con.inputs, con.output, path),
        }
        for mode in ("lower", "pairwise", "eager"):
            got = _in_child(spec, mode)
            if "error" in got:
                record[f"{mode}_error"] = got.pop("error")
            record.update(got)
        records.append(record)
    return records


def _secs(x) -> str:
    return "-" if x is None else (f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s")


def table(records: list[dict]) -> str:
    lines = [
        (
            "planning scale (issue 22): einad's value-and-gradient of a large network, greedy path, every "
            "index of size 1 (the contraction costs next to nothing); each timing in a fresh process"
        ),
        (
            f"  {'network':<32}{'tensors':>8}{'indices':>8}{'widest step':>12}{'path':>9}"
            f"{'jit lower':>11}{'pairwise':>10}{'1st vg':>10}{'2nd vg':>10}"
        ),
    ]
    for r in records:
        lines.append(
            f"  {r['network']:<32}{r['tensors']:>8}{r['indices']:>8}{r['widest_step']:>12}"
            f"{_secs(r['path_search_s']):>9}{_secs(r.get('lower_s')):>11}{_secs(r.get('pairwise_s')):>10}"
            f"{_secs(r.get('first_vg_s')):>10}{_secs(r.get('second_vg_s')):>10}"
        )
        errors = {r.get(f"{mode}_error") for mode in ("lower", "pairwise", "eager")} - {None}
        lines.extend(f"    {e}" for e in sorted(errors))
    lines.append(
        "  path = cotengra's greedy search; jit lower = ea.jit(ea.value_and_grad(f)).lower(*xs); "
        "pairwise = the same, f contracting one two-operand einsum per step (quimb's way), merged back "
        "into one network by ea.jit; 1st vg, 2nd vg = eager ea.value_and_grad(f)(*xs), the first and "
        "second call"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.planning", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--quick",
        action="store_true",
        help="random regular graphs of 50 and 100 tensors instead of 250 and 1000 (and lattices)",
    )
    ap.add_argument("--json", metavar="PATH", help="write the records as JSON")
    ap.add_argument("--measure", nargs=2, metavar=("NETWORK", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.measure:  # the child process of one measurement
        print(json.dumps(measure(*args.measure)))
        return 0
    records = run(args.quick)
    print(table(records))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
