"""The Einsum primitive: numpy's whole grammar, values and derivatives.

Values are compared with numpy.einsum. Gradients are compared with closed forms
or with float64 central differences of numpy.einsum itself, so a test never
trusts einad to check einad.
"""

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close, check_op, numeric_grad, numeric_vjp, reference_einsum

pytestmark = pytest.mark.usefixtures("jit_mode")


def _operands(shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in shapes]


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


@pytest.mark.parametrize("name", sorted(GRAMMAR))
def test_einsum_grammar(name):
    spec, shapes = GRAMMAR[name]
    check_einsum(spec, *_operands(shapes))


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


@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_einsum_interleaved_form(name):
    f, spec, shapes = INTERLEAVED[name]
    check_einsum(spec, *_operands(shapes), f=f)


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
    a, b = _operands([(2, 3, 4), (4, 3)])
    args = [a, sublists[0], b, sublists[1], *sublists[2:]]
    expected = np.einsum(*args)
    out = ea.einsum(*args)
    assert out.shape == expected.shape
    assert_close(out.numpy(), expected)


def test_einsum_optimize_and_memory_limit_apply_to_the_interleaved_form():
    a, b, c = _operands([(2, 3), (3, 4), (4, 2)])
    for optimize in ("greedy", "optimal", [(1, 2), (0, 1)], False):
        check_einsum(
            "ij,jk,kl->il",
            a,
            b,
            c,
            f=lambda a, b, c, o=optimize: ea.einsum(a, [0, 1], b, [1, 2], c, [2, 3], [0, 3], optimize=o),
        )


def test_gradient_program_keeps_the_users_unicode_letters():
    a, b = _operands([(2, 3), (3, 4)])
    graph = ea.make_graph(ea.grad(lambda a, b: ea.sum(ea.einsum("αβ,βγ->αγ", a, b) ** 2), (0, 1)))(a, b)
    assert "einsum[αβ,βγ->αγ]" in str(graph)
    assert any(s.endswith("->αβ") for s in graph.einsums), graph.einsums
    assert any(s.endswith("->βγ") for s in graph.einsums), graph.einsums
    graph = ea.make_graph(lambda a, b: ea.einsum(a, ["i", "j"], b, ["j", "k"]))(a, b)
    assert graph.einsums == ["ij,jk->ik"]  # one-letter labels are the letters the listing shows


def test_implicit_output_puts_upper_case_before_lower_case():
    x = np.arange(6.0).reshape(2, 3)
    out = ea.einsum("bA", x)  # implicit output "Ab": the transpose
    assert out.shape == (3, 2)
    assert_close(out.numpy(), x.T)
    a, b = _operands([(2, 3, 4), (4, 5)])
    out = ea.einsum("aCd,dB", a, b)  # output "BCa"
    assert out.shape == (5, 3, 2)
    assert_close(out.numpy(), np.einsum("aCd,dB->BCa", a, b))


def test_implicit_output_sorts_letters_and_puts_ellipsis_first():
    a, b = _operands([(5, 2, 3), (3, 4)])
    out = ea.einsum("...ji,ik", a, b)  # output: the ellipsis, then "jk"
    assert out.shape == (5, 2, 4)
    assert_close(out.numpy(), np.einsum("...ji,ik->...jk", a, b))
    out = ea.einsum("...kj", np.ones((5, 2, 3)))  # sorted letters: "...jk"
    assert out.shape == (5, 3, 2)


def test_einsum_accepts_tensors_and_mixed_operands():
    a, b = _operands([(2, 3), (3, 4)])
    out = ea.einsum("ij,jk->ik", ea.tensor(a), b)
    assert_close(out.numpy(), a @ b)
    ga = ea.grad(lambda a: ea.sum(ea.einsum("ij,jk->ik", a, ea.tensor(b))))(a)
    assert_close(ga, np.ones((2, 4)) @ b.T)


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


