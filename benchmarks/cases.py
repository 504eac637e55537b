"""The cases of issues 4, 9, 11, 22 and 23 (float64, complex128 in n2; fixed seeds).

Each case builds a `Problem`: its inputs (read-only arrays, so an engine that
writes into them fails loudly), which of them are differentiated, the loss
written once against an engine namespace ``ns`` (see `engines`), and the
`manual` engine's hand-written numpy forward and backward. ``quick=True``
shrinks every size so that the whole suite runs in seconds.

Case 5 and case 6 have two parts each (5a/5b, 6a/6b); ``--cases 5`` picks both.
Cases n1-n4 are the "networks" group (issue 22): tensor networks made by cotengra,
contracted along one seeded path that every engine is given; ``--cases networks``
picks the group, which is left out (and said to be absent) without cotengra.
Cases m1 and m2 are the "mps" group (issue 23): the energy of a matrix product state that
quimb builds, by one einsum per network (m1) and by quimb's own contraction (m2).
"""

from __future__ import annotations

import collections
import functools
import importlib.util
import math
import operator
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import opt_einsum as oe
from opt_einsum.testing import rand_equation

from einad.subscripts import pairwise_steps

from .engines import PairwiseContraction


def readonly(a, dtype=np.float64) -> np.ndarray:
    a = np.ascontiguousarray(a, dtype=dtype)
    a.flags.writeable = False
    return a


def _sigmoid(x):
    return 0.5 * (np.tanh(0.5 * x) + 1.0)


@dataclass
class Problem:
    """One sized instance of a case."""

    size: str  # human-readable sizes, for the table
    arrays: tuple  # the inputs, read-only
    argnums: tuple  # which inputs get gradients
    loss: Callable  # loss(ns, *arrays) -> scalar
    manual_forward: Callable  # (*arrays) -> value
    manual_vag: Callable | None = None  # (*arrays) -> (value, tuple of gradients)
    manual_hvp: Callable | None = None  # (*arrays, tangent) -> H·tangent w.r.t. arrays[0]
    tangent: np.ndarray | None = None
    kind: str = "grad"  # "grad" or "hvp"
    ops: int | None = None  # report times per op (case 7)
    skip: dict = field(default_factory=dict)  # engine name -> why it does not run
    notes: str = ""
    first_calls: bool = False  # time every engine's first calls, eager ones too (the networks group)
    memory_limit: int | None = None  # case 10: the sliced contraction's limit, in elements


@dataclass
class Case:
    key: str
    title: str
    build: Callable[[bool], Problem]
    group: str = ""  # a name that --cases takes for all the group's cases
    requires: tuple[str, ...] = ()  # modules the case needs; without them the case is absent

    def missing(self) -> str | None:
        """Why the case cannot be built here (a module it needs is not installed), or None."""
        return missing_modules(self.requires)


def missing_modules(names: Sequence[str]) -> str | None:
    """Which of the modules `names` are not installed, as a reason; None when all are."""
    absent = [m for m in names if importlib.util.find_spec(m) is None]
    if not absent:
        return None
    verb = "is" if len(absent) == 1 else "are"
    return f"{' and '.join(absent)} {verb} not installed (pip install -e '.[bench]')"


# -- 1, 2: (batch) matmul with loss Σ C·G ---------------------------------------------------------


def _matmul_case(quick: bool) -> Problem:
    n = 64 if quick else 512
    rng = np.random.default_rng(1)
    A, B, G = (readonly(rng.standard_normal((n, n))) for _ in range(3))

    def loss(ns, A, B, G):
        return ns.sum(ns.einsum("ij,jk->ik", A, B) * G)

    def fwd(A, B, G):
        return np.sum((A @ B) * G)

    def vag(A, B, G):
        value = np.sum((A @ B) * G)
        return value, (G @ B.T, A.T @ G)

    return Problem(f"{n}³", (A, B, G), (0, 1), loss, fwd, vag)


def _bmm_case(quick: bool) -> Problem:
    b, n = (8, 32) if quick else (64, 128)
    rng = np.random.default_rng(2)
    A, B, G = (readonly(rng.standard_normal((b, n, n))) for _ in range(3))

    def loss(ns, A, B, G):
        return ns.sum(ns.einsum("bij,bjk->bik", A, B) * G)

    def fwd(A, B, G):
        return np.sum(np.matmul(A, B) * G)

    def vag(A, B, G):
        value = np.sum(np.matmul(A, B) * G)
        return value, (np.matmul(G, B.transpose(0, 2, 1)), np.matmul(A.transpose(0, 2, 1), G))

    return Problem(f"b={b}, {n}³", (A, B, G), (0, 1), loss, fwd, vag)


