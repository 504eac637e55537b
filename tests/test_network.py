"""A contraction tree planned once (`einad/network.py`): the values and every gradient of random
networks along random paths, eager and jitted, real and complex, against independent
references; the layouts the plan chooses and the copies they save, observed as numpy makes
them; the jitted forward running the eager forward's steps; planning that grows linearly."""

from __future__ import annotations

import functools
import gc
import math
import sys
from unittest import mock

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opt_einsum.testing import rand_equation

import einad as ea
from einad import executor, kernels, memory, network
from einad.rules import einsum as rules
from einad.rules.einsum import _path, sliced_einsum_p, sliced_vg_p
from tests.support.numerics import assert_close


def _random_path(n: int, rng: np.random.Generator) -> list[tuple[int, int]]:
    """An opt_einsum path contracting two random operands of the working list at each step."""
    path = []
    while n > 1:
        i, j = sorted(rng.choice(n, size=2, replace=False))
        path.append((int(i), int(j)))
        n -= 1
    return path


def _network(seed: int, dtype: type, output: int) -> tuple[str, list[np.ndarray], list[tuple[int, int]]]:
    eq, shapes = rand_equation(int(6 + seed % 5), 3, n_out=output, d_min=2, d_max=3, seed=seed)
    rng = np.random.default_rng(seed)
    ops = [rng.standard_normal(s) for s in shapes]
    if dtype is complex:
        ops = [x + 1j * rng.standard_normal(x.shape) for x in ops]
    return eq, ops, _random_path(len(ops), rng)


def _environments(eq: str, ops: list[np.ndarray], g: np.ndarray) -> list[np.ndarray]:
    """Each operand's cotangent for the cotangent `g` of the result, computed by opt_einsum as
    the contraction of `g` with every other operand (the transpose of a multilinear map)."""
    ins, out = eq.split("->")
    specs = ins.split(",")
    envs = []
    for k, spec in enumerate(specs):
        others = [s for j, s in enumerate(specs) if j != k]
        operands = [x for j, x in enumerate(ops) if j != k]
        envs.append(oe.contract(",".join([out, *others]) + "->" + spec, g, *operands))
    return envs


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    dtype=st.sampled_from([float, complex]),
    output=st.sampled_from([0, 2]),
    jitted=st.booleans(),
)
def test_random_networks_along_random_paths_have_every_gradient(seed, dtype, output, jitted):
    """Random 3-regular networks (scalar or with two open indices) along random pairwise
    paths: the value is opt_einsum's and each operand's cotangent is its environment."""
    eq, ops, path = _network(seed, dtype, output)
    f = lambda *xs: ea.einsum(eq, *xs, optimize=path)
    want = oe.contract(eq, *ops, optimize=path)
    g = np.random.default_rng(seed + 1).standard_normal(np.shape(want)).astype(np.result_type(want))

    def value_and_cotangents(*xs):
        value, pull = ea.vjp(f, *xs)
        return value, pull(g)

    run = ea.jit(value_and_cotangents) if jitted else value_and_cotangents
    for _ in range(1 + jitted):  # jitted: the staged first call, then the compiled program
        value, cts = run(*ops)
        assert_close(value, want, rtol=1e-10)
        for got, env in zip(cts, _environments(eq, ops, g)):
            assert_close(got, env, rtol=1e-9, atol=1e-9)


def test_a_scalar_network_is_one_node_whose_value_and_gradients_take_one_call():
    """Under first-order reverse mode a network is one node: a scalar one binds the one-pass
    value-and-gradient, which runs the plan's forward and sweep once (3 products per step)."""
    eq, ops, path = _network(3, float, 0)
    graph = ea.make_graph(
        ea.value_and_grad(lambda *xs: ea.einsum(eq, *xs, optimize=path), tuple(range(len(ops))))
    )(*ops)
    assert [e.prim for e in graph.equations][:1] == [sliced_vg_p]
    assert sum(e.prim is sliced_einsum_p for e in graph.equations) == 0


def test_a_staged_gradient_scales_the_unit_gradients_as_one_block():
    """A scalar network under a loss (|Z|², complex) stages the one-pass value-and-gradient
    and scales its gradients by the loss's cotangent of Z: one product over the gradients'
    block, then a view per operand (not one product per operand); the jitted gradients are
    `2·conj(Z)·∂Z/∂x` (opt_einsum's environments), complex and, for a real operand, real."""
    from einad.rules.einsum import einsum_p, unpack_p

    eq, ops, path = _network(11, complex, 0)
    ops[1] = ops[1].real.copy()  # a real operand among complex ones: its gradient is real
    wrt = tuple(range(len(ops)))

    def loss(*xs):
        z = ea.einsum(eq, *xs, optimize=path)
        return ea.real(z * ea.conj(z))

    graph = ea.make_graph(ea.value_and_grad(loss, wrt))(*ops)
    scalings = [e for e in graph.equations if e.prim is einsum_p]
    assert len(scalings) == 1
    assert sum(e.prim is unpack_p for e in graph.equations) == 2 + len(ops)  # value, block, views
    value, grads = ea.jit(ea.value_and_grad(loss, wrt))(*ops)
    z = oe.contract(eq, *ops, optimize=path)
    assert_close(value, (z * np.conj(z)).real)
    for k, env in enumerate(_environments(eq, ops, 2.0 * np.conj(z))):
        expected = env.real if k == 1 else env
        assert grads[k].dtype == ops[k].dtype
        assert_close(grads[k], expected)


@pytest.mark.parametrize("spec", ["ab,bcc,cd->ad", "ab,b,bc,c->a", "ij,jk,kl->"])
def test_networks_with_repeated_and_broadcast_indices_match_central_differences(spec):
    """Repeated letters (a diagonal), letters one operand alone has (summed first), and a full
    contraction: the planned sweep's gradients against central differences."""
    rng = np.random.default_rng(5)
    sizes = {"a": 2, "b": 3, "c": 4, "d": 2, "i": 3, "j": 2, "k": 4, "l": 3}
    ops = tuple(rng.standard_normal([sizes[c] for c in s]) for s in spec.split("->")[0].split(","))
    f = lambda *xs: ea.sum(ea.sin(ea.einsum(spec, *xs)))
    assert ea.gradcheck(f, *ops)
    assert ea.gradcheck(ea.jit(f), *ops)


def test_a_broadcast_label_keeps_its_operand_order():
    """A label of size 1 in one operand and 2 in another (einsum's broadcasting): the pair is
    planned in the order written, so the product sees the size 2. Reference: numpy."""
    ops = [np.float64(1.5), np.ones((1, 1, 1)), np.arange(2.0).reshape(1, 2)]
    value, grads = ea.value_and_grad(lambda *xs: ea.einsum(",bba,ba", *xs), (0, 1, 2))(*ops)
    assert_close(value, np.einsum(",bba,ba", *ops))
    assert_close(grads[2], np.full((1, 2), 1.5))


# -- layouts ---------------------------------------------------------------------------------------


def _greedy_network(n, seed, d_min, d_max):
    """A random 3-regular network of `n` tensors: its equation, inputs, output, shapes and greedy path."""
    eq, shapes = rand_equation(n, 3, seed=seed, d_min=d_min, d_max=d_max)
    ins, out = eq.split("->")
    inputs = tuple(ins.split(","))
    shapes = tuple(tuple(s) for s in shapes)
    return eq, inputs, out, shapes, _path(inputs, out, shapes, "greedy", None)


def _count_copies(monkeypatch):
    """A counter (a one-item list) of the elements numpy copies while plans run: every copy a
    product makes of an operand and every value laid out once go through
    `network._copy_into`; a product left to numpy.einsum's one-pass loop (a matrix-vector one
    whose operands a matrix product would copy) counts as copying both, as the plan counts it."""
    copied = [0]
    copy_into, loop_pair = network._copy_into, network._loop_pair

    def counted_copy(out, view):
        copied[0] += view.size
        copy_into(out, view)

    def counted_loop(plan, a, b):
        copied[0] += a.size + b.size
        return loop_pair(plan, a, b)

    monkeypatch.setattr(network, "_copy_into", counted_copy)
    monkeypatch.setattr(network, "_loop_pair", counted_loop)
    return copied


@pytest.mark.parametrize("seed", [186, 292])
def test_the_chosen_layouts_save_the_copies_the_plan_counts(monkeypatch, seed):
    """Each intermediate is laid out so that its reader takes it as it lies: on these networks
    the plan copies nothing, forward and sweep, where letters in order of appearance copy.
    Both counts are what numpy does when the plans run (a counter around every product)."""
    eq, inputs, out, shapes, path = _greedy_network(5, seed, d_min=2, d_max=4)
    copied = _count_copies(monkeypatch)  # the plans made below bind the counters
    ops = [np.random.default_rng(seed).standard_normal(s) for s in shapes]
    wrt = tuple(range(len(ops)))
    counts = []
    for layouts in (True, False):
        plan = network._tree_plan(inputs, out, shapes, path, wrt, layouts)
        for programs in (False, True):  # the steps walked one by one; the plan's program
            monkeypatch.setattr(network, "PROGRAMS", programs)
            copied[0] = 0
            grads = {k: np.empty(s) for k, s in enumerate(shapes)}
            value = network.value_and_grad(plan, ops, grads)
            assert_close(value, oe.contract(eq, *ops, optimize=path))
            assert (plan.programs[0].copied if programs else copied[0]) == plan.copies
        counts.append(plan.copies)
    assert counts[0] == 0 < counts[1]
    assert network.tree_plan(inputs, out, shapes, path, wrt).copies == 0


def _loop_anything(monkeypatch):
    """Let tree plans loop any product over letters one operand has (`executor._prefix`'s
    thresholds at 1), on fresh caches: small networks then take looped products."""
    monkeypatch.setattr(executor, "PREFIX_SIDE", 1)
    monkeypatch.setattr(executor, "PREFIX_MIN", 1)
    for cached in (executor._pair_plan, network.tree_plan, network.forward_plan):
        cached.cache_clear()


@pytest.fixture
def looping(monkeypatch):
    _loop_anything(monkeypatch)
    yield
    for cached in (executor._pair_plan, network.tree_plan, network.forward_plan):
        cached.cache_clear()


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 10_000),
    dtype=st.sampled_from([float, complex]),
    output=st.sampled_from([0, 2]),
    jitted=st.booleans(),
)
def test_random_networks_with_looped_products_have_every_gradient(looping, seed, dtype, output, jitted):
    """The random networks and paths above with every product allowed to loop over letters
    one operand has (so that small networks take looped products, forward and sweep): the
    value is opt_einsum's and each cotangent its environment, eager and jitted."""
    test_random_networks_along_random_paths_have_every_gradient.hypothesis.inner_test(
        seed=seed, dtype=dtype, output=output, jitted=jitted
    )


def test_small_networks_take_looped_products_when_allowed(looping):
    """The fixture above is no no-op: planned with the thresholds at 1, the random networks'
    trees loop some products (so the test above runs looped products)."""
    looped = 0
    for seed in range(6):
        eq, ops, path = _network(seed, float, 0)
        ins, out = eq.split("->")
        shapes = tuple(x.shape for x in ops)
        plan = network.tree_plan(tuple(ins.split(",")), out, shapes, tuple(path), tuple(range(len(ops))))
        runs = [p.run for p in plan.forward] + [q.run for q in plan.backward]
        looped += sum(1 for r in runs if isinstance(r, network._Pair) and r.plan.head)
    assert looped > 0


