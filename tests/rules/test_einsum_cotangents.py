"""einad.rules.einsum's structured cotangents in the reverse pass.

Einsum's VJP hands the reverse pass an operand's cotangent as a `Spread` (the
small array that the dense cotangent would be written from, and where it goes),
and the pass adds spreads without making them dense. So every derivative here
is compared with a *dense twin* of the same loss: each diagonal written as an
einsum against a 0/1 mask (``tensordot(M, A)``), whose VJP is already dense
and never makes a spread. Closed forms, `gradcheck` and forward mode (which
has no reverse pass at all) check the rest. The last tests observe the saving
itself (memory peaks and the staged program) and that the pass never writes
into an array it did not allocate.
"""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
import einad.transforms.batching
from einad.rules import einsum
from tests.support.checks import check_lib
from tests.support.numerics import (
    peak_bytes,
)

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted


RNG = np.random.default_rng(19)


# -- diagonals and their dense twins -----------------------------------------------------


def _mask(shape, offset, axis1, axis2):
    """``M`` with ``np.diagonal(A, ...) == tensordot(M, A, A.ndim)``: the diagonal as a dense map."""
    size = int(np.prod(shape))
    basis = np.eye(size).reshape((size, *shape))
    cols = np.stack([np.diagonal(b, offset, axis1, axis2) for b in basis], axis=-1)
    return cols.reshape(cols.shape[:-1] + tuple(shape))


def _diagonal(A, offset=0, axis1=0, axis2=1, dense=False):
    if not dense:
        return ea.diagonal(A, offset, axis1, axis2)
    return ea.tensordot(_mask(A.shape, offset, axis1, axis2), A, axes=A.ndim)


def _trace(A, offset=0, axis1=0, axis2=1, dense=False):
    if not dense:
        return ea.trace(A, offset, axis1, axis2)
    return ea.sum(_diagonal(A, offset, axis1, axis2, dense=True), axis=-1)


def _case9(A, dense=False):
    return _trace(A, dense=dense) + ea.sum(_diagonal(A, dense=dense) ** 2)


def _offsets(A, dense=False):
    return (
        _trace(A, 1, dense=dense)
        + ea.sum(_diagonal(A, 1, dense=dense) ** 2)
        + 3.0 * _trace(A, -2, dense=dense)
        + ea.sum(ea.sin(_diagonal(A, dense=dense)))
    )


def _axes(X, dense=False):
    """3-d: diagonals over axes (0, 2) and (2, 0), a trace over (-1, 0)."""
    d = _diagonal(X, 0, 0, 2, dense=dense)
    e = _diagonal(X, 0, 2, 0, dense=dense)
    return ea.sum(d * e) + ea.sum(_trace(X, 0, -1, 0, dense=dense) ** 2) + ea.sum(ea.tanh(d))


def _batched(X, dense=False):
    """``...ii->...i`` and ``...ii->...`` on a stack of matrices."""
    if dense:
        eye = np.eye(X.shape[-1])
        d = ea.einsum("...ij,ij->...i", X, eye)
        t = ea.einsum("...ij,ij->...", X, eye)
    else:
        d = ea.einsum("...ii->...i", X)
        t = ea.einsum("...ii->...", X)
    return ea.sum(d**2) + ea.sum(t * t) + ea.sum(ea.exp(d) * 0.5)


def _repeated(Y, dense=False):
    """Letters repeated away from the end: ``iij->j``, ``iji->ij`` and ``iij->ij``."""
    if dense:
        eye = np.eye(Y.shape[0])
        a = ea.einsum("kij,ki->j", Y, eye)
        b = ea.einsum("ijk,ik->ij", Y, eye)
        c = ea.einsum("kij,ki->ij", Y, eye)
    else:
        a = ea.einsum("iij->j", Y)
        b = ea.einsum("iji->ij", Y)
        c = ea.einsum("iij->ij", Y)
    return ea.sum(a**2) + ea.sum(ea.sin(b)) + ea.sum(c * b)


