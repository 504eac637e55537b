"""Pure string algebra for einsum subscripts: parsing, normalizing, and the
permutations that give an einsum's derivatives.

Nothing here touches an array. `parse` turns numpy's grammar (implicit output,
``...``, spaces, size-1 broadcasting) into a canonical `Spec`: one string of
index letters per operand and one for the output, no ellipsis, every index of
one size. `vjp_spec` and `pairwise_steps` derive new specs from old ones.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from dataclasses import dataclass

from opt_einsum.parser import get_symbol

from .errors import EinsumError

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass(frozen=True)
class Spec:
    """A canonical einsum: ``inputs[k]`` indexes operand k, ``output`` the result.

    ``squeeze[k]`` lists the axes of operand k that are size 1 and broadcast
    against a larger size of the same index; they are squeezed away (with their
    letters) before the contraction, as numpy's broadcasting implies.
    """

    inputs: tuple[str, ...]
    output: str
    sizes: tuple[tuple[str, int], ...]
    squeeze: tuple[tuple[int, ...], ...]

    @property
    def text(self) -> str:
        """The subscripts as one string, ``"ij,jk->ik"``."""
        return ",".join(self.inputs) + "->" + self.output

    def size(self, letter: str) -> int:
        """The size of index `letter`."""
        return dict(self.sizes)[letter]


def _split_term(term: str, position: str) -> list[str]:
    """Split one operand's subscripts into letters, with '...' as one item."""
    items: list[str] = []
    i = 0
    while i < len(term):
        c = term[i]
        if c == ".":
            if term[i : i + 3] != "...":
                raise EinsumError(
                    f"invalid subscripts for {position}: '.' must appear only as an ellipsis '...'"
                )
            if "..." in items:
                raise EinsumError(f"more than one ellipsis '...' in the subscripts for {position}")
            items.append("...")
            i += 3
            continue
        if c not in _LETTERS:
            raise EinsumError(
                f"invalid character {c!r} in the subscripts for {position}: "
                "only letters a-z, A-Z and '...' are allowed"
            )
        items.append(c)
        i += 1
    return items


def _ordinal(k: int) -> str:
    return f"operand {k}"


@functools.lru_cache(maxsize=4096)
def parse(subscripts: str, shapes: tuple[tuple[int, ...], ...]) -> Spec:
    """Normalize numpy-style `subscripts` for operands of the given shapes.

    Raises `EinsumError` with a message naming the problem.
    """
    if re.search(r"\.\s+\.|-\s+>", subscripts):
        raise EinsumError(f"invalid subscripts {subscripts!r}: no spaces inside '...' or '->'")
    text = subscripts.replace(" ", "")
    if text.count("->") > 1:
        raise EinsumError(f"'->' appears more than once in {subscripts!r}")
    if "->" in text:
        lhs, rhs = text.split("->")
        explicit = True
    else:
        if "-" in text or ">" in text:
            raise EinsumError(f"invalid subscripts {subscripts!r}: '-' and '>' may only appear as '->'")
        lhs, rhs, explicit = text, "", False
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise EinsumError(
            f"subscripts {subscripts!r} name {len(terms)} operand(s) but {len(shapes)} were given"
        )
    items = [_split_term(t, _ordinal(k)) for k, t in enumerate(terms)]
    out_items = _split_term(rhs, "the output") if explicit else []

    # Ranks: each operand's letters plus its ellipsis must match its ndim.
    ell_ranks = []
    for k, (its, shape) in enumerate(zip(items, shapes)):
        n_letters = sum(1 for c in its if c != "...")
        if "..." in its:
            if n_letters > len(shape):
                raise EinsumError(
                    f"{_ordinal(k)} has {len(shape)} dimension(s) but its subscripts "
                    f"{terms[k]!r} name {n_letters} besides the ellipsis"
                )
            ell_ranks.append(len(shape) - n_letters)
        else:
            if n_letters != len(shape):
                raise EinsumError(
                    f"{_ordinal(k)} has {len(shape)} dimension(s) but its subscripts "
                    f"{terms[k]!r} name {n_letters}"
                )
            ell_ranks.append(0)

    used = {c for its in items for c in its} | set(out_items)
    n_ell = max(ell_ranks, default=0)
    fresh = fresh_symbols(used, n_ell)

    # Expand the ellipses into fresh letters, right-aligned as in broadcasting.
    inputs: list[str] = []
    for its, r in zip(items, ell_ranks):
        ell = "".join(fresh[n_ell - r :])
        inputs.append("".join(ell if c == "..." else c for c in its))

    # Sizes: equal, or 1 against n (broadcast). Repeated within an operand: equal.
    sizes: dict[str, int] = {}
    where: dict[str, int] = {}
    for k, (spec, shape) in enumerate(zip(inputs, shapes)):
        local: dict[str, int] = {}
        for c, d in zip(spec, shape):
            if c in local and local[c] != d:
                raise EinsumError(
                    f"index {_show(c, fresh)} is repeated in {_ordinal(k)} with different sizes "
                    f"{local[c]} and {d}"
                )
            local[c] = d
            if c not in sizes or (sizes[c] == 1 and d != 1):
                sizes[c] = d
                where[c] = k
            elif d != 1 and d != sizes[c]:
                raise EinsumError(
                    f"index {_show(c, fresh)} has size {sizes[c]} in {_ordinal(where[c])} "
                    f"and size {d} in {_ordinal(k)}"
                )

    ell_letters = "".join(fresh)
    if explicit:
        out_letters = []
        for c in out_items:
            if c == "...":
                out_letters.extend(fresh)
                continue
            if c not in sizes:
                raise EinsumError(f"output index {c!r} in {subscripts!r} does not appear in the inputs")
            if c in out_letters:
                raise EinsumError(f"index {c!r} is repeated in the output of {subscripts!r}")
            out_letters.append(c)
        if "..." not in out_items and fresh:
            # numpy refuses to sum broadcast ellipsis dimensions away silently.
            raise EinsumError(
                f"the inputs of {subscripts!r} have '...' dimensions but the output has no '...'"
            )
        output = "".join(out_letters)
    else:
        counts: dict[str, int] = {}
        for spec in inputs:
            for c in spec:
                counts[c] = counts.get(c, 0) + 1
        once = sorted(c for c, n in counts.items() if n == 1 and c not in ell_letters)
        output = ell_letters + "".join(once)

    # Size-1 axes of an index that is larger elsewhere are squeezed away.
    squeeze = []
    final_inputs = []
    for spec, shape in zip(inputs, shapes):
        axes = tuple(a for a, (c, d) in enumerate(zip(spec, shape)) if d == 1 and sizes[c] != 1)
        squeeze.append(axes)
        final_inputs.append("".join(c for a, c in enumerate(spec) if a not in axes))
    return Spec(
        inputs=tuple(final_inputs),
        output=output,
        sizes=tuple(sorted(sizes.items())),
        squeeze=tuple(squeeze),
    )


