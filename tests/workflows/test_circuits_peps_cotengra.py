"""quimb and cotengra driving einad end to end, as a tensor-network user would (issue 23):
a parametrized quimb circuit (its default simplifications on) differentiated and optimized,
MPS canonization and compression inside `ea.grad`, a PEPS norm and sliced cotengra
contractions under ``ea.jit(ea.grad(...))``. References: JAX (in a subprocess,
`tests/support/jax_reference.py`) on the same quimb code or the same network, quimb on torch
(torch.autograd), and central differences (`ea.gradcheck`).
"""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
from tests.support.jax_reference import jax_reference

qu = pytest.importorskip("quimb", reason="the workflows build networks with quimb (pip install einad[tn])")
qtn = pytest.importorskip("quimb.tensor", reason="the workflows build networks with quimb.tensor")
ctg = pytest.importorskip("cotengra", reason="the sliced contractions are cotengra's (pip install einad[tn])")


def _einad(x):
    """Numpy leaves as einad Tensors (gradcheck's central differences then run einad's forward,
    not quimb's numpy path, whose numba functions take seconds to compile)."""
    return ea.tree_map(lambda a: a if isinstance(a, ea.Tensor) else ea.tensor(a), x)


def _close(ours, theirs, rtol=1e-9, atol=1e-11):
    ours, theirs = ea.tree_flatten(ours)[0], ea.tree_flatten(theirs)[0]
    assert len(ours) == len(theirs)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(o), np.asarray(t), rtol=rtol, atol=atol)


# -- a parametrized circuit ---------------------------------------------------------------------

N_QUBITS, DEPTH = 4, 2
RNG = np.random.default_rng(2023)
PARAMS = RNG.uniform(0.2, 2 * np.pi - 0.2, (DEPTH, N_QUBITS, 3))  # away from angles where gates simplify
ZZ = qu.pauli("Z") & qu.pauli("Z")


def circuit(params):
    """Layers of U3 on every qubit and RZZ on neighbours, every gate parametrized: the gate
    arrays are computed from `params` by quimb's gate functions (autoray's `complex`, `cos`,
    `exp`, `stack`, ...), in whatever library `params` belongs to."""
    depth, n = params.shape[:2]
    circ = qtn.Circuit(n)
    for layer in range(depth):
        for q in range(n):
            circ.apply_gate("U3", *params[layer, q], q, parametrize=True)
        for q in range(n - 1):
            circ.apply_gate("RZZ", params[layer, q, 0] * params[layer, q + 1, 1], q, q + 1, parametrize=True)
    circ.apply_gate("RY", params[0, 0, 2], 0, parametrize=True)
    return circ


def energy(params, lib):
    """<ZZ> on qubits (1, 2), through quimb's local_expectation and its default full simplify."""
    return lib.real(circuit(params).local_expectation(ZZ, (1, 2)))


def amplitude(params, lib):
    """|<0101|ψ>|², an amplitude through quimb's full simplify."""
    return lib.abs(circuit(params).amplitude("0101")) ** 2


def _jax_statevector(params, jnp):
    """The reference: the circuit's state by dense statevector simulation in JAX, each gate the
    matrix quimb's gate function makes from JAX parameters (so the conventions are quimb's and
    the contraction, without any simplification, is independent)."""
    circ = circuit(params)
    n = circ.N
    psi = jnp.zeros((2,) * n, dtype=complex).at[(0,) * n].set(1.0)
    letters, outs = "abcdefgh"[:n], "ABCD"
    for gate in circ.gates:
        qubits = gate.qubits
        matrix = gate.array
        matrix = jnp.reshape(getattr(matrix, "data", matrix), (2,) * (2 * len(qubits)))  # a PArray's array
        ins = "".join(letters[q] for q in qubits)
        res = "".join(outs[qubits.index(i)] if i in qubits else letters[i] for i in range(n))
        psi = jnp.einsum(f"{outs[: len(qubits)]}{ins},{letters}->{res}", matrix, psi)
    return psi


def _jax_quantities(params, jnp):
    psi = _jax_statevector(params, jnp)
    zz = jnp.asarray(ZZ.reshape(2, 2, 2, 2))
    return jnp.stack(
        [jnp.real(jnp.einsum("abcd,bcxy,axyd->", jnp.conj(psi), zz, psi)), jnp.abs(psi[0, 1, 0, 1]) ** 2]
    )


def jax_references(jax):
    """What the tests compare with (run by `jax_reference` in a subprocess, one compilation):
    the circuit's energy and amplitude and their gradients, and the PEPS log-norm's gradient."""
    jnp = jax.numpy

    def all_of_them(params, peps_arrays):
        quantities = lambda p: _jax_quantities(p, jnp)
        peps_grad = jax.grad(lambda a: peps_log_norm(a, jnp))(peps_arrays)
        return quantities(params), jax.jacrev(quantities)(params), *peps_grad

    return jax.jit(all_of_them)(jnp.asarray(PARAMS), tuple(jnp.asarray(a) for a in PEPS_ARRAYS))


