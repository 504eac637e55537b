"""ea.vmap: JAX's in_axes/out_axes, per-example gradients, composition with jit and itself."""

import numpy as np
import pytest
from conftest import assert_close

import einad as ea

pytestmark = pytest.mark.usefixtures("jit_mode")

RNG = np.random.default_rng(0)
A = RNG.standard_normal((5, 3, 4))
B = RNG.standard_normal((4, 2))
V = RNG.standard_normal((5, 4))


def test_a_mapped_einsum_is_one_contraction_with_a_letter_more():
    f = ea.vmap(lambda a, b: ea.einsum("ij,jk->ik", a, b), in_axes=(0, None))
    assert_close(f(A, B), np.einsum("nij,jk->nik", A, B))
    graph = ea.make_graph(f)(A, B)
    assert [e.op for e in graph.equations] == ["einsum"], str(graph)
    assert graph.einsums == ["aij,jk->aik"]


@pytest.mark.parametrize("in_axes", [0, (0, 0), [0, 0], (0, None), (1, None), (-1, None), (None, 1)])
def test_in_axes(in_axes):
    x = RNG.standard_normal((4, 6))
    y = RNG.standard_normal((4, 6))
    f = ea.vmap(lambda x, y: ea.sum(ea.sin(x)) * ea.sum(y**2), in_axes=in_axes)
    spec = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes, in_axes)
    want = []
    size = x.shape[spec[0]] if spec[0] is not None else y.shape[spec[1]]
    for n in range(size):
        xi = x if spec[0] is None else np.take(x, n, axis=spec[0])
        yi = y if spec[1] is None else np.take(y, n, axis=spec[1])
        want.append(np.sum(np.sin(xi)) * np.sum(yi**2))
    assert_close(f(x, y), np.array(want))


def test_out_axes_and_pytrees():
    params = {"w": RNG.standard_normal((3, 4)), "b": RNG.standard_normal(4)}
    xs = RNG.standard_normal((3, 7))  # 7 examples along axis 1

    def f(p, x):
        return {"y": x @ p["w"] + p["b"], "c": ea.sum(p["w"])}

    out = ea.vmap(f, in_axes=({"w": None, "b": None}, 1), out_axes={"y": 1, "c": None})(params, xs)
    assert_close(out["y"], (xs.T @ params["w"] + params["b"]).T)
    assert_close(out["c"], params["w"].sum())
    with pytest.raises(ValueError, match="out_axes"):
        ea.vmap(lambda x: x * 2, out_axes=None)(np.ones(3))


def test_per_example_gradients():
    def loss(w, x):
        return ea.sum(ea.tanh(x @ w) ** 2)

    w = RNG.standard_normal((4, 2))
    per_example = ea.vmap(ea.grad(loss), in_axes=(None, 0))(w, V)
    for n in range(V.shape[0]):
        assert_close(per_example[n], ea.grad(loss)(w, V[n]))
    assert per_example.shape == (5, 4, 2)


def test_vmap_composes_with_jit_grad_and_itself():
    f = lambda x: ea.sum(ea.exp(x) * x)
    xs = RNG.standard_normal((3, 4, 2))
    want = np.exp(xs) * (xs + 1)
    assert_close(ea.vmap(ea.vmap(ea.grad(f)))(xs), want)
    assert_close(ea.jit(ea.vmap(ea.grad(f)))(xs), want)
    assert_close(ea.vmap(ea.jit(ea.grad(f)))(xs), want)
    # the gradient of a mapped function sums over the examples
    assert_close(ea.grad(lambda xs: ea.sum(ea.vmap(f)(xs)))(xs), want)


def test_errors():
    with pytest.raises(ValueError, match="one length"):
        ea.vmap(lambda x, y: x + y)(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="at least one"):
        ea.vmap(lambda x: x, in_axes=None)(np.ones(3))
    with pytest.raises(ValueError, match="in_axes"):
        ea.vmap(lambda x, y: x + y, in_axes=(0, 0, 0))(np.ones(3), np.ones(3))
    with pytest.raises(np.exceptions.AxisError):
        ea.vmap(lambda x: x, in_axes=2)(np.ones((3, 2)))


def test_results_are_numpy_at_top_level_and_float32_stays():
    out = ea.vmap(lambda x: x * 2.0)(np.ones((2, 3), np.float32))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
