"""Indexing: basic (views), integer-array and static boolean (gathers), np.take, take_along_axis,
choose, select, compress, extract, piecewise; and the functional update tk.at(x)[idx].set(v) /
.add / .multiply / .min / .max (scatters; JAX's x.at[idx]).

NumPy's rules hold: a single advanced index replaces its axis by the index's shape; several are
broadcast together and their dimensions go where the first one was when they are adjacent, else
first. Constant indices are checked against the bounds at trace time (IndexError, as NumPy);
traced ones count negatives from the end and are clamped to the axis (a kernel never reads
outside its operand). A traced boolean mask would give a data-dependent shape: it is an error,
except in tk.at(x)[mask] with a scalar value, which is np.where."""
from __future__ import annotations

import builtins
import math

import numpy as np

from ._core import (
    P,
    ShapeError,
    Tracer,
    _array,
    _axis,
    _cast,
    _check_operand,
    _dtype,
    _holds_tracer,
    _result_dtype,
    _shape,
    bind,
    with_location,
)
from .reductions import argmax
from .shapes import broadcast_to, moveaxis, ravel, reshape
from .ufuncs import (
    add,
    equal,
    less,
    maximum,
    minimum,
    multiply,
    stop_gradient,
    where,
)


def _is_array_index(it) -> bool:
    """An index array: an array, or a list or tuple inside the index (NumPy's: x[..., (1, 3)] is x[..., [1, 3]])."""
    return isinstance(it, (Tracer, np.ndarray, list, tuple))


def _basic(shape: tuple[int, ...], idx: tuple):
    """Static basic indexing: (index: (start, stop, step) per axis, the shape with integer-indexed axes
    kept as 1 and no new axes, the result's shape)."""
    for it in idx:
        if not (it is None or it is Ellipsis or isinstance(it, (slice, int, np.integer))) or isinstance(it, (bool, np.bool_)):
            raise IndexError(with_location(
                f"only integers, slices (`:`), ellipsis (`...`), numpy.newaxis (`None`) and integer or boolean arrays "
                f"are valid indices (got {it!r} of type {type(it).__name__})"))
    if builtins.sum(it is Ellipsis for it in idx) > 1:
        raise IndexError(with_location("an index can only have a single ellipsis ('...')"))
    n_real = builtins.sum(1 for it in idx if it is not None and it is not Ellipsis)
    if n_real > len(shape):
        raise IndexError(with_location(f"too many indices: {n_real} for an array of shape {shape}"))
    fill = (slice(None),) * (len(shape) - n_real)
    if any(it is Ellipsis for it in idx):
        k = [i for i, it in enumerate(idx) if it is Ellipsis][0]
        idx = idx[:k] + fill + idx[k + 1:]
    else:
        idx = idx + fill
    index, kept, out_shape, dim = [], [], [], 0
    for it in idx:
        if it is None:
            out_shape.append(1)
            continue
        size_ = shape[dim]
        if isinstance(it, slice):
            start, stop, step = it.indices(size_)
            n = len(range(start, stop, step))
            index.append((start, stop, step) if n else (0, 0, 1))
            out_shape.append(n)
            kept.append(n)
        else:
            i = int(it)
            if not -size_ <= i < size_:
                raise IndexError(with_location(f"index {i} is out of bounds for axis {dim} with size {size_}"))
            i %= size_
            index.append((i, i + 1, 1))
            kept.append(1)
        dim += 1
    return tuple(index), tuple(kept), tuple(out_shape)


def _basic_getitem(x, idx: tuple):
    shape = _shape(x)
    index, kept, out_shape = _basic(shape, idx)
    y = x
    if any(ix != (0, s, 1) for ix, s in zip(index, shape)):
        y = bind(P.slice_, x, index=index)
    if _shape(y) != out_shape:
        y = bind(P.reshape, y, new_shape=out_shape)
    return y


