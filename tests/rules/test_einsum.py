"""einad.rules.einsum (the Einsum primitive, through `ea.einsum`): numpy's whole grammar
(string and interleaved forms, Unicode letters, implicit outputs, '...', repeated letters,
size-1 broadcasting), optimize strategies, paths and memory_limit; values against numpy.einsum,
gradients against closed forms and float64 central differences of numpy.einsum (never einad
checking einad), to second order; and on every array library (the `lib` fixture: numpy,
array-api-strict, torch, dask): values and gradients equal einad's on numpy, results of the
inputs' library and dtype, dask never computed, two libraries refused."""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
import einad.transforms.batching
from tests.support.arraylibs import load
from tests.support.checks import (
    check_lib,
    einsum_fn,
    lib_value,
    random_operands,
    vjp_all,
)
from tests.support.jitting import compiled
from tests.support.numerics import (
    assert_close,
    numeric_grad,
    numeric_vjp,
    reference_einsum,
)

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted


def check_einsum(spec, *args, f=None, **kwargs):
    """Value against numpy; VJP of every operand and the JVP against central differences.

    `f` computes `spec` in another spelling (interleaved sublists); numpy's value of
    `spec` (`reference_einsum`: also Unicode letters and a summed '...') is the reference.
    """
    rng = np.random.default_rng(1)
    expected = reference_einsum(spec, *args)
    if f is None:
        f = lambda *a: ea.einsum(spec, *a, **kwargs)
    out = f(*args)
    assert isinstance(out, ea.Tensor)
    assert_close(out.numpy(), expected)
    assert out.dtype == expected.dtype

    ref = lambda *a: reference_einsum(spec, *a)
    u = rng.standard_normal(expected.shape)
    value, pullback = ea.vjp(f, *args)
    assert_close(value, expected)
    grads = pullback(u)
    assert len(grads) == len(args)
    for k, (g, a) in enumerate(zip(grads, args)):
        assert g.shape == np.shape(a), f"operand {k}: gradient shape {g.shape} != {np.shape(a)}"
        assert_close(g, numeric_vjp(ref, args, u, argnum=k))

    tangents = tuple(rng.standard_normal(np.shape(a)) for a in args)
    _, tangent_out = ea.jvp(f, tuple(args), tangents)
    expected_tangent = sum(
        reference_einsum(spec, *(args[:k] + (t,) + args[k + 1 :])) for k, t in enumerate(tangents)
    )
    assert_close(tangent_out, expected_tangent)


# -- the grammar ----------------------------------------------------------------------------

GRAMMAR = {
    # explicit and implicit output
    "explicit matmul": ("ij,jk->ik", [(2, 3), (3, 4)]),
    "implicit matmul": ("ij,jk", [(2, 3), (3, 4)]),
    "explicit transpose": ("ij->ji", [(2, 3)]),
    "implicit sorted output transposes": ("ji", [(2, 3)]),
    "implicit outer": ("i,j", [(2,), (3,)]),
    "three operands": ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    "four operands, implicit": ("ab,bc,cd,de", [(2, 3), (3, 2), (2, 4), (4, 3)]),
    "elementwise product kept": ("ij,ij->ij", [(2, 3), (2, 3)]),
    "batched": ("bij,bjk->bik", [(2, 2, 3), (2, 3, 4)]),
    # indices summed inside one operand
    "row sum": ("ij->i", [(2, 3)]),
    "summed inside the first operand": ("ij,jk->k", [(2, 3), (3, 4)]),
    "summed inside both operands": ("ijm,jkn->ik", [(2, 3, 2), (3, 4, 3)]),
    "total sum": ("ijk->", [(2, 3, 4)]),
    # repeated indices inside one operand
    "diagonal": ("ii->i", [(3, 3)]),
    "implicit trace": ("ii", [(3, 3)]),
    "iij->j": ("iij->j", [(2, 2, 3)]),
    "double diagonal": ("iijj->ij", [(2, 2, 3, 3)]),
    "repeated in both operands": ("iij,jkk->ik", [(2, 2, 3), (3, 4, 4)]),
    "repeated and shared": ("ii,i->i", [(3, 3), (3,)]),
    "repeated index kept twice": ("iji->ij", [(2, 3, 2)]),
    # ellipsis and broadcasting
    "ellipsis batch matmul": ("...ij,...jk->...ik", [(2, 3, 2, 3), (3, 3, 4)]),
    "ellipsis size-1 batch": ("...ij,...jk->...ik", [(2, 1, 2, 3), (1, 4, 3, 2)]),
    "ellipsis different ranks": ("...i,...i->...", [(2, 3, 4), (4,)]),
    "ellipsis implicit": ("...ij,...jk", [(2, 2, 3), (3, 4)]),
    "ellipsis in the middle": ("i...j,j...->i...", [(2, 3, 4), (4, 3)]),
    "ellipsis moved to the end": ("...ij->ij...", [(4, 2, 3)]),
    "ellipsis alone": ("...", [(2, 3)]),
    "ellipsis both broadcast": ("...,...->...", [(2, 1), (3,)]),
    "ellipsis of rank zero": ("...ij,jk->...ik", [(2, 3), (3, 4)]),
    "ellipsis summed, explicit output": ("...ij->...", [(2, 3, 4)]),
    "ellipsis with repeated index": ("a...a->...", [(2, 3, 2)]),
    "labelled size-1 broadcast": ("ij,ij->ij", [(2, 1), (1, 3)]),
    "labelled size-1 against a contraction": ("ij,jk->ik", [(2, 1), (3, 4)]),
    "labelled size-1 against a diagonal": ("ii,i->i", [(3, 3), (1,)]),
    # scalars
    "two scalars": (",", [(), ()]),
    "two scalars explicit": (",->", [(), ()]),
    "one scalar": ("->", [()]),
    "scalar times vector": (",i->i", [(), (3,)]),
    "vector times scalar, implicit": ("i,", [(3,), ()]),
    "sum to scalar with a scalar": ("ij,->", [(2, 3), ()]),
    # upper case and spaces
    "upper case": ("Ab,bC->AC", [(2, 3), (3, 4)]),
    "mixed case implicit": ("aB,Bc", [(2, 3), (3, 4)]),
    "spaces": (" i j , j k -> i k ", [(2, 3), (3, 4)]),
    "spaces around ellipsis": ("... i j , ... j -> ... i", [(2, 3, 4), (4,)]),
    # beyond numpy, as opt_einsum: any Unicode letter, and a '...' the output leaves out is summed
    "greek": ("αβ,βγ->αγ", [(2, 3), (3, 4)]),
    "cjk, implicit": ("甲乙,乙丙", [(2, 3), (3, 4)]),
    "accented trace": ("éé->", [(3, 3)]),
    "latin and greek, implicit order by code point": ("aα,αB", [(2, 3), (3, 4)]),
    "greek with ellipsis": ("...αβ,...βγ->...αγ", [(2, 2, 3), (3, 4)]),
    "greek repeated and broadcast": ("ωω,ω->ω", [(3, 3), (1,)]),
    "ellipsis summed away": ("...ij->ij", [(4, 2, 3)]),
    "ellipsis summed away, two operands": ("...i,...i->i", [(2, 3), (1, 3)]),
    "ellipsis summed away, to a scalar": ("i...,...->", [(2, 3), (3,)]),
    "ellipsis summed away, explicit empty ellipsis": ("...ij->ji", [(2, 3)]),
}


