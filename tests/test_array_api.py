"""einad as an array API namespace (`einad.array_api`): code written against the Python array API
standard, handed einad Tensors, runs einad's operations, differentiable, staged and mapped.

The namespace was checked with the standard's own conformance suite (data-apis/array-api-tests,
docs/arrays.md says how to run it); the tests here pin what that run found and what the namespace
adds: every name of the standard, results as Tensors, the sort direction, creation, the
inspection functions, DLPack, and the operations added for it (the bitwise operators,
nextafter, numpy's floor_divide and signbit).
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import einad as ea
from einad import arrays
from tests.support.numerics import assert_close, numeric_grad

xp = ea.array_api

# The names of the standard (2024.12), from its function stubs (data-apis/array-api,
# src/array_api_stubs/_2024_12): each module's __all__.
STANDARD = """
e inf nan newaxis pi
arange asarray empty empty_like eye from_dlpack full full_like linspace meshgrid ones ones_like tril
triu zeros zeros_like
astype can_cast finfo iinfo isdtype result_type
abs acos acosh add asin asinh atan atan2 atanh bitwise_and bitwise_left_shift bitwise_invert
bitwise_or bitwise_right_shift bitwise_xor ceil clip conj copysign cos cosh divide equal exp expm1
floor floor_divide greater greater_equal hypot imag isfinite isinf isnan less less_equal log log1p
log2 log10 logaddexp logical_and logical_not logical_or logical_xor maximum minimum multiply negative
nextafter not_equal positive pow real reciprocal remainder round sign signbit sin sinh square sqrt
subtract tan tanh trunc
take take_along_axis
matmul matrix_transpose tensordot vecdot
broadcast_arrays broadcast_to concat expand_dims flip moveaxis permute_dims repeat reshape roll squeeze
stack tile unstack
argmax argmin count_nonzero nonzero searchsorted where
unique_all unique_counts unique_inverse unique_values
argsort sort
cumulative_sum cumulative_prod max mean min prod std sum var
all any diff
__array_namespace_info__
""".split()  # noqa: SIM905  (as the stubs' modules list them)
LINALG = """cholesky cross det diagonal eigh eigvalsh inv matmul matrix_norm matrix_power matrix_rank
matrix_transpose outer pinv qr slogdet solve svd svdvals tensordot trace vecdot vector_norm""".split()  # noqa: SIM905
FFT = "fft ifft fftn ifftn rfft irfft rfftn irfftn hfft ihfft fftfreq rfftfreq fftshift ifftshift".split()  # noqa: SIM905
DTYPES = "bool int8 int16 int32 int64 uint8 uint16 uint32 uint64 float32 float64 complex64 complex128".split()  # noqa: SIM905

RNG = np.random.default_rng(20261129)


def test_every_name_of_the_standard_is_in_the_namespace():
    assert xp.__array_api_version__ == "2024.12"
    missing = [n for n in STANDARD if not hasattr(xp, n)]
    missing += [f"linalg.{n}" for n in LINALG if not callable(getattr(xp.linalg, n, None))]
    missing += [f"fft.{n}" for n in FFT if not callable(getattr(xp.fft, n, None))]
    assert missing == []
    for name in DTYPES:  # numpy's scalar types, which a Tensor's dtype compares equal to
        assert getattr(xp, name) is np.dtype(name).type
        assert ea.tensor(np.zeros(1, dtype=name)).dtype == getattr(xp, name)
        assert getattr(xp, name) != None  # noqa: E711  (np.dtype(None) is float64: a dtype would equal None)
    assert (xp.e, xp.pi, xp.inf, xp.newaxis) == (np.e, np.pi, np.inf, None) and np.isnan(xp.nan)


def test_a_tensor_names_the_namespace_as_array_api_compat_finds_it():
    t = ea.tensor([1.0, 2.0])
    assert t.__array_namespace__() is xp
    assert t.__array_namespace__(api_version="2023.12") is xp
    with pytest.raises(ValueError, match="2024.12"):
        t.__array_namespace__(api_version="2030.01")
    compat = pytest.importorskip("array_api_compat", reason="array-api-compat is an optional extra")
    assert compat.array_namespace(t) is xp
    assert compat.array_namespace(t, ea.tensor(1)) is xp
    # einad itself does not take its own Tensor for another library's array
    assert not arrays.is_array(t) and arrays.is_array(np.ones(2))


def _generic_loss(x, w):
    """A function written for any array API library: only the namespace of its arguments."""
    ns = x.__array_namespace__()
    z = ns.matmul(x, w)  # (3, 2)
    z = z - ns.max(z, axis=1, keepdims=True)
    logp = z - ns.log(ns.sum(ns.exp(z), axis=1, keepdims=True))
    scale = ns.linalg.vector_norm(ns.concat([x, ns.permute_dims(w, (1, 0))], axis=0), axis=1)
    picked = ns.take_along_axis(logp, ns.asarray([[0], [1], [0]]), axis=1)[:, 0]
    running = ns.cumulative_sum(ns.clip(scale, min=0.5, max=3.0))
    positive = ns.where(picked > -1.0, picked, ns.zeros_like(picked))
    return -ns.sum(positive * scale[:3]) + ns.mean(running) + ns.vecdot(x[0, :], x[1, :])


def test_array_api_code_on_tensors_gives_the_values_of_another_library_and_numpys_gradient():
    x, w = RNG.uniform(-1, 1, (3, 4)), RNG.uniform(-1, 1, (4, 2))
    strict = pytest.importorskip("array_api_strict", reason="array-api-strict is an optional extra")
    want = float(_generic_loss(strict.asarray(x), strict.asarray(w)))
    got = _generic_loss(ea.tensor(x), ea.tensor(w))
    assert isinstance(got, ea.Tensor)
    assert_close(got.numpy(), want, rtol=1e-12)
    value, (gx, gw) = ea.value_and_grad(_generic_loss, argnums=(0, 1))(x, w)
    assert_close(value, want, rtol=1e-12)
    assert_close(gx, numeric_grad(lambda v: float(_generic_loss(strict.asarray(v), strict.asarray(w))), x))
    assert_close(gw, numeric_grad(lambda v: float(_generic_loss(strict.asarray(x), strict.asarray(v))), w))
    # staged and mapped
    assert_close(ea.jit(_generic_loss)(x, w), want, rtol=1e-12)
    batch = np.stack([x, 2 * x])
    mapped = ea.vmap(_generic_loss, in_axes=(0, None))(batch, w)
    assert_close(mapped, [want, float(_generic_loss(strict.asarray(2 * x), strict.asarray(w)))], rtol=1e-12)
    ea.gradcheck(_generic_loss, x, w)


def test_every_result_is_a_tensor():
    t = ea.tensor(np.array([[3.0, 1.0], [1.0, -0.0]]))
    assert isinstance(xp.equal(t, 1.0), ea.Tensor) and xp.equal(t, 1.0).dtype == xp.bool
    assert isinstance(xp.isnan(t), ea.Tensor) and isinstance(xp.signbit(t), ea.Tensor)
    counts = xp.unique_counts(t)
    assert counts._fields == ("values", "counts")
    assert all(isinstance(v, ea.Tensor) for v in counts)
    np.testing.assert_array_equal(counts.values.numpy(), [0.0, 1.0, 3.0])
    np.testing.assert_array_equal(counts.counts.numpy(), [1, 2, 1])
    assert all(isinstance(v, ea.Tensor) for v in xp.nonzero(t))
    assert all(isinstance(v, ea.Tensor) for v in xp.linalg.eigh(t))
    assert isinstance(xp.meshgrid(t[0], t[1])[0], ea.Tensor)


def test_sort_and_argsort_descending_are_stable_and_sort_differentiates():
    x = np.array([[2.0, 5.0, 2.0, -1.0, 5.0, 2.0], [0.0, 1.0, 0.0, 1.0, 0.0, 1.0]])
    for axis in (-1, 0):
        want = np.argsort(-x, axis=axis, stable=True)  # (descending and stable, for these numbers)
        np.testing.assert_array_equal(xp.argsort(ea.tensor(x), axis=axis, descending=True).numpy(), want)
        np.testing.assert_array_equal(
            xp.argsort(ea.tensor(x), axis=axis).numpy(), np.argsort(x, axis, stable=True)
        )
        np.testing.assert_array_equal(
            xp.sort(ea.tensor(x), axis=axis, descending=True).numpy(), -np.sort(-x, axis=axis)
        )
    weights = np.arange(6.0)
    g = ea.grad(lambda v: xp.sum(xp.sort(v, descending=True) * weights))(
        np.array([0.3, 2.0, -1.0, 0.7, 1.5, 0.0])
    )
    np.testing.assert_array_equal(g, [3.0, 0.0, 5.0, 2.0, 1.0, 4.0])  # each value's place, largest first


def test_creation_functions_make_constant_tensors_of_numpys_defaults():
    assert xp.zeros((2, 3)).dtype == xp.float64 and xp.ones(2, dtype=xp.int32).dtype == xp.int32
    assert xp.arange(5).dtype == xp.int64 and xp.arange(0.0, 1.0, 0.25).shape == (4,)
    assert xp.empty((2,)).shape == (2,) and xp.eye(2, 3, k=1).numpy()[0, 1] == 1.0
    np.testing.assert_array_equal(
        xp.linspace(0, 1, 5, endpoint=False).numpy(), np.linspace(0, 1, 5, endpoint=False)
    )
    assert xp.full_like(ea.tensor(np.ones(3, np.float32)), 2).dtype == xp.float32
    assert xp.zeros_like(ea.tensor([1, 2])).dtype == xp.int64
    assert xp.asarray([1, 2], dtype=xp.float32).dtype == xp.float32
    for made in (xp.zeros(2), xp.arange(3), xp.asarray([1.0]), xp.full((2,), 1.0), xp.eye(2)):
        assert isinstance(made, ea.Tensor)
    with pytest.raises(ValueError, match="cpu"):
        xp.zeros(2, device="cuda:0")
    info = xp.__array_namespace_info__()
    assert xp.zeros(2, device=info.default_device()).shape == (2,)
    assert xp.asarray([1.0], device=ea.tensor(1.0).device).shape == (1,)


def test_full_and_asarray_of_tensors_are_differentiable():
    # full with a Tensor fill value: the value broadcast (gradient: the count of elements)
    assert_close(ea.grad(lambda s: xp.sum(xp.full((2, 3), s)))(1.5), 6.0)
    # asarray of a list holding Tensors: stacked, each element keeping its derivative
    assert_close(ea.grad(lambda s: xp.sum(xp.asarray([[s, 2.0 * s], [3.0, s * s]])))(2.0), 1 + 2 + 4)
    assert_close(ea.grad(lambda s: xp.sum(xp.linspace(0.0, s, 5)))(2.0), 0 + 0.25 + 0.5 + 0.75 + 1)


def test_asarray_copy_gives_a_tensor_of_its_own():
    x = ea.tensor(np.array([1.0, 2.0]))
    y = xp.asarray(x, copy=True)
    x += 1.0  # (rebinds x's value, as PyTorch's in-place update)
    np.testing.assert_array_equal(y.numpy(), [1.0, 2.0])
    assert xp.asarray(x) is x  # without copy=True: the Tensor itself
    with pytest.raises(ValueError, match="copied"):
        xp.asarray([1.0], copy=False)


def test_inspection_functions():
    info = xp.__array_namespace_info__()
    assert info.devices() == ["cpu"] and info.default_device() == "cpu"
    assert info.default_dtypes() == {
        "real floating": xp.float64,
        "complex floating": xp.complex128,
        "integral": xp.int64,
        "indexing": xp.int64,
    }
    assert list(info.dtypes(kind="real floating")) == ["float32", "float64"]
    assert list(info.dtypes(kind=("bool", "complex floating"))) == ["bool", "complex64", "complex128"]
    assert len(info.dtypes()) == 13 and info.dtypes(kind=xp.int8) == {"int8": xp.int8}
    assert info.capabilities()["boolean indexing"] is True
    with pytest.raises(ValueError, match="kind"):
        info.dtypes(kind="floating")
    t = ea.tensor(np.ones(2, np.float32))
    assert xp.finfo(t).eps == np.finfo(np.float32).eps and xp.iinfo(xp.int8).max == 127
    limits = xp.finfo(xp.complex64)  # (the standard's: Python floats, the real dtype)
    assert type(limits.eps) is float and limits.bits == 32 and limits.dtype == xp.float32
    assert type(xp.meshgrid(t, t)) is list and type(xp.broadcast_arrays(t, xp.ones((3, 1)))) is list
    assert xp.result_type(t, 1.0) == xp.float32 and xp.result_type(t, xp.float64) == xp.float64
    assert xp.can_cast(t, xp.float64) and not xp.can_cast(xp.float64, xp.int32)
    assert xp.isdtype(t.dtype, "real floating") and not xp.isdtype(t.dtype, "integral")
    assert xp.astype(t, xp.int8).dtype == xp.int8


def test_to_device_and_dlpack():
    t = ea.tensor(np.arange(4.0))
    assert t.to_device("cpu") is t
    with pytest.raises(ValueError, match="move"):
        t.to_device("cuda:0")
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, np.arange(4.0))
    assert not back.flags.writeable  # (DLPack 1 says the tensor's array is read-only)
    # a consumer before DLPack 1 (no max_version) gets a copy's capsule: numpy's own array refuses
    np.testing.assert_array_equal(np.from_dlpack(_Legacy(t)), np.arange(4.0))
    with pytest.raises(BufferError):
        t.numpy().__dlpack__()
    assert t.__dlpack_device__() == np.arange(1.0).__dlpack_device__()
    with pytest.raises(BufferError, match="read-only"):
        t.__dlpack__(copy=False)  # a capsule before DLPack 1 cannot say it must not be written
    assert type(t.__dlpack__(max_version=(1, 0), copy=False)).__name__ == "PyCapsule"
    with pytest.raises(ea.TracerError):
        ea.grad(lambda v: np.from_dlpack(v).sum())(np.ones(2))


class _Legacy:
    """An exporter seen by a consumer that asks for no DLPack version (one written before DLPack 1)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, **kwargs):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


