"""einad.rules.linear: the front ends written as one einsum (matmul and @, dot, inner, outer,
tensordot, transpose, moveaxis, trace, diagonal, sum) and the inputs the helpers take as numpy
does: values against numpy, VJPs against central differences (eagerly and under ea.jit); numpy's
accumulator dtypes for integer and boolean reductions; a contracted size-1 dimension against
size n refused; axes out of range, repeated or not integers refused as numpy refuses them, with
no internal index letter in a message; and on every array library (`lib`): values and
gradients equal einad's on numpy, results of the inputs' library."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
from numpy.exceptions import AxisError

import einad as ea
import einad.transforms.batching
from einad import ops
from einad.rules import einsum as einsum_rules
from einad.rules import linear as linear_rules
from tests.support.checks import (
    case_params,
    check_lib,
    forget_rules,
    random_operands,
    vjp_all,
)
from tests.support.jitting import compiled
from tests.support.numerics import (
    assert_close,
    check_op,
)

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted


# -- the linear helpers ------------------------------------------------------------------------------


MATMUL_SHAPES = [
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)),
    ((1, 2, 3), (5, 3, 4)),
    ((6, 1, 2, 3), (5, 3, 4)),
    ((3,), (5, 3, 4)),
    ((5, 2, 3), (3,)),
]


@both_modes
@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes):
    a, b = random_operands(shapes)
    check_op(ea.matmul, np.matmul, a, b)


@pytest.mark.parametrize(
    ("shapes", "subscripts"),
    [
        (((3,), (3,)), "j,j->"),
        (((3,), (2, 3, 4)), "j,ajk->ak"),
        (((5, 2, 3), (3,)), "aij,j->ai"),
        (((5, 2, 3), (3, 4)), "aij,jk->aik"),
    ],
    ids=str,
)
def test_matmul_stages_one_einsum_in_numpys_notation(shapes, subscripts):
    """matmul is one einsum equation (no reshapes or transposes around it), written in numpy's
    matmul notation (j for the contracted axis, i and k for the kept ones): its staged program
    reads as the numpy documentation does; the value is numpy's.

    Kills: matmul 66, 76, 86, 94 (other letters: the same value, another program)."""
    a, b = random_operands(shapes)
    graph = ea.make_graph(ea.matmul)(a, b)
    assert [e.op for e in graph.equations] == ["einsum"]
    assert f"= einsum[{subscripts}] a b" in str(graph), str(graph)
    assert_close(graph(a, b), np.matmul(a, b))


@both_modes
@pytest.mark.parametrize("shapes", MATMUL_SHAPES[:7], ids=str)
def test_matmul_operator(shapes):
    a, b = random_operands(shapes)
    check_op(lambda a, b: a @ b, np.matmul, a, b)  # Tensor @ Tensor inside vjp
    check_op(lambda a: a @ b, lambda a: a @ b, a)  # Tensor @ ndarray
    check_op(lambda b: a @ b, lambda b: a @ b, b)  # ndarray @ Tensor
    out = ea.tensor(a) @ ea.tensor(b)
    assert isinstance(out, ea.Tensor)
    assert_close(out.numpy(), a @ b)


@both_modes
@pytest.mark.parametrize(
    "shapes",
    [
        ((), (3,)),
        ((3,), ()),
        ((3,), (3,)),
        ((2, 3), (3,)),
        ((3,), (3, 4)),
        ((2, 3), (3, 4)),
        ((2, 3, 4), (5, 4, 6)),
        ((2, 3, 4), (4,)),
    ],
    ids=str,
)
def test_dot(shapes):
    a, b = random_operands(shapes)
    check_op(ea.dot, np.dot, a, b)


@both_modes
@pytest.mark.parametrize(
    "shapes", [((), (3,)), ((3,), (3,)), ((2, 3), (3,)), ((2, 3), (4, 3)), ((2, 3, 4), (5, 4))], ids=str
)
def test_inner(shapes):
    a, b = random_operands(shapes)
    check_op(ea.inner, np.inner, a, b)


@both_modes
@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 3), (4,)), ((), (3,))], ids=str)
def test_outer(shapes):
    a, b = random_operands(shapes)
    check_op(ea.outer, np.outer, a, b)


@both_modes
@pytest.mark.parametrize(
    "shapes, axes",
    [
        (((2, 3, 4), (3, 4, 5)), 2),
        (((2, 3), (3, 4)), 1),
        (((2, 3), (4, 5)), 0),
        (((2, 3, 4), (4, 3, 5)), ([1, 2], [1, 0])),
        (((2, 3), (3, 2)), ([0], [1])),
        (((3, 4), (4, 3)), ((0, 1), (1, 0))),
        (((2, 3, 4), (4, 5)), (-1, 0)),
    ],
    ids=str,
)
def test_tensordot(shapes, axes):
    a, b = random_operands(shapes)
    check_op(lambda a, b: ea.tensordot(a, b, axes), lambda a, b: np.tensordot(a, b, axes), a, b)


@both_modes
def test_tensordot_default_axes_is_two():
    a, b = random_operands([(2, 3, 4), (3, 4, 5)])
    check_op(ea.tensordot, np.tensordot, a, b)


@both_modes
@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1)], ids=str)
def test_transpose(axes):
    (x,) = random_operands([(2, 3, 4)])
    check_op(lambda x: ea.transpose(x, axes), lambda x: np.transpose(x, axes), x)


@both_modes
def test_transpose_method_and_T():
    (x,) = random_operands([(2, 3, 4)])
    check_op(lambda x: x.T, lambda x: x.T, x)
    check_op(lambda x: x.transpose(), lambda x: x.transpose(), x)
    check_op(lambda x: x.transpose(1, 0, 2), lambda x: x.transpose(1, 0, 2), x)
    check_op(lambda x: x.transpose((2, 0, 1)), lambda x: x.transpose((2, 0, 1)), x)
    assert_close(ea.tensor(x).T.numpy(), x.T)


@both_modes
def test_transpose_method_with_none_reverses_the_axes_as_numpys():
    """``t.transpose(None)`` is numpy's (and JAX's) reversal; einad iterated None (a TypeError)."""
    (x,) = random_operands([(2, 3, 4)])
    check_op(lambda x: x.transpose(None), lambda x: x.transpose(None), x)


DIAG_CASES = [
    ((3, 3), {}),
    ((3, 4), {}),
    ((4, 3), {}),
    ((3, 3), {"offset": 1}),
    ((3, 3), {"offset": -1}),
    ((3, 4), {"offset": 2}),
    ((3, 4), {"offset": -2}),
    ((3, 3), {"offset": 5}),
    ((3, 3), {"offset": -5}),
    ((2, 3, 3, 2), {"axis1": 1, "axis2": 2}),  # two axes left
    ((3, 3, 3), {"axis1": 1, "axis2": 2}),
    ((3, 2, 3), {"axis1": 0, "axis2": 2}),
    ((3, 2, 4), {"axis1": 2, "axis2": 0, "offset": 1}),
    ((3, 4, 3), {"axis1": -1, "axis2": -3, "offset": -1}),
]


@both_modes
@pytest.mark.parametrize("shape, kwargs", DIAG_CASES, ids=str)
def test_trace(shape, kwargs):
    (x,) = random_operands([shape])
    check_op(lambda x: ea.trace(x, **kwargs), lambda x: np.trace(x, **kwargs), x)


@both_modes
@pytest.mark.parametrize("shape, kwargs", DIAG_CASES, ids=str)
def test_diagonal(shape, kwargs):
    (x,) = random_operands([shape])
    check_op(lambda x: ea.diagonal(x, **kwargs), lambda x: np.diagonal(x, **kwargs), x)


@both_modes
def test_trace_gradient_is_the_identity():
    (x,) = random_operands([(4, 4)])
    assert_close(ea.grad(ea.trace)(x), np.eye(4))
    assert_close(ea.grad(lambda x: ea.trace(x, offset=1))(x), np.eye(4, k=1))


@both_modes
@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"axis": 0},
        {"axis": -1},
        {"axis": (0, 2)},
        {"axis": 1, "keepdims": True},
        {"keepdims": True},
        {"axis": ()},
        {"axis": (-1, 0), "keepdims": True},
    ],
    ids=str,
)
def test_sum(kwargs):
    (x,) = random_operands([(2, 3, 4)])
    check_op(lambda x: ea.sum(x, **kwargs), lambda x: np.sum(x, **kwargs), x)
    check_op(lambda x: x.sum(**kwargs), lambda x: np.sum(x, **kwargs), x)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_a_narrow_sum_adds_as_numpys_sum_does(dtype):
    """numpy's einsum adds a float32 row up element after element (2**20 uniform values: off by
    ~7e-6 of the total); a float32 or complex64 einsum that only sums goes to np.sum (pairwise,
    ~7e-8), eagerly and in a jitted numpy program; a transpose stays a view."""
    x = np.random.default_rng(0).uniform(0.0, 1.0, (3, 2**20)).astype(dtype)
    exact = x.astype(np.complex128 if dtype == np.complex64 else np.float64).sum(axis=1)
    for got in (
        ea.sum(x, axis=1),
        ea.einsum("ij->i", x),
        ea.einsum("ji->i", x.T),
        ea.sum(x[:, None, :], axis=(1, 2)),
        ea.jit(lambda v: ea.sum(v, axis=-1), backend="numpy")(x),
    ):
        got = np.asarray(got)
        assert got.dtype == dtype
        np.testing.assert_allclose(got, exact, rtol=1e-6)
    assert_close(
        ea.einsum("ijk->kj", x[:, :6].reshape(3, 2, 3)), np.einsum("ijk->kj", x[:, :6].reshape(3, 2, 3))
    )
    assert np.shares_memory(np.asarray(ea.einsum("ij->ji", x)), x)
    # fewer addends than NARROW_SUM_MIN stay on einsum (np.sum's call costs microseconds more):
    # bit for bit einsum's sums below it, np.add.reduce's from it
    rng = np.random.default_rng(3)
    n = einsum_rules.NARROW_SUM_MIN
    small, large = (rng.uniform(0.0, 1.0, (3, m)).astype(dtype) for m in (n - 96, n + 904))
    np.testing.assert_array_equal(np.asarray(ea.sum(small, axis=1)), np.einsum("ij->i", small))
    np.testing.assert_array_equal(np.asarray(ea.sum(large, axis=1)), np.add.reduce(large, axis=1))
    assert not np.array_equal(np.einsum("ij->i", small), np.add.reduce(small, axis=1))  # (they differ)


@both_modes
def test_sum_gradient_is_ones_broadcast():
    (x,) = random_operands([(2, 3)])
    assert_close(ea.grad(ea.sum)(x), np.ones((2, 3)))
    assert_close(
        ea.grad(lambda x: ea.sum(ea.sum(x, axis=0) * np.array([1.0, 2.0, 3.0])))(x),
        np.tile([1.0, 2.0, 3.0], (2, 1)),
    )


A = np.random.default_rng(8).standard_normal((2, 3, 4))
B = np.random.default_rng(9).standard_normal((2, 2, 4))


# name: (f(m, *args) written once for m = einad and m = numpy, args)
MOVEAXIS = {
    "moveaxis": (lambda m, x: m.moveaxis(x, 0, -1), (A,)),
    "moveaxis lists": (lambda m, x: m.moveaxis(x, [0, 1], [-1, 0]), (A,)),
}


@both_modes
@pytest.mark.parametrize(("check", "name"), case_params(MOVEAXIS, float32=["moveaxis"]))
def test_moveaxis(check, name):
    check(*MOVEAXIS[name])


@both_modes
def test_python_numbers_take_the_arrays_dtype_and_library(lib, jit_mode):
    """A Python number among einsum's operands is an array of the dtype numpy's promotion gives it
    next to the arrays (float32 stays float32) and of the arrays' library, eagerly and under ea.jit."""
    x = np.arange(1.0, 4.0, dtype=np.float32)
    f = lambda x: ea.einsum("i,->i", x, 2.5)
    out = compiled(ea.jit(f))(lib.asarray(x)) if jit_mode != "eager" else f(lib.asarray(x))
    check_lib(lib, out, x * np.float32(2.5), dtype=np.float32)


