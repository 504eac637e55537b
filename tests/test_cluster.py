"""Sliced contractions beyond one machine (issue 24): ``executor=`` on `einsum`, on a
`contract_expression`'s call and on `contract_path`; `einad.cluster`.

Every executor here is real: a `dask.distributed.LocalCluster` of two single-threaded worker
processes (started once for the module), a `ProcessPoolExecutor` of two spawned processes, and
a scheduler and two workers started with dask's own command line. Values and gradients are
compared with the same contraction unsliced, in this process. Faults are real too: a worker
process is killed while its tasks run, and an exception is raised inside a task by a step
function that this module installs in the worker processes (`_install`).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import einad as ea
from einad import cluster, slicing

EINSUM = sys.modules["einad.rules.einsum"]  # the module (einad.einsum is the function)

distributed = pytest.importorskip(
    "distributed", reason="dask.distributed is not installed (pip install 'einad[dask]')"
)

ROOT = pathlib.Path(__file__).resolve().parents[1]
TETRA = "abc,ade,bdf,cef->"  # every pairwise path has a 4-index intermediate: sliced
OPEN = "abc,ade,bdf->cef"  # a non-scalar result: the gradient is a sweep
MARKER = 12345.678  # a value no operand holds by chance: the injected fault looks for it


def _ops(shapes, complex_=False, seed=0):
    rng = np.random.default_rng(seed)
    if complex_:
        return [rng.standard_normal(s) + 1j * rng.standard_normal(s) for s in shapes]
    return [rng.standard_normal(s) for s in shapes]


def _close(a, b, tol=1e-12):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape and a.dtype == b.dtype
    scale = max(1.0, float(np.max(np.abs(b), initial=0.0)))
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol * scale)


# -- what the tests install in worker processes -----------------------------------------------


def _install(delay=0.0, marker=None):
    """Replace the step function of slices in this (worker) process: each looped step sleeps
    `delay` seconds, and raises a ZeroDivisionError when an operand holds `marker`."""
    raw = getattr(EINSUM, "_unpatched_slice_step", EINSUM._slice_step)
    raw_tree = getattr(EINSUM, "_unpatched_tree_forward", EINSUM.tree_forward)
    EINSUM._unpatched_slice_step, EINSUM._unpatched_tree_forward = raw, raw_tree

    def step(sc, run, ins, out, picked):
        if marker is not None and any(np.any(x == marker) for x in picked):
            raise ZeroDivisionError(f"step {','.join(ins)}->{out} met the marker")
        if delay:
            time.sleep(delay)
        return raw(sc, run, ins, out, picked)

    def tree(plan, arrays, keep=False, pool=None, value=True):  # (a sweep's slice, its steps as one tree)
        if marker is not None and any(np.any(x == marker) for x in arrays):
            raise ZeroDivisionError("step of the slice's tree met the marker")
        if delay:
            time.sleep(delay * len(plan.forward))
        return raw_tree(plan, arrays, keep, pool, value)

    EINSUM._slice_step, EINSUM.tree_forward = step, tree
    return os.getpid()


def _uninstall():
    EINSUM._slice_step = getattr(EINSUM, "_unpatched_slice_step", EINSUM._slice_step)
    EINSUM.tree_forward = getattr(EINSUM, "_unpatched_tree_forward", EINSUM.tree_forward)


def _scheduler_tasks(dask_scheduler=None):
    return len(dask_scheduler.tasks)


def _worker_tasks(dask_worker=None):
    """(threads running a task, tasks known) on a worker."""
    return len(dask_worker.active_threads), len(dask_worker.state.tasks)


# -- the executors ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def client():
    """A LocalCluster of two single-threaded worker processes, for the whole module."""
    cl = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0", memory_limit=0
    )
    c = distributed.Client(cl)
    yield c
    c.close()
    cl.close()


@pytest.fixture(scope="module")
def pool():
    """Two spawned worker processes (a fork of a process running dask's threads could deadlock)."""
    with cf.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as ex:
        yield ex


class Counting(cf.Executor):
    """A real executor that counts the tasks submitted to it (to show the slices went there)."""

    def __init__(self, inner):
        self.inner, self.submitted = inner, 0
        self._max_workers = inner._max_workers

    def submit(self, fn, /, *args, **kwargs):
        self.submitted += 1
        return self.inner.submit(fn, *args, **kwargs)


def _kept(dask_worker=None):
    """What the calls' tasks keep on a worker for their chains' next tasks (`cluster.kept`)."""
    return len(cluster._KEPT)


def _einad_tasks(stream):
    return [t["key"] for t in stream.data if "einad-slices" in str(t["key"])]


def _assert_clean(client):
    """Nothing of a call left on the cluster: no task on the scheduler, no worker thread
    running one, no future held by the client; the workers drop the tasks the scheduler
    forgot, and the buffers the call's chains kept (asynchronously, so within a moment)."""
    assert client.run_on_scheduler(_scheduler_tasks) == 0
    assert all(running == 0 for running, _ in client.run(_worker_tasks).values())
    assert not client.futures
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        any(known for _, known in client.run(_worker_tasks).values()) or any(client.run(_kept).values())
    ):
        time.sleep(0.02)
    assert all(known == 0 for _, known in client.run(_worker_tasks).values())
    assert not any(client.run(_kept).values())


