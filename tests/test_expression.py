"""einad.expression: contract_expression with constants, as opt_einsum has it (constant operands
given as arrays in their shapes' places, the expression called with the others only), the steps
that read constants only contracted once when the expression is made, and the other operands
differentiable under every transformation (against JAX and central differences).

(The expression without constants, sliced or not, is tested in tests/test_slicing.py.)
"""

from itertools import combinations

import numpy as np
import opt_einsum as oe
import pytest

import einad as ea
from tests.support.numerics import assert_close

pytestmark = pytest.mark.usefixtures("jit_mode")  # each test eagerly and with every transformation jitted

NETWORKS = [
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ab,bc,cd,da->", [(2, 3), (3, 4), (4, 2), (2, 2)]),
    ("...ij,j,1k->...ik", [(2, 1, 3, 4), (4,), (5, 6)]),  # an ellipsis, a digit as a label
    ("ij,ij->ij", [(1, 3), (2, 3)]),  # a size-1 dimension broadcast (squeezed)
    ("ii,ij,jk->k", [(3, 3), (3, 4), (4, 2)]),  # a trace
    ("ab,bc,cd,de,ea->", [(2, 3), (3, 2), (2, 4), (4, 3), (3, 2)]),
]


def operands(shapes, seed=0, complex_=False):
    r = np.random.default_rng(seed)
    out = [r.standard_normal(s) for s in shapes]
    if complex_:
        out = [x + 1j * r.standard_normal(x.shape) for x in out]
    return out


def contractions(graph):
    """The pairwise contractions a program's einsums make (an einsum of k operands: k - 1; a
    whole network may be staged as one einsum that follows its path)."""
    return sum(len(eq.inputs) - 1 for eq in graph.equations if "einsum" in eq.op)


@pytest.mark.parametrize("k", range(len(NETWORKS)))
def test_constants_as_opt_einsum_for_every_subset(k):
    eq, shapes = NETWORKS[k]
    ops = operands(shapes, seed=k)
    n = len(ops)
    for m in range(n + 1):
        for consts in combinations(range(n), m):
            args = [ops[i] if i in consts else shapes[i] for i in range(n)]
            expr = ea.contract_expression(eq, *args, constants=list(consts))
            var = [ops[i] for i in range(n) if i not in consts]
            if var:
                ref = oe.contract_expression(eq, *args, constants=list(consts))(*var)
            else:  # opt_einsum's expression of constants only cannot be called; its contract can
                ref = oe.contract(eq, *ops)
            assert expr.constants == consts and expr.shapes == tuple(tuple(s) for s in shapes)
            assert_close(expr(*var).numpy(), ref)


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_the_other_operands_are_differentiable_as_jax(complex_):
    jax = pytest.importorskip("jax", reason="JAX is the gradients' reference")
    import jax.numpy as jnp

    eq = "ab,bc,cd,de,ea->"
    shapes = NETWORKS[-1][1]
    ops = operands(shapes, seed=5, complex_=complex_)
    expr = ea.contract_expression(eq, shapes[0], ops[1], ops[2], shapes[3], ops[4], constants=[1, 2, 4])
    f = lambda a, d: ea.abs(expr(a, d)) ** 2
    with jax.enable_x64(True):
        f_jax = lambda a, d: jnp.abs(jnp.einsum(eq, a, ops[1], ops[2], d, ops[4])) ** 2
        ref = jax.grad(f_jax, argnums=(0, 1))(ops[0], ops[3])
        _, ref_t = jax.jvp(f_jax, (ops[0], ops[3]), (ops[0][::-1], ops[3][::-1]))
    g = ea.grad(f, argnums=(0, 1))(ops[0], ops[3])
    for got, want in zip(g, ref):
        assert_close(got, np.asarray(want))
    _, t = ea.jvp(f, (ops[0], ops[3]), (ops[0][::-1], ops[3][::-1]))
    assert_close(t, np.asarray(ref_t))
    assert_close(ea.jit(ea.grad(f, argnums=1))(ops[0], ops[3]), np.asarray(ref[1]))


@pytest.mark.parametrize("complex_", [False, True], ids=["real", "complex"])
def test_the_other_operands_are_differentiable_by_central_differences(complex_):
    eq = "ab,bc,cd,de,ea->"
    shapes = NETWORKS[-1][1]
    ops = operands(shapes, seed=5, complex_=complex_)
    expr = ea.contract_expression(eq, shapes[0], ops[1], ops[2], shapes[3], ops[4], constants=[1, 2, 4])
    assert ea.gradcheck(lambda a, d: expr(a, d), ops[0], ops[3])  # reverse and forward mode
    assert ea.gradcheck(lambda a, d: ea.abs(expr(a, d)) ** 2, ops[0], ops[3])


