"""opt_einsum driving einad: `opt_einsum.contract(..., backend="einad")`, the backend inferred
from einad values, and `opt_einsum.contract_expression` reused with ``backend="einad"`` (its
constants evaluated by einad), under grad, vjp, jvp and jit, real and complex, against the
derivatives written by hand with numpy (`Reference`, itself checked against JAX where installed).

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
    """L(a, d) = Σ_b |Z_b|², Z the contraction: real, for real and complex operands alike."""
    return lambda a, d: ea.sum(ea.abs(contract(a, d)) ** 2)


class Reference:
    """L's derivatives by hand with numpy, in JAX's convention (einad's): Z is holomorphic in a
    and d, so the gradient of L = Σ|Z_b|² is 2·Σ_b conj(Z_b)·∂Z_b/∂x, and the pullback of a
    cotangent u on Z is Σ_b u_b·∂Z_b/∂x, with no conjugate."""

    def __init__(self, ops):
        self.a, self.b, self.c, self.d = ops
        self.z = np.einsum(EQ, *ops)

    def pull_a(self, u):
        return np.einsum("b,jkb,kl,li->ijb", u, self.b, self.c, self.d)

    def pull_d(self, u):
        return np.einsum("b,ijb,jkb,kl->li", u, self.a, self.b, self.c)

    def grads(self):
        u = 2 * np.conj(self.z)
        return self.pull_a(u), self.pull_d(u)

    def tangent(self, ta, td):  # dL = 2 Re Σ conj(Z) dZ
        dz = np.einsum(EQ, ta, self.b, self.c, self.d) + np.einsum(EQ, self.a, self.b, self.c, td)
        return 2 * np.real(np.sum(np.conj(self.z) * dz))


def check_all_modes(f, contract, ops, complex_):
    """grad (both operands), jit(grad), jvp and a non-scalar vjp of `f` against `Reference`."""
    a, _, _, d = ops
    ref = Reference(ops)
    want = ref.grads()
    for got, w in zip(ea.grad(f, argnums=(0, 1))(a, d), want):
        assert_close(got, w)
    assert_close(ea.jit(ea.grad(f, argnums=(0, 1)))(a, d)[1], want[1])
    ta, td = a[::-1].copy(), d[::-1].copy()
    _, t = ea.jvp(f, (a, d), (ta, td))
    assert_close(t, ref.tangent(ta, td))
    out, pull = ea.vjp(lambda a: contract(a, d), a)
    u = np.arange(2.0) + (1j if complex_ else 0)
    assert_close(out, ref.z)
    assert_close(pull(u)[0], ref.pull_a(u))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
@pytest.mark.parametrize("backend", ["einad", "auto"])
def test_contract_under_every_transformation(complex_, backend):
    ops = operands(complex_, seed=1)
    _, b, c, _ = ops
    # "auto" with a numpy array first is numpy's backend: np.tensordot then meets einad's
    # traced Tensors and hands them to einad (numpy's __array_function__ protocol)
    contract = lambda a, d: oe.contract(EQ, a, b, c, d, backend=backend)
    check_all_modes(loss_of(contract), contract, ops, complex_)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_backend_inferred_from_traced_values(complex_):
    ops = operands(complex_, seed=2)
    _, b, c, _ = ops
    contract = lambda a, d: oe.contract(EQ, a, b, c, d)  # a, first, is traced: the backend is einad
    check_all_modes(loss_of(contract), contract, ops, complex_)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_contract_expression_reused_with_einad(complex_):
    ops = operands(complex_, seed=3)
    _, b, c, _ = ops
    expr = oe.contract_expression(EQ, *SHAPES)
    contract = lambda a, d: expr(a, b, c, d, backend="einad")
    for _ in range(2):  # the same expression, called again, under every transformation
        check_all_modes(loss_of(contract), contract, ops, complex_)
    # opt_einsum's constants, evaluated once by einad and kept for every later call
    const = oe.contract_expression(EQ, SHAPES[0], b, c, SHAPES[3], constants=[1, 2])
    contract = lambda a, d: const(a, d, backend="einad")
    check_all_modes(loss_of(contract), contract, ops, complex_)
    kept = const._evaluated_constants["einad"]
    check_all_modes(loss_of(contract), contract, ops, complex_)
    assert const._evaluated_constants["einad"] is kept


def test_reference_matches_jax():
    """The hand-written reference against JAX's derivatives, where JAX is installed."""
    jax = pytest.importorskip("jax", reason="JAX cross-checks the hand-written reference")
    ops = operands(True, seed=4)
    a, b, c, d = ops
    ref = Reference(ops)
    with jax.enable_x64(True):
        import jax.numpy as jnp

        f = lambda a, d: jnp.sum(jnp.abs(jnp.einsum(EQ, a, b, c, d)) ** 2)
        for got, w in zip(ref.grads(), jax.grad(f, argnums=(0, 1))(a, d)):
            assert_close(got, np.asarray(w))
        assert_close(ref.tangent(a, d), np.asarray(jax.jvp(f, (a, d), (a, d))[1]))
        u = np.array([1.0 + 2j, -0.5j])
        pull = jax.vjp(lambda a: jnp.einsum(EQ, a, b, c, d), a)[1]
        assert_close(ref.pull_a(u), np.asarray(pull(jnp.asarray(u))[0]))
