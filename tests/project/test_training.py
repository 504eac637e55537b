"""The MLP training loop of docs/tutorial.md: einad's PyTorch-style and JAX-style
loops give the same loss curve, and PyTorch itself, on the same data from the same weights,
gives that curve too."""

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close

NAMES = ("W1", "b1", "W2", "b2")
LR = 0.2
STEPS = 150


@pytest.fixture
def problem():
    """200 points of [-2, 2]^2, y = sin x1 cos x2 + noise, and starting weights for 2 -> 16 tanh -> 1."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (200, 2))
    y = np.sin(X[:, 0]) * np.cos(X[:, 1]) + 0.05 * rng.standard_normal(200)
    init = {
        "W1": rng.standard_normal((2, 16)) / np.sqrt(2),
        "b1": np.zeros(16),
        "W2": rng.standard_normal(16) / 4,
        "b2": np.array(0.0),
    }
    return X, y, init


def train_pytorch_style(X, y, init):
    params = [ea.tensor(init[k], requires_grad=True) for k in NAMES]
    W1, b1, W2, b2 = params
    curve = []
    for _ in range(STEPS):
        loss = ea.mean((ea.tanh(X @ W1 + b1) @ W2 + b2 - y) ** 2)
        loss.backward()
        with ea.no_grad():
            for p in params:
                p -= LR * p.grad
        for p in params:
            p.grad = None
        curve.append(loss.item())
    assert all(p.is_leaf and p.requires_grad for p in params)
    return np.array(curve), {k: p.numpy() for k, p in zip(NAMES, params)}


def mse_loss(params, X, y):
    hidden = ea.tanh(X @ params["W1"] + params["b1"])
    return ea.mean((hidden @ params["W2"] + params["b2"] - y) ** 2)


def make_step(jit):
    def step(params, X, y):
        loss, grads = ea.value_and_grad(mse_loss)(params, X, y)
        return ea.tree_map(lambda v, dv: v - LR * dv, params, grads), loss

    return ea.jit(step) if jit else step


def train_jax_style(X, y, init, step):
    params, curve = init, []
    for _ in range(STEPS):
        params, loss = step(params, X, y)
        curve.append(float(loss))
    return np.array(curve), params


def test_both_einad_styles_give_the_same_curve_and_the_loss_falls(problem):
    X, y, init = problem
    curve_torch_style, final_torch_style = train_pytorch_style(X, y, init)
    step = make_step(jit=True)
    curve_jit, final_jit = train_jax_style(X, y, init, step)
    curve_eager, final_eager = train_jax_style(X, y, init, make_step(jit=False))

    assert step.cache_size() == 1  # traced on the first call, replayed for the other 149
    assert_close(curve_jit, curve_torch_style, rtol=1e-10, atol=0)
    assert_close(curve_eager, curve_torch_style, rtol=1e-10, atol=0)
    for k in NAMES:
        assert not isinstance(final_jit[k], ea.Tensor) and not isinstance(final_eager[k], ea.Tensor)
        assert_close(final_jit[k], final_torch_style[k], rtol=1e-10, atol=1e-13)
        assert_close(final_eager[k], final_torch_style[k], rtol=1e-10, atol=1e-13)

    assert curve_torch_style[0] > 0.4  # an untrained network: about var(y)
    assert curve_torch_style[-1] < 0.015  # the noise floor is 0.05**2
    assert np.all(np.diff(curve_torch_style) < 0)  # a small step: the loss falls at every step
    assert all(not np.allclose(final_jit[k], init[k]) for k in NAMES)  # every parameter trained


def test_loss_curve_matches_pytorch(problem):
    torch = pytest.importorskip(
        "torch", reason="PyTorch is an optional dependency (the `bench` extra): install it to compare"
    )
    X, y, init = problem

    Xt, yt = torch.tensor(X, dtype=torch.float64), torch.tensor(y, dtype=torch.float64)
    params = [torch.tensor(init[k], dtype=torch.float64, requires_grad=True) for k in NAMES]
    W1, b1, W2, b2 = params
    optimizer = torch.optim.SGD(params, lr=LR)
    curve_torch = []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = torch.mean((torch.tanh(Xt @ W1 + b1) @ W2 + b2 - yt) ** 2)
        loss.backward()
        optimizer.step()
        curve_torch.append(loss.item())
    final_torch = {k: p.detach().numpy() for k, p in zip(NAMES, params)}

    for curve, final in (
        train_pytorch_style(X, y, init),
        train_jax_style(X, y, init, make_step(jit=True)),
    ):
        assert_close(curve, np.array(curve_torch), rtol=1e-9, atol=0)
        for k in NAMES:
            assert_close(final[k], final_torch[k], rtol=1e-9, atol=1e-12)
