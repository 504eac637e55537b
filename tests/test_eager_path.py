"""The eager path's fast lanes (issue 25): in first-order reverse mode on numpy arrays, an
operation runs its kernel without a second trace lookup, and an elementwise pullback whose
cotangent already has its operand's shape and dtype skips the sum-to-shape step. Each test
counts the calls the lane saves, so deleting a lane fails it."""

from __future__ import annotations

import numpy as np

import einad as ea
from einad import core
from einad.rules import elementwise
from tests.support.numerics import assert_close

X = np.linspace(0.1, 0.9, 8)
W = np.linspace(1.0, 2.0, 8)


def chain(x, w):
    y = x
    for _ in range(10):
        y = ea.tanh(y * w) + y
    return ea.sum(y)


def _expected():
    # closed form of one step y' = tanh(y w) + y: dy'/dy = (1 - tanh²) w + 1, dy'/dw = (1 - tanh²) y
    y, gy_steps, gw_steps = X, [], []
    for _ in range(10):
        t = np.tanh(y * W)
        gy_steps.append((1 - t**2) * W + 1)
        gw_steps.append((1 - t**2) * y)
        y = t + y
    gy, gw = np.ones(8), np.zeros(8)
    for dy, dw in zip(reversed(gy_steps), reversed(gw_steps)):
        gw += gy * dw
        gy = gy * dy
    return gy, gw


def test_an_eager_operation_looks_its_trace_up_once(monkeypatch):
    calls = []
    real = core.bind
    monkeypatch.setattr(core, "bind", lambda *a: calls.append(a[0].name) or real(*a))
    with core.tracing(core.ReverseTrace()) as trace:
        x, w = core.box(X, trace), core.box(W, trace)
        y = x * w
    assert calls == []  # the operator binds through elementwise's own reference; process calls the kernel
    assert_close(y._value, X * W)


def test_a_same_shape_pullback_skips_sum_to_shape(monkeypatch):
    calls = []
    real = elementwise.sum_to_shape
    monkeypatch.setattr(elementwise, "sum_to_shape", lambda *a: calls.append(a[1]) or real(*a))
    gx, gw = ea.grad(chain, (0, 1))(X, W)
    assert calls == []
    ex, ew = _expected()
    assert_close(gx, ex)
    assert_close(gw, ew)
    # broadcasting still sums back: a scalar weight's gradient is the sum over the vector
    (gs,) = ea.grad(lambda s: ea.sum(ea.tanh(X * s)), (0,))(1.5)
    assert calls
    assert_close(gs, np.sum((1 - np.tanh(1.5 * X) ** 2) * X))
