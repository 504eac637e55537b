"""tests/conftest.py's settings for mutation runs (docs/guarantees.md, "Mutation testing"): under
mutmut a mutant's tests run fastest first by mutmut's recorded durations, and the inherited heap is
frozen for the garbage collector; outside mutmut neither happens."""

import sys
import types

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


def test_outside_mutmut_the_order_and_the_heap_are_left_alone(monkeypatch):
    _mutmut_state(monkeypatch, {"t::slow": 3.0, "t::fast": 0.01})
    monkeypatch.setattr(conftest, "_UNDER_MUTMUT", False)
    frozen = []
    monkeypatch.setattr(conftest.gc, "freeze", lambda: frozen.append(True))
    items = [_Item("t::slow"), _Item("t::fast")]
    conftest.pytest_collection_modifyitems(items)
    conftest.pytest_configure(None)
    assert [i.nodeid for i in items] == ["t::slow", "t::fast"] and frozen == []
    monkeypatch.setattr(conftest, "_UNDER_MUTMUT", True)
    conftest.pytest_configure(None)
    assert frozen == [True]
