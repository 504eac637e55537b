"""einad.slicing (and the sliced einsum of einad.rules.einsum): contractions larger than memory,
sliced forward and backward, optimizer objects, reusable expressions, `contract_path`, and the
memory they take.

Slicing is forced by a small `memory_limit`; every value and gradient is compared
with the same contraction unsliced. Each test that plans runs with both slice
finders: einad's greedy one and, where installed, cotengra's. The sliced contractions also
run on every array library (the `lib` fixture), against einad on numpy.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import threading
import time
import tracemalloc
import weakref

import numpy as np
import opt_einsum as oe
import pytest

import einad as ea
import einad.transforms.batching
from einad import network, slicing
from einad.explain import explain
from einad.rules.einsum import contract_planned
from einad.util import wrap
from tests.support.checks import (
    check_lib,
    einsum_fn,
    random_operands,
    vjp_all,
)
from tests.support.jitting import compiled

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted


EINSUM = sys.modules["einad.rules.einsum"]  # the module (einad.einsum is the function)


TETRA = "abc,ade,bdf,cef->"  # every pairwise path goes through a 4-index intermediate


def _ops(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


def _tetra(n, seed=0):
    return _ops([(n, n, n)] * 4, seed)


@pytest.fixture(params=["greedy", "cotengra"])
def finder(request, monkeypatch):
    """Plan with einad's greedy slice finder, or with cotengra's (skipped when absent)."""
    if request.param == "cotengra" and slicing.cotengra is None:
        pytest.skip("cotengra is not installed (pip install 'einad[tn]')")
    if request.param == "greedy":
        monkeypatch.setattr(slicing, "cotengra", None)
    slicing.plan.cache_clear()
    yield request.param
    slicing.plan.cache_clear()


def _close(a, b, rtol=1e-10, atol=1e-10):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


# Networks where a small limit forces slicing: (subscripts, shapes, limit).
NETWORKS = [
    (TETRA, [(4, 4, 4)] * 4, 64),  # scalar result
    ("abc,ade,bdf->cef", [(4, 3, 5), (4, 2, 3), (3, 2, 4)], 20),  # output letters may be sliced
    ("abc,ade,bdf,cef,g->g", [(3, 4, 2), (3, 3, 4), (4, 3, 2), (2, 4, 2), (5,)], 12),  # a lone operand
    ("aabc,ade,bdf,cef->f", [(3, 3, 4, 2), (3, 3, 4), (4, 3, 2), (2, 4, 2)], 10),  # a repeated index
    ("ab,bc,cd,de,ea,af->f", [(4, 5), (5, 3), (3, 4), (4, 5), (5, 4), (4, 3)], 6),  # a ring
]


@pytest.mark.parametrize("eq, shapes, limit", NETWORKS)
def test_sliced_values_and_gradients_equal_the_unsliced(finder, eq, shapes, limit):
    ops = _ops(shapes)
    _, info = ea.contract_path(eq, *ops, memory_limit=limit)
    assert info.sliced_indices, "the limit should force slicing"
    assert info.slice_largest_intermediate <= limit
    sliced = lambda *xs: ea.sum(ea.einsum(eq, *xs, memory_limit=limit) ** 2)
    whole = lambda *xs: ea.sum(ea.einsum(eq, *xs) ** 2)
    _close(ea.einsum(eq, *ops, memory_limit=limit), np.einsum(eq, *ops))
    argnums = tuple(range(len(ops)))
    v, g = ea.value_and_grad(sliced, argnums=argnums)(*ops)
    v0, g0 = ea.value_and_grad(whole, argnums=argnums)(*ops)
    _close(v, v0)
    for a, b in zip(g, g0):
        assert a.shape == b.shape and a.dtype == b.dtype
        _close(a, b, rtol=1e-9)
    assert ea.gradcheck(sliced, *ops)  # reverse and forward mode against differences


def test_one_operand_gradient_and_float32(finder):
    ops = [x.astype(np.float32) for x in _tetra(4)]
    f = lambda x: ea.einsum(TETRA, x, *ops[1:], memory_limit=64)
    g = ea.grad(f)(ops[0])
    assert g.dtype == np.float32
    _close(g, ea.grad(lambda x: ea.einsum(TETRA, x, *ops[1:]))(ops[0]), rtol=1e-4, atol=1e-4)


def test_second_order(finder):
    ops = _tetra(3)
    sliced = lambda x, y: ea.sum(ea.grad(lambda u: ea.einsum(TETRA, u, y, *ops[2:], memory_limit=20))(x) ** 2)
    whole = lambda x, y: ea.sum(ea.grad(lambda u: ea.einsum(TETRA, u, y, *ops[2:]))(x) ** 2)
    gg = ea.grad(sliced, argnums=(0, 1))(*ops[:2])
    gg0 = ea.grad(whole, argnums=(0, 1))(*ops[:2])
    for a, b in zip(gg, gg0):
        _close(a, b, rtol=1e-9)
    assert ea.gradcheck(sliced, *ops[:2])  # grad of grad, in both modes
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=20)
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        hv = ea.hvp(f, tuple(ops), tuple(ops[::-1]), mode=mode)
        hv0 = ea.hvp(lambda *xs: ea.einsum(TETRA, *xs), tuple(ops), tuple(ops[::-1]), mode=mode)
        for a, b in zip(hv, hv0):
            _close(a, b, rtol=1e-9)
    h = ea.hessian(lambda x: ea.sum(ea.einsum("abc,ade,bdf->cef", x, *ops[1:3], memory_limit=20) ** 2))(
        ops[0]
    )
    h0 = ea.hessian(lambda x: ea.sum(ea.einsum("abc,ade,bdf->cef", x, *ops[1:3]) ** 2))(ops[0])
    _close(h, h0, rtol=1e-9)


def test_jacobians_batch_the_sliced_einsum(finder):
    eq, shapes, limit = NETWORKS[1]
    ops = _ops(shapes)
    for jac in (ea.jacrev, ea.jacfwd):
        j = jac(lambda x: ea.einsum(eq, x, *ops[1:], memory_limit=limit))(ops[0])
        _close(j, jac(lambda x: ea.einsum(eq, x, *ops[1:]))(ops[0]))


def test_imperative_backward(finder):
    ops = _tetra(4)
    xs = [ea.tensor(x, requires_grad=True) for x in ops]
    ea.einsum(TETRA, *xs, memory_limit=64).backward()
    g0 = ea.grad(lambda *a: ea.einsum(TETRA, *a), argnums=(0, 1, 2, 3))(*ops)
    for x, b in zip(xs, g0):
        _close(x.grad, b)


def test_jit_sees_one_equation_forward_and_one_backward(finder):
    ops = _tetra(4)
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=64)
    vg = ea.jit(ea.value_and_grad(f, argnums=(0, 1, 2, 3)))
    for seed in (0, 1):  # traced once, replayed on new operands
        xs = _tetra(4, seed)
        v, g = vg(*xs)
        v0, g0 = ea.value_and_grad(lambda *a: ea.einsum(TETRA, *a), argnums=(0, 1, 2, 3))(*xs)
        _close(v, v0)
        for a, b in zip(g, g0):
            _close(a, b)
    assert vg.cache_size() == 1
    text = str(vg.lower(*ops))
    # a scalar contraction: value and gradients in one equation, one pass over the slices
    assert text.count("= einsum_vg[abc,ade,bdf,cef->; wrt 0,1,2,3; sliced") == 1
    assert "einsum_vjp" not in text and "unpack" in text
    eq, shapes, limit = NETWORKS[1]  # not scalar: the forward, then one sweep
    xs = _ops(shapes)
    g = lambda *a: ea.sum(ea.einsum(eq, *a, memory_limit=limit) ** 2)
    text = str(ea.jit(ea.value_and_grad(g, argnums=(0, 1, 2))).lower(*xs))
    assert text.count("= sliced_einsum[abc,ade,bdf->cef; sliced") == 1
    assert text.count("= einsum_vjp[abc,ade,bdf->cef; wrt 0,1,2; sliced") == 1
    _close(compiled(ea.jit(f))(*ops), np.einsum(TETRA, *ops))
    _close(ea.grad(ea.jit(f), argnums=1)(*ops), ea.grad(lambda *a: ea.einsum(TETRA, *a), argnums=1)(*ops))
    graph = ea.make_graph(f)(*ops)
    assert len(graph.equations) == 1 and graph.einsums == ["abc,ade,bdf,cef->"]


def test_unsliced_when_a_path_fits():
    ops = _tetra(4)
    _, info = ea.contract_path(TETRA, *ops, memory_limit=4**4)
    assert info.sliced_indices == () and info.n_slices == 1
    _, info = ea.contract_path("ij,jk->ik", (3, 4), (4, 5), shapes=True, memory_limit=1)
    assert info.sliced_indices == ()  # two operands: no intermediate, only the result
    graph = ea.make_graph(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=4**4))(*ops)
    assert "sliced" not in str(graph)


def test_memory_limit_is_validated():
    ops = _tetra(3)
    with pytest.raises(ea.EinsumError, match="memory_limit"):
        ea.einsum(TETRA, *ops, memory_limit=0)
    with pytest.raises(ea.EinsumError, match="memory_limit"):
        ea.contract_path(TETRA, *ops, memory_limit="lots")
    _, info = ea.contract_path(TETRA, *ops, memory_limit="max_input")  # 27 elements: sliced
    assert info.sliced_indices and info.memory_limit == 27


def test_a_numpy_integer_is_a_memory_limit():
    """A limit computed with numpy (``np.prod(shape) // 4``) is a number of elements too."""
    ops = _tetra(3)
    expected = ea.einsum(TETRA, *ops, memory_limit=27)
    _close(ea.einsum(TETRA, *ops, memory_limit=np.int64(27)), expected)
    _, info = ea.contract_path(TETRA, *ops, memory_limit=np.int32(27))
    assert info.sliced_indices and info.memory_limit == 27 and type(info.memory_limit) is int


@pytest.mark.parametrize("bad", [0, -2, 1.5, "lots", True, np.True_, np.float64(27.0)])
def test_memory_limit_is_validated_for_any_number_of_operands(bad):
    """Not only where a network is planned: one or two operands have no intermediate, but a
    bad limit is still a mistake (opt_einsum refuses it whatever the operands)."""
    a = np.ones((2, 3))
    for call in (
        lambda: ea.einsum("ij->i", a, memory_limit=bad),
        lambda: ea.einsum("ij,jk->ik", a, a.T, memory_limit=bad),
        lambda: ea.contract_path("ij,jk->ik", a, a.T, memory_limit=bad),
        lambda: ea.contract_expression("ij,jk->ik", (2, 3), (3, 2), memory_limit=bad),
        lambda: explain("ij,jk->ik", [(2, 3), (3, 2)], memory_limit=bad),
    ):
        with pytest.raises(ea.EinsumError, match=r"memory_limit .*-1"):
            call()


def test_memory_limit_minus_one_is_no_limit_as_in_opt_einsum():
    ops = _tetra(4)
    assert oe.contract_path(TETRA, *ops, memory_limit=-1)[0] == oe.contract_path(TETRA, *ops)[0]
    path, info = ea.contract_path(TETRA, *ops, memory_limit=-1)
    assert path == ea.contract_path(TETRA, *ops)[0] == oe.contract_path(TETRA, *ops)[0]
    assert info.memory_limit is None and info.sliced_indices == () and info.n_slices == 1
    assert ea.contract_path(TETRA, *ops, memory_limit=4**3)[1].sliced_indices  # a real limit slices
    expr = ea.contract_expression(TETRA, *[o.shape for o in ops], memory_limit=-1)
    assert expr.memory_limit is None and expr.sliced_indices == () and expr.path == path
    assert "memory limit" not in explain(TETRA, [o.shape for o in ops], memory_limit=-1)
    assert explain(TETRA, [o.shape for o in ops], memory_limit=-1) == explain(TETRA, [o.shape for o in ops])
    f = lambda *a: ea.einsum(TETRA, *a, memory_limit=-1)
    _close(f(*ops), oe.contract(TETRA, *ops, memory_limit=-1))
    _close(expr(*ops), oe.contract(TETRA, *ops))
    argnums = (0, 1, 2, 3)
    want = ea.grad(lambda *a: ea.einsum(TETRA, *a), argnums=argnums)(*ops)
    for got in (ea.grad(f, argnums=argnums)(*ops), ea.jit(ea.grad(f, argnums=argnums))(*ops)):
        for a, b in zip(got, want):
            _close(a, b)
    assert "sliced" not in str(ea.jit(ea.grad(f, argnums=argnums)).lower(*ops))
    assert str(ea.make_graph(f)(*ops)) == str(ea.make_graph(lambda *a: ea.einsum(TETRA, *a))(*ops))


# -- memory -------------------------------------------------------------------------------------


def _peak(fn, *args):
    """The peak of a call's allocations, the buffers a planned tree pools from earlier calls let
    go first (`network.release_pools`), so that the call makes and counts its own."""
    gc.collect()
    network.release_pools()
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        out = fn(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del out
    return peak


def test_peak_memory_of_value_and_gradient_follows_the_limit():
    n = 24  # inputs 4 x 108 KiB; the unsliced intermediate 2.5 MiB
    ops = _tetra(n)
    full = n**4
    grads = sum(x.nbytes for x in ops)
    peaks = {}
    for limit in (None, full // 4, full // 8):
        vg = ea.value_and_grad(
            lambda *xs, lim=limit: ea.einsum(TETRA, *xs, memory_limit=lim), argnums=(0, 1, 2, 3)
        )
        vg(*ops)  # plan outside the measurement
        peaks[limit] = _peak(vg, *ops)
    assert peaks[full // 4] < peaks[None] / 2
    assert peaks[full // 8] < peaks[full // 4]  # halving the limit lowers the peak
    for limit in (full // 4, full // 8):
        # inputs (allocated before, so not counted) + gradients + a small multiple of the limit
        assert peaks[limit] <= grads + 4 * 8 * limit, (limit, peaks)


def test_a_looped_intermediate_is_let_go_before_its_cotangent_is_made(monkeypatch):
    """In a slice of the gradient sweep, a looped intermediate leaves the slice's values when
    the step that read it is pulled back, and a step's largest operand is pulled back last,
    once let go: an intermediate and its cotangent never coexist. Measured on the one-pass
    value and gradients of TETRA (n = 24, a quarter of the 4-index intermediate per slice):
    2.24 x a slice's largest intermediate beyond the gradients; 3.24-3.28 when the first
    step's intermediate is kept to the end of the slice.

    Kills: _sweep 109 (looped operands read, not taken, by the pullbacks) and _is_looped 2
    (the first step's result not counted as looped)."""
    monkeypatch.setattr(slicing, "cotengra", None)
    monkeypatch.setattr(slicing, "threads", 1)
    slicing.plan.cache_clear()
    n = 24
    ops = _tetra(n)
    limit = n**4 // 4
    _, info = ea.contract_path(TETRA, *ops, memory_limit=limit)
    assert info.sliced_indices
    vg = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit), argnums=(0, 1, 2, 3))
    vg(*ops)  # plan outside the measurement
    extra = _peak(vg, *ops) - sum(x.nbytes for x in ops)
    assert extra < 2.75 * 8 * info.slice_largest_intermediate, extra / (8 * info.slice_largest_intermediate)
    slicing.plan.cache_clear()


def test_a_steps_largest_operand_is_pulled_back_last_once_let_go(monkeypatch):
    """A step's pullbacks run smallest operand first, and the last one lets its operand go
    before it runs: here the last step reads the looped outer product aij (first among its
    operands) and jk, and aij's cotangent is made once aij is gone. Measured (a slice of aij:
    X bytes): 1.39 X beyond the gradients; 2.03 when aij and its cotangent coexist.
    Reference: the unsliced einsum's VJP.

    Kills: _sweep 138, 140 (the pullbacks in the operands' order), 151 (none let go)."""
    monkeypatch.setattr(slicing, "threads", 1)
    a, i, j, k = 4, 150, 150, 2
    inputs, output, path, slices = ("ai", "aj", "jk"), "aik", ((0, 1), (1, 0)), (("a", 2),)
    ops = _ops([(a, i), (a, j), (j, k)])
    f = lambda *xs: contract_planned(inputs, output, xs, path, slices, None)
    y, pull = ea.vjp(f, *ops)
    u = _ops([y.shape], seed=1)[0]
    pull(u)  # plans made
    extra = _peak(pull, u) - sum(x.nbytes for x in ops)
    assert extra < 1.7 * 8 * (a // 2) * i * j, extra / (8 * (a // 2) * i * j)
    for got, want in zip(pull(u), ea.vjp(lambda *xs: ea.einsum("ai,aj,jk->aik", *xs), *ops)[1](u)):
        _close(got, want)


def test_the_one_pass_lets_go_the_values_no_pullback_reads(monkeypatch):
    """The one-pass value and gradient (a scalar contraction, one operand differentiated)
    lets a slice's value go once the forward used it when no pullback reads it: the outer
    product aij goes once aij,jk->aik ran, before the branch ai,ak->aik is computed.
    Measured (a slice of aik: S bytes): 2.89 S beyond the gradient; 3.89 S when aij is kept
    until its step is pulled back. Reference: the unsliced gradient.

    Kills: _sweep 89."""
    monkeypatch.setattr(slicing, "threads", 1)
    a, i, j, k = 4, 100, 100, 100
    inputs, output, slices = ("ai", "aj", "jk", "ai", "ak"), "", (("a", 2),)
    path = ((0, 1), (3, 0), (0, 1), (0, 1))
    ops = _ops([(a, i), (a, j), (j, k), (a, i), (a, k)])
    g = ea.grad(lambda *xs: contract_planned(inputs, output, xs, path, slices, None))
    g(*ops)  # plans made
    extra = _peak(g, *ops) - ops[0].nbytes
    assert extra < 3.4 * 8 * (a // 2) * i * k, extra / (8 * (a // 2) * i * k)
    _close(g(*ops), ea.grad(lambda *xs: ea.einsum("ai,aj,jk,ai,ak->", *xs))(*ops), rtol=1e-9)


# -- optimizer objects -----------------------------------------------------------------------


class CountingGreedy(oe.paths.PathOptimizer):
    """A path optimizer that refuses a second contraction and counts its calls."""

    def __init__(self):
        self.calls = 0
        self.first = None

    def __call__(self, inputs, output, size_dict, memory_limit=None):
        key = (tuple(map(frozenset, inputs)), frozenset(output), tuple(sorted(size_dict.items())))
        assert self.first in (None, key), "asked about a second contraction"
        self.first = key
        self.calls += 1
        return oe.paths.greedy(inputs, output, size_dict)


@pytest.mark.parametrize("limit", [None, 64])
def test_a_path_optimizer_plans_once_and_the_gradient_reuses_it(finder, limit):
    ops = _tetra(4)
    opt = CountingGreedy()
    f = lambda *xs: ea.einsum(TETRA, *xs, optimize=opt, memory_limit=limit)
    v, g = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    _close(v, v0)
    for a, b in zip(g, g0):
        _close(a, b)
    assert ea.gradcheck(f, *ops)
    ea.jit(ea.grad(f))(*ops)
    ea.hvp(f, tuple(ops), tuple(ops))
    assert opt.calls == 1


def test_random_greedy_gives_the_same_values_and_gradients(finder):
    ops = _tetra(4)
    rg = oe.RandomGreedy(max_repeats=8)
    for limit in (None, 64):
        f = lambda *xs, lim=limit: ea.einsum(TETRA, *xs, optimize=rg, memory_limit=lim)
        v, g = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
        _close(v, np.einsum(TETRA, *ops))
        for a, b in zip(g, ea.grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)):
            _close(a, b)
    with pytest.raises(ea.EinsumError, match="cannot plan"):  # RandomGreedy's own rule
        ea.einsum("ij,jk,kl->il", *_ops([(2, 3), (3, 4), (4, 2)]), optimize=rg)


def test_the_plan_cache_keys_on_identity_and_keeps_no_optimizer_alive():
    ops = _tetra(3)
    opt = oe.RandomGreedy(max_repeats=2)
    ea.einsum(TETRA, *ops, optimize=opt)
    assert id(opt) in slicing._object_paths
    ref, key = weakref.ref(opt), id(opt)
    del opt
    gc.collect()
    assert ref() is None and key not in slicing._object_paths

    class Equal(CountingGreedy):  # equal to every other instance: still two objects
        def __eq__(self, other):
            return isinstance(other, Equal)

        __hash__ = None

    a, b = Equal(), Equal()
    ea.einsum(TETRA, *ops, optimize=a)
    ea.einsum(TETRA, *ops, optimize=b)
    ea.einsum(TETRA, *ops, optimize=b)
    assert (a.calls, b.calls) == (1, 1)


def test_cotengra_optimizers(finder):
    ctg = pytest.importorskip("cotengra", reason="cotengra is not installed (pip install 'einad[tn]')")
    ops = _tetra(4)
    g0 = ea.grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    for opt in (
        ctg.HyperOptimizer(max_repeats=4, methods=["greedy"], progbar=False, seed=0),
        ctg.ReusableHyperOptimizer(max_repeats=4, methods=["greedy"], progbar=False, seed=0),
    ):
        for limit in (None, 64):
            f = lambda *xs, o=opt, lim=limit: ea.einsum(TETRA, *xs, optimize=o, memory_limit=lim)
            v, g = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
            _close(v, np.einsum(TETRA, *ops))
            for a, b in zip(g, g0):
                _close(a, b)


# -- contract_path and contract_expression ------------------------------------------------------


def test_contract_path_names_the_sliced_indices(finder):
    ops = _tetra(6)
    path, info = ea.contract_path(TETRA, *ops, memory_limit=6**4 // 4)
    assert isinstance(path, list) and all(isinstance(p, tuple) for p in path)
    assert info.sliced_indices and set(info.sliced_indices) <= set("abcdef")
    assert set(info.slices) == set(info.sliced_indices)
    assert info.n_slices == int(np.prod(list(info.slices.values())))
    assert info.slice_largest_intermediate <= 6**4 // 4 < info.largest_intermediate
    assert info.gradient_flops > info.forward_flops > 0
    assert 0 < info.forward_peak < info.gradient_peak
    text = repr(info)
    assert "Complete contraction:  abc,ade,bdf,cef->" in text and "no pairwise path fits" in text
    same = ea.contract_path(TETRA, *[x.shape for x in ops], shapes=True, memory_limit=6**4 // 4)
    assert same[0] == path and same[1].sliced_indices == info.sliced_indices
    # the user's letters, also with implicit output and spaces
    _, info = ea.contract_path("xyz, xuv, yuw, zvw", *ops, memory_limit=6**4 // 4)
    assert info.sliced_indices and set(info.sliced_indices) <= set("xyzuvw")


def test_contract_expression_is_reusable_and_differentiable(finder):
    n = 4
    expr = ea.contract_expression(TETRA, *[(n, n, n)] * 4, memory_limit=64)
    assert expr.sliced_indices and expr.path
    for seed in range(3):
        ops = _tetra(n, seed)
        _close(expr(*ops), np.einsum(TETRA, *ops))
        g = ea.grad(lambda *xs: expr(*xs), argnums=(0, 1, 2, 3))(*ops)
        g0 = ea.grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
        for a, b in zip(g, g0):
            _close(a, b)
    jitted = compiled(ea.jit(ea.value_and_grad(lambda *xs: expr(*xs), argnums=2)))
    v, g2 = jitted(*ops)
    _close(v, np.einsum(TETRA, *ops))
    _close(g2, g0[2])
    _, t = ea.jvp(lambda x: expr(x, *ops[1:]), (ops[0],), (ops[1],))
    _close(t, np.einsum(TETRA, ops[1], *ops[1:]))
    with pytest.raises(ea.EinsumError, match="planned for shapes"):
        expr(np.ones((n, n, n + 1)), *ops[1:])
    with pytest.raises(ea.EinsumError, match="4 operand"):
        expr(*ops[:3])
    plain = ea.contract_expression("ij,jk,kl->il", (2, 3), (3, 4), (4, 5), optimize=oe.DynamicProgramming())
    a, b, c = _ops([(2, 3), (3, 4), (4, 5)])
    _close(plain(a, b, c), a @ b @ c)
    _close(plain(ea.tensor(a), b, c).numpy(), a @ b @ c)
    one = ea.contract_expression("ii->i", (3, 3))
    _close(one(np.eye(3) * 2), np.full(3, 2.0))


TETRA_BONDS = [["x", "y", "z"], ["x", "u", "v"], ["y", "u", "w"], ["z", "v", "w"]]  # TETRA, labelled


def _interleave(operands, sublists, output=()):
    return [x for pair in zip(operands, sublists) for x in pair] + [list(output)]


def test_contract_path_takes_the_interleaved_form():
    ops = _tetra(6)
    args = _interleave(ops, TETRA_BONDS)
    path = ea.contract_path(TETRA, *ops)[0]
    assert ea.contract_path(*args)[0] == path == oe.contract_path(*args)[0]
    assert (
        ea.contract_path(ops[0], [0, 1, 2], ops[1], [0, 3, 4], ops[2], [1, 3, 5], ops[3], [2, 4, 5])[0]
        == path
    )
    limited, linfo = ea.contract_path(TETRA, *ops, memory_limit=6**4 // 4)
    for arrays in (args, _interleave([x.shape for x in ops], TETRA_BONDS)):
        got, ginfo = ea.contract_path(*arrays, memory_limit=6**4 // 4, shapes=arrays is not args)
        assert got == limited and ginfo.n_slices == linfo.n_slices > 1
        assert ginfo.forward_flops == linfo.forward_flops and ginfo.opt_cost == linfo.opt_cost
    with pytest.raises(ea.EinsumError, match="label 'bond' has size 3 in operand 0 and size 4 in operand 1"):
        ea.contract_path((2, 3), ["left", "bond"], (4, 5), ["bond", "right"], shapes=True)


def test_contract_expression_takes_the_interleaved_form_with_shapes_as_opt_einsum():
    ops = _tetra(4)
    shapes = [x.shape for x in ops]
    args = _interleave(shapes, TETRA_BONDS)
    expr, ref = ea.contract_expression(*args), oe.contract_expression(*args)
    assert expr.path == ea.contract_expression(TETRA, *shapes).path
    assert expr.shapes == tuple(shapes) and expr.subscripts == "xyz,xuv,yuw,zvw->"  # one-letter labels kept
    _close(expr(*ops), ref(*ops))
    sliced = ea.contract_expression(*args, memory_limit=16)
    assert (
        sliced.sliced_indices and sliced.path == ea.contract_expression(TETRA, *shapes, memory_limit=16).path
    )
    want = ea.grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    for e in (expr, sliced):
        _close(e(*ops), np.einsum(TETRA, *ops))
        for got in (
            ea.grad(lambda *xs, e=e: e(*xs), argnums=(0, 1, 2, 3))(*ops),
            ea.jit(ea.grad(lambda *xs, e=e: e(*xs), argnums=(0, 1, 2, 3)))(*ops),
        ):
            for a, b in zip(got, want):
                _close(a, b)
    matrix = ea.contract_expression((2, 3), ["i", Ellipsis], (3,), [Ellipsis])  # implicit output: "...i"
    _close(
        matrix(np.ones((2, 3)), np.arange(3.0)),
        oe.contract(np.ones((2, 3)), ["i", ...], np.arange(3.0), [...]),
    )
    with pytest.raises(ea.EinsumError, match="label 'bond' has size 3 in operand 0 and size 4 in operand 1"):
        ea.contract_expression((2, 3), ["left", "bond"], (4, 5), ["bond", "right"])


# -- planning --------------------------------------------------------------------------------


def test_greedy_finder_fits_the_limit_and_reports_costs():
    inputs, sizes = ("abc", "ade", "bdf", "cef"), dict.fromkeys("abcdef", 8)
    path = ((0, 1), (0, 2), (0, 1))
    for limit in (2048, 512, 64, 1):
        _, chunks = slicing.greedy_slices(inputs, "", sizes, path, limit)
        chunks = slicing.coarsen(inputs, "", sizes, path, limit, chunks)
        assert slicing.largest(inputs, "", path, sizes, chunks) <= limit
        assert chunks and all(1 < m <= 8 for m in chunks.values())
    s = slicing.schedule(inputs, "", ((8, 8, 8),) * 4, path, (("e", 2),))
    assert s.n_slices == 2 and s.hoisted == () and len(s.looped) == 3
    costs = slicing.estimate(s)
    whole = slicing.estimate(slicing.schedule(inputs, "", ((8, 8, 8),) * 4, path, ()))
    assert costs.largest == 8**4 // 2 and whole.largest == 8**4
    assert costs.forward_flops == whole.forward_flops  # 'e' is in every step: no repeated work
    assert costs.forward_peak < whole.forward_peak and costs.gradient_peak < whole.gradient_peak


def test_a_partial_gradient_recomputes_only_what_its_pullbacks_read(finder):
    n = 5
    ops = _tetra(n)
    s = slicing.schedule(
        ("abc", "ade", "bdf", "cef"), "", ((n,) * 3,) * 4, ((0, 1), (0, 2), (0, 1)), (("c", 5),)
    )
    # steps: abc,ade -> debc; debc,bdf -> ecf; ecf,cef -> (the last is never rerun)
    assert s.rerun(s.needs(frozenset({0}))) == frozenset()  # its pullbacks read only operands
    assert s.rerun(s.needs(frozenset({2}))) == {0}
    assert s.rerun(s.needs(frozenset({3}))) == s.rerun(s.needs(frozenset(range(4)))) == {0, 1}
    for k in range(4):
        g = ea.grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=30), argnums=k)(*ops)
        _close(g, ea.grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=k)(*ops))


def test_steps_no_sliced_letter_reaches_are_hoisted():
    # sliced along 'x': ab,bc -> ac is computed once, its cotangent summed over the slices
    inputs, output = ("ab", "bc", "cx", "xd", "dy"), "ay"
    path = ((0, 1), (0, 3), (0, 2), (0, 1))
    ops = _ops([(2, 3), (3, 2), (2, 8), (8, 3), (3, 2)])
    s = slicing.schedule(inputs, output, tuple(x.shape for x in ops), path, (("x", 3),))
    assert s.hoisted == (0,) and s.looped == (1, 2, 3) and s.n_slices == 3
    assert [r["x"] for r in s.ranges()] == [(0, 3), (3, 6), (6, 8)]  # the larger chunks first

    def f(*xs):
        return ea.sum(wrap(contract_planned(inputs, output, xs, path, (("x", 3),), 8)) ** 2)

    eq = ",".join(inputs) + "->" + output
    assert "sliced x/3" in str(ea.make_graph(f)(*ops))
    _close(f(*ops), np.sum(np.einsum(eq, *ops) ** 2))
    g = ea.grad(f, argnums=(0, 1, 2, 3, 4))(*ops)
    g0 = ea.grad(lambda *xs: ea.sum(ea.einsum(eq, *xs) ** 2), argnums=(0, 1, 2, 3, 4))(*ops)
    for a, b in zip(g, g0):
        _close(a, b, rtol=1e-9)
    assert ea.gradcheck(f, *ops)


def test_hoisted_values_the_loop_does_not_read_are_let_go_before_it(monkeypatch):
    """A hoisted value that only a later hoisted step reads is let go once that step ran:
    here the outer product i,j->ij (as large as the result) is reduced by j,ij->i before the
    loop, so the forward's peak is the result and a slice's part (measured: 1.44 x the
    result's bytes), not those and the outer product too (2.44).

    Kills: _run_sliced 12 and _hoisted 19, 20 (the hoisted values kept through the loop);
    _run_sliced 20 (numpy's result gathered as blocks, then concatenated: 2.01)."""
    monkeypatch.setattr(slicing, "threads", 1)
    n = 300
    inputs, output, path, slices = ("i", "j", "j", "ix"), "ix", ((0, 1), (0, 2), (0, 1)), (("x", 4),)
    ops = _ops([(n,), (n,), (n,), (n, n)])
    s = slicing.schedule(inputs, output, tuple(x.shape for x in ops), path, slices)
    assert s.hoisted == (0, 1) and s.looped == (2,)
    f = lambda *xs: contract_planned(inputs, output, xs, path, slices, None)
    want = np.einsum("i,j,j,ix->ix", *ops)
    _close(f(*ops), want)
    peak = _peak(f, *ops)
    assert peak < 1.9 * want.nbytes, peak / want.nbytes


def test_explain_reports_the_slicing_and_the_gradient(capsys):
    text = explain(TETRA, [(8, 8, 8)] * 4, memory_limit=1024)
    assert "memory limit 1,024 elements: no pairwise path fits; sliced" in text
    assert "largest intermediate per slice" in text
    assert "forward   FLOPs" in text and "gradient  FLOPs" in text
    text = explain(TETRA, [(8, 8, 8)] * 4)
    assert "sliced" not in text and "gradient  FLOPs" in text
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "einad",
            "explain",
            TETRA,
            "--shapes",
            "6x6x6,6x6x6,6x6x6,6x6x6",
            "--memory-limit",
            "300",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "no pairwise path fits" in run.stdout


# -- value and gradient in one pass, threads, the estimate's copies, ellipsis letters ---------


def _count_steps(monkeypatch, delay=0.0, names=None, meet=None):
    """Record each forward step a sliced contraction runs (with its thread; its name in `names`).
    With `meet` (a `threading.Barrier`), each thread's first step waits there until as many
    threads as the barrier's parties have arrived: they must run at once, however loaded the
    machine (a timeout breaks the barrier and the contraction raises)."""
    calls = []
    raw, raw_tree = EINSUM._slice_step, EINSUM.tree_forward

    def note():
        if meet is not None and threading.get_ident() not in calls:
            meet.wait(timeout=60)
        calls.append(threading.get_ident())
        if names is not None:
            names.append(threading.current_thread().name)
        if delay:
            time.sleep(delay)  # so that the pool's threads overlap

    def step(sc, run, ins, out, picked):
        note()
        return raw(sc, run, ins, out, picked)

    def tree(plan, arrays, keep=False, pool=None, value=True):
        for _ in plan.forward:  # (a sweep's slice, its looped steps as one tree: each step)
            note()
        return raw_tree(plan, arrays, keep, pool, value)

    monkeypatch.setattr(EINSUM, "_slice_step", step)  # every looped step of a slice
    monkeypatch.setattr(EINSUM, "tree_forward", tree)
    return calls


# -- the slices' buffers: each thread's slices run in the same ones (network.scratch) --------


def test_slices_reuse_their_buffers(monkeypatch):
    """A thread's slices run the same steps on arrays of the same shapes: the buffers of its
    values, cotangents and copies are made for its first slice and serve every slice after
    it (a fresh large array faults its pages in again; benchmark case 10, a sixth of a
    worker's time). Counted on einad's pools, every buffer pooled however small: the buffers
    asked for grow with the slices, the buffers made do not."""
    monkeypatch.setattr(network, "SCRATCH_MIN", 0)
    monkeypatch.setattr(slicing, "threads", 1)
    made = []

    def recording():
        made.append(network.scratch())
        return made[-1]

    monkeypatch.setattr(EINSUM, "scratch", recording)
    asked = []
    get = network._Pool.get

    def counted(self, shape, dtype):
        if any(self is p for p in made):
            asked.append(shape)
        return get(self, shape, dtype)

    monkeypatch.setattr(network._Pool, "get", counted)
    ops = _tetra(8)
    _, info = ea.contract_path(TETRA, *ops, memory_limit=600)
    assert info.n_slices == 8  # eight slices of one shape
    for run in (
        lambda: ea.einsum(TETRA, *ops, memory_limit=600),  # the forward's slices
        lambda: ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=600), argnums=(0, 1, 2, 3))(
            *ops
        ),
    ):
        made.clear()
        asked.clear()
        run()
        assert len(made) == 1  # one pool for the thread's slices
        assert len(asked) >= 8 * 2  # every slice's products wrote into its buffers ...
        assert made[0].fresh <= len(asked) // 8  # ... which the first slice made


@pytest.mark.parametrize("d", [1, 2, 7, 17, 150])
def test_a_letters_chunks_cover_it_the_larger_first(d):
    """Each sliced letter's chunks are contiguous, cover it, differ by at most one, and the
    larger come first (one change of shape per thread: the next test)."""
    for m in range(1, d + 1):
        bounds = slicing._bounds(d, m)
        sizes = [b - a for a, b in bounds]
        assert len(bounds) == m and bounds[0][0] == 0 and bounds[-1][1] == d
        assert all(bounds[i][1] == bounds[i + 1][0] for i in range(m - 1))
        assert sizes == sorted(sizes, reverse=True) and sizes[0] - sizes[-1] <= 1


def test_a_slice_of_other_shapes_lets_the_buffers_go_first(monkeypatch):
    """A slice of other shapes than the one before it (a letter's chunks differ by one) cannot
    use the buffers the slices before it made: the pool lets them go before it runs, so that
    they do not stay beside its own (past the slice bound `memory_limit` plans for); a slice
    of the same shapes keeps them. The larger chunks come first, so a thread's slices change
    shape once (here the first to the second, not the second to the third as when the
    smaller chunks came first). Observed: what the pool holds as each slice begins."""
    monkeypatch.setattr(network, "SCRATCH_MIN", 0)
    monkeypatch.setattr(slicing, "threads", 1)
    monkeypatch.setattr(slicing, "cotengra", None)
    slicing.plan.cache_clear()
    made, held = [], []
    monkeypatch.setattr(EINSUM, "scratch", lambda: made.append(network.scratch()) or made[-1])
    begin = EINSUM._Scratch.begin

    def recording(self, ranges):
        before = self.pool.held
        begin(self, ranges)
        held.append((before, self.pool.held))

    monkeypatch.setattr(EINSUM._Scratch, "begin", recording)
    ops, limit = _tetra(7), 3 * 7**3
    _, info = ea.contract_path(TETRA, *ops, memory_limit=limit)
    assert info.slices == {"c": 3}  # chunks of 3, 2 and 2
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit)
    v, g = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
    assert len(made) == 1 and len(held) == 3
    (_, first), (larger, second), (kept, third) = held
    assert first == 0 and larger > 0  # the first slice's buffers ...
    assert second == 0  # ... let go before the second, of smaller shapes ...
    assert kept > 0 and third == kept  # ... whose buffers the third, of the same shapes, keeps
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*ops)
    _close(v, v0)
    for a, b in zip(g, g0):
        _close(a, b, rtol=1e-9)
    slicing.plan.cache_clear()


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("eq, shapes, limit", NETWORKS)
def test_slices_in_reused_buffers_equal_the_unsliced(monkeypatch, eq, shapes, limit, threads):
    """Every buffer pooled (however small): values, one-pass gradients and a non-scalar
    result's sweep, real and complex, on one thread and two, equal the unsliced ones. A
    buffer given back while a value still reads it would show here."""
    monkeypatch.setattr(network, "SCRATCH_MIN", 0)
    monkeypatch.setattr(slicing, "threads", threads)
    rng = np.random.default_rng(7)
    total = eq.split("->")[0] + "->"  # (a scalar: its value and gradients in one pass)
    for dtype in (np.float64, np.complex128):
        ops = [x.astype(dtype) for x in _ops(shapes)]
        if dtype == np.complex128:
            ops = [x + 1j * rng.standard_normal(x.shape) for x in ops]
        _close(ea.einsum(eq, *ops, memory_limit=limit), np.einsum(eq, *ops))
        out = np.einsum(eq, *ops)
        u = rng.standard_normal(out.shape).astype(dtype)
        _, pull = ea.vjp(lambda *xs: ea.einsum(eq, *xs, memory_limit=limit), *ops)
        _, pull0 = ea.vjp(lambda *xs: ea.einsum(eq, *xs), *ops)
        for a, b in zip(pull(u), pull0(u)):
            _close(a, b, rtol=1e-9)
        v, pull = ea.vjp(lambda *xs: ea.einsum(total, *xs, memory_limit=limit), *ops)
        v0, pull0 = ea.vjp(lambda *xs: ea.einsum(total, *xs), *ops)
        _close(v, v0)
        one = np.ones((), dtype)
        for a, b in zip(pull(one), pull0(one)):
            _close(a, b, rtol=1e-9)


def test_scalar_value_and_gradient_take_one_pass_over_the_slices(lib, monkeypatch):
    """A sliced scalar contraction's value and gradients run each slice's forward once, its
    pullbacks after it, the slices' values summed: no step more than the forward alone, on
    numpy, torch, array-api-strict and dask alike, with numpy's numbers. (Other libraries took
    the whole forward, then a sweep computing every slice's intermediates again, until cc43c2a:
    case 10's tetrahedron at n = 40 on torch, 160 slices, 150-160 -> 120 ms.)

    Kills: `vg_fusion` (numpy), `_sliced_vg_impl` taking another library's arrays the
    forward-then-sweep way."""
    base = _tetra(5)
    ops = [lib.asarray(o) for o in base]
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=40)
    vg = ea.value_and_grad(f, argnums=(0, 1, 2, 3))
    vg(*ops)  # plan outside the count
    calls = _count_steps(monkeypatch)
    f(*ops)
    forward = len(calls)
    assert forward > 3  # sliced: every step once per slice
    calls.clear()
    v, g = vg(*ops)
    assert len(calls) == forward  # the gradient recomputed nothing
    v0, g0 = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs), argnums=(0, 1, 2, 3))(*base)
    check_lib(lib, v, v0)
    for a, b in zip(g, g0):
        check_lib(lib, a, b, rtol=1e-9, atol=1e-9)
    if lib.name == "numpy":  # without the fusion, the sweep recomputes each slice's intermediates
        monkeypatch.setattr(EINSUM, "vg_fusion", False)
        calls.clear()
        v1, g1 = vg(*ops)
        assert len(calls) > forward
        _close(v1, v0)
        for a, b in zip(g1, g0):
            _close(a, b)


