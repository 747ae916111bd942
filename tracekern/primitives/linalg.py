"""matmul: (..., m, k) @ (..., k, n) with equal batch dimensions.

tracekern.numpy reduces 1-D operands and batch broadcasting to this form."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval
from . import ops
from .core import Primitive


class Matmul(Primitive):
    fusion = "matmul"

    def abstract_eval(self, a: Aval, b: Aval):
        if a.dtype != b.dtype:
            raise TypeError(f"matmul: operand dtypes differ ({a.dtype}, {b.dtype})")
        if a.ndim < 2 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit (..., m, k) @ (..., k, n)")
        return (Aval(a.shape[:-1] + b.shape[-1:], a.dtype),)

    def impl(self, a, b):
        return np.matmul(a, b)

    def vjp(self, cts, ins, outs, active):
        (ct,), (a, b) = cts, ins
        return [ops.matmul(ct, ops.swap_last(b)) if active[0] else None,
                ops.matmul(ops.swap_last(a), ct) if active[1] else None]


matmul = Matmul("matmul")
