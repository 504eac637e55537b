"""Choices and rarely reached paths of einad/rules/einsum.py, each test written against the
mutants (mutmut) it kills.

Most of these are the derivatives of a *sliced* contraction's own derivative primitives: the
VJP of its pullback with respect to the cotangent, the forward and reverse derivatives of the
one-pass value-and-gradient of a scalar sliced contraction, and the block layout they share.
A small `memory_limit` forces the slicing; the reference is the same computation without the
limit (the unsliced einsum's derivatives are checked elsewhere against finite differences), or
a numpy closed form. float32 operands catch a lost dtype cast; the `lib` fixture runs the paths
only other array libraries take.
"""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import opt_einsum as oe
import pytest

import einad as ea
from einad import executor
from einad.core import lower_rules
from einad.explain import explain
from einad.rules import einsum as einsum_rules
from einad.rules.einsum import Spread, contract_planned, einsum_p, spread, traced_steps
from tests.support.arraylibs import load
from tests.support.checks import check_lib, lib_value, random_operands
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, peak_bytes

EQ = "abc,ade,bdf->cef"  # not scalar: its pullback is one sweep (an `einsum_vjp` equation)
SHAPES = [(4, 3, 5), (4, 2, 3), (3, 2, 4)]  # operand sizes 60, 24, 24 (the packed blocks)
LIMIT = 20  # forces slicing (no pairwise path of EQ fits)

TETRA = "abc,ade,bdf,cef->"  # scalar: value and gradients in one pass (an `einsum_vg` equation)
TETRA_LIMIT = 20


def _sliced(limit):
    return lambda *xs: ea.einsum(EQ, *xs, memory_limit=limit)


def _tetra(limit):
    return lambda *xs: ea.einsum(TETRA, *xs, memory_limit=limit)


def _check_sliced():
    _, info = ea.contract_path(EQ, *SHAPES, shapes=True, memory_limit=LIMIT)
    assert info.sliced_indices, "the limit must force slicing"
    _, info = ea.contract_path(TETRA, *[(3, 3, 3)] * 4, shapes=True, memory_limit=TETRA_LIMIT)
    assert info.sliced_indices, "the limit must force slicing"


def test_the_networks_are_sliced():
    _check_sliced()


# -- the pullback of a sliced contraction, differentiated in its cotangent -----------------


def test_pullback_differentiated_in_its_cotangent_keeps_the_cotangent_dtype():
    """d/du <pullback(u), w> of a sliced contraction: sum over operands k of the contraction
    with w_k in operand k's place (`_einsum_vjp_vjp`'s derivative in g: `needed[0]`, `dg`),
    cast to u's dtype (float32 here, the operands float64)."""
    ops = random_operands(SHAPES)
    ws = random_operands(SHAPES, seed=2)
    u = random_operands([(5, 3, 4)], seed=3, dtype=np.float32)[0]

    def loss(limit):
        def h(u):
            grads = ea.vjp(_sliced(limit), *ops)[1](u)
            return sum(ea.sum(g * w) for g, w in zip(grads, ws))

        return h

    du = ea.grad(loss(LIMIT))(u)
    assert du.dtype == np.float32
    expected = sum(np.einsum(EQ, *(w if j == k else o for j, o in enumerate(ops))) for k, w in enumerate(ws))
    assert_close(du, expected, rtol=1e-5, atol=1e-5)
    assert_close(du, ea.grad(loss(None))(u), rtol=1e-5, atol=1e-5)
    # one operand's block only: the derivative in u reads that block alone
    du0 = ea.grad(lambda u: ea.sum(ea.vjp(_sliced(LIMIT), *ops)[1](u)[2] * ws[2]))(u)
    assert du0.dtype == np.float32
    assert_close(du0, np.einsum(EQ, *ops[:2], ws[2]), rtol=1e-5, atol=1e-5)


def test_a_tangent_in_one_operand_then_the_cotangent_derivative():
    """The pullback's tangent along operand 1 (its block 1 stays zero: `zero` = (1,)),
    differentiated in the cotangent: the blocks after a zero one keep their offsets, and
    operand 0's missing tangent does not end the loop over the tangents."""
    ops = random_operands(SHAPES)
    t = random_operands([SHAPES[1]], seed=4)[0]
    ws = random_operands(SHAPES, seed=2)
    u = random_operands([(5, 3, 4)], seed=3)[0]

    def loss(limit):
        def h(u):
            x, y, z = ops
            tangents = ea.jvp(lambda y: ea.vjp(_sliced(limit), x, y, z)[1](u), (y,), (t,))[1]
            return sum(ea.sum(g * w) for g, w in zip(tangents, ws))

        return h

    du = ea.grad(loss(LIMIT))(u)
    assert_close(du, ea.grad(loss(None))(u), rtol=1e-9)
    x, _, z = ops
    # d/dy of block k is the contraction with t in y's place: blocks 0 and 2 only
    expected = np.einsum(EQ, ws[0], t, z) + np.einsum(EQ, x, t, ws[2])
    assert_close(du, expected, rtol=1e-9)


# -- a scalar sliced contraction: value and gradients in one pass, differentiated ----------


def test_rev_over_rev_of_the_one_pass_value_and_gradient():
    """The VJP of the one-pass value and gradients (`_sliced_vg_vjp`): the value's cotangent
    and the gradients' add up, and a gradient with one block has no second part."""
    ops = random_operands([(3, 3, 3)] * 4)
    s, vs = 1.7, random_operands([(3, 3, 3)] * 2, seed=5)

    def outer(limit, argnums):
        def h(x):
            value, grads = ea.value_and_grad(_tetra(limit), argnums=argnums)(x, *ops[1:])
            grads = grads if isinstance(grads, tuple) else (grads,)
            return s * value + sum(ea.sum(g * v) for g, v in zip(grads, vs))

        return h

    for argnums in ((0, 1), 0, (1, 2)):
        got = ea.grad(outer(TETRA_LIMIT, argnums))(ops[0])
        assert_close(got, ea.grad(outer(None, argnums))(ops[0]), rtol=1e-9)


