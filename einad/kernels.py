"""Compiled loop kernels: a loop nest of scalar operations, written as LLVM IR and compiled by
LLVM through llvmlite (the optional ``fast`` extra; einad.jit's ``llvm`` backend).

A `KernelSpec` describes one fused kernel in plain terms, with no einad program in it: the
loop shape, the arguments (arrays read through their own strides, or 0-d values passed by
value), the scalar steps in order (each one entry of `OPS`, on values converted to its
computing dtype) and the values written out. `compile_kernels` writes the specs of one
program as LLVM modules (one for long loops of arithmetic, which LLVM may vectorize, one for
the rest), compiles them once (with the host CPU's features, no fast-math: IEEE results step
by step, as numpy computes them; sums alone may be added in another order) and returns one
`Kernel` per spec. And the contraction programs' strided copies (`copy_kernel`, `copy_views`,
below): one loop nest per number of axes, laid out in tiles where a copy transposes.

Calling convention. A kernel takes each array argument and each output as the numpy array
object itself (a ``PyObject*``: ctypes passes it without converting anything) and reads the
data pointer and the strides from numpy's array struct, whose layout is checked once at start
(`unavailable`); 0-d arguments come by value. Outputs are allocated by the caller (contiguous;
the sums' outputs zero-filled, float32 ones in double: `Out`). The kernel returns 0, or
`NONFINITE` when a step marked ``checked`` (a user's own step, not a derivative rule's) made a
NaN or an infinity: numpy would have warned there (a division by zero, an overflow, an invalid
operation), so the caller computes those steps again with numpy, which warns or raises as
`numpy.geterr` says; or `MISALIGNED` (before computing anything) when an array's data or
strides are not whole elements: the caller calls again on aligned copies.

Cache. A compiled module's object code is stored under `cache_dir` (``EINAD_CACHE_DIR``, or
``$XDG_CACHE_HOME/einad/kernels``, ``~/.cache/einad/kernels``), keyed by the IR, the compile
options, the LLVM version and the host CPU, so another process compiling the same kernels
loads them instead.
``EINAD_CACHE_DIR=""`` turns the cache off. A cache that cannot be written is skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import hashlib
import math
import os
import struct
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .aliases import Shape

# -- the scalar operations --------------------------------------------------------------------

LIBM_UNARY = {
    "exp": "exp",
    "log": "log",
    "log1p": "log1p",
    "expm1": "expm1",
    "sin": "sin",
    "cos": "cos",
    "tan": "tan",
    "tanh": "tanh",
    "sinh": "sinh",
    "cosh": "cosh",
    "arcsin": "asin",
    "arccos": "acos",
    "arctan": "atan",
    "log2": "log2",
    "log10": "log10",
    "exp2": "exp2",
    "arcsinh": "asinh",
    "arccosh": "acosh",
    "arctanh": "atanh",
}
"""Operations that are one call of the C math library (the float32 one has the suffix f)."""

LIBM_BINARY = {"power": "pow", "arctan2": "atan2", "hypot": "hypot"}

INTRINSIC_UNARY = {"sqrt": "sqrt", "abs": "fabs", "floor": "floor", "ceil": "ceil", "round": "rint"}
"""Operations that are one LLVM intrinsic (``llvm.<name>.f64``)."""

ARITHMETIC = {"add": "fadd", "subtract": "fsub", "multiply": "fmul", "divide": "fdiv"}

COMPARISONS = {
    "equal": "oeq",
    "not_equal": "une",
    "less": "olt",
    "less_equal": "ole",
    "greater": "ogt",
    "greater_equal": "oge",
}
"""numpy's comparisons as LLVM's: ordered (False with a NaN), but != is True with a NaN."""

COMPOSITE = frozenset({"negative", "square", "relu", "sigmoid", "softplus", "sign", "maximum", "minimum"})
COMPOSITE |= {"logaddexp", "isnan", "isinf", "isfinite", "where", "astype"}

OPS: frozenset[str] = frozenset(
    {*LIBM_UNARY, *LIBM_BINARY, *INTRINSIC_UNARY, *ARITHMETIC, *COMPARISONS, *COMPOSITE}
)
"""Every scalar operation a kernel step may be, by einad's primitive name (``astype`` converts)."""

PREDICATES = frozenset({*COMPARISONS, "isnan", "isinf", "isfinite"})
"""Steps with a boolean result, computed in their operands' common dtype."""

QUIET = frozenset(
    {*PREDICATES, "negative", "abs", "floor", "ceil", "round", "relu", "sign", "maximum", "minimum"}
) | {"sigmoid", "softplus", "tanh", "where"}
"""Steps that give a NaN or an infinity only from one in their operands: numpy never reports a
floating-point event for them, so a kernel checks none of them."""

FLOATS = (np.dtype(np.float64), np.dtype(np.float32))
"""The dtypes a kernel computes in."""

NONFINITE = 1
"""A kernel's result when a checked step made a NaN or an infinity (numpy would have warned)."""
MISALIGNED = 256
"""A kernel's result when an array argument is not aligned to its elements (nothing computed)."""


def loadable(dtype: np.dtype[Any]) -> bool:
    """Whether a kernel reads arrays of this dtype (to convert them to one it computes in): not
    a byte-swapped one (``>i4`` on a little-endian machine), which a load would misread."""
    return dtype in FLOATS or dtype.kind in "biu" and dtype.itemsize <= 8 and dtype.isnative


def writable(dtype: np.dtype[Any]) -> bool:
    """Whether a kernel computes and writes values of this dtype."""
    return dtype in FLOATS or dtype == np.bool_


# -- the specification --------------------------------------------------------------------------


@dataclass(frozen=True)
class Const:
    """A literal operand of a step: a Python or numpy number (converted like numpy converts it)."""

    value: Any


Operand = str | Const
"""A step's operand: the name of an argument or an earlier step, or a literal."""


@dataclass(frozen=True)
class Arg:
    """A kernel argument. An array: `axes[k]` is the loop axis its axis k follows (None for a
    size-1 axis, read at index 0); it is read through its own strides. A 0-d value (`axes`
    None): passed by value."""

    name: str
    dtype: np.dtype[Any]
    axes: tuple[int | None, ...] | None


@dataclass(frozen=True)
class Step:
    """``name = op(operands)``, in `compute` (operands converted to it), giving `dtype`.

    ``phase`` is "pre" (0-d, once before the loop), "loop" (every element) or "post" (0-d,
    once after the loop, may read the sums). A "sum" step (op ``sum``, in the loop) adds its
    operand into an accumulator indexed by the loop axes `keep` (none: a total). ``checked``:
    a NaN or an infinity it makes is reported (`NONFINITE`).
    """

    name: str
    op: str
    operands: tuple[Operand, ...]
    dtype: np.dtype[Any]
    compute: np.dtype[Any]
    phase: str = "loop"
    checked: bool = False
    keep: tuple[int, ...] = ()


