"""einad as an autoray backend: what ``autoray.do(name, x)`` runs on einad values.

quimb and cotengra reach arrays through autoray, which dispatches on the module of an
array's type: for an einad Tensor, traced or not, it looks ``name`` up in the module
`einad` (``do("tensordot", x, y)`` runs `einad.tensordot`, ``do("linalg.eigh", x)``
`einad.linalg.eigh`). `functions` gives autoray what that lookup would miss or get wrong,
and `register` hands it over; importing einad calls `register` when autoray is installed
(autoray is an optional dependency: without it einad imports and this module does nothing).

Where each name's function comes from:

1. `TRANSLATIONS`: autoray's conventions where einad keeps numpy's (``linalg.svd`` is the
   reduced SVD under autoray, as autoray gives numpy, JAX and torch, while
   `einad.linalg.svd` keeps numpy's ``full_matrices=True``); scipy's functions
   (``scipy.linalg.expm``, ``scipy.linalg.lu``, ``scipy.linalg.solve_triangular``); numpy's
   random functions, which return constant Tensors; and helpers without a derivative
   (``allclose``, ``count_nonzero``, ``to_numpy``), which read a value and return plain numpy
   values (on a value staged by `einad.jit` they raise `TracerError`, as reading a traced value
   always does).
2. numpy's function of that name as einad runs it on Tensors (`numpy_api`'s table), for the
   names `einad` does not export: numpy's signature, einad's differentiable operation
   (``swapaxes``, ``copy``, ``ravel``, ...).
3. Everything else is autoray's own lookup in `einad` (not registered): einad's operations,
   which take numpy's arguments (those einad supports), called directly, and its array
   creation with numpy's signatures (``do("zeros", ..., like=x)`` is `einad.zeros`,
   `einad.creation`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from . import numpy_api as _numpy_api  # noqa: F401  (fills `numpy_functions`, which `functions` reads)
from . import ops
from .aliases import DTypeLike
from .core import ArrayLike, Staged, Tensor, numpy_functions
from .errors import TracerError
from .rules import linalg
from .rules.linear import tril, triu
from .util import dtype_of, shape_of

try:  # an optional dependency (the [tn] extra): without it there is nothing to register
    import autoray as _autoray
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _autoray = None

Function = Callable[..., Any]

BACKEND = "einad"
"""The backend name autoray infers for einad values (the top package of ``type(x).__module__``)."""


# -- values without derivative: read, never traced --------------------------------------------


def _value(x: Any, what: str) -> Any:
    """The numpy value of `x`, every trace removed, for autoray's helper `what`.

    Raises:
        TracerError: Inside `einad.vmap` (the value there holds the whole batch, and a count or a
            comparison of it would mix the examples), and for a value staged by `einad.jit`
            (not known when the program is built), naming `what`.
    """
    if type(x) is Tensor:
        inner: Any = x
        while type(inner) is Tensor:
            if inner._trace is not None and inner._trace.batched:
                raise TracerError(
                    f"autoray's {what} reads a value, which cannot happen inside einad.vmap: the "
                    "value holds every example of the batch. Loop over the examples instead"
                )
            inner = inner._value
        if type(inner) is Staged:
            raise TracerError(
                f"autoray's {what} reads the value of a tensor staged by einad.jit, which is not "
                "known when the program is built. quimb reads values so where a network's "
                "structure depends on them: full_simplify's search for diagonal tensors (give "
                "amplitude/local_expectation simplify_sequence=''), canonize's search for an "
                "MPS's orthogonality centre (give cur_orthog=); or call it outside jit"
            )
        return x.numpy()
    if isinstance(x, (list, tuple)):
        return type(x)(_value(v, what) for v in x)
    return x


def allclose(
    a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> bool:
    """numpy.allclose on the values (a Python bool)."""
    return bool(
        np.allclose(_value(a, "allclose"), _value(b, "allclose"), rtol=rtol, atol=atol, equal_nan=equal_nan)
    )


def count_nonzero(a: ArrayLike, axis: Any = None, *, keepdims: bool = False) -> Any:
    """numpy.count_nonzero on the value (an int, or a numpy array along `axis`)."""
    return np.count_nonzero(_value(a, "count_nonzero"), axis=axis, keepdims=keepdims)


def all_of(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """numpy.all on the value (a numpy bool or array)."""
    return np.all(_value(a, "all"), axis=axis, keepdims=keepdims)


def any_of(a: ArrayLike, axis: Any = None, keepdims: bool = False) -> Any:
    """numpy.any on the value (a numpy bool or array)."""
    return np.any(_value(a, "any"), axis=axis, keepdims=keepdims)


def to_numpy(x: ArrayLike) -> Any:
    """The value as a numpy array, without derivative (`Tensor.numpy`; torch's backend detaches too)."""
    return np.asarray(_value(x, "to_numpy"))


# -- numpy's random functions: constant Tensors ----------------------------------------------------


def random_default_rng(seed: Any = None) -> np.random.Generator:
    """numpy.random.default_rng: numpy's generator (its samples are constants wherever they meet Tensors)."""
    return np.random.default_rng(seed)


def random_normal(
    loc: float = 0.0, scale: float = 1.0, size: Any = None, dtype: DTypeLike | None = None
) -> Tensor:
    """numpy.random.normal, a constant Tensor (of `dtype`, as autoray's numpy translation)."""
    out = np.random.normal(loc, scale, size)
    return Tensor(np.asarray(out, dtype=dtype))


def random_uniform(
    low: float = 0.0, high: float = 1.0, size: Any = None, dtype: DTypeLike | None = None
) -> Tensor:
    """numpy.random.uniform, a constant Tensor."""
    return Tensor(np.asarray(np.random.uniform(low, high, size), dtype=dtype))


def random_array(
    shape: Any,
    dist: str = "normal",
    loc: complex = 0.0,
    scale: complex = 1.0,
    dtype: DTypeLike | None = None,
    device: Any = None,
    rng: Any = None,
) -> Tensor:
    """autoray's ``random.array`` (quimb's random networks and sketches), sampled as autoray
    samples for numpy (the same numbers for the same `rng`), a constant Tensor of `dtype`.

    Raises:
        ValueError: For a `device` other than the CPU (einad's Tensors hold numpy arrays here).
    """
    if device not in (None, "cpu"):
        raise ValueError(f"random.array: einad makes its constants on the CPU, not on device {device!r}")
    assert _autoray is not None  # autoray calls this, so it is installed
    out = _autoray.do(
        "random.array", shape, dist=dist, loc=loc, scale=scale, dtype=dtype, rng=rng, like="numpy"
    )
    return Tensor(np.asarray(out))


# -- differentiable translations ---------------------------------------------------------------


def complex_of(real: ArrayLike, imag: ArrayLike) -> Tensor:
    """``real + 1j * imag`` (autoray's ``complex``, JAX's ``lax.complex``); differentiable in both."""
    return ops.add(real, ops.multiply(imag, 1j))


def asfortranarray(a: ArrayLike) -> Tensor:
    """`a` itself: an einad value's memory layout is not observable."""
    return ops.reshape(a, shape_of(a)) if type(a) is not Tensor else a


def svd(a: ArrayLike, full_matrices: bool = False, compute_uv: bool = True, hermitian: bool = False) -> Any:
    """`einad.linalg.svd` with autoray's default for every backend: the reduced SVD."""
    return linalg.svd(a, full_matrices=full_matrices, compute_uv=compute_uv, hermitian=hermitian)


def solve_triangular(
    a: ArrayLike,
    b: ArrayLike,
    trans: int | str = 0,
    lower: bool = False,
    unit_diagonal: bool = False,
    overwrite_b: bool = False,
    check_finite: bool = True,
) -> Tensor:
    """scipy.linalg.solve_triangular: `einad.linalg.solve` with the triangle scipy reads.

    The other triangle (and, with `unit_diagonal`, the diagonal) is not read, so its
    gradient is zero, as for scipy's function.
    """
    t = tril(a) if lower else triu(a)
    if unit_diagonal:
        t = ops.where(np.eye(shape_of(a)[-1], dtype=bool), 1, t)
    if trans in (1, "T"):
        t = ops.transpose(t)
    elif trans in (2, "C"):
        t = ops.conj(ops.transpose(t))
    elif trans not in (0, "N"):
        raise ValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    return linalg.solve(t, b)


def householder_product(x: ArrayLike, tau: Any) -> Any:
    """LAPACK's orgqr (torch.linalg.householder_product): the first n columns of
    ``H_1 ... H_k``, ``H_i = I - tau_i v_i v_iᴴ``, with ``v_i`` the i-th column of `x`
    below the diagonal and 1 on it. Applied right to left as k rank-one updates (einsums)."""
    m, n = shape_of(x)[-2:]
    v = ops.add(tril(x, -1), np.eye(m, n, dtype=bool))
    q: Any = Tensor(np.eye(m, n, dtype=np.result_type(dtype_of(x), dtype_of(tau))))
    for i in reversed(range(shape_of(tau)[-1])):
        vi = v[..., :, i]
        w = ops.einsum("...i,...ij->...j", ops.conj(vi), q)
        q = ops.subtract(q, ops.einsum("...,...i,...j->...ij", tau[..., i], vi, w))
    return q


# -- the table ---------------------------------------------------------------------------------

TRANSLATIONS: dict[str, Function] = {
    # autoray's conventions, and functions of scipy's
    "linalg.svd": svd,
    "linalg.householder_product": householder_product,
    "scipy.linalg.expm": linalg.expm,
    "scipy.linalg.lu": linalg.lu,
    "scipy.linalg.solve_triangular": solve_triangular,
    "complex": complex_of,
    # numpy's random functions: constant Tensors
    "random.default_rng": random_default_rng,
    "random.normal": random_normal,
    "random.uniform": random_uniform,
    "random.array": random_array,
    # values without derivative
    "allclose": allclose,
    "count_nonzero": count_nonzero,
    "all": all_of,
    "any": any_of,
    "finfo": np.finfo,
    "iinfo": np.iinfo,
    "to_numpy": to_numpy,
    # differentiable numpy functions einad's namespace does not have
    "asfortranarray": asfortranarray,
    "ascontiguousarray": asfortranarray,
}


def functions(exported: Iterable[str] = ()) -> dict[str, Function]:
    """Every name this module gives autoray: `TRANSLATIONS`, and numpy's functions as einad runs
    them on Tensors (`numpy_api`'s table, under numpy's own names) for the names einad does not
    export itself (`exported`: autoray finds those in `einad` directly, without the layer that
    binds numpy's arguments)."""
    skip = set(exported)
    table: dict[str, Function] = {}
    for func, impl in numpy_functions.items():
        name = getattr(func, "__name__", None)
        if isinstance(name, str) and name not in skip and getattr(np, name, None) is func:
            table[name] = impl
    table.update(TRANSLATIONS)
    return table


def register(exported: Iterable[str] = ()) -> bool:
    """Register `functions` with autoray (see the module docstring); `exported` are the names of
    `einad`'s namespace. Returns whether autoray is installed; importing einad calls it."""
    if _autoray is None:
        return False
    for name, fn in functions(exported).items():
        _autoray.register_function(BACKEND, name, fn)
    return True


__all__ = ["BACKEND", "TRANSLATIONS", "functions", "register"]
