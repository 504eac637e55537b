"""The engines the suite compares.

Every engine turns one `cases.Problem` into zero-argument callables that the
timer calls over and over: ``forward`` (the loss alone), ``value_and_grad``
(the loss and its gradients w.r.t. ``problem.argnums``) and, for the
Hessian-vector-product case, one ``hvp`` callable per mode it offers.
Everything an engine needs (conversion of the inputs, tracing, jit
compilation) happens when the callable is built or on its first call,
outside the timed region (the first call of a staged engine is timed apart).

* ``einad``      — the library under test.
* ``einad-jit``  — einad staged: each callable is one ``ea.jit`` program (traced,
  optimized and compiled on its first call, replayed after), with ``ea.jit``'s default
  backend: compiled kernels for the elementwise work where llvmlite is installed (issue 25).
  Reported absent while ``einad`` has no ``jit``.
* ``einad-jit-numpy`` — the same with ``ea.jit(f, backend="numpy")``: numpy calls only, the
  program ``einad-jit`` ran before the compiled backend (its yardstick). Absent while
  ``ea.jit`` has no ``backend``.
* ``opt_einsum`` — numpy with ``opt_einsum.contract`` for the contractions
  (each path planned once, `planned_contract`): forward only, the yardstick
  for einad's forward.
* ``manual``     — hand-written numpy forward and backward, no AD machinery;
  the backward of a contraction runs through the same pairwise path as the
  forward (`PairwiseContraction`). The speed limit and the reference every
  other engine is checked against.
* ``einad-torch`` — einad on torch CPU tensors (issue 10): the same calls as ``einad``,
  the inputs copied into float64 torch tensors as for the ``torch`` engine, which is its
  yardstick (the contractions run in the same torch kernels, so the gap is einad's
  overhead). Absent without torch.
* ``einad-dask-1``, ``einad-dask-2`` — einad on dask arrays (issue 10), case 5a only: each
  operand chunked in halves along the network's largest index, the lazy value and
  gradients built by einad and computed by dask's threaded scheduler with 1 or 2 workers;
  the yardstick is ``einad`` on numpy. Absent without dask.
* ``torch-cuda``, ``einad-torch-cuda``, ``einad-jit-torch-cuda``, ``einad-cupy``,
  ``jax-jit-gpu`` — the GPU rows: the same calls on the first CUDA device (torch tensors,
  CuPy arrays, JAX arrays placed on the GPU), each callable ending in a device
  synchronisation so that the timer sees the finished work. Absent without a CUDA device.
* ``einad-threads-2``, ``einad-cluster-1``, ``einad-cluster-2`` — case 10 only (issue 24): the
  sliced contraction's slices on an in-process pool of 2 threads, and as tasks on a dask
  ``LocalCluster`` of 1 and 2 single-threaded worker processes (``executor=client``).
* ``autograd``, ``jax``, ``jax-jit``, ``torch`` — the peers. Each is imported
  lazily, when its block starts, and reported as absent when not installed.

The cases write their loss once, against a small namespace (``ns.einsum``,
``ns.tanh``, ``ns.sigmoid``, ``ns.softplus``, ``ns.sin``, ``ns.sum``,
``ns.mean``, ``ns.trace``, ``ns.diagonal``, ``ns.real``, ``ns.conj`` and the
arithmetic operators), which each engine provides. Every engine's ``ns.einsum``
takes an explicit opt_einsum path as ``optimize=`` (the networks group, n1-n4,
hands each engine the same one).

An engine with ``staged = True`` (``einad-jit``, ``jax-jit``) compiles each
callable on its first call; the runner times that call apart (the first-call
cost) and `warm_up` runs the staging machinery once beforehand on a trivial
function, so that no case pays the library's one-time start-up.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import opt_einsum as oe
from opt_einsum.parser import convert_to_valid_einsum_chars

from . import ENGINE_NAMES as _LISTED


class EngineAbsent(Exception):
    """The engine's package is not installed (or fails to import)."""


def _merge(args: Sequence, argnums: Sequence[int], diff: Sequence) -> list:
    out = list(args)
    for i, d in zip(argnums, diff):
        out[i] = d
    return out


# -- the manual engine's contraction machinery -------------------------------------------------


def _plain(sa: str, sb: str, keep: str) -> bool:
    """Whether ``sa,sb->keep`` is one matrix product: shared letters all summed, nothing
    summed alone."""
    shared = set(sa) & set(sb)
    return bool(shared) and not (shared & set(keep)) and set(sa + sb) - shared <= set(keep)


def natural_order(sa: str, sb: str, keep: str) -> str:
    """The letters of ``keep`` in the order a matrix product leaves them (free letters of
    `sa`, then of `sb`), so that no transposition is needed; `keep`'s own order otherwise."""
    if not _plain(sa, sb, keep):
        return keep
    return "".join(c for c in sa if c not in sb) + "".join(c for c in sb if c not in sa)


def _sigmas(s: str, free: str) -> list:
    """The orders of the shared letters in which a C-contiguous array indexed by `s` is a
    matrix without a copy: ``(free, shared)`` when its free letters come first (tag "N"),
    ``(shared, free)`` when they come last (tag "T")."""
    out = []
    k = len(free)
    if s[:k] == free:
        out.append(("N", s[k:]))
    if s[len(s) - k :] == free:
        out.append(("T", s[: len(s) - k]))
    return out


