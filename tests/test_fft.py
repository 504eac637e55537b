"""einad.fft: numpy.fft's functions, one transform primitive whose derivatives are transforms.

Values and dtypes against numpy for every function (crops, pads, axes, norms, float32);
gradients and tangents against JAX's for every case (real and complex inputs, one JAX process
for all of them); closed forms (Parseval's theorem, the inverse undoing the transform) to second
order; central differences in both modes; jit and vmap; every array library; numpy's functions
on Tensors; clear errors."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import einad as ea
from tests.support.checks import check_lib
from tests.support.jax_reference import jax_reference
from tests.support.numerics import assert_close

RNG = np.random.default_rng(7)


def _real(*shape):
    return RNG.normal(size=shape)


def _complex(*shape):
    return RNG.normal(size=shape) + 1j * RNG.normal(size=shape)


# (id, function name, its keyword arguments, the input)
CASES = [
    ("fft", "fft", {}, _complex(4, 6)),
    ("fft-real-padded", "fft", {"n": 8}, _real(3, 5)),
    ("fft-cropped-axis0", "fft", {"n": 3, "axis": 0}, _complex(5, 2)),
    ("ifft-ortho", "ifft", {"norm": "ortho"}, _complex(5)),
    ("ifft-forward", "ifft", {"norm": "forward", "axis": 0}, _complex(4, 3)),
    ("rfft-even", "rfft", {}, _real(3, 8)),
    ("rfft-odd-forward", "rfft", {"n": 7, "norm": "forward"}, _real(2, 6)),
    ("irfft-even", "irfft", {}, _complex(3, 5)),
    ("irfft-odd", "irfft", {"n": 9}, _complex(2, 5)),
    ("irfft-ortho-axis0", "irfft", {"axis": 0, "norm": "ortho"}, _complex(4, 3)),
    ("fftn-axes-s", "fftn", {"s": (4, 6), "axes": (0, 2)}, _complex(3, 2, 5)),
    ("ifftn", "ifftn", {}, _complex(3, 4)),
    ("rfftn", "rfftn", {}, _real(4, 6)),
    ("rfftn-odd-moved", "rfftn", {"axes": (1, 0)}, _real(5, 4)),
    ("irfftn-s", "irfftn", {"s": (4, 7), "axes": (0, 1)}, _complex(4, 4)),
    ("fft2", "fft2", {"norm": "ortho"}, _complex(2, 3, 4)),
    ("ifft2", "ifft2", {"axes": (0, 1)}, _complex(3, 4)),
    ("rfft2", "rfft2", {}, _real(2, 4, 6)),
    ("irfft2", "irfft2", {"s": (3, 6)}, _complex(3, 4)),
    ("hfft", "hfft", {"n": 8}, _complex(5)),
    ("hfft-ortho", "hfft", {"norm": "ortho"}, _complex(2, 4)),
    ("ihfft", "ihfft", {}, _real(7)),
    ("fftshift", "fftshift", {"axes": 1}, _real(3, 5)),
    ("ifftshift", "ifftshift", {}, _complex(4, 5)),
]
IDS = [c[0] for c in CASES]


def _weights(y):
    """Fixed weights of a case's output: the loss is ``Σ Re(y)·w1 + Σ Im(y)·w2``."""
    rng = np.random.default_rng(y.size)
    return rng.normal(size=y.shape), rng.normal(size=y.shape)


def reference(jax, cases):
    """JAX's value, gradient of the loss and tangent for each case (run by `jax_reference`), as
    one jitted program: one compilation (1.6 s), where JAX's eager calls compile each operation
    of each case's shapes (22 s)."""
    jnp = jax.numpy

    def everything():
        out = []
        for name, kwargs, x, w1, w2, t in cases:

            def f(v, name=name, kwargs=kwargs):
                return getattr(jnp.fft, name)(v, **kwargs)

            def loss(v, f=f, w1=w1, w2=w2):
                y = f(v)
                return jnp.sum(jnp.real(y) * w1) + jnp.sum(jnp.imag(y) * w2)

            out += [f(x), jax.grad(loss)(x), jax.jvp(f, (x,), (t,))[1]]
        return out

    return jax.jit(everything)()


