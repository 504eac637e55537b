"""The transformations: grad, value_and_grad, vjp, jvp, hvp, jacrev, jacfwd, hessian.

Each opens one trace (see `core`), runs the user's function on boxed inputs,
and reads the derivative off the result. Called at top level they return arrays
of the inputs' library (numpy arrays for numpy inputs, torch tensors on the
inputs' device for torch ones, lazy dask arrays for dask ones); called inside
another transformation they return that transformation's Tensors, so they nest
to any depth. What they build themselves (seeds, zero tangents, the identity
bases of the Jacobians) is built in the inputs' library through `einad.arrays`.
"""

from __future__ import annotations

import functools
import heapq
import math
import weakref
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from typing import Any, Literal, TypeAlias, cast

import numpy as np

from .. import arrays
from ..aliases import Array, DTypeLike, Shape
from ..arrays import np_dtype
from ..core import (
    IMPERATIVE,
    ArrayLike,
    ForwardTrace,
    Hook,
    Meta,
    Node,
    QuietRules,
    ReverseTrace,
    Structured,
    Tensor,
    Trace,
    _box,
    bind,
    box,
    check_cotangent,
    dead_tracer,
    dense,
    enable_grad,
    no_grad,
    recording_backward,
    strip,
    traced,
    tracing,
    value_of,
)
from ..errors import check_callable
from ..program import ClosedOverTracer, StagingTrace, put_leaves, run_graph, stage
from ..pytree import TreeDef, tree_flatten, tree_map, tree_unflatten
from ..rules import linear
from ..rules.einsum import Pending, deferring, einsum_p, sliced_einsum_p
from ..rules.elementwise import PRIMITIVES, real
from ..rules.linear import moveaxis
from ..rules.shape import astype, ones_like, reshape, zeros_like
from ..rules.structural import broadcast_to, shapes_alike
from ..util import dtype_of, foreign, raw, shape_of, wrap
from .batching import stacked
from .passes import optimize

ArgNums: TypeAlias = int | Sequence[int]
"""Which positional arguments to differentiate: one index, or several."""

# -- inputs and outputs ------------------------------------------------------------------


def _diff_value(x: Any, what: str | Callable[[], str]) -> Any:
    """The value to box as a differentiable input, or TypeError for non-float input (`what`
    names it: a string, or a function that makes the name, called only for the error)."""
    name = what if isinstance(what, str) else None
    if type(x) is Tensor:
        v = x if traced(x) else strip(x)
    elif isinstance(x, (bool, int, np.integer, np.bool_)):
        raise TypeError(
            f"cannot differentiate with respect to {name or what()}, the integer {x!r}: "  # type: ignore[operator]
            f"pass a float (e.g. {float(x)!r}) or a floating-point array"
        )
    else:
        v = x if arrays.is_array(x) else np.asarray(x)
    dt = dtype_of(v)
    if dt.kind not in "fc":
        raise TypeError(
            f"cannot differentiate with respect to {name or what()} of dtype {dt}: "  # type: ignore[operator]
            "differentiable inputs must be floating-point (or complex)"
        )
    return v


_DIFFERENTIATING = frozenset({ReverseTrace, ForwardTrace})
"""The traces whose Tensors a transformation takes as they are (`traced`, `_diff_value`)."""


def _other_library(context: Any) -> Any:
    """The first array among `context`'s leaves (a call's arguments) of a library other than
    numpy, or None."""
    return raw(foreign(tree_flatten(context)[0]))


def _numbers_in_library(values: list[Any], leaves: Sequence[Any], context: Any) -> list[Any]:
    """`values` (`_diff_value`'s, of the differentiated `leaves`), each Python or numpy number
    among `leaves` as a 0-d array of the library and device of the arrays in `context` (the
    call's arguments): a number belongs to no library, so ``grad(f)(2.0, torch_x)`` differentiates
    in torch (a 0-d numpy array would be a second library), as the operations take a number
    with any library's arrays. Unchanged when `context` holds no other library's array."""
    like = _other_library(context)
    if like is None:
        return values
    return [
        arrays.asarray(like, v, v.dtype) if isinstance(leaf, (float, complex, np.generic)) else v
        for v, leaf in zip(values, leaves)
    ]


def _same_library(values: Sequence[Any]) -> None:
    """TypeError naming both libraries when `values` hold arrays of two."""
    if len(values) > 1:
        arrays.namespace(*[raw(v) for v in values])


def _in_library_of(ref: Any, data: Any) -> Any:
    """User data (a cotangent or tangent given as numbers or lists) as an array of `ref`'s library.

    An array is kept as it is (arrays of another library than `ref`'s: TypeError naming both).
    """
    like = raw(ref)
    if arrays.is_array(data):
        arrays.namespace(data, like)
        return arrays.detached(data)  # (a torch tensor's own requires_grad: torch would record einad's ops)
    data = np.asarray(data)
    return data if arrays.xp_of(like) is np else arrays.asarray(like, data, data.dtype)


def _zeros_for(x: Any) -> Any:
    """Zeros of `x`'s shape and dtype, in its library and on its device (a plain array)."""
    return arrays.zeros(raw(x), shape_of(x), dtype_of(x))


def _out(v: Any) -> Any:
    """A result as the caller should see it: a Tensor if still traced, else numpy."""
    if traced(v):
        if v._trace.dead:
            raise dead_tracer(v._trace)
        return v
    v = strip(v)
    return v if arrays.is_array(v) and not arrays.is_numpy(v) else np.asarray(v)


def _grad_out(g: Any, like: Any, taken: set[int]) -> Any:
    """A gradient with the input's shape and dtype (zeros if the input was unused).

    A top-level gradient is a writable array of its own: one whose memory is in
    `taken` (ids of buffers already returned, or the caller's cotangents) is copied.
    """
    if type(g) is np.ndarray and type(like) is np.ndarray and g.shape == like.shape and g.dtype == like.dtype:
        # (numpy's gradient of a numpy input, the common case, inline: every gradient call)
        base = g
        while type(base.base) is np.ndarray:  # (`_buffer`)
            base = base.base
        if not g.flags.writeable or id(base) in taken:
            g = base = np.array(g)
        taken.add(id(base))
        return g
    shape, dt = shape_of(like), dtype_of(like)
    if g is None:
        g = arrays.zeros(strip(like), shape, dt)
    elif shape_of(g) != shape:
        g = broadcast_to(g, shape)
    if traced(g):
        return astype(g, dt) if g.dtype != dt else g
    g = strip(g)
    if arrays.xp_of(g) is not np:
        return arrays.cast(g, dt)
    g = arrays.cast(np.asarray(g), dt)
    if not g.flags.writeable or id(_buffer(g)) in taken:
        g = np.array(g)
    taken.add(id(_buffer(g)))
    return g


def _holomorphic_check(what: str, side: str, dtypes: Iterable[Any]) -> None:
    """With ``holomorphic=True``, every differentiated input and every output must be complex (as
    JAX asks): `dtypes` are those of one `side`.

    Raises:
        TypeError: Naming the first real one.
    """
    for dt in dtypes:
        if np.dtype(dt).kind != "c":
            raise TypeError(f"{what} with holomorphic=True needs complex {side}, got one of dtype {dt}")


def _split_aux(out: Any) -> tuple[Any, Any]:
    """`f`'s result with ``has_aux=True``: the pair (output, aux).

    Raises:
        TypeError: If it is not a pair.
    """
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise TypeError("with has_aux=True, the function must return a pair (value, aux)")
    return out[0], out[1]


def _aux_out(a: Any, trace: Any) -> Any:
    """An auxiliary result: arrays and Tensors as any result, other objects untouched."""
    if type(a) is Tensor or isinstance(a, (np.ndarray, np.generic)) or arrays.is_array(a):
        return _out(value_of(a, trace))
    return a


def _buffer(a: Any) -> Any:
    """The array that owns `a`'s memory."""
    while isinstance(getattr(a, "base", None), np.ndarray):
        a = a.base
    return a


def _is_int(i: object) -> bool:
    return type(i) is int or (isinstance(i, (int, np.integer)) and not isinstance(i, (bool, np.bool_)))


