"""einad.testing.gradcheck: it passes correct derivatives (of pytrees, of derivatives, of
several outputs, on every array library), catches a wrong derivative whose value is right,
names the argument, the pytree leaf and the mode (forward or reverse) that is wrong, holds
integer arguments fixed, and probes complex inputs along imaginary directions too, under
JAX's convention. The numpy tests of the first part run eagerly and with every transformation
jitted (the `jit_mode` mark)."""

import re

import numpy as np
import pytest

import einad as ea
from einad.core import Primitive, bind, declare
from einad.util import wrap
from tests.support.functions import LW, X3, Y3, g_xy, lib_arrays, logistic_loss
from tests.support.numerics import assert_close

R = np.random.default_rng(42)
X = R.standard_normal((3, 4))
Y = R.standard_normal((3, 4))
V4 = R.standard_normal(4)
W34 = R.standard_normal((3, 4))
B3 = R.standard_normal(3)


# -- real arguments ----------------------------------------------------------------------------------


@pytest.mark.usefixtures("jit_mode")
def test_gradcheck_passes_on_correct_functions():
    assert ea.gradcheck(lambda x: ea.sin(x) * x**3, np.array([0.7, -1.2])) is True
    assert ea.gradcheck(lambda a, b: ea.einsum("ij,jk->ik", a, b) ** 2, X, Y.T) is True
    assert ea.gradcheck(lambda p, x: ea.tanh(x @ p["w"] + p["b"]), {"w": W34.T, "b": B3}, V4) is True
    assert ea.gradcheck(ea.grad(logistic_loss), LW) is True  # a derivative, checked in turn
    assert ea.gradcheck(lambda x: [ea.softmax(x), ea.logsumexp(x)], X) is True
    assert (
        ea.gradcheck(
            lambda x, y: ea.sum(ea.sin(ea.einsum("ij,j->i", y, x)) * y[:, 0]),
            np.array([0.1, 0.2, 0.3]),
            np.arange(6.0).reshape(2, 3) / 5,
        )
        is True
    )


@pytest.mark.usefixtures("jit_mode")
def test_gradcheck_catches_a_wrong_derivative_with_the_right_value():
    assert issubclass(ea.GradcheckError, AssertionError)
    cases = [
        (lambda x: x * ea.stop_gradient(x), np.array([0.5, -1.0, 2.0])),
        (lambda x: ea.stop_gradient(x) * x, np.array([1.0, 2.0, -0.5])),
    ]
    for f, x in cases:  # value x^2, derivative x instead of 2x
        np.testing.assert_allclose(f(x).numpy(), x**2)
        assert_close(ea.grad(lambda x, f=f: ea.sum(f(x)))(x), x)  # the wrong derivative is real
        with pytest.raises(ea.GradcheckError) as info:
            ea.gradcheck(f, x)
        msg = str(info.value)
        assert isinstance(info.value, AssertionError)
        assert "argument 0" in msg, msg
        assert re.search(r"\b(reverse|forward) mode\b", msg), msg
        assert re.search(r"argument.*0.*(reverse|forward)", msg), msg
        assert "central differences" in msg


@pytest.mark.usefixtures("jit_mode")
def test_gradcheck_names_the_wrong_argument():
    def f(a, b):
        return ea.sin(a) * b * ea.stop_gradient(b)  # right in a, wrong in b

    with pytest.raises(ea.GradcheckError) as info:
        ea.gradcheck(f, X, Y)
    msg = str(info.value)
    assert "argument 1" in msg, msg
    assert "argument 0" not in msg
    f = lambda x, y: ea.sum(x * 2.0) + ea.sum(ea.stop_gradient(y) * y)  # right in x, wrong in y
    with pytest.raises(ea.GradcheckError, match=r"leaf 1"):
        ea.gradcheck(f, np.ones(2), np.array([1.0, 2.0]))


@pytest.mark.usefixtures("jit_mode")
def test_gradcheck_names_a_leaf_of_a_pytree_argument():
    def f(x, p):
        return ea.sin(x) * p["scale"] + p["shift"] * ea.stop_gradient(p["shift"])  # wrong in shift

    p = {"scale": np.array(2.0), "shift": np.array([0.5, -1.5])}
    with pytest.raises(ea.GradcheckError) as info:
        ea.gradcheck(f, np.array([0.1, 0.2]), p)
    assert "argument 1['shift']" in str(info.value), str(info.value)
    # the same function without the mistake passes
    assert ea.gradcheck(lambda x, p: ea.sin(x) * p["scale"] + p["shift"] ** 2, np.array([0.1, 0.2]), p)


@pytest.mark.usefixtures("jit_mode")
def test_gradcheck_holds_integer_arguments_fixed():
    assert ea.gradcheck(lambda x, n: x**n, np.array([0.5, 1.5]), 3) is True
    with pytest.raises(ea.GradcheckError, match=r"argument 0"):
        # value x^n, derivative x^(n-1) instead of n x^(n-1)
        ea.gradcheck(lambda x, n: x * ea.stop_gradient(x) ** (n - 1), np.array([0.5, 1.5]), 3)