# -- 3: three-operand bilinear --------------------------------------------------------------


def _bilinear_case(quick: bool) -> Problem:
    b, n = (32, 64) if quick else (256, 512)
    rng = np.random.default_rng(3)
    X = readonly(rng.standard_normal((b, n)))
    W = readonly(rng.standard_normal((n, n)))
    Y = readonly(rng.standard_normal((b, n)))
    g = readonly(rng.standard_normal(b))

    def loss(ns, X, W, Y, g):
        return ns.sum(ns.einsum("bi,ij,bj->b", X, W, Y) * g)

    # opt_einsum's path: (X, W) -> T[b, j] by GEMM, then (T, Y) -> out[b]; the manual
    # forward and backward follow the same pairs.
    def fwd(X, W, Y, g):
        return np.sum(np.einsum("bj,bj->b", X @ W, Y) * g)

    def vag(X, W, Y, g):
        T = X @ W
        value = np.sum(np.einsum("bj,bj->b", T, Y) * g)
        gT = g[:, None] * Y
        gY = g[:, None] * T
        return value, (gT @ W.T, X.T @ gT, gY)

    return Problem(f"b={b}, i=j={n}", (X, W, Y, g), (0, 1, 2), loss, fwd, vag)


# -- 4: two-layer tanh MLP, logistic loss ---------------------------------------------------


def _mlp_case(quick: bool) -> Problem:
    b, d, h, k = (32, 64, 64, 10) if quick else (256, 512, 512, 10)
    rng = np.random.default_rng(4)
    X = readonly(rng.standard_normal((b, d)))
    W1 = readonly(rng.standard_normal((d, h)) / np.sqrt(d))
    W2 = readonly(rng.standard_normal((h, k)) / np.sqrt(h))
    Y = readonly(rng.choice([-1.0, 1.0], size=(b, k)))

    def loss(ns, W1, W2, X, Y):
        H = ns.tanh(ns.einsum("bi,ij->bj", X, W1))
        Z = ns.einsum("bj,jk->bk", H, W2)
        return ns.mean(ns.softplus(-Y * Z))

    def fwd(W1, W2, X, Y):
        H = np.tanh(X @ W1)
        return np.mean(np.logaddexp(0.0, -Y * (H @ W2)))

    def vag(W1, W2, X, Y):
        H = np.tanh(X @ W1)
        M = -Y * (H @ W2)
        value = np.mean(np.logaddexp(0.0, M))
        dZ = -Y * _sigmoid(M) / M.size
        gW2 = H.T @ dZ
        dA = (dZ @ W2.T) * (1.0 - H * H)
        return value, (X.T @ dA, gW2)

    return Problem(f"X {b}x{d}, W1 {d}x{h}, W2 {h}x{k}", (W1, W2, X, Y), (0, 1), loss, fwd, vag)


# -- 5: random tensor networks -------------------------------------------------------------


def _network(n: int, d_min: int, d_max: int, seed: int, skip_autograd: bool) -> Problem:
    eq, shapes = rand_equation(n, 3, d_min=d_min, d_max=d_max, seed=seed)
    rng = np.random.default_rng(5)
    ops = tuple(readonly(rng.standard_normal(s)) for s in shapes)
    pc = PairwiseContraction(eq, shapes)

    def loss(ns, *ops):
        return ns.einsum(eq, *ops)

    letters = {c: d for s, shp in zip(eq.split("->")[0].split(","), shapes) for c, d in zip(s, shp)}
    skip = {}
    if skip_autograd:
        # autograd's einsum VJP contracts all N operands in one numpy.einsum call (no path):
        # every gradient costs the product of all index sizes, times N terms per point.
        naive = float(np.prod([float(v) for v in letters.values()])) * n * n
        skip["autograd"] = f"unoptimized per-operand einsum VJP, est. {naive / 1e9:.0e} s"
    size = (
        f"rand_equation({n}, 3, d_min={d_min}, d_max={d_max}, seed={seed}): {len(letters)} indices, "
        f"{pc.info.opt_cost:.1e} flops"
    )
    return Problem(size, ops, tuple(range(n)), loss, pc.value, pc.value_and_grad, skip=skip, notes=eq)