def test_einsum_keeps_float32():
    a, b = (x.astype(np.float32) for x in _operands([(2, 3), (3, 4)]))
    assert ea.einsum("ij,jk->ik", a, b).dtype == np.float32
    ga, gb = ea.grad(lambda a, b: ea.sum(ea.einsum("ij,jk->ik", a, b)), (0, 1))(a, b)
    assert ga.dtype == np.float32 and gb.dtype == np.float32
    assert_close(ga, np.ones((2, 4), np.float32) @ b.T, rtol=1e-5)


def test_einsum_of_complex_operands_matches_numpy():
    a, b = _operands([(2, 3), (3, 4)])
    c = a + 1j * a[::-1]
    out = ea.einsum("ij,jk->ik", c, b)
    assert out.dtype == np.complex128
    assert_close(out.numpy(), c @ b)


# -- the cases known to break other engines ------------------------------------------------------


def test_trace_ii_to_scalar():
    (x,) = _operands([(3, 3)])
    assert_close(ea.einsum("ii->", x).numpy(), np.trace(x))
    g = ea.grad(lambda x: ea.einsum("ii->", x))(x)
    assert_close(g, np.eye(3))
    check_einsum("ii->", x)


def test_nd_nn_to_d():
    a, b = _operands([(3, 2), (3, 3)])
    u = np.array([0.5, -2.0])
    _, pullback = ea.vjp(lambda a, b: ea.einsum("nd,nn->d", a, b), a, b)
    ga, gb = pullback(u)
    assert_close(ga, np.outer(np.diag(b), u))
    assert_close(gb, np.diag(a @ u))  # on the diagonal, zero elsewhere
    check_einsum("nd,nn->d", a, b)


def test_iij_to_ij():
    (x,) = _operands([(2, 2, 3)])
    u = np.arange(6.0).reshape(2, 3) + 1
    _, pullback = ea.vjp(lambda x: ea.einsum("iij->ij", x), x)
    (g,) = pullback(u)
    expected = np.zeros((2, 2, 3))
    for i in range(2):
        expected[i, i] = u[i]
    assert_close(g, expected)
    check_einsum("iij->ij", x)


def test_iij_to_i():
    (x,) = _operands([(2, 2, 3)])
    u = np.array([2.0, -3.0])
    _, pullback = ea.vjp(lambda x: ea.einsum("iij->i", x), x)
    (g,) = pullback(u)
    expected = np.zeros((2, 2, 3))
    for i in range(2):
        expected[i, i, :] = u[i]
    assert_close(g, expected)
    check_einsum("iij->i", x)


def test_iji_to_j():
    (x,) = _operands([(2, 3, 2)])
    u = np.array([1.0, -2.0, 3.0])
    _, pullback = ea.vjp(lambda x: ea.einsum("iji->j", x), x)
    (g,) = pullback(u)
    expected = np.zeros((2, 3, 2))
    for i in range(2):
        expected[i, :, i] = u
    assert_close(g, expected)
    check_einsum("iji->j", x)


def test_i_ellipsis_to_ellipsis():
    (x,) = _operands([(2, 3, 4)])
    u = np.arange(12.0).reshape(3, 4)
    _, pullback = ea.vjp(lambda x: ea.einsum("i...->...", x), x)
    (g,) = pullback(u)
    assert_close(g, np.broadcast_to(u, (2, 3, 4)))
    check_einsum("i...->...", x)


def test_outer_i_j_to_ij():
    a, b = _operands([(2,), (3,)])
    u = np.arange(6.0).reshape(2, 3)
    _, pullback = ea.vjp(lambda a, b: ea.einsum("i,j->ij", a, b), a, b)
    ga, gb = pullback(u)
    assert_close(ga, u @ b)
    assert_close(gb, u.T @ a)
    check_einsum("i,j->ij", a, b)


