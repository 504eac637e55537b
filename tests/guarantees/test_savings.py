"""Savings: each speed or memory saving has a test that fails when the saving is removed.

A saving changes no result, so the test observes what it saves instead: the
size of a traced program (`ea.make_graph`), or the peak of the memory numpy
allocates during one call (`tracemalloc`), never a timing. Peaks are asserted
in units of the arrays involved, with the bound well away from both the value
measured with the saving and the one measured without it.

Each test's docstring names the mutation it kills; every one was checked by
making that edit in the source, seeing the test fail, and restoring it. The
tests go through the public API only (no rule attributes of primitives), so
they survive a move of the derivative rules into tables.
"""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import peak_bytes

RNG = np.random.default_rng(9)


# -- the einsum batching rule ---------------------------------------------------------------


def _mlp(a, b):
    """``x -> A tanh(B x)``: each Jacobian pass meets a traced value at one einsum."""
    return lambda x: ea.einsum("ij,j->i", a, ea.tanh(ea.einsum("ij,j->i", b, x)))


@pytest.mark.parametrize("jac", [ea.jacrev, ea.jacfwd], ids=["jacrev", "jacfwd"])
def test_a_jacobian_program_does_not_grow_with_the_number_of_rows(jac):
    """The einsum batching rule: a stack of n cotangents (jacrev) or tangents (jacfwd)
    goes through an einsum as ONE einsum with an extra index, so the Jacobian's
    program is the same list of operations whatever n is.

    Kills: deleting ``einsum=_einsum`` from `batching._build_rules` (vmap then falls
    back to `_loop`: a getitem, an einsum and a reshape per row, and a concatenate).
    Measured (n = 2 / 7): with the rule, jacrev 7 / 7 and jacfwd 9 / 9 equations;
    without it, jacrev 13 / 28 and jacfwd 15 / 30.
    """
    ops = {}
    for n in (2, 7):
        a, b = RNG.standard_normal((n, 3)), RNG.standard_normal((3, n))
        x = RNG.standard_normal(n)
        f = _mlp(a, b)
        ops[n] = [e.op for e in ea.make_graph(jac(f))(x).equations]
        h = np.tanh(b @ x)
        np.testing.assert_allclose(jac(f)(x), a @ ((1 - h * h)[:, None] * b), rtol=1e-12)
    assert ops[2] == ops[7], f"the program grows with n: {len(ops[2])} ops for n=2, {len(ops[7])} for n=7"
    assert "einsum" in ops[7]


# -- keep: a node holds only the values its VJP reads ----------------------------------------


def test_a_linear_chain_frees_its_intermediates_during_the_forward_pass():
    """`keep` pruning: the VJP of ``x + 1.0``, ``-x`` and a reshape reads no value, so
    the reverse graph holds none of the chain's intermediates and each is freed as
    soon as the next step exists: the peak is about two arrays, not one per step.

    Kills: `ReverseTrace.process` storing every operand and result in its `Node`
    (removing the replacement of unread values by `Meta`).
    Measured (1 array = 2 MB, 10 steps): 2.01 arrays with pruning, 11.0 without.
    """
    x = RNG.standard_normal(1 << 18)

    def chain(x):
        y = x
        for k in range(10):
            y = y + 1.0 if k % 2 == 0 else -y
            y = ea.reshape(y, (512, -1) if y.ndim == 1 else (-1,))
        return ea.sum(y)

    peak = peak_bytes(ea.value_and_grad(chain), x) / x.nbytes
    assert 1 <= peak < 5, f"peak {peak:.2f} arrays for a 10-step chain"


# -- the ones-cotangent shortcut -------------------------------------------------------------


def test_a_ones_cotangent_multiplies_nothing():
    """The ones-cotangent shortcut (`elementwise._scale`): the cotangent reaching
    ``exp`` in ``sum(exp(broadcast_to(x, big)))`` is a broadcast of ones, so the
    VJP passes exp's saved result on as a read-only view instead of allocating
    ``ones * result``. That view is then summed down to x's small shape, so the
    big array exists once (the forward result), not twice. (In plain ``sum(exp(x))``
    nothing would show: a top-level gradient that is a read-only view is copied out,
    which costs the array the shortcut saved.)

    Observed through public behaviour (the peak of value_and_grad).
    Kills: removing the `_is_ones` branch of `_scale` (every cotangent multiplied).
    Measured (1 unit = the 64 x 4096 result, 2 MB): 1.03 units with the shortcut, 2.00 without.
    """
    k, m = 64, 4096
    x = RNG.standard_normal(m)
    f = lambda x: ea.sum(ea.exp(ea.broadcast_to(x, (k, m))))
    g = ea.grad(f)(x)
    np.testing.assert_allclose(g, k * np.exp(x), rtol=1e-12)
    unit = k * m * x.itemsize
    peak = peak_bytes(ea.value_and_grad(f), x) / unit
    assert 0.9 < peak < 1.5, f"peak {peak:.2f} times the broadcast result"


# -- consume: the reverse pass frees each node's values once its rule ran --------------------


def test_the_reverse_pass_frees_saved_values_as_it_goes():
    """`consume`: value_and_grad's reverse pass drops each node's saved values once
    its rule has run. In ``sum_k sum(sin(2 x_k))`` over K inputs, the forward pass
    saves K arrays (each sin's operand) and the reverse pass makes K gradients;
    with consume each saved array is freed as its gradient appears (peak about
    K + 1 arrays), without it all K saved arrays live beside all K gradients (2K + 1).
    (A single chain of ten sins would hardly show it: its forward pass already holds
    every saved value at the end, so without consume its peak is one array higher,
    12 instead of 11.)

    Kills: `backward_pass(..., consume=True)` not clearing ``node.vals`` and
    ``node.ans`` (or value_and_grad calling it without ``consume=True``).
    Measured (K = 10, 1 array = 1 MB): 11.0 arrays with consume, 21.0 without.
    """
    n_inputs = 10
    xs = [RNG.standard_normal(1 << 17) for _ in range(n_inputs)]

    def branches(xs):
        total = 0.0
        for x in xs:
            total = total + ea.sum(ea.sin(2.0 * x))
        return total

    grads = ea.grad(branches)(xs)
    for x, g in zip(xs, grads):
        np.testing.assert_allclose(g, 2.0 * np.cos(2.0 * x), rtol=1e-12)
    peak = peak_bytes(ea.value_and_grad(branches), xs) / xs[0].nbytes
    assert n_inputs <= peak < 1.5 * n_inputs, f"peak {peak:.2f} arrays for {n_inputs} branches"
