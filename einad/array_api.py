"""einad as an array API namespace: what ``x.__array_namespace__()`` gives for an einad Tensor.

Code written against the Python array API standard (2024.12) asks its inputs for their
namespace (``xp = x.__array_namespace__()``, or array-api-compat's ``array_namespace(x)``)
and then calls only ``xp``'s functions. Handed einad Tensors, such code runs einad's
operations: differentiated under `einad.grad` and every other transformation, staged by
`einad.jit`, mapped by `einad.vmap`, as JAX's arrays give ``jax.numpy``.

Every function here is one that einad already runs for numpy's function of the same name on
Tensors (`core.numpy_functions`, filled by `numpy_api`): numpy 2 speaks the standard's names
and signatures, so ``xp.concat``, ``xp.permute_dims``, ``xp.unique_counts`` or
``xp.linalg.vector_norm`` are einad's ``numpy.concat`` and so on. Only what numpy's functions
do not give is written here:

- every result is an einad Tensor (comparisons of untraced Tensors give numpy booleans as
  ``t > 0`` does; here they are Tensors, as the standard's functions return its arrays);
- array creation (``asarray``, ``zeros``, ``arange``, ...) makes constant Tensors; ``asarray``
  of nested sequences holding Tensors stacks them (differentiable), and ``full`` with a Tensor
  fill value broadcasts it (differentiable);
- ``sort`` and ``argsort`` take ``descending`` (numpy's do not), stable in both directions;
- devices: einad computes where its arrays are; this namespace makes its arrays on the CPU
  (``"cpu"``, the only device `__array_namespace_info__` lists), and a function's ``device=``
  may name it or be None;
- the inspection functions (`__array_namespace_info__`) and the dtypes as numpy dtypes
  (``xp.float64 == x.dtype``).

einad never writes into an array: ``x[i] = v`` and ``x += v`` give the Tensor ``x`` a new
value (numpy's and PyTorch's semantics, traced inside a transformation), so
``asarray(x, copy=True)`` is another Tensor object, which keeps the old value.
"""

from __future__ import annotations

import builtins
import inspect
import math
import sys
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np

from . import fft as _fft
from . import numpy_api as _numpy_api  # noqa: F401  (fills `numpy_functions`, which this module reads)
from . import ops
from .aliases import DTypeLike
from .core import Tensor, numpy_functions, strip
from .creation import array as _array
from .creation import full_like as _full_like
from .rules import indexing
from .util import dtype_of, shape_of, wrap

Function = Callable[..., Any]

__array_api_version__ = "2024.12"

DEVICE = "cpu"
"""The one device this namespace makes arrays on (einad computes where its arrays are)."""


# -- results as Tensors ------------------------------------------------------------------------


