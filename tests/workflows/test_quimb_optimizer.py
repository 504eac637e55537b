"""quimb's `TNOptimizer` with ``autodiff_backend="einad"`` (einad/quimb_optimizer.py): the MPS
ground state of the Heisenberg chain by L-BFGS-B, staged and not; gradients against quimb's torch
handler (torch.autograd); Hessian-vector products against central differences of the
gradient, real and complex."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import einad as ea

qtn = pytest.importorskip("quimb.tensor", reason="TNOptimizer is quimb's (pip install einad[tn])")
quimb_optimizer = pytest.importorskip("einad.quimb_optimizer")

L_SITES, BOND = 6, 3
HAM = qtn.MPO_ham_heis(L_SITES)


def normalized(psi):
    return psi / (psi.H @ psi) ** 0.5


def energy(psi, ham):
    return ea.real(qtn.expec_TN_1D(psi.H, ham, psi))


def optimizer(dtype="float64", **options):
    psi = qtn.MPS_rand_state(L_SITES, BOND, seed=1, dtype=dtype)
    return qtn.TNOptimizer(
        psi,
        energy,
        normalized,
        loss_constants={"ham": HAM},
        autodiff_backend="einad",
        progbar=False,
        **options,
    )


@pytest.mark.parametrize("options", [{}, {"jit_fn": False}], ids=["jit", "eager"])
def test_the_ground_state_by_lbfgs_reaches_dmrgs(options):
    dmrg = qtn.DMRG2(HAM, bond_dims=[BOND], cutoffs=0.0)
    dmrg.solve(tol=1e-10, verbosity=0)
    opt = optimizer(optimizer="L-BFGS-B", **options)
    assert isinstance(opt.handler, quimb_optimizer.EinadHandler)
    psi = opt.optimize(300, tol=1e-12)
    assert opt.loss <= dmrg.energy + 1e-7 * abs(dmrg.energy)  # (DMRG2's own optimum, or below it)
    assert type(psi[0].data) is np.ndarray  # (quimb hands the optimized network back in numpy)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable:UserWarning")  # (torch's)
@pytest.mark.parametrize("dtype", ["float64", "complex128"])
def test_gradients_match_quimbs_torch_handler_and_hessp_differentiates_them(dtype):
    pytest.importorskip("torch", reason="the reference gradient is quimb's torch handler's")
    ours = optimizer(dtype)
    ham = HAM.astype(dtype)
    theirs = qtn.TNOptimizer(
        qtn.MPS_rand_state(L_SITES, BOND, seed=1, dtype=dtype),
        lambda psi, ham: qtn.expec_TN_1D(psi.H, ham, psi).real,
        normalized,
        loss_constants={"ham": ham},
        autodiff_backend="torch",
        device="cpu",
        progbar=False,
    )
    x = ours.vectorizer.vector.copy()
    value, gradient = ours.vectorized_value_and_grad(x)
    gradient = gradient.copy()
    want_value, want_gradient = theirs.vectorized_value_and_grad(x)
    np.testing.assert_allclose(value, want_value, rtol=1e-12)
    np.testing.assert_allclose(gradient, want_gradient, rtol=1e-9, atol=1e-12)
    p = np.random.default_rng(0).standard_normal(x.size)
    eps = 1e-6
    ahead = ours.vectorized_value_and_grad(x + eps * p)[1].copy()
    behind = ours.vectorized_value_and_grad(x - eps * p)[1].copy()
    np.testing.assert_allclose(
        ours.vectorized_hessp(x, p), (ahead - behind) / (2 * eps), rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize(
    "imports",
    [
        "import quimb.tensor as qtn, einad",  # quimb first: `import einad` adds the handler
        "import einad, quimb.tensor as qtn",  # einad first: quimb's import of its optimizer does
    ],
)
def test_the_backend_is_there_whichever_library_is_imported_first(imports):
    """``autodiff_backend="einad"`` needs no import of einad.quimb_optimizer by hand, in either
    order (in a fresh interpreter: this one has imported it already), and the finder that waited
    for quimb's optimizer is gone from ``sys.meta_path`` once it has."""
    code = (
        f"{imports}\n"
        "import sys, quimb.tensor.optimize as o\n"
        "print(o._BACKEND_HANDLERS['einad'].__module__)\n"
        "print(sum(type(f).__module__ == 'einad.post_import' for f in sys.meta_path))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["einad.quimb_optimizer", "0"]


def test_a_parametrized_circuit_is_optimized_over_its_gate_parameters():
    """quimb's parametrized gates (PTensors: TNOptimizer optimizes their parameters, which
    quimb's gate functions turn into arrays through autoray): the gradient over the
    parameters against central differences of the loss, and the infidelity to a target
    falls under L-BFGS-B."""
    n = 3
    rng = np.random.default_rng(1)
    circ = qtn.Circuit(n)
    for _ in range(2):
        for q in range(n):
            circ.apply_gate("U3", *rng.uniform(0, 2 * np.pi, 3), q, parametrize=True)
        circ.apply_gate("CZ", 0, 1)
        circ.apply_gate("CZ", 1, 2)
    target = qtn.MPS_rand_state(n, 2, seed=3, dtype="complex128").to_dense().ravel()

    def infidelity(psi, target):
        return 1 - ea.abs(ea.sum(ea.conj(target) * ea.ravel(psi.to_dense()))) ** 2

    opt = qtn.TNOptimizer(
        circ.psi,
        infidelity,
        loss_constants={"target": target},
        tags=["U3"],
        autodiff_backend="einad",
        optimizer="L-BFGS-B",
        progbar=False,
    )
    x = opt.vectorizer.vector.copy()
    assert x.size == 2 * n * 3  # (the angles, not the gate arrays)
    start, gradient = opt.vectorized_value_and_grad(x)
    gradient = gradient.copy()
    p = np.random.default_rng(0).standard_normal(x.size)
    eps = 1e-6
    central = (opt.vectorized_value(x + eps * p) - opt.vectorized_value(x - eps * p)) / (2 * eps)
    np.testing.assert_allclose(gradient @ p, central, rtol=1e-6)
    opt.optimize(60)
    assert opt.loss < 0.5 * start
