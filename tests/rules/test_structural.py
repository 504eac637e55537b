"""einad.rules.structural: broadcast_to, concatenate, stack, split, where: values against numpy,
gradients against central differences and closed forms, float32 kept; and on every array
library (`lib`): results of the input's library, dask lazy, libraries never mixed."""

import itertools

import numpy as np
import pytest

import einad as ea
from tests.support.checks import (
    case_params,
    check_case,
    check_lib,
    cotangent_probe,
    family,
)
from tests.support.numerics import assert_close

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

A = np.random.default_rng(8).standard_normal((2, 3, 4))
B = np.random.default_rng(9).standard_normal((2, 2, 4))
A_MASK = A > 0
COND = np.array([True, False, True, False])

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4))
MASK = X > 0
NONBOOL = np.array([0.0, 1j, 2.5, -1.0])  # a condition that is not boolean: true where nonzero


# name: (f(m, *args) written once for m = einad and m = numpy, args)
STRUCTURAL = {
    "broadcast_to": (lambda m, x: m.broadcast_to(x, (5, 2, 3, 4)), (A,)),
    "broadcast_to size-1": (lambda m, x: m.broadcast_to(x, (3, 2, 4)), (A[:1, :1],)),
    "broadcast_to an int": (lambda m, x: m.broadcast_to(x, 4), (A[0, 0, :1],)),
    # a new leading axis of the size of an existing one (which is not repeated)
    "broadcast_to new axis of a known size": (lambda m, x: m.broadcast_to(x, (4, 3, 4)), (A[0],)),
    "concatenate": (lambda m, a, b: m.concatenate([a, b], axis=1), (A, B)),
    "concatenate same twice": (lambda m, a, b: m.concatenate([a, b, a], axis=1), (A, B)),
    "concatenate negative axis": (lambda m, a: m.concatenate([a, a * 2], axis=-1), (A,)),
    "concatenate one array": (lambda m, a: m.concatenate([a], axis=1), (A,)),
    "stack": (lambda m, a, b: m.stack([a, b]), (A[:, :2], B)),
    "stack axis": (lambda m, a, b: m.stack([a, b], axis=-1), (A[:, :2], B)),
    "where": (lambda m, a, b: m.where(A_MASK, a, b), (A, B[0, :1, :1])),
    "where scalar branch": (lambda m, a: m.where(A_MASK, a, 0.0), (A,)),
    "where broadcast condition": (lambda m, a, b: m.where(COND, a, b), (A, B[0, 0])),
}


@both_modes
@pytest.mark.parametrize(
    ("check", "name"), case_params(STRUCTURAL, float32=["concatenate", "stack", "where", "broadcast_to"])
)
def test_structural(check, name):
    check(*STRUCTURAL[name])


@both_modes
@pytest.mark.parametrize("sections, axis", [(2, 2), ([1, 3], 1), (3, -2), ([1], 0), (2, None)], ids=str)
def test_split(sections, axis):
    """Pieces and gradients as numpy's split (axis None: the default, axis 0)."""
    kw = {} if axis is None else {"axis": axis}
    pieces = ea.split(A, sections, **kw)
    expected = np.split(A, sections, **kw)
    assert len(pieces) == len(expected)
    for p, e in zip(pieces, expected):
        assert isinstance(p, ea.Tensor)
        assert_close(p.numpy(), e)
    w = [np.random.default_rng(k).standard_normal(e.shape) for k, e in enumerate(expected)]
    g = ea.grad(lambda x: sum(ea.sum(p * wk) for p, wk in zip(ea.split(x, sections, **kw), w)))(A)
    assert_close(g, np.concatenate(w, **kw))


@both_modes
@pytest.mark.parametrize("indices", [[3, 1], [2, 2], [5, -3, 1]], ids=str)
def test_split_at_indices_that_do_not_increase_gives_numpys_pieces(indices):
    """numpy's pieces are x[i:j] between consecutive indices: empty where j <= i, and the
    next one starts at j (the last one was x[3:], not x[3:4], after [3, 1])."""
    x = np.arange(15.0).reshape(3, 5)
    pieces = ea.split(x, indices, axis=1)
    expected = np.split(x, indices, axis=1)
    assert [p.shape for p in pieces] == [e.shape for e in expected]
    for p, e in zip(pieces, expected):
        assert_close(p.numpy(), e)
    w = [np.random.default_rng(k).standard_normal(e.shape) for k, e in enumerate(expected)]
    g = ea.grad(lambda x: sum(ea.sum(p * wk) for p, wk in zip(ea.split(x, indices, axis=1), w)))(x)
    edges = [0, *indices, x.shape[1]]
    want = np.zeros_like(x)
    for (a, b), wk in zip(itertools.pairwise(edges), w):
        want[:, a:b] += wk  # each piece's cotangent goes back to its own columns
    assert_close(g, want)