INTS = np.array([[5, -3, 12, 0], [7, 1, -8, 255]])


@pytest.mark.parametrize(
    ("op", "ref"),
    [
        (lambda a, b: a & b, np.bitwise_and),
        (lambda a, b: a | b, np.bitwise_or),
        (lambda a, b: a ^ b, np.bitwise_xor),
        (lambda a, b: a << (b % 5), lambda a, b: np.left_shift(a, b % 5)),
        (lambda a, b: a >> (b % 5), lambda a, b: np.right_shift(a, b % 5)),
        (lambda a, b: ~a + b, lambda a, b: np.invert(a) + b),
        (lambda a, b: 6 & a, lambda a, b: np.bitwise_and(6, a)),  # (reflected)
        (lambda a, b: 6 | a, lambda a, b: np.bitwise_or(6, a)),
        (lambda a, b: 6 ^ a, lambda a, b: np.bitwise_xor(6, a)),
        (lambda a, b: 1 << (a % 7), lambda a, b: np.left_shift(1, a % 7)),
        (lambda a, b: 4096 >> (a % 7), lambda a, b: np.right_shift(4096, a % 7)),
    ],
)
def test_bitwise_operators_are_numpys_eager_staged_and_mapped(op, ref):
    a, b = INTS, INTS[::-1] % 7
    want = ref(a, b)
    got = op(ea.tensor(a), ea.tensor(b))
    assert isinstance(got, ea.Tensor) and got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(ea.jit(op)(a, b), want)
    np.testing.assert_array_equal(ea.vmap(op)(a, b), want)
    # booleans: the logical operations, as numpy's
    p, q = a > 0, b > 2
    np.testing.assert_array_equal((ea.tensor(p) & q).numpy(), p & q)
    np.testing.assert_array_equal((ea.tensor(p) | ea.tensor(q)).numpy(), p | q)
    np.testing.assert_array_equal((~ea.tensor(p)).numpy(), ~p)