@pytest.fixture(scope="module")
def jax_refs():
    return jax_reference("tests.workflows.test_circuits_peps_cotengra", "jax_references")


def test_circuit_gradients_match_jax(jax_refs):
    ours = [ea.value_and_grad(lambda p, f=f: f(p, ea))(PARAMS) for f in (energy, amplitude)]
    values, grads = jax_refs[:2]
    for k, (value, grad) in enumerate(ours):
        _close(value, values[k])
        _close(grad, grads[k])
        assert np.abs(grad).max() > 1e-3  # a gradient that says something


def test_circuit_gradient_against_central_differences_and_forward_mode():
    assert ea.gradcheck(lambda p: energy(_einad(p), ea), PARAMS, directions=1)
    direction = RNG.standard_normal(PARAMS.shape)
    _, tangent = ea.jvp(lambda p: energy(p, ea), (PARAMS,), (direction,))
    grad = ea.grad(lambda p: energy(p, ea))(PARAMS)
    np.testing.assert_allclose(tangent, np.sum(grad * direction), rtol=1e-10)


def test_circuit_optimization_converges():
    """Minimise <ZZ> (its minimum is -1) on a 3-qubit layer with scipy's L-BFGS-B fed by
    ea.value_and_grad."""
    minimize = pytest.importorskip("scipy.optimize", reason="the optimizer is scipy's").minimize
    start = PARAMS[:1, :3]
    value_and_grad = ea.value_and_grad(lambda p: energy(ea.reshape(p, start.shape), ea))

    def fun(x):
        value, grad = value_and_grad(x)
        return float(value), grad

    assert fun(start.ravel())[0] > -0.5
    result = minimize(fun, start.ravel(), jac=True, method="L-BFGS-B")
    assert result.fun < -1 + 1e-9


# -- MPS canonize and compress inside grad --------------------------------------------------------

L_SITES, BOND = 6, 4


def _mps_arrays(dtype):
    mps = qtn.MPS_rand_state(L_SITES, BOND, seed=3, dtype=dtype)
    return tuple(t.data for t in mps)


def compressed_overlap(arrays, lib):
    """Canonize around site 2, compress to bond 3 (quimb's SVD truncation), then the overlap of
    the compressed state with the original: both steps' decompositions are differentiated."""
    psi = qtn.MatrixProductState(list(arrays), shape="lrp")
    phi = psi.copy()
    phi.canonize(2)
    phi.compress(max_bond=3, cutoff=0.0)
    return lib.abs(phi.H @ psi) ** 2 / lib.real(phi.H @ phi)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_mps_canonize_and_compress_inside_grad(dtype):
    """Against quimb on torch (torch.autograd), and central differences (quimb on numpy)."""
    torch = pytest.importorskip("torch", reason="the reference gradient is torch.autograd's")
    arrays = _mps_arrays(dtype)
    value, grad = ea.value_and_grad(lambda a: compressed_overlap(a, ea))(arrays)
    assert 0.5 < value < 1 - 1e-6  # a real truncation happened
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    reference = compressed_overlap(leaves, torch)
    reference.backward()
    _close(value, reference.detach())
    # torch's gradient of a real function of complex values is the conjugate of JAX's (einad's)
    _close(grad, [np.conj(x.grad.numpy()) for x in leaves], rtol=1e-8, atol=1e-10)
    assert ea.gradcheck(lambda a: compressed_overlap(_einad(a), ea), arrays, directions=1)


def evolved_magnetization(theta):
    """A Trotter step of the Heisenberg chain on a product state: the two-site gate
    exp(-i θ h) made from quimb's dense operator `h` (a qarray, numpy's subclass) and a traced
    angle, applied bond by bond with quimb's gate splitting; then <Z> on site 2."""
    psi = qtn.MPS_computational_state("010110")
    gate = ea.linalg.expm(-1j * theta * qu.ham_heis(2))
    for i in [*range(0, L_SITES - 1, 2), *range(1, L_SITES - 1, 2)]:
        psi.gate_(gate, (i, i + 1), contract="swap+split")
    return ea.real(psi.H @ psi.gate(qu.pauli("Z"), 2))


def test_gates_from_quimbs_dense_operators_are_differentiated():
    theta = np.array(0.37)
    value = evolved_magnetization(theta)
    dense = qu.core.qarray  # quimb's operators are numpy subclasses: einad computes on them as numpy
    assert isinstance(qu.ham_heis(2), dense) and type(value.numpy()) is np.ndarray
    assert -1 <= value.item() <= 1 and abs(value.item() - 1) > 1e-3  # (the state moved)
    assert ea.gradcheck(evolved_magnetization, theta)