# -- values and gradients agree with the unsliced contraction ---------------------------------

CASES = {
    "scalar-real": (TETRA, [(4, 4, 4)] * 4, 24, False),
    "scalar-complex": (TETRA, [(4, 4, 4)] * 4, 24, True),
    "open-real": (OPEN, [(4, 3, 5), (4, 2, 3), (3, 2, 4)], 20, False),
    "open-complex": (OPEN, [(4, 3, 5), (4, 2, 3), (3, 2, 4)], 20, True),
}


@pytest.mark.parametrize("where", ["dask", "process-pool", "threads"])
@pytest.mark.parametrize("case", list(CASES))
def test_values_and_gradients_agree_with_the_unsliced(request, where, case):
    eq, shapes, limit, complex_ = CASES[case]
    ops = _ops(shapes, complex_)
    _, info = ea.contract_path(eq, *ops, memory_limit=limit)
    assert info.n_slices >= 4
    if where == "dask":
        ex = request.getfixturevalue("client")
    elif where == "process-pool":
        ex = Counting(request.getfixturevalue("pool"))
    else:
        ex = None  # the in-process thread pool
    f = lambda *xs: ea.einsum(eq, *xs, memory_limit=limit, executor=ex)
    whole = lambda *xs: ea.einsum(eq, *xs)
    cot = _ops([np.einsum(eq, *ops).shape], complex_, seed=1)[0]
    if where == "dask":
        with distributed.get_task_stream(ex) as stream:
            value = f(*ops)
            y, pull = ea.vjp(f, *ops)
            grads = pull(cot)
        # one task per batch of slices, for the forward, and the reverse pass's forward with the
        # gradient (a scalar's one pass) or its forward then its sweep
        passes = 2 if eq == TETRA else 3
        assert len(_einad_tasks(stream)) == passes * cluster.layout("dask", info.n_slices, 2).tasks
        _assert_clean(ex)
    else:
        value = f(*ops)
        y, pull = ea.vjp(f, *ops)
        grads = pull(cot)
        if ex is not None:  # one task per worker and pass
            assert ex.submitted == 2 * (2 if eq == TETRA else 3)
    y0, pull0 = ea.vjp(whole, *ops)
    _close(value, np.asarray(y0))
    _close(y, y0)
    for a, b in zip(grads, pull0(cot)):
        _close(a, b)


@pytest.mark.parametrize("where", ["dask", "process-pool"])
def test_real_loss_of_a_complex_network_and_second_order(request, where):
    """value_and_grad of a real loss (|Z|^2 of a complex sliced contraction, the one-pass
    value-and-gradient) and a Hessian-vector product, through the executor."""
    ex = request.getfixturevalue("client") if where == "dask" else request.getfixturevalue("pool")
    ops = _ops([(3, 3, 3)] * 4, complex_=True, seed=2)

    def loss(*xs, ex=ex):
        z = ea.einsum(TETRA, *xs, memory_limit=9, executor=ex)
        return ea.real(z * ea.conj(z))

    argnums = (0, 1, 2, 3)
    v, g = ea.value_and_grad(loss, argnums=argnums)(*ops)
    v0, g0 = ea.value_and_grad(lambda *xs: loss(*xs, ex=None), argnums=argnums)(*ops)
    vw, gw = ea.value_and_grad(
        lambda *xs: ea.real(ea.einsum(TETRA, *xs) * ea.conj(ea.einsum(TETRA, *xs))), argnums=argnums
    )(*ops)
    _close(v, vw)
    _close(v0, vw)
    for a, b, c in zip(g, g0, gw):
        _close(a, c)
        _close(b, c)
    real = [x.real for x in ops]
    sq = lambda x, ex=ex: ea.einsum(TETRA, x, *real[1:], memory_limit=9, executor=ex) ** 2
    h = ea.hvp(sq, (real[0],), (real[3],))
    h0 = ea.hvp(lambda x: ea.einsum(TETRA, x, *real[1:]) ** 2, (real[0],), (real[3],))
    _close(h[0], h0[0])


# -- jit: the staged sliced equation dispatches to the executor --------------------------------


def test_jit_compiles_the_executor_into_the_program(client):
    ops = _ops([(4, 4, 4)] * 4)
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=24, executor=client)
    vg = ea.jit(ea.value_and_grad(f, argnums=(0, 1, 2, 3)))
    listing = str(vg.lower(*ops))
    assert re.search(r"einsum_vg\[abc,ade,bdf,cef->; wrt 0,1,2,3; sliced .*; on dask\]", listing), listing
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    for _ in range(2):  # the call that stages, then the compiled program's
        with distributed.get_task_stream(client) as stream:
            v, g = vg(*ops)
        assert _einad_tasks(stream), "the compiled program's slices ran on the cluster"
        _close(v, v0)
        for a, b in zip(g, g0):
            _close(a, b)
    assert vg.cache_size() == 1


