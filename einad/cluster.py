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
  slice reads but no sliced index reaches (``prepare``: the hoisted steps). Each
  worker thread then runs a *chain* of ``batch`` tasks, each a contiguous run of
  slices that it adds, in place, into the partial result the task before it
  left (its ``carry``), so that a thread holds one partial result and never
  sends one while the slices run; the caller hands the tasks out as the chains
  finish them, largest first (`guided`), two in flight per chain. What a chain's
  tasks keep on their worker for the next (their slices' buffers, `kept`) is let
  go by a release task after its last. The chains' partial results are added by
  a binary tree of ``combine`` tasks, and a last
  ``finish`` task turns the sum into the result (a sweep pulls the hoisted steps'
  cotangents back there). The caller gathers that one result. dask reruns the
  tasks of a worker that dies (its chains from their start); scattered data
  survive on the other workers.
* **Any** `concurrent.futures.Executor` (``"futures"``: a process pool, loky,
  ``mpi4py.futures``, a thread pool): such an executor cannot keep data on its
  workers between tasks, so there is one task per worker, each sent the data
  once (as a broadcast would), summing its own slices; the caller adds the
  workers' partial results as they arrive and finishes. ``prepare`` runs in the
  caller.

`layout` is the batch rule (`guided` the tasks' sizes); `Progress` the progress
bar over slices (tqdm when installed, else one line on stderr); `in_slice` names
the slice an exception came from; `cancelled` lets a task on a dask worker notice that its call was
cancelled (Ctrl-C, or another task failed), so it stops at its next slice.

dask and tqdm are optional: imported only when an executor or a bar needs them.
"""

from __future__ import annotations

import concurrent.futures as cf
import math
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

SHARES_PER_THREAD = 2
"""On a dask cluster, each task takes the slices not yet handed out divided by this many times
the worker threads (at least one slice): large tasks first, few of them, then smaller and
smaller ones, so that the threads finish together even when some run slower (guided
self-scheduling). More shares: more, smaller tasks."""


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


def worker_threads(executor: Any) -> list[int]:
    """The threads of each worker of `executor`: a dask cluster's workers now (at least one
    worker of one thread), else one entry per worker of a futures executor (its
    ``num_workers`` or ``_max_workers``, else the cores), each of one thread."""
    if kind(executor) == "dask":
        return [max(1, int(t)) for t in executor.nthreads().values()] or [1]
    for attr in ("num_workers", "_max_workers"):
        n = getattr(executor, attr, None)
        if isinstance(n, int) and n > 0:
            return [1] * n
    return [1] * (os.cpu_count() or 1)


def threads(executor: Any) -> int:
    """How many slices `executor` can run at once: a dask cluster's worker threads now
    (at least 1), a futures executor's workers (its ``num_workers`` or ``_max_workers``,
    else the cores)."""
    return sum(worker_threads(executor))


def guided(n_slices: int, chains: int, shares: int | None = None) -> list[int]:
    """The sizes of the tasks, in the order they are handed out: each takes the slices left
    divided by ``shares * chains`` (`SHARES_PER_THREAD`), at least one."""
    k = max(1, (SHARES_PER_THREAD if shares is None else shares) * max(1, chains))
    sizes, left = [], n_slices
    while left > 0:
        size = max(1, left // k)
        sizes.append(size)
        left -= size
    return sizes


@dataclass(frozen=True)
class Layout:
    """How the slices of one call are cut into tasks.

    On a dask cluster (`where` ``"dask"``): each worker thread runs a *chain* of tasks, each
    task adding its slices into the partial result the one before it left on that worker
    (written in place), so that a thread holds one partial result and sends one; the tasks
    are contiguous runs of slices handed out as the chains ask for them (`guided`); the
    chains' results are summed by a binary tree of depth `depth`. On another executor: one
    task per worker, task i taking the slices ``i, i + tasks, i + 2 tasks, ...``, summed by
    the caller.
    """

    where: str  # "dask" or "futures"
    n_slices: int
    threads: int  # the slices the executor runs at once
    tasks: int
    batch: int  # the most slices in one task
    depth: int  # the levels of the tree of sums (0: one chain; "futures": summed in the caller)
    name: str = "dask"  # the executor's kind: "dask", or its class name
    chains: int = 1  # the partial results summed at the end: one per worker thread in use
    per_worker: int = 1  # the most threads of one worker (each holds a slice and a partial result)

    def batches(self) -> list[range]:
        """The slices of each task (on a dask cluster, in the order they are handed out)."""
        if self.where == "dask":
            out, start = [], 0
            for size in guided(self.n_slices, self.chains):
                out.append(range(start, start + size))
                start += size
            return out
        return [range(i, self.n_slices, self.tasks) for i in range(self.tasks)]

    def describe(self) -> str:
        """One line, as `einad.contract_path`'s report prints it."""
        plural = "s" if self.tasks != 1 else ""
        if self.where == "dask":
            where = f"a dask cluster of {self.threads} worker thread{'s' if self.threads != 1 else ''}"
            sums = (
                f"each thread adds its tasks into one partial result; the {self.chains} partial results "
                f"summed on the workers by a tree of depth {self.depth}"
            )
        else:
            where = f"a {self.name} of {self.threads} worker{'s' if self.threads != 1 else ''}"
            sums = "partial results summed by the caller as they arrive"
        return f"slices run as {self.tasks} task{plural} of up to {self.batch} slices on {where}; {sums}"


