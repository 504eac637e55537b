"""Array creation with numpy's names at einad's top level (einad/creation.py): ``ea.zeros``,
``ea.arange``, ``ea.asarray``, ... as a JAX user writes ``jnp.zeros``. Each gives numpy's values
and dtypes as a Tensor; ``asarray``/``array`` of lists holding Tensors and ``full``/``full_like``
of a Tensor fill value are differentiable; ``*_like`` keeps the library of what it imitates."""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close

X = np.arange(6.0).reshape(2, 3) / 7.0

CALLS = [
    ("zeros", ((2, 3),), {}),
    ("zeros", ((2, 3), np.float32), {}),  # (numpy's dtype, in its place)
    ("ones", (4,), {"dtype": np.int32}),
    ("empty", ((0, 2),), {}),
    ("full", ((2, 2), 1.5), {}),
    ("full", (3, 7, np.int8), {}),
    ("eye", (3,), {}),
    ("eye", (2, 4, 1), {}),
    ("identity", (3, np.complex128), {}),
    ("arange", (5,), {}),
    ("arange", (1.0, 2.0, 0.25), {}),
    ("arange", (2, 11, 3), {"dtype": np.float32}),
    ("linspace", (0.0, 1.0, 5), {}),
    ("linspace", (0.0, 1.0), {"num": 4, "endpoint": False}),
    ("indices", ((2, 3),), {}),
    ("zeros_like", (X,), {}),
    ("ones_like", (X, np.int64), {}),
    ("empty_like", (X,), {"shape": (4,)}),
    ("full_like", (X, 2.5), {}),
    ("full_like", (X, 2), {"dtype": int}),
    ("array", ([[1, 2], [3, 4]],), {}),
    ("array", ([1.0, 2.0],), {"ndmin": 3}),
    ("asarray", ((1.0, 2.0), np.float32), {}),
]


@pytest.mark.parametrize("name, args, kwargs", CALLS, ids=[f"{c[0]}{k}" for k, c in enumerate(CALLS)])
def test_creation_gives_numpys_values_and_dtypes_as_tensors(name, args, kwargs):
    got, want = getattr(ea, name)(*args, **kwargs), getattr(np, name)(*args, **kwargs)
    assert type(got) is ea.Tensor and name in ea.__all__
    assert got.dtype == want.dtype and got.shape == want.shape
    if name not in ("empty", "empty_like"):  # (numpy's are uninitialised; einad's are zeros)
        np.testing.assert_array_equal(got.numpy(), want)


def test_linspace_with_retstep_and_a_tensor_argument_of_like():
    values, step = ea.linspace(0.0, 2.0, 5, retstep=True)
    assert step == 0.5 and values.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    t = ea.tensor(X)
    for make in (ea.zeros_like, ea.ones_like, lambda a: ea.full_like(a, 3.0)):
        out = make(t)
        assert type(out) is ea.Tensor and out.shape == X.shape and out.dtype == X.dtype


