"""The eager path's fast lane (issue 25): in first-order reverse mode on numpy values, the
elementwise operations record their node directly (the numpy kernel, then `core.record`),
without `bind`, the trace's `process`, the implementation's type checks or the keep rule, and
the reverse pass reads each node's needed mask and sums numpy cotangents inline. The tests
count the Python calls made (`sys.setprofile`), so a deleted lane fails them; and they check
that what the lane does not take (no_grad, a dead trace, nested transformations, other
dtypes, non-numeric constants) goes the general way, with its results and errors."""

from __future__ import annotations

import gc
import sys
from collections import Counter

import numpy as np
import pytest

import einad as ea
from einad import core, pytree
from einad.errors import TracerError
from einad.rules import elementwise
from einad.transforms import autodiff
from einad.util import dtype_of
from tests.support.arraylibs import load
from tests.support.checks import check_lib
from tests.support.numerics import assert_close

X = np.linspace(0.1, 0.9, 8)
W = np.linspace(1.0, 2.0, 8)


def _profiled(fn, key):
    """``(fn(), Counter of key(frame) over the Python calls made while it ran)`` (None not counted).

    The garbage collector is off while it counts: a collection would run the weakref callbacks
    of whatever earlier tests left behind (a `WeakSet`'s `_remove`) inside the count. (No
    collection before it: in a full suite's heap each takes about 0.3 s, and a test may count
    a hundred times.)"""
    seen: Counter = Counter()

    def profile(frame, event, arg):
        if event == "call":
            k = key(frame)
            if k is not None:
                seen[k] += 1

    gc.disable()
    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
        gc.enable()
    return out, seen


def calls(fn):
    """``(fn(), Counter of the Python functions called while it ran, by name)``."""
    return _profiled(fn, lambda frame: frame.f_code.co_name)


def case7(x, w, n=40):
    """Benchmark case 7's chain: y*w, tanh, y+x, sin in turn, then a sum."""
    y = x
    for i in range(n):
        k = i % 4
        if k == 0:
            y = y * w
        elif k == 1:
            y = ea.tanh(y)
        elif k == 2:
            y = y + x
        else:
            y = ea.sin(y)
    return ea.sum(y)


def case7_expected(n=40):
    """Its value and gradient in numpy, by hand."""
    vals = [X]
    for i in range(n):
        y, k = vals[-1], i % 4
        vals.append(y * W if k == 0 else np.tanh(y) if k == 1 else y + X if k == 2 else np.sin(y))
    g, gx, gw = np.ones(8), np.zeros(8), np.zeros(8)
    for i in reversed(range(n)):
        k = i % 4
        if k == 0:
            gw += g * vals[i]
            g = g * W
        elif k == 1:
            g = g * (1 - vals[i + 1] ** 2)
        elif k == 2:
            gx += g
        else:
            g = g * np.cos(vals[i])
    return np.sum(vals[-1]), gx + g, gw


def _record_one(op):
    """`op` on a non-leaf Tensor of a reverse trace and two leaves, and the calls it made."""
    with core.tracing(core.ReverseTrace()) as trace:
        x, w = core.box(X, trace), core.box(W, trace)
        y = x * 1.0  # (a non-leaf operand)
        out, seen = calls(lambda: op(y, x, w))
    assert out._trace is trace
    seen.pop("<lambda>")
    return out, seen


def test_an_operation_records_its_node_in_two_calls():
    ops = {
        "multiply": (lambda y, x, w: y * w, X * W),
        "tanh": (lambda y, x, w: ea.tanh(y), np.tanh(X)),
        "add": (lambda y, x, w: y + x, 2 * X),
        "sin": (lambda y, x, w: ea.sin(y), np.sin(X)),
        "divide": (lambda y, x, w: ea.divide(y, 2.0), X / 2),
    }
    for name, (op, expected) in ops.items():
        out, seen = _record_one(op)
        # the public operation and `record`; no bind, process, impl, keep rule, Meta or constructor
        assert seen == Counter({"op": 1, "record": 1}), (name, seen)
        assert out._node.prim.name == name
        assert_close(out._value, expected)


def test_a_node_keeps_only_what_its_derivative_reads():
    with core.tracing(core.ReverseTrace()) as trace:
        x, w = core.box(X, trace), core.box(W, trace)
        t, s, m, a = ea.tanh(x), ea.sin(x), x * w, x + w
    # tanh' reads the result, sin' the operand, multiply both operands, add neither
    assert isinstance(t._node.vals[0], core.Meta) and t._node.ans is t._value
    assert s._node.vals[0] is X and isinstance(s._node.ans, core.Meta)
    assert m._node.vals == (X, W) and isinstance(m._node.ans, core.Meta)
    assert all(isinstance(v, core.Meta) and v.shape == (8,) for v in a._node.vals)
    assert t._node.needed == [True] and m._node.needed == [True, True]
    with core.tracing(core.ReverseTrace()) as trace:
        c = 3.0 * core.box(X, trace)  # a constant operand: no parent
    assert c._node.parents[0] is None and c._node.needed == [False, True]


def _count_case7(n):
    """The Python calls of case 7's forward and of its reverse pass (value and gradient checked)."""
    seen = {}
    real = autodiff.backward_pass

    def loss(x, w):
        out, seen["forward"] = calls(lambda: case7(x, w, n))
        return out

    def counted_pass(*args, **kwargs):
        out, seen["backward"] = calls(lambda: real(*args, **kwargs))
        return out

    autodiff.backward_pass = counted_pass
    try:
        value, (gx, gw) = ea.value_and_grad(loss, (0, 1))(X, W)
    finally:
        autodiff.backward_pass = real
    ev, ex, ew = case7_expected(n)
    assert_close(value, ev)
    assert_close(gx, ex)
    assert_close(gw, ew)
    return sum(seen["forward"].values()), sum(seen["backward"].values()), seen["backward"]


def test_case_7_costs_few_calls_per_operation():
    """Benchmark case 7's value and gradient: the Python calls per operation, forward and
    backward (before the lane: 10.5 forward and 8.5 backward)."""
    per_op = {n: _count_case7(n) for n in (40, 80)}
    forward = (per_op[80][0] - per_op[40][0]) / 40
    backward = (per_op[80][1] - per_op[40][1]) / 40
    assert forward <= 2, forward  # the public operation and `record`
    assert backward <= 2.5, backward  # the VJP, its derivative (and sin's cos)
    # the general functions run for the seed and the sum only, not once per operation
    for general in ("send", "_accumulate", "_untraced", "_scale", "_times", "bind", "process"):
        assert per_op[80][2][general] == per_op[40][2][general], general


def test_a_same_shape_pullback_skips_sum_to_shape(monkeypatch):
    seen = []
    real = elementwise.sum_to_shape
    monkeypatch.setattr(elementwise, "sum_to_shape", lambda *a: seen.append(a[1]) or real(*a))
    gx, gw = ea.grad(case7, (0, 1))(X, W)
    assert seen == []
    _, ex, ew = case7_expected()
    assert_close(gx, ex)
    assert_close(gw, ew)
    # broadcasting still sums back: a scalar weight's gradient is the sum over the vector
    (gs,) = ea.grad(lambda s: ea.sum(ea.tanh(X * s)), (0,))(1.5)
    assert seen
    assert_close(gs, np.sum((1 - np.tanh(1.5 * X) ** 2) * X))


def test_what_the_lane_does_not_take_goes_the_general_way():
    # no_grad: the imperative graph records nothing
    w = ea.tensor(W, requires_grad=True)
    with ea.no_grad():
        c = w * 2.0
    assert not c.requires_grad and c.grad_fn is None
    assert (w * 2.0).grad_fn.name() == "MultiplyBackward"
    # a dead trace: TracerError, as bind raises it
    with core.tracing(core.ReverseTrace()) as trace:
        leaked = core.box(X, trace)
    with pytest.raises(TracerError, match="used after that transformation returned"):
        leaked * 2.0
    with pytest.raises(TracerError):
        ea.tanh(leaked)
    # a non-numeric constant: the general TypeError
    with core.tracing(core.ReverseTrace()) as trace, pytest.raises(TypeError, match="numeric"):
        core.box(X, trace) * np.array(["a"] * 8)
    # float32 stays float32 with a Python number, and its gradient is float32
    g32 = ea.grad(lambda x: ea.sum(ea.tanh(x * 0.5) + x))(X.astype(np.float32))
    assert g32.dtype == np.float32
    assert_close(g32, 0.5 * (1 - np.tanh(0.5 * X) ** 2) + 1, rtol=1e-6)


