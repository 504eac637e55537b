"""einad.transforms.passes, the optimization passes on programs: each pass's before/after
listing, its values, its savings.

Every pass is checked three ways: its listing (or op counts) before and after
on a small program, ``run_graph`` of the result against ``run_graph`` of the
original on random inputs, and a count that fails if the pass did nothing
(or, for `optimize`, if that pass were left out of the pipeline).
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections import Counter

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einad as ea
from einad.program import Equation, Graph, Lit, run_graph, stage
from einad.pytree import tree_flatten
from einad.rules.einsum import einsum_p, path_flops, spread_p
from einad.rules.elementwise import PRIMITIVES
from einad.rules.shape import reshape_p
from einad.rules.structural import where_p
from einad.transforms import passes
from tests.support.jitting import compiled
from tests.support.numerics import peak_bytes
from tests.support.strategies import einsum_specs

RNG = np.random.default_rng(11)


# -- helpers ---------------------------------------------------------------------------------------


def ops(graph):
    """How many equations of each primitive the program has."""
    return Counter(e.op for e in graph.equations)


def random_args(graph, rng=RNG):
    return [rng.standard_normal(graph.avals[n][0]).astype(graph.avals[n][1]) for n in graph.input_names]


def assert_types_hold(graph, args):
    """Every equation's value has the shape and dtype its listing says."""
    env = dict(graph.const_values)
    env.update(zip(graph.input_names, args))
    for e in graph.equations:
        v = e.prim.impl(*[a.value if isinstance(a, Lit) else env[a] for a in e.inputs], **e.params)
        assert (np.shape(v), np.asarray(v).dtype) == (e.shape, e.dtype), str(e)
        env[e.output] = v


def assert_same_values(original, optimized, args=None, rtol=1e-10, atol=1e-12):
    """The optimized program computes what the original does, with the same inputs and output types."""
    args = random_args(original) if args is None else args
    assert_types_hold(optimized, args)
    assert optimized.inputs == original.inputs
    assert len(optimized.outputs) == len(original.outputs)
    expected, got = run_graph(original, args), run_graph(optimized, args)
    for e, g in zip(expected, got):
        assert np.shape(g) == np.shape(e)
        assert np.asarray(g).dtype == np.asarray(e).dtype
        np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)


def unchanged_by(pass_, graph):
    """Run `pass_` and check it left its argument alone (passes are pure)."""
    before = (str(graph), [list(e.inputs) for e in graph.equations], dict(graph.const_values))
    out = pass_(graph)
    assert (str(graph), [list(e.inputs) for e in graph.equations]) == before[:2]
    assert graph.const_values.keys() == before[2].keys()
    return out


def build(inputs, equations, outputs, consts=None):
    """A hand-written program: ``inputs`` {name: example array}, equations ``(out, prim, params, operands)``.

    Shapes and dtypes come from running each primitive on the examples.
    """
    consts = consts or {}
    env = {**inputs, **consts}
    avals = {n: (np.shape(v), np.asarray(v).dtype) for n, v in env.items()}
    eqs = []
    for out, prim, params, operands in equations:
        value = np.asarray(
            prim.impl(*[a.value if isinstance(a, Lit) else env[a] for a in operands], **params)
        )
        env[out] = value
        avals[out] = (value.shape, value.dtype)
        eqs.append(Equation(prim, params, list(operands), out, value.shape, value.dtype))

    def typ(n):
        return Equation(spread_p, {}, [], n, *avals[n]).type

    return Graph(
        inputs=[(n, typ(n)) for n in inputs],
        consts=[(n, typ(n)) for n in consts],
        equations=eqs,
        outputs=list(outputs),
        const_values=dict(consts),
        avals=avals,
    )


def body(graph):
    """The listing's equation lines, without the header and the outputs."""
    return [line.strip() for line in str(graph).splitlines()[1:-1]]


# -- the motivating programs -----------------------------------------------------------------------

A44 = RNG.standard_normal((4, 4))
X = RNG.standard_normal((6, 3))
Y = np.sign(RNG.standard_normal(6))
NET_SHAPES = [(3, 4), (4, 5), (5, 2), (2, 3), (3, 3)]


def trace_loss(a):
    return ea.trace(a) + ea.sum(ea.diagonal(a) ** 2)


def logistic(w):
    return ea.mean(ea.softplus(-Y * (X @ w)))


def net(a, b, c, d, e):
    """A five-operand ring written as its pairwise steps (opt_einsum's order), so that its
    programs have one einsum per step for the passes to merge (a single einsum of the five
    operands is one tree node, which the passes leave whole)."""
    jl = ea.einsum("jk,kl->jl", b, c)
    il = ea.einsum("ij,jl->il", a, jl)
    li = ea.einsum("lm,mi->li", d, e)
    return ea.einsum("il,li->", il, li)


def trace_grad_graph():
    return ea.make_graph(ea.grad(trace_loss))(A44)


def two_grads_graph():
    """grad(trace) + grad(Σ diag²): one reverse pass each, so two dense spreads onto the
    diagonal and a dense add (inside one pass, the reverse pass already sums the two
    cotangents small: see tests/test_structured_cotangents.py)."""
    return ea.make_graph(lambda a: ea.grad(ea.trace)(a) + ea.grad(lambda a: ea.sum(ea.diagonal(a) ** 2))(a))(
        A44
    )


def hvp_graph(mode="fwd-over-rev"):
    w = RNG.standard_normal(3)
    return ea.make_graph(lambda w, v: ea.hvp(logistic, (w,), (v,), mode=mode)[0])(w, w)


def net_grad_graph():
    return ea.make_graph(ea.grad(net, argnums=(0, 1, 2, 3, 4)))(*[np.ones(s) for s in NET_SHAPES])


# -- dce -------------------------------------------------------------------------------------------


def test_dce_drops_the_primal_of_a_gradient_program():
    """Once the seed is a literal (`simplify`), nothing reads the loss value: it is dead."""
    g = passes.simplify(ea.make_graph(ea.grad(lambda x: ea.sum(ea.tanh(x) ** 2)))(np.ones(3)))
    assert body(g) == [
        "b:f64[3] = tanh a",
        "c:f64[3] = power b 2",
        "d:f64[] = einsum[a->] c",
        "f:f64[3] = spread[src=, dst=a, shape=(3,)] 1.0",
        "g:f64[3] = multiply 2 b",
        "i:f64[3] = multiply b b",
        "j:f64[3] = subtract 1 i",
        "k:f64[3] = multiply g j",
    ]
    out = unchanged_by(passes.dce, g)
    assert body(out) == [
        "b:f64[3] = tanh a",
        "g:f64[3] = multiply 2 b",
        "i:f64[3] = multiply b b",
        "j:f64[3] = subtract 1 i",
        "k:f64[3] = multiply g j",
    ]
    assert_same_values(g, out)


def test_dce_drops_the_primal_gradient_of_forward_over_reverse_hvp():
    """jvp(grad f) computes f, grad f and the tangent of grad f; only the last is returned.
    The gradient's last contraction (X^T g) is not even staged: hvp takes only the tangent of
    that pending contraction (`einsum.Pending`); dce drops the rest of the primal's work."""
    g = hvp_graph()
    out = unchanged_by(passes.dce, g)
    assert len(g.equations) == 23 and len(out.equations) == 17
    assert ops(g)["einsum"] == 5 and ops(out)["einsum"] == 4  # d loss (a sum)
    assert ops(passes.dce(passes.simplify(g)))["softplus"] == 0  # the loss, once the seed is 1.0
    assert_same_values(g, out)


def test_dce_keeps_every_input_and_drops_unread_constants():
    k = np.arange(3.0)
    g = ea.make_graph(lambda x, y: (ea.sum(x * k), ea.exp(y))[1])(np.ones(3), np.ones(2))
    assert [n for n, _ in g.consts] == ["k0"] and len(g.equations) == 3
    out = passes.dce(g)
    assert out.inputs == g.inputs and out.consts == [] and out.const_values == {}
    assert body(out) == ["e:f64[2] = exp b"]
    assert set(out.avals) == {"a", "b", "e"}
    assert_same_values(g, out)


# -- cse -------------------------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # (the test divides by 0)
def test_cse_keeps_the_users_warning_where_a_derivative_rule_computed_the_same_step():
    # log's derivative rule computes 1 / y (quietly); the user's own 1 / x warns, as without jit
    x = np.array([0.0, 1.0, 2.0])
    f = lambda x: ea.grad(lambda y: ea.sum(ea.log(y)))(x) + 1 / x
    g = ea.make_graph(f)(x)
    out = passes.cse(g)
    assert ops(out)["divide"] == 1
    assert not next(e for e in out.equations if e.op == "divide").quiet
    for backend in ("numpy", "llvm"):
        jf = ea.jit(f, backend=backend)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            jf(x)
        with pytest.warns(RuntimeWarning, match="divide by zero"):
            jf(x)


def test_cse_computes_a_repeated_subexpression_once():
    g = ea.make_graph(ea.grad(lambda x: ea.sum(ea.sigmoid(x) * ea.sigmoid(x))))(np.ones(4))
    assert ops(g)["sigmoid"] == 2 and len(g.equations) == 15
    out = unchanged_by(passes.cse, g)
    assert body(out) == [
        "b:f64[4] = sigmoid a",
        "d:f64[4] = multiply b b",
        "e:f64[] = einsum[a->] d",
        "f:f64[] = ones_like e",
        "g:f64[4] = spread[src=, dst=a, shape=(4,)] f",
        "h:f64[4] = multiply g b",
        "j:f64[4] = subtract 1 b",
        "k:f64[4] = multiply b j",
        "l:f64[4] = multiply h k",
        "p:f64[4] = add l l",  # the two product-rule terms were the same expression
    ]
    assert_same_values(g, out)