@pytest.mark.parametrize("sections", [2, [1, 3]], ids=str)
def test_split_with_sections_given_as_a_tensor(sections):
    """A Tensor of sections or indices splits as its numbers do (handing it to numpy's split
    dispatched back to einad's: a RecursionError); a traced one is a TypeError at the call."""
    x = np.arange(12.0).reshape(3, 4)
    expected = np.split(x, sections, axis=1)
    for given in (ea.tensor(np.array(sections)), np.array(sections)):
        pieces = ea.split(x, given, axis=1)
        assert [p.shape for p in pieces] == [e.shape for e in expected]
        for p, e in zip(pieces, expected):
            assert_close(p.numpy(), e)
    with pytest.raises(TypeError):
        ea.jit(lambda x, s: ea.split(x, s, axis=1)[0])(x, np.array(sections))


@both_modes
def test_split_unused_piece_gets_zero_gradient():
    g = ea.grad(lambda x: ea.sum(ea.split(x, 3, axis=1)[1]))(A)
    expected = np.zeros_like(A)
    expected[:, 1] = 1.0
    assert_close(g, expected)


@both_modes
def test_where_gradient_goes_to_the_chosen_branch():
    c = np.array([True, False, True])
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.where(c, x, y) * np.array([1.0, 2.0, 3.0])), (0, 1))(
        np.ones(3), np.ones(3)
    )
    assert_close(gx, [1.0, 0.0, 3.0])
    assert_close(gy, [0.0, 2.0, 0.0])


def test_a_boolean_condition_is_used_as_it_is_and_any_other_is_cast_without_a_derivative():
    """A boolean condition (a comparison) goes to `where` as it is; any other is cut from the
    derivative and cast to bool, once. Reference: the staged program's operations, and numpy.
    Kills: where 11 (every condition cut and cast, a boolean one too)"""
    x = np.array([1.5, -2.0, 0.0])
    g = ea.make_graph(lambda x: ea.where(x > 0, x, 0.0))(x)
    assert [e.op for e in g.equations] == ["greater", "where"]
    g = ea.make_graph(lambda x: ea.where(x, x, 0.5))(x)
    assert [e.op for e in g.equations] == ["stop_gradient", "astype", "where"]
    assert_close(ea.where(x, x, 0.5), np.where(x, x, 0.5))


@both_modes
def test_where_hands_each_branch_a_cotangent_of_its_shape_and_dtype():
    """where(c, x, y) of a float32 x and a float64 y is float64; the cotangent of each branch is
    the output's where its side was chosen, summed back over the axes it was broadcast along and
    cast to its dtype: x (float32, broadcast along the rows) receives float32.
    Kills: _where_vjp's dtype argument of sum_to_shape (dropped or None)."""
    c = np.array([[True, False, True], [False, False, True]])
    w = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    x32, y = np.array([0.5, -1.0, 2.0], dtype=np.float32), np.ones((2, 3))
    probe, seen = cotangent_probe()
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.where(c, probe(x), y) * w), (0, 1))(x32, y)
    assert seen == [np.float32]
    np.testing.assert_array_equal(gx, np.array([1.0, 0.0, 9.0], dtype=np.float32), strict=True)
    np.testing.assert_array_equal(gy, np.where(c, 0.0, w), strict=True)


# name: f(m, x, c) written once for m = einad and m = numpy; linear in x and in the constant c
WITH_A_CONSTANT = {
    "concatenate": lambda m, x, c: m.concatenate([x, c], axis=1),
    "concatenate between": lambda m, x, c: m.concatenate([c, x, c], axis=0),
    "stack": lambda m, x, c: m.stack([c, x], axis=-1),
    "where x": lambda m, x, c: m.where(MASK, x, c),
    "where y": lambda m, x, c: m.where(MASK, c, x),
}


