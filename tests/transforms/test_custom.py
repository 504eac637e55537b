"""einad.transforms.custom: custom_vjp, custom_jvp and checkpoint, with JAX's semantics under
every transformation, and checkpoint and custom_vjp on every array library.

Every test runs eagerly and with every transformation wrapped in ea.jit (the `jit_mode`
mark), on every library too.
"""

import numpy as np
import pytest

import einad as ea
from tests.support.functions import X3, Y3, g_xy, lib_arrays, lib_result
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, peak_bytes

pytestmark = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

# -- custom_vjp ------------------------------------------------------------------------------


@ea.custom_vjp
def clip_gradient(x, lo, hi):
    return x


def _clip_fwd(x, lo, hi):
    return x, (lo, hi)


def _clip_bwd(res, g):
    lo, hi = res
    return (ea.clip(g, lo, hi), None, None)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def _scaled_sin(x):
    return ea.sum(clip_gradient(ea.sin(x), -0.5, 0.5) * 3.0)


X = np.array([0.3, -1.2, 2.0])


def test_custom_vjp_value_is_the_function():
    out = clip_gradient(X, -0.5, 0.5)
    assert isinstance(out, ea.Tensor)
    assert_close(out.numpy(), X)
    assert_close(compiled(ea.jit(_scaled_sin))(X), np.sum(3.0 * np.sin(X)))


def test_custom_vjp_grad_uses_bwd():
    # the true derivative is 3 cos(x); the custom rule clips the 3 to 0.5 first
    expected = np.clip(3.0, -0.5, 0.5) * np.cos(X)
    assert_close(ea.grad(_scaled_sin)(X), expected)
    value, g = ea.value_and_grad(_scaled_sin)(X)
    assert_close(value, np.sum(3.0 * np.sin(X)))
    assert_close(g, expected)
    _, pull = ea.vjp(lambda x: clip_gradient(x, -1.0, 1.0), X)
    assert_close(pull(np.array([5.0, -5.0, 0.5]))[0], [1.0, -1.0, 0.5])


def test_grad_of_jit_uses_bwd():
    expected = 0.5 * np.cos(X)
    assert_close(ea.grad(ea.jit(_scaled_sin))(X), expected)
    assert_close(compiled(ea.jit(ea.grad(ea.jit(_scaled_sin))))(X), expected)


def test_custom_vjp_is_one_equation():
    graph = ea.make_graph(_scaled_sin)(X)
    ops = [e.op for e in graph.equations]
    assert ops.count("custom_vjp_call") == 1
    assert "custom_vjp_call[call=clip_gradient]" in str(graph)


@ea.custom_vjp
def sq(x, y):
    return x * x * y


sq.defvjp(lambda x, y: (x * x * y, (x, y)), lambda res, g: (2.0 * res[0] * res[1] * g, res[0] ** 2 * g))


def test_custom_vjp_true_rule_matches_gradcheck_and_jacobians():
    x, y = np.array([1.0, 2.0]), np.array([0.5, -1.5])
    ea.gradcheck(lambda x, y: ea.sum(sq(x, y)), x, y)
    jac = np.diag(2 * x * y)
    assert_close(ea.jacrev(sq)(x, y), jac)
    assert_close(ea.jacfwd(sq)(x, y), jac)  # forward mode: the function's own derivative
    assert_close(ea.jvp(sq, (x, y), (np.ones(2), np.zeros(2)))[1], 2 * x * y)


def test_custom_vjp_second_order_differentiates_bwd():
    # d/dx of bwd's 2 x y g: 2 y per element
    x, y = np.array([1.0, 2.0]), np.array([0.5, -1.5])
    assert_close(ea.hessian(lambda x: ea.sum(sq(x, y)))(x), np.diag(2 * y))
    assert_close(ea.grad(lambda x: ea.sum(ea.grad(lambda x: ea.sum(sq(x, y)))(x)))(x), 2 * y)