def layout(where: str, n_slices: int, threads: int, name: str = "", per_worker: int = 1) -> Layout:
    """The batch rule. On a dask cluster of T worker threads: ``C = min(n_slices, T)`` chains,
    one per thread, fed tasks of `guided` sizes (each the slices left over ``2 C``,
    `SHARES_PER_THREAD`); the C partial results summed by a binary tree of depth
    ``ceil(log2(C))``. On any other executor of W workers: ``min(n_slices, W)`` tasks, one per
    worker, each sent the data once; the caller sums them."""
    threads = max(1, threads)
    if where == "dask":
        chains = max(1, min(n_slices, threads))
        sizes = guided(n_slices, chains)
        depth = math.ceil(math.log2(chains)) if chains > 1 else 0
        largest = max(sizes, default=0)
        return Layout(where, n_slices, threads, len(sizes), largest, depth, name or where, chains, per_worker)
    tasks = max(1, min(n_slices, threads))
    return Layout(where, n_slices, threads, tasks, -(-n_slices // tasks), 0, name or where, tasks, 1)


def layout_for(executor: Any, n_slices: int) -> Layout:
    """`layout` for `executor` as it is now (a dask cluster's threads are counted per call)."""
    where = kind(executor)
    assert where is not None
    per = worker_threads(executor)
    return layout(where, n_slices, sum(per), name(executor), max(per))


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


# -- what a chain keeps on its worker ---------------------------------------------------------

_KEPT: dict[tuple[str, int], Any] = {}
"""What the tasks of each chain keep on this worker between tasks, by (call token, chain)."""
_KEPT_LOCK = threading.Lock()
_ENDED: dict[str, None] = {}
"""The last calls (tokens) whose end let go of everything on this worker: a task of theirs that
starts only after that (it was dropped by the scheduler but not yet by the worker) keeps nothing."""


def _task_key(token: str, chain: int, task: int) -> str:
    """The dask key of a call's batch task: its call, its chain and its number."""
    return f"einad-slices-{token}-{chain}-{task}"


def _running_chain() -> tuple[str, int] | None:
    """(call token, chain) of the einad batch task this dask worker thread runs (None elsewhere)."""
    distributed = sys.modules.get("distributed")
    if distributed is None:
        return None
    try:
        key = distributed.get_worker().get_current_task()
    except Exception:  # noqa: BLE001  (not in a task on a worker)
        return None
    if not isinstance(key, str) or not key.startswith("einad-slices-"):
        return None
    _, _, token, chain, _ = key.split("-")
    return token, int(chain)


def kept(make: Callable[[], Any]) -> Any:
    """``make()``, kept for the next tasks of the same chain on this worker.

    On a dask cluster a worker thread runs a chain of tasks, one after another, each doing
    what the one before did on arrays of the same shapes: what they keep (their slices'
    buffers) serves them all, made once per call and chain rather than once per task. It is
    let go by the chain's release task, after its last batch and before the chains' partial
    results are summed (the worker then holds two partial results, not a slice's buffers
    besides); and on every worker when a call ends (what a chain moved to another worker
    left there) or fails. Elsewhere (a futures executor: one task per worker; no executor)
    each call of `kept` makes its own.
    """
    chain = _running_chain()
    if chain is None:
        return make()
    with _KEPT_LOCK:
        if chain[0] in _ENDED:
            return make()
        value = _KEPT.get(chain)
        if value is None:
            value = _KEPT[chain] = make()
    return value


def _let_go(token: str, chain: int | None = None) -> int:
    """Let go of what the tasks of call `token` (of its chain `chain` only, if given) keep
    on this worker; how many things. (Without `chain`, the call has ended: its tasks that are
    still to start on this worker keep nothing from now on.)"""
    with _KEPT_LOCK:
        if chain is None:
            _ENDED[token] = None
            if len(_ENDED) > 1024:
                del _ENDED[next(iter(_ENDED))]
        gone = [k for k in _KEPT if k[0] == token and chain in (None, k[1])]
        for k in gone:
            del _KEPT[k]
    return len(gone)


def _released(token: str, chain: int, partial: Any) -> Any:
    """A chain's release task: what the chain keeps on this worker let go; `partial` as is."""
    _let_go(token, chain)
    return partial


# -- running the tasks -------------------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """The tasks of one sliced call, as picklable functions of the call's data `data`:

    * ``prepare(*data) -> shared`` (None: nothing to prepare; shared is None),
    * ``batch(slices, shared, carry, *data) -> partial`` (`slices`: a range of slice numbers;
      `carry`: None, or the partial result of the tasks before this one, which it adds into
      and may write: nothing else reads it),
    * ``combine(a, b) -> partial`` (the sum; it may write into `a`, read by nothing else),
    * ``finish(total, shared, *data) -> result`` (None: the total is the result; it may
      write into `total`).
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
    futures = {ex.submit(work.batch, b, shared, None, *data): len(b) for b in lay.batches()}
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


class _Chain:
    """The tasks of one worker thread: each adds into the partial result of the one before."""

    __slots__ = ("number", "tail", "where")

    def __init__(self, number: int, where: str | None) -> None:
        self.number = number
        self.where = where  # the worker it prefers (None: any)
        self.tail: Any = None  # the future of its last task


def _run_dask(client: Any, work: Work, data: list[Any], lay: Layout, bar: Progress) -> Any:
    """The dask route: one chain of tasks per worker thread (`Layout`), two tasks in flight
    per chain (the next one waits on the worker for the one running, so no thread waits for
    the caller), fed from the guided sizes as the chains finish tasks; then the tree of sums
    over the chains' partial results (each chain's released first, `kept`), the finishing
    task, and one gather."""
    token = uuid.uuid4().hex[:16]
    finished: queue.SimpleQueue[Any] = queue.SimpleQueue()  # batch futures done (or failed)
    sizes: dict[Any, int] = {}
    draining = threading.Event()  # every batch submitted: the caller reads `finished` no more
    root: Any = None

    def done(f: Any) -> None:
        if f.status == "finished":
            bar.update(sizes.get(f.key, 0))
        finished.put(f)
        if draining.is_set() and f.key != root.key and f.status != "error":
            # (held until now for the progress bar; a failed one stays held, so that the tasks
            # after it fail with its exception: released, the scheduler could forget it first
            # and cancel them, and the caller would see a CancelledError instead)
            f.release()

    # Every future of the call is in `held`, released when the call ends; a chain's earlier
    # tasks are let go once the next one is submitted and they are done (the scheduler keeps
    # each result until the task after it has read it), so that the cluster frees them.
    held = list(client.scatter(data, broadcast=True, hash=False))
    stored = list(held)
    chains: list[_Chain] = []
    try:
        shared = None
        if work.prepare is not None:
            shared = client.submit(work.prepare, *stored, key=f"einad-prepare-{token}")
            held.append(shared)
        places = [w for w, t in client.nthreads().items() for _ in range(max(1, int(t)))]
        chains = [_Chain(c, places[c] if c < len(places) else None) for c in range(lay.chains)]
        batches = iter(lay.batches())
        of: dict[Any, _Chain] = {}

        def feed(chain: _Chain) -> bool:
            b = next(batches, None)
            if b is None:
                return False
            where = {"workers": [chain.where], "allow_other_workers": True} if chain.where else {}
            key = _task_key(token, chain.number, len(sizes))
            sizes[key] = len(b)
            f = client.submit(work.batch, b, shared, chain.tail, *stored, key=key, **where)
            held.append(f)
            if chain.tail is not None and chain.tail.status == "finished":
                chain.tail.release()  # (the new task holds it on the cluster; a failed one stays held)
            chain.tail, of[key] = f, chain
            f.add_done_callback(done)
            return True

        more = True
        for _ in range(2):
            for chain in chains:
                more = more and feed(chain)
        while more:
            try:
                f = finished.get(timeout=0.1)  # (a timeout: Ctrl-C interrupts it)
            except queue.Empty:
                continue
            if f.status == "error":
                f.result()  # raises the task's exception
            chain = of.pop(f.key)
            if f.key != chain.tail.key:
                f.release()
            more = feed(chain)
        # Each chain's last task is followed by a release on its worker (`kept`), before the sums.
        tails = [
            client.submit(
                _released,
                token,
                c.number,
                c.tail,
                key=f"einad-release-{token}-{c.number}",
                **({"workers": [c.where], "allow_other_workers": True} if c.where else {}),
            )
            for c in chains
            if c.tail is not None
        ]
        held.extend(tails)

        def tree(lo: int, hi: int) -> Any:
            if hi - lo == 1:
                return tails[lo]
            mid = (lo + hi) // 2
            f = client.submit(work.combine, tree(lo, mid), tree(mid, hi), key=f"einad-sum-{token}-{lo}-{hi}")
            held.append(f)
            return f

        root = tree(0, len(tails))
        if work.finish is not None:
            root = client.submit(work.finish, root, shared, *stored, key=f"einad-finish-{token}")
            held.append(root)
        # Let go of the tasks' futures but the root's and those still running (`done` lets
        # them go): the scheduler keeps what the tasks after them read, and can recompute
        # them. The data and the prepared values are held to the end (a lost worker's tasks,
        # rerun, read them; scattered data cannot be recomputed).
        draining.set()
        kept = {f.key for f in stored} | ({shared.key} if shared is not None else set())
        for f in held:
            status = f.status  # (read once: one that fails after this check stays held)
            if status == "error":
                f.result()  # raises the task's exception
            if f.key != root.key and f.key not in kept and (status == "finished" or f.key not in sizes):
                f.release()
        result = root.result()
    except BaseException as err:
        # a task cancelled after another failed (dask's FutureCancelledError): the failure is
        # what the caller is told, as the held failed future still knows it
        erred = _failure(held) if isinstance(err, cf.CancelledError) else None
        _release(held)
        if not isinstance(err, KeyboardInterrupt):  # Ctrl-C: out now; the tasks stop at their next slice
            _wait_forgotten(client, token, workers=True)
        _let_go_everywhere(client, token, wait=not isinstance(err, KeyboardInterrupt))
        if erred is not None:
            raise erred from None
        raise
    _release(held)
    _wait_forgotten(client, token, workers=False)
    _let_go_everywhere(client, token, wait=False)  # (a chain rerun elsewhere left its buffers)
    return result


async def _let_go_soon(token: str) -> int:
    """`_let_go`, in a worker's event loop (what `Client.run` runs without waiting)."""
    return _let_go(token)


def _let_go_everywhere(client: Any, token: str, wait: bool = True) -> None:
    """Let go of what the call's tasks keep on every worker (a failed or interrupted call's
    chains never reached their release tasks); without `wait`, in the background."""
    try:
        client.run(_let_go if wait else _let_go_soon, token, wait=wait)
    except Exception:  # noqa: BLE001  (the cluster closing, a worker gone: nothing kept there)
        return


def _failure(held: list[Any]) -> BaseException | None:
    """The exception of a failed task among the call's futures `held` (None if none failed)."""
    for f in held:
        if f.status == "error":
            try:
                return f.exception(timeout=1)  # type: ignore[no-any-return]
            except Exception:  # noqa: BLE001  (the cluster closing: no exception to tell)
                return None
    return None


def _release(held: list[Any]) -> None:
    """Let go of every future of a call. The scheduler then forgets its tasks (none is wanted
    any more), and tells the workers to drop those still running, which stop before their next
    slice (`cancelled`). (``Client.cancel`` would do the same, but dask asserts when a
    cancelled task's dependents are not held by the client, as the sums are not.)"""
    for f in held:
        f.release()
    held.clear()


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