def test_cse_compares_index_arrays_by_value_and_literals_by_type():
    f = lambda x: (
        x[np.array([0, 2])] + x[np.array([0, 2])] * x[np.array([1, 2])] + (x[1:] * 2) * (x[1:] * 2.0)
    )
    g = ea.make_graph(f)(np.arange(3.0))
    out = passes.cse(g)
    assert ops(g)["getitem"] == 5 and ops(out)["getitem"] == 3  # [0, 2] twice, [1, 2], and 1: once
    assert ops(g)["multiply"] == 4 and ops(out)["multiply"] == 4  # 2 and 2.0 are different literals
    assert_same_values(g, out)


def test_cse_sorts_the_operands_of_commutative_ops_only():
    x, y = np.ones(3), np.ones(3)
    g = build(
        {"a": x, "b": y},
        [
            ("c", PRIMITIVES["multiply"], {}, ["a", "b"]),
            ("d", PRIMITIVES["multiply"], {}, ["b", "a"]),
            ("e", PRIMITIVES["subtract"], {}, ["a", "b"]),
            ("f", PRIMITIVES["subtract"], {}, ["b", "a"]),
            ("g", PRIMITIVES["add"], {}, ["c", "d"]),
            ("h", PRIMITIVES["add"], {}, ["e", "f"]),
        ],
        ["g", "h"],
    )
    out = passes.cse(g)
    assert body(out) == [
        "c:f64[3] = multiply a b",
        "e:f64[3] = subtract a b",
        "f:f64[3] = subtract b a",
        "g:f64[3] = add c c",
        "h:f64[3] = add e f",
    ]
    assert_same_values(g, out)


def test_cse_stores_equal_constants_once():
    k1, k2 = np.arange(3.0), np.arange(3.0)
    g = ea.make_graph(lambda x: ea.exp(x * k1) + ea.exp(x * k2) + x * np.arange(3, dtype=np.float32))(
        np.ones(3)
    )
    assert len(g.consts) == 3
    out = passes.cse(g)
    assert [n for n, _ in out.consts] == ["k0", "k2"]  # the float32 copy stays apart
    assert ops(out)["exp"] == 1
    assert_same_values(g, out)


def test_params_key_tells_apart_what_numpy_tells_apart():
    key = passes.params_key
    assert key({"index": (slice(1, None), np.array([0, 2]))}) == key(
        {"index": (slice(1, None), np.array([0, 2]))}
    )
    assert key(np.array([0, 2])) != key(np.array([0, 2], dtype=np.int32))
    assert key(np.array([True, False])) != key(np.array([1, 0]))
    assert key(np.array([[0, 1]])) != key(np.array([0, 1]))
    assert key(True) != key(1) and key(0.0) != key(-0.0) and key(float("nan")) == key(float("nan"))
    assert key(np.dtype("float32")) != key(np.dtype("float64"))
    assert key((1,)) != key([1]) and key(slice(None)) != key(None)
    obj = object()
    assert key(obj) == key(obj) and key(obj) != key(object())


# -- simplify --------------------------------------------------------------------------------------


def test_simplify_removes_the_seed_of_ones():
    """The seed ones_like(loss), broadcast to the loss's operand, multiplies by one."""
    g = ea.make_graph(ea.grad(lambda x: ea.sum(ea.tanh(x) ** 2)))(np.ones(3))
    assert body(g) == [
        "b:f64[3] = tanh a",
        "c:f64[3] = power b 2",
        "d:f64[] = einsum[a->] c",
        "e:f64[] = ones_like d",
        "f:f64[3] = spread[src=, dst=a, shape=(3,)] e",
        "g:f64[3] = multiply 2 b",
        "h:f64[3] = multiply f g",
        "i:f64[3] = multiply b b",
        "j:f64[3] = subtract 1 i",
        "k:f64[3] = multiply h j",
    ]
    out = unchanged_by(passes.simplify, g)
    assert body(out) == [
        "b:f64[3] = tanh a",
        "c:f64[3] = power b 2",
        "d:f64[] = einsum[a->] c",
        "f:f64[3] = spread[src=, dst=a, shape=(3,)] 1.0",  # dead: dce drops it, and d
        "g:f64[3] = multiply 2 b",
        "i:f64[3] = multiply b b",
        "j:f64[3] = subtract 1 i",
        "k:f64[3] = multiply g j",
    ]
    assert_same_values(g, out)


def test_simplify_folds_the_scaled_seed_of_a_mean_into_a_literal():
    g = passes.dce(hvp_graph())
    assert body(g)[7:11] == [
        "n:f64[] = ones_like l",
        "o:f64[] = multiply n 0.16666666666666666",  # d mean / d sum
        "p:f64[6] = spread[src=, dst=a, shape=(6,)] o",
        "q:f64[6] = sigmoid e",
    ]
    out = passes.simplify(g)
    assert "v:f64[6] = multiply t 0.16666666666666666" in body(out)
    assert not {"ones_like", "spread"} & set(ops(passes.dce(out)))
    assert_same_values(g, out)


def test_simplify_turns_a_uniform_constant_into_a_literal_of_its_dtype():
    x = np.ones(3, dtype=np.float32)
    f = lambda x: (x * np.full(3, 0.5, np.float32), x * np.full(3, 0.5), x * np.full((2, 3), 0.5, np.float32))
    g = ea.make_graph(f)(x)
    out = unchanged_by(passes.simplify, g)
    assert body(out) == [
        "b:f32[3] = multiply a 0.5",
        "c:f64[3] = multiply a 0.5",  # a float64 literal: the result stays float64
        "d:f32[2,3] = multiply a k2",  # the constant gives the result its shape: kept
    ]
    assert [type(e.inputs[1].value) for e in out.equations[:2]] == [np.float32, np.float64]
    assert [n for n, _ in out.consts] == ["k2"]
    assert_same_values(g, out)


def test_simplify_keeps_the_type_of_the_result():
    x32 = np.ones(3, dtype=np.float32)
    g = build(
        {"a": x32, "b": np.ones((2, 3), dtype=np.float32)},
        [
            ("c", PRIMITIVES["multiply"], {}, ["a", Lit(1)]),  # weak 1: float32 stays
            ("d", PRIMITIVES["multiply"], {}, ["c", Lit(np.float64(1.0))]),  # a float64 one: a cast
            ("e", PRIMITIVES["add"], {}, ["c", "k0"]),  # zeros (2, 3): a broadcast, kept
            ("f", PRIMITIVES["add"], {}, ["b", "k0"]),  # zeros of b's type: b
            ("g", PRIMITIVES["subtract"], {}, [Lit(0.0), "c"]),  # 0 - c: -c
            ("h", PRIMITIVES["divide"], {}, ["g", Lit(1.0)]),
            ("i", PRIMITIVES["multiply"], {}, ["e", "f"]),
        ],
        ["d", "h", "i"],
        consts={"k0": np.zeros((2, 3), dtype=np.float32)},
    )
    out = unchanged_by(passes.simplify, g)
    assert body(out) == [
        "d:f64[3] = astype[dtype=f64] a",
        "e:f32[2,3] = add a k0",
        "g:f32[3] = negative a",
        "i:f32[2,3] = multiply e b",
    ]
    assert out.outputs == ["d", "g", "i"]
    assert_same_values(g, out, args=[np.arange(3, dtype=np.float32), np.ones((2, 3), np.float32)])


def test_passes_never_put_a_scalar_input_where_a_numpy_value_was():
    """Under jit a 0-d input may be a Python float, which numpy promotes weakly: ``x * 1.0`` is a
    float64 numpy scalar but ``x`` next to a float32 array gives float32, so neither ``x * 1.0``
    nor a broadcast of x is replaced by x."""

    def f(x, y):
        return (x * 1.0) * y, ea.broadcast_to(x, (3,)) * y, x * y

    args = [2.0, np.ones(3, np.float32)]
    g, _ = stage(f, args, tree_flatten(args)[1], weak_scalars=True)
    out = passes.optimize(g)
    assert ops(out) == ops(g)
    assert [np.asarray(v).dtype for v in run_graph(out, args)] == [np.float64, np.float64, np.float32]


def test_simplify_leaves_complex_products_with_one():
    """(inf + 0j) * (1 + 0j) is inf + nanj: a complex multiplication by one is not the identity."""
    z = np.array([np.inf + 0j, 1 + 2j])
    with np.errstate(invalid="ignore"):  # inf * 1 in complex arithmetic is the point here
        g = build({"a": z}, [("b", PRIMITIVES["multiply"], {}, ["a", Lit(1.0)])], ["b"])
    assert passes.simplify(g).equations == g.equations


def test_simplify_drops_einsum_operands_of_ones():
    g = net_grad_graph()
    assert body(g)[4:6] == ["j:f64[] = ones_like i", "k:f64[3,2] = einsum[,li->il] j h"]
    out = passes.simplify(g)
    assert body(out)[4] == "k:f64[3,2] = einsum[li->il] h"  # a transpose
    assert not any(isinstance(a, Lit) for e in out.equations for a in e.inputs)
    assert_same_values(g, out)


def test_simplify_keeps_a_ones_operand_that_broadcasts_or_counts():
    ones = np.ones((3, 4))
    g = build(
        {"a": np.ones(3)},
        [
            ("b", einsum_p, _einsum("i,ij->ij"), ["a", "k0"]),  # j only in the ones: a broadcast
            ("c", einsum_p, _einsum("i,ij->i"), ["a", "k0"]),  # j summed: a count
            ("d", einsum_p, _einsum("ij,ij->ij"), ["b", "k0"]),  # ones read like b: dropped
        ],
        ["c", "d"],
        consts={"k0": ones},
    )
    out = passes.simplify(g)
    assert body(out) == ["b:f64[3,4] = einsum[i,ij->ij] a k0", "c:f64[3] = einsum[i,ij->i] a k0"]
    assert out.outputs == ["c", "b"]
    assert_same_values(g, out)


