"""ea.linalg on every array library (issue 10): values against numpy.linalg's, gradients and
second derivatives against einad's on numpy, results of the inputs' library (float32 kept
on torch), lazy on dask; on torch, gradients against torch.autograd."""

import numpy as np
import pytest

import einad as ea
from einad.core import strip
from tests.support.numerics import assert_close

L = ea.linalg
RNG = np.random.default_rng(7)


def _mT(x):
    return np.swapaxes(x, -1, -2)


def general(shape):
    """A well-conditioned square matrix (stack)."""
    return RNG.standard_normal(shape) + 3 * np.eye(shape[-1])


def spd(shape):
    """Symmetric positive definite, with distinct eigenvalues (almost surely)."""
    m = RNG.standard_normal(shape)
    return m @ _mT(m) + shape[-1] * np.eye(shape[-1])


def weights(shape):
    return RNG.standard_normal(shape)


def _tol(dtype, grad=False):
    if np.dtype(dtype) == np.float32:
        return 2e-3 if grad else 2e-4
    return 1e-8


def _raw(t):
    return strip(t)


def wsum(w, x):
    """Σ w·x, an einsum (works on every library)."""
    return ea.einsum("...,...->", w, x)


def wsq(w, x):
    """Σ w·x², invariant under the sign of any row or column of x."""
    return ea.einsum("...,...,...->", w, x, x)


# Each case: the numpy inputs, then `make(w)` -> a scalar function of the inputs (weights
# `w` already in the inputs' library), then the weight shapes, then the outputs whose values
# are compared with numpy's: (einad function, numpy function, compare absolute values
# (vectors of a decomposition are defined up to sign)).
A = general((2, 3, 3))
S = spd((2, 3, 3))
B = RNG.standard_normal((2, 3, 2))
R = RNG.standard_normal((2, 4, 3))  # tall, full column rank
W = RNG.standard_normal((3, 4))  # wide

CASES = {
    "inv": (
        [A],
        lambda w: lambda a: wsum(w[0], L.inv(a)),
        [(2, 3, 3)],
        [(lambda a: L.inv(a), np.linalg.inv, False)],
    ),
    "solve": (
        [A, B],
        lambda w: lambda a, b: wsum(w[0], L.solve(a, b)),
        [(2, 3, 2)],
        [(lambda a, b: L.solve(a, b), np.linalg.solve, False)],
    ),
    "det": (
        [A],
        lambda w: lambda a: wsum(w[0], L.det(a)),
        [(2,)],
        [(lambda a: L.det(a), np.linalg.det, False)],
    ),
    "slogdet": (
        [A],
        lambda w: lambda a: wsum(w[0], L.slogdet(a).logabsdet),
        [(2,)],
        [
            (lambda a: L.slogdet(a).sign, lambda a: np.linalg.slogdet(a)[0], False),
            (lambda a: L.slogdet(a).logabsdet, lambda a: np.linalg.slogdet(a)[1], False),
        ],
    ),
    "cholesky": (
        [S],
        lambda w: lambda a: wsum(w[0], L.cholesky(a)),
        [(2, 3, 3)],
        [(lambda a: L.cholesky(a), np.linalg.cholesky, False)],
    ),
    "eigh": (
        [S],
        lambda w: lambda a: wsum(w[0], L.eigh(a).eigenvalues) + wsq(w[1], L.eigh(a).eigenvectors),
        [(2, 3), (2, 3, 3)],
        [
            (lambda a: L.eigh(a).eigenvalues, lambda a: np.linalg.eigh(a)[0], False),
            (lambda a: L.eigh(a).eigenvectors, lambda a: np.linalg.eigh(a)[1], True),
        ],
    ),
    "eigh_upper": (
        [np.triu(S)],
        lambda w: lambda a: wsum(w[0], L.eigh(a, UPLO="U").eigenvalues),
        [(2, 3)],
        [(lambda a: L.eigh(a, UPLO="U").eigenvalues, lambda a: np.linalg.eigh(a, UPLO="U")[0], False)],
    ),
    "svd": (
        [R],
        lambda w: (
            lambda a: (
                wsum(w[0], L.svd(a, full_matrices=False).S)
                + wsq(w[1], L.svd(a, full_matrices=False).U)
                + wsq(w[2], L.svd(a, full_matrices=False).Vh)
            )
        ),
        [(2, 3), (2, 4, 3), (2, 3, 3)],
        [
            (lambda a: L.svd(a, full_matrices=False).S, lambda a: np.linalg.svd(a)[1], False),
            (
                lambda a: L.svd(a, full_matrices=False).U,
                lambda a: np.linalg.svd(a, full_matrices=False)[0],
                True,
            ),
            (lambda a: L.svd(a).Vh, lambda a: np.linalg.svd(a)[2], True),
        ],
    ),
    "svd_hermitian": (
        [S],
        lambda w: lambda a: wsum(w[0], L.svd(a, hermitian=True).S),
        [(2, 3)],
        [(lambda a: L.svd(a, hermitian=True).S, lambda a: np.linalg.svd(a, hermitian=True)[1], False)],
    ),
    "qr": (
        [R],
        lambda w: lambda a: wsq(w[0], L.qr(a).Q) + wsq(w[1], L.qr(a).R),
        [(2, 4, 3), (2, 3, 3)],
        [
            (lambda a: L.qr(a).Q, lambda a: np.linalg.qr(a)[0], True),
            (lambda a: L.qr(a).R, lambda a: np.linalg.qr(a)[1], True),
        ],
    ),
    "qr_wide": (
        [W],
        lambda w: lambda a: wsq(w[0], L.qr(a).Q) + wsq(w[1], L.qr(a).R),
        [(3, 3), (3, 4)],
        [(lambda a: L.qr(a).R, lambda a: np.linalg.qr(a)[1], True)],
    ),
}
WEIGHTS = {name: [weights(s) for s in case[2]] for name, case in CASES.items()}


