"""einad.executor: its choices, checked where a wrong choice changes no value, and the
standard-only path (permute_dims/reshape/matmul/sum, what a library without einsum gets)
on every array library.

Mutation testing (docs/guarantees.md, "Mutation testing") found edits to the executor
that every value test passes: the numpy executor replaced by the generic one, a wrong
"can this transpose be reshaped without a copy" answer (a hidden copy, or a slower
path), a 52-letter step refused by a library's einsum, a fold keeping letters it
could sum early. Each test here fails under one of those edits.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import math
from unittest import mock

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import einad as ea
from tests.support.arraylibs import load
from tests.support.checks import check_lib, random_operands
from tests.support.strategies import einsum_cases, random_array


def _internal(module):
    """The one place this file reaches inside einad: fix the path here when modules move."""
    return importlib.import_module(f"einad.{module}")


executor = _internal("executor")


def test_numpy_arrays_run_on_the_tuned_pair_executor():
    """Kills: `runner` returning the generic `step` for numpy (same values, no matmul plans)."""
    assert executor.runner(np) is executor._raw_step
    other = executor.runner(object)
    assert isinstance(other, functools.partial) and other.func is executor.step


def _compositions(n):
    """Every way to cut n axes into consecutive non-empty groups."""
    for cuts in itertools.product((False, True), repeat=n - 1):
        groups, g = [], 1
        for cut in cuts:
            if cut:
                groups.append(g)
                g = 1
            else:
                g += 1
        yield [*groups, g]


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 1, 3), (1, 3, 2, 2), (3, 2, 1, 1)])
def test_view_ok_agrees_with_numpy_reshape(shape):
    """`_view_ok` says whether a transposed C-contiguous array reshapes without a copy;
    numpy's own reshape is the oracle, over every permutation and grouping (size-1 axes
    included: they never block a merge).

    Kills: any edit of the stride products, the group walk, the size-1 filter or the
    returned booleans (the executor would copy a large operand, or send a step that
    needs no copy to the slower numpy.einsum).
    """
    letters = "abcd"[: len(shape)]
    size = dict(zip(letters, shape))
    base = np.zeros(shape)
    for perm in itertools.permutations(range(len(shape))):
        t = base.transpose(perm)
        for groups in _compositions(len(shape)):
            new, pos = [], 0
            for g in groups:
                new.append(int(np.prod(t.shape[pos : pos + g])))
                pos += g
            view = np.shares_memory(t.reshape(new), base)
            assert executor._view_ok(letters, perm, groups, size) == view, (perm, groups)


def test_a_step_that_would_copy_goes_to_numpy_einsum_and_one_that_would_not_to_matmul():
    """The plan of a memory-bound step (a matrix-vector product): matmul (BLAS gemv)
    only when both operands reshape without a copy."""
    viewable = executor._pair_plan("ijk", "jk", "i", (4, 5, 6), (5, 6))
    assert viewable.matvec and viewable.gemm
    copying = executor._pair_plan("kji", "jk", "i", (6, 5, 4), (5, 6))
    assert copying.matvec and not copying.gemm
    rng = np.random.default_rng(3)
    for (sa, sb, so), (x, y) in [
        (("ijk", "jk", "i"), (rng.standard_normal((4, 5, 6)), rng.standard_normal((5, 6)))),
        (("kji", "jk", "i"), (rng.standard_normal((6, 5, 4)), rng.standard_normal((5, 6)))),
    ]:
        np.testing.assert_allclose(executor._pair(x, y, sa, sb, so), np.einsum(f"{sa},{sb}->{so}", x, y))


def test_a_step_of_52_letters_is_renamed_and_one_of_53_is_not():
    """A library's einsum is given the letters a-z, A-Z: all 52 can be used.

    Kills: ``>`` made ``>=`` in `_rename`, or letters counted with a separator joined in.
    """
    many = [chr(0x3B1 + k) if k < 25 else chr(0x4E00 + k) for k in range(53)]  # none in a-zA-Z
    ins = ("".join(many[:26]), "".join(many[26:52]))
    text = executor._rename(ins, many[0])
    assert text is not None
    lhs, rhs = text.split("->")
    assert sorted(set(lhs.replace(",", ""))) == sorted(executor._ASCII) and rhs == "a"
    assert executor._rename((*ins, many[52]), many[0]) is None


class _Recording:
    """A namespace with no einsum (so `step` takes the standard's path) recording the
    size of every matmul result."""

    def __init__(self, xp):
        self._xp = xp
        self.sizes = []

    def matmul(self, a, b):
        c = self._xp.matmul(a, b)
        self.sizes.append(int(np.prod(c.shape)))
        return c

    def __getattr__(self, name):
        if name == "einsum":
            raise AttributeError(name)
        return getattr(self._xp, name)


def test_the_standard_fold_keeps_only_the_letters_later_operands_need():
    """Folding ``ij,jk,kl->il`` from the left: the first product is ``ik`` (j summed),
    never an ``ijk`` intermediate.

    Kills: `_standard` computing the letters still needed from ``ins[k - 1:]`` (or with a
    separator joined in), which keeps summed letters as batch letters of every product.
    """
    compat = pytest.importorskip("array_api_compat")
    xp = _Recording(compat.array_namespace(np.zeros(1)))
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((3, 7)), rng.standard_normal((7, 4)), rng.standard_normal((4, 2))
    got = executor.step(xp, ("ij", "jk", "kl"), "il", [a, b, c])
    np.testing.assert_allclose(got, a @ b @ c, rtol=1e-12)
    assert xp.sizes == [3 * 4, 3 * 2]


class _Library:
    """numpy's array-API namespace, recording what `executor.step` asks of it."""

    def __init__(self, xp, with_einsum=True):
        self._xp = xp
        self._with_einsum = with_einsum
        self.einsum_dtypes = []
        self.casts = 0

    def einsum(self, text, *xs):
        self.einsum_dtypes.append(tuple(np.dtype(x.dtype) for x in xs))
        return self._xp.einsum(text, *xs)

    def astype(self, x, dtype):
        self.casts += 1
        return self._xp.astype(x, dtype)

    def __getattribute__(self, name):
        if name == "einsum" and not object.__getattribute__(self, "_with_einsum"):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    def __getattr__(self, name):
        return getattr(self._xp, name)


def _library():
    compat = pytest.importorskip("array_api_compat")
    return compat.array_namespace(np.zeros(1))


def test_a_library_with_einsum_runs_each_step_its_plan_does_not_take_as_one_call_of_it():
    """A diagonal, an integer product and a step of three operands each go to the library's
    einsum, once, with the operands as they are.

    Kills: `step` never finding or never using the library's einsum (the standard's
    permute/reshape/matmul path gives the same values, with more passes)."""
    xp = _Library(_library())
    rng = np.random.default_rng(6)
    a, b, c = rng.standard_normal((4, 4)), rng.standard_normal((4, 5)), rng.standard_normal((5, 2))
    np.testing.assert_allclose(
        executor.step(xp, ("ii", "ij"), "ij", [a, b]), np.diag(a)[:, None] * b, rtol=1e-12
    )
    i, j = np.arange(12).reshape(3, 4), np.arange(8).reshape(4, 2)
    np.testing.assert_array_equal(executor.step(xp, ("ij", "jk"), "ik", [i, j]), i @ j)
    np.testing.assert_allclose(executor.step(xp, ("ij", "jk", "kl"), "il", [a, b, c]), a @ b @ c, rtol=1e-12)
    f8, i8 = np.dtype(np.float64), np.dtype(np.int64)
    assert xp.einsum_dtypes == [(f8, f8), (i8, i8), (f8, f8, f8)]
    assert xp.casts == 0  # operands already of the result dtype are passed as they are


# one or two operands of distinct letters, as `_LibPlan` lays them out
PLANNED = [
    (("ij", "jk"), "ik", [(3, 4), (4, 5)]),  # a matrix product: a @ b, nothing else
    (("ij", "kj"), "ki", [(3, 4), (5, 4)]),  # both transposed
    (("bij", "bjk"), "bik", [(2, 3, 4), (2, 4, 5)]),  # batched
    (("abc", "cbd"), "da", [(2, 3, 4), (4, 3, 5)]),  # two letters contracted, merged
    (("ij", "jk"), "", [(3, 4), (4, 5)]),  # letters only one operand keeps: summed first
    (("i", "j"), "ji", [(3,), (4,)]),  # an outer product: a broadcast multiply
    (("ij", "ij"), "ji", [(3, 4), (3, 4)]),  # a Hadamard product
    (("", "ij"), "ij", [(), (3, 4)]),
    (("ijk",), "ki", [(2, 3, 4)]),  # one operand: a sum and a transpose
    (("ij",), "", [(3, 4)]),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128"])
def test_a_floating_step_of_distinct_letters_runs_as_its_plan_not_the_library_einsum(dtype):
    """One or two floating operands whose letters are distinct run as their `_LibPlan`: a few
    view operations and one matrix product or multiply, made once per subscripts and shapes
    (torch's einsum parses its subscripts on every call, ten times its matmul's cost on small
    arrays), with numpy's values and dtype.

    Kills: the plan test in `step` (every step to the library's einsum), a plan not cached."""
    xp = _Library(_library())
    for _ in range(2):
        before = executor._lib_plan.cache_info()
        for ins, out, shapes in PLANNED:
            ops = [(3 * o).astype(dtype) for o in random_operands(shapes, seed=len(out), dtype=dtype)]
            got = executor.step(xp, ins, out, ops)
            want = np.einsum(",".join(ins) + "->" + out, *ops)
            assert got.dtype == want.dtype, (ins, out)
            np.testing.assert_allclose(got, want, rtol=1e-5 if dtype == "float32" else 1e-12)
        after = executor._lib_plan.cache_info()
    assert after.misses == before.misses and after.hits == before.hits + len(PLANNED)  # the second round
    assert xp.einsum_dtypes == []


def test_a_step_of_53_letters_takes_the_standard_path_on_a_library_with_einsum():
    """Kills: `step` calling the library's einsum when `_rename` found no a-zA-Z spelling."""
    xp = _Library(_library())
    many = [chr(0x3B1 + k) if k < 25 else chr(0x4E00 + k) for k in range(53)]
    ins = tuple(many)  # 53 vectors of length 1: their outer product
    xs = [np.full(1, 2.0) for _ in ins]
    got = executor.step(xp, ins, "", xs)
    assert xp.einsum_dtypes == []
    np.testing.assert_allclose(got, 2.0**53)


@pytest.mark.parametrize("with_einsum", [True, False], ids=["einsum", "standard"])
def test_narrow_integers_are_contracted_in_int64_and_wrap_as_numpy_does(with_einsum):
    """int8 operands are contracted in int64 and cast back (wrapping like numpy's einsum);
    an int8 with an int16 gives int16.

    Kills: `step` not widening narrow integers (the kind test or the `_WIDE` test
    edited, or the working dtype lost).
    """
    xp = _Library(_library(), with_einsum=with_einsum)
    a = np.full((2, 40), 100, dtype=np.int8)
    b = np.full(40, 3, dtype=np.int8)
    got = executor.step(xp, ("ij", "j"), "i", [a, b])
    want = np.einsum("ij,j->i", a, b)
    assert got.dtype == want.dtype == np.int8
    np.testing.assert_array_equal(got, want)
    c = np.full(40, 1000, dtype=np.int16)
    got = executor.step(xp, ("ij", "j"), "i", [a, c])
    want = np.einsum("ij,j->i", a, c)
    assert got.dtype == want.dtype == np.int16
    np.testing.assert_array_equal(got, want)
    if with_einsum:
        assert xp.einsum_dtypes == [(np.dtype(np.int64),) * 2] * 2


def test_each_pair_step_runs_on_the_path_its_plan_and_its_operands_choose(monkeypatch):
    """matmul for a matrix product, and for a matrix-vector product whose operands are
    C-contiguous and reshape without a copy; numpy.einsum (one pass, no copy) otherwise.

    Kills: any edit of the path test in `_run_pair` (same values, a hidden copy or a
    slower product).
    """
    calls = []
    matmul = np.matmul
    monkeypatch.setattr(np, "matmul", lambda a, b: calls.append(1) or matmul(a, b))
    rng = np.random.default_rng(8)
    m, n, v = rng.standard_normal((4, 5)), rng.standard_normal((5, 3)), rng.standard_normal((5, 6))
    t = rng.standard_normal((6, 5, 4))
    strided = rng.standard_normal((4, 10, 6))[:, ::2]  # ijk, not C-contiguous
    cases = [
        (("ij", "jk", "ik"), (m, n), True),  # a matrix product
        (("ijk", "jk", "i"), (np.ascontiguousarray(strided), v), True),  # gemv on views
        (("ijk", "jk", "i"), (strided, v), False),  # gemv would copy the strided operand
        (("kji", "jk", "i"), (t, v), False),  # its transpose needs a copy
    ]
    for (sa, sb, so), (x, y), on_matmul in cases:
        calls.clear()
        got = executor._pair(x, y, sa, sb, so)
        np.testing.assert_allclose(got, np.einsum(f"{sa},{sb}->{so}", x, y), rtol=1e-12)
        assert bool(calls) == on_matmul, (sa, sb, so)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsum_cases(max_operands=3))
def test_contractions_and_their_gradients_on_torch_and_array_api_strict_are_numpys(case):
    """Random einsums (diagonals, broadcasting, '...', outer products, size-0 and size-1
    dimensions, mixed dtypes) on torch and array-api-strict: the value and every operand's
    gradient are numpy's, in numpy's dtypes (each pairwise step as its plan or the library's
    einsum)."""
    spec, shapes, dtypes, seed = case
    rng = np.random.default_rng(seed)
    ops = [random_array(rng, s, d) for s, d in zip(shapes, dtypes)]
    want, back = ea.vjp(lambda *xs: ea.einsum(spec, *xs), *ops)
    g = random_array(rng, np.shape(want), np.asarray(want).dtype)
    want_grads = back(g)
    for name in ("torch", "array_api_strict"):
        lib = load(name)
        if lib is None:
            continue
        got, back = ea.vjp(lambda *xs: ea.einsum(spec, *xs), *[lib.asarray(o) for o in ops])
        tol = 1e-4 if np.float32 in dtypes else 1e-10
        check_lib(lib, got, np.asarray(want), rtol=tol, atol=tol, dtype=np.asarray(want).dtype)
        for got_g, want_g in zip(back(lib.asarray(g)), want_grads):
            check_lib(lib, got_g, np.asarray(want_g), rtol=tol, atol=tol, dtype=np.asarray(want_g).dtype)


# -- the standard-only path on every array library ----------------------------------------------

STANDARD = [
    (("ii",), "i", [(3, 3)]),
    (("iij",), "ji", [(3, 3, 2)]),
    (("ij",), "", [(2, 3)]),
    (("bij", "bjk"), "bki", [(2, 2, 3), (2, 3, 4)]),
    (("", "ij"), "ij", [(), (2, 3)]),
    (("i", "j"), "ij", [(3,), (4,)]),
    (("iji", "j"), "", [(3, 2, 3), (2,)]),
    (("ij", "jk", "kl"), "li", [(2, 3), (3, 4), (4, 2)]),
]


class _WithoutEinsum:
    """A library's namespace with no einsum: `executor.step` takes the standard's path."""

    def __init__(self, xp):
        self._xp = xp

    def __getattr__(self, name):
        if name == "einsum":
            raise AttributeError(name)
        return getattr(self._xp, name)


@pytest.mark.parametrize("dtype", ["float32", "complex128", "int32", "int64"])
def test_standard_path(lib, dtype):
    """The contraction written with permute_dims/reshape/matmul/sum alone (what a library
    without einsum gets) on every library, with numpy's result dtype."""
    namespace = _internal("arrays").namespace

    if lib.name == "numpy":
        pytest.skip("numpy takes its own executor")
    for ins, out, shapes in STANDARD:
        ops = random_operands(shapes, dtype="complex128" if dtype == "complex128" else "float64")
        ops = [(3 * o).astype(dtype) for o in ops]
        xs = [lib.asarray(o) for o in ops]
        want = np.einsum(",".join(ins) + "->" + out, *ops)
        got = executor.step(_WithoutEinsum(namespace(*xs)), ins, out, xs)
        check_lib(lib, got, want, rtol=1e-5 if dtype == "float32" else 1e-10)


def test_a_matrix_product_step_may_have_more_letters_than_numpy_einsum_knows():
    """A pairwise step of 61 distinct indices (opt_einsum's symbols past 'Z') runs as a matrix
    product, which needs no letters: only a step numpy.einsum itself runs is held to its 52
    (the planning report's random-regular networks had steps of 55 and 65 indices)."""
    la = "".join(oe.get_symbol(i) for i in range(30))
    lb = "".join(oe.get_symbol(i) for i in range(30, 60))
    k = oe.get_symbol(60)
    rng = np.random.default_rng(5)
    a = rng.standard_normal((1,) * 30 + (3,))
    b = rng.standard_normal((1,) * 29 + (2, 3))
    spec = f"{la}{k},{lb}{k}->{la}"
    s = a.ravel() @ b.reshape(2, 3).sum(0)
    np.testing.assert_allclose(np.ravel(ea.einsum(spec, a, b)), [s])

    def f(x, y):
        return ea.sum(ea.einsum(spec, x, y) ** 2)

    for grad in (ea.grad(f, argnums=(0, 1)), ea.jit(ea.grad(f, argnums=(0, 1)))):
        ga, gb = grad(a, b)
        np.testing.assert_allclose(np.ravel(ga), 2 * s * b.reshape(2, 3).sum(0))
        np.testing.assert_allclose(np.reshape(gb, (2, 3)), 2 * s * np.tile(a.ravel(), (2, 1)))


def test_a_path_whose_intermediate_has_more_axes_than_an_array_is_refused_at_the_call():
    """An intermediate of 66 indices cannot exist as an array (numpy's hold at most 64 axes):
    where the pairwise steps run as written (forward mode), einsum says so, naming the step,
    instead of numpy's ValueError from inside the contraction. A planned tree (eager einsum,
    its gradient) drops the letters of size 1 in every operand first (`network._drop_ones`),
    and these are all of them: it runs."""
    l1 = "".join(oe.get_symbol(i) for i in range(33))
    l2 = "".join(oe.get_symbol(i) for i in range(33, 66))
    eq = f"{l1},{l2},{l1},{l2}->"
    xs = [np.ones((1,) * 33) for _ in range(4)]
    path = [(0, 1), (0, 2), (0, 1)]  # the outer product of the first two keeps all 66 letters

    def f(*ops):
        return ea.einsum(eq, *ops, optimize=path)

    with pytest.raises(ea.EinsumError, match="step 0 .* intermediate of 66 indices.*at most 64 axes"):
        ea.jvp(f, xs, xs)
    assert f(*xs) == 1.0
    for g, x in zip(ea.grad(f, argnums=(0, 1, 2, 3))(*xs), xs):
        np.testing.assert_array_equal(g, np.ones_like(x))  # (the product of the other three)
    assert ea.einsum(eq, *xs, optimize=[(0, 2), (0, 2), (0, 1)]) == 1.0  # a path that can run


@pytest.mark.parametrize(
    ("spec", "head"),
    [
        ("abc,ade->bdce", "bd"),  # a letter of each operand looped over, then the two blocks
        ("xabc,xade->xbdec", "xb"),  # a batch letter first, then the other's block (swapped)
        ("abc,ade->dbec", "db"),
    ],
)
def test_a_looped_product_writes_its_result_in_the_order_asked(spec, head):
    """With `prefix`, a result order of no batch-left-right block form is written as it lies: a
    matmul looped over the head letters (each operand broadcast along the ones it lacks), C
    order in the output's letters, equal to numpy.einsum. Without, the product writes batch,
    left, right and hands back a transposed view. Kills: the loop's views or its swap wrong,
    or a looped plan made where none was asked."""
    ins, out = spec.split("->")
    sizes = dict(zip("xabcde", (2, 40, 3, 33, 34, 35)))
    shapes = [tuple(sizes[c] for c in term) for term in ins.split(",")]
    a, b = (np.random.default_rng(k).standard_normal(s) for k, s in enumerate(shapes))
    looped = executor._pair_plan(*ins.split(","), out, shapes[0], shapes[1], True)
    plain = executor._pair_plan(*ins.split(","), out, shapes[0], shapes[1])
    assert looped.head == head and plain.head == ""
    got = executor._run_pair(looped, a, b)
    np.testing.assert_allclose(got, np.einsum(spec, a, b), rtol=1e-10, atol=1e-12)
    assert got.flags.c_contiguous
    assert not executor._run_pair(plain, a, b).flags.c_contiguous


def test_a_product_too_thin_to_loop_keeps_one_matrix_product(monkeypatch):
    """Looping packs the operand repeated along the loop once per matrix: a product of fewer
    rows or columns than `PREFIX_SIDE`, or fewer multiply-adds than `PREFIX_MIN`, is not
    looped (one matmul, its result a transposed view). Kills: the thresholds dropped."""
    sa, sb, so = "abc", "ade", "bdce"
    shapes = ((40, 3, 33), (40, 8, 35))  # the columns, d e... and c: 8 * 35 and 33 each >= 32
    assert executor._pair_plan(sa, sb, so, *shapes, True).head == "bd"
    thin = ((40, 3, 33), (40, 8, 4))  # e of 4: a product's columns 4
    assert executor._pair_plan(sa, sb, so, *thin, True).head == ""
    monkeypatch.setattr(executor, "PREFIX_MIN", 10**9)
    executor._pair_plan.cache_clear()
    try:
        assert executor._pair_plan(sa, sb, so, *shapes, True).head == ""
    finally:
        executor._pair_plan.cache_clear()


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=5, max_size=5),
    so=st.permutations("bdce"),
    side=st.sampled_from([1, 8, 32]),
    least=st.sampled_from([1, 1 << 10, 1 << 15]),
)
def test_a_pair_too_small_to_loop_is_told_from_its_sizes_alone(sizes, so, side, least):
    """`loop_head` answers None for a pair whose operands alone show that no loop can pay
    (fewer elements than `PREFIX_SIDE` in one, a product of their sizes under `PREFIX_MIN`)
    without working out its letters (planning a 110-tensor network asks it of every pair it
    weighs, most with an input of 8 elements); elsewhere it answers as the letters say."""
    a, b, c, d, e = sizes
    shapes, so = ((a, b, c), (a, d, e)), "".join(so)
    with mock.patch.object(executor, "PREFIX_SIDE", side), mock.patch.object(executor, "PREFIX_MIN", least):
        letters = executor._letters
        with mock.patch.object(executor, "_letters", side_effect=letters) as spy:
            head = executor.loop_head("abc", "ade", so, *shapes)
        small = min(a * b * c, a * d * e) < side or a * b * c * a * d * e < least
        assert spy.called != small
        if small:  # the letters' own thresholds give the same answer
            size, _, _, _, left, right, inner = letters("abc", "ade", so, *shapes)
            nl, nk, nr = (math.prod(size[x] for x in cs) for cs in (left, inner, right))
            assert head is None and (min(nl, nr) < side or nl * nk * nr < least)


