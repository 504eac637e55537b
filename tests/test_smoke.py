import numpy as np

import einad as ea


def test_worked_scalar_example():
    f = lambda x1, x2: ea.log(x1) + x1 * x2 - ea.sin(x2)
    g1, g2 = ea.grad(f, argnums=(0, 1))(2.0, 5.0)
    assert np.isclose(g1, 5.5)
    assert np.isclose(g2, 2 - np.cos(5.0))


def test_matmul_gradient_is_permuted_einsum():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    ga, gb = ea.grad(lambda a, b: ea.sum(ea.einsum("ij,jk->ik", a, b) ** 2), (0, 1))(a, b)
    g = 2 * a @ b
    np.testing.assert_allclose(ga, np.einsum("ik,jk->ij", g, b))
    np.testing.assert_allclose(gb, np.einsum("ij,ik->jk", a, g))
