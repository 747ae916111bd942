"""Elementwise functions: every ufunc of the elementwise primitive table (np.add, np.arctan2, ...),
with NumPy's promotion, and the ones composed from them (fmax, heaviside, sinc,
nan_to_num, ...), which fuse into the same loops. Also where, clip, astype, round."""
from __future__ import annotations

import builtins
import math
import warnings
from collections.abc import Callable

import numpy as np

from ..errors import user_stacklevel
from ..ir import SUPPORTED_DTYPES, complex_dtype, is_complex, is_float, is_inexact
from ..primitives.core import REGISTRY
from ..primitives.elementwise import Elementwise
from ..trace import WIDE
from ._core import P, Tracer, _array, _cast, _check_dtype, _check_operand, _dtype, _promote, _reject, _shape, _token, bind, with_location

_LOOPS: dict = {}   # (ufunc, operand tokens) -> _loop_dtypes' answer: resolve_dtypes and the checks once per signature


def _loop_dtypes(ufunc, args: tuple, fname: str) -> tuple:
    """The dtypes of NumPy's loop for `ufunc` on these operands (NEP 50: Python scalars are weak), operands' then
    results'. No loop is NumPy's TypeError; a loop in a dtype tracekern has no kernels for (a bool's square is
    int8, its sqrt float16) is a TypeError saying so. Answers are kept per (ufunc, tokens): every traced operator
    comes through here, and resolve_dtypes with the dtype names of the messages made a loop of 1,000 x[i] + s
    trace 20% slower."""
    tokens = tuple(_token(a) for a in args)
    if all(isinstance(t, type) for t in tokens):   # Python scalars only (weak ones traced): their own dtypes
        tokens = tuple(_dtype(a) for a in args)
    key = (ufunc, tokens)
    known = _LOOPS.get(key)
    if known is not None:
        return known

    def names():
        return ", ".join(getattr(t, "name", getattr(t, "__name__", str(t))) for t in tokens)
    try:
        dtypes = ufunc.resolve_dtypes(tokens + (None,) * ufunc.nout)
    except (TypeError, ValueError, np.exceptions.DTypePromotionError):
        advice = ("; NumPy has no complex loop for it (the imaginary part would be lost): take np.real(z), np.imag(z) "
                  "or np.abs(z) first" if any(getattr(t, "kind", "") == "c" or t is complex for t in tokens) else "")
        raise TypeError(with_location(f"np.{ufunc.__name__} is not defined for operands of dtype {names()}{advice}")) from None
    for dtype in dtypes[ufunc.nin:]:
        if np.dtype(dtype) not in SUPPORTED_DTYPES:
            raise TypeError(with_location(
                f"{fname}: NumPy computes np.{ufunc.__name__} of {names()} in {np.dtype(dtype).name}, a dtype tracekern "
                f"does not support (it supports {', '.join(d.name for d in SUPPORTED_DTYPES)}); cast the operands "
                "first, e.g. x.astype(np.int32) or x.astype(np.float32)"))
    _LOOPS[key] = dtypes
    return dtypes


def _ufunc_op(ufunc, prim, fname: str) -> Callable:
    def op(*args):
        if len(args) != ufunc.nin:
            raise TypeError(f"{fname} takes {ufunc.nin} operands, got {len(args)}")
        args = tuple(_array(a, fname) for a in args)   # (a list or tuple operand is an array, as in NumPy)
        if ufunc in _COMPARISONS:
            exact = _compare_wide(ufunc, args)
            if exact is not None:
                return exact
        dtypes = _loop_dtypes(ufunc, args, fname)
        if is_complex(dtypes[0]) and prim.dtypes in ("real", "float"):
            raise TypeError(with_location(
                f"np.{ufunc.__name__} of complex numbers ({dtypes[0].name}) is not traced: complex numbers have no "
                "order (NumPy's is lexicographic) and no rounding or floor; apply it to np.real(z), np.imag(z) or "
                "np.abs(z)"))
        return bind(prim, *[_cast(a, d) for a, d in zip(args, dtypes[: ufunc.nin])])

    op.__name__ = fname
    op.__doc__ = f"np.{ufunc.__name__}, traced: NumPy's promotion and broadcasting."
    return op


_COMPARISONS = frozenset((np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal))


