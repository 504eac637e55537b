"""einad.rules.einsum on random einsums drawn by hypothesis (tests/support/strategies.py), in
every mode of derivative.

* Grammar cases (`einsum_specs`): the value against numpy.einsum and every operand's VJP
  against float64 central differences, also in the grammar's other spellings (Greek and CJK
  letters, the interleaved form with int, string and mixed labels), and the JVP; the same
  cases on array-api-strict and torch against einad on numpy.
* Typed cases (`einsum_cases`: 1-6 operands, size-0 and size-1 dimensions, float32 / float64 /
  complex128, sometimes mixed): the value and dtype match numpy.einsum; the VJP matches central
  differences along real and imaginary directions (JAX's convention: a real loss
  L = Re <u, F(x)> has gradient dL/dRe x - i dL/dIm x); the JVP matches central differences;
  VJP and JVP are dual (<vjp(u), v> == <u, jvp(v)>); second derivatives through ea.hvp agree in
  all three modes and match central differences of ea.grad.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

import einad as ea
import einad.transforms.batching
from tests.support.arraylibs import load
from tests.support.checks import (
    check_lib,
    einsum_fn,
    random_operands,
    vjp_all,
)
from tests.support.numerics import (
    assert_close,
    numeric_vjp,
    reference_einsum,
)
from tests.support.strategies import einsum_cases, einsum_specs, random_array

both_modes = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted


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


# -- random specs on array-api-strict and torch ------------------------------------------------


@pytest.mark.parametrize("name", ["array_api_strict", "torch"])
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=einsum_specs())
def test_random_specs(name, case):

    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    if name == "array_api_strict":
        lib.module.set_array_api_strict_flags(api_version="2024.12")
    spec, shapes, seed = case
    ops = random_operands(shapes, seed=seed)
    check_lib(lib, ea.einsum(spec, *[lib.asarray(o) for o in ops]), reference_einsum(spec, *ops))
    vjp_all(lib, einsum_fn(spec), ops, seed=seed + 1)


MODES = ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")


def _scaled(factor: float) -> settings:
    """The loaded profile's example count, scaled for a costlier test."""
    return settings(max_examples=max(5, int(settings.default.max_examples * factor)))


# -- the strategy ------------------------------------------------------------------------------


def _wide(a):
    """The same numbers in float64 or complex128 (the reference precision)."""
    a = np.asarray(a)
    return a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)


def _rel(*dtypes):
    """Relative tolerance, against a bound on the sum of |terms|, for results of these dtypes."""
    eps = max(np.finfo(np.dtype(d)).eps for d in dtypes)
    return max(256 * eps, 1e-11)


def _assert_within(actual, expected, bound, what):
    actual, expected = _wide(actual), _wide(expected)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    err = np.abs(actual - expected)
    ok = err <= bound + 1e-300
    assert ok.all(), f"{what}: worst error {err.max()} against bound {np.min(bound)}..{np.max(bound)}"


def _np(spec, *args):
    return np.einsum(spec, *[_wide(a) for a in args])


def _setup(case, share_first_two=False):
    """A drawn case's operands and numpy's value (None: numpy and einad both refuse it)."""
    spec, shapes, types, seed = case
    rng = np.random.default_rng(seed)
    args = [random_array(rng, s, t) for s, t in zip(shapes, types)]
    if share_first_two:
        args[1] = args[0]
    return spec, shapes, types, rng, args, _cases_numpy_accepts(spec, args)


def _cases_numpy_accepts(spec, args):
    """numpy's value, or the assertion that einad refuses what numpy refuses."""
    try:
        return np.einsum(spec, *args)
    except ValueError:
        note("numpy refuses this spec: einad must refuse it too")
    try:
        ea.einsum(spec, *args)
    except ea.EinsumError as err:
        assert str(err)
        return None
    raise AssertionError(f"numpy refuses {spec!r} with shapes {[a.shape for a in args]}, einad gave a result")


def _central_vjp(spec, args, u, k):
    """Gradient of L = Re <u, einsum(args)> in args[k], by central differences (float64/complex128).

    einsum is linear in each operand, so a unit step is exact. Complex operands get
    dL/dRe - i dL/dIm (JAX's convention); real operands dL/dx.
    """
    wide = [_wide(a) for a in args]
    u = _wide(u)
    x = wide[k]
    g = np.zeros(x.shape, dtype=x.dtype)

    def loss(xk):
        return np.real(np.sum(u * np.einsum(spec, *(wide[:k] + [xk] + wide[k + 1 :]))))

    directions = (1.0, 1j) if x.dtype.kind == "c" else (1.0,)
    for idx in np.ndindex(*x.shape):
        for d in directions:
            e = np.zeros(x.shape, dtype=x.dtype)
            e[idx] = d
            slope = (loss(x + e) - loss(x - e)) / 2
            g[idx] += slope if d == 1.0 else -1j * slope
    return g