@both_modes
def test_python_numbers_are_made_the_arrays_library_before_the_contraction(monkeypatch, jit_mode):
    """The number is made an array of the other operands' library where einsum meets it, so the
    contraction is never handed a numpy 0-d array beside them (which it would turn back into a
    number first)."""
    strict = pytest.importorskip("array_api_strict")
    mixed = []
    real = einsum_rules.namespace

    def spy(*arrays):
        numpy = [type(a) is np.ndarray for a in arrays]
        mixed.append(any(numpy) and not all(numpy))
        return real(*arrays)

    monkeypatch.setattr(einsum_rules, "namespace", spy)
    f = lambda x: ea.einsum("i,->i", x, 2.5)
    x = strict.asarray(np.arange(1.0, 4.0))
    compiled(ea.jit(f))(x) if jit_mode != "eager" else f(x)
    assert mixed and not any(mixed)


# -- inputs as numpy takes them -------------------------------------------------------------


def run(jit_mode, f, *args):
    """`f(*args)` as a numpy array, eagerly or compiled by ea.jit."""
    if jit_mode != "eager":
        return np.asarray(compiled(ea.jit(f))(*args))
    return np.asarray(f(*args))


# A quoted single letter ('j'), or subscripts ("ab,bc->ac"): what a helper's own einsum would show.
INTERNAL = re.compile(r"'[^\W\d_]'|\b[^\W\d_]+(,[^\W\d_]*)*->")


