"""einad.transforms.jit, ea.jit and staged programs: replay, retracing, static arguments,
composition, lowering, buffers, TracerError, and compiled programs on every array library.

The op, einsum, transform and mode suites also run under ea.jit (the `jit_mode`
fixture in conftest.py); this file tests what is particular to staging.
"""

import re
import sys
import threading

import numpy as np
import opt_einsum as oe
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opt_einsum.testing import rand_equation

import einad as ea
import einad.program
from einad import executor, network
from einad.rules import einsum as einsum_rules
from tests.support.functions import X3, Y3, f_xy, lib_arrays, lib_result
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, peak_bytes

RNG = np.random.default_rng(0)
X = RNG.standard_normal((4, 5))


# -- replay where a frozen constant would be wrong -------------------------------------------------

# losses whose derivative depends on signs, arg-max positions or shifts of the input
VALUE_DEPENDENT = {
    "relu": lambda x: ea.sum(ea.relu(x) * x),
    "abs": lambda x: ea.sum(ea.abs(x) ** 3),
    "max": lambda x: ea.sum(ea.max(x, axis=1) ** 2),
    "min": lambda x: ea.min(x) * 3.0,
    "maximum": lambda x: ea.sum(ea.maximum(x, 0.1 * x)),
    "clip": lambda x: ea.sum(ea.clip(x, -0.5, 0.5) ** 2),
    "where": lambda x: ea.sum(ea.where(x > 0, x**2, -x)),
    "comparison": lambda x: ea.sum(x * (x > 0.2)),
    "softmax": lambda x: ea.sum(ea.softmax(x, axis=1) * np.arange(5.0)),
    "log_softmax": lambda x: ea.sum(ea.log_softmax(x) ** 2),
    "logsumexp": lambda x: ea.logsumexp(x * 3.0, axis=0).sum(),
    "prod": lambda x: ea.sum(ea.prod(x, axis=0)),
    "sign": lambda x: ea.sum(ea.sign(x) * x**2),
}


@pytest.mark.parametrize("name", sorted(VALUE_DEPENDENT))
def test_a_compiled_gradient_replays_on_inputs_with_other_signs_and_maxima(name):
    f = VALUE_DEPENDENT[name]
    g = ea.jit(ea.value_and_grad(f))
    first = X
    others = [-X, X[::-1].copy(), np.roll(X, 2, axis=1), X * np.array([1, -1, 1, -1, 1])]
    g(first)
    for x in others:
        value, grad = g(x)
        want_value, want_grad = ea.value_and_grad(f)(x)
        assert_close(value, want_value)
        assert_close(grad, want_grad)
    assert g.cache_size() == 1


@pytest.mark.parametrize("name", ["relu", "max", "where", "softmax", "prod"])
def test_a_listed_gradient_program_runs_on_new_inputs(name):
    f = VALUE_DEPENDENT[name]
    graph = ea.make_graph(ea.grad(f))(X)
    for x in (-X, X[::-1].copy()):
        assert_close(graph(x), ea.grad(f)(x))


def test_the_relu_gradient_program_stages_its_mask():
    graph = ea.make_graph(ea.grad(lambda x: ea.sum(ea.relu(x))))(np.array([1.0, -1.0]))
    assert "greater" in [e.op for e in graph.equations]
    # no constant at all: the mask is computed from the input, the seed from the output
    assert graph.consts == []
    assert_close(graph(np.array([-1.0, 1.0])), [0.0, 1.0])


def test_a_hessian_of_a_jitted_max_replays():
    f = lambda x: ea.max(x) ** 2 + ea.sum(x**3)
    h = ea.jit(ea.hessian(f))
    for x in (np.array([1.0, 3.0, 2.0]), np.array([5.0, -1.0, 2.0])):
        assert_close(h(x), ea.hessian(f)(x))


# -- retracing -----------------------------------------------------------------------------------


def counting(f):
    runs = []

    def counted(*args, **kwargs):
        runs.append(1)
        return f(*args, **kwargs)

    return counted, runs


def test_f_runs_once_per_signature():
    f, runs = counting(lambda x, y: ea.sum(x * y))
    jf = ea.jit(f)
    for _ in range(3):
        jf(np.ones(3), np.ones(3))
    assert len(runs) == 1 and jf.cache_size() == 1
    jf(np.ones(4), np.ones(4))  # new shape
    jf(np.ones(3, np.float32), np.ones(3, np.float32))  # new dtype
    assert len(runs) == 3 and jf.cache_size() == 3
    jf(np.zeros(3), np.full(3, 2.0))  # same signature, other values
    assert len(runs) == 3


def test_static_arguments_are_part_of_the_signature_and_may_drive_python():
    def f(x, n, scale=1.0, mode="sum"):
        y = x**n if n > 1 else x  # Python branches on static values
        return ea.sum(y) * scale if mode == "sum" else ea.max(y) * scale

    jf = ea.jit(f, static_argnums=1, static_argnames="mode")
    x = np.array([1.0, 2.0, 3.0])
    assert_close(jf(x, 2), 14.0)
    assert_close(jf(x, 3), 36.0)
    assert_close(jf(x, 1, mode="max"), 3.0)
    assert_close(jf(x, 2, scale=2.0), 28.0)  # scale is traced: a keyword more is a new structure
    assert_close(jf(x, 2, scale=3.0), 42.0)
    assert jf.cache_size() == 4
    with pytest.raises(TypeError, match="hashable"):
        ea.jit(f, static_argnums=1)(x, [2])


@pytest.mark.parametrize(
    "move",
    [
        lambda x, n: ea.roll(x, n),
        lambda x, n: ea.repeat(x, n),
        lambda x, n: ea.tile(x, n),
        lambda x, n: ea.pad(x, n),
        lambda x, n: ea.split(x, n)[0],
        lambda x, n: ea.sum(ea.reshape(x, (2, 3)), axis=n - 1),
        lambda x, n: ea.expand_dims(x, n - 2),
    ],
    ids=["roll", "repeat", "tile", "pad", "split", "sum-axis", "expand_dims-axis"],
)
def test_a_shape_parameter_computed_inside_jit_is_a_tracer_error_naming_static_arguments(move):
    """A shift, a count, a width or an axis decides the result's shape or layout, so under jit it
    must be static. Traced, the moves failed as a numpy conversion "inside a transformation
    (numpy functions would silently drop its derivative)" and the axes as "axis must be an
    integer" (a TypeError swallowing the TracerError); each names static_argnums now, and the
    same function with the argument static runs as eager."""
    x = np.arange(6.0)
    with pytest.raises(ea.TracerError, match="value traced by einad.jit.*static_argnums"):
        ea.jit(move)(x, 2)
    assert_close(ea.jit(move, static_argnums=1)(x, 2), move(x, 2))