def _wrong_jvp_square():
    """square with a correct VJP and a JVP off by a factor 2: only forward mode is wrong."""
    prim = Primitive("bad_square", np.square)
    declare(
        prim,
        aliasing="fresh",
        vjp=lambda g, ans, vals, p, needed: [g * 2 * vals[0]],
        jvp=lambda ts, ans, vals, p: ts[0] * 4 * vals[0],
    )
    return lambda x: bind(prim, (x if isinstance(x, ea.Tensor) else np.asarray(x),), {})


def _wrong_vjp_square():
    """square with a correct JVP and a VJP off by a factor 2: only reverse mode is wrong."""
    prim = Primitive("bad_square_vjp", np.square)
    declare(
        prim,
        aliasing="fresh",
        vjp=lambda g, ans, vals, p, needed: [g * vals[0]],
        jvp=lambda ts, ans, vals, p: ts[0] * 2 * vals[0],
    )
    return lambda x: bind(prim, (x if isinstance(x, ea.Tensor) else np.asarray(x),), {})


@pytest.mark.usefixtures("jit_mode")
@pytest.mark.parametrize("mode, make", [("forward", _wrong_jvp_square), ("reverse", _wrong_vjp_square)])
def test_gradcheck_names_the_mode(mode, make):
    sq = make()
    x = np.array([0.5, -1.0, 2.0])
    with pytest.raises(ea.GradcheckError) as info:
        ea.gradcheck(lambda x: sq(x) + x, x)
    msg = str(info.value)
    assert mode in msg, msg
    other = {"forward": "reverse", "reverse": "forward"}[mode]
    assert f"in {other} mode" not in msg, msg


# -- complex arguments ----------------------------------------------------------------------------


def _exp_with(vjp_factor):
    """exp whose JVP is right and whose VJP multiplies the cotangent by vjp_factor(ans)."""
    prim = Primitive(f"test_exp_{len(ea.core.primitives)}", np.exp)  # a fresh name per rule
    declare(
        prim,
        aliasing="fresh",
        jvp=lambda ts, ans, vals, p: ts[0] * ans,
        vjp=lambda g, ans, vals, p, needed: [g * vjp_factor(ans)],
    )
    return lambda x: wrap(bind(prim, (x,), {}))


Z = np.array([0.3 + 0.4j, -0.2 + 1.1j])


def test_holomorphic_and_linear_complex_functions_pass():
    A = np.array([[1 + 2j, 0.5], [-1j, 2 - 1j], [0.3, 1j]])
    assert ea.gradcheck(lambda z: ea.einsum("ij,j->i", A, z), Z)
    assert ea.gradcheck(lambda z: ea.exp(ea.sum(z * z)), Z)
    assert ea.gradcheck(lambda z: ea.abs(z) * 2.0, Z)  # real output of a complex input


def test_a_conjugated_vjp_is_caught_on_complex_input_but_not_on_real_input():
    right = _exp_with(lambda ans: ans)  # JAX: g * f'(z)
    wrong = _exp_with(np.conj)  # PyTorch-style conjugate, inconsistent with this JVP
    assert ea.gradcheck(right, Z)
    assert ea.gradcheck(wrong, np.array([0.3, -0.2]))  # identical on real values
    with pytest.raises(ea.GradcheckError, match="reverse mode"):
        ea.gradcheck(wrong, Z)


# -- every array library ---------------------------------------------------------------------------


def test_gradcheck_on_library_arrays(lib):
    x, y = lib_arrays(lib, X3, Y3)
    assert ea.gradcheck(g_xy, x, y, directions=1)
    with pytest.raises(ea.GradcheckError, match="argument 0"):
        ea.gradcheck(lambda a: ea.einsum("ij,jk->ik", ea.stop_gradient(a), y) * a, x, directions=1)


def test_a_list_argument_is_a_pytree_as_in_grad():
    """A list of arrays is a pytree (as for `ea.grad` and JAX), not one stacked array: `f`
    gets the list, and a failure names the list's element."""
    xs = [np.array([0.3, -1.1]), np.array([2.0, 0.5])]
    seen = []

    def f(ys):
        seen.append(type(ys))
        return ea.sin(ys[0]) * ys[1]

    assert ea.gradcheck(f, xs) is True
    assert set(seen) == {list}
    with pytest.raises(ea.GradcheckError, match=r"argument 0\[0\]"):
        ea.gradcheck(lambda ys: ea.stop_gradient(ys[0]) * ys[1], xs)
    assert ea.gradcheck(lambda ys: ys[0] * ys[1] ** 2, [0.5, 2.0]) is True  # a list of numbers