def test_same_tensor_twice_ij_ji():
    (x,) = _operands([(3, 3)])
    assert_close(ea.einsum("ij,ji->", x, x).numpy(), np.trace(x @ x))
    g = ea.grad(lambda x: ea.einsum("ij,ji->", x, x))(x)
    assert_close(g, 2 * x.T)  # both contributions add


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
    (x,) = _operands([(3, 3)]) if "j" in spec else _operands([(4,)])
    n = spec.split("->")[0].count(",") + 1
    assert_close(ea.einsum(spec, *[x] * n).numpy(), np.einsum(spec, *[x] * n))
    g = ea.grad(lambda x: ea.einsum(spec, *[x] * n))(x)
    assert_close(g, expected_grad(x))
    assert_close(g, numeric_grad(lambda x: np.einsum(spec, *[x] * n), x))


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


@pytest.mark.parametrize("shapes", [[(1, 2, 3), (4, 3)], [(4, 2, 3), (1, 3)], [(1, 2, 3), (1, 3)]])
def test_batched_matvec_with_a_size_one_batch(shapes):
    a, b = _operands(shapes)
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
    check_einsum(CHAIN, *_operands(CHAIN_SHAPES), optimize=optimize)


@pytest.mark.parametrize("memory_limit", [None, 1, 8, 1000, "max_input"])
def test_memory_limit(memory_limit):
    check_einsum(CHAIN, *_operands(CHAIN_SHAPES), memory_limit=memory_limit)


def test_optimize_with_repeated_and_broadcast_indices():
    a, b, c = _operands([(2, 2, 3), (1, 3), (3, 4)])
    for optimize in ("greedy", "optimal", [(1, 2), (0, 1)], False):
        check_einsum("iij,kj,jl->il", a, b, c, optimize=optimize)


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


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
def test_matmul(shapes):
    a, b = _operands(shapes)
    check_op(ea.matmul, np.matmul, a, b)


@pytest.mark.parametrize("shapes", MATMUL_SHAPES[:7], ids=str)
def test_matmul_operator(shapes):
    a, b = _operands(shapes)
    check_op(lambda a, b: a @ b, np.matmul, a, b)  # Tensor @ Tensor inside vjp
    check_op(lambda a: a @ b, lambda a: a @ b, a)  # Tensor @ ndarray
    check_op(lambda b: a @ b, lambda b: a @ b, b)  # ndarray @ Tensor
    out = ea.tensor(a) @ ea.tensor(b)
    assert isinstance(out, ea.Tensor)
    assert_close(out.numpy(), a @ b)


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
    a, b = _operands(shapes)
    check_op(ea.dot, np.dot, a, b)


@pytest.mark.parametrize(
    "shapes", [((), (3,)), ((3,), (3,)), ((2, 3), (3,)), ((2, 3), (4, 3)), ((2, 3, 4), (5, 4))], ids=str
)
def test_inner(shapes):
    a, b = _operands(shapes)
    check_op(ea.inner, np.inner, a, b)


@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 3), (4,)), ((), (3,))], ids=str)
def test_outer(shapes):
    a, b = _operands(shapes)
    check_op(ea.outer, np.outer, a, b)


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
    a, b = _operands(shapes)
    check_op(lambda a, b: ea.tensordot(a, b, axes), lambda a, b: np.tensordot(a, b, axes), a, b)


def test_tensordot_default_axes_is_two():
    a, b = _operands([(2, 3, 4), (3, 4, 5)])
    check_op(ea.tensordot, np.tensordot, a, b)


@pytest.mark.parametrize("axes", [None, (1, 0, 2), (2, 0, 1), (-1, 0, 1)], ids=str)
def test_transpose(axes):
    (x,) = _operands([(2, 3, 4)])
    check_op(lambda x: ea.transpose(x, axes), lambda x: np.transpose(x, axes), x)


