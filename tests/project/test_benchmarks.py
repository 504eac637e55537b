"""Smoke test of the benchmark suite (no timing assertions).

Runs ``python -m benchmarks --quick --engines einad,manual`` from the
repository root, as a user would, and checks that it exits 0 and prints a
table with every case. Also checks the `manual` engine's hand-written pairwise
backward, since every engine is judged against it, and the `einad-jit` engine:
reported absent when einad has no ``jit``, and run on every case (first-call
cost and memory peak included) when it has. And the array-library rows:
`einad-torch` (einad on torch tensors, every case, next to `torch`) and `einad-dask-1`,
`einad-dask-2` (einad on chunked dask arrays, case 5a), checked against manual like every
engine, and reported absent (not failed) without their library. And the networks group
(n1-n4, issue 22; needs cotengra): every engine's value and gradients checked against manual
on the same cotengra path, every engine's first calls reported, and the planning report. And the
MPS group (m1, m2, issue 23; needs quimb and cotengra): the energy of an MPS, by einsum and by
quimb's own contraction, every engine checked against manual, whose gradient is checked here.
"""

import gc
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np
import opt_einsum as oe
import pytest
from opt_einsum.testing import rand_equation

import einad

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))  # this file is in tests/project/
sys.path.insert(0, ROOT)

from benchmarks import runner as runner_mod  # noqa: E402  (after the sys.path line above)
from benchmarks import timing  # noqa: E402
from benchmarks.__main__ import parse  # noqa: E402
from benchmarks.cases import CASES  # noqa: E402
from benchmarks.engines import PairwiseContraction, TorchEngine  # noqa: E402
from benchmarks.runner import Runner  # noqa: E402


def _run_suite(tmp_path_factory, options):
    """`python -m benchmarks` with `options`, in a subprocess: (stdout, the JSON record)."""
    record = tmp_path_factory.mktemp("bench") / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", *options, "--json", str(record)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout, json.loads(record.read_text())


# The quick runs the fixtures below read (a third of the suite's time) would run one after
# another while pytest keeps one of the two cores: the first fixture that needs one starts
# every one of them, each in its own process, and each fixture waits for its own.
_STARTED: dict = {}  # name -> (process, JSON record, stdout file, stderr file)


def _quick_runs() -> dict:
    """Each quick run's options, for the runs whose libraries are installed."""
    runs = {"quick": ["--quick", "--engines", "einad,manual,einad-jit"]}
    if HAVE_TORCH or HAVE_DASK:
        runs["library"] = ["--quick", "--threads", "1", "--engines", ",".join(LIBRARY_ENGINES)]
    if HAVE_COTENGRA:
        options = ["--quick", "--threads", "1", "--cases", "networks", "--planning"]
        runs["networks"] = [*options, "--engines", ",".join(NETWORK_ENGINES)]
    if HAVE_QUIMB:
        runs["mps"] = ["--quick", "--threads", "1", "--cases", "mps", "--engines", ",".join(MPS_ENGINES)]
    return runs


def _finished(tmp_path_factory, name, check=True):
    """The quick run `name` (every one started at the first call): (stdout, the JSON record).
    `check`: its exit status must be 0 (else its record must exist)."""
    if not _STARTED:
        for run, options in _quick_runs().items():
            where = tmp_path_factory.mktemp(f"bench-{run}")
            out, err = open(where / "stdout", "w+"), open(where / "stderr", "w+")  # noqa: SIM115
            command = [sys.executable, "-m", "benchmarks", *options, "--json", str(where / "run.json")]
            _STARTED[run] = (
                subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err, text=True),
                where,
                out,
                err,
            )
    proc, where, out, err = _STARTED[name]
    proc.wait(timeout=600)
    out.seek(0)
    err.seek(0)
    stdout, stderr = out.read(), err.read()
    record = where / "run.json"
    if check:
        assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert record.exists(), stdout[-3000:] + stderr[-3000:]
    return stdout, json.loads(record.read_text())


@pytest.fixture(scope="module", autouse=True)
def _no_quick_run_left():
    """No quick run outlives the module (one that no selected test waited for is stopped)."""
    yield
    for proc, _, out, err in _STARTED.values():
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        out.close()
        err.close()
    _STARTED.clear()


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """One `--quick` run of einad, manual and einad-jit: (stdout, the JSON record)."""
    return _finished(tmp_path_factory, "quick")


AVAILABLE = [case for case in CASES if case.missing() is None]  # the networks need cotengra


def test_quick_run_prints_every_case(quick_run):
    stdout, data = quick_run
    for case in AVAILABLE:
        assert f"case {case.key}:" in stdout, case.key
    assert data["errors"] == []
    for case in AVAILABLE:
        engines = {
            r["engine"].split(" ")[0] for r in data["rows"] if r["case"] == case.key and r["status"] == "ok"
        }
        assert {"einad", "manual"} <= engines, (case.key, engines)


