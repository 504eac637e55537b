"""numpy's functions that einad computes as compositions of its own operations.

`numpy_api` dispatches numpy's functions on Tensors to einad operations; the ones here have
no operation of their own in einad but are a few of them: the nan-ignoring reductions (masks
with ``where=``), quantiles (a sort and a gather), `interp` and `searchsorted` (comparisons),
`convolve` and `correlate` (a gather of windows and an einsum), `cov`, `trapezoid`, the
polynomials, the everyday shape helpers (`rot90`, `append`, `meshgrid`, ...), and numpy's
rearrangements (`insert`, `delete`, `block`, `choose`, `array_split`), run by numpy itself on
integer labels of the elements, whose result a gather turns back into values. Each is differentiable
wherever its parts are, staged by `einad.jit` and mapped by `vmap`, because it is nothing but
their operations. The few whose result's shape depends on the values (`nonzero`, `unique`,
`argwhere`, `bincount`'s length) read the values where they are known (eagerly, under `grad`
or `jvp`) and raise a `TracerError` inside `einad.jit` or `vmap`, as JAX's do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from . import arrays, ops
from .aliases import Array, Axis
from .arrays import to_numpy
from .core import Staged, Tensor, strip
from .errors import TracerError
from .rules import elementwise, indexing, linalg, reductions
from .util import (
    dtype_of,
    lib_array,
    normalize_axes,
    normalize_axis,
    raw,
    result_dtype,
    shape_of,
    to_array_operand,
    wrap,
)

Function = Callable[..., Any]


def _known(x: Any, name: str) -> Any:
    """The numpy value of `x`, for a function whose result's shape depends on it: known eagerly
    and under grad/jvp (read as Python control flow reads a value, ``Tensor._number``); inside
    `einad.jit` or `vmap` it is not (TracerError, as JAX's)."""
    v = x._number() if type(x) is Tensor else x  # (a value mapped by vmap: TracerError)
    if type(v) is Staged:
        raise TracerError(
            f"numpy.{name} on a value computed inside einad.jit: the shape of its result depends on "
            "the values, which are not known while a program is staged (compute it outside the "
            "transformation)"
        )
    return to_numpy(v) if not isinstance(v, (bool, int, float, complex)) else np.asarray(v)


def _tensor(x: Any) -> Tensor:
    """`x` as a Tensor (an array of another library too), so that operators on it are einad's."""
    return wrap(to_array_operand(x))


def _viewed(x: Any) -> Tensor:
    """`x` itself where it is a Tensor (so that numpy's views of it, which these compositions
    return, are views of it: `core.view`), else as `_tensor` makes it."""
    return x if type(x) is Tensor else _tensor(x)


def _not(mask: Any) -> Any:
    return ops.equal(mask, False)


def _and(mask: Any, where: Any) -> Any:
    """`mask` and a user's ``where=`` (True: no mask of the user's)."""
    return mask if where is True else ops.where(where, mask, False)


# -- elementwise -------------------------------------------------------------------------------


def _fabs(x: Any) -> Any:
    if dtype_of(x).kind == "c":
        raise TypeError("numpy.fabs takes no complex numbers (numpy's rule): use numpy.abs")
    return ops.abs(x)


def _cbrt(x: Any) -> Any:
    return ops.sign(x) * ops.abs(x) ** (1 / 3)


def _deg2rad(x: Any) -> Any:
    return x * (np.pi / 180)


def _rad2deg(x: Any) -> Any:
    return x * (180 / np.pi)


def _float_power(x: Any, y: Any) -> Any:
    wide = np.complex128 if result_dtype(x, y).kind == "c" else np.float64
    return ops.power(ops.astype(x, wide), ops.astype(y, wide))


def _nan_aware(choose: str) -> Function:
    """fmax and fmin: maximum and minimum that take the other operand where one is nan."""

    def call(x: Any, y: Any) -> Any:
        return ops.where(ops.isnan(y), x, ops.where(ops.isnan(x), y, getattr(ops, choose)(x, y)))

    call.__name__ = {"maximum": "fmax", "minimum": "fmin"}[choose]
    return call


def _trunc(x: Any) -> Any:
    return ops.where(ops.less(x, 0), ops.ceil(x), ops.floor(x))


def _fmod(x: Any, y: Any) -> Any:
    """numpy.fmod (the sign of `x`) from `mod` (the sign of `y`): one divisor less where they differ."""
    m = ops.mod(x, y)
    apart = ops.where(ops.not_equal(m, 0), ops.not_equal(ops.less(m, 0), ops.less(x, 0)), False)
    return ops.where(apart, m - y, m)


def _heaviside(x: Any, h: Any) -> Any:
    dt = result_dtype(x, h)
    step = ops.where(ops.less(x, 0), 0.0, ops.where(ops.greater(x, 0), 1.0, h))
    return ops.astype(step, dt)


def _logical(op: str) -> Function:
    def call(x: Any, y: Any) -> Any:
        bx, by = ops.not_equal(x, 0), ops.not_equal(y, 0)
        if op == "and":
            return ops.where(bx, by, False)
        if op == "or":
            return ops.where(bx, True, by)
        return ops.not_equal(bx, by)

    call.__name__ = f"logical_{op}"
    return call


def _logical_not(x: Any) -> Any:
    return ops.equal(x, 0)


def _isposinf(x: Any) -> Any:
    return ops.where(ops.isinf(x), ops.greater(x, 0), False)


def _isneginf(x: Any) -> Any:
    return ops.where(ops.isinf(x), ops.less(x, 0), False)


def _nan_to_num(
    x: Any,
    copy: bool = True,
    nan: float = 0.0,
    posinf: float | None = None,
    neginf: float | None = None,
) -> Any:
    dt = dtype_of(x)
    if dt.kind == "c":
        re = _nan_to_num(ops.real(x), copy, nan, posinf, neginf)
        return re + 1j * _nan_to_num(ops.imag(x), copy, nan, posinf, neginf)
    if dt.kind != "f":
        return ops.astype(x, dt)
    big = np.finfo(dt)
    out = ops.where(ops.isnan(x), nan, x)
    out = ops.where(_isposinf(x), big.max if posinf is None else posinf, out)
    return ops.astype(ops.where(_isneginf(x), big.min if neginf is None else neginf, out), dt)


def _copysign(x: Any, y: Any) -> Any:
    dt = np.result_type(result_dtype(x, y), np.float16)
    magnitude = ops.abs(ops.astype(x, dt))
    return ops.where(ops.signbit(y), -magnitude, magnitude)


def _ldexp(x: Any, e: Any) -> Any:
    """``x * 2**e``, in the floating dtype of `x` (numpy's)."""
    dt = np.result_type(dtype_of(x), np.float16)
    return ops.astype(ops.astype(x, dt) * ops.power(2.0, e), dt)


def _modf(x: Any) -> tuple[Any, Any]:
    """The fractional and the integral part, both with the sign of `x` (the first differentiable)."""
    whole = _trunc(x)
    return x - whole, whole


def _frexp(x: Any) -> tuple[Any, Any]:
    """numpy.frexp: the mantissa m (0.5 <= |m| < 1, or `x` itself at 0, inf and nan) and the
    integer exponent e of ``x = m * 2**e``; m is ``x * 2**-e``, differentiable (slope
    ``2**-e``), e is not. The power is applied in two halves, each a normal number also
    where ``2**-e`` alone is not (a subnormal `x`, a huge one)."""
    e = elementwise.frexp_exponent(x)
    dt = np.result_type(dtype_of(x), np.float16)
    half = ops.floor_divide(e, 2)
    m = ops.astype(x, dt) * ops.power(2.0, -half) * ops.power(2.0, half - e)
    return ops.astype(m, dt), e


def _divmod(x: Any, y: Any) -> tuple[Any, Any]:
    return ops.floor_divide(x, y), ops.mod(x, y)


def _matvec(a: Any, v: Any) -> Any:
    return ops.einsum("...ij,...j->...i", a, v)


def _vecmat(v: Any, a: Any) -> Any:
    return ops.einsum("...j,...ji->...i", ops.conj(v), a)  # (numpy's: the vector conjugated)


UFUNCS: dict[np.ufunc, tuple[Function, bool]] = {
    np.fabs: (_fabs, False),
    np.cbrt: (_cbrt, False),
    np.deg2rad: (_deg2rad, False),
    np.radians: (_deg2rad, False),
    np.rad2deg: (_rad2deg, False),
    np.degrees: (_rad2deg, False),
    np.float_power: (_float_power, False),
    np.fmax: (_nan_aware("maximum"), False),
    np.fmin: (_nan_aware("minimum"), False),
    np.trunc: (_trunc, False),
    np.fmod: (_fmod, False),
    np.heaviside: (_heaviside, False),
    np.logical_and: (_logical("and"), True),
    np.logical_or: (_logical("or"), True),
    np.logical_xor: (_logical("xor"), True),
    np.logical_not: (_logical_not, True),
    np.copysign: (_copysign, False),
    np.ldexp: (_ldexp, False),
    np.modf: (_modf, False),
    np.frexp: (_frexp, False),
    np.divmod: (_divmod, False),
    np.matvec: (_matvec, False),
    np.vecmat: (_vecmat, False),
    np.vecdot: (linalg.vecdot, False),
}
"""numpy's ufuncs as compositions: (the function of the operands, whether it gives booleans)."""


# -- reductions that ignore nans, and the statistics ---------------------------------------------


def _nan_fold(name: str) -> Function:
    """nansum and nanprod: sum and prod of the elements that are not nan (a `where=` mask)."""
    fold = getattr(ops, name)

    def call(
        a: Any,
        axis: Axis = None,
        dtype: Any = None,
        keepdims: bool = False,
        initial: Any = None,
        where: Any = True,
    ) -> Any:
        return fold(a, axis, keepdims, dtype=dtype, initial=initial, where=_and(_not(ops.isnan(a)), where))

    call.__name__ = f"nan{name}"
    return call


def _nanmean(
    a: Any, axis: Axis = None, dtype: Any = None, keepdims: bool = False, *, where: Any = True
) -> Any:
    return ops.mean(a, axis, keepdims, dtype=dtype, where=_and(_not(ops.isnan(a)), where))


def _nanvar(
    a: Any,
    axis: Axis = None,
    dtype: Any = None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where: Any = True,
) -> Any:
    return ops.var(a, axis, ddof, keepdims, dtype=dtype, where=_and(_not(ops.isnan(a)), where))


def _nanstd(
    a: Any,
    axis: Axis = None,
    dtype: Any = None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where: Any = True,
) -> Any:
    return ops.sqrt(_nanvar(a, axis, dtype, ddof, keepdims, where=where))


def _nan_extreme(name: str) -> Function:
    """nanmax and nanmin: the extreme of the elements that are not nan; nan where all are."""
    high = name == "max"

    def call(
        a: Any, axis: Axis = None, keepdims: bool = False, initial: Any = None, where: Any = True
    ) -> Any:
        if dtype_of(a).kind not in "fc":
            return getattr(ops, name)(
                a, axis, keepdims, initial=initial, where=None if where is True else where
            )
        keep = _and(_not(ops.isnan(a)), where)
        start = (-np.inf if high else np.inf) if initial is None else initial
        out = getattr(ops, name)(a, axis, keepdims, initial=start, where=keep)
        if initial is not None:
            return out
        return ops.where(ops.any(keep, axis, keepdims), out, np.nan)

    call.__name__ = f"nan{name}"
    return call


def _nanarg(name: str) -> Function:
    def call(a: Any, axis: int | None = None, out: Any = None, *, keepdims: bool = False) -> Any:
        fill = -np.inf if name == "argmax" else np.inf
        return getattr(indexing, name)(ops.where(ops.isnan(a), fill, a), axis, keepdims=keepdims)

    call.__name__ = f"nan{name}"
    return call


def _nan_scan(name: str, fill: float) -> Function:
    def call(a: Any, axis: int | None = None, dtype: Any = None) -> Any:
        return getattr(reductions, name)(ops.where(ops.isnan(a), fill, a), axis, dtype=dtype)

    call.__name__ = f"nan{name}"
    return call


def _ptp(a: Any, axis: Axis = None, keepdims: bool = False) -> Any:
    return ops.max(a, axis, keepdims) - ops.min(a, axis, keepdims)


def _average(
    a: Any, axis: Axis = None, weights: Any = None, returned: bool = False, *, keepdims: bool = False
) -> Any:
    a = _tensor(a)
    shape = shape_of(a)
    if weights is None:
        avg = ops.mean(a, axis, keepdims)
        scale: Any = math.prod(shape[k] for k in normalize_axes(axis, len(shape)))  # numpy's count
    else:
        w = _tensor(weights)
        if shape_of(w) != shape:
            if axis is None:
                raise TypeError("numpy.average: axis must be given when weights and a differ in shape")
            axes = normalize_axes(axis, len(shape))
            if shape_of(w) != tuple(shape[k] for k in axes):
                raise ValueError("numpy.average: the weights' shape must be a's or that of the axes averaged")
            order = sorted(range(len(axes)), key=lambda k: axes[k])  # the weights' axes in a's order
            w = ops.transpose(w, order) if len(axes) > 1 else w
            w = ops.reshape(w, tuple(shape[k] if k in axes else 1 for k in range(len(shape))))
        scale = ops.sum(ops.broadcast_to(w, shape) if shape_of(w) != shape else w, axis, keepdims)
        avg = ops.sum(a * w, axis, keepdims) / scale
    if not returned:
        return avg
    return avg, ops.broadcast_to(ops.astype(scale, avg.dtype), shape_of(avg))


_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


def _quantiles(a: Any, q: Any, axis: Axis, method: str, keepdims: bool, name: str, skip_nans: bool) -> Any:
    """The sorted elements along `axis`, gathered at ``q * (n - 1)`` and, for the linear and
    midpoint methods, interpolated (numpy's quantile; `q` a number or an array of them, its axes
    first in the result, not differentiated). Without `skip_nans`, nan where a lane holds one;
    with it, ``n`` counts each lane's other elements (sorted first), so the places are computed
    (staged under jit), and a lane of nans alone gives nan."""
    if method not in _METHODS:
        raise ValueError(
            f"numpy.{name} on einad Tensors: method is one of {', '.join(_METHODS)}, got {method!r}"
        )
    qs = np.asarray(_known(q, name), dtype=float) / (100 if "percentile" in name else 1)
    if np.any((qs < 0) | (qs > 1)):
        raise ValueError(
            "Quantiles must be in the range [0, 1]"
            if "quantile" in name
            else "Percentiles must be in the range [0, 100]"
        )
    a = _tensor(a)
    nd = len(shape_of(a))
    axes = tuple(range(nd)) if axis is None else normalize_axes(axis, nd)
    a = ops.moveaxis(a, axes, tuple(range(nd - len(axes), nd)))  # the axes reduced: last, merged
    rest = shape_of(a)[: nd - len(axes)]
    ranked = indexing.sort(ops.reshape(a, (*rest, -1)), -1)  # (nans last, as numpy sorts them)
    real = dtype_of(ranked) if dtype_of(ranked).kind in "fc" else np.dtype(np.float64)
    gather: Any
    if skip_nans and dtype_of(ranked).kind in "fc":
        count = ops.sum(_not(ops.isnan(ranked)), -1, keepdims=True)  # (*rest, 1)
        last = ops.maximum(count - 1, 0)
        pos: Any = ops.astype(count - 1, real) * lib_array(ranked, qs.ravel().astype(real))  # (*rest, len(q))

        def place(k: Any) -> Any:
            return ops.astype(ops.clip(k, 0, last), np.intp)

        def gather(k: Any) -> Any:
            return indexing.take_along_axis(ranked, k, -1)

        rounding: Any = {"lower": ops.floor, "higher": ops.ceil, "nearest": ops.round, "linear": ops.floor}
        lo = place(rounding.get(method, ops.floor)(pos))
        hi = place(ops.astype(lo, real) + 1)
        frac = pos - ops.astype(lo, real)
    else:
        count = None
        n = shape_of(ranked)[-1]
        pos = qs.ravel() * (n - 1)
        rounding = {"lower": np.floor, "higher": np.ceil, "nearest": np.around}.get(method, np.floor)
        lo = rounding(pos).astype(np.intp)
        hi = np.minimum(lo + 1, n - 1)
        frac = lib_array(ranked, (pos - lo).astype(real))  # (planned with numpy: in x's library)

        def gather(k: Any) -> Any:
            return indexing.take(ranked, k, axis=-1)

    if method in ("lower", "higher", "nearest"):  # one element each (numpy's nearest: half to even)
        value = gather(lo)
    else:
        if method == "midpoint":
            frac = ops.where(ops.greater(frac, 0), 0.5, 0.0)
        below = gather(lo)
        value = below + (gather(hi) - below) * ops.astype(frac, real)  # numpy's lerp, to rounding
    if count is not None:  # a lane of nans alone: nan
        value = ops.where(ops.equal(count, 0), np.nan, value)
    elif dtype_of(ranked).kind in "fc":  # a lane with a nan: nan (sorted last, so not always picked)
        value = ops.where(ops.any(ops.isnan(ranked), -1, keepdims=True), np.nan, value)
    value = ops.moveaxis(
        ops.reshape(value, (*rest, *qs.shape)),
        tuple(range(len(rest), len(rest) + qs.ndim)),
        tuple(range(qs.ndim)),
    )
    if keepdims:
        kept = list(rest)
        for k in sorted(axes):
            kept.insert(k, 1)
        value = ops.reshape(value, (*qs.shape, *kept))
    return value


def _quantile_function(name: str) -> Function:
    """numpy's quantile, percentile, median and their nan-ignoring forms, with numpy's signature."""
    skip_nans = name.startswith("nan")
    if name.endswith("median"):

        def median(
            a: Any, axis: Axis = None, out: Any = None, overwrite_input: bool = False, keepdims: bool = False
        ) -> Any:
            return _quantiles(a, 0.5, axis, "linear", keepdims, name, skip_nans)

        median.__name__ = name
        return median

    def call(
        a: Any,
        q: Any,
        axis: Axis = None,
        out: Any = None,
        overwrite_input: bool = False,
        method: str = "linear",
        keepdims: bool = False,
        *,
        weights: Any = None,
        interpolation: Any = None,
    ) -> Any:
        if weights is not None or interpolation is not None:
            raise TypeError(
                f"numpy.{name} on einad Tensors takes no weights= or interpolation= (use method=)"
            )
        return _quantiles(a, q, axis, method, keepdims, name, skip_nans)

    call.__name__ = name
    return call


def _cov(
    m: Any,
    y: Any = None,
    rowvar: bool = True,
    bias: bool = False,
    ddof: int | None = None,
    fweights: Any = None,
    aweights: Any = None,
    *,
    dtype: Any = None,
) -> Any:
    """numpy.cov of observations without weights: one einsum of the centred variables."""
    if fweights is not None or aweights is not None:
        raise TypeError("numpy.cov on einad Tensors takes no fweights= or aweights=")
    x = _at_least_2d_rows(m, rowvar, dtype)
    if y is not None:
        x = ops.concatenate([x, _at_least_2d_rows(y, rowvar, dtype, second=True)], axis=0)
    n = shape_of(x)[1]
    dof = n - (ddof if ddof is not None else 0 if bias else 1)
    centred = x - ops.mean(x, axis=1, keepdims=True)
    c = ops.einsum("ij,kj->ik", centred, ops.conj(centred)) / max(dof, 0)
    return ops.reshape(c, ()) if shape_of(c) == (1, 1) else c


def _at_least_2d_rows(m: Any, rowvar: bool, dtype: Any, second: bool = False) -> Any:
    """The variables as rows, in numpy's dtype for cov (at least float64); numpy's own rule for
    transposing with ``rowvar=False``: `m` unless 1-D, the `second` (y) unless one row."""
    x = _tensor(m)
    vector = len(shape_of(x)) < 2
    x = wrap(ops.astype(x, np.result_type(dtype_of(x), np.float64) if dtype is None else dtype))
    if len(shape_of(x)) > 2:
        raise ValueError("numpy.cov: m has more than 2 dimensions")
    x = ops.reshape(x, (1, -1)) if len(shape_of(x)) < 2 else x
    keep = rowvar or (shape_of(x)[0] == 1 if second else vector)
    return x if keep else ops.transpose(x)


def _corrcoef(x: Any, y: Any = None, rowvar: bool = True, *, dtype: Any = None) -> Any:
    c = _cov(x, y, rowvar, dtype=dtype)
    if not shape_of(c):
        return c / c
    d = ops.sqrt(ops.real(ops.diagonal(c)))
    c = c / d[:, None] / d[None, :]
    if dtype_of(c).kind == "c":
        return ops.clip(ops.real(c), -1, 1) + 1j * ops.clip(ops.imag(c), -1, 1)
    return ops.clip(c, -1, 1)


# -- shapes ------------------------------------------------------------------------------------


def _rot90(m: Any, k: int = 1, axes: tuple[int, int] = (0, 1)) -> Any:
    """numpy.rot90: flips and a transposition, as numpy's own (of a Tensor, views)."""
    m = _viewed(m)
    nd = len(shape_of(m))
    if len(axes) != 2:
        raise ValueError("len(axes) must be 2.")
    a0, a1 = normalize_axis(axes[0], nd, "axes"), normalize_axis(axes[1], nd, "axes")
    if a0 == a1:
        raise ValueError("Axes must be different.")
    k %= 4
    if k == 0:
        return m[...]
    if k == 2:
        return ops.flip(ops.flip(m, a0), a1)
    order = list(range(nd))
    order[a0], order[a1] = order[a1], order[a0]
    if k == 1:
        return ops.transpose(ops.flip(m, a1), order)
    return ops.flip(ops.transpose(m, order), a1)


def _flip_axis(axis: int, name: str) -> Function:
    def call(m: Any) -> Any:
        if len(shape_of(m)) <= axis:
            raise ValueError(f"numpy.{name}: the input must be at least {axis + 1}-d")
        return ops.flip(m, axis)

    call.__name__ = name
    return call


def _append(arr: Any, values: Any, axis: int | None = None) -> Any:
    if axis is None:
        return ops.concatenate([ops.reshape(arr, (-1,)), ops.reshape(values, (-1,))], axis=0)
    return ops.concatenate([arr, values], axis=axis)


def _column_stack(tup: Sequence[Any]) -> Any:
    cols = [ops.reshape(a, (-1, 1)) if len(shape_of(a)) < 2 else a for a in tup]
    return ops.concatenate(cols, axis=1)


def at_least(rank: int) -> Function:
    """``np.atleast_1d``/``2d``/``3d``: numpy's placement of the new size-1 axes (a vector is a
    row, and in 3-D a matrix gains a last axis); several arrays give a tuple."""

    def one(a: Any) -> Any:
        shape = shape_of(a)
        if len(shape) >= rank:
            return ops.reshape(a, shape)
        if rank == 3 and len(shape) == 2:
            return ops.reshape(a, (*shape, 1))
        if rank == 3:
            return ops.reshape(a, (1, *(shape or (1,)), 1))
        return ops.reshape(a, (1,) * (rank - len(shape)) + shape)

    def at_least(*arys: Any) -> Any:
        out = tuple(one(a) for a in arys)
        return out[0] if len(out) == 1 else out

    at_least.__name__ = f"atleast_{rank}d"
    return at_least


def _dstack(tup: Sequence[Any]) -> Any:
    three = at_least(3)
    return ops.concatenate([three(a) for a in tup], axis=2)


def _split_along(axis: int, name: str) -> Function:
    def call(ary: Any, indices_or_sections: Any) -> Any:
        nd = len(shape_of(ary))
        if nd <= axis and not (name == "hsplit" and nd == 1):
            raise ValueError(f"numpy.{name} only works on arrays of {axis + 1} or more dimensions")
        return ops.split(ary, indices_or_sections, axis=0 if name == "hsplit" and nd == 1 else axis)

    call.__name__ = name
    return call


def _broadcast_arrays(*args: Any, subok: bool = False) -> Any:
    shape = np.broadcast_shapes(*(shape_of(a) for a in args))
    return tuple(ops.broadcast_to(a, shape) for a in args)


def _diagflat(v: Any, k: int = 0) -> Any:
    return ops.diag(ops.reshape(v, (-1,)), k)


def _meshgrid(*xi: Any, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> Any:
    if indexing not in ("xy", "ij"):
        raise ValueError("Valid values for `indexing` are 'xy' and 'ij'.")
    n = len(xi)
    shapes = [[1] * n for _ in xi]
    for k in range(n):
        shapes[k][k] = -1
    if indexing == "xy" and n > 1:
        shapes[0][:2], shapes[1][:2] = [1, -1], [-1, 1]
    grids = [ops.reshape(x, tuple(s)) for x, s in zip(xi, shapes)]
    if sparse:
        return tuple(grids)
    full = np.broadcast_shapes(*(shape_of(g) for g in grids))
    return tuple(ops.broadcast_to(g, full) for g in grids)


def _vander(x: Any, N: int | None = None, increasing: bool = False) -> Any:
    """Columns of powers by repeated products (no ``0 ** 0`` whose slope would be nan)."""
    x = _tensor(x)
    if len(shape_of(x)) != 1:
        raise ValueError("x must be a one-dimensional array or sequence.")
    n = shape_of(x)[0] if N is None else int(N)
    cols: list[Any] = []
    for k in range(n):
        cols.append(x * 0 + 1 if k == 0 else x if k == 1 else cols[-1] * x)
    cols = cols if increasing else cols[::-1]
    return ops.stack(cols, axis=1) if cols else ops.reshape(x[:0], (shape_of(x)[0], 0))


# -- numerics ------------------------------------------------------------------------------------


def _trapezoid(y: Any, x: Any = None, dx: float = 1.0, axis: int = -1) -> Any:
    y = _tensor(y)
    nd = len(shape_of(y))
    ax = normalize_axis(axis, nd)
    if x is None:
        d: Any = dx
    else:
        d = indexing.diff(x, axis=-1 if len(shape_of(x)) == 1 else ax)
        if len(shape_of(x)) == 1:
            d = ops.reshape(d, tuple(-1 if k == ax else 1 for k in range(nd)))
    head = indexing.take(y, np.arange(1, shape_of(y)[ax]), axis=ax)
    tail = indexing.take(y, np.arange(0, shape_of(y)[ax] - 1), axis=ax)
    return ops.sum(d * (head + tail) / 2.0, axis=ax)


def _interp(x: Any, xp: Any, fp: Any, left: Any = None, right: Any = None, period: Any = None) -> Any:
    """numpy.interp by comparisons (staged and differentiable in x, xp and fp, as JAX's): each x
    finds its interval by counting the points at or below it."""
    if period is not None:
        raise TypeError("numpy.interp on einad Tensors takes no period=")
    x, xp, fp = _tensor(x), _tensor(xp), _tensor(fp)
    if len(shape_of(xp)) != 1 or shape_of(xp) != shape_of(fp):
        raise ValueError("fp and xp are not of the same length.")
    n = shape_of(xp)[0]
    if n == 0:
        raise ValueError("array of sample points is empty")
    if n == 1:
        out = ops.broadcast_to(fp[0], shape_of(x)) + 0 * x
    else:
        count = ops.sum(ops.less_equal(xp, ops.expand_dims(x, -1)), axis=-1)
        i = ops.clip(count - 1, 0, n - 2)
        x0, x1, f0, f1 = (
            indexing.take(xp, i),
            indexing.take(xp, i + 1),
            indexing.take(fp, i),
            indexing.take(fp, i + 1),
        )
        out = f0 + (x - x0) * ((f1 - f0) / (x1 - x0))
    out = ops.where(ops.less(x, xp[0]), fp[0] if left is None else left, out)
    return ops.where(ops.greater(x, xp[n - 1]), fp[n - 1] if right is None else right, out)


def _correlation(a: Any, v: Any, mode: str, name: str) -> Any:
    """``out[k] = sum_j a[j + k - (m - 1)] v[j]`` over the full lags (zeros outside `a`), as a
    gather of windows of the padded `a` and one einsum; then numpy's `mode` cut from it."""
    a, v = _tensor(a), _tensor(v)
    if len(shape_of(a)) != 1 or len(shape_of(v)) != 1:
        raise ValueError(f"numpy.{name}: object too deep for desired array (1-D operands only)")
    n, m = shape_of(a)[0], shape_of(v)[0]
    if n == 0 or m == 0:
        raise ValueError(f"numpy.{name}: {'a' if n == 0 else 'v'} cannot be empty")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"mode must be one of 'full', 'same' or 'valid', got {mode!r}")
    padded = indexing.pad(a, (m - 1, m - 1))
    lags = np.arange(n + m - 1)[:, None] + np.arange(m)[None, :]
    full = ops.einsum("kj,j->k", indexing.take(padded, lags), v)
    if mode == "full":
        return full
    if mode == "valid":
        start, size = min(n, m) - 1, max(n, m) - min(n, m) + 1
    else:
        size = max(n, m)
        start = (min(n, m) - 1) // 2 if n >= m else (min(n, m)) // 2  # numpy's centring
    return full[start : start + size]


def _correlate(a: Any, v: Any, mode: str = "valid") -> Any:
    return _correlation(a, ops.conj(v), mode, "correlate")


def _convolve(a: Any, v: Any, mode: str = "full") -> Any:
    if len(shape_of(v)) == 1 and len(shape_of(a)) == 1 and shape_of(v)[0] > shape_of(a)[0]:
        a, v = v, a  # (numpy's order: the longer first; a convolution commutes)
    return _correlation(a, ops.flip(v), mode, "convolve")


def _polyval(p: Any, x: Any) -> Any:
    """Horner's rule over the coefficients (highest power first)."""
    p = _tensor(p)
    if len(shape_of(p)) != 1:
        raise ValueError("numpy.polyval on einad Tensors takes a 1-D array of coefficients")
    y = ops.multiply(x, 0)  # numpy's zeros_like(x), with x's shape
    for k in range(shape_of(p)[0]):
        y = y * x + p[k]
    return y


def _gradient(f: Any, *varargs: Any, axis: Axis = None, edge_order: int = 1) -> Any:
    """numpy.gradient with uniform spacings (one number per axis, or one for all): central
    differences inside, one-sided ones (first or second order) at the edges."""
    f = _tensor(f)
    nd = len(shape_of(f))
    axes = normalize_axes(axis, nd)
    if len(varargs) > 1 and len(varargs) != len(axes) or any(np.ndim(h) for h in varargs):
        raise TypeError(
            "numpy.gradient on einad Tensors takes one number per axis as spacing (no coordinates)"
        )
    spacing = list(varargs) * len(axes) if len(varargs) == 1 else list(varargs) or [1.0] * len(axes)
    if edge_order not in (1, 2):
        raise ValueError("'edge_order' greater than 2 not supported")
    out = []
    for ax, h in zip(axes, spacing):
        size = shape_of(f)[ax]
        if size < edge_order + 1:
            raise ValueError(
                "Shape of array too small to calculate a numerical gradient, at least "
                "(edge_order + 1) elements are required."
            )

        def at(*ks: int, ax: int = ax) -> Any:
            return indexing.take(f, np.array(ks), axis=ax)

        inner = (at(*range(2, size)) - at(*range(size - 2))) / (2.0 * h)
        if edge_order == 1:
            first = (at(1) - at(0)) / h
            last = (at(size - 1) - at(size - 2)) / h
        else:
            first = (-1.5 * at(0) + 2.0 * at(1) - 0.5 * at(2)) / h
            last = (0.5 * at(size - 3) - 2.0 * at(size - 2) + 1.5 * at(size - 1)) / h
        out.append(ops.concatenate([first, inner, last], axis=ax))
    return out[0] if len(out) == 1 else tuple(out)


# -- searches and counts -------------------------------------------------------------------------


def _searchsorted(a: Any, v: Any, side: str = "left", sorter: Any = None) -> Any:
    """How many elements of the sorted `a` lie below each `v` (at or below for side='right'):
    a count of comparisons, so it stages under jit (no derivative)."""
    if side not in ("left", "right"):
        raise ValueError(f"side must be 'left' or 'right', got {side!r}")
    a = _tensor(a)
    if sorter is not None:
        a = indexing.take(a, sorter)
    below = ops.less if side == "left" else ops.less_equal
    return ops.sum(below(a, ops.expand_dims(v, -1)), axis=-1)


def _digitize(x: Any, bins: Any, right: bool = False) -> Any:
    bins_ = _tensor(bins)
    values = _known(bins_, "digitize") if type(bins_) is not Tensor or bins_._trace is None else None
    decreasing = values is not None and values.size > 1 and values[0] > values[-1]
    if decreasing:
        count = _searchsorted(ops.flip(bins_), x, side="left" if right else "right")
        return shape_of(bins_)[0] - count
    return _searchsorted(bins_, x, side="left" if right else "right")


def _isin(
    element: Any,
    test_elements: Any,
    assume_unique: bool = False,
    invert: bool = False,
    *,
    kind: Any = None,
) -> Any:
    hits = ops.any(ops.equal(ops.expand_dims(element, -1), ops.reshape(test_elements, (-1,))), axis=-1)
    return _not(hits) if invert else hits


def _nonzero(a: Any) -> tuple[np.ndarray, ...]:
    return np.nonzero(_known(a, "nonzero"))


def _where(condition: Any, x: Any = None, y: Any = None) -> Any:
    """numpy.where: with `x` and `y` einad's select; with the condition alone, numpy's nonzero."""
    if x is None and y is None:
        return _nonzero(condition)
    if x is None or y is None:
        raise ValueError("either both or neither of x and y should be given")
    return ops.where(condition, x, y)


def _einsum_path(subscripts: Any, *operands: Any, optimize: Any = "greedy", einsum_call: bool = False) -> Any:
    """numpy.einsum_path from the operands' shapes alone (arrays of no memory stand for them), so
    it plans traced and staged operands too."""
    if einsum_call:
        raise TypeError("numpy.einsum_path on einad Tensors does not take einsum_call")
    stand_ins = [
        np.lib.stride_tricks.as_strided(np.zeros(1, dtype_of(o)), shape_of(o), (0,) * len(shape_of(o)))
        if isinstance(o, Tensor) or hasattr(o, "shape")
        else o
        for o in (subscripts, *operands)
    ]
    return np.einsum_path(*stand_ins, optimize=optimize)


def _argwhere(a: Any) -> np.ndarray:
    return np.argwhere(_known(a, "argwhere"))


def _flatnonzero(a: Any) -> np.ndarray:
    return np.flatnonzero(_known(a, "flatnonzero"))


def _unique(
    ar: Any,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: int | None = None,
    *,
    equal_nan: bool = True,
    sorted: bool = True,  # noqa: A002 (numpy's keyword)
) -> Any:
    """numpy.unique: the places found on the values, the unique values gathered from `ar` (so
    they carry its derivative: each from its first occurrence); the indices and counts plain."""
    if axis is not None:
        raise TypeError("numpy.unique on einad Tensors takes no axis=")
    asked: dict[str, Any] = {"return_inverse": return_inverse, "return_counts": return_counts}
    found: Any = np.unique(_known(ar, "unique"), return_index=True, equal_nan=equal_nan, **asked)
    values = indexing.take(ops.reshape(ar, (-1,)), found[1])
    extra = [found[1]] if return_index else []
    extra += list(found[2:])
    return (values, *extra) if extra else values


def _bincount(x: Any, weights: Any = None, minlength: int = 0) -> Any:
    """numpy.bincount: counts as numpy's; with `weights`, their sums per bin, differentiable in
    the weights (a scatter-add). Its length needs `x`'s values (TracerError inside jit)."""
    idx = _known(x, "bincount")
    if idx.ndim != 1 or idx.dtype.kind not in "iub":
        raise TypeError("numpy.bincount takes a 1-D array of non-negative integers")
    if idx.size and idx.min() < 0:
        raise ValueError("'list' argument must have no negative elements")
    length = max(int(minlength), int(idx.max()) + 1 if idx.size else 0)
    if weights is None:
        return np.bincount(idx, minlength=length)
    w = _tensor(weights)
    if dtype_of(w).kind == "c":
        raise TypeError("numpy.bincount takes real weights (it sums them in float64)")
    if shape_of(w) != idx.shape:
        raise ValueError("The weights and list don't have the same length.")
    bins = wrap(arrays.zeros(raw(w), (length,), np.dtype(np.float64)))
    return bins.at[idx].add(ops.astype(w, np.float64))


def _cross(a: Any, b: Any, axisa: int = -1, axisb: int = -1, axisc: int = -1, axis: int | None = None) -> Any:
    """numpy.cross of 2- and 3-vectors: a 2-vector is one with a zero third component, and two
    2-vectors give the third component alone (numpy's rules); 3-vectors as `linalg.cross`."""
    if axis is not None:
        axisa = axisb = axisc = axis
    a = ops.moveaxis(a, axisa, -1)
    b = ops.moveaxis(b, axisb, -1)
    sa, sb = shape_of(a)[-1], shape_of(b)[-1]
    if sa not in (2, 3) or sb not in (2, 3):
        raise ValueError("incompatible dimensions for cross product\n(dimension must be 2 or 3)")
    if sa == sb == 2:
        return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]
    a = indexing.pad(a, [(0, 0)] * (len(shape_of(a)) - 1) + [(0, 3 - sa)]) if sa == 2 else a
    b = indexing.pad(b, [(0, 0)] * (len(shape_of(b)) - 1) + [(0, 3 - sb)]) if sb == 2 else b
    c = linalg.cross(a, b)
    return ops.moveaxis(c, -1, axisc)