def test_a_pair_plan_sums_its_letters_in_the_order_asked():
    """`summed` orders the contracted letters (the operands' views are read in that order):
    the value is numpy.einsum's whichever order, and the plan's permutations follow it.
    Kills: `summed` ignored, or applied to one operand only."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4, 5)), rng.standard_normal((5, 4, 6))
    for summed in (None, "jk", "kj"):
        plan = executor._pair_plan("ijk", "kjl", "il", a.shape, b.shape, False, summed)
        np.testing.assert_allclose(executor._run_pair(plan, a, b), np.einsum("ijk,kjl->il", a, b), rtol=1e-12)
        order = "jk" if summed is None else summed
        assert "".join("ijk"[i] for i in plan.perm_a[1:]) == order
        assert "".join("kjl"[i] for i in plan.perm_b[:2]) == order


# -- a spread that repeats letters (a diagonal's cotangent) on other libraries ------------------


def _random_spreads(count, seed):
    """(src, dst, shape): `dst` of 1-5 letters from "abc" (repeats and letters `src` lacks)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        dst = "".join(rng.choice(list("abc"), size=rng.integers(1, 6)))
        u = "".join(dict.fromkeys(dst))
        src = "".join(rng.permutation(list(u))[: rng.integers(0, len(u) + 1)])
        size = {c: int(rng.integers(1, 4)) for c in "abc"}
        yield src, dst, tuple(size[c] for c in dst)


