"""Every code block in README.md and docs/ runs, and prints what the page says it prints.

Convention: the ```python blocks of one page run in order in one namespace (as
a reader would paste them). A ```python block followed directly by a ```text
block must print exactly that text.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]  # tests/project/ -> the repository
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```(\w*)\s*\n(.*?)^```\s*$", re.DOTALL | re.MULTILINE)


def blocks(page: pathlib.Path) -> list[tuple[str, str, str | None]]:
    """(language, code, expected output or None) for each block, in order."""
    found = [(m.group(1), m.group(2), m.end(), m.start()) for m in FENCE.finditer(page.read_text())]
    out = []
    for i, (lang, code, end, _) in enumerate(found):
        if lang != "python":
            continue
        expected = None
        if i + 1 < len(found):
            nlang, ncode, _, nstart = found[i + 1]
            between = page.read_text()[end:nstart]
            if nlang == "text" and not between.strip():
                expected = ncode
        out.append((lang, code, expected))
    return out


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.strip().splitlines())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_run(page):
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    examples = blocks(page)
    for n, (_, code, expected) in enumerate(examples, 1):
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            exec(compile(code, f"{page.name}[block {n}]", "exec"), namespace)
        if expected is not None:
            assert _norm(buf.getvalue()) == _norm(expected), f"{page.name} block {n} printed something else"


def test_every_page_has_checked_examples():
    """A page with code must show what at least one block prints, so output is checked."""
    for page in PAGES:
        examples = blocks(page)
        if examples and page.name not in ("design.md",):
            assert any(e is not None for _, _, e in examples), f"{page.name} checks no printed output"


# -- docs/modes.md: its measured work and memory ratios may move in the last digit ---------

DOC = ROOT / "docs" / "modes.md"


def _doc_blocks():
    text = DOC.read_text()
    return re.findall(r"```(\w+)\n(.*?)```", text, flags=re.DOTALL)


_NUMBER = re.compile(r"-?\d+\.\d*(?:e[-+]?\d+)?")


def _same_output(printed, shown):
    """Equal text, except that decimals may differ by 5% (+0.06): a doc should not
    break because a rounding or an op count moved in the last digit."""
    if _NUMBER.sub("#", printed.strip()) != _NUMBER.sub("#", shown.strip()):
        return False
    a = [float(x) for x in _NUMBER.findall(printed)]
    b = [float(x) for x in _NUMBER.findall(shown)]
    return all(abs(x - y) <= 0.05 * max(abs(x), abs(y)) + 0.06 for x, y in zip(a, b))


def test_docs_modes_examples_run_and_print_what_they_show(capsys):
    blocks = _doc_blocks()
    assert sum(1 for lang, _ in blocks if lang == "python") >= 5
    checked = 0
    for i, (lang, code) in enumerate(blocks):
        if lang != "python":
            continue
        assert "import einad as ea" in code and "import numpy as np" in code, f"block {i}"
        namespace = {}
        exec(compile(code, f"{DOC.name} block {i}", "exec"), namespace)
        printed = capsys.readouterr().out
        follow = blocks[i + 1] if i + 1 < len(blocks) else None
        if follow is not None and follow[0] == "text":
            assert _same_output(printed, follow[1]), f"block {i} printed:\n{printed}"
            checked += 1
        comments = re.findall(r"# prints (.+)", code)
        for comment in comments:
            assert comment.strip() in printed, f"block {i}: {comment!r} not in:\n{printed}"
        if printed.strip():
            shown = comments or (follow is not None and follow[0] == "text")
            assert shown, f"block {i} prints output the page does not show"
    assert checked >= 5


def test_doc_output_comparison_is_strict_where_it_matters():
    assert _same_output("a:f64[3,4] 1.00", "a:f64[3,4] 1.02")
    assert not _same_output("a:f64[3,4]", "a:f64[3,5]")
    assert not _same_output("work 2.0", "work 4.0")
    assert not _same_output("True", "False")