def _mixed(A, dense=False):
    """Spreads meeting dense cotangents: sum(A*B) and A@C reach A besides the diagonals."""
    B = np.linspace(-1.0, 1.0, A.size).reshape(A.shape)
    return (
        _trace(A, dense=dense)
        + ea.sum(A * B)
        + ea.sum(_diagonal(A, dense=dense) ** 3)
        + ea.sum(ea.tanh(A @ B.T))
        + ea.sum(ea.einsum("ij->j", A) ** 2)  # a broadcast spread, "j" -> "ij"
        + ea.sum(ea.einsum("ij->", A))  # another kind: "" -> "ij"
    )


LOSSES = {
    "case9": (_case9, (5, 5)),
    "offsets": (_offsets, (4, 6)),
    "axis1/axis2": (_axes, (3, 2, 3)),
    "batched ...ii": (_batched, (2, 3, 4, 4)),
    "repeated in 3-d": (_repeated, (3, 3, 3)),
    "mixed with dense": (_mixed, (4, 4)),
}


@pytest.fixture(params=list(LOSSES), ids=list(LOSSES))
def loss(request):
    f, shape = LOSSES[request.param]
    return f, RNG.standard_normal(shape)


def test_value_and_gradient_equal_the_dense_twin(loss):
    f, A = loss
    value, grad = ea.value_and_grad(f)(A)
    value_d, grad_d = ea.value_and_grad(lambda A: f(A, dense=True))(A)
    np.testing.assert_allclose(value, value_d, rtol=1e-12)
    np.testing.assert_allclose(grad, grad_d, rtol=1e-12, atol=1e-12)
    assert grad.dtype == A.dtype and grad.shape == A.shape and grad.flags.writeable


def test_gradient_equals_forward_mode_and_passes_gradcheck(loss):
    f, A = loss
    np.testing.assert_allclose(ea.grad(f)(A), ea.jacfwd(f)(A), rtol=1e-10, atol=1e-12)
    assert ea.gradcheck(f, A)


def test_case9_closed_form_and_imperative_backward():
    A = RNG.standard_normal((6, 6))
    d = np.diagonal(A)
    expected = np.diag(1 + 2 * d)
    value, grad = ea.value_and_grad(_case9)(A)
    np.testing.assert_allclose(value, np.trace(A) + d @ d, rtol=1e-13)
    np.testing.assert_allclose(grad, expected, rtol=1e-13)
    T = ea.tensor(A, requires_grad=True)
    _case9(T).backward()
    np.testing.assert_allclose(T.grad, expected, rtol=1e-13)
    _case9(T).backward()  # accumulates
    np.testing.assert_allclose(T.grad, 2 * expected, rtol=1e-13)


def test_float32_stays_float32():
    A = RNG.standard_normal((7, 7)).astype(np.float32)
    grad = ea.grad(_case9)(A)
    assert grad.dtype == np.float32
    np.testing.assert_allclose(grad, np.diag(1 + 2 * np.diagonal(A)), rtol=1e-6)
    f = LOSSES["mixed with dense"][0]
    g32 = ea.grad(f)(A)
    assert g32.dtype == np.float32
    np.testing.assert_allclose(g32, ea.grad(lambda A: f(A, dense=True))(A), rtol=1e-5, atol=1e-5)


def test_complex_vjp_and_gradcheck():
    n = 4
    A = RNG.standard_normal((n, n)) + 1j * RNG.standard_normal((n, n))
    w = RNG.standard_normal(n) + 1j * RNG.standard_normal(n)
    c = 0.7 - 0.2j

    def f(A, dense=False):
        return c * _trace(A, dense=dense) + ea.sum(_diagonal(A, dense=dense) ** 2 * w)

    _, pull = ea.vjp(f, A)
    (g,) = pull(np.ones((), dtype=complex))
    np.testing.assert_allclose(g, np.diag(c + 2 * w * np.diagonal(A)), rtol=1e-13)
    (g_dense,) = ea.vjp(lambda A: f(A, dense=True), A)[1](np.ones((), dtype=complex))
    np.testing.assert_allclose(g, g_dense, rtol=1e-13)
    assert ea.gradcheck(f, A)

    def real_loss(A, dense=False):  # a real loss of a complex input
        return ea.abs(_trace(A, dense=dense)) ** 2 + ea.sum(ea.abs(_diagonal(A, dense=dense)) ** 2)

    np.testing.assert_allclose(
        ea.grad(real_loss)(A), ea.grad(lambda A: real_loss(A, dense=True))(A), rtol=1e-12
    )
    assert ea.gradcheck(real_loss, A)


