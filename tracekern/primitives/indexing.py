"""Gather and scatter along one axis, with indices that are data: what integer-array indexing,
np.take / np.take_along_axis, the gradients of sort and of every gather, and tk.at are built from.

Indices are int32 or int64; a negative one counts from the end, and one out of range is clamped
(as JAX does), so that no kernel ever reads or writes outside its operand. tracekern.numpy checks
constant indices against NumPy's bounds at trace time."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval
from . import lanes, ops
from .core import Primitive, linear_jvp


def normalize(idx: np.ndarray, n: int) -> np.ndarray:
    """NumPy's reading of indices into an axis of n (the impls' side of scalar_rules.take_index)."""
    idx = np.asarray(idx).astype(np.int64)
    idx = np.where(idx < 0, idx + n, idx)
    return np.clip(idx, 0, max(n - 1, 0))


def _check_axis_shapes(name: str, x: Aval, idx: Aval, axis: int) -> None:
    if idx.dtype.kind != "i":
        raise TypeError(f"{name}: indices must be int32 or int64, got {idx.dtype}")
    if x.ndim == 0 or x.ndim != idx.ndim or not 0 <= axis < x.ndim:
        raise ShapeError(f"{name}: an operand of shape {x.shape} and indices of shape {idx.shape} along axis {axis}: "
                         "they need the same number (>0) of dimensions")
    if any(a != b for i, (a, b) in enumerate(zip(x.shape, idx.shape)) if i != axis):
        raise ShapeError(f"{name}: indices of shape {idx.shape} do not match the operand's shape {x.shape} "
                         f"off axis {axis}")
    if x.shape[axis] == 0 and idx.size:
        raise ShapeError(f"{name}: cannot index axis {axis} of size 0 (shape {x.shape})")


def _grid(idx: np.ndarray, axis: int) -> tuple:
    """The full index tuple of an axis gather/scatter: open grids off the axis, the indices on it."""
    grids = list(np.indices(idx.shape, sparse=True)) if idx.ndim else []
    grids[axis] = idx
    return tuple(grids)


class Gather(Primitive):
    """gather(x, idx, axis): out[..., j, ...] = x[..., idx[..., j, ...], ...] (np.take_along_axis). idx has
    the output's shape, which is x's off `axis`. Fused into loops: each output element reads its
    operand element at a computed index (`gather_index`)."""

    fusion = "gather"
    linear = True   # (in x: forward mode gathers the tangent at the same indices)

    def batch(self, args, batched, *, axis):
        """Operand and indices both get the batch axis (the unbatched one broadcast: a view), which
        is the gather's batch index."""
        return [ops.gather(*lanes.all_batched(args, batched), axis=axis + 1)], [True]

    def abstract_eval(self, x: Aval, idx: Aval, *, axis: int):
        _check_axis_shapes("gather", x, idx, axis)
        return (Aval(idx.shape, x.dtype),)

    def gather_index(self, idx: list[str], index: str, in_shape: tuple[int, ...], *, axis: int) -> list[str]:
        """The operand's index expressions for the output element at `idx`, whose index value is the
        scalar named `index`."""
        out = list(idx)
        out[axis] = f"take_index({index}, {in_shape[axis]})"
        return out

    def impl(self, x, idx, *, axis):
        return np.take_along_axis(x, normalize(idx, x.shape[axis]), axis)

    def vjp(self, cts, ins, outs, active, *, axis):
        x, idx = ins
        return [ops.scatter(ops.zeros_like(x), idx, cts[0], axis=axis, mode="add"), None]


# how each mode combines an update u into the value o already there (in the order of the updates)
SCATTER_MODES = ("add", "set", "mul", "min", "max")


