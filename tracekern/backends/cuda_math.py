"""Device functions that the CUDA renderer's generated kernels call, and the names its scalar
templates resolve to (functions(dtype)); the same names work on Numba's CUDA simulator.

Transcendentals are CUDA's libdevice (math.exp on a float32 is expf: no float64 in float32 kernels).
floor/ceil/rint go through libdevice on a GPU and NumPy on the simulator, which has no libdevice."""
from __future__ import annotations

import math  # (generated kernels call math.* too)
import threading

import numpy as np
from numba import config, cuda

from ..primitives import random as random_primitives
from ..schedule import actions as schedule_actions  # noqa: F401  (while loops' schedules, on the host)
from ..schedule import slots as schedule_slots  # noqa: F401
from . import scalar_rules
from .render import CASTS  # noqa: F401

SIMULATOR = bool(config.ENABLE_CUDASIM)
SIMULATOR_LOCK = threading.Lock()   # (see cuda_kernels.LoopKernels.shared)

# (casts are named so that they cannot clash with generated names: buffers are b<id>, scalars s<id>)
f32, f64, i32, i64, boolean = np.float32, np.float64, np.int32, np.int64, np.bool_
# Reductions accumulate float32 in float32 (a block tree is pairwise; float64 would put .f64
# instructions in float32 kernels, 1/64 the speed on most GPUs), integers and bools in int64.
ACCUMULATOR = {"float32": "float32", "float64": "float64", "int32": "int64", "int64": "int64", "bool": "int64"}

_device = cuda.jit(device=True)
sign_i, maximum_f, minimum_f, maximum_i, minimum_i, pow_i = (_device(fn) for fn in scalar_rules.ALL)


@_device
def radd(a, b):
    return a + b


@_device
def rmul(a, b):
    return a * b


@_device
def rdiv(a, b):   # (complex division is div_c64 / div_c128: scalar_rules.complex_division)
    return a / b


if SIMULATOR:
    def _np_rounding(fn, T):
        return _device(lambda x: T(fn(x)))

    floor_f32, ceil_f32, rint_f32 = (_np_rounding(fn, f32) for fn in (np.floor, np.ceil, np.rint))
    floor_f64, ceil_f64, rint_f64 = (_np_rounding(fn, f64) for fn in (np.floor, np.ceil, np.rint))
else:
    from numba.cuda import libdevice

    floor_f32, ceil_f32, rint_f32 = (_device(fn) for fn in (
        lambda x: libdevice.floorf(x), lambda x: libdevice.ceilf(x), lambda x: libdevice.rintf(x)))
    floor_f64, ceil_f64, rint_f64 = (_device(fn) for fn in (
        lambda x: libdevice.floor(x), lambda x: libdevice.ceil(x), lambda x: libdevice.rint(x)))


# scalar functions by the name templates give them ({sinh}, ...): libdevice's on a GPU (math.* on a
# float32 is the float32 function), NumPy's on the simulator, whose math.* is Python's and raises
# outside the domain (NumPy gives NaN and inf, as a GPU does)
LIBM = {"sinh": (math.sinh, np.sinh), "cosh": (math.cosh, np.cosh), "arcsin": (math.asin, np.arcsin),
        "arccos": (math.acos, np.arccos), "arcsinh": (math.asinh, np.arcsinh), "arccosh": (math.acosh, np.arccosh),
        "arctanh": (math.atanh, np.arctanh)}


def _libm(gpu_fn, np_fn, T):
    if not SIMULATOR:
        return _device(lambda x: gpu_fn(x))

    def simulated(x):
        with np.errstate(all="ignore"):
            return T(np_fn(x))

    return _device(simulated)


for _name, (_gpu_fn, _np_fn) in LIBM.items():   # sinh_f32, sinh_f64, ... (generated modules import *)
    for _T in (f32, f64):
        globals()[f"{_name}_{CASTS[np.dtype(_T).name]}"] = _libm(_gpu_fn, _np_fn, _T)


def functions(dtype: np.dtype) -> dict[str, str]:
    """The names that Elementwise.scalar and Reduce.combine templates refer to, for one dtype."""
    name = np.dtype(dtype).name
    if name in ("complex64", "complex128"):
        return complex_functions(name)
    if name in ("float32", "float64"):
        sfx = "f32" if name == "float32" else "f64"
        fns = {f: f"math.{f}" for f in ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "pow", "sqrt")}
        fns.update({f: f"{f}_{sfx}" for f in ("floor", "ceil", "rint", *LIBM)})
        fns.update(arctan="math.atan", abs="abs", sign=f"sign_{sfx}", maximum="maximum_f", minimum="minimum_f",
                   radd="radd", rmul="rmul", div="rdiv")
        fns.update({f: f"{f}_{sfx}" for f in FLOAT_FUNCTIONS})   # (issue 19)
        fns.update(to_int32=f"to_int32_{sfx}", to_int64=f"to_int64_{sfx}")
        if SIMULATOR:
            fns.update({f: f"simulated_{f}_{sfx}" for f in SIMULATED})
        return fns
    return {"pow": "pow_i", "abs": "abs", "sign": "sign_i", "maximum": "maximum_i", "minimum": "minimum_i",
            "radd": "radd", "rmul": "rmul", "random_bits": "random_bits", **integer_functions(name)}