@both_modes
@pytest.mark.parametrize("name", sorted(GRAMMAR))
def test_einsum_grammar(name):
    spec, shapes = GRAMMAR[name]
    check_einsum(spec, *random_operands(shapes))


# numpy's interleaved form: (call, the same contraction as a string, shapes)
INTERLEAVED = {
    "int labels": (lambda a, b: ea.einsum(a, [0, 1], b, [1, 2], [0, 2]), "ij,jk->ik", [(2, 3), (3, 4)]),
    "implicit output: labels sorted": (
        lambda a, b: ea.einsum(a, [2, 1], b, [1, 0]),
        "cb,ba->ac",
        [(2, 3), (3, 4)],
    ),
    "bond names": (
        lambda a, b: ea.einsum(a, ["left", "bond"], b, ["bond", "right"], ["right", "left"]),
        "ab,bc->ca",
        [(2, 3), (3, 4)],
    ),
    "labels of mixed types, tuples as sublists": (
        lambda a, b: ea.einsum(a, (0, "k"), b, ("k", (1, 2)), ((1, 2), 0)),
        "ik,kj->ji",
        [(2, 3), (3, 4)],
    ),
    "ellipsis": (
        lambda a, b: ea.einsum(a, [..., 0, 1], b, [1, 2], [..., 0, 2]),
        "...ij,jk->...ik",
        [(5, 2, 3), (3, 4)],
    ),
    "ellipsis, implicit output": (
        lambda a, b: ea.einsum(a, [Ellipsis, 0, 1], b, [Ellipsis, 1]),
        "...ij,...j",
        [(5, 2, 3), (1, 3)],
    ),
    "ellipsis summed away": (lambda a: ea.einsum(a, [Ellipsis, 0], [0]), "...i->i", [(4, 2, 3)]),
    "trace": (lambda a: ea.einsum(a, [7, 7]), "ii", [(3, 3)]),
    "scalar operand": (lambda a, b: ea.einsum(a, [], b, [0], [0]), ",i->i", [(), (3,)]),
    "one-letter labels": (
        lambda a, b: ea.einsum(a, ["j", "k"], b, ["k", "i"]),
        "jk,ki->ij",
        [(2, 3), (3, 4)],
    ),
    "three operands": (
        lambda a, b, c: ea.einsum(a, [0, 1], b, [1, 2], c, [2, 3], [3, 0]),
        "ij,jk,kl->li",
        [(2, 3), (3, 4), (4, 2)],
    ),
}


@both_modes
@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_einsum_interleaved_form(name):
    f, spec, shapes = INTERLEAVED[name]
    check_einsum(spec, *random_operands(shapes), f=f)


@both_modes
@pytest.mark.parametrize(
    "sublists",
    [
        ([0, 1, 2], [2, 1]),
        ([5, 3, 1], [1, 3]),
        ([0, 1, 2], [2, 1], [0]),
        ([Ellipsis, 2], [2, 1]),
        ([Ellipsis, 2], [2, 1], [1, Ellipsis]),
        ([51, 26, 25], [25, 0]),  # numpy's labels run from 0 to 51
    ],
    ids=str,
)
def test_interleaved_form_matches_numpy_for_its_int_labels(sublists):
    a, b = random_operands([(2, 3, 4), (4, 3)])
    args = [a, sublists[0], b, sublists[1], *sublists[2:]]
    expected = np.einsum(*args)
    out = ea.einsum(*args)
    assert out.shape == expected.shape
    assert_close(out.numpy(), expected)