def _einsum(text, optimize="auto"):
    ins, out = text.split("->")
    return {"inputs": tuple(ins.split(",")), "output": out, "optimize": optimize, "memory_limit": None}


# -- algebra ---------------------------------------------------------------------------------------

MUL, NEG = PRIMITIVES["multiply"], PRIMITIVES["negative"]


def test_algebra_folds_a_chain_of_scalings_into_one_multiply():
    """d/dw mean((3w - 1)^2): power's 2, the mean's 1/5 and the chain rule's 3 are three
    multiplies by constants on the same vector; folded, one multiply by 1.2 (fails if the
    fold is removed: three passes, three constants)."""
    w = np.linspace(-1.0, 1.0, 5)
    g = passes.dce(passes.simplify(ea.make_graph(ea.grad(lambda w: ea.mean((w * 3.0 - 1.0) ** 2)))(w)))
    assert body(g)[2:] == [
        "j:f64[5] = multiply 2 c",
        "k:f64[5] = multiply 0.2 j",
        "l:f64[5] = multiply k 3.0",
    ]
    out = passes.dce(unchanged_by(passes.algebra, g))
    assert body(out) == [
        "b:f64[5] = multiply a 3.0",
        "c:f64[5] = subtract b 1.0",
        "l:f64[5] = multiply 1.2000000000000002 c",
    ]
    factor = out.equations[-1].inputs[0]
    assert isinstance(factor, Lit) and factor.value == np.float64(2) * np.float64(0.2) * 3.0
    assert_same_values(g, out)


def test_algebra_folds_in_the_results_dtype_and_keeps_it():
    """float32 values scaled by Python numbers: the folded factor is a float32 (the product
    of the factors rounded to float32, as numpy would scale by each), the result float32."""
    x = np.linspace(-1.0, 1.0, 4, dtype=np.float32)
    g = ea.make_graph(lambda x: (x * 0.1) * 3.0)(x)
    out = passes.algebra(g)
    (e,) = passes.dce(out).equations
    assert e.dtype == np.float32 and e.inputs[0].value.dtype == np.float32
    assert e.inputs[0].value == np.float32(0.1) * np.float32(3.0)
    assert_same_values(g, out, rtol=1e-6)


def test_algebra_moves_signs_out_of_products_to_meet_the_scalings():
    """A tanh Hessian-vector product, forward over reverse: ``l + l`` and its negation were two
    passes after the product; they become one multiply by -2 (fails without the sign and
    doubling rules: 7 equations)."""
    x = np.linspace(-1.0, 1.0, 5)
    g = passes.dce(
        ea.make_graph(lambda x, v: ea.hvp(lambda x: ea.sum(ea.tanh(x)), (x,), (v,))[0])(x, np.ones(5))
    )
    assert ops(g)["add"] == 1 and ops(g)["negative"] == 1
    out = passes.optimize(g)
    assert body(out) == [
        "c:f64[5] = tanh a",
        "d:f64[5] = square c",
        "e:f64[5] = subtract 1 d",
        "f:f64[5] = multiply b e",
        "l:f64[5] = multiply f c",
        "p:f64[5] = multiply -2.0 l",
    ]
    assert_same_values(g, out)


def test_algebra_turns_plus_a_negation_into_a_subtraction():
    x, y = np.array([1.0, -2.0]), np.array([0.5, 3.0])
    g = ea.make_graph(lambda x, y: x + (-y) * x - (-x))(x, y)
    out = passes.dce(passes.algebra(g))
    assert ops(out) == Counter({"multiply": 1, "subtract": 1, "add": 1})
    assert_same_values(g, out, rtol=0, atol=0)  # exact: only signs moved


def test_algebra_squares_a_value_times_itself_bit_for_bit():
    x = RNG.standard_normal(7)
    g = ea.make_graph(lambda x: ea.tanh(x) * ea.tanh(x) + x * 2.0 + x**2)(x)
    out = passes.optimize(g)
    assert ops(out)["square"] == 2 and ops(out)["multiply"] == 1  # the doubling alone
    assert ops(out)["power"] == 0
    np.testing.assert_array_equal(run_graph(out, [x])[0], run_graph(g, [x])[0])


def test_algebra_reads_sigmoid_off_the_forward_softplus():
    """The logistic loss's derivative is sigmoid(z), and its forward computed softplus(z):
    sigmoid(z) = -expm1(-softplus(z)) costs a negation, an expm1 and (folded into the
    scaling) nothing more, where the stable sigmoid takes an exp, two divisions and a select.
    Without the forward's softplus (a Hessian-vector product's program), sigmoid stays."""
    z = np.array([-40.0, -3.0, -1e-9, 0.0, 2.0, 35.0, np.inf, -np.inf])
    g = passes.dce(ea.make_graph(ea.value_and_grad(lambda z: ea.mean(ea.softplus(z))))(z))
    assert ops(g)["sigmoid"] == 1
    out = passes.optimize(g)
    assert ops(out)["sigmoid"] == 0 and ops(out)["expm1"] == 1
    np.testing.assert_allclose(run_graph(out, [z])[1], 1 / (1 + np.exp(-z)) / z.size, rtol=1e-15, atol=0)
    assert ops(passes.optimize(hvp_graph()))["sigmoid"] == 1


def test_algebra_leaves_a_scaling_another_equation_reads():
    """``y = 2x`` is returned too: folding it into ``3y`` would compute x's scaling twice."""
    x = np.arange(3.0)
    g = ea.make_graph(lambda x: (x * 2.0, (x * 2.0) * 3.0))(x)
    out = passes.dce(passes.algebra(passes.cse(g)))
    assert ops(out)["multiply"] == 2
    assert_same_values(g, out)


def test_algebra_leaves_integers_and_complex_numbers():
    i = np.arange(4)
    g = ea.make_graph(lambda i: (i * 2) * 3)(i)
    assert ops(passes.dce(passes.algebra(g)))["multiply"] == 2
    z = np.array([1 + 2j, np.inf + 0j])
    with np.errstate(invalid="ignore"):  # inf * 2 in complex arithmetic
        g = ea.make_graph(lambda z: -((z * 2.0) * 3.0))(z)
    assert len(passes.dce(passes.algebra(g)).equations) == 3


# -- fold_spreads ----------------------------------------------------------------------------------


def test_fold_spreads_adds_two_diagonal_cotangents_on_the_diagonal():
    """grad(trace(A)) + grad(sum(diag(A)**2)): two spreads onto the diagonal added densely."""
    g = passes.dce(passes.simplify(two_grads_graph()))
    assert body(g) == [
        "d:f64[4,4] = spread[src=, dst=aa, shape=(4,4)] 1.0",  # grad of trace(A): the seed on the diagonal
        "e:f64[4] = einsum[aa->a] a",
        "j:f64[4] = multiply 2 e",
        "l:f64[4,4] = spread[src=a, dst=aa, shape=(4,4)] j",  # grad of sum(diag(A)**2)
        "m:f64[4,4] = add d l",
    ]
    out = passes.dce(unchanged_by(passes.fold_spreads, g))
    assert body(out) == [
        "e:f64[4] = einsum[aa->a] a",
        "j:f64[4] = multiply 2 e",
        "b:f64[4] = add 1.0 j",  # numpy broadcasts the scalar source along the diagonal
        "m:f64[4,4] = spread[src=a, dst=aa, shape=(4,4)] b",  # one spread of 1 + 2 d
    ]
    assert_same_values(g, out)


def test_fold_spreads_reads_a_constant_that_is_a_spread():
    g = ea.make_graph(lambda a: ea.grad(lambda a: ea.sum(ea.diagonal(a) ** 2))(a) + 3 * np.eye(4))(A44)
    g = passes.dce(passes.simplify(g))
    assert body(g)[2:] == ["i:f64[4,4] = spread[src=a, dst=aa, shape=(4,4)] g", "j:f64[4,4] = add i k0"]
    out = passes.dce(passes.fold_spreads(g))
    assert body(out)[2:] == ["c:f64[4] = add g k1", "j:f64[4,4] = spread[src=a, dst=aa, shape=(4,4)] c"]
    np.testing.assert_array_equal(out.const_values["k1"], [3.0, 3.0, 3.0, 3.0])  # the diagonal of k0
    assert body(passes.simplify(out))[2] == "c:f64[4] = add g 3.0"
    assert_same_values(g, out)


def test_fold_spreads_reads_a_constant_spread_along_letters_numpy_einsum_does_not_know():
    """The gradient's spread keeps the user's letters ('αβ'); numpy.einsum, which checks the
    constant, takes only a-z and A-Z."""
    a, w = RNG.standard_normal((3, 4)), np.arange(1.0, 4.0)
    c = np.repeat([[2.0], [5.0], [7.0]], 4, axis=1)  # a constant that is a spread along β
    f = lambda a: ea.sum(ea.einsum("αβ->α", a) * w) + ea.sum(a * c)
    g = passes.dce(passes.simplify(ea.make_graph(ea.grad(f))(a)))
    assert body(g) == ["m:f64[3,4] = spread[src=α, dst=αβ, shape=(3,4)] k0", "n:f64[3,4] = add k1 m"]
    out = passes.dce(passes.fold_spreads(g))
    assert body(out) == ["b:f64[3] = add k2 k0", "n:f64[3,4] = spread[src=α, dst=αβ, shape=(3,4)] b"]
    np.testing.assert_array_equal(out.const_values["k2"], [2.0, 5.0, 7.0])
    assert_same_values(g, out)
    np.testing.assert_array_equal(ea.jit(ea.grad(f))(a), w[:, None] + c)


