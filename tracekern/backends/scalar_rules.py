"""Scalar helpers that the compiled backends' generated code calls, written once as plain Python:
cpu_math wraps them with njit, cuda_math with cuda.jit(device=True)."""
from __future__ import annotations

import math


def sign_float(T):
    """NumPy's sign for one float type T (both backends): T's own +-1 (also at +-inf, where x / |x| is NaN), +0 at
    both zeros (x - x), NaN at NaN; type-preserving (no int or float64 operand, which would promote a float32), and
    selects with no call in the loop body, so the cpu backend's loop vectorizes (a tanh call at +-inf made np.sign of
    2**22 float32 take 5.5x its time)."""
    one = T(1)

    def sign(x):
        return one if x > 0 else (-one if x < 0 else x - x)
    return sign


def sign_i(x):
    return int(x > 0) - int(x < 0)   # (NumPy has no bool subtraction)


def maximum_f(a, b):
    # NumPy's maximum: NaN in either operand gives NaN, and of equal operands the second (maximum(0.0, -0.0) is
    # -0.0; a reduction's accumulator is the first operand: np.max([0.0, -0.0]) is -0.0)
    return a if (a > b or a != a) else b


def minimum_f(a, b):
    return a if (a < b or a != a) else b


def maximum_i(a, b):
    return a if a >= b else b


def minimum_i(a, b):
    return a if a <= b else b


def pow_i(a, b):
    # integer power by squaring, wrapping like NumPy; negative exponents give 0 (1 or -1 for |a| == 1): the cuda
    # backend's (a kernel cannot raise); the cpu backend raises NumPy's ValueError first (raising_negative_powers)
    if b < 0:
        return a * 0 + (1 if a == 1 else ((1 if b % 2 == 0 else -1) if a == -1 else 0))
    result = a * 0 + 1
    base = a
    while b > 0:
        if b & 1:
            result = result * base
        base = base * base
        b >>= 1
    return result


ALL = (sign_i, maximum_f, minimum_f, maximum_i, minimum_i, pow_i)


def float_to_int(low):
    """A float's conversion to an integer dtype as NumPy's cast gives it on x86 (cvttsd2si): truncation in range,
    the dtype's lowest value for NaN, ±inf and values beyond (a plain conversion there is undefined behaviour, which
    LLVM folded to garbage: (x * nan).astype(np.int64) gave arbitrary integers). `low` is -2**(bits - 1) in the
    float's own type; the result is a float, which the renderer's cast converts exactly."""
    def to_int(x):
        return x if (x >= low and x < -low) else low
    return to_int


def raising_negative_powers(power):
    """The cpu backend's integer power: `power` (pow_i, compiled) after raising NumPy's ValueError for a negative
    exponent (issue 25; Numba raises it from njit code, prange loops included)."""
    def pow_i_checked(a, b):
        if b < 0:
            raise ValueError("Integers to negative integer powers are not allowed.")
        return power(a, b)

    return pow_i_checked


# -- issue 19: integer division and shifts as NumPy's, gcd/lcm, float division rules, gather indices ------


def floordiv_i(a, b):
    # NumPy: a zero divisor gives 0; MIN // -1 wraps to MIN
    if b == 0:
        return a * 0
    if b == -1:
        return -a
    return a // b


def remainder_i(a, b):
    if b == 0 or b == -1:
        return a * 0
    return a % b


def fmod_i(a, b):
    # C's remainder: the dividend's sign
    if b == 0 or b == -1:
        return a * 0
    r = a % b
    if r != 0 and (r < 0) != (a < 0):
        r = r - b
    return r


def shifts(bits: int):
    """left_shift / right_shift for `bits`-wide integers, as NumPy's: a shift by `bits` or more (or a
    negative one) gives 0, or -1 for a right shift of a negative number."""
    def left_shift(a, b):
        if b < 0 or b >= bits:
            return a * 0
        return a << b

    def right_shift(a, b):
        if b < 0 or b >= bits:
            return a * 0 - 1 if a < 0 else a * 0
        return a >> b

    return left_shift, right_shift