def test_a_concrete_cotangent_scales_traced_one_pass_gradients_by_an_einsum():
    """A pullback of a scalar sliced contraction called with a concrete cotangent (2.0) inside
    a function being differentiated: the one-pass gradients are the outer trace's values, so
    they are scaled by an einsum the outer trace differentiates, not in place (which only a
    concrete numpy buffer allows). Reference: the same with the unsliced einsum.

    Kills: _scaled_blocks 2, 3 (a traced buffer taken for a numpy one)."""
    ops = random_operands([(3, 3, 3)] * 4)

    def h(limit):
        def f(x):
            _, pull = ea.vjp(lambda y: _tetra(limit)(y, *ops[1:]), x)
            return ea.sum(pull(np.float64(2.0))[0] ** 2)

        return f

    assert_close(ea.grad(h(TETRA_LIMIT))(ops[0]), ea.grad(h(None))(ops[0]), rtol=1e-9)


def test_the_cotangent_derivative_has_the_cotangent_dtype():
    """The derivative in a float32 cotangent, taken through a cast from float64: what comes
    back through the cast holds float32 values (the derivative was cast to the cotangent's
    dtype before the cast's own VJP widened it)."""
    ops = random_operands(SHAPES)
    ws = random_operands(SHAPES, seed=2)
    p = random_operands([(5, 3, 4)], seed=3)[0]

    def h(p):
        grads = ea.vjp(_sliced(LIMIT), *ops)[1](p.astype(np.float32))
        return sum(ea.sum(g * w) for g, w in zip(grads, ws))

    dp = ea.grad(h)(p)
    assert dp.dtype == np.float64
    np.testing.assert_array_equal(dp, dp.astype(np.float32).astype(np.float64))
    expected = sum(np.einsum(EQ, *(w if j == k else o for j, o in enumerate(ops))) for k, w in enumerate(ws))
    assert_close(dp, expected, rtol=1e-6, atol=1e-6)


def test_a_gradient_along_its_own_operand_binds_no_sweep():
    """A gradient does not depend on its own (multilinear) operand: the JVP along it is zero,
    and no sweep is bound for it (`_einsum_vjp_jvp` skips a tangent whose blocks are all zero)."""
    ops = random_operands(SHAPES)
    w = random_operands([(5, 3, 4)], seed=2)[0]
    f = lambda *xs: ea.sum(_sliced(LIMIT)(*xs) * w)
    k = lambda x, t: ea.jvp(lambda x: ea.grad(f)(x, *ops[1:]), (x,), (t,))[1]
    np.testing.assert_array_equal(k(ops[0], ops[0]), np.zeros(SHAPES[0]))
    text = str(ea.make_graph(k)(ops[0], ops[0]))
    assert text.count("= einsum_vjp[") == 1, text  # the gradient's own sweep only


def test_rev_over_rev_binds_no_derivative_for_the_unit_cotangent():
    """The one-pass gradients are those for a cotangent of 1, a constant: their VJP binds no
    contraction for its derivative (`_sliced_vg_vjp` asks for the operands' only)."""
    ops = random_operands([(3, 3, 3)] * 4)

    def g(x):
        grads = ea.grad(_tetra(TETRA_LIMIT), argnums=(0, 1))(x, *ops[1:])
        return ea.sum(grads[1])

    assert_close(
        ea.grad(g)(ops[0]), ea.grad(lambda x: ea.sum(ea.grad(_tetra(None), argnums=1)(x, *ops[1:])))(ops[0])
    )
    text = str(ea.make_graph(ea.grad(g))(ops[0]))
    assert "= einsum_vg[" in text
    assert "= einsum[abc,ade,bdf,cef->" not in text, text


def test_fwd_over_rev_of_the_one_pass_value_and_gradient_float32():
    """The JVP of the one-pass value and gradients (`_sliced_vg_jvp`): the value's tangent
    and the gradients' (a sweep for the cotangent 1, of the operands' dtype), laid into one
    tangent buffer of the primal's length and dtype (float32 here)."""
    ops = random_operands([(3, 3, 3)] * 4, dtype=np.float32)
    ts = random_operands([(3, 3, 3)] * 4, seed=7, dtype=np.float32)

    def k(limit):
        return lambda o, t: ea.jvp(lambda *a: ea.value_and_grad(_tetra(limit), argnums=(0, 2))(*a), o, t)

    (v, g), (tv, tg) = k(TETRA_LIMIT)(tuple(ops), tuple(ts))
    (v0, g0), (tv0, tg0) = k(None)(tuple(ops), tuple(ts))
    assert v.dtype == tv.dtype == np.float32
    assert_close(v, v0, rtol=1e-5)
    for a, b in zip(g, g0):
        assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert [x.dtype for x in tg] == [np.float32, np.float32]
    expected_tv = sum(
        np.einsum(TETRA, *(t if j == i else o for j, o in enumerate(ops))) for i, t in enumerate(ts)
    )
    assert_close(tv, expected_tv, rtol=1e-4, atol=1e-4)
    assert_close(tv, tv0, rtol=1e-4, atol=1e-4)
    for a, b in zip(tg, tg0):
        assert_close(a, b, rtol=1e-4, atol=1e-4)
    # the tangent buffer has the primal's length: 1 + 2 * 27
    text = str(ea.make_graph(k(TETRA_LIMIT))(tuple(ops), tuple(ts)))
    assert "f32[55] = einsum_vg[" in text
    assert "place[offset=0, total=55]" in text and "place[offset=1, total=55]" in text, text


# -- other array libraries ---------------------------------------------------------------


def test_rev_over_rev_of_a_sliced_contraction_on_every_library(lib):
    """The gradients of a sliced contraction, differentiated again: the cotangents of the
    packed gradient blocks are laid end to end at their offsets (`place` without writes, on
    libraries other than numpy), float32 kept."""
    ops = random_operands(SHAPES, dtype=np.float32)
    vs = random_operands(SHAPES, seed=5, dtype=np.float32)
    w = random_operands([(5, 3, 4)], seed=2, dtype=np.float32)[0]

    def hessian_vector(x, y, z, w, *vs, limit=LIMIT):
        f = lambda *a: ea.sum(ea.einsum(EQ, *a, memory_limit=limit) * w)
        h = lambda *a: sum(ea.sum(g * v) for g, v in zip(ea.grad(f, argnums=(0, 1, 2))(*a), vs))
        return ea.grad(h, argnums=(0, 1, 2))(x, y, z)

    want = hessian_vector(*ops, w, *vs, limit=None)
    got = hessian_vector(*[lib.asarray(a) for a in (*ops, w, *vs)])
    for a, b in zip(got, want):
        check_lib(lib, a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["torch", "array_api_strict", "dask"])
