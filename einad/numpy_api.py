"""numpy's functions on Tensors: which einad operation each numpy function and ufunc runs.

`Tensor.__array_ufunc__` and `Tensor.__array_function__` look a numpy callable up
in `core.numpy_functions`; this module fills that table. Each entry takes numpy's
arguments and calls the einad operation of the same name, so numpy code run on
Tensors (``np.sin(t)``, ``np.sum(t, axis=0)``, ``ndarray @ t``) is traced and
differentiable. ``out=`` a Tensor writes the result into it (as ``t[...] = v``); an
argument einad cannot honour (``out=`` an ndarray, ``where=``, an unknown keyword) is a
TypeError naming the numpy function; a numpy function missing from
the table is a TypeError naming it (raised by the Tensor).
"""

from __future__ import annotations

import inspect
import itertools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import fft, numpy_compositions, ops
from .aliases import Axis
from .core import ArrayLike, Tensor, _unbox_bool, exported, numpy_functions, viewed_from
from .rules import indexing, linalg, reductions
from .rules.elementwise import PREDICATES
from .rules.indexing import combined
from .util import dtype_of, shape_of, to_operand, wrap

Function = Callable[..., Any]


def _outs(name: str, out: Any) -> tuple[Any, ...] | None:
    """numpy's ``out=``: the Tensors a call writes its results into (None where none is given).
    einad writes into a Tensor as ``t[...] = v`` does (so ``np.exp(t, out=t)`` is traced and
    differentiable), never into an array: an ndarray there is refused before anything runs."""
    if out is None:
        return None
    outs = out if isinstance(out, tuple) else (out,)
    if all(o is None for o in outs):
        return None
    if any(o is not None and type(o) is not Tensor for o in outs):
        raise TypeError(
            f"{name}(..., out=...): einad cannot write into an array (a Tensor's derivative "
            "would be lost); use the returned Tensor instead, e.g. a = a + t rather than a += t "
            "(or give a Tensor as out=)"
        )
    return outs


def _written(name: str, outs: tuple[Any, ...] | None, result: Any, same_kind: bool = False) -> Any:
    """`result` written into the Tensors `outs` (`_outs`) and those returned, as numpy returns its
    out= arrays (a ufunc's casting rule, 'same_kind', where `same_kind`; else an assignment's)."""
    if outs is None:
        return result
    results = result if isinstance(result, tuple) else (result,)
    if len(outs) != len(results):
        raise ValueError(f"{name}: out= has {len(outs)} entries for {len(results)} result(s)")
    for o, r in zip(outs, results):
        if o is None:
            continue
        if same_kind and not np.can_cast(dtype_of(r), o.dtype, "same_kind"):
            raise TypeError(
                f"{name}: cannot cast its output from {dtype_of(r)} to the out= Tensor's {o.dtype} "
                "with casting rule 'same_kind' (numpy's)"
            )
        o[...] = r
    written = tuple(r if o is None else o for o, r in zip(outs, results))
    return written if isinstance(result, tuple) else written[0]


# -- ufuncs ------------------------------------------------------------------------------------

# Keyword arguments of a ufunc call that einad accepts at their default value only.
_UFUNC_DEFAULTS = {"where": True, "dtype": None, "casting": "same_kind", "order": "K", "subok": True}


