"""`einad.subscripts` is string algebra: these tests use strings and shape tuples, never an array."""

from __future__ import annotations

import re
import string

import pytest
from opt_einsum import get_symbol

from einad.errors import EinsumError
from einad.subscripts import fresh_symbols, from_sublists, is_label, numpy_subscripts, parse, vjp_spec

# -- Unicode letters ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "subscripts, shapes, inputs, output",
    [
        ("αβ,βγ->αγ", ((2, 3), (3, 4)), ("αβ", "βγ"), "αγ"),
        ("αβ,βγ", ((2, 3), (3, 4)), ("αβ", "βγ"), "αγ"),
        ("甲乙,乙丙->丙甲", ((2, 3), (3, 4)), ("甲乙", "乙丙"), "丙甲"),
        ("ää->", ((3, 3),), ("ää",), ""),
        ("aé,éB", ((2, 3), (3, 4)), ("aé", "éB"), "Ba"),  # implicit output: sorted by code point
    ],
)
def test_any_unicode_letter_is_an_index(subscripts, shapes, inputs, output):
    spec = parse(subscripts, shapes)
    assert spec.inputs == inputs
    assert spec.output == output


# -- opt_einsum's alphabet: every character but the reserved ones ------------------------------------


@pytest.mark.parametrize(
    "label",
    ["∑", "1", "_", "$", "\u0301", "·", "×", "÷", "😀", get_symbol(75), get_symbol(9000), get_symbol(10**6)],
)
def test_every_character_that_is_not_reserved_is_an_index(label):
    spec = parse(f"i{label},{label}->i", ((2, 3), (3,)))
    assert spec.inputs == (f"i{label}", label)
    assert spec.sizes == tuple(sorted({"i": 2, label: 3}.items()))


def test_the_unicode_spaces_get_symbol_produces_are_indices():
    # get_symbol(i) is chr(i + 140) past the 52 ASCII letters: U+2000 and U+3000 are among them
    spaces = [get_symbol(i) for i in range(52, 20000) if get_symbol(i).isspace()]
    assert {"\u2000", "\u2028", "\u3000"} <= set(spaces)
    for c in spaces:
        assert parse(f"a{c},{c}b", ((2, 3), (3, 4))).inputs == (f"a{c}", f"{c}b")
    assert all(is_label(get_symbol(i)) for i in range(0, 0x110000 - 2048, 97))


@pytest.mark.parametrize(
    "subscripts, bad",
    [
        ("i\tj,j->i", "\t"),  # whitespace other than a space
        ("ij,j\n->i", "\n"),
        ("i\xa0j,j->i", "\xa0"),  # no-break space: whitespace below U+00C0, which get_symbol never gives
        ("ij,j->i,j", ","),  # a comma in the output
        ("i-j,j->ij", "-"),  # '-' outside '->'
        ("ij,j->i>j", ">"),
    ],
    ids=["tab", "newline", "no-break-space", "comma-in-output", "lone-minus", "lone-greater"],
)
def test_a_reserved_character_out_of_place_is_named(subscripts, bad):
    with pytest.raises(EinsumError, match=re.escape(f"invalid character {bad!r}") + ".*reserved"):
        parse(subscripts, ((2, 3), (3,)))


@pytest.mark.parametrize(
    "subscripts, match",
    [
        ("i.j,j->i", r"'\.' must appear only as an ellipsis"),
        ("i......,i->i", r"more than one ellipsis '\.\.\.'"),
        ("ij,jk->ik->ki", r"'->' appears more than once"),
        ("ij,jk-ik", r"'-' and '>' may only appear as '->'"),
        (". ..i,i->i", r"no spaces inside '\.\.\.'"),
    ],
    ids=["lone-dot", "two-ellipses", "two-arrows", "broken-arrow", "spaced-ellipsis"],
)
def test_misused_grammar_is_named(subscripts, match):
    with pytest.raises(EinsumError, match=match):
        parse(subscripts, ((2, 3), (3,)))


def test_is_label_refuses_exactly_the_reserved_characters():
    refused = [chr(c) for c in range(0x110000) if not is_label(chr(c))]
    assert refused == list("\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ,-.>\x85\xa0")


def test_the_ellipsis_never_takes_a_letter_the_user_wrote():
    # the user wrote a, b and the first letters opt_einsum would use after the 52 ASCII ones
    used = string.ascii_letters[:50] + "ÀÁÂ"
    spec = parse(used + "...->...", ((1,) * 53 + (2, 3),))
    ellipsis = spec.output
    assert len(ellipsis) == 2
    assert not set(ellipsis) & set(used)
    assert all(c.isalpha() for c in ellipsis)


def test_fresh_symbols_skip_used_letters_and_are_letters():
    used = set(string.ascii_letters) | {"À", "Á"}
    fresh = fresh_symbols(used, 40)
    assert len(set(fresh)) == 40
    assert not set(fresh) & used
    assert all(c.isalpha() for c in fresh)  # opt_einsum's symbols include '×' and '÷': skipped
    assert "×" not in fresh_symbols(set(), 200)


@pytest.mark.parametrize("top", [0x4E00, 0x2FFF0, 0xF0000, 0x10FFFD])
def test_fresh_symbols_past_the_letters_whatever_the_highest_label(top):
    """Past a-z and A-Z, fresh letters start above the highest character used (a walk over a
    network's thousands of letters would be quadratic over its merges); a label where no letter
    follows (a private-use character, the last code points) must not run the walk off Unicode's
    end (it raised ValueError: chr() arg not in range). Kills: the jump taken at any height."""
    used = set(string.ascii_letters) | {chr(top)}
    fresh = fresh_symbols(used, 5)
    assert len(set(fresh)) == 5 and not set(fresh) & used and all(c.isalpha() for c in fresh)
    if top < 0x30000:  # (letters follow: the ones just past it)
        assert all(ord(c) > top for c in fresh)


