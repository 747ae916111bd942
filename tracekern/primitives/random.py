"""Counter-based random numbers: iota (each element's row-major position) and random_bits (Threefry-2x32,
20 rounds, of a key and a counter: JAX's default generator, bit for bit).

A key is an int64 holding Threefry's two 32-bit key words (high word, low word). An element's
counter is its position in the draw, so its bits are a pure function of the key and the position:
the same on every backend and on every re-run of the same equations (a recompute region, a
checkpointed loop). The rounds are written once, in `threefry_bits`, with operators that NumPy
arrays, Numba and numba.cuda all understand: the NumPy impl calls it on arrays, and the backends'
math modules compile it (cpu_math with njit, cuda_math as a device function). Every intermediate
word stays below 2**63, so int64 arithmetic never overflows on any of them."""
from __future__ import annotations

import numpy as np

from ..ir import Aval
from .core import Primitive, no_operands
from .elementwise import Elementwise, broadcast_shapes

INT64 = np.dtype(np.int64)


def threefry_bits(key, counter, bits):
    """The top `bits` (1..64) bits of Threefry-2x32's output block (x0, x1) for `key` and `counter`
    (int64 scalars or arrays): of the 32-bit word x0 ^ x1 when bits <= 32, of the 64-bit word
    x0 * 2**32 + x1 otherwise (as int64: bits=64 gives its two's complement pattern). The counter's
    two words are its high and low 32 bits, as in JAX's partitionable Threefry."""
    m = 0xFFFFFFFF
    k0 = (key >> 32) & m
    k1 = key & m
    k2 = k0 ^ k1 ^ 0x1BD11BDA
    x0 = (((counter >> 32) & m) + k0) & m
    x1 = ((counter & m) + k1) & m
    for s in range(1, 6):                  # 5 groups of 4 rounds, a key injection after each
        rotations = (13, 15, 26, 6) if s % 2 == 1 else (17, 29, 16, 24)
        for r in rotations:
            x0 = (x0 + x1) & m
            x1 = (((x1 << r) | (x1 >> (32 - r))) & m) ^ x0
        a = k1 if s % 3 == 1 else (k2 if s % 3 == 2 else k0)
        b = k2 if s % 3 == 1 else (k0 if s % 3 == 2 else k1)
        x0 = (x0 + a) & m
        x1 = (x1 + b + s) & m
    if bits <= 32:
        return (x0 ^ x1) >> (32 - bits)
    if bits < 64:
        return (x0 << (bits - 32)) | (x1 >> (64 - bits))
    return ((x0 - ((x0 >> 31) << 32)) << 32) | x1   # (x0 as a signed word, so nothing overflows)


class Iota(Primitive):
    """iota[shape]: an int64 array whose every element is its own row-major position. Kernels compute
    it from the loop indices (fusion kind "index"), so it never becomes an array of its own."""

    fusion = "index"

    batch = no_operands

    def abstract_eval(self, *, shape):
        return (Aval(tuple(shape), INT64),)

    def impl(self, *, shape):
        return np.arange(int(np.prod(shape, dtype=np.int64)), dtype=np.int64).reshape(shape)

    def index_scalar(self, idx, *, shape) -> str:
        """The position of the element at `idx` (one index expression per axis) as a scalar expression."""
        expr = "i64(0)"
        for i, n in zip(idx, shape):
            expr = f"i64({i})" if expr == "i64(0)" else f"({expr} * {n} + i64({i}))"
        return expr

    def differentiable(self, **params) -> bool:
        return False


class RandomBits(Elementwise):
    """random_bits[bits](key, counter): the top `bits` bits of Threefry-2x32 (threefry_bits) for
    each pair of elements, int64 operands broadcast together; no gradient."""

    def __init__(self):
        super().__init__("random_bits", None, None, nin=2)

    def abstract_eval(self, key: Aval, counter: Aval, *, bits):
        if key.dtype != INT64 or counter.dtype != INT64:
            raise TypeError(f"random_bits: key and counter must be int64, got {key.dtype} and {counter.dtype}")
        if not 1 <= int(bits) <= 64:
            raise ValueError(f"random_bits: bits must be between 1 and 64, got {bits}")
        return (Aval(broadcast_shapes(self.name, key.shape, counter.shape), INT64),)

    def impl(self, key, counter, *, bits):
        return np.asarray(threefry_bits(np.asarray(key, np.int64), np.asarray(counter, np.int64), int(bits)), np.int64)

    def scalar_for(self, literals, *, bits) -> str:
        return "{random_bits}({0}, {1}, " + str(int(bits)) + ")"


iota = Iota("iota")
random_bits = RandomBits()