def test_static_values_that_compare_equal_but_differ_in_type_are_other_signatures():
    """1, 1.0 and True are equal and hash alike, so a program traced for one static value
    served the others: ``x ** 2.0`` of an integer array came back as integers (the program
    of ``x ** 2``), and Python branching on the type never ran. JAX keys static arguments
    by type too."""
    power = ea.jit(lambda x, p: x**p, static_argnums=1)
    x = np.arange(3)
    assert power(x, 2).dtype == np.int64
    got = power(x, 2.0)
    assert got.dtype == np.float64 and np.array_equal(got, [0.0, 1.0, 4.0])
    by_name = ea.jit(lambda x, p=1: x**p, static_argnames="p")
    assert by_name(x, p=2).dtype == np.int64 and by_name(x, p=2.0).dtype == np.float64
    kind = ea.jit(lambda x, n: x * (3.0 if isinstance(n, bool) else 2.0), static_argnums=1)
    assert_close(kind(np.ones(2), 1), np.full(2, 2.0))
    assert_close(kind(np.ones(2), True), np.full(2, 3.0))


def test_a_static_argument_is_static_by_position_and_by_keyword_as_in_jax():
    """JAX completes static_argnums and static_argnames from the function's signature, so a
    static argument is static however the caller passes it; einad took `n` passed as ``n=2``
    (static_argnums=1) or passed second (static_argnames="n") as traced: TracerError at the
    `range(n)`."""

    def f(x, n, mode="sum"):
        for _ in range(n):
            x = x * 2.0
        return ea.sum(x) if mode == "sum" else ea.max(x)

    x = np.array([1.0, 2.0, 3.0])
    by_num = ea.jit(f, static_argnums=1)
    assert_close(by_num(x, n=2), 24.0)
    assert_close(by_num(x, 2), 24.0)
    by_name = ea.jit(f, static_argnames=("n", "mode"))
    assert_close(by_name(x, 2), 24.0)
    assert_close(by_name(x, 3, "max"), 24.0)
    assert_close(by_name(x, n=1, mode="max"), 6.0)


@pytest.mark.parametrize(
    "keywords, error, match",
    [
        ({"static_argnums": 2}, ValueError, r"static_argnums=\(2,\) names an argument .* takes 2 positional"),
        ({"static_argnums": -3}, ValueError, "takes 2 positional"),
        ({"static_argnames": "m"}, ValueError, "static_argnames names 'm', which .* does not take"),
        ({"static_argnums": "n"}, TypeError, "static_argnums must be an integer"),
        ({"static_argnames": [1]}, TypeError, "static_argnames must be strings"),
    ],
    ids=["number-past", "negative-past", "unknown-name", "number-of-wrong-type", "name-of-wrong-type"],
)
def test_static_arguments_the_function_does_not_have_are_refused_where_jit_is_called(keywords, error, match):
    """As JAX's: a static argument past the function's parameters (or a name none of them has)
    is an error at ``ea.jit``; it used to be taken and ignored, the argument then traced."""
    with pytest.raises(error, match=match):
        ea.jit(lambda x, n: x * n, **keywords)


def test_static_arguments_reach_star_args_and_star_star_kwargs():
    x = np.arange(3.0)
    assert_close(ea.jit(lambda *a: a[0] * len(range(a[1])), static_argnums=1)(x, 2), 2 * x)
    assert_close(ea.jit(lambda x, **k: x * len(range(k["n"])), static_argnames="n")(x, n=3), 3 * x)


def test_python_scalars_are_weakly_typed_and_retrace_only_by_type():
    f, runs = counting(lambda x, s: x * s)
    jf = ea.jit(f)
    x32 = np.ones(3, np.float32)
    assert jf(x32, 2.0).dtype == np.float32
    assert_close(jf(x32, 5.0), np.full(3, 5.0))
    assert len(runs) == 1
    assert jf(x32, 2).dtype == np.float32  # an int is another signature
    assert len(runs) == 2
    assert ea.jit(lambda x, s: ea.einsum("i,->i", x, s))(x32, 2.0).dtype == np.float32
    # a staged Python number shows the dtype numpy gives it (Staged.dtype), as the program's input
    seen = []
    ea.jit(lambda n, b, f: seen.append((n.dtype, b.dtype, f.dtype)) or n * 2)(3, True, 2.5)
    assert seen == [(np.result_type(3), np.dtype(bool), np.dtype(np.float64))]


def test_structural_ops_on_a_python_number_give_numpys_results():
    """A Python number is staged as itself (weakly typed): flip indexed it with ``()``, which a
    Python number refuses (a TypeError, 'int' object is not subscriptable)."""
    cases = [
        (ea.flip, np.flip),
        (lambda s: ea.flip(s) * 2, lambda s: np.flip(s) * 2),
        (lambda s: ea.flip(ea.reshape(s, (1, 1)), 0), lambda s: np.flip(np.reshape(s, (1, 1)), 0)),
    ]
    for s in (3, 1.5, True, 0.5 + 2j):
        for f, reference in cases:
            want = np.asarray(reference(s))
            for backend in (None, "numpy"):
                got = compiled(ea.jit(f, backend=backend))(s)
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_array_equal(got, want)


def test_float32_stays_float32_through_a_compiled_gradient():
    x = np.ones((3, 4), np.float32)
    w = np.ones((4, 2), np.float32)
    gx, gw = compiled(ea.jit(ea.grad(lambda x, w: ea.sum(ea.tanh(x @ w)), (0, 1))))(x, w)
    assert gx.dtype == np.float32 and gw.dtype == np.float32


def test_pytrees_in_and_out():
    params = {"w": np.ones((3, 2)), "b": np.zeros(2)}

    def f(p, x):
        return {"y": x @ p["w"] + p["b"], "n": [ea.sum(p["w"]), None]}

    out = compiled(ea.jit(f))(params, np.ones((4, 3)))
    assert set(out) == {"y", "n"} and out["n"][1] is None
    assert_close(out["y"], np.full((4, 2), 3.0))
    assert_close(out["n"][0], 6.0)
    g = compiled(ea.jit(ea.grad(lambda p, x: ea.sum(f(p, x)["y"]))))(params, np.ones((4, 3)))
    assert_close(g["w"], np.full((3, 2), 4.0))
    assert_close(g["b"], np.full(2, 4.0))


def test_keyword_arguments_are_traced():
    jf = compiled(ea.jit(lambda x, *, w: ea.sum(x * w)))
    assert_close(jf(np.ones(3), w=np.arange(3.0)), 3.0)
    assert_close(ea.grad(lambda w: jf(np.ones(3), w=w))(np.arange(3.0)), np.ones(3))


# -- composition -------------------------------------------------------------------------------------


def loss(w, x):
    return ea.sum(ea.softplus(x @ w) * ea.tanh(w[0]))


W, XX = RNG.standard_normal(3), RNG.standard_normal((5, 3))


