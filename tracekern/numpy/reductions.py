"""Reductions and statistics: sum, prod, max, min, mean, their nan* forms, var and std (two
reductions: the mean, then the squared deviations), ptp, all, any, count_nonzero, argmax and argmin
(the extremum, then the first index that attains it), average, cov and corrcoef."""
from __future__ import annotations

import math

import numpy as np

from ..ir import is_complex, is_float, is_inexact
from ._core import P, Tracer, _array, _axes, _axis, _cast, _dtype, _inexact, _iota, _reject, _result_dtype, _shape, bind, with_location
from .shapes import broadcast_to, concatenate, diagonal, expand_dims, ravel, reshape, squeeze, transpose
from .ufuncs import (
    _make_complex,
    add,
    astype,
    conj,
    divide,
    equal,
    greater,
    imag,
    isfinite,
    isnan,
    logical_not,
    logical_or,
    maximum,
    minimum,
    multiply,
    not_equal,
    real,
    sqrt,
    stop_gradient,
    subtract,
    where,
)
from .ufuncs import where as _where  # (a name `where=` parameters do not shadow)


def _reduce(prim, fname, a, axis, keepdims, promote_int):
    a = _array(a, fname)
    shape = _shape(a)
    axes = _axes(axis, len(shape), fname)
    if promote_int and _dtype(a).kind in "bi":
        a = _cast(a, np.int64)
    y = bind(prim, a, axes=axes)
    if keepdims:
        y = bind(P.reshape, y, new_shape=tuple(1 if i in axes else s for i, s in enumerate(shape)))
    return y


def _count(a, axis) -> int:
    shape = _shape(a)
    return math.prod(shape[i] for i in _axes(axis, len(shape), "count"))


def _sum_or_prod(prim, name, identity, combine, a, axis, dtype, out, keepdims, initial, where):
    """np.sum / np.prod: dtype=, where= (masked out as the identity) and initial= (combined after)."""
    _reject(name, out=out)
    a = _array(a, name)
    if dtype is not None:
        a = astype(a, dtype)
    if where is not None:
        a = _select(where, a, identity)
    y = _reduce(prim, name, a, axis, keepdims, promote_int=dtype is None)   # (dtype= is the accumulator's, as NumPy's)
    return y if initial is None else combine(y, _initial(initial, _dtype(y), name))


def _initial(initial, dtype, fname):
    """initial= in the reduction's dtype, as NumPy casts it (sum(int32, initial=2.5) adds 2 in int64; max(bool,
    initial=2) is bool): a Python int out of the dtype's bounds, or an infinity or NaN for an integer, raises."""
    if isinstance(initial, Tracer):
        return _cast(initial, dtype)
    try:
        with np.errstate(invalid="raise"):
            return np.array(initial, dtype=dtype)
    except (OverflowError, ValueError, FloatingPointError) as e:
        raise type(e)(with_location(f"{fname}: initial={initial!r} does not fit the reduction's dtype {dtype} ({e})")) from None


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    return _sum_or_prod(P.reduce_sum, "sum", 0, add, a, axis, dtype, out, keepdims, initial, where)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return _sum_or_prod(P.reduce_prod, "prod", 1, multiply, a, axis, dtype, out, keepdims, initial, where)


def _select(mask, a, fill):
    return _where(_cast(mask, np.bool_), a, fill)


def _extremum(prim, combine, fname, a, axis, keepdims, initial, where):
    a = _array(a, fname)
    if initial is not None:
        initial = _initial(initial, _dtype(a), fname)
    if where is not None:
        if initial is None:
            raise ValueError(with_location(f"{fname}: where= needs initial= (the value of an empty selection)"))
        a = _select(where, a, initial)
    if initial is not None and _count(a, axis) == 0:   # (an empty slice is initial, as NumPy's: no identity needed)
        shape, axes = _shape(a), _axes(axis, len(_shape(a)), fname)
        a = broadcast_to(initial, tuple(1 if i in axes else s for i, s in enumerate(shape)))
    y = _reduce(prim, fname, a, axis, keepdims, promote_int=False)
    return y if initial is None else combine(y, initial)


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    _reject("max", out=out)
    return _extremum(P.reduce_max, maximum, "max", a, axis, keepdims, initial, where)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):  # noqa: A001
    _reject("min", out=out)
    return _extremum(P.reduce_min, minimum, "min", a, axis, keepdims, initial, where)


