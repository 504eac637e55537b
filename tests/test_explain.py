"""einad.explain (`einad explain`): the path, and each operand's VJP/JVP einsum, for grammar corner cases."""

import subprocess
import sys

import numpy as np
import pytest

import einad as ea
from einad.explain import explain, main, parse_shapes


def test_matmul_vjp_is_the_permuted_subscripts():
    text = explain("ij,jk->ik", [(3, 4), (4, 5)])
    assert "normalized  ij,jk->ik" in text
    assert "contraction path ('auto'): [(0, 1)]" in text
    assert "FLOPs 120" in text
    assert "VJP  ik,jk->ij" in text  # d/dA: cotangent with B
    assert "VJP  ik,ij->jk" in text  # d/dB: cotangent with A
    assert text.count("JVP  ij,jk->ik") == 2


def test_implicit_output_is_made_explicit():
    assert "normalized  ba,ab->" in explain("ba,ab", [(2, 3), (3, 2)])
    assert "normalized  ji->ij" in explain("ji", [(2, 3)])  # implicit output: sorted letters


def test_repeated_index_spreads_onto_the_diagonal():
    text = explain("ii->", [(3, 3)])
    assert "VJP  ->" in text
    assert "then spread scalar -> ii: onto the diagonal of 'i'" in text
    text = explain("iij,jk", [(2, 2, 3), (3, 4)])
    assert "normalized  iij,jk->k" in text
    assert "VJP  k,jk->j" in text
    assert "then spread j -> iij: onto the diagonal of 'i'" in text


def test_index_only_one_operand_has_is_broadcast_back():
    text = explain("ij,j->j", [(2, 3), (3,)])
    assert "VJP  j,j->j" in text
    assert "then spread j -> ij: broadcast along 'i'" in text


def test_ellipsis_and_size_one_broadcasting():
    text = explain("...ij,...j", [(1, 3, 4), (5, 1, 4)])
    assert "-> (5, 1, 3)" in text
    text = explain("i,i", [(2,), (1,)])
    assert "operand 1: size-1 axes [0] broadcast" in text
    assert "normalized  i,->" in text


def test_bad_subscripts_give_the_einsum_error():
    with pytest.raises(ea.EinsumError, match="output index 'z'"):
        explain("ij,jk->iz", [(3, 4), (4, 5)])
    with pytest.raises(ea.EinsumError, match="index 'j' has size 4 in operand 0 and size 5 in operand 1"):
        explain("ij,jk->ik", [(3, 4), (5, 5)])


def test_parse_shapes():
    assert parse_shapes("3x4,4x5") == ((3, 4), (4, 5))
    assert parse_shapes(",2") == ((), (2,))
    with pytest.raises(ea.EinsumError, match="cannot read the shape"):
        parse_shapes("3by4")


def test_main_exit_codes(capsys):
    assert main(["explain", "ij,jk->ik", "--shapes", "3x4,4x5"]) == 0
    assert "VJP  ik,jk->ij" in capsys.readouterr().out
    assert main(["explain", "ij->->", "--shapes", "3x4"]) == 2
    assert "'->' appears more than once" in capsys.readouterr().err


def test_memory_limit_minus_one_is_no_limit(capsys):
    network = ["explain", "abc,ade,bdf,cef->", "--shapes", "4x4x4,4x4x4,4x4x4,4x4x4"]
    assert main([*network, "--memory-limit", "-1"]) == 0
    unlimited = capsys.readouterr().out
    assert main(network) == 0
    assert unlimited == capsys.readouterr().out
    assert main([*network, "--memory-limit", "0"]) == 2
    assert "memory_limit must be at least 1 element (or -1: no limit), got 0" in capsys.readouterr().err


def test_python_dash_m():
    run = subprocess.run(
        [sys.executable, "-m", "einad", "explain", "i,j->ij", "--shapes", "2,3"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "VJP  ij,j->i" in run.stdout


def test_the_backward_pass_lists_the_pairwise_vjps_that_run():
    """With three operands or more explain lists each pairwise step's two VJP einsums, last step
    first: the einsums a staged gradient of a non-scalar contraction runs (and the products of
    the planned sweep of a scalar one)."""
    shapes = [(2, 3, 4), (4, 5), (5, 6), (3,)]
    text = explain("abc,cd,de,b->ae", shapes)
    backward = text.split("backward pass")[1]
    listed = [line.split()[1] for line in backward.splitlines() if line.strip().startswith("d")]
    assert len(listed) == 6  # two per pairwise step
    assert backward.index("step 3") < backward.index("step 2") < backward.index("step 1")
    operands = [np.ones(s) for s in shapes]
    f = lambda *ops: ea.sum(ea.einsum("abc,cd,de,b->ae", *ops))
    program = ea.make_graph(ea.grad(f, argnums=(0, 1, 2, 3)))(*operands)
    forward = [line.split()[2] for line in text.splitlines() if line.strip().startswith("step ")][:3]
    assert program.einsums[:3] == forward
    assert sorted(listed) == sorted(e for e in program.einsums[3:] if e != "ab->")


def test_two_operands_have_no_separate_backward_pass():
    text = explain("ij,jk->ik", [(3, 4), (4, 5)])
    assert "backward pass" not in text
    assert "step 1: ij,jk->ik" in text