def test_the_unit_gradients_are_scaled_by_the_cotangent_and_reusable():
    ops = _tetra(4)
    f = lambda *xs: ea.einsum(TETRA, *xs, memory_limit=64)
    whole = lambda *xs: ea.einsum(TETRA, *xs)
    y, pull = ea.vjp(f, *ops)
    y0, pull0 = ea.vjp(whole, *ops)
    _close(y, y0)
    for ct in (np.float64(2.5), np.float64(-1.0), np.float64(1.0)):  # the buffer is handed out once
        for a, b in zip(pull(ct), pull0(ct)):
            _close(a, b)
    # mixed dtypes: the gradient has its operand's dtype
    a32 = ops[0].astype(np.float32)
    g = ea.grad(f)(a32, *ops[1:])
    assert g.dtype == np.float32
    _close(g, ea.grad(whole)(a32, *ops[1:]), rtol=1e-5, atol=1e-5)
    # a partial gradient, under jit and in second order, through the one-pass equation
    _close(compiled(ea.jit(ea.grad(f, argnums=2)))(*ops), ea.grad(whole, argnums=2)(*ops))
    h = ea.hessian(lambda x: f(x, *ops[1:]) ** 2)(ops[0])
    _close(h, ea.hessian(lambda x: whole(x, *ops[1:]) ** 2)(ops[0]), rtol=1e-9)


