"""The discrete Fourier transform: one primitive, `fft_p`, over an array's trailing axes.

The DFT is linear, and as an einsum it would be a product with the DFT matrix: n² work and
memory where the FFT takes n log n. So it is a primitive of its own, whose derivatives are
transforms again (so they differentiate, batch and stage like any other operation).

``bind(fft_p, (x,), {"kind": kind, "lengths": lengths})`` transforms the last
``len(lengths)`` axes of `x`, with numpy's "backward" normalization (`einad.fft` scales for
"ortho" and "forward", crops and pads for ``n``/``s``, and moves other axes to the end):

- ``"fft"``: complex to complex, ``y_k = Σ_j x_j e^{-2πi jk/n}``; ``"ifft"``: its inverse,
  ``(1/n) Σ_j y_k e^{+2πi jk/n}``. Both are complex-linear with symmetric matrices, so each
  is its own transpose.
- ``"rfft"``: real ``(..., n)`` to complex ``(..., n//2 + 1)``: the first half of the FFT of a
  real array (over several axes, the full FFT on the others). It is the FFT after a real to
  complex cast and before a slice, so its transpose is theirs in reverse: the cotangent
  padded with zeros to ``n``, transformed, and its real part.
- ``"irfft"``: the inverse of ``"rfft"``, complex ``(..., n//2 + 1)`` to real ``(..., n)``
  (``lengths`` are the output's). It reads the imaginary parts of the terms 0 and ``n/2``
  not at all, and every other term stands for itself and its conjugate mirror, so under
  the pairing ``Re Σ a·b`` its transpose is ``conj(w · rfft(g)) / N``, with ``w`` 1 for the
  terms 0 and ``n/2`` and 2 for the others, ``N`` the product of the lengths (JAX's rule).

Complex values follow einad's convention (JAX's): a VJP is the transpose of the JVP under
``Re Σ a·b``, no conjugation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import arrays
from ..arrays import library, xp_of
from ..core import Params, Primitive, bind, declare, ride_along, strip
from ..util import dtype_of, shape_of
from .elementwise import PRIMITIVES, conj, real
from .shape import astype
from .structural import concat_p

KINDS = ("fft", "ifft", "rfft", "irfft")

_NUMPY_NAMES = {"fft": "fftn", "ifft": "ifftn", "rfft": "rfftn", "irfft": "irfftn"}


def in_shape(kind: str, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """The trailing shape a transform of `kind` with output (or input) `lengths` reads."""
    return (*lengths[:-1], lengths[-1] // 2 + 1) if kind == "irfft" else lengths


def out_shape(kind: str, lengths: tuple[int, ...]) -> tuple[int, ...]:
    """The trailing shape a transform of `kind` over `lengths` gives."""
    return (*lengths[:-1], lengths[-1] // 2 + 1) if kind == "rfft" else lengths


def _fft_impl(x: Any, *, kind: str, lengths: tuple[int, ...]) -> Any:
    axes = tuple(range(-len(lengths), 0))
    name = _NUMPY_NAMES[kind]
    if isinstance(x, np.ndarray):
        return getattr(np.fft, name)(x, s=lengths, axes=axes)
    if library(x) == "dask":  # each block whole along the transformed axes
        lead = len(shape_of(x)) - len(lengths)
        whole = x.rechunk({lead + k: -1 for k in range(len(lengths))})
        out = out_shape(kind, lengths)
        sample = _fft_impl(
            np.zeros((1,) * lead + in_shape(kind, lengths), x.dtype), kind=kind, lengths=lengths
        )
        return whole.map_blocks(
            _fft_impl,
            kind=kind,
            lengths=lengths,
            dtype=sample.dtype,
            chunks=whole.chunks[:lead] + tuple((n,) for n in out),
            meta=np.empty((0,) * len(shape_of(x)), sample.dtype),
        )
    module = getattr(xp_of(x), "fft", None)
    if module is None:
        raise NotImplementedError(
            f"einad.fft: the array library {xp_of(x).__name__} has no fft module "
            "(the array API standard's fft extension)"
        )
    return getattr(module, name)(x, s=lengths, axes=axes)


fft_p = Primitive("fft", _fft_impl)


def transform(x: Any, kind: str, lengths: tuple[int, ...]) -> Any:
    """The transform of `kind` over the last ``len(lengths)`` axes of `x` (see the module)."""
    return bind(fft_p, (x,), {"kind": kind, "lengths": tuple(lengths)})


def _fft_jvp(ts: list[Any], ans: Any, vals: Any, p: Params) -> Any:
    return transform(ts[0], p["kind"], p["lengths"])  # linear: the same transform of the tangent


def _fft_vjp(g: Any, ans: Any, vals: Any, p: Params, needed: list[bool]) -> list[Any]:
    kind, lengths = p["kind"], p["lengths"]
    if kind in ("fft", "ifft"):
        return [transform(g, kind, lengths)]
    base = getattr(strip(g), "concrete", strip(g))
    if kind == "rfft":
        shape = shape_of(g)
        missing = lengths[-1] - shape[-1]
        if missing:
            zeros = arrays.zeros(base, (*shape[:-1], missing), dtype_of(g))
            g = bind(concat_p, [g, zeros], {"axis": len(shape) - 1})
        return [astype(real(transform(g, "fft", lengths)), dtype_of(vals[0]))]
    n, half = lengths[-1], lengths[-1] // 2 + 1
    weights = np.full(half, 2.0 / math.prod(lengths))
    weights[0] /= 2
    if n % 2 == 0:
        weights[-1] /= 2
    spectrum = transform(g, "rfft", lengths)
    w = arrays.asarray(base, weights, np.finfo(dtype_of(spectrum)).dtype)
    return [conj(bind(PRIMITIVES["multiply"], (spectrum, w), {}))]


declare(
    fft_p,
    jvp=_fft_jvp,
    vjp=_fft_vjp,
    keep=lambda needed: ((False,), False),  # linear: its derivatives read no value
    batch=ride_along,  # a mapped axis is one more leading axis
    aliasing="fresh",
    linear=True,
)
