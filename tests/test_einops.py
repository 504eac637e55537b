"""einops on einad Tensors: ``einops.rearrange``, ``reduce``, ``repeat``, ``einsum``, ``pack`` through
einad's einops backend (einad/einops_backend.py), and ``einops.array_api``'s functions through a
Tensor's array API namespace: einops' values (its numpy backend is the reference), einad's
derivatives (central differences), the same under ``ea.jit`` and ``ea.vmap``."""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close, numeric_grad

einops = pytest.importorskip("einops", reason="einops is an optional extra (in einad[test])")

RNG = np.random.default_rng(7)
X = RNG.uniform(-1, 1, (2, 3, 4))

EXPRESSIONS = [
    ("rearrange", lambda e, t: e.rearrange(t, "a b c -> c (b a)")),
    ("rearrange split", lambda e, t: e.rearrange(t, "a b (c d) -> (a d) b c", d=2)),
    ("reduce sum", lambda e, t: e.reduce(t, "a b c -> a c", "sum")),
    ("reduce mean", lambda e, t: e.reduce(t, "a b c -> b", "mean")),
    ("reduce max", lambda e, t: e.reduce(t, "a b c -> c a", "max")),
    ("reduce min", lambda e, t: e.reduce(t, "a b c -> ", "min")),
    ("reduce prod", lambda e, t: e.reduce(t, "a b c -> a b", "prod")),
    ("pool", lambda e, t: e.reduce(t, "a b (c p) -> a b c", "max", p=2)),
    ("repeat", lambda e, t: e.repeat(t, "a b c -> a b r c", r=3)),
    ("einsum", lambda e, t: e.einsum(t, e.rearrange(t, "a b c -> b a c"), "a b c, b a d -> c d")),
    ("einsum trace", lambda e, t: e.einsum(t[:, :2, :2], "a i i -> a")),
    ("pack", lambda e, t: e.pack([t, t[0] * 2.0], "* c")[0]),
]


@pytest.mark.parametrize(("name", "expr"), EXPRESSIONS, ids=[n for n, _ in EXPRESSIONS])
def test_einops_on_tensors_gives_its_numpy_values_and_einads_derivatives(name, expr):
    want = expr(einops, X)
    got = expr(einops, ea.tensor(X))
    assert isinstance(got, ea.Tensor) and got.shape == want.shape
    assert_close(got.numpy(), want, rtol=1e-12)
    weights = RNG.uniform(-1, 1, want.shape)
    loss = lambda t: ea.sum(expr(einops, t) * weights)
    g = ea.grad(loss)(X)
    assert_close(g, numeric_grad(lambda v: float(np.sum(expr(einops, v) * weights)), X), rtol=1e-6, atol=1e-8)
    assert_close(ea.jit(ea.grad(loss))(X), g, rtol=1e-12)
    batch = np.stack([X, 2.0 * X])
    mapped = ea.vmap(lambda t: expr(einops, t))(batch)
    assert_close(mapped, np.stack([want, expr(einops, 2.0 * X)]), rtol=1e-12)


def test_einops_array_api_functions_take_the_tensors_namespace():
    array_api = pytest.importorskip("einops.array_api", reason="einops < 0.7 has no array API functions")
    t = ea.tensor(X)
    assert_close(array_api.rearrange(t, "a b c -> (a b) c").numpy(), X.reshape(6, 4))
    g = ea.grad(lambda v: ea.sum(array_api.reduce(v, "a b c -> c", "max")))(X)
    want = (X == X.max(axis=(0, 1), keepdims=True)).astype(float)
    assert_close(g, want)


def test_reductions_of_booleans_and_integers():
    mask = X > 0
    np.testing.assert_array_equal(
        einops.reduce(ea.tensor(mask), "a b c -> a", "any").numpy(), mask.any((1, 2))
    )
    np.testing.assert_array_equal(
        einops.reduce(ea.tensor(mask), "a b c -> c", "all").numpy(), mask.all((0, 1))
    )
    ints = np.arange(24).reshape(2, 3, 4)
    np.testing.assert_array_equal(
        einops.reduce(ea.tensor(ints), "a b c -> b", "sum").numpy(), ints.sum((0, 2))
    )
    with pytest.raises(NotImplementedError, match="mean"):  # (einops' rule for integers, as on numpy)
        einops.reduce(ea.tensor(ints), "a b c -> b", "mean")
