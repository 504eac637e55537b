"""Tensor.backward (einad.transforms.autodiff) and the imperative API a PyTorch user expects:
gradients that accumulate in .grad until reset, cotangents never written into, training loops
in both styles, no_grad, in-place updates of leaves, detach, requires_grad_, item, .grad of
non-leaves, transformations that take tensors requiring grad as their values, and backward on
every array library (.grad an array of the tensor's library)."""

import threading
import warnings
from collections import namedtuple

import numpy as np
import pytest

import einad as ea
from tests.support.functions import V3, X3, Y3, f_xy, g_xy, lib_arrays, lib_result
from tests.support.numerics import assert_close, numeric_grad, readonly


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((100, 3))
    y = X @ np.array([1.0, -2.0, 0.5]) + 0.3 + 0.1 * rng.standard_normal(100)
    A = np.hstack([X, np.ones((100, 1))])
    coef = np.linalg.lstsq(A, y, rcond=None)[0]  # the closed-form least-squares solution
    return X, y, coef[:3], coef[3]


# -- backward: accumulation, cotangents, leaves ------------------------------------------------------


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


# -- linear regression, both styles -----------------------------------------------------------------


def test_pytorch_style_training_loop_reaches_the_least_squares_solution(data):
    X, y, w_star, b_star = data
    w0 = np.zeros(3)
    w = ea.tensor(w0, requires_grad=True)
    b = ea.tensor(0.0, requires_grad=True)
    lr = 0.1
    for _ in range(300):
        loss = ea.mean((X @ w + b - y) ** 2)
        loss.backward()
        with ea.no_grad():
            w -= lr * w.grad
            b -= lr * b.grad
        w.grad = None
        b.grad = None
    assert_close(w.numpy(), w_star, rtol=1e-9)
    assert_close(b.numpy(), b_star, rtol=1e-9)
    assert w.is_leaf and w.requires_grad and b.is_leaf and b.requires_grad
    assert w.grad is None and w.dtype == np.float64 and w.shape == (3,)
    np.testing.assert_array_equal(w0, np.zeros(3))  # the array the tensor was made from


def test_jax_style_training_loop_reaches_the_least_squares_solution(data):
    X, y, w_star, b_star = data

    def loss(w, b, X, y):
        return ea.mean((X @ w + b - y) ** 2)

    w, b, lr = np.zeros(3), 0.0, 0.1
    for _ in range(300):
        gw, gb = ea.grad(loss, argnums=(0, 1))(w, b, X, y)
        w, b = w - lr * gw, b - lr * gb
    assert isinstance(w, np.ndarray)
    assert_close(w, w_star, rtol=1e-9)
    assert_close(b, b_star, rtol=1e-9)


def test_jax_style_loop_on_a_namedtuple_of_parameters_under_jit(data):
    X, y, w_star, b_star = data
    Params = namedtuple("Params", "w b")

    @ea.jit
    def step(p, X, y):
        g = ea.grad(lambda p: ea.mean((X @ p.w + p.b - y) ** 2))(p)
        return ea.tree_map(lambda x, dx: x - 0.1 * dx, p, g)

    p = Params(w=np.zeros(3), b=np.array(0.0))
    for _ in range(300):
        p = step(p, X, y)
    assert type(p) is Params and step.cache_size() == 1
    assert_close(p.w, w_star, rtol=1e-9)
    assert_close(p.b, b_star, rtol=1e-9)


# -- in-place updates ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("update", "expected"),
    [
        (lambda w: w.__isub__(np.array([1.0, 1.0])), [0.0, 1.0]),
        (lambda w: w.__iadd__(1.0), [2.0, 3.0]),
        (lambda w: w.__imul__(ea.tensor([3.0, 0.5])), [3.0, 1.0]),
        (lambda w: w.__itruediv__(2.0), [0.5, 1.0]),
        (lambda w: w.__ipow__(2.0), [1.0, 4.0]),
        (lambda w: w.__imatmul__(np.array([[0.0, 1.0], [1.0, 0.0]])), [2.0, 1.0]),
    ],
    ids=["-=", "+=", "*=", "/=", "**=", "@="],
)
def test_in_place_update_under_no_grad_keeps_the_same_leaf(update, expected):
    user = np.array([1.0, 2.0])
    w = ea.tensor(user, requires_grad=True)
    ea.sum(w * w).backward()
    with ea.no_grad():
        assert update(w) is w
    assert_close(w.numpy(), expected)
    assert w.is_leaf and w.requires_grad
    assert_close(w.grad, [2.0, 4.0])  # the gradient is kept
    np.testing.assert_array_equal(user, [1.0, 2.0])  # never written into
    assert not np.shares_memory(w.numpy(), user)
    w.grad = None
    ea.sum(w * w).backward()  # the graph now starts from the new value
    assert_close(w.grad, 2 * np.array(expected))


