"""einad.program, make_graph: the program a function runs, and the program its gradient runs;
the listing, Graph.einsums and Graphviz's to_dot.

Where the listing's format is fixed (typed binders, the user's einsum
subscripts, elementwise ops and literals) the exact text is asserted; where the
implementation picks letters (the helpers' einsums) the structure is matched.
"""

import re
from collections import Counter

import numpy as np
import pytest

import einad as ea

A = np.random.default_rng(0).standard_normal((3, 4))
B = np.random.default_rng(1).standard_normal((4, 5))


def matmul_sum(a, b):
    return ea.sum(ea.einsum("ij,jk->ik", a, b))


def lines(graph):
    return str(graph).splitlines()


def by_output(graph):
    return {e.output: e for e in graph.equations}


# -- the forward program ------------------------------------------------------------------------


def test_listing_of_an_einsum_function_is_exact():
    g = ea.make_graph(lambda a, b: ea.einsum("ij,jk->ik", a, b))(A, B)
    assert isinstance(g, ea.Graph)
    assert str(g) == ("{ lambda a:f64[3,4] b:f64[4,5] .\n    c:f64[3,5] = einsum[ij,jk->ik] a b\n  in (c) }")
    assert g.einsums == ["ij,jk->ik"]
    assert g.inputs == [("a", "f64[3,4]"), ("b", "f64[4,5]")]
    assert g.outputs == ["c"]


def test_listing_has_one_line_per_op_with_literals_and_types():
    g = ea.make_graph(lambda a, b: ea.sin(ea.einsum("ij,jk->ik", a, b)) * 2.0)(A, B)
    assert str(g) == (
        "{ lambda a:f64[3,4] b:f64[4,5] .\n"
        "    c:f64[3,5] = einsum[ij,jk->ik] a b\n"
        "    d:f64[3,5] = sin c\n"
        "    e:f64[3,5] = multiply d 2.0\n"
        "  in (e) }"
    )
    assert len(lines(g)) == len(g.equations) + 2
    assert [e.op for e in g.equations] == ["einsum", "sin", "multiply"]


def test_listing_keeps_the_users_letters_and_case_and_float32():
    x = np.ones((2, 3), dtype=np.float32)
    y = np.ones((3, 2), dtype=np.float32)
    g = ea.make_graph(lambda x, y: ea.einsum("aB,Bc->ca", x, y))(x, y)
    assert str(g) == ("{ lambda a:f32[2,3] b:f32[3,2] .\n    c:f32[2,2] = einsum[aB,Bc->ca] a b\n  in (c) }")


def test_captured_arrays_are_listed_as_constants():
    W = np.ones((2, 3))
    g = ea.make_graph(lambda x: ea.einsum("ij,j->i", W, x))(np.ones(3))
    assert str(g) == ("{ lambda k0:f64[2,3] ; a:f64[3] .\n    b:f64[2] = einsum[ij,j->i] k0 a\n  in (b) }")


def test_pytree_inputs_and_outputs():
    g = ea.make_graph(lambda p: {"y": ea.einsum("ij,j->i", p["w"], p["x"]), "w": p["w"]})(
        {"x": np.ones(3), "w": np.ones((2, 3))}
    )
    # leaves in sorted-key order: w is a, x is b; outputs likewise (w, y)
    assert g.inputs == [("a", "f64[2,3]"), ("b", "f64[3]")]
    assert [str(e) for e in g.equations] == ["c:f64[2] = einsum[ij,j->i] a b"]
    assert g.outputs == ["a", "c"]


# -- calling a graph: its signature is checked ----------------------------------------------------

REST = "a program runs at the signature it was staged for"


def test_a_graph_called_at_its_signature_runs_on_new_values():
    g = ea.make_graph(lambda x, w: ea.mean(x) * ea.sum(w))(np.zeros(4), np.ones((2, 3), np.float32))
    np.testing.assert_allclose(g(np.array([1.0, 3.0, 2.0, 2.0]), np.full((2, 3), 0.5, np.float32)), 6.0)


def test_a_graph_called_with_another_shape_raises_naming_both():
    """Replayed at (2,) the program of a mean over 4 divides by 4: 1.0 where f gives 2.0."""
    g = ea.make_graph(lambda x: ea.mean(x))(np.zeros(4))
    expected = f"this program takes f64[4] for input a, got f64[2] ({REST}"
    with pytest.raises(TypeError, match=re.escape(expected)):
        g(np.array([1.0, 3.0]))
    with pytest.raises(TypeError, match=re.escape("takes f64[4] for input a, got f64[4,1]")):
        g(np.zeros((4, 1)))


