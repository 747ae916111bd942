"""Sorting and order statistics: sort, argsort (stable), partition and argpartition (a full sort
is a valid partition), searchsorted, median, percentile, quantile and their nan* forms, and
tk.numpy.top_k. NaN sorts last, as in NumPy; a statistic of a slice with a NaN is NaN (the nan*
forms skip them, reading the sorted row at positions computed from its count of numbers)."""
from __future__ import annotations

import builtins
import math

import numpy as np

from ..ir import is_float
from ._core import P, Tracer, _array, _axes, _axis, _cast, _dtype, _inexact, _promote, _result_dtype, _shape, bind, with_location
from .indexing import take, take_along_axis
from .reductions import sum as _sum
from .shapes import flip, moveaxis, ravel, reshape
from .ufuncs import add, ceil, divide, floor, greater_equal, isnan, less, logical_not, multiply, negative, rint, subtract, where


def _along_last(fn, a, axis, fname):
    a = _array(a, fname)
    if axis is None:
        a, axis = ravel(a), 0
    if not _shape(a):
        raise ValueError(with_location(f"{fname}: axis {axis} is out of bounds for a 0-d array"))
    axis = _axis(axis, len(_shape(a)), fname)
    last = len(_shape(a)) - 1
    y = fn(moveaxis(a, axis, last) if axis != last else a)
    return moveaxis(y, last, axis) if axis != last else y


def sort(a, axis=-1, kind=None, order=None, *, stable=None):
    if order is not None:
        raise NotImplementedError(with_location("np.sort: order= (structured arrays) is not supported"))
    return _along_last(lambda x: bind(P.sort, x), a, axis, "sort")


def argsort(a, axis=-1, kind=None, order=None, *, stable=None):
    """Always stable: equal elements keep their order (NumPy's kind="stable")."""
    if order is not None:
        raise NotImplementedError(with_location("np.argsort: order= (structured arrays) is not supported"))
    a = _array(a, "argsort")
    if not _shape(a) and axis is not None:   # (NumPy's: the 0-d array as one element, array([0]))
        a = reshape(a, (1,))
    return _along_last(lambda x: bind(P.argsort, x), a, axis, "argsort")


def _check_kth(a, kth, axis, fname):
    """NumPy's checks of kth (it only chooses which partition; a full sort is valid for every kth)."""
    if isinstance(kth, Tracer):
        return
    k = np.asarray(kth)
    if k.dtype.kind not in "iub":
        raise TypeError(with_location(f"np.{fname}: Partition index must be integer, got {kth!r}"))
    a = _array(a, fname)
    shape = _shape(a)
    n = math.prod(shape) if axis is None else (shape[_axis(axis, len(shape), fname)] if shape else 0)
    if not n:
        return
    for v in k.reshape(-1).tolist():
        v = v + n if v < 0 else v
        if not 0 <= v < n:
            raise ValueError(with_location(f"np.{fname}: kth(={v}) out of bounds ({n})"))


def partition(a, kth, axis=-1, kind="introselect", order=None):
    """The array sorted along the axis: a valid partition for every kth."""
    _check_kth(a, kth, axis, "partition")
    return sort(a, axis)


def argpartition(a, kth, axis=-1, kind="introselect", order=None):
    _check_kth(a, kth, axis, "argpartition")
    return argsort(a, axis)


def searchsorted(a, v, side="left", sorter=None):
    a = _array(a, "searchsorted")
    if sorter is not None:
        a = take(a, sorter)
    v = _array(v, "searchsorted")
    a, v = _promote("searchsorted", a, v)
    if not isinstance(v, Tracer) and not isinstance(a, Tracer):
        return np.searchsorted(np.asarray(a), v, side=side)
    if not isinstance(v, Tracer):
        v = np.asarray(v)
    return bind(P.searchsorted, a, v, side=side)


def top_k(x, k: int):
    """(values, indices) of the k largest elements along the last axis, largest first (ties: the
    lower index first), like jax.lax.top_k."""
    x = _array(x, "top_k")
    order = argsort(negative(x) if _dtype(x) != np.bool_ else logical_not(x), axis=-1)
    idx = order[..., :k]
    return take_along_axis(x, idx, axis=-1), idx


# ----------------------------------------------------------------------------- order statistics


def _prepare(a, axis, fname, inexact=True):
    """(a as float (or in its own dtype) with the reduced axes flattened last, the kept shape with the reduced axes
    as 1)."""
    a = _array(a, fname)
    a = _inexact(a, fname) if inexact else a
    shape = _shape(a)
    axes = _axes(axis, len(shape), fname)
    kept = tuple(1 if i in axes else s for i, s in enumerate(shape))
    others = [i for i in range(len(shape)) if i not in axes]
    x = moveaxis(a, axes, tuple(range(len(others), len(shape)))) if axes else a
    x = reshape(x, tuple(shape[i] for i in others) + (math.prod(shape[i] for i in axes),))
    if _shape(x)[-1] == 0:
        raise ValueError(with_location(f"{fname}: cannot take an order statistic of an empty slice (shape {shape})"))
    return x, kept, tuple(shape[i] for i in others)


