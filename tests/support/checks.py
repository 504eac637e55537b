"""Checks and data makers the rule tests share (one copy each, for every tests/rules module).

* `random_operands`, `uniform_away_from_zero`: test data;
* `lib_value`, `check_lib`: a result is an array of the `lib` fixture's library (still lazy on
  dask), with the expected shape, dtype and values;
* `einsum_fn`, `vjp_all`: a function's value and every operand's VJP on a library equal einad's on numpy;
* `weighted`, `family`, `check_case`: the structural/indexing case tables run on every library;
* `numpy_case`, `stays_float32`, `case_params`: a case written once for einad and numpy;
* `np_set`, `np_add`: numpy references for ``x.at[i].set(v)`` and ``x.at[i].add(v)``;
* `finite_value_and_gradient`: the value and gradient of a stable op at huge inputs are finite;
* `cotangent_probe`: an identity whose VJP records the dtype of the cotangent it is given;
* `drop_rules`, `forget_rules`: a primitive a test made with a rules factory, out of the rule tables.
"""

import contextlib

import numpy as np

import einad as ea
from einad import core
from einad.core import strip
from einad.util import dtype_of
from tests.support.numerics import assert_close, check_op


def random_operands(shapes, seed=0, dtype=np.float64):
    """Standard normal operands of the given shapes (complex: imaginary parts drawn after)."""
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(s) for s in shapes]
    if np.dtype(dtype).kind == "c":
        out = [o + 1j * rng.standard_normal(o.shape) for o in out]
    return [o.astype(dtype) for o in out]


def uniform_away_from_zero(lo, hi, shape=(5,), seed=0, away=0.1, dtype=np.float64):
    """Uniform data in [lo, hi), where |x| < away replaced by 0.3 (away from the kinks at 0:
    abs, relu, sign)."""
    x = np.random.default_rng(seed).uniform(lo, hi, shape)
    x[np.abs(x) < away] = 0.3
    return x.astype(dtype)


def lib_value(lib, r, dtype=None):
    """`r` (a Tensor or a raw array) is an array of `lib` (dask: still lazy); returned as numpy."""
    r = strip(r)
    assert lib.owns(r), f"a {type(r).__module__}.{type(r).__name__} result, not an array of {lib.name}"
    if lib.name == "dask":
        import dask.array as da

        assert isinstance(r, da.Array), "dask results stay lazy"
    out = lib.numpy(r)
    if dtype is not None:
        assert out.dtype == dtype, f"dtype {out.dtype} != {dtype}"
    return out


def check_lib(lib, got, want, rtol=1e-10, atol=1e-12, dtype=None):
    """`got` is an array of `lib` (lazy on dask) with `want`'s shape, values and dtype (or `dtype`)."""
    want = np.asarray(strip(want))
    value = lib_value(lib, got)
    assert value.shape == want.shape, f"shape {value.shape} != {want.shape}"
    expected_dtype = want.dtype if dtype is None else dtype
    assert value.dtype == expected_dtype, f"dtype {value.dtype} != {expected_dtype}"
    np.testing.assert_allclose(value, want, rtol=rtol, atol=atol)


def einsum_fn(spec, **kw):
    """``ops -> ea.einsum(spec, *ops, **kw)``."""
    return lambda *ops: ea.einsum(spec, *ops, **kw)


_OUT = "ΑΒΓΔΕΖΗΘ"  # letters for the loss's contraction with the cotangent


def vjp_all(lib, f, ops, seed=1, rtol=1e-10, atol=1e-12):
    """f's value and every operand's VJP on `lib` and on numpy, checked equal.

    The VJP is the gradient of ``<f(ops), u>`` (an einsum with a random `u`), so the
    test needs no other op; complex values go through `ea.vjp`.
    """
    expected = f(*ops)
    shape, dtype = expected.shape, expected.dtype
    rng = np.random.default_rng(seed)
    u = rng.standard_normal(shape)
    if dtype.kind == "c":
        u = u + 1j * rng.standard_normal(shape)
    u = u.astype(dtype)
    xs = [lib.asarray(o) for o in ops]
    check_lib(lib, f(*xs), expected._value, rtol=rtol, atol=atol)
    if dtype.kind == "c":
        want = ea.vjp(f, *ops)[1](u)
        grads = ea.vjp(f, *xs)[1](lib.asarray(u))
    else:
        out = _OUT[: len(shape)]
        argnums = tuple(range(len(ops)))
        want = ea.grad(lambda *a: ea.einsum(f"{out},{out}->", f(*a), u), argnums=argnums)(*ops)
        w = lib.asarray(u)
        grads = ea.grad(lambda *a: ea.einsum(f"{out},{out}->", f(*a), w), argnums=argnums)(*xs)
    assert len(grads) == len(ops)
    for g, w in zip(grads, want):
        check_lib(lib, g, w, rtol=rtol, atol=atol)


# -- structural and indexing case tables on every library --------------------------------------

_LETTERS = "abcdefgh"


def weighted(f, w):
    """``x -> <w, f(x)>``, a scalar, written as one einsum."""

    def loss(*args):
        y = f(*args)
        s = _LETTERS[: len(y.shape)]
        return ea.einsum(f"{s},{s}->", y, w)

    return loss