def test_a_real_input_with_complex_cotangents_on_the_diagonal():
    """Two complex spreads reach a real matrix: the sum is cast back to real once."""
    A = RNG.standard_normal((4, 4))
    z = np.array([1 + 2j, -1j, 0.5, 2 - 1j])

    def f(A, dense=False):
        return ea.abs(ea.sum(_diagonal(A, dense=dense) * z)) ** 2 + ea.abs(_trace(A, dense=dense) * (1 + 1j))

    np.testing.assert_allclose(ea.grad(f)(A), ea.grad(lambda A: f(A, dense=True))(A), rtol=1e-12)
    assert ea.grad(f)(A).dtype == np.float64


def test_the_plain_vjp_table_gives_dense_cotangents():
    """Only `backward_pass` sees a `Spread`: einsum's `vjp_rules` entry makes it dense."""
    from einad.core import Structured, structured_vjp_rules, vjp_rules
    from einad.rules.einsum import einsum_p

    A = RNG.standard_normal((4, 4))
    params = {"inputs": ("ii",), "output": "i", "optimize": "auto", "memory_limit": None}
    g = np.arange(4.0)
    (structured,) = structured_vjp_rules[einsum_p](g, None, [A], params, [True])
    (plain,) = vjp_rules[einsum_p](g, None, [A], params, [True])
    assert isinstance(structured, Structured) and isinstance(plain, np.ndarray)
    np.testing.assert_array_equal(plain, np.diag(g))
    np.testing.assert_array_equal(structured.dense(), plain)


# -- second order ------------------------------------------------------------------------


def _cubic(A, dense=False):
    """``tr(A)^2 + Σ diag(A)^3``: grad ``2 tr(A) I + 3 diag(d²)``, H·V ``2 tr(V) I + 6 diag(d ⊙ diag V)``."""
    return _trace(A, dense=dense) ** 2 + ea.sum(_diagonal(A, dense=dense) ** 3)


def test_hessian_vector_products_in_every_mode():
    n = 5
    A, V = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
    d, dv = np.diagonal(A), np.diagonal(V)
    expected = 2 * np.trace(V) * np.eye(n) + np.diag(6 * d * dv)
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        (hv,) = ea.hvp(_cubic, (A,), (V,), mode=mode)
        np.testing.assert_allclose(hv, expected, rtol=1e-12, atol=1e-12, err_msg=mode)
    gg = ea.grad(lambda A: ea.sum(ea.grad(_cubic)(A) * V))(A)  # grad of grad
    np.testing.assert_allclose(gg, expected, rtol=1e-12, atol=1e-12)


def test_hessian_equals_the_dense_twin_and_the_closed_form():
    n = 4
    A = RNG.standard_normal((n, n))
    H = ea.hessian(_cubic)(A)
    np.testing.assert_allclose(H, ea.hessian(lambda A: _cubic(A, dense=True))(A), rtol=1e-12, atol=1e-12)
    expected = np.zeros((n, n, n, n))
    for i in range(n):
        for j in range(n):
            expected[i, i, j, j] += 2
        expected[i, i, i, i] += 6 * A[i, i]
    np.testing.assert_allclose(H, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["offsets", "axis1/axis2", "mixed with dense"])
def test_second_order_of_the_other_losses(name):
    f, shape = LOSSES[name]
    A, V = RNG.standard_normal(shape), RNG.standard_normal(shape)
    (hv,) = ea.hvp(f, (A,), (V,))
    (hv_rr,) = ea.hvp(f, (A,), (V,), mode="rev-over-rev")
    (hv_dense,) = ea.hvp(lambda A: f(A, dense=True), (A,), (V,), mode="rev-over-fwd")
    np.testing.assert_allclose(hv, hv_dense, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hv_rr, hv_dense, rtol=1e-10, atol=1e-12)


