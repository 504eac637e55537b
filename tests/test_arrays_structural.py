"""The structural and indexing operations on every array library (issue 10).

Each case runs on the `lib` fixture's libraries (numpy, array-api-strict, torch on the CPU,
dask.array): the value must equal numpy's function on numpy arrays and be an array of the
input's library; the gradient of ``<w, f(x)>`` (one einsum with weights `w` of that library)
must equal einad's gradient on numpy arrays and be of the library too. On dask nothing is
computed while einad builds the value or the gradient (`_no_compute`). On torch, float32
stays float32, and gradients agree with torch.autograd on the same function.
"""

from __future__ import annotations

import numpy as np
import pytest

import einad as ea
from einad.util import raw
from tests.support.arraylibs import load
from tests.support.numerics import assert_close

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4))
MASK = X > 0
LETTERS = "abcdefgh"


def _check_lib(lib, r, dtype=None):
    """`r` (a Tensor or a raw array) is an array of `lib` (dask: still lazy); returned as numpy."""
    r = raw(r)
    assert lib.owns(r), f"{type(r).__name__} is not an array of {lib.name}"
    if lib.name == "dask":
        import dask.array as da

        assert isinstance(r, da.Array)
    out = lib.numpy(r)
    if dtype is not None:
        assert out.dtype == dtype, f"dtype {out.dtype} != {dtype}"
    return out


def _weighted(f, w):
    """``x -> <w, f(x)>``, a scalar, written as one einsum."""

    def loss(*args):
        y = f(*args)
        s = LETTERS[: len(y.shape)]
        return ea.einsum(f"{s},{s}->", y, w)

    return loss


def _joined(*fs):
    """One function giving the results of `fs`, flattened and joined: one case checks a family."""
    return lambda *a: ea.concatenate([ea.reshape(f(*a), (-1,)) for f in fs])


def _np_joined(*fs):
    return lambda *a: np.concatenate([np.reshape(f(*a), -1) for f in fs])


def _family(*pairs):
    """(einad function, numpy reference) of a family of (einad, numpy) pairs."""
    return _joined(*(p[0] for p in pairs)), _np_joined(*(p[1] for p in pairs))


ROWS = np.array([True, False, True])
IDX2 = np.array([[1, 1], [0, 3]])
ALONG = np.array([[0, 0], [3, -1], [1, 1]])