def test_nested_and_mixed_transformations_are_exact():
    # second order: the inner trace's values are Tensors of the outer one (the general path)
    f = lambda x: ea.sum(ea.sin(x) * x)
    d2 = ea.grad(lambda x: ea.sum(ea.grad(f)(x) * W))(X)
    assert_close(d2, (2 * np.cos(X) - X * np.sin(X)) * W)
    # forward over the lane's reverse: hvp in every mode
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        (hv,) = ea.hvp(f, (X,), (W,), mode=mode)
        assert_close(hv, (2 * np.cos(X) - X * np.sin(X)) * W)
    # perturbation confusion: a value of the outer trace is a constant of the inner one
    outer = ea.grad(lambda a: ea.grad(lambda b: ea.sum(a * b))(X)[0])(2.0)
    assert_close(outer, 1.0)


def test_hooks_and_retain_grad_see_the_lanes_nodes():
    w = ea.tensor(W, requires_grad=True)
    h = ea.tanh(w * 2.0)
    h.retain_grad()
    seen = []
    h.register_hook(lambda g: seen.append(np.array(g)) or g * 3.0)
    ea.sum(h * h).backward()
    assert_close(seen[0], 2 * np.tanh(2 * W))
    assert_close(h.grad, 6 * np.tanh(2 * W))  # retained after the hook
    assert_close(w.grad, 6 * np.tanh(2 * W) * (1 - np.tanh(2 * W) ** 2) * 2)


# -- nested transformations: the Hessian-vector product of benchmark case 8 ---------------------

M, D = 40, 6
RNG = np.random.default_rng(8)
XM = RNG.standard_normal((M, D)) / np.sqrt(D)
YM = RNG.choice([-1.0, 1.0], size=M)
WM, VM = RNG.standard_normal(D), RNG.standard_normal(D)


def logistic(w):
    return ea.mean(ea.softplus(-YM * ea.einsum("ij,j->i", XM, w)))


def test_the_eager_hvp_of_case_8_costs_fewer_calls():
    """The logistic regression's HVP in each mode: value as by hand, and the Python frames made
    (before issue 25's work: 711, 618 and 856; then 527, 469 and 580, then 430, 407 and 440, then
    264, 273 and 325; the bounds leave 5% over today's 153, 163 and 135)."""
    s = 1 / (1 + np.exp(YM * (XM @ WM)))
    expected = XM.T @ (s * (1 - s) * (YM * YM) / M * (XM @ VM))
    bounds = {"fwd-over-rev": 160, "rev-over-fwd": 171, "rev-over-rev": 141}
    for mode, bound in bounds.items():
        ea.hvp(logistic, (WM,), (VM,), mode=mode)  # (first calls fill the caches)
        (hv,), seen = calls(lambda mode=mode: ea.hvp(logistic, (WM,), (VM,), mode=mode))
        assert_close(hv, expected)
        assert sum(seen.values()) <= bound, (mode, sum(seen.values()))


def test_the_seed_of_a_scalar_einsum_multiplies_nothing():
    """The gradient of ``einsum("i,i->", a, b)`` in `a` is `b`: the scalar seed of one is left out
    of the pullback (one contraction, the forward's), and the gradient is a copy of `b`, never
    `b` itself (the pullback hands on a read-only view, which `grad` copies out).

    Kills: `einsum._operand_vjps` contracting the seed of ones with the other operand (two
    contractions)."""
    b = np.linspace(2.0, 3.0, 8)
    f = lambda a: ea.einsum("i,i->", a, b)
    ea.grad(f)(X)
    g, seen = calls(lambda: ea.grad(f)(X))
    assert seen["_einsum_impl"] == 1, seen["_einsum_impl"]
    assert_close(g, b)
    assert g.flags.writeable and not np.shares_memory(g, b)
    # a seed that is not one still multiplies, and the other operand stays unwritten
    ga, gb = ea.vjp(lambda a, b: ea.einsum("i,i->", a, b), X, b)[1](2.0)
    assert_close(ga, 2 * b)
    assert_close(gb, 2 * X)
    assert_close(b, np.linspace(2.0, 3.0, 8))


def test_a_gradient_call_walks_its_arguments_once():
    """What every `grad` call pays around the function: the arguments ``[x]`` flattened with the
    leaf taken in place (one `_walk`; a sequence's children of a known leaf type make no call),
    its structure the one made once for a flat list of one leaf (no `TreeDef` constructor), and
    rebuilt without `_build` (the boxes and the gradients: a flat list of leaves is the list
    itself), the leaf count read off the structure (no `num_leaves` recursion), argnums checked
    inline (no `_is_int`) and the scalar seed made by numpy's C constructor (no `numpy.ones`
    wrapper and its `copyto`).

    Kills: `pytree._walk`'s sequence branch (2 walks) or its shared flat structures (a `TreeDef`
    made per call), `tree_unflatten` building a flat list through `_build` (2 builds), `TreeDef`
    counting its leaves on every `tree_unflatten`, `_argnums` without its inline check of an int
    or a tuple of ints in range (an `_is_int` per element), `arrays.ones` going through ``np.ones``
    for a scalar."""
    f = lambda x: ea.sum(ea.tanh(x) * x)
    g = ea.grad(f)
    g(X)
    out, seen = calls(lambda: g(X))
    assert_close(out, np.tanh(X) + X * (1 - np.tanh(X) ** 2))
    counts = {k: seen[k] for k in ("_walk", "_build", "num_leaves", "_is_int", "copyto")}
    assert counts == {"_walk": 1, "_build": 0, "num_leaves": 0, "_is_int": 0, "copyto": 0}, counts
    assert frames_of(lambda: g(X), pytree.TreeDef.__init__.__code__)[1] == [0]
    # structures other than a flat sequence still round-trip through the same walk
    tree = {"a": [X, (W, None)], "b": X[:2]}
    leaves, td = ea.tree_flatten(tree)
    assert len(leaves) == 3 and td.num_leaves == 3
    back = ea.tree_unflatten(td, leaves)
    assert back["a"][1][1] is None and back["a"][1][0] is W and isinstance(back["a"], list)
    # flat sequences: one shared structure per type and length, rebuilt as a new sequence
    ta, tb = ea.tree_flatten([X, W])[1], ea.tree_flatten([W, 1.0])[1]
    assert ta is tb and ta != ea.tree_flatten((X, W))[1] and ta != ea.tree_flatten([X])[1]
    rebuilt = ea.tree_unflatten(ta, (W, X))
    assert type(rebuilt) is list and rebuilt[0] is W and rebuilt[1] is X
    assert ea.tree_unflatten(ea.tree_flatten((X, W))[1], [1, 2]) == (1, 2)
    with pytest.raises(ValueError, match="has 2 leaves, got 3"):
        ea.tree_unflatten(ta, [X, X, X])
    assert ea.tree_flatten([X, [W]])[1] != ta and repr(ta) == "[*, *]"


def test_nested_rules_do_not_ask_a_numpy_operand_for_its_library():
    """`elementwise._boxed`: the derivative rules of a binary operation with a numpy operand next
    to a traced one (``C * z`` under jvp under grad) box only other libraries' arrays, and pass a
    numpy array on without asking array_api_compat what it is (nor calling `_boxed`: the rules
    check their values' types inline). An operator with a numpy array on its left (``C * t``,
    through ``Tensor.__array_ufunc__``) does not look for an ``out=``.

    Kills: the rules' inline `_LOCAL` check (a `_boxed` call per rule), `_boxed` without its own
    (``is_array_api_obj`` asked per call), the ufunc call of `numpy_api` checking an absent
    ``out=`` (an `_out_refused` call)."""
    c = np.linspace(-1.0, 1.0, 8)

    def h(x):  # d/dt sum(sin(c (x + t W))) at t = 0
        return ea.jvp(lambda z: ea.sum(ea.sin(c * z)), (x,), (W,))[1]

    g = ea.grad(h)
    g(X)
    out, seen = calls(lambda: g(X))
    assert_close(out, -np.sin(c * X) * c * c * W)
    assert seen["_boxed"] == 0 and seen["is_array_api_obj"] == 0, seen
    boxed = elementwise._boxed(c, W)  # numpy values pass through unasked
    assert boxed[0] is c and boxed[1] is W
    _, seen = calls(lambda: c * ea.tensor(X))
    assert seen["__array_ufunc__"] == 1 and seen["_out_refused"] == 0, seen
    with pytest.raises(TypeError, match="out="):
        np.multiply(c, ea.tensor(X), out=np.empty(8))