def _ufunc(ufunc: np.ufunc, op: Function, boolean: bool = False) -> None:
    name = f"numpy.{ufunc.__name__}"

    def call(*inputs: Any, **kwargs: Any) -> Any:
        core: dict[str, Any] = {}  # a gufunc's axis= (numpy.vecdot's), passed on to the operation
        outs = None
        if kwargs:  # (none in the common case, an operator: ``array * tensor``)
            outs = _outs(name, kwargs.pop("out", None))
            if ufunc.signature is not None and "axis" in kwargs:
                core["axis"] = kwargs.pop("axis")
        for key, value in kwargs.items():
            if key not in _UFUNC_DEFAULTS or not _is(value, _UFUNC_DEFAULTS[key]):
                raise TypeError(f"{name} on einad Tensors does not take {key}={value!r}")
        if len(inputs) != ufunc.nin:
            raise TypeError(f"{name} takes {ufunc.nin} operand(s), got {len(inputs)}")
        out = op(*inputs, **core)
        if not boolean and type(out) is not Tensor:  # (a composition ending in a cast of constants: raw)
            out = tuple(map(wrap, out)) if type(out) is tuple else wrap(out)
        if outs is not None:
            return _written(name, outs, out, same_kind=True)
        return _unbox_bool(out) if boolean else out  # booleans as `t > 0` gives them

    numpy_functions[ufunc] = call
    if ufunc.nin == 2 and ufunc.nout == 1 and ufunc.signature is None:  # (a gufunc has no outer)
        numpy_functions[(ufunc, "outer")] = _outer_of(name, call)
    if ufunc.nout == 1 and ufunc.signature is None and not boolean:
        numpy_functions[(ufunc, "at")] = _at_of(ufunc, call)


_NO_OPERAND: Any = object()


def _at_of(ufunc: np.ufunc, call: Function) -> Function:
    """``ufunc.at(a, indices, b)``: the Tensor `a` takes ``ufunc(a[indices], b)`` at `indices`,
    applied in turn where an index repeats (``a.at[indices]``'s updates; numpy.add.at a
    scatter-add), as numpy's, which writes into `a` (a Tensor takes the new value, as
    ``a[indices] = ...`` does); returns None."""
    name = f"{ufunc.__name__}.at"

    def at(a: Any, indices: Any, b: Any = _NO_OPERAND, /) -> None:
        t = numpy_compositions.target(a, name)
        if ufunc.nin == 2 and b is _NO_OPERAND:
            raise ValueError("second operand needed for ufunc")
        if ufunc.nin == 1 and b is not _NO_OPERAND:
            raise ValueError("second operand provided when ufunc is unary")

        def update(x: Tensor) -> Any:  # (a Tensor: `x.at`'s updates return one)
            place = x.at[indices]
            if ufunc is np.add:
                return place.add(b)  # (one scatter-add)
            if ufunc.nin == 2:  # the rounds of ``x.at[i].multiply(b)`` and the others, with this ufunc
                return combined(place, b, lambda p, q: to_operand(call(wrap(p), wrap(q))))
            return place.apply(call)

        t._write(update, f"numpy.{name}")

    at.__name__ = f"numpy.{name}"
    return at


def _outer_of(name: str, call: Function) -> Function:
    """``ufunc.outer(a, b)``: the ufunc on `a` with one new axis per axis of `b`, broadcast
    against `b` (every pair), as numpy's."""

    def outer(a: ArrayLike, b: ArrayLike, /, **kwargs: Any) -> Any:
        shape_a, nd_b = shape_of(a), len(shape_of(b))
        return call(ops.reshape(a, (*shape_a, *(1,) * nd_b)) if nd_b else a, b, **kwargs)

    outer.__name__ = f"{name}.outer"
    return outer


def _is(value: Any, default: Any) -> bool:
    return value is default or (
        default is not None and not isinstance(value, np.ndarray) and value == default
    )


def _reciprocal(x: ArrayLike) -> Tensor:
    return ops.divide(1, x)


def _positive(x: ArrayLike) -> Tensor:
    """`x` as it is (``+t`` is `t`): ``x + 0`` would turn -0.0 into 0.0."""
    return x if type(x) is Tensor else wrap(to_operand(x))


# numpy's ufunc of each operation of the elementwise table, under the table's name (np.abs is
# np.absolute, np.mod np.remainder, np.conj np.conjugate): every entry numpy has a ufunc for
# dispatches to einad's operation, the predicates giving booleans as `t > 0` does.
for _name, _op in ops.ELEMENTWISE.items():
    _uf = getattr(np, _name, None)
    if isinstance(_uf, np.ufunc) and _name != "round":
        _ufunc(_uf, _op, boolean=_name in PREDICATES)
    elif callable(_uf) and _name not in numpy_functions and _name != "round":  # np.sinc: a function
        numpy_functions[_uf] = _op