def test_fold_spreads_needs_a_constant_that_really_is_a_spread():
    almost = np.eye(4)
    almost[0, 1] = 1e-300
    g = ea.make_graph(lambda a: ea.grad(lambda a: ea.sum(ea.diagonal(a) ** 2))(a) + almost)(A44)
    assert ops(passes.optimize(g))["add"] == 1
    assert [e.shape for e in passes.optimize(g).equations if e.op == "add"] == [(4, 4)]
    assert_same_values(g, passes.optimize(g))


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # (the test divides by 0)
def test_fold_spreads_needs_a_constant_that_is_a_spread_bit_for_bit():
    # [0.0, ...] and [-0.0, ...] compare equal, but 1 / x tells them apart
    c = np.array([[0.0, 1.0, 2.0], [-0.0, 1.0, 2.0]])
    x = np.array([-1.0, 2.0, 3.0])
    f = lambda x: 1.0 / (ea.broadcast_to(x, (2, 3)) * c)
    jf = ea.jit(f, backend="numpy")
    jf(x)
    np.testing.assert_array_equal(jf(x), [[-np.inf, 0.5, 1 / 6], [np.inf, 0.5, 1 / 6]])


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # (the test divides by 0)
def test_simplify_takes_a_constant_of_signed_zeros_for_two_values():
    k = np.array([0.0, -0.0, 0.0])
    x = np.array([1.0, 1.0, -1.0])
    g = ea.make_graph(lambda x: x / k)(x)
    out = passes.simplify(g)
    np.testing.assert_array_equal(run_graph(out, [x])[0], [np.inf, -np.inf, -np.inf])
    jf = ea.jit(lambda x: x / k, backend="numpy")
    jf(x)
    np.testing.assert_array_equal(jf(x), [np.inf, -np.inf, -np.inf])


def test_fold_spreads_pushes_unary_ops_and_products_to_the_source():
    g = build(
        {"a": np.arange(1.0, 4.0), "b": np.arange(2.0, 5.0)},
        [
            ("c", spread_p, {"src": "i", "dst": "ii", "shape": (3, 3)}, ["a"]),
            ("d", PRIMITIVES["sin"], {}, ["c"]),  # sin 0 = 0: stays diagonal
            ("e", spread_p, {"src": "i", "dst": "ii", "shape": (3, 3)}, ["b"]),
            ("f", PRIMITIVES["multiply"], {}, ["d", "e"]),
            ("g", PRIMITIVES["multiply"], {}, ["f", Lit(3.0)]),
            ("h", spread_p, {"src": "i", "dst": "ii", "shape": (3, 3)}, ["a"]),
            ("i", PRIMITIVES["exp"], {}, ["h"]),  # exp 0 = 1: not a diagonal
            ("j", PRIMITIVES["add"], {}, ["g", "i"]),
        ],
        ["j"],
    )
    out = passes.dce(passes.fold_spreads(g))
    assert body(out) == [
        "k:f64[3] = sin a",
        "l:f64[3] = multiply k b",
        "m:f64[3] = multiply l 3.0",
        "g:f64[3,3] = spread[src=i, dst=ii, shape=(3,3)] m",
        "h:f64[3,3] = spread[src=i, dst=ii, shape=(3,3)] a",
        "i:f64[3,3] = exp h",
        "j:f64[3,3] = add g i",
    ]
    assert_same_values(g, out)


def test_fold_spreads_lets_numpy_broadcast_a_trailing_source():
    g = build(
        {"a": np.arange(3.0), "b": np.ones((2, 3))},
        [
            ("z", einsum_p, _einsum("ij->"), ["b"]),
            ("c", spread_p, {"src": "j", "dst": "ij", "shape": (2, 3)}, ["a"]),  # a[None, :]
            ("d", PRIMITIVES["multiply"], {}, ["c", "b"]),
            ("f", einsum_p, _einsum("ij->i"), ["b"]),
            ("g", spread_p, {"src": "i", "dst": "ij", "shape": (2, 3)}, ["f"]),  # f[:, None]: kept
            ("h", spread_p, {"src": "", "dst": "ij", "shape": (2, 3)}, ["z"]),  # a scalar
            ("i", where_p, {}, [Lit(True), "g", "h"]),  # both broadcast: the result needs g
            ("j", PRIMITIVES["add"], {}, ["d", "i"]),
        ],
        ["j"],
    )
    out = passes.dce(passes.fold_spreads(g))
    assert body(out) == [
        "z:f64[] = einsum[ij->] b",
        "d:f64[2,3] = multiply a b",
        "f:f64[2] = einsum[ij->i] b",
        "g:f64[2,3] = spread[src=i, dst=ij, shape=(2,3)] f",
        "i:f64[2,3] = where True g z",
        "j:f64[2,3] = add d i",
    ]
    assert_same_values(g, out)


def test_fold_spreads_folds_a_diagonal_into_the_einsum_that_reads_it():
    """grad(sum(diag(A)**2)) @ B: the diagonal cotangent meets a matrix product."""
    b = RNG.standard_normal((4, 4))
    g = ea.make_graph(lambda a: ea.grad(lambda a: ea.sum(ea.diagonal(a) ** 2))(a) @ b)(A44)
    out = passes.optimize(g)
    assert ops(g)["spread"] == 2 and ops(out)["spread"] == 0
    assert body(out)[-1] == "j:f64[4,4] = einsum[i,ik->ik] g k0"  # the diagonal's i and j read as one i
    assert_same_values(g, out)


@pytest.mark.parametrize(
    "dtype, n, folded",
    [(np.int8, 300, True), (np.uint8, 256, True), (np.float16, 70000, False), (np.bool_, 300, True)],
)
def test_fold_spreads_counts_a_summed_broadcast_in_the_einsums_dtype(dtype, n, folded):
    """A broadcast of n copies that an einsum sums is the source times n, a literal of the
    einsum's dtype: for an int8 einsum summing 300 copies, making it raised OverflowError in
    jit (it wraps, as the sum does); a float16 70000 is inf (jit gave inf for 70000 * 0.001)."""
    x = np.array([0.001, 1.0, 0.0]).astype(dtype) if dtype == np.float16 else np.array([0, 1, 3], dtype)
    f = lambda x: ea.einsum("ij->j", ea.broadcast_to(x, (n, 3)))
    g = ea.make_graph(f)(x)
    out = passes.optimize(g)
    assert ops(out)["spread"] == (0 if folded else 1), str(out)
    assert_same_values(g, out, args=[x], rtol=1e-3 if dtype == np.float16 else 0, atol=0)
    with np.errstate(over="ignore"):  # n x, wrapped (int8) or rounded (float16: 70000 * 1.0 is inf)
        want = x if dtype == np.bool_ else (n * x.astype(np.float64)).astype(np.int64).astype(dtype)
        if dtype == np.float16:
            want = (n * x.astype(np.float64)).astype(dtype)
    for backend in (None, "numpy"):
        got = compiled(ea.jit(f, backend=backend))(x)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-3 if dtype == np.float16 else 0)


def test_fold_spread_spec_broadcast_diagonal_and_counts():
    fold = passes.fold_spread_spec
    # a broadcast along j: j is absent from the operand
    assert fold(("ij", "jk"), "ik", 0, "i", "ij") == (("i", "jk"), "ik", "")
    # a diagonal read by a matrix product: the two letters become one
    assert fold(("ij", "jk"), "ik", 0, "i", "ii") == (("i", "ik"), "ik", "")
    # the einsum sums the broadcast letter j: its size is a factor
    assert fold(("ij",), "i", 0, "i", "ij") == (("i",), "i", "j")
    # the einsum reads the diagonal of a broadcast: the source's letters collapse
    assert fold(("ii",), "i", 0, "ab", "ab") == (("ii",), "i", "")
    # a diagonal the einsum returns in two output letters: no fold
    assert fold(("ij",), "ij", 0, "a", "aa") is None


def _spread_cases():
    """A spread (src, dst with repeats and broadcasts), an einsum reading it, and the other operand."""
    letters = "abcd"

    @st.composite
    def case(draw):
        dst = "".join(draw(st.lists(st.sampled_from("pqr"), min_size=1, max_size=3)))
        src = "".join(draw(st.permutations(sorted(set(dst)))))[: draw(st.integers(0, len(set(dst))))]
        spec = "".join(draw(st.lists(st.sampled_from(letters), min_size=len(dst), max_size=len(dst))))
        other = "".join(draw(st.lists(st.sampled_from(letters), max_size=3)))
        used = sorted(set(spec + other))
        out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
        return src, dst, spec, other, out

    return case()


@given(_spread_cases())
def test_fold_spread_spec_matches_numpy(case):
    src, dst, spec, other, out = case
    n = 3  # one size for every letter keeps every pairing consistent
    x, y = RNG.standard_normal((n,) * len(src)), RNG.standard_normal((n,) * len(other))
    dense = spread_p.impl(x, src=src, dst=dst, shape=(n,) * len(dst))
    expected = np.einsum(f"{spec},{other}->{out}", dense, y)
    folded = passes.fold_spread_spec((spec, other), out, 0, src, dst)
    if folded is None:
        return  # the result is itself a diagonal, in two output letters: not folded
    (sx, sy), so, vanished = folded
    got = np.einsum(f"{sx},{sy}->{so}", x, y) * n ** len(vanished)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)


# -- merge_einsums ---------------------------------------------------------------------------------