@both_modes
def test_einsum_optimize_and_memory_limit_apply_to_the_interleaved_form():
    a, b, c = random_operands([(2, 3), (3, 4), (4, 2)])
    for optimize in ("greedy", "optimal", [(1, 2), (0, 1)], False):
        check_einsum(
            "ij,jk,kl->il",
            a,
            b,
            c,
            f=lambda a, b, c, o=optimize: ea.einsum(a, [0, 1], b, [1, 2], c, [2, 3], [0, 3], optimize=o),
        )


@both_modes
def test_gradient_program_keeps_the_users_unicode_letters():
    a, b = random_operands([(2, 3), (3, 4)])
    graph = ea.make_graph(ea.grad(lambda a, b: ea.sum(ea.einsum("αβ,βγ->αγ", a, b) ** 2), (0, 1)))(a, b)
    assert "einsum[αβ,βγ->αγ]" in str(graph)
    assert any(s.endswith("->αβ") for s in graph.einsums), graph.einsums
    assert any(s.endswith("->βγ") for s in graph.einsums), graph.einsums
    graph = ea.make_graph(lambda a, b: ea.einsum(a, ["i", "j"], b, ["j", "k"]))(a, b)
    assert graph.einsums == ["ij,jk->ik"]  # one-letter labels are the letters the listing shows


@both_modes
def test_implicit_output_puts_upper_case_before_lower_case():
    x = np.arange(6.0).reshape(2, 3)
    out = ea.einsum("bA", x)  # implicit output "Ab": the transpose
    assert out.shape == (3, 2)
    assert_close(out.numpy(), x.T)
    a, b = random_operands([(2, 3, 4), (4, 5)])
    out = ea.einsum("aCd,dB", a, b)  # output "BCa"
    assert out.shape == (5, 3, 2)
    assert_close(out.numpy(), np.einsum("aCd,dB->BCa", a, b))


@both_modes
def test_implicit_output_sorts_letters_and_puts_ellipsis_first():
    a, b = random_operands([(5, 2, 3), (3, 4)])
    out = ea.einsum("...ji,ik", a, b)  # output: the ellipsis, then "jk"
    assert out.shape == (5, 2, 4)
    assert_close(out.numpy(), np.einsum("...ji,ik->...jk", a, b))
    out = ea.einsum("...kj", np.ones((5, 2, 3)))  # sorted letters: "...jk"
    assert out.shape == (5, 3, 2)


@both_modes
def test_einsum_accepts_tensors_and_mixed_operands():
    a, b = random_operands([(2, 3), (3, 4)])
    out = ea.einsum("ij,jk->ik", ea.tensor(a), b)
    assert_close(out.numpy(), a @ b)
    ga = ea.grad(lambda a: ea.sum(ea.einsum("ij,jk->ik", a, ea.tensor(b))))(a)
    assert_close(ga, np.ones((2, 4)) @ b.T)


@both_modes
def test_einsum_and_linear_helpers_accept_python_scalars_and_lists():
    """API.md: every ea operation accepts Tensors, numpy arrays and Python scalars alike."""
    x = np.arange(3.0)
    cases = [
        (lambda: ea.einsum(",i", 2.0, x), 2.0 * x),
        (lambda: ea.einsum("i,", x, 3), 3 * x),
        (lambda: ea.einsum("->", 2.0), np.array(2.0)),
        (lambda: ea.einsum(",", 2.0, 3.0), np.array(6.0)),
        (lambda: ea.einsum("ii", [[1.0, 2.0], [3.0, 4.0]]), np.array(5.0)),
        (lambda: ea.sum(2.0), np.array(2.0)),
        (lambda: ea.sum([1.0, 2.0]), np.array(3.0)),
        (lambda: ea.transpose(2.0), np.array(2.0)),
        (lambda: ea.dot(2.0, x), 2.0 * x),
        (lambda: ea.inner(x, 2.0), 2.0 * x),
        (lambda: ea.tensordot(2.0, x, 0), 2.0 * x),
        (lambda: ea.matmul([[1.0, 2.0]], [3.0, 4.0]), np.array([11.0])),
    ]
    for make, expected in cases:
        out = make()
        assert isinstance(out, ea.Tensor)
        assert out.dtype == expected.dtype
        assert_close(out.numpy(), expected)
    assert_close(ea.grad(lambda s: ea.sum(ea.einsum(",i", s, x)))(2.0), x.sum())
    assert_close(ea.grad(lambda x: ea.sum(ea.einsum(",i", 2.0, x)))(x), np.full(3, 2.0))


# -- the cases known to break other engines ------------------------------------------------------


@both_modes
def test_trace_ii_to_scalar():
    (x,) = random_operands([(3, 3)])
    assert_close(ea.einsum("ii->", x).numpy(), np.trace(x))
    g = ea.grad(lambda x: ea.einsum("ii->", x))(x)
    assert_close(g, np.eye(3))
    check_einsum("ii->", x)


