"""einad.rules.indexing: take, take_along_axis, sort, argsort, argmax, argmin, pad, roll, tile,
repeat: values against numpy, gradients (gathers and scatters) against central differences and
gradcheck to second order, integer results without a derivative, computed indices under ea.jit;
x[i] and x.at[i] with i computed inside ea.jit or mapped by ea.vmap (gathers and scatters)
against JAX; and on every array library (`lib`): results of the input's library, dask lazy, torch gradients
equal to torch.autograd's."""

import re
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einad as ea
from einad.rules import indexing
from tests.support import op_table
from tests.support.checks import (
    check_case,
    check_lib,
    family,
    lib_value,
)
from tests.support.jax_reference import jax_reference
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, peak_bytes
from tests.support.op_table import normal, one

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4))
MASK = X > 0
ALONG = np.array([[0, 0], [3, -1], [1, 1]])


IDX = np.array([[2, 0, 3], [1, 1, 0], [3, 3, 2]])  # repeated indices: the VJP accumulates


ORDER = np.array([[1, 0, 3, 2], [3, 2, 1, 0], [0, 1, 2, 3]])


# name: (einad function, numpy reference, arguments maker (dtype -> args), complex inputs allowed)
EVERYDAY = {
    "sort": (ea.sort, np.sort, one, True),
    "sort_axis0": (lambda x: ea.sort(x, axis=0), lambda x: np.sort(x, axis=0), one, True),
    "sort_flat": (lambda x: ea.sort(x, axis=None), lambda x: np.sort(x, axis=None), one, True),
    "take": (lambda x: ea.take(x, IDX, axis=1), lambda x: np.take(x, IDX, axis=1), one, True),
    "take_flat": (lambda x: ea.take(x, [5, -1, 5]), lambda x: np.take(x, [5, -1, 5]), one, True),
    "take_one": (lambda x: ea.take(x, 2, axis=0), lambda x: np.take(x, 2, axis=0), one, True),
    "take_along_axis": (
        lambda x: ea.take_along_axis(x, ORDER[:, :3], axis=1),
        lambda x: np.take_along_axis(x, ORDER[:, :3], axis=1),
        one,
        True,
    ),
    "take_along_axis_broadcast": (
        lambda x: ea.take_along_axis(x, np.array([[0, 2, 2, 1, 0]]), axis=0),
        lambda x: np.take_along_axis(x, np.array([[0, 2, 2, 1, 0]]), axis=0),
        lambda dt: (normal((3, 1), dtype=dt),),
        True,
    ),
    "pad": (
        lambda x, c: ea.pad(x, ((1, 0), (2, 1)), constant_values=c),
        lambda x, c: np.pad(x, ((1, 0), (2, 1)), constant_values=c),
        lambda dt: (normal(dtype=dt), normal((), dtype=dt)),
        True,
    ),
    "pad_reflect": (
        lambda x: ea.pad(x, 2, mode="reflect"),
        lambda x: np.pad(x, 2, mode="reflect"),
        one,
        True,
    ),
    "pad_wrap": (
        lambda x: ea.pad(x, (1, 5), mode="wrap"),
        lambda x: np.pad(x, (1, 5), mode="wrap"),
        one,
        True,
    ),
    "roll": (lambda x: ea.roll(x, 3), lambda x: np.roll(x, 3), one, True),
    "roll_axes": (
        lambda x: ea.roll(x, (1, -5), axis=(0, 1)),
        lambda x: np.roll(x, (1, -5), axis=(0, 1)),
        one,
        True,
    ),
    "tile": (lambda x: ea.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2)), one, True),
    "repeat": (
        lambda x: ea.repeat(x, 2, axis=1),
        lambda x: np.repeat(x, 2, axis=1),
        one,
        True,
    ),
    "repeat_counts": (
        lambda x: ea.repeat(x, [2, 0, 1], axis=0),
        lambda x: np.repeat(x, [2, 0, 1], axis=0),
        one,
        True,
    ),
    "repeat_one_count_in_a_list": (
        lambda x: ea.repeat(x, [2], axis=1),
        lambda x: np.repeat(x, [2], axis=1),
        one,
        True,
    ),
}


@both_modes
@pytest.mark.parametrize(("check", "name"), op_table.cases(EVERYDAY))
def test_everyday(check, name):
    check(EVERYDAY[name])


# -- integer results and zero derivatives ---------------------------------------------------------

ARG_OPS = {
    "argmax": (lambda x: ea.argmax(x, axis=1), lambda x: np.argmax(x, axis=1)),
    "argmax_flat": (ea.argmax, np.argmax),
    "argmax_keepdims": (lambda x: ea.argmax(x, 0, keepdims=True), lambda x: np.argmax(x, 0, keepdims=True)),
    "argmax_keepdims_last": (
        lambda x: ea.argmax(x, -1, keepdims=True),
        lambda x: np.argmax(x, -1, keepdims=True),
    ),
    "argmin": (lambda x: ea.argmin(x, axis=0), lambda x: np.argmin(x, axis=0)),
    "argmin_flat_keepdims": (lambda x: ea.argmin(x, keepdims=True), lambda x: np.argmin(x, keepdims=True)),
    "argsort": (ea.argsort, np.argsort),
    "argsort_flat": (lambda x: ea.argsort(x, axis=None), lambda x: np.argsort(x, axis=None)),
}


@both_modes
@pytest.mark.parametrize("name", sorted(ARG_OPS))
def test_arg_functions_are_integers_with_no_derivative(name):
    f, ref = ARG_OPS[name]
    x = normal()
    out = f(x)
    assert out.dtype.kind == "i" and out.dtype == ref(x).dtype
    np.testing.assert_array_equal(out.numpy(), ref(x), strict=True)  # the shape too (keepdims)
    np.testing.assert_array_equal(compiled(ea.jit(f))(x), ref(x), strict=True)
    # used as indices inside a differentiated function: a gather, differentiable in x only
    g = ea.grad(lambda x: ea.sum(ea.take_along_axis(ea.reshape(x, (-1,)), ea.reshape(f(x), (-1,)), 0)))(x)
    want = np.zeros(x.size)
    np.add.at(want, ref(x).ravel(), 1.0)
    assert_close(g, want.reshape(x.shape))


@both_modes
def test_argsort_is_stable_on_ties():
    x = np.array([2.0, 1.0, 2.0, 1.0, 2.0])
    np.testing.assert_array_equal(ea.argsort(x).numpy(), [1, 3, 0, 2, 4])


@both_modes
def test_sort_gradient_goes_back_to_the_unsorted_places():
    x = np.array([3.0, -1.0, 2.0, 0.5])
    w = np.array([1.0, 2.0, 3.0, 4.0])
    g = ea.grad(lambda x: ea.sum(ea.sort(x) * w))(x)
    assert_close(g, np.array([4.0, 1.0, 3.0, 2.0]))


