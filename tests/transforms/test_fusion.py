"""einad.transforms.fusion and einad.kernels: ea.jit's llvm backend (issue 25).

The groups a program's elementwise equations form (counted: the fused kernels of a program),
the rules that keep a group correct (a value read elsewhere closes its group; a sum is known
only after its loop; a value read along other axes is read from memory), every kernel step
against numpy's own function, numpy's floating-point warnings, arrays of any layout, the
fallbacks and their reasons, and the cache of compiled kernels. The op, einsum, transform and
mode suites run with this backend too (the `jit_mode` fixture's "fused" mode).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import einad as ea
from einad import kernels
from tests.support.jitting import compiled
from tests.support.numerics import assert_close

pytestmark = pytest.mark.skipif(
    kernels.unavailable() is not None, reason=f"the llvm backend cannot run here: {kernels.unavailable()}"
)

RNG = np.random.default_rng(25)


def chain(x, w, n=40):
    """Benchmark case 7's kind of loss: n small elementwise steps on vectors, then a sum."""
    y = x
    for i in range(n):
        y = [lambda y: y * w, ea.tanh, lambda y: y + x, ea.sin][i % 4](y)
    return ea.sum(y)


def fused(f, *args, **kw):
    """The llvm program of `f` at these arguments."""
    return ea.jit(f, backend="llvm", **kw).lower(*args)


# -- what fuses ------------------------------------------------------------------------------------


def test_a_chain_and_its_gradient_run_as_one_kernel():
    """The forward chain, its sum and the whole reverse pass are one loop over the vectors
    (the backward reads every forward value in the same iteration): one kernel call instead
    of ~120 numpy calls, with the values of the numpy program."""
    x, w = RNG.standard_normal(8), RNG.standard_normal(8)
    vg = ea.value_and_grad(chain, argnums=(0, 1))
    program = fused(vg, x, w)
    assert len(program.kernels) == 1
    assert len(program.kernels[0].equations) == len(program.equations)
    assert program.source.count("kernel0(") == 1 and "einsum" not in program.source.split("kernel0")[0]
    got = compiled(ea.jit(vg, backend="llvm"))(x, w)
    want = ea.jit(vg, backend="numpy")(x, w)
    for a, b in zip(ea.tree_flatten(got)[0], ea.tree_flatten(want)[0]):
        assert_close(a, b, rtol=1e-12)


def test_an_mlp_gradient_fuses_between_its_matrix_products():
    """tanh MLP with a logistic loss: the contractions stay numpy's (BLAS); the elementwise
    work between them is two kernels: the loss with its sum and its derivative (softplus,
    the mean, sigmoid, the scalings) and tanh's derivative with the cotangent."""
    b, d, h = 16, 8, 12
    X, Y = RNG.standard_normal((b, d)), np.sign(RNG.standard_normal((b, 1)))
    W1, W2 = RNG.standard_normal((d, h)), RNG.standard_normal((h, 1))

    def loss(W1, W2):
        return ea.mean(ea.softplus(-Y * (ea.tanh(X @ W1) @ W2)))

    vg = ea.value_and_grad(loss, argnums=(0, 1))
    program = fused(vg, W1, W2)
    assert len(program.kernels) == 2
    assert [len(k.equations) for k in program.kernels] == [8, 3]
    inside = {id(e) for k in program.kernels for e in k.equations}
    outside = sorted(e.op for e in program.equations if id(e) not in inside)
    assert outside == ["einsum"] * 5 + ["tanh"]  # tanh alone between two products: numpy's own loop
    value, grads = compiled(ea.jit(vg, backend="llvm"))(W1, W2)
    want_value, want_grads = ea.value_and_grad(loss, argnums=(0, 1))(W1, W2)
    assert_close(value, want_value, rtol=1e-12)
    for g, w in zip(grads, want_grads):
        assert_close(g, w, rtol=1e-12)


