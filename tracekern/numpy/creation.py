"""Arrays made inside traces: zeros, ones, full, eye, arange, linspace, ... and the *_like family.

With static arguments they are constants of the graph (NumPy makes them; a const or full equation
holds them). A traced fill value, start or stop makes them traced values (linspace(0, t, 5))."""
from __future__ import annotations

import numpy as np

from ._core import P, Tracer, _cast, _check_dtype, _dtype, _result_dtype, _shape, bind, with_location
from .ufuncs import absolute, add, divide, floor, log10, multiply, power, sign, subtract, where


def _shape_arg(shape) -> tuple[int, ...]:
    if isinstance(shape, Tracer):
        raise TypeError(with_location("an array's shape must be static (Python ints), not a traced value"))
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def full(shape, fill_value, dtype=None, order="C", *, device=None, like=None):
    """np.full; a traced fill value is broadcast (its dtype unless dtype is given)."""
    shape = _shape_arg(shape)
    if isinstance(fill_value, Tracer):
        value = fill_value if dtype is None else _cast(fill_value, dtype)
        return bind(P.broadcast_to, value, shape=shape) if _shape(value) != shape else value
    dtype = _check_dtype(np.asarray(fill_value).dtype if dtype is None else dtype, "full")
    return _filled(shape, fill_value, dtype)


def _filled(shape: tuple[int, ...], fill_value, dtype: np.dtype):
    """A constant array of `shape` filled with a static value (an array value broadcasts, as NumPy's)."""
    if np.ndim(fill_value):
        return np.full(shape, fill_value, dtype)
    return bind(P.full, shape=shape, dtype=dtype, value=np.asarray(fill_value, dtype).item())


def zeros(shape, dtype=float, order="C", *, device=None, like=None):
    return full(shape, 0, dtype)


def ones(shape, dtype=None, order="C", *, device=None, like=None):
    return full(shape, 1, float if dtype is None else dtype)


empty = zeros   # (an empty array's contents are unspecified: zeros are a valid choice)


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    if isinstance(fill_value, Tracer):
        value = _cast(fill_value, dtype or _dtype(a))
        target = tuple(shape or _shape(a))
        return bind(P.broadcast_to, value, shape=target) if _shape(value) != target else value
    dtype = _check_dtype(dtype or _dtype(a), "full_like")
    return _filled(_shape_arg(_shape(a) if shape is None else shape), fill_value, dtype)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 0, dtype, shape=shape)


def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 1, dtype, shape=shape)


empty_like = zeros_like


def eye(N, M=None, k=0, dtype=float, order="C", *, device=None, like=None):
    return np.eye(N, M, k, dtype=_check_dtype(dtype, "eye"))


def identity(n, dtype=None, *, like=None):
    return np.identity(n, dtype=_check_dtype(float if dtype is None else dtype, "identity"))


def tri(N, M=None, k=0, dtype=float, *, like=None):
    return np.tri(N, M, k, dtype=_check_dtype(dtype, "tri"))


def arange(*args, dtype=None, device=None, like=None):
    if any(isinstance(a, Tracer) for a in args):
        raise TypeError(with_location("np.arange with a traced bound: its length would depend on the data. Use "
                                      "static bounds, e.g. np.arange(n) * step + start with a traced start/step"))
    return np.arange(*args, dtype=dtype)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, *, device=None):
    """np.linspace (NumPy's formula: start + i * step, the last point exactly stop); start and stop
    may be traced, scalars or arrays that broadcast."""
    num = int(num)
    div = (num - 1) if endpoint else num
    dt = _result_dtype("linspace", start, stop, float(num))
    start_, stop_ = _cast(start, dt), _cast(stop, dt)
    shape = tuple(np.broadcast_shapes(_shape(start_), _shape(stop_)))
    frac = np.arange(num, dtype=dt).reshape((num,) + (1,) * len(shape))
    delta = subtract(stop_, start_)
    step = divide(delta, div) if div > 0 else np.nan   # (NumPy's step of 0 or 1 points: the Python float nan)
    y = add(multiply(frac, step if div > 0 else delta), start_)
    if endpoint and num > 1:
        last = np.zeros((num,) + (1,) * len(shape), bool)
        last[-1] = True
        y = where(last, stop_, y)
    if axis != 0:
        y = moveaxis_(y, 0, axis)
    if dtype is not None:
        dtype = _check_dtype(dtype, "linspace")
        y = _cast(floor(y) if dtype.kind in "iu" else y, dtype)
    return (y, step) if retstep else y


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    y = power(base, linspace(start, stop, num, endpoint, axis=axis))
    return _cast(y, dtype) if dtype is not None else y


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    """Log-spaced from start to stop (both of one sign), the ends exactly start and stop."""
    dt = _result_dtype("geomspace", start, stop, float(num), np.zeros((), np.float64))   # (NumPy's: at least float64)
    start_, stop_ = _cast(start, dt), _cast(stop, dt)
    y = multiply(sign(start_), power(10.0, linspace(log10(absolute(start_)), log10(absolute(stop_)), num, endpoint)))
    shape = _shape(y)[1:]
    ends = np.zeros((num,) + (1,) * len(shape), bool)
    ends[0] = True
    y = where(ends, start_, y)
    if endpoint and num > 1:
        ends = np.zeros_like(ends)
        ends[-1] = True
        y = where(ends, stop_, y)
    if axis != 0:
        y = moveaxis_(y, 0, axis)
    return _cast(y, dtype) if dtype is not None else y


def moveaxis_(y, source, destination):
    """(np.moveaxis for linspace's axis=, without the shapes module, which sits above this one)."""
    nd = len(_shape(y))
    order = [i for i in range(nd) if i != source]
    order.insert(destination % nd, source)
    return bind(P.transpose, y, perm=tuple(order))


def indices(dimensions, dtype=int, sparse=False):
    return np.indices(dimensions, dtype=dtype, sparse=sparse)
