"""einad.transforms.custom against JAX: the same functions and rules, written once for a module
`m` (einad or jax.numpy) and a decorator pair, give the same values and derivatives.

What is compared is JAX's documented behaviour: the order of ``nondiff_argnums`` in ``fwd``,
``bwd`` and the JVP rule, pytree outputs and cotangents, the residuals ``fwd`` hands to
``bwd``, `vmap` of each, and the higher orders JAX supports. Where JAX refuses (forward mode
through a custom_vjp function), einad's forward mode is compared with JAX's reverse-mode
Jacobian of the same function: the rule's Jacobian either way.
"""

import collections
import functools

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close

jax = pytest.importorskip("jax", reason="the reference for custom rules is JAX")
jnp = pytest.importorskip("jax.numpy", reason="the reference for custom rules is JAX")


@pytest.fixture(autouse=True)
def x64():
    with jax.enable_x64(True):  # float64 on both sides, so the comparisons are tight
        yield


def _both(make):
    """`make(m, custom_vjp_or_jvp, checkpoint)` built for einad and for JAX."""
    return make(ea, ea, ea.checkpoint), make(jnp, jax, jax.checkpoint)


def _close(ours, theirs):
    a, ta = ea.tree_flatten(ours)
    b, tb = jax.tree_util.tree_flatten(theirs)
    assert len(a) == len(b), (ta, tb)
    for x, y in zip(a, b):
        assert_close(np.asarray(x), np.asarray(y))


X = np.array([0.4, -1.3, 2.1])
Y = np.array([1.5, 0.7, -0.2])

# -- nondiff_argnums: where the fixed arguments go --------------------------------------------


def _apply_twice(m, lib, ck):
    # JAX's documentation example: a function argument, fixed
    @functools.partial(lib.custom_vjp, nondiff_argnums=(0,))
    def app(f, x, y):
        return f(f(x) * y)

    def app_fwd(f, x, y):
        return app(f, x, y), (x, y)

    def app_bwd(f, res, g):  # f first, then the residuals and the cotangent
        x, y = res
        return (3.0 * g * y, g * x)  # deliberately not the true derivative

    app.defvjp(app_fwd, app_bwd)
    return app


def test_custom_vjp_nondiff_function_argument():
    ours, theirs = _both(_apply_twice)
    _close(ours(ea.sin, X, Y), theirs(jnp.sin, X, Y))
    loss = lambda app, m: lambda x, y: m.sum(app(m.tanh, x, y) * x)
    for argnums in (0, 1, (0, 1)):
        _close(ea.grad(loss(ours, ea), argnums)(X, Y), jax.grad(loss(theirs, jnp), argnums)(X, Y))


def _middle_nondiff(m, lib, ck):
    @functools.partial(lib.custom_vjp, nondiff_argnums=(1, 3))
    def f(x, power, y, mode):
        out = x**power * y
        return out if mode == "plain" else m.sin(out)

    def f_fwd(x, power, y, mode):  # every argument, in its place
        return f(x, power, y, mode), {"x": x, "y": y}

    def f_bwd(power, mode, res, g):  # the nondiff ones in nondiff_argnums order
        x, y = res["x"], res["y"]
        scale = 1.0 if mode == "plain" else 2.0
        return (scale * power * x ** (power - 1) * y * g, scale * x**power * g)

    f.defvjp(f_fwd, f_bwd)
    return f


@pytest.mark.parametrize("mode", ["plain", "sin"])
def test_custom_vjp_nondiff_in_the_middle_keep_their_order(mode):
    ours, theirs = _both(_middle_nondiff)
    _close(ours(X, 3, Y, mode), theirs(X, 3, Y, mode))
    ours_g = ea.grad(lambda x, y: ea.sum(ours(x, 3, y, mode)), (0, 1))(X, Y)
    theirs_g = jax.grad(lambda x, y: jnp.sum(theirs(x, 3, y, mode)), (0, 1))(X, Y)
    _close(ours_g, theirs_g)
    # forward mode (JAX refuses it): the transpose of the rule, = JAX's reverse Jacobian
    for k in (0, 1):
        _close(
            ea.jacfwd(lambda x, y: ours(x, 3, y, mode), k)(X, Y),
            jax.jacrev(lambda x, y: theirs(x, 3, y, mode), k)(X, Y),
        )


