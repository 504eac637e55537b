"""einsum's front ends: `ea.einsum` itself (numpy's grammar parsed into one contraction),
and every linear operation that is one einsum call with no rule of its own: `transpose`,
`moveaxis`, `matmul`, `dot`, `inner`, `outer`, `tensordot`, `trace`, `diagonal`, `sum`; and
`tril`, `triu`, linear primitives of their own (each its own transpose).

They sit above `einad.rules.shape`, `einad.rules.einsum` and `einad.rules.structural` because
they reshape (squeezed operands), index (a diagonal's offset) and cast (weak scalars).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import numpy as np
import opt_einsum as oe

from .. import arrays, cluster
from ..aliases import Axis, DTypeLike, MemoryLimit, Path, Shape
from ..arrays import asarray
from ..core import ArrayLike, Primitive, Staged, Tensor, Value, bind, declare, export, layout_view, ride_along
from ..errors import EinsumError
from ..slicing import check_limit
from ..subscripts import (
    Names,
    from_sublists,
    parse,
)
from ..util import (
    dtype_of,
    foreign,
    integer,
    lib_array,
    normalize_axes,
    normalize_axis,
    raw,
    shape_of,
    to_array_operand,
    to_operand,
    wrap,
)
from .einsum import Optimize, Strategy, _accumulate, _letters, contract, sum_raw
from .shape import astype, astype_p, getitem, reshape, scatter_raw
from .structural import broadcast_raw, masked

# -- the public einsum ------------------------------------------------------------------


def normalize_optimize(optimize: Optimize) -> Strategy:
    if optimize is True:
        return "auto"
    if optimize is False or optimize is None:
        return "auto" if optimize is None else "naive"
    if isinstance(optimize, str):
        try:
            oe.paths.get_path_fn(optimize)  # checked for any number of operands, not only when planning
        except KeyError as err:  # opt_einsum's message lists the strategies
            raise EinsumError(f"unknown optimize strategy {optimize!r}: {err.args[0]}") from None
        return optimize
    if callable(optimize):  # a PathOptimizer (opt_einsum, cotengra) or a path function
        return optimize
    if isinstance(optimize, (list, tuple)):
        steps = [s for s in optimize if not (isinstance(s, str) and s == "einsum_path")]
        try:  # (`operator.index`: an integer of any kind, never a float cut down to one)
            return tuple(tuple(operator.index(i) for i in s) for s in steps)
        except (TypeError, ValueError):  # a step of names ("greedy" reads as letters) or of non-integers
            pass
    raise EinsumError(
        "optimize must be an opt_einsum strategy name, a path (list of index tuples) or a path "
        f"optimizer object, got {optimize!r}"
    )


def _check_path(path: Path, n: int) -> None:
    """An explicit path must contract `n` operands down to one, by valid positions."""
    left = n
    for step in path:
        if not step or len(set(step)) != len(step) or any(not 0 <= i < left for i in step):
            raise EinsumError(
                f"invalid contraction path {list(path)}: step {step} does not fit {left} operand(s)"
            )
        left -= len(step) - 1
    if left != 1 and n > 0:
        raise EinsumError(f"invalid contraction path {list(path)}: it leaves {left} operands, not 1")


def _weak_scalar(x: Any) -> Any:
    """The Python number `x` is, or holds under every trace (jit traces them weakly typed); else None."""
    v = x
    while type(v) is Tensor:
        v = v._value
    if type(v) is Staged:
        v = v.concrete
    return v if isinstance(v, (int, float, complex)) else None


def _as_dtype(x: Any, dtype: Any, like: Any = None) -> Any:
    """A Python number as a 0-d array of `dtype` (a traced one by an `astype` operation), of
    the library of the array `like` (numpy when None)."""
    if type(x) is not Tensor:
        return np.asarray(x, dtype=dtype) if like is None else asarray(like, x, dtype)

    return bind(astype_p, (x,), {"dtype": np.dtype(dtype)})


def _promote_weak(ops_: list[Any]) -> list[Any]:
    """Python numbers among the operands (also ones jit traces) as 0-d arrays of the dtype
    numpy's promotion gives them next to the array operands (so float32 stays float32), in
    the arrays' library."""
    for x in ops_:  # (numpy arrays under every trace, no number: the common case, checked inline)
        while type(x) is Tensor:
            x = x._value
        if type(x) is not np.ndarray:
            break
    else:
        return ops_
    weak = [_weak_scalar(x) for x in ops_]
    if weak.count(None) == len(weak):  # (no number among the operands)
        return ops_
    arrays = [dtype_of(x) for x, w in zip(ops_, weak) if w is None]
    like = next((raw(x) for x, w in zip(ops_, weak) if w is None), None)
    return [x if w is None else _as_dtype(x, np.result_type(w, *arrays), like) for x, w in zip(ops_, weak)]