def pairwise(sa: str, sb: str, out: str, sizes: dict) -> Callable:
    """A hand-planned ``sa,sb->out`` for C-contiguous operands.

    A plain contraction (every shared letter summed, nothing summed alone) is one
    matrix product: ``(free_a, shared) @ (shared, free_b)``. The order of the shared
    letters is chosen so that both operands are matrices as they lie in memory (BLAS
    takes a transposed one as it is); when no order serves both, the smaller operand
    alone is copied into place. The result is ``free_a + free_b`` (`natural_order`),
    transposed as a view if `out` asks for another order. Anything else goes to
    `numpy.einsum`, its letters renamed into the ones numpy knows.
    """
    if not _plain(sa, sb, out):
        # numpy.einsum knows a-z and A-Z only; a step has few letters, so rename them
        text = convert_to_valid_einsum_chars(f"{sa},{sb}->{out}")
        return lambda a, b: np.einsum(text, a, b)
    fa = "".join(c for c in sa if c not in sb)
    fb = "".join(c for c in sb if c not in sa)
    size = lambda letters: int(np.prod([sizes[c] for c in letters], dtype=np.int64))
    m, k, n = size(fa), size("".join(c for c in sa if c in sb)), size(fb)
    opts_a, opts_b = _sigmas(sa, fa), _sigmas(sb, fb)
    common = [(ta, tb, sg) for ta, sg in opts_a for tb, sg2 in opts_b if sg == sg2]
    copy_a = copy_b = None
    if common:
        ta, tb, sigma = common[0]
    else:  # keep the larger operand as it lies (if it can be), copy the other
        keep_a = bool(opts_a) and (size(sa) > size(sb) or not opts_b)
        if keep_a:
            ta, sigma = opts_a[0]
        elif opts_b:
            tb, sigma = opts_b[0]
        else:
            sigma = "".join(c for c in sa if c in sb)
        if not keep_a:
            ta, copy_a = "N", tuple(sa.index(c) for c in fa + sigma)
        if keep_a or not opts_b:
            tb, copy_b = "N", tuple(sb.index(c) for c in fb + sigma)
    dims = tuple(sizes[c] for c in fa + fb)

    def prepare(x, tag, copy, rows, cols):  # -> a (rows, cols) matrix
        if copy is not None:
            return np.ascontiguousarray(x.transpose(copy)).reshape(rows, cols)
        return x.reshape(rows, cols) if tag == "N" else x.reshape(cols, rows).T

    def run(a, b):
        a2 = prepare(a, ta, copy_a, m, k)
        b2 = prepare(b, tb, copy_b, n, k)
        return (a2 @ b2.T).reshape(dims)

    natural = fa + fb
    if natural == out:
        return run
    perm = tuple(natural.index(c) for c in out)
    return lambda a, b: run(a, b).transpose(perm)


class PairwiseContraction:
    """An N-operand einsum run by hand along opt_einsum's pairwise path.

    ``value(*ops)`` is the forward. ``value_and_grad(*ops, seed)`` keeps the
    intermediates of the forward, then walks the steps in reverse: a step
    ``A,B->C`` with cotangent ``gC`` gives ``gA = contract(gC, B -> A)`` and
    ``gB = contract(gC, A -> B)``, each one matrix product planned once here
    (`pairwise`).
    All N gradients cost about twice the forward (the "all environments" result
    for tensor networks).

    The pairing of operands is opt_einsum's path. What is hand-tuned is the
    layout: every intermediate and every cotangent is kept in the order its
    matrix product produces it (its letters tracked here), so no step pays for
    a transposed copy that only serves to reach a prescribed order, and each
    product picks the order of the summed letters that spares copies; the
    gradients of the inputs are transposed views at the end. Letters that
    occur in one operand only and not in the step's output are summed inside
    that operand, so their cotangent is broadcast back. No letter may repeat
    inside one operand (true of every equation the suite uses).
    """

    def __init__(self, eq: str, shapes: Sequence[tuple], optimize: Any = "auto"):
        lhs, out = eq.split("->")
        subs = lhs.split(",")
        for s in subs:
            if len(set(s)) != len(s):
                raise ValueError(f"repeated letter inside operand {s!r}: not supported here")
        self.eq = eq
        self.n = n = len(subs)
        path, info = oe.contract_path(eq, *shapes, shapes=True, optimize=optimize)
        self.path = [tuple(p) for p in path]
        self.info = info
        sizes = info.size_dict
        letters = dict(enumerate(subs))  # array id -> its letters, in memory order
        # forward: replay opt_einsum's bookkeeping (operands popped in `inds` order,
        # the result appended), keeping each result in its product's order
        ids = list(range(n))
        self.steps = []
        for fresh, (inds, _removed, step_eq, _remaining, _blas) in enumerate(info.contraction_list, n):
            picked = tuple(ids.pop(x) for x in inds)
            if len(picked) != 2:
                raise ValueError(f"step {step_eq!r} is not pairwise")
            sa, sb = letters[picked[0]], letters[picked[1]]
            res = natural_order(sa, sb, step_eq.split("->")[1])
            letters[fresh] = res
            self.steps.append([tuple(inds), picked, fresh, pairwise(sa, sb, res, sizes), None])
            ids.append(fresh)
        self.final = ids[0]
        final = letters[self.final]
        self.out_perm = tuple(final.index(c) for c in out) if final != out else None
        self.final_shape = tuple(sizes[c] for c in final)
        # backward: the cotangent of each array, also kept in its product's order
        cot = {self.final: final}
        for step in reversed(self.steps):
            _inds, picked, fresh, _fwd, _ = step
            gc = cot.pop(fresh)
            bwd = []
            for k in range(2):
                sk, so = letters[picked[k]], letters[picked[1 - k]]
                kept = "".join(c for c in sk if c in gc or c in so)
                if kept == sk:  # the usual case: the product's own order
                    order = natural_order(gc, so, kept)
                    bwd.append((pairwise(gc, so, order, sizes), None))
                    cot[picked[k]] = order
                else:  # letters summed inside this operand alone: broadcast them back
                    expand = tuple(sizes[c] if c in kept else 1 for c in sk)
                    full = tuple(sizes[c] for c in sk)
                    bwd.append((pairwise(gc, so, kept, sizes), (expand, full)))
                    cot[picked[k]] = sk
            step[4] = bwd
        self.leaf_perm = [
            tuple(cot[i].index(c) for c in subs[i]) if cot[i] != subs[i] else None for i in range(n)
        ]

    def _result(self, value):
        return value.transpose(self.out_perm) if self.out_perm else value

    def value(self, *ops):
        work = list(ops)
        for inds, _picked, _fresh, fwd, _bwd in self.steps:
            a = work.pop(inds[0])
            b = work.pop(inds[1])
            work.append(fwd(a, b))
        return self._result(work[0])

    def value_and_grad(self, *ops, seed=1.0):
        """The contraction and the gradients of ``Σ seed · result`` w.r.t. every operand
        (`seed` a scalar, or a function of the result giving it: the gradient of |Z|² seeds
        2·conj(Z))."""
        kept = dict(enumerate(ops))  # array id -> array, operands and intermediates
        work = list(ops)
        for inds, _picked, fresh, fwd, _bwd in self.steps:
            a = work.pop(inds[0])
            b = work.pop(inds[1])
            kept[fresh] = res = fwd(a, b)
            work.append(res)
        value = self._result(work[0])
        if callable(seed):
            seed = seed(value)
        cot = {self.final: np.broadcast_to(np.asarray(seed, dtype=value.dtype), self.final_shape)}
        for _inds, picked, fresh, _fwd, bwd in reversed(self.steps):
            g = cot.pop(fresh)
            del kept[fresh]
            vals = (kept[picked[0]], kept[picked[1]])
            for k, (fn, spread) in enumerate(bwd):
                gk = fn(g, vals[1 - k])
                if spread is not None:
                    gk = np.broadcast_to(gk.reshape(spread[0]), spread[1])
                cot[picked[k]] = gk
        grads = tuple(cot[i].transpose(p) if p is not None else cot[i] for i, p in enumerate(self.leaf_perm))
        return value, grads


