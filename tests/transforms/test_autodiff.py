"""einad.transforms.autodiff, reverse mode: grad, value_and_grad and vjp.

The worked examples, argnums and has_aux, gradients shaped and typed like their inputs,
pytree arguments and outputs, grad of grad; then the same transformations on every array
library (numpy, array-api-strict, torch, dask: results of the inputs' library, dask kept
lazy), checked against torch.autograd, on a dask.distributed cluster, and refusing to mix
two libraries in one call. Every test runs twice (the `jit_mode`
mark): eagerly and with every transformation jitted, on every library.

Tensor.backward and the imperative style are in test_backward.py; forward mode, Jacobians,
Hessians and nesting in test_autodiff_modes.py.
"""

import importlib.util

import numpy as np
import pytest

import einad as ea
from einad.pytree import TreeDef
from tests.support.arraylibs import load
from tests.support.functions import V3, W3, X3, Y3, f_xy, g_xy, lib_arrays, lib_result
from tests.support.jitting import compiled
from tests.support.numerics import assert_close, numeric_grad

pytestmark = pytest.mark.usefixtures("jit_mode")  # eager, and with every transformation jitted

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


def test_matmul_gradient_is_the_permuted_einsum():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    ga, gb = ea.grad(lambda a, b: ea.sum(ea.einsum("ij,jk->ik", a, b) ** 2), (0, 1))(a, b)
    g = 2 * a @ b
    np.testing.assert_allclose(ga, np.einsum("ik,jk->ij", g, b))
    np.testing.assert_allclose(gb, np.einsum("ij,ik->jk", a, g))


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


@pytest.mark.parametrize("argnums", [(0, 0), (1, -2), [2, 2]])
def test_argnums_naming_an_argument_twice_is_a_value_error_not_a_zero_gradient(argnums):
    """`argnums=(0, 0)` boxed argument 0 twice, the second box taking the first one's place, so
    the first gradient came back zero (and a Hessian all zeros); torch.func refuses repeats."""
    for transform in (ea.grad, ea.value_and_grad, ea.jacrev, ea.jacfwd, ea.hessian):
        with pytest.raises(ValueError, match="twice"):
            transform(f3, argnums=argnums)(X, Y, Z)


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


def test_has_aux_in_vjp_jvp_and_the_jacobians_as_in_jax():
    x, y = np.array([0.3, -1.2, 2.0]), np.array([1.5, 0.5, -0.25])

    def f(a, b):  # (output, aux): the aux a pytree holding an array and a Python number
        return ea.sin(a) * b, {"a2": a**2, "n": 7}

    out, pull, aux = ea.vjp(f, x, y, has_aux=True)
    assert_close(out, np.sin(x) * y)
    assert_close(aux["a2"], x**2)
    assert aux["n"] == 7 and isinstance(aux["a2"], np.ndarray)
    ga, gb = pull(np.ones(3))
    assert_close(ga, np.cos(x) * y)
    assert_close(gb, np.sin(x))
    out, tangent, aux = ea.jvp(f, (x, y), (np.ones(3), np.zeros(3)), has_aux=True)
    assert_close(tangent, np.cos(x) * y)
    assert_close(aux["a2"], x**2)
    for jac in (ea.jacrev, ea.jacfwd):
        (ja, jb), aux = jac(f, argnums=(0, 1), has_aux=True)(x, y)
        assert_close(ja, np.diag(np.cos(x) * y))
        assert_close(jb, np.diag(np.sin(x)))
        assert_close(aux["a2"], x**2)
        assert aux["n"] == 7 and isinstance(aux["a2"], np.ndarray)
        # inside another transformation the aux is that transformation's value
        jac_aux = ea.jit(lambda a, b, jac=jac: jac(lambda u: (ea.exp(u) * b, ea.sum(u * b)), has_aux=True)(a))
        j, aux = jac_aux(x, y)
        assert_close(j, np.diag(np.exp(x) * y))
        assert_close(aux, np.sum(x * y))
    h, aux = ea.hessian(lambda a: (ea.sum(a**3), a * 2), has_aux=True)(x)
    assert_close(h, np.diag(6 * x))
    assert_close(aux, 2 * x)
    # an input without elements: the aux comes from the one call of f
    j, aux = ea.jacfwd(lambda a: (a * 2, ea.sum(a) + 1.0), has_aux=True)(np.zeros(0))
    assert j.shape == (0, 0) and aux == 1.0
    with pytest.raises(TypeError, match="pair"):
        ea.vjp(lambda a: a, x, has_aux=True)