@dataclass(frozen=True)
class Out:
    """A value the kernel writes: a loop value (the loop's shape, contiguous), a sum (its kept
    axes' shape, zero-filled by the caller, of its `accumulator` dtype: the caller narrows a
    float32 one), or a 0-d value."""

    name: str
    shape: Shape
    dtype: np.dtype[Any]
    zeroed: bool = False


@dataclass(frozen=True)
class KernelSpec:
    shape: Shape
    args: tuple[Arg, ...]
    steps: tuple[Step, ...]
    outs: tuple[Out, ...]


# -- availability -------------------------------------------------------------------------------

_lock = threading.RLock()
_state: dict[str, Any] = {}


def _llvm() -> Any:
    """llvmlite's binding, initialized once (raises ImportError when llvmlite is missing)."""
    ready = _state.get("llvm")
    if ready is not None:
        return ready
    with _lock:
        if "llvm" in _state:
            return _state["llvm"]
        import llvmlite.binding as llvm  # the optional dependency, imported on first use

        with warnings.catch_warnings():  # older llvmlite needs initialize(); newer ones deprecate it
            warnings.simplefilter("ignore")
            with contextlib.suppress(Exception):  # removed in later versions: nothing to do
                llvm.initialize()
        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        libm = ctypes.util.find_library("m")
        if libm:
            llvm.load_library_permanently(libm)
        try:
            cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
        except Exception:  # noqa: BLE001  (some hosts do not report features: the generic CPU)
            cpu, features = "", ""
        _state["target"] = (llvm.Target.from_default_triple(), cpu, features)
        _state["host"] = f"{llvm.get_process_triple()} {cpu} {features} {llvm.llvm_version_info}"
        _state["llvm"] = llvm
        return llvm


def _header() -> int:
    return int(object.__basicsize__)  # PyObject_HEAD: 16 bytes on the usual CPython builds


def _layout_ok() -> bool:
    """Whether numpy's array struct is laid out as the kernels read it: after the object
    header, the data pointer, the number of dimensions, the shape and the strides."""
    a = np.zeros((3, 4))[:, ::2]
    h = _header()
    data = ctypes.c_void_p.from_address(id(a) + h).value
    nd = ctypes.c_int.from_address(id(a) + h + 8).value
    strides_at = ctypes.c_void_p.from_address(id(a) + h + 24).value
    if data != a.ctypes.data or nd != 2 or not strides_at:
        return False
    return list((ctypes.c_int64 * 2).from_address(strides_at)) == list(a.strides)


def unavailable() -> str | None:
    """None when compiled kernels can run here, else the reason they cannot (cached)."""
    if "reason" not in _state:
        reason: str | None = None
        try:
            _llvm()
        except ImportError:
            reason = "llvmlite is not installed (pip install 'einad[fast]')"
        except Exception as err:  # noqa: BLE001  (LLVM failing to start: the numpy program instead)
            reason = f"LLVM could not start here: {err}"
        if reason is None and (struct.calcsize("P") != 8 or not _layout_ok()):
            reason = "numpy's array struct is not laid out as the kernels read it"
        _state["reason"] = reason
    return _state["reason"]  # type: ignore[no-any-return]


_CALLED = {"sigmoid": ("exp",), "softplus": ("exp", "log1p"), "logaddexp": ("exp", "log1p")}
_missing: dict[tuple[str, str], str | None] = {}


def missing_symbols(op: str, compute: np.dtype[Any]) -> str | None:
    """The C math functions step `op` calls in `compute` that this process cannot find (None:
    it finds them all, or the step calls none)."""
    key = (op, compute.str)
    if key not in _missing:
        called = _CALLED.get(op) or tuple(n for n in (LIBM_UNARY.get(op) or LIBM_BINARY.get(op),) if n)
        llvm = _llvm()
        suffix = "f" if compute == np.float32 else ""
        _missing[key] = (
            ", ".join(n + suffix for n in called if not llvm.address_of_symbol(n + suffix)) or None
        )
    return _missing[key]


# -- writing the IR -------------------------------------------------------------------------------


def _ty(dtype: np.dtype[Any]) -> str:
    """A value's LLVM type (booleans are i1 in registers)."""
    if dtype == np.float64:
        return "double"
    if dtype == np.float32:
        return "float"
    if dtype == np.bool_:
        return "i1"
    return f"i{dtype.itemsize * 8}"


def _mem(dtype: np.dtype[Any]) -> str:
    """A value's LLVM type in memory (numpy stores a boolean in a byte)."""
    return "i8" if dtype == np.bool_ else _ty(dtype)


def _fconst(value: float, dtype: np.dtype[Any]) -> str:
    """A floating-point constant of `dtype` in LLVM's hexadecimal form (float: its double bits)."""
    with np.errstate(all="ignore"):  # beyond float32's range: its infinity, as numpy makes it
        v = float(np.asarray(value, dtype=dtype).astype(np.float64))
    bits = struct.unpack("<Q", struct.pack("<d", v))[0]
    return f"0x{bits:016X}"


