"""Complex numbers (docs/guarantees.md, "Complex numbers: JAX's convention"): one convention, JAX's.

einad's VJP is the transpose of the derivative, never its conjugate transpose:

* for a holomorphic F (einsum, exp, multiply, ...): jvp(v) = F'(z) v and
  vjp(u) = F'(z)^T u, so <vjp(u), v> == <u, jvp(v)> exactly with the bilinear
  pairing <a, b> = sum(a * b) (no conjugate);
* for a real-valued L of complex z: grad L = dL/dRe(z) - i dL/dIm(z)
  (JAX's; PyTorch returns the conjugate);
* in general (non-holomorphic maps, real inputs meeting complex values) VJP and
  JVP are dual under Re<a, b>, and the cotangent of a real input is the real part.

Every expected number here comes from central differences of numpy along real
and imaginary directions, so the convention itself is what is being tested.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import einad as ea

MODES = ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")
H = 1e-6


def _c(rng, shape, scale=1.0):
    return scale * (rng.standard_normal(shape) + 1j * rng.standard_normal(shape))


def central_vjp(g, args, u, k):
    """JAX's cotangent for args[k]: d/dRe - i d/dIm of L = Re sum(u * g(*args)) (numpy g)."""
    args = [np.array(a) for a in args]
    x = args[k]
    out = np.zeros(x.shape, dtype=np.result_type(x.dtype, np.float64))

    def loss(xk):
        return np.real(np.sum(u * g(*(args[:k] + [xk] + args[k + 1 :]))))

    directions = (1.0, 1j) if x.dtype.kind == "c" else (1.0,)
    for idx in np.ndindex(*x.shape):
        for d in directions:
            e = np.zeros(x.shape, dtype=out.dtype)
            e[idx] = d * H
            slope = (loss(x + e) - loss(x - e)) / (2 * H)
            out[idx] += slope if d == 1.0 else -1j * slope
    return out


def central_jvp(g, args, tangents):
    plus = g(*[a + H * t for a, t in zip(args, tangents)])
    minus = g(*[a - H * t for a, t in zip(args, tangents)])
    return (plus - minus) / (2 * H)


def close(a, b, tol=1e-6):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


# -- einsum: holomorphic, so the plain transpose ----------------------------------------------------


def test_einsum_vjp_is_the_transpose_not_the_conjugate_transpose():
    c = np.array([1 + 2j, 3 - 1j])
    z = np.array([0.5 - 1j, 2 + 0.25j])
    _, pullback = ea.vjp(lambda a, b: ea.einsum("i,i->", a, b), c, z)
    gc, gz = pullback(np.array(1.0 + 0j))
    np.testing.assert_array_equal(gz, c)  # PyTorch's convention would give conj(c)
    np.testing.assert_array_equal(gc, z)
    gc, gz = pullback(np.array(2 - 3j))
    np.testing.assert_allclose(gz, (2 - 3j) * c, rtol=1e-15)


EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 2)], "cc"),
    ("ii->", [(3, 3)], "c"),
    ("ij,ji", [(2, 2), (2, 2)], "cc"),
    ("...i,i...->...", [(2, 3), (3, 2)], "cc"),
    ("i,i,i->i", [(2,), (2,), (2,)], "crc"),  # a real operand among complex ones
    ("bij,bjk->bik", [(2, 2, 3), (2, 3, 1)], "rc"),
    ("ab,b", [(2, 3), (3,)], "cr"),
]


@pytest.mark.parametrize("spec, shapes, kinds", EINSUMS, ids=[e[0] for e in EINSUMS])
def test_complex_einsum_vjp_jvp_against_central_differences(spec, shapes, kinds):
    rng = np.random.default_rng(1)
    args = [_c(rng, s) if k == "c" else rng.standard_normal(s) for s, k in zip(shapes, kinds)]
    ref = lambda *a: np.einsum(spec, *a)
    f = lambda *a: ea.einsum(spec, *a)
    out = ref(*args)
    u = _c(rng, out.shape)
    value, pullback = ea.vjp(f, *args)
    close(value, out, 1e-12)
    grads = pullback(u)
    for k, g in enumerate(grads):
        assert g.dtype == args[k].dtype, (k, g.dtype)  # a real operand gets a real cotangent
        close(g, central_vjp(ref, args, u, k))
    vs = [_c(rng, s) if k == "c" else rng.standard_normal(s) for s, k in zip(shapes, kinds)]
    _, t = ea.jvp(f, tuple(args), tuple(vs))
    close(t, central_jvp(ref, args, vs))
    # duality, bilinear pairing: exact as complex numbers when every operand is complex
    reverse = sum(np.sum(g * v) for g, v in zip(grads, vs))
    forward = np.sum(u * t)
    if set(kinds) == {"c"}:
        close(reverse, forward, 1e-10)
    else:
        close(np.real(reverse), np.real(forward), 1e-10)