def test_an_executor_passed_to_jit_is_static_and_keys_the_cache(client):
    """An executor is not a traced value: as an argument of a jitted function it is static
    (hashable, compared by identity), so each executor gets its own program."""
    ops = _ops([(4, 4, 4)] * 4)
    g = ea.jit(lambda ex, *xs: ea.grad(lambda *ys: ea.einsum(TETRA, *ys, memory_limit=24, executor=ex))(*xs))
    want = ea.grad(lambda *xs: ea.einsum(TETRA, *xs))(*ops)
    with cf.ThreadPoolExecutor(2) as threads:
        for ex in (client, client, threads, None):
            _close(g(ex, *ops), want)
    assert g.cache_size() == 3


def test_jacobians_and_vmap_run_on_the_executor(client):
    """vmap re-plans the sliced einsum with the batch letter and keeps its executor; jacfwd
    is one batched sliced einsum, jacrev one sweep per row of the Jacobian."""
    ops = _ops([(4, 3, 5), (4, 2, 3), (3, 2, 4)])
    f = lambda a: ea.einsum(OPEN, a, *ops[1:], memory_limit=20, executor=client)
    whole = lambda a: ea.einsum(OPEN, a, *ops[1:])
    batch = _ops([(3, 4, 3, 5)], seed=7)[0]
    for transform in (ea.jacfwd, ea.vmap):
        with distributed.get_task_stream(client) as stream:
            got = transform(f)(batch[0] if transform is ea.jacfwd else batch)
        assert _einad_tasks(stream), transform
        _close(got, transform(whole)(batch[0] if transform is ea.jacfwd else batch))
    small = _ops([(2, 3, 2), (2, 2, 3), (3, 2, 2)], seed=8)
    g = lambda a: ea.einsum(OPEN, a, *small[1:], memory_limit=6, executor=client)
    with distributed.get_task_stream(client) as stream:
        jac = ea.jacrev(g)(small[0])
    assert _einad_tasks(stream)
    _close(jac, ea.jacrev(lambda a: ea.einsum(OPEN, a, *small[1:]))(small[0]))


def test_contract_expression_takes_the_executor_at_its_call(client):
    ops = _ops([(4, 4, 4)] * 4)
    expr = ea.contract_expression(TETRA, *[(4, 4, 4)] * 4, memory_limit=24)
    assert expr.sliced_indices
    with distributed.get_task_stream(client) as stream:
        g = ea.grad(lambda *xs: expr(*xs, executor=client), argnums=(0, 3))(*ops)
    assert _einad_tasks(stream)
    for a, b in zip(g, ea.grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 3))(*ops)):
        _close(a, b)


# -- the tasks: operands sent once per call, batches, the tree of sums ----------------------


def test_operands_are_sent_once_per_call_not_once_per_task(client, monkeypatch):
    """One scatter per call, of exactly the call's data (the operands, and for a sweep the
    cotangent); no task carries an array of its own. An implementation sending the operands
    with every task (as arguments, or a scatter per task) fails one of the two counts."""
    scattered, carried = [], []
    real_scatter, real_submit = client.scatter, client.submit

    def scatter(data, *args, **kwargs):
        scattered.append(sum(x.nbytes for x in data))
        return real_scatter(data, *args, **kwargs)

    def submit(fn, *args, **kwargs):
        carried.append(sum(a.nbytes for a in args if isinstance(a, np.ndarray)))
        return real_submit(fn, *args, **kwargs)

    monkeypatch.setattr(client, "scatter", scatter)
    monkeypatch.setattr(client, "submit", submit)
    ops = _ops([(6, 6, 6)] * 4)
    _, info = ea.contract_path(TETRA, *ops, memory_limit=40, executor=client)
    assert info.tasks == len(cluster.guided(info.n_slices, 2)) and info.n_slices > info.tasks
    ea.grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40, executor=client), argnums=(0, 1, 2, 3))(*ops)
    operands = sum(x.nbytes for x in ops)
    one = np.ones(()).nbytes  # the one-pass gradient's cotangent, 1
    assert scattered == [operands + one]
    assert len(carried) > info.tasks and sum(carried) == 0
    scattered.clear()
    cot = _ops([(5, 3, 4)], seed=3)[0]
    three = _ops([(4, 3, 5), (4, 2, 3), (3, 2, 4)])
    _, pull = ea.vjp(lambda *xs: ea.einsum(OPEN, *xs, memory_limit=20, executor=client), *three)
    pull(cot)
    assert scattered == [sum(x.nbytes for x in three), cot.nbytes + sum(x.nbytes for x in three)]


def _clear_transfer_logs(dask_worker=None):
    dask_worker.transfer_incoming_log.clear()
    dask_worker.transfer_outgoing_log.clear()


def _transfers(dask_worker=None):
    """The transfers of a call's results (keys ``einad-...``) a worker made: (incoming from
    other workers, outgoing to anyone), each as (keys, bytes)."""

    def ours(log):
        return [
            (sorted(str(k) for k in e["keys"]), e["total"])
            for e in log
            if any(str(k).startswith("einad-") for k in e["keys"])
        ]

    return ours(dask_worker.transfer_incoming_log), ours(dask_worker.transfer_outgoing_log)