class _Writer:
    """The IR of one kernel function, built line by line."""

    def __init__(self, name: str, spec: KernelSpec, header: int) -> None:
        self.name = name
        self.spec = spec
        self.header = header
        self.lines: list[str] = []
        self.declared: set[str] = set()
        self.n = 0
        self.vals: dict[str, tuple[str, np.dtype[Any]]] = {}  # name -> (register, dtype)
        self.loaded: dict[str, str] = {}  # argument name -> its element in the loop body
        self.ptrs: dict[str, str] = {}  # argument or output name -> its data pointer
        self.strides: dict[str, list[str]] = {}
        self.index: list[str] = []  # the loop counters
        self.misaligned: list[str] = []  # per array argument: its address's and strides' remainders
        self.flags: list[str] = []  # this block's checked steps' "made a NaN or an infinity"

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def emit(self, text: str) -> str:
        r = self.tmp()
        self.lines.append(f"  {r} = {text}")
        return r

    def declare(self, decl: str) -> None:
        self.declared.add(decl)

    def call(self, fn: str, ty: str, *args: str) -> str:
        self.declare(f"declare {ty} @{fn}({', '.join(ty for _ in args)})")
        return self.emit(f"call {ty} @{fn}({', '.join(f'{ty} {a}' for a in args)})")

    def intrinsic(self, name: str, dtype: np.dtype[Any], *args: str) -> str:
        return self.call(f"llvm.{name}.{'f64' if dtype == np.float64 else 'f32'}", _ty(dtype), *args)

    def libm(self, name: str, dtype: np.dtype[Any], *args: str) -> str:
        return self.call(name + ("f" if dtype == np.float32 else ""), _ty(dtype), *args)

    # -- conversions and constants

    def convert(self, reg: str, src: np.dtype[Any], dst: np.dtype[Any]) -> str:
        if src == dst:
            return reg
        if dst == np.bool_:
            if src.kind == "f":
                return self.emit(f"fcmp une {_ty(src)} {reg}, 0.0")
            return self.emit(f"icmp ne {_ty(src)} {reg}, 0")
        if src.kind == "f":  # float to float
            op = "fpext" if src.itemsize < dst.itemsize else "fptrunc"
            return self.emit(f"{op} {_ty(src)} {reg} to {_ty(dst)}")
        op = "sitofp" if src.kind == "i" else "uitofp"  # booleans and unsigned integers: unsigned
        return self.emit(f"{op} {_ty(src)} {reg} to {_ty(dst)}")

    def const(self, value: Any, dtype: np.dtype[Any]) -> str:
        if dtype == np.bool_:
            return "true" if bool(value) else "false"
        return _fconst(value, dtype)

    def operand(self, a: Operand, compute: np.dtype[Any]) -> str:
        if isinstance(a, Const):
            return self.const(a.value, compute)
        reg, dtype = self.value(a)
        return self.convert(reg, dtype, compute)

    def value(self, name: str) -> tuple[str, np.dtype[Any]]:
        """A value's register: a step's result, or an argument's element (loaded on first use)."""
        if name in self.vals:
            return self.vals[name]
        arg = next(a for a in self.spec.args if a.name == name)
        reg = self.load(arg)
        self.vals[name] = (reg, arg.dtype)
        return reg, arg.dtype

    # -- memory

    def field(self, obj: str, offset: int, ty: str) -> str:
        at = self.emit(f"getelementptr i8, ptr {obj}, i64 {offset}")
        return self.emit(f"load {ty}, ptr {at}")

    def load(self, arg: Arg) -> str:
        assert arg.axes is not None
        ptr = self.element(self.ptrs[arg.name], arg.dtype, arg.axes, self.strides[arg.name])
        raw = self.emit(f"load {_mem(arg.dtype)}, ptr {ptr}")
        if arg.dtype == np.bool_:
            return self.emit(f"icmp ne i8 {raw}, 0")
        return raw

    def element(
        self, base: str, dtype: np.dtype[Any], axes: Sequence[int | None], strides: Sequence[str | int]
    ) -> str:
        """The address of the element the loop counters select (`strides` in elements, so
        that LLVM may version a loop for a unit stride and vectorize it)."""
        offset = "0"
        for ax, st in zip(axes, strides):
            if ax is None or st == 0:
                continue
            term = self.emit(f"mul i64 {self.index[ax]}, {st}")
            offset = term if offset == "0" else self.emit(f"add i64 {offset}, {term}")
        if offset == "0":
            return base
        return self.emit(f"getelementptr {_mem(dtype)}, ptr {base}, i64 {offset}")

    def store(self, out: Out, reg: str, dtype: np.dtype[Any], axes: Sequence[int | None]) -> None:
        reg = self.convert(reg, dtype, out.dtype)
        if out.dtype == np.bool_:
            reg = self.emit(f"zext i1 {reg} to i8")
        ptr = self.element(self.ptrs[out.name], out.dtype, axes, _contiguous(out.shape))
        self.lines.append(f"  store {_mem(out.dtype)} {reg}, ptr {ptr}")

    # -- the function

    def write(self) -> str:
        spec = self.spec
        params = [
            f"ptr %{a.name}" if a.axes is not None else f"{_by_value(a.dtype)} %{a.name}" for a in spec.args
        ]
        params += [f"ptr %{o.name}.out" for o in spec.outs]
        self.lines.append(f"define i32 @{self.name}({', '.join(params)}) {{")
        self.lines.append("entry:")
        self.lines.append("  %events = alloca i32")
        self.lines.append("  store i32 0, ptr %events")
        for a in spec.args:
            if a.axes is None:
                reg = f"%{a.name}"
                if a.dtype == np.bool_:
                    reg = self.emit(f"icmp ne i64 {reg}, 0")
                elif a.dtype == np.float32:
                    reg = self.emit(f"fptrunc double {reg} to float")
                elif a.dtype.kind in "iu" and a.dtype.itemsize < 8:  # integers come as i64
                    reg = self.emit(f"trunc i64 {reg} to {_ty(a.dtype)}")
                self.vals[a.name] = (reg, a.dtype)
            else:
                self.ptrs[a.name] = data = self.field(f"%{a.name}", self.header, "ptr")
                at = self.field(f"%{a.name}", self.header + 24, "ptr")
                self.strides[a.name] = []
                size = a.dtype.itemsize
                shift = size.bit_length() - 1
                if size > 1:
                    address = self.emit(f"ptrtoint ptr {data} to i64")
                    self.misaligned.append(self.emit(f"and i64 {address}, {size - 1}"))
                for k in range(len(a.axes)):
                    p = self.emit(f"getelementptr i64, ptr {at}, i64 {k}")
                    stride = self.emit(f"load i64, ptr {p}")
                    if size > 1:
                        self.misaligned.append(self.emit(f"and i64 {stride}, {size - 1}"))
                        stride = self.emit(f"ashr i64 {stride}, {shift}")
                    self.strides[a.name].append(stride)
        if self.misaligned:  # data or strides not in whole elements: the caller copies and calls again
            bad = self.misaligned[0]
            for m in self.misaligned[1:]:
                bad = self.emit(f"or i64 {bad}, {m}")
            stop = self.emit(f"icmp ne i64 {bad}, 0")
            self.lines.append(f"  br i1 {stop}, label %misaligned, label %aligned")
            self.lines.append(f"misaligned:\n  ret i32 {MISALIGNED}\naligned:")
        for o in spec.outs:
            self.ptrs[o.name] = self.field(f"%{o.name}.out", self.header, "ptr")
        outs = {o.name: o for o in spec.outs}
        totals: dict[str, str] = {}  # a total's accumulator (a double: see `accumulator`)
        for s in spec.steps:
            if s.op == "sum" and not s.keep:
                wide = accumulator(s.dtype)
                acc = self.emit(f"alloca {_ty(wide)}")
                self.lines.append(f"  store {_ty(wide)} {self.const(0, wide)}, ptr {acc}")
                totals[s.name] = acc
        for s in spec.steps:
            if s.phase == "pre":
                self.step(s)
                if s.name in outs:
                    self.store(outs[s.name], *self.vals[s.name], ())
        self.note_flags()
        for n, group in enumerate(_streams(spec)):
            self.loops(spec, outs, totals, group, n)
        for s in spec.steps:
            if s.op == "sum" and not s.keep:
                wide = accumulator(s.dtype)
                total = self.emit(f"load {_ty(wide)}, ptr {totals[s.name]}")
                self.vals[s.name] = (self.convert(total, wide, s.dtype), s.dtype)
                if s.name in outs:
                    self.store(outs[s.name], *self.vals[s.name], ())
        for s in spec.steps:
            if s.phase == "post":
                self.step(s)
                if s.name in outs:
                    self.store(outs[s.name], *self.vals[s.name], ())
        self.note_flags()
        result = self.emit("load i32, ptr %events")
        self.lines.append(f"  ret i32 {result}")
        self.lines.append("}")
        return "\n".join(self.lines)

    def loops(
        self, spec: KernelSpec, outs: dict[str, Out], totals: dict[str, str], steps: list[Step], n: int
    ) -> None:
        """The loop nest over `spec.shape` computing `steps` (loop steps; the nest's labels
        numbered `n`; counters in allocas, which LLVM turns into registers)."""
        rank = len(spec.shape)
        counters = [self.emit("alloca i64") for _ in range(rank)]
        for d in range(rank):
            self.lines.append(f"  store i64 0, ptr {counters[d]}")
            self.lines.append(f"  br label %head{n}.{d}")
            self.lines.append(f"head{n}.{d}:")
            i = self.emit(f"load i64, ptr {counters[d]}")
            more = self.emit(f"icmp slt i64 {i}, {spec.shape[d]}")
            self.lines.append(f"  br i1 {more}, label %body{n}.{d}, label %exit{n}.{d}")
            self.lines.append(f"body{n}.{d}:")
            self.index.append(i)
        saved = dict(self.vals)
        for s in steps:
            if s.op == "sum":
                self.accumulate(s, outs, totals)
                continue
            self.step(s)
            if s.name in outs:
                self.store(outs[s.name], *self.vals[s.name], range(rank))
        self.note_flags()
        self.vals = saved  # the loop body's registers do not reach past the loop
        for d in reversed(range(rank)):
            nxt = self.emit(f"add i64 {self.index[d]}, 1")
            self.lines.append(f"  store i64 {nxt}, ptr {counters[d]}")
            self.lines.append(f"  br label %head{n}.{d}")
            self.lines.append(f"exit{n}.{d}:")
        self.index = []

    def accumulate(self, s: Step, outs: dict[str, Out], totals: dict[str, str]) -> None:
        ty = _ty(s.dtype)
        x = self.operand(s.operands[0], s.dtype)
        if not s.keep:
            wide = accumulator(s.dtype)
            x, ty = self.convert(x, s.dtype, wide), _ty(wide)
            old = self.emit(f"load {ty}, ptr {totals[s.name]}")
            new = self.emit(f"fadd reassoc {ty} {old}, {x}")
            self.lines.append(f"  store {ty} {new}, ptr {totals[s.name]}")
            return
        out = outs[s.name]  # of the accumulator's dtype (`Out`)
        x, ty = self.convert(x, s.dtype, out.dtype), _ty(out.dtype)
        ptr = self.element(self.ptrs[s.name], out.dtype, list(s.keep), _contiguous(out.shape))
        old = self.emit(f"load {ty}, ptr {ptr}")
        new = self.emit(f"fadd {ty} {old}, {x}")
        self.lines.append(f"  store {ty} {new}, ptr {ptr}")

    # -- one step

    def step(self, s: Step) -> None:
        bool_ = np.dtype(np.bool_)  # where's condition is a boolean, its other operands the result's dtype
        xs = [
            self.operand(a, bool_ if s.op == "where" and k == 0 else s.compute)
            for k, a in enumerate(s.operands)
        ]
        r = self.compute(s, xs)
        self.vals[s.name] = (r, s.dtype)
        if s.checked and s.op not in QUIET and s.dtype.kind == "f":
            self.check(s, r)

    def compute(self, s: Step, xs: list[str]) -> str:
        op, dt = s.op, s.compute
        ty = _ty(dt)
        if op == "astype":
            return self.convert(xs[0], s.compute, s.dtype) if s.compute != s.dtype else xs[0]
        if op in ARITHMETIC:
            return self.emit(f"{ARITHMETIC[op]} {ty} {xs[0]}, {xs[1]}")
        if op in COMPARISONS:
            return self.emit(f"fcmp {COMPARISONS[op]} {ty} {xs[0]}, {xs[1]}")
        if op in LIBM_UNARY:
            return self.libm(LIBM_UNARY[op], dt, xs[0])
        if op in LIBM_BINARY:
            return self.libm(LIBM_BINARY[op], dt, xs[0], xs[1])
        if op in INTRINSIC_UNARY:
            return self.intrinsic(INTRINSIC_UNARY[op], dt, xs[0])
        if op == "negative":
            return self.emit(f"fneg {ty} {xs[0]}")
        if op == "square":
            return self.emit(f"fmul {ty} {xs[0]}, {xs[0]}")
        if op == "isnan":
            return self.emit(f"fcmp uno {ty} {xs[0]}, {xs[0]}")
        if op in ("isinf", "isfinite"):
            mag = self.intrinsic("fabs", dt, xs[0])
            inf = self.const(np.inf, dt)
            return self.emit(f"fcmp {'oeq' if op == 'isinf' else 'olt'} {ty} {mag}, {inf}")
        if op == "where":
            return self.emit(f"select i1 {xs[0]}, {ty} {xs[1]}, {ty} {xs[2]}")
        if op in ("maximum", "minimum", "relu"):
            y = xs[1] if op != "relu" else self.const(0, dt)
            return self.extremum(op != "minimum", xs[0], y, dt)
        if op == "sign":
            one, zero = self.const(1, dt), self.const(0, dt)
            pos = self.emit(f"fcmp ogt {ty} {xs[0]}, {zero}")
            neg = self.emit(f"fcmp olt {ty} {xs[0]}, {zero}")
            nan = self.emit(f"fcmp uno {ty} {xs[0]}, {xs[0]}")
            rest = self.emit(f"select i1 {nan}, {ty} {xs[0]}, {ty} {zero}")
            low = self.emit(f"select i1 {neg}, {ty} {self.const(-1, dt)}, {ty} {rest}")
            return self.emit(f"select i1 {pos}, {ty} {one}, {ty} {low}")
        if op == "sigmoid":  # numpy's stable form (rules.elementwise._sigmoid)
            one = self.const(1, dt)
            e = self.libm("exp", dt, self.emit(f"fneg {ty} {self.intrinsic('fabs', dt, xs[0])}"))
            den = self.emit(f"fadd {ty} {one}, {e}")
            hi = self.emit(f"fdiv {ty} {one}, {den}")
            lo = self.emit(f"fdiv {ty} {e}, {den}")
            up = self.emit(f"fcmp oge {ty} {xs[0]}, {self.const(0, dt)}")
            return self.emit(f"select i1 {up}, {ty} {hi}, {ty} {lo}")
        if op == "softplus":  # max(x, 0) + log1p(exp(-|x|)), as rules.elementwise._softplus
            e = self.libm("exp", dt, self.emit(f"fneg {ty} {self.intrinsic('fabs', dt, xs[0])}"))
            tail = self.libm("log1p", dt, e)
            return self.emit(f"fadd {ty} {self.extremum(True, xs[0], self.const(0, dt), dt)}, {tail}")
        if op == "logaddexp":  # numpy's npy_logaddexp
            x, y = xs
            same = self.emit(f"fcmp oeq {ty} {x}, {y}")
            ln2 = self.emit(f"fadd {ty} {x}, {self.const(np.log(2.0), dt)}")
            d = self.emit(f"fsub {ty} {x}, {y}")
            pos = self.emit(f"fcmp ogt {ty} {d}, {self.const(0, dt)}")
            nonpos = self.emit(f"fcmp ole {ty} {d}, {self.const(0, dt)}")
            a = self.emit(
                f"fadd {ty} {x}, {self.libm('log1p', dt, self.libm('exp', dt, self.emit(f'fneg {ty} {d}')))}"
            )
            b = self.emit(f"fadd {ty} {y}, {self.libm('log1p', dt, self.libm('exp', dt, d))}")
            r = self.emit(f"select i1 {nonpos}, {ty} {b}, {ty} {d}")
            r = self.emit(f"select i1 {pos}, {ty} {a}, {ty} {r}")
            return self.emit(f"select i1 {same}, {ty} {ln2}, {ty} {r}")
        raise ValueError(f"no kernel step for {op}")

    def extremum(self, larger: bool, x: str, y: str, dt: np.dtype[Any]) -> str:
        """numpy's maximum (minimum): x where x > y (x < y) or x is NaN, else y (a NaN in y, and
        y on a tie, as numpy's vectorized loops give: maximum(-0.0, 0.0) is 0.0)."""
        ty = _ty(dt)
        keep = self.emit(f"fcmp {'ogt' if larger else 'olt'} {ty} {x}, {y}")
        nan = self.emit(f"fcmp uno {ty} {x}, {x}")
        either = self.emit(f"or i1 {keep}, {nan}")
        return self.emit(f"select i1 {either}, {ty} {x}, {ty} {y}")

    def check(self, s: Step, r: str) -> None:
        """Note whether this step made a NaN or an infinity (then numpy may have warned)."""
        mag = self.intrinsic("fabs", s.dtype, r)
        self.flags.append(self.emit(f"fcmp ueq {_ty(s.dtype)} {mag}, {self.const(np.inf, s.dtype)}"))

    def note_flags(self) -> None:
        """Or this block's checks into the kernel's result."""
        if not self.flags:
            return
        bad = self.flags[0]
        for f in self.flags[1:]:
            bad = self.emit(f"or i1 {bad}, {f}")
        self.flags = []
        bit = self.emit(f"zext i1 {bad} to i32")
        old = self.emit("load i32, ptr %events")
        self.lines.append(f"  store i32 {self.emit(f'or i32 {old}, {bit}')}, ptr %events")


