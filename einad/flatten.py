"""`ravel_pytree`: a pytree of arrays as one flat vector, and the function that rebuilds it.

JAX's ``jax.flatten_util.ravel_pytree`` for real leaves: the leaves in tree order,
each raveled, joined into one 1-D array of the dtype JAX's promotion gives them;
``unravel(vector)`` splits a vector of that length back into leaves of the original
shapes and dtypes (or, when every leaf had one dtype, of the vector's dtype, as
JAX). Complex leaves are split into their real and imaginary parts, so the flat
vector of any tree is real and `scipy.optimize` can take it. Both directions are
einad operations, differentiable under every transformation.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .aliases import Shape
from .core import ArrayLike, Tensor, bind
from .pytree import TreeDef, tree_flatten, tree_unflatten
from .rules.elementwise import PRIMITIVES, imag, real
from .rules.shape import astype, getitem_raw, reshape_raw
from .rules.structural import concatenate
from .util import dtype_of, shape_of, to_array_operand, to_operand, wrap

# JAX's type promotion lattice (https://docs.jax.dev/en/latest/type_promotion.html), with
# 64-bit types enabled: each type's immediate successors. "i*", "f*" and "c*" are Python's
# weakly typed int, float and complex; they appear here only as meeting points (uint64 and
# int64 meet at "f*", which is float64).
_LATTICE: dict[str, tuple[str, ...]] = {
    "b1": ("i*",),
    "i*": ("u1", "i1"),
    "u1": ("u2", "i2"),
    "u2": ("u4", "i4"),
    "u4": ("u8", "i8"),
    "u8": ("f*",),
    "i1": ("i2",),
    "i2": ("i4",),
    "i4": ("i8",),
    "i8": ("f*",),
    "f*": ("f2", "c*"),
    "f2": ("f4",),
    "f4": ("f8", "c8"),
    "f8": ("c16",),
    "c*": ("c8",),
    "c8": ("c16",),
    "c16": (),
}
_WEAK = {"i*": np.dtype(np.int64), "f*": np.dtype(np.float64), "c*": np.dtype(np.complex128)}


def _key(dt: np.dtype[Any]) -> str:
    return f"{dt.kind}{dt.itemsize}"


def _above(key: str) -> set[str]:
    """`key` and every type it promotes to."""
    seen, todo = {key}, [key]
    while todo:
        for up in _LATTICE[todo.pop()]:
            if up not in seen:
                seen.add(up)
                todo.append(up)
    return seen


def result_type(dtypes: Sequence[np.dtype[Any]]) -> np.dtype[Any]:
    """The dtype JAX's promotion gives `dtypes` together (with 64-bit types enabled).

    JAX promotes an integer with a float to that float (int64 and float32 give float32,
    where numpy gives float64) and uint64 with a signed integer to float64. A dtype
    outside the lattice (not bool, int, uint, float or complex) falls back to numpy's rule.
    """
    keys = [_key(d) for d in dtypes]
    if any(k not in _LATTICE for k in keys):
        return np.result_type(*dtypes)
    common = set.intersection(*(_above(k) for k in keys))
    least = next(k for k in common if common <= _above(k))  # a lattice: the least bound is unique
    return _WEAK.get(least) or np.dtype(least[0] + str(int(least[1:])))


class Unravel:
    """Rebuilds a pytree from a flat vector, as `ravel_pytree` flattened it.

    Call it on a 1-D array (or Tensor, traced or not) of the flat vector's length; it
    returns the tree with its leaves as Tensors. Two `Unravel` of the same structure,
    shapes and dtypes compare equal and hash alike, so one can be a static argument
    of `einad.jit`.

    Attributes:
        treedef: The tree's structure.
        shapes: Each leaf's shape.
        dtypes: Each leaf's dtype.
        dtype: The flat vector's dtype.
        sizes: Each leaf's number of elements.
        size: The flat vector's length (a complex leaf counts twice its size).
    """

    def __init__(
        self,
        treedef: TreeDef,
        shapes: tuple[Shape, ...],
        dtypes: tuple[np.dtype[Any], ...],
        dtype: np.dtype[Any],
    ) -> None:
        self.treedef = treedef
        self.shapes = shapes
        self.dtypes = dtypes
        self.dtype = dtype
        self.sizes = tuple(math.prod(s) for s in shapes)
        self.size = sum(n * (2 if d.kind == "c" else 1) for n, d in zip(self.sizes, dtypes))

    def _key(self) -> tuple[Any, ...]:
        return (self.treedef, self.shapes, self.dtypes, self.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unravel) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return f"<Unravel {self.treedef} from {self.size} {self.dtype}>"

    def __call__(self, flat: ArrayLike) -> Any:
        """The tree of this structure whose leaves hold `flat`'s entries, in order.

        When every leaf had the same dtype, the leaves take `flat`'s dtype (its complex
        counterpart for complex leaves), as JAX's unravel does; otherwise each leaf is
        cast back to its own dtype, and `flat` must have the flat vector's dtype.

        Raises:
            ValueError: If `flat` is not 1-D of the flat vector's length.
            TypeError: If `flat` is complex while the tree has complex leaves, or (for
                a tree of several dtypes) its dtype is not the flat vector's.
        """
        x = to_operand(flat)
        shape, dt = shape_of(x), dtype_of(x)
        if shape != (self.size,):
            raise ValueError(
                f"unravel takes a 1-D array of length {self.size}, got an array of shape {shape}"
            )
        has_complex = any(d.kind == "c" for d in self.dtypes)
        if has_complex and dt.kind == "c":
            raise TypeError(
                "this tree has complex leaves, stored as their real and imaginary parts: "
                f"unravel takes a real vector, got {dt}"
            )
        single = len(set(self.dtypes)) <= 1
        if not single and dt != self.dtype:
            raise TypeError(
                f"unravel takes an array of dtype {self.dtype} (the leaves have several dtypes, and each "
                f"is cast back to its own), got {dt}: cast it with .astype({str(self.dtype)!r})"
            )
        leaves: list[Any] = []
        start = 0
        for n, leaf_shape, leaf_dt in zip(self.sizes, self.shapes, self.dtypes):
            if leaf_dt.kind == "c":
                re, im = (getitem_raw(x, (slice(k, k + n),)) for k in (start, start + n))
                start += 2 * n
                value: Any = bind(PRIMITIVES["add"], (re, bind(PRIMITIVES["multiply"], (1j, im), {})), {})
            else:
                value = getitem_raw(x, (slice(start, start + n),))
                start += n
            value = reshape_raw(value, leaf_shape)
            if not single:
                value = astype(value, leaf_dt)
            leaves.append(wrap(value))
        return tree_unflatten(self.treedef, leaves)


def ravel_pytree(tree: Any) -> tuple[Tensor, Callable[[ArrayLike], Any]]:
    """The leaves of `tree` as one flat vector, and the function that rebuilds the tree.

    As JAX's ``jax.flatten_util.ravel_pytree`` for real leaves: the leaves in
    `tree_flatten`'s order (dict keys sorted), each raveled in C order, joined into
    one 1-D Tensor whose dtype JAX's promotion gives the leaves together (an int64
    leaf with a float32 one gives float32, not numpy's float64); an empty tree gives
    an empty float32 vector. A complex leaf contributes its real parts, then its
    imaginary parts (each raveled), so the vector is real (float32 for complex64,
    float64 for complex128): `scipy.optimize.minimize` takes it, and ``unravel``
    recombines the two halves. Both directions are differentiable, traced or not:
    ``grad(lambda v: f(unravel(v)))`` is the gradient of `f` as one flat vector (for a
    complex leaf, the derivatives along its real and imaginary parts).

    Args:
        tree: A pytree of arrays, Tensors and numbers.

    Returns:
        ``(flat, unravel)``: the 1-D Tensor, and an `Unravel`: ``unravel(v)`` is the
        tree of `tree`'s structure holding the entries of a vector `v` of the same
        length, with each leaf's shape and dtype (see `Unravel`).

    Raises:
        TypeError: If a leaf is not numeric.
    """
    leaves, treedef = tree_flatten(tree)
    xs = [to_array_operand(leaf) for leaf in leaves]
    dtypes = tuple(dtype_of(x) for x in xs)
    shapes = tuple(shape_of(x) for x in xs)
    if not xs:
        return wrap(np.zeros(0, np.float32)), Unravel(treedef, (), (), np.dtype(np.float32))
    to = result_type(dtypes)
    if to.kind == "c":
        to = np.dtype(f"f{to.itemsize // 2}")
    unravel = Unravel(treedef, shapes, dtypes, to)
    pieces: list[Any] = []
    for x, dt, n in zip(xs, dtypes, unravel.sizes):
        parts = (real(x), imag(x)) if dt.kind == "c" else (x,)
        pieces.extend(reshape_raw(astype(p, to), (n,)) for p in parts)
    return concatenate(pieces), unravel