def test_looped_products_save_copies_on_a_lattice(monkeypatch):
    """issue 22's compute-bound lattice (5x5, bond 8; n4): where no block order of a product's
    result serves its reader, the product loops over letters one operand has and writes the
    order the reader takes as it lies. The plan copies fewer elements than without loops,
    numpy copies what the plan counts (steps walked, and the plan's program), and the value and
    every gradient stay opt_einsum's. Fails if `network.LOOPED` is ignored or the loops' reads
    are miscounted."""
    ctg = pytest.importorskip("cotengra", reason="cotengra (the tn extra) makes the lattice")
    con = ctg.utils.lattice_equation([5, 5], d_min=8, d_max=8)
    inputs = tuple("".join(t) for t in con.inputs)
    shapes = tuple(tuple(con.size_dict[c] for c in t) for t in inputs)
    eq = ",".join(inputs) + "->"
    # cotengra's RandomGreedyOptimizer(max_repeats=32, seed=0) path (on others, such as
    # opt_einsum's greedy one, looping saves less: `tree_plan` keeps the plan copying least)
    path = ((20, 21), (0, 1), (2, 7), (15, 18), (2, 18), (2, 19), (14, 17), (12, 17), (9, 13), (9, 15))
    path += ((1, 11), (2, 13), (8, 11), (7, 11), (8, 10), (2, 7), (2, 8), (6, 7), (2, 6), (2, 5))
    path += ((2, 4), (2, 3), (1, 2), (0, 1))
    wrt = tuple(range(len(inputs)))
    ops = [np.random.default_rng(k).standard_normal(s) / 3 for k, s in enumerate(shapes)]
    envs = _environments(eq, ops, np.array(1.0))
    copied = _count_copies(monkeypatch)
    monkeypatch.setattr(network, "SUMMED_AS_LYING", False)  # (the loops' saving alone)
    counts = []
    for looped in (False, True):
        monkeypatch.setattr(network, "LOOPED", looped)
        network.tree_plan.cache_clear()
        plan = network.tree_plan(inputs, "", shapes, path, wrt)
        runs = [p.run for p in plan.forward] + [q.run for q in plan.backward]
        assert any(isinstance(r, network._Pair) and r.plan.head for r in runs) == looped
        for programs in (False, True):
            monkeypatch.setattr(network, "PROGRAMS", programs)
            copied[0] = 0
            grads = {k: np.empty(s) for k, s in enumerate(shapes)}
            value = network.value_and_grad(plan, ops, grads)
            assert (plan.programs[0].copied if programs else copied[0]) == plan.copies
            assert_close(value, oe.contract(eq, *ops, optimize=path), rtol=1e-10)
            for k, env in enumerate(envs):
                assert_close(grads[k], env, rtol=1e-9, atol=1e-12)
        counts.append(plan.copies)
    network.tree_plan.cache_clear()
    assert counts[1] < 0.7 * counts[0], counts  # (2,539,520 and 1,552,384 elements)


def test_a_product_sums_in_the_order_an_operand_lies_in(monkeypatch):
    """An intermediate that lies otherwise than its letters (`jkl` written as `kjl`) read by a
    product summing j and k with a small input `ijk`: summed in the first operand's letter
    order (j k), the large one is copied; in the order it lies in (k j), only the small one.
    `_product` keeps the order copying least. Fails if `SUMMED_AS_LYING` is ignored."""
    specs, shapes, memory = ["jkl", "ijk"], [(8, 9, 400), (2, 8, 9)], ["kjl", "ijk"]
    copies = {}
    for lying in (False, True):
        monkeypatch.setattr(network, "SUMMED_AS_LYING", lying)
        _, _, copies[lying], _, reads = network._product(specs, "il", shapes, memory)
    assert copies == {False: 8 * 9 * 400, True: 2 * 8 * 9}
    assert reads == (None, "ikj")  # the small input copied, its summed letters as `kjl` lies


def test_summing_as_operands_lie_saves_copies_on_a_lattice(monkeypatch):
    """A 7x7 lattice of bond 4 (n3): its tree plan copies fewer elements when products may
    sum in the order an operand lies in, numpy copies what the plan counts, and the value and
    gradients stay opt_einsum's."""
    ctg = pytest.importorskip("cotengra", reason="cotengra (the tn extra) makes the lattice")
    con = ctg.utils.lattice_equation([7, 7], d_min=4, d_max=4)
    inputs = tuple("".join(t) for t in con.inputs)
    shapes = tuple(tuple(con.size_dict[c] for c in t) for t in inputs)
    eq = ",".join(inputs) + "->"
    path = tuple(tuple(p) for p in oe.contract_path(eq, *shapes, shapes=True, optimize="greedy")[0])
    wrt = tuple(range(len(inputs)))
    ops = [np.random.default_rng(k).standard_normal(s) / 2 for k, s in enumerate(shapes)]
    envs = _environments(eq, ops, np.array(1.0))
    copied = _count_copies(monkeypatch)
    monkeypatch.setattr(network, "PROGRAMS", False)
    counts = []
    for lying in (False, True):
        monkeypatch.setattr(network, "SUMMED_AS_LYING", lying)
        network.tree_plan.cache_clear()
        plan = network.tree_plan(inputs, "", shapes, path, wrt)
        copied[0] = 0
        grads = {k: np.empty(s) for k, s in enumerate(shapes)}
        value = network.value_and_grad(plan, ops, grads)
        assert copied[0] == plan.copies
        assert_close(value, oe.contract(eq, *ops, optimize=path), rtol=1e-10)
        for k, env in enumerate(envs):
            assert_close(grads[k], env, rtol=1e-9, atol=1e-12)
        counts.append(plan.copies)
    network.tree_plan.cache_clear()
    assert counts[1] < 0.95 * counts[0], counts


def test_the_jitted_forward_runs_the_eager_forwards_steps(monkeypatch):
    """`ea.jit` stages a network as one equation along the eager path, so its compiled forward
    runs the same matrix products, of the same shapes, as eager einsum (a regression of issue
    22: the staged steps were merged and planned again by "auto"), walked step by step."""
    eq, ops, path = _network(11, float, 0)
    monkeypatch.setattr(network, "PROGRAMS", False)  # the steps walked one by one
    calls: list[tuple] = []
    real, dot = np.matmul, np.dot

    class Counting:
        def __getattr__(self, name):
            return getattr(np, name)

        @staticmethod
        def matmul(a, b, *args, **kwargs):
            calls.append((a.shape, b.shape))
            return real(a, b, *args, **kwargs)

        @staticmethod
        def dot(a, b, *args, **kwargs):  # the products without batch letters
            calls.append((a.shape, b.shape))
            return dot(a, b, *args, **kwargs)

    f = lambda *xs: ea.einsum(eq, *xs, optimize=path)
    jf = ea.jit(f)
    jf(*ops)  # staged and compiled
    for module in (executor, network):  # eager einsum's steps, and a planned tree's
        monkeypatch.setattr(module, "np", Counting())
    f(*ops)
    eager, calls[:] = list(calls), []
    jf(*ops)
    assert calls == eager and len(eager) >= 3
    (e,) = jf.lower(*ops).equations
    assert e.params["optimize"] == tuple(tuple(p) for p in oe.contract_path(eq, *ops, optimize=path)[0])


def test_the_eager_and_the_jitted_forward_run_one_program(monkeypatch):
    """The value alone of a network of small operands is one `_Program` of bound numpy calls,
    eager and jitted alike: both run the same plan's program (the same products, the same
    copies, as many as the plan counts), and one call makes a handful of Python calls where
    walking the steps makes several per step (the lattice regression of issue 22: the
    jitted forward took its own, slower road)."""
    eq, shapes = rand_equation(24, 3, d_min=2, d_max=3, seed=4)
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal(s) for s in shapes]
    path = oe.contract_path(eq, *ops, optimize="greedy")[0]
    ran: list = []
    real, take = network._Program.run, network._program_out

    def run(self, arrays, grads):
        ran.append(self)
        return real(self, arrays, grads)

    plans = []

    def program_out(plan, key):
        plans.append(plan)
        return take(plan, key)

    monkeypatch.setattr(network, "_program_out", program_out)
    monkeypatch.setattr(network._Program, "run", run)
    f = lambda *xs: ea.einsum(eq, *xs, optimize=path)
    jf = ea.jit(f)
    want = oe.contract(eq, *ops, optimize=path)
    for g in (f, jf, f, jf):
        assert_close(g(*ops), want, rtol=1e-12)
    plan = plans[0]  # (jit's first call stages: it runs eager einsum)
    assert plan.programmable and not plan.backward
    assert len(ran) == 4 and {id(p) for p in plans} == {id(plan)} and {id(p) for p in ran} == {id(ran[0])}
    (program,) = plan.programs
    products = [  # a matrix product, or numpy.einsum's loop over two operands
        fn
        for fn, args in program.ops
        if getattr(fn, "__name__", "") in ("dot", "matmul")
        or (getattr(getattr(fn, "func", None), "__name__", "") == "c_einsum" and len(args) == 2)
    ]
    assert len(products) == program.contractions == sum(1 for p in plan.forward if not p.run.plan.outer)
    assert program.copied == plan.copies
    monkeypatch.setattr(network._Program, "run", real)

    def calls() -> int:
        return len(_python_calls(lambda: network.value(plan, ops)))

    assert calls() <= 12  # (value, the program looked up, run, its copies and calls: a handful)
    monkeypatch.setattr(network, "PROGRAMS", False)
    assert calls() >= 2 * len(plan.forward) >= 2 * 23


def test_a_plan_of_large_values_walks_its_steps():
    """A program keeps a buffer for every value between calls: along a path whose
    intermediates hold more than `PROGRAM_VALUES` elements it would be too large to keep (made
    and let go at every call), so that plan walks its steps instead, on the same small inputs."""
    eq, shapes = rand_equation(24, 3, d_min=2, d_max=3, seed=4)
    rng = np.random.default_rng(4)
    ops = [rng.standard_normal(s) for s in shapes]
    ins, out = eq.split("->")
    inputs = tuple(ins.split(","))
    for path, large in ((_random_path(len(ops), rng), True), (oe.contract_path(eq, *ops)[0], False)):
        path = tuple(map(tuple, path))
        plan = network.forward_plan(inputs, out, tuple(shapes), path)
        values = sum(math.prod(s) for s in shapes) + sum(math.prod(p.run.out_shape) for p in plan.forward)
        assert (values > network.PROGRAM_VALUES) == large
        assert plan.programmable is not large
        for _ in range(2):
            assert_close(network.value(plan, ops), oe.contract(eq, *ops, optimize=path), rtol=1e-10)
        assert len(plan.programs) == (not large)


def test_a_walked_forward_reuses_its_buffers(monkeypatch):
    """A forward too large for a program walks its steps on the plan's pool: the buffers are
    made on the first call and serve every later one (a pool whose last step kept its operands
    made a fresh one per call, each a fresh mapping whose pages fault, and held them all)."""
    rng = np.random.default_rng(0)
    x, w, y = rng.standard_normal((64, 512)), rng.standard_normal((512, 512)), rng.standard_normal((64, 512))
    plan = network.forward_plan(("bi", "ij", "bj"), "b", (x.shape, w.shape, y.shape), ((0, 1), (0, 1)))
    assert plan.pooled and not plan.programmable
    for _ in range(4):
        assert_close(
            ea.einsum("bi,ij,bj->b", x, w, y, optimize=[(0, 1), (0, 1)]), np.einsum("bi,ij,bj->b", x, w, y)
        )
        (pool,) = plan.pools
        assert pool.fresh == 1 and pool.held == x.size * 8


def test_planning_grows_linearly_with_the_tensors():
    """Planning a ring of 250 and of 1,000 tensors (its path, the pairwise steps, the layouts,
    every product and pullback): the Python calls made grow with the tensors, not their
    square (a quadratic planner makes 16 times the calls for 4 times the tensors)."""

    def calls(n: int) -> int:
        syms = [chr(0x4E00 + i) for i in range(n)]
        inputs = tuple(syms[i] + syms[(i + 1) % n] for i in range(n))
        shapes = ((2, 2),) * n
        count = [0]

        def profile(frame, event, arg):
            if event == "call":
                count[0] += 1

        sys.setprofile(profile)
        try:
            path = _path(inputs, "", shapes, "greedy", None)
            network.tree_plan(inputs, "", shapes, path, tuple(range(n)))
        finally:
            sys.setprofile(None)
        return count[0]

    small, large = calls(250), calls(1000)
    assert large < 6 * small, (small, large)


def _counting(monkeypatch, name):
    """A list that records the arguments of each call of `network.<name>` (still called)."""
    return _counting_in(monkeypatch, network, name)


