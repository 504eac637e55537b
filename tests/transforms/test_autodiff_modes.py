"""einad.transforms.autodiff beyond first-order reverse mode: jvp against vjp on every
operation and on generated einsums, jacfwd and jacrev, hessian, hvp in its three modes,
third derivatives, perturbation confusion and every transformation nested in every other;
then jvp, hvp, Jacobians and Hessians on every array library, float32 kept.

Every expected value here comes from outside einad: numpy closed forms, central
differences of plain numpy/einad evaluations, or the adjoint identity
<u, J v> = <J^T u, v> between two independently implemented modes. Every test runs
twice (the `jit_mode` mark): eagerly and with every transformation jitted, on every
library too. gradcheck's own tests are in tests/test_testing.py.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einad as ea
from tests.support.api_ops import ALL
from tests.support.functions import (
    LV,
    LW,
    LX,
    LY,
    V3,
    W3,
    X3,
    Y3,
    f_xy,
    g_xy,
    lib_arrays,
    lib_result,
    logistic_loss,
)
from tests.support.jitting import compiled
from tests.support.numerics import assert_close

pytestmark = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

MODES = ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")


# -- helpers ---------------------------------------------------------------------------------


def leaves(tree):
    """The leaves of a nested tuple/list/dict, dict keys sorted (einad's order)."""
    if isinstance(tree, (tuple, list)):
        return [leaf for t in tree for leaf in leaves(t)]
    if isinstance(tree, dict):
        return [leaf for k in sorted(tree) for leaf in leaves(tree[k])]
    return [tree]


def vdot(a, b):
    """Sum over matching leaves of <a, b>."""
    la, lb = leaves(a), leaves(b)
    assert len(la) == len(lb)
    return float(sum(np.sum(np.asarray(x) * np.asarray(y)) for x, y in zip(la, lb)))


def plain(f, *args):
    """f evaluated on arrays, outside any transformation, as numpy leaves."""
    out = f(*args)
    return [np.asarray(o, dtype=np.float64) for o in leaves(out)]


def check_adjoint(f, args, seed=0, rtol=1e-9, numeric=True):
    """jvp(f) against vjp(f): <u, J v> == <J^T u, v>, and both against central differences.

    Also checks that jvp and vjp return f's value and the right shapes.
    """
    rng = np.random.default_rng(seed)
    args = tuple(np.asarray(a, dtype=np.float64) for a in args)
    expected = plain(f, *args)
    tangents = tuple(rng.standard_normal(a.shape) for a in args)

    out, tan = ea.jvp(f, args, tangents)
    for o, e in zip(leaves(out), expected):
        assert_close(o, e, rtol=1e-12, atol=1e-12)
    tan_leaves = leaves(tan)
    assert [np.shape(t) for t in tan_leaves] == [e.shape for e in expected]

    cot = [rng.standard_normal(e.shape) for e in expected]
    value, pullback = ea.vjp(f, *args)
    for o, e in zip(leaves(value), expected):
        assert_close(o, e, rtol=1e-12, atol=1e-12)
    # the cotangent has the output's structure
    cot_tree = _rebuild(f(*args), iter(cot))
    grads = pullback(cot_tree)
    assert isinstance(grads, tuple) and len(grads) == len(args)
    for g, a in zip(grads, args):
        assert np.shape(g) == a.shape

    forward = vdot(cot, tan_leaves)
    reverse = vdot(grads, tangents)
    scale = max(1.0, abs(forward), abs(reverse))
    assert abs(forward - reverse) <= rtol * scale, (forward, reverse)

    if numeric:  # the forward tangent itself, by central differences along the tangents
        eps = 1e-6
        plus = plain(f, *(a + eps * t for a, t in zip(args, tangents)))
        minus = plain(f, *(a - eps * t for a, t in zip(args, tangents)))
        for t, p, m in zip(tan_leaves, plus, minus):
            assert_close(t, (p - m) / (2 * eps), rtol=1e-5, atol=1e-6)
    return forward


def _rebuild(like, it):
    if isinstance(like, (tuple, list)):
        return type(like)(_rebuild(x, it) for x in like)
    if isinstance(like, dict):
        return {k: _rebuild(like[k], it) for k in sorted(like)}
    return next(it)


# -- jvp against vjp on every operation -------------------------------------------------------

R = np.random.default_rng(42)
X = R.standard_normal((3, 4))
Y = R.standard_normal((3, 4))
V4 = R.standard_normal(4)
POS = R.uniform(0.5, 2.0, (3, 4))
POS4 = R.uniform(0.5, 2.0, 4)
UNIT = R.uniform(-0.8, 0.8, (3, 4))
AWAY = np.where(np.abs(X) < 0.2, 0.5, X)  # kinks of abs/relu/max stay out of reach
M33 = R.standard_normal((3, 3))
B234 = R.standard_normal((2, 3, 4))
B245 = R.standard_normal((2, 4, 5))
T345 = R.standard_normal((3, 4, 5))
SEP = np.array([[0.1, 0.9, -1.3, 2.2], [1.7, -0.4, 0.6, -2.0], [-0.9, 1.1, 0.3, 0.0]])

OPS = {
    # elementwise, unary
    "negative": (ea.negative, [X]),
    "unary minus": (lambda x: -x, [X]),
    "exp": (ea.exp, [X]),
    "log": (ea.log, [POS]),
    "log1p": (ea.log1p, [POS]),
    "expm1": (ea.expm1, [X]),
    "sin": (ea.sin, [X]),
    "cos": (ea.cos, [X]),
    "tan": (ea.tan, [UNIT]),
    "tanh": (ea.tanh, [X]),
    "sinh": (ea.sinh, [X]),
    "cosh": (ea.cosh, [X]),
    "arcsin": (ea.arcsin, [UNIT]),
    "arccos": (ea.arccos, [UNIT]),
    "arctan": (ea.arctan, [X]),
    "sqrt": (ea.sqrt, [POS]),
    "square": (ea.square, [X]),
    "abs": (ea.abs, [AWAY]),
    "sign (zero derivative)": (lambda x: ea.sign(x) * x, [AWAY]),
    "sigmoid": (ea.sigmoid, [X]),
    "relu": (ea.relu, [AWAY]),
    "softplus": (ea.softplus, [X]),
    "stop_gradient": (lambda x: x * ea.stop_gradient(x) + ea.stop_gradient(ea.sin(x)), [X]),
    # elementwise, binary, with broadcasting
    "add": (ea.add, [X, V4]),
    "subtract": (ea.subtract, [X[:, :1], V4[None]]),
    "multiply": (ea.multiply, [X, Y]),
    "multiply broadcast": (lambda a, b: a * b, [X, V4]),
    "divide": (ea.divide, [X, POS4]),
    "rdivide": (lambda a: 2.0 / a, [POS]),
    "power": (ea.power, [POS, Y]),
    "power scalar exponent": (lambda a: a**3, [X]),
    "power scalar base": (lambda a: 2.0**a, [X]),
    "maximum": (ea.maximum, [X, Y]),
    "minimum": (ea.minimum, [SEP, V4 * 0 + 0.45]),
    "where": (lambda a, b: ea.where(SEP > 0, a, b), [X, V4]),
    "clip": (lambda a: ea.clip(a, -0.5, 0.5), [SEP]),
    # reductions and stable compositions
    "sum all": (ea.sum, [X]),
    "sum axis keepdims": (lambda a: ea.sum(a, axis=1, keepdims=True), [X]),
    "mean": (lambda a: ea.mean(a, axis=0), [X]),
    "var": (lambda a: ea.var(a, axis=1, ddof=1), [X]),
    "max": (lambda a: ea.max(a, axis=1), [SEP]),
    "max all": (ea.max, [SEP]),
    "min": (lambda a: ea.min(a, axis=0, keepdims=True), [SEP]),
    "prod": (lambda a: ea.prod(a, axis=1), [X]),
    "prod with a zero": (lambda a: ea.prod(a, axis=1), [np.where(np.arange(4) == 2, 0.0, X)]),
    "logsumexp": (ea.logsumexp, [X]),
    "logsumexp axis": (lambda a: ea.logsumexp(a, axis=1, keepdims=True), [X]),
    "softmax": (ea.softmax, [X]),
    "softmax axis 0": (lambda a: ea.softmax(a, axis=0), [X]),
    "log_softmax": (ea.log_softmax, [X]),
    # structural
    "reshape": (lambda a: ea.reshape(a, (2, 6)), [X]),
    "method reshape": (lambda a: a.reshape(4, -1), [X]),
    "broadcast_to": (lambda a: ea.broadcast_to(a, (2, 3, 4)), [X]),
    "expand_dims": (lambda a: ea.expand_dims(a, 1), [X]),
    "squeeze": (lambda a: ea.squeeze(a, 0), [X[None]]),
    "concatenate": (lambda a, b: ea.concatenate([a, b], axis=1), [X, Y]),
    "stack": (lambda a, b: ea.stack([a, b], axis=2), [X, Y]),
    "split": (lambda a: ea.split(a, [1, 3], axis=1), [X]),
    "flip": (lambda a: ea.flip(a, 1), [X]),
    "moveaxis": (lambda a: ea.moveaxis(a, 0, 2), [B234]),
    "getitem basic": (lambda a: a[1:, ::2], [X]),
    "getitem integer array": (lambda a: a[[0, 2, 0], 1], [X]),
    # the linear helpers (one einsum each)
    "einsum": (lambda a, b: ea.einsum("ij,kj->ik", a, b), [X, Y]),
    "matmul": (ea.matmul, [X, Y.T]),
    "@ batched": (lambda a, b: a @ b, [B234, B245]),
    "matmul 1-D": (ea.matmul, [X, V4]),
    "dot": (ea.dot, [X, V4]),
    "inner": (ea.inner, [X, Y]),
    "outer": (ea.outer, [V4, X[0]]),
    "tensordot": (lambda a, b: ea.tensordot(a, b, axes=([1, 2], [0, 1])), [B234, T345]),
    "transpose": (ea.transpose, [B234]),
    ".T": (lambda a: a.T, [X]),
    "trace": (ea.trace, [M33]),
    "trace offset": (lambda a: ea.trace(a, offset=1), [X]),
    "diagonal": (lambda a: ea.diagonal(a, offset=-1, axis1=1, axis2=2), [B234]),
}


def test_op_table_covers_the_api():
    named = [n for n in ALL if n != "sum"]  # ea.sum is covered under its einsum spellings
    covered = {name.split()[0].split("(")[0] for name in OPS}
    assert set(named) - covered == set()


@pytest.mark.parametrize("name", sorted(OPS))
def test_jvp_matches_vjp(name):
    f, args = OPS[name]
    # stop_gradient's derivative is zero by definition, not the derivative of its value
    check_adjoint(f, args, seed=len(name), numeric=name != "stop_gradient")


def test_jvp_of_sign_and_stop_gradient_is_zero():
    _, t = ea.jvp(ea.sign, (X,), (np.ones_like(X),))
    assert_close(t, np.zeros_like(X))
    _, t = ea.jvp(ea.stop_gradient, (X,), (np.ones_like(X),))
    assert_close(t, np.zeros_like(X))
    _, t = ea.jvp(lambda x: x * ea.stop_gradient(x), (X,), (np.ones_like(X),))
    assert_close(t, X)  # only the traced factor carries the tangent


def test_jvp_of_an_unused_input_and_of_a_constant_output():
    out, t = ea.jvp(lambda x, y: ea.sin(x), (X, Y), (Y, X))
    assert_close(t, np.cos(X) * Y)
    out, t = ea.jvp(lambda x: np.ones(3), (X,), (Y,))
    assert_close(out, np.ones(3))
    assert_close(t, np.zeros(3))


# -- jvp against vjp on generated einsum specs -----------------------------------------------


@st.composite
def einsum_specs(draw):
    """(subscripts, shapes): 1-4 operands, repeated letters, ellipsis, implicit or explicit."""
    pool = "ijkA"
    size = {c: draw(st.integers(1, 3)) for c in pool}
    n = draw(st.integers(1, 4))
    use_ell = draw(st.booleans())
    ell = [draw(st.integers(1, 3)) for _ in range(draw(st.integers(0, 2)))] if use_ell else []
    terms, shapes = [], []
    any_ell = False
    for _ in range(n):
        letters = draw(st.lists(st.sampled_from(pool), min_size=0, max_size=3))
        shape = []
        for c in letters:
            # a size-1 dimension broadcasts against the same letter's size elsewhere
            one = letters.count(c) == 1 and draw(st.integers(0, 5)) == 0
            shape.append(1 if one else size[c])
        term = "".join(letters)
        if use_ell and draw(st.booleans()):
            any_ell = True
            rank = draw(st.integers(0, len(ell)))
            dims = [1 if draw(st.integers(0, 4)) == 0 else d for d in ell[len(ell) - rank :]]
            at = draw(st.integers(0, len(letters)))
            term = term[:at] + "..." + term[at:]
            shape = shape[:at] + dims + shape[at:]
        terms.append(term)
        shapes.append(tuple(shape))
    spec = ",".join(terms)
    if draw(st.booleans()):  # explicit output: a permutation of some used letters
        used = sorted({c for t in terms for c in t if c != "."})
        out = draw(st.permutations(used))[: draw(st.integers(0, len(used)))]
        out = "".join(out)
        if any_ell:
            at = draw(st.integers(0, len(out)))
            out = out[:at] + "..." + out[at:]
        spec += "->" + out
    return spec, shapes


@settings(max_examples=40, deadline=None)
@given(einsum_specs(), st.integers(0, 2**16))
def test_einsum_jvp_matches_vjp_on_generated_specs(case, seed):
    spec, shapes = case
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(s) for s in shapes]
    try:
        expected = np.einsum(spec, *args)
    except ValueError:  # a spec numpy itself rejects: einad must reject it too
        with pytest.raises(ValueError):
            ea.einsum(spec, *args)
        return
    f = lambda *a: ea.einsum(spec, *a)
    assert_close(f(*args).numpy(), expected, rtol=1e-10, atol=1e-12)
    check_adjoint(f, args, seed=seed)
    # einsum is linear in each operand: its JVP is the same einsum with the operand
    # replaced by the tangent, summed over the operands
    tangents = tuple(rng.standard_normal(s) for s in shapes)
    _, t = ea.jvp(f, tuple(args), tangents)
    by_linearity = sum(np.einsum(spec, *(args[:k] + [tangents[k]] + args[k + 1 :])) for k in range(len(args)))
    assert_close(t, by_linearity, rtol=1e-10, atol=1e-12)