def _tensors(out: Any) -> Any:
    """`out` with every numpy array or scalar among its results boxed as a constant Tensor."""
    if type(out) is Tensor:
        return out
    if isinstance(out, (np.ndarray, np.generic)):
        return wrap(np.asarray(out))
    if isinstance(out, tuple):
        items = [_tensors(o) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else tuple(items)  # (namedtuples kept)
    if isinstance(out, list):
        return [_tensors(o) for o in out]
    return out


def _returning_tensors(name: str, impl: Function, arguments_of: Any, doc: str) -> Function:
    """The standard's function `name`: `impl`, its results Tensors, with the signature of `arguments_of`."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return _tensors(impl(*args, **kwargs))

    call.__name__ = call.__qualname__ = name
    call.__doc__ = doc
    call.__signature__ = inspect.signature(arguments_of)  # type: ignore[attr-defined]
    return call


def _numpy_function(name: str, func: Any) -> Function:
    """The standard's function `name`: einad's implementation of numpy's `func` (numpy's arguments)."""
    doc = f"The array API's ``{name}``: einad's numpy.{getattr(func, '__name__', name)} on Tensors."
    return _returning_tensors(name, numpy_functions[func], func, doc)


def _device(device: Any, name: str) -> None:
    if device is not None and device != DEVICE:
        raise ValueError(f"{name}: this namespace makes its arrays on the CPU ('cpu'), not on {device!r}")


# -- creation functions ------------------------------------------------------------------------


def asarray(obj: Any, /, *, dtype: DTypeLike | None = None, device: Any = None, copy: Any = None) -> Tensor:
    """`obj` as a Tensor: a Tensor as it is (cast to `dtype`), nested sequences holding Tensors
    stacked (each element keeps its derivative), anything else a constant Tensor."""
    _device(device, "asarray")
    if copy is False and type(obj) is not Tensor and not isinstance(obj, np.ndarray):
        raise ValueError("asarray(copy=False): the object is not an array, so it must be copied")
    # copy=True: a Tensor of its own, which a write (``t[i] = v``, ``t += 1``) into `obj` leaves alone
    return _array(obj, dtype, copy=bool(copy))


def arange(
    start: Any,
    /,
    stop: Any = None,
    step: Any = 1,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> Tensor:
    """numpy.arange, a constant Tensor."""
    _device(device, "arange")
    return wrap(np.arange(start, stop, step, dtype=dtype))


def zeros(shape: int | tuple[int, ...], *, dtype: DTypeLike | None = None, device: Any = None) -> Tensor:
    """numpy.zeros, a constant Tensor (float64 by default)."""
    _device(device, "zeros")
    return wrap(np.zeros(shape, dtype=np.float64 if dtype is None else dtype))


def ones(shape: int | tuple[int, ...], *, dtype: DTypeLike | None = None, device: Any = None) -> Tensor:
    """numpy.ones, a constant Tensor (float64 by default)."""
    _device(device, "ones")
    return wrap(np.ones(shape, dtype=np.float64 if dtype is None else dtype))


def empty(shape: int | tuple[int, ...], *, dtype: DTypeLike | None = None, device: Any = None) -> Tensor:
    """`zeros`: an einad value is never filled in afterwards, so its elements are given."""
    return zeros(shape, dtype=dtype, device=device)


def eye(
    n_rows: int,
    n_cols: int | None = None,
    /,
    *,
    k: int = 0,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> Tensor:
    """numpy.eye, a constant Tensor."""
    _device(device, "eye")
    return wrap(np.eye(n_rows, n_cols, k, dtype=np.float64 if dtype is None else dtype))


def full(
    shape: int | tuple[int, ...],
    fill_value: Any,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
) -> Tensor:
    """numpy.full; a Tensor `fill_value` (0-d) is broadcast, so the result is differentiable in it."""
    _device(device, "full")
    if type(fill_value) is Tensor:
        value = fill_value if dtype is None else fill_value.astype(dtype)
        return ops.broadcast_to(value, (shape,) if isinstance(shape, int) else tuple(shape))
    return wrap(np.full(shape, fill_value, dtype=dtype))


def _like(name: str, fill: Any) -> Function:
    def like(x: Any, /, *, dtype: DTypeLike | None = None, device: Any = None) -> Tensor:
        if device is not None and type(x) is Tensor and device == x.device:
            device = None  # (`x`'s own device: a torch or CuPy array's too)
        _device(device, name)
        return _full_like(x, fill, dtype)  # (a constant of `x`'s shape, dtype, library and device)

    like.__name__ = like.__qualname__ = name
    like.__doc__ = (
        f"A constant Tensor of `x`'s shape, dtype (or `dtype`), library and device, filled with {fill}."
    )
    return like


empty_like = _like("empty_like", 0)
zeros_like = _like("zeros_like", 0)
ones_like = _like("ones_like", 1)


def full_like(x: Any, /, fill_value: Any, *, dtype: DTypeLike | None = None, device: Any = None) -> Tensor:
    """`full` of `x`'s shape, dtype (or `dtype`), library and device; differentiable in a Tensor
    `fill_value`."""
    dt = dtype_of(x) if dtype is None else dtype
    if type(fill_value) is Tensor:
        return full(shape_of(x), fill_value, dtype=dt)
    return _like("full_like", fill_value)(x, dtype=dt, device=device)  # type: ignore[no-any-return]


def linspace(
    start: Any,
    stop: Any,
    /,
    num: int,
    *,
    dtype: DTypeLike | None = None,
    device: Any = None,
    endpoint: bool = True,
) -> Tensor:
    """numpy.linspace (differentiable in Tensor end points); float64 for Python numbers."""
    _device(device, "linspace")
    if type(start) is not Tensor and type(stop) is not Tensor:  # numbers: numpy's own (its rounding)
        return wrap(np.linspace(start, stop, num, endpoint=endpoint, dtype=dtype))
    out = numpy_functions[np.linspace](start, stop, num, endpoint=endpoint)
    return _tensors(out if dtype is None else ops.astype(out, dtype))  # type: ignore[no-any-return]


def from_dlpack(x: Any, /, *, device: Any = None, copy: Any = None) -> Tensor:
    """An array of any library that speaks DLPack, as a constant Tensor of a numpy array."""
    _device(device, "from_dlpack")
    return wrap(np.from_dlpack(x))


tril = _numpy_function("tril", np.tril)
triu = _numpy_function("triu", np.triu)


def _listed(name: str, func: Any) -> Function:
    """numpy's `func`, whose tuple of arrays the standard gives as a list."""
    impl = numpy_functions[func]
    doc = f"The array API's ``{name}``: einad's numpy.{name} on Tensors, as a list."
    return _returning_tensors(name, lambda *args, **kwargs: list(impl(*args, **kwargs)), func, doc)