def test_einad_jit_is_absent_without_ea_jit(monkeypatch, capsys):
    monkeypatch.delattr(einad, "jit", raising=False)
    runner = Runner(parse(["--quick", "--cases", "6a", "--engines", "einad-jit"]))
    assert runner.run() == 0
    assert "einad-jit" in runner.absent and "no ea.jit" in runner.absent["einad-jit"]
    assert not [r for r in runner.rows if r.engine.startswith("einad-jit")]
    assert "absent: einad-jit" in capsys.readouterr().out


@pytest.mark.parametrize("order", ["cases", "engines"])
def test_the_run_order(order, capsys):
    """`--order cases` (the default) times each case's rounds of every engine back to back, so
    the rows a ratio compares are close in time; `--order engines` each engine's block of all
    the cases, round after round. The blocks, in the order they ran, say which."""
    options = ["--quick", "--cases", "1,2", "--engines", "manual,einad", "--rounds", "2"]
    runner = Runner(parse(options + ([] if order == "cases" else ["--order", "engines"])))
    assert runner.run() == 0
    blocks = sorted(
        ((b["block"], b["round"], name, tuple(b["cases"])) for name, bs in runner.busy.items() for b in bs)
    )
    ran = [(rnd, name, cases) for _, rnd, name, cases in blocks]
    if order == "cases":
        assert ran == [
            (rnd, name, (case,)) for case in ("1", "2") for rnd in (0, 1) for name in ("manual", "einad")
        ]
    else:
        assert ran == [(rnd, name, ("1", "2")) for rnd in (0, 1) for name in ("manual", "einad")]
    out = capsys.readouterr().out
    assert "einad #2" in out and "best of 2 rounds" in out
    assert ("in 2 blocks" in out) == (order == "cases")  # a round's blocks pooled per engine
    rows = {(r.case, r.engine): r for r in runner.rows}
    assert all(
        rows[(c, e)].status == "ok" and len(rows[(c, e)].rounds) == 2
        for c in "12"
        for e in ("manual", "einad")
    )


def test_rounds_keep_the_best_medians_and_the_first_rounds_first_calls():
    """With `--rounds N` a row keeps each median's best round, but its first calls are the first
    round's: a later round finds the kernels the first compiled (einad-jit's cache directory and
    copy kernels), so its first call would be a warm one."""
    runner = Runner(parse(["--quick", "--cases", "1", "--engines", "manual"]))
    runner._add(runner_mod.Row("n1", "einad-jit", forward=2.0, vg=5.0, first_forward=0.5, first_vg=2.5))
    runner._add(runner_mod.Row("n1", "einad-jit", forward=1.5, vg=6.0, first_forward=0.01, first_vg=0.05))
    (row,) = runner.rows
    assert (row.forward, row.vg) == (1.5, 5.0)
    assert (row.first_forward, row.first_vg) == (0.5, 2.5)


@pytest.fixture
def unfrozen_heap():
    """The heap as a process outside pytest has it: unfrozen (the module's heap, frozen by
    `conftest._frozen_heap`, is frozen again afterwards)."""
    gc.unfreeze()
    try:
        yield
    finally:
        gc.freeze()


def _frozen(obj) -> bool:
    """Whether `obj` is out of the collector's sight (`gc.get_objects` lists only the objects
    it walks)."""
    return not any(o is obj for o in gc.get_objects())


def test_a_block_freezes_what_the_run_made_before_it(monkeypatch):
    """Each block's timings run with what was alive when the block started frozen, objects made
    after the run began included (an engine loaded for the block: torch, JAX), so the
    collections before each timing walk only the block's own objects (without it they walked
    every library's, 40 s of a 50 s quick run). Fails if only the run's freeze remains."""
    loaded, seen = [], []
    real_load, real_measure = Runner.load, runner_mod.measure

    def load(self, engine):
        loaded.append([engine.name])  # made after the run's freeze, alive through the block
        return real_load(self, engine)

    def measure(fn, budget):
        seen.append(all(_frozen(marker) for marker in loaded))
        return real_measure(fn, budget)

    monkeypatch.setattr(Runner, "load", load)
    monkeypatch.setattr(runner_mod, "measure", measure)
    runner = Runner(parse(["--quick", "--cases", "1", "--engines", "manual,einad"]))
    assert runner.run() == 0
    assert len(loaded) == 2 and len(seen) >= 2 and all(seen)