def test_each_worker_sends_one_partial_result(client):
    """The partial results stay where they are made: each worker thread's tasks add into one
    partial result on that worker, so one call moves one partial result from one worker to
    the other (the one sum) and one to the caller, whatever the number of tasks; the tasks
    are the layout's batches, one sum and one finishing task. (Summing the tasks' partial
    results by a tree over the tasks, as before, moved several partial results between
    the workers and ran a sum per task.)"""
    ops = _ops([(8, 8, 8)] * 4, seed=9)
    limit = 64
    _, info = ea.contract_path(TETRA, *ops, memory_limit=limit, executor=client)
    assert info.tasks >= 8 and info.tasks == len(cluster.guided(info.n_slices, 2))
    assert info.reduction_depth == 1
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit, executor=client)
    client.run(_clear_transfer_logs)
    with distributed.get_task_stream(client) as stream:
        v, g = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
    keys = [str(t["key"]) for t in stream.data if str(t["key"]).startswith("einad-")]
    kinds = sorted({k.split("-")[1] for k in keys})
    assert kinds == ["finish", "release", "slices", "sum"]
    assert [sum(k.startswith(f"einad-{x}-") for k in keys) for x in kinds] == [1, 2, info.tasks, 1]
    # every task of a chain ran on its worker: both workers worked, and each made one partial
    assert len({t["worker"] for t in stream.data if "einad-slices" in str(t["key"])}) == 2
    logs = client.run(_transfers)
    partial = sum(x.nbytes for x in ops) + 8  # the four gradients and the value
    incoming = [t for inc, _ in logs.values() for t in inc]
    assert len(incoming) == 1 and incoming[0][0][0].startswith("einad-release-")  # (a chain's last partial)
    assert partial <= incoming[0][1] < partial + 1024  # (dask weighs it by its arrays' bytes)
    outgoing = [t for _, out in logs.values() for t in out]
    assert sorted(keys[0].split("-")[1] for keys, _ in outgoing) == ["finish", "release"]  # the result
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    _close(v, v0)
    for a, b in zip(g, g0):
        _close(a, b)


def _count_scratches(dask_worker=None):
    """Count, in this worker process, the slices' scratches made (`rules.einsum._Scratch`)."""
    made = EINSUM.__dict__.setdefault("_scratches_made", [0])
    made[0] = 0
    raw = getattr(EINSUM, "_unpatched_scratch", EINSUM.scratch)
    EINSUM._unpatched_scratch = raw

    def counted():
        made[0] += 1
        return raw()

    EINSUM.scratch = counted


def _scratches_made(dask_worker=None):
    EINSUM.scratch = getattr(EINSUM, "_unpatched_scratch", EINSUM.scratch)
    return EINSUM._scratches_made[0]


def test_a_chains_tasks_share_their_buffers_on_the_worker(client):
    """The tasks of a chain run one after another on a worker thread, each on slices of the
    same shapes: the buffers the first made serve the rest (made once per call and chain,
    not once per task: at full size on benchmark case 10, two workers' calls went from 10.0
    to 9.1 s), and are let go after the chain's last task (`_assert_clean`)."""
    ops = _ops([(8, 8, 8)] * 4, seed=3)
    limit = 64
    _, info = ea.contract_path(TETRA, *ops, memory_limit=limit, executor=client)
    assert info.tasks >= 8
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit, executor=client)
    for run in (f, ea.value_and_grad(f, argnums=(0, 1, 2, 3))):
        client.run(_count_scratches)
        try:
            with distributed.get_task_stream(client) as stream:
                out = run(*ops)
        finally:
            made = client.run(_scratches_made)
        tasks = {}
        for t in stream.data:
            if "einad-slices" in str(t["key"]):
                tasks[t["worker"]] = tasks.get(t["worker"], 0) + 1
        assert len(tasks) == 2 and min(tasks.values()) >= 2  # both workers ran several tasks ...
        assert made == {w: 1 for w in tasks}  # ... each in the buffers of one scratch
        _assert_clean(client)
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    _close(out[0], v0)
    for a, b in zip(out[1], g0):
        _close(a, b)


def test_a_release_lets_go_of_its_own_chains_buffers_only(monkeypatch):
    """What chains keep is by call and chain: a chain's release lets go of its own (the other
    chains of the call on that worker still run), a call's end of all of the call's; outside a
    dask task nothing is kept (each call makes its own)."""
    monkeypatch.setattr(cluster, "_KEPT", {("t", 0): "a", ("t", 1): "b", ("u", 0): "c"})
    monkeypatch.setattr(cluster, "_ENDED", {})
    partial = object()
    assert cluster._released("t", 0, partial) is partial
    assert cluster._KEPT == {("t", 1): "b", ("u", 0): "c"}
    assert cluster._let_go("t") == 1 and cluster._KEPT == {("u", 0): "c"}
    made = [cluster.kept(list), cluster.kept(list)]
    assert made[0] is not made[1] and cluster._KEPT == {("u", 0): "c"}
    assert cluster._task_key("t", 3, 7) == "einad-slices-t-3-7"