def _cumulative(name: str) -> Function:
    """numpy 2's cumulative_sum and cumulative_prod (the array API's): ``include_initial``
    puts the identity first."""

    def call(x: Any, /, *, axis: int | None = None, dtype: Any = None, include_initial: bool = False) -> Any:
        x = _tensor(x)
        if axis is None:
            if len(shape_of(x)) > 1:
                raise ValueError(
                    f"numpy.cumulative_{name}: axis is needed for an array of more than one axis"
                )
            axis = 0
        scan = getattr(reductions, f"cum{name}")(x, axis, dtype=dtype)
        if not include_initial:
            return scan
        shape = list(shape_of(scan))
        ax = normalize_axis(axis, len(shape))
        shape[ax] = 1  # (the identity, in the scan's library: an empty axis has no element to take)
        first = lib_array(scan, np.full(shape, 0 if name == "sum" else 1, dtype=dtype_of(scan)))
        return ops.concatenate([first, scan], axis=ax)

    call.__name__ = f"cumulative_{name}"
    return call


def cumulative_extreme(name: str) -> Function:
    """``np.maximum.accumulate`` and ``np.minimum.accumulate`` (running max and min) along
    `axis`: Hillis and Steele's scan, log2(n) elementwise steps, each joining the values
    shifted by 1, 2, 4, ... places (the identity, -inf for max, shifted in)."""
    op = getattr(ops, name)
    high = name == "maximum"

    def accumulate(x: Any, axis: int = 0) -> Any:
        x = _tensor(x)
        nd = len(shape_of(x))
        ax = normalize_axis(axis, nd)
        n, dt = shape_of(x)[ax], dtype_of(x)
        if dt.kind in "iu":
            fill: Any = np.iinfo(dt).min if high else np.iinfo(dt).max
        else:
            fill = (not high) if dt.kind == "b" else (-np.inf if high else np.inf)
        out, step = x, 1
        while step < n:
            widths = [(0, 0)] * nd
            widths[ax] = (step, 0)
            shifted = indexing.take(indexing.pad(out, widths, constant_values=fill), np.arange(n), axis=ax)
            out = op(out, shifted)
            step *= 2
        return out

    accumulate.__name__ = f"{name}_accumulate"
    return accumulate