def test_rev_over_rev_of_a_scalar_sliced_contraction_off_numpy(name):
    """The second derivative of a scalar sliced contraction on every library but numpy: the
    one-pass gradients' cotangent 1 is made in the operands' library (`_vg_parts`; made with
    numpy, the sweep refused to mix two libraries)."""
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    ops = random_operands([(3, 3, 3)] * 4)
    g = lambda x, *rest: ea.sum(ea.grad(_tetra(TETRA_LIMIT), argnums=(0, 1))(x, *rest)[1])
    want = ea.grad(lambda x, *rest: ea.sum(ea.grad(_tetra(None), argnums=1)(x, *rest)))(*ops)
    check_lib(lib, ea.grad(g)(*[lib.asarray(o) for o in ops]), want, rtol=1e-9)
    # staged by jit, the rule sees the operands' stand-ins: the 1 is made in the library they stand for
    check_lib(lib, compiled(ea.jit(ea.grad(g)))(*[lib.asarray(o) for o in ops]), want, rtol=1e-9)


# -- small public pieces ---------------------------------------------------------------------


def test_traced_steps_default_and_explained_paths():
    """`traced_steps` plans with "auto" by default, and follows the strategy it is given (what
    `explain` lists as the steps bound for traced operands)."""
    inputs, shapes = ("ab", "bc", "cd"), ((2, 30), (30, 3), (3, 40))
    assert traced_steps(inputs, "ad", shapes) == traced_steps(inputs, "ad", shapes, "auto")
    assert traced_steps(inputs, "ad", shapes)[0][:2] == ((0, 1), ("ab", "bc"))
    text = explain("ab,bc,cd->ad", shapes, optimize=((1, 2), (0, 1)))
    assert "step 1: bc,cd->bd" in text and "step 2: ab,bd->ad" in text, text
    assert "ab,bc->ac" not in text


def test_spread_repr():
    """A `Spread` cotangent names its source letters ('scalar' for none), where it spreads,
    the shape and the dtype. (No public value is a Spread: einsum's VJP hands it to the
    reverse pass only, so it is built here directly.)"""
    assert repr(Spread(np.float32(2.0), "", "ii", (3, 3))) == "Spread(scalar -> ii, (3, 3), float32)"
    assert repr(Spread(np.ones(3), "i", "iij", (3, 3, 2))) == "Spread(i -> iij, (3, 3, 2), float64)"


@pytest.mark.parametrize(
    ("src", "dst", "shape"),
    [("ji", "ijk", (2, 3, 4)), ("ji", "iji", (2, 3, 2)), ("i", "jii", (3, 2, 2))],
    ids=["transposed_broadcast", "transposed_diagonal", "late_diagonal"],
)
def test_spread_lays_its_source_along_the_destination_on_every_library(lib, src, dst, shape):
    """`spread(x, src, dst, shape)`: x, indexed by `src` (in any order), laid along `dst`,
    broadcast over the letters x lacks and on the diagonal of a repeated letter (zeros off
    it), x's dtype (float32) kept; without writes off numpy. Reference: a numpy loop over
    the result's positions."""
    dims = dict(zip(dst, shape))
    x = random_operands([tuple(dims[c] for c in src)], dtype=np.float32)[0]
    want = np.zeros(shape, np.float32)
    for pos in np.ndindex(*shape):
        at = {}
        if all(at.setdefault(c, i) == i for c, i in zip(dst, pos)):
            want[pos] = x[tuple(at[c] for c in src)]
    check_lib(lib, spread(lib.asarray(x), src, dst, shape), want, rtol=0, atol=0)


# -- the blocks a sliced contraction assembles off numpy (no in-place writes) ---------------
#
# On a library other than numpy a sliced contraction cannot add into a buffer: it gathers
# each slice's block and lays them side by side at the end, zeros where nothing landed, cast
# to numpy's dtype for the operands.

REPEATED = "aa,ab,ac,bc->"  # the sliced letter a is repeated in operand 0
REPEATED_LIMIT = 4


def test_a_repeated_sliced_letter_leaves_its_off_diagonal_blocks_zero(lib):
    """The gradient of an operand that repeats the sliced letter: each slice lands on a
    block of its diagonal only, the blocks off it are zeros of their own (offset-free)
    shape and of the operand's dtype; the blocks are keyed by (start, stop)."""
    _, info = ea.contract_path(REPEATED, *[(4, 4)] * 4, shapes=True, memory_limit=REPEATED_LIMIT)
    assert info.sliced_indices == ("a",), "the limit must slice the repeated letter"
    ops = random_operands([(4, 4)] * 4, dtype=np.float32)
    argnums = (0, 1, 2, 3)
    want = ea.grad(lambda *a: ea.einsum(REPEATED, *a), argnums=argnums)(*ops)
    got = ea.grad(lambda *a: ea.einsum(REPEATED, *a, memory_limit=REPEATED_LIMIT), argnums=argnums)(
        *[lib.asarray(o) for o in ops]
    )
    for a, b in zip(got, want):
        check_lib(lib, a, b, rtol=1e-5, atol=1e-5)
    # the gradient of the repeated operand lives on its diagonal: off it, exact zeros
    off = ~np.eye(4, dtype=bool)
    np.testing.assert_array_equal(lib_value(lib, got[0])[off], 0)


MIXED = (np.int8, np.uint16, np.float32)  # promoted pairwise (int8, uint16 -> int32) float64


def test_a_sliced_contraction_has_numpys_einsum_dtype_on_every_library(lib):
    """numpy's einsum promotes all the operands at once (float32 here), where the path's
    first step alone promotes int8 and uint16 to int32, whose product with float32 is
    float64: the sliced contraction's blocks are float64, and its result is cast to
    float32."""
    rng = np.random.default_rng(0)
    ops = [rng.integers(-3, 4, s).astype(d) for s, d in zip(SHAPES, MIXED)]
    assert ea.contract_path(EQ, *SHAPES, shapes=True)[0][0] == (0, 1)  # int8 with uint16 first
    want = np.einsum(EQ, *ops)
    assert want.dtype == np.float32
    check_lib(lib, ea.einsum(EQ, *[lib.asarray(o) for o in ops], memory_limit=LIMIT), want, rtol=0, atol=0)


