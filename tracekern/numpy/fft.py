"""tk.numpy.fft: np.fft on traced arrays. fft/ifft, rfft/irfft, fft2/ifft2, rfft2/irfft2, fftn/ifftn,
rfftn/irfftn and hfft/ihfft with n= / s=, axis= / axes= (an axis may repeat, as NumPy's loop) and norm=, as
NumPy's (dtypes included: float32 gives complex64); fftfreq/rfftfreq and fftshift/ifftshift.

Each transform crops or zero-pads its axes to the lengths asked, moves them last, runs the `fft`
primitive (unnormalized, tracekern/primitives/fft.py) and scales by norm=, then moves the axes back."""
from __future__ import annotations

import math
import warnings

import numpy as np

from ..errors import user_stacklevel
from ..ir import complex_dtype, is_complex
from ._core import P, ShapeError, Tracer, _array, _cast, _dtype, _reject, _shape, bind, with_location
from .shapes import moveaxis, roll
from .ufuncs import conjugate, divide, multiply

__all__ = ["fft", "ifft", "rfft", "irfft", "fft2", "ifft2", "rfft2", "irfft2", "fftn", "ifftn", "rfftn", "irfftn",
           "hfft", "ihfft", "fftfreq", "rfftfreq", "fftshift", "ifftshift"]

_NORMS = (None, "backward", "ortho", "forward")


def _complex(a, fname):
    """a as NumPy's FFTs take it: complex stays, float32 becomes complex64, anything else complex128."""
    dtype = _dtype(a)
    return a if is_complex(dtype) else _cast(a, complex_dtype(dtype if dtype == np.float32 else np.float64))


def _real(a, fname):
    dtype = _dtype(a)
    if is_complex(dtype):
        other = "np.fft.fft" if fname == "ihfft" else f"np.fft.fft (or {fname.replace('r', '', 1)})"
        raise TypeError(with_location(f"np.fft.{fname} takes real input, got {dtype.name}; use {other} for complex input, "
                                      "or pass np.real(a)"))
    return a if dtype in (np.float32, np.float64) else _cast(a, np.float64)


def _plan(a, s, axes, fname: str):
    """(normalized axes, their lengths): NumPy's rules for s= and axes= (an axis may repeat; s without axes
    names the last len(s) axes, with NumPy 2's DeprecationWarning; an s entry of -1 keeps that axis's length)."""
    nd = len(_shape(a))
    if axes is None:
        if s is None:
            axes = list(range(nd))
        else:
            warnings.warn(f"np.fft.{fname}: `axes` should not be `None` if `s` is not `None` (Deprecated in NumPy 2.0); "
                          f"pass axes=[0, ..., k-1] for an array of dimension k", DeprecationWarning, stacklevel=user_stacklevel())
            axes = list(range(-len(s), 0))
    axes = [int(ax) for ax in (axes if isinstance(axes, (list, tuple)) else (axes,))]
    for ax in axes:
        if not -nd <= ax < nd:
            raise ShapeError(with_location(f"np.fft.{fname}: axis {ax} is out of bounds for an array of dimension {nd}"))
    axes = [ax % nd for ax in axes]
    if s is None:
        s = [None] * len(axes)
    s = list(s)
    if len(s) != len(axes):
        raise ValueError(with_location(f"np.fft.{fname}: s and axes have different lengths ({len(s)}, {len(axes)})"))
    s = [_shape(a)[ax] if isinstance(n, (int, np.integer)) and n == -1 else n for n, ax in zip(s, axes)]
    return axes, s


def _resize(a, axis: int, n: int, fname: str):
    """a cropped or zero-padded to n along axis (NumPy's n= / s=)."""
    if isinstance(n, Tracer):
        raise TypeError(with_location(f"np.fft.{fname}: n (or s) must be static (a Python int)"))
    n = int(n)
    if n < 1:
        raise ValueError(with_location(f"np.fft.{fname}: invalid number of FFT data points ({n}) specified"))
    shape = _shape(a)
    have = shape[axis]
    if n == have:
        return a
    if n < have:
        return bind(P.slice_, a, index=tuple((0, n if i == axis else d, 1) for i, d in enumerate(shape)))
    new = tuple(n if i == axis else d for i, d in enumerate(shape))
    return bind(P.unslice, a, shape=new, index=tuple((0, d, 1) for d in shape))


