"""The traced NumPy namespace (`tk.numpy`): NumPy's functions built from primitives, with NumPy's
promotion and broadcasting rules, plus sigmoid, softplus, logsumexp, softmax, relu, gelu and top_k.

Tracers dispatch np.* calls here through __array_ufunc__ / __array_function__ (the tables UFUNCS
and FUNCTIONS); on plain arrays outside a trace the same functions evaluate eagerly. The parts:
ufuncs (elementwise), creation, shapes, reductions, indexing (gathers, tk.at), contractions
(einsum), scans, sorting, linalg (tk.numpy.linalg) and extras. A NumPy function that is not
supported raises NotImplementedError naming it, with the nearest supported alternative."""
from __future__ import annotations

import difflib
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import numpy_call, traced_fill_error, with_location
from ..trace import ArrayOps
from . import contractions, creation, extras, fft, indexing, linalg, reductions, scans, shapes, sorting, special, ufuncs
from ._core import _check_dtype
from .indexing import at, getitem  # noqa: F401 (tk.at; x[idx] on tracers)
from .scans import accumulate
from .special import SCIPY_FUNCTIONS  # noqa: F401 (trace.Tracer's advice for SciPy's Python functions)
from .ufuncs import inplace_result  # noqa: F401 (x += y on tracers)

# the names each part defines for users (helpers start with "_" or are listed here)
_PARTS = (ufuncs, creation, shapes, reductions, indexing, contractions, scans, sorting, extras)
_HELPERS = {"traced", "inplace_result", "zeros_like_of", "negative_", "moveaxis_", "builtins_any_nonzero", "accumulate", "at", "getitem"}


def _public(module) -> dict[str, Callable]:
    return {k: v for k, v in vars(module).items()
            if not k.startswith("_") and k not in _HELPERS and callable(v) and not isinstance(v, type)
            and getattr(v, "__module__", "").startswith(__name__)}


NAMES: dict[str, Callable] = {}
for _part in _PARTS:
    NAMES.update(_public(_part))
globals().update(NAMES)   # tk.numpy.sum, tk.numpy.einsum, ... (NumPy's names, builtins' included)
EXTRAS = ("sigmoid", "softplus", "relu", "gelu", "logsumexp", "softmax", "log_softmax", "top_k", "stop_gradient")

# ----------------------------------------------------------------------------- dispatch tables

UFUNCS: dict[Any, Callable] = dict(ufuncs.UFUNCS)
UFUNCS.update({np.matmul: contractions.matmul})
for _name in ("vecdot", "matvec", "vecmat"):   # (NumPy 2's gufuncs)
    if isinstance(getattr(np, _name, None), np.ufunc):
        UFUNCS[getattr(np, _name)] = getattr(contractions, _name)
UFUNC_REDUCE: dict[Any, Callable] = {np.add: reductions.sum, np.multiply: reductions.prod, np.maximum: reductions.max,
                                     np.minimum: reductions.min, np.logical_and: reductions.all,
                                     np.logical_or: reductions.any}

FUNCTIONS: dict[Any, Callable] = {}
for _name, _fn in NAMES.items():
    _np_fn = getattr(np, _name, None)
    if _np_fn is not None and not isinstance(_np_fn, np.ufunc) and callable(_np_fn) and _name not in EXTRAS:
        FUNCTIONS[_np_fn] = _fn
for _name in linalg.__all__:
    if hasattr(np.linalg, _name):
        FUNCTIONS[getattr(np.linalg, _name)] = getattr(linalg, _name)
for _name in fft.__all__:
    FUNCTIONS[getattr(np.fft, _name)] = getattr(fft, _name)
FUNCTIONS[np.i0] = special.i0   # (NumPy's own modified Bessel function, as scipy.special.i0)

# Not traceable, and what to write instead (data-dependent shapes, in-place writes, complex results)
_SHAPE = "its result's shape depends on the data, which tracing cannot know"
_INPLACE = ("it writes into its argument in place; traced arrays are values: use tk.at(x)[idx].set(v) (or .add, "
            ".multiply, .min, .max), which returns the updated array")