def test_merge_einsums_gives_a_network_back_to_opt_einsum():
    g = ea.make_graph(net)(*[np.ones(s) for s in NET_SHAPES])
    assert g.einsums == ["jk,kl->jl", "ij,jl->il", "lm,mi->li", "il,li->"]  # pairwise, as traced
    out = unchanged_by(passes.merge_einsums, g)
    out = passes.dce(out)
    assert body(out) == ["i:f64[] = einsum[ij,jk,kl,lm,mi->] a b c d e"]
    # the cheaper of the program's order and opt_einsum's plan of the whole ring
    specs, shapes = ("ia", "ab", "bl", "lc", "ci"), tuple(NET_SHAPES)
    program_order = ((1, 2), (0, 3), (0, 1), (0, 1))  # b c, a (b c), d e, (a b c) (d e)
    planned = oe.contract_path("ia,ab,bl,lc,ci->", *shapes, shapes=True, optimize="auto")[0]
    cheapest = min(path_flops(specs, "", shapes, p) for p in (program_order, tuple(planned)))
    assert path_flops(specs, "", shapes, out.equations[0].params["optimize"]) == cheapest
    assert_same_values(g, out)


def test_merge_einsums_does_not_merge_what_two_einsums_read():
    g = passes.dce(passes.simplify(net_grad_graph()))
    out = passes.dce(unchanged_by(passes.merge_einsums, g))
    assert body(g) == [
        "f:f64[4,2] = einsum[jk,kl->jl] b c",  # read twice: kept
        "g:f64[3,2] = einsum[ij,jl->il] a f",
        "h:f64[2,3] = einsum[lm,mi->li] d e",
        "k:f64[3,2] = einsum[li->il] h",  # the seed's transposes (read twice: kept)
        "l:f64[2,3] = einsum[il->li] g",
        "m:f64[2,3] = einsum[li,mi->lm] l e",
        "n:f64[3,3] = einsum[li,lm->mi] l d",
        "o:f64[3,4] = einsum[il,jl->ij] k f",
        "p:f64[4,2] = einsum[il,ij->jl] k a",  # read twice: kept
        "q:f64[4,5] = einsum[jl,kl->jk] p c",
        "r:f64[5,2] = einsum[jl,jk->kl] p b",
    ]
    assert body(out) == [
        "f:f64[4,2] = einsum[jk,kl->jl] b c",
        "k:f64[3,2] = einsum[lm,mi->il] d e",  # h, read by the transpose alone, merged into it
        "l:f64[2,3] = einsum[ij,jl->li] a f",
        "m:f64[2,3] = einsum[li,mi->lm] l e",
        "n:f64[3,3] = einsum[li,lm->mi] l d",
        "o:f64[3,4] = einsum[il,jl->ij] k f",
        "p:f64[4,2] = einsum[il,ij->jl] k a",
        "q:f64[4,5] = einsum[jl,kl->jk] p c",
        "r:f64[5,2] = einsum[jl,jk->kl] p b",
    ]
    assert_same_values(g, out, args=[RNG.standard_normal(s) for s in NET_SHAPES])


@pytest.mark.parametrize("k", [0, 1, 2])
def test_merged_einsums_follow_both_given_paths(k):
    """Two planned einsums of three operands (a staged network's steps, cotengra's path): merged,
    the einsum follows the inner path, then the outer one with the inner result in operand
    k's place (`merge_path`), so it costs exactly what the two did; a strategy's plan of the
    merged network is not asked for. Fails if the path is dropped to "auto" (the behaviour
    before), or composed with positions off by one."""
    inner = ("pq", "qr", "rs")  # its result "ps" is operand k of the outer einsum
    outer = ["ps", "sx", "xp"]
    outer[k], outer[0] = outer[0], outer[k]  # operand k reads "ps"
    dims = {"p": 3, "q": 9, "r": 2, "s": 7, "x": 4}
    ins = {f"i{j}": RNG.standard_normal([dims[c] for c in spec]) for j, spec in enumerate(inner)}
    outs = {f"o{j}": RNG.standard_normal([dims[c] for c in spec]) for j, spec in enumerate(outer) if j != k}
    inner_path, outer_path = ((0, 2), (0, 1)), ((1, 2), (0, 1))
    operands = [f"o{j}" if j != k else "t" for j in range(3)]
    g = build(
        {**ins, **outs},
        [
            ("t", einsum_p, _einsum("pq,qr,rs->ps", optimize=inner_path), ["i0", "i1", "i2"]),
            ("u", einsum_p, _einsum(",".join(outer) + "->", optimize=outer_path), operands),
        ],
        ["u"],
    )
    out = passes.dce(unchanged_by(passes.merge_einsums, g))
    (e,) = out.equations
    assert e.inputs[k : k + 3] == ["i0", "i1", "i2"]
    assert e.params["optimize"] == passes.merge_path(outer_path, 3, k, inner_path, 3)
    shapes = tuple(np.shape(v) for v in {**ins, **outs}.values())
    specs, shape_of = e.params["inputs"], {**ins, **outs}
    shapes = tuple(np.shape(shape_of[x]) for x in e.inputs)
    parts = path_flops(inner, "ps", tuple(np.shape(ins[f"i{j}"]) for j in range(3)), inner_path)
    outer_shapes = tuple((dims["p"], dims["s"]) if j == k else np.shape(outs[f"o{j}"]) for j in range(3))
    parts += path_flops(tuple(outer), "", outer_shapes, outer_path)
    assert path_flops(specs, "", shapes, e.params["optimize"]) == parts
    assert_same_values(g, out)


@st.composite
def _linear_paths(draw, n):
    """A random opt_einsum path over `n` operands: steps of two (or, for one operand, one)."""
    path, left = [], n
    if n == 1:
        return ((0,),)
    while left > 1:
        i, j = draw(st.lists(st.integers(0, left - 1), min_size=2, max_size=2, unique=True))
        path.append((i, j))
        left -= 1
    return tuple(path)


def _intermediates(path, leaves):
    """The sets of leaves each step of `path` contracts, following it over `leaves` (frozensets)."""
    work, made = list(leaves), []
    for step in path:
        group = frozenset().union(*(work[i] for i in step))
        for i in sorted(step, reverse=True):
            del work[i]
        work.append(group)
        made.append(group)
    return made, work


@given(st.data())
def test_merge_path_makes_the_intermediates_of_both_paths(data):
    """A composed path makes exactly the intermediates the inner path made, then those of the
    outer path with the inner result in operand k's place: the same products, so the same
    cost; its positions are valid and it ends in one operand. (A one-operand inner einsum's
    step, a transpose or a sum, is dropped.)"""
    n_outer = data.draw(st.integers(1, 5))
    n_inner = data.draw(st.integers(1, 5))
    k = data.draw(st.integers(0, n_outer - 1))
    outer = data.draw(_linear_paths(n_outer))
    inner = data.draw(_linear_paths(n_inner))
    merged = passes.merge_path(outer, n_outer, k, inner, n_inner)
    n = n_outer - 1 + n_inner
    leaves = [frozenset([j]) for j in range(n)]  # merged operands: outer[:k], inner, outer[k+1:]
    got, last = _intermediates(merged, leaves)
    assert len(last) == 1 and last[0] == frozenset(range(n))
    want, (inner_result,) = _intermediates(inner, leaves[k : k + n_inner])
    if n_inner == 1:
        want = []
    outer_leaves = [*leaves[:k], inner_result, *leaves[k + n_inner :]]
    want += _intermediates(outer, outer_leaves)[0]
    assert got == want


@given(st.data())
def test_path_flops_counts_what_opt_einsum_counts(data):
    """`path_flops` (one walk, a count per letter) gives opt_einsum's ``opt_cost`` for any path
    over random terms: repeated letters, letters of size 1 beside larger ones, an output of
    some letters, steps of one, two or three operands."""
    pool = "abcdef"
    size = {c: data.draw(st.integers(2, 4)) for c in pool}
    n = data.draw(st.integers(1, 6))
    terms = tuple("".join(data.draw(st.lists(st.sampled_from(pool), max_size=4))) for _ in range(n))
    shapes = tuple(tuple(1 if data.draw(st.integers(0, 5)) == 0 else size[c] for c in t) for t in terms)
    used = sorted(set("".join(terms)))
    output = "".join(data.draw(st.permutations(used))[: data.draw(st.integers(0, len(used)))])
    path, left = [], n
    while left > 1 or not path:
        k = min(left, data.draw(st.integers(1, 3)))
        path.append(tuple(data.draw(st.permutations(range(left)))[:k]))
        left -= k - 1
    _, info = oe.contract_path(",".join(terms) + "->" + output, *shapes, shapes=True, optimize=path)
    assert path_flops(terms, output, shapes, tuple(path)) == info.opt_cost


def _ring_contracted_pairwise(n):
    """`ea.jit(ea.value_and_grad(f))` of a ring of n matrices multiplied one at a time and
    traced, quimb's way of contracting a network: n einsums, each read by the next."""

    def f(*xs):
        acc = xs[0]
        for x in xs[1:]:
            acc = ea.einsum("ij,jk->ik", acc, x)
        return ea.einsum("ii->", acc)

    return ea.jit(ea.value_and_grad(f, argnums=tuple(range(n))))


def _calls(run):
    """The Python and builtin calls `run()` makes (sys.setprofile's events)."""
    count = [0]

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return count[0]