def _late_task_of_an_ended_call(token):
    """On a worker, as a task of the call `token` (its key says so): the call's end has let go
    of everything there, and then the task starts (the scheduler had dropped it, the worker not
    yet) and asks for its chain's buffers."""
    cluster._let_go(token)
    made = cluster.kept(lambda: ["buffers"])
    return made == ["buffers"], sum(1 for k in cluster._KEPT if k[0] == token)


def test_a_task_that_starts_after_its_call_ended_keeps_nothing(client):
    """A failed call lets go of its chains' buffers on every worker once the scheduler forgot
    its tasks and no worker runs one; a task the worker had not started yet could start after
    that and keep buffers nobody would let go (seen once in the exception test under load)."""
    token = "late" + str(os.getpid())
    f = client.submit(_late_task_of_an_ended_call, token, key=cluster._task_key(token, 0, 0))
    assert f.result() == (True, 0)
    f.release()
    cluster._wait_forgotten(client, token, workers=True)
    _assert_clean(client)


def test_each_chain_keeps_its_own_buffers_on_a_worker_of_two_threads(monkeypatch):
    """A worker of two threads runs two chains: each keeps its own buffers (one scratch per
    chain, however many tasks it runs, and however its tasks move between the threads), a
    chain's release lets go of its own only, and nothing is kept after the call. (A cluster
    of threads in this process, so that the scratches are counted here.)"""
    made = []
    raw = EINSUM.scratch
    monkeypatch.setattr(EINSUM, "scratch", lambda: made.append(1) or raw())
    ops = _ops([(8, 8, 8)] * 4, seed=6)
    limit = 64
    with (
        distributed.LocalCluster(
            n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0", memory_limit=0
        ) as lc,
        distributed.Client(lc) as c,
    ):
        _, info = ea.contract_path(TETRA, *ops, memory_limit=limit, executor=c)
        assert info.tasks >= 8
        f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit, executor=c)
        with distributed.get_task_stream(c) as stream:
            v, g = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
        chains = {str(t["key"]).split("-")[3] for t in stream.data if "einad-slices" in str(t["key"])}
        assert chains == {"0", "1"} and len(made) == 2
        deadline = time.monotonic() + 5
        while cluster._KEPT and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not cluster._KEPT
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    _close(v, v0)
    for a, b in zip(g, g0):
        _close(a, b)


def _traced_peak():
    import tracemalloc

    return tracemalloc.get_traced_memory()[1]


def test_a_workers_peak_is_within_the_reported_bound(client):
    """tracemalloc in the worker processes during a value-and-gradient: the most a worker
    held stays within ``info.worker_peak`` (data, one slice and one partial result per
    thread, two partial results when summing), plus dask's own bookkeeping of the call's
    messages and tasks (tens of kilobytes per task, whatever the arrays' sizes: under 1 MiB
    here). Before, finished tasks' partial results piled up on a worker while it ran the
    next tasks: 23 MB here, twice the bound."""
    import tracemalloc

    ops = _ops([(48, 48, 48)] * 4, seed=10)
    limit = 55_296
    _, info = ea.contract_path(TETRA, *ops, memory_limit=limit, executor=client)
    assert info.n_slices > 50 and info.partial_size * 8 > 3 * 2**20
    f = ea.value_and_grad(
        lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit, executor=client), argnums=(0, 1, 2, 3)
    )
    f(*ops)  # (the workers import and plan once)
    client.run(tracemalloc.start)
    try:
        f(*ops)
        peaks = client.run(_traced_peak)
    finally:
        client.run(tracemalloc.stop)
    bookkeeping = 2 * 2**20
    bound = info.data_size + max(info.slice_gradient_peak, info.partial_size) + info.partial_size
    assert info.worker_peak == bound
    for peak in peaks.values():
        assert (info.data_size + info.partial_size) * 8 < peak <= info.worker_peak * 8 + bookkeeping


_CHAIN = """
import json, tracemalloc, numpy as np, einad as ea
from einad import cluster, slicing
from einad.rules import einsum as rules
ops = [np.random.default_rng(i).standard_normal((24, 24, 24)) for i in range(4)]
eq = "abc,ade,bdf,cef->"
path, info = ea.contract_path(eq, *ops, memory_limit=2_000)
s = slicing.schedule(
    ("abc", "ade", "bdf", "cef"), "", ((24, 24, 24),) * 4, tuple(map(tuple, path)), tuple(info.slices.items())
)
batches = cluster.layout("dask", s.n_slices, 1).batches()
one = np.ones(())
rules._sweep_batch(s, (0, 1, 2, 3), True, range(s.n_slices), None, None, one, *ops)  # (caches)
warm = None  # the chain once before: Python's free lists (tuples, ...) as full as they get, so
for b in batches:  # that the peak is the arrays' (not how full they were at import)
    warm = rules._sweep_batch(s, (0, 1, 2, 3), True, b, None, warm, one, *ops)
del warm
tracemalloc.start()
carry, in_place = None, True
for b in batches:
    out = rules._sweep_batch(s, (0, 1, 2, 3), True, b, None, carry, one, *ops)
    if carry is not None:
        in_place &= all(out[0][k] is carry[0][k] for k in range(4)) and out[2] is carry[2]
    carry = out
peak = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
v, g = ea.value_and_grad(lambda *xs: ea.einsum(eq, *xs), argnums=(0, 1, 2, 3))(*ops)
error = max(float(np.max(np.abs(carry[0][k] - g[k]))) for k in range(4)) + abs(float(carry[2] - v))
print(json.dumps(dict(peak=peak, tasks=len(batches), in_place=in_place, error=error,
                      slice=info.slice_gradient_peak, partial=info.partial_size)))
"""


