"""The array libraries the library-parametrized tests run on, and how they convert.

`lib` (the conftest fixture) is one `Lib`: numpy, array-api-strict (the conformance
check: it refuses numpy arrays mixed into its own), torch on the CPU, and dask.array
(threaded scheduler). A library that is not installed is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from einad.arrays import library, to_numpy

NAMES = ("numpy", "array_api_strict", "torch", "dask")


@dataclass(frozen=True)
class Lib:
    name: str
    module: Any

    def asarray(self, a: Any) -> Any:
        """A numpy array (or number) as an array of this library, dtype kept."""
        a = np.asarray(a)
        if self.name == "numpy":
            return a
        if self.name == "torch":
            return self.module.from_numpy(np.array(a))
        if self.name == "dask":
            return self.module.from_array(np.array(a), chunks=tuple(max(1, (n + 1) // 2) for n in a.shape))
        return self.module.asarray(np.array(a))

    def numpy(self, x: Any) -> Any:
        """An array of any library as numpy (dask computed, torch detached)."""
        return to_numpy(x)

    @contextlib.contextmanager
    def lazy(self) -> Any:
        """On dask: fail if anything inside is computed (einad must stay lazy); elsewhere nothing."""
        if self.name != "dask":
            yield
            return
        from dask.callbacks import Callback

        computed: list[int] = []
        with Callback(start=lambda dsk: computed.append(1)):
            yield
        assert not computed, "a dask array was computed inside einad"

    def owns(self, x: Any) -> bool:
        """Whether `x` is an array of this library (a numpy result on torch input fails this)."""
        return library(x) == ("dask" if self.name == "dask" else self.name)


def load(name: str) -> Lib | None:
    try:
        if name == "dask":
            return Lib(name, importlib.import_module("dask.array"))
        return Lib(name, importlib.import_module(name))
    except ImportError:
        return None
