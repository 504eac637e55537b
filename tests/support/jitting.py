"""Running what `ea.jit` compiled, in tests that mean the compiled program.

The call of a jitted function that stages a program returns the values staging computed
(the first call computes once, issue 22); only later calls run the compiled program. A test
about the program (its lowered einsums, its buffers, its constants in a library, its dtypes)
calls the jitted function through `compiled`, which runs the program on that first call too
and checks that the staged results were the same.
"""

from __future__ import annotations

import functools

import numpy as np

import einad as ea
from einad.arrays import library, to_numpy

FLOAT64_RTOL = 1e-9
"""How closely a float64 result of a program matches the staging call's (see `jit_mode`)."""


def compiled(jitted):
    """`jitted`, returning what its compiled program computes. The call that stages a program
    runs `jitted` once more, the program this time, and returns the program's results; the
    staged ones must be the same (`assert_same_results`)."""

    @functools.wraps(jitted)
    def call(*args, **kwargs):
        programs = jitted.cache_size()
        out = jitted(*args, **kwargs)
        if jitted.cache_size() == programs:
            return out
        again = jitted(*args, **kwargs)
        assert_same_results(out, again)
        return again

    return call


def assert_same_results(staged, program):
    """The results of the call that staged a program and of the program: the same pytree, leaf
    types, shapes and dtypes, and values equal to rounding (the program is the optimized one)."""
    leaves, tree = ea.tree_flatten(staged)
    again, tree_again = ea.tree_flatten(program)
    assert tree == tree_again, (tree, tree_again)
    for a, b in zip(leaves, again):
        assert type(a) is type(b), (type(a), type(b))
        if isinstance(a, ea.Tensor):
            continue  # traced arguments: both calls ran the program through the interpreter
        assert tuple(a.shape) == tuple(b.shape) and a.dtype == b.dtype, (a.shape, a.dtype, b.shape, b.dtype)
        if library(a) == "dask":
            continue  # computing it here would break the tests' check that einad stays lazy
        a, b = to_numpy(a), to_numpy(b)
        tol = 1e-4 if a.dtype in (np.float32, np.complex64) else FLOAT64_RTOL
        scale = np.abs(b[np.isfinite(b)]) if b.dtype.kind in "fc" else np.abs(b)
        atol = tol * max(1.0, float(np.max(scale, initial=0.0)))  # inf and nan are compared as such
        np.testing.assert_allclose(a, b, rtol=tol, atol=atol)