# and the ufuncs that are not one table entry under their own name
_ARITHMETIC: dict[np.ufunc, Function] = {
    np.positive: _positive,
    np.reciprocal: _reciprocal,
    np.rint: ops.round,
    np.conjugate: ops.conj,
    np.matmul: ops.matmul,
}
for _uf, _op in _ARITHMETIC.items():
    _ufunc(_uf, _op)
for _uf, (_op, _boolean) in numpy_compositions.UFUNCS.items():
    _ufunc(_uf, _op, boolean=_boolean)


def _ufunc_method(ufunc: np.ufunc, method: str, op: Function, scan: bool = False) -> None:
    """``np.add.reduce`` and friends: numpy's default axis is 0."""
    name = f"numpy.{ufunc.__name__}.{method}"

    def call(
        array: ArrayLike,
        axis: Axis = 0,
        dtype: Any = None,
        out: Any = None,
        keepdims: bool = False,
        **kwargs: Any,
    ) -> Tensor:
        outs = _outs(name, out)
        if dtype is not None:
            raise TypeError(f"{name} on einad Tensors does not take dtype={dtype!r}")
        for key, value in kwargs.items():  # numpy's initial=, where=
            if key != "where" or not _is(value, True):
                raise TypeError(f"{name} on einad Tensors does not take {key}={value!r}")
        if scan:
            if keepdims:
                raise TypeError(f"{name} does not take keepdims")
            if axis is None:  # numpy's accumulate flattens nothing: axis=None is axis 0 of a 1-D array
                if len(shape_of(array)) != 1:
                    raise ValueError(f"{name}: accumulate does not allow multiple axes (axis=None)")
                axis = 0
            return _written(name, outs, op(array, axis=axis))  # type: ignore[no-any-return]
        return _written(name, outs, op(array, axis=axis, keepdims=keepdims))  # type: ignore[no-any-return]

    numpy_functions[(ufunc, method)] = call


_ufunc_method(np.add, "reduce", ops.sum)
_ufunc_method(np.multiply, "reduce", ops.prod)
_ufunc_method(np.maximum, "reduce", ops.max)
_ufunc_method(np.minimum, "reduce", ops.min)
_ufunc_method(np.logaddexp, "reduce", reductions.logsumexp)
_ufunc_method(np.logical_and, "reduce", reductions.all)
_ufunc_method(np.logical_or, "reduce", reductions.any)
_ufunc_method(np.add, "accumulate", reductions.cumsum, scan=True)
_ufunc_method(np.multiply, "accumulate", reductions.cumprod, scan=True)
_ufunc_method(np.maximum, "accumulate", numpy_compositions.cumulative_extreme("maximum"), scan=True)
_ufunc_method(np.minimum, "accumulate", numpy_compositions.cumulative_extreme("minimum"), scan=True)


# -- array functions ---------------------------------------------------------------------------