def assert_no_internal_letters(err, written=""):
    """`err` has a message, which names no index letter but those in `written` (the user's)."""
    msg = str(err)
    assert msg.strip(), f"{type(err).__name__} without a message"
    for c in written:
        msg = msg.replace(repr(c), "")
    assert not INTERNAL.search(msg), f"the message names einad's own index letters: {err}"
    assert "invalid literal for int()" not in msg, msg


# -- integer and boolean reductions -------------------------------------------------------------


def _tensor(x):
    """`x` as a Tensor (under ea.jit it already is one), to call its methods."""
    return x if isinstance(x, ea.Tensor) else ea.tensor(x)


# name: (einad call, numpy reference); numpy's dtype is the reference dtype.
REDUCTIONS = {
    "sum": (lambda x: ea.sum(x), np.sum),
    "sum axis": (lambda x: ea.sum(x, axis=0), lambda x: np.sum(x, axis=0)),
    "sum keepdims": (lambda x: ea.sum(x, axis=1, keepdims=True), lambda x: np.sum(x, 1, keepdims=True)),
    "mean": (lambda x: ea.mean(x), np.mean),
    "mean axis": (lambda x: ea.mean(x, axis=1), lambda x: np.mean(x, axis=1)),
    "var": (lambda x: ea.var(x), np.var),
    "var ddof": (lambda x: ea.var(x, axis=0, ddof=1), lambda x: np.var(x, axis=0, ddof=1)),
    "trace": (lambda x: ea.trace(x), np.trace),
    "trace offset": (lambda x: ea.trace(x, offset=1), lambda x: np.trace(x, offset=1)),
    "prod": (lambda x: ea.prod(x, axis=0), lambda x: np.prod(x, axis=0)),
    "max": (lambda x: ea.max(x, axis=1), lambda x: np.max(x, axis=1)),
    "min": (lambda x: ea.min(x), np.min),
    "Tensor.sum": (lambda x: _tensor(x).sum(axis=0), lambda x: np.sum(x, axis=0)),
    "Tensor.mean": (lambda x: _tensor(x).mean(), np.mean),
}


# numpy has none of these; integers and booleans are computed in float64, as numpy's mean does.
def _shifted(x, axis):
    """x minus its maximum along `axis`, and the log of the sum of its exponentials."""
    s = x - np.max(x, axis=axis, keepdims=True)
    return s, np.log(np.sum(np.exp(s), axis=axis, keepdims=True))


STABLE = {
    "logsumexp": (lambda x: ea.logsumexp(x, axis=0), lambda x: np.max(x, 0) + _shifted(x, 0)[1][0]),
    "softmax": (lambda x: ea.softmax(x), lambda x: np.exp(np.subtract(*_shifted(x, -1)))),
    "log_softmax": (lambda x: ea.log_softmax(x), lambda x: np.subtract(*_shifted(x, -1))),
}


def _integers(dtype):
    """A 3x3 array of `dtype` whose sums overflow `dtype` (for int8 and uint8) and whose extremes tie."""
    if dtype == np.bool_:
        return np.array([[True, False, True], [True, True, False], [False, True, True]])
    info = np.iinfo(dtype)
    hi, lo = info.max, info.min
    return np.array([[hi, hi - 1, 0], [1, hi, lo + 1], [hi, 2, 1]], dtype=dtype)


DTYPES = [np.int8, np.int32, np.uint8, np.bool_]


@both_modes
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_integer_and_boolean_reductions_use_numpy_accumulator_dtypes(name, dtype, jit_mode):
    f, ref = REDUCTIONS[name]
    x = _integers(dtype)
    expected = np.asarray(ref(x))
    out = run(jit_mode, lambda x: f(x), x)
    assert out.dtype == expected.dtype, (
        f"{name}({np.dtype(dtype).name}): {out.dtype}, numpy: {expected.dtype}"
    )
    np.testing.assert_allclose(out, expected, rtol=1e-12)


