"""Where the slices of a sliced contraction run: tasks on an executor, progress, faults.

A sliced contraction (`slicing`) is a sum of independent slices. By default
`einsum` runs them in this process, on a thread pool (`slicing.threads`). Given
``executor=``, they run as tasks there instead; this module knows executors, not
contractions. The contraction is handed over as a `Work`: four functions of the
call's data (the operands, and the cotangent of a sweep), all picklable, each
run where the executor puts it.

* **A** `dask.distributed.Client` (`run` on ``"dask"``): the data go to the
  workers in one ``scatter`` per call (broadcast to every worker: each holds one
  copy, and a lost worker's copy is not the last). One task computes what every
  slice reads but no sliced index reaches (``prepare``: the hoisted steps); the
  slices run as ``batch`` tasks of several slices each (`layout`); their partial
  results are added on the workers by a binary tree of ``combine`` tasks,
  submitted in depth-first order so that each sum runs, and frees its inputs, as
  soon as both are there; a last ``finish`` task turns the sum into the result
  (a sweep pulls the hoisted steps' cotangents back there). The caller gathers
  that one result. dask reruns the tasks of a worker that dies; scattered data
  survive on the other workers.
* **Any** `concurrent.futures.Executor` (``"futures"``: a process pool, loky,
  ``mpi4py.futures``, a thread pool): such an executor cannot keep data on its
  workers between tasks, so there is one task per worker, each sent the data
  once (as a broadcast would), summing its own slices; the caller adds the
  workers' partial results as they arrive and finishes. ``prepare`` runs in the
  caller.

`layout` is the batch rule; `Progress` the progress bar over slices (tqdm when
installed, else one line on stderr); `in_slice` names the slice an exception
came from; `cancelled` lets a task on a dask worker notice that its call was
cancelled (Ctrl-C, or another task failed), so it stops at its next slice.

dask and tqdm are optional: imported only when an executor or a bar needs them.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

TASKS_PER_THREAD = 4
"""On a dask cluster, the slices are cut into up to this many tasks per worker thread: enough
that a slow or lost worker leaves little work to redo or wait for, few enough that the
overhead of a task (a few milliseconds) and its partial result (one value and one gradient
per operand, summed on the workers) stay small."""


# -- executors ------------------------------------------------------------------------------


def _dask_client(executor: Any) -> bool:
    distributed = sys.modules.get("distributed")
    return distributed is not None and isinstance(executor, distributed.Client)


def kind(executor: Any) -> str | None:
    """``"dask"`` for a `dask.distributed.Client`, ``"futures"`` for any other
    `concurrent.futures.Executor`, None for None (the in-process thread pool).

    Raises:
        TypeError: For anything else.
    """
    if executor is None:
        return None
    if _dask_client(executor):
        return "dask"
    if isinstance(executor, cf.Executor):
        return "futures"
    raise TypeError(
        "executor must be None (the in-process thread pool), a dask.distributed.Client or a "
        f"concurrent.futures.Executor, got {type(executor).__name__}"
    )


def name(executor: Any) -> str:
    """A short description of `executor`, for listings and reports."""
    k = kind(executor)
    if k == "dask":
        return "dask"
    return type(executor).__name__ if k else "threads"


def threads(executor: Any) -> int:
    """How many slices `executor` can run at once: a dask cluster's worker threads now
    (at least 1), a futures executor's workers (its ``num_workers`` or ``_max_workers``,
    else the cores)."""
    if kind(executor) == "dask":
        total: int = sum(executor.nthreads().values())
        return max(1, total)
    for attr in ("num_workers", "_max_workers"):
        n = getattr(executor, attr, None)
        if isinstance(n, int) and n > 0:
            return n
    return os.cpu_count() or 1


@dataclass(frozen=True)
class Layout:
    """How the slices of one call are cut into tasks.

    Task i takes the slices ``i, i + tasks, i + 2 tasks, ...`` (slices of one index's
    chunks differ in size by at most one row; taking every tasks-th spreads them evenly).
    """

    where: str  # "dask" or "futures"
    n_slices: int
    threads: int  # the slices the executor runs at once
    tasks: int
    batch: int  # the most slices in one task
    depth: int  # the levels of the tree of sums (0: one task; "futures": summed in the caller)
    name: str = "dask"  # the executor's kind: "dask", or its class name

    def batches(self) -> list[range]:
        """The slices of each task."""
        return [range(i, self.n_slices, self.tasks) for i in range(self.tasks)]

    def describe(self) -> str:
        """One line, as `einad.contract_path`'s report prints it."""
        plural = "s" if self.tasks != 1 else ""
        where = (
            f"a dask cluster of {self.threads} worker thread{'s' if self.threads != 1 else ''}"
            if self.where == "dask"
            else f"a {self.name} of {self.threads} worker{'s' if self.threads != 1 else ''}"
        )
        sums = (
            f"partial results summed on the workers by a tree of depth {self.depth}"
            if self.where == "dask"
            else "partial results summed by the caller as they arrive"
        )
        return f"slices run as {self.tasks} task{plural} of up to {self.batch} slices on {where}; {sums}"


