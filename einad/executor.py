"""One step of a contraction on any array library (the array API standard's operations).

numpy arrays take einsum.py's tuned pairwise executor; arrays of other libraries
(PyTorch, CuPy, dask, array-api-strict) take `step`: the library's own ``einsum``
where it has one, else a contraction written with the standard's ``permute_dims``,
``reshape``, ``matmul`` and ``sum`` alone (no strides assumed).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

_ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _rename(ins: Sequence[str], out: str) -> str:
    """``ins->out`` in the letters a-z, A-Z (a library's einsum may accept no others)."""
    letters = dict.fromkeys("".join(ins) + out)
    if len(letters) > len(_ASCII):
        raise ValueError(f"a contraction step with {len(letters)} distinct indices (at most 52 here)")
    table = str.maketrans(dict(zip(letters, _ASCII)))
    return ",".join(s.translate(table) for s in ins) + "->" + out.translate(table)


def _diagonal(xp: ModuleType, x: Any, spec: str) -> tuple[Any, str]:
    """`x` with each repeated letter of `spec` reduced to its diagonal: (array, letters once)."""
    while len(set(spec)) < len(spec):
        c = next(c for c in spec if spec.count(c) > 1)
        i = spec.index(c)
        j = spec.index(c, i + 1)
        n = x.shape[i]
        shape = [1] * len(spec)
        shape[i] = shape[j] = n
        eye = xp.reshape(xp.eye(n, dtype=x.dtype, device=_device(x)), tuple(shape))
        x = xp.sum(x * eye, axis=j)
        spec = spec[:j] + spec[j + 1 :]
    return x, spec


def _device(x: Any) -> Any:
    return getattr(x, "device", None)


def _prepare(xp: ModuleType, x: Any, spec: str, keep: str) -> tuple[Any, str]:
    """Diagonals taken and letters not in `keep` summed away."""
    x, spec = _diagonal(xp, x, spec)
    drop = tuple(i for i, c in enumerate(spec) if c not in keep)
    if drop:
        x = xp.sum(x, axis=drop)
        spec = "".join(c for c in spec if c in keep)
    return x, spec


def _arrange(xp: ModuleType, x: Any, spec: str, order: str) -> Any:
    perm = tuple(spec.index(c) for c in order)
    return x if perm == tuple(range(len(perm))) else xp.permute_dims(x, perm)


def _standard(xp: ModuleType, ins: Sequence[str], out: str, picked: Sequence[Any]) -> Any:
    """The contraction with the standard's operations only."""
    if len(picked) == 1:
        x, spec = _prepare(xp, picked[0], ins[0], out)
        return _arrange(xp, x, spec, out)
    if len(picked) > 2:  # fold from the left, keeping what later operands or the output need
        a, sa = picked[0], ins[0]
        for k in range(1, len(picked)):
            later = "".join(ins[k + 1 :]) + out
            keep = "".join(dict.fromkeys(c for c in sa + ins[k] if c in later))
            a = _standard(xp, (sa, ins[k]), keep, (a, picked[k]))
            sa = keep
        return _standard(xp, (sa,), out, (a,))
    a, sa = _prepare(xp, picked[0], ins[0], ins[1] + out)
    b, sb = _prepare(xp, picked[1], ins[1], sa + out)
    batch = "".join(c for c in sa if c in sb and c in out)
    contracted = "".join(c for c in sa if c in sb and c not in out)
    free_a = "".join(c for c in sa if c not in sb)
    free_b = "".join(c for c in sb if c not in sa)
    size = dict(zip(sa, a.shape)) | dict(zip(sb, b.shape))

    def prod(letters: str) -> int:
        n = 1
        for c in letters:
            n *= size[c]
        return n

    bsh = tuple(size[c] for c in batch)
    a = xp.reshape(_arrange(xp, a, sa, batch + free_a + contracted), bsh + (prod(free_a), prod(contracted)))
    b = xp.reshape(_arrange(xp, b, sb, batch + contracted + free_b), bsh + (prod(contracted), prod(free_b)))
    c = xp.matmul(a, b)
    c = xp.reshape(c, bsh + tuple(size[c] for c in free_a + free_b))
    return _arrange(xp, c, batch + free_a + free_b, out)


def step(xp: ModuleType, ins: Sequence[str], out: str, picked: Sequence[Any]) -> Any:
    """``einsum(",".join(ins) + "->" + out, *picked)`` on the arrays of library `xp`."""
    einsum = getattr(xp, "einsum", None)
    if einsum is not None:
        return einsum(_rename(ins, out), *picked)
    return _standard(xp, ins, out, picked)