def test_a_run_keeps_the_heap_frozen_from_block_to_block(monkeypatch, unfrozen_heap):
    """A run freezes the heap once, around all its blocks, and lets go of it once, at its end:
    a block that unfroze the heap on its way out left the next block's first collection to walk
    every library again (30 of the 50 s of a quick run of torch's and dask's engines)."""
    real = gc.unfreeze
    unfrozen = []

    def spy():
        unfrozen.append(len(runner.busy.get("einad", [])))
        real()

    monkeypatch.setattr(gc, "unfreeze", spy)
    runner = Runner(parse(["--quick", "--cases", "1,2", "--engines", "manual,einad"]))
    assert runner.run() == 0
    monkeypatch.undo()
    assert len(runner.busy["manual"]) == len(runner.busy["einad"]) == 2  # four blocks ran
    assert unfrozen == [2]  # once, after the last block
    assert gc.get_freeze_count() == 0  # and the heap is the caller's again


def test_a_frozen_heap_inside_another_does_not_count_the_frozen_objects(monkeypatch):
    """`gc.get_freeze_count` counts the frozen objects one by one (0.05 s a call with every
    library loaded, as long as a block's collection): a `frozen_heap` opened inside another, as
    every block's is inside its run's, knows the heap is frozen without asking."""
    real = gc.get_freeze_count
    counted = []
    with timing.frozen_heap():
        monkeypatch.setattr(gc, "get_freeze_count", lambda: counted.append(1) or real())
        with timing.frozen_heap():
            pass
        monkeypatch.undo()
    assert counted == []


def test_frozen_heap_lets_go_of_what_it_froze(unfrozen_heap):
    assert gc.get_freeze_count() == 0
    with timing.frozen_heap():
        inside = gc.get_freeze_count()
        with timing.frozen_heap():  # frozen already: left frozen on the way out
            pass
        assert gc.get_freeze_count() >= inside
    assert inside > 10_000 and gc.get_freeze_count() == 0


def test_quick_run_einad_jit(quick_run):
    stdout, data = quick_run
    assert "einad-jit" not in data["absent"]
    for case in AVAILABLE:
        rows = [r for r in data["rows"] if r["case"] == case.key and r["engine"].startswith("einad-jit")]
        assert rows and all(r["status"] == "ok" for r in rows), (case.key, rows)
        for r in rows:  # the first call, the steady state and the memory peak, on every row
            assert r["first_forward"] > 0 and r["first_vg"] > 0 and r["vg"] > 0, r
            assert r["peak"] is not None, r
    assert len([r for r in data["rows"] if r["case"] == "8" and r["engine"].startswith("einad-jit")]) == 3
    assert "1st fwd" in stdout


HAVE_TORCH = importlib.util.find_spec("torch") is not None
HAVE_DASK = importlib.util.find_spec("dask") is not None
LIBRARY_ENGINES = ["torch", "einad-torch", "einad-dask-1", "einad-dask-2"]


@pytest.fixture(scope="module")
def library_run(tmp_path_factory):
    """One `--quick --threads 1` run of the array-library engines and torch: (stdout, JSON record).
    The exit status is not checked here: each test looks at its own engines' errors."""
    if not (HAVE_TORCH or HAVE_DASK):
        pytest.skip("neither torch nor dask is installed (pip install -e '.[torch,dask]')")
    return _finished(tmp_path_factory, "library", check=False)


def _errors(data, engine):
    return [e for e in data["errors"] if f", {engine}" in e or e.startswith(engine)]


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed (pip install -e '.[torch]')")
def test_quick_run_einad_torch(library_run):
    stdout, data = library_run
    assert _errors(data, "einad-torch") == [] and "einad-torch" not in data["absent"]
    for case in AVAILABLE:
        rows = [r for r in data["rows"] if r["case"] == case.key and r["engine"].startswith("einad-torch")]
        assert rows and all(r["status"] == "ok" and r["vg"] > 0 for r in rows), (case.key, rows)
    assert len([r for r in data["rows"] if r["case"] == "8" and r["engine"].startswith("einad-torch")]) == 3
    assert "vg/torch" in stdout  # the ratio to torch.autograd, on the rows where torch ran
    assert "on torch" in data["versions"]["einad-torch"]


@pytest.mark.skipif(not HAVE_DASK, reason="dask is not installed (pip install -e '.[dask]')")
def test_quick_run_einad_dask(library_run):
    stdout, data = library_run
    for name in ("einad-dask-1", "einad-dask-2"):
        assert _errors(data, name) == []
        rows = [r for r in data["rows"] if r["engine"] == name]
        assert [r["case"] for r in rows] == ["5a"], rows  # case 5a only, and no row elsewhere
        assert rows[0]["status"] == "ok" and rows[0]["vg"] > 0 and rows[0]["forward"] > 0
        assert "threads scheduler" in data["versions"][name]
    assert "vg/einad-dask-1" in stdout


