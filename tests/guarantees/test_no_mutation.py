"""No mutation (docs/guarantees.md): no operation and no transformation writes into a user's array.

Every op and every transformation runs twice: once on read-only arrays
(``arr.flags.writeable = False``: any write raises, so "works" is the check), and
once on writable arrays that must be bitwise unchanged afterwards. Cotangents and
tangents are checked the same way. Returned gradients are arrays of their own:
writing into one changes no input and no cotangent, even a gradient equal to a captured
array. The tests of the last section run eagerly and with every transformation jitted
(the `jit_mode` mark).
"""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
from tests.support.api_ops import BINARY, REDUCTIONS, UNARY
from tests.support.numerics import readonly as read_only

MODES = ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")
RNG = np.random.default_rng(7)
P = RNG.uniform(0.2, 0.9, (3, 4))  # in (0, 1): fine for log, sqrt, arcsin, arccos
Q = RNG.uniform(0.2, 0.9, (3, 4))
S = RNG.uniform(0.2, 0.9, (4, 4))
R = RNG.uniform(0.2, 0.9, 4)
IDX = np.array([2, 0, 2])


OPS = {f"{n}": (lambda x, n=n: getattr(ea, n)(x), (P,)) for n in UNARY}
OPS.update({f"{n}": (lambda x, y, n=n: getattr(ea, n)(x, y), (P, R)) for n in BINARY})
OPS.update(
    {
        "sum": (lambda x: ea.sum(x, axis=1), (P,)),
        "mean": (lambda x: ea.mean(x, axis=0, keepdims=True), (P,)),
        "var": (lambda x: ea.var(x, axis=1, ddof=1), (P,)),
        "max": (lambda x: ea.max(x, axis=1), (P,)),
        "min": (lambda x: ea.min(x), (P,)),
        "prod": (lambda x: ea.prod(x, axis=0), (P,)),
        "logsumexp": (lambda x: ea.logsumexp(x, axis=1), (P,)),
        "softmax": (lambda x: ea.softmax(x), (P,)),
        "log_softmax": (lambda x: ea.log_softmax(x, axis=0), (P,)),
        "reshape": (lambda x: ea.reshape(x, (4, 3)), (P,)),
        "broadcast_to": (lambda x: ea.broadcast_to(x, (3, 4)), (R,)),
        "expand_dims": (lambda x: ea.expand_dims(x, 1), (P,)),
        "squeeze": (lambda x: ea.squeeze(ea.expand_dims(x, 0)), (P,)),
        "concatenate": (lambda x, y: ea.concatenate([x, y], axis=1), (P, Q)),
        "stack": (lambda x, y: ea.stack([x, y]), (P, Q)),
        "split": (lambda x: ea.split(x, 2, axis=1)[1], (P,)),
        "flip": (lambda x: ea.flip(x, 0), (P,)),
        "moveaxis": (lambda x: ea.moveaxis(x, 0, 1), (P,)),
        "transpose": (lambda x: ea.transpose(x), (P,)),
        "T": (lambda x: x.T if isinstance(x, ea.Tensor) else ea.tensor(x).T, (P,)),
        "where": (lambda x, y: ea.where(P > 0.5, x, y), (P, Q)),
        "clip": (lambda x: ea.clip(x, 0.3, 0.7), (P,)),
        "getitem basic": (
            lambda x: ea.tensor(x)[1:, ::2] if not isinstance(x, ea.Tensor) else x[1:, ::2],
            (P,),
        ),
        "getitem array": (lambda x: (x if isinstance(x, ea.Tensor) else ea.tensor(x))[IDX], (P,)),
        "einsum": (lambda x, y: ea.einsum("ij,kj->ik", x, y), (P, Q)),
        "einsum diagonal": (lambda x: ea.einsum("ii->i", x), (S,)),
        "einsum trace and broadcast": (lambda x, y: ea.einsum("ii,j->ij", x, y), (S, R)),
        "einsum ellipsis": (lambda x, y: ea.einsum("...j,j->...", x, y), (P, R)),
        "einsum three": (lambda x, y, z: ea.einsum("ij,kj,jl->ikl", x, y, z), (P, Q, S)),
        "matmul": (lambda x, y: ea.matmul(x, y), (P, S)),
        "@": (lambda x, y: (x if isinstance(x, ea.Tensor) else ea.tensor(x)) @ y, (P, R)),
        "dot": (lambda x, y: ea.dot(x, y), (P, R)),
        "inner": (lambda x, y: ea.inner(x, y), (P, Q)),
        "outer": (lambda x, y: ea.outer(x, y), (R, R)),
        "tensordot": (lambda x, y: ea.tensordot(x, y, axes=([1], [1])), (P, Q)),
        "trace": (lambda x: ea.trace(x, offset=1), (S,)),
        "diagonal": (lambda x: ea.diagonal(x, offset=-1), (S,)),
        "stop_gradient": (lambda x: ea.stop_gradient(x) * x, (P,)),
    }
)