def _streams(spec: KernelSpec) -> list[list[Step]]:
    """The loop steps of `spec` in groups that share no array and no step, each in program
    order: each group is a loop of its own. Chains that fusion put side by side because their
    loops have one shape (30 sums of four gradient blocks, in benchmark m1) then read their
    arrays a few at a time: in one loop, 120 streams at 16 KiB from each other fell in one
    cache set, and the kernel took 0.33 ms."""
    loop = [t for t in spec.steps if t.phase == "loop"]
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    arrays = {a.name for a in spec.args if a.axes is not None}
    inner = {t.name for t in loop}
    for t in loop:
        for a in t.operands:
            if isinstance(a, str) and (a in arrays or a in inner):
                parent[root(a)] = root(t.name)
    groups: dict[str, list[Step]] = {}
    for t in loop:
        groups.setdefault(root(t.name), []).append(t)
    return list(groups.values())


def accumulator(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a sum of `dtype` values is added up in (a total, or each element of a sum
    along kept axes): float32 ones in a double. One float32 accumulator added to element by
    element stops growing at 2**24 times the elements' size (a sum of 2**25 ones is 16777216),
    where numpy's pairwise sums are exact to rounding."""
    return np.dtype(np.float64) if dtype == np.float32 else dtype


def _by_value(dtype: np.dtype[Any]) -> str:
    """How a 0-d argument is passed: floats as double, booleans and integers as i64."""
    return "double" if dtype.kind == "f" else "i64"


def _contiguous(shape: Shape) -> list[int]:
    """A C-contiguous array's strides in elements (0 along a size-1 axis)."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step if d > 1 else 0)
        step *= max(d, 1)
    return strides[::-1]


def module_ir(specs: Sequence[KernelSpec]) -> str:
    """The LLVM module of these kernels, named k0, k1, ... in order."""
    header = _header()
    bodies, declared = [], set()
    for k, spec in enumerate(specs):
        w = _Writer(f"k{k}", spec, header)
        bodies.append(w.write())
        declared |= w.declared
    return "\n".join(sorted(declared)) + "\n\n" + "\n\n".join(bodies) + "\n"


# -- compiling and calling -------------------------------------------------------------------------


def cache_dir() -> str | None:
    """Where compiled kernels are kept across processes (None: not kept)."""
    env = os.environ.get("EINAD_CACHE_DIR")
    if env is not None:
        return os.path.join(env, "kernels") if env else None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "einad", "kernels")


@dataclass(eq=False)
class Kernel:
    """One compiled kernel: ``kernel.fn(*args, *outs)`` runs it (see the module docstring)."""

    spec: KernelSpec
    fn: Callable[..., int]
    engine: Any = field(default=None, repr=False)
    """The LLVM engine holding the code (freed with the last kernel that refers to it)."""
    cached: bool = False
    """Whether its object code came from the cache (compiled by an earlier call or process)."""


@dataclass(eq=False)
class Compiled:
    """A compiled module: its kernels, and the LLVM objects that keep their code alive."""

    kernels: list[Kernel]
    ir: str
    cached: bool
    """Whether the object code came from the cache (another process compiled it)."""


CALLS = frozenset({*LIBM_UNARY, *LIBM_BINARY, "sigmoid", "softplus", "logaddexp"})
"""Steps that call the C math library: a loop with one does not vectorize."""

OPTIONS = "IR O2 without unrolling, codegen O1; loop vectorizer for long loops without calls; no SLP"
"""How kernels are compiled (part of the cache's key). The SLP vectorizer, which looks for
vectors in straight-line code, took 0.66 s of the 0.76 s LLVM spent on benchmark case 7's
kernel (646 steps) and vectorizes nothing there; the loop vectorizer is kept for loops of
arithmetic alone over `VECTOR_MIN` elements or more, the loops it speeds up (2.9 to 1.0 µs
on a multiply-and-sum of 4096 elements), since it costs time (4 ms on that kernel's 8): the
saving pays for it within a thousand calls from 16384 elements on, and a first call stays
below JAX jit's (benchmark case 2's forward: 8192 elements). Loop unrolling and
interleaving cost 6 ms more there for 5% of speed. Code generation at LLVM's -O1 instead of
-O2 saves 1.5 ms per module and made no kernel measured slower."""

VECTOR_MIN = 16384

NUMPY_SIMD = frozenset(
    {"exp", "log", "log1p", "expm1", "exp2", "log2", "log10", "tanh", "sinh", "cosh", "tan"}
    | {"arcsin", "arccos", "arctan", "arcsinh", "arccosh", "arctanh", "power"}
)
"""Functions numpy computes with its own vectorized loops (float32 also sin and cos), several
elements per instruction, where a kernel calls the C math library once per element: from
`SIMD_MAX` elements on, one numpy call is faster than the kernel's loop (tanh at 4096 float64
elements: 12 µs in numpy, 39 µs in a kernel; at 64, 8.7 and 7.7 µs with a multiply and an add
around it), so such a step is left to numpy in a longer loop."""
SIMD_MAX = 256


def numpy_faster(op: str, compute: np.dtype[Any], size: int) -> bool:
    """Whether numpy's own vectorized loop computes step `op` faster than a kernel would."""
    fast = op in NUMPY_SIMD or (compute == np.float32 and op in ("sin", "cos"))
    return fast and size > SIMD_MAX


ARGS_COMPILED = 32
"""The most arrays a fused kernel reads and writes (`transforms.fusion` leaves a loop of more to
numpy's calls). Compiling a kernel of many arrays costs more than it saves: LLVM's optimizer on
benchmark case m1's sum of 90 gradient blocks read from 120 arrays took 3.3 s of a 4.4 s first
call, and code generation alone (no optimizer, 255 ms on m2's loop of 134 arrays) gave a
kernel no faster than numpy's calls (m1's and m2's value-and-gradient alike, 14.4 against
14.5 ms, programs alternating). A loop's time is in its passes over the data, and such a loop
is many small independent ones gathered in one pass (each operand's gradient block)."""


def compile_kernels(specs: Sequence[KernelSpec]) -> Compiled:
    """Compile the kernels of one program (or load them from the cache): the long loops of
    arithmetic in one LLVM module, with the loop vectorizer, the others (short loops, calls
    to the math library, which the vectorizer would not vectorize) in another, without it."""
    llvm = _llvm()
    kernels: list[Kernel | None] = [None] * len(specs)
    irs, cached = [], []
    for vectorize in (False, True):
        picked = [k for k, s in enumerate(specs) if vectorize == _vectorizable(s)]
        if not picked:
            continue
        ir = module_ir([specs[k] for k in picked])
        irs.append(ir)
        with _lock:
            engine, stored = _module(llvm, ir, vectorize)
            cached.append(stored)
            for j, k in enumerate(picked):
                spec = specs[k]
                types = [ctypes.py_object if a.axes is not None else _ctype(a.dtype) for a in spec.args]
                types += [ctypes.py_object] * len(spec.outs)
                fn = ctypes.CFUNCTYPE(ctypes.c_int32, *types)(engine[0].get_function_address(f"k{j}"))
                fn.engine = engine  # type: ignore[attr-defined]  # the code lives while it can be called
                kernels[k] = Kernel(spec, fn, engine, stored)
    return Compiled([k for k in kernels if k is not None], "\n".join(irs), all(cached))


def _vectorizable(spec: KernelSpec) -> bool:
    """Whether the loop vectorizer may pay for its time: a long loop with no call."""
    return math.prod(spec.shape) >= VECTOR_MIN and not any(t.op in CALLS for t in spec.steps)


def _module(llvm: Any, ir: str, vectorize: bool, optimize: bool = True) -> tuple[tuple[Any, Any], bool]:
    """An LLVM engine holding the compiled module `ir` (its code from the cache if stored
    there), and whether it came from the cache. `optimize`: run LLVM's optimizer on the IR
    (False: code generation alone, for IR written as the optimizer would leave it)."""
    options = OPTIONS if optimize else "codegen O1 only"
    key = hashlib.sha256(f"{_state['host']}\n{options}\n{vectorize}\n{ir}".encode()).hexdigest()
    where = cache_dir()
    path = os.path.join(where, key[:2], key + ".o") if where else None
    stored = _read(path)
    mod = llvm.parse_assembly(ir)
    target, cpu, features = _state["target"]
    machine = target.create_target_machine(cpu=cpu, features=features, opt=1, jit=True)
    if stored is None:
        mod.verify()
    if stored is None and optimize:
        pto = llvm.create_pipeline_tuning_options(speed_level=2)
        pto.loop_vectorization = vectorize
        pto.slp_vectorization = False
        pto.loop_unrolling = False
        pto.loop_interleaving = False
        pb = llvm.create_pass_builder(machine, pto)
        pb.getModulePassManager().run(mod, pb)
    engine = llvm.create_mcjit_compiler(mod, machine)  # the engine owns (and frees) the machine
    engine.set_object_cache(lambda m, buf: _write(path, buf), lambda m: stored)
    engine.finalize_object()
    return (engine, mod), stored is not None


def _ctype(dtype: np.dtype[Any]) -> Any:
    if dtype.kind == "f":
        return ctypes.c_double
    return ctypes.c_uint64 if dtype == np.uint64 else ctypes.c_int64


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _write(path: str | None, data: bytes) -> None:
    """Store object code atomically (a reader never sees half a file); failures are ignored."""
    if path is None:
        return
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "wb") as f:
            f.write(bytes(data))
        os.replace(tmp, path)
    except OSError:
        pass


