"""Scalar helpers that the compiled backends' generated code calls, written once as plain Python:
cpu_math wraps them with njit, cuda_math with cuda.jit(device=True)."""
from __future__ import annotations

import math


def sign_f(x):
    # (type-preserving: no int operand, which would promote a float32 to float64)
    return x if (x != x or x == 0) else x / abs(x)


def sign_i(x):
    return int(x > 0) - int(x < 0)   # (NumPy has no bool subtraction)


def maximum_f(a, b):
    # NumPy's maximum: NaN in either operand gives NaN
    return a if (a >= b or a != a) else b


def minimum_f(a, b):
    return a if (a <= b or a != a) else b


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


ALL = (sign_f, sign_i, maximum_f, minimum_f, maximum_i, minimum_i, pow_i)


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
    a = -a if a < 0 else a
    b = -b if b < 0 else b
    while b != 0:
        a, b = b, a % b
    return a


def lcm_i(a, b):
    g = -a if a < 0 else a   # (gcd inline: a device function cannot call a plain Python one)
    h = -b if b < 0 else b
    while h != 0:
        g, h = h, g % h
    if g == 0:
        return a * 0
    r = (a // g) * b
    return -r if r < 0 else r


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
