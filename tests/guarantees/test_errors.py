"""Every error API.md promises: the exception type, and a message naming the problem."""

import numpy as np
import pytest

import einad as ea

A = np.ones((2, 3))
B = np.ones((3, 4))
C = np.ones((4, 4))


def test_einsum_error_is_a_value_error():
    assert issubclass(ea.EinsumError, ValueError)


# -- malformed subscripts -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, operands, match",
    [
        ("ij,j$->i", (A, B[:, 0]), r"\$"),
        ("i1,jk", (A, B), r"'1'"),
        ("ij,jk->i_k", (A, B), r"'_'"),
    ],
)
def test_bad_characters(spec, operands, match):
    with pytest.raises(ea.EinsumError, match=f"invalid character.*{match}"):
        ea.einsum(spec, *operands)


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
    with pytest.raises(ea.EinsumError, match=r"invalid character '∑'"):
        ea.einsum("α∑", A)


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


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ea.einsum(A, B), r"string.*sublists.*after operand 0 is a ndarray"),
        (lambda: ea.einsum(A, [0, 1], B), r"output sublist"),
        (lambda: ea.einsum(A, [[0], 1]), r"hashable.*\[0\]"),
        (lambda: ea.einsum(A, [0, "x"]), r"cannot be sorted.*output sublist"),
        (lambda: ea.einsum(A), r"string"),
    ],
    ids=["operand for a sublist", "operand for the output", "unhashable", "unsortable", "alone"],
)
def test_interleaved_arguments_of_the_wrong_kind_are_type_errors(call, match):
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


def test_unknown_optimize_strategy():
    with pytest.raises(ea.EinsumError, match="nonsense"):
        ea.einsum("ij,jk,kl->il", A, B, C, optimize="nonsense")


@pytest.mark.parametrize(
    "path", [[(0, 1), (1, 2)], [(0, 1), (0, 1), (0, 1)], [(0, 7)], [(0, 0), (0, 1)]], ids=str
)
def test_explicit_path_that_does_not_fit_the_operands(path):
    """A bad path is a clear EinsumError at the call, not an IndexError from inside the planner."""
    with pytest.raises(ea.EinsumError, match=r"path|optimize"):
        ea.einsum("ij,jk,kl->il", A, B, C, optimize=path)


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


def test_grad_of_a_non_scalar_function_points_to_vjp_and_jacrev():
    with pytest.raises(TypeError, match=r"scalar") as info:
        ea.grad(lambda x: x * 2.0)(np.ones(3))
    assert "vjp" in str(info.value) and "jacrev" in str(info.value)
    assert "(3,)" in str(info.value)
    with pytest.raises(TypeError, match=r"vjp"):
        ea.value_and_grad(lambda x: ea.stack([ea.sum(x), ea.sum(x)]))(np.ones(3))


def test_backward_of_a_non_scalar_without_a_cotangent():
    x = ea.tensor(np.ones(3), requires_grad=True)
    with pytest.raises(TypeError, match=r"scalar"):
        (x * 2.0).backward()


# -- gradcheck ----------------------------------------------------------------------------------------


def test_gradcheck_error_is_an_assertion_error():
    assert issubclass(ea.GradcheckError, AssertionError)


def test_gradcheck_passes_on_a_correct_function():
    assert (
        ea.gradcheck(
            lambda x, y: ea.sum(ea.sin(ea.einsum("ij,j->i", y, x)) * y[:, 0]),
            np.array([0.1, 0.2, 0.3]),
            np.arange(6.0).reshape(2, 3) / 5,
        )
        is True
    )


def test_gradcheck_catches_a_wrong_derivative():
    # value x**2, but stop_gradient drops half the derivative: reverse mode gives x, not 2x.
    f = lambda x: ea.stop_gradient(x) * x
    x = np.array([1.0, 2.0, -0.5])
    np.testing.assert_allclose(f(x).numpy(), x**2)
    with pytest.raises(ea.GradcheckError, match=r"argument.*0.*(reverse|forward)") as info:
        ea.gradcheck(f, x)
    assert isinstance(info.value, AssertionError)
    assert "central differences" in str(info.value)


def test_gradcheck_names_the_bad_argument():
    f = lambda x, y: ea.sum(x * 2.0) + ea.sum(ea.stop_gradient(y) * y)
    with pytest.raises(ea.GradcheckError, match=r"leaf 1"):
        ea.gradcheck(f, np.ones(2), np.array([1.0, 2.0]))


# -- errors at the call (issue 14) -----------------------------------------------------------------


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


def test_a_complex_cotangent_for_a_real_output():
    _, pullback = ea.vjp(lambda x: x * 2.0, np.ones(2))
    with pytest.raises(TypeError, match="complex cotangent"):
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
    prim = ea.core.rules(ea.core.Primitive("no_jvp", np.sin), vjp=lambda g, ans, vals, p, needed: [g])
    f = lambda x: ea.sum(ea.core.bind(prim, (x,), {}))
    ea.grad(f)(np.ones(2))
    with pytest.raises(NotImplementedError, match=r"forward-mode \(JVP\) rule for the primitive 'no_jvp'"):
        ea.jvp(f, (np.ones(2),), (np.ones(2),))
