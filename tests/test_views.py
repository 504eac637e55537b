"""Views, as numpy's: a Tensor read from another by basic indexing (``x[0]``, ``x[:, 1:]``,
``for row in x``) or laid out anew (``x.T``, ``swapaxes``, ``moveaxis``, ``expand_dims``,
``squeeze``, ``reshape``/``ravel`` where numpy's are views: by the strides numpy would give
the view; flips, ``rot90``, and the pieces of ``split``, ``array_split`` and ``unstack``) writes
through to it (``x[0][1] = v``, ``row *= 2``, ``x.T[0] = v``,
``x[0].reshape(-1)[1] = v``), eagerly and inside every transformation; advanced indexing, a full
integer index, ``flatten``, a reshape of a transpose and a ravel of a strided view give copies,
as numpy's do. Each program runs on numpy arrays and on Tensors, and must leave the same values."""

import gc
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import einad as ea
from einad import core
from tests.support.numerics import assert_close


def chained(x):
    x[0][1] = 50.0
    x[1][::2] = -1.0


def rows_scaled(x):
    for row in x:
        row *= 2.0
    for row in x:
        row[:] = row + 1.0


def row_named(x):
    r = x[1]
    r += 1.0
    r[0] = r[2] * 10.0


def added_at(x):
    x[1] += 100.0
    x[:, 0] *= -1.0
    x[0, ...] -= 3.0


def view_of_view(x):
    x[1:][0][1:] = 7.0
    x[:, None][0][0][2] = 8.0


def base_written(x):
    v = x[0]
    w = x[1:][0]  # a view of a view
    x[0, 1] = 70.0  # a write into the base reaches the views read before it,
    x += 1.0
    v[2] = 90.0  # and a write through one of them keeps it
    x[2] = v * w
    x[1:][0][0] = -5.0
    x[0, 0] = w[0]


def copies(x):
    x[[0]][0, 1] = 9.0  # advanced indexing: a copy
    x[x > 100.0] = 0.0  # (a mask, written directly, is no view)
    for v in x[0]:
        v += 1000.0  # a full integer index: numpy's scalar, a copy


def transposed(x):
    t = x.T  # a transpose: a view of every element
    t[0] = -2.0  # (x's column 0)
    t[1:, 2] += 5.0
    x.swapaxes(0, 1)[3][1] = 11.0
    np.transpose(x)[2, 0] *= 3.0  # (numpy's function on a Tensor: einad's, a view too)
    x[None].mT[0, 1, 1] = 4.0  # a transpose of a view by indexing
    np.moveaxis(x, 0, 1)[0, 2] -= 1.0


def reshaped(x):
    flat = x.reshape(-1)  # a reshape of an array laid out in C order: a view
    flat[::5] = 0.5
    x.ravel()[3] += 1.0
    x.reshape(2, 6)[1] *= 2.0
    np.expand_dims(x, 0)[0, 1, 1] = -7.0  # expand_dims and squeeze: views of any array
    x.T[None].squeeze(0)[3, 0] = 6.0
    x.T.reshape(-1)[0] = 123.0  # a reshape of a transpose: a copy (x stays)
    x.flatten()[1] = 321.0  # flatten: a copy


def views_reshaped(x):
    x[0].reshape(2, 2)[1] = -3.0  # a reshape of a row: numpy's is a view
    x.T.T.ravel()[5] = 9.0  # transposed back: C order again, a view
    x[:, ::2].reshape(-1)[0] += 4.0  # strided, yet its rows merge: numpy's reshape views it
    x[:, ::2].ravel()[1] = 100.0  # ravel views C order only: a copy (x stays)
    x[1:].T.reshape(-1)[0] = 55.0  # a copy
    x[None, 2].reshape(2, 2)[0] *= 2.0
    np.ravel(x[1])[3] = 31.0
    x.T[1:3].T.reshape(6)[::4] = 0.25  # (columns 1-2: rows of 2 elements, 4 apart: a copy)
    x[:, 1:3].reshape(3, 2, 1).squeeze(-1)[2] = -8.0  # (a copy of the same; squeeze: a view of it)


