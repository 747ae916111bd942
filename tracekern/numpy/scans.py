"""Scans and differences: cumsum, cumprod (and nan*, cumulative_*, ufunc.accumulate), diff,
ediff1d, gradient, trapezoid, convolve, correlate and interp.

The running value is the cumulative primitives' (a serial loop along the axis); differences are
slices and subtractions (views fused into one loop); convolve reads its input through a constant
window table (a gather) and contracts with the kernel."""
from __future__ import annotations

import builtins

import numpy as np

from ..ir import is_complex, is_inexact
from ._core import P, ShapeError, Tracer, _array, _axis, _cast, _dtype, _inexact, _promote, _shape, bind, with_location
from .contractions import matmul
from .indexing import take_along_axis
from .reductions import sum as _sum
from .shapes import broadcast_to, concatenate, flip, pad, ravel, reshape
from .ufuncs import (
    _make_complex,
    add,
    astype,
    conj,
    divide,
    equal,
    imag,
    isnan,
    less,
    logical_and,
    maximum,
    minimum,
    multiply,
    real,
    subtract,
    where,
)


def _cumulative(prim, fname, a, axis, dtype, promote_int=True, reverse=False):
    a = _array(a, fname)
    if axis is None:
        a, axis = ravel(a), 0
    if dtype is not None:
        a = astype(a, dtype)
    elif promote_int and _dtype(a).kind in "bi":
        a = _cast(a, np.int64)
    if not _shape(a):
        raise ShapeError(with_location(f"{fname}: needs an array of at least one dimension (or axis=None)"))
    return bind(prim, a, axis=_axis(axis, len(_shape(a)), fname), reverse=reverse)


def cumsum(a, axis=None, dtype=None, out=None):
    _no_out("cumsum", out)
    return _cumulative(P.cumsum, "cumsum", a, axis, dtype)


def cumprod(a, axis=None, dtype=None, out=None):
    _no_out("cumprod", out)
    return _cumulative(P.cumprod, "cumprod", a, axis, dtype)


def nancumsum(a, axis=None, dtype=None, out=None):
    a = _array(a, "nancumsum")
    return cumsum(where(isnan(a), 0, a) if is_inexact(_dtype(a)) else a, axis, dtype, out)


def nancumprod(a, axis=None, dtype=None, out=None):
    a = _array(a, "nancumprod")
    return cumprod(where(isnan(a), 1, a) if is_inexact(_dtype(a)) else a, axis, dtype, out)


def _with_initial(y, axis, value):
    axis = _axis(axis, len(_shape(y)), "cumulative")
    shape = tuple(1 if i == axis else s for i, s in enumerate(_shape(y)))
    first = bind(P.full, shape=shape, dtype=_dtype(y), value=np.asarray(value, _dtype(y)).item())
    return concatenate([first, y], axis=axis)


def _array_api_cumulative(name, scan, identity, x, axis, dtype, out, include_initial):
    """The array API's cumulative_sum / cumulative_prod: cumsum / cumprod along `axis` (optional for
    1-D input), with the identity first when include_initial."""
    x = _array(x, name)
    if axis is None:
        if len(_shape(x)) > 1:
            raise ValueError(with_location(f"{name}: axis is needed for an array of more than one dimension"))
        axis = 0
    y = scan(x, axis, dtype, out)
    return _with_initial(y, axis, identity) if include_initial else y