def test_derivative_specs_keep_the_users_letters():
    spec = parse("αβ,βγ->αγ", ((2, 3), (3, 4)))
    assert vjp_spec(spec.inputs, spec.output, 0) == ("αγ,βγ->αβ", "αβ", "αβ")
    assert vjp_spec(spec.inputs, spec.output, 1) == ("αγ,αβ->βγ", "βγ", "βγ")


# -- a '...' the output leaves out is summed ---------------------------------------------------------


@pytest.mark.parametrize(
    "subscripts, shapes, inputs, output",
    [
        ("...ij->ij", ((5, 2, 3),), ("aij",), "ij"),
        ("...ij->", ((5, 4, 2, 3),), ("abij",), ""),
        ("...i,...i->i", ((2, 3), (1, 3)), ("ai", "i"), "i"),  # broadcast size 1: squeezed, then summed
        ("i...,...->i", ((2, 3), (3,)), ("ia", "a"), "i"),
        ("...ij->ji", ((2, 3),), ("ij",), "ji"),  # an empty '...'
    ],
)
def test_an_ellipsis_the_output_leaves_out_is_summed(subscripts, shapes, inputs, output):
    spec = parse(subscripts, shapes)
    assert (spec.inputs, spec.output) == (inputs, output)


# -- numpy's interleaved form ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sublists, output, text",
    [
        ([[0, 1], [1, 2]], [0, 2], "ab,bc->ac"),
        ([[0, 1], [1, 2]], None, "ab,bc->ac"),
        ([[2, 1], [1, 0]], None, "ab,bc->ca"),  # implicit: the once-labels sorted, as numpy does
        ([[0, 0]], None, "aa->"),
        ([[0, 0]], [0], "aa->a"),
        ([[Ellipsis, 0, 1], [1, 2]], [Ellipsis, 0, 2], "...ab,bc->...ac"),
        ([[Ellipsis, 1], [1]], None, "...a,a->..."),
        ([[], [0]], None, ",a->a"),
        ([["left", "bond"], ["bond", "right"]], None, "ab,bc->ac"),
        ([["j", "k"], ["k", "i"]], None, "jk,ki->ij"),  # one-letter labels keep their letter
        ([[0, "a"], ["a", (1, 2)]], [(1, 2), 0], "ba,ac->cb"),  # any hashable; mixed types need an output
        ([["β", "α"]], None, "βα->αβ"),
        ([[" ", "×"], ["×", ","]], None, "a×,×b->ab"),  # '×' is an index, ' ' and ',' are not: renamed
    ],
)
def test_from_sublists(sublists, output, text):
    assert from_sublists(sublists, output)[0] == text


def test_from_sublists_names_each_letter_after_its_label():
    text, names = from_sublists([["left", 0], [0, Ellipsis]], None)
    assert text == "ab,b...->...a"
    assert dict(names) == {"a": "'left'", "b": "0"}


def test_from_sublists_refuses_unhashable_and_unsortable_labels():
    with pytest.raises(TypeError, match=r"hashable.*\[0\]"):
        from_sublists([[[0], 1]], None)
    with pytest.raises(TypeError, match="output sublist"):
        from_sublists([[0, "x"]], None)  # implicit output: 0 and 'x' cannot be sorted
    assert from_sublists([[0, "x"]], ["x", 0])[0] == "ax->xa"


def test_parse_messages_show_the_users_labels():
    text, names = from_sublists([["left", "bond"], ["bond", "right"]], None)
    with pytest.raises(EinsumError, match=r"label 'bond' has size 3 in operand 0 and size 4 in operand 1"):
        parse(text, ((2, 3), (4, 5)), names)
    text, names = from_sublists([[0, 1, 2]], [0])
    with pytest.raises(EinsumError, match=r"subscripts \[0, 1, 2\] name 3"):
        parse(text, ((2, 3),), names)
    text, names = from_sublists([[0, 1]], [0, 5])
    with pytest.raises(EinsumError, match=r"output label 5 in \[0, 1\] -> \[0, 5\] does not appear"):
        parse(text, ((2, 3),), names)
    text, names = from_sublists([[0, 1]], [1, 1])
    with pytest.raises(EinsumError, match=r"label 1 is repeated in the output"):
        parse(text, ((2, 3),), names)
    text, names = from_sublists([[7, Ellipsis], [7, Ellipsis]], None)
    with pytest.raises(EinsumError, match=r"index '\.\.\.' has size 2 .* size 3"):
        parse(text, ((4, 2), (4, 3)), names)


# -- numpy.einsum's alphabet --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("ij,jk->ik", "ij,jk->ik"),
        ("αβ,βγ->αγ", "ab,bc->ac"),
        ("αa,aγ->αγ", "ba,ac->bc"),  # renamed letters avoid the ones already there
        ("ää->", "aa->"),
    ],
)
def test_numpy_subscripts(text, expected):
    assert numpy_subscripts(text) == expected


def test_numpy_subscripts_refuses_more_indices_than_numpy_takes():
    with pytest.raises(EinsumError, match="53 distinct indices"):
        numpy_subscripts(string.ascii_letters + "α->")