@both_modes
def test_take_modes():
    x = np.arange(5.0)
    for mode in ("wrap", "clip"):
        idx = np.array([-7, 0, 4, 6, 12])
        np.testing.assert_array_equal(ea.take(x, idx, mode=mode).numpy(), np.take(x, idx, mode=mode))
    with pytest.raises(IndexError):
        ea.take(x, [5])
    with pytest.raises(IndexError, match="integers"):
        ea.take(x, [0.5])


@pytest.mark.parametrize(
    "reps", [np.array(2), ea.tensor(np.array(2)), np.array([2, 1]), [np.int32(2), 1]], ids=repr
)
def test_tile_takes_reps_as_numpy_does(reps):
    """A 0-d array of reps is one count (einad iterated it: a TypeError), as numpy's tile."""
    x = np.arange(3.0)
    np.testing.assert_array_equal(ea.tile(x, reps).numpy(), np.tile(x, np.asarray(reps)))


@pytest.mark.parametrize("reps", [2.5, [2.5], [2.0, 1]], ids=str)
def test_tile_refuses_counts_that_are_not_integers(reps):
    """numpy's TypeError, where einad truncated 2.5 to 2 and gave a result."""
    with pytest.raises(TypeError):
        np.tile(np.arange(3.0), reps)
    with pytest.raises(TypeError, match=r"^tile: each of reps must be an integer, got 2\.[05] \(float\)$"):
        ea.tile(np.arange(3.0), reps)
    with pytest.raises(ValueError, match=r"^tile: reps cannot be negative, got \(2, -1\)$"):
        ea.tile(np.arange(3.0), (2, -1))


@pytest.mark.parametrize("mode", ["raise", "wrap", "clip"])
@pytest.mark.parametrize("kind", ["array", "list", "tensor"])
def test_take_from_an_empty_axis_is_numpys_index_error_naming_it(mode, kind):
    """numpy: "cannot do a non-empty take from an empty axes", whatever the mode; einad wrapped
    index 1 modulo 0 (a RuntimeWarning) and clipped it to -1, then named an index not given."""
    x = np.ones((2, 0))
    idx = {"array": np.array([1]), "list": [1], "tensor": ea.tensor(np.array([1]))}[kind]
    with pytest.raises(IndexError):
        np.take(x, np.array([1]), axis=1, mode=mode)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(IndexError, match=r"^cannot take elements from axis 1, which is empty$"):
            ea.take(x, idx, axis=1, mode=mode)
    # taking nothing from it is fine, as in numpy
    empty = np.array([], dtype=int)
    assert ea.take(x, empty, axis=1, mode=mode).shape == np.take(x, empty, axis=1, mode=mode).shape


@both_modes
@pytest.mark.parametrize("mode", ["wrap", "clip"])
def test_take_modes_with_indices_of_every_kind(mode):
    """wrap and clip give numpy's values whatever the indices are: a number, a list or numpy's array
    (wrapped or clipped once: no operation in the program), an einad Tensor, or traced under ea.jit
    (then the wrap, or the clip, is an operation of the program)."""
    x = np.arange(5.0)
    idx = np.array([-7, 0, 4, 6, 12])
    want = np.take(x, idx, mode=mode)
    for indices in (idx, list(idx), ea.tensor(idx)):
        np.testing.assert_array_equal(ea.take(x, indices, mode=mode).numpy(), want, strict=True)
    np.testing.assert_array_equal(ea.take(x, 7, mode=mode).numpy(), np.take(x, 7, mode=mode), strict=True)
    np.testing.assert_array_equal(compiled(ea.jit(lambda x, i: ea.take(x, i, mode=mode)))(x, idx), want)
    static = ea.make_graph(lambda x: ea.take(x, idx, mode=mode))(x)
    traced = ea.make_graph(lambda x, i: ea.take(x, i, mode=mode))(x, idx)
    index_ops = {"mod", "maximum", "minimum"}
    assert not index_ops & {e.op for e in static.equations}
    assert [e.op for e in traced.equations if e.op in index_ops] == (
        ["mod"] if mode == "wrap" else ["maximum", "minimum"]
    )


@both_modes
def test_computed_indices_stay_operations_under_jit():
    """take with indices computed inside the jitted function: no index is frozen in the program."""
    f = ea.jit(lambda x: ea.take(x, ea.argmax(x)))
    assert f(np.array([1.0, 5.0, 2.0])) == 5.0
    assert f(np.array([7.0, 5.0, 2.0])) == 7.0
    g = ea.jit(lambda x, i: ea.take(x, i, axis=0))  # indices as a traced argument
    np.testing.assert_array_equal(g(np.arange(4.0), np.array([3, 3, 0])), [3.0, 3.0, 0.0])
    np.testing.assert_array_equal(g(np.arange(4.0), np.array([1, 2, 0])), [1.0, 2.0, 0.0])
    assert g.cache_size() == 1
    program = ea.make_graph(lambda x: ea.sort(x))(np.ones(3))
    assert [e.op for e in program.equations] == ["argsort", "take_along_axis"]


@both_modes
def test_roll_along_an_empty_axis_is_the_empty_array():
    """As numpy: no shift modulo a length of 0 (and no division by it)."""
    for x, shift, axis in ((np.ones((0, 3)), 2, 0), (np.ones((2, 0)), (1, -1), (0, 1))):
        np.testing.assert_array_equal(ea.roll(x, shift, axis).numpy(), np.roll(x, shift, axis), strict=True)