def family(*pairs):
    """(einad function, numpy reference) of a family of (einad, numpy) pairs: their results
    flattened and joined, so that one case checks a family."""
    fs, refs = [p[0] for p in pairs], [p[1] for p in pairs]
    return (
        lambda *a: ea.concatenate([ea.reshape(f(*a), (-1,)) for f in fs]),
        lambda *a: np.concatenate([np.reshape(f(*a), -1) for f in refs]),
    )


def check_case(lib, case, rng):
    """One case ``(einad function, numpy reference, arguments, differentiated argnums)``: the
    value equals numpy's and is of `lib`; the gradient of ``<w, f(x)>`` (weights `w` of `lib`)
    equals einad's on numpy and is of `lib`; on dask nothing is computed inside einad."""
    f, ref, args, argnums = case
    lib_args = [lib.asarray(a) for a in args]
    expected = ref(*args)

    def call(*a):
        return f(*[ea.tensor(v) if k in argnums else v for k, v in enumerate(a)])

    with lib.lazy():
        out = call(*lib_args)
    value = lib_value(lib, out, expected.dtype)
    assert_close(value, expected)

    w_np = rng.standard_normal(expected.shape)
    with lib.lazy():
        grads = ea.grad(weighted(f, lib.asarray(w_np)), argnums=argnums)(*lib_args)
    want = ea.grad(weighted(f, w_np), argnums=argnums)(*args)
    for k, g, e in zip(argnums, grads, want):
        got = lib_value(lib, g, args[k].dtype)
        assert got.shape == np.shape(e), f"gradient's shape {got.shape} != {np.shape(e)}"
        assert_close(got, e)


def np_set(x, index, v):
    """numpy's ``x[index] = v`` on a copy (a repeated index keeps the last write)."""
    out = np.array(x)
    out[index] = v
    return out


def np_add(x, index, v):
    """numpy's unbuffered ``x[index] += v`` on a copy (a repeated index adds each time)."""
    out = np.array(x)
    np.add.at(out, index, np.broadcast_to(v, out[index].shape))
    return out


def np_ufunc_at(ufunc, x, index, v=None):
    """numpy's unbuffered ``ufunc.at`` on a copy (a repeated index applies `ufunc` each time)."""
    out = np.array(x)
    if v is None:
        ufunc.at(out, index)
    else:
        ufunc.at(out, index, np.broadcast_to(v, out[index].shape))
    return out


# -- numerically stable operations -----------------------------------------------------------

BIG = np.array([-1000.0, 0.0, 1000.0])
STABLE_WEIGHTS = np.array([1.0, 2.0, 3.0])


def finite_value_and_gradient(f, x):
    """f's value at `x` and the gradient of ``sum(f(x) * [1, 2, 3][:n])``, both asserted finite."""
    value = f(x).numpy()
    grad = ea.grad(lambda x: ea.sum(f(x) * STABLE_WEIGHTS[: x.shape[-1]]))(x)
    assert np.all(np.isfinite(value)) and np.all(np.isfinite(grad))
    return value, grad


def cotangent_probe():
    """``(probe, seen)``: `probe` is the identity, with a VJP that passes its cotangent on and
    appends the cotangent's dtype to the list `seen` (what a rule hands to the value before it)."""
    seen = []

    @ea.custom_vjp
    def probe(x):
        return x

    probe.defvjp(lambda x: (x, None), lambda res, g: (seen.append(dtype_of(g)) or g,))
    return probe, seen


def stays_float32(f, args):
    """A structural case ``f(m, *args)`` (m: einad or numpy) on float32 arguments: the value
    and every argument's gradient stay float32."""
    args32 = tuple(a.astype(np.float32) for a in args)
    assert f(ea, *[ea.tensor(a) for a in args32]).dtype == np.float32
    grads = ea.grad(lambda *a: ea.sum(f(ea, *a)), tuple(range(len(args32))))(*args32)
    assert all(g.dtype == np.float32 for g in grads)


def numpy_case(f, args):
    """A case ``f(m, *args)`` written once for m = einad and m = numpy: einad's value and every
    argument's VJP against numpy's value and central differences (`check_op`)."""
    check_op(lambda *a: f(ea, *a), lambda *a: f(np, *a), *args)


def case_params(table, float32=()):
    """pytest parameters (check, name) for a table of ``name: (f(m, *args), args)``: every case
    against numpy, and the `float32` ones also kept float32 (value and gradients)."""
    import pytest

    return [pytest.param(numpy_case, name, id=name) for name in sorted(table)] + [
        pytest.param(stays_float32, name, id=f"float32-{name}") for name in float32
    ]


# -- primitives a test builds -----------------------------------------------------------------


def drop_rules(*prims):
    """Take `prims` out of the registry, and so out of every table of declared rules (the
    conftest's `_scratch_primitives` does it after every test as well)."""
    for p in prims:
        if core.primitives.get(p.name) is p:
            del core.primitives[p.name]


@contextlib.contextmanager
def forget_rules(*prims):
    """Run the body, then `drop_rules(*prims)`: primitives a test builds with a rules factory
    (``reductions._extreme_prim``, ``shape._linear``), the only way mutmut's mutants of a factory
    that runs at import are active (docs/guarantees.md, "Mutation testing")."""
    try:
        yield
    finally:
        drop_rules(*prims)