def _counting_in(monkeypatch, module, name):
    """A list that records the arguments of each call of `module.<name>` (still called)."""
    calls = []
    real = getattr(module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def test_a_tree_that_copies_nothing_is_planned_once(monkeypatch):
    """`tree_plan` keeps the chosen layouts unless letters in order of appearance copy less:
    where the chosen plan copies nothing (a network of bond-1 tensors, every letter dropped,
    the planning report's 1,000-tensor network) the other plans are not built; where it copies,
    the plan with letters in order of appearance is, and the one kept copies least. (No
    product of this bond-2 network is large enough to loop: the looped plans would be these
    two, and are not built, `_loop_free`.)"""
    eq, inputs, out, shapes, path = _greedy_network(30, 2, d_min=2, d_max=2)
    wrt = tuple(range(len(inputs)))
    ones = tuple((1,) * len(s) for s in shapes)
    built = _counting(monkeypatch, "_tree_plan")
    network.tree_plan.cache_clear()
    try:
        plan = network.tree_plan(inputs, out, ones, path, wrt)
        assert plan.copies == 0 and len(built) == 1
        built.clear()
        products = _counting(monkeypatch, "_pair_product")
        plan = network.tree_plan(inputs, out, shapes, path, wrt)
        assert [args[5:7] for args in built] == [(True, False), (False, False)]
        # the two plans share their products (the inputs' steps at least): each planned once
        keys = [repr(args) for args in products]
        assert len(keys) == len(set(keys))
        products.clear()
        network._tree_plan(inputs, out, shapes, path, wrt, True)
        network._tree_plan(inputs, out, shapes, path, wrt, False)
        assert len(products) > len(keys)  # (planned apart, they plan some products twice)
        other = network._tree_plan(inputs, out, shapes, path, wrt, False)
        assert plan.copies > 0 and plan.copies <= other.copies
    finally:
        network.tree_plan.cache_clear()  # the next tests plan with the real functions
    ops = [np.ones(s) for s in ones]
    value, grads = ea.value_and_grad(lambda *xs: ea.einsum(eq, *xs, optimize=path), argnums=wrt)(*ops)
    assert_close(value, oe.contract(eq, *ops))
    for g, x in zip(grads, ops):  # every operand's environment: the product of the others, 1
        assert_close(g, np.ones_like(x))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_looped_plans_are_built_where_a_product_may_loop_and_kept_where_they_copy_least(
    looping, monkeypatch, seed
):
    """With every product allowed to loop (`executor._prefix`'s thresholds at 1), `tree_plan`
    builds the plans with looped products too (four plans), and keeps the one that copies
    least of the four, as each planned alone finds them."""
    _, inputs, out, shapes, path = _greedy_network(12, seed, d_min=2, d_max=3)
    wrt = tuple(range(len(inputs)))
    alone = [
        network._tree_plan(inputs, out, shapes, path, wrt, lay, loop)
        for loop in (False, True)
        for lay in (True, False)
    ]
    built = _counting(monkeypatch, "_tree_plan")
    plan = network.tree_plan(inputs, out, shapes, path, wrt)
    assert sorted(args[5:7] for args in built) == sorted(
        {(lay, loop) for lay in (True, False) for loop in (True, False)}
    )
    assert plan.copies == min(p.copies for p in alone)
    assert any(p.copies != alone[0].copies for p in alone), "the four plans differ on these networks"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(3, 14), bond=st.integers(2, 40))
def test_a_tree_whose_products_cannot_loop_has_looped_plans_equal_to_its_plain_ones(seed, n, bond):
    """`_loop_free` is exact: where it says the looped plans are the plain ones (no product
    the plain plans made may loop, the same layouts chosen), each looped plan planned alone
    makes the same products, step by step, and copies as much; and the plans that share one
    memo of products are the plans each makes alone."""
    _, inputs, out, shapes, path = _greedy_network(n, seed, d_min=2, d_max=bond)
    wrt = tuple(range(len(inputs)))
    memo: dict = {}
    plain = [network._tree_plan(inputs, out, shapes, path, wrt, lay, False, memo) for lay in (True, False)]
    for p, lay in zip(plain, (True, False)):
        alone = network._tree_plan(inputs, out, shapes, path, wrt, lay)
        assert alone.copies == p.copies
        assert [q.args for q in alone.backward] == [q.args for q in p.backward]
    if network._loop_free(inputs, out, shapes, path, memo):
        for p, lay in zip(plain, (True, False)):
            looped = network._tree_plan(inputs, out, shapes, path, wrt, lay, True)
            assert looped.copies == p.copies
            assert [(q.args, q.copies) for q in looped.forward] == [(q.args, q.copies) for q in p.forward]
            assert [(q.args, q.target, q.copies) for q in looped.backward] == [
                (q.args, q.target, q.copies) for q in p.backward
            ]


def test_each_pullback_plans_each_candidate_order_once(monkeypatch):
    """A pullback weighs the orders it may write its cotangent in (the product's own, the
    operand's, the one the operand lies in) by planning each one's product: an order named
    twice is planned once, and the one kept is not planned again. On a network of bond-1
    tensors (every letter dropped, every order the same) that is one product per forward step
    and one per pullback (it was four per pullback)."""
    _, inputs, out, shapes, path = _greedy_network(30, 3, d_min=2, d_max=2)
    ones = tuple((1,) * len(s) for s in shapes)
    products = _counting(monkeypatch, "_product")
    network.tree_plan.cache_clear()
    try:
        plan = network.tree_plan(inputs, out, ones, path, tuple(range(len(inputs))))
    finally:
        network.tree_plan.cache_clear()
    assert len(plan.forward) == len(path) and len(plan.backward) == 2 * len(path)
    assert len(products) == len(plan.forward) + len(plan.backward)


def test_a_jitted_network_gradient_makes_no_numpy_call_per_operand_for_sizes(monkeypatch):
    """The per-call work of a planned tree is its products: the gradient blocks are sized
    with Python arithmetic (`math.prod`), not one `np.prod` call (~3 us each) per operand
    and per block, which cost a tiny network a third of its time."""
    eq, shapes = rand_equation(10, 2, seed=3, d_min=2, d_max=3)
    ops = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(shapes)]
    vg = ea.jit(ea.value_and_grad(lambda *xs: ea.einsum(eq, *xs), argnums=tuple(range(10))))
    expected = vg(*ops)
    calls = []
    real = np.prod
    monkeypatch.setattr(np, "prod", lambda *a, **k: calls.append(a) or real(*a, **k))
    value, grads = vg(*ops)
    assert calls == []
    assert_close(value, expected[0])
    for g, e in zip(grads, expected[1]):
        assert_close(g, e)


@pytest.mark.parametrize("seed", range(4))
def test_the_sweep_reads_what_was_laid_out_once(monkeypatch, seed):
    """A value the forward would copy into a product's layout is laid out once where it is
    made, and the sweep, which reads it again in the same groups, reads that copy; a
    cotangent that two pullbacks would each copy is laid out once as its value was written.
    On random 3-regular networks of bond 2 the sweep then copies at most 1.8 times what the
    forward copies (2.1-2.8 times when every reader copies for itself), as counted around
    every product and every lay-out while the plan runs, and as the plan counts."""
    eq, inputs, out, shapes, path = _greedy_network(40, seed, d_min=2, d_max=2)
    copied = _count_copies(monkeypatch)
    network.tree_plan.cache_clear()
    wrt = tuple(range(len(inputs)))
    plan = network.tree_plan(inputs, out, shapes, path, wrt)
    network.tree_plan.cache_clear()  # the next tests plan with the real functions
    ops = [np.random.default_rng(seed).standard_normal(s) for s in shapes]
    value, kept = network.forward(plan, ops, keep=True)
    forward_copies, copied[0] = copied[0], 0
    grads = {k: None for k in wrt}
    network.sweep(plan, np.ones(()), ops, kept, grads)
    sweep_copies = copied[0]
    assert forward_copies == sum(p.copies for p in plan.forward) > 0
    assert sweep_copies == sum(p.copies for p in plan.backward)
    assert sweep_copies <= 1.8 * forward_copies
    expr = oe.contract_expression(eq, *shapes, optimize=path)
    assert_close(value, expr(*ops))
    g_num = ea.grad(lambda *xs: ea.einsum(eq, *xs, optimize=path), argnums=wrt)(*ops)
    for k in wrt:
        assert_close(grads[k], g_num[k])


def test_a_cotangent_two_pullbacks_would_copy_alike_is_laid_out_once_as_they_read_it(monkeypatch):
    """The tetrahedron ``abc,ade,bdf,cef->`` along ((0, 1), (0, 1), (0, 1)): the cotangent of
    ``abc,ade->bcde`` (n^4 elements) comes out of its pullback grouped (b d)(c e), and both of its
    step's pullbacks read it grouped (b c)(d e). It is laid out once in the order they would each
    copy it into, not copied by each: n^4 elements copied a call, as the plan counts and as
    counted while it runs (2 n^4 before), the value and gradients as opt_einsum's and einsum's.
    (Below n = 32 the plans copy 2 n^4 elsewhere: in the forward, every reader reading as it lies.)"""
    n = 32
    inputs, path = ("abc", "ade", "bdf", "cef"), ((0, 1), (0, 1), (0, 1))
    ops = [np.random.default_rng(k).standard_normal((n, n, n)) for k in range(4)]
    copied = _count_copies(monkeypatch)
    plan = network.tree_plan(inputs, "", ((n, n, n),) * 4, path, (0, 1, 2, 3))
    assert plan.copies == n**4 and [p.copies for p in plan.forward] == [0, 0, 0]
    laid = [p for p in plan.backward if p.copies]
    assert len(laid) == 1 and isinstance(laid[0].run, network._Then)
    value, kept = network.forward(plan, ops, keep=True)
    grads = dict.fromkeys(range(4))
    network.sweep(plan, np.ones(()), ops, kept, grads)
    assert copied[0] == n**4
    assert_close(value, oe.contract("abc,ade,bdf,cef->", *ops))
    expected = ea.grad(lambda *xs: ea.einsum("abc,ade,bdf,cef->", *xs), argnums=(0, 1, 2, 3))(*ops)
    for k in range(4):
        assert_close(grads[k], expected[k])


# -- buffers and copies ----------------------------------------------------------------------------


def _bond2_network(n, seed, dtype=float):
    """A random 3-regular network of bond 2 with its greedy path, operands and gradient buffers:
    its largest intermediates hold thousands of elements (`network.POOL_MIN` is lowered to
    pool them)."""
    eq, inputs, out, shapes, path = _greedy_network(n, seed, d_min=2, d_max=2)
    rng = np.random.default_rng(seed)
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if np.dtype(dtype).kind == "c":
        ops = [x + 1j * rng.standard_normal(x.shape) for x in ops]
    return eq, inputs, out, shapes, path, ops


def test_a_second_call_reuses_the_buffers_of_the_first(monkeypatch):
    """The intermediates, copies and cotangents of a call are buffers of the plan's pool: the
    second value-and-gradient makes none (`_Pool.fresh`) and allocates less at its peak
    (tracemalloc) than the first, which made them; the results are the same."""
    monkeypatch.setattr(network, "PROGRAMS", False)  # the steps walked one by one
    import tracemalloc

    monkeypatch.setattr(network, "POOL_MIN", 64)
    _, inputs, out, shapes, path, ops = _bond2_network(30, 5)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    assert plan.pooled and plan.pools == []
    peaks, results = [], []
    for _ in range(2):
        tracemalloc.start()
        grads = dict.fromkeys(wrt)
        value = network.value_and_grad(plan, ops, grads)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        results.append((value, grads))
    (pool,) = plan.pools
    made = pool.fresh
    assert made > 0
    network.value_and_grad(plan, ops, dict.fromkeys(wrt))
    assert plan.pools == [pool] and pool.fresh == made
    assert peaks[1] < peaks[0]
    assert 0 < plan.held <= peaks[0]  # what the pool keeps was allocated by the first call
    (v0, g0), (v1, g1) = results
    assert v0 == v1
    for k in wrt:
        np.testing.assert_array_equal(g0[k], g1[k])