def _normalized(i, n: int, axis: int, mode: str = "raise"):
    """Indices into an axis of n, in range: constants are checked (mode "raise", NumPy's IndexError),
    wrapped or clipped; traced ones wrapped, clipped, or (mode "raise") counted from the end and
    clamped."""
    if mode not in ("raise", "wrap", "clip"):
        raise ValueError(with_location(f"clipmode must be one of 'clip', 'raise', or 'wrap' (got {mode!r})"))
    if isinstance(i, Tracer):
        if i.dtype.kind not in "iu":
            raise IndexError(with_location(f"arrays used as indices must be of integer (or boolean) type, got {i.dtype}"))
        i = _cast(i, np.int64)
        if mode == "wrap":
            return bind(P.remainder, i, np.asarray(n, np.int64))
        i = where(less(i, 0), add(i, n), i) if mode == "raise" else i
        return minimum(maximum(i, 0), builtins.max(n - 1, 0))
    i = np.asarray(i)
    if i.dtype.kind not in "iu":
        if i.size == 0:
            i = i.astype(np.int64)
        else:
            raise IndexError(with_location(f"arrays used as indices must be of integer (or boolean) type, got {i.dtype}"))
    i = i.astype(np.int64)
    if mode == "wrap":
        return np.mod(i, n) if n else i
    if mode == "clip":
        return np.clip(i, 0, builtins.max(n - 1, 0))
    bad = (i < -n) | (i >= n)
    if bad.any():
        raise IndexError(with_location(f"index {int(i[bad].reshape(-1)[0])} is out of bounds for axis {axis} with size {n}"))
    return np.where(i < 0, i + n, i)


def _take_axis(y, idx, axis: int):
    """y with `axis` replaced by idx's dimensions: y[:, ..., idx, ...] (a gather; idx in range)."""
    shape = _shape(y)
    pre, n, post = shape[:axis], shape[axis], shape[axis + 1:]
    ishape = _shape(idx)
    k = math.prod(ishape)
    if k and n == 0:
        raise IndexError(with_location(f"cannot index axis {axis} of size 0 (shape {shape})"))
    if k == 0:
        return bind(P.full, shape=pre + ishape + post, dtype=_dtype(y), value=np.asarray(0, _dtype(y)).item())
    flat = reshape(idx, (1,) * len(pre) + (k,) + (1,) * len(post))
    full_idx = broadcast_to(flat, pre + (k,) + post)
    return reshape(bind(P.gather, y, full_idx, axis=axis), pre + ishape + post)


def _mask_entry(it):
    """A constant boolean mask of the index, as ("mask", it); a traced one is an error."""
    if isinstance(it, Tracer):
        raise IndexError(with_location(
            f"indexing with a traced boolean mask ({it.aval}) gives a data-dependent shape, which cannot be "
            "traced. Use np.where(mask, x, 0) to zero the rest, np.sum(np.where(mask, x, 0)) to reduce the "
            "selection, or tk.at(x)[mask].set(value) to update it"))
    return ("mask", np.asarray(it))


def _expand(x, idx: tuple):
    """The index without booleans, None or Ellipsis: (x with new size-1 axes, one entry per axis: int,
    slice or int array). A static boolean mask becomes its np.nonzero index arrays, checked against the
    axes it covers (IndexError, as NumPy); a 0-d one (True, np.array(False)) is a new axis of length 1
    indexed by [0] or [], as NumPy reads it."""
    shape = _shape(x)
    entries = []
    for it in idx:
        if isinstance(it, (list, tuple)):
            it = _array(it, "indexing")   # (traced values in it: stacked)
        if isinstance(it, (bool, np.bool_)) or isinstance(it, (Tracer, np.ndarray)) and _dtype(it) == np.bool_:
            entries.append(_mask_entry(it))
            continue
        entries.append(it)
    consumed = builtins.sum(e[1].ndim if isinstance(e, tuple) else 1 for e in entries
                            if e is not None and e is not Ellipsis)
    if consumed > len(shape):
        raise IndexError(with_location(f"too many indices: {consumed} for an array of shape {shape}"))
    if builtins.sum(e is Ellipsis for e in entries) > 1:
        raise IndexError(with_location("an index can only have a single ellipsis ('...')"))
    if any(e is Ellipsis for e in entries):
        k = next(i for i, e in enumerate(entries) if e is Ellipsis)   # (not .index: an array == Ellipsis is an array)
        entries = entries[:k] + [slice(None)] * (len(shape) - consumed) + entries[k + 1:]
    else:
        entries = entries + [slice(None)] * (len(shape) - consumed)
    new_shape, out, dim = [], [], 0
    for e in entries:
        if e is None:
            new_shape.append(1)
            out.append(slice(None))
            continue
        if isinstance(e, tuple):
            mask = e[1]
            if mask.ndim == 0:
                new_shape.append(1)
                out.append(np.arange(int(bool(mask)), dtype=np.int64))
                continue
            for k, (n, m) in enumerate(zip(shape[dim:], mask.shape)):
                if n != m:
                    raise IndexError(with_location(
                        f"boolean index did not match indexed array along axis {dim + k}; size of axis is {n} but "
                        f"size of corresponding boolean axis is {m}"))
            new_shape.extend(shape[dim:dim + mask.ndim])
            out.extend(np.nonzero(mask))
            dim += mask.ndim
            continue
        new_shape.append(shape[dim])
        dim += 1
        out.append(e)
    if tuple(new_shape) != shape:
        x = reshape(x, tuple(new_shape))
    return x, out