# -- strided copies ------------------------------------------------------------------------------
#
# A contraction program lays its operands out with copies (a transposed view into a buffer);
# numpy copies in the destination's order, one inner loop per run of the source, and where the
# source's run is short (a bond of 2-8) or strided by a power of two (each element on its own
# cache line, the lines in one cache set) it runs at a fifth of memory speed: 2^18 elements of
# benchmark n4 take 160-420 µs where a contiguous copy takes 40. `copy_kernel` is one loop
# nest of any rank that reads the shape and both arrays' strides at run time, so one compiled
# function per rank serves every copy; `copy_views` orders the loops for it: the source's
# contiguous axis and the destination's next to each other innermost, in tiles of
# `COPY_TILE`, so that a tile's source lines and destination lines both stay in the cache.

COPY_TILE = 8
"""The side of the tiles a transposing copy runs in (elements; `_tile`): n4's copies took 1.05 ms
in numpy, 0.56 with tiles of 8 (16: 0.55; 32: 0.68)."""

COPY_RUN = 16
"""The shortest contiguous run numpy's copy is left to: from 16 elements on, its inner loop (a
vectorized copy) is as fast as the kernel's element by element."""

COPY_CACHED = 8 << 20
"""The bytes from which a copy is out of the cache: there, a run shorter than `COPY_RUN` that
both arrays share (a bond of 8 or 9 innermost on both sides, the rest transposed) is copied in
tiles too, the two axes next outside the run tiled and the run innermost (benchmark case 10's
150^3 x 9-element copies: numpy 88 ms, the destination's order 67, tiles 57). In the cache the
destination's order is as fast (the networks' copies: within a few percent either way).

Every transposing copy runs in tiles, however far apart their rows lie: out of the cache, a
tile's rows each on a page of its own, tiles were once measured slower than numpy's order
(100^3 x 8 elements, rows 80,000 apart: 15 -> 19 ms), and copies of that size were left to
numpy; measured again (2026-11-29) over 36 layouts of 8-30 million elements, tiles took 767 ms
in all against numpy's 1291 (case 10's (80, 80, 80, 10) with rows 512,000 apart: 50 -> 15 ms;
its value-and-gradient at n = 150 19.4 -> 17.3 s), numpy faster by a fifth on two of them."""

