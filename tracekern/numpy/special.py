"""scipy.special on traced arrays (tk.scipy.special): SciPy's ufuncs (gammaln, psi/digamma, erf, erfc,
erfinv, expit, logit, ndtr, log_ndtr, xlogy, xlog1py, betaln, i0, i0e, i1, i1e) and its Python functions
polygamma, multigammaln, logsumexp (b=, return_sign=), softmax and log_softmax, with SciPy's signatures,
dtypes and defaults (softmax's axis=None is the whole array, not tk.numpy.softmax's last axis).

SciPy's ufuncs called on traced arrays dispatch here through __array_ufunc__ (SCIPY_UFUNCS, by name).
SciPy's Python functions convert their arguments with np.asarray, which a traced array cannot honour:
they are called as tk.scipy.special.<name> (the error for the SciPy one says so)."""
from __future__ import annotations

import functools
import math
import sys

import numpy as np

from ..ir import is_complex, is_float
from ._core import P, Tracer, _array, _axes, _cast, _check_operand, _dtype, _inexact, _promote, _shape, bind, with_location
from .extras import sigmoid
from .reductions import max as _max
from .reductions import sum as _sum
from .shapes import broadcast_arrays, squeeze
from .ufuncs import (
    absolute,
    add,
    divide,
    equal,
    exp,
    floor,
    greater,
    isfinite,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    multiply,
    negative,
    sign,
    stop_gradient,
    subtract,
    where,
)

__all__ = ["betaln", "digamma", "erf", "erfc", "erfinv", "expit", "gammaln", "i0", "i0e", "i1", "i1e", "log_ndtr",
           "log_softmax", "logit", "logsumexp", "multigammaln", "ndtr", "polygamma", "psi", "softmax", "xlog1py", "xlogy"]


def _float(fname: str, *xs):
    """The operands as SciPy's real loops take them: a common float dtype (integers become float64)."""
    for x in xs:
        _check_operand(x, f"scipy.special.{fname}")
        if is_complex(_dtype(x)):
            raise TypeError(with_location(f"scipy.special.{fname} of complex numbers ({_dtype(x).name}) is not traced; "
                                          "tracekern traces its real form"))
    dtype = _scipy_dtype(fname, tuple(_kind(x) for x in xs))
    return [_cast(x, dtype) for x in xs]


def _kind(x):
    """An operand as SciPy's type resolution sees it: a Python number's type (bool, int or float; a traced one's
    by its dtype), else the array's dtype."""
    if not _python_number(x):
        return np.dtype(_dtype(x))
    if isinstance(x, Tracer):
        return {"b": bool, "f": float}.get(np.dtype(_dtype(x)).kind, int)
    return bool if isinstance(x, bool) else int if isinstance(x, int) else float


@functools.cache
def _scipy_dtype(fname: str, kinds: tuple) -> np.dtype:
    """The dtype SciPy's ufunc `fname` computes in for operands of these kinds, asked of the SciPy installed: a
    Python number is float64 to SciPy 1.17's ufuncs (xlogy(2, float32) is float64) and weak to 1.18's, as to
    NumPy's own ufuncs (float32). Where SciPy cannot be asked (a Python function, no loop), its old rule: a common
    float dtype, a Python number float64, integers float64."""
    import scipy.special  # (a dependency; loaded when a scipy.special function is first traced)

    fn = getattr(scipy.special, fname, None)
    if isinstance(fn, np.ufunc):
        try:
            with np.errstate(all="ignore"):
                got = np.asarray(fn(*[k(1) if isinstance(k, type) else np.ones(1, k) for k in kinds])).dtype
            if is_float(got):
                return got
        except TypeError:
            pass
    dtype = np.result_type(*[np.float64 if isinstance(k, type) else k for k in kinds])
    return dtype if is_float(dtype) else np.dtype(np.float64)


def _python_number(x) -> bool:
    """A Python bool, int or float, or a traced one (a weak argument)."""
    if isinstance(x, Tracer):
        return bool(x.weak)
    return isinstance(x, (bool, int, float)) and not isinstance(x, np.generic)


