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
import warnings
from collections.abc import Callable

import numpy as np

from ..trace import ArrayOps
from ._core import (
    P,
    ShapeError,
    Tracer,
    _array,
    _axes,
    _axis,
    _cast,
    _dtype,
    _holds_tracer,
    _promote,
    _reject,
    _shape,
    _size,
    bind,
    with_location,
)
from .creation import full, linspace, zeros_like
from .ufuncs import astype, where
from .ufuncs import round as round_


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if order not in ("C", "F", "A"):
        if order == "K":   # (NumPy's own rule: 'K' is ravel's, not reshape's)
            raise ValueError(with_location("reshape: order 'K' is not permitted for reshaping (NumPy's rule); "
                                           "write order='C' or order='F'"))
        raise ValueError(with_location(f"reshape: order must be one of 'C', 'F', 'A', got {order!r}"))
    original, a = a, _array(a, "reshape")
    shape = newshape if shape is None else shape
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if order == "A" and isinstance(original, np.ndarray):   # (tk.numpy on a NumPy array: its layout is known)
        order = "F" if original.flags.f_contiguous and not original.flags.c_contiguous else "C"
    if order == "A":
        shape = _reshape_shape(a, shape)
        _layout_free(a, "reshape", "A", shape)
    if order == "F":   # Fortran order: the first index varies fastest
        return transpose(reshape(transpose(a), tuple(reversed(shape))))
    shape = _reshape_shape(a, shape)
    if shape == _shape(a):
        return a
    return bind(P.reshape, a, new_shape=shape)