def test_jit_and_grad_compose_in_both_orders_and_with_itself():
    want = ea.grad(loss)(W, XX)
    assert_close(compiled(ea.jit(ea.grad(loss)))(W, XX), want)
    assert_close(ea.grad(ea.jit(loss))(W, XX), want)
    assert_close(compiled(ea.jit(ea.grad(ea.jit(loss))))(W, XX), want)
    assert_close(compiled(ea.jit(ea.jit(loss)))(W, XX), loss(W, XX).numpy())


def test_transforming_a_jitted_function_does_not_rerun_its_python():
    f, runs = counting(loss)
    jf = ea.jit(f)
    jf(W, XX)
    assert len(runs) == 1
    for transform in (ea.grad, ea.hessian, ea.jacfwd, ea.jacrev):
        transform(jf)(W, XX)
    ea.jvp(lambda w: jf(w, XX), (W,), (np.ones(3),))
    assert len(runs) == 1


@pytest.mark.parametrize("mode", ["fwd-over-rev", "rev-over-fwd", "rev-over-rev"])
def test_hvp_under_jit_in_every_mode(mode):
    v = RNG.standard_normal(3)
    want = ea.hessian(loss)(W, XX) @ v
    hv = compiled(ea.jit(lambda w, v: ea.hvp(loss, (w, XX), (v, np.zeros_like(XX)), mode=mode)[0]))
    assert_close(hv(W, v), want)
    (inner,) = ea.hvp(ea.jit(lambda w: loss(w, XX)), (W,), (v,), mode=mode)
    assert_close(inner, want)


def test_jacobians_and_hessian_of_and_under_jit():
    f = lambda w: ea.tanh(XX @ w) * w[1]
    assert_close(compiled(ea.jit(ea.jacfwd(f)))(W), ea.jacrev(f)(W))
    assert_close(ea.jacrev(ea.jit(f))(W), ea.jacfwd(f)(W))
    assert_close(ea.hessian(ea.jit(lambda w: loss(w, XX)))(W), ea.hessian(loss)(W, XX))


def test_jit_inside_imperative_backward():
    w = ea.tensor(W, requires_grad=True)
    ea.jit(loss)(w, XX).backward()
    assert_close(w.grad, ea.grad(loss)(W, XX))


def test_a_closure_over_an_enclosing_tracer_still_differentiates():
    def outer(w):
        inner = ea.jit(lambda x: ea.sum(x @ w))  # closes over grad's tracer
        return inner(XX)

    assert_close(ea.grad(outer)(W), XX.sum(axis=0))


# -- lower, source, results --------------------------------------------------------------------------


def test_lower_gives_the_optimized_program_and_its_source():
    jf = ea.jit(ea.grad(lambda x: ea.sum(ea.sin(x))))
    program = jf.lower(np.ones(3))
    assert isinstance(program, ea.Program) and isinstance(program, ea.Graph)
    assert str(program).startswith("{ lambda")
    assert "def program(" in program.source and "cos" in str(program)
    assert_close(program(np.zeros(3)), np.ones(3))
    assert jf.cache_size() == 1
    # JAX's idiom: lower(...).compile() is callable, and as_text() is the listing
    assert_close(jf.lower(np.ones(3)).compile()(np.full(3, np.pi)), -np.ones(3))
    assert program.as_text() == str(program)


# -- the first call computes once ------------------------------------------------------------------

CHAIN4 = "ij,jk,kl,li->"
CHAIN4_SHAPES = [(5, 6), (6, 7), (7, 8), (8, 5)]


def _count_pairwise_contractions(monkeypatch):
    """Count the pairwise contractions einad runs: staging and eager mode reach
    `executor._run_pair` through the executor, a compiled program through `rules.einsum` (its
    lowered einsums look the name up there when they are made and when they run), and a
    planned tree (`network`) through its products (`network._Pair`), or, run as a program,
    through the products the program binds (`network._Program.contractions` per run or
    `run_into`).
    Products that sum no letter (a gradient scaled by its cotangent) are not contraction
    work, and are not counted."""
    calls = []
    run_pair, pair_call, program_run = executor._run_pair, network._Pair.__call__, network._Program.run
    program_run_into = network._Program.run_into

    def counted(plan, a, b):
        if not plan.outer:  # a contraction (a product summing a letter), not a scaling
            calls.append(1)
        return run_pair(plan, a, b)

    def counted_product(self, pool, a, b, dest=None):
        if not self.plan.outer:
            calls.append(1)
        return pair_call(self, pool, a, b, dest)

    monkeypatch.setattr(executor, "_run_pair", counted)
    monkeypatch.setattr(einsum_rules, "_run_pair", counted)

    def counted_program(self, arrays, grads):
        calls.extend([1] * self.contractions)
        return program_run(self, arrays, grads)

    def counted_program_into(self, arrays, flat, start):  # (a scalar's value-and-gradient)
        calls.extend([1] * self.contractions)
        return program_run_into(self, arrays, flat, start)

    monkeypatch.setattr(network._Pair, "__call__", counted_product)
    monkeypatch.setattr(network._Program, "run", counted_program)
    monkeypatch.setattr(network._Program, "run_into", counted_program_into)
    return calls


def test_the_first_call_contracts_once_as_one_eager_call_does(monkeypatch):
    """The call that stages a program returns the values staging computed: the first call of
    a jitted value-and-gradient of a four-operand einsum does the pairwise contractions of one
    eager call, not those and the program's again; later calls run the (optimized) program.
    Fails if the first call runs the program after staging."""
    calls = _count_pairwise_contractions(monkeypatch)
    ops = [RNG.standard_normal(s) for s in CHAIN4_SHAPES]
    f = lambda *xs: ea.einsum(CHAIN4, *xs)
    eager = ea.value_and_grad(f, argnums=(0, 1, 2, 3))
    want = eager(*ops)
    one_eager_call = len(calls)
    vg = ea.jit(ea.value_and_grad(f, argnums=(0, 1, 2, 3)))
    calls.clear()
    first = vg(*ops)
    first_call = len(calls)
    calls.clear()
    again = vg(*ops)
    program_call = len(calls)
    assert one_eager_call > 0 and program_call > 0  # the counter sees both paths
    assert first_call == one_eager_call, (first_call, one_eager_call, program_call)
    for got in (first, again):
        assert_close(got[0], want[0], rtol=1e-12)
        for g, w in zip(got[1], want[1]):
            assert g.dtype == w.dtype and g.shape == w.shape
            assert_close(g, w, rtol=1e-12)
    # lower() stages and compiles, and returns no values: the call after it runs the program
    lowered = ea.jit(ea.value_and_grad(f, argnums=(0, 1, 2, 3)))
    assert isinstance(lowered.lower(*ops), ea.Program)
    calls.clear()
    lowered(*ops)
    assert len(calls) == program_call


RING_SHAPES = [(3, 4), (4, 5), (5, 2), (2, 3), (3, 3)]


