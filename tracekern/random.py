"""tk.random: counter-based random numbers in the IR (key, split, fold_in, uniform, normal, bernoulli).

Every draw is a pure function of its key and each element's position (Threefry-2x32, JAX's default
generator: primitives/random.py), so it gives the same bits on every backend and every time the same
equations run again: a recompute region, a checkpointed loop re-running its steps, the planner's
recomputation under memory_budget. A key is a 0-d int64 array (the two 32-bit key words); keys are
never updated in place: split one into new keys, or fold_in a loop counter. The bits, and the
uniform, bernoulli and split results built from them by exact arithmetic, equal jax.random's
(threefry, partitionable, x64 for float64). normal is sqrt(2) * erfinv(u) as in JAX, with Giles'
erfinv polynomials; its values agree across backends to the rounding of their log1p.

All of it works inside traced functions (jit, grad, scan, while_loop, custom_gradient, recompute)
and on plain arrays outside a trace."""
from __future__ import annotations

import numpy as np

from . import numpy as tnp
from .errors import ShapeError, with_location
from .ir import FLOAT_DTYPES
from .primitives import iota, random_bits
from .trace import Tracer, _read, bind

INT64 = np.dtype(np.int64)

__all__ = ["bernoulli", "fold_in", "key", "normal", "split", "uniform"]


def _is_array(x) -> bool:
    return isinstance(x, (Tracer, np.ndarray, np.generic))


def _key(k, fname: str):
    """k checked to be one key: a 0-d int64 array (tk.random.key, split, fold_in make them)."""
    k = _read(k)
    if not _is_array(k):
        raise TypeError(with_location(
            f"tk.random.{fname}: the key must be a key array made by tk.random.key(seed) (or split / fold_in), "
            f"got {type(k).__name__} {k!r:.40}; write tk.random.{fname}(tk.random.key({k!r:.20}), ...)"))
    if k.dtype != INT64 or tuple(k.shape) != ():
        hint = " (a batch of keys: pass one of them, keys[i])" if k.dtype == INT64 else ""
        raise TypeError(with_location(
            f"tk.random.{fname}: the key must be one key, a 0-d int64 array from tk.random.key / split / fold_in; "
            f"got an array of dtype {k.dtype} and shape {tuple(k.shape)}{hint}"))
    return k


def _shape(shape, fname: str) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise TypeError(with_location(f"tk.random.{fname}: shape must be a tuple of ints, got {shape!r:.40}")) from None
    if any(s < 0 for s in shape):
        raise ShapeError(with_location(f"tk.random.{fname}: negative dimension in shape {shape}"))
    return shape