def _unstack(x: Any, /, *, axis: int = 0) -> Any:
    """numpy.unstack: ``x[..., k, ...]`` for each k along `axis`, views as numpy's."""
    x = _viewed(x)
    ax = normalize_axis(axis, len(shape_of(x)))
    head = (slice(None),) * ax
    return tuple(x[head + (k,)] for k in range(shape_of(x)[ax]))


def _select(condlist: Sequence[Any], choicelist: Sequence[Any], default: Any = 0) -> Any:
    """numpy.select: the first choice whose condition holds, else `default` (a chain of where)."""
    if len(condlist) != len(choicelist):
        raise ValueError("list of cases must be same length as list of conditions")
    if not condlist:
        raise ValueError("select with an empty condition list is not possible")
    out = default
    for cond, choice in zip(reversed(condlist), reversed(choicelist)):
        out = ops.where(cond, choice, out)
    dt = np.result_type(*(dtype_of(c) for c in choicelist), dtype_of(default))
    return ops.astype(
        ops.broadcast_to(out, np.broadcast_shapes(*map(shape_of, [*condlist, *choicelist]))), dt
    )


def _piecewise(x: Any, condlist: Any, funclist: Sequence[Any], *args: Any, **kw: Any) -> Any:
    """numpy.piecewise: each function applied to all of `x` and kept where its condition holds
    (the later conditions win, as numpy's); a number in `funclist` is a constant; one function
    more than conditions is the otherwise case. The derivative at an element is its own
    piece's function's alone."""
    x = _tensor(x)
    conds = [condlist] if not isinstance(condlist, (list, tuple)) else list(condlist)
    if len(funclist) == len(conds) + 1:
        taken = (
            conds[0]
            if len(conds) == 1
            else ops.any(ops.stack([ops.not_equal(c, False) for c in conds]), axis=0)
        )
        conds = [*conds, _not(taken)]
    if len(funclist) != len(conds):
        raise ValueError(
            f"with {len(conds)} condition(s), either {len(conds)} or {len(conds) + 1} functions are expected"
        )
    out: Any = ops.multiply(x, 0)
    for cond, f in zip(conds, funclist):
        if callable(f):
            # each function sees every element, those outside its piece without a derivative: a
            # function undefined there (sqrt of a negative) gives nan, selected away, and its nan
            # slope reaches the stopped copy, not x (one `where` alone would pass 0 * nan to x)
            inside = ops.where(cond, x, ops.stop_gradient(x))
            with np.errstate(all="ignore"):
                f = f(inside, *args, **kw)
        out = ops.where(cond, f, out)
    return ops.astype(out, dtype_of(x))