def _compare_wide(ufunc, args: tuple):
    """NumPy 2 compares an integer array with a Python int outside the array's dtype exactly (NEP 50's exception for
    comparisons: `int32_array < 2**40` is all True, where `int32_array + 2**40` raises OverflowError): in int64 where
    the number fits it (a Python int argument traced as a wide weak int64 included), else the known answer. None
    where the ordinary rules apply."""
    kinds = [_dtype(a).kind for a in args]
    for k, other in ((0, 1), (1, 0)):
        p, x = args[k], args[other]
        if kinds[other] != "i" or isinstance(x, (int, float, complex)):
            continue
        if isinstance(p, Tracer) and p.weak == WIDE and _dtype(x).itemsize < 8:
            return OPS[ufunc.__name__](*[_cast(a, np.int64) for a in args])
        if type(p) is int:
            info = np.iinfo(_dtype(x))
            if info.min <= p <= info.max:
                return None
            if np.iinfo(np.int64).min <= p <= np.iinfo(np.int64).max:
                return OPS[ufunc.__name__](*[_cast(a, np.int64) if a is x else np.int64(a) for a in args])
            truth = ufunc(*[0 if a is x else p for a in args])   # (any value of x's range compares as 0 does)
            return equal(x, x) if truth else not_equal(x, x)     # (an integer always equals itself)
    return None


# every elementwise primitive of the table with a NumPy ufunc is np.<ufunc> on tracers
BY_UFUNC: dict = {p.ufunc: p for p in REGISTRY.values() if isinstance(p, Elementwise) and p.ufunc is not None}
OPS: dict[str, Callable] = {u.__name__: _ufunc_op(u, p, u.__name__) for u, p in BY_UFUNC.items()}

add, subtract, multiply, divide = (OPS[n] for n in ("add", "subtract", "multiply", "divide"))
true_divide = divide
negative, floor, ceil, rint = (OPS[n] for n in ("negative", "floor", "ceil", "rint"))
maximum, minimum, exp, log, log1p, expm1, sqrt = (OPS[n] for n in ("maximum", "minimum", "exp", "log", "log1p", "expm1", "sqrt"))
sin, cos, tan, tanh, arctan = (OPS[n] for n in ("sin", "cos", "tan", "tanh", "arctan"))
sinh, cosh, arcsin, arccos, arcsinh, arccosh, arctanh = (OPS[n] for n in (
    "sinh", "cosh", "arcsin", "arccos", "arcsinh", "arccosh", "arctanh"))
less, less_equal, greater, greater_equal, equal, not_equal = (OPS[n] for n in (
    "less", "less_equal", "greater", "greater_equal", "equal", "not_equal"))
arctan2, hypot, cbrt, log2, log10, exp2, trunc, copysign, nextafter = (OPS[n] for n in (
    "arctan2", "hypot", "cbrt", "log2", "log10", "exp2", "trunc", "copysign", "nextafter"))
floor_divide, remainder, fmod = (OPS[n] for n in ("floor_divide", "remainder", "fmod"))


def _integral(name: str) -> Callable:
    ufunc, op = getattr(np, name), OPS[name]

    def fn(x):
        x = _array(x, name)
        if _dtype(x).kind in "biu":   # (NumPy 2: an integer or bool array is its own floor, ceil and trunc)
            return x if isinstance(x, Tracer) else ufunc(x)
        return op(x)

    fn.__name__ = name
    fn.__doc__ = f"np.{name}, traced: integers and bools are their own (NumPy 2), floats {name} as NumPy's."
    return fn


floor, ceil, trunc = (_integral(n) for n in ("floor", "ceil", "trunc"))
logaddexp, logaddexp2 = OPS["logaddexp"], OPS["logaddexp2"]
bitwise_and, bitwise_or, bitwise_xor, left_shift, right_shift, gcd, lcm = (OPS[n] for n in (
    "bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift", "gcd", "lcm"))


def power(x1, x2):
    """np.power, traced. As NumPy, an integer to a negative integer power raises ValueError: here, at trace time,
    for a constant exponent; a traced exponent raises from the compiled cpu kernel when it runs (the interpreter
    raises NumPy's own; a cuda kernel cannot raise, and gives 0, or 1 or -1 for a base of 1 or -1)."""
    y = OPS["power"](x1, x2)
    if _dtype(y).kind in "iu" and not isinstance(x2, Tracer) and np.any(np.asarray(x2) < 0):
        raise ValueError(with_location(
            f"Integers to negative integer powers are not allowed: np.power (or **) of an integer array "
            f"(shape {tuple(np.shape(x1))}, {_dtype(x1)}) to {np.asarray(x2).tolist()!r}, as in NumPy. Use a float "
            f"base, x.astype(np.float64) ** k, or 1.0 / x ** -k"))
    return y


