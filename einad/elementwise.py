"""Elementwise operations and their derivative table.

Each entry is the operation's numpy implementation and its local derivative,
written in einad operations (so it differentiates again). One entry gives both
modes: the JVP is ``tangent * f'`` and the VJP is ``cotangent * f'`` summed back
to the operand's shape. The constants 1 and -1 mark linear entries, which skip
the multiplication.
"""

from __future__ import annotations

import dis

import numpy as np

from .core import Primitive, Tensor, bind, strip
from .einsum import sum_to_shape
from .structural import broadcast_raw, where_raw
from .util import dtype_of, shape_of, to_operand, wrap

# -- stable numpy kernels -----------------------------------------------------------


def _sigmoid(x):
    x = np.asarray(x)
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x):
    x = np.asarray(x)
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _relu(x):
    return np.maximum(x, 0)


def _tie(a, b, better):
    """Where `a` wins against `b`: 1; where they tie: 1/2 (ties share); else 0."""
    a, b = strip(a), strip(b)
    dt = np.result_type(a, b)
    return better(a, b).astype(dt) + 0.5 * (a == b).astype(dt)


def _pow_dx(x, y, z):
    if isinstance(y, (int, float)) and not isinstance(y, bool):
        if y == 0:
            return 0
        if y == 1:
            return 1
        if y == 2:
            return 2 * x
    return y * x ** (y - 1)


def _pow_dy(x, y, z):
    return z * log(where_raw(strip(x) == 0, 1, x))


# -- the table -------------------------------------------------------------------------

# name: (numpy kernel, d/dx as a function of the operand x and the result y)
UNARY = {
    "negative": (np.negative, -1),
    "exp": (np.exp, lambda x, y: y),
    "log": (np.log, lambda x, y: 1 / x),
    "log1p": (np.log1p, lambda x, y: 1 / (1 + x)),
    "expm1": (np.expm1, lambda x, y: y + 1),
    "sin": (np.sin, lambda x, y: cos(x)),
    "cos": (np.cos, lambda x, y: -sin(x)),
    "tan": (np.tan, lambda x, y: 1 + y * y),
    "tanh": (np.tanh, lambda x, y: 1 - y * y),
    "sinh": (np.sinh, lambda x, y: cosh(x)),
    "cosh": (np.cosh, lambda x, y: sinh(x)),
    "arcsin": (np.arcsin, lambda x, y: 1 / sqrt(1 - x * x)),
    "arccos": (np.arccos, lambda x, y: -1 / sqrt(1 - x * x)),
    "arctan": (np.arctan, lambda x, y: 1 / (1 + x * x)),
    "sqrt": (np.sqrt, lambda x, y: 0.5 / y),
    "square": (np.square, lambda x, y: 2 * x),
    "abs": (np.abs, lambda x, y: np.sign(strip(x))),  # subgradient 0 at 0
    "relu": (_relu, lambda x, y: strip(x) > 0),  # subgradient 0 at 0
    "sigmoid": (_sigmoid, lambda x, y: y * (1 - y)),
    "softplus": (_softplus, lambda x, y: sigmoid(x)),
}

# name: (numpy kernel, d/dx, d/dy), each a function of x, y and the result z
BINARY = {
    "add": (np.add, 1, 1),
    "subtract": (np.subtract, 1, -1),
    "multiply": (np.multiply, lambda x, y, z: y, lambda x, y, z: x),
    "divide": (np.true_divide, lambda x, y, z: 1 / y, lambda x, y, z: -z / y),
    "power": (np.power, _pow_dx, _pow_dy),
    "maximum": (np.maximum, lambda x, y, z: _tie(x, y, np.greater), lambda x, y, z: _tie(y, x, np.greater)),
    "minimum": (np.minimum, lambda x, y, z: _tie(x, y, np.less), lambda x, y, z: _tie(y, x, np.less)),
}

# Not differentiable: the derivative is zero wherever it exists.
CONSTANT = {"sign": np.sign, "floor": np.floor, "ceil": np.ceil, "round": np.round}


