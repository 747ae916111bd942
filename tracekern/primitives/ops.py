"""IR-building functions for transform rules (VJPs): each emits equations into the builder that its
operands belong to, passed along explicitly with the values, never found in an ambient trace.

`ops.<name>(*operands, **params)` emits the primitive registered as <name> (ops.mul, ops.reshape,
ops.cosh, ...; Python keywords and the NumPy-style names have aliases: logical_and, power,
absolute, slice_). Python numbers among the operands are weak literals: they take the dtype of
the operands that are values. The composites below (zeros_like, unbroadcast, ...) are the few
shapes of code that several rules share."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .core import REGISTRY

_ALIASES = {"logical_and": "and", "logical_or": "or", "logical_not": "not", "power": "pow", "absolute": "abs",
            "slice_": "slice", "while_": "while", "print_": "print"}


def _builder(args) -> Any:
    for a in args:
        b = getattr(a, "builder", None)
        if b is not None:
            return b
    raise TypeError("ops: no operand is a value being built; an op needs one to know its graph")


def emit(prim, *args, **params):
    """Emit `prim` on `args` into their builder; returns its output (a tuple if it has several)."""
    b = _builder(args)
    dtype = next(a.aval.dtype for a in args if hasattr(a, "aval"))
    args = [np.asarray(a, dtype=dtype) if isinstance(a, (int, float, complex)) and not isinstance(a, bool) else a
            for a in args]
    return b.bind(prim, *args, **params)


def __getattr__(name: str) -> Callable:
    prim = REGISTRY.get(_ALIASES.get(name, name))
    if prim is None:
        raise AttributeError(f"tracekern.primitives.ops has no op {name!r}: no primitive of that name")
    return lambda *args, **params: emit(prim, *args, **params)


# ----------------------------------------------------------------------------- composites


def full_like(x, value, shape: tuple[int, ...] | None = None, dtype=None):
    """An array of x's dtype and shape (unless given) filled with `value`, in x's graph."""
    if dtype is not None:
        value = np.asarray(value, dtype).item()
    return x.builder.bind(REGISTRY["full"], shape=tuple(x.shape if shape is None else shape),
                          dtype=x.dtype if dtype is None else np.dtype(dtype), value=value)


def constant(x, value):
    """A constant array (any shape and dtype) in x's graph."""
    return x.builder.bind(REGISTRY["const"], value=np.asarray(value))


def zeros_like(x):
    """Zeros of x's shape and dtype (the cotangent of a value nothing flows into)."""
    return full_like(x, np.asarray(0, x.dtype).item())


def unbroadcast(ct, shape: tuple[int, ...]):
    """Sum a cotangent over the axes that broadcasting added or stretched, giving `shape`."""
    if tuple(ct.shape) == tuple(shape):
        return ct
    lead = len(ct.shape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, s in enumerate(shape) if s == 1 and ct.shape[lead + i] != 1
    )
    if axes:
        ct = emit(REGISTRY["reduce_sum"], ct, axes=axes)
    return emit(REGISTRY["reshape"], ct, new_shape=tuple(shape)) if tuple(ct.shape) != tuple(shape) else ct


def keepdims_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def expand(v, shape: tuple[int, ...], axes: tuple[int, ...]):
    """A value reduced over `axes` reshaped to keepdims form and broadcast back to `shape`."""
    kept = emit(REGISTRY["reshape"], v, new_shape=keepdims_shape(tuple(shape), axes))
    return emit(REGISTRY["broadcast_to"], kept, shape=tuple(shape))


def swap_last(x):
    """x with its last two axes swapped (matmul's transposes)."""
    n = len(x.shape)
    return emit(REGISTRY["transpose"], x, perm=tuple(range(n - 2)) + (n - 1, n - 2))


def holomorphic(rule, ct, x):
    """The cotangent of x for a holomorphic function whose VJP `rule(ct)` is written as for real
    values (ct times the derivative): itself for real x, conj(rule(conj(ct))) for complex x, which is
    ct times the conjugate derivative (the complex convention; the README's "Complex numbers")."""
    if x.dtype.kind != "c":
        return rule(ct)
    conj = REGISTRY["conj"]
    return emit(conj, rule(emit(conj, ct)))


def first_element(x):
    """x's first element as a 1-element vector (x itself when it has at most one): a value that
    orders an effect after x is computed."""
    flat = x if x.ndim == 1 else emit(REGISTRY["reshape"], x, new_shape=(x.size,))
    return emit(REGISTRY["slice"], flat, index=((0, 1, 1),)) if flat.shape[0] > 1 else flat