def _finish(y, rest_shape, kept, keepdims, q_shape):
    """y of shape rest + q_shape -> q_shape first, then kept (keepdims) or rest."""
    nq = len(q_shape)
    if nq:
        y = moveaxis(y, tuple(range(len(rest_shape), len(rest_shape) + nq)), tuple(range(nq)))
    return reshape(y, q_shape + (kept if keepdims else rest_shape))


def _lerp(a, b, t):
    """NumPy's _lerp: a + (b - a) t, computed from b's end for t >= 0.5 (monotone, exact at the ends)."""
    d = subtract(b, a)
    return where(greater_equal(t, 0.5), subtract(b, multiply(d, subtract(1, t))), add(a, multiply(d, t)))


_METHODS = ("linear", "lower", "higher", "nearest", "midpoint")


_TABLE_ROWS = 1024   # (nan* functions: up to this many values per slice, the indices of each count are a constant table)


def _indices(vi, count: int, method: str):
    """NumPy's own index arithmetic (its _QuantileMethods and _get_indexes) on the virtual indices vi (in q's dtype)
    of a slice of `count` values: (lo, hi, t), the two positions to read and the weight of the second."""
    if method in ("lower", "higher", "nearest"):
        lo = {"lower": np.floor, "higher": np.ceil, "nearest": np.around}[method](vi)
        hi, t = lo, np.zeros_like(vi)
    else:
        if method == "midpoint":
            vi = 0.5 * (np.floor(vi) + np.ceil(vi))
        lo = np.floor(vi)
        hi = lo + 1
        t = np.where(vi % 1 == 0, 0.0, 0.5).astype(vi.dtype) if method == "midpoint" else vi - lo
        outside = (vi >= count - 1) | (vi < 0)
        lo = np.where(outside, np.where(vi < 0, 0, count - 1), lo)
        hi = np.where(outside, lo, hi)
    last = builtins.max(count - 1, 0)
    return np.clip(lo, 0, last).astype(np.int64), np.clip(hi, 0, last).astype(np.int64), t


def _at_positions(s, pos, method: str):
    """The sorted rows s (..., n) read at fractional positions pos (..., m) by `method` (a traced q)."""
    lo = floor(pos)
    if method == "lower":
        return take_along_axis(s, _cast(lo, np.int64), -1)
    if method == "higher":
        return take_along_axis(s, _cast(ceil(pos), np.int64), -1)
    if method == "nearest":
        return take_along_axis(s, _cast(rint(pos), np.int64), -1)
    if method == "midpoint":
        pos = multiply(add(lo, ceil(pos)), 0.5)
        lo = floor(pos)
    hi = ceil(pos)
    a = take_along_axis(s, _cast(lo, np.int64), -1)
    b = take_along_axis(s, _cast(hi, np.int64), -1)
    return _lerp(a, b, _cast(subtract(pos, lo), _dtype(s)))