amax, amin = max, min


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    _reject("mean", out=out)
    a = _array(a, "mean")
    if dtype is not None:
        a = astype(a, dtype)
    elif not is_inexact(_dtype(a)):
        a = _cast(a, np.float64)
    if where is not None:
        ones = np.ones(_shape(a), _dtype(a))
        m = divide(sum(a, axis, keepdims=keepdims, where=where), sum(ones, axis, keepdims=keepdims, where=where))
    else:
        m = divide(_reduce(P.reduce_sum, "mean", a, axis, keepdims, promote_int=False), _count(a, axis))
    return _cast(m, dtype) if _integer(dtype) else m   # (NumPy divides the integer sum, then truncates to dtype)


def _integer(dtype) -> bool:
    return dtype is not None and np.dtype(dtype).kind in "iu"


def _dof(n, ddof, correction):
    if correction is not None:
        ddof = correction
    return n - ddof


def _sqrt_or_zero(v):
    """sqrt(v) with the subgradient 0 where v == 0: std where a slice's values are all equal, the 2-norm of a
    zero vector (functions that are 0 there and not differentiable, like hypot at the origin). The untaken branch
    is evaluated at 1 there (a "double where"), so second derivatives are finite (0) too, not 0 * inf."""
    zero = equal(v, 0)
    return where(zero, 0, sqrt(where(zero, 1, v)))


def _shifted(a, axis, shift):
    """a minus a value of each slice along axis (gradient-stopped; 0 where it is not finite), before the mean is
    taken: the classic shifted-data variance, and a slice of equal values then has deviations exactly 0 (its
    mean alone may round off them), so that std there is exactly 0 and has the gradient 0."""
    if _count(a, axis) < 2:
        return a   # (one value: its mean is itself, and its deviation exactly 0, already)
    s = stop_gradient(shift)
    return subtract(a, where(isfinite(s), s, 0))


def _first(a, axis):
    """Each slice's first value along axis, keepdims."""
    axes = _axes(axis, len(_shape(a)), "var")
    return a[tuple(slice(0, 1) if i in axes else slice(None) for i in range(len(_shape(a))))]


def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    """Two reductions: the mean, then the sum of squared deviations over max(n - ddof, 0), as NumPy (inf, or NaN,
    when ddof >= n). The deviations are taken after shifting each slice by its first value (_shifted)."""
    _reject("var", out=out, where=where, mean=mean)
    if _integer(dtype):
        return _integer_var(_array(a, "var"), axis, dtype, ddof if correction is None else correction, keepdims)
    if dtype is not None and is_complex(np.dtype(dtype)):   # (NumPy's sum of |d|^2 in dtype= is complex)
        return astype(var(astype(a, dtype), axis, None, None, ddof, keepdims, correction=correction), dtype)
    a = _inexact(_array(a, "var"), "var") if dtype is None else astype(a, dtype)
    a = _shifted(a, axis, _first(a, axis))
    m = globals()["mean"](a, axis, keepdims=True)
    d = subtract(a, m)
    dof = _dof(_count(a, axis), ddof, correction)
    return divide(sum(_abs2(d), axis, keepdims=keepdims), dof if dof > 0 else 0)


def _integer_var(a, axis, dtype, ddof, keepdims):
    """var(a, dtype=<an integer dtype>) as NumPy computes it: the mean truncated to dtype, the deviations of a from
    it squared in their own dtype, summed in dtype, divided and truncated again."""
    m = mean(a, axis, dtype=dtype, keepdims=True)
    d = subtract(a, m)
    dof = _dof(_count(a, axis), ddof, None)
    return _cast(divide(sum(_abs2(d), axis, dtype=dtype, keepdims=keepdims), dof if dof > 0 else 0), dtype)


def _abs2(d):
    """|d|^2: d * d, or for complex d the sum of its parts' squares (NumPy's var of complex is real)."""
    if is_complex(_dtype(d)):
        re, im = real(d), imag(d)
        return add(multiply(re, re), multiply(im, im))
    return multiply(d, d)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    """sqrt(var), with the gradient 0 where var is 0 (_sqrt_or_zero); in dtype= when that is an integer dtype."""
    v = var(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction)
    if _integer(dtype):   # (NumPy truncates a 0-d result's sqrt to dtype; its sqrt of an array cannot cast back)
        if _shape(v) != ():
            raise TypeError(with_location(f"std: dtype={np.dtype(dtype)} with a result of shape {_shape(v)}: NumPy "
                                          "raises (its sqrt cannot cast float64 to an integer dtype); give a float dtype"))
        return _cast(sqrt(v), dtype)
    return _sqrt_or_zero(v)