def test_an_unsliced_contraction_has_numpys_einsum_dtype(lib):
    """Operands of mixed dtypes are promoted all at once, as numpy's einsum does (int8, uint16
    and float32 give float32), not pair by pair along the path (int32, then float64), eagerly
    and in a compiled program."""
    rng = np.random.default_rng(0)
    ops = [rng.integers(-3, 4, s).astype(d) for s, d in zip(SHAPES, MIXED)]
    want = np.einsum(EQ, *ops)
    assert want.dtype == np.float32
    for f in (lambda *a: ea.einsum(EQ, *a), compiled(ea.jit(lambda *a: ea.einsum(EQ, *a)))):
        got = f(*[lib.asarray(a) for a in ops])
        assert ea.tensor(got).dtype == np.float32
        np.testing.assert_allclose(lib.numpy(got), want, rtol=1e-6)


def test_the_packed_gradients_have_numpys_dtype_on_every_library(lib):
    """A float64 operand among float32 ones: its gradient blocks are computed from the
    float32 others (float32), but the packed buffer of gradients has the promoted dtype of
    the cotangent and every operand (float64) on every library, as on numpy."""
    x = random_operands(SHAPES[:1])[0]
    y, z, u = random_operands([*SHAPES[1:], (5, 3, 4)], seed=1, dtype=np.float32)
    ys = [lib.asarray(a) for a in (y, z, u)]

    def pull_x(x):
        return ea.vjp(lambda x: ea.einsum(EQ, x, *ys[:2], memory_limit=LIMIT), x)[1](ys[2])[0]

    check_lib(
        lib, pull_x(lib.asarray(x)), np.einsum("cef,ade,bdf->abc", u, y, z).astype(np.float64), rtol=1e-5
    )
    text = str(ea.make_graph(pull_x)(lib.asarray(x)))
    assert "f64[60] = einsum_vjp[" in text, text


def test_the_gradients_of_an_empty_sliced_contraction_are_zeros(lib):
    """An operand with an empty dimension: no slice adds anything, and every gradient is
    zeros of the operand's shape, dtype and library. (The public planner never slices a
    contraction with an empty dimension, so the plan is given to `contract_planned`, the
    entry point `ContractExpression` calls, directly.)"""
    shapes = [(4, 0, 5), (4, 2, 3), (0, 2, 4)]
    ops = [lib.asarray(o) for o in random_operands(shapes, dtype=np.float32)]

    def f(*a):
        return contract_planned(("abc", "ade", "bdf"), "cef", a, ((0, 1), (0, 1)), (("a", 2),), LIMIT)

    value, pull = ea.vjp(f, *ops)
    check_lib(lib, value, np.zeros((5, 3, 4), np.float32))
    grads = pull(lib.asarray(np.ones((5, 3, 4), np.float32)))
    for g, s in zip(grads, shapes):
        check_lib(lib, g, np.zeros(s, np.float32))


def test_fwd_over_rev_of_a_scalar_sliced_contraction_keeps_float32_on_every_library(lib):
    """The tangent of the one-pass value and gradients is laid out by `place` (zeros, the
    tangent, zeros: no writes off numpy): the zeros have the tangent's dtype, so the value's
    and the gradients' tangents stay float32."""
    ops = random_operands([(3, 3, 3)] * 4, dtype=np.float32)
    ts = random_operands([(3, 3, 3)] * 4, seed=7, dtype=np.float32)

    def k(limit, o, t):
        return ea.jvp(lambda *a: ea.value_and_grad(_tetra(limit), argnums=(0, 2))(*a), o, t)

    (_, _), (tv0, tg0) = k(None, tuple(ops), tuple(ts))
    (_, _), (tv, tg) = k(TETRA_LIMIT, tuple(lib.asarray(o) for o in ops), tuple(lib.asarray(t) for t in ts))
    check_lib(lib, tv, tv0, rtol=1e-4, atol=1e-4)
    for a, b in zip(tg, tg0):
        check_lib(lib, a, b, rtol=1e-4, atol=1e-4)


def test_a_pullback_through_the_one_pass_gradient_does_not_keep_it():
    """The one-pass value and gradients of a scalar sliced contraction (`einsum_vg`), taken
    inside a function then differentiated: its VJP recomputes from the operands and never
    reads its result, so the outer pullback does not keep that buffer (as large as the
    differentiated operand) alive once the forward is done.

    Measured (x: 27000 float64): 0.03 x's bytes held by the pullback; 1.03 if it kept the
    result (the keep rule answering True for the result)."""
    shapes = [(30, 30, 30), (30, 2, 2), (30, 2, 2), (30, 2, 2)]
    x, *rest = random_operands(shapes)
    limit = 300
    assert ea.contract_path(TETRA, *shapes, shapes=True, memory_limit=limit)[1].sliced_indices

    def f(x):
        return ea.sum(ea.grad(lambda x: ea.einsum(TETRA, x, *rest, memory_limit=limit))(x))

    def held():
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            value, pull = ea.vjp(f, x)
            del value
            gc.collect()
            return tracemalloc.get_traced_memory()[0] - before, pull
        finally:
            tracemalloc.stop()

    f(x)  # plans made
    size, pull = held()
    assert size < 0.5 * x.nbytes, f"the pullback holds {size / x.nbytes:.2f} of x's bytes"
    # d/dx sum(grad) = the gradient of sum(grad) in x: the unsliced reference
    g = lambda x: ea.sum(ea.grad(lambda x: ea.einsum(TETRA, x, *rest))(x))
    assert_close(pull(np.float64(1.0))[0], ea.grad(g)(x), rtol=1e-9, atol=1e-12)


# -- hoisted steps: computed once, their cotangents summed over the slices ------------------
#
# A step that reads no sliced letter runs once, before the loop (`Schedule.hoisted`); the
# sweep sums the cotangent of each hoisted value the loop reads over the slices, then pulls
# it back through the hoisted steps once, last step first. Here "a" is sliced: cf,f->c then
# bc,c->b (a hoisted step reading a hoisted value) and deh,e->d (h only there: its pullback
# to deh spreads along h) are hoisted.

HOIST = ("ab", "bc", "cf", "f", "ad", "deh", "e")
HOIST_SHAPES = [(4, 3), (3, 2), (2, 2), (2,), (4, 3), (3, 2, 2), (2,)]
HOIST_PATH = ((2, 3), (1, 5), (2, 3), (0, 2), (0, 1), (0, 1))