def test_einsum_jvp_with_the_same_tensor_twice():
    # d/dx einsum("ij,jk->ik", x, x) v = v x + x v
    x, v = M33, X[:, :3]
    _, t = ea.jvp(lambda a: ea.einsum("ij,jk->ik", a, a), (x,), (v,))
    assert_close(t, v @ x + x @ v)
    check_adjoint(lambda a: ea.einsum("ij,jk,kl->il", a, a, a), [x])


# -- jacfwd == jacrev --------------------------------------------------------------------------


def numeric_jacobian(f, x, eps=1e-6):
    x = np.asarray(x, dtype=np.float64)
    out0 = np.asarray(f(x))
    jac = np.zeros(out0.shape + x.shape)
    for idx in np.ndindex(*x.shape):
        d = np.zeros_like(x)
        d[idx] = eps
        jac[(Ellipsis,) + idx] = (np.asarray(f(x + d)) - np.asarray(f(x - d))) / (2 * eps)
    return jac


def assert_same_jacobians(a, b, rtol=1e-10, atol=1e-12):
    assert type(a) is type(b)
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same_jacobians(x, y, rtol, atol)
    elif isinstance(a, dict):
        assert sorted(a) == sorted(b)
        for k in a:
            assert_same_jacobians(a[k], b[k], rtol, atol)
    else:
        assert isinstance(a, np.ndarray), type(a)
        assert_close(a, b, rtol=rtol, atol=atol)


