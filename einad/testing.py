"""`gradcheck`: derivatives against central differences along random directions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from . import arrays
from .aliases import Array
from .core import Tensor, strip
from .errors import GradcheckError, check_callable
from .pytree import tree_flatten, tree_unflatten
from .transforms.autodiff import _out, jvp, vjp


def _real(x: Any) -> Array:
    """A numpy copy of a value of any library (dask arrays computed), for the arithmetic here."""
    return np.asarray(arrays.to_numpy(strip(x)))


def _lib(like: Any, a: Array) -> Any:
    """The numpy array `a` in `like`'s library and on its device (numpy stays numpy)."""
    return a if arrays.xp_of(like) is np else arrays.asarray(like, a, a.dtype)


def _inner(a: list[Any], b: list[Any]) -> float:
    """Re Σ a·b: the bilinear pairing under which einad's VJP is the JVP's transpose
    (no conjugation, JAX's convention for complex values)."""
    return float(sum(np.sum(_real(x) * _real(y)).real for x, y in zip(a, b)))


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> Array:
    """Standard normal values of `dtype`; complex ones get a random imaginary part too."""
    r = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        r = r + 1j * rng.standard_normal(shape)
    return r.astype(dtype)


def _leaf_names(args: tuple[Any, ...]) -> list[str]:
    """A readable name per leaf, in `tree_flatten` order: ``argument 1``, ``argument 0['w']``."""
    return [p for i, a in enumerate(args) for p in tree_flatten(a)[1].leaf_paths(f"argument {i}")]


def gradcheck(
    f: Callable[..., Any],
    *args: Any,
    eps: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    directions: int = 2,
    seed: int = 0,
) -> bool:
    """Check reverse and forward mode of `f` at `args` against central differences.

    For each floating-point leaf of the arguments (arrays, or pytrees of them;
    integer and boolean leaves are held fixed) and a few random unit directions
    d, with a random cotangent u on the output, compares
    ``<u, (f(x + eps d) - f(x - eps d)) / 2 eps>`` with ``<vjp(u), d>`` (reverse)
    and with ``<u, jvp(d)>`` (forward). Returns True, or raises
    `GradcheckError` naming the argument, the mode and the worst mismatch over
    the directions tried.

    Args:
        f: The function to check; its output may be any pytree of arrays.
        *args: The point: arrays, numbers or pytrees of them. A leaf given as a Tensor
            reaches `f` as a Tensor (so `f` may use its methods, such as ``x.at``).
        eps: The central-difference step (default 1e-6, or 1e-3 for float32 inputs).
        atol: Absolute tolerance (default 1e-6, or 1e-3 for float32).
        rtol: Relative tolerance (default 1e-5, or 1e-2 for float32).
        directions: Random directions tried per argument leaf.
        seed: Seed of the random directions and cotangent.

    Returns:
        True when every check passes.

    Raises:
        GradcheckError: If a directional derivative misses the central
            difference by more than ``atol + rtol * |numeric|``.
    """
    check_callable(f, "gradcheck", "einad.gradcheck(f, *args)")
    rng = np.random.default_rng(seed)
    args = tuple(np.asarray(a) if isinstance(a, float) else a for a in args)
    flat, td = tree_flatten(list(args))
    names = _leaf_names(args)
    # The arithmetic of the check is numpy's, on copies; f runs on arrays of the inputs' library.
    base = [_real(x) for x in flat]
    diff = [k for k, x in enumerate(base) if x.dtype.kind in "fc"]
    low = any(base[k].dtype in (np.float32, np.float16, np.complex64) for k in diff)
    eps = eps if eps is not None else (1e-3 if low else 1e-6)
    atol = atol if atol is not None else (1e-3 if low else 1e-6)
    rtol = rtol if rtol is not None else (1e-2 if low else 1e-5)
    if not diff:
        return True

    def g(*leaves: Any) -> Any:  # f of the floating-point leaves only; the others stay fixed
        full = list(flat)
        for k, leaf in zip(diff, leaves):
            full[k] = leaf
        return f(*tree_unflatten(td, full))

    like = [strip(flat[k]) for k in diff]
    given = [type(flat[k]) is Tensor for k in diff]  # f sees Tensors where it was given Tensors

    def point(leaves: list[Array]) -> list[Any]:
        return [Tensor(_lib(lk, v)) if t else _lib(lk, v) for lk, t, v in zip(like, given, leaves)]

    primals = point([base[k] for k in diff])
    out0 = g(*primals)
    out_flat, out_td = tree_flatten(out0)
    u = [_random(rng, np.shape(_real(o)), _real(o).dtype) for o in out_flat]

    u_lib = [_lib(strip(o), a) for o, a in zip(out_flat, u)]
    _, pullback = vjp(g, *primals)
    cts = list(pullback(tree_unflatten(out_td, u_lib)))

    def phi(leaves: list[Any]) -> float:
        return _inner(u, tree_flatten(g(*point(leaves)))[0])

    for j, x in enumerate(base[k] for k in diff):
        worst: dict[str, tuple[float, float, float, float, float] | None] = {"reverse": None, "forward": None}
        for _ in range(directions):
            d = _random(rng, x.shape, x.dtype)
            norm = np.linalg.norm(d)
            d = (d / norm if norm else d).astype(x.dtype)
            plus = [base[k] for k in diff]
            minus = list(plus)
            plus[j] = x + eps * d
            minus[j] = x - eps * d
            numeric = (phi(plus) - phi(minus)) / (2 * eps)
            reverse = _inner([cts[j]], [d])
            tangents = [_lib(lk, np.zeros_like(base[k])) for lk, k in zip(like, diff)]
            tangents[j] = _lib(like[j], d)
            _, tan = jvp(g, tuple(primals), tuple(tangents))
            forward = _inner(u, [_out(t) for t in tree_flatten(tan)[0]])
            tol = atol + rtol * abs(numeric)
            for mode, value in (("reverse", reverse), ("forward", forward)):
                err = abs(value - numeric)
                excess = err / tol if tol > 0 else (np.inf if err > 0 else 0.0)
                prev = worst[mode]
                if not err <= tol and (prev is None or excess > prev[0]):
                    worst[mode] = (excess, value, numeric, err, tol)
        for mode in ("reverse", "forward"):
            found = worst[mode]
            if found is not None:
                _, value, numeric, err, tol = found
                raise GradcheckError(
                    f"gradcheck failed for {names[diff[j]]} (leaf {diff[j]}) in {mode} mode: "
                    f"directional derivative {value!r} but central differences give "
                    f"{numeric!r} (error {err:.3g}, tolerance {tol:.3g}, eps {eps}; "
                    f"worst of {directions} random directions)"
                )
    return True
