"""Every transformation, and `ea.jit`, on every array library (issue 10).

Each test runs on the `lib` fixture's libraries (numpy, array-api-strict, torch on the CPU,
dask.array) with small functions built from `ea.einsum`, `ea.sum`, ``*`` and ``+``, and
compares with what the same transformation gives on numpy arrays. Results must be arrays of
the inputs' library (`lib.owns`), keep float32, and on dask stay lazy: no transformation
computes anything (`lib.lazy()`), and results are `dask.array.Array` until `.compute()`.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import einad as ea
from einad.arrays import np_dtype
from tests.support.arraylibs import load
from tests.support.numerics import assert_close, numeric_grad

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 3))
Y = RNG.standard_normal((3, 3))
V = RNG.standard_normal((3, 3))
W = RNG.standard_normal((3, 3))


def f(x, y):
    """A scalar of two matrices: a contraction, products and sums only.

    einad's values come first in products: array-api-strict's operators raise TypeError on
    a foreign operand instead of deferring to it, so ``strict_array * tensor`` cannot work.
    """
    return ea.sum(ea.einsum("ij,jk->ik", x, y) * x) + ea.sum(ea.einsum("ij->ji", y) * x * x)


def g(x, y):
    """A matrix-valued function of x (y fixed)."""
    return ea.einsum("ij,jk->ik", x, y) * x


def _np(lib, r, dtype=np.float64):
    """`r`, checked to be an array of `lib` (lazy on dask) with `dtype`, as numpy."""
    assert lib.owns(r), f"{type(r).__module__}.{type(r).__name__} is not a {lib.name} array"
    if lib.name == "dask":
        import dask.array

        assert isinstance(r, dask.array.Array)
    assert np_dtype(r.dtype) == dtype
    return lib.numpy(r)


def _both(lib, *arrays):
    return [lib.asarray(a) for a in arrays]


# -- reverse mode --------------------------------------------------------------------------------


def test_grad_and_value_and_grad(lib):
    x, y = _both(lib, X, Y)
    with lib.lazy():
        gx, gy = ea.grad(f, (0, 1))(x, y)
        value, g0 = ea.value_and_grad(f)(x, y)
    ex, ey = ea.grad(f, (0, 1))(X, Y)
    assert_close(_np(lib, gx), ex)
    assert_close(_np(lib, gy), ey)
    assert_close(_np(lib, g0), ex)
    assert_close(_np(lib, value), f(X, Y).numpy())
    assert_close(ex, numeric_grad(lambda a, b: f(a, b).numpy(), X, Y))


def test_vjp_cotangent_of_the_library_and_as_a_number(lib):
    x, y = _both(lib, X, Y)
    with lib.lazy():
        out, pull = ea.vjp(lambda a: g(a, y), x)
        (ct,) = pull(lib.asarray(V))
        _, pull_scalar = ea.vjp(lambda a: f(a, y), x)
        (ct_number,) = pull_scalar(2.0)  # a number: made an array of the output's library
    expected_out, expected_pull = ea.vjp(lambda a: g(a, Y), X)
    assert_close(_np(lib, out), expected_out)
    assert_close(_np(lib, ct), expected_pull(V)[0])
    assert_close(_np(lib, ct_number), 2.0 * ea.grad(f)(X, Y))


def test_grad_of_grad(lib):
    x, y = _both(lib, X, Y)

    def inner(a):
        return ea.sum(ea.grad(f)(a, y) * a)

    with lib.lazy():
        gg = ea.grad(inner)(x)
    assert_close(_np(lib, gg), ea.grad(lambda a: ea.sum(ea.grad(f)(a, Y) * a))(X))


# -- forward mode and second order ---------------------------------------------------------------


def test_jvp_tangents_of_the_library(lib):
    x, y, v, w = _both(lib, X, Y, V, W)
    with lib.lazy():
        out, tan = ea.jvp(f, (x, y), (v, w))
        _, tan2 = ea.jvp(lambda a: ea.sum(a * y), (ea.sum(x),), (0.5,))  # a number as tangent
    e_out, e_tan = ea.jvp(f, (X, Y), (V, W))
    assert_close(_np(lib, out), e_out)
    assert_close(_np(lib, tan), e_tan)
    assert_close(_np(lib, tan2), 0.5 * Y.sum())


@pytest.mark.parametrize("mode", ["fwd-over-rev", "rev-over-fwd", "rev-over-rev"])
def test_hvp_three_ways(lib, mode):
    x, y, v, w = _both(lib, X, Y, V, W)
    with lib.lazy():
        hx, hy = ea.hvp(f, (x, y), (v, w), mode=mode)
    ex, ey = ea.hvp(f, (X, Y), (V, W))
    assert_close(_np(lib, hx), ex)
    assert_close(_np(lib, hy), ey)


def test_jacobians_and_hessian(lib):
    x, y = _both(lib, X, Y)
    with lib.lazy():
        jr = ea.jacrev(g)(x, y)
        jf = ea.jacfwd(g)(x, y)
        h = ea.hessian(f)(x, y)
        hxy = ea.hessian(f, (0, 1))(x, y)
    expected = ea.jacrev(g)(X, Y)
    assert_close(_np(lib, jr), expected)
    assert_close(_np(lib, jf), expected)
    assert_close(_np(lib, h), ea.hessian(f)(X, Y))
    e_hxy = ea.hessian(f, (0, 1))(X, Y)
    for row, e_row in zip(hxy, e_hxy):
        for block, e_block in zip(row, e_row):
            assert_close(_np(lib, block), e_block)


def test_float32_kept(lib):
    x, y, v = _both(lib, X.astype(np.float32), Y.astype(np.float32), V.astype(np.float32))
    with lib.lazy():
        gx = ea.grad(f)(x, y)
        _, tan = ea.jvp(f, (x, y), (v, v))
        h = ea.hessian(f)(x, y)
        jg = ea.jit(ea.grad(f))(x, y)
    f32 = np.float32
    assert_close(_np(lib, gx, f32), ea.grad(f)(X, Y), rtol=1e-4, atol=1e-4)
    assert_close(_np(lib, tan, f32), ea.jvp(f, (X, Y), (V, V))[1], rtol=1e-4, atol=1e-4)
    assert_close(_np(lib, h, f32), ea.hessian(f)(X, Y), rtol=1e-4, atol=1e-4)
    assert_close(_np(lib, jg, f32), ea.grad(f)(X, Y), rtol=1e-4, atol=1e-4)


# -- imperative ------------------------------------------------------------------------------------


def test_imperative_backward_fills_grad_in_the_library(lib):
    x, y = _both(lib, X, Y)
    w = ea.tensor(x, requires_grad=True)
    with lib.lazy():
        loss = f(w, y)
        loss.backward()
        loss2 = f(w, y)
        loss2.backward()  # accumulates
    assert_close(_np(lib, w.grad), 2 * ea.grad(f)(X, Y))
    assert w.numpy().shape == (3, 3) and isinstance(w.numpy(), np.ndarray)
    assert loss.item() == pytest.approx(float(f(X, Y).numpy()))
    w.grad = None
    w.grad = V.tolist()  # numbers become an array of the tensor's library
    assert_close(_np(lib, w.grad), V)
    out = ea.tensor(x, requires_grad=True)
    g(out, y).backward(lib.asarray(V))
    assert_close(_np(lib, out.grad), ea.vjp(lambda a: g(a, Y), X)[1](V)[0])
    s = ea.tensor(x, requires_grad=True)
    f(s, y).backward(2.0)  # a number as cotangent
    assert_close(_np(lib, s.grad), 2.0 * ea.grad(f)(X, Y))


# -- jit ---------------------------------------------------------------------------------------------


def test_jit_value_and_grad_run_on_the_library(lib):
    x, y = _both(lib, X, Y)
    jf = ea.jit(f)
    jg = ea.jit(ea.grad(f, (0, 1)))
    with lib.lazy():
        value = jf(x, y)
        gx, gy = jg(x, y)
        again = jf(x, y)  # the compiled program, replayed
        outer = ea.grad(jf)(x, y)  # the program interpreted under grad
    assert jf.cache_size() == 1
    ex, ey = ea.grad(f, (0, 1))(X, Y)
    assert_close(_np(lib, value), f(X, Y).numpy())
    assert_close(_np(lib, again), f(X, Y).numpy())
    assert_close(_np(lib, gx), ex)
    assert_close(_np(lib, gy), ey)
    assert_close(_np(lib, outer), ex)


def test_jit_retraces_when_the_library_changes(lib):
    jf = ea.jit(ea.grad(f))
    first = jf(X, Y)
    assert isinstance(first, np.ndarray)
    x, y = _both(lib, X, Y)
    second = jf(x, y)
    assert_close(_np(lib, second), first)
    assert jf.cache_size() == (1 if lib.name == "numpy" else 2)
    assert isinstance(jf(X, Y), np.ndarray)  # numpy's program is still there


def test_jit_program_with_numpy_literals_and_constants(lib):
    """Literals numpy scalars and constants a pass makes are converted to the library once."""
    x, y = _both(lib, X, Y)

    def h(a, b):
        return ea.sum(ea.einsum("ij,jk->ik", a, b) * 2.0 + a * 1.0 + 0.0 * b)

    jh = ea.jit(ea.value_and_grad(h))
    with lib.lazy():
        value, grad = jh(x, y)
    e_value, e_grad = ea.value_and_grad(h)(X, Y)
    assert_close(_np(lib, value), e_value)
    assert_close(_np(lib, grad), e_grad)


# -- vmap, checkpoint, custom rules ----------------------------------------------------------------


def _row_loss(a, b):
    return ea.sum(ea.einsum("i,ij->j", a, b) * a)


def test_vmap(lib):
    x, y = _both(lib, X, Y)
    with lib.lazy():
        rows = ea.vmap(lambda a: ea.einsum("i,ij->j", a, y) * a)(x)
        per_example = ea.vmap(ea.grad(_row_loss), in_axes=(0, None))(x, y)
    assert_close(_np(lib, rows), ea.vmap(lambda a: ea.einsum("i,ij->j", a, Y) * a)(X))
    expected = ea.vmap(ea.grad(_row_loss), in_axes=(0, None))(X, Y)
    assert_close(_np(lib, per_example), expected)


def test_checkpoint(lib):
    x, y = _both(lib, X, Y)

    def loss(a, b):
        return ea.sum(ea.checkpoint(g)(a, b) * a)

    with lib.lazy():
        gx = ea.grad(loss)(x, y)
    assert_close(_np(lib, gx), ea.grad(loss)(X, Y))
    assert_close(ea.grad(loss)(X, Y), ea.grad(lambda a, b: ea.sum(g(a, b) * a))(X, Y))


def test_custom_vjp(lib):
    x, y = _both(lib, X, Y)

    @ea.custom_vjp
    def scaled(a):
        return a * 2.0

    def fwd(a):
        return scaled(a), None

    def bwd(res, ct):
        return (ct * 3.0,)  # deliberately not 2: the rule, not the function, is differentiated

    scaled.defvjp(fwd, bwd)

    def loss(a):
        return ea.sum(ea.einsum("ij,jk->ik", scaled(a), y))

    with lib.lazy():
        gx = ea.grad(loss)(x)
    expected = ea.grad(lambda a: ea.sum(ea.einsum("ij,jk->ik", scaled(a), Y)))(X)
    assert_close(_np(lib, gx), expected)
    assert_close(expected, 3.0 * np.broadcast_to(Y.sum(axis=1), (3, 3)))


def test_gradcheck_on_library_arrays(lib):
    x, y = _both(lib, X, Y)
    assert ea.gradcheck(g, x, y, directions=1)
    with pytest.raises(ea.GradcheckError, match="argument 0"):
        ea.gradcheck(lambda a: ea.einsum("ij,jk->ik", ea.stop_gradient(a), y) * a, x, directions=1)


# -- two libraries in one call ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["array_api_strict", "torch", "dask"])
@pytest.mark.parametrize("argnums", [0, (0, 1)])
def test_mixing_libraries_is_a_type_error_naming_both(name, argnums):
    lib = load(name)
    if lib is None:
        pytest.skip(f"{name} is not installed (pip install einad[test] brings it)")
    x = lib.asarray(X)
    with pytest.raises(TypeError, match=rf"(?s)(numpy.*{name}|{name}.*numpy)"):
        ea.grad(f, argnums)(x, Y)
    with pytest.raises(TypeError, match=rf"(?s)(numpy.*{name}|{name}.*numpy)"):
        ea.jvp(f, (x, lib.asarray(Y)), (V, lib.asarray(W)))  # a numpy tangent for a library primal
    with pytest.raises(TypeError, match=rf"(?s)(numpy.*{name}|{name}.*numpy)"):
        ea.jit(f)(x, Y)


# -- torch: against torch.autograd and torch.func ---------------------------------------------------


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
    x = torch.tensor(X, requires_grad=True)
    y = torch.tensor(Y, requires_grad=True)
    gx, gy = torch.autograd.grad(_f_torch(x, y), (x, y))
    ours = ea.grad(f, (0, 1))(x.detach(), y.detach())
    torch.testing.assert_close(ours[0], gx)
    torch.testing.assert_close(ours[1], gy)
    hess = torch.autograd.functional.hessian(lambda a: _f_torch(a, y.detach()), x.detach())
    torch.testing.assert_close(ea.hessian(f)(x.detach(), y.detach()), hess)
    v = torch.tensor(V)
    _, hv = torch.autograd.functional.hvp(lambda a: _f_torch(a, y.detach()), x.detach(), v)
    for mode in ("fwd-over-rev", "rev-over-fwd", "rev-over-rev"):
        (ours_hv,) = ea.hvp(lambda a: f(a, y.detach()), (x.detach(),), (v,), mode=mode)
        torch.testing.assert_close(ours_hv, hv)
    # imperative: einad's .grad against torch's own .grad on the same leaves
    w = ea.tensor(x.detach(), requires_grad=True)
    f(w, y.detach()).backward()
    torch.testing.assert_close(w.grad, gx)


def test_torch_float32_gradient_matches_torch_autograd():
    torch = _torch()
    x = torch.tensor(X, dtype=torch.float32, requires_grad=True)
    y = torch.tensor(Y, dtype=torch.float32)
    (gx,) = torch.autograd.grad(_f_torch(x, y), (x,))
    ours = ea.jit(ea.grad(f))(x.detach(), y)
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, gx)


# -- dask on a distributed cluster --------------------------------------------------------------------


@pytest.mark.skipif(
    importlib.util.find_spec("distributed") is None, reason="dask.distributed is not installed"
)
def test_dask_gradient_computed_on_a_distributed_cluster():
    da = pytest.importorskip("dask.array")
    from dask.distributed import Client, LocalCluster

    a = RNG.standard_normal((8, 6))
    b = RNG.standard_normal((6, 4))
    x = da.from_array(a, chunks=(4, 3))
    y = da.from_array(b, chunks=(3, 2))

    def loss(p, q):
        return ea.sum(ea.einsum("ij,jk->ik", p, q) * ea.einsum("ij,jk->ik", p, q))

    gx, gy = ea.grad(loss, (0, 1))(x, y)
    assert isinstance(gx, da.Array) and isinstance(gy, da.Array)
    ex, ey = ea.grad(loss, (0, 1))(a, b)
    with (
        LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster,
        Client(cluster) as client,
    ):
        got_x, got_y = client.compute([gx, gy], sync=True)
    assert_close(got_x, ex)
    assert_close(got_y, ey)