def gcd_i(a, b):
    # NumPy's: Euclid on |a| and |b| in unsigned arithmetic. Here on -|a| and -|b|, which always fit (|INT_MIN|
    # does not: gcd(1, INT_MIN) was -1); Python's % keeps the remainders in (b, 0]. -gcd of 2**(bits - 1) wraps to
    # INT_MIN, as NumPy's cast of its unsigned result
    a = a if a < 0 else -a
    b = b if b < 0 else -b
    while b != 0:
        a, b = b, a % b
    return -a


def lcm_i(a, b):
    g = a if a < 0 else -a   # (gcd_i inline: a device function cannot call a plain Python one)
    h = b if b < 0 else -b
    while h != 0:
        g, h = h, g % h
    g = -g
    if g == 0:
        return a * 0
    # NumPy's: |a| / gcd * |b| in unsigned arithmetic, wrapping (an overflowing lcm may come out negative, as NumPy's;
    # the absolute value of the wrapped product was not). |INT_MIN| is INT_MIN here, 2**(bits - 1) unsigned: its
    # quotient by a positive gcd is negated (by a gcd of INT_MIN it is 1, as unsigned)
    a = -a if a < 0 else a
    b = -b if b < 0 else b
    q = a // g
    q = -q if (a < 0 and g > 0) else q
    return q * b


def float_division(fmod, floor, copysign, T):
    """floor_divide and remainder for one float type T, as NumPy's npy_divmod (fmod, floor and
    copysign are the backend's for T): the quotient is rounded so that x == q * y + r holds best,
    the remainder takes the divisor's sign, a zero divisor gives inf/nan."""
    zero, one, half = T(0), T(1), T(0.5)

    def floordiv(a, b):
        if b == zero:
            return a / b
        mod = fmod(a, b)
        div = (a - mod) / b
        if mod != zero:
            if (b < zero) != (mod < zero):
                div = div - one
        if div != zero:
            q = floor(div)
            if div - q > half:
                q = q + one
            return q
        return copysign(zero, a / b)

    def remainder(a, b):
        mod = fmod(a, b)
        if b == zero:
            return mod
        if mod != zero:
            if (b < zero) != (mod < zero):
                mod = mod + b
            return mod
        return copysign(zero, b)

    return floordiv, remainder


def logaddexp(exp, log1p, T, base2: bool = False):
    """np.logaddexp for one float type T (base2: np.logaddexp2, with exp the backend's exp2), as NumPy's
    npy_logaddexp: equal operands (infinities of one sign included) give x + log 2 (x + 1), otherwise the larger
    plus log1p(exp(-|x - y|)) (over ln 2), and NaN stays NaN."""
    tie = T(1.0) if base2 else T(math.log(2.0))
    scale = T(1.0 / math.log(2.0)) if base2 else T(1.0)

    def fn(x, y):
        if x == y:
            return x + tie
        d = x - y
        if d > 0:
            return x + scale * log1p(exp(-d))
        if d <= 0:
            return y + scale * log1p(exp(d))
        return d   # (NaN)

    return fn


def take_index(i, n):
    """A gather's index into an axis of n: negative counts from the end, and out of range is clamped
    (as JAX does): a gather never reads outside its operand."""
    if i < 0:
        i = i + n
    if i < 0:
        return 0
    if i >= n:
        return n - 1
    return i


# -- issue 30: complex functions from their parts' real functions (the cuda backend's; the cpu backend
# calls Numba's, which port NumPy's loops) --------------------------------------------------------------