ALTERNATIVES: dict[str, str] = {
    "unique": f"{_SHAPE}; np.sort(x) keeps every value, and (x[..., None] == values).sum(...) counts given values",
    "nonzero": f"{_SHAPE}; use np.where(cond, x, 0), or a mask in tk.at(x)[mask].set(v)",
    "argwhere": f"{_SHAPE}; use np.where(cond, x, 0)",
    "flatnonzero": f"{_SHAPE}; use np.where(cond, x, 0)",
    "trim_zeros": _SHAPE,
    "setdiff1d": _SHAPE, "union1d": _SHAPE, "intersect1d": _SHAPE, "setxor1d": _SHAPE,
    "bincount": "use tk.at(np.zeros(n))[x].add(1) with a static length n",
    "histogram": "use idx = np.searchsorted(edges, x, side='right') - 1, then tk.at(np.zeros(bins))[idx].add(1)",
    "put": _INPLACE, "place": _INPLACE, "putmask": _INPLACE, "copyto": _INPLACE, "fill_diagonal": _INPLACE,
    "put_along_axis": _INPLACE,
    "lexsort": "use np.argsort on one combined key, or two stable np.argsort calls (last key first)",
    "isin": "use (x[..., None] == np.asarray(values)).any(-1)",
    "apply_along_axis": "write the function with array operations along an axis, or use tk.scan for a loop",
    "vectorize": "write the function with array operations (they are elementwise already), or use tk.scan",
    "polyfit": "use np.linalg.pinv(np.vander(x, deg + 1)) @ y",
    "allclose": "it returns a Python bool, which needs the values: use np.all(np.isclose(a, b)) (a traced bool)",
    "array_equal": "it returns a Python bool, which needs the values: use np.all(a == b) (a traced bool)",
    "frexp": "use np.log2(np.abs(x)) and np.floor for the exponent",
    "real_if_close": "its result's dtype depends on the values (real only where every imaginary part is tiny), which "
                     "tracing cannot know: use np.real(z), having checked np.abs(np.imag(z)) yourself",
    "sort_complex": "complex numbers have no order that tracekern traces (NumPy's is lexicographic): sort by "
                    "np.abs(z) or z.real (np.argsort of it, then np.take_along_axis)",
    "linalg.lstsq": "use np.linalg.pinv(a) @ b (or np.linalg.solve(a.T @ a, a.T @ b) for full-rank a)",
    "linalg.tensorsolve": "reshape to a matrix and use np.linalg.solve",
    "linalg.tensorinv": "reshape to a matrix and use np.linalg.inv",
}


# advice for a whole module of functions that are not traced (by the public module's name, numpy's as "np")
MODULE_ADVICE: dict[str, str] = {
    "np.fft": "tk.numpy.fft traces fft/ifft, rfft/irfft, fft2/ifft2, rfft2/irfft2, fftn/ifftn, rfftn/irfftn, hfft/ihfft, "
              "fftfreq/rfftfreq and fftshift/ifftshift",
    "np.random": "draw random numbers with tk.random (counter-based: tk.random.key, split, uniform, normal), or "
                 "pass NumPy's draws in as arguments",
    "scipy.special": "tracekern traces scipy.special's " + ", ".join(sorted(special.SCIPY_UFUNCS)) + " (and digamma), and "
                     "tk.scipy.special has " + ", ".join(special.SCIPY_FUNCTIONS) + " with SciPy's signatures; write "
                     "others with those and np.log / np.exp / np.tanh",
}


def _public_module(module: str) -> str:
    """A module's public name (its path up to the first private part), NumPy's written "np"."""
    parts = []
    for part in module.split("."):
        if part.startswith("_"):
            break
        parts.append(part)
    name = ".".join(parts) or module
    return "np" + name[len("numpy"):] if name == "numpy" or name.startswith("numpy.") else name


def _qualname(func) -> str:
    """The name a user wrote for a NumPy or SciPy function or ufunc: np.unique, np.fft.ifft,
    np.linalg.eig, scipy.special.psi (a ufunc has no module: found in the modules that may hold it)."""
    name = getattr(func, "__name__", str(func))
    if isinstance(func, np.ufunc):
        if getattr(np, name, None) is func:
            return f"np.{name}"
        for module in ("scipy.special",):
            if getattr(sys.modules.get(module), name, None) is func:
                return f"{module}.{name}"
        return f"the ufunc {name}"
    return f"{_public_module(getattr(func, '__module__', '') or 'numpy')}.{name}"


