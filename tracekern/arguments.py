"""Concrete arguments and results at the API boundary: NumPy arrays, Python numbers and GPU device
arrays in (checked, with the argument named in errors), arrays out.

Device arrays (Numba's, or anything with __cuda_array_interface__: CuPy, PyTorch) stay on the device
for the cuda backend and are copied to the host for the others."""
from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from .errors import ShapeError, TracerLeakError, with_location
from .ir import MAX_RANK, SUPPORTED_DTYPES, Aval, Graph, is_inexact, rank_error
from .pytree import leaf_paths
from .trace import FlatArgs, Tracer, flatten_args, refuse_subclass, weak_flag


def fun_name(fun: Callable) -> str:
    return getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))


def fun_location(fun: Callable) -> str | None:
    """'file:line' where fun is defined (through functools.partial and tracekern's wrappers), or None."""
    seen = 0
    while seen < 20:
        seen += 1
        if isinstance(fun, functools.partial):
            fun = fun.func
        elif hasattr(fun, "__wrapped__"):
            fun = fun.__wrapped__
        elif hasattr(fun, "fun") and not hasattr(fun, "__code__"):   # (a tk.jit / tk.grad function)
            fun = fun.fun
        else:
            break
    code = getattr(fun, "__code__", None)
    return f"{code.co_filename}:{code.co_firstlineno}" if code is not None else None


def output_location(fun: Callable, graph: Graph, i: int) -> str | None:
    """The user's line that computed output i of graph (traced from fun), else where fun is defined."""
    v = graph.outputs[i]
    for e in graph.eqns:
        if v in e.outputs and e.source:
            return e.source
    return fun_location(fun)


def arg_name(fun: Callable, i: int) -> str:
    """How errors name positional argument i of fun: "argument 1 ('label')"."""
    try:
        params = list(inspect.signature(fun).parameters.values())
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            return f"argument {i} ('{params[i].name}')"
    except (TypeError, ValueError):
        pass
    return f"argument {i}"


def on_device(x: Any) -> bool:
    """A GPU array: a Numba device array (or its simulator's), or anything with
    __cuda_array_interface__ (CuPy, PyTorch)."""
    return hasattr(x, "__cuda_array_interface__") or (hasattr(x, "copy_to_host") and hasattr(x, "dtype"))


def device_view(x: Any) -> Any:
    """A Numba device array viewing the same memory (no copy)."""
    if hasattr(x, "copy_to_host"):
        return x
    from numba import cuda  # (an optional dependency: only device arrays get here)

    return cuda.as_cuda_array(x)


def leaf_to_array(fun: Callable, x: Any, where: str | Callable[[], str], device: bool = False) -> tuple[Any, bool]:
    """A concrete argument leaf as (array, weak): weak marks Python bool/int/float/complex (promote like scalars).
    GPU arrays stay on the device for a device backend (device=True), else are copied to the host.
    `where` names the leaf in errors (a function making the name: only an error pays for it)."""
    def named() -> str:
        return f"{where() if callable(where) else where} of {fun_name(fun)}"

    if isinstance(x, np.ndarray):
        if type(x) is not np.ndarray:
            refuse_subclass(x, named())
        arr, weak = (x if type(x) is np.ndarray else np.asarray(x)), False
    elif on_device(x):
        arr, weak = device_view(x), False
        if not device:
            arr = arr.copy_to_host()
    elif isinstance(x, np.generic):
        arr, weak = np.asarray(x), False
    elif isinstance(x, bool):   # (weak too: Python's arithmetic of bools is an int's, True + True is 2)
        arr, weak = np.asarray(x), True
    elif isinstance(x, int):
        if not np.iinfo(np.int64).min <= x <= np.iinfo(np.int64).max:
            raise OverflowError(f"{named()} is the Python integer {x}, out of bounds for int64 (as in "
                                "NumPy); pass a float, or split it")
        arr, weak = np.asarray(x, np.int64), weak_flag(x)
    elif isinstance(x, float):
        arr, weak = np.asarray(x, np.float64), True
    elif isinstance(x, complex):
        arr, weak = np.asarray(x, np.complex128), True
    elif isinstance(x, Tracer):
        raise TracerLeakError(f"{named()} is a traced value from a trace that has ended "
                              "(a leaked tracer); return values from traced functions instead")
    else:
        raise TypeError(f"{named()} is a {type(x).__name__} ({x!r:.60}), not an array: "
                        "traced functions take NumPy arrays, numbers, or tuples/lists/dicts of them. "
                        "Pass non-array values through static_argnums or a closure.")
    if not arr.dtype.isnative and isinstance(arr, np.ndarray):   # (a big-endian float64 is float64: NumPy's values)
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{named()} has dtype {arr.dtype}; supported dtypes are "
                        f"{', '.join(d.name for d in SUPPORTED_DTYPES)}. Convert it with .astype().")
    if len(arr.shape) > MAX_RANK:
        raise ShapeError(with_location(rank_error(arr.shape, named())))
    return arr, weak