def _central_jvp(spec, args, tangents):
    """d/dh einsum(args + h * tangents) at h = 0, by the 7-point central difference.

    einsum is a polynomial of degree <= 6 in h (one factor per operand), which this
    formula differentiates exactly (up to rounding).
    """
    wide = [_wide(a) for a in args]
    ts = [_wide(t) for t in tangents]
    step = 0.5
    f = lambda h: np.einsum(spec, *[a + h * step * t for a, t in zip(wide, ts)])
    return (-f(-3) + 9 * f(-2) - 45 * f(-1) + 45 * f(1) - 9 * f(2) + f(3)) / (60 * step)


# -- value ------------------------------------------------------------------------------------


@given(einsum_cases(), st.sampled_from(["auto", "greedy", "optimal", "dp", False]))
@example(("ii->i", ((3, 3),), (np.float64,), 1), "auto")
@example(("...ij,jk", ((0, 2, 3), (3, 1)), (np.float32,), 2), "greedy")
@example(("a,b,c,d,e,A", ((1,), (2,), (3,), (1,), (2,), (3,)), (np.complex128,) * 6, 3), "optimal")
def test_value_matches_numpy(case, optimize):
    spec, _shapes, types, _rng, args, expected = _setup(case)
    if expected is None:
        return
    out = ea.einsum(spec, *args, optimize=optimize)
    assert isinstance(out, ea.Tensor)
    assert out.dtype == np.asarray(expected).dtype, (spec, out.dtype, np.asarray(expected).dtype)
    assert out.shape == np.shape(expected)
    bound = _rel(*types) * np.einsum(spec, *[np.abs(_wide(a)) for a in args])
    _assert_within(out.numpy(), _np(spec, *args), bound, f"value of {spec!r}")
    # the same numbers with the operands wrapped as Tensors
    again = ea.einsum(spec, *[ea.tensor(a) for a in args], optimize=optimize)
    assert np.array_equal(again.numpy(), out.numpy(), equal_nan=True)


@pytest.mark.parametrize("optimize", ["auto", "greedy", "optimal", "dp", "branch-2", False])
def test_every_optimize_strategy_takes_an_empty_operand(optimize):
    """Found by test_value_matches_numpy: opt_einsum's 'dp' finds no path for this one."""
    args = [np.ones(2), np.ones(0), np.ones(2), np.ones(2)]
    out = ea.einsum("a,b,a,a", *args, optimize=optimize)
    assert out.shape == (0,) and out.dtype == np.float64
    _, pullback = ea.vjp(lambda *a: ea.einsum("a,b,a,a", *a, optimize=optimize), *args)
    assert [g.shape for g in pullback(np.ones(0))] == [(2,), (0,), (2,), (2,)]


# -- reverse mode --------------------------------------------------------------------------------


@given(einsum_cases())
@example(("ij,ji", ((2, 2), (2, 2)), (np.complex128, np.complex128), 4))
@example(("i,i->", ((3,), (3,)), (np.float32, np.complex128), 5))
@example(("ii...,i->i...", ((2, 2, 0), (2,)), (np.float64, np.float64), 6))
def test_vjp_matches_central_differences(case):
    spec, _shapes, types, rng, args, expected = _setup(case)
    if expected is None:
        return
    u = random_array(rng, np.shape(expected), np.asarray(expected).dtype)
    value, pullback = ea.vjp(lambda *a: ea.einsum(spec, *a), *args)
    assert value.dtype == np.asarray(expected).dtype
    grads = pullback(u)
    assert isinstance(grads, tuple) and len(grads) == len(args)
    abs_args = [np.abs(_wide(a)) for a in args]
    for k, g in enumerate(grads):
        assert g.shape == args[k].shape, (spec, k)
        assert g.dtype == args[k].dtype, (spec, k, g.dtype)
        bound = _rel(*types) * _central_vjp(spec, abs_args, np.abs(u), k)
        _assert_within(g, _central_vjp(spec, args, u, k), bound, f"vjp of operand {k} of {spec!r}")


@given(einsum_cases(max_operands=4, same_first_two=True))
def test_same_tensor_as_two_operands(case):
    """One tensor passed as two operands gets the sum of both operands' gradients."""
    spec, _shapes, types, rng, args, expected = _setup(case, share_first_two=True)
    if expected is None:
        return
    u = random_array(rng, np.shape(expected), np.asarray(expected).dtype)
    _, pullback = ea.vjp(lambda a, *rest: ea.einsum(spec, a, a, *rest), args[0], *args[2:])
    g = pullback(u)[0]
    assert g.shape == args[0].shape and g.dtype == args[0].dtype
    want = _central_vjp(spec, args, u, 0) + _central_vjp(spec, args, u, 1)
    abs_args = [np.abs(_wide(a)) for a in args]
    bound = _rel(*types) * (
        _central_vjp(spec, abs_args, np.abs(u), 0) + _central_vjp(spec, abs_args, np.abs(u), 1)
    )
    _assert_within(g, want, bound, f"gradient of the shared operand of {spec!r}")