def test_a_graph_called_with_another_dtype_raises_naming_both():
    g = ea.make_graph(lambda x, y: ea.einsum("ij,jk->ik", x, y))(A, B)
    with pytest.raises(TypeError, match=re.escape("takes f64[3,4] for input a, got f32[3,4]")):
        g(A.astype(np.float32), B)
    with pytest.raises(TypeError, match=re.escape("takes f64[4,5] for input b, got c128[4,5]")):
        g(A, B.astype(complex))


def test_each_mismatched_leaf_of_a_pytree_is_named_and_only_those():
    g = ea.make_graph(lambda p: p["w"] @ p["x"] + p["b"])(
        {"b": np.ones(2), "w": np.ones((2, 3)), "x": np.ones(3)}
    )
    with pytest.raises(TypeError) as err:
        g({"b": np.ones(2, np.float32), "w": np.ones((2, 3)), "x": np.ones(4)})
    message = str(err.value)
    assert message.startswith(
        "this program takes f64[2] for input a, got f32[2]; f64[3] for input c, got f64[4] ("
    )
    assert "input b" not in message


def test_a_graph_takes_a_python_number_as_the_0d_array_it_was_staged_as():
    """make_graph stages a Python number as numpy's 0-d array of it (2.0: f64[], not weakly
    typed), so the graph takes a float (or a 0-d float64) there, and refuses an int, which
    would run the program in other dtypes."""
    x = np.ones(3, np.float32)
    g = ea.make_graph(lambda x, s: x * s)(x, 2.0)
    assert g.inputs == [("a", "f32[3]"), ("b", "f64[]")]
    for s in (3.0, np.float64(3.0), np.array(3.0)):
        out = g(x, s)
        assert out.dtype == np.float64  # what f gives for a 0-d float64 array
        np.testing.assert_array_equal(out, np.full(3, 3.0))
    with pytest.raises(TypeError, match=re.escape("takes f64[] for input b, got Python int")):
        g(x, 3)
    with pytest.raises(TypeError, match=re.escape("takes f64[] for input b, got f64[1]")):
        g(x, np.array([3.0]))


def test_a_graph_checks_traced_arguments_by_their_values_and_still_transforms():
    g = ea.make_graph(lambda x: ea.sum(ea.sin(x)))(np.zeros(4))
    np.testing.assert_allclose(ea.grad(g)(np.ones(4)), np.cos(np.ones(4)))
    np.testing.assert_allclose(ea.vmap(g)(np.ones((2, 4))), np.full(2, 4 * np.sin(1.0)))
    with pytest.raises(TypeError, match=re.escape("takes f64[4] for input a, got f64[3]")):
        ea.grad(g)(np.ones(3))
    with pytest.raises(TypeError, match=re.escape("takes f64[4] for input a, got f64[3]")):
        ea.vmap(g)(np.ones((2, 3)))  # each example is checked


def test_implicit_output_is_listed_explicitly():
    g = ea.make_graph(lambda a, b: ea.einsum("ij,jk", a, b))(A, B)
    assert g.einsums == ["ij,jk->ik"]


def test_a_multi_operand_einsum_is_listed_as_one_equation_with_its_path_in_the_users_letters():
    """Staged, a contraction of three operands is one equation carrying its pairwise path (what
    `einad.jit` lowers, step by step, as eager einsum runs it)."""
    a, b, c = np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))
    g = ea.make_graph(lambda a, b, c: ea.einsum("ij,jk,kl->il", a, b, c))(a, b, c)
    assert g.einsums == ["ij,jk,kl->il"]
    assert [len(step) for step in g.equations[0].params["optimize"]] == [2, 2]
    assert g.equations[-1].type == "f64[2,5]"


# -- the linear helpers are einsums --------------------------------------------------------------

M = np.random.default_rng(2).standard_normal((3, 3))
V = np.random.default_rng(3).standard_normal(3)