def _unwrap(p: Any, discont: Any = None, axis: int = -1, *, period: float = 2 * np.pi) -> Any:
    """numpy.unwrap: each step's jump mapped into ``[-period/2, period/2)`` where it exceeds
    `discont`, the corrections summed along `axis` (the derivative of p passes unchanged)."""
    p = _tensor(p)
    ax = normalize_axis(axis, len(shape_of(p)))
    dd = indexing.diff(p, axis=ax)
    half = period / 2
    discont = half if discont is None else discont
    ddmod = ops.stop_gradient(ops.mod(dd + half, period) - half)
    ddmod = ops.where(ops.where(ops.equal(ddmod, -half), ops.greater(dd, 0), False), half, ddmod)
    correct = ops.where(ops.less(ops.abs(dd), discont), 0.0, ops.stop_gradient(ddmod - dd))
    head = indexing.take(p, np.array([0]), axis=ax) * 0
    return p + ops.concatenate([head, reductions.cumsum(correct, ax)], axis=ax)


def _polyfit(
    x: Any, y: Any, deg: int, rcond: Any = None, full: bool = False, w: Any = None, cov: Any = False
) -> Any:
    """numpy.polyfit by least squares (einad.linalg.lstsq, differentiable in x, y and w): the
    coefficients, highest power first; ``full`` and ``cov`` are not offered."""
    if full or cov is not False:
        raise TypeError("numpy.polyfit on einad Tensors returns the coefficients only (no full= or cov=)")
    deg = int(deg)
    if deg < 0:
        raise ValueError("expected deg >= 0")
    van = _vander(x, deg + 1)
    y = _tensor(y)
    if w is not None:
        van = van * ops.reshape(w, (-1, 1))
        y = y * (ops.reshape(w, (-1,) + (1,) * (len(shape_of(y)) - 1)))
    scale = ops.stop_gradient(ops.sqrt(ops.sum(van * van, axis=0)))  # numpy's column scaling
    coef = linalg.lstsq(van / scale, y, rcond=rcond)[0]
    return coef / (scale if len(shape_of(coef)) == 1 else ops.reshape(scale, (-1, 1)))