def test_holomorphic_jacobians_are_the_complex_derivative():
    rng = np.random.default_rng(2)
    A = _c(rng, (3, 2))
    z = _c(rng, 2, 0.5)
    f = lambda t: ea.exp(ea.einsum("ij,j->i", A, t))
    want = np.exp(A @ z)[:, None] * A  # F'(z)
    close(ea.jacfwd(f)(z), want, 1e-12)
    close(ea.jacrev(f)(z), want, 1e-12)


def test_grad_of_a_complex_output_is_refused():
    with pytest.raises(TypeError, match="vjp"):
        ea.grad(lambda z: ea.sum(z * z))(np.array([1 + 1j]))


# -- elementwise operations on complex values --------------------------------------------------------

HOLOMORPHIC = {  # name: numpy reference on complex values
    "negative": np.negative,
    "exp": np.exp,
    "log": np.log,
    "log1p": np.log1p,
    "expm1": np.expm1,
    "sin": np.sin,
    "cos": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "sinh": np.sinh,
    "cosh": np.cosh,
    "arcsin": np.arcsin,
    "arccos": np.arccos,
    "arctan": np.arctan,
    "sqrt": np.sqrt,
    "square": np.square,
    "sigmoid": lambda z: 1 / (1 + np.exp(-z)),
    "softplus": lambda z: np.log1p(np.exp(z)),
    "softmax": lambda z: np.exp(z) / np.sum(np.exp(z), axis=-1, keepdims=True),
    "sum": lambda z: np.sum(z, axis=0),
    "mean": lambda z: np.mean(z, axis=0),
    "prod": lambda z: np.prod(z, axis=0),
}
EA_HOLOMORPHIC = {
    "sum": lambda z: ea.sum(z, axis=0),
    "mean": lambda z: ea.mean(z, axis=0),
    "prod": lambda z: ea.prod(z, axis=0),
}


@pytest.mark.parametrize("name", sorted(HOLOMORPHIC))
def test_holomorphic_ops_on_complex_values(name):
    """Value as numpy's, vjp(u) = u * f'(z) (no conjugate), jvp = f'(z) v, both against
    central differences along real and imaginary directions."""
    rng = np.random.default_rng(3)
    z = _c(rng, (2, 3), 0.4)
    ref = HOLOMORPHIC[name]
    f = EA_HOLOMORPHIC.get(name, getattr(ea, name, None))
    out = ref(z)
    got = f(z)
    assert got.dtype == np.complex128, (name, got.dtype)
    close(got.numpy(), out, 1e-12)
    u = _c(rng, out.shape)
    (g,) = ea.vjp(f, z)[1](u)
    close(g, central_vjp(ref, [z], u, 0))
    v = _c(rng, z.shape)
    _, t = ea.jvp(f, (z,), (v,))
    close(t, central_jvp(ref, [z], [v]))
    close(np.sum(g * v), np.sum(u * t), 1e-10)  # bilinear duality, exact for holomorphic f


@pytest.mark.parametrize("name", ["add", "subtract", "multiply", "divide", "power"])
def test_holomorphic_binary_ops_on_complex_values(name):
    rng = np.random.default_rng(4)
    x, y = _c(rng, (2, 3), 0.7) + 1.5, _c(rng, (3,), 0.5)  # y broadcasts
    ref = getattr(np, name)
    f = getattr(ea, name)
    out = ref(x, y)
    close(f(x, y).numpy(), out, 1e-12)
    u = _c(rng, out.shape)
    gx, gy = ea.vjp(f, x, y)[1](u)
    close(gx, central_vjp(ref, [x, y], u, 0))
    close(gy, central_vjp(ref, [x, y], u, 1))
    vx, vy = _c(rng, x.shape), _c(rng, y.shape)
    _, t = ea.jvp(f, (x, y), (vx, vy))
    close(t, central_jvp(ref, [x, y], [vx, vy]))


# -- real-valued functions of complex values: abs, var ------------------------------------------------


def test_grad_of_abs_is_conj_z_over_abs_z():
    z = np.array([3 + 4j, -1 + 2j, 0.5 - 0.5j])
    g = ea.grad(lambda t: ea.sum(ea.abs(t)))(z)
    np.testing.assert_allclose(g, np.conj(z) / np.abs(z), rtol=1e-14)
    g2 = ea.grad(lambda t: ea.sum(ea.abs(t) ** 2))(z)
    np.testing.assert_allclose(g2, 2 * np.conj(z), rtol=1e-14)  # JAX: 2 conj(z); PyTorch: 2 z