def _advanced(x, idx: tuple):
    x, entries = _expand(x, idx)
    arrays = [k for k, e in enumerate(entries) if _is_array_index(e) or isinstance(e, (int, np.integer))]
    # slices first (views), keeping every axis
    index = tuple(slice(None) if k in arrays else e for k, e in enumerate(entries))
    y = _basic_getitem(x, index)
    yshape = _shape(y)
    idxs = [_normalized(entries[k], yshape[k], k) for k in arrays]
    try:
        bshape = tuple(np.broadcast_shapes(*[_shape(i) for i in idxs]))
    except ValueError:
        raise IndexError(with_location("shape mismatch: indexing arrays could not be broadcast together with shapes "
                                       + " ".join(str(_shape(i)) for i in idxs))) from None
    if len(arrays) == 1:
        return _take_axis(y, idxs[0], arrays[0])
    lead = tuple(range(len(arrays)))
    yt = moveaxis(y, arrays, lead)
    sizes = [yshape[k] for k in arrays]
    rest = _shape(yt)[len(arrays):]
    linear = None
    for i, stride in zip(idxs, np.cumprod([1] + sizes[:0:-1])[::-1]):
        term = multiply(i, int(stride)) if stride != 1 else i
        linear = term if linear is None else add(linear, term)
    linear = broadcast_to(linear, bshape) if _shape(linear) != bshape else linear
    out = _take_axis(reshape(yt, (math.prod(sizes),) + rest), linear, 0)
    if arrays == list(range(arrays[0], arrays[0] + len(arrays))) and arrays[0]:   # adjacent: where the first was
        out = moveaxis(out, tuple(range(len(bshape))), tuple(range(arrays[0], arrays[0] + len(bshape))))
    return out