@pytest.mark.parametrize("eq, shapes, limit", NETWORKS[:2])
def test_slices_run_on_a_thread_pool(monkeypatch, eq, shapes, limit):
    ops = _ops(shapes)
    loss = lambda *xs: ea.sum(ea.einsum(eq, *xs, memory_limit=limit) ** 2)
    argnums = tuple(range(len(ops)))
    monkeypatch.setattr(slicing, "threads", 1)
    v1, g1 = ea.value_and_grad(loss, argnums=argnums)(*ops)
    _, one = ea.contract_path(eq, *ops, memory_limit=limit)
    monkeypatch.setattr(slicing, "threads", 2)
    _, two = ea.contract_path(eq, *ops, memory_limit=limit)
    assert (one.threads, two.threads) == (1, 2)
    assert two.forward_peak > one.forward_peak and two.gradient_peak > one.gradient_peak  # a slice per thread
    names = []
    calls = _count_steps(monkeypatch, delay=0.002, names=names)
    _close(ea.einsum(eq, *ops, memory_limit=limit), np.einsum(eq, *ops))
    # the forward's slices ran on the pool's two threads, named for a profiler or a stack dump
    assert set(names) == {"einad-slice_0", "einad-slice_1"} and threading.get_ident() not in calls
    calls.clear()
    names.clear()
    v2, g2 = ea.value_and_grad(loss, argnums=argnums)(*ops)
    # the gradient's: its forward and its sweep each on a pool of two (thread ids may be reused
    # from one pool to the next, or not: the names say how many ran at once)
    assert set(names) == {"einad-slice_0", "einad-slice_1"} and threading.get_ident() not in calls
    _close(v1, v2, rtol=1e-12)
    for a, b in zip(g1, g2):
        _close(a, b, rtol=1e-12)
    monkeypatch.setattr(slicing, "threads", 1)  # one thread: the caller's, no pool
    calls.clear()
    ea.value_and_grad(loss, argnums=argnums)(*ops)
    assert calls and set(calls) == {threading.get_ident()}


