"""einad.arrays on GPU devices: transformations on PyTorch CUDA tensors and CuPy arrays.

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