@both_modes
def test_boolean_sum_counts_and_int8_sums_do_not_overflow(lib, jit_mode):
    """numpy's accumulators on every library, eagerly and under ea.jit: a boolean sum counts in
    int64, int8 sums and traces do not wrap, the mean of integers is float64."""

    def run_lib(f, x):
        return compiled(ea.jit(f))(lib.asarray(x)) if jit_mode != "eager" else f(lib.asarray(x))

    a = np.array([[100, 100], [100, 27]], dtype=np.int8)
    check_lib(lib, run_lib(ea.sum, a), np.sum(a))
    check_lib(lib, run_lib(ea.trace, a), np.trace(a))
    mask = np.array([True, True, False, True])
    check_lib(lib, run_lib(ea.sum, mask), np.int64(3))
    big = np.full((4, 4), 100, dtype=np.int8)
    check_lib(lib, run_lib(ea.trace, big), np.int64(400))
    check_lib(lib, run_lib(ea.sum, big), np.int64(1600))
    check_lib(lib, run_lib(ea.mean, big), np.float64(100.0))


@both_modes
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", sorted(STABLE))
def test_stable_reductions_of_integers_are_float64(name, dtype, jit_mode):
    f, ref = STABLE[name]
    x = _integers(dtype)
    out = run(jit_mode, f, x)
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, ref(x.astype(np.float64)), rtol=1e-12)


@both_modes
def test_float_reductions_keep_their_dtype(jit_mode):
    for dtype in (np.float16, np.float32, np.complex64):
        x = np.ones((3, 3), dtype)
        for name in ("sum", "mean", "trace", "prod"):
            expected = getattr(np, name)(x).dtype
            assert run(jit_mode, getattr(ea, name), x).dtype == expected, (name, dtype)


# -- contracted dimensions of size 1 -------------------------------------------------------------

# name: (einad call, numpy reference, [(shapes, the axes of each that einad names as differing)])
CONTRACTIONS = {
    "matmul": (
        ea.matmul,
        np.matmul,
        [
            (((2, 1), (3, 4)), (1, 0)),
            (((2, 3), (1, 4)), (1, 0)),
            (((1,), (3,)), (0, 0)),
            (((5, 2, 1), (3,)), (2, 0)),
        ],
    ),
    "@": (lambda a, b: _tensor(a) @ b, lambda a, b: a @ b, [(((2, 1), (3, 4)), (1, 0))]),
    "dot": (
        ea.dot,
        np.dot,
        [(((2, 1), (3, 4)), (1, 0)), (((3,), (1,)), (0, 0)), (((2, 2, 1), (4, 3, 5)), (2, 1))],
    ),
    "inner": (ea.inner, np.inner, [(((2, 1), (4, 3)), (1, 1)), (((3,), (1,)), (0, 0))]),
    "tensordot": (
        lambda a, b: ea.tensordot(a, b, 1),
        lambda a, b: np.tensordot(a, b, 1),
        [(((2, 1), (3, 4)), (1, 0)), (((2, 3), (1, 4)), (1, 0))],
    ),
    "tensordot pairs": (
        lambda a, b: ea.tensordot(a, b, ([0, 1], [1, 0])),
        lambda a, b: np.tensordot(a, b, ([0, 1], [1, 0])),
        [(((2, 3), (3, 1)), (0, 1)), (((1, 3), (3, 2)), (0, 1))],
    ),
}


@both_modes
@pytest.mark.parametrize(
    "name, shapes, axes",
    [(name, shapes, axes) for name, (_, _, cases) in CONTRACTIONS.items() for shapes, axes in cases],
    ids=str,
)
def test_contracted_size_one_against_size_n_is_refused_like_numpy(name, shapes, axes, jit_mode):
    """Refused as numpy refuses it, by an error that names the operation, the contracted axes
    that differ, their sizes and both shapes (and no index letter of einad's own)."""
    f, ref, _ = CONTRACTIONS[name]
    a, b = (np.ones(s) for s in shapes)
    with pytest.raises(ValueError):
        ref(a, b)
    with pytest.raises(ValueError) as info:
        run(jit_mode, f, a, b)
    assert_no_internal_letters(info.value)
    (sa, sb), (ia, ib) = shapes, axes
    what = "matmul" if name == "@" else name.split()[0]
    expected = (
        f"{what}: axis {ia} of the first operand (size {sa[ia]}) and axis {ib} of the second "
        f"(size {sb[ib]}) are contracted but differ in size (shapes {sa} and {sb})"
    )
    assert str(info.value) == expected


@both_modes
def test_matmul_batch_dimensions_still_broadcast_size_one(jit_mode):
    a, b = np.ones((1, 2, 3)), np.ones((5, 3, 4))
    np.testing.assert_allclose(run(jit_mode, ea.matmul, a, b), np.matmul(a, b))
    with pytest.raises(ValueError) as info:
        run(jit_mode, ea.matmul, np.ones((2, 2, 3)), np.ones((3, 3, 4)))
    assert_no_internal_letters(info.value)


# -- axes ------------------------------------------------------------------------------------------

X = np.arange(24.0).reshape(2, 3, 4)


