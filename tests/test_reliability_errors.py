"""Bad input never gives a wrong number (issue 6).

Hypothesis strategies generate malformed einsum subscripts and operands that do
not fit them: wrong operand counts, wrong ranks, conflicting sizes, bad
characters, '->' twice, ellipsis misuse, output indices that are missing or
repeated, non-numeric operands and object arrays, integer and boolean inputs to
every transformation. Each must raise ``ea.EinsumError`` or ``TypeError`` with a
message: never another exception, never a result.

The reference is numpy.einsum itself, widened by the two extensions einad shares
with opt_einsum (any Unicode letter is an index; a '...' the output leaves out is
summed), see `tests.support.numerics.reference_einsum`: whatever it accepts (a corruption can
land on a valid spec, e.g. a size changed to 1 broadcasts) einad must accept and
give its number; whatever it refuses einad must refuse.
"""

from __future__ import annotations

import datetime
import decimal
import fractions

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import note as _hypothesis_note
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import einad as ea
from tests.support.numerics import reference_einsum

LETTERS = "abcdAB"
BAD_CHARS = "0123456789!#$%&*_+=[]{};:'\"<?/|\\~`@^()∑\u0301 "  # not letters (é, α are)


def note(message):
    """hypothesis.note inside a property, nothing in a plain test."""
    try:
        _hypothesis_note(message)
    except InvalidArgument:
        pass


def _expect_refusal(call, what):
    """`call()` must raise EinsumError or TypeError with a non-empty message."""
    try:
        out = call()
    except (ea.EinsumError, TypeError) as err:
        assert str(err).strip(), f"{what}: {type(err).__name__} without a message"
        return err
    except Exception as err:
        raise AssertionError(f"{what}: raised {type(err).__name__}: {err}") from err
    raise AssertionError(f"{what}: returned {out!r} instead of raising")


def _differential(spec, operands):
    """einad against numpy.einsum on the same (possibly malformed) input."""
    what = f"einsum({spec!r}, shapes {[np.shape(o) for o in operands]})"
    try:
        expected = reference_einsum(spec, *operands)
    except Exception:  # noqa: BLE001 - numpy's refusal, whatever its type
        note("numpy refuses it")
        _expect_refusal(lambda: ea.einsum(spec, *operands), what)
        return
    note("numpy accepts it")
    out = ea.einsum(spec, *operands)
    assert out.shape == np.shape(expected), what
    assert out.dtype == np.asarray(expected).dtype, what
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12, atol=1e-12, err_msg=what)


def _operands(shapes):
    return [np.arange(1.0, 1.0 + int(np.prod(s))).reshape(s) / 7 for s in shapes]


# -- random strings of einsum tokens ---------------------------------------------------------------

TOKENS = st.sampled_from(
    list("abcAB") + ["...", "..", ".", ",", ",", "->", "-", ">", " ", "1", "!", "é", "α", "∑", "_"]
)


@given(
    st.lists(TOKENS, max_size=12).map("".join),
    st.lists(st.lists(st.integers(0, 3), max_size=4).map(tuple), max_size=4),
)
@example("ab->ab->", [(2, 2)])
@example("...->", [(2,)])
@example(" a ... ", [(3, 3)])
def test_random_subscript_strings_agree_with_numpy(spec, shapes):
    _differential(spec, _operands(shapes))


@pytest.mark.parametrize(
    "spec, shape",
    [("a.. .", (3, 3)), ("a. ..", (3, 1)), ("a . . .", (2,)), ("ab- >ab", (2, 2)), ("ab -  > ba", (2, 2))],
)
def test_spaces_inside_an_ellipsis_or_arrow_are_refused_like_numpy(spec, shape):
    """numpy ignores spaces between tokens but refuses them inside '...' and '->'."""
    _differential(spec, _operands([shape]))


# -- valid specs, then one corruption ---------------------------------------------------------------