W34 = R.standard_normal((3, 4))
B3 = R.standard_normal(3)


def test_jacobians_of_a_layer_match_closed_form():
    f = lambda x: ea.tanh(W34 @ x + B3)
    x = V4
    y = np.tanh(W34 @ x + B3)
    closed = (1 - y**2)[:, None] * W34
    jr, jf = ea.jacrev(f)(x), ea.jacfwd(f)(x)
    assert jr.shape == jf.shape == (3, 4)
    assert_close(jr, closed, rtol=1e-12)
    assert_close(jf, closed, rtol=1e-12)
    assert ea.jacobian is ea.jacrev


@pytest.mark.parametrize(
    "f, x",
    [
        (lambda x: ea.einsum("ij,jk->ki", x, W34) * ea.sin(x[:, :1]).T, X[:2, :3]),  # (2,3) -> (4,2)
        (lambda x: ea.softmax(x, axis=0) * ea.logsumexp(x), X),  # (3,4) -> (3,4)
        (lambda x: ea.sum(x**3) * ea.exp(x[0]), V4),  # (4,) -> scalar * (4,)
        (lambda x: ea.prod(ea.cos(x)), V4),  # (4,) -> ()
        (lambda x: ea.outer(ea.sin(x), x), np.array(0.7)),  # () -> (1, 1)
        (lambda x: ea.stack([ea.max(x, axis=1), ea.var(x, axis=1)]), SEP),  # (3,4) -> (2,3)
    ],
)
def test_jacfwd_equals_jacrev_on_random_functions(f, x):
    jr, jf = ea.jacrev(f)(x), ea.jacfwd(f)(x)
    out_shape = np.shape(f(x))
    assert jr.shape == out_shape + np.shape(x)
    assert jf.shape == out_shape + np.shape(x)
    assert_close(jr, jf, rtol=1e-10, atol=1e-12)
    assert_close(jr, numeric_jacobian(lambda z: f(z).numpy(), x), rtol=1e-5, atol=1e-7)


def test_jacobians_of_pytrees_in_and_out():
    params = {"w": W34.T.copy(), "b": B3}  # w: (4, 3), b: (3,)
    x = V4

    def f(p, x):
        h = ea.einsum("i,ij->j", x, p["w"]) + p["b"]
        return {"act": ea.tanh(h), "loss": ea.sum(h**2)}, [h * 2.0]

    jr, jf = ea.jacrev(f)(params, x), ea.jacfwd(f)(params, x)
    assert_same_jacobians(jr, jf)
    # structure: the output's tree, each leaf holding the input's tree
    assert isinstance(jr, tuple) and isinstance(jr[0], dict) and isinstance(jr[1], list)
    assert jr[0]["act"]["w"].shape == (3, 4, 3)
    assert jr[0]["act"]["b"].shape == (3, 3)
    assert jr[0]["loss"]["w"].shape == (4, 3)
    assert jr[0]["loss"]["b"].shape == (3,)
    assert jr[1][0]["w"].shape == (3, 4, 3)
    h = x @ params["w"] + B3
    act = 1 - np.tanh(h) ** 2
    assert_close(jr[0]["act"]["b"], np.diag(act))
    assert_close(jr[0]["act"]["w"], act[:, None, None] * x[None, :, None] * np.eye(3)[:, None, :])
    assert_close(jr[0]["loss"]["w"], 2 * np.outer(x, h))
    assert_close(jr[0]["loss"]["b"], 2 * h)
    assert_close(jr[1][0]["b"], 2 * np.eye(3))


def test_jacobians_with_argnums_tuple():
    a, b, c = V4, X, POS4

    def f(a, b, c):
        return ea.sin(b @ a) * ea.sum(c**2), ea.sum(a * c)

    for jac in (ea.jacrev, ea.jacfwd):
        j = jac(f, argnums=(0, 2))(a, b, c)
        assert isinstance(j, tuple) and len(j) == 2  # one per output
        (ja0, jc0), (ja1, jc1) = j
        assert ja0.shape == (3, 4) and jc0.shape == (3, 4)
        assert ja1.shape == (4,) and jc1.shape == (4,)
        s = np.sum(c**2)
        assert_close(ja0, np.cos(b @ a)[:, None] * b * s)
        assert_close(jc0, np.outer(np.sin(b @ a), 2 * c))
        assert_close(ja1, c)
        assert_close(jc1, a)
    # a negative argnum means the same argument
    assert_close(ea.jacfwd(f, argnums=-1)(a, b, c)[1], a)
    assert_close(ea.jacrev(f, argnums=1)(a, b, c)[1], np.zeros(b.shape))