def _fresh(arrays, readonly):
    return [read_only(a) if readonly else np.array(a) for a in arrays]


def _check_unchanged(arrays, originals, what):
    for k, (a, o) in enumerate(zip(arrays, originals)):
        assert a.tobytes() == o.tobytes(), f"{what}: array {k} was modified"


def _run_everything(f, args, readonly):
    """Value, grad, vjp, jvp, hvp (three modes), jacfwd, jacrev, imperative backward of
    op `f` at `args`; returns every array the user handed in, for checking."""
    out = f(*args)
    out_shape = np.shape(out.numpy())
    ct = _fresh([RNG.uniform(-1, 1, out_shape)], readonly)[0]
    tangents = _fresh([RNG.uniform(-1, 1, np.shape(a)) for a in args], readonly)
    every = tuple(range(len(args)))
    scalar = lambda *a: ea.sum(f(*a) * ct)
    grads = list(ea.grad(scalar, every)(*args))
    _, pullback = ea.vjp(f, *args)
    grads += list(pullback(ct))
    ea.jvp(f, tuple(args), tuple(tangents))
    for mode in MODES:
        grads += list(ea.hvp(scalar, tuple(args), tuple(tangents), mode=mode))
    ea.jacfwd(f, every)(*args)
    ea.jacrev(f, every)(*args)
    leaves = [ea.tensor(a, requires_grad=True) for a in args]
    y = f(*leaves)
    if y.requires_grad:  # not for sign: its result does not depend differentiably on anything
        y.backward(ct)
        grads += [t.grad for t in leaves if t.grad is not None]
    return [ct, *tangents], grads


