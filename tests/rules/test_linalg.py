"""einad.rules.linalg (ea.linalg): values against numpy.linalg, derivatives against central
differences and closed forms, to second order, batched, complex, float32, staged under ea.jit,
and through the batched Jacobian path; and on every array library (`lib`): values against
numpy.linalg's, gradients and second derivatives against einad's on numpy, results of the
inputs' library (float32 kept on torch), lazy on dask; on torch, gradients against
torch.autograd."""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
import einad.transforms.batching
from einad.core import strip
from einad.rules.elementwise import (
    conj,  # for Vᴴ (ea.conj is not public yet)
)
from einad.util import dtype_of
from tests.support.arraylibs import load
from tests.support.jax_reference import jax_reference
from tests.support.jitting import compiled
from tests.support.numerics import (
    assert_close,
    check_op,
    numeric_grad,
)

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted


L = ea.linalg


RNG = np.random.default_rng(12)


def _normal(shape, dtype=np.float64):
    x = RNG.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * RNG.standard_normal(shape)
    return x.astype(dtype)


def _mH(x):
    return np.conj(np.swapaxes(x, -1, -2))


def general(shape, dtype=np.float64):
    """A well-conditioned square matrix (stack)."""
    n = shape[-1]
    return (_normal(shape, dtype) + 3 * np.eye(n)).astype(dtype)


def hermitian(shape, dtype=np.float64):
    """A Hermitian positive-definite matrix (stack), M Mᴴ + n I (its eigenvalues are distinct)."""
    m = _normal(shape, dtype)
    return (m @ _mH(m) + shape[-1] * np.eye(shape[-1])).astype(dtype)


def _herm_out(x):
    return ea.einsum("...ij,...kj->...ik", x, conj(x))


def _tuple(out):
    return tuple(out) if isinstance(out, tuple) else out


REAL, COMPLEX = np.float64, np.complex128


# -- values ---------------------------------------------------------------------------------------

SQUARE = [(3, 3), (2, 4, 4), (2, 1, 3, 3)]


RECT = [(5, 3), (3, 5), (2, 4, 2), (2, 2, 4)]


DTYPES = [np.float64, np.float32, np.complex128, np.complex64]


def _close(ours, theirs, dtype):
    ours = _tuple(ours)
    if isinstance(ours, tuple):
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            _close(a, b, dtype)
        return
    assert isinstance(ours, ea.Tensor)
    assert ours.dtype == np.asarray(theirs).dtype, f"dtype {ours.dtype} != numpy's {np.asarray(theirs).dtype}"
    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
    assert_close(ours.numpy(), theirs, rtol=tol, atol=tol)


@both_modes
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SQUARE)
def test_square_functions_match_numpy(shape, dtype):
    a, s = general(shape, dtype), hermitian(shape, dtype)
    n = shape[-1]
    b = _normal(shape[:-1] + (2,), dtype)
    _close(L.inv(a), np.linalg.inv(a), dtype)
    _close(L.det(a), np.linalg.det(a), dtype)
    _close(L.slogdet(a), np.linalg.slogdet(a), dtype)
    _close(L.solve(a, b), np.linalg.solve(a, b), dtype)
    # numpy 2: a 1-D b is one vector for every matrix; a 2-D b is one matrix for every matrix
    for rhs in (_normal((n,), dtype), _normal((n, 3), dtype)):
        _close(L.solve(a, rhs), np.linalg.solve(a, rhs), dtype)
    _close(L.cholesky(s), np.linalg.cholesky(s), dtype)
    _close(L.cholesky(s, upper=True), np.linalg.cholesky(s, upper=True), dtype)
    for uplo in "LU":
        _close(L.eigh(s, uplo), np.linalg.eigh(s, uplo), dtype)
    _close(L.svd(s, hermitian=True), np.linalg.svd(s, hermitian=True), dtype)


