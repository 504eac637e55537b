"""PyTorch's imperative habits, kept or refused loudly (issue 25), each checked against torch itself:
backward's retain_graph and create_graph, a second pass through a freed graph, hooks, retain_grad,
grad_fn, no_grad without parentheses, the everyday Tensor methods (in-place ones never writing into
an array), and errors that name the einad spelling."""

import gc
import threading
import warnings
import weakref

import numpy as np
import pytest

import einad as ea
from tests.support.numerics import assert_close

torch = pytest.importorskip("torch", reason="torch is not installed: the references are torch's own results")

# torch warns that backward(create_graph=True) makes a reference cycle through .grad
pytestmark = pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")

X0 = np.array([0.7, -1.3, 0.4])
V = np.array([1.0, -0.5, 2.0])
A = np.array([[0.5, -1.0, 2.0], [1.5, 0.3, -0.7], [-0.2, 0.8, 1.1]])


def both(x0=X0):
    """The same starting point as an einad leaf and a torch leaf (float64)."""
    return ea.tensor(x0, requires_grad=True), torch.tensor(x0, requires_grad=True)


def tgrad(t):
    return t.grad.detach().numpy()


# the same function written once for each library (einad's operators and torch's)
FUNCTIONS = {
    "product": lambda x, lib: (x * x * x).sum(),
    "tanh-layer": lambda x, lib: (lib.tanh(lib_mat(lib) @ x) ** 2).sum(),
    "logistic": lambda x, lib: lib.log(1 + lib.exp(-(lib_mat(lib) @ x))).sum() + 0.1 * (x * x).sum(),
    "sin-exp": lambda x, lib: (lib.sin(x) * lib.exp(x)).sum(),
}


def lib_mat(lib):
    return torch.tensor(A) if lib is torch else A


# -- a second backward through a freed graph --------------------------------------------------------


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_a_second_backward_raises_as_torch_does_and_leaves_grad_as_it_was(name):
    f = FUNCTIONS[name]
    x, xt = both()
    y, yt = f(x, ea), f(xt, torch)
    y.backward()
    yt.backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        yt.backward()
    with pytest.raises(RuntimeError, match=r"second time.*retain_graph=True"):
        y.backward()
    assert_close(x.grad, tgrad(xt))  # not doubled


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_retain_graph_lets_backward_run_again_and_accumulate_as_torch(name):
    f = FUNCTIONS[name]
    x, xt = both()
    y, yt = f(x, ea), f(xt, torch)
    y.backward(retain_graph=True)
    yt.backward(retain_graph=True)
    first = x.grad.copy()
    y.backward(retain_graph=True)
    yt.backward(retain_graph=True)
    y.backward()  # the last one may free the graph
    yt.backward()
    assert_close(x.grad, tgrad(xt))
    assert_close(x.grad, 3 * first)
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


def test_a_freed_part_shared_by_a_second_result_raises_too():
    x, xt = both()
    for lib, t in ((ea, x), (torch, xt)):
        h = lib.tanh(t) * t  # shared by both losses
        z1, z2 = (h * h).sum(), (h * 3.0).sum()
        z1.backward()
        with pytest.raises(RuntimeError, match="second time"):
            z2.backward()
    assert_close(x.grad, tgrad(xt))
    x, xt = both()
    for lib, t in ((ea, x), (torch, xt)):
        h = lib.tanh(t) * t
        (h * h).sum().backward(retain_graph=True)
        (h * 3.0).sum().backward()
    assert_close(x.grad, tgrad(xt))


def test_einad_refuses_also_where_torch_saved_nothing_to_free():
    # torch runs a second pass through operations that saved no tensors (add, sum) and doubles
    # .grad; einad frees every node, so the answer never depends on which operation saved what
    x, xt = both()
    yt = (xt + 1.0).sum()
    yt.backward()
    yt.backward()
    assert_close(tgrad(xt), [2.0, 2.0, 2.0])
    y = (x + 1.0).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()
    assert_close(x.grad, [1.0, 1.0, 1.0])