def complex_division(C, R, jit=lambda fn: fn):
    """a / b for complex type C with parts of type R, as NumPy's divide loop (Smith's method, the branches and
    operations of NumPy's): a zero divisor gives inf or NaN parts, where Python's and Numba's complex division raise
    ZeroDivisionError."""
    zero, one = R(0), R(1)

    def div(a, b):
        ar, ai, br, bi = R(a.real), R(a.imag), R(b.real), R(b.imag)
        abs_br, abs_bi = abs(br), abs(bi)
        if abs_br >= abs_bi:
            if abs_br == zero and abs_bi == zero:
                return C(complex(ar / abs_br, ai / abs_br))
            rat = bi / br
            scl = one / (br + bi * rat)
            return C(complex((ar + ai * rat) * scl, (ai - ar * rat) * scl))
        rat = br / bi
        scl = one / (bi + br * rat)
        return C(complex((ar * rat + ai) * scl, (ai * rat - ar) * scl))
    return jit(div)


def complex_functions(m, C, R, jit=lambda fn: fn) -> dict:
    """NumPy's complex functions (principal branches) for complex type C with parts of type R, written
    with the real functions of `m` (math on a GPU, NumPy's on the simulator). Every constant is an R,
    so a complex64 function computes in float32. Formulas: Kahan's for the inverse functions ("Branch
    cuts for complex elementary functions", 1987), NumPy's own forms for log1p and expm1; within a few
    ulps of NumPy's away from the branch cuts (tests/test_complex.py). `jit` compiles each function
    as it is defined (cuda.jit(device=True)), so the later ones call the compiled earlier ones."""
    zero, one, two, half, quarter = R(0), R(1), R(2), R(0.5), R(0.25)
    inv_ln2, inv_ln10, ln2 = R(1.4426950408889634), R(0.4342944819032518), R(0.6931471805599453)
    near_lo, near_hi = R(0.7071067811865476), R(1.4142135623730951)

    def make(re, im):
        return C(complex(re, im))
    make = jit(make)
    div = complex_division(C, R, jit)

    def exp(z):
        x, y = z.real, z.imag
        if y == zero:
            return make(m.exp(x), y)
        r = m.exp(x)
        return make(r * m.cos(y), r * m.sin(y))
    exp = jit(exp)

    def log(z):
        x, y = z.real, z.imag
        h = m.hypot(x, y)
        if h > near_lo and h < near_hi:   # log |z| = log1p(|z|^2 - 1) / 2, without cancelling
            re = half * m.log1p((x - one) * (x + one) + y * y)
        else:
            re = m.log(h)
        return make(re, m.atan2(y, x))
    log = jit(log)

    def sqrt(z):
        x, y = z.real, z.imag
        if x == zero and y == zero:
            return make(zero, y)
        t = m.sqrt((abs(x) + m.hypot(x, y)) * half)
        if x >= zero:
            return make(t, y / (two * t))
        return make(abs(y) / (two * t), m.copysign(t, y))
    sqrt = jit(sqrt)

    # (a zero part stays a signed zero where the other part's cosh or sinh overflows: C99's, NumPy's; inf * 0 was NaN)
    def sin(z):
        x, y = z.real, z.imag
        if x == zero:
            return make(x, m.sinh(y))
        return make(m.sin(x) * m.cosh(y), m.cos(x) * m.sinh(y))
    sin = jit(sin)

    def cos(z):
        x, y = z.real, z.imag
        if x == zero:
            return make(m.cosh(y), -(x * m.copysign(one, y)) if y == y else x)
        return make(m.cos(x) * m.cosh(y), -(m.sin(x) * m.sinh(y)))
    cos = jit(cos)

    def sinh(z):
        x, y = z.real, z.imag
        if y == zero:
            return make(m.sinh(x), y)
        return make(m.sinh(x) * m.cos(y), m.cosh(x) * m.sin(y))
    sinh = jit(sinh)

    def cosh(z):
        x, y = z.real, z.imag
        if y == zero:
            return make(m.cosh(x), m.copysign(one, x) * y)
        return make(m.cosh(x) * m.cos(y), m.sinh(x) * m.sin(y))
    cosh = jit(cosh)

    def tanh(z):
        # Kahan's: t = tan y, s = sinh x, rho = cosh x: (beta rho s + i t) / (1 + beta s^2), beta = 1 + t^2
        x, y = z.real, z.imag
        if abs(x) > R(22):
            return make(m.copysign(one, x), R(4) * m.sin(y) * m.cos(y) * m.exp(-two * abs(x)))
        t = m.tan(y)
        beta = one + t * t
        s = m.sinh(x)
        rho = m.sqrt(one + s * s)
        d = one + beta * s * s
        return make(beta * rho * s / d, t / d)
    tanh = jit(tanh)

    def tan(z):   # -i tanh(i z)
        w = tanh(make(-z.imag, z.real))
        return make(w.imag, -w.real)
    tan = jit(tan)

    def arcsin(z):
        x, y = z.real, z.imag
        s1 = sqrt(make(one - x, -y))
        s2 = sqrt(make(one + x, y))
        return make(m.atan2(x, (s1 * s2).real), m.asinh((s1.conjugate() * s2).imag))
    arcsin = jit(arcsin)

    def arccos(z):
        x, y = z.real, z.imag
        s1 = sqrt(make(one - x, -y))
        s2 = sqrt(make(one + x, y))
        return make(two * m.atan2(s1.real, s2.real), m.asinh((s2.conjugate() * s1).imag))
    arccos = jit(arccos)

    def arcsinh(z):   # -i arcsin(i z)
        w = arcsin(make(-z.imag, z.real))
        return make(w.imag, -w.real)
    arcsinh = jit(arcsinh)

    def arccosh(z):
        x, y = z.real, z.imag
        s1 = sqrt(make(x - one, y))
        s2 = sqrt(make(x + one, y))
        return make(m.asinh((s1.conjugate() * s2).real), two * m.atan2(s1.imag, s2.real))
    arccosh = jit(arccosh)

    def arctanh(z):
        x, y = z.real, z.imag
        ax, bx = one - x, one + x
        if abs(x) < half:
            re = quarter * m.log1p(R(4) * x / (ax * ax + y * y))
        else:
            re = quarter * m.log((bx * bx + y * y) / (ax * ax + y * y))
        return make(re, half * m.atan2(two * y, ax * bx - y * y))
    arctanh = jit(arctanh)

    def arctan(z):   # -i arctanh(i z)
        w = arctanh(make(-z.imag, z.real))
        return make(w.imag, -w.real)
    arctan = jit(arctan)

    def log1p(z):   # (NumPy's: log |1 + z| from hypot, not accurate for tiny z, but NumPy's values)
        x, y = z.real, z.imag
        return make(m.log(m.hypot(x + one, y)), m.atan2(y, x + one))
    log1p = jit(log1p)

    def expm1(z):
        x, y = z.real, z.imag
        if y == zero:
            return make(m.expm1(x), y)
        h = m.sin(half * y)
        return make(m.expm1(x) * m.cos(y) - two * h * h, m.exp(x) * m.sin(y))
    expm1 = jit(expm1)

    def log2(z):
        w = log(z)
        return make(w.real * inv_ln2, w.imag * inv_ln2)
    log2 = jit(log2)

    def log10(z):
        w = log(z)
        return make(w.real * inv_ln10, w.imag * inv_ln10)
    log10 = jit(log10)

    def exp2(z):
        return exp(make(z.real * ln2, z.imag * ln2))
    exp2 = jit(exp2)

    def pow(a, b):   # noqa: A001  (NumPy's npy_cpow: small integer exponents by squaring)
        br, bi = b.real, b.imag
        if br == zero and bi == zero:
            return make(one, zero)
        if a.real == zero and a.imag == zero:
            if br > zero:   # (NumPy 2's: 0 ** (0.5 + 1j) is 0)
                return make(zero, zero)
            return make(zero * R(m.inf), zero * R(m.inf))   # (NaN, as NumPy)
        if bi == zero and abs(br) < R(100) and br == m.floor(br):
            n = int(abs(br))
            result = make(one, zero)
            base = a
            while n > 0:
                if n & 1:
                    result = result * base
                base = base * base
                n >>= 1
            return result if br >= zero else div(make(one, zero), result)
        return exp(b * log(a))
    pow = jit(pow)

    return {"div": div, "exp": exp, "log": log, "sqrt": sqrt, "sin": sin, "cos": cos, "tan": tan, "sinh": sinh, "cosh": cosh,
            "tanh": tanh, "arcsin": arcsin, "arccos": arccos, "arctan": arctan, "arcsinh": arcsinh,
            "arccosh": arccosh, "arctanh": arctanh, "log1p": log1p, "expm1": expm1, "log2": log2, "log10": log10,
            "exp2": exp2, "pow": pow}