def _unary(prim, fname: str):
    def fn(x):
        (x,) = _float(fname, x)
        return bind(prim, x)
    fn.__name__ = fname
    fn.__doc__ = f"scipy.special.{fname}, traced and differentiated."
    return fn


gammaln = _unary(P.gammaln, "gammaln")
digamma = psi = _unary(P.digamma, "digamma")
erf = _unary(P.erf, "erf")
erfc = _unary(P.erfc, "erfc")
erfinv = _unary(P.erfinv, "erfinv")
log_ndtr = _unary(P.log_ndtr, "log_ndtr")
i0 = _unary(P.i0, "i0")
i0e = _unary(P.i0e, "i0e")
i1 = _unary(P.i1, "i1")
i1e = _unary(P.i1e, "i1e")


def xlogy(x, y):
    """x * log(y), 0 where x == 0 (unless y is NaN)."""
    return bind(P.xlogy, *_float("xlogy", x, y))


def xlog1py(x, y):
    """x * log1p(y), 0 where x == 0 (unless y is NaN)."""
    return bind(P.xlog1py, *_float("xlog1py", x, y))


def expit(x):
    """1 / (1 + exp(-x)), stable at both ends (tk.numpy.sigmoid)."""
    (x,) = _float("expit", x)
    return sigmoid(x)


def logit(x):
    """log(p / (1 - p)) as log(p) - log1p(-p)."""
    (x,) = _float("logit", x)
    return subtract(log(x), log1p(negative(x)))


def ndtr(x):
    """The standard normal CDF, as SciPy's (Cephes): 1/2 + erf(z)/2 near 0, erfc of |z| in the tails."""
    (x,) = _float("ndtr", x)
    z = multiply(x, 1 / math.sqrt(2))
    tail = multiply(erfc(absolute(z)), 0.5)
    return where(less(absolute(z), 1 / math.sqrt(2)), add(0.5, multiply(erf(z), 0.5)),
                 where(greater(z, 0), subtract(1, tail), tail))


def betaln(a, b):
    """log |B(a, b)|, as SciPy's (Cephes' lbeta), in float64 (a float32 result rounds it, as SciPy's float32 loop):
    gammaln(a) + gammaln(b) - gammaln(a + b), but where the larger argument exceeds 1e6 and 1e6 times the
    smaller, lbeta's asymptotic form gammaln(b) - b log(a) + b (1 - b) / (2 a) + ... (a the larger): the
    difference of gammalns cancels there (betaln(1e12, 0.5) was 7e-5 off, betaln(1e300, 2) 0; in float32,
    betaln(1e6, 2) was 2% off)."""
    a, b = _float("betaln", a, b)
    dtype = _dtype(a)
    a, b = _cast(a, np.float64), _cast(b, np.float64)
    # A nonpositive integer argument (a pole of gamma), as lbeta's lbeta_negint: log |B(1 - a - b, b)| where the other
    # argument b is an integer and 1 - a - b > 0 (the poles' ratio is finite: betaln(-5, 2) is log(1/20)), inf
    # otherwise, and inf for a <= -(2**31 - 1), where Cephes' int arithmetic overflows (gammaln(a) - ... was inf - inf)
    a_pole, b_pole = _nonpositive_integer(a), _nonpositive_integer(b)
    pole = logical_or(a_pole, b_pole)
    at_pole, other = where(a_pole, a, b), where(a_pole, b, a)
    reflected = subtract(subtract(1.0, at_pole), other)
    finite = logical_and(logical_and(equal(other, floor(other)), greater(reflected, 0)),
                         logical_and(greater(at_pole, -2147483647.0), logical_not(_nonpositive_integer(other))))
    infinite = logical_and(pole, logical_not(finite))
    a = where(infinite, 1.0, where(pole, reflected, a))   # (finite stand-ins where the result is inf: finite gradients)
    b = where(infinite, 1.0, where(pole, other, b))
    return _cast(where(infinite, np.inf, _betaln_off_poles(a, b)), dtype)


def _nonpositive_integer(x):
    return logical_and(less_equal(x, 0), equal(x, floor(x)))


