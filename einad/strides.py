"""numpy's strides, in elements, for einad's views: whether numpy's reshape or ravel of a view
would be a view too.

A Tensor holds no memory layout of its own: its value is a fresh array as often as not. But a
view of a Tensor (`core.view`: by basic indexing, a transpose, a reshape, a complex part) shares
its base's elements as numpy's view would, and numpy makes ``x[0].reshape(-1)`` or
``x.T.T.ravel()`` a view or a copy by the view's strides. So einad reckons each view's strides
as numpy would lay them out, every Tensor of its own taken to lie in C order, and asks numpy's
own rule (`reshaped`, a port of numpy's ``_attempt_nocopy_reshape`` for C order). Pure
arithmetic on tuples: no array is made or read.
"""

from __future__ import annotations

from typing import Any

from .aliases import Shape

Strides = tuple[int, ...]


def c_strides(shape: Shape) -> Strides:
    """The strides of an array of `shape` laid out in C order."""
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def is_c_contiguous(shape: Shape, strides: Strides) -> bool:
    """numpy's C-contiguous flag: the strides of C order on every axis longer than 1 (an empty
    array is contiguous)."""
    if 0 in shape:
        return True
    step = 1
    for d, s in zip(reversed(shape), reversed(strides)):
        if d != 1:
            if s != step:
                return False
            step *= d
    return True


def indexed(shape: Shape, strides: Strides, index: Any) -> Strides:
    """The strides of ``x[index]`` for basic indexing (integers, slices, None, one Ellipsis) of
    an array `x` of `shape` and `strides`."""
    items = index if type(index) is tuple else (index,)
    taken = sum(1 for i in items if i is not None and i is not Ellipsis)
    out: list[int] = []
    axis = 0
    for i in items:
        if i is None:
            out.append(0)
        elif i is Ellipsis:
            for _ in range(len(shape) - taken):
                out.append(strides[axis])
                axis += 1
        elif type(i) is slice:
            step = 1 if i.step is None else int(i.step)
            out.append(strides[axis] * step)
            axis += 1
        else:  # an integer: the axis goes
            axis += 1
    return (*out, *strides[axis:])


def reshaped(old: Shape, strides: Strides, new: Shape) -> Strides | None:
    """The strides of numpy's C-order reshape of an array of shape `old` and `strides` into
    `new` when it is a view, else None (numpy copies)."""
    if tuple(old) == tuple(new):
        return tuple(strides)
    if is_c_contiguous(old, strides):
        return c_strides(new)
    dims = [(d, s) for d, s in zip(old, strides) if d != 1]  # (axes of size 1 have no say)
    od, os_ = [d for d, _ in dims], [s for _, s in dims]
    out = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(od):
        n_size, o_size = new[ni], od[oi]
        while n_size != o_size:  # the smallest runs of old and new axes of one size
            if n_size < o_size:
                n_size *= new[nj]
                nj += 1
            else:
                o_size *= od[oj]
                oj += 1
        for k in range(oi, oj - 1):  # the old axes of a run must merge
            if os_[k] != od[k + 1] * os_[k + 1]:
                return None
        out[nj - 1] = os_[oj - 1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, oi = nj, oj
        nj, oj = nj + 1, oj + 1
    last = out[ni - 1] if ni >= 1 else 1
    for k in range(ni, len(new)):  # trailing axes of size 1
        out[k] = last
    return tuple(out)