# counter-based random numbers: Threefry-2x32 on int64 words, written once in primitives/random.py
random_bits = _device(random_primitives.threefry_bits)


# -- issue 19: the rest of NumPy's float ufuncs, integer division and shifts, gather indices ---------------
# (gpu function by dtype suffix, or one for both; NumPy's on the simulator)
LIBM_UNARY = {"log2": (math.log2, np.log2), "log10": (math.log10, np.log10), "exp2": (math.exp2, np.exp2),
              "trunc": (math.trunc, np.trunc), "cbrt": ({"f32": "cbrtf", "f64": "cbrt"}, np.cbrt)}
LIBM_BINARY = {"arctan2": (math.atan2, np.arctan2), "hypot": (math.hypot, np.hypot),
               "copysign": (math.copysign, np.copysign), "nextafter": (math.nextafter, np.nextafter),
               "fmod": (math.fmod, np.fmod),
               "mul_rn": ({"f32": "fmul_rn", "f64": "dmul_rn"}, np.multiply)}
FLOAT_FUNCTIONS = (*LIBM_UNARY, *LIBM_BINARY, "floordiv", "remainder", "logaddexp", "logaddexp2")
# NumPy rounds a product before it is added; NVVM contracts x * y + z into one fma (one rounding)
# unless the product is a mul.rn, which it never fuses. Float products render so: the same bits as
# NumPy and the cpu backend for + - * chains, and random draws (minval + u * (maxval - minval)) bit
# for bit the same on every backend. (Products inside other templates, and matmuls, may still fuse.)
UNCONTRACTED = {"({0} * {1})": "{mul_rn}({0}, {1})"}


def _libm_by_dtype(gpu_fn, np_fn, T, nargs: int):
    sfx = CASTS[np.dtype(T).name]
    if not SIMULATOR:
        if isinstance(gpu_fn, dict):   # a libdevice function per dtype (cbrtf, cbrt)
            from numba.cuda import libdevice
            gpu_fn = getattr(libdevice, gpu_fn[sfx])
        return _device(lambda x: gpu_fn(x)) if nargs == 1 else _device(lambda x, y: gpu_fn(x, y))

    if nargs == 1:
        def simulated(x):
            with np.errstate(all="ignore"):
                return T(np_fn(x))
    else:
        def simulated(x, y):
            with np.errstate(all="ignore"):
                return T(np_fn(x, y))
    return _device(simulated)


for _nargs, _table in ((1, LIBM_UNARY), (2, LIBM_BINARY)):
    for _name, (_gpu_fn, _np_fn) in _table.items():
        for _T in (f32, f64):
            globals()[f"{_name}_{CASTS[np.dtype(_T).name]}"] = _libm_by_dtype(_gpu_fn, _np_fn, _T, _nargs)
if SIMULATOR:   # (the simulator's products are NumPy's, rounded once: a plain product, no errstate per call)
    mul_rn_f32 = mul_rn_f64 = rmul
for _T, _sfx in ((f32, "f32"), (f64, "f64")):
    _floordiv, _remainder = scalar_rules.float_division(globals()[f"fmod_{_sfx}"], globals()[f"floor_{_sfx}"],
                                                        globals()[f"copysign_{_sfx}"], _T)
    globals()[f"floordiv_{_sfx}"], globals()[f"remainder_{_sfx}"] = _device(_floordiv), _device(_remainder)
    # (issue 25: exp and log1p are only called in their domains here, so Python's math serves the simulator too)
    globals()[f"logaddexp_{_sfx}"] = _device(scalar_rules.logaddexp(math.exp, math.log1p, _T))
    globals()[f"logaddexp2_{_sfx}"] = _device(scalar_rules.logaddexp(globals()[f"exp2_{_sfx}"], math.log1p, _T, base2=True))

for _T, _sfx in ((f32, "f32"), (f64, "f64")):   # (sign_f32, sign_f64: the cpu backend's too)
    globals()[f"sign_{_sfx}"] = _device(scalar_rules.sign_float(_T))

for _T, _sfx in ((f32, "f32"), (f64, "f64")):   # (to_int32_f32, ...: Convert's float -> integer)
    for _bits in (32, 64):
        globals()[f"to_int{_bits}_{_sfx}"] = _device(scalar_rules.float_to_int(_T(-2.0 ** (_bits - 1))))

floordiv_i, remainder_i, fmod_i, gcd_i, lcm_i, take_index = (_device(fn) for fn in (
    scalar_rules.floordiv_i, scalar_rules.remainder_i, scalar_rules.fmod_i, scalar_rules.gcd_i, scalar_rules.lcm_i,
    scalar_rules.take_index))