# name: (einad function, numpy reference, arguments, differentiated argnums)
CASES = {
    "shapes": (
        *_family(
            (lambda x: ea.reshape(x, (4, 3)), lambda x: x.reshape(4, 3)),
            (lambda x: ea.reshape(x, (2, -1, 2)), lambda x: x.reshape(2, -1, 2)),
            (lambda x: ea.expand_dims(x, (0, 2)), lambda x: np.expand_dims(x, (0, 2))),
            (
                lambda x: ea.squeeze(ea.reshape(x, (1, 3, 1, 4)), 2),
                lambda x: np.squeeze(x.reshape(1, 3, 1, 4), 2),
            ),
            (
                lambda x: ea.broadcast_to(ea.reshape(x, (3, 1, 4)), (2, 3, 2, 4)),
                lambda x: np.broadcast_to(x.reshape(3, 1, 4), (2, 3, 2, 4)),
            ),
        ),
        (X,),
        (0,),
    ),
    "getitem_basic": (
        *_family(
            (lambda x: x[1:3, ::2], lambda x: x[1:3, ::2]),
            (lambda x: x[::-2, 1], lambda x: x[::-2, 1]),
            (lambda x: x[None, ..., -1], lambda x: x[None, ..., -1]),
            (lambda x: x[2], lambda x: x[2]),
            (lambda x: x[1, 2:0:-1], lambda x: x[1, 2:0:-1]),
        ),
        (X,),
        (0,),
    ),
    "getitem_one_array": (
        *_family(
            (lambda x: x[[0, 2, 0, 0]], lambda x: x[[0, 2, 0, 0]]),
            (lambda x: x[:, [3, -1, 0]], lambda x: x[:, [3, -1, 0]]),
            (lambda x: x[::-1, IDX2], lambda x: x[::-1, IDX2]),
        ),
        (X,),
        (0,),
    ),
    "getitem_arrays": (
        *_family(
            (lambda x: x[[0, 1, 0], [1, 2, 1]], lambda x: x[[0, 1, 0], [1, 2, 1]]),
            (lambda x: x[1, [0, 0, 3]], lambda x: x[1, [0, 0, 3]]),
            (lambda x: x[None, [2, 2], 1:], lambda x: x[None, [2, 2], 1:]),
        ),
        (X,),
        (0,),
    ),
    "getitem_masks": (
        *_family(
            (lambda x: x[MASK], lambda x: x[MASK]),
            (lambda x: x[ROWS], lambda x: x[ROWS]),
            (lambda x: x[:, MASK[0]], lambda x: x[:, MASK[0]]),
        ),
        (X,),
        (0,),
    ),
    "flip": (
        *_family((lambda x: ea.flip(x), np.flip), (lambda x: ea.flip(x, 1), lambda x: np.flip(x, 1))),
        (X,),
        (0,),
    ),
    "join_split": (
        *_family(
            (lambda x, y: ea.concatenate([x, y, x], axis=1), lambda x, y: np.concatenate([x, y, x], axis=1)),
            (lambda x, y: ea.concatenate([x, y], axis=None), lambda x, y: np.concatenate([x, y], axis=None)),
            (lambda x, y: ea.stack([x, y], axis=1), lambda x, y: np.stack([x, y], axis=1)),
            (lambda x, y: ea.split(y, [1, 3], axis=1)[1], lambda x, y: np.split(y, [1, 3], axis=1)[1]),
        ),
        (X, Y),
        (0, 1),
    ),
    "where": (lambda m, x, y: ea.where(m, x, y), np.where, (MASK, X, Y), (1, 2)),
    "where_number": (lambda m, x: ea.where(m, 0.5, x), lambda m, x: np.where(m, 0.5, x), (MASK, X), (1,)),
    "astype": (lambda x: x.astype(np.float32), lambda x: x.astype(np.float32), (X,), (0,)),
    "take": (
        *_family(
            (lambda x: ea.take(x, [2, 0, 2], axis=1), lambda x: np.take(x, [2, 0, 2], axis=1)),
            (lambda x: ea.take(x, [[11, 0], [0, 5]]), lambda x: np.take(x, [[11, 0], [0, 5]])),
            (lambda x: ea.take(x, 1, axis=0), lambda x: np.take(x, 1, axis=0)),
            (
                lambda x: ea.take(x, [5, -7], axis=1, mode="wrap"),
                lambda x: np.take(x, [5, -7], axis=1, mode="wrap"),
            ),
            (
                lambda x: ea.take(x, [5, -7], axis=0, mode="clip"),
                lambda x: np.take(x, [5, -7], axis=0, mode="clip"),
            ),
        ),
        (X,),
        (0,),
    ),
    "take_along_axis": (
        *_family(
            (lambda x: ea.take_along_axis(x, ALONG, axis=1), lambda x: np.take_along_axis(x, ALONG, axis=1)),
            (
                lambda x: ea.take_along_axis(x, np.array([[2, 0, 0]]).T, axis=0),
                lambda x: np.take_along_axis(x, np.array([[2, 0, 0]]).T, axis=0),
            ),
            (lambda x: ea.take_along_axis(x, [0, 11, 0], axis=None), lambda x: x.ravel()[[0, 11, 0]]),
        ),
        (X,),
        (0,),
    ),
    "sort": (
        *_family(
            (lambda x: ea.sort(x, axis=1), lambda x: np.sort(x, axis=1)),
            (lambda x: ea.sort(x, axis=0), lambda x: np.sort(x, axis=0)),
            (lambda x: ea.sort(x, axis=None), lambda x: np.sort(x, axis=None)),
        ),
        (X,),
        (0,),
    ),
    "pad_constant": (
        *_family(
            (lambda x: ea.pad(x, 1), lambda x: np.pad(x, 1)),
            (
                lambda x: ea.pad(x, ((1, 0), (2, 1)), constant_values=2.5),
                lambda x: np.pad(x, ((1, 0), (2, 1)), constant_values=2.5),
            ),
        ),
        (X,),
        (0,),
    ),
    "pad_modes": (
        *_family(
            (
                lambda x: ea.pad(x, ((2, 1), (0, 3)), mode="edge"),
                lambda x: np.pad(x, ((2, 1), (0, 3)), mode="edge"),
            ),
            (lambda x: ea.pad(x, 2, mode="reflect"), lambda x: np.pad(x, 2, mode="reflect")),
            (lambda x: ea.pad(x, 1, mode="symmetric"), lambda x: np.pad(x, 1, mode="symmetric")),
            (lambda x: ea.pad(x, (1, 2), mode="wrap"), lambda x: np.pad(x, (1, 2), mode="wrap")),
        ),
        (X,),
        (0,),
    ),
    "roll": (
        *_family(
            (lambda x: ea.roll(x, 1, 1), lambda x: np.roll(x, 1, 1)),
            (lambda x: ea.roll(x, -5), lambda x: np.roll(x, -5)),
            (lambda x: ea.roll(x, (1, 2), (0, 1)), lambda x: np.roll(x, (1, 2), (0, 1))),
        ),
        (X,),
        (0,),
    ),
    "tile_repeat": (
        *_family(
            (lambda x: ea.tile(x, (2, 1, 2)), lambda x: np.tile(x, (2, 1, 2))),
            (lambda x: ea.repeat(x, 2, axis=1), lambda x: np.repeat(x, 2, axis=1)),
            (lambda x: ea.repeat(x, [1, 0, 3], axis=0), lambda x: np.repeat(x, [1, 0, 3], axis=0)),
            (lambda x: ea.repeat(x, 2), lambda x: np.repeat(x, 2)),
        ),
        (X,),
        (0,),
    ),
    "at": (
        *_family(
            (lambda x, y: x.at[1:].set(y[0]), lambda x, y: _np_set(x, (slice(1, None),), y[0])),
            (lambda x, y: x.at[[2, 0, 2]].set(y), lambda x, y: _np_set(x, ([2, 0, 2],), y)),
            (
                lambda x, y: x.at[:, [1, 1, 3]].add(y[:, :3]),
                lambda x, y: _np_add(x, (slice(None), [1, 1, 3]), y[:, :3]),
            ),
            (lambda x, y: x.at[0, 1].add(2.0), lambda x, y: _np_add(x, (0, 1), 2.0)),
        ),
        (X, Y),
        (0, 1),
    ),
}


