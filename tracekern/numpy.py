"""The traced NumPy namespace (`tk.numpy`): NumPy functions built from primitives, with NumPy's
promotion and broadcasting rules, plus sigmoid, softplus, logsumexp, softmax, relu and gelu.

Tracers dispatch np.* calls here through __array_ufunc__ / __array_function__; on plain arrays
outside a trace the same functions evaluate eagerly."""
from __future__ import annotations

import builtins
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from . import primitives as P
from .errors import ShapeError, with_location
from .ir import SUPPORTED_DTYPES, is_float
from .primitives.core import REGISTRY
from .primitives.elementwise import Elementwise
from .trace import ArrayOps, Tracer, bind

# ----------------------------------------------------------------------------- helpers


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, (Tracer, np.ndarray, np.generic)) else np.shape(x)


def _dtype(x) -> np.dtype:
    if isinstance(x, (Tracer, np.ndarray, np.generic)):
        return x.dtype
    return np.asarray(x).dtype


def _check_operand(x, fname: str) -> None:
    if not isinstance(x, (Tracer, np.ndarray, np.generic, bool, int, float)):
        raise TypeError(with_location(f"{fname}: expected an array or a number, got {type(x).__name__}"))


def _token(x):
    """What NumPy's dtype resolution should see for x: a dtype, or int/float for weak scalars."""
    if isinstance(x, Tracer):
        if not x.weak:
            return x.dtype
        x_dtype = x.dtype
        return float if is_float(x_dtype) else (int if x_dtype.kind == "i" else np.dtype(bool))
    if isinstance(x, (np.ndarray, np.generic)):  # before float: np.float64 subclasses float
        return x.dtype
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, (int, float)):
        return type(x)
    return _dtype(x)


def _cast(x, dtype: np.dtype):
    """x as `dtype`: a convert equation for traced values, a typed constant otherwise."""
    dtype = np.dtype(dtype)
    if isinstance(x, Tracer):
        return x if x.dtype == dtype else bind(P.convert, x, dtype=dtype)
    return np.asarray(x, dtype=dtype)