def _partition(name: str) -> Function:
    """numpy.partition and argpartition as a full sort: a valid partition for every `kth`."""

    def call(a: Any, kth: Any, axis: int | None = -1, kind: str = "introselect", order: Any = None) -> Any:
        if order is not None:
            raise TypeError(f"numpy.{name} on einad Tensors does not take order= (structured arrays)")
        return (indexing.sort if name == "partition" else indexing.argsort)(a, axis)

    call.__name__ = name
    return call


def _compress(condition: Any, a: Any, axis: int | None = None, out: Any = None) -> Any:
    keep = np.flatnonzero(_known(condition, "compress"))
    return indexing.take(a, keep, axis=axis)


def _extract(condition: Any, arr: Any) -> Any:
    keep = np.flatnonzero(_known(condition, "extract"))
    return indexing.take(ops.reshape(arr, (-1,)), keep)


def _resize(a: Any, new_shape: Any) -> Any:
    """numpy.resize: the elements repeated in order to fill the new shape (a gather)."""
    shape = (int(new_shape),) if np.ndim(new_shape) == 0 else tuple(int(d) for d in new_shape)
    size, n = math.prod(shape), math.prod(shape_of(a))
    if n == 0:  # numpy's: zeros
        return wrap(np.zeros(shape, dtype_of(a)))
    return ops.reshape(indexing.take(ops.reshape(a, (-1,)), np.arange(size) % n), shape)


def _histogram(a: Any, bins: Any = 10, range: Any = None, density: Any = None, weights: Any = None) -> Any:  # noqa: A002
    """numpy.histogram: the bin edges and counts from the values (no derivative); with `weights`,
    their sums per bin, differentiable in the weights (and with ``density``, normalized)."""
    values = _known(a, "histogram")
    edges = np.histogram_bin_edges(
        values, bins=bins if np.ndim(bins) == 0 else _known(bins, "histogram"), range=range
    )
    if weights is None and not density:
        return np.histogram(values, bins=edges)[0], edges
    # the weighted sums as histogramdd's of one coordinate along these edges
    return _histogramdd(values.reshape(-1, 1), [edges], density=density, weights=weights)[0], edges


# -- numpy's rearrangements, run on labels ---------------------------------------------------------


def _labelled(arrays: Sequence[Any], dtype: Any = None) -> tuple[list[np.ndarray], Function]:
    """Integer labels standing for the elements of `arrays` (each array's after the ones before
    it), and the gather that turns an array of labels back into those elements (in `dtype`, by
    default the arrays' common one). numpy's own function run on the labels places every element
    as it would place the values (insert, delete, block, choose, ...), to the last corner of its
    rules, and the gather carries the derivative."""
    tensors = [_tensor(a) for a in arrays]
    sizes = [math.prod(shape_of(t)) for t in tensors]
    starts = np.cumsum([0, *sizes])
    labels = [
        np.arange(b, b + n).reshape(shape_of(t)) for b, n, t in zip(starts[:-1], sizes, tensors, strict=True)
    ]
    dt = np.result_type(*(dtype_of(t) for t in tensors)) if dtype is None else np.dtype(dtype)
    flat = ops.concatenate([ops.reshape(ops.astype(t, dt), (-1,)) for t in tensors], axis=0)
    return labels, lambda picked: indexing.take(flat, np.asarray(picked, dtype=np.int64))


def _index_argument(obj: Any, name: str) -> Any:
    """An index argument (ints, a slice, booleans) as numpy reads it: its value where known."""
    return obj if isinstance(obj, (int, slice, list, tuple, np.ndarray)) else _known(obj, name)


def _delete(arr: Any, obj: Any, axis: int | None = None) -> Any:
    (labels,), gather = _labelled([arr])
    return gather(np.delete(labels, _index_argument(obj, "delete"), axis))


def _insert(arr: Any, obj: Any, values: Any, axis: int | None = None) -> Any:
    """numpy.insert: `values` cast to `arr`'s dtype, placed by numpy's rules (on labels)."""
    (mine, theirs), gather = _labelled([arr, values], dtype_of(arr))
    return gather(np.insert(mine, _index_argument(obj, "insert"), theirs, axis))


def _array_split(ary: Any, indices_or_sections: Any, axis: int = 0) -> list[Any]:
    """numpy.array_split: `ops.split` at numpy's division points (sections need not divide the
    axis: the first ones are one longer), its pieces views as numpy's."""
    spec = np.asarray(indices_or_sections).tolist()  # (plain numbers, as numpy.array_split takes)
    if isinstance(spec, list):
        return ops.split(ary, spec, axis=axis)
    if int(spec) <= 0:
        raise ValueError("number sections must be larger than 0.")
    each, extras = divmod(shape_of(ary)[normalize_axis(axis, len(shape_of(ary)))], int(spec))
    points = np.cumsum(extras * [each + 1] + (int(spec) - extras) * [each])[:-1].tolist()
    return ops.split(ary, points, axis=axis)


def _rollaxis(a: Any, axis: int, start: int = 0) -> Any:
    """numpy.rollaxis as a transpose: the order numpy gives a view whose sizes name its axes."""
    nd = len(shape_of(a))
    named = np.broadcast_to(np.empty((), np.int8), tuple(range(1, nd + 1)))  # (no memory)
    return ops.transpose(a, [size - 1 for size in np.rollaxis(named, axis, start).shape])


def _block(arrays: Any) -> Any:
    """numpy.block: the nested lists' leaves labelled, numpy's block of the labels gathered."""
    leaves: list[Any] = []

    def collect(item: Any) -> None:
        if isinstance(item, list):
            for sub in item:
                collect(sub)
        elif isinstance(item, tuple):
            raise TypeError(f"numpy.block on einad Tensors: {type(item).__name__} is not allowed, use a list")
        else:
            leaves.append(item)

    collect(arrays)
    labels, gather = _labelled(leaves)
    it = iter(labels)

    def rebuild(item: Any) -> Any:
        return [rebuild(sub) for sub in item] if isinstance(item, list) else next(it)

    return gather(np.block(rebuild(arrays)))


def _choose(a: Any, choices: Sequence[Any], out: Any = None, mode: str = "raise") -> Any:
    labels, gather = _labelled(list(choices))
    return gather(np.choose(_known(a, "choose"), labels, mode=mode))  # type: ignore[call-overload]


def _ediff1d(ary: Any, to_end: Any = None, to_begin: Any = None) -> Any:
    flat = ops.reshape(ary, (-1,))
    parts: list[Any] = [flat[1:] - flat[:-1]]
    dt = dtype_of(flat)
    if to_begin is not None:
        parts.insert(0, ops.astype(ops.reshape(to_begin, (-1,)), dt))
    if to_end is not None:
        parts.append(ops.astype(ops.reshape(to_end, (-1,)), dt))
    return ops.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]


def _matrix_transpose(x: Any, /) -> Any:
    nd = len(shape_of(x))
    if nd < 2:
        raise ValueError("matrix_transpose: input array must be at least 2-dimensional")
    return ops.moveaxis(x, -1, -2)


def _astype(x: Any, dtype: Any, *, copy: bool = True, device: Any = None) -> Any:
    return wrap(ops.astype(x, dtype))  # (a Tensor, as for every function here: a cast of a constant too)


def _fix(x: Any, out: Any = None) -> Any:
    return _trunc(x)


def _iscomplex(x: Any) -> Any:
    return ops.not_equal(ops.imag(x), 0)


def _isreal(x: Any) -> Any:
    return ops.equal(ops.imag(x), 0)


# -- sequences: linspace, logspace, geomspace (differentiable in their ends) ----------------------


def linspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype: Any = None,
    axis: int = 0,
    *,
    device: Any = None,
) -> Any:
    """numpy.linspace: ``start + k * step`` (the last exactly `stop` with `endpoint`), the new
    axis at `axis`; `start` and `stop` may be arrays (broadcast) and carry the derivative (what
    ``np.linspace`` of a Tensor runs, and ``ea.linspace`` of Tensor ends)."""
    if num < 0:
        raise ValueError(f"Number of samples, {num}, must be non-negative.")
    lo: Any = _tensor(start)
    hi: Any = _tensor(stop)
    dt = np.result_type(dtype_of(lo), dtype_of(hi), float(num))
    lo, hi = ops.astype(lo, dt), ops.astype(hi, dt)
    shape = np.broadcast_shapes(shape_of(lo), shape_of(hi))
    div = num - 1 if endpoint else num
    delta = hi - lo
    step: Any = delta / div if div > 0 else np.nan
    k = np.arange(num).astype(np.finfo(dt).dtype).reshape((-1,) + (1,) * len(shape))
    y = lo + lib_array(lo, k) * (step if div > 0 else delta)  # (numpy's: num <= 1 is start)
    if endpoint and num > 1:
        y = ops.concatenate([y[:-1], ops.broadcast_to(hi, (1, *shape))], axis=0)
    if axis != 0:
        y = ops.moveaxis(y, 0, axis)
    if dtype is not None and np.dtype(dtype) != dt:  # (an integer dtype rounds down, as numpy 2's)
        y = ops.astype(ops.floor(y) if np.dtype(dtype).kind in "iu" else y, dtype)
    return (y, step) if retstep else y


def _logspace(
    start: Any,
    stop: Any,
    num: int = 50,
    endpoint: bool = True,
    base: Any = 10.0,
    dtype: Any = None,
    axis: int = 0,
) -> Any:
    y = linspace(start, stop, num=num, endpoint=endpoint, axis=axis)
    if np.ndim(raw(base)) if not isinstance(base, Tensor) else len(shape_of(base)):
        base = ops.expand_dims(base, axis)
    out = ops.power(base, y)
    return out if dtype is None else ops.astype(out, dtype)


def _geomspace(
    start: Any, stop: Any, num: int = 50, endpoint: bool = True, dtype: Any = None, axis: int = 0
) -> Any:
    """numpy.geomspace of real ends of one sign: ``exp`` of a linspace of their logs, the ends
    exactly `start` and `stop` (a negative pair as the negated positive one)."""
    lo, hi = _tensor(start), _tensor(stop)
    if dtype_of(lo).kind == "c" or dtype_of(hi).kind == "c":
        raise NotImplementedError("numpy.geomspace on einad Tensors takes real ends")
    known = [v for v in (lo, hi) if type(strip(v)) is not Staged]
    if any(np.any(np.asarray(to_numpy(raw(v))) == 0) for v in known):
        raise ValueError("Geometric sequence cannot include zero")
    if any(np.any(np.sign(to_numpy(raw(v))) != np.sign(to_numpy(raw(known[0])))) for v in known[1:]):
        raise ValueError("numpy.geomspace on einad Tensors: start and stop of opposite signs (numpy: nan)")
    sign = ops.where(ops.less(lo, 0), -1.0, 1.0)
    y = ops.exp(linspace(ops.log(ops.abs(lo)), ops.log(ops.abs(hi)), num=num, endpoint=endpoint))
    shape = shape_of(y)[1:]
    if num > 0:
        ends = [ops.broadcast_to(ops.abs(lo), (1, *shape))]
        middle = y[1 : num - 1] if endpoint and num > 1 else y[1:]
        tail = [ops.broadcast_to(ops.abs(hi), (1, *shape))] if endpoint and num > 1 else []
        y = ops.concatenate([*ends, middle, *tail], axis=0)
    y = y * sign
    if axis != 0:
        y = ops.moveaxis(y, 0, axis)
    return y if dtype is None else ops.astype(y, dtype)