def ptp(a, axis=None, out=None, keepdims=False):
    return subtract(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


def all(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    _reject("all", out=out, where=where)
    falses = sum(logical_not(_cast(_array(a, "all"), np.bool_)), axis, keepdims=keepdims)
    return equal(falses, 0)


def any(a, axis=None, out=None, keepdims=False, *, where=None):  # noqa: A001
    _reject("any", out=out, where=where)
    return greater(sum(_cast(_array(a, "any"), np.bool_), axis, keepdims=keepdims), 0)


def count_nonzero(a, axis=None, *, keepdims=False):
    return sum(not_equal(_array(a, "count_nonzero"), 0), axis, keepdims=keepdims)


def _arg_extremum(prim, fname, a, axis, keepdims, nan_fill=None):
    """The first index of the extremum along axis (of the flattened array when axis is None); a NaN
    counts as the extremum, as in NumPy (nan_fill: the nan* forms replace NaN first)."""
    a = _array(a, fname)
    if axis is None:
        y = _arg_extremum(prim, fname, ravel(a), 0, False, nan_fill)
        return reshape(y, (1,) * len(_shape(a))) if keepdims else y
    nd = len(_shape(a))
    axis = _axis(axis, nd, fname)
    n = _shape(a)[axis]
    if n == 0:
        raise ValueError(with_location(f"{fname}: an empty sequence along axis {axis} (shape {_shape(a)}) has no extremum"))
    if _dtype(a) == np.bool_:
        a = _cast(a, np.int64)
    x = a if nan_fill is None else where(isnan(a), nan_fill, a)
    ext = _reduce(prim, fname, x, axis, True, promote_int=False)
    hit = equal(x, ext)
    if is_float(_dtype(x)):
        hit = logical_or(hit, isnan(x))
    first = _reduce(P.reduce_min, fname, where(hit, _iota(n, _shape(a), axis), n), axis, keepdims, promote_int=False)
    if nan_fill is not None:   # an all-NaN slice: -1 (NumPy raises; a compiled function cannot)
        allnan = equal(sum(logical_not(isnan(a)), axis, keepdims=keepdims), 0)
        first = where(allnan, -1, first)
    return first


def argmax(a, axis=None, out=None, *, keepdims=False):
    _reject("argmax", out=out)
    return _arg_extremum(P.reduce_max, "argmax", a, axis, keepdims)


def argmin(a, axis=None, out=None, *, keepdims=False):
    _reject("argmin", out=out)
    return _arg_extremum(P.reduce_min, "argmin", a, axis, keepdims)


def nanargmax(a, axis=None, out=None, *, keepdims=False):
    _reject("nanargmax", out=out)
    return _arg_extremum(P.reduce_max, "nanargmax", a, axis, keepdims, nan_fill=-np.inf)


def nanargmin(a, axis=None, out=None, *, keepdims=False):
    _reject("nanargmin", out=out)
    return _arg_extremum(P.reduce_min, "nanargmin", a, axis, keepdims, nan_fill=np.inf)


def _without_nan(a, fill, fname):
    a = _array(a, fname)
    if not is_inexact(_dtype(a)):
        return a
    return where(isnan(a), fill, a)


def nansum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return sum(_without_nan(a, 0, "nansum"), axis, dtype, out, keepdims, initial, where)


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    return prod(_without_nan(a, 1, "nanprod"), axis, dtype, out, keepdims, initial, where)


def _nan_extremum(fn, fill, fname, a, axis, keepdims):
    a = _array(a, fname)
    y = fn(_without_nan(a, fill, fname), axis, keepdims=keepdims)
    if not is_float(_dtype(a)):
        return y
    allnan = equal(sum(logical_not(isnan(a)), axis, keepdims=keepdims), 0)
    return where(allnan, np.nan, y)   # (an all-NaN slice is NaN, as in NumPy)


def nanmax(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _reject("nanmax", out=out, initial=initial, where=where)
    return _nan_extremum(max, -np.inf, "nanmax", a, axis, keepdims)


def nanmin(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _reject("nanmin", out=out, initial=initial, where=where)
    return _nan_extremum(min, np.inf, "nanmin", a, axis, keepdims)


def _valid(a, axis, keepdims):
    return sum(logical_not(isnan(a)), axis, keepdims=keepdims)


def nanmean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    _reject("nanmean", out=out, where=where)
    a = _array(a, "nanmean")
    if not is_inexact(_dtype(a)):   # (no NaN in it: NumPy's np.mean, dtype= included)
        return mean(a, axis, dtype, keepdims=keepdims)
    _inexact_dtype(dtype, "nanmean")
    a = a if dtype is None else astype(a, dtype)
    return divide(nansum(a, axis, keepdims=keepdims), _cast(_valid(a, axis, keepdims), _dtype(a)))


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    """var of the values that are not NaN; NaN where the degrees of freedom are <= 0, as NumPy (an integer array
    has no NaN, and NumPy's np.var rules apply to it). Each slice is shifted by its largest value first."""
    _reject("nanvar", out=out, where=where, mean=mean)
    a = _array(a, "nanvar")
    if not is_inexact(_dtype(a)):   # (no NaN in it: NumPy's np.var, dtype= included)
        return var(a, axis, dtype, ddof=ddof, keepdims=keepdims, correction=correction)
    _inexact_dtype(dtype, "nanvar")
    if dtype is not None and is_complex(np.dtype(dtype)):   # (NumPy's sum of |d|^2 in dtype= is complex)
        return astype(nanvar(astype(a, dtype), axis, None, None, ddof, keepdims, correction=correction), dtype)
    a = a if dtype is None else astype(a, dtype)
    if not is_complex(_dtype(a)):   # (complex numbers have no order to take a largest value by)
        a = _shifted(a, axis, max(_where(isnan(a), -np.inf, a), axis, keepdims=True))
    m = nanmean(a, axis, keepdims=True)
    d = _where(isnan(a), 0, subtract(a, m))
    sq = _abs2(d)
    dof = subtract(_cast(_valid(a, axis, keepdims), _dtype(sq)), ddof if correction is None else correction)
    return divide(sum(sq, axis, keepdims=keepdims), _where(greater(dof, 0), dof, np.nan))


def _inexact_dtype(dtype, fname):
    if dtype is not None and not is_inexact(np.dtype(dtype)):
        raise TypeError(with_location(f"{fname}: dtype={np.dtype(dtype)} for an array that may hold NaN: NumPy raises "
                                      "(If a is inexact, then dtype must be inexact); give a float dtype"))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=None, mean=None, correction=None):
    if _integer(dtype) and not is_inexact(_dtype(a)):
        return std(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction)
    return _sqrt_or_zero(nanvar(a, axis, dtype, out, ddof, keepdims, where=where, mean=mean, correction=correction))


def average(a, axis=None, weights=None, returned=False, *, keepdims=False):
    a = _inexact(_array(a, "average"), "average")
    if weights is None:
        avg = mean(a, axis, keepdims=keepdims)
        count = np.asarray(_count(a, axis), _dtype(avg))
        return (avg, multiply(count, np.ones(_shape(avg), _dtype(avg)))) if returned else avg
    w = _array(weights, "average")
    w = _cast(w, _result_dtype("average", a, w))   # (NumPy's: the weights and their sum in the result's dtype)
    if _shape(w) != _shape(a):
        if axis is None or len(_shape(w)) != 1:
            raise ValueError(with_location(f"average: weights of shape {_shape(w)} differ from the array's {_shape(a)}; "
                                           "give 1-D weights with axis="))
        ax = _axis(axis, len(_shape(a)), "average")
        w = reshape(w, tuple(_shape(w)[0] if i == ax else 1 for i in range(len(_shape(a)))))
    total = sum(multiply(w, _cast(np.ones(_shape(a)), _dtype(a))) if _shape(w) != _shape(a) else w, axis, keepdims=keepdims)
    avg = divide(sum(multiply(a, w), axis, keepdims=keepdims), total)
    return (avg, total) if returned else avg


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    _reject("cov", fweights=fweights, aweights=aweights)
    x = _cast(_array(m, "cov"), np.result_type(_dtype(m), np.float64))   # (NumPy's: at least float64)
    if len(_shape(x)) == 1:
        x = reshape(x, (1, -1))
    elif not rowvar:
        x = transpose(x)
    if y is not None:
        yy = _cast(_array(y, "cov"), _dtype(x))
        yy = reshape(yy, (1, -1)) if len(_shape(yy)) == 1 else (yy if rowvar else transpose(yy))
        x = concatenate([x, yy], axis=0)
    if dtype is not None:
        x = astype(x, dtype)
    n = _shape(x)[1]
    ddof = (0 if bias else 1) if ddof is None else ddof
    d = subtract(x, mean(x, axis=1, keepdims=True))
    c = divide(bind(P.matmul, d, transpose(conj(d))), n - ddof)   # (X X^H: conjugated, as NumPy's)
    return squeeze(c) if _shape(c) == (1, 1) else c


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar, dtype=dtype)
    if len(_shape(c)) == 0:
        return divide(c, c)
    d = sqrt(real(diagonal(c)))
    c = divide(divide(c, expand_dims(d, 1)), expand_dims(d, 0))
    if is_complex(_dtype(c)):   # (NumPy clips each part)
        return _make_complex(minimum(maximum(real(c), -1), 1), minimum(maximum(imag(c), -1), 1))
    return minimum(maximum(c, -1), 1)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    _reject("trace", out=out)
    return sum(diagonal(_array(a, "trace"), offset, axis1, axis2), axis=-1, dtype=dtype)