def test_in_place_operator_syntax_and_gradients_read_before_the_update():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    loss = ea.sum(w**2)
    with ea.no_grad():
        w -= 0.5
        w *= 2.0
    loss.backward()  # recorded at the old value: the update replaced the array, it did not write into it
    assert_close(w.grad, [2.0, 4.0])
    assert_close(w.numpy(), [1.0, 3.0])


def test_in_place_on_a_leaf_that_requires_grad_outside_no_grad_raises():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    for op in ("__isub__", "__iadd__", "__imul__", "__itruediv__"):
        with pytest.raises(RuntimeError, match="leaf tensor that requires grad.*in-place.*no_grad"):
            getattr(w, op)(1.0)
    assert_close(w.numpy(), [1.0, 2.0])
    assert w.is_leaf and w.requires_grad


def test_in_place_on_constants_and_non_leaves_records_like_pytorch():
    c = ea.tensor([1.0, 2.0])
    c += 1.0
    assert_close(c.numpy(), [2.0, 3.0])
    assert not c.requires_grad
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    c *= w  # a constant updated by a tensor that requires grad is now computed from it
    assert c.requires_grad and not c.is_leaf
    h = w * 3.0
    h += w**2  # a non-leaf updated in place stays in the graph
    ea.sum(c + h).backward()
    assert_close(w.grad, [2.0, 3.0] + np.array([3.0, 3.0]) + 2 * np.array([1.0, 2.0]))


def test_in_place_keeps_dtype_and_shape():
    w = ea.tensor(np.array([1.0, 2.0], np.float32), requires_grad=True)
    with ea.no_grad():
        w -= np.array([0.5, 0.5])  # float64 operand, float32 tensor: numpy's same-kind cast
    assert w.dtype == np.float32
    assert_close(w.numpy(), [0.5, 1.5])
    n = ea.tensor([1, 2])
    with pytest.raises(TypeError, match="cannot cast"):
        n += 0.5
    with pytest.raises(ValueError, match="shape"), ea.no_grad():
        w += np.ones((3, 2))


@pytest.mark.usefixtures("jit_mode")
def test_in_place_inside_a_transformation_is_functional():
    def f(x):
        x *= 3.0  # rebinds the local name, as `x = x * 3.0`
        y = x * 1.0
        y -= x**2
        return ea.sum(y)

    x = np.array([1.0, -0.5])
    assert_close(ea.grad(f)(x), 3.0 - 18.0 * x)
    np.testing.assert_array_equal(x, [1.0, -0.5])


# -- no_grad -----------------------------------------------------------------------------------


def test_no_grad_results_are_constants_and_backward_on_them_raises():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    with ea.no_grad():
        y = ea.sum(ea.exp(w) * w)
    assert not y.requires_grad and y.is_leaf
    assert_close(y.numpy(), np.sum(np.exp([1.0, 2.0]) * [1.0, 2.0]))
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        y.backward()
    z = ea.sum(w * 2.0)  # recording is back on after the block
    z.backward()
    assert_close(w.grad, [2.0, 2.0])


def test_no_grad_as_a_decorator_nested_and_after_an_exception():
    w = ea.tensor([1.0], requires_grad=True)

    @ea.no_grad()
    def update(t):
        return t * 2.0

    assert not update(w).requires_grad
    assert (w * 2.0).requires_grad
    with ea.no_grad():
        with ea.no_grad():
            pass
        assert not (w * 1.0).requires_grad  # still off after the inner block
    with pytest.raises(ZeroDivisionError), ea.no_grad():
        raise ZeroDivisionError
    assert (w * 1.0).requires_grad


def test_no_grad_is_per_thread():
    w = ea.tensor([1.0], requires_grad=True)
    seen = []
    with ea.no_grad():
        thread = threading.Thread(target=lambda: seen.append((w * 2.0).requires_grad))
        thread.start()
        thread.join()
        assert not (w * 2.0).requires_grad
    assert seen == [True]


def test_transformations_work_inside_no_grad():
    with ea.no_grad():
        g = ea.grad(lambda x: ea.sum(x**3))(np.array([1.0, 2.0]))
    assert_close(g, [3.0, 12.0])


# -- transformations take tensors that require grad as their values --------------------------------