@pytest.fixture(scope="module")
def jax_results():
    cases = []
    for _, name, kwargs, x in CASES:
        w1, w2 = _weights(getattr(np.fft, name)(x, **kwargs))
        tangent = np.ones_like(x) * (0.5 - 0.25j if x.dtype.kind == "c" else 0.5)
        cases.append((name, kwargs, x, w1, w2, tangent))
    return jax_reference("tests.test_fft", "reference", cases), cases


def _loss(name, kwargs, w1, w2):
    def loss(v):
        y = getattr(ea.fft, name)(v, **kwargs)
        return ea.sum(ea.real(y) * w1) + ea.sum(ea.imag(y) * w2)

    return loss


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_values_and_dtypes_are_numpys(k):
    _, name, kwargs, x = CASES[k]
    for single in (False, True):
        v = x.astype({"f": np.float32, "c": np.complex64}[x.dtype.kind]) if single else x
        want = getattr(np.fft, name)(v, **kwargs)
        got = getattr(ea.fft, name)(v, **kwargs)
        assert got.dtype == want.dtype and got.shape == want.shape  # complex64 from float32, as numpy 2
        tol = 1e-5 if single else 1e-12
        assert_close(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_gradients_and_tangents_are_jaxs(k, jax_results):
    ref, cases = jax_results
    name, kwargs, x, w1, w2, t = cases[k]
    want_y, want_g, want_t = ref[3 * k : 3 * k + 3]
    assert_close(getattr(ea.fft, name)(x, **kwargs), want_y, rtol=1e-10, atol=1e-12)
    g = ea.grad(_loss(name, kwargs, w1, w2))(x)
    assert g.dtype == x.dtype  # a real input's gradient is real
    assert_close(g, want_g, rtol=1e-10, atol=1e-12)
    _, tangent = ea.jvp(lambda v: getattr(ea.fft, name)(v, **kwargs), (x,), (t,))
    assert_close(tangent, want_t, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", range(len(CASES)), ids=IDS)
def test_central_differences_in_both_modes(k):
    _, name, kwargs, x = CASES[k]
    assert ea.gradcheck(lambda v: getattr(ea.fft, name)(v, **kwargs), x)


def test_parsevals_theorem_to_second_order():
    """``Σ |fft(x)|² = n Σ |x|²``: the gradient is ``2 n x`` and the Hessian ``2 n I`` (real
    input), in every mode; ``irfft(rfft(x))`` is `x`, so its gradient is the weights."""
    x = _real(6)
    energy = lambda v: ea.sum(ea.abs(ea.fft.fft(v)) ** 2)
    assert_close(energy(x), 6 * np.sum(x**2))
    assert_close(ea.grad(energy)(x), 12 * x)
    assert_close(ea.hessian(energy)(x), 12 * np.eye(6))
    assert_close(ea.jacfwd(ea.grad(energy))(x), 12 * np.eye(6))
    w = _real(7)
    for n in (6, 7):
        v = _real(n)
        roundtrip = lambda v, n=n: ea.sum(ea.fft.irfft(ea.fft.rfft(v), n=n) * w[:n])
        assert_close(ea.grad(roundtrip)(v), w[:n])
    z = _complex(3, 4)
    ortho = lambda v: ea.sum(ea.abs(ea.fft.fft2(v, norm="ortho")) ** 2)
    # unitary: Σ|y|² = Σ|z|², whose gradient in JAX's convention is 2 conj(z) (jax.grad of |z|²)
    assert_close(ea.grad(ortho)(z), 2 * np.conj(z))


def test_convolution_by_the_fft_matches_a_direct_one_and_its_gradient():
    """A circular convolution through rfft and irfft, differentiated in both operands, against
    the same convolution written as sums of rolls."""
    a, b = _real(8), _real(8)

    def by_fft(a, b):
        return ea.fft.irfft(ea.fft.rfft(a) * ea.fft.rfft(b), n=8)

    def direct(a, b):
        return ea.stack([ea.sum(a * ea.roll(ea.flip(b, 0), k + 1)) for k in range(8)])

    assert_close(by_fft(a, b), direct(a, b))
    w = _real(8)
    g1 = ea.grad(lambda a, b: ea.sum(by_fft(a, b) * w), argnums=(0, 1))(a, b)
    g2 = ea.grad(lambda a, b: ea.sum(direct(a, b) * w), argnums=(0, 1))(a, b)
    assert_close(g1[0], g2[0])
    assert_close(g1[1], g2[1])


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fftn", "ihfft"])
def test_transforms_stage_and_map(name):
    f = getattr(ea.fft, name)
    x = _real(3, 6) if name in ("rfft", "ihfft") else _complex(3, 6)
    assert_close(ea.jit(f)(x), f(x))
    loss = lambda v: ea.sum(ea.real(f(v)))
    assert_close(ea.jit(ea.grad(loss))(x), ea.grad(loss)(x))
    batch = np.stack([x, 2 * x])
    mapped = ea.vmap(f)(batch)
    assert_close(mapped[1], f(2 * x))
    r = _real(3, 6)  # (Jacobians of a real function: jacrev and jacfwd agree; of complex inputs, not)
    jac = ea.jacrev(lambda v: ea.imag(f(v)))(r)
    assert jac.shape == f(r).shape + r.shape
    assert_close(jac, ea.jacfwd(lambda v: ea.imag(f(v)))(r))


@pytest.mark.parametrize("name", ["fft", "rfft", "irfft", "fft2", "ifftn"])
def test_transforms_stay_in_the_operands_library(lib, name):
    f = getattr(ea.fft, name)
    x = _real(4, 6) if name == "rfft" else _complex(4, 6)
    check_lib(lib, f(ea.tensor(lib.asarray(x))), f(x), rtol=1e-9, atol=1e-12)
    w = np.arange(f(x).size, dtype=float).reshape(f(x).shape)
    loss = lambda v, w: ea.sum(ea.real(f(v)) * w)
    check_lib(lib, ea.grad(loss)(lib.asarray(x), lib.asarray(w)), ea.grad(loss)(x, w), rtol=1e-9, atol=1e-9)


def test_numpy_fft_on_tensors_is_einads():
    x = _complex(4, 6)
    t = ea.tensor(x)
    for name in ea.fft.__all__:
        if name.endswith("freq"):
            continue
        arg = np.real(x) if name in ("rfft", "rfftn", "rfft2", "ihfft") else x
        got = getattr(np.fft, name)(ea.tensor(arg))
        assert isinstance(got, ea.Tensor)
        assert_close(got, getattr(np.fft, name)(arg), rtol=1e-12, atol=1e-12)
    g = ea.grad(lambda v: ea.sum(ea.abs(np.fft.fft(v, norm="ortho")) ** 2))(t)
    assert_close(g, 2 * np.conj(x))


def test_every_numpy_fft_function_is_here():
    public = {n for n in dir(np.fft) if not n.startswith("_") and callable(getattr(np.fft, n))}
    public -= {"helper", "test"}  # numpy's submodule and its test runner
    assert public == set(ea.fft.__all__)
    assert {c[1] for c in CASES} | {"fftfreq", "rfftfreq"} == set(ea.fft.__all__)
    np.testing.assert_array_equal(ea.fft.fftfreq(5, 0.1), np.fft.fftfreq(5, 0.1))
    np.testing.assert_array_equal(ea.fft.rfftfreq(6), np.fft.rfftfreq(6))


def test_bad_arguments_are_clear_errors():
    x = _complex(3, 4)
    with pytest.raises(ValueError, match="each axis may be transformed once"):
        ea.fft.fftn(x, axes=(0, 0))
    with pytest.raises(TypeError, match="takes a real array"):
        ea.fft.rfft(x)
    with pytest.raises(ValueError, match="Invalid norm value"):
        ea.fft.fft(x, norm="unitary")
    with pytest.raises(ValueError, match="invalid number of data points"):
        ea.fft.fft(x, n=0)
    with pytest.raises(ValueError, match="s and axes must have the same length"):
        ea.fft.fftn(x, s=(2, 2), axes=(0,))
    with pytest.raises(np.exceptions.AxisError):
        ea.fft.fft(x, axis=2)
    before = x.copy()
    ea.grad(lambda v: ea.sum(ea.abs(ea.fft.fft(v))))(x)
    np.testing.assert_array_equal(x, before)  # no operation writes into its input


def test_autoray_reaches_the_transforms():
    """quimb and cotengra call through autoray: ``do("fft.fft", t)`` on an einad value runs einad's."""
    autoray = pytest.importorskip("autoray", reason="autoray is in the [tn] extra")
    x = _real(6)
    got = ea.grad(lambda v: ea.sum(ea.imag(autoray.do("fft.rfft", v)) * np.arange(4.0)))(x)
    want = ea.grad(lambda v: ea.sum(ea.imag(ea.fft.rfft(v)) * np.arange(4.0)))(x)
    assert_close(got, want)
    assert_close(got, -np.sin(2 * np.pi * np.outer(np.arange(6), np.arange(4)) / 6) @ np.arange(4.0))


@st.composite
def _transforms(draw):
    """A random transform call numpy takes: its name, an array (rank 1-3, sizes 1-5, real or
    complex as the function reads), axes (a random subset in random order, or None), sizes s
    (crops and pads, or None) and a norm."""
    name = draw(
        st.sampled_from(["fftn", "ifftn", "rfftn", "irfftn", "fft", "ifft", "rfft", "irfft", "hfft", "ihfft"])
    )
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)))
    nd = len(shape)
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    real = name in ("rfftn", "rfft", "ihfft") or draw(st.booleans())
    x = rng.normal(size=shape) + (0 if real else 1j * rng.normal(size=shape))
    kwargs = {"norm": draw(st.sampled_from([None, "backward", "ortho", "forward"]))}
    if name.endswith("n"):
        axes = draw(st.permutations(range(nd)))[: draw(st.integers(1, nd))]
        kwargs["axes"] = tuple(a - nd if draw(st.booleans()) else a for a in axes)
        if draw(st.booleans()):
            kwargs["s"] = tuple(draw(st.integers(2, 6)) for _ in axes)
    else:
        kwargs["axis"] = draw(st.integers(-nd, nd - 1))
        if draw(st.booleans()):
            kwargs["n"] = draw(st.integers(2, 7))
    if name in ("irfft", "hfft") and "n" not in kwargs and shape[kwargs["axis"]] < 2:
        kwargs["n"] = 4  # (the default length 2 (m - 1) is 0 for m = 1)
    if name == "irfftn" and "s" not in kwargs and shape[kwargs["axes"][-1]] < 2:
        kwargs["s"] = tuple(4 for _ in kwargs["axes"])
    return name, x, kwargs


@given(_transforms())
def test_random_transforms_are_numpys_and_differentiate_by_central_differences(case):
    """Random axes (negative too, in any order), crops and pads, norms, real and complex
    inputs: numpy's value, dtype and shape, and both modes by central differences."""
    name, x, kwargs = case
    f = lambda v: getattr(ea.fft, name)(v, **kwargs)
    want = getattr(np.fft, name)(x, **kwargs)
    got = f(x)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_close(got, want, rtol=1e-10, atol=1e-12)
    assert ea.gradcheck(f, x)