COPY_MIN = 2048
"""The fewest elements a compiled copy is used for: below, numpy's copy costs about as much
as the call (1-2 µs)."""


def copy_ir(rank: int, itemsize: int, inner: int = 0, symbol: str = "copy") -> str:
    """The LLVM IR of ``symbol(src, dst)``: ``dst[...] = src`` for two arrays of one shape (read
    from `dst`) and `rank` axes, each through its own strides, looping over the axes in order;
    with `inner`, the last axis has that many elements, copied by straight-line code. Written
    as LLVM's optimizer would leave it (counters and addresses in phi nodes, addresses stepped
    by the strides), so that it compiles without the optimizer: 6-7 ms instead of 11-23 (ranks
    3-9), and runs as fast (compiled with it: the same time per copy, within 1%)."""
    h = _header()
    ty = f"i{itemsize * 8}"
    lines = [f"define i32 @{symbol}(ptr %src, ptr %dst) {{", "entry:"]

    def field(obj: str, offset: int, name: str) -> None:
        lines.append(f"  %{name}.at = getelementptr i8, ptr %{obj}, i64 {offset}")
        lines.append(f"  %{name} = load ptr, ptr %{name}.at")

    field("src", h, "s0")
    field("dst", h, "d0")
    field("dst", h + 16, "dims")
    field("src", h + 24, "sst")
    field("dst", h + 24, "dst.st")
    for k in range(rank):
        for arr, name in (("dims", "n"), ("sst", "ss"), ("dst.st", "ds")):
            lines.append(f"  %{name}{k}.at = getelementptr i64, ptr %{arr}, i64 {k}")
            lines.append(f"  %{name}{k} = load i64, ptr %{name}{k}.at")
    looped = rank - 1 if inner else rank

    def unrolled(s: str, d: str) -> None:  # the last axis, `inner` elements, straight
        for j in range(inner):
            sj, dj = s, d
            if j:
                lines.append(f"  %so.{j} = mul i64 %ss{rank - 1}, {j}")
                lines.append(f"  %sp.{j} = getelementptr i8, ptr {s}, i64 %so.{j}")
                lines.append(f"  %do.{j} = mul i64 %ds{rank - 1}, {j}")
                lines.append(f"  %dp.{j} = getelementptr i8, ptr {d}, i64 %do.{j}")
                sj, dj = f"%sp.{j}", f"%dp.{j}"
            lines.append(f"  %v.{j} = load {ty}, ptr {sj}, align 1")
            lines.append(f"  store {ty} %v.{j}, ptr {dj}, align 1")

    if not looped:
        unrolled("%s0", "%d0")
        lines += ["  ret i32 0", "}"]
        return "\n".join(lines) + "\n"
    lines.append("  br label %head0")
    for k in range(looped):
        enter = f"body{k - 1}" if k else "entry"
        lines += [
            f"head{k}:",
            f"  %i{k} = phi i64 [0, %{enter}], [%next{k}, %latch{k}]",
            f"  %s{k + 1} = phi ptr [%s{k}, %{enter}], [%snext{k}, %latch{k}]",
            f"  %d{k + 1} = phi ptr [%d{k}, %{enter}], [%dnext{k}, %latch{k}]",
            f"  %more{k} = icmp slt i64 %i{k}, %n{k}",
            f"  br i1 %more{k}, label %body{k}, label %exit{k}",
            f"body{k}:",
        ]
        if k + 1 < looped:
            lines.append(f"  br label %head{k + 1}")
        else:
            if inner:
                unrolled(f"%s{k + 1}", f"%d{k + 1}")
            else:
                lines.append(f"  %v = load {ty}, ptr %s{k + 1}, align 1")
                lines.append(f"  store {ty} %v, ptr %d{k + 1}, align 1")
            lines.append(f"  br label %latch{k}")
        lines += [
            f"latch{k}:",
            f"  %next{k} = add i64 %i{k}, 1",
            f"  %snext{k} = getelementptr i8, ptr %s{k + 1}, i64 %ss{k}",
            f"  %dnext{k} = getelementptr i8, ptr %d{k + 1}, i64 %ds{k}",
            f"  br label %head{k}",
            f"exit{k}:",
            f"  br label %latch{k - 1}" if k else "  ret i32 0",
        ]
    lines.append("}")
    return "\n".join(lines) + "\n"


