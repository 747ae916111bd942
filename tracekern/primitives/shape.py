"""Shape primitives: const, full, reshape, transpose, broadcast_to, slice, unslice, concatenate.

Indexing, expand_dims, squeeze and stack are built from these in tracekern.numpy. The "view"
primitives also give kernel renderers their index mapping: `view_index(idx, in_shape, **params)`
turns the index expressions of one output element into those of the operand element it reads.
unslice and concatenate are "pieces": `pieces(idx, in_shapes, **params)` says which operand (or a
zero) an output element is, under which condition on its index, and at which operand index."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import SUPPORTED_DTYPES, Aval
from . import lanes, ops
from .core import Primitive, no_operands


def broadcast_index(idx: list[str], in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[str]:
    """Index expressions into an operand of `in_shape` broadcast (NumPy rules) to `out_shape`."""
    lead = len(out_shape) - len(in_shape)
    return ["0" if s == 1 else idx[lead + k] for k, s in enumerate(in_shape)]


def _strides(shape) -> list[int]:
    out, acc = [], 1
    for s in reversed(shape):
        out.append(acc)
        acc *= s
    return out[::-1]


def _split_digits(digits: list, d: int) -> list | None:
    """Digits (expression, coefficient, extent) of a mixed-radix number, with d made a digit boundary:
    a digit whose range straddles d (c < d < c * n) is split into its high part (e // r, coefficient
    c * r = d) and its low part (e % r), r = d / c. None where d does not divide into it evenly."""
    out = []
    for e, c, n in digits:
        if c < d < c * n:
            if d % c or n % (d // c):
                return None
            r = d // c
            out += [(f"({e} // {r})", d, n // r), (f"({e} % {r})", c, r)]
        else:
            out.append((e, c, n))
    return out


def _mixed_radix_digit(digits: list, d: int, m: int) -> str | None:
    """(sum of e * c over the digits) // d % m without divisions where the radices line up (a reshape
    that splits or merges axes: (i1 * 9 + i2 * 3 + i3) // 9 % 200 is i1), or None (the general form
    then stands). Each digit's expression e lies in [0, n), n its extent."""
    split = _split_digits(digits, d)
    if split is None or sum(c * (n - 1) for _, c, n in split if c < d) >= d or any(c % d for _, c, _ in split if c >= d):
        return None
    high = _split_digits([(e, c // d, n) for e, c, n in split if c >= d], m)
    if high is None or any(c % m for _, c, _ in high if c >= m):
        return None
    kept = [(e, c, n) for e, c, n in high if c < m]
    if sum(c * (n - 1) for _, c, n in kept) >= m:
        return None
    terms = [e if c == 1 else f"{e} * {c}" for e, c, _ in kept]
    return terms[0] if len(terms) == 1 else (f"({' + '.join(terms)})" if terms else "0")


class Const(Primitive):
    """A constant array captured while tracing (NumPy arrays, Python and NumPy scalars)."""

    fusion = "const"

    batch = no_operands

    def abstract_eval(self, *, value: np.ndarray):
        return (Aval(value.shape, value.dtype),)

    def impl(self, *, value):
        return value


class Full(Primitive):
    """An array of `shape` filled with one scalar `value` (zeros_like, ones_like, full)."""

    fusion = "fill"

    batch = no_operands

    def abstract_eval(self, *, shape, dtype, value):
        if np.dtype(dtype) not in SUPPORTED_DTYPES:
            raise TypeError(f"full: dtype {dtype} is not supported")
        return (Aval(tuple(shape), np.dtype(dtype)),)

    def impl(self, *, shape, dtype, value):
        return np.full(shape, value, dtype=dtype)


class Reshape(Primitive):
    fusion = "view"
    linear = True

    def view_index(self, idx, in_shape, *, new_shape):
        if 0 in in_shape:   # an empty array: no element is read (and a zero extent must not divide)
            return ["0"] * len(in_shape)
        kept_out = [i for i, s in zip(idx, new_shape) if s != 1]
        if [s for s in in_shape if s != 1] == [s for s in new_shape if s != 1]:  # only size-1 axes move
            it = iter(kept_out)
            return ["0" if s == 1 else next(it) for s in in_shape]
        digits = [(i, st, n) for i, st, n in zip(idx, _strides(new_shape), new_shape) if n != 1 and i != "0"]
        flat = " + ".join(f"{i} * {st}" for i, st, _ in digits) or "0"
        out = []
        for s, st in zip(in_shape, _strides(in_shape)):
            simple = _mixed_radix_digit(digits, st, s) if s != 1 else "0"
            out.append(simple if simple is not None else f"((({flat}) // {st}) % {s})")
        return out

    def batch(self, args, batched, *, new_shape):
        return [ops.reshape(args[0], new_shape=(args[0].shape[0],) + tuple(new_shape))], [True]

    def abstract_eval(self, x: Aval, *, new_shape):
        new_shape = tuple(new_shape)
        if any(s < 0 for s in new_shape) or int(np.prod(new_shape, dtype=np.int64)) != x.size:
            raise ShapeError(f"reshape: cannot reshape an array of shape {x.shape} (size {x.size}) into shape {new_shape}")
        return (Aval(new_shape, x.dtype),)

    def impl(self, x, *, new_shape):
        return np.reshape(x, new_shape)

    def vjp(self, cts, ins, outs, active, *, new_shape):
        return [ops.reshape(cts[0], new_shape=tuple(ins[0].shape))]


class Transpose(Primitive):
    fusion = "view"
    linear = True

    def view_index(self, idx, in_shape, *, perm):
        out = [""] * len(perm)
        for k, p in enumerate(perm):
            out[p] = idx[k]
        return out

    def batch(self, args, batched, *, perm):
        return [ops.transpose(args[0], perm=(0,) + lanes.shift(perm))], [True]

    def abstract_eval(self, x: Aval, *, perm):
        if sorted(perm) != list(range(x.ndim)):
            raise ShapeError(f"transpose: axes {tuple(perm)} are not a permutation of the {x.ndim} axes of shape {x.shape}")
        return (Aval(tuple(x.shape[p] for p in perm), x.dtype),)

    def impl(self, x, *, perm):
        return np.transpose(x, perm)

    def vjp(self, cts, ins, outs, active, *, perm):
        return [ops.transpose(cts[0], perm=tuple(int(i) for i in np.argsort(perm)))]


class BroadcastTo(Primitive):
    fusion = "view"
    linear = True

    def view_index(self, idx, in_shape, *, shape):
        return broadcast_index(idx, in_shape, tuple(shape))

    def batch(self, args, batched, *, shape):
        x = lanes.with_lane_ndim(args[0], len(shape))
        return [ops.broadcast_to(x, shape=(x.shape[0],) + tuple(shape))], [True]

    def abstract_eval(self, x: Aval, *, shape):
        shape = tuple(shape)
        lead = len(shape) - x.ndim
        if lead < 0 or any(s != 1 and s != shape[lead + i] for i, s in enumerate(x.shape)):
            raise ShapeError(f"broadcast_to: cannot broadcast an array of shape {x.shape} to shape {shape}")
        return (Aval(shape, x.dtype),)

    def impl(self, x, *, shape):
        return np.broadcast_to(x, shape)

    def vjp(self, cts, ins, outs, active, *, shape):
        return [ops.unbroadcast(cts[0], tuple(ins[0].shape))]


def _slice_shape(shape, index):
    return tuple(len(range(start, stop, step)) for (start, stop, step) in index)


def _py_slices(index):
    # (start, stop, step) as normalised by slice.indices: a negative stop means "past the front"
    return tuple(slice(a, b if b >= 0 else None, c) for a, b, c in index)


class Slice(Primitive):
    """x[start:stop:step, ...] with static, normalised (start, stop, step) for every axis."""

    fusion = "view"
    linear = True

    def view_index(self, idx, in_shape, *, index):
        out = []
        for i, (start, _, step) in zip(idx, index):
            term = i if step == 1 else f"({step} * {i})"
            out.append(term if start == 0 else f"({start} + {term})")
        return out

    def batch(self, args, batched, *, index):
        return [ops.slice_(args[0], index=((0, args[0].shape[0], 1),) + tuple(index))], [True]

    def abstract_eval(self, x: Aval, *, index):
        if len(index) != x.ndim:
            raise ShapeError(f"slice: {len(index)} index entries for an array of shape {x.shape}")
        return (Aval(_slice_shape(x.shape, index), x.dtype),)

    def impl(self, x, *, index):
        return x[_py_slices(index)]

    def vjp(self, cts, ins, outs, active, *, index):
        return [ops.unslice(cts[0], shape=tuple(ins[0].shape), index=index)]


def _clamped(expr: str, n: int) -> str:
    """An operand index that stays in range where its piece is not taken (the read happens anyway)."""
    return f"min(max({expr}, 0), {n - 1})"


class Unslice(Primitive):
    """The transpose of slice: zeros of `shape` with the operand written at `index`."""

    fusion = "pieces"

    def pieces(self, idx, in_shapes, *, shape, index):
        """[(condition, 0, operand index), (None, None, None)]: the operand where the index is one the
        slice takes, else zero."""
        n_in = in_shapes[0]
        if 0 in n_in:
            return [(None, None, None)]
        conds, src = [], []
        for i, (start, _, step), n, full in zip(idx, index, n_in, shape):
            if start == 0 and step == 1 and n == full:
                src.append(i)
                continue
            # rel: the distance from the window's first element in the direction of the step (>= 0 inside)
            if step > 0:
                rel, lo, hi = (i if start == 0 else f"({i} - {start})"), start, start + (n - 1) * step
            else:
                rel, lo, hi = f"({start} - {i})", start + (n - 1) * step, start
            stride = abs(step)
            conds.append(f"{lo} <= {i} <= {hi}" + ("" if stride == 1 else f" and {rel} % {stride} == 0"))
            src.append(_clamped(rel if stride == 1 else f"{rel} // {stride}", n))
        if not conds:
            return [(None, 0, src)]
        return [(" and ".join(f"({c})" for c in conds), 0, src), (None, None, None)]

    linear = True

    def batch(self, args, batched, *, shape, index):
        n = args[0].shape[0]
        return [ops.unslice(args[0], shape=(n,) + tuple(shape), index=((0, n, 1),) + tuple(index))], [True]

    def abstract_eval(self, x: Aval, *, shape, index):
        if _slice_shape(shape, index) != x.shape:
            raise ShapeError(f"unslice: operand shape {x.shape} does not match slice {index} of {shape}")
        return (Aval(tuple(shape), x.dtype),)

    def impl(self, x, *, shape, index):
        out = np.zeros(shape, x.dtype)
        out[_py_slices(index)] = x
        return out

    def vjp(self, cts, ins, outs, active, *, shape, index):
        return [ops.slice_(cts[0], index=index)]


class Concatenate(Primitive):
    fusion = "pieces"

    def pieces(self, idx, in_shapes, *, axis):
        """Operand k where the index along `axis` falls in its part (the last one: otherwise)."""
        parts, offset, i = [], 0, idx[axis]
        for k, shape in enumerate(in_shapes):
            n = shape[axis]
            if n:
                src = list(idx)
                src[axis] = _clamped(i if offset == 0 else f"({i} - {offset})", n)
                parts.append((f"{i} < {offset + n}", k, src))
            offset += n
        if not parts:   # (every operand empty along the axis: so is the result)
            return [(None, None, None)]
        parts[-1] = (None,) + parts[-1][1:]
        return parts

    linear = True

    def batch(self, args, batched, *, axis):
        return [ops.concatenate(*lanes.all_batched(args, batched), axis=axis + 1)], [True]

    def abstract_eval(self, *xs: Aval, axis):
        if not xs:
            raise ShapeError("concatenate: needs at least one array")
        first = xs[0]
        for x in xs[1:]:
            if x.dtype != first.dtype:
                raise TypeError(f"concatenate: dtypes differ ({first.dtype}, {x.dtype})")
            if x.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis):
                shapes = ", ".join(str(v.shape) for v in xs)
                raise ShapeError(f"concatenate: shapes {shapes} differ outside axis {axis}")
        if not 0 <= axis < first.ndim:
            raise ShapeError(f"concatenate: axis {axis} is out of range for shape {first.shape}")
        shape = list(first.shape)
        shape[axis] = sum(x.shape[axis] for x in xs)
        return (Aval(tuple(shape), first.dtype),)

    def impl(self, *xs, axis):
        return np.concatenate(xs, axis=axis)

    def vjp(self, cts, ins, outs, active, *, axis):
        result, start = [], 0
        for x, act in zip(ins, active):
            n = x.shape[axis]
            if act:
                index = tuple((start, start + n, 1) if i == axis else (0, s, 1) for i, s in enumerate(outs[0].shape))
                result.append(ops.slice_(cts[0], index=index))
            else:
                result.append(None)
            start += n
        return result


const = Const("const")
full = Full("full")
reshape = Reshape("reshape")
transpose = Transpose("transpose")
broadcast_to = BroadcastTo("broadcast_to")
slice_ = Slice("slice")
unslice = Unslice("unslice")
concatenate = Concatenate("concatenate")


# -- issue 19: np.roll as a view (index arithmetic, never a copy) ------------------------------------------


class Roll(Primitive):
    """roll(x, shift, axis): out[..., i, ...] = x[..., (i - shift) mod n, ...]; 0 <= shift < n."""

    fusion = "view"
    linear = True

    def view_index(self, idx, in_shape, *, shift, axis):
        out = list(idx)
        n = in_shape[axis]
        out[axis] = f"(({idx[axis]} + {n - shift}) % {n})"
        return out

    def batch(self, args, batched, *, shift, axis):
        return [ops.roll(args[0], shift=shift, axis=axis + 1)], [True]

    def abstract_eval(self, x: Aval, *, shift, axis):
        if not 0 <= axis < x.ndim or not 0 <= shift < max(x.shape[axis], 1):
            raise ShapeError(f"roll: shift {shift} along axis {axis} does not fit shape {x.shape}")
        return (x,)

    def impl(self, x, *, shift, axis):
        return np.roll(x, shift, axis)

    def vjp(self, cts, ins, outs, active, *, shift, axis):
        n = ins[0].shape[axis]
        return [ops.roll(cts[0], shift=(n - shift) % n, axis=axis) if shift else cts[0]]


roll = Roll("roll")