# name: (a call einad refuses, the exception, a regular expression its message matches)
PAD_INTEGERS = r"^pad_width must be integers: an int, a \(before, after\) pair, or one pair per axis$"
REFUSALS = {
    "take_along_axis ranks": (
        lambda: ea.take_along_axis(X, np.array([0, 1]), axis=0),
        ValueError,
        "take_along_axis: indices have 1 dimensions, the array has 2",
    ),
    "repeat float": (lambda: ea.repeat(X, 2.5), ValueError, "must be non-negative integers, got 2.5"),
    "repeat negative": (lambda: ea.repeat(X, -1), ValueError, "must be non-negative integers, got -1"),
    "repeat counts": (lambda: ea.repeat(X, [1, 2], axis=0), ValueError, "2 counts for an axis of length 3"),
    "take float indices": (
        lambda: ea.take(X, np.array([0.0, 1.0], dtype=np.float32)),
        IndexError,
        r"^indices must be integers, got dtype float32$",
    ),
    "take mode": (
        lambda: ea.take(X, [0], mode="fast"),
        ValueError,
        r"^take: mode must be 'raise', 'wrap' or 'clip', got 'fast'$",
    ),
    "pad float width": (lambda: ea.pad(X, 1.5), TypeError, PAD_INTEGERS),
    "pad width of three dimensions": (lambda: ea.pad(X, np.ones((1, 1, 2), int)), TypeError, PAD_INTEGERS),
    "pad width not one pair per axis": (
        lambda: ea.pad(X, [[1, 2], [3, 4], [5, 6]]),
        ValueError,
        r"^pad_width \[\[1, 2\], \[3, 4\], \[5, 6\]\] does not fit an array of 2 dimensions$",
    ),
    "pad constant values of another shape": (
        lambda: ea.pad(X, 1, constant_values=[1.0, 2.0, 3.0]),
        ValueError,
        r"^constant_values of shape \(3,\) does not fit an array of 2 dimensions$",
    ),
    "pad callable mode": (
        lambda: ea.pad(X, 1, mode=lambda vector, width, axis, kwargs: None),
        NotImplementedError,
        r"^einad\.pad: a callable mode is not supported",
    ),
    # numpy's messages
    "pad keyword of another mode": (
        lambda: ea.pad(X, 1, mode="edge", constant_values=1.0),
        ValueError,
        r"^unsupported keyword arguments for mode 'edge': \{'constant_values'\}$",
    ),
    "pad stat_length 0": (
        lambda: ea.pad(X, 1, mode="mean", stat_length=0),
        ValueError,
        r"^stat_length of 0 yields no value for padding$",
    ),
    "pad reflect_type": (
        lambda: ea.pad(X, 1, mode="reflect", reflect_type="mirror"),
        ValueError,
        r"^pad: reflect_type must be 'even' or 'odd', got 'mirror'$",
    ),
    # numpy's ValueError for a mode it does not have (not einad's "not supported")
    "pad unknown mode": (
        lambda: ea.pad(X, 1, mode="mirror"),
        ValueError,
        r"^pad: mode 'mirror' is not a mode of",
    ),
    # numpy's message, naming the empty axis of the array (not of one axis' positions)
    "pad empty axis": (
        lambda: ea.pad(np.ones((2, 0)), 1, mode="edge"),
        ValueError,
        r"^can't extend empty axis 1 using modes other than 'constant' or 'empty'$",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_name_the_problem(name):
    call, error, message = REFUSALS[name]
    with pytest.raises(error, match=message):
        call()


@both_modes
def test_pad_refuses_negative_widths():
    with pytest.raises(ValueError, match="negative"):
        ea.pad(np.ones(3), -1)


PAD_MODES = [
    ("constant", {"constant_values": ((1, 2), (3, 4))}),
    ("constant", {"constant_values": 7.5}),
    ("linear_ramp", {}),
    ("linear_ramp", {"end_values": ((1, 2), (-3, 4))}),
    ("maximum", {}),
    ("minimum", {"stat_length": 2}),
    ("mean", {"stat_length": ((1, 2), (3, 1))}),
    ("median", {}),
    ("median", {"stat_length": 2}),
    ("reflect", {"reflect_type": "odd"}),
    ("symmetric", {"reflect_type": "odd"}),
    ("reflect", {}),
    ("symmetric", {}),
    ("edge", {}),
    ("wrap", {}),
]


@pytest.mark.parametrize("mode, kwargs", PAD_MODES, ids=[f"{m}-{sorted(k)}" for m, k in PAD_MODES])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_every_pad_mode_is_numpys(mode, kwargs, dtype):
    """Every numpy.pad mode (but a callable), its keywords per axis and side, widths wider than
    the axis (the odd reflections then go on from the new edge, in numpy's chunks), integer
    arrays (the rounded mean and median, the ramps rounded down), float32 kept."""
    x = (np.random.default_rng(0).normal(size=(3, 4)) * 4).astype(dtype)
    for width in (1, ((2, 3), (7, 1)), ((0, 9), (5, 0))):
        want = np.pad(x, width, mode=mode, **kwargs)
        got = ea.pad(x, width, mode=mode, **kwargs)
        assert got.dtype == want.dtype
        assert_close(got, want, rtol=1e-5 if dtype == np.float32 else 1e-12, atol=1e-5)
    if mode in ("reflect", "symmetric"):  # a single element reflects as an edge (numpy's legacy)
        v = np.arange(1.0, 4.0).reshape(1, 3)
        assert_close(ea.pad(v, 3, mode=mode, **kwargs), np.pad(v, 3, mode=mode, **kwargs))


def test_pad_empty_is_zeros_and_median_keeps_nan():
    """ "empty" is zeros (numpy leaves the values undefined; JAX's zeros); a median over a lane
    with a nan is nan, as numpy's (a sort alone would put the nan last and pick another)."""
    out = ea.pad(np.ones((2, 2)), 1, mode="empty")
    assert_close(out, np.pad(np.ones((2, 2)), 1))
    x = np.array([[1.0, np.nan, 3.0], [4.0, 5.0, 6.0]])
    np.testing.assert_array_equal(
        np.isnan(ea.pad(x, 1, mode="median").numpy()), np.isnan(np.pad(x, 1, mode="median"))
    )


@both_modes
@pytest.mark.parametrize("mode, kwargs", PAD_MODES[:11], ids=[f"{m}-{sorted(k)}" for m, k in PAD_MODES[:11]])
def test_pad_modes_differentiate(mode, kwargs):
    """By central differences in both modes; the per-side constants and end values as Tensors
    get their gradient too (each one's count of padded places)."""
    x = np.random.default_rng(1).normal(size=(3, 4))
    assert ea.gradcheck(lambda v: ea.pad(v, ((2, 3), (7, 1)), mode=mode, **kwargs), x)
    if "constant_values" in kwargs or "end_values" in kwargs:
        key = "constant_values" if "constant_values" in kwargs else "end_values"
        c = np.array([[1.0, 2.0], [3.0, 4.0]])
        assert ea.gradcheck(lambda c: ea.pad(x, ((2, 3), (7, 1)), mode=mode, **{key: c}), c)
    if mode == "constant" and "constant_values" in kwargs:
        g = ea.grad(lambda c: ea.sum(ea.pad(x, ((1, 2), (3, 0)), constant_values=c)))(np.ones((2, 2)))
        assert_close(g, np.array([[4.0, 8.0], [18.0, 0.0]]))  # 1 row of 4, 2 rows of 4, 3 columns of 6


# -- on every array library ----------------------------------------------------------------


# name: (einad function, numpy reference, arguments, differentiated argnums), on every library
LIB_CASES = {
    "take_along_axis_narrow_indices": (
        # uint8 and int32 indices into an axis of 100 whose flat positions pass 255
        *family(
            (
                lambda x: ea.take_along_axis(x, np.full((4, 1), 99, np.uint8), axis=1),
                lambda x: np.take_along_axis(x, np.full((4, 1), 99, np.uint8), axis=1),
            ),
            (
                lambda x: ea.take_along_axis(x, np.array([[-1, 0, 98]], np.int32), axis=1),
                lambda x: np.take_along_axis(x, np.array([[-1, 0, 98]], np.int32), axis=1),
            ),
            (  # two rows: dask's flat positions add each row's offset
                lambda x: ea.take_along_axis(x[:2], np.array([[5], [7]]), axis=1),
                lambda x: np.take_along_axis(x[:2], np.array([[5], [7]]), axis=1),
            ),
        ),
        (np.arange(400.0).reshape(4, 100),),
        (0,),
    ),
    "take_along_axis_broadcast_array": (
        # the array's axis 0 (of 1) broadcasts against the indices' 2: the gradient sums it back
        lambda x: ea.take_along_axis(x, np.array([[4, 0, 0], [1, 3, 4]]), axis=1),
        lambda x: np.take_along_axis(x, np.array([[4, 0, 0], [1, 3, 4]]), axis=1),
        (np.arange(5.0).reshape(1, 5),),
        (0,),
    ),
    "take": (
        *family(
            (lambda x: ea.take(x, [2, 0, 2], axis=1), lambda x: np.take(x, [2, 0, 2], axis=1)),
            (lambda x: ea.take(x, [[11, 0], [0, 5]]), lambda x: np.take(x, [[11, 0], [0, 5]])),
            (lambda x: ea.take(x, 1, axis=0), lambda x: np.take(x, 1, axis=0)),
            (
                lambda x: ea.take(x, [5, -7], axis=1, mode="wrap"),
                lambda x: np.take(x, [5, -7], axis=1, mode="wrap"),
            ),
            (
                lambda x: ea.take(x, [5, -7], axis=0, mode="clip"),
                lambda x: np.take(x, [5, -7], axis=0, mode="clip"),
            ),
        ),
        (X,),
        (0,),
    ),
    # indices of the library (made an argument): wrapped or clipped as operations, so dask's stay lazy
    "take_modes_library_indices": (
        *family(
            (lambda x, i: ea.take(x, i, 1, mode="wrap"), lambda x, i: np.take(x, i, 1, mode="wrap")),
            (lambda x, i: ea.take(x, i, 0, mode="clip"), lambda x, i: np.take(x, i, 0, mode="clip")),
        ),
        (X, np.array([5, -7, 1])),
        (0,),
    ),
    "take_along_axis": (
        *family(
            (lambda x: ea.take_along_axis(x, ALONG, axis=1), lambda x: np.take_along_axis(x, ALONG, axis=1)),
            (
                lambda x: ea.take_along_axis(x, np.array([[2, 0, 0]]).T, axis=0),
                lambda x: np.take_along_axis(x, np.array([[2, 0, 0]]).T, axis=0),
            ),
            (lambda x: ea.take_along_axis(x, [0, 11, 0], axis=None), lambda x: x.ravel()[[0, 11, 0]]),
        ),
        (X,),
        (0,),
    ),
    "sort": (
        *family(
            (lambda x: ea.sort(x, axis=1), lambda x: np.sort(x, axis=1)),
            (lambda x: ea.sort(x, axis=0), lambda x: np.sort(x, axis=0)),
            (lambda x: ea.sort(x, axis=None), lambda x: np.sort(x, axis=None)),
        ),
        (X,),
        (0,),
    ),
    "pad_constant": (
        *family(
            (lambda x: ea.pad(x, 1), lambda x: np.pad(x, 1)),
            (
                lambda x: ea.pad(x, ((1, 0), (2, 1)), constant_values=2.5),
                lambda x: np.pad(x, ((1, 0), (2, 1)), constant_values=2.5),
            ),
        ),
        (X,),
        (0,),
    ),
    "pad_modes": (
        *family(
            (
                lambda x: ea.pad(x, ((2, 1), (0, 3)), mode="edge"),
                lambda x: np.pad(x, ((2, 1), (0, 3)), mode="edge"),
            ),
            (lambda x: ea.pad(x, 2, mode="reflect"), lambda x: np.pad(x, 2, mode="reflect")),
            (lambda x: ea.pad(x, 1, mode="symmetric"), lambda x: np.pad(x, 1, mode="symmetric")),
            (lambda x: ea.pad(x, (1, 2), mode="wrap"), lambda x: np.pad(x, (1, 2), mode="wrap")),
        ),
        (X,),
        (0,),
    ),
    "pad_numpy_modes": (
        *family(
            (
                lambda x: ea.pad(x, (2, 1), mode="linear_ramp"),
                lambda x: np.pad(x, (2, 1), mode="linear_ramp"),
            ),
            (
                lambda x: ea.pad(x, 2, mode="mean", stat_length=2),
                lambda x: np.pad(x, 2, mode="mean", stat_length=2),
            ),
            (lambda x: ea.pad(x, (1, 3), mode="median"), lambda x: np.pad(x, (1, 3), mode="median")),
            (lambda x: ea.pad(x, 1, mode="maximum"), lambda x: np.pad(x, 1, mode="maximum")),
            (
                lambda x: ea.pad(x, 5, mode="reflect", reflect_type="odd"),
                lambda x: np.pad(x, 5, mode="reflect", reflect_type="odd"),
            ),
        ),
        (X,),
        (0,),
    ),
    "roll": (
        *family(
            (lambda x: ea.roll(x, 1, 1), lambda x: np.roll(x, 1, 1)),
            (lambda x: ea.roll(x, -5), lambda x: np.roll(x, -5)),
            (lambda x: ea.roll(x, (1, 2), (0, 1)), lambda x: np.roll(x, (1, 2), (0, 1))),
        ),
        (X,),
        (0,),
    ),
    "tile_repeat": (
        *family(
            (lambda x: ea.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2))),
            (lambda x: ea.repeat(x, 2, axis=1), lambda x: np.repeat(x, 2, axis=1)),
            (lambda x: ea.repeat(x, [1, 0, 3], axis=0), lambda x: np.repeat(x, [1, 0, 3], axis=0)),
            (lambda x: ea.repeat(x, 2), lambda x: np.repeat(x, 2)),
        ),
        (X,),
        (0,),
    ),
}