def test_second_order_and_vmap_through_the_expression():
    eq, shapes = NETWORKS[0]
    a, b, c = operands(shapes, seed=2)
    expr = ea.contract_expression(eq, shapes[0], b, c, constants=[1, 2])
    bc = b @ c
    h = ea.hessian(lambda a: ea.sum(expr(a) ** 2))(a)
    want = 2 * np.einsum("ik,jl->ijkl", np.eye(2), bc @ bc.T)
    assert_close(h, want)
    batch = np.stack([a, 2 * a, -a])
    assert_close(ea.vmap(expr)(batch), np.einsum("nij,jl->nil", batch, bc))


def test_constant_steps_are_contracted_once_when_made():
    """The program of a call holds the constant part as one constant, contracted already: the
    call makes what is left (one pairwise contraction, where the whole chain takes two)."""
    eq, shapes = NETWORKS[0]
    a, b, c = operands(shapes, seed=3)
    expr = ea.contract_expression(eq, shapes[0], b, c, constants=[1, 2], optimize=[(1, 2), (0, 1)])
    graph = ea.make_graph(expr)(a)
    assert contractions(graph) == 1
    (folded,) = graph.const_values.values()
    assert_close(folded, b @ c)
    # and the gradient's program too reads it, never b and c
    grad_graph = ea.make_graph(ea.grad(lambda a: ea.sum(expr(a) ** 2)))(a)
    assert not {v.shape for v in grad_graph.const_values.values()} & {b.shape, c.shape}
    plain = ea.contract_expression(eq, *shapes, optimize=[(1, 2), (0, 1)])
    assert contractions(ea.make_graph(plain)(a, b, c)) == 2


def test_constant_subtrees_after_a_variable_step_are_folded_too():
    """opt_einsum folds the steps before the first one that reads a variable; einad folds
    every step that reads constants only, wherever it lies on the path."""
    eq = "ab,bc,cd,de->ae"
    shapes = [(2, 3), (3, 4), (4, 5), (5, 2)]
    a, b, c, d = operands(shapes, seed=4)
    path = [(0, 1), (0, 1), (0, 1)]  # a·b (variables), then c·d (constants), then the two
    expr = ea.contract_expression(eq, shapes[0], shapes[1], c, d, constants=[2, 3], optimize=path)
    assert expr.path == path
    graph = ea.make_graph(expr)(a, b)
    assert contractions(graph) == 2 and [v.shape for v in graph.const_values.values()] == [(4, 2)]
    assert_close(expr(a, b).numpy(), a @ b @ c @ d)


def test_a_constant_step_beyond_the_memory_limit_is_left_to_the_calls():
    x, y = operands([(6,), (7,)], seed=6)
    z = np.random.default_rng(7).standard_normal((6, 7))
    path = [(0, 1), (0, 1)]  # the outer product x⊗y first: 42 elements
    small = ea.contract_expression(
        "i,j,ij->", x, y, z.shape, constants=[0, 1], optimize=path, memory_limit=10
    )
    assert sorted(v.shape for v in ea.make_graph(small)(z).const_values.values()) == [(6,), (7,)]
    big = ea.contract_expression("i,j,ij->", x, y, z.shape, constants=[0, 1], optimize=path)
    assert [v.shape for v in ea.make_graph(big)(z).const_values.values()] == [(6, 7)]
    for expr in (small, big):
        assert_close(expr(z).numpy(), x @ z @ y)
        assert_close(ea.grad(expr)(z), np.outer(x, y))


def test_sliced_expression_with_constants():
    eq = "ab,bc,cd,da->"
    shapes = [(4, 4)] * 4
    ops = operands(shapes, seed=8)
    expr = ea.contract_expression(eq, shapes[0], ops[1], shapes[2], ops[3], constants=[1, 3], memory_limit=8)
    assert expr.sliced_indices
    assert_close(expr(ops[0], ops[2]).numpy(), np.einsum(eq, *ops))
    assert_close(ea.grad(expr)(ops[0], ops[2]), np.einsum("bc,cd,da->ab", *ops[1:]))


def test_all_constants_and_the_interleaved_form():
    eq, shapes = NETWORKS[0]
    a, b, c = operands(shapes, seed=9)
    whole = ea.contract_expression(eq, a, b, c, constants=[0, 1, 2])
    assert_close(whole().numpy(), a @ b @ c)
    mine = ea.contract_expression(
        a, ["i", "j"], shapes[1], ["j", "k"], c, ["k", "l"], ["l", "i"], constants=[0, 2]
    )
    ref = oe.contract_expression(a, [0, 1], shapes[1], [1, 2], c, [2, 3], [3, 0], constants=[0, 2])
    assert_close(mine(b).numpy(), ref(b))


def test_the_expression_keeps_its_constants():
    """Constants are taken when the expression is made: a later change to the array given
    reaches neither a folded step nor a constant kept whole; the user's array is not written."""
    eq, shapes = NETWORKS[0]
    a, b, c = operands(shapes, seed=10)
    keep = (b.copy(), c.copy())
    folded = ea.contract_expression(eq, shapes[0], b, c, constants=[1, 2], optimize=[(1, 2), (0, 1)])
    whole = ea.contract_expression(eq, shapes[0], b, shapes[2], constants=[1], optimize=[(0, 1), (0, 1)])
    before = (folded(a).numpy(), whole(a, c).numpy())
    np.testing.assert_array_equal(b, keep[0])
    b += 1.0
    assert_close(folded(a).numpy(), before[0])
    assert_close(whole(a, c).numpy(), before[1])