def test_transpose_method_and_T():
    (x,) = _operands([(2, 3, 4)])
    check_op(lambda x: x.T, lambda x: x.T, x)
    check_op(lambda x: x.transpose(), lambda x: x.transpose(), x)
    check_op(lambda x: x.transpose(1, 0, 2), lambda x: x.transpose(1, 0, 2), x)
    check_op(lambda x: x.transpose((2, 0, 1)), lambda x: x.transpose((2, 0, 1)), x)
    assert_close(ea.tensor(x).T.numpy(), x.T)


DIAG_CASES = [
    ((3, 3), {}),
    ((3, 4), {}),
    ((4, 3), {}),
    ((3, 3), {"offset": 1}),
    ((3, 3), {"offset": -1}),
    ((3, 4), {"offset": 2}),
    ((3, 4), {"offset": -2}),
    ((3, 3), {"offset": 5}),
    ((3, 3, 3), {"axis1": 1, "axis2": 2}),
    ((3, 2, 3), {"axis1": 0, "axis2": 2}),
    ((3, 2, 4), {"axis1": 2, "axis2": 0, "offset": 1}),
    ((3, 4, 3), {"axis1": -1, "axis2": -3, "offset": -1}),
]


@pytest.mark.parametrize("shape, kwargs", DIAG_CASES, ids=str)
def test_trace(shape, kwargs):
    (x,) = _operands([shape])
    check_op(lambda x: ea.trace(x, **kwargs), lambda x: np.trace(x, **kwargs), x)


@pytest.mark.parametrize("shape, kwargs", DIAG_CASES, ids=str)
def test_diagonal(shape, kwargs):
    (x,) = _operands([shape])
    check_op(lambda x: ea.diagonal(x, **kwargs), lambda x: np.diagonal(x, **kwargs), x)


def test_trace_gradient_is_the_identity():
    (x,) = _operands([(4, 4)])
    assert_close(ea.grad(ea.trace)(x), np.eye(4))
    assert_close(ea.grad(lambda x: ea.trace(x, offset=1))(x), np.eye(4, k=1))


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
    (x,) = _operands([(2, 3, 4)])
    check_op(lambda x: ea.sum(x, **kwargs), lambda x: np.sum(x, **kwargs), x)
    check_op(lambda x: x.sum(**kwargs), lambda x: np.sum(x, **kwargs), x)


def test_sum_gradient_is_ones_broadcast():
    (x,) = _operands([(2, 3)])
    assert_close(ea.grad(ea.sum)(x), np.ones((2, 3)))
    assert_close(
        ea.grad(lambda x: ea.sum(ea.sum(x, axis=0) * np.array([1.0, 2.0, 3.0])))(x),
        np.tile([1.0, 2.0, 3.0], (2, 1)),
    )


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


def test_hessian_through_einsum():
    (a,) = _operands([(2, 3)])
    f = lambda a: ea.sum(ea.einsum("ij,jk->ik", a, a.T) ** 2)
    closed_grad = lambda a: 4 * (a @ a.T) @ a
    assert_close(ea.grad(f)(a), closed_grad(a))
    expected = _numeric_jacobian(closed_grad, a)
    assert_close(ea.hessian(f)(a), expected, rtol=1e-5, atol=1e-6)
    assert_close(ea.jacrev(ea.grad(f))(a), expected, rtol=1e-5, atol=1e-6)
    v = np.random.default_rng(2).standard_normal(a.shape)
    hv = ea.grad(lambda a: ea.sum(ea.grad(f)(a) * v))(a)
    assert_close(hv, np.einsum("ijkl,kl->ij", expected, v), rtol=1e-5, atol=1e-6)


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
    (x,) = _operands([shape])
    f = lambda x: ea.sum(ea.sin(ea.einsum(spec, *operands(x))))
    ref = lambda x: np.sum(np.sin(np.einsum(spec, *operands(x))))
    g = ea.grad(f)
    assert_close(g(x), numeric_grad(ref, x))
    assert_close(ea.jacrev(g)(x), _numeric_jacobian(g, x), rtol=1e-5, atol=1e-6)