def _network12_case(quick: bool) -> Problem:
    if quick:
        return _network(12, 2, 5, 0, True)
    return _network(12, 10, 20, 0, True)


def _network10_case(quick: bool) -> Problem:
    if quick:
        return _network(10, 2, 2, 3, False)
    return _network(10, 2, 3, 3, False)


# -- 6: trace and diagonal ---------------------------------------------------------------


def _trace_case(quick: bool) -> Problem:
    n = 200 if quick else 2000
    rng = np.random.default_rng(6)
    A = readonly(rng.standard_normal((n, n)))

    def loss(ns, A):
        return ns.einsum("ii->", A)

    def vag(A):
        G = np.zeros_like(A)
        G.flat[:: n + 1] = 1.0
        return np.trace(A), (G,)

    return Problem(f"{n}x{n}", (A,), (0,), loss, np.trace, vag)


def _diagonal_case(quick: bool) -> Problem:
    n = 200 if quick else 2000
    rng = np.random.default_rng(6)
    A = readonly(rng.standard_normal((n, n)))
    g = readonly(rng.standard_normal(n))

    def loss(ns, A, g):
        return ns.sum(ns.einsum("ii->i", A) * g)

    def fwd(A, g):
        return np.sum(np.diagonal(A) * g)

    def vag(A, g):
        G = np.zeros_like(A)
        G.flat[:: n + 1] = g
        return np.sum(np.diagonal(A) * g), (G,)

    return Problem(f"{n}x{n}, loss Σ diag·g", (A, g), (0,), loss, fwd, vag)


# -- 7: Python overhead --------------------------------------------------------------------

CHAIN = 200  # ops, counting the final sum


def _chain_case(quick: bool) -> Problem:
    rng = np.random.default_rng(7)
    x = readonly(rng.standard_normal(8))
    w = readonly(rng.standard_normal(8))
    n = CHAIN - 1

    # op i: y*w, tanh, y+x, sin, cycling; then one sum
    def loss(ns, x, w):
        y = x
        for i in range(n):
            k = i % 4
            if k == 0:
                y = y * w
            elif k == 1:
                y = ns.tanh(y)
            elif k == 2:
                y = y + x
            else:
                y = ns.sin(y)
        return ns.sum(y)

    def fwd(x, w):
        return loss(np, x, w)  # numpy has tanh, sin and sum under the same names

    def vag(x, w):
        vals = [x]
        for i in range(n):
            y = vals[-1]
            k = i % 4
            if k == 0:
                vals.append(y * w)
            elif k == 1:
                vals.append(np.tanh(y))
            elif k == 2:
                vals.append(y + x)
            else:
                vals.append(np.sin(y))
        value = np.sum(vals[-1])
        g = np.ones_like(x)
        gx = np.zeros_like(x)
        gw = np.zeros_like(w)
        for i in range(n - 1, -1, -1):
            k = i % 4
            if k == 0:
                gw += g * vals[i]
                g = g * w
            elif k == 1:
                g = g * (1.0 - vals[i + 1] * vals[i + 1])
            elif k == 2:
                gx += g
            else:
                g = g * np.cos(vals[i])
        gx += g
        return value, (gx, gw)

    return Problem(f"{CHAIN} ops on 8-vectors", (x, w), (0, 1), loss, fwd, vag, ops=CHAIN)


# -- 8: logistic-regression Hessian-vector product ----------------------------------------


def _hvp_case(quick: bool) -> Problem:
    m, d = (200, 50) if quick else (2000, 500)
    rng = np.random.default_rng(8)
    X = readonly(rng.standard_normal((m, d)) / np.sqrt(d))
    y = readonly(rng.choice([-1.0, 1.0], size=m))
    w = readonly(rng.standard_normal(d))
    v = readonly(rng.standard_normal(d))

    def loss(ns, w, X, y):
        return ns.mean(ns.softplus(-y * ns.einsum("ij,j->i", X, w)))

    def fwd(w, X, y):
        return np.mean(np.logaddexp(0.0, -y * (X @ w)))

    def hvp(w, X, y, v):
        s = _sigmoid(-y * (X @ w))
        return X.T @ ((s * (1.0 - s) * (y * y) / m) * (X @ v))

    return Problem(f"X {m}x{d}", (w, X, y), (0,), loss, fwd, manual_hvp=hvp, tangent=v, kind="hvp")


