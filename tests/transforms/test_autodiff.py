"""Reverse-mode transformations, pytrees, the worked examples, the imperative style,
and the promise never to write into a user's array."""

import numpy as np
import pytest

import einad as ea
from tests.support.api_ops import BINARY, REDUCTIONS, UNARY
from tests.support.numerics import assert_close, numeric_grad, readonly

pytestmark = pytest.mark.usefixtures("jit_mode")

# -- the worked examples ------------------------------------------------------------------------


def test_worked_example_log_plus_product_minus_sine():
    f = lambda x1, x2: ea.log(x1) + x1 * x2 - ea.sin(x2)
    g1, g2 = ea.grad(f, argnums=(0, 1))(2.0, 5.0)
    assert_close(g1, 5.5)
    assert_close(g2, 2 - np.cos(5.0))
    value, (h1, h2) = ea.value_and_grad(f, argnums=(0, 1))(2.0, 5.0)
    assert_close(value, np.log(2.0) + 10.0 - np.sin(5.0))
    assert_close((h1, h2), (5.5, 2 - np.cos(5.0)))


def test_worked_example_log_of_product_times_sine():
    f = lambda x0, x1: ea.log(x0 * x1) * ea.sin(x1)
    g0, g1 = ea.grad(f, argnums=(0, 1))(0.5, 0.75)
    assert round(float(g0), 4) == 1.3633
    assert round(float(g1), 4) == 0.1912
    # the same through backward()
    x = ea.tensor([0.5, 0.75], requires_grad=True)
    y = ea.log(x[0] * x[1]) * ea.sin(x[1])
    y.backward()
    assert isinstance(x.grad, np.ndarray) and x.grad.shape == (2,)
    np.testing.assert_array_equal(np.round(x.grad, 4), [1.3633, 0.1912])
    x0 = ea.tensor(0.5, requires_grad=True)
    x1 = ea.tensor(0.75, requires_grad=True)
    (ea.log(x0 * x1) * ea.sin(x1)).backward()
    assert round(float(x0.grad), 4) == 1.3633 and round(float(x1.grad), 4) == 0.1912


def test_worked_example_inner_product_with_a_sum():
    a, b = np.array([1.0, -2.0, 3.0]), np.array([0.5, 4.0, -1.0])
    f = lambda a, b: ea.dot(a, a + b)
    ga, gb = ea.grad(f, argnums=(0, 1))(a, b)
    assert_close(ga, 2 * a + b)
    assert_close(gb, a)
    ga, gb = ea.grad(lambda a, b: ea.einsum("i,i->", a, a + b), (0, 1))(a, b)
    assert_close(ga, 2 * a + b)
    assert_close(gb, a)


# -- grad and value_and_grad ------------------------------------------------------------------------


def f3(x, y, z):
    return ea.sum(ea.sin(x) * y) + ea.sum(z**2)


X, Y, Z = np.array([0.1, 0.2, 0.3]), np.array([1.0, 2.0, 3.0]), np.array([[1.0, -1.0]])


def test_grad_argnums_int():
    assert_close(ea.grad(f3)(X, Y, Z), np.cos(X) * Y)
    assert_close(ea.grad(f3, argnums=1)(X, Y, Z), np.sin(X))
    assert_close(ea.grad(f3, argnums=-1)(X, Y, Z), 2 * Z)


def test_grad_argnums_tuple_gives_a_tuple():
    g = ea.grad(f3, argnums=(2, 0))(X, Y, Z)
    assert isinstance(g, tuple) and len(g) == 2
    assert_close(g[0], 2 * Z)
    assert_close(g[1], np.cos(X) * Y)
    (g,) = ea.grad(f3, argnums=(1,))(X, Y, Z)
    assert_close(g, np.sin(X))


def test_value_and_grad():
    value, g = ea.value_and_grad(f3, argnums=(0, 1))(X, Y, Z)
    assert isinstance(value, np.ndarray) and value.shape == ()
    assert_close(value, np.sum(np.sin(X) * Y) + np.sum(Z**2))
    assert_close(g[0], np.cos(X) * Y)
    assert_close(g[1], np.sin(X))
    value, g = ea.value_and_grad(f3)(X, Y, Z)
    assert_close(g, np.cos(X) * Y)