def _argnums_type(argnums: ArgNums) -> tuple[int, ...]:
    """`argnums` as a tuple, or TypeError when it is not an int or a tuple (list) of ints."""
    if _is_int(argnums):
        return (int(cast("int", argnums)),)
    if isinstance(argnums, (tuple, list)):
        out = []
        for i in argnums:  # (a loop, not generators: every gradient call checks its argnums)
            if not _is_int(i):
                break
            out.append(int(i))
        else:
            return tuple(out)
    raise TypeError(f"argnums must be an int or a tuple of ints, got {argnums!r} ({type(argnums).__name__})")


def _argnums(argnums: ArgNums, nargs: int) -> tuple[int, ...]:
    # every gradient call checks its argnums: an int or a tuple of ints in range, inline
    if type(argnums) is int:
        if 0 <= argnums < nargs:
            return (argnums,)
    elif type(argnums) is tuple:
        for i in argnums:
            if type(i) is not int or not 0 <= i < nargs:
                break
        else:
            if len(set(argnums)) == len(argnums):
                return argnums
    out = []
    for i in _argnums_type(argnums):
        if not -nargs <= i < nargs:
            raise ValueError(
                f"argnums {argnums!r} out of range for a function called with {nargs} argument(s)"
            )
        out.append(i % nargs)
    if len(set(out)) != len(out):
        # each differentiated argument is boxed once: a repeat would take the place of the
        # first box, which would then get a zero gradient
        raise ValueError(f"argnums {argnums!r} names an argument twice: each argument may appear once")
    return tuple(out)


def _substitute(args: Sequence[Any], nums: tuple[int, ...], subs: Sequence[Any]) -> list[Any]:
    new = list(args)
    for i, s in zip(nums, subs):
        new[i] = s
    return new


def _seed(ct: Any, value: Any) -> Any:
    if type(ct) is Tensor:
        if not traced(ct):
            ct = strip(ct)
        _same_library([ct, value])
        if not arrays.is_array(raw(ct)) and arrays.xp_of(raw(value)) is not np:
            # a number that einad.jit staged (weakly typed): placed in the output's library
            # and on its device, as an eager call places a number (`_in_library_of`)
            one = arrays.ones(raw(value), (), dtype_of(value))
            ct = bind(PRIMITIVES["multiply"], (ct, one), {})
    else:
        ct = _in_library_of(value, ct)
    if shape_of(ct) != shape_of(value):
        raise ValueError(f"cotangent has shape {shape_of(ct)} but the output has shape {shape_of(value)}")
    check_cotangent(dtype_of(ct), dtype_of(value))
    return ct


# -- reverse mode ---------------------------------------------------------------------------