_EXPRESSIONS: dict = {}


def planned_contract(eq: str, *ops, optimize: Any = "auto", backend: str = "auto"):
    """``opt_einsum.contract`` with its path planned once per equation, shapes and `optimize`
    (`opt_einsum.contract_expression`), the way a program calling it in a loop would.
    `optimize` is a strategy name or an explicit path; `backend` as `contract`'s."""
    strategy = optimize if isinstance(optimize, str) else tuple(tuple(step) for step in optimize)
    key = (eq, tuple(tuple(o.shape) for o in ops), strategy)
    expr = _EXPRESSIONS.get(key)
    if expr is None:
        expr = _EXPRESSIONS[key] = oe.contract_expression(eq, *key[1], optimize=optimize)
    return expr(*ops, backend=backend)


# -- namespaces ------------------------------------------------------------------------------


def _numpy_namespace(einsum: Callable, xp=np) -> SimpleNamespace:
    """The cases' namespace on numpy, or on a numpy look-alike `xp` (autograd.numpy)."""
    return SimpleNamespace(
        einsum=einsum,
        tanh=xp.tanh,
        sin=xp.sin,
        sigmoid=lambda x: 0.5 * (xp.tanh(0.5 * x) + 1.0),
        softplus=lambda x: xp.logaddexp(0.0, x),
        sum=xp.sum,
        mean=xp.mean,
        trace=xp.trace,
        diagonal=xp.diagonal,
        real=xp.real,
        conj=xp.conj,
    )


