"""`einad.fft`: numpy.fft's functions (and jax.numpy.fft's), differentiable in every mode.

Each is the one transform primitive (`einad.rules.fft`) over the requested axes, with numpy's
arguments: ``n`` / ``s`` crop or pad with zeros first, ``axes`` are moved to the end and back,
``norm`` ("backward", the default; "ortho"; "forward") is a scale. Values and dtypes are
numpy's (float32 in, complex64 out; integers as float64), on any array library with the array
API's fft extension (torch, CuPy, array-api-strict) and on dask arrays (each block whole along
the transformed axes). As in JAX, an axis may be transformed once per call: repeated axes are
a ValueError. Derivatives follow einad's complex convention (JAX's): a real input's gradient
is real. `fftfreq` and `rfftfreq` are numpy's constants; `fftshift` and `ifftshift` are rolls.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import ops
from .aliases import Axis
from .core import Tensor
from .rules.fft import transform
from .rules.indexing import pad, roll
from .util import dtype_of, normalize_axis, shape_of, to_array_operand, wrap

__all__ = [
    "fft",
    "fft2",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifft2",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfft2",
    "irfftn",
    "rfft",
    "rfft2",
    "rfftfreq",
    "rfftn",
]

_NORMS = (None, "backward", "ortho", "forward")


def _inexact(x: Any, complex_: bool) -> Any:
    """`x` in numpy's transform dtype: integers and booleans as float64 (complex128), float16
    as float32; `complex_`: a real input cast to complex (its gradient is the real part)."""
    dt = dtype_of(x)
    if dt.kind not in "fc":
        dt = np.dtype(np.float64)
    elif dt == np.float16:
        dt = np.dtype(np.float32)
    if complex_ and dt.kind == "f":
        dt = np.result_type(dt, np.complex64)
    return ops.astype(x, dt) if dt != dtype_of(x) else x


def _sized(x: Any, axis: int, size: int) -> Any:
    """`x` cropped or padded with zeros at the end to `size` along `axis`, as numpy's ``n``."""
    have = shape_of(x)[axis]
    if size < have:
        index = (slice(None),) * axis + (slice(0, size),)
        return ops.getitem(x, index)
    if size > have:
        widths = [(0, 0)] * len(shape_of(x))
        widths[axis] = (0, size - have)
        return pad(x, widths)
    return x


def _scale(x: Any, inverse: bool, norm: str | None, n: int) -> Any:
    """numpy's normalization: the primitive's inverse transforms divide by `n` ("backward")."""
    if norm in (None, "backward"):
        return x
    factor = math.sqrt(n) if norm == "ortho" else float(n)
    return x * factor if inverse else x * (1.0 / factor)


def _axes_and_sizes(
    x: Any, s: Sequence[int] | None, axes: Axis, name: str
) -> tuple[tuple[int, ...], list[int | None]]:
    """numpy's ``s`` and ``axes`` of an n-dimensional transform: the axes (normalized) and the
    size asked of each (None: as the array has it)."""
    nd = len(shape_of(x))
    if axes is None:
        if s is not None:
            axes = tuple(range(nd - len(s), nd))
        else:
            axes = tuple(range(nd))
    elif isinstance(axes, int):
        axes = (axes,)
    picked = tuple(normalize_axis(ax, nd) for ax in axes)
    if len(set(picked)) != len(picked):
        raise ValueError(f"einad.fft.{name}: each axis may be transformed once, got axes={tuple(axes)}")
    if s is not None and len(s) != len(picked):
        raise ValueError(
            f"einad.fft.{name}: s and axes must have the same length, got {tuple(s)} and {tuple(axes)}"
        )
    sizes: list[int | None] = (
        [None] * len(picked) if s is None else [None if k in (None, -1) else int(k) for k in s]
    )
    for k in sizes:
        if k is not None and k < 1:
            raise ValueError(f"einad.fft.{name}: invalid number of data points ({k}) specified")
    return picked, sizes