def test_backward_on_a_leaf_accumulates_every_time_as_torch():
    x, xt = ea.tensor(2.0, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    for _ in range(3):
        x.backward()
        xt.backward()
    assert x.grad == tgrad(xt) == 3.0


def test_backward_frees_the_forward_values_unless_retained():
    for retain, alive in ((False, False), (True, True)):
        x = ea.tensor(np.linspace(0.1, 1.0, 1000), requires_grad=True)
        e = ea.exp(ea.sin(x))  # the exp node keeps its result for its derivative
        kept = weakref.ref(np.asarray(e).base)  # (np.asarray gives a read-only view of the array)
        loss = ea.sum(e * e)
        del e
        loss.backward(retain_graph=retain)
        gc.collect()
        assert (kept() is not None) == alive


def test_a_jitted_graph_is_freed_and_retained_the_same_way():
    f = ea.jit(lambda x: ea.sum(ea.tanh(x) * x))
    x = ea.tensor(X0, requires_grad=True)
    y = f(x)
    y.backward(retain_graph=True)
    y.backward()
    assert_close(x.grad, 2 * ea.grad(lambda x: ea.sum(ea.tanh(x) * x))(X0))
    with pytest.raises(RuntimeError, match="retain_graph"):
        y.backward()


# -- create_graph: a differentiable .grad -----------------------------------------------------------


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_hessian_vector_product_the_pytorch_way(name):
    f = FUNCTIONS[name]
    hv = ea.hessian(lambda x: f(x, ea))(X0) @ V
    x, xt = both()
    f(x, ea).backward(create_graph=True)
    f(xt, torch).backward(create_graph=True)
    g, gt = x.grad, xt.grad
    assert isinstance(g, ea.Tensor) and g.requires_grad and g.grad_fn is not None
    assert_close(g.numpy(), gt.detach().numpy())
    # as in torch, the second backward adds H·v to the .grad that holds g
    (g * V).sum().backward()
    (gt * torch.tensor(V)).sum().backward()
    assert_close(np.asarray(x.grad), gt.detach().numpy())
    assert_close(np.asarray(x.grad), g.numpy() + hv)
    # with .grad reset first, .grad is H·v alone
    x, xt = both()
    f(x, ea).backward(create_graph=True)
    f(xt, torch).backward(create_graph=True)
    g, gt = x.grad, xt.grad
    x.grad, xt.grad = None, None
    (g * V).sum().backward()
    (gt * torch.tensor(V)).sum().backward()
    assert_close(x.grad, hv)
    assert_close(x.grad, tgrad(xt))
    assert type(x.grad) is np.ndarray  # a plain backward gives a plain array


def test_create_graph_retains_the_graph_by_default_as_torch():
    x = ea.tensor(X0, requires_grad=True)
    y = ea.sum(x**3)
    y.backward(create_graph=True)
    y.backward()  # retain_graph defaulted to create_graph
    assert_close(np.asarray(x.grad), 2 * 3 * X0**2)


@pytest.mark.parametrize(("name", "reaches_freed"), [("pow", False), ("tanh", True)])
def test_create_graph_without_retain_frees_what_torch_frees(name, reaches_freed):
    # d(x³) = 3x² is recorded from x itself; d tanh(x) = 1 - tanh(x)² reads tanh's (freed) node
    x, xt = both()
    for lib, t in ((ea, x), (torch, xt)):
        y = (t**3).sum() if name == "pow" else lib.tanh(t).sum()
        y.backward(create_graph=True, retain_graph=False)
        with pytest.raises(RuntimeError, match="second time"):
            y.backward()
        g = t.grad
        t.grad = None
        if reaches_freed:
            with pytest.raises(RuntimeError, match="second time"):
                (g * g).sum().backward()
        else:
            (g * g).sum().backward()
    if not reaches_freed:
        assert_close(x.grad, tgrad(xt))


def test_a_gradient_that_depends_on_no_leaf_does_not_require_grad_as_torch():
    x, xt = both()
    (x * 3.0).sum().backward(create_graph=True)
    (xt * 3.0).sum().backward(create_graph=True)
    assert isinstance(x.grad, ea.Tensor)
    assert x.grad.requires_grad is xt.grad.requires_grad is False
    assert_close(x.grad.numpy(), tgrad(xt))


def test_third_derivative_by_three_backwards():
    x = ea.tensor(X0, requires_grad=True)
    ea.sum(x**4).backward(create_graph=True)
    g = x.grad
    x.grad = None
    ea.sum(g * V).backward(create_graph=True)
    h = x.grad
    x.grad = None
    ea.sum(h * V).backward()
    assert_close(x.grad, 24 * X0 * V * V)


def test_create_graph_with_a_cotangent_that_requires_grad_as_torch():
    x, xt = both()
    c, ct = both(V)
    (ea.tanh(x) * x).backward(c, create_graph=True)
    (torch.tanh(xt) * xt).backward(ct, create_graph=True)
    g, gt = x.grad, xt.grad
    x.grad = xt.grad = None
    ea.sum(g * g).backward()
    (gt * gt).sum().backward()
    assert_close(c.grad, tgrad(ct))
    assert_close(x.grad, tgrad(xt))


def test_backward_takes_torch_keyword_gradient():
    x, xt = both()
    (x * x).backward(gradient=V)
    (xt * xt).backward(gradient=torch.tensor(V))
    assert_close(x.grad, tgrad(xt))
    with pytest.raises(TypeError, match="not both"):
        (x * x).backward(V, gradient=V)


@pytest.mark.parametrize("kind", ["custom_vjp", "custom_jvp", "checkpoint", "jit", "einsum-tree", "linalg"])
def test_create_graph_through_every_kind_of_node_matches_the_hessian(kind):
    @ea.custom_vjp
    def cube(x):
        return x**3

    cube.defvjp(lambda x: (x**3, x), lambda x, g: (3 * x**2 * g,))

    @ea.custom_jvp
    def softplus(x):
        return ea.log(1.0 + ea.exp(x))

    @softplus.defjvp
    def _(primals, tangents):
        return softplus(primals[0]), tangents[0] * ea.sigmoid(primals[0])

    f = {
        "custom_vjp": lambda x: ea.sum(cube(x) * ea.cos(x)),
        "custom_jvp": lambda x: ea.sum(softplus(x) * x),
        "checkpoint": lambda x: ea.sum(ea.checkpoint(lambda t: ea.tanh(t) * t)(x) ** 2),
        "jit": ea.jit(lambda x: ea.sum(ea.tanh(A @ x) ** 2)),
        "einsum-tree": lambda x: ea.einsum("i,ij,jk,k->", x, A, A.T, ea.tanh(x)),
        "linalg": lambda x: ea.linalg.slogdet(A @ A.T + ea.einsum("i,j->ij", x, x))[1],
    }[kind]
    x = ea.tensor(X0, requires_grad=True)
    f(x).backward(create_graph=True)
    g = x.grad
    assert_close(g.numpy(), ea.grad(f)(X0))
    x.grad = None
    ea.sum(g * V).backward()
    assert_close(x.grad, ea.hessian(f)(X0) @ V)


# -- no_grad and enable_grad -----------------------------------------------------------------------


def test_no_grad_with_and_without_parentheses_and_as_a_context():
    w = ea.tensor([1.0, 2.0], requires_grad=True)

    @ea.no_grad
    def bare(t):
        return t * 2.0

    @ea.no_grad()
    def called(t):
        return t * 2.0

    assert bare.__name__ == "bare" and called.__name__ == "called"
    assert not bare(w).requires_grad and not called(w).requires_grad
    with ea.no_grad():
        assert not (w * 2.0).requires_grad
    assert (w * 2.0).requires_grad and bare(w).numpy().tolist() == [2.0, 4.0]

    @torch.no_grad
    def torch_bare(t):
        return t * 2.0

    assert not torch_bare(torch.ones(1, requires_grad=True)).requires_grad  # the habit being kept
    with pytest.raises(TypeError, match="takes no arguments"):
        ea.no_grad(3)


def test_enable_grad_inside_no_grad_as_torch():
    w = ea.tensor([1.0], requires_grad=True)
    wt = torch.ones(1, requires_grad=True)
    with ea.no_grad(), torch.no_grad():
        with ea.enable_grad(), torch.enable_grad():
            assert (w * 2.0).requires_grad and (wt * 2.0).requires_grad
            with ea.no_grad(), torch.no_grad():
                assert not (w * 2.0).requires_grad and not (wt * 2.0).requires_grad
            assert (w * 2.0).requires_grad
        assert not (w * 2.0).requires_grad and not (wt * 2.0).requires_grad

    @ea.enable_grad
    def recorded(t):
        return t * 2.0

    with ea.no_grad():
        assert recorded(w).requires_grad
        assert not (w * 1.0).requires_grad
    assert (w * 1.0).requires_grad


def test_enable_grad_in_a_fresh_thread_leaves_recording_on_as_torch():
    """A thread starts recording; enable_grad there restores that state, and no_grad still nests."""
    w = ea.tensor([1.0], requires_grad=True)
    seen = []

    def work():
        with ea.enable_grad():
            seen.append((w * 2.0).requires_grad)
        seen.append((w * 2.0).requires_grad)
        with ea.no_grad():
            seen.append((w * 2.0).requires_grad)
        seen.append((w * 2.0).requires_grad)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert seen == [True, True, False, True]


# -- hooks, retain_grad, grad_fn -------------------------------------------------------------------


def _hooked(lib, x):
    """One graph with hooks on an intermediate and a leaf; returns what they saw."""
    seen = []
    h = x * 2.0
    h.register_hook(lambda g: seen.append(("h1", np.array(g.tolist()))) or g * 10.0)
    h.register_hook(lambda g: seen.append(("h2", np.array(g.tolist()))))  # None: keeps g
    h.retain_grad()
    x.register_hook(lambda g: seen.append(("x", np.array(g.tolist()))) or g + 1.0)
    (h * h).sum().backward()
    return seen, h


def test_hooks_run_in_order_and_replace_the_gradient_as_torch():
    x, xt = both()
    seen, h = _hooked(ea, x)
    seen_t, ht = _hooked(torch, xt)
    assert [name for name, _ in seen] == [name for name, _ in seen_t] == ["h1", "h2", "x"]
    for (_, a), (_, b) in zip(seen, seen_t):
        assert_close(a, b)
    assert_close(h.grad, tgrad(ht))  # retain_grad keeps the gradient after the hooks
    assert_close(x.grad, tgrad(xt))  # a leaf's hook runs before accumulation


def test_a_hook_on_the_root_sees_the_seed_as_torch():
    x, xt = both()
    got = []
    for t in (x, xt):
        y = (t * t).sum()
        y.register_hook(lambda g: got.append(float(g)) or g * 2.0)
        y.backward()
    assert got == [1.0, 1.0]
    assert_close(x.grad, tgrad(xt))
    assert_close(x.grad, 4 * X0)


def test_hook_handle_removes_and_hooks_follow_the_value_after_an_in_place_update():
    x = ea.tensor(X0, requires_grad=True)
    calls = []
    handle = x.register_hook(lambda g: calls.append(1))
    ea.sum(x * x).backward()
    handle.remove()
    handle.remove()  # a second remove does nothing
    ea.sum(x * x).backward()
    assert calls == [1]
    with x.register_hook(lambda g: g * 0.0):
        x.grad = None
        ea.sum(x * x).backward()
        assert_close(x.grad, 0 * X0)
    x.grad = None
    ea.sum(x * x).backward()  # removed on leaving the block
    assert_close(x.grad, 2 * X0)
    # hooks registered before an in-place update see the gradient of the old value; retain_grad
    # follows the tensor to its new one (torch's rules)
    got = {}
    for lib, t in ((ea, ea.tensor(X0, requires_grad=True)), (torch, torch.tensor(X0, requires_grad=True))):
        h = t * 2.0
        h.retain_grad()
        h.register_hook(lambda g, lib=lib: got.__setitem__((lib.__name__, "old"), np.array(g.tolist())))
        h *= 3.0
        h.register_hook(lambda g, lib=lib: got.__setitem__((lib.__name__, "new"), np.array(g.tolist())))
        (h * h).sum().backward()
        got[lib.__name__, "retained"] = np.array(h.grad.tolist())
        got[lib.__name__, "x"] = np.array(t.grad.tolist())
    for key in ("old", "new", "retained", "x"):
        assert_close(got["einad", key], got["torch", key])


def test_hooks_get_a_read_only_array_or_a_tensor_under_create_graph():
    x = ea.tensor(X0, requires_grad=True)
    got = []

    def write(g):
        got.append(g)
        g[0] = 100.0  # must not change what the pass computes

    x.register_hook(write)
    with pytest.raises(ValueError, match="read-only"):
        ea.sum(x * x).backward()
    assert x.grad is None
    x = ea.tensor(X0, requires_grad=True)
    x.register_hook(lambda g: got.append(g))
    ea.sum(x**3).backward(create_graph=True)
    assert isinstance(got[-1], ea.Tensor) and got[-1].requires_grad
    assert_close(got[-1].numpy(), 3 * X0**2)


def test_a_hook_returning_a_wrong_shape_or_on_a_constant_is_refused():
    x = ea.tensor(X0, requires_grad=True)
    x.register_hook(lambda g: np.ones(2))
    with pytest.raises(ValueError, match="shape"):
        ea.sum(x * x).backward()
    t = ea.tensor(X0)
    for call, what in (
        (lambda: t.register_hook(lambda g: g), "register_hook()"),
        (t.retain_grad, "retain_grad()"),
    ):
        with pytest.raises(RuntimeError) as err:
            call()
        assert str(err.value) == (
            f"{what} on a tensor that does not require grad: make it with "
            "ea.tensor(data, requires_grad=True), or call t.requires_grad_()"
        )
    tt = torch.tensor(X0)  # torch refuses both too
    with pytest.raises(RuntimeError, match="does.*require"):
        tt.register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="retain_grad"):
        tt.retain_grad()
    with pytest.raises(TypeError, match="function"):
        x.register_hook(3)
    with pytest.raises(RuntimeError) as err:
        ea.grad(lambda t: ea.sum(t) if t.register_hook(print) else 0.0)(X0)
    assert str(err.value) == (
        "register_hook() on a value traced by a transformation (einad.grad, jit, ...): it concerns "
        "the imperative graph of tensors made with requires_grad=True"
    )


