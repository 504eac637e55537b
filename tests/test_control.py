"""einad.control: JAX's fori_loop, scan, cond, switch and while_loop as Python control flow over
einad operations. Values against plain Python loops over numpy; derivatives against closed
forms and central differences; under jit (unrolled, the staged predicate selecting) and vmap
(a predicate per example selecting), as JAX's cond does under vmap."""

import numpy as np
import pytest

import einad as ea
from einad.errors import TracerError
from tests.support.numerics import assert_close

X = np.array([0.3, -1.2, 0.8])


def test_fori_loop_is_the_loop_and_differentiates_through_every_step():
    f = lambda x: ea.fori_loop(0, 4, lambda i, v: v * x + i, ea.sum(x) * 0 + 1.0)
    want = 1.0
    for i in range(4):
        want = want * X + i
    assert_close(f(X), want)
    assert_close(ea.jit(f)(X), want)  # unrolled into the program
    ea.gradcheck(lambda x: ea.sum(f(x) ** 2), X)
    assert_close(ea.vmap(f)(np.stack([X, 2 * X]))[1], ea.fori_loop(0, 4, lambda i, v: v * 2 * X + i, 1.0))
    # bounds known under grad; a bound staged by jit is a TracerError naming static_argnums
    assert_close(
        ea.grad(lambda n, x: ea.fori_loop(0, n, lambda i, v: v * x, 1.0), argnums=1)(3, 1.5), 3 * 1.5**2
    )
    with pytest.raises(TracerError, match="static_argnums"):
        ea.jit(lambda n, x: ea.fori_loop(0, n, lambda i, v: v * x, 1.0))(ea.tensor(3), 1.5)
    assert_close(
        ea.jit(lambda n, x: ea.fori_loop(0, n, lambda i, v: v * x, 1.0), static_argnums=0)(3, 1.5), 3.375
    )


def test_scan_carries_and_stacks_as_jax():
    xs = {"a": np.arange(1.0, 5.0), "b": np.arange(8.0).reshape(4, 2)}

    def step(c, x):
        c = c * 0.5 + x["a"]
        return c, (c, x["b"] * c)

    carry, (cs, bs) = ea.scan(step, 0.0, xs)
    c, want_cs = 0.0, []
    for a in xs["a"]:
        c = c * 0.5 + a
        want_cs.append(c)
    assert_close(carry, c)
    assert_close(cs, want_cs)
    assert_close(bs, xs["b"] * np.array(want_cs)[:, None])
    # reverse: from the last slice, the ys in the slices' order
    carry_r, ys_r = ea.scan(lambda c, x: (c * 2 + x, c), 0.0, np.arange(3.0), reverse=True)
    assert_close(carry_r, ((0 * 2 + 2) * 2 + 1) * 2 + 0)
    assert_close(ys_r, [5.0, 2.0, 0.0])  # the carry seen at slices 0, 1, 2 (visited 2, 1, 0)
    # no xs: length steps; a None y gives None
    carry_n, ys_n = ea.scan(lambda c, _: (c + 1.0, None), 0.0, length=5)
    assert_close(carry_n, 5.0)
    assert ys_n is None
    # a recurrence differentiated in every mode, staged and mapped
    w = np.array([[0.5, -0.2], [0.1, 0.9]])
    seq = np.random.default_rng(0).standard_normal((6, 2))

    def rnn(w, seq):
        h, hs = ea.scan(lambda h, x: (ea.tanh(w @ h + x),) * 2, np.zeros(2), seq)
        return ea.sum(hs**2) + ea.sum(h)

    ea.gradcheck(rnn, w, seq)
    assert_close(ea.jit(ea.grad(rnn))(w, seq), ea.grad(rnn)(w, seq))
    assert_close(ea.vmap(lambda s: rnn(w, s))(np.stack([seq, -seq])), [rnn(w, seq), rnn(w, -seq)])
    with pytest.raises(ValueError, match="leading sizes"):
        ea.scan(lambda c, x: (c, x), 0.0, (np.ones(3), np.ones(4)))
    with pytest.raises(ValueError, match="no xs and no length"):
        ea.scan(lambda c, x: (c, x), 0.0)