@both_modes
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", RECT)
def test_rectangular_functions_match_numpy(shape, dtype):
    a = _normal(shape, dtype)
    for full in (True, False):
        _close(L.svd(a, full_matrices=full), np.linalg.svd(a, full_matrices=full), dtype)
    _close(L.svd(a, compute_uv=False), np.linalg.svd(a, compute_uv=False), dtype)
    for mode in ("reduced", "complete"):
        _close(L.qr(a, mode), np.linalg.qr(a, mode), dtype)
    _close(L.qr(a, "r"), np.linalg.qr(a, "r"), dtype)
    for ord_ in (None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        _close(L.norm(a, ord_, axis=(-2, -1)), np.linalg.norm(a, ord_, axis=(-2, -1)), dtype)
    _close(L.norm(a), np.linalg.norm(a), dtype)


@both_modes
def test_norm_matches_numpy_for_every_order_axis_and_keepdims():
    x = _normal((3, 4))
    for ord_ in (None, 1, 2, 3, 0.5, 0, -1, np.inf, -np.inf):
        for axis in (0, 1, -1, (1,)):
            for keep in (False, True):
                _close(L.norm(x, ord_, axis, keep), np.linalg.norm(x, ord_, axis, keep), REAL)
        _close(L.norm(x[0], ord_), np.linalg.norm(x[0], ord_), REAL)
    for ord_ in (None, "fro", "f", "nuc", 1, -1, 2, -2, np.inf, -np.inf):
        _close(L.norm(x, ord_), np.linalg.norm(x, ord_), REAL)
        _close(L.norm(x, ord_, (1, 0), True), np.linalg.norm(x, ord_, (1, 0), True), REAL)
    y = _normal((2, 3, 4))
    _close(L.norm(y, keepdims=True), np.linalg.norm(y, keepdims=True), REAL)
    _close(L.norm(y, "nuc", axis=(2, 0)), np.linalg.norm(y, "nuc", axis=(2, 0)), REAL)
    z = _normal((2, 3, 2, 4))  # two axes besides the matrix's
    _close(L.norm(z, "nuc", axis=(3, 0)), np.linalg.norm(z, "nuc", axis=(3, 0)), REAL)
    ours, theirs = L.norm(y, np.inf, (2, 0), keepdims=True), np.linalg.norm(y, np.inf, (2, 0), keepdims=True)
    _close(ours, theirs, REAL)


@both_modes
def test_max_norms_of_empty_arrays_are_zero_as_numpys():
    """numpy takes the largest entry, column sum or singular value from 0 (``initial=0``): the
    inf-norm of an empty vector and the 2-, 1- and inf-norms of an empty matrix are 0."""
    cases = [(np.ones(0), np.inf, None), (np.ones((0, 3)), np.inf, 0), (np.ones((0, 3)), 2, None)]
    cases += [(np.ones((3, 0)), 1, None), (np.ones((2, 0)), np.inf, 1), (np.ones((2, 0, 3)), np.inf, (1, 2))]
    for x, ord_, axis in cases:
        for keep in (False, True):
            want = np.linalg.norm(x, ord_, axis, keep)
            _close(L.norm(x, ord_, axis, keep), want, REAL)
            grad = ea.grad(lambda x, o=ord_, a=axis, k=keep: ea.sum(L.norm(x, o, a, k)))(x)
            assert grad.shape == x.shape


@both_modes
def test_dtype_rules_follow_numpy():
    ints = np.array([[2, 1], [1, 3]])
    for f in (L.inv, L.det, L.cholesky, L.norm):
        assert f(ints).dtype == np.float64
    for f in (L.eigh, L.svd, L.qr):
        assert f(ints)[0].dtype == np.float64
    assert L.solve(np.eye(2, dtype=np.float32), np.array([1, 2])).dtype == np.float64  # as numpy
    assert L.solve(np.eye(2, dtype=np.float32), np.ones(2, np.float32)).dtype == np.float32
    assert L.solve(np.eye(2), np.ones(2, np.float32)).dtype == np.float64  # both operands promote
    zeros = np.array([0.0, 1.0, 0.0, 2.0], np.float32)
    assert L.norm(zeros, 0).dtype == np.float32 and L.norm(zeros, 0) == np.linalg.norm(zeros, 0) == 2
    assert L.inv(np.eye(2, dtype=bool)).dtype == np.float64
    for ord_ in (None, 0, 1, 3, np.inf):  # norms of integers are floats, as numpy's
        assert L.norm(np.array([1, -2, 3]), ord_).dtype == np.linalg.norm(np.array([1, -2, 3]), ord_).dtype
    assert L.norm(np.array([[1, -2], [3, 4]]), np.inf).dtype == np.float64
    with pytest.raises(TypeError, match="float16 is unsupported"):
        L.inv(np.eye(2, dtype=np.float16))


@both_modes
def test_results_are_numpys_named_tuples():
    s = hermitian((3, 3))
    assert L.eigh(s).eigenvalues.shape == (3,) and L.eigh(s).eigenvectors.shape == (3, 3)
    assert L.svd(s).Vh.shape == (3, 3) and L.svd(s).S.shape == (3,) and L.svd(s).U.shape == (3, 3)
    assert L.qr(s).Q.shape == L.qr(s).R.shape == (3, 3)
    assert L.slogdet(s).logabsdet.shape == L.slogdet(s).sign.shape == ()


@both_modes
def test_results_are_pytrees_under_jit_and_jacobians():
    """numpy's result types are namedtuples, so transformations keep their structure."""
    s = hermitian((3, 3))
    staged = compiled(ea.jit(L.eigh))(s)
    assert type(staged) is L.EighResult
    assert_close(staged.eigenvalues, np.linalg.eigh(s).eigenvalues)
    jac = ea.jacrev(L.slogdet)(s)
    assert type(jac) is L.SlogdetResult
    assert_close(jac.logabsdet, np.linalg.inv(s).T)
    assert_close(jac.sign, np.zeros((3, 3)))
    jac = ea.jacfwd(lambda a: L.svd(a, full_matrices=False))(_normal((4, 3)))
    assert type(jac) is L.SVDResult and jac.U.shape == (4, 3, 4, 3) and jac.S.shape == (3, 4, 3)


# -- errors ---------------------------------------------------------------------------------------


@both_modes
@pytest.mark.parametrize("f", [L.inv, L.det, L.slogdet, L.cholesky, L.eigh], ids=lambda f: f.__name__)
def test_shape_errors_are_numpys(f):
    with pytest.raises(L.LinAlgError, match="1-dimensional array given"):
        f(np.ones(3))
    with pytest.raises(L.LinAlgError, match="^Last 2 dimensions of the array must be square$"):
        f(np.ones((2, 3)))


@both_modes
def test_other_errors_come_at_the_call():
    with pytest.raises(L.LinAlgError, match="not positive definite"):
        L.cholesky(-np.eye(2))
    with pytest.raises(L.LinAlgError, match="Singular"):
        L.inv(np.zeros((2, 2)))
    with pytest.raises(ValueError, match=r"signature \(m,m\),\(m\)->\(m\) \(size 4 is different from 3\)"):
        L.solve(np.eye(3), np.ones(4))
    with pytest.raises(ValueError, match=r"signature \(m,m\),\(m,n\)->\(m,n\) \(size 4 is different"):
        L.solve(np.eye(3), np.ones((4, 2)))
    with pytest.raises(ValueError, match=r"^solve: b must be a vector \(n,\) or a stack .*, got a scalar$"):
        L.solve(np.eye(3), 1.0)
    with pytest.raises(ValueError):
        L.solve(np.ones((2, 3, 3)), np.ones((3, 3, 1)))
    with pytest.raises(L.LinAlgError):
        L.svd(np.ones(3))
    with pytest.raises(ValueError, match="^UPLO argument must be 'L' or 'U'$"):
        L.eigh(np.eye(2), "X")
    with pytest.raises(ValueError, match="raw"):
        L.qr(np.eye(2), "raw")
    for ord_ in (2, "fro"):  # no matrix or vector norm of a 3-D array
        with pytest.raises(ValueError, match=r"^Improper number of dimensions to norm\.$"):
            L.norm(np.ones((2, 2, 2)), ord_)
    with pytest.raises(ValueError, match="Invalid norm order 'fro' for vectors"):
        L.norm(np.ones(3), "fro")
    with pytest.raises(ValueError, match=r"^Invalid norm order for matrices\.$"):
        L.norm(np.ones((2, 2)), 3)
    with pytest.raises(ValueError, match=r"^Duplicate axes given\.$"):
        L.norm(np.ones((2, 2)), axis=(0, 0))
    with pytest.raises(TypeError, match="^'axis' must be None, an integer or a tuple of integers$"):
        L.norm(np.ones((2, 2)), axis="rows")
    for axis in (2, -3, (0, 2)):
        with pytest.raises(np.exceptions.AxisError, match="axis -?[23] is out of bounds for array of dim"):
            L.norm(np.ones((2, 2)), axis=axis)


# -- first derivatives: both modes against central differences ------------------------------------


def _eigh_gauge_free(a):
    w, v = L.eigh(a)
    return w, _herm_out(v[..., :2]), ea.abs(v)  # eigenvalues, a projector, |entries| (phase-free)


def _svd_gauge_free(a, full=False):
    u, s, vh = L.svd(a, full_matrices=full)
    k = s.shape[-1]
    u1, vh1 = u[..., :k], vh[..., :k, :]
    out = [s, ea.abs(u1), ea.abs(vh1), ea.abs((u1 * s[..., None, :]) @ vh1)]
    if full:  # the extra columns only through their span
        out += [_herm_out(u[..., k:]), _herm_out(_mH_t(vh[..., k:, :]))]
    return tuple(out)


def _mH_t(x):
    return conj(ea.moveaxis(x, -1, -2))


def _qr_gauge_free(a, mode="reduced"):
    q, r = L.qr(a, mode)
    k = min(a.shape[-2:])
    return q[..., :k], r, _herm_out(q[..., k:])


GRADS = {
    "inv": (L.inv, general),
    "det": (L.det, general),
    "slogdet": (lambda a: tuple(L.slogdet(a)), general),
    "solve_matrix": (lambda a: L.solve(a, np.arange(8.0).reshape(4, 2)), general),
    "cholesky": (L.cholesky, hermitian),
    "cholesky_upper": (lambda a: L.cholesky(a, upper=True), hermitian),
    "eigh": (_eigh_gauge_free, hermitian),
    "eigh_upper": (lambda a: L.eigh(a, "U")[0], hermitian),
    "svd_hermitian": (lambda a: L.svd(a, hermitian=True)[1], hermitian),
    "norm_nuc": (lambda a: L.norm(a, "nuc", axis=(-2, -1)), general),
    "norm_2": (lambda a: L.norm(a, 2, axis=(-2, -1)), general),
    "norm_fro": (lambda a: L.norm(a, axis=(-1, -2), keepdims=True), general),
    "norm_inf": (lambda a: L.norm(a, np.inf, axis=(-2, -1)), general),
    "norm_vec": (lambda a: (L.norm(a, axis=-1), L.norm(a, 1, axis=-2), L.norm(a, 3, axis=-1)), general),
}


@both_modes
@pytest.mark.parametrize("dtype", [REAL, COMPLEX])
@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradients_of_square_functions(name, dtype):
    f, make = GRADS[name]
    assert ea.gradcheck(f, make((2, 4, 4), dtype))
    assert ea.gradcheck(f, make((4, 4), dtype))


@both_modes
@pytest.mark.parametrize("dtype", [REAL, COMPLEX])
@pytest.mark.parametrize("shape", RECT)
def test_gradients_of_svd_and_qr(shape, dtype):
    a = _normal(shape, dtype)
    assert ea.gradcheck(_svd_gauge_free, a)
    assert ea.gradcheck(lambda a: _svd_gauge_free(a, full=True), a)
    assert ea.gradcheck(lambda a: L.svd(a, compute_uv=False), a)
    assert ea.gradcheck(_qr_gauge_free, a)
    assert ea.gradcheck(lambda a: _qr_gauge_free(a, "complete"), a)
    assert ea.gradcheck(lambda a: L.qr(a, "r"), a)


BATCH = (2, 1, 1, 1, 1)  # five batch axes, the second not of the matrices' size


@pytest.mark.parametrize(
    ("f", "make", "core"),
    [
        (L.inv, general, (3, 3)),
        (L.cholesky, hermitian, (3, 3)),
        (lambda a: L.eigh(a)[1], hermitian, (3, 3)),
        (lambda a: L.qr(a)[1], _normal, (4, 3)),
    ],
    ids=["inv", "cholesky", "eigh", "qr"],
)
def test_any_number_of_batch_axes(f, make, core):
    """The batch axes ride along, however many: a stack's gradient and tangent are those of
    each of its matrices."""
    x, t = make(BATCH + core), _normal(BATCH + core)
    w = RNG.standard_normal(np.shape(f(x)))
    loss = lambda x, w: ea.sum(ea.abs(f(x)) * w)
    g, (_, tangent) = ea.grad(loss)(x, w), ea.jvp(f, (x,), (t,))
    for i in range(BATCH[0]):
        one = (i, 0, 0, 0, 0)
        assert_close(g[one], ea.grad(loss)(x[one], w[one]))
        assert_close(tangent[one], ea.jvp(f, (x[one],), (t[one],))[1])


@pytest.mark.parametrize("mapped", ["a", "b", "both", "a_on_axis_1"])
def test_vmap_of_solve_over_either_operand(mapped, no_loops):
    """solve's batch rule for each operand mapped (a stack of right-hand sides joins b's columns,
    one matrix factored once), and for both, against one solve per example."""
    a, b = general((3, 3, 3)), _normal((3, 3, 2))
    in_axes, args = {
        "a": ((0, None), (a, b[0])),
        "b": ((None, 0), (a[0], b)),
        "both": ((0, 0), (a, b)),
        "a_on_axis_1": ((1, 0), (np.moveaxis(a, 0, 1), b)),
    }[mapped]
    one = lambda x, i, fixed: x[0] if fixed else x[i]
    want = [np.linalg.solve(one(a, i, mapped == "b"), one(b, i, mapped == "a")) for i in range(3)]
    assert_close(ea.vmap(L.solve, in_axes=in_axes)(*args), np.stack(want))


@both_modes
def test_solve_in_both_operands_with_broadcast_batches():
    a, b = general((2, 1, 3, 3)), _normal((4, 3, 2))
    assert ea.gradcheck(lambda a, b: L.solve(a, b), a, b)
    assert ea.gradcheck(lambda a, b: L.solve(a, b), a, _normal(3))  # one vector for every matrix
    ac, bc = general((3, 3), COMPLEX), _normal((3,), COMPLEX)
    assert ea.gradcheck(lambda a, b: L.solve(a, b), ac, bc)


@both_modes
def test_real_matrices_differentiate_their_vectors_too():
    """For real input the sign convention of LAPACK is locally constant: the vectors
    themselves have derivatives, checked against numpy's own by central differences."""
    s = hermitian((4, 4))
    check_op(lambda a: L.eigh(a)[1], lambda a: np.linalg.eigh(a)[1], s, rtol=1e-5, atol=1e-7)
    m = _normal((5, 3))
    check_op(lambda a: L.svd(a, full_matrices=False)[0], lambda a: np.linalg.svd(a, False)[0], m, rtol=1e-5)
    check_op(lambda a: L.svd(a)[2], lambda a: np.linalg.svd(a)[2], m, rtol=1e-5)
    check_op(lambda a: L.qr(a)[0], lambda a: np.linalg.qr(a)[0], m, rtol=1e-5)
    check_op(L.inv, np.linalg.inv, general((3, 3)))
    check_op(L.cholesky, np.linalg.cholesky, s)


def _precision_cases(dtype):
    """(function, input) pairs through every rule, in `dtype`."""
    a, s, m = general((3, 3), dtype), hermitian((3, 3), dtype), _normal((4, 3), dtype)
    return [
        (L.inv, a),
        (L.det, a),
        (lambda a: L.solve(a, np.ones((3, 1), dtype)), a),
        (L.cholesky, s),
        (lambda a: L.eigh(a)[0], s),
        (lambda a: L.svd(a)[1], m),
        (lambda a: L.qr(a)[1], m),
        (lambda a: L.norm(a, "nuc"), m),
    ]


@both_modes
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_single_precision_stays_single_precision(dtype):
    double = np.complex128 if np.dtype(dtype).kind == "c" else np.float64
    for f, x in _precision_cases(dtype):
        loss = lambda x, f=f: ea.sum(ea.abs(f(x)))
        g = ea.grad(loss)(x)
        assert g.dtype == dtype
        assert_close(g, ea.grad(loss)(x.astype(double)), rtol=1e-3, atol=1e-4)  # single's accuracy
        _, t = ea.jvp(f, (x,), (np.ones_like(x),))
        assert t.dtype == f(x).dtype


@pytest.mark.parametrize("dtype", [np.float32, np.complex64, np.float64, np.complex128])
def test_derivative_programs_keep_the_input_precision(dtype):
    """No step of a derivative program leaves the input's precision: no constant or intermediate
    in double precision for a single-precision input (the results cast back would hide it), nor
    in single precision for a double one."""
    other = ("f32", "c64") if np.dtype(dtype) in (np.float64, np.complex128) else ("f64", "c128")
    cases = (
        _precision_cases(dtype)
        + [
            (lambda a: L.slogdet(a)[1], general((3, 3), dtype)),
            (lambda a: L.eigh(a)[1], hermitian((3, 3), dtype)),
            (lambda a: L.svd(a)[0], _normal((4, 3), dtype)),
            (lambda a: L.qr(a, "complete")[0], _normal((4, 3), dtype)),
        ]
        + [(ours, np.zeros(shape, dtype)) for shape, ours, _ in EMPTY]
    )
    for f, x in cases:
        loss = lambda x, f=f: ea.sum(ea.abs(f(x)))
        grad_program = ea.make_graph(ea.grad(loss))(x)
        jvp_program = ea.make_graph(lambda x, t, f=f: ea.jvp(f, (x,), (t,))[1])(x, x)
        for program in (grad_program, jvp_program):
            assert not any(d in str(program) for d in other), str(program)


# -- closed forms ---------------------------------------------------------------------------------


@both_modes
def test_determinant_closed_forms():
    a = general((2, 3, 3))
    inv_t = np.swapaxes(np.linalg.inv(a), -1, -2)
    assert_close(ea.grad(lambda a: ea.sum(L.det(a)))(a), np.linalg.det(a)[:, None, None] * inv_t)
    assert_close(ea.grad(lambda a: ea.sum(L.slogdet(a)[1]))(a), inv_t)
    assert_close(ea.grad(lambda a: ea.sum(L.slogdet(a)[0]))(a), np.zeros_like(a))  # a real sign is flat
    # d tr(A⁻¹) = -tr(A⁻¹ dA A⁻¹): the gradient is -(A⁻²)ᵀ
    assert_close(ea.grad(lambda a: ea.trace(L.inv(a)))(a[0]), -(inv_t[0] @ inv_t[0]))
    c = _normal((3, 2))
    x = np.linalg.solve(a[0], c)
    ga, gc = ea.grad(lambda a, c: ea.sum(L.solve(a, c) * c), argnums=(0, 1))(a[0], c)
    lam = np.linalg.solve(a[0].T, c)
    assert_close(gc, lam + x)
    assert_close(ga, -lam @ x.T)


@both_modes
def test_complex_determinant_is_holomorphic():
    a = general((3, 3), COMPLEX)
    _, t = ea.jvp(L.det, (a,), (np.eye(3, dtype=COMPLEX),))
    assert_close(t, np.linalg.det(a) * np.trace(np.linalg.inv(a)))


def _cofactors(a):
    """C[i, j] = (-1)^(i+j) det(a without row i and column j): the gradient of det, by minors."""
    n = a.shape[-1]
    minor = lambda i, j: np.linalg.det(np.delete(np.delete(a, i, 0), j, 1)) if n > 1 else 1.0
    return np.array([[(-1) ** (i + j) * minor(i, j) for j in range(n)] for i in range(n)])


def _second_cofactors(a):
    """H[i, j, k, l] = d² det / da_ij da_kl: the signed minor without rows i, k and columns j, l."""
    n = a.shape[-1]
    h = np.zeros((n,) * 4, a.dtype)
    for i, j, k, m in np.ndindex(*h.shape):
        if i != k and j != m:
            sign = (-1) ** (i + j + k + m) * np.sign(k - i) * np.sign(m - j)
            h[i, j, k, m] = sign * np.linalg.det(np.delete(np.delete(a, [i, k], 0), [j, m], 1))
    return h


@both_modes
@pytest.mark.parametrize("dtype", [REAL, COMPLEX])
def test_determinant_derivatives_at_singular_matrices(dtype):
    """det is a polynomial: its gradient is the cofactor matrix and its Hessian the second-order
    cofactors at every matrix, singular ones included (rank n - 1: a rank-one gradient; rank
    n - 2: a zero gradient but not a zero Hessian), in every mode (as JAX's, whose Hessian
    itself is NaN or wrong at rank n - 2 from n = 4 on)."""
    exact = np.array([[1.0, 2.0], [2.0, 4.0]], dtype)  # LU meets an exact zero pivot
    assert_close(ea.grad(L.det)(exact.real), [[4.0, -2.0], [-2.0, 1.0]])
    mats = [exact, np.zeros((3, 3), dtype)]
    for n, rank in ((3, 2), (4, 3), (4, 2), (5, 3)):  # products: singular to rounding
        mats.append(_normal((n, rank), dtype) @ _normal((rank, n), dtype))
    for a in mats:
        c, h = _cofactors(a), _second_cofactors(a)
        e = _normal(a.shape, dtype)
        assert_close(ea.jvp(L.det, (a,), (e,))[1], np.sum(c * e), atol=1e-10)
        assert_close(ea.vjp(L.det, a)[1](np.ones((), dtype))[0], c, atol=1e-10)
        batch = np.stack([a, a + np.eye(len(a))])  # a singular and an invertible matrix
        got = ea.vjp(L.det, batch)[1](np.ones(2, dtype))[0]
        assert_close(got, np.stack([c, _cofactors(batch[1])]), atol=1e-10)
        hess_e = np.einsum("ijkl,kl->ij", h, e)
        modes = ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")
        if dtype == REAL:
            assert_close(ea.grad(L.det)(a), c, atol=1e-10)
            assert_close(ea.hessian(L.det)(a), h, atol=1e-10)
            assert_close(ea.jacrev(ea.grad(L.det))(a), h, atol=1e-10)
            hessians = ea.vmap(ea.hessian(L.det))(batch)  # the matrix mapped, its tangents too
            assert_close(hessians, np.stack([h, _second_cofactors(batch[1])]), atol=1e-10)
            for mode in modes:
                assert_close(ea.hvp(L.det, (a,), (e,), mode=mode)[0], hess_e, atol=1e-10)
        jvp_of_jvp = ea.jvp(lambda a, e=e: ea.jvp(L.det, (a,), (e,))[1], (a,), (e,))[1]
        assert_close(jvp_of_jvp, np.sum(hess_e * e), atol=1e-10)
    single = exact.real.astype(np.float32)
    assert ea.grad(L.det)(single).dtype == ea.hessian(L.det)(single).dtype == np.float32
    assert_close(ea.hessian(L.det)(single), _second_cofactors(exact.real), atol=1e-6)


@both_modes
def test_third_derivative_of_det_at_an_invertible_matrix():
    a, e = general((3, 3)), _normal((3, 3))
    assert ea.gradcheck(lambda a: ea.sum(ea.hvp(L.det, (a,), (e,))[0] * e), a)
    # for n = 3, d³ det / da_ij da_kl da_mn = ε_ikm ε_jln (Levi-Civita), in both modes
    levi = np.zeros((3, 3, 3))
    for (i, j, k), sign in (
        ((0, 1, 2), 1),
        ((1, 2, 0), 1),
        ((2, 0, 1), 1),
        ((0, 2, 1), -1),
        ((2, 1, 0), -1),
        ((1, 0, 2), -1),
    ):
        levi[i, j, k] = sign
    third = np.einsum("ikm,jln->ijklmn", levi, levi)
    assert_close(ea.jacfwd(ea.hessian(L.det))(a), third, atol=1e-10)
    assert_close(ea.jacrev(ea.hessian(L.det))(a), third, atol=1e-10)
    with pytest.raises(L.LinAlgError):
        ea.jvp(lambda a: ea.hvp(L.det, (a,), (e,))[0], (np.ones((3, 3)),), (e,))


@both_modes
def test_symmetric_closed_forms_read_one_triangle():
    s = hermitian((4, 4))
    lower = np.tril(np.ones((4, 4)), -1)
    # Σλ = tr(S): only the diagonal counts
    assert_close(ea.grad(lambda a: ea.sum(L.eigh(a)[0]))(s), np.eye(4))
    # Σλ² = ‖S‖²_F with S mirrored from the lower triangle: 2 on the diagonal, 4 below, 0 above
    assert_close(ea.grad(lambda a: ea.sum(L.eigh(a)[0] ** 2))(s), s * (2 * np.eye(4) + 4 * lower))
    assert_close(ea.grad(lambda a: ea.sum(L.eigh(a, "U")[0] ** 2))(s), s * (2 * np.eye(4) + 4 * lower.T))
    # so do the singular values alone of a Hermitian matrix (Σσ² = Σλ²), as numpy's read it
    sv = lambda a: L.svd(a, compute_uv=False, hermitian=True)
    assert_close(ea.grad(lambda a: ea.sum(sv(a) ** 2))(s), s * (2 * np.eye(4) + 4 * lower))
    junk = s + np.triu(np.arange(16.0).reshape(4, 4), 1)  # read only below the diagonal
    assert_close(sv(junk), np.linalg.svd(junk, compute_uv=False, hermitian=True))
    # log det S = 2 Σ log diag(L): the gradient is S⁻¹ folded onto the lower triangle
    logdet = lambda a: 2 * ea.sum(ea.log(ea.diagonal(L.cholesky(a))))
    si = np.linalg.inv(s)
    assert_close(ea.grad(logdet)(s), si * (np.eye(4) + 2 * lower))


@both_modes
def test_norm_closed_forms():
    m = _normal((4, 3))
    u, _, vh = np.linalg.svd(m, full_matrices=False)
    assert_close(ea.grad(lambda a: L.norm(a, "nuc"))(m), u @ vh)
    assert_close(ea.grad(lambda a: L.norm(a, 2))(m), np.outer(u[:, 0], vh[0]))
    assert_close(ea.grad(lambda a: L.norm(a, -2))(m), np.outer(u[:, -1], vh[-1]))
    assert_close(ea.grad(lambda a: L.norm(a))(m), m / np.linalg.norm(m))
    # the Euclidean norm of zero is zero, and its subgradient there is zero, not NaN
    for ord_ in (None, 2):
        assert L.norm(np.zeros(3), ord_, axis=-1) == 0
        assert_close(ea.grad(lambda a, o=ord_: L.norm(a, o, axis=-1))(np.zeros(3)), np.zeros(3))
    assert_close(ea.grad(lambda a: ea.sum(L.norm(a, axis=1)))(np.zeros((2, 2))), np.zeros((2, 2)))


# -- second order ---------------------------------------------------------------------------------

C4 = RNG.standard_normal((4, 4))


SECOND = {
    "inv": (lambda a: ea.sum(L.inv(a) * C4), general),
    "solve": (lambda a: ea.sum(L.solve(a, C4[:, :2]) ** 2), general),
    "det": (L.det, general),
    "logabsdet": (lambda a: L.slogdet(a)[1], general),
    "cholesky": (lambda a: ea.sum(L.cholesky(a) * C4), hermitian),
    "eigenvalues": (lambda a: ea.sum(L.eigh(a)[0] ** 3), hermitian),
    "eigenvectors": (lambda a: ea.sum(_herm_out(L.eigh(a)[1][:, :2]) * C4), hermitian),
    "svd": (lambda a: ea.sum(ea.abs(L.svd(a)[0] * C4)) + ea.sum(L.svd(a)[1] ** 2), general),
    "qr": (lambda a: ea.sum(L.qr(a)[0] * C4) + ea.sum(L.qr(a)[1] ** 2), general),
    "nuclear": (lambda a: L.norm(a, "nuc"), general),
    "spectral": (lambda a: L.norm(a, 2), general),
}


@both_modes
@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_order(name):
    f, make = SECOND[name]
    a = make((4, 4))
    assert ea.gradcheck(ea.grad(f), a, atol=1e-5, rtol=1e-4)
    h = ea.hessian(f)(a)
    assert h.shape == (4, 4, 4, 4)
    flat = h.reshape(16, 16)
    assert_close(flat, flat.T, atol=1e-6)
    g = ea.grad(f)
    assert_close(h[1, 2], numeric_grad(lambda x: g(x)[1, 2], a, eps=1e-5), rtol=1e-4, atol=1e-6)


@both_modes
@pytest.mark.parametrize("shape", [(4, 3), (3, 4)])
def test_second_order_rectangular(shape):
    a = _normal(shape)
    c = RNG.standard_normal(shape)
    k = min(shape)

    def f_svd(a):
        u, s, vh = L.svd(a)
        return ea.sum(ea.abs(u[:, :k] @ (s[:, None] * vh[:k]) * c))

    f_qr = lambda a: ea.sum(L.qr(a)[1] ** 2) + ea.sum(L.qr(a)[0][:, :1])
    for f in (f_svd, f_qr):
        assert ea.gradcheck(ea.grad(f), a, atol=1e-5, rtol=1e-4)


@both_modes
def test_second_order_complex():
    s = hermitian((3, 3), COMPLEX)
    c = RNG.standard_normal((3, 3))
    assert ea.gradcheck(ea.grad(lambda a: ea.sum(ea.abs(_herm_out(L.eigh(a)[1][:, :1])) ** 2 * c)), s)
    f = lambda a: L.slogdet(a)[1] + ea.sum(ea.abs(L.inv(a)) ** 2)
    assert ea.gradcheck(ea.grad(f), general((3, 3), COMPLEX))


# -- degenerate spectra ---------------------------------------------------------------------------


@both_modes
def test_repeated_eigenvalues_give_finite_gauge_invariant_gradients():
    q = np.linalg.qr(RNG.standard_normal((4, 4)))[0]
    s = q @ np.diag([1.0, 1.0, 3.0, 5.0]) @ q.T
    c = RNG.standard_normal((4, 4))
    proj = lambda a: ea.sum(_herm_out(L.eigh(a)[1][:, :2]) * c)  # the whole eigenspace of 1
    g = ea.grad(proj)(s)
    assert np.all(np.isfinite(g))
    assert_close(g, numeric_grad(proj, s, eps=1e-6), rtol=1e-5, atol=1e-6)
    assert_close(ea.grad(lambda a: ea.sum(L.eigh(a)[0] ** 2))(np.eye(3)), 2 * np.eye(3))
    # a repeated singular value: the nuclear norm's gradient U Vh, and the projector onto
    # the left singular vectors of the repeated value, are still defined
    p = np.linalg.qr(RNG.standard_normal((4, 4)))[0]
    m = q @ np.diag([2.0, 2.0, 1.0, 0.5]) @ p
    assert_close(ea.grad(lambda a: L.norm(a, "nuc"))(m), q @ p, atol=1e-10)
    top = lambda a: ea.sum(_herm_out(L.svd(a)[0][:, :2]) * c)
    assert_close(ea.grad(top)(m), numeric_grad(top, m), rtol=1e-5, atol=1e-6)
    # in single precision the ties are split by single's rounding, and its tolerance still sees them
    for f, x in ((proj, s), (top, m)):
        assert_close(ea.grad(f)(x.astype(np.float32)), ea.grad(f)(x), rtol=1e-4, atol=1e-5)


@both_modes
@pytest.mark.parametrize("tall", [True, False])
def test_a_singular_value_lost_to_rounding_adds_no_tangent_outside_the_span(tall):
    """A rank-1 4x2 (or 2x4) matrix: its second singular value is rounding. The tangent of its
    singular vector (of U for a tall matrix, of V for a wide one) has no part outside span(U)
    (span(V)): 1 / s is taken as 0 there, where dA v / s would be rounding's noise blown up."""
    a = np.outer([1.0, 2.0, -1.0, 0.5], [3.0, -1.0])
    da = RNG.standard_normal((4, 2))
    if not tall:
        a, da = a.T, da.T
    (u, s, vh), (du, _, dvh) = ea.jvp(lambda a: tuple(L.svd(a, full_matrices=False)), (a,), (da,))
    u, s, v = np.asarray(u), np.asarray(s), np.asarray(vh).T
    basis, tangent, other, d = (u, np.asarray(du), v, da) if tall else (v, np.asarray(dvh).T, u, da.T)
    outside = tangent - basis @ (basis.T @ tangent)
    assert s[1] < 1e-12
    assert_close(outside[:, 1], np.zeros(4), atol=1e-12)
    # the kept column's does leave it: (I - U Uᵀ) dA v₀ / s₀ (for V: with dAᵀ and u₀)
    assert_close(outside[:, 0], (d @ other[:, 0] - basis @ (basis.T @ d @ other[:, 0])) / s[0])


@both_modes
def test_the_one_norm_is_piecewise_linear_to_second_order():
    """norm(x, 1) = sum |x|: its Hessian is 0, also where an entry is 0; one `abs` and one sum,
    without the p-norm's two powers (|x| ** 1, then ** (1 / 1))."""
    x = np.array([1.5, 0.0, -2.0])
    assert [e.op for e in ea.make_graph(lambda v: L.norm(v, 1))(x).equations] == ["abs", "einsum"]
    assert_close(ea.hessian(lambda v: L.norm(v, 1))(x), np.zeros((3, 3)))
    assert_close(ea.grad(lambda v: L.norm(v, 1))(x), [1.0, 0.0, -1.0])


# -- staged programs and the batched Jacobian path ------------------------------------------------

PROGRAMS = {
    "inv": (L.inv, general),
    "solve": (lambda a: L.solve(a, np.ones(3)), general),
    "det": (L.det, general),
    "slogdet": (lambda a: L.slogdet(a)[1] * L.slogdet(a)[0], general),
    "cholesky": (L.cholesky, hermitian),
    "eigh": (lambda a: L.eigh(a)[0] + ea.sum(L.eigh(a)[1] ** 3, axis=0), hermitian),
    "svd": (lambda a: L.svd(a)[1] + ea.sum(ea.abs(L.svd(a)[0]), axis=0), general),
    "qr": (lambda a: L.qr(a)[1] + L.qr(a)[0], general),
    "norm": (lambda a: L.norm(a, "nuc") + L.norm(a, 1) + L.norm(a, axis=0), general),
}


@both_modes
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_staged_derivative_programs_replay_on_new_inputs(name):
    """The VJP and JVP rules stage operations only (no value read in Python, nothing
    frozen): the derivative programs traced at one matrix run correctly at another."""
    f, make = PROGRAMS[name]
    a, a2 = make((3, 3)), make((3, 3))
    u = RNG.standard_normal(np.shape(f(a)))
    loss = lambda a: ea.sum(f(a) * u)
    grad_program = ea.make_graph(ea.grad(loss))(a)
    assert_close(grad_program(a2), ea.grad(loss)(a2))
    jvp_program = ea.make_graph(lambda a, t: ea.jvp(f, (a,), (t,))[1])(a, a)
    t = RNG.standard_normal((3, 3))
    assert_close(jvp_program(a2, t), ea.jvp(f, (a2,), (t,))[1])
    jitted = ea.jit(ea.grad(loss))
    assert_close(jitted(a2), ea.grad(loss)(a2))
    assert ea.gradcheck(ea.jit(f), a2)


@both_modes
def test_programs_list_the_linalg_primitives():
    a = general((3, 3))
    assert "slogdet a" in str(ea.make_graph(lambda a: L.slogdet(a)[1])(a))
    assert "inv a" in str(ea.make_graph(ea.grad(lambda a: L.slogdet(a)[1]))(a))
    text = str(ea.jit(ea.grad(lambda a: ea.sum(L.solve(a, np.ones((3, 2)))))).lower(a))
    assert "solve" in text
    # a real sign is locally constant: its tangent is a constant zero, of its dtype (no
    # complex arithmetic, no double precision for a single-precision matrix)
    a32 = a.astype(np.float32)
    jvp = ea.make_graph(lambda a, t: ea.jvp(lambda a: L.slogdet(a)[0], (a,), (t,))[1])(a32, a32)
    assert "f32" in str(jvp) and not any(t in str(jvp) for t in ("f64", "c64", "c128"))


@pytest.fixture
def no_loops(monkeypatch):
    """Fail if a batch rule is missing (vmap would fall back to a loop over the batch)."""

    def refuse(prim, *args):
        raise AssertionError(f"{prim} has no batch rule: vmap fell back to a loop")

    monkeypatch.setattr(einad.transforms.batching, "_loop", refuse)


@both_modes
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_jacobians_take_the_batched_path(name, no_loops):
    f, make = PROGRAMS[name]
    a = make((2, 3, 3))[0]
    jf, jr = ea.jacfwd(f)(a), ea.jacrev(f)(a)
    assert_close(jf, jr, atol=1e-8)
    u = RNG.standard_normal(np.shape(f(a)))
    assert_close(np.tensordot(u, jr, axes=u.ndim), numeric_grad(lambda x: np.sum(u * np.asarray(f(x))), a))


@both_modes
def test_solve_jacobians_in_both_operands(no_loops):
    a, b = general((2, 3, 3)), _normal(3)
    for argnums in (0, 1):
        jf = ea.jacfwd(lambda a, b: L.solve(a, b), argnums)(a, b)
        jr = ea.jacrev(lambda a, b: L.solve(a, b), argnums)(a, b)
        assert_close(jf, jr)
    h = ea.hessian(lambda a: ea.sum(L.solve(a, b) ** 2))(a[0])
    assert_close(h.reshape(9, 9), h.reshape(9, 9).T)


@both_modes
def test_hessians_of_decompositions_take_the_batched_path(no_loops):
    s = hermitian((3, 3))
    losses = (
        lambda a: ea.sum(L.eigh(a)[0] ** 3),
        lambda a: L.norm(a, "nuc"),
        lambda a: ea.sum(L.cholesky(a)),
    )
    for f in losses:
        assert_close(ea.hessian(f)(s), ea.jacrev(ea.grad(f))(s), atol=1e-8)


@both_modes
def test_imperative_backward():
    x = ea.tensor(general((3, 3)), requires_grad=True)
    L.slogdet(x)[1].backward()
    assert_close(x.grad, np.linalg.inv(x.numpy()).T)


# -- on every array library ----------------------------------------------------------------


LIB_RNG = np.random.default_rng(7)


def _mT(x):
    return np.swapaxes(x, -1, -2)


def lib_general(shape):
    """A well-conditioned square matrix (stack)."""
    return LIB_RNG.standard_normal(shape) + 3 * np.eye(shape[-1])


def spd(shape):
    """Symmetric positive definite, with distinct eigenvalues (almost surely)."""
    m = LIB_RNG.standard_normal(shape)
    return m @ _mT(m) + shape[-1] * np.eye(shape[-1])


def weights(shape):
    return LIB_RNG.standard_normal(shape)


def _tol(dtype, grad=False):
    if np.dtype(dtype) == np.float32:
        return 2e-3 if grad else 2e-4
    return 1e-8


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
A = lib_general((2, 3, 3))


S = spd((2, 3, 3))


B = LIB_RNG.standard_normal((2, 3, 2))


R = LIB_RNG.standard_normal((2, 4, 3))  # tall, full column rank


W = LIB_RNG.standard_normal((3, 4))  # wide


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
    # float32 on dask too: the lazy result declares its dtype before any block is computed
    for dtype in [np.float64, np.float32] if lib.name == "dask" else _dtypes(lib):
        xs = _inputs(lib, arrays, dtype)
        refs = [np.asarray(x, dtype) for x in arrays]
        for ours_fn, np_fn, absolute in outputs:
            ours = ours_fn(*xs)
            raw = strip(ours)
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
SECOND_MODES = [
    ("inv", "fwd-over-rev"),
    ("solve", "rev-over-rev"),
    ("det", "fwd-over-rev"),
    ("slogdet", "rev-over-rev"),
    ("cholesky", "fwd-over-rev"),
    ("eigh", "rev-over-rev"),
    ("svd", "fwd-over-rev"),
    ("qr", "rev-over-rev"),
]


@pytest.mark.parametrize(("name", "mode"), SECOND_MODES)
def test_second_derivatives_match_numpy(lib, name, mode):
    arrays, make, _, _ = CASES[name]
    arrays = [x[0] for x in arrays]
    w_np = [w[0] for w in WEIGHTS[name]]
    tangents = [LIB_RNG.standard_normal(np.shape(x)) for x in arrays]
    want = ea.hvp(make(w_np), arrays, tangents, mode)
    w = _inputs(lib, w_np, np.float64)
    got = ea.hvp(make(w), _inputs(lib, arrays, np.float64), _inputs(lib, tangents, np.float64), mode)
    for g, ref in zip(got, want):
        assert lib.owns(g)
        if lib.name == "dask":
            assert isinstance(g, lib.module.Array)
        assert_close(lib.numpy(g), ref, rtol=1e-7, atol=1e-7)


# dask is left out for time: a staged gradient on dask takes seconds
@pytest.mark.parametrize("name", ["numpy", "array_api_strict", "torch"])
def test_staged_gradients_make_constants_in_the_library(name):
    """Under ea.jit the rules' constants (cholesky's triangle masks) are made in the library and on
    the device of the value a staged operand stands for."""
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    arrays, make, _, _ = CASES["cholesky"]
    x, w = arrays[0][0], WEIGHTS["cholesky"][0][0]
    got = compiled(ea.jit(ea.grad(make([lib.asarray(w)]))))(lib.asarray(x))
    assert lib.owns(got)
    assert_close(lib.numpy(got), ea.grad(make([w]))(x))


def test_dask_blocks_declare_what_they_compute():
    """On dask each primitive maps numpy.linalg over the blocks, lazily: the result declares the
    shape, dtype and dimensions its blocks compute (the decompositions' packed parts included)."""
    lib = load("dask")
    if lib is None:
        pytest.skip("dask is not installed")
    from einad.core import bind
    from einad.rules.linalg import cholesky_p, det_p, eigh_p, inv_p, qr_p, slogdet_p, solve_p, svd_p

    cases = [
        (inv_p, [A], {}),
        (det_p, [A], {}),
        (slogdet_p, [A], {}),
        (solve_p, [A, B], {}),
        (cholesky_p, [S], {}),
        (eigh_p, [S[:, None]], {"UPLO": "L"}),  # two batch axes
        (svd_p, [R], {"full_matrices": True, "hermitian": False}),
        (svd_p, [W], {"full_matrices": False, "hermitian": False}),
        (qr_p, [R], {"complete": True}),
        (qr_p, [R], {"complete": False}),  # tall: k = n columns of Q
        (qr_p, [W], {"complete": False}),
    ]
    for dtype in (np.float64, np.float32):
        for prim, xs, params in cases:
            xs = [np.asarray(x, dtype) for x in xs]
            out = strip(bind(prim, [lib.asarray(x) for x in xs], params))
            got, want = out.compute(), bind(prim, xs, params)
            assert (out.shape, out.dtype) == (got.shape, got.dtype) == (want.shape, dtype)


@pytest.mark.parametrize("name", ["array_api_strict", "torch"])
def test_solve_refuses_arrays_of_two_libraries(name):
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    for a, b in ((np.eye(2), lib.asarray(np.ones((2, 1)))), (lib.asarray(np.eye(2)), np.ones((2, 1)))):
        with pytest.raises(TypeError, match="arrays of two libraries in one call"):
            L.solve(a, b)


def test_solve_vector_right_hand_side(lib):
    a, b, w3 = A[0], B[0, :, 0], W[0, :3]
    want = ea.grad(lambda a, b: wsum(w3, L.solve(a, b)), argnums=(0, 1))(a, b)
    w = lib.asarray(w3)
    out = L.solve(lib.asarray(a), lib.asarray(b))
    assert lib.owns(strip(out))
    assert_close(lib.numpy(strip(out)), np.linalg.solve(a, b))
    got = ea.grad(lambda a, b: wsum(w, L.solve(a, b)), argnums=(0, 1))(lib.asarray(a), lib.asarray(b))
    for g, ref in zip(got, want):
        assert lib.owns(g)
        assert_close(lib.numpy(g), ref)


def _lib_complex(x):
    return x + 1j * LIB_RNG.standard_normal(np.shape(x))


AC = _lib_complex(A)


_K = LIB_RNG.standard_normal(S.shape)


SC = S + 0.5j * (_K - _mT(_K))  # Hermitian, still positive definite


JUNK = _lib_complex(LIB_RNG.standard_normal(S.shape))  # in the triangle numpy does not read


RC = _lib_complex(R)  # tall


def test_integer_and_non_square_matrices_on_every_library(lib):
    """numpy.linalg's checks before the library's call: integers become float64, and the square
    functions refuse a non-square matrix with numpy's LinAlgError (svd too with `hermitian`: numpy
    then takes it by eigh)."""
    ints = lib.asarray(np.array([[2, 1], [1, 3]]))
    for f in (L.inv, L.det, L.cholesky, lambda a: L.eigh(a)[0], lambda a: L.qr(a)[1]):
        out = strip(f(ints))
        assert lib.owns(out) and dtype_of(out) == np.float64
    for f in (L.inv, L.det, L.slogdet, L.cholesky, L.eigh, lambda a: L.svd(a, hermitian=True)):
        with pytest.raises(L.LinAlgError, match="^Last 2 dimensions of the array must be square$"):
            f(lib.asarray(np.ones((2, 3))))


def test_complex_values_match_numpy(lib):
    """Complex matrices on every library give numpy.linalg's values: a complex sign packed with
    a real log (slogdet), and the triangle numpy reads of a Hermitian matrix, the upper one of
    eigh(UPLO="U") and the lower one of svd(hermitian=True) mirrored with its conjugate (the
    standard's eigh reads the lower triangle, and its svd has no `hermitian`)."""
    upper, lower = np.triu(SC) + np.tril(JUNK, -1), np.tril(SC) + np.triu(JUNK, 1)
    cases = [
        (L.inv, np.linalg.inv, [AC]),
        (L.det, np.linalg.det, [AC]),
        (lambda a: tuple(L.slogdet(a)), np.linalg.slogdet, [AC]),
        (L.solve, np.linalg.solve, [AC, _lib_complex(B)]),
        (L.cholesky, np.linalg.cholesky, [lower]),
        (lambda a: L.eigh(a, "U")[0], lambda a: np.linalg.eigh(a, "U")[0], [upper]),
        (lambda a: L.eigh(a, "L")[0], lambda a: np.linalg.eigh(a, "L")[0], [lower]),
        (lambda a: ea.abs(L.qr(a, "complete")[1]), lambda a: np.abs(np.linalg.qr(a, "complete")[1]), [RC]),
        (lambda a: L.svd(a, hermitian=True)[1], lambda a: np.linalg.svd(a, hermitian=True)[1], [lower]),
    ]
    for ours, theirs, xs in cases:
        got = _tuple(ours(*[lib.asarray(x) for x in xs]))
        want = theirs(*xs)
        for g, w in zip(got, want) if isinstance(got, tuple) else [(got, want)]:
            assert lib.owns(strip(g))
            g = lib.numpy(strip(g))
            assert g.dtype == np.asarray(w).dtype
            assert_close(g, w, rtol=1e-10, atol=1e-10)
    w, v = (lib.numpy(strip(t)) for t in L.eigh(lib.asarray(upper), "U"))
    # eigenvectors of SC, not of its conjugate
    assert_close(SC @ v, v * w[..., None, :], rtol=1e-10, atol=1e-10)


def test_singular_matrix_is_linalg_error(lib):
    if lib.name == "dask":  # lazy: numpy.linalg's error comes with the computation
        out = strip(L.inv(lib.asarray(np.zeros((2, 2)))))
        assert isinstance(out, lib.module.Array)
        with pytest.raises(L.LinAlgError):
            out.compute()
        return
    with pytest.raises(L.LinAlgError):
        L.inv(lib.asarray(np.zeros((2, 2))))


EMPTY = [
    ((2, 0, 0), lambda a: L.eigh(a)[0], lambda a: np.linalg.eigh(a)[0]),
    ((2, 0, 0), lambda a: L.eigh(a)[1], lambda a: np.linalg.eigh(a)[1]),
    ((2, 3, 0, 0), lambda a: L.eigh(a)[0], lambda a: np.linalg.eigh(a)[0]),  # two batch axes
    ((3, 0), lambda a: L.svd(a)[1], lambda a: np.linalg.svd(a)[1]),
    ((0, 3), lambda a: L.svd(a)[2], lambda a: np.linalg.svd(a)[2]),
]


@pytest.mark.parametrize("name", ["numpy", "array_api_strict", "torch", "dask"])
def test_empty_matrices_have_empty_derivatives(name):
    """Stacks of 0×0 matrices and matrices without rows or columns have no eigenvalue or singular
    value to compare (an empty spectrum's rounding tolerance): numpy's shapes and values, and
    gradients and tangents of the input's shape, library and dtype."""
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    for shape, ours, theirs in EMPTY:
        x = lib.asarray(np.zeros(shape))
        out = strip(ours(x))
        assert lib.owns(out)
        assert_close(lib.numpy(out), theirs(np.zeros(shape)))
        g = ea.grad(lambda a, f=ours: ea.sum(f(a)))(x)
        _, t = ea.jvp(ours, (x,), (x,))
        for d, want in ((g, shape), (strip(t), np.shape(out))):
            assert lib.owns(d) and tuple(d.shape) == want and dtype_of(d) == np.float64


def test_a_library_without_linalg_is_a_clear_error():
    import types

    from einad.rules.linalg import _call

    fake = types.ModuleType("fakearrays")
    with pytest.raises(
        NotImplementedError,
        match=r"einad.linalg.eigh: the array library fakearrays has no linalg.eigh "
        r"\(the array API standard's linalg extension\)",
    ):
        _call(fake, "eigh", None)


def test_a_librarys_linalg_errors_become_linalgerror_and_others_pass_through():
    """A library's own LinAlgError class (torch's, say) becomes einad's (numpy's), keeping its
    message and chained to it; any other error is the library's."""
    import types

    from einad.rules.linalg import _call

    class FakeLinAlgError(RuntimeError):
        pass

    def fail(error):
        def f(a):
            raise error

        return f

    fake = types.ModuleType("fakearrays")
    fake.linalg = types.SimpleNamespace(
        inv=fail(FakeLinAlgError("the matrix is singular")), det=fail(TypeError("not an array"))
    )
    with pytest.raises(L.LinAlgError, match="^the matrix is singular$") as caught:
        _call(fake, "inv", None)
    assert isinstance(caught.value.__cause__, FakeLinAlgError)
    with pytest.raises(TypeError, match="not an array"):
        _call(fake, "det", None)


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


# -- eig, eigvals, eigvalsh, pinv, lstsq, expm, lu (issue 23: what quimb's decompositions reach) ---


def _scipy_expm(a):
    return pytest.importorskip("scipy.linalg", reason="expm's reference is scipy's").expm(a)


@both_modes
@pytest.mark.parametrize("dtype", DTYPES)
def test_eig_pinv_lstsq_expm_lu_match_numpy_and_scipy(dtype):
    a = general((2, 3, 3), dtype)
    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-10
    ctype = np.result_type(dtype, np.complex64)
    w, v = L.eig(a)
    w_np, v_np = np.linalg.eig(a)
    assert w.dtype == v.dtype == ctype  # complex whatever the values (numpy's dtype depends on them)
    assert_close(w.numpy(), w_np.astype(ctype), rtol=tol, atol=tol)
    assert_close(v.numpy(), v_np.astype(ctype), rtol=tol, atol=tol)
    assert_close(L.eigvals(a).numpy(), w_np.astype(ctype), rtol=tol, atol=tol)
    s = hermitian((2, 3, 3), dtype)
    _close(L.eigvalsh(s), np.linalg.eigvalsh(s), dtype)
    _close(L.eigvalsh(s, "U"), np.linalg.eigvalsh(s, "U"), dtype)
    for shape in RECT:
        r = _normal(shape, dtype)
        _close(L.pinv(r), np.linalg.pinv(r), dtype)
        _close(L.pinv(r, rcond=0.3), np.linalg.pinv(r, rcond=0.3), dtype)
    _close(L.pinv(s, hermitian=True), np.linalg.pinv(s, hermitian=True), dtype)
    for shape in ((5, 3), (3, 5), (3, 3)):
        r = _normal(shape, dtype)
        for rhs in (_normal((shape[0],), dtype), _normal((shape[0], 2), dtype)):
            ours, theirs = L.lstsq(r, rhs), np.linalg.lstsq(r, rhs)
            for o, t in zip(ours, theirs):
                assert o.shape == np.shape(t)
                assert_close(o.numpy(), t, rtol=tol, atol=tol)
    _close(L.expm(0.5 * a), _scipy_expm(0.5 * a).astype(dtype), dtype)
    lu = pytest.importorskip("scipy.linalg", reason="lu's reference is scipy's").lu
    for shape in SQUARE + RECT:
        r = _normal(shape, dtype)
        _close(L.lu(r), lu(r), dtype)
        _close(L.lu(r, permute_l=True), lu(r, permute_l=True), dtype)


def test_lstsq_of_a_rank_deficient_matrix_is_the_minimum_norm_solution():
    r = _normal((5, 2)) @ _normal((2, 3))  # rank 2
    b = _normal(5)
    x, residuals, rank, s = L.lstsq(r, b)
    x_np, _, rank_np, s_np = np.linalg.lstsq(r, b)
    assert int(rank.numpy()) == rank_np == 2
    assert_close(x.numpy(), x_np)
    assert_close(s.numpy(), s_np)
    assert_close(residuals.numpy(), [np.sum((b - r @ x_np) ** 2)])  # computed, where numpy gives none


def test_pinv_takes_a_cutoff_per_matrix_as_numpy():
    """An array of cutoffs broadcasts against the stack, as numpy's: here the rank-one matrix's
    smaller singular value cut by its own cutoff, the others' not; differentiable per matrix."""
    stack = np.stack(
        [_normal((4, 2)), np.outer(_normal(4), _normal(2)) + 1e-9 * _normal((4, 2)), _normal((4, 2))]
    )
    cuts = np.array([1e-15, 1e-6, 1e-15])
    assert_close(L.pinv(stack, rcond=cuts).numpy(), np.linalg.pinv(stack, rcond=cuts))
    assert_close(L.pinv(stack, rtol=cuts).numpy(), np.linalg.pinv(stack, rtol=cuts))
    assert_close(np.linalg.pinv(ea.tensor(stack), cuts), np.linalg.pinv(stack, cuts))
    grid = _normal((2, 3, 3, 3))
    assert_close(
        L.pinv(grid, np.array([[0.1], [0.5]])).numpy(), np.linalg.pinv(grid, np.array([[0.1], [0.5]]))
    )
    assert ea.gradcheck(lambda a: L.pinv(a, rcond=np.array([1e-15, 1e-15])), stack[[0, 2]])
    g = ea.grad(lambda a: ea.sum(L.pinv(a, rcond=cuts)[2] ** 2))(stack)
    assert np.all(g[:2] == 0)
    assert_close(g[2], ea.grad(lambda a: ea.sum(L.pinv(a) ** 2))(stack[2]))
    assert_close(ea.jit(lambda a: L.pinv(a, rcond=cuts))(stack), np.linalg.pinv(stack, rcond=cuts))
    with pytest.raises(ValueError, match="do not broadcast against the stack"):
        L.pinv(stack, rcond=np.ones(4))


def test_lstsq_with_a_negative_rcond_cuts_at_machine_precision_as_numpys():
    """numpy passes rcond to LAPACK's gelsd, where a negative one means machine precision (the
    old ``rcond=-1`` idiom): a zero singular value is then still cut, not inverted."""
    r = _normal((5, 2)) @ _normal((2, 3))  # rank 2
    b = _normal(5)
    x, _, rank, _ = L.lstsq(r, b, rcond=-1)
    x_np, _, rank_np, _ = np.linalg.lstsq(r, b, rcond=-1)
    assert int(rank.numpy()) == rank_np == 2
    assert_close(x.numpy(), x_np)
    assert_close(x.numpy(), np.linalg.pinv(r) @ b)  # the minimum-norm solution


@pytest.mark.parametrize("p", [None, 2, -2, 1, -1, np.inf, -np.inf, "fro", "nuc"])
def test_the_condition_number_of_a_singular_matrix_is_inf_as_numpys(p):
    """numpy and JAX give inf (no warning, no error: the suite makes warnings errors) where a
    matrix is singular: an exact zero pivot (numpy's inverse fails) or a zero singular value,
    here in a stack with regular matrices, whose values and gradients are unchanged."""
    stack = np.stack([[[1.0, 2.0], [2.0, 4.0]], np.zeros((2, 2)), [[2.0, 1.0], [0.5, 3.0]]])
    with np.errstate(all="ignore"):  # (numpy's "nuc" of a singular one fails in its SVD; JAX's: inf)
        want = [np.linalg.cond(m, p) if p != "nuc" or k == 2 else np.inf for k, m in enumerate(stack)]
    got = L.cond(stack, p)
    assert_close(got.numpy(), want, rtol=1e-12)
    assert np.isinf(got.numpy()[1])
    regular = stack[2]
    g = ea.grad(lambda m: ea.sum(L.cond(m, p)[2:]))(stack)
    assert np.all(g[:2] == 0) and np.all(np.isfinite(g))
    assert_close(g[2], ea.grad(lambda m: L.cond(m, p))(regular))
    assert_close(ea.jit(lambda m: L.cond(m, p))(stack), got)


def _eig_gauge_free(a):
    w, v = L.eig(a)
    return w, ea.abs(v), v @ (w[..., :, None] ** 2 * L.inv(v))  # values, |entries|, V Λ² V⁻¹ (= A²)


NEW_GRADS = {
    "eig": (_eig_gauge_free, general),
    "eigvals": (L.eigvals, general),
    "eigvalsh": (lambda a: L.eigvalsh(a, "U"), hermitian),
    "pinv_square": (L.pinv, general),
    "pinv_hermitian": (lambda a: L.pinv(a, hermitian=True), hermitian),
    "expm": (lambda a: L.expm(0.5 * a), general),
}


@both_modes
@pytest.mark.parametrize("dtype", [REAL, COMPLEX])
@pytest.mark.parametrize("name", sorted(NEW_GRADS))
def test_gradients_of_eig_pinv_expm(name, dtype):
    f, make = NEW_GRADS[name]
    assert ea.gradcheck(f, make((2, 3, 3), dtype))
    assert ea.gradcheck(f, make((4, 4), dtype))


@both_modes
@pytest.mark.parametrize("dtype", [REAL, COMPLEX])
@pytest.mark.parametrize("shape", RECT + [(4, 4)])
def test_gradients_of_pinv_lstsq_and_lu(shape, dtype):
    a = _normal(shape, dtype)
    assert ea.gradcheck(L.pinv, a)
    assert ea.gradcheck(lambda a: L.lu(a)[1:], a)  # L and U (P is piecewise constant)
    assert ea.gradcheck(lambda a: L.lu(a, permute_l=True), a)
    if len(shape) == 2:
        b = _normal(shape[:1], dtype)
        assert ea.gradcheck(lambda a, b: L.lstsq(a, b)[:2], a, b)  # the solution and the residuals
        assert ea.gradcheck(lambda a, b: L.lstsq(a, b)[3], a, b)


def test_pinv_of_a_rank_deficient_product_differentiates_along_the_rank():
    """At constant rank pinv is smooth: A = B C (rank 2) differentiated in B and C."""
    b, c = _normal((5, 2)), _normal((2, 4))
    assert ea.gradcheck(lambda b, c: L.pinv(b @ c), b, c)
    assert ea.gradcheck(lambda b, c: L.lstsq(b @ c, np.arange(5.0))[0], b, c)


def test_expm_closed_forms():
    d = np.array([0.5, -1.0, 2.0])
    assert_close(L.expm(np.diag(d)).numpy(), np.diag(np.exp(d)))
    a = general((3, 3))
    ea_, tangent = ea.jvp(L.expm, (a,), (a,))  # d/dt exp(tA) at t = 1 is A exp(A)
    assert_close(tangent, a @ ea_, rtol=1e-9)
    skew = a - a.T
    q = L.expm(skew).numpy()
    assert_close(q @ q.T, np.eye(3), atol=1e-12)  # the exponential of a skew matrix is orthogonal
    # the gradient of tr exp(A) is exp(A)ᵀ
    assert_close(ea.grad(lambda a: ea.trace(L.expm(a)))(a), _scipy_expm(a).T, rtol=1e-9)


def test_a_derivative_through_a_singular_triangular_factor_says_it_is_undefined():
    """qr of a matrix with a zero column (R has a zero on its diagonal) and lu of a singular
    matrix (so has U): their values are fine, their derivatives divide by that zero. The error
    names the decomposition, eagerly, under jit and in forward mode; a singular ``solve`` keeps
    numpy's own error."""
    a = np.array([[3.0, 0.0], [4.0, 0.0]])
    w = np.array([[1.0, 2.0], [3.0, 4.0]])
    qr_loss = lambda a: ea.sum(L.qr(a)[0] * w)
    assert np.isfinite(qr_loss(a).item())
    undefined = pytest.raises(np.linalg.LinAlgError, match="derivative of qr is undefined")
    with undefined:
        ea.grad(qr_loss)(a)
    with undefined:
        ea.jit(ea.grad(qr_loss))(a)
    with undefined:
        ea.jvp(qr_loss, (a,), (np.ones_like(a),))
    pytest.importorskip("scipy.linalg", reason="lu needs scipy")
    singular = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(np.linalg.LinAlgError, match="derivative of lu is undefined"):
        ea.grad(lambda a: ea.sum(L.lu(a)[2] * w))(singular)
    with pytest.raises(np.linalg.LinAlgError, match="^Singular matrix$"):
        L.solve(singular, np.ones(2))
    # a nearly singular factor is numpy's business: large finite derivatives, as JAX's
    assert np.all(np.isfinite(ea.grad(qr_loss)(a + np.array([[0.0, 1e-9], [0.0, 0.0]]))))


NEW_SECOND = {
    "eig": lambda a: ea.sum(ea.real(L.eigvals(a) ** 3)) + ea.sum(ea.abs(L.eig(a)[1]) * C4),
    "pinv": lambda a: ea.sum(L.pinv(a[:, :3]) ** 2),
    "expm": lambda a: ea.sum(L.expm(0.3 * a) * C4),
    "lstsq": lambda a: ea.sum(L.lstsq(a[:, :3], np.arange(4.0))[0] ** 2),
    "lu": lambda a: ea.sum(L.lu(a)[1] * C4) + ea.sum(L.lu(a[:3])[2] ** 3),
}


@both_modes
@pytest.mark.parametrize("name", sorted(NEW_SECOND))
def test_second_order_of_eig_pinv_lstsq_expm(name):
    f = NEW_SECOND[name]
    a = general((4, 4))
    assert ea.gradcheck(ea.grad(f), a, atol=1e-5, rtol=1e-4)
    h = ea.hessian(f)(a).reshape(16, 16)
    assert_close(h, h.T, atol=1e-6)


@both_modes
@pytest.mark.parametrize("name", ["eig", "pinv", "expm", "lu"])
def test_jacobians_of_eig_pinv_expm_lu_take_the_batched_path(name, no_loops):
    f = {"eig": lambda a: ea.abs(L.eig(a)[1]), "pinv": L.pinv, "expm": L.expm, "lu": lambda a: L.lu(a)[2]}[
        name
    ]
    a = general((3, 3))
    assert_close(ea.jacfwd(f)(a), ea.jacrev(f)(a), atol=1e-8)


JAX_NAMES = ("eig", "pinv", "expm", "lu")
JAX_C = _normal((3, 3))
JAX_INPUTS = [general((3, 3), dtype) for dtype in (REAL, COMPLEX)]


def _jax_style_loss(name, a, lib, linalg, expm, lu):
    if name == "eig":
        w, v = linalg.eig(a)
        return lib.sum(lib.real(w * w)) + lib.sum(lib.abs(v) * JAX_C)
    if name == "pinv":
        return lib.sum(lib.abs(linalg.pinv(a[:, :2])) ** 2)
    if name == "lu":
        pl, u = lu(a[:, :2], permute_l=True)
        return lib.sum(lib.abs(pl) ** 2 * JAX_C[:, :2]) + lib.sum(lib.real(u * JAX_C[:2, :2]))
    return lib.sum(lib.real(expm(0.5 * a) * JAX_C))


def jax_gradients(jax, inputs):
    """The reference (run by `jax_reference` in a subprocess): JAX's gradient of each loss at
    each input, eigenvector derivatives opted in (JAX asks: they need distinct eigenvalues)."""

    class Linalg:
        pinv = staticmethod(jax.numpy.linalg.pinv)

        @staticmethod
        def eig(a):
            return jax.lax.linalg.eig(a, compute_left_eigenvectors=False, enable_eigvec_derivs=True)

    def gradients(inputs):
        out = []
        for name in JAX_NAMES:
            for a in inputs:
                loss = lambda a, n=name: _jax_style_loss(
                    n, a, jax.numpy, Linalg, jax.scipy.linalg.expm, jax.scipy.linalg.lu
                )
                out.append(jax.grad(loss)(a))
        return out

    return jax.jit(gradients)(inputs)  # one program: one compilation


@pytest.fixture(scope="module")
def jax_grads():
    grads = jax_reference("tests.rules.test_linalg", "jax_gradients", JAX_INPUTS)
    return dict(zip([(n, k) for n in JAX_NAMES for k in range(len(JAX_INPUTS))], grads))


@pytest.mark.parametrize("name", JAX_NAMES)
def test_eig_pinv_expm_lu_against_jax(name, jax_grads):
    pytest.importorskip("scipy.linalg", reason="expm and lu need scipy")
    for k, a in enumerate(JAX_INPUTS):
        ours = ea.grad(lambda a: _jax_style_loss(name, a, ea, L, L.expm, L.lu))(a)
        assert_close(ours, jax_grads[name, k], rtol=1e-8, atol=1e-10)


def _symmetrized_losses(a, lib, linalg):
    """Losses of eigh, eigvalsh and cholesky at a matrix that is not Hermitian (JAX reads both
    triangles by default: symmetrize_input=True)."""
    w, v = linalg.eigh(a)
    return [
        lib.sum(w**3) + lib.sum(lib.abs(v[:, 0]) * JAX_C[0]),
        lib.sum(lib.exp(linalg.eigvalsh(a))),
        lib.sum(lib.real(linalg.cholesky(a) * JAX_C)),
    ]


def _positive_not_hermitian(dtype):
    m = general((3, 3), dtype)
    return m @ np.conj(m.T) + 3 * np.eye(3) + 0.2 * general((3, 3), dtype)


SYMMETRIZED_INPUTS = [_positive_not_hermitian(dtype) for dtype in (REAL, COMPLEX)]


def jax_symmetrized_gradients(jax, inputs):
    """The reference: JAX's gradient of each `_symmetrized_losses` loss at each input (one jitted
    program: one compilation)."""

    def gradients(inputs):
        return [
            jax.grad(lambda a, k=k: _symmetrized_losses(a, jax.numpy, jax.numpy.linalg)[k])(a)
            for a in inputs
            for k in range(3)
        ]

    return jax.jit(gradients)(inputs)


def test_symmetrize_input_gives_jaxs_hermitian_gradients():
    """``symmetrize_input=True`` (JAX's default) factors ``(a + aᴴ) / 2``: the gradient of a
    matrix that is not Hermitian is JAX's (both triangles, Hermitian); numpy's default reads
    one triangle, the other's gradient is zero."""
    want = jax_reference("tests.rules.test_linalg", "jax_symmetrized_gradients", SYMMETRIZED_INPUTS)

    class Symmetrized:
        eigh = staticmethod(lambda a: L.eigh(a, symmetrize_input=True))
        eigvalsh = staticmethod(lambda a: L.eigvalsh(a, symmetrize_input=True))
        cholesky = staticmethod(lambda a: L.cholesky(a, symmetrize_input=True))

    for j, a in enumerate(SYMMETRIZED_INPUTS):
        for k in range(3):
            g = ea.grad(lambda a, k=k: _symmetrized_losses(a, ea, Symmetrized)[k])(a)
            assert_close(g, want[3 * j + k], rtol=1e-8, atol=1e-10)
            assert_close(g, np.conj(g.T), rtol=1e-8, atol=1e-10)  # Hermitian
        lower = ea.grad(lambda a: ea.sum(L.eigvalsh(a) ** 2))(a)
        assert np.all(lower[np.triu_indices(3, 1)] == 0)


def test_errors_of_eig_pinv_lstsq_expm_come_at_the_call():
    with pytest.raises(L.LinAlgError, match="square"):
        L.expm(np.ones((2, 3)))
    with pytest.raises(L.LinAlgError, match="two-dimensional"):
        L.eig(np.ones(3))
    with pytest.raises(TypeError, match="rcond or rtol"):
        L.pinv(np.eye(2), rcond=0.1, rtol=0.1)
    with pytest.raises(L.LinAlgError, match="Incompatible dimensions"):
        L.lstsq(np.ones((3, 2)), np.ones(4))
    with pytest.raises(L.LinAlgError, match="2-dimensional"):
        L.lstsq(np.ones((2, 3, 2)), np.ones(3))


@pytest.mark.parametrize("name", ["eig", "pinv", "expm", "lu"])
def test_eig_pinv_expm_lu_on_every_library(lib, name):
    if name != "pinv" and lib.name == "array_api_strict":
        pytest.skip(f"the array API standard has no {name}")
    a = lib_general((2, 3, 3))
    w = weights((2, 3, 3))
    f = {
        "eig": lambda x, w: wsum(w, ea.abs(L.eig(x).eigenvectors)) + ea.sum(ea.real(L.eigvals(x))),
        "pinv": lambda x, w: wsum(w, L.pinv(x)),
        "expm": lambda x, w: wsum(w, L.expm(x)),
        "lu": lambda x, w: wsum(w, L.lu(x)[1]) + wsum(w, L.lu(x, permute_l=True)[1]),
    }[name]
    want_value, want_grad = ea.value_and_grad(f)(a, w)
    got_value, got_grad = ea.value_and_grad(f)(lib.asarray(a), lib.asarray(w))
    assert lib.owns(got_grad)
    assert_close(lib.numpy(got_value), want_value, rtol=1e-8)
    assert_close(lib.numpy(got_grad), want_grad, rtol=1e-8, atol=1e-10)


# -- numpy 2's other linalg functions: compositions, checked against numpy.linalg ---------------

_G = np.random.default_rng(31)
_M = _G.uniform(0.5, 2.0, (3, 4))
_SPD4 = _M.T @ _M + np.eye(4)
_VEC = _G.uniform(0.5, 2.0, 4)
_B = _G.uniform(0.5, 2.0, (3, 4))

# name: (call with the namespace `lin`: einad.linalg or numpy.linalg, the input)
COMPOSED = {
    "multi_dot": (lambda lin, a: lin.multi_dot([a, a.T, a, _VEC]), _M),
    "multi_dot_row": (lambda lin, a: lin.multi_dot([a[0], a.T, a]), _M),
    "matrix_power_3": (lambda lin, a: lin.matrix_power(a, 3), _SPD4 / 4),
    "matrix_power_-2": (lambda lin, a: lin.matrix_power(a, -2), _SPD4),
    "matrix_power_0": (lambda lin, a: lin.matrix_power(a, 0) + a, _SPD4),
    "svdvals": (lambda lin, a: lin.svdvals(a), _M),
    "vector_norm": (lambda lin, a: lin.vector_norm(a, axis=1, ord=3), _M),
    "vector_norm_all": (lambda lin, a: lin.vector_norm(a, keepdims=True), _M),
    "vector_norm_axes": (lambda lin, a: lin.vector_norm(a.reshape(2, 3, 2), axis=(0, 2), ord=1), _M),
    "matrix_norm": (lambda lin, a: lin.matrix_norm(a, ord="nuc"), _M),
    "matrix_norm_fro": (lambda lin, a: lin.matrix_norm(a.reshape(2, 2, 3), keepdims=True), _M),
    "matrix_transpose": (lambda lin, a: lin.matrix_transpose(a.reshape(2, 2, 3)), _M),
    "outer": (lambda lin, a: lin.outer(a[0], _VEC), _M),
    "trace": (lambda lin, a: lin.trace(a.reshape(2, 2, 3), offset=1), _M),
    "diagonal": (lambda lin, a: lin.diagonal(a, offset=-1), _M),
    "vecdot": (lambda lin, a: lin.vecdot(a, _B[:, :1], axis=0), _M),
    "cross": (lambda lin, a: lin.cross(a[:, :3], _B[:, 1:]), _M),
    "cross_axis": (lambda lin, a: lin.cross(a[:, 1:], _B[:, :1], axis=0), _M),
    "cond": (lambda lin, a: lin.cond(a), _M),
    "cond_-2": (lambda lin, a: lin.cond(a, -2), _M),
    "cond_1": (lambda lin, a: lin.cond(a, 1), _SPD4),
    "cond_fro": (lambda lin, a: lin.cond(a, "fro"), _SPD4),
    "tensorinv": (lambda lin, a: lin.tensorinv(a.reshape(2, 2, 4), ind=2), _SPD4),
    "tensorsolve": (lambda lin, a: lin.tensorsolve(a.reshape(2, 2, 2, 2), _B[:2, :2]), _SPD4),
    "tensorsolve_axes": (
        lambda lin, a: lin.tensorsolve(a.reshape(2, 2, 2, 2), _B[:2, :2], axes=(0, 2)),
        _SPD4,
    ),
}


@pytest.mark.parametrize("name", COMPOSED)
def test_numpy_2s_other_linalg_functions_match_numpy_and_differentiate(name):
    """multi_dot, matrix_power, svdvals, vector_norm, matrix_norm, matrix_transpose, outer, trace,
    diagonal, vecdot, cross, cond, tensorinv and tensorsolve (numpy 2's linalg namespace, which
    the array API's linalg extension also names) were missing from einad.linalg. Each is a
    composition of einad operations: numpy's value and dtype, derivatives by central
    differences in both modes, the same through ``np.linalg`` on a traced Tensor, a jitted
    gradient replayed on another input, and the batch rules (vmap, jacfwd against jacrev)."""
    call, a = COMPOSED[name]
    want = call(np.linalg, a)
    got = call(L, ea.tensor(a))
    assert got.dtype == want.dtype
    assert_close(got, want, rtol=1e-10, atol=1e-12)
    ea.gradcheck(lambda t: call(L, t), ea.tensor(a))
    w = np.linspace(0.5, 1.5, want.size).reshape(want.shape)
    grad = ea.grad(lambda t: ea.sum(call(L, t) * w))
    through_numpy = ea.grad(lambda t: np.sum(call(np.linalg, t) * w))(a)
    assert_close(through_numpy, grad(a), rtol=1e-12, atol=1e-12)
    jitted = ea.jit(grad)
    other = a * 1.01
    assert_close(jitted(other), grad(other), rtol=1e-9, atol=1e-10)
    # batched: a stack mapped by vmap is the loop over it, and jacfwd (vmap of jvp) is jacrev
    mapped = ea.vmap(lambda t: call(L, t))(np.stack([a, other]))
    assert_close(mapped, np.stack([want, call(np.linalg, other)]), rtol=1e-10, atol=1e-12)
    assert_close(
        ea.jacfwd(lambda t: call(L, t))(a), ea.jacrev(lambda t: call(L, t))(a), rtol=1e-9, atol=1e-11
    )


def test_linalg_trace_and_diagonal_keep_integer_and_boolean_dtypes():
    """numpy.linalg.trace and diagonal take numpy.trace's and numpy.diagonal's dtypes (an integer
    stack sums to int64, a boolean diagonal stays boolean): not the float64 of the
    factorizations."""
    stack = np.arange(12).reshape(2, 2, 3)
    for x in (stack, stack.astype(np.int32), stack % 2 == 0):
        for offset in (-1, 0, 1):
            for name in ("trace", "diagonal"):
                want = getattr(np.linalg, name)(x, offset=offset)
                got = getattr(L, name)(x, offset=offset)
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got.numpy(), want)