def layout(where: str, n_slices: int, threads: int, name: str = "") -> Layout:
    """The batch rule. On a dask cluster of T worker threads: ``min(n_slices, 4 T)`` tasks
    (`TASKS_PER_THREAD`), summed by a binary tree of depth ``ceil(log2(tasks))``. On any
    other executor of W workers: ``min(n_slices, W)`` tasks, one per worker, each sent the
    data once; the caller sums them."""
    threads = max(1, threads)
    per = TASKS_PER_THREAD if where == "dask" else 1
    tasks = max(1, min(n_slices, per * threads))
    depth = math.ceil(math.log2(tasks)) if where == "dask" and tasks > 1 else 0
    return Layout(where, n_slices, threads, tasks, -(-n_slices // tasks), depth, name or where)


def layout_for(executor: Any, n_slices: int) -> Layout:
    """`layout` for `executor` as it is now (a dask cluster's threads are counted per call)."""
    where = kind(executor)
    assert where is not None
    return layout(where, n_slices, threads(executor), name(executor))


# -- progress ---------------------------------------------------------------------------------


class Progress:
    """A progress bar over the slices of one call: tqdm's when installed, else one line on
    stderr rewritten in place (at most every 0.2 s, and at the end). Disabled, it does
    nothing. Thread-safe."""

    def __init__(self, total: int, enabled: bool, what: str = "einad slices") -> None:
        self.total, self.enabled, self.what = total, enabled and total > 0, what
        self.done = 0
        self._lock = threading.Lock()
        self._bar: Any = None
        self._shown = 0.0
        if not self.enabled:
            return
        try:
            from tqdm import tqdm  # type: ignore[import-untyped]  # optional, untyped
        except ImportError:
            self._line()
        else:
            self._bar = tqdm(total=total, desc=what, unit="slice", file=sys.stderr, leave=True)

    def update(self, n: int) -> None:
        """`n` more slices done."""
        if not self.enabled:
            return
        with self._lock:
            n = min(n, self.total - self.done)
            if n <= 0:
                return
            self.done += n
            if self._bar is not None:
                self._bar.update(n)
            elif self.done == self.total or time.monotonic() - self._shown >= 0.2:
                self._line()

    def _line(self) -> None:
        self._shown = time.monotonic()
        end = "\n" if self.done == self.total else ""
        print(f"\r{self.what}: {self.done}/{self.total}", end=end, file=sys.stderr, flush=True)

    def close(self, complete: bool = False) -> None:
        """End the bar (filled up first when `complete`)."""
        if complete:
            self.update(self.total)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self.enabled and self.done < self.total:
            print(file=sys.stderr, flush=True)  # end the line left unfinished
        self.enabled = False


# -- faults -----------------------------------------------------------------------------------


def in_slice(err: BaseException, i: int, n: int, ranges: dict[str, tuple[int, int]]) -> BaseException:
    """`err` (the same object, to be re-raised) naming the slice it came from: slice `i` of `n`,
    cut to `ranges` (``{letter: (start, stop)}``). The name goes into its message where the
    exception keeps one string argument, and always into its notes (`add_note`)."""
    where = ", ".join(f"{c} in {a}:{b}" for c, a, b in ((c, *r) for c, r in ranges.items()))
    text = f"slice {i} of {n} ({where})"
    note = f"einad: raised in {text} of a sliced contraction"
    notes: list[str] | None = getattr(err, "__notes__", None)
    if notes is not None and note in notes:
        return err
    if notes is None:
        notes = []
        err.__notes__ = notes  # type: ignore[attr-defined]  # what add_note (Python 3.11) appends to
    notes.append(note)
    args = err.args
    if len(args) == 1 and isinstance(args[0], str) and type(err).__str__ is BaseException.__str__:
        err.args = (f"{args[0]} [in {text}]",)
    return err


def cancelled() -> bool:
    """Whether the task running this on a dask worker was cancelled (its call failed or was
    interrupted): it then stops before its next slice. False outside a dask task."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return False
    try:
        worker = distributed.get_worker()
        key = worker.get_current_task()
        ts = worker.state.tasks.get(key)
    except Exception:  # noqa: BLE001  (not on a worker, or its state changed under us: keep going)
        return False
    return ts is None or ts.state in ("cancelled", "released", "forgotten")


class Cancelled(Exception):
    """Raised in a task that stopped because its call was cancelled (nobody reads it)."""


# -- running the tasks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """The tasks of one sliced call, as picklable functions of the call's data `data`:

    * ``prepare(*data) -> shared`` (None: nothing to prepare; shared is None),
    * ``batch(slices, shared, *data) -> partial`` (`slices`: a range of slice numbers),
    * ``combine(a, b) -> partial`` (a new value; the inputs are not written),
    * ``finish(total, shared, *data) -> result`` (None: the total is the result).
    """

    prepare: Callable[..., Any] | None
    batch: Callable[..., Any]
    combine: Callable[[Any, Any], Any]
    finish: Callable[..., Any] | None


def run(executor: Any, work: Work, data: Sequence[Any], n_slices: int, progress: bool = False) -> Any:
    """Run the `n_slices` slices of `work` on `executor`; returns ``finish``'s result.

    An exception raised in a task reaches the caller as that exception (naming its slice,
    `in_slice`); then, and on Ctrl-C, the outstanding tasks are cancelled. Nothing of the
    call stays on a dask cluster after it returns or raises.
    """
    if any(type(x).__module__.partition(".")[0] == "dask" for x in data):
        raise TypeError(
            "executor= takes the slices of a contraction of in-memory arrays; dask arrays are tasks "
            "already: contract them without an executor and compute the result on the cluster"
        )
    lay = layout_for(executor, n_slices)
    bar = Progress(n_slices, progress)
    try:
        if lay.where == "dask":
            out = _run_dask(executor, work, list(data), lay, bar)
        else:
            out = _run_futures(executor, work, list(data), lay, bar)
    except BaseException:
        bar.close()
        raise
    bar.close(complete=True)
    return out


def _run_futures(ex: cf.Executor, work: Work, data: list[Any], lay: Layout, bar: Progress) -> Any:
    shared = work.prepare(*data) if work.prepare is not None else None
    futures = {ex.submit(work.batch, b, shared, *data): len(b) for b in lay.batches()}
    total: Any = None
    try:
        for f in cf.as_completed(futures):
            part = f.result()
            total = part if total is None else work.combine(total, part)
            del part
            bar.update(futures[f])
    except BaseException as err:
        for f in futures:
            f.cancel()
        if not isinstance(err, KeyboardInterrupt):
            cf.wait(futures)  # nothing left running: the tasks already started finish
        raise
    return total if work.finish is None else work.finish(total, shared, *data)


def _run_dask(client: Any, work: Work, data: list[Any], lay: Layout, bar: Progress) -> Any:
    token = uuid.uuid4().hex[:16]
    pending: dict[Any, tuple[Any, int]] = {}  # batch futures not yet done, held for the progress bar
    lock = threading.Lock()

    def done(f: Any) -> None:
        with lock:
            held = pending.pop(f.key, None)
        if held is not None:
            if f.status == "finished":
                bar.update(held[1])
            f.release()  # its sum still reads it: the scheduler keeps it until then

    # The futures held: the data, the prepared values, the result, and the batches not yet
    # done. The sums are not held: the scheduler keeps each until the next one has read it.
    keep = list(client.scatter(data, broadcast=True, hash=False))
    stored = list(keep)
    try:
        shared = None
        if work.prepare is not None:
            shared = client.submit(work.prepare, *stored, key=f"einad-prepare-{token}")
            keep.append(shared)
        batches = lay.batches()

        def tree(lo: int, hi: int) -> Any:
            # depth first: each sum is submitted right after its two inputs, so it has a
            # higher priority than the batches after it and runs as soon as they are done
            if hi - lo == 1:
                f = client.submit(work.batch, batches[lo], shared, *stored, key=f"einad-slices-{token}-{lo}")
                if lay.tasks > 1 or work.finish is not None:  # (else it is the result, held)
                    with lock:
                        pending[f.key] = (f, len(batches[lo]))
                    f.add_done_callback(done)
                return f
            mid = (lo + hi) // 2
            return client.submit(
                work.combine, tree(lo, mid), tree(mid, hi), key=f"einad-sum-{token}-{lo}-{hi}"
            )

        root = tree(0, lay.tasks)
        if work.finish is not None:
            root = client.submit(work.finish, root, shared, *stored, key=f"einad-finish-{token}")
        keep.append(root)
        result = root.result()
    except BaseException as err:
        _release(keep, pending, lock)
        if not isinstance(err, KeyboardInterrupt):  # Ctrl-C: out now; the tasks stop at their next slice
            _wait_forgotten(client, token, workers=True)
        raise
    _release(keep, pending, lock)
    _wait_forgotten(client, token, workers=False)
    return result


def _release(keep: list[Any], pending: dict[Any, tuple[Any, int]], lock: threading.Lock) -> None:
    """Let go of every future of a call. The scheduler then forgets its tasks (none is wanted
    any more), and tells the workers to drop those still running, which stop before their next
    slice (`cancelled`). (``Client.cancel`` would do the same, but dask asserts when a
    cancelled task's dependents are not held by the client, as the sums are not.)"""
    with lock:
        held = [f for f, _ in pending.values()]
        pending.clear()
    for f in keep + held:
        f.release()
    keep.clear()


def _keys_left(token: str, dask_scheduler: Any = None) -> int:
    """On the scheduler (`client.run_on_scheduler`): how many tasks of the call `token` it knows."""
    return sum(1 for key in list(dask_scheduler.tasks) if token in str(key))


def _executing(token: str, dask_worker: Any = None) -> int:
    """On a worker (`client.run`): how many of its threads still run a task of the call `token`
    (a task the worker was told to drop keeps its thread until it returns)."""
    return sum(1 for key in list(dask_worker.active_threads.values()) if token in str(key))


def _wait_forgotten(client: Any, token: str, workers: bool, timeout: float = 60.0) -> None:
    """Wait until the scheduler has forgotten every task of the call `token` and, with
    `workers`, until no worker still runs one (a cancelled task stops at its next slice): at
    most `timeout` seconds. (The client releases its futures in the background.)"""
    end = time.monotonic() + timeout
    while True:
        try:
            left = client.run_on_scheduler(_keys_left, token)
            if workers and not left:
                left = sum(client.run(_executing, token).values())
        except Exception:  # noqa: BLE001  (the cluster closing, a worker gone: nothing to wait for)
            return
        if not left or time.monotonic() > end:
            return
        time.sleep(0.002)