def test_a_single_ufunc_is_left_to_numpy():
    x = RNG.standard_normal(5)
    assert fused(ea.tanh, x).kernels == ()
    assert len(fused(lambda x: ea.tanh(x) + 1.0, x).kernels) == 1
    assert len(fused(ea.sigmoid, x).kernels) == 1  # numpy's stable sigmoid is six passes


def test_numpys_vectorized_functions_stay_numpys_on_long_arrays():
    """numpy computes tanh with its own vectorized loop, a kernel with one C call per element:
    on 64 elements the whole chain is one kernel, on 4096 tanh is numpy's and only the
    arithmetic around it is fused (kernels.numpy_faster)."""
    f = lambda x: ea.tanh(x * 3.0) * 2.0 + 1.0
    short = fused(f, np.ones(64))
    assert [e.op for e in short.kernels[0].equations] == ["multiply", "tanh", "multiply", "add"]
    long = fused(f, np.ones(4096))
    assert [[e.op for e in k.equations] for k in long.kernels] == [["multiply", "add"]]
    assert long.unfused == {"c": "numpy's vectorized tanh is faster on 4096 elements"}
    x = np.linspace(-2, 2, 4096)
    assert_close(compiled(ea.jit(f, backend="llvm"))(x), np.tanh(3 * x) * 2 + 1, rtol=1e-14)


def test_a_loop_of_many_arrays_is_left_to_numpy(monkeypatch):
    """Compiling a kernel of many arrays cost more than it saved (benchmark case m1: LLVM's
    optimizer took 3.3 s for one sum of 90 blocks read from 120 arrays, code generation alone
    0.25-0.7 s, for a kernel no faster than numpy's calls): a loop of more than
    `kernels.ARGS_COMPILED` arrays stays numpy's, with the reason in `unfused`, and its value
    is the same; a loop of few arrays is still a kernel, compiled and optimized."""
    seen = []
    real = kernels._module

    def spy(llvm, ir, vectorize, optimize=True):
        seen.append((ir.count("define "), optimize))
        return real(llvm, ir, vectorize, optimize)

    monkeypatch.setattr(kernels, "_module", spy)
    monkeypatch.setenv("EINAD_CACHE_DIR", "")  # (compiled here, not read from a cache)
    xs = [RNG.standard_normal(64) for _ in range(40)]
    f = lambda *xs: ea.sin(sum(xs[1:], xs[0])) * 2.0
    schedule = fused(f, *xs)
    assert len(schedule.kernels) == 0 and len(schedule.unfused) == 41
    assert set(schedule.unfused.values()) == {
        f"its loop reads and writes 41 arrays (kernels.ARGS_COMPILED: {kernels.ARGS_COMPILED})"
    }
    many = ea.jit(f, backend="llvm")
    assert_close(compiled(many)(*xs), np.sin(np.sum(xs, axis=0)) * 2.0, rtol=1e-13)
    assert seen == [], seen
    few = ea.jit(lambda a, b: ea.sin(a + b) * 2.0, backend="llvm")
    assert_close(compiled(few)(xs[0], xs[1]), np.sin(xs[0] + xs[1]) * 2.0, rtol=1e-13)
    assert seen == [(1, True)], seen
    assert len(fused(lambda *xs: ea.sin(sum(xs[1:], xs[0])) * 2.0, *xs[:31]).kernels) == 1  # 32 arrays


def test_a_value_read_between_closes_its_group():
    """``t = tanh(x)`` is read by a contraction before ``t * t`` is computed: the kernel that
    computes t must run before the contraction, so ``t * t`` starts a second kernel."""
    x, A = RNG.standard_normal((4, 4)), RNG.standard_normal((4, 4))

    def f(x):
        t = ea.tanh(x * 2.0)
        m = t @ A
        return ea.sin(m) * t + t * t

    program = fused(f, x)
    assert len(program.kernels) == 2
    assert_close(
        compiled(ea.jit(f, backend="llvm"))(x),
        np.sin(np.tanh(2 * x) @ A) * np.tanh(2 * x) + np.tanh(2 * x) ** 2,
    )