def test_the_default_thread_count_keeps_the_slices_within_the_limit(monkeypatch):
    monkeypatch.setattr(slicing, "threads", None)
    s = slicing.schedule(
        ("abc", "ade", "bdf", "cef"), "", ((8, 8, 8),) * 4, ((0, 1), (0, 2), (0, 1)), (("e", 8),)
    )
    per = slicing.estimate(s).slice_gradient_peak
    assert slicing.workers(s, per, gradient=True) == 1  # the limit holds one slice
    assert slicing.workers(s, 10**9, gradient=True) == min(os.cpu_count() or 1, 8)
    assert slicing.estimate(s, 2).gradient_peak == 2 * per  # each thread holds a slice


def test_a_thread_count_set_is_taken_whatever_the_cores(monkeypatch):
    """``slicing.threads = 8`` runs the slices on 8 threads, also on a machine with fewer
    cores (one here: a pool's own default would be 5 threads). Reference: numpy.einsum.

    Kills: _over_slices 14, 16 (the pool's default size)."""
    monkeypatch.setattr(slicing, "threads", 8)
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    inputs, output, path, slices = ("abc", "ade", "bdf"), "cef", ((0, 1), (0, 1)), (("a", 4), ("e", 3))
    ops = _ops([(4, 3, 5), (4, 2, 3), (3, 2, 4)])
    calls = _count_steps(monkeypatch, meet=threading.Barrier(8))  # 8 threads run at once
    _close(contract_planned(inputs, output, ops, path, slices, None), np.einsum("abc,ade,bdf->cef", *ops))
    assert len(set(calls)) == 8 and threading.get_ident() not in calls