# -- polynomials (coefficients, highest power first) ----------------------------------------------


def _poly_pair(a1: Any, a2: Any) -> tuple[Any, Any]:
    """Two coefficient vectors padded with leading zeros to one length."""
    a1, a2 = ops.reshape(a1, (-1,)), ops.reshape(a2, (-1,))
    n1, n2 = shape_of(a1)[0], shape_of(a2)[0]
    if n1 < n2:
        a1 = indexing.pad(a1, (n2 - n1, 0))
    elif n2 < n1:
        a2 = indexing.pad(a2, (n1 - n2, 0))
    return a1, a2


def _polyadd(a1: Any, a2: Any) -> Any:
    x, y = _poly_pair(a1, a2)
    return x + y


def _polysub(a1: Any, a2: Any) -> Any:
    x, y = _poly_pair(a1, a2)
    return x - y


def _polymul(a1: Any, a2: Any) -> Any:
    return _convolve(ops.reshape(a1, (-1,)), ops.reshape(a2, (-1,)))


def _polyder(p: Any, m: int = 1) -> Any:
    if m < 0:
        raise ValueError("Order of derivative must be positive (see polyint)")
    p = ops.reshape(p, (-1,))
    for _ in range(m):
        n = shape_of(p)[0] - 1
        p = p[:-1] * np.arange(n, 0, -1) if n > 0 else p[:0]  # (a constant's: empty, as numpy's)
    return p


def _polyint(p: Any, m: int = 1, k: Any = None) -> Any:
    if m < 0:
        raise ValueError("Order of integral must be positive (see polyder)")
    consts = [0.0] * m if k is None else ([k] * m if np.ndim(raw(k)) == 0 else list(k))
    if len(consts) != m:
        raise ValueError("k must be a scalar or a rank-1 array of length 1 or >m.")
    p = ops.astype(ops.reshape(p, (-1,)), np.result_type(dtype_of(p), np.float64))
    for c in consts:
        n = shape_of(p)[0]
        p = ops.concatenate([p / np.arange(n, 0, -1), ops.reshape(ops.astype(c, dtype_of(p)), (1,))], axis=0)
    return p


def _polydiv(u: Any, v: Any) -> tuple[Any, Any]:
    """numpy.polydiv's long division (a Python loop of einad operations); the remainder's
    leading zeros (to numpy's rounding) dropped where its values are known."""
    u, v = ops.reshape(_tensor(u) + 0.0, (-1,)), ops.reshape(_tensor(v) + 0.0, (-1,))
    m, n = shape_of(u)[0] - 1, shape_of(v)[0] - 1
    r = [u[j] for j in range(m + 1)]
    q = []
    scale = 1.0 / v[0]
    for k in range(m - n + 1):
        d = scale * r[k]
        q.append(d)
        for j in range(n + 1):
            r[k + j] = r[k + j] - d * v[j]
    quotient = ops.stack(q) if q else ops.reshape(u[0] * 0, (1,))
    rem = ops.stack(r)
    values = _known(rem, "polydiv")
    first = 0
    while first < len(values) - 1 and np.allclose(values[first], 0, rtol=1e-14):
        first += 1
    return quotient, rem[first:]


def _poly(seq_of_zeros: Any) -> Any:
    """numpy.poly: the monic polynomial of the roots (of a square matrix's eigenvalues), a
    product of ``(x - r)`` by convolutions; real where the roots, read, come in conjugate
    pairs, as numpy's."""
    zeros: Any = _tensor(seq_of_zeros)
    shape = shape_of(zeros)
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] != 0:
        zeros = linalg.eigvals(zeros)
    elif len(shape) != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    dt = np.result_type(dtype_of(zeros), np.float64)
    a = ops.astype(_tensor(np.ones(1)), dt)
    for j in range(shape_of(zeros)[0]):
        a = _convolve(a, ops.stack([ops.astype(_tensor(1.0), dt), ops.negative(ops.astype(zeros[j], dt))]))
    if dt.kind == "c":
        roots = _known(zeros, "poly")
        if np.all(np.sort(roots) == np.sort(roots.conjugate())):
            a = ops.real(a)
    return a


def _roots(p: Any) -> Any:
    """numpy.roots: the eigenvalues of the companion matrix (leading and trailing zeros read
    where known: trailing ones are zero roots); real where every root is, as numpy's."""
    p = ops.reshape(_tensor(p), (-1,))
    values = _known(p, "roots")
    nonzero = np.flatnonzero(values)
    if len(nonzero) == 0:
        return np.array([])
    trailing = len(values) - nonzero[-1] - 1
    p = p[nonzero[0] : nonzero[-1] + 1]
    n = shape_of(p)[0]
    dt = np.result_type(dtype_of(p), np.float64)
    if n > 1:
        first_row = ops.reshape(-p[1:] / p[0], (1, n - 1))
        below = np.eye(n - 2, n - 1, dtype=dt) if n > 2 else np.zeros((0, n - 1), dt)
        found: Any = linalg.eigvals(ops.concatenate([ops.astype(first_row, dt), below], axis=0))
    else:
        found = ops.astype(p[:0], np.result_type(dt, np.complex64))
    if not np.any(_known(ops.imag(found), "roots")):  # numpy's eigvals: real when every root is
        found = ops.real(found)
    if trailing:
        found = indexing.pad(found, (0, trailing))  # numpy's zero roots, one per trailing zero
    return found


# -- numpy's functions that write into their argument ---------------------------------------------
# Each takes the Tensor it writes into as ``t[i] = v`` does (`Tensor._write`): the tensor takes the
# new value, traced inside a transformation, through to its base where it is a view; never an array
# of a library, which einad does not write into.


def target(a: Any, name: str) -> Tensor:
    """The Tensor numpy's `name` writes into; anything else is refused (einad writes into no array)."""
    if type(a) is not Tensor:
        raise TypeError(
            f"numpy.{name} writes into its first argument, a {type(a).__name__}, and einad never "
            "writes into an array: give it an einad Tensor (ea.tensor(a)), which takes the new "
            "value, or write a = a.at[index].set(values) for a new one"
        )
    return a


def _cycled(values: Any, n: int) -> Tensor:
    """`values` flattened and repeated to `n` elements, as numpy's ``a.flat[...] = values``."""
    flat = ops.reshape(_tensor(values), (-1,))
    size = shape_of(flat)[0]
    return flat if size == n else flat[np.arange(n) % size]


def _put_flat(t: Tensor, flat: Array, values: Any, name: str) -> None:
    """``t.flat[flat] = values`` (the values repeated as needed; where a place repeats, the last
    write stays)."""
    if flat.size == 0 or 0 in shape_of(_tensor(values)):
        return  # (numpy's put of no values writes nothing)
    index = np.unravel_index(flat, t.shape)
    t._write(lambda x: x.at[index].set(_cycled(values, flat.size)), f"numpy.{name}")


def _put(a: Any, ind: Any, v: Any, mode: str = "raise") -> None:
    t = target(a, "put")
    ind = _known(ind, "put").astype(np.intp).ravel()
    size = math.prod(t.shape)
    if mode == "raise":
        bad = ind[(ind >= size) | (ind < -size)]
        if bad.size:
            raise IndexError(f"index {bad[0]} is out of bounds for axis 0 with size {size}")
        ind = ind % max(size, 1)
    elif mode == "wrap":
        ind = ind % max(size, 1)
    elif mode == "clip":
        ind = np.clip(ind, 0, size - 1)
    else:
        raise ValueError(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})")
    _put_flat(t, ind, v, "put")


class FlatIter:
    """``t.flat``: numpy's flat iterator of a Tensor, its elements in C order under one index.

    ``t.flat[i]`` is ``t.ravel()[i]`` (differentiable) for an integer, a slice, an index array
    or a 1-D boolean mask; ``t.flat[i] = v`` writes into `t` as numpy's does, the
    values repeated as needed (`t` takes a new array, as for ``t[...] = v``), and ``t.flat = v``
    writes every element. Iterating gives the elements; `base`, ``len`` and ``copy()`` are
    numpy's.
    """

    __slots__ = ("base",)

    def __init__(self, base: Tensor) -> None:
        self.base = base

    def __getitem__(self, index: Any) -> Tensor:
        return ops.ravel(self.base)[index]

    def __setitem__(self, index: Any, value: Any) -> None:
        if type(index) is Tensor:  # (the places written must be known: `_known`)
            index = _known(index, "flat")
        places = np.arange(self.base.size)[index]
        _put_flat(self.base, np.asarray(places).ravel(), value, "flat")

    def __iter__(self) -> Iterator[Tensor]:
        return iter(ops.ravel(self.base))

    def __len__(self) -> int:
        return self.base.size

    def copy(self) -> Tensor:
        """The elements as a 1-D Tensor of its own, as numpy's ``flat.copy()``."""
        return ops.ravel(self.base).copy()

    def __repr__(self) -> str:
        return f"<einad flat iterator of a Tensor of shape {self.base.shape}>"


def _flat_iterator(self: Tensor) -> FlatIter:
    return FlatIter(self)


def _write_flat(self: Tensor, value: Any) -> None:
    FlatIter(self)[...] = value


Tensor.flat = property(_flat_iterator, _write_flat, doc=FlatIter.__doc__)  # type: ignore[assignment]


def _put_along_axis(arr: Any, indices: Any, values: Any, axis: int | None) -> None:
    t = target(arr, "put_along_axis")
    shape, nd = t.shape, len(shape_of(indices))
    if axis is None:
        if nd != 1:
            raise ValueError("when axis=None, `indices` must have a single dimension.")
        t._write(
            lambda x: ops.reshape(ops.reshape(x, (-1,)).at[indices].set(values), shape),
            "numpy.put_along_axis",
        )
        return
    if nd != len(shape):
        raise ValueError("`indices` and `arr` must have the same number of dimensions")
    axis = normalize_axis(axis, len(shape))
    index = tuple(
        indices if d == axis else np.arange(n).reshape([-1 if k == d else 1 for k in range(nd)])
        for d, n in enumerate(shape)
    )
    t._write(lambda x: x.at[index].set(values), "numpy.put_along_axis")


def _place(arr: Any, mask: Any, vals: Any) -> None:
    t = target(arr, "place")
    m = _known(mask, "place").astype(bool)
    if m.size != math.prod(t.shape):
        raise ValueError("place: mask and data must be the same size")
    n = int(np.count_nonzero(m))
    if n and 0 in shape_of(_tensor(vals)):
        raise ValueError("Cannot insert from an empty array!")
    if n:
        where = m.reshape(t.shape)
        t._write(lambda x: x.at[where].set(_cycled(vals, n)), "numpy.place")


def _putmask(a: Any, mask: Any, values: Any) -> None:
    t = target(a, "putmask")
    if math.prod(shape_of(mask)) != math.prod(t.shape):
        raise ValueError("putmask: mask and data must be the same size")
    if 0 in shape_of(_tensor(values)):
        return
    full = ops.reshape(_cycled(values, math.prod(t.shape)), t.shape)
    t._write(lambda x: ops.where(ops.reshape(mask, t.shape), full, x), "numpy.putmask")


