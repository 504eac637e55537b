"""Linear algebra: numpy.linalg's functions, differentiable in both modes to any order.

``inv, solve, det, slogdet, cholesky, eigh, eig, svd, qr, pinv`` are primitives whose
implementation is numpy.linalg's own on numpy arrays (so values, dtypes and errors are
numpy's; ``expm`` and ``lu``, which numpy lacks, are scipy.linalg's), the array API
``linalg`` extension of the array's library on others (torch, array-api-strict, CuPy;
torch's ``eig``, ``matrix_exp`` and ``lu`` beyond the standard), and numpy.linalg block by
block, lazily, on dask arrays;
their derivative rules are einad operations (no library call of their own:
constant masks are made in the operand's library): einsums for every matrix
product, transpose and diagonal, elementwise operations, and the linear
algebra primitives themselves (``solve`` wherever a rule applies an inverse to
something; ``inv`` only where the inverse itself is the derivative, as the
gradient ``A⁻ᵀ`` of ``slogdet``). A rule therefore differentiates again,
batches and stages under `einad.jit` like any other code, and reads no value
in Python.
``norm`` is a composition of einad operations (and ``svd`` for the spectral
and nuclear norms); so are ``lstsq`` (``pinv``), ``eigvals`` and ``eigvalsh``, and
numpy 2's other functions (``multi_dot``, one einsum; ``matrix_power``, ``svdvals``,
``vector_norm``, ``matrix_norm``, ``vecdot``, ``cross``, ``matrix_rank``, ``cond``,
``tensorinv``, ``tensorsolve``, and the last-two-axes ``trace``, ``diagonal``,
``matrix_transpose``).

Several results, one primitive. A primitive has one result, so a
decomposition (``eigh``'s eigenvalues and eigenvectors, ``svd``'s U, S, Vh,
``qr``'s Q, R, ``slogdet``'s sign and log) returns its parts packed side by
side along a last axis (each part flattened behind the batch axes), and the
public function slices them apart. A slice's VJP puts the cotangent back in
its place, so the rules receive the parts' cotangents packed the same way.

Conventions.

* Batches: every function takes ``(..., m, n)`` stacks, as numpy.linalg does;
  the batch axes ride along through the rules, and under `vmap` (so `jacfwd`,
  `jacrev`, `hessian`) the mapped axis is one more batch axis: one call, no loop.
* Complex values: a VJP is the transpose of the JVP under the pairing
  ``Re sum(a * b)`` (no conjugation: JAX's convention, which `einad.gradcheck`
  checks). The rules of the decompositions are written in the textbook
  convention (``Re tr(aᴴ b)``) and conjugate their cotangent in and out.
* What numpy reads: ``cholesky`` and ``eigh`` read one triangle of the matrix
  (and only the real part of its diagonal); their derivatives are those of the
  function numpy computes, so the upper triangle gets a zero gradient (the
  lower one with ``UPLO="U"`` / ``upper=True``). For a symmetric (Hermitian)
  matrix built from parameters, the chain rule gives the usual result.
* Degenerate spectra. The derivatives of ``eigh``'s eigenvectors and ``svd``'s
  singular vectors divide by gaps: ``F[i, j] = 1 / (λ_j − λ_i)`` (for the SVD
  ``1 / (s_j² − s_i²)``). Where two eigenvalues are equal the decomposition has
  no derivative: the vectors of a repeated eigenvalue are any basis of its
  eigenspace, and a perturbation splits the eigenvalue along directions that
  depend on the perturbation. einad sets ``F`` to zero on its diagonal and
  wherever two eigenvalues agree to rounding (``|λ_i − λ_j| <= n·eps·max|λ|``,
  the tolerance numpy's ``matrix_rank`` uses), which keeps every result finite and gives
  the exact derivative of the losses that are differentiable there through
  eigenvalues and eigenspaces: sums of functions of the eigenvalues (``Σ λ²``,
  ``log det``, the nuclear norm), and projectors onto whole eigenspaces
  (``V₁ V₁ᴴ`` over all the vectors of the repeated eigenvalue). It is not the
  limit for matrix functions rebuilt from the factors (``V f(Λ) Vᴴ``), whose
  divided differences it drops, nor for second derivatives at a tie. Away
  from ties everything is exact, to any order; only gauge-invariant losses
  (not the sign or the complex phase of a vector, which einad fixes by
  ``Im diag(Vᴴ dV) = 0``) have derivatives; near-equal eigenvalues give large
  ones. The extra columns of ``svd(full_matrices=True)`` and
  ``qr(mode="complete")`` (any basis of a complement) likewise turn with the
  reduced columns; a loss should use them only through their span.
* Singular matrices: the derivatives of ``inv``, ``solve``, ``slogdet`` and
  ``qr`` need an invertible matrix (``qr``: full rank); at a singular one
  numpy's ``LinAlgError`` comes from the rule that solves with it. ``det`` is a
  polynomial: its first and second derivatives (the adjugate and its
  derivative, two primitives) are exact at singular matrices too, as JAX's
  are (its third needs an invertible matrix). The singular
  vectors of a zero singular value are a gauge like those of a repeated one:
  their ``1 / s`` is set to 0 (below the same rounding tolerance).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from types import ModuleType
from typing import Any, Literal, NamedTuple

import numpy as np

from .. import arrays
from ..aliases import Array, Shape
from ..arrays import library, xp_of
from ..core import ArrayLike, Params, Primitive, Tensor, Value, bind, declare, ride_along, strip
from ..util import dtype_of, integer, lib_array, normalize_axes, shape_of, to_array_operand, to_operand, wrap
from .einsum import _letters, contract, spread, sum_raw, sum_to_shape
from .elementwise import PRIMITIVES, compare, conj, real
from .linear import diagonal as _diagonal
from .linear import einsum, matmul, tensordot
from .linear import outer as _outer
from .linear import trace as _diagonal_sum
from .reductions import _inexact, max_p
from .reductions import max as _max
from .reductions import min as _min
from .shape import astype, getitem_raw, reshape_raw, stop_gradient
from .structural import broadcast_raw, concat_p, where_raw

LinAlgError = np.linalg.LinAlgError

__all__ = [
    "EigResult",
    "EighResult",
    "LinAlgError",
    "QRResult",
    "SVDResult",
    "SlogdetResult",
    "cholesky",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eig",
    "eigh",
    "eigvals",
    "eigvalsh",
    "expm",
    "inv",
    "lstsq",
    "lu",
    "matmul",
    "matrix_norm",
    "matrix_power",
    "matrix_rank",
    "matrix_transpose",
    "multi_dot",
    "norm",
    "outer",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "svd",
    "svdvals",
    "tensordot",
    "tensorinv",
    "tensorsolve",
    "trace",
    "vecdot",
    "vector_norm",
]


class SlogdetResult(NamedTuple):
    """``slogdet``'s result, as numpy's: the sign (or phase) and log |det|."""

    sign: Tensor
    logabsdet: Tensor


class EighResult(NamedTuple):
    """``eigh``'s result, as numpy's: ascending eigenvalues, eigenvectors as columns."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class SVDResult(NamedTuple):
    """``svd``'s result, as numpy's: ``a = U @ (S[..., None] * Vh)``."""

    U: Tensor
    S: Tensor
    Vh: Tensor


class EigResult(NamedTuple):
    """``eig``'s result, as numpy's: eigenvalues, eigenvectors as columns (complex)."""

    eigenvalues: Tensor
    eigenvectors: Tensor


class QRResult(NamedTuple):
    """``qr``'s result, as numpy's: ``a = Q @ R``."""

    Q: Tensor
    R: Tensor


# -- matrix helpers in einad operations (what the rules are written with) --------------------


def _mT(x: Any) -> Any:
    """Swap the last two axes (a transpose einsum)."""
    s = _letters(len(shape_of(x)))
    return contract((s,), s[:-2] + s[-1] + s[-2], [x])


def _mH(x: Any) -> Any:
    """The conjugate transpose of the last two axes."""
    return conj(_mT(x))


def _mm(a: Any, b: Any) -> Any:
    """The matrix product of stacks with the same batch axes (or a plain 2-D matrix)."""
    na, nb = len(shape_of(a)), len(shape_of(b))
    nbatch = max(na, nb) - 2
    s = _letters(nbatch + 3)
    batch, i, j, k = s[:nbatch], s[nbatch], s[nbatch + 1], s[nbatch + 2]
    sa = batch[nbatch - (na - 2) :] + i + j
    sb = batch[nbatch - (nb - 2) :] + j + k
    return contract((sa, sb), batch + i + k, [a, b])


def _mm3(a: Any, b: Any, c: Any) -> Any:
    return _mm(_mm(a, b), c)


def _diag(x: Any) -> Any:
    """The diagonal of each matrix, as the last axis."""
    s = _letters(len(shape_of(x)) - 1)
    return contract((s + s[-1],), s, [x])


def _diag_embed(d: Any) -> Any:
    """Matrices with `d` (last axis) on the diagonal and zeros elsewhere."""
    shape = shape_of(d)
    s = _letters(len(shape))
    return spread(d, s, s + s[-1], shape + shape[-1:])


def _trace(x: Any) -> Any:
    s = _letters(len(shape_of(x)) - 1)
    return contract((s + s[-1],), s[:-1], [x])


def _row(v: Any) -> Any:
    """A vector (last axis) as a row that broadcasts down a matrix's columns."""
    s = shape_of(v)
    return reshape_raw(v, s[:-1] + (1, s[-1]))


def _col(v: Any) -> Any:
    s = shape_of(v)
    return reshape_raw(v, s[:-1] + (s[-1], 1))


def _trailing(v: Any, k: int) -> Any:
    """`v` with `k` size-1 axes appended: a stack of scalars that broadcasts against a
    stack of vectors (k = 1) or matrices (k = 2)."""
    return reshape_raw(v, shape_of(v) + (1,) * k)


def _real_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return np.zeros((), dtype).real.dtype


def _abs(x: Any) -> Any:
    return bind(PRIMITIVES["abs"], (x,), {})


# Arithmetic between values of different sources (a cotangent and a result, say) goes through
# the primitives, not Python's operators: one of them may be a plain array of a library whose
# operators refuse an einad Tensor on their right (array-api-strict's do).
_MULTIPLY, _ADD, _SUBTRACT = PRIMITIVES["multiply"], PRIMITIVES["add"], PRIMITIVES["subtract"]


def _mul(x: Any, y: Any) -> Any:
    return bind(_MULTIPLY, (x, y), {})


def _add(x: Any, *ys: Any) -> Any:
    for y in ys:
        x = bind(_ADD, (x, y), {})
    return x


def _sub(x: Any, y: Any) -> Any:
    return bind(_SUBTRACT, (x, y), {})


def _imag(z: Any) -> Any:
    return real(_mul(z, -1j))


def _i_times(x: Any) -> Any:
    """``1j · x`` for a real `x` (made complex first: the standard has no complex scalar times a
    real array)."""
    return _mul(astype(x, np.result_type(dtype_of(x), np.complex64)), 1j)