def test_the_forward_and_the_gradient_each_take_the_threads_their_slices_fit(monkeypatch):
    """With the default thread count, each pass runs on as many threads as the limit holds
    slices of that pass: here two slices of the forward but one of the gradient sweep (whose
    slice holds cotangents too), so the forward's slices run on two pool threads and the
    sweep's on the calling thread. Reference: the unsliced einsum and its VJP.

    Kills: _over_slices 9 (the sweep counted as a forward), _run_sliced 72, 79 and
    _sliced_impl 23, 26 (the forward counted as a gradient, or without its limit)."""
    monkeypatch.setattr(slicing, "threads", None)
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    inputs, output, path, slices = ("abc", "ade", "bdf"), "cef", ((0, 1), (0, 1)), (("e", 3),)
    eq = "abc,ade,bdf->cef"
    ops = _ops([(4, 3, 5), (4, 2, 3), (3, 2, 4)])
    s = slicing.schedule(inputs, output, tuple(x.shape for x in ops), path, slices)
    c = slicing.estimate(s)
    limit = 2 * c.slice_forward_peak
    assert s.n_slices == 3 and limit // c.slice_gradient_peak == 1
    f = lambda *xs: contract_planned(inputs, output, xs, path, slices, limit)
    y, pull = ea.vjp(f, *ops)
    u = _ops([y.shape], seed=1)[0]
    calls = _count_steps(monkeypatch, delay=0.002)
    _close(f(*ops), np.einsum(eq, *ops))
    assert len(set(calls)) == 2 and threading.get_ident() not in calls
    calls.clear()
    grads = pull(u)
    assert calls and set(calls) == {threading.get_ident()}  # the sweep reruns the first step
    for a, b in zip(grads, ea.vjp(lambda *xs: ea.einsum(eq, *xs), *ops)[1](u)):
        _close(a, b)