def test_merging_a_network_contracted_pairwise_grows_linearly():
    """Compiling the gradient of a ring of 100 and of 400 matrices multiplied one at a time
    (staging, merging the 400 products into one einsum, its path composed at the root,
    planning the tree): the calls made grow with the tensors, not their square. Merging
    recomposed the whole path and renamed the whole network's letters at each of the merges
    (a list search per step, a walk over every letter), and the dead merged einsums of every
    length stayed in the program for the next walk: 1.99 s to compile 800 matrices."""
    sizes = {}
    for n in (100, 400):
        xs = [RNG.standard_normal((3, 3)) for _ in range(n)]
        g = _ring_contracted_pairwise(n)
        sizes[n] = _calls(functools.partial(g.lower, *xs))
        vg = g.lower(*xs).equations[0]  # the ring: one network's value and gradients
        assert vg.prim.name == "einsum_vg" and len(vg.inputs) == n
    assert sizes[400] < 6 * sizes[100], sizes


def _left_to_right(mats):
    """The program ((A B) C) D of four matrices: three products, each read by the next."""
    steps = [("x", "ab,bc->ac", ["A", "B"]), ("y", "ac,cd->ad", ["x", "C"]), ("z", "ad,de->ae", ["y", "D"])]
    return build(mats, [(out, einsum_p, _einsum(text), ins) for out, text, ins in steps], ["z"])


def test_merged_einsums_keep_the_program_order_where_the_strategy_plans_worse():
    """A chain of four matrices written in its cheapest order (three, then the fourth), the last
    product asking for "greedy", which orders the whole chain worse (23,448 operations against
    5,916): merged, the einsum follows the program's order. And the chain written in a poor order, the last
    product asking for "auto": merged, it follows opt_einsum's plan (cheaper than the program's).
    Fails if merging always re-plans (the first), or never does (the second)."""
    d = [12, 33, 27, 2, 16]
    mats = {n: RNG.standard_normal((d[i], d[i + 1])) for i, n in enumerate("ABCD")}
    shapes = tuple(m.shape for m in mats.values())
    specs = ("ab", "bc", "cd", "de")
    flops = lambda path: path_flops(specs, "ae", shapes, path)
    greedy = oe.contract_path("ab,bc,cd,de->ae", *shapes, shapes=True, optimize="greedy")[0]
    good = build(
        mats,
        [
            ("y", einsum_p, _einsum("ab,bc,cd->ad"), ["A", "B", "C"]),  # opt_einsum: (B C) first
            ("z", einsum_p, _einsum("ad,de->ae", optimize="greedy"), ["y", "D"]),
        ],
        ["z"],
    )
    (e,) = passes.dce(passes.merge_einsums(good)).equations
    assert flops(e.params["optimize"]) == 5916 < flops(tuple(greedy)) == 23448
    poor = _left_to_right(mats)
    (e,) = passes.dce(passes.merge_einsums(poor)).equations
    program_order = ((0, 1), (0, 2), (0, 1))
    assert flops(e.params["optimize"]) == 5916 < flops(program_order)
    assert_same_values(poor, passes.dce(passes.merge_einsums(poor)))


def test_a_chain_merged_step_by_step_is_planned_as_a_whole_once():
    """((A B) C) D written as three products, whose first three matrices are cheapest in the
    program's order but whose four are cheapest from the other end (13,014 operations against
    71,592): the chain merges step by step (C, then D, into the growing einsum), and the strategy's
    plan is asked for the whole chain once it is merged, not at its first merge only (which
    kept the program's order, the later merges then following that path as if given). Fails if
    the plan is chosen at each merge, or never."""
    d = [19, 21, 30, 38, 3]
    mats = {n: RNG.standard_normal((d[i], d[i + 1])) for i, n in enumerate("ABCD")}
    shapes = tuple(m.shape for m in mats.values())
    g = _left_to_right(mats)
    out = passes.dce(passes.merge_einsums(g))
    (e,) = out.equations
    flops = lambda path: path_flops(("ab", "bc", "cd", "de"), "ae", shapes, path)
    assert flops(e.params["optimize"]) == 13014 < flops(((0, 1), (0, 2), (0, 1))) == 71592
    assert_same_values(g, out)


def test_merged_einsums_may_have_more_than_52_letters():
    """A chain of 60 matrices written as its pairwise steps merges into one einsum of 60 operands
    and 61 letters (opt_einsum's symbols beyond a-zA-Z; each pairwise step of the merged network
    is renamed for numpy). Fails with the merge limited to the letters numpy's einsum knows."""
    n = 60
    mats = {f"m{i}": RNG.standard_normal((2, 2)) / 1.5 for i in range(n)}
    eqs, last = [], "m0"
    for i in range(1, n):
        eqs.append((f"p{i}", einsum_p, _einsum("ij,jk->ik"), [last, f"m{i}"]))
        last = f"p{i}"
    g = build(mats, eqs, [last])
    out = passes.dce(passes.merge_einsums(g))
    (e,) = out.equations
    assert len(e.inputs) == n and len(set("".join(e.params["inputs"]))) == n + 1
    assert_same_values(g, out)


def test_a_small_product_read_twice_by_one_einsum_is_merged_into_both_places():
    """A shared subexpression read twice by one einsum (the bra's and the ket's copy of one
    product, made one value by `cse`) is merged into both of its places when it costs little
    beside the einsum (`_cheap_to_repeat`), so that the network is one einsum; an expensive
    one is computed once. Fails if a value read twice never merges, or always does."""
    big = {f"b{i}": RNG.standard_normal((30, 30)) for i in range(3)}
    big["b3"] = RNG.standard_normal((2, 2))
    small = {"s0": RNG.standard_normal((2, 3)), "s1": RNG.standard_normal((3, 30))}
    g = build(
        {**big, **small},
        [
            ("t", einsum_p, _einsum("ij,jk->ik"), ["s0", "s1"]),  # 2x30, read twice
            ("u", einsum_p, _einsum("ik,kl,lm,mn,jn,ij->"), ["t", "b0", "b1", "b2", "t", "b3"]),
        ],
        ["u"],
    )
    out = passes.dce(passes.merge_einsums(g))
    (e,) = out.equations
    assert e.inputs.count("s0") == 2 and e.inputs.count("s1") == 2
    assert_same_values(g, out)
    costly = build(
        {**big, "s0": RNG.standard_normal((2, 30)), "s1": RNG.standard_normal((30, 30))},
        [
            ("t", einsum_p, _einsum("ij,jk->ik"), ["s0", "s1"]),  # its operands a third of the einsum's
            ("u", einsum_p, _einsum("ik,kl,lm,mn,jn,ij->"), ["t", "b0", "b1", "b2", "t", "b3"]),
        ],
        ["u"],
    )
    out = passes.dce(passes.merge_einsums(costly))
    assert [len(e.inputs) for e in out.equations] == [2, 6]


def test_a_merged_small_product_read_twice_is_merged_with_its_own_path_into_both_places():
    """The shared product read twice is itself two products merged into one (its path a tree of
    two pieces): each place gets its own copy of that tree, so the composed path contracts
    each copy's operands (not one copy's twice, not the other's never). Fails if the copies
    share their slots (a path reading one position twice, or leaving operands behind)."""
    big = {f"b{i}": RNG.standard_normal((40, 40)) for i in range(3)}
    big["b3"] = RNG.standard_normal((2, 2))
    small = {f"s{i}": RNG.standard_normal(shape) for i, shape in enumerate([(2, 3), (3, 4), (4, 40)])}
    g = build(
        {**big, **small},
        [
            ("t0", einsum_p, _einsum("ij,jk->ik"), ["s0", "s1"]),  # merged into t
            ("t", einsum_p, _einsum("ik,kl->il"), ["t0", "s2"]),  # 2x40, read twice
            ("u", einsum_p, _einsum("ik,kl,lm,mn,jn,ij->"), ["t", "b0", "b1", "b2", "t", "b3"]),
        ],
        ["u"],
    )
    out = passes.dce(passes.merge_einsums(g))
    (e,) = out.equations
    assert [e.inputs.count(s) for s in small] == [2, 2, 2]
    path = e.params["optimize"]
    used = [frozenset([j]) for j in range(len(e.inputs))]
    made, (last,) = _intermediates(path, used)
    assert last == frozenset(range(len(e.inputs)))
    for name in ("s0", "s1", "s2"):  # each copy of the product: its own operands, contracted first
        first, second = (j for j, x in enumerate(e.inputs) if x == name)
        assert not any(first in m and second in m for m in made[:4])
    assert_same_values(g, out)


def test_merge_einsums_merges_a_transpose_into_every_einsum_reading_it():
    a = np.ones((3, 3))
    g = build(
        {"a": a, "b": a},
        [
            ("c", einsum_p, _einsum("ij,jk->ik"), ["a", "b"]),
            ("d", einsum_p, _einsum("ik->ki"), ["c"]),  # a transpose of c
            ("e", einsum_p, _einsum("ij,jk->ik"), ["d", "a"]),
            ("f", einsum_p, _einsum("ij,ij->"), ["d", "b"]),
        ],
        ["c", "e", "f"],  # c is returned: not merged into its transpose
    )
    out = passes.dce(passes.merge_einsums(g))
    assert body(out) == [
        "c:f64[3,3] = einsum[ij,jk->ik] a b",
        "e:f64[3,3] = einsum[ji,jk->ik] c a",
        "f:f64[] = einsum[ji,ij->] c b",
    ]
    assert_same_values(g, out)


def test_merge_einsums_keeps_an_output_and_a_twice_read_einsum():
    a = np.ones((3, 3))
    g = build(
        {"a": a},
        [
            ("b", einsum_p, _einsum("ij,jk->ik"), ["a", "a"]),
            ("c", einsum_p, _einsum("ij->"), ["b"]),  # b is also an output
            ("d", einsum_p, _einsum("ij,jk->ik"), ["a", "a"]),
            ("e", einsum_p, _einsum("ij,ji->"), ["d", "d"]),  # d read twice
        ],
        ["b", "c", "e"],
    )
    assert passes.merge_einsums(g).equations == g.equations