@both_modes
@pytest.mark.parametrize("name", sorted(WITH_A_CONSTANT))
def test_jvp_with_a_constant_operand_is_the_op_on_the_tangent_and_zeros(name):
    """The operand that is a constant has no tangent: the JVP is the operation applied to the
    tangent and to zeros in the constant's place (it is linear)."""
    f = WITH_A_CONSTANT[name]
    out, t = ea.jvp(lambda x: f(ea, x, Y), (X,), (MASK - 0.5,))
    assert_close(out, f(np, X, Y))
    assert_close(t, f(np, MASK - 0.5, np.zeros_like(Y)))


@both_modes
def test_broadcast_to_gradient_sums_back():
    x = np.array([[1.0], [2.0]])
    g = ea.grad(lambda x: ea.sum(ea.broadcast_to(x, (3, 2, 4)) * 2.0))(x)
    assert g.shape == (2, 1)
    assert_close(g, np.full((2, 1), 24.0))


# name: (call(m) written once for m = einad and m = numpy, a phrase of einad's message)
REFUSALS = {
    "stack of nothing": (lambda m: m.stack([]), "^need at least one array to stack$"),
    "stack of unequal shapes": (
        lambda m: m.stack([np.ones(2), np.ones(3), np.ones(2)]),
        r"^all input arrays must have the same shape, got \[\(2,\), \(3,\)\]$",
    ),
    "concatenate of nothing": (lambda m: m.concatenate([]), "^need at least one array to concatenate$"),
    "concatenate of 0-d arrays": (
        lambda m: m.concatenate([np.ones(()), np.ones(())]),
        "^zero-dimensional arrays cannot be concatenated$",
    ),
    "concatenate unequal outside the axis": (
        lambda m: m.concatenate([np.ones((2, 3)), np.ones((2, 1)), np.ones((3, 3))], axis=-1),
        r"^concatenate: array 2 has shape \(3, 3\), which does not match \(2, 3\) outside axis 1$",
    ),
    "concatenate unequal ranks": (
        lambda m: m.concatenate([np.ones((2, 3)), np.ones(2)]),
        r"array 1 has shape \(2,\), which does not match \(2, 3\) outside axis 0$",
    ),
    "concatenate a lower rank along the last axis": (
        lambda m: m.concatenate([np.ones((2, 3)), np.ones(2)], axis=-1),
        r"array 1 has shape \(2,\), which does not match \(2, 3\) outside axis 1$",
    ),
    "split unequal": (lambda m: m.split(np.ones(5), 2), "equal division"),
    "broadcast_to other size": (lambda m: m.broadcast_to(np.ones(3), (4,)), "could not be broadcast"),
    "broadcast_to size 1": (lambda m: m.broadcast_to(np.ones(3), (3, 1)), "could not be broadcast"),
    "broadcast_to fewer dimensions": (lambda m: m.broadcast_to(np.ones((3, 1)), (3,)), "more dimensions"),
}


@pytest.mark.parametrize("name", sorted(REFUSALS))
def test_refusals_are_numpy_value_errors_that_say_why(name):
    """What numpy refuses with a ValueError einad refuses with one, whose message names the problem
    (and the shapes at fault)."""
    call, phrase = REFUSALS[name]
    with pytest.raises(ValueError):
        call(np)
    with pytest.raises(ValueError, match=phrase):
        call(ea)


# -- on every array library ----------------------------------------------------------------


