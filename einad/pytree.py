"""Pytrees, as in JAX: nested containers of leaves, flattened to a list and rebuilt.

The nodes are tuples, lists, dicts (leaves in sorted key order), ``None`` (a
node with no children), namedtuples (rebuilt as their own class), dict
subclasses (rebuilt as their own class: `OrderedDict` keeps its insertion
order, `defaultdict` its ``default_factory``; any other subclass sorts its keys
and is rebuilt as ``cls(mapping)``), and every type registered with
`register_pytree_node`. Everything else is a leaf.

A `TreeDef` (the structure) compares and hashes by node type, auxiliary data
(a dict's keys, a registered node's ``aux``) and children, so `einad.jit` can
key its cache on it.
"""

from __future__ import annotations

import functools
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple


class _Handler(NamedTuple):
    """How one kind of node comes apart and goes back together."""

    flatten: Callable[[Any], tuple[Iterable[Any], Any]]
    """``flatten(node) -> (children, aux)``."""
    unflatten: Callable[[type, Any, tuple[Any, ...]], Any]
    """``unflatten(cls, aux, children) -> node``."""


def _sorted_keys(d: dict[Any, Any]) -> tuple[Any, ...]:
    """A dict's keys in a fixed order: sorted, or sorted by `repr` when they do not compare."""
    try:
        return tuple(sorted(d))
    except TypeError:
        return tuple(sorted(d, key=repr))


def _flatten_dict(d: dict[Any, Any]) -> tuple[list[Any], tuple[Any, ...]]:
    keys = _sorted_keys(d)
    return [d[k] for k in keys], keys


def _unflatten_dict(cls: type, keys: tuple[Any, ...], children: tuple[Any, ...]) -> Any:
    d = dict(zip(keys, children))
    return d if cls is dict else cls(d)


def _flatten_ordered(d: OrderedDict[Any, Any]) -> tuple[list[Any], tuple[Any, ...]]:
    keys = tuple(d)  # an OrderedDict's order is part of its value (its == compares it)
    return [d[k] for k in keys], keys


def _flatten_defaultdict(d: defaultdict[Any, Any]) -> tuple[list[Any], tuple[Any, tuple[Any, ...]]]:
    children, keys = _flatten_dict(d)
    return children, (d.default_factory, keys)


def _unflatten_defaultdict(cls: type, aux: tuple[Any, tuple[Any, ...]], children: tuple[Any, ...]) -> Any:
    factory, keys = aux
    return cls(factory, zip(keys, children))


_TUPLE = _Handler(lambda t: (t, None), lambda cls, aux, children: tuple(children))
_LIST = _Handler(lambda t: (t, None), lambda cls, aux, children: list(children))
_NONE = _Handler(lambda t: ((), None), lambda cls, aux, children: None)
_NAMEDTUPLE = _Handler(lambda t: (t, None), lambda cls, aux, children: cls(*children))
_DICT = _Handler(_flatten_dict, _unflatten_dict)
_ORDERED_DICT = _Handler(_flatten_ordered, _unflatten_dict)
_DEFAULTDICT = _Handler(_flatten_defaultdict, _unflatten_defaultdict)

_BUILTIN: dict[type, _Handler] = {tuple: _TUPLE, list: _LIST, dict: _DICT, type(None): _NONE}
_registry: dict[type, _Handler] = {OrderedDict: _ORDERED_DICT, defaultdict: _DEFAULTDICT}


def _handler(cls: type) -> _Handler | None:
    """The handler of nodes of type `cls`, or None for a leaf (looked up by exact type first)."""
    if cls in _leaf_types:
        return None
    h = _BUILTIN.get(cls) or _registry.get(cls)
    if h is not None:
        return h
    h = _subclass_handler(cls)
    if h is None:
        _leaf_types.add(cls)
    return h


_leaf_types: set[type] = set()
"""Types found to be leaves (arrays, Tensors, numbers): the answer kept until a registration."""