def cumulative_sum(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    return _array_api_cumulative("cumulative_sum", cumsum, 0, x, axis, dtype, out, include_initial)


def cumulative_prod(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
    return _array_api_cumulative("cumulative_prod", cumprod, 1, x, axis, dtype, out, include_initial)


def accumulate(ufunc, a, axis=0, dtype=None):
    """ufunc.accumulate for add, multiply, maximum and minimum (as NumPy: add and multiply promote bools and
    integers to int64, maximum and minimum keep a's dtype)."""
    prims = {np.add: P.cumsum, np.multiply: P.cumprod, np.maximum: P.cummax, np.minimum: P.cummin}
    if ufunc not in prims:
        raise NotImplementedError(with_location(f"np.{ufunc.__name__}.accumulate is not supported while tracing; "
                                                "supported: add, multiply, maximum, minimum"))
    return _cumulative(prims[ufunc], f"np.{ufunc.__name__}.accumulate", a, axis, dtype,
                       promote_int=ufunc in (np.add, np.multiply))


def _no_out(fname, out):
    if out is not None:
        raise TypeError(with_location(f"np.{fname}(..., out=...) cannot write into a traced array"))


def _along(x, axis, lo, hi):
    nd = len(_shape(x))
    return x[tuple(slice(lo, hi) if i == axis else slice(None) for i in range(nd))]


def diff(a, n=1, axis=-1, prepend=np._NoValue, append=np._NoValue):
    a = _array(a, "diff")
    axis = _axis(axis, len(_shape(a)), "diff")
    parts = []
    for extra in (prepend, append):
        if extra is np._NoValue:
            parts.append(None)
            continue
        e = _array(extra, "diff")
        if not _shape(e):
            e = broadcast_to(e, tuple(1 if i == axis else s for i, s in enumerate(_shape(a))))
        parts.append(e)
    if parts[0] is not None or parts[1] is not None:
        a = concatenate([p for p in (parts[0], a, parts[1]) if p is not None], axis=axis)
    for _ in range(int(n)):
        if _dtype(a) == np.bool_:
            a = bind(P.ne, _along(a, axis, 1, None), _along(a, axis, None, -1))
        else:
            a = subtract(_along(a, axis, 1, None), _along(a, axis, None, -1))
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """NumPy's: the differences of the flattened array (of bools: NumPy's subtract raises), to_begin and to_end cast to
    its dtype where the same_kind rule allows (a float into an integer array raises, as NumPy's)."""
    ary = _array(ary, "ediff1d")
    if _dtype(ary) == np.bool_:
        raise TypeError(with_location("ediff1d: NumPy cannot subtract booleans (np.ediff1d of a bool array raises); "
                                      "use np.diff, whose bool differences are x[1:] != x[:-1], or cast to int first"))
    y = diff(ravel(ary))

    def piece(v, name):
        v = _array(v, "ediff1d")
        if not np.can_cast(_dtype(v), _dtype(y), casting="same_kind"):
            raise TypeError(with_location(f"ediff1d: dtype of `{name}` ({_dtype(v)}) must be compatible with input `ary` "
                                          f"({_dtype(y)}) under the `same_kind` rule, as NumPy's"))
        return ravel(_cast(v, _dtype(y)))
    pieces = ([piece(to_begin, "to_begin")] if to_begin is not None else []) + [y] + \
             ([piece(to_end, "to_end")] if to_end is not None else [])
    return concatenate(pieces) if len(pieces) > 1 else y


def gradient(f, *varargs, axis=None, edge_order=1):
    """np.gradient: central differences inside, one-sided (first or second order) at the edges;
    spacings as scalars or coordinate arrays, per axis."""
    f = _inexact(_array(f, "gradient"), "gradient")
    nd = len(_shape(f))
    axes = list(range(nd)) if axis is None else [
        _axis(a, nd, "gradient") for a in (axis if isinstance(axis, (tuple, list)) else (axis,))]
    spacing = list(varargs) if len(varargs) != 1 else list(varargs) * len(axes)
    if not spacing:
        spacing = [1.0] * len(axes)
    if len(spacing) != len(axes):
        raise TypeError(with_location("gradient: give one spacing, or one per axis"))
    out = []
    for ax, h in zip(axes, spacing):
        n = _shape(f)[ax]
        if n < edge_order + 1:
            raise ValueError(with_location("gradient: an axis needs at least edge_order + 1 elements"))
        sl = lambda lo, hi, ax=ax: _along(f, ax, lo, hi)   # noqa: E731
        if np.ndim(h) == 0 and not hasattr(h, "aval"):
            h = float(h)
            mid = divide(subtract(sl(2, None), sl(None, -2)), 2 * h)
            if edge_order == 1:
                first = divide(subtract(sl(1, 2), sl(0, 1)), h)
                last = divide(subtract(sl(n - 1, n), sl(n - 2, n - 1)), h)
            else:
                first = divide(add(add(multiply(sl(0, 1), -1.5), multiply(sl(1, 2), 2.0)), multiply(sl(2, 3), -0.5)), h)
                last = divide(add(add(multiply(sl(n - 3, n - 2), 0.5), multiply(sl(n - 2, n - 1), -2.0)),
                                  multiply(sl(n - 1, n), 1.5)), h)
        else:   # coordinates: NumPy's second-order formula for uneven spacing
            x = _cast(_array(h, "gradient"), _dtype(f))
            dx = diff(x)
            shape = tuple(-1 if i == ax else 1 for i in range(nd))
            d1 = reshape(dx[:-1], shape)
            d2 = reshape(dx[1:], shape)
            a = divide(negative_(d2), multiply(d1, add(d1, d2)))
            b = divide(subtract(d2, d1), multiply(d1, d2))
            c = divide(d1, multiply(d2, add(d1, d2)))
            mid = add(add(multiply(a, sl(None, -2)), multiply(b, sl(1, -1))), multiply(c, sl(2, None)))
            if edge_order == 1:
                first = divide(subtract(sl(1, 2), sl(0, 1)), reshape(dx[0:1], shape))
                last = divide(subtract(sl(n - 1, n), sl(n - 2, n - 1)), reshape(dx[-1:], shape))
            else:
                raise NotImplementedError(with_location("gradient: edge_order=2 with coordinate arrays is not supported "
                                                        "while tracing"))
        out.append(concatenate([first, mid, last], axis=ax))
    return out[0] if len(out) == 1 else tuple(out)


def negative_(x):
    return multiply(x, -1)


def trapezoid(y, x=None, dx=1.0, axis=-1):
    y = _inexact(_array(y, "trapezoid"), "trapezoid")
    axis = _axis(axis, len(_shape(y)), "trapezoid")
    mids = multiply(add(_along(y, axis, 1, None), _along(y, axis, None, -1)), 0.5)
    if x is None:   # (dx may be an array: it weighs each interval, as NumPy's d * (y[1:] + y[:-1]) / 2)
        return _sum(multiply(mids, dx), axis=axis)
    x = _array(x, "trapezoid")
    d = diff(x)
    if len(_shape(d)) == 1 and len(_shape(y)) > 1:
        d = reshape(d, tuple(-1 if i == axis else 1 for i in range(len(_shape(y)))))
    else:
        d = diff(x, axis=axis)
    return _sum(multiply(mids, d), axis=axis)


def _windows(n: int, k: int, mode: str):
    """For np.convolve of lengths n >= k: the (outputs, k) table of positions in a zero-padded a
    (padded by k - 1 on each side), flipped kernel order, and the output slice for the mode."""
    full = n + k - 1
    idx = np.arange(full)[:, None] + np.arange(k)[None, :]
    if mode == "full":
        sel = slice(0, full)
    elif mode == "same":
        start = (k - 1) // 2
        length = builtins.max(n, k)
        sel = slice(start, start + length)
    elif mode == "valid":
        sel = slice(k - 1, n)
    else:
        raise ValueError(with_location(f"convolve: mode must be 'full', 'same' or 'valid', got {mode!r}"))
    return idx[sel]


def convolve(a, v, mode="full"):
    """A window table gathers a (zero-padded) into (outputs, len(v)) rows, contracted with the
    flipped kernel: O(n k), as the direct sum."""
    a, v = _promote("convolve", ravel(_array(a, "convolve")), ravel(_array(v, "convolve")))
    if not _shape(a)[0] or not _shape(v)[0]:
        raise ValueError(with_location("convolve: inputs cannot be empty"))
    if _shape(v)[0] > _shape(a)[0]:
        a, v = v, a
    n, k = _shape(a)[0], _shape(v)[0]
    padded = pad(a, (k - 1, k - 1))
    table = _windows(n, k, mode)
    rows = take_along_axis(reshape(padded, (1, -1)), table.reshape(1, -1), axis=1)
    rows = reshape(rows, table.shape)
    return matmul(rows, flip(v)) if k > 1 else multiply(reshape(rows, (-1,)), v)


def correlate(a, v, mode="valid"):
    """np.correlate(a, v) = np.convolve(a, conj(v[::-1]))."""
    a, v = ravel(_array(a, "correlate")), ravel(_array(v, "correlate"))
    if _shape(v)[0] > _shape(a)[0]:   # (NumPy swaps and reverses)
        return conj(flip(convolve(v, conj(flip(a)), mode)))
    return convolve(a, conj(flip(v)), mode)


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation, NumPy's algorithm: a binary search for each x (searchsorted), then
    slope * (x - xp[j]) + fp[j] with slope = (fp[j+1] - fp[j]) / (xp[j+1] - xp[j]); where that is NaN (an
    infinite fp), from the other end, or fp[j] at a knot or between equal values; the ends take fp[0] /
    fp[-1] (or left / right). x and xp are read as float64; a complex fp interpolates its parts."""
    if period is not None:
        raise NotImplementedError(with_location("np.interp: period= is not supported while tracing"))
    x, xp, fp = (_array(v, "interp") for v in (x, xp, fp))
    for name, v in (("x", x), ("xp", xp)):
        if is_complex(_dtype(v)):
            raise TypeError(with_location(f"np.interp: {name} must be real (NumPy casts it to float64), got "
                                          f"{_dtype(v).name}; pass np.real({name})"))
    x, xp = _cast(x, np.float64), _cast(xp, np.float64)
    if len(_shape(xp)) != 1 or _shape(xp) != _shape(fp):
        raise ValueError(with_location(f"interp: xp {_shape(xp)} and fp {_shape(fp)} must be 1-D of the same length"))
    if _shape(xp)[0] == 0:
        raise ValueError(with_location("interp: array of sample points is empty"))
    if not is_complex(_dtype(fp)):
        return _interp(x, xp, _cast(fp, np.float64), left, right)
    fp = _cast(fp, np.complex128)
    parts = [(None, None) if v is None else (np.real(v), np.imag(v)) if not isinstance(v, Tracer) else (real(v), imag(v))
             for v in (left, right)]
    return _make_complex(_interp(x, xp, real(fp), parts[0][0], parts[1][0]),
                         _interp(x, xp, imag(fp), parts[0][1], parts[1][1]))


def _interp(x, xp, fp, left, right):
    n = _shape(xp)[0]
    first = _gather1(fp, np.zeros((), np.int64)) if left is None else left
    last = _gather1(fp, np.asarray(n - 1, np.int64)) if right is None else right
    x_first, x_last = _gather1(xp, np.zeros((), np.int64)), _gather1(xp, np.asarray(n - 1, np.int64))
    if n == 1:   # (NumPy's: x < xp[0], x > xp[0], else fp[0], NaN included)
        return where(less(x, x_first), first, where(less(x_last, x), last, _gather1(fp, np.zeros(_shape(x), np.int64))))
    j = bind(P.searchsorted, xp, x, side="right")   # xp[j-1] <= x < xp[j]
    lo = minimum(maximum(subtract(j, 1), 0), n - 2)
    hi = add(lo, 1)
    x0, x1 = _gather1(xp, lo), _gather1(xp, hi)
    y0, y1 = _gather1(fp, lo), _gather1(fp, hi)
    span = subtract(x1, x0)
    slope = divide(subtract(y1, y0), where(equal(span, 0), 1, span))   # (a zero span is never used: a double where)
    # (at a knot the value is fp's exactly, as NumPy's, and the derivative in x the segment's slope)
    y = where(equal(x, x1), add(multiply(slope, subtract(x, x1)), y1), add(multiply(slope, subtract(x, x0)), y0))
    nan = isnan(y)   # (an infinite fp: at a knot its value, else from the other end, or fp[j] between equals)
    y = where(logical_and(nan, equal(x, x0)), y0, where(logical_and(nan, equal(x, x1)), y1, y))
    y = where(isnan(y), add(multiply(slope, subtract(x, x1)), y1), y)
    y = where(logical_and(isnan(y), equal(y0, y1)), y0, y)
    y = where(less(x, x_first), first, y)
    y = where(less(x_last, x), last, y)
    return where(isnan(x), x, y)


def _gather1(v, idx):
    """v[idx] for a 1-D v and integer indices of any shape (in range)."""
    shape = _shape(idx)
    k = int(np.prod(shape, dtype=np.int64))
    if not k:
        return bind(P.full, shape=shape, dtype=_dtype(v), value=np.asarray(0, _dtype(v)).item())
    return reshape(bind(P.gather, v, reshape(idx, (k,)), axis=0), shape)


def vander(x, N=None, increasing=False):
    """Columns x**0, x**1, ... as running products (exact, as NumPy's multiply.accumulate)."""
    x = ravel(_array(x, "vander"))
    x = _cast(x, np.promote_types(_dtype(x), np.int64))   # (NumPy's dtype: float32 -> float64)
    n = _shape(x)[0] if N is None else int(N)
    cols = broadcast_to(reshape(x, (-1, 1)), (_shape(x)[0], builtins.max(n - 1, 0)))
    ones = bind(P.full, shape=(_shape(x)[0], 1), dtype=_dtype(x), value=np.asarray(1, _dtype(x)).item())
    v = concatenate([ones, cumprod(cols, axis=1)], axis=1) if n > 1 else ones[:, :n]
    return v if increasing else flip(v, 1)


def polyval(p, x):
    """Horner's rule over the (static number of) coefficients, highest power first."""
    p, x = _array(p, "polyval"), _array(x, "polyval")
    y = multiply(x, 0)
    for k in range(_shape(p)[0]):
        y = add(multiply(y, x), p[k])
    return y
