"""einad.arrays on GPU devices: transformations on PyTorch CUDA tensors and CuPy arrays (and
`arrays.cast`, the one cast of a gradient to its leaf's dtype, on every library).

Gradients, Hessians, `.grad` and `ea.jit` results must be arrays of the inputs' library
on the inputs' device. Skipped, with the reason, where there is no CUDA device or no CuPy.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

import einad as ea
from einad.arrays import device, to_numpy
from tests.support.numerics import assert_close

RNG = np.random.default_rng(11)
X = RNG.standard_normal((4, 3))
Y = RNG.standard_normal((3, 5))


def f(x, y):
    return ea.sum(ea.einsum("ij,jk->ik", x, y) * ea.einsum("ij,jk->ik", x, y))


def _cuda_torch():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (torch.cuda.is_available() is False)")
    return torch


def _cupy():
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("cupy is not installed")
    import cupy

    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        count = 0
    if count == 0:
        pytest.skip("no CUDA device for CuPy")
    return cupy


def test_torch_cuda_grad_hessian_jit_stay_on_the_device():
    torch = _cuda_torch()
    dev = torch.device("cuda", 0)
    x = torch.tensor(X, device=dev)
    y = torch.tensor(Y, device=dev)
    ex, ey = ea.grad(f, (0, 1))(X, Y)
    gx, gy = ea.grad(f, (0, 1))(x, y)
    jx = ea.jit(ea.grad(f))(x, y)
    h = ea.hessian(f)(x, y)
    for r in (gx, gy, jx, h):
        assert isinstance(r, torch.Tensor)
        assert r.device == x.device
        assert r.dtype == torch.float64
    assert_close(to_numpy(gx), ex)
    assert_close(to_numpy(gy), ey)
    assert_close(to_numpy(jx), ex)
    assert_close(to_numpy(h), ea.hessian(f)(X, Y))
    # against torch.autograd on the same device
    xr = x.clone().requires_grad_()
    (tx,) = torch.autograd.grad(((xr @ y) ** 2).sum(), (xr,))
    torch.testing.assert_close(gx, tx)
    # imperative .grad on the device
    w = ea.tensor(x, requires_grad=True)
    f(w, y).backward()
    assert w.grad.device == x.device
    torch.testing.assert_close(w.grad, tx)


def test_torch_cuda_float32_and_jit_cache_per_device():
    torch = _cuda_torch()
    x = torch.tensor(X, dtype=torch.float32, device="cuda")
    y = torch.tensor(Y, dtype=torch.float32, device="cuda")
    jg = ea.jit(ea.grad(f))
    on_gpu = jg(x, y)
    on_cpu = jg(x.cpu(), y.cpu())
    assert on_gpu.dtype == torch.float32 and on_gpu.device == x.device
    assert on_cpu.device.type == "cpu"
    assert jg.cache_size() == 2  # one program per device
    torch.testing.assert_close(on_gpu.cpu(), on_cpu)


def test_cupy_grad_jit_on_the_device():
    cupy = _cupy()
    x = cupy.asarray(X)
    y = cupy.asarray(Y)
    ex, ey = ea.grad(f, (0, 1))(X, Y)
    gx, gy = ea.grad(f, (0, 1))(x, y)
    jx = ea.jit(ea.grad(f))(x, y)
    h = ea.hessian(f)(x, y)
    for r in (gx, gy, jx, h):
        assert isinstance(r, cupy.ndarray)
        assert device(r) == device(x)
    assert_close(cupy.asnumpy(gx), ex)
    assert_close(cupy.asnumpy(gy), ey)
    assert_close(cupy.asnumpy(jx), ex)
    assert_close(cupy.asnumpy(h), ea.hessian(f)(X, Y))


# a 3-regular network of six tensors (every index shared by two), complex, contracted to a
# scalar |Z|^2 and to an open vector; with and without slicing (memory_limit)
NET = "abc,ade,bdf,cgh,egi,fhi->"
NET_OPEN = "abc,ade,bdf,cgh,egi,fhi->a"


def _net_ops(rng, dim=3):
    return [rng.standard_normal((dim,) * 3) + 1j * rng.standard_normal((dim,) * 3) for _ in range(6)]


def _net_loss(*ops, memory_limit=None):
    z = ea.einsum(NET, *ops, memory_limit=memory_limit)
    v = ea.einsum(NET_OPEN, *ops, memory_limit=memory_limit)
    return ea.real(z * ea.conj(z)) + ea.sum(ea.real(v * ea.conj(v)))


@pytest.mark.parametrize("memory_limit", [None, 9])
@pytest.mark.parametrize("where", ["torch", "cupy"])
def test_complex_network_gradients_on_the_device(where, memory_limit):
    """A complex network's value and gradients (eager and jitted, sliced or not) on the GPU
    equal numpy's, and stay on the device."""
    xp = _cuda_torch() if where == "torch" else _cupy()
    put = (lambda a: xp.tensor(a, device="cuda")) if where == "torch" else xp.asarray
    ops = _net_ops(np.random.default_rng(5))
    loss = lambda *o: _net_loss(*o, memory_limit=memory_limit)
    argnums = tuple(range(6))
    value, grads = ea.value_and_grad(loss, argnums)(*ops)
    on_device = [put(a) for a in ops]
    for vg in (ea.value_and_grad(loss, argnums), ea.jit(ea.value_and_grad(loss, argnums))):
        v, gs = vg(*on_device)
        assert_close(to_numpy(v), value)
        for g, e in zip(gs, grads):
            assert device(g) == device(on_device[0])
            assert_close(to_numpy(g), e)


