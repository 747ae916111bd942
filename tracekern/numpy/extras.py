"""tk.numpy's functions that NumPy lacks: sigmoid, softplus, relu, gelu, logsumexp, softmax and
log_softmax, all stable at large arguments in value and gradient."""
from __future__ import annotations

import math

from ._core import _axes, _shape
from .creation import zeros_like
from .reductions import max, sum
from .shapes import squeeze
from .ufuncs import (
    add,
    divide,
    exp,
    greater,
    greater_equal,
    isfinite,
    log,
    log1p,
    multiply,
    negative,
    stop_gradient,
    subtract,
    tanh,
    where,
)


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