def _np_set(x, index, v):
    out = np.array(x)
    out[index] = v
    return out


def _np_add(x, index, v):
    out = np.array(x)
    np.add.at(out, index, v)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_op(lib, name):
    f, ref, args, argnums = CASES[name]
    lib_args = [lib.asarray(a) for a in args]
    expected = ref(*args)

    def call(*a):
        return f(*[ea.tensor(v) if k in argnums else v for k, v in enumerate(a)])

    with lib.lazy():
        out = call(*lib_args)
    value = _check_lib(lib, out, expected.dtype)
    assert_close(value, expected)

    w_np = RNG.standard_normal(expected.shape)
    with lib.lazy():
        grads = ea.grad(_weighted(f, lib.asarray(w_np)), argnums=argnums)(*lib_args)
    want = ea.grad(_weighted(f, w_np), argnums=argnums)(*args)
    for k, g, e in zip(argnums, grads, want):
        assert_close(_check_lib(lib, g, args[k].dtype), e)


@pytest.mark.parametrize(
    ("name", "f", "ref"),
    [
        ("argsort", lambda x: ea.argsort(x, axis=0), lambda x: np.argsort(x, axis=0, kind="stable")),
        (
            "argsort_flat",
            lambda x: ea.argsort(x, axis=None),
            lambda x: np.argsort(x, axis=None, kind="stable"),
        ),
        ("argmax", lambda x: ea.argmax(x, axis=1), lambda x: np.argmax(x, axis=1)),
        ("argmax_flat", lambda x: ea.argmax(x, keepdims=True), lambda x: np.argmax(x, keepdims=True)),
        (
            "argmin",
            lambda x: ea.argmin(x, axis=0, keepdims=True),
            lambda x: np.argmin(x, axis=0, keepdims=True),
        ),
        ("argmin_flat", lambda x: ea.argmin(x), lambda x: np.argmin(x)),
    ],
)
def test_integer_results(lib, name, f, ref):
    """The arg-functions: integer arrays of the input's library (ties broken as numpy does)."""
    x = np.array([[3.0, 1.0, 3.0, 0.5], [1.0, 1.0, -2.0, 7.0], [0.0, 4.0, 3.0, 7.0]])
    with lib.lazy():
        out = f(lib.asarray(x))
    got = _check_lib(lib, out)
    assert got.dtype.kind == "i"
    np.testing.assert_array_equal(got, ref(x))


