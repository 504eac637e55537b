"""Which compiler for ea.jit's fused kernels (issue 25): ``python -m benchmarks.compilers 7 4 8``.

Each case's value-and-gradient program (case 8: its forward-over-reverse HVP) is lowered
with ``ea.jit(f, backend="llvm")``; its fused groups are then compiled three ways, and the
compile time of all of them and the median time of one call of each are printed:

* ``llvmlite`` — einad's own: `einad.kernels` writes LLVM IR and compiles it (cache off);
* ``numba``    — a Python loop over the group's steps, generated and compiled by ``numba.njit``
  (its one-time start-up is paid before the clock starts; ``math`` functions for the steps);
* ``numexpr``  — one ``numexpr.evaluate`` per value read twice or written out (numexpr has no
  way to share a value between two results), the rest inlined in the expressions.

The numbers docs/design.md quotes ("Compiled kernels") come from this script. Needs numba and
numexpr (``pip install numba numexpr``); ``--quick`` takes the suite's quick sizes. The
numba and numexpr translations cover the steps these cases use, not every kernel step.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
import timeit

import numpy as np

import einad as ea
from einad import kernels as K
from einad.program import Lit

from . import cases


def _programs(key: str, quick: bool):
    case = next(c for c in cases.CASES if c.key == key)
    p = case.build(quick)
    if p.kind == "hvp":

        def hvp(w, *rest):
            *data, v = rest
            return ea.hvp(lambda w_: p.loss(ea, w_, *data), (w,), (v,))[0]

        return hvp, (*p.arrays, p.tangent)
    return ea.value_and_grad(lambda *a: p.loss(ea, *a), argnums=tuple(p.argnums)), p.arrays


def _inputs(program, kernel, args) -> dict:
    """The values of a fused group's inputs: the program's other equations, run by numpy."""
    env = dict(program.const_values)
    env.update(zip(program.input_names, args))
    mine = {id(e) for e in kernel.equations}
    for e in program.equations:
        if all(v in env for v in kernel.inputs):
            break
        if id(e) not in mine:
            env[e.output] = e.prim.impl(
                *[a.value if isinstance(a, Lit) else env[a] for a in e.inputs], **e.params
            )
    return {v: env[v] for v in kernel.inputs}


def _operand(spec, x, suffix=""):
    if isinstance(x, K.Const):
        return repr(float(x.value))
    arg = next((a for a in spec.args if a.name == x), None)
    return f"{x}{suffix}" if arg is not None and arg.axes is not None else x


# -- numba -----------------------------------------------------------------------------------------

NUMBA = {
    "add": "({0} + {1})",
    "subtract": "({0} - {1})",
    "multiply": "({0} * {1})",
    "divide": "({0} / {1})",
    "negative": "(-{0})",
    "square": "({0} * {0})",
    "tanh": "math.tanh({0})",
    "sin": "math.sin({0})",
    "cos": "math.cos({0})",
    "exp": "math.exp({0})",
    "log1p": "math.log1p({0})",
    "expm1": "math.expm1({0})",
    "sigmoid": "sigmoid({0})",
    "softplus": "(max({0}, 0.0) + math.log1p(math.exp(-abs({0}))))",
}


def _numba_source(spec) -> str:
    """A flat loop over the group's (contiguous, broadcast) arguments; totals accumulated."""
    outs = {o.name for o in spec.outs}
    names = [a.name for a in spec.args] + [f"out_{o.name}" for o in spec.outs]
    lines = [f"def kernel({', '.join(names)}):"]
    lines += [f"    {s.name} = 0.0" for s in spec.steps if s.op == "sum"]
    lines.append(f"    for i in range({math.prod(spec.shape)}):")
    lines += [f"        {a.name}_ = {a.name}[i]" for a in spec.args if a.axes is not None]
    post = []
    for s in spec.steps:
        ops = [_operand(spec, x, "_") for x in s.operands]
        if s.phase == "post":
            post.append(f"    {s.name} = " + NUMBA[s.op].format(*ops))
        elif s.op == "sum":
            lines.append(f"        {s.name} += {ops[0]}")
        else:
            lines.append(f"        {s.name} = " + NUMBA[s.op].format(*ops))
            if s.name in outs:
                lines.append(f"        out_{s.name}[i] = {s.name}")
    lines += post
    lines += [f"    out_{o.name}[0] = {o.name}" for o in spec.outs if o.shape == ()]
    return "\n".join(lines)


def numba_kernels(program, args):
    import numba

    def sigmoid(x):
        e = math.exp(-abs(x))
        return 1 / (1 + e) if x >= 0 else e / (1 + e)

    namespace = {"math": math, "sigmoid": numba.njit(sigmoid)}
    made = []
    start = time.perf_counter()
    for k in program.kernels:
        exec(_numba_source(k.spec), namespace)  # noqa: S102  (generated here)
        fn = numba.njit(namespace["kernel"])
        values = _inputs(program, k, args)
        ins = [
            np.ascontiguousarray(np.broadcast_to(values[v], k.spec.shape)).ravel()
            if a.axes is not None
            else float(values[v])
            for a, v in zip(k.spec.args, k.args)
        ]
        outs = [np.empty(max(math.prod(o.shape), 1)) for o in k.spec.outs]
        fn(*ins, *outs)  # compiles
        made.append((fn, ins, outs))
    return time.perf_counter() - start, lambda: [fn(*ins, *outs) for fn, ins, outs in made]