# -- 9: trace plus the squared diagonal (issue 9): two cotangents on one diagonal ----------


def _trace_diag_case(quick: bool) -> Problem:
    n = 200 if quick else 2000
    rng = np.random.default_rng(9)
    A = readonly(rng.standard_normal((n, n)))

    def loss(ns, A):
        return ns.trace(A) + ns.sum(ns.diagonal(A) ** 2)

    def fwd(A):
        d = np.diagonal(A)
        return np.trace(A) + np.sum(d * d)

    def vag(A):
        d = np.diagonal(A)
        G = np.zeros_like(A)
        G.flat[:: n + 1] = 1.0 + 2.0 * d
        return np.trace(A) + np.sum(d * d), (G,)

    return Problem(f"{n}x{n}", (A,), (0,), loss, fwd, vag)


# -- 10: a network larger than memory, sliced (issue 11) -------------------------------------

SLICED_EQ = "abc,ade,bdf,cef->"  # a tetrahedron: every pairwise path has a 4-index intermediate


def _sliced_sizes(quick: bool) -> tuple[int, int]:
    """(n, memory limit in elements). Full: n = 150, a 3.8 GiB unsliced intermediate under a
    256 MiB limit; `EINAD_BENCH_SLICED_N` and `EINAD_BENCH_SLICED_LIMIT_MIB` override both."""
    if quick:
        return 12, 12**4 // 8
    n = int(os.environ.get("EINAD_BENCH_SLICED_N", "150"))
    mib = float(os.environ.get("EINAD_BENCH_SLICED_LIMIT_MIB", "256"))
    return n, int(mib * 2**20) // 8


