"""einad.flatten: ravel_pytree as JAX's jax.flatten_util.ravel_pytree for real leaves (values,
order, promoted dtype, unravel's dtypes), complex leaves split into real and imaginary parts,
derivatives through both directions under every transformation, and scipy's L-BFGS-B on it."""

from collections import OrderedDict, namedtuple
from itertools import combinations_with_replacement

import numpy as np
import pytest

import einad as ea
from einad.flatten import result_type
from tests.support.numerics import assert_close

pytestmark = pytest.mark.usefixtures("jit_mode")  # each test eagerly and with every transformation jitted

Params = namedtuple("Params", "w b")

REAL_DTYPES = [
    np.bool_,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
]
ALL_DTYPES = [*REAL_DTYPES, np.complex64, np.complex128]


def real_trees():
    """Real pytrees of every node kind, with mixed dtypes, scalars and empty leaves."""
    r = np.random.default_rng(1)
    return [
        {"b": r.standard_normal((2, 3)), "a": np.arange(4, dtype=np.int32), "c": None},
        [Params(w=r.standard_normal(3).astype(np.float32), b=np.float32(0.5)), (2.0, 3)],
        OrderedDict([("z", r.standard_normal(2)), ("a", np.zeros((0, 3)))]),
        (np.array(True), np.arange(3, dtype=np.uint8), np.arange(2, dtype=np.int8)),
        {"x": [np.float16(1.5), r.standard_normal((1, 2)).astype(np.float16)], "y": ()},
        r.standard_normal((3, 2)),
    ]


@pytest.fixture
def jax():
    jax = pytest.importorskip("jax", reason="JAX is the reference of ravel_pytree")
    with jax.enable_x64(True):
        yield jax


@pytest.mark.parametrize("k", range(len(real_trees())))
def test_ravel_matches_jax_on_real_trees(jax, k):
    from jax.flatten_util import ravel_pytree as jax_ravel

    tree = real_trees()[k]
    flat, unravel = ea.ravel_pytree(tree)
    ref, ref_unravel = jax_ravel(tree)
    assert flat.dtype == ref.dtype and flat.shape == ref.shape
    np.testing.assert_array_equal(flat.numpy(), np.asarray(ref))
    back, ref_back = unravel(flat), ref_unravel(ref)
    assert ea.tree_flatten(back)[1] == ea.tree_flatten(tree)[1]  # namedtuples, dicts, None rebuilt
    for a, b, leaf in zip(
        ea.tree_flatten(back)[0], jax.tree_util.tree_leaves(ref_back), ea.tree_flatten(tree)[0]
    ):
        assert a.dtype == b.dtype == np.result_type(leaf) and a.shape == np.shape(leaf)
        np.testing.assert_array_equal(a.numpy(), np.asarray(leaf))


def test_promotion_is_jax_lattice_for_every_pair(jax):
    import jax.numpy as jnp

    for a, b in combinations_with_replacement(ALL_DTYPES, 2):
        assert result_type([np.dtype(a), np.dtype(b)]) == jnp.promote_types(a, b), (a, b)
    for triple in [
        (np.uint64, np.int8, np.float16),
        (np.bool_, np.uint32, np.int8),
        (np.uint8, np.complex64, np.int64),
    ]:
        assert result_type([np.dtype(d) for d in triple]) == jnp.result_type(*triple), triple


def test_promotion_examples_where_jax_and_numpy_differ():
    # numpy would give float64 for the first two and int64 for the third's int8 + uint8 -> int16 anyway
    assert ea.ravel_pytree([np.ones(2, np.float32), np.ones(2, np.int64)])[0].dtype == np.float32
    assert ea.ravel_pytree([np.ones(1, np.float16), np.ones(1, np.int32)])[0].dtype == np.float16
    assert ea.ravel_pytree([np.ones(1, np.uint64), np.ones(1, np.int64)])[0].dtype == np.float64
    assert ea.ravel_pytree([np.ones(1, np.complex64), np.ones(1, np.int64)])[0].dtype == np.float32


def test_unravel_of_one_dtype_takes_the_vector_dtype_as_jax(jax):
    from jax.flatten_util import ravel_pytree as jax_ravel

    tree = {"a": np.ones(2, np.float32), "b": np.zeros((), np.float32)}
    v = np.arange(3.0)  # float64, as scipy hands it back
    back, ref = ea.ravel_pytree(tree)[1](v), jax_ravel(tree)[1](v)
    assert back["a"].dtype == ref["a"].dtype == np.float64
    assert_close(back["a"].numpy(), [0.0, 1.0])