def passes_over(matrix, fn):
    """``(fn(), how many pairwise contraction steps read an array of `matrix`'s shape)``: the
    passes over the matrix (each step of a numpy contraction is one `executor._run_pair`)."""
    seen = []

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_run_pair":
            seen.append(any(np.shape(frame.f_locals[k]) == matrix.shape for k in ("a", "b")))

    sys.setprofile(profile)
    try:
        out = fn()
    finally:
        sys.setprofile(None)
    return out, sum(seen)


@pytest.mark.parametrize("mode", ["fwd-over-rev", "rev-over-fwd", "rev-over-rev"])
def test_the_eager_hvp_of_case_8_reads_the_matrix_three_times(mode):
    """Three passes over X in every mode, as the hand-written HVP makes (X w, X v, X^T r): the
    inner reverse pass leaves the input's cotangent as a pending contraction (`einsum.Pending`),
    so forward over reverse contracts only its tangent and reverse over reverse only its inner
    product with v (X v, which the outer pass reads again), never the primal gradient X^T g.

    Kills: `backward_pass` densifying an input's cotangent under ``lazy_leaves`` (or einsum's VJP
    ignoring `deferring`): 4 passes in forward over reverse and in reverse over reverse."""
    s = 1 / (1 + np.exp(YM * (XM @ WM)))
    expected = XM.T @ (s * (1 - s) * (YM * YM) / M * (XM @ VM))
    (hv,), n = passes_over(XM, lambda: ea.hvp(logistic, (WM,), (VM,), mode=mode))
    assert_close(hv, expected)
    assert n == 3, f"{n} passes over X"


def test_a_nested_tensor_reads_its_shape_and_dtype_without_recursion():
    f32 = np.ones((3, 2), np.float32)
    seen = {}

    def inner(x):
        out, seen["frames"] = calls(lambda: (x.shape, x.dtype, elementwise.dtype_of(x)))
        assert out == ((3, 2), np.float32, np.float32)
        return ea.sum(x)

    ea.jvp(lambda x: ea.grad(inner)(x), (f32,), (f32,))  # a reverse Tensor over a forward one
    assert seen["frames"] == Counter({"<lambda>": 1, "shape": 1, "dtype": 2, "dtype_of": 1})
    # under vmap each batched level strips its leading axis
    shapes = []
    ea.vmap(ea.vmap(lambda x: shapes.append(x.shape) or ea.sum(x)))(np.ones((4, 5, 3)))
    assert shapes == [(3,)]


def test_forward_mode_computes_plain_values_without_a_second_bind():
    (_, t), seen = calls(lambda: ea.jvp(lambda x: ea.sin(x) * x, (X,), (W,)))
    # one bind per operation (the public one reaching the forward trace), which runs the
    # implementation itself on the unboxed arrays instead of binding them again
    assert seen["bind"] == 2 and seen["process"] == 2, seen
    assert_close(t, (np.cos(X) * X + np.sin(X)) * W)


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_the_lane_records_what_the_general_path_records(library):
    """For every differentiable entry of the table, and each way of passing the operands (both
    traced, one a constant), the lane's node keeps what `ReverseTrace.process` keeps: the same
    result, parents, needed mask, and the same values kept or replaced by their Meta; on numpy
    arrays and on torch tensors (the lane's branch for another library's values)."""
    lib = load(library)
    if lib is None:
        pytest.skip(f"{library} is not installed")
    a, b = lib.asarray(np.linspace(0.2, 0.8, 4)), lib.asarray(np.linspace(1.1, 1.9, 4))

    def kept(node):
        """Per operand: whether the node keeps its Meta (else its value), and the shape."""
        return [(type(v) is core.Meta, tuple(v.shape)) for v in node.vals]

    for name in (*elementwise.UNARY, *elementwise.BINARY):
        prim, public = elementwise.PRIMITIVES[name], getattr(ea, name)
        binary = name in elementwise.BINARY
        for mask in ((True, True), (True, False), (False, True)) if binary else ((True,),):
            # (the operands are outside some entries' domains: their NaNs compare equal below)
            with core.tracing(core.ReverseTrace()) as trace, np.errstate(all="ignore"):
                ops = [core.box(v, trace) if m else v for v, m in zip((a, b), mask)]
                f, g = public(*ops), core.bind(prim, ops, {})
            assert f._node.prim is g._node.prim and f._node.needed == g._node.needed == list(mask)
            assert f._node.parents == g._node.parents
            assert kept(f._node) == kept(g._node), (name, mask)
            assert isinstance(f._node.ans, core.Meta) == isinstance(g._node.ans, core.Meta), name
            np.testing.assert_array_equal(lib.numpy(f._value), lib.numpy(g._value))


# -- what every eager call pays around the rules (issue 25: the eager HVP within 1.5x) ----------


def frames_of(fn, *codes):
    """``(fn(), how many frames ran each code object of `codes`)``: calls of one function,
    told apart from others of the same name (numpy's ``errstate.__enter__``, say)."""
    wanted = set(codes)
    out, seen = _profiled(fn, lambda frame: frame.f_code if frame.f_code in wanted else None)
    return out, [seen[c] for c in codes]


def test_forward_rules_run_quiet_without_numpy_errstate():
    """A JVP rule runs under numpy's error state with every error ignored, set as numpy's context
    variable (`core._quiet_state`, the quiet state made once per outer state), never by making an
    ``np.errstate`` per operation; the user's code between operations keeps its warnings, and the
    state is the user's again after the call, also when a rule raised.

    Kills: `ForwardTrace.process` entering `QuietRules` through ``np.errstate`` (an errstate
    ``__enter__`` per operation), a quiet state made anew per operation (`_make_extobj` per op),
    the rule run loud (a RuntimeWarning, an error under pytest), the state left quiet."""
    from numpy._core import _ufunc_config

    def f(x):  # sqrt' = 0.5 / sqrt(x): infinite at 0, computed by the rule without a warning
        y = ea.sqrt(x)
        for _ in range(5):
            y = ea.log1p(y * y)
        return y

    x0 = np.array([0.0, 1.0])
    before = np.geterr()
    errstate_enter = _ufunc_config.errstate.__enter__.__code__
    (_, t), (errstates,) = frames_of(lambda: ea.jvp(f, (x0,), (np.ones(2),)), errstate_enter)
    assert errstates == 0
    assert np.isinf(t[0]) or np.isnan(t[0])
    assert np.geterr() == before
    # the quiet state is worked out once for the state around the rules, then reused
    made = []
    real = core._make_extobj
    core._make_extobj = lambda **kw: made.append(kw) or real(**kw)
    try:
        with np.errstate(all="raise"):  # (a new outer state: worked out once under it)
            ea.jvp(f, (x0,), (np.ones(2),))
            ea.jvp(f, (x0,), (np.ones(2),))
            assert np.geterr()["divide"] == "raise"
            with pytest.raises(FloatingPointError):
                np.log(np.zeros(1))  # the user's own numpy code keeps the user's state
    finally:
        core._make_extobj = real
    assert made == [{"all": "ignore"}]
    assert np.geterr() == before

    # the user's code between two traced operations still warns
    def loud(x):
        np.log(np.zeros(1))
        return ea.sin(x)

    with pytest.warns(RuntimeWarning, match="divide by zero"):
        ea.jvp(loud, (x0,), (np.ones(2),))

    # a rule that raises leaves numpy's state, and the rules' depth, as they were
    @ea.custom_jvp
    def g(x):
        return ea.sin(x)

    @g.defjvp
    def g_jvp(primals, tangents):
        assert np.geterr()["divide"] == "ignore"  # the rule runs quiet
        raise KeyError("from the rule")

    with pytest.raises(KeyError, match="from the rule"):
        ea.jvp(g, (x0,), (np.ones(2),))
    assert np.geterr() == before and not core.in_rules()


def test_a_nested_node_keeps_its_metas_without_constructors():
    """`record` replaces a nested operand it does not keep by its `Meta` in one call (`core._meta`
    walks the Tensor's layers): no `Meta.__init__`, no Tensor `shape` or `dtype` property; the Meta
    is what the constructor makes, a batched level's axis left out.

    Kills: `record` calling ``Meta(v)`` for a Tensor value (a constructor and two properties)."""
    with core.tracing(core.ReverseTrace()) as t1, core.tracing(core.ReverseTrace()) as t2:
        a = core.box(core.box(X, t1), t2)
        out, seen = calls(lambda: ea.tanh(a) + a)
    assert seen["__init__"] == 0 and seen["shape"] == 0 and seen["dtype"] == 0, seen
    add = out._node  # add keeps neither operand: two Metas of nested values
    assert all(type(m) is core.Meta and m.shape == (8,) and m.dtype == np.float64 for m in add.vals)
    # under vmap a level's batch axis is left out, as Meta's constructor does
    metas = []

    def inner(x):  # x: a batched Tensor; add keeps neither operand
        with core.tracing(core.ReverseTrace()) as t:
            y = core.box(x, t) + 1.0
            metas.append((y._node.vals[0], core.Meta(x)))
        return ea.sum(x)

    ea.vmap(inner)(np.ones((4, 3), np.float32))
    ((made, constructed),) = metas
    assert (made.shape, made.dtype) == (constructed.shape, constructed.dtype) == ((3,), np.float32)


