"""The public surface (issue 26): ``dir(einad)`` and ``dir(einad.linalg)`` list exactly the
public names, each documented in docs/api.md; the implementation (submodules, imported
helpers such as ``np`` or ``Callable``) stays reachable but unlisted. Errors name the user's
call, not a private function."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import einad as ea

API = re.sub(  # the fenced code blocks and ``double-backtick`` spans out, so that backticks pair up
    r"``.*?``",
    "",
    re.sub(r"```.*?```", "", (Path(__file__).parents[2] / "docs" / "api.md").read_text(), flags=re.DOTALL),
)
DOCUMENTED = (
    set(re.findall(r"::: einad\.(?:ops\.)?(\w+)", API))
    | {word for members in re.findall(r"members: \[([^\]]*)\]", API) for word in re.findall(r"\w+", members)}
    | {word for span in re.findall(r"`([^`]+)`", API) for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", span)}
)


def test_dir_of_the_package_is_its_documented_names():
    names = dir(ea)
    assert names == sorted(ea.__all__)
    for leaked in ("np", "Callable", "TYPE_CHECKING", "core", "rules", "annotations"):
        assert leaked not in names
    undocumented = [n for n in names if n not in DOCUMENTED]
    assert undocumented == []


def test_dir_of_linalg_is_numpy_linalgs_names_einad_serves():
    names = dir(ea.linalg)
    assert names == sorted(ea.linalg.__all__)
    for leaked in ("np", "bind", "Any", "Tensor", "math", "eigh_p"):
        assert leaked not in names
    assert [n for n in names if n not in DOCUMENTED] == []
    for n in names:  # each one is numpy.linalg's name (expm and lu are scipy.linalg's)
        assert hasattr(np.linalg, n) or n in (
            "expm",
            "lu",
            "EigResult",
            "EighResult",
            "QRResult",
            "SVDResult",
            "SlogdetResult",
        )


def test_dir_of_fft_is_numpy_ffts_names():
    names = dir(ea.fft)
    assert names == sorted(ea.fft.__all__)
    for leaked in ("np", "ops", "transform", "Tensor", "math"):
        assert leaked not in names
    assert [n for n in names if n not in DOCUMENTED] == []
    assert all(callable(getattr(np.fft, n)) for n in names)


def test_a_mapped_function_is_named_after_the_function():
    def double(x):
        return 2 * x

    mapped = ea.vmap(double)
    assert mapped.__name__ == mapped.__qualname__ == "vmap(double)"
    with pytest.raises(TypeError, match="bogus"):  # (keywords are mapped, and passed on as given)
        mapped(np.ones(3), bogus=np.ones(3))
    with pytest.raises(TypeError):
        ea.vmap(double, raw=True)  # the ignored keyword is gone


def test_explain_refuses_an_unknown_strategy_for_any_number_of_operands():
    for shapes in ("2x3,3x4", "2x3,3x4,4x5"):
        subs = "ij,jk->ik" if shapes.count(",") == 1 else "ij,jk,kl->il"
        run = subprocess.run(
            [sys.executable, "-m", "einad", "explain", subs, "--shapes", shapes, "--optimize", "foo"],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2
        assert "unknown optimize strategy 'foo'" in run.stderr
    with pytest.raises(ea.EinsumError, match="unknown optimize strategy 'foo'"):
        ea.einsum("ij,jk->ik", np.ones((2, 3)), np.ones((3, 4)), optimize="foo")
