"""`contract_path` and `contract_expression`: planning an einsum once, and reporting the plan.

Both take `einsum`'s arguments (subscripts, or the interleaved form with its
labels: `rules.linear.einsum_arguments`), parse them as `einsum` does, ask the
path strategy (a name, an explicit path, or an optimizer object: asked once)
and, under a memory limit that no pairwise path meets, choose slices
(`slicing.plan`). `contract_path` reports the plan as opt_einsum does, plus the
slicing and the gradient's cost; a `ContractExpression` keeps the plan and
contracts operands of the planned shapes with it, under every transformation.
With `constants` (opt_einsum's argument), the steps of the path that involve
only constant operands are contracted once, when the expression is made, and
the expression contracts the rest (`ContractExpression._fold`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import cluster
from .aliases import MemoryLimit, Path, Shape
from .arrays import is_array
from .core import ArrayLike, Tensor
from .errors import EinsumError
from .rules.einsum import Optimize, Strategy, contract, contract_planned
from .rules.linear import _check_path, _promote_weak, einsum_arguments, normalize_optimize
from .rules.shape import reshape, reshape_raw
from .slicing import ContractionInfo, Slices, check_limit, describe, object_path, resolve_limit
from .slicing import plan as slice_plan
from .subscripts import Names, Spec, ellipsis_labels, pairwise_steps, parse
from .util import integer, shape_of, to_array_operand, to_operand, wrap


def _plan(
    spec: Spec, shapes: tuple[Shape, ...], optimize: Optimize, memory_limit: MemoryLimit
) -> tuple[Path, Slices]:
    """The path and slices for `spec` on the (squeezed) `shapes`."""
    n = len(shapes)
    opt: Strategy = normalize_optimize(optimize)
    if opt == "naive":
        opt = (tuple(range(n)),) if n > 1 else "auto"
    if isinstance(opt, tuple):
        _check_path(opt, n)
    if n <= 1:
        return ((0,),) if n == 1 else (), ()
    if not isinstance(opt, (str, tuple)):
        opt = object_path(opt, spec.inputs, spec.output, shapes)
    return slice_plan(spec.inputs, spec.output, shapes, opt, memory_limit)


def _squeezed(spec: Spec, shapes: Sequence[Shape]) -> tuple[Shape, ...]:
    return tuple(tuple(d for a, d in enumerate(s) if a not in ax) for s, ax in zip(shapes, spec.squeeze))


def contract_path(
    subscripts: str | Any,
    *operands: Any,
    optimize: Optimize = "auto",
    memory_limit: MemoryLimit = None,
    shapes: bool = False,
    executor: Any = None,
) -> tuple[list[tuple[int, ...]], ContractionInfo]:
    """The contraction path einad follows, and what it costs, as `opt_einsum.contract_path`.

    Takes `einsum`'s arguments: subscripts then operands, or the interleaved form
    ``contract_path(a, [0, 1], b, [1, 2], [0, 2])`` (with ``shapes=True``, shapes
    in the operands' places).

    Args:
        subscripts: The contraction in numpy's einsum notation, or the first
            operand of the interleaved form.
        *operands: The arrays (or, with ``shapes=True``, their shapes), one per
            comma-separated term (or interleaved with their sublists).
        optimize: An opt_einsum strategy name, an explicit path, or a path-optimizer
            object (opt_einsum's ``RandomGreedy``, ``DynamicProgramming``, cotengra's
            ``HyperOptimizer``...), as `einsum` takes it.
        memory_limit: The largest intermediate allowed, in elements (or
            ``"max_input"``; None or -1: no limit). When no pairwise path keeps every
            intermediate within it, the plan slices indices.
        shapes: Whether `operands` are shapes rather than arrays.
        executor: Where the slices would run (`einsum`'s `executor`): the report then
            says how they are cut into tasks (``info.tasks``, ``info.batch``,
            ``info.reduction_depth``, ``info.executor_threads``), for the executor's
            workers as they are now. None: the in-process thread pool (``info.threads``).

    Returns:
        ``(path, info)``: the path as opt_einsum's list of index tuples, and a
        `ContractionInfo`: opt_einsum's ``PathInfo`` for that path on the full shapes
        (printable), plus ``info.sliced_indices`` (the letters sliced; an empty tuple
        when none), ``info.slices``, ``info.n_slices``, and the forward's and the
        gradient's flops and peaks in elements (``forward_flops``, ``gradient_flops``,
        ``forward_peak``, ``gradient_peak``).

    Raises:
        EinsumError: For malformed subscripts, shapes that do not fit them, an
            unknown strategy or an invalid path or memory limit (with ``shapes=True``:
            a negative dimension).
        TypeError: If `executor` is none of None, a dask Client and a
            ``concurrent.futures.Executor``; with ``shapes=True``, if a shape is not
            a sequence of ints.
    """
    cluster.kind(executor)
    text, names, raw = einsum_arguments(subscripts, operands)
    if shapes:
        dims = tuple(_dims(s, k, "contract_path") for k, s in enumerate(raw))
    else:
        dims = tuple(shape_of(to_operand(x)) for x in raw)
    spec = parse(text, dims, names)
    squeezed = _squeezed(spec, dims)
    memory_limit = check_limit(memory_limit)
    path, slices = _plan(spec, squeezed, optimize, memory_limit)
    info = describe(
        spec.inputs, spec.output, squeezed, path, slices, memory_limit, ellipsis_labels(text, spec)
    )
    if executor is not None and slices:
        info.set_layout(cluster.layout_for(executor, info.n_slices))
    return [tuple(step) for step in path], info


class ContractExpression:
    """An einsum planned once for operand shapes: call it on operands of those shapes.

    Made by `contract_expression`. Calling it returns a Tensor and works under
    every transformation (`grad`, `jvp`, `jit`, ...); the gradient follows the
    same plan (a sliced contraction's gradient is sliced along it too). An
    expression made with constants is called with the other operands only, in
    their order; the parts of the path that read constants only were contracted
    when it was made.

    Attributes:
        subscripts: The subscripts, as given (the interleaved form written as subscripts).
        shapes: The shapes of all the operands it was planned for, constants included.
        constants: The positions of the constant operands (an empty tuple when none).
        path: The contraction path of all the operands (opt_einsum's convention).
        sliced_indices: The letters sliced (empty when none).
        memory_limit: The limit it was planned under (None: no limit).
    """

    def __init__(
        self,
        subscripts: str,
        shapes: tuple[Shape, ...],
        optimize: Optimize = "auto",
        memory_limit: MemoryLimit = None,
        names: Names = (),
        constants: dict[int, Any] | None = None,
    ) -> None:
        if not isinstance(subscripts, str):
            raise TypeError(f"einsum subscripts must be a string, got {type(subscripts).__name__}")
        self.subscripts = subscripts
        self.shapes = shapes
        self.memory_limit = check_limit(memory_limit)
        self._spec = parse(subscripts, shapes, names)
        self._labels = ellipsis_labels(subscripts, self._spec)
        self._path, self._slices = _plan(
            self._spec, _squeezed(self._spec, shapes), optimize, self.memory_limit
        )
        self.constants: tuple[int, ...] = tuple(sorted(constants or {}))
        self._rest: ContractExpression | None = None  # what remains to contract, with constants
        self._folded: list[Any] = []  # the constant operands of `_rest`, contracted once
        if constants:
            self._fold(constants)

    def _fold(self, constants: dict[int, Any]) -> None:
        """Contract the steps of the path that read constants only, once; plan the rest.

        Follows the path step by step: a step whose operands are all constant (the
        given ones, or results of such steps) is contracted now, unless its result
        would exceed the memory limit. The other steps, in the path's order, make
        `_rest`: an expression on the variable operands followed by the constant
        results (and lone constants) that those steps read, with the same path.
        """
        spec, n = self._spec, len(self.shapes)
        shapes = _squeezed(spec, self.shapes)
        sizes = dict(spec.sizes)
        limit = resolve_limit(self.memory_limit, shapes)
        labels = list(spec.inputs)  # node k: an operand (k < n), then each step's result
        values: list[Any] = [None] * n
        for k, v in constants.items():
            values[k] = reshape_raw(v, shapes[k]) if spec.squeeze[k] else v
        is_const = [k in constants for k in range(n)]
        work = list(range(n))
        rest: list[tuple[list[int], int]] = []  # (nodes read, node made) of each step left
        for positions, ins, out in pairwise_steps(spec.inputs, spec.output, self._path):
            read = [work[p] for p in positions]
            for p in sorted(positions, reverse=True):
                del work[p]
            node = len(labels)
            labels.append(out)
            small = limit is None or math.prod(sizes[c] for c in out) <= limit
            if all(is_const[i] for i in read) and small:
                values.append(contract(ins, out, _promote_weak([values[i] for i in read])))
                for i in read:
                    values[i] = None  # only what a later step reads is kept
                is_const.append(True)
            else:
                values.append(None)
                is_const.append(False)
                rest.append((read, node))
            work.append(node)
        if not rest:  # every operand constant: the result itself
            self._folded = [values[work[0]]]
            return
        held = [i for read, _ in rest for i in read if is_const[i]]
        leaves = [k for k in range(n) if not is_const[k]] + held
        path, cur = [], list(leaves)
        for read, node in rest:
            positions = tuple(sorted(cur.index(i) for i in read))
            for p in reversed(positions):
                del cur[p]
            cur.append(node)
            path.append(positions)
        text = ",".join(labels[i] for i in leaves) + "->" + spec.output
        rest_shapes = tuple(tuple(sizes[c] for c in labels[i]) for i in leaves)
        self._rest = ContractExpression(text, rest_shapes, tuple(path), self.memory_limit)
        self._folded = [values[i] for i in held]

    @property
    def path(self) -> list[tuple[int, ...]]:
        """The contraction path."""
        return [tuple(step) for step in self._path]

    @property
    def sliced_indices(self) -> tuple[str, ...]:
        """The letters sliced (an empty tuple when none; ``"...[i]"``: an ellipsis dimension)."""
        if self._rest is not None:
            return self._rest.sliced_indices
        return tuple(self._labels.get(c, c) for c, _ in self._slices)

    def __repr__(self) -> str:
        sliced = f", sliced {', '.join(self.sliced_indices)}" if self.sliced_indices else ""
        consts = f", constants {list(self.constants)}" if self.constants else ""
        return f"<ContractExpression({self.subscripts!r}) for shapes {list(self.shapes)}{consts}{sliced}>"

    def __call__(self, *operands: ArrayLike, executor: Any = None, progress: bool = False) -> Any:
        """Contract `operands` (Tensors or arrays of the planned shapes) with the plan.

        With constants, `operands` are the other operands, in their order. `executor` and
        `progress` are `einsum`'s: where a sliced plan's slices run (None: the in-process
        thread pool; a ``dask.distributed.Client`` or a ``concurrent.futures.Executor``),
        and whether to show a bar over them.

        Raises:
            EinsumError: If the number of operands or a shape differs from the plan's.
            TypeError: If `executor` is none of None, a dask Client and a
                ``concurrent.futures.Executor``.
        """
        cluster.kind(executor)
        wanted = [(k, s) for k, s in enumerate(self.shapes) if k not in self.constants]
        if len(operands) != len(wanted):
            held = f" besides the constants at positions {list(self.constants)}" if self.constants else ""
            raise EinsumError(
                f"this expression contracts {len(wanted)} operand(s){held}, got {len(operands)}"
            )
        ops_ = [to_operand(x) for x in operands]
        for x, (k, want) in zip(ops_, wanted):
            if shape_of(x) != want:
                raise EinsumError(
                    f"operand {k} has shape {shape_of(x)}, but this expression was planned for "
                    f"shapes {list(self.shapes)}: make a new expression for other shapes"
                )
        if self.constants and self._rest is None:  # all constant: contracted already
            return wrap(self._folded[0])
        ops_ = _promote_weak(ops_ + self._folded)[: len(ops_)]
        for j, (k, _) in enumerate(wanted):
            axes = self._spec.squeeze[k]
            if axes:
                shape = shape_of(ops_[j])
                ops_[j] = reshape(ops_[j], tuple(d for a, d in enumerate(shape) if a not in axes))
        if self._rest is not None:
            return self._rest(*ops_, *self._folded, executor=executor, progress=progress)
        spec = self._spec
        return wrap(
            contract_planned(
                spec.inputs,
                spec.output,
                ops_,
                self._path,
                self._slices,
                self.memory_limit,
                executor,
                bool(progress),
            )
        )


def _constant_operands(constants: Iterable[int] | None, operands: tuple[Any, ...]) -> dict[int, Any]:
    """The constant operands by position, each an array (a numpy array is copied: the
    expression keeps what it was made with, whatever happens to the caller's array later)."""
    if constants is None:
        return {}
    if isinstance(constants, (str, bytes)) or not isinstance(constants, Iterable):
        raise TypeError(f"constants must be a list of operand positions, got {constants!r}")
    out: dict[int, Any] = {}
    for c in constants:
        k = integer(c, "a constant's position")
        if not 0 <= k < len(operands):
            raise EinsumError(f"constant position {k} is not that of one of the {len(operands)} operands")
        if k in out:
            raise EinsumError(f"constant position {k} is given twice")
        x = operands[k]  # a Python number stays one: weak, as in einsum (float32 stays float32)
        if not isinstance(x, (bool, int, float, complex)):
            x = to_array_operand(x)
        out[k] = x.copy() if isinstance(x, np.ndarray) else x
    return out


def contract_expression(
    subscripts: str | Sequence[int],
    *shapes: Sequence[Any],
    optimize: Optimize = "auto",
    memory_limit: MemoryLimit = None,
    constants: Sequence[int] | None = None,
) -> ContractExpression:
    """Plan an einsum once for operands of `shapes`; returns a reusable, differentiable expression.

    The path strategy (an optimizer object is asked once) and, under `memory_limit`,
    the slicing are chosen now; ``expr(*operands)`` then contracts Tensors or arrays
    of exactly those shapes with that plan, under `grad`, `jvp`, `jit` and every
    other transformation. As opt_einsum's, it also takes the interleaved form with
    shapes in the operands' places: ``contract_expression((2, 3), [0, 1], (3, 4),
    [1, 2], [0, 2])``.

    As opt_einsum's, it takes constant operands: give the arrays themselves in their
    shapes' places and their positions in `constants`; the expression is then called
    with the other operands only, in their order. The steps of the path that read
    constants only (whole subtrees of the contraction) are contracted once, now (a
    step whose result would exceed `memory_limit` is left to the calls); the
    expression keeps those results, and copies of constant numpy arrays, so later
    changes to the arrays given do not reach it; a Python number among them is weak,
    as in `einsum` (a float32 result stays float32). The other operands are
    differentiable as without constants.

    Args:
        subscripts: The contraction in numpy's einsum notation, or the first shape
            of the interleaved form.
        *shapes: One shape per operand (or the shapes interleaved with their sublists);
            an array in the place of a constant operand.
        optimize: As `einsum`'s: a strategy name, an explicit path or an optimizer object.
        memory_limit: The largest intermediate allowed, in elements (see `einsum`;
            None or -1: no limit).
        constants: The positions of the operands given as arrays, not shapes.

    Returns:
        A `ContractExpression`.

    Raises:
        EinsumError: For malformed subscripts, shapes that do not fit them, an
            invalid strategy, path or memory limit, or a constant position that is
            out of range or repeated, or a negative dimension.
        TypeError: If `constants` is not a list of integer positions, or a shape is
            not a sequence of ints.
    """
    text, names, raw = einsum_arguments(subscripts, shapes)
    held = _constant_operands(constants, raw)
    dims = tuple(shape_of(held[k]) if k in held else _shape_given(s, k) for k, s in enumerate(raw))
    return ContractExpression(text, dims, optimize, memory_limit, names, held)


def _shape_given(s: Any, k: int) -> tuple[int, ...]:
    """Operand `k`'s shape as given to `contract_expression`.

    Raises:
        TypeError: If it is an array (not named in ``constants``) or not a sequence of ints.
    """
    if type(s) is Tensor or is_array(s):
        raise TypeError(
            f"contract_expression takes the operands' shapes; operand {k} is an array of shape "
            f"{tuple(shape_of(s))}: pass its shape, or name it in constants=[{k}] to hold the array"
        )
    return _dims(s, k, "contract_expression")


def _dims(s: Any, k: int, caller: str) -> tuple[int, ...]:
    """Operand `k`'s shape given as a shape (to `caller`): a sequence of ints, none negative.

    Raises:
        TypeError: If it is not a sequence of ints (a float among them, say).
        EinsumError: If a dimension is negative.
    """
    try:
        dims = tuple(integer(d, "a dimension") for d in s)
    except TypeError:
        raise TypeError(f"{caller}: operand {k}'s shape must be a sequence of ints, got {s!r}") from None
    if any(d < 0 for d in dims):
        raise EinsumError(f"{caller}: operand {k}'s shape {s!r} has a negative dimension")
    return dims