def _with_axis(name, axis):
    """A call of `name` on x (X, or X traced) that puts `axis` where the function takes an axis."""
    calls = {
        "sum": lambda x: ops.sum(x, axis=axis),
        "mean": lambda x: ops.mean(x, axis=axis),
        "var": lambda x: ops.var(x, axis=axis),
        "max": lambda x: ops.max(x, axis=axis),
        "min": lambda x: ops.min(x, axis=axis),
        "prod": lambda x: ops.prod(x, axis=axis),
        "any": lambda x: ops.any(x, axis=axis),
        "all": lambda x: ops.all(x, axis=axis),
        "logsumexp": lambda x: ops.logsumexp(x, axis=axis),
        "softmax": lambda x: ops.softmax(x, axis=axis),
        "log_softmax": lambda x: ops.log_softmax(x, axis=axis),
        "squeeze": lambda x: ops.squeeze(x[:1], axis=axis),
        "expand_dims": lambda x: ops.expand_dims(x, axis=axis),
        "moveaxis source": lambda x: ops.moveaxis(x, axis, 0),
        "moveaxis destination": lambda x: ops.moveaxis(x, 0, axis),
        "transpose": lambda x: ops.transpose(x, (0, 1, axis)),
        "trace axis1": lambda x: ops.trace(x, axis1=axis),
        "trace axis2": lambda x: ops.trace(x, axis2=axis),
        "diagonal axis1": lambda x: ops.diagonal(x, axis1=axis),
        "diagonal axis2": lambda x: ops.diagonal(x, axis2=axis),
        "concatenate": lambda x: ops.concatenate([x, x], axis=axis),
        "stack": lambda x: ops.stack([x, x], axis=axis),
        "split": lambda x: ops.split(x, 1, axis=axis),
        "flip": lambda x: ops.flip(x, axis=axis),
        "tensordot axes": lambda x: ops.tensordot(x, X, ([axis], [0])),
    }
    return calls[name]


AXIS_CALLS = [
    "sum",
    "mean",
    "var",
    "max",
    "min",
    "prod",
    "any",
    "all",
    "logsumexp",
    "softmax",
    "log_softmax",
    "squeeze",
    "expand_dims",
    "moveaxis source",
    "moveaxis destination",
    "transpose",
    "trace axis1",
    "trace axis2",
    "diagonal axis1",
    "diagonal axis2",
    "concatenate",
    "stack",
    "split",
    "flip",
    "tensordot axes",
]


# The rank an axis is checked against: the result's for expand_dims and stack.
RANK = {"expand_dims": 4, "stack": 4}

# The name an axis error's message starts with (``axis`` where numpy's own message does not name it).
PARAMETER = {
    "moveaxis source": "source",
    "moveaxis destination": "destination",
    "transpose": "axes",
    "trace axis1": "axis1",
    "trace axis2": "axis2",
    "diagonal axis1": "axis1",
    "diagonal axis2": "axis2",
    "tensordot axes": "tensordot axes",
}


def assert_names_the_parameter(err, name):
    """`err`'s message starts with the name of the parameter that holds the bad axis."""
    assert re.match(rf"{PARAMETER.get(name, 'axis')}\b", str(err)), str(err)


AXIS_PARAMETERS = {"axis", "axes", "axis1", "axis2", "source", "destination"}


@both_modes
def test_every_operation_taking_an_axis_is_swept():
    takes_axis = {
        name
        for name in ops.__all__
        if AXIS_PARAMETERS & set(inspect.signature(getattr(ops, name)).parameters)
    }
    swept = {call.split()[0] for call in AXIS_CALLS}
    assert takes_axis == swept, f"not swept: {takes_axis - swept}; not operations: {swept - takes_axis}"


def _staged(jit_mode, call):
    """`call(X)`, eagerly or traced by ea.jit (where X is a staged value: only its shape is known)."""
    if jit_mode != "eager":
        return compiled(ea.jit(call))(X)
    return call(X)


@both_modes
@pytest.mark.parametrize("offset", [0, 1], ids=["ndim", "-ndim-1"])
@pytest.mark.parametrize("name", AXIS_CALLS)
def test_axis_out_of_range_is_numpy_axis_error(name, offset, jit_mode):
    """numpy's AxisError, whose message names the axis and the parameter that holds it."""
    nd = RANK.get(name, 3)
    axis = nd if offset == 0 else -nd - 1
    with pytest.raises(AxisError) as info:
        _staged(jit_mode, _with_axis(name, axis))
    assert_no_internal_letters(info.value)
    assert str(axis) in str(info.value)
    assert_names_the_parameter(info.value, name)


# squeeze needs a size-1 axis: its boundary is covered by the test of repeated axes
@both_modes
@pytest.mark.parametrize("name", [n for n in AXIS_CALLS if n != "squeeze"])
def test_last_axis_in_range_is_accepted(name, jit_mode):
    """The boundary the test above checks from the other side: -ndim and ndim-1 are valid axes."""
    nd = RANK.get(name, 3)
    for axis in (nd - 1, -nd):
        try:
            _staged(jit_mode, _with_axis(name, axis))
        except AxisError as err:  # pragma: no cover - the failure is the point
            raise AssertionError(f"{name} refused axis {axis}: {err}") from err
        except ValueError as err:  # e.g. trace with axis1 == axis2: a different refusal
            assert re.search("same|size|match|repeated", str(err)), err


BAD_AXES = {"str": "a", "float": 1.0, "bool": True, "list": [0.5], "object": object()}


# (transpose takes a list as its axes itself: its list case is the list's element, a float)
@both_modes
@pytest.mark.parametrize(
    "name, bad",
    [(n, b) for n in AXIS_CALLS for k, b in BAD_AXES.items() if not (n == "transpose" and k == "list")],
    ids=[f"{n}-{k}" for n in AXIS_CALLS for k in BAD_AXES if not (n == "transpose" and k == "list")],
)
def test_an_axis_that_is_not_an_integer_is_a_clear_type_error(name, bad, jit_mode):
    """A TypeError whose message starts with the parameter's name."""
    with pytest.raises(TypeError) as info:
        _staged(jit_mode, _with_axis(name, bad))
    assert_no_internal_letters(info.value, written="a")
    assert_names_the_parameter(info.value, name)