def _scale(y, norm, points: int, inverse: bool, fname: str):
    if norm not in _NORMS:
        raise ValueError(with_location(f"np.fft.{fname}: norm must be 'backward', 'ortho' or 'forward', got {norm!r}"))
    norm = norm or "backward"
    if norm == "ortho":
        return multiply(y, 1 / math.sqrt(points))
    if (norm == "backward") == inverse:
        return multiply(y, 1 / points)
    return y


def _transform(a, axes, kind: str, inverse: bool, n_last: int | None = None):
    """The fft primitive over `axes` (distinct; moved last in this order, then back)."""
    k = len(axes)
    nd = len(_shape(a))
    last = list(range(nd - k, nd))
    moved = a if axes == last else moveaxis(a, axes, last)
    y = bind(P.fft, moved, kind=kind, inverse=inverse, ndim=k, n=n_last)
    return y if axes == last else moveaxis(y, last, axes)


def _c2c(a, s, axes, norm, inverse: bool, fname: str):
    a = _complex(_array(a, fname), fname)
    axes, s = _plan(a, s, axes, fname)
    if len(set(axes)) != len(axes):   # (NumPy's loop: 1-D transforms from the last axis, each cropping, padding
        for ax, n in reversed(list(zip(axes, s))):   # and normalizing by its own n)
            a = _c2c(a, [n], [ax], norm, inverse, fname)
        return a
    for ax, n in zip(axes, s):
        if n is not None:
            a = _resize(a, ax, n, fname)
    y = _transform(a, axes, "c2c", inverse)
    points = math.prod(_shape(y)[ax] for ax in axes)
    return _scale(y, norm, points, inverse, fname)


def _one(n, axis):
    return None if n is None else [n], [axis]


def fft(a, n=None, axis=-1, norm=None, out=None):
    _reject("fft", out=out)
    s, axes = _one(n, axis)
    return _c2c(a, s, axes, norm, False, "fft")


def ifft(a, n=None, axis=-1, norm=None, out=None):
    _reject("ifft", out=out)
    s, axes = _one(n, axis)
    return _c2c(a, s, axes, norm, True, "ifft")


def fftn(a, s=None, axes=None, norm=None, out=None):
    _reject("fftn", out=out)
    return _c2c(a, s, axes, norm, False, "fftn")


def ifftn(a, s=None, axes=None, norm=None, out=None):
    _reject("ifftn", out=out)
    return _c2c(a, s, axes, norm, True, "ifftn")


def fft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    _reject("fft2", out=out)
    return _c2c(a, s, axes, norm, False, "fft2")


def ifft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    _reject("ifft2", out=out)
    return _c2c(a, s, axes, norm, True, "ifft2")


def rfftn(a, s=None, axes=None, norm=None, out=None, fname="rfftn"):
    """The real transform over the last of `axes`, then complex ones over the others."""
    _reject(fname, out=out)
    a = _real(_array(a, fname), fname)
    axes, s = _plan(a, s, axes, fname)
    if len(set(axes)) != len(axes):   # (NumPy's loop: rfft over the last axis, then 1-D ffts from the last,
        s = [_shape(a)[ax] if n is None else n for n, ax in zip(s, axes)]   # s defaulting to the input's lengths)
        a = rfftn(a, [s[-1]], [axes[-1]], norm, None, fname)
        for ax, n in reversed(list(zip(axes[:-1], s[:-1]))):
            a = _c2c(a, [n], [ax], norm, False, fname)
        return a
    for ax, n in zip(axes, s):
        if n is not None:
            a = _resize(a, ax, n, fname)
    points = math.prod(_shape(a)[ax] for ax in axes)
    return _scale(_transform(a, axes, "r2c", False), norm, points, False, fname)