def value_and_grad(
    f: Callable[..., Any],
    argnums: ArgNums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[..., Any]:
    """A function returning ``(f(*args), gradient)``; with `has_aux`, ``((value, aux), gradient)``.

    One forward pass records `f`, one reverse pass gives the gradient. Called
    inside another transformation, the results are that transformation's
    Tensors, so gradients nest.

    Args:
        f: A function returning a real scalar (with `has_aux`, a pair ``(scalar, aux)``).
        argnums: The positional argument to differentiate (an int), or several
            (a tuple of ints, giving a tuple of gradients). Each may be a pytree of
            floating-point arrays.
        has_aux: Whether `f` returns an auxiliary value beside the scalar; it is
            passed through undifferentiated.
        holomorphic: Whether `f` is a holomorphic function of complex arguments with a
            complex scalar output (JAX's keyword): the gradient is then ``f'(z)``, the VJP of
            the cotangent 1.
        allow_int: JAX's keyword: integer and boolean leaves among the differentiated
            arguments are held fixed, and their gradient is an array of `FLOAT0` zeros of
            their shape (``jax.dtypes.float0``), instead of a TypeError.

    Returns:
        A function with `f`'s arguments. It raises TypeError when `f`'s output is
        not a real scalar (with `holomorphic`: a complex scalar, and the differentiated
        arguments complex) or a differentiated argument is not floating-point.
    """

    check_callable(f, "value_and_grad")
    _argnums_type(argnums)  # a wrong type fails here, where the transformation is made

    def value_and_grad_f(*args: Any, **kwargs: Any) -> Any:
        if allow_int:
            held = _integers_held(f, argnums, has_aux, holomorphic, args, kwargs)
            if held is not None:
                return held
        trace, out, aux, td, boxed, cts = _reverse(f, argnums, has_aux, args, kwargs, False, holomorphic)
        taken: set[int] = set()
        flat = []
        for b in boxed:  # (a loop: every gradient call)
            flat.append(_grad_out(cts.get(id(b._node)), b._value, taken))
        grads = tree_unflatten(td, flat)
        gradient = grads[0] if isinstance(argnums, (int, np.integer)) else tuple(grads)
        value = _out(value_of(out, trace))
        if has_aux:
            return (value, tree_map(lambda a: _aux_out(a, trace), aux)), gradient
        return value, gradient

    value_and_grad_f.__name__ = f"value_and_grad({getattr(f, '__name__', 'f')})"
    return value_and_grad_f


FLOAT0 = np.dtype([("float0", np.void, 0)])
"""The dtype of the gradient of an integer input under ``allow_int`` (JAX's
``jax.dtypes.float0``): an array of it has a shape and no values."""


def _is_integer_leaf(x: Any) -> bool:
    if isinstance(x, (bool, int, np.integer, np.bool_)):
        return True
    return (type(x) is Tensor or arrays.is_array(x)) and dtype_of(x).kind in "biu"


def _integers_held(
    f: Callable[..., Any],
    argnums: ArgNums,
    has_aux: bool,
    holomorphic: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> tuple[Any, Any] | None:
    """`value_and_grad` with ``allow_int``, where integer leaves are among the differentiated
    arguments: `f` differentiated in its other leaves alone, the integer leaves' gradients
    `FLOAT0` zeros of their shapes. None where there are no integer leaves."""
    nums = _argnums(argnums, len(args))
    flat, td = tree_flatten([args[i] for i in nums])
    fixed = [_is_integer_leaf(x) for x in flat]
    if not any(fixed):
        return None
    free = [x for x, held in zip(flat, fixed) if not held]

    def leaves_of(values: Sequence[Any]) -> list[Any]:
        it = iter(values)
        return [x if held else next(it) for x, held in zip(flat, fixed)]

    def g(*values: Any) -> Any:
        return f(*_substitute(args, nums, tree_unflatten(td, leaves_of(values))), **kwargs)

    if free:
        value, grads = value_and_grad(g, tuple(range(len(free))), has_aux, holomorphic)(*free)
    else:  # nothing to differentiate: the value alone
        value, grads = g(), ()
        if has_aux:
            value = (value[0], value[1])
    zeros = [np.zeros(shape_of(x), FLOAT0) for x, held in zip(flat, fixed) if held]
    it_grad, it_zero = iter(grads), iter(zeros)
    out = tree_unflatten(td, [next(it_zero) if held else next(it_grad) for held in fixed])
    return value, out[0] if isinstance(argnums, (int, np.integer)) else tuple(out)


def _reverse(
    f: Callable[..., Any],
    argnums: ArgNums,
    has_aux: bool,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    lazy: bool,
    holomorphic: bool = False,
) -> tuple[ReverseTrace, Any, Any, TreeDef, list[Tensor], dict[int, Any]]:
    """`value_and_grad`'s forward and reverse pass: (the trace, `f`'s output, its aux, the
    differentiated leaves' treedef, their boxes, each reached box's cotangent by node id).
    With `lazy`, the cotangents are the reverse pass's own (``lazy_leaves``): they may be
    `Structured` and are not yet shaped as their input."""
    # (loops, not comprehensions, and the common argnums inline: every gradient call comes here)
    if type(argnums) is int and 0 <= argnums < len(args):
        nums: tuple[int, ...] = (argnums,)
    elif type(argnums) is tuple and argnums == tuple(range(len(args))):  # (an HVP's passes)
        nums = argnums
    else:
        nums = _argnums(argnums, len(args))
    flat, td = tree_flatten(list(map(args.__getitem__, nums)))  # (the arguments picked without a frame)
    values: list[Any] = []
    numbers = False
    for k, x in enumerate(flat):
        # a floating-point numpy array, or a Tensor of a differentiating trace (an HVP's inner
        # gradient), taken as it is; anything else checked by `_diff_value`
        if (type(x) is np.ndarray and x.dtype.kind in "fc") or (
            type(x) is Tensor and x._trace.__class__ in _DIFFERENTIATING and x.dtype.kind in "fc"
        ):
            values.append(x)
        else:
            values.append(_diff_value(x, functools.partial(_where, nums, td, k)))
            numbers = numbers or isinstance(x, (float, complex, np.generic))
    if numbers:
        values = _numbers_in_library(values, flat, args)
    if len(values) > 1:
        _same_library(values)
    with ReverseTrace() as trace:  # (`tracing`'s context, without the call)
        boxed = []
        for value in values:
            boxed.append(box(value, trace))
        new = list(args)  # (`_substitute`, inline: every gradient call)
        for i, sub in zip(nums, tree_unflatten(td, boxed)):
            new[i] = sub
        out = f(*new, **kwargs)
        if trace.assigned is not None:  # `f` wrote into an argument (``x[i] = v``): take the one given
            boxed = trace.inputs(boxed)
            for i, sub in zip(nums, tree_unflatten(td, boxed)):
                new[i] = sub
        # under ea.jit, a forward of einsums reading einsums is done again from its optimized
        # program, so that the derivative program is made from merged networks (a loop, not
        # `any`: no generator frame on the eager path)
        if not has_aux:
            for x in values:
                if type(x) is Tensor and type(x._trace) is StagingTrace:
                    if x._trace.optimizing and _einsum_reads_einsum(out):
                        out = _through_program(f, new, kwargs)
                    break
    aux = None
    if has_aux:
        out, aux = _split_aux(out)
    if not (type(out) is Tensor or isinstance(out, (np.ndarray, np.generic, int, float))):
        raise TypeError(f"grad needs a function returning a scalar, got {type(out).__name__}")
    # (every gradient call checks its output: the numpy value beneath differentiating traces read
    # directly, else a Tensor's dtype and shape once each)
    v: Any = out._value if type(out) is Tensor and out._trace is trace else None
    while type(v) is Tensor and v._trace.__class__ in _DIFFERENTIATING and not v._trace.dead:
        v = v._value
    if type(v) is np.ndarray or isinstance(v, np.generic):
        kind, shape = v.dtype.kind, v.shape
    elif type(out) is Tensor:
        kind, shape = out.dtype.kind, out.shape
    else:
        kind, shape = dtype_of(out).kind, shape_of(out)
    if kind not in "biufc":
        raise TypeError(f"grad needs a function returning a scalar, got {type(out).__name__}")
    if shape != ():
        raise TypeError(
            f"grad needs a function with a scalar output, got shape {shape}; "
            "use einad.vjp or einad.jacrev for non-scalar outputs"
        )
    if holomorphic:
        _holomorphic_check("grad", "inputs", map(dtype_of, values))
        _holomorphic_check("grad", "outputs", [dtype_of(out)])
    elif kind == "c":
        raise TypeError(
            "grad needs a real-valued output; use holomorphic=True for a holomorphic function "
            "of complex arguments, or einad.vjp for complex outputs"
        )
    cts: dict[int, Any] = {}
    if type(out) is Tensor and out._trace is trace and out._node is not None:
        # the seed: numpy's one beneath differentiating traces (`ones_like`'s, inline)
        seed = [
            np.array(1, dtype=v.dtype)
            if type(v) is np.ndarray or isinstance(v, np.generic)
            else ones_like(out._value)
        ]
        for n, g in backward_pass([out._node], seed, consume=True, lazy_leaves=lazy):
            cts[id(n)] = g
    return trace, out, aux, td, boxed, cts


def _einsum_reads_einsum(out: Any) -> bool:
    """Whether the forward a reverse trace recorded up to `out` has an einsum reading another
    einsum's result (which `passes.merge_einsums` may make one network)."""
    node = out._node if type(out) is Tensor else None
    seen: set[int] = set()
    stack = [] if node is None else [node]
    while stack:
        n = stack.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        contraction = n.prim is einsum_p or n.prim is sliced_einsum_p
        for p in n.parents:
            if p is not None:
                if contraction and (p.prim is einsum_p or p.prim is sliced_einsum_p):
                    return True
                stack.append(p)
    return False


def _through_program(f: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """``f(*args, **kwargs)`` as the replay of its optimized program, for a reverse pass being
    staged (under `ea.jit`): `f` is staged on its own first and `passes.optimize` run on its
    program, so that the einsums a library issues one small piece at a time (quimb's and
    cotengra's pairwise contractions) merge into whole networks, which the replay
    (`program.run_graph`, einsum's ``replay``) hands the reverse trace as one tree each: the
    gradient is one sweep through each tree's kept intermediates instead of one VJP per
    piece. `f` closing over another transformation's tracer is called as it is."""
    flat, tree = tree_flatten((list(args), kwargs))
    # only traced values are the program's inputs: a plain number or array argument (a count,
    # a shape, a jitted function's static argument) stays what `f` was given, which its Python
    # may branch on or shape with, as it did in the forward just traced
    traced = [k for k, x in enumerate(flat) if type(x) is Tensor]

    def call(*leaves: Any) -> Any:
        a, kw = tree_unflatten(tree, put_leaves(flat, traced, leaves))
        return f(*a, **kw)

    leaves = [flat[k] for k in traced]
    try:
        graph, _ = stage(call, leaves, tree_flatten(leaves)[1], weak_scalars=True, optimizing=True)
    except ClosedOverTracer:
        return f(*args, **kwargs)
    assert graph.out_tree is not None
    return tree_unflatten(graph.out_tree, run_graph(optimize(graph), leaves))


def _where(nums: tuple[int, ...], td: TreeDef, k: int) -> str:
    """Name flat leaf `k` of the differentiated arguments: ``argument 1``, or ``argument 0['w']``
    in a pytree (only when an error names it)."""
    paths = [p for i, c in zip(nums, td.children) for p in c.leaf_paths(str(i))]
    return f"argument {paths[k]}"


def grad(
    f: Callable[..., Any],
    argnums: ArgNums = 0,
    has_aux: bool = False,
    holomorphic: bool = False,
    allow_int: bool = False,
) -> Callable[..., Any]:
    """The gradient of a scalar-valued `f` with respect to the arguments `argnums`.

    Args:
        f: A function returning a real scalar (with `has_aux`, a pair ``(scalar, aux)``).
        argnums: The positional argument to differentiate (an int), or several
            (a tuple of ints, giving a tuple of gradients). Each may be a pytree of
            floating-point arrays.
        has_aux: Whether `f` returns an auxiliary value beside the scalar.
        holomorphic: Whether `f` is holomorphic in complex arguments, with a complex scalar
            output: the gradient is then ``f'(z)`` (JAX's keyword).
        allow_int: Integer and boolean leaves of the differentiated arguments are held fixed,
            with `FLOAT0` zeros as their gradient (JAX's keyword; see `value_and_grad`).

    Returns:
        A function with `f`'s arguments returning the gradient, shaped like the
        differentiated arguments (with `has_aux`, ``(gradient, aux)``). At top
        level the gradient is arrays of the inputs' library; inside another transformation, Tensors.
    """
    check_callable(f, "grad")
    vg = value_and_grad(f, argnums, has_aux, holomorphic, allow_int)

    def grad_f(*args: Any, **kwargs: Any) -> Any:
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    grad_f.__name__ = f"grad({getattr(f, '__name__', 'f')})"
    return grad_f


def vjp(f: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """``(f(*primals), vjp_fn)``; ``vjp_fn(cotangent)`` returns one cotangent per primal.

    `f` runs once; `vjp_fn` may be called any number of times, each call one
    reverse pass.

    Args:
        f: The function; its output may be any pytree of arrays.
        *primals: The point to differentiate at, one value (or pytree) per argument of `f`.
        has_aux: Whether `f` returns a pair ``(output, aux)`` (JAX's keyword): the aux is
            returned as computed, not differentiated.

    Returns:
        `f`'s output, and the function pulling a cotangent of that output's
        structure back to a tuple of cotangents, one per primal; with `has_aux`,
        ``(output, vjp_fn, aux)``.
    """
    check_callable(f, "vjp", "einad.vjp(f, *primals)")
    flat, td = tree_flatten(list(primals))
    values = [_diff_value(x, f"primal leaf {k}") for k, x in enumerate(flat)]
    if any(isinstance(x, (float, complex, np.generic)) for x in flat):
        values = _numbers_in_library(values, flat, flat)
    _same_library(values)
    with tracing(ReverseTrace()) as trace:
        boxed = [box(v, trace) for v in values]
        out = f(*tree_unflatten(td, boxed))
        boxed = trace.inputs(boxed)  # (the primals as given, where `f` wrote into one)
    if has_aux:
        out, aux = _split_aux(out)
    out_flat, out_td = tree_flatten(out)

    def vjp_fn(cotangent: Any) -> tuple[Any, ...]:
        ct_flat, ct_td = tree_flatten(cotangent)
        if ct_td != out_td:
            raise ValueError(f"cotangent structure {ct_td} does not match the output's {out_td}")
        outs: list[Node] = []
        seeds: list[Any] = []
        for o, c in zip(out_flat, ct_flat):
            seed = _seed(c, o)
            if type(o) is Tensor and o._trace is trace and o._node is not None:
                outs.append(o._node)
                seeds.append(seed)
        cts = {id(n): g for n, g in backward_pass(outs, seeds)} if outs else {}
        taken = {id(_buffer(strip(c))) for c in ct_flat}
        return tuple(tree_unflatten(td, [_grad_out(cts.get(id(b._node)), b._value, taken) for b in boxed]))

    primal_out = tree_unflatten(out_td, [_out(value_of(o, trace)) for o in out_flat])
    if has_aux:
        return primal_out, vjp_fn, tree_map(lambda a: _aux_out(a, trace), aux)
    return primal_out, vjp_fn


# -- forward mode ---------------------------------------------------------------------------


def _tangent_pairs(primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[Any, list[tuple[Any, Any]]]:
    """The primals' tree structure, and each primal leaf's value with its tangent checked against
    it (`jvp` and forward over reverse take their inputs alike).

    Raises:
        ValueError: If the tangents' structure or shapes do not match the primals'.
    """
    p_flat, p_td = tree_flatten(list(primals))
    t_flat, t_td = tree_flatten(list(tangents))
    if p_td != t_td:
        raise ValueError(f"tangents structure {t_td} does not match the primals' {p_td}")
    values, numbers, held = [], False, None
    for k, p in enumerate(p_flat):  # (a loop: every forward-mode call)
        if type(t_flat[k]) is np.ndarray and t_flat[k].dtype == FLOAT0:  # JAX's: an integer held fixed
            held = (held or set()) | {k}
            values.append(_held_integer(p, t_flat[k], k))
            continue
        values.append(_diff_value(p, f"primal leaf {k}"))
        numbers = numbers or isinstance(p, (float, complex, np.generic))
    if numbers:
        values = _numbers_in_library(values, p_flat, p_flat)
    pairs = []
    for k, (v, t) in enumerate(zip(values, t_flat)):
        pairs.append((v, None) if held and k in held else (v, _tangent_in(t, v)))
    _same_library([v for v, t in pairs if t is not None])
    return p_td, pairs


def _held_integer(p: Any, t: Any, k: int) -> Any:
    """An integer or boolean primal leaf whose tangent is `FLOAT0` (JAX's ``float0``): a constant
    of the forward pass, as JAX holds it.

    Raises:
        TypeError: If the primal is floating-point (its tangent must be of its dtype).
        ValueError: If the tangent's shape is not the primal's.
    """
    v = strip(p) if type(p) is Tensor else p if arrays.is_array(p) else np.asarray(p)
    if dtype_of(v).kind not in "iub":
        raise TypeError(
            f"primal leaf {k} of dtype {dtype_of(v)} has a float0 tangent: float0 tangents are for "
            "integer and boolean primals (a floating-point primal's tangent has its dtype)"
        )
    if shape_of(t) != shape_of(v):
        raise ValueError(f"tangent has shape {shape_of(t)} but its primal has shape {shape_of(v)}")
    return p


def jvp(
    f: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False
) -> tuple[Any, ...]:
    """``(f(*primals), J·tangents)``: forward mode, one pass.

    Args:
        f: The function; its output may be any pytree of arrays.
        primals: A tuple (or list) of `f`'s arguments, each a value or a pytree.
        tangents: A tuple of the same structure: the direction to push forward.
        has_aux: Whether `f` returns a pair ``(output, aux)`` (JAX's keyword): the aux is
            returned as computed, without tangent.

    Returns:
        `f`'s output, and its directional derivative along `tangents` (the same structure);
        with `has_aux`, ``(output, derivative, aux)``.

    Raises:
        TypeError: If `primals` or `tangents` is not a tuple or list.
        ValueError: If the tangents' structure or shapes do not match the primals'.
    """
    check_callable(f, "jvp", "einad.jvp(f, primals, tangents)")
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise TypeError("jvp takes primals and tangents as tuples, e.g. jvp(f, (x,), (v,))")
    p_td, pairs = _tangent_pairs(primals, tangents)
    with tracing(ForwardTrace()) as trace:
        boxed = [v if t is None else box(v, trace, t) for v, t in pairs]
        out = f(*tree_unflatten(p_td, boxed))
    if has_aux:
        out, aux = _split_aux(out)
    out_flat, out_td = tree_flatten(out)
    primal_out, tangent_out = [], []
    for o in out_flat:
        if type(o) is Tensor and o._trace is trace:
            primal_out.append(_out(o._value))
            tangent_out.append(_out(o._tangent))
        else:
            primal_out.append(_out(o))
            tangent_out.append(_out(_zeros_for(o)))
    if has_aux:
        aux = tree_map(lambda a: _aux_out(a, trace), aux)
        return tree_unflatten(out_td, primal_out), tree_unflatten(out_td, tangent_out), aux
    return tree_unflatten(out_td, primal_out), tree_unflatten(out_td, tangent_out)


def linearize(f: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """``(f(*primals), f_jvp)``, JAX's linearize: `f`'s JVP at `primals` as a function of the
    tangents alone, evaluated once.

    `f` runs once, staged with its tangents as the program's only inputs: everything that depends
    on the primals alone (the values, and the local derivatives the rules read) is computed then
    and kept as the program's constants, so each ``f_jvp(*tangents)`` runs only the linear part
    (``jvp(f, primals, tangents)`` would recompute `f` each time). `f_jvp` takes tangents of the
    primals' structure, shapes and dtypes, and is itself traceable (vmap it for a Jacobian's
    columns, differentiate it, jit it).

    Args:
        f: The function; its output may be any pytree of arrays.
        *primals: The point: arrays, numbers or pytrees of them (floating point or complex).
        has_aux: Whether `f` returns ``(output, aux)``; the aux is returned third.

    Returns:
        ``(output, f_jvp)``, or ``(output, f_jvp, aux)`` with `has_aux`.

    Raises:
        ValueError: From `f_jvp`, if the tangents' structure or shapes are not the primals'.
    """
    check_callable(f, "linearize", "einad.linearize(f, *primals)")
    p_flat, p_td = tree_flatten(list(primals))
    values = [_diff_value(p, f"primal leaf {k}") for k, p in enumerate(p_flat)]
    zeros = [zeros_like(np.asarray(v) if isinstance(v, (bool, int, float, complex)) else v) for v in values]

    def push(*tangent_leaves: Any) -> Any:
        return jvp(f, tuple(primals), tuple(tree_unflatten(p_td, list(tangent_leaves))), has_aux=has_aux)

    graph, seen = stage(push, zeros, tree_flatten(zeros)[1], optimizing=True)
    out_tree = graph.out_tree
    assert out_tree is not None
    outputs = tree_unflatten(out_tree, seen)
    program = optimize(graph)

    def f_jvp(*tangents: Any) -> Any:
        t_flat, t_td = tree_flatten(list(tangents))
        if t_td != p_td:
            raise ValueError(f"tangents structure {t_td} does not match the primals' {p_td}")
        leaves = [_tangent_in(t, z) for t, z in zip(t_flat, zeros)]
        return tree_unflatten(out_tree, run_graph(program, leaves))[1]

    if has_aux:
        return outputs[0], f_jvp, outputs[2]
    return outputs[0], f_jvp


def _tangent_in(t: Any, v: Any) -> Any:
    """The tangent `t` of the primal value `v`, checked, in `v`'s library and dtype."""
    if type(t) is np.ndarray:
        # the common case, checked inline: a numpy tangent of a primal over numpy (under other
        # transformations too: an HVP's), of its shape, real for a real one
        base = v
        while type(base) is Tensor:
            base = base._value
        if type(base) is np.ndarray and t.shape == (base.shape if v is base else v.shape):
            kind, dt = t.dtype.kind, base.dtype
            if kind == "f" or (kind == "c" and dt.kind == "c"):
                return t if t.dtype == dt else t.astype(dt)
    if traced(t):
        _same_library([t, v])
    else:
        t = _in_library_of(v, strip(t))
    if shape_of(t) != shape_of(v) and not shapes_alike(shape_of(t), shape_of(v)):
        raise ValueError(f"tangent has shape {shape_of(t)} but its primal has shape {shape_of(v)}")
    kind, primal_kind = dtype_of(t).kind, dtype_of(v).kind
    if kind not in "fc" or (kind == "c" and primal_kind != "c"):
        raise TypeError(
            f"a tangent of dtype {dtype_of(t)} for a primal of dtype {dtype_of(v)}: tangents are "
            "floating-point (complex only for a complex primal), e.g. 1.0 rather than 1"
        )
    if type(t) is Tensor:
        return astype(t, dtype_of(v))
    return arrays.cast(t, dtype_of(v))


# -- second order --------------------------------------------------------------------------------


def _lazy_grads(f: Callable[..., Any], args: Sequence[Any]) -> tuple[TreeDef, list[tuple[Any, Any]]]:
    """The gradient of `f` in every argument as its reverse pass leaves it: (the arguments'
    treedef, one (cotangent, input value) pair per leaf). A cotangent may be None (unused
    input), `Structured` (an `einsum.Pending` contraction not yet done) or of another shape or
    dtype than its input (`_grad_out` makes it one)."""
    every = tuple(range(len(args)))
    _, _, _, td, boxed, cts = _reverse(f, every, False, tuple(args), {}, lazy=True)
    pairs = []
    for b in boxed:
        pairs.append((cts.get(id(b._node)), b._value))
    return td, pairs


def _gradients(f: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``grad(f, every argument)(*args)``: the outer pass of a reverse-mode HVP, without the
    public wrappers (`grad`, `value_and_grad`) and the value they return."""
    _, _, _, td, boxed, cts = _reverse(f, tuple(range(len(args))), False, args, {}, lazy=False)
    taken: set[int] = set()
    grads = []
    for b in boxed:
        grads.append(_grad_out(cts.get(id(b._node)), b._value, taken))
    return tuple(tree_unflatten(td, grads))


def _hvp_forward_over_reverse(
    f: Callable[..., Any], primals: tuple[Any, ...], tangents: tuple[Any, ...]
) -> tuple[Any, ...]:
    """``jvp(grad(f), primals, tangents)``'s tangent alone: a cotangent the reverse pass leaves
    as a pending contraction gives its tangent by the einsum's JVP, and the primal gradient
    (the contraction itself, which the HVP discards) is never computed."""
    p_td, pairs = _tangent_pairs(primals, tangents)
    with tracing(ForwardTrace()) as trace:
        boxed = [v if t is None else box(v, trace, t) for v, t in pairs]
        td, grads = _lazy_grads(f, tree_unflatten(p_td, boxed))
        taken: set[int] = set()
        out = []
        for g, like in grads:
            if type(g) is Pending:
                t = g.tangent(trace)
            else:
                g = _grad_out(dense(g), like, taken)
                t = g._tangent if type(g) is Tensor and g._trace is trace else None
            out.append(_out(_zeros_for(like) if t is None else t))
    return tuple(tree_unflatten(td, out))


def _inner_with(grads: list[tuple[Any, Any]], tangents: Sequence[Any]) -> float | Tensor:
    """``<gradient, tangents>`` from `_lazy_grads`' cotangents: a pending contraction meets its
    tangent inside the contraction (`einsum.Pending.inner`), so the gradient itself is never
    formed (reverse over reverse reads only this inner product)."""
    total: Any = None
    flat = tangents  # (numpy arrays, the common case, are their own leaves: no tree_flatten)
    for t in tangents:
        if type(t) is not np.ndarray:
            flat = tree_flatten(list(tangents))[0]
            break
    for (g, like), t in zip(grads, flat):
        term: Any
        if g is None:
            continue
        if type(g) is Pending:
            r = like
            while type(r) is Tensor:
                r = r._value
            if type(t) is np.ndarray and type(r) is np.ndarray:  # (numpy's tangent of a numpy input)
                if t.shape != r.shape:
                    raise ValueError(f"tangent has shape {t.shape} but its primal has shape {r.shape}")
                term = g.inner(t)
                if g.dtype.kind == "c" or t.dtype.kind == "c":
                    term = real(term)
                total = term if total is None else total + term
                continue
            term = g.inner(t if traced(t) else _in_library_of(like, strip(t)))
            if dtype_of(term).kind == "c":
                term = real(term)
        else:
            g = _grad_out(dense(g), like, set())
            term = linear.sum(real(bind(PRIMITIVES["multiply"], (g, t), {})))
        total = term if total is None else total + term
    out: float | Tensor = 0.0 if total is None else total
    return out


def hvp(
    f: Callable[..., Any],
    primals: Sequence[Any],
    tangents: Sequence[Any],
    mode: Literal["fwd-over-rev", "rev-over-fwd", "rev-over-rev"] = "fwd-over-rev",
) -> tuple[Any, ...]:
    """Hessian-vector product of a scalar `f`: one entry per primal.

    `mode` picks the composition: "fwd-over-rev" (jvp of grad), "rev-over-fwd"
    (grad of jvp) or "rev-over-rev" (grad of <grad f, v>). None forms the Hessian.

    Args:
        f: A function returning a real scalar.
        primals: `f`'s arguments, the point of the Hessian.
        tangents: The vector, one entry per primal, each of its primal's shape.
        mode: The composition of the two passes.

    Returns:
        H·v as a tuple with one entry per primal.

    Raises:
        ValueError: If `mode` is not one of the three names.
    """
    check_callable(f, "hvp", "einad.hvp(f, primals, tangents)")
    primals, tangents = tuple(primals), tuple(tangents)
    if mode == "fwd-over-rev":
        return _hvp_forward_over_reverse(f, primals, tangents)
    if mode == "rev-over-fwd":
        return _gradients(lambda *p: jvp(f, p, tangents)[1], primals)
    if mode == "rev-over-rev":
        return _gradients(lambda *p: _inner_with(_lazy_grads(f, p)[1], tangents), primals)
    raise ValueError(f"unknown hvp mode {mode!r}: use 'fwd-over-rev', 'rev-over-fwd' or 'rev-over-rev'")


# -- Jacobians ---------------------------------------------------------------------------------
#
# One stacked pass instead of one pass per row or column: `vmap` pushes a whole
# identity basis of cotangents (jacrev) or tangents (jacfwd) through the rules
# at once, so an einsum in `f` costs one contraction with an extra index.


def _basis(shape: Shape, dtype: DTypeLike, like: Any) -> Array:
    """The identity basis of `shape`, stacked: ``(n,) + shape``, in `like`'s library and device."""
    n = math.prod(shape)
    like = raw(like)
    xp = arrays.xp_of(like)
    if xp is np:
        return np.eye(n, dtype=dtype).reshape((n,) + tuple(shape))
    eye = xp.eye(n, dtype=arrays.lib_dtype(xp, np.dtype(dtype)), device=arrays.device(like))
    out: Array = xp.reshape(eye, (n,) + tuple(shape))
    return out


def _pick(argnums: ArgNums, tree: list[Any]) -> Any:
    return tree[0] if isinstance(argnums, (int, np.integer)) else tuple(tree)


def jacrev(
    f: Callable[..., Any], argnums: ArgNums = 0, has_aux: bool = False, holomorphic: bool = False
) -> Callable[..., Any]:
    """The Jacobian by reverse mode, all rows in one batched pass; shape ``out.shape + in.shape``.

    Args:
        f: The function; its inputs and output may be pytrees of arrays.
        argnums: The positional argument to differentiate (an int), or several
            (a tuple of ints, giving a tuple of Jacobians).
        has_aux: Whether `f` returns a pair ``(output, aux)`` (JAX's keyword); the aux is
            returned beside the Jacobian, not differentiated.
        holomorphic: JAX's keyword: the inputs and outputs must then be complex. (A complex
            input gives the holomorphic Jacobian either way: see docs/guarantees.md.)

    Returns:
        A function with `f`'s arguments returning the Jacobian: for each output
        leaf, an array of shape ``out.shape + in.shape`` per differentiated input
        (with `has_aux`, ``(jacobian, aux)``).
    """
    check_callable(f, "jacrev")

    _argnums_type(argnums)

    def jac_f(*args: Any) -> Any:
        nums = _argnums(argnums, len(args))
        diff = _values([args[i] for i in nums], args)
        out, pullback, *aux = vjp(lambda *d: f(*_substitute(args, nums, d)), *diff, has_aux=has_aux)
        out_flat, out_td = tree_flatten(out)
        in_flat, in_td = tree_flatten(diff)
        if holomorphic:
            _holomorphic_check("jacrev", "inputs", map(dtype_of, in_flat))
            _holomorphic_check("jacrev", "outputs", map(dtype_of, out_flat))
        per_out = []
        for k, o in enumerate(out_flat):
            o_shape = shape_of(o)
            zeros = [_zeros_for(z) for z in out_flat]

            def pull(ct: Any, k: int = k, zeros: list[Array] = zeros) -> list[Any]:
                cts = list(zeros)
                cts[k] = ct
                return list(pullback(tree_unflatten(out_td, cts)))

            rows = _stacked(pull, o, in_flat)
            if dtype_of(o).kind == "c" and any(dtype_of(x).kind != "c" for x in in_flat):
                # a real input's cotangent is the real part of what flows back, Re(Jᵀu): the
                # rows pulled from e_k are Re J only; those from i·e_k are -Im J, so together
                # they give the complex Jacobian, as jacfwd's columns do
                turned = _stacked(lambda ct: pull(ct * 1j), o, in_flat)
                rows = [
                    r if dtype_of(x).kind == "c" else r - 1j * t for r, t, x in zip(rows, turned, in_flat)
                ]
            blocks = [_out(reshape(r, o_shape + shape_of(x))) for r, x in zip(rows, in_flat)]
            per_out.append(_pick(argnums, tree_unflatten(in_td, blocks)))
        jacobian = tree_unflatten(out_td, per_out)
        return (jacobian, aux[0]) if has_aux else jacobian

    return jac_f


def _stacked(fn: Callable[[Any], Any], basis_of: Any, results: list[Any]) -> list[Any]:
    """``fn`` applied to every basis vector of `basis_of`'s shape at once: leaves of shape
    (n, ...), one per entry of `results` (shaped like it)."""
    shape = shape_of(basis_of)
    n = math.prod(shape)
    if n == 0:
        return [arrays.zeros(raw(r), (0,) + shape_of(r), dtype_of(r)) for r in results]
    return tree_flatten(stacked(fn)(_basis(shape, dtype_of(basis_of), basis_of)))[0]


def _values(tree: Any, context: Any) -> Any:
    """`tree`'s numbers as 0-d arrays: of the library of `context`'s arrays (`_numbers_in_library`)."""
    flat, td = tree_flatten(tree)
    values = [x if type(x) is Tensor or arrays.is_array(x) else np.asarray(x) for x in flat]
    return tree_unflatten(td, _numbers_in_library(values, flat, context))


def jacfwd(
    f: Callable[..., Any], argnums: ArgNums = 0, has_aux: bool = False, holomorphic: bool = False
) -> Callable[..., Any]:
    """The Jacobian by forward mode, all columns in one batched pass; shape ``out.shape + in.shape``.

    Args:
        f: The function; its inputs and output may be pytrees of arrays.
        argnums: The positional argument to differentiate (an int), or several
            (a tuple of ints, giving a tuple of Jacobians).
        has_aux: Whether `f` returns a pair ``(output, aux)`` (JAX's keyword); the aux is
            returned beside the Jacobian, not differentiated.
        holomorphic: JAX's keyword: the inputs and outputs must then be complex. (A complex
            input gives the holomorphic Jacobian either way: see docs/guarantees.md.)

    Returns:
        A function with `f`'s arguments returning the Jacobian: for each output
        leaf, an array of shape ``out.shape + in.shape`` per differentiated input
        (with `has_aux`, ``(jacobian, aux)``).
    """
    check_callable(f, "jacfwd")

    _argnums_type(argnums)

    def jac_f(*args: Any) -> Any:
        nums = _argnums(argnums, len(args))
        diff = _values([args[i] for i in nums], args)
        in_flat, in_td = tree_flatten(diff)
        if holomorphic:
            _holomorphic_check("jacfwd", "inputs", map(dtype_of, in_flat))

        def g(*d: Any) -> Any:
            return f(*_substitute(args, nums, d))

        # One batched jvp per input leaf; its primal output gives the output's
        # structure, so f runs no extra time just to learn it.
        out_td: Any = None
        out_meta: list[tuple[Shape, Any]] = []
        cols: list[list[Any] | None] = []
        aux: Any = None
        for j, x in enumerate(in_flat):
            if math.prod(shape_of(x)) == 0:
                cols.append(None)  # no columns to push
                continue

            def push(t: Any, j: int = j) -> Any:
                ts = [_zeros_for(z) for z in in_flat]
                ts[j] = t
                return list(jvp(g, tuple(diff), tuple(tree_unflatten(in_td, ts)), has_aux=has_aux))

            # (the aux, computed from the primals only, comes out once: not along the batch)
            pushed = stacked(push, out_axes=[0, 0, None] if has_aux else 0)(
                _basis(shape_of(x), dtype_of(x), x)
            )
            primal, tangent = pushed[:2]
            if out_td is None:
                rows, out_td = tree_flatten(primal)  # each leaf broadcast along the batch
                out_meta = [(shape_of(o)[1:], dtype_of(o)) for o in rows]
                aux = tree_map(lambda a: _aux_out(a, None), pushed[2]) if has_aux else None
            cols.append(tree_flatten(tangent)[0])
        if out_td is None:  # no input has an element: run f once for the output's structure
            out = g(*diff)
            if has_aux:
                out, aux = _split_aux(out)
            out_flat, out_td = tree_flatten(out)
            out_meta = [(shape_of(o), dtype_of(o)) for o in out_flat]
        per_out = []
        for k, (o_shape, o_dtype) in enumerate(out_meta):
            blocks = []
            for j, x in enumerate(in_flat):
                col = cols[j]
                if col is None:
                    blocks.append(_out(arrays.zeros(raw(x), o_shape + shape_of(x), o_dtype)))
                    continue
                c = moveaxis(col[k], 0, -1)  # out.shape + (in.size,)
                blocks.append(_out(reshape(c, o_shape + shape_of(x))))
            per_out.append(_pick(argnums, tree_unflatten(in_td, blocks)))
        if holomorphic:
            _holomorphic_check("jacfwd", "outputs", [dtype for _, dtype in out_meta])
        jacobian = tree_unflatten(out_td, per_out)
        return (jacobian, aux) if has_aux else jacobian

    return jac_f


jacobian = jacrev


def hessian(
    f: Callable[..., Any], argnums: ArgNums = 0, has_aux: bool = False, holomorphic: bool = False
) -> Callable[..., Any]:
    """The Hessian, ``jacfwd(jacrev(f))``: shape ``in.shape + in.shape``.

    Args:
        f: A function returning a real scalar.
        argnums: The positional argument (or arguments) to differentiate twice.
        has_aux: Whether `f` returns a pair ``(scalar, aux)`` (JAX's keyword); the aux is
            returned beside the Hessian.
        holomorphic: JAX's keyword, passed to both Jacobians.

    Returns:
        A function with `f`'s arguments returning the Hessian (with `has_aux`,
        ``(hessian, aux)``).
    """
    check_callable(f, "hessian")
    return jacfwd(jacrev(f, argnums, has_aux, holomorphic), argnums, has_aux, holomorphic)


# -- the reverse pass ----------------------------------------------------------------------------
# What `vjp` and the imperative `Tensor.backward` run: the cotangents pulled back through the
# recorded nodes, newest first.


def backward_pass(
    outs: Sequence[Node],
    seeds: Sequence[Any],
    consume: bool = False,
    record_in: Trace | None = None,
    lazy_leaves: bool = False,
) -> list[tuple[Node, Any]]:
    """Run the reverse pass from the nodes `outs` (of one reverse trace) with `seeds`.

    Returns ``[(node, cotangent), ...]`` for the inputs reached, and for the
    nodes reached that keep a Tensor to fill (`Node.tensor`: `retain_grad`).
    Cotangents are einad values, so an enclosing trace records this whole
    computation. Nodes are visited newest first (a heap on their creation
    numbers), which is a reverse topological order, and only nodes that a
    cotangent reaches are visited; the walk is iterative. A node's hooks
    (`Tensor.register_hook`) run on its summed cotangent before its rule does.

    With `consume`, each node lets go of its saved values once its rule has run,
    so forward intermediates are freed as the pass moves back; reaching a node
    freed so by an earlier pass is a RuntimeError (PyTorch's ``retain_graph``).
    With `record_in` (the trace that recorded the nodes: ``backward(create_graph=True)``),
    the rules read each saved value as a Tensor of that trace linked to the node
    that made it, so the trace records the pass and the cotangents are
    differentiable again.

    The cotangents a node receives are summed as they arrive (`_accumulate`):
    `Structured` ones stay structured while they can, and are made dense only
    when the node's rule runs or the node is a leaf. With `lazy_leaves`, einsum's VJP
    defers its contractions (`einsum.Pending`) and an input's cotangent is returned
    as it is, structured or not (a Hessian-vector product reads only part of it).
    """
    cts: dict[Node, Any] = {}  # (nodes hash by identity)
    owned: set[Node] = set()  # nodes whose sum so far is a buffer only this pass has seen
    heap: list[tuple[int, Node]] = []

    def send(node: Node, ct: Any) -> None:  # add `ct` to what `node` has received
        if node in cts:
            cts[node], mine = _accumulate(cts[node], node in owned, ct)
            if mine:
                owned.add(node)
            else:
                owned.discard(node)
        else:
            cts[node] = ct
            heapq.heappush(heap, (-node.seq, node))

    for node, s in zip(outs, seeds):
        if node in cts:
            send(node, s)
        else:  # (`send`'s first cotangent, inline)
            cts[node] = s
            heapq.heappush(heap, (-node.seq, node))
    reached = []
    push, pop, add = heapq.heappush, heapq.heappop, np.add
    # the rules run quietly (see QuietRules); with `lazy_leaves`, einsum's VJP defers
    with deferring() if lazy_leaves else QuietRules():
        while heap:
            node = pop(heap)[1]
            g = cts.pop(node)
            if lazy_leaves and node.prim is None and not node.hooks:
                reached.append((node, g))
                continue
            if type(g) is not np.ndarray and isinstance(g, Structured):
                g = g.dense()
            owned.discard(node)  # the sum leaves the pass (a rule may hand it to several parents)
            if node.hooks:
                g = _run_hooks(node.hooks, g, record_in is not None)
            prim = node.prim
            if prim is None or node.tensor is not None:
                reached.append((node, g))
                if prim is None:
                    continue
            if node.vals is None:
                raise _freed(prim.name)
            assert node.params is not None
            needed = node.needed
            rule = prim.structured_vjp or prim.vjp
            assert rule is not None  # (a reverse trace records no node of a primitive without one)
            vals, ans = (node.vals, node.ans) if record_in is None else _recorded(node, record_in, needed)
            contribs = rule(g, ans, vals, node.params, needed)
            if consume:
                node.vals = node.ans = None
            for p, c in zip(node.parents, contribs):
                if p is None or c is None:
                    continue
                acc = cts.get(p)
                if acc is None:  # the first cotangent to reach `p` (`send`, inline: the common case)
                    cts[p] = c
                    push(heap, (-p.seq, p))
                elif type(acc) is np.ndarray and type(c) is np.ndarray:  # `_accumulate`'s numpy case, inline
                    if p in owned and c.dtype == acc.dtype and c.shape == acc.shape:
                        add(acc, c, out=acc)
                    else:
                        cts[p] = out = add(acc, c)
                        if type(out) is np.ndarray:
                            owned.add(p)
                        else:
                            owned.discard(p)
                else:
                    send(p, c)
    return reached


def _freed(name: str) -> RuntimeError:
    return RuntimeError(
        f"backward through the graph a second time: an earlier backward() freed the values that the "
        f"derivative of {name!r} reads (as PyTorch does, the first backward() frees them unless it is "
        "called as backward(retain_graph=True)). Pass retain_graph=True to every backward() but the "
        "last through the same graph, or compute the result again"
    )


def _recorded(node: Node, trace: Trace, needed: list[bool]) -> tuple[Sequence[Any], Any]:
    """The values `node`'s rule reads, as Tensors of `trace` linked to the nodes that made them
    (an operand to its parent, the result to `node` itself): the rule's operations on them are
    recorded by `trace`, differentiably in every value. A residual rule's residuals are
    computed again from the operands, so that they are linked too."""
    assert node.vals is not None and node.prim is not None
    vals = [
        v if p is None or isinstance(v, Meta) else _box(v, trace, p, None)
        for v, p in zip(node.vals, node.parents)
    ]
    residual = node.prim.residual
    if residual is not None:
        if any(isinstance(v, Meta) for v in vals):
            raise NotImplementedError(
                f"create_graph through {node.prim.name!r}: its node did not keep its operands"
            )
        return vals, residual(vals, node.params or {}, needed)[1]
    ans = node.ans if isinstance(node.ans, Meta) else _box(node.ans, trace, node, None)
    return vals, ans


def _run_hooks(hooks: list[Hook], g: Any, create_graph: bool) -> Any:
    """`g` passed through each hook in turn (`Tensor.register_hook`): a hook sees the gradient as
    ``.grad`` would hold it, and what it returns (unless None) replaces the gradient."""
    for h in list(hooks):  # a hook may remove itself
        out = h.fn(_as_grad(g, h.shape, h.dtype, create_graph, readonly=True))
        if out is None:
            continue
        if type(out) is not Tensor and not arrays.is_array(out):
            out = _in_library_of(g, out)
        if shape_of(out) != h.shape:
            raise ValueError(
                f"the hook {getattr(h.fn, '__name__', h.fn)!r} returned a gradient of shape {shape_of(out)} "
                f"for a tensor of shape {h.shape}"
            )
        g = out if create_graph and type(out) is Tensor and out._trace is not None else strip(out)
    return g


def _as_grad(g: Any, shape: Shape, dtype: np.dtype[Any], create_graph: bool, readonly: bool = False) -> Any:
    """A cotangent as ``.grad`` holds it, of the given shape and dtype: an array of its library
    (a new one, or with `readonly` a read-only view for numpy), or with `create_graph` an einad
    Tensor whose operations are recorded."""
    if create_graph:
        if shape_of(g) != shape:
            g = broadcast_to(g, shape)
        if dtype_of(g) != dtype:
            g = astype(g, dtype)
        if type(g) is Tensor:
            return g
        g = strip(g)
        return _box(np.array(g) if arrays.is_numpy(g) else g, None, None, None)
    g = arrays.detached(strip(g))  # (torch operands that require grad make torch record einad's ops)
    xp = arrays.xp_of(g)
    if xp is np:
        g = arrays.cast(np.asarray(g), dtype)
        if g.shape != shape:
            g = np.broadcast_to(g, shape)
        if readonly:
            g = g.view()
            g.flags.writeable = False
            return g
        return np.array(g)
    g = arrays.cast(g, dtype)
    if tuple(g.shape) != shape:
        g = xp.broadcast_to(g, shape)
    return g if readonly else xp.asarray(g, copy=True)


def _numpy_source(s: Structured) -> bool:
    """Whether a structured cotangent holds numpy data (only those are added into numpy buffers)."""
    x = strip(getattr(s, "x", None))
    return x is None or not arrays.is_array(x) or arrays.is_numpy(x)


def _untraced(x: Any) -> Any:
    """The plain value of `x` if no trace holds it, else None."""
    if type(x) is Tensor:
        return x._value if x._trace is None else None
    return x


def _accumulate(acc: Any, mine: bool, ct: Any) -> tuple[Any, bool]:
    """``acc + ct``, and whether the sum is a buffer the reverse pass owns.

    `mine` says that `acc` is such a buffer: allocated by the pass and handed to
    no one (no rule, user or node holds it), so it may be added into in place.
    Any other array is never written. Two `Structured` cotangents of a kind add
    their small sources; one added to a plain dense array is added into an owned
    copy (or into `acc` itself when `mine`), which costs one buffer where a dense
    spread and a sum would cost two. Traced values are added with einad
    operations, the structured one made dense first.
    """
    if isinstance(acc, Structured):
        if isinstance(ct, Structured):
            s = acc.plus(ct)
            if s is not None:
                return s, False
            if acc.traced or ct.traced or not _numpy_source(acc):
                acc, mine = acc.dense(), False  # (another library's arrays: dense, then added)
            else:  # two kinds: both into one fresh buffer (ct joins below)
                buf = np.zeros(acc.shape, np.result_type(acc.dtype, ct.dtype))
                acc.add_into(buf)
                acc, mine = buf, True
        else:
            acc, mine, ct = ct, False, acc
    a = _untraced(acc)
    if isinstance(ct, Structured):
        if type(a) is np.ndarray and a.shape == ct.shape and not ct.traced and _numpy_source(ct):
            dt = np.result_type(a.dtype, ct.dtype)
            buf = a if mine and a.dtype == dt else np.array(a, dtype=dt)
            ct.add_into(buf)
            return buf, True
        ct = ct.dense()
    c = _untraced(ct)
    if a is None or c is None:
        return bind(PRIMITIVES["add"], (acc, ct), {}), False
    if mine and type(c) is np.ndarray and c.dtype == a.dtype and c.shape == a.shape:
        np.add(a, c, out=a)
        return a, True
    if type(a) is np.ndarray or type(c) is np.ndarray:
        out = np.add(a, c)
        return out, type(out) is np.ndarray
    if arrays.is_array(a) or arrays.is_array(c):  # another library's arrays: its add, never in place
        return PRIMITIVES["add"].impl(a, c), False
    return a + c, False


def _tensor_backward(
    self: Tensor,
    cotangent: ArrayLike | None = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    *,
    gradient: ArrayLike | None = None,
    inputs: Tensor | Sequence[Tensor] | None = None,
) -> None:
    """Accumulate d(self)/d(leaf) into ``leaf.grad`` for every leaf that requires grad, as PyTorch's.

    The graph is freed as the pass goes (the values its derivatives read are
    let go): a second `backward` through any part of it raises a RuntimeError,
    unless every backward but the last passes ``retain_graph=True``. (PyTorch
    lets a second pass through operations that saved no values; einad refuses
    every one.) Tensors that called `retain_grad` get their ``.grad`` too, and
    hooks (`register_hook`) run on the way.

    Args:
        cotangent: The vector to pull back, of this tensor's shape; may be
            omitted for a scalar (it is then 1).
        retain_graph: Keep the graph for another backward through it. By
            default, `create_graph`.
        create_graph: Record the backward pass itself in the imperative graph:
            ``.grad`` becomes an einad Tensor that requires grad (where it depends
            on a leaf), which can be differentiated again, e.g. a Hessian-vector
            product as ``(x.grad * v).sum().backward()`` (which then adds H·v to
            ``x.grad``, as in PyTorch: set ``x.grad = None`` first to read H·v alone).
        gradient: PyTorch's name for `cotangent` (give one or the other).
        inputs: As PyTorch's: accumulate into these tensors' ``.grad`` only (leaves, or
            computed tensors of the graph, whose ``.grad`` is then filled as by `retain_grad`
            for this pass); the other leaves are left as they are.

    Raises:
        RuntimeError: If the tensor was not computed from tensors made with
            ``ea.tensor(..., requires_grad=True)``, or the pass reaches a part of
            the graph an earlier backward freed, or `inputs` is empty or holds a
            tensor that does not require grad.
        TypeError: If `cotangent` is omitted for a non-scalar tensor.
        ValueError: If `cotangent` does not have this tensor's shape.
    """
    if gradient is not None:
        if cotangent is not None:
            raise TypeError("backward() takes a cotangent or (PyTorch's name) a gradient, not both")
        cotangent = gradient
    root = self._node
    if self._trace is not IMPERATIVE or root is None:
        raise RuntimeError(_no_graph(self))
    if retain_graph is None:
        retain_graph = create_graph
    if cotangent is None:
        if self.shape != ():
            raise TypeError(
                f"backward() without a cotangent needs a scalar, got shape {self.shape}; "
                "pass backward(cotangent) with the output's shape"
            )
        seed: Any = arrays.ones(strip(self), (), self.dtype)
    elif create_graph and type(cotangent) is Tensor and cotangent._trace is IMPERATIVE:
        seed = cotangent  # the gradient is then differentiable in the cotangent too
    else:
        seed = self._in_my_library(cotangent)
    if tuple(seed.shape) != self.shape:
        raise ValueError(f"cotangent has shape {tuple(seed.shape)} but the tensor has shape {self.shape}")
    check_cotangent(np_dtype(seed.dtype), self.dtype)
    # as in PyTorch, the pass records operations exactly when it makes a graph
    wanted, lent = _backward_inputs(inputs)
    try:
        with (
            enable_grad() if create_graph else no_grad(),
            recording_backward() if create_graph else nullcontext(),
        ):
            reached = backward_pass(
                [root], [seed], consume=not retain_graph, record_in=IMPERATIVE if create_graph else None
            )
            for node, g in reached:
                t = node.tensor() if node.tensor is not None else None
                if t is None or (wanted is not None and id(t) not in wanted):
                    continue
                old = t._grad
                g = _as_grad(g, t.shape, t.dtype, create_graph, readonly=old is not None)
                if old is None:
                    t._grad = g
                elif create_graph:
                    t._grad = wrap(bind(PRIMITIVES["add"], (old, g), {}))
                else:
                    t._grad = strip(old) + g  # a new array: never written into
    finally:
        for node in lent:  # computed inputs: their .grad was kept for this pass only
            node.tensor = None


def _backward_inputs(inputs: Tensor | Sequence[Tensor] | None) -> tuple[set[int] | None, list[Node]]:
    """`backward(inputs=...)`: the ids of the tensors to fill (None: every leaf), and the nodes of
    computed ones that were lent a Tensor to fill (`retain_grad`, for one pass)."""
    if inputs is None:
        return None, []
    targets = [inputs] if type(inputs) is Tensor else list(inputs)
    if not targets:
        raise RuntimeError("backward(inputs=...) cannot be empty")
    lent = []
    for t in targets:
        if type(t) is not Tensor or t._trace is not IMPERATIVE or t._node is None:
            raise RuntimeError("backward(inputs=...): one of the tensors does not require grad")
        node = t._node
        if node.prim is not None and node.tensor is None:
            node.tensor = weakref.ref(t)
            lent.append(node)
    return {id(t) for t in targets}, lent


def _no_graph(t: Tensor) -> str:
    """Why `t.backward()` has nothing to differentiate, in einad's spelling."""
    if t._trace is not None and t._trace is not IMPERATIVE:
        return (
            "backward() on a value traced by a transformation (einad.grad, jit, vmap, ...): inside a "
            "transformed function, return the value and differentiate with einad.grad / einad.vjp"
        )
    msg = (
        "element 0 of tensors does not require grad and does not have a grad_fn: backward() needs a "
        "tensor computed, outside no_grad, from tensors made with ea.tensor(data, requires_grad=True)"
    )
    if arrays.library(raw(t)) == "torch":
        msg += (
            ". einad does not follow torch's own requires_grad=True (that is torch's graph, not "
            "einad's): wrap each torch tensor to differentiate as w = ea.tensor(t, requires_grad=True) "
            "(it stays a torch tensor, on its device) and compute with w"
        )
    return msg


# Tensor's own method, attached here (core declares it for type checkers only)
setattr(Tensor, "backward", _tensor_backward)  # noqa: B010
