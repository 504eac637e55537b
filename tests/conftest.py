"""Fixtures every test module may use: a seeded generator, the hypothesis profiles, the
`jit_mode` fixture that stages every transformation, and the `lib` fixture that runs a test on
each array library. Shared helper functions live in `tests/support/`."""

import gc
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

import einad as ea
from einad import kernels
from tests.support import jitting
from tests.support.arraylibs import NAMES, load
from tests.support.jitting import compiled


@pytest.fixture
def rng():
    return np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _scratch_primitives():
    """A primitive a test makes (a probe, a deliberately wrong rule) leaves the registry with
    the test: names stay unique, and `tests/test_registry.py` sees einad's own."""
    before = dict(ea.core.primitives)
    yield
    ea.core.primitives.clear()
    ea.core.primitives.update(before)


@pytest.fixture(scope="session", autouse=True)
def kernel_cache(tmp_path_factory):
    """The llvm backend's compiled kernels are kept in a directory of this session, not in the
    user's cache (`einad.kernels.cache_dir`); subprocesses the tests start inherit it."""
    if "EINAD_CACHE_DIR" not in os.environ:
        os.environ["EINAD_CACHE_DIR"] = str(tmp_path_factory.mktemp("einad-cache"))


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """Whatever is alive when a test module starts (the modules of einad, numpy, torch, JAX,
    dask and quimb, and what earlier modules left in caches: about 550,000 objects) is moved
    out of the garbage collector's sight (`gc.freeze`, after one full collection), so that the
    full collections during the module walk only the objects made since: those the tests ask
    for (memory and lifetime checks, the benchmark runner's before every timing) and the
    collector's own. Each walked the whole session's heap, 0.1-0.5 s a time: the suite spent
    minutes in them. A test still sees everything it makes itself collected; what is frozen
    is never collected, and was alive."""
    gc.collect()
    gc.freeze()
    yield


# -- hypothesis profiles (issue 6) ---------------------------------------------------------
# "ci" (the default) is derandomized and bounded so the property tests run in seconds;
# EINAD_HYPOTHESIS_PROFILE=long runs many more random examples.
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "ci", max_examples=40, derandomize=True, deadline=None, suppress_health_check=_SLOW_OK, print_blob=True
)
settings.register_profile(
    "long", max_examples=1500, deadline=None, suppress_health_check=_SLOW_OK, print_blob=True
)
# "mutation": under mutmut (docs/guarantees.md, "Mutation testing") each mutant reruns the property
# tests, so they draw fewer examples; a mutant they would catch only late is examined by hand.
settings.register_profile(
    "mutation", max_examples=12, derandomize=True, deadline=None, suppress_health_check=_SLOW_OK
)
_UNDER_MUTMUT = "MUTANT_UNDER_TEST" in os.environ
settings.load_profile(os.environ.get("EINAD_HYPOTHESIS_PROFILE", "mutation" if _UNDER_MUTMUT else "ci"))


def pytest_configure(config):
    """Under mutmut, each mutant's pytest runs in a process forked from one that imported einad, torch
    and dask: freezing that heap keeps the garbage collector (and pytest's collections at exit) from
    walking it again for every mutant, which took most of a fast mutant's time. A killed mutant's
    traceback is one line: mutmut sends it to /dev/null, and its own style (native) formats every
    frame through mutmut's rewritten modules, thousands of lines each, for nothing."""
    if _UNDER_MUTMUT:
        gc.freeze()
        config.option.tbstyle = "line"
    _cotengra_searches_in_threads()


def _cotengra_searches_in_threads():
    """cotengra's hyper-optimizer (what quimb's structured contractions call, parallel="auto")
    would start a pool of forked processes: slow on two cores, and a fork of a process that has
    JAX's threads warns (an error here). Its default pool is made a thread pool instead, as its
    "threads" backend (cotengra has no public switch for what "auto" means)."""
    import importlib.util

    if importlib.util.find_spec("cotengra") is not None:
        import cotengra.parallel

        cotengra.parallel._DEFAULT_BACKEND = "threads"


def pytest_make_parametrize_id(config, val, argname):
    """A string parameter's id in ASCII, "U+03B1" for "α": pytest would escape it ("\\u03b1"), and
    an escaped id cannot select its test again (see below)."""
    if isinstance(val, str) and not (val.isascii() and val.isprintable()):
        return "".join(c if c.isascii() and c.isprintable() else f"U+{ord(c):04X}" for c in val)
    return None


LONGEST_FILES = [  # seconds of their tests on 2026-11-29 (a slow hour): 85, 62, 62, 43, 32, 27, ...
    "tests/project/test_benchmarks.py",
    "tests/rules/test_linalg.py",
    "tests/test_cluster.py",
    "tests/rules/test_reductions.py",
    "tests/transforms/test_autodiff_modes.py",
    "tests/test_fft.py",
    "tests/rules/test_elementwise.py",
    "tests/test_network.py",
    "tests/rules/test_indexing.py",
    "tests/workflows/test_circuits_peps_cotengra.py",
    "tests/transforms/test_custom_jax.py",
    "tests/rules/test_einsum_choices.py",
    "tests/rules/test_shape.py",
    "tests/test_slicing.py",
]
"""The suite's longest files (an order for the workers, not a list to keep complete)."""