def test_grad_of_a_tensor_that_requires_grad_is_a_numpy_array():
    t = ea.tensor([1.0, 2.0], requires_grad=True)
    f = lambda x: ea.sum(x**3)
    g = ea.grad(f)(t)
    assert type(g) is np.ndarray
    assert_close(g, [3.0, 12.0])
    value, g = ea.value_and_grad(f)(t)
    assert type(value) is np.ndarray and type(g) is np.ndarray
    out, tangent = ea.jvp(lambda x: x**2, (t,), (ea.tensor([1.0, 0.0], requires_grad=True),))
    assert type(out) is np.ndarray and type(tangent) is np.ndarray
    assert_close(tangent, [2.0, 0.0])
    out, pullback = ea.vjp(lambda x: x**2, t)
    assert type(out) is np.ndarray and type(pullback(np.ones(2))[0]) is np.ndarray
    for jac in (ea.jacrev, ea.jacfwd, ea.hessian):
        assert type(jac(f)(t)) is np.ndarray
    assert t.grad is None and t.is_leaf  # nothing reached the imperative graph


def test_jit_on_tensors_that_require_grad_records_into_the_imperative_graph():
    # jit follows the imperative graph (a jitted loss backpropagates), so a jitted
    # gradient of a tensor that requires grad is a tensor of that graph too
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    f = lambda x: ea.sum(x**3)
    ea.jit(f)(w).backward()
    assert_close(w.grad, [3.0, 12.0])
    g = ea.jit(ea.grad(f))(w)
    assert isinstance(g, ea.Tensor) and g.requires_grad
    assert_close(np.asarray(g), [3.0, 12.0])
    with ea.no_grad():
        assert not getattr(ea.jit(f)(w), "requires_grad", False)  # nothing recorded
    assert type(ea.grad(ea.jit(f))(w)) is np.ndarray


def test_grad_with_a_non_differentiated_tensor_that_requires_grad_is_numpy():
    t = ea.tensor([1.0, 2.0], requires_grad=True)
    g = ea.grad(lambda x, c: ea.sum(x * c * c))(np.array([1.0, 1.0]), t)
    assert type(g) is np.ndarray
    assert_close(g, [1.0, 4.0])


# -- the Tensor methods ---------------------------------------------------------------------------


def test_grad_can_be_reset_and_set():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    ea.sum(w * w).backward()
    w.grad = None
    assert w.grad is None
    w.grad = np.array([1.0, 1.0])
    ea.sum(w).backward()
    assert_close(w.grad, [2.0, 2.0])
    with pytest.raises(ValueError, match="shape"):
        w.grad = np.ones(3)


def test_a_complex_grad_for_a_real_leaf_is_a_type_error():
    """The imaginary part would be dropped silently (torch refuses too); a complex leaf takes it."""
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(TypeError, match="complex gradient.*real tensor"):
        w.grad = np.array([1.0 + 2.0j, 1.0])
    assert w.grad is None
    z = ea.tensor([1.0 + 1.0j, 2.0], requires_grad=True)
    z.grad = np.array([1.0 + 2.0j, 1.0])
    ea.sum(ea.real(z)).backward()
    assert_close(z.grad, [2.0 + 2.0j, 2.0])


def test_grad_of_a_non_leaf_is_none_with_a_warning_saying_why():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    h = w * 2.0
    ea.sum(h * h).backward()
    with pytest.warns(UserWarning, match="not a leaf.*leaves only"):
        assert h.grad is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert w.grad is not None  # leaves and constants: no warning
        assert ea.tensor([1.0]).grad is None


def test_detach_is_a_constant_sharing_memory():
    w = ea.tensor([1.0, 2.0], requires_grad=True)
    d = w.detach()
    assert not d.requires_grad and d.is_leaf
    assert np.shares_memory(d.numpy(), w.numpy())
    ea.sum(w * w.detach()).backward()
    assert_close(w.grad, [1.0, 2.0])  # no gradient through the detached factor


@pytest.mark.usefixtures("jit_mode")
def test_detach_inside_a_transformation_stops_the_gradient():
    x = np.array([1.0, 3.0])
    assert_close(ea.grad(lambda x: ea.sum(x * x.detach()))(x), x)