HELPERS = {
    # name: (function, expected ops, pattern of the einsum's subscripts, numpy reference)
    "matmul": (lambda x: ea.matmul(x, x), ["einsum"], r"(\w)(\w),\2(\w)->\1\3", lambda x: x @ x),
    "@": (lambda x: x @ x, ["einsum"], r"(\w)(\w),\2(\w)->\1\3", lambda x: x @ x),
    "matmul matrix-vector": (lambda x: x @ V, ["einsum"], r"(\w)(\w),\2->\1", lambda x: x @ V),
    "dot": (lambda x: ea.dot(V, x), ["einsum"], r"(\w),\1(\w)->\2", lambda x: V @ x),
    "inner": (lambda x: ea.inner(x, x), ["einsum"], r"(\w)(\w),(\w)\2->\1\3", lambda x: np.inner(x, x)),
    "outer": (
        lambda x: ea.outer(x[0], x[1]),
        ["getitem", "getitem", "einsum"],
        r"(\w),(\w)->\1\2",
        lambda x: np.outer(x[0], x[1]),
    ),
    "tensordot": (
        lambda x: ea.tensordot(x, x, axes=1),
        ["einsum"],
        r"(\w)(\w),\2(\w)->\1\3",
        lambda x: np.tensordot(x, x, axes=1),
    ),
    "tensordot 2": (
        lambda x: ea.tensordot(x, x, axes=2),
        ["einsum"],
        r"(\w)(\w),\1\2->",
        lambda x: np.tensordot(x, x, axes=2),
    ),
    "transpose": (ea.transpose, ["einsum"], r"(\w)(\w)->\2\1", np.transpose),
    ".T": (lambda x: x.T, ["einsum"], r"(\w)(\w)->\2\1", np.transpose),
    "moveaxis": (lambda x: ea.moveaxis(x, 0, 1), ["einsum"], r"(\w)(\w)->\2\1", np.transpose),
    "trace": (ea.trace, ["einsum"], r"(\w)\1->", np.trace),
    "trace offset": (
        lambda x: ea.trace(x, offset=1),
        ["getitem", "einsum"],
        r"(\w)\1->",
        lambda x: np.trace(x, offset=1),
    ),
    "diagonal": (ea.diagonal, ["einsum"], r"(\w)\1->\1", np.diagonal),
    "sum": (ea.sum, ["einsum"], r"(\w)(\w)->", np.sum),
    "sum axis": (lambda x: ea.sum(x, axis=0), ["einsum"], r"(\w)(\w)->\2", lambda x: x.sum(axis=0)),
    "method sum": (lambda x: x.sum(axis=1), ["einsum"], r"(\w)(\w)->\1", lambda x: x.sum(axis=1)),
}


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_linear_helpers_appear_as_one_einsum_line(name):
    f, ops, pattern, ref = HELPERS[name]
    g = ea.make_graph(f)(M)
    assert [e.op for e in g.equations] == ops, str(g)
    (subscripts,) = g.einsums
    assert re.fullmatch(pattern, subscripts), subscripts
    line = next(ln for ln in lines(g) if "einsum[" in ln)
    assert f"einsum[{subscripts}]" in line
    # the einsum's subscripts compute what the helper should
    (eq,) = [e for e in g.equations if e.op == "einsum"]
    np.testing.assert_allclose(f(ea.tensor(M)).numpy(), ref(M))
    assert eq.type == f"f64[{','.join(map(str, np.shape(ref(M))))}]"


# -- the gradient program ----------------------------------------------------------------------

EINSUM_LINE = re.compile(r"^\s+(\w+):(\w+\[[\d,]*\]) = einsum\[([^\]]*)\] (.*)$")


def einsum_lines(graph):
    out = []
    for ln in lines(graph):
        m = EINSUM_LINE.match(ln)
        if m:
            out.append((m.group(1), m.group(2), m.group(3), m.group(4).split()))
    return out