def _numpy_positions(func: Function) -> tuple[int, tuple[str, ...]] | None:
    """Where numpy's positional parameters reach its `dtype` or `out` (``np.sum(a, axis, dtype,
    out, keepdims)``), which einad's functions take by keyword only or not at all: that place
    and numpy's names from it on, so that arguments given there go by name. None where numpy's
    function has no such parameter (or no signature Python can read)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):  # a C function without a text signature
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in itertools.takewhile(lambda p: p.kind in kinds, params)]
    cut = next((k for k, n in enumerate(names) if n in ("dtype", "out")), None)
    return None if cut is None else (cut, tuple(names[cut:]))


def _function(func: Function, impl: Function) -> None:
    """Run `impl` for numpy's `func` with numpy's arguments.

    ``out=None`` and ``dtype=None`` are accepted (numpy's defaults); any other
    argument `impl` does not take is a TypeError naming the numpy function. The
    arguments are checked against `impl`'s signature only when the call raises a
    TypeError (a signature's ``bind`` costs more than many an operation: quimb's eager
    contraction calls numpy functions hundreds of times a gradient).
    """
    name = f"{func.__module__}.{func.__name__}"
    signature = inspect.signature(impl)
    named = _numpy_positions(func)

    def call(*args: Any, **kwargs: Any) -> Any:
        if named is not None and named[0] < len(args) <= named[0] + len(named[1]):
            kwargs.update(zip(named[1], args[named[0] :]))  # from numpy's dtype or out on: by name
            args = args[: named[0]]
        outs = _outs(name, kwargs.pop("out", None))
        if "dtype" in kwargs and kwargs["dtype"] is None and "dtype" not in signature.parameters:
            del kwargs["dtype"]
        try:
            return _written(name, outs, impl(*args, **kwargs))
        except TypeError:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as err:  # the arguments do not fit: numpy's function named
                raise TypeError(f"{name} on einad Tensors: {err}") from None
            raise

    call.__name__ = func.__name__
    numpy_functions[func] = call


# Adapters where numpy's signature is not einad's.


def _reshape(
    a: ArrayLike, shape: Any = None, order: str = "C", *, newshape: Any = None, copy: Any = None
) -> Tensor:
    """numpy.reshape, with numpy 2.1's `copy`: True, a Tensor of its own (a write into it leaves
    `a` alone); False, a view of `a` or numpy's ValueError; None, a view where one can be."""
    shape = shape if shape is not None else newshape
    if copy:
        return ops.reshape(_copy(a), shape, order)
    out = ops.reshape(a, shape, order)
    if copy is False and type(a) is Tensor and not viewed_from(out, a):
        raise ValueError("Unable to avoid creating a copy while reshaping.")
    return out


def _swap(a: ArrayLike, axis1: int, axis2: int) -> Tensor:
    nd = len(shape_of(a))
    order = list(range(nd))
    i, j = int(axis1) % nd, int(axis2) % nd
    order[i], order[j] = order[j], order[i]
    return ops.transpose(a, order)


def _concatenate(arrays: Sequence[ArrayLike], axis: int | None = 0) -> Tensor:
    if axis is None:
        return ops.concatenate([ops.reshape(a, (-1,)) for a in arrays], axis=0)
    return ops.concatenate(arrays, axis=axis)