def test_a_transformation_call_makes_no_generator_context_or_constructors():
    """`grad` enters its trace as a context manager of its own (`Trace.__enter__`), not through
    `contextlib`'s generator machinery, and boxes its input without `leaf_node` and the Node and
    Tensor constructors; a public einsum with the default options checks none of them; a float
    sum casts nothing; `_letters` is kept per arguments.

    Kills: `tracing` as a ``@contextmanager`` (its ``helper``), `box` through `leaf_node`,
    `einsum` normalizing its default optimize / memory_limit / executor (`normalize_optimize`,
    `check_limit`, `kind`) or asking each numpy operand whether it is a weak number
    (`_weak_scalar`), `_accumulate` casting a float64 array to float64 (`astype`), `_letters`
    without its cache (`fresh_symbols`)."""
    xm = np.ones((3, 8))
    f = lambda w: ea.sum(ea.einsum("ij,j->i", xm, w))
    g = ea.grad(f)
    g(W)
    out, seen = calls(lambda: g(W))
    assert_close(out, np.full(8, 3.0))
    for name in ("helper", "leaf_node", "normalize_optimize", "check_limit", "kind"):
        assert seen[name] == 0, (name, seen[name])
    _, constructors = frames_of(lambda: g(W), core.Node.__init__.__code__, core.Tensor.__init__.__code__)
    assert constructors == [0, 0]
    for name in ("_weak_scalar", "einsum_arguments", "astype", "fresh_symbols"):
        assert seen[name] == 0, (name, seen[name])
    with core.tracing(core.ReverseTrace()) as trace:
        pass
    assert trace.dead
    # what the defaults skip is still checked when given
    with pytest.raises(ea.EinsumError, match="optimize"):
        ea.einsum("i,i->", X, W, optimize="no-such-strategy")
    with pytest.raises(ea.EinsumError, match="memory_limit"):
        ea.einsum("i,i->", X, W, memory_limit=0)
    with pytest.raises(TypeError):
        ea.einsum("i,i->", X, W, executor="threads")
    assert_close(ea.einsum(X, [0], W, [0], []), X @ W)  # the interleaved form
    # a Python number among the operands still takes the array's dtype
    assert ea.einsum("i,->i", X.astype(np.float32), 2.0).dtype == np.float32


def test_forward_mode_on_numpy_values_multiplies_inline():
    """The JVP of a unary or binary entry on numpy values multiplies the tangent by the local
    derivative itself (no `_scale`, `_times`, `_real_if` calls); the general path still gives a
    real tangent for a real result of a complex operand, broadcasts a tangent, and multiplies a
    broadcast tangent of ones as before. The tangent is input-checked inline (`_tangent_in`: no
    `_in_library_of` or `cast` for a numpy tangent of a numpy primal).

    Kills: `_unary_jvp` or the binary JVP without their numpy branch, `_tangent_in` without its
    inline check."""
    f = lambda x, w: ea.tanh(ea.sin(x) * w + x)
    ea.jvp(f, (X, W), (W, X))
    (_, t), seen = calls(lambda: ea.jvp(f, (X, W), (W, X)))
    for name in ("_scale", "_times", "_real_if", "_in_library_of", "cast"):
        assert seen[name] == 0, (name, seen[name])
    inner = np.sin(X) * W + X
    assert_close(t, (1 - np.tanh(inner) ** 2) * (np.cos(X) * W * W + np.sin(X) * X + W))
    # complex operand, real result: the tangent is real
    z = np.array([1 + 2j, -3 + 0.5j])
    _, tz = ea.jvp(ea.abs, (z,), (np.array([1j, 1.0 + 0j]),))
    assert tz.dtype.kind == "f"
    assert_close(tz, np.real(np.conj(z) / np.abs(z) * np.array([1j, 1.0])))
    # a scalar's tangent broadcast against a vector
    _, ts = ea.jvp(lambda s: ea.sin(s * X), (1.5,), (2.0,))
    assert ts.shape == (8,)
    assert_close(ts, np.cos(1.5 * X) * X * 2.0)
    # float32 tangent of a float64 primal: cast; integer and complex-for-real tangents refused
    _, t32 = ea.jvp(ea.sin, (X,), (W.astype(np.float32),))
    assert t32.dtype == np.float64
    with pytest.raises(TypeError, match="tangent"):
        ea.jvp(ea.sin, (X,), (np.ones(8, int),))
    with pytest.raises(TypeError, match="tangent"):
        ea.jvp(ea.sin, (X,), (np.ones(8, complex),))
    with pytest.raises(ValueError, match="shape"):
        ea.jvp(ea.sin, (X,), (np.ones(7),))


def test_a_seed_under_differentiating_traces_is_made_without_binding():
    """The seed of a gradient taken under other differentiating traces (an HVP's inner gradient)
    is ones made from the value beneath (`shape.ones_like`), without binding `ones_like` through
    each trace; a staged seed stays an equation of the program (its optimizer sees the ones), a
    batched one a batch; a numpy scalar's dtype is read without `np_dtype`.

    Kills: `ones_like` binding whenever its operand is traced (or making ones of a dead trace's
    value); `dtype_of` and `Tensor.dtype`
    asking `np_dtype` for a numpy scalar's dtype."""
    from einad.rules import shape as shape_rules

    impl = shape_rules.ones_like_p.impl.__code__
    f = lambda w: ea.sum(ea.sin(w) * w)
    (hv,), (n,) = frames_of(lambda: ea.hvp(f, (X,), (W,)), impl)
    assert n == 0
    assert_close(hv, (2 * np.cos(X) - X * np.sin(X)) * W)
    graph = ea.make_graph(ea.grad(f))(X)
    assert "ones_like" in [e.prim.name for e in graph.equations]
    batched = ea.vmap(ea.grad(lambda x: ea.sum(ea.sin(x))))(np.stack([X, W]))
    assert_close(batched, np.cos(np.stack([X, W])))
    with core.tracing(core.ReverseTrace()) as trace:  # a leaked value still says so
        leaked = core.box(X, trace)
    with pytest.raises(TracerError):
        shape_rules.ones_like(leaked)
    scalar = core._box(np.float32(2.0), None, None, None)  # (a Tensor of a numpy scalar)
    dts, seen = calls(lambda: (dtype_of(np.float64(1.0)), scalar.dtype, dtype_of(scalar)))
    assert dts == (np.float64, np.float32, np.float32)
    assert seen["np_dtype"] == 0, seen


def test_the_reverse_modes_of_hvp_take_their_gradient_without_the_public_wrappers():
    """Reverse over forward and reverse over reverse take their outer gradient by `_reverse`
    directly (`autodiff._gradients`): no `grad`, `value_and_grad` and the value they return.

    Kills: hvp calling ``grad(...)`` for its outer pass."""
    f = lambda w: ea.sum(ea.sin(w) * w)
    for mode in ("rev-over-fwd", "rev-over-rev"):
        (hv,), seen = calls(lambda mode=mode: ea.hvp(f, (X,), (W,), mode=mode))
        assert seen["value_and_grad"] == 0 and seen["value_and_grad_f"] == 0, mode
        assert_close(hv, (2 * np.cos(X) - X * np.sin(X)) * W)


