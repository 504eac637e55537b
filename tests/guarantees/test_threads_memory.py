"""Threads, memory and leftover state (docs/guarantees.md, "Threads", "Memory and leftover state").

* Threads computing different derivatives at the same time, many times over,
  get bitwise the single-threaded results (nested transformations included).
* 10,000 calls of ea.grad on a small model hold traced memory flat and leave no
  graph objects (einad.core.Node, Tensor) alive.
* An exception inside a traced function (grad, jvp, nested, batched) leaves nothing
  behind that changes the next call's result.
"""

from __future__ import annotations

import gc
import sys
import threading
import tracemalloc
import weakref

import numpy as np
import pytest

import einad as ea
from einad.core import Node, Tensor

RNG = np.random.default_rng(42)
W = RNG.standard_normal((4, 3))
B = RNG.standard_normal(4)
X = RNG.standard_normal(3)
V = RNG.standard_normal(3)
Z = RNG.standard_normal(3) + 1j * RNG.standard_normal(3)
C = RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3))


def mlp(w, b, x):
    h = ea.tanh(ea.einsum("ij,j->i", w, x) + b)
    return ea.logsumexp(h) + 0.5 * ea.sum(h * h)


def energy(x):
    return ea.sum(ea.sigmoid(ea.einsum("ij,j->i", W, x)) ** 2) + ea.prod(ea.cos(x))


def _imperative():
    w = ea.tensor(W, requires_grad=True)
    x = ea.tensor(X, requires_grad=True)
    y = mlp(w, B, x)
    y.backward()
    y = mlp(w, B, x)  # accumulates: twice the gradient
    y.backward()
    return w.grad, x.grad


JOBS = {
    "grad": lambda: ea.grad(mlp, argnums=(0, 1, 2))(W, B, X),
    "value_and_grad": lambda: ea.value_and_grad(energy)(X),
    "vjp": lambda: ea.vjp(lambda x: ea.softmax(ea.einsum("ij,j->i", W, x)), X)[1](B),
    "jvp": lambda: ea.jvp(energy, (X,), (V,)),
    "hvp fwd-over-rev": lambda: ea.hvp(energy, (X,), (V,), mode="fwd-over-rev"),
    "hvp rev-over-fwd": lambda: ea.hvp(energy, (X,), (V,), mode="rev-over-fwd"),
    "hvp rev-over-rev": lambda: ea.hvp(energy, (X,), (V,), mode="rev-over-rev"),
    "jacfwd": lambda: ea.jacfwd(lambda x: ea.tanh(ea.einsum("ij,j->i", W, x)))(X),
    "jacrev": lambda: ea.jacrev(lambda w: ea.tanh(ea.einsum("ij,j->i", w, X)))(W),
    "hessian": lambda: ea.hessian(energy)(X),
    "grad of grad": lambda: ea.grad(lambda x: ea.sum(ea.grad(energy)(x) ** 2))(X),
    "jacfwd of grad": lambda: ea.jacfwd(ea.grad(energy))(X),
    "complex vjp": lambda: ea.vjp(lambda z: ea.einsum("ij,jk,k->i", C, C, z), Z)[1](Z),
    "imperative": _imperative,
}


def _flat(result):
    """Every array in a (nested) result, as numpy arrays."""
    if isinstance(result, (tuple, list)):
        return [a for r in result for a in _flat(r)]
    return [np.asarray(result)]


def _identical(a, b):
    return len(a) == len(b) and all(
        x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes() for x, y in zip(a, b)
    )


# -- threads ---------------------------------------------------------------------------------------


def test_threads_get_bitwise_the_single_threaded_results():
    expected = {name: _flat(job()) for name, job in JOBS.items()}
    names = list(JOBS)
    n_threads, rounds = 4, 12
    barrier = threading.Barrier(n_threads)
    mismatches, errors = [], []

    def worker(t):
        order = names[t:] + names[:t]  # every thread runs the jobs in a different order
        try:
            barrier.wait()
            for r in range(rounds):
                for name in order if r % 2 else reversed(order):
                    got = _flat(JOBS[name]())
                    if not _identical(got, expected[name]):
                        mismatches.append((t, r, name))
        except Exception as err:  # noqa: BLE001 - reported below with the thread's context
            errors.append((t, repr(err)))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads very often: interleave inside the traces
    try:
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n_threads)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert not mismatches, mismatches[:10]