def test_jacobians_of_complex_functions_run_batched_not_per_row():
    """conj and real have batching rules: no per-row loop (which would index row by row)."""
    z = np.array([3 + 4j, 1 - 1j, -2 + 0.5j, 1j, 2.0 + 0j, -1 - 3j])
    # jacfwd pushes a batch of complex tangents through abs's JVP, which takes their real part
    graph = ea.make_graph(ea.jacfwd(lambda z: ea.abs(z)))(z)
    assert "getitem" not in [e.op for e in graph.equations]
    np.testing.assert_allclose(ea.jacrev(ea.abs)(z), np.diag(np.conj(z) / np.abs(z)))


def test_jacrev_of_a_complex_function_of_a_real_input_is_the_complex_jacobian():
    """A real input's cotangent is the real part of what flows back, so jacrev, pulling back
    the unit rows only, gave Re J for f(x) = M x (M complex) while jacfwd gave M: two
    "Jacobians" of one function, the reverse one silently missing Im M."""
    M = np.array([[1 + 2j, -0.5j, 3.0], [0.25 - 1j, 2j, -1 + 1j]])
    x = np.array([0.5, -1.5, 2.0])
    z = np.array([1 - 1j, 0.5j])
    f = lambda x, z: (M @ ea.sin(x) * ea.sum(z**2), ea.sum(x**2))
    want = M * np.cos(x) * np.sum(z**2)
    for jac in (ea.jacrev, ea.jacfwd, ea.jacobian):
        (jx, jz), (kx, _) = jac(f, argnums=(0, 1))(x, z)
        assert_close(jx, want, rtol=1e-12)
        assert_close(jz, np.outer(M @ np.sin(x), 2 * z), rtol=1e-12)  # holomorphic in z
        assert_close(kx, 2 * x, rtol=1e-12)


# -- Hessians ----------------------------------------------------------------------------------


def test_hessian_of_quadratic_form_is_a_plus_a_transpose():
    A = R.standard_normal((4, 4))
    x = V4
    f = lambda x: x @ A @ x
    assert_close(ea.grad(f)(x), (A + A.T) @ x)
    hessians = (ea.hessian(f), ea.jacfwd(ea.grad(f)), ea.jacrev(ea.grad(f)), ea.jacfwd(ea.jacfwd(f)))
    for h in (hess(x) for hess in hessians):
        assert h.shape == (4, 4)
        assert_close(h, A + A.T, rtol=1e-12)
    # einsum-written quadratic form, same Hessian
    g = lambda x: ea.einsum("i,ij,j->", x, A, x)
    assert_close(ea.hessian(g)(x), A + A.T, rtol=1e-12)


def test_hessian_is_symmetric_and_matches_numeric():
    W = R.standard_normal((5, 4))

    def f(x):
        return ea.logsumexp(W @ x) + ea.sum(ea.sin(x) * x**2) + ea.prod(ea.cosh(x))

    x = V4 * 0.5
    h = ea.hessian(f)(x)
    assert h.shape == (4, 4)
    assert_close(h, h.T, rtol=1e-12, atol=1e-12)
    numeric = numeric_jacobian(lambda z: ea.grad(f)(z), x)
    assert_close(h, numeric, rtol=1e-6, atol=1e-8)
    assert_close(ea.jacrev(ea.jacrev(f))(x), h, rtol=1e-10)
    assert_close(ea.jacfwd(ea.jacfwd(f))(x), h, rtol=1e-10)


def test_hessian_of_matrix_input_has_doubled_shape():
    f = lambda m: ea.trace(m @ m @ m)
    m = M33
    assert_close(ea.grad(f)(m), 3 * (m @ m).T)
    h = ea.hessian(f)(m)
    assert h.shape == (3, 3, 3, 3)
    # d/dm_kl of 3 (m m)^T_ij = 3 (m m)_ji: H_ijkl = 3 (δ_jk m_li + m_jk δ_li)
    eye = np.eye(3)
    assert_close(h, 3 * (np.einsum("jk,li->ijkl", eye, m) + np.einsum("jk,li->ijkl", m, eye)))
    assert_close(h, h.transpose(2, 3, 0, 1))


# -- logistic regression: grad, Hessian, hvp in three modes --------------------------------


def _lr_closed(w):
    p = 1 / (1 + np.exp(-LX @ w))
    return LX.T @ (p - LY), LX.T @ np.diag(p * (1 - p)) @ LX


def test_logistic_regression_gradient_and_hessian():
    g_closed, h_closed = _lr_closed(LW)
    assert_close(ea.grad(logistic_loss)(LW), g_closed, rtol=1e-12)
    for h in (ea.hessian(logistic_loss)(LW), ea.jacfwd(ea.grad(logistic_loss))(LW)):
        assert h.shape == (3, 3)
        assert_close(h, h_closed, rtol=1e-10)
    assert_close(ea.jacrev(ea.grad(logistic_loss))(LW), h_closed, rtol=1e-10)


@pytest.mark.parametrize("mode", MODES)
def test_logistic_regression_hvp(mode):
    _, h_closed = _lr_closed(LW)
    hv = ea.hvp(logistic_loss, (LW,), (LV,), mode=mode)
    assert isinstance(hv, tuple) and len(hv) == 1
    assert isinstance(hv[0], np.ndarray) and hv[0].shape == (3,)
    assert_close(hv[0], h_closed @ LV, rtol=1e-10)
    assert_close(hv[0], ea.hessian(logistic_loss)(LW) @ LV, rtol=1e-10)


def test_hvp_modes_agree_to_rounding_and_on_several_primals():
    def f(a, b):
        return ea.sum(ea.tanh(ea.einsum("ij,j->i", b, a))) * ea.sum(a**2) + ea.sum(b**3)

    a, b = V4, X
    ta, tb = POS4, Y
    results = [ea.hvp(f, (a, b), (ta, tb), mode=m) for m in MODES]
    for r in results:
        assert len(r) == 2 and r[0].shape == (4,) and r[1].shape == (3, 4)
    for r in results[1:]:
        assert_close(r[0], results[0][0], rtol=1e-12, atol=1e-13)
        assert_close(r[1], results[0][1], rtol=1e-12, atol=1e-13)
    # against the Hessian of the flattened pair
    n = a.size

    def flat(z):
        return f(z[:n], ea.reshape(z[n:], b.shape))

    z = np.concatenate([a, b.ravel()])
    H = ea.hessian(flat)(z)
    hv = H @ np.concatenate([ta, tb.ravel()])
    assert_close(results[0][0], hv[:n], rtol=1e-10)
    assert_close(results[0][1], hv[n:].reshape(b.shape), rtol=1e-10)
    # the default is fwd-over-rev, and a wrong mode is an error
    assert_close(ea.hvp(f, (a, b), (ta, tb))[1], results[0][1])
    with pytest.raises(ValueError, match="mode"):
        ea.hvp(f, (a, b), (ta, tb), mode="fwd-over-fwd")