# name: (einad call, numpy call, einad's message)
REPEATED = {
    "sum": (
        lambda x: ea.sum(x, axis=(0, -3)),
        lambda: np.sum(X, axis=(0, -3)),
        r"repeated axis in axis \(0, -3\)",
    ),
    "mean": (lambda x: ea.mean(x, axis=(1, 1)), lambda: np.mean(X, axis=(1, 1)), r"repeated axis in axis"),
    "max": (lambda x: ea.max(x, axis=(2, 2)), lambda: np.max(X, axis=(2, 2)), r"repeated axis in axis"),
    "transpose": (
        lambda x: ea.transpose(x, (0, 0, 1)),
        lambda: np.transpose(X, (0, 0, 1)),
        r"repeated axis in axes \(0, 0, 1\)",
    ),
    "moveaxis": (
        lambda x: ea.moveaxis(x, (0, 0), (1, 2)),
        lambda: np.moveaxis(X, (0, 0), (1, 2)),
        r"repeated axis in source \(0, 0\)",
    ),
    "flip": (lambda x: ea.flip(x, (0, 0)), lambda: np.flip(X, (0, 0)), r"repeated axis in axis"),
    "expand_dims": (
        lambda x: ea.expand_dims(x, (0, 0)),
        lambda: np.expand_dims(X, (0, 0)),
        r"repeated axis in axis",
    ),
    "squeeze": (
        lambda x: ea.squeeze(x[:1, :1], (0, 0)),
        lambda: np.squeeze(X[:1, :1], (0, 0)),
        r"repeated axis in axis",
    ),
    "trace": (
        lambda x: ea.trace(x, axis1=1, axis2=-2),
        lambda: np.trace(X, axis1=1, axis2=-2),
        r"trace: axis1 and axis2 cannot be the same$",
    ),
    "diagonal": (
        lambda x: ea.diagonal(x, axis1=0, axis2=0),
        lambda: np.diagonal(X, axis1=0, axis2=0),
        r"diagonal: axis1 and axis2 cannot be the same$",
    ),
    "tensordot": (
        lambda x: ea.tensordot(np.ones((3, 3)), np.ones((3, 3)), ([0, 0], [0, 1])),
        lambda: np.tensordot(np.ones((3, 3)), np.ones((3, 3)), ([0, 0], [0, 1])),
        r"tensordot: duplicate axes are not allowed, got \(\[0, 0\], \[0, 1\]\)$",
    ),
}


@both_modes
@pytest.mark.parametrize("name", sorted(REPEATED))
def test_repeated_axes_are_refused_like_numpy(name, jit_mode):
    """A ValueError, as numpy's, whose message says which axes repeat."""
    call, ref, message = REPEATED[name]
    with pytest.raises(ValueError):
        ref()
    with pytest.raises(ValueError) as info:
        _staged(jit_mode, call)
    assert_no_internal_letters(info.value)
    assert re.match(message, str(info.value)), str(info.value)


@both_modes
def test_concatenate_with_axis_none_flattens_like_numpy(jit_mode):
    a, b = np.arange(6.0).reshape(2, 3), np.arange(4.0)
    np.testing.assert_array_equal(
        run(jit_mode, lambda a, b: ea.concatenate([a, b], axis=None), a, b), np.concatenate([a, b], axis=None)
    )


# -- no internal letters in the other refusals of the helpers ---------------------------------------

# name: (call, the start of its message)
REFUSALS = {
    "trace of a vector": (
        lambda x: ea.trace(np.ones(3)),
        r"trace needs an array of at least 2 dimensions, got 1$",
    ),
    "diagonal of a vector": (
        lambda x: ea.diagonal(np.ones(3)),
        r"diagonal needs an array of at least 2 dimensions, got 1$",
    ),
    "matmul of a scalar": (lambda x: ea.matmul(2.0, np.ones(3)), r"matmul does not take 0-d operands"),
    "matmul batch": (
        lambda x: ea.matmul(np.ones((2, 2, 3)), np.ones((3, 3, 4))),
        r"matmul: the batch dimensions \(2,\) and \(3,\) of shapes \(2, 2, 3\) and \(3, 3, 4\) do not",
    ),
    "tensordot too many axes": (
        lambda x: ea.tensordot(np.ones(3), np.ones(3), 2),
        r"tensordot axes=2 does not fit operands of rank 1 and 1$",
    ),
    "tensordot negative axes": (
        lambda x: ea.tensordot(x, x, -1),
        r"tensordot axes=-1 does not fit operands of rank 3 and 3$",
    ),
    "tensordot axes not a pair": (
        lambda x: ea.tensordot(x, x, ([0],)),
        r"tensordot axes must be an int or a pair of axis lists, got \(\[0\],\)$",
    ),
    "tensordot unequal lists": (
        lambda x: ea.tensordot(np.ones((2, 3)), np.ones((3, 2)), ([0, 1], [0])),
        r"tensordot: the two axis lists must have the same length$",
    ),
    "tensordot sizes": (
        lambda x: ea.tensordot(np.ones((2, 3)), np.ones((2, 3)), ([0, 1], [1, 0])),
        r"tensordot: axis 0 of the first operand \(size 2\) and axis 1 of the second \(size 3\)",
    ),
    "transpose too few axes": (
        lambda x: ea.transpose(x, (0, 1)),
        r"transpose: axes \(0, 1\) do not match an array of 3 dimension\(s\)$",
    ),
    "moveaxis unequal": (
        lambda x: ea.moveaxis(x, (0, 1), 2),
        r"moveaxis: source and destination must have the same number of axes$",
    ),
    "moveaxis None": (
        lambda x: ea.moveaxis(x, None, 0),
        r"moveaxis: source and destination must be integers or sequences of integers$",
    ),
    "trace offset": (lambda x: ea.trace(np.ones((2, 2)), offset="1"), r"offset must be an integer, got '1'"),
    "diagonal offset": (
        lambda x: ea.diagonal(np.ones((2, 2)), offset=0.5),
        r"offset must be an integer, got 0.5",
    ),
    "path leaves operands": (
        lambda x: ea.einsum("ij,jk,kl->il", x[0], x[0].T, x[0], optimize=[(0, 1)]),
        r"invalid contraction path \[\(0, 1\)\]: it leaves 2 operands, not 1$",
    ),
    "unknown optimize": (
        lambda x: (
            ea.dot(np.ones((2, 3)), np.ones((3, 4)))
            @ ea.einsum(
                "ij,jk,kl->il", np.ones((4, 2)), np.ones((2, 2)), np.ones((2, 2)), optimize="nonsense"
            )
        ),
        r"unknown optimize strategy 'nonsense': .*'greedy'",
    ),
    "optimize not a strategy": (
        lambda x: ea.einsum("ij->", x[0], optimize=3),
        (
            r"optimize must be an opt_einsum strategy name, a path \(list of index tuples\) or a path "
            r"optimizer object, got 3$"
        ),
    ),
    # a name inside a path list: an EinsumError, not int()'s ValueError (kills normalize_optimize 22)
    "optimize a list of names": (
        lambda x: ea.einsum("ij->", x[0], optimize=["greedy"]),
        (
            r"optimize must be an opt_einsum strategy name, a path \(list of index tuples\) or a path "
            r"optimizer object, got \['greedy'\]$"
        ),
    ),
    "reshape with a string": (lambda x: ea.reshape(x, ("a", 4)), r"a shape's size must be an integer"),
}