def _float(dtype, fname: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(with_location(f"tk.random.{fname}: dtype must be float32 or float64, got {dtype}"))
    return dtype


def _bits(k, shape: tuple[int, ...], bits: int):
    """The top `bits` bits of Threefry for each position of `shape` (int64)."""
    return bind(random_bits, k, bind(iota, shape=shape), bits=bits)


# ----------------------------------------------------------------------------- keys


def key(seed):
    """A key from an integer seed (a Python or NumPy integer, or a traced integer): its two 32-bit
    words are the seed's high and low words, as jax.random.key(seed) with x64."""
    seed = _read(seed)
    if isinstance(seed, (bool, np.bool_)) or not (isinstance(seed, (int, np.integer)) or
                                                   (_is_array(seed) and seed.dtype.kind in "iu")):
        raise TypeError(with_location(f"tk.random.key: the seed must be an integer, got {type(seed).__name__} {seed!r:.40}"))
    if isinstance(seed, Tracer):
        if seed.shape != ():
            raise TypeError(with_location(f"tk.random.key: the seed must be one integer, got shape {seed.shape}"))
        return tnp.astype(seed, INT64)
    if np.ndim(seed) != 0:
        raise TypeError(with_location(f"tk.random.key: the seed must be one integer, got shape {np.shape(seed)}"))
    value = int(seed)
    if not -2 ** 63 <= value < 2 ** 64:
        raise ValueError(with_location(f"tk.random.key: the seed {value} does not fit in 64 bits"))
    return np.asarray(value - 2 ** 64 if value >= 2 ** 63 else value, INT64)


def split(key, n=2, *, num=None):
    """`n` new keys (an int, or a shape) from `key`: the key array split(key, n)[i] is key i.
    `num=` (JAX's name for it) is the same argument."""
    if num is not None:
        if n != 2:
            raise TypeError(f"tk.random.split: pass n or num, not both (got n={n!r}, num={num!r})")
        n = num
    k = _key(key, "split")
    return _bits(k, _shape(n, "split"), 64)


def fold_in(key, data):
    """A new key from `key` and an integer `data` (e.g. a loop counter): different data, independent keys.
    Data in [-2**31, 2**32) is JAX's uint32(data) (a negative one wraps, as jax.random.fold_in of an int32
    array: the same key); data beyond that range is a 64-bit counter (JAX raises or wraps it to 32 bits)."""
    k = _key(key, "fold_in")
    data = _read(data)
    if not (isinstance(data, (int, np.integer)) and not isinstance(data, (bool, np.bool_))
            or _is_array(data) and data.dtype.kind in "iu" and tuple(data.shape) == ()):
        raise TypeError(with_location(f"tk.random.fold_in: data must be one integer, got {type(data).__name__} {data!r:.40}"))
    if isinstance(data, Tracer):
        wide = tnp.astype(data, INT64)
        if data.dtype.kind == "i" and data.dtype.itemsize <= 4:     # its two's complement in 32 bits
            data = tnp.bitwise_and(wide, np.int64(0xFFFFFFFF))
        elif data.dtype.kind == "i":
            data = tnp.where(tnp.logical_and(wide < 0, wide >= -2 ** 31), wide + np.int64(2 ** 32), wide)
        else:
            data = wide
    else:
        value = int(data)
        data = np.asarray(value + 2 ** 32 if -2 ** 31 <= value < 0 else value, INT64)
    return bind(random_bits, k, data, bits=64)


# ----------------------------------------------------------------------------- draws


def _bounds(value, dtype: np.dtype, shape: tuple[int, ...], fname: str, what: str):
    value = _read(value)
    v = tnp.astype(value, dtype) if isinstance(value, Tracer) else np.asarray(value, dtype)
    try:
        full = np.broadcast_shapes(tuple(v.shape), shape)
    except ValueError:
        full = None
    if full != shape:
        raise ShapeError(with_location(f"tk.random.{fname}: {what} of shape {tuple(v.shape)} does not broadcast "
                                       f"to the shape of the draw {shape}"))
    return v


def uniform(key, shape=(), dtype=np.float32, minval=0.0, maxval=1.0):
    """Uniform floats in [minval, maxval) of `shape` and `dtype` (float32 by default, as in JAX). The
    mantissa is the top 23 (float32) or 52 (float64) bits of each element's Threefry word, so
    [0, 1) draws are exact: the same bits everywhere."""
    k = _key(key, "uniform")
    shape, dtype = _shape(shape, "uniform"), _float(dtype, "uniform")
    nmant = 23 if dtype == np.float32 else 52
    u = tnp.multiply(tnp.astype(_bits(k, shape, nmant), dtype), dtype.type(2.0 ** -nmant))
    if _is_default(minval, 0.0) and _is_default(maxval, 1.0):
        return u
    lo = _bounds(minval, dtype, shape, "uniform", "minval")
    hi = _bounds(maxval, dtype, shape, "uniform", "maxval")
    return tnp.maximum(lo, tnp.add(tnp.multiply(u, tnp.subtract(hi, lo)), lo))


def _is_default(value, default: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and float(value) == default


def bernoulli(key, p=0.5, shape=None):
    """Booleans that are True with probability p (a number or a float array broadcast to `shape`;
    shape None: p's shape): uniform(key, shape, p's dtype) < p, float32 for a Python number."""
    k = _key(key, "bernoulli")
    p = _read(p)
    if _is_array(p):
        if p.dtype not in FLOAT_DTYPES:
            raise TypeError(with_location(f"tk.random.bernoulli: p must be a float or a float array, got {p.dtype}"))
        dtype = p.dtype
    elif isinstance(p, (int, float)) and not isinstance(p, bool):
        dtype = np.dtype(np.float32)
    else:
        raise TypeError(with_location(f"tk.random.bernoulli: p must be a float or a float array, got {type(p).__name__}"))
    shape = tuple(np.shape(p)) if shape is None else _shape(shape, "bernoulli")
    p = _bounds(p, dtype, shape, "bernoulli", "p")
    return tnp.less(uniform(k, shape, dtype), p)


def normal(key, shape=(), dtype=np.float32):
    """Standard normal floats of `shape` and `dtype` (float32 by default): sqrt(2) * erfinv(u) for u
    uniform in (-1, 1), as jax.random.normal."""
    k = _key(key, "normal")
    shape, dtype = _shape(shape, "normal"), _float(dtype, "normal")
    lo = np.nextafter(np.array(-1.0, dtype), np.array(0.0, dtype))
    u = uniform(k, shape, dtype, lo, 1.0)
    return tnp.multiply(dtype.type(np.sqrt(2.0)), _erfinv(u, dtype))


# Giles, "Approximating the erfinv function" (GPU Computing Gems, 2011): polynomials in w = -log(1 - x^2),
# highest power first. float32: two branches at w = 5; float64: three, at w = 6.25 and 16.
_ERFINV_F32 = (
    (5.0, 2.5, (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)),
    (None, 3.0, (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                 -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)),
)
_ERFINV_F64 = (
    (6.25, 3.125, (-3.6444120640178196996e-21, -1.685059138182016589e-19, 1.2858480715256400167e-18,
                   1.115787767802518096e-17, -1.333171662854620906e-16, 2.0972767875968561637e-17,
                   6.6376381343583238325e-15, -4.0545662729752068639e-14, -8.1519341976054721522e-14,
                   2.6335093153082322977e-12, -1.2975133253453532498e-11, -5.4154120542946279317e-11,
                   1.051212273321532285e-09, -4.1126339803469836976e-09, -2.9070369957882005086e-08,
                   4.2347877827932403518e-07, -1.3654692000834678645e-06, -1.3882523362786468719e-05,
                   0.0001867342080340571352, -0.00074070253416626697512, -0.0060336708714301490533,
                   0.24015818242558961693, 1.6536545626831027356)),
    (16.0, 3.25, (2.2137376921775787049e-09, 9.0756561938885390979e-08, -2.7517406297064545428e-07,
                  1.8239629214389227755e-08, 1.5027403968909827627e-06, -4.013867526981545969e-06,
                  2.9234449089955446044e-06, 1.2475304481671778723e-05, -4.7318229009055733981e-05,
                  6.8284851459573175448e-05, 2.4031110387097893999e-05, -0.0003550375203628474796,
                  0.00095328937973738049703, -0.0016882755560235047313, 0.0024914420961078508066,
                  -0.0037512085075692412107, 0.005370914553590063617, 1.0052589676941592334,
                  3.0838856104922207635)),
    (None, 5.0, (-2.7109920616438573243e-11, -2.5556418169965252055e-10, 1.5076572693500548083e-09,
                 -3.7894654401267369937e-09, 7.6157012080783393804e-09, -1.4960026627149240478e-08,
                 2.9147953450901080826e-08, -6.7711997758452339498e-08, 2.2900482228026654717e-07,
                 -9.9298272942317002539e-07, 4.5260625972231537039e-06, -1.9681778105531670567e-05,
                 7.5995277030017761139e-05, -0.00021503011930044477347, -0.00013871931833623122026,
                 1.0103004648645343977, 4.8499064014085844221)),
)


def _erfinv(x, dtype: np.dtype):
    """erfinv on (-1, 1): the branch's polynomial (in w - c for the first branch, sqrt(w) - c for the
    others) times x; every branch is computed and the one whose range holds w is selected."""
    T = dtype.type
    w = tnp.negative(tnp.log1p(tnp.negative(tnp.multiply(x, x))))
    branches = _ERFINV_F32 if dtype == np.float32 else _ERFINV_F64
    root = tnp.sqrt(w)
    result = None
    for j, (bound, shift, coeffs) in reversed(list(enumerate(branches))):
        t = tnp.subtract(w if j == 0 else root, T(shift))
        p = T(coeffs[0])
        for c in coeffs[1:]:
            p = tnp.add(T(c), tnp.multiply(p, t))
        result = p if result is None else tnp.where(tnp.less(w, T(bound)), p, result)
    return tnp.multiply(result, x)