def _ring_pairwise(a, b, c, d, e, calls=None):
    """A five-operand ring written as pairwise einsums, as quimb and cotengra contract a network
    one step at a time (and counting its calls)."""
    if calls is not None:
        calls.append(1)
    jl = ea.einsum("jk,kl->jl", b, c)
    il = ea.einsum("ij,jl->il", a, jl)
    li = ea.einsum("lm,mi->li", d, e)
    return ea.einsum("il,li->", il, li) ** 2


def test_a_jitted_gradient_of_a_network_written_pairwise_is_one_tree():
    """Under ea.jit, a gradient whose forward has einsums reading einsums is made from the
    forward's optimized program: the pieces merge into one network (`merge_einsums`), which
    the reverse pass takes as one tree (einsum's ``replay``): the program's value and gradients
    are one `einsum_vg` equation and its unpacks, with no pairwise pullbacks. Made from the
    forward as written, it had eleven einsums. Fails without the staging in `_reverse`, without
    the replay (an einsum_vjp recomputing the forward beside the forward's einsum), or with the
    merge dropping the path. Reference: the eager gradient."""
    ops = [RNG.standard_normal(s) for s in RING_SHAPES]
    vg = ea.jit(ea.value_and_grad(_ring_pairwise, argnums=(0, 1, 2, 3, 4)))
    program = vg.lower(*ops)
    prims = [e.prim.name for e in program.equations]
    assert prims.count("einsum_vg") == 1 and "einsum_vjp" not in prims, program
    # the one einsum left scales the packed gradients by the cotangent of the square
    assert [e.params["inputs"] for e in program.equations if e.prim.name == "einsum"] == [("", "a")]
    want = ea.value_and_grad(_ring_pairwise, argnums=(0, 1, 2, 3, 4))(*ops)
    for got in (vg(*ops), vg(*ops)):
        assert_close(got[0], want[0], rtol=1e-12)
        for g, w in zip(got[1], want[1]):
            assert_close(g, w, rtol=1e-12)
    # make_graph lists the derivative of the function as written (pairwise), not optimized
    graph = ea.make_graph(ea.grad(_ring_pairwise, argnums=(0, 1, 2, 3, 4)))(*ops)
    assert "einsum_vg" not in str(graph) and len(graph.einsums) >= 10


def test_the_forward_is_staged_again_only_where_einsums_read_einsums():
    """The first call of a jitted gradient runs the function once, and once more (staged on its
    own, to be optimized) only where its forward has an einsum reading another's result; a
    later call runs the program, not the function. Fails if every jitted gradient stages its
    function twice (an extra forward on every first call), or if the pairwise ring is not
    staged again."""
    ops = [RNG.standard_normal(s) for s in RING_SHAPES]
    calls: list[int] = []
    vg = ea.jit(ea.value_and_grad(lambda *xs: _ring_pairwise(*xs, calls=calls), argnums=(0, 1, 2, 3, 4)))
    vg(*ops)
    assert len(calls) == 2
    vg(*ops)
    assert len(calls) == 2
    calls.clear()

    def one_einsum(*xs):
        calls.append(1)
        return ea.einsum("ij,jk,kl,lm,mi->", *xs) ** 2

    ea.jit(ea.grad(one_einsum, argnums=(0, 1)))(*ops)
    assert len(calls) == 1


def test_a_jitted_gradient_closing_over_a_traced_value_is_made_as_written():
    """A gradient inside a jitted function, of a function closing over the jitted function's
    own (traced) argument, cannot be staged on its own: it is differentiated as written, with
    the same values. Reference: the eager computation."""
    ops = [RNG.standard_normal(s) for s in RING_SHAPES]

    def outer(a, *rest):
        return ea.grad(lambda b: _ring_pairwise(a, b, *rest[1:]))(rest[0])

    assert_close(ea.jit(outer)(*ops), outer(*ops), rtol=1e-12)


def test_a_jitted_network_under_an_eager_gradient_is_one_tree():
    """A jitted contraction of three operands differentiated eagerly: the program's einsum is
    replayed through `contract` (einsum's ``replay``), so the reverse trace keeps one tree node
    whose value and gradients are one `einsum_vg`, as for the eager einsum, instead of an
    einsum whose VJP (`einsum_vjp`) contracts the forward again. Fails without the replay."""
    a, b, c = (RNG.standard_normal(s) for s in [(3, 4), (4, 5), (5, 3)])
    f = ea.jit(lambda a, b, c: ea.einsum("ij,jk,ki->", a, b, c))
    text = str(ea.make_graph(ea.grad(f, argnums=(0, 1, 2)))(a, b, c))
    assert "einsum_vg" in text and "einsum_vjp" not in text, text
    got = ea.grad(f, argnums=(0, 1, 2))(a, b, c)
    assert_close(got[0], (b @ c).T, rtol=1e-12)
    assert_close(got[2], (a @ b).T, rtol=1e-12)


def _pairwise(eq, path):
    """A function contracting `eq` one pair at a time along `path` (as quimb does), each step an
    einsum of the letters the rest still needs; the result squared and summed."""
    ins, out = eq.split("->")
    steps = oe.contract_path(eq, *[np.ones([2] * len(s)) for s in ins.split(",")], optimize=list(path))[1]

    def f(*xs):
        work, specs = list(xs), ins.split(",")
        for contraction in steps.contraction_list:
            positions, _, text = contraction[0], contraction[1], contraction[2]
            picked = [work[i] for i in positions]
            for i in sorted(positions, reverse=True):
                del work[i], specs[i]
            work.append(ea.einsum(text, *picked))
            specs.append(text.split("->")[1])
        return ea.sum(work[0] ** 2) if out else work[0]

    return f


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), scalar=st.booleans(), twice=st.booleans())
def test_a_jitted_gradient_of_a_network_contracted_pairwise_matches_the_eager_one(seed, scalar, twice):
    """Random networks (6-9 tensors, bonds 2-3, open letters or none) contracted pair by pair
    along a random path, one of the arrays passed twice or not: the jitted value-and-gradient
    (made from the merged forward, `_through_program`) equals the eager one, and a scalar
    network's program is one tree (`einsum_vg`)."""
    rng = np.random.default_rng(seed)
    n = 6 + seed % 4
    eq, shapes = rand_equation(n, 3, n_out=0 if scalar else 2, d_min=2, d_max=3, seed=seed)
    ops = [rng.standard_normal(sh) / 2 for sh in shapes]
    if twice:  # the first array twice (the bra's and the ket's): its shape must fit both places
        ins = eq.split("->")[0].split(",")
        same = [k for k in range(1, n) if shapes[k] == shapes[0] and len(ins[k]) == len(ins[0])]
        if same:
            ops[same[0]] = ops[0]
    path = tuple(oe.contract_path(eq, *ops, optimize="random-greedy-128" if seed % 2 else "greedy")[0])
    f = _pairwise(eq, path)
    distinct = list({id(x): x for x in ops}.values())
    where = [next(i for i, x in enumerate(distinct) if x is o) for o in ops]
    g = lambda *xs: f(*[xs[i] for i in where])
    argnums = tuple(range(len(distinct)))
    want = ea.value_and_grad(g, argnums=argnums)(*distinct)
    jitted = ea.jit(ea.value_and_grad(g, argnums=argnums))
    for got in (jitted(*distinct), jitted(*distinct)):
        assert_close(got[0], want[0], rtol=1e-10)
        for a, b in zip(got[1], want[1]):
            assert_close(a, b, rtol=1e-9, atol=1e-12)
    if scalar:
        prims = [e.prim.name for e in jitted.lower(*distinct).equations]
        assert prims.count("einsum_vg") == 1, prims