@st.composite
def valid_cases(draw):
    """A numpy-valid (terms, output or None, shapes) with 1-3 operands, sizes 2-3."""
    pool = "".join(draw(st.permutations(LETTERS)))[: draw(st.integers(1, 4))]
    sizes = {c: draw(st.integers(2, 3)) for c in pool}
    ell = tuple(draw(st.lists(st.integers(2, 3), max_size=2)))
    terms, shapes = [], []
    for _ in range(draw(st.integers(1, 3))):
        letters = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=3))
        if ell and draw(st.booleans()):
            pos = draw(st.integers(0, len(letters)))
            terms.append("".join(letters[:pos]) + "..." + "".join(letters[pos:]))
            shapes.append(
                tuple(sizes[c] for c in letters[:pos]) + ell + tuple(sizes[c] for c in letters[pos:])
            )
        else:
            terms.append("".join(letters))
            shapes.append(tuple(sizes[c] for c in letters))
    output = None
    if draw(st.booleans()):
        used = sorted({c for t in terms for c in t if c != "."})
        output = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
        if any("..." in t for t in terms):
            output = "..." + output
    return terms, output, shapes


CORRUPTIONS = (
    "drop operand",
    "extra operand",
    "extra dim",
    "missing dim",
    "conflicting size",
    "bad character",
    "arrow twice",
    "double ellipsis",
    "broken ellipsis",
    "output not in inputs",
    "output repeated",
    "output lost its ellipsis",
    "broken arrow",
)


@given(valid_cases(), st.sampled_from(CORRUPTIONS), st.data())
def test_corrupted_specs_are_refused_like_numpy(case, corruption, data):
    terms, output, shapes = case
    terms, shapes = list(terms), [list(s) for s in shapes]
    k = data.draw(st.integers(0, len(terms) - 1), label="operand")
    operands_delta = 0
    if corruption == "drop operand":
        operands_delta = -1
    elif corruption == "extra operand":
        operands_delta = 1
    elif corruption == "extra dim":
        shapes[k].insert(data.draw(st.integers(0, len(shapes[k]))), data.draw(st.integers(2, 3)))
    elif corruption == "missing dim" and shapes[k]:
        del shapes[k][data.draw(st.integers(0, len(shapes[k]) - 1))]
    elif corruption == "conflicting size":
        # give one labelled axis a size that no other occurrence of the label has (never 1)
        letters = [c for c in terms[k] if c != "."]
        if letters:
            i = data.draw(st.integers(0, len(letters) - 1))
            c = letters[i]
            axis = _axis_of(terms[k], shapes[k], i)
            shapes[k][axis] = 5 + (shapes[k][axis] == 5)
            note(f"label {c!r} now has size {shapes[k][axis]} in operand {k}")
    elif corruption == "bad character":
        ch = data.draw(st.sampled_from(BAD_CHARS.replace(" ", "")))
        pos = data.draw(st.integers(0, len(terms[k])))
        terms[k] = terms[k][:pos] + ch + terms[k][pos:]
    elif corruption == "arrow twice":
        output = (output or "") + "->" + (output or "")
    elif corruption == "double ellipsis":
        terms[k] = terms[k] + "..." if "..." in terms[k] else "..." + terms[k] + "..."
    elif corruption == "broken ellipsis":
        terms[k] = (
            terms[k].replace("...", "..")
            if "..." in terms[k]
            else terms[k] + data.draw(st.sampled_from([".", "..", "...."]))
        )
    elif corruption == "output not in inputs":
        unused = [c for c in "xyzXYZ" if c not in "".join(terms)]
        output = (output or "") + unused[0]
    elif corruption == "output repeated":
        letters = sorted({c for t in terms for c in t if c != "."})
        c = data.draw(st.sampled_from(letters)) if letters else "a"
        output = (output or "") + c + c
    elif corruption == "output lost its ellipsis":
        output = (output or "").replace("...", "")
    elif corruption == "broken arrow":
        output = None
        terms[-1] = terms[-1] + data.draw(st.sampled_from(["-", ">", "-->", "<-", "=>"]))
    spec = ",".join(terms) + ("" if output is None else "->" + output)
    operands = _operands([tuple(s) for s in shapes])
    if operands_delta < 0:
        operands = operands[:-1]
    elif operands_delta > 0:
        operands = operands + [np.ones((2,))]
    note(f"{corruption}: {spec!r} with shapes {[o.shape for o in operands]}")
    _differential(spec, operands)


