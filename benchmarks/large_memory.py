"""Peak memory and time of a sliced value-and-gradient against the memory limit (issue 11).

    python -m benchmarks.large_memory                  # n = 32, prints a table
    python -m benchmarks.large_memory --n 48 --plot docs/large-networks-memory.png

The network is the tetrahedron ``abc,ade,bdf,cef->`` (every pairwise path has an
``n**4`` intermediate). For the unsliced contraction and for limits of 1/4,
1/8, 1/16 and 1/32 of that intermediate, it measures tracemalloc's peak during
one ``ea.value_and_grad`` call of all four operands (the operands are allocated
before, so they are not counted; the gradients are), and the median time of the
sliced forward and of value-and-gradient. The plot shows the peak against the
limit, with the gradients' size and "gradients + 2 x limit" for reference.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
import tracemalloc

import numpy as np

import einad as ea

try:  # optional: only --plot needs it
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    plt = None

EQ = "abc,ade,bdf,cef->"


def _peak(fn) -> int:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    out = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del out
    return peak


def _median(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def measure(n: int, repeats: int = 5) -> list[dict]:
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal((n, n, n)) / n for _ in range(4)]
    full = n**4
    rows = []
    for div in (None, 4, 8, 16, 32):
        limit = None if div is None else full // div
        f = lambda *xs, lim=limit: ea.einsum(EQ, *xs, memory_limit=lim)
        vg = ea.value_and_grad(f, argnums=(0, 1, 2, 3))
        _, info = ea.contract_path(EQ, *ops, memory_limit=limit)
        rows.append(
            {
                "limit": limit,
                "slices": info.n_slices,
                "peak": _peak(lambda vg=vg: vg(*ops)),
                "forward": _median(lambda f=f: f(*ops), repeats),
                "vg": _median(lambda vg=vg: vg(*ops), repeats),
                "grads": sum(x.nbytes for x in ops),
                "full": full,
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    mib = 2**20
    head = f"{'limit (elements)':>17} {'limit':>9} {'slices':>7} {'vg peak':>9} {'(peak-grads)/limit':>19} "
    lines = [head + f"{'forward':>9} {'vg':>9} {'vg/fwd':>7}"]
    for r in rows:
        lim = r["limit"] or r["full"]
        ratio = (r["peak"] - r["grads"]) / (lim * 8)
        lines.append(
            f"{r['limit'] or '-':>17} {lim * 8 / mib:>7.2f}Mi {r['slices']:>7} {r['peak'] / mib:>7.2f}Mi "
            f"{ratio:>19.2f} {r['forward'] * 1e3:>7.1f}ms {r['vg'] * 1e3:>7.1f}ms "
            f"{r['vg'] / r['forward']:>7.2f}"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: str, n: int) -> None:
    if plt is None:
        raise SystemExit("matplotlib is not installed: pip install matplotlib")
    mib = 2**20
    sliced = [r for r in rows if r["limit"]]
    limits = [r["limit"] * 8 / mib for r in sliced]
    grads = rows[0]["grads"] / mib
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=110)
    ax.plot(limits, [r["peak"] / mib for r in sliced], "o-", label="value-and-gradient peak (tracemalloc)")
    ax.plot(limits, [grads + 2 * x for x in limits], "--", color="gray", label="gradients + 2 × limit")
    ax.axhline(grads, color="gray", linestyle=":", label="gradients")
    ax.axhline(rows[0]["peak"] / mib, color="C3", linestyle="-.", label="unsliced peak")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("memory_limit (MiB)")
    ax.set_ylabel("peak (MiB)")
    ax.set_title(f"{EQ}, n = {n}: unsliced intermediate {rows[0]['full'] * 8 / mib:.0f} MiB")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.large_memory", description=__doc__.splitlines()[0]
    )
    ap.add_argument("--n", type=int, default=32, help="index size (default 32: an 8 MiB intermediate)")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls per median")
    ap.add_argument("--plot", metavar="PATH", help="write the PNG (needs matplotlib)")
    args = ap.parse_args(argv)
    rows = measure(args.n, args.repeats)
    print(table(rows))
    if args.plot:
        plot(rows, args.plot, args.n)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