def test_closed_over_arrays_are_read_when_traced_even_if_changed_in_place_later():
    """docs/jit.md: closed-over arrays are constants read when the program was traced. The
    program held the caller's array itself, so an in-place change reached the equations that
    read it while the passes had already folded the rest (here `sum(sin(w))` into a literal,
    `x * w` still reading `w`): a mix of old and new values, matching neither."""
    w = np.array([1.0, 2.0, 3.0])
    x = np.array([0.5, -1.0, 2.0])
    f = lambda x: ea.sum(x * w) + ea.sum(ea.sin(w))
    g = ea.grad(lambda x: ea.sum(x * w) * ea.sum(ea.cos(w)))
    want_f, want_g = np.asarray(f(x)), np.asarray(g(x))
    jf, jg = ea.jit(f), ea.jit(g)
    jf(x), jg(x)
    program = ea.make_graph(f)(x)
    w[:] = [0.0, 5.0, -4.0]
    for _ in range(2):
        assert_close(jf(x), want_f, rtol=1e-12)
        assert_close(jg(x), want_g, rtol=1e-12)
    assert_close(program(x), want_f, rtol=1e-12)


def test_a_jitted_gradient_of_chained_einsums_keeps_plain_number_arguments_plain():
    """Under ea.jit, a gradient whose forward chains einsums is staged again on its own
    (`_through_program`); that staging took every number argument as a traced input, so a
    count or a shape passed to the loss (here a jitted function's static argument) raised
    TracerError at `range(n)`, a slice or a reshape, while eager `grad` worked."""

    def loss(x, n, shape):
        z = ea.einsum("ij,jk->ik", ea.einsum("ij,jk->ik", x, x), x)
        for _ in range(n):
            z = z * 1.1
        return ea.sum(z[:n].reshape(shape) ** 2)

    x = RNG.standard_normal((4, 4))
    want = ea.grad(loss)(x, 2, (8,))
    jitted = ea.jit(lambda x, n: ea.grad(loss)(x, n, (4 * n,)), static_argnums=1)
    for got in (jitted(x, 2), jitted(x, 2)):
        assert_close(got, want, rtol=1e-12)


def test_a_read_only_array_closed_over_is_held_not_copied():
    """docs/jit.md: a read-only array that owns its memory is the program's constant as it is
    (no second copy of a large closed-over array); a writeable one, or a view, is copied."""
    w = np.arange(3.0)
    w.flags.writeable = False
    kept = list(ea.make_graph(lambda x: ea.sum(x * w))(np.ones(3)).const_values.values())
    assert len(kept) == 1 and kept[0] is w
    for other in (np.arange(3.0), w[::-1]):
        kept = list(ea.make_graph(lambda x, o=other: ea.sum(x * o))(np.ones(3)).const_values.values())
        assert len(kept) == 1 and kept[0] is not other and not np.shares_memory(kept[0], other)


def test_a_program_called_at_its_signature_runs_and_with_another_raises_naming_both():
    """A gradient program compiled at (3,) replayed at (1,) gave a (3,) gradient; at f32 it
    would compute in the dtypes it was planned for. Either is a TypeError naming the type the
    program takes and the one given, per leaf that differs."""
    program = ea.jit(ea.grad(lambda x, y: ea.sum(x * y) * 2.0)).lower(np.zeros(3), np.zeros(3))
    assert_close(program(np.ones(3), np.arange(3.0)), 2 * np.arange(3.0))
    with pytest.raises(TypeError, match=re.escape("this program takes f64[3] for input a, got f64[1] (")):
        program(np.ones(1), np.ones(3))
    with pytest.raises(TypeError, match=re.escape("this program takes f64[3] for input b, got f32[3] (")):
        program(np.ones(3), np.ones(3, np.float32))
    both = "f64[3] for input a, got i64[3]; f64[3] for input b, got f64[]"
    with pytest.raises(TypeError, match=re.escape(both)):
        program(np.ones(3, np.int64), np.float64(1.0))
    with pytest.raises(TypeError, match="structured as"):  # the pytree structure, as before
        program(np.ones(3), (np.ones(3),))


def test_a_program_takes_python_numbers_where_it_traced_them():
    """jit traces a Python number weakly typed (x32 * 2.0 stays float32): its program takes a
    number of the same Python type there, and neither an int nor a numpy scalar, which numpy
    promotes otherwise."""
    x32 = np.ones(3, np.float32)
    program = ea.jit(lambda x, s: x * s).lower(x32, 2.0)
    out = program(x32, 3.0)
    assert out.dtype == np.float32
    assert_close(out, np.full(3, 3.0))
    with pytest.raises(TypeError, match=re.escape("takes Python float for input b, got Python int")):
        program(x32, 3)
    with pytest.raises(TypeError, match=re.escape("takes Python float for input b, got f64[]")):
        program(x32, np.float64(3.0))
    strong = ea.jit(lambda x, s: x * s).lower(x32, np.float64(2.0))  # a numpy scalar is an f64[]
    assert strong(x32, np.array(3.0)).dtype == np.float64
    with pytest.raises(TypeError, match=re.escape("takes f64[] for input b, got Python int")):
        strong(x32, 3)


def test_the_jitted_function_retraces_where_its_program_refuses():
    """The check is the Program's, called directly: the jitted function compiles a program
    per signature, and grad(jit(f)) and vmap(jit(f)) replay theirs on traced values."""
    jf = ea.jit(lambda x: ea.mean(x))
    program = jf.lower(np.zeros(4))
    with pytest.raises(TypeError):
        program(np.array([1.0, 3.0]))
    assert_close(jf(np.array([1.0, 3.0])), 2.0)
    assert jf.cache_size() == 2
    assert_close(ea.grad(jf)(np.ones(4)), np.full(4, 0.25))
    assert_close(ea.vmap(jf)(np.arange(8.0).reshape(2, 4)), [1.5, 5.5])


