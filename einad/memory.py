"""Memory einad keeps between calls for the large arrays it makes and lets go within a call.

glibc's malloc maps an array of 128 KiB or more afresh (or takes it from the top of its heap,
which a later free gives back to the system), so every page of such an array faults on first
touch, at every call that makes it again: a jitted value-and-gradient of benchmark case 1 (a
512³ matrix product) faulted 990 pages a call and of case 2 (a batched one) 1,000, of m1 (an
MPS energy) 1,600; recycled, none, and cases 1 and 2 ran in 8.6-9.1 ms against 10.7-11.0 and
13.6-14.4 against 15.9-16.2 (one thread, separate processes alternating).

The arrays: a two-operand product's result (`executor._run_pair`), a scalar contraction's
packed value and gradients (`einsum_vg`, `einsum_vjp`), the outputs of ``ea.jit``'s compiled
kernels, a pooled plan's arrays below its `POOL_MIN` (`network._Pool`) and the large ones of a
plan without a pool (`network._Fresh`, from `network.FRESH_RECYCLE`).

`recycled` hands out views of buffers kept here; a buffer serves a later request of about its
size once its reference count is back to the keeper's own (every view of an array holds its
base buffer), so an array a caller keeps, or any view of it, is never handed out again, and
nothing has to be let go explicitly. Free buffers are kept up to `RECYCLE_BUDGET`; `release`
drops them (`network.release_pools` calls it). This module imports numpy alone.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import Any

import numpy as np

RECYCLE_MIN = 1 << 17
"""The fewest bytes of an array `recycled` hands out from its memory (128 KiB: glibc's mmap
threshold; below, malloc's free lists serve)."""

RECYCLE_BUDGET = 64 << 20
"""The most bytes of free memory kept between calls (the oldest goes first). An array larger
than the whole budget is made afresh and never kept: once freed it would stay past the budget
(a buffer is trimmed only when a new one is made)."""


def _unused() -> int:
    """A buffer's reference count, read as `_Recycled` reads it, where no array refers to it:
    its list's, the loop variable's and, where the interpreter counts it, `sys.getrefcount`'s
    argument (measured, not assumed: a later CPython may count otherwise)."""
    probe = [np.empty(1, np.uint8)]
    count = 0
    for k in range(len(probe)):
        raw = probe[k]
        count = sys.getrefcount(raw)
        del raw
    return count


_UNUSED = _unused()


class _Recycled:
    """The buffers: a list, the most recently handed out last."""

    __slots__ = ("buffers", "fresh", "held", "lock")

    def __init__(self) -> None:
        self.buffers: list[Any] = []  # raw uint8 buffers, the oldest first
        self.held = 0  # their bytes
        self.fresh = 0  # how many were made
        self.lock = threading.Lock()

    def empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes < RECYCLE_MIN or nbytes > RECYCLE_BUDGET or dtype.hasobject:
            return np.empty(shape, dtype)  # (small: malloc's lists; larger than the budget: never kept)
        with self.lock:
            raw = self._free(nbytes)
            if raw is None:
                raw = np.empty(nbytes, np.uint8)
                self.fresh += 1
                self.buffers.append(raw)
                self.held += nbytes
                self._trim()
            return raw[:nbytes].view(dtype).reshape(shape)

    def _free(self, nbytes: int) -> Any:
        """The smallest free buffer of `nbytes` to a quarter more, moved to the back (the most
        recently used), or None."""
        best, at = None, -1
        for k in range(len(self.buffers)):
            raw = self.buffers[k]
            # referred to by the list, by `raw` and by getrefcount's argument: by no array
            fits = nbytes <= raw.nbytes <= nbytes + nbytes // 4 and (best is None or raw.nbytes < best.nbytes)
            if fits and sys.getrefcount(raw) <= _UNUSED:
                best, at = raw, k
            del raw
        if best is not None:
            del self.buffers[at]
            self.buffers.append(best)
        return best

    def _trim(self) -> None:
        """Drop the oldest free buffers while the free ones hold more than `RECYCLE_BUDGET`."""
        spare = -RECYCLE_BUDGET
        for k in range(len(self.buffers)):  # (read as `_unused` measured the count)
            raw = self.buffers[k]
            if sys.getrefcount(raw) <= _UNUSED:
                spare += raw.nbytes
            del raw
        k = 0
        while spare > 0 and k < len(self.buffers):
            raw = self.buffers[k]
            if sys.getrefcount(raw) <= _UNUSED:
                del self.buffers[k]
                self.held -= raw.nbytes
                spare -= raw.nbytes
            else:
                k += 1
            del raw

    def release(self) -> None:
        with self.lock:
            self.buffers.clear()
            self.held = 0


_RECYCLED = _Recycled()


def recycled(shape: tuple[int, ...], dtype: Any, zero: bool = False) -> Any:
    """A new numpy array of `shape` and `dtype` (zeros where `zero`), in memory kept between
    calls where it is large: what a caller keeps is never handed out again."""
    x = _RECYCLED.empty(shape, dtype)
    if zero:
        x.fill(0)
    return x


def held() -> int:
    """The bytes of the buffers kept (in use or free)."""
    return _RECYCLED.held


def release() -> None:
    """Let go of the free buffers (one in use stays with its arrays)."""
    _RECYCLED.release()