def _axis_of(term, shape, i):
    """The axis of `shape` that the i-th letter (ignoring '...') of `term` labels."""
    n_letters = len(term.replace("...", ""))
    ell_rank = len(shape) - n_letters
    axis = 0
    seen = 0
    j = 0
    while j < len(term):
        if term.startswith("...", j):
            axis += ell_rank
            j += 3
            continue
        if seen == i:
            return axis
        seen += 1
        axis += 1
        j += 1
    raise AssertionError("letter index out of range")


def test_conflicting_size_message_names_the_index_and_both_sizes():
    err = _expect_refusal(lambda: ea.einsum("ij,jk->ik", np.ones((2, 3)), np.ones((4, 5))), "conflict")
    assert isinstance(err, ea.EinsumError)
    msg = str(err)
    assert "'j'" in msg and "3" in msg and "4" in msg, msg


# -- operands that are not numbers ------------------------------------------------------------------

# Non-numeric values that are not containers (so not pytrees of numbers).
NON_NUMERIC_LEAVES = st.one_of(
    st.text(max_size=5),
    st.binary(max_size=3),
    st.just(object()),
    st.just(lambda x: x),
    st.just(np.array([1.0, 2.0], dtype=object)),  # numpy.einsum accepts object arrays; einad refuses them
    st.just(np.array([1, "a"], dtype=object)),
    st.just(np.array([None, None])),
    st.just(np.array([fractions.Fraction(1, 2)])),
    st.just(decimal.Decimal(1)),
    st.just(np.array(["1.0", "2.0"])),
    st.just(np.array(["2020-01-01"], dtype="datetime64[D]")),
    st.just(np.timedelta64(1, "D")),
    st.just(datetime.date(2020, 1, 1)),
    st.just(np.zeros(2, dtype=[("x", float)])),
)
# ... and containers holding them, None, dicts: fine as pytrees, not as operands.
NON_NUMERIC = st.one_of(
    NON_NUMERIC_LEAVES,
    st.none(),
    st.dictionaries(st.text(max_size=2), st.floats(), max_size=2),
    st.lists(
        st.one_of(st.text(max_size=2), st.just(object()), st.just(decimal.Decimal(2))), min_size=1, max_size=3
    ),
    st.just([1.0, "x"]),
)


@given(NON_NUMERIC, st.integers(0, 2))
def test_non_numeric_einsum_operands_are_type_errors(bad, position):
    operands = [np.ones(2), np.ones(2), np.ones(2)]
    operands[position] = bad
    terms = ["i", "i", "i"]
    terms[position] = "..."  # fits any rank: only the operand's type is wrong
    _expect_refusal(lambda: ea.einsum(",".join(terms) + "->...", *operands), f"einsum with {bad!r}")


@given(NON_NUMERIC)
def test_non_numeric_operands_of_other_ops_are_type_errors(bad):
    calls = {
        "exp": lambda: ea.exp(bad),
        "add": lambda: ea.add(np.ones(2), bad),
        "multiply": lambda: ea.multiply(bad, 2.0),
        "sum": lambda: ea.sum(bad),
        "matmul": lambda: ea.matmul(np.ones(2), bad),
        "tensor": lambda: ea.tensor(bad),
        "logsumexp": lambda: ea.logsumexp(bad),
        "where": lambda: ea.where(True, bad, 1.0),
    }
    for name, call in calls.items():
        _expect_refusal(call, f"{name}({bad!r})")


@given(st.one_of(NON_NUMERIC_LEAVES, st.lists(NON_NUMERIC_LEAVES, min_size=1, max_size=2)))
def test_non_numeric_inputs_to_transformations_are_type_errors(bad):
    """A non-numeric leaf anywhere in the differentiated arguments is refused (pytrees of
    numbers, None and dicts are valid arguments, so they are not generated here)."""
    _expect_refusal(
        lambda: ea.grad(lambda x: ea.sum(ea.stack(x) if isinstance(x, list) else x))(bad), f"grad at {bad!r}"
    )
    _expect_refusal(lambda: ea.vjp(lambda x: x, bad), f"vjp at {bad!r}")
    _expect_refusal(lambda: ea.jvp(lambda x: x, (bad,), (bad,)), f"jvp at {bad!r}")
    _expect_refusal(lambda: ea.jacrev(lambda x: x)(bad), f"jacrev at {bad!r}")


def test_einsum_subscripts_must_be_a_string():
    for spec in (3, None, ["ij"], b"ij", np.ones(2)):
        _expect_refusal(lambda spec=spec: ea.einsum(spec, np.ones((2, 2))), f"subscripts {spec!r}")