def getitem(x, idx):
    """x[idx]: basic indexing is a view; integer arrays (traced or not) and constant boolean masks
    gather, with NumPy's rules for where the index dimensions go."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    if any(_is_array_index(it) or isinstance(it, (bool, np.bool_)) for it in idx):
        return _advanced(x, idx)
    return _basic_getitem(x, idx)


def take(a, indices, axis=None, out=None, mode="raise"):
    if out is not None:
        raise TypeError(with_location("np.take(..., out=...) cannot write into a traced array"))
    a = _array(a, "take")
    if axis is None:
        a, axis = ravel(a), 0
    axis = _axis(axis, len(_shape(a)), "take")
    indices = _array(indices, "take") if isinstance(indices, (list, tuple)) else \
        np.asarray(indices) if isinstance(indices, (int, np.integer)) else indices
    if _dtype(indices) == np.bool_:   # (NumPy's take casts them: True is 1)
        indices = _cast(indices, np.int64)
    return _take_axis(a, _normalized(indices, _shape(a)[axis], axis, mode), axis)


def take_along_axis(arr, indices, axis=-1):
    arr = _array(arr, "take_along_axis")
    indices = _array(indices, "take_along_axis") if isinstance(indices, list) else indices
    if axis is None:
        arr, axis = ravel(arr), 0
    nd = len(_shape(arr))
    axis = _axis(axis, nd, "take_along_axis")
    if len(_shape(indices)) != nd:
        raise ShapeError(with_location(f"take_along_axis: indices of shape {_shape(indices)} need the array's "
                                       f"{nd} dimensions (shape {_shape(arr)})"))
    off = [s for k, s in enumerate(_shape(arr)) if k != axis]
    ioff = [s for k, s in enumerate(_shape(indices)) if k != axis]
    try:
        both = list(np.broadcast_shapes(tuple(off), tuple(ioff)))
    except ValueError:
        raise ShapeError(with_location(f"take_along_axis: shapes {_shape(arr)} and {_shape(indices)} do not broadcast "
                                       f"off axis {axis}")) from None
    n, m = _shape(arr)[axis], _shape(indices)[axis]
    arr = broadcast_to(arr, tuple(both[:axis] + [n] + both[axis:]))
    idx = _normalized(indices, n, axis)
    idx = broadcast_to(idx, tuple(both[:axis] + [m] + both[axis:]))
    if math.prod(_shape(idx)) and n == 0:
        raise IndexError(with_location(f"take_along_axis: cannot index axis {axis} of size 0"))
    if not math.prod(_shape(idx)):
        return bind(P.full, shape=_shape(idx), dtype=_dtype(arr), value=np.asarray(0, _dtype(arr)).item())
    return bind(P.gather, arr, idx, axis=axis)


def choose(a, choices, out=None, mode="raise"):
    if out is not None:
        raise TypeError(with_location("np.choose(..., out=...) cannot write into a traced array"))
    choices = [_array(c, "choose") for c in choices]
    n = len(choices)
    a = _array(a, "choose")
    if not isinstance(a, Tracer):
        a = np.asarray(a)
        if a.dtype == np.bool_:
            a = a.astype(np.int64)
        if mode == "raise" and a.dtype.kind in "iu" and ((a < 0) | (a >= n)).any():   # (no negatives, unlike take)
            raise ValueError(with_location(f"invalid entry in choice array: np.choose(a, choices) with mode='raise' "
                                           f"needs 0 <= a < {n} (the number of choices)"))
    a = _normalized(a, n, 0, mode)
    result = choices[-1]
    for k in range(n - 2, -1, -1):
        result = where(equal(a, k), choices[k], result)
    return broadcast_to(result, tuple(np.broadcast_shapes(_shape(a), *[_shape(c) for c in choices])))


def select(condlist, choicelist, default=0):
    """NumPy's select: the dtype of all the choices and the default (Python numbers weak, as NumPy's
    NEP 50 reading), the first condition that holds wins; the conditions must be booleans."""
    if len(condlist) != len(choicelist):
        raise ValueError(with_location("select: list of cases must be same length as list of conditions"))
    if len(condlist) == 0:
        raise ValueError(with_location("select with an empty condition list is not possible"))
    weak = lambda v: v if type(v) in (int, float, complex) else _array(v, "select")   # noqa: E731
    choicelist = [weak(c) for c in choicelist]
    default = weak(default)
    dtype = _result_dtype("select", *choicelist, default)
    condlist = [_array(c, "select") for c in condlist]
    for k, cond in enumerate(condlist):
        if _dtype(cond) != np.bool_:
            raise TypeError(with_location(f"invalid entry {k} in condlist: should be boolean ndarray (it is "
                                          f"{_dtype(cond)}; compare it, as cond != 0)"))
    result = _cast(default, dtype)
    for cond, choice in reversed(list(zip(condlist, choicelist))):
        result = where(cond, _cast(choice, dtype), result)
    shape = tuple(np.broadcast_shapes(*[_shape(c) for c in condlist], *[_shape(c) for c in choicelist], _shape(default)))
    return broadcast_to(result, shape)


def compress(condition, a, axis=None, out=None):
    if isinstance(condition, Tracer):
        raise TypeError(with_location("np.compress with a traced condition gives a data-dependent shape; use "
                                      "np.where(condition, a, 0) instead"))
    condition = np.asarray(condition)
    if condition.ndim != 1:   # (np.nonzero of a 2-D one would give its row numbers)
        raise ValueError(with_location(f"condition must be a 1-d array (np.compress got one of shape {condition.shape})"))
    return take(a, np.nonzero(condition)[0], axis=axis)


def extract(condition, arr):
    if isinstance(condition, Tracer):
        raise TypeError(with_location("np.extract with a traced condition gives a data-dependent shape; use "
                                      "np.where(condition, arr, 0) instead"))
    return take(ravel(arr), np.nonzero(np.ravel(np.asarray(condition)))[0])


def piecewise(x, condlist, funclist, *args, **kw):
    """Each function evaluated on all of x and selected where its condition holds (later conditions
    win, as in NumPy); the functions must be elementwise. Where its condition does not hold, a function
    reads instead an element where it does (NumPy calls it on x[cond] only): a value outside its domain
    there (np.sqrt of a negative x) would make a NaN derivative, which 0 times it keeps. Elsewhere the
    result is 0, as NumPy's (x * 0 was NaN at inf)."""
    x = _array(x, "piecewise")
    if isinstance(condlist, (Tracer, np.ndarray)) and _dtype(condlist) == np.bool_ and len(_shape(condlist)) == len(_shape(x)):
        condlist = [condlist]
    condlist = list(condlist)
    n = len(condlist)
    if len(funclist) == n + 1:   # the last function applies where no condition holds
        some = _cast(condlist[0], np.bool_)
        for c in condlist[1:]:
            some = bind(P.logical_or, some, _cast(c, np.bool_))
        condlist = condlist + [bind(P.logical_not, some)]
    elif len(funclist) != n:
        raise ValueError(with_location(f"piecewise: {n} conditions need {n} or {n + 1} functions, got {len(funclist)}"))
    y = bind(P.full, shape=_shape(x), dtype=_dtype(x), value=np.asarray(0, _dtype(x)).item())
    for cond, f in zip(condlist, funclist):
        val = f(_where_it_holds(x, cond), *args, **kw) if callable(f) else f
        y = where(cond, val, y)
    return _cast(y, _dtype(x))