def _copyto(dst: Any, src: Any, casting: str = "same_kind", where: Any = True) -> None:
    t = target(dst, "copyto")
    weak = type(src) in (bool, int, float, complex)
    given = np.dtype(type(src)) if weak else dtype_of(src)
    # a Python number is weak, as numpy 2 takes it: 3 into uint8, 1.5 into float32 (its kind, the
    # array's dtype), not 1.5 into int64 under same_kind
    if not np.can_cast(result_dtype(t.dtype, src) if weak else given, t.dtype, cast(Any, casting)):
        what = "scalar" if weak or shape_of(src) == () else "array data"
        raise TypeError(
            f"Cannot cast {what} from {np.dtype(given)!r} to {t.dtype!r} according to the rule {casting!r}"
        )
    if shape_of(src) != t.shape:
        try:
            np.broadcast_shapes(shape_of(src), t.shape)
        except ValueError:
            raise ValueError(
                f"could not broadcast input array from shape {shape_of(src)} into shape {t.shape}"
            ) from None
    full = ops.broadcast_to(ops.astype(_tensor(src), t.dtype), t.shape)
    t._write(lambda x: full if where is True else ops.where(where, full, x), "numpy.copyto")


def _fill_diagonal(a: Any, val: Any, wrap: bool = False) -> None:
    t = target(a, "fill_diagonal")
    shape = t.shape
    if len(shape) < 2:
        raise ValueError("array must be at least 2-d")
    end = None
    if len(shape) == 2:
        step = shape[1] + 1
        if not wrap:
            end = shape[1] * shape[1]
    else:
        if len(set(shape)) != 1:
            raise ValueError("All dimensions of input must be of equal length")
        step = 1 + int(np.cumprod(shape[:-1]).sum())
    _put_flat(t, np.arange(math.prod(shape))[:end:step], val, "fill_diagonal")


# -- the rest: loops, comparisons, index arithmetic --------------------------------------------------


def _apply_along_axis(func1d: Function, axis: int, arr: Any, *args: Any, **kwargs: Any) -> Any:
    """numpy.apply_along_axis: `func1d` on each 1-D slice along `axis` (a Python loop), the
    results stacked where the slices were (their own axes in place of `axis`)."""
    x = _tensor(arr)
    nd = len(shape_of(x))
    axis = normalize_axis(axis, nd)
    moved = ops.moveaxis(x, axis, -1)
    outer = shape_of(moved)[:-1]
    if math.prod(outer) == 0:
        raise ValueError("Cannot apply_along_axis when any iteration dimensions are 0")
    results = [_tensor(func1d(moved[index], *args, **kwargs)) for index in np.ndindex(*outer)]
    inner = shape_of(results[0])
    res = ops.reshape(ops.stack(results), outer + inner)
    if not inner:
        return res
    return ops.moveaxis(
        res, list(range(len(outer), len(outer) + len(inner))), list(range(axis, axis + len(inner)))
    )


def _apply_over_axes(func: Function, a: Any, axes: Any) -> Any:
    val = _tensor(a)
    nd = len(shape_of(val))
    for axis in [axes] if np.ndim(axes) == 0 else axes:
        ax = axis + nd if axis < 0 else axis
        res = _tensor(func(val, ax))
        if len(shape_of(res)) != len(shape_of(val)):
            res = ops.expand_dims(res, ax)
            if len(shape_of(res)) != len(shape_of(val)):
                raise ValueError("function is not returning an array of the correct shape")
        val = res
    return val


def truth(value: Any) -> Any:
    """A Python bool, as numpy's predicates give (allclose, array_equal); under `einad.jit` or
    `vmap`, whose values are not known, the 0-d boolean Tensor itself (JAX's result)."""
    try:
        return bool(value)
    except TracerError:
        return value


def _array_equal(a1: Any, a2: Any, equal_nan: bool = False) -> Any:
    if shape_of(a1) != shape_of(a2):
        return False
    same = ops.equal(a1, a2)
    if equal_nan:
        same = ops.where(ops.isnan(a1), ops.isnan(a2), same)
    return truth(ops.all(same))


def _array_equiv(a1: Any, a2: Any) -> Any:
    try:
        np.broadcast_shapes(shape_of(a1), shape_of(a2))
    except ValueError:
        return False
    return truth(ops.all(ops.equal(a1, a2)))


def _from_shape(name: str) -> Function:
    """diag/tril/triu_indices_from: numpy's, from the shape alone (a broadcast view, no memory)."""
    numpys = getattr(np, name)

    def call(arr: Any, *args: Any, **kwargs: Any) -> Any:
        return numpys(np.broadcast_to(np.empty((), np.int8), shape_of(arr)), *args, **kwargs)

    call.__name__ = name
    return call


def _unravel_index(indices: Any, shape: Any, order: str = "C") -> tuple[Any, ...]:
    """Index arithmetic (`floor_divide` and `mod`), so it stages; out-of-bounds indices are
    numpy's ValueError where they are known."""
    dims = tuple(int(d) for d in (shape if np.ndim(shape) else (shape,)))
    size = math.prod(dims)
    idx = _tensor(indices)
    if type(strip(idx)) is not Staged and np.any((to_numpy(raw(idx)) < 0) | (to_numpy(raw(idx)) >= size)):
        raise ValueError(f"index out of bounds for array with size {size}")
    out = []
    for d in dims[::-1] if order == "C" else dims:
        out.append(ops.mod(idx, d))
        idx = ops.floor_divide(idx, d)
    return tuple(out[::-1] if order == "C" else out)


def _ravel_multi_index(multi_index: Any, dims: Any, mode: Any = "raise", order: str = "C") -> Any:
    dims = tuple(int(d) for d in dims)
    modes = [mode] * len(dims) if isinstance(mode, str) else list(mode)
    parts = [_tensor(i) for i in multi_index]
    strides = np.cumprod((1, *dims[:0:-1]))[::-1] if order == "C" else np.cumprod((1, *dims[:-1]))
    total: Any = 0
    for i, d, stride, m in zip(parts, dims, strides, modes, strict=True):
        if m == "wrap":
            i = ops.mod(i, d)
        elif m == "clip":
            i = ops.clip(i, 0, d - 1)
        elif type(strip(i)) is not Staged and np.any((to_numpy(raw(i)) < 0) | (to_numpy(raw(i)) >= d)):
            raise ValueError("invalid entry in coordinates array")
        total = total + i * int(stride)
    return total


# -- sets, trims and sorts that read values -------------------------------------------------------


def _flat(*arrays: Any) -> Any:
    """The arrays raveled and joined, in their common dtype (what the set functions gather from)."""
    parts = [ops.reshape(_tensor(a), (-1,)) for a in arrays]
    dt = np.result_type(*(dtype_of(p) for p in parts))
    return ops.concatenate([ops.astype(p, dt) for p in parts], axis=0)


def _intersect1d(ar1: Any, ar2: Any, assume_unique: bool = False, return_indices: bool = False) -> Any:
    """The sorted common values, gathered from `ar1` (numpy's indices of their first occurrences)."""
    _, where1, where2 = np.intersect1d(
        _known(ar1, "intersect1d"), _known(ar2, "intersect1d"), assume_unique, return_indices=True
    )
    values = indexing.take(_flat(ar1), where1)
    return (values, where1, where2) if return_indices else values


def _union1d(ar1: Any, ar2: Any) -> Any:
    return _unique(_flat(ar1, ar2))


def _setdiff1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Any:
    """The values of `ar1` not in `ar2` (sorted and unique unless `assume_unique`), gathered."""
    v1 = _known(ar1, "setdiff1d").ravel()
    v2 = _known(ar2, "setdiff1d")
    where = np.arange(v1.size) if assume_unique else np.unique(v1, return_index=True)[1]
    keep = where[~np.isin(v1[where], v2)]
    return indexing.take(_flat(ar1), keep)


def _setxor1d(ar1: Any, ar2: Any, assume_unique: bool = False) -> Any:
    """The sorted values in exactly one of the arrays, gathered from where each first occurs."""
    v1, v2 = _known(ar1, "setxor1d").ravel(), _known(ar2, "setxor1d").ravel()
    if assume_unique:
        w1, w2 = np.arange(v1.size), np.arange(v2.size)
    else:
        w1, w2 = np.unique(v1, return_index=True)[1], np.unique(v2, return_index=True)[1]
    where = np.concatenate([w1, w2 + v1.size])
    values = np.concatenate([v1, v2])[where]
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    flag = np.concatenate(([True], ordered[1:] != ordered[:-1], [True]))
    single = flag[1:] & flag[:-1]
    return indexing.take(_flat(ar1, ar2), where[order][single])


def _unique_set(name: str) -> Function:
    """numpy 2's unique_all, unique_counts, unique_inverse, unique_values: numpy's result on the
    values (in numpy's order: unique_values of integers is not sorted), the values gathered from
    each one's first occurrence."""
    numpys = getattr(np, name)

    def call(x: Any, /) -> Any:
        known = _known(x, name)
        first = np.unique_all(known)
        found: Any = first if name == "unique_all" else numpys(known)
        flat = ops.reshape(_tensor(x), (-1,))
        if name == "unique_values":
            same = np.array_equal(found, first.values, equal_nan=True)
            return indexing.take(
                flat, first.indices if same else first.indices[np.searchsorted(first.values, found)]
            )
        return type(found)(indexing.take(flat, first.indices), *found[1:])

    call.__name__ = name
    return call


def _trim_zeros(filt: Any, trim: str = "fb", axis: Axis = None) -> Any:
    """The leading (``"f"``) and trailing (``"b"``) zeros cut from each axis (numpy 2's `axis`)."""
    values = np.asarray(_known(filt, "trim_zeros"))
    nd = values.ndim
    trim = trim.lower()
    if not set(trim) <= {"f", "b"} or not trim:
        raise ValueError(f"unexpected character(s) in `trim`: {trim!r}")
    cut = [slice(None)] * nd
    for ax in range(nd) if axis is None else normalize_axes(axis, nd):
        along = np.any(values != 0, axis=tuple(k for k in range(nd) if k != ax))
        hits = np.flatnonzero(along)
        start = (hits[0] if len(hits) else 0) if "f" in trim else 0
        stop = (hits[-1] + 1 if len(hits) else 0) if "b" in trim else values.shape[ax]
        cut[ax] = slice(int(start), int(max(start, stop)))
    return _tensor(filt)[tuple(cut)]


def _real_if_close(a: Any, tol: float = 100) -> Any:
    """The real part where every imaginary part is within `tol` machine epsilons of 0 (read)."""
    if dtype_of(a).kind != "c":
        return a
    if tol > 1:
        tol = float(np.finfo(dtype_of(a)).eps) * tol
    return ops.real(a) if np.all(np.abs(_known(a, "real_if_close").imag) < tol) else a


def _lexsort(keys: Any, axis: int = -1) -> Any:
    """The order sorting by the last key, then the one before, ...: stable argsorts, the last
    key's last (einad's argsort is stable, as numpy's lexsort relies on)."""
    rows = [keys[k] for k in range(shape_of(keys)[0])] if not isinstance(keys, (list, tuple)) else list(keys)
    if not rows:
        raise TypeError("need sequence of keys with len > 0 in lexsort")
    order = indexing.argsort(rows[0], axis=axis)
    for key in rows[1:]:
        order = indexing.take_along_axis(
            order, indexing.argsort(indexing.take_along_axis(key, order, axis), axis=axis), axis
        )
    return order