mod = remainder
fix = trunc


def _logical(prim, fname):
    def op(*args):
        args = tuple(_array(a, fname) for a in args)
        return bind(prim, *[_cast(a, np.bool_) for a in args])

    op.__name__ = fname
    return op


logical_and = _logical(P.logical_and, "logical_and")
logical_or = _logical(P.logical_or, "logical_or")
logical_not = _logical(P.logical_not, "logical_not")


def logical_xor(x1, x2):
    return not_equal(_cast(x1, np.bool_), _cast(x2, np.bool_))


def invert(x):
    """~x: bitwise for integers, logical for bools (np.invert, np.bitwise_not)."""
    _check_operand(x, "invert")
    if _dtype(x) == np.bool_:
        return logical_not(x)
    return OPS["invert"](x)


bitwise_not = bitwise_invert = invert


def _as_loop_dtype(ufunc, x, fname: str):
    """x cast to the dtype of NumPy's `ufunc` loop for it (an integer's deg2rad is float64; a bool's NumPy
    computes in float16, a TypeError here)."""
    x = _array(x, fname)
    return _cast(x, _loop_dtypes(ufunc, (x,), fname)[0])


def positive(x):
    return _as_loop_dtype(np.positive, x, "positive")   # (NumPy has no bool loop)


def square(x):
    x = _as_loop_dtype(np.square, x, "square")   # (a bool's square is NumPy's int8, not supported)
    return multiply(x, x)


def reciprocal(x):
    if not is_inexact(_dtype(x)):
        raise TypeError(with_location("np.reciprocal of an integer array is not supported; use 1.0 / x"))
    return divide(1, x)


def isnan(x):
    return not_equal(x, x)


def isinf(x):
    return equal(absolute(x), np.inf)


def isfinite(x):
    return less(absolute(x), np.inf)


def isposinf(x):
    return equal(x, np.inf)


def isneginf(x):
    return equal(x, -np.inf)


def signbit(x):
    """True where the sign bit is set (-0.0 and -nan included), as NumPy."""
    if not is_float(_dtype(x)):
        return less(x, 0)
    return less(copysign(1, x), 0)