def pieces_written(x):
    np.flip(x, 1)[0, 0] = 21.0  # flips, numpy's x[:, ::-1]: views
    np.flipud(x)[0] *= 0.5
    np.rot90(x)[1, 2] = -4.0  # (a flip and a transpose)
    top, bottom = np.split(x, [1])  # the pieces of a split: views
    bottom[1, 1:3] = 13.0
    np.array_split(x, 3, axis=1)[0][:, 0] += 100.0  # (sections that do not divide the axis)
    np.unstack(x, axis=1)[3][2] = top[0, 3] * 2.0


def layouts_written(x):
    t, r = x.T, x.reshape(4, 3)
    x[0, 1] = 70.0  # a write into the base reaches its transpose and its reshape,
    x += 1.0
    t[2, 1] = r[0, 0] * t[0, 0]  # and a write through either reaches the other
    r[3] += t[1, 2]
    t *= 0.5


PROGRAMS = [
    chained,
    rows_scaled,
    row_named,
    added_at,
    view_of_view,
    base_written,
    copies,
    transposed,
    reshaped,
    views_reshaped,
    pieces_written,
    layouts_written,
]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_writes_through_views_leave_numpys_values(program):
    start = np.arange(12.0).reshape(3, 4)
    want = start.copy()
    program(want)
    t = ea.tensor(start)
    program(t)
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(start, np.arange(12.0).reshape(3, 4))  # (never written)


def traced(program):
    """The program as a loss: it writes into a computed tensor (and, through views, into it)."""

    def loss(x):
        h = x * x
        program(h)
        return ea.sum(h * x)

    return loss


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_writes_through_views_differentiate_in_every_transformation(program):
    """Inside grad, jit, vmap and jvp, a write through a view is the same write into its base:
    the gradient agrees with central differences, and every transformation with eager grad."""
    x = np.linspace(0.5, 2.0, 12).reshape(3, 4)
    loss = traced(program)
    g = ea.grad(loss)(x)
    ea.gradcheck(loss, x)
    assert_close(ea.jit(ea.grad(loss))(x), g)
    assert_close(ea.grad(ea.jit(loss))(x), g)
    assert_close(ea.vmap(ea.grad(loss))(np.stack([x, x])), np.stack([g, g]))
    assert_close(ea.jvp(loss, (x,), (np.ones_like(x),))[1], np.sum(g))


def parts_written(z):
    r, i = z.real, z.imag  # views of a complex array: its real and imaginary parts
    r[0] = -1.0
    i[1, 2:] *= 3.0
    z[2, 0] += 1j
    r[2] += i[2]  # (the imaginary parts z holds after the write above)
    z.imag[:, 1] = z.real[:, 3]


def test_writes_into_real_and_imag_leave_numpys_values():
    """``z.real`` and ``z.imag`` of a complex Tensor are views, as numpy's: a write into either
    sets those parts of z's elements, and a write into z reaches both; of a real Tensor, real
    is its own elements."""
    start = (np.arange(12.0) + 1j * np.arange(12.0, 24.0)).reshape(3, 4)
    want = start.copy()
    parts_written(want)
    z = ea.tensor(start)
    parts_written(z)
    np.testing.assert_array_equal(z.numpy(), want)
    x = ea.tensor(np.arange(3.0))
    x.real[1] = 9.0
    assert x.tolist() == [0.0, 9.0, 2.0]


def test_writes_into_real_and_imag_differentiate_in_every_transformation():
    """A loss of a complex tensor written through its parts: the gradient agrees with central
    differences, and jit's and vmap's with eager grad's."""
    x = np.linspace(0.5, 2.0, 12).reshape(3, 4)

    def loss(x):
        z = x * (1.0 + 0.5j) + x[::-1] * 1j
        parts_written(z)
        return ea.sum(ea.real(z * ea.conj(z)) * x)

    g = ea.grad(loss)(x)
    ea.gradcheck(loss, x)
    assert_close(ea.jit(ea.grad(loss))(x), g)
    assert_close(ea.vmap(ea.grad(loss))(np.stack([x, x])), np.stack([g, g]))


