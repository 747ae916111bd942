"""Discrete Fourier transforms over the trailing axes: complex to complex (forward or inverse), real to
complex (the half spectrum) and complex to real, all unnormalized (tracekern.numpy.fft applies norm=).

One primitive, `fft`, with kind "c2c", "r2c" or "c2r" over the last `ndim` axes (tk.numpy moves other
axes there). Its VJP is the adjoint transform under the complex convention (the README's "Complex
numbers"): c2c's the opposite direction, r2c's the real part of the inverse of the zero-padded
cotangent, c2r's the r2c of the cotangent weighted 2 where a half-spectrum entry stands for two."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval, complex_dtype, is_complex, is_float, real_dtype
from . import ops
from .core import Primitive

KINDS = ("c2c", "r2c", "c2r")


def fft_numpy(x: np.ndarray, *, kind: str, inverse: bool, ndim: int, n: int | None) -> np.ndarray:
    """The transform with NumPy (pocketfft): what the interpreter runs and the backends are held to."""
    axes = tuple(range(x.ndim - ndim, x.ndim))
    if kind == "c2c":
        y = np.fft.ifftn(x, axes=axes, norm="forward") if inverse else np.fft.fftn(x, axes=axes, norm="backward")
        return y.astype(x.dtype, copy=False)
    if kind == "r2c":
        return np.fft.rfftn(x, axes=axes, norm="backward").astype(complex_dtype(x.dtype), copy=False)
    s = tuple(x.shape[x.ndim - ndim:-1]) + (n,)
    return np.fft.irfftn(x, s=s, axes=axes, norm="forward").astype(real_dtype(x.dtype), copy=False)


def half_weights(n: int, dtype) -> np.ndarray:
    """How many entries of the full spectrum each of the n // 2 + 1 of a half spectrum stands for: 1
    for the zero frequency (and n / 2 for even n), 2 for the others."""
    w = np.full(n // 2 + 1, 2.0)
    w[0] = 1.0
    if n % 2 == 0:
        w[-1] = 1.0
    return w.astype(dtype)


class FFT(Primitive):
    """fft[kind, inverse, ndim, n](x): "c2c" (complex, forward or inverse), "r2c" (float -> complex, the
    last axis n -> n // 2 + 1), "c2r" (complex -> float, the last axis n // 2 + 1 -> n, `n` given; the
    imaginary parts of the zero and n / 2 frequencies are ignored, as NumPy's irfft does)."""

    linear = True   # (forward mode may apply it to tangents)

    def batch(self, args, batched, **params):
        """Over trailing axes: a leading batch axis is one more axis it leaves alone."""
        return [ops.fft(args[0], **params)], [True]

    def abstract_eval(self, x: Aval, *, kind: str, inverse: bool, ndim: int, n: int | None):
        if kind not in KINDS:
            raise ValueError(f"fft: kind must be one of {KINDS}, got {kind!r}")
        if not 1 <= ndim <= x.ndim:
            raise ShapeError(f"fft: {ndim} axes of an array of shape {x.shape}")
        if kind == "r2c":
            if not is_float(x.dtype):
                raise TypeError(f"fft (r2c): needs a float32 or float64 operand, got {x.dtype}")
            return (Aval(x.shape[:-1] + (x.shape[-1] // 2 + 1,), complex_dtype(x.dtype)),)
        if not is_complex(x.dtype):
            raise TypeError(f"fft ({kind}): needs a complex operand, got {x.dtype}")
        if kind == "c2c":
            return (x,)
        if n is None or n < 1 or x.shape[-1] != n // 2 + 1:
            raise ShapeError(f"fft (c2r): {n} points need {(n or 0) // 2 + 1} along the last axis, got shape {x.shape}")
        return (Aval(x.shape[:-1] + (n,), real_dtype(x.dtype)),)

    def impl(self, x, *, kind, inverse, ndim, n):
        return fft_numpy(x, kind=kind, inverse=inverse, ndim=ndim, n=n)

    def vjp(self, cts, ins, outs, active, *, kind, inverse, ndim, n):
        (ct,), (x,) = cts, ins
        if kind == "c2c":
            return [ops.fft(ct, kind="c2c", inverse=not inverse, ndim=ndim, n=None)]
        if kind == "r2c":   # x real: the real part of the adjoint of the half spectrum (zero-padded)
            full = tuple(x.shape[:-1]) + (x.shape[-1],)
            index = tuple((0, s, 1) for s in ct.shape)
            padded = ops.unslice(ct, shape=full, index=index)
            back = ops.fft(padded, kind="c2c", inverse=True, ndim=ndim, n=None)
            return [ops.real(back)]
        half = ops.fft(ct, kind="r2c", inverse=False, ndim=ndim, n=None)
        weights = ops.constant(half, half_weights(n, half.dtype))
        return [ops.mul(half, ops.broadcast_to(weights, shape=tuple(half.shape)))]


fft = FFT("fft")