def test_merge_einsums_renames_summed_letters_and_reads_diagonals():
    g = build(
        {"a": np.ones((3, 3)), "b": np.ones((3, 3))},
        [
            ("c", einsum_p, _einsum("ij,jk->ik"), ["a", "b"]),  # j summed inside
            ("d", einsum_p, _einsum("jj,ij->i"), ["c", "a"]),  # reads c's diagonal, uses j itself
        ],
        ["d"],
    )
    out = passes.dce(passes.merge_einsums(g))
    assert body(out) == ["d:f64[3] = einsum[ja,aj,ij->i] a b a"]
    assert_same_values(g, out)


def test_merge_einsums_leaves_boolean_sums_apart():
    """A boolean einsum sums by OR; inside a float einsum its terms would be counted."""
    m = np.array([[True, False], [True, True]])
    g = build(
        {"a": m, "f": np.ones(2)},
        [("b", einsum_p, _einsum("ij,jk->ik"), ["a", "a"]), ("c", einsum_p, _einsum("ik,k->i"), ["b", "f"])],
        ["c"],
    )
    assert passes.merge_einsums(g).equations == g.equations


def test_merge_einsums_keeps_a_float32_einsum_apart_from_a_float64_one():
    """A float32 einsum's result is rounded to float32; merged into a float64 einsum, its
    products were computed in double (jit(f) gave 1 + 2**-11 + 2**-24 where f gives the float32
    product's 1 + 2**-11). A real einsum merges into a complex one of its precision."""
    a = np.full(1, 1 + 2**-12, np.float32)

    def f(a, b, c):
        return ea.einsum("i,j->", ea.einsum("i,i->i", a, a), c)

    for c in (np.ones(1), np.ones(1, np.complex64)):
        g = ea.make_graph(f)(a, a, c)
        merged = passes.merge_einsums(g)
        assert len(merged.equations) == (2 if c.dtype == np.float64 else 1), str(merged)
        assert_same_values(g, merged, args=[a, a, c], rtol=0, atol=0)
        for backend in (None, "numpy"):
            got = compiled(ea.jit(f, backend=backend))(a, a, c)
            assert got.dtype == np.result_type(np.float32, c.dtype) and got == 1 + 2**-11


@st.composite
def _chain_cases(draw):
    """An inner einsum (repeats, summed letters) whose result an outer einsum reads, maybe diagonally."""
    pool = "abcde"
    n_in = draw(st.integers(1, 3))
    inner = ["".join(draw(st.lists(st.sampled_from(pool), min_size=0, max_size=3))) for _ in range(n_in)]
    letters = sorted(set("".join(inner)))
    inner_out = "".join(draw(st.permutations(letters))[: draw(st.integers(0, len(letters)))])
    k_spec = "".join(draw(st.sampled_from("pqa")) for _ in inner_out)
    other = "".join(draw(st.lists(st.sampled_from("pqab"), max_size=3)))
    used = sorted(set(k_spec + other))
    out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
    return tuple(inner), inner_out, (k_spec, other), out


@given(_chain_cases())
def test_merge_spec_matches_numpy(case):
    """Merged subscripts compute what the two einsums did, whichever side is renamed (the
    outer one where the inner einsum has more operands and operand k reads no diagonal,
    else the inner one), and the letters handed back hold every letter of the merged one."""
    inner, inner_out, outer, out = case
    n = 2
    xs = [RNG.standard_normal((n,) * len(s)) for s in inner]
    y = RNG.standard_normal((n,) * len(outer[1]))
    mid = np.einsum(",".join(inner) + "->" + inner_out, *xs)
    expected = np.einsum(",".join(outer) + "->" + out, mid, y)
    merged, merged_out, letters = passes.merge_spec(outer, out, 0, inner, inner_out)
    got = np.einsum(",".join(merged) + "->" + merged_out, *xs, y)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    assert set("".join(merged) + merged_out) <= letters
    renamed_outer = len(inner) > 2 and len(set(outer[0])) == len(outer[0])
    assert merged[:-1] == inner if renamed_outer else merged_out == out


def test_a_chain_merged_one_product_at_a_time_renames_the_product():
    """A long chain merged into its reader: the chain's subscripts are spliced as they are
    (the two-operand product renamed instead), and the merged einsum is the chain."""
    inner = ("ab", "bc", "cd", "de")
    merged, out, letters = passes.merge_spec(("ae", "ec"), "ac", 0, inner, "ae")
    assert merged[:4] == inner and len(merged) == 5 and set("".join(merged)) <= letters
    assert merged[4][0] == "e" and merged[4][1] not in "abcde" and out == "a" + merged[4][1]


# -- plan_buffers ----------------------------------------------------------------------------------


def run_planned(graph, plan, args, seen=None):
    """Run `graph` as generated code would: ``out=`` the planned operand; variables die at their last read.

    `seen` collects, per planned equation, whether the result is the donor's memory.
    """
    last = {a: i for i, e in enumerate(graph.equations) for a in e.inputs if isinstance(a, str)}
    env = dict(graph.const_values)
    env.update(zip(graph.input_names, args))
    for i, e in enumerate(graph.equations):
        vals = [a.value if isinstance(a, Lit) else env[a] for a in e.inputs]
        if i in plan:
            donor = env[plan[i]]
            out = e.prim.impl(*vals, out=donor, **e.params)
            if seen is not None:
                seen.append(out is donor)
        else:
            out = e.prim.impl(*vals, **e.params)
        env[e.output] = out
        for a in {a for a in e.inputs if isinstance(a, str)}:
            if last.get(a) == i and a not in graph.const_values and a not in graph.input_names:
                del env[a]
    return [o.value if isinstance(o, Lit) else env[o] for o in graph.outputs]


def test_plan_buffers_reuses_dying_elementwise_results_in_place():
    g = passes.optimize(ea.make_graph(ea.grad(lambda x: ea.sum(ea.tanh(x) ** 2)))(np.ones(3)))
    assert body(g) == [
        "b:f64[3] = tanh a",
        "c:f64[3] = square b",  # the forward's b ** 2, shared with tanh's derivative 1 - b * b
        "g:f64[3] = multiply 2 b",
        "j:f64[3] = subtract 1 c",
        "k:f64[3] = multiply g j",
    ]
    plan = passes.plan_buffers(g)
    assert plan == {2: "b", 3: "c", 4: "g"}  # never the input a; b only once c and g have read it
    x = RNG.standard_normal(3)
    x0 = x.copy()
    seen = []
    got = run_planned(g, plan, [x], seen)
    assert seen == [True, True, True]
    np.testing.assert_allclose(got[0], run_graph(g, [x])[0], rtol=1e-14)
    np.testing.assert_array_equal(x, x0)  # the input was not written


def test_plan_buffers_never_writes_memory_a_live_view_reads():
    def f(x):
        b = ea.exp(x)
        c = ea.reshape(b, (6,))  # a view of b, read after sin(b)
        d = ea.sin(b)
        return d + ea.reshape(c, (2, 3))

    g = ea.make_graph(f)(np.ones((2, 3)))
    assert [e.op for e in g.equations] == ["exp", "reshape", "sin", "reshape", "add"]
    plan = passes.plan_buffers(g)
    assert plan == {4: "d"}  # not {2: "b"}: c still reads b's memory
    x = RNG.standard_normal((2, 3))
    expected = run_graph(g, [x])[0]
    np.testing.assert_allclose(run_planned(g, plan, [x])[0], expected, rtol=1e-14)
    wrong = run_planned(g, {2: "b"}, [x])[0]  # what ignoring the view would do
    assert not np.allclose(wrong, expected)


def test_plan_buffers_skips_outputs_inputs_views_scalars_and_other_types():
    g = build(
        {"a": np.ones(3), "s": np.ones(())},
        [
            ("b", PRIMITIVES["exp"], {}, ["a"]),  # a is an input
            ("c", PRIMITIVES["sin"], {}, ["b"]),  # b is an output
            ("d", einsum_p, _einsum("i->i"), ["c"]),  # a view of c
            ("e", PRIMITIVES["cos"], {}, ["d"]),  # d is a view
            ("f", PRIMITIVES["less"], {}, ["e", Lit(0.5)]),  # bool result, f64 operand
            ("g", PRIMITIVES["exp"], {}, ["s"]),
            ("h", PRIMITIVES["sin"], {}, ["g"]),  # 0-d: numpy returns scalars
        ],
        ["b", "f", "h"],
    )
    assert passes.plan_buffers(g) == {}


def test_plan_buffers_halves_the_peak_of_an_elementwise_chain():
    n = 200_000
    g = ea.make_graph(lambda x: ea.exp(ea.sin(ea.cos(x) * 2.0) + 1.0))(np.ones(n))
    plan = passes.plan_buffers(g)
    assert len(plan) == len(g.equations) - 1
    x = RNG.standard_normal(n)
    nbytes = x.nbytes
    with_plan = peak_bytes(lambda: run_planned(g, plan, [x]))
    without = peak_bytes(lambda: run_planned(g, {}, [x]))
    assert with_plan < 1.5 * nbytes < without, (with_plan / nbytes, without / nbytes)
    np.testing.assert_allclose(run_planned(g, plan, [x])[0], run_graph(g, [x])[0], rtol=1e-14)


@pytest.mark.parametrize("mode", ["fwd-over-rev", "rev-over-fwd", "rev-over-rev"])
def test_plan_buffers_on_optimized_hvp_programs(mode):
    g = passes.optimize(hvp_graph(mode))
    plan = passes.plan_buffers(g)
    assert plan
    args = random_args(g)
    np.testing.assert_allclose(run_planned(g, plan, args)[0], run_graph(g, args)[0], rtol=1e-12)