class Scatter(Primitive):
    """scatter(base, idx, updates, axis, mode): base, with each update combined into the element its
    index names along `axis` (idx and updates share a shape, which is base's off the axis), in C
    order of the updates: "add" accumulates repeated indices (np.add.at), "set" keeps the last,
    "mul", "min" and "max" combine them (np.multiply.at, np.minimum.at, np.maximum.at)."""

    def batch(self, args, batched, *, axis, mode):
        return [ops.scatter(*lanes.all_batched(args, batched), axis=axis + 1, mode=mode)], [True]

    def abstract_eval(self, base: Aval, idx: Aval, updates: Aval, *, axis: int, mode: str):
        if mode not in SCATTER_MODES:
            raise ValueError(f"scatter: mode {mode!r} is not one of {SCATTER_MODES}")
        _check_axis_shapes("scatter", base, idx, axis)
        if updates.shape != idx.shape or updates.dtype != base.dtype:
            raise ShapeError(f"scatter: updates {updates} must have the indices' shape {idx.shape} and the operand's "
                             f"dtype {base.dtype}")
        if mode in ("min", "max") and base.dtype.kind == "c":
            raise TypeError(f"scatter ({mode}): complex numbers have no order that tracekern traces ({base.dtype})")
        return (base,)

    def impl(self, base, idx, updates, *, axis, mode):
        out = np.array(base, copy=True)
        where = _grid(normalize(idx, base.shape[axis]), axis)
        if mode == "set":
            flat = [np.broadcast_to(w, idx.shape).ravel() for w in where]
            for k, u in zip(zip(*flat), np.ravel(updates)):   # in order: the last of repeated indices wins
                out[k] = u
        else:
            {"add": np.add, "mul": np.multiply, "min": np.minimum, "max": np.maximum}[mode].at(out, where, updates)
        return out

    def vjp(self, cts, ins, outs, active, *, axis, mode):
        (ct,), (base, idx, upd), (out,) = cts, ins, outs
        gather = lambda v: ops.gather(v, idx, axis=axis)   # noqa: E731
        zero_b, zero_u = ops.zeros_like(base), ops.zeros_like(upd)
        if mode == "add":
            return [ct, None, gather(ct)]
        if mode == "set":
            # the updates that survive (the last at each index) get the cotangent of where they went
            ids = ops.constant(upd, np.arange(int(np.prod(upd.shape)), dtype=np.int64).reshape(upd.shape))
            last = ops.scatter(ops.full_like(base, -1, dtype=np.int64), idx, ids, axis=axis, mode="set")
            wins = ops.eq(ops.gather(last, idx, axis=axis), ids)
            return [ops.scatter(ct, idx, zero_u, axis=axis, mode="set"), None, ops.select(wins, gather(ct), zero_u)]
        if mode == "mul":
            # (holomorphic in base and upd: for complex values, the conjugate derivatives)
            return [ops.holomorphic(lambda c: ops.scatter(c, idx, upd, axis=axis, mode="mul"), ct, base), None,
                    ops.holomorphic(lambda c: ops.mul(gather(ops.mul(c, base)), _other_factors(base, idx, upd, axis)), ct, base)]
        # min / max: the cotangent goes to the values equal to the result, shared equally between ties
        base_wins, upd_wins, total = _extremum_winners(base, idx, upd, out, axis)
        share = ops.div(ct, total)
        return [ops.select(base_wins, share, zero_b), None, ops.select(upd_wins, gather(share), zero_u)]

    def jvp(self, tangents, ins, outs, *, axis, mode):
        """"add" and "set" are linear in (base, updates); "mul" is a product rule with the other
        factors of each update; "min" and "max" take the tangents of the winners, ties averaged."""
        if mode in ("add", "set"):
            return linear_jvp(self, tangents, ins, axis=axis, mode=mode)
        (tb, _, tu), (base, idx, upd), (out,) = tangents, ins, outs
        scatter_add = lambda v: ops.scatter(ops.zeros_like(base), idx, v, axis=axis, mode="add")   # noqa: E731
        if mode == "mul":
            terms = []
            if tb is not None:
                terms.append(ops.scatter(tb, idx, upd, axis=axis, mode="mul"))
            if tu is not None:
                terms.append(ops.mul(base, scatter_add(ops.mul(tu, _other_factors(base, idx, upd, axis)))))
            return [terms[0] if len(terms) == 1 else ops.add(*terms)]
        base_wins, upd_wins, total = _extremum_winners(base, idx, upd, out, axis)
        terms = []
        if tb is not None:
            terms.append(ops.select(base_wins, tb, ops.zeros_like(base)))
        if tu is not None:
            terms.append(scatter_add(ops.select(upd_wins, tu, ops.zeros_like(upd))))
        return [ops.div(terms[0] if len(terms) == 1 else ops.add(*terms), total)]


def _count(base, idx, flags, axis):
    """How many of the flagged updates land on each element of base (in base's dtype)."""
    return ops.scatter(ops.zeros_like(base), idx, ops.convert(flags, dtype=base.dtype), axis=axis, mode="add")


def _other_factors(base, idx, upd, axis):
    """For each update of a "mul" scatter, the product of the other updates at its index, without
    dividing by zero, and with exact first derivatives where updates are 0 (the Hessians of a "mul"
    scatter differentiate this). At each index, Z is the product of the updates that are 0 (0 or 1,
    carrying the derivatives of those zeros), P that of the others, n the number of zeros:
    u != 0: Z * P / u; u == 0: P if n == 1, P * (the other zero) if n == 2, else 0 (a product of at
    least two other zeros, whose first derivatives are 0 too)."""
    gather = lambda v: ops.gather(v, idx, axis=axis)   # noqa: E731
    zero_u, one_u = ops.zeros_like(upd), ops.full_like(upd, 1)
    is_zero = ops.eq(upd, zero_u)
    nonzero = ops.select(is_zero, one_u, upd)
    prod = gather(ops.scatter(ops.full_like(base, 1), idx, nonzero, axis=axis, mode="mul"))
    zprod = gather(ops.scatter(ops.full_like(base, 1), idx, ops.select(is_zero, upd, one_u), axis=axis, mode="mul"))
    zeros = gather(_count(base, idx, is_zero, axis))
    # with two zeros at an index, the other one: their sum less this one (0, with the derivative 1)
    other_zero = ops.sub(gather(ops.scatter(ops.zeros_like(base), idx, ops.select(is_zero, upd, zero_u), axis=axis,
                                            mode="add")), upd)
    at_zero = ops.select(ops.eq(zeros, one_u), prod,
                         ops.select(ops.eq(zeros, ops.full_like(upd, 2)), ops.mul(prod, other_zero), zero_u))
    return ops.select(is_zero, at_zero, ops.div(ops.mul(zprod, prod), nonzero))


def _extremum_winners(base, idx, upd, out, axis):
    """For a "min" or "max" scatter: where base holds the result, which updates equal the result at
    their index, and how many values tie for each result (1 where none does)."""
    base_wins = ops.eq(base, out)
    upd_wins = ops.eq(upd, ops.gather(out, idx, axis=axis))
    total = ops.add(ops.convert(base_wins, dtype=base.dtype), _count(base, idx, upd_wins, axis))
    return base_wins, upd_wins, ops.select(ops.eq(total, ops.zeros_like(base)), ops.full_like(base, 1), total)


gather = Gather("gather")
scatter = Scatter("scatter")