def test_vecdots_axis_is_each_operands_own_as_numpys():
    """numpy.linalg.vecdot is a gufunc: `axis` counts in each operand's own axes before the others
    broadcast, so a vector against a stack's axis 0 (or 1) is a product along that axis."""
    x = _G.standard_normal((2, 3, 4))
    for axis, y in (
        (0, _G.standard_normal(2)),
        (1, _G.standard_normal((4, 3))),
        (-2, _G.standard_normal((3, 1))),
    ):
        want = np.linalg.vecdot(x, y, axis=axis)
        assert_close(L.vecdot(x, y, axis=axis), want, rtol=1e-12, atol=1e-12)
        # the sum is linear in x: its gradient holds numpy's sums at the unit arrays
        basis = np.eye(x.size).reshape(x.size, *x.shape)
        want_grad = np.array([np.sum(np.linalg.vecdot(e, y, axis=axis)) for e in basis]).reshape(x.shape)
        got_grad = ea.grad(lambda t, y=y, axis=axis: ea.sum(L.vecdot(t, y, axis=axis)))(x)
        assert_close(got_grad, want_grad, rtol=1e-12, atol=1e-12)
    with pytest.raises(np.exceptions.AxisError):
        L.vecdot(x, _G.standard_normal(3), axis=1)