def einsum_arguments(subscripts: Any, operands: tuple[Any, ...]) -> tuple[str, Names, tuple[Any, ...]]:
    """einsum's positional arguments as ``(subscripts, names, operands)``.

    Either subscripts (a string) then the operands, or numpy's interleaved form
    ``a, [0, 1], b, [1, 2], [0, 2]``, written as subscripts by `from_sublists`; `names`
    (empty for a string) says how the user wrote each letter, for messages. The
    operands may be anything (`contract_path` and `contract_expression` pass shapes).

    Raises:
        TypeError: If the arguments are neither form (see `from_sublists` for labels).
    """
    if isinstance(subscripts, str):
        return subscripts, (), operands
    return _interleaved((subscripts, *operands))


def _interleaved(args: tuple[Any, ...]) -> tuple[str, Names, tuple[Any, ...]]:
    """numpy's interleaved arguments ``a, [0, 1], b, [1, 2], [0, 2]``: (subscripts, names, operands)."""
    n = len(args) // 2 * 2
    if n == 0:
        raise TypeError(
            "einsum takes the subscripts as a string first, or operands interleaved with "
            "sublists of labels, as in einsum(a, [0, 1], b, [1, 2], [0, 2])"
        )
    operands, sublists = args[0:n:2], args[1:n:2]
    output = args[n] if len(args) > n else None
    for k, sub in enumerate(sublists):
        if not isinstance(sub, (list, tuple)):
            raise TypeError(
                "einsum takes the subscripts as a string first, or operands interleaved with sublists "
                f"of labels: the argument after operand {k} is a {type(sub).__name__}, not a list of labels"
            )
    if output is not None and not isinstance(output, (list, tuple)):
        raise TypeError(
            "in einsum's interleaved form the last argument, when there is one more than the "
            f"operand and sublist pairs, is the output sublist: got a {type(output).__name__}, not a list"
        )
    for sub in [*sublists, *([] if output is None else [output])]:
        if any(type(label) is Tensor for label in sub):
            raise TypeError(
                "einsum labels are static Python values (ints, strings), not Tensors; under ea.jit "
                "pass the sublists as static arguments (static_argnums), as tuples"
            )
    text, names = from_sublists(sublists, output)
    return text, names, operands