def _sort_complex(a: Any) -> Any:
    """Sorted along the last axis by real part, then imaginary part; complex, as numpy's."""
    x = _tensor(a)
    if dtype_of(x).kind != "c":
        wide = np.complex64 if dtype_of(x).char in "bhBH" else np.complex128
        return ops.astype(indexing.sort(x, axis=-1), wide)
    order = _lexsort([ops.imag(x), ops.real(x)], axis=-1)
    return indexing.take_along_axis(x, order, -1)


def _histogram_bin_edges(a: Any, bins: Any = 10, range: Any = None, weights: Any = None) -> Any:  # noqa: A002
    chosen = bins if isinstance(bins, (int, str)) else _known(bins, "histogram_bin_edges")
    w = None if weights is None else _known(weights, "histogram_bin_edges")
    return np.histogram_bin_edges(_known(a, "histogram_bin_edges"), chosen, range, w)


def _histogramdd(
    sample: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002 (numpy's keyword)
    density: Any = None,
    weights: Any = None,
) -> Any:
    """numpy.histogramdd: the edges and counts from the values (no derivative); with `weights`,
    their sums per bin (numpy's bin of each point, its outlier bins dropped), differentiable in
    the weights, and with `density` normalized by the total and each bin's volume."""
    if isinstance(sample, (list, tuple)):  # numpy's reading: one array per coordinate
        points = np.atleast_2d(np.stack([np.asarray(_known(s, "histogramdd")) for s in sample])).T
    else:
        points = np.asarray(_known(sample, "histogramdd"))
        points = points[:, None] if points.ndim == 1 else points
    chosen = (
        bins if isinstance(bins, int) else [b if np.ndim(b) == 0 else _known(b, "histogramdd") for b in bins]
    )
    counts, edges = np.histogramdd(points, bins=chosen, range=range)
    if weights is None and not density:
        return counts, edges
    shape = tuple(len(e) + 1 for e in edges)  # with numpy's two outlier bins per axis
    where = []
    for d, e in enumerate(edges):
        k = np.searchsorted(e, points[:, d], side="right")
        k[points[:, d] == e[-1]] -= 1  # the last bin is closed, as numpy's
        where.append(k)
    flat = np.ravel_multi_index(where, shape)
    w = ops.reshape(_tensor(weights), (-1,)) if weights is not None else np.ones(len(points))
    sums = ops.reshape(_bincount(flat, weights=w, minlength=math.prod(shape)), shape)
    sums = sums[tuple(slice(1, -1) for _ in edges)]
    if density:
        volume = math.prod(np.ix_(*(np.diff(e) for e in edges)))
        sums = sums / ops.sum(sums) / volume
    return sums, edges


def _histogram2d(
    x: Any,
    y: Any,
    bins: Any = 10,
    range: Any = None,  # noqa: A002 (numpy's keyword)
    density: Any = None,
    weights: Any = None,
) -> Any:
    """numpy.histogram2d: `histogramdd` of the two coordinates (the edges of each)."""
    if not isinstance(bins, int) and np.ndim(bins) == 1 and len(bins) != 2:  # one array of edges for both
        bins = [bins, bins]
    hist, (xedges, yedges) = _histogramdd([x, y], bins, range, density, weights)
    return hist, xedges, yedges


# -- numpy's helpers that read a Tensor's dtype or value, never its derivative -------------------


def _ix(*args: Any) -> tuple[Any, ...]:
    """numpy.ix_: each 1-d integer index reshaped to cross the others (a Tensor by einad's
    reshape, so that a staged index stays in the program); a boolean mask is its nonzero
    places, read as `_known` reads a value."""
    out: list[Any] = []
    for k, a in enumerate(args):
        if type(a) is not Tensor:
            a = np.asarray(a)
            if a.size == 0:
                a = a.astype(np.intp)  # (numpy's: an empty list indexes nothing)
        if len(shape_of(a)) != 1:
            raise ValueError("Cross index must be 1 dimensional")
        if dtype_of(a) == np.bool_:
            a = np.nonzero(_known(a, "ix_"))[0]
        elif dtype_of(a).kind not in "iu":
            raise ValueError("arrays used as indices must be of integer (or boolean) type")
        shape = (1,) * k + shape_of(a) + (1,) * (len(args) - k - 1)
        out.append(ops.reshape(a, shape) if type(a) is Tensor else a.reshape(shape))
    return tuple(out)


def _common_type(*arrays: Any) -> Any:
    """numpy.common_type: of the arrays' dtypes alone."""
    return np.common_type(*(np.empty(0, dtype_of(a)) if type(a) is Tensor else a for a in arrays))


def _min_scalar_type(a: Any) -> np.dtype[Any]:
    """numpy.min_scalar_type: an array's own dtype; for a 0-d one the smallest that holds its
    value (read as `_known` reads it)."""
    if type(a) is Tensor and shape_of(a):
        return dtype_of(a)
    return np.min_scalar_type(_known(a, "min_scalar_type") if type(a) is Tensor else a)


def _can_cast(from_: Any, to: Any, casting: str = "safe") -> bool:
    """numpy.can_cast: an array by its dtype (numpy 2's rule for arrays)."""

    def dtype(x: Any) -> Any:
        return dtype_of(x) if type(x) is Tensor else x

    return bool(np.can_cast(dtype(from_), dtype(to), casting))  # type: ignore[arg-type]


def _printed(fn: Function) -> Function:
    """numpy.array2string, array_repr, array_str: a Tensor's value printed as numpy prints it
    (what ``print(t)`` shows: text, no derivative); inside `einad.jit` or `vmap` a value is not
    known (TracerError, as `_known` says)."""

    def printed(a: Any, *args: Any, **kwargs: Any) -> str:
        text: str = fn(_known(a, fn.__name__) if type(a) is Tensor else a, *args, **kwargs)
        return text

    return printed


FUNCTIONS: dict[Function, Function] = {
    np.nansum: _nan_fold("sum"),
    np.nanprod: _nan_fold("prod"),
    np.nanmean: _nanmean,
    np.nanvar: _nanvar,
    np.nanstd: _nanstd,
    np.nanmax: _nan_extreme("max"),
    np.nanmin: _nan_extreme("min"),
    np.nanargmax: _nanarg("argmax"),
    np.nanargmin: _nanarg("argmin"),
    np.nancumsum: _nan_scan("cumsum", 0.0),
    np.nancumprod: _nan_scan("cumprod", 1.0),
    np.ptp: _ptp,
    np.average: _average,
    np.quantile: _quantile_function("quantile"),
    np.percentile: _quantile_function("percentile"),
    np.median: _quantile_function("median"),
    np.nanquantile: _quantile_function("nanquantile"),
    np.nanpercentile: _quantile_function("nanpercentile"),
    np.nanmedian: _quantile_function("nanmedian"),
    np.cov: _cov,
    np.corrcoef: _corrcoef,
    np.cross: _cross,
    np.rot90: _rot90,
    np.fliplr: _flip_axis(1, "fliplr"),
    np.flipud: _flip_axis(0, "flipud"),
    np.append: _append,
    np.column_stack: _column_stack,
    np.dstack: _dstack,
    np.hsplit: _split_along(1, "hsplit"),
    np.vsplit: _split_along(0, "vsplit"),
    np.dsplit: _split_along(2, "dsplit"),
    np.broadcast_arrays: _broadcast_arrays,
    np.diagflat: _diagflat,
    np.meshgrid: _meshgrid,
    np.vander: _vander,
    np.trapezoid: _trapezoid,
    np.interp: _interp,
    np.correlate: _correlate,
    np.convolve: _convolve,
    np.polyval: _polyval,
    np.gradient: _gradient,
    np.nan_to_num: _nan_to_num,
    np.isposinf: _isposinf,
    np.isneginf: _isneginf,
    np.searchsorted: _searchsorted,
    np.digitize: _digitize,
    np.isin: _isin,
    np.nonzero: _nonzero,
    np.where: _where,
    np.einsum_path: _einsum_path,
    np.argwhere: _argwhere,
    np.flatnonzero: _flatnonzero,
    np.unique: _unique,
    np.bincount: _bincount,
    np.cumulative_sum: _cumulative("sum"),
    np.cumulative_prod: _cumulative("prod"),
    np.unstack: _unstack,
    np.select: _select,
    np.piecewise: _piecewise,
    np.unwrap: _unwrap,
    np.polyfit: _polyfit,
    np.partition: _partition("partition"),
    np.argpartition: _partition("argpartition"),
    np.compress: _compress,
    np.extract: _extract,
    np.resize: _resize,
    np.histogram: _histogram,
    np.delete: _delete,
    np.insert: _insert,
    np.array_split: _array_split,
    np.rollaxis: _rollaxis,
    np.block: _block,
    np.choose: _choose,
    np.ediff1d: _ediff1d,
    np.matrix_transpose: _matrix_transpose,
    np.astype: _astype,
    np.fix: _fix,
    np.iscomplex: _iscomplex,
    np.isreal: _isreal,
    np.linspace: linspace,
    np.logspace: _logspace,
    np.geomspace: _geomspace,
    np.polyadd: _polyadd,
    np.polysub: _polysub,
    np.polymul: _polymul,
    np.polyder: _polyder,
    np.polyint: _polyint,
    np.polydiv: _polydiv,
    np.poly: _poly,
    np.roots: _roots,
    np.apply_along_axis: _apply_along_axis,
    np.apply_over_axes: _apply_over_axes,
    np.array_equal: _array_equal,
    np.array_equiv: _array_equiv,
    np.diag_indices_from: _from_shape("diag_indices_from"),
    np.tril_indices_from: _from_shape("tril_indices_from"),
    np.triu_indices_from: _from_shape("triu_indices_from"),
    np.unravel_index: _unravel_index,
    np.ravel_multi_index: _ravel_multi_index,
    np.intersect1d: _intersect1d,
    np.union1d: _union1d,
    np.setdiff1d: _setdiff1d,
    np.setxor1d: _setxor1d,
    np.trim_zeros: _trim_zeros,
    np.real_if_close: _real_if_close,
    np.lexsort: _lexsort,
    np.sort_complex: _sort_complex,
    np.histogram_bin_edges: _histogram_bin_edges,
    np.histogramdd: _histogramdd,
    **{
        getattr(np, n): _unique_set(n)
        for n in ("unique_all", "unique_counts", "unique_inverse", "unique_values")
    },
    np.histogram2d: _histogram2d,
    np.put: _put,
    np.put_along_axis: _put_along_axis,
    np.place: _place,
    np.putmask: _putmask,
    np.copyto: _copyto,
    np.fill_diagonal: _fill_diagonal,
    np.ix_: _ix,
    np.common_type: _common_type,
    np.min_scalar_type: _min_scalar_type,
    np.can_cast: _can_cast,
    np.array2string: _printed(np.array2string),
    np.array_repr: _printed(np.array_repr),
    np.array_str: _printed(np.array_str),
}
"""numpy's functions as compositions, run on Tensors by `numpy_api` (numpy's arguments)."""