def _where_it_holds(x, cond):
    """x, with the elements where cond does not hold replaced by the first one where it does (a constant
    to differentiation; where it holds nowhere, x's first element, whose derivatives are dropped too)."""
    if not _shape(x):
        return x
    c = broadcast_to(_cast(_array(cond, "piecewise"), np.bool_), _shape(x))
    if not isinstance(c, Tracer):
        c = np.asarray(c)
        if c.all():
            return x
        first = int(np.argmax(c.ravel()))
    else:
        first = argmax(ravel(c))
    return where(c, x, getitem(ravel(stop_gradient(x)), first))   # (no derivative of these stand-ins reaches x)


# ----------------------------------------------------------------------------- tk.at


def _scatter_axis(x, idx, updates, axis: int, mode: str):
    """x with updates (shaped like x[:, ..., idx, ...]) combined in along axis at idx."""
    shape = _shape(x)
    pre, post = shape[:axis], shape[axis + 1:]
    ishape = _shape(idx)
    k = math.prod(ishape)
    if k == 0:
        return x
    flat_idx = broadcast_to(reshape(idx, (1,) * len(pre) + (k,) + (1,) * len(post)), pre + (k,) + post)
    upd = reshape(updates, pre + (k,) + post)
    return bind(P.scatter, x, flat_idx, upd, axis=axis, mode=mode)


def _combine(x, v, mode: str):
    return {"set": lambda: v, "add": lambda: add(x, v), "mul": lambda: multiply(x, v),
            "min": lambda: minimum(x, v), "max": lambda: maximum(x, v)}[mode]()


def _update(x, idx, values, mode: str):
    x = _array(x, "tk.at")
    dtype = _dtype(x)
    idx = idx if isinstance(idx, tuple) else (idx,)
    values = _cast(_array(values, "tk.at"), dtype)
    shape = _shape(x)
    # a traced boolean mask with one value: np.where
    if len(idx) == 1 and isinstance(idx[0], Tracer) and idx[0].dtype == np.bool_:
        mask = idx[0]
        if _shape(values) != ():
            raise IndexError(with_location("tk.at(x)[mask] with a traced mask takes a single value (a scalar): the "
                                           "number of selected elements is not known while tracing"))
        if _shape(mask) != shape[:len(_shape(mask))]:
            raise IndexError(with_location(f"tk.at: a mask of shape {_shape(mask)} does not fit an array of shape {shape}"))
        mask = reshape(mask, _shape(mask) + (1,) * (len(shape) - len(_shape(mask))))
        return where(mask, _combine(x, values, mode), x)
    if not any(_is_array_index(it) or isinstance(it, (bool, np.bool_)) for it in idx):   # basic: an unslice and a select
        index, kept, out_shape = _basic(shape, idx)
        region = reshape(broadcast_to(values, out_shape), kept)
        whole = all(k == n and (step > 0 or n <= 1) for (_, _, step), k, n in zip(index, kept, shape))   # (x[::-1]: no)
        placed = region if whole else bind(P.unslice, region, shape=shape, index=index)
        mask = np.zeros(shape, bool)
        mask[tuple(slice(a, b if b >= 0 else None, c) for a, b, c in index)] = True
        return where(mask, _combine(x, placed, mode), x)
    entries = [_array(e, "tk.at") if isinstance(e, (list, tuple)) else e for e in idx]
    arrays = [k for k, e in enumerate(entries) if _is_array_index(e)]
    single = (len(arrays) == 1 and len(entries) <= len(shape) and _dtype(entries[arrays[0]]) != np.bool_
              and all(isinstance(e, slice) and e == slice(None) for k, e in enumerate(entries) if k != arrays[0]))
    if single:   # x[..., idx, ...] with full slices elsewhere: a scatter along that axis, parallel across the others
        axis = arrays[0]
        i = _normalized(entries[axis], shape[axis], axis)
        target = shape[:axis] + _shape(i) + shape[axis + 1:]
        return _scatter_axis(x, i, broadcast_to(values, target), axis, mode)
    # in general: the flat positions of the selected elements (x's element numbers, indexed the same way)
    # (with traced indices, from iota, which kernels compute from their loop indices: not a constant of x's size)
    traced = _holds_tracer(idx)
    labels = getitem(bind(P.iota, shape=shape) if traced else np.arange(math.prod(shape), dtype=np.int64).reshape(shape), idx)
    target = _shape(labels)
    flat = reshape(x, (math.prod(shape),))
    k = math.prod(target)
    if k == 0:
        return x
    out = bind(P.scatter, flat, reshape(labels, (k,)), reshape(broadcast_to(values, target), (k,)), axis=0, mode=mode)
    return reshape(out, shape)