def test_a_program_warns_in_the_users_steps_as_numpy_does_but_not_in_the_derivative_rules():
    """numpy's floating-point warnings: the user's own 1 / 0 warns in a compiled program as it
    does eagerly; the steps a derivative rule staged (sqrt's derivative 1 / (2 sqrt x) at 0)
    run under errstate(all="ignore"), as the rules do eagerly (core.QuietRules, core.in_rules;
    every warning is an error in this suite). Kills: core.in_rules 9, 10"""
    x = np.zeros(2)

    def staged_and_run():  # staging computes too: the second call runs the program alone
        f = ea.jit(lambda x: 1.0 / x)
        for _ in range(2):
            with pytest.warns(RuntimeWarning, match="divide by zero"):
                f(x)
        grad = ea.jit(ea.grad(lambda x: ea.sum(ea.sqrt(x))))
        for _ in range(2):
            np.testing.assert_array_equal(grad(x), np.full(2, np.inf))

    staged_and_run()
    errors = []  # and on a thread where no derivative rule has run yet
    thread = threading.Thread(target=lambda: _record_errors(staged_and_run, errors))
    thread.start()
    thread.join()
    assert not errors, errors


def _record_errors(f, errors):
    try:
        f()
    except BaseException as e:  # noqa: BLE001  (reported by the test on the main thread)
        errors.append(e)


@pytest.mark.parametrize("call", ["staging", "program"])
def test_results_are_fresh_writable_numpy_arrays(call):
    """On the call that stages the program (which returns what staging computed) and on the
    calls that run it, results share no memory with an input, a constant or one another, and
    are writable."""
    x, C = np.arange(3.0), np.ones(2)
    f = ea.jit(lambda x: (x, x, C, x.reshape(3, 1), 2.0, ea.broadcast_to(ea.sin(x[0]), (2,))))
    g = ea.jit(ea.grad(lambda x: ea.sum(ea.broadcast_to(x, (2, 3)))))
    if call == "program":
        f(x), g(x)
    y, same, const, view, number, wide = f(x)  # wide: a fresh array's read-only broadcast
    for r in (y, same, const, view, number, wide):
        assert type(r) is np.ndarray and r.flags.writeable
    assert not np.shares_memory(y, x) and not np.shares_memory(y, same) and not np.shares_memory(view, x)
    assert not np.shares_memory(const, C)
    assert number.dtype == np.float64 and number.shape == ()
    y[0] = 7.0
    assert x[0] == 0.0
    g(x)[0] = 1.0  # writable


def test_compiled_program_frees_intermediates_after_their_last_use():
    """The generated code deletes a variable after its last use: a chain of 12 steps on a
    large array peaks at a few arrays, not twelve (fails if the `del` lines are dropped)."""
    n = 1 << 17
    x = np.ones(n)

    def chain(x):
        for _ in range(12):
            x = ea.sin(x) + 1.0
        return ea.sum(x)

    jf = ea.jit(chain)
    peak = peak_bytes(jf, x)
    assert peak < 4 * x.nbytes, peak / x.nbytes


def test_compiled_elementwise_steps_write_into_operands_that_die():
    """A ufunc step whose operand dies there writes into that operand's memory
    (passes.plan_buffers): the chain holds one array at a time, not two (fails if
    the generated code stops passing out=)."""
    n = 1 << 17
    x = np.ones(n)
    jf = ea.jit(lambda x: ea.sum(ea.tanh(ea.sin(x) * 2.0 + 1.0) ** 2), backend="numpy")
    assert "out=" in jf.lower(x).source
    peak = peak_bytes(jf, x)
    assert peak < 1.5 * x.nbytes, peak / x.nbytes
    assert_close(jf(x), np.sum(np.tanh(np.sin(x) * 2.0 + 1.0) ** 2))


def test_a_fresh_diagonal_spread_is_returned_without_a_copy():
    """A spread onto a diagonal writes a new array (only a broadcast spread is a view of
    its source), so a gradient that is one is returned as it is: one n x n buffer at the
    peak, not two (fails if every spread counts as a view of a program input)."""
    A, g = np.ones((512, 512)), np.arange(512.0)
    vg = ea.jit(ea.value_and_grad(lambda A, g: ea.sum(ea.einsum("ii->i", A) * g)))
    peak = peak_bytes(vg, A, g)
    _, grad = vg(A, g)
    assert peak < 1.5 * A.nbytes, peak / A.nbytes
    assert_close(np.diagonal(grad), g)
    assert not np.shares_memory(grad, g)


# -- aliasing, as each primitive declares it (issue 26) --------------------------------------------


def _probe(name, impl, aliasing):
    """A linear primitive of the test's own (every mode declared), with the aliasing kind given."""
    prim = ea.core.Primitive(name, impl)
    return ea.core.declare(
        prim,
        jvp=lambda ts, ans, vals, p: ea.core.bind(prim, ts, {}),
        vjp=lambda g, ans, vals, p, needed: [ea.core.bind(prim, (g,), {})],
        batch=ea.core.ride_along,
        aliasing=aliasing,
        linear=True,
    )


def test_a_primitive_declared_a_view_never_hands_an_input_over_and_a_fresh_one_is_not_copied():
    """What a new primitive declares is all `jit` reads: a result declared a view of an operand
    is copied before it is returned (never the caller's input) and is not written into by a
    later step; one declared fresh is returned as it is and lends its memory to the next step.
    Observable in the generated code: one ``copy(`` for the view, none for the fresh result."""
    flipped = _probe("flipped_view", lambda x: x[::-1], "view")  # numpy's view, reversed
    doubled = _probe("doubled_fresh", lambda x: x * 2.0, "fresh")
    x = np.arange(4.0)
    view = ea.jit(lambda x: ea.core.bind(flipped, (x,), {}), backend="numpy")
    fresh = ea.jit(lambda x: ea.core.bind(doubled, (x,), {}), backend="numpy")
    assert view.lower(x).source.count("copy(") == 1
    assert "copy(" not in fresh.lower(x).source and "owned(" not in fresh.lower(x).source
    for _ in range(2):  # the call that stages, and a call of the program
        y = view(x)
        assert not np.shares_memory(y, x) and y.flags.writeable
        y[0] = -1.0
        np.testing.assert_array_equal(x, np.arange(4.0))
        np.testing.assert_array_equal(fresh(x), 2 * np.arange(4.0))
    # a step after it: the view's memory is the input's, never an `out=`; the fresh one's is
    after_view = ea.jit(lambda x: ea.exp(ea.core.bind(flipped, (x,), {})), backend="numpy")
    after_fresh = ea.jit(lambda x: ea.exp(ea.core.bind(doubled, (x,), {})), backend="numpy")
    assert "out=" not in after_view.lower(x).source and "out=" in after_fresh.lower(x).source
    assert_close(after_view(x), np.exp(np.arange(4.0)[::-1]))
    np.testing.assert_array_equal(x, np.arange(4.0))
    # and the derivative program, which binds the same primitive, hands nothing over either
    g = ea.jit(ea.grad(lambda x: ea.sum(ea.core.bind(flipped, (x,), {}) * x)))(x)
    assert_close(g, 2 * x[::-1])  # d/dx_i of sum_j x_(n-1-j) x_j


