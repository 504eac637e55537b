"""`gradcheck`: derivatives against central differences along random directions."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .core import strip
from .errors import GradcheckError
from .pytree import tree_flatten, tree_unflatten
from .transforms import _out, jvp, vjp


def _real(x: Any) -> np.ndarray:
    return np.asarray(strip(x))


def _inner(a: list, b: list) -> float:
    return float(sum(np.vdot(_real(x), _real(y)).real for x, y in zip(a, b)))


def gradcheck(
    f: Callable,
    *args: Any,
    eps: float | None = None,
    atol: float | None = None,
    rtol: float | None = None,
    directions: int = 2,
    seed: int = 0,
) -> bool:
    """Check reverse and forward mode of `f` at `args` against central differences.

    For each argument (a float array, or a pytree of them) and a few random unit
    directions d, with a random cotangent u on the output, compares
    ``<u, (f(x + eps d) - f(x - eps d)) / 2 eps>`` with ``<vjp(u), d>`` (reverse)
    and with ``<u, jvp(d)>`` (forward). Returns True, or raises
    `GradcheckError` naming the argument, the mode and the worst mismatch.
    """
    rng = np.random.default_rng(seed)
    args = tuple(np.asarray(a) if isinstance(a, (float, list)) else a for a in args)
    flat, td = tree_flatten(list(args))
    dts = [np.asarray(strip(x)).dtype for x in flat]
    low = any(dt in (np.float32, np.float16, np.complex64) for dt in dts)
    eps = eps if eps is not None else (1e-3 if low else 1e-6)
    atol = atol if atol is not None else (1e-3 if low else 1e-6)
    rtol = rtol if rtol is not None else (1e-2 if low else 1e-5)

    out0 = f(*args)
    out_flat, out_td = tree_flatten(out0)
    u = [rng.standard_normal(np.shape(_real(o))).astype(_real(o).dtype) for o in out_flat]
    out, pullback = vjp(f, *args)
    cts = tree_flatten(pullback(tree_unflatten(out_td, u)))[0]

    def phi(leaves: list) -> float:
        return _inner(u, tree_flatten(f(*tree_unflatten(td, leaves)))[0])

    base = [_real(x) for x in flat]
    for k, x in enumerate(base):
        if x.dtype.kind not in "fc":
            continue
        for _ in range(directions):
            d = rng.standard_normal(x.shape)
            norm = np.linalg.norm(d)
            d = (d / norm if norm else d).astype(x.dtype)
            plus = list(base)
            minus = list(base)
            plus[k] = x + eps * d
            minus[k] = x - eps * d
            numeric = (phi(plus) - phi(minus)) / (2 * eps)
            reverse = _inner([cts[k]], [d])
            tangents = [np.zeros_like(b) for b in base]
            tangents[k] = d
            _, tan = jvp(f, tuple(args), tuple(tree_unflatten(td, tangents)))
            forward = _inner(u, [_out(t) for t in tree_flatten(tan)[0]])
            for mode, value in (("reverse", reverse), ("forward", forward)):
                err = abs(value - numeric)
                if not err <= atol + rtol * abs(numeric):
                    raise GradcheckError(
                        f"gradcheck failed for argument leaf {k} in {mode} mode: "
                        f"directional derivative {value!r} but central differences give "
                        f"{numeric!r} (error {err:.3g}, tolerance {atol + rtol * abs(numeric):.3g}, eps {eps})"
                    )
    return True