def test_a_failing_thread_does_not_disturb_another():
    expected = _flat(JOBS["hvp fwd-over-rev"]())
    stop = threading.Event()
    results, errors = [], []

    def failing():
        def f(x):
            ea.tanh(x)
            raise KeyError("boom")

        while not stop.is_set():
            try:
                ea.grad(f)(X)
            except KeyError:
                pass
            try:
                ea.jvp(lambda x: ea.grad(f)(x), (X,), (V,))
            except KeyError:
                pass

    def working():
        try:
            for _ in range(40):
                results.append(_flat(JOBS["hvp fwd-over-rev"]()))
        except Exception as err:  # noqa: BLE001
            errors.append(repr(err))

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        bad = threading.Thread(target=failing)
        good = threading.Thread(target=working)
        bad.start()
        good.start()
        good.join()
        stop.set()
        bad.join()
    finally:
        sys.setswitchinterval(old)
    assert not errors, errors
    assert len(results) == 40 and all(_identical(r, expected) for r in results)


# -- memory ----------------------------------------------------------------------------------------


def _count(kind):
    gc.collect()
    return sum(1 for o in gc.get_objects() if type(o) is kind)


def tiny_model(x):
    return ea.einsum("i,i->", ea.tanh(x), x)  # two ops: tracemalloc slows each call about 6x


def test_ten_thousand_grads_hold_memory_flat():
    g = ea.grad(tiny_model)
    expected = _flat(g(X))
    for _ in range(300):  # warm up every cache (paths, plans)
        g(X)
    nodes, tensors = _count(Node), _count(Tensor)
    tracemalloc.start()
    try:
        for _ in range(200):
            g(X)
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(10_000):
            out = g(X)
        del out
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert after - before < 32 * 1024, f"traced memory grew by {after - before} bytes over 10,000 calls"
    assert _count(Node) == nodes and _count(Tensor) == tensors
    assert _identical(_flat(g(X)), expected)  # and the 10,001st call still gives the same numbers


@pytest.mark.parametrize(
    "transform",
    [
        lambda f: ea.grad(f)(X),
        lambda f: ea.value_and_grad(f)(X),
        lambda f: ea.jvp(f, (X,), (V,)),
        lambda f: ea.hvp(f, (X,), (V,), mode="fwd-over-rev"),
        lambda f: ea.hvp(f, (X,), (V,), mode="rev-over-rev"),
        lambda f: ea.hessian(f)(X),
        lambda f: ea.grad(lambda x: ea.grad(f)(x)[0])(X),
    ],
    ids=["grad", "value_and_grad", "jvp", "hvp fwd-over-rev", "hvp rev-over-rev", "hessian", "grad of grad"],
)
def test_graphs_die_with_the_call_without_the_garbage_collector(transform):
    """No reference cycles: intermediates are freed by reference counting alone, as soon
    as the transformation returns."""
    refs = []

    def f(x):
        h = ea.tanh(ea.einsum("ij,j->i", W, x))
        refs.append(weakref.ref(h))
        if h._node is not None:
            refs.append(weakref.ref(h._node))
        return ea.sum(h * h)

    transform(f)  # warm up
    refs.clear()
    gc.collect()
    nodes = sum(1 for o in gc.get_objects() if type(o) is Node)
    gc.disable()
    try:
        transform(f)
        alive = [r() for r in refs if r() is not None]
        assert refs and not alive, f"{len(alive)} intermediates still alive: {alive[:3]}"
        assert sum(1 for o in gc.get_objects() if type(o) is Node) == nodes
    finally:
        gc.enable()