def _betaln_off_poles(a, b):
    """betaln of float64 a, b, neither a nonpositive integer."""
    swap = less(absolute(a), absolute(b))
    big, small = where(swap, b, a), where(swap, a, b)
    asymptotic = logical_and(greater(big, 1e6), greater(absolute(big), multiply(absolute(small), 1e6)))
    big = where(asymptotic, big, 2e6)   # (values the unused branch can take: its gradient is finite)
    small = where(asymptotic, small, 1.0)
    one_minus = subtract(1.0, small)
    inv = divide(1.0, big)
    series = multiply(multiply(small, one_minus), multiply(inv, add(0.5, multiply(multiply(subtract(1.0, multiply(small, 2)), inv),
                                                                                    1 / 12))))
    series = subtract(series, multiply(multiply(multiply(small, small), multiply(one_minus, one_minus)),
                                       multiply(multiply(inv, inv), multiply(inv, 1 / 12))))
    tail = add(subtract(gammaln(small), multiply(small, log(big))), series)
    direct = subtract(add(gammaln(a), gammaln(b)), gammaln(add(a, b)))
    return where(asymptotic, tail, direct)


def polygamma(n, x):
    """The n-th derivative of digamma (n = 0: digamma itself), with SciPy's dtype: float64 for an integer n."""
    _check_operand(n, "scipy.special.polygamma")
    _check_operand(x, "scipy.special.polygamma")
    n = np.asarray(n) if not isinstance(n, Tracer) else n
    x = np.asarray(x) if not isinstance(x, Tracer) else x
    dtype = np.result_type(*[d if is_float(d) else np.float64 for d in (_dtype(n), _dtype(x))])
    n, x = _cast(n, dtype), _cast(x, dtype)
    return bind(P.polygamma, n, x)


def multigammaln(a, d):
    """log of the multivariate gamma function of dimension d (a static int): d (d - 1) / 4 log(pi) + sum_j
    gammaln(a - j / 2), float64 as SciPy's. SciPy raises ValueError where a <= (d - 1) / 2; a traced a gives NaN there (a
    compiled function cannot raise on a value), a constant one raises as SciPy does."""
    if isinstance(d, Tracer) or int(d) != d or d < 1:
        raise ValueError(with_location("scipy.special.multigammaln: d should be a positive integer (dimension)"))
    d = int(d)
    (a,) = _float("multigammaln", a)
    if not isinstance(a, Tracer) and np.any(np.asarray(a) <= 0.5 * (d - 1)):
        raise ValueError(f"condition a ({a}) > 0.5 * (d-1) ({0.5 * (d - 1)}) not met")
    total = gammaln(a)
    for j in range(1, d):
        total = add(total, gammaln(subtract(a, j / 2)))
    res = add(total, np.float64(d * (d - 1) * 0.25 * math.log(math.pi)))   # (float64, as SciPy's)
    return where(less_equal(a, 0.5 * (d - 1)), np.nan, res) if isinstance(a, Tracer) else res


def _check_real(x, fname):
    if is_complex(_dtype(x)):
        raise TypeError(with_location(f"scipy.special.{fname} of complex arrays is not traced; pass real arrays"))