def test_has_aux():
    def f(x):
        return ea.sum(x**2), {"double": x * 2, "list": [x, 3.0]}

    g, aux = ea.grad(f, has_aux=True)(X)
    assert_close(g, 2 * X)
    assert isinstance(aux["double"], np.ndarray)
    assert_close(aux["double"], 2 * X)
    assert_close(aux["list"][0], X)
    (value, aux), g = ea.value_and_grad(f, has_aux=True)(X)
    assert_close(value, np.sum(X**2))
    assert_close(aux["double"], 2 * X)
    assert_close(g, 2 * X)
    f2 = lambda x, y: (ea.sum(x * y), x - y)
    (value, aux), (gx, gy) = ea.value_and_grad(f2, (0, 1), has_aux=True)(X, Y)
    assert_close(aux, X - Y)
    assert_close(gx, Y)
    assert_close(gy, X)


def test_gradient_has_the_input_shape_and_dtype():
    for x in (np.float32(1.5), np.array(2.0), np.ones((2, 3), np.float32), np.ones((1, 4, 1))):
        g = ea.grad(lambda x: ea.sum(x * x))(x)
        assert isinstance(g, np.ndarray)
        assert g.shape == np.shape(x) and g.dtype == np.asarray(x).dtype
        assert_close(g, 2 * np.asarray(x))
    g = ea.grad(lambda x: x * x)(3.0)
    assert isinstance(g, np.ndarray) and g.shape == () and g.dtype == np.float64
    assert_close(g, 6.0)


def test_gradient_of_a_tensor_input_is_a_numpy_array():
    g = ea.grad(lambda x: ea.sum(x**3))(ea.tensor([1.0, 2.0]))
    assert isinstance(g, np.ndarray)
    assert_close(g, [3.0, 12.0])


def test_gradient_with_respect_to_a_broadcast_input_keeps_its_shape():
    x = np.array([[1.0], [2.0]])
    g = ea.grad(lambda x: ea.sum(x + np.zeros((2, 3))))(x)
    assert g.shape == (2, 1)
    assert_close(g, [[3.0], [3.0]])


def test_unused_input_gets_a_zero_gradient():
    gx, gy = ea.grad(lambda x, y: ea.sum(x), (0, 1))(np.ones(3), np.ones((2, 2), np.float32))
    assert_close(gx, np.ones(3))
    assert gy.shape == (2, 2) and gy.dtype == np.float32
    assert_close(gy, np.zeros((2, 2)))
    g = ea.grad(lambda x: 3.0)(np.ones(3))
    assert_close(g, np.zeros(3))
    g = ea.grad(lambda x: ea.sum(ea.stop_gradient(x)))(np.ones(2))
    assert_close(g, np.zeros(2))


def test_non_differentiated_arguments_may_be_anything():
    g = ea.grad(lambda x, n, s: ea.sum(x**n) if s == "pow" else None)(np.array([2.0]), 3, "pow")
    assert_close(g, [12.0])


# -- pytrees -------------------------------------------------------------------------------------------


def test_pytree_arguments():
    params = {"w": np.array([[1.0, 2.0], [3.0, 4.0]]), "b": [np.array([0.5, -0.5]), (np.array(2.0),)]}
    x = np.array([[1.0, -1.0], [2.0, 0.5], [0.0, 1.0]])

    def loss(p, x):
        h = ea.tanh(x @ p["w"] + p["b"][0])
        return ea.sum(h * p["b"][1][0])

    g = ea.grad(loss)(params, x)
    assert isinstance(g, dict) and set(g) == {"w", "b"}
    assert isinstance(g["b"], list) and isinstance(g["b"][1], tuple)
    for leaf, ref in ((g["w"], params["w"]), (g["b"][0], params["b"][0]), (g["b"][1][0], params["b"][1][0])):
        assert isinstance(leaf, np.ndarray) and leaf.shape == ref.shape and leaf.dtype == ref.dtype

    def ref_loss(w, b0, s):
        return np.sum(np.tanh(x @ w + b0) * s)

    flat = (params["w"], params["b"][0], params["b"][1][0])
    assert_close(g["w"], numeric_grad(ref_loss, *flat, argnum=0))
    assert_close(g["b"][0], numeric_grad(ref_loss, *flat, argnum=1))
    assert_close(g["b"][1][0], numeric_grad(ref_loss, *flat, argnum=2))


