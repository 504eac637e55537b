"""Sliced contractions as tasks on a dask cluster (issue 24): a report, no assertion.

    python -m benchmarks.cluster              # both parts
    python -m benchmarks.cluster --quick      # n = 6 (216 slices), fewer repetitions and clusters
    python -m benchmarks --cluster            # the same report after the suite's table

Case 10 itself (the tetrahedron under a memory limit) runs in the suite's table on the
engines ``einad-threads-2``, ``einad-cluster-1`` and ``einad-cluster-2``; this report adds
what the table cannot show:

* **Scheduling overhead per task.** The value and gradient of a tetrahedron (n = 8) cut into
  512 slices of about a tenth of a millisecond each, on a ``LocalCluster`` of two single-threaded worker
  processes, with the slices cut into more and more tasks (``einad.cluster.SHARES_PER_THREAD``
  = 1, 2, 4, 8, 16: 10 to 136 batches, each call also the one sum of the two workers' partial
  results and one task to finish). The slope of the call's median time against its task count
  is what one more task costs; the intercept is the call's fixed cost (the scatter, the
  result, letting go).
* **Tasks and reduction depth as the cluster grows.** One value and gradient on clusters of
  1, 2, 4, 8 and 16 single-threaded workers (threads in this process: ``LocalCluster(processes=
  False)``, so a 16-worker cluster costs no 16 processes), with dask's task stream recorded:
  the batches, the sums and the depth of the tree of sums as they ran (the depth read off
  the sums' keys), next to what ``einad.cluster.layout`` predicts.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import numpy as np

REQUIRES = ("distributed",)
EQ = "abc,ade,bdf,cef->"
N, LIMIT = 8, 8  # the n = 8 tetrahedron under a limit of 8 elements: 512 slices
QUICK_N, QUICK_LIMIT = 6, 6  # 216 slices
WORKERS = (1, 2, 4, 8, 16)
QUICK_WORKERS = (1, 4, 16)


def _sizes(quick: bool) -> tuple[int, int]:
    return (QUICK_N, QUICK_LIMIT) if quick else (N, LIMIT)


def _operands(n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(24)
    return [rng.standard_normal((n, n, n)) for _ in range(4)]


def _quiet() -> None:
    for name in ("distributed", "tornado"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _depth(keys: list[str]) -> int:
    """The depth of the tree of sums, from the keys of the sums that ran
    (``einad-sum-<token>-<lo>-<hi>``: the sum of the partial results of chains lo to hi - 1)."""
    spans = [tuple(int(x) for x in k.rsplit("-", 2)[1:]) for k in keys]
    if not spans:
        return 0
    leaves = range(max(hi for _, hi in spans))
    return max(sum(1 for lo, hi in spans if lo <= i < hi) for i in leaves)


def overhead(quick: bool = False) -> dict:
    """Per-task and per-call cost of dask scheduling, on slices of next to no work."""
    import distributed

    import einad as ea
    from einad import cluster

    _quiet()
    n, limit = _sizes(quick)
    ops = _operands(n)
    argnums = (0, 1, 2, 3)
    reps = 2 if quick else 15
    per_thread = (1, 2, 4) if quick else (1, 2, 4, 8, 16)
    _, info = ea.contract_path(EQ, *ops, memory_limit=limit)
    local = ea.value_and_grad(lambda *xs: ea.einsum(EQ, *xs, memory_limit=limit), argnums=argnums)
    local(*ops)
    t_local = statistics.median(_times(lambda: local(*ops), reps))
    rows = []
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=0
        ) as lc,
        distributed.Client(lc) as client,
    ):
        vg = ea.value_and_grad(
            lambda *xs: ea.einsum(EQ, *xs, memory_limit=limit, executor=client), argnums=argnums
        )
        saved = cluster.SHARES_PER_THREAD
        try:
            for k in per_thread:
                cluster.SHARES_PER_THREAD = k
                lay = cluster.layout_for(client, info.n_slices)
                with distributed.get_task_stream(client) as stream:
                    vg(*ops)
                ran = len(stream.data)
                times = _times(lambda: vg(*ops), reps)
                rows.append(
                    {
                        "tasks_per_thread": k,
                        "batches": lay.tasks,
                        "tasks": ran,
                        "median_s": statistics.median(times),
                    }
                )
        finally:
            cluster.SHARES_PER_THREAD = saved
    x = np.array([r["tasks"] for r in rows], dtype=float)
    y = np.array([r["median_s"] for r in rows])
    slope, intercept = np.polyfit(x, y, 1)
    return {
        "n": n,
        "slices": info.n_slices,
        "local_s": t_local,
        "rows": rows,
        "per_task_s": float(slope),
        "per_call_s": float(intercept),
    }


def _times(fn, reps: int) -> list[float]:
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def simulate(quick: bool = False) -> list[dict]:
    """Tasks and reduction depth recorded on clusters of 1 to 16 single-threaded workers."""
    import distributed

    import einad as ea
    from einad import cluster

    _quiet()
    n, limit = _sizes(quick)
    ops = _operands(n)
    _, info = ea.contract_path(EQ, *ops, memory_limit=limit)
    out = []
    for w in QUICK_WORKERS if quick else WORKERS:
        with (
            distributed.LocalCluster(
                n_workers=w, threads_per_worker=1, processes=False, dashboard_address=":0", memory_limit=0
            ) as lc,
            distributed.Client(lc) as client,
        ):
            with distributed.get_task_stream(client) as stream:
                ea.grad(lambda *xs: ea.einsum(EQ, *xs, memory_limit=limit, executor=client))(*ops)
            keys = [str(t["key"]) for t in stream.data]
            lay = cluster.layout_for(client, info.n_slices)
            sums = [k for k in keys if k.startswith("einad-sum-")]
            out.append(
                {
                    "workers": w,
                    "slices": info.n_slices,
                    "batches": sum(k.startswith("einad-slices-") for k in keys),
                    "sums": len(sums),
                    "depth": _depth(sums),
                    "other": len(keys) - len(sums) - sum(k.startswith("einad-slices-") for k in keys),
                    "workers_used": len({t["worker"] for t in stream.data}),
                    "largest": lay.batch,
                    "predicted": (lay.tasks, lay.chains - 1, lay.depth),
                }
            )
    return out


def table(report: dict) -> str:
    """The report as text."""
    lines = []
    o = report.get("overhead")
    if o:
        local = o["local_s"] * 1e3
        lines += [
            (
                f"scheduling overhead (value and gradient of {EQ} at n = {o['n']}, {o['slices']} slices of "
                "next to no work, LocalCluster of 2 single-threaded worker processes; "
                f"in-process: {local:.1f} ms):"
            ),
            f"  {'shares/thread':>13}{'batches':>9}{'tasks run':>11}{'median':>11}",
        ]
        for r in o["rows"]:
            median = r["median_s"] * 1e3
            lines.append(f"  {r['tasks_per_thread']:>13}{r['batches']:>9}{r['tasks']:>11}{median:>9.1f} ms")
        per_task, per_call = o["per_task_s"] * 1e3, o["per_call_s"] * 1e3
        lines.append(f"  least squares: {per_task:.2f} ms per task, {per_call:.1f} ms per call")
    s = report.get("simulate")
    if s:
        head = f"{'workers':>7}{'batches':>9}{'largest':>9}{'sums':>6}{'depth':>7}{'other':>7}"
        lines += [
            "",
            f"tasks and reduction depth ({s[0]['slices']} slices; single-threaded workers, one process):",
            f"  {head}{'workers used':>14}  predicted (batches, sums, depth)",
        ]
        for r in s:
            lines.append(
                f"  {r['workers']:>7}{r['batches']:>9}{r['largest']:>9}{r['sums']:>6}{r['depth']:>7}"
                f"{r['other']:>7}{r['workers_used']:>14}  {r['predicted']}"
            )
    return "\n".join(lines)


def run(quick: bool = False, parts: tuple[str, ...] = ("overhead", "simulate")) -> dict:
    report = {}
    if "overhead" in parts:
        report["overhead"] = overhead(quick)
    if "simulate" in parts:
        report["simulate"] = simulate(quick)
    return report


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.cluster", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument("--only", choices=("overhead", "simulate"), help="one part of the report")
    args = ap.parse_args(argv)
    report = run(args.quick, (args.only,) if args.only else ("overhead", "simulate"))
    print(table(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
