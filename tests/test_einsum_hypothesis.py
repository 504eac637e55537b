"""Random einsum specs: value against numpy.einsum, every operand's VJP against
float64 central differences of numpy.einsum.

Each drawn spec also runs in the grammar's other spellings (issue 12): with its
letters mapped to Greek and to CJK letters, and rewritten in numpy's interleaved
form with int labels, string labels (bond names) and labels of mixed types. All
must give the string spec's value and gradients.
"""

import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import einad as ea
from tests.support.numerics import assert_close, numeric_vjp, reference_einsum
from tests.support.strategies import einsum_specs

# Renamings that keep the letters' order (an implicit output sorts by code point, upper case first).
GREEK = str.maketrans(dict(zip("ABabcd", "ΑΒαβγδ")))
CJK = str.maketrans(dict(zip("ABabcd", "一丁七万丈三")))
FORMS = ["string", "greek", "cjk", "interleaved ints", "interleaved names", "interleaved mixed"]


def _tokens(term):
    return re.findall(r"\.\.\.|[A-Za-z]", term)


def _implicit_output(terms):
    """numpy's output for subscripts without '->': '...' first, then the letters used once, sorted."""
    letters = [c for t in terms for c in _tokens(t) if c != "..."]
    ellipsis = ["..."] if any("..." in t for t in terms) else []
    return ellipsis + sorted(c for c in set(letters) if letters.count(c) == 1)


def spelled(form, spec):
    """`f(*operands)` computing the einsum `spec` written in the grammar's spelling `form`."""
    if form == "string":
        return lambda *ops: ea.einsum(spec, *ops)
    if form in ("greek", "cjk"):
        text = spec.translate(GREEK if form == "greek" else CJK)
        return lambda *ops: ea.einsum(text, *ops)
    label = {
        "interleaved ints": ord,  # order-preserving, so an implicit output comes out the same
        "interleaved names": lambda c: f"{c}_bond",
        "interleaved mixed": lambda c: ord(c) if c in "aA" else f"{c}_bond",  # cannot be sorted
    }[form]
    lhs, arrow, rhs = spec.partition("->")
    terms = lhs.split(",")
    if not arrow and form == "interleaved mixed":
        arrow, rhs = "->", "".join(_implicit_output(terms))  # unsortable labels need their output
    sublists = [[Ellipsis if c == "..." else label(c) for c in _tokens(t)] for t in terms]
    output = [[Ellipsis if c == "..." else label(c) for c in _tokens(rhs)]] if arrow else []

    def f(*ops):
        args = [x for pair in zip(ops, sublists) for x in pair]
        return ea.einsum(*args, *output)

    return f


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsum_specs())
def test_random_einsum_value_and_vjp(case):
    spec, shapes, seed = case
    rng = np.random.default_rng(seed)
    args = tuple(rng.standard_normal(s) for s in shapes)
    expected = reference_einsum(spec, *args)
    u = rng.standard_normal(expected.shape)
    # einsum is linear in each operand, so a large step is exact and well conditioned
    ref = lambda *a: reference_einsum(spec, *a)
    numeric = [numeric_vjp(ref, args, u, argnum=k, eps=1.0) for k in range(len(args))]

    for form in FORMS:
        f = spelled(form, spec)
        out = f(*args)
        assert out.shape == expected.shape, (form, spec, shapes)
        assert_close(out.numpy(), expected, rtol=1e-10, atol=1e-12)

        value, pullback = ea.vjp(f, *args)
        assert_close(value, expected, rtol=1e-10, atol=1e-12)
        grads = pullback(u)
        assert len(grads) == len(args)
        for k, g in enumerate(grads):
            assert g.shape == args[k].shape, (form, spec, shapes, k)
            assert_close(g, numeric[k], rtol=1e-8, atol=1e-10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsum_specs(), st.sampled_from(FORMS))
def test_random_einsum_jvp(case, form):
    spec, shapes, seed = case
    rng = np.random.default_rng(seed)
    args = tuple(rng.standard_normal(s) for s in shapes)
    tangents = tuple(rng.standard_normal(s) for s in shapes)
    _, tangent_out = ea.jvp(spelled(form, spec), args, tangents)
    expected = sum(reference_einsum(spec, *(args[:k] + (t,) + args[k + 1 :])) for k, t in enumerate(tangents))
    assert_close(tangent_out, expected, rtol=1e-10, atol=1e-12)
