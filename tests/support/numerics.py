"""Numerical helpers the tests share, written without einad where they are references:
float64 central differences, numpy.einsum widened to einad's grammar, closeness, memory peaks."""

import gc
import tracemalloc

import numpy as np

import einad as ea
from einad import network


def _value(y):
    return np.asarray(y, dtype=np.float64)


def numeric_grad(f, *args, argnum=0, eps=1e-6):
    """d f / d args[argnum] by central differences; `f` returns a scalar."""
    args = [np.array(a, dtype=np.float64) for a in args]
    x = args[argnum]
    g = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        old = x[idx]
        x[idx] = old + eps
        plus = _value(f(*args))
        x[idx] = old - eps
        minus = _value(f(*args))
        x[idx] = old
        g[idx] = (plus - minus) / (2 * eps)
    return g


def numeric_vjp(f, args, cotangent, argnum=0, eps=1e-6):
    """<cotangent, f(args)> differentiated in args[argnum] by central differences."""
    u = np.asarray(cotangent, dtype=np.float64)
    return numeric_grad(lambda *a: np.sum(u * _value(f(*a))), *args, argnum=argnum, eps=eps)


def numeric_jvp(f, args, tangents, eps=1e-6):
    """d/dh f(args + h * tangents) at h = 0 by central differences, with a real step `h`: the
    directional derivative for real and complex values alike (holomorphic or not, as abs)."""
    plus = f(*[np.asarray(a) + eps * np.asarray(t) for a, t in zip(args, tangents)])
    minus = f(*[np.asarray(a) - eps * np.asarray(t) for a, t in zip(args, tangents)])
    return (np.asarray(plus) - np.asarray(minus)) / (2 * eps)


_ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _is_index(c):
    """opt_einsum's alphabet: every character but its grammar's (',', '-', '>', '.'), less the
    whitespace below U+00C0 (from there on every character is one of opt_einsum's symbols)."""
    return c not in ",->." and not (c.isspace() and ord(c) < 0xC0)


def reference_einsum(spec, *operands):
    """numpy.einsum, widened by the two things einad accepts beyond numpy (as opt_einsum
    and PyTorch do), written without einad: indices outside a-z, A-Z (any character but the
    grammar's, `_is_index`) are renamed to unused ASCII letters, and a '...' that an explicit
    output leaves out is kept by numpy, then summed. Raises whatever numpy raises for
    anything else."""
    odd = [c for c in dict.fromkeys(spec) if _is_index(c) and c not in _ASCII]
    spare = [c for c in _ASCII if c not in spec]
    if odd and len(spare) >= len(odd):
        if (
            "-" not in spec and ">" not in spec
        ):  # implicit output: '...', then letters used once by code point
            letters = [c for c in spec if _is_index(c)]
            once = sorted(c for c in set(letters) if letters.count(c) == 1)
            spec += "->" + ("..." if "..." in spec else "") + "".join(once)
        spec = spec.translate(str.maketrans(dict(zip(odd, spare))))
    if spec.count("->") == 1:
        lhs, rhs = spec.split("->")
        if "." in lhs and "." not in rhs:
            out = np.einsum(lhs + "->..." + rhs, *operands)
            n_ell = out.ndim - len(rhs.replace(" ", ""))
            return np.sum(out, axis=tuple(range(n_ell)), dtype=out.dtype)
    return np.einsum(spec, *operands)


def assert_close(actual, expected, rtol=1e-6, atol=1e-8):
    actual = np.asarray(actual)
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, f"shape {actual.shape} != {expected.shape}"
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def peak_bytes(fn, *args):
    """Bytes allocated at the peak of one call ``fn(*args)``, above what was allocated before it.

    A first call warms the caches (contraction plans, compiled programs), so only the
    call's own arrays are measured; tracemalloc starts after the inputs exist. The buffers
    that contraction plans keep between calls (`network.release_pools`) are let go first, so
    that the call's own intermediates count wherever they live.
    """
    fn(*args)
    gc.collect()
    network.release_pools()
    tracing = tracemalloc.is_tracing()
    if not tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        fn(*args)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        if not tracing:
            tracemalloc.stop()


def readonly(a):
    """A copy of `a` that numpy refuses to write into."""
    a = np.array(a)
    a.flags.writeable = False
    return a


def check_op(f, ref, *args, rtol=1e-6, atol=1e-8, eps=1e-6, seed=3):
    """einad's `f` against numpy's `ref`: the value (for Tensor arguments), and the
    VJP of every argument (for array arguments) against central differences of `ref`."""
    expected = np.asarray(ref(*args))
    out = f(*[ea.tensor(a) for a in args])  # also lets `f` use Tensor methods and operators
    assert isinstance(out, ea.Tensor)
    assert out.dtype == expected.dtype, f"dtype {out.dtype} != numpy's {expected.dtype}"
    assert_close(out.numpy(), expected, rtol=rtol, atol=atol)
    u = np.random.default_rng(seed).standard_normal(expected.shape)
    value, pullback = ea.vjp(f, *args)
    assert_close(value, expected, rtol=rtol, atol=atol)
    grads = pullback(u)
    assert len(grads) == len(args)
    for k, g in enumerate(grads):
        assert g.shape == np.shape(args[k]), f"argument {k}: gradient shape {g.shape}"
        assert_close(g, numeric_vjp(ref, args, u, argnum=k, eps=eps), rtol=rtol, atol=atol)
    return grads