def test_a_spread_on_every_library_is_numpys(lib):
    """`dst` repeating letters, in any order, with letters `src` lacks (broadcast), of sizes 1-3:
    the same array as numpy's spread (which writes along strided views), lazily on dask."""
    spread = _internal("rules.einsum").spread_p.impl
    rng = np.random.default_rng(3)
    for src, dst, shape in _random_spreads(120, 4):
        size = dict(zip(dst, shape))
        x = rng.standard_normal(tuple(size[c] for c in src))
        want = spread(x, src=src, dst=dst, shape=shape)
        with lib.lazy():
            got = spread(lib.asarray(x), src=src, dst=dst, shape=shape)
        check_lib(lib, got, want)


@pytest.mark.parametrize("name", ["torch", "array_api_strict"])
def test_a_diagonal_is_written_into_zeros_where_the_library_writes_in_place(name, monkeypatch):
    """On a library whose arrays take ``a[::k] = b`` (torch, array-api-strict), the cotangent of a
    trace or a diagonal is zeros with its diagonal written by one strided assignment: neither
    an identity mask (``eye``) nor a ``where`` pass over the result (for 2000 x 2000 on torch,
    7.8 ms against torch's own 5.3 before). JAX's immutable arrays keep the mask.

    Kills: `arrays.writes_in_place` answering no, `_spread_any` not asking it."""
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    arrays = _internal("arrays")
    a = lib.asarray(np.arange(16.0).reshape(4, 4))
    xp = arrays.xp_of(a)
    assert arrays.writes_in_place(a)

    def refused(*args, **kwargs):
        raise AssertionError("a mask was made")

    monkeypatch.setattr(xp, "eye", refused)
    monkeypatch.setattr(xp, "where", refused)
    g = ea.grad(lambda m: ea.einsum("ii->", m) + ea.sum(ea.einsum("ii->i", m) ** 2))(a)
    check_lib(lib, g, np.eye(4) * (1 + 2 * np.diag(np.arange(16.0).reshape(4, 4))))
    jax_lib = load("jax")
    if jax_lib is not None:  # (not one of the suite's libraries: its arrays are immutable)
        assert not arrays.writes_in_place(jax_lib.module.numpy.zeros(2))