# -- issue 30: scipy.special's functions, written once for both backends (cpu in float64, then rounded;
# cuda in the operand's type) -----------------------------------------------------------------------------

# B_2j / (2j)! for j = 1..12: the Euler-Maclaurin corrections of the Hurwitz zeta function
_BERNOULLI = (1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510, 43867 / 798, -174611 / 330,
              854513 / 138, -236364091 / 2730)
_ZETA_TERMS = tuple(b / math.factorial(2 * j + 2) for j, b in enumerate(_BERNOULLI))
# Giles' single-precision erfinv ("Approximating the erfinv function", GPU Computing Gems, 2011): a start
# that Newton steps on erf / erfc polish
_ERFINV_CENTRAL = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
                   -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_TAIL = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
                0.00943887047, 1.00167406, 2.83297682)


def special_functions(m, R, jit=lambda fn: fn) -> dict:
    """scipy.special's gammaln, digamma, polygamma, erfinv, log_ndtr, i0, i0e, i1, i1e, xlogy and xlog1py
    for float type R, written with the real functions of `m` (math, or NumPy's on the simulator) and
    constants of type R (a float32 function has no float64 in it). Accuracy against SciPy at hundreds of
    points over each domain: tests/test_special.py and the README's "scipy.special"."""
    single = R(1.0) + R(1e-10) == R(1.0)   # (float32: fewer terms and Newton steps)
    zero, one, two, half = R(0), R(1), R(2), R(0.5)
    inf, nan, pi = R(math.inf), R(math.nan), R(math.pi)
    shift = R(6) if single else R(10)         # digamma's recurrence up to here, then the asymptotic series
    tail = R(-10) if single else R(-20)       # log_ndtr's asymptotic series below here
    bessel_switch = R(20)                     # the Bessel functions' power series below |x| = 20, asymptotic above
    sqrt2, inv_sqrt2pi, two_over_sqrtpi = R(math.sqrt(2)), R(1 / math.sqrt(2 * math.pi)), R(2 / math.sqrt(math.pi))
    half_log_2pi, log_pi = R(0.5 * math.log(2 * math.pi)), R(math.log(math.pi))
    zeta_terms = tuple(R(c) for c in _ZETA_TERMS)
    central, tails = tuple(R(c) for c in _ERFINV_CENTRAL), tuple(R(c) for c in _ERFINV_TAIL)
    newton_steps = 2 if single else 3
    exact = R(2.0 ** 23) if single else R(2.0 ** 52)   # (every float this large is an integer)

    def floor(x):
        """floor as a float: Numba's math.floor gives an int64, which overflows past 2**63 (floor(-1e300))."""
        if not abs(x) < exact:   # (an integer already, inf or NaN)
            return x
        return R(m.floor(x))
    floor = jit(floor)

    def gammaln(x):
        if x == -inf:   # (SciPy's)
            return x
        return R(m.lgamma(x))
    gammaln = jit(gammaln)

    def digamma(x):
        if x != x or x == inf:
            return x
        if x == -inf:
            return nan
        if x == zero:   # (SciPy's: -inf at +0, inf at -0)
            return m.copysign(inf, -x)
        result = zero
        if x < zero:
            if x == floor(x):
                return nan
            # reflection: psi(x) = psi(1 - x) - pi / tan(pi x), tan's period reduced first to the nearest
            # integer's distance (exact; x - floor(x) rounds to 1 for x in (-1e-16, 0): psi(-1e-20) was 2.6e16)
            r = x - floor(x + half)
            result = -pi / m.tan(pi * r)
            x = one - x
        while x < shift:
            result = result - one / x
            x = x + one
        z = one / (x * x)
        series = z * (R(1 / 12) - z * (R(1 / 120) - z * (R(1 / 252) - z * (R(1 / 240) - z * (
            R(1 / 132) - z * (R(691 / 32760) - z * R(1 / 12)))))))
        return result + m.log(x) - half / x - series
    digamma = jit(digamma)

    def zeta(s, q):
        """The Hurwitz zeta function sum_k (q + k)^-s for s > 1 (Euler-Maclaurin: terms to q + n >= 10)."""
        if q <= zero and q == floor(q):
            return inf
        total = zero
        a = q
        while a < shift:
            total = total + m.pow(a, -s)
            a = a + one
        total = total + m.pow(a, one - s) / (s - one) + half * m.pow(a, -s)
        factor = s * m.pow(a, -s - one)   # s (s + 1) ... (s + 2j - 2) a^(-s - 2j + 1)
        for j in range(len(zeta_terms)):
            term = zeta_terms[j] * factor
            total = total + term
            if abs(term) < R(1e-17) * abs(total):
                break
            factor = factor * (s + R(2 * j + 1)) * (s + R(2 * j + 2)) / (a * a)
        return total
    zeta = jit(zeta)

    def polygamma(n, x):
        """psi^(n)(x) = (-1)^(n+1) n! zeta(n + 1, x) for n = 1, 2, ...; digamma for n = 0; NaN for other n."""
        if n != n or x != x or n < zero or n != floor(n):
            return nan
        if n == zero:
            return digamma(x)
        sign = one if n - two * floor(n * half) == one else -one   # ((-1)^(n+1))
        return sign * m.gamma(n + one) * zeta(n + one, x)
    polygamma = jit(polygamma)

    def erfinv(x):
        if x != x or x < -one or x > one:
            return nan
        if x == one or x == -one:
            return m.copysign(inf, x)
        ax = abs(x)
        c = one - ax   # (exact for ax > 1/2)
        w = -m.log(c * (one + ax))
        if w < R(5):
            w = w - R(2.5)
            p = central[0]
            for k in central[1:]:
                p = k + p * w
            y = p * ax
        elif w < R(16):   # (Giles' range: every float32 below 1)
            w = m.sqrt(w) - R(3)
            p = tails[0]
            for k in tails[1:]:
                p = k + p * w
            y = p * ax
        else:   # the far tail: erfc(y) ~ exp(-y^2) / (y sqrt(pi)), so y^2 ~ L - log(L) / 2 - log(pi) / 2, L = -log(c)
            big = -m.log(c)
            y = m.sqrt(big - half * m.log(big) - half * log_pi)
        for _ in range(newton_steps):
            if ax < half:   # Newton on erf(y) = ax
                y = y - (m.erf(y) - ax) / (two_over_sqrtpi * m.exp(-y * y))
            else:   # Newton on log erfc(y) = log(1 - ax): near linear in the tail, so it converges from afar
                tail_mass = m.erfc(y)
                y = y + (m.log(tail_mass) - m.log(c)) * tail_mass / (two_over_sqrtpi * m.exp(-y * y))
        return m.copysign(y, x)
    erfinv = jit(erfinv)

    def log_ndtr(x):
        if x != x:
            return x
        if x > -one:   # log(1 - ndtr(-x)), without rounding ndtr(x) to 1
            return m.log1p(-half * m.erfc(x / sqrt2))
        if x > tail:
            return m.log(half * m.erfc(-x / sqrt2))
        if x == -inf:
            return x
        # -x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - 15/x^6 + ...)
        z = one / (x * x)
        term, total, k = one, one, one
        while k < R(20):
            term = -term * (two * k - one) * z
            total = total + term
            if abs(term) < R(1e-17):
                break
            k = k + one
        return -half * x * x - m.log(-x) - half_log_2pi + m.log(total)
    log_ndtr = jit(log_ndtr)

    def _bessel_series(x, order):
        """sum_k (x^2/4)^k / (k! (k + order)!) (times x / 2 for order 1): every term positive."""
        q = x * x * R(0.25)
        term = one if order == 0 else half * x
        total = term
        k = one
        while k < R(200):
            term = term * q / (k * (k + R(order)))
            total = total + term
            if term <= R(1e-17) * total:
                break
            k = k + one
        return total
    _bessel_series = jit(_bessel_series)

    def _bessel_scaled_asymptotic(ax, order):
        """e^-x I_order(x) for large x: (2 pi x)^-1/2 sum_k (-1)^k prod_j (4 order^2 - (2j - 1)^2) / (k! (8x)^k)."""
        mu = R(4 * order * order)
        term, total, k = one, one, one
        while k < R(60):
            odd = two * k - one
            term = -term * (mu - odd * odd) / (k * R(8) * ax)
            total = total + term
            if abs(term) < R(1e-17) * abs(total):
                break
            k = k + one
        return total * inv_sqrt2pi / m.sqrt(ax)
    _bessel_scaled_asymptotic = jit(_bessel_scaled_asymptotic)

    def i0e(x):
        ax = abs(x)
        if ax != ax:
            return x
        if ax < bessel_switch:
            return _bessel_series(ax, 0) * m.exp(-ax)
        if ax == inf:
            return zero
        return _bessel_scaled_asymptotic(ax, 0)
    i0e = jit(i0e)

    def i0(x):
        ax = abs(x)
        if ax < bessel_switch:
            return _bessel_series(ax, 0)
        if ax == inf:
            return nan   # (SciPy's and NumPy's)
        grow = m.exp(half * ax)   # (e^x in two halves: e^x alone overflows before I0(x) does)
        return i0e(x) * grow * grow
    i0 = jit(i0)

    def i1e(x):
        ax = abs(x)
        if ax != ax:
            return x
        if ax < bessel_switch:
            v = _bessel_series(ax, 1) * m.exp(-ax)
        elif ax == inf:
            v = zero
        else:
            v = _bessel_scaled_asymptotic(ax, 1)
        return m.copysign(v, x)
    i1e = jit(i1e)

    def i1(x):
        ax = abs(x)
        if ax < bessel_switch:
            return m.copysign(_bessel_series(ax, 1), x)
        if ax == inf:
            return nan
        grow = m.exp(half * ax)
        return i1e(x) * grow * grow
    i1 = jit(i1)

    def xlogy(x, y):   # 0 where x == 0, unless y is NaN (SciPy's)
        if x == zero and y == y:
            return zero
        return x * m.log(y)
    xlogy = jit(xlogy)

    def xlog1py(x, y):
        if x == zero and y == y:
            return zero
        return x * m.log1p(y)
    xlog1py = jit(xlog1py)

    return {"gammaln": gammaln, "digamma": digamma, "polygamma": polygamma, "erfinv": erfinv, "log_ndtr": log_ndtr,
            "i0": i0, "i0e": i0e, "i1": i1, "i1e": i1e, "xlogy": xlogy, "xlog1py": xlog1py}


def rounded(fn, wide, T, nargs: int):
    """fn computed on `wide` values, rounded to T (cpu's float32 special functions: float64, then rounded).
    (Defined here, beside fn, so that Numba's disk cache of the wrapper follows this file.)"""
    if nargs == 1:
        def unary(x):
            return T(fn(wide(x)))
        return unary

    def binary(x, y):
        return T(fn(wide(x), wide(y)))
    return binary
