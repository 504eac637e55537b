"""The one boundary between einad and array libraries.

einad computes on whatever array library its inputs come from: numpy (the default,
and the fast path), or any library that follows the Python array API standard —
PyTorch, CuPy, dask.array, array-api-strict — reached through `array-api-compat`'s
`array_namespace` (an optional dependency: numpy arrays never need it).

Every implementation gets its library here: ``xp = namespace(x, y)``. numpy arrays
give the `numpy` module itself (numpy 2 speaks the standard's names), so numpy code
pays one type check. Python numbers and numpy scalars belong to no library: they
combine with arrays of any one library. Arrays of two libraries in one call are a
TypeError naming both.

Dtypes: einad describes every dtype with numpy's `numpy.dtype` (``np_dtype``), whatever
library holds the data, so promotion and kind checks are written once; `lib_dtype`
turns one back into the library's own dtype object.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

_compat: Any
try:  # an optional dependency: only arrays of other libraries need it
    import array_api_compat as _compat
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _compat = None

_SCALARS = (bool, int, float, complex, np.generic)
_namespaces: dict[type, ModuleType] = {np.ndarray: np}
_dtypes: dict[Any, np.dtype[Any]] = {}


def is_numpy(x: Any) -> bool:
    """Whether `x` is a numpy array or scalar."""
    return isinstance(x, (np.ndarray, np.generic))


_array_types: set[type] = {np.ndarray}
_own_types: set[type] = set()
"""Types that speak the array API but are not another library's arrays: einad's own Tensor
(registered by `core`), which einad unwraps itself rather than computing on it through a namespace."""


def own_type(t: type) -> None:
    """Register `t` (einad's Tensor) as einad's own: never an array of another library."""
    _own_types.add(t)


def is_array(x: Any) -> bool:
    """Whether `x` is an array of some library (numpy arrays included; Python numbers not)."""
    t = type(x)
    if t in _array_types:  # a type seen before: one set lookup per call on the hot path
        return True
    if isinstance(x, np.ndarray):
        return True
    if isinstance(x, _SCALARS) or x is None or t in _own_types:
        return False
    if hasattr(x, "__array_namespace__") or (_compat is not None and _compat.is_array_api_obj(x)):
        if not hasattr(x, "concrete"):  # not a value staged by `ea.jit`
            _array_types.add(t)
        return True
    return False


def library(x: Any) -> str:
    """The name of the library an array belongs to ("numpy", "torch", "dask", ...)."""
    if isinstance(x, (np.ndarray, np.generic)):
        return "numpy"
    return type(x).__module__.split(".")[0]


def _foreign_namespace(t: type, x: Any) -> ModuleType:
    xp = _namespaces.get(t)
    if xp is None:
        if isinstance(x, np.ndarray):  # a subclass of numpy's (quimb's qarray, np.matrix)
            return np
        if hasattr(x, "concrete"):  # a value staged by `ea.jit`: the library of what it stands for
            return xp_of(x.concrete)
        if hasattr(x, "__array_namespace__") and library(x) == "array_api_strict":
            xp = x.__array_namespace__()
        elif _compat is None:
            raise TypeError(
                f"einad needs array-api-compat to compute on {library(x)} arrays: "
                "pip install array-api-compat (or einad[torch], einad[dask], einad[cupy])"
            )
        else:
            xp = _compat.array_namespace(x)
        _namespaces[t] = xp
    return xp


def namespace(*xs: Any) -> ModuleType:
    """The array library of the arrays among `xs` (numpy when there are none).

    Raises:
        TypeError: If `xs` hold arrays of two libraries, naming both.
    """
    found: Any = None
    for x in xs:
        if isinstance(x, _SCALARS) or x is None:
            continue
        if found is None:
            found = x
        elif type(x) is not type(found) and library(x) != library(found):
            raise TypeError(
                f"arrays of two libraries in one call: {library(found)} ({type(found).__name__}) and "
                f"{library(x)} ({type(x).__name__}); convert one of them first"
            )
    if found is None or type(found) is np.ndarray:
        return np
    return _foreign_namespace(type(found), found)


def xp_of(x: Any) -> ModuleType:
    """The library of one value (numpy for numbers): the fast form of `namespace` for one argument."""
    t = type(x)
    if t is np.ndarray or isinstance(x, _SCALARS):
        return np
    return _foreign_namespace(t, x)


def check_broadcast(xs: Any) -> None:
    """numpy's ValueError ("shape mismatch: objects cannot be broadcast to a single shape") when
    the arrays among `xs` do not broadcast together: torch raises a RuntimeError of its own
    (array-api-strict and dask a ValueError, as numpy). Shapes of unknown sizes are not checked."""
    shapes = [tuple(x.shape) for x in xs if hasattr(x, "shape")]
    if any(s != shapes[0] for s in shapes) and all(type(d) is int for s in shapes for d in s):
        np.broadcast_shapes(*shapes)


def ordered(xp: Any, x: Any) -> Any:
    """`x` (an array of the library `xp`) with booleans as 0 and 1 (uint8), for the standard's
    ordering functions (sorting, searching, max and min), which take no booleans (array-api-strict
    refuses them, torch's argmax too); numpy's own take booleans, False first."""
    return xp.astype(x, xp.uint8) if xp is not np and np_dtype(x.dtype).kind == "b" else x


def np_dtype(d: Any) -> np.dtype[Any]:
    """`d`, any library's dtype object, as the numpy dtype of the same name.

    Raises:
        TypeError: For a dtype numpy has no match for (bfloat16, say).
    """
    if isinstance(d, np.dtype):
        return d
    out = _dtypes.get(d)
    if out is None:
        name = str(d).rsplit(".", 1)[-1]
        try:
            out = np.dtype(name)
        except TypeError:
            raise TypeError(f"einad has no numpy match for the dtype {d}") from None
        _dtypes[d] = out
    return out


def lib_dtype(xp: ModuleType, dtype: Any) -> Any:
    """The dtype object of library `xp` that matches `dtype` (a numpy dtype or anything it names)."""
    dt = np.dtype(dtype) if not isinstance(dtype, np.dtype) else dtype
    if xp is np:
        return dt
    found = getattr(xp, dt.name, None)
    if found is None:
        raise TypeError(f"{xp.__name__} has no dtype {dt.name}; convert the data to a dtype it has first")
    return found


def cast(x: Any, dtype: np.dtype[Any]) -> Any:
    """`x`, an array of any library, as the numpy-described `dtype`, in its library: `x` itself
    when it has that dtype; of a complex `x` cast to a real dtype, the real part (the one cast of
    a gradient or tangent to its leaf's dtype: a real leaf's gradient is real, as in JAX)."""
    have = np_dtype(x.dtype)
    if have == dtype:
        return x
    xp = xp_of(x)
    if have.kind == "c" and dtype.kind != "c":
        x = xp.real(x)
    if xp is np:
        return np.asarray(x).astype(dtype)
    return xp.astype(x, lib_dtype(xp, dtype))


def device(x: Any) -> Any:
    """The device an array lives on (None for numpy arrays and numbers)."""
    if isinstance(x, (np.ndarray, *_SCALARS)) or _compat is None:
        return None
    if hasattr(x, "concrete"):  # a value staged by `ea.jit`: the device of what it stands for
        return device(x.concrete)
    return _compat.device(x)


def zeros(like: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """Zeros of `shape` and (numpy-described) `dtype` in the library and on the device of `like`."""
    xp = xp_of(like)
    if xp is np:
        return np.zeros(shape, dtype=dtype)
    return xp.zeros(shape, dtype=lib_dtype(xp, dtype), device=device(like))


def ones(like: Any, shape: tuple[int, ...], dtype: Any) -> Any:
    """Ones of `shape` and `dtype` in the library and on the device of `like`."""
    xp = xp_of(like)
    if xp is np:
        # (a scalar, the seed of every gradient: one call of numpy's C constructor)
        return np.array(1, dtype=dtype) if shape == () else np.ones(shape, dtype=dtype)
    return xp.ones(shape, dtype=lib_dtype(xp, dtype), device=device(like))


def asarray(like: Any, value: Any, dtype: Any = None) -> Any:
    """`value` (numbers, numpy data) as an array of `like`'s library and device."""
    xp = xp_of(like)
    if xp is np:
        return np.asarray(value, dtype=dtype)
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        value = np.array(value)  # torch warns on (and may share) a read-only numpy buffer
    dt = None if dtype is None else lib_dtype(xp, dtype)
    return xp.asarray(value, dtype=dt, device=device(like))


def blocked(x: Any) -> bool:
    """Whether `x` is an array of blocks (dask's): its operations are tasks over the blocks,
    its library's einsum pairs them, its writes are tasks too."""
    return hasattr(x, "chunks")


_writable: dict[type, bool] = {}


def writes_in_place(x: Any) -> bool:
    """Whether arrays of `x`'s type take the standard's ``a[::2] = b`` in place (torch, CuPy,
    array-api-strict do; JAX's arrays are immutable): asked once per type, of two elements.
    Blocked arrays (dask's) count as not: their writes are tasks, not writes."""
    t = type(x)
    found = _writable.get(t)
    if found is None:
        found = False
        if not blocked(x):
            xp = xp_of(x)
            try:
                probe = xp.zeros((2,), dtype=x.dtype, device=device(x))
                probe[::2] = xp.ones((1,), dtype=x.dtype, device=device(x))
                found = bool(probe[0] == 1) and bool(probe[1] == 0)
            except (TypeError, ValueError, NotImplementedError, RuntimeError):  # (JAX: TypeError)
                found = False
        _writable[t] = found
    return found


def detached(x: Any) -> Any:
    """`x` without its library's own autograd record: a torch tensor made with
    ``requires_grad=True`` is detached (einad differentiates; torch's graph would only cost memory)."""
    if getattr(x, "requires_grad", False) and library(x) == "torch":
        return x.detach()
    return x


def to_numpy(x: Any) -> Any:
    """A numpy copy of an array of any library (dask arrays are computed): for tests and printing."""
    if isinstance(x, (np.ndarray, np.generic, *_SCALARS)):
        return np.asarray(x)
    lib = library(x)
    if lib == "torch":
        return x.detach().cpu().resolve_conj().numpy()
    if lib == "dask":
        return np.asarray(x.compute())
    if lib == "cupy":
        return x.get()
    if lib == "array_api_strict":
        return np.from_dlpack(x) if x.dtype != x.__array_namespace__().bool else _strict_bool(x)
    return np.asarray(x)


def _strict_bool(x: Any) -> Any:
    xp = x.__array_namespace__()
    return np.from_dlpack(xp.astype(x, xp.uint8)).astype(bool)