@both_modes
def test_nd_nn_to_d():
    a, b = random_operands([(3, 2), (3, 3)])
    u = np.array([0.5, -2.0])
    _, pullback = ea.vjp(lambda a, b: ea.einsum("nd,nn->d", a, b), a, b)
    ga, gb = pullback(u)
    assert_close(ga, np.outer(np.diag(b), u))
    assert_close(gb, np.diag(a @ u))  # on the diagonal, zero elsewhere
    check_einsum("nd,nn->d", a, b)


@both_modes
def test_iij_to_ij():
    (x,) = random_operands([(2, 2, 3)])
    u = np.arange(6.0).reshape(2, 3) + 1
    _, pullback = ea.vjp(lambda x: ea.einsum("iij->ij", x), x)
    (g,) = pullback(u)
    expected = np.zeros((2, 2, 3))
    for i in range(2):
        expected[i, i] = u[i]
    assert_close(g, expected)
    check_einsum("iij->ij", x)


@both_modes
def test_iij_to_i():
    (x,) = random_operands([(2, 2, 3)])
    u = np.array([2.0, -3.0])
    _, pullback = ea.vjp(lambda x: ea.einsum("iij->i", x), x)
    (g,) = pullback(u)
    expected = np.zeros((2, 2, 3))
    for i in range(2):
        expected[i, i, :] = u[i]
    assert_close(g, expected)
    check_einsum("iij->i", x)


@both_modes
def test_iji_to_j():
    (x,) = random_operands([(2, 3, 2)])
    u = np.array([1.0, -2.0, 3.0])
    _, pullback = ea.vjp(lambda x: ea.einsum("iji->j", x), x)
    (g,) = pullback(u)
    expected = np.zeros((2, 3, 2))
    for i in range(2):
        expected[i, :, i] = u
    assert_close(g, expected)
    check_einsum("iji->j", x)


@both_modes
def test_i_ellipsis_to_ellipsis():
    (x,) = random_operands([(2, 3, 4)])
    u = np.arange(12.0).reshape(3, 4)
    _, pullback = ea.vjp(lambda x: ea.einsum("i...->...", x), x)
    (g,) = pullback(u)
    assert_close(g, np.broadcast_to(u, (2, 3, 4)))
    check_einsum("i...->...", x)


@both_modes
def test_outer_i_j_to_ij():
    a, b = random_operands([(2,), (3,)])
    u = np.arange(6.0).reshape(2, 3)
    _, pullback = ea.vjp(lambda a, b: ea.einsum("i,j->ij", a, b), a, b)
    ga, gb = pullback(u)
    assert_close(ga, u @ b)
    assert_close(gb, u.T @ a)
    check_einsum("i,j->ij", a, b)


@both_modes
def test_same_tensor_twice_ij_ji():
    (x,) = random_operands([(3, 3)])
    assert_close(ea.einsum("ij,ji->", x, x).numpy(), np.trace(x @ x))
    g = ea.grad(lambda x: ea.einsum("ij,ji->", x, x))(x)
    assert_close(g, 2 * x.T)  # both contributions add


@both_modes
@pytest.mark.parametrize(
    "spec, expected_grad",
    [
        ("i,i->", lambda x: 2 * x),
        ("ij,ij->", lambda x: 2 * x),
        ("i,i,i->", lambda x: 3 * x**2),
        ("ij,jk->", lambda x: x.sum(1)[None, :] + x.sum(0)[:, None]),
    ],
)
def test_same_tensor_as_several_operands(spec, expected_grad):
    (x,) = random_operands([(3, 3)]) if "j" in spec else random_operands([(4,)])
    n = spec.split("->")[0].count(",") + 1
    assert_close(ea.einsum(spec, *[x] * n).numpy(), np.einsum(spec, *[x] * n))
    g = ea.grad(lambda x: ea.einsum(spec, *[x] * n))(x)
    assert_close(g, expected_grad(x))
    assert_close(g, numeric_grad(lambda x: np.einsum(spec, *[x] * n), x))


@both_modes
def test_i_i_with_a_size_one_operand():
    a = np.array([1.5, -2.0])
    b = np.array([3.0])
    out = ea.einsum("i,i", a, b)
    assert_close(out.numpy(), np.einsum("i,i", a, b))
    ga, gb = ea.grad(lambda a, b: ea.einsum("i,i", a, b), (0, 1))(a, b)
    assert ga.shape == (2,) and gb.shape == (1,)
    assert_close(ga, np.array([3.0, 3.0]))
    assert_close(gb, np.array([a.sum()]))
    check_einsum("i,i", a, b)


@both_modes
@pytest.mark.parametrize("shapes", [[(1, 2, 3), (4, 3)], [(4, 2, 3), (1, 3)], [(1, 2, 3), (1, 3)]])
def test_batched_matvec_with_a_size_one_batch(shapes):
    a, b = random_operands(shapes)
    u = np.random.default_rng(5).standard_normal(np.einsum("...ij,...j", a, b).shape)
    _, pullback = ea.vjp(lambda a, b: ea.einsum("...ij,...j", a, b), a, b)
    ga, gb = pullback(u)
    assert ga.shape == a.shape and gb.shape == b.shape
    n = u.shape[0]
    full_a = np.broadcast_to(a, (n,) + a.shape[1:])
    full_b = np.broadcast_to(b, (n,) + b.shape[1:])
    ga_full = np.einsum("bi,bj->bij", u, full_b)
    gb_full = np.einsum("bi,bij->bj", u, full_a)
    assert_close(ga, ga_full.sum(0, keepdims=True) if a.shape[0] == 1 else ga_full)
    assert_close(gb, gb_full.sum(0, keepdims=True) if b.shape[0] == 1 else gb_full)
    check_einsum("...ij,...j", a, b)