def _lib_dtype(lib, dtype):
    return getattr(lib.module, np.dtype(dtype).name) if lib.name != "numpy" else np.dtype(dtype)


def _inputs(lib, arrays, dtype):
    return [lib.asarray(np.asarray(x, dtype)) for x in arrays]


def _dtypes(lib):
    return [np.float64, np.float32] if lib.name == "torch" else [np.float64]


@pytest.mark.parametrize("name", CASES)
def test_values_match_numpy(lib, name):
    arrays, _, _, outputs = CASES[name]
    for dtype in _dtypes(lib):
        xs = _inputs(lib, arrays, dtype)
        refs = [np.asarray(x, dtype) for x in arrays]
        for ours_fn, np_fn, absolute in outputs:
            ours = ours_fn(*xs)
            raw = _raw(ours)
            assert lib.owns(raw), f"{name}: a {type(raw).__name__}, not a {lib.name} array"
            if lib.name == "dask":
                assert isinstance(raw, lib.module.Array)  # lazy, computed by the comparison below
            assert ours.dtype == np.dtype(dtype)
            got, want = lib.numpy(raw), np_fn(*refs)
            assert got.dtype == np.dtype(dtype)
            if absolute:
                got, want = np.abs(got), np.abs(want)
            assert_close(got, want, rtol=_tol(dtype), atol=_tol(dtype))


@pytest.mark.parametrize("name", CASES)
def test_gradients_match_numpy(lib, name):
    arrays, make, _, _ = CASES[name]
    argnums = tuple(range(len(arrays)))
    want = ea.grad(make(WEIGHTS[name]), argnums=argnums)(*arrays)
    for dtype in _dtypes(lib):
        w = _inputs(lib, WEIGHTS[name], dtype)
        got = ea.grad(make(w), argnums=argnums)(*_inputs(lib, arrays, dtype))
        for g, ref in zip(got, want):
            assert lib.owns(g), f"{name}: gradient is a {type(g).__name__}"
            if lib.name == "dask":
                assert isinstance(g, lib.module.Array)
            g = lib.numpy(g)
            assert g.dtype == np.dtype(dtype)
            tol = _tol(dtype, grad=True)
            assert_close(g, ref, rtol=tol, atol=tol)


# second order: a Hessian-vector product through each rule, on one matrix (no batch axes:
# dask's graphs of second derivatives grow with the number of blocks), each rule in one mode
SECOND = [
    ("inv", "fwd-over-rev"),
    ("solve", "rev-over-rev"),
    ("det", "fwd-over-rev"),
    ("slogdet", "rev-over-rev"),
    ("cholesky", "fwd-over-rev"),
    ("eigh", "rev-over-rev"),
    ("svd", "fwd-over-rev"),
    ("qr", "rev-over-rev"),
]