def pytest_collection_modifyitems(items):
    """Every test id names its test when given back to pytest (mutmut runs a mutant's tests by
    id): pytest escapes a backslash, a newline or a non-ASCII character in a parameter's id, and
    the escaped id then matches no test. Under mutmut, a mutant's tests run fastest first (by the
    durations mutmut recorded in its unmutated run), so a killed mutant stops at its cheapest
    failing test (mutmut passes ``-x``)."""
    unusable = [item.nodeid for item in items if "\\" in item.nodeid]
    if unusable:
        raise pytest.UsageError(f"test ids that pytest cannot select again (give them plain ids): {unusable}")
    if not _UNDER_MUTMUT:
        # the longest files first (each file is one worker's, --dist loadfile, in this order:
        # --no-loadscope-reorder), so that the two workers finish together instead of one
        # running a long file alone at the end
        first = {path: rank for rank, path in enumerate(LONGEST_FILES)}
        items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], len(first)))
        return
    durations = sys.modules["mutmut.state"].state().duration_by_test if "mutmut.state" in sys.modules else {}
    if durations:
        items.sort(key=lambda item: durations.get(item.nodeid, float("inf")))


# -- every transformation staged and compiled (issues 9 and 25) --------------------------------
# A module that sets ``pytestmark = pytest.mark.usefixtures("jit_mode")`` runs each of its tests
# three times: as written ("eager"), with every transformation it calls wrapped in `ea.jit`
# running numpy calls only ("jit"), and again with the llvm backend's fused kernels ("fused";
# skipped when llvmlite is missing). The compiled program must give what eager mode gives
# (`compiled`: the call that stages a program runs it too, and its staged results must be the
# program's). `ea.jit` itself, called by such a test, takes the mode's backend.

_TRANSFORMS = ("grad", "value_and_grad", "jacrev", "jacfwd", "hessian")


def _jitted_vjp(vjp):
    def staged_vjp(f, *primals, has_aux=False):
        out = compiled(ea.jit(lambda *p: vjp(f, *p, has_aux=has_aux)[::2]))(*primals)
        pull = compiled(ea.jit(lambda p, ct: vjp(f, *p, has_aux=has_aux)[1](ct)))
        return out[0], lambda ct: pull(list(primals), ct), *out[1:]

    return staged_vjp


@pytest.fixture(params=["eager", "jit", "fused"])
def jit_mode(request, monkeypatch):
    if request.param == "fused" and kernels.unavailable() is not None:
        pytest.skip(f"the llvm backend cannot run here: {kernels.unavailable()}")
    if request.param != "eager":
        jit = ea.jit
        backend = "numpy" if request.param == "jit" else "llvm"
        # a kernel's math functions are the C library's, which may round a float32 step
        # differently from numpy's vectorized ones: a float64 result of float32 steps differs
        # from the staged call's by float32's rounding
        monkeypatch.setattr(jitting, "FLOAT64_RTOL", 1e-9 if backend == "numpy" else 1e-6)
        monkeypatch.setattr(ea, "jit", lambda f, *a, backend=backend, **k: jit(f, *a, backend=backend, **k))
        for name in _TRANSFORMS:
            original = getattr(ea, name)
            monkeypatch.setattr(ea, name, lambda f, *a, _t=original, **k: compiled(ea.jit(_t(f, *a, **k))))
        monkeypatch.setattr(ea, "jacobian", ea.jacrev)
        jvp, hvp = ea.jvp, ea.hvp
        monkeypatch.setattr(
            ea,
            "jvp",
            lambda f, p, t, **k: compiled(ea.jit(lambda p, t: jvp(f, p, t, **k)))(tuple(p), tuple(t)),
        )
        monkeypatch.setattr(
            ea,
            "hvp",
            lambda f, p, t, mode="fwd-over-rev": compiled(ea.jit(lambda p, t: hvp(f, p, t, mode)))(
                tuple(p), tuple(t)
            ),
        )
        monkeypatch.setattr(ea, "vjp", _jitted_vjp(ea.vjp))
    return request.param


# -- array libraries (issue 10): the `lib` fixture runs a test on each ------------------


@pytest.fixture(params=NAMES)
def lib(request):
    """One array library (`tests.support.arraylibs.Lib`); skipped with the reason when not installed."""
    found = load(request.param)
    if found is None:
        pytest.skip(f"{request.param} is not installed (pip install einad[test] brings it)")
    if found.name == "array_api_strict":
        # report the standard's full version, so the tests see what its latest libraries offer
        found.module.set_array_api_strict_flags(api_version="2024.12")
    return found