def test_unravel_of_several_dtypes_casts_back_and_checks_the_vector(jax):
    from jax.flatten_util import ravel_pytree as jax_ravel

    tree = [np.ones(2, np.float32), np.arange(2, dtype=np.int16)]
    flat, unravel = ea.ravel_pytree(tree)
    assert flat.dtype == jax_ravel(tree)[0].dtype == np.float32
    back = unravel(np.array([0.5, 1.5, 2.0, 3.0], np.float32))
    assert [x.dtype for x in back] == [np.float32, np.int16]
    np.testing.assert_array_equal(back[1].numpy(), [2, 3])
    with pytest.raises(TypeError, match="float32"):
        unravel(np.zeros(4))  # float64: JAX refuses it too
    with pytest.raises(TypeError):
        jax_ravel(tree)[1](np.zeros(4))


def test_bad_vectors_and_leaves_are_refused():
    _, unravel = ea.ravel_pytree({"a": np.ones((2, 2)), "z": np.ones(3, complex)})
    assert unravel.size == 10
    with pytest.raises(ValueError, match="length 10"):
        unravel(np.zeros(9))
    with pytest.raises(ValueError, match="length 10"):
        unravel(np.zeros((2, 5)))
    with pytest.raises(TypeError, match="real vector"):
        unravel(np.zeros(10, complex))
    with pytest.raises(TypeError):
        ea.ravel_pytree({"s": np.array(["a", "b"])})


def test_empty_trees_as_jax(jax):
    from jax.flatten_util import ravel_pytree as jax_ravel

    for tree in [{}, (), [None, {"a": ()}]]:
        flat, unravel = ea.ravel_pytree(tree)
        ref = jax_ravel(tree)[0]
        assert flat.shape == ref.shape == (0,) and flat.dtype == ref.dtype == np.float32
        assert unravel(flat) == tree


def test_complex_leaves_are_split_into_real_then_imaginary_parts():
    z = np.array([[1 + 2j, 3 - 4j]], np.complex64)
    tree = {"w": np.array([0.5, -1.0], np.float32), "z": z}
    flat, unravel = ea.ravel_pytree(tree)
    assert flat.dtype == np.float32  # complex64's parts
    np.testing.assert_array_equal(flat.numpy(), [0.5, -1.0, 1, 3, 2, -4])
    back = unravel(flat)
    assert back["z"].dtype == np.complex64 and back["z"].shape == (1, 2)
    np.testing.assert_array_equal(back["z"].numpy(), z)
    # one dtype throughout: unravel follows the vector's precision, as JAX's does
    assert ea.ravel_pytree(z)[1](flat.numpy().astype(np.float64)[2:]).dtype == np.complex128
    # several dtypes: each leaf cast back
    mixed = ea.ravel_pytree([z, np.ones(1)])
    assert mixed[0].dtype == np.float64 and mixed[1](mixed[0])[0].dtype == np.complex64


def test_unravel_is_hashable_and_a_static_argument():
    a = ea.ravel_pytree({"x": np.ones(2), "y": np.ones(1, complex)})[1]
    b = ea.ravel_pytree({"x": np.zeros(2), "y": np.zeros(1, complex)})[1]
    c = ea.ravel_pytree({"x": np.zeros(3), "y": np.zeros(1, complex)})[1]
    assert a == b and hash(a) == hash(b) and a != c

    f = ea.jit(lambda v, un: ea.sum(un(v)["x"] * 2), static_argnums=1)
    assert float(f(np.arange(4.0), a)) == 2.0
    assert float(f(np.arange(4.0), b)) == 2.0 and f.cache_size() == 1


def loss(tree):
    """A real function of a real and a complex leaf, not holomorphic in the complex one."""
    w, z = tree["w"], tree["z"]
    return ea.sum(ea.sin(w) * w) + ea.sum(ea.abs(z * w[:2]) ** 2) + ea.sum(ea.real(z**3))


def loss_np(w, zr, zi):
    z = zr + 1j * zi
    return np.sum(np.sin(w) * w) + np.sum(np.abs(z * w[:2]) ** 2) + np.sum(np.real(z**3))


def central(f, v, eps=1e-6):
    e = np.eye(v.size)
    return np.array([(f(v + eps * d) - f(v - eps * d)) / (2 * eps) for d in e])