def test_a_hook_sees_the_gradient_in_its_tensors_dtype_as_torch():
    seen = []
    for lib, t in (
        (ea, ea.tensor(X0.astype(np.float32), requires_grad=True)),
        (torch, torch.tensor(X0.astype(np.float32), requires_grad=True)),
    ):
        t.register_hook(lambda g, lib=lib: seen.append((lib.__name__, str(g.dtype))))
        (t * lib.tensor(X0)).sum().backward()  # a float64 product: its cotangent is float64
    assert seen == [("einad", "float32"), ("torch", "torch.float32")]


def test_retain_grad_accumulates_and_silences_the_warning_as_torch():
    x, xt = both()
    hs = []
    for lib, t in ((ea, x), (torch, xt)):
        h = lib.tanh(t) * 3.0
        h.retain_grad()
        assert h.retains_grad and not t.retains_grad
        t.retain_grad()  # on a leaf: nothing to do
        y = (h * h).sum()
        y.backward(retain_graph=True)
        y.backward()
        hs.append(h)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert_close(hs[0].grad, tgrad(hs[1]))
    assert_close(x.grad, tgrad(xt))


def test_grad_fn_names_the_operation_and_leads_to_the_inputs():
    x, xt = both()
    c = ea.tensor([1.0, 2.0, 3.0])
    assert x.grad_fn is None and xt.grad_fn is None and c.grad_fn is None
    y, yt = x * c, xt * torch.tensor([1.0, 2.0, 3.0])
    assert y.grad_fn.name() == "MultiplyBackward" and yt.grad_fn.name() == "MulBackward0"
    (leaf, _), (const, _) = y.grad_fn.next_functions
    (leaf_t, _), (const_t, _) = yt.grad_fn.next_functions
    assert leaf.name() == "AccumulateGrad" and leaf_t.name().endswith("AccumulateGrad")
    assert leaf.variable is x and leaf_t.variable is xt
    assert const is None and const_t is None
    assert y.grad_fn == y.grad_fn and {y.grad_fn, y.grad_fn} == {y.grad_fn}
    z = x * c
    assert z.grad_fn != y.grad_fn and hash(z.grad_fn) != hash(y.grad_fn) and z.grad_fn != y
    taken = ea.take_along_axis(x, np.array([2, 0]), axis=0)  # an operation of several words
    assert taken.grad_fn.name() == "TakeAlongAxisBackward"
    assert repr(ea.sum(y).grad_fn) == "<EinsumBackward>"
    assert (y * y).grad_fn.next_functions[0][0] == y.grad_fn
    with ea.no_grad():
        assert (x * 2.0).grad_fn is None