def test_custom_vjp_under_vmap():
    xs = np.array([[0.3, 1.0], [2.0, -1.0], [0.1, 0.2]])
    assert_close(ea.vmap(lambda x: clip_gradient(x, -1.0, 1.0))(xs), xs)
    per_example = ea.vmap(ea.grad(_scaled_sin))(xs)
    assert_close(per_example, 0.5 * np.cos(xs))
    assert_close(ea.grad(lambda xs: ea.sum(ea.vmap(_scaled_sin)(xs)))(xs), 0.5 * np.cos(xs))


def test_custom_vjp_pytree_argument_and_none_cotangent():
    @ea.custom_vjp
    def f(p, s):
        return p["w"] * p["b"] * s

    f.defvjp(
        lambda p, s: (f(p, s), (p, s)),
        lambda r, g: ({"w": g * r[0]["b"] * r[1], "b": g * r[0]["w"] * r[1]}, None),
    )
    p = {"w": np.array([1.0, 2.0]), "b": np.array([3.0, 4.0])}
    g = ea.grad(lambda p, s: ea.sum(f(p, s)), argnums=(0, 1))(p, np.array(2.0))
    assert_close(g[0]["w"], [6.0, 8.0])
    assert_close(g[0]["b"], [2.0, 4.0])
    assert_close(g[1], 0.0)


def test_custom_vjp_imperative_backward():
    w = ea.tensor(X, requires_grad=True)
    _scaled_sin(w).backward()
    assert_close(w.grad, 0.5 * np.cos(X))


def test_custom_vjp_python_control_flow(jit_mode):
    @ea.custom_vjp
    def relu_ish(x):
        return x if float(ea.sum(x)) > 0 else -x  # a branch on the value

    def fwd(x):
        return (x if float(ea.sum(x)) > 0 else -x), None  # a branch in the rule

    relu_ish.defvjp(fwd, lambda r, g: (g,))
    # the function runs on arrays in the primitive's implementation: jit replays the branch per call
    f = ea.jit(lambda x: relu_ish(x) * 2.0)
    assert_close(f(np.array([1.0, 2.0])), [2.0, 4.0])
    assert_close(f(np.array([-1.0, -2.0])), [2.0, 4.0])
    if jit_mode == "eager":  # grad runs fwd on values
        assert_close(ea.grad(lambda x: ea.sum(relu_ish(x)))(np.array([1.0, 2.0])), [1.0, 1.0])
    # fwd runs on the staged values of a traced program: reading one there is refused
    with pytest.raises(ea.TracerError):
        ea.jit(ea.grad(lambda x: ea.sum(relu_ish(x))))(np.array([1.0, 2.0]))


def test_custom_vjp_errors():
    @ea.custom_vjp
    def pair(x):
        return x, x

    pair.defvjp(lambda x: ((x, x), None), lambda r, g: (g,))
    with pytest.raises(TypeError, match="one array"):
        pair(X)

    @ea.custom_vjp
    def no_rule(x):
        return x

    with pytest.raises(TypeError, match="defvjp"):
        no_rule(X)

    @ea.custom_vjp
    def bad_bwd(x):
        return x

    bad_bwd.defvjp(lambda x: (x, None), lambda r, g: g)
    with pytest.raises(TypeError, match="one per argument"):
        ea.grad(lambda x: ea.sum(bad_bwd(x)))(X)


# -- custom_jvp ------------------------------------------------------------------------------


@ea.custom_jvp
def log1pexp(x):
    return ea.log(1.0 + ea.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), t * (1.0 - 1.0 / (1.0 + ea.exp(x)))


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


@pytest.mark.filterwarnings("ignore:overflow")
def test_custom_jvp_stable_gradient_at_1000():
    with np.errstate(over="ignore"):
        assert_close(ea.grad(log1pexp)(1000.0), 1.0)  # the plain formula gives nan
        assert_close(ea.jvp(log1pexp, (np.array(1000.0),), (np.array(2.0),))[1], 2.0)
        assert_close(ea.grad(ea.jit(log1pexp))(1000.0), 1.0)