def mpo_applied(arrays, dtype):
    """The Heisenberg MPO applied to the MPS, compressed back to the MPS's bond (quimb's
    canonize, QR by QR, then its SVD truncation), and the result's norm. Its bonds after the
    MPO are 5 times the MPS's, more than the rank at the chain's ends: exact zeros on the
    diagonal of a QR's R, by which the QR's derivative divides."""
    psi = qtn.MatrixProductState(list(arrays), shape="lrp")
    mpo = qtn.MPO_ham_heis(L_SITES)
    mpo.apply_to_arrays(lambda a: a.astype(dtype))
    phi = mpo.apply(psi, compress=True, max_bond=BOND)
    return ea.real(phi.H @ phi)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_an_mpo_applied_and_compressed_has_no_gradient_and_says_why(dtype):
    """A rank-deficient QR inside the gradient: its derivative is undefined, and the error says
    so (numpy's was "Singular matrix" from inside the sweep). JAX and PyTorch return NaNs for
    the first site and finite gradients for the others that central differences disagree with
    (float64: a directional derivative of -4.01 in JAX and -2.96 in PyTorch, against -3.31 by central
    differences)."""
    arrays = _mps_arrays(dtype)
    assert np.isfinite(mpo_applied([ea.tensor(a) for a in arrays], dtype).item())  # (the value is fine)
    with pytest.raises(np.linalg.LinAlgError, match="derivative of qr is undefined"):
        ea.grad(lambda a: mpo_applied(a, dtype))(arrays)


# -- PEPS norm and sliced cotengra contractions under jit(grad) ------------------------------------


PEPS = qtn.PEPS.rand(2, 3, bond_dim=2, seed=5, dtype="complex128")
PEPS_ARRAYS = tuple(t.data for t in PEPS)


def peps_log_norm(arrays, lib):
    psi = PEPS.copy()
    for t, a in zip(psi, arrays):
        t.modify(data=a)
    return lib.log(lib.real((psi.H & psi).contract(all, optimize="greedy")))


def test_peps_norm_under_jit_grad(jax_refs):
    staged = ea.jit(ea.grad(lambda a: peps_log_norm(a, ea)))
    grad = staged(PEPS_ARRAYS)
    _close(grad, jax_refs[2:])
    other = tuple(a * (1 + 0.1 * k) for k, a in enumerate(PEPS_ARRAYS))  # the program replays on new values
    _close(staged(other), ea.grad(lambda a: peps_log_norm(a, ea))(other))
    assert ea.gradcheck(lambda a: peps_log_norm(a, ea), PEPS_ARRAYS, directions=1)


@pytest.fixture(scope="module")
def sliced_tree():
    """A random network and a cotengra tree sliced into several pieces over two indices."""
    inputs, output, shapes, size_dict = ctg.utils.rand_equation(8, 3, n_out=1, seed=3)
    tree = ctg.array_contract_tree(inputs, output, size_dict, optimize="greedy")
    tree = tree.slice(target_slices=4)
    assert tree.multiplicity >= 4
    eq = ",".join("".join(i) for i in inputs) + "->" + "".join(output)
    return tree, eq, shapes


def _arrays(shapes, dtype):
    rng = np.random.default_rng(9)
    arrays = [rng.standard_normal(s) for s in shapes]
    if dtype == "complex128":
        arrays = [a + 1j * rng.standard_normal(a.shape) for a in arrays]
    return tuple(arrays)


@pytest.mark.parametrize("dtype", ["float64", "complex128"])
@pytest.mark.parametrize("how", ["contract", "contract_slice+gather_slices"])
def test_sliced_cotengra_contraction_under_jit_grad(sliced_tree, dtype, how):
    """Against torch.einsum of the whole network (torch.autograd; conjugated for complex values,
    torch's convention being the conjugate of einad's) and central differences."""
    torch = pytest.importorskip("torch", reason="the reference gradient is torch.autograd's")
    tree, eq, shapes = sliced_tree
    arrays = _arrays(shapes, dtype)

    def contract(arrays):
        if how == "contract":
            return tree.contract(arrays)
        return tree.gather_slices([tree.contract_slice(arrays, i) for i in range(tree.multiplicity)])

    loss = lambda a: ea.sum(ea.abs(contract(a)) ** 2)
    staged = ea.jit(ea.grad(loss))
    grad = staged(arrays)
    _close(grad, ea.grad(loss)(arrays), rtol=1e-12)
    other = tuple(np.flip(a) * 1.5 for a in arrays)  # new values, the same shapes: the program replays
    _close(staged(other), ea.grad(loss)(other), rtol=1e-12)
    leaves = [torch.tensor(a, requires_grad=True) for a in arrays]
    (torch.einsum(eq, *leaves).abs() ** 2).sum().backward()
    _close(grad, [np.conj(x.grad.numpy()) for x in leaves], rtol=1e-9, atol=1e-9)
    assert ea.gradcheck(contract, arrays, directions=1)