def test_a_step_that_reads_a_sum_waits_for_its_loop():
    """``x * sum(x ** 3)``: the sum is known only after the loop that adds it up, so the
    product is computed in a later kernel (a kernel reading its own running sum would be
    wrong)."""
    x = np.array([1.0, -2.0, 0.5, 3.0])
    f = lambda x: ea.exp(x) * ea.sum(x**3) + x
    program = fused(f, x)
    assert len(program.kernels) == 2
    assert_close(compiled(ea.jit(f, backend="llvm"))(x), np.exp(x) * np.sum(x**3) + x, rtol=1e-13)
    assert_close(ea.jit(ea.jacfwd(f), backend="llvm")(x), ea.jacfwd(f)(x), rtol=1e-12)


def test_sums_of_different_shapes_are_separate_loops():
    a, b = RNG.standard_normal((4, 1)), RNG.standard_normal((3, 2))
    f = lambda a, b: ea.sum(a) + ea.sum(b) * 2.0 + ea.sum(a * a)
    got = compiled(ea.jit(f, backend="llvm"))(a, b)
    assert_close(got, a.sum() + 2 * b.sum() + (a * a).sum(), rtol=1e-13)
    assert all(k.shape in ((4, 1), (3, 2)) for k in fused(f, a, b).kernels)


def test_chains_that_share_no_array_loop_apart_within_one_kernel():
    """Chains fused side by side because their loops have one shape, reading no array and no
    value in common, are one kernel (one call) with a loop each, so that each loop reads its
    own arrays (thirty of them at once filled one cache set, benchmark m1); chains that read
    one array share the loop that reads it once."""
    xs = [RNG.standard_normal((32, 64)) for _ in range(8)]
    apart = lambda a, b, c, d, e, g, h, i: (a * 2.0 + b, c * d + 1.0, e - g, h / (i + 2.0))
    shared = lambda a, b, c, d, e, g, h, i: (a * 2.0 + b, a * d + 1.0, e - g, h / (e + 2.0))
    for f, loops in ((apart, 4), (shared, 2)):
        program = fused(f, *xs)
        (kernel,) = program.kernels
        assert len(kernels._streams(kernel.spec)) == loops
        heads = [line for line in kernels.module_ir([kernel.spec]).splitlines() if line.startswith("head")]
        assert len(heads) == 2 * loops  # a loop head per axis, two axes each
        got = compiled(ea.jit(f, backend="llvm"))(*xs)
        for a, b in zip(got, f(*xs)):
            assert_close(a, b, rtol=1e-13)


def test_a_transposed_value_is_read_from_memory():
    """``(x * x).T`` read in the same loop would be read at the wrong element: the product
    is written out and read back transposed by a second kernel (its strides)."""
    x, y = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
    f = lambda x, y: ea.sum(ea.sin(ea.einsum("ij->ji", ea.exp(x) * x) + y) * y)
    g = ea.grad(f, argnums=(0, 1))
    got = compiled(ea.jit(g, backend="llvm"))(x, y)
    for a, b in zip(got, ea.grad(f, argnums=(0, 1))(x, y)):
        assert_close(a, b, rtol=1e-12)


def test_a_float32_total_is_added_up_in_double():
    """A float32 accumulator stops growing at 2**24 times its addends (2**24 + 1 is 2**24): a
    kernel's float32 total, as numpy's pairwise sum, keeps every element (a jitted sum of
    2**25 sigmoids of 20.0 gave 16777216)."""
    x = np.ones(1001, np.float32)
    x[0] = 2**24
    got = compiled(ea.jit(lambda x: ea.sum(ea.abs(x) * 2.0), backend="llvm"))(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, 2 * (2**24 + 1000), rtol=1e-6)
    assert len(fused(lambda x: ea.sum(ea.abs(x) * 2.0), x).kernels) == 1