meshgrid = _listed("meshgrid", np.meshgrid)
broadcast_arrays = _listed("broadcast_arrays", np.broadcast_arrays)


# -- data types --------------------------------------------------------------------------------


def _dtype(x: Any) -> Any:
    return x.dtype if type(x) is Tensor else x


def astype(x: Any, dtype: DTypeLike, /, *, copy: bool = True, device: Any = None) -> Tensor:
    """`x` cast to `dtype`, differentiable (a cast to an integer dtype has derivative zero)."""
    _device(device, "astype")
    return wrap(ops.astype(x, dtype))


def can_cast(from_: Any, to: DTypeLike, /) -> bool:
    """numpy.can_cast of a dtype or a Tensor's dtype."""
    return builtins.bool(np.can_cast(_dtype(from_), to))


class FInfo(NamedTuple):
    """The standard's finfo: Python floats (numpy's finfo gives numpy scalars)."""

    bits: int
    eps: float
    max: float
    min: float
    smallest_normal: float
    dtype: Any


def finfo(type: Any, /) -> FInfo:  # noqa: A002  (the standard's name)
    """numpy.finfo of a dtype or a Tensor's dtype, its limits as Python floats."""
    f = np.finfo(_dtype(type))
    limits = (float(f.eps), float(f.max), float(f.min), float(f.smallest_normal))
    return FInfo(f.bits, *limits, f.dtype.type)


def iinfo(type: Any, /) -> Any:  # noqa: A002  (the standard's name)
    """numpy.iinfo of a dtype or a Tensor's dtype."""
    return np.iinfo(_dtype(type))


def isdtype(dtype: DTypeLike, kind: Any) -> bool:
    """numpy.isdtype: whether `dtype` is of `kind` (a dtype, a kind's name, or a tuple of them)."""
    return builtins.bool(np.isdtype(np.dtype(dtype), kind))


def result_type(*arrays_and_dtypes: Any) -> Any:
    """numpy.result_type of dtypes, Tensors and Python numbers (weak, as numpy 2's)."""
    return np.result_type(*[_dtype(a) for a in arrays_and_dtypes])