@pytest.mark.parametrize("dtype", [float, complex])
def test_pooled_buffers_never_hold_what_a_call_returned(monkeypatch, dtype):
    """A value, a gradient and a forward's result are arrays of their own: the next call on
    other operands, which reuses the pool, leaves them as they were (compared with opt_einsum's
    contraction and environments, and with the unpooled sweep), real and complex."""
    monkeypatch.setattr(network, "POOL_MIN", 16)
    eq, inputs, out, shapes, path, ops = _bond2_network(24, 9, dtype)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    first = network.value_and_grad(plan, ops, grads := dict.fromkeys(wrt))
    fwd, _ = network.forward(plan, ops)
    others = [2.0 * x for x in ops]
    network.value_and_grad(plan, others, dict.fromkeys(wrt))
    network.forward(plan, others)
    expected = oe.contract(eq, *ops, optimize=path)
    assert_close(first, expected)
    assert_close(fwd, expected)
    value, kept = network.forward(plan, ops, keep=True)  # unpooled: the eager VJP's road
    reference = dict.fromkeys(wrt)
    network.sweep(plan, np.ones((), value.dtype), ops, kept, reference)
    for k in wrt:
        assert_close(grads[k], reference[k])
    for k, env in enumerate(_environments(eq, ops, np.ones((), first.dtype))):
        assert_close(grads[k], env)


def test_a_transposing_copy_of_short_runs_is_one_gather():
    """Laying out an array of many size-2 axes: numpy's strided copy runs inner loops of two
    elements; `_copy_into` gathers through a precomputed index instead (one numpy.take), with
    the same result. It keeps numpy's copy where the inner loop is four elements or more (the
    view's last two axes consecutive in memory), and where the array is not dense."""
    from numpy.lib.stride_tricks import as_strided

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2,) * 12)
    for _ in range(8):
        perm = tuple(int(i) for i in rng.permutation(12))
        view = x.transpose(perm)
        out = np.empty(view.shape)
        network._copy_into(out, view)
        np.testing.assert_array_equal(out, np.ascontiguousarray(view))
        gathered = network._gather_index(view.shape, view.strides, 8) is not None
        assert gathered == (perm[-2] + 1 != perm[-1])
    y = rng.standard_normal((16, 16, 16)).transpose(2, 0, 1)  # inner loops of one, 16 apart
    out = np.empty(y.shape)
    network._copy_into(out, y)
    np.testing.assert_array_equal(out, np.ascontiguousarray(y))
    z = rng.standard_normal((8, 64))[:, ::2].T  # not dense
    overlapping = as_strided(np.arange(8.0), (2, 2, 2), (8, 8, 40))  # positions 0..7, not one each
    for v in (z, overlapping):
        assert network._gather_index(v.shape, v.strides, 8) is None
        out = np.empty(v.shape)
        network._copy_into(out, v)
        np.testing.assert_array_equal(out, np.ascontiguousarray(v))


def test_the_gather_indices_kept_stay_within_their_budget(monkeypatch):
    """Each index takes as many bytes as the float64 value it lays out: the indices kept are
    dropped, oldest first, beyond `GATHER_BUDGET`, and a dropped one is made again when needed."""
    monkeypatch.setattr(network, "_GATHERS", {})
    monkeypatch.setattr(network, "GATHER_BUDGET", 3 * 4096 * 8)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2,) * 12)
    views = [x.transpose((*rng.permutation(10), 11, 10)) for _ in range(6)]  # runs of two
    for view in views + views[:2]:
        out = np.empty(view.shape)
        network._copy_into(out, view)
        np.testing.assert_array_equal(out, np.ascontiguousarray(view))
        kept = [i for i in network._GATHERS.values() if i is not None]
        assert 0 < sum(i.nbytes for i in kept) <= network.GATHER_BUDGET
    assert len(network._GATHERS) == 3


def test_a_pool_takes_back_only_its_own_buffers(monkeypatch):
    """`_Pool.put` of an array the pool did not make (an operand of the user's, a product's own
    array) leaves it alone, so that no later step can write into it; `release_pools` lets every
    buffer go, and the next call makes its own again (as many as the first call made)."""
    monkeypatch.setattr(network, "PROGRAMS", False)  # the steps walked one by one
    monkeypatch.setattr(network, "POOL_MIN", 64)
    pool = network._Pool()
    mine = pool.get((16, 8), np.dtype(float))
    foreign = np.ones((16, 8))
    pool.put(foreign)
    pool.put(foreign.T)
    assert pool.free == {} and pool.held == mine.nbytes
    pool.put(mine.T)
    assert pool.get((8, 16), np.dtype(float)).base is not None and pool.fresh == 1
    _, inputs, out, shapes, path, ops = _bond2_network(20, 3)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    network.value_and_grad(plan, ops, dict.fromkeys(wrt))
    made = plan.pools[0].fresh
    network.release_pools()
    assert plan.held == 0
    value = network.value_and_grad(plan, ops, grads := dict.fromkeys(wrt))
    assert plan.pools[0].fresh == 2 * made and plan.held > 0
    assert_close(value, oe.contract(",".join(inputs) + "->" + out, *ops, optimize=path))
    for k, env in enumerate(_environments(",".join(inputs) + "->" + out, ops, np.ones(()))):
        assert_close(grads[k], env)


def test_pools_keep_at_most_the_budget_between_calls(monkeypatch):
    """A call whose pool would take the bytes kept between calls above `POOL_BUDGET` lets its
    buffers go when it ends (a large contraction holds nothing once it has returned); under
    the budget the plan keeps them for its next call, which then makes none."""
    monkeypatch.setattr(network, "PROGRAMS", False)  # the steps walked one by one
    monkeypatch.setattr(network, "POOL_MIN", 64)
    network.release_pools()
    _, inputs, out, shapes, path, ops = _bond2_network(20, 3)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    monkeypatch.setattr(network, "POOL_BUDGET", 0)
    value = network.value_and_grad(plan, ops, dict.fromkeys(wrt))
    assert plan.pools == [] and plan.held == 0
    assert_close(value, oe.contract(",".join(inputs) + "->" + out, *ops, optimize=path))
    monkeypatch.setattr(network, "POOL_BUDGET", 64 << 20)
    network.value_and_grad(plan, ops, dict.fromkeys(wrt))
    (pool,) = plan.pools
    made = pool.fresh
    assert made > 0 and 0 < plan.held <= network.POOL_BUDGET
    network.value_and_grad(plan, ops, dict.fromkeys(wrt))
    assert plan.pools == [pool] and pool.fresh == made  # kept: the next call made no buffer
    # a second plan whose pool does not fit beside the first one's is not kept
    monkeypatch.setattr(network, "POOL_BUDGET", plan.held)
    other = network._tree_plan(inputs, out, shapes, path, wrt[:-1], True)
    network.value_and_grad(other, ops, dict.fromkeys(wrt[:-1]))
    assert other.pools == [] and plan.pools == [pool]
    network.release_pools()


def test_a_plan_of_small_arrays_takes_no_pool(monkeypatch):
    """A plan whose every value is smaller than `POOL_MIN` is not pooled: its calls check no
    pool out (no bookkeeping on small networks), and make the same values as a pooled plan."""
    monkeypatch.setattr(network, "PROGRAMS", False)  # the steps walked one by one
    _, inputs, out, shapes, path, ops = _bond2_network(20, 3)
    wrt = tuple(range(len(ops)))
    monkeypatch.setattr(network, "POOL_MIN", 1 << 40)
    small = network._tree_plan(inputs, out, shapes, path, wrt, True)
    assert not small.pooled
    value = network.value_and_grad(small, ops, grads := dict.fromkeys(wrt))
    assert small.pools == []
    monkeypatch.setattr(network, "POOL_MIN", 64)
    pooled = network._tree_plan(inputs, out, shapes, path, wrt, True)
    assert pooled.pooled
    value2 = network.value_and_grad(pooled, ops, grads2 := dict.fromkeys(wrt))
    assert len(pooled.pools) == 1 and value2 == value
    for k in wrt:
        np.testing.assert_array_equal(grads[k], grads2[k])
    network.release_pools()


@pytest.mark.parametrize(
    ("eq", "path", "shapes"),
    [
        # X = ij,jk->ik (65,536 elements) meets the input i; the pullbacks of that step come as
        # its operands do (the small one first)
        ("ij,jk,i,k->", [(0, 1), (0, 2), (0, 1)], ((256, 4), (4, 256), (256,), (256,))),
        # X meets an intermediate made after it (y = l,kl->k): the step's operands come X first
        ("ij,jk,i,l,kl->", [(0, 1), (1, 2), (1, 2), (0, 1)], ((256, 4), (4, 256), (256,), (8,), (256, 8))),
    ],
)
def test_the_sweep_lets_each_value_go_after_its_last_reader(monkeypatch, eq, path, shapes):
    """A step's operand is let go right after the last pullback that reads it, and a step's
    pullback to its smaller operand runs first (it reads the larger one, which is then let
    go): the cotangent of the one large intermediate X takes X's own buffer. So a value-and-
    gradient from nothing makes one pooled buffer, X's, and its tracemalloc peak stays under
    1.5 times X's bytes (letting X go after the whole step, or pulling back to X first, makes
    a second buffer of X's size and peaks over twice X's bytes)."""
    monkeypatch.setattr(network, "PROGRAMS", False)  # the steps walked one by one
    import tracemalloc

    monkeypatch.setattr(network, "POOL_MIN", 4096)
    ins, out = eq.split("->")
    inputs = tuple(ins.split(","))
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, tuple(path), wrt, True)
    big = 256 * 256 * 8  # X's bytes; every other value holds at most 2,048 elements
    assert plan.pooled
    network.release_pools()
    tracemalloc.start()
    value = network.value_and_grad(plan, ops, grads := dict.fromkeys(wrt))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    (pool,) = plan.pools
    assert sorted(raw.nbytes for raw in pool.owned.values()) == [big]
    assert peak < 1.5 * big
    assert_close(value, oe.contract(eq, *ops, optimize=path))
    for k, env in enumerate(_environments(eq, ops, np.ones(()))):
        assert_close(grads[k], env)
    network.release_pools()


def test_a_gathered_copy_allocates_no_second_array():
    """`_copy_into`'s gather writes straight into its output (numpy.take with ``mode="raise"``
    buffers `out` in a temporary as large as it): with the index made, laying out 2^16
    elements allocates under a tenth of their bytes (tracemalloc)."""
    import tracemalloc

    x = np.random.default_rng(2).standard_normal((2,) * 16)
    view = x.transpose((*range(1, 16), 0))  # inner loops of one element
    out = np.empty(view.shape)
    network._copy_into(out, view)  # makes (and keeps) the index
    assert network._gather_index(view.shape, view.strides, 8) is not None
    tracemalloc.start()
    network._copy_into(out, view)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < out.nbytes / 10
    np.testing.assert_array_equal(out, np.ascontiguousarray(view))


@pytest.mark.parametrize(("dtype", "seed"), [(float, 4), (complex, 7)])
def test_the_gradients_are_written_where_they_are_returned(monkeypatch, dtype, seed):
    """A pullback to an operand whose product writes the gradient as it lies in the operand's
    order (`Pullback.direct`) writes it straight into the gradient's array (the block of
    the flat array a value-and-gradient returns): no buffer, no copy. On random 3-regular
    networks of bond 2 about half the operands are, counted as the products return the very
    array they were given; the values are opt_einsum's environments, real and complex."""
    monkeypatch.setattr(network, "PROGRAMS", False)  # the steps walked one by one
    _, inputs, out, shapes, path, ops = _bond2_network(30, seed, dtype)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    direct = [p for p in plan.backward if p.target < plan.n and p.direct]
    assert len(direct) >= 0.4 * len(wrt)
    in_place = []
    call = network._Pair.__call__

    def spy(self, pool, a, b, dest=None):
        r = call(self, pool, a, b, dest)
        if dest is not None:
            in_place.append(r is dest)
        return r

    monkeypatch.setattr(network._Pair, "__call__", spy)
    flat = np.zeros(sum(x.size for x in ops), np.result_type(*ops))
    grads, at = {}, 0
    for k, x in enumerate(ops):
        grads[k] = flat[at : at + x.size].reshape(x.shape)
        at += x.size
    blocks = dict(grads)
    value = network.value_and_grad(plan, ops, grads)
    assert len(in_place) == len(direct) and all(in_place)
    assert all(grads[k] is blocks[k] for k in wrt)
    eq = ",".join(inputs) + "->" + out
    assert_close(value, oe.contract(eq, *ops, optimize=path))
    for k, env in enumerate(_environments(eq, ops, np.ones((), flat.dtype))):
        assert_close(grads[k], env)