def _check_dtype(dtype, fname: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in SUPPORTED_DTYPES:
        raise TypeError(with_location(
            f"{fname}: dtype {dtype} is not supported; tracekern supports "
            f"{', '.join(d.name for d in SUPPORTED_DTYPES)}"))
    return dtype


def _reject(fname: str, **kwargs) -> None:
    for k, v in kwargs.items():
        if v is not None and v is not np._NoValue:
            raise NotImplementedError(with_location(f"{fname}: the argument {k}= is not supported while tracing"))


def _axes(axis, ndim: int, fname: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        a = int(a)
        if not -ndim <= a < ndim:
            raise ShapeError(with_location(f"{fname}: axis {a} is out of bounds for an array of dimension {ndim}"))
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(with_location(f"{fname}: repeated axis in {axis}"))
    return tuple(sorted(out))


def _promote(fname: str, *xs):
    """Cast operands to their common NumPy result dtype (Python scalars are weak, as in NumPy 2)."""
    for x in xs:
        _check_operand(x, fname)
    tokens = [_token(x) for x in xs]
    dtype = _check_dtype(np.result_type(*[t(0) if isinstance(t, type) else t for t in tokens]), fname)
    return [_cast(x, dtype) for x in xs]


# ----------------------------------------------------------------------------- elementwise


def _ufunc_op(ufunc, prim, fname: str) -> Callable:
    def op(*args):
        if len(args) != ufunc.nin:
            raise TypeError(f"{fname} takes {ufunc.nin} operands, got {len(args)}")
        for a in args:
            _check_operand(a, fname)
        tokens = tuple(_token(a) for a in args)
        try:
            dtypes = ufunc.resolve_dtypes(tokens + (None,) * ufunc.nout)
        except (TypeError, ValueError, np.exceptions.DTypePromotionError):
            names = ", ".join(getattr(t, "name", getattr(t, "__name__", str(t))) for t in tokens)
            raise TypeError(with_location(f"np.{ufunc.__name__} is not defined for operands of dtype {names}")) from None
        _check_dtype(dtypes[-1], fname)
        return bind(prim, *[_cast(a, d) for a, d in zip(args, dtypes[: ufunc.nin])])

    op.__name__ = fname
    op.__doc__ = f"np.{ufunc.__name__}, traced: NumPy's promotion and broadcasting."
    return op


# every elementwise primitive of the table with a NumPy ufunc is np.<ufunc> on tracers
_BY_UFUNC: dict = {p.ufunc: p for p in REGISTRY.values() if isinstance(p, Elementwise) and p.ufunc is not None}


def _op(ufunc) -> Callable:
    return _ufunc_op(ufunc, _BY_UFUNC[ufunc], ufunc.__name__)


add = _op(np.add)
subtract = _op(np.subtract)
multiply = _op(np.multiply)
divide = true_divide = _op(np.true_divide)
power = _op(np.power)
negative = _op(np.negative)
absolute = abs = _op(np.absolute)
sign = _op(np.sign)
floor = _op(np.floor)
ceil = _op(np.ceil)
rint = _op(np.rint)


def round(a, decimals=0, out=None):  # noqa: A001 (np.round)
    """np.round / np.around for decimals=0 (half to even, like np.rint)."""
    _reject("round", out=out)
    if decimals != 0:
        raise NotImplementedError(with_location("np.round: only decimals=0 is supported while tracing; "
                                                "scale first, e.g. np.round(x * 100) / 100"))
    return rint(a)


around = round
maximum = _op(np.maximum)
minimum = _op(np.minimum)
exp = _op(np.exp)
log = _op(np.log)
log1p = _op(np.log1p)
expm1 = _op(np.expm1)
sqrt = _op(np.sqrt)
sin = _op(np.sin)
cos = _op(np.cos)
tan = _op(np.tan)
tanh = _op(np.tanh)
less = _op(np.less)
less_equal = _op(np.less_equal)
greater = _op(np.greater)
greater_equal = _op(np.greater_equal)
equal = _op(np.equal)
not_equal = _op(np.not_equal)


def _logical(prim, fname):
    def op(*args):
        for a in args:
            _check_operand(a, fname)
        return bind(prim, *[_cast(a, np.bool_) for a in args])

    op.__name__ = fname
    return op


logical_and = _logical(P.logical_and, "logical_and")
logical_or = _logical(P.logical_or, "logical_or")
logical_not = _logical(P.logical_not, "logical_not")

# the table's other elementwise ufuncs (arctan, sinh, ...): a new primitive needs no line here
for _ufunc in _BY_UFUNC:
    if _ufunc.__name__ not in globals():
        globals()[_ufunc.__name__] = _op(_ufunc)


def positive(x):
    return x


def square(x):
    return multiply(x, x)


def reciprocal(x):
    if not is_float(_dtype(x)):
        raise TypeError(with_location("np.reciprocal of an integer array is not supported; use 1.0 / x"))
    return divide(1, x)


def isnan(x):
    return not_equal(x, x)


def isinf(x):
    return equal(absolute(x), np.inf)


def isfinite(x):
    return less(absolute(x), np.inf)


def where(condition, x=None, y=None):
    """np.where(condition, x, y); the one-argument form (indices) is not traceable."""
    if x is None or y is None:
        raise NotImplementedError(with_location(
            "np.where(condition) with one argument returns data-dependent indices and cannot be "
            "traced; use np.where(condition, x, y)"))
    _check_operand(condition, "where")
    c = condition if _dtype(condition) == np.bool_ else not_equal(condition, 0)
    a, b = _promote("where", x, y)
    return bind(P.select, c, a, b)


def clip(a, a_min=np._NoValue, a_max=np._NoValue, out=None, *, min=np._NoValue, max=np._NoValue, **kwargs):
    """np.clip as minimum(maximum(a, a_min), a_max): either bound may be None."""
    _reject("clip", out=out)
    lo = min if a_min is np._NoValue else a_min
    hi = max if a_max is np._NoValue else a_max
    lo = None if lo is np._NoValue else lo
    hi = None if hi is np._NoValue else hi
    y = a
    if lo is not None:
        y = maximum(y, lo)
    if hi is not None:
        y = minimum(y, hi)
    return y


def astype(x, dtype, /, *, copy=True, device=None):
    dtype = _check_dtype(dtype, "astype")
    _check_operand(x, "astype")
    return _cast(x, dtype)


def stop_gradient(x):
    """Identity in the forward pass; no gradient flows through it."""
    return bind(P.stop_gradient, x)


# ----------------------------------------------------------------------------- reductions


def _reduce(prim, fname, a, axis, keepdims, promote_int):
    _check_operand(a, fname)
    shape = _shape(a)
    axes = _axes(axis, len(shape), fname)
    if promote_int and _dtype(a).kind in "bi":
        a = _cast(a, np.int64)
    y = bind(prim, a, axes=axes)
    if keepdims:
        y = bind(P.reshape, y, new_shape=tuple(1 if i in axes else s for i, s in enumerate(shape)))
    return y


def sum(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _reject("sum", out=out, initial=initial, where=where)
    if dtype is not None:
        a = astype(a, dtype)
    return _reduce(P.reduce_sum, "sum", a, axis, keepdims, promote_int=True)


def prod(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=None):
    _reject("prod", out=out, initial=initial, where=where)
    if dtype is not None:
        a = astype(a, dtype)
    return _reduce(P.reduce_prod, "prod", a, axis, keepdims, promote_int=True)


def max(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _reject("max", out=out, initial=initial, where=where)
    return _reduce(P.reduce_max, "max", a, axis, keepdims, promote_int=False)


def min(a, axis=None, out=None, keepdims=False, initial=None, where=None):
    _reject("min", out=out, initial=initial, where=where)
    return _reduce(P.reduce_min, "min", a, axis, keepdims, promote_int=False)


amax, amin = max, min


def mean(a, axis=None, dtype=None, out=None, keepdims=False, *, where=None):
    _reject("mean", out=out, where=where)
    _check_operand(a, "mean")
    if dtype is not None:
        a = astype(a, dtype)
    elif not is_float(_dtype(a)):
        a = _cast(a, np.float64)
    shape = _shape(a)
    count = math.prod(shape[i] for i in _axes(axis, len(shape), "mean"))
    return divide(_reduce(P.reduce_sum, "mean", a, axis, keepdims, promote_int=False), count)


# ----------------------------------------------------------------------------- shapes


def reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    if order != "C":
        raise NotImplementedError(with_location("reshape: only order='C' is supported"))
    shape = newshape if shape is None else shape
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
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
    ndim = len(_shape(a))
    perm = tuple(reversed(range(ndim))) if axes is None else tuple(int(x) % ndim if ndim else 0 for x in axes)
    if axes is not None and (len(perm) != ndim or sorted(perm) != list(range(ndim))):
        raise ShapeError(with_location(f"transpose: axes {tuple(axes)} do not match an array of shape {_shape(a)}"))
    if perm == tuple(range(ndim)):
        return a
    return bind(P.transpose, a, perm=perm)


def swapaxes(a, axis1, axis2):
    ndim = len(_shape(a))
    i, j = _axes(axis1, ndim, "swapaxes")[0], _axes(axis2, ndim, "swapaxes")[0]
    perm = list(range(ndim))
    perm[i], perm[j] = perm[j], perm[i]
    return transpose(a, perm)


def moveaxis(a, source, destination):
    ndim = len(_shape(a))
    src = [_axes(s, ndim, "moveaxis")[0] for s in (source if isinstance(source, (tuple, list)) else (source,))]
    dst = [_axes(d, ndim, "moveaxis")[0] for d in (destination if isinstance(destination, (tuple, list)) else (destination,))]
    order = [i for i in range(ndim) if i not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return transpose(a, order)


def broadcast_to(array, shape, subok=False):
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
    if _shape(array) == shape:
        return array
    return bind(P.broadcast_to, array, shape=shape)


def expand_dims(a, axis):
    shape = _shape(a)
    axes = _axes(axis, len(shape) + (len(axis) if isinstance(axis, (tuple, list)) else 1), "expand_dims")
    it = iter(shape)
    new = tuple(1 if i in axes else next(it) for i in range(len(shape) + len(axes)))
    return bind(P.reshape, a, new_shape=new)


def squeeze(a, axis=None):
    shape = _shape(a)
    axes = tuple(i for i, s in enumerate(shape) if s == 1) if axis is None else _axes(axis, len(shape), "squeeze")
    for i in axes:
        if shape[i] != 1:
            raise ShapeError(with_location(f"squeeze: cannot select axis {i} of shape {shape}: its size is not 1"))
    if not axes:
        return a
    return bind(P.reshape, a, new_shape=tuple(s for i, s in enumerate(shape) if i not in axes))


def concatenate(arrays, axis=0, out=None, dtype=None, casting=None):
    _reject("concatenate", out=out, casting=casting)
    arrays = list(arrays)
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
    if len(arrays) == 1:
        return arrays[0]
    return bind(P.concatenate, *arrays, axis=_axes(axis, ndim, "concatenate")[0])


def stack(arrays, axis=0, out=None, dtype=None, casting=None):
    _reject("stack", out=out, casting=casting)
    arrays = list(arrays)
    shapes = {_shape(x) for x in arrays}
    if len(shapes) != 1:
        raise ShapeError(with_location(f"stack: all arrays must have the same shape, got {sorted(shapes)}"))
    return concatenate([expand_dims(x, axis) for x in arrays], axis=axis, dtype=dtype)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 0, dtype, shape=shape)


def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    return full_like(a, 1, dtype, shape=shape)


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    if isinstance(fill_value, Tracer):
        return broadcast_to(astype(fill_value, dtype or _dtype(a)), shape or _shape(a))
    dtype = _check_dtype(dtype or _dtype(a), "full_like")
    return bind(P.full, shape=tuple(shape or _shape(a)), dtype=dtype, value=np.asarray(fill_value, dtype).item())


def copy(a, order="K", subok=False):
    return a


def shape(a):
    return _shape(a)


def ndim(a):
    return len(_shape(a))


def size(a, axis=None):
    s = _shape(a)
    return math.prod(s) if axis is None else s[axis]


def getitem(x, idx):
    """x[idx] for static basic indices: integers, slices, None (np.newaxis) and Ellipsis."""
    idx = idx if isinstance(idx, tuple) else (idx,)
    shape = _shape(x)
    for it in idx:
        if isinstance(it, (Tracer, np.ndarray, list)) or isinstance(it, (bool, np.bool_)):
            raise NotImplementedError(with_location(
                f"indexing with {type(it).__name__} (advanced or boolean indexing) is not supported while "
                "tracing: use static integers and slices, or np.where(mask, x, 0) for masks"))
        if not (it is None or it is Ellipsis or isinstance(it, (slice, int, np.integer))):
            raise TypeError(with_location(f"invalid index {it!r} of type {type(it).__name__}"))
    if builtins.sum(it is Ellipsis for it in idx) > 1:
        raise IndexError(with_location("an index can only have a single ellipsis ('...')"))
    n_real = builtins.sum(1 for it in idx if it is not None and it is not Ellipsis)
    if n_real > len(shape):
        raise IndexError(with_location(f"too many indices: {n_real} for an array of shape {shape}"))
    fill = (slice(None),) * (len(shape) - n_real)
    if Ellipsis in [it for it in idx if not isinstance(it, (slice,))]:
        k = [i for i, it in enumerate(idx) if it is Ellipsis][0]
        idx = idx[:k] + fill + idx[k + 1:]
    else:
        idx = idx + fill
    index, out_shape, dim = [], [], 0
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
        else:
            i = int(it)
            if not -size_ <= i < size_:
                raise IndexError(with_location(f"index {i} is out of bounds for axis {dim} with size {size_}"))
            i %= size_
            index.append((i, i + 1, 1))
        dim += 1
    y = x
    if any(ix != (0, s, 1) for ix, s in zip(index, shape)):
        y = bind(P.slice_, x, index=tuple(index))
    if _shape(y) != tuple(out_shape):
        y = bind(P.reshape, y, new_shape=tuple(out_shape))
    return y


# ----------------------------------------------------------------------------- matmul


def matmul(a, b, /, out=None, **kwargs):
    """a @ b with NumPy's rules: 1-D operands promoted and then dropped, batch dims broadcast."""
    _reject("matmul", out=out)
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        raise ShapeError(with_location(f"matmul: operands must be at least 1-D, got shapes {sa} and {sb}; use * for scalars"))
    a, b = _promote("matmul", a, b)
    a2 = reshape(a, (1,) + sa) if len(sa) == 1 else a
    b2 = reshape(b, sb + (1,)) if len(sb) == 1 else b
    s2a, s2b = _shape(a2), _shape(b2)
    if s2a[-1] != s2b[-2]:
        raise ShapeError(with_location(
            f"matmul: shapes {sa} and {sb} do not align: the last axis of the first ({s2a[-1]}) must equal "
            f"the {'only' if len(sb) == 1 else 'second-to-last'} axis of the second ({s2b[-2]}). "
            "Transpose an operand (x.T) or check its shape."))
    try:
        batch = tuple(np.broadcast_shapes(s2a[:-2], s2b[:-2]))
    except ValueError:
        raise ShapeError(with_location(f"matmul: batch dimensions of shapes {sa} and {sb} do not broadcast")) from None
    a2 = broadcast_to(a2, batch + s2a[-2:])
    b2 = broadcast_to(b2, batch + s2b[-2:])
    y = bind(P.matmul, a2, b2)
    out_shape = batch + (s2a[-2],) * (len(sa) > 1) + (s2b[-1],) * (len(sb) > 1)
    return reshape(y, out_shape)


def dot(a, b, out=None):
    _reject("dot", out=out)
    sa, sb = _shape(a), _shape(b)
    if not sa or not sb:
        return multiply(a, b)
    if len(sa) > 2 or len(sb) > 2:
        raise NotImplementedError(with_location("np.dot of arrays with more than 2 dimensions is not supported; use np.matmul / @"))
    return matmul(a, b)


# ----------------------------------------------------------------------------- extras (tk.numpy)


def _minus_abs(x):
    # -|x| written per branch (slope -1 for x >= 0, +1 below), so no branch has a zero subgradient at 0
    return where(greater_equal(x, 0), negative(x), x)


def sigmoid(x):
    """1 / (1 + exp(-x)), stable for large |x| in value and gradient (exp only of -|x|)."""
    z = exp(_minus_abs(x))
    return where(greater_equal(x, 0), divide(1, add(1, z)), divide(z, add(1, z)))


def softplus(x):
    """log(1 + exp(x)), stable: max(x, 0) + log1p(exp(-|x|)); gradient sigmoid(x)."""
    return add(where(greater_equal(x, 0), x, zeros_like(x)), log1p(exp(_minus_abs(x))))


def relu(x):
    """max(x, 0) with gradient 0 at x == 0 (as JAX and PyTorch)."""
    return where(greater(x, 0), x, zeros_like(x))


def gelu(x):
    """GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    inner = multiply(math.sqrt(2.0 / math.pi), add(x, multiply(0.044715, multiply(x, multiply(x, x)))))
    return multiply(multiply(0.5, x), add(1, tanh(inner)))


def logsumexp(a, axis=None, keepdims=False):
    """log(sum(exp(a), axis)), shifted by the (gradient-stopped) maximum for stability."""
    m = stop_gradient(max(a, axis=axis, keepdims=True))
    m = where(isfinite(m), m, zeros_like(m))
    y = add(log(sum(exp(subtract(a, m)), axis=axis, keepdims=True)), m)
    return y if keepdims else squeeze(y, axis=_axes(axis, len(_shape(a)), "logsumexp"))


def softmax(x, axis=-1):
    e = exp(subtract(x, stop_gradient(max(x, axis=axis, keepdims=True))))
    return divide(e, sum(e, axis=axis, keepdims=True))


def log_softmax(x, axis=-1):
    return subtract(x, logsumexp(x, axis=axis, keepdims=True))


# ----------------------------------------------------------------------------- dispatch tables

UFUNCS: dict[Any, Callable] = {u: globals()[u.__name__] for u in _BY_UFUNC}
UFUNCS.update({
    np.positive: positive, np.square: square, np.reciprocal: reciprocal, np.matmul: matmul,
    np.isnan: isnan, np.isinf: isinf, np.isfinite: isfinite,
})
UFUNC_REDUCE: dict[Any, Callable] = {np.add: sum, np.multiply: prod, np.maximum: max, np.minimum: min}

FUNCTIONS: dict[Any, Callable] = {
    np.sum: sum, np.prod: prod, np.max: max, np.min: min, np.amax: max, np.amin: min,
    np.mean: mean, np.round: round, np.around: around, np.reshape: reshape, np.ravel: ravel, np.transpose: transpose,
    np.swapaxes: swapaxes, np.moveaxis: moveaxis, np.broadcast_to: broadcast_to,
    np.expand_dims: expand_dims, np.squeeze: squeeze, np.concatenate: concatenate,
    np.stack: stack, np.where: where, np.clip: clip, np.dot: dot, np.matmul: matmul,
    np.zeros_like: zeros_like, np.ones_like: ones_like, np.full_like: full_like,
    np.copy: copy, np.shape: shape, np.ndim: ndim, np.size: size,
}
if hasattr(np, "astype"):
    FUNCTIONS[np.astype] = astype


def apply_ufunc(ufunc, method: str, inputs, kwargs):
    if kwargs.get("out") is not None:
        raise TypeError(with_location(f"np.{ufunc.__name__}(..., out=...) cannot write into a traced array; "
                                      "assign the result instead"))
    extra = {k: v for k, v in kwargs.items() if k != "out"}
    if method == "__call__":
        fn = UFUNCS.get(ufunc)
        if fn is not None and not extra:
            return fn(*inputs)
        if fn is not None:
            raise NotImplementedError(with_location(
                f"np.{ufunc.__name__}: keyword arguments {sorted(extra)} are not supported while tracing"))
        supported = ", ".join(sorted(u.__name__ for u in UFUNCS))
        raise NotImplementedError(with_location(f"np.{ufunc.__name__} is not supported on traced arrays. Supported ufuncs: {supported}"))
    if method == "reduce" and ufunc in UFUNC_REDUCE:
        axis = extra.pop("axis", 0)
        keepdims = extra.pop("keepdims", False)
        if extra:
            raise NotImplementedError(with_location(f"np.{ufunc.__name__}.reduce: arguments {sorted(extra)} are not supported"))
        return UFUNC_REDUCE[ufunc](inputs[0], axis=axis, keepdims=keepdims)
    raise NotImplementedError(with_location(f"np.{ufunc.__name__}.{method} is not supported on traced arrays"))


def apply_array_function(func, args, kwargs):
    fn = FUNCTIONS.get(func)
    if fn is None:
        supported = ", ".join(sorted({f"np.{f.__name__}" for f in FUNCTIONS}))
        raise NotImplementedError(with_location(
            f"np.{func.__name__} is not supported on traced arrays. Supported functions: {supported}; "
            f"ufuncs: {', '.join(sorted(u.__name__ for u in UFUNCS))}; and tk.numpy extras: "
            "sigmoid, softplus, relu, gelu, logsumexp, softmax, log_softmax"))
    return fn(*args, **kwargs)


# Tracers' operators and NumPy protocols (trace.ArrayOps) dispatch to this module
ArrayOps.numpy = sys.modules[__name__]