def test_a_mean_reads_its_axes_once_and_sums_with_numpys_kernel():
    """`mean` normalizes its axes once for the sum and the count and divides by the count with
    the primitive (no public operation, no operand conversion); the mean of all of a float array
    or traced Tensor (a loss) reads its shape and dtype once and normalizes no axes (no
    `_inexact`, `_mean_raw`, `sum_axes`, `_count`); a one-operand einsum runs numpy's
    einsum kernel without its Python wrapper (`einsumfunc.einsum` and its dispatcher); a 0-d
    cotangent or tangent multiplies without asking whether it is one (`_is_ones`), and a numpy
    scalar cotangent of its operand's shape and dtype is passed on as it is.

    Kills: `_mean_raw` through `sum_raw` and ``/`` (two `normalize_axes`, an `op`), `mean`
    without its whole-array case (`_inexact`, `_mean_raw`, `sum_axes`, `_count`), the
    one-operand `_einsum_impl` calling ``np.einsum``, `_times` checking a 0-d value for ones, the
    binary VJP sending a numpy scalar cotangent of the operand's shape through `sum_to_shape`."""
    g = ea.grad(lambda x: ea.mean(ea.tanh(x) * 2.0))
    g(X)
    out, seen = calls(lambda: g(X))
    assert_close(out, 2 * (1 - np.tanh(X) ** 2) / 8)
    # (tanh and * are the only public operations: the division is the primitive; the one
    # `_is_ones` asks of the broadcast cotangent 1/8 that reaches *, the 0-d seed is not asked)
    expected = {"normalize_axes": 0, "op": 2, "einsum": 0, "_einsum_dispatcher": 0, "_is_ones": 1}
    expected["sum_to_shape"] = 0  # (the division's cotangent, a numpy scalar, needs no sum)
    expected.update({"_inexact": 0, "_mean_raw": 0, "sum_axes": 0, "_count": 0})
    for name, n in expected.items():
        assert seen[name] == n, (name, seen[name])
    _, seen = calls(lambda: ea.grad(lambda x: ea.mean(x, axis=0))(X))  # (an axis: the general way)
    assert seen["normalize_axes"] == 1 and seen["_count"] == 1, seen
    (_, t), seen = calls(lambda: ea.jvp(lambda x: ea.mean(x) * 3.0, (X,), (W,)))
    assert seen["_is_ones"] == 0, seen
    assert_close(t, 3 * np.mean(W))
    # means over axes, kept dims, integers (in float64): as numpy's
    a = np.arange(24.0).reshape(2, 3, 4)
    assert_close(ea.mean(a, axis=(0, 2), keepdims=True), np.mean(a, axis=(0, 2), keepdims=True))
    assert ea.mean(np.arange(5)).dtype == np.float64
    assert ea.mean(np.arange(4, dtype=np.float32)).dtype == np.float32
    assert_close(ea.mean(np.array([1 + 2j, 3 - 2j])), 2.0 + 0j)
    assert_close(ea.mean(a), 11.5)
    assert_close(ea.mean(np.float64(3.0)), 3.0)
    assert_close(ea.grad(lambda x: ea.mean(x, axis=1)[0])(a[0]), np.outer([1, 0, 0], np.full(4, 0.25)))


def test_the_quiet_rules_fall_back_to_np_errstate_without_numpys_state_variable(monkeypatch):
    """Where numpy has no error-state variable (`core._ErrstateShim`, the import's fallback),
    derivative rules still run quiet through ``np.errstate`` and leave the user's state as it was."""
    monkeypatch.setattr(core, "_errstate", core._ErrstateShim())
    monkeypatch.setattr(core, "_make_extobj", lambda **kw: None)
    monkeypatch.setattr(core, "_quiet_memo", (object(), None))

    def f(x):  # sqrt's rule divides by sqrt(0): quiet only if the rule runs under the fallback
        return ea.sum(ea.sqrt(x))

    x0 = np.array([0.0, 4.0])
    before = np.geterr()
    with np.errstate(all="raise"):
        _, t = ea.jvp(f, (x0,), (np.ones(2),))
        g = ea.grad(f)(x0)
        assert np.geterr()["divide"] == "raise"
    assert np.isinf(t) and np.isinf(g[0]) and g[1] == 0.25
    assert np.geterr() == before


# -- issue 25, the eager HVP: softplus' from its value, and the second-order lanes --------------


def test_softplus_reads_its_slope_off_its_value_exactly():
    """softplus'(x) = sigmoid(x) is computed from the forward's softplus(x) = y as -expm1(-y) on
    numpy values: the stable sigmoid (`elementwise._sigmoid`, ten passes) is not called by a
    gradient or a JVP, and the slope is exact across float64's range (where x is very negative,
    y ~ e^x and ``1 - exp(-y)`` would be 0; 1 at +inf, 0 at -inf).

    Kills: softplus's derivative as ``sigmoid(x)`` (a `_sigmoid` call per gradient and JVP), or as
    ``1 - exp(-y)`` (0 below x = -37)."""
    x = np.concatenate([np.linspace(-708.0, 745.0, 2001), -np.logspace(-300, 2.8, 200)])
    x = np.concatenate([x, -x[-200:], [0.0, np.inf, -np.inf]])
    e = np.exp(-np.abs(x))  # the closed form, each branch where it does not overflow
    expected = np.where(x >= 0, 1 / (1 + e), e / (1 + e))
    g, seen = calls(lambda: ea.grad(lambda x: ea.sum(ea.softplus(x)))(x))
    np.testing.assert_allclose(g, expected, rtol=1e-15, atol=0)
    assert seen["_sigmoid"] == 0, seen["_sigmoid"]
    (_, t), seen = calls(lambda: ea.jvp(ea.softplus, (x,), (np.full_like(x, 2.0),)))
    np.testing.assert_allclose(t, 2 * expected, rtol=1e-15, atol=0)
    assert seen["_sigmoid"] == 0, seen["_sigmoid"]
    # traced values take sigmoid(x), one operation whose own derivative is cheap: second
    # derivatives as the closed form sigmoid(x) (1 - sigmoid(x))
    z = np.linspace(-30.0, 30.0, 13)
    s = 1 / (1 + np.exp(-z))
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        (hv,) = ea.hvp(lambda x: ea.sum(ea.softplus(x)), (z,), (np.ones_like(z),), mode=mode)
        assert_close(hv, s * (1 - s), rtol=1e-13)
    zs = np.linspace(-3.0, 3.0, 7)  # the gradient itself against central differences
    assert ea.gradcheck(ea.grad(lambda x: ea.sum(ea.softplus(x) ** 2)), zs)


def test_a_second_order_records_both_nodes_without_binding():
    """Reverse over reverse (an HVP's forward pass, and its inner gradient under the outer trace):
    a table operation on Tensors of the inner trace whose values are Tensors of the outer one
    records the outer node, then the inner one (two `record` calls) without `bind` and `process`;
    over a forward trace (forward over reverse) it binds once, for the forward trace only. The
    rules' own operations (`elementwise.apply2`: a mean's division, a cotangent times a slope;
    the internal unary ones, sigmoid in softplus's rule) take the same lane. Each node keeps what
    `ReverseTrace.process` would keep, for every entry and way of passing the operands.

    Kills: the public operations' second-order branch (`_recorded1`, `_recorded2` not recursing:
    a bind and a process per operation), `apply2` and the internal unary operations binding."""
    a, b = np.linspace(0.2, 0.8, 4), np.linspace(1.1, 1.9, 4)

    def kept(node):
        return [(type(v) is core.Meta, getattr(v, "shape", None)) for v in node.vals]

    def nested(values, mask, outer_kind=core.ReverseTrace):
        """`values` boxed where `mask` says, by an outer trace of `outer_kind` then an inner
        reverse one; returns (outer, inner, boxed operands)."""
        outer = core.tracing(outer_kind())
        inner = core.tracing(core.ReverseTrace())
        boxed = []
        for v, m in zip(values, mask):
            if m:
                o = core.box(v, outer) if outer_kind is core.ReverseTrace else core.box(v, outer, v * 0 + 1)
                boxed.append(core.box(o, inner))
            else:
                boxed.append(v)
        return outer, inner, boxed

    for name in (*elementwise.UNARY, *elementwise.BINARY):
        prim, public = elementwise.PRIMITIVES[name], getattr(ea, name)
        binary = name in elementwise.BINARY
        for mask in ((True, True), (True, False), (False, True)) if binary else ((True,),):
            with np.errstate(all="ignore"):
                outer, inner, ops = nested((a, b), mask)
                with outer, inner:
                    (f, seen), g = calls(lambda p=public, o=ops: p(*o)), core.bind(prim, ops, {})
            assert seen["bind"] == 0 and seen["process"] == 0 and seen["record"] == 2, (name, seen)
            for fn, gn in ((f._node, g._node), (f._value._node, g._value._node)):
                assert fn.prim is gn.prim and fn.needed == gn.needed and fn.parents == gn.parents
                assert kept(fn) == kept(gn), (name, mask)
                assert isinstance(fn.ans, core.Meta) == isinstance(gn.ans, core.Meta), name
            assert f._value._trace is outer and f._trace is inner
            np.testing.assert_array_equal(f._value._value, g._value._value)
    # over a forward trace: one bind, the forward trace's process, one record (the inner node)
    outer, inner, (x,) = nested((a,), (True,), core.ForwardTrace)
    with outer, inner:
        y, seen = calls(lambda: ea.tanh(x))
    assert (seen["bind"], seen["process"], seen["record"]) == (1, 1, 1), seen
    assert_close(y._value._tangent, 1 - np.tanh(a) ** 2)
    # the rules' operations: apply2 and the internal sigmoid, on the outer trace alone
    with core.tracing(core.ReverseTrace()) as trace:
        t = core.box(a, trace)
        (q, s), seen = calls(lambda: (elementwise.apply2("divide", t, 4), elementwise.sigmoid(t)))
    assert seen["bind"] == 0 and seen["record"] == 2, seen
    assert q._node.prim.name == "divide" and s._node.prim.name == "sigmoid"
    assert_close(q._value, a / 4)
    assert_close(s._value, 1 / (1 + np.exp(-a)))
    # a dead outer trace still raises, and the HVPs stay exact
    with core.tracing(core.ReverseTrace()) as dead:
        leaked = core.box(a, dead)
    with core.tracing(core.ReverseTrace()) as trace:
        x = core.box(leaked, trace)
        with pytest.raises(TracerError):
            ea.tanh(x)
        with pytest.raises(TracerError):
            x * 2.0