def _sliced_case(quick: bool) -> Problem:
    n, limit = _sliced_sizes(quick)
    rng = np.random.default_rng(10)
    ops = tuple(readonly(rng.standard_normal((n, n, n)) / n) for _ in range(4))
    # manual: opt_einsum's path for the tetrahedron, (abc, ade) -> bcde first, sliced by hand
    # along b into chunks whose bcde fits the limit; each chunk is a PairwiseContraction (its
    # value and gradient keep only that chunk's intermediates), gradients added into the chunk.
    width = max(1, limit // n**3)
    chunks = [(lo, min(lo + width, n)) for lo in range(0, n, width)]
    path = [(0, 1), (0, 2), (0, 1)]
    plans: dict = {}

    def plan(w: int) -> PairwiseContraction:
        if w not in plans:
            plans[w] = PairwiseContraction(SLICED_EQ, [(n, w, n), (n, n, n), (w, n, n), (n, n, n)], path)
        return plans[w]

    def loss(ns, *ops):
        return ns.einsum(SLICED_EQ, *ops, memory_limit=limit)

    def fwd(A, B, C, D):
        return sum(plan(hi - lo).value(A[:, lo:hi], B, C[lo:hi], D) for lo, hi in chunks)

    def vag(A, B, C, D):
        grads = [np.zeros_like(x) for x in (A, B, C, D)]
        value = 0.0
        for lo, hi in chunks:
            v, (ga, gb, gc, gd) = plan(hi - lo).value_and_grad(A[:, lo:hi], B, C[lo:hi], D)
            value += v
            grads[0][:, lo:hi] += ga
            grads[1] += gb
            grads[2][lo:hi] += gc
            grads[3] += gd
        return value, tuple(grads)

    gib = n**4 * 8 / 2**30
    mib = 4 * n**3 * 8 / 2**20
    size = (
        f"n={n}: unsliced intermediate {gib:.3g} GiB, memory_limit {limit:,} elements "
        f"({limit * 8 / 2**20:.3g} MiB), inputs {mib:.3g} MiB + gradients {mib:.3g} MiB; "
        f"manual: {len(chunks)} slices of b"
    )
    why = "no sliced contraction: the unsliced intermediate alone is the size in the title"
    skip = {e: why for e in ("opt_einsum", "autograd", "jax", "jax-jit", "torch")}
    return Problem(size, ops, (0, 1, 2, 3), loss, fwd, vag, skip=skip, notes=SLICED_EQ, memory_limit=limit)


# -- n1-n4: tensor networks from cotengra (issue 22) -----------------------------------------

NETWORKS = "networks"  # the group's name on the command line
RANDOM_GRAPHS = ("cotengra", "networkx")  # cotengra draws random regular graphs with networkx
PATH_TRIALS = 64  # random-greedy trials of each case's one path search


def network_equation(inputs: Sequence[Sequence[str]], output: Sequence[str]) -> str:
    """cotengra's or quimb's ``inputs -> output`` (each index a name) as one einsum string.

    Each index is renamed, in order of first appearance, to opt_einsum's symbols
    (`opt_einsum.get_symbol`: a-z, A-Z, then other characters, '×' being symbol 75), as
    cotengra and quimb write a large equation themselves; every engine is given this string
    (einad takes any such symbol; torch's steps are renamed to letters by opt_einsum, the
    hand-written sweep's by `convert_to_valid_einsum_chars`).
    """
    names: dict = collections.defaultdict(lambda: oe.get_symbol(len(names)))
    terms = ["".join(names[ix] for ix in term) for term in inputs]
    return ",".join(terms) + "->" + "".join(names[ix] for ix in output)


def network_path(inputs, output, size_dict: dict) -> list[tuple[int, int]]:
    """The one contraction path of a network, which every engine is given.

    cotengra's random-greedy search, `PATH_TRIALS` trials from seed 0, in pure Python and in
    this process (so that neither an installed Rust accelerator nor a process pool can change
    the result): deterministic, and under half a second on this group's networks. Returned in
    opt_einsum's explicit (linear) format, the ``optimize=`` that `einad.einsum`,
    `jax.numpy.einsum` and `opt_einsum.contract` take.
    """
    import cotengra as ctg

    search = ctg.RandomGreedyOptimizer(max_repeats=PATH_TRIALS, seed=0, accel=False, parallel=False)
    return [tuple(int(i) for i in step) for step in search(inputs, output, size_dict)]


def network_operands(shapes: Sequence[tuple], seed: int, dtype=np.float64) -> tuple:
    """Random read-only operands for which the contraction Z has E|Z|² = 1.

    Entries have unit variance (complex ones are (a + ib)/√2 with a, b standard normal) and each
    tensor is scaled by its size^(-1/4): E|Z|² is the product of every index's size (each index
    is shared by two tensors) times the product of the tensors' scales squared, which is
    the inverse of that product. Without the scaling Z of a 165-index network is ~1e25.
    """
    rng = np.random.default_rng(seed)

    def one(shape):
        x = rng.standard_normal(shape)
        if np.dtype(dtype).kind == "c":
            x = (x + 1j * rng.standard_normal(shape)) / np.sqrt(2.0)
        return readonly(x * float(np.prod(shape)) ** -0.25, dtype)

    return tuple(one(s) for s in shapes)


def multiply_adds(
    eq: str, shapes: Sequence[tuple], path: Sequence[Sequence[int]], wrt: Sequence[int]
) -> tuple[int, int]:
    """The multiply-adds of the contraction `eq` along `path` (opt_einsum's positions), pair by
    pair, and of its reverse sweep for the gradients of the operands `wrt`.

    A step ``a,b->c`` costs the product of the sizes of the letters its product loops over
    (each letter of ``a`` or ``b`` that the other operand or ``c`` also has: a letter only one
    operand has, summed, is summed first, with adds only); its pullback to ``a`` (``c,b->a``)
    and to ``b`` loop over the same letters and cost as much. So the sweep costs the forward's
    steps once per operand that needs a cotangent, and where every operand is differentiated
    the value-and-gradient does exactly three times the forward's arithmetic (the bound for all
    the environments of a tree): a vg/fwd of 3.0 in time is then the arithmetic alone, reached
    only where the sweep's steps run as efficiently as the forward's. A step of one operand (a
    sum) costs none; one of three or more (not in a pairwise path) the product of all its sizes.
    """
    lhs, output = eq.split("->")
    inputs = tuple(lhs.split(","))
    size = {c: int(d) for spec, shape in zip(inputs, shapes) for c, d in zip(spec, shape)}
    needs = [k in set(wrt) for k in range(len(inputs))]
    forward = sweep = 0
    for positions, ins, out in pairwise_steps(inputs, output, tuple(tuple(step) for step in path)):
        picked = [needs[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del needs[p]
        needs.append(any(picked))
        if len(ins) == 1:
            continue
        if len(ins) == 2:
            a, b = ins
            looped = {c for c in a if c in b or c in out} | {c for c in b if c in a or c in out}
        else:
            looped = set("".join(ins))
        work = math.prod(size[c] for c in looped)
        forward += work
        sweep += work * sum(picked)
    return forward, sweep


def _tn_case(con, label: str, seed: int, complex_: bool = False) -> Problem:
    """One network of the group: `con` is cotengra's ``(inputs, output, shapes, size_dict)``.

    The loss is the contraction Z itself (a scalar), or for complex operands |Z|² = Re(Z·conj Z),
    whose gradient follows JAX's convention (einad's too): ``2·conj(Z)·∂Z/∂x`` for operand x,
    so `manual` seeds its reverse sweep with 2·conj(Z). PyTorch's gradient is the complex
    conjugate of that (the check conjugates it back: `Engine.conjugate_grads`).
    """
    t0 = time.perf_counter()
    path = network_path(con.inputs, con.output, con.size_dict)
    search = time.perf_counter() - t0
    eq = network_equation(con.inputs, con.output)
    ops = network_operands(con.shapes, seed, np.complex128 if complex_ else np.float64)
    pc = PairwiseContraction(eq, [tuple(s) for s in con.shapes], path)

    if complex_:

        def loss(ns, *ops):
            z = ns.einsum(eq, *ops, optimize=path)
            return ns.real(z * ns.conj(z))

        def fwd(*ops):
            z = pc.value(*ops)
            return (z * np.conj(z)).real

        def vag(*ops):
            z, grads = pc.value_and_grad(*ops, seed=lambda z: 2.0 * np.conj(z))
            return (z * np.conj(z)).real, grads

    else:

        def loss(ns, *ops):
            return ns.einsum(eq, *ops, optimize=path)

        fwd, vag = pc.value, pc.value_and_grad

    n, sizes = len(ops), con.size_dict
    naive = float(np.prod([float(d) for d in sizes.values()])) * n * n
    why = (
        f"its einsum VJP ignores the path and contracts all {n} operands in one numpy.einsum call "
        f"(est. {naive / 1e9:.0e} s here; numpy.einsum takes 52 indices, this network has {len(sizes)})"
    )
    bonds = sorted(set(sizes.values()))
    fwd_work, sweep_work = multiply_adds(eq, [tuple(s) for s in con.shapes], path, range(n))
    size = (
        f"{label}, {n} tensors, {len(sizes)} indices, bond {'-'.join(map(str, bonds))}"
        f"{', complex128, loss |Z|²' if complex_ else ''}; path: {len(path)} steps, "
        f"{pc.info.opt_cost:.1e} flops, largest intermediate {pc.info.largest_intermediate:.1e} "
        f"elements (found in {search:.2f} s); vg/fwd in multiply-adds {1 + sweep_work / fwd_work:.2f}"
    )
    return Problem(
        size, ops, tuple(range(n)), loss, fwd, vag, skip={"autograd": why}, notes=eq, first_calls=True
    )


def _randreg_case(quick: bool) -> Problem:
    import cotengra as ctg

    # graph seed 1: on seed 0's graph the random-greedy search's best path costs 2e9 flops (a
    # forward of about a second), some 75 times what it finds here. At 52 tensors (--quick) the
    # network still has more than 75 indices: its equation holds symbols that are not letters.
    n = 52 if quick else 110
    con = ctg.utils.randreg_equation(n, 3, d_min=2, d_max=2, seed=1)
    return _tn_case(con, "random 3-regular graph (seed 1)", seed=221)


def _randreg_complex_case(quick: bool) -> Problem:
    import cotengra as ctg

    n = 16 if quick else 90
    con = ctg.utils.randreg_equation(n, 3, d_min=2, d_max=2, seed=0)
    return _tn_case(con, "random 3-regular graph (seed 0)", seed=222, complex_=True)


def _lattice_case(quick: bool) -> Problem:
    import cotengra as ctg

    # 7x7: at issue 22's example of 6x6 the forward takes 0.2-0.3 ms, under the group's 1-50 ms
    side, bond = (3, 2) if quick else (7, 4)
    con = ctg.utils.lattice_equation([side, side], d_min=bond, d_max=bond)
    return _tn_case(con, f"{side}x{side} lattice", seed=223)


def _lattice_dense_case(quick: bool) -> Problem:
    import cotengra as ctg

    side, bond = (3, 4) if quick else (5, 8)
    con = ctg.utils.lattice_equation([side, side], d_min=bond, d_max=bond)
    return _tn_case(con, f"{side}x{side} lattice", seed=224)


# -- m1, m2: the energy of a matrix product state (issue 23) -------------------------------------

MPS = "mps"  # the group's name on the command line
MPS_MODULES = ("quimb", "cotengra")  # quimb builds the networks, cotengra finds the one path


@dataclass
class MpsNetworks:
    """What quimb builds once for the MPS energy <psi|H|psi> / <psi|psi> of the Heisenberg chain.

    The two networks (the energy's sandwich bra-MPO-ket, the norm's bra-ket) as quimb aligns
    them, with each tensor's indices, an einsum equation (`network_equation`) and
    one cotengra path each (`network_path`); the operands are the L MPS arrays (the ket; the
    MPS is real, so the bra holds the same arrays) then the L MPO arrays.
    """

    sites: int
    bond: int
    arrays: tuple  # the ket's L arrays, then the MPO's L arrays, read-only
    energy_inds: list  # each tensor's indices in the sandwich: bra's L, MPO's L, ket's L
    norm_inds: list  # bra's L, ket's L
    energy_eq: str
    norm_eq: str
    energy_path: list
    norm_path: list


def mps_networks(sites: int, bond: int) -> MpsNetworks:
    import quimb.tensor as qtn

    psi = qtn.MPS_rand_state(sites, bond, seed=230)
    ham = qtn.MPO_ham_heis(sites)
    sandwich = qtn.tensor_network_align(psi.H, ham, psi)
    overlap = qtn.tensor_network_align(psi.H, psi)
    nets = []
    for parts in (sandwich, overlap):
        # `&` renames the bonds the copies share (bra and ket have the same bond names)
        tensors = list(functools.reduce(operator.and_, parts))  # in order: bra, (MPO,) ket
        inputs = [t.inds for t in tensors]
        sizes = {ix: d for t in tensors for ix, d in zip(t.inds, t.shape)}
        nets.append((inputs, network_equation(inputs, ()), network_path(inputs, (), sizes)))
    arrays = tuple(readonly(t.data) for t in psi) + tuple(readonly(t.data) for t in ham)
    (e_inds, e_eq, e_path), (n_inds, n_eq, n_path) = nets
    return MpsNetworks(sites, bond, arrays, e_inds, n_inds, e_eq, n_eq, e_path, n_path)


def _mps_problem(quick: bool, via_quimb: bool) -> Problem:
    sites, bond = (6, 4) if quick else (32, 32)
    net = mps_networks(sites, bond)
    n = sites
    energy_shapes = [a.shape for a in net.arrays[:n] + net.arrays[n:] + net.arrays[:n]]
    pc_e = PairwiseContraction(net.energy_eq, energy_shapes, net.energy_path)
    pc_n = PairwiseContraction(net.norm_eq, [a.shape for a in net.arrays[:n] * 2], net.norm_path)

    if via_quimb:
        import quimb.tensor as qtn

        def contract(inds, path, arrays):
            tensors = [qtn.Tensor(a, ix) for a, ix in zip(arrays, inds)]
            return qtn.tensor_contract(*tensors, output_inds=(), optimize=path)

        def loss(ns, *arrays):  # quimb's contraction (cotengra, autoray) on the engine's arrays
            kets, mpo = arrays[:n], arrays[n:]
            num = contract(net.energy_inds, net.energy_path, (*kets, *mpo, *kets))
            return num / contract(net.norm_inds, net.norm_path, (*kets, *kets))

    else:

        def loss(ns, *arrays):
            kets, mpo = arrays[:n], arrays[n:]
            num = ns.einsum(net.energy_eq, *kets, *mpo, *kets, optimize=net.energy_path)
            return num / ns.einsum(net.norm_eq, *kets, *kets, optimize=net.norm_path)

    def fwd(*arrays):
        kets, mpo = arrays[:n], arrays[n:]
        return pc_e.value(*kets, *mpo, *kets) / pc_n.value(*kets, *kets)

    def vag(*arrays):
        # E/N with E = <psi|H|psi>, N = <psi|psi>; each ket array appears twice in each network
        kets, mpo = arrays[:n], arrays[n:]
        e, ge = pc_e.value_and_grad(*kets, *mpo, *kets)
        m, gm = pc_n.value_and_grad(*kets, *kets)
        ratio = e / m
        grads = tuple((ge[i] + ge[2 * n + i] - ratio * (gm[i] + gm[n + i])) / m for i in range(n))
        return ratio, grads

    why_autograd = "its einsum VJP ignores the path and contracts all operands in one numpy.einsum call"
    skip = {"autograd": why_autograd}
    if via_quimb:
        skip = {
            "autograd": "quimb's contraction on autograd's boxes is not what this case measures",
            "opt_einsum": "the loss is quimb's own contraction, not an einsum (manual is the yardstick)",
            "jax": "JAX eager runs quimb's contraction op by op, compiling each: quimb's JAX users jit",
        }
    # the kets differentiated: operands 0..L-1 (bra) and 2L..3L-1 (ket) of the energy network
    kets = [*range(n), *range(2 * n, 3 * n)]
    e_fwd, e_sweep = multiply_adds(net.energy_eq, energy_shapes, net.energy_path, kets)
    norm_shapes = [a.shape for a in net.arrays[:n] * 2]
    n_fwd, n_sweep = multiply_adds(net.norm_eq, norm_shapes, net.norm_path, range(2 * n))
    size = (
        f"L={sites}, D={bond}, Heisenberg MPO (bond 5), real; energy network {len(energy_shapes)} tensors "
        f"{pc_e.info.opt_cost:.1e} flops, norm network {2 * n} tensors {pc_n.info.opt_cost:.1e} flops; "
        f"vg/fwd in multiply-adds {1 + (e_sweep + n_sweep) / (e_fwd + n_fwd):.2f}"
        + ("; every engine runs quimb's own contraction" if via_quimb else "; one einsum per network")
    )
    return Problem(
        size, net.arrays, tuple(range(n)), loss, fwd, vag, skip=skip, notes=net.energy_eq, first_calls=True
    )


def _mps_einsum_case(quick: bool) -> Problem:
    return _mps_problem(quick, via_quimb=False)


def _mps_quimb_case(quick: bool) -> Problem:
    return _mps_problem(quick, via_quimb=True)


CASES = [
    Case("1", "matmul ij,jk->ik", _matmul_case),
    Case("2", "batch matmul bij,bjk->bik", _bmm_case),
    Case("3", "bilinear bi,ij,bj->b", _bilinear_case),
    Case("4", "tanh MLP, logistic loss", _mlp_case),
    Case("5a", "tensor network, 12 operands", _network12_case),
    Case("5b", "tensor network, 10 operands", _network10_case),
    Case("6a", "trace ii->", _trace_case),
    Case("6b", "diagonal ii->i", _diagonal_case),
    Case("7", "200 small ops (µs per op)", _chain_case),
    Case("8", "logistic-regression HVP", _hvp_case),
    Case("9", "trace(A) + Σ diagonal(A)²", _trace_diag_case),
    Case("10", "sliced tensor network (memory_limit)", _sliced_case),
    Case("n1", "random regular network", _randreg_case, NETWORKS, RANDOM_GRAPHS),
    Case("n2", "complex random regular network, loss |Z|²", _randreg_complex_case, NETWORKS, RANDOM_GRAPHS),
    Case("n3", "2D lattice network", _lattice_case, NETWORKS, ("cotengra",)),
    Case(
        "n4", "2D lattice network, large bond (compute-bound)", _lattice_dense_case, NETWORKS, ("cotengra",)
    ),
    Case("m1", "MPS energy <psi|H|psi>/<psi|psi>, einsum", _mps_einsum_case, MPS, MPS_MODULES),
    Case("m2", "MPS energy <psi|H|psi>/<psi|psi>, quimb's contraction", _mps_quimb_case, MPS, MPS_MODULES),
]


def select(spec: str | None) -> list[Case]:
    """Cases named by a comma list of keys; ``5`` means 5a and 5b, a group's name (``networks``)
    all its cases. None: all."""
    if not spec:
        return list(CASES)
    wanted = [s.strip() for s in spec.split(",") if s.strip()]
    out = []
    for w in wanted:
        hits = [c for c in CASES if c.key == w or c.key.rstrip("ab") == w or c.group == w]
        if not hits:
            groups = sorted({c.group for c in CASES if c.group})
            raise SystemExit(
                f"unknown case {w!r}; choose from {', '.join(c.key for c in CASES)} or {', '.join(groups)}"
            )
        out.extend(c for c in hits if c not in out)
    return out
