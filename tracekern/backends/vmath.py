"""Vectorisable float32/float64 transcendentals for Numba loops: range reduction plus a polynomial in
plain arithmetic (LLVM auto-vectorises it), with bit casts through tiny LLVM intrinsics.

Each function is made once per dtype by a factory, so float32 and float64 share one definition.
Accuracy (tests/test_cpu_math.py): a few ulp against NumPy over wide ranges, with inf, nan, -0.0,
overflow and underflow handled as NumPy does. sin/cos/tan are exact for |x| < TRIG_LIMIT (2**19),
where the Cody-Waite reduction below stops being exact; a compiled step that meets a larger
argument runs again as its libm variant (the *_exact versions; backends/cpu.py). float64 pow calls libm."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# No forced inlining: Numba-level inline="always" made W1's cold compile 44 s instead of 3 s, and
# LLVM inlines these small functions into the fused loops anyway (the loops still vectorise).
# cache=True: compiled once per machine, not once per process (see _named).
INLINE = dict(error_model="numpy", cache=True)
# vmath's own functions may fuse a multiply and an add into one FMA ("contract", nothing else of
# fastmath): a fused loop of them is bound by the latency of its polynomials' Horner chains, which
# FMA halves (W1 of issue 26: 1.4x), and each FMA rounds once where a multiply and an add rounded
# twice, so no result is less accurate (tests/test_cpu_math.py). A machine without FMA gets the
# multiply and the add, as before. Only here: cpu_math's other functions (complex ones, say) keep
# NumPy's roundings, and so do the kernels' own statements (x * 0.9 + 0.1 is two roundings in NumPy).
VMATH = dict(INLINE, fastmath={"contract"})

_NAMED: dict[str, object] = {}
_NAMED_TYPES: dict[type, type] = {}


def _lookup(name: str):
    return _NAMED[name]


def _named(obj, name: str):
    """Give a dispatcher or intrinsic a pickle that names it. Numba's disk cache keys a closure on
    the pickle of its cell contents, and a plain dispatcher pickles with a per-process id, so the
    factory-made functions below would never hit the cache (and would grow its index each run)."""
    base = type(obj)
    sub = _NAMED_TYPES.get(base)
    if sub is None:
        sub = _NAMED_TYPES[base] = type(f"Named{base.__name__}", (base,), {
            "__reduce__": lambda self: (_lookup, (self._tk_name,))})
    obj.__class__ = sub
    obj._tk_name = name
    _NAMED[name] = obj
    return obj


def jit_named(name: str, flags: dict = INLINE):
    """njit (cached on disk) for a function that a factory makes once per dtype. Each gets its own
    qualified name: Numba names a function's cache files and its machine-code symbols by qualified
    name plus a per-process counter, so closures of one code object, cached by one process and
    compiled fresh by another, could share a symbol, and the wrong one would be linked."""
    def deco(fn):
        fn.__qualname__ = fn.__name__ = name
        return _named(njit(**flags)(fn), name)

    return deco


def _bitcast(src, dst, llvm_type):
    @intrinsic
    def cast(typingctx, x):
        if x != src:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], llvm_type)

        return dst(src), codegen

    return cast


f32_bits = _named(_bitcast(types.float32, types.int32, ir.IntType(32)), "f32_bits")
f32_from_bits = _named(_bitcast(types.int32, types.float32, ir.FloatType()), "f32_from_bits")
f64_bits = _named(_bitcast(types.float64, types.int64, ir.IntType(64)), "f64_bits")
f64_from_bits = _named(_bitcast(types.int64, types.float64, ir.DoubleType()), "f64_from_bits")


def _tanh_taylor(n: int) -> list[float]:
    """Coefficients a_k of tanh(x) = sum a_k x**(2k+1), from tanh' = 1 - tanh**2 (exact fractions)."""
    a = [Fraction(1)]
    for k in range(1, n):
        a.append(-sum(a[i] * a[k - 1 - i] for i in range(k)) / (2 * k + 1))
    return [float(c) for c in a]


class _Float:
    """Per-dtype constants: the float and int types, bit layout, and polynomial lengths."""

    def __init__(self, dtype):
        self.T = np.float32 if dtype == "float32" else np.float64
        single = dtype == "float32"
        self.I = np.int32 if single else np.int64
        self.bits = f32_bits if single else f64_bits
        self.from_bits = f32_from_bits if single else f64_from_bits
        self.mant = 23 if single else 52
        self.bias = 127 if single else 1023
        self.exp_mask = 0xFF if single else 0x7FF
        self.min_normal = float(np.finfo(self.T).tiny)
        self.exp_terms = 8 if single else 14        # Taylor terms of exp on |r| <= ln2/2
        self.log_terms = 5 if single else 10        # terms of the atanh series in s**2 <= 0.0295
        self.tanh_terms = 7 if single else 15       # Taylor terms of tanh on |x| < 0.4
        self.expm1_terms = 7 if single else 14      # Taylor terms of (expm1(x) - x) / x**2 on |x| < 0.35
        self.exp_clamp = (-104.0, 89.0) if single else (-760.0, 720.0)
        # ln2 split so that n * ln2_hi is exact
        self.ln2_hi, self.ln2_lo = (0.693359375, -2.12194440e-4) if single else (6.93147180369123816490e-01,
                                                                                 1.90821492927058770002e-10)


