"""Flatten and unflatten nested tuples, lists, dicts and None (pytrees) of arrays.

A TreeDef is hashable and cheap to compare, so it can be part of a compile-cache key. A Static
(a value tk.jit's static_argnums keeps out of the trace) is a node without leaves whose value the
TreeDef carries, so static arguments pass through every transform untraced."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class Static:
    """A static argument (tk.jit's static_argnums) on its way through transforms: flattening keeps
    it in the TreeDef, not among the leaves, so it is never traced; call_static hands its value to
    functions that are not transforms."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def __eq__(self, other) -> bool:
        return type(other) is Static and type(other.value) is type(self.value) and other.value == self.value

    def __hash__(self) -> int:
        return hash((type(self.value), self.value))

    def __repr__(self) -> str:
        return f"static({self.value!r})"


def takes_static(fn: Callable) -> bool:
    """Whether fn is a transform that passes Static arguments on (tk.jit / tk.grad functions and the
    annotations mark themselves with `takes_static = True`)."""
    return getattr(fn, "takes_static", False)


def call_static(fn: Callable, args: tuple, kwargs: dict | None = None) -> Any:
    """fn(*args, **kwargs), Static arguments passed on to a transform and unwrapped for anything else
    (the user's own function gets the static value itself)."""
    if not takes_static(fn):
        args = tuple(a.value if type(a) is Static else a for a in args)
    return fn(*args, **(kwargs or {}))


@dataclass(frozen=True)
class TreeDef:
    kind: str  # "leaf", "none", "tuple", "list", "dict", "namedtuple", "static" (meta: the Static)
    children: tuple = ()
    meta: Any = None  # dict keys, or the namedtuple type

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __repr__(self) -> str:
        return self._text(lambda t: t.__name__)

    def key_text(self) -> str:
        """The structure as text for a cache key across processes: repr's, with each namedtuple type's module
        and qualified name (repr's __name__ may name two types)."""
        return self._text(lambda t: f"{t.__module__}.{t.__qualname__}")

    def _text(self, type_name: Callable[[type], str]) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        if self.kind == "static":
            return repr(self.meta)
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {c._text(type_name)}" for k, c in zip(self.meta, self.children)) + "}"
        inner = ", ".join(c._text(type_name) for c in self.children)
        if self.kind == "list":
            return "[" + inner + "]"
        if self.kind == "namedtuple":
            return f"{type_name(self.meta)}({inner})"
        return "(" + inner + ("," if len(self.children) == 1 else "") + ")"


LEAF = TreeDef("leaf")


def tree_flatten(tree: Any) -> tuple[list, TreeDef]:
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(node: Any, leaves: list) -> TreeDef:
    if node is None:
        return TreeDef("none")
    if type(node) is Static:
        return TreeDef("static", (), node)
    if isinstance(node, tuple):
        kind, meta = ("namedtuple", type(node)) if hasattr(node, "_fields") else ("tuple", None)
        return TreeDef(kind, tuple(_flatten(c, leaves) for c in node), meta)
    if isinstance(node, list):
        return TreeDef("list", tuple(_flatten(c, leaves) for c in node))
    if isinstance(node, dict):
        try:
            keys = tuple(sorted(node))
        except TypeError:   # keys of several types ({1: a, "b": c}): ordered by type, then by their repr
            keys = tuple(sorted(node, key=lambda k: (type(k).__qualname__, repr(k))))
        return TreeDef("dict", tuple(_flatten(node[k], leaves) for k in keys), keys)
    leaves.append(node)
    return LEAF


def tree_unflatten(treedef: TreeDef, leaves: list) -> Any:
    it = iter(leaves)
    out = _unflatten(treedef, it)
    rest = list(it)
    if rest:
        raise ValueError(f"tree_unflatten: {len(rest)} leaves left over for tree {treedef!r}")
    return out


def _unflatten(td: TreeDef, it) -> Any:
    if td.kind == "leaf":
        return next(it)
    if td.kind == "none":
        return None
    if td.kind == "static":
        return td.meta
    children = [_unflatten(c, it) for c in td.children]
    if td.kind == "tuple":
        return tuple(children)
    if td.kind == "namedtuple":
        return td.meta(*children)
    if td.kind == "list":
        return children
    return dict(zip(td.meta, children))


def tree_map(fn: Callable, tree: Any) -> Any:
    leaves, td = tree_flatten(tree)
    return tree_unflatten(td, [fn(x) for x in leaves])


def leaf_paths(treedef: TreeDef, prefix: str = "") -> list[str]:
    """Human-readable path of every leaf, e.g. ['[0]', "['w']"], for error messages."""
    if treedef.kind == "leaf":
        return [prefix]
    if treedef.kind in ("none", "static"):
        return []
    out: list[str] = []
    keys = treedef.meta if treedef.kind == "dict" else range(len(treedef.children))
    for k, c in zip(keys, treedef.children):
        out.extend(leaf_paths(c, f"{prefix}[{k!r}]"))
    return out