def flatten_call(fun: Callable, args: tuple, device: bool = False, names: Callable[[int], str] | None = None) -> FlatArgs:
    """flatten_args for a call of `fun`: traced leaves are kept (a transform called inside a trace),
    concrete ones become arrays (on the device for a device backend), with errors naming the
    argument and the leaf's path in it (`names(i)`: how argument i is called; default arg_name)."""
    def leaf(x, i, path):
        if isinstance(x, Tracer):
            return x, x.aval, x.weak
        def where() -> str:   # (inspect.signature, for an error's message only: not on every call)
            return (names(i) if names else arg_name(fun, i)) + (f" at {path}" if path else "")
        arr, weak = leaf_to_array(fun, x, where, device)
        return arr, Aval(tuple(arr.shape), np.dtype(arr.dtype)), weak   # (a device array's shape may be a tuple subclass)

    return flatten_args(args, leaf)


def differentiated(fun: Callable, flat: FlatArgs, argnums: tuple[int, ...], check_float: bool) -> list[bool]:
    """Which leaves are differentiated: float leaves of the arguments in argnums. check_float: a
    non-float leaf there is a TypeError (integer and bool values are constants of differentiation)."""
    active = []
    for k, (aval, i) in enumerate(zip(flat.avals, flat.owner)):
        is_diff = i in argnums
        if is_diff and check_float and not is_inexact(aval.dtype):
            path = _leaf_path(flat, k)
            where = arg_name(fun, i) + (f" at {path}" if path else "")
            raise TypeError(f"cannot differentiate with respect to {where} of {fun_name(fun)}: its dtype is "
                            f"{aval.dtype}. Gradients are defined for float32/float64 and complex64/complex128 only; integer and bool "
                            "values are constants of differentiation (leave them out of argnums, or .astype(float)).")
        active.append(is_diff and is_inexact(aval.dtype))
    return active


def _leaf_path(flat: FlatArgs, k: int) -> str:
    i = flat.owner[k]
    first = flat.owner.index(i)
    return leaf_paths(flat.treedefs[i])[k - first]


def host(x: Any) -> np.ndarray:
    return device_view(x).copy_to_host() if on_device(x) else np.asarray(x)


def copied(x: Any) -> Any:
    """A result's own copy (a result that is an input, or an earlier result): on the host, or on the device for
    a device array."""
    if isinstance(x, np.ndarray):
        return np.array(x)
    if not on_device(x):
        return x
    from numba import cuda  # (an optional dependency: only device arrays get here)

    view = device_view(x)
    out = cuda.device_array(view.shape, view.dtype)
    out.copy_to_device(view)
    return out


def to_user(x: Any) -> Any:
    """A result as the user gets it: 0-d arrays as NumPy scalars, read-only views copied; device
    arrays (the cuda backend's results) as they are."""
    if not isinstance(x, np.ndarray):
        return x
    if x.ndim == 0:
        return x[()]
    return x if x.flags.writeable else np.array(x)