def test_vjp_graph_lives_as_long_as_its_pullback():
    refs = []

    def f(x):
        h = ea.exp(ea.einsum("ij,j->i", W, x))
        refs.append(weakref.ref(h))
        return h

    _out, pullback = ea.vjp(f, X)
    assert refs[0]() is not None
    first = pullback(B)[0]
    assert _identical(_flat(pullback(B)), [first])  # a pullback can be called again
    del pullback
    gc.collect()
    assert refs[0]() is None


def test_imperative_graph_is_freed_with_its_output():
    refs = []
    w = ea.tensor(W, requires_grad=True)
    y = mlp(w, B, X)
    refs.append(weakref.ref(y._node))
    y.backward()
    del y
    gc.collect()
    assert refs[0]() is None
    assert w.grad is not None and w._node is not None  # the leaf and its gradient stay


# -- exceptions inside traced functions --------------------------------------------------------------


class Boom(Exception):
    pass


def _maybe_failing(fail):
    def f(x):
        h = ea.tanh(ea.einsum("ij,j->i", W, x))
        s = ea.sum(h * h) + ea.logsumexp(h)
        if fail:
            raise Boom("inside the traced function")
        return s

    return f


CALLS = {
    "grad": lambda f: ea.grad(f)(X),
    "vjp": lambda f: ea.vjp(f, X)[1](np.float64(1.0)),
    "jvp": lambda f: ea.jvp(f, (X,), (V,)),
    "hvp fwd-over-rev": lambda f: ea.hvp(f, (X,), (V,), mode="fwd-over-rev"),
    "hvp rev-over-fwd": lambda f: ea.hvp(f, (X,), (V,), mode="rev-over-fwd"),
    "hvp rev-over-rev": lambda f: ea.hvp(f, (X,), (V,), mode="rev-over-rev"),
    "jacfwd": lambda f: ea.jacfwd(ea.grad(f))(X),
    "jacrev": lambda f: ea.jacrev(ea.grad(f))(X),
    "grad of grad": lambda f: ea.grad(lambda x: ea.sum(ea.grad(f)(x) * V))(X),
    "jvp of grad": lambda f: ea.jvp(ea.grad(f), (X,), (V,)),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_an_exception_inside_a_trace_leaves_no_state(name):
    call = CALLS[name]
    expected = _flat(call(_maybe_failing(False)))
    gc.collect()
    nodes = _count(Node)
    for _ in range(3):
        with pytest.raises(Boom):
            call(_maybe_failing(True))
    assert _identical(_flat(call(_maybe_failing(False))), expected)
    # an unrelated derivative is unaffected too, and nothing of the failed traces survives
    assert _identical(_flat(ea.grad(energy)(X)), _flat(JOBS["value_and_grad"]()[1]))
    assert _count(Node) == nodes


def test_an_exception_caught_inside_an_outer_trace():
    """An inner transformation fails and the outer function recovers: the outer
    derivative is as if the failed attempt never happened."""

    def outer(x, try_first):
        if try_first:
            try:
                ea.grad(_maybe_failing(True))(x)
            except Boom:
                pass
        return ea.sum(ea.grad(_maybe_failing(False))(x) ** 2)

    expected = ea.grad(lambda x: outer(x, False))(X)
    got = ea.grad(lambda x: outer(x, True))(X)
    assert _identical([got], [expected])
    hv = ea.hvp(lambda x: outer(x, True), (X,), (V,))
    assert _identical(_flat(hv), _flat(ea.hvp(lambda x: outer(x, False), (X,), (V,))))


def test_an_exception_before_backward_leaves_imperative_grads_alone():
    w = ea.tensor(W, requires_grad=True)
    y = mlp(w, B, X)
    y.backward()
    once = w.grad.copy()
    with pytest.raises(Boom):
        h = ea.tanh(ea.einsum("ij,j->i", w, X))
        raise Boom(h)
    y = mlp(w, B, X)
    y.backward()
    np.testing.assert_array_equal(w.grad, 2 * once)