def test_real_and_imag_views_of_an_input_are_neither_returned_nor_written_into():
    """numpy's real and imag of a complex array are views of it: declared may_view, a jitted
    ``imag(z)`` is a copy, and ``exp(2 * imag(z))`` computes in a buffer of its own (before
    the declarations, the numpy backend wrote the result into the imaginary part of `z`)."""
    z = np.array([1 + 2j, 3 + 4j])
    for op in (ea.real, ea.imag):
        assert not np.shares_memory(ea.jit(op)(z), z)
    for backend in ("numpy", "llvm"):
        f = ea.jit(lambda z: ea.exp(ea.imag(z) * 2.0), backend=backend)
        for _ in range(2):
            assert_close(f(z), np.exp(2 * z.imag))
            np.testing.assert_array_equal(z, [1 + 2j, 3 + 4j])


# -- TracerError -----------------------------------------------------------------------------------


def branchy(x):
    if ea.sum(x) > 0:
        return ea.sum(x**2)
    return ea.sum(-x)


def test_python_control_flow_on_traced_values_raises_under_jit_but_works_under_grad():
    x = np.array([1.0, 2.0])
    assert_close(ea.grad(branchy)(x), 2 * x)  # eager: the value is known
    assert_close(ea.grad(branchy)(-x), -np.ones(2))
    with pytest.raises(ea.TracerError, match="static_argnums") as info:
        ea.jit(branchy)(x)
    assert isinstance(info.value, TypeError)
    with pytest.raises(ea.TracerError):
        ea.jit(lambda x: float(ea.sum(x)))(x)
    with pytest.raises(ea.TracerError):
        ea.jit(ea.grad(branchy))(x)
    with pytest.raises(ea.TracerError):
        ea.make_graph(branchy)(x)


def test_a_leaked_tracer_raises_where_it_is_used():
    saved = []

    def f(x):
        saved.append(x * 2.0)
        return ea.sum(x)

    ea.grad(f)(np.ones(3))
    with pytest.raises(ea.TracerError, match="after that transformation returned"):
        ea.grad(lambda y: ea.sum(saved[0] * y))(np.ones(3))
    with pytest.raises(ea.TracerError):
        ea.sum(saved[0])
    with pytest.raises(ea.TracerError):
        np.asarray(saved[0])
    with pytest.raises(ea.TracerError):  # returned from another transformation
        ea.jvp(lambda y: saved[0], (np.ones(3),), (np.ones(3),))


def test_a_leaked_staged_value_raises_too():
    saved = []
    ea.jit(lambda x: saved.append(x) or ea.sum(x))(np.ones(2))
    with pytest.raises(ea.TracerError):
        ea.exp(saved[0])
    ea.jvp(lambda x: saved.append(x) or x, (np.ones(2),), (np.ones(2),))
    with pytest.raises(ea.TracerError):
        ea.exp(saved[-1])


def test_a_primitive_without_a_rule_for_a_mode_says_so():
    from einad.core import Primitive, bind, declare

    prim = declare(
        Primitive("half_rule", np.sin), jvp=lambda ts, ans, vals, p: ts[0] * np.cos(vals[0]), aliasing="fresh"
    )
    f = lambda x: ea.sum(bind(prim, (x,), {}))
    ea.jvp(f, (np.ones(2),), (np.ones(2),))
    with pytest.raises(NotImplementedError) as err:
        ea.grad(f)(np.ones(2))
    assert str(err.value) == "einad has no reverse-mode (VJP) rule for the primitive 'half_rule'"


def test_a_tensor_as_a_python_index():
    items = [10, 20, 30]
    assert items[ea.tensor(1)] == 20  # an integer tensor is an index, as numpy's integers are
    with pytest.raises(TypeError, match="integer"):
        items[ea.tensor(1.0)]
    with pytest.raises(ea.TracerError):  # under jit its value is not known
        ea.jit(lambda i, x: x * items[i])(np.int64(1), np.ones(2))


# -- every array library ---------------------------------------------------------------------------


def test_jit_value_and_grad_run_on_the_library(lib):
    x, y = lib_arrays(lib, X3, Y3)
    jf = ea.jit(f_xy)
    jg = compiled(ea.jit(ea.grad(f_xy, (0, 1))))
    with lib.lazy():
        value = jf(x, y)
        gx, gy = jg(x, y)
        again = jf(x, y)  # the compiled program, replayed
        outer = ea.grad(jf)(x, y)  # the program interpreted under grad
    assert jf.cache_size() == 1
    ex, ey = ea.grad(f_xy, (0, 1))(X3, Y3)
    assert_close(lib_result(lib, value), f_xy(X3, Y3).numpy())
    assert_close(lib_result(lib, again), f_xy(X3, Y3).numpy())
    assert_close(lib_result(lib, gx), ex)
    assert_close(lib_result(lib, gy), ey)
    assert_close(lib_result(lib, outer), ex)


def test_jit_retraces_when_the_library_changes(lib):
    jf = ea.jit(ea.grad(f_xy))
    first = jf(X3, Y3)
    assert isinstance(first, np.ndarray)
    x, y = lib_arrays(lib, X3, Y3)
    second = jf(x, y)
    assert_close(lib_result(lib, second), first)
    assert jf.cache_size() == (1 if lib.name == "numpy" else 2)
    assert isinstance(jf(X3, Y3), np.ndarray)  # numpy's program is still there


def test_jit_program_with_numpy_literals_and_constants(lib):
    """Literals numpy scalars and constants a pass makes are converted to the library once."""
    x, y = lib_arrays(lib, X3, Y3)

    def h(a, b):
        return ea.sum(ea.einsum("ij,jk->ik", a, b) * 2.0 + a * 1.0 + 0.0 * b)

    jh = compiled(ea.jit(ea.value_and_grad(h)))
    with lib.lazy():
        value, grad = jh(x, y)
    e_value, e_grad = ea.value_and_grad(h)(X3, Y3)
    assert_close(lib_result(lib, value), e_value)
    assert_close(lib_result(lib, grad), e_grad)


def test_jit_of_a_zero_gradient_on_the_library(lib):
    """A gradient that is zero (an unused input, a flat op such as floor) is made under jit as
    zeros next to a staged value: on torch, dask and array-api-strict its device was asked of
    the staged stand-in, which has none (AttributeError 'Staged' object has no attribute 'device')."""
    x, y = lib_arrays(lib, X3, Y3)
    unused = ea.jit(ea.grad(lambda a, b: ea.sum(a * 2.0), (0, 1)))
    flat = ea.jit(ea.grad(lambda a: ea.sum(ea.floor(a) * a)))
    with lib.lazy():
        ga, gb = unused(x, y)
        gf = flat(x)
    assert lib.owns(gb) and lib.owns(gf)
    assert_close(lib_result(lib, ga), np.full_like(X3, 2.0))
    assert_close(lib_result(lib, gb), np.zeros_like(Y3))
    assert_close(lib_result(lib, gf), np.floor(X3))