def test_a_chain_of_tasks_adds_into_one_partial_result_within_the_bound():
    """The tasks of one worker thread, run under tracemalloc (in a fresh process: this one
    runs the module's cluster's scheduler, whose allocations tracemalloc would count): each
    adds its slices into the partial result the task before it left (the same arrays,
    written in place), and the most they hold besides the operands is one slice and one
    partial result, as ``contract_path`` reports (`slice_gradient_peak` + `partial_size`, in
    array elements; the Python objects of a task and its slices add tens of kilobytes)."""
    import json

    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    run = [sys.executable, "-c", _CHAIN]
    out = subprocess.run(run, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["tasks"] >= 4 and r["in_place"] and r["error"] < 1e-9
    assert r["partial"] * 8 < r["peak"] <= (r["slice"] + r["partial"]) * 8 + 64 * 1024


def test_the_batch_rule():
    """On dask: one chain per thread, tasks of the slices left over 2 x chains (guided), the
    chains' partial results summed by a tree over the chains; elsewhere one task per worker."""
    assert cluster.guided(100, 2) == [25, 18, 14, 10, 8, 6, 4, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1]
    lay = cluster.layout("dask", 100, 2)
    assert (lay.tasks, lay.batch, lay.chains, lay.depth) == (17, 25, 2, 1)
    batches = lay.batches()
    assert [len(b) for b in batches] == cluster.guided(100, 2)
    assert [i for b in batches for i in b] == list(range(100))  # contiguous runs, in order
    few = cluster.layout("dask", 3, 8)  # never more chains than slices
    assert (few.tasks, few.chains, few.depth) == (3, 3, 2)
    big = cluster.layout("dask", 10_000, 16)
    assert (big.chains, big.depth) == (16, 4)  # 16 partial results, summed in 4 levels
    assert len(cluster.guided(10_000, 16)) < 16 * 20  # tasks grow as chains x log(slices)
    futures = cluster.layout("futures", 100, 3)
    assert (futures.tasks, futures.batch, futures.depth) == (3, 34, 0)
    assert sorted(i for b in futures.batches() for i in b) == list(range(100))


def test_contract_path_reports_the_tasks(client, pool):
    ops = _ops([(6, 6, 6)] * 4)
    _, info = ea.contract_path(TETRA, *ops, memory_limit=40, executor=client)
    sizes = cluster.guided(info.n_slices, 2)
    assert (info.executor, info.executor_threads, info.reduction_depth) == ("dask", 2, 1)
    assert (info.tasks, info.batch) == (len(sizes), sizes[0])
    assert info.partial_size == info.data_size == 4 * 216 + 1 and info.hoisted_size == 0
    bound = info.data_size + max(info.slice_gradient_peak, info.partial_size) + info.partial_size
    assert info.worker_peak == bound
    text = "\n".join(info.summary())
    cut = f"slices run as {len(sizes)} tasks of up to {sizes[0]} slices on a dask cluster of 2 worker threads"
    assert cut in text
    assert f"a worker holds at most {info.worker_peak:,} elements" in text
    _, info = ea.contract_path(TETRA, *ops, memory_limit=40, executor=pool)
    assert (info.executor, info.tasks, info.reduction_depth) == ("ProcessPoolExecutor", 2, 0)
    assert "summed by the caller" in "\n".join(info.summary())
    _, plain = ea.contract_path(TETRA, *ops, memory_limit=40)
    assert plain.tasks is None and plain.executor is None


def test_a_wrong_executor_is_a_type_error_at_the_call():
    ops = _ops([(2, 2)] * 2)
    for call in (
        lambda: ea.einsum("ij,jk->ik", *ops, executor="tcp://localhost:8786"),
        lambda: ea.contract_path("ij,jk->ik", *ops, executor=4),
        lambda: ea.contract_expression("ij,jk->ik", (2, 2), (2, 2))(*ops, executor=object()),
    ):
        with pytest.raises(TypeError, match="dask.distributed.Client or a concurrent.futures.Executor"):
            call()


def test_another_librarys_arrays_through_an_executor():
    """torch tensors through an executor: each task sums only its own slices' blocks of a
    gradient (`_Blocks` fills the blocks it did not reach with zeros), and the result and the
    gradients are torch tensors. dask arrays are refused: they are tasks already."""
    torch = pytest.importorskip("torch", reason="torch is not installed (pip install 'einad[torch]')")
    shapes = [(4, 3, 5), (4, 2, 3), (3, 2, 4)]
    ops = _ops(shapes)
    tops = [torch.tensor(x) for x in ops]
    loss = lambda *xs, ex=None: ea.sum(ea.einsum(OPEN, *xs, memory_limit=20, executor=ex) ** 2)
    want = ea.grad(lambda *xs: ea.sum(ea.einsum(OPEN, *xs) ** 2), argnums=(0, 1, 2))(*ops)
    with cf.ThreadPoolExecutor(2) as ex:
        got = ea.grad(lambda *xs: loss(*xs, ex=ex), argnums=(0, 1, 2))(*tops)
        assert all(isinstance(g, torch.Tensor) for g in got)
        for a, b in zip(got, want):
            _close(a.numpy(), b)
        scalar = ea.grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=24, executor=ex), argnums=(0, 3))
        four = _ops([(4, 4, 4)] * 4)
        for a, b in zip(
            scalar(*[torch.tensor(x) for x in four]),
            ea.grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 3))(*four),
        ):
            _close(a.numpy(), b)
        da = pytest.importorskip("dask.array", reason="dask.array is not installed")
        with pytest.raises(TypeError, match="dask arrays are tasks already"):
            ea.einsum(OPEN, *[da.from_array(x) for x in ops], memory_limit=20, executor=ex).numpy()