def test_bitwise_operations_have_no_derivative_and_refuse_floats():
    # inside a differentiated function, a mask made with & leaves the gradient as it is
    def f(x):
        keep = ea.tensor(INTS[0] > 0) & (x > 0.5)
        return ea.sum(ea.where(keep, x * x, 0.0))

    x = np.array([0.7, 2.0, 0.2, 0.9])
    assert_close(ea.grad(f)(x), np.where((INTS[0] > 0) & (x > 0.5), 2 * x, 0.0))
    with pytest.raises(TypeError, match="bitwise_and"):
        ea.tensor([1.5]) & 1
    with pytest.raises(TypeError, match="invert"):
        ~ea.tensor([1.5])


def test_nextafter_moves_one_float_with_slope_one():
    x, y = np.array([1.0, 0.0, -2.5]), np.array([2.0, -1.0, -np.inf])
    np.testing.assert_array_equal(xp.nextafter(ea.tensor(x), y).numpy(), np.nextafter(x, y))
    assert xp.nextafter(ea.tensor(np.float32(1.0)), 2.0).dtype == xp.float32
    gx, gy = ea.grad(lambda a, b: xp.sum(xp.nextafter(a, b) * b), argnums=(0, 1))(
        x, np.array([2.0, -1.0, -3.0])
    )
    assert_close(gx, [2.0, -1.0, -3.0])
    assert_close(gy, np.nextafter(x, [2.0, -1.0, -3.0]))  # (the product's; nextafter's is 0)