@pytest.mark.parametrize("name", sorted(LIB_CASES))
def test_on_every_library(lib, name):
    """The value equals numpy's and is of the input's library; the gradient of <w, f(x)> equals
    einad's on numpy and is of the library; on dask nothing is computed inside einad."""
    check_case(lib, LIB_CASES[name], RNG)


def test_a_chain_of_gathers_keeps_only_the_indices_for_its_gradient():
    """The VJP of take_along_axis reads only the indices (a scatter-add of the cotangent), so the
    reverse graph holds neither the gathered array nor the result: in a chain of ten gathers each
    intermediate is freed as soon as the next exists, and the peak is a few arrays, not one per step.
    Kills: shape.indices_read (take_along_axis and its scatter) keeping the array operand or the result.
    Measured (1 array = 2 MB, 10 steps): 3.0 arrays (with the indices); 13.0 keeping the operand,
    12.0 the result."""
    x = RNG.standard_normal(1 << 18)
    perm = RNG.permutation(x.size)

    def chain(x):
        y = x
        for _ in range(10):
            y = ea.take_along_axis(y + 1.0, perm, axis=0)
        return ea.sum(y * y)

    value, g = ea.value_and_grad(chain)(x)
    want = x + 10.0  # a permutation of x + 10 after ten steps
    assert_close(value, np.sum(want * want))
    assert_close(g, 2.0 * want)
    peak = peak_bytes(ea.value_and_grad(chain), x) / x.nbytes
    assert peak < 7, f"peak {peak:.2f} arrays for a 10-step chain"