@pytest.mark.parametrize(
    ("wrt", "ct"),
    [((0, 1, 2, 3, 4, 5, 6), np.complex128), ((1,), np.complex128), ((3, 5), np.complex128)]
    + [((0, 1, 2, 3, 4, 5, 6), np.float64)],
    ids=["all", "one", "two", "all-real-cotangent"],
)
def test_the_cotangents_of_hoisted_steps_are_summed_over_the_slices(lib, wrt, ct):
    """Gradients through hoisted steps, on every library (the sums are blocks off numpy),
    complex128 (a sum kept in a real dtype would lose the imaginary part, also for a real
    cotangent), for every operand or some: a hoisted step that no differentiated operand
    reaches is skipped, and those before it are still pulled back. Reference: the unsliced
    einsum's VJP.

    Kills: _sweep 23, 25 (the sums' dtype without the operands'), 216 (the spread along h
    without its shape)."""
    ops = random_operands(HOIST_SHAPES, dtype=np.complex128)
    u = random_operands([(4,)], seed=3, dtype=ct)[0]

    def pulled(f, ops, u):
        def g(*xs):
            a = list(ops)
            for k, x in zip(wrt, xs):
                a[k] = x
            return f(*a)

        value, pull = ea.vjp(g, *[ops[k] for k in wrt])
        return value, pull(u)

    sliced = lambda *a: contract_planned(HOIST, "a", a, HOIST_PATH, (("a", 2),), 1)
    value, grads = pulled(sliced, [lib.asarray(o) for o in ops], lib.asarray(u))
    want, want_grads = pulled(lambda *a: ea.einsum("ab,bc,cf,f,ad,deh,e->a", *a), ops, u)
    check_lib(lib, value, want)
    for got, w in zip(grads, want_grads):
        check_lib(lib, got, w)


# -- the one-pass gradients of a scalar sliced contraction, scaled by the cotangent ---------


def test_the_one_pass_gradients_are_scaled_by_the_cotangent_in_each_operands_dtype(lib):
    """A scalar sliced contraction's gradients are computed with its value for a cotangent
    of 1, then scaled by the cotangent given (2 here): in place in their float64 buffer on
    numpy, by an einsum elsewhere; each is cast back to its operand's dtype (float32 for all
    but the float64 one). Reference: the unsliced einsum's VJP."""
    ops = random_operands([(3, 3, 3)] * 4, dtype=np.float32)
    ops[2] = ops[2].astype(np.float64)
    _, pull = ea.vjp(_tetra(TETRA_LIMIT), *[lib.asarray(o) for o in ops])
    _, want = ea.vjp(_tetra(None), *ops)
    for got, w in zip(pull(lib.asarray(np.float64(2.0))), want(np.float64(2.0))):
        check_lib(lib, got, w, rtol=1e-4, atol=1e-4)