def test_an_einsum_records_its_node_without_binding():
    """A contraction of one or two operands (`einsum.contract`) records its node in a reverse
    trace as `ReverseTrace.process` would, without `bind` and `process`: first order (one
    record), second order over a reverse trace (two records, no bind) and over a forward one (one
    bind, the forward trace's); on numpy arrays alone it contracts without `bind`.

    Kills: `contract`'s lane (`einsum._recorded`), its recursion for a second order, its call of
    `_einsum_impl` for numpy operands."""
    from einad.rules import einsum as einsum_rules

    m = np.arange(12.0).reshape(3, 4) / 10
    spec = (("ij", "j"), "i")

    def nodes(t):
        n = t._node
        return n.prim, n.needed, n.parents, [type(v) for v in n.vals], type(n.ans), n.params

    for levels in (1, 2):
        for mask in ((True, True), (False, True), (True, False)):
            traces = [core.ReverseTrace() for _ in range(levels)]
            with traces[0], traces[-1]:
                ops = []
                for v, on in zip((m, W[:4]), mask):
                    for t in traces if on else ():
                        v = core.box(v, t)
                    ops.append(v)
                f, seen = calls(lambda o=ops: einsum_rules.contract(*spec, o))
                g = core.bind(einsum_rules.einsum_p, ops, dict(f._node.params))
            assert (seen["bind"], seen["process"], seen["record"]) == (0, 0, levels), (levels, mask, seen)
            assert nodes(f) == nodes(g)
            if levels == 2:
                assert nodes(f._value) == nodes(g._value) and f._value._trace is traces[0]
                f = f._value
            assert_close(f._value, m @ W[:4])
    # over a forward trace: one bind, for the forward trace's process
    outer, inner = core.ForwardTrace(), core.ReverseTrace()
    with outer, inner:
        w = core.box(core.box(W[:4], outer, np.ones(4)), inner)
        f, seen = calls(lambda: einsum_rules.contract(*spec, [m, w]))
    assert (seen["bind"], seen["process"], seen["record"]) == (1, 1, 1), seen
    assert_close(f._value._tangent, m.sum(axis=1))
    # numpy arrays alone: numpy's contraction, no bind
    out, seen = calls(lambda: einsum_rules.contract(*spec, [m, W[:4]]))
    assert seen["bind"] == 0 and type(out) is np.ndarray
    assert_close(out, m @ W[:4])


def test_a_number_spreads_as_a_read_only_view_without_binding():
    """The cotangent of a sum or a mean, a numpy number, is spread over the summed axes as the
    read-only zero-stride view `numpy.broadcast_to` makes, by ndarray's constructor: no `bind`, no
    `broadcast_to` (the HVP of case 8 makes one in every mode). A diagonal still gets its zeros.

    Kills: `einsum.spread` binding `spread_p` for a numpy number (bind, `_spread_impl`,
    `executor.spread` and numpy's `broadcast_to`: 13 Python frames)."""
    from einad.rules import einsum as einsum_rules

    for x in (np.float64(0.25), np.array(-2.0, dtype=np.float32), np.complex128(1 - 2j), np.array(3)):
        out, seen = calls(lambda x=x: einsum_rules.spread(x, "", "ab", (3, 4)))
        assert seen["bind"] == 0 and seen["broadcast_to"] == 0, seen
        np.testing.assert_array_equal(out, np.broadcast_to(x, (3, 4)))
        assert out.dtype == x.dtype and out.strides == (0, 0) and not out.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            out[0, 0] = 1
    np.testing.assert_array_equal(einsum_rules.spread(np.float64(2.0), "", "aa", (3, 3)), 2 * np.eye(3))
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        _, seen = calls(lambda mode=mode: ea.hvp(logistic, (WM,), (VM,), mode=mode))
        assert seen["broadcast_to"] == 0 and seen["_spread_impl"] == 0, (mode, seen)
    g = ea.grad(lambda x: ea.mean(x * x))(X)  # the gradient through the view is the caller's own
    assert_close(g, 2 * X / 8)
    assert g.flags.writeable


def test_a_gradient_call_reads_its_output_once_and_seeds_it_with_numpy():
    """Around the function, a gradient call takes a floating-point numpy argument as it is (no
    `_diff_value`, no `_same_library` for one leaf), reads its output's dtype and shape off the
    numpy value beneath its differentiating traces (no `Tensor.dtype`, `Tensor.shape` in
    `_reverse`), makes the seed by numpy's constructor from it (no `ones_like`, no `arrays.ones`),
    under an HVP's outer and inner traces too, and enters its reverse pass without `send`. The
    checks still refuse what they refused.

    Kills: `_reverse` calling `_diff_value` for a numpy array, `_same_library` for one value,
    reading the output through `Tensor.dtype` and `Tensor.shape` (or `dtype_of`, `shape_of`),
    seeding through `ones_like` or `arrays.ones`, `backward_pass` sending its seed by `send`."""
    from einad import arrays

    g = ea.grad(lambda x: ea.sum(ea.tanh(x) * x))
    g(X)
    codes = (core.Tensor.dtype.fget.__code__, core.Tensor.shape.fget.__code__, arrays.ones.__code__)
    out, (n_dtype, n_shape, n_ones) = frames_of(lambda: g(X), *codes)
    assert_close(out, np.tanh(X) + X * (1 - np.tanh(X) ** 2))
    assert (n_dtype, n_shape, n_ones) == (1, 1, 0)  # (the multiply's VJP reads its cotangent's)
    _, seen = calls(lambda: g(X))
    assert seen["_diff_value"] == 0 and seen["_same_library"] == 0 and seen["ones_like"] == 0, seen
    assert seen["send"] == 0, seen
    for mode in ("fwd-over-rev", "rev-over-rev"):  # (the inner gradient's output is nested)
        h = lambda mode=mode: ea.hvp(logistic, (WM,), (VM,), mode=mode)
        h()
        _, seen = calls(h)
        assert seen["ones_like"] == 0 and seen["ones"] == 0, (mode, seen)
    with pytest.raises(TypeError, match="scalar output, got shape"):  # (a nested output's shape)
        ea.hvp(lambda x: x * 2.0, (X,), (W,))
    with pytest.raises(TypeError, match="scalar output, got shape"):
        ea.grad(lambda x: x * 2.0)(X)
    with pytest.raises(TypeError, match="real-valued"):
        ea.grad(lambda x: ea.sum(x * 1j))(X)
    with pytest.raises(TypeError, match="returning a scalar, got str"):
        ea.grad(lambda x: "a")(X)
    with pytest.raises(TypeError, match="of dtype int64"):
        ea.grad(lambda x: ea.sum(x))(np.arange(3))