# name: (einad function, numpy reference, arguments, differentiated argnums), on every library
LIB_CASES = {
    "join_split": (
        *family(
            (lambda x, y: ea.concatenate([x, y, x], axis=1), lambda x, y: np.concatenate([x, y, x], axis=1)),
            (lambda x, y: ea.concatenate([x, y], axis=None), lambda x, y: np.concatenate([x, y], axis=None)),
            (lambda x, y: ea.stack([x, y], axis=1), lambda x, y: np.stack([x, y], axis=1)),
            (lambda x, y: ea.split(y, [1, 3], axis=1)[1], lambda x, y: np.split(y, [1, 3], axis=1)[1]),
        ),
        (X, Y),
        (0, 1),
    ),
    # numpy's promotion where the library refuses mixed kinds; float32 stays float32
    "concatenate_dtypes": (
        *family(
            (lambda i, x: ea.concatenate([i, x]), lambda i, x: np.concatenate([i, x])),
            (lambda i, x: ea.stack([x, x], axis=1), lambda i, x: np.stack([x, x], axis=1)),
        ),
        (np.arange(-6, 6, dtype=np.int8).reshape(3, 4), X.astype(np.float32)),
        (1,),
    ),
    "where": (lambda m, x, y: ea.where(m, x, y), np.where, (MASK, X, Y), (1, 2)),
    "where_number": (lambda m, x: ea.where(m, 0.5, x), lambda m, x: np.where(m, 0.5, x), (MASK, X), (1,)),
    "where_nonbool": (lambda c, x, y: ea.where(c, x, y), np.where, (NONBOOL, X, Y), (1, 2)),
    # both branches Python numbers: the condition alone carries the library
    "where_numbers": (
        lambda m, x: x * ea.where(m, 0.5, -1),
        lambda m, x: x * np.where(m, 0.5, -1),
        (MASK, X),
        (1,),
    ),
    # a Python condition: an array of the branches' library, not numpy's beside them (the library
    # of x when x is an array, even beside a Python number y; kills: where 10)
    "where_python_condition": (
        *family(
            (lambda x, y: ea.where(False, x, y), lambda x, y: np.where(False, x, y)),
            (lambda x, y: ea.where(1, 0.5, y) * x, lambda x, y: np.where(1, 0.5, y) * x),
            (lambda x, y: ea.where(True, x, 0.5) * y, lambda x, y: np.where(True, x, 0.5) * y),
        ),
        (X, Y),
        (0, 1),
    ),
    # numpy's promotion of the branches where the library refuses mixed kinds; float32 stays float32
    "where_dtypes": (
        lambda m, i, x: ea.where(m, i, x),
        np.where,
        (MASK, np.arange(-6, 6, dtype=np.int8).reshape(3, 4), X.astype(np.float32)),
        (2,),
    ),
}


@pytest.mark.parametrize("name", sorted(LIB_CASES))
def test_on_every_library(lib, name):
    """The value equals numpy's and is of the input's library; the gradient of <w, f(x)> equals
    einad's on numpy and is of the library; on dask nothing is computed inside einad."""
    check_case(lib, LIB_CASES[name], RNG)


def test_mixed_libraries_name_both(lib):
    if lib.name == "numpy":
        pytest.skip("one library")
    with pytest.raises(TypeError, match=r"numpy.*" + ("dask" if lib.name == "dask" else lib.name)):
        ea.concatenate([X, lib.asarray(Y)], axis=0)
    with pytest.raises(TypeError, match="two libraries"):
        ea.where(MASK, lib.asarray(X), Y)
    with pytest.raises(TypeError, match="two libraries"):  # the condition's library counts too
        ea.where(MASK, 0.5, lib.asarray(Y))


def test_numbers_beside_library_arrays_join_their_library(lib):
    """``stack([t, 0.0])`` and ``outer(2.0, t)`` take the number as numpy does; beside an array of
    torch, array-api-strict or dask the number was made a numpy array ("arrays of two
    libraries"). It now joins the other arrays' library; the gradients are the closed forms."""
    v = np.array([0.5, -1.0, 2.0])
    with lib.lazy():
        stacked = ea.stack([0.0, ea.sum(lib.asarray(v)), 2])
        outer = ea.outer(2.0, lib.asarray(v))
        g = ea.grad(lambda x: ea.sum(ea.stack([ea.sum(x * x), 3.0]) * ea.outer(x, 2.0)[0, 0]))(lib.asarray(v))
    check_lib(lib, stacked, np.stack([0.0, v.sum(), 2]))
    check_lib(lib, outer, np.outer(2.0, v))
    # d/dx [(|x|^2 + 3) * 2 x_0] = 4 x_0 x + 2 (|x|^2 + 3) e_0
    check_lib(lib, g, 4 * v[0] * v + 2 * (v @ v + 3) * np.eye(3)[0])
    if lib.name != "numpy":  # a numpy array (not a number) beside them is still refused
        with pytest.raises(TypeError, match="two libraries"):
            ea.stack([lib.asarray(v), np.ones(3)])


def test_the_gradient_of_one_operand_of_a_concatenation_slices_only_its_part():
    """Differentiated with respect to one operand, the pullback of concatenate slices the
    cotangent once, for that operand: the other operands need no cotangent and get none.
    Reference: 2 * a (closed form), the staged program's getitems.
    Kills: _concat_vjp 23 (a slice made for every operand)"""
    a, b = np.arange(6.0).reshape(2, 3), np.ones((4, 3))
    f = ea.grad(lambda a: ea.sum(ea.concatenate([a, b]) ** 2))
    assert_close(f(a), 2 * a)
    assert [e.op for e in ea.make_graph(f)(a).equations].count("getitem") == 1
