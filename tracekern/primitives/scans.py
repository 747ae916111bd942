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


def _zero_parts(x, axis, reverse):
    """(is_zero, nonzero, running, zeros_so_far, zero_sum, mask): x's zeros, x with its zeros taken as 1, the
    running product of that, the count of zeros up to each element (in scan order), the running sum of the
    zeros' values (0, but a function of x, so that derivatives flow through it), and mask(m), the elements
    with m zeros up to them. d out_j / d x_i = prod_{k <= j, k != i} x_k is running_j / nonzero_i times the
    product of the zeros up to j other than x_i: 1 where there is none, and (to first order, which makes the
    second derivatives exact) the value of the one there is, 0 where there are more."""
    is_zero = ops.eq(x, ops.zeros_like(x))
    nonzero = ops.select(is_zero, ops.full_like(x, 1), x)
    running = ops.cumprod(nonzero, axis=axis, reverse=reverse)
    zeros_so_far = ops.cumsum(ops.convert(is_zero, dtype=np.int64), axis=axis, reverse=reverse)
    zero_sum = ops.cumsum(ops.select(is_zero, x, ops.zeros_like(x)), axis=axis, reverse=reverse)

    def mask(m):
        return ops.eq(zeros_so_far, ops.full_like(zeros_so_far, m))
    return is_zero, nonzero, running, zero_sum, mask


def _cumprod_vjp(ct, x, out, axis, reverse):
    """g_i = sum_{j >= i} ct_j d out_j / d x_i (see _zero_parts), exact with zeros in x, to second order."""
    back = not reverse
    is_zero, nonzero, running, zero_sum, mask = _zero_parts(x, axis, reverse)
    one, zero = ops.full_like(x, 1), ops.zeros_like(x)
    w = ops.mul(ct, running)

    def suffix(m, weight):   # sum over j >= i (in scan order) of w_j * weight_j where j has m zeros up to it
        return ops.cumsum(ops.select(mask(m), ops.mul(w, weight), zero), axis=axis, reverse=back)
    # x_i nonzero: the zeros up to j are the others; x_i zero: one of them is x_i itself
    at_nonzero = ops.add(suffix(0, one), suffix(1, zero_sum))
    at_zero = ops.add(suffix(1, one), ops.sub(suffix(2, zero_sum), ops.mul(x, suffix(2, one))))
    return ops.select(is_zero, at_zero, ops.div(at_nonzero, nonzero))


def _cumprod_jvp(t, x, out, axis, reverse):
    """The same derivative, forwards: d out_j = sum_{i <= j} t_i d out_j / d x_i."""
    is_zero, nonzero, running, zero_sum, mask = _zero_parts(x, axis, reverse)
    zero = ops.zeros_like(x)

    def prefix(v):
        return ops.cumsum(v, axis=axis, reverse=reverse)
    ratios = prefix(ops.select(is_zero, zero, ops.div(t, nonzero)))   # the nonzero x_i
    at_zeros = prefix(ops.select(is_zero, t, zero))                     # the zero x_i
    weighted = prefix(ops.select(is_zero, ops.mul(t, x), zero))
    d = ops.select(mask(0), ratios, ops.select(mask(1), ops.add(ops.mul(zero_sum, ratios), at_zeros),
                                               ops.select(mask(2), ops.sub(ops.mul(zero_sum, at_zeros), weighted), zero)))
    return ops.mul(running, d)


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