_PA = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
_PC = np.linspace(0.5, 2.0, 4)


def _fd_hvp(f, primals, tangents, eps=1e-5):
    """H v by central differences of `grad` (a reverse pass that densifies every cotangent)."""
    every = tuple(range(len(primals)))
    up = ea.grad(f, every)(*[p + eps * t for p, t in zip(primals, tangents)])
    down = ea.grad(f, every)(*[p - eps * t for p, t in zip(primals, tangents)])
    return [(u - d) / (2 * eps) for u, d in zip(up, down)]


_PENDING_CASES = {
    # an input's cotangent left as a pending contraction (einsum.Pending) in the forms it can take
    "matvec": (lambda w: ea.sum(ea.tanh(ea.einsum("ij,j->i", _PA, w))), (V4,), (POS4,)),
    "the input twice in one einsum": (lambda w: ea.einsum("i,i->", w, w) * ea.sum(ea.sin(w)), (V4,), (POS4,)),
    "two einsums summed at the input": (
        lambda w: ea.sum(ea.tanh(ea.einsum("ij,j->i", _PA, w))) + ea.sum(ea.einsum("j,j->j", w, _PC) ** 3),
        (V4,),
        (POS4,),
    ),
    "a pending and a spread at the input": (
        lambda m: ea.sum(ea.einsum("ij,j->i", m, _PC) ** 2) + ea.einsum("ii->", m[:, :3]) ** 3,
        (_PA,),
        (_PA[::-1].copy(),),
    ),
    "float32 input, float64 constant (no pending: a cast)": (
        lambda w: ea.sum(ea.tanh(ea.einsum("ij,j->i", _PA, w))),
        (V4.astype(np.float32),),
        (POS4.astype(np.float32),),
    ),
    "two inputs, one through another's einsum": (
        lambda a, m: ea.sum(ea.tanh(ea.einsum("ij,j->i", m, a)) ** 2),
        (V4, _PA),
        (POS4, _PA[::-1].copy()),
    ),
    "a pytree of inputs": (
        lambda d: ea.sum(ea.sin(ea.einsum("ij,j->i", d["m"], d["w"]))),
        ({"m": _PA, "w": V4},),
        ({"m": _PA[::-1].copy(), "w": POS4},),
    ),
}


