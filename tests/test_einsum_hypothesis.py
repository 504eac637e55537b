"""Random einsum specs: value against numpy.einsum, every operand's VJP against
float64 central differences of numpy.einsum."""

import numpy as np
from conftest import assert_close, numeric_vjp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import einad as ea

LETTERS = "abcdAB"  # upper case too, to exercise numpy's implicit output order


@st.composite
def einsum_cases(draw):
    """A spec (string) and operand shapes that numpy.einsum accepts.

    1-4 operands of rank <= 4; letters may repeat inside an operand; a labelled
    dimension may be 1 where the letter is larger elsewhere; an operand may
    carry '...' (anywhere in its subscripts) covering a suffix of a common
    broadcast shape, with some of those dimensions 1; the output is implicit
    or an explicit random subset of the letters in random order.
    """
    sizes = {c: draw(st.integers(1, 4)) for c in LETTERS}
    pool = draw(st.permutations(LETTERS))[: draw(st.integers(1, len(LETTERS)))]  # small pools repeat
    n_ops = draw(st.integers(1, 4))
    ell_shape = tuple(draw(st.lists(st.integers(1, 3), max_size=2)))
    terms, shapes, any_ellipsis = [], [], False
    for _ in range(n_ops):
        letters = draw(st.lists(st.sampled_from(pool), max_size=3))
        use_ell = draw(st.booleans())
        ell_rank = draw(st.integers(0, len(ell_shape))) if use_ell else 0
        ell_rank = min(ell_rank, 4 - len(letters))
        ell = ell_shape[len(ell_shape) - ell_rank :]
        ell = tuple(1 if draw(st.integers(0, 3)) == 0 else d for d in ell)  # size-1 broadcast
        shape_of_letter = {c: 1 if draw(st.integers(0, 5)) == 0 else sizes[c] for c in set(letters)}
        dims = [shape_of_letter[c] for c in letters]
        if use_ell:
            any_ellipsis = True
            pos = draw(st.integers(0, len(letters)))
            term = "".join(letters[:pos]) + "..." + "".join(letters[pos:])
            shape = tuple(dims[:pos]) + ell + tuple(dims[pos:])
        else:
            term = "".join(letters)
            shape = tuple(dims)
        terms.append(term)
        shapes.append(shape)
    spec = ",".join(terms)
    if draw(st.booleans()):  # explicit output: a random subset, in random order
        used = sorted({c for t in terms for c in t if c != "."})
        out = list(draw(st.permutations(used)))[: draw(st.integers(0, len(used)))]
        if any_ellipsis:
            out.insert(draw(st.integers(0, len(out))), "...")
        spec += "->" + "".join(out)
    seed = draw(st.integers(0, 2**16))
    return spec, shapes, seed


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsum_cases())
def test_random_einsum_value_and_vjp(case):
    spec, shapes, seed = case
    rng = np.random.default_rng(seed)
    args = tuple(rng.standard_normal(s) for s in shapes)
    expected = np.einsum(spec, *args)

    out = ea.einsum(spec, *args)
    assert out.shape == expected.shape, (spec, shapes)
    assert_close(out.numpy(), expected, rtol=1e-10, atol=1e-12)

    u = rng.standard_normal(expected.shape)
    value, pullback = ea.vjp(lambda *a: ea.einsum(spec, *a), *args)
    assert_close(value, expected, rtol=1e-10, atol=1e-12)
    grads = pullback(u)
    assert len(grads) == len(args)
    for k, g in enumerate(grads):
        assert g.shape == args[k].shape, (spec, shapes, k)
        # einsum is linear in each operand, so a large step is exact and well conditioned
        assert_close(
            g, numeric_vjp(lambda *a: np.einsum(spec, *a), args, u, argnum=k, eps=1.0), rtol=1e-8, atol=1e-10
        )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(einsum_cases())
def test_random_einsum_jvp(case):
    spec, shapes, seed = case
    rng = np.random.default_rng(seed)
    args = tuple(rng.standard_normal(s) for s in shapes)
    tangents = tuple(rng.standard_normal(s) for s in shapes)
    _, tangent_out = ea.jvp(lambda *a: ea.einsum(spec, *a), args, tangents)
    expected = sum(np.einsum(spec, *(args[:k] + (t,) + args[k + 1 :])) for k, t in enumerate(tangents))
    assert_close(tangent_out, expected, rtol=1e-10, atol=1e-12)
