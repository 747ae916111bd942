"""Sorting along the last axis (tracekern.numpy moves another axis there), and binary search.

sort and argsort order NaN last, as NumPy does; argsort is stable (equal values keep their order),
and sort's gradient sends each cotangent back to the element that landed there (a scatter through
argsort's permutation). searchsorted finds insertion points in a sorted 1-D array."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval, is_complex
from . import lanes, ops
from .core import Primitive


def _last_axis(name: str, x: Aval) -> None:
    if x.ndim == 0:
        raise ShapeError(f"{name}: needs an array of at least one dimension, got a 0-d one")
    if is_complex(x.dtype):
        raise TypeError(f"{name}: complex numbers have no order that tracekern traces ({x.dtype}); NumPy's is "
                        "lexicographic. Sort by np.abs(z) or z.real (np.argsort of it, then take)")


class Sort(Primitive):
    def batch(self, args, batched):
        return [ops.sort(args[0])], [True]   # (along the last axis, never the batch axis)

    def abstract_eval(self, x: Aval):
        _last_axis("sort", x)
        return (x,)

    def impl(self, x):
        return np.sort(x, axis=-1)

    def vjp(self, cts, ins, outs, active):
        (x,) = ins
        perm = ops.argsort(x)
        return [ops.scatter(ops.zeros_like(x), perm, cts[0], axis=x.ndim - 1, mode="add")]

    def jvp(self, tangents, ins, outs):
        """The tangent permuted as the values are."""
        (x,) = ins
        return [ops.gather(tangents[0], ops.argsort(x), axis=x.ndim - 1)]


class Argsort(Primitive):
    """Stable: ties keep their order (NumPy's kind="stable"); int64 indices."""

    def batch(self, args, batched):
        return [ops.argsort(args[0])], [True]

    def abstract_eval(self, x: Aval):
        _last_axis("argsort", x)
        return (Aval(x.shape, np.dtype(np.int64)),)

    def impl(self, x):
        return np.argsort(x, axis=-1, kind="stable")

    def differentiable(self, **params) -> bool:
        return False


class SearchSorted(Primitive):
    """searchsorted(a, v, side): for each element of v, the index in the sorted 1-D `a` where it would
    be inserted (side "left": before equal values; "right": after them); int64 of v's shape."""

    def batch(self, args, batched, *, side):
        """Sorted arrays that differ per lane: the insertion point is how many elements of the
        lane's array sort before the value (NumPy's order: NaN after everything), a count."""
        (a, v), (a_b, v_b) = args, batched
        if not a_b:
            return [ops.searchsorted(a, v, side=side)], [True]
        v = lanes.batched(v, v_b, a.shape[0])
        lane = tuple(v.shape[1:])
        rows = ops.reshape(a, new_shape=(a.shape[0],) + (1,) * len(lane) + (a.shape[1],))
        vals = ops.reshape(v, new_shape=tuple(v.shape) + (1,))
        if side == "left":
            before = _sorts_before(rows, vals)
        else:
            before = ops.logical_not(_sorts_before(vals, rows))
        return [ops.reduce_sum(ops.convert(before, dtype=np.int64), axes=(len(lane) + 1,))], [True]

    def abstract_eval(self, a: Aval, v: Aval, *, side: str):
        if a.ndim != 1:
            raise ShapeError(f"searchsorted: the sorted array must be 1-D, got shape {a.shape}")
        if side not in ("left", "right"):
            raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
        if a.dtype != v.dtype:
            raise TypeError(f"searchsorted: dtypes differ ({a.dtype}, {v.dtype})")
        _last_axis("searchsorted", a)
        return (Aval(v.shape, np.dtype(np.int64)),)

    def impl(self, a, v, *, side):
        return np.asarray(np.searchsorted(a, v, side=side), dtype=np.int64)

    def differentiable(self, **params) -> bool:
        return False


def _sorts_before(x, y):
    """x < y in NumPy's sort order, where NaN comes after every number (broadcast)."""
    return ops.logical_or(ops.lt(x, y), ops.logical_and(ops.eq(x, x), ops.ne(y, y)))


sort = Sort("sort")
argsort = Argsort("argsort")
searchsorted = SearchSorted("searchsorted")
