"""``python -m benchmarks``: run the suite, print the table, write JSON and a plot.

    python -m benchmarks                       # everything installed, full sizes
    python -m benchmarks --quick               # tiny sizes, short timings (< 1 min)
    python -m benchmarks --cases 1,5 --engines einad,torch
    python -m benchmarks --json out.json --plot ratios.png
    python -m benchmarks --threads 1           # one thread for numpy's BLAS, torch and XLA
    python -m benchmarks --threads 2 --cores 2 # every engine on the same two cores
    python -m benchmarks --cases networks      # real tensor networks (issue 22; cotengra, networkx)
    python -m benchmarks --planning            # add einad's planning time on networks of 250-1000 tensors
    python -m benchmarks --cluster             # add dask's overhead per task and the tasks on 1-16 workers

The command line only; the work is in `runner`. `--threads` has to be set
before numpy is imported, so nothing heavy is imported until the arguments
are parsed.
"""

from __future__ import annotations

import argparse
import os
import sys

from . import ENGINE_NAMES


def parse(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="einad's benchmark suite (issue 4): einad against opt_einsum, hand-written numpy "
        "and the peers (HIPS autograd, JAX, PyTorch) where installed.",
    )
    ap.add_argument("--quick", action="store_true", help="tiny sizes and short timings (under a minute)")
    ap.add_argument(
        "--cases",
        help="comma list of case keys (1,...,10, n1,...,n4; 5 means 5a,5b, 6 means 6a,6b and networks "
        "means n1,...,n4); default all",
    )
    ap.add_argument(
        "--engines",
        help=(
            f"comma list from {','.join(ENGINE_NAMES)}; default all (manual always runs: it is the reference)"
        ),
    )
    ap.add_argument("--json", metavar="PATH", help="write the full record as JSON")
    ap.add_argument("--plot", metavar="PATH", help="write a PNG bar chart of vg/manual (needs matplotlib)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        metavar="N",
        help="run the engine blocks N times (see --order) and keep each median's best round: steadier "
        "on a shared machine",
    )
    ap.add_argument(
        "--order",
        choices=("cases", "engines"),
        default="cases",
        help="cases: for each case, its rounds of every engine's block back to back, so that the rows "
        "a ratio compares were timed minutes apart at most (default); engines: each engine's block of "
        "every case, round after round (the order before 2026-11-28)",
    )
    ap.add_argument(
        "--planning",
        action="store_true",
        help="after the table, time einad's planning on networks of 250 and 1000 tensors (50 and 100 with "
        "--quick), each measurement in a fresh process; needs cotengra and networkx (benchmarks/planning.py)",
    )
    ap.add_argument(
        "--cluster",
        action="store_true",
        help="after the table, the sliced contraction on a dask cluster (issue 24): the scheduling overhead "
        "per task on tiny slices and the tasks and reduction depth on 1-16 workers; needs dask.distributed "
        "(benchmarks/cluster.py)",
    )
    ap.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="threads for BLAS/OpenMP (numpy, torch) and, with 1, for XLA; default: the libraries' own "
        "(all cores). On a shared machine --threads 1 keeps a busy neighbour from stalling the BLAS threads",
    )
    ap.add_argument(
        "--cores",
        type=int,
        metavar="N",
        help="run on N of the machine's cores (os.sched_setaffinity, Linux): every engine and every thread "
        "a library starts shares them, XLA's runtime threads too, which --threads 1 does not hold to one "
        "core; default: all",
    )
    return ap.parse_args(argv)


def limit_cores(n: int) -> None:
    """Hold this process (and every thread and process it starts later) to `n` of its cores."""
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--cores needs os.sched_setaffinity (Linux)")
    have = sorted(os.sched_getaffinity(0))
    if not 1 <= n <= len(have):
        raise SystemExit(f"--cores {n}: this process may run on {len(have)} cores")
    os.sched_setaffinity(0, have[:n])


def limit_threads(n: int) -> None:
    """Set thread counts through the environment (read when the libraries load)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
        os.environ[var] = str(n)
    if n == 1:
        flags = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (
            flags + " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
        ).strip()


def main(argv=None) -> int:
    args = parse(argv)
    if args.cores:  # before any library starts a thread: threads take their creator's cores
        limit_cores(args.cores)
    if args.threads:
        if "numpy" in sys.modules:
            print("warning: numpy was imported before --threads could take effect", file=sys.stderr)
        limit_threads(args.threads)
    from .runner import Runner

    return Runner(args).run()


if __name__ == "__main__":
    sys.exit(main())