def test_bad_constants_and_calls_are_refused():
    eq, shapes = NETWORKS[0]
    a, b, c = operands(shapes, seed=11)
    with pytest.raises(ea.EinsumError, match="position 3"):
        ea.contract_expression(eq, shapes[0], b, shapes[2], constants=[3])
    with pytest.raises(ea.EinsumError, match="twice"):
        ea.contract_expression(eq, shapes[0], b, shapes[2], constants=[1, 1])
    with pytest.raises(TypeError, match="position"):
        ea.contract_expression(eq, shapes[0], b, shapes[2], constants=["b"])
    with pytest.raises(TypeError, match="list of operand positions"):
        ea.contract_expression(eq, shapes[0], b, shapes[2], constants=1)
    with pytest.raises(ea.EinsumError, match="does not match|has size|dimension"):
        ea.contract_expression(eq, shapes[0], np.ones((5, 4)), shapes[2], constants=[1])
    expr = ea.contract_expression(eq, shapes[0], b, shapes[2], constants=[1])
    with pytest.raises(
        ea.EinsumError, match=r"2 operand\(s\) besides the constants at positions \[1\], got 3"
    ):
        expr(a, b, c)
    with pytest.raises(ea.EinsumError, match="operand 2 has shape"):
        expr(a, np.ones((3, 3)))


def test_an_array_given_for_a_shape_is_a_type_error_that_says_what_to_pass():
    a, b = np.ones((2, 3)), np.ones((3, 4))
    # (opt_einsum's own: "only 0-dimensional arrays can be converted to Python scalars")
    with pytest.raises(
        TypeError,
        match=r"operand 0 is an array of shape \(2, 3\): pass its shape, or name it in constants=\[0\]",
    ):
        ea.contract_expression("ij,jk->ik", a, b.shape)
    with pytest.raises(TypeError, match="operand 1's shape must be a sequence of ints, got None"):
        ea.contract_expression("ij,jk->ik", a.shape, None)
    expr = ea.contract_expression("ij,jk->ik", (np.int64(2), 3), [3, 4])  # numpy ints and lists are shapes
    np.testing.assert_array_equal(expr(a, b), a @ b)


def test_a_shape_with_a_fractional_or_negative_dimension_is_refused_not_truncated():
    # numpy's np.empty((3, 4.5)) is a TypeError and np.empty((3, -4)) a ValueError; einad
    # truncated 4.5 to 4 and planned -4 (negative FLOP counts in contract_path's report)
    with pytest.raises(TypeError, match="operand 0's shape must be a sequence of ints"):
        ea.contract_expression("ij,jk->ik", (3, 4.5), (4, 5))
    with pytest.raises(TypeError, match="operand 1's shape must be a sequence of ints"):
        ea.contract_path("ij,jk->ik", (3, 4), (4.0, 5), shapes=True)
    with pytest.raises(TypeError, match="operand 0's shape must be a sequence of ints"):
        ea.contract_expression("ij,jk->ik", "34", (4, 5))
    with pytest.raises(ea.EinsumError, match=r"operand 0's shape \(3, -4\) has a negative dimension"):
        ea.contract_expression("ij,jk->ik", (3, -4), (-4, 5))
    with pytest.raises(ea.EinsumError, match="has a negative dimension"):
        ea.contract_path("ij,jk->ik", (3, -4), (-4, 5), shapes=True, memory_limit=2)
    path, info = ea.contract_path("ij,jk->ik", (np.int64(3), 0), [0, 5], shapes=True)  # zero is a size
    assert path == [(0, 1)] and info.opt_cost >= 0


@pytest.mark.parametrize(
    ("number", "other"), [(2.0, np.float32), (3, np.float32), (1j, np.float32), (3, np.int16)]
)
def test_a_python_number_constant_is_weak_as_in_einsum(number, other):
    # einsum(",ij->ij", 2.0, a32) is float32 (numpy's promotion of a Python number); the same
    # number held as a constant gave float64 (it was made a 0-d float64 array)
    a = np.arange(12).reshape(3, 4).astype(other)
    want = np.result_type(number, a.dtype)
    expr = ea.contract_expression(",ij->ij", number, a.shape, constants=[0])
    assert np.asarray(expr(a)).dtype == want == np.asarray(ea.einsum(",ij->ij", number, a)).dtype
    assert_close(expr(a), number * a)
    b = np.ones((4, 2), other)  # folded with a constant array when the expression is made
    expr = ea.contract_expression(
        ",ij,jk->ik", number, a.shape, b, constants=[0, 2], optimize=[(0, 2), (0, 1)]
    )
    assert np.asarray(expr(a)).dtype == want
    assert_close(expr(a), number * a @ b)
    assert np.asarray(ea.contract_expression(",ij->ij", number, a, constants=[0, 1])()).dtype == want