def _isclose(
    a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> Any:
    """numpy.isclose as einad operations (a boolean Tensor, staged under jit): within
    ``atol + rtol * |b|``, infinities only of the same sign, nan to nan only with `equal_nan`."""
    finite = ops.where(ops.isfinite(a), ops.isfinite(b), False)
    fa, fb = ops.where(finite, a, 0.0), ops.where(finite, b, 0.0)  # (no inf - inf computed)
    near = ops.less_equal(ops.abs(ops.subtract(fa, fb)), atol + rtol * ops.abs(fb))
    close = ops.where(finite, near, ops.equal(a, b))
    if equal_nan:
        close = ops.where(ops.where(ops.isnan(a), ops.isnan(b), False), True, close)
    return close


def _allclose(
    a: ArrayLike, b: ArrayLike, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False
) -> Any:
    """A Python bool, as numpy's; under `einad.jit` or `vmap`, whose values are not known, a 0-d
    boolean Tensor (JAX's result) that `ea.where` can choose with."""
    return numpy_compositions.truth(ops.all(_isclose(a, b, rtol, atol, equal_nan)))


def _count_nonzero(a: ArrayLike, axis: Axis = None, *, keepdims: bool = False) -> Any:
    return ops.sum(ops.not_equal(a, 0), axis=axis, keepdims=keepdims)


_at_least = numpy_compositions.at_least
_at_least_2d = _at_least(2)


def _vstack(tup: Sequence[ArrayLike]) -> Tensor:
    return ops.concatenate([_at_least_2d(a) for a in tup], axis=0)


def _hstack(tup: Sequence[ArrayLike]) -> Tensor:
    items = [a if len(shape_of(a)) else ops.reshape(a, (1,)) for a in tup]
    return ops.concatenate(items, axis=0 if len(shape_of(items[0])) == 1 else 1)


def _sort(
    a: ArrayLike, axis: int | None = -1, kind: Any = None, order: Any = None, *, stable: Any = None
) -> Tensor:
    if order is not None:
        raise TypeError("numpy.sort on einad Tensors does not take order= (structured arrays)")
    return indexing.sort(a, axis)  # any kind: the sorted values are the same


def _argsort(
    a: ArrayLike, axis: int | None = -1, kind: Any = None, order: Any = None, *, stable: Any = None
) -> Tensor:
    if order is not None:
        raise TypeError("numpy.argsort on einad Tensors does not take order= (structured arrays)")
    return indexing.argsort(a, axis)  # always stable


def _cast(values: Sequence[Any], dtype: Any, casting: str, name: str) -> list[Any]:
    """numpy's ``dtype=`` and ``casting=`` of a joining function: each array among `values` cast
    to `dtype` first, as `casting` allows (other values, a subscript string, pass through)."""
    if dtype is None:
        return list(values)
    out = []
    for v in values:
        if isinstance(v, Tensor) or hasattr(v, "dtype"):
            have = dtype_of(v)
            if not np.can_cast(have, dtype, casting):  # type: ignore[arg-type]
                raise TypeError(
                    f"{name}: cannot cast an operand of dtype {have} to {np.dtype(dtype)} "
                    f"according to the rule {casting!r}"
                )
            v = ops.astype(v, dtype)
        out.append(v)
    return out


def _einsum(
    *operands: Any, dtype: Any = None, order: str = "K", casting: str = "safe", **kwargs: Any
) -> Tensor:
    """numpy.einsum: with `dtype`, each array operand cast to it first, as `casting` allows
    (numpy's 'safe' default refuses float64 to float32); `order` (a memory layout) is moot."""
    return ops.einsum(*_cast(operands, dtype, casting, "numpy.einsum"), **kwargs)


def _joined(join: Function, name: str) -> Function:
    """np.concatenate, stack, vstack and hstack with numpy's ``dtype=`` and ``casting=``."""

    def call(
        arrays: Sequence[Any], *args: Any, dtype: Any = None, casting: str = "same_kind", **kwargs: Any
    ) -> Any:
        return join(_cast(list(arrays), dtype, casting, f"numpy.{name}"), *args, **kwargs)

    call.__name__ = name
    return call


def _vdot(a: ArrayLike, b: ArrayLike) -> Tensor:
    return ops.dot(ops.reshape(ops.conj(a), (-1,)), ops.reshape(b, (-1,)))


def _round(a: ArrayLike, decimals: int = 0) -> Tensor:
    return ops.round(a, decimals)


def _shape(a: ArrayLike) -> tuple[int, ...]:
    return shape_of(a)


def _ndim(a: ArrayLike) -> int:
    return len(shape_of(a))


def _size(a: ArrayLike, axis: int | None = None) -> int:
    s = shape_of(a)
    return math.prod(s) if axis is None else s[axis]


def _result_type(*arrays_and_dtypes: Any) -> np.dtype[Any]:
    return np.result_type(*[dtype_of(a) if isinstance(a, Tensor) else a for a in arrays_and_dtypes])


def _iscomplexobj(x: ArrayLike) -> bool:
    return dtype_of(x).kind == "c"


def _isrealobj(x: ArrayLike) -> bool:
    return dtype_of(x).kind != "c"


def _like(fill: Any) -> Function:
    """``np.zeros_like`` and friends: a numpy array (a constant, with no derivative)."""

    def like(a: ArrayLike, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None) -> Any:
        return np.full(
            shape_of(a) if shape is None else shape, fill, dtype=dtype_of(a) if dtype is None else dtype
        )

    return like


def _full_like(
    a: ArrayLike, fill_value: Any, dtype: Any = None, order: str = "K", subok: bool = True, shape: Any = None
) -> Any:
    return _like(fill_value)(a, dtype, order, subok, shape)


def _copy(a: ArrayLike, order: str = "K", subok: bool = False) -> Tensor:
    """A new Tensor: a copy of a constant's array, or an identity operation on a traced value."""
    if isinstance(a, Tensor) and a._trace is None:
        return Tensor(np.array(a._value))
    return ops.getitem(a, ...)


_FUNCTIONS: dict[Function, Function] = {
    np.sum: ops.sum,
    np.mean: ops.mean,
    np.var: ops.var,
    np.std: reductions.std,
    np.prod: ops.prod,
    np.max: ops.max,
    np.amax: ops.max,
    np.min: ops.min,
    np.amin: ops.min,
    np.cumsum: reductions.cumsum,
    np.cumprod: reductions.cumprod,
    np.einsum: _einsum,
    np.dot: ops.dot,
    np.vdot: _vdot,
    np.inner: ops.inner,
    np.outer: ops.outer,
    np.tensordot: ops.tensordot,
    np.trace: ops.trace,
    np.diagonal: ops.diagonal,
    np.transpose: ops.transpose,
    np.moveaxis: ops.moveaxis,
    np.swapaxes: _swap,
    np.reshape: _reshape,
    np.ravel: ops.ravel,
    np.squeeze: ops.squeeze,
    np.expand_dims: ops.expand_dims,
    np.broadcast_to: ops.broadcast_to,
    np.concatenate: _joined(_concatenate, "concatenate"),
    np.stack: _joined(ops.stack, "stack"),
    np.vstack: _joined(_vstack, "vstack"),
    np.hstack: _joined(_hstack, "hstack"),
    np.split: ops.split,
    np.flip: ops.flip,
    np.clip: ops.clip,
    np.sort: _sort,
    np.argsort: _argsort,
    np.argmax: indexing.argmax,
    np.argmin: indexing.argmin,
    np.take: indexing.take,
    np.take_along_axis: indexing.take_along_axis,
    np.pad: indexing.pad,
    np.roll: indexing.roll,
    np.diff: indexing.diff,
    np.tile: indexing.tile,
    np.repeat: indexing.repeat,
    np.real: ops.real,
    np.imag: ops.imag,
    np.angle: ops.angle,
    np.round: _round,
    np.around: _round,
    np.shape: _shape,
    np.ndim: _ndim,
    np.size: _size,
    np.result_type: _result_type,
    np.iscomplexobj: _iscomplexobj,
    np.isrealobj: _isrealobj,
    np.zeros_like: _like(0),
    np.ones_like: _like(1),
    np.empty_like: _like(0),
    np.full_like: _full_like,
    np.copy: _copy,
    np.atleast_1d: _at_least(1),
    np.atleast_2d: _at_least_2d,
    np.atleast_3d: _at_least(3),
    np.isclose: _isclose,
    np.allclose: _allclose,
    np.count_nonzero: _count_nonzero,
}
for _func, _impl in (_FUNCTIONS | numpy_compositions.FUNCTIONS).items():
    _function(_func, _impl)
for _name in linalg.__all__:  # numpy.linalg's functions, as einad.linalg's of the same name
    _numpys = getattr(np.linalg, _name, None)
    if callable(_numpys) and not isinstance(_numpys, type):
        _function(_numpys, getattr(linalg, _name))
for _name in fft.__all__:  # numpy.fft's functions, as einad.fft's
    _function(getattr(np.fft, _name), getattr(fft, _name))
for _impl, _func in exported.values():  # what a rules module exports with numpy's function
    if _func is not None:
        _function(_func, _impl)
