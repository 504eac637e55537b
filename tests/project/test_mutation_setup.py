"""tests/conftest.py's settings for mutation runs (docs/guarantees.md, "Mutation testing"): under
mutmut a mutant's tests run fastest first by mutmut's recorded durations, the inherited heap is
frozen for the garbage collector and tracebacks are one line; outside mutmut none of it happens.
And for every run, each test module starts with the session's heap frozen."""

import gc
import sys
import types

import pytest

from tests import conftest


class _Item:
    def __init__(self, nodeid):
        self.nodeid = nodeid


def _mutmut_state(monkeypatch, durations):
    state = types.SimpleNamespace(duration_by_test=durations)
    monkeypatch.setitem(sys.modules, "mutmut.state", types.SimpleNamespace(state=lambda: state))


def test_under_mutmut_a_mutants_tests_run_fastest_first(monkeypatch):
    _mutmut_state(monkeypatch, {"t::slow": 3.0, "t::fast": 0.01, "t::mid": 0.5})
    monkeypatch.setattr(conftest, "_UNDER_MUTMUT", True)
    items = [_Item(n) for n in ("t::slow", "t::unknown", "t::mid", "t::fast")]
    conftest.pytest_collection_modifyitems(items)
    assert [i.nodeid for i in items] == ["t::fast", "t::mid", "t::slow", "t::unknown"]


def _config():
    return types.SimpleNamespace(option=types.SimpleNamespace(tbstyle="auto"))


def test_outside_mutmut_the_order_the_heap_and_the_tracebacks_are_left_alone(monkeypatch):
    _mutmut_state(monkeypatch, {"t::slow": 3.0, "t::fast": 0.01})
    monkeypatch.setattr(conftest, "_UNDER_MUTMUT", False)
    frozen = []
    monkeypatch.setattr(conftest.gc, "freeze", lambda: frozen.append(True))
    items = [_Item("t::slow"), _Item("t::fast")]
    conftest.pytest_collection_modifyitems(items)
    outside = _config()
    conftest.pytest_configure(outside)
    assert [i.nodeid for i in items] == ["t::slow", "t::fast"] and frozen == []
    assert outside.option.tbstyle == "auto"
    monkeypatch.setattr(conftest, "_UNDER_MUTMUT", True)
    under = _config()
    conftest.pytest_configure(under)
    assert frozen == [True] and under.option.tbstyle == "line"


def test_a_test_id_pytest_would_escape_is_refused_at_collection(monkeypatch):
    """mutmut runs a mutant's tests by their ids; an escaped id (a backslash, a newline in an
    array's repr) selects nothing, and mutmut then records every mutant of every function that
    test reaches as a timeout."""
    monkeypatch.setattr(conftest, "_UNDER_MUTMUT", False)
    conftest.pytest_collection_modifyitems([_Item("t::plain[ij,jk]")])
    with pytest.raises(pytest.UsageError, match=r"t::bad\[array\(\[\[1\],\\\\n"):
        conftest.pytest_collection_modifyitems([_Item("t::plain"), _Item("t::bad[array([[1],\\n [2]])]")])


def test_string_parameters_get_ascii_ids():
    assert conftest.pytest_make_parametrize_id(None, "αβ,β->α", "spec") == "U+03B1U+03B2,U+03B2->U+03B1"
    assert conftest.pytest_make_parametrize_id(None, "ij,jk", "spec") is None  # pytest's own id
    assert conftest.pytest_make_parametrize_id(None, (1, "α"), "x") is None


def test_every_module_starts_with_the_sessions_heap_frozen():
    """`conftest._frozen_heap`: what was alive when this module started (einad, numpy, pytest,
    hypothesis, and whatever else the session imported) is out of the collector's sight, so a
    full collection in a test walks only the objects the module made since."""
    gc.collect()
    assert gc.get_freeze_count() > 50_000
    assert len(gc.get_objects()) < gc.get_freeze_count() / 2
