"""Shape manipulation: reshape and transpose, the stack and split families, flip, roll, tile,
repeat, pad, diagonal, triangles.

Everything here is a view (index arithmetic in the consuming loop: reshape, transpose, broadcast,
slice, roll), a concatenation, or a gather whose indices are a constant table: `_rearrange` asks
NumPy itself to rearrange an array of element numbers (np.pad, np.insert, np.repeat...) and reads
the traced array through that table, so every NumPy rule (pad's modes, insert's broadcasting) holds
by construction."""
from __future__ import annotations

import builtins
import math
from collections.abc import Callable

import numpy as np

from ._core import (
    P,
    ShapeError,
    Tracer,
    _array,
    _axes,
    _axis,
    _cast,
    _dtype,
    _promote,
    _reject,
    _shape,
    _size,
    bind,
    with_location,
)
from .creation import full, zeros_like
from .ufuncs import astype, where


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if order not in ("C", "F", "A", "K"):
        raise ValueError(with_location(f"reshape: order must be one of 'C', 'F', 'A', 'K', got {order!r}"))
    a = _array(a, "reshape")
    shape = newshape if shape is None else shape
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if order == "F":   # Fortran order: the first index varies fastest (a traced array is C-ordered: "A" and "K" are "C")
        return transpose(reshape(transpose(a), tuple(reversed(shape))))
    size = math.prod(_shape(a))
    if shape.count(-1) > 1:
        raise ShapeError(with_location(f"reshape: can only specify one unknown dimension, got {shape}"))
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or size % known:
            raise ShapeError(with_location(f"reshape: cannot reshape an array of shape {_shape(a)} into shape {shape}"))
        shape = tuple(size // known if s == -1 else s for s in shape)
    if shape == _shape(a):
        return a
    return bind(P.reshape, a, new_shape=shape)


def ravel(a, order="C"):
    return reshape(a, -1, order)


def transpose(a, axes=None):
    a = _array(a, "transpose")
    ndim = len(_shape(a))
    perm = tuple(reversed(range(ndim))) if axes is None else tuple(int(x) % ndim if ndim else 0 for x in axes)
    if axes is not None and (len(perm) != ndim or sorted(perm) != list(range(ndim))):
        raise ShapeError(with_location(f"transpose: axes {tuple(axes)} do not match an array of shape {_shape(a)}"))
    if perm == tuple(range(ndim)):
        return a
    return bind(P.transpose, a, perm=perm)


def permute_dims(a, axes=None):
    return transpose(a, axes)


def swapaxes(a, axis1, axis2):
    ndim = len(_shape(a))
    i, j = _axis(axis1, ndim, "swapaxes"), _axis(axis2, ndim, "swapaxes")
    perm = list(range(ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def matrix_transpose(x, /):
    if len(_shape(x)) < 2:
        raise ShapeError(with_location(f"matrix_transpose: needs at least 2 dimensions, got shape {_shape(x)}"))
    return swapaxes(x, -1, -2)


def moveaxis(a, source, destination):
    ndim = len(_shape(a))
    src = [_axis(s, ndim, "moveaxis") for s in (source if isinstance(source, (tuple, list)) else (source,))]
    dst = [_axis(d, ndim, "moveaxis") for d in (destination if isinstance(destination, (tuple, list)) else (destination,))]
    if len(src) != len(dst):
        raise ShapeError(with_location("moveaxis: source and destination must have the same number of elements"))
    order = [i for i in range(ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def rollaxis(a, axis, start=0):
    ndim = len(_shape(a))
    axis = _axis(axis, ndim, "rollaxis")
    start = start + ndim if start < 0 else start
    if not 0 <= start <= ndim:
        raise ShapeError(with_location(f"rollaxis: start {start} is out of range for dimension {ndim}"))
    if axis < start:
        start -= 1
    return moveaxis(a, axis, start) if axis != start else a


def broadcast_to(array, shape, subok=False):
    array = _array(array, "broadcast_to")
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if _shape(array) == shape:
        return array
    return bind(P.broadcast_to, array, shape=shape)


def broadcast_arrays(*args, subok=False):
    args = [_array(a, "broadcast_arrays") for a in args]
    try:
        shape = tuple(np.broadcast_shapes(*[_shape(a) for a in args]))
    except ValueError:
        raise ShapeError(with_location("broadcast_arrays: shapes " + ", ".join(str(_shape(a)) for a in args)
                                       + " do not broadcast")) from None
    return tuple(broadcast_to(a, shape) for a in args)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    """Coordinate arrays as views: each vector reshaped along its own axis and broadcast."""
    if indexing not in ("xy", "ij"):
        raise ValueError(with_location("meshgrid: indexing must be 'xy' or 'ij'"))
    xs = [ravel(_array(x, "meshgrid")) for x in xi]
    n = len(xs)
    axes = list(range(n))
    if indexing == "xy" and n > 1:
        axes[0], axes[1] = 1, 0
    full_shape = [0] * n
    for x, ax in zip(xs, axes):
        full_shape[ax] = _shape(x)[0]
    out = []
    for x, ax in zip(xs, axes):
        y = reshape(x, tuple(-1 if i == ax else 1 for i in range(n)))
        out.append(y if sparse else broadcast_to(y, tuple(full_shape)))
    return tuple(out)


def expand_dims(a, axis):
    a = _array(a, "expand_dims")
    shape = _shape(a)
    axes = _axes(axis, len(shape) + (len(axis) if isinstance(axis, (tuple, list)) else 1), "expand_dims")
    it = iter(shape)
    new = tuple(1 if i in axes else next(it) for i in range(len(shape) + len(axes)))
    return bind(P.reshape, a, new_shape=new)


def squeeze(a, axis=None):
    a = _array(a, "squeeze")
    shape = _shape(a)
    axes = tuple(i for i, s in enumerate(shape) if s == 1) if axis is None else _axes(axis, len(shape), "squeeze")
    for i in axes:
        if shape[i] != 1:
            raise ShapeError(with_location(f"squeeze: cannot select axis {i} of shape {shape}: its size is not 1"))
    if not axes:
        return a
    return bind(P.reshape, a, new_shape=tuple(s for i, s in enumerate(shape) if i not in axes))


def _atleast(n: int, arys):
    out = []
    for a in arys:
        a = _array(a, f"atleast_{n}d")
        s = _shape(a)
        if len(s) < n:
            new = {1: (1,), 2: (1,) * (2 - len(s)) + s, 3: {0: (1, 1, 1), 1: (1,) + s + (1,), 2: s + (1,)}}
            a = reshape(a, new[n] if n < 3 else new[3][len(s)])
        out.append(a)
    return out[0] if len(out) == 1 else tuple(out)


def atleast_1d(*arys):
    return _atleast(1, arys)


def atleast_2d(*arys):
    return _atleast(2, arys)


def atleast_3d(*arys):
    return _atleast(3, arys)


def concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _reject("concatenate", out=out, casting=casting)
    arrays = [_array(x, "concatenate") for x in arrays]
    if not arrays:
        raise ValueError(with_location("concatenate: needs at least one array"))
    if axis is None:
        arrays, axis = [ravel(x) for x in arrays], 0
    if dtype is not None:
        arrays = [astype(x, dtype) for x in arrays]
    arrays = _promote("concatenate", *arrays)
    ndim = len(_shape(arrays[0]))
    for x in arrays:
        if len(_shape(x)) != ndim or ndim == 0:
            shapes = ", ".join(str(_shape(x)) for x in arrays)
            raise ShapeError(with_location(f"concatenate: all arrays need the same number (>0) of dimensions, got shapes {shapes}"))
    axis = _axis(axis, ndim, "concatenate")
    arrays = [x for x in arrays if _shape(x)[axis]] or arrays[:1]   # (empty pieces add nothing)
    if len(arrays) == 1:
        return arrays[0]
    return bind(P.concatenate, *arrays, axis=axis)


concat = concatenate


def stack(arrays, axis=0, out=None, dtype=None, casting=None):
    _reject("stack", out=out, casting=casting)
    arrays = [_array(x, "stack") for x in arrays]
    shapes = {_shape(x) for x in arrays}
    if len(shapes) != 1:
        raise ShapeError(with_location(f"stack: all arrays must have the same shape, got {sorted(shapes)}"))
    return concatenate([expand_dims(x, axis) for x in arrays], axis=axis, dtype=dtype)


def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([atleast_2d(x) for x in tup], axis=0, dtype=dtype)


row_stack = vstack


def hstack(tup, *, dtype=None, casting="same_kind"):
    arrs = [atleast_1d(x) for x in tup]
    return concatenate(arrs, axis=0 if arrs and len(_shape(arrs[0])) == 1 else 1, dtype=dtype)


def dstack(tup):
    return concatenate([atleast_3d(x) for x in tup], axis=2)


def column_stack(tup):
    cols = []
    for x in tup:
        x = _array(x, "column_stack")
        # (as NumPy: a 1-D array is a column, a 0-d one a 1 x 1 array)
        cols.append(reshape(x, (_size(x), 1)) if len(_shape(x)) < 2 else x)
    return concatenate(cols, axis=1)


def block(arrays):
    """np.block: nested lists, concatenated along the last axes first."""
    def depth(x):
        return 1 + depth(x[0]) if isinstance(x, list) else 0

    d = depth(arrays)

    def build(x, level):
        if not isinstance(x, list):
            x = _array(x, "block")
            nd = builtins.max(len(_shape(x)), d)
            return reshape(x, (1,) * (nd - len(_shape(x))) + _shape(x)) if len(_shape(x)) < nd else x
        parts = [build(p, level + 1) for p in x]
        return concatenate(parts, axis=-(d - level))

    return build(arrays, 0)


def append(arr, values, axis=None):
    arr, values = _array(arr, "append"), _array(values, "append")
    if axis is None:
        return concatenate([ravel(arr), ravel(values)], axis=0)
    return concatenate([arr, values], axis=axis)


def _pieces(ary, bounds: list[int], axis: int) -> list:
    shape = _shape(ary)
    out = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        index = tuple(slice(lo, hi) if i == axis else slice(None) for i in range(len(shape)))
        out.append(ary[index] if isinstance(ary, Tracer) else np.asarray(ary)[index])
    return out


def array_split(ary, indices_or_sections, axis=0):
    ary = _array(ary, "array_split")
    axis = _axis(axis, len(_shape(ary)), "array_split")
    n = _shape(ary)[axis]
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError(with_location("array_split: number of sections must be larger than 0"))
        each, extra = divmod(n, sections)
        sizes = [each + 1] * extra + [each] * (sections - extra)
        bounds = [0] + list(np.cumsum(sizes))
    else:
        bounds = [0] + [int(i) for i in indices_or_sections] + [n]   # (slice bounds, as NumPy uses them)
    return _pieces(ary, [int(b) for b in bounds], axis)


def split(ary, indices_or_sections, axis=0):
    ary = _array(ary, "split")
    if isinstance(indices_or_sections, (int, np.integer)):
        n = _shape(ary)[_axis(axis, len(_shape(ary)), "split")]
        if n % int(indices_or_sections):
            raise ValueError(with_location(f"split: an axis of {n} does not divide into {indices_or_sections} equal "
                                           "sections; use np.array_split"))
    return array_split(ary, indices_or_sections, axis)


def hsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=1 if len(_shape(ary)) > 1 else 0)


def vsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
    return split(ary, indices_or_sections, axis=2)


def unstack(x, /, *, axis=0):
    x = _array(x, "unstack")
    axis = _axis(axis, len(_shape(x)), "unstack")
    return tuple(squeeze(p, axis) for p in _pieces(x, list(range(_shape(x)[axis] + 1)), axis))


def flip(m, axis=None):
    """Reversed along the axes: a view (a slice with step -1)."""
    m = _array(m, "flip")
    nd = len(_shape(m))
    axes = _axes(axis, nd, "flip")
    if not axes:
        return m
    return m[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(nd))]


def fliplr(m):
    return flip(m, 1)


def flipud(m):
    return flip(m, 0)


def rot90(m, k=1, axes=(0, 1)):
    m = _array(m, "rot90")
    nd = len(_shape(m))
    a0, a1 = (_axis(a, nd, "rot90") for a in axes)
    if a0 == a1:
        raise ValueError(with_location("rot90: the two axes must differ"))
    k %= 4
    if k == 0:
        return m
    if k == 2:
        return flip(flip(m, a0), a1)
    perm = list(range(nd))
    perm[a0], perm[a1] = perm[a1], perm[a0]
    return transpose(flip(m, a1), perm) if k == 1 else flip(transpose(m, perm), a1)


def roll(a, shift, axis=None):
    """np.roll: a view whose index wraps around (no copy, no concatenation)."""
    a = _array(a, "roll")
    if axis is None:
        return reshape(roll(ravel(a), shift, 0), _shape(a))
    shifts = shift if isinstance(shift, (tuple, list)) else (shift,)
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    if len(shifts) == 1:
        shifts = shifts * len(axes)
    if len(axes) == 1 and len(shifts) > 1:
        axes = axes * len(shifts)
    if len(shifts) != len(axes):
        raise ValueError(with_location("roll: shift and axis must have the same length"))
    total: dict[int, int] = {}
    for s, ax in zip(shifts, axes):
        if isinstance(s, Tracer):
            raise TypeError(with_location("np.roll: the shift must be static (a Python int)"))
        ax = _axis(ax, len(_shape(a)), "roll")
        total[ax] = total.get(ax, 0) + int(s)
    for ax, s in total.items():
        n = _shape(a)[ax]
        if n and s % n:
            a = bind(P.roll, a, shift=s % n, axis=ax)
    return a


def tile(A, reps):
    """Index arithmetic: A broadcast along new interleaved axes and reshaped (a view)."""
    A = _array(A, "tile")
    reps = (int(reps),) if isinstance(reps, (int, np.integer)) else tuple(int(r) for r in reps)
    d = builtins.max(len(_shape(A)), len(reps))
    shape = (1,) * (d - len(_shape(A))) + _shape(A)
    reps = (1,) * (d - len(reps)) + reps
    x = reshape(A, tuple(v for s in shape for v in (1, s)))
    x = broadcast_to(x, tuple(v for r, s in zip(reps, shape) for v in (r, s)))
    return reshape(x, tuple(r * s for r, s in zip(reps, shape)))


def repeat(a, repeats, axis=None):
    a = _array(a, "repeat")
    if axis is None:
        a, axis = ravel(a), 0
    axis = _axis(axis, len(_shape(a)), "repeat")
    shape = _shape(a)
    if isinstance(repeats, Tracer):
        raise TypeError(with_location("np.repeat: repeats must be static (its output's length would depend on the data)"))
    reps = np.asarray(repeats)
    if reps.ndim == 0 or reps.size == 1:
        r = int(reps.reshape(-1)[0])
        x = reshape(a, shape[:axis + 1] + (1,) + shape[axis + 1:])
        x = broadcast_to(x, shape[:axis + 1] + (r,) + shape[axis + 1:])
        return reshape(x, shape[:axis] + (shape[axis] * r,) + shape[axis + 1:])
    return _rearrange(a, lambda labels: np.repeat(labels, reps, axis=axis), "repeat")


def _rearrange(x, rearranged: Callable[[np.ndarray], np.ndarray], fname: str, fill=None):
    """x read through a constant table: `rearranged` applied to x's element numbers says, for each
    output element, which element of x it is (negative: `fill`, an array of the output's shape)."""
    x = _array(x, fname)
    labels = np.asarray(rearranged(np.arange(math.prod(_shape(x)), dtype=np.int64).reshape(_shape(x))))
    flat = reshape(x, (math.prod(_shape(x)),))
    if labels.size and not math.prod(_shape(x)):
        return full(labels.shape, 0, _dtype(x)) if fill is None else fill
    gathered = bind(P.gather, flat, np.maximum(labels, 0).reshape(-1), axis=0) if labels.size else \
        full((0,), 0, _dtype(x))
    out = reshape(gathered, labels.shape)
    if fill is not None:
        out = where(labels < 0, fill, out)
    return out


def resize(a, new_shape):
    a = _array(a, "resize")
    new_shape = (int(new_shape),) if isinstance(new_shape, (int, np.integer)) else tuple(int(s) for s in new_shape)
    return _rearrange(a, lambda labels: np.resize(labels, new_shape), "resize")


def insert(arr, obj, values, axis=None):
    """np.insert with static positions (obj); values may be traced."""
    _static_positions(obj, "insert")
    arr = _array(arr, "insert")
    values = _cast(_array(values, "insert"), _dtype(arr))   # (NumPy's: the values take arr's dtype)
    n = math.prod(_shape(arr))
    labels_values = -1 - np.arange(math.prod(_shape(values)), dtype=np.int64).reshape(_shape(values))
    labels = np.insert(np.arange(n, dtype=np.int64).reshape(_shape(arr)), obj, labels_values, axis=axis)
    source = concatenate([ravel(arr), ravel(values)], axis=0)
    index = np.where(labels >= 0, labels, n - 1 - labels)
    return reshape(bind(P.gather, source, index.reshape(-1), axis=0), labels.shape) if labels.size else \
        full(labels.shape, 0, _dtype(arr))


def _static_positions(obj, fname: str) -> None:
    """np.insert's and np.delete's positions are static: the result's shape depends on them."""
    if isinstance(obj, Tracer) or (isinstance(obj, (list, tuple)) and any(isinstance(o, Tracer) for o in obj)):
        raise TypeError(with_location(
            f"np.{fname}: the positions (obj) must be static (Python ints, slices or NumPy arrays), not traced values: "
            "the result's shape depends on them. To place traced values at a traced position, use "
            "np.where(np.arange(n) == i, value, x) or tk.at(x)[i].set(value)"))


def delete(arr, obj, axis=None):
    _static_positions(obj, "delete")
    return _rearrange(arr, lambda labels: np.delete(labels, obj, axis=axis), "delete")


def pad(array, pad_width, mode="constant", **kwargs):
    """np.pad's constant, edge, wrap, reflect, symmetric and empty modes (a constant table of
    positions, NumPy's own np.pad of the element numbers)."""
    array = _array(array, "pad")
    if callable(mode) or mode not in ("constant", "empty", "edge", "wrap", "reflect", "symmetric"):
        raise NotImplementedError(with_location(
            f"np.pad: mode {mode!r} is not supported while tracing; supported: constant, empty, edge, wrap, reflect, "
            "symmetric"))
    if mode in ("constant", "empty"):
        cv = kwargs.get("constant_values", 0)
        if isinstance(cv, Tracer) or (isinstance(cv, (tuple, list)) and any(isinstance(v, Tracer) for v in np.ravel(
                np.asarray(cv, dtype=object)))):
            raise TypeError(with_location("np.pad: constant_values must be static"))
        fill = np.pad(np.zeros(_shape(array), _dtype(array)), pad_width, mode="constant", constant_values=cv)
        return _rearrange(array, lambda labels: np.pad(labels, pad_width, mode="constant", constant_values=-1), "pad",
                          fill=fill)
    if mode in ("reflect", "symmetric") and kwargs.get("reflect_type", "even") == "odd":
        np.pad(np.zeros(_shape(array), np.int8), pad_width, mode=mode, **kwargs)   # NumPy's checks (an empty axis)
        return _pad_odd(array, pad_width, include_edge=mode == "symmetric")
    return _rearrange(array, lambda labels: np.pad(labels, pad_width, mode=mode, **kwargs), "pad")


def _pad_odd(x, pad_width, include_edge: bool):
    """np.pad's reflect_type="odd" (2 * edge - the reflection: not a rearrangement), NumPy's own
    algorithm on traced slices: axis by axis, chunks of at most the array's length, each reflected
    about the current edge (so a pad wider than the array reflects its reflections, as NumPy's)."""
    nd = len(_shape(x))
    dtype = _dtype(x)
    probe = np.pad(np.zeros((1,) * nd), pad_width, mode="constant", constant_values=1)
    lefts = [int(i) for i in np.argwhere(probe == 0)[0]] if nd else []

    def cut(a, axis, lo, hi, step=1):   # a[lo:hi:step] along axis (lo, hi as slice.indices gives them)
        index = tuple((lo, hi, step) if d == axis else (0, s, 1) for d, s in enumerate(_shape(a)))
        return bind(P.slice_, a, index=index)

    for axis in range(nd):
        n = _shape(x)[axis]
        left, right = lefts[axis], probe.shape[axis] - 1 - lefts[axis]
        if not (left or right):
            continue
        if n == 1:   # NumPy's legacy: a length-1 axis is extended with its edge
            x = concatenate([x] * (left + 1 + right), axis=axis)
            continue
        while left > 0 or right > 0:
            length = _shape(x)[axis]
            if include_edge:
                old, off = length // n * n, 1
            else:
                old, off = (length - 1) // (n - 1) * (n - 1), 0
            if left > 0:
                c = builtins.min(old, left)
                chunk = flip(cut(x, axis, 1 - off, c - off + 1), axis)
                chunk = _cast(2 * cut(x, axis, 0, 1) - chunk, dtype)
                x = concatenate([chunk, x], axis=axis)
                left -= c
            if right > 0:
                length = _shape(x)[axis]
                c = builtins.min(old, right)
                chunk = flip(cut(x, axis, length - 1 + off - c, length - 1 + off), axis)
                chunk = _cast(2 * cut(x, axis, length - 1, length) - chunk, dtype)
                x = concatenate([x, chunk], axis=axis)
                right -= c
    return x


def diagonal(a, offset=0, axis1=0, axis2=1):
    """A view: the two axes moved last, flattened, and sliced with a stride of one row plus one."""
    a = _array(a, "diagonal")
    nd = len(_shape(a))
    if nd < 2:
        raise ShapeError(with_location(f"diagonal: needs at least 2 dimensions, got shape {_shape(a)}"))
    i, j = _axis(axis1, nd, "diagonal"), _axis(axis2, nd, "diagonal")
    if i == j:
        raise ValueError(with_location("diagonal: axis1 and axis2 cannot be the same"))
    x = moveaxis(a, (i, j), (-2, -1))
    *lead, n, m = _shape(x)
    lead = tuple(lead)
    k = builtins.max(0, builtins.min(n, m - offset) if offset >= 0 else builtins.min(n + offset, m))
    start = offset if offset >= 0 else -offset * m
    last = (start, start + (k - 1) * (m + 1) + 1, m + 1) if k else (0, 0, 1)
    return bind(P.slice_, reshape(x, lead + (n * m,)), index=tuple((0, s, 1) for s in lead) + (last,))


def diag(v, k=0):
    v = _array(v, "diag")
    s = _shape(v)
    if len(s) == 2:
        return diagonal(v, k)
    if len(s) != 1:
        raise ShapeError(with_location(f"diag: needs a 1-D or 2-D array, got shape {s}"))
    n = s[0]
    size = n + builtins.abs(k)
    start = k if k >= 0 else -k * size
    if n == 0:
        return full((size, size), 0, _dtype(v))
    flat = bind(P.unslice, v, shape=(size * size,), index=((start, start + (n - 1) * (size + 1) + 1, size + 1),))
    return reshape(flat, (size, size))


def diagflat(v, k=0):
    return diag(ravel(v), k)


def _triangle(m, k: int, lower: bool, fname: str):
    m = _array(m, fname)
    s = _shape(m)
    if not s:
        raise ShapeError(with_location(f"{fname}: needs at least 1 dimension, got a 0-d array"))
    # (NumPy's: the mask is np.tri(*shape[-2:]), so a 1-D vector of n broadcasts to an n x n matrix)
    keep = np.tri(*s[-2:], k=k, dtype=bool) if lower else ~np.tri(*s[-2:], k=k - 1, dtype=bool)
    return where(keep, m, zeros_like(m))


def tril(m, k=0):
    return _triangle(m, k, True, "tril")


def triu(m, k=0):
    return _triangle(m, k, False, "triu")


def copy(a, order="K", subok=False):
    return a


def tril_indices_from(arr, k=0):
    """Static index arrays (they depend on the shape only)."""
    return np.tril_indices_from(np.empty(_shape(arr)[-2:], bool), k)


def triu_indices_from(arr, k=0):
    return np.triu_indices_from(np.empty(_shape(arr)[-2:], bool), k)


def diag_indices_from(arr):
    return np.diag_indices_from(np.empty(_shape(arr), bool))


def shape(a):
    return _shape(a)


def ndim(a):
    return len(_shape(a))


def size(a, axis=None):
    s = _shape(a)
    return math.prod(s) if axis is None else s[axis]
