"""opt_einsum driving einad: `opt_einsum.contract(..., backend="einad")`, the backend inferred
from einad values, and `opt_einsum.contract_expression` reused with ``backend="einad"`` (its
constants evaluated by einad), under grad, vjp, jvp and jit, real and complex, against JAX.

opt_einsum imports the module named by the backend and calls three of its functions:
``einsum(subscripts, *operands)``, ``tensordot(x, y, axes=...)`` and ``transpose(x, axes)``
(opt_einsum/contract.py: _einsum, _tensordot, _transpose; the backend of a call is
``type(operands[0]).__module__``'s top package, so "einad" for a Tensor).
"""

import numpy as np
import opt_einsum as oe
import pytest

import einad as ea
from tests.support.numerics import assert_close

pytestmark = pytest.mark.usefixtures("jit_mode")  # each test eagerly and with every transformation jitted

# a batch index (b) makes opt_einsum call einsum; the rest goes through tensordot + transpose
EQ = "ijb,jkb,kl,li->b"
SHAPES = [(3, 4, 2), (4, 5, 2), (5, 6), (6, 3)]


def operands(complex_, seed=0):
    r = np.random.default_rng(seed)
    ops = [r.standard_normal(s) for s in SHAPES]
    return [x + 1j * r.standard_normal(x.shape) for x in ops] if complex_ else ops


@pytest.fixture
def jnp():
    jax = pytest.importorskip("jax", reason="JAX is the gradients' reference")
    with jax.enable_x64(True):
        import jax.numpy as jnp

        yield jnp


def test_opt_einsum_finds_einads_functions():
    for name in ("einsum", "tensordot", "transpose"):
        assert oe.backends.get_func(name, "einad") is getattr(ea, name)
    from opt_einsum.contract import parse_backend

    assert parse_backend([ea.tensor(np.ones(2))], "auto") == "einad"


def test_the_steps_opt_einsum_makes_call_einsum_tensordot_and_transpose():
    _, info = oe.contract_path(EQ, *operands(False), optimize="greedy")
    kinds = {step[4] for step in info.contraction_list}
    assert False in kinds and any(k for k in kinds)  # an einsum step and BLAS (tensordot) steps


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_contract_with_einad_backend_values(complex_):
    ops = operands(complex_)
    out = oe.contract(EQ, *ops, backend="einad")
    assert type(out) is ea.Tensor
    assert_close(out.numpy(), np.einsum(EQ, *ops))
    inferred = oe.contract(EQ, *[ea.tensor(x) for x in ops])  # backend "auto": einad
    assert type(inferred) is ea.Tensor
    assert_close(inferred.numpy(), np.einsum(EQ, *ops))


def loss_of(contract):
    """A real loss of the contraction, for real and complex operands alike."""
    return lambda a, d: ea.sum(ea.abs(contract(a, d)) ** 2)


def jax_loss(jnp, ops):
    return lambda a, d: jnp.sum(jnp.abs(jnp.einsum(EQ, a, ops[1], ops[2], d)) ** 2)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("backend", ["einad", "auto"])
def test_contract_under_every_transformation_as_jax(jnp, complex_, backend):
    import jax

    ops = operands(complex_, seed=1)
    a, b, c, d = ops
    # "auto" with a numpy array first is numpy's backend: np.tensordot then meets einad's
    # traced Tensors and hands them to einad (numpy's __array_function__ protocol)
    contract = lambda a, d: oe.contract(EQ, a, b, c, d, backend=backend)
    f, f_ref = loss_of(contract), jax_loss(jnp, ops)
    want = jax.grad(f_ref, argnums=(0, 1))(a, d)
    got = ea.grad(f, argnums=(0, 1))(a, d)
    for g, w in zip(got, want):
        assert_close(g, np.asarray(w))
    assert_close(ea.jit(ea.grad(f, argnums=(0, 1)))(a, d)[1], np.asarray(want[1]))
    ta, td = a[::-1].copy(), d[::-1].copy()
    _, t = ea.jvp(f, (a, d), (ta, td))
    assert_close(t, np.asarray(jax.jvp(f_ref, (a, d), (ta, td))[1]))
    # a non-scalar output: vjp with a cotangent, against JAX's
    out, pull = ea.vjp(lambda a: oe.contract(EQ, a, b, c, d, backend=backend), a)
    u = np.arange(2.0) + (1j if complex_ else 0)
    ref_out, ref_pull = jax.vjp(lambda a: jnp.einsum(EQ, a, b, c, d), a)
    assert_close(out, np.asarray(ref_out))
    assert_close(pull(u)[0], np.asarray(ref_pull(jnp.asarray(u))[0]))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_backend_inferred_from_traced_values(jnp, complex_):
    import jax

    ops = operands(complex_, seed=2)
    a, b, c, d = ops
    f = loss_of(lambda a, d: oe.contract(EQ, a, b, c, d))  # a is traced: the backend is einad
    assert_close(ea.grad(f)(a, d), np.asarray(jax.grad(jax_loss(jnp, ops))(a, d)))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_contract_expression_reused_with_einad(jnp, complex_):
    import jax

    ops = operands(complex_, seed=3)
    a, b, c, d = ops
    f_ref = jax_loss(jnp, ops)
    expr = oe.contract_expression(EQ, *SHAPES)
    f = loss_of(lambda a, d: expr(a, b, c, d, backend="einad"))
    want = jax.grad(f_ref, argnums=(0, 1))(a, d)
    for _ in range(2):  # the same expression, called again, under other transformations
        got = ea.grad(f, argnums=(0, 1))(a, d)
        assert_close(got[0], np.asarray(want[0]))
        assert_close(ea.jit(ea.grad(f, argnums=1))(a, d), np.asarray(want[1]))
    # opt_einsum's constants, evaluated once by einad and kept for every later call
    const = oe.contract_expression(EQ, SHAPES[0], b, c, SHAPES[3], constants=[1, 2])
    g = loss_of(lambda a, d: const(a, d, backend="einad"))
    assert_close(ea.grad(g, argnums=(0, 1))(a, d)[1], np.asarray(want[1]))
    kept = const._evaluated_constants["einad"]
    assert_close(ea.value_and_grad(g)(a, d)[1], np.asarray(want[0]))
    assert const._evaluated_constants["einad"] is kept
    _, t = ea.jvp(g, (a, d), (a, d))
    assert_close(t, np.asarray(jax.jvp(f_ref, (a, d), (a, d))[1]))