left_shift_32, right_shift_32 = (_device(fn) for fn in scalar_rules.shifts(32))
left_shift_64, right_shift_64 = (_device(fn) for fn in scalar_rules.shifts(64))


def integer_functions(dtype_name: str) -> dict[str, str]:
    """The issue-19 template names for an integer or bool dtype."""
    bits = "32" if dtype_name == "int32" else "64"
    return {"floordiv": "floordiv_i", "remainder": "remainder_i", "fmod": "fmod_i", "gcd": "gcd_i", "lcm": "lcm_i",
            "left_shift": f"left_shift_{bits}", "right_shift": f"right_shift_{bits}", "to_int32": "", "to_int64": ""}


# On the simulator, math.* is Python's, which raises outside its domain (sqrt(-1), log(0)) where a GPU
# gives NaN or inf as NumPy does: the simulator runs NumPy's instead.
SIMULATED = {"exp": (np.exp, 1), "log": (np.log, 1), "log1p": (np.log1p, 1), "expm1": (np.expm1, 1), "sin": (np.sin, 1),
             "cos": (np.cos, 1), "tan": (np.tan, 1), "tanh": (np.tanh, 1), "sqrt": (np.sqrt, 1), "arctan": (np.arctan, 1),
             "pow": (np.power, 2)}
if SIMULATOR:
    for _name, (_np_fn, _nargs) in SIMULATED.items():
        for _T in (f32, f64):
            globals()[f"simulated_{_name}_{CASTS[np.dtype(_T).name]}"] = _libm_by_dtype(None, _np_fn, _T, _nargs)


# -- issue 30: complex64 and complex128 --------------------------------------------------------------------
# Each complex function is written once from its parts' real functions (scalar_rules.complex_functions:
# math.* on a GPU, where math.exp of a float32 is expf, so complex64 kernels hold no float64; NumPy's
# real functions on the simulator, which runs these same formulas)
ACCUMULATOR.update({"complex64": "complex64", "complex128": "complex128"})
c64, c128 = np.complex64, np.complex128


class _SimulatedMath:
    """math's names with NumPy's functions (NaN and inf outside the domain, as a GPU, where Python's
    math raises): what the simulator runs the complex formulas with."""

    def __getattr__(self, name: str):
        fn = {"atan2": np.arctan2, "hypot": np.hypot, "copysign": np.copysign, "log1p": np.log1p, "expm1": np.expm1,
              "isinf": np.isinf, "isnan": np.isnan}.get(name) or getattr(np, name)

        if not callable(fn):
            return fn

        def quiet(*args):
            with np.errstate(all="ignore"):
                return fn(*args)
        return quiet


for _C, _R in ((c64, f32), (c128, f64)):
    for _name, _fn in scalar_rules.complex_functions(_SimulatedMath() if SIMULATOR else math, _C, _R, _device).items():
        globals()[f"{_name}_{CASTS[np.dtype(_C).name]}"] = _fn
COMPLEX_FUNCTIONS = tuple(scalar_rules.complex_functions(math, c128, f64))


def complex_functions(dtype_name: str) -> dict[str, str]:
    sfx = CASTS[dtype_name]
    return {**{f: f"{f}_{sfx}" for f in COMPLEX_FUNCTIONS}, "radd": "radd", "rmul": "rmul"}


# -- issue 30: scipy.special's functions (scalar_rules.special_functions), in the operand's type
class _SimulatedSpecial(_SimulatedMath):
    """The simulator's math with SciPy's lgamma, gamma, erf and erfc (NumPy has none; Python's raise at poles)."""

    def __getattr__(self, name: str):
        import scipy.special  # (SciPy is a dependency; only the simulator needs it here)

        fn = {"lgamma": scipy.special.gammaln, "gamma": scipy.special.gamma, "erf": scipy.special.erf,
              "erfc": scipy.special.erfc, "pow": np.power}.get(name)
        return fn if fn is not None else super().__getattr__(name)


SPECIAL = ("gammaln", "digamma", "polygamma", "erfinv", "log_ndtr", "i0", "i0e", "i1", "i1e", "xlogy", "xlog1py")
for _R in (f32, f64):
    _fns = scalar_rules.special_functions(_SimulatedSpecial() if SIMULATOR else math, _R, _device)
    for _name in SPECIAL:
        globals()[f"{_name}_{CASTS[np.dtype(_R).name]}"] = _fns[_name]
    for _name, _gpu_fn in (("erf", math.erf), ("erfc", math.erfc)):
        globals()[f"{_name}_{CASTS[np.dtype(_R).name]}"] = _libm_by_dtype(
            _gpu_fn, getattr(_SimulatedSpecial(), _name) if SIMULATOR else None, _R, 1)
FLOAT_FUNCTIONS = (*FLOAT_FUNCTIONS, *SPECIAL, "erf", "erfc")
