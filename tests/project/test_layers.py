"""The package is layered: each module imports only from its own layer or the layers below.

Layers, top to bottom (docs/design.md draws the same table):

- public: the namespace users import (`einad`, `ops` attaches Tensor's methods, numpy dispatch,
  contract expressions, explain, gradcheck);
- transforms: functions of functions (autodiff, batching, custom rules and checkpoint, program
  passes, jit);
- rules: every primitive with its implementation and derivative rules;
- core: primitives, traces, `bind`, the Tensor, operand conversion, programs;
- executor: the array namespace, the contraction executor, slicing plans;
- helpers: pure code with no arrays of its own (aliases, errors, subscripts, pytrees).

Within a layer the modules are listed in import order: one imports only those listed before
it, so the modules of a layer form a chain and never a cycle. Every import counts, at the
top of a module or inside a function (a function-local import that dodges a cycle is an
upward import all the same), and no module imports an einad module inside a function.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

import einad

PACKAGE = pathlib.Path(einad.__file__).parent

# Each layer's modules, in their order within the layer.
LAYERS: dict[str, list[str]] = {
    "helpers": [
        "einad.aliases",
        "einad.errors",
        "einad.subscripts",
        "einad.pytree",
        "einad.strides",
        "einad.post_import",
    ],
    "executor": [
        "einad.arrays",
        "einad.memory",
        "einad.kernels",
        "einad.executor",
        "einad.network",
        "einad.cluster",
        "einad.slicing",
    ],
    "core": ["einad.core", "einad.util", "einad.program"],
    "rules": [
        "einad.rules",
        "einad.rules.shape",
        "einad.rules.einsum",
        "einad.rules.structural",
        "einad.rules.elementwise",
        "einad.rules.linear",
        "einad.rules.reductions",
        "einad.rules.indexing",
        "einad.rules.linalg",
        "einad.rules.fft",
    ],
    "transforms": [
        "einad.transforms",
        "einad.transforms.passes",
        "einad.transforms.fusion",
        "einad.transforms.jit",
        "einad.transforms.batching",
        "einad.transforms.autodiff",
        "einad.transforms.custom",
    ],
    "public": [
        "einad.ops",
        "einad.control",
        "einad.special",
        "einad.fft",
        "einad.numpy_compositions",
        "einad.numpy_api",
        "einad.creation",
        "einad.autoray_backend",
        "einad.quimb_optimizer",
        "einad.array_api",
        "einad.einops_backend",
        "einad.expression",
        "einad.flatten",
        "einad.explain",
        "einad.testing",
        "einad",
        "einad.__main__",
    ],
}
RANK = {m: (layer, pos) for layer, mods in LAYERS.items() for pos, m in enumerate(mods)}
LEVEL = {layer: level for level, layer in enumerate(LAYERS)}


def module_name(path: pathlib.Path) -> str:
    parts = ["einad", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> list[str]:
    """The einad modules an import statement reads (empty for a third-party import)."""
    if node.level == 0:
        base = node.module or ""
        if base != "einad" and not base.startswith("einad."):
            return []
    else:
        here = module.split(".") if is_package else module.split(".")[:-1]
        here = here[: len(here) - (node.level - 1)]
        base = ".".join(here + ([node.module] if node.module else []))
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in RANK else base)
    return out


def imports(module: str, source: str, is_package: bool = False) -> list[tuple[str, int, bool]]:
    """(imported einad module, line, inside a function) for every import in `source`."""
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.ImportFrom):
                found.extend((m, child.lineno, in_function) for m in _resolve(module, is_package, child))
            elif isinstance(child, ast.Import):
                found.extend(
                    (a.name, child.lineno, in_function)
                    for a in child.names
                    if a.name == "einad" or a.name.startswith("einad.")
                )
            visit(child, inner)

    visit(ast.parse(source), False)
    return found


def violations(module: str, source: str, is_package: bool = False) -> list[str]:
    """Why `module`'s imports break the layering (empty when they do not)."""
    layer, pos = RANK[module]
    out = []
    for target, line, in_function in imports(module, source, is_package):
        if in_function:
            out.append(f"{module}:{line} imports {target} inside a function")
        if target not in RANK:
            out.append(f"{module}:{line} imports {target}, which no layer lists")
            continue
        t_layer, t_pos = RANK[target]
        if LEVEL[t_layer] > LEVEL[layer]:
            out.append(f"{module}:{line} imports {target}: {layer} may not import from {t_layer} (above)")
        elif t_layer == layer and t_pos >= pos:
            out.append(f"{module}:{line} imports {target}, listed after it in the {layer} layer")
    return out


def sources() -> list[tuple[str, pathlib.Path]]:
    return sorted((module_name(p), p) for p in PACKAGE.rglob("*.py"))


def test_every_module_has_a_layer() -> None:
    assert sorted(m for m, _ in sources()) == sorted(RANK)


@pytest.mark.parametrize("module,path", sources(), ids=[m for m, _ in sources()])
def test_imports_go_down(module: str, path: pathlib.Path) -> None:
    assert violations(module, path.read_text(), path.name == "__init__.py") == []


def test_the_check_catches_an_upward_import() -> None:
    assert violations("einad.core", "from .ops import add\n")
    assert violations("einad.rules.einsum", "from .linear import einsum\n")  # later in the layer
    assert violations("einad.rules.shape", "def f():\n    from ..transforms import jit\n")
    assert violations("einad.executor", "import einad.core\n")
    assert violations("einad.rules.linear", "def f():\n    from .einsum import contract\n")  # local
    assert not violations("einad.rules.linear", "from .einsum import contract\nimport numpy\n")