def test_cast_is_the_one_cast_of_a_gradient_to_its_leafs_dtype(lib):
    """`arrays.cast`, what `grad`, `.grad` and a tangent's check cast with: the array itself when
    it has the dtype, else an array of its library in the dtype; a complex value cast to a real
    dtype keeps its real part (a real leaf's gradient is real)."""
    from einad.arrays import cast, np_dtype

    z = np.array([[1.5 + 2.0j, -0.25 - 1.0j]])
    x = lib.asarray(z.real)
    assert cast(x, np.dtype(np.float64)) is x
    for source, want in ((x, z.real), (lib.asarray(z), z.real)):
        got = cast(source, np.dtype(np.float32))
        assert type(got) is type(x) and np_dtype(got.dtype) == np.float32
        np.testing.assert_array_equal(to_numpy(got), want.astype(np.float32))
    to_complex = cast(x, np.dtype(np.complex128))
    assert np_dtype(to_complex.dtype) == np.complex128
    np.testing.assert_array_equal(to_numpy(to_complex), z.real)
    # through the three callers: grad of a real leaf through complex values, .grad, a tangent
    w = ea.tensor(lib.asarray(z.real.astype(np.float32)), requires_grad=True)
    w.grad = lib.asarray(np.array([[1.0, 2.0]]))
    assert type(w.grad) is type(x) and np_dtype(w.grad.dtype) == np.float32
    g = ea.grad(lambda v: ea.sum(ea.real(ea.exp(1j * v))))(x)
    assert type(g) is type(x) and np_dtype(g.dtype) == np.float64
    assert_close(to_numpy(g), -np.sin(z.real))
    _, t = ea.jvp(lambda v: v * 2.0, (lib.asarray(z.real.astype(np.float32)),), (x,))
    assert np_dtype(t.dtype) == np.float32


def test_a_tensor_has_the_device_of_its_array_as_the_array_api_asks(lib):
    x = lib.asarray(np.ones(2))
    want = x.device if hasattr(x, "device") else "cpu"  # (dask's array has no device: numpy's, the CPU)
    seen = []
    assert ea.tensor(x).device == want
    ea.grad(lambda v: seen.append(v.device) or ea.sum(v))(x)
    ea.jit(lambda v: seen.append(v.device) or v * 2.0)(x)
    assert seen == [want, want]