def test_holomorphic_gradient_is_the_complex_derivative():
    z = np.array([1 + 1j, 2 - 0.5j])
    assert_close(ea.grad(lambda a: ea.sum(a**2), holomorphic=True)(z), 2 * z)
    (value, g) = ea.value_and_grad(lambda a: ea.sum(ea.exp(a)), holomorphic=True)(z)
    assert_close(value, np.sum(np.exp(z)))
    assert_close(g, np.exp(z))
    assert_close(ea.jit(ea.grad(lambda a: ea.sum(ea.sin(a)), holomorphic=True))(z), np.cos(z))
    assert_close(ea.hessian(lambda a: ea.sum(a**3), holomorphic=True)(z), np.diag(6 * z))
    assert_close(ea.jacfwd(lambda a: a**2, holomorphic=True)(z), np.diag(2 * z))
    assert_close(ea.jacrev(lambda a: a**2, holomorphic=True)(z), np.diag(2 * z))
    with pytest.raises(TypeError, match="holomorphic=True"):  # the message says where to go
        ea.grad(lambda a: ea.sum(a**2))(z)
    with pytest.raises(TypeError, match="needs complex inputs"):
        ea.grad(lambda a: ea.sum(a**2) * 1j, holomorphic=True)(z.real)
    with pytest.raises(TypeError, match="needs complex outputs"):
        ea.grad(lambda a: ea.sum(ea.abs(a)), holomorphic=True)(z)
    for jac in (ea.jacrev, ea.jacfwd):
        with pytest.raises(TypeError, match="needs complex outputs"):
            jac(lambda a: ea.real(a), holomorphic=True)(z)


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
    g = ea.grad(lambda x, n: ea.sum(x**n), argnums=0)(np.array([1.0, 2.0]), 3)
    np.testing.assert_array_equal(g, [3.0, 12.0])


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
    # perturbation confusion: test_autodiff_modes.py, test_perturbation_confusion_reverse


# -- every array library -------------------------------------------------------------------------


def test_grad_and_value_and_grad(lib):
    x, y = lib_arrays(lib, X3, Y3)
    with lib.lazy():
        gx, gy = ea.grad(f_xy, (0, 1))(x, y)
        value, g0 = ea.value_and_grad(f_xy)(x, y)
    ex, ey = ea.grad(f_xy, (0, 1))(X3, Y3)
    assert_close(lib_result(lib, gx), ex)
    assert_close(lib_result(lib, gy), ey)
    assert_close(lib_result(lib, g0), ex)
    assert_close(lib_result(lib, value), f_xy(X3, Y3).numpy())
    assert_close(ex, numeric_grad(lambda a, b: f_xy(a, b).numpy(), X3, Y3))


def test_vjp_cotangent_of_the_library_and_as_a_number(lib):
    x, y = lib_arrays(lib, X3, Y3)
    with lib.lazy():
        out, pull = ea.vjp(lambda a: g_xy(a, y), x)
        (ct,) = pull(lib.asarray(V3))
        _, pull_scalar = ea.vjp(lambda a: f_xy(a, y), x)
        (ct_number,) = pull_scalar(2.0)  # a number: made an array of the output's library
    expected_out, expected_pull = ea.vjp(lambda a: g_xy(a, Y3), X3)
    assert_close(lib_result(lib, out), expected_out)
    assert_close(lib_result(lib, ct), expected_pull(V3)[0])
    assert_close(lib_result(lib, ct_number), 2.0 * ea.grad(f_xy)(X3, Y3))


def test_grad_of_grad(lib):
    x, y = lib_arrays(lib, X3, Y3)

    def inner(a):
        return ea.sum(ea.grad(f_xy)(a, y) * a)

    with lib.lazy():
        gg = ea.grad(inner)(x)
    assert_close(lib_result(lib, gg), ea.grad(lambda a: ea.sum(ea.grad(f_xy)(a, Y3) * a))(X3))


def test_differentiating_a_number_next_to_a_library_array(lib, jit_mode):
    """A Python number belongs to no library: ``grad(f)(2.0, torch_x)`` differentiates in the
    library of the other argument. The number was boxed as a 0-d numpy array, a second library
    next to torch, array-api-strict or dask: grad, jvp, vjp, jacrev, jacfwd and hessian raised
    "arrays of two libraries". Closed form: f(s, v) = sum(sin(s v)), df/ds = sum(v cos(s v)).
    (Forward mode is checked eagerly: under jit the number is a weakly typed staged scalar.)"""
    x = lib.asarray(X3)
    s = 0.5

    def f(s, v):
        return ea.sum(ea.sin(s * v))

    d_s = np.sum(X3 * np.cos(s * X3))
    with lib.lazy():
        g_s, g_x = ea.grad(f, (0, 1))(s, x)
        (ct_s, _) = ea.vjp(f, s, x)[1](1.0)
        got = [g_s, ea.grad(f)(np.float64(s), x), ct_s, ea.jacrev(f)(s, x)]
        if jit_mode == "eager":
            got += [ea.jvp(f, (s, x), (1.0, lib.asarray(np.zeros_like(X3))))[1], ea.jacfwd(f)(s, x)]
            hess = ea.hessian(f)(s, x)
    if jit_mode == "eager":
        assert_close(lib_result(lib, hess), -np.sum(X3**2 * np.sin(s * X3)))
    for r in got:
        assert_close(lib_result(lib, r), d_s)
    assert_close(lib_result(lib, g_x), s * np.cos(s * X3))