def test_library_engines_are_absent_without_their_library(monkeypatch, capsys):
    from benchmarks import engines

    real = importlib.util.find_spec
    monkeypatch.setattr(
        engines.importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("torch", "dask") else real(name, *a),
    )
    runner = Runner(parse(["--quick", "--cases", "6a", "--engines", "einad-torch,einad-dask-1"]))
    assert runner.run() == 0
    assert "torch is not installed" in runner.absent["einad-torch"]
    assert "dask is not installed" in runner.absent["einad-dask-1"]
    assert not [r for r in runner.rows if r.engine.startswith(("einad-torch", "einad-dask"))]
    assert "absent: einad-torch" in capsys.readouterr().out


HAVE_DISTRIBUTED = importlib.util.find_spec("distributed") is not None
CLUSTER_ENGINES = ["einad-threads-2", "einad-cluster-1", "einad-cluster-2"]


@pytest.mark.skipif(
    not HAVE_DISTRIBUTED, reason="dask.distributed is not installed (pip install -e '.[cluster]')"
)
def test_quick_run_sliced_case_on_a_cluster(tmp_path_factory):
    """Issue 24: case 10 with its slices on two in-process threads and as tasks on LocalClusters
    of one and two worker processes, checked against manual; the rows' notes (a worker's peak,
    the ratios the targets are about, where the CPU time went); and the cluster report: the
    overhead per task fitted, and the tasks and the tree depth recorded on 1-16 workers as
    `einad.cluster.layout` predicts."""
    options = ["--quick", "--threads", "1", "--cases", "10", "--cluster"]
    stdout, data = _run_suite(tmp_path_factory, [*options, "--engines", ",".join(CLUSTER_ENGINES)])
    assert data["errors"] == []
    for name in CLUSTER_ENGINES:
        rows = [r for r in data["rows"] if r["engine"] == name]
        assert [r["case"] for r in rows] == ["10"], rows
        assert rows[0]["status"] == "ok" and rows[0]["vg"] > 0 and rows[0]["forward"] > 0
    for name in CLUSTER_ENGINES[1:]:
        detail = next(r["detail"] for r in data["rows"] if r["engine"] == name)
        assert detail.startswith("worker peak ") and "tasks of up to" in detail, detail
        assert ", bound " in detail and "cpu: workers " in detail, detail
        assert "LocalCluster" in data["versions"][name]
    assert "vg/einad-cluster-1" in stdout and "vg/einad-threads-2" in stdout
    overhead = data["cluster"]["overhead"]
    assert np.isfinite(overhead["per_task_s"]) and len(overhead["rows"]) >= 3
    assert [r["tasks"] for r in overhead["rows"]] == sorted(r["tasks"] for r in overhead["rows"])
    simulated = data["cluster"]["simulate"]
    assert [r["workers"] for r in simulated] == [1, 4, 16]  # --quick's clusters
    for r in simulated:
        assert (r["batches"], r["depth"]) == (r["predicted"][0], r["predicted"][2]), r
        # one partial result per worker thread, summed by a tree over the workers
        assert r["sums"] == r["predicted"][1] == r["workers"] - 1 and r["workers_used"] == r["workers"]
    assert "least squares:" in stdout and "tasks and reduction depth" in stdout


def test_cluster_engines_are_absent_without_distributed(monkeypatch):
    from benchmarks import engines

    real = importlib.util.find_spec
    monkeypatch.setattr(
        engines.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "distributed" else real(name, *a),
    )
    runner = Runner(parse(["--quick", "--cases", "10", "--engines", "einad-cluster-2"]))
    assert runner.run() == 0
    assert "dask.distributed is not installed" in runner.absent["einad-cluster-2"]
    assert not [r for r in runner.rows if r.engine.startswith("einad-cluster")]


def test_unknown_engine_is_refused():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--engines", "nope"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "unknown engine" in proc.stderr


def _reference_grads(eq, ops):
    """Gradients of Σ einsum(eq, ops) by one N-operand contraction per operand."""
    lhs, out = eq.split("->")
    subs = lhs.split(",")
    sizes = {c: d for s, o in zip(subs, ops) for c, d in zip(s, o.shape)}
    seed = np.ones([sizes[c] for c in out])
    grads = []
    for k, sk in enumerate(subs):
        others = subs[:k] + subs[k + 1 :]
        alone = "".join(c for c in sk if c not in out + "".join(others))
        ones = np.ones([sizes[c] for c in alone])
        text = ",".join([out, alone] + others) + "->" + sk
        grads.append(oe.contract(text, seed, ones, *(ops[:k] + ops[k + 1 :])))
    return grads