def test_a_write_through_a_view_matches_torchs_autograd():
    torch = pytest.importorskip("torch", reason="torch is the reference for a recorded write through a view")
    x0 = np.linspace(0.5, 2.0, 12).reshape(3, 4)

    def program(x):
        h = x * 1.0
        h[0][1] = h[2][3] * 3.0
        for i in range(3):
            h[i] *= float(i + 1)
        r = h[1]
        r[1:] += h[0, 0]
        return (h * h).sum()

    xt = torch.tensor(x0, requires_grad=True)
    program(xt).backward()
    w = ea.tensor(x0, requires_grad=True)
    program(w).backward()
    assert_close(w.grad, xt.grad.numpy())
    assert_close(ea.grad(program)(x0), xt.grad.numpy())


def test_x_at_i_plus_equals_writes_once():
    """``x[i] += v`` reads the view x[i], which writes itself into x; Python's assignment of it
    back to x[i] then finds x already holding it and writes nothing (one write in the program,
    as ``x = x.at[i].add(v)``)."""

    def augmented(x):
        x[1] += 2.0
        return x

    def functional(x):
        return x.at[1].set(x[1] + 2.0)

    x = np.arange(6.0).reshape(2, 3)
    assert_close(ea.jit(augmented)(x), functional(ea.tensor(x)).numpy())
    ops = [e.op for e in ea.make_graph(augmented)(x).equations]
    assert ops == [e.op for e in ea.make_graph(functional)(x).equations], ops


def test_a_view_of_a_leaf_that_requires_grad_is_written_only_under_no_grad():
    """As PyTorch: a write through a view of a leaf that requires grad is a write into the leaf."""
    w = ea.tensor(np.ones((2, 2)), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf.*in-place"):
        w[0][1] = 5.0
    with ea.no_grad():
        w[0][1] = 5.0
    assert w.is_leaf and w.requires_grad and w.tolist() == [[1.0, 5.0], [1.0, 1.0]]


def test_views_that_are_gone_are_forgotten():
    """Each basic index registers its result as a view of the tensor it was read from; the entry
    goes with the view (nothing accumulates over a loop of reads)."""
    x = ea.tensor(np.arange(12.0).reshape(3, 4))
    gc.collect()
    before = len(core._views)
    kept = [x[i] for i in range(3)]
    assert len(core._views) == before + 3
    for _ in range(1000):
        x[1][2]  # (a read: its view registered, then gone)
    del kept
    gc.collect()
    assert len(core._views) == before


def test_copies_are_tensors_of_their_own():
    """``ea.array(t)`` (numpy's ``array``, autoray's ``do("array", t)``), ``np.copy``,
    ``t.copy()``, ``t.clone()`` and the array API's ``asarray(t, copy=True)``: a write into the
    copy leaves the original alone (and the other way), eagerly and traced; ``asarray`` without
    copy is the tensor itself."""
    copies = [
        ea.array,
        np.copy,
        lambda t: t.copy(),
        lambda t: t.clone(),
        lambda t: ea.array_api.asarray(t, copy=True),
        lambda t: ea.array_api.asarray(t, dtype=t.dtype, copy=True),  # (a cast to its own dtype too)
    ]
    for make in copies:
        t = ea.tensor(np.arange(3.0))
        c = make(t)
        c[0] = 9.0
        t[2] += 5.0
        assert t.tolist() == [0.0, 1.0, 7.0] and c.tolist() == [9.0, 1.0, 2.0]

        def loss(x, make=make):
            c = make(x)
            c[0] = 0.0  # (into x too, were c x itself: then no derivative in x[0])
            return ea.sum(c) + ea.sum(x * x)

        assert_close(ea.grad(loss)(np.array([1.0, 2.0])), [2.0, 5.0])
    t = ea.tensor(np.arange(3.0))
    assert ea.asarray(t) is t and ea.array_api.asarray(t) is t


# -- random programs of writes ----------------------------------------------------------------------

BASIC = [0, -1, slice(1, None), (0, slice(None, None, 2)), (Ellipsis, 1), (slice(None), None, 2)]
ADVANCED = [[0, 2], ([0, 1], [3, 3]), np.array([True, False, True])]


def _apply(x, step, scale):
    """One write of a random program into `x` (an ndarray or a Tensor); `scale` (1.0, or a traced
    scalar) multiplies the value written, so that derivatives flow through the values too."""
    kind, index, value = step
    value = value * scale
    if kind == "set":
        x[index] = value
    elif kind == "add":
        x[index] += value
    elif kind == "through":  # a view named, then written into
        v = x[index]
        v *= value
    elif kind == "chain":  # x[a][b] = value: the first index basic, so numpy writes through it
        x[index][0] = value
    elif kind == "rows":
        for row in x:
            row[1:] -= value
    elif kind == "held":  # a view read, its base written, the view read again
        v = x[index]
        x *= value
        x[2, 0] = v.sum()


@st.composite
def programs(draw):
    kinds = st.sampled_from(["set", "add", "through", "chain", "rows", "held"])
    steps = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(kinds)
        pool = BASIC + ADVANCED if kind in ("set", "add") else BASIC[:2] + BASIC[2:3]
        index = draw(st.sampled_from(pool))
        steps.append((kind, index, draw(st.floats(-2.0, 2.0, allow_nan=False).map(lambda v: round(v, 3)))))
    return steps


@settings(max_examples=25, deadline=None)
@given(programs())
def test_random_programs_of_writes_leave_numpys_values_and_differentiate(steps):
    """A random sequence of writes (item assignment, ``x[i] += v``, writes through named views,
    chained indices, rows of a loop; basic and advanced indices) leaves a Tensor as numpy leaves
    an array, and its loss differentiates as central differences say, eagerly, under jit and
    batched by vmap."""
    start = np.linspace(-1.0, 1.0, 12).reshape(3, 4)
    want = start.copy()
    for step in steps:
        _apply(want, step, 1.0)
    t = ea.tensor(start)
    for step in steps:
        _apply(t, step, 1.0)
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-12, atol=1e-12)

    def loss(x):
        h = x * x
        for step in steps:
            _apply(h, step, x[2, 3])
        return ea.sum(h * x)

    ea.gradcheck(loss, start)
    g = ea.grad(loss)(start)
    assert_close(ea.jit(ea.grad(loss))(start), g)
    assert_close(ea.vmap(ea.grad(loss))(np.stack([start, -start])), np.stack([g, ea.grad(loss)(-start)]))


