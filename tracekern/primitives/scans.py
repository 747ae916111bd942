"""Cumulative reductions along one axis: cumsum, cumprod, cummax, cummin (np.cumsum, np.cumprod,
np.maximum.accumulate, np.minimum.accumulate), from the front or, with reverse=True, from the back.

A running value is sequential along its axis, so no composition of the other primitives computes it
in linear time: each is a whole-array kernel (a serial loop along the axis, in parallel across the
others). Results keep the operand's dtype (tracekern.numpy promotes integers first, as NumPy does)."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval, is_complex
from . import ops
from .core import Primitive, linear_jvp

_NUMPY = {"cumsum": np.cumsum, "cumprod": np.cumprod, "cummax": np.maximum.accumulate, "cummin": np.minimum.accumulate}


class Cumulative(Primitive):
    """`combine` is the scalar rule the kernels run ({acc}, {x}, math names as in Reduce.combine)."""

    def __init__(self, name: str, combine: str):
        super().__init__(name)
        self.combine = combine

    def batch(self, args, batched, *, axis, reverse):
        return [ops.emit(self, args[0], axis=axis + 1, reverse=reverse)], [True]

    def abstract_eval(self, x: Aval, *, axis: int, reverse: bool):
        if not 0 <= axis < x.ndim:
            raise ShapeError(f"{self.name}: axis {axis} is out of range for shape {x.shape}")
        if is_complex(x.dtype) and self.name in ("cummax", "cummin"):
            raise TypeError(f"{self.name}: complex numbers have no order that tracekern traces ({x.dtype})")
        return (x,)

    def impl(self, x, *, axis, reverse):
        fn = _NUMPY[self.name]   # (in the operand's dtype: np.cumsum alone would promote an int32 to int64)
        if not reverse:
            return fn(x, axis=axis, dtype=x.dtype)
        return np.flip(fn(np.flip(x, axis), axis=axis, dtype=x.dtype), axis)

    def vjp(self, cts, ins, outs, active, *, axis, reverse):
        (ct,), (x,), (out,) = cts, ins, outs
        back = not reverse   # a cotangent flows against the direction of the scan
        if self.name == "cumsum":
            return [ops.cumsum(ct, axis=axis, reverse=back)]
        if self.name == "cumprod":
            return [ops.holomorphic(lambda c: _cumprod_vjp(c, x, out, axis, reverse), ct, x)]
        return [_cum_extremum_vjp(ct, x, out, axis, reverse)]

    def jvp(self, tangents, ins, outs, *, axis, reverse):
        (t,), (x,), (out,) = tangents, ins, outs
        if self.name == "cumsum":
            return linear_jvp(self, tangents, ins, axis=axis, reverse=reverse)
        if self.name == "cumprod":
            return [_cumprod_jvp(t, x, out, axis, reverse)]
        return [ops.gather(t, _extremum_source(x, out, axis, reverse), axis=axis)]


def _iota(x, axis: int, reverse: bool):
    """Each element's position along the axis in the scan's order (int64, broadcast to x's shape)."""
    n = x.shape[axis]
    pos = np.arange(n, dtype=np.int64)[::-1] if reverse else np.arange(n, dtype=np.int64)
    shape = tuple(n if i == axis else 1 for i in range(x.ndim))
    return ops.broadcast_to(ops.constant(x, pos.reshape(shape)), shape=tuple(x.shape))


def _zero_marks(x, axis, reverse):
    """(before, first): whether no zero of x comes up to each element (in scan order), and whether
    the element is the first zero."""
    is_zero = ops.convert(ops.eq(x, ops.zeros_like(x)), dtype=np.int64)
    zeros_so_far = ops.cumsum(is_zero, axis=axis, reverse=reverse)
    before = ops.eq(zeros_so_far, ops.full_like(zeros_so_far, 0))
    first = ops.logical_and(ops.eq(is_zero, ops.full_like(is_zero, 1)), ops.eq(zeros_so_far, ops.full_like(zeros_so_far, 1)))
    return before, first


def _cumprod_vjp(ct, x, out, axis, reverse):
    """d out_j / d x_i = prod_{k <= j, k != i} x_k, exact with zeros in x: before the first zero it is
    out_j / x_i; at the first zero it is the running product with that zero taken as 1; after it, 0."""
    back = not reverse
    zero = ops.zeros_like(x)
    before, first = _zero_marks(x, axis, reverse)
    ones = ops.full_like(x, 1)
    a = ops.div(ops.cumsum(ops.mul(ct, out), axis=axis, reverse=back), ops.select(before, x, ones))
    skipped = ops.cumprod(ops.select(first, ones, x), axis=axis, reverse=reverse)
    b = ops.cumsum(ops.mul(ct, skipped), axis=axis, reverse=back)
    return ops.select(before, a, ops.select(first, b, zero))


def _cumprod_jvp(t, x, out, axis, reverse):
    """The same derivative, forwards: d out_j = out_j * sum_{i <= j} t_i / x_i before the first zero,
    and t_z times the running product with that zero (at z) taken as 1 from it on (0 after a second)."""
    zero = ops.zeros_like(x)
    before, first = _zero_marks(x, axis, reverse)
    ones = ops.full_like(x, 1)
    ratios = ops.cumsum(ops.select(before, ops.div(t, ops.select(before, x, ones)), zero), axis=axis, reverse=reverse)
    skipped = ops.cumprod(ops.select(first, ones, x), axis=axis, reverse=reverse)
    at_zero = ops.cumsum(ops.select(first, t, zero), axis=axis, reverse=reverse)
    return ops.select(before, ops.mul(out, ratios), ops.mul(at_zero, skipped))


def _extremum_source(x, out, axis, reverse):
    """The index (along the axis) of the element each output of a cummax or cummin takes its value
    from: the last element (in scan order) that set a new extremum up to it (a NaN sets one too)."""
    pos = _iota(x, axis, reverse)
    record = ops.logical_or(ops.eq(x, out), ops.ne(x, x))
    last = ops.cummax(ops.select(record, pos, ops.full_like(pos, -1)), axis=axis, reverse=reverse)
    if reverse:   # back from scan order to the index along the axis
        last = ops.sub(ops.full_like(last, x.shape[axis] - 1), last)
    return last


def _cum_extremum_vjp(ct, x, out, axis, reverse):
    """The cotangent of each output goes to the element it took its value from."""
    return ops.scatter(ops.zeros_like(x), _extremum_source(x, out, axis, reverse), ct, axis=axis, mode="add")


# (in the operand's dtype and order, as NumPy: float32 sums stay float32)
cumsum = Cumulative("cumsum", "({acc} + {x})")
cumprod = Cumulative("cumprod", "({acc} * {x})")
cummax = Cumulative("cummax", "{maximum}({acc}, {x})")
cummin = Cumulative("cummin", "{minimum}({acc}, {x})")