def irfftn(a, s=None, axes=None, norm=None, out=None, fname="irfftn"):
    """Complex inverse transforms over all of `axes` but the last, then the real one over it: that
    axis's output length is s[-1] (default 2 (m - 1)), its input cropped or padded to s[-1] // 2 + 1."""
    _reject(fname, out=out)
    a = _complex(_array(a, fname), fname)
    axes, s = _plan(a, s, axes, fname)
    last = axes[-1]
    n_last = s[-1] if s[-1] is not None else 2 * (_shape(a)[last] - 1)
    if isinstance(n_last, Tracer):
        raise TypeError(with_location(f"np.fft.{fname}: n (or s) must be static (a Python int)"))
    if n_last < 1:
        raise ValueError(with_location(f"np.fft.{fname}: invalid number of data points ({n_last}) specified"))
    if len(set(axes)) != len(axes):   # (NumPy's loop: 1-D iffts in order, then irfft over the last axis)
        for ax, n in zip(axes[:-1], s[:-1]):
            a = _c2c(a, [_shape(a)[ax] if n is None else n], [ax], norm, True, fname)
        return irfftn(a, [n_last], [last], norm, None, fname)
    for ax, n in zip(axes[:-1], s[:-1]):
        if n is not None:
            a = _resize(a, ax, n, fname)
    a = _resize(a, last, n_last // 2 + 1, fname)
    y = _transform(a, axes, "c2r", True, n_last)
    points = math.prod(_shape(y)[ax] for ax in axes)
    return _scale(y, norm, points, True, fname)


def rfft(a, n=None, axis=-1, norm=None, out=None):
    s, axes = _one(n, axis)
    return rfftn(a, s, axes, norm, out, "rfft")


def irfft(a, n=None, axis=-1, norm=None, out=None):
    s, axes = _one(n, axis)
    return irfftn(a, s, axes, norm, out, "irfft")


def rfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return rfftn(a, s, axes, norm, out, "rfft2")


def irfft2(a, s=None, axes=(-2, -1), norm=None, out=None):
    return irfftn(a, s, axes, norm, out, "irfft2")


def _swap_direction(norm, fname):
    swapped = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}
    if norm not in swapped:
        raise ValueError(with_location(f"np.fft.{fname}: norm must be 'backward', 'ortho' or 'forward', got {norm!r}"))
    return swapped[norm]


def hfft(a, n=None, axis=-1, norm=None, out=None):
    """The real spectrum of a Hermitian-symmetric signal given by its first half: NumPy's irfft(conj(a), n, axis)
    with the opposite normalization (n defaults to 2 (m - 1))."""
    _reject("hfft", out=out)
    a = _complex(_array(a, "hfft"), "hfft")
    return irfftn(conjugate(a), None if n is None else [n], [axis], _swap_direction(norm, "hfft"), None, "hfft")


def ihfft(a, n=None, axis=-1, norm=None, out=None):
    """The inverse of hfft: NumPy's conj(rfft(a, n, axis)) with the opposite normalization."""
    _reject("ihfft", out=out)
    return conjugate(rfftn(a, None if n is None else [n], [axis], _swap_direction(norm, "ihfft"), None, "ihfft"))


def fftfreq(n, d=1.0, device=None):
    """k / (n d) for k = 0, 1, ..., -1 (NumPy's order); d may be traced (the sample spacing)."""
    if isinstance(n, Tracer):
        raise TypeError(with_location("np.fft.fftfreq: n must be static (a Python int)"))
    if not isinstance(d, Tracer):
        return np.fft.fftfreq(n, d)
    k = np.fft.fftfreq(n, 1.0 / n).astype(np.int64)   # (the integers k)
    return multiply(k, divide(1.0, multiply(n, d)))


def rfftfreq(n, d=1.0, device=None):
    if isinstance(n, Tracer):
        raise TypeError(with_location("np.fft.rfftfreq: n must be static (a Python int)"))
    if not isinstance(d, Tracer):
        return np.fft.rfftfreq(n, d)
    return multiply(np.arange(n // 2 + 1), divide(1.0, multiply(n, d)))


def _shift(x, axes, sign: int, fname: str):
    x = _array(x, fname)
    nd = len(_shape(x))
    if axes is None:
        axes = tuple(range(nd))
    elif not isinstance(axes, (tuple, list)):
        axes = (axes,)
    shifts = [sign * (_shape(x)[int(ax) % nd] // 2) for ax in axes]
    return roll(x, shifts, tuple(axes))


def fftshift(x, axes=None):
    """The zero frequency moved to the centre: a roll by n // 2 along each axis."""
    return _shift(x, axes, 1, "fftshift")


def ifftshift(x, axes=None):
    return _shift(x, axes, -1, "ifftshift")