class _IndexUpdate:
    """tk.at(x)[idx]: the functional updates of the selected elements, each returning a new array."""

    def __init__(self, x, idx):
        self.x, self.idx = x, idx

    def get(self):
        return getitem(self.x, self.idx)

    def set(self, values):   # noqa: A003
        """x with the selected elements replaced (of repeated indices, the last value wins)."""
        return _update(self.x, self.idx, values, "set")

    def add(self, values):
        """x with values added at the selection; repeated indices accumulate (np.add.at)."""
        return _update(self.x, self.idx, values, "add")

    def multiply(self, values):
        return _update(self.x, self.idx, values, "mul")

    def min(self, values):   # noqa: A003
        return _update(self.x, self.idx, values, "min")

    def max(self, values):   # noqa: A003
        return _update(self.x, self.idx, values, "max")


class at:   # noqa: N801 (tk.at(x)[idx].set(v), like JAX's x.at[idx].set(v))
    """Functional indexed updates: tk.at(x)[idx].set(v), .add(v), .multiply(v), .min(v), .max(v), .get().
    Each returns a new array; gradients flow to x and to v. Works on traced values and on NumPy arrays."""

    def __init__(self, x):
        _check_operand(x if not isinstance(x, list) else np.asarray(x), "tk.at")
        self.x = x

    def __getitem__(self, idx) -> _IndexUpdate:
        return _IndexUpdate(self.x, idx)


def ix_(*args):
    """np.ix_: each 1-D sequence reshaped to its own axis of an open mesh (a boolean one becomes its
    np.nonzero, so it must be a constant), for x[np.ix_(i, j)] with traced i and j."""
    out = []
    for k, a in enumerate(args):
        a = _array(a, "ix_")
        if not isinstance(a, Tracer):
            a = np.asarray(a)
            if a.size == 0:
                a = a.astype(np.intp)
        if len(_shape(a)) != 1:
            raise ValueError(with_location("Cross index must be 1 dimensional"))
        if _dtype(a) == np.bool_:
            if isinstance(a, Tracer):
                raise IndexError(with_location(f"np.ix_ of a traced boolean array ({a.aval}) gives a data-dependent "
                                               "shape, which cannot be traced: pass its positions as a constant"))
            a = np.nonzero(a)[0]
        out.append(reshape(a, (1,) * k + (_shape(a)[0],) + (1,) * (len(args) - k - 1)))
    return tuple(out)


def unravel_index(indices, shape, order="C"):
    """The coordinates of flat indices: (i // stride) % size per axis."""
    if order != "C":
        raise NotImplementedError(with_location("np.unravel_index: only order='C' is supported while tracing"))
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    i = _array(indices, "unravel_index")
    strides = np.cumprod((1,) + shape[:0:-1])[::-1]
    return tuple(bind(P.remainder, bind(P.floor_divide, _cast(i, np.int64), np.asarray(st, np.int64)),
                      np.asarray(s, np.int64)) for st, s in zip(strides, shape))


def ravel_multi_index(multi_index, dims, mode="raise", order="C"):
    if order != "C":
        raise NotImplementedError(with_location("np.ravel_multi_index: only order='C' is supported while tracing"))
    dims = tuple(int(d) for d in dims)
    strides = np.cumprod((1,) + dims[:0:-1])[::-1]
    total = None
    for k, (i, st) in enumerate(zip(multi_index, strides)):
        term = multiply(_normalized(_array(i, "ravel_multi_index"), dims[k], k,
                                    mode[k] if isinstance(mode, (tuple, list)) else mode), int(st))
        total = term if total is None else add(total, term)
    return total