def logsumexp(a, axis=None, b=None, keepdims=False, return_sign=False):
    """log(sum(b * exp(a))) over axis, as SciPy's: the largest term taken out of the sum (log1p of the rest,
    plus log of its weight, plus the maximum), entries with b == 0 left out even where a is inf or NaN,
    NaN for a negative sum unless return_sign (then (log |sum|, sign)). Gradients are exact: the shift
    is a stopped-gradient constant, the maximum's own term stays in."""
    a = _inexact(_array(a, "scipy.special.logsumexp"), "scipy.special.logsumexp")
    _check_real(a, "logsumexp")
    if b is not None:
        if _python_number(b) and not isinstance(b, Tracer):   # (weak, as SciPy's: b=2 keeps float32)
            b = _cast(b, _dtype(a))
        b = _inexact(_array(b, "scipy.special.logsumexp"), "scipy.special.logsumexp")
        _check_real(b, "logsumexp")
        a, b = _promote("scipy.special.logsumexp", a, b)
        a, b = broadcast_arrays(a, b)
        a = where(equal(b, 0), -np.inf, a)
    nd = len(_shape(a))
    if nd == 0:
        a = bind(P.reshape, a, new_shape=(1,))
        b = None if b is None else bind(P.reshape, b, new_shape=(1,))
        nd = 1
    axes = _axes(axis, nd, "scipy.special.logsumexp")
    if any(_shape(a)[i] == 0 for i in axes):   # (an empty sum: SciPy's -inf, and its sign -1)
        shape = tuple(1 if i in axes else n for i, n in enumerate(_shape(a)))
        out = bind(P.full, shape=shape, dtype=_dtype(a), value=-np.inf)
        sgn = bind(P.full, shape=shape, dtype=_dtype(a), value=-1.0)
        if not keepdims:
            out, sgn = squeeze(out, axis=axes), squeeze(sgn, axis=axes)
        return (out, sgn) if return_sign else out
    a_max = stop_gradient(_max(a, axis=axes, keepdims=True))
    top = equal(a, a_max)
    shift = where(isfinite(a_max), a_max, 0)
    terms = exp(subtract(a, shift))
    if b is not None:
        terms = multiply(b, terms)
    m = _sum(where(top, terms, 0), axis=axes, keepdims=True)
    s = _sum(where(top, 0, terms), axis=axes, keepdims=True)
    s = where(equal(s, 0), s, divide(s, where(equal(m, 0), 1, m)))
    sgn = multiply(sign(add(s, 1)), sign(m))
    s = where(less(s, -1), subtract(negative(s), 2), s)
    out = add(add(log1p(s), log(absolute(m))), shift)
    if not return_sign:
        out = where(less(sgn, 0), np.nan, out)
    if not keepdims and axes:
        out, sgn = squeeze(out, axis=axes), squeeze(sgn, axis=axes)
    return (out, sgn) if return_sign else out


def softmax(x, axis=None):
    """exp(x - max) / sum(exp(x - max)) over axis (None: the whole array, SciPy's default)."""
    x = _inexact(_array(x, "scipy.special.softmax"), "scipy.special.softmax")
    _check_real(x, "softmax")
    e = exp(subtract(x, stop_gradient(_max(x, axis=axis, keepdims=True))))
    return divide(e, _sum(e, axis=axis, keepdims=True))


def log_softmax(x, axis=None):
    """x - max - log(sum(exp(x - max))) over axis (None: the whole array); a non-finite max shifts by 0."""
    x = _inexact(_array(x, "scipy.special.log_softmax"), "scipy.special.log_softmax")
    _check_real(x, "log_softmax")
    x_max = stop_gradient(_max(x, axis=axis, keepdims=True))
    tmp = subtract(x, where(isfinite(x_max), x_max, 0))
    return subtract(tmp, log(_sum(exp(tmp), axis=axis, keepdims=True)))


# SciPy's ufuncs, by name (scipy.special.psi is scipy.special.digamma), for __array_ufunc__
SCIPY_UFUNCS = {"gammaln": gammaln, "psi": digamma, "erf": erf, "erfc": erfc, "erfinv": erfinv, "expit": expit,
                "logit": logit, "ndtr": ndtr, "log_ndtr": log_ndtr, "xlogy": xlogy, "xlog1py": xlog1py, "betaln": betaln,
                "i0": i0, "i0e": i0e, "i1": i1, "i1e": i1e}
# SciPy's Python functions tracekern has (called as tk.scipy.special.<name>)
SCIPY_FUNCTIONS = ("polygamma", "multigammaln", "logsumexp", "softmax", "log_softmax")


def scipy_ufunc(ufunc):
    """The traced function for a scipy.special ufunc (None if it is not one tracekern traces)."""
    module = sys.modules.get("scipy.special")
    name = getattr(ufunc, "__name__", "")
    if module is None or getattr(module, name, None) is not ufunc:
        return None
    return SCIPY_UFUNCS.get(name)