def _forward_peak(eq, ops, limit):
    f = lambda *xs: ea.einsum(eq, *xs, memory_limit=limit)
    f(*ops)
    return _peak(f, *ops) - np.einsum(eq, *ops, optimize=True).nbytes


@pytest.mark.parametrize(
    "eq, n, limit",
    [(TETRA, 24, 24**4 // 8), ("ab,bc,cd,da->", 300, 300**2 // 3)],
)
def test_the_peak_estimate_counts_the_transposing_copies(monkeypatch, eq, n, limit):
    monkeypatch.setattr(slicing, "cotengra", None)
    monkeypatch.setattr(slicing, "threads", 1)
    slicing.plan.cache_clear()
    ops = _ops([(n,) * len(s) for s in eq.split("->")[0].split(",")])
    _, info = ea.contract_path(eq, *ops, memory_limit=limit)
    assert info.sliced_indices
    # the matrix products copy an operand laid out the wrong way: the copy is as large as
    # a slice's intermediate here, so the peak is well above the largest intermediate
    assert info.forward_peak >= 1.5 * info.slice_largest_intermediate
    measured = _forward_peak(eq, ops, limit)
    assert 0.9 <= measured / (8 * info.forward_peak) <= 1.1, (measured, 8 * info.forward_peak)
    slicing.plan.cache_clear()


def test_the_peaks_are_totals_that_may_exceed_the_limit_on_intermediates():
    # docs/large-networks.md: memory_limit bounds each intermediate (opt_einsum's meaning); a
    # peak adds up what is held at once, here the two operands' cotangents in the gradient
    _, info = ea.contract_path("b,b->", (4,), (4,), shapes=True, memory_limit=3)
    assert info.n_slices == 1 and info.slice_largest_intermediate <= 3
    assert (info.forward_peak, info.gradient_peak) == (1, 8)


def test_an_ellipsis_dimension_is_reported_as_the_user_wrote_it(monkeypatch):
    monkeypatch.setattr(slicing, "cotengra", None)
    slicing.plan.cache_clear()
    eq, shapes = "x...,xy...,y...->", [(4, 6, 6), (4, 4, 6, 6), (4, 6, 6)]
    _, info = ea.contract_path(eq, *shapes, shapes=True, memory_limit=10)
    label = re.compile(r"\.\.\.\[\d\]")
    assert info.sliced_indices and any(label.fullmatch(c) for c in info.sliced_indices)
    assert all(c in "xy" or label.fullmatch(c) for c in info.sliced_indices)
    assert set(info.slices) == set(info.sliced_indices)
    assert "...[0]" in info.sliced_indices and "...[1]" in info.sliced_indices
    expr = ea.contract_expression(eq, *shapes, memory_limit=10)
    assert expr.sliced_indices == info.sliced_indices
    text = explain(eq, shapes, memory_limit=10)
    assert "'...[0]' into" in text
    ops = _ops(shapes)
    _close(expr(*ops), np.einsum("xab,xyab,yab->", *ops))  # numpy refuses a summed '...'
    slicing.plan.cache_clear()


# -- sliced contractions on every array library ---------------------------------------------

SLICED = [
    ("abc,ade,bdf,cef->", [(4, 4, 4)] * 4, 64),  # scalar result
    ("abc,ade,bdf->cef", [(4, 3, 5), (4, 2, 3), (3, 2, 4)], 20),  # output letters sliced
    ("aabc,ade,bdf,cef->f", [(3, 3, 4, 2), (3, 3, 4), (4, 3, 2), (2, 4, 2)], 10),  # a repeated index
]


@pytest.mark.parametrize("case", SLICED, ids=[c[0] for c in SLICED])
def test_sliced_einsum(lib, case):
    eq, shapes, limit = case
    ops = random_operands(shapes)
    _, info = ea.contract_path(eq, *ops, memory_limit=limit)
    assert info.sliced_indices, "the limit must force slicing"
    vjp_all(lib, einsum_fn(eq, memory_limit=limit), ops)


def test_sliced_second_order(lib):
    eq, shapes, limit = SLICED[1]
    ops = random_operands([*shapes, (5, 3, 4)])

    def h(x, y, z, w):  # d/dz <grad_x <einsum(x, y, z), w>, x>: sliced sweeps differentiated
        f = lambda x, y, z: ea.einsum("cef,cef->", ea.einsum(eq, x, y, z, memory_limit=limit), w)
        return ea.grad(lambda z: ea.einsum("abc,abc->", ea.grad(f)(x, y, z), x))(z)

    check_lib(lib, h(*[lib.asarray(o) for o in ops]), h(*ops), rtol=1e-9)


def test_contract_expression(lib):
    expr = ea.contract_expression("ij,jk,kl->il", (2, 3), (3, 4), (4, 2))
    vjp_all(lib, expr, random_operands([(2, 3), (3, 4), (4, 2)]))


def test_sliced_mixed_dtypes_contract_in_the_promoted_dtype():
    # numpy.einsum promotes every operand first: two float32 operands of a float64
    # contraction are not contracted together in float32, sliced or not
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 6))
    b = rng.standard_normal((6, 7)).astype(np.float32)
    c = rng.standard_normal((7, 5)).astype(np.float32)
    spec = "ab,bc,ca->ab"
    assert ea.contract_path(spec, a, b, c, memory_limit=4)[1].sliced_indices
    ref = np.einsum(spec, a, b, c)
    out = np.asarray(ea.einsum(spec, a, b, c, memory_limit=4))
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)
    expr = ea.contract_expression(spec, a.shape, b.shape, c.shape, memory_limit=4)
    np.testing.assert_allclose(np.asarray(expr(a, b, c)), ref, rtol=1e-12, atol=1e-12)

    def grad(ml):
        return ea.grad(lambda x: ea.sum(ea.einsum(spec, x, b, c, memory_limit=ml) ** 2))(a)

    np.testing.assert_allclose(grad(4), grad(None), rtol=1e-12, atol=1e-12)
    vg = ea.jit(ea.value_and_grad(lambda x: ea.einsum("ab,bc,ca->", x, b, c, memory_limit=4)))
    v, g = vg(a)
    np.testing.assert_allclose(v, np.einsum("ab,bc,ca->", a, b, c), rtol=1e-12)
    np.testing.assert_allclose(g, np.einsum("bc,ca->ab", b.astype(np.float64), c), rtol=1e-12, atol=1e-12)


