"""The registry of primitives (issue 26): every primitive is registered once under its own name,
and declares a rule for each mode — forward (JVP), reverse (VJP), batching — or says in so
many words that it has none to give (a zero derivative; a per-example loop under vmap).
A primitive added without one fails here, instead of falling back silently."""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea  # (imports every rules module, which registers the primitives)
from einad import core
from tests.support.numerics import assert_close


def _all():
    return list(core.primitives.values())


def test_primitives_are_registered_once_by_a_unique_name():
    prims = _all()
    assert len(prims) > 80
    assert len({p.name for p in prims}) == len(prims)
    assert all(core.primitives[p.name] is p for p in prims)
    with pytest.raises(ValueError, match="a primitive named 'einsum' exists already"):
        core.Primitive("einsum", lambda x: x)


def test_every_primitive_has_a_rule_for_each_mode():
    missing = []
    for p in _all():
        if p in core.program_only:  # inside compiled programs only (a fused kernel's placeholder)
            continue
        if p not in core.jvp_rules and p not in core.zero_derivative:
            missing.append(f"{p.name}: forward mode")
        if p not in core.vjp_rules and p not in core.zero_derivative and p not in core.residual_rules:
            missing.append(f"{p.name}: reverse mode")
        if p not in core.batch_rules:
            missing.append(f"{p.name}: batching (a rule, or core.LOOP)")
    assert missing == []


def test_only_the_fused_placeholder_lives_in_programs_alone():
    assert sorted(p.name for p in core.program_only) == ["fused"]


def test_the_declared_loops_are_the_ones_vmap_runs_per_example():
    looped = sorted(p.name for p, rule in core.batch_rules.items() if rule is core.LOOP)
    assert looped == ["einsum_vg", "einsum_vjp", "place", "unpack"]
    # vmap of a jitted network's gradient (one einsum_vjp node and its unpacks) loops per example
    f = ea.jit(lambda a, b, c: ea.sum(ea.einsum("ij,jk,kl->il", a, b, c) ** 2))
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 2, 3)), rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    graph = str(ea.make_graph(ea.grad(f, (0, 1, 2)))(a[0], b, c))
    assert "einsum_vjp" in graph and "unpack" in graph
    mapped = ea.vmap(ea.grad(f, (0, 1, 2)), in_axes=(0, None, None))(a, b, c)
    for i in range(3):
        for got, want in zip(mapped, ea.grad(f, (0, 1, 2))(a[i], b, c)):
            assert_close(got[i], want)