def test_sort_gradient_through_argsort(lib):
    """`sort` is a gather by `argsort`'s computed indices: its gradient scatters back, exactly."""
    x = np.array([[3.0, 1.0, 2.0, 0.5], [1.0, 6.0, -2.0, 7.0]])
    w = np.arange(8.0).reshape(2, 4)

    def loss(x, w):
        return ea.einsum("ij,ij->", ea.sort(ea.einsum("ij,ij->ij", x, x), axis=1), w)

    with lib.lazy():
        g = ea.grad(loss)(lib.asarray(x), lib.asarray(w))
    assert_close(_check_lib(lib, g), ea.grad(loss)(x, w))


def test_index_of_the_library(lib):
    """An index given as an array of the library itself (torch's tensor, a strict array) is
    static data, as a list is; a boolean mask selects as numpy's does."""
    if lib.name == "dask":  # a dask index is computed (it fixes the result's shape)
        pytest.skip("dask: a dask index array is computed, tested in test_dask_index_is_computed")
    x = lib.asarray(X)
    idx = lib.asarray(np.array([2, 0, 2]))
    assert_close(_check_lib(lib, ea.tensor(x)[idx]), X[[2, 0, 2]])
    assert_close(_check_lib(lib, ea.tensor(x)[lib.asarray(MASK)]), X[MASK])
    g = ea.grad(lambda x: ea.einsum("ij,ij->", x[idx], x[idx]))(x)
    assert_close(_check_lib(lib, g), ea.grad(lambda x: ea.einsum("ij,ij->", x[[2, 0, 2]], x[[2, 0, 2]]))(X))


def test_dask_index_is_computed():
    """A dask array used as an index is static data: einad computes it (once), and the result
    and its gradient stay lazy."""
    da = pytest.importorskip("dask.array")
    x = da.from_array(X, chunks=2)
    idx = da.from_array(np.array([2, 0, 2]), chunks=2)
    y = raw(ea.tensor(x)[idx])
    assert isinstance(y, da.Array)
    assert_close(y.compute(), X[[2, 0, 2]])


def test_getitem_negative_step_scatter_duplicates_float32(lib):
    """float32 stays float32 through indexing, scatter-adds and joins, on every library."""
    x32 = X.astype(np.float32)

    def loss(x):
        y = ea.concatenate([x[[1, 1, 0]], ea.flip(x, 0)[::-1], ea.pad(x, 1)[1:-1, 1:-1]], axis=0)
        return ea.einsum("ij,ij->", y, y)

    x = lib.asarray(x32)
    with lib.lazy():
        g = ea.grad(loss)(x)
    got = _check_lib(lib, g, np.float32)
    assert_close(got, ea.grad(loss)(X).astype(np.float32), rtol=1e-5, atol=1e-5)