def _show(c: str, fresh: list[str]) -> str:
    return "'...'" if c in fresh else repr(c)


def fresh_symbols(used: Collection[str], n: int) -> list[str]:
    """`n` index symbols not in `used`: letters first, then opt_einsum's unicode symbols."""
    out: list[str] = []
    i = 0
    while len(out) < n:
        s = _LETTERS[i] if i < len(_LETTERS) else get_symbol(i)
        if s not in used:
            out.append(s)
        i += 1
    return out


def unique(spec: str) -> str:
    """The letters of `spec` in order of first appearance, each once."""
    return "".join(dict.fromkeys(spec))


def vjp_spec(inputs: tuple[str, ...], output: str, k: int) -> tuple[str, str, str]:
    """Subscripts of the VJP contraction for operand `k`.

    Returns ``(cotangent_and_others_spec, kept, target)``: contracting the
    cotangent (indexed by `output`) with every other operand gives an array
    indexed by `kept` (operand k's distinct letters that occur in the output or
    another operand); spreading `kept` to `target` (operand k's own subscripts,
    with its repeated letters and the letters only it has) finishes the job.
    """
    others = inputs[:k] + inputs[k + 1 :]
    elsewhere = set(output).union(*others) if others else set(output)
    target = inputs[k]
    kept = "".join(c for c in unique(target) if c in elsewhere)
    spec = ",".join((output,) + others) + "->" + kept
    return spec, kept, target


def pairwise_steps(
    inputs: tuple[str, ...], output: str, path: tuple[tuple[int, ...], ...]
) -> tuple[tuple[tuple[int, ...], tuple[str, ...], str], ...]:
    """Follow an opt_einsum path, naming each step's subscripts.

    Each step is ``(positions, step_inputs, step_output)``: pop the operands at
    `positions` from the working list (opt_einsum's convention), contract them
    by ``step_inputs -> step_output``, and append the result. An intermediate
    keeps exactly the letters still needed by the remaining operands or the output.
    """
    work = list(inputs)
    steps = []
    for n, positions in enumerate(path):
        picked = [work[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del work[p]
        if n == len(path) - 1 and not work:
            out = output
        else:
            needed = set(output).union(*work) if work else set(output)
            out = "".join(c for c in unique("".join(picked)) if c in needed)
        steps.append((tuple(positions), tuple(picked), out))
        work.append(out)
    return tuple(steps)