@both_modes
@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_helper_refusals_name_axes_not_letters(name, jit_mode):
    """Each refusal says what is wrong in the user's terms (axes, ranks, shapes), not einad's letters."""
    call, message = REFUSALS[name]
    with pytest.raises((ValueError, TypeError)) as info:
        _staged(jit_mode, call)
    assert_no_internal_letters(info.value, written="a")
    assert re.match(message, str(info.value)), str(info.value)


# -- the sweep is complete ----------------------------------------------------------------------------

# The operations none of the classes above concerns: elementwise ones (numpy's ufunc dtypes, no
# axis, nothing contracted), the ones whose shapes are their arguments, `outer` (it flattens and
# contracts nothing) and `einsum` itself, whose size-1 broadcasting of a label is its documented
# grammar (tests/test_einsum.py, tests/test_errors.py).
NOT_CONCERNED = {
    *ops.ELEMENTWISE,  # every entry of the elementwise table
    *(
        "where",
        "clip",
        "astype",
        "broadcast_to",
        "getitem",
        "reshape",
        "ravel",
        "floor_divide",
        "stop_gradient",
        "outer",
        "einsum",
        "angle",
    ),
    *("conj", "imag", "real"),
    *("tril", "triu"),  # the last two axes always, an integer diagonal: their own tests below
    *("diag", "kron"),  # no axis, nothing contracted (diag of a matrix is `diagonal`): FRONT below
    "IndexUpdate",  # the class behind x.at[...], not an operation
}


@both_modes
def test_every_public_operation_is_swept_or_named_as_not_concerned():
    reduces = {name.split()[0] for name in [*REDUCTIONS, *STABLE] if not name.startswith("Tensor.")}
    contracts = {name.split()[0] for name in CONTRACTIONS if name != "@"}
    takes_axis = {call.split()[0] for call in AXIS_CALLS}
    swept = reduces | contracts | takes_axis
    assert not swept & NOT_CONCERNED
    assert swept | NOT_CONCERNED == set(ops.__all__), set(ops.__all__) ^ (swept | NOT_CONCERNED)


# -- the front ends on every array library -----------------------------------------------------

FRONT = [
    ("matmul", ea.matmul, [(2, 3, 4), (4, 2)]),
    ("matmul-vector", ea.matmul, [(3,), (2, 3, 4)]),
    ("dot", ea.dot, [(2, 3), (4, 3, 2)]),
    ("inner", ea.inner, [(2, 3), (4, 3)]),
    ("outer", ea.outer, [(2, 3), (4,)]),
    ("tensordot", lambda a, b: ea.tensordot(a, b, axes=([1, 0], [2, 0])), [(3, 2, 4), (3, 5, 2)]),
    ("tensordot-int", lambda a, b: ea.tensordot(a, b, axes=1), [(2, 3), (3, 4)]),
    ("trace", ea.trace, [(3, 3, 2)]),
    ("trace-axes", lambda a: ea.trace(a, axis1=2, axis2=0), [(3, 2, 3)]),
    ("trace-offset", lambda a: ea.trace(a, offset=1), [(3, 4)]),
    ("diagonal", lambda a: ea.diagonal(a, axis1=1, axis2=2), [(2, 3, 3)]),
    ("diagonal-offset", lambda a: ea.diagonal(a, offset=-1), [(4, 3)]),
    ("transpose", ea.transpose, [(2, 3, 4)]),
    ("transpose-axes", lambda a: ea.transpose(a, (1, 2, 0)), [(2, 3, 4)]),
    ("moveaxis", lambda a: ea.moveaxis(a, 0, -1), [(2, 3, 4)]),
    ("sum", ea.sum, [(2, 3)]),
    ("sum-axes", lambda a: ea.sum(a, axis=(0, 2)), [(2, 3, 4)]),
    ("sum-keepdims", lambda a: ea.sum(a, axis=1, keepdims=True), [(2, 3, 4)]),
    ("kron", ea.kron, [(2, 3), (4, 1, 2)]),
    ("diag-vector", lambda a: ea.diag(a, 1), [(3,)]),
    ("diag-vector-below", lambda a: ea.diag(a, -2), [(2,)]),
    ("diag-matrix", lambda a: ea.diag(a, -1), [(4, 3)]),
]


@pytest.mark.parametrize("case", FRONT, ids=[c[0] for c in FRONT])
def test_front_ends(lib, case):
    _, f, shapes = case
    vjp_all(lib, f, random_operands(shapes))


# -- tril and triu: numpy's signatures, linear primitives added by the recipe of docs/design.md ----

TRIANGLE_SHAPES = [(4,), (3, 3), (3, 5), (5, 2), (2, 3, 4), (1, 2, 3, 3)]