# -- optimize --------------------------------------------------------------------------------------


def test_optimize_trace_plus_diagonal_gradient_is_one_spread_of_one_plus_2d():
    g = trace_grad_graph()
    out = unchanged_by(passes.optimize, g)
    assert (len(g.equations), len(out.equations)) == (12, 4)
    assert body(out) == [
        "c:f64[4] = einsum[aa->a] a",
        "i:f64[4] = multiply 2 c",
        "l:f64[4] = add i 1.0",
        "m:f64[4,4] = spread[src=a, dst=aa, shape=(4,4)] l",
    ]
    assert out.consts == []
    assert_same_values(g, out)


def test_optimize_logistic_hvp():
    g = hvp_graph()
    out = passes.optimize(g)
    # (the primal gradient X^T g is never staged: hvp reads its pending contraction's tangent)
    assert (len(g.equations), len(out.equations)) == (23, 11)
    assert [n for n, _ in out.consts] == ["k0", "k1"]  # X and -y
    assert_same_values(g, out)


def test_optimize_five_operand_network_gradient():
    g = net_grad_graph()
    out = passes.optimize(g)
    assert (len(g.equations), len(out.equations)) == (13, 9)
    assert_same_values(g, out, args=[RNG.standard_normal(s) for s in NET_SHAPES])


def _dense_elementwise_work(graph):
    """Elements written by equations other than spreads and reshapes (which write views or one pass)."""
    return sum(int(np.prod(e.shape)) for e in graph.equations if e.prim not in (spread_p, reshape_p))


PROGRAMS = {
    "trace": trace_grad_graph,
    "two grads": two_grads_graph,
    "hvp": hvp_graph,
    "net": net_grad_graph,
    "net forward": lambda: ea.make_graph(net)(*[np.ones(s) for s in NET_SHAPES]),
    "sigmoid twice": lambda: ea.make_graph(ea.grad(lambda x: ea.sum(ea.sigmoid(x) * ea.sigmoid(x))))(
        np.ones(4)
    ),
    "mlp hessian": lambda: ea.make_graph(ea.hessian(lambda x: ea.sum(ea.tanh(X @ x) ** 2)))(np.ones(3)),
    "tanh hvp": lambda: ea.make_graph(lambda x, v: ea.hvp(lambda x: ea.sum(ea.tanh(x)), (x,), (v,))[0])(
        np.ones(4), np.ones(4)
    ),
    "squared error": lambda: ea.make_graph(ea.grad(lambda w: ea.mean((X @ w - Y) ** 2)))(np.ones(3)),
}


@pytest.mark.parametrize(
    "pass_, program, measure",
    [
        ("dce", "hvp", "equations"),
        ("simplify", "trace", "equations"),
        ("cse", "sigmoid twice", "equations"),
        ("cse", "mlp hessian", "equations"),
        ("algebra", "tanh hvp", "equations"),
        ("algebra", "squared error", "equations"),
        ("fold_spreads", "two grads", "work"),
        ("merge_einsums", "net", "equations"),
        ("merge_einsums", "net forward", "equations"),
    ],
)
def test_optimize_needs_each_pass(monkeypatch, pass_, program, measure):
    """Leaving `pass_` out of the pipeline leaves a bigger program: each pass earns its place."""
    g = PROGRAMS[program]()
    cost = (lambda h: len(h.equations)) if measure == "equations" else _dense_elementwise_work
    full = passes.optimize(g)
    monkeypatch.setattr(passes, "PIPELINE", tuple(p for p in passes.PIPELINE if p.__name__ != pass_))
    without = passes.optimize(g)
    assert cost(full) < cost(without)
    assert_same_values(g, full)
    assert_same_values(g, without)


def test_optimize_reaches_a_fixed_point():
    for make in PROGRAMS.values():
        once = passes.optimize(make())
        assert str(passes.optimize(once)) == str(once)


def _optimized_by_text(graph, max_rounds=8):
    """`optimize` as it was first written: a round's program printed whole and compared."""
    for _ in range(max_rounds):
        new = graph
        for p in passes.PIPELINE:
            new = p(new)
        if str(new) == str(graph):
            return new
        graph = new
    return graph


def _wide_network_grad_graph(n):
    """The gradient of every operand of a ring of `n` tensors along an explicit path: one
    einsum_vg equation of `n` operands, and an unpack per gradient."""
    syms = [chr(0x4E00 + i) for i in range(n)]
    eq = ",".join(syms[i] + syms[(i + 1) % n] for i in range(n)) + "->"
    path = [(0, 1)] * (n - 1)
    f = ea.value_and_grad(lambda *xs: ea.einsum(eq, *xs, optimize=path), argnums=tuple(range(n)))
    return ea.make_graph(f)(*[np.ones((2, 2))] * n)


@pytest.mark.parametrize("make", [*PROGRAMS.values(), lambda: _wide_network_grad_graph(12)])
def test_optimize_stops_where_the_printed_program_stops_changing(make):
    """The fixed-point test compares the equations the passes rebuilt (the others are the same
    objects), not the whole program printed: the same rounds give the same program."""
    g = make()
    assert str(passes.optimize(g)) == str(_optimized_by_text(g))


def test_optimize_prints_no_equation_it_left_alone(monkeypatch):
    """Optimizing a staged network's gradient (one wide einsum_vg, its unpacks) prints no
    equation: the first round drops some (programs of different lengths), the second leaves
    every equation the same object."""
    g = _wide_network_grad_graph(30)
    printed = []
    real = Equation.__str__
    monkeypatch.setattr(Equation, "__str__", lambda e: printed.append(e) or real(e))
    out = passes.optimize(g)
    assert printed == []
    assert ops(out)["einsum_vg"] == 1 and len(out.equations) < len(g.equations)


def test_a_walk_that_renames_nothing_reads_no_operand(monkeypatch):
    """`rewrite` renames an equation's operands only once something was renamed: a walk over a
    wide einsum that keeps every equation looks up none of its operands' names."""
    g = _wide_network_grad_graph(30)
    looked = []
    real = passes._Rewriter.atom
    monkeypatch.setattr(passes._Rewriter, "atom", lambda rw, a: looked.append(a) or real(rw, a))
    out = passes.rewrite(g, lambda e, rw: None)
    assert all(a is b for a, b in zip(out.equations, g.equations))
    assert len(looked) == len(g.outputs)  # (the outputs, looked up once as the program is made)


def test_params_key_reads_a_wide_einsums_subscripts_at_once(monkeypatch):
    """`cse`'s key of an einsum's parameters takes its subscripts, path and operand numbers as
    they are (strings, ints, tuples of ints compare as their typed keys would): as many
    `params_key` calls for 30 operands as for 3; and what the typed keys tell apart stays apart."""

    def calls(n):
        e = next(e for e in _wide_network_grad_graph(n).equations if e.op == "einsum_vg")
        counted = []
        real = passes.params_key
        monkeypatch.setattr(passes, "params_key", lambda v: counted.append(v) or real(v))
        passes.equation_key(e)
        monkeypatch.setattr(passes, "params_key", real)
        return len(counted)

    assert calls(30) == calls(3)
    key = passes.params_key
    assert key(("ab", "bc")) == key(("ab", "bc")) != key(["ab", "bc"])
    assert key(((0, 1), (0, 1))) == key(((0, 1), (0, 1)))
    assert key((1, 2)) != key((True, 2)) and key(((1, 0),)) != key(((True, 0),))
    assert key((1, 2)) != key((1.0, 2)) and key(("1", 2)) != key((1, 2))
    assert key(((0, 1), (0, 1))) != key(((0, 1), [0, 1]))


def test_optimized_programs_still_differentiate():
    """run_graph binds every primitive again: the optimized program is a function einad can differentiate."""
    g = passes.optimize(trace_grad_graph())
    a, t = RNG.standard_normal((4, 4)), RNG.standard_normal((4, 4))
    _, tangent = ea.jvp(lambda a: run_graph(g, [a])[0], (a,), (t,))
    _, expected = ea.jvp(ea.grad(trace_loss), (a,), (t,))
    np.testing.assert_allclose(tangent, expected, rtol=1e-12)


# -- random einsum losses --------------------------------------------------------------------------


@given(einsum_specs(), st.sampled_from(["grad", "hvp", "forward"]), st.sampled_from([np.float64, np.float32]))
def test_optimize_preserves_values_of_random_einsum_losses(case, kind, dtype):
    spec, shapes, seed = case
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s).astype(dtype) for s in shapes]
    tol = 1e-9 if dtype == np.float64 else 2e-4

    def loss(*ops):
        y = ea.einsum(spec, *ops)
        return ea.sum(ea.tanh(y) ** 2) + ea.sum(y) * 0.5

    nums = tuple(range(len(args)))
    if kind == "grad":
        g = ea.make_graph(ea.grad(loss, argnums=nums))(*args)
    elif kind == "hvp":
        tangents = [rng.standard_normal(s).astype(dtype) for s in shapes]
        g = ea.make_graph(lambda p, t: ea.hvp(loss, p, t))(args, tangents)
    else:
        g = ea.make_graph(lambda *ops: ea.einsum(spec, *ops))(*args)
    out = passes.optimize(g)
    assert len(out.equations) <= len(g.equations)
    flat = random_args(g, rng)
    assert_same_values(g, out, args=flat, rtol=tol, atol=tol)
    plan = passes.plan_buffers(out)
    for got, expected in zip(run_planned(out, plan, flat), run_graph(out, flat)):
        np.testing.assert_array_equal(got, expected)  # the same operations, in place
