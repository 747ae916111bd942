"""tracekern.pytree: flatten and unflatten of nested tuples, lists, dicts, namedtuples and None."""
from collections import namedtuple

import numpy as np
import pytest

import tracekern as tk
from tracekern.pytree import LEAF, TreeDef, leaf_paths

Point = namedtuple("Point", "x y")


def test_flatten_and_unflatten_round_trip_every_container():
    tree = {"b": [1, (2.0, None)], "a": Point(np.ones(2), {"z": 3})}
    leaves, td = tk.tree_flatten(tree)
    assert [type(x).__name__ for x in leaves] == ["ndarray", "int", "int", "float"]   # dict keys sorted: a, b
    assert leaves[1:] == [3, 1, 2.0]
    back = tk.tree_unflatten(td, leaves)
    assert back.keys() == tree.keys() and isinstance(back["a"], Point) and back["b"][1][1] is None
    assert tk.tree_flatten(back)[1] == td
    assert td.num_leaves == 4


def test_a_dict_with_keys_of_several_types_flattens_and_jits():
    """{1: a, "b": c} raised TypeError: '<' not supported between instances of 'str' and 'int' (from sorting the
    keys); its keys are ordered by type, then repr, so one dict in any insertion order is one structure."""
    a, c = np.ones(2), np.arange(3.0)
    leaves, td = tk.tree_flatten({1: a, "b": c, (0,): 2.0})
    assert tk.tree_flatten({"b": c, (0,): 2.0, 1: a})[1] == td
    back = tk.tree_unflatten(td, leaves)
    assert set(back) == {1, "b", (0,)} and back[1] is a and back["b"] is c and back[(0,)] == 2.0
    out = tk.jit(lambda d: {k: v * 2 for k, v in d.items()}, backend="interpret")({1: a, "b": c})
    assert set(out) == {1, "b"} and out[1].tolist() == [2, 2] and out["b"].tolist() == [0, 2, 4]


def test_treedefs_compare_and_hash_by_structure_only():
    _, a = tk.tree_flatten(([1, 2], {"k": 3}))
    _, b = tk.tree_flatten(([np.ones(3), 5.0], {"k": np.zeros(2)}))
    _, c = tk.tree_flatten(((1, 2), {"k": 3}))      # a tuple where a had a list
    _, d = tk.tree_flatten(([1, 2], {"j": 3}))      # another key
    assert a == b and hash(a) == hash(b)
    assert a != c and a != d
    assert len({a, b, c, d}) == 3


def test_a_leaf_none_and_repr():
    assert tk.tree_flatten(np.ones(2))[1] == LEAF
    leaves, td = tk.tree_flatten(None)
    assert leaves == [] and td == TreeDef("none") and tk.tree_unflatten(td, []) is None
    _, td = tk.tree_flatten((1, [2, {"a": 3}], Point(4, None)))
    assert repr(td) == "(*, [*, {'a': *}], Point(*, None))"
    assert repr(tk.tree_flatten((1,))[1]) == "(*,)"


def test_unflatten_checks_the_leaf_count():
    _, td = tk.tree_flatten((1, 2))
    with pytest.raises(ValueError, match="1 leaves left over"):
        tk.tree_unflatten(td, [1, 2, 3])
    with pytest.raises(StopIteration):
        tk.tree_unflatten(td, [1])


def test_tree_map_and_leaf_paths():
    tree = {"w": [np.ones(2), np.zeros(3)], "b": 1.0}
    doubled = tk.tree_map(lambda x: x * 2, tree)
    assert doubled["b"] == 2.0 and doubled["w"][0].tolist() == [2.0, 2.0]
    assert leaf_paths(tk.tree_flatten(tree)[1]) == ["['b']", "['w'][0]", "['w'][1]"]
    assert leaf_paths(LEAF) == [""]
