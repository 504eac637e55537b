"""einad.post_import: a function run right after a module's first import, whoever imports it
(how einad plugs into quimb's optimizer whichever is imported first)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from einad import post_import


@pytest.fixture
def package(tmp_path, monkeypatch):
    """A package `hooked_pkg` with a submodule `table` (a dict to plug into), not imported yet."""
    root = tmp_path / "hooked_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "table.py").write_text("HANDLERS = {'numpy': 'numpy'}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    finders = list(sys.meta_path)  # (einad's own finder for quimb among them, where it waits)
    yield "hooked_pkg.table"
    for name in ("hooked_pkg.table", "hooked_pkg"):
        sys.modules.pop(name, None)
    sys.meta_path[:] = finders


def plug():
    sys.modules["hooked_pkg.table"].HANDLERS["einad"] = "einad"


def test_runs_right_after_the_first_import_and_leaves_the_finders_as_they_were(package):
    finders = list(sys.meta_path)
    post_import.after_import(package, plug)
    assert package not in sys.modules and len(sys.meta_path) == len(finders) + 1
    from hooked_pkg import table

    assert table.HANDLERS == {"numpy": "numpy", "einad": "einad"}
    assert sys.meta_path == finders
    assert type(table.__spec__.loader).__module__ == post_import.__name__  # its loader ran it


def test_a_module_loaded_already_is_plugged_into_at_once(package):
    from hooked_pkg import table

    finders = list(sys.meta_path)
    post_import.after_import(package, plug)
    assert table.HANDLERS["einad"] == "einad" and sys.meta_path == finders


def test_asking_twice_waits_once(package):
    calls = []
    post_import.after_import(package, lambda: calls.append(1))
    waiting = [f for f in sys.meta_path if getattr(f, "name", None) == package]
    post_import.after_import(package, waiting[0].then)
    assert [f for f in sys.meta_path if getattr(f, "name", None) == package] == waiting
    import hooked_pkg.table  # noqa: F401

    assert calls == [1]


def test_a_failure_to_plug_in_is_a_warning_not_a_failed_import(package):
    def broken():
        raise ValueError("its table changed")

    post_import.after_import(package, broken)
    with pytest.warns(RuntimeWarning, match="einad could not plug into hooked_pkg.table.*its table changed"):
        from hooked_pkg import table

    assert table.HANDLERS == {"numpy": "numpy"} and sys.modules[package] is table


def test_importing_einad_loads_no_quimb():
    code = textwrap.dedent(
        """
        import sys, einad
        print(sorted(m for m in sys.modules if m.split('.')[0] in ('quimb', 'cotengra')))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
