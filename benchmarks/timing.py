"""Timing, machine busy-ness, machine description and the progress bar.

`measure` reports the median of repeated calls after a warm-up. The runner
times each engine in blocks of its own, never call by call alternating with
another, since interleaving numpy, torch and XLA calls leaves each library's
idle thread pool in the others' way. `Busy` samples ``/proc/stat`` and the load average around a
block, so the report says how much of the machine other processes were using.
`frozen_heap` keeps the garbage collector off the objects alive when a block starts.
"""

from __future__ import annotations

import contextlib
import gc
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any


@dataclass
class Budget:
    warm_calls: int  # at least this many untimed calls first
    warm_seconds: float  # and keep warming up until this much time has passed
    min_reps: int
    min_seconds: float  # keep timing until both min_reps and min_seconds are reached
    max_reps: int
    max_seconds: float  # but stop after this long once three calls are timed


FULL = Budget(warm_calls=2, warm_seconds=0.2, min_reps=7, min_seconds=1.0, max_reps=300, max_seconds=4.0)
QUICK = Budget(warm_calls=0, warm_seconds=0.0, min_reps=3, min_seconds=0.01, max_reps=20, max_seconds=0.05)


@dataclass
class Timing:
    median: float  # seconds per call
    low: float  # first quartile
    high: float  # third quartile
    reps: int
    cores: float = 1.0  # this process's CPU time over the wall time of the timed calls

    def as_dict(self) -> dict:
        return {
            "median_s": self.median,
            "q1_s": self.low,
            "q3_s": self.high,
            "reps": self.reps,
            "cores": self.cores,
        }


def measure(fn: Callable[[], Any], budget: Budget) -> Timing:
    """Median wall time of ``fn()`` after a warm-up (gc stays enabled, as for a user).

    Also the cores the process kept busy while timed (its CPU time over the wall time): an
    engine whose library runs threads of its own despite ``--threads 1`` shows above 1.
    """
    start = time.perf_counter()
    calls = 0
    while calls < budget.warm_calls or time.perf_counter() - start < budget.warm_seconds:
        fn()
        calls += 1
        if calls >= 50:
            break
    gc.collect()
    times: list[float] = []
    cpu = time.process_time()
    begin = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        spent = time.perf_counter() - begin
        if len(times) >= budget.max_reps:
            break
        if len(times) >= budget.min_reps and spent >= budget.min_seconds:
            break
        if len(times) >= 3 and spent >= budget.max_seconds:  # slow calls: three will do
            break
    cores = (time.process_time() - cpu) / max(time.perf_counter() - begin, 1e-9)
    times.sort()
    q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
    return Timing(statistics.median(times), q[0], q[2], len(times), cores)


def peak_memory(fn: Callable[[], Any]) -> tuple[float, float]:
    """(peak, retained) bytes that tracemalloc sees during one call of ``fn``.

    numpy reports its buffers to tracemalloc; torch and XLA do not, so this is
    meaningful for the numpy-based engines only. `retained` is what is still
    allocated after the result has been dropped (a graph that outlives `grad`).
    """
    import tracemalloc

    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        out = fn()
        peak = tracemalloc.get_traced_memory()[1] - base
        del out
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    return float(peak), float(retained)


_open_frozen_heaps = 0  # frozen_heap contexts now open (their own count: see below)


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """What is alive on entry (after a full collection) out of the garbage collector's sight
    until exit (`gc.freeze`), so that the collections inside walk only what was made since.

    One process holds every engine's library (numpy, einad, JAX, torch, cotengra, quimb:
    hundreds of thousands of objects), and a full collection walked them all, four or more per
    case and engine (before each timing and around each memory peak): 228 collections, 41 of the
    52 s of a quick run of einad, manual and einad-jit (17 s with the blocks frozen). The timed
    calls seldom set one off, so this shortens the runs, not what they time. Where the heap was
    frozen already (the test suite freezes it per module; a run freezes it around its blocks),
    what this freezes stays frozen: a block that unfroze the heap on its way out left the next
    block's first collection to walk every library again (a full collection of 0.1-0.3 s per
    block: 30 of the 50 s of a quick run of torch, einad-torch and dask's engines, 90 blocks)."""
    global _open_frozen_heaps
    # (asked of gc only when no frozen_heap is open: get_freeze_count counts the frozen objects
    # one by one, 0.05 s with every library loaded, as long as a block's collection)
    already = _open_frozen_heaps > 0 or gc.get_freeze_count() > 0
    gc.collect()
    gc.freeze()
    _open_frozen_heaps += 1
    try:
        yield
    finally:
        _open_frozen_heaps -= 1
        if not already:
            gc.unfreeze()