def _horner(coeffs) -> tuple:
    """Polynomial coefficients, highest degree first, for the inline Horner loops below (a loop over
    a constant tuple, which LLVM unrolls; a helper function would be one more compile per process)."""
    return tuple(coeffs)


def _make(dtype):
    sfx = "f32" if dtype == "float32" else "f64"
    F = _Float(dtype)
    T, I = F.T, F.I  # noqa: E741
    bits, from_bits = F.bits, F.from_bits
    MANT, BIAS, EMASK = I(F.mant), I(F.bias), I(F.exp_mask)
    MANT_MASK = I((1 << F.mant) - 1)
    ONE_BITS = I(F.bias << F.mant)
    LOG2E, LN2_HI, LN2_LO = T(1 / math.log(2)), T(F.ln2_hi), T(F.ln2_lo)
    LO, HI = T(F.exp_clamp[0]), T(F.exp_clamp[1])
    ZERO, HALF, ONE, TWO = T(0), T(0.5), T(1), T(2)
    INF, NAN = T(np.inf), T(np.nan)
    SQRT2 = T(math.sqrt(2))
    MIN_NORMAL = T(F.min_normal)
    SUB_SCALE, SUB_SHIFT = T(2.0 ** (F.mant + 2)), I(F.mant + 2)
    exp_poly = _horner([T(1 / math.factorial(k)) for k in reversed(range(F.exp_terms))])
    log_poly = _horner([T(2 / (2 * k + 3)) for k in reversed(range(F.log_terms))])
    tanh_poly = _horner([T(c) for c in reversed(_tanh_taylor(F.tanh_terms)[1:])])
    TANH_SMALL = T(0.4)
    EXPM1_SMALL = T(0.35)
    expm1_poly = _horner([T(1 / math.factorial(k + 2)) for k in reversed(range(F.expm1_terms))])
    SHIFTER = T(1.5 * 2.0 ** F.mant)

    @jit_named(f"exp_{sfx}", VMATH)
    def exp(x):
        xc = LO if x < LO else x          # NaN passes both clamps unchanged
        xc = HI if xc > HI else xc
        n = (xc * LOG2E + SHIFTER) - SHIFTER   # round to nearest (np.floor would give float64)
        n = ZERO if n != n else n
        r = (xc - n * LN2_HI) - n * LN2_LO
        p = exp_poly[0]
        for c in exp_poly[1:]:
            p = p * r + c
        k = I(n)
        k1 = k >> 1                        # 2**n as two factors keeps subnormal results exact
        k2 = k - k1
        return p * from_bits(I((k1 + BIAS) << MANT)) * from_bits(I((k2 + BIAS) << MANT))

    @jit_named(f"log_{sfx}", VMATH)
    def log(x):
        sub = x < MIN_NORMAL
        xs = x * SUB_SCALE if sub else x
        b = bits(xs)
        e = ((b >> MANT) & EMASK) - BIAS - (SUB_SHIFT if sub else I(0))
        m = from_bits(I((b & MANT_MASK) | ONE_BITS))      # in [1, 2)
        big = m > SQRT2
        m = m * HALF if big else m
        e = e + 1 if big else e
        f = m - ONE
        s = f / (TWO + f)
        z = s * s
        p = log_poly[0]
        for c in log_poly[1:]:
            p = p * z + c
        r = z * p
        hfsq = HALF * f * f
        dk = T(e)
        res = dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f)
        special = -INF if x == ZERO else (NAN if (x < ZERO or x != x) else INF)
        return res if (x > ZERO and x < INF) else special

    @jit_named(f"log1p_{sfx}", VMATH)
    def log1p(x):
        u = ONE + x
        d = u - ONE
        res = log(u) * (x / (ZERO + (ONE if d == ZERO else d)))
        return x if (d == ZERO or x == INF) else res

    @jit_named(f"expm1_{sfx}", VMATH)
    def expm1(x):
        # |x| < 0.35: x + x*x*P(x) (Taylor), no cancellation; elsewhere exp(x) - 1 loses nothing
        p = expm1_poly[0]
        for c in expm1_poly[1:]:
            p = p * x + c
        small = x + x * x * p
        small = x if x == ZERO else small  # keeps -0.0
        return small if abs(x) < EXPM1_SMALL else exp(x) - ONE

    @jit_named(f"tanh_{sfx}", VMATH)
    def tanh(x):
        a = abs(x)
        z = x * x
        p = tanh_poly[0]
        for c in tanh_poly[1:]:
            p = p * z + c
        small = x + x * z * p
        small = x if x == ZERO else small  # keeps -0.0
        big = ONE - TWO / (exp(a + a) + ONE)
        big = big if x >= ZERO else -big
        return small if a < TANH_SMALL else big

    return exp, log, log1p, expm1, tanh


