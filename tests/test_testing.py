"""gradcheck probes complex inputs along imaginary directions too, under JAX's convention."""

import numpy as np
import pytest

import einad as ea
from einad.core import Primitive, bind, rules
from einad.util import wrap


def _exp_with(vjp_factor):
    """exp whose JVP is right and whose VJP multiplies the cotangent by vjp_factor(ans)."""
    prim = Primitive("test_exp", np.exp)
    rules(
        prim,
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