def test_the_reverse_pass_and_its_results_cost_few_frames():
    """A first-order gradient's reverse pass enters one context (`QuietRules`, no
    `contextlib.nullcontext` beside it), and its numpy gradient of a numpy input leaves
    `_grad_out` without `_buffer`, `arrays.cast` and the shape and dtype reads; reverse over
    reverse takes numpy tangents without `tree_flatten` and `_in_library_of`, and
    `Pending.inner` splits its operands inline (no `_varies`, no `unique`). Gradients stay the
    caller's own: writable, sharing no memory with each other or with the inputs.

    Kills: backward_pass's ``nullcontext`` beside `QuietRules` (two more frames per pass),
    `_grad_out`'s inline numpy case, `_inner_with` flattening a flat tuple of numpy tangents,
    `Pending.inner` calling `_varies` per operand."""
    import contextlib

    from einad import arrays
    from einad.rules import einsum as einsum_rules

    g = ea.grad(lambda x: ea.sum(ea.tanh(x) * x))
    g(X)
    codes = (
        autodiff._buffer.__code__,
        arrays.cast.__code__,
        contextlib.nullcontext.__enter__.__code__,
        core.QuietRules.__enter__.__code__,
    )
    out, counts = frames_of(lambda: g(X), *codes)
    assert counts == [0, 0, 0, 1], counts
    assert_close(out, np.tanh(X) + X * (1 - np.tanh(X) ** 2))
    # two gradients from one buffer (add hands the same cotangent to both): two arrays
    ga, gb = ea.grad(lambda a, b: ea.sum((a + b) * 2.0), argnums=(0, 1))(X, W)
    assert_close(ga, np.full(8, 2.0))
    assert_close(gb, np.full(8, 2.0))
    assert ga.flags.writeable and gb.flags.writeable and not np.shares_memory(ga, gb)
    c = np.linspace(1.0, 2.0, 8)
    gc_ = ea.grad(lambda x: ea.sum(x * c))(X)  # (the pullback hands on a read-only view of c)
    assert gc_.flags.writeable and not np.shares_memory(gc_, c)
    assert_close(gc_, c)
    # reverse over reverse: numpy tangents as they are, the pending contraction split inline
    h = lambda: ea.hvp(logistic, (WM,), (VM,), mode="rev-over-rev")
    h()
    (hv,), seen = calls(h)
    assert (seen["tree_flatten"], seen["_in_library_of"], seen["_varies"], seen["unique"]) == (2, 0, 0, 0), (
        seen
    )
    s = 1 / (1 + np.exp(YM * (XM @ WM)))
    assert_close(hv, XM.T @ (s * (1 - s) * (YM * YM) / M * (XM @ VM)))
    # Pending.inner with three constants and a traced cotangent: the letters kept in order
    rng = np.random.default_rng(3)
    a, b, v = rng.standard_normal((3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((2, 5))
    gv = rng.standard_normal((2, 3))
    with core.tracing(core.ReverseTrace()) as trace:
        gt = core.box(gv, trace)
        p = einsum_rules.Pending(("ki", "ij", "jl"), "kl", [gt, a, b], "auto", (2, 5))
        term = p.inner(v)
    assert term._trace is trace
    assert_close(term._value, np.einsum("ki,ij,jl,kl->", gv, a, b, v))
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):  # (rev-over-rev said "reshape")
        with pytest.raises(ValueError, match=r"tangent has shape \(3,\) but its primal has shape \(6,\)"):
            ea.hvp(logistic, (WM,), (VM[:3],), mode=mode)


def test_an_eager_einsum_reads_its_operands_inline():
    """`einsum` takes numpy arrays and traced Tensors as operands and reads their shapes inline (no
    `to_operand`, `shape_of`), `_einsum_impl` contracts one or two numpy arrays without asking
    `arrays.namespace`, and einsum's VJP reads its operands' dtypes and shapes directly (no
    `dtype_of` for an array, a Tensor or a Meta). What is not numeric is still refused, and
    lists and numbers are still operands.

    Kills: `linear.einsum`'s inline operands (two `to_operand` and two `shape_of` per call),
    `_einsum_impl` calling `namespace` for numpy arrays, `_operand_vjps` and `_one_dtype`
    through `dtype_of`."""
    m = np.arange(12.0).reshape(3, 4) / 10
    g = ea.grad(lambda w: ea.sum(ea.tanh(ea.einsum("ij,j->i", m, w))))
    g(W[:4])
    out, seen = calls(lambda: g(W[:4]))
    assert_close(out, m.T @ (1 - np.tanh(m @ W[:4]) ** 2))
    counts = {k: seen[k] for k in ("namespace", "to_operand", "shape_of", "dtype_of")}
    # (what is left is the sum's: its operand, its axes, its cotangent; before: 3, 3, 4 and 4)
    assert counts == {"namespace": 0, "to_operand": 1, "shape_of": 1, "dtype_of": 1}, counts
    h = lambda: ea.hvp(logistic, (WM,), (VM,), mode="rev-over-rev")
    h()
    _, seen = calls(h)
    assert seen["namespace"] == 0 and seen["dtype_of"] <= 5, seen
    with pytest.raises(TypeError, match="numeric"):
        ea.einsum("i,i->", np.array(["a", "b"]), np.ones(2))
    assert_close(ea.einsum("i,i->", [1.0, 2.0], np.float32(3.0) * np.ones(2, np.float32)), 9.0)
    assert ea.einsum("i,->i", np.ones(2, np.float32), 2.0).dtype == np.float32  # (a weak number)


def test_a_nested_node_makes_its_metas_without_calls():
    """`core.record` makes the Meta of a value a node does not keep in place for numpy arrays and
    scalars and for Tensors of unbatched traces over numpy arrays (a second order's operands and
    results): no `_meta` call in an HVP, in any mode. A batched Tensor's Meta still drops its
    batch axis, and every Meta reads its value's shape and dtype.

    Kills: `record` calling `_meta` for a Tensor over a numpy array or a numpy scalar."""
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        ea.hvp(logistic, (WM,), (VM,), mode=mode)
        _, seen = calls(lambda mode=mode: ea.hvp(logistic, (WM,), (VM,), mode=mode))
        assert seen["_meta"] == 0, (mode, seen["_meta"])
    x32 = np.linspace(1.0, 2.0, 6, dtype=np.float32)
    with core.tracing(core.ReverseTrace()) as outer:
        o = core.box(x32, outer)
        with core.tracing(core.ReverseTrace()) as inner:
            t = ea.tanh(core.box(o, inner))  # tanh's rule reads the result alone: the operand's Meta
            s = ea.sum(core.box(o, inner))  # the sum's result (a numpy scalar beneath): its Meta
    for m in (t._node.vals[0], t._value._node.vals[0]):
        assert type(m) is core.Meta and m.shape == (6,) and m.dtype == np.float32
    assert type(s._node.ans) is core.Meta and s._node.ans.shape == () and s._node.ans.dtype == np.float32

    def batched(x):  # under vmap, a node's Meta is of one example
        with core.tracing(core.ReverseTrace()) as trace:
            y = ea.tanh(core.box(x, trace))
        m = y._node.vals[0]
        assert type(m) is core.Meta and m.shape == (4,), m
        return x

    ea.vmap(batched)(np.ones((3, 4)))


def test_reverse_over_reverse_asks_no_value_for_its_library_dtype_or_shape():
    """Reverse over reverse, case 8: the inner gradient takes its argument (a Tensor of the outer
    trace) inline (no `_diff_value`), both passes enter their trace without `tracing`, the
    einsum lane reads its keep table inline (no `_einsum_keep`), and einsum's VJP reads the dtypes
    and shapes of its arrays, Tensors, Metas and numpy scalars directly and tells its `Spread` the
    dtype (no `xp_of`, `dtype_of`, `shape_of` anywhere in the HVP).

    Kills: `_reverse` calling `_diff_value` for a differentiating trace's Tensor, or `tracing`;
    the einsum lane calling `_einsum_keep`; `_operand_vjps` asking `xp_of` of a numpy scalar or
    `shape_of` of an operand; `Spread` working out a dtype it is given."""
    h = lambda: ea.hvp(logistic, (WM,), (VM,), mode="rev-over-rev")
    h()
    (hv,), seen = calls(h)
    names = ("_diff_value", "tracing", "_einsum_keep", "xp_of", "dtype_of", "shape_of")
    assert {k: seen[k] for k in names} == dict.fromkeys(names, 0), seen
    s = 1 / (1 + np.exp(YM * (XM @ WM)))
    assert_close(hv, XM.T @ (s * (1 - s) * (YM * YM) / M * (XM @ VM)))
    # (what is not a differentiating trace's float Tensor still goes through _diff_value)
    with pytest.raises(TypeError, match="integer"):
        ea.grad(lambda x: x * 1.0)(3)
    assert_close(ea.grad(lambda x: ea.sum(x * x))(ea.tensor(W)), 2 * W)  # (a constant Tensor)


def test_the_stable_sigmoid_makes_no_python_call():
    """`elementwise._sigmoid` (the kernel of sigmoid, and of softplus's derivative on traced
    values: one per HVP in every mode) on a float array: numpy's ufuncs alone, the numerator picked
    by a maximum instead of ``np.where`` (a Python dispatcher), bit for bit the stable form
    ``where(x >= 0, 1 / (1 + e), e / (1 + e))`` with ``e = exp(-|x|)``, in every float dtype, at
    infinities, zeros and NaN.

    Kills: `_sigmoid` computing by ``np.where`` (a Python frame, and two more passes)."""
    x = np.concatenate([np.linspace(-750.0, 750.0, 3001), [np.inf, -np.inf, 0.0, -0.0, np.nan, 1e-300]])
    for dt in (np.float64, np.float32, np.float16):
        xd = x.astype(dt).reshape(-1, 1)
        out, seen = calls(lambda xd=xd: elementwise._sigmoid(xd))
        assert sum(seen.values()) == 2, seen  # (the lambda and the kernel: nothing beneath)
        with np.errstate(over="ignore"):
            e = np.exp(-np.abs(xd))
            expected = np.where(xd >= 0, 1 / (1 + e), e / (1 + e))
        assert out.dtype == dt and out.shape == xd.shape
        np.testing.assert_array_equal(out, expected)
    # other inputs take the general form: a number, a 0-d array, integers, complex values
    assert_close(elementwise._sigmoid(np.float64(2.0)), 1 / (1 + np.exp(-2.0)))
    assert_close(elementwise._sigmoid(np.array(-3.0)), 1 / (1 + np.exp(3.0)))
    assert_close(elementwise._sigmoid(np.arange(3)), 1 / (1 + np.exp(-np.arange(3.0))))
    assert_close(elementwise._sigmoid(np.array([1j, 2.0])), 1 / (1 + np.exp(-np.array([1j, 2.0]))))
    assert_close(ea.sigmoid(x[:3001]).numpy(), 1 / (1 + np.exp(-np.clip(x[:3001], -700, 700))))


def test_a_gradient_pass_makes_no_comprehension_and_wraps_nothing_traced():
    """`_reverse` (every gradient, both passes of an HVP) checks an int argnums or an HVP's
    ``(0, ..., n-1)`` inline (no `_argnums`) and builds its values, boxes and cotangents in loops
    (no comprehension frames in autodiff.py, `_lazy_grads` and `_gradients` included); `einsum`
    and a whole-array `mean` hand a traced result on without `wrap`, and `einsum` asks
    `_promote_weak` only when a number may be among its operands.

    Kills: `_reverse`'s inline argnums, any of its loops made a comprehension again, `einsum` or
    `mean` wrapping a Tensor, `einsum` calling `_promote_weak` for arrays and Tensors."""

    def key(frame):
        code = frame.f_code
        if code.co_filename.endswith("autodiff.py") and code.co_name in (
            "<listcomp>",
            "<dictcomp>",
            "<genexpr>",
        ):
            return "comprehension"
        return code.co_name if code.co_name in ("_argnums", "wrap", "_promote_weak") else None

    m = np.arange(12.0).reshape(3, 4) / 10
    g = ea.grad(lambda w: ea.mean(ea.tanh(ea.einsum("ij,j->i", m, w))))
    g(W[:4])
    out, seen = _profiled(lambda: g(W[:4]), key)
    assert_close(out, m.T @ (1 - np.tanh(m @ W[:4]) ** 2) / 3)
    assert not seen, seen
    h = lambda: ea.hvp(logistic, (WM,), (VM,), mode="rev-over-rev")
    h()
    _, seen = _profiled(h, key)
    assert not seen, seen
    # other argnums still checked, numbers still promoted
    gs = ea.grad(lambda a, b: ea.sum(a * b), argnums=(1, 0))(X, W)
    assert_close(gs[0], X)
    assert_close(gs[1], W)
    with pytest.raises(ValueError, match="out of range"):
        ea.grad(lambda a: ea.sum(a), argnums=3)(X)
    assert ea.einsum("i,->i", ea.tensor(np.ones(2, np.float32)), 2.0).dtype == np.float32


def test_a_numpy_function_on_tensors_binds_no_signature():
    """numpy's functions on Tensors (quimb's eager contraction calls them hundreds of times a
    gradient) run einad's operation directly: the signature is bound only when the call raises
    a TypeError, to name numpy's function in the message. Kills: `numpy_api._function` binding
    every call's arguments again (an `inspect.Signature.bind` a call)."""
    t = ea.tensor(X)
    out, seen = calls(lambda: np.concatenate([t, t], axis=0))
    assert out.shape == (2 * X.shape[0], *X.shape[1:])
    assert seen["_bind"] == 0, seen  # (inspect.Signature.bind runs `_bind`)
    with pytest.raises(TypeError, match="numpy.broadcast_to on einad Tensors: got an unexpected keyword"):
        np.broadcast_to(t, t.shape, subok=True)


# -- other libraries' arrays: the same lane, their functions called directly --------------------

TORCH = load("torch")
needs_torch = pytest.mark.skipif(TORCH is None, reason="torch is not installed (pip install einad[torch])")


def _case7_on(lib, n):
    """Case 7's value and gradient on `lib`'s arrays, checked against numpy's, and the calls made."""
    x, w = lib.asarray(X), lib.asarray(W)
    vg = ea.value_and_grad(lambda a, b: case7(a, b, n), (0, 1))
    vg(x, w)
    # (two of einad's functions told apart from the library's of the same names)
    named = {
        core.Meta.__init__.__code__: "Meta.__init__",
        core.ReverseTrace.process.__code__: "ReverseTrace.process",
    }
    (value, (gx, gw)), seen = _profiled(
        lambda: vg(x, w), lambda frame: named.get(frame.f_code, frame.f_code.co_name)
    )
    ev, ex, ew = case7_expected(n)
    for got, want in ((value, ev), (gx, ex), (gw, ew)):
        check_lib(lib, got, want)
    return seen


@pytest.mark.parametrize("name", ["torch", "array_api_strict"])
def test_case_7_on_another_library_takes_the_lane_and_its_functions_directly(name):
    """Case 7 on torch tensors (array-api-strict arrays): each elementwise operation records its
    node through the lane as on numpy (its implementation, then `record`), and calls the
    library's function it planned on the first call (`_direct`): neither `process`, `_foreign`
    (which plans), `namespace`, array-api-compat's promotion wrapper nor a Meta's constructor
    runs once per operation, and the reverse pass multiplies two tensors of one dtype with
    their own operator (`_times`), not through `apply2` and `bind`.
    (Before: case 7 on torch cost 4.0 times torch's own autograd, 2.0 after, on this machine.)

    Kills: the lane's branch for another library's values (`_recorded1`, `_recorded2`), the
    direct lookup in `_impl`, `_times`' multiply of one library's arrays, `core._meta`'s."""
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed")
    few, many = _case7_on(lib, 40), _case7_on(lib, 80)
    general = ("ReverseTrace.process", "_foreign", "namespace", "_fix_promotion", "_target", "apply2")
    for fn in (*general, "Meta.__init__"):
        assert many[fn] == few[fn], (fn, few[fn], many[fn])
    assert many["record"] - few["record"] == 40  # one node per operation, through the lane
    assert many["bind"] - few["bind"] == 10  # sin's derivative only: the cosine of its operand


@needs_torch
def test_an_array_and_a_float_go_to_the_library_directly_after_the_first_call(monkeypatch):
    """A torch tensor and a Python float or int (either side) of a dtype numpy keeps (float32
    with 0.5 or 3: float32) are planned once by `_foreign` and then call the tensor's own
    operator (`_weak`); an int beside an integer tensor is planned each time (whether numpy
    takes it depends on its value), and so is a number numpy would promote the tensor for
    (float32 with 1j: complex64).

    Kills: the `_weak` lookups in `_impl` (every call planned again), a number of another kind
    taking the planned function (a wrong dtype)."""
    torch = TORCH.module
    planned = []
    real = elementwise._foreign
    monkeypatch.setattr(elementwise, "_foreign", lambda *a: planned.append(a[0]) or real(*a))
    monkeypatch.setattr(elementwise, "_weak", {})
    t = torch.linspace(0.5, 2.0, 4, dtype=torch.float32)
    cases = [
        (lambda: ea.multiply(t, 0.5), t * 0.5),
        (lambda: ea.subtract(2.0, t), 2.0 - t),
        (lambda: ea.power(t, 2.0), t**2.0),
        (lambda: ea.divide(t, 4.0), t / 4.0),
        (lambda: ea.power(t, 2), t**2),
        (lambda: ea.add(3, t), 3 + t),
    ]
    for op, want in cases:
        for _ in range(3):
            got = op()
            assert got.dtype == np.float32 and torch.equal(got._value, want)
    assert len(planned) == len(cases)  # the first call of each
    planned.clear()
    i = torch.arange(4, dtype=torch.int16)
    for _ in range(2):
        assert ea.add(i, 3).dtype == np.int16
        c = ea.multiply(t, 1j)
        assert c.dtype == np.complex64
        np.testing.assert_allclose(TORCH.numpy(c._value), 1j * TORCH.numpy(t), rtol=1e-6)
    assert planned == ["add", "multiply"] * 2
    with pytest.raises(OverflowError):  # numpy's rule for an int out of the dtype's range
        ea.add(torch.arange(3, dtype=torch.uint8), 300)