def _unsupported(qualname: str, kind: str) -> NotImplementedError:
    """The error for a function the user called (its public name, np.fft.ifft): what to do instead,
    or the closest supported names of the same module."""
    module, _, name = qualname.rpartition(".")
    key = name if module == "np" else qualname.removeprefix("np.")
    advice = ALTERNATIVES.get(key) or MODULE_ADVICE.get(module)
    if advice is None and module in ("np", "np.linalg"):
        known = sorted(set(NAMES) | {f"linalg.{n}" for n in linalg.__all__} | {u.__name__ for u in UFUNCS})
        close = difflib.get_close_matches(key, known, n=4, cutoff=0.6)
        advice = f"the closest supported: {', '.join('np.' + c for c in close)}" if close else None
    advice = advice or "see the README's 'What can be traced' for the supported names"
    return NotImplementedError(with_location(
        f"{qualname} is not supported on traced arrays ({kind}): {advice}. tk.numpy supports {len(FUNCTIONS)} NumPy "
        f"functions and {len(UFUNCS)} ufuncs (the README's 'What can be traced' lists them), and the extras "
        f"{', '.join(EXTRAS)}"))


def apply_ufunc(ufunc, method: str, inputs, kwargs):
    if kwargs.get("out") is not None:
        raise TypeError(with_location(f"np.{ufunc.__name__}(..., out=...) cannot write into a traced array; "
                                      "assign the result instead"))
    extra = {k: v for k, v in kwargs.items() if k != "out"}
    fn = UFUNCS.get(ufunc) or special.scipy_ufunc(ufunc)
    if method == "__call__":
        if fn is None:
            raise _unsupported(_qualname(ufunc), "ufunc")
        dtype = extra.pop("dtype", None)
        gufunc_kwargs = {"axis": extra.pop("axis")} if ufunc is getattr(np, "vecdot", None) and "axis" in extra else {}
        if extra:
            raise NotImplementedError(with_location(
                f"np.{ufunc.__name__}: keyword arguments {sorted(extra)} are not supported while tracing"))
        if dtype is not None:
            inputs = [ufuncs.astype(x, _check_dtype(dtype, ufunc.__name__)) for x in inputs]
        return fn(*inputs, **gufunc_kwargs)
    if method == "reduce" and ufunc in UFUNC_REDUCE:
        axis = extra.pop("axis", 0)
        keepdims = extra.pop("keepdims", False)
        if extra:
            raise NotImplementedError(with_location(f"np.{ufunc.__name__}.reduce: arguments {sorted(extra)} are not supported"))
        return UFUNC_REDUCE[ufunc](inputs[0], axis=axis, keepdims=keepdims)
    if method == "accumulate":
        return accumulate(ufunc, inputs[0], axis=extra.pop("axis", 0), dtype=extra.pop("dtype", None))
    if method == "outer" and fn is not None and ufunc.nin == 2:
        a, b = inputs
        na = len(np.shape(a)) if not hasattr(a, "shape") else len(a.shape)
        nb = len(np.shape(b)) if not hasattr(b, "shape") else len(b.shape)
        return fn(shapes.reshape(a, tuple(a.shape if hasattr(a, "shape") else np.shape(a)) + (1,) * nb),
                  shapes.reshape(b, (1,) * na + tuple(b.shape if hasattr(b, "shape") else np.shape(b))))
    if method == "at":
        raise TypeError(with_location(
            f"np.{ufunc.__name__}.at writes into its first argument in place; traced arrays are values: use "
            f"tk.at(x)[idx].{ {'add': 'add', 'multiply': 'multiply', 'minimum': 'min', 'maximum': 'max'}.get(ufunc.__name__, 'set') }(v), "
            "which returns the updated array (repeated indices accumulate, as in np.add.at)"))
    raise NotImplementedError(with_location(f"np.{ufunc.__name__}.{method} is not supported on traced arrays"))


def apply_array_function(func, args, kwargs):
    fn = FUNCTIONS.get(func)
    if fn is None:
        if func is np.copyto and numpy_call() == "full":   # (np.full(shape, traced, dtype=) copies into its array)
            raise traced_fill_error(getattr(args[1] if len(args) > 1 else kwargs.get("src"), "aval", "a traced value"))
        raise _unsupported(_qualname(func), "function")
    return fn(*args, **kwargs)


# Tracers' operators and NumPy protocols (trace.ArrayOps) dispatch to this module
ArrayOps.numpy = sys.modules[__name__]