# -- the everyday Tensor methods --------------------------------------------------------------------

M0 = np.array([[[0.3, -1.2, 2.5, 0.0], [1.1, -0.4, 0.8, -2.2], [0.5, 0.9, -0.1, 1.7]]])  # (1, 3, 4)

# method, positional arguments, differentiable (compared by backward against torch too)
METHODS = [
    ("abs", (), True),
    ("tanh", (), True),
    ("sigmoid", (), True),
    ("relu", (), True),
    ("sin", (), True),
    ("cos", (), True),
    ("square", (), True),
    ("exp", (), True),
    ("sign", (), False),
    ("floor", (), False),
    ("round", (), False),
    ("clone", (), True),
    ("view", (3, 4), True),
    ("view", ((4, 3),), True),
    ("view", (-1,), True),
    ("unsqueeze", (0,), True),
    ("unsqueeze", (-1,), True),
    ("flatten", (), True),
    ("flatten", (1,), True),
    ("flatten", (0, 1), True),
    ("flatten", (-2, -1), True),
    ("squeeze", (0,), True),
    ("swapaxes", (0, 2), True),
    ("clamp", (-0.5, 0.5), True),
    ("clip", (-0.5, 0.5), True),
    ("diagonal", (0, 1, 2), True),
    ("pow", (3,), True),
    ("argmax", (), False),
    ("argmin", (), False),
]


def _ids(m):
    return f"{m[0]}{m[1]}"


