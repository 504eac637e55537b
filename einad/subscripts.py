"""Pure string algebra for einsum subscripts: parsing, normalizing, and the
permutations that give an einsum's derivatives.

Nothing here touches an array. `parse` turns numpy's grammar (implicit output,
``...``, spaces, size-1 broadcasting), widened as opt_einsum widens it (every
character that is not reserved is an index, `is_label`; a ``...`` the output
leaves out is summed), into a canonical `Spec`: one string of index letters per
operand and one for the output, no ellipsis, every index of one size.
`from_sublists` writes numpy's interleaved form (operands with lists of labels)
as subscripts. `vjp_spec` and `pairwise_steps` derive new specs from old ones;
`numpy_subscripts` renames a spec's letters into the 52 that numpy.einsum knows.

"Letter" below means any character that is an index, not only a Unicode letter.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from opt_einsum.parser import get_symbol

from .errors import UNKNOWN_SIZES, EinsumError, unknown_sizes

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""The letters numpy.einsum knows, in opt_einsum's order."""

RESERVED = ",->."
"""The characters of the grammar: ',' separates operands, '->' leads to the output, '...' is an ellipsis."""

_FIRST_SYMBOL = get_symbol(len(_LETTERS))
"""'À' (U+00C0): past the 52 ASCII letters, ``get_symbol(i)`` is ``chr(i + 140)``, then
``chr(i + 2048)`` past the surrogates: every character from this one on but surrogates."""


def is_label(c: str) -> bool:
    """Whether the character `c` is an einsum index, as in opt_einsum: every character is,
    except the reserved ``,``, ``-``, ``>``, ``.`` and whitespace (a space is ignored, the
    others are refused).

    Only whitespace below U+00C0 is reserved: every character from U+00C0 on, Unicode
    spaces such as U+2000 and U+3000 among them, is one that ``opt_einsum.get_symbol``
    produces, so a network written with get_symbol (cotengra, quimb) is read as written.
    """
    return c not in RESERVED and not (c.isspace() and c < _FIRST_SYMBOL)


Names: TypeAlias = tuple[tuple[str, str], ...]
"""``(letter, how the user wrote it)`` pairs, for messages about interleaved sublists."""


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
        if not is_label(c):
            raise EinsumError(
                f"invalid character {c!r} in the subscripts for {position}: ',', '-', '>', '.' and "
                "whitespace are reserved (',' separates operands, '->' leads to the output, '...' is "
                "an ellipsis); every other character is an index"
            )
        items.append(c)
        i += 1
    return items


def _ordinal(k: int) -> str:
    return f"operand {k}"


class _Shown:
    """How messages show the user's indices: as letters, or as the labels of interleaved sublists.

    `fresh` are the letters that stand for the '...' (known once the ranks are checked).
    """

    def __init__(self, subscripts: str, names: Names) -> None:
        self.subscripts = subscripts
        self.names = dict(names)
        self.fresh: Collection[str] = ()

    def index(self, c: str) -> str:
        """``index 'j'``, ``index '...'``, or ``label 'left'`` for a label of a sublist."""
        if c == "..." or c in self.fresh:
            return "index '...'"
        if c in self.names:
            return f"label {self.names[c]}"
        return f"index {c!r}"

    def term(self, items: list[str], text: str) -> str:
        """One operand's subscripts `text` (split into `items`), or its sublist."""
        if not self.names:
            return repr(text)
        return "[" + ", ".join("..." if c == "..." else self.names[c] for c in items) + "]"

    def spec(self, items: list[list[str]], out_items: list[str]) -> str:
        """The whole subscripts, or the sublists ``[0, 1], [1, 2] -> [0, 2]``."""
        if not self.names:
            return repr(self.subscripts)
        return ", ".join(self.term(its, "") for its in items) + " -> " + self.term(out_items, "")