COPY_UNROLLED = 16
"""The longest last axis a copy kernel copies by straight-line code (one kernel per length)."""

COPY_RANKS = (4, 8, 16, 32, 64)
"""The ranks copy kernels are compiled for: a copy of fewer axes runs in the next one's kernel,
its views given leading axes of size 1 (`copy_rank`), so that a program's copies of many
ranks (a bond-2 network's: 6 to 14 axes) share a few kernels, at the same speed. Compiling
them was most of a first call's time after planning: n2's forward and gradient compiled 14
kernels in 14 modules, 250-300 ms; now 7 kernels in one module (`copy_kernels`), 120 ms."""


def copy_rank(ndim: int) -> int:
    """The rank of the kernel that copies views of `ndim` axes (`COPY_RANKS`)."""
    return next(r for r in COPY_RANKS if r >= ndim)


def copy_kernel(rank: int, itemsize: int, inner: int = 0) -> Callable[[Any, Any], int]:
    """The compiled ``copy(src, dst)`` of `rank` axes and elements of `itemsize` bytes, its last
    axis of `inner` elements if given (`copy_ir`; compiled once per process, or loaded from the
    cache; raises ImportError without llvmlite)."""
    return copy_kernels([(rank, itemsize, inner)])[0]


def copy_kernels(keys: Sequence[tuple[int, int, int]]) -> list[Callable[[Any, Any], int]]:
    """`copy_kernel` of each of `keys` (``(rank, itemsize, inner)``): those this process has not
    compiled yet are compiled together, as one LLVM module (a program's copies at once; six
    kernels took 56 ms as six modules, 37 as one)."""
    names = ["copy {} {} {}".format(*k) for k in keys]
    if any(name not in _state for name in names):
        llvm = _llvm()
        with _lock:
            todo = {name: k for name, k in zip(names, keys) if name not in _state}
            if todo:
                ir = "\n".join(copy_ir(*k, symbol=f"copy{j}") for j, k in enumerate(todo.values()))
                engine, _ = _module(llvm, ir, False, optimize=False)
                for j, name in enumerate(todo):
                    fn = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.py_object, ctypes.py_object)(
                        engine[0].get_function_address(f"copy{j}")
                    )
                    fn.engine = engine  # type: ignore[attr-defined]  # the code lives while it can be called
                    fn.copy_key = name  # type: ignore[attr-defined]  # (what a program's op is, for a reader)
                    _state[name] = fn
    return [_state[name] for name in names]