@pytest.mark.parametrize("axis", [0, 1])
def test_a_float32_sum_along_a_kept_axis_is_added_up_in_double(axis):
    """As a total: each element of a float32 sum along kept axes (a partial sum, keepdims)
    keeps every addend (it was added up in its float32 output, and a jitted sum of rows of
    2**24 + 1000 elements, the first 2**24, gave 2 * 2**24)."""
    x = np.ones((1001, 3), np.float32)
    x[0] = 2**24
    x = x if axis == 0 else x.T
    f = lambda x: ea.sum(ea.abs(x) * 2.0, axis=axis, keepdims=True)
    got = compiled(ea.jit(f, backend="llvm"))(x)
    assert got.dtype == np.float32 and got.shape == ((1, 3) if axis == 0 else (3, 1))
    np.testing.assert_allclose(got, np.full(got.shape, 2 * (2**24 + 1000)), rtol=1e-6)
    assert len(fused(f, x).kernels) == 1
    with warnings.catch_warnings():  # beyond float32's range: its inf, quietly (as a total, as eagerly)
        warnings.simplefilter("error")
        half = lambda x: ea.sum(ea.abs(x) * 0.5, axis=axis, keepdims=True)
        assert np.all(compiled(ea.jit(half, backend="llvm"))(np.full(x.shape, 3e38, np.float32)) == np.inf)


def test_broadcast_operands_and_partial_sums():
    """A bias broadcast along rows, a scalar, and the gradient summed back to each operand's
    shape (a sum along the rows, a total) in the same loop as the forward."""
    X, bias, s = RNG.standard_normal((6, 5)), RNG.standard_normal(5), 0.7

    def f(X, bias, s):
        return ea.sum(ea.tanh(X + bias) * s)

    g = ea.grad(f, argnums=(0, 1, 2))
    program = fused(g, X, bias, s)
    assert len(program.kernels) == 1
    got = compiled(ea.jit(g, backend="llvm"))(X, bias, s)
    for a, b in zip(got, ea.grad(f, argnums=(0, 1, 2))(X, bias, s)):
        assert_close(a, b, rtol=1e-12)


# -- every step against numpy --------------------------------------------------------------------

SPECIAL = np.array(
    [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, 1e-300, 700.0, -745.0, 1e308, np.inf, -np.inf, np.nan]
)


def _values(dtype, n=64):
    rng = np.random.default_rng(1)
    x = np.concatenate([SPECIAL, rng.standard_normal(n) * 3, rng.uniform(-1, 1, n)])
    with np.errstate(over="ignore"):
        return x.astype(dtype)


UNARY_STEPS = sorted(
    kernels.OPS
    - kernels.PREDICATES
    - {"add", "subtract", "multiply", "divide", "power", "maximum", "minimum"}
    - {"arctan2", "hypot", "logaddexp", "where", "astype"}
) + ["isnan", "isinf", "isfinite"]
BINARY_STEPS = sorted(
    {"add", "subtract", "multiply", "divide", "power", "maximum", "minimum", "arctan2", "hypot", "logaddexp"}
    | (kernels.PREDICATES - {"isnan", "isinf", "isfinite"})
)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_kernel_step_computes_numpys_function(dtype):
    """Each step of `kernels.OPS` in one module (one compile), on special values (signed zeros,
    subnormals, overflowing, infinite and NaN operands) and random ones, against the
    primitive's numpy implementation: equal to a few units in the last place, NaN where numpy
    gives NaN, the same infinities and signs."""
    from einad.rules.elementwise import PRIMITIVES

    dt = np.dtype(dtype)
    x = _values(dt)
    y = np.roll(x, 5)
    specs, expected = [], []
    for op in UNARY_STEPS + BINARY_STEPS:
        binary = op in BINARY_STEPS
        args = (kernels.Arg("a0", dt, (0,)),) + ((kernels.Arg("a1", dt, (0,)),) if binary else ())
        out_dt = np.dtype(np.bool_) if op in kernels.PREDICATES else dt
        steps = (kernels.Step("r", op, ("a0", "a1") if binary else ("a0",), out_dt, dt),)
        specs.append(kernels.KernelSpec((x.size,), args, steps, (kernels.Out("r", (x.size,), out_dt),)))
        with np.errstate(all="ignore"):
            expected.append(PRIMITIVES[op].impl(*((x, y) if binary else (x,))))
    module = kernels.compile_kernels(specs)
    tol = 4 * np.finfo(dt).eps
    for op, spec, k, want in zip(UNARY_STEPS + BINARY_STEPS, specs, module.kernels, expected):
        out = np.empty(x.size, spec.outs[0].dtype)
        args = (x, y) if op in BINARY_STEPS else (x,)
        assert k.fn(*args, out) == 0, op  # unchecked steps report nothing
        if want.dtype == np.bool_:
            np.testing.assert_array_equal(out, want, err_msg=op)
            continue
        np.testing.assert_array_equal(np.isnan(out), np.isnan(want), err_msg=op)
        np.testing.assert_array_equal(np.isinf(out), np.isinf(want), err_msg=op)
        np.testing.assert_array_equal(np.signbit(out[want == 0]), np.signbit(want[want == 0]), err_msg=op)
        finite = np.isfinite(want)
        np.testing.assert_array_equal(
            np.signbit(out[finite & (want != 0)]), np.signbit(want[finite & (want != 0)]), err_msg=op
        )
        np.testing.assert_allclose(
            out[finite], want[finite], rtol=tol, atol=np.finfo(dt).tiny * 4, err_msg=op
        )