def _quantile(a, q, axis, method, keepdims, fname, skip_nan, percent=False):
    if method not in _METHODS:
        raise NotImplementedError(with_location(f"np.{fname}: method {method!r} is not supported while tracing; "
                                                f"supported: {', '.join(_METHODS)}"))
    discrete = method in ("lower", "higher", "nearest")   # (an element of a: NumPy's result keeps a's dtype)
    x, kept, rest = _prepare(a, axis, fname, inexact=not discrete)
    n = _shape(x)[-1]
    q = _array(q, fname)
    dt = _result_dtype(fname, x, q)   # (NumPy's: a list of quantiles is float64; a Python number is weak)
    s = bind(P.sort, x if discrete else _cast(x, dt))
    q_shape = _shape(q)
    m = math.prod(q_shape)
    # the positions are NumPy's: computed in q's own dtype (float64 for Python numbers and lists), where the
    # array's float32 would pick a neighbouring element now and then (0.28 * 25 rounds to 7.0 in float32)
    pdt = np.promote_types(_dtype(q), np.float32) if isinstance(q, Tracer) or np.asarray(q).dtype.kind in "fc" \
        else np.dtype(np.float64)
    q = _cast(q, pdt) if isinstance(q, Tracer) else np.asarray(q, pdt)
    if percent:
        q = divide(q, 100) if isinstance(q, Tracer) else np.true_divide(q, pdt.type(100))
    if not isinstance(q, Tracer) and (np.any(q < 0) or np.any(q > 1)):
        raise ValueError(with_location(f"np.{fname}: quantiles must be in the range [0, 1]"))
    count = _sum(logical_not(isnan(x)), axis=-1, keepdims=True) if skip_nan else None
    if isinstance(q, Tracer) or (skip_nan and n + 1 > _TABLE_ROWS):   # the positions computed in the kernel
        qf = reshape(q, (1,) * len(rest) + (m,))
        if skip_nan:
            last = subtract(_cast(count, pdt), 1)
            pos = multiply(where(greater_equal(last, 0), last, 0), qf)
        else:
            pos = multiply(n - 1, qf)
        y = _at_positions(s, pos, method)
    else:   # NumPy's indices, computed now: for each count of values a slice may have (nan*), or for n
        qv = np.ravel(q)
        rows = [_indices((c - 1) * qv, c, method) for c in (range(n + 1) if skip_nan else (n,))]
        lo, hi, t = (np.stack([r[k] for r in rows]) for k in range(3))
        if skip_nan:
            which = reshape(count, rest)
            lo, hi, t = (take(v, which, axis=0) for v in (lo, hi, t.astype(_dtype(s))))
        else:
            lo, hi, t = (reshape(v, (1,) * len(rest) + (m,)) for v in (lo, hi, t.astype(_dtype(s))))
        y = take_along_axis(s, lo, -1)
        if not discrete:
            y = _lerp(y, take_along_axis(s, hi, -1), t)
    if skip_nan and is_float(_dtype(s)):
        y = where(greater_equal(_cast(count, _dtype(s)), 1), y, np.nan)
    elif is_float(_dtype(s)):
        y = where(isnan(s[..., -1:]), np.nan, y)   # (NaN sorts last: a slice with one has it there)
    return _finish(reshape(y, rest + q_shape), rest, kept, keepdims, q_shape)


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
             interpolation=None):
    _check_out(out, weights, "quantile")
    return _quantile(a, q, axis, interpolation or method, keepdims, "quantile", skip_nan=False)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
               interpolation=None):
    _check_out(out, weights, "percentile")
    return _quantile(a, q, axis, interpolation or method, keepdims, "percentile", skip_nan=False, percent=True)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
                interpolation=None):
    _check_out(out, weights, "nanquantile")
    return _quantile(a, q, axis, interpolation or method, keepdims, "nanquantile", skip_nan=True)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False, *, weights=None,
                  interpolation=None):
    _check_out(out, weights, "nanpercentile")
    return _quantile(a, q, axis, interpolation or method, keepdims, "nanpercentile", skip_nan=True, percent=True)


def _check_out(out, weights, fname):
    if out is not None:
        raise TypeError(with_location(f"np.{fname}(..., out=...) cannot write into a traced array"))
    if weights is not None:
        raise NotImplementedError(with_location(f"np.{fname}: weights= is not supported while tracing"))


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    """The middle of the sorted slice, or the mean of the two middle ones (NumPy's formula)."""
    _check_out(out, None, "median")
    x, kept, rest = _prepare(a, axis, "median")
    n = _shape(x)[-1]
    s = bind(P.sort, x)
    y = s[..., (n - 1) // 2] if n % 2 else divide(add(s[..., n // 2 - 1], s[..., n // 2]), 2)
    y = where(isnan(s[..., -1]), np.nan, y)
    return reshape(y, kept if keepdims else rest)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    _check_out(out, None, "nanmedian")
    x, kept, rest = _prepare(a, axis, "nanmedian")
    s = bind(P.sort, x)
    count = _sum(logical_not(isnan(x)), axis=-1, keepdims=True)
    lo = bind(P.floor_divide, subtract(count, 1), np.asarray(2, np.int64))
    hi = bind(P.floor_divide, count, np.asarray(2, np.int64))
    lo = where(greater_equal(lo, 0), lo, 0)
    y = divide(add(take_along_axis(s, lo, -1), take_along_axis(s, hi, -1)), 2)
    y = where(greater_equal(count, 1), y, np.nan)
    return reshape(y, kept if keepdims else rest)


def digitize(x, bins, right=False):
    """The bin of each x (np.digitize): searchsorted in increasing bins, and n - searchsorted in the
    reversed bins for decreasing ones, as NumPy (equal constant bins count as increasing; constant bins
    that are neither raise NumPy's ValueError). Traced bins are increasing or decreasing by the order of
    their first and last (the kernel cannot raise on bins that are neither)."""
    bins = _array(bins, "digitize")
    side = "left" if right else "right"
    if not isinstance(bins, Tracer):
        bins = np.asarray(bins)
        if bins.ndim != 1:
            raise ValueError(with_location(f"digitize: bins must be 1-D, got shape {bins.shape}"))
        d = np.diff(bins)
        if np.all(d >= 0):
            return searchsorted(bins, x, side=side)
        if not np.all(d <= 0):
            raise ValueError(with_location("digitize: bins must be monotonically increasing or decreasing"))
        return subtract(len(bins), searchsorted(np.ascontiguousarray(bins[::-1]), x, side=side))
    if len(_shape(bins)) != 1:
        raise ValueError(with_location(f"digitize: bins must be 1-D, got shape {_shape(bins)}"))
    n = _shape(bins)[0]
    increasing = searchsorted(bins, x, side=side)
    if n < 2:
        return increasing
    decreasing = subtract(n, searchsorted(flip(bins, 0), x, side=side))
    return where(less(bins[n - 1], bins[0]), decreasing, increasing)