exp_f32, log_f32, log1p_f32, expm1_f32, tanh_f32 = _make("float32")
exp_f64, log_f64, log1p_f64, expm1_f64, tanh_f64 = _make("float64")


# -- sin, cos, tan: reduce by pi/2 in float64 (Cody-Waite, three parts), then Taylor on |r| <= pi/4;
#    float32 evaluates the polynomials in float32 after the same float64 reduction.
_PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624879595063154e-21)  # fdlibm pio2_1, pio2_2, pio2_2t
# k * _PIO2[0] stays exact below this; beyond it a step runs its libm variant. A float32 (exact): the kernels' check
# of a float32 argument, abs(x) >= TRIG_LIMIT, then compares float32s, with no float64 in the loop
TRIG_LIMIT = np.float32(2.0 ** 19)


def _make_trig(dtype):
    sfx = "f32" if dtype == "float32" else "f64"
    T = np.float32 if dtype == "float32" else np.float64
    terms = (6, 7) if dtype == "float32" else (9, 10)
    sin_poly = _horner([T((-1) ** k / math.factorial(2 * k + 1)) for k in reversed(range(terms[0]))])  # sin r = r * P(r*r)
    cos_poly = _horner([T((-1) ** k / math.factorial(2 * k)) for k in reversed(range(terms[1]))])

    @jit_named(f"reduce_{sfx}", VMATH)
    def reduce(x):
        """(sin r, cos r, quadrant) with x = r + quadrant * pi/2."""
        xd = np.float64(x)
        k = (xd * 0.6366197723675814 + 6755399441055744.0) - 6755399441055744.0   # round to nearest
        k = 0.0 if k != k else k
        r = T(((xd - k * _PIO2[0]) - k * _PIO2[1]) - k * _PIO2[2])
        z = r * r
        ps = sin_poly[0]
        for c in sin_poly[1:]:
            ps = ps * z + c
        pc = cos_poly[0]
        for c in cos_poly[1:]:
            pc = pc * z + c
        return r * ps, pc, np.int64(k) & 3

    # the value in quadrant q is s, c, -s, -c (plain selects, so loops stay vectorised)
    @jit_named(f"sin_{sfx}", VMATH)
    def sin(x):
        s, c, q = reduce(x)
        v = c if (q & 1) == 1 else s
        return -v if (q & 2) == 2 else v

    @jit_named(f"cos_{sfx}", VMATH)
    def cos(x):
        s, c, q = reduce(x)
        v = s if (q & 1) == 1 else c
        return v if ((q + 1) & 2) == 0 else -v

    @jit_named(f"tan_{sfx}", VMATH)
    def tan(x):
        s, c, q = reduce(x)
        odd = (q & 1) == 1
        return (-c if odd else s) / (s if odd else c)

    def libm(fn):
        @jit_named(f"{fn.__name__}_exact_{sfx}")
        def exact(x):
            return T(fn(np.float64(x)))

        return exact

    return sin, cos, tan, libm(math.sin), libm(math.cos), libm(math.tan)


sin_f32, cos_f32, tan_f32, sin_exact_f32, cos_exact_f32, tan_exact_f32 = _make_trig("float32")
sin_f64, cos_f64, tan_f64, sin_exact_f64, cos_exact_f64, tan_exact_f64 = _make_trig("float64")


# -- pow: float32 through float64 exp/log (exact enough to round correctly almost always);
#    float64 calls libm, whose special cases NumPy follows.
@njit(**VMATH)
def pow_f32(x, y):
    xd, yd = np.float64(x), np.float64(y)
    ax = abs(xd)
    mag = exp_f64(yd * log_f64(ax))
    y_int = np.floor(yd) == yd
    y_odd = y_int and abs(yd) < 2.0 ** 53 and (np.int64(yd) & 1) == 1
    res = -mag if (xd < 0 and y_odd) else mag
    res = np.nan if (xd < 0 and not y_int and ax - ax == 0 and yd - yd == 0) else res
    # x == 0 with a negative odd y keeps the sign of zero: 1/pow
    res = (np.copysign(np.inf, xd) if y_odd else np.inf) if (xd == 0 and yd < 0) else res
    res = (xd if y_odd else 0.0) if (xd == 0 and yd > 0) else res
    res = 1.0 if (yd == 0 or xd == 1) else res
    res = (1.0 if ax == 1 else (np.inf if (ax > 1) == (yd > 0) else 0.0)) if (abs(yd) == np.inf and xd == xd) else res
    return np.float32(res)


@njit(**INLINE)
def pow_f64(x, y):
    return x ** y