def einsum(
    subscripts: str | ArrayLike,
    *operands: Any,
    optimize: Optimize = "auto",
    memory_limit: MemoryLimit = None,
    executor: Any = None,
    progress: bool = False,
    precision: Any = None,
    preferred_element_type: DTypeLike | None = None,
) -> Tensor:
    """Einstein summation over Tensors and arrays, differentiable in every operand.

    Accepts numpy's whole grammar: explicit (``"ij,jk->ik"``) and implicit
    (``"ij,jk"``) output, ``...`` broadcasting across ranks and size-1
    dimensions, repeated indices inside an operand (``"ii->i"``), spaces. Also,
    as opt_einsum: any character as an index (``"αβ,βγ->αγ"``, ``"a1,1b"``, every
    character ``opt_einsum.get_symbol`` gives) but the grammar's ``,``, ``-``,
    ``>``, ``.`` and whitespace, a ``...`` that the output leaves out (summed),
    and numpy's interleaved form
    ``einsum(a, [0, 1], b, [1, 2], [0, 2])``: each operand followed by a list of
    labels for its axes (any hashable: ints, strings such as ``"left"``;
    ``Ellipsis`` for ``...``), then optionally the output's list.

    Args:
        subscripts: The contraction in numpy's einsum notation, or the first
            operand of the interleaved form.
        *operands: The arrays or Tensors, one per comma-separated term (or
            interleaved with their sublists).
        optimize: An opt_einsum path strategy (``"auto"``, ``"greedy"``,
            ``"optimal"``, ...), True (``"auto"``), False (contract all operands
            in one step), an explicit path as numpy and opt_einsum write it, or a
            path-optimizer object (opt_einsum's ``RandomGreedy``,
            ``DynamicProgramming``, ...; cotengra's ``HyperOptimizer``,
            ``ReusableHyperOptimizer``), which is asked once per contraction and
            whose plan the gradient reuses.
        memory_limit: The largest intermediate allowed, in elements (or
            ``"max_input"``, the largest operand's size; None or -1, as in
            opt_einsum: no limit). When no pairwise path
            keeps every intermediate within it, the contraction is sliced: a few
            indices are cut into chunks, each slice is contracted within the
            limit and the slices are summed. Its gradient is sliced too (each
            slice's intermediates are recomputed in the backward pass), so the
            peak memory of the forward and of the gradient follows the limit.
            The operands, the result and the gradients are not intermediates.
            See `contract_path` for the plan.
        executor: Where the slices of a sliced contraction run: None (the default), a
            thread pool in this process (`einad.slicing.threads`); a
            ``dask.distributed.Client``, or any ``concurrent.futures.Executor`` (a process
            pool, loky, ``mpi4py.futures``): the slices of the forward and of the
            gradient then run there as tasks, the operands sent once per call and the
            partial results summed there (docs: "Beyond one machine"). The same under
            every transformation and inside `einad.jit`. A contraction that is not
            sliced ignores it.
        progress: Show a progress bar over the slices (tqdm's when installed, else a
            line on stderr), on the thread pool and on an executor alike.
        precision: JAX's keyword, taken for code written for ``jnp.einsum``: the arrays'
            libraries compute at the operands' own precision (no reduced-precision matrix
            units to choose), so any value gives the same result.
        preferred_element_type: JAX's keyword: the dtype to accumulate in and to return
            (the operands are cast to it first; ``int8`` operands summed in ``int32``).

    Returns:
        The contraction, as a Tensor.

    Raises:
        EinsumError: If the subscripts are malformed, do not fit the operands'
            shapes, `optimize` is not a strategy, a valid path or an optimizer, or
            `memory_limit` is none of a positive number of elements, ``"max_input"``,
            -1 and None (checked for any number of operands). Messages name the
            user's letters, or labels in the interleaved form.
        TypeError: If the arguments are neither subscripts and operands nor
            operands interleaved with lists of hashable labels, an operand
            is not numeric, or `executor` is none of None, a dask Client and a
            ``concurrent.futures.Executor``.
    """
    # (the defaults are taken as they are, without their checks: every eager einsum call comes here)
    if executor is not None:
        cluster.kind(executor)
    names: Names
    if type(subscripts) is str:
        text, names, given = subscripts, (), operands
    else:
        text, names, given = einsum_arguments(subscripts, operands)
    if preferred_element_type is not None:  # (JAX's: accumulate in it, return it)
        given = tuple(astype(to_operand(x), preferred_element_type) for x in given)
    ops_ = []
    shapes = []
    plain = True  # whether every operand is a numpy array or a Tensor over one (no number)
    for x in given:  # (a loop, numpy arrays and traced Tensors inline: every eager einsum call)
        if type(x) is np.ndarray and x.dtype.kind in "biufc":
            shapes.append(x.shape)
        else:
            if type(x) is not Tensor or x._trace is None:
                x = to_operand(x)
            shapes.append(x.shape if type(x) is Tensor else shape_of(x))
            v = x
            while type(v) is Tensor:  # (`_promote_weak`'s own check, inline)
                v = v._value
            plain = plain and type(v) is np.ndarray
        ops_.append(x)
    promoted = ops_ if plain else _promote_weak(ops_)
    if promoted is not ops_:  # (numbers made arrays)
        ops_, shapes = promoted, [shape_of(x) for x in promoted]
    spec = parse(text, tuple(shapes), names)
    for k, axes in enumerate(spec.squeeze):
        if axes:
            shape = shape_of(ops_[k])
            ops_[k] = reshape(ops_[k], tuple(d for a, d in enumerate(shape) if a not in axes))
    opt = optimize if type(optimize) is str and optimize == "auto" else normalize_optimize(optimize)
    if opt == "naive":  # optimize=False: contract all operands in one step
        opt = (tuple(range(len(ops_))),) if len(ops_) > 1 else "auto"
    if isinstance(opt, tuple):
        _check_path(opt, len(ops_))
    limit = None if memory_limit is None else check_limit(memory_limit)
    out = contract(spec.inputs, spec.output, ops_, opt, limit, executor, bool(progress))
    return out if type(out) is Tensor else wrap(out)


