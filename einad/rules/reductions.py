"""Reductions that are not plain sums, scans, and the numerically stable compositions.

`max`, `min`, `prod`, `cumsum` and `cumprod` are primitives with one rule each;
`mean`, `var`, `std`, `logsumexp`, `softmax`, `log_softmax` and `clip` are
compositions of other operations and need no rule of their own.

The primitives run numpy's function on numpy arrays and the array API standard's
(``max``, ``min``, ``prod``, ``cumulative_sum``, ``cumulative_prod``) on other
libraries' arrays, in numpy's result dtype; their rules are einad operations.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .. import arrays
from ..aliases import Axis, DTypeLike, Shape
from ..core import ArrayLike, Params, Primitive, Staged, Tensor, Value, bind, declare, export, strip
from ..subscripts import fresh_symbols
from ..util import dtype_of, normalize_axes, raw, shape_of, to_array_operand, to_operand, wrap
from .einsum import contract, sum_axes, sum_raw
from .elementwise import PRIMITIVES, apply2, compare, conj, exp, log, real, sqrt
from .shape import astype, getitem_raw, reshape_raw, stop_gradient
from .structural import broadcast_raw, masked, where_raw

# -- max and min: tied extremes share the gradient -----------------------------------------


def _keep(v: Value, shape: Shape, axes: tuple[int, ...]) -> Value:
    """Reshape a reduced value so it broadcasts against the unreduced `shape`."""
    return reshape_raw(v, tuple(1 if i in axes else d for i, d in enumerate(shape)))


def _extreme_weights(x: Any, ans: Any, axes: tuple[int, ...]) -> tuple[Any, Any]:
    """Where `x` equals its extreme (a boolean), and weights with zero derivative: 1/count on
    those elements, 0 elsewhere."""
    hit = compare("equal", x, _keep(stop_gradient(ans), shape_of(x), axes))
    weight = astype(hit, dtype_of(x))
    return hit, weight / sum_raw(weight, axes, keepdims=True)


_result_dtypes: dict[tuple[str, np.dtype[Any]], np.dtype[Any]] = {}


def _numpy_dtype(name: str, kernel: Callable[..., Any], dt: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype numpy's `kernel` gives for an operand of dtype `dt` (int32 -> int64 for prod)."""
    out = _result_dtypes.get((name, dt))
    if out is None:
        out = _result_dtypes[name, dt] = np.result_type(kernel(np.ones(1, dt), axis=0))
    return out


def _impl(name: str, kernel: Callable[..., Any], standard: str, param: str) -> Callable[..., Any]:
    """numpy's `kernel` on numpy values; the standard's function `standard` on other arrays.

    `param` is the primitive's parameter ("axes" or "axis"); ``dtype=`` asks the
    library for numpy's result dtype where it differs from the operand's.
    """

    def impl(x: Any, **p: Any) -> Any:
        axis = p[param]
        if type(x) is np.ndarray:
            return kernel(x, axis=axis)
        xp = arrays.xp_of(x)
        if xp is np:
            return kernel(x, axis=axis)
        dt = dtype_of(x)
        out = _numpy_dtype(name, kernel, dt)
        fn = getattr(xp, standard)
        if dt.kind == "b":  # the standard's functions take no booleans (array-api-strict refuses them)
            if out.kind != "b":  # prod, cumsum, cumprod: counted in numpy's integer result dtype
                return fn(xp.astype(x, arrays.lib_dtype(xp, out)), axis=axis)
            return xp.astype(fn(arrays.ordered(xp, x), axis=axis), xp.bool)  # max, min: as 0 and 1
        if out == dt or standard in ("max", "min"):
            return fn(x, axis=axis)
        return fn(x, axis=axis, dtype=arrays.lib_dtype(xp, out))

    return impl


