"""Every primitive of the IR, one object each (see core.Primitive for the rules each holds), and
`ops`, the IR-building functions their VJP rules are written with.

Every primitive is in REGISTRY, by name. This package re-exports the ones other rooms name; a
primitive nothing names (a new elementwise one) needs no line here."""
from .annotations import custom_vjp_call, print_, recompute_call, remat_barrier, reversible_call
from .control import cond, scan, scan_revolve, while_
from .core import REGISTRY, Primitive
from .elementwise import (
    absolute,
    add,
    arctan,
    ceil,
    convert,
    cos,
    div,
    eq,
    exp,
    expm1,
    floor,
    ge,
    gt,
    le,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    lt,
    maximum,
    minimum,
    mul,
    ne,
    neg,
    power,
    rint,
    select,
    sign,
    sin,
    sqrt,
    stop_gradient,
    sub,
    tan,
    tanh,
)
from .fft import fft
from .indexing import gather, scatter
from .linalg import matmul
from .random import iota, random_bits
from .reductions import reduce_max, reduce_min, reduce_prod, reduce_sum
from .scans import cummax, cummin, cumprod, cumsum
from .shape import broadcast_to, concatenate, const, full, reshape, slice_, transpose, unslice
from .sorting import argsort, searchsorted, sort

__all__ = [
    "REGISTRY", "Primitive", "ceil", "cond", "scan", "scan_revolve", "while_",
    "custom_vjp_call", "floor", "rint", "print_", "recompute_call", "remat_barrier", "reversible_call",
    "absolute", "add", "arctan", "broadcast_to", "concatenate", "const",
    "convert", "cos", "div", "eq", "exp", "expm1", "full", "ge", "gt", "le", "log", "log1p",
    "logical_and", "logical_not", "logical_or", "lt", "matmul", "maximum", "minimum", "mul", "ne",
    "neg", "power", "reduce_max", "reduce_min", "reduce_prod", "reduce_sum", "reshape", "select",
    "sign", "sin", "slice_", "sqrt", "stop_gradient", "sub", "tan", "tanh", "transpose", "unslice",
    # issue 19
    "argsort", "cummax", "cummin", "cumprod", "cumsum", "gather", "scatter", "searchsorted", "sort",
    # counter-based random numbers (primitives/random.py)
    "iota", "random_bits",
    # issue 30: FFTs (primitives/fft.py)
    "fft",
]