def test_reshape_dask_any_shape():
    """dask reshapes only by merging or splitting axes: any other reshape goes through 1-D, lazily."""
    da = pytest.importorskip("dask.array")
    x = da.from_array(np.arange(24.0).reshape(4, 6), chunks=(3, 4))
    with load("dask").lazy():
        y = raw(ea.reshape(x, (6, 4)))
    assert isinstance(y, da.Array)
    np.testing.assert_array_equal(y.compute(), np.arange(24.0).reshape(6, 4))


def test_mixed_libraries_name_both(lib):
    if lib.name == "numpy":
        pytest.skip("one library")
    with pytest.raises(TypeError, match=r"numpy.*" + ("dask" if lib.name == "dask" else lib.name)):
        ea.concatenate([X, lib.asarray(Y)], axis=0)
    with pytest.raises(TypeError, match="two libraries"):
        ea.where(MASK, lib.asarray(X), Y)


# -- torch: gradients against torch.autograd -------------------------------------------------


def test_torch_autograd_getitem_duplicates_pad_concat():
    torch = pytest.importorskip("torch")
    x32 = X.astype(np.float32)
    w = RNG.standard_normal((5, 6)).astype(np.float32)
    idx = [2, 0, 2, 2, 1]

    def einad_loss(x):
        y = ea.concatenate([x[idx][:, 1:], ea.pad(x[idx][:, :2], ((0, 0), (1, 0)))], axis=1)
        return ea.einsum("ij,ij->", y, torch.from_numpy(w))

    tx = torch.from_numpy(x32.copy()).requires_grad_(True)
    ty = torch.cat([tx[idx][:, 1:], torch.nn.functional.pad(tx[idx][:, :2], (1, 0))], dim=1)
    (ty * torch.from_numpy(w)).sum().backward()

    g = ea.grad(einad_loss)(torch.from_numpy(x32.copy()))
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float32
    assert_close(g.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_torch_autograd_sort_take_along_where():
    torch = pytest.importorskip("torch")
    x32 = X.astype(np.float32)
    idx = np.array([[0, 0], [3, 1], [2, 2]])

    def einad_loss(x):
        s = ea.sort(x, axis=1)
        t = ea.take_along_axis(x, idx, axis=1)
        return (
            ea.einsum("ij,ij->", s, s)
            + ea.einsum("ij->", t)
            + ea.einsum("ij->", ea.where(torch.from_numpy(MASK), x, 0.0))
        )

    tx = torch.from_numpy(x32.copy()).requires_grad_(True)
    s = torch.sort(tx, dim=1).values
    t = torch.take_along_dim(tx, torch.from_numpy(idx), dim=1)
    ((s * s).sum() + t.sum() + torch.where(tx > 0, tx, 0.0).sum()).backward()

    g = ea.grad(einad_loss)(torch.from_numpy(x32.copy()))
    assert isinstance(g, torch.Tensor) and g.dtype == torch.float32
    assert_close(g.numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)


EDGE_INDICES = [
    (),
    Ellipsis,
    (0, 1, 2),
    (slice(None), None, 1, [0, 0]),
    ([[0], [1]], slice(None), [1, 2]),
    (Ellipsis, [0, 3], None),
    (np.array(1),),
    (0, slice(None), np.array([True, False, True, True])),
    (slice(5, 1, -2),),
    (slice(None), slice(3, None)),
    (-1, [-1], slice(None, None, -3)),
]


def test_getitem_edge_indices(lib):
    """numpy's semantics for mixed, empty and separated indices: values and gradients."""
    x3 = np.arange(24.0).reshape(2, 3, 4)
    x = lib.asarray(x3)
    for index in EDGE_INDICES:
        w = RNG.standard_normal(x3[index].shape)
        assert_close(_check_lib(lib, ea.tensor(x)[index]), x3[index])
        with lib.lazy():
            g = ea.grad(lambda x, w, index=index: ea.einsum("...,...->", x[index], w))(x, lib.asarray(w))
        want = ea.grad(lambda x, w, index=index: ea.einsum("...,...->", x[index], w))(x3, w)
        assert_close(_check_lib(lib, g), want)