@pytest.mark.parametrize(("name", "args", "differentiable"), METHODS, ids=[_ids(m) for m in METHODS])
def test_methods_match_torch(name, args, differentiable):
    x, xt = both(M0)
    out, out_t = getattr(x, name)(*args), getattr(xt, name)(*args)
    assert out.shape == tuple(out_t.shape)
    assert_close(out.numpy(), out_t.detach().numpy())
    if differentiable:
        w = np.arange(1.0, 1.0 + out.size).reshape(out.shape)
        ea.sum(out * w).backward()
        (out_t * torch.tensor(w)).sum().backward()
        assert_close(x.grad, tgrad(xt))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_argmax_and_argmin_along_an_axis_match_torch_and_numpy(axis):
    m = np.array([[[1.0, 5.0, 5.0], [7.0, 2.0, 7.0]], [[0.0, 0.0, -1.0], [3.0, 3.0, 3.0]]])  # ties: first
    t = ea.tensor(m)
    for name in ("argmax", "argmin"):
        got = getattr(t, name)(axis)
        np.testing.assert_array_equal(got.numpy(), getattr(torch.tensor(m), name)(axis).numpy())
        np.testing.assert_array_equal(got.numpy(), getattr(m, name)(axis))
        assert got.dtype.kind == "i"
        kept = getattr(t, name)(axis, keepdims=True)
        np.testing.assert_array_equal(kept.numpy(), getattr(m, name)(axis, keepdims=True))


def test_numpy_style_methods_match_numpy():
    t = ea.tensor(M0)
    for name, args in [
        ("ravel", ()),
        ("copy", ()),
        ("std", ()),
        ("std", (1,)),
        ("cumsum", ()),
        ("cumsum", (2,)),
        ("cumprod", (1,)),
        ("argsort", ()),
        ("trace", (0, 1, 2)),
        ("conj", ()),
        ("take", ([0, 5, -1],)),
        ("take", ([1, 0, 1], 2)),
        ("repeat", (2,)),
        ("repeat", ([1, 2, 0], 1)),
    ]:
        assert_close(getattr(t, name)(*args).numpy(), getattr(M0, name)(*args))
    assert_close(t.ptp().numpy(), np.ptp(M0))  # JAX's method (numpy 2 keeps the function only)
    assert_close(t.ptp(2).numpy(), np.ptp(M0, 2))
    # numpy's sort works in place; JAX's method (and einad's, a Tensor being immutable) returns it
    assert_close(t.sort(1).numpy(), np.sort(M0, 1))
    assert_close(t.sort(None).numpy(), np.sort(M0, None))
    assert t.block_until_ready() is t  # JAX's: einad's values are ready when returned
    pair = {"a": t, "b": [1.0]}
    assert ea.block_until_ready(pair) is pair  # and jax.block_until_ready, on any pytree
    top_two = lambda a: ea.sum(a.sort(axis=None)[-2:] * np.array([1.0, 2.0]))
    g = ea.grad(lambda a: top_two(a) + ea.sum(a.repeat(2, 0)) + a.ptp())(M0)
    top = np.argsort(M0, axis=None)
    want = np.full(M0.size, 2.0)  # every element twice in the repeat
    want[top[-2:]] += [1.0, 2.0]
    want[top[-1]] += 1.0  # the ptp's max
    want[top[0]] -= 1.0  # and its min
    assert_close(g, want.reshape(M0.shape))
    assert_close(t.take([0, 5]).numpy(), torch.tensor(M0).take(torch.tensor([0, 5])).numpy())
    for dtype in (np.float32, np.complex128, np.int8):
        a = M0.astype(dtype)
        assert (ea.tensor(a).nbytes, ea.tensor(a).itemsize) == (a.nbytes, a.itemsize)
    x = ea.tensor(M0, requires_grad=True)
    ea.sum(x.take([0, 0, 5])).backward()  # the flattened elements 0 (twice) and 5
    assert_close(x.grad, np.bincount([0, 0, 5], minlength=M0.size).reshape(M0.shape))
    z = ea.tensor([1.0 + 2.0j, -3.0j])
    assert_close(z.real.numpy(), [1.0, 0.0])
    assert_close(z.imag.numpy(), [2.0, -3.0])
    assert_close(z.conjugate().numpy(), z.numpy().conjugate())
    assert_close(t.mT.numpy(), M0.mT)
    assert_close(t.mT.numpy(), torch.tensor(M0).mT.numpy())
    x = ea.tensor(M0, requires_grad=True)
    ea.sum(x.mT * M0.mT).backward()  # d/dx sum(x^T_ij M^T_ij) = M
    assert_close(x.grad, M0)
    with pytest.raises(ValueError, match="2 dimensions"):
        _ = ea.tensor(X0).mT
    assert t.numel() == torch.tensor(M0).numel() == M0.size
    assert t.dim() == torch.tensor(M0).dim() == 3
    assert ea.tensor(np.ones(())).flatten().shape == tuple(torch.ones(()).flatten().shape) == (1,)


def test_tolist_as_torch_and_numpy():
    for data in (M0, np.array(2.5), np.array([1, 2, 3]), np.zeros((2, 0))):
        got = ea.tensor(data).tolist()
        assert got == data.tolist() == torch.tensor(data).tolist()
        assert type(got) is type(data.tolist())
    x = ea.tensor(X0, requires_grad=True)
    assert (x * 2.0).tolist() == (2 * X0).tolist()
    assert ea.grad(lambda t: ea.sum(t) * len(t.tolist()))(X0).tolist() == [3.0, 3.0, 3.0]  # a value, read
    with pytest.raises(ea.TracerError):
        ea.jit(lambda t: t.tolist())(X0)