def test_where_casts_and_comparisons_mixing_dtypes():
    """float32 with a float64 literal of numpy's weak kind, booleans read as numbers, int
    operands converted as numpy converts them, and comparisons made in the common dtype."""
    x = np.linspace(-2, 2, 9, dtype=np.float32)
    i = np.arange(9) - 4
    mask = x > 0

    def f(x, i, mask):
        return ea.where(mask, x * 0.1 + i, (i > x).astype(np.float32) - x)

    got = compiled(ea.jit(f, backend="llvm"))(x, i, mask)
    want = np.where(mask, x * 0.1 + i, (i > x).astype(np.float32) - x)
    assert got.dtype == want.dtype == np.float64
    assert_close(got, want, rtol=1e-7)
    assert len(fused(f, x, i, mask).kernels) == 1


def test_byte_swapped_integer_arrays_are_read_as_numpy_reads_them():
    """A big-endian integer array (read from a file, say) is not a kernel's to load: its bytes
    would be taken in the machine's order (1 read as 16777216)."""
    y = np.linspace(0.0, 1.0, 4)
    f = lambda x, y: ea.where(x > 1, y * 2.0, y - x)
    for dt in (">i4", ">i8", ">u2"):
        x = np.arange(4, dtype=np.dtype(dt))
        got = compiled(ea.jit(f, backend="llvm"))(x, y)
        np.testing.assert_array_equal(got, np.where(x > 1, y * 2.0, y - x))


def test_a_zero_dimensional_uint64_argument_keeps_its_value():
    """A 0-d integer comes to a kernel by value: a uint64 above 2**63 is not read as negative."""
    y = np.array([1.0, 2.0])
    f = lambda n, y: ea.exp(y * 0.0) * n + y
    for n in (np.array(2**63 + 2**62, np.uint64), np.array(2**64 - 1, np.uint64), np.array(-7)):
        jf = ea.jit(f, backend="llvm")
        assert len(jf.lower(n, y).kernels) == 1
        got = compiled(jf)(n, y)
        np.testing.assert_array_equal(got, np.exp(y * 0.0) * n + y)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.uint16])
def test_a_narrow_zero_dimensional_integer_argument_is_cast_by_a_kernel(dtype):
    """A 0-d integer narrower than 64 bits comes as an i64 too; a cast of it to float (the
    mean's first step: `ea.mean` of an int32 0-d array) was compiled from an i64 to an i32,
    which LLVM refused (a RuntimeError from the IR parser)."""
    n = np.array(np.iinfo(dtype).max - 2, dtype)
    y = np.array([1.0, 2.0])
    f = lambda n, y: n.astype(np.float64) * y + ea.mean(n)
    jf = ea.jit(f, backend="llvm")
    assert len(jf.lower(n, y).kernels) == 1
    got = compiled(jf)(n, y)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, n.astype(np.float64) * y + np.mean(n))