def test_gradient_program_holds_the_permuted_einsums_in_the_users_letters():
    g = ea.make_graph(ea.grad(matmul_sum, (0, 1)))(A, B)
    text = str(g)
    # the forward program comes first, unchanged
    assert lines(g)[1] == "    c:f64[3,5] = einsum[ij,jk->ik] a b"
    assert g.einsums[0] == "ij,jk->ik"
    found = einsum_lines(g)
    to_ij = [f for f in found if f[2].endswith("->ij")]
    to_jk = [f for f in found if f[2].endswith("->jk")]
    assert len(to_ij) == 1 and len(to_jk) == 1, text
    name_a, type_a, subs_a, args_a = to_ij[0]
    name_b, type_b, subs_b, args_b = to_jk[0]
    # d/da contracts the cotangent (indexed ik) with b (jk); d/db the cotangent with a (ij)
    assert type_a == "f64[3,4]" and type_b == "f64[4,5]"
    assert sorted(subs_a.split("->")[0].split(",")) == ["ik", "jk"], subs_a
    assert sorted(subs_b.split("->")[0].split(",")) == ["ij", "ik"], subs_b
    assert "b" in args_a and "a" in args_b
    # the two gradients are exactly those einsums' results
    assert g.outputs == [name_a, name_b]
    assert text.endswith(f"  in ({name_a}, {name_b}) }}")
    # one line per op: header, equations, footer
    assert len(lines(g)) == len(g.equations) + 2


def test_gradient_program_for_a_squared_loss_is_exact_in_its_einsum_lines():
    f = lambda a, b: ea.sum(ea.einsum("ij,jk->ik", a, b) ** 2)
    g = ea.make_graph(ea.grad(f, (0, 1)))(A, B)
    ops = [e.op for e in g.equations]
    assert "matmul" not in ops and "transpose" not in ops
    subs = g.einsums
    assert subs[0] == "ij,jk->ik"
    assert any(s.endswith("->ij") and set(s) <= set("ijk,->") for s in subs)
    assert any(s.endswith("->jk") and set(s) <= set("ijk,->") for s in subs)
    # the elementwise derivative of the square is recorded as an op on the forward value
    c = g.equations[0].output
    assert any(e.op == "multiply" and c in e.inputs for e in g.equations[1:]), str(g)


def test_gradient_of_matmul_and_transpose_lists_only_einsums():
    f = lambda x: ea.trace(ea.transpose(x) @ x)
    g = ea.make_graph(ea.grad(f))(M)
    ops = Counter(e.op for e in g.equations)
    # besides einsums: the gradient's seed (ones, spread onto the trace's diagonal) and one add
    assert set(ops) <= {"einsum", "add", "ones_like", "spread"}, str(g)
    assert ops["ones_like"] == ops["spread"] == ops["add"] == 1
    assert ops["einsum"] >= 5  # 3 forward + the gradients of the matmul and the transpose
    np.testing.assert_allclose(ea.grad(f)(M), 2 * M)


def test_gradient_of_a_three_operand_einsum_uses_the_users_letters():
    """A scalar contraction's gradient program is one node (value and gradients in one call)
    in the user's letters; a non-scalar one's, staged, is its pairwise pullbacks (a staged
    sweep would recompute the forward), also in the user's letters."""
    a, b, c = np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))
    g = ea.make_graph(ea.grad(lambda a, b, c: ea.einsum("ij,jk,kl->", a, b, c), (0, 1, 2)))(a, b, c)
    (tree,) = [e for e in g.equations if e.op == "einsum_vg"]
    assert (tree.params["inputs"], tree.params["output"]) == (("ij", "jk", "kl"), "")
    assert "einsum_vg[ij,jk,kl->; wrt 0,1,2]" in str(tree)
    f = lambda a, b, c: ea.sum(ea.einsum("ij,jk,kl->il", a, b, c))
    g = ea.make_graph(ea.grad(f, (0, 1, 2)))(a, b, c)
    ends = {s.split("->")[1] for s in g.einsums}
    assert {"ij", "jk", "kl"} <= ends, g.einsums
    types = {e.output: e.type for e in g.equations}
    assert [types[o] for o in g.outputs] == ["f64[2,3]", "f64[3,4]", "f64[4,5]"]


def test_the_jvp_program_reuses_the_same_subscripts():
    # the tangent of einsum(x, x) is einsum(t, x) + einsum(x, t): same subscripts, no new rule
    g = ea.make_graph(lambda x, t: ea.jvp(lambda x: ea.einsum("ij,jk->ik", x, x), (x,), (t,)))(M, M)
    assert g.einsums == ["ij,jk->ik"] * 3
    assert str(g) == (
        "{ lambda a:f64[3,3] b:f64[3,3] .\n"
        "    c:f64[3,3] = einsum[ij,jk->ik] a a\n"
        "    d:f64[3,3] = einsum[ij,jk->ik] b a\n"
        "    e:f64[3,3] = einsum[ij,jk->ik] a b\n"
        "    f:f64[3,3] = add d e\n"
        "  in (c, f) }"
    )


