"""The Heisenberg chain's ground state by L-BFGS-B on an MPS (issue 23): quimb builds the MPS and
the MPO and writes the equations, einad contracts and differentiates them, `ravel_pytree` hands
the parameters to scipy. The energy reaches DMRG's (quimb's DMRG2) to 1e-6 relative, with real
and with complex parameters; the energy and its gradient agree with quimb's own contraction on
torch tensors (an independent reference), and quimb's own contraction runs on einad's traced values.
"""

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close

qtn = pytest.importorskip("quimb.tensor", reason="quimb builds the MPS, the Hamiltonian and DMRG")
ar = pytest.importorskip("autoray", reason="quimb's dependency, which it reaches arrays through")
optimize = pytest.importorskip("scipy.optimize", reason="scipy's L-BFGS-B is the optimizer")

L, D = 16, 8


def energy_from_equations(psi, ham):
    """``E(arrays) = Re<psi|H|psi> / Re<psi|psi>``, with psi's arrays replaced by `arrays`: the
    two networks' equations written by quimb, planned once by einad (H's arrays as constants)."""
    bra, h, ket = qtn.tensor_network_align(psi.H, ham, psi)
    sandwich = bra & h & ket  # its tensors in order: the bra's L, H's L, the ket's L
    bra2, ket2 = qtn.tensor_network_align(psi.H, psi)
    overlap = bra2 & ket2
    n = psi.L
    for i in range(n):  # the order the equations assume
        assert sandwich.arrays[2 * n + i] is psi[i].data
        np.testing.assert_array_equal(sandwich.arrays[i], np.conj(psi[i].data))
    held = range(n, 2 * n)
    shapes = [a if k in held else a.shape for k, a in enumerate(sandwich.arrays)]
    numerator = ea.contract_expression(sandwich.get_equation(), *shapes, constants=list(held))
    norm = ea.contract_expression(overlap.get_equation(), *[a.shape for a in overlap.arrays])

    def energy(arrays):
        conj = [ea.conj(a) for a in arrays]
        return ea.real(numerator(*conj, *arrays)) / ea.real(norm(*conj, *arrays))

    return energy


def energy_by_quimb(psi, ham):
    """The same energy contracted by quimb itself (through autoray, on whatever arrays it gets)."""

    def energy(arrays):
        p = psi.copy()
        for t, a in zip(p, arrays):
            t.modify(data=a)
        bra, h, ket = qtn.tensor_network_align(p.H, ham, p)
        bra2, ket2 = qtn.tensor_network_align(p.H, p)
        num = (bra & h & ket).contract(optimize="greedy")
        den = (bra2 & ket2).contract(optimize="greedy")
        return ar.do("real", num) / ar.do("real", den)

    return energy


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_energy_and_gradient_agree_with_quimb_on_torch(dtype):
    torch = pytest.importorskip("torch", reason="quimb's contraction on torch tensors is the reference")
    psi = qtn.MPS_rand_state(8, 4, seed=11, dtype=dtype)  # a short chain: torch runs quimb op by op
    ham = qtn.MPO_ham_heis(8)
    arrays = list(psi.arrays)
    mine = energy_from_equations(psi, ham)
    value, grads = ea.value_and_grad(mine)(arrays)
    expected = qtn.expec_TN_1D(psi.H, ham, psi) / (psi.H @ psi)
    assert_close(value, np.real(expected), rtol=1e-12)

    ham_torch = ham.copy()
    ham_torch.apply_to_arrays(lambda a: torch.tensor(a.astype(dtype)))
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    energy_by_quimb(psi, ham_torch)(leaves).backward()
    for g, leaf in zip(grads, leaves):
        assert g.dtype == np.dtype(dtype)
        # torch's gradient of a real function of complex values is the conjugate of JAX's
        # (einad's): d/dRe z + i d/dIm z
        assert_close(g, np.conj(leaf.grad.numpy()), rtol=1e-7, atol=1e-10)
    # quimb's own contraction of einad's traced values gives the same, jitted too
    for g, r in zip(ea.jit(ea.grad(energy_by_quimb(psi, ham)))(arrays), grads):
        assert_close(g, r, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_quimbs_contraction_under_jit_is_differentiated_as_two_trees(dtype):
    """quimb contracts each network one pair of tensors at a time; under `ea.jit(ea.grad(...))`
    einad merges the pairs back into one einsum per network (along quimb's path) before it
    differentiates, so the program's gradient is two tree sweeps (`einsum_vg`, the energy's
    network and the norm's), not a pullback per pair: what took benchmark m2 from 13.0 to 10.0
    ms. Left: the small products both networks read (a pair of MPS tensors, shared) and their
    pullbacks, and the scalings by the loss's cotangents. Fails without the staging of the
    forward in `_reverse`, without einsum's replay, or with merges limited to a-zA-Z (a network
    of 24 tensors has more letters). The values are checked against torch above."""
    psi = qtn.MPS_rand_state(8, 4, seed=11, dtype=dtype)
    ham = qtn.MPO_ham_heis(8)
    arrays = list(psi.arrays)
    f = energy_by_quimb(psi, ham)
    program = ea.jit(ea.grad(f)).lower(arrays)
    prims = [e.prim.name for e in program.equations]
    assert prims.count("einsum_vg") == 2 and "einsum_vjp" not in prims
    einsums = [e for e in program.equations if e.prim.name == "einsum"]
    assert all(len(e.inputs) <= 2 for e in einsums)
    as_written = ea.make_graph(ea.grad(f))(arrays).einsums  # pairwise steps and their pullbacks
    assert 4 * len(einsums) < len(as_written)
    assert_close(ea.jit(ea.grad(f))(arrays)[3], ea.grad(f)(arrays)[3], rtol=1e-10)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_heisenberg_ground_state_by_lbfgs_reaches_dmrg(dtype):
    ham = qtn.MPO_ham_heis(L)
    dmrg = qtn.DMRG2(ham, bond_dims=[D], cutoffs=1e-14)
    dmrg.solve(tol=1e-12, verbosity=0)

    psi = qtn.MPS_rand_state(L, D, seed=7, dtype=dtype)
    x0, unravel = ea.ravel_pytree(list(psi.arrays))
    parts = 2 if dtype == "complex128" else 1  # a complex array's real and imaginary parts
    assert x0.dtype == np.float64 and x0.size == parts * sum(a.size for a in psi.arrays)
    energy = energy_from_equations(psi, ham)
    value_and_grad = ea.jit(ea.value_and_grad(lambda v: energy(unravel(v))))

    def fun(v):
        value, grad = value_and_grad(v)
        return float(value), np.asarray(grad, dtype=np.float64)

    res = optimize.minimize(
        fun, x0.numpy(), jac=True, method="L-BFGS-B", options={"maxcor": 30, "ftol": 1e-10, "gtol": 1e-7}
    )
    assert abs(res.fun - dmrg.energy) <= 1e-6 * abs(dmrg.energy), (res.fun, dmrg.energy, res.message)
    best = qtn.MatrixProductState([a.numpy() for a in unravel(res.x)])
    assert_close(qtn.expec_TN_1D(best.H, ham, best).real / (best.H @ best).real, res.fun, rtol=1e-12)
