"""`contract_path` and `contract_expression`: planning an einsum once, and reporting the plan.

Both take `einsum`'s arguments (subscripts, or the interleaved form with its
labels: `rules.linear.einsum_arguments`), parse them as `einsum` does, ask the
path strategy (a name, an explicit path, or an optimizer object: asked once)
and, under a memory limit that no pairwise path meets, choose slices
(`slicing.plan`). `contract_path` reports the plan as opt_einsum does, plus the
slicing and the gradient's cost; a `ContractExpression` keeps the plan and
contracts operands of the planned shapes with it, under every transformation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import cluster
from .aliases import MemoryLimit, Path, Shape
from .core import ArrayLike
from .errors import EinsumError
from .rules.einsum import Optimize, Strategy, contract_planned
from .rules.linear import _check_path, _normalize_optimize, _promote_weak, einsum_arguments
from .rules.shape import reshape
from .slicing import ContractionInfo, Slices, check_limit, describe, object_path
from .slicing import plan as slice_plan
from .subscripts import Names, Spec, ellipsis_labels, parse
from .util import shape_of, to_operand, wrap


def _plan(
    spec: Spec, shapes: tuple[Shape, ...], optimize: Optimize, memory_limit: MemoryLimit
) -> tuple[Path, Slices]:
    """The path and slices for `spec` on the (squeezed) `shapes`."""
    n = len(shapes)
    opt: Strategy = _normalize_optimize(optimize)
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
            unknown strategy or an invalid path or memory limit.
        TypeError: If `executor` is none of None, a dask Client and a
            ``concurrent.futures.Executor``.
    """
    cluster.kind(executor)
    text, names, raw = einsum_arguments(subscripts, operands)
    if shapes:
        dims = tuple(tuple(int(d) for d in s) for s in raw)
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
    same plan (a sliced contraction's gradient is sliced along it too).

    Attributes:
        subscripts: The subscripts, as given (the interleaved form written as subscripts).
        shapes: The operand shapes it was planned for.
        path: The contraction path (opt_einsum's convention).
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

    @property
    def path(self) -> list[tuple[int, ...]]:
        """The contraction path."""
        return [tuple(step) for step in self._path]

    @property
    def sliced_indices(self) -> tuple[str, ...]:
        """The letters sliced (an empty tuple when none; ``"...[i]"``: an ellipsis dimension)."""
        return tuple(self._labels.get(c, c) for c, _ in self._slices)

    def __repr__(self) -> str:
        sliced = f", sliced {', '.join(self.sliced_indices)}" if self._slices else ""
        return f"<ContractExpression({self.subscripts!r}) for shapes {list(self.shapes)}{sliced}>"

    def __call__(self, *operands: ArrayLike, executor: Any = None, progress: bool = False) -> Any:
        """Contract `operands` (Tensors or arrays of the planned shapes) with the plan.

        `executor` and `progress` are `einsum`'s: where a sliced plan's slices run (None:
        the in-process thread pool; a ``dask.distributed.Client`` or a
        ``concurrent.futures.Executor``), and whether to show a bar over them.

        Raises:
            EinsumError: If the number of operands or a shape differs from the plan's.
            TypeError: If `executor` is none of None, a dask Client and a
                ``concurrent.futures.Executor``.
        """
        cluster.kind(executor)
        if len(operands) != len(self.shapes):
            raise EinsumError(f"this expression contracts {len(self.shapes)} operand(s), got {len(operands)}")
        ops_ = [to_operand(x) for x in operands]
        for k, (x, want) in enumerate(zip(ops_, self.shapes)):
            if shape_of(x) != want:
                raise EinsumError(
                    f"operand {k} has shape {shape_of(x)}, but this expression was planned for "
                    f"shapes {list(self.shapes)}: make a new expression for other shapes"
                )
        ops_ = _promote_weak(ops_)
        for k, axes in enumerate(self._spec.squeeze):
            if axes:
                shape = shape_of(ops_[k])
                ops_[k] = reshape(ops_[k], tuple(d for a, d in enumerate(shape) if a not in axes))
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


def contract_expression(
    subscripts: str | Sequence[int],
    *shapes: Sequence[Any],
    optimize: Optimize = "auto",
    memory_limit: MemoryLimit = None,
) -> ContractExpression:
    """Plan an einsum once for operands of `shapes`; returns a reusable, differentiable expression.

    The path strategy (an optimizer object is asked once) and, under `memory_limit`,
    the slicing are chosen now; ``expr(*operands)`` then contracts Tensors or arrays
    of exactly those shapes with that plan, under `grad`, `jvp`, `jit` and every
    other transformation. As opt_einsum's, it also takes the interleaved form with
    shapes in the operands' places: ``contract_expression((2, 3), [0, 1], (3, 4),
    [1, 2], [0, 2])``.

    Args:
        subscripts: The contraction in numpy's einsum notation, or the first shape
            of the interleaved form.
        *shapes: One shape per operand (or the shapes interleaved with their sublists).
        optimize: As `einsum`'s: a strategy name, an explicit path or an optimizer object.
        memory_limit: The largest intermediate allowed, in elements (see `einsum`;
            None or -1: no limit).

    Returns:
        A `ContractExpression`.

    Raises:
        EinsumError: For malformed subscripts, shapes that do not fit them, or an
            invalid strategy, path or memory limit.
    """
    text, names, raw = einsum_arguments(subscripts, shapes)
    dims = tuple(tuple(int(d) for d in s) for s in raw)
    return ContractExpression(text, dims, optimize, memory_limit, names)