# -- Graphviz ---------------------------------------------------------------------------------

EDGE = re.compile(r'^\s*"([^"]+)" -> "([^"]+)";$')
NODE = re.compile(r'^\s*"([^"]+)" \[(.*)\];$')


def check_dot(graph):
    dot = graph.to_dot()
    rows = dot.splitlines()
    assert rows[0].startswith("digraph") and rows[0].rstrip().endswith("{")
    assert rows[-1] == "}"
    assert dot.count("{") == dot.count("}")
    for r in rows:  # quotes pair up on every line, once escaped ones are set aside
        assert re.sub(r"\\.", "", r).count('"') % 2 == 0, r
    edges = Counter()
    nodes = set()
    for r in rows[1:-1]:
        m = EDGE.match(r)
        if m:
            edges[(m.group(1), m.group(2))] += 1
            continue
        m = NODE.match(r)
        assert m or r.strip().endswith(";"), r
        if m:
            nodes.add(m.group(1))
    variables = {n for n, _ in graph.inputs} | {n for n, _ in graph.consts}
    variables |= {e.output for e in graph.equations}
    expected = Counter()
    for i, e in enumerate(graph.equations):
        op = f"op{i}"
        assert op in nodes
        for src in e.inputs:
            if src in variables:
                expected[(src, op)] += 1  # one edge per use of an input
        expected[(op, e.output)] += 1
    assert edges == expected, (edges, expected)
    # every edge joins declared nodes: no phantom nodes for literals
    for src, dst in edges:
        assert src in nodes and dst in nodes, (src, dst)
    return dot


def test_to_dot_of_an_einsum_function():
    g = ea.make_graph(lambda a, b: ea.sin(ea.einsum("ij,jk->ik", a, b)) * 2.0)(A, B)
    dot = check_dot(g)
    assert '"a" -> "op0";' in dot and '"b" -> "op0";' in dot
    assert "einsum[ij,jk->ik]" in dot
    edges = [m.groups() for m in map(EDGE.match, dot.splitlines()) if m]
    into_ops = sorted(src for src, dst in edges if not src.startswith("op"))
    assert into_ops == ["a", "b", "c", "d"]  # the literal 2.0 gets no node and no edge


def test_to_dot_escapes_quotes_and_backslashes_in_einsum_indices():
    g = ea.make_graph(lambda x: ea.einsum('"\\->\\"', x))(M)  # a transpose; opt_einsum allows these indices
    dot = check_dot(g)
    assert r'"op0" [label="einsum[\"\\->\\\"]", shape=box];' in dot


def test_to_dot_draws_an_edge_per_use_of_a_repeated_operand():
    g = ea.make_graph(lambda x: ea.einsum("ij,ij->", x, x))(M)
    dot = check_dot(g)
    assert dot.count('"a" -> "op0";') == 2


def test_to_dot_of_a_gradient_program_with_constants_and_boolean_literals():
    f = lambda x: ea.sum(ea.where(x > 0, x, 0.0) * ea.einsum("ij,jk->ik", x, x))
    check_dot(ea.make_graph(ea.grad(f))(M))
    # a comparison of the input is an equation; a constant condition is the literal True
    g = ea.make_graph(lambda x: ea.where(x > 0, x, 0.0))(np.array(1.0))
    assert str(g).splitlines()[1:3] == ["    b:bool[] = greater a 0", "    c:f64[] = where b a 0.0"]
    g = ea.make_graph(lambda x: ea.where(np.array(True), x, 0.0))(np.array(1.0))
    assert str(g).splitlines()[1] == "    b:f64[] = where True a 0.0"
    assert '"True"' not in check_dot(g)


def test_graph_einsums_lists_subscripts_in_program_order():
    g = ea.make_graph(ea.grad(matmul_sum, (0, 1)))(A, B)
    assert g.einsums == [e.subscripts for e in g.equations if e.op == "einsum"]
    assert g.einsums[0] == "ij,jk->ik"
    assert all(isinstance(s, str) and "->" in s for s in g.einsums)
    assert [e.subscripts for e in g.equations if e.op != "einsum"] == [None] * sum(
        e.op != "einsum" for e in g.equations
    )