# -- optimize strategies and memory_limit ----------------------------------------------------------

CHAIN = "ij,jk,kl,lm->im"


CHAIN_SHAPES = [(2, 3), (3, 4), (4, 2), (2, 3)]


@both_modes
@pytest.mark.parametrize(
    "optimize",
    [
        "auto",
        "greedy",
        "optimal",
        "dp",
        "branch-2",
        True,
        False,
        [(0, 1), (0, 1), (0, 1)],
        [(2, 3), (0, 1), (0, 1)],
        [(0, 1, 2, 3)],
        [(1, 2), (0, 1, 2)],
        ["einsum_path", (0, 3), (0, 2), (0, 1)],
    ],
    ids=str,
)
def test_optimize_strategies_and_paths(optimize):
    check_einsum(CHAIN, *random_operands(CHAIN_SHAPES), optimize=optimize)


@both_modes
@pytest.mark.parametrize("memory_limit", [None, 1, 8, 1000, "max_input"])
def test_memory_limit(memory_limit):
    check_einsum(CHAIN, *random_operands(CHAIN_SHAPES), memory_limit=memory_limit)


@both_modes
def test_optimize_with_repeated_and_broadcast_indices():
    a, b, c = random_operands([(2, 2, 3), (1, 3), (3, 4)])
    for optimize in ("greedy", "optimal", [(1, 2), (0, 1)], False):
        check_einsum("iij,kj,jl->il", a, b, c, optimize=optimize)


# -- higher order -------------------------------------------------------------------------------------