def isclose(a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    """|a - b| <= atol + rtol |b| (infinities equal only to themselves; NaNs equal with equal_nan)."""
    a, b = _promote("isclose", a, b)
    if not is_inexact(_dtype(a)):
        a, b = _cast(a, np.float64), _cast(b, np.float64)
    finite = bind(P.logical_and, isfinite(a), isfinite(b))
    fa, fb = _pick(finite, a, 0), _pick(finite, b, 0)   # (NumPy's isclose warns of no inf - inf, nor does this)
    close = less_equal(absolute(subtract(fa, fb)), add(atol, multiply(rtol, absolute(fb))))
    result = _pick(finite, close, equal(a, b))
    if equal_nan:
        result = bind(P.logical_or, result, bind(P.logical_and, isnan(a), isnan(b)))
    return result


def fabs(x):
    return absolute(_as_loop_dtype(np.fabs, x, "fabs"))   # (an integer's is float64, as NumPy's)


def float_power(x1, x2):
    dtype = np.complex128 if is_complex(_dtype(x1)) or is_complex(_dtype(x2)) else np.float64
    return power(_cast(x1, dtype), _cast(x2, dtype))


def _pick(c, a, b):
    return bind(P.select, c, *_promote("where", a, b))


def fmax(x1, x2):
    """maximum that ignores a NaN operand (NaN only when both are). Of equal operands (0.0 and -0.0) the second, as
    maximum's and NumPy's SIMD loops' (NumPy's own answer depends on the array's length: its loop for the last
    few elements of a short array gives the first)."""
    x1, x2 = _promote("fmax", x1, x2)
    if not is_float(_dtype(x1)):
        return maximum(x1, x2)
    return _pick(isnan(x2), x1, _pick(isnan(x1), x2, maximum(x1, x2)))


def fmin(x1, x2):
    x1, x2 = _promote("fmin", x1, x2)
    if not is_float(_dtype(x1)):
        return minimum(x1, x2)
    return _pick(isnan(x2), x1, _pick(isnan(x1), x2, minimum(x1, x2)))


def heaviside(x1, x2):
    """0 below zero, x2 at zero, 1 above (NaN stays NaN); integers give float64, as NumPy's."""
    x1, x2 = _array(x1, "heaviside"), _array(x2, "heaviside")
    dtypes = _loop_dtypes(np.heaviside, (x1, x2), "heaviside")
    x1, x2 = _cast(x1, dtypes[0]), _cast(x2, dtypes[1])
    step = _pick(less(x1, 0), 0, _pick(equal(x1, 0), x2, 1))
    return _pick(isnan(x1), x1, step)


def _angle_factor(x, num, den):
    """NumPy's factor num / den, computed in x's own dtype (its float32 loop multiplies by 180.0f / NPY_PIf, which
    is 57.295776, one float32 ulp below 180 / pi rounded: rad2deg differed from NumPy's by 1 to 2 ulp)."""
    dtype = _dtype(x)
    return float(dtype.type(num) / dtype.type(den))


def deg2rad(x):
    x = _as_loop_dtype(np.deg2rad, x, "deg2rad")
    return multiply(x, _angle_factor(x, math.pi, 180))


def rad2deg(x):
    x = _as_loop_dtype(np.rad2deg, x, "rad2deg")
    return multiply(x, _angle_factor(x, 180, math.pi))


radians, degrees = deg2rad, rad2deg


_SINC_TAYLOR = (1.0, -1 / 6, 1 / 120, -1 / 5040, 1 / 362880)   # sinc(x) = sum c_k z**k, z = (pi x)**2
_SINC_SMALL = 0.03   # below it the polynomial is exact to rounding (the next term is < 1e-17)


def sinc(x):
    """sin(pi x) / (pi x), and its Taylor polynomial near 0, so that the value there is 1 and the derivatives
    are the true ones (the second is -pi**2 / 3 at 0), not a constant's. Each branch is evaluated at a safe
    point where it is not taken (a "double where": no 0 / 0 and no 0 * inf in the gradients). Complex x too."""
    x = x if is_inexact(_dtype(x)) else _cast(x, np.float64)
    small = less(absolute(x), _SINC_SMALL)
    z = square(multiply(_pick(small, x, 0), math.pi))
    taylor = _SINC_TAYLOR[-1]
    for c in reversed(_SINC_TAYLOR[:-1]):
        taylor = add(multiply(taylor, z), c)
    y = multiply(_pick(small, 1, x), math.pi)
    return _pick(small, taylor, divide(sin(y), y))


def spacing(x):
    """The distance to the next float away from zero (negative for negative x), as NumPy."""
    x = _as_loop_dtype(np.spacing, x, "spacing")
    finite = isfinite(x)
    x = _pick(finite, x, np.nan)   # (NaN at ±inf, as NumPy's, without inf - inf's warning on the interpreter)
    return subtract(_pick(less(x, 0), nextafter(x, -np.inf), nextafter(x, np.inf)), x)


def ldexp(x1, x2):
    """x1 * 2**x2 (x2 integer), rounded once, as C's ldexp (musl's scalbn): an exponent beyond the normal range
    is applied in steps that stay exact (x1 * 2**2000 is inf only where it overflows; 2**-2000 * 2**1990 is not
    0 * inf), the last step a power of two that exp2 gives exactly (NumPy's float32 exp2(127) is an ulp off)."""
    x1, x2 = _array(x1, "ldexp"), _array(x2, "ldexp")
    if _dtype(x2).kind not in "iub":
        raise TypeError(with_location(f"np.ldexp: the exponent must be an integer array, got {_dtype(x2)}"))
    dtypes = _loop_dtypes(np.ldexp, (x1, x2), "ldexp")
    x, n = _cast(x1, dtypes[0]), _cast(x2, dtypes[1])
    info = np.finfo(dtypes[0])
    top, bottom, digits = info.maxexp - 2, info.minexp, info.nmant + 1   # (float64: 1022, -1022, 53)
    n = clip(n, -4 * top, 4 * top)   # (beyond, the result is 0, inf or x's NaN whatever n is; no int wraps)
    for _ in range(2):
        big, small = greater(n, top), less(n, bottom)
        x = multiply(x, _cast(_pick(big, 2.0 ** top, _pick(small, 2.0 ** (bottom + digits), 1.0)), dtypes[0]))
        n = _pick(big, subtract(n, top), _pick(small, add(n, -(bottom + digits)), n))
    return multiply(x, exp2(_cast(clip(n, bottom, top), dtypes[0])))


def divmod(x1, x2):   # noqa: A001
    return floor_divide(x1, x2), remainder(x1, x2)


def modf(x):
    """(fractional part, integral part), both with x's sign (C's: modf(-2.0) is (-0.0, -2.0)); modf(inf) =
    (0, inf)."""
    x = _as_loop_dtype(np.modf, x, "modf")
    whole = trunc(x)
    infinite = isinf(x)
    safe, safe_whole = _pick(infinite, 0, x), _pick(infinite, 0, whole)   # (no inf - inf)
    # (whole - x negated for negative x: -0.0 where x is a negative integer, and the gradient 1 either way)
    # (a NaN keeps its sign bit)
    frac = _pick(logical_and(signbit(x), equal(x, x)), negative(subtract(safe_whole, safe)), subtract(safe, safe_whole))
    return _pick(infinite, copysign(0, x), frac), whole


def frexp(x):
    """(mantissa in [0.5, 1) with x's sign, integer exponent: int32): x = m * 2**e; 0, inf and NaN
    give (x, 0). The exponent from log2, corrected by one where log2 rounded across a power of two."""
    x = _as_loop_dtype(np.frexp, x, "frexp")
    finite = logical_and(isfinite(x), not_equal(x, 0))
    safe = _pick(finite, x, 1)
    e = add(floor(log2(absolute(safe))), 1)
    half = floor(multiply(e, 0.5))   # (2**e in two exact steps: 2**1024 and float32's 2**128 are inf)
    m = divide(divide(safe, exp2(half)), exp2(subtract(e, half)))
    big, small = greater_equal(absolute(m), 1), less(absolute(m), 0.5)
    m = _pick(big, multiply(m, 0.5), _pick(small, multiply(m, 2), m))
    e = _pick(big, add(e, 1), _pick(small, subtract(e, 1), e))
    return _pick(finite, m, x), _cast(_pick(finite, e, 0), np.int32)


def nan_to_num(x, copy=True, nan=0.0, posinf=None, neginf=None):
    """NaN -> nan, +inf -> posinf (default: the largest float), -inf -> neginf (the most negative)."""
    if is_complex(_dtype(x)):   # (each part, as NumPy)
        return _make_complex(nan_to_num(real(x), nan=nan, posinf=posinf, neginf=neginf),
                             nan_to_num(imag(x), nan=nan, posinf=posinf, neginf=neginf))
    if not is_float(_dtype(x)):
        return x
    info = np.finfo(_dtype(x))
    y = _pick(isnan(x), nan, x)
    y = _pick(equal(x, np.inf), info.max if posinf is None else posinf, y)
    return _pick(equal(x, -np.inf), info.min if neginf is None else neginf, y)


def absolute(x):
    """|x|; for complex x, hypot(x.real, x.imag) (NumPy's, a float of the parts' dtype)."""
    _check_operand(x, "absolute")
    if is_complex(_dtype(x)):
        return hypot(real(x), imag(x))
    return OPS["absolute"](x)


abs = absolute   # noqa: A001


def sign(x):
    """-1, 0, 1; for complex x, x / |x| as NumPy 2 computes it: each part divided by |x| (a zero part keeps its
    sign), 0 at 0, and where |x| is infinite the direction of the infinite part (NaN if both are)."""
    _check_operand(x, "sign")
    if is_complex(_dtype(x)):
        re, im, size = real(x), imag(x), absolute(x)
        zero = equal(size, 0)
        safe = _pick(zero, 1, size)
        re_inf, im_inf = isinf(re), isinf(im)
        one_inf = logical_and(logical_or(re_inf, im_inf), logical_not(logical_and(re_inf, im_inf)))
        unit_re = _pick(one_inf, _pick(re_inf, OPS["sign"](re), 0.0), divide(re, safe))
        unit_im = _pick(one_inf, _pick(im_inf, OPS["sign"](im), 0.0), divide(im, safe))
        return _pick(zero, 0, _make_complex(unit_re, unit_im))
    return OPS["sign"](x)


def _make_complex(re, im):
    """re + i im, of the complex dtype of re's float dtype."""
    dtype = complex_dtype(_dtype(re))
    return add(_cast(re, dtype), multiply(_cast(im, dtype), dtype.type(1j)))


def real(val):
    """The real part: a float view of complex values (a copy, as every traced value), x itself otherwise."""
    _check_operand(val, "real")
    return bind(P.real, val) if is_complex(_dtype(val)) else val


def conj(x):
    _check_operand(x, "conj")
    return bind(P.conj, x) if is_complex(_dtype(x)) else x


def _conjugate_ufunc(x):
    """np.conj / np.conjugate, the ufunc: of a bool array NumPy's is int8 (a TypeError here; x.conj(), the method,
    and the conjugations inside np.vdot and np.vecdot keep bools)."""
    return conj(_as_loop_dtype(np.conjugate, x, "conj"))


conjugate = conj


def imag(val):
    _check_operand(val, "imag")
    return bind(P.imag, val) if is_complex(_dtype(val)) else zeros_like_of(val)


def iscomplexobj(x):
    """Whether x's dtype is complex: a dtype query, answered while tracing (a Python bool, as NumPy's)."""
    return bool(is_complex(_dtype(x)))


def isrealobj(x):
    return not iscomplexobj(x)


def iscomplex(x):
    """imag(x) != 0 (all False for a real x), as NumPy's."""
    return not_equal(imag(x), 0)


def isreal(x):
    return equal(imag(x), 0)


def result_type(*arrays_and_dtypes):
    """NumPy's result_type of the operands' dtypes, answered while tracing (a traced Python number stays weak)."""
    tokens = [_token(a) if isinstance(a, Tracer) else a for a in arrays_and_dtypes]
    return np.result_type(*[{float: 0.0, complex: 0j, int: 0}.get(t, t) if isinstance(t, type) else t for t in tokens])


def can_cast(from_, to, casting="safe"):
    return np.can_cast(_dtype(from_) if isinstance(from_, Tracer) else from_, to, casting)


def angle(z, deg=False):
    """arctan2(z.imag, z.real): for real z, 0 for z >= 0 and pi for z < 0."""
    _check_operand(z, "angle")
    if is_complex(_dtype(z)):
        a = arctan2(imag(z), real(z))
        return multiply(a, 180 / math.pi) if deg else a
    z = z if is_float(_dtype(z)) else _cast(z, np.float64)
    return _pick(less(z, 0), 180.0 if deg else math.pi, multiply(z, 0))


def zeros_like_of(x):
    dtype = _dtype(x)
    return bind(P.full, shape=tuple(np.shape(x) if not isinstance(x, Tracer) else x.shape), dtype=dtype,
                value=np.asarray(0, dtype).item())


def round(a, decimals=0, out=None):  # noqa: A001 (np.round)
    """np.round / np.around: half to even; decimals scale by 10**decimals first, as NumPy does."""
    _reject("round", out=out)
    if not isinstance(decimals, (int, np.integer)):
        raise TypeError(with_location(f"np.round: decimals must be an integer, got {decimals!r}"))
    if is_complex(_dtype(a)):   # (each part, as NumPy)
        return _make_complex(round(real(a), decimals), round(imag(a), decimals))
    dtype = _dtype(a)
    if dtype == np.bool_:
        raise TypeError(with_location(
            "np.round of a bool array is NumPy's float16 (decimals >= 0) or an error (decimals < 0); tracekern does "
            "not support float16: round a cast copy, np.round(x.astype(np.float32), d)"))
    if not is_float(dtype) and decimals >= 0:
        return a
    scale = _power_of_ten(builtins.abs(decimals))
    if decimals == 0:
        return rint(a)
    if decimals > 0:
        return divide(rint(multiply(a, scale)), scale)
    if not is_float(dtype):   # (NumPy's: in float64, half to even, cast back: round(25, -1) is 20)
        return _cast(multiply(rint(divide(_cast(a, np.float64), scale)), scale), dtype)
    return multiply(rint(divide(a, scale)), scale)


def _power_of_ten(n: int) -> float:
    """10.0 ** n as NumPy's round computes it (power_of_ten in its calculation.c: 1e9 times 10 repeatedly, which
    differs from 10.0 ** n in the last bit from n = 23 on; inf from n = 309, where 10.0 ** n raises)."""
    if n < 9:
        return 10.0 ** n
    scale = 1e9
    for _ in range(builtins.min(n, 400) - 9):
        scale *= 10.0
    return scale


around = round


def where(condition, x=None, y=None):
    """np.where(condition, x, y); the one-argument form (indices) is not traceable."""
    if x is None or y is None:
        raise NotImplementedError(with_location(
            "np.where(condition) with one argument returns data-dependent indices and cannot be "
            "traced; use np.where(condition, x, y)"))
    condition = _array(condition, "where")
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
    if _dtype(a).kind in "iu":   # (NumPy's: a Python int bound beyond an integer array's dtype bounds nothing)
        info = np.iinfo(_dtype(a))
        lo = None if type(lo) is int and lo <= info.min else lo
        hi = None if type(hi) is int and hi >= info.max else hi
    y = a
    if lo is not None:
        y = maximum(y, lo)
    if hi is not None:
        y = minimum(y, hi)
    return y


def astype(x, dtype, /, *, copy=True, device=None):
    dtype = _check_dtype(dtype, "astype")
    _check_operand(x, "astype")
    if is_complex(_dtype(x)) and not is_complex(dtype) and dtype != np.bool_:   # (the real part, as NumPy)
        warnings.warn("Casting complex values to real discards the imaginary part", np.exceptions.ComplexWarning,
                      stacklevel=user_stacklevel())
        return _cast(real(x), dtype)
    return _cast(x, dtype)


def inplace_result(x, y, name: str):
    """What x op= o leaves in x, given y = x op o: NumPy writes into x, so the result keeps x's shape and dtype
    (a float32 x += a float64 array stays float32), and a result that does not fit raises as NumPy's does."""
    if _shape(y) != _shape(x):
        raise ValueError(with_location(f"non-broadcastable output operand with shape {_shape(x)} doesn't match the "
                                       f"broadcast shape {_shape(y)} (x {name}= ...); write x = x {name} ... for a "
                                       "new array"))
    if _dtype(y) == _dtype(x):
        return y
    if not np.can_cast(_dtype(y), _dtype(x), "same_kind"):
        raise TypeError(with_location(f"Cannot cast the result of x {name}= ... from dtype('{_dtype(y)}') to x's "
                                      f"dtype('{_dtype(x)}') with casting rule 'same_kind' (as NumPy); write "
                                      f"x = x {name} ... for a new array of dtype {_dtype(y)}"))
    return _cast(y, _dtype(x))


def stop_gradient(x):
    """Identity in the forward pass; no gradient flows through it. A Python number (a constant) comes
    back as it is and a Python-number argument stays weak: `x32 * stop_gradient(2.0)` is float32, as
    in JAX and TensorFlow (a float64 constant would promote it)."""
    if isinstance(x, (bool, int, float, complex)) and not isinstance(x, np.generic):
        return x
    out = bind(P.stop_gradient, x)
    if isinstance(x, Tracer) and x.weak and isinstance(out, Tracer):
        out.weak = x.weak
    return out


# ufunc -> traced function, for __array_ufunc__ (np.abs is np.absolute, np.acos is np.arccos...)
UFUNCS: dict = {u: OPS[u.__name__] for u in BY_UFUNC}
UFUNCS.update({
    np.absolute: absolute, np.sign: sign, np.power: power,
    np.positive: positive, np.square: square, np.reciprocal: reciprocal,
    np.isnan: isnan, np.isinf: isinf, np.isfinite: isfinite, np.logical_and: logical_and,
    np.logical_or: logical_or, np.logical_not: logical_not, np.logical_xor: logical_xor, np.invert: invert,
    np.signbit: signbit, np.fabs: fabs, np.float_power: float_power, np.fmax: fmax, np.fmin: fmin,
    np.heaviside: heaviside, np.deg2rad: deg2rad, np.rad2deg: rad2deg, np.radians: radians, np.degrees: degrees,
    np.spacing: spacing, np.ldexp: ldexp, np.floor: floor, np.ceil: ceil, np.trunc: trunc,
    np.divmod: divmod, np.modf: modf, np.frexp: frexp, np.conjugate: _conjugate_ufunc,
})