def test_abs_of_complex_jvp_is_real():
    z = np.array([3 + 4j, -1 + 2j])
    v = np.array([1j, 1 + 0j])
    out, t = ea.jvp(ea.abs, (z,), (v,))
    assert out.dtype == np.float64
    assert t.dtype == np.float64, t.dtype  # the tangent of a real output is real
    np.testing.assert_allclose(t, np.real(np.conj(z) * v) / np.abs(z), rtol=1e-14)


@pytest.mark.parametrize(
    "name, f, ref",
    [
        ("abs", lambda z: ea.abs(z), np.abs),
        (
            "abs of einsum",
            lambda z: ea.abs(ea.einsum("ij,j->i", np.array([[1 + 1j, 2], [0.5j, -1]]), z)),
            lambda z: np.abs(np.array([[1 + 1j, 2], [0.5j, -1]]) @ z),
        ),
        ("abs squared", lambda z: ea.abs(z * z) ** 2, lambda z: np.abs(z * z) ** 2),
        ("var", lambda z: ea.var(z), np.var),
    ],
)
def test_real_valued_functions_of_complex_values(name, f, ref):
    rng = np.random.default_rng(5)
    z = _c(rng, 2) + 0.5
    out = ref(z)
    got = f(z)
    assert got.dtype == np.float64, (name, got.dtype)  # numpy: real
    close(got.numpy(), out, 1e-12)
    u = rng.standard_normal(np.shape(out))
    (g,) = ea.vjp(f, z)[1](u)
    close(g, central_vjp(ref, [z], u, 0))
    v = _c(rng, z.shape)
    _, t = ea.jvp(f, (z,), (v,))
    assert np.asarray(t).dtype == np.float64, (name, np.asarray(t).dtype)
    close(t, central_jvp(ref, [z], [v]))
    close(np.real(np.sum(g * v)), np.sum(u * t), 1e-10)  # duality under Re<a, b>


def test_jacrev_of_a_real_valued_function_has_jax_gradients_as_rows():
    z = np.array([3 + 4j, -1 + 2j])
    j = ea.jacrev(ea.abs)(z)
    np.testing.assert_allclose(j, np.diag(np.conj(z) / np.abs(z)), rtol=1e-14)


def test_real_input_through_complex_values():
    """A real loss of a real input, computed through complex intermediates: the
    gradient is the ordinary real derivative (here sqrt(2) * sign(x))."""
    x = np.array([0.5, -2.0])
    g = ea.grad(lambda t: ea.sum(ea.abs(t * (1 + 1j))))(x)
    np.testing.assert_allclose(g, np.sqrt(2) * np.sign(x), rtol=1e-14)
    c = np.array([1 - 2j, 0.5 + 1j])
    ref = lambda t: np.abs(np.einsum("i,i->", t, c)) ** 2
    g = ea.grad(lambda t: ea.abs(ea.einsum("i,i->", t, c)) ** 2)(x)
    assert g.dtype == np.float64
    close(g, central_vjp(ref, [x], 1.0, 0))


def test_real_operand_cotangent_is_the_real_part_without_a_warning():
    x = np.array([0.5, -2.0])
    c = np.array([1 - 2j, 0.5 + 1j])
    u = np.array([2 + 1j, -1 + 3j])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's ComplexWarning: a cast that drops imaginary parts
        gx, gc = ea.vjp(lambda a, b: ea.einsum("i,i->i", a, b), x, c)[1](u)
    assert gx.dtype == np.float64
    np.testing.assert_array_equal(gx, np.real(u * c))
    np.testing.assert_array_equal(gc, u * x)


# -- second order on complex inputs --------------------------------------------------------------------


COMPLEX_LOSSES = {
    "|Az|^2": lambda A, w: lambda z: ea.sum(w * ea.abs(ea.einsum("ij,j->i", A, z)) ** 2),
    "|exp(Az)|": lambda A, w: lambda z: ea.sum(w * ea.abs(ea.exp(ea.einsum("ij,j->i", A, z)))),
}


@pytest.mark.parametrize("name", sorted(COMPLEX_LOSSES))
@pytest.mark.parametrize("mode", MODES)
def test_hvp_of_a_real_function_of_complex_inputs(name, mode):
    """hvp(v) is the derivative of JAX's gradient along v: all three modes, against
    central differences of ea.grad (real step h: (grad(z + hv) - grad(z - hv)) / 2h)."""
    rng = np.random.default_rng(6)
    A, w = _c(rng, (3, 2), 0.5), rng.uniform(0.5, 1.5, 3)
    f = COMPLEX_LOSSES[name](A, w)
    z, v = _c(rng, 2, 0.5), _c(rng, 2)
    g = ea.grad(f)
    central = (g(z + 1e-5 * v) - g(z - 1e-5 * v)) / 2e-5
    (hv,) = ea.hvp(f, (z,), (v,), mode=mode)
    assert hv.dtype == np.complex128
    close(hv, central, 1e-6)