def clip(x: Any, /, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002  (the standard's names)
    """numpy.clip, differentiable in all three (`min` and `max` numbers, arrays or None)."""
    return _tensors(numpy_functions[np.clip](x, min, max))  # type: ignore[no-any-return]


# -- sorting: numpy's, with the standard's ``descending`` ----------------------------------------


def sort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The values along `axis` in order (differentiable: a gather); equal values keep their
    order in both directions."""
    if not descending:
        return indexing.sort(x, axis=axis)
    return ops.flip(indexing.sort(ops.flip(x, axis), axis=axis), axis)


def argsort(x: Any, /, *, axis: int = -1, descending: bool = False, stable: bool = True) -> Tensor:
    """The indices that sort `x` along `axis`; equal values keep their order in both directions."""
    if not descending:
        return _tensors(indexing.argsort(x, axis=axis))  # type: ignore[no-any-return]
    last = shape_of(x)[axis] - 1 if shape_of(x) else 0
    return _tensors(ops.flip(last - indexing.argsort(ops.flip(x, axis), axis=axis), axis))  # type: ignore[no-any-return]


# -- inspection --------------------------------------------------------------------------------

DTYPES = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 complex128".split()  # noqa: SIM905
"""The standard's dtypes, by name."""


class _Info:
    """What `__array_namespace_info__` returns: the namespace's capabilities, devices and dtypes."""

    def capabilities(self) -> dict[str, Any]:
        # boolean indexing and nonzero give shapes that depend on values: einad computes them
        # eagerly, and under `einad.jit` refuses them (as JAX's jit does)
        return {"boolean indexing": True, "data-dependent shapes": True, "max dimensions": 64}

    def default_device(self) -> str:
        return DEVICE

    def devices(self) -> list[str]:
        return [DEVICE]

    def default_dtypes(self, *, device: Any = None) -> dict[str, Any]:
        _device(device, "default_dtypes")
        return {
            "real floating": np.float64,
            "complex floating": np.complex128,
            "integral": np.int64,
            "indexing": np.int64,
        }

    def dtypes(self, *, device: Any = None, kind: Any = None) -> dict[str, Any]:
        _device(device, "dtypes")
        if kind is None:
            return {n: np.dtype(n).type for n in DTYPES}
        # (numpy's isdtype knows the standard's kinds, and refuses another name)
        return {n: np.dtype(n).type for n in DTYPES if np.isdtype(np.dtype(n), kind)}


def __array_namespace_info__() -> _Info:
    """The namespace's inspection functions (devices, default dtypes, dtypes by kind)."""
    return _Info()


# -- the Tensor's side of the protocol -----------------------------------------------------------

_NAMESPACE: Any = None  # this module, set below


def _array_namespace(self: Tensor, /, *, api_version: str | None = None) -> Any:
    """This namespace (`einad.array_api`): the standard's functions on einad Tensors."""
    if api_version is not None and api_version not in ("2021.12", "2022.12", "2023.12", "2024.12"):
        raise ValueError(f"einad.array_api follows the array API standard 2024.12, not {api_version!r}")
    return _NAMESPACE


def _to_device(self: Tensor, device: Any, /, *, stream: Any = None) -> Tensor:
    """The tensor itself on its own device (the only one: einad does not move arrays)."""
    if device != self.device:
        raise ValueError(
            f"to_device: einad does not move arrays between devices ({self.device!r} to {device!r})"
        )
    return self


def _dlpack(
    self: Tensor, /, *, stream: Any = None, max_version: Any = None, dl_device: Any = None, copy: Any = None
) -> Any:
    """The value's DLPack capsule (a traced value refuses, as its conversion to numpy does). The
    capsule is of a copy where the array is read-only (DLPack cannot say so), or where asked."""
    value = np.asarray(self)
    flagged = max_version is not None and tuple(max_version) >= (1, 0)  # (DLPack 1 flags read-only data)
    if copy or not (value.flags.writeable or flagged):
        if copy is False:
            raise BufferError(
                "__dlpack__(copy=False): einad's array is read-only, which a DLPack capsule before "
                "version 1 cannot say: ask for max_version=(1, 0), or a copy"
            )
        value = value.copy()
    return value.__dlpack__(stream=stream, max_version=max_version, dl_device=dl_device)


def _dlpack_device(self: Tensor) -> tuple[int, int]:
    kind, number = np.asarray(strip(self)).__dlpack_device__()
    return kind, number


Tensor.__array_namespace__ = _array_namespace  # type: ignore[attr-defined]
Tensor.to_device = _to_device  # type: ignore[attr-defined]
Tensor.__dlpack__ = _dlpack  # type: ignore[attr-defined]
Tensor.__dlpack_device__ = _dlpack_device  # type: ignore[attr-defined]


# -- the namespace -----------------------------------------------------------------------------

# The standard's functions (2024.12) that einad runs as numpy's function of the same name.
FROM_NUMPY = (  # noqa: SIM905  (grouped as the standard groups them)
    # elementwise
    "abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_left_shift bitwise_invert "
    "bitwise_or bitwise_right_shift bitwise_xor ceil conj copysign cos cosh divide equal exp "
    "expm1 floor floor_divide greater greater_equal hypot imag isfinite isinf isnan less less_equal "
    "log log1p log2 log10 logaddexp logical_and logical_not logical_or logical_xor maximum minimum "
    "multiply negative nextafter not_equal positive pow real reciprocal remainder round sign signbit "
    "sin sinh square sqrt subtract tan tanh trunc "
    # indexing, linear algebra, manipulation, searching, sets, statistics, utilities
    "take take_along_axis matmul matrix_transpose tensordot vecdot "
    "broadcast_to concat expand_dims flip moveaxis permute_dims repeat reshape roll "
    "squeeze stack tile unstack "
    "argmax argmin count_nonzero nonzero searchsorted where "
    "unique_all unique_counts unique_inverse unique_values "
    "cumulative_sum cumulative_prod max mean min prod std sum var all any diff"
).split()

LINALG = (  # noqa: SIM905
    "cholesky cross det diagonal eigh eigvalsh inv matmul matrix_norm matrix_power matrix_rank "
    "matrix_transpose outer pinv qr slogdet solve svd svdvals tensordot trace vecdot vector_norm"
).split()

FFT = "fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftfreq rfftfreq fftshift ifftshift".split()  # noqa: SIM905

globals().update({name: _numpy_function(name, getattr(np, name)) for name in FROM_NUMPY})


def _frequencies(name: str) -> Function:
    sample = getattr(_fft, name)

    def frequencies(
        n: int, /, *, d: float = 1.0, dtype: DTypeLike | None = None, device: Any = None
    ) -> Tensor:
        _device(device, f"fft.{name}")
        out = wrap(sample(n, d))
        return out if dtype is None else astype(out, dtype)

    frequencies.__name__ = frequencies.__qualname__ = name
    frequencies.__doc__ = f"numpy.fft.{name} (float64, or `dtype`), a constant Tensor."
    return frequencies


linalg = SimpleNamespace(**{name: _numpy_function(name, getattr(np.linalg, name)) for name in LINALG})
"""The standard's linear algebra extension: einad's numpy.linalg functions of those names."""

fft = SimpleNamespace(
    **{
        name: _frequencies(name)
        if name.endswith("freq")
        else _returning_tensors(name, getattr(_fft, name), getattr(_fft, name), f"`einad.fft.{name}`.")
        for name in FFT
    }
)
"""The standard's FFT extension: `einad.fft`'s transforms."""

e = math.e
inf = math.inf
nan = math.nan
pi = math.pi
newaxis = None

# numpy's scalar types, as numpy's and JAX's namespaces give them (``bool`` here is numpy's):
# ``xp.float64 == t.dtype`` holds, and ``None == xp.float64`` does not (``np.dtype(None)`` is float64)
globals().update({name: np.dtype(name).type for name in DTYPES})

_NAMESPACE = sys.modules[__name__]
