"""Errors (docs/guarantees.md): every error API.md promises has its exception type and a
message naming the problem, and bad input never gives a wrong number.

The first part lists the errors one by one: malformed subscripts and interleaved sublists,
sizes that disagree, bad optimize paths, differentiating integer or boolean inputs, argnums,
cotangents and tangents of the wrong dtype, grad of a non-scalar.

The second part generates bad input with hypothesis: malformed einsum subscripts and operands
that do not fit them (wrong operand counts, wrong ranks, conflicting sizes, bad characters,
'->' twice, ellipsis misuse, output indices that are missing or repeated), non-numeric
operands and object arrays, integer and boolean inputs to every transformation. Each must
raise ``ea.EinsumError`` or ``TypeError`` with a message: never another exception, never a
result. The reference is numpy.einsum itself, widened by the two extensions einad shares
with opt_einsum (every character but the grammar's is an index; a '...' the output leaves
out is summed),
see `tests.support.numerics.reference_einsum`: whatever it accepts (a corruption can land on
a valid spec, e.g. a size changed to 1 broadcasts) einad must accept and give its number;
whatever it refuses einad must refuse.
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import re

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import note as _hypothesis_note
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

import einad as ea
from tests.support.numerics import reference_einsum

A = np.ones((2, 3))
B = np.ones((3, 4))
C = np.ones((4, 4))


def test_einsum_error_is_a_value_error():
    assert issubclass(ea.EinsumError, ValueError)


# -- malformed subscripts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, operands, bad",
    [
        ("ij,j\t->i", (A, B[:, 0]), "\t"),
        ("i\xa0j,jk", (A, B), "\xa0"),
        ("ij,jk->i,k", (A, B), ","),
    ],
    ids=["tab", "no-break-space", "comma-in-output"],  # the specs' escapes would be escaped in the ids
)
def test_bad_characters(spec, operands, bad):
    """Only the grammar's characters are bad (',', '-', '>', '.', whitespace below U+00C0):
    every other character is an index, as in opt_einsum. The message shows the character."""
    with pytest.raises(ea.EinsumError, match=re.escape(f"invalid character {bad!r}")):
        ea.einsum(spec, *operands)


@pytest.mark.parametrize("label", ["$", "1", "_", "∑", "×"])
def test_characters_numpy_refuses_are_indices_as_in_opt_einsum(label):
    out = ea.einsum(f"ij,j{label}->i{label}", A, B)
    np.testing.assert_allclose(out.numpy(), A @ B)


def test_arrow_twice():
    with pytest.raises(ea.EinsumError, match="'->'.*more than once"):
        ea.einsum("ij,jk->ik->ki", A, B)


@pytest.mark.parametrize("spec", ["ij,jk-ik", "ij,jk>ik", "ij,jk-->ik"])
def test_broken_arrow(spec):
    with pytest.raises(ea.EinsumError, match="->|'-'|'>'"):
        ea.einsum(spec, A, B)


@pytest.mark.parametrize(
    "spec, operands, match",
    [
        ("i.j,jk", (A, B), r"'\.'.*ellipsis"),
        ("....ij", (A,), r"ellipsis"),
        ("..ij", (A,), r"ellipsis"),
        ("...i...j", (A,), r"more than one ellipsis"),
        ("ij->i...j...", (A,), r"more than one ellipsis"),
    ],
    ids=["i.j,jk", "....ij", "..ij", "...i...j", "ij->i...j..."],
)
def test_ellipsis_misuse(spec, operands, match):
    with pytest.raises(ea.EinsumError, match=match):
        ea.einsum(spec, *operands)


@pytest.mark.parametrize(
    "spec, operands, match",
    [
        ("ijk", (A,), r"operand 0 has 2 dimension.*'ijk'.*3"),
        ("i", (A,), r"operand 0 has 2 dimension.*'i'.*1"),
        ("ij,jkl->ik", (A, B), r"operand 1 has 2 dimension"),
        ("ijk...", (A,), r"operand 0 has 2 dimension"),
    ],
)
def test_subscripts_and_ranks_disagree(spec, operands, match):
    with pytest.raises(ea.EinsumError, match=match):
        ea.einsum(spec, *operands)


@pytest.mark.parametrize("operands", [(A,), (A, B, B), ()])
def test_operand_count_mismatch(operands):
    with pytest.raises(ea.EinsumError, match=rf"2 operand.*{len(operands)}"):
        ea.einsum("ij,jk->ik", *operands)


@pytest.mark.parametrize(
    "spec, operands, letter, sizes",
    [
        ("ij,jk->ik", (A, A), "j", (3, 2)),
        ("ij,jk->ik", (A, C), "j", (3, 4)),
        ("ij,jk->ik", (np.ones((2, 3)), np.ones((4, 5))), "j", (3, 4)),
        ("ij,ij->ij", (np.ones((2, 3)), np.ones((3, 3))), "i", (2, 3)),
        ("ii->i", (A,), "i", (2, 3)),
        ("i,i->", (np.ones(2), np.ones(3)), "i", (2, 3)),
        ("...,...", (np.ones(2), np.ones(3)), "...", (2, 3)),
    ],
)
def test_index_sizes_disagree(spec, operands, letter, sizes):
    """The message names the index and both sizes."""
    with pytest.raises(ea.EinsumError) as info:
        ea.einsum(spec, *operands)
    msg = str(info.value)
    assert f"'{letter}'" in msg, msg
    for size in sizes:
        assert str(size) in msg, msg


def test_size_one_broadcast_is_not_an_error():
    assert ea.einsum("i,i->", np.ones(3), np.ones(1)).shape == ()
    assert ea.einsum("ij,jk->ik", np.ones((2, 1)), np.ones((3, 4))).shape == (2, 4)


def test_output_index_missing_from_the_inputs():
    with pytest.raises(ea.EinsumError, match=r"'l'.*does not appear"):
        ea.einsum("ij,jk->il", A, B)
    with pytest.raises(ea.EinsumError, match=r"'i'.*does not appear"):
        ea.einsum("Ij,jk->ik", A, B)  # case matters


@pytest.mark.parametrize(
    "spec, operands", [("ij,jk->ii", (A, B)), ("ij,jk->iki", (A, B)), ("ij-> j j", (A,))]
)
def test_repeated_output_index(spec, operands):
    with pytest.raises(ea.EinsumError, match=r"'[ij]'.*repeated in the output"):
        ea.einsum(spec, *operands)


def test_an_ellipsis_the_output_leaves_out_is_summed_not_refused():
    # numpy refuses "...i,...i->"; einad sums the '...' dimensions, as opt_einsum and PyTorch do
    x = np.arange(6.0).reshape(2, 3)
    np.testing.assert_allclose(ea.einsum("...i,...i->", x, x).numpy(), np.sum(x * x))


def test_unicode_index_errors_name_the_users_letter():
    with pytest.raises(ea.EinsumError, match=r"index 'β' has size 3 in operand 0 and size 2 in operand 1"):
        ea.einsum("αβ,βγ->αγ", A, A)
    with pytest.raises(ea.EinsumError, match=r"output index 'ω' in 'αβ->ω' does not appear"):
        ea.einsum("αβ->ω", A)
    with pytest.raises(ea.EinsumError, match=r"invalid character '\\t'"):
        ea.einsum("α\tβ", A)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ea.einsum(A, ["left", "bond"], A, ["bond", "right"]), r"label 'bond' has size 3.*size 2"),
        (lambda: ea.einsum(A, [0, 1], A, [1, 2], [0, 2]), r"label 1 has size 3 in operand 0 and size 2"),
        (lambda: ea.einsum(A, [0, 1, 2]), r"operand 0 has 2 dimension.*\[0, 1, 2\] name 3"),
        (lambda: ea.einsum(A, [0, 1], [0, 9]), r"output label 9 in \[0, 1\] -> \[0, 9\] does not appear"),
        (lambda: ea.einsum(A, ["i", "j"], ["j", "j"]), r"label 'j' is repeated in the output"),
        (lambda: ea.einsum(A, [Ellipsis, 0, Ellipsis]), r"more than one ellipsis"),
    ],
    ids=["bond", "ints", "rank", "missing output", "repeated output", "two ellipses"],
)
def test_interleaved_errors_name_the_users_labels(call, match):
    with pytest.raises(ea.EinsumError, match=match) as info:
        call()
    assert "'a'" not in str(info.value) and "'b'" not in str(info.value)  # not einad's own letters


_FORMS = "einsum takes the subscripts as a string first, or operands interleaved with sublists of labels"
_STATIC = (
    "einsum labels are static Python values (ints, strings), not Tensors; under ea.jit pass the "
    "sublists as static arguments (static_argnums), as tuples"
)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda: ea.einsum(A, B),
            rf"^{_FORMS}: the argument after operand 0 is a ndarray, not a list of labels$",
        ),
        (
            lambda: ea.einsum(A, [0, 1], B),
            (
                r"^in einsum's interleaved form the last argument, when there is one more than the operand "
                r"and sublist pairs, is the output sublist: got a ndarray, not a list$"
            ),
        ),
        (lambda: ea.einsum(A, [[0], 1]), r"hashable.*\[0\]"),
        (lambda: ea.einsum(A, [0, "x"]), r"cannot be sorted.*output sublist"),
        (lambda: ea.einsum(A), rf"^{_FORMS}, as in einsum\(a, \[0, 1\], b, \[1, 2\], \[0, 2\]\)$"),
        (lambda: ea.jit(ea.einsum)(A, [0, 1], B, [1, 2]), rf"^{re.escape(_STATIC)}$"),
        (lambda: ea.jit(lambda a, out: ea.einsum(a, (0, 1), out))(A, [1, 0]), rf"^{re.escape(_STATIC)}$"),
    ],
    ids=[
        "operand for a sublist",
        "operand for the output",
        "unhashable",
        "unsortable",
        "alone",
        "traced sublists",
        "traced output sublist",
    ],
)
def test_interleaved_arguments_of_the_wrong_kind_are_type_errors(call, match):
    """Each refusal is a TypeError whose whole message says which argument is wrong and how
    einsum takes its arguments (under ea.jit: that labels are static)."""
    with pytest.raises(TypeError, match=match):
        call()


def test_sublists_traced_by_jit_are_refused_with_a_hint():
    # ea.jit traces the ints of a list argument: labels must be static
    with pytest.raises(TypeError, match="static_argnums"):
        ea.jit(ea.einsum)(A, [0, 1], B, [1, 2])
    out = ea.jit(ea.einsum, static_argnums=(1, 3))(A, (0, 1), B, (1, 2))
    np.testing.assert_allclose(out, A @ B)


def test_errors_are_raised_inside_transformations_too():
    with pytest.raises(ea.EinsumError, match=r"'j'.*3.*2"):
        ea.grad(lambda a: ea.sum(ea.einsum("ij,jk->ik", a, a)))(A)


def test_subscripts_must_be_a_string():
    with pytest.raises(TypeError, match="string"):
        ea.einsum(3, A)
    for spec in (3, None, ["ij"], b"ij", np.ones(2)):
        _expect_refusal(lambda spec=spec: ea.einsum(spec, np.ones((2, 2))), f"subscripts {spec!r}")


def test_unknown_optimize_strategy():
    with pytest.raises(ea.EinsumError, match="nonsense"):
        ea.einsum("ij,jk,kl->il", A, B, C, optimize="nonsense")


@pytest.mark.parametrize(
    "path",
    [
        [(0, 1), (1, 2)],
        [(0, 1), (0, 1), (0, 1)],
        [(0, 7)],
        [(0, 0), (0, 1)],
        [(0.5, 1), (0, 1)],
        [(0, 1.0), (0, 1)],
    ],
    ids=str,
)
def test_explicit_path_that_does_not_fit_the_operands(path):
    """A bad path is a clear EinsumError at the call, not an IndexError from inside the planner
    (and a position that is no integer is refused, as opt_einsum does, not cut down to one)."""
    with pytest.raises(ea.EinsumError, match=r"path|optimize"):
        ea.einsum("ij,jk,kl->il", A, B, C, optimize=path)


def test_a_path_of_numpy_integers_is_a_path():
    path = [(np.int64(1), np.int32(2)), (np.intp(0), 1)]
    np.testing.assert_allclose(
        ea.einsum("ij,jk,kl->il", A, B, C, optimize=path).numpy(), A @ B @ C, rtol=1e-12
    )


# -- differentiating with respect to non-float inputs -------------------------------------------------


@pytest.mark.parametrize(
    "x, match",
    [
        (3, r"integer"),
        (np.int32(3), r"integer"),
        (np.array([1, 2]), r"int64|integer|floating"),
        (np.array([1, 2], np.int8), r"int8|integer|floating"),
        (True, r"integer|bool"),
        (np.array([True, False]), r"bool"),
    ],
    ids=["int", "np.int32", "int array", "int8 array", "bool", "bool array"],
)
def test_grad_with_respect_to_integer_or_boolean(x, match):
    with pytest.raises(TypeError, match=match):
        ea.grad(lambda x: ea.sum(x * 1.0))(x)
    with pytest.raises(TypeError, match=match):
        ea.vjp(lambda x: x * 1.0, x)
    with pytest.raises(TypeError, match=match):
        ea.value_and_grad(lambda y, x: ea.sum(x * y), argnums=1)(1.0, x)


def test_grad_error_names_the_argument():
    with pytest.raises(TypeError, match=r"argument 1"):
        ea.grad(lambda x, n: ea.sum(x * n), argnums=(0, 1))(np.ones(2), 2)


def test_requires_grad_on_an_integer_tensor():
    with pytest.raises(TypeError, match=r"int"):
        ea.tensor([1, 2], requires_grad=True)


@pytest.mark.parametrize("shape", [(3,), (2,), (1,), (2, 2), (0,)])
def test_grad_of_a_non_scalar_function_points_to_vjp_and_jacrev(shape):
    with pytest.raises(TypeError, match=r"scalar") as info:
        ea.grad(lambda x: x * 2.0)(np.ones(shape))
    assert "vjp" in str(info.value) and "jacrev" in str(info.value)
    assert str(shape) in str(info.value)
    with pytest.raises(TypeError, match="vjp|jacrev"):
        ea.grad(lambda x: ea.multiply(x, 2.0))(np.ones(shape))
    with pytest.raises(TypeError, match=r"vjp"):
        ea.value_and_grad(lambda x: ea.stack([ea.sum(x), ea.sum(x)]))(np.ones(3))


# -- errors at the call ---------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 3])
def test_unknown_optimize_name_for_any_number_of_operands(n):
    operands = [np.ones((2, 2))] * n
    spec = ",".join(["ij"] * n) + "->ij"
    with pytest.raises(ea.EinsumError, match="bogus"):
        ea.einsum(spec, *operands, optimize="bogus")


@pytest.mark.parametrize("argnums", ["0", 0.5, None, (0, "1"), True])
@pytest.mark.parametrize("transform", ["grad", "value_and_grad", "jacrev", "jacfwd", "hessian"])
def test_argnums_of_the_wrong_type(transform, argnums):
    with pytest.raises(TypeError, match="argnums must be an int or a tuple of ints"):
        getattr(ea, transform)(lambda x: ea.sum(x), argnums=argnums)(np.ones(2))


DECORATING = ["grad", "value_and_grad", "jacrev", "jacfwd", "hessian", "jit", "vmap", "checkpoint"]
DECORATING += ["make_graph", "custom_vjp", "custom_jvp"]
CALLING = {  # the transformations that take the function and its arguments in one call
    "vjp": lambda f, x: ea.vjp(f, x),
    "jvp": lambda f, x: ea.jvp(f, (x,), (x,)),
    "hvp": lambda f, x: ea.hvp(f, (x,), (x,)),
    "linearize": lambda f, x: ea.linearize(f, x),
    "gradcheck": lambda f, x: ea.gradcheck(f, x),
}


@pytest.mark.parametrize("value", [np.ones(3), ea.tensor([1.0, 2.0]), 2.5], ids=["array", "Tensor", "float"])
@pytest.mark.parametrize("name", DECORATING + list(CALLING))
def test_a_value_where_the_function_belongs_is_refused_where_it_is_written(name, value):
    """``ea.grad(f(x))`` (the function's value in the function's place, JAX's TypeError at
    ``jax.grad``): a TypeError at the transformation that names it and shows the call as it
    should be, not numpy's "object is not callable" from inside a later call."""
    message = rf"einad\.{name} takes a function, got {type(value).__name__}: write "
    with pytest.raises(TypeError, match=message):
        if name in CALLING:
            CALLING[name](value, np.ones(3))
        else:
            getattr(ea, name)(value)