@pytest.mark.parametrize(
    "eq, shapes",
    [
        ("ab,bc,cd->", [(3, 4), (4, 5), (5, 2)]),
        ("abx,bc,cy->ay", [(2, 3, 4), (3, 5), (5, 6)]),
        ("abx,bc,cy,yz->", [(2, 3, 4), (3, 5), (5, 6), (6, 2)]),
        ("αβ,βγ,γα->α", [(2, 3), (3, 4), (4, 2)]),  # a step numpy.einsum runs, its letters renamed
    ]
    + [rand_equation(n, 3, d_min=2, d_max=4, seed=s) for n, s in [(6, 1), (10, 3), (12, 0)]],
)
def test_manual_pairwise_backward(eq, shapes):
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    pc = PairwiseContraction(eq, shapes)
    np.testing.assert_allclose(pc.value(*ops), oe.contract(eq, *ops), rtol=1e-10)
    value, grads = pc.value_and_grad(*ops)
    np.testing.assert_allclose(value, oe.contract(eq, *ops), rtol=1e-10)
    for g, r in zip(grads, _reference_grads(eq, ops)):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=1e-9, atol=1e-9)


# -- the networks group (issue 22) ----------------------------------------------------------------

HAVE_COTENGRA = all(importlib.util.find_spec(m) is not None for m in ("cotengra", "networkx"))
needs_cotengra = pytest.mark.skipif(not HAVE_COTENGRA, reason="cotengra or networkx is not installed")
NETWORK_KEYS = ["n1", "n2", "n3", "n4"]
# every engine that runs the group (autograd is skipped there, the dask engines run case 5a only)
# JAX by jax-jit only: its eager engine compiles each of the networks' hundreds of steps apart
# (seconds each run) and checks nothing jax-jit does not
NETWORK_ENGINES = ["einad", "einad-jit", "opt_einsum", "jax-jit", "torch", "einad-torch", "autograd"]


@pytest.fixture(scope="module")
def networks_run(tmp_path_factory):
    """One `--quick --cases networks` run of every engine (those not installed are absent), with
    the planning report: (stdout, the JSON record)."""
    if not HAVE_COTENGRA:
        pytest.skip("cotengra or networkx is not installed (pip install -e '.[bench]')")
    return _finished(tmp_path_factory, "networks")


@needs_cotengra
def test_networks_agree_across_engines(networks_run):
    """Each engine's value and gradients passed the check against manual's (same path, 1e-6),
    complex128 gradients in n2 included (torch's conjugated back to JAX's convention)."""
    stdout, data = networks_run
    assert data["errors"] == []
    assert [k for k, c in data["cases"].items() if c["group"] == "networks"] == NETWORK_KEYS
    ran = [e for e in NETWORK_ENGINES if e not in data["absent"]]
    assert {"einad", "einad-jit", "opt_einsum"} <= set(ran)
    for key in NETWORK_KEYS:
        assert f"case {key}:" in stdout
        rows = {r["engine"]: r for r in data["rows"] if r["case"] == key}
        assert rows["manual"]["status"] == "ok"
        for name in ran:
            if name == "autograd":  # no path: its einsum VJP contracts all operands at once
                assert rows[name]["status"] == "skipped" and "one numpy.einsum call" in rows[name]["detail"]
                continue
            assert rows[name]["status"] == "ok", (key, rows[name])


@needs_cotengra
def test_networks_report_every_engines_first_call(networks_run):
    """The group's columns: forward, vg (vg/fwd), the first calls of every engine, eager ones too
    (manual's are not: they computed the references), and the memory peak of numpy engines."""
    stdout, data = networks_run
    for r in data["rows"]:
        if r["status"] != "ok" or r["engine"] == "manual":
            continue
        assert r["forward"] > 0 and r["first_forward"] > 0, r
        if r["engine"] != "opt_einsum":
            assert r["vg"] > 0 and r["first_vg"] > 0, r
        assert (r["peak"] is not None) == (r["engine"] in ("einad", "einad-jit")), r
    manual = [r for r in data["rows"] if r["engine"] == "manual"]
    assert all(r["first_vg"] is None and r["peak"] > 0 for r in manual)
    assert "1st vg" in stdout and "every engine's first calls" in stdout


@needs_cotengra
def test_planning_report(networks_run):
    """`--planning`: einad's jit lowering and first eager calls on random regular graphs of 50 and
    100 tensors (--quick), each timed in its own process; every quick network is within numpy.einsum's 52
    indices per step, so each has its times and no error."""
    stdout, data = networks_run
    records = data["planning"]
    assert [r["tensors"] for r in records] == [50, 100]
    for r in records:
        assert r["widest_step"] <= 52 and "lower_error" not in r and "eager_error" not in r, r
        assert "pairwise_error" not in r and r["pairwise_s"] > 0, r
        assert r["lower_s"] > 0 and r["first_vg_s"] > 0 and r["second_vg_s"] > 0, r
    assert "planning scale" in stdout