def test_importing_einad_leaves_cotengra_until_a_plan_reads_it():
    """cotengra takes ~0.1 s to import, a quarter of einad's own import: `slicing` imports it when
    its finder is first read, not with einad."""
    pytest.importorskip("cotengra", reason="cotengra is an optional extra (einad[tn])")
    code = (
        "import sys, einad\n"
        "from einad import slicing\n"
        "assert 'cotengra' not in sys.modules, 'imported with einad'\n"
        "sizes = dict(a=8, b=8, c=8, d=8)\n"
        "found = slicing.cotengra_slices(('ab', 'bc', 'cd'), 'ad', sizes, [(0, 1), (0, 1)], 16)\n"
        "assert 'cotengra' in sys.modules and found, found\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# -- a sweep's slice as one planned tree (rules.einsum._Sweep._tree_slice) ------------------------


def _copied_elements(monkeypatch):
    copied = [0]
    raw = network._copy_into

    def counted(out, view):
        copied[0] += view.size
        raw(out, view)

    monkeypatch.setattr(network, "_copy_into", counted)
    return copied


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_a_sweeps_slice_runs_as_one_planned_tree_copying_less(monkeypatch, dtype):
    """Each slice of the one-pass value and gradient runs its looped steps as one tree planned
    once (`network.tree_plan`, layouts chosen for the forward and the sweep together): the
    tetrahedron at n = 24, sliced, copies 691,200 elements a call, where step by step, each
    product laying out its operands for itself, it copied 1,354,752; the same value and
    gradients, real and complex, as the unsliced einsum's."""
    monkeypatch.setattr(slicing, "threads", 1)
    n = 24
    rng = np.random.default_rng(7)
    ops = [rng.standard_normal((n, n, n)).astype(dtype) for _ in range(4)]
    if dtype is np.complex128:
        ops = [x + 1j * rng.standard_normal(x.shape) for x in ops]
    limit = n**4 // 4
    _, info = ea.contract_path(TETRA, *ops, memory_limit=limit)
    assert info.sliced_indices
    vg = ea.value_and_grad(lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit), argnums=(0, 1, 2, 3))
    if dtype is np.complex128:
        vg = ea.value_and_grad(
            lambda *xs: ea.real(ea.einsum(TETRA, *xs, memory_limit=limit)), argnums=(0, 1, 2, 3)
        )
    copied = {}
    results = {}
    for tree in (False, True):
        monkeypatch.setattr(EINSUM, "TREE_SLICES", tree)
        vg(*ops)  # (plans made)
        count = _copied_elements(monkeypatch)
        results[tree] = vg(*ops)
        copied[tree] = count[0]
        monkeypatch.undo()
        monkeypatch.setattr(slicing, "threads", 1)
    assert 0 < copied[True] < 0.6 * copied[False]
    ref = ea.value_and_grad(
        lambda *xs: ea.real(ea.einsum(TETRA, *xs)) if dtype is np.complex128 else ea.einsum(TETRA, *xs),
        argnums=(0, 1, 2, 3),
    )(*ops)
    for value, grads in results.values():
        _close(value, ref[0], rtol=1e-10)
        for got, want in zip(grads, ref[1]):
            _close(got, want, rtol=1e-10)