@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt")  # (the branch not taken, staged)
def test_cond_runs_one_branch_when_the_predicate_is_known_and_selects_when_it_is_not():
    ran = []

    def positive(x):
        ran.append("true")
        return ea.sqrt(x)

    def negative(x):
        ran.append("false")
        return -x

    f = lambda x: ea.sum(ea.cond(ea.sum(x) > 0, positive, negative, x))
    assert_close(f(np.abs(X)), np.sum(np.sqrt(np.abs(X))))
    assert ran == ["true"]  # known: the other branch never runs
    assert_close(ea.grad(f)(np.abs(X)), 0.5 / np.sqrt(np.abs(X)))
    ran.clear()
    staged = ea.jit(f)
    assert_close(staged(np.abs(X)), np.sum(np.sqrt(np.abs(X))))
    assert_close(staged(-np.abs(X)), np.sum(np.abs(X)))  # the staged predicate chooses per call
    assert ran == ["true", "false"]  # both branches staged once
    # under vmap a predicate per example selects; the derivative is the chosen branch's
    xs = np.stack([np.abs(X), -np.abs(X)])
    assert_close(ea.vmap(f)(xs), [np.sum(np.sqrt(np.abs(X))), np.sum(np.abs(X))])
    assert_close(ea.vmap(ea.grad(f))(xs)[1], -np.ones(3))
    with pytest.raises(TypeError, match="different structures"):
        ea.jit(lambda x: ea.cond(x[0] > 0, lambda v: (v, v), lambda v: v, x))(X)


def test_switch_clamps_the_index_and_selects_when_it_is_traced():
    branches = [lambda x: x * 0.0, lambda x: x * 2.0, lambda x: x**2]
    for k, want in [(-3, X * 0), (0, X * 0), (1, 2 * X), (2, X**2), (7, X**2)]:
        assert_close(ea.switch(k, branches, X), want)
        assert_close(ea.jit(lambda k, x: ea.switch(k, branches, x))(np.int64(k), X), want)
    ks = np.array([0, 1, 2, 5])
    assert_close(ea.vmap(lambda k: ea.switch(k, branches, X))(ks), [X * 0, 2 * X, X**2, X**2])
    assert_close(ea.grad(lambda x: ea.sum(ea.switch(2, branches, x)))(X), 2 * X)
    # the branch not taken passes no nan slope back (its operands reach it without a derivative)
    with np.errstate(invalid="ignore"):
        gs = ea.vmap(
            lambda k: ea.grad(lambda x: ea.sum(ea.switch(k, [lambda v: -v, ea.sqrt], x)))(-np.abs(X))
        )(np.array([0, 0]))
    assert_close(gs, -np.ones((2, 3)))
    with pytest.raises(ValueError, match="at least one branch"):
        ea.switch(0, [], X)


def test_while_loop_is_the_loop_and_reverse_mode_goes_through_it():
    # Newton's iteration for sqrt(a): a known condition each step (eagerly and under grad)
    def root(a):
        return ea.while_loop(lambda v: ea.abs(v * v - a) > 1e-12, lambda v: 0.5 * (v + a / v), a)

    assert_close(root(2.0), np.sqrt(2.0))
    # JAX refuses reverse mode through while_loop; unrolled, einad differentiates the iterations
    assert_close(ea.grad(root)(2.0), 0.5 / np.sqrt(2.0), rtol=1e-6)
    count = ea.while_loop(lambda c: c[0] < 5, lambda c: (c[0] + 1, c[1] * 2.0), (0, 1.0))
    assert count[0] == 5 and count[1] == 32.0
    with pytest.raises(TracerError, match="use fori_loop"):
        ea.jit(root)(2.0)