def test_requires_grad_():
    t = ea.tensor([1.0, 2.0])
    assert t.requires_grad_() is t
    assert t.requires_grad and t.is_leaf
    ea.sum(t**2).backward()
    assert_close(t.grad, [2.0, 4.0])
    loss = ea.sum(t * 5.0)
    assert t.requires_grad_(False) is t and not t.requires_grad
    loss.backward()  # recorded while t required grad: no longer reaches it
    assert_close(t.grad, [2.0, 4.0])
    t.requires_grad = True  # the attribute, as in PyTorch
    assert t.requires_grad
    with pytest.raises(TypeError, match="floating-point"):
        ea.tensor([1, 2]).requires_grad_()
    with pytest.raises(RuntimeError, match="only leaves"):
        (t * 2.0).requires_grad_(False)
    # the gradient of an intermediate: make it a leaf
    h = (t * 3.0).detach().requires_grad_()
    ea.sum(h**2).backward()
    assert_close(h.grad, 2 * 3.0 * np.array([1.0, 2.0]))


def test_item():
    assert ea.tensor(2.5).item() == 2.5 and type(ea.tensor(2.5).item()) is float
    assert ea.tensor([3]).item() == 3 and type(ea.tensor([3]).item()) is int
    w = ea.tensor([[1.5]], requires_grad=True)
    assert w.item() == 1.5
    loss = ea.sum(w * w)
    assert loss.item() == 2.25
    with pytest.raises(ValueError, match="size 1"):
        ea.tensor([1.0, 2.0]).item()


def test_tensor_copies_its_data():
    a = np.array([1.0, 2.0])
    t = ea.tensor(a, requires_grad=True)
    a[0] = 100.0
    assert_close(t.numpy(), [1.0, 2.0])


def test_backward_without_a_differentiable_path_raises_like_pytorch():
    with pytest.raises(RuntimeError, match="element 0 of tensors does not require grad"):
        ea.sum(ea.tensor([1.0, 2.0]) * 2.0).backward()


# -- every array library ---------------------------------------------------------------------------


def test_imperative_backward_fills_grad_in_the_library(lib):
    x, y = lib_arrays(lib, X3, Y3)
    w = ea.tensor(x, requires_grad=True)
    with lib.lazy():
        loss = f_xy(w, y)
        loss.backward()
        loss2 = f_xy(w, y)
        loss2.backward()  # accumulates
    assert_close(lib_result(lib, w.grad), 2 * ea.grad(f_xy)(X3, Y3))
    assert w.numpy().shape == (3, 3) and isinstance(w.numpy(), np.ndarray)
    assert loss.item() == pytest.approx(float(f_xy(X3, Y3).numpy()))
    w.grad = None
    w.grad = V3.tolist()  # numbers become an array of the tensor's library
    assert_close(lib_result(lib, w.grad), V3)
    out = ea.tensor(x, requires_grad=True)
    g_xy(out, y).backward(lib.asarray(V3))
    assert_close(lib_result(lib, out.grad), ea.vjp(lambda a: g_xy(a, Y3), X3)[1](V3)[0])
    s = ea.tensor(x, requires_grad=True)
    f_xy(s, y).backward(2.0)  # a number as cotangent
    assert_close(lib_result(lib, s.grad), 2.0 * ea.grad(f_xy)(X3, Y3))


def test_backward_inputs_fills_only_the_tensors_named_as_pytorchs():
    """``backward(inputs=...)`` (PyTorch's keyword; refused before): only the named tensors'
    ``.grad`` accumulate, a computed one among them included (as if it kept its gradient for
    this pass only: the next plain backward leaves it alone); an empty list, or a tensor that
    does not require grad, is a RuntimeError."""
    a = ea.tensor(X3, requires_grad=True)
    b = ea.tensor(Y3, requires_grad=True)
    y = a @ b
    (y * V3).sum().backward(inputs=[b], retain_graph=True)
    assert a.grad is None
    assert_close(b.grad, X3.T @ V3)
    ((y**2).sum()).backward(inputs=(y, a), retain_graph=True)
    assert_close(y.grad, 2 * (X3 @ Y3))
    assert_close(a.grad, 2 * (X3 @ Y3) @ Y3.T)
    assert_close(b.grad, X3.T @ V3)  # not named: untouched
    y.sum().backward(inputs=a)  # one tensor, as PyTorch takes it
    assert_close(a.grad, 2 * (X3 @ Y3) @ Y3.T + np.ones((3, 3)) @ Y3.T)
    assert not y.retains_grad  # lent for the pass that named it only
    assert_close(y.grad, 2 * (X3 @ Y3))
    y.grad = None
    y2 = a @ b
    y2.sum().backward(inputs=[b])
    with pytest.warns(UserWarning, match="not a leaf is None"):
        assert y2.grad is None  # (y2 was not named: no gradient kept for it)
    for bad, message in (([], "cannot be empty"), ([ea.tensor(X3)], "does not require grad")):
        with pytest.raises(RuntimeError, match=message):
            (a * 3.0).sum().backward(inputs=bad)
