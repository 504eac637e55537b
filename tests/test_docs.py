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

ROOT = pathlib.Path(__file__).resolve().parents[1]
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