def batch_axes(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """The batching rule of a primitive with an ``axes`` parameter: each axis one further on."""
    return bind(prim, vals, {**params, "axes": tuple(a + 1 for a in params["axes"])})


def batch_axis(prim: Primitive, vals: list[Any], batched: list[bool], params: Params, size: int) -> Any:
    """The batching rule of a primitive with an ``axis`` parameter: the axis one further on."""
    return bind(prim, vals, {**params, "axis": params["axis"] + 1})


def _extreme_prim(name: str, kernel: Callable[..., Any]) -> Primitive:
    prim = Primitive(name, _impl(name, kernel, name, "axes"))

    def vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
        x = vals[0]
        _, w = _extreme_weights(x, ans, p["axes"])
        return [_keep(g, shape_of(x), p["axes"]) * w]

    def jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
        hit, w = _extreme_weights(vals[0], ans, p["axes"])
        # the tangents of the elements that are not the extreme are selected away, not multiplied
        # by 0: an infinite or nan tangent there (sqrt's at 0) must not reach the result (JAX's too)
        t = where_raw(hit, ts[0], 0)
        return sum_raw(t * w, p["axes"])

    return declare(prim, vjp=vjp, jvp=jvp, batch=batch_axes, aliasing="fresh")


max_p = _extreme_prim("max", np.max)
min_p = _extreme_prim("min", np.min)


def _reduce(prim: Primitive, x: ArrayLike, axis: Axis, keepdims: bool) -> Tensor:
    x = to_array_operand(x)
    shape = shape_of(x)
    axes = normalize_axes(axis, len(shape))
    out = bind(prim, (x,), {"axes": axes})
    if keepdims:
        out = _keep(out, shape, axes)
    return wrap(out)


def max(
    x: ArrayLike,
    axis: Axis = None,
    keepdims: bool = False,
    *,
    initial: ArrayLike | None = None,
    where: ArrayLike | None = None,
) -> Tensor:
    """Largest element along `axis`; tied maxima share the gradient equally. numpy's and
    JAX's ``initial`` takes part as one more element (the result where none is left), and
    ``where=`` leaves out the elements where the mask is False (it needs ``initial``)."""
    if initial is None and where is None:
        return _reduce(max_p, x, axis, keepdims)
    return _extreme_with(max_p, "maximum", x, axis, keepdims, initial, where)


def min(
    x: ArrayLike,
    axis: Axis = None,
    keepdims: bool = False,
    *,
    initial: ArrayLike | None = None,
    where: ArrayLike | None = None,
) -> Tensor:
    """Smallest element along `axis`; tied minima share the gradient equally; ``initial`` and
    ``where=`` as `max`'s."""
    if initial is None and where is None:
        return _reduce(min_p, x, axis, keepdims)
    return _extreme_with(min_p, "minimum", x, axis, keepdims, initial, where)


def _extreme_with(
    prim: Primitive, name: str, x: ArrayLike, axis: Axis, keepdims: bool, initial: Any, where: Any
) -> Tensor:
    """max or min with numpy's ``initial`` and ``where=``: the masked elements replaced by the
    reduction's identity (-inf for max), the reduction, then ``initial`` joined by an elementwise
    `name` (so a tie between an element and ``initial`` shares the gradient, as JAX's)."""
    if initial is None:
        raise ValueError(
            f"reduction operation {name!r} does not have an identity, so to use a where mask one has "
            "to specify 'initial' (numpy's rule)"
        )
    x = to_array_operand(x)
    shape, dt = shape_of(x), dtype_of(x)
    axes = normalize_axes(axis, len(shape))
    init = astype(to_array_operand(initial, like=x), dt)
    if math.prod([shape[a] for a in axes]) == 0:  # nothing to reduce: initial itself
        kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
        dropped = tuple(d for i, d in enumerate(shape) if i not in axes)
        return wrap(broadcast_raw(init, kept if keepdims else dropped))
    if where is not None:
        high = name == "maximum"
        if dt.kind == "b":
            identity: Any = not high
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            identity = info.min if high else info.max
        else:
            identity = -np.inf if high else np.inf
        x = masked(x, where, identity, name)
    return wrap(apply2(name, _reduce(prim, x, axes, keepdims), init))


# -- prod: exact at zeros ------------------------------------------------------------------


def _prod_others(x: Any, axes: tuple[int, ...]) -> Any:
    """d prod / d x_i: the product of the other elements, never dividing by zero.

    Where an axis holds zeros, the zero elements are kept as traced values
    (their sum `z`), so the result is exact to second order: with one zero the
    others' derivative is ``z * p / x_i``, with two the zeros' is ``(z - x_i) * p``.
    """
    shape = shape_of(x)
    zero = compare("equal", x, 0)
    count = sum_raw(astype(zero, np.int64), axes, keepdims=True)
    nonzero = where_raw(zero, 1, x)
    p = _keep(bind(prod_p, (nonzero,), {"axes": axes}), shape, axes)
    if _known_zero(strip(count)):  # no zeros
        return p / nonzero
    z = sum_raw(where_raw(zero, x, 0), axes, keepdims=True)
    one = where_raw(zero, p, z * p / nonzero)
    two = where_raw(zero, (z - x) * p, 0)
    by_count = where_raw(compare("equal", count, 2), two, 0)
    by_count = where_raw(compare("equal", count, 1), one, by_count)
    return where_raw(compare("equal", count, 0), p / nonzero, by_count)


def _known_zero(v: Any) -> bool:
    """Whether `v` is known here to be all zeros: never inside a program, nor on dask (reading
    a dask array would compute it: einad stays lazy)."""
    if type(v) is Staged:
        return False
    xp = arrays.xp_of(v)
    if xp is np:
        return not np.any(v)
    if arrays.library(v) == "dask":
        return False
    return not bool(xp.any(v))


prod_p = Primitive("prod", _impl("prod", np.prod, "prod", "axes"))
declare(
    prod_p,
    # (products through `apply2`: a plain array of array-api-strict on the left refuses a Tensor on
    # its right, and either factor may be the plain one: a tangent of rev-over-fwd, a batched one)
    vjp=lambda g, ans, vals, p, needed: [
        apply2("multiply", _keep(g, shape_of(vals[0]), p["axes"]), _prod_others(vals[0], p["axes"]))
    ],
    jvp=lambda ts, ans, vals, p: sum_raw(
        apply2("multiply", ts[0], _prod_others(vals[0], p["axes"])), p["axes"]
    ),
    batch=batch_axes,
    aliasing="fresh",
)


def prod(
    x: ArrayLike,
    axis: Axis = None,
    keepdims: bool = False,
    *,
    dtype: DTypeLike | None = None,
    initial: ArrayLike | None = None,
    where: ArrayLike | None = None,
) -> Tensor:
    """Product along `axis`; its gradient is exact where elements are zero. With `dtype`, the
    elements are cast to it first and the product has that dtype (numpy's keyword); ``where=``
    and ``initial`` (multiplied in) as `einad.sum`'s."""
    if dtype is None and initial is None and where is None:
        return _reduce(prod_p, x, axis, keepdims)
    x = _in_dtype(x, dtype)
    if where is not None:
        x = masked(x, where, 1, "prod")
    out = _reduce(prod_p, x, axis, keepdims)
    if initial is not None:
        out = out * astype(to_array_operand(initial, like=out), out.dtype)
    return out if dtype is None else wrap(astype(out, dtype))


# -- any and all: boolean reductions without derivative ----------------------------------------


def _truth_prim(name: str) -> Primitive:
    def impl(x: Any, axes: tuple[int, ...]) -> Any:
        return getattr(arrays.xp_of(x), name)(x, axis=axes)

    impl.__name__ = f"_{name}_impl"
    return declare(Primitive(name, impl), zero_derivative=True, batch=batch_axes, aliasing="fresh")


any_p = _truth_prim("any")
all_p = _truth_prim("all")


@export(numpy=np.any)
def any(x: ArrayLike, axis: Axis = None, keepdims: bool = False, *, where: ArrayLike | None = None) -> Tensor:
    """Whether any element along `axis` is nonzero (a nan is), as numpy.any: a boolean Tensor,
    not differentiable; inside `einad.jit` an equation, so it replays on new inputs. ``where=``
    (numpy's) leaves out the elements where the mask is False."""
    if where is not None:
        x = masked(to_array_operand(x), where, 0, "any")
    return _reduce(any_p, x, axis, keepdims)


@export(numpy=np.all)
def all(x: ArrayLike, axis: Axis = None, keepdims: bool = False, *, where: ArrayLike | None = None) -> Tensor:
    """Whether every element along `axis` is nonzero, as numpy.all (True for no elements): a
    boolean Tensor, not differentiable; inside `einad.jit` an equation. ``where=`` as `any`'s."""
    if where is not None:
        x = masked(to_array_operand(x), where, 1, "all")
    return _reduce(all_p, x, axis, keepdims)


# -- compositions ------------------------------------------------------------------------------


def _count(shape: Shape, axes: tuple[int, ...], x: Any = None, keepdims: bool = False) -> Any:
    """How many elements of `x` (of `shape`) each reduction along `axes` takes.

    A dask array of unknown chunk sizes has nan among its dimensions: its count is then counted
    lazily, as dask's own `mean` counts (a sum of ones in `x`'s real dtype, shaped as the sum)."""
    n = math.prod([shape[a] for a in axes])
    if not math.isnan(n) or x is None:
        return n
    real_dtype = dtype_of(x) if dtype_of(x).kind != "c" else np.empty(0, dtype_of(x)).real.dtype
    ones = astype(where_raw(compare("equal", x, x), 1, 1), real_dtype)
    return sum_axes(ones, shape, axes, keepdims)


_divide = PRIMITIVES["divide"]


def mean(
    x: ArrayLike,
    axis: Axis = None,
    keepdims: bool = False,
    *,
    dtype: DTypeLike | None = None,
    where: ArrayLike | None = None,
) -> Tensor:
    """Arithmetic mean along `axis` (a sum, then a division); of booleans and integers in float64.

    With `dtype` (numpy's keyword), the elements are cast to it first and the mean has that
    dtype (an integer one truncates, as numpy's). ``where=`` (numpy's and JAX's: a boolean
    mask broadcasting to `x`'s shape) takes the mean of the elements where it is True (nan
    where there are none, as numpy's); the others get no derivative.
    """
    if where is not None:
        x = _in_dtype(x, dtype)
        inexact = _inexact(x)
        axes = normalize_axes(axis, len(shape_of(x)))
        total = sum_raw(masked(inexact, where, 0, "mean"), axes, keepdims)
        out = apply2("divide", total, _masked_count(inexact, where, axes, keepdims))
        return wrap(out if dtype is None else astype(out, dtype))
    if dtype is not None:  # numpy's: the sum in `dtype` (an int8 one wraps), then the division
        x = _in_dtype(x, dtype)
        shape = shape_of(x)
        n = _count(shape, normalize_axes(axis, len(shape)), x, keepdims)
        return wrap(astype(apply2("divide", astype(sum_raw(x, axis, keepdims), dtype), n), dtype))
    whole = axis is None and not keepdims
    if whole and (type(x) is np.ndarray or (type(x) is Tensor and x._trace is not None)):
        # the mean of everything of a floating-point array or traced Tensor (a loss, every eager
        # step): its shape and dtype read once, the sum's letters kept per rank
        shape, dt = x.shape, x.dtype
        if dt.kind in "fc" and not math.isnan(math.prod(shape)):  # (nan: unknown dask chunk sizes)
            letters = _ALL.get(len(shape))
            if letters is None:
                letters = _ALL[len(shape)] = "".join(fresh_symbols(set(), len(shape)))
            out = apply2("divide", contract((letters,), "", [x]), math.prod(shape))
            return out if type(out) is Tensor else wrap(out)
    return wrap(_mean_raw(_inexact(x), axis, keepdims))


_ALL: dict[int, str] = {}
"""The index letters of an array of each rank (a mean of all of it sums them away)."""


def _masked_count(x: Value, where: ArrayLike, axes: tuple[int, ...], keepdims: bool) -> Any:
    """How many elements of `x` a ``where=`` mask keeps along `axes`, in `x`'s real dtype."""
    real_dtype = np.empty(0, dtype_of(x)).real.dtype
    ones = astype(where_raw(compare("equal", x, x), 1, 1), real_dtype)  # in x's library, as `_count`'s
    return sum_axes(masked(ones, where, 0, "the count"), shape_of(x), axes, keepdims)


def _mean_raw(x: Value, axis: Axis, keepdims: bool) -> Any:
    shape = shape_of(x)
    axes = normalize_axes(axis, len(shape))  # (once, for the sum and the count)
    return apply2("divide", sum_axes(x, shape, axes, keepdims), _count(shape, axes, x, keepdims))


def var(
    x: ArrayLike,
    axis: Axis = None,
    ddof: float = 0,
    keepdims: bool = False,
    *,
    dtype: DTypeLike | None = None,
    where: ArrayLike | None = None,
    mean: ArrayLike | None = None,
    correction: float | None = None,
) -> Tensor:
    """Variance along `axis` with `ddof` delta degrees of freedom (numpy's default 0); with
    `dtype` (floating-point or complex), computed in it and of that dtype, as numpy's;
    ``where=`` as `mean`'s (the mean and the sum of squares of the elements it keeps).
    numpy 2's ``mean`` (the mean, with kept axes, computed already: not computed again, and
    differentiated as given) and the array API's ``correction`` (another name for `ddof`).

    Raises:
        ValueError: If both `ddof` and `correction` are given.
    """
    if correction is not None:
        if ddof != 0:
            raise ValueError("ddof and correction can't be provided simultaneously.")
        ddof = correction
    if dtype is not None and np.dtype(dtype).kind not in "fc":
        raise TypeError(
            f"var and std take a floating-point or complex dtype, got {np.dtype(dtype)} (numpy's "
            "integer variance truncates each step of the computation)"
        )
    x = _inexact(_in_dtype(x, dtype))
    shape = shape_of(x)
    axes = normalize_axes(axis, len(shape))
    if where is not None:
        count = _masked_count(x, where, axes, True)  # (once: the mean's divisor and the variance's)
        centre: Any = (
            apply2("divide", sum_raw(masked(x, where, 0, "var"), axes, True), count)
            if mean is None
            else to_operand(mean)
        )
        d = masked(x - centre, where, 0, "var")  # (selected before squaring: 0, not inf * 0, there)
        out = sum_raw(real(d * conj(d)), axes, True) / apply2("maximum", count - ddof, 0)
        if not keepdims:
            out = reshape_raw(out, tuple(n for i, n in enumerate(shape) if i not in axes))
        return wrap(out if dtype is None else astype(out, dtype))
    n = _count(shape, axes, x, keepdims)
    # numpy's divisor max(n - ddof, 0): ddof >= n gives inf (nan where there are no elements), never
    # a negative variance
    dof = n - ddof
    if isinstance(dof, (int, float)):
        dof = builtins.max(dof, 0)  # (`max` in this module is the reduction)
    else:  # a count made lazily (dask's unknown chunk sizes)
        dof = apply2("maximum", dof, 0)
    centre = _mean_raw(x, axis, True) if mean is None else to_operand(mean)
    d = x - centre
    out = sum_raw(real(d * conj(d)), axis, keepdims) / dof
    return wrap(out if dtype is None else astype(out, dtype))  # (numpy's: complex for a complex dtype)


def _inexact(x: ArrayLike) -> Value:
    """`x` as an array operand; booleans and integers in float64, as numpy's `mean` computes them.

    (Shifting an int8 array by its maximum would wrap around, and numpy subtracts no booleans.)
    """
    x = to_array_operand(x)
    return x if dtype_of(x).kind in "fc" else astype(x, np.float64)


def std(
    x: ArrayLike,
    axis: Axis = None,
    ddof: float = 0,
    keepdims: bool = False,
    *,
    dtype: DTypeLike | None = None,
    where: ArrayLike | None = None,
    mean: ArrayLike | None = None,
    correction: float | None = None,
) -> Tensor:
    """Standard deviation along `axis`, ``sqrt(var(x))`` (its derivative is infinite where
    the variance is 0, as the square root's); `dtype`, ``where=``, ``mean`` and ``correction``
    as `var`'s."""
    return wrap(
        sqrt(var(x, axis, ddof, keepdims, dtype=dtype, where=where, mean=mean, correction=correction))
    )


def _stable_shift(x: Any, axes: tuple[int, ...]) -> Any:
    """The max along `axes` (kept dims) with zero derivative; 0 where it is not finite."""
    shape = shape_of(x)
    if 0 in shape:
        return arrays.zeros(strip(x), (1,) * len(shape), dtype_of(x))
    m = _keep(bind(max_p, (stop_gradient(x),), {"axes": axes}), shape, axes)
    return where_raw(bind(PRIMITIVES["isfinite"], (m,), {}), m, 0)  # 0 takes m's dtype


def _logsumexp(x: Value, axes: tuple[int, ...], keepdims: bool) -> Any:
    m = _stable_shift(x, axes)
    out = log(sum_raw(exp(x - m), axes, keepdims=True)) + m
    if not keepdims:
        out = reshape_raw(out, tuple(d for i, d in enumerate(shape_of(x)) if i not in axes))
    return out


def logsumexp(
    x: ArrayLike,
    axis: Axis = None,
    keepdims: bool = False,
    *,
    b: ArrayLike | None = None,
    return_sign: bool = False,
) -> Any:
    """log(sum(exp(x))) along `axis` (all axes by default), stable at any magnitude.

    Booleans and integers are computed in float64. scipy's and JAX's ``b`` weighs each
    term, ``log(sum(b * exp(x)))``; a negative sum is nan unless ``return_sign``, which
    gives ``(log|sum|, sign of the sum)`` (the sign without a derivative).
    """
    x = _inexact(x)
    axes = normalize_axes(axis, len(shape_of(x)))
    if b is None and not return_sign:
        return wrap(_logsumexp(x, axes, keepdims))
    m = _stable_shift(x, axes)
    terms = exp(x - m)
    if b is not None:
        terms = terms * to_operand(b)
    total = sum_raw(terms, axes, keepdims=True)
    sign = stop_gradient(bind(PRIMITIVES["sign"], (total,), {}))
    out = (log(total * sign) if return_sign else log(total)) + m  # (|total| with its derivative)
    if not keepdims:
        kept = tuple(d for i, d in enumerate(shape_of(out)) if i not in axes)
        out, sign = reshape_raw(out, kept), reshape_raw(sign, kept)
    return (wrap(out), wrap(sign)) if return_sign else wrap(out)


def _log_softmax(x: Any, axes: tuple[int, ...]) -> Any:
    s = x - _stable_shift(x, axes)
    return s - log(sum_raw(exp(s), axes, keepdims=True))


def log_softmax(x: ArrayLike, axis: int = -1) -> Tensor:
    """x - logsumexp(x) along `axis` (the last by default); booleans and integers in float64."""
    x = _inexact(x)
    return wrap(_log_softmax(x, normalize_axes(axis, len(shape_of(x)))))


def softmax(x: ArrayLike, axis: int = -1) -> Tensor:
    """exp(x - max) / sum(exp(x - max)) along `axis` (the last by default).

    Booleans and integers are computed in float64.
    """
    x = _inexact(x)
    axes = normalize_axes(axis, len(shape_of(x)))
    e = exp(x - _stable_shift(x, axes))
    return wrap(e / sum_raw(e, axes, keepdims=True))


def clip(
    x: ArrayLike,
    a_min: ArrayLike | None = None,
    a_max: ArrayLike | None = None,
    *,
    min: ArrayLike | None = None,  # noqa: A002 (numpy's, the array API's and PyTorch's names)
    max: ArrayLike | None = None,  # noqa: A002
) -> Tensor:
    """Limit values to [a_min, a_max]; the gradient passes where a_min <= x <= a_max (so not
    at a nan, which stays nan: JAX's and PyTorch's slope there is 0 too).

    As numpy: ``minimum(maximum(x, a_min), a_max)``, so a_max wins where a_min > a_max. The
    bounds may be given as ``min=`` and ``max=`` instead (numpy 2.1's and the array API's
    keywords), either may be None.

    Raises:
        TypeError: If a bound is given both ways.
    """
    if min is not None:
        if a_min is not None:
            raise TypeError("clip: give the lower bound as a_min or as min=, not both")
        a_min = min
    if max is not None:
        if a_max is not None:
            raise TypeError("clip: give the upper bound as a_max or as max=, not both")
        a_max = max
    a_min = None if a_min is None else to_operand(a_min)
    a_max = None if a_max is None else to_operand(a_max)
    # a number `x` becomes an array of the bounds' library (numpy's beside torch is refused)
    x = to_array_operand(x, like=a_min if arrays.is_array(raw(a_min)) else a_max)
    out = x
    if a_min is not None:
        out = where_raw(compare("less", x, a_min), a_min, out)
    if a_max is not None:
        out = where_raw(compare("greater", out, a_max), a_max, out)
    if (a_min is not None or a_max is not None) and dtype_of(x).kind == "f":
        out = where_raw(compare("not_equal", x, x), stop_gradient(x), out)  # (a nan: its own value)
    bounds = [shape_of(b) for b in (a_min, a_max) if b is not None]
    return wrap(broadcast_raw(out, np.broadcast_shapes(shape_of(x), *bounds)))


# -- scans: cumsum (linear) and cumprod ------------------------------------------------------


def _scan_axis(x: Value, axis: int | None) -> tuple[Value, int]:
    """`x` flattened when `axis` is None (numpy's convention for scans), and the axis as an index."""
    if axis is None:
        return reshape_raw(x, (math.prod(shape_of(x)),)), 0
    return x, normalize_axes(axis, len(shape_of(x)))[0]


cumsum_p = Primitive("cumsum", _impl("cumsum", np.cumsum, "cumulative_sum", "axis"))


def cumsum_raw(x: Value, axis: int) -> Value:
    return bind(cumsum_p, (x,), {"axis": axis})


def _reverse_cumsum(g: Value, axis: int) -> Value:
    """Sums from each position to the end of `axis`: the transpose of `cumsum`."""
    flip = (slice(None),) * axis + (slice(None, None, -1),)
    return getitem_raw(cumsum_raw(getitem_raw(g, flip), axis), flip)


declare(
    cumsum_p,
    vjp=lambda g, ans, vals, p, needed: [astype(_reverse_cumsum(g, p["axis"]), dtype_of(vals[0]))],
    jvp=lambda ts, ans, vals, p: cumsum_raw(ts[0], p["axis"]),
    keep=lambda needed: ((False,), False),
    batch=batch_axis,
    aliasing="fresh",
    linear=True,
)


def cumsum(x: ArrayLike, axis: int | None = None, *, dtype: DTypeLike | None = None) -> Tensor:
    """Running sums along `axis` (of the flattened array by default), as numpy.cumsum; with
    `dtype`, of the elements cast to it, in it.

    Linear: its VJP is the running sum from the other end.
    """
    v, ax = _scan_axis(_in_dtype(x, dtype), axis)
    out = cumsum_raw(v, ax)
    return wrap(out if dtype is None else astype(out, dtype))


cumprod_p = Primitive("cumprod", _impl("cumprod", np.cumprod, "cumulative_prod", "axis"))


def _cumprod_zeros(x: Any, axis: int) -> tuple[Any, ...]:
    """Where `x` is zero; where its first and its second zero along `axis` are; `x` with its zeros
    replaced by 1; the running product with only the first zero replaced by 1; and the running
    product with the first two replaced by 1, times the first zero (all staged operations: the
    derivative at the second zero is that zero-valued product, exact to second order)."""
    zero = compare("equal", x, 0)
    count = astype(zero, np.int64)
    nth = cumsum_raw(count, axis) * count
    first = compare("equal", nth, 1)
    second = compare("equal", nth, 2)
    ones = where_raw(zero, 1, x)
    skip_first = bind(cumprod_p, (where_raw(first, 1, x),), {"axis": axis})
    x_first = sum_raw(where_raw(first, x, 0), (axis,), keepdims=True)  # 0, traced
    skip_two = bind(cumprod_p, (where_raw(first, 1, where_raw(second, 1, x)),), {"axis": axis})
    return zero, first, second, ones, skip_first, x_first * skip_two


def _cumprod_vjp(g: Any, ans: Any, vals: Sequence[Any], p: Params, needed: list[bool]) -> list[Any]:
    """d out_k / d x_j = prod_{i <= k, i != j} x_i: out_k / x_j where x_j != 0; at a lane's first
    zero, the running product without it; at its second, that without it (0: the first zero is a
    factor, but its derivative in the first is not); after it, zero (two zeros are factors)."""
    x, axis = vals[0], p["axis"]
    zero, first, second, ones, skip_first, skip_second = _cumprod_zeros(x, axis)
    away = _reverse_cumsum(g * ans, axis) / ones
    at_first = _reverse_cumsum(g * skip_first, axis)
    at_second = _reverse_cumsum(g * skip_second, axis)
    return [where_raw(zero, where_raw(first, at_first, where_raw(second, at_second, 0)), away)]


def _cumprod_jvp(ts: list[Any], ans: Any, vals: Sequence[Any], p: Params) -> Any:
    x, axis = vals[0], p["axis"]
    zero, first, second, ones, skip_first, skip_second = _cumprod_zeros(x, axis)
    t = ts[0]
    # (products through `apply2`: a plain array of array-api-strict on the left refuses a Tensor on
    # its right, and either factor may be the plain one: a batched tangent is a Tensor, and under
    # rev-over-fwd the tangent is plain and the running product traced)
    away = apply2("multiply", ans, cumsum_raw(where_raw(zero, 0, apply2("divide", t, ones)), axis))
    at_first = apply2("multiply", skip_first, cumsum_raw(where_raw(first, t, 0), axis))
    at_second = apply2("multiply", skip_second, cumsum_raw(where_raw(second, t, 0), axis))
    return apply2("add", apply2("add", away, at_first), at_second)


declare(cumprod_p, vjp=_cumprod_vjp, jvp=_cumprod_jvp, batch=batch_axis, aliasing="fresh")


def cumprod(x: ArrayLike, axis: int | None = None, *, dtype: DTypeLike | None = None) -> Tensor:
    """Running products along `axis` (of the flattened array by default), as numpy.cumprod;
    `dtype` as `cumsum`'s.

    Its derivative is exact where elements are zero (no division by them), and so is its second
    derivative, however many zeros a lane holds.
    """
    v, ax = _scan_axis(_in_dtype(x, dtype), axis)
    out = bind(cumprod_p, (v,), {"axis": ax})
    return wrap(out if dtype is None else astype(out, dtype))


def _in_dtype(x: ArrayLike, dtype: DTypeLike | None) -> Value:
    """`x` as an array operand, cast to a reduction's `dtype` keyword where one is given."""
    x = to_array_operand(x)
    return x if dtype is None else astype(x, dtype)
