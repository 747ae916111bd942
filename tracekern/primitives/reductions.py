"""Reductions over static axes: sum, max, min, prod (keepdims is handled by the API layer).

`axes` is a sorted tuple of non-negative axis numbers; the reduced axes are dropped."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval, is_complex
from . import lanes, ops
from .core import Primitive


class Reduce(Primitive):
    """`combine` is the scalar rule renderers accumulate with ({acc}, {x} and the math functions of
    Elementwise.scalar); `identity` is the start value."""

    fusion = "reduce"

    def __init__(self, name: str, np_fn, has_identity: bool, combine: str, identity: str):
        super().__init__(name)
        self.np_fn = np_fn
        self.has_identity = has_identity
        self.combine = combine
        self.identity = identity  # "0", "1", "-inf", "+inf" (the dtype's lowest/highest for integers)

    def batch(self, args, batched, *, axes):
        return [ops.emit(self, args[0], axes=lanes.shift(axes))], [True]

    def abstract_eval(self, x: Aval, *, axes: tuple[int, ...]):
        if tuple(sorted(set(axes))) != tuple(axes) or any(not 0 <= a < x.ndim for a in axes):
            raise ShapeError(f"{self.name}: axes {axes} are not valid sorted axes of an array of shape {x.shape}")
        if not self.has_identity and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"{self.name}: zero-size reduction over axes {axes} of shape {x.shape} has no identity")
        return (Aval(tuple(s for i, s in enumerate(x.shape) if i not in axes), x.dtype),)

    def impl(self, x, *, axes):
        if self.has_identity:   # (sum, prod: in the operand's dtype; np.sum alone would promote an int32 to int64)
            return self.np_fn(x, axis=axes, dtype=x.dtype)
        return self.np_fn(x, axis=axes)


class ReduceSum(Reduce):
    linear = True

    def vjp(self, cts, ins, outs, active, *, axes):
        return [ops.expand(cts[0], ins[0].shape, axes)]


class ReduceMinMax(Reduce):
    """The cotangent goes to the positions equal to the extremum, shared equally between ties."""

    def abstract_eval(self, x: Aval, *, axes: tuple[int, ...]):
        if is_complex(x.dtype):
            raise TypeError(f"{self.name}: complex numbers have no order that tracekern traces ({x.dtype}); NumPy's "
                            "is lexicographic. Reduce np.abs(z) or z.real instead")
        return super().abstract_eval(x, axes=axes)

    def vjp(self, cts, ins, outs, active, *, axes):
        x = ins[0]
        return [ops.mul(_extremum_weights(x, outs[0], axes), ops.expand(cts[0], x.shape, axes))]

    def jvp(self, tangents, ins, outs, *, axes):
        return [ops.reduce_sum(ops.mul(_extremum_weights(ins[0], outs[0], axes), tangents[0]), axes=axes)]


class ReduceProd(Reduce):
    """d prod / d x_i = product of the other entries, computed without dividing by zero."""

    def vjp(self, cts, ins, outs, active, *, axes):
        x = ins[0]
        # (holomorphic: for complex values, the conjugate derivative)
        return [ops.holomorphic(lambda ct: ops.mul(_other_entries(x, axes), ops.expand(ct, x.shape, axes)), cts[0], x)]

    def jvp(self, tangents, ins, outs, *, axes):
        return [ops.reduce_sum(ops.mul(_other_entries(ins[0], axes), tangents[0]), axes=axes)]


# d out = (sum over the axes of) weights * d x for min, max and prod: the VJP multiplies the expanded
# cotangent by the weights, the JVP sums the weighted tangent


def _extremum_weights(x, out, axes):
    """1 / (number of ties) where x equals the extremum, 0 elsewhere."""
    mask = ops.convert(ops.eq(x, ops.expand(out, x.shape, axes)), dtype=x.dtype)
    return ops.div(mask, ops.expand(ops.reduce_sum(mask, axes=axes), x.shape, axes))


def _other_entries(x, axes):
    """The product of the other entries of each one's slice, without dividing by zero, and with the right
    derivative (so second derivatives are exact at zeros too): the product of the slice's nonzero entries
    other than x_i, times the product of its zeros other than x_i, which is 1 where there is none and, to
    first order, that zero's value where there is one (0 with the derivative 1; two or more: 0, derivative 0)."""
    is_zero = ops.eq(x, ops.full_like(x, 0, shape=()))
    ones, zeros = ops.full_like(x, 1), ops.zeros_like(x)
    nonzero = ops.select(is_zero, ones, x)
    nonzero_prod = ops.expand(ops.reduce_prod(nonzero, axes=axes), x.shape, axes)
    zero_values = ops.select(is_zero, x, zeros)   # (0, but a function of x: its derivative flows)
    count = ops.convert(is_zero, dtype=np.int64)
    others = ops.sub(ops.expand(ops.reduce_sum(count, axes=axes), x.shape, axes), count)   # other zeros in the slice
    other_zero = ops.sub(ops.expand(ops.reduce_sum(zero_values, axes=axes), x.shape, axes), zero_values)
    zeros_prod = ops.select(ops.eq(others, ops.full_like(others, 0)), ones,
                            ops.select(ops.eq(others, ops.full_like(others, 1)), other_zero, zeros))
    return ops.mul(ops.div(nonzero_prod, nonzero), zeros_prod)


reduce_sum = ReduceSum("reduce_sum", np.sum, has_identity=True, combine="{radd}({acc}, {x})", identity="0")
reduce_max = ReduceMinMax("reduce_max", np.max, has_identity=False, combine="{maximum}({acc}, {x})", identity="-inf")
reduce_min = ReduceMinMax("reduce_min", np.min, has_identity=False, combine="{minimum}({acc}, {x})", identity="+inf")
reduce_prod = ReduceProd("reduce_prod", np.prod, has_identity=True, combine="{rmul}({acc}, {x})", identity="1")
