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


def _undeclared(prims):
    """What the registry test refuses, per primitive: a mode without a rule (an explicit zero
    derivative or `core.LOOP` counts as one), or no aliasing kind."""
    missing = []
    for p in prims:
        if p.aliasing is None:
            missing.append(f"{p.name}: no aliasing kind (fresh, view or may_view)")
        elif p.aliasing not in core.ALIASING and not callable(p.aliasing):
            missing.append(f"{p.name}: aliasing {p.aliasing!r}")
        if p.program_only:  # inside compiled programs only (a fused kernel's placeholder)
            continue
        if p.jvp is None and not p.zero_derivative:
            missing.append(f"{p.name}: forward mode")
        if p.vjp is None and not p.zero_derivative and p.residual is None:
            missing.append(f"{p.name}: reverse mode")
        if p.batch is None:
            missing.append(f"{p.name}: batching (a rule, or core.LOOP)")
    return missing


def test_every_primitive_declares_a_rule_for_each_mode_and_an_aliasing_kind():
    assert _undeclared(_all()) == []


def test_the_registry_test_refuses_a_primitive_missing_a_mode_or_an_aliasing_kind():
    bare = core.Primitive("bare", lambda x: x)
    assert _undeclared([bare]) == [
        "bare: no aliasing kind (fresh, view or may_view)",
        "bare: forward mode",
        "bare: reverse mode",
        "bare: batching (a rule, or core.LOOP)",
    ]
    half = core.declare(core.Primitive("half", np.sin), vjp=lambda g, a, v, p, n: [g], aliasing="fresh")
    assert _undeclared([half]) == ["half: forward mode", "half: batching (a rule, or core.LOOP)"]
    said = core.Primitive("said", np.sign)
    core.declare(said, zero_derivative=True, batch=core.LOOP, aliasing="fresh")
    assert _undeclared([said]) == []
    assert _undeclared(_all()) == _undeclared([bare, half])  # (both registered: the walk finds them)


def test_a_jvp_that_computes_the_result_needs_a_jvp_rule():
    with pytest.raises(ValueError, match="'joint' declares jvp_with_primal without a jvp rule"):
        core.declare(core.Primitive("joint", np.sin), jvp_with_primal=True, aliasing="fresh")
    assert [p.name for p in _all() if p.jvp_with_primal] == ["custom_jvp_call"]


def test_the_tables_are_views_of_the_declarations():
    prims = _all()
    assert set(core.jvp_rules) == {p for p in prims if p.jvp is not None}
    assert set(core.batch_rules) == {p for p in prims if p.batch is not None}
    assert set(core.zero_derivative) == {p for p in prims if p.zero_derivative}
    assert all(core.vjp_rules[p] is p.vjp for p in core.vjp_rules)
    with pytest.raises(TypeError):
        core.vjp_rules[core.primitives["exp"]] = None  # read-only: declare() is the one way in


def test_the_passes_properties_are_declared_with_the_elementwise_table():
    from einad.rules import elementwise

    elementwise_prims = {p.name for p in _all() if p.elementwise}
    assert elementwise_prims == set(elementwise.PRIMITIVES) | {"where"}
    assert {p.name for p in _all() if p.commutative} == {"add", "multiply", "equal", "not_equal"}
    assert {p.name for p in _all() if p.zero_at_zero} == set(elementwise.ZERO_AT_ZERO)
    zero = np.zeros(3)
    for name in elementwise.ZERO_AT_ZERO:  # f(0) == 0, as declared
        assert not np.any(core.primitives[name].impl(zero)), name
    for p in _all():
        if p.accepts_out:  # a buffer of the result's shape and dtype is written and returned
            x = np.arange(1, 4) if p.name in elementwise.BITWISE else np.linspace(0.1, 0.9, 3)
            args = (x,) if p.batch is core.ride_along else (x, x)
            with np.errstate(all="ignore"):  # (arccosh is nan below 1: the same nan either way)
                want = p.impl(*args)
                buf = np.empty_like(want)
                assert p.impl(*args, out=buf) is buf, p.name
            np.testing.assert_array_equal(buf, want, err_msg=p.name)


def test_the_declared_loops_are_the_ones_vmap_runs_per_example():
    looped = sorted(p.name for p, rule in core.batch_rules.items() if rule is core.LOOP)
    assert looped == ["einsum_vg", "einsum_vjp", "place", "unpack"]
    # vmap of a jitted sliced network's gradient (one einsum_vjp node and its unpacks) loops per
    # example
    f = ea.jit(lambda a, b, c: ea.sum(ea.einsum("ij,jk,kl->il", a, b, c, memory_limit=3) ** 2))
    rng = np.random.default_rng(0)
    a, b, c = rng.standard_normal((3, 2, 3)), rng.standard_normal((3, 4)), rng.standard_normal((4, 2))
    graph = str(ea.make_graph(ea.grad(f, (0, 1, 2)))(a[0], b, c))
    assert "einsum_vjp" in graph and "unpack" in graph
    mapped = ea.vmap(ea.grad(f, (0, 1, 2)), in_axes=(0, None, None))(a, b, c)
    for i in range(3):
        for got, want in zip(mapped, ea.grad(f, (0, 1, 2))(a[i], b, c)):
            assert_close(got[i], want)
