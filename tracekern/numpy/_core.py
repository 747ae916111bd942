"""What every part of tk.numpy shares: reading operands (traced or constant), NumPy's promotion
(NEP 50: Python scalars are weak), axis normalisation, casts, and `bind`."""
from __future__ import annotations

import math

import numpy as np

from .. import primitives
from ..errors import ShapeError, with_location
from ..ir import SUPPORTED_DTYPES, is_complex, is_inexact
from ..primitives.core import REGISTRY
from ..trace import WIDE, ArrayOps, Tracer, bind, refuse_subclass

__all__ = ["P", "ShapeError", "Tracer", "bind", "with_location"]


class _Primitives:
    """P.<name>: a primitive by its Python name (P.slice_, P.logical_and) or its registered name."""

    def __getattr__(self, name: str):
        prim = getattr(primitives, name, None) or REGISTRY.get(name)
        if prim is None:
            raise AttributeError(f"no primitive {name!r}")
        return prim


P = _Primitives()


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape) if isinstance(x, (Tracer, np.ndarray, np.generic)) else np.shape(x)


def _dtype(x) -> np.dtype:
    if isinstance(x, (Tracer, np.ndarray, np.generic)):
        return x.dtype
    return np.asarray(x).dtype


def _ndim(x) -> int:
    return len(_shape(x))


def _size(x) -> int:
    return math.prod(_shape(x))


def traced(x) -> bool:
    return isinstance(x, Tracer)


def _check_operand(x, fname: str) -> None:
    if not isinstance(x, (Tracer, np.ndarray, np.generic, bool, int, float, complex)):
        raise TypeError(with_location(f"{fname}: expected an array or a number, got {type(x).__name__}"))
    refuse_subclass(x, f"an operand of {fname}")


def _holds_tracer(x) -> bool:
    """Whether x is a traced value or a (nested) list or tuple holding one."""
    return isinstance(x, Tracer) or isinstance(x, (list, tuple)) and any(_holds_tracer(v) for v in x)


def _array(x, fname: str = "tk.numpy"):
    """An operand as tracing reads it: a traced value or a number as it is, a NumPy array as it is, a
    list or tuple of numbers as a NumPy array (of traced values: stacked)."""
    if isinstance(x, (list, tuple)):
        if _holds_tracer(x):
            # (traced values in a list: np.array would need their values; stack them)
            return ArrayOps.numpy.stack([_array(v, fname) for v in x])
        return np.asarray(x)   # (nested too: a constant, whose values tracing can check, as index bounds)
    _check_operand(x, fname)
    return x


def _token(x):
    """What NumPy's dtype resolution should see for x: a dtype, or int/float for weak scalars."""
    if isinstance(x, Tracer):
        if not x.weak:
            return x.dtype
        x_dtype = x.dtype
        return {"f": float, "c": complex, "i": int}.get(x_dtype.kind, np.dtype(bool))
    if isinstance(x, (np.ndarray, np.generic)):  # before float: np.float64 subclasses float
        return x.dtype
    if isinstance(x, bool):
        return np.dtype(bool)
    if isinstance(x, (int, float, complex)):
        return type(x)
    return _dtype(x)


def _cast(x, dtype: np.dtype):
    """x as `dtype`: a convert equation for traced values, a typed constant otherwise."""
    dtype = np.dtype(dtype)
    if isinstance(x, Tracer):
        if x.weak == WIDE and dtype.kind in "iu" and dtype.itemsize < 8:
            raise OverflowError(with_location(
                f"a Python integer argument out of bounds for {dtype} meets an {dtype} array: NumPy 2 raises "
                f"OverflowError here (NEP 50: a Python int takes the array's dtype). Pass np.int64(value), or "
                f"cast the array first with .astype(np.int64)"))
        if x.dtype == dtype:
            return x
        if is_complex(x.dtype) and not is_complex(dtype):
            if dtype == np.bool_:   # (NumPy's truth of a complex number: z != 0)
                return bind(P.ne, x, np.zeros((), x.dtype))
            raise TypeError(with_location(
                f"a {x.dtype} value cannot become {dtype} implicitly (its imaginary part would be lost): take "
                "np.real(z), np.imag(z) or np.abs(z) first"))
        return bind(P.convert, x, dtype=dtype)
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
        if v is not None and v is not np._NoValue and v is not False:
            raise NotImplementedError(with_location(f"{fname}: the argument {k}= is not supported while tracing"))


def _axes(axis, ndim: int, fname: str) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if isinstance(a, (float, np.floating)):   # (NumPy reads an axis with operator.index)
            raise TypeError(with_location(f"{fname}: '{type(a).__name__}' object cannot be interpreted as an integer "
                                          f"(axis={a!r})"))
        a = int(a)
        if not -ndim <= a < ndim:
            raise ShapeError(with_location(f"{fname}: axis {a} is out of bounds for an array of dimension {ndim}"))
        out.append(a % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(with_location(f"{fname}: repeated axis in {axis}"))
    return tuple(sorted(out))


def _axis(axis, ndim: int, fname: str) -> int:
    """One axis, normalised (negative counts from the end)."""
    if isinstance(axis, (tuple, list)):
        raise TypeError(with_location(f"{fname}: takes a single axis, got {axis}"))
    return _axes(axis, ndim, fname)[0]


def _result_dtype(fname: str, *xs) -> np.dtype:
    tokens = [_token(x) for x in xs]
    return _check_dtype(np.result_type(*[t(0) if isinstance(t, type) else t for t in tokens]), fname)


def _promote(fname: str, *xs):
    """Cast operands to their common NumPy result dtype (Python scalars are weak, as in NumPy 2; a list or tuple
    is an array, as NumPy reads it)."""
    xs = [_array(x, fname) for x in xs]
    dtype = _result_dtype(fname, *xs)
    return [_cast(x, dtype) for x in xs]


def _inexact(x, fname: str):
    """x as a float (or complex): integers and bools become float64 (as NumPy's mean, var, interp...)."""
    _check_operand(x, fname)
    return x if is_inexact(_dtype(x)) else _cast(x, np.float64)


def _iota(n: int, shape: tuple[int, ...], axis: int, dtype=np.int64) -> np.ndarray:
    """0 .. n-1 along `axis` of an array of `shape` (a constant, broadcast)."""
    return np.broadcast_to(np.arange(n, dtype=dtype).reshape(tuple(n if i == axis else 1 for i in range(len(shape)))),
                           shape)