@pytest.mark.parametrize("readonly", [True, False], ids=["read-only", "writable"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_no_op_writes_into_its_inputs(name, readonly):
    f, base = OPS[name]
    args = _fresh(base, readonly)
    originals = [a.copy() for a in args]
    idx = IDX.copy()
    IDX.flags.writeable = not readonly
    try:
        handed, grads = _run_everything(f, args, readonly)
    finally:
        IDX.flags.writeable = True
    _check_unchanged(args, originals, name)
    assert IDX.tobytes() == idx.tobytes(), "the index array was modified"
    handed_copies = [h.copy() for h in handed]
    # gradients are arrays of their own: writing into them changes nothing the user owns
    for g in grads:
        assert isinstance(g, np.ndarray) and g.flags.writeable, name
        for a in args + handed:
            assert not np.shares_memory(g, a), f"{name}: a gradient shares memory with a user's array"
        g[...] = 12345.0
    _check_unchanged(args, originals, name)
    _check_unchanged(handed, handed_copies, name)


def _identity_like():
    return {
        "identity": lambda x: x,
        "reshape": lambda x: ea.reshape(x, (-1,)),
        "transpose": lambda x: ea.transpose(x),
        "einsum copy": lambda x: ea.einsum("ij->ij", x),
        "twice": lambda x: (x, x),
        "dict": lambda x: {"a": x, "b": ea.einsum("ij->ji", x)},
    }


@pytest.mark.parametrize("name", sorted(_identity_like()))
def test_pullbacks_of_identity_like_functions_return_fresh_arrays(name):
    """The cotangent itself is the natural answer here: it must come back as a copy."""
    f = _identity_like()[name]
    x = read_only(P)
    _out, pullback = ea.vjp(f, x)
    ct = ea.vjp(f, P)[0]
    ct = (
        {k: read_only(np.ones_like(v)) for k, v in ct.items()}
        if isinstance(ct, dict)
        else (
            tuple(read_only(np.ones_like(c)) for c in ct)
            if isinstance(ct, tuple)
            else read_only(np.ones_like(ct))
        )
    )
    (g,) = pullback(ct)
    assert g.flags.writeable
    flat = list(ct.values()) if isinstance(ct, dict) else list(ct) if isinstance(ct, tuple) else [ct]
    for c in flat + [x]:
        assert not np.shares_memory(g, c), name
    g2 = ea.grad(lambda t: ea.sum(ea.reshape(t, (-1,))))(x)
    assert g2.flags.writeable and not np.shares_memory(g2, x)


def test_whole_programs_with_read_only_inputs():
    """Every transformation at once, nested, on read-only parameters and data."""
    w1, b1, w2, data = (
        read_only(a)
        for a in (
            RNG.standard_normal((4, 3)),
            RNG.standard_normal(4),
            RNG.standard_normal((2, 4)),
            RNG.standard_normal((5, 3)),
        )
    )
    saved = [a.copy() for a in (w1, b1, w2, data)]

    def loss(params, x):
        a, b, c = params
        h = ea.tanh(ea.einsum("ij,nj->ni", a, x) + b)
        return ea.mean(ea.logsumexp(ea.einsum("ki,ni->nk", c, h), axis=1))

    params = (w1, b1, w2)
    v = tuple(read_only(np.ones_like(p)) for p in params)
    ea.value_and_grad(loss)(params, data)
    ea.grad(loss, argnums=(0, 1))(params, data)
    ea.grad(loss, has_aux=False)(params, data)
    ea.grad(lambda p, x: (loss(p, x), x), has_aux=True)(params, data)
    for mode in MODES:
        ea.hvp(lambda *p: loss(p, data), params, v, mode=mode)
    ea.hessian(lambda b: loss((w1, b, w2), data))(b1)
    ea.jacfwd(lambda x: ea.grad(loss)(params, x)[1])(data)
    ea.jacrev(lambda x: ea.softmax(ea.einsum("ij,nj->ni", w1, x)))(data)
    ea.make_graph(ea.grad(loss))(params, data)
    ea.gradcheck(lambda b: loss((w1, b, w2), data), b1)
    for a, s in zip((w1, b1, w2, data), saved):
        assert a.tobytes() == s.tobytes()


# -- grad, vjp and backward, eagerly and jitted ----------------------------------------------------


def _readonly_cases():
    x = read_only(np.random.default_rng(0).uniform(0.1, 0.9, (2, 3)))
    y = read_only(np.random.default_rng(1).uniform(0.1, 0.9, (3,)))
    # sign has no derivative, so nothing to run backward() through
    unary = [n for n in UNARY if n != "sign"] + REDUCTIONS + ["transpose", "trace", "diagonal", "flip"]
    binary = BINARY + ["matmul", "dot", "inner", "outer"]
    cases = {n: lambda x, y, n=n: getattr(ea, n)(x) for n in unary}
    cases.update({n: lambda x, y, n=n: getattr(ea, n)(x, y) for n in binary})
    cases.update(
        {
            "tensordot": lambda x, y: ea.tensordot(x, y, ([1], [0])),
            "einsum": lambda x, y: ea.einsum("ij,j,ij->i", x, y, x),
            "einsum repeated": lambda x, y: ea.einsum("ii->i", x[:, :2]),
            "where": lambda x, y: ea.where(x > 0.5, x, y),
            "clip": lambda x, y: ea.clip(x, 0.2, y),
            "reshape": lambda x, y: ea.reshape(x, (3, 2)),
            "broadcast_to": lambda x, y: ea.broadcast_to(y, (2, 3)),
            "expand_dims": lambda x, y: ea.expand_dims(x, 0),
            "squeeze": lambda x, y: ea.squeeze(ea.expand_dims(x, 0)),
            "concatenate": lambda x, y: ea.concatenate([x, x], 1),
            "stack": lambda x, y: ea.stack([x, x]),
            "split": lambda x, y: ea.split(x, 3, axis=1)[1],
            "moveaxis": lambda x, y: ea.moveaxis(x, 0, 1),
            "getitem array": lambda x, y: x[np.array([0, 0, 1])],
            "getitem basic": lambda x, y: x[0, 1:],
            "stop_gradient": lambda x, y: ea.stop_gradient(x) * y,
            "identity": lambda x, y: x,
        }
    )
    return x, y, cases


@pytest.mark.usefixtures("jit_mode")
def test_grad_vjp_and_backward_write_into_no_input():
    x, y, cases = _readonly_cases()
    for name, f in cases.items():
        before = (x.copy(), y.copy())
        out = f(x, y)
        ea.grad(lambda a, b, f=f: ea.sum(f(a, b)), (0, 1))(x, y)
        value, pullback = ea.vjp(f, x, y)
        pullback(read_only(np.ones(np.shape(value))))
        t, s = ea.tensor(x, requires_grad=True), ea.tensor(y, requires_grad=True)
        ea.sum(f(t, s) * 1.0).backward()
        np.testing.assert_array_equal(x, before[0], err_msg=name)
        np.testing.assert_array_equal(y, before[1], err_msg=name)
        assert np.all(np.isfinite(np.asarray(out))), name


@pytest.mark.usefixtures("jit_mode")
def test_writable_inputs_are_left_unchanged():
    x, y, cases = _readonly_cases()
    for name, f in cases.items():
        xw, yw = np.array(x), np.array(y)
        ea.grad(lambda a, b, f=f: ea.sum(f(a, b)), (0, 1))(xw, yw)
        value, pullback = ea.vjp(f, xw, yw)
        u = np.ones(np.shape(value))
        pullback(u)
        np.testing.assert_array_equal(xw, x, err_msg=name)
        np.testing.assert_array_equal(yw, y, err_msg=name)
        np.testing.assert_array_equal(u, np.ones(np.shape(value)), err_msg=name)


@pytest.mark.usefixtures("jit_mode")
def test_returned_gradients_share_memory_with_nothing_of_the_callers():
    ct = np.ones(3)
    gx, gy = ea.vjp(lambda x, y: x + y, np.zeros(3), np.zeros(3))[1](ct)
    (gi,) = ea.vjp(lambda x: x, np.zeros(3))[1](ct)
    gx += 5.0  # updating one gradient in place must not change the other, nor the cotangent
    np.testing.assert_array_equal(gy, np.ones(3))
    np.testing.assert_array_equal(gi, np.ones(3))
    np.testing.assert_array_equal(ct, np.ones(3))
    gx, gy = ea.vjp(lambda x, y: x + ea.reshape(y, (3,)), np.zeros(3), np.zeros((3, 1)))[1](ct)
    assert not np.shares_memory(gx, gy)
    gx, gy = ea.grad(lambda x, y: x + y, (0, 1))(1.0, 2.0)
    assert not np.shares_memory(gx, gy)


@pytest.mark.usefixtures("jit_mode")
def test_returned_gradients_are_writable_arrays():
    g = ea.grad(lambda x: ea.sum(ea.broadcast_to(x, (3, 2))))(np.ones(2))
    g[0] = 5.0  # a gradient is the caller's to keep
    assert g[0] == 5.0


@pytest.mark.usefixtures("jit_mode")
def test_a_gradient_equal_to_a_captured_array_is_a_fresh_copy():
    """d/dx sum(x * G) is G itself: einad passes it on without multiplying by ones,
    but the caller still gets an array of their own, never a view of G."""
    G = np.arange(4.0)
    g = ea.grad(lambda x: ea.sum(x * G))(np.ones(4))
    np.testing.assert_array_equal(g, G)
    assert g.flags.writeable and not np.shares_memory(g, G)
    g[0] = 99.0
    assert G[0] == 0.0