def test_a_lowered_program_is_differentiable_and_mappable(monkeypatch):
    """``ea.grad(program)`` used to return zeros (the compiled function computes on plain arrays,
    dropping the inputs' traces): under a transformation a program runs its optimized
    equations as einad operations, and outside one its compiled function (no equation run)."""
    f = lambda x, y: ea.sum(ea.tanh(ea.einsum("ij,jk->ik", x, y)) * x[:, :1])
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    prog = ea.jit(f).lower(x, y)
    for a, b in zip(ea.grad(prog, (0, 1))(x, y), ea.grad(f, (0, 1))(x, y)):
        assert_close(a, b)
    assert_close(ea.hessian(prog)(x, y), ea.hessian(f)(x, y))
    tangents = (rng.standard_normal((3, 4)), rng.standard_normal((4, 2)))
    assert_close(ea.jvp(prog, (x, y), tangents)[1], ea.jvp(f, (x, y), tangents)[1])
    assert_close(ea.vmap(prog, in_axes=(0, None))(np.stack([x, 2 * x]), y), np.array([f(x, y), f(2 * x, y)]))
    runs = []
    real = einad.program.run_graph
    monkeypatch.setattr(einad.program, "run_graph", lambda *a: runs.append(1) or real(*a))
    assert_close(prog(x, y), f(x, y))
    assert runs == []


def test_a_lowered_program_refuses_another_array_library():
    """A program lowered for numpy arrays, called on torch tensors, used to return numpy
    values without a word: it raises, naming both libraries (the jitted function compiles
    a program per library)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    f = lambda x: ea.sum(ea.tanh(x) * x)
    x = np.linspace(0.0, 1.0, 5)
    prog = ea.jit(f).lower(x)
    with pytest.raises(TypeError, match=r"computes on numpy arrays, got torch"):
        prog(torch.tensor(x))
    on_torch = ea.jit(f).lower(torch.tensor(x))
    with pytest.raises(TypeError, match=r"computes on torch arrays, got numpy"):
        on_torch(x)
    assert_close(on_torch(torch.tensor(x)).numpy(), prog(x))


# -- the direct dispatch of numpy arguments (issue 25) ------------------------------------------------


def _python_calls(fn):
    """The Python functions called while `fn()` runs (frames, not C calls), and its result."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return count[0], out


def test_a_numpy_call_reaches_its_program_in_two_calls():
    """After the first call, positional numpy arrays find their program by their shapes and
    dtypes alone: the jitted function and that key are the only Python calls besides the
    program's own (the general path flattens and signs every argument: some 60 more)."""
    w, x = RNG.standard_normal(5), RNG.standard_normal((4, 5))
    jf = ea.jit(lambda w, x: ea.sum(ea.tanh(x @ w) ** 2), backend="numpy")
    jf(w, x)
    program = jf.lower(w, x)
    own, _ = _python_calls(lambda: program.fn(w, x))
    calls, out = _python_calls(lambda: jf(w, x))
    assert calls <= own + 2, (calls, own)
    assert type(out) is np.ndarray and out.shape == ()
    assert_close(out, np.sum(np.tanh(x @ w) ** 2))


def test_the_direct_dispatch_keeps_the_signatures_apart():
    traced = []

    def f(a, b):
        traced.append(a.shape)
        return {"s": a * b, "t": (a + b,)}

    jf = ea.jit(f, backend="numpy")
    a, b = np.arange(3.0), np.ones(3)
    for _ in range(2):
        out = jf(a, b)
    assert len(traced) == 1 and jf.cache_size() == 1
    assert_close(out["s"], a)
    assert type(out["t"]) is tuple
    assert_close(out["t"][0], a + 1)
    jf(a.astype(np.float32), b)  # another dtype: another program
    jf(np.ones((2, 3)), np.ones((2, 3)))  # another shape
    jf(a, 2.0)  # a Python number: the general path (weakly typed)
    jf(a, b=b)  # a keyword: the general path (its own signature)
    assert jf.cache_size() == 5 and len(traced) == 5
    out32 = jf(a.astype(np.float32), b)
    assert out32["s"].dtype == np.float64  # float32 times float64, as numpy promotes
    # under a transformation the arguments are Tensors: the program runs equation by equation
    g = ea.grad(lambda a: ea.sum(jf(a, b)["s"] ** 2))(a)
    assert_close(g, 2 * a)


def test_a_value_and_gradient_unpacks_each_block_in_one_python_call():
    """The staged value-and-gradient of a scalar network unpacks each operand's gradient from
    one flat array (`unpack_p`): lowered, each unpack is one Python call (the slice made at
    compile time), not `_unpack_impl`'s dispatch; the gradients are the eager ones."""
    ops = [RNG.standard_normal(s) for s in ((3, 4), (4, 5), (5, 6), (6, 3))]
    f = lambda *xs: ea.einsum("ab,bc,cd,da->", *xs)
    jf = ea.jit(ea.value_and_grad(f, argnums=(0, 1, 2, 3)), backend="numpy")
    program = jf.lower(*ops)
    unpacks = program.source.count("# unpack")
    assert unpacks >= 5  # the value and four gradients (and the gradients' vector)
    names = []

    def profile(frame, event, arg):
        if event == "call":
            names.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        value, *grads = program.fn(*ops)
    finally:
        sys.setprofile(None)
    assert "_unpack_impl" not in names and names.count("unpack") == unpacks
    want_value, want_grads = ea.value_and_grad(f, argnums=(0, 1, 2, 3))(*ops)
    assert_close(value, want_value)
    for g, w in zip(grads, want_grads):
        assert_close(g, w)


def test_jit_takes_jaxs_donation_keywords_and_never_writes_into_an_argument():
    """jax.jit's donate_argnums/donate_argnames (refused before) are hints: einad's programs
    never write into an argument, donated or not; they are checked as JAX checks them."""
    x = np.arange(4.0)
    before = x.copy()
    f = ea.jit(lambda x, y: x * 2.0 + y, donate_argnums=0, donate_argnames="y")
    assert_close(f(x, y=x), 3 * before)
    assert_close(ea.jit(lambda x: x + 1.0, donate_argnums=(0,))(x), before + 1.0)
    np.testing.assert_array_equal(x, before)
    with pytest.raises(TypeError, match="donate_argnums must be an integer"):
        ea.jit(lambda x: x, donate_argnums=1.5)
    with pytest.raises(TypeError, match="donate_argnames must be strings"):
        ea.jit(lambda x: x, donate_argnames=[0])