# -- how busy the machine is -------------------------------------------------------------


def _proc_stat() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs, or None off Linux."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return None
    vals = [int(x) for x in fields[:8]]
    idle = vals[3] + vals[4]  # idle + iowait
    return sum(vals) - idle, sum(vals)


def _loadavg() -> tuple[float, float, float] | None:
    try:
        return os.getloadavg()
    except OSError:
        return None


class Busy:
    """Samples machine and own CPU use over a stretch of the run (a context manager)."""

    def __enter__(self):
        self.t0 = time.perf_counter()
        self.cpu0 = time.process_time()
        self.stat0 = _proc_stat()
        self.load0 = _loadavg()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.t0
        self.own = time.process_time() - self.cpu0
        self.load1 = _loadavg()
        stat1 = _proc_stat()
        self.machine = None
        if self.stat0 and stat1 and stat1[1] > self.stat0[1]:
            ncpu = os.cpu_count() or 1
            frac = (stat1[0] - self.stat0[0]) / (stat1[1] - self.stat0[1])
            self.machine = frac * ncpu  # cores busy on average, all processes
        return False

    @property
    def others(self) -> float | None:
        """Cores used on average by other processes during the stretch."""
        if self.machine is None or self.wall <= 0:
            return None
        return max(0.0, self.machine - self.own / self.wall)

    def as_dict(self) -> dict:
        return {
            "wall_s": self.wall,
            "own_cpu_s": self.own,
            "machine_cores_busy": self.machine,
            "other_processes_cores": self.others,
            "loadavg_start": self.load0,
            "loadavg_end": self.load1,
        }

    def summary(self) -> str:
        parts = [f"{self.wall:.1f} s"]
        if self.machine is not None:
            parts.append(f"machine {self.machine:.2f} cores busy, others {self.others:.2f}")
        if self.load0 and self.load1:
            parts.append(f"load {self.load0[0]:.2f}->{self.load1[0]:.2f}")
        return ", ".join(parts)


# -- what machine this is -------------------------------------------------------------------


def machine_info() -> dict:
    import numpy as np

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    blas = "?"
    try:
        cfg = np.show_config(mode="dicts")
        b = cfg.get("Build Dependencies", {}).get("blas", {})
        blas = f"{b.get('name', '?')} {b.get('version', '')}".strip()
        # the environment can pin OpenBLAS to an older CPU's kernels (OPENBLAS_CORETYPE): say so
        pins = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("OPENBLAS_")]
        if pins:
            blas += ", " + " ".join(pins)
    except Exception:
        pass
    mem = None
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        pass
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(mem, 1) if mem else None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "blas": blas,
        "platform": platform.platform(),
    }


# -- progress bar -------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr (a line per step when stderr is not a terminal)."""

    def __init__(self, total: int, stream=None, width: int = 28):
        self.total = max(total, 1)
        self.done = 0
        self.stream = stream or sys.stderr
        self.width = width
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()

    def show(self, label: str) -> None:
        frac = self.done / self.total
        fill = round(frac * self.width)
        bar = "#" * fill + "." * (self.width - fill)
        elapsed = time.perf_counter() - self.start
        line = f"[{bar}] {self.done:>3}/{self.total} {elapsed:6.1f}s  {label}"
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:118])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()

    def step(self, label: str = "") -> None:
        self.done += 1
        self.show(label)

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