def test_multi_dot_is_one_contraction_in_the_cheapest_order():
    """numpy's multi_dot exists to choose the order of a chain; einad's is one einsum, whose
    path (opt_einsum's) multiplies the two thin matrices first: one equation in the program,
    and 2 * 10 * 10 * ... multiply-adds fewer than left to right."""
    a, b, c = np.ones((10, 1000)), np.ones((1000, 5)), np.ones((5, 300))
    program = ea.make_graph(lambda a, b, c: L.multi_dot([a, b, c]))(a, b, c)
    assert [e.op for e in program.equations] == ["einsum"]
    path, info = ea.contract_path("ab,bc,cd->ad", a, b, c, optimize="optimal")
    assert path[0] == (0, 1) and info.opt_cost < 10 * 1000 * 300
    assert_close(L.multi_dot([a, b, c]), np.linalg.multi_dot([a, b, c]))


def test_matrix_rank_counts_singular_values_above_numpys_tolerances():
    """An integer result without derivative, from the singular values: numpy's default
    tolerance, `tol` and `rtol` (per matrix of a stack), the 1-D rule, and the errors."""
    rank2 = np.outer([1.0, 2.0, 3.0], [1.0, 0.0, 1.0]) + np.outer([0.0, 1.0, 0.0], [0.0, 1.0, 1e-3])
    stack = np.stack([rank2, np.eye(3), np.zeros((3, 3))])
    for kwargs in ({}, {"tol": 1e-2}, {"tol": np.array([1e-6, 2.0, 1.0])}, {"rtol": 1e-5}):
        want = np.linalg.matrix_rank(stack, **kwargs)
        got = L.matrix_rank(stack, **kwargs)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)
    assert int(L.matrix_rank(np.zeros(3))) == 0 and int(L.matrix_rank(np.array([0.0, 2.0]))) == 1
    assert_close(ea.grad(lambda x: ea.sum(x) * L.matrix_rank(x))(rank2), np.full((3, 3), 2.0))
    assert np.array_equal(ea.jit(L.matrix_rank)(stack), [2, 3, 0])
    with pytest.raises(ValueError, match="can't be both set"):
        L.matrix_rank(stack, tol=1.0, rtol=1.0)


