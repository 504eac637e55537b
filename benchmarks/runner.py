"""The run: references, the engines' blocks, the table, JSON and plot.

Order of work: build every case and compute `manual`'s references; then the
blocks, each one engine's runs of one case (``--order cases``, the default: a
case's rounds of every engine back to back) or of every case (``--order
engines``), each case of a block one after another. In a block, for each case:
check the engine's value and gradient against `manual` (a mismatch is an error,
reported at the end, and the exit status is 1), time the forward and the
value-and-gradient (medians after warm-up), and, for the numpy-based engines,
record tracemalloc's peak during one value-and-gradient call. For a staged
engine (``einad-jit``, ``jax-jit``) the checking call is the first call of a
freshly staged function, so it is timed too: the first-call cost (trace,
optimize, compile and run). In the networks group (n1-n4) every engine's first
calls are reported, the eager ones' too (their planning and caches).
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import cases as cases_mod
from .engines import ENGINE_NAMES, EngineAbsent, all_engines
from .timing import FULL, QUICK, Busy, Progress, frozen_heap, machine_info, measure, peak_memory

# a crash of one of these is an error, not a row: einad's own engines, on any array library or
# executor, and the references
OURS = {name for name in ENGINE_NAMES if name.startswith("einad")} | {"manual", "opt_einsum"}
# engines whose memory numpy reports
TRACEMALLOC = {"einad", "einad-jit", "einad-jit-numpy", "manual", "autograd"}
RTOL = 1e-6  # relative (2-norm) tolerance of every check against manual
# engine -> the engines it is measured against, besides manual: its table rows end in
# "vg/<other> r, fwd/<other> r" (the same HVP mode where there are several)
YARDSTICKS = {
    "einad-jit": ("jax-jit", "einad-jit-numpy"),
    "einad-torch": ("torch",),
    "einad-dask-1": ("einad",),
    "einad-dask-2": ("einad", "einad-dask-1"),
    # issue 24: two workers against one, and against the in-process pool of two threads
    "einad-cluster-1": ("einad-threads-2",),
    "einad-cluster-2": ("einad-threads-2", "einad-cluster-1"),
}


@dataclass
class Row:
    case: str
    engine: str  # the row label: engine name, plus the HVP mode where there are several
    status: str = "ok"  # ok | absent | skipped | crashed | error
    detail: str = ""
    forward: float | None = None  # seconds (per op for case 7)
    vg: float | None = None  # value-and-gradient, or the HVP in case 8
    first_forward: float | None = None  # staged engines: the first call (trace, compile, run)
    first_vg: float | None = None
    peak: float | None = None  # bytes
    retained: float | None = None
    reps: dict = field(default_factory=dict)
    rounds: list = field(default_factory=list)  # the timing record of every round


def _mismatch(got: Any, ref: Any, what: str) -> str | None:
    got = np.asarray(got)
    ref = np.asarray(ref)
    if got.shape != ref.shape:
        return f"{what}: shape {got.shape}, manual has {ref.shape}"
    if got.dtype != ref.dtype:
        return f"{what}: dtype {got.dtype}, manual has {ref.dtype}"
    if not np.all(np.isfinite(got)):
        return f"{what}: not finite"
    err = float(np.linalg.norm((got - ref).ravel()))
    scale = float(np.linalg.norm(ref.ravel()))
    if err > RTOL * scale + 1e-300:
        return f"{what}: relative error {err / max(scale, 1e-300):.2e} (tolerance {RTOL:g})"
    return None


def _check_vag(result, ref, engine) -> str | None:
    value, grads = engine.to_numpy(result)
    if engine.conjugate_grads:  # PyTorch's convention for complex inputs: back to JAX's
        grads = [np.conj(g) for g in grads]
    rvalue, rgrads = ref
    bad = _mismatch(np.asarray(value, dtype=np.float64), np.float64(rvalue), "value")
    if bad:
        return bad
    if len(grads) != len(rgrads):
        return f"{len(grads)} gradients, manual has {len(rgrads)}"
    for k, (g, r) in enumerate(zip(grads, rgrads)):
        bad = _mismatch(g, r, f"gradient {k}")
        if bad:
            return bad
    return None


def _fmt_time(seconds: float | None, per_op: bool) -> str:
    if seconds is None:
        return "-"
    if per_op:
        return f"{seconds * 1e6:.1f} µs"
    if seconds >= 10:
        return f"{seconds:.1f} s"
    ms = seconds * 1e3
    if ms >= 100:
        return f"{ms:.0f} ms"
    if ms >= 1:
        return f"{ms:.2f} ms"
    return f"{ms * 1e3:.0f} µs"


def _release_pools() -> None:
    """Let einad's plans drop the buffers they keep between calls (`einad.network`'s pools),
    so that the measured call allocates, and tracemalloc sees, every buffer it uses; what a
    plan keeps for its next call then shows as `retained`."""
    network = sys.modules.get("einad.network")
    if network is not None and hasattr(network, "release_pools"):
        network.release_pools()


def _cores(t) -> str:
    """A note when the timed calls kept more than one core busy (a library's own threads)."""
    return f"vg on {t.cores:.1f} cores" if t.cores > 1.15 else ""


def _first_call(fn) -> tuple:
    """(result, seconds) of one call of `fn`."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _busy_lines(name: str, blocks: list[dict]) -> list[tuple[str, str]]:
    """An engine's busy-ness lines, one per round: its block's summary, or where a round ran
    several blocks (one a case: `--order cases`), those pooled: their wall times summed, the
    cores busy averaged over them by wall time."""
    rounds: dict[int, list[dict]] = {}
    for b in blocks:
        rounds.setdefault(b["round"], []).append(b)
    lines = []
    for rnd, mine in rounds.items():
        label = name if len(rounds) == 1 else f"{name} #{rnd + 1}"
        if len(mine) == 1:
            lines.append((label, mine[0]["summary"]))
            continue
        wall = sum(b["wall_s"] for b in mine)
        text = f"{wall:.1f} s in {len(mine)} blocks"
        timed = [b for b in mine if b["machine_cores_busy"] is not None and b["wall_s"] > 0]
        if timed:
            span = sum(b["wall_s"] for b in timed)
            busy = sum(b["machine_cores_busy"] * b["wall_s"] for b in timed) / span
            others = sum((b["other_processes_cores"] or 0.0) * b["wall_s"] for b in timed) / span
            text += f", machine {busy:.2f} cores busy, others {others:.2f}"
        lines.append((label, text))
    return lines


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or b <= 0:
        return "-"
    return f"{a / b:.2f}x"


class Runner:
    def __init__(self, args):
        self.args = args
        self.budget = QUICK if args.quick else FULL
        self.absent: dict[str, str] = {}  # engine (or group of cases) -> why it does not run
        self.cases = self._available(cases_mod.select(args.cases))
        names = [n.strip() for n in args.engines.split(",")] if args.engines else list(ENGINE_NAMES)
        unknown = [n for n in names if n not in ENGINE_NAMES]
        if unknown:
            raise SystemExit(f"unknown engine(s) {unknown}; choose from {', '.join(ENGINE_NAMES)}")
        if "manual" not in names:
            names.insert(0, "manual")  # the reference every engine is checked against
        self.engines = [e for e in all_engines() if e.name in names]
        self.rows: list[Row] = []
        self.errors: list[str] = []
        self.busy: dict[str, list] = {}  # engine -> one record per round
        self.versions: dict[str, str] = {}
        self.round = 0  # the round being run (from 0)
        self.planning: list | None = None  # the planning report's records (--planning)
        self.cluster: dict | None = None  # the cluster report (--cluster)

    def _available(self, cases: list) -> list:
        """`cases` less those whose module is missing (cotengra for the networks group), which
        are listed as absent: with the case keys named, like the engines."""
        missing: dict[str, list[str]] = {}
        for case in cases:
            why = case.missing()
            if why is not None:
                missing.setdefault(why, []).append(case.key)
        for why, keys in missing.items():
            self.absent[f"cases {','.join(keys)}"] = why
        return [c for c in cases if c.missing() is None]

    # -- references ---------------------------------------------------------------------

    def build(self) -> None:
        self.problems = {}
        self.refs = {}
        for case in self.cases:
            p = case.build(self.args.quick)
            self.problems[case.key] = p
            fwd = p.manual_forward(*p.arrays)
            if p.kind == "hvp":
                self.refs[case.key] = (fwd, p.manual_hvp(*p.arrays, p.tangent))
            else:
                value, grads = p.manual_vag(*p.arrays)
                bad = _mismatch(np.float64(fwd), np.float64(value), "manual forward vs manual value")
                if bad:
                    self.errors.append(f"case {case.key}: {bad}")
                self.refs[case.key] = (fwd, (value, grads))

    # -- one engine, one case ----------------------------------------------------------------

    def run_case(self, engine, case) -> None:
        p = self.problems[case.key]
        ref_fwd, ref = self.refs[case.key]
        scale = 1.0 / p.ops if p.ops else 1.0
        if engine.only is not None and case.key not in engine.only:
            return  # an engine for some cases only (the dask rows): no row elsewhere
        if engine.name in p.skip:
            self._add(Row(case.key, engine.name, "skipped", p.skip[engine.name]))
            return
        if engine.name == "opt_einsum" and p.ops:
            self._add(Row(case.key, engine.name, "skipped", "no contraction in this case"))
            return
        try:
            args = tuple(engine.convert(a) for a in p.arrays)
            forward = engine.forward(p, args)
            out, first_fwd = _first_call(forward)
            bad = _mismatch(np.asarray(engine.to_numpy(out), dtype=np.float64), np.float64(ref_fwd), "value")
            del out
            if bad:
                self._error(case, engine.name, "forward " + bad)
                return
            if not engine.grad:
                jobs = {}
            elif p.kind == "hvp":
                jobs = engine.hvp(p, args, engine.convert(p.tangent))
                if not jobs:
                    self._add(Row(case.key, engine.name, "skipped", "no HVP here"))
                    return
            else:
                jobs = {"": engine.value_and_grad(p, args)}
            first = {}
            for label, fn in jobs.items():
                out, first[label] = _first_call(fn)
                if p.kind == "hvp":
                    bad = _mismatch(engine.to_numpy(out), ref, "HVP")
                else:
                    bad = _check_vag(out, ref, engine)
                del out
                if bad:
                    self._error(case, f"{engine.name} {label}".strip(), bad)
                    return
            # timing
            t_fwd = measure(forward, self.budget)
            # whether the first calls are reported: a staged engine's (each round stages afresh),
            # and in the networks group an eager one's in the first round (later rounds find its
            # caches warm); never manual's, whose first calls computed the references
            staged = engine.staged or (p.first_calls and engine.name != "manual" and self.round == 0)
            if not jobs:
                self._add(
                    Row(
                        case.key,
                        engine.name,
                        forward=t_fwd.median * scale,
                        first_forward=first_fwd * scale if staged else None,
                        detail="forward only",
                        reps={"forward": t_fwd.as_dict()},
                    )
                )
            for label, fn in jobs.items():
                t = measure(fn, self.budget)
                reps = {"forward": t_fwd.as_dict(), "vg": t.as_dict()}
                if staged:
                    reps.update(first_forward_s=first_fwd, first_vg_s=first[label])
                row = Row(
                    case.key,
                    f"{engine.name} {label}".strip(),
                    forward=t_fwd.median * scale,
                    vg=t.median * scale,
                    first_forward=first_fwd * scale if staged else None,
                    first_vg=first[label] * scale if staged else None,
                    reps=reps,
                )
                if engine.name in TRACEMALLOC:
                    _release_pools()
                    row.peak, row.retained = peak_memory(fn)
                kept = row.retained or 0
                kept_note = f"keeps {kept / 2**20:.1f} MiB for the next call" if kept >= 2**16 else ""
                row.detail = ", ".join(filter(None, [engine.note(p, fn), _cores(t), kept_note]))
                self._add(row)
        except Exception as err:
            msg = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if engine.name in OURS:
                self._error(case, engine.name, "raised " + msg + "\n" + traceback.format_exc())
            else:
                self._add(Row(case.key, engine.name, "crashed", msg[:160]))

    def _add(self, row: Row) -> None:
        """Record a row; with several rounds, keep each time's best median over the rounds."""
        old = next((r for r in self.rows if r.case == row.case and r.engine == row.engine), None)
        if old is None:
            row.rounds = [row.reps] if row.reps else []
            self.rows.append(row)
            return
        if old.status != "ok" or row.status != "ok":  # a failure in any round stands
            if row.status != "ok" and old.status == "ok":
                self.rows[self.rows.index(old)] = row
            return
        old.rounds.append(row.reps)
        for attr in ("forward", "vg", "peak"):
            new = getattr(row, attr)
            if new is not None and (getattr(old, attr) is None or new < getattr(old, attr)):
                setattr(old, attr, new)
        # a first call is the first round's: later rounds stage afresh but find the process's
        # caches warm (einad's compiled kernels on disk and its copy kernels in memory), so their
        # best would be a warm first call, which JAX's (compiled anew for each new function) is not
        for attr in ("first_forward", "first_vg"):
            if getattr(old, attr) is None:
                setattr(old, attr, getattr(row, attr))

    def _error(self, case, engine: str, msg: str) -> None:
        self.errors.append(f"case {case.key}, {engine}: {msg}")
        self._add(Row(case.key, engine, "error", msg.splitlines()[0][:160]))

    # -- the whole run ---------------------------------------------------------------------

    def load(self, engine) -> str | None:
        """Import `engine` and warm its staging up; None when it is ready, else why it is
        absent. A failure other than a missing package is an error for einad's own engines."""
        try:
            engine.load()
            engine.warm_up()
        except EngineAbsent as err:
            return str(err)
        except Exception as err:
            msg = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            if engine.name in OURS:
                self.errors.append(f"{engine.name}: failed to load: {msg}\n{traceback.format_exc()}")
            return f"failed to load: {msg[:160]}"
        return None

    def run(self) -> int:
        self.machine = machine_info()
        self.build()
        rounds = max(1, self.args.rounds)
        progress = Progress(rounds * len(self.engines) * len(self.cases))
        # The heap stays frozen from block to block (`frozen_heap`): each block's entry then
        # collects and freezes only what the blocks before it left alive (a library an engine
        # loaded, caches), not every library's objects again.
        with frozen_heap(), Busy() as whole:
            if self.args.order == "engines":
                for rnd in range(rounds):
                    for engine in self.engines:
                        self._block(engine, self.cases, rnd, rounds, progress)
            else:
                for case in self.cases:
                    for rnd in range(rounds):
                        for engine in self.engines:
                            self._block(engine, [case], rnd, rounds, progress)
        progress.close()
        for engine in self.engines:
            engine.close()
        self.whole = whole
        self.planning = self.plan_report() if self.args.planning else None
        self.cluster = self.cluster_report() if getattr(self.args, "cluster", False) else None
        print(self.table())
        if self.args.json:
            self.write_json(self.args.json)
        if self.args.plot:
            self.plot(self.args.plot)
        if self.errors:
            print(f"\n{len(self.errors)} ERROR(S):", file=sys.stderr)
            for e in self.errors:
                print("  " + e.replace("\n", "\n    "), file=sys.stderr)
            return 1
        return 0

    def _block(self, engine, cases: list, rnd: int, rounds: int, progress) -> None:
        """One engine's block of `cases` in round `rnd`: loaded (or found absent) before its first
        block, its busy-ness recorded around the block."""
        self.round = rnd
        if engine.name in self.absent:
            progress.done += len(cases)
            return
        if engine.name not in self.versions:
            reason = engine.check_installed()
            if reason is None:
                reason = self.load(engine)
            if reason is not None:
                self.absent[engine.name] = reason
                for _case in cases:
                    progress.step(f"{engine.name}: absent")
                return
            self.versions[engine.name] = engine.version
        tag = f"round {rnd + 1}/{rounds} · " if rounds > 1 else ""
        with frozen_heap(), Busy() as block:
            for case in cases:
                progress.show(f"{tag}{engine.name} · case {case.key} {case.title}")
                self.run_case(engine, case)
                progress.step(f"{tag}{engine.name} · case {case.key} done")
        record = block.as_dict()
        record["summary"] = block.summary()
        record["cases"] = [c.key for c in cases]
        record["round"] = rnd
        record["block"] = sum(len(b) for b in self.busy.values())  # its place in the run
        self.busy.setdefault(engine.name, []).append(record)

    def plan_report(self) -> list | None:
        """The planning-scale records (`benchmarks.planning`), or None without cotengra or
        networkx (said absent)."""
        from . import planning

        why = cases_mod.missing_modules(planning.REQUIRES)
        if why is not None:
            self.absent["planning report"] = why
            return None
        print("planning report: one fresh process per measurement ...", file=sys.stderr)
        return planning.run(self.args.quick)

    def cluster_report(self) -> dict | None:
        """The cluster report (`benchmarks.cluster`), or None without dask.distributed (said absent)."""
        from . import cluster

        why = cases_mod.missing_modules(cluster.REQUIRES)
        if why is not None:
            self.absent["cluster report"] = why
            return None
        print("cluster report: LocalClusters of 1-16 workers ...", file=sys.stderr)
        return cluster.run(self.args.quick)

    # -- reporting -------------------------------------------------------------------------

    def table(self) -> str:
        m = self.machine
        staged = any(r.first_forward is not None for r in self.rows)  # show the first-call columns
        every_first = any(self.problems[c.key].first_calls for c in self.cases)
        lines = [
            f"einad benchmarks ({'quick' if self.args.quick else 'full'}) — {m['date']}",
            (
                f"machine: {m['cores']} cores, {m['cpu']}, {m['memory_gib']} GiB; Python {m['python']}, "
                f"numpy {m['numpy']} ({m['blas']}); threads: {self.args.threads or 'library defaults'}"
                + (f"; held to {self.args.cores} cores" if getattr(self.args, "cores", None) else "")
            ),
            "versions: " + ", ".join(f"{k} {v}" for k, v in self.versions.items()),
            (
                "medians after warm-up; vg = value-and-gradient (case 8: the Hessian-vector product); "
                "ratios vg/fwd, vg/manual, fwd/opt_einsum; peak = tracemalloc peak of one vg call"
                + (
                    "; 1st fwd, 1st vg = the first call of a staged (jit) engine's fresh function: "
                    "trace, optimize, compile and run"
                    if staged
                    else ""
                )
                + (
                    " (networks group: every engine's first calls, eager ones' planning included)"
                    if every_first
                    else ""
                )
                + (f"; best of {self.args.rounds} rounds" if self.args.rounds > 1 else "")
            ),
            "",
        ]
        head = (
            f"{'engine':<24}{'forward':>11}{'vg':>11}{'vg/fwd':>9}"
            f"{'vg/manual':>11}{'fwd/oe':>9}{'peak MiB':>10}"
        )
        if staged:
            head += f"{'1st fwd':>11}{'1st vg':>11}"
        for case in self.cases:
            p = self.problems[case.key]
            per_op = bool(p.ops)
            rows = [r for r in self.rows if r.case == case.key]
            manual = next((r for r in rows if r.engine == "manual" and r.status == "ok"), None)
            oe = next((r for r in rows if r.engine == "opt_einsum" and r.status == "ok"), None)
            unit = "µs per op" if per_op else "per call"
            what = "; vg column = HVP" if p.kind == "hvp" else ""
            lines.append(f"case {case.key}: {case.title} — {p.size} ({unit}{what})")
            lines.append("  " + head)
            for r in rows:
                if r.status != "ok":
                    lines.append(f"  {r.engine:<24}{r.status}: {r.detail}")
                    continue
                peak = f"{r.peak / 2**20:.1f}" if r.peak is not None else "-"
                note = ", ".join(filter(None, [r.detail, *self._against(r, rows)]))
                lines.append(
                    "  "
                    + f"{r.engine:<24}{_fmt_time(r.forward, per_op):>11}{_fmt_time(r.vg, per_op):>11}"
                    + f"{_ratio(r.vg, r.forward):>9}{_ratio(r.vg, manual.vg if manual else None):>11}"
                    + (
                        f"{_ratio(r.forward, oe.forward if oe else None):>9}"
                        if r.engine != "opt_einsum"
                        else " " * 9
                    )
                    + f"{peak:>10}"
                    + (
                        f"{_fmt_time(r.first_forward, per_op):>11}{_fmt_time(r.first_vg, per_op):>11}"
                        if staged
                        else ""
                    )
                    + (f"  ({note})" if note else "")
                )
            lines.append("")
        if self.planning:
            from .planning import table as planning_table

            lines += [planning_table(self.planning), ""]
        if self.cluster:
            from .cluster import table as cluster_table

            lines += [cluster_table(self.cluster), ""]
        for name, reason in self.absent.items():
            lines.append(f"absent: {name} — {reason}")
        lines.append("machine busy-ness (cores in use on average; 'others' = all processes but this one):")
        for name, blocks in self.busy.items():
            for label, summary in _busy_lines(name, blocks):
                lines.append(f"  {label:<13} {summary}")
        lines.append(f"  {'whole run':<13} {self.whole.summary()}")
        if self.errors:
            lines.append(f"{len(self.errors)} error(s): see stderr")
        return "\n".join(lines)

    @staticmethod
    def _against(r: Row, rows: list) -> list:
        """The ratios of row `r` to its engine's yardsticks (`YARDSTICKS`) in the same case."""
        name, _, mode = r.engine.partition(" ")
        out = []
        for other in YARDSTICKS.get(name, ()):
            label = f"{other} {mode}".strip()
            o = next((x for x in rows if x.engine == label and x.status == "ok"), None)
            if o is None:
                continue
            text = f"vg/{other} {_ratio(r.vg, o.vg)}, fwd/{other} {_ratio(r.forward, o.forward)}"
            if r.first_vg is not None and o.first_vg is not None:  # two staged engines: compile time too
                text += f", 1st vg/{other} {_ratio(r.first_vg, o.first_vg)}"
            out.append(text)
        return out

    def write_json(self, path: str) -> None:
        record = {
            "machine": self.machine,
            "quick": bool(self.args.quick),
            "threads": self.args.threads,
            "cores": getattr(self.args, "cores", None),
            "rounds": self.args.rounds,
            "versions": self.versions,
            "absent": self.absent,
            "busy": self.busy,
            "whole_run": self.whole.as_dict(),
            "errors": self.errors,
            "cases": {
                c.key: {
                    "title": c.title,
                    "group": c.group,
                    "size": self.problems[c.key].size,
                    "kind": self.problems[c.key].kind,
                    "per_op": self.problems[c.key].ops,
                }
                for c in self.cases
            },
            "rows": [r.__dict__ for r in self.rows],
            "planning": self.planning,
            "cluster": self.cluster,
        }
        with open(path, "w") as f:
            json.dump(record, f, indent=1, default=float)
        print(f"wrote {path}", file=sys.stderr)

    def plot(self, path: str) -> None:
        """Panels of bars, log scale: value-and-gradient over manual's, forward over
        opt_einsum's, and where rows have them the first value-and-gradient call in seconds
        (staged engines; every engine in the networks group) and the memory peak over
        manual's (numpy engines). One colour per engine; HVP modes (case 8) split their
        engine's slot."""
        try:
            import matplotlib

            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
            from matplotlib.patches import Patch
        except ImportError:
            print("matplotlib is not installed: skipping the plot (pip install matplotlib)", file=sys.stderr)
            return
        keys = [c.key for c in self.cases]
        ok = [r for r in self.rows if r.status == "ok"]
        base = lambda r: r.engine.split(" ")[0]
        mode = lambda r: r.engine.split(" ", 1)[1] if " " in r.engine else ""
        colours = {
            "einad": "#1f77b4",
            "einad-jit": "#17becf",
            "einad-jit-numpy": "#9edae5",
            "opt_einsum": "#7f7f7f",
            "autograd": "#9467bd",
            "jax": "#e377c2",
            "jax-jit": "#bcbd22",
            "torch": "#ff7f0e",
            "einad-torch": "#d62728",
            "einad-dask-1": "#2ca02c",
            "einad-dask-2": "#98df8a",
            "einad-threads-2": "#aec7e8",
            "einad-cluster-1": "#8c564b",
            "einad-cluster-2": "#c49c94",
        }
        hatches = {"": "", "fwd-over-rev": "", "rev-over-fwd": "//", "rev-over-rev": ".."}
        # (label, a row's value, the engine whose value divides it or None, dashed target or None)
        panels = [
            ("value-and-gradient / manual", lambda r: r.vg, "manual", 1.2),
            ("forward / opt_einsum", lambda r: r.forward, "opt_einsum", 1.1),
            ("first value-and-gradient call, s", lambda r: r.first_vg, None, None),
            ("peak memory / manual's", lambda r: r.peak, "manual", None),
        ]
        panels = [p for p in panels if any(p[1](r) for r in ok if base(r) != p[2])]
        size = (max(9, 1.2 * len(keys) + 3), 3.75 * len(panels))
        fig, axes = plt.subplots(len(panels), 1, figsize=size, sharex=True, squeeze=False)
        axes = axes[:, 0]
        for ax, (title, get, denom_name, target) in zip(axes, panels):
            if denom_name is None:  # plotted as it is
                denom = dict.fromkeys(keys, 1.0)
            else:
                denom = {r.case: get(r) for r in ok if r.engine == denom_name and get(r)}
            names = [n for n in colours if n != denom_name and any(base(r) == n and get(r) for r in ok)]
            slot = 0.8 / max(len(names), 1)
            for j, name in enumerate(names):
                for i, k in enumerate(keys):
                    rows = [r for r in ok if r.case == k and base(r) == name and get(r)]
                    if denom_name == "opt_einsum":  # the forward is the same for every HVP mode
                        rows = rows[:1]
                    if not rows or not denom.get(k):
                        continue
                    w = slot / len(rows)
                    for v, r in enumerate(rows):
                        x = i - 0.4 + slot * j + w * (v + 0.5)
                        ax.bar(
                            x,
                            get(r) / denom[k],
                            w,
                            color=colours[name],
                            edgecolor="white",
                            hatch=hatches.get(mode(r), "xx") if denom_name != "opt_einsum" else "",
                        )
            if denom_name is not None:
                ax.axhline(1.0, color="black", lw=0.8)
            ax.set_yscale("log")
            ax.set_ylabel(title + " (log)")
            handles = [Patch(color=colours[n], label=n) for n in names]
            if target is not None:
                ax.axhline(target, color="grey", lw=0.8, ls="--")
                handles.append(Patch(color="white", label=f"dashed: target {target}x"))
            if denom_name != "opt_einsum" and any(mode(r) for r in ok):
                handles += [
                    Patch(facecolor="white", edgecolor="black", hatch=h, label=f"case 8: {m}")
                    for m, h in hatches.items()
                    if m
                ]
            ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        axes[-1].set_xticks(range(len(keys)))
        axes[-1].set_xticklabels(keys)
        axes[-1].set_xlabel("case")
        axes[0].set_title(
            f"einad benchmarks, {self.machine['date']}" + (" (quick)" if self.args.quick else "")
        )
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        print(f"wrote {path}", file=sys.stderr)