def test_a_slices_tree_has_no_looped_products():
    """A slice's tree is planned without products looped over letters one operand has
    (`tree_plan(looped=False)`): at case 10's slice shapes (n = 80, c sliced in 8) the plan
    that copies least loops 800 matrix products of 80^3 in one step, which ran slower than
    the copy it saves (value-and-gradient 0.97 s against 0.69 without loops)."""
    n, k = 80, 10
    specs, path = ("abc", "ade", "bdf", "cef"), ((0, 1), (0, 2), (0, 1))
    shapes = ((n, n, k), (n, n, n), (n, n, k), (n, n, n))

    def batched(plan):
        runs = [p.run for p in plan.forward] + [q.run for q in plan.backward]
        return [r for r in runs if isinstance(r, network._Pair) and len(r.mm_shape) > 2]

    assert batched(network.tree_plan(specs, "", shapes, path, (0, 1, 2, 3)))
    assert not batched(network.tree_plan(specs, "", shapes, path, (0, 1, 2, 3), looped=False))


def test_a_slices_tree_leaves_out_its_last_product_where_the_cotangent_is_given(monkeypatch):
    """A vjp of a sliced contraction with a matrix result is handed each slice's cotangent: the
    slice's tree runs its forward without the last product (`network.forward(value=False)`),
    whose result no pullback reads; the gradients are the unsliced ones. With a scalar
    result (the one-pass value and gradient) the last product runs: its value is summed."""
    monkeypatch.setattr(slicing, "threads", 1)
    rng = np.random.default_rng(3)
    eq = "ab,bc,cd->ad"
    ops = [rng.standard_normal((12, 12)) for _ in range(3)]
    limit = 72  # (half of a 12 x 12 intermediate)
    _, info = ea.contract_path(eq, *ops, memory_limit=limit)
    assert info.sliced_indices
    inside, runs = [False], []  # (products run inside a slice's forward, products its plan has)
    pair_call, raw = network._Pair.__call__, EINSUM.tree_forward

    def pair(self, *args, **kwargs):
        if inside[0]:
            runs[-1][0] += 1
        return pair_call(self, *args, **kwargs)

    def tree(plan, arrays, keep=False, pool=None, value=True):
        products = sum(isinstance(p.run, (network._Pair, network._Then)) for p in plan.forward)
        runs.append([0, products, value])
        inside[0] = True
        try:
            return raw(plan, arrays, keep, pool, value)
        finally:
            inside[0] = False

    monkeypatch.setattr(network._Pair, "__call__", pair)
    monkeypatch.setattr(EINSUM, "tree_forward", tree)
    g = rng.standard_normal((12, 12))
    _, pull = ea.vjp(lambda *xs: ea.einsum(eq, *xs, memory_limit=limit), *ops)
    runs.clear()
    got = pull(g)  # (the sweep's slices alone)
    assert len(runs) == 2 and all(not value and done == planned - 1 >= 1 for done, planned, value in runs), (
        runs
    )
    _, pull0 = ea.vjp(lambda *xs: ea.einsum(eq, *xs), *ops)
    for a, b in zip(got, pull0(g)):
        _close(a, b, rtol=1e-12)
    runs.clear()
    ea.grad(lambda *xs: ea.einsum("ab,bc,ca->", *xs, memory_limit=limit), argnums=(0, 1, 2))(*ops)
    assert runs and all(value and done == planned for done, planned, value in runs), runs