def test_a_format_spec_formats_a_0d_tensor_as_torch_and_numpy():
    """f"{loss:.4f}" in a training loop: a 0-d tensor formats as its number; more elements refuse a
    spec (TypeError, as numpy's and torch's do); under jit the value is not known."""
    x, xt = both()
    loss, loss_t = (x * x).sum(), (xt * xt).sum()
    for spec in (".4f", ".3e", ">10.2f"):
        assert format(loss, spec) == format(loss_t, spec) == format(np.sum(X0 * X0), spec)
    assert format(loss, "") == str(loss)
    assert f"{ea.tensor(3):d}" == f"{np.array(3):d}" == "3"
    with pytest.raises(TypeError, match="format"):
        f"{ea.tensor(X0):.2f}"
    with pytest.raises(TypeError, match="format"):
        f"{torch.tensor(X0):.2f}"
    with pytest.raises(ea.TracerError):
        ea.jit(lambda t: ea.sum(t) if f"{ea.sum(t):.2f}" else t)(X0)


def test_in_asks_whether_an_element_equals_as_torch_and_numpy():
    x = ea.tensor(A, requires_grad=True)
    for value in (0.3, 0.31, -0.2, 2, A[1], [9.0, 0.8, 9.0], ea.tensor(1.1)):
        assert (value in x) == (value in A)
        if np.ndim(value) == 0:
            assert (value in x) == (float(value) in torch.tensor(A))
    with pytest.raises(ea.TracerError):
        ea.jit(lambda t: t * (0.3 in t))(A)


def test_view_and_flatten_refuse_what_torch_refuses():
    t = ea.tensor(M0)
    with pytest.raises(TypeError, match="astype"):
        t.view(np.float32)
    with pytest.raises(ValueError, match="start_dim"):
        t.flatten(2, 1)
    with pytest.raises(np.exceptions.AxisError):
        t.flatten(3)


def test_clone_is_a_differentiable_copy_with_its_own_array():
    x, xt = both()
    c, ct = x.clone(), xt.clone()
    assert c.requires_grad and not c.is_leaf and c.grad_fn is not None
    assert not np.shares_memory(np.asarray(c), np.asarray(x))
    ea.sum(c * c).backward()
    (ct * ct).sum().backward()
    assert_close(x.grad, tgrad(xt))
    d = ea.tensor(X0).clone()
    assert not d.requires_grad and not np.shares_memory(np.asarray(d), np.asarray(x))


# -- in place: zero_ and fill_ ----------------------------------------------------------------------