def transpose(x: ArrayLike, axes: Sequence[int] | None = None) -> Tensor:
    """Permute axes (reverse them by default), as numpy.transpose: of a Tensor, a view
    (`core.layout_view`), which a write into reaches the Tensor, as numpy's."""
    base, x = x, to_operand(x)
    nd = len(shape_of(x))
    if axes is None:
        perm = tuple(range(nd))[::-1]
    else:
        perm = normalize_axes(axes, nd, "axes")
        if len(perm) != nd:
            raise ValueError(f"transpose: axes {axes!r} do not match an array of {nd} dimension(s)")
    s = _letters(nd)
    out = wrap(contract((s,), "".join(s[a] for a in perm), [x]))
    return layout_view(
        out,
        base,
        lambda b: transpose(b, perm),
        lambda r: transpose(r, _inverse(perm)),
        lambda strides: tuple([strides[a] for a in perm]),
    )


def _inverse(perm: Sequence[int]) -> tuple[int, ...]:
    """The permutation that undoes `perm`."""
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return tuple(inverse)


def moveaxis(x: ArrayLike, source: int | Sequence[int], destination: int | Sequence[int]) -> Tensor:
    """Move axes to new positions (numpy.moveaxis), as a transpose einsum (of a Tensor, a view)."""
    base, x = x, to_operand(x)
    nd = len(shape_of(x))
    if source is None or destination is None:
        raise TypeError("moveaxis: source and destination must be integers or sequences of integers")
    src = normalize_axes(source, nd, "source")
    dst = normalize_axes(destination, nd, "destination")
    if len(src) != len(dst):
        raise ValueError("moveaxis: source and destination must have the same number of axes")
    order = [a for a in range(nd) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(base, order)


# -- tril and triu: linear primitives, each its own transpose ----------------------------------


def _triangle_impl(x: Any, k: int, lower: bool) -> Any:
    """numpy's tril (`lower`) or triu of the last two axes of `x` (two or more axes); another
    library's array is masked with the standard's `where` (it has no tril)."""
    xp = arrays.xp_of(x)
    if xp is np:
        return np.tril(x, k) if lower else np.triu(x, k)
    n, m = shape_of(x)[-2:]
    tri = np.tri(n, m, k if lower else k - 1, dtype=bool)
    return xp.where(lib_array(x, tri if lower else ~tri), x, xp.zeros_like(x))


def _triangle_prim(name: str, lower: bool) -> Primitive:
    """The primitive `name` (`k` its parameter): linear, so its JVP is itself on the tangent and
    its VJP itself on the cotangent (a mask is its own transpose); it reads no value."""
    prim = Primitive(name, lambda x, k: _triangle_impl(x, k, lower))
    return declare(
        prim,
        jvp=lambda ts, ans, vals, p: bind(prim, (ts[0],), p),
        vjp=lambda g, ans, vals, p, needed: [bind(prim, (g,), p)],
        keep=lambda needed: ((False,), False),
        batch=ride_along,  # the last two axes, whatever leads them
        aliasing="fresh",
        linear=True,
    )


tril_p = _triangle_prim("tril", True)
triu_p = _triangle_prim("triu", False)


def _triangle(x: ArrayLike, k: int, prim: Primitive) -> Tensor:
    x = to_operand(x)
    shape = shape_of(x)
    if not shape:
        raise ValueError(f"{prim.name} needs an array of at least one dimension, got a scalar")
    k = integer(k, f"{prim.name}: k")
    if len(shape) == 1:  # numpy's 1-D x is the row of a square matrix
        x = broadcast_raw(x, (shape[0], shape[0]))
    return wrap(bind(prim, (x,), {"k": k}))


@export(numpy=np.tril)
def tril(x: ArrayLike, k: int = 0) -> Tensor:
    """The lower triangle of the last two axes, zeros above the `k`-th diagonal (numpy.tril);
    linear, so differentiable in both modes to any order."""
    return _triangle(x, k, tril_p)


@export(numpy=np.triu)
def triu(x: ArrayLike, k: int = 0) -> Tensor:
    """The upper triangle of the last two axes, zeros below the `k`-th diagonal (numpy.triu);
    linear, so differentiable in both modes to any order."""
    return _triangle(x, k, triu_p)


@export(numpy=np.diag)
def diag(v: ArrayLike, k: int = 0) -> Tensor:
    """numpy.diag: the `k`-th diagonal of a matrix (`diagonal`), or the square matrix with the
    vector `v` on its `k`-th diagonal (a scatter into zeros); linear either way."""
    x = to_operand(v)
    shape = shape_of(x)
    k = integer(k, "diag: k")
    if len(shape) == 2:
        return diagonal(x, k)
    if len(shape) != 1:
        raise ValueError("Input must be 1- or 2-d.")
    n = shape[0]
    places = np.arange(n)
    return wrap(scatter_raw(x, (places + max(-k, 0), places + max(k, 0)), (n + abs(k), n + abs(k))))


@export(numpy=np.kron)
def kron(a: ArrayLike, b: ArrayLike) -> Tensor:
    """numpy.kron: one einsum (the axes of `a` and `b` interleaved, the shorter shape padded
    with leading 1s), then a reshape."""
    a, b = to_operand(a), to_operand(b)
    sa, sb = shape_of(a), shape_of(b)
    nd = max(len(sa), len(sb))
    sa, sb = (1,) * (nd - len(sa)) + sa, (1,) * (nd - len(sb)) + sb
    letters = _letters(2 * nd)
    ia, ib = letters[:nd], letters[nd:]
    out = einsum(f"{ia},{ib}->{''.join(x + y for x, y in zip(ia, ib))}", reshape(a, sa), reshape(b, sb))
    return reshape(out, tuple(x * y for x, y in zip(sa, sb)))


def _mismatch(what: str, sa: Shape, ia: int, sb: Shape, ib: int) -> EinsumError:
    return EinsumError(
        f"{what}: axis {ia} of the first operand (size {sa[ia]}) and axis {ib} of the second "
        f"(size {sb[ib]}) are contracted but differ in size (shapes {sa} and {sb})"
    )


def matmul(a: ArrayLike, b: ArrayLike) -> Tensor:
    """Matrix product with numpy's 1-D, batch and broadcasting rules."""
    a, b = to_operand(a), to_operand(b)
    sa, sb = shape_of(a), shape_of(b)
    na, nb = len(sa), len(sb)
    if na == 0 or nb == 0:
        raise EinsumError("matmul does not take 0-d operands (use multiply)")
    kb = nb - 2 if nb >= 2 else 0
    if sa[-1] != sb[kb]:
        raise _mismatch("matmul", sa, na - 1, sb, kb)
    try:
        np.broadcast_shapes(sa[:-2], sb[:-2])
    except ValueError:
        raise EinsumError(
            f"matmul: the batch dimensions {sa[:-2]} and {sb[:-2]} of shapes {sa} and {sb} do not broadcast"
        ) from None
    if na == 1 and nb == 1:
        return einsum("j,j->", a, b)
    if na == 1:
        return einsum("j,...jk->...k", a, b)
    if nb == 1:
        return einsum("...ij,j->...i", a, b)
    return einsum("...ij,...jk->...ik", a, b)


def dot(a: ArrayLike, b: ArrayLike) -> Tensor:
    """numpy.dot: inner product of vectors, matmul of matrices, last-by-second-last otherwise."""
    a, b = to_operand(a), to_operand(b)
    sa_, sb_ = shape_of(a), shape_of(b)
    na, nb = len(sa_), len(sb_)
    if na == 0 or nb == 0:  # (an explicit output: an implicit one sorts 'A' before 'a', past rank 26)
        sa, sb = _letters(na), _letters(nb, _letters(na))
        return einsum(f"{sa},{sb}->{sa}{sb}", a, b)
    kb = nb - 2 if nb >= 2 else 0
    if sa_[-1] != sb_[kb]:
        raise _mismatch("dot", sa_, na - 1, sb_, kb)
    sa = _letters(na)
    sb = _letters(nb, sa)
    j = sa[-1]
    sb = sb[: max(nb - 2, 0)] + j + sb[nb - 1 :] if nb >= 2 else j
    out = sa[:-1] + (sb[:-2] + sb[-1] if nb >= 2 else "")
    return einsum(f"{sa},{sb}->{out}", a, b)


def inner(a: ArrayLike, b: ArrayLike) -> Tensor:
    """numpy.inner: sum over the last axes."""
    a, b = to_operand(a), to_operand(b)
    sa_, sb_ = shape_of(a), shape_of(b)
    na, nb = len(sa_), len(sb_)
    sa = _letters(na)
    sb = _letters(nb, sa)
    if na and nb:
        if sa_[-1] != sb_[-1]:
            raise _mismatch("inner", sa_, na - 1, sb_, nb - 1)
        sb = sb[:-1] + sa[-1]
        return einsum(f"{sa},{sb}->{sa[:-1]}{sb[:-1]}", a, b)
    return einsum(f"{sa},{sb}->{sa}{sb}", a, b)


def outer(a: ArrayLike, b: ArrayLike) -> Tensor:
    """numpy.outer: the flattened operands' outer product."""

    like = foreign((a, b))  # a number joins the other operand's library
    a, b = to_array_operand(a, like), to_array_operand(b, like)
    return einsum("i,j->ij", reshape(a, (-1,)), reshape(b, (-1,)))


def _tensordot_axes(axes: Any, nd: int) -> list[int]:
    """One operand's side of tensordot's `axes`: an axis or a sequence of them, each in range."""
    items = list(axes) if isinstance(axes, (list, tuple, range, np.ndarray)) else [axes]
    return [normalize_axis(i, nd, "tensordot axes") for i in items]


def tensordot(a: ArrayLike, b: ArrayLike, axes: int | Sequence[int | Sequence[int]] = 2) -> Tensor:
    """numpy.tensordot: contract `axes` of `a` with `axes` of `b`."""
    a, b = to_operand(a), to_operand(b)
    sa_, sb_ = shape_of(a), shape_of(b)
    na, nb = len(sa_), len(sb_)
    if isinstance(axes, (int, np.integer)) and not isinstance(axes, (bool, np.bool_)):
        n = int(axes)
        if n < 0 or n > min(na, nb):
            raise EinsumError(f"tensordot axes={n} does not fit operands of rank {na} and {nb}")
        ax_a, ax_b = list(range(na - n, na)), list(range(n))
    else:
        try:
            pair_a, pair_b = axes  # type: ignore[misc]
        except (TypeError, ValueError):
            raise EinsumError(
                f"tensordot axes must be an int or a pair of axis lists, got {axes!r}"
            ) from None
        ax_a, ax_b = _tensordot_axes(pair_a, na), _tensordot_axes(pair_b, nb)
        if len(ax_a) != len(ax_b):
            raise EinsumError("tensordot: the two axis lists must have the same length")
        if len(set(ax_a)) != len(ax_a) or len(set(ax_b)) != len(ax_b):
            raise EinsumError(f"tensordot: duplicate axes are not allowed, got {axes!r}")
    for i, j in zip(ax_a, ax_b):
        if sa_[i] != sb_[j]:
            raise _mismatch("tensordot", sa_, i, sb_, j)
    sa = _letters(na)
    letters_b = list(_letters(nb, sa))
    for i, j in zip(ax_a, ax_b):
        letters_b[j] = sa[i]
    sb = "".join(letters_b)
    out = "".join(c for i, c in enumerate(sa) if i not in ax_a) + "".join(
        c for j, c in enumerate(sb) if j not in ax_b
    )
    return einsum(f"{sa},{sb}->{out}", a, b)


def _diagonal_block(x: Value, offset: int, axis1: int, axis2: int) -> Value:
    """Slice `x` so the wanted diagonal is the main diagonal of a square block."""

    shape = shape_of(x)
    s1, s2 = shape[axis1], shape[axis2]
    if offset >= 0:
        n = max(0, min(s1, s2 - offset))
        start1, start2 = 0, offset
    else:
        n = max(0, min(s1 + offset, s2))
        start1, start2 = -offset, 0
    if (start1, start2, n, n) == (0, 0, s1, s2):
        return x
    idx: list[slice] = [slice(None)] * len(shape)
    idx[axis1] = slice(start1, start1 + n)
    idx[axis2] = slice(start2, start2 + n)
    return getitem(x, tuple(idx))


def _diag_letters(nd: int, axis1: int, axis2: int) -> tuple[str, str, str]:
    s = list(_letters(nd))
    s[axis2] = s[axis1]
    rest = "".join(c for i, c in enumerate(s) if i not in (axis1, axis2))
    return "".join(s), rest, s[axis1]


def _check_axes(nd: int, axis1: int, axis2: int, what: str) -> tuple[int, int]:
    if nd < 2:
        raise ValueError(f"{what} needs an array of at least 2 dimensions, got {nd}")
    a1, a2 = normalize_axis(axis1, nd, "axis1"), normalize_axis(axis2, nd, "axis2")
    if a1 == a2:
        raise ValueError(f"{what}: axis1 and axis2 cannot be the same")
    return a1, a2


def trace(
    x: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1, *, dtype: DTypeLike | None = None
) -> Tensor:
    """Sum along a diagonal (numpy.trace): one einsum with a repeated index.

    Booleans and small integers are summed in numpy's accumulator dtype (int64 here); with
    `dtype`, the elements are cast to it first and the trace has that dtype.
    """
    x = to_operand(x) if dtype is None else astype(to_operand(x), dtype)
    a1, a2 = _check_axes(len(shape_of(x)), axis1, axis2, "trace")
    x = _diagonal_block(_accumulate(x), integer(offset, "offset"), a1, a2)
    s, rest, _ = _diag_letters(len(shape_of(x)), a1, a2)
    out = einsum(f"{s}->{rest}", x)
    return out if dtype is None else wrap(astype(out, dtype))


def diagonal(x: ArrayLike, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """A diagonal as the last axis (numpy.diagonal): one einsum with a repeated index."""
    x = to_operand(x)
    a1, a2 = _check_axes(len(shape_of(x)), axis1, axis2, "diagonal")
    x = _diagonal_block(x, integer(offset, "offset"), a1, a2)
    s, rest, d = _diag_letters(len(shape_of(x)), a1, a2)
    return einsum(f"{s}->{rest}{d}", x)


def sum(
    x: ArrayLike,
    axis: Axis = None,
    keepdims: bool = False,
    *,
    dtype: DTypeLike | None = None,
    initial: ArrayLike | None = None,
    where: ArrayLike | None = None,
) -> Tensor:
    """Sum over `axis` (all by default), as one einsum.

    Booleans and small integers are summed in numpy's accumulator dtype: a boolean
    array's sum counts (int64 here), an int8 sum does not overflow. With `dtype` (numpy's
    and JAX's keyword), the elements are cast to it first and the sum has that dtype.
    numpy's and JAX's ``where=`` (a boolean mask broadcasting to `x`'s shape) leaves out
    the elements where it is False (they get no derivative); ``initial`` is added, cast to
    the sum's dtype first.
    """
    if dtype is None and where is None and initial is None:
        return wrap(sum_raw(to_operand(x), axis, keepdims))
    x = to_array_operand(x)
    if dtype is not None:
        x = astype(x, dtype)
    if where is not None:
        x = masked(x, where, 0, "sum")
    out = sum_raw(x, axis, keepdims)
    if initial is not None:
        out = out + astype(to_array_operand(initial, like=out), dtype_of(out))
    return wrap(out if dtype is None else astype(out, dtype))