def _tile(n: int) -> int:
    """The tile side for an axis of `n` elements: `n` itself up to `COPY_UNROLLED`, else the
    divisor of `n` nearest `COPY_TILE` from 4 to `COPY_UNROLLED` (`n` where there is none)."""
    if n <= COPY_UNROLLED:
        return n
    sides = [t for t in range(4, COPY_UNROLLED + 1) if n % t == 0]
    return min(sides, key=lambda t: (abs(t - COPY_TILE), t)) if sides else n


def copy_views(out: Any, view: Any) -> tuple[Any, Any] | None:
    """`view` and `out` (numpy arrays of one shape and dtype) as views in the order the copy
    kernel should loop: axes that step through both arrays together merged, size-1 axes
    dropped, and where the source's contiguous axis is not the destination's, both split into
    tiles of `COPY_TILE` and put innermost (out of the cache, where both share a short run, the
    two axes next outside it, the run innermost: `COPY_CACHED`). None where numpy's own copy
    serves as well: the source's contiguous run is the destination's and `COPY_RUN` elements or
    longer, or one strided axis is all there is. The order is planned once per layout (`_copy_order`); the
    views are made by a transpose, a reshape and a transpose (a fifth of ``as_strided``'s
    cost), checked to be views with the planned strides."""
    key = (view.shape, view.strides, out.strides, view.itemsize, view.nbytes > COPY_CACHED)
    order = _COPY_ORDERS.get(key)
    if order is None:
        if len(_COPY_ORDERS) >= 4096:  # (the layouts of many programs: the oldest go)
            with contextlib.suppress(KeyError, RuntimeError, StopIteration):  # (another thread's)
                del _COPY_ORDERS[next(iter(_COPY_ORDERS))]
        order = _COPY_ORDERS[key] = _copy_order(view, out)
    if order is False:
        return None
    first, shape, loop, sstrides, dstrides = order
    source = view.transpose(first).reshape(shape).transpose(loop)
    dest = out.transpose(first).reshape(shape).transpose(loop)
    if source.strides != sstrides or dest.strides != dstrides or not np.may_share_memory(dest, out):
        return None  # (a reshape that copied, which the plan's merges rule out: numpy's copy then)
    return source, dest


_COPY_ORDERS: dict[tuple[Any, ...], Any] = {}


def _copy_order(view: Any, out: Any) -> Any:
    """`copy_views`'s plan for this layout: the permutation that puts the axes in the
    destination's order, the shape they are then reshaped to (merged, size-1 axes dropped, the
    tiles split off), the permutation to the loop's order and the strides it gives both arrays
    (False: numpy's copy serves as well)."""
    item = view.itemsize
    first = sorted(range(view.ndim), key=lambda k: (-abs(out.strides[k]), k))
    axes = [(view.shape[k], view.strides[k], out.strides[k]) for k in first if view.shape[k] > 1]
    merged: list[tuple[int, int, int]] = []
    for n, s, d in axes:
        if merged and merged[-1][1] == s * n and merged[-1][2] == d * n:
            merged[-1] = (merged[-1][0] * n, s, d)
        else:
            merged.append((n, s, d))
    if not merged:
        return False
    inner = len(merged) - 1
    unit = [k for k, a in enumerate(merged) if a[1] == item]
    run, step, _ = merged[inner]
    pair: tuple[int, int] | None = None  # the axes tiled: the source's contiguous one, the destination's
    if unit and unit[-1] != inner:  # a transposing copy
        pair = (unit[-1], inner)
    elif step == item and run < COPY_RUN and inner >= 2 and view.nbytes > COPY_CACHED:
        # a short run both share, out of the cache: tiles of the axes next outside it in each
        after = [k for k, a in enumerate(merged[: inner - 1]) if a[1] == run * item]
        pair = (after[-1], inner - 1) if after else None
    if pair is None and (run >= COPY_RUN if step == item else len(merged) == 1):
        return False
    split: list[tuple[int, int, int]] = []  # the reshaped axes, in the destination's order
    tiles: list[int] = []  # the positions in `split` of the two tiles, the source's first
    for k, (n, s, d) in enumerate(merged):
        if pair is None or k not in pair:
            split.append((n, s, d))
            continue
        t = _tile(n)
        if t < n:
            split.append((n // t, s * t, d * t))
        tiles.insert(0 if k == pair[0] else len(tiles), len(split))
        split.append((t, s, d))
    # the tiles innermost, or just outside a shared run (which stays innermost)
    last = [len(split) - 1] if pair is not None and pair[1] != inner else []
    loop = tuple([k for k in range(len(split)) if k not in tiles and k not in last] + tiles + last)
    return (
        tuple(first),
        tuple(n for n, _, _ in split),
        loop,
        tuple(split[k][1] for k in loop),
        tuple(split[k][2] for k in loop),
    )
