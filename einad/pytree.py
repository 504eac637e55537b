"""Pytrees: nested tuples, lists and dicts of leaves, flattened and rebuilt."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any


class TreeDef:
    """The structure of a pytree: ``kind`` is 'leaf', 'none', tuple, list or dict."""

    __slots__ = ("children", "keys", "kind")

    def __init__(self, kind: Any, keys: Any = None, children: tuple[TreeDef, ...] = ()) -> None:
        self.kind = kind
        self.keys = keys
        self.children = children

    @property
    def num_leaves(self) -> int:
        """How many leaves the structure holds."""
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TreeDef)
            and self.kind == other.kind
            and self.keys == other.keys
            and self.children == other.children
        )

    def __hash__(self) -> int:
        return hash((repr(self.kind), self.keys, self.children))

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind is dict:
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.keys, self.children))
            return "{" + inner + "}"
        return ("(" + inner + ")") if self.kind is tuple else ("[" + inner + "]")


def tree_flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    """Leaves in a fixed order (dict keys sorted), and the structure to rebuild."""
    leaves: list[Any] = []
    return leaves, _walk(tree, leaves)


def _walk(node: Any, leaves: list[Any]) -> TreeDef:
    if node is None:
        return TreeDef("none")
    if type(node) is tuple or type(node) is list:
        return TreeDef(type(node), None, tuple(_walk(c, leaves) for c in node))
    if type(node) is dict:
        keys = sorted(node, key=repr) if not _sortable(node) else sorted(node)
        return TreeDef(dict, tuple(keys), tuple(_walk(node[k], leaves) for k in keys))
    leaves.append(node)
    return TreeDef("leaf")


def _sortable(d: dict[Any, Any]) -> bool:
    try:
        sorted(d)
        return True
    except TypeError:
        return False


def tree_unflatten(treedef: TreeDef, leaves: Sequence[Any]) -> Any:
    """The pytree of structure `treedef` holding `leaves` (in `tree_flatten` order)."""
    return _build(treedef, iter(leaves))


def _build(td: TreeDef, it: Any) -> Any:
    # a module-level function: a recursive closure would be a reference cycle holding `leaves`
    if td.kind == "leaf":
        return next(it)
    if td.kind == "none":
        return None
    kids = [_build(c, it) for c in td.children]
    if td.kind is dict:
        return dict(zip(td.keys, kids))
    return td.kind(kids)


def tree_map(fn: Callable[[Any], Any], tree: Any) -> Any:
    """The pytree of the same structure holding ``fn(leaf)`` for each leaf."""
    leaves, td = tree_flatten(tree)
    return tree_unflatten(td, [fn(x) for x in leaves])
