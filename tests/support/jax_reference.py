"""JAX as a reference, computed in a subprocess.

JAX starts threads when it is imported, and a process with JAX's threads must not fork (JAX
warns, and a forked child may deadlock): cotengra's optimizers and dask's clusters fork in
other tests of the same run. So no test imports JAX itself. A test module writes its
reference as a module-level function ``reference(jax, *args)`` that returns a flat sequence of
arrays; `jax_reference` runs it in a fresh interpreter (float64 enabled) and returns numpy
copies of what it returned.
"""

from __future__ import annotations

import importlib.util
import pathlib
import pickle
import subprocess
import sys
import tempfile
from typing import Any

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]  # tests/support/ -> the repository

_CHILD = """
import pickle, sys
import numpy as np
import jax
jax.config.update("jax_enable_x64", True)
module, name, path = sys.argv[1:4]
with open(path, "rb") as f:
    args = pickle.load(f)
fn = getattr(__import__(module, fromlist=[name]), name)
out = [np.asarray(x) for x in fn(jax, *args)]
with open(path, "wb") as f:
    pickle.dump(out, f)
"""


def jax_reference(module: str, name: str, *args: Any) -> list[np.ndarray]:
    """``module.name(jax, *args)`` run in a subprocess with JAX (skipped where JAX is absent)."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("the reference is JAX's, which is not installed (pip install jax)")
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "io.pickle"
        path.write_bytes(pickle.dumps(args))
        proc = subprocess.run(
            [sys.executable, "-W", "ignore", "-c", _CHILD, module, name, str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out: list[np.ndarray] = pickle.loads(path.read_bytes())
    return out