def _subclass_handler(cls: type) -> _Handler | None:
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return _NAMEDTUPLE
    if issubclass(cls, defaultdict):
        return _DEFAULTDICT
    if issubclass(cls, OrderedDict):
        return _ORDERED_DICT
    if issubclass(cls, dict):
        return _DICT
    return None


def _fields(cls: Any) -> tuple[str, ...]:
    """A namedtuple class's field names."""
    fields: tuple[str, ...] = cls._fields
    return fields


def register_pytree_node(
    nodetype: type,
    flatten_func: Callable[[Any], tuple[Iterable[Any], Hashable]],
    unflatten_func: Callable[[Any, tuple[Any, ...]], Any],
) -> None:
    """Make instances of `nodetype` pytree nodes, with JAX's convention.

    Every transformation (and `einad.jit`) then looks inside such objects:
    gradients, tangents and Jacobians come back as `nodetype` objects of the
    same structure. A registration applies to `nodetype` exactly, not to its
    subclasses, and takes precedence over the built-in handling of a namedtuple
    or dict subclass.

    Args:
        nodetype: The class.
        flatten_func: ``flatten_func(obj) -> (children, aux)``: the children (an
            iterable of pytrees) and auxiliary data, the part of the structure
            that is not a child. `aux` must be hashable and comparable with
            ``==``: `einad.jit` keys its cache on it, and trees with unequal
            `aux` have different structures.
        unflatten_func: ``unflatten_func(aux, children) -> obj``: the object
            rebuilt from `aux` and a tuple of children (which may hold other
            leaves than the original, such as gradients).

    Raises:
        ValueError: If `nodetype` is tuple, list, dict or NoneType, or is
            registered already.
    """
    if nodetype in _BUILTIN or nodetype in _registry:
        raise ValueError(f"{nodetype.__name__} is already a pytree node type")
    _leaf_types.clear()
    _registry[nodetype] = _Handler(flatten_func, lambda cls, aux, children: unflatten_func(aux, children))


class TreeDef:
    """The structure of a pytree: node types, auxiliary data and children (leaves: no type).

    Equal structures compare equal and hash alike, whatever leaves they held.
    """

    __slots__ = ("_hash", "_leaves", "aux", "children", "node_type")

    def __init__(self, node_type: type | None, aux: Any = None, children: tuple[TreeDef, ...] = ()) -> None:
        self.node_type = node_type
        self.aux = aux
        self.children = children
        self._hash: int | None = None
        # the number of leaves, counted once (every `tree_unflatten` checks it)
        self._leaves: int = 1 if node_type is None else sum([c._leaves for c in children])

    @property
    def is_leaf(self) -> bool:
        """Whether this is a leaf rather than a node."""
        return self.node_type is None

    @property
    def num_leaves(self) -> int:
        """How many leaves the structure holds."""
        return self._leaves

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, TreeDef)
            and self.node_type is other.node_type
            and bool(self.aux == other.aux)
            and self.children == other.children
        )

    def __hash__(self) -> int:
        if self._hash is None:
            try:
                aux = hash(self.aux)
            except TypeError:
                name = getattr(self.node_type, "__name__", "?")
                raise TypeError(
                    f"the auxiliary data of a pytree node of type {name} is not hashable "
                    f"({self.aux!r}); flatten functions must return hashable aux data"
                ) from None
            self._hash = hash((self.node_type, aux, self.children))
        return self._hash

    def labels(self) -> list[str]:
        """How each child is reached: ``[0]`` for sequences, ``['key']`` for dicts, ``.field``."""
        cls = self.node_type
        h = None if cls is None else _handler(cls)
        if h is _NAMEDTUPLE:
            return [f".{name}" for name in _fields(cls)]
        if h in (_DICT, _ORDERED_DICT, _DEFAULTDICT):
            return [f"[{k!r}]" for k in self._keys()]
        return [f"[{i}]" for i in range(len(self.children))]

    def _keys(self) -> tuple[Any, ...]:
        """A dict node's keys, in the children's order."""
        is_default = self.node_type is not None and _handler(self.node_type) is _DEFAULTDICT
        keys: tuple[Any, ...] = self.aux[1] if is_default else self.aux
        return keys

    def leaf_paths(self, prefix: str = "") -> list[str]:
        """A name per leaf, in flattening order: ``prefix['w'][0]``, ``prefix.bias``, ..."""
        if self.node_type is None:
            return [prefix]
        return [
            path for c, label in zip(self.children, self.labels()) for path in c.leaf_paths(prefix + label)
        ]

    def __repr__(self) -> str:
        cls = self.node_type
        if cls is None:
            return "*"
        if cls is type(None):
            return "None"
        kids = [repr(c) for c in self.children]
        if cls is tuple:
            return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"
        if cls is list:
            return "[" + ", ".join(kids) + "]"
        h = _handler(cls)
        if h is _NAMEDTUPLE:
            return f"{cls.__name__}(" + ", ".join(f"{n}={k}" for n, k in zip(_fields(cls), kids)) + ")"
        if h in (_DICT, _ORDERED_DICT, _DEFAULTDICT):
            body = "{" + ", ".join(f"{key!r}: {k}" for key, k in zip(self._keys(), kids)) + "}"
            return body if cls is dict else f"{cls.__name__}({body})"
        return f"{cls.__name__}[{self.aux!r}](" + ", ".join(kids) + ")"