def test_pytree_with_argnums_tuple():
    g = ea.grad(lambda a, b: ea.sum(a[0] * b["k"]) + ea.sum(a[1]), (0, 1))(
        (np.array([1.0, 2.0]), np.array([3.0])), {"k": np.array([5.0, 7.0])}
    )
    assert isinstance(g, tuple) and isinstance(g[0], tuple) and isinstance(g[1], dict)
    assert_close(g[0][0], [5.0, 7.0])
    assert_close(g[0][1], [1.0])
    assert_close(g[1]["k"], [1.0, 2.0])


def test_vjp():
    x, y = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    out, pullback = ea.vjp(lambda x, y: x * ea.sin(y), x, y)
    assert isinstance(out, np.ndarray)
    assert_close(out, x * np.sin(y))
    u = np.array([1.0, -2.0, 0.5])
    gx, gy = pullback(u)
    assert_close(gx, u * np.sin(y))
    assert_close(gy, u * x * np.cos(y))
    gx2, _ = pullback(2 * u)  # the pullback can be called again
    assert_close(gx2, 2 * u * np.sin(y))


def test_vjp_of_a_single_primal_returns_a_one_tuple():
    _, pullback = ea.vjp(lambda x: x**2, np.array([1.0, 3.0]))
    grads = pullback(np.ones(2))
    assert isinstance(grads, tuple) and len(grads) == 1
    assert_close(grads[0], [2.0, 6.0])


def test_vjp_with_pytree_inputs_and_outputs():
    p = {"a": np.array([1.0, 2.0]), "b": [np.array(3.0), np.array([[1.0, 2.0]])]}

    def f(p):
        return {"y": p["a"] * p["b"][0], "z": (ea.sum(p["b"][1]), p["a"] ** 2)}

    out, pullback = ea.vjp(f, p)
    assert set(out) == {"y", "z"} and isinstance(out["z"], tuple)
    assert_close(out["y"], [3.0, 6.0])
    assert_close(out["z"][0], 3.0)
    (g,) = pullback({"y": np.array([1.0, 1.0]), "z": (np.array(2.0), np.array([1.0, 0.0]))})
    assert_close(g["a"], [3.0 + 2.0, 3.0])
    assert_close(g["b"][0], 3.0)
    assert_close(g["b"][1], [[2.0, 2.0]])


def test_vjp_result_that_ignores_an_input():
    _, pullback = ea.vjp(lambda x, y: x * 2.0, np.ones(2), np.ones(3))
    gx, gy = pullback(np.array([1.0, 5.0]))
    assert_close(gx, [2.0, 10.0])
    assert_close(gy, np.zeros(3))


def test_grad_of_grad_nests():
    f = lambda x: ea.sum(x**3)
    x = np.array([1.0, -2.0])
    assert_close(ea.grad(lambda x: ea.sum(ea.grad(f)(x)))(x), 6 * x)
    # perturbation confusion: d/dx [x * d/dy (x + y)] = 1
    g = ea.grad(lambda x: x * ea.grad(lambda y: x + y)(1.0))(2.0)
    assert_close(g, 1.0)


# -- the imperative style ----------------------------------------------------------------------------


def test_backward_accumulates_until_reset():
    x = ea.tensor([1.0, 2.0], requires_grad=True)
    assert x.grad is None
    ea.sum(x * x).backward()
    assert_close(x.grad, [2.0, 4.0])
    ea.sum(x * x).backward()
    assert_close(x.grad, [4.0, 8.0])
    x.grad = None
    ea.sum(x * 3.0).backward()
    assert_close(x.grad, [3.0, 3.0])


def test_backward_needs_a_scalar_or_a_cotangent():
    x = ea.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    with pytest.raises(TypeError, match="scalar"):
        y.backward()
    y.backward(np.array([1.0, -1.0]))
    assert_close(x.grad, [2.0, -4.0])