@needs_cotengra
def test_multiply_adds_of_a_chain_and_its_sweep():
    """The count behind the networks group's "vg/fwd in multiply-adds": a chain of three
    matrices by hand, its sweep once per operand that needs a cotangent."""
    from benchmarks.cases import multiply_adds

    i, j, k, m = 2, 3, 5, 7
    shapes = [(i, j), (j, k), (k, m)]
    path = [(0, 1), (0, 1)]  # (ij,jk->ik), then (ik,km->im)
    forward = i * j * k + i * k * m
    assert multiply_adds("ij,jk,km->im", shapes, path, range(3)) == (forward, 2 * forward)
    # only the first matrix: one pullback per step (to ik, then to ij)
    assert multiply_adds("ij,jk,km->im", shapes, path, [0]) == (forward, forward)
    # only the last: one pullback at the last step; the first step's result needs none
    assert multiply_adds("ij,jk,km->im", shapes, path, [2]) == (forward, i * k * m)
    assert multiply_adds("ij,jk,km->im", shapes, path, []) == (forward, 0)
    # a letter only one operand has is summed first: the product loops over i, j, k only
    assert multiply_adds("ijx,jk->ik", [(i, j, 11), (j, k)], [(0, 1)], [0, 1]) == (i * j * k, 2 * i * j * k)


@pytest.mark.parametrize("seed", range(4))
def test_a_sweep_of_every_operand_costs_twice_the_forward(seed):
    """Along any pairwise path, the gradients of all operands cost twice the forward's
    multiply-adds (so vg/fwd is 3 in arithmetic); and the forward is no more than the path's
    cost as opt_einsum counts it (a multiply and an add per term, and the letters only one
    operand has in each step's loop)."""
    from benchmarks.cases import multiply_adds

    eq, shapes = rand_equation(6, 3, seed=seed, d_min=2, d_max=4)
    path, info = oe.contract_path(eq, *shapes, shapes=True, optimize="greedy")
    fwd, sweep = multiply_adds(eq, shapes, path, range(6))
    assert sweep == 2 * fwd
    assert 0 < fwd <= info.opt_cost


def test_the_planning_reports_pairwise_contraction_is_the_network():
    """The report's `pairwise` row lowers a function that contracts the network one
    two-operand einsum per step of the path: it gives the network's value (opt_einsum's), and
    its jitted gradient merges back into one network (one `einsum_vg`)."""
    import einad as ea
    from benchmarks.planning import greedy_path, network, pairwise_contraction

    con = network("lattice:3x4")
    path = greedy_path(con)
    f = pairwise_contraction(con.inputs, con.output, path)
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal([2] * len(t)) / 2 for t in con.inputs]
    eq = ",".join("".join(t) for t in con.inputs) + "->"
    np.testing.assert_allclose(f(*xs), oe.contract(eq, *xs), rtol=1e-10)
    program = ea.jit(ea.value_and_grad(f, argnums=tuple(range(len(xs))))).lower(*xs)
    assert [e.prim.name for e in program.equations].count("einsum_vg") == 1


@needs_cotengra
def test_network_equation_writes_opt_einsums_symbols():
    """A network's indices (cotengra's symbols, quimb's names) become opt_einsum's symbols in
    order of first appearance, keeping the structure; n1's quick network (52 tensors, 78
    indices) then holds symbols that are not letters ('×' is symbol 75), which einad, JAX,
    torch and the hand-written sweep are given as they are, and they agree."""
    from benchmarks.cases import network_equation

    names = ["bond-x", "bond-y", "bond-z", "site"]
    eq = network_equation([names[:2], names[1:3], names[2:]], [names[0], names[3]])
    assert eq == "ab,bc,cd->ad"
    case = next(c for c in CASES if c.key == "n1").build(True)
    symbols = set(case.notes) - set(",->")
    assert symbols == {oe.get_symbol(i) for i in range(78)} and "×" in symbols
    value = case.manual_forward(*case.arrays)
    np.testing.assert_allclose(case.loss(einad, *case.arrays), value, rtol=1e-10)
    np.testing.assert_allclose(oe.contract(case.notes, *case.arrays), value, rtol=1e-10)
    if importlib.util.find_spec("torch") is not None:
        torch = TorchEngine()
        torch.load()
        args = [torch.convert(a) for a in case.arrays]
        np.testing.assert_allclose(torch.to_numpy(torch.forward(case, args)()), value, rtol=1e-10)


