"""Run a function right after a module is first imported, whoever imports it.

einad plugs itself into other libraries' tables (quimb's `TNOptimizer` handlers) by importing
a module of its own that writes into theirs. When the other library is loaded before einad,
``import einad`` can do that at once; when it is loaded after, the first import of its module
has to be seen as it happens. `after_import` puts a finder at the front of ``sys.meta_path``
that waits for that one name: it finds the module's spec through the finders behind it (so
editable installs, zip imports and the like load it as they would), lets the module's own
loader run it, calls the function, and leaves ``sys.meta_path`` as it was. Nothing is
imported ahead of time: importing einad never loads quimb.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

__all__ = ["after_import"]


class _Loader(importlib.abc.Loader):
    """The module's own loader, then `then`. Every other attribute is the loader's."""

    def __init__(self, loader: Any, then: Callable[[], object]) -> None:
        self.loader = loader
        self.then = then

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        module: ModuleType | None = self.loader.create_module(spec)
        return module

    def exec_module(self, module: ModuleType) -> None:
        self.loader.exec_module(module)
        _call(self.then, module.__name__)

    def __getattr__(self, name: str) -> Any:  # (get_resource_reader, get_data, is_package, ...)
        return getattr(self.loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    """Waits at the front of ``sys.meta_path`` for the import of `name`, once."""

    def __init__(self, name: str, then: Callable[[], object]) -> None:
        self.name = name
        self.then = then

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        sys.meta_path[:] = [f for f in sys.meta_path if f is not self]  # (once, found or not)
        for finder in list(sys.meta_path):
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, self.then)
                return spec
        return None


def _call(then: Callable[[], object], name: str) -> None:
    """`then()`; what it raises is a warning (einad's failing to plug in is no reason for the
    other library's import, or einad's, to fail)."""
    try:
        then()
    except Exception as e:  # noqa: BLE001  (whatever it is, the import goes on)
        warnings.warn(f"einad could not plug into {name}: {e!r}", RuntimeWarning, stacklevel=3)


def after_import(name: str, then: Callable[[], object]) -> None:
    """Call `then()` right after module `name` is first imported (at once if it is loaded
    already). `then` runs once, inside that import; should it raise, the import goes on and
    the error becomes a `RuntimeWarning`."""
    if name in sys.modules:
        _call(then, name)
        return
    if not any(isinstance(f, _Finder) and f.name == name and f.then is then for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder(name, then))