def test_the_composed_functions_raise_numpys_errors_at_the_call():
    with pytest.raises(ValueError, match="at least two arrays"):
        L.multi_dot([_M])
    with pytest.raises(L.LinAlgError, match="3-dimensional array given"):
        L.multi_dot([_M, np.ones((4, 3, 1)), _M])
    with pytest.raises(L.LinAlgError, match="square"):
        L.matrix_power(_M, 2)
    with pytest.raises(TypeError, match="exponent must be an integer"):
        L.matrix_power(_SPD4, 1.5)
    with pytest.raises(ValueError, match="one-dimensional"):
        L.outer(_M, _VEC)
    with pytest.raises(ValueError, match="3-dimensional vectors"):
        L.cross(_M, _B)
    with pytest.raises(ValueError, match="differ in size along axis 0"):
        L.vecdot(_M, _B[:1], axis=0)
    with pytest.raises(L.LinAlgError, match="square"):
        L.tensorinv(_M, ind=1)
    with pytest.raises(ValueError, match="Duplicate axes"):
        L.vector_norm(_M, axis=(1, -1))


def test_the_composed_functions_on_every_library(lib):
    """On torch, dask and the standard's strict library too: each runs in `x`'s library."""
    own = {"cross_own": (lambda lin, a: lin.cross(a[:, :3], a[:, 1:]), _M)}
    for name in (
        "multi_dot_row",
        "matrix_power_-2",
        "vector_norm_axes",
        "matrix_norm",
        "tensorinv",
        "cross_own",
    ):
        call, a = {**COMPOSED, **own}[name]
        got = call(L, ea.tensor(lib.asarray(a)))
        assert lib.owns(strip(got)), name
        assert_close(lib.numpy(strip(got)), call(np.linalg, a), rtol=1e-10, atol=1e-12)