def _complex(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "c"


def _base(x: Any) -> Any:
    """The plain array behind `x` (a Tensor's value; what a value staged by `ea.jit` stands
    for): what tells the library and device of a constant built for `x`."""
    x = strip(x)
    return getattr(x, "concrete", x)


def _np_mask(n: int, dtype: np.dtype[Any], lower: bool, diagonal: float) -> Array:
    ones = np.ones((n, n), dtype=_real_dtype(dtype))
    strict = np.tril(ones, -1) if lower else np.triu(ones, 1)
    return strict + diagonal * np.eye(n, dtype=strict.dtype)


def _constant(like: Any, value: Array) -> Any:
    """Static numpy data as a constant in the library and on the device of `like`."""
    base = _base(like)
    return value if arrays.is_numpy(base) else arrays.asarray(base, value, value.dtype)


def _mask(like: Any, lower: bool, diagonal: float) -> Any:
    """A constant n×n matrix for `like` (..., n, n), of its real dtype: ones strictly below
    (or above) the diagonal, `diagonal` on it."""
    return _constant(like, _np_mask(shape_of(like)[-1], dtype_of(like), lower, diagonal))


def _eye(like: Any) -> Any:
    """The n×n identity for `like` (..., n, n), of its real dtype."""
    return _constant(like, np.eye(shape_of(like)[-1], dtype=_real_dtype(dtype_of(like))))


def _eye_of(like: Any, side: int) -> Any:
    """The identity of the rows (`side` 0) or the columns (1) of `like` (..., m, n), of its real dtype."""
    n = shape_of(like)[side - 2]
    return _constant(like, np.eye(n, dtype=_real_dtype(dtype_of(like))))


def _zeros(like: Any, shape: Shape, dtype: np.dtype[Any]) -> Any:
    """Constant zeros in the library and on the device of `like`."""
    return arrays.zeros(_base(like), tuple(shape), dtype)


def _solve(a: Any, b: Any, factor: str = "") -> Any:
    """``a⁻¹ b`` for a matrix right-hand side (the solve primitive); `factor`: the decomposition
    whose derivative solves with its triangular factor `a` (named where `a` is singular)."""
    return bind(solve_p, (a, b), {"factor": factor})


def _rsolve(x: Any, r: Any, factor: str = "") -> Any:
    """``x r⁻¹``, by a solve with the transposes."""
    return _mT(_solve(_mT(r), _mT(x), factor))


def _inv(a: Any) -> Any:
    return bind(inv_p, (a,), {})


def _like(ct: Any, x: Any) -> Any:
    """A cotangent in the dtype of its operand."""
    return astype(ct, dtype_of(x))


def _rounding(w: Any, size: int) -> Any:
    """``size · eps · max|w|`` for each vector (last axis) of `w`: what rounding leaves of a
    difference (numpy's ``matrix_rank`` tolerance for singular values)."""
    eps = float(np.finfo(dtype_of(w)).eps)
    if shape_of(w)[-1] == 0:  # no values: nothing to compare
        return _zeros(w, shape_of(w)[:-1], _real_dtype(dtype_of(w)))
    top = bind(max_p, (_abs(stop_gradient(w)),), {"axes": (len(shape_of(w)) - 1,)})
    return top * (size * eps)


def _gaps(w: Any, squares: bool = False) -> Any:
    """``F[i, j] = 1 / (w[j] - w[i])`` (with `squares`, ``1 / (w[j]² - w[i]²)``), and 0 where
    ``w[i]`` and ``w[j]`` agree to rounding, the diagonal included: the choice for ties."""
    gap = _row(w) - _col(w)
    d = gap * (_row(w) + _col(w)) if squares else gap
    tie = compare("less_equal", _abs(gap), _trailing(_rounding(w, shape_of(w)[-1]), 2))
    return where_raw(tie, 0, 1 / where_raw(tie, 1, d))


def _reciprocal_above(s: Any, tol: Any) -> Any:
    """``1 / s``, and 0 where ``s <= tol`` (a singular value lost to rounding)."""
    small = compare("less_equal", s, tol)
    return where_raw(small, 0, 1 / where_raw(small, 1, s))


def _hermitian_part(t: Any, lower: bool) -> Any:
    """The Hermitian matrix numpy reads from `t`: one triangle, mirrored, real diagonal."""
    w = _mask(t, lower, 0.5)
    half = t * w
    return half + _mH(half)


def _hermitian_part_vjp(p: Any, lower: bool) -> Any:
    """The transpose of `_hermitian_part` (the same in both complex conventions)."""
    w = _mask(p, lower, 0.5)
    return (p + _mH(p)) * w


# -- the implementations on every array library --------------------------------------------
#
# numpy arrays go to numpy.linalg, as they always did. Other libraries are reached through
# their array API `linalg` extension (array-api-compat's namespace: torch.linalg,
# array-api-strict's, CuPy's), whose errors become einad's LinAlgError. dask.array has no
# stacked linear algebra (its linalg works on one 2-D matrix, blockwise algorithms that need
# particular chunks, and has no det, slogdet or eigh): on dask arrays each function runs
# numpy.linalg on every block, lazily, after putting each matrix whole in one block (the
# batch axes keep their chunks).


def _is_dask(x: Any) -> bool:
    return library(x) == "dask"


def _call(xp: ModuleType, name: str, *args: Any, **kwargs: Any) -> Any:
    """``xp.linalg.<name>(*args, **kwargs)``, its singular-matrix errors as einad's LinAlgError."""
    fn = getattr(getattr(xp, "linalg", None), name, None)
    if fn is None:
        raise NotImplementedError(
            f"einad.linalg.{name}: the array library {xp.__name__} has no linalg.{name} "
            "(the array API standard's linalg extension)"
        )
    try:
        return fn(*args, **kwargs)
    except Exception as e:
        if "LinAlgError" in type(e).__name__ and not isinstance(e, LinAlgError):
            raise LinAlgError(str(e)) from e
        raise


def _on_blocks(
    impl: Callable[..., Any], xs: Sequence[Any], core: Shape, dtype: np.dtype[Any], **params: Any
) -> Any:
    """dask: `impl` (numpy) on each block of the stacks `xs` (..., m, n), lazily. The matrix
    axes are rechunked into one block; the result is (..., *core) with the batch chunks of xs[0]."""
    nb = len(shape_of(xs[0])) - 2
    first = xs[0].rechunk({nb: -1, nb + 1: -1})
    batch = first.chunks[:nb]
    rest = [x.rechunk(batch + (-1, -1)) for x in xs[1:]]
    drop = list(range(nb + len(core), nb + 2))
    return first.map_blocks(
        partial(impl, **params),
        *rest,
        dtype=dtype,
        chunks=batch + tuple((c,) for c in core),
        drop_axis=drop or None,
        meta=np.empty((0,) * (nb + len(core)), dtype),
    )


# -- several results in one array -------------------------------------------------------------


def _size(shape: Sequence[int]) -> int:
    return math.prod(shape)


def _pack_np(parts: Sequence[Any], nbatch: int) -> Array:
    """numpy: the parts flattened behind their `nbatch` batch axes, side by side."""
    dtype = np.result_type(*parts)
    flat = [np.asarray(p, dtype).reshape(p.shape[:nbatch] + (_size(p.shape[nbatch:]),)) for p in parts]
    return np.concatenate(flat, axis=-1)


def _pack_xp(xp: ModuleType, parts: Sequence[Any], nbatch: int) -> Any:
    """`_pack_np` in the array API standard's names (any library)."""
    dtype = xp.result_type(*parts)
    flat = []
    for p in parts:
        shape = tuple(p.shape)
        p = p if p.dtype == dtype else xp.astype(p, dtype)
        flat.append(xp.reshape(p, shape[:nbatch] + (_size(shape[nbatch:]),)))
    return xp.concat(flat, axis=-1)


def _pack(parts: Sequence[Any], batch: Shape, dtype: np.dtype[Any]) -> Any:
    """The same packing in einad operations (for the JVP rules)."""
    nb = len(batch)
    flat = [reshape_raw(astype(p, dtype), batch + (_size(shape_of(p)[nb:]),)) for p in parts]
    return bind(concat_p, flat, {"axis": nb})


def _unpack(packed: Any, shapes: Sequence[Shape]) -> list[Any]:
    """The parts of a packed value, each shaped ``batch + shape``."""
    batch = shape_of(packed)[:-1]
    out = []
    start = 0
    for shape in shapes:
        size = _size(shape)
        piece = getitem_raw(packed, (slice(None),) * len(batch) + (slice(start, start + size),))
        out.append(reshape_raw(piece, batch + tuple(shape)))
        start += size
    return out


def _only_result(needed: list[bool]) -> tuple[tuple[bool, ...], bool]:
    """Keep rule of a decomposition: its VJP reads the result, not the operand."""
    return (False,) * len(needed), True


# -- inv ----------------------------------------------------------------------------------------


def _inv_impl(a: Any) -> Any:
    xp = xp_of(a)
    if xp is np:
        return np.linalg.inv(a)
    if _is_dask(a):
        return _on_blocks(_inv_impl, [a], shape_of(a)[-2:], dtype_of(a))
    return _call(xp, "inv", a)


inv_p = declare(
    Primitive("inv", _inv_impl),
    # d(A⁻¹) = -A⁻¹ dA A⁻¹; the VJP is its transpose, -A⁻ᵀ g A⁻ᵀ
    jvp=lambda ts, x, vals, p: -_mm3(x, ts[0], x),
    vjp=lambda g, x, vals, p, needed: [-_mm3(_mT(x), g, _mT(x))],
    keep=_only_result,
    batch=ride_along,
    aliasing="fresh",
)

# -- solve --------------------------------------------------------------------------------------


def _solve_jvp(ts: list[Any], x: Any, vals: Sequence[Any], p: Params) -> Any:
    a, _ = vals
    ta, tb = ts
    rhs = tb if ta is None else (-_mm(ta, x) if tb is None else _sub(tb, _mm(ta, x)))
    return _solve(a, rhs, p["factor"])  # dx = A⁻¹ (db - dA x)


def _solve_vjp(g: Any, x: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a, b = vals
    gb = _solve(_mT(a), g, p["factor"])  # A⁻ᵀ g
    return [_like(-_mm(gb, _mT(x)), a) if needed[0] else None, _like(gb, b) if needed[1] else None]


def _solve_batch(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    a, b = vals
    if batched[0]:
        if not batched[1]:
            b = broadcast_raw(b, (size,) + shape_of(b))
        return bind(prim, (a, b), params)
    # One matrix, a stack of right-hand sides (jacrev's cotangents, jacfwd's
    # tangents): the stack joins b's columns, so the matrix is factored once.
    shape = shape_of(b)  # (size, *batch, n, k)
    s = _letters(len(shape))
    z, batch, i, j = s[0], s[1:-2], s[-2], s[-1]
    cols = contract((s,), batch + i + z + j, [b])
    cols = reshape_raw(cols, shape[1:-1] + (size * shape[-1],))
    x = bind(prim, (a, cols), params)
    x = reshape_raw(x, shape[1:-1] + (size, shape[-1]))
    return contract((batch + i + z + j,), s, [x])


def _solve_impl(a: Any, b: Any, factor: str = "") -> Any:
    """a (..., n, n), b (..., n, k) with the same batch axes (the public `solve` broadcasts).

    `factor` names the decomposition whose derivative divides by its triangular factor (qr's
    R, cholesky's L, lu's L and U): where that factor is singular (a zero on its diagonal: a
    rank-deficient qr, an lu of a singular matrix) the derivative is undefined, and the error
    says so. (JAX's and PyTorch's triangular solves return infinities and NaNs there, and
    finite values beside them that central differences disagree with: quimb's MPO applied
    with ``compress=True``, tests/rules/test_linalg.py.)"""
    xp = arrays.namespace(a, b)
    if xp is np:
        try:
            return np.linalg.solve(a, b)
        except np.linalg.LinAlgError:
            if not factor:
                raise  # (the public solve of a singular matrix: numpy's error)
            raise np.linalg.LinAlgError(
                f"the derivative of {factor} is undefined here: it divides by a triangular factor "
                f"with a zero on its diagonal (a rank-deficient or singular matrix); perturb the "
                f"input or keep the derivative away from it (ea.stop_gradient)"
            ) from None
    if _is_dask(a) or _is_dask(b):
        dtype = np.result_type(dtype_of(a), dtype_of(b))
        return _on_blocks(_solve_impl, [a, b], shape_of(b)[-2:], dtype, factor=factor)
    return _call(xp, "solve", a, b)  # b has 2 or more axes: the standard's stack of matrices


solve_p = declare(
    Primitive("solve", _solve_impl),
    jvp=_solve_jvp,
    vjp=_solve_vjp,
    keep=lambda needed: ((True, False), True),
    batch=_solve_batch,
    aliasing="fresh",
)

# -- det and slogdet ----------------------------------------------------------------------------


def _inv_T(a: Any) -> Any:
    """A⁻ᵀ (what d log det / dA is)."""
    return _mT(_inv(a))


def _det_impl(a: Any) -> Any:
    xp = xp_of(a)
    if xp is np:
        return np.linalg.det(a)
    if _is_dask(a):
        return _on_blocks(_det_impl, [a], (), dtype_of(a))
    return _call(xp, "det", a)


det_p = declare(
    Primitive("det", _det_impl),
    # d det = tr(adj(A) dA); the VJP is g adj(A)ᵀ (det A⁻ᵀ where A is invertible)
    jvp=lambda ts, d, vals, p: _trace_mm(_adjugate(vals[0]), ts[0]),
    vjp=lambda g, d, vals, p, needed: [_like(_mul(_trailing(g, 2), _mT(_adjugate(vals[0]))), vals[0])],
    batch=ride_along,
    aliasing="fresh",
)

# The adjugate, det's derivative, and its own derivative (det's second one) are primitives
# that hold at singular matrices too. adj(A) = det(A) A⁻¹ where A is invertible, and
# d adj = adj tr(A⁻¹ dA) − A⁻¹ dA adj. Everywhere, from the SVD A = U S Vᴴ (adj(XY) =
# adj(Y) adj(X), adj(U) = det(U) Uᴴ for a unitary U), with φ = det(U) det(Vᴴ), σ_i the
# product of the singular values but s_i, T[i, k] that of all but s_i and s_k (0 for i = k)
# and W = Uᴴ dA V:
#   adj(A) = φ V diag(σ) Uᴴ,    d adj = φ V (diag(T diag W) − T ∘ W) Uᴴ
# (rank n − 1: adj is of rank one; lower rank: adj is 0, d adj is not). The implementations
# take the inverse where it is accurate and the SVD (several times the cost) elsewhere:
# adj, where LU finds a zero pivot (det · A⁻¹ is accurate up to there: both come from the
# same factors); d adj, also where A's condition number passes 1/√eps (its two terms grow
# as 1/s_min and cancel). Both derivatives are symmetric maps (the Hessian of det is
# symmetric), so each VJP is the JVP at Aᵀ. The third derivative is written with inverses
# (`solve`): exact where A is invertible, as it always was.


def _trace_mm(x: Any, y: Any) -> Any:
    """tr(x y) for each pair of matrices of the stacks (one einsum; batch axes aligned from the right)."""
    nx, ny = len(shape_of(x)), len(shape_of(y))
    nbatch = max(nx, ny) - 2
    s = _letters(nbatch + 2)
    batch, i, j = s[:nbatch], s[nbatch], s[nbatch + 1]
    return contract((batch[nbatch - (nx - 2) :] + i + j, batch[nbatch - (ny - 2) :] + j + i), batch, [x, y])


def _adjugate(a: Any) -> Any:
    return bind(adjugate_p, (a,), {})


def _adjugate_jvp(a: Any, e: Any) -> Any:
    """d adj(A)[E]: linear in `e`."""
    return bind(adjugate_jvp_p, (a, e), {})


def _all_but_one(xp: ModuleType, s: Any) -> Any:
    """``out[..., k] = prod_{l != k} s[..., l]``, by products before and after k (no division:
    exact where an entry is 0)."""
    n = s.shape[-1]
    ones = xp.ones_like(s[..., :1])
    before, after = [ones], [ones]
    for k in range(1, n):
        before.append(before[-1] * s[..., k - 1 : k])
        after.append(after[-1] * s[..., n - k : n - k + 1])
    return xp.concat([b * c for b, c in zip(before, after[::-1], strict=True)], axis=-1) if n else s


def _svd_frame(xp: ModuleType, a: Any) -> tuple[Any, Any, Any, Any]:
    """φ = det(U) det(Vᴴ), U, s (in `a`'s dtype) and V of A = U S Vᴴ."""
    u, s, vh = _call(xp, "svd", a)
    phase = _call(xp, "det", u) * _call(xp, "det", vh)
    return phase[..., None, None], u, xp.astype(s, a.dtype), _mH_xp(xp, vh)


def _det_inv(xp: ModuleType, a: Any) -> tuple[Any, Any] | None:
    """det(A) (for matrices) and A⁻¹, or None where LU finds a zero pivot in one of the stack."""
    d = _call(xp, "det", a)
    if bool(xp.any(d == 0)):
        return None
    try:
        return d[..., None, None], _call(xp, "inv", a)
    except LinAlgError:
        return None


def _norm1(xp: ModuleType, a: Any) -> Any:
    """The 1-norm (largest column sum of magnitudes) of each matrix."""
    return xp.max(xp.sum(xp.abs(a), axis=-2), axis=-1)


def _adjugate_impl(a: Any) -> Any:
    xp = xp_of(a)
    if _is_dask(a):
        return _on_blocks(_adjugate_impl, [a], shape_of(a)[-2:], dtype_of(a))
    found = _det_inv(xp, a)
    if found is not None:
        return found[0] * found[1]
    phase, u, s, v = _svd_frame(xp, a)
    return phase * xp.matmul(v * _all_but_one(xp, s)[..., None, :], _mH_xp(xp, u))


def _adjugate_jvp_impl(a: Any, e: Any) -> Any:
    """d adj(A)[E]; batch axes broadcast (A's decomposition is made once for all its E's)."""
    xp = arrays.namespace(a, e)
    if _is_dask(a) or _is_dask(e):
        batch = tuple(np.broadcast_shapes(shape_of(a)[:-2], shape_of(e)[:-2]))
        a, e = (xp.broadcast_to(x, batch + shape_of(x)[-2:]) for x in (a, e))
        return _on_blocks(_adjugate_jvp_impl, [a, e], shape_of(a)[-2:], dtype_of(a))
    n = shape_of(a)[-1]
    if n == 0:
        return xp.matmul(a, e)
    found = _det_inv(xp, a)
    if found is not None:
        d, inv_a = found
        cond = _norm1(xp, a) * _norm1(xp, inv_a)
        if not bool(xp.any(cond > 1 / math.sqrt(np.finfo(dtype_of(a)).eps))):
            adj, x = d * inv_a, xp.matmul(inv_a, e)
            return adj * xp.linalg.trace(x)[..., None, None] - xp.matmul(x, adj)
    phase, u, s, v = _svd_frame(xp, a)
    eye = arrays.asarray(a, np.eye(n, dtype=dtype_of(a)), dtype_of(a))
    t = _all_but_one(xp, eye + (1 - eye) * s[..., None, :]) * (1 - eye)  # rows: s with s_i made 1
    w = xp.matmul(xp.matmul(_mH_xp(xp, u), e), v)
    w_diag = xp.linalg.diagonal(w)
    inner = eye * xp.matmul(t, w_diag[..., None])[..., 0][..., None, :] - t * w
    return phase * xp.matmul(xp.matmul(v, inner), _mH_xp(xp, u))


def _matrix_function(name: str, impl: Callable[..., Any], derivative: Callable[[Any, Any], Any]) -> Primitive:
    """A primitive F of one matrix whose derivative ``derivative(A, E)`` = dF[A](E) is its own
    transpose at Aᵀ (dF[A]ᵀ = dF[Aᵀ]: expm's Fréchet derivative, the adjugate's): the JVP is
    dF[A](dA), the VJP dF[Aᵀ](g); both read A only."""
    return declare(
        Primitive(name, impl),
        jvp=lambda ts, out, vals, p: derivative(vals[0], ts[0]),
        vjp=lambda g, out, vals, p, needed: [_like(derivative(_mT(vals[0]), g), vals[0])],
        keep=lambda needed: ((True,), False),
        batch=ride_along,
        aliasing="fresh",
    )


adjugate_p = _matrix_function("adjugate", _adjugate_impl, _adjugate_jvp)


def _common_batch(*xs: Any) -> list[Any]:
    """Stacks of matrices broadcast to their common batch axes (`adjugate_jvp`'s operands may
    differ in them: one matrix, a stack of tangents)."""
    batch = tuple(np.broadcast_shapes(*(shape_of(x)[:-2] for x in xs)))
    return [x if shape_of(x)[:-2] == batch else broadcast_raw(x, batch + shape_of(x)[-2:]) for x in xs]


def _adjugate_jvp_jvp(ts: list[Any], out: Any, vals: Sequence[Any], p: Params) -> Any:
    a, e = vals
    ta, te = ts
    parts = [] if te is None else [_adjugate_jvp(a, te)]
    if ta is not None:  # (A invertible) d(adj tr X − X adj) with X = A⁻¹E, Y = A⁻¹ dA
        a_, e_, ta_ = _common_batch(a, e, ta)
        x, y, adj, dadj = _solve(a_, e_), _solve(a_, ta_), _adjugate(a_), _adjugate_jvp(a_, ta_)
        yx = _mm(y, x)
        parts += [
            _mul(dadj, _trailing(_trace(x), 2)),
            -_mul(adj, _trailing(_trace(yx), 2)),
            _mm(yx, adj),
            -_mm(x, dadj),
        ]
    return _add(*parts)


def _adjugate_jvp_vjp(g: Any, out: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a, e = vals
    a_, e_, g = _common_batch(a, e, g)
    a_t = _mT(a_)
    g_e = _adjugate_jvp(a_t, g)
    g_a = None
    if needed[0]:  # the transpose of the JVP in dA above
        x, adj = _solve(a_, e_), _adjugate(a_)
        c = _trace_mm(_mT(g), adj)  # Σ g ∘ adj
        g_a = _add(
            _mul(g_e, _trailing(_trace(x), 2)),
            -_mul(_mT(_rsolve(x, a_)), _trailing(c, 2)),
            _mT(_rsolve(_mm3(x, adj, _mT(g)), a_)),
            -_adjugate_jvp(a_t, _mm(_mT(x), g)),
        )
        g_a = sum_to_shape(g_a, shape_of(a), dtype_of(a))
    return [g_a, sum_to_shape(g_e, shape_of(e), dtype_of(e)) if needed[1] else None]


def _broadcast_batch(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """The batching rule of a primitive whose operands' batch axes broadcast: a mapped operand
    of fewer axes than another gets size-1 axes behind its mapped one (as each example would
    broadcast against the other operand's extra axes)."""
    ranks = [len(shape_of(v)) - b for v, b in zip(vals, batched, strict=True)]
    top = max(ranks)
    vals = [
        reshape_raw(v, shape_of(v)[:1] + (1,) * (top - r) + shape_of(v)[1:]) if b and r < top else v
        for v, b, r in zip(vals, batched, ranks, strict=True)
    ]
    return bind(prim, vals, params)


adjugate_jvp_p = declare(
    Primitive("adjugate_jvp", _adjugate_jvp_impl),
    jvp=_adjugate_jvp_jvp,
    vjp=_adjugate_jvp_vjp,
    batch=_broadcast_batch,
    aliasing="fresh",
)


def _slogdet_impl(a: Any) -> Any:
    xp = xp_of(a)
    if xp is np:
        sign, logabsdet = np.linalg.slogdet(a)
        return _pack_np([sign, logabsdet], np.ndim(sign))
    if _is_dask(a):
        return _on_blocks(_slogdet_impl, [a], (2,), dtype_of(a))
    sign, logabsdet = _call(xp, "slogdet", a)
    return _pack_xp(xp, [sign, logabsdet], len(shape_of(a)) - 2)


def _slogdet_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    a = vals[0]
    sign, _ = _unpack(ans, [(), ()])
    tau = _trace(_solve(a, ts[0]))  # tr(A⁻¹ dA): its real part moves the log, its imaginary part the phase
    dsign = (
        _mul(sign, _i_times(_imag(tau)))
        if _complex(dtype_of(a))
        else _zeros(sign, shape_of(sign), dtype_of(sign))
    )
    return _pack([dsign, real(tau)], shape_of(sign), dtype_of(ans))


def _slogdet_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a = vals[0]
    g_sign, g_log = _unpack(g, [(), ()])
    c = real(g_log)  # the log is real: only the real part of its cotangent pairs with it
    if _complex(dtype_of(a)):  # (a real sign has derivative zero)
        c = _add(c, _i_times(_imag(_mul(g_sign, _unpack(ans, [(), ()])[0]))))
    return [_like(_mul(_trailing(c, 2), _inv_T(a)), a)]


slogdet_p = declare(
    Primitive("slogdet", _slogdet_impl),
    jvp=_slogdet_jvp,
    vjp=_slogdet_vjp,
    batch=ride_along,
    aliasing="fresh",
)

# -- cholesky -----------------------------------------------------------------------------------
#
# A = L Lᴴ gives L⁻¹ dA L⁻ᴴ = L⁻¹dL + (L⁻¹dL)ᴴ with L⁻¹dL lower triangular and a real
# diagonal, so dL = L Φ(L⁻¹ dA L⁻ᴴ), Φ keeping the lower triangle and half the diagonal.
# dA is the Hermitian matrix numpy reads from the tangent's lower triangle.


def _cholesky_jvp(ts: list[Any], chol: Any, vals: Sequence[Any], p: Params) -> Any:
    ds = _hermitian_part(ts[0], lower=True)
    x = _solve(chol, _mH(_solve(chol, ds, "cholesky")), "cholesky")  # L⁻¹ dS L⁻ᴴ (dS is Hermitian)
    return _mm(chol, x * _mask(x, True, 0.5))


def _cholesky_vjp(g: Any, chol: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    g = conj(g)
    phi = _mm(_mH(chol), g) * _mask(g, True, 0.5)
    p_ = _rsolve(_solve(_mH(chol), phi, "cholesky"), chol, "cholesky")  # L⁻ᴴ Φ(Lᴴ Ḡ) L⁻¹
    return [conj(_hermitian_part_vjp(p_, lower=True))]


def _cholesky_impl(a: Any) -> Any:
    xp = xp_of(a)
    if xp is np:
        return np.linalg.cholesky(a)
    if _is_dask(a):
        return _on_blocks(_cholesky_impl, [a], shape_of(a)[-2:], dtype_of(a))
    return _call(xp, "cholesky", a)


cholesky_p = declare(
    Primitive("cholesky", _cholesky_impl),
    jvp=_cholesky_jvp,
    vjp=_cholesky_vjp,
    keep=_only_result,
    batch=ride_along,
    aliasing="fresh",
)

# -- eigh ---------------------------------------------------------------------------------------
#
# A V = V Λ gives Vᴴ dA V = Vᴴ dV Λ − Λ Vᴴ dV + dΛ: dλ = diag(Vᴴ dA V) and
# dV = V (F ∘ Vᴴ dA V) with F[i, j] = 1 / (λ_j − λ_i) (see the module docstring).


def _mH_xp(xp: ModuleType, a: Any) -> Any:
    t = xp.matrix_transpose(a)
    return xp.conj(t) if _complex(dtype_of(a)) else t


def _eigh_impl(a: Any, UPLO: Literal["L", "U"]) -> Any:
    xp = xp_of(a)
    if xp is np:
        w, v = np.linalg.eigh(a, UPLO)
        return _pack_np([w, v], w.ndim - 1)
    n = shape_of(a)[-1]
    if _is_dask(a):
        return _on_blocks(_eigh_impl, [a], (n + n * n,), dtype_of(a), UPLO=UPLO)
    # The standard's eigh reads the lower triangle; the upper one of `a` is the lower one of aᴴ.
    w, v = _call(xp, "eigh", a if UPLO == "L" else _mH_xp(xp, a))
    return _pack_xp(xp, [w, v], len(shape_of(a)) - 2)


def _eigh_parts(ans: Any, a: Any) -> tuple[Any, Any]:
    n = shape_of(a)[-1]
    w, v = _unpack(ans, [(n,), (n, n)])
    return real(w), v


def _eigh_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    w, v = _eigh_parts(ans, vals[0])
    e = _mm3(_mH(v), _hermitian_part(ts[0], p["UPLO"] == "L"), v)
    dw = real(_diag(e))
    dv = _mm(v, _mul(_gaps(w), e))
    return _pack([dw, dv], shape_of(w)[:-1], dtype_of(ans))


def _eigh_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    w, v = _eigh_parts(ans, vals[0])
    g_w, g_v = _eigh_parts(conj(g), vals[0])
    vh = _mH(v)
    k = _add(_diag_embed(g_w), _mul(_gaps(w), _mm(vh, g_v)))
    return [conj(_hermitian_part_vjp(_mm3(v, k, vh), p["UPLO"] == "L"))]


eigh_p = declare(
    Primitive("eigh", _eigh_impl),
    jvp=_eigh_jvp,
    vjp=_eigh_vjp,
    keep=_only_result,
    batch=ride_along,
    aliasing="fresh",
)

# -- svd ----------------------------------------------------------------------------------------
#
# With E = Uᴴ dA V and D = diag(s) (k = min(m, n) singular values):
#   ds = Re diag(E)
#   dU = U (F ∘ (E D + D Eᴴ) + i Im diag(E) / s) + (I − U Uᴴ) dA V D⁻¹      (the last term if m > n)
#   dV = V (F ∘ (D E + Eᴴ D))                   + (I − V Vᴴ) dAᴴ U D⁻¹     (the last term if n > m)
# with F[i, j] = 1 / (s_j² − s_i²). The VJP is the transpose of this map. For
# full_matrices, the extra columns U₂ of U (or V₂ of V) turn with the rest:
# dU₂ = −U₁ (dU₁ᴴ U₂), which keeps [U₁ U₂] unitary.


def _svd_impl(a: Any, full_matrices: bool, hermitian: bool) -> Any:
    xp = xp_of(a)
    if xp is np:
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices, hermitian=hermitian)
        return _pack_np([u, s, vh], s.ndim - 1)
    m, n = shape_of(a)[-2:]
    if _is_dask(a):
        size = sum(_size(s) for s in _svd_shapes(m, n, full_matrices))
        return _on_blocks(
            _svd_impl, [a], (size,), dtype_of(a), full_matrices=full_matrices, hermitian=hermitian
        )
    if hermitian:  # the standard has no `hermitian`: the SVD of the matrix numpy reads (its lower triangle)
        half = a * arrays.asarray(a, _np_mask(n, dtype_of(a), True, 0.5))
        a = half + _mH_xp(xp, half)
    u, s, vh = _call(xp, "svd", a, full_matrices=full_matrices)
    return _pack_xp(xp, [u, s, vh], len(shape_of(a)) - 2)


def _svd_shapes(m: int, n: int, full: bool) -> tuple[Shape, Shape, Shape]:
    k = min(m, n)
    return ((m, m if full else k), (k,), (n if full else k, n))


def _svd_parts(ans: Any, vals: Sequence[Any], p: Params) -> tuple[Any, Any, Any]:
    m, n = shape_of(vals[0])[-2:]
    u, s, vh = _unpack(ans, _svd_shapes(m, n, p["full_matrices"]))
    return u, real(s), vh


def _cols(x: Any, start: int, stop: int | None) -> Any:
    return getitem_raw(x, (slice(None),) * (len(shape_of(x)) - 1) + (slice(start, stop),))


def _rows(x: Any, start: int, stop: int | None) -> Any:
    return getitem_raw(x, (slice(None),) * (len(shape_of(x)) - 2) + (slice(start, stop), slice(None)))


def _svd_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    a, da = vals[0], ts[0]
    if p["hermitian"]:
        da = _hermitian_part(da, lower=True)
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    u, s, vh = _svd_parts(ans, vals, p)
    u1, v1 = _cols(u, 0, k), _mH(_rows(vh, 0, k))
    e = _mm3(_mH(u1), da, v1)
    ds = real(_diag(e))
    f = _gaps(s, squares=True)  # 1 / (s_j² − s_i²)
    ed, de = _mul(e, _row(s)), _mul(_col(s), e)
    du = _mm(u1, _mul(f, ed + _mH(ed)))
    dv = _mm(v1, _mul(f, de + _mH(de)))
    inv_s = _reciprocal_above(s, _trailing(_rounding(s, max(m, n)), 1))
    if _complex(dtype_of(a)):
        du = _add(du, _mm(u1, _diag_embed(_mul(_i_times(_imag(_diag(e))), inv_s))))
    if m > n:
        du = _add(du, _mul(_sub(_mm(da, v1), _mm(u1, e)), _row(inv_s)))
    if n > m:
        dv = _add(dv, _mul(_sub(_mm(_mH(da), u1), _mm(v1, _mH(e))), _row(inv_s)))
    if p["full_matrices"] and m > n:
        u2 = _cols(u, k, None)
        du = bind(concat_p, [du, -_mm3(u1, _mH(du), u2)], {"axis": len(shape_of(du)) - 1})
    if p["full_matrices"] and n > m:
        v2 = _mH(_rows(vh, k, None))
        dv = bind(concat_p, [dv, -_mm3(v1, _mH(dv), v2)], {"axis": len(shape_of(dv)) - 1})
    return _pack([du, ds, _mH(dv)], shape_of(s)[:-1], dtype_of(ans))


def _svd_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a = vals[0]
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    u, s, vh = _svd_parts(ans, vals, p)
    g_u, g_s, g_vh = _svd_parts(conj(g), vals, p)  # the textbook convention: conjugate in and out
    u1, v1, g_v = _cols(u, 0, k), _mH(_rows(vh, 0, k)), _mH(g_vh)
    g_u1, g_v1 = _cols(g_u, 0, k), _cols(g_v, 0, k)
    if p["full_matrices"] and m > n:
        u2 = _cols(u, k, None)
        g_u1 = _sub(g_u1, _mm3(u2, _mH(_cols(g_u, k, None)), u1))
    if p["full_matrices"] and n > m:
        v2 = _mH(_rows(vh, k, None))
        g_v1 = _sub(g_v1, _mm3(v2, _mH(_cols(g_v, k, None)), v1))
    f = _gaps(s, squares=True)
    inv_s = _reciprocal_above(s, _trailing(_rounding(s, max(m, n)), 1))
    ku, kv = _mm(_mH(u1), g_u1), _mm(_mH(v1), g_v1)
    ge = _add(_diag_embed(g_s), _mul(_mul(f, ku - _mH(ku)), _row(s)), _mul(_col(s), _mul(f, kv - _mH(kv))))
    if _complex(dtype_of(a)):
        ge = _add(ge, _diag_embed(_mul(_i_times(_imag(_diag(ku))), inv_s)))
    ga = _mm3(u1, ge, _mH(v1))
    if m > n:
        ga = _add(ga, _mm(_mul(_sub(g_u1, _mm(u1, ku)), _row(inv_s)), _mH(v1)))
    if n > m:
        ga = _add(ga, _mm(u1, _mul(_col(inv_s), _sub(_mH(g_v1), _mm(_mH(kv), _mH(v1))))))
    if p["hermitian"]:
        ga = _hermitian_part_vjp(ga, lower=True)
    return [_like(conj(ga), a)]


svd_p = declare(
    Primitive("svd", _svd_impl),
    jvp=_svd_jvp,
    vjp=_svd_vjp,
    keep=_only_result,
    batch=ride_along,
    aliasing="fresh",
)

# -- qr -----------------------------------------------------------------------------------------
#
# Write A = [X Y] with X its first k = min(m, n) columns, so X = Q R₁ is square or
# tall and Y = Q R₂. With C = Qᴴ dX R₁⁻¹, the skew-Hermitian Ω = Qᴴ dQ is C's
# strictly lower part mirrored (plus i Im diag C: LAPACK's R has a real diagonal),
# and then dR₁ = (C − Ω) R₁, dQ = dX R₁⁻¹ − Q (C − Ω), dR₂ = Qᴴ dY − Ω R₂.


def _qr_impl(a: Any, complete: bool) -> Any:
    xp = xp_of(a)
    mode: Literal["complete", "reduced"] = "complete" if complete else "reduced"
    if xp is np:
        q, r = np.linalg.qr(a, mode=mode)
        return _pack_np([q, r], q.ndim - 2)
    if _is_dask(a):
        m, n = shape_of(a)[-2:]
        k = m if complete else min(m, n)
        return _on_blocks(_qr_impl, [a], (m * k + k * n,), dtype_of(a), complete=complete)
    q, r = _call(xp, "qr", a, mode=mode)
    return _pack_xp(xp, [q, r], len(shape_of(a)) - 2)


def _qr_parts(ans: Any, vals: Sequence[Any], p: Params) -> tuple[Any, Any]:
    m, n = shape_of(vals[0])[-2:]
    k = m if p["complete"] else min(m, n)
    q, r = _unpack(ans, [(m, k), (k, n)])
    return q, r


def _omega(c: Any) -> Any:
    low = c * _mask(c, True, 0.0)
    om = low - _mH(low)
    if _complex(dtype_of(c)):
        om = _add(om, _diag_embed(_i_times(_imag(_diag(c)))))
    return om


def _qr_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    a, da = vals[0], ts[0]
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    q, r = _qr_parts(ans, vals, p)
    q1, r1 = _cols(q, 0, k), _rows(_cols(r, 0, k), 0, k)
    dx_r = _rsolve(_cols(da, 0, k), r1, "qr")  # dX R₁⁻¹
    c = _mm(_mH(q1), dx_r)
    om = _omega(c)
    dq = _sub(dx_r, _mm(q1, c - om))
    dr = _mm(c - om, r1)
    axis = len(shape_of(dr)) - 1
    if n > m:
        dr2 = _sub(_mm(_mH(q1), _cols(da, m, None)), _mm(om, _cols(r, m, None)))
        dr = bind(concat_p, [dr, dr2], {"axis": axis})
    if p["complete"] and m > n:
        q2 = _cols(q, k, None)
        dq = bind(concat_p, [dq, -_mm3(q1, _mH(dq), q2)], {"axis": axis})
        dr = bind(
            concat_p, [dr, _zeros(dr, shape_of(dr)[:-2] + (m - n, n), dtype_of(dr))], {"axis": axis - 1}
        )
    return _pack([dq, dr], shape_of(q)[:-2], dtype_of(ans))


def _qr_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a = vals[0]
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    q, r = _qr_parts(ans, vals, p)
    g_q, g_r = _qr_parts(conj(g), vals, p)  # the textbook convention: conjugate in and out
    q1, r1 = _cols(q, 0, k), _rows(_cols(r, 0, k), 0, k)
    g_q1, g_r1 = _cols(g_q, 0, k), _rows(_cols(g_r, 0, k), 0, k)
    if p["complete"] and m > n:
        g_q1 = _sub(g_q1, _mm3(_cols(q, k, None), _mH(_cols(g_q, k, None)), q1))
    if n > m:
        r2, g_r2 = _cols(r, m, None), _cols(g_r, m, None)
        g_q1 = _sub(g_q1, _mm3(q1, g_r2, _mH(r2)))
    mm = _sub(_mm(g_r1, _mH(r1)), _mm(_mH(q1), g_q1))
    upper = mm * _mask(mm, False, 0.0)
    sym = upper + _mH(upper) + real(mm) * _eye(mm)  # Re diag(M) on the diagonal
    ga = _rsolve(_add(g_q1, _mm(q1, sym)), _mH(r1), "qr")  # (Q̄ + Q sym(M)) R₁⁻ᴴ
    if n > m:
        ga = bind(concat_p, [ga, _mm(q1, g_r2)], {"axis": len(shape_of(ga)) - 1})
    return [_like(conj(ga), a)]


qr_p = declare(
    Primitive("qr", _qr_impl), jvp=_qr_jvp, vjp=_qr_vjp, keep=_only_result, batch=ride_along, aliasing="fresh"
)

# -- eig ----------------------------------------------------------------------------------------
#
# A V = V Λ with V invertible gives V⁻¹ dA V = V⁻¹ dV Λ − Λ V⁻¹ dV + dΛ: with E = V⁻¹ dA V,
# dλ = diag(E) and dV = V (F ∘ E), F[i, j] = 1 / (λ_j − λ_i) as for eigh; then the change
# that keeps each column of unit norm (numpy's normalization) is removed:
# dV ← dV − V Re diag(Vᴴ dV). The results are complex whatever the input (as JAX's and
# torch's; numpy's dtype would depend on the values, which a staged program cannot).


def _eig_impl(a: Any) -> Any:
    xp = xp_of(a)
    if xp is np:
        w, v = np.linalg.eig(a)
        dt = np.result_type(a.dtype, np.complex64)
        return _pack_np([w.astype(dt), v.astype(dt)], w.ndim - 1)
    n = shape_of(a)[-1]
    if _is_dask(a):
        return _on_blocks(_eig_impl, [a], (n + n * n,), np.result_type(dtype_of(a), np.complex64))
    w, v = _call(xp, "eig", a)
    return _pack_xp(xp, [w, v], len(shape_of(a)) - 2)


def _eig_parts(ans: Any, a: Any) -> tuple[Any, Any]:
    n = shape_of(a)[-1]
    w, v = _unpack(ans, [(n,), (n, n)])
    return w, v


def _eig_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    w, v = _eig_parts(ans, vals[0])
    e = _solve(v, _mm(astype(ts[0], dtype_of(v)), v))  # V⁻¹ dA V
    dv = _mm(v, _mul(_gaps(w), e))
    dv = _sub(dv, _mul(v, _row(real(_diag(_mm(_mH(v), dv))))))
    return _pack([_diag(e), dv], shape_of(w)[:-1], dtype_of(ans))


def _eig_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a = vals[0]
    w, v = _eig_parts(ans, a)
    g_w, g_v = _eig_parts(conj(g), a)  # the textbook convention: conjugate in and out
    vh = _mH(v)
    g_z = _sub(g_v, _mul(v, _row(real(_diag(_mm(vh, g_v))))))
    k = _add(_diag_embed(g_w), _mul(conj(_gaps(w)), _mm(vh, g_z)))
    ga = _solve(vh, _mm(k, vh))  # V⁻ᴴ K Vᴴ
    return [_like(conj(ga), a)]


eig_p = declare(
    Primitive("eig", _eig_impl),
    jvp=_eig_jvp,
    vjp=_eig_vjp,
    keep=_only_result,
    batch=ride_along,
    aliasing="fresh",
)

# -- pinv ---------------------------------------------------------------------------------------
#
# For a matrix of constant rank, X = A⁺ moves as (Golub and Pereyra)
#   dX = −X dA X + X Xᴴ dAᴴ (I − A X) + (I − X A) dAᴴ Xᴴ X,
# and the VJP is the transpose of that map. Both are written with `pinv` itself, so they
# differentiate again. Singular values at or below ``rcond`` times the largest are zero
# (numpy's cutoff): the rank, and so the derivative, is that of the truncated matrix.


def _pinv_impl(a: Any, rcond: float, hermitian: bool) -> Any:
    xp = xp_of(a)
    if xp is np:
        return np.linalg.pinv(a, rcond=rcond, hermitian=hermitian)
    if _is_dask(a):
        m, n = shape_of(a)[-2:]
        return _on_blocks(_pinv_impl, [a], (n, m), dtype_of(a), rcond=rcond, hermitian=hermitian)
    if hermitian:  # the standard has no `hermitian`: the matrix numpy reads (its lower triangle)
        n = shape_of(a)[-1]
        half = a * arrays.asarray(a, _np_mask(n, dtype_of(a), True, 0.5))
        a = half + _mH_xp(xp, half)
    return _call(xp, "pinv", a, rtol=rcond)


def _pinv_jvp(ts: list[Any], x: Any, vals: Sequence[Any], p: Params) -> Any:
    a, da = vals[0], ts[0]
    if p["hermitian"]:
        a, da = _hermitian_part(a, lower=True), _hermitian_part(da, lower=True)
    da_h = _mH(da)
    left = _sub(_eye_of(a, 0), _mm(a, x))  # I − A X  (m × m)
    right = _sub(_eye_of(a, 1), _mm(x, a))  # I − X A  (n × n)
    return _add(-_mm3(x, da, x), _mm3(_mm(x, _mH(x)), da_h, left), _mm3(right, da_h, _mm(_mH(x), x)))


def _pinv_vjp(g: Any, x: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a = vals[0]
    if p["hermitian"]:
        a = _hermitian_part(a, lower=True)
    g = conj(g)  # the textbook convention: conjugate in and out
    xh, gh = _mH(x), _mH(g)
    left = _sub(_eye_of(a, 0), _mm(a, x))
    right = _sub(_eye_of(a, 1), _mm(x, a))
    ga = _add(-_mm3(xh, g, xh), _mm3(left, gh, _mm(x, xh)), _mm3(_mm(xh, x), gh, right))
    if p["hermitian"]:
        ga = _hermitian_part_vjp(ga, lower=True)
    return [_like(conj(ga), vals[0])]


pinv_p = declare(
    Primitive("pinv", _pinv_impl), jvp=_pinv_jvp, vjp=_pinv_vjp, batch=ride_along, aliasing="fresh"
)

# -- expm ---------------------------------------------------------------------------------------
#
# The derivative of the matrix exponential is its Fréchet derivative L(A, dA), the upper right
# block of exp([[A, dA], [0, A]]) (Mathias, 1996); the transpose of L(A, ·) under the pairing
# Σ g·y is L(Aᵀ, ·). Both are one more `expm` of twice the size, so they differentiate again.


def _scipy_linalg(name: str) -> Any:
    """scipy.linalg's function `name`, which einad.linalg's function of that name runs on numpy
    arrays (scipy is an optional dependency, imported when first needed: it is slow to import)."""
    try:
        import scipy.linalg
    except ImportError:  # pragma: no cover - scipy comes with quimb and jax
        raise ImportError(f"einad.linalg.{name} needs scipy for numpy arrays: pip install scipy") from None
    return getattr(scipy.linalg, name)


def _expm_impl(a: Any) -> Any:
    xp = xp_of(a)
    if xp is np:
        return np.asarray(_scipy_linalg("expm")(a))
    if _is_dask(a):
        return _on_blocks(_expm_impl, [a], shape_of(a)[-2:], dtype_of(a))
    return _call(xp, "matrix_exp", a)


def _frechet(a: Any, e: Any) -> Any:
    """L(a, e): the upper right block of expm([[a, e], [0, a]])."""
    dtype = np.result_type(dtype_of(a), dtype_of(e))
    a, e = astype(a, dtype), astype(e, dtype)
    axis = len(shape_of(a)) - 1
    top = bind(concat_p, [a, e], {"axis": axis})
    bottom = bind(concat_p, [_zeros(a, shape_of(a), dtype), a], {"axis": axis})
    block = bind(expm_p, (bind(concat_p, [top, bottom], {"axis": axis - 1}),), {})
    n = shape_of(a)[-1]
    return _cols(_rows(block, 0, n), n, None)


expm_p = _matrix_function("expm", _expm_impl, _frechet)


# -- lu -----------------------------------------------------------------------------------------
#
# A = P L U with P a permutation (piecewise constant: no derivative), L (m × k) unit lower and U
# (k × n) upper trapezoidal, k = min(m, n). Completed to square factors, L̂ = [L | 0; I] (m × m)
# and Û = [U; 0 I] (n × n), M = L̂⁻¹ Pᵀ dA Û⁻¹ splits into dL = (L̂ tril₋₁(M))[:, :k] and
# dU = (triu(M) Û)[:k, :] (as JAX's rule); the VJP is the transpose of that map.


def _lu_impl(a: Any) -> Any:
    xp = xp_of(a)
    if xp is np:
        p, lower, upper = _scipy_linalg("lu")(a)
        return _pack_np([p.astype(a.dtype), lower, upper], a.ndim - 2)
    if _is_dask(a):
        m, n = shape_of(a)[-2:]
        k = min(m, n)
        return _on_blocks(_lu_impl, [a], (m * m + m * k + k * n,), dtype_of(a))
    p, lower, upper = _call(xp, "lu", a)
    return _pack_xp(xp, [p, lower, upper], len(shape_of(a)) - 2)


def _lu_parts(ans: Any, a: Any) -> tuple[Any, Any, Any]:
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    p, lower, upper = _unpack(ans, [(m, m), (m, k), (k, n)])
    return real(p), lower, upper  # P is real, as scipy's


def _tri(like: Any, rows: int, cols: int, k: int) -> Any:
    """A constant rows × cols matrix of `like`'s real dtype: ones on and below the k-th diagonal."""
    return _constant(like, np.tri(rows, cols, k, dtype=_real_dtype(dtype_of(like))))


def _lu_square(lower: Any, upper: Any) -> tuple[Any, Any]:
    """L̂ (m × m) and Û (n × n): L and U completed by the last columns (rows) of the identity."""
    m, k = shape_of(lower)[-2:]
    n = shape_of(upper)[-1]
    batch = shape_of(lower)[:-2]

    def block(like: Any, value: Array) -> Any:
        return astype(broadcast_raw(_constant(like, value), batch + value.shape), dtype_of(like))

    axis = len(batch)
    if m > k:
        lower = bind(concat_p, [lower, block(lower, np.eye(m)[:, k:])], {"axis": axis + 1})
    if n > k:
        upper = bind(concat_p, [upper, block(upper, np.eye(n)[k:, :])], {"axis": axis})
    return lower, upper


def _lu_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    a = vals[0]
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    perm, lower, upper = _lu_parts(ans, a)
    l_sq, u_sq = _lu_square(lower, upper)
    x = _mm(_mT(perm), astype(ts[0], dtype_of(a)))  # Pᵀ dA
    mm = _rsolve(_solve(l_sq, x, "lu"), u_sq, "lu")  # L̂⁻¹ Pᵀ dA Û⁻¹
    dl = _cols(_mm(l_sq, _mul(mm, _tri(mm, m, n, -1))), 0, k)
    du = _rows(_mm(_sub(mm, _mul(mm, _tri(mm, m, n, -1))), u_sq), 0, k)
    batch = shape_of(a)[:-2]
    return _pack([_zeros(dl, shape_of(perm), dtype_of(ans)), dl, du], batch, dtype_of(ans))


def _lu_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    a = vals[0]
    m, n = shape_of(a)[-2:]
    k = min(m, n)
    batch = shape_of(a)[:-2]
    perm, lower, upper = _lu_parts(ans, a)
    _, g_l, g_u = _lu_parts(g, a)
    l_sq, u_sq = _lu_square(lower, upper)
    nb = len(batch)
    if n > k:  # dL is the first k columns of an m × n product: pad its cotangent with zeros
        g_l = bind(concat_p, [g_l, _zeros(g_l, batch + (m, n - k), dtype_of(g_l))], {"axis": nb + 1})
    if m > k:
        g_u = bind(concat_p, [g_u, _zeros(g_u, batch + (m - k, n), dtype_of(g_u))], {"axis": nb})
    low = _tri(g_l, m, n, -1)  # tril₋₁ and triu are masks: each its own transpose
    g_upper = _mm(g_u, _mT(u_sq))
    g_m = _add(_mul(_mm(_mT(l_sq), g_l), low), _sub(g_upper, _mul(g_upper, low)))
    g_x = _rsolve(_solve(_mT(l_sq), g_m, "lu"), _mT(u_sq), "lu")  # L̂⁻ᵀ G_M Û⁻ᵀ
    return [_like(_mm(perm, g_x), a)]


lu_p = declare(
    Primitive("lu", _lu_impl), jvp=_lu_jvp, vjp=_lu_vjp, keep=_only_result, batch=ride_along, aliasing="fresh"
)


# -- the public functions -----------------------------------------------------------------------

_SUPPORTED = {np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)}


def _linalg_dtype(x: Value) -> Value:
    """numpy.linalg's dtype rule: integers and booleans become float64; float16 is refused."""
    dt = dtype_of(x)
    if dt.kind in "biu":
        return astype(x, np.float64)
    if dt not in _SUPPORTED:
        raise TypeError(f"array type {dt} is unsupported in linalg")
    return x


def _matrix(a: ArrayLike, square: bool = True) -> Value:
    """A stack of matrices as numpy.linalg checks it, at the call."""
    return _matrix_shape(_linalg_dtype(to_array_operand(a)), square)


def _matrix_shape(x: Value, square: bool = False) -> Value:
    """`x` itself, once its shape is checked as a stack of matrices (its dtype kept)."""
    shape = shape_of(x)
    if len(shape) < 2:
        raise LinAlgError(f"{len(shape)}-dimensional array given. Array must be at least two-dimensional")
    if square and shape[-1] != shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    return x


def inv(a: ArrayLike) -> Tensor:
    """The inverse of a matrix (or of each matrix of a stack ``(..., n, n)``), as numpy.linalg.inv.

    Its derivative is ``-A⁻¹ dA A⁻¹``; the VJP ``-A⁻ᵀ g A⁻ᵀ``.

    Raises:
        LinAlgError: If `a` is not a stack of square matrices, or is singular.
    """
    return wrap(bind(inv_p, (_matrix(a),), {}))


def solve(a: ArrayLike, b: ArrayLike) -> Tensor:
    """The solution x of ``a @ x = b``, as numpy.linalg.solve (numpy 2's shapes).

    `a` is ``(..., n, n)``. `b` is a vector ``(n,)`` (the same right-hand side for
    every matrix of the stack; the result is ``(..., n)``) or a stack of matrices
    ``(..., n, k)``; batch axes broadcast. Derivatives: ``dx = a⁻¹ (db - da x)``;
    the VJP solves once with ``aᵀ``.

    Raises:
        LinAlgError: If `a` is not a stack of square matrices, or is singular.
        ValueError: If `b`'s shape does not fit `a`'s.
    """
    x, y = _matrix(a), _linalg_dtype(to_array_operand(b))
    dtype = np.result_type(dtype_of(x), dtype_of(y))
    x, y = astype(x, dtype), astype(y, dtype)
    n = shape_of(x)[-1]
    vector = len(shape_of(y)) == 1
    if len(shape_of(y)) == 0:
        raise ValueError("solve: b must be a vector (n,) or a stack of matrices (..., n, k), got a scalar")
    rows = shape_of(y)[0] if vector else shape_of(y)[-2]
    if rows != n:
        sig = "(m,m),(m)->(m)" if vector else "(m,m),(m,n)->(m,n)"
        raise ValueError(
            f"solve: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
            f"signature {sig} (size {rows} is different from {n})"
        )
    if vector:
        y = reshape_raw(y, (n, 1))
    batch = tuple(np.broadcast_shapes(shape_of(x)[:-2], shape_of(y)[:-2]))
    x = broadcast_raw(x, batch + (n, n))
    y = broadcast_raw(y, batch + shape_of(y)[-2:])
    out = bind(solve_p, (x, y), {"factor": ""})
    return wrap(reshape_raw(out, batch + (n,)) if vector else out)


def det(a: ArrayLike) -> Tensor:
    """The determinant of a matrix (or of each of a stack), as numpy.linalg.det.

    Its derivative is ``tr(adj(a) da)``: the gradient is the cofactor matrix
    ``adj(a)ᵀ``, ``det(a) · a⁻ᵀ`` where `a` is invertible. The first and second
    derivatives hold at singular matrices too (rank n − 1: a rank-one gradient;
    lower rank: a zero gradient, not a zero Hessian); the third needs `a` invertible.

    Raises:
        LinAlgError: If `a` is not a stack of square matrices (and, for a third
            derivative, if `a` is singular).
    """
    return wrap(bind(det_p, (_matrix(a),), {}))


def slogdet(a: ArrayLike) -> SlogdetResult:
    """The sign (or complex phase) and the log of the absolute value of the determinant.

    As numpy.linalg.slogdet: ``det(a) = sign * exp(logabsdet)``, stable where the
    determinant itself would overflow. The gradient of ``logabsdet`` is ``a⁻ᵀ``;
    a real sign has derivative zero, a complex phase moves with ``Im tr(a⁻¹ da)``.

    Returns:
        ``SlogdetResult(sign, logabsdet)``, a named tuple of Tensors.
    """
    x = _matrix(a)
    sign, logabsdet = _unpack(bind(slogdet_p, (x,), {}), [(), ()])
    return SlogdetResult(wrap(sign), wrap(real(logabsdet)))


def _symmetrized(x: Any, symmetrize_input: bool) -> Any:
    """``(a + aᴴ) / 2`` where asked (JAX's ``symmetrize_input``): both triangles are read, and
    each gets half of what the one numpy reads would get, so a gradient is Hermitian."""
    return _mul(_add(x, _mH(x)), 0.5) if symmetrize_input else x


def cholesky(a: ArrayLike, /, *, upper: bool = False, symmetrize_input: bool = False) -> Tensor:
    """The Cholesky factor of a Hermitian positive-definite matrix, as numpy.linalg.cholesky.

    ``a = L @ Lᴴ`` with L lower triangular (with ``upper=True``, ``a = Uᴴ @ U``).
    As numpy, only the lower (upper) triangle of `a` is read, so the other
    triangle gets a zero gradient; with ``symmetrize_input=True`` (JAX's default)
    ``(a + aᴴ) / 2`` is factored, and the gradient is Hermitian, as JAX's.

    Raises:
        LinAlgError: If `a` is not a stack of square matrices, or not positive definite.
    """
    x = _symmetrized(_matrix(a), symmetrize_input)
    if upper:
        return wrap(_mH(bind(cholesky_p, (_mH(x),), {})))
    return wrap(bind(cholesky_p, (x,), {}))


def eigh(a: ArrayLike, UPLO: str = "L", *, symmetrize_input: bool = False) -> EighResult:
    """Eigenvalues (ascending) and eigenvectors of a Hermitian matrix, as numpy.linalg.eigh.

    Only the lower (``UPLO="L"``) or upper (``"U"``) triangle of `a` is read (with
    ``symmetrize_input=True``, JAX's default, ``(a + aᴴ) / 2`` is, and the gradient is
    Hermitian, as JAX's).
    Derivatives: ``dλ = diag(Vᴴ dA V)``, ``dV = V (F ∘ Vᴴ dA V)`` with
    ``F[i, j] = 1 / (λ_j − λ_i)``, set to 0 where two eigenvalues are equal (to
    rounding). They hold for distinct eigenvalues and losses that do not depend
    on the sign or phase of a vector; at a repeated eigenvalue, for sums over the
    eigenvalues and projectors onto whole eigenspaces (see `einad.linalg`).

    Returns:
        ``EighResult(eigenvalues, eigenvectors)``; the eigenvectors are the columns.

    Raises:
        LinAlgError: If `a` is not a stack of square matrices.
        ValueError: If `UPLO` is not "L" or "U".
    """
    uplo = str(UPLO).upper()
    if uplo not in ("L", "U"):
        raise ValueError("UPLO argument must be 'L' or 'U'")
    x = _symmetrized(_matrix(a), symmetrize_input)
    w, v = _eigh_parts(bind(eigh_p, (x,), {"UPLO": uplo}), x)
    return EighResult(wrap(w), wrap(v))


def svd(
    a: ArrayLike, full_matrices: bool = True, compute_uv: bool = True, hermitian: bool = False
) -> SVDResult | Tensor:
    """The singular value decomposition ``a = U @ (S[..., None] * Vh)``, as numpy.linalg.svd.

    Singular values are descending. Their derivative is ``ds = Re diag(Uᴴ dA V)``;
    the singular vectors' involves ``1 / (s_j² − s_i²)``, set to 0 where two
    singular values are equal (to rounding), and ``1 / s`` (0 for a singular
    value lost to rounding, as numpy's ``matrix_rank`` counts them). Exact for
    distinct nonzero singular values and losses that do not depend on the sign
    or phase of a vector; at a repeated one, for sums over singular values (the
    nuclear norm) and projectors onto whole singular subspaces (see
    `einad.linalg`). With ``full_matrices`` (numpy's default) the extra columns
    of U or rows of Vh are a basis of a complement; they turn with the rest.

    Args:
        a: A matrix or a stack ``(..., m, n)``.
        full_matrices: U is ``(..., m, m)`` and Vh ``(..., n, n)``; else
            ``(..., m, k)`` and ``(..., k, n)`` with ``k = min(m, n)``.
        compute_uv: When False, return only S.
        hermitian: `a` is Hermitian (numpy then uses ``eigh``, reading its lower triangle).

    Returns:
        ``SVDResult(U, S, Vh)``, or S alone when `compute_uv` is False.

    Raises:
        LinAlgError: If `a` has fewer than 2 dimensions (or is not square with ``hermitian``).
    """
    x = _matrix(a, square=hermitian)
    m, n = shape_of(x)[-2:]
    if not compute_uv:
        return wrap(_singular_values(x, hermitian))
    params = {"full_matrices": bool(full_matrices) and m != n, "hermitian": bool(hermitian)}
    u, s, vh = _svd_parts(bind(svd_p, (x,), params), (x,), params)
    return SVDResult(wrap(u), wrap(s), wrap(vh))


def _singular_values(x: Value, hermitian: bool = False) -> Any:
    """S of the reduced SVD (the primitive computes U and Vh too: its derivative needs them)."""
    params = {"full_matrices": False, "hermitian": hermitian}
    return _svd_parts(bind(svd_p, (x,), params), (x,), params)[1]


def qr(a: ArrayLike, mode: str = "reduced") -> QRResult | Tensor:
    """The QR decomposition ``a = Q @ R``, as numpy.linalg.qr.

    Needs `a` of full rank for derivatives (R's diagonal nonzero). The signs are
    LAPACK's (R's diagonal is real, of either sign), which the derivative keeps.

    Args:
        a: A matrix or a stack ``(..., m, n)``.
        mode: "reduced" (Q is ``(..., m, k)``, R ``(..., k, n)``, k = min(m, n)),
            "complete" (Q is ``(..., m, m)``; its extra columns turn with the rest)
            or "r" (R only).

    Returns:
        ``QRResult(Q, R)``, or R alone for ``mode="r"``.

    Raises:
        LinAlgError: If `a` has fewer than 2 dimensions.
        ValueError: If `mode` is not one of these three ("raw" is not differentiable).
    """
    if mode not in ("reduced", "complete", "r"):
        raise ValueError(f"qr mode {mode!r} is not supported: use 'reduced', 'complete' or 'r'")
    x = _matrix(a, square=False)
    m, n = shape_of(x)[-2:]
    params = {"complete": mode == "complete" and m > n}
    q, r = _qr_parts(bind(qr_p, (x,), params), (x,), params)
    if mode == "r":
        return wrap(r)
    return QRResult(wrap(q), wrap(r))


def eig(a: ArrayLike) -> EigResult:
    """Eigenvalues and right eigenvectors of a general square matrix, as numpy.linalg.eig.

    Both are complex whatever the input (as JAX's and torch's): numpy's own dtype
    depends on the values (real when every eigenvalue is), which a program staged by
    `einad.jit` cannot follow. Each eigenvector has unit norm, as numpy's.
    Derivatives: with ``E = V⁻¹ dA V``, ``dλ = diag(E)`` and ``dV = V (F ∘ E)`` with
    ``F[i, j] = 1 / (λ_j − λ_i)`` (0 on the diagonal and for eigenvalues equal to
    rounding), less the part that would change a column's norm. Only losses that do not
    depend on the complex phase of a vector have derivatives (numpy fixes it arbitrarily);
    a matrix without a basis of eigenvectors has none.

    Returns:
        ``EigResult(eigenvalues, eigenvectors)``; the eigenvectors are the columns.

    Raises:
        LinAlgError: If `a` is not a stack of square matrices.
    """
    x = _matrix(a)
    w, v = _eig_parts(bind(eig_p, (x,), {}), x)
    return EigResult(wrap(w), wrap(v))


def eigvals(a: ArrayLike) -> Tensor:
    """The eigenvalues of a general square matrix (complex), as `eig` computes them."""
    return eig(a).eigenvalues


def eigvalsh(a: ArrayLike, UPLO: str = "L", *, symmetrize_input: bool = False) -> Tensor:
    """The eigenvalues (ascending) of a Hermitian matrix, as numpy.linalg.eigvalsh: `eigh`'s."""
    return eigh(a, UPLO, symmetrize_input=symmetrize_input).eigenvalues


def pinv(a: ArrayLike, rcond: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Tensor:
    """The Moore-Penrose pseudo-inverse, as numpy.linalg.pinv.

    Singular values at or below ``rcond`` times the largest count as zero (numpy's
    default ``1e-15``; ``rtol`` is the array API's name for it); an array of cutoffs
    broadcasts against the stack of matrices, as numpy's (each matrix inverted with its
    own, read as a constant). The derivative is the Golub-Pereyra formula, exact where
    the rank (after that cutoff) does not change:
    ``dX = −X dA X + X Xᴴ dAᴴ (I − A X) + (I − X A) dAᴴ Xᴴ X``. With ``hermitian``, the
    lower triangle is read, as numpy's.

    Raises:
        LinAlgError: If `a` has fewer than 2 dimensions.
        TypeError: If both `rcond` and `rtol` are given.
        ValueError: If an array of cutoffs does not broadcast against the stack.
    """
    if rcond is not None and rtol is not None:
        raise TypeError("pinv: give rcond or rtol, not both")
    cut = rcond if rcond is not None else rtol
    x = _matrix(a, square=bool(hermitian))
    cuts = (
        None if cut is None else np.asarray(arrays.to_numpy(strip(cut)) if isinstance(cut, Tensor) else cut)
    )
    if cuts is not None and cuts.ndim:
        return wrap(_pinv_each(x, cuts, bool(hermitian)))
    params = {"rcond": 1e-15 if cut is None else float(cut), "hermitian": bool(hermitian)}
    return wrap(bind(pinv_p, (x,), params))


def _pinv_each(x: Any, cuts: Array, hermitian: bool) -> Any:
    """Each matrix of the stack `x` inverted with its own cutoff (`cuts` broadcast against the
    stack's batch axes), stacked back: one pinv primitive per matrix."""
    batch = shape_of(x)[:-2]
    try:
        cuts = np.broadcast_to(cuts, batch)
    except ValueError:
        raise ValueError(
            f"pinv: cutoffs of shape {cuts.shape} do not broadcast against the stack {batch}"
        ) from None
    m, n = shape_of(x)[-2:]
    flat = reshape_raw(x, (-1, m, n))
    parts = [
        bind(pinv_p, (getitem_raw(flat, slice(k, k + 1)),), {"rcond": float(c), "hermitian": hermitian})
        for k, c in enumerate(cuts.ravel())
    ]
    if not parts:  # an empty stack: numpy's shape
        return reshape_raw(bind(pinv_p, (x,), {"rcond": 1e-15, "hermitian": hermitian}), (*batch, n, m))
    joined = bind(concat_p, parts, {"axis": 0}) if len(parts) > 1 else parts[0]
    return reshape_raw(joined, (*batch, n, m))


def lstsq(a: ArrayLike, b: ArrayLike, rcond: float | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The least-squares solution of ``a @ x = b``, as numpy.linalg.lstsq.

    ``x = pinv(a, rcond) @ b``, so it is differentiable in both `a` and `b` wherever the
    rank is constant. Singular values at or below ``rcond`` times the largest count as
    zero (numpy's default: machine epsilon times ``max(m, n)``; a negative ``rcond`` means
    machine epsilon, as in numpy).

    Returns:
        ``(x, residuals, rank, s)`` as numpy: the solution; the squared residual norm of
        each column of `b` when ``m > n`` (numpy leaves them out when `a` is rank-deficient;
        here they are computed whenever ``m > n``, so the shape depends on shapes only),
        else an empty array; the rank (an integer Tensor, derivative zero); the singular
        values of `a`.

    Raises:
        LinAlgError: If `a` is not 2-dimensional or `b` does not have `a`'s rows.
    """
    x = _matrix(a, square=False)
    y = _linalg_dtype(to_array_operand(b))
    if len(shape_of(x)) != 2 or len(shape_of(y)) not in (1, 2):
        raise LinAlgError("lstsq: a must be 2-dimensional and b 1- or 2-dimensional")
    m, n = shape_of(x)
    if shape_of(y)[0] != m:
        raise LinAlgError("Incompatible dimensions")
    dtype = np.result_type(dtype_of(x), dtype_of(y))
    x, y = astype(x, dtype), astype(y, dtype)
    eps = float(np.finfo(dtype).eps)
    cut = eps * max(m, n) if rcond is None else float(rcond)
    if cut < 0:  # numpy's (LAPACK gelsd's): a negative rcond means machine precision
        cut = eps
    vector = len(shape_of(y)) == 1
    rhs = reshape_raw(y, (m, 1)) if vector else y
    sol = _mm(bind(pinv_p, (x,), {"rcond": cut, "hermitian": False}), rhs)
    s = _singular_values(x)
    real_dt = _real_dtype(dtype)
    if shape_of(s)[-1]:
        big = compare("greater", s, _max(stop_gradient(s), None, False) * cut)
        rank = sum_raw(astype(big, np.int64), 0)
    else:
        rank = _zeros(x, (), np.dtype(np.int64))
    if m > n:
        r = _sub(rhs, _mm(x, sol))
        residuals = sum_raw(real(_mul(r, conj(r))), 0)
    else:
        residuals = _zeros(x, (0,), real_dt)
    if vector:
        sol = reshape_raw(sol, (n,))
    return wrap(sol), wrap(residuals), wrap(rank), wrap(s)


def expm(a: ArrayLike) -> Tensor:
    """The matrix exponential of a square matrix (or of each of a stack), as scipy.linalg.expm.

    Its derivative is the Fréchet derivative, computed as the upper right block of the
    exponential of ``[[A, dA], [0, A]]`` (and the VJP as that of ``[[Aᵀ, G], [0, Aᵀ]]``),
    so every order is one more `expm`. On numpy arrays it needs scipy; on torch arrays
    it is ``torch.linalg.matrix_exp``.

    Raises:
        LinAlgError: If `a` is not a stack of square matrices.
    """
    return wrap(bind(expm_p, (_matrix(a),), {}))


def lu(a: ArrayLike, permute_l: bool = False, overwrite_a: bool = False, check_finite: bool = True) -> Any:
    """The LU decomposition with partial pivoting ``a = P @ L @ U``, as scipy.linalg.lu.

    For `a` of shape ``(..., m, n)`` and ``k = min(m, n)``: P is a permutation matrix
    ``(..., m, m)`` (derivative zero), L unit lower trapezoidal ``(..., m, k)``, U upper
    trapezoidal ``(..., k, n)``. Derivatives need the leading k × k block of U invertible;
    with ``M = L̂⁻¹ Pᵀ dA Û⁻¹`` (L and U completed to square by the identity),
    ``dL = L̂ tril₋₁(M)`` and ``dU = triu(M) Û`` (first k columns and rows). On numpy
    arrays it needs scipy; on torch arrays it is ``torch.linalg.lu``.

    Args:
        a: A matrix or a stack ``(..., m, n)``.
        permute_l: Return ``(P @ L, U)`` instead of ``(P, L, U)``.
        overwrite_a: Accepted for scipy's signature (einad never writes into an array).
        check_finite: Accepted for scipy's signature.

    Returns:
        ``(P, L, U)``, or ``(P @ L, U)`` with `permute_l`.

    Raises:
        LinAlgError: If `a` has fewer than 2 dimensions.
    """
    x = _matrix(a, square=False)
    perm, low, up = (wrap(v) for v in _lu_parts(bind(lu_p, (x,), {}), x))
    if permute_l:
        return wrap(_mm(perm, low)), up
    return perm, low, up


# -- norm: a composition of einad operations --------------------------------------------------


def _sqrt_sum_squares(x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """sqrt(Σ |x|²) over `axes`, with the subgradient 0 at x = 0 (not sqrt's infinite slope)."""
    sq = sum_raw(real(x * conj(x)), axes, keepdims)
    zero = compare("equal", sq, 0)
    return where_raw(zero, 0, bind(PRIMITIVES["sqrt"], (where_raw(zero, 1, sq),), {}))


def _axis_tuple(axis: Any, nd: int) -> tuple[int, ...]:
    if not isinstance(axis, tuple):
        try:
            axis = (int(axis),)
        except (TypeError, ValueError):
            raise TypeError("'axis' must be None, an integer or a tuple of integers") from None
    out = []
    for a in axis:
        a = int(a)
        if not -nd <= a < nd:
            raise np.exceptions.AxisError(a, nd)
        out.append(a % nd)
    return tuple(out)


def _keep_shape(shape: Shape, axes: tuple[int, ...]) -> Shape:
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


def norm(x: ArrayLike, ord: Any = None, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A002
    """A vector or matrix norm, as numpy.linalg.norm.

    Vector norms (`axis` an int, or a 1-D `x`): ``ord`` None or 2 (Euclidean),
    1, ``inf``, ``-inf``, 0 (the count of nonzeros, derivative zero) and any
    other number p (``sum(|x|^p)^(1/p)``). Matrix norms (`axis` a pair, or a 2-D
    `x`): None or "fro" (Frobenius), "nuc" (nuclear: the sum of singular
    values), 2 and -2 (largest and smallest singular value), 1 and -1 (max / min
    column sum), ``inf`` and ``-inf`` (max / min row sum). With ``axis=None`` and
    ``ord=None``, the 2-norm of all elements, whatever `x`'s rank.

    Derivatives: the Euclidean and Frobenius norms use the subgradient 0 at
    ``x = 0``; max/min norms share the gradient among tied elements; the
    singular-value norms differentiate through `svd` (tied singular values of
    the 2-norm share the gradient).

    Raises:
        ValueError: For an unknown `ord`, repeated axes, or a rank the norm does not fit.
    """
    v = _inexact(x)  # (booleans and integers in float64, as numpy's norms)
    shape = shape_of(v)
    nd = len(shape)
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            out = _sqrt_sum_squares(v, tuple(range(nd)), False)
            return wrap(reshape_raw(out, (1,) * nd) if keepdims else out)
        axes = tuple(range(nd))
    else:
        axes = _axis_tuple(axis, nd)
    if len(axes) == 1:
        return wrap(_vector_norm(v, ord, axes, keepdims))
    if len(axes) == 2:
        if axes[0] == axes[1]:
            raise ValueError("Duplicate axes given.")
        out = _matrix_norm(v, ord, axes)
        return wrap(reshape_raw(out, _keep_shape(shape, axes)) if keepdims else out)
    raise ValueError("Improper number of dimensions to norm.")


def _max_from_zero(x: Any, axes: int | tuple[int, ...], keepdims: bool = False) -> Any:
    """The largest of values >= 0 along `axes`, and 0 where they are empty (numpy's ``initial=0``:
    the norm of an empty vector or matrix is 0)."""
    shape = shape_of(x)
    if any(shape[a] == 0 for a in (axes if isinstance(axes, tuple) else (axes,))):
        return sum_raw(x, axes, keepdims)  # zeros, of the right shape
    return _max(x, axes, keepdims)


def _vector_norm(x: Any, ord: Any, axes: tuple[int, ...], keepdims: bool) -> Any:  # noqa: A002
    if ord is None or (not isinstance(ord, str) and ord == 2):
        return _sqrt_sum_squares(x, axes, keepdims)
    if isinstance(ord, str):
        raise ValueError(f"Invalid norm order '{ord}' for vectors")  # noqa: TRY004  (numpy's error)
    if ord == np.inf:
        return _max_from_zero(_abs(x), axes, keepdims)
    if ord == -np.inf:
        return _min(_abs(x), axes, keepdims)
    if ord == 0:
        nonzero = astype(compare("not_equal", x, 0), _real_dtype(dtype_of(x)))
        return sum_raw(nonzero, axes, keepdims)
    if ord == 1:
        return sum_raw(_abs(x), axes, keepdims)
    total = sum_raw(_abs(x) ** ord, axes, keepdims)
    return total ** (1.0 / ord)


def _matrix_norm(x: Any, ord: Any, axes: tuple[int, int]) -> Any:  # noqa: A002
    row, col = axes
    if ord is None or ord in ("fro", "f"):
        return _sqrt_sum_squares(x, axes, False)
    if ord in (2, -2, "nuc"):
        nd = len(shape_of(x))
        rest = [i for i in range(nd) if i not in axes]
        s = _letters(nd)
        moved = contract((s,), "".join(s[i] for i in rest) + s[row] + s[col], [x])
        sv = _singular_values(moved)
        if ord == "nuc":
            return sum_raw(sv, -1)
        return _max_from_zero(sv, -1) if ord == 2 else _min(sv, -1)
    if ord in (1, -1, np.inf, -np.inf):
        reduce_over, then = (row, col) if ord in (1, -1) else (col, row)
        sums = sum_raw(_abs(x), reduce_over)
        then -= then > reduce_over
        return _max_from_zero(sums, then) if ord > 0 else _min(sums, then)
    raise ValueError("Invalid norm order for matrices.")


# -- numpy 2's (and the array API's) other linalg functions: compositions of the above ------------


def multi_dot(arrays: Sequence[ArrayLike], *, out: None = None) -> Tensor:
    """The product of a chain of matrices, as numpy.linalg.multi_dot: one einsum, so opt_einsum
    picks the cheapest order (numpy's reason for the function). The first array may be a vector
    (a row) and the last a vector (a column); the others are matrices."""
    if out is not None:
        raise TypeError("multi_dot(out=...): einad never writes into an array")
    xs = list(arrays)
    if len(xs) < 2:
        raise ValueError("Expecting at least two arrays.")
    ranks = [len(shape_of(x)) for x in xs]
    for k, r in enumerate(ranks):
        ends = (k == 0 or k == len(xs) - 1) and r == 1
        if r != 2 and not ends:
            raise LinAlgError(f"{r}-dimensional array given. Array must be two-dimensional")
    letters = _letters(len(xs) + 1)
    specs = [letters[k : k + 2] for k in range(len(xs))]
    if ranks[0] == 1:
        specs[0] = specs[0][1]
    if ranks[-1] == 1:
        specs[-1] = specs[-1][0]
    result = (specs[0][0] if ranks[0] == 2 else "") + (specs[-1][-1] if ranks[-1] == 2 else "")
    return einsum(f"{','.join(specs)}->{result}", *xs, optimize="optimal" if len(xs) <= 8 else "greedy")


def matrix_power(a: ArrayLike, n: int) -> Tensor:
    """`a` multiplied by itself `n` times (by squaring), as numpy.linalg.matrix_power: the
    identity for ``n = 0``, powers of the inverse for ``n < 0``."""
    x = to_array_operand(a)
    shape = shape_of(x)
    if len(shape) < 2:
        raise LinAlgError(f"{len(shape)}-dimensional array given. Array must be at least two-dimensional")
    if shape[-1] != shape[-2]:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    n = integer(n, "exponent")
    if n == 0:
        eye = np.broadcast_to(np.eye(shape[-1], dtype=dtype_of(x)), shape)
        return wrap(lib_array(x, np.ascontiguousarray(eye)))
    base: Any = inv(x) if n < 0 else x
    n = abs(n)
    result: Any = None
    while n:  # binary powering: at most 2 log2(n) products
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return wrap(result)


def svdvals(x: ArrayLike, /) -> Tensor:
    """The singular values, descending (numpy.linalg.svdvals: ``svd(x, compute_uv=False)``)."""
    return svd(x, compute_uv=False)  # type: ignore[return-value]


def vector_norm(x: ArrayLike, /, *, axis: Any = None, keepdims: bool = False, ord: Any = 2) -> Tensor:  # noqa: A002
    """A vector norm over `axis` (all axes, as one vector, by default; a tuple of axes is one
    vector too), as numpy.linalg.vector_norm: the orders of `norm`'s vectors."""
    v = _inexact(x)  # (booleans and integers in float64, as numpy's norms)
    nd = len(shape_of(v))
    axes = tuple(range(nd)) if axis is None else _axis_tuple(axis, nd)
    if len(set(axes)) != len(axes):
        raise ValueError("Duplicate axes given.")
    return wrap(_vector_norm(v, ord, axes, keepdims))


def matrix_norm(x: ArrayLike, /, *, keepdims: bool = False, ord: Any = "fro") -> Tensor:  # noqa: A002
    """A matrix norm of the last two axes, as numpy.linalg.matrix_norm (`norm`'s orders)."""
    return norm(_matrix(x, square=False), ord, (-2, -1), keepdims)


def matrix_transpose(x: ArrayLike, /) -> Tensor:
    """The last two axes swapped, as numpy.linalg.matrix_transpose (one einsum)."""
    nd = len(shape_of(x))
    if nd < 2:
        raise ValueError(f"matrix_transpose needs an array of at least two dimensions, got {nd}")
    s = _letters(nd)
    return einsum(f"{s}->{s[:-2]}{s[-1]}{s[-2]}", x)


def outer(x1: ArrayLike, x2: ArrayLike, /) -> Tensor:
    """The outer product of two vectors, as numpy.linalg.outer (one einsum)."""
    for name, v in (("x1", x1), ("x2", x2)):
        if len(shape_of(v)) != 1:
            raise ValueError(
                f"Input arrays must be one-dimensional, got {name} of {len(shape_of(v))} dimensions"
            )
    return _outer(x1, x2)


def trace(x: ArrayLike, /, *, offset: int = 0, dtype: Any = None) -> Tensor:
    """The sums along a diagonal of the last two axes (numpy.linalg.trace; numpy.trace's axes are
    the first two)."""
    return _diagonal_sum(_matrix_shape(to_array_operand(x)), offset, -2, -1, dtype=dtype)


def diagonal(x: ArrayLike, /, *, offset: int = 0) -> Tensor:
    """A diagonal of the last two axes (numpy.linalg.diagonal; numpy.diagonal's are the first two)."""
    return _diagonal(_matrix_shape(to_array_operand(x)), offset, -2, -1)


def vecdot(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Tensor:
    """``sum(conj(x1) * x2)`` along `axis` with broadcasting, as numpy.linalg.vecdot: `axis` is
    each operand's own (numpy's gufunc axis), the other axes broadcast."""
    a, b = (_axis_last(to_array_operand(v), axis) for v in (x1, x2))
    if shape_of(a)[-1] != shape_of(b)[-1]:
        raise ValueError(
            f"vecdot: x1 and x2 differ in size along axis {axis} ({shape_of(a)[-1]} and {shape_of(b)[-1]})"
        )
    return einsum("...j,...j->...", conj(a), b)  # (one einsum: numpy's dtype, uint8 stays uint8)


def _axis_last(x: Value, axis: int) -> Any:
    nd = len(shape_of(x))
    ax = normalize_axes(axis, nd)[0]
    return _transpose_to(x, [k for k in range(nd) if k != ax] + [ax])


def cross(x1: ArrayLike, x2: ArrayLike, /, *, axis: int = -1) -> Tensor:
    """The cross product of 3-vectors along `axis` with broadcasting, as numpy.linalg.cross."""
    a, b = to_array_operand(x1), to_array_operand(x2)
    sizes = {shape_of(v)[axis] if shape_of(v) else 0 for v in (a, b)}
    if sizes != {3}:
        raise ValueError("Both input arrays must be (arrays of) 3-dimensional vectors")

    def turn(v: Value, order: list[int]) -> Any:
        nd = len(shape_of(v))
        return getitem_raw(v, (slice(None),) * (axis % nd) + (np.array(order),))

    return wrap(turn(a, [1, 2, 0]) * turn(b, [2, 0, 1]) - turn(a, [2, 0, 1]) * turn(b, [1, 2, 0]))


def matrix_rank(A: ArrayLike, tol: Any = None, hermitian: bool = False, *, rtol: Any = None) -> Tensor:
    """The number of singular values above the tolerance (integers, no derivative), as
    numpy.linalg.matrix_rank: `tol` absolute, or `rtol` times the largest singular value
    (numpy's default ``max(m, n) * eps``)."""
    if tol is not None and rtol is not None:
        raise ValueError("`tol` and `rtol` can't be both set.")
    x = to_array_operand(A)
    shape = shape_of(x)
    if len(shape) < 2:  # numpy's: 1 unless every element is 0
        nonzero = sum_raw(astype(compare("not_equal", x, 0), np.int64))
        return wrap(where_raw(compare("greater", nonzero, 0), 1, 0))
    s = _singular_values(stop_gradient(_matrix(x, square=hermitian)), hermitian)

    def per_matrix(t: Any) -> Any:  # a tolerance of each matrix of the stack, against its values
        t = to_operand(t)
        return reshape_raw(t, (*shape_of(t), 1)) if shape_of(t) else t

    if tol is None:
        eps = np.finfo(_real_dtype(dtype_of(s))).eps
        limit = _max(s, -1, True) * (max(shape[-2:]) * eps if rtol is None else per_matrix(rtol))
    else:
        limit = per_matrix(tol)
    return wrap(sum_raw(astype(compare("greater", s, limit), np.int64), -1))


def cond(x: ArrayLike, p: Any = None) -> Tensor:
    """The condition number in the norm `p`, as numpy.linalg.cond: a ratio of singular values for
    None, 2 and -2; ``norm(x, p) * norm(inv(x), p)`` for the other orders (square `x`).

    A singular matrix's condition number is inf, as numpy's and JAX's, without a warning or an
    error: a zero singular value for None, 2 and -2 (the zero matrix too), and for the other
    orders a matrix whose LU factorization meets a zero pivot (``slogdet``'s sign 0, where
    numpy's inverse fails), which is inverted as the identity and then selected away."""
    v = _matrix(x, square=p not in (None, 2, -2))
    inf = _constant(v, np.array(np.inf, _real_dtype(dtype_of(v))))
    if p in (None, 2, -2):
        s = _singular_values(v)
        first, last = getitem_raw(s, (..., 0)), getitem_raw(s, (..., -1))
        top, bottom = (first, last) if p != -2 else (last, first)
        zero = compare("equal", bottom, 0)
        return wrap(where_raw(zero, inf, top / where_raw(zero, 1, bottom)))
    sign = bind(slogdet_p, (stop_gradient(v),), {})
    singular = compare("equal", getitem_raw(sign, (..., 0)), 0)[..., None, None]
    safe = where_raw(singular, _eye_of(v, 0), v)
    r = norm(v, p, (-2, -1)) * norm(inv(safe), p, (-2, -1))
    return wrap(where_raw(singular[..., 0, 0], inf, r))


def tensorinv(a: ArrayLike, ind: int = 2) -> Tensor:
    """The inverse of `a` read as a matrix of its first `ind` axes by the rest, as
    numpy.linalg.tensorinv: ``tensordot(tensorinv(a), a, ind)`` is the identity."""
    x = to_array_operand(a)
    shape = shape_of(x)
    ind = integer(ind, "ind")
    if ind <= 0:
        raise ValueError("Invalid ind argument.")
    rows, cols = math.prod(shape[:ind]), math.prod(shape[ind:])
    if rows != cols:
        raise LinAlgError("Last 2 dimensions of the array must be square")
    return wrap(reshape_raw(inv(reshape_raw(x, (rows, cols))), shape[ind:] + shape[:ind]))


def tensorsolve(a: ArrayLike, b: ArrayLike, axes: Sequence[int] | None = None) -> Tensor:
    """The x with ``tensordot(a, x, x.ndim) == b``, as numpy.linalg.tensorsolve (`axes` of `a`
    moved to the end first)."""
    x, y = to_array_operand(a), to_array_operand(b)
    nd = len(shape_of(x))
    if axes is not None:
        moved = [k % nd for k in axes]
        x = _transpose_to(x, [k for k in range(nd) if k not in moved] + moved)
    shape = shape_of(x)
    sol_shape = shape[len(shape_of(y)) :]
    rows, cols = math.prod(shape_of(y)), math.prod(sol_shape)
    if rows != cols:
        raise LinAlgError(
            "Input arrays must satisfy the requirement prod(a.shape[b.ndim:]) == prod(a.shape[:b.ndim])"
        )
    solved = solve(reshape_raw(x, (rows, cols)), reshape_raw(y, (rows,)))
    return wrap(reshape_raw(solved, sol_shape))


def _transpose_to(x: Value, order: list[int]) -> Any:
    s = _letters(len(order))
    return contract((s,), "".join(s[k] for k in order), [x])


def __dir__() -> list[str]:
    """``dir(einad.linalg)``: numpy.linalg's functions einad differentiates, and its error type
    (the rest of this module is its implementation)."""
    return sorted(__all__)