def test_floor_divide_and_signbit_are_numpys_at_zeros_infinities_and_large_integers():
    """What the conformance suite found: ``x // 0.0`` was nan, -0.0 // -2 was -0.0, and signbit
    missed -nan; integers went through float64 and came back int64 for an int32 // 1."""
    x = np.array([1.0, -1.0, -0.0, 0.0, 5.0, -5.0, np.inf, 3.0, np.nan])
    y = np.array([0.0, 0.0, -2.0, -2.0, -np.inf, np.inf, 2.0, -0.0, 1.0])
    with np.errstate(all="ignore"):
        want = np.floor_divide(x, y)
        got = xp.floor_divide(ea.tensor(x), y).numpy()
        by_operator = (ea.tensor(x) // y).numpy()
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(by_operator, want)
    big = np.array([2**60 + 3, -(2**61) - 1, 7])
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal((ea.tensor(big) // np.array([1, 3, 0])).numpy(), big // [1, 3, 0])
    i32 = ea.tensor(np.arange(-4, 4, dtype=np.int32))
    assert (i32 // 2).dtype == np.int32 and xp.floor_divide(i32, 3).dtype == np.int32
    assert_close(ea.grad(lambda v: ea.sum(v // 0.3 + v))(np.array([0.5, 1.0])), [1.0, 1.0])
    signed = np.array([-0.0, 0.0, -np.nan, np.nan, -1.0, np.inf, -np.inf])
    np.testing.assert_array_equal(xp.signbit(ea.tensor(signed)).numpy(), np.signbit(signed))
    np.testing.assert_array_equal(ea.jit(xp.signbit)(signed), np.signbit(signed))


def test_positive_keeps_signed_zeros():
    z = np.array([-0.0, 0.0, complex(0.0, -0.0)])
    got = xp.positive(ea.tensor(z)).numpy()
    np.testing.assert_array_equal(np.signbit(got.real), np.signbit(z.real))
    np.testing.assert_array_equal(np.signbit(got.imag), np.signbit(z.imag))
    assert_close(ea.grad(lambda v: xp.sum(np.positive(v) * v))(np.array([1.0, -2.0])), [2.0, -4.0])


def test_python_numbers_are_weak_in_the_compositions():
    f32 = ea.tensor(np.array([1.0, -2.0], np.float32))
    assert xp.copysign(f32, 0).dtype == xp.float32 and xp.copysign(f32, -1.0).dtype == xp.float32
    assert np.heaviside(f32, 0.5).dtype == np.float32
    np.testing.assert_array_equal(xp.copysign(f32, -1.0).numpy(), [-1.0, -2.0])


def test_vecdot_takes_an_axis_and_refuses_vectors_of_two_lengths():
    a, b = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 1))
    assert_close(xp.vecdot(ea.tensor(a), b, axis=0).numpy(), np.vecdot(a, b, axis=0))
    assert_close(xp.linalg.vecdot(ea.tensor(a), a, axis=-1).numpy(), np.sum(a * a, axis=-1))
    g = ea.grad(lambda v: xp.sum(xp.vecdot(v, b, axis=0)))(a)
    assert_close(g, np.broadcast_to(b, a.shape))
    with pytest.raises(ValueError, match="differ in size"):
        xp.vecdot(ea.tensor(np.ones(0)), np.ones(1))


def test_cumulative_sum_and_prod_with_the_initial_value_on_empty_and_mapped_arrays():
    """What the conformance suite found: include_initial on an empty axis took an element that
    was not there (numpy gives the identity alone)."""
    for name in ("cumulative_sum", "cumulative_prod"):
        f, ref = getattr(xp, name), getattr(np, name)
        empty = np.zeros((0, 3), np.uint8)
        got = f(ea.tensor(empty), axis=0, include_initial=True)
        want = ref(empty, axis=0, include_initial=True)
        assert got.shape == want.shape == (1, 3) and got.dtype == want.dtype
        np.testing.assert_array_equal(got.numpy(), want)
        x = np.arange(1.0, 7.0).reshape(2, 3)
        np.testing.assert_array_equal(
            ea.vmap(lambda v, f=f: f(v, include_initial=True))(x), ref(x, axis=1, include_initial=True)
        )
        assert_close(
            ea.grad(lambda v, f=f: xp.sum(f(v, axis=1, include_initial=True)))(x),
            numeric_grad(lambda v, ref=ref: ref(v, axis=1, include_initial=True).sum(), x),
        )


def test_like_functions_keep_the_library_of_their_argument():
    """``zeros_like(x)`` of a Tensor holding a torch tensor is a torch tensor (array API code on
    such Tensors would otherwise mix two libraries in its next operation)."""
    torch = pytest.importorskip("torch", reason="torch is an optional extra")
    t = ea.tensor(torch.ones(2, 3, dtype=torch.float32))
    for made in (xp.zeros_like(t), xp.ones_like(t, device=t.device), xp.empty_like(t), xp.full_like(t, 2.5)):
        assert isinstance(made._value, torch.Tensor) and made.dtype == xp.float32 and made.shape == (2, 3)
    assert xp.full_like(t, 2.5).numpy()[0, 0] == 2.5

    def relu_norm(x):
        return xp.sum(xp.where(x > 0, x, xp.zeros_like(x)) ** 2)

    g = ea.grad(relu_norm)(torch.tensor([1.0, -2.0, 3.0]))
    assert isinstance(g, torch.Tensor)
    np.testing.assert_array_equal(g.numpy(), [2.0, 0.0, 6.0])
    assert_close(ea.grad(lambda s: xp.sum(xp.full_like(np.ones(3), s)))(2.0), 3.0)


# -- the namespace's elementwise functions against numpy's, at special values ----------------------

UNARY = """abs acos acosh asin asinh atan atanh ceil conj cos cosh exp expm1 floor imag isfinite isinf
isnan log log1p log2 log10 logical_not negative positive real reciprocal round sign signbit sin sinh
square sqrt tan tanh trunc""".split()  # noqa: SIM905
BINARY = """add atan2 copysign divide equal floor_divide greater greater_equal hypot less less_equal
logaddexp logical_and logical_or logical_xor maximum minimum multiply nextafter not_equal pow
remainder subtract""".split()  # noqa: SIM905
INTEGER = """bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift""".split()  # noqa: SIM905

SPECIAL = st.sampled_from(
    [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan, -np.nan, 1e-300, 1e300]
)
FLOATS = hnp.arrays(np.float64, st.integers(1, 6), elements=st.one_of(SPECIAL, st.floats(-10, 10)))


def _same(got, want):
    """numpy's values exactly: nans where numpy's are, and the sign of every zero."""
    got = np.asarray(got)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got[want == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("name", UNARY)
@settings(max_examples=12)
@given(x=FLOATS)
def test_unary_functions_are_numpys_at_special_values(x, name):
    with np.errstate(all="ignore"):
        _same(getattr(xp, name)(ea.tensor(x)).numpy(), getattr(np, name)(x))


@pytest.mark.parametrize("name", BINARY)
@settings(max_examples=12)
@given(data=st.data())
def test_binary_functions_are_numpys_at_special_values(data, name):
    x = data.draw(FLOATS)
    y = data.draw(hnp.arrays(np.float64, x.shape, elements=st.one_of(SPECIAL, st.floats(-10, 10))))
    with np.errstate(all="ignore"):
        want = getattr(np, name)(x, y)
        _same(getattr(xp, name)(ea.tensor(x), ea.tensor(y)).numpy(), want)
        _same(getattr(xp, name)(ea.tensor(x), 2.0).numpy(), getattr(np, name)(x, 2.0))  # (a weak number)


@pytest.mark.parametrize("name", INTEGER)
@settings(max_examples=12)
@given(data=st.data(), dtype=st.sampled_from([np.int8, np.int64, np.uint8]))
def test_integer_functions_are_numpys(data, name, dtype):
    x = data.draw(hnp.arrays(dtype, st.integers(1, 6)))
    y = data.draw(hnp.arrays(dtype, x.shape, elements=st.integers(0, 7)))
    _same(getattr(xp, name)(ea.tensor(x), ea.tensor(y)).numpy(), getattr(np, name)(x, y))


def test_scipys_array_api_functions_run_on_tensors():
    """scipy with its array API support on (SCIPY_ARRAY_API=1, read when scipy is imported: a
    fresh process) takes a Tensor's namespace: its functions return Tensors, and those that do
    not write into their arrays differentiate (softmax, moment, against closed forms), and so do
    those that write (logsumexp, through array-api-extra's ``at``: ``x[i] = v`` gives a Tensor
    the traced result, and a mask computed inside jit or vmap is a where), under grad, jit and
    vmap."""
    pytest.importorskip("scipy", reason="scipy is an optional dependency (a quimb dependency in einad[test])")
    code = """
import numpy as np, einad as ea
import scipy.special as sp, scipy.stats as st
v = np.array([0.5, -1.0, 2.0]); a = np.arange(3.0)
out = sp.logsumexp(ea.tensor(v))
assert isinstance(out, ea.Tensor) and np.isclose(float(out), np.log(np.exp(v).sum()))
s = np.exp(v) / np.exp(v).sum()
g = ea.grad(lambda x: ea.sum(sp.softmax(x) * a))(v)
assert np.allclose(g, s * (a - (s * a).sum()), rtol=1e-12), g
g = ea.grad(lambda x: st.moment(x, order=2))(v)
assert np.allclose(g, 2 * (v - v.mean()) / 3, rtol=1e-12), g
lse = lambda x: sp.logsumexp(x)  # (writes into arrays: x[i] = v through array-api-extra's `at`)
for g in (ea.grad(lse)(v), ea.jit(ea.grad(lse))(v), ea.vmap(ea.grad(lse))(np.stack([v, v]))[1]):
    assert np.allclose(g, s, rtol=1e-12), g
w = np.array([1.0, 2.0, 0.5])
g = ea.grad(lambda x: sp.logsumexp(x, b=ea.tensor(w)))(v)
assert np.allclose(g, w * np.exp(v) / (w * np.exp(v)).sum(), rtol=1e-12), g
"""
    env = {**os.environ, "SCIPY_ARRAY_API": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