def test_a_gradient_in_another_order_is_one_transposing_copy(monkeypatch):
    """Where a pullback writes an operand's gradient in another order of the same letters, the
    gradient is that array transposed (`Pullback.turn`), copied once into its place, without
    `executor.spread`'s general road (kept for broadcast and repeated letters: none here); the
    gradients are opt_einsum's environments."""
    _, inputs, out, shapes, path, ops = _bond2_network(30, 4)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    turned = [p for p in plan.backward if p.target < plan.n and p.spread is not None]
    assert turned and all(p.turn is not None for p in turned)
    spreads = []
    real = network.spread
    monkeypatch.setattr(network, "spread", lambda *a: spreads.append(a) or real(*a))
    for grads in (dict.fromkeys(wrt), {k: np.empty(x.shape) for k, x in enumerate(ops)}):
        value = network.value_and_grad(plan, ops, grads)
        eq = ",".join(inputs) + "->" + out
        assert_close(value, oe.contract(eq, *ops, optimize=path))
        for k, env in enumerate(_environments(eq, ops, np.ones(()))):
            assert_close(grads[k], env)
    assert spreads == []


# -- the program of a value-and-gradient -----------------------------------------------------------


def _python_calls(fn):
    """The Python functions `fn` calls (`sys.setprofile`), but for the iteration of a WeakSet
    (`_POOLS`, which holds the pools of every plan of the process)."""
    import gc

    calls = []

    def profile(frame, event, arg):
        if event == "call" and not frame.f_code.co_filename.endswith("_weakrefset.py"):
            calls.append(frame.f_code.co_name)

    gc.disable()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return calls


def _grad_arrays(ops):
    """Each operand's gradient block of one flat array (as a value-and-gradient is given them)."""
    flat = np.zeros(sum(x.size for x in ops), np.result_type(*ops))
    grads, at = {}, 0
    for k, x in enumerate(ops):
        grads[k] = flat[at : at + x.size].reshape(x.shape)
        at += x.size
    return grads


def test_a_program_runs_every_step_without_a_python_call(monkeypatch):
    """A plan's value-and-gradient runs as its `_Program`: every step of the forward and the
    sweep bound once to numpy calls on fixed views, so that a call makes a few Python calls
    whatever its steps number (here 59 products and 116 pullbacks), where walking the steps
    makes several per step. The gradients are the same, and opt_einsum's environments."""
    monkeypatch.setattr(network, "PROGRAMS", True)
    eq, inputs, out, shapes, path, ops = _bond2_network(60, 3)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    assert plan.programmable
    steps = len(plan.forward) + len(plan.backward)
    results = []
    for programs in (False, True):
        monkeypatch.setattr(network, "PROGRAMS", programs)
        network.value_and_grad(plan, ops, _grad_arrays(ops))  # (the program is made here)
        grads = _grad_arrays(ops)
        calls = _python_calls(lambda g=grads: results.append(network.value_and_grad(plan, ops, g)))
        results.append(grads)
        if programs:
            assert len(plan.programs) == 1
            assert len(calls) <= 10, calls
        else:
            assert len(calls) >= 2 * steps
    v0, g0, v1, g1 = results
    assert_close(v1, v0, rtol=1e-13)
    for k, env in enumerate(_environments(eq, ops, np.ones(()))):
        assert_close(g1[k], g0[k], rtol=1e-12)
        assert_close(g1[k], env)


@pytest.mark.parametrize("dtype", [float, complex])
def test_a_program_returns_arrays_of_its_own(dtype):
    """Calls of one program on other operands leave what earlier calls returned as it was (the
    value and the gradients are copied out of the program's buffers), with or without the
    caller's gradient arrays; the program is made once, and its later calls make no buffer."""
    eq, inputs, out, shapes, path, ops = _bond2_network(24, 8, dtype)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    calls = []
    for scale, arrays in ((1.0, False), (-2.0, True), (0.5, False)):
        xs = [scale * x for x in ops]
        grads = _grad_arrays(xs) if arrays else dict.fromkeys(wrt)
        calls.append((xs, network.value_and_grad(plan, xs, grads), grads))
        if len(calls) == 1:
            (program,) = plan.programs
            made = program.pool.fresh
    assert plan.programs == [program] and program.pool.fresh == made
    for xs, value, grads in calls:
        assert_close(value, oe.contract(eq, *xs, optimize=path))
        for k, env in enumerate(_environments(eq, xs, np.ones((), value.dtype))):
            assert_close(grads[k], env)
            assert not any(np.may_share_memory(grads[k], raw) for raw in program.pool.owned.values())


@pytest.mark.parametrize(
    ("eq", "path", "sizes"),
    [
        ("ab,bc,cd,da,ae->", [(0, 1), (0, 1), (0, 1), (0, 1)], {"e": 3}),  # e summed before a product
        ("i,j,ij,jk->", [(0, 1), (0, 1), (0, 1)], {}),  # i,j->ij: an outer product
        ("bij,bjk,bki->", [(0, 1), (0, 1)], {"b": 3}),  # batch letters: a stacked product
        ("ij,j,ik->", [(0, 1), (0, 1)], {"j": 5}),  # ij,j->i: a matrix-vector product
        ("ab,bc,ca,ab->", [(0, 3), (0, 1), (0, 1)], {}),  # a letter on three operands
    ],
)
@pytest.mark.parametrize("dtype", [float, complex])
def test_a_programs_steps_of_every_kind(eq, path, sizes, dtype):
    """Products of every kind the steps know (a letter summed first, an outer product, batch
    letters, a matrix-vector product) bound into a program: its value and gradients, twice,
    are the walked steps' and opt_einsum's, real and complex."""
    ins, out = eq.split("->")
    inputs = tuple(ins.split(","))
    shapes = tuple(tuple(sizes.get(c, 4) for c in s) for s in inputs)
    rng = np.random.default_rng(len(eq))
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if dtype is complex:
        ops = [x + 1j * rng.standard_normal(x.shape) for x in ops]
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, tuple(path), wrt, True)
    assert plan.programmable
    for _ in range(2):
        value = network.value_and_grad(plan, ops, grads := _grad_arrays(ops))
        assert len(plan.programs) == 1
        assert_close(value, oe.contract(eq, *ops))
        for k, spec in enumerate(inputs):  # environments (broadcast along a letter only x_k has)
            present = "".join(c for c in spec if c in "".join(inputs[:k] + inputs[k + 1 :]))
            others = [x for j, x in enumerate(ops) if j != k]
            env = oe.contract(",".join(inputs[:k] + inputs[k + 1 :]) + "->" + present, *others)
            view = tuple(shapes[k][i] if c in present else 1 for i, c in enumerate(spec))
            assert_close(grads[k], np.broadcast_to(env.reshape(view), shapes[k]))


def test_released_buffers_retire_a_program(monkeypatch):
    """`release_pools` lets a program's buffers go (its bound views too): its next call makes a
    new program (the old one is never run on buffers it no longer owns), with the same
    results; a program whose buffers pass `POOL_BUDGET` is not kept, as a pool is not."""
    eq, inputs, out, shapes, path, ops = _bond2_network(20, 6)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    v0 = network.value_and_grad(plan, ops, g0 := _grad_arrays(ops))
    (old,) = plan.programs
    network.release_pools()
    assert old.pool.held == 0 and old.pool.generation != old.generation
    assert old.ops == [] and old.ins == []  # (its views no longer hold the buffers alive)
    v1 = network.value_and_grad(plan, ops, g1 := _grad_arrays(ops))
    (new,) = plan.programs
    assert new is not old and new.pool.held > 0
    monkeypatch.setattr(network, "POOL_BUDGET", 0)
    plan.programs.clear()
    v2 = network.value_and_grad(plan, ops, g2 := _grad_arrays(ops))
    assert plan.programs == []
    assert v0 == v1 == v2
    for k in wrt:
        np.testing.assert_array_equal(g0[k], g1[k])
        np.testing.assert_array_equal(g0[k], g2[k])
    assert_close(v0, oe.contract(eq, *ops, optimize=path))


def test_a_program_per_dtype_and_large_operands_walk_the_steps(monkeypatch):
    """One plan (its shapes) meets real and complex operands: a program each, every call with
    its own dtype's results. Operands over `PROGRAM_INPUTS` elements walk the steps (the
    copies in and out would cost more than the steps' calls): no program is made."""
    eq, inputs, out, shapes, path, ops = _bond2_network(20, 2)
    wrt = tuple(range(len(ops)))
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    cops = [x * (1 + 1j) for x in ops]
    for xs in (ops, cops, ops, cops):
        value = network.value_and_grad(plan, xs, grads := _grad_arrays(xs))
        assert value.dtype == np.result_type(*xs)
        for k, env in enumerate(_environments(eq, xs, np.ones((), value.dtype))):
            assert_close(grads[k], env)
    assert sorted(str(p.key[0]) for p in plan.programs) == ["complex128", "float64"]
    monkeypatch.setattr(network, "PROGRAM_INPUTS", sum(x.size for x in ops) - 1)
    large = network._tree_plan(inputs, out, shapes, path, wrt, True)
    assert not large.programmable
    network.value_and_grad(large, ops, grads := _grad_arrays(ops))
    assert large.programs == []
    for k, env in enumerate(_environments(eq, ops, np.ones(()))):
        assert_close(grads[k], env)


def test_an_mps_overlap_of_a_hundred_thousand_elements_runs_as_a_program():
    """<psi|psi> of a 20-site MPS of bond 32: 40 operands of up to 2,048 elements, 73,984 together, over
    the 2^16 that `PROGRAM_INPUTS` allowed until benchmark m1 (126,000) showed its walked steps
    cost 38% more than its program: its value-and-gradient runs as a `_Program`. Fails with
    the limit back at 2^16. Reference: opt_einsum's environments."""
    n, d, p = 20, 32, 2
    sym = oe.get_symbol

    def site(i, bond):  # left bond (but the first), physical, right bond (but the last)
        return (sym(bond + i) if i else "") + sym(100 + i) + (sym(bond + i + 1) if i < n - 1 else "")

    bra = [site(i, 0) for i in range(n)]
    ket = [site(i, 200) for i in range(n)]
    rng = np.random.default_rng(3)
    shapes = [tuple(p if c in set(map(sym, range(100, 100 + n))) else d for c in spec) for spec in bra + ket]
    ops = [rng.standard_normal(s) / 6 for s in shapes]
    inputs, out = tuple(bra + ket), ""
    eq = ",".join(inputs) + "->"
    path = tuple(oe.contract_path(eq, *shapes, shapes=True, optimize="greedy")[0])
    assert 1 << 16 < sum(x.size for x in ops) <= network.PROGRAM_INPUTS
    plan = network._tree_plan(inputs, out, tuple(shapes), path, tuple(range(2 * n)), True)
    assert plan.programmable
    value = network.value_and_grad(plan, ops, grads := _grad_arrays(ops))
    assert len(plan.programs) == 1
    assert_close(value, oe.contract(eq, *ops))
    for k, env in enumerate(_environments(eq, ops, np.ones(()))):
        assert_close(grads[k], env, rtol=1e-9, atol=1e-12)


# -- letters of size 1 ---------------------------------------------------------------------------


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), dtype=st.sampled_from([float, complex]), jitted=st.booleans())
def test_networks_with_bonds_of_size_one_have_every_gradient(seed, dtype, jitted):
    """Random networks whose bonds have sizes 1 to 3 (a letter of size 1 in every operand is
    dropped from the plan, `network._drop_ones`; two open letters, which may be of size 1),
    along random paths: the value is opt_einsum's and each cotangent its environment."""
    eq, shapes = rand_equation(int(6 + seed % 5), 3, n_out=2, d_min=1, d_max=3, seed=seed)
    rng = np.random.default_rng(seed)
    ops = [rng.standard_normal(s) for s in shapes]
    if dtype is complex:
        ops = [x + 1j * rng.standard_normal(x.shape) for x in ops]
    path = _random_path(len(ops), rng)
    f = lambda *xs: ea.einsum(eq, *xs, optimize=path)
    want = oe.contract(eq, *ops, optimize=path)
    g = rng.standard_normal(np.shape(want)).astype(np.result_type(want))

    def value_and_cotangents(*xs):
        value, pull = ea.vjp(f, *xs)
        return value, pull(g)

    run = ea.jit(value_and_cotangents) if jitted else value_and_cotangents
    for _ in range(1 + jitted):
        value, cts = run(*ops)
        assert np.shape(value) == np.shape(want)
        assert_close(value, want, rtol=1e-10)
        for got, env in zip(cts, _environments(eq, ops, g)):
            assert np.shape(got) == np.shape(env)
            assert_close(got, env, rtol=1e-9, atol=1e-9)