@needs_cotengra
def test_network_path_is_seeded():
    """One path per case, the same on every search (so for every engine and every run), and
    operands drawn from fixed seeds."""
    import cotengra as ctg

    from benchmarks.cases import network_path

    con = ctg.utils.randreg_equation(52, 3, d_min=2, d_max=2, seed=1)
    paths = [network_path(con.inputs, con.output, con.size_dict) for _ in range(2)]
    assert paths[0] == paths[1] and len(paths[0]) == 51
    a, b = (next(c for c in CASES if c.key == "n1").build(True) for _ in range(2))
    assert a.notes == b.notes
    for x, y in zip(a.arrays, b.arrays):
        np.testing.assert_array_equal(x, y)


@needs_cotengra
def test_manual_complex_gradient_follows_jax_convention():
    """n2's reference gradient of |Z|² is ∂L/∂Re x − i·∂L/∂Im x (JAX's and einad's convention),
    checked by central differences on a few entries."""
    p = next(c for c in CASES if c.key == "n2").build(True)
    _value, grads = p.manual_vag(*p.arrays)
    h = 1e-6

    def loss_at(k, index, delta):
        ops = [np.array(a) for a in p.arrays]
        ops[k][index] += delta
        return float(p.manual_forward(*ops))

    for k, index in [(0, (0, 0, 0)), (5, (1, 0, 1)), (15, (1, 1, 1))]:
        d_re = (loss_at(k, index, h) - loss_at(k, index, -h)) / (2 * h)
        d_im = (loss_at(k, index, 1j * h) - loss_at(k, index, -1j * h)) / (2 * h)
        np.testing.assert_allclose(grads[k][index], d_re - 1j * d_im, rtol=1e-5, atol=1e-9)


def test_networks_are_absent_without_cotengra(monkeypatch, capsys):
    from benchmarks import cases

    real = importlib.util.find_spec
    monkeypatch.setattr(
        cases.importlib.util, "find_spec", lambda name, *a: None if name == "cotengra" else real(name, *a)
    )
    runner = Runner(parse(["--quick", "--cases", "networks,6a", "--engines", "manual"]))
    assert runner.run() == 0
    assert "cotengra is not installed" in runner.absent["cases n1,n2,n3,n4"]
    assert {r.case for r in runner.rows} == {"6a"}
    assert "absent: cases n1,n2,n3,n4" in capsys.readouterr().out


def test_planning_widest_step():
    from benchmarks.planning import widest_step

    # a chain of four tensors: pairing neighbours along it keeps every step at 2 indices; the
    # middle pair first, or the two ends (an outer product, `a` kept for the output), take 3
    chain = [["a"], ["a", "b"], ["b", "c"], ["c"]]
    assert widest_step(chain, [], [(0, 1), (0, 1), (0, 1)]) == 2
    assert widest_step(chain, [], [(1, 2), (0, 1), (0, 1)]) == 3
    assert widest_step(chain, ["a"], [(0, 3), (0, 1), (0, 1)]) == 3


# -- the MPS group (issue 23) -----------------------------------------------------------------------

HAVE_QUIMB = all(importlib.util.find_spec(m) is not None for m in ("quimb", "cotengra"))
needs_quimb = pytest.mark.skipif(not HAVE_QUIMB, reason="quimb or cotengra is not installed")
MPS_ENGINES = ["einad", "einad-jit", "opt_einsum", "jax", "jax-jit", "torch", "einad-torch", "autograd"]
# the engines a case skips, and a word of the reason
MPS_SKIPS = {
    "m1": {"autograd": "one numpy.einsum call"},
    "m2": {"autograd": "autograd's boxes", "opt_einsum": "not an einsum", "jax": "quimb's JAX users jit"},
}


@pytest.fixture(scope="module")
def mps_run(tmp_path_factory):
    """One `--quick --cases mps` run of every engine (those not installed are absent)."""
    if not HAVE_QUIMB:
        pytest.skip("quimb or cotengra is not installed (pip install -e '.[bench]')")
    return _finished(tmp_path_factory, "mps")


@needs_quimb
def test_mps_energy_agrees_across_engines(mps_run):
    """Every engine that runs the group passed the check against manual (value and every MPS
    array's gradient, 1e-6): by einsum along the one path (m1), and through quimb's own
    contraction on the engine's arrays (m2); its first calls are reported."""
    stdout, data = mps_run
    assert data["errors"] == []
    assert [k for k, c in data["cases"].items() if c["group"] == "mps"] == ["m1", "m2"]
    ran = [e for e in MPS_ENGINES if e not in data["absent"]]
    assert {"einad", "einad-jit", "opt_einsum"} <= set(ran)
    for key, skips in MPS_SKIPS.items():
        assert f"case {key}:" in stdout
        rows = {r["engine"]: r for r in data["rows"] if r["case"] == key}
        assert rows["manual"]["status"] == "ok"
        for name in ran:
            if name in skips:
                assert rows[name]["status"] == "skipped" and skips[name] in rows[name]["detail"], rows[name]
                continue
            r = rows[name]
            assert r["status"] == "ok" and r["first_forward"] > 0, (key, r)
            assert name == "opt_einsum" or (r["vg"] > 0 and r["first_vg"] > 0), (key, r)  # it: forward only


