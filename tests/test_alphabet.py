"""opt_einsum's whole alphabet (issue 22): networks written with `opt_einsum.get_symbol`.

cotengra and quimb name the indices of a network ``get_symbol(0)``, ``get_symbol(1)``, ...:
past the 52 ASCII letters come '×' (75), '÷' (107), and from a few thousand on Unicode
spaces (U+2000, U+3000). A periodic ladder of 200 tensors with 300 such indices (bond
dimension 2) is contracted along a greedy path, eagerly and under `ea.jit`; its value is
opt_einsum's, and the gradient of every operand is its environment, contracted by
opt_einsum from the other 199 operands (never einad checking einad).
"""

from __future__ import annotations

import re

import numpy as np
import opt_einsum as oe
import pytest
from opt_einsum import get_symbol

import einad as ea

RUNGS = 100  # 200 tensors, 300 indices


def ladder(first=0, rungs=RUNGS):
    """The subscripts of a periodic ladder: rung k joins the top and bottom tensors of column k,
    which join their neighbours in the next column (the last column joins the first)."""
    symbols = [get_symbol(first + i) for i in range(3 * rungs)]
    rung, top, bottom = symbols[:rungs], symbols[rungs : 2 * rungs], symbols[2 * rungs :]
    inputs = []
    for k in range(rungs):
        inputs.append(top[k - 1] + rung[k] + top[k])
        inputs.append(bottom[k - 1] + rung[k] + bottom[k])
    return inputs


def environment(inputs, operands, k):
    """d(network)/d(operand k): the other operands contracted by opt_einsum to operand k's indices."""
    others = inputs[:k] + inputs[k + 1 :]
    spec = ",".join(others) + "->" + inputs[k]
    return oe.contract(spec, *(operands[:k] + operands[k + 1 :]), optimize="greedy")


@pytest.fixture(scope="module")
def network():
    """(subscripts' inputs, operands, value, environments): computed once (200 opt_einsum calls)."""
    inputs = ladder()
    rng = np.random.default_rng(22)
    operands = [0.6 * rng.uniform(0.2, 1.0, (2, 2, 2)) for _ in inputs]  # a value of order 10
    value = oe.contract(",".join(inputs) + "->", *operands, optimize="greedy")
    envs = [environment(inputs, operands, k) for k in range(len(operands))]
    return inputs, operands, value, envs


# The first 300 symbols ('×' and '÷' among them) and 300 from U+1FF4 on, with the Unicode spaces
# U+2000 to U+200A, U+2028, U+2029, U+202F and U+205F: the same network, labelled otherwise.
FIRSTS = {"first-300": 0, "unicode-spaces": 0x1FF4 - 140}


def test_the_ladders_are_written_with_get_symbols_non_letters():
    for first in FIRSTS.values():
        letters = set("".join(ladder(first)))
        assert len(letters) == 300
        assert any(not c.isalpha() for c in letters)
    assert {"×", "÷"} <= set("".join(ladder(0)))
    assert {"\u2000", "\u2028", "\u205f"} <= set("".join(ladder(FIRSTS["unicode-spaces"])))


@pytest.mark.parametrize("first", FIRSTS.values(), ids=FIRSTS.keys())
def test_a_300_index_network_contracts_as_opt_einsum(network, first):
    _, operands, value, _ = network
    spec = ",".join(ladder(first)) + "->"
    assert np.isclose(oe.contract(spec, *operands, optimize="greedy"), value, rtol=1e-12)
    np.testing.assert_allclose(ea.einsum(spec, *operands, optimize="greedy").numpy(), value, rtol=1e-12)
    path, info = ea.contract_path(spec, *operands, optimize="greedy")
    assert path == oe.contract_path(spec, *operands, optimize="greedy")[0]
    assert info.sliced_indices == ()
    assert ea.contract_path(spec, *operands, optimize="greedy", memory_limit=-1)[0] == path
    expr = ea.contract_expression(spec, *[x.shape for x in operands], optimize="greedy", memory_limit=-1)
    assert expr.path == path
    np.testing.assert_allclose(expr(*operands).numpy(), value, rtol=1e-12)