@st.composite
def view_chains(draw):
    """Steps that each take a view of the last (numpy's view or copy, by numpy's rules): basic
    indices, transposes, reshapes into random shapes of the same size, ravel in C and F order,
    expand_dims and squeeze; each step a function of the array so far."""
    shape, steps = (2, 3, 4), []
    kinds = st.sampled_from(["index", "transpose", "reshape", "ravel", "ravel F", "expand", "squeeze"])
    slices = [slice(None), slice(None, None, 2), slice(1, None), slice(None, None, -1)]
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(kinds)
        if kind == "index":
            items = [draw(st.sampled_from(slices + [0] * (d > 0))) for d in shape]
            if items and all(type(i) is int for i in items):
                items[-1] = slice(None)  # (an integer for every axis: numpy's scalar)
            if draw(st.booleans()):
                items.insert(draw(st.integers(0, len(items))), None)
            index = tuple(items)
            steps.append(lambda a, index=index: a[index])
            shape = np.empty(shape)[index].shape
        elif kind == "transpose":
            perm = tuple(draw(st.permutations(range(len(shape)))))
            steps.append(lambda a, perm=perm: a.transpose(perm))
            shape = tuple(shape[p] for p in perm)
        elif kind == "reshape":
            size, new = math.prod(shape), []
            for _ in range(draw(st.integers(0, 3))):
                d = draw(st.sampled_from([k for k in range(1, size + 1) if size % k == 0] or [1]))
                new.append(d)
                size //= d if d else 1
            new.append(size)
            new = tuple(new)
            steps.append(lambda a, new=new: a.reshape(new))
            shape = new
        elif kind in ("ravel", "ravel F"):
            order = "F" if kind == "ravel F" else "C"
            steps.append(lambda a, order=order: a.ravel(order))
            shape = (math.prod(shape),)
        elif kind == "expand":
            axis = draw(st.integers(0, len(shape)))
            steps.append(lambda a, axis=axis: np.expand_dims(a, axis))
            shape = shape[:axis] + (1,) + shape[axis:]
        elif 1 in shape:
            steps.append(lambda a: a.squeeze())
            shape = tuple(d for d in shape if d != 1)
    return steps