def _reshape_shape(a, shape: tuple) -> tuple:
    """The target shape with its -1 resolved (NumPy's checks)."""
    size = math.prod(_shape(a))
    if shape.count(-1) > 1:
        raise ShapeError(with_location(f"reshape: can only specify one unknown dimension, got {shape}"))
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or size % known:
            raise ShapeError(with_location(f"reshape: cannot reshape an array of shape {_shape(a)} into shape {shape}"))
        shape = tuple(size // known if s == -1 else s for s in shape)
    return shape


def _layout_free(a, fname: str, order: str, shape: tuple = ()) -> None:
    """order='A' (and ravel's 'K') read the array in its memory order: Fortran's for a Fortran-contiguous
    array (x.T of a C array, np.asfortranarray(x), a ufunc of either), C's otherwise. A traced value has no
    memory layout, so these orders are traced only where C's and Fortran's readings agree: an array (and,
    for reshape, a target shape) with at most one axis longer than 1, or a reshape that only adds or removes
    axes of length 1 (x.reshape(x.shape, order='A')). Elsewhere a clear error, never C's
    reading where NumPy's may be Fortran's."""
    def line(s):
        return builtins.sum(1 for n in s if n != 1) <= 1 or 0 in s

    def long_axes(s):
        return [n for n in s if n != 1]
    if line(_shape(a)) and line(shape):
        return
    if fname == "reshape" and long_axes(_shape(a)) == long_axes(shape):   # (only axes of length 1 added or removed:
        return                                                           # every order reads the same elements)
    raise NotImplementedError(with_location(
        f"np.{fname}(order={order!r}) of an array of shape {_shape(a)}: NumPy reads the array in its memory order "
        "(Fortran's for x.T of a C array or np.asfortranarray(x), C's for a C-contiguous array), and a traced value "
        "has no memory layout. Write order='C' (NumPy's result for a C-contiguous array) or order='F'"))


def ravel(a, order="C"):
    if order in ("A", "K") and isinstance(a, np.ndarray):   # (tk.numpy on a NumPy array: NumPy's own reading)
        a, order = np.ravel(a, order), "C"
    if order in ("A", "K"):
        a = _array(a, "ravel")
        _layout_free(a, "ravel", order)
        order = "C"
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

    def axes(x, name):   # (NumPy's normalize_axis_tuple: an int, or a sequence of them, a NumPy array too)
        x = x.tolist() if isinstance(x, np.ndarray) else x
        out = [_axis(i, ndim, "moveaxis") for i in (x if isinstance(x, (tuple, list)) else (x,))]
        if len(set(out)) != len(out):
            raise ShapeError(with_location(f"moveaxis: repeated axis in `{name}` argument {x}"))
        return out

    src, dst = axes(source, "source"), axes(destination, "destination")
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
    if isinstance(axis, list):   # (NumPy's squeeze takes an int or a tuple)
        raise TypeError(with_location(f"np.squeeze: axis must be an int or a tuple of ints (NumPy's rule), got the "
                                      f"list {axis}; write tuple(axis)"))
    if not shape and axis is not None and not isinstance(axis, tuple) and axis in (0, -1):
        return a   # (NumPy's: squeeze(0-d, axis=0) or axis=-1 is the 0-d array itself)
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


def concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _reject("concatenate", out=out)
    arrays = [_array(x, "concatenate") for x in arrays]
    if not arrays:
        raise ValueError(with_location("concatenate: needs at least one array"))
    if axis is None:
        arrays, axis = [ravel(x) for x in arrays], 0
    _check_casting(arrays, dtype, casting)
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


def _check_casting(arrays: list, dtype, casting: str) -> None:
    """NumPy's casting= of the joins: each array must cast to the result's dtype (dtype=, or the arrays'
    common one) under the rule; NumPy's TypeError otherwise (float64 into dtype=int32 under 'same_kind')."""
    if casting not in ("no", "equiv", "safe", "same_kind", "unsafe"):
        raise ValueError(with_location(f"casting must be one of 'no', 'equiv', 'safe', 'same_kind', 'unsafe' "
                                       f"(got {casting!r})"))
    target = np.dtype(dtype) if dtype is not None else _dtype(_promote("concatenate", *arrays)[0])
    for x in arrays:
        if not np.can_cast(_dtype(x), target, casting):
            raise TypeError(with_location(f"Cannot cast array data from dtype('{_dtype(x)}') to dtype('{target}') "
                                          f"according to the rule '{casting}'"))


def stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    _reject("stack", out=out)
    arrays = [_array(x, "stack") for x in arrays]
    shapes = {_shape(x) for x in arrays}
    if len(shapes) != 1:
        raise ShapeError(with_location(f"stack: all arrays must have the same shape, got {sorted(shapes)}"))
    return concatenate([expand_dims(x, axis) for x in arrays], axis=axis, dtype=dtype, casting=casting)


def vstack(tup, *, dtype=None, casting="same_kind"):
    return concatenate([atleast_2d(x) for x in tup], axis=0, dtype=dtype, casting=casting)


row_stack = vstack


def hstack(tup, *, dtype=None, casting="same_kind"):
    arrs = [atleast_1d(x) for x in tup]
    return concatenate(arrs, axis=0 if arrs and len(_shape(arrs[0])) == 1 else 1, dtype=dtype, casting=casting)


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
    """np.block: nested lists, concatenated along the last axes first. NumPy's checks (the depth of every
    list the same), and NumPy's rank: every array is raised to the largest of the nesting depth and
    the arrays' own ranks before any concatenation."""
    leaves = []

    def depth(x, index):
        if isinstance(x, list):
            if not x:
                raise ValueError(with_location(f"List at arrays{''.join(f'[{i}]' for i in index)} cannot be empty"))
            depths = [depth(p, index + [i]) for i, p in enumerate(x)]
            for d, at in depths:
                if d != depths[0][0]:
                    raise ValueError(with_location(
                        f"List depths are mismatched. First element was at depth {depths[0][0]}, but there is an "
                        f"element at depth {d} (arrays{''.join(f'[{j}]' for j in at)})"))
            return depths[0]
        leaves.append(_array(x, "block"))
        return len(index), index

    d = depth(arrays, [])[0]
    nd = builtins.max([d] + [len(_shape(x)) for x in leaves])
    it = iter(leaves)

    def build(x, level):
        if not isinstance(x, list):
            x = next(it)
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


def _sections(indices_or_sections) -> bool:
    """NumPy's test: a number of sections is what has no len() (2, 2.0, np.array(2)), and is int()'d;
    anything with a len() is a list of split points."""
    if isinstance(indices_or_sections, Tracer):
        raise TypeError(with_location("np.split: indices_or_sections must be static (the pieces' shapes depend on it)"))
    try:
        len(indices_or_sections)
    except TypeError:
        return True
    return False


def array_split(ary, indices_or_sections, axis=0):
    ary = _array(ary, "array_split")
    axis = _axis(axis, len(_shape(ary)), "array_split")
    n = _shape(ary)[axis]
    if _sections(indices_or_sections):
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
    if _sections(indices_or_sections):
        n = _shape(ary)[_axis(axis, len(_shape(ary)), "split")]
        if n % indices_or_sections:
            raise ValueError(with_location(f"split: an axis of {n} does not divide into {indices_or_sections} equal "
                                           "sections; use np.array_split"))
    return array_split(ary, indices_or_sections, axis)


def _least_ndim(ary, n: int, fname: str):
    ary = _array(ary, fname)
    if len(_shape(ary)) < n:
        raise ShapeError(with_location(f"np.{fname} only works on arrays of {n} or more dimensions (NumPy's rule), "
                                       f"got shape {_shape(ary)}"))
    return ary


def hsplit(ary, indices_or_sections):
    ary = _least_ndim(ary, 1, "hsplit")
    return split(ary, indices_or_sections, axis=1 if len(_shape(ary)) > 1 else 0)


def vsplit(ary, indices_or_sections):
    return split(_least_ndim(ary, 2, "vsplit"), indices_or_sections, axis=0)


def dsplit(ary, indices_or_sections):
    return split(_least_ndim(ary, 3, "dsplit"), indices_or_sections, axis=2)


def unstack(x, /, *, axis=0):
    x = _array(x, "unstack")
    axis = _axis(axis, len(_shape(x)), "unstack")
    return tuple(squeeze(p, axis) for p in _pieces(x, list(range(_shape(x)[axis] + 1)), axis))


def flip(m, axis=None):
    """Reversed along the axes: a view (a slice with step -1)."""
    m = _array(m, "flip")
    nd = len(_shape(m))
    axes = _axes(axis.tolist() if isinstance(axis, np.ndarray) else axis, nd, "flip")   # (NumPy's: an array of axes)
    if not axes:
        return m
    return m[tuple(slice(None, None, -1) if i in axes else slice(None) for i in range(nd))]


def fliplr(m):
    return flip(_least_ndim(m, 2, "fliplr"), 1)


def flipud(m):
    return flip(_least_ndim(m, 1, "flipud"), 0)


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
    if _holds_tracer(shift) or _holds_tracer(axis):
        raise TypeError(with_location("np.roll: the shift and axis must be static (Python ints or NumPy arrays)"))
    try:   # (NumPy's rule: shift and axis broadcast against each other)
        pairs = np.broadcast(shift, axis)
    except ValueError:
        raise ValueError(with_location(f"np.roll: shift {shift!r} and axis {axis!r} cannot be broadcast together "
                                       "(NumPy's rule)")) from None
    if pairs.ndim > 1:
        raise ValueError(with_location("np.roll: 'shift' and 'axis' should be scalars or 1D sequences"))
    total: dict[int, int] = {}
    for s, ax in pairs:
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
    if builtins.any(r < 0 for r in reps):
        raise ValueError(with_location(f"np.tile: negative dimensions are not allowed (NumPy's rule), got reps {reps}"))
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
    if not reps.size:   # (np.repeat(x, [], axis) of an empty axis: a list of no counts, integers)
        reps = reps.astype(np.intp)
    if reps.size and reps.min() < 0:
        raise ValueError(with_location(f"np.repeat: repeats may not be negative, got {repeats!r}"))
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
    """np.pad. The constant, edge, wrap, reflect, symmetric and empty modes are a constant table of
    positions (NumPy's own np.pad of the element numbers); reflect_type='odd', linear_ramp, the
    statistics (maximum, minimum, mean, median) and traced constant_values follow NumPy's algorithm
    on traced slices: axis by axis, each axis's pad computed from the array already padded along the
    axes before it (so the corners are NumPy's)."""
    array = _array(array, "pad")
    if callable(mode) or mode not in _PAD_MODES:
        raise NotImplementedError(with_location(
            f"np.pad: mode {mode!r} is not supported while tracing; supported: {', '.join(_PAD_MODES)} "
            "(a callable mode runs Python on each 1-D slice's values)"))
    values = {k: v for k, v in kwargs.items() if k in ("constant_values", "end_values")}
    # NumPy's checks (pad_width, unsupported keywords, an empty axis, stat_length 0), on a stand-in of zeros
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe = np.pad(np.zeros(_shape(array), np.float64), pad_width, mode=mode,
                       **{**kwargs, **{k: 0 for k in values}})
    if mode == "constant" and _holds_tracer(values.get("constant_values", 0)):
        return _pad_by_axis(array, pad_width,
                            lambda x, axis, widths, pair: [_fill(pair[0], x, axis, widths[0]),
                                                           _fill(pair[1], x, axis, widths[1])],
                            _as_pairs(values["constant_values"], len(_shape(array))))
    if mode in ("constant", "empty"):
        cv = kwargs.get("constant_values", 0)
        fill = np.pad(np.zeros(_shape(array), _dtype(array)), pad_width, mode="constant", constant_values=cv)
        return _rearrange(array, lambda labels: np.pad(labels, pad_width, mode="constant", constant_values=-1), "pad",
                          fill=fill)
    if not math.prod(_shape(array)):   # (NumPy's: only an axis that is not empty was padded: nothing to read)
        return full(probe.shape, 0, _dtype(array))
    if mode in ("reflect", "symmetric") and kwargs.get("reflect_type", "even") == "odd":
        return _pad_odd(array, pad_width, include_edge=mode == "symmetric")
    if mode == "linear_ramp":
        return _pad_by_axis(array, pad_width, _linear_ramps,
                            _as_pairs(kwargs.get("end_values", 0), len(_shape(array))))
    if mode in ("maximum", "minimum", "mean", "median"):
        lengths = kwargs.get("stat_length")   # (NumPy's _as_pairs(as_index=True): rounded to integers)
        lengths = _as_pairs(None if lengths is None else np.round(lengths).astype(np.intp), len(_shape(array)))
        return _pad_by_axis(array, pad_width,
                            lambda x, axis, widths, pair: _stats(x, axis, widths, pair, mode), lengths)
    return _rearrange(array, lambda labels: np.pad(labels, pad_width, mode=mode, **kwargs), "pad")


_PAD_MODES = ("constant", "empty", "edge", "wrap", "reflect", "symmetric", "linear_ramp", "maximum", "minimum",
              "mean", "median")


def _as_pairs(x, ndim: int):
    """NumPy's _as_pairs: a (before, after) pair of values per axis, from a scalar, a pair, or one pair per
    axis; traced values (or lists holding them) are indexed, not converted."""
    if x is None:
        return ((None, None),) * ndim
    if _holds_tracer(x) and not isinstance(x, Tracer):
        x = stack([_array(e, "pad") if not isinstance(e, (tuple, list)) else stack([_array(f, "pad") for f in e])
                   for e in x])
    traced_ = isinstance(x, Tracer)
    if not traced_:
        x = np.asarray(x)
    shape = _shape(x)
    size = math.prod(shape)
    if len(shape) < 3 and size in (1, 2) and shape != (2, 1):
        x = reshape(x, (size,)) if traced_ else x.reshape(size)
        return ((x[0], x[-1]),) * ndim
    x = broadcast_to(x, (ndim, 2)) if traced_ else np.broadcast_to(x, (ndim, 2))
    return tuple((x[i, 0], x[i, 1]) for i in range(ndim))


def _pad_widths(nd: int, pad_width) -> list[tuple[int, int]]:
    """(before, after) for each of nd axes, as np.pad reads pad_width (its own checks and rounding, by padding a
    single element and finding it)."""
    probe = np.pad(np.zeros((1,) * nd), pad_width, mode="constant", constant_values=1)
    lefts = [int(i) for i in np.argwhere(probe == 0)[0]] if nd else []
    return [(left, probe.shape[axis] - 1 - left) for axis, left in enumerate(lefts)]


def _pad_by_axis(x, pad_width, sides: Callable, pairs):
    """Pads axis after axis as NumPy does: `sides(x, axis, (left, right), pairs[axis])` gives the two pieces
    to put on either side of x, the array padded along the axes before `axis`."""
    dtype = _dtype(x)
    for axis, widths in enumerate(_pad_widths(len(_shape(x)), pad_width)):
        if not builtins.any(widths):
            continue
        left, right = sides(x, axis, widths, pairs[axis])
        x = concatenate([_cast(left, dtype), x, _cast(right, dtype)], axis=axis)
    return x


def _fill(value, x, axis: int, width: int):
    """`value` (a scalar, traced or not) over the pad area of `width` along `axis`."""
    shape = _shape(x)[:axis] + (width,) + _shape(x)[axis + 1:]
    v = _array(value, "pad")
    if isinstance(value, Tracer) and _dtype(v) != _dtype(x):
        v = astype(v, _dtype(x))
    return broadcast_to(v, shape)


def _linear_ramps(x, axis: int, widths: tuple, pair):
    """NumPy's _get_linear_ramps: np.linspace from each end value to the edge, endpoint excluded, in x's dtype."""
    n = _shape(x)[axis]
    ramps = []
    for side, (end, width) in enumerate(zip(pair, widths)):
        index = tuple((slice(0, 1) if side == 0 else slice(n - 1, n)) if d == axis else slice(None)
                      for d in range(len(_shape(x))))
        edge = squeeze(x[index], axis)
        ramps.append(linspace(end, edge, width, endpoint=False, dtype=_dtype(x), axis=axis))
    return ramps[0], flip(ramps[1], axis)


def _stats(x, axis: int, widths: tuple, lengths, mode: str):
    """NumPy's _get_stats: the statistic of the stat_length values nearest each side (all of them by
    default), rounded where x's dtype is an integer; repeated over the pad area."""
    tnp = ArrayOps.numpy   # (tk.numpy: its reductions and median import this module)
    func = {"maximum": tnp.max, "minimum": tnp.min, "mean": tnp.mean, "median": tnp.median}[mode]
    n = _shape(x)[axis]
    out = []
    for side, (length, width) in enumerate(zip(lengths, widths)):
        length = n if length is None or int(length) > n else int(length)
        lo, hi = (0, length) if side == 0 else (n - length, n)
        chunk = x[tuple(slice(lo, hi) if d == axis else slice(None) for d in range(len(_shape(x))))]
        if length == 0:   # (mean and median of no values: NaN, as NumPy's; maximum and minimum raised above)
            stat = full(_shape(chunk)[:axis] + (1,) + _shape(chunk)[axis + 1:], np.nan, _dtype(tnp.mean(chunk)))
        else:
            stat = func(chunk, axis=axis, keepdims=True)
        if np.issubdtype(_dtype(x), np.integer):
            stat = round_(stat)
        shape = _shape(x)[:axis] + (width,) + _shape(x)[axis + 1:]
        out.append(broadcast_to(stat, shape))
    return out


def _pad_odd(x, pad_width, include_edge: bool):
    """np.pad's reflect_type="odd" (2 * edge - the reflection: not a rearrangement), NumPy's own
    algorithm on traced slices: axis by axis, chunks of at most the array's length, each reflected
    about the current edge (so a pad wider than the array reflects its reflections, as NumPy's)."""
    dtype = _dtype(x)

    def cut(a, axis, lo, hi, step=1):   # a[lo:hi:step] along axis (lo, hi as slice.indices gives them)
        index = tuple((lo, hi, step) if d == axis else (0, s, 1) for d, s in enumerate(_shape(a)))
        return bind(P.slice_, a, index=index)

    for axis, (left, right) in enumerate(_pad_widths(len(_shape(x)), pad_width)):
        n = _shape(x)[axis]
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