# -- turning the table into primitives -------------------------------------------------


def _scale(g, d, *args):
    if d == 1:
        return g
    if d == -1:
        return -g
    return g * d(*args)


def _reads(d) -> tuple:
    """Which of its parameters a derivative entry reads, by position (from its bytecode).

    Lets a node keep only those values alive; constants read nothing.
    """
    if not callable(d):
        return ()
    code = d.__code__
    params = code.co_varnames[: code.co_argcount]
    loaded = set()
    for ins in dis.get_instructions(d):
        if ins.opname.startswith("LOAD_FAST") or ins.opname.startswith("LOAD_DEREF"):
            names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
            loaded.update(names)
    return tuple(i for i, n in enumerate(params) if n in loaded)


def _keeper(partials):
    """`Primitive.keep` for an elementwise op with these partials (arguments: operands, then result)."""
    reads = [_reads(d) for d in partials]
    n = len(partials)

    def keep(needed):
        used = set()
        for need, r in zip(needed, reads):
            if need:
                used.update(r)
        return tuple(i in used for i in range(n)), n in used

    return keep


def _unary_prim(name, kernel, d):
    prim = Primitive(name, kernel)
    prim.vjp = lambda g, y, vals, p, needed: [_scale(g, d, vals[0], y)]
    prim.jvp = lambda ts, y, vals, p: _scale(ts[0], d, vals[0], y)
    prim.keep = _keeper((d,))
    return prim


def _binary_prim(name, kernel, dx, dy):
    prim = Primitive(name, kernel)
    partials = (dx, dy)
    prim.keep = _keeper(partials)

    def vjp(g, z, vals, p, needed):
        x, y = vals
        out = []
        for v, need, d in zip(vals, needed, partials):
            out.append(sum_to_shape(_scale(g, d, x, y, z), shape_of(v), dtype_of(v)) if need else None)
        return out

    def jvp(ts, z, vals, p):
        x, y = vals
        out = None
        for t, d in zip(ts, partials):
            if t is not None:
                term = _scale(t, d, x, y, z)
                out = term if out is None else out + term
        if out is not None and shape_of(out) != shape_of(z):
            out = broadcast_raw(out, shape_of(z))
        return out

    prim.vjp, prim.jvp = vjp, jvp
    return prim


PRIMITIVES: dict[str, Primitive] = {}
for _name, (_kernel, _d) in UNARY.items():
    PRIMITIVES[_name] = _unary_prim(_name, _kernel, _d)
for _name, (_kernel, _dx, _dy) in BINARY.items():
    PRIMITIVES[_name] = _binary_prim(_name, _kernel, _dx, _dy)
for _name, _kernel in CONSTANT.items():
    PRIMITIVES[_name] = Primitive(_name, _kernel)


def _raw1(name):
    prim = PRIMITIVES[name]
    return lambda x: bind(prim, (x,), {})


def _raw2(name):
    prim = PRIMITIVES[name]
    return lambda x, y: bind(prim, (x, y), {})


# Internal versions: a raw array in gives a raw array out (used by the rules).
exp, log, sin, cos, sinh, cosh, sqrt, sigmoid = (
    _raw1(n) for n in ("exp", "log", "sin", "cos", "sinh", "cosh", "sqrt", "sigmoid")
)


def zeros_like(x):
    return np.zeros(shape_of(x), dtype=dtype_of(x))


def public_unary(name: str):
    prim = PRIMITIVES[name]

    def op(x) -> Tensor:
        return wrap(bind(prim, (to_operand(x),), {}))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name}, as numpy.{name}; differentiable."
    return op


def public_binary(name: str):
    prim = PRIMITIVES[name]

    def op(x, y) -> Tensor:
        return wrap(bind(prim, (to_operand(x), to_operand(y)), {}))

    op.__name__ = op.__qualname__ = name
    op.__doc__ = f"Elementwise {name} with numpy broadcasting; differentiable in both operands."
    return op