@pytest.mark.parametrize(
    ("name", "f", "ref"),
    [
        ("argsort", lambda x: ea.argsort(x, axis=0), lambda x: np.argsort(x, axis=0, kind="stable")),
        (
            "argsort_flat",
            lambda x: ea.argsort(x, axis=None),
            lambda x: np.argsort(x, axis=None, kind="stable"),
        ),
        ("argmax", lambda x: ea.argmax(x, axis=1), lambda x: np.argmax(x, axis=1)),
        ("argmax_flat", lambda x: ea.argmax(x, keepdims=True), lambda x: np.argmax(x, keepdims=True)),
        (
            "argmin",
            lambda x: ea.argmin(x, axis=0, keepdims=True),
            lambda x: np.argmin(x, axis=0, keepdims=True),
        ),
        ("argmin_flat", lambda x: ea.argmin(x), lambda x: np.argmin(x)),
    ],
)
def test_integer_results(lib, name, f, ref):
    """The arg-functions: integer arrays of the input's library (ties broken as numpy does)."""
    x = np.array([[3.0, 1.0, 3.0, 0.5], [1.0, 1.0, -2.0, 7.0], [0.0, 4.0, 3.0, 7.0]])
    with lib.lazy():
        out = f(lib.asarray(x))
    got = lib_value(lib, out)
    assert got.dtype.kind == "i"
    np.testing.assert_array_equal(got, ref(x), strict=True)


OUT_OF_RANGE = {  # name: (the call, written once for m = einad and m = numpy, numpy's message)
    "take -13": (lambda m, x: m.take(x, [-13]), "index -13 is out of bounds for axis 0 with size 12"),
    "take 12": (lambda m, x: m.take(x, [0, 12]), "index 12 is out of bounds for axis 0 with size 12"),
    "take axis 1": (
        lambda m, x: m.take(x, np.array([5]), axis=1),
        "index 5 is out of bounds for axis 1 with size 4",
    ),
    "take_along 4": (
        lambda m, x: m.take_along_axis(x, np.array([[4]]), axis=1),
        "index 4 is out of bounds for axis 1 with size 4",
    ),
    "take_along -5": (
        lambda m, x: m.take_along_axis(x, np.array([[-5]]), axis=-1),
        "index -5 is out of bounds for axis 1 with size 4",
    ),
}


@pytest.mark.parametrize("name", sorted(OUT_OF_RANGE))
def test_indices_out_of_range_are_numpys_index_error_on_every_library(lib, name):
    """numpy's IndexError, naming the user's axis, at the call: torch's and dask's gathers gave
    a wrong element (index 12 of 12 read 0.0, -5 of 4 read the last), and under vmap numpy's
    own message named the batch axis."""
    call, message = OUT_OF_RANGE[name]
    x = np.arange(12.0).reshape(3, 4)
    with pytest.raises(IndexError, match=f"^{re.escape(message)}$"):
        call(np, x)
    with pytest.raises(IndexError, match=f"^{re.escape(message)}$"):
        call(ea, lib.asarray(x))
    with pytest.raises(IndexError, match=f"^{re.escape(message)}$"):
        ea.vmap(lambda x: call(ea, x))(lib.asarray(np.stack([x, x])))


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_impl_runs_the_librarys_function_along_the_axis(lib, name):
    """`_arg_impl(name)`, called here (argmax_p's and argmin_p's are made at import): the library's
    `name` of the operand along `axis`, numpy's indices (the first on ties) of the library.

    Kills: _arg_impl (the implementation it makes)."""
    impl = indexing._arg_impl(name)
    assert impl.__name__ == f"_{name}_impl"
    x = np.array([[3.0, 1.0, 3.0, 0.5], [1.0, 1.0, -2.0, 7.0], [0.0, 4.0, 3.0, 7.0]])
    for axis in (0, 1):
        with lib.lazy():
            out = impl(lib.asarray(x), axis=axis)
        np.testing.assert_array_equal(lib_value(lib, out), getattr(np, name)(x, axis=axis), strict=True)


def test_take_along_axis_hessian_with_an_array_broadcast_against_the_indices(lib):
    """f(x) = sum(take_along_axis(x, idx) ** 3) with x of shape (1, 5) and idx of (2, 3): the
    Hessian is diagonal, 6 x_j times how often idx names j; its shape is x's twice."""
    x = np.arange(1.0, 6.0).reshape(1, 5)
    idx = np.array([[4, 0, 0], [1, 3, 4]])
    counts = np.bincount(idx.ravel(), minlength=5)
    with lib.lazy():
        h = ea.hessian(lambda v: ea.sum(ea.take_along_axis(v, idx, axis=1) ** 3))(lib.asarray(x))
    check_lib(lib, h, np.diag(6 * x[0] * counts).reshape(1, 5, 1, 5))


@pytest.mark.parametrize(
    "call",
    [
        lambda x: ea.take(x, [3], axis=0),
        lambda x: ea.take(x, [0, -4], axis=0),
        lambda x: ea.take(x, 12),
        lambda x: ea.take_along_axis(x, np.array([[0], [4], [1]]), axis=1),
        lambda x: ea.take_along_axis(x, np.array([-13]), axis=None),
    ],
    ids=["take", "take-negative", "take-flat", "take_along_axis", "take_along_axis-flat"],
)
def test_an_index_out_of_range_is_an_index_error_on_every_library(lib, call):
    """numpy's take and take_along_axis raise IndexError for an index out of range (the docstrings
    promise it); on torch, array-api-strict and dask einad's gather clamped or wrapped it, or read
    past the axis: ea.take(torch_x, [3], axis=0) of a 3-row x gave its last row, an index of -4
    the middle one (numpy: IndexError both)."""
    a = np.arange(12.0).reshape(3, 4)
    with pytest.raises(IndexError):
        call(a)  # numpy's own error
    with pytest.raises(IndexError, match="out of bounds"):
        call(lib.asarray(a))


