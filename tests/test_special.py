"""einad.special: scipy.special's entropy terms, logit and the aliases, as einad computes them
exactly. Values against their closed forms (0 where the first argument is, never 0 * log 0),
derivatives against the closed forms JAX's rules give (also at x = 0, and without a numpy
warning: the suite turns warnings into errors) and central differences away from the edges."""

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close

X = np.array([0.0, 0.5, 2.0, 0.0, 3.0])
Y = np.array([0.0, 0.3, 1.5, 2.0, 0.7])


def test_xlogy_and_xlog1py_are_zero_where_x_is_and_differentiate_as_the_formula():
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(X == 0, 0.0, X * np.log(Y))
        want1 = np.where(X == 0, 0.0, X * np.log1p(Y))
    assert_close(ea.special.xlogy(X, Y), want)  # 0 at (0, 0) too: no nan
    assert_close(ea.special.xlog1py(X, Y), want1)
    inside = (X[1:3], Y[1:3])
    gx, gy = ea.grad(lambda x, y: ea.sum(ea.special.xlogy(x, y)), argnums=(0, 1))(*inside)
    assert_close(gx, np.log(inside[1]))
    assert_close(gy, inside[0] / inside[1])
    # at x = 0 the derivative in x is log(y) (the smooth function's, JAX's), in y it is 0
    gx0, gy0 = ea.grad(lambda x, y: ea.special.xlogy(x, y), argnums=(0, 1))(0.0, 0.5)
    assert_close(gx0, np.log(0.5))
    assert_close(gy0, 0.0)
    assert ea.grad(lambda x: ea.special.xlogy(x, 0.0))(0.0) == -np.inf  # log 0, without a warning
    _, t = ea.jvp(lambda x, y: ea.special.xlog1py(x, y), (X[1:3], Y[1:3]), (np.ones(2), np.ones(2)))
    assert_close(t, np.log1p(Y[1:3]) + X[1:3] / (1 + Y[1:3]))
    ea.gradcheck(lambda x, y: ea.special.xlogy(x, y) + ea.special.xlog1py(x, y), *inside)
    assert ea.special.xlogy(np.array([0, 2]), np.array([0, 3])).dtype == np.float64  # integers: float64
    assert ea.special.xlogy(np.float32(2.0), np.ones(2, np.float32)).dtype == np.float32


def test_entropy_of_a_spectrum_with_zeros():
    """The entanglement entropy of singular values, some exactly 0: entr gives 0 there (a plain
    -p log p gives nan), and the gradient of the others is -(1 + log p)."""
    p = np.array([0.5, 0.3, 0.2, 0.0])
    assert_close(
        ea.special.entr(p), np.array([-0.5 * np.log(0.5), -0.3 * np.log(0.3), -0.2 * np.log(0.2), 0.0])
    )
    assert_close(ea.special.entr(np.array([-1.0])), [-np.inf])
    g = ea.grad(lambda q: ea.sum(ea.special.entr(q[:3])))(p)
    assert_close(g, np.array([*-(1 + np.log(p[:3])), 0.0]))
    assert ea.grad(lambda q: ea.sum(ea.special.entr(q)))(p)[3] == np.inf  # the slope at 0, rightly
    assert_close(ea.hessian(lambda q: ea.sum(ea.special.entr(q)))(p[:3]), np.diag(-1 / p[:3]))


def test_rel_entr_logit_and_the_aliases():
    x, y = np.array([0.0, 0.5, 2.0, 0.0, 1.0]), np.array([0.7, 0.3, 1.5, 0.0, 0.0])
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.where(x == 0, 0.0, np.where(y > 0, x * np.log(x / np.where(y > 0, y, 1)), np.inf))
    assert_close(ea.special.rel_entr(x, y), want)
    gx, gy = ea.grad(lambda a, b: ea.sum(ea.special.rel_entr(a, b)[:3]), argnums=(0, 1))(x, y)
    assert_close(gx[1:3], np.log(x[1:3] / y[1:3]) + 1)
    assert_close(gy[1:3], -x[1:3] / y[1:3])
    assert gx[0] == 0.0  # (selected, as JAX's: not the -inf slope at 0)
    p = np.array([0.2, 0.5, 0.9])
    assert_close(ea.special.logit(p), np.log(p / (1 - p)))
    assert_close(ea.special.expit(ea.special.logit(p)), p)
    assert_close(ea.grad(lambda q: ea.sum(ea.special.logit(q)))(p), 1 / (p * (1 - p)))
    assert ea.special.logsumexp is ea.logsumexp and ea.special.softmax is ea.softmax


@pytest.mark.parametrize("name", ["xlogy", "xlog1py", "entr", "rel_entr", "logit", "expit"])
def test_special_functions_stage_and_map(name):
    f = getattr(ea.special, name)
    args = (np.array([0.2, 0.5, 0.7]),) if name in ("entr", "logit", "expit") else (X[1:3], Y[1:3])
    assert_close(ea.jit(f)(*args), f(*args))
    mapped = ea.vmap(f)(*[np.stack([a, a / 2]) for a in args])
    assert_close(mapped[1], f(*[a / 2 for a in args]))