def _nd(kind: str, a: Any, s: Any, axes: Axis, norm: str | None, name: str) -> Tensor:
    """The transform of `kind` over `axes` (the last of them real for rfft and irfft)."""
    _check_norm(norm)
    x = to_array_operand(a)
    if kind == "rfft" and dtype_of(x).kind == "c":
        raise TypeError(
            f"einad.fft.{name} takes a real array, got {dtype_of(x)} (use fftn for complex input)"
        )
    x = _inexact(x, complex_=kind != "rfft")
    picked, sizes = _axes_and_sizes(x, s, axes, name)
    if not picked:
        return wrap(x)
    shape = shape_of(x)
    lengths = [shape[ax] if k is None else k for ax, k in zip(picked, sizes, strict=True)]
    if kind == "irfft" and sizes[-1] is None:
        lengths[-1] = 2 * (shape[picked[-1]] - 1)
    for j, (ax, k) in enumerate(zip(picked, lengths, strict=True)):
        last = j == len(picked) - 1
        x = _sized(x, ax, k // 2 + 1 if kind == "irfft" and last else k)  # irfft reads half the last
    if lengths[-1] < 1:
        raise ValueError(f"einad.fft.{name}: invalid number of data points ({lengths[-1]}) specified")
    nd = len(shape)
    trailing = tuple(range(nd - len(picked), nd))
    moved = tuple(picked) != trailing
    if moved:
        x = ops.moveaxis(x, picked, trailing)
    y = transform(x, kind, tuple(lengths))
    if moved:
        y = ops.moveaxis(y, trailing, picked)
    return wrap(_scale(y, kind in ("ifft", "irfft"), norm, math.prod(lengths)))


def _one(kind: str, a: Any, n: int | None, axis: int, norm: str | None, name: str) -> Tensor:
    return _nd(kind, a, None if n is None else (n,), (axis,), norm, name)


def fft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The one-dimensional DFT along `axis`, as numpy.fft.fft."""
    return _one("fft", a, n, axis, norm, "fft")


def ifft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of `fft`, as numpy.fft.ifft."""
    return _one("ifft", a, n, axis, norm, "ifft")


def rfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The DFT of a real array, its ``n//2 + 1`` non-negative frequencies, as numpy.fft.rfft."""
    return _one("rfft", a, n, axis, norm, "rfft")


def irfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of `rfft` (a real array of length ``n``, by default ``2 (m - 1)``)."""
    return _one("irfft", a, n, axis, norm, "irfft")


def hfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The DFT of a Hermitian-symmetric signal given by its first half, as numpy.fft.hfft:
    ``irfft(conj(a))`` with the normalization swapped."""
    return _one("irfft", ops.conj(to_array_operand(a)), n, axis, _swapped(norm), "hfft")


def ihfft(a: Any, n: int | None = None, axis: int = -1, norm: str | None = None) -> Tensor:
    """The inverse of `hfft`, as numpy.fft.ihfft: ``conj(rfft(a))`` with the normalization swapped."""
    return ops.conj(_one("rfft", a, n, axis, _swapped(norm), "ihfft"))


def _check_norm(norm: str | None) -> None:
    if norm not in _NORMS:
        raise ValueError(f'Invalid norm value {norm!r}; should be "backward", "ortho" or "forward".')


def _swapped(norm: str | None) -> str | None:
    """hfft's and ihfft's normalization: the direction of the transform they run swapped."""
    _check_norm(norm)
    return {None: "forward", "backward": "forward", "forward": "backward"}.get(norm, norm)


def fftn(a: Any, s: Sequence[int] | None = None, axes: Axis = None, norm: str | None = None) -> Tensor:
    """The n-dimensional DFT over `axes` (all by default), as numpy.fft.fftn."""
    return _nd("fft", a, s, axes, norm, "fftn")


def ifftn(a: Any, s: Sequence[int] | None = None, axes: Axis = None, norm: str | None = None) -> Tensor:
    """The inverse of `fftn`, as numpy.fft.ifftn."""
    return _nd("ifft", a, s, axes, norm, "ifftn")


def rfftn(a: Any, s: Sequence[int] | None = None, axes: Axis = None, norm: str | None = None) -> Tensor:
    """The n-dimensional DFT of a real array (half the last axis), as numpy.fft.rfftn."""
    return _nd("rfft", a, s, axes, norm, "rfftn")


def irfftn(a: Any, s: Sequence[int] | None = None, axes: Axis = None, norm: str | None = None) -> Tensor:
    """The inverse of `rfftn`, as numpy.fft.irfftn."""
    return _nd("irfft", a, s, axes, norm, "irfftn")


def fft2(a: Any, s: Sequence[int] | None = None, axes: Axis = (-2, -1), norm: str | None = None) -> Tensor:
    """`fftn` over the last two axes, as numpy.fft.fft2."""
    return _nd("fft", a, s, axes, norm, "fft2")


def ifft2(a: Any, s: Sequence[int] | None = None, axes: Axis = (-2, -1), norm: str | None = None) -> Tensor:
    """`ifftn` over the last two axes, as numpy.fft.ifft2."""
    return _nd("ifft", a, s, axes, norm, "ifft2")


def rfft2(a: Any, s: Sequence[int] | None = None, axes: Axis = (-2, -1), norm: str | None = None) -> Tensor:
    """`rfftn` over the last two axes, as numpy.fft.rfft2."""
    return _nd("rfft", a, s, axes, norm, "rfft2")


def irfft2(a: Any, s: Sequence[int] | None = None, axes: Axis = (-2, -1), norm: str | None = None) -> Tensor:
    """`irfftn` over the last two axes, as numpy.fft.irfft2."""
    return _nd("irfft", a, s, axes, norm, "irfft2")


def fftfreq(n: int, d: float = 1.0, device: Any = None) -> np.ndarray:
    """The sample frequencies of an `fft` of length `n` and spacing `d` (numpy's, a constant)."""
    return np.fft.fftfreq(n, d, device=device)


def rfftfreq(n: int, d: float = 1.0, device: Any = None) -> np.ndarray:
    """The sample frequencies of an `rfft` of length `n` and spacing `d` (numpy's, a constant)."""
    return np.fft.rfftfreq(n, d, device=device)


def _shifted(x: Any, axes: Axis, sign: int) -> Tensor:
    x = to_array_operand(x)
    nd = len(shape_of(x))
    if axes is None:
        picked = tuple(range(nd))
    else:
        picked = tuple(normalize_axis(ax, nd) for ax in ((axes,) if isinstance(axes, int) else axes))
    if not picked:
        return wrap(x)
    shifts = tuple(sign * (shape_of(x)[ax] // 2) for ax in picked)
    return roll(x, shifts, picked)


def fftshift(x: Any, axes: Axis = None) -> Tensor:
    """The zero frequency moved to the middle (a roll by half of each axis), as numpy.fft.fftshift."""
    return _shifted(x, axes, 1)


def ifftshift(x: Any, axes: Axis = None) -> Tensor:
    """The inverse of `fftshift`, as numpy.fft.ifftshift."""
    return _shifted(x, axes, -1)


def __dir__() -> list[str]:
    """``dir(einad.fft)``: numpy.fft's functions (the rest of this module is its implementation)."""
    return sorted(__all__)