@functools.lru_cache(maxsize=4096)
def parse(subscripts: str, shapes: tuple[tuple[int, ...], ...], names: Names = ()) -> Spec:
    """Normalize numpy-style `subscripts` for operands of the given shapes.

    Every character that is not reserved is an index (`is_label`), as in
    opt_einsum: letters of any script, digits, symbols, the characters
    ``opt_einsum.get_symbol`` produces. Spaces are ignored. A ``...`` that an
    explicit output leaves out is summed, as opt_einsum and PyTorch do (numpy
    refuses it). `names` says how
    the user wrote each letter when `subscripts` come from interleaved sublists
    (`from_sublists`), so that messages show the user's labels.

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
    used = {c for its in [*items, out_items] for c in its if c != "..."}  # (letters: no '...')
    show = _Shown(subscripts, names)

    # Ranks: each operand's letters plus its ellipsis must match its ndim.
    ell_ranks = []
    for k, (its, shape) in enumerate(zip(items, shapes)):
        n_letters = sum(1 for c in its if c != "...")
        if "..." in its:
            if n_letters > len(shape):
                raise EinsumError(
                    f"{_ordinal(k)} has {len(shape)} dimension(s) but its subscripts "
                    f"{show.term(its, terms[k])} name {n_letters} besides the ellipsis"
                )
            ell_ranks.append(len(shape) - n_letters)
        else:
            if n_letters != len(shape):
                raise EinsumError(
                    f"{_ordinal(k)} has {len(shape)} dimension(s) but its subscripts "
                    f"{show.term(its, terms[k])} name {n_letters}"
                )
            ell_ranks.append(0)

    n_ell = max(ell_ranks, default=0)
    fresh = fresh_symbols(used, n_ell)
    show.fresh = fresh

    # Expand the ellipses into fresh letters, right-aligned as in broadcasting.
    inputs: list[str] = []
    for its, r in zip(items, ell_ranks):
        ell = "".join(fresh[n_ell - r :])
        inputs.append("".join(ell if c == "..." else c for c in its))

    # Sizes: known (a path needs them), equal, or 1 against n (broadcast). Repeated within an
    # operand: equal.
    for k, shape in enumerate(shapes):
        if unknown_sizes(shape):
            raise EinsumError(
                f"{_ordinal(k)} has dimensions of unknown size (shape {tuple(shape)}): " + UNKNOWN_SIZES
            )
    sizes: dict[str, int] = {}
    where: dict[str, int] = {}
    for k, (spec, shape) in enumerate(zip(inputs, shapes)):
        local: dict[str, int] = {}
        for c, d in zip(spec, shape):
            if c in local and local[c] != d:
                raise EinsumError(
                    f"{show.index(c)} is repeated in {_ordinal(k)} with different sizes {local[c]} and {d}"
                )
            local[c] = d
            if c not in sizes or (sizes[c] == 1 and d != 1):
                sizes[c] = d
                where[c] = k
            elif d != 1 and d != sizes[c]:
                raise EinsumError(
                    f"{show.index(c)} has size {sizes[c]} in {_ordinal(where[c])} "
                    f"and size {d} in {_ordinal(k)}"
                )

    ell_letters = "".join(fresh)
    if explicit:
        whole = show.spec(items, out_items)
        out_letters = []
        for c in out_items:
            if c == "...":
                out_letters.extend(fresh)  # a '...' the output leaves out is summed
                continue
            if c not in sizes:
                raise EinsumError(f"output {show.index(c)} in {whole} does not appear in the inputs")
            if c in out_letters:
                raise EinsumError(f"{show.index(c)} is repeated in the output of {whole}")
            out_letters.append(c)
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


class _Sortable:
    """A label compared by its own ``<``, for sorting labels of any (comparable) type."""

    __slots__ = ("label",)

    def __init__(self, label: Hashable) -> None:
        self.label = label

    def __lt__(self, other: _Sortable) -> bool:
        return bool(self.label < other.label)  # type: ignore[operator]


def from_sublists(
    sublists: Sequence[Sequence[Hashable]], output: Sequence[Hashable] | None = None
) -> tuple[str, Names]:
    """numpy's interleaved form as subscripts: ``([[0, 1], [1, 2]], [0, 2])`` gives ``"ab,bc->ac"``.

    Labels are any hashable values, as opt_einsum allows (ints, strings such as
    bond names ``"left"``); ``Ellipsis`` stands for ``...``. A label that is a
    string of one character that is an index (`is_label`) keeps it; the others
    get fresh letters in order of first appearance.
    Without an output sublist the output is ``...`` (when an operand has one)
    then the labels that appear once, sorted, which is numpy's rule for its
    integer labels. Also returns `names`, each letter with its label's repr, so
    that `parse` can show the user's labels in its messages.

    Raises:
        TypeError: If a label is not hashable, or the output is implicit and the
            labels that appear once cannot be sorted.
    """
    labels: list[Hashable] = []
    for sub in [*sublists, *([] if output is None else [output])]:
        for label in sub:
            if label is Ellipsis:
                continue
            try:
                hash(label)
            except TypeError:
                raise TypeError(
                    f"einsum labels must be hashable (ints, strings, ...), got {label!r}"
                ) from None
            labels.append(label)
    distinct = list(dict.fromkeys(labels))
    own = {x for x in distinct if isinstance(x, str) and len(x) == 1 and is_label(x)}
    fresh = iter(fresh_symbols(own, len(distinct) - len(own)))
    letter = {x: x if x in own else next(fresh) for x in distinct}

    def write(sub: Iterable[Hashable]) -> str:
        return "".join("..." if x is Ellipsis else letter[x] for x in sub)

    terms = [write(sub) for sub in sublists]
    if output is None:
        counts: dict[Hashable, int] = {}
        for sub in sublists:
            for x in sub:
                if x is not Ellipsis:
                    counts[x] = counts.get(x, 0) + 1
        once = [x for x, n in counts.items() if n == 1]
        try:
            once = sorted(once, key=_Sortable)
        except TypeError:
            raise TypeError(
                f"einsum without an output sublist sorts the labels that appear once (as numpy does), "
                f"but {once!r} cannot be sorted: give the output sublist"
            ) from None
        ellipsis = any(x is Ellipsis for sub in sublists for x in sub)
        out = ("..." if ellipsis else "") + write(once)
    else:
        out = write(output)
    names = tuple((letter[x], repr(x)) for x in distinct)
    return ",".join(terms) + "->" + out, names


def fresh_symbols(used: Collection[str], n: int) -> list[str]:
    """`n` index letters not in `used`: a-z, A-Z, then opt_einsum's Unicode symbols that are letters.

    Any character `is_label` accepts would do; einad picks letters so that its listings
    read well (get_symbol's '×', '÷' and Unicode spaces are indices a user may write).
    Past a-z and A-Z the letters come from above the highest character in `used`, so that
    naming a few more letters in a network of thousands takes no walk over the thousands
    (`passes.merge_einsums` asks at every merge).
    """
    out: list[str] = []
    i = 0
    while len(out) < n:
        if i == len(_LETTERS) and used:  # past the highest one used, where letters follow
            top = max(map(ord, used))
            if top < _JUMP_BELOW:
                i = max(i, _symbol_index(top) + 1)
        s = get_symbol(i)
        if s not in used and s.isalpha():
            out.append(s)
        i += 1
    return out


_JUMP_BELOW = 0x30000
"""`fresh_symbols` starts past the highest letter used only below this code point: up to it and
some way past it (CJK extension G, U+30000 to U+3134A) letters follow; above it a user's label
(a private-use character, say) may sit where no letter follows, so the walk starts at 'À'."""


def _symbol_index(code: int) -> int:
    """The i with ``ord(get_symbol(i)) == code`` for a code past the ASCII letters (get_symbol
    skips the surrogates, U+D800 to U+DFFF); below them, the last letter's."""
    if code < ord(_FIRST_SYMBOL):
        return len(_LETTERS) - 1
    return code - 140 if code < 55296 + 140 else code - 2048


@functools.lru_cache(maxsize=4096)
def numpy_subscripts(text: str) -> str:
    """`text` with every letter numpy.einsum does not know renamed to an unused one it knows.

    numpy.einsum takes only a-z and A-Z; einad's specs may hold any character that
    is an index. Each call has the letters of one step, so a network may have any
    number of indices; one step of more than 52 distinct letters is refused.
    ``numpy_subscripts("αβ,βγ->αγ") == "ab,bc->ac"``.
    """
    odd = unique("".join(c for c in text if c not in _LETTERS and c not in ",->. "))
    if not odd:
        return text
    spare = [c for c in _LETTERS if c not in text]
    if len(spare) < len(odd):
        n = len(unique("".join(c for c in text if c not in ",->. ")))
        raise EinsumError(f"a contraction step needs {n} distinct indices; numpy.einsum takes at most 52")
    table: dict[str, str | int | None] = dict(zip(odd, spare))
    return text.translate(str.maketrans(table))


def unique(spec: str) -> str:
    """The letters of `spec` in order of first appearance, each once."""
    return "".join(dict.fromkeys(spec))


@functools.lru_cache(maxsize=4096)
def vjp_operands(inputs: tuple[str, ...], output: str, k: int) -> tuple[tuple[str, ...], str, str]:
    """The VJP contraction for operand `k` (see `vjp_spec`) with its operands' subscripts
    apart: ``((output, *other inputs), kept, target)``."""
    others = inputs[:k] + inputs[k + 1 :]
    elsewhere = set(output).union(*others) if others else set(output)
    target = inputs[k]
    kept = "".join(c for c in unique(target) if c in elsewhere)
    return (output, *others), kept, target


def vjp_spec(inputs: tuple[str, ...], output: str, k: int) -> tuple[str, str, str]:
    """Subscripts of the VJP contraction for operand `k`.

    Returns ``(cotangent_and_others_spec, kept, target)``: contracting the
    cotangent (indexed by `output`) with every other operand gives an array
    indexed by `kept` (operand k's distinct letters that occur in the output or
    another operand); spreading `kept` to `target` (operand k's own subscripts,
    with its repeated letters and the letters only it has) finishes the job.
    """
    ins, kept, target = vjp_operands(inputs, output, k)
    return ",".join(ins) + "->" + kept, kept, target


MAX_AXES = 64
"""The most axes an array of numpy (and of torch or cupy) may have."""


def pairwise_steps(
    inputs: tuple[str, ...], output: str, path: tuple[tuple[int, ...], ...]
) -> tuple[tuple[tuple[int, ...], tuple[str, ...], str], ...]:
    """Follow an opt_einsum path, naming each step's subscripts.

    Each step is ``(positions, step_inputs, step_output)``: pop the operands at
    `positions` from the working list (opt_einsum's convention), contract them
    by ``step_inputs -> step_output``, and append the result. An intermediate
    keeps exactly the letters still needed by the remaining operands or the output.

    Raises:
        EinsumError: If an intermediate would have more than `MAX_AXES` indices (no array
            holds it: numpy's, torch's and cupy's arrays have at most 64 axes).
    """
    work = list(inputs)
    holders = Counter(c for spec in (*inputs, output) for c in set(spec))  # what still reads each letter
    steps = []
    for n, positions in enumerate(path):
        picked = [work[p] for p in positions]
        for p in sorted(positions, reverse=True):
            del work[p]
        for spec in picked:
            holders.subtract(set(spec))
        if n == len(path) - 1 and not work:
            out = output
        else:
            out = "".join(c for c in unique("".join(picked)) if holders[c] > 0)
            if len(out) > MAX_AXES:
                raise EinsumError(
                    f"step {n} of the contraction path makes an intermediate of {len(out)} indices, "
                    f"and an array holds at most {MAX_AXES} axes: give another path (optimize=...)"
                )
        holders.update(set(out))
        steps.append((tuple(positions), tuple(picked), out))
        work.append(out)
    return tuple(steps)


def ellipsis_labels(subscripts: str, spec: Spec) -> dict[str, str]:
    """How to show the letters `parse` gave the dimensions of a ``...``: ``"...[i]"``, the
    i-th dimension the ellipsis stands for, counted from the left of the broadcast
    (numpy's alignment: from the right). Letters the user wrote are not in the table."""
    written = set(subscripts)
    fresh = [[c for c in s if c not in written] for s in spec.inputs + (spec.output,)]
    longest = max(fresh, key=len, default=[])
    return {c: f"...[{i}]" for i, c in enumerate(longest)}