def test_jacrev_batches_the_structured_pass():
    """jacrev runs the pass on a batch of cotangents (the vmap trace): the spreads are traced."""
    A = RNG.standard_normal((4, 4))

    def f(A, dense=False):
        d = _diagonal(A, dense=dense)
        return d * _trace(A, dense=dense) + ea.sin(d) + ea.einsum("ij->i", A)

    J = ea.jacrev(f)(A)
    np.testing.assert_allclose(J, ea.jacfwd(f)(A), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(J, ea.jacrev(lambda A: f(A, dense=True))(A), rtol=1e-12, atol=1e-12)


def test_a_staged_gradient_program_runs_and_differentiates():
    A, B = RNG.standard_normal((5, 5)), RNG.standard_normal((5, 5))
    program = ea.make_graph(ea.grad(_cubic))(A)
    np.testing.assert_allclose(program(B), ea.grad(_cubic)(B), rtol=1e-12)
    V = RNG.standard_normal((5, 5))
    hv = ea.grad(lambda A: ea.sum(program(A) * V))(A)
    np.testing.assert_allclose(hv, ea.hvp(_cubic, (A,), (V,))[0], rtol=1e-12, atol=1e-12)


# -- the saving, observed --------------------------------------------------------------------


N = 800  # one N×N float64 buffer is 5 MB: far above everything else the call allocates


def test_case9_gradient_writes_one_dense_buffer():
    """Two cotangents land on A's diagonal: they are summed as length-N vectors and
    written out once, so the call allocates about one N×N buffer (the gradient).

    Kills: disabling the mechanism (``rule = vjp_rules[prim]`` in `backward_pass`,
    so einsum's VJP spreads densely): two dense spreads and their sum, 3 buffers.
    Measured: 1.00 buffer with it, 3.00 without.
    """
    A = RNG.standard_normal((N, N))
    buffers = peak_bytes(ea.value_and_grad(_case9), A) / A.nbytes
    assert buffers < 1.5, f"value_and_grad allocated {buffers:.2f} N×N buffers at its peak"


def test_a_spread_meeting_a_dense_cotangent_is_added_into_one_copy():
    """``trace(A) + Σ A⊙B``: the dense cotangent is a view of the caller's B; the
    diagonal is added into one copy of it (B itself is never written).

    Kills: disabling the mechanism as above (a dense spread, then a sum: 2 buffers),
    or making every spread that meets a dense array dense first (dropping the
    `add_into` branch of `core._accumulate`). Measured: 1.00 buffer with it, 2.00 without.
    """
    A, B = RNG.standard_normal((N, N)), RNG.standard_normal((N, N))
    B_before = B.copy()
    f = ea.value_and_grad(lambda A: ea.trace(A) + ea.sum(A * B))
    buffers = peak_bytes(f, A) / A.nbytes
    assert buffers < 1.5, f"value_and_grad allocated {buffers:.2f} N×N buffers at its peak"
    np.testing.assert_array_equal(B, B_before)
    np.testing.assert_array_equal(f(A)[1], B + np.eye(N))


def test_dense_cotangents_of_a_reused_input_are_summed_in_place():
    """Three dense cotangents reach A; the first sum is a buffer of the pass's own,
    so the next is added into it.

    Kills: never adding in place (the ``mine`` branch of `core._accumulate` removed):
    each sum allocates, 2 buffers at the peak. Measured: 1.00 with it, 2.00 without.
    """
    A, B, C, D = (RNG.standard_normal((N, N)) for _ in range(4))
    f = ea.value_and_grad(lambda A: ea.sum(A * B) + ea.sum(A * C) + ea.sum(A * D))
    buffers = peak_bytes(f, A) / A.nbytes
    assert buffers < 1.5, f"value_and_grad allocated {buffers:.2f} N×N buffers at its peak"
    np.testing.assert_allclose(f(A)[1], B + C + D, rtol=1e-13, atol=1e-14)


def test_the_staged_gradient_holds_one_dense_value():
    """Staged by make_graph, the cotangents are traced: the two spreads still add their
    sources (a length-n add) and the program makes one n×n value, the final spread.

    Kills: disabling the mechanism, or `Spread.plus` returning None (either way the
    program has two n×n spreads and an n×n add).
    """
    n = 6
    program = ea.make_graph(ea.grad(_case9))(RNG.standard_normal((n, n)))
    dense_eqs = [str(e) for e in program.equations if e.shape == (n, n)]
    dense_consts = [name for name, t in program.consts if t.endswith(f"[{n},{n}]")]
    assert len(dense_eqs) == 1 and "spread" in dense_eqs[0], str(program)
    assert not dense_consts, str(program)


def test_the_pass_never_writes_into_a_cotangent_a_rule_passed_on():
    """``X = A + B`` hands X's cotangent (one array) to both A and B. A also gets a
    spread (the trace): adding it must copy, not write into the array B holds.
    Both arrival orders are checked; X's cotangents are fresh writable arrays
    (``2 C``, ``3 D``), so a wrong write corrupts a result instead of raising.

    Kills: treating a cotangent as the pass's own buffer when it arrives from a
    rule (``owned.add(k)`` on a node's first cotangent in `backward_pass`'s
    `send`): B's gradient then gets A's diagonal.
    """
    n = 5
    A, B = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))
    C, D = RNG.standard_normal((n, n)), RNG.standard_normal((n, n))

    def trace_last(A, B):
        X = A + B
        return 2 * ea.sum(X * C) + 3 * ea.sum(X * D) + ea.trace(A)

    def trace_first(A, B):
        t = ea.trace(A)
        X = A + B
        return t + 2 * ea.sum(X * C) + 3 * ea.sum(X * D)

    for f in (trace_last, trace_first):
        gA, gB = ea.grad(f, (0, 1))(A, B)
        np.testing.assert_allclose(gA, 2 * C + 3 * D + np.eye(n), rtol=1e-14, err_msg=f.__name__)
        np.testing.assert_allclose(gB, 2 * C + 3 * D, rtol=1e-14, err_msg=f.__name__)