# -- progress -----------------------------------------------------------------------------------


@pytest.mark.parametrize("tqdm", [True, False], ids=["tqdm", "plain"])
@pytest.mark.parametrize("where", ["threads", "dask"])
def test_progress_over_slices(request, capfd, monkeypatch, tqdm, where):
    if tqdm:
        pytest.importorskip("tqdm", reason="tqdm is not installed")
    else:
        monkeypatch.setitem(sys.modules, "tqdm", None)  # import tqdm fails: the plain line
    ex = request.getfixturevalue("client") if where == "dask" else None
    ops = _ops([(6, 6, 6)] * 4)
    _, info = ea.contract_path(TETRA, *ops, memory_limit=40)
    ea.grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40, executor=ex, progress=True))(*ops)
    err = capfd.readouterr().err
    n = info.n_slices
    if tqdm:
        assert "einad slices: 100%" in err and f"{n}/{n}" in err
    else:
        assert err.rstrip("\n").endswith(f"einad slices: {n}/{n}")
    ea.grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40, executor=ex))(*ops)
    assert capfd.readouterr().err == ""  # no bar unless asked


# -- faults -------------------------------------------------------------------------------------


def _marked(shape_seed=4):
    """Operands of TETRA with the marker in A[1, 2, 3], and the slices that hold it."""
    ops = _ops([(6, 6, 6)] * 4, seed=shape_seed)
    ops[0][1, 2, 3] = MARKER
    return ops


def _named_slice(err, ops, limit):
    """The slice the message of `err` names, checked to hold the marker of operand A."""
    m = re.search(r"\[in slice (\d+) of (\d+) \(([^)]*)\)\]", str(err))
    assert m, str(err)
    assert any("einad: raised in slice" in note for note in getattr(err, "__notes__", ()))
    path, info = ea.contract_path(TETRA, *ops, memory_limit=limit)
    s = slicing.schedule(
        ("abc", "ade", "bdf", "cef"),
        "",
        ((6, 6, 6),) * 4,
        tuple(map(tuple, path)),
        tuple(info.slices.items()),
    )
    i = int(m.group(1))
    assert int(m.group(2)) == s.n_slices
    ranges = s.slice_ranges(i)
    for c, at in zip("abc", (1, 2, 3)):
        if c in ranges:
            assert ranges[c][0] <= at < ranges[c][1], (ranges, m.group(3))
    return i


def test_an_exception_in_a_task_reaches_the_caller_with_its_slice(client):
    ops = _marked()
    client.run(_install, marker=MARKER)
    try:
        f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40, executor=client)
        with pytest.raises(ZeroDivisionError, match="met the marker") as info:
            f(*ops)
        _named_slice(info.value, ops, 40)
        _assert_clean(client)
        with pytest.raises(ZeroDivisionError, match="met the marker") as info:
            ea.grad(f)(*ops)
        _named_slice(info.value, ops, 40)
        _assert_clean(client)
    finally:
        client.run(_uninstall)
    _close(f(*ops), np.einsum(TETRA, *ops))  # the cluster is usable again


def _one_over(x):
    return 1 / x


def test_a_call_cancelled_after_a_task_failed_reports_the_failure(client):
    """Tasks after a failed one may be cancelled before they fail with it (a loaded cluster);
    the call then tells the caller the failed task's exception, which its held future keeps,
    not dask's FutureCancelledError."""
    ok, bad = client.submit(_one_over, 2.0, pure=False), client.submit(_one_over, 0, pure=False)
    for f in (ok, bad):
        try:
            f.result()
        except ZeroDivisionError:
            pass
    assert isinstance(cluster._failure([ok, bad]), ZeroDivisionError)
    assert cluster._failure([ok]) is None
    ok.release()
    bad.release()