def test_a_network_of_bond_one_has_no_step_too_wide_for_numpy():
    """70 pairs of matrices of bond 1, contracted along a path that first multiplies all of one
    kind together (an intermediate of 140 indices, past numpy's 64 axes): every letter has
    size 1, so the plan drops them all and the steps are products of numbers. The value,
    the scalar's gradient by the planned tree (`value_and_grad`) and the walked sweep (`vjp`)
    are the products they are. (Before letters of size 1 were dropped: an EinsumError.)"""
    m = 70
    x = [oe.get_symbol(i) for i in range(m)]
    y = [oe.get_symbol(m + i) for i in range(m)]
    eq = ",".join([a + b for a, b in zip(x, y)] + [b + a for a, b in zip(x, y)]) + "->"
    rng = np.random.default_rng(0)
    ops = [rng.uniform(0.9, 1.1, (1, 1)) for _ in range(2 * m)]
    path = [(0, 1)] * (m - 1) + [(0, 1)] * m  # the first kind together, then the second one in
    numbers = np.array([op[0, 0] for op in ops])
    total = np.prod(numbers)
    inputs = tuple(eq[:-2].split(","))
    plan = network.tree_plan(inputs, "", tuple(op.shape for op in ops), tuple(path), tuple(range(2 * m)))
    assert plan.shapes == ((),) * (2 * m) and plan.programmable
    value, grads = ea.value_and_grad(
        lambda *xs: ea.einsum(eq, *xs, optimize=path), argnums=tuple(range(2 * m))
    )(*ops)
    assert_close(value, total, rtol=1e-12)
    for k, grad in enumerate(grads):
        assert grad.shape == (1, 1)
        assert_close(grad[0, 0], total / numbers[k], rtol=1e-12)
    value, pull = ea.vjp(lambda *xs: ea.einsum(eq, *xs, optimize=path), *ops)
    cts = pull(np.array(2.0))
    assert_close(cts[3], 2 * total / numbers[3] * np.ones((1, 1)), rtol=1e-12)


def test_a_short_forward_walks_and_keeps_no_program():
    """A forward alone of fewer than `PROGRAM_STEPS` pairwise steps walks them on fresh arrays:
    a program would save microseconds and keep its buffers between calls (a staged program of
    many short contractions, as quimb's contraction makes, kept one program each). From
    `PROGRAM_STEPS` steps on, the same small operands run as a program."""
    rng = np.random.default_rng(2)
    for n, programmed in ((network.PROGRAM_STEPS, False), (network.PROGRAM_STEPS + 1, True)):
        eq = ",".join(oe.get_symbol(i) + oe.get_symbol(i + 1) for i in range(n)) + "->"
        ops = [rng.standard_normal((3, 3)) for _ in range(n)]
        path = [(0, 1)] * (n - 1)
        inputs = tuple(eq[:-2].split(","))
        plan = network.forward_plan(inputs, "", tuple(x.shape for x in ops), tuple(map(tuple, path)))
        assert len(plan.forward) == n - 1 and plan.programmable == programmed
        jf = ea.jit(lambda *xs, eq=eq, path=path: ea.einsum(eq, *xs, optimize=path))
        for run in (lambda *xs, eq=eq, path=path: ea.einsum(eq, *xs, optimize=path), jf, jf):
            assert_close(run(*ops), oe.contract(eq, *ops), rtol=1e-12)
        assert len(plan.programs) == programmed and not plan.pools


def test_a_jitted_gradient_with_operands_it_does_not_differentiate_is_one_tree():
    """Under `ea.jit`, a scalar network whose gradient is taken for some operands only (an MPS
    energy's kets, not its operator's tensors, all of them arguments of the jitted function)
    stages one `einsum_vg` equation, as eager runs one tree: the operands staged but not
    differentiated are constants of the reverse trace, not a second trace (it was staged as
    its pairwise steps, forward and backward: 2 equations per step). Values and gradients are
    eager's and opt_einsum's environments."""
    eq, ops, path = _network(7, float, 0)
    wrt = (0, 2, 3)
    f = lambda *xs: ea.einsum(eq, *xs, optimize=path)
    vg = ea.value_and_grad(f, argnums=wrt)
    program = ea.jit(vg).lower(*ops)
    ops_of = [e.op for e in program.equations]
    assert ops_of.count("einsum_vg") == 1 and "einsum" not in ops_of
    value, grads = ea.jit(vg)(*ops)
    assert_close(value, oe.contract(eq, *ops, optimize=path), rtol=1e-12)
    envs = _environments(eq, ops, np.ones(()))
    for k, g in zip(wrt, grads):
        assert_close(g, envs[k], rtol=1e-10)


# -- large arrays that die within a call: their memory recycled ---------------------------------


def _address(x: np.ndarray) -> int:
    return int(x.__array_interface__["data"][0])


def test_a_recycled_array_is_never_handed_out_while_something_refers_to_it():
    """`memory.recycled` hands out the memory of a large array again only once no array refers
    to it: one kept, or any view of it kept, keeps its memory its own; let go, the next request
    of about its size takes the same memory without making a buffer; small arrays are numpy's."""
    network.release_pools()
    kept = memory.recycled((40_000,), np.float64)
    kept[...] = 7.0
    view = memory.recycled((50_000,), np.float64)[100:200].reshape(10, 10)
    view[...] = 3.0
    made = memory._RECYCLED.fresh
    for _ in range(3):
        other = memory.recycled((40_000,), np.float64)
        assert not np.shares_memory(other, kept) and not np.shares_memory(other, view)
        other[...] = -1.0
        del other
    assert np.all(kept == 7.0) and np.all(view == 3.0)
    assert memory._RECYCLED.fresh == made + 1  # the one made above, then taken again each time
    address = _address(view.base)
    del view
    again = memory.recycled((45_000,), np.float64)  # (45,000 within 50,000: about its size)
    assert _address(again) == address and memory._RECYCLED.fresh == made + 1
    zeros = memory.recycled((40_000,), np.float64, zero=True)
    assert not zeros.any()
    small = memory.recycled((1000,), np.float64)
    assert all(small.base is not b for b in memory._RECYCLED.buffers)
    network.release_pools()
    assert memory._RECYCLED.buffers == [] and network.pooled_bytes() == 0
    assert np.all(kept == 7.0)  # (an array in use stays the caller's)