def test_a_callers_cotangent_is_never_written():
    """``vjp`` of ``A + trace(A)``: A's cotangent is the caller's own array U, and the
    trace's spread lands on it. The sum goes into a copy; U is untouched.

    Kills: the same mutation as above (``owned.add(k)`` on first arrival): U's
    diagonal then gets Σ U added in place.
    """
    n = 5
    A = RNG.standard_normal((n, n))
    U = RNG.standard_normal((n, n))
    U_before = U.copy()
    _, pull = ea.vjp(lambda A: A + ea.trace(A), A)
    (g,) = pull(U)
    np.testing.assert_array_equal(U, U_before)
    np.testing.assert_allclose(g, U + U.sum() * np.eye(n), rtol=1e-14)
    assert not np.shares_memory(g, U)


def test_spreads_of_another_librarys_arrays_add_their_sources_and_spread_once(lib, monkeypatch):
    """Case 9 (a trace and a diagonal's squares) on torch, array-api-strict, dask: the two
    cotangents of A add their length-n sources and make one n×n value, as on numpy. Before,
    each was made dense at once for another library (two n×n `where`s and an n×n add: on
    torch at 2000 × 2000, 85 against 8 ms a gradient).

    Kills: `_operand_vjps` making another library's spread dense, or `Spread.plus` leaving
    such sources unadded (two spreads made dense, then added)."""
    if lib.name == "numpy":
        pytest.skip("numpy's spreads are added into one buffer (the tests above)")
    made = []
    dense = einsum._spread_any
    monkeypatch.setattr(einsum, "_spread_any", lambda x, *a: made.append(a) or dense(x, *a))
    n = 6
    A = RNG.standard_normal((n, n))
    with lib.lazy():
        g = ea.grad(_case9)(lib.asarray(A))
    square = [a for a in made if a[2] == (n, n)]  # (besides the sum's broadcast of its scalar)
    assert len(square) == 1 and square[0][0] == "a", made
    check_lib(lib, g, np.eye(n) + 2 * np.diag(np.diag(A)), rtol=1e-13, atol=1e-14)