def test_ragged_lists_never_give_a_result():
    # numpy's own refusal of a ragged list is a ValueError (EinsumError is one too)
    with pytest.raises(ValueError, match=r"\w"):
        ea.einsum("i", [[1.0], [1.0, 2.0]])


# -- integer and boolean inputs to every transformation ----------------------------------------------

INTEGERS = st.one_of(
    st.integers(-5, 5),
    st.booleans(),
    st.sampled_from([np.int8(3), np.int32(-2), np.int64(7), np.uint16(4), np.bool_(True)]),
    st.lists(st.integers(-3, 3), min_size=1, max_size=3).map(np.array),
    st.lists(st.booleans(), min_size=1, max_size=3).map(np.array),
    st.lists(st.integers(0, 3), min_size=1, max_size=3).map(lambda v: np.array(v, dtype=np.uint8)),
)

SCALAR_F = lambda x: ea.sum(ea.multiply(x, x))
VECTOR_F = lambda x: ea.multiply(x, 2.0)


def _transformations(x):
    ones = np.ones(np.shape(x))
    return {
        "grad": lambda: ea.grad(SCALAR_F)(x),
        "value_and_grad": lambda: ea.value_and_grad(SCALAR_F)(x),
        "grad in a pytree": lambda: ea.grad(lambda d: SCALAR_F(d["w"]))({"w": x}),
        "grad argnums tuple": lambda: ea.grad(lambda a, b: SCALAR_F(a) + SCALAR_F(b), argnums=(0, 1))(1.0, x),
        "vjp": lambda: ea.vjp(VECTOR_F, x),
        "jvp": lambda: ea.jvp(VECTOR_F, (x,), (ones,)),
        "hvp fwd-over-rev": lambda: ea.hvp(SCALAR_F, (x,), (ones,), mode="fwd-over-rev"),
        "hvp rev-over-fwd": lambda: ea.hvp(SCALAR_F, (x,), (ones,), mode="rev-over-fwd"),
        "hvp rev-over-rev": lambda: ea.hvp(SCALAR_F, (x,), (ones,), mode="rev-over-rev"),
        "jacfwd": lambda: ea.jacfwd(VECTOR_F)(x),
        "jacrev": lambda: ea.jacrev(VECTOR_F)(x),
        "hessian": lambda: ea.hessian(SCALAR_F)(x),
        "nested grad": lambda: ea.grad(lambda y: ea.grad(SCALAR_F)(x) * y)(1.0),
        "tensor(requires_grad)": lambda: ea.tensor(x, requires_grad=True),
    }


@given(INTEGERS)
def test_integer_and_boolean_inputs_to_transformations_are_type_errors(x):
    for name, call in _transformations(x).items():
        err = _expect_refusal(call, f"{name} at {x!r}")
        assert isinstance(err, TypeError), f"{name} at {x!r}: {type(err).__name__}"


def test_integer_message_suggests_a_float():
    with pytest.raises(TypeError, match=r"3\.0"):
        ea.grad(SCALAR_F)(3)


def test_integer_arguments_that_are_not_differentiated_are_fine():
    g = ea.grad(lambda x, n: ea.sum(x**n), argnums=0)(np.array([1.0, 2.0]), 3)
    np.testing.assert_array_equal(g, [3.0, 12.0])


# -- functions whose output grad cannot use -------------------------------------------------------


@pytest.mark.parametrize("shape", [(2,), (1,), (2, 2), (0,)])
def test_grad_of_a_non_scalar_is_a_type_error_pointing_to_vjp(shape):
    with pytest.raises(TypeError, match="vjp|jacrev"):
        ea.grad(lambda x: ea.multiply(x, 2.0))(np.ones(shape))


@pytest.mark.parametrize(
    "result",
    [None, "abc", [1.0, 2.0], {"a": 1.0}, object()],
    ids=["None", "str", "list", "dict", "object"],
)
def test_grad_of_a_function_returning_no_number_is_a_type_error(result):
    """A function whose result is not a number must not get a (zero) gradient."""
    _expect_refusal(lambda: ea.grad(lambda x: result)(np.ones(2)), f"grad of a function returning {result!r}")