def test_backward_never_writes_into_the_cotangent():
    x = ea.tensor([1.0, 2.0], requires_grad=True)
    ct = np.array([1.0, 3.0])
    (x * 1.0).backward(ct)
    (x * 1.0).backward(ct)
    np.testing.assert_array_equal(ct, [1.0, 3.0])
    assert_close(x.grad, [2.0, 6.0])
    assert not np.shares_memory(x.grad, ct)
    ro = readonly([1.0, 1.0])
    x.grad = None
    (x * 2.0).backward(ro)
    (x * 2.0).backward(ro)
    assert_close(x.grad, [4.0, 4.0])


def test_grad_is_none_on_tensors_that_do_not_require_it():
    x = ea.tensor([1.0, 2.0], requires_grad=True)
    c = ea.tensor([3.0, 4.0])
    ea.sum(x * c).backward()
    assert c.grad is None
    assert_close(x.grad, [3.0, 4.0])
    assert x.requires_grad and not c.requires_grad


def test_backward_through_shared_subexpressions_and_many_leaves():
    a = ea.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]), requires_grad=True)
    b = ea.tensor(np.array([0.5, -1.0]), requires_grad=True)
    h = a @ b
    loss = ea.sum(h * h) + ea.sum(ea.exp(h))
    loss.backward()
    av, bv = a.numpy(), b.numpy()
    ref = lambda a, b: np.sum((a @ b) ** 2) + np.sum(np.exp(a @ b))
    assert_close(a.grad, numeric_grad(ref, av, bv, argnum=0))
    assert_close(b.grad, numeric_grad(ref, av, bv, argnum=1))


def test_backward_keeps_the_leaf_dtype():
    x = ea.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    ea.sum(x * x).backward()
    assert x.grad.dtype == np.float32
    assert_close(x.grad, [2.0, 4.0])


# -- no operation writes into a user's array -------------------------------------------------------------


def _readonly_cases():
    x = readonly(np.random.default_rng(0).uniform(0.1, 0.9, (2, 3)))
    y = readonly(np.random.default_rng(1).uniform(0.1, 0.9, (3,)))
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


def test_no_operation_writes_into_its_inputs():
    x, y, cases = _readonly_cases()
    for name, f in cases.items():
        before = (x.copy(), y.copy())
        out = f(x, y)
        ea.grad(lambda a, b, f=f: ea.sum(f(a, b)), (0, 1))(x, y)
        value, pullback = ea.vjp(f, x, y)
        pullback(readonly(np.ones(np.shape(value))))
        t, s = ea.tensor(x, requires_grad=True), ea.tensor(y, requires_grad=True)
        ea.sum(f(t, s) * 1.0).backward()
        np.testing.assert_array_equal(x, before[0], err_msg=name)
        np.testing.assert_array_equal(y, before[1], err_msg=name)
        assert np.all(np.isfinite(np.asarray(out))), name


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


def test_returned_gradients_are_writable_arrays():
    g = ea.grad(lambda x: ea.sum(ea.broadcast_to(x, (3, 2))))(np.ones(2))
    g[0] = 5.0  # a gradient is the caller's to keep
    assert g[0] == 5.0


def test_a_gradient_equal_to_a_captured_array_is_a_fresh_copy():
    """d/dx sum(x * G) is G itself: einad passes it on without multiplying by ones,
    but the caller still gets an array of their own, never a view of G."""
    G = np.arange(4.0)
    g = ea.grad(lambda x: ea.sum(x * G))(np.ones(4))
    np.testing.assert_array_equal(g, G)
    assert g.flags.writeable and not np.shares_memory(g, G)
    g[0] = 99.0
    assert G[0] == 0.0


def test_jacobians_of_complex_functions_run_batched_not_per_row():
    """conj and real have batching rules: no per-row loop (which would index row by row)."""
    z = np.array([3 + 4j, 1 - 1j, -2 + 0.5j, 1j, 2.0 + 0j, -1 - 3j])
    # jacfwd pushes a batch of complex tangents through abs's JVP, which takes their real part
    graph = ea.make_graph(ea.jacfwd(lambda z: ea.abs(z)))(z)
    assert "getitem" not in [e.op for e in graph.equations]
    np.testing.assert_allclose(ea.jacrev(ea.abs)(z), np.diag(np.conj(z) / np.abs(z)))