@pytest.mark.parametrize(("name", "mode"), SECOND)
def test_second_derivatives_match_numpy(lib, name, mode):
    arrays, make, _, _ = CASES[name]
    arrays = [x[0] for x in arrays]
    w_np = [w[0] for w in WEIGHTS[name]]
    tangents = [RNG.standard_normal(np.shape(x)) for x in arrays]
    want = ea.hvp(make(w_np), arrays, tangents, mode)
    w = _inputs(lib, w_np, np.float64)
    got = ea.hvp(make(w), _inputs(lib, arrays, np.float64), _inputs(lib, tangents, np.float64), mode)
    for g, ref in zip(got, want):
        assert lib.owns(g)
        if lib.name == "dask":
            assert isinstance(g, lib.module.Array)
        assert_close(lib.numpy(g), ref, rtol=1e-7, atol=1e-7)


def test_solve_vector_right_hand_side(lib):
    a, b, w3 = A[0], B[0, :, 0], W[0, :3]
    want = ea.grad(lambda a, b: wsum(w3, L.solve(a, b)), argnums=(0, 1))(a, b)
    w = lib.asarray(w3)
    out = L.solve(lib.asarray(a), lib.asarray(b))
    assert lib.owns(_raw(out))
    assert_close(lib.numpy(_raw(out)), np.linalg.solve(a, b))
    got = ea.grad(lambda a, b: wsum(w, L.solve(a, b)), argnums=(0, 1))(lib.asarray(a), lib.asarray(b))
    for g, ref in zip(got, want):
        assert lib.owns(g)
        assert_close(lib.numpy(g), ref)


def test_singular_matrix_is_linalg_error(lib):
    if lib.name == "dask":  # lazy: numpy.linalg's error comes with the computation
        out = _raw(L.inv(lib.asarray(np.zeros((2, 2)))))
        assert isinstance(out, lib.module.Array)
        with pytest.raises(L.LinAlgError):
            out.compute()
        return
    with pytest.raises(L.LinAlgError):
        L.inv(lib.asarray(np.zeros((2, 2))))


def test_a_library_without_linalg_is_a_clear_error():
    import types

    from einad.rules.linalg import _call

    fake = types.ModuleType("fakearrays")
    with pytest.raises(NotImplementedError, match=r"einad.linalg.eigh.*fakearrays has no linalg.eigh"):
        _call(fake, "eigh", None)


# -- torch: gradients against torch.autograd ------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name", ["det", "solve", "cholesky"])
def test_torch_gradients_match_autograd(name, dtype):
    torch = pytest.importorskip("torch")
    tol = _tol(dtype, grad=True)
    a, b = np.asarray(A, dtype), np.asarray(B, dtype)
    if name == "det":
        w = torch.from_numpy(np.asarray(WEIGHTS["det"][0], dtype))
        ours = ea.grad(lambda x: wsum(w, L.det(x)))(torch.from_numpy(a))
        x = torch.from_numpy(a).requires_grad_()
        (w * torch.linalg.det(x)).sum().backward()
        theirs = [x.grad]
        ours = [ours]
    elif name == "solve":
        w = torch.from_numpy(np.asarray(WEIGHTS["solve"][0], dtype))
        ours = ea.grad(lambda x, y: wsum(w, L.solve(x, y)), argnums=(0, 1))(
            torch.from_numpy(a), torch.from_numpy(b)
        )
        x, y = torch.from_numpy(a).requires_grad_(), torch.from_numpy(b).requires_grad_()
        (w * torch.linalg.solve(x, y)).sum().backward()
        theirs = [x.grad, y.grad]
    else:
        # through S = M Mᵀ, so both conventions for the unread triangle (einad: numpy's, the
        # lower one; torch: symmetrized) give the same gradient in M
        w = torch.from_numpy(np.asarray(WEIGHTS["cholesky"][0], dtype))
        ours = [
            ea.grad(lambda m: wsum(w, L.cholesky(ea.einsum("...ik,...jk->...ij", m, m))))(torch.from_numpy(a))
        ]
        x = torch.from_numpy(a).requires_grad_()
        (w * torch.linalg.cholesky(x @ x.mT)).sum().backward()
        theirs = [x.grad]
    for g, ref in zip(ours, theirs):
        assert isinstance(g, torch.Tensor)
        assert g.dtype == ref.dtype
        assert_close(g.numpy(), ref.numpy(), rtol=tol, atol=tol)