def test_custom_jvp_values_and_all_modes():
    x = np.array([-2.0, 0.5, 3.0])
    assert_close(log1pexp(x).numpy(), np.log1p(np.exp(x)))
    assert_close(compiled(ea.jit(log1pexp))(x), np.log1p(np.exp(x)))
    assert_close(ea.grad(lambda x: ea.sum(log1pexp(x)))(x), _sigmoid(x))
    assert_close(ea.jacfwd(log1pexp)(x), np.diag(_sigmoid(x)))
    assert_close(ea.jacrev(log1pexp)(x), np.diag(_sigmoid(x)))
    assert_close(ea.vmap(ea.grad(log1pexp))(x), _sigmoid(x))
    assert_close(ea.grad(lambda x: ea.sum(ea.vmap(log1pexp)(x)))(x), _sigmoid(x))
    ea.gradcheck(lambda x: ea.sum(log1pexp(x) ** 2), x)


def test_custom_jvp_second_order_differentiates_the_rule():
    x = np.array([-2.0, 0.5, 3.0])
    s = _sigmoid(x)
    assert_close(ea.hessian(lambda x: ea.sum(log1pexp(x)))(x), np.diag(s * (1 - s)))
    assert_close(ea.grad(lambda x: ea.sum(ea.grad(lambda x: ea.sum(log1pexp(x)))(x)))(x), s * (1 - s))
    hv = ea.hvp(lambda x: ea.sum(log1pexp(x)), (x,), (np.ones(3),))[0]
    assert_close(hv, s * (1 - s))


def test_custom_jvp_rule_is_really_used():
    @ea.custom_jvp
    def f(x, y):
        return x * y

    f.defjvp(lambda p, t: (f(*p), 10.0 * t[0] + 100.0 * t[1]))  # not the true derivative
    x, y = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    assert_close(ea.jvp(f, (x, y), (np.ones(2), np.zeros(2)))[1], [10.0, 10.0])
    g = ea.grad(lambda x, y: ea.sum(f(x, y)), argnums=(0, 1))(x, y)
    assert_close(g[0], [10.0, 10.0])
    assert_close(g[1], [100.0, 100.0])
    assert_close(ea.grad(ea.jit(lambda x: ea.sum(f(x, y))))(x), [10.0, 10.0])
    graph = ea.make_graph(lambda x: f(x, y))(x)
    assert [e.op for e in graph.equations] == ["custom_jvp_call"]


def test_custom_jvp_errors():
    @ea.custom_jvp
    def no_rule(x):
        return x

    with pytest.raises(TypeError, match="defjvp"):
        no_rule(X)


# -- checkpoint ------------------------------------------------------------------------------


def _block(x):
    for _ in range(4):
        x = ea.sin(x)  # each keeps its operand for its VJP
    return x


def _chain(wrap):
    block = wrap(_block)

    def loss(x):
        for _ in range(10):
            x = block(x)
        return ea.sum(x)

    return loss


def test_checkpoint_same_values_and_derivatives():
    x = np.array([0.3, -1.2, 2.0])
    f = lambda x, w: ea.sum(ea.tanh(ea.einsum("i,i->i", x, w)) ** 2)
    g = ea.checkpoint(lambda x, w: ea.tanh(ea.einsum("i,i->i", x, w)))
    c = lambda x, w: ea.sum(g(x, w) ** 2)
    w = np.array([0.5, 1.5, -0.7])
    assert_close(compiled(ea.jit(c))(x, w), f(x, w).numpy())
    for got, want in zip(ea.grad(c, argnums=(0, 1))(x, w), ea.grad(f, argnums=(0, 1))(x, w)):
        assert_close(got, want)
    ea.gradcheck(c, x, w)
    assert_close(ea.hessian(c)(x, w), ea.hessian(f)(x, w))
    assert_close(ea.jacfwd(g)(x, w), ea.jacrev(g)(x, w))
    assert_close(ea.jvp(g, (x, w), (np.ones(3), np.zeros(3)))[1], w * (1 - np.tanh(x * w) ** 2))
    assert_close(ea.vmap(g, in_axes=(0, None))(np.stack([x, 2 * x]), w), np.tanh(np.stack([x, 2 * x]) * w))
    assert_close(ea.grad(ea.jit(_chain(ea.checkpoint)))(x), ea.grad(_chain(lambda f: f))(x))
    assert [e.op for e in ea.make_graph(g)(x, w).equations] == ["checkpoint"]