def test_a_cast_of_a_float16_literal_is_left_to_numpy():
    """A float16 gradient seed times a number folds to a float16 literal, cast to float64 for
    the rest: a kernel step reading it as float16 wrote IR LLVM refused (a RuntimeError)."""
    x = np.array([1.5, -2.0])
    g = ea.grad(lambda x: ea.relu(ea.sum(x)).astype(np.float16) * 2.5)
    program = fused(g, x)
    assert any("astype" in str(e) and "2.5" in str(e) for e in program.equations)
    for v, want in ((x, [0.0, 0.0]), (-x, [2.5, 2.5])):  # relu' of the sum, times 2.5
        got = compiled(ea.jit(g, backend="llvm"))(v)
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, want)


# -- numpy's warnings --------------------------------------------------------------------------------


def test_the_users_steps_warn_as_numpy_does_and_the_rules_steps_do_not():
    """log(0) in the user's chain warns "divide by zero" on every call (numpy computes the
    group again when a kernel saw an infinity, so the message is numpy's own); errstate's
    "raise" raises; sqrt's derivative at 0 (a rule's step) stays quiet."""
    f = ea.jit(lambda x: ea.sum(ea.log(x) * 2.0 + x), backend="llvm")
    x = np.array([0.0, 1.0, 2.0])
    assert len(f.lower(np.ones(3)).kernels) == 1
    for _ in range(3):
        with pytest.warns(RuntimeWarning, match="divide by zero encountered in log"):
            assert f(x) == -np.inf
    with np.errstate(divide="raise"), pytest.raises(FloatingPointError):
        f(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f(np.ones(3)) == 3.0
        g = ea.jit(ea.grad(lambda x: ea.sum(ea.sqrt(x) * 3.0 + x)), backend="llvm")
        for _ in range(2):
            np.testing.assert_array_equal(g(np.zeros(2)), np.full(2, np.inf))


def test_nan_inputs_give_numpys_values_without_warnings():
    """A NaN or an infinity given (not made) in the user's steps: the kernel's check fires,
    numpy computes the group again and finds nothing to warn about."""
    x = np.array([np.nan, 1.0, -np.inf, np.inf])
    f = ea.jit(lambda x: ea.exp(-x) * 2.0 - x, backend="llvm")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(2):
            np.testing.assert_array_equal(f(x), np.exp(-x) * 2.0 - x)


# -- arrays of any layout ------------------------------------------------------------------------


def test_strided_reversed_broadcast_and_misaligned_arrays():
    base = RNG.standard_normal((6, 8))
    raw = np.zeros(6 * 8 * 8 + 1, np.uint8)[1:].view(np.float64).reshape(6, 8)
    raw[...] = base
    assert not raw.flags.aligned
    layouts = {
        "transposed": base.T.copy().T,
        "every other column, reversed": np.ones((6, 16))[:, ::-2] * base,
        "broadcast row": np.broadcast_to(base[0], (6, 8)),
        "misaligned": raw,
        "fortran": np.asfortranarray(base),
    }
    f = ea.jit(lambda a, b: ea.tanh(a) * b + a, backend="llvm")
    for name, a in layouts.items():
        for b in (base, a):
            np.testing.assert_allclose(f(a, b), np.tanh(a) * b + a, rtol=1e-14, atol=1e-15, err_msg=name)
    assert len(f.lower(base, base).kernels) == 1


def test_zero_sized_and_zero_dimensional_programs():
    f = ea.jit(lambda x, s: ea.sum(ea.exp(x) * s) + s * s, backend="llvm")
    assert_close(f(np.ones((0, 3)), 2.0), 4.0)
    assert_close(f(np.ones((2, 3)), 2.0), 12 * np.e + 4.0)
    g = ea.jit(lambda a, b: ea.sin(a) * b + a, backend="llvm")
    assert len(g.lower(1.5, 2.0).kernels) == 1
    assert_close(compiled(g)(1.5, 2.0), np.sin(1.5) * 2.0 + 1.5)


# -- backends and fallbacks ----------------------------------------------------------------------


def test_backend_choice_and_the_reasons_for_numpy():
    x = RNG.standard_normal(4)
    f = lambda x: ea.exp(x) * 2.0 + 1.0
    assert ea.jit(f).lower(x).backend == "llvm"
    numpy_program = ea.jit(f, backend="numpy").lower(x)
    assert (numpy_program.backend, numpy_program.kernels, numpy_program.fallback) == ("numpy", (), None)
    with pytest.raises(ValueError, match="backend"):
        ea.jit(f, backend="cuda")
    z = ea.jit(lambda z: ea.exp(z) * 2.0 + z, backend="llvm").lower(x + 1j)
    assert z.kernels == () and "complex128" in z.unfused["b"]
    k = ea.jit(lambda i: (i * 2 + 1) * 3, backend="llvm").lower(np.arange(3))
    assert k.kernels == () and "int64" in k.unfused["b"]


def test_without_llvmlite_jit_falls_back_and_says_why(monkeypatch):
    monkeypatch.setattr(
        kernels, "unavailable", lambda: "llvmlite is not installed (pip install 'einad[fast]')"
    )
    x = RNG.standard_normal(4)
    program = ea.jit(lambda x: ea.exp(x) * 2.0 + 1.0).lower(x)
    assert (program.backend, program.kernels) == ("numpy", ())
    assert "llvmlite is not installed" in program.fallback
    with pytest.raises(ImportError, match="llvmlite is not installed"):
        ea.jit(ea.exp, backend="llvm")


def test_other_libraries_run_their_own_program():
    torch = pytest.importorskip("torch", reason="torch is not installed")
    x = torch.linspace(-1, 1, 5, dtype=torch.float64)
    program = ea.jit(lambda x: ea.exp(x) * 2.0 + 1.0).lower(x)
    assert program.kernels == () and "torch" in program.fallback
    out = ea.jit(lambda x: ea.exp(x) * 2.0 + 1.0)(x)
    assert isinstance(out, torch.Tensor)


# -- the cache of compiled kernels ---------------------------------------------------------------


def test_compiled_kernels_are_cached_across_processes(tmp_path, monkeypatch):
    """A kernel compiled in one process is stored under EINAD_CACHE_DIR; another process (or
    this one) compiling the same kernel loads it, and computes the same values."""
    monkeypatch.setenv("EINAD_CACHE_DIR", str(tmp_path))
    script = textwrap.dedent(
        """
        import numpy as np, einad as ea
        f = ea.jit(lambda x: ea.sum(ea.tanh(x) * 1.5 + x))
        print(len(f.lower(np.ones(7)).kernels), float(f(np.arange(7.0))))
        """
    )
    env = {**os.environ, "EINAD_CACHE_DIR": str(tmp_path), "PYTHONPATH": os.getcwd()}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    kernels_, value = out.stdout.split()
    assert kernels_ == "1"
    stored = list((tmp_path / "kernels").rglob("*.o"))
    assert len(stored) == 1
    f = ea.jit(lambda x: ea.sum(ea.tanh(x) * 1.5 + x))
    program = f.lower(np.ones(7))
    assert program.kernels[0].compiled.cached
    assert (
        float(f(np.arange(7.0)))
        == float(value)
        == pytest.approx(np.sum(np.tanh(np.arange(7.0)) * 1.5 + np.arange(7.0)))
    )
    monkeypatch.setenv("EINAD_CACHE_DIR", "")
    assert kernels.cache_dir() is None


# -- random programs -----------------------------------------------------------------------------

_SHAPES = [(4, 3), (3,), (4, 1), (), (1, 3)]
_UNARY = ["tanh", "sin", "sigmoid", "softplus", "square", "negative", "abs", "relu", "cos"]
_BINARY = ["add", "subtract", "multiply", "maximum", "minimum"]


def _random_program(seed):
    """A random chain of elementwise steps on broadcasting shapes, with totals, sums along an
    axis, transposes and a matrix product among them (which close groups), and 1-2 outputs."""
    rng = np.random.default_rng(seed)
    shapes = [_SHAPES[i] for i in rng.integers(0, len(_SHAPES), rng.integers(1, 4))]
    args = [rng.standard_normal(s) for s in shapes]
    steps = []
    for _ in range(rng.integers(2, 25)):
        i, j = (int(k) for k in rng.integers(0, len(shapes), 2))
        kind = rng.choice(["unary", "binary", "binary", "where", "sum", "axis", "matmul", "transpose"])
        if kind == "unary":
            steps.append((kind, str(rng.choice(_UNARY)), i))
            shapes.append(shapes[i])
        elif kind in ("binary", "where"):
            try:
                shape = np.broadcast_shapes(shapes[i], shapes[j])
            except ValueError:
                continue
            steps.append((kind, str(rng.choice(_BINARY)), i, j))
            shapes.append(shape)
        elif kind == "sum":
            steps.append((kind, i))
            shapes.append(())
        elif kind in ("axis", "transpose") and len(shapes[i]) == 2:
            axis = int(rng.integers(0, 2))
            steps.append((kind, i, axis))
            shapes.append(shapes[i][:axis] + shapes[i][axis + 1 :] if kind == "axis" else shapes[i][::-1])
        elif kind == "matmul" and shapes[i] == (4, 3):
            steps.append((kind, i))
            shapes.append((4, 4))
    n = len(args)
    outs = sorted(set(rng.integers(n, len(shapes), 2).tolist())) if len(shapes) > n else [0]

    def f(*xs):
        v = list(xs)
        for step in steps:
            kind = step[0]
            if kind == "unary":
                v.append(getattr(ea, step[1])(v[step[2]]))
            elif kind == "binary":
                v.append(getattr(ea, step[1])(v[step[2]], v[step[3]] * 0.7))
            elif kind == "where":
                v.append(ea.where(v[step[2]] > 0.1, v[step[2]], v[step[3]] * 1.3))
            elif kind == "sum":
                v.append(ea.sum(v[step[1]]))
            elif kind == "axis":
                v.append(ea.sum(v[step[1]], axis=step[2]))
            elif kind == "transpose":
                v.append(v[step[1]].T)
            else:
                v.append(v[step[1]] @ v[step[1]].T)
        return [v[o] for o in outs]

    return f, args


def test_random_programs_and_their_gradients_match_the_numpy_program():
    """Random elementwise programs (the grouping rules' corner cases: broadcasts, totals read by
    later steps, partial sums, transposed reads, values read by a matrix product in between),
    forward and gradient: the llvm program gives what the numpy program gives, on both calls
    (the staging one and the compiled one). A search of 1500 such programs found no difference."""
    fused_kernels = 0
    for seed in range(30):
        f, args = _random_program(seed)
        loss = lambda *xs, f=f: sum(ea.sum(o * (k + 1.0)) for k, o in enumerate(f(*xs)))
        nums = tuple(range(len(args)))
        for g in (f, ea.grad(loss, argnums=nums)):
            want, got = ea.jit(g, backend="numpy"), ea.jit(g, backend="llvm")
            fused_kernels += len(got.lower(*args).kernels)
            for _ in range(2):
                for a, b in zip(want(*args), compiled(got)(*args)):
                    assert np.shape(a) == np.shape(b) and np.asarray(a).dtype == np.asarray(b).dtype
                    np.testing.assert_allclose(b, a, rtol=1e-11, atol=1e-12, err_msg=str(seed))
    assert fused_kernels > 40