# -- forward mode and duality ---------------------------------------------------------------------


@given(einsum_cases())
@example(("ij,jk,kl,lm,mn,na->", ((2, 2),) * 6, (np.float64,) * 6, 7))
@example(("...a,a...", ((1, 3, 2), (2, 3)), (np.complex128, np.float32), 8))
def test_jvp_matches_central_differences(case):
    spec, shapes, types, rng, args, expected = _setup(case)
    if expected is None:
        return
    tangents = [random_array(rng, s, t) for s, t in zip(shapes, types)]
    out, tangent_out = ea.jvp(lambda *a: ea.einsum(spec, *a), tuple(args), tuple(tangents))
    assert out.dtype == np.asarray(expected).dtype
    assert tangent_out.dtype == out.dtype, (spec, tangent_out.dtype, out.dtype)
    assert tangent_out.shape == out.shape
    # all terms of the expansion are bounded by einsum(|x| + |t|); the formula's rounding too
    bound = (
        _rel(*types)
        * 64
        * np.einsum(spec, *[np.abs(_wide(a)) + np.abs(_wide(t)) for a, t in zip(args, tangents)])
    )
    _assert_within(tangent_out, _central_jvp(spec, args, tangents), bound, f"jvp of {spec!r}")


@given(einsum_cases())
@example(("ab,bc->ca", ((2, 3), (3, 2)), (np.complex128, np.complex128), 9))
def test_vjp_jvp_duality(case):
    """<vjp(u), v> == <u, jvp(v)> with the bilinear pairing sum(a * b) (no conjugate).

    All-complex operands: equal as complex numbers (einsum is complex-linear in each
    operand). Real operands meeting complex ones: their cotangent is the real part,
    so the real parts agree.
    """
    spec, shapes, types, rng, args, expected = _setup(case)
    if expected is None:
        return
    f = lambda *a: ea.einsum(spec, *a)
    u = random_array(rng, np.shape(expected), np.asarray(expected).dtype)
    vs = [random_array(rng, s, t) for s, t in zip(shapes, types)]
    _, pullback = ea.vjp(f, *args)
    grads = pullback(u)
    _, tangent_out = ea.jvp(f, tuple(args), tuple(vs))
    reverse = sum(np.sum(_wide(g) * _wide(v)) for g, v in zip(grads, vs))
    forward = np.sum(_wide(u) * _wide(tangent_out))
    scale = np.sum(
        np.abs(_wide(u)) * np.einsum(spec, *[np.abs(_wide(a)) + np.abs(_wide(v)) for a, v in zip(args, vs)])
    )
    tol = _rel(*types) * 16 * scale + 1e-300
    if all(np.dtype(t).kind == "c" for t in types):
        assert abs(reverse - forward) <= tol, (spec, reverse, forward)
    else:
        assert abs(np.real(reverse) - np.real(forward)) <= tol, (spec, reverse, forward)


# -- second order -------------------------------------------------------------------------------


def _loss(spec, weights):
    def f(*xs):
        return ea.sum(weights * ea.sin(ea.einsum(spec, *xs)))

    return f


@_scaled(0.5)
@given(einsum_cases(max_operands=4, dtypes=(np.float64,)))
@example(("ij,jk,ki->", ((2, 2),) * 3, (np.float64,) * 3, 10))
@example(("ii", ((3, 3),), (np.float64,), 11))
def test_hvp_modes_agree_and_match_central_differences(case):
    spec, shapes, types, rng, args, expected = _setup(case)
    if expected is None:
        return
    f = _loss(spec, rng.standard_normal(np.shape(expected)))
    vs = tuple(random_array(rng, s, t) for s, t in zip(shapes, types))
    results = {m: ea.hvp(f, tuple(args), vs, mode=m) for m in MODES}
    every = tuple(range(len(args)))
    h = 1e-4
    plus = ea.grad(f, every)(*[a + h * v for a, v in zip(args, vs)])
    minus = ea.grad(f, every)(*[a - h * v for a, v in zip(args, vs)])
    central = [(p - m) / (2 * h) for p, m in zip(plus, minus)]
    scale = 1.0 + max((float(np.max(np.abs(c), initial=0.0)) for c in central), default=0.0)
    for mode, hv in results.items():
        assert isinstance(hv, tuple) and len(hv) == len(args), mode
        for k, (got, want) in enumerate(zip(hv, central)):
            assert got.shape == args[k].shape and got.dtype == np.float64, (mode, k)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * scale, err_msg=f"{mode}, operand {k}")
            np.testing.assert_allclose(
                got,
                results[MODES[0]][k],
                rtol=0,
                atol=1e-10 * scale,
                err_msg=f"{mode} disagrees with {MODES[0]}, operand {k}",
            )