def test_checkpoint_recomputes_in_the_reverse_pass(jit_mode):
    calls = []

    def f(x):
        calls.append(1)
        return ea.sin(x) * x

    loss = ea.value_and_grad(lambda x: ea.sum(ea.checkpoint(f)(x)))
    x = np.array([0.5, 1.0])
    value, g = loss(x)
    assert_close(value, np.sum(np.sin(x) * x))
    assert_close(g, np.cos(x) * x + np.sin(x))
    if jit_mode == "eager":
        assert len(calls) == 2  # the forward pass, and the recomputation for the reverse pass
    else:
        calls.clear()
        loss(x)  # compiled: the forward call runs f; the recomputation is equations of the program
        assert len(calls) == 1


def test_checkpoint_lowers_the_memory_peak_of_the_reverse_pass(jit_mode):
    # 10 blocks of 4 ops: without checkpoint the reverse pass waits on ~40 arrays; with it, on
    # the 10 blocks' inputs plus one block's recomputed intermediates.
    x = np.linspace(0.0, 1.0, 100_000)
    plain = ea.value_and_grad(_chain(lambda f: f))
    remat = ea.value_and_grad(_chain(ea.checkpoint))
    plain(x), remat(x)  # under jit: compile first, then measure the compiled programs
    assert_close(remat(x)[1], plain(x)[1])
    p_plain, p_remat = peak_bytes(plain, x), peak_bytes(remat, x)
    if jit_mode == "fused":
        # one fused kernel runs the whole chain and its derivative element by element: it keeps
        # no intermediate at all, only the gradient it writes
        assert p_plain < 3 * x.nbytes, p_plain / x.nbytes
        return
    assert p_plain > 30 * x.nbytes
    assert p_remat < 0.5 * p_plain, (p_remat / x.nbytes, p_plain / x.nbytes)


# -- every array library ---------------------------------------------------------------------------


def test_checkpoint(lib):
    x, y = lib_arrays(lib, X3, Y3)

    def loss(a, b):
        return ea.sum(ea.checkpoint(g_xy)(a, b) * a)

    with lib.lazy():
        gx = ea.grad(loss)(x, y)
    assert_close(lib_result(lib, gx), ea.grad(loss)(X3, Y3))
    assert_close(ea.grad(loss)(X3, Y3), ea.grad(lambda a, b: ea.sum(g_xy(a, b) * a))(X3, Y3))


def test_custom_vjp(lib):
    x, y = lib_arrays(lib, X3, Y3)

    @ea.custom_vjp
    def scaled(a):
        return a * 2.0

    def fwd(a):
        return scaled(a), None

    def bwd(res, ct):
        return (ct * 3.0,)  # deliberately not 2: the rule, not the function, is differentiated

    scaled.defvjp(fwd, bwd)

    def loss(a):
        return ea.sum(ea.einsum("ij,jk->ik", scaled(a), y))

    with lib.lazy():
        gx = ea.grad(loss)(x)
    expected = ea.grad(lambda a: ea.sum(ea.einsum("ij,jk->ik", scaled(a), Y3)))(X3)
    assert_close(lib_result(lib, gx), expected)
    assert_close(expected, 3.0 * np.broadcast_to(Y3.sum(axis=1), (3, 3)))