# -- numexpr ---------------------------------------------------------------------------------------

NUMEXPR = {
    **{k: v.replace("math.", "") for k, v in NUMBA.items()},
    "sigmoid": "where({0} >= 0, 1 / (1 + exp(-abs({0}))), exp(-abs({0})) / (1 + exp(-abs({0}))))",
    "softplus": "(where({0} > 0, {0}, 0) + log1p(exp(-abs({0}))))",
}


def _numexpr_plan(spec) -> list[tuple[str, str]]:
    """(name, expression) per evaluation: a value read twice, written out or summed is one;
    the others are inlined (numexpr takes at most a few dozen inputs per expression)."""
    uses: dict[str, int] = {}
    for s in spec.steps:
        for x in s.operands:
            if isinstance(x, str):
                uses[x] = uses.get(x, 0) + 1
    outs = {o.name for o in spec.outs}
    expr: dict[str, str] = {}
    reads: dict[str, set] = {}
    plan = []
    for s in spec.steps:
        ops = [repr(float(x.value)) if isinstance(x, K.Const) else expr.get(x, x) for x in s.operands]
        names = set().union(*[reads.get(x, {x}) for x in s.operands if isinstance(x, str)])
        text = f"sum({ops[0]})" if s.op == "sum" else NUMEXPR[s.op].format(*ops)
        if s.name in outs or uses.get(s.name, 0) > 1 or s.op == "sum" or len(names) > 20:
            plan.append((s.name, text))
            expr[s.name], reads[s.name] = s.name, {s.name}
        else:
            expr[s.name], reads[s.name] = text, names
    return plan


def numexpr_kernels(program, args):
    import numexpr

    runs = []
    start = time.perf_counter()
    for k in program.kernels:
        plan = _numexpr_plan(k.spec)
        values = _inputs(program, k, args)
        env0 = {a.name: values[v] for a, v in zip(k.spec.args, k.args)}

        def run(plan=plan, env0=env0):
            env = dict(env0)
            for name, text in plan:
                env[name] = numexpr.evaluate(text, local_dict=env)

        run()  # compiles each expression
        runs.append(run)
    count = sum(len(_numexpr_plan(k.spec)) for k in program.kernels)
    return time.perf_counter() - start, lambda: [r() for r in runs], count


# -- llvmlite --------------------------------------------------------------------------------------


def llvm_kernels(program, args):
    saved = os.environ.get("EINAD_CACHE_DIR")
    os.environ["EINAD_CACHE_DIR"] = ""  # compile, do not load
    try:
        start = time.perf_counter()
        module = K.compile_kernels([k.spec for k in program.kernels])
        seconds = time.perf_counter() - start
    finally:
        if saved is None:
            del os.environ["EINAD_CACHE_DIR"]
        else:
            os.environ["EINAD_CACHE_DIR"] = saved
    calls = []
    for k, compiled in zip(program.kernels, module.kernels):
        values = _inputs(program, k, args)
        outs = [np.zeros(o.shape, o.dtype) for o in k.spec.outs]
        calls.append((compiled.fn, k.arguments([values[v] for v in k.inputs]), outs))
    return seconds, lambda: [fn(*a, *outs) for fn, a, outs in calls]


def _median_us(fn, number: int) -> float:
    return statistics.median(timeit.repeat(fn, number=number, repeat=7)) / number * 1e6


def main(argv: list[str]) -> None:
    import numba

    numba.njit(lambda x: x + 1.0)(1.0)  # numba's one-time start-up, before any clock
    quick = "--quick" in argv
    for key in [a for a in argv if not a.startswith("-")] or ["7", "4", "8"]:
        f, args = _programs(key, quick)
        program = ea.jit(f, backend="llvm").lower(*args)
        n = 200 if key == "7" or quick else 20
        size = sum(len(k.equations) for k in program.kernels)
        print(f"case {key}: {len(program.kernels)} kernels, {size} equations")
        t, run = llvm_kernels(program, args)
        print(f"  llvmlite  compile {t:.3f} s   calls {_median_us(run, n):8.1f} µs")
        t, run = numba_kernels(program, args)
        print(f"  numba     compile {t:.3f} s   calls {_median_us(run, n):8.1f} µs")
        t, run, count = numexpr_kernels(program, args)
        print(f"  numexpr   compile {t:.3f} s   calls {_median_us(run, n):8.1f} µs  ({count} evaluate calls)")


if __name__ == "__main__":
    main(sys.argv[1:])