def test_recycled_memory_kept_free_stays_within_its_budget(monkeypatch):
    """The free buffers kept between calls hold at most `RECYCLE_BUDGET` bytes: the oldest go."""
    network.release_pools()
    monkeypatch.setattr(memory, "RECYCLE_BUDGET", 3 * 8 * 20_000)
    arrays = [memory.recycled((20_000 * (1 + k // 2),), np.float64) for k in range(8)]
    del arrays  # every buffer free: the next one made trims the oldest
    memory.recycled((45_000,), np.float64)  # (no free buffer fits 360 KB: a new one, and a trim)
    free = [b.nbytes for b in memory._RECYCLED.buffers][:-1]
    assert sum(free) <= memory.RECYCLE_BUDGET
    # an array larger than the whole budget is never kept: it would stay past the budget once
    # freed (benchmark case 10's value and gradients, 103 MiB, were kept under a 64 MiB budget)
    held = memory.held()
    big = memory.recycled((memory.RECYCLE_BUDGET // 8 + 1,), np.float64, zero=True)
    assert memory.held() == held and not big.any()
    network.release_pools()


@pytest.mark.parametrize(("programs", "a"), [(True, 128), (False, 128), (False, 256)])
def test_a_jitted_gradient_recycles_its_packed_gradients_and_its_large_steps(monkeypatch, programs, a):
    """A scalar contraction's value-and-gradient packs its value and gradients in one large
    array (`einsum_vg`), and a pooled plan's walked steps make arrays below `POOL_MIN`: under
    `ea.jit` each dies within the call, so from the second call on no buffer is made (on benchmark
    m1 these arrays faulted 1,600 pages in a call, a fifth of its time). The gradients agree
    with opt_einsum's at every call, the arrays returned earlier unchanged."""
    monkeypatch.setattr(network, "PROGRAMS", programs)  # (walked: the steps' own arrays recycled too)
    monkeypatch.setattr(network, "PROGRAM_INPUTS", 1 << 18)
    network.release_pools()
    rng = np.random.default_rng(5)
    # a ring of five matrices, bc and cd contracted first (bd, 128 x 128: 128 KiB): with `a` 128
    # no value is as large as `POOL_MIN`, so the walk takes no pool; with `a` 256 the walk pools
    # ad and da, and bd is recycled
    eq = "ab,bc,cd,de,ea->"
    shapes = [(a, 128), (128, 128), (128, 128), (128, 128), (128, a)]
    path = [(1, 2), (0, 3), (0, 1), (0, 1)]
    ops = [rng.standard_normal(s) / 11 for s in shapes]
    packed = 8 * (1 + sum(x.size for x in ops))
    vg = ea.jit(ea.value_and_grad(lambda *xs: ea.einsum(eq, *xs, optimize=path), argnums=tuple(range(5))))
    want = _environments(eq, ops, np.ones(()))
    made = memory._RECYCLED.fresh
    first = vg(*ops)  # kept: what memory it returns stays its own
    vg(*ops)  # (a second call, its result let go: its buffers made where the first call's are kept)
    assert memory._RECYCLED.fresh > made  # the packed gradients' buffer, at least
    made = memory._RECYCLED.fresh
    for _ in range(3):
        value, grads = vg(*ops)
        assert_close(value, oe.contract(eq, *ops))
        for got, env in zip(grads, want):
            assert_close(got, env, rtol=1e-10)
        del value, grads, got
    assert memory._RECYCLED.fresh == made
    for got, env in zip(first[1], want):  # (the arrays returned first: not written over)
        assert_close(got, env, rtol=1e-10)
    sizes = {b.nbytes for b in memory._RECYCLED.buffers}
    assert packed in sizes  # the packed value and gradients
    # a pooled walk's step below `POOL_MIN` (a program pools its own; a plan without a pool, all
    # its arrays small, leaves them to malloc: recycled, m2's peak grew by a third for no time)
    assert (8 * 128 * 128 in sizes) == (not programs and a == 256)
    network.release_pools()


@pytest.mark.skipif(kernels.unavailable() is not None, reason="llvmlite (the fast extra) is not installed")
def test_a_compiled_kernels_large_outputs_are_recycled():
    """Under `ea.jit`'s llvm backend a fused chain's output is allocated by the program at every
    call: a large one's memory is recycled, so a later call makes no buffer once the earlier
    result is let go, and a result kept is not written over."""
    network.release_pools()
    x = np.linspace(0.0, 1.0, 50_000)
    f = ea.jit(lambda v: ea.sin(v) * 2.0 + v * v)
    kept = f(x)
    assert_close(kept, np.sin(x) * 2.0 + x * x)
    f(x)
    made = memory._RECYCLED.fresh
    for _ in range(3):
        assert_close(f(x), np.sin(x) * 2.0 + x * x)
    assert memory._RECYCLED.fresh == made and any(b.nbytes == x.nbytes for b in memory._RECYCLED.buffers)
    assert_close(kept, np.sin(x) * 2.0 + x * x)
    network.release_pools()


def test_a_two_operand_product_recycles_its_memory_and_never_a_kept_result():
    """Eager and jitted two-operand products (`executor._run_pair`) write a large result into
    recycled memory: once a result is let go the next call makes no buffer (a 512^3 matrix
    product faulted about 1,000 pages a call, a fifth of its value-and-gradient); a result kept
    stays as it was."""
    memory.release()
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((256, 300)), rng.standard_normal((300, 256))  # a 512 KiB product
    eager = lambda x, y: ea.einsum("ij,jk->ik", x, y)
    jitted = ea.jit(lambda x, y: ea.einsum("ij,jk->ki", x, y))
    for run, want in ((eager, a @ b), (jitted, (a @ b).T)):
        kept = run(a, b)
        assert_close(kept, want)
        run(a, b)
        made = memory._RECYCLED.fresh
        for _ in range(3):
            assert_close(run(a, b), want)
        assert memory._RECYCLED.fresh == made
        assert_close(kept, want)  # not written over
        kept = np.asarray(kept)  # (eager: a Tensor's array, no copy)
        assert any(np.shares_memory(kept, buf) for buf in memory._RECYCLED.buffers)
    memory.release()


def test_an_eager_sweep_without_a_pool_recycles_its_large_arrays():
    """A non-scalar contraction's eager gradient walks its tree without a pool (`_Fresh`): its
    arrays of `FRESH_RECYCLE` bytes or more take recycled memory, so that from the second call on
    no buffer is made (benchmark case 3 faulted 1,500 pages a call, a third of its time)."""
    memory.release()
    rng = np.random.default_rng(4)
    x, w, y = (
        rng.standard_normal((256, 512)),
        rng.standard_normal((512, 512)) / 20,
        rng.standard_normal((256, 512)),
    )
    vg = ea.value_and_grad(lambda *a: ea.sum(ea.einsum("bi,ij,bj->b", *a) ** 2), argnums=(0, 1, 2))
    z = np.einsum("bi,ij,bj->b", x, w, y)
    want = (
        np.einsum("b,ij,bj->bi", 2 * z, w, y),
        np.einsum("b,bi,bj->ij", 2 * z, x, y),
        np.einsum("b,bi,ij->bj", 2 * z, x, w),
    )
    vg(x, w, y)
    vg(x, w, y)
    gc.collect()  # (an eager trace may hold its arrays in reference cycles until a collection)
    made = memory._RECYCLED.fresh
    for _ in range(3):
        gc.collect()
        value, grads = vg(x, w, y)
        assert_close(value, np.sum(z**2), rtol=1e-10)
        for got, expected in zip(grads, want):
            assert_close(got, expected, rtol=1e-9)
        del value, grads, got  # (every array of the call let go)
    assert memory._RECYCLED.fresh == made
    assert any(b.nbytes == 256 * 512 * 8 for b in memory._RECYCLED.buffers)  # an intermediate of 1 MiB
    memory.release()


# -- compiled copies ---------------------------------------------------------------------------------

needs_llvm = pytest.mark.skipif(
    kernels.unavailable() is not None, reason=f"llvmlite cannot compile here: {kernels.unavailable()}"
)


def _compiled_copies(program):
    return [args for fn, args in program.ops if hasattr(fn, "copy_key")]


@needs_llvm
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_compiled_copy_copies_any_layout(data):
    """`network.compiled_copy` copies a transposed, strided, reversed or broadcast view of any
    dtype exactly as numpy does, leaving the source as it was; where it declines, numpy's copy
    has what it needs: a contiguous run of `kernels.COPY_RUN` elements, or one strided axis."""
    rank = data.draw(st.integers(1, 6))
    shape = data.draw(st.lists(st.integers(1, 12), min_size=rank, max_size=rank))
    dtype = data.draw(st.sampled_from([np.float64, np.complex128, np.float32, np.int16, np.bool_]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    base = (rng.standard_normal(shape) * 50).astype(dtype)
    if dtype is np.complex128:
        base = base + 1j * rng.standard_normal(shape)
    view = base.transpose(data.draw(st.permutations(range(rank))))
    steps = data.draw(st.lists(st.sampled_from([1, 1, -1, 2]), min_size=rank, max_size=rank))
    view = view[tuple(slice(None, None, s) for s in steps)]
    if data.draw(st.booleans()):  # an axis the source repeats (stride 0), as a broadcast cotangent
        view = np.broadcast_to(view[..., None], (*view.shape, data.draw(st.integers(2, 5))))
    before = base.copy()
    out = np.zeros(view.shape, dtype)
    cached = data.draw(st.sampled_from([0, kernels.COPY_CACHED]))  # (0: every copy "out of the cache")
    with mock.patch.object(kernels, "COPY_MIN", 1), mock.patch.object(kernels, "COPY_CACHED", cached):
        compiled = network.compiled_copy(out, view)
    if compiled is None:
        axes: list[tuple[int, int]] = []  # (axes that step through the view as one merged)
        for n, s in [(n, s) for n, s in zip(view.shape, view.strides) if n > 1]:
            axes[-1:] = [(axes[-1][0] * n, s)] if axes and axes[-1][1] == s * n else [*axes[-1:], (n, s)]
        assert len(axes) <= 1 or any(s == view.itemsize for _, s in axes[-1:]), (view.shape, view.strides)
        return
    kernel, (src, dst) = compiled
    assert kernel(src, dst) == 0
    np.testing.assert_array_equal(out, view)
    np.testing.assert_array_equal(base, before)


@needs_llvm
def test_a_transposing_copy_runs_in_tiles_across_both_grains():
    """The copy of a transposition loops last over a tile of the source's contiguous axis and the
    destination's (8 by 8 here), where numpy would read the source a cache line per element."""
    x = np.arange(64.0**3).reshape(64, 64, 64)
    view = x.transpose(2, 1, 0)
    out = np.empty(view.shape)
    src, dst = kernels.copy_views(out, view)
    assert src.shape[-2:] == (kernels.COPY_TILE, kernels.COPY_TILE)
    assert src.strides[-2:] == (8, 64 * 64 * 8)  # the source's contiguous axis, then the other
    assert dst.strides[-2:] == (64 * 64 * 8, 8)  # ... which is the destination's contiguous one
    kernels.copy_kernel(src.ndim, 8, kernels.COPY_TILE)(src, dst)
    np.testing.assert_array_equal(out, view)
    # a copy whose contiguous run is long on both sides is left to numpy
    assert kernels.copy_views(np.empty((64, 64)), x[0].T.T) is None


@needs_llvm
def test_out_of_the_cache_a_short_run_both_share_is_copied_in_tiles(monkeypatch):
    """A copy whose source and destination share a short contiguous run (benchmark case 10's
    150^3 x 9: the 9 innermost in both, the rest transposed) runs, out of the cache, in tiles of
    the two axes next outside the run, the run innermost: 6 x 6 tiles of runs of 3 here
    (`COPY_CACHED` set to 0 to make a small copy count as large); in the cache, the
    destination's order."""
    x = np.arange(4.0 * 48 * 48 * 3).reshape(4, 48, 48, 3)
    view = x.transpose(0, 2, 1, 3)  # element strides (6912, 3, 144, 1)
    out = np.empty(view.shape)
    in_cache, _ = kernels.copy_views(out, view)
    assert in_cache.shape == view.shape  # (no tiles)
    monkeypatch.setattr(kernels, "COPY_CACHED", 0)
    kernels._COPY_ORDERS.clear()
    src, dst = kernels.copy_views(out, view)
    assert src.shape[-3:] == (8, 8, 3)
    assert src.strides[-3:] == (3 * 8, 144 * 8, 8)  # the source's axis after the run first
    assert dst.strides[-3:] == (144 * 8, 3 * 8, 8)  # then the destination's; the run last
    kernels.copy_kernel(src.ndim, 8, 3)(src, dst)
    np.testing.assert_array_equal(out, view)
    kernels._COPY_ORDERS.clear()


@needs_llvm
def test_a_transposing_copy_out_of_the_cache_runs_in_tiles_however_far_its_rows():
    """Tiles out of the cache too, where a tile's rows are pages apart (case 10's copies were
    left to numpy's order, 3x slower there): 10 MB, the source's rows 128,000 elements apart."""
    x = np.arange(10.0 * 80 * 80 * 20).reshape(10, 80, 80, 20)
    view = x.transpose(3, 1, 2, 0)
    assert view.nbytes > kernels.COPY_CACHED
    out = np.empty(view.shape)
    kernel, (src, dst) = network.compiled_copy(out, view)
    assert src.strides[-2:] == (8, 80 * 80 * 20 * 8)  # a tile: the source's contiguous axis, then
    assert dst.strides[-2:] == (80 * 80 * 10 * 8, 8)  # the destination's
    kernel(src, dst)
    np.testing.assert_array_equal(out, view)


@needs_llvm
def test_copies_of_several_ranks_share_one_kernel():
    """A copy runs in the kernel of the next rank of `kernels.COPY_RANKS`, its views given
    leading axes of size 1: transposing copies of 11 to 14 axes (a bond-2 network's) run one
    kernel, and each copies exactly as numpy does, the source left as it was."""
    rng = np.random.default_rng(5)
    used, ranks = set(), set()
    for ndim in (11, 12, 13, 14):
        x = rng.standard_normal((2,) * ndim)
        source = x.copy()
        view = x.transpose(tuple(reversed(range(ndim))))  # no two axes merge
        out = np.empty(view.shape)
        kernel, (src, dst) = network.compiled_copy(out, view)
        assert src.ndim == dst.ndim == 16
        ranks.add(sum(d != 1 for d in src.shape))  # (the axes the copy loops over)
        kernel(src, dst)
        np.testing.assert_array_equal(out, view)
        np.testing.assert_array_equal(x, source)
        used.add(kernel.copy_key)
    assert len(used) == 1 and len(ranks) == 4


@needs_llvm
def test_a_programs_copy_kernels_are_compiled_as_one_module(monkeypatch):
    """The copy kernels a program needs that this process has not compiled are compiled
    together, one LLVM module for all (`kernels.copy_kernels`): each module costs its own
    start-up, a first call's time. The kernels are bound into the program's calls and copy
    as numpy does (the value and every gradient equal with numpy's copies)."""
    _, inputs, out, shapes, path = _greedy_network(12, 1, d_min=6, d_max=6)
    ops = [np.random.default_rng(3).standard_normal(s) for s in shapes]
    wrt = tuple(range(len(ops)))
    monkeypatch.setattr(
        kernels, "_state", {k: v for k, v in kernels._state.items() if not k.startswith("copy ")}
    )
    modules = _counting_in(monkeypatch, kernels, "_module")
    plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
    grads = _grad_arrays(ops)
    value = network.value_and_grad(plan, ops, grads)
    (program,) = plan.programs
    kinds = {fn.copy_key for fn, _ in program.ops if hasattr(fn, "copy_key")}
    assert len(kinds) >= 2 and len(modules) == 1
    assert not any(fn is network._copy_unbound for fn, _ in program.ops)
    monkeypatch.setattr(network, "COMPILED_COPIES", False)
    numpy_copies = network._tree_plan(inputs, out, shapes, path, wrt, True)
    expected = _grad_arrays(ops)
    assert value == network.value_and_grad(numpy_copies, ops, expected)
    for k in wrt:
        np.testing.assert_array_equal(grads[k], expected[k])


@needs_llvm
@pytest.mark.parametrize("dtype", [float, complex])
def test_a_programs_transposing_copies_are_compiled(monkeypatch, dtype):
    """A program's copies of `kernels.COPY_MIN` elements or more are compiled copies where
    llvmlite runs (`network.COMPILED_COPIES`): the same elements copied as by numpy's copies
    (`copied`), the same value and gradients, opt_einsum's."""
    eq, inputs, out, shapes, path = _greedy_network(12, 1, d_min=6, d_max=6)
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if dtype is complex:
        ops = [x + 1j * rng.standard_normal(x.shape) for x in ops]
    wrt = tuple(range(len(ops)))
    results, copied = [], []
    for compiled in (False, True):
        monkeypatch.setattr(network, "COMPILED_COPIES", compiled)
        plan = network._tree_plan(inputs, out, shapes, path, wrt, True)
        grads = _grad_arrays(ops)
        results.append((network.value_and_grad(plan, ops, grads), grads))
        (program,) = plan.programs
        copies = _compiled_copies(program)
        assert len(copies) >= 5 if compiled else copies == []
        assert all(src.size >= kernels.COPY_MIN for src, _ in copies)
        copied.append(program.copied)
    assert copied[0] == copied[1]
    (v0, g0), (v1, g1) = results
    assert_close(v1, oe.contract(eq, *ops, optimize=path))
    assert_close(v1, v0, rtol=1e-13)
    for k, env in enumerate(_environments(eq, ops, np.ones(()))):
        np.testing.assert_array_equal(g1[k], g0[k])
        assert_close(g1[k], env)


@needs_llvm
def test_a_walked_steps_large_copies_are_compiled(monkeypatch):
    """The slices of a contraction under a memory limit walk their steps (no program); their
    copies of `network.WALKED_COPY_MIN` elements or more run compiled too (transpositions of the
    slices here), with the same value and gradients as numpy's copies."""
    eq = "abc,ade,bdf,cef->"
    rng = np.random.default_rng(24)
    ops = [rng.standard_normal((40, 40, 40)) / 40 for _ in range(4)]
    vg = ea.value_and_grad(lambda *o: ea.einsum(eq, *o, memory_limit=40**3 * 6), argnums=(0, 1, 2, 3))
    used = []
    real = network.compiled_copy
    monkeypatch.setattr(network, "compiled_copy", lambda out, view: used.append(real(out, view)) or used[-1])
    results = []
    for compiled in (False, True):
        monkeypatch.setattr(network, "COMPILED_COPIES", compiled)
        used.clear()
        results.append(vg(*ops))
        ran = [c for c in used if c is not None]
        assert len(ran) >= 4 if compiled else ran == []
        assert all(src.size >= network.WALKED_COPY_MIN for _, (src, _) in ran)
    (v0, g0), (v1, g1) = results
    assert_close(v0, oe.contract(eq, *ops))
    assert v1 == v0
    for a, b in zip(g1, g0):
        np.testing.assert_array_equal(a, b)


def test_a_copys_loop_order_is_planned_once_per_layout(monkeypatch):
    """`kernels.copy_views` plans a layout's loop order once (`kernels._copy_order`) and then
    makes the views of any arrays of that layout by a transpose and a reshape, with the
    planned strides: a program rebuilt after its buffers were let go, or a walked step at each
    call, does not plan again."""
    planned = []
    real = kernels._copy_order
    monkeypatch.setattr(kernels, "_copy_order", lambda v, o: planned.append(v.shape) or real(v, o))
    monkeypatch.setattr(kernels, "_COPY_ORDERS", {})
    views = []
    for _ in range(3):
        x = np.arange(8.0**6).reshape((8,) * 6)
        view = x.transpose(0, 5, 4, 1, 2, 3)
        out = np.empty(view.shape)
        views.append(kernels.copy_views(out, view))
    assert planned == [(8,) * 6]
    (src, dst), (src2, dst2) = views[0], views[2]
    assert src.shape == src2.shape and src.strides == src2.strides and dst.strides == dst2.strides
    assert not np.shares_memory(src, src2)  # (the second call's views are of its own arrays)


@pytest.mark.parametrize("dtype", [float, complex])
def test_a_value_and_gradient_lands_in_its_flat_result_by_one_copy(monkeypatch, dtype):
    """A scalar network's value and gradients (`einsum_vg`: one flat array) come from the plan's
    program laid out as that array wants them: its gradients' buffers are one block, copied
    into the result at once (no per-operand views, copies or zero-fill); without a program,
    the gradients are written operand by operand, the same numbers (opt_einsum's environments)."""
    eq, _, _, _, path, ops = _bond2_network(30, 2, dtype)
    calls = []
    for name in ("run", "run_into"):
        real = getattr(network._Program, name)
        monkeypatch.setattr(network._Program, name, lambda *a, r=real, n=name: calls.append(n) or r(*a))
    loss = lambda *xs: ea.real(ea.einsum(eq, *xs, optimize=path))
    f = ea.value_and_grad(loss, argnums=tuple(range(len(ops))))
    results = []
    for programs in (True, False):
        monkeypatch.setattr(network, "PROGRAMS", programs)
        network.release_pools()
        calls.clear()
        results.append(f(*ops))
        assert calls == (["run_into"] if programs else [])
    (v0, g0), (v1, g1) = results
    assert_close(v0, np.real(oe.contract(eq, *ops, optimize=path)))
    assert_close(v0, v1, rtol=1e-13)
    for k, env in enumerate(_environments(eq, ops, np.ones(()))):
        assert g0[k].dtype == ops[k].dtype
        assert_close(g0[k], g1[k], rtol=1e-12)
        if dtype is float:
            assert_close(g0[k], env)


# -- other libraries' arrays: the same plan, run with the standard's operations ------------------


def _library(name):
    """(to the library, back to numpy) for one library a tree runs on besides numpy: its arrays
    strided views (torch), or not (JAX's: no layouts to lay out), or the standard's check."""
    module = pytest.importorskip(name)
    if name == "jax":
        module.config.update("jax_enable_x64", True)
        return module.numpy.asarray, np.asarray
    if name == "torch":
        return (lambda a: module.from_numpy(np.array(a))), (lambda x: x.numpy())
    module.set_array_api_strict_flags(api_version="2024.12")
    return module.asarray, np.asarray


def _same(got, want, back, rtol=1e-10, atol=1e-12):
    """`got` (another library's array) holds `want`, in its dtype."""
    value = back(got)
    want = np.asarray(want)
    assert value.dtype == want.dtype and value.shape == want.shape
    np.testing.assert_allclose(value, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize(
    ("name", "dtype", "output"),
    # (JAX eager compiles each operation: one network of one kind)
    [(n, d, o) for n in ("torch", "array_api_strict") for d in (float, complex) for o in (0, 2)]
    + [("jax", float, 0)],
)
def test_random_networks_on_other_libraries_have_every_gradient(name, dtype, output):
    """Random networks along random paths on other libraries (one tree, as on numpy): the value
    is opt_einsum's, each operand's cotangent its environment, in the library's arrays and
    numpy's dtypes; a scalar network's value and gradients in one call too, with one operand
    left undifferentiated. (dask's blocks keep their pairwise steps, one node each.)"""
    to, back = _library(name)
    for seed in (3, 8, 21) if name != "jax" else (5,):  # (JAX's: 6 tensors)
        eq, ops, path = _network(seed, dtype, output)
        want = oe.contract(eq, *ops, optimize=path)
        g = np.random.default_rng(seed + 1).standard_normal(np.shape(want)).astype(np.result_type(want))
        f = functools.partial(ea.einsum, eq, optimize=path)
        value, pull = ea.vjp(f, *map(to, ops))
        _same(value, want, back)
        for got, env in zip(pull(to(g)), _environments(eq, ops, g)):
            _same(got, env, back, rtol=1e-9, atol=1e-9)
        if output == 0:  # one call, eager and jitted (staged once, then the program)
            wrt = tuple(range(1, len(ops)))
            vg = ea.value_and_grad(f, wrt, holomorphic=dtype is complex)
            jitted = ea.jit(vg)
            for run in (vg, jitted, jitted) if name == "torch" else (vg,):
                value, grads = run(*map(to, ops))
                _same(value, want, back)
                for got, env in zip(grads, _environments(eq, ops, np.ones((), np.result_type(want)))[1:]):
                    _same(got, env, back, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("name", ["torch", "array_api_strict"])
@pytest.mark.parametrize("spec", ["ab,bcc,cd->ad", "ab,b,bc,c->a", "aib,bc,ci->ai", "ab,bc,cd->"])
def test_a_tree_on_another_library_spreads_and_sums_as_numpy_does(name, spec):
    """Repeated letters (a diagonal's gradient spread back), letters one operand alone has
    (summed first), letters of size 1 (dropped by the plan), a full contraction: every
    gradient on each library is numpy einad's."""
    to, back = _library(name)
    sizes = {"a": 2, "b": 3, "c": 4, "d": 1, "i": 1}
    rng = np.random.default_rng(9)
    ops = [rng.standard_normal([sizes[c] for c in s]) for s in spec.split("->")[0].split(",")]
    f = lambda *xs: ea.sum(ea.sin(ea.einsum(spec, *xs)))
    wrt = tuple(range(len(ops)))
    want, want_grads = ea.value_and_grad(f, wrt)(*ops)
    value, grads = ea.value_and_grad(f, wrt)(*map(to, ops))
    _same(value, want, back)
    for got, w in zip(grads, want_grads):
        _same(got, w, back)


def _torch_copies(torch):
    """A dispatch mode counting the elements torch copies (a reshape that cannot view its
    operand clones it) and the matrix products it runs."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.copied = 0
            self.products = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in ("clone", "_reshape_copy", "contiguous"):
                self.copied += args[0].numel()
            elif name in ("mm", "bmm", "mv", "dot", "mul"):
                self.products += 1
            return func(*args, **(kwargs or {}))

    return Counting()


def _lattice():
    """issue 22's compute-bound lattice (5x5, bond 8; benchmark n4) and a cotengra path for it."""
    ctg = pytest.importorskip("cotengra", reason="cotengra (the tn extra) makes the lattice")
    con = ctg.utils.lattice_equation([5, 5], d_min=8, d_max=8)
    inputs = tuple("".join(t) for t in con.inputs)
    shapes = tuple(tuple(con.size_dict[c] for c in t) for t in inputs)
    # cotengra's RandomGreedyOptimizer(max_repeats=32, seed=0) path
    path = ((20, 21), (0, 1), (2, 7), (15, 18), (2, 18), (2, 19), (14, 17), (12, 17), (9, 13), (9, 15))
    path += ((1, 11), (2, 13), (8, 11), (7, 11), (8, 10), (2, 7), (2, 8), (6, 7), (2, 6), (2, 5))
    path += ((2, 4), (2, 3), (1, 2), (0, 1))
    return ",".join(inputs) + "->", inputs, "", shapes, path


@pytest.mark.parametrize("seed", [186, 292, "lattice"])
def test_a_network_on_torch_copies_what_its_plan_counts(monkeypatch, seed):
    """On torch a network under `value_and_grad`, eager or jitted, runs the tree's plan (one
    node, one forward and one sweep: a matrix product per step and pullback), in the layouts
    chosen for numpy: on the two random networks torch copies nothing, forward and sweep, as
    the plan counts, where letters in order of appearance copy (and so did the pairwise
    steps, one node each, that other libraries took before). On the lattice (n4), whose plan
    loops products over letters one operand has, torch copies at most what the plan counts
    (a matrix-vector step numpy leaves to its einsum loop counts both operands; torch's matmul
    may read them as views): 0.7 of what letters in order of appearance copy."""
    torch = pytest.importorskip("torch")
    if seed == "lattice":
        eq, inputs, out, shapes, path = _lattice()
    else:
        eq, inputs, out, shapes, path = _greedy_network(5, seed, d_min=2, d_max=4)
    ops = [torch.from_numpy(np.random.default_rng(k).standard_normal(s) / 3) for k, s in enumerate(shapes)]
    wrt = tuple(range(len(ops)))
    plan = network.tree_plan(inputs, out, shapes, path, wrt)
    natural = network._tree_plan(inputs, out, shapes, path, wrt, False)
    assert plan.copies < 0.8 * natural.copies
    assert seed == "lattice" or plan.copies == 0
    counted = _torch_copies(torch)
    runs = []

    def observed(run):  # `run` (the plan's forward or sweep), counted
        def call(*args):
            runs.append(run.__name__)
            with counted:
                return run(*args)

        return call

    monkeypatch.setattr(rules, "tree_lib_forward", observed(network.lib_forward))
    monkeypatch.setattr(rules, "tree_lib_sweep", observed(network.lib_sweep))
    vg = ea.value_and_grad(lambda *xs: ea.einsum(eq, *xs, optimize=path), wrt)
    want = oe.contract(eq, *(o.numpy() for o in ops), optimize=path)
    for f in (vg, ea.jit(vg)) if seed != "lattice" else (vg,):  # eager, and the program `ea.jit` staged
        f(*ops)  # (planned, or staged)
        runs.clear()
        counted.copied = counted.products = 0
        value, grads = f(*ops)
        assert runs == ["lib_forward", "lib_sweep"]
        assert counted.copied <= plan.copies
        pairs = [p for p in plan.forward if len(p.args) == 2]  # (not the inputs laid out once)
        assert counted.products == len(pairs) + len(plan.backward)
        assert_close(value.numpy(), want)
        for got, env in zip(grads, _environments(eq, [o.numpy() for o in ops], np.ones(()))):
            assert_close(got.numpy(), env)