def test_a_library_with_take_along_axis_gathers_with_it(monkeypatch):
    """Where the library has the standard's take_along_axis (array-api-strict does), the gather is
    one call of it, not the flat `take` the fallback (dask's) computes positions for."""
    strict = pytest.importorskip("array_api_strict")
    calls = []
    native = strict.take_along_axis
    monkeypatch.setattr(strict, "take_along_axis", lambda *a, **k: calls.append(1) or native(*a, **k))
    out = ea.take_along_axis(strict.asarray(X), np.array([[2], [0], [1]]), axis=1)
    assert calls == [1]
    np.testing.assert_array_equal(np.asarray(out), np.take_along_axis(X, np.array([[2], [0], [1]]), axis=1))


def test_sort_gradient_through_argsort(lib):
    """`sort` is a gather by `argsort`'s computed indices: its gradient scatters back, exactly."""
    x = np.array([[3.0, 1.0, 2.0, 0.5], [1.0, 6.0, -2.0, 7.0]])
    w = np.arange(8.0).reshape(2, 4)

    def loss(x, w):
        return ea.einsum("ij,ij->", ea.sort(ea.einsum("ij,ij->ij", x, x), axis=1), w)

    with lib.lazy():
        g = ea.grad(loss)(lib.asarray(x), lib.asarray(w))
    assert_close(lib_value(lib, g), ea.grad(loss)(x, w))


def test_the_pullback_of_take_along_axis_differentiated_in_its_cotangent_keeps_float32():
    """take_along_axis's pullback scatters the cotangent onto x's shape; differentiated in
    that cotangent it gathers again, in the cotangent's dtype (float32 here). Reference:
    numpy's take_along_axis, the transpose of the scatter. Kills: einsum.sum_to_shape 32"""
    x = X.astype(np.float32)
    idx = np.array([[0, 0], [3, 1], [2, 2]])
    _, pull = ea.vjp(lambda x: ea.take_along_axis(x, idx, axis=1), x)
    _, pull_pull = ea.vjp(lambda ct: pull(ct)[0], np.ones(idx.shape, np.float32))
    u = np.arange(x.size, dtype=np.float32).reshape(x.shape)
    (got,) = pull_pull(u)
    assert got.dtype == np.float32
    assert_close(got, np.take_along_axis(u, idx, axis=1))
    pull_pull_of = lambda ct, u: ea.vjp(lambda ct: pull(ct)[0], ct)[1](u)
    staged = ea.make_graph(pull_pull_of)(np.ones(idx.shape, np.float32), u)
    assert "astype" not in str(staged), staged  # float32 throughout: no cast there and back