def test_a_complex_cotangent_for_a_real_output():
    """Refused with a TypeError naming both dtypes and the two ways out."""
    _, pullback = ea.vjp(lambda x: x * 2.0, np.ones(2))
    ways_out = (
        r"a complex cotangent \(dtype complex128\) for a real output \(dtype float64\): "
        "pass a real cotangent, or make the output complex"
    )
    with pytest.raises(TypeError, match=ways_out):
        pullback(np.ones(2) * 1j)
    y = ea.tensor([1.0, 2.0], requires_grad=True) * 3.0
    with pytest.raises(TypeError, match="complex cotangent"):
        y.backward(np.ones(2, dtype=complex))
    _, pullback = ea.vjp(lambda x: x * 2.0, np.ones(2, dtype=complex))  # complex output: fine
    assert pullback(np.ones(2) * 1j)[0].dtype == complex


@pytest.mark.parametrize("tangent", [np.ones(2, dtype=int), np.ones(2, dtype=bool), np.ones(2) * 1j])
def test_an_integer_or_complex_tangent_for_a_real_primal(tangent):
    with pytest.raises(TypeError, match="tangent of dtype"):
        ea.jvp(lambda x: x * 2.0, (np.ones(2),), (tangent,))


def test_a_primitive_without_a_forward_rule_names_it_and_the_mode():
    prim = ea.core.declare(
        ea.core.Primitive("no_jvp", np.sin), vjp=lambda g, ans, vals, p, needed: [g], aliasing="fresh"
    )
    f = lambda x: ea.sum(ea.core.bind(prim, (x,), {}))
    ea.grad(f)(np.ones(2))
    with pytest.raises(NotImplementedError, match=r"forward-mode \(JVP\) rule for the primitive 'no_jvp'"):
        ea.jvp(f, (np.ones(2),), (np.ones(2),))


# -- generated bad input ------------------------------------------------------------------------------

LETTERS = "abcdAB"
# whitespace below U+00C0; every other character but the grammar's (',', '-', '>', '.') is an index
BAD_CHARS = "\t\n\r\x0b\x0c\x1f\x85\xa0"


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


# -- random strings of einsum tokens, against numpy -----------------------------------------------

TOKENS = st.sampled_from(
    list("abcAB")
    + ["...", "..", ".", ",", ",", "->", "-", ">", " ", "\t", "1", "!", "é", "α", "∑", "_", "×", "\u3000"]
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
        ch = data.draw(st.sampled_from(BAD_CHARS))
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


# -- functions whose output grad cannot use -------------------------------------------------------


@pytest.mark.parametrize(
    "result",
    [None, "abc", [1.0, 2.0], {"a": 1.0}, object()],
    ids=["None", "str", "list", "dict", "object"],
)
def test_grad_of_a_function_returning_no_number_is_a_type_error(result):
    """A function whose result is not a number must not get a (zero) gradient."""
    _expect_refusal(lambda: ea.grad(lambda x: result)(np.ones(2)), f"grad of a function returning {result!r}")