@needs_quimb
def test_mps_manual_is_the_energy_and_its_gradient():
    """manual's value is quimb's energy <psi|H|psi>/<psi|psi> of the case's arrays, and its gradient
    (the quotient rule over the two networks, each ket array counted as bra and ket) matches
    central differences; m1 and m2 are the same problem."""
    import quimb.tensor as qtn

    p, q = (next(c for c in CASES if c.key == k).build(True) for k in ("m1", "m2"))
    n = len(p.argnums)
    for x, y in zip(p.arrays, q.arrays):
        np.testing.assert_array_equal(x, y)
    psi = qtn.MatrixProductState([np.array(a) for a in p.arrays[:n]])
    ham = qtn.MatrixProductOperator([np.array(a) for a in p.arrays[n:]])
    value, grads = p.manual_vag(*p.arrays)
    energy = qtn.expec_TN_1D(psi.H, ham, psi) / (psi.H @ psi)
    np.testing.assert_allclose(value, energy, rtol=1e-12)
    np.testing.assert_allclose(p.manual_forward(*p.arrays), energy, rtol=1e-12)
    h = 1e-6
    for k, index in [(0, (0, 1)), (2, (1, 2, 0)), (n - 1, (3, 1))]:
        ops = [np.array(a) for a in p.arrays]
        ops[k][index] += h
        up = p.manual_forward(*ops)
        ops[k][index] -= 2 * h
        down = p.manual_forward(*ops)
        np.testing.assert_allclose(grads[k][index], (up - down) / (2 * h), rtol=1e-5, atol=1e-9)


def test_the_compiler_comparison_runs(capsys):
    """``python -m benchmarks.compilers`` (docs/design.md's numbers on the choice of compiler)."""
    pytest.importorskip("numba", reason="numba is not installed (pip install -e '.[bench]')")
    pytest.importorskip("numexpr", reason="numexpr is not installed (pip install -e '.[bench]')")
    from einad import kernels

    if kernels.unavailable() is not None:
        pytest.skip(kernels.unavailable())
    from benchmarks import compilers

    compilers.main(["8", "--quick"])
    out = capsys.readouterr().out
    assert "case 8: 1 kernels" in out
    for name in ("llvmlite", "numba", "numexpr"):
        assert f"  {name}" in out and "compile" in out


def test_measure_reports_the_cores_a_call_keeps_busy():
    """`measure`'s `cores`: about 1 for a call that computes, near 0 for one that waits."""
    from benchmarks.timing import Budget, measure

    budget = Budget(
        warm_calls=0, warm_seconds=0.0, min_reps=5, min_seconds=0.05, max_reps=50, max_seconds=0.2
    )

    def spin(seconds=0.005):
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    alone = measure(spin, budget)
    # (one core, and what the process's other threads add, a library's pool that earlier tests
    # in this worker started: 1.36 seen in the suite; on a machine busy with other processes,
    # such as the suite's other worker, a computing call gets part of one: 0.50 seen there)
    assert 0.2 < alone.cores < 1.6
    assert alone.as_dict()["cores"] == alone.cores

    def sleep():
        time.sleep(0.005)

    waiting = measure(sleep, budget)
    # waiting is not work (the process's other threads, a library's pool, may still add some:
    # 0.11 seen in the suite's worker), and far less of it than computing
    assert waiting.cores < 0.5 and alone.cores > 2 * waiting.cores


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="--cores needs os.sched_setaffinity (Linux)")
def test_cores_holds_the_process_and_its_later_threads_to_n_cores():
    """`--cores 1` holds the suite's process to one core before any library starts a thread:
    a thread started afterwards (XLA's, OpenBLAS's) inherits the one core."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("this process may run on one core only: nothing to hold")
    code = (
        "import os, threading\n"
        "from benchmarks.__main__ import limit_cores, parse\n"
        "assert parse(['--cores', '1']).cores == 1\n"
        "limit_cores(1)\n"
        "seen = []\n"
        "t = threading.Thread(target=lambda: seen.append(len(os.sched_getaffinity(0))))\n"
        "t.start(); t.join()\n"
        "print(len(os.sched_getaffinity(0)), seen[0])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "1"]