_LEAF = TreeDef(None)
_FLAT: dict[tuple[Any, int], TreeDef] = {}
"""The structure of a flat list or tuple of n leaves, by (type, n): made once (`_walk`), and
rebuilt without `_build` (`tree_unflatten`)."""


def node_children(node: Any) -> tuple[list[Any], Any] | None:
    """One level of `node`: its children and auxiliary data if it is a pytree node, None for a leaf."""
    h = _handler(type(node))
    if h is None:
        return None
    children, aux = h.flatten(node)
    return list(children), aux


def tree_flatten(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> tuple[list[Any], TreeDef]:
    """The leaves of `tree` in a fixed order (dict keys sorted), and its structure.

    Args:
        tree: A pytree: nested tuples, lists, dicts, namedtuples, None and
            registered nodes, with anything else as leaves.
        is_leaf: As JAX's: a node for which it returns True is taken as a leaf, whole.

    Returns:
        ``(leaves, treedef)``; ``tree_unflatten(treedef, leaves)`` rebuilds `tree`.
    """
    leaves: list[Any] = []
    if is_leaf is not None:
        return leaves, _walk_to(tree, leaves, is_leaf)
    return leaves, _walk(tree, leaves)


def _walk_to(node: Any, leaves: list[Any], is_leaf: Callable[[Any], bool]) -> TreeDef:
    """`_walk`, stopping at the nodes `is_leaf` takes for leaves."""
    h = None if is_leaf(node) else _handler(type(node))
    if h is None:
        leaves.append(node)
        return _LEAF
    children, aux = h.flatten(node)
    return TreeDef(type(node), aux, tuple([_walk_to(c, leaves, is_leaf) for c in children]))


def _walk(node: Any, leaves: list[Any]) -> TreeDef:
    cls = type(node)
    h = _handler(cls)
    if h is None:
        leaves.append(node)
        return _LEAF
    if h is _TUPLE or h is _LIST:  # a sequence: its children of a known leaf type taken in place
        kids = []
        flat = True
        for c in node:
            if type(c) in _leaf_types:
                leaves.append(c)
                kids.append(_LEAF)
            else:
                k = _walk(c, leaves)
                kids.append(k)
                flat = flat and k is _LEAF
        if flat:  # a flat sequence of leaves (a transformation's arguments): one structure per length
            td = _FLAT.get((cls, len(kids)))
            if td is None:
                td = _FLAT[(cls, len(kids))] = TreeDef(cls, None, tuple(kids))
            return td
        return TreeDef(cls, None, tuple(kids))
    children, aux = h.flatten(node)
    return TreeDef(cls, aux, tuple([_walk(c, leaves) for c in children]))


def tree_unflatten(treedef: TreeDef, leaves: Sequence[Any]) -> Any:
    """The pytree of structure `treedef` holding `leaves` (in `tree_flatten` order).

    Args:
        treedef: A structure, from `tree_flatten`.
        leaves: One value per leaf of `treedef`.

    Returns:
        The rebuilt tree: its nodes of the original types, its leaves `leaves`.

    Raises:
        ValueError: If the number of leaves is not the structure's.
    """
    if len(leaves) != treedef._leaves:
        raise ValueError(f"the structure {treedef} has {treedef._leaves} leaves, got {len(leaves)}")
    if _FLAT.get((treedef.node_type, treedef._leaves)) is treedef:  # (a flat list or tuple of leaves)
        return list(leaves) if treedef.node_type is list else tuple(leaves)
    return _build(treedef, iter(leaves))


def _build(td: TreeDef, it: Iterator[Any]) -> Any:
    # a module-level function: a recursive closure would be a reference cycle holding `leaves`
    cls = td.node_type
    if cls is None:
        return next(it)
    h = _handler(cls)
    assert h is not None  # `cls` was a node type when the structure was made, and stays one
    kids = []
    for c in td.children:  # (leaves taken in place: no call per leaf)
        kids.append(next(it) if c.node_type is None else _build(c, it))
    if h is _TUPLE:
        return tuple(kids)
    if h is _LIST:
        return kids
    return h.unflatten(cls, td.aux, tuple(kids))


def tree_leaves(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> list[Any]:
    """The leaves of `tree` in `tree_flatten`'s order (``jax.tree_util.tree_leaves``)."""
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> TreeDef:
    """The structure of `tree`, as `tree_flatten` gives it (``jax.tree_util.tree_structure``)."""
    return tree_flatten(tree, is_leaf)[1]


_NO_INITIAL = object()


def tree_reduce(
    function: Callable[[Any, Any], Any],
    tree: Any,
    initializer: Any = _NO_INITIAL,
    is_leaf: Callable[[Any], bool] | None = None,
) -> Any:
    """`function` folded over the leaves of `tree`, as ``jax.tree_util.tree_reduce``
    (``functools.reduce`` on `tree_leaves`; `initializer` first when given).

    Raises:
        TypeError: For a tree without leaves and no `initializer`.
    """
    leaves = tree_flatten(tree, is_leaf)[0]
    if initializer is _NO_INITIAL:
        if not leaves:
            raise TypeError("tree_reduce of a tree without leaves needs an initializer")
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_all(tree: Any, is_leaf: Callable[[Any], bool] | None = None) -> bool:
    """Whether every leaf of `tree` is true, as ``jax.tree_util.tree_all`` (True for none)."""
    return all(tree_flatten(tree, is_leaf)[0])


def tree_map(
    fn: Callable[..., Any], tree: Any, *rest: Any, is_leaf: Callable[[Any], bool] | None = None
) -> Any:
    """The pytree of `tree`'s structure holding ``fn(leaf, *others)`` for each leaf.

    Args:
        fn: A function of one leaf of `tree` and the corresponding leaves of `rest`.
        tree: A pytree.
        *rest: Pytrees of the same structure as `tree`.
        is_leaf: As JAX's: a node of `tree` for which it returns True is one leaf (`rest`'s
            trees are flattened the same way).

    Returns:
        A pytree of `tree`'s structure.

    Raises:
        ValueError: If a tree in `rest` has another structure.
    """
    leaves, td = tree_flatten(tree, is_leaf)
    others = []
    for r in rest:
        r_leaves, r_td = tree_flatten(r, is_leaf)
        if r_td != td:
            raise ValueError(f"tree_map: the structure {r_td} does not match {td}")
        others.append(r_leaves)
    return tree_unflatten(td, [fn(*xs) for xs in zip(leaves, *others)])