def _custom_jvp_nondiff(m, lib, ck):
    @functools.partial(lib.custom_jvp, nondiff_argnums=(0, 2))
    def f(act, x, n, y):
        return act(x) * y**n

    @f.defjvp
    def f_jvp(act, n, primals, tangents):  # JAX: the nondiff arguments come first
        (x, y), (tx, ty) = primals, tangents
        out = f(act, x, n, y)
        return out, 5.0 * tx * y**n + n * act(x) * y ** (n - 1) * ty  # 5: the rule's own

    return f


def test_custom_jvp_nondiff_argnums_order():
    ours, theirs = _both(_custom_jvp_nondiff)
    _close(ours(ea.tanh, X, 2, Y), theirs(jnp.tanh, X, 2, Y))
    t = (np.array([1.0, 0.5, -1.0]), np.array([0.2, 0.3, 0.4]))
    _close(
        ea.jvp(lambda x, y: ours(ea.tanh, x, 2, y), (X, Y), t),
        jax.jvp(lambda x, y: theirs(jnp.tanh, x, 2, y), (X, Y), t),
    )
    _close(
        ea.grad(lambda x, y: ea.sum(ours(ea.tanh, x, 2, y)), (0, 1))(X, Y),
        jax.grad(lambda x, y: jnp.sum(theirs(jnp.tanh, x, 2, y)), (0, 1))(X, Y),
    )


# -- pytree outputs, pytree cotangents, residuals ------------------------------------------------

Stats = collections.namedtuple("Stats", ["mean", "spread"])


def _stats(m, lib, ck):
    @lib.custom_vjp
    def stats(x, w):
        mean = m.sum(x * w) / m.sum(w)
        return {"stats": Stats(mean, m.sum(w * (x - mean) ** 2)), "scaled": (x * 2.0, w)}

    def stats_fwd(x, w):
        out = stats(x, w)
        return out, (x, w, out["stats"].mean, None, 2)  # a None and a Python int among the residuals

    def stats_bwd(res, g):
        x, w, mean, nothing, two = res
        assert nothing is None and two == 2
        gs = g["stats"]
        dx = gs.mean * w / m.sum(w) + gs.spread * two * w * (x - mean) + g["scaled"][0] * 2.0
        dw = gs.mean * (x - mean) / m.sum(w) + gs.spread * (x - mean) ** 2 + g["scaled"][1]
        return (dx, dw)

    stats.defvjp(stats_fwd, stats_bwd)
    return stats


def test_custom_vjp_pytree_output_matches_jax():
    ours, theirs = _both(_stats)
    w = np.array([1.0, 2.0, 0.5])
    _close(ours(X, w), theirs(X, w))

    def loss(f, m):
        def value(x, w):
            out = f(x, w)
            return out["stats"].mean * 3.0 + out["stats"].spread + m.sum(out["scaled"][0] * out["scaled"][1])

        return value

    _close(ea.grad(loss(ours, ea), (0, 1))(X, w), jax.grad(loss(theirs, jnp), (0, 1))(X, w))
    _close(ea.jacrev(ours)(X, w), jax.jacrev(theirs)(X, w))
    _close(ea.jacfwd(ours, (0, 1))(X, w), jax.jacrev(theirs, (0, 1))(X, w))  # JAX: reverse only
    # JAX's hessian is forward over reverse, which fails where fwd calls the custom_vjp function
    # itself (its documented pattern): reverse over reverse is JAX's second order here
    _close(ea.hessian(loss(ours, ea))(X, w), jax.jacrev(jax.grad(loss(theirs, jnp)))(X, w))
    _close(ea.jit(ea.grad(loss(ours, ea)))(X, w), jax.grad(loss(theirs, jnp))(X, w))


def _pair_jvp(m, lib, ck):
    @lib.custom_jvp
    def f(x, y):
        return {"p": x * y, "q": (m.sin(x), y)}

    @f.defjvp
    def f_jvp(primals, tangents):
        (x, y), (tx, ty) = primals, tangents
        return f(x, y), {"p": tx * y + x * ty, "q": (m.cos(x) * tx, 2.0 * ty)}  # 2: the rule's own

    return f