def _git_commit(where: str) -> str:
    """`` (git abc1234)`` when `where` is a git checkout (``+`` if it has local changes)."""
    import subprocess

    try:
        head = subprocess.run(
            ["git", "-C", where, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", where, "status", "--porcelain", "--", "einad"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f" (git {head}{'+' if dirty else ''})" if head else ""


# -- engines ---------------------------------------------------------------------------------


class Engine:
    """Base class: a named way of running the cases."""

    name = "?"
    module: str | None = None  # the import that decides availability
    grad = True  # computes derivatives (opt_einsum does not)
    only: frozenset[str] | None = None  # the case keys it runs (None: all); others get no row
    staged = False  # compiles on the first call of each callable: the runner times that call
    # PyTorch's gradient of a real loss of complex inputs is the complex conjugate of JAX's
    # (einad's and manual's): the check conjugates such an engine's gradients back
    conjugate_grads = False

    def __init__(self):
        self.version = ""
        self.ns = None

    def check_installed(self) -> str | None:
        """None when installed, else the reason it is absent (does not import)."""
        if self.module is None:
            return None
        try:
            found = importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError, AttributeError):
            found = False
        if not found:
            return f"{self.module} is not installed (pip install -e '.[bench]')"
        return None

    def load(self) -> None:
        """Import the package; raise `EngineAbsent` when it cannot be imported."""

    def warm_up(self) -> None:
        """For a staged engine: stage and run a trivial function once, so that the library's
        one-time start-up (imports, compiler initialisation) is not counted as the first
        call of whichever case runs first."""

    def convert(self, a: np.ndarray) -> Any:
        return a

    def to_numpy(self, x: Any) -> Any:
        if isinstance(x, (tuple, list)):
            return type(x)(self.to_numpy(v) for v in x)
        return np.asarray(x)

    def forward(self, problem, args: Sequence) -> Callable[[], Any]:
        ns = self.ns
        return lambda: problem.loss(ns, *args)

    def value_and_grad(self, problem, args: Sequence) -> Callable[[], Any]:
        raise NotImplementedError

    def hvp(self, problem, args: Sequence, tangent: Any) -> dict:
        """Mode label -> callable giving the HVP w.r.t. argument 0."""
        return {}

    def note(self, problem, vg: Callable[[], Any]) -> str:
        """A note for the row of `vg` (after its timing); empty for most engines."""
        return ""

    def close(self) -> None:
        """Release what `load` started (a cluster), after the last round."""


class EinadEngine(Engine):
    name = "einad"
    module = "einad"
    hvp_modes = ("fwd-over-rev", "rev-over-fwd", "rev-over-rev")

    def load(self):
        import einad as ea

        self.ea = ea
        self.version = getattr(ea, "__version__", "") + _git_commit(
            os.path.dirname(os.path.dirname(ea.__file__))
        )
        self.ns = ea

    def value_and_grad(self, problem, args):
        ea = self.ea
        vg = ea.value_and_grad(lambda *a: problem.loss(ea, *a), argnums=tuple(problem.argnums))
        return lambda: vg(*args)

    def hvp(self, problem, args, tangent):
        ea = self.ea
        data = tuple(args[1:])

        def make(mode):
            f = lambda w: problem.loss(ea, w, *data)
            return lambda: ea.hvp(f, (args[0],), (tangent,), mode=mode)[0]

        return {mode: make(mode) for mode in self.hvp_modes}


class EinadJitEngine(EinadEngine):
    """einad staged by ``ea.jit``: ``ea.jit(f)`` for the forward,
    ``ea.jit(ea.value_and_grad(f, argnums=...))`` for value-and-gradient, and for the HVP
    ``ea.jit(lambda w, *data, v: ea.hvp(...))`` in each mode. Every input is an argument
    of the staged function (nothing is closed over, so nothing can be folded as a
    constant). Absent while einad has no ``jit`` (issue 9).

    The first calls compile from scratch: the process keeps compiled kernels in a fresh
    directory of its own (``EINAD_CACHE_DIR``, unless set already), so that no kernel
    compiled by an earlier run is loaded instead (JAX's persistent cache is off too)."""

    name = "einad-jit"
    staged = True
    backend: str | None = None  # ea.jit's default

    def load(self):
        super().load()
        if not callable(getattr(self.ea, "jit", None)):
            raise EngineAbsent("this einad has no ea.jit yet (issue 9)")
        self.options = {} if self.backend is None else {"backend": self.backend}
        if "EINAD_CACHE_DIR" not in os.environ:
            os.environ["EINAD_CACHE_DIR"] = tempfile.mkdtemp(prefix="einad-bench-")
        program = self.ea.jit(lambda x: x * 2.0 + 1.0, **self.options).lower(np.ones(3))
        used = getattr(program, "backend", "numpy")
        self.version += f" ({used}{': ' + program.fallback if getattr(program, 'fallback', None) else ''})"

    def jit(self, f):
        return self.ea.jit(f, **self.options)

    def warm_up(self):
        self.jit(lambda x: x * 2.0 + 1.0)(np.ones(3))

    def forward(self, problem, args):
        ea = self.ea
        f = self.jit(lambda *a: problem.loss(ea, *a))
        return lambda: f(*args)

    def value_and_grad(self, problem, args):
        ea = self.ea
        vg = self.jit(ea.value_and_grad(lambda *a: problem.loss(ea, *a), argnums=tuple(problem.argnums)))
        return lambda: vg(*args)

    def hvp(self, problem, args, tangent):
        ea = self.ea
        staged_args = (*args, tangent)  # w, the data, then v

        def make(mode):
            def staged_hvp(w, *rest):
                *data, v = rest
                return ea.hvp(lambda w_: problem.loss(ea, w_, *data), (w,), (v,), mode=mode)[0]

            h = self.jit(staged_hvp)
            return lambda: h(*staged_args)

        return {mode: make(mode) for mode in self.hvp_modes}


class EinadJitNumpyEngine(EinadJitEngine):
    """``einad-jit`` with ``ea.jit(f, backend="numpy")``: numpy calls only (issue 25's
    yardstick for the compiled backend). Absent while ``ea.jit`` has no backend option."""

    name = "einad-jit-numpy"
    backend = "numpy"

    def load(self):
        EinadEngine.load(self)
        jit = getattr(self.ea, "jit", None)
        if not callable(jit) or "backend" not in inspect.signature(jit).parameters:
            raise EngineAbsent("this einad's ea.jit has no backend option (issue 25)")
        super().load()


class OptEinsumEngine(Engine):
    name = "opt_einsum"
    module = "opt_einsum"
    grad = False

    def load(self):
        self.version = oe.__version__
        self.ns = _numpy_namespace(planned_contract)


class ManualEngine(Engine):
    """Hand-written numpy; the functions live with each case (`Problem.manual_*`)."""

    name = "manual"

    def load(self):
        self.version = np.__version__
        self.ns = _numpy_namespace(planned_contract)

    def forward(self, problem, args):
        return lambda: problem.manual_forward(*args)

    def value_and_grad(self, problem, args):
        return lambda: problem.manual_vag(*args)

    def hvp(self, problem, args, tangent):
        return {"": lambda: problem.manual_hvp(*args, tangent)}


class AutogradEngine(Engine):
    """HIPS autograd. Its einsum forward gets ``optimize=True`` (numpy's own path
    search); its einsum VJP ignores that and contracts all operands at once."""

    name = "autograd"
    module = "autograd"

    def load(self):
        try:
            import autograd
            import autograd.numpy as anp
        except Exception as err:  # pragma: no cover - depends on the environment
            raise EngineAbsent(f"autograd fails to import: {err}") from None
        self.autograd = autograd
        try:
            from importlib.metadata import version

            self.version = version("autograd")
        except Exception:
            self.version = "?"
        self.ns = _numpy_namespace(lambda eq, *ops: anp.einsum(eq, *ops, optimize=True), anp)

    def value_and_grad(self, problem, args):
        ns, nums = self.ns, tuple(problem.argnums)
        vg = self.autograd.value_and_grad(lambda diff: problem.loss(ns, *_merge(args, nums, diff)))
        diff = tuple(args[i] for i in nums)
        return lambda: vg(diff)

    def hvp(self, problem, args, tangent):
        ns = self.ns
        h = self.autograd.hessian_vector_product(lambda w, *data: problem.loss(ns, w, *data))
        return {"rev-over-rev": lambda: h(*args, tangent)}


class JaxEngine(Engine):
    """JAX on the CPU in float64; ``jit=True`` compiles each callable once (outside the timing)."""

    module = "jax"

    def __init__(self, jit: bool):
        super().__init__()
        self.jit = self.staged = jit
        self.name = "jax-jit" if jit else "jax"

    def load(self):
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
        try:
            import jax
            import jax.numpy as jnp
        except Exception as err:  # pragma: no cover
            raise EngineAbsent(f"jax fails to import: {err}") from None
        jax.config.update("jax_enable_x64", True)
        self.jax, self.jnp = jax, jnp
        self.version = jax.__version__
        self.ns = SimpleNamespace(
            einsum=jnp.einsum,
            tanh=jnp.tanh,
            sin=jnp.sin,
            sigmoid=jax.nn.sigmoid,
            softplus=jax.nn.softplus,
            sum=jnp.sum,
            mean=jnp.mean,
            trace=jnp.trace,
            diagonal=jnp.diagonal,
            real=jnp.real,
            conj=jnp.conj,
        )

    def warm_up(self):
        if self.jit:
            self.jax.block_until_ready(self.jax.jit(lambda x: x * 2.0)(self.jnp.ones(3)))

    def convert(self, a):
        return self.jax.device_put(self.jnp.asarray(a))

    def _wrap(self, fn, args):
        fn = self.jax.jit(fn) if self.jit else fn
        block = self.jax.block_until_ready
        return lambda: block(fn(*args))

    def forward(self, problem, args):
        ns = self.ns
        return self._wrap(lambda *a: problem.loss(ns, *a), args)

    def value_and_grad(self, problem, args):
        ns = self.ns
        vg = self.jax.value_and_grad(lambda *a: problem.loss(ns, *a), argnums=tuple(problem.argnums))
        return self._wrap(vg, args)

    def hvp(self, problem, args, tangent):
        jax, ns = self.jax, self.ns

        def fwd_over_rev(w, v, *data):
            g = jax.grad(lambda w_: problem.loss(ns, w_, *data))
            return jax.jvp(g, (w,), (v,))[1]

        return {"fwd-over-rev": self._wrap(fwd_over_rev, (args[0], tangent) + tuple(args[1:]))}


def _torch_einsum(torch) -> Callable:
    """``torch.einsum``, or with an explicit path (``optimize=[(0, 1), ...]``) the planned
    ``opt_einsum`` expression for that path run on torch (one ``torch.tensordot`` or
    ``torch.einsum`` per pairwise step, recorded by autograd): ``torch.einsum`` takes no
    path, and only a-z and A-Z as indices."""

    def einsum(eq, *ops, optimize=None):
        if optimize is None:
            return torch.einsum(eq, *ops)
        return planned_contract(eq, *ops, optimize=optimize, backend="torch")

    return einsum


class TorchEngine(Engine):
    """PyTorch eager on the CPU (its einsum follows opt_einsum's path when installed; an
    explicit path goes through `_torch_einsum`).

    The inputs are copied into torch tensors (``torch.from_numpy`` would share
    the read-only buffers, which torch cannot honour). Its complex gradients are the
    conjugates of JAX's (`Engine.conjugate_grads`)."""

    name = "torch"
    module = "torch"
    conjugate_grads = True

    def load(self):
        try:
            import torch
            import torch.nn.functional as F
        except Exception as err:  # pragma: no cover
            raise EngineAbsent(f"torch fails to import: {err}") from None
        self.torch = torch
        self.version = f"{torch.__version__} ({torch.get_num_threads()} threads)"
        self.ns = SimpleNamespace(
            einsum=_torch_einsum(torch),
            tanh=torch.tanh,
            sin=torch.sin,
            sigmoid=torch.sigmoid,
            softplus=F.softplus,
            sum=torch.sum,
            mean=torch.mean,
            trace=torch.trace,
            diagonal=torch.diagonal,
            real=torch.real,
            conj=torch.conj,
        )

    def convert(self, a):
        return self.torch.tensor(np.array(a))

    def to_numpy(self, x):
        if isinstance(x, (tuple, list)):
            return type(x)(self.to_numpy(v) for v in x)
        if isinstance(x, self.torch.Tensor):
            return x.detach().numpy()
        return np.asarray(x)

    def forward(self, problem, args):
        torch, ns = self.torch, self.ns

        def run():
            with torch.no_grad():
                return problem.loss(ns, *args)

        return run

    def value_and_grad(self, problem, args):
        torch, ns = self.torch, self.ns
        args = list(args)
        for i in problem.argnums:
            args[i] = args[i].clone().requires_grad_(True)
        diff = [args[i] for i in problem.argnums]

        def run():
            out = problem.loss(ns, *args)
            grads = torch.autograd.grad(out, diff)
            return out.detach(), grads

        return run

    def hvp(self, problem, args, tangent):
        torch, ns = self.torch, self.ns
        data = tuple(args[1:])
        w = args[0].clone().requires_grad_(True)

        def double_backward():
            (g,) = torch.autograd.grad(problem.loss(ns, w, *data), w, create_graph=True)
            (hv,) = torch.autograd.grad(g, w, grad_outputs=tangent)
            return hv

        f = lambda w_: problem.loss(ns, w_, *data)
        w0 = args[0]

        def func_jvp_of_grad():
            return torch.func.jvp(torch.func.grad(f), (w0,), (tangent,))[1]

        return {"rev-over-rev": double_backward, "fwd-over-rev": func_jvp_of_grad}


class EinadTorchEngine(EinadEngine):
    """einad on torch CPU tensors: `EinadEngine`'s calls, with the inputs (and the HVP's
    tangent) copied into torch tensors as `TorchEngine` does. Results and gradients are
    torch tensors (the check converts them); the contractions run in torch's kernels."""

    name = "einad-torch"
    module = "torch"

    def check_installed(self):
        if importlib.util.find_spec("torch") is None:
            return "torch is not installed (pip install -e '.[torch]' or '.[bench]')"
        return None

    def load(self):
        super().load()
        try:
            import torch
        except Exception as err:  # pragma: no cover
            raise EngineAbsent(f"torch fails to import: {err}") from None
        self.torch = torch
        self.version += f" on torch {torch.__version__} ({torch.get_num_threads()} threads)"

    def convert(self, a):
        return self.torch.tensor(np.array(a))

    def to_numpy(self, x):
        if isinstance(x, (tuple, list)):
            return type(x)(self.to_numpy(v) for v in x)
        if isinstance(x, self.ea.Tensor):
            return x.numpy()
        if isinstance(x, self.torch.Tensor):
            return x.detach().numpy()
        return np.asarray(x)


class EinadDaskEngine(EinadEngine):
    """einad on chunked dask arrays, computed by dask's threaded scheduler with `workers`
    threads. Case 5a (the 12-operand network) only.

    Each operand is chunked in halves along the network's largest index (the other axes
    whole). Every call builds the lazy value (and gradients) with einad and computes them
    with ``dask.compute(..., scheduler="threads", num_workers=workers)``: the timings are
    graph building plus computing, what a user pays per call. dask's einsum would rechunk
    the inputs of every pairwise step whose output block outgrows its largest input block
    (``array.chunk-size-tolerance``), which on this network multiplies the task count by
    about 60; the engine raises that tolerance so that the chunks stay as given."""

    module = "dask"
    only = frozenset({"5a"})

    def __init__(self, workers: int):
        super().__init__()
        self.workers = workers
        self.name = f"einad-dask-{workers}"

    def check_installed(self):
        if importlib.util.find_spec("dask") is None:
            return "dask is not installed (pip install -e '.[dask]')"
        return None

    def load(self):
        super().load()
        try:
            import dask
            import dask.array as da
        except Exception as err:  # pragma: no cover
            raise EngineAbsent(f"dask.array fails to import: {err}") from None
        self.dask, self.da = dask, da
        self.version += f" on dask {dask.__version__} (threads scheduler, {self.workers} workers)"
        self.config = {
            "scheduler": "threads",
            "num_workers": self.workers,
            "array.chunk-size-tolerance": 1e9,
        }

    def _args(self, problem):
        """The case's operands as dask arrays, in halves along the largest index (the first
        of equal ones) and whole along the others."""
        subs = problem.notes.split("->")[0].split(",")
        sizes: dict = {}
        for s, a in zip(subs, problem.arrays):
            sizes.update(zip(s, a.shape))
        split = max(sizes, key=lambda c: sizes[c])
        return tuple(
            self.da.from_array(a, chunks=tuple((d + 1) // 2 if c == split else d for c, d in zip(s, a.shape)))
            for s, a in zip(subs, problem.arrays)
        )

    def forward(self, problem, args):
        ea, dask, config = self.ea, self.dask, self.config
        args = self._args(problem)

        def run():  # Tensor.numpy() computes a dask value, with the scheduler configured here
            with dask.config.set(config):
                return problem.loss(ea, *args).numpy()

        return run

    def value_and_grad(self, problem, args):
        ea, dask, config = self.ea, self.dask, self.config
        args = self._args(problem)
        vg = ea.value_and_grad(lambda *a: problem.loss(ea, *a), argnums=tuple(problem.argnums))

        def run():
            with dask.config.set(config):
                value, grads = vg(*args)
                return dask.compute(value, tuple(grads))

        return run

    def to_numpy(self, x):
        if isinstance(x, (tuple, list)):
            return type(x)(self.to_numpy(v) for v in x)
        if isinstance(x, self.ea.Tensor):
            return x.numpy()
        return np.asarray(x)


class _OnCuda:
    """Mixin for the GPU rows: the inputs are copied to the first CUDA device, every callable
    waits for the device before it returns (`sync`), and results come back to the host for
    the check. A subclass gives `_cuda_ready` (raises `EngineAbsent` without a device) and `sync`."""

    def _cuda_ready(self) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        raise NotImplementedError

    def load(self):
        super().load()  # type: ignore[misc]
        self._cuda_ready()
        self.version += " on CUDA"  # type: ignore[attr-defined]

    def _synced(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        sync = self.sync

        def run():
            out = fn()
            sync()
            return out

        return run

    def forward(self, problem, args):
        return self._synced(super().forward(problem, args))  # type: ignore[misc]

    def value_and_grad(self, problem, args):
        return self._synced(super().value_and_grad(problem, args))  # type: ignore[misc]

    def hvp(self, problem, args, tangent):
        jobs = super().hvp(problem, args, tangent)  # type: ignore[misc]
        return {mode: self._synced(fn) for mode, fn in jobs.items()}


class _TorchCuda(_OnCuda):
    torch: Any

    def _cuda_ready(self):
        import torch

        if not torch.cuda.is_available():
            raise EngineAbsent("no CUDA device (torch.cuda.is_available() is False)")
        self.torch = torch
        self.device = torch.device("cuda", 0)

    def sync(self):
        self.torch.cuda.synchronize()

    def convert(self, a):
        return self.torch.tensor(np.array(a), device=self.device)

    def to_numpy(self, x):
        if isinstance(x, (tuple, list)):
            return type(x)(self.to_numpy(v) for v in x)
        ea = getattr(self, "ea", None)
        if ea is not None and isinstance(x, ea.Tensor):
            return x.numpy()
        if isinstance(x, self.torch.Tensor):
            return x.detach().cpu().numpy()
        return np.asarray(x)


class TorchCudaEngine(_TorchCuda, TorchEngine):
    """PyTorch eager on the GPU: `TorchEngine`'s calls on CUDA tensors."""

    name = "torch-cuda"


class EinadTorchCudaEngine(_TorchCuda, EinadTorchEngine):
    """einad on CUDA torch tensors (eager); `torch-cuda` is its yardstick."""

    name = "einad-torch-cuda"


class EinadJitTorchCudaEngine(_TorchCuda, EinadJitEngine):
    """``ea.jit`` programs run on CUDA torch tensors."""

    name = "einad-jit-torch-cuda"
    module = "torch"


class EinadCupyEngine(_OnCuda, EinadEngine):
    """einad on CuPy arrays (eager)."""

    name = "einad-cupy"
    module = "cupy"

    def _cuda_ready(self):
        try:
            import cupy

            count = cupy.cuda.runtime.getDeviceCount()
        except Exception as err:
            raise EngineAbsent(f"cupy finds no CUDA device: {err}") from None
        if count == 0:
            raise EngineAbsent("cupy finds no CUDA device")
        self.cupy = cupy

    def sync(self):
        self.cupy.cuda.get_current_stream().synchronize()

    def convert(self, a):
        return self.cupy.asarray(np.array(a))

    def to_numpy(self, x):
        if isinstance(x, (tuple, list)):
            return type(x)(self.to_numpy(v) for v in x)
        if isinstance(x, self.ea.Tensor):
            return x.numpy()
        if isinstance(x, self.cupy.ndarray):
            return self.cupy.asnumpy(x)
        return np.asarray(x)


class JaxGpuEngine(JaxEngine):
    """JAX jit on the GPU in float64. Absent when jax has no GPU backend, or when an earlier
    engine of the same run initialised jax for the CPU only (run it without ``jax``/``jax-jit``
    to see it: jax picks its platforms once per process)."""

    def __init__(self):
        super().__init__(jit=True)
        self.name = "jax-jit-gpu"

    def load(self):
        if "jax" not in sys.modules:
            os.environ.setdefault("JAX_PLATFORMS", "cuda,cpu")
        try:
            super().load()
            self.gpu = self.jax.devices("gpu")[0]
        except EngineAbsent:
            raise
        except Exception as err:
            raise EngineAbsent(f"jax has no GPU backend here: {err}") from None
        self.version += f" on {self.gpu.device_kind}"

    def warm_up(self):
        x = self.jax.device_put(self.jnp.ones(3), self.gpu)
        self.jax.block_until_ready(self.jax.jit(lambda x: x * 2.0)(x))

    def convert(self, a):
        return self.jax.device_put(np.array(a), self.gpu)


class _WithExecutor:
    """einad's namespace, with ``einsum`` sending its slices to `executor`."""

    def __init__(self, ea, executor):
        self._ea, self._executor = ea, executor

    def __getattr__(self, name):
        return getattr(self._ea, name)

    def einsum(self, *args, **kwargs):
        return self._ea.einsum(*args, executor=self._executor, **kwargs)


class EinadThreadsEngine(EinadEngine):
    """einad with the slices of a sliced contraction on an in-process pool of `threads`
    threads, whatever the memory limit holds (``ea.slicing.threads``): case 10 only, the
    yardstick of the cluster engines."""

    only = frozenset({"10"})

    def __init__(self, threads: int):
        super().__init__()
        self.threads = threads
        self.name = f"einad-threads-{threads}"

    def load(self):
        super().load()
        self.version += f" (slices on {self.threads} threads)"

    def _pinned(self, fn):
        slicing = self.ea.slicing

        def run():
            old, slicing.threads = slicing.threads, self.threads
            try:
                return fn()
            finally:
                slicing.threads = old

        return run

    def forward(self, problem, args):
        return self._pinned(super().forward(problem, args))

    def value_and_grad(self, problem, args):
        return self._pinned(super().value_and_grad(problem, args))


def _user_system() -> tuple[float, float]:
    """This process's user and system CPU seconds (run in a dask worker)."""
    t = os.times()
    return t.user, t.system


class EinadClusterEngine(EinadEngine):
    """einad with the slices of a sliced contraction as tasks on a dask ``LocalCluster`` of
    `workers` single-threaded worker processes (issue 24): ``ea.einsum(..., executor=client)``.
    Case 10 only. The cluster starts when the engine loads and closes after the run; dask's
    nanny gives each worker one BLAS thread. Each row's note gives the peak memory of a worker
    during one value-and-gradient call (tracemalloc in the worker processes), next to what
    ``ea.contract_path(..., executor=client)`` reports a worker holds, and where the CPU time
    of one more call went (`_cpu`)."""

    module = "distributed"
    only = frozenset({"10"})
    cpu_total: ClassVar[dict[int, float]] = {}  # workers -> their CPU seconds in one call

    def __init__(self, workers: int):
        super().__init__()
        self.workers = workers
        self.name = f"einad-cluster-{workers}"
        self.client = self.cluster = None

    def check_installed(self):
        if importlib.util.find_spec("distributed") is None:
            return "dask.distributed is not installed (pip install -e '.[cluster]')"
        return None

    def load(self):
        super().load()
        try:
            import distributed
        except Exception as err:  # pragma: no cover
            raise EngineAbsent(f"dask.distributed fails to import: {err}") from None
        self.cluster = distributed.LocalCluster(
            n_workers=self.workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=":0",
            memory_limit=0,
            silence_logs=50,
        )
        self.client = distributed.Client(self.cluster)
        self.ns = _WithExecutor(self.ea, self.client)
        self.version += f" on a dask {distributed.__version__} LocalCluster"
        self.version += f" of {self.workers} single-threaded worker processes"

    def value_and_grad(self, problem, args):
        ea, ns = self.ea, self.ns
        vg = ea.value_and_grad(lambda *a: problem.loss(ns, *a), argnums=tuple(problem.argnums))
        return lambda: vg(*args)

    def note(self, problem, vg) -> str:
        """A worker's peak memory in one call of `vg`, against what einad reports it holds."""
        import tracemalloc

        self.client.run(tracemalloc.start)
        try:
            vg()
            peaks = self.client.run(lambda: tracemalloc.get_traced_memory()[1])
        finally:
            self.client.run(tracemalloc.stop)
        _, info = self.ea.contract_path(
            problem.notes, *problem.arrays, memory_limit=problem.memory_limit, executor=self.client
        )
        mib = 8 / 2**20
        peak = max(peaks.values()) / 2**20
        one, partial = info.slice_gradient_peak * mib, info.partial_size * mib
        return (
            f"worker peak {peak:.0f} MiB, bound {info.worker_peak * mib:.0f} MiB: "
            f"data {info.data_size * mib:.0f} MiB + one slice {one:.0f} MiB "
            f"+ one partial result of {partial:.0f} MiB per thread; "
            f"{info.tasks} tasks of up to {info.batch} slices; {self._cpu(vg)}"
        )

    def _cpu(self, vg) -> str:
        """Where the CPU time of one call of `vg` goes: each worker process's, user and
        system (its tasks and dask's own work there; the system time is mostly the page
        faults of fresh intermediates), and this process's (the client, the scheduler and
        the nannies of a LocalCluster all run here), against the call's wall time. On a
        machine shared with other work the wall time stretches but the CPU times hardly do:
        the workers' CPU time shared evenly is what the call would take with a free core per
        worker, and one worker's CPU time over that (`cpu_total`) is the speed-up the cluster
        allows (the slices' uneven split aside)."""
        import time

        before = self.client.run(_user_system)
        mine, t0 = time.process_time(), time.perf_counter()
        vg()
        wall, mine = time.perf_counter() - t0, time.process_time() - mine
        after = self.client.run(_user_system)
        spent = sorted(
            ((after[w][0] - before[w][0], after[w][1] - before[w][1]) for w in before),
            key=sum,
            reverse=True,
        )
        total = sum(u + s for u, s in spent)
        EinadClusterEngine.cpu_total[self.workers] = total
        text = (
            f"cpu: workers {', '.join(f'{u:.1f} + {s:.1f}' for u, s in spent)} s (user + system), "
            f"client/scheduler/nannies {mine:.1f} s, in {wall:.1f} s"
        )
        one = EinadClusterEngine.cpu_total.get(1)
        if self.workers > 1 and one:
            text += f"; with a free core per worker {one / (total / len(spent)):.2f}x faster than 1"
        return text

    def close(self):
        if self.client is not None:
            import logging

            logging.getLogger("distributed").setLevel(logging.ERROR)  # no INFO lines on closing
            self.client.close()
            self.cluster.close()
            self.client = self.cluster = None


def all_engines() -> list[Engine]:
    """In running order: `manual` first, since it gives the references."""
    return [
        ManualEngine(),
        OptEinsumEngine(),
        EinadEngine(),
        EinadJitEngine(),
        EinadJitNumpyEngine(),
        AutogradEngine(),
        JaxEngine(jit=False),
        JaxEngine(jit=True),
        TorchEngine(),
        EinadTorchEngine(),
        EinadDaskEngine(1),
        EinadDaskEngine(2),
        EinadThreadsEngine(2),
        EinadClusterEngine(1),
        EinadClusterEngine(2),
        TorchCudaEngine(),
        EinadTorchCudaEngine(),
        EinadJitTorchCudaEngine(),
        EinadCupyEngine(),
        JaxGpuEngine(),
    ]


ENGINE_NAMES = [e.name for e in all_engines()]
assert ENGINE_NAMES == _LISTED, "benchmarks.ENGINE_NAMES is out of date"