def test_lists_of_tensors_and_tensor_fill_values_are_differentiable():
    """``asarray([x, y])`` stacks (as jnp.asarray), ``array`` too; ``full``/``full_like`` of a
    Tensor broadcast it; ``zeros_like`` of a traced value is a constant of its shape. Eagerly,
    under jit and forward mode, against the closed form."""

    def f(x):
        y = ea.asarray([x[0], x[1] * 2.0, 3.0])  # a list of a traced scalar, a traced one, a number
        z = ea.array([[x[2], 1.0], [x[0], x[1]]])
        w = ea.full((2, 2), x[2]) + ea.full_like(X[:, :2], x[0] * x[1]) + ea.zeros_like(x)[0]
        return ea.sum(y * y) + ea.sum(z * z) + ea.sum(w)

    x = np.array([0.3, -1.2, 2.0])
    a, b, c = x
    want = np.array([2 * a + 2 * a + 4 * b, 8 * b + 2 * b + 4 * a, 2 * c + 4])
    assert_close(ea.grad(f)(x), want)
    assert_close(ea.jit(ea.grad(f))(x), want)
    assert_close(ea.jvp(f, (x,), (np.ones(3),))[1], want.sum())
    assert ea.gradcheck(f, x)
    # a Tensor given to asarray is that Tensor; array makes a Tensor of its own
    t = ea.tensor(X)
    assert ea.asarray(t) is t
    c = ea.array(t)
    c[0, 0] = 9.0
    assert t[0, 0].item() == 0.0


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((0.5, 2.0, 5), {}),
        (([0.0, 1.0], [1.0, 3.0], 3), {"axis": 1}),
        ((1.0, [2.0, 5.0], 4), {"axis": -1, "endpoint": False}),
        (([[1.0], [2.0]], [3.0, 4.0, 5.0], 3), {"axis": 1}),
        ((0.0, 1.0, 1), {}),
    ],
)
def test_linspace_is_differentiable_in_its_ends(args, kwargs):
    """``linspace(start, stop)`` of Tensors: numpy's samples, and ``start + k * step``'s
    derivative (jnp.linspace's), by central differences, eagerly and under jit."""
    start, stop = (np.asarray(a, float) for a in args[:2])
    num = args[2]
    want = np.linspace(start, stop, num, **kwargs)
    got = ea.linspace(ea.tensor(start), ea.tensor(stop), num, **kwargs)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-15)
    weights = np.arange(want.size, dtype=float).reshape(want.shape) + 1.0

    def loss(a, b):
        return ea.sum(ea.linspace(a, b, num, **kwargs) * weights)

    assert ea.gradcheck(loss, start, stop)
    both = ea.grad(loss, argnums=(0, 1))
    for staged, eager in zip(ea.jit(both)(start, stop), both(start, stop)):
        assert_close(staged, eager)
    _, step = ea.linspace(ea.tensor(start), stop, num, retstep=True, **kwargs)
    np.testing.assert_allclose(np.asarray(step), np.linspace(start, stop, num, retstep=True, **kwargs)[1])


def test_like_keeps_the_library_of_what_it_imitates(lib):
    x = lib.asarray(X)
    for out in (ea.zeros_like(x), ea.ones_like(ea.tensor(x)), ea.full_like(x, 2.0), ea.empty_like(x)):
        assert lib.owns(out._value)
        assert tuple(out.shape) == X.shape


def test_autoray_creates_einad_tensors_with_numpys_signatures():
    autoray = pytest.importorskip("autoray", reason="autoray is einad's [tn] extra")
    for name, args in (("zeros", ((2, 2),)), ("eye", (3,)), ("linspace", (0.0, 1.0, 3)), ("arange", (4,))):
        got = autoray.do(name, *args, like="einad")
        assert type(got) is ea.Tensor
        np.testing.assert_array_equal(got.numpy(), getattr(np, name)(*args))


LEAVES = [
    ("zeros", ((2, 3),)),
    ("ones", (3,)),
    ("empty", ((2,),)),
    ("full", ((2, 2), 0.5)),
    ("eye", (3,)),
    ("identity", (2,)),
    ("arange", (0.0, 2.0, 0.5)),
    ("linspace", (0.0, 1.0, 4)),
    ("zeros_like", (X,)),
    ("ones_like", (X,)),
    ("empty_like", (X,)),
    ("full_like", (X, 0.25)),
]


@pytest.mark.parametrize("name, args", LEAVES, ids=[c[0] for c in LEAVES])
def test_requires_grad_makes_a_leaf_that_backward_fills(name, args):
    """``ea.zeros(3, requires_grad=True)``, as ``torch.zeros``: a leaf whose ``.grad`` is the
    gradient (here of ``Σ w² + 3 w``: ``2 w + 3``); without it the Tensor is a constant."""
    w = getattr(ea, name)(*args, requires_grad=True)
    value = np.asarray(w.numpy()).copy()
    assert w.requires_grad and w.grad is None
    ea.sum(w * w + 3 * w).backward()
    np.testing.assert_allclose(w.grad, 2 * value + 3)
    assert not getattr(ea, name)(*args).requires_grad


def test_requires_grad_of_integers_is_refused_as_in_pytorch():
    with pytest.raises(TypeError, match="floating-point or complex"):
        ea.arange(3, requires_grad=True)
    with pytest.raises(TypeError, match="floating-point or complex"):
        ea.zeros(2, dtype=np.int32, requires_grad=True)
