"""What the every-library transformation tests share (tests/transforms/, tests/test_testing.py).

Two small functions built from `ea.einsum`, `ea.sum`, ``*`` and ``+`` only (every array library
runs them), four 3x3 matrices to evaluate them at, and the two conversions a test needs: numpy
data to arrays of the `lib` fixture's library, and a result back to numpy after checking that
it is an array of that library (lazy on dask) with the expected dtype. And a logistic-regression
loss with its data (LX, LY) and a weight and a direction to evaluate it at (LW, LV), whose
gradient and Hessian have closed forms.
"""

from __future__ import annotations

import numpy as np

import einad as ea
from einad.arrays import np_dtype

RNG = np.random.default_rng(7)
X3 = RNG.standard_normal((3, 3))
Y3 = RNG.standard_normal((3, 3))
V3 = RNG.standard_normal((3, 3))
W3 = RNG.standard_normal((3, 3))


def f_xy(x, y):
    """A scalar of two matrices: a contraction, products and sums only.

    einad's values come first in products: array-api-strict's operators raise TypeError on
    a foreign operand instead of deferring to it, so ``strict_array * tensor`` cannot work.
    """
    return ea.sum(ea.einsum("ij,jk->ik", x, y) * x) + ea.sum(ea.einsum("ij->ji", y) * x * x)


def g_xy(x, y):
    """A matrix-valued function of x (y fixed)."""
    return ea.einsum("ij,jk->ik", x, y) * x


def lib_result(lib, r, dtype=np.float64):
    """`r`, checked to be an array of `lib` (lazy on dask) with `dtype`, as numpy."""
    assert lib.owns(r), f"{type(r).__module__}.{type(r).__name__} is not a {lib.name} array"
    if lib.name == "dask":
        import dask.array

        assert isinstance(r, dask.array.Array)
    assert np_dtype(r.dtype) == dtype
    return lib.numpy(r)


def lib_arrays(lib, *arrays):
    """numpy arrays as arrays of `lib`."""
    return [lib.asarray(a) for a in arrays]


LR = np.random.default_rng(7)
LX = LR.standard_normal((8, 3))
LY = (LR.uniform(size=8) < 0.5).astype(np.float64)
LW = LR.standard_normal(3) * 0.5
LV = LR.standard_normal(3)


def logistic_loss(w):
    """The negative log-likelihood of logistic regression on (LX, LY) at weights w."""
    p = ea.sigmoid(LX @ w)
    return -ea.sum(LY * ea.log(p) + (1 - LY) * ea.log(1 - p))