def test_the_one_pass_value_of_a_complex_contraction_keeps_its_imaginary_part():
    """A complex scalar sliced contraction under a reverse trace: its value comes out of the
    pass that computes the gradients, summed over the slices in complex128 (a real sum would
    drop the imaginary part). Reference: the unsliced einsum and its VJP.

    Kills: _sweep 57, 59 (the value summed in float64)."""
    ops = random_operands([(3, 3, 3)] * 4, dtype=np.complex128)
    value, pull = ea.vjp(_tetra(TETRA_LIMIT), *ops)
    want, want_pull = ea.vjp(_tetra(None), *ops)
    assert_close(value, want, rtol=1e-12)
    for got, w in zip(pull(np.complex128(1 - 2j)), want_pull(np.complex128(1 - 2j))):
        assert_close(got, w, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_one_pass_gradients_are_scaled_in_place_without_a_contraction(monkeypatch, dtype):
    """On numpy, the pullback of a scalar sliced contraction with a concrete cotangent (a
    float64 number, also for float32 operands) multiplies the gradients the forward pass
    computed in place and hands out views of that buffer: it runs no einsum (the fallback,
    one einsum per operand, gives the same values)."""
    ops = random_operands([(3, 3, 3)] * 4, dtype=dtype)
    _, pull = ea.vjp(_tetra(TETRA_LIMIT), *ops)
    _, want = ea.vjp(_tetra(None), *ops)
    calls = []
    impl = einsum_p.impl
    monkeypatch.setattr(einsum_p, "impl", lambda *a, **k: calls.append(1) or impl(*a, **k))
    grads = pull(np.float64(2.0))
    assert not calls, f"{len(calls)} einsums in the pullback"
    monkeypatch.undo()
    for got, w in zip(grads, want(np.float64(2.0))):
        assert got.dtype == dtype
        assert_close(got, w, rtol=1e-4, atol=1e-4)


def test_the_gradients_of_a_sliced_contraction_have_their_operands_dtypes(lib):
    """A float64 operand among float32 ones: the packed gradients are float64, and each
    block comes out in its operand's dtype (float32, float64, float32). Reference: the
    unsliced einsum's VJP."""
    ops = random_operands(SHAPES, dtype=np.float32)
    ops[1] = ops[1].astype(np.float64)
    u = random_operands([(5, 3, 4)], seed=3)[0]
    _, pull = ea.vjp(_sliced(LIMIT), *[lib.asarray(o) for o in ops])
    _, want = ea.vjp(_sliced(None), *ops)
    for got, w in zip(pull(lib.asarray(u)), want(u)):
        check_lib(lib, got, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("eq", "shapes", "limit"),
    [(EQ, SHAPES, LIMIT), (TETRA, [(3, 3, 3)] * 4, TETRA_LIMIT)],
    ids=["sweep", "one_pass"],
)
def test_each_gradient_of_a_complex_sliced_contraction_has_its_operands_kind(lib, eq, shapes, limit):
    """Among complex128 operands, a real one (the real part of a complex input) and a
    complex64 one: the gradients come packed in complex128, and each goes back in its
    operand's dtype, the real one as the real part (a complex cotangent would flow through
    `real`'s VJP into the input's imaginary part), the complex64 one complex (not real). A
    sliced contraction (one sweep) and a scalar one (its gradients from the one pass, scaled
    in place on numpy, by an einsum elsewhere). Reference: the unsliced einsum's VJP.

    Kills: _unpack 17, 18, 20, 23, 26, 27; _scaled_blocks 44, 45, 48, 49, 50;
    _sliced_vjp 33..36, 39."""
    ops = random_operands(shapes, dtype=np.complex128)
    ops[2] = ops[2].astype(np.complex64)
    out_shape = np.einsum(eq, *ops).shape
    u = random_operands([out_shape], seed=3, dtype=np.complex128)[0]

    def f(w, *rest, limit=limit):
        return ea.einsum(eq, ea.real(w), *rest, memory_limit=limit)

    _, pull = ea.vjp(f, *[lib.asarray(o) for o in ops])
    _, want = ea.vjp(lambda *a: f(*a, limit=None), *ops)
    for got, w in zip(pull(lib.asarray(u)), want(u)):
        check_lib(lib, got, w, rtol=1e-5, atol=1e-5)


def test_a_sliced_contraction_with_a_size_one_output_axis_has_gradients():
    """An output axis of size 1 (not 0: the sweep is skipped only for an empty cotangent)."""
    shapes = [(4, 3, 5), (4, 2, 1), (3, 2, 4)]
    ops = random_operands(shapes)
    u = random_operands([(5, 1, 4)], seed=3)[0]
    _, pull = ea.vjp(_sliced(LIMIT), *ops)
    _, want = ea.vjp(_sliced(None), *ops)
    _, info = ea.contract_path(EQ, *shapes, shapes=True, memory_limit=LIMIT)
    assert info.sliced_indices, "the limit must force slicing"
    for got, w in zip(pull(u), want(u)):
        assert_close(got, w, rtol=1e-9)


# -- the einsum a numpy program of ea.jit runs: planned once, when the program is compiled ------


@pytest.mark.parametrize(
    "spec, shapes",
    [("ij,jk->ik", [(2, 1), (1, 3)]), ("ij,jk,kl->il", [(2, 3), (3, 1), (1, 4)])],
    ids=["pair", "three"],
)
def test_a_jitted_einsum_of_numpy_arrays_runs_on_the_plans_made_when_compiled(monkeypatch, spec, shapes):
    """The lowered einsum of a numpy program (`_lower_einsum`) runs the pairwise plans made
    when the program was compiled: called with numpy arrays (size-1 axes among them) it never
    calls the primitive's implementation, which would plan again. Reference: numpy's einsum.

    Kills: _lower_einsum 21, 22, 23, 24, 45, 46, 47, 48, 119, 121, 122"""
    calls = []
    impl = einsum_rules._einsum_impl
    monkeypatch.setattr(einsum_rules, "_einsum_impl", lambda *a, **k: calls.append(1) or impl(*a, **k))
    ops = random_operands(shapes)
    f = compiled(ea.jit(lambda *xs: ea.einsum(spec, *xs)))
    assert_close(f(*ops), np.einsum(spec, *ops), rtol=1e-12)
    assert not calls, "the lowered einsum fell back to the implementation"


@pytest.mark.parametrize("spec", ["i,j->j", "i,j,j->j"])
def test_a_jitted_einsum_with_an_empty_operand_is_exactly_zero(spec):
    """A sum over an empty axis is exactly zero, whatever the other operands hold: the lowered
    einsum leaves an operand with an empty axis to the implementation (a planned product would
    give 0 * inf = nan here). Kills: _lower_einsum 19"""
    ops = [np.zeros(0), np.array([np.inf, 1.0]), np.array([2.0, 3.0])][: len(spec.split(","))]
    got = compiled(ea.jit(lambda *xs: ea.einsum(spec, *xs)))(*ops)
    np.testing.assert_array_equal(got, np.zeros(2))


def test_a_jitted_einsum_merged_from_float32_and_complex64_pairs_promotes_its_operands_at_once():
    """The jit optimizer merges (a b) c of float32 a, b and complex64 c into one three-operand
    einsum (a real einsum into a complex one of the same precision): the lowered einsum casts
    them all to complex64 before the first pairwise step, as numpy's einsum does. Reference:
    numpy in complex128. Kills: _lower_einsum 124. (A float32 einsum is not merged into a
    float64 one: `test_merge_einsums_keeps_a_float32_einsum_apart_from_a_float64_one`.)"""
    a, b, c = random_operands([(2, 3), (3, 4), (4, 5)])
    f = ea.jit(lambda a, b, c: ea.einsum("ik,kl->il", ea.einsum("ij,jk->ik", a, b), c))
    a32, b32, c64 = a.astype(np.float32), b.astype(np.float32), (c + 0.5j * c).astype(np.complex64)
    program = f.lower(a32, b32, c64)
    assert [len(e.inputs) for e in program.equations] == [3], "merged into one einsum"
    got = f(a32, b32, c64)
    assert got.dtype == np.complex64
    assert_close(got, a32.astype(np.float64) @ b32.astype(np.float64) @ c64.astype(np.complex128), rtol=1e-5)


# a(1 x 2) b(2 x K) c(K x 2): the cheapest path is (a b) c, whose intermediate has K elements;
# contracting b c first (2 x 2) costs a little more and keeps every intermediate within 4 elements.
K = 1 << 15
CHAIN = (("ij", "jk", "kl"), "il")


@pytest.mark.parametrize(
    "how",
    ["einsum, memory_limit=4", "lowered, greedy", "lowered, path given", "lowered, memory_limit=4"],
)
def test_a_chain_contracts_along_the_path_its_parameters_choose(how):
    """The path that `optimize` and `memory_limit` choose is the one run, so its intermediates
    are the ones made: with a limit of 4 elements that a pairwise path meets, an eager einsum
    is not sliced and follows that path (`contract_planned`); the einsum of a numpy program
    (`_lower_einsum`) plans with its equation's own `optimize` and `memory_limit` (a merged
    einsum keeps the outer einsum's). Each makes no K-element intermediate; the default plan
    does. Reference: numpy (values), tracemalloc (the peak).

    Kills: contract_planned 21, 25; _lower_einsum 63, 64"""
    ops = random_operands([(1, 2), (2, K), (K, 2)])
    inputs, output = CHAIN
    shapes = [x.shape for x in ops]
    assert ea.contract_path("ij,jk,kl->il", *shapes, shapes=True)[0] == [(0, 1), (0, 1)]
    if how.startswith("einsum"):
        info = ea.contract_path("ij,jk,kl->il", *shapes, shapes=True, memory_limit=4)[1]
        assert not info.sliced_indices
        run = lambda *xs: ea.einsum("ij,jk,kl->il", *xs, memory_limit=4)
    else:
        optimize, limit = {"greedy": ("greedy", None), "path given": (((1, 2), (0, 1)), None)}.get(
            how.split(", ")[1], ("auto", 4)
        )
        params = {"inputs": inputs, "output": output, "optimize": optimize, "memory_limit": limit}
        run = lower_rules[einsum_p](params, shapes)
        default = {**params, "optimize": "auto", "memory_limit": None}
        assert peak_bytes(lower_rules[einsum_p](default, shapes), *ops) >= 8 * K
    assert_close(run(*ops), ops[0] @ ops[1] @ ops[2], rtol=1e-10)
    assert peak_bytes(run, *ops) < K  # bytes: an eighth of the (a b) intermediate


@pytest.mark.parametrize("limit", [6, None])
def test_the_pullback_of_a_jitted_einsum_contracts_within_its_memory_limit(limit):
    """A jit program merges (a b) c into one einsum that keeps the outer einsum's memory_limit;
    run under vjp, its pullback plans the cotangents' contractions within that limit too
    (`_einsum_vjp`). a's cotangent, u(1x3) b(2xK) c(Kx3) -> (1x2), is cheapest through u c (K
    elements); within 6 elements it goes through b c (2x3). Reference: numpy; the pullback's
    peak holds a K-element array only without the limit. Kills: _einsum_vjp 33"""
    a, b, c = random_operands([(1, 2), (2, K), (K, 3)])
    u = random_operands([(1, 3)], seed=3)[0]
    jf = ea.jit(lambda a, b, c: ea.einsum("ik,kl->il", ea.einsum("ij,jk->ik", a, b), c, memory_limit=limit))
    program = jf.lower(a, b, c)
    assert [(len(e.inputs), e.params["memory_limit"]) for e in program.equations] == [(3, limit)]
    # the merged forward's own path is within the limit too (through b c: the pieces' order,
    # a b first, makes a K-element intermediate)
    (e,) = program.equations
    text = ",".join(e.params["inputs"]) + "->" + e.params["output"]
    info = oe.contract_path(text, a, b, c, optimize=list(e.params["optimize"]))[1]
    assert info.largest_intermediate <= 6 if limit else info.largest_intermediate == K
    _, pull = ea.vjp(lambda a: jf(a, b, c), a)
    assert_close(pull(u)[0], u @ (b @ c).T, rtol=1e-10)
    peak = peak_bytes(pull, u)
    assert peak < K if limit else peak >= 8 * K, peak


def test_an_explicit_path_step_of_three_operands_is_one_traced_node():
    """A traced contraction follows an explicit path: a step of three operands is bound as one
    einsum node (its derivative the general rule), a step of two as a pair. Reference: the
    gradients along the default path. Kills: _traced_step 2"""
    spec = "ij,jk,kl,lm->im"
    ops = random_operands([(2, 3), (3, 4), (4, 5), (5, 2)])
    f = lambda *xs: ea.einsum(spec, *xs, optimize=((0, 1, 2), (0, 1)))
    graph = ea.make_graph(f)(*ops)
    (e,) = graph.equations  # one equation, planned along the path given
    assert e.prim is einsum_p and e.params["optimize"] == ((0, 1, 2), (0, 1))
    nested = ea.make_graph(ea.jacfwd(ea.grad(lambda *xs: ea.sum(f(*xs)))))(*ops)  # nested modes: pairwise
    assert 3 in [len(e.inputs) for e in nested.equations if e.prim is einsum_p]
    argnums = (0, 1, 2, 3)
    grads = ea.grad(lambda *xs: ea.sum(f(*xs)), argnums=argnums)(*ops)
    want = ea.grad(lambda *xs: ea.sum(ea.einsum(spec, *xs)), argnums=argnums)(*ops)
    for got, w in zip(grads, want):
        assert_close(got, w, rtol=1e-12)


def test_a_float64_cotangent_sums_the_slices_of_float32_operands_in_float64(lib):
    """A float64 cotangent of a sliced contraction of float32 operands: each gradient is summed
    over the slices in float64 (the result type of the cotangent and the operands), then cast to
    its operand's float32, as the unsliced contraction computes it. Here c's gradient sums
    2**40, 1 and -2**40, one per slice of b: 1 exactly (0 if summed in float32). Reference: the
    unsliced einsum's VJP. Kills: _einsum_vjp_impl 22 (numpy; other libraries sum each block in
    its parts' dtype whatever the buffer's, so 44 changes nothing)"""
    a = np.array([[2.0**40, 1.0, -(2.0**40)]], np.float32)
    b, c = np.ones((3, 1), np.float32), np.ones(1, np.float32)
    u = np.ones(1)
    ab = [lib.asarray(a), lib.asarray(b)]
    sliced = lambda c: contract_planned(("ab", "bc", "c"), "a", [*ab, c], ((0, 1), (0, 1)), (("b", 3),), 1)
    _, pull = ea.vjp(sliced, lib.asarray(c))
    _, want = ea.vjp(lambda c: ea.einsum("ab,bc,c->a", a, b, c), c)
    (got,) = pull(lib.asarray(u))
    check_lib(lib, got, want(u)[0])
    check_lib(lib, got, np.ones(1, np.float32))


def test_a_traced_contraction_promotes_all_its_operands_before_the_first_step():
    """Traced (here staged by make_graph, and under grad), a contraction of float64 and two
    float32 operands casts the two float32 operands, and only those, to float64 before any
    pairwise step, as numpy's einsum and einad's untraced einsum do: the cheapest path contracts
    the float32 pair first, and that step must not round in float32. Reference: numpy in float64.

    Kills: contract 77 (the promotion test compared the dtypes with the second one), 81 (every
    operand cast, also the one already float64)"""
    a, b, c = random_operands([(50, 3), (3, 4), (4, 2)])
    b32, c32 = b.astype(np.float32), c.astype(np.float32)
    f = lambda a, b, c: ea.einsum("ij,jk,kl->il", a, b, c)
    graph = ea.make_graph(f)(a, b32, c32)
    assert [e.op for e in graph.equations] == ["astype", "astype", "einsum"]
    assert graph.equations[-1].params["optimize"][0] == (1, 2), "the float32 pair is contracted first"
    want = a @ (b32.astype(np.float64) @ c32.astype(np.float64))
    value, grad = ea.value_and_grad(lambda a: ea.sum(f(a, b32, c32) * want))(a)
    assert_close(value, np.sum(want * want), rtol=1e-13)
    assert_close(grad, want @ (b32.astype(np.float64) @ c32.astype(np.float64)).T, rtol=1e-13)


def test_a_pair_under_a_memory_limit_is_contracted_without_asking_the_slicer(monkeypatch):
    """A pairwise contraction has no intermediate to slice, so `contract` does not plan one with
    the slicer even under a `memory_limit` (a saving of a planning call per contraction; the
    derivative rules contract pairs under their equation's limit all the time); three operands
    are planned. Reference: numpy (values), a call count.
    Kills: contract 24 (pairs sent to the slicer)"""
    calls = []
    plan = einsum_rules.slice_plan
    monkeypatch.setattr(einsum_rules, "slice_plan", lambda *a, **k: calls.append(a[0]) or plan(*a, **k))
    a, b, c = random_operands([(2, 3), (3, 4), (4, 2)])
    assert_close(einsum_rules.contract(("ij", "jk"), "ik", [a, b], memory_limit=4), a @ b, rtol=1e-12)
    assert calls == []
    got = einsum_rules.contract(("ij", "jk", "kl"), "il", [a, b, c], memory_limit=4)
    assert_close(got, a @ b @ c, rtol=1e-12)
    assert calls == [("ij", "jk", "kl")]


@pytest.mark.parametrize("name", ["array_api_strict", "torch"])
def test_off_numpy_a_contraction_follows_the_path_its_parameters_choose(monkeypatch, name):
    """On another library, a pair is one step of the library's (no path planned), and three
    operands are contracted pairwise along the path `optimize` and `memory_limit` choose: an
    explicit path, or the path that keeps a jit program's intermediates within its limit (the
    chain of `test_a_chain_contracts_along_the_path_its_parameters_choose`: b c first).
    Reference: numpy (values), the steps run and the plans made.

    Kills: _einsum_impl 50 (a pair planned), 51 (three operands in one step), 64 (the path
    given ignored), 65 (the limit ignored)"""
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    steps, plans = [], []
    step, plan = executor.step, einsum_rules._plan
    monkeypatch.setattr(
        executor, "step", lambda xp, ins, out, ops: steps.append(tuple(ins)) or step(xp, ins, out, ops)
    )
    monkeypatch.setattr(einsum_rules, "_plan", lambda *a: plans.append(a[0]) or plan(*a))
    a, b, c = random_operands([(1, 2), (2, 64), (64, 2)])
    want = a @ b @ c
    check_lib(lib, ea.einsum("ij,jk->ik", lib.asarray(a), lib.asarray(b)), a @ b, rtol=1e-12)
    assert (steps, plans) == ([("ij", "jk")], [])
    steps.clear()
    got = ea.einsum("ij,jk,kl->il", *map(lib.asarray, (a, b, c)), optimize=[(1, 2), (0, 1)])
    check_lib(lib, got, want, rtol=1e-12)
    assert steps[0] == ("jk", "kl") and len(steps) == 2
    steps.clear()
    params = {"inputs": ("ij", "jk", "kl"), "output": "il", "optimize": "auto", "memory_limit": 4}
    run = lower_rules[einsum_p](params, ((1, 2), (2, 64), (64, 2)))
    check_lib(lib, run(*map(lib.asarray, (a, b, c))), want, rtol=1e-12)
    assert steps[0] == ("jk", "kl") and len(steps) == 2


@pytest.mark.parametrize("real, cplx", [(np.float64, np.complex128), (np.float32, np.complex64)])
def test_a_real_operand_of_a_complex_einsum_gets_a_real_gradient_in_its_dtype(real, cplx):
    """x real, y complex: the cotangent of einsum("i,ij->j", x, y) is complex, and x's gradient
    is the real part of what reaches it, in x's dtype (float32 stays float32). `backward`
    stores what reaches the leaf as it is, so a gradient left complex shows there (grad takes
    the real part at the end). Closed form: d/dx sum(real(x @ y)) = real(y).sum(1).

    Kills: _einsum_vjp 42, 43 (the cast to the operand's dtype skipped), 46 (cast to float64)"""
    x = random_operands([(3,)])[0].astype(real)
    y = (random_operands([(3, 2)], seed=1)[0] + 1j * random_operands([(3, 2)], seed=2)[0]).astype(cplx)
    leaf = ea.tensor(x, requires_grad=True)
    ea.sum(ea.real(ea.einsum("i,ij->j", leaf, y))).backward()
    assert leaf.grad.dtype == real
    assert_close(leaf.grad, y.real.sum(axis=1), rtol=1e-6)
    # the staged gradient casts the unit cotangent to complex and x's once to x's dtype: no more
    g = ea.make_graph(ea.grad(lambda x: ea.sum(ea.real(ea.einsum("i,ij->j", x, y)))))(x)
    casts = [e.type for e in g.equations if e.op == "astype"]
    assert casts == [
        f"{'c64' if real == np.float32 else 'c128'}[2]",
        f"{'f32' if real == np.float32 else 'f64'}[3]",
    ]


def test_optimize_none_plans_as_auto_and_false_contracts_in_one_step():
    """numpy's meanings of `optimize`: None and True plan as "auto" (pairwise steps); False
    contracts every operand in one step. Reference: numpy (values), the staged steps.
    Kills: linear.normalize_optimize 11 (None an unknown strategy), linear.einsum 35, 36
    (optimize=False planned pairwise)"""
    ops = random_operands([(2, 3), (3, 4), (4, 5)])
    want = ops[0] @ ops[1] @ ops[2]
    for optimize, steps in ((None, [2, 2]), (True, [2, 2]), (False, [3])):
        f = lambda *xs, optimize=optimize: ea.einsum("ij,jk,kl->il", *xs, optimize=optimize)
        assert_close(f(*ops), want, rtol=1e-12)
        (e,) = ea.make_graph(f)(*ops).equations
        assert [len(p) for p in e.params["optimize"]] == steps, optimize


def test_a_sliced_contraction_along_a_path_with_a_three_operand_step_has_gradients():
    """An explicit path may contract three operands in one step; sliced (the limit forces it),
    the pullback of that step contracts its cotangent with the other two, a three-operand
    contraction planned by the default strategy. Reference: the unsliced gradients.
    Kills: _einsum_impl 1 (the default strategy unknown)"""
    spec, path = "ab,bc,cd,de->ae", [(1, 2, 3), (0, 1)]
    ops = random_operands([(6, 6)] * 4)
    assert ea.contract_path(spec, *ops, optimize=path, memory_limit=20)[1].sliced_indices
    loss = lambda *xs, **kw: ea.sum(ea.einsum(spec, *xs, **kw) ** 2)
    got = ea.grad(lambda *xs: loss(*xs, optimize=path, memory_limit=20), (0, 1, 2, 3))(*ops)
    want = ea.grad(loss, (0, 1, 2, 3))(*ops)
    for g, w in zip(got, want):
        assert_close(g, w, rtol=1e-10)
