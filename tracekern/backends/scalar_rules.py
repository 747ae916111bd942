"""Scalar helpers that the compiled backends' generated code calls, written once as plain Python:
cpu_math wraps them with njit, cuda_math with cuda.jit(device=True)."""
from __future__ import annotations


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
    # integer power by squaring, wrapping like NumPy; negative exponents give 0 (1 or -1 for |a| == 1)
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