def test_custom_jvp_pytree_output_matches_jax():
    ours, theirs = _both(_pair_jvp)
    t = (np.ones(3), np.array([0.5, -1.0, 2.0]))
    _close(ea.jvp(ours, (X, Y), t), jax.jvp(theirs, (X, Y), t))
    _close(ea.jacrev(ours, (0, 1))(X, Y), jax.jacrev(theirs, (0, 1))(X, Y))
    loss = lambda f, m: lambda x, y: m.sum(f(x, y)["p"] ** 2) + m.sum(f(x, y)["q"][0] * f(x, y)["q"][1])
    _close(ea.hessian(loss(ours, ea))(X, Y), jax.hessian(loss(theirs, jnp))(X, Y))


def _block(m, lib, ck):
    def block(x, w, act):
        h = act(x * w)
        return {"h": h, "norm": m.sum(h * h)}

    return ck(block, static_argnums=(2,))


def test_checkpoint_pytree_output_and_static_argnums_match_jax():
    ours, theirs = _both(_block)
    w = np.array([0.3, -0.8, 1.1])
    _close(ours(X, w, ea.tanh), theirs(X, w, jnp.tanh))
    loss = lambda f, m, act: lambda x, w: f(x, w, act)["norm"] + m.sum(f(x, w, act)["h"])
    _close(ea.grad(loss(ours, ea, ea.sin), (0, 1))(X, w), jax.grad(loss(theirs, jnp, jnp.sin), (0, 1))(X, w))
    _close(ea.hessian(loss(ours, ea, ea.tanh))(X, w), jax.hessian(loss(theirs, jnp, jnp.tanh))(X, w))


# -- forward mode of custom_vjp: JAX's reverse Jacobian of the same rule ------------------------


def _estimators(m, lib, ck):
    @lib.custom_vjp
    def ste(x):  # straight-through rounding
        return m.round(x)

    ste.defvjp(lambda x: (m.round(x), None), lambda res, g: (g,))

    @lib.custom_vjp
    def hard_tanh_sign(x):  # sign forward, the clipped identity backward
        return m.sign(x)

    hard_tanh_sign.defvjp(lambda x: (m.sign(x), x), lambda x, g: (m.where(m.abs(x) <= 1.0, g, 0.0),))
    return ste, hard_tanh_sign


def test_forward_mode_of_estimators_equals_jax_reverse_jacobian():
    ours, theirs = _both(_estimators)
    x = np.array([0.3, 1.7, -0.6, -2.4, 0.9])
    for f, g in zip(ours, theirs):
        _close(ea.jacfwd(f)(x), jax.jacrev(g)(x))
        layer = lambda f, m: lambda x: m.tanh(f(x * 1.5) * x)
        _close(ea.jacfwd(layer(f, ea))(x), jax.jacrev(layer(g, jnp))(x))
        t = np.linspace(-1.0, 1.0, 5)
        _close(ea.jvp(layer(f, ea), (x,), (t,))[1], jax.jacrev(layer(g, jnp))(x) @ t)
        with pytest.raises(TypeError):  # what JAX does instead
            jax.jvp(g, (x,), (t,))


# -- vmap -----------------------------------------------------------------------------------------


def test_vmap_matches_jax():
    xs = np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    ws = np.linspace(0.5, 2.0, 12).reshape(4, 3)
    (ours_stats, theirs_stats) = _both(_stats)
    _close(ea.vmap(ours_stats)(xs, ws), jax.vmap(theirs_stats)(xs, ws))
    per_example = lambda f, m: lambda x, w: m.sum(f(x, w)["scaled"][0]) + f(x, w)["stats"].spread
    _close(
        ea.vmap(ea.grad(per_example(ours_stats, ea)), in_axes=(0, None))(xs, ws[0]),
        jax.vmap(jax.grad(per_example(theirs_stats, jnp)), in_axes=(0, None))(xs, ws[0]),
    )
    _close(
        ea.grad(lambda xs: ea.sum(ea.vmap(ours_stats, in_axes=(0, None))(xs, ws[0])["scaled"][0] ** 2))(xs),
        jax.grad(lambda xs: jnp.sum(jax.vmap(theirs_stats, in_axes=(0, None))(xs, ws[0])["scaled"][0] ** 2))(
            xs
        ),
    )
    ours_jvp, theirs_jvp = _both(_pair_jvp)
    _close(ea.vmap(ours_jvp)(xs, ws), jax.vmap(theirs_jvp)(xs, ws))
    _close(
        ea.grad(lambda xs: ea.sum(ea.vmap(ours_jvp)(xs, ws)["q"][0]))(xs),
        jax.grad(lambda xs: jnp.sum(jax.vmap(theirs_jvp)(xs, ws)["q"][0]))(xs),
    )
    ours_ck, theirs_ck = _both(_block)
    _close(
        ea.grad(lambda xs: ea.sum(ea.vmap(lambda x, w: ours_ck(x, w, ea.sin)["norm"])(xs, ws)))(xs),
        jax.grad(lambda xs: jnp.sum(jax.vmap(lambda x, w: theirs_ck(x, w, jnp.sin)["norm"])(xs, ws)))(xs),
    )