def test_an_exception_in_a_process_pool_task_and_in_the_thread_pool(monkeypatch):
    ops = _marked()
    with (
        cf.ProcessPoolExecutor(
            2, mp_context=multiprocessing.get_context("spawn"), initializer=_install, initargs=(0.0, MARKER)
        ) as ex,
        pytest.raises(ZeroDivisionError, match="met the marker") as info,
    ):
        ea.grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40, executor=ex))(*ops)
    _named_slice(info.value, ops, 40)
    monkeypatch.setattr(slicing, "threads", 2)
    monkeypatch.setattr(EINSUM, "_slice_step", EINSUM._slice_step)
    monkeypatch.setattr(EINSUM, "_unpatched_slice_step", EINSUM._slice_step, raising=False)
    _install(marker=MARKER)  # in this process: the thread pool's slices
    with pytest.raises(ZeroDivisionError, match="met the marker") as info:
        ea.einsum(TETRA, *ops, memory_limit=40)
    _named_slice(info.value, ops, 40)
    assert not [t for t in threading.enumerate() if t.name.startswith("einad-slice")]


def test_ctrl_c_cancels_the_outstanding_tasks(client):
    """KeyboardInterrupt in the caller (as Ctrl-C raises it) while the slices run: the call
    raises it at once, the scheduler forgets the call's tasks, and the tasks running on the
    workers stop at their next slice, well before the slices left would take."""
    # (Python's own handler: a process started in the background by a shell without job
    # control inherits SIGINT ignored, and this test would then see no interrupt at all)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    ops = _ops([(6, 6, 6)] * 4)
    client.run(_install, delay=0.05)  # 3 steps of 50 ms per slice, 36 slices: about 3 s
    try:
        started = threading.Event()

        def interrupt():
            deadline = time.monotonic() + 20
            while not any(client.processing().values()) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
            started.set()
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C does (interrupt_main wakes no wait)

        threading.Thread(target=interrupt, daemon=True).start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            try:
                ea.grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40, executor=client))(*ops)
            finally:
                interrupted = time.monotonic()
        assert started.is_set() and interrupted - t0 < 1.5
        deadline = time.monotonic() + 5  # (Ctrl-C does not wait for the cluster)
        while time.monotonic() < deadline and (
            client.run_on_scheduler(_scheduler_tasks) or any(n for n, _ in client.run(_worker_tasks).values())
        ):
            time.sleep(0.02)
        assert time.monotonic() - t0 < 2.0, "the running tasks stopped at their next slice"
        _assert_clean(client)
    finally:
        client.run(_uninstall)
        signal.signal(signal.SIGINT, previous)


def test_a_killed_worker_is_replaced_and_the_values_are_the_same(client):
    """A worker process killed (SIGKILL) while it runs its tasks and holds partial results:
    dask reruns what it lost; the value and the gradients are those of the unsliced
    contraction. (Last in the module: the cluster gets a fresh worker.)"""
    ops = _ops([(6, 6, 6)] * 4, seed=5)
    pids = client.run(_install, delay=0.03)
    victim = min(pids)
    killed = threading.Event()

    def kill():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            busy = [k for k in client.processing().get(victim, ()) if "einad-slices" in str(k)]
            held = [k for k in client.has_what().get(victim, ()) if "einad-" in str(k)]
            if busy and held:  # running a batch, and holding a finished one (or a sum)
                os.kill(pids[victim], signal.SIGKILL)
                killed.set()
                return
            time.sleep(0.005)

    thread = threading.Thread(target=kill, daemon=True)
    thread.start()
    try:
        f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40, executor=client)
        v, g = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
        returned = killed.is_set()
        thread.join()
    finally:
        client.run(_uninstall)
    assert returned, "the worker was killed while the call ran"
    assert victim not in client.nthreads()
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    _close(v, v0)
    for a, b in zip(g, g0):
        _close(a, b)
    _assert_clean(client)
    client.wait_for_workers(2, timeout=30)


# -- dask's own command line --------------------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_cluster_started_with_the_dask_command_line(tmp_path):
    """``dask scheduler`` and two ``dask worker`` processes on localhost, as a user starts
    them (einad importable on the workers: here through PYTHONPATH), a gradient through
    them, and the cluster shut down."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    dask = [sys.executable, "-m", "dask"]
    common = {"env": env, "cwd": tmp_path, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [*dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"], **common
        )
    ]
    worker = ["worker", address, "--nthreads", "1", "--no-dashboard", "--memory-limit", "0"]
    worker += ["--local-directory", str(tmp_path)]
    procs += [subprocess.Popen([*dask, *worker, "--name", f"w{i}"], **common) for i in range(2)]
    try:
        with distributed.Client(address, timeout=60) as c:
            c.wait_for_workers(2, timeout=60)
            ops = _ops([(5, 5, 5)] * 4, seed=6)
            loss = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=30, executor=c) ** 2
            with distributed.get_task_stream(c) as stream:
                g = ea.grad(loss, argnums=(0, 1, 2, 3))(*ops)
            assert {t["worker"] for t in stream.data if "einad-slices" in str(t["key"])} == set(c.nthreads())
            g0 = ea.grad(lambda *xs: ea.einsum(TETRA, *xs) ** 2, argnums=(0, 1, 2, 3))(*ops)
            for a, b in zip(g, g0):
                _close(a, b)
            assert c.run_on_scheduler(_scheduler_tasks) == 0
            c.shutdown()
        for p in procs:
            assert p.wait(timeout=30) is not None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