def test_zero_and_fill_never_write_into_an_array():
    user = np.array([1.0, 2.0, 3.0])
    t = ea.tensor(user)
    shared = t.detach()  # shares t's array
    before = np.asarray(t)
    assert t.zero_() is t
    assert_close(t.numpy(), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(user, [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(before, [1.0, 2.0, 3.0])  # the old array, untouched
    np.testing.assert_array_equal(shared.numpy(), [1.0, 2.0, 3.0])  # (torch would zero it too)
    assert t.fill_(7) is t and t.tolist() == [7.0, 7.0, 7.0] and t.dtype == np.float64
    n = ea.tensor([1, 2, 3])
    assert n.fill_(2.9).tolist() == torch.tensor([1, 2, 3]).fill_(2.9).tolist() == [2, 2, 2]


def test_zero_on_a_leaf_that_requires_grad_as_torch():
    x, xt = both()
    for t in (x, xt):
        with pytest.raises(RuntimeError, match="leaf.*in-place"):
            t.zero_()
    ea.sum(x * x).backward()
    with ea.no_grad():
        assert x.zero_() is x
    assert x.is_leaf and x.requires_grad and x.tolist() == [0.0, 0.0, 0.0]
    assert_close(x.grad, 2 * X0)  # kept


def test_zero_and_fill_on_computed_tensors_are_recorded_as_torch():
    x, xt = both()
    c, ct = both(np.array(2.0))
    for t, v in ((x, c), (xt, ct)):
        h = t * 2.0
        h.zero_()
        k = t * 3.0
        k.fill_(v)
        assert h.requires_grad and k.requires_grad
        (h * t + k * t).sum().backward()
    assert_close(x.grad, tgrad(xt))  # the zeroed h contributes nothing through its own graph
    assert_close(c.grad, tgrad(ct))
    # inside a transformation, as item assignment: the tensor takes the traced result
    assert_close(ea.grad(lambda t: ea.sum((t * 1.0).zero_() + t))(X0), np.ones(3))
    assert_close(ea.grad(lambda t: ea.sum((t * 1.0).fill_(t[0] * t[1])))(X0), [3 * X0[1], 3 * X0[0], 0.0])


# -- error messages in einad's spelling ------------------------------------------------------------


# each index kind, with a value of the indexed places' shape or one broadcast to them
WRITES = [
    (0, 5.0),
    (slice(1, None), 0),
    ((Ellipsis, 0), np.array([1.5, -2.0])),
    ((slice(None, None, 2), None), 1.5),
    ((np.int64(1), True), np.float64(2.5)),
    ((), 0),
    ([0, 1, 0, 1], np.array([[1.0, 2.0]])),  # repeated rows: the last write wins
    (np.array([[True, False], [False, True]]), -1.0),  # a constant mask
]


@pytest.mark.parametrize(("index", "value"), WRITES)
def test_item_assignment_inside_a_transformation_is_the_functional_update(index, value):
    """``h[idx] = v`` inside grad, jit, vmap and jvp is ``h = h.at[idx].set(v)``: the tensor
    takes the traced result (as ``h += 1`` gives a name a new one), so numpy and array API code
    that fills an array element by element differentiates. The same when the function writes
    into its own argument, whose gradient is still the argument's; the user's array is never
    written."""
    user = np.arange(1.0, 5.0).reshape(2, 2)

    def assigned(t):
        h = t * t
        h[index] = value
        return ea.sum(h * t)

    def functional(t):
        return ea.sum((t * t).at[index].set(value) * t)

    def into_argument(t):
        t[index] = value
        return ea.sum(t * t * t)

    def into_argument_functional(t):
        t = t.at[index].set(value)
        return ea.sum(t * t * t)

    stacked = np.stack([user, -user])
    for f, ref in ((assigned, functional), (into_argument, into_argument_functional)):
        want = ea.grad(ref)(user)
        assert_close(ea.grad(f)(user), want)
        assert_close(ea.jit(ea.grad(f))(user), want)
        assert_close(ea.grad(ea.jit(f))(user), want)
        assert_close(ea.vmap(ea.grad(f))(stacked), ea.vmap(ea.grad(ref))(stacked))
        assert_close(ea.jvp(f, (user,), (np.ones((2, 2)),))[1], np.sum(want))
        assert_close(ea.hessian(f)(user), ea.hessian(ref)(user))
    np.testing.assert_array_equal(user, np.arange(1.0, 5.0).reshape(2, 2))
    with pytest.raises(AssertionError):  # (the write matters: without it the gradient differs)
        assert_close(ea.grad(into_argument)(user), ea.grad(lambda t: ea.sum(t * t * t))(user))


def test_a_buffer_filled_with_traced_values_differentiates_as_torch():
    """The everyday numpy spelling of a recurrence, a buffer filled one element at a time from
    values computed from the input, differentiates as torch's autograd does, eagerly, staged and
    batched, and against central differences."""

    def run(x, lib):
        out = lib.zeros(4, dtype=lib.float64) if lib is torch else ea.tensor(np.zeros(4))
        out[0] = x[0]
        for i in range(1, 4):
            prev = out[i - 1] * 1.0  # (torch: not a view of `out`, which the next write changes)
            out[i] = lib.sin(prev) * x[i % 3] + prev**2
        out[1:3] += x[1]
        return (out * out).sum()

    x, xt = both()
    run(xt, torch).backward()
    g = ea.grad(lambda x: run(x, ea))(X0)
    assert_close(g, tgrad(xt))
    assert_close(ea.jit(ea.grad(lambda x: run(x, ea)))(X0), g)
    assert_close(ea.vmap(ea.grad(lambda x: run(x, ea)))(np.stack([X0, X0])), np.stack([g, g]))
    ea.gradcheck(lambda x: run(x, ea), X0)
    ea.sum(run(x, ea)).backward()  # and imperatively, as torch
    assert_close(x.grad, tgrad(xt))


def test_a_write_into_an_argument_does_not_reach_the_function_it_came_from():
    """``vjp`` and ``value_and_grad`` of a function that writes into its argument and returns it
    give the written value and the argument's own gradient; a jitted one returns the written
    value at every call (the program computes it, not the trace). The write is the argument's
    own, as in numpy: the caller's array is never written."""
    x = np.arange(1.0, 5.0)

    def f(t):
        t[1:3] += 1.0
        t[0] = 2 * t[3]
        return t

    out, pull = ea.vjp(f, x)
    assert_close(out, [8.0, 3.0, 4.0, 4.0])
    assert_close(pull(np.ones(4))[0], [0.0, 1.0, 1.0, 3.0])
    g = ea.jit(f)
    assert_close(g(x), [8.0, 3.0, 4.0, 4.0])
    assert_close(g(x + 1), [10.0, 4.0, 5.0, 5.0])
    # the caller's name for the same object sees the write, as numpy's: f(t) * t is w * w for the
    # written w = (2 t3, t1 + 1, t2 + 1, t3)
    value, grad = ea.value_and_grad(lambda t: ea.sum(f(t) * t))(x)
    assert_close(value, 64.0 + 9.0 + 16.0 + 16.0)
    assert_close(grad, [0.0, 2 * 3.0, 2 * 4.0, 2 * 8.0 * 2 + 2 * 4.0])
    np.testing.assert_array_equal(x, np.arange(1.0, 5.0))


def test_a_custom_rules_argument_written_into_leaves_the_callers_value_alone():
    """A custom function's body and rules receive their own Tensors (`core.alias`): writing into
    one changes what that code sees, not the traced value einad keeps for the caller (staged
    under jit, the same object held both, and the caller's sum read the write)."""

    @ea.custom_vjp
    def f(x):
        x[0] = 0.0
        return ea.sum(x * x)

    def fwd(x):
        y = x * 1.0
        y[0] = 0.0
        x[1] = 0.0  # a write into the argument: the caller's x below is unchanged
        return ea.sum(y * y), y

    def bwd(y, g):
        g = g * 1.0
        y[2] = y[2] * 1.0  # a write into a residual
        return (2 * g * y,)

    f.defvjp(fwd, bwd)
    x = np.arange(1.0, 4.0)

    def h(x):
        return f(x) + ea.sum(x)

    want = (np.array(4.0 + 9.0 + 6.0), np.array([1.0, 5.0, 7.0]))
    for vg in (ea.value_and_grad(h), ea.jit(ea.value_and_grad(h)), ea.value_and_grad(ea.jit(h))):
        value, grad = vg(x)
        assert_close(value, want[0])
        assert_close(grad, want[1])
    step = ea.checkpoint(lambda x: (x.__setitem__(0, 0.0), ea.sum(x * x))[1])
    assert_close(ea.jit(ea.value_and_grad(lambda x: step(x) + ea.sum(x)))(x)[0], want[0])


def test_a_tensor_made_outside_and_written_inside_a_transformation_raises_when_used_after():
    """A global buffer written inside ``grad`` holds a traced value afterwards, as a leaked
    tracer does in JAX: using it raises, naming the transformation."""
    buf = ea.tensor(np.zeros(3))

    def f(x):
        buf[0] = x[0]
        return ea.sum(buf * x)

    assert_close(ea.grad(f)(X0), [2 * X0[0], 0.0, 0.0])
    with pytest.raises(ea.TracerError, match="used after that transformation returned"):
        buf + 1.0


@pytest.mark.parametrize(
    ("index", "value"),
    [
        ((0, 1), 9.0),
        ((slice(None), 2), np.array([7.0, 8.0])),  # a column, a value per row
        ((Ellipsis, 0), 2.5),
        (([1, 0], [2, 2]), np.array([-1.0, -2.0])),  # integer arrays
        ((np.array([[True, False, True], [False, True, False]]),), 0.5),  # a mask
        ((slice(None, None, 2), slice(1, None)), np.ones((1, 2))),
        ((), 3.0),  # every element
    ],
)
def test_item_assignment_on_a_tensor_is_numpys_and_torchs(index, value):
    """``t[idx] = v`` on a Tensor outside transformations: numpy's values, the tensor itself given
    the new value (as ``t += 1``), the array it was made from never written; recorded as torch
    records it, and a leaf that requires grad refused outside no_grad."""
    user = np.arange(6.0).reshape(2, 3)
    t = ea.tensor(user)
    same = t
    t[index] = value
    want = user.copy()
    want[index] = value
    np.testing.assert_array_equal(same.numpy(), want)
    np.testing.assert_array_equal(user, np.arange(6.0).reshape(2, 3))  # (never written)
    # the graph: h's replaced elements get no gradient from h, the assigned value's do flow
    x, xt = ea.tensor(user, requires_grad=True), torch.tensor(user, requires_grad=True)
    for w in (x, xt):
        h = w * 2.0
        h[index] = w[index] * 5.0
        (h * h).sum().backward()
    assert_close(x.grad, xt.grad.numpy())
    with pytest.raises(RuntimeError, match="leaf.*in-place"):
        x[index] = value
    with ea.no_grad():
        x[index] = value
    assert x.is_leaf and x.requires_grad
    np.testing.assert_array_equal(x.numpy(), want)


def test_item_assignment_casts_as_numpy():
    i = ea.tensor(np.arange(3))
    i[0] = 2.7
    i[1:] = np.array([-1.9, 5.5])
    assert i.dtype == np.int64 and i.tolist() == [2, -1, 5]
    f32 = ea.tensor(np.zeros(2, np.float32))
    f32[0] = np.float64(1.25)
    assert f32.dtype == np.float32 and f32.tolist() == [1.25, 0.0]


def test_backward_on_torch_tensors_that_require_grad_names_ea_tensor():
    a = torch.tensor(A, requires_grad=True)
    b = torch.tensor(X0, requires_grad=True)
    with pytest.raises(RuntimeError, match=r"torch's own requires_grad.*ea\.tensor\(t, requires_grad=True\)"):
        ea.einsum("ij,j->", a, b).backward()
    w = ea.tensor(a, requires_grad=True)  # the einad spelling: torch's graph is dropped
    ea.einsum("ij,j->", w, b).backward()
    assert isinstance(w.grad, torch.Tensor) and not w.grad.requires_grad
    assert_close(w.grad.numpy(), np.outer(np.ones(3), X0))
    assert a.grad is None  # torch's own graph was not used


def test_backward_inside_a_transformation_says_what_to_do_instead():
    def f(x):
        y = ea.sum(x * x)
        y.backward()
        return y

    with pytest.raises(RuntimeError, match="einad.grad"):
        ea.grad(f)(X0)


def test_torch_tensors_that_require_grad_keep_no_torch_graph():
    """A torch tensor made with torch's own ``requires_grad=True``, given to einad as an input, a
    constant, a tangent or a cotangent: einad differentiates, torch records nothing. Every
    transformation's results required grad with a grad_fn (torch recorded einad's operations), so
    ``.numpy()`` on a gradient raised RuntimeError and the torch graph was kept alive."""
    x0 = torch.tensor(X0, requires_grad=True)
    c = torch.tensor(V, requires_grad=True)
    f = lambda v: ea.sum(ea.sin(v) * v * c)
    ones = torch.ones(3, dtype=torch.float64, requires_grad=True)
    results = {
        "grad": ea.grad(f)(x0),
        "value_and_grad": ea.value_and_grad(f)(x0),
        "vjp": ea.vjp(ea.sin, x0)[1](ones),
        "jvp": ea.jvp(ea.sin, (x0,), (ones,)),
        "jacfwd": ea.jacfwd(ea.sin)(x0),
        "jacrev": ea.jacrev(ea.sin)(x0),
        "hessian": ea.hessian(f)(x0),
        "vmap": ea.vmap(lambda v: v * c)(x0),
        "jit": ea.jit(f)(x0),
        "jit-grad": ea.jit(ea.grad(f))(x0),
        "op": ea.sin(x0)._value,
    }
    for name, out in results.items():
        for leaf in ea.tree_flatten(out)[0]:
            assert not leaf.requires_grad and leaf.grad_fn is None, name
            leaf.numpy()  # torch refuses this on a tensor that requires grad
    xt = x0.detach().clone().requires_grad_()
    (torch.sin(xt) * xt * c.detach()).sum().backward()
    torch.testing.assert_close(results["grad"], xt.grad)
    assert x0.grad is None and c.grad is None