def test_allow_int_holds_integer_leaves_fixed_with_float0_gradients():
    """JAX's allow_int (a TypeError before): integer and boolean leaves among the
    differentiated arguments are held fixed and get an array of float0 zeros of their shape;
    the float leaves' gradients are as without them."""
    f = lambda x, n: ea.sum(x**n)
    x = np.array([1.0, 2.0])
    gx, gn = ea.grad(f, argnums=(0, 1), allow_int=True)(x, 3)
    assert_close(gx, 3 * x**2)
    assert gn.dtype == ea.float0 and gn.shape == ()
    tree = ea.grad(lambda p: ea.sum(p["w"] * p["k"]), allow_int=True)({"w": x, "k": np.array([2, 3])})
    assert_close(tree["w"], [2.0, 3.0])
    assert tree["k"].dtype == ea.float0 and tree["k"].shape == (2,)
    value, g = ea.value_and_grad(lambda n, flag: n * 2.0 + flag, argnums=(0, 1), allow_int=True)(3, True)
    assert value == 7.0 and g[0].dtype == g[1].dtype == ea.float0
    (v, aux), gi = ea.value_and_grad(lambda n: (n * 2.0, n), has_aux=True, allow_int=True)(4)
    assert v == 8.0 and aux == 4 and gi.dtype == ea.float0
    gx_jit = ea.jit(ea.grad(f, argnums=(0, 1), allow_int=True))(x, 3)[0]
    assert_close(gx_jit, 3 * x**2)
    with pytest.raises(TypeError, match="the integer 3"):
        ea.grad(f, argnums=1)(x, 3)  # still refused without it


def test_jvp_takes_float0_tangents_for_integer_primals_and_holds_them_fixed():
    """JAX's rule for integer (and boolean) primals in jvp: a float0 tangent of their shape (a
    TypeError before, whatever the tangent); a float0 tangent for a float primal is refused."""
    x, n = np.array([1.0, 2.0]), np.array([3, 2])
    out, tangent = ea.jvp(lambda x, n: x**n, (x, n), (np.ones(2), np.zeros(2, ea.float0)))
    assert_close(out, x**n)
    assert_close(tangent, n * x ** (n - 1))
    _, t = ea.jvp(
        lambda x, i, flag: x[i] * flag,
        (x, 1, True),
        (np.ones(2), np.zeros((), ea.float0), np.zeros((), ea.float0)),
    )
    assert_close(t, 1.0)
    grad_x = ea.grad(lambda x, n: ea.sum(x**n))  # forward over reverse, n held fixed
    _, hvp = ea.jvp(grad_x, (x, n), (np.ones(2), np.zeros(2, ea.float0)))
    assert_close(hvp, n * (n - 1) * x ** (n - 2))
    staged = ea.jit(lambda x, n: ea.jvp(lambda a, m: a**m, (x, n), (x, np.zeros(2, ea.float0)))[1])(x, n)
    assert_close(staged, n * x**n)
    with pytest.raises(TypeError, match="float0 tangents are for integer and boolean primals"):
        ea.jvp(lambda x: x, (x,), (np.zeros(2, ea.float0),))
    with pytest.raises(ValueError, match=r"tangent has shape \(3,\)"):
        ea.jvp(lambda x, n: x * n, (x, n), (x, np.zeros(3, ea.float0)))
    with pytest.raises(TypeError, match="differentiable inputs must be floating-point"):
        ea.jvp(lambda x, n: x * n, (x, n), (x, np.zeros(2)))  # an integer primal's tangent is float0