def test_torch_autograd_sort_take_along_where():
    torch = pytest.importorskip("torch")
    x32 = X.astype(np.float32)
    idx = np.array([[0, 0], [3, 1], [2, 2]])

    def einad_loss(x):
        s = ea.sort(x, axis=1)
        t = ea.take_along_axis(x, idx, axis=1)
        return (
            ea.einsum("ij,ij->", s, s)
            + ea.einsum("ij->", t)
            + ea.einsum("ij->", ea.where(torch.from_numpy(MASK), x, 0.0))
        )

    tx = torch.from_numpy(x32.copy()).requires_grad_(True)
    s = torch.sort(tx, dim=1).values
    t = torch.take_along_dim(tx, torch.from_numpy(idx), dim=1)
    ((s * s).sum() + t.sum() + torch.where(tx > 0, tx, 0.0).sum()).backward()

    g = ea.grad(einad_loss)(torch.from_numpy(x32.copy()))
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float32
    assert_close(g.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


# -- indices computed inside ea.jit or mapped by ea.vmap: gathers and scatters, against JAX ------------

CUBE = RNG.standard_normal((4, 5, 6))
# name: (f(x, *indices), the indices); indexing reads the same in einad, numpy and JAX
TRACED_INDICES = {
    "int": (lambda x, i: x[i], (2,)),
    "negative_int": (lambda x, i: x[i], (-1,)),
    "array": (lambda x, i: x[i], (np.array([1, 3, -1, 1]),)),
    "array_2d": (lambda x, i: x[i], (np.array([[0, 1], [3, 3]]),)),
    "slice_none_array": (lambda x, j: x[:, None, j], (np.array([4, 0, -2]),)),
    "arrays_broadcast": (lambda x, i, k: x[i, 1:, k], (np.array([[0], [3]]), np.array([5, -1, 0]))),
    "ellipsis": (lambda x, k: x[..., k], (np.array([[2, -2]]),)),
    "int_and_array": (lambda x, i, j: x[i, j], (1, np.array([0, 4, 4]))),
    "with_a_constant_array": (lambda x, i: x[i, :, np.array([1, 2])], (np.array([0, -1]),)),
}
AT_X = RNG.standard_normal((4, 5))
AT_V = RNG.standard_normal((3, 5))
# name: (f(x, i, v), i, v); `i` unique where the update is `set` (JAX leaves repeated writes unspecified)
TRACED_UPDATES = {
    "set": (lambda x, i, v: x.at[i].set(v), np.array([2, 0, -1]), AT_V),
    "add_repeated": (lambda x, i, v: x.at[i].add(v), np.array([1, 3, 1]), AT_V),
    "set_one_place": (lambda x, i, v: x.at[i, 3].set(v), np.array(2), AT_V[0, 0]),
    "add_columns": (lambda x, i, v: x.at[:, i].add(v), np.array([4, 4, 0]), AT_V[:, :4].T),
}
MAPPED_I = np.array([[0, 0, 2], [3, 1, 3]])  # one index per example, repeated within each
MAPPED_V = RNG.standard_normal((2, 3, 5))


def cube(y):
    return (y**3).sum()


def jax_indexing(jax):
    """The reference (run by `jax_reference` in a subprocess): JAX's gradients of each case's
    ``sum(f**3)`` in x (and in v for the updates), per example for the mapped update, and one
    Hessian."""
    jnp = jax.numpy

    def everything(cube_x, at_x, indices, updates, mapped_i):  # (the indices traced, as in the test)
        out = []
        for (f, _), idx in zip(TRACED_INDICES.values(), indices):
            out.append(jax.grad(lambda x, *i, f=f: cube(f(x, *i)))(cube_x, *idx))
        for (f, _, v), i in zip(TRACED_UPDATES.values(), updates):
            loss = jax.grad(lambda x, i, v, f=f: cube(f(x, i, v)), argnums=(0, 2))
            out += [f(at_x, i, jnp.asarray(v)), *loss(at_x, i, jnp.asarray(v))]
        per_example = jax.vmap(jax.grad(lambda x, i, v: cube(x.at[i].add(v)), argnums=(0, 2)), (None, 0, 0))
        out += list(per_example(at_x, mapped_i, MAPPED_V))
        out.append(jax.hessian(lambda x, i: cube(x[i]))(cube_x[0, 0], np.array([1, -1, 1])))
        return out

    indices = [idx for _, idx in TRACED_INDICES.values()]
    updates = [i for _, i, _ in TRACED_UPDATES.values()]
    return jax.jit(everything)(jnp.asarray(CUBE), jnp.asarray(AT_X), indices, updates, MAPPED_I)


@pytest.fixture(scope="module")
def jax_indexed():
    return jax_reference("tests.rules.test_indexing", "jax_indexing")


def test_indices_computed_inside_jit_are_gathers_against_jax(jax_indexed):
    """x[i] with i an argument of the jitted function (an int, arrays of 1 and 2 dimensions,
    among slices, None, ... and a constant array, several broadcasting, negative): a `gather`
    equation, whose value is numpy's and whose gradient is JAX's in every order of jit and grad.
    Was a TracerError (the index was a static parameter of the program)."""
    grads = iter(jax_indexed)
    for name, (f, idx) in TRACED_INDICES.items():
        want = f(CUBE, *idx)
        assert_close(compiled(ea.jit(f))(CUBE, *idx), want)
        graph = ea.make_graph(f)(CUBE, *idx)
        assert [e.op for e in graph.equations] == ["gather"], (name, str(graph))
        loss = lambda x, *i, f=f: cube(f(x, *i))
        grad = next(grads)
        assert_close(compiled(ea.jit(ea.grad(loss)))(CUBE, *idx), grad)
        assert_close(ea.grad(ea.jit(loss))(CUBE, *idx), grad)
        # linear in x: the tangent is the gather of the tangent
        jitted = ea.jit(f)
        _, tangent = ea.jvp(lambda x, jitted=jitted, idx=idx: jitted(x, *idx), (CUBE,), (CUBE**2,))
        assert_close(tangent, f(CUBE**2, *idx))


def test_updates_at_indices_computed_inside_jit_are_scatters_against_jax(jax_indexed):
    """x.at[i].set(v) / .add(v) with i an argument of the jitted function: scatters, with JAX's
    values and gradients in x and v (a repeated index adds twice). Were TracerErrors."""
    ref = iter(jax_indexed[len(TRACED_INDICES) :])
    for f, i, v in TRACED_UPDATES.values():
        want, gx, gv = next(ref), next(ref), next(ref)
        assert_close(compiled(ea.jit(f))(AT_X, i, v), want)
        loss = lambda x, i, v, f=f: cube(f(x, i, v))
        for grads in (ea.jit(ea.grad(loss, argnums=(0, 2))), ea.grad(ea.jit(loss), argnums=(0, 2))):
            got_x, got_v = grads(AT_X, i, v)
            assert_close(got_x, gx)
            assert_close(got_v, gv)
    # mapped by vmap: each example its own indices, repeated ones added twice, in one scatter
    per_example = ea.vmap(ea.grad(lambda x, i, v: cube(x.at[i].add(v)), argnums=(0, 2)), (None, 0, 0))
    for got, want in zip(per_example(AT_X, MAPPED_I, MAPPED_V), (next(ref), next(ref))):
        assert_close(got, want)
    eager = per_example(AT_X, MAPPED_I, MAPPED_V)
    for got, want in zip(ea.jit(per_example)(AT_X, MAPPED_I, MAPPED_V), eager):
        assert_close(got, want)
    hessian = next(ref)
    f = lambda x, i: cube(x[i])
    for h in (ea.hessian(ea.jit(f)), ea.jit(ea.hessian(f))):
        assert_close(h(CUBE[0, 0], np.array([1, -1, 1])), hessian)


def test_set_at_a_repeated_traced_index_keeps_the_last_write():
    """As numpy's assignment (and einad's set at a constant index): the last value written to a
    place stays, and only it receives that place's cotangent."""
    i, v = np.array([1, 3, 1]), AT_V
    want = AT_X.copy()
    want[i] = v
    f = lambda x, i, v: x.at[i].set(v)
    assert_close(compiled(ea.jit(f))(AT_X, i, v), want)
    stacked = ea.vmap(f)(np.stack([AT_X, AT_X]), np.stack([i, i]), np.stack([v, v]))
    assert_close(stacked, np.stack([want, want]))
    gx, gv = ea.jit(ea.grad(lambda x, i, v: cube(f(x, i, v)), argnums=(0, 2)))(AT_X, i, v)
    written = np.isin(np.arange(4), i)[:, None]
    assert_close(gx, np.where(written, 0.0, 3 * AT_X**2))
    assert_close(gv, np.stack([np.zeros(5), 3 * v[1] ** 2, 3 * v[2] ** 2]))


def test_the_other_jitted_updates_take_a_traced_integer_and_refuse_a_traced_array():
    """``.multiply``, ``.min``, ``.apply`` ... with an index computed inside `einad.jit`: an integer
    names one place, so it is one gather, the operation and a scatter (each call its own place);
    an index array may repeat a place, which only the run would show (JAX's scatters apply the
    operation in turn there), so it is a TracerError naming the updates that take one."""
    x = np.arange(1.0, 6.0)
    f = ea.jit(lambda x, i: x.at[i].multiply(3.0))
    for i in (0, 4, -2):
        want = x.copy()
        want[i] *= 3.0
        assert_close(f(x, i), want)
    assert f.cache_size() == 1
    g = ea.jit(ea.grad(lambda x, i: ea.sum(x.at[i].max(2.5) ** 2)))
    assert_close(g(x, 0), [0.0, 4.0, 6.0, 8.0, 10.0])  # x[0] = 1 lost to 2.5: no derivative
    assert_close(g(x, 3), [2.0, 4.0, 6.0, 8.0, 10.0])
    h = ea.jit(lambda x, i: x.at[i].apply(ea.exp))
    assert_close(h(x, 1), np.where(np.arange(5) == 1, np.exp(x), x))
    with pytest.raises(ea.TracerError, match=r"index array.*\.set, \.add and \.get"):
        ea.jit(lambda x, i: x.at[i].min(0.0))(x, np.array([1, 1]))


def test_updates_at_a_mask_computed_inside_jit_or_mapped_are_wheres():
    """``x.at[mask].set(v)`` / ``.add(v)`` with a boolean mask computed inside `einad.jit` or
    mapped by `vmap`, `v` one value for every selected place (a scalar, or a row where the mask
    covers the leading axis): ``where(mask, v, x)`` (``x + where(mask, v, 0)``), as JAX's, with
    eager einad's values (numpy's assignment) and gradients (scipy's logsumexp writes this way
    under jit). Were TracerErrors. A value per place, whose count only the run knows, is a
    TracerError naming ea.where; a mask of another shape numpy's IndexError."""
    x = np.arange(-3.0, 3.0).reshape(2, 3) + 0.5
    row = np.array([10.0, 20.0, 30.0])
    cases = [
        (lambda x, v: x.at[x > 0].set(v), 7.0),
        (lambda x, v: x.at[(x[:, 0] > -1,)].set(v), row),
        (lambda x, v: x.at[x < 0].add(v), 2.5),
        (lambda x, v: x.at[ea.sum(x, axis=1) > 0].add(v), row),
    ]
    for f, v in cases:
        want = f(ea.tensor(x), v).numpy()
        assert_close(compiled(ea.jit(f))(x, v), want)
        ops = [e.op for e in ea.make_graph(f)(x, v).equations]
        assert "where" in ops and not any("scatter" in op for op in ops), ops
        mirrored = f(ea.tensor(-x), v).numpy()
        assert_close(ea.vmap(f, (0, None))(np.stack([x, -x]), v), np.stack([want, mirrored]))
        loss = lambda x, v, f=f: ea.sum(f(x, v) ** 3)
        eager = ea.grad(loss, argnums=(0, 1))(x, v)
        for got, g in zip(ea.jit(ea.grad(loss, argnums=(0, 1)))(x, v), eager):
            assert_close(got, g)
    with pytest.raises(ea.TracerError, match=r"one value to every selected place.*ea\.where"):
        ea.jit(lambda x, v: x.at[x > 0].set(v))(x, np.arange(3.0))
    with pytest.raises(IndexError, match=r"boolean index of shape \(2, 2\) does not match"):
        ea.jit(lambda x: x.at[(x > 0)[:, :2]].set(0.0))(x)


def test_a_jitted_gather_replays_each_calls_index():
    """The index is an input of the program, not a constant: a second call with another index
    reads its own elements, from the same program; an index out of range is numpy's IndexError
    when the program runs with it (JAX would clamp it)."""
    f = ea.jit(lambda x, i: x[i] * 2.0)
    x = np.arange(5.0)
    assert_close(f(x, np.array([1, 3])), [2.0, 6.0])
    assert_close(f(x, np.array([4, -5])), [8.0, 0.0])
    g = ea.jit(lambda x, i: x.at[i].add(1.0))
    assert_close(g(x, 0), [1.0, 1.0, 2.0, 3.0, 4.0])
    assert_close(g(x, 4), [0.0, 1.0, 2.0, 3.0, 5.0])
    assert f.cache_size() == g.cache_size() == 1
    with pytest.raises(IndexError, match="index 5 is out of bounds for axis 0 with size 5"):
        f(x, np.array([5, 0]))
    with pytest.raises(IndexError, match="out of bounds"):
        g(x, -6)


# -- diff ----------------------------------------------------------------------------------------


@both_modes
@pytest.mark.parametrize(
    "kwargs",
    [{}, {"n": 2}, {"axis": 0}, {"n": 0}, {"n": 9}, {"prepend": 1.5}, {"n": 3, "append": "columns"}],
    ids=["first", "second", "axis0", "zeroth", "past-the-length", "prepend-number", "append-array"],
)
def test_diff_is_numpys_and_differentiates_as_its_transpose(kwargs):
    """numpy.diff (missing, and refused on Tensors by np.diff): forward differences along an
    axis, `n` times, after prepend/append; linear, so its derivatives are checked by central
    differences in both modes, eagerly and jitted, and the value and dtype are numpy's for
    floats, integers and booleans (numpy's ``!=``)."""
    x = RNG.standard_normal((3, 5))
    kwargs = {k: (x[:, :2] * 0.5 if v == "columns" else v) for k, v in kwargs.items()}
    want = np.diff(x, **kwargs)
    got = ea.diff(x, **kwargs)
    assert got.shape == want.shape
    assert_close(got, want)
    assert_close(np.diff(ea.tensor(x), **kwargs), want)
    assert ea.gradcheck(lambda a: ea.sum(ea.sin(ea.diff(a, **kwargs))), x)
    for values in (np.arange(10).reshape(2, 5) ** 2, x > 0):
        np.testing.assert_array_equal(
            ea.diff(values, **{k: v for k, v in kwargs.items() if k in ("n", "axis")}).numpy(),
            np.diff(values, **{k: v for k, v in kwargs.items() if k in ("n", "axis")}),
        )


def test_diff_on_every_library_and_its_errors(lib):
    x = RNG.standard_normal((2, 4))
    check_lib(lib, ea.diff(lib.asarray(x), prepend=lib.asarray(x[:, :1])), np.diff(x, prepend=x[:, :1]))
    with pytest.raises(ValueError, match="at least one dimensional"):
        ea.diff(lib.asarray(np.float64(1.0)))
    with pytest.raises(ValueError, match="order must be non-negative but got -1"):
        ea.diff(lib.asarray(x), -1)
    with pytest.raises(np.exceptions.AxisError):
        ea.diff(lib.asarray(x), axis=2)


@st.composite
def _pads(draw):
    """A random numpy.pad call: an array (rank 1-3, sizes 1-4, float64 or int64), widths per
    axis and side (0-6: wider than the axis too), a mode and keywords it takes."""
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.normal(size=shape) * 3
    if draw(st.booleans()):
        x = np.round(x).astype(np.int64)
    widths = [(draw(st.integers(0, 6)), draw(st.integers(0, 6))) for _ in shape]
    mode, kwargs = draw(st.sampled_from(PAD_MODES))
    kwargs = dict(kwargs)
    if "stat_length" in kwargs or (mode in ("maximum", "minimum", "mean", "median") and draw(st.booleans())):
        kwargs["stat_length"] = [(draw(st.integers(1, 5)), draw(st.integers(1, 5))) for _ in shape]
    for key in ("constant_values", "end_values"):
        if key in kwargs:
            kwargs[key] = [(float(draw(st.integers(-3, 3))), float(draw(st.integers(-3, 3)))) for _ in shape]
    return x, widths, mode, kwargs


@given(_pads())
def test_random_pads_are_numpys_and_the_linear_modes_differentiate(case):
    """Random widths (wider than the axis too), modes and per-axis keywords: numpy's value and
    dtype; the modes without ties (all but maximum, minimum, median, whose later axes read
    copies of the same elements) by central differences."""
    x, widths, mode, kwargs = case
    want = np.pad(x, widths, mode=mode, **kwargs)
    got = ea.pad(x, widths, mode=mode, **kwargs)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got, want, rtol=1e-12, atol=1e-12)
    if x.dtype.kind == "f" and mode not in ("maximum", "minimum", "median"):
        assert ea.gradcheck(lambda v: ea.pad(v, widths, mode=mode, **kwargs), x)