# -- two libraries in one call ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["array_api_strict", "torch", "dask"])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_mixing_libraries_is_a_type_error_naming_both(name, argnums):
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed (pip install einad[test] brings it)")
    x = lib.asarray(X3)
    with pytest.raises(TypeError, match=rf"(?s)(numpy.*{name}|{name}.*numpy)"):
        ea.grad(f_xy, argnums)(x, Y3)
    with pytest.raises(TypeError, match=rf"(?s)(numpy.*{name}|{name}.*numpy)"):
        ea.jvp(f_xy, (x, lib.asarray(Y3)), (V3, lib.asarray(W3)))  # a numpy tangent for a library primal
    with pytest.raises(TypeError, match=rf"(?s)(numpy.*{name}|{name}.*numpy)"):
        ea.jit(f_xy)(x, Y3)


# -- torch: against torch.autograd --------------------------------------------------------------------


def _torch():
    lib = load("torch")
    if lib is None:
        pytest.skip("torch is not installed (pip install einad[test] brings it)")
    return lib.module


def _f_torch(x, y):
    return ((x @ y) * x).sum() + (x * x * y.T).sum()


def test_torch_gradient_hessian_hvp_match_torch_autograd():  # torch.autograd, not torch.func: its
    # forward mode loads TorchScript decompositions, which warn (and warnings are errors here)
    torch = _torch()
    x = torch.tensor(X3, requires_grad=True)
    y = torch.tensor(Y3, requires_grad=True)
    gx, gy = torch.autograd.grad(_f_torch(x, y), (x, y))
    ours = ea.grad(f_xy, (0, 1))(x.detach(), y.detach())
    torch.testing.assert_close(ours[0], gx)
    torch.testing.assert_close(ours[1], gy)
    hess = torch.autograd.functional.hessian(lambda a: _f_torch(a, y.detach()), x.detach())
    torch.testing.assert_close(ea.hessian(f_xy)(x.detach(), y.detach()), hess)
    v = torch.tensor(V3)
    _, hv = torch.autograd.functional.hvp(lambda a: _f_torch(a, y.detach()), x.detach(), v)
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        (ours_hv,) = ea.hvp(lambda a: f_xy(a, y.detach()), (x.detach(),), (v,), mode=mode)
        torch.testing.assert_close(ours_hv, hv)
    # imperative: einad's .grad against torch's own .grad on the same leaves
    w = ea.tensor(x.detach(), requires_grad=True)
    f_xy(w, y.detach()).backward()
    torch.testing.assert_close(w.grad, gx)


def test_torch_float32_gradient_matches_torch_autograd():
    torch = _torch()
    x = torch.tensor(X3, dtype=torch.float32, requires_grad=True)
    y = torch.tensor(Y3, dtype=torch.float32)
    (gx,) = torch.autograd.grad(_f_torch(x, y), (x,))
    ours = compiled(ea.jit(ea.grad(f_xy)))(x.detach(), y)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, gx)


# -- dask on a distributed cluster --------------------------------------------------------------------


@pytest.mark.skipif(
    importlib.util.find_spec("distributed") is None, reason="dask.distributed is not installed"
)
def test_dask_gradient_computed_on_a_distributed_cluster():
    da = pytest.importorskip("dask.array")
    from dask.distributed import Client, LocalCluster

    rng = np.random.default_rng(8)
    a = rng.standard_normal((8, 6))
    b = rng.standard_normal((6, 4))
    x = da.from_array(a, chunks=(4, 3))
    y = da.from_array(b, chunks=(3, 2))

    def loss(p, q):
        return ea.sum(ea.einsum("ij,jk->ik", p, q) * ea.einsum("ij,jk->ik", p, q))

    gx, gy = ea.grad(loss, (0, 1))(x, y)
    assert isinstance(gx, da.Array) and isinstance(gy, da.Array)
    ex, ey = ea.grad(loss, (0, 1))(a, b)
    with (
        LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=":0") as cluster,
        Client(cluster) as client,
    ):
        got_x, got_y = client.compute([gx, gy], sync=True)
    assert_close(got_x, ex)
    assert_close(got_y, ey)


def test_many_arguments_are_named_only_for_an_error(monkeypatch):
    """grad of a function of many arguments names none of them unless one is refused: naming
    each (its pytree path) cost a pass over all the others, quadratic in their number (a
    110-tensor network's gradient spent a third of its time there)."""
    calls = []
    real = TreeDef.leaf_paths
    monkeypatch.setattr(
        TreeDef, "leaf_paths", lambda self, prefix="": calls.append(prefix) or real(self, prefix)
    )
    xs = [np.full(2, float(i)) for i in range(60)]
    grads = ea.grad(lambda *a: sum(ea.sum(x * x) for x in a), argnums=tuple(range(60)))(*xs)
    assert calls == []
    assert_close(grads[7], 2 * xs[7])
    with pytest.raises(TypeError, match=r"argument 59\b.*int64"):
        ea.grad(lambda *a: ea.sum(a[0]), argnums=tuple(range(60)))(*xs[:59], np.arange(2))