@settings(max_examples=60, deadline=None)
@given(view_chains())
def test_chains_of_views_share_elements_as_numpys_do(steps):
    """A chain of views and reshapes is a view or a copy as numpy's is: a write into its end
    reaches the base exactly where numpy's does, and a write into the base reaches its end."""
    x = np.arange(24.0).reshape(2, 3, 4)
    t = ea.tensor(x.copy())
    v, w = x, t
    for step in steps:
        v, w = step(v), step(w)
        np.testing.assert_array_equal(w.numpy(), v)
    v[...] = -1.0 - np.arange(v.size).reshape(v.shape)
    w[...] = -1.0 - np.arange(v.size).reshape(v.shape)
    np.testing.assert_array_equal(t.numpy(), x)
    x += 100.0
    t += 100.0
    np.testing.assert_array_equal(w.numpy(), v)


def test_an_update_in_place_is_seen_by_every_name_inside_a_transformation_as_eagerly():
    """``y = h; h += 1`` changes y too, as numpy's and PyTorch's in-place updates do: eagerly and
    inside grad, jit and vmap alike (a transformation made a new tensor for h, so the loss's
    value depended on whether it was transformed); a cast numpy refuses is refused in both."""

    def f(x):
        h = x * 1.0
        y = h  # another name for the same tensor
        h += 1.0
        h[0] *= 3.0
        return ea.sum(y * x)

    x = np.array([0.5, -1.0, 2.0])
    eager = f(ea.tensor(x)).item()
    want = np.array([3 * (2 * x[0] + 1), 2 * x[1] + 1, 2 * x[2] + 1])
    value, grad = ea.value_and_grad(f)(x)
    assert_close(value, eager)
    assert_close(value, np.sum(np.array([3 * (x[0] + 1), x[1] + 1, x[2] + 1]) * x))
    assert_close(grad, want)
    assert_close(ea.jit(f)(x), eager)
    assert_close(ea.vmap(ea.grad(f))(np.stack([x, x])), np.stack([want, want]))

    def cast(x):
        i = ea.tensor(np.arange(3))
        i += x[0]
        return ea.sum(i * x)

    with pytest.raises(TypeError, match="cannot cast the result's float64 to int64"):
        cast(ea.tensor(x))
    with pytest.raises(TypeError, match="cannot cast the result's float64 to int64"):
        ea.grad(cast)(x)


def test_a_constant_written_with_constants_is_one_numpy_assignment(monkeypatch):
    """An eager fill loop (a constant Tensor written with numbers or arrays) is numpy's assignment
    into a copy of its array, not an ``at[...].set`` of einad operations (70 against 1 µs a
    write); a traced value, a view and a complex value into a real tensor take the general way."""
    from einad.rules.indexing import IndexedUpdate

    calls = []
    general = IndexedUpdate.set
    monkeypatch.setattr(IndexedUpdate, "set", lambda self, v, **kw: calls.append(1) or general(self, v, **kw))
    t = ea.tensor(np.zeros((3, 4)))
    user = t.numpy()
    for i in range(3):
        t[i, 1:] = np.arange(3.0) * i
        t[i][0] = -1.0  # (through a view: the general way for the view, numpy's for t)
    t[[0, 2], -1] = ea.tensor([7.0, 8.0])
    assert len(calls) == 3
    want = np.zeros((3, 4))
    for i in range(3):
        want[i, 1:] = np.arange(3.0) * i
        want[i][0] = -1.0
    want[[0, 2], -1] = [7.0, 8.0]
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(user, np.zeros((3, 4)))  # (what t.numpy() gave is never written)
    with pytest.raises(TypeError, match="cannot write complex values"):
        t[0, 0] = np.complex128(1j)  # (refused by the general way)
    ea.grad(lambda x: (t.__setitem__((0, 0), x[0]), ea.sum(t * 1.0))[1])(np.ones(2))
    assert len(calls) == 5