@pytest.mark.parametrize("case", list(_PENDING_CASES))
@pytest.mark.parametrize("mode", MODES)
def test_hvp_with_pending_input_cotangents(mode, case):
    """The reverse pass inside an HVP leaves an input's cotangent as a pending contraction: each
    mode still gives H v (central differences of `grad`, whose pass densifies everything), for
    an input met by one einsum, twice by one, by two, by an einsum and a diagonal, through a
    cast, and for several inputs and a pytree of them."""
    f, primals, tangents = _PENDING_CASES[case]
    if case == "a pytree of inputs":
        hv = ea.hvp(f, primals, tangents, mode=mode)[0]
        flat = lambda m, w: f({"m": m, "w": w})
        ref = _fd_hvp(flat, (primals[0]["m"], primals[0]["w"]), (tangents[0]["m"], tangents[0]["w"]))
        assert_close(hv["m"], ref[0], rtol=1e-6, atol=1e-8)
        assert_close(hv["w"], ref[1], rtol=1e-6, atol=1e-8)
        return
    hv = ea.hvp(f, primals, tangents, mode=mode)
    if primals[0].dtype == np.float32:
        ref = _fd_hvp(f, [p.astype(np.float64) for p in primals], [t.astype(np.float64) for t in tangents])
        assert hv[0].dtype == np.float32
        assert_close(hv[0], ref[0], rtol=1e-4, atol=1e-5)
        return
    for h, r, p in zip(hv, _fd_hvp(f, primals, tangents), primals):
        assert h.shape == p.shape and h.dtype == p.dtype
        assert_close(h, r, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", MODES)
def test_hvp_of_a_complex_input(mode):
    """A complex input whose cotangent is pending: each mode agrees with forward over forward
    differences of the real and imaginary parts (the HVP of the function of two real vectors)."""
    a = _PA + 0.5j * _PA[::-1]
    z, t = V4 + 0.3j * POS4, POS4 - 0.7j * V4

    def f(z):
        u = ea.einsum("ij,j->i", a, z)
        return ea.sum(ea.real(u * ea.conj(u)) ** 2)

    def f_real(x, y):
        return f(x + 1j * y)

    ref = _fd_hvp(f_real, (z.real.copy(), z.imag.copy()), (t.real.copy(), t.imag.copy()))
    (hv,) = ea.hvp(f, (z,), (t,), mode=mode)
    # einad's gradient in a complex input is d/dx - i d/dy (grad of |z|**2 is 2 conj(z)), and
    # so is the product with the Hessian
    assert np.iscomplexobj(hv)
    assert_close(hv.real, ref[0], rtol=1e-6, atol=1e-8)
    assert_close(hv.imag, -ref[1], rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", MODES)
def test_hvp_never_builds_the_hessian(mode):
    # the whole program an hvp runs, traced: no value has the Hessian's shape (3, 3)
    graph = ea.make_graph(lambda w, v: ea.hvp(logistic_loss, (w,), (v,), mode=mode)[0])(LW, LV)
    shapes = [e.type for e in graph.equations]
    assert shapes, "the hvp program is empty"
    assert "f64[3,3]" not in shapes
    assert graph.inputs[0][1] == "f64[3]" and len(graph.outputs) == 1


# -- third derivatives of sin(x) x^3 -----------------------------------------------------------


def _sx3(x):
    return ea.sin(x) * x**3


def _sx3_derivatives(x):
    s, c = np.sin(x), np.cos(x)
    d1 = c * x**3 + 3 * x**2 * s
    d2 = -s * x**3 + 6 * x**2 * c + 6 * x * s
    d3 = -c * x**3 - 9 * x**2 * s + 18 * x * c + 6 * s
    return d1, d2, d3


@pytest.mark.parametrize("x", [0.7, -1.3, 2.0])
def test_third_derivative_of_sin_x_cubed(x):
    d1, d2, d3 = _sx3_derivatives(x)
    g = ea.grad
    assert_close(g(_sx3)(x), d1, rtol=1e-12)
    assert_close(g(g(_sx3))(x), d2, rtol=1e-12)
    assert_close(g(g(g(_sx3)))(x), d3, rtol=1e-12)

    def jvp1(f):
        return lambda x: ea.jvp(f, (x,), (1.0,))[1]

    orders = {
        "jvp jvp jvp": jvp1(jvp1(jvp1(_sx3))),
        "grad jvp grad": g(jvp1(g(_sx3))),
        "jvp grad grad": jvp1(g(g(_sx3))),
        "grad grad jvp": g(g(jvp1(_sx3))),
        "jvp jvp grad": jvp1(jvp1(g(_sx3))),
        "jacfwd jacrev grad": ea.jacfwd(ea.jacrev(g(_sx3))),
        "grad of hvp": g(lambda x: ea.hvp(_sx3, (x,), (1.0,))[0]),
    }
    for name, f in orders.items():
        value = f(x)
        assert np.shape(value) == (), name
        np.testing.assert_allclose(value, d3, rtol=1e-11, err_msg=name)


def test_third_derivative_tensor_of_a_vector_function():
    x = np.array([0.7, -1.3, 2.0])
    t = ea.jacfwd(ea.hessian(lambda x: ea.sum(_sx3(x))))(x)
    assert t.shape == (3, 3, 3)
    expected = np.zeros((3, 3, 3))
    expected[np.arange(3), np.arange(3), np.arange(3)] = _sx3_derivatives(x)[2]
    assert_close(t, expected, rtol=1e-11, atol=1e-12)


# -- perturbation confusion --------------------------------------------------------------------


def test_perturbation_confusion_reverse():
    # d/dx [ x * (d/dy (x + y))|_{y=1} ] is 1, not 2, at x = 1 and at x = 2
    f = lambda x: x * ea.grad(lambda y: x + y)(1.0)
    assert_close(ea.grad(f)(1.0), 1.0)
    assert_close(ea.grad(f)(2.0), 1.0)


def test_perturbation_confusion_forward():
    def f(x):
        return x * ea.jvp(lambda y: x + y, (1.0,), (1.0,))[1]

    out, t = ea.jvp(f, (1.0,), (1.0,))
    assert_close(out, 1.0)
    assert_close(t, 1.0)


def test_perturbation_confusion_mixed():
    inner_rev = lambda x: x * ea.grad(lambda y: x + y)(1.0)
    inner_fwd = lambda x: x * ea.jvp(lambda y: x + y, (1.0,), (1.0,))[1]
    assert_close(ea.jvp(inner_rev, (1.0,), (1.0,))[1], 1.0)
    assert_close(ea.grad(inner_fwd)(1.0), 1.0)
    # the inner derivative depends on x: d/dx [ x * d/dy (x y)|_{y=5} ] = d/dx x^2 = 2x,
    # whatever y is; every outer transformation must agree
    g = lambda x: x * ea.grad(lambda y: x * y)(5.0)
    for outer in (ea.grad(g), lambda x: ea.jvp(g, (x,), (1.0,))[1], ea.jacfwd(g), ea.jacrev(g)):
        assert_close(outer(1.5), 3.0)


def test_an_outer_value_is_a_constant_inside_and_traced_outside():
    # h(x) = d/dy [sin(x y)] at y = 2  = x cos(2x);  h'(x) = cos(2x) - 2x sin(2x)
    h = lambda x: ea.grad(lambda y: ea.sin(x * y))(2.0)
    x = 0.4
    assert_close(h(x), x * np.cos(2 * x))
    assert_close(ea.grad(h)(x), np.cos(2 * x) - 2 * x * np.sin(2 * x), rtol=1e-12)
    assert_close(ea.jvp(h, (x,), (1.0,))[1], np.cos(2 * x) - 2 * x * np.sin(2 * x), rtol=1e-12)


# -- every transformation nested in every other ---------------------------------------------
#
# f(x) = sum(exp(A x)) has every derivative in closed form:
#   D1 = A^T s,  D2_ij = sum_m A_mi A_mj s_m,  D3_ijk = sum_m A_mi A_mj A_mk s_m, ...
# with s = exp(A x). Each *inner* transformation turns x into some G(x) whose first
# and second derivatives (dG, ddG) are contractions of D1..D4; each *outer* one
# differentiates G once or twice. All pairs are checked.

NA = np.random.default_rng(11).standard_normal((5, 3)) * 0.5
NX = np.array([0.3, -0.2, 0.5])
NV = np.array([1.0, -2.0, 0.5])  # inner direction
NT = np.array([-0.3, 0.7, 1.1])  # outer direction


def nf(x):
    return ea.sum(ea.exp(ea.einsum("mi,i->m", NA, x)))


def _F(x):
    return np.sum(np.exp(NA @ x))


def _D(k, x):
    s = np.exp(NA @ x)
    letters = "ijkl"[:k]
    return np.einsum(",".join("m" + c for c in letters) + ",m->" + letters, *([NA] * k), s)


def _inner_cases():
    v = NV
    c = {}
    # name: (G as an einad function of x, (G, dG, ddG) from the D tensors)
    c["grad"] = (ea.grad(nf), lambda x: (_D(1, x), _D(2, x), _D(3, x)))
    c["value_and_grad"] = (  # G = f D1: the product rule
        lambda x: ea.value_and_grad(nf)(x)[1] * ea.value_and_grad(nf)(x)[0],
        lambda x: (
            _F(x) * _D(1, x),
            np.outer(_D(1, x), _D(1, x)) + _F(x) * _D(2, x),
            np.einsum("ik,j->ijk", _D(2, x), _D(1, x))
            + np.einsum("i,jk->ijk", _D(1, x), _D(2, x))
            + np.einsum("k,ij->ijk", _D(1, x), _D(2, x))
            + _F(x) * _D(3, x),
        ),
    )
    c["jvp"] = (
        lambda x: ea.jvp(nf, (x,), (v,))[1],
        lambda x: (_D(1, x) @ v, _D(2, x) @ v, _D(3, x) @ v),
    )
    c["vjp"] = (lambda x: ea.vjp(nf, x)[1](2.0)[0], lambda x: (2 * _D(1, x), 2 * _D(2, x), 2 * _D(3, x)))
    c["jacfwd"] = (ea.jacfwd(nf), lambda x: (_D(1, x), _D(2, x), _D(3, x)))
    c["jacrev"] = (ea.jacrev(nf), lambda x: (_D(1, x), _D(2, x), _D(3, x)))
    c["hessian"] = (ea.hessian(nf), lambda x: (_D(2, x), _D(3, x), _D(4, x)))
    for m in MODES:
        c[f"hvp {m}"] = (
            lambda x, m=m: ea.hvp(nf, (x,), (v,), mode=m)[0],
            lambda x: (_D(2, x) @ v, _D(3, x) @ v, _D(4, x) @ v),
        )
    c["grad of grad"] = (
        ea.grad(lambda x: ea.sum(ea.grad(nf)(x) * v)),
        lambda x: (_D(2, x) @ v, _D(3, x) @ v, _D(4, x) @ v),
    )
    c["closure"] = (  # the inner function closes over the outer x
        lambda x: ea.grad(lambda y: nf(x + y))(np.zeros(3)),
        lambda x: (_D(1, x), _D(2, x), _D(3, x)),
    )
    c["jvp of a closure"] = (  # G = D1 . (x v)
        lambda x: ea.jvp(lambda y: nf(x * y), (np.ones(3),), (v,))[1],
        lambda x: (
            _D(1, x) @ (x * v),
            _D(2, x) @ (x * v) + _D(1, x) * v,
            np.einsum("ijk,i->jk", _D(3, x), x * v) + _D(2, x) * v[None, :] + _D(2, x) * v[:, None],
        ),
    )
    return c


INNER = _inner_cases()


def _outer_cases():
    t = NT
    o = {}
    # name: (apply to g and x with a weight W shaped like G, expected from (G, dG, ddG, W))
    o["grad"] = (
        lambda g, x, W: ea.grad(lambda z: ea.sum(g(z) * W))(x),
        lambda G, dG, ddG, W: _contract(W, dG),
    )
    o["value_and_grad"] = (
        lambda g, x, W: ea.value_and_grad(lambda z: ea.sum(g(z) * W))(x)[1],
        lambda G, dG, ddG, W: _contract(W, dG),
    )
    o["jvp"] = (lambda g, x, W: ea.jvp(g, (x,), (t,))[1], lambda G, dG, ddG, W: dG @ t)
    o["vjp"] = (lambda g, x, W: ea.vjp(g, x)[1](W)[0], lambda G, dG, ddG, W: _contract(W, dG))
    o["jacfwd"] = (lambda g, x, W: ea.jacfwd(g)(x), lambda G, dG, ddG, W: dG)
    o["jacrev"] = (lambda g, x, W: ea.jacrev(g)(x), lambda G, dG, ddG, W: dG)
    o["hessian"] = (
        lambda g, x, W: ea.hessian(lambda z: ea.sum(g(z) * W))(x),
        lambda G, dG, ddG, W: _contract(W, ddG),
    )
    for m in MODES:
        o[f"hvp {m}"] = (
            lambda g, x, W, m=m: ea.hvp(lambda z: ea.sum(g(z) * W), (x,), (t,), mode=m)[0],
            lambda G, dG, ddG, W: _contract(W, ddG) @ t,
        )
    return o


def _contract(W, T):
    """Contract W (shape S) with the leading S dimensions of T."""
    W = np.asarray(W)
    return np.tensordot(W, T, axes=W.ndim)


OUTER = _outer_cases()


@pytest.mark.parametrize("outer", sorted(OUTER))
@pytest.mark.parametrize("inner", sorted(INNER))
def test_nesting(outer, inner):
    g, closed = INNER[inner]
    apply, expect = OUTER[outer]
    x = NX
    G, dG, ddG = closed(x)
    assert_close(g(x), G, rtol=1e-12)  # the inner transformation alone
    W = np.random.default_rng(3).standard_normal(np.shape(G))
    result = apply(g, x, W)
    assert isinstance(result, np.ndarray), type(result)
    expected = expect(G, dG, ddG, W)
    assert result.shape == np.shape(expected)
    assert_close(result, expected, rtol=1e-10, atol=1e-12)


def test_triple_nesting_of_different_transformations():
    # jvp of (grad of (hvp)) : the fourth-derivative tensor contracted with three vectors
    x = NX
    w = np.array([0.2, 0.1, -0.4])

    def inner(x):
        return ea.sum(ea.hvp(nf, (x,), (NV,))[0] * w)  # <H(x) v, w>: a third derivative

    out = ea.jvp(ea.grad(inner), (x,), (NT,))[1]
    expected = np.einsum("ijkl,j,i,l->k", _D(4, x), NV, w, NT)
    assert_close(out, expected, rtol=1e-10)
    # grad of grad inside jvp: d^2/dy^2 [y^3 x0] at y = 2 is 12 x0, so the jvp along t is 12 t0
    out = ea.jvp(lambda x: ea.grad(ea.grad(lambda y: y**3 * x[0]))(2.0), (x,), (NT,))[1]
    assert_close(out, 12 * NT[0])


# -- higher order through einsum -------------------------------------------------------------


def test_hessian_through_einsum_cubed():
    A = np.random.default_rng(5).standard_normal((2, 3))
    x = np.random.default_rng(6).standard_normal((3, 4))
    f = lambda x: ea.sum(ea.einsum("ij,jk->ik", A, x) ** 3)
    Y = A @ x
    assert_close(ea.grad(f)(x), A.T @ (3 * Y**2), rtol=1e-12)
    h = ea.hessian(f)(x)
    assert h.shape == (3, 4, 3, 4)
    # H[j,k,l,m] = sum_i A_ij 6 Y_ik A_il delta_km
    closed = np.einsum("ij,ik,il,km->jklm", A, 6 * Y, A, np.eye(4))
    assert_close(h, closed, rtol=1e-10, atol=1e-12)
    assert_close(ea.jacrev(ea.grad(f))(x), closed, rtol=1e-10, atol=1e-12)
    # and the hvp in every mode, without the Hessian
    v = np.random.default_rng(8).standard_normal((3, 4))
    for m in MODES:
        assert_close(ea.hvp(f, (x,), (v,), mode=m)[0], np.tensordot(closed, v, axes=2), rtol=1e-10)


def test_third_order_through_einsum_with_repeated_operand():
    x = np.array([0.5, -1.0, 2.0])
    f = lambda x: ea.einsum("i,i,i->", x, x, x)  # sum x^3
    assert_close(ea.grad(f)(x), 3 * x**2)
    assert_close(ea.hessian(f)(x), np.diag(6 * x))
    t = ea.jacfwd(ea.hessian(f))(x)
    expected = np.zeros((3, 3, 3))
    expected[np.arange(3), np.arange(3), np.arange(3)] = 6.0
    assert_close(t, expected)
    # the diagonal of a matrix, to third order: f(M) = sum(diag(M)^3) = einsum("ii,ii,ii->")
    M = M33
    g = lambda m: ea.einsum("ii,ii,ii->", m, m, m)
    assert_close(ea.grad(g)(M), np.diag(3 * np.diag(M) ** 2))
    third = ea.grad(lambda m: ea.sum(ea.hvp(g, (m,), (np.eye(3),))[0]))(M)
    # H(m)[V] = diag(6 m_ii V_ii); with V = I its sum is 6 tr(m), whose gradient is 6 I
    assert_close(third, 6 * np.eye(3))


# -- every array library: forward mode and second order -----------------------------------------


def test_jvp_tangents_of_the_library(lib):
    x, y, v, w = lib_arrays(lib, X3, Y3, V3, W3)
    with lib.lazy():
        out, tan = ea.jvp(f_xy, (x, y), (v, w))
        _, tan2 = ea.jvp(lambda a: ea.sum(a * y), (ea.sum(x),), (0.5,))  # a number as tangent
    e_out, e_tan = ea.jvp(f_xy, (X3, Y3), (V3, W3))
    assert_close(lib_result(lib, out), e_out)
    assert_close(lib_result(lib, tan), e_tan)
    assert_close(lib_result(lib, tan2), 0.5 * Y3.sum())


@pytest.mark.parametrize("mode", ["fwd-over-rev", "rev-over-fwd", "rev-over-rev"])
def test_hvp_three_ways(lib, mode):
    x, y, v, w = lib_arrays(lib, X3, Y3, V3, W3)
    with lib.lazy():
        hx, hy = ea.hvp(f_xy, (x, y), (v, w), mode=mode)
    ex, ey = ea.hvp(f_xy, (X3, Y3), (V3, W3))
    assert_close(lib_result(lib, hx), ex)
    assert_close(lib_result(lib, hy), ey)


def test_jacobians_and_hessian(lib):
    x, y = lib_arrays(lib, X3, Y3)
    with lib.lazy():
        jr = ea.jacrev(g_xy)(x, y)
        jf = ea.jacfwd(g_xy)(x, y)
        h = ea.hessian(f_xy)(x, y)
        hxy = ea.hessian(f_xy, (0, 1))(x, y)
    expected = ea.jacrev(g_xy)(X3, Y3)
    assert_close(lib_result(lib, jr), expected)
    assert_close(lib_result(lib, jf), expected)
    assert_close(lib_result(lib, h), ea.hessian(f_xy)(X3, Y3))
    e_hxy = ea.hessian(f_xy, (0, 1))(X3, Y3)
    for row, e_row in zip(hxy, e_hxy):
        for block, e_block in zip(row, e_row):
            assert_close(lib_result(lib, block), e_block)


def test_float32_kept(lib):
    x, y, v = lib_arrays(lib, X3.astype(np.float32), Y3.astype(np.float32), V3.astype(np.float32))
    with lib.lazy():
        gx = ea.grad(f_xy)(x, y)
        _, tan = ea.jvp(f_xy, (x, y), (v, v))
        h = ea.hessian(f_xy)(x, y)
        jg = compiled(ea.jit(ea.grad(f_xy)))(x, y)
    f32 = np.float32
    assert_close(lib_result(lib, gx, f32), ea.grad(f_xy)(X3, Y3), rtol=1e-4, atol=1e-4)
    assert_close(lib_result(lib, tan, f32), ea.jvp(f_xy, (X3, Y3), (V3, V3))[1], rtol=1e-4, atol=1e-4)
    assert_close(lib_result(lib, h, f32), ea.hessian(f_xy)(X3, Y3), rtol=1e-4, atol=1e-4)
    assert_close(lib_result(lib, jg, f32), ea.grad(f_xy)(X3, Y3), rtol=1e-4, atol=1e-4)


# -- linearize: the JVP at a point, as a function of the tangents ------------------------------


def test_linearize_gives_the_jvp_at_the_point_and_runs_f_once(lib):
    """JAX's linearize: the output, and a function of the tangents equal to `jvp`'s at the point
    (checked against it and against central differences), traceable (vmap over tangents gives
    the Jacobian's columns, jit, grad of it), in the primals' library."""
    calls = []

    def f(x, y):
        calls.append(1)
        return ea.sin(ea.einsum("ij,jk->ik", x, y)) * ea.exp(x[:, :1])

    x, y, v, w = lib_arrays(lib, X3, Y3, V3, W3)
    with lib.lazy():
        out, f_jvp = ea.linearize(f, x, y)
        assert len(calls) == 1
        tan = f_jvp(v, w)
        again = f_jvp(v, w)
    assert len(calls) == 1  # f is not run again: its values are the program's constants
    assert_close(lib_result(lib, out), f(X3, Y3))
    want = ea.jvp(f, (X3, Y3), (V3, W3))[1]
    assert_close(lib_result(lib, tan), want)
    assert_close(lib_result(lib, again), want)
    eps = 1e-6
    central = (f(X3 + eps * V3, Y3 + eps * W3).numpy() - f(X3 - eps * V3, Y3 - eps * W3).numpy()) / (2 * eps)
    assert_close(want, central, rtol=1e-6, atol=1e-8)
    if lib.name == "numpy":
        jac = ea.jacfwd(f)(X3, Y3)
        columns = ea.vmap(lambda e: f_jvp(e, np.zeros_like(Y3)))(np.eye(X3.size).reshape(-1, *X3.shape))
        assert_close(np.moveaxis(columns, 0, -1).reshape(jac.shape), jac)
        assert_close(compiled(ea.jit(f_jvp))(V3, W3), want)
        w_out = np.linspace(0.5, 1.5, want.size).reshape(want.shape)
        # f_jvp is linear: the gradient of <w, f_jvp(t)> in t is the VJP of w, whatever t is
        assert_close(ea.grad(lambda t: ea.sum(f_jvp(t, W3) * w_out))(V3), ea.vjp(f, X3, Y3)[1](w_out)[0])


def test_linearize_stages_only_the_linear_part():
    """The program f_jvp replays holds the primal's values as constants: the tangent's
    multiplies and einsums, none of f's sin, cos or exp (jvp's own program of x and t has
    them). With the call count above, this is the saving over calling jvp each time."""
    f = lambda x: ea.sin(x @ x) * ea.exp(x)
    _, f_jvp = ea.linearize(f, X3)
    ops = [e.op for e in ea.make_graph(f_jvp)(V3).equations]
    assert ops and not {"sin", "cos", "exp"} & set(ops), ops
    both = {e.op for e in ea.make_graph(lambda x, t: ea.jvp(f, (x,), (t,))[1])(X3, V3).equations}
    assert {"sin", "cos", "exp"} <= both


def test_linearize_takes_pytrees_numbers_and_aux_and_checks_the_tangents():
    out, f_jvp, aux = ea.linearize(lambda p, s: (p["a"] * s, ea.max(p["a"])), {"a": X3}, 2.0, has_aux=True)
    assert_close(out, 2.0 * X3)
    assert_close(aux, X3.max())
    assert_close(f_jvp({"a": V3}, 0.5), 2.0 * V3 + 0.5 * X3)
    with pytest.raises(ValueError, match="tangent has shape"):
        f_jvp({"a": V3[:1]}, 0.5)
    with pytest.raises(ValueError, match="does not match the primals'"):
        f_jvp(V3, 0.5)