@both_modes
@pytest.mark.parametrize("shape", TRIANGLE_SHAPES)
@pytest.mark.parametrize("k", [-2, 0, 1])
def test_tril_and_triu_match_numpy_and_are_their_own_transposes(shape, k):
    x = np.random.default_rng(len(shape) + k + 2).standard_normal(shape)
    for ours, theirs in ((ea.tril, np.tril), (ea.triu, np.triu)):
        assert_close(ours(x, k), theirs(x, k))
        assert_close(ours(x, k=np.int64(k)), theirs(x, k))
        # linear: the VJP of the cotangent g is the same triangle of g (of g's rows' sum for a 1-D x)
        _, pull = ea.vjp(lambda a, f=ours: f(a, k), x)
        g = np.random.default_rng(5).standard_normal(np.shape(theirs(x, k)))
        (gx,) = pull(g)
        expected = theirs(g, k) if len(shape) > 1 else theirs(g, k).sum(axis=0)
        assert_close(gx, expected)
        t = np.random.default_rng(6).standard_normal(shape)
        assert_close(ea.jvp(lambda a, f=ours: f(a, k), (x,), (t,))[1], theirs(t, k))
        assert ea.gradcheck(lambda a, f=ours: ea.sum(ea.sin(f(a, k))), x)


def test_tril_and_triu_keep_dtypes_and_dispatch_from_numpy():
    for dt in (np.int32, np.bool_, np.complex128, np.float32):
        x = (np.arange(12).reshape(3, 4) % 3).astype(dt)
        for ours, theirs in ((ea.tril, np.tril), (ea.triu, np.triu)):
            r = ours(x, -1)
            assert r.dtype == theirs(x, -1).dtype
            np.testing.assert_array_equal(r.numpy(), theirs(x, -1))
    t = ea.tensor(np.ones((3, 3)), requires_grad=True)
    ea.sum(np.tril(t) * 2.0).backward()  # numpy's own function on a Tensor is einad's
    assert_close(t.grad, 2.0 * np.tril(np.ones((3, 3))))


def test_tril_and_triu_on_every_library(lib):
    x = np.random.default_rng(1).standard_normal((2, 3, 3))
    (xl,) = [lib.asarray(x)]
    for ours, theirs in ((ea.tril, np.tril), (ea.triu, np.triu)):
        assert_close(
            lib.numpy(ours(xl, 1).numpy() if isinstance(ours(xl, 1), ea.Tensor) else ours(xl, 1)),
            theirs(x, 1),
        )
        g = ea.grad(lambda a, f=ours: ea.sum(f(a) * f(a)))(xl)
        assert lib.owns(g)
        assert_close(lib.numpy(g), 2 * theirs(x))


def test_tril_and_triu_errors():
    with pytest.raises(ValueError, match="tril needs an array of at least one dimension"):
        ea.tril(np.float64(1.0))
    with pytest.raises(TypeError, match="triu: k"):
        ea.triu(np.ones((2, 2)), 1.5)


def test_tril_and_triu_are_declared_linear_primitives_one_equation_each():
    """Each is one equation of its own in a program (no constant mask), its own transpose in
    the derivative program, and declared: linear, a fresh result, batched along."""
    from einad.rules.linear import tril_p, triu_p

    for prim in (tril_p, triu_p):
        assert prim.linear and prim.aliasing == "fresh" and prim.batch is ea.core.ride_along
        assert prim.keep([True]) == ((False,), False)  # its VJP reads no value
    x = np.random.default_rng(2).standard_normal((3, 4))
    graph = ea.make_graph(ea.grad(lambda a: ea.sum(ea.triu(a, 1) * a)))(x)
    assert str(graph).count("triu[k=1]") == 2 and not graph.consts, graph
    jitted = ea.jit(lambda a: ea.tril(a, -1))
    assert_close(jitted(x), np.tril(x, -1))
    assert "copy(" not in jitted.lower(x).source  # a fresh result is handed over as it is


@pytest.mark.parametrize("k", [-1, 0, 2])
def test_tril_and_triu_under_vmap_are_a_loop_over_examples(k):
    xs = np.random.default_rng(3).standard_normal((3, 2, 4))
    v = np.random.default_rng(4).standard_normal((3, 4))
    for ours, theirs in ((ea.tril, np.tril), (ea.triu, np.triu)):
        assert_close(ea.vmap(lambda a, f=ours: f(a, k))(xs), np.stack([theirs(a, k) for a in xs]))
        assert_close(ea.vmap(lambda a, f=ours: f(a, k))(v), np.stack([theirs(a, k) for a in v]))  # rows
        jac = ea.jacfwd(lambda a, f=ours: f(a, k))(xs[0])
        assert_close(jac.reshape(8, 8), np.diag(theirs(np.ones((2, 4)), k).ravel()))


def test_triangle_prim_builds_a_linear_primitive_that_is_its_own_transpose():
    """`_triangle_prim` called in the test (the primitives it made at import are out of mutmut's
    reach): the VJP and JVP of what it builds are the same triangle, against numpy."""
    probe = linear_rules._triangle_prim("triu_probe", False)
    x, g = np.arange(12.0).reshape(3, 4), np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    with forget_rules(probe):
        f = lambda a: ea.core.bind(probe, (a,), {"k": 1})
        value, pull = ea.vjp(f, x)
        assert_close(value, np.triu(x, 1))
        assert_close(pull(g)[0], np.triu(g, 1))
        assert_close(ea.jvp(f, (x,), (g,))[1], np.triu(g, 1))
        assert probe.keep([True]) == ((False,), False) and probe.linear


def test_dot_with_a_scalar_keeps_the_axes_of_an_array_of_more_than_26():
    """dot with a 0-d operand is a product that keeps every axis in order, also past the 26
    lower-case letters (an implicit einsum output would sort 'A' before 'a')."""
    x = np.random.default_rng(0).standard_normal((1,) * 26 + (2, 3))
    for got, ref in ((ea.dot(2.0, x), np.dot(2.0, x)), (ea.dot(x, 2.0), np.dot(x, 2.0))):
        assert got.shape == ref.shape
        np.testing.assert_array_equal(got.numpy(), ref)