def test_gradient_through_unravel_real_and_complex():
    w = np.array([0.3, -0.7, 1.1])
    z = np.array([0.5 - 0.2j, -1.0 + 0.4j])
    flat, unravel = ea.ravel_pytree({"w": w, "z": z})
    v = flat.numpy()
    g = ea.grad(lambda v: loss(unravel(v)))(v)
    ref = central(lambda v: loss_np(v[:3], v[3:5], v[5:]), v)
    assert_close(g, ref, rtol=1e-6, atol=1e-7)
    # forward mode sees the same derivative
    d = np.linspace(-1, 1, v.size)
    _, tangent = ea.jvp(lambda v: loss(unravel(v)), (v,), (d,))
    assert_close(tangent, ref @ d, rtol=1e-6, atol=1e-7)
    # and the pytree gradient, raveled, is the flat gradient with the complex leaf's JAX
    # convention undone: d/dRe z - i d/dIm z has real part d/dRe z, imaginary part -d/dIm z
    tg = ea.grad(loss)({"w": w, "z": z})
    assert_close(ea.ravel_pytree({"w": tg["w"], "z": np.conj(tg["z"])})[0].numpy(), g)


def test_gradient_through_unravel_matches_jax(jax):
    import jax.numpy as jnp
    from jax.flatten_util import ravel_pytree as jax_ravel

    tree = {"w": np.array([0.3, -0.7, 1.1], np.float32), "b": Params(w=np.array(0.25), b=np.arange(3))}
    f_ea = lambda t: ea.sum(ea.tanh(t["w"]) * t["b"].w) + ea.sum(t["w"] * t["b"].b)
    f_jax = lambda t: jnp.sum(jnp.tanh(t["w"]) * t["b"].w) + jnp.sum(t["w"] * t["b"].b)
    flat, unravel = ea.ravel_pytree(tree)
    ref, ref_unravel = jax_ravel(tree)
    assert flat.dtype == ref.dtype == np.float64  # float32, float64 and int64 promote to float64
    v = flat.numpy()
    g = ea.grad(lambda v: f_ea(unravel(v)))(v)
    g_ref = jax.grad(lambda v: f_jax(ref_unravel(v)))(jnp.asarray(v))
    assert_close(g, np.asarray(g_ref), rtol=1e-6)  # the int leaf's entries get 0, as JAX's
    assert g[1:4].tolist() == [0.0, 0.0, 0.0]  # leaves in order b.w, b.b (the ints), w


def test_ravel_of_traced_leaves_is_differentiable():
    w = np.array([0.3, -0.7])
    z = np.array([0.5 - 0.2j, -1.0 + 0.4j, 2.0j])

    def sq(tree):
        flat, _ = ea.ravel_pytree(tree)
        return ea.sum(flat**2)  # |w|^2 + |z|^2

    g = ea.grad(sq)({"w": w, "z": z})
    assert_close(g["w"], 2 * w)
    assert_close(g["z"], 2 * np.conj(z))  # JAX's convention: d/dRe - i d/dIm
    assert ea.gradcheck(lambda w, zr: ea.ravel_pytree([w, zr + 1j * w[:1]])[0] ** 3, w, z.real)


def test_round_trip_inside_jit_and_jvp():
    tree = [np.array([1.0, 2.0]), {"z": np.array([1 + 1j])}]

    def f(tree):
        flat, unravel = ea.ravel_pytree(tree)
        back = unravel(flat * 2)
        return ea.sum(back[0]) + ea.sum(ea.imag(back[1]["z"]))

    assert float(ea.jit(f)(tree)) == 8.0
    _, t = ea.jvp(f, (tree,), ([np.ones(2), {"z": np.array([1j])}],))
    assert_close(t, 6.0)


def test_scipy_lbfgsb_on_a_tree_with_a_complex_leaf():
    opt = pytest.importorskip("scipy.optimize", reason="scipy's minimize is the optimizer used")
    r = np.random.default_rng(3)
    a = r.standard_normal((6, 3)) + 1j * r.standard_normal((6, 3))
    y = r.standard_normal(6) + 1j * r.standard_normal(6)
    c = r.standard_normal(2)

    def objective(p):  # least squares in a complex z, plus a real quadratic in w
        return ea.sum(ea.abs(ea.matmul(a, p["z"]) - y) ** 2) + ea.sum((p["w"] - c) ** 2)

    x0, unravel = ea.ravel_pytree({"w": np.zeros(2), "z": np.zeros(3, complex)})
    vg = ea.value_and_grad(lambda v: objective(unravel(v)))

    def fun(v):
        value, grad = vg(v)
        return float(value), np.asarray(grad, dtype=np.float64)

    res = opt.minimize(fun, x0.numpy(), jac=True, method="L-BFGS-B", options={"gtol": 1e-10})
    best = unravel(res.x)
    assert_close(best["z"].numpy(), np.linalg.lstsq(a, y, rcond=None)[0], rtol=1e-5, atol=1e-6)
    assert_close(best["w"].numpy(), c, atol=1e-6)