def test_the_interleaved_form_with_300_labels(network):
    """Beyond 52 labels, einad writes the interleaved form with opt_einsum's symbols too."""
    inputs, operands, value, _ = network
    sublists = [[ord(c) for c in term] for term in inputs]
    args = [x for pair in zip(operands, sublists) for x in pair] + [[]]
    np.testing.assert_allclose(ea.einsum(*args, optimize="greedy").numpy(), value, rtol=1e-12)
    assert ea.contract_path(*args, optimize="greedy")[0] == oe.contract_path(*args, optimize="greedy")[0]


@pytest.mark.parametrize("staged", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("first", FIRSTS.values(), ids=FIRSTS.keys())
def test_the_gradient_of_every_operand_is_its_environment(network, first, staged):
    _, operands, value, envs = network
    spec = ",".join(ladder(first)) + "->"
    argnums = tuple(range(len(operands)))
    vg = ea.value_and_grad(lambda *xs: ea.einsum(spec, *xs, optimize="greedy"), argnums=argnums)
    if staged:
        vg = ea.jit(vg)
    got, grads = vg(*operands)
    np.testing.assert_allclose(got, value, rtol=1e-12)
    assert len(grads) == len(envs) == 200
    for k, (g, env) in enumerate(zip(grads, envs)):
        np.testing.assert_allclose(
            g, env, rtol=1e-10, atol=1e-12 * np.max(np.abs(env)), err_msg=f"operand {k}"
        )


def test_the_gradient_program_keeps_get_symbols_indices(network):
    _, operands, _, _ = network
    spec = ",".join(ladder()) + "->"
    graph = ea.make_graph(ea.grad(lambda *xs: ea.einsum(spec, *xs, optimize="greedy"), argnums=(0, 1)))(
        *operands
    )
    written = set(spec)
    specs = list(graph.einsums) + [  # the tree's value-and-gradient (operands 2.. are constants)
        ",".join(e.params["inputs"]) + "->" + e.params["output"]
        for e in graph.equations
        if e.op == "einsum_vg"
    ]
    assert len(specs) > len(graph.einsums)
    assert all(set(s) <= written for s in specs)  # every einsum in the user's symbols
    assert any("×" in s for s in specs) and any("÷" in s for s in specs)


def test_errors_in_a_300_index_network_name_the_users_characters(network):
    inputs, operands, _, _ = network
    spec = ",".join(inputs) + "->"
    wrong = list(operands)
    k = next(k for k, term in enumerate(inputs) if "×" in term)
    wrong[k] = np.ones(tuple(3 if c == "×" else 2 for c in inputs[k]))
    with pytest.raises(
        ea.EinsumError, match=r"index '×' has size \d in operand \d+ and size \d in operand \d+"
    ):
        ea.einsum(spec, *wrong)
    tab = spec.replace(inputs[150], inputs[150][:2] + "\t" + inputs[150][2:], 1)
    with pytest.raises(
        ea.EinsumError, match=re.escape("invalid character '\\t' in the subscripts for operand 150")
    ):
        ea.einsum(tab, *operands)
    dots = spec.replace(inputs[7], inputs[7] + "..", 1)
    with pytest.raises(ea.EinsumError, match=r"operand 7: '\.' must appear only as an ellipsis"):
        ea.einsum(dots, *operands)


def test_an_ellipsis_beside_more_letters_than_ascii_has():
    """A network that uses all 52 ASCII letters and more (opt_einsum's symbols) and a '...':
    the ellipsis' dimensions get letters past the user's (no ``ord('...')`` on the way)."""
    syms = "".join(oe.get_symbol(i) for i in range(53))
    terms = [syms[i] + syms[i + 1] for i in range(52)]
    terms[0], terms[-1] = "..." + terms[0], "..." + terms[-1]
    spec = ",".join(terms) + "->..."
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal((2, 2)) for _ in terms]
    ops[0], ops[-1] = rng.standard_normal((3, 2, 2)), rng.standard_normal((3, 2, 2))
    np.testing.assert_allclose(ea.einsum(spec, *ops).numpy(), oe.contract(spec, *ops))