def _numeric_jacobian(g, x, eps=1e-5):
    """Jacobian of an array-valued `g` (numpy in, numpy out) by central differences."""
    out = np.zeros(np.shape(g(x)) + x.shape)
    for idx in np.ndindex(*x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += eps
        xm[idx] -= eps
        out[(...,) + idx] = (np.asarray(g(xp)) - np.asarray(g(xm))) / (2 * eps)
    return out


@both_modes
def test_hessian_through_einsum():
    (a,) = random_operands([(2, 3)])
    f = lambda a: ea.sum(ea.einsum("ij,jk->ik", a, a.T) ** 2)
    closed_grad = lambda a: 4 * (a @ a.T) @ a
    assert_close(ea.grad(f)(a), closed_grad(a))
    expected = _numeric_jacobian(closed_grad, a)
    assert_close(ea.hessian(f)(a), expected, rtol=1e-5, atol=1e-6)
    assert_close(ea.jacrev(ea.grad(f))(a), expected, rtol=1e-5, atol=1e-6)
    v = np.random.default_rng(2).standard_normal(a.shape)
    hv = ea.grad(lambda a: ea.sum(ea.grad(f)(a) * v))(a)
    assert_close(hv, np.einsum("ijkl,kl->ij", expected, v), rtol=1e-5, atol=1e-6)


@both_modes
@pytest.mark.parametrize(
    "spec, shape, operands",
    [
        ("ii,ij->j", (3, 3), lambda x: (x, x)),
        ("iij,jk->ik", (2, 2, 2), lambda x: (x, x[0])),
        ("...ij,...jk->...ik", (2, 2, 2), lambda x: (x, x)),
        ("i,j->ij", (3,), lambda x: (x, x)),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_second_derivative_of_einsum_with_itself(spec, shape, operands):
    """grad of grad through the einsum VJP rules (diagonal writes, broadcasts) vs differences of grad."""
    (x,) = random_operands([shape])
    f = lambda x: ea.sum(ea.sin(ea.einsum(spec, *operands(x))))
    ref = lambda x: np.sum(np.sin(np.einsum(spec, *operands(x))))
    g = ea.grad(f)
    assert_close(g(x), numeric_grad(ref, x))
    assert_close(ea.jacrev(g)(x), _numeric_jacobian(g, x), rtol=1e-5, atol=1e-6)


# -- on every array library ----------------------------------------------------------------


# (id, function of the operands, operand shapes): the grammar einsum accepts.
CASES = [
    ("matmul", einsum_fn("ij,jk->ik"), [(2, 3), (3, 4)]),
    ("batch-matmul", einsum_fn("bij,bjk->bik"), [(2, 2, 3), (2, 3, 4)]),
    ("trace", einsum_fn("ii->"), [(3, 3)]),
    ("diagonal", einsum_fn("ii->i"), [(3, 3)]),
    ("repeated", einsum_fn("iij->ji"), [(3, 3, 2)]),
    ("repeated-pair", einsum_fn("ii,i->i"), [(3, 3), (3,)]),
    ("three-times", einsum_fn("iii,ij->j"), [(2, 2, 2), (2, 3)]),
    ("outer", einsum_fn("i,j->ij"), [(3,), (4,)]),
    ("summed-letters", einsum_fn("ijk,jk->i"), [(2, 3, 4), (3, 4)]),
    ("sum-all", einsum_fn("ij->"), [(2, 3)]),
    ("implicit", einsum_fn("ij,jk"), [(2, 3), (3, 4)]),
    ("ellipsis", einsum_fn("...ij,...jk->...ik"), [(2, 2, 3), (3, 4)]),
    ("summed-ellipsis", einsum_fn("...ij->ij"), [(2, 2, 3)]),
    ("scalar-operand", einsum_fn(",ij->ij"), [(), (2, 3)]),
    ("scalars", einsum_fn(",->"), [(), ()]),
    ("size-1-broadcast", einsum_fn("ij,ij->ij"), [(2, 3), (1, 3)]),
    ("three-optimal", einsum_fn("ij,jk,kl->li", optimize="optimal"), [(2, 3), (3, 4), (4, 2)]),
    ("four-greedy", einsum_fn("ab,bc,cd,da->", optimize="greedy"), [(2, 3), (3, 4), (4, 2), (2, 2)]),
    ("explicit-path", einsum_fn("ij,jk,kl->il", optimize=[(1, 2), (0, 1)]), [(2, 3), (3, 4), (4, 2)]),
    ("one-step-path", einsum_fn("ij,jk,kl->il", optimize=False), [(2, 3), (3, 4), (4, 2)]),
    ("unicode", einsum_fn("αβ,βγ->γα"), [(2, 3), (3, 4)]),
    ("interleaved", lambda a, b: ea.einsum(a, [0, "j"], b, ["j", 2], [2, 0]), [(2, 3), (3, 4)]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_einsum_value_and_gradients(lib, case):
    _, f, shapes = case
    vjp_all(lib, f, random_operands(shapes))


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex(lib, dtype):
    """Complex operands: value and VJPs equal einad's on numpy; complex times real is numpy's
    complex128 product."""
    rtol = 1e-5 if dtype == "complex64" else 1e-10
    vjp_all(
        lib,
        einsum_fn("ij,jk,kk->ik"),
        random_operands([(2, 3), (3, 3), (3, 3)], dtype=dtype),
        rtol=rtol,
        atol=rtol,
    )
    a, b = random_operands([(2, 3), (3, 4)])
    c = (a + 1j * a[::-1]).astype(dtype)
    out = ea.einsum("ij,jk->ik", lib.asarray(c), lib.asarray(b))
    check_lib(lib, out, c @ b, rtol=min(rtol, 1e-6), atol=1e-8)


@both_modes
def test_float32_stays_float32(lib):
    """float32 operands (and a Python number with them) give float32 values and gradients:
    against numpy.einsum, the closed form and einad's on numpy."""
    a, b = random_operands([(2, 3), (3, 3)], dtype=np.float32)
    x, y = lib.asarray(a), lib.asarray(b)
    out = ea.einsum("ij,jj->ij", x, y)
    check_lib(lib, out, np.einsum("ij,jj->ij", a, b), rtol=1e-6)
    loss = lambda x, y: ea.einsum("ij,jj,ij->", x, y, x)
    ga, gb = ea.grad(loss, argnums=(0, 1))(x, y)
    wa, wb = ea.grad(loss, argnums=(0, 1))(a, b)
    check_lib(lib, ga, wa, rtol=1e-5)
    check_lib(lib, gb, wb, rtol=1e-5)
    # a Python number operand takes float32 too
    check_lib(lib, ea.einsum(",ij->ij", 2.0, x), 2 * a, rtol=1e-6)
    # a matrix product: float32 gradients, the closed form ones @ b.T
    a, b = (v.astype(np.float32) for v in random_operands([(2, 3), (3, 4)]))
    x, y = lib.asarray(a), lib.asarray(b)
    check_lib(lib, ea.einsum("ij,jk->ik", x, y), a @ b, rtol=1e-6)
    ga, gb = ea.grad(lambda a, b: ea.sum(ea.einsum("ij,jk->ik", a, b)), (0, 1))(x, y)
    check_lib(lib, ga, np.ones((2, 4), np.float32) @ b.T, rtol=1e-5, atol=1e-8)
    lib_value(lib, gb, np.float32)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_einsum_keeps_numpy_dtype(lib, dtype):
    a = np.arange(12).reshape(3, 4).astype(dtype)
    b = np.arange(4 * 3).reshape(4, 3).astype(dtype) - 5
    for spec, ops in [("ij,jk->ik", (a, b)), ("ii->", (b[:3],)), ("ij->j", (a,)), ("ij,ji->", (a, b))]:
        check_lib(lib, ea.einsum(spec, *[lib.asarray(o) for o in ops]), np.einsum(spec, *ops))


def test_mixed_dtypes_promote_as_numpy(lib):
    a = random_operands([(2, 3)])[0].astype(np.float32)
    b = np.arange(6).reshape(3, 2)
    check_lib(
        lib, ea.einsum("ij,jk->ik", lib.asarray(a), lib.asarray(b)), np.einsum("ij,jk->ik", a, b), rtol=1e-6
    )


@pytest.mark.parametrize(
    "number", [np.float64(2.5), np.float32(2.5), np.int64(2), np.complex64(2 - 1j)], ids=repr
)
def test_a_numpy_scalar_operand_promotes_as_numpy(lib, number):
    """A numpy scalar among arrays of a library (first, in the middle, last; with two and
    with three operands): an array of that library, of the dtype numpy's einsum gives it
    (numpy scalars are not weak: a float64 one with float32 arrays gives float64).
    Reference: numpy.einsum.

    Kills: einsum _adopt 25 (the scalar cast to the arrays' dtype, not promoted with them)."""
    x = random_operands([(3,)], dtype=np.float32)[0]
    y = np.arange(3)  # int64
    cases = [
        (",i->i", (number, x)),
        ("i,->i", (x, number)),
        ("i,,i->i", (x, number, y)),
        ("i,i,->i", (y, y, number)),
    ]
    for spec, ops in cases:
        got = ea.einsum(spec, *[o if isinstance(o, np.generic) else lib.asarray(o) for o in ops])
        check_lib(lib, got, np.einsum(spec, *ops), rtol=1e-6)


def test_empty_operand_gives_zeros(lib):
    a, b = np.zeros((2, 0)), np.ones((0, 3))
    check_lib(lib, ea.einsum("ij,jk->ik", lib.asarray(a), lib.asarray(b)), np.zeros((2, 3)))


def test_jvp(lib):
    ops = random_operands([(2, 3), (3, 3), (3,)])
    tans = random_operands([(2, 3), (3, 3), (3,)], seed=7)
    f = lambda a, b, c: ea.einsum("ij,jj,j->i", a, b, c)
    want_v, want_t = ea.jvp(f, ops, tans)
    v, t = ea.jvp(f, [lib.asarray(o) for o in ops], [lib.asarray(t) for t in tans])
    check_lib(lib, v, want_v)
    check_lib(lib, t, want_t)


def test_jvp_with_a_tangent_traced_by_an_outer_grad(lib):
    """jvp inside grad, the tangent of y computed from the outer grad's variable s: the tangent
    terms are a plain array (x's) then a traced one (y's), summed with the traced term added on
    the left (array-api-strict's operators refuse a Tensor on their right). Closed form:
    d/ds of the tangent of x.y along (tx, s ty) is x.ty. Kills: _einsum_jvp 35"""
    x, y, tx, ty = random_operands([(3,)] * 4)
    xs, ys, txs, tys = (lib.asarray(v) for v in (x, y, tx, ty))
    tangent = lambda s: ea.jvp(lambda x, y: ea.einsum("i,i->", x, y), (xs, ys), (txs, s * tys))[1]
    check_lib(lib, ea.grad(tangent)(lib.asarray(2.0)), np.asarray(x @ ty))


def test_second_order(lib):
    # d/dy <grad_x f(x, y), w>: the inner gradient is a broadcast (a Spread) of y's row sums
    x, y, w = random_operands([(2, 3), (3, 3), (2, 3)])
    f = lambda x, y: ea.einsum("ij,jk->", x, y)
    h = lambda x, y, w: ea.grad(lambda y: ea.einsum("ij,ij->", ea.grad(f)(x, y), w))(y)
    check_lib(lib, h(*[lib.asarray(o) for o in (x, y, w)]), h(x, y, w))


# -- ea.jit --------------------------------------------------------------------------------------


def test_jit(lib):
    f = lambda a, b, c: ea.einsum("ij,jk,kk->ik", a, b, c)
    loss = lambda a, b, c, d: ea.einsum("ij,jk,kk,il->", a, b, c, d)
    ops = random_operands([(2, 3), (3, 3), (3, 3), (2, 4)])
    xs = [lib.asarray(o) for o in ops]
    check_lib(lib, compiled(ea.jit(f))(*xs[:3]), f(*ops[:3])._value)
    argnums = (0, 1, 2, 3)
    want = ea.grad(loss, argnums=argnums)(*ops)
    for got, w in zip(compiled(ea.jit(ea.grad(loss, argnums=argnums)))(*xs), want):
        check_lib(lib, got, w)
    # a Python number operand, traced weakly: float32 stays float32
    x = ops[0].astype(np.float32)
    scale = compiled(ea.jit(lambda x, s: ea.einsum(",ij->ij", s, x)))
    check_lib(lib, scale(lib.asarray(x), 2.0), 2 * x, rtol=1e-6)


def test_dask_is_never_computed():
    """A sliced gradient and a gradient written onto a diagonal build dask graphs, never run them."""

    lib = load("dask")
    if lib is None:
        pytest.skip("dask is not installed")
    from dask.callbacks import Callback

    computed = []
    ops = [lib.asarray(o) for o in random_operands([(3, 3, 4, 2), (3, 3, 4), (4, 3, 2), (2, 4, 2)])]
    f = lambda *xs: ea.einsum("aabc,ade,bdf,cef->", *xs, memory_limit=10)
    with Callback(start=computed.append):
        grads = ea.grad(f, argnums=(0, 1, 2, 3))(*ops)
        grads += ea.grad(lambda a, b: ea.einsum("iibc,ade->", a, b), argnums=(0, 1))(ops[0], ops[1])
        assert not computed, "einad computed a dask array"
        grads[0].compute()  # (the callback does see a compute)
    assert computed
    assert all(lib.owns(x) for x in grads)


def test_two_libraries_refused(lib):
    if lib.name == "numpy":
        pytest.skip("needs a second library")
    with pytest.raises(TypeError, match=r"numpy.*" + ("dask" if lib.name == "dask" else lib.name)):
        ea.einsum("i,i->", np.ones(3), lib.asarray(np.ones(3)))


def test_an_explicit_path_is_taken_without_opt_einsums_costing(monkeypatch):
    """An explicit path that fits its contraction is the plan as it is: opt_einsum's
    `contract_path` (which costs every step: a quarter of a second for a 1,000-tensor
    network's path) is not asked, and the path is what it would hand back. One that does not
    fit (a step past the operands, sizes that disagree) is still opt_einsum's to refuse."""
    import opt_einsum as oe

    from einad.rules import einsum as einsum_rules

    inputs, output = ("ab", "bc", "cd", "de"), "ae"
    shapes = ((2, 3), (3, 4), (4, 1), (5, 2))  # (d: size 1 next to 5, a broadcast)
    path = ((2, 3), (0, 1), (0, 1))
    expected, _ = oe.contract_path("ab,bc,cd,de->ae", *shapes, shapes=True, optimize=path)
    asked = []
    real = oe.contract_path
    monkeypatch.setattr(oe, "contract_path", lambda *a, **k: asked.append(a) or real(*a, **k))
    einsum_rules._path.cache_clear()
    assert einsum_rules._path(inputs, output, shapes, path, None) == tuple(map(tuple, expected))
    assert asked == []
    x = [np.random.default_rng(i).standard_normal(s) for i, s in enumerate(shapes)]
    np.testing.assert_allclose(
        ea.einsum("ab,bc,cd,de->ae", *x, optimize=list(path)), np.einsum("ab,bc,cd,de->ae", *x), rtol=1e-12
    )
    assert asked == []
    for bad_path, bad_shapes in [
        (((0, 4), (0, 1), (0, 1)), shapes),
        (path, ((2, 3), (3, 4), (3, 1), (5, 2))),
    ]:
        with pytest.raises((ea.EinsumError, IndexError)):
            einsum_rules._path(inputs, output, bad_shapes, bad_path, None)
    assert len(asked) == 2
    einsum_rules._path.cache_clear()


def test_a_letter_one_operand_has_is_summed_in_the_promoted_dtype():
    """numpy.einsum promotes its operands before it sums: a bool operand's own letter is summed
    as numbers (not or-ed), an int8's or a float16's without overflowing in its own dtype; in the
    value, a jitted value and the gradient (whose cotangent of one is left out of a contraction)."""
    a = np.array([[True, False], [True, True], [False, True]])
    b = np.array([0.5])
    np.testing.assert_array_equal(ea.einsum("fa,a", a, b).numpy(), np.einsum("fa,a", a, b))
    h = np.full((1000, 2), 100, np.float16)
    w = np.ones(2, np.float32)
    for spec in ("ae,e->e", "ae,f->ef"):
        ref = np.einsum(spec, h, w)
        np.testing.assert_allclose(ea.einsum(spec, h, w).numpy(), ref)
        np.testing.assert_allclose(ea.jit(lambda x, y, s=spec: ea.einsum(s, x, y))(h, w), ref)
    i8 = np.full((200, 2), 100, np.int8)
    np.testing.assert_array_equal(ea.einsum("ae,e->e", i8, w).numpy(), np.einsum("ae,e->e", i8, w))
    np.testing.assert_allclose(ea.grad(lambda y: ea.einsum("ae,e->", h, y))(w), [1e5, 1e5])


def test_operands_in_big_endian_byte_order():
    """A network of big-endian operands (as FITS files give) ran its products into buffers of
    that byte order, which numpy.dot's `out` refuses: numpy's traceback from inside, eager,
    under grad and under jit; now numpy's values, as for native operands."""
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(s) for s in ((3, 4), (4, 5), (5, 2))]
    big = [x.astype(">f8") for x in xs]
    f = lambda *a: ea.einsum("ij,jk,kl->il", *a)
    loss = lambda *a: ea.sum(ea.sin(f(*a)))
    np.testing.assert_allclose(f(*big).numpy(), xs[0] @ xs[1] @ xs[2], rtol=1e-12)
    want = ea.grad(loss, argnums=(0, 1, 2))(*xs)
    for got in (ea.grad(loss, argnums=(0, 1, 2))(*big), ea.jit(ea.grad(loss, argnums=(0, 1, 2)))(*big)):
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12)


def test_einsum_takes_jaxs_precision_and_preferred_element_type():
    """Code written for jnp.einsum passes precision= and preferred_element_type=; einad refused
    both. precision changes nothing (numpy computes at the operands' precision);
    preferred_element_type is the accumulation and result dtype, as JAX's (int8 products summed
    in int32 do not wrap; float32 operands give a float64 result, the gradient stays float32),
    in both einsum forms."""
    a = np.array([[100, 100], [1, 2]], dtype=np.int8)
    wide = ea.einsum("ij,jk->ik", a, a, preferred_element_type=np.int32)
    assert wide.dtype == np.int32
    np.testing.assert_array_equal(wide.numpy(), a.astype(np.int32) @ a.astype(np.int32))
    x = np.random.default_rng(3).standard_normal((3, 3)).astype(np.float32)
    for kwargs in ({"precision": "highest"}, {"precision": None}):
        np.testing.assert_array_equal(
            ea.einsum("ij,jk", x, x, **kwargs).numpy(), ea.einsum("ij,jk", x, x).numpy()
        )
    y = ea.einsum(x, [0, 1], x, [1, 2], preferred_element_type=np.float64)
    assert y.dtype == np.float64
    np.testing.assert_allclose(y.numpy(), x.astype(np.float64) @ x.astype(np.float64), rtol=1e-12)
    g = ea.grad(lambda x: ea.sum(ea.einsum("ij,jk->ik", x, x, preferred_element_type=np.float64)))(x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, x.sum(1)[None, :] + x.sum(0)[:, None], rtol=1e-5)  # d sum(x @ x) / dx
