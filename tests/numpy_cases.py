"""The coverage table of tk.numpy: every supported NumPy name has a row here (a case), and the
README's "What can be traced" section is generated from this table (`python -m tests.numpy_cases`
rewrites it; tests/test_numpy.py checks that it is current).

A case is a function written with plain NumPy (or tk.at, with a NumPy reference), its inputs, the
names it covers, and whether it is differentiable. tests/test_numpy.py runs the cases of a family
as ONE traced program per backend and dtype (a dict of outputs: few distinct compiles) and checks:
values against NumPy on interpret, cpu and cuda in float32 and float64 (integer and bool cases in
int32/int64 or bool), gradients against central finite differences of NumPy's own function, and
the compiled backends' gradients against the interpreter's."""
from __future__ import annotations

import re
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.special as sp

import tracekern as tk
import tracekern.numpy as tnp
from tests.conftest import INPUT_KINDS, make_input


@dataclass(frozen=True)
class Spec:
    """An input: a float array of a kind, an integer array in [lo, hi), a bool array, or a given array."""
    kind: str
    shape: tuple = ()
    lo: int = 0
    hi: int = 0
    value: object = None


def F(kind: str, *shape) -> Spec:   # noqa: N802
    return Spec(kind, shape)


def I(lo: int, hi: int, *shape) -> Spec:   # noqa: N802, E743
    return Spec("int", shape, lo, hi)


def B(*shape) -> Spec:   # noqa: N802
    return Spec("bool", shape)


def G(value) -> Spec:   # noqa: N802  (a given constant: integers keep their dtype, floats take the case's)
    return Spec("given", np.shape(value), value=np.asarray(value))


@dataclass(frozen=True)
class Case:
    id: str
    names: tuple[str, ...]          # the names this row covers, as users write them
    fn: Callable                    # the function, written with NumPy (tk.at for updates)
    inputs: tuple[Spec, ...]
    grad: bool = True               # check gradients (float outputs) against finite differences
    dtypes: tuple[str, ...] = ("float64", "float32")
    note: str = ""                  # the edge case it covers, if any
    ref: Callable | None = None     # NumPy reference when fn is not plain NumPy (tk.at)
    cuda: bool = True               # False: the cuda backend has no kernel (np.linalg's factorizations), or runs it on
                                    # a GPU only (np.fft on cuFFT: tests/test_fft.py checks it against a stand-in)
    tol32: float = 2e-5
    family: str = field(default="", compare=False)


def _rows(family: str, cases: list[Case]) -> list[Case]:
    return [Case(**{**c.__dict__, "family": family}) for c in cases]


def C(id, names, fn, *inputs, **kw) -> Case:   # noqa: N802
    return Case(id, tuple(names.split()) if isinstance(names, str) else tuple(names), fn, inputs, **kw)


# ----------------------------------------------------------------------------- inputs


def make(spec: Spec, dtype: np.dtype, rng: np.random.Generator, int_dtype=np.int64):
    """An array for `spec`: floats in `dtype`, integers in int_dtype (the case's, for integer cases)."""
    s = spec.shape
    k = spec.kind
    if k.startswith("c:"):   # complex: the parts drawn as the kind after "c:" (a float dtype gives its complex one)
        part = Spec(k[2:], s)
        real = np.dtype(dtype).type(0).real.dtype
        return (make(part, real, rng) + 1j * make(part, real, rng)).astype(np.result_type(real, np.complex64))
    if k == "int":
        return rng.integers(spec.lo, spec.hi, s).astype(int_dtype)
    if k == "bool":
        return rng.random(s) < 0.5
    if k == "given":
        v = spec.value
        return v.astype(dtype) if v.dtype.kind == "f" else v.copy()
    if k in INPUT_KINDS:
        return make_input(k, s, rng, dtype)
    if k == "distinct":   # values at least 0.1 apart (sorting: no ties for finite differences to cross)
        n = int(np.prod(s))
        x = (rng.permutation(n) * 0.25 + rng.uniform(0, 0.1, n) - n * 0.125).reshape(s)
    elif k == "zeros":      # some exact zeros (cumprod's and prod's gradients)
        x = rng.uniform(0.5, 1.5, s) * rng.choice([-1.0, 0.0, 1.0, 1.0], s)
    elif k == "nan":        # some NaN (the nan* functions)
        x = rng.standard_normal(s)
        # NaN only off a checkerboard: every row and column keeps finite values (an all-NaN slice
        # is its own case, nan_all_nan)
        x[(rng.random(s) < 0.25) & (np.indices(s).sum(axis=0) % 2 == 1)] = np.nan
        x.reshape(-1)[0] = 0.5
    elif k == "special":    # the float edge values
        x = np.resize(np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 1e-300, -7.0, 3.0]), s)
    elif k == "sorted":
        x = np.sort(rng.standard_normal(s), axis=-1)
    elif k == "spd":        # symmetric positive definite (..., n, n)
        a = rng.standard_normal(s)
        x = a @ np.swapaxes(a, -1, -2) + s[-1] * np.eye(s[-1])
    elif k == "sym":        # symmetric with well-separated eigenvalues
        q, _ = np.linalg.qr(rng.standard_normal(s))
        w = np.arange(1, s[-1] + 1) * 1.5 - s[-1] * 0.5
        x = q @ (w[..., :, None] * np.swapaxes(q, -1, -2))
    elif k == "well":       # well-conditioned general matrices (..., m, n)
        x = rng.standard_normal(s)
        if s[-1] == s[-2]:
            x = x + 3 * np.eye(s[-1])
    elif k == "ball":       # |x| < 0.9 away from 0 (erfinv's domain and logit's, scaled)
        x = rng.uniform(0.05, 0.9, s) * rng.choice([-1.0, 1.0], s)
    elif k == "prob":       # probabilities away from 0 and 1
        x = rng.uniform(0.05, 0.95, s)
    elif k == "ranked":     # full rank with well-separated singular values (..., m, n)
        m, n = s[-2:]
        u, _ = np.linalg.qr(rng.standard_normal(s[:-2] + (m, m)))
        v, _ = np.linalg.qr(rng.standard_normal(s[:-2] + (n, n)))
        sv = np.arange(min(m, n), 0, -1) * 1.0 + 0.5
        x = (u[..., :, :min(m, n)] * sv[..., None, :]) @ np.swapaxes(v[..., :, :min(m, n)], -1, -2)
    else:
        raise ValueError(k)
    return np.asarray(x, dtype)


def case_inputs(case: Case, dtype: str, seed: int = 0) -> list:
    # (a stable seed: hash() of a str changes with every process, and so would the inputs)
    rng = np.random.default_rng(zlib.crc32(f"{case.id}/{seed}".encode()))
    dt = np.dtype(dtype)
    float_dtype = dt if dt.kind in "fc" else np.float64
    int_dtype = dt if dt.kind == "i" else np.int64
    return [make(s, float_dtype, rng, int_dtype) for s in case.inputs]


def _at_add(x, idx, v):
    y = x.copy()
    np.add.at(y, idx, v)
    return y


def _at_set(x, idx, v):
    y = x.copy()
    y[idx] = v
    return y


def _at_ufunc(ufunc):
    def ref(x, idx, v):
        y = x.copy()
        ufunc.at(y, idx, v)
        return y
    return ref


IDX = np.array([2, 0, 2, 1])          # repeated indices (a scatter accumulates them)
INT_F = ("int64", "int32")

# ----------------------------------------------------------------------------- the table

ELEMENTWISE = _rows("elementwise", [
    C("add", "np.add x+y", lambda x, y: (np.add(x, y), x + y), F("any", 3, 4), F("any", 4)),
    C("list_operands", "np.add np.maximum np.where np.clip np.logical_and",
      lambda x: (x + [1.0, 2.0, -1.0, 0.5], np.maximum(x, [0, 1, 0, 1]), np.where(x > 0, x, [9.0, 8.0, 7.0, 6.0]),
                 np.clip(x, [-1, 0, -1, 0], (1, 1, 2, 2)), np.logical_and(x > 0, [True, False, True, True])),
      F("any", 3, 4), note="a list or tuple operand is an array, as NumPy reads it"),
    C("subtract", "np.subtract x-y", lambda x, y: (np.subtract(x, y), x - y), F("any", 3, 4), F("any", 3, 1)),
    C("multiply", "np.multiply x*y", lambda x, y: (np.multiply(x, y), x * y), F("any", 3, 4), F("any", 4)),
    C("divide", "np.divide np.true_divide x/y", lambda x, y: (np.divide(x, y), np.true_divide(x, y), x / y),
      F("any", 3, 4), F("nz", 4)),
    C("power", "np.power x**y", lambda x, y: (np.power(x, y), x ** 3, 2.0 ** y), F("pos", 3, 4), F("any", 4)),
    C("float_power", "np.float_power", lambda x, y: np.float_power(x, y), F("pos", 3, 4), F("any", 4), tol32=1e-6),
    C("unary_arith", "np.negative np.positive np.absolute np.abs np.fabs np.square np.reciprocal np.sqrt np.cbrt",
      lambda x: (np.negative(x), np.positive(x), np.absolute(x), np.abs(x), np.fabs(x), np.square(x),
                 np.reciprocal(x), np.sqrt(np.abs(x)), np.cbrt(x)), F("nz", 3, 4)),
    C("exp_log", "np.exp np.exp2 np.expm1 np.log np.log2 np.log10 np.log1p",
      lambda x: (np.exp(x), np.exp2(x), np.expm1(x), np.log(x), np.log2(x), np.log10(x), np.log1p(x)), F("pos", 3, 4)),
    C("trig", "np.sin np.cos np.tan np.arcsin np.arccos np.arctan np.sinc",
      lambda x: (np.sin(x), np.cos(x), np.tan(x), np.arcsin(x), np.arccos(x), np.arctan(x), np.sinc(x)), F("unit", 3, 4)),
    C("hyperbolic", "np.sinh np.cosh np.tanh np.arcsinh np.arctanh",
      lambda x: (np.sinh(x), np.cosh(x), np.tanh(x), np.arcsinh(x), np.arctanh(x)), F("unit", 3, 4)),
    C("arccosh", "np.arccosh np.acosh", lambda x: (np.arccosh(x), np.acosh(x)), F("gt1", 3, 4)),
    C("aliases", "np.acos np.asin np.atan np.atan2 np.asinh np.atanh np.pow",
      lambda x: (np.acos(x), np.asin(x), np.atan(x), np.atan2(x, 0.5), np.asinh(x), np.atanh(x), np.pow(x + 1, 1.5)),
      F("unit", 3, 4), note="NumPy 2's array-API names"),
    C("two_arg", "np.arctan2 np.hypot np.logaddexp np.logaddexp2 np.maximum np.minimum np.fmax np.fmin np.copysign",
      lambda y, x: (np.arctan2(y, x), np.hypot(x, y), np.logaddexp(x, y), np.logaddexp2(x, y), np.maximum(x, y),
                    np.minimum(x, y), np.fmax(x, y), np.fmin(x, y), np.copysign(x, y)),
      F("nz", 3, 4), F("nz", 4)),
    C("logaddexp_ties", "np.logaddexp", lambda x: np.logaddexp(x, x) + np.logaddexp(x, 2 * x), F("any", 5),
      note="equal operands (gradient shared)"),
    C("angles", "np.deg2rad np.rad2deg np.radians np.degrees", lambda x: (np.deg2rad(x), np.rad2deg(x), np.radians(x),
                                                                         np.degrees(x)), F("any", 3, 4)),
    C("division", "np.remainder np.mod np.fmod x%y np.divmod", lambda x, y: (np.remainder(x, y), np.mod(x, y), np.fmod(x, y),
                                                                              x % y, np.divmod(x, y)[1]),
      F("any", 3, 4), G([0.7, -0.45, 1.3, -2.1])),
    C("rounding", "np.floor np.ceil np.rint np.trunc np.fix np.round np.around np.sign np.floor_divide x//y",
      lambda x: (np.floor(x), np.ceil(x), np.rint(x), np.trunc(x), np.fix(x), np.round(x, 2), np.around(x, 1), np.sign(x),
                 np.floor_divide(x, 0.3), x // 0.7, np.round(x * 100, -1)), F("any", 3, 4), grad=False),
    C("sign_special", "np.sign", lambda x: (np.sign(x), np.signbit(np.sign(x))), F("special", 10), grad=False,
      note="±inf: ±1 (it was NaN on cpu and cuda); -0.0: +0.0, as NumPy's"),
    C("modf_signs", "np.modf", lambda x: (*np.modf(x), np.signbit(np.modf(x)[0])),
      G([-2.0, 2.0, -0.0, 1.5, -1.5, np.inf, -np.inf, np.nan]), grad=False, note="a negative integer's fraction is -0.0"),
    C("ldexp_range64", "np.ldexp", lambda x, e: (np.ldexp(x, e), *np.frexp(np.ldexp(x, e))),
      G([2.0**-1000, 2.0**1000, 0.0, np.inf, -1.5, 1e-310, 3.0]), G(np.array([1500, -1500, 5000, -3000, 1030, 1100, -1075])),
      grad=False, dtypes=("float64",), note="exponents beyond the normal range: one rounding, as C's ldexp"),
    C("ldexp_range32", "np.ldexp", lambda x, e: (np.ldexp(x, e), *np.frexp(np.ldexp(x, e))),
      G([2.0**-100, 2.0**100, 0.0, np.inf, -1.5, 1e-40, 3.0]), G(np.array([200, -200, 5000, -3000, 130, 140, -150], np.int32)),
      grad=False, dtypes=("float32",), note="exponents beyond the normal range: one rounding, as C's ldexp"),
    C("frexp_max64", "np.frexp", lambda x: np.frexp(x), G([np.finfo(np.float64).max, -2.0**1023, 5e-324]), grad=False,
      dtypes=("float64",), note="the largest floats (2**1024 is inf)"),
    C("frexp_max32", "np.frexp", lambda x: np.frexp(x), G([np.finfo(np.float32).max, -2.0**127, 1e-45]), grad=False,
      dtypes=("float32",), note="the largest floats (2**128 is inf)"),
    C("modf_ldexp", "np.modf np.ldexp np.nextafter np.spacing", lambda x, e: (
        *np.modf(x * 3), np.ldexp(x, e), np.nextafter(x, np.float32(0)), np.spacing(x)), F("any", 3, 4), I(-3, 4, 4),
      grad=False),
    C("frexp", "np.frexp", lambda x: np.frexp(x), G([0.0, -0.0, 1.0, -0.75, 8.0, 7.999999, 1e-300, -3e5, np.inf, np.nan, 5e-310]),
      grad=False, note="±0, inf, NaN, powers of two, subnormal"),
    C("frexp_grad", "np.frexp", lambda x: np.frexp(x)[0] * 2.0, F("nz", 3, 4)),
    C("nextafter_grad", "np.nextafter", lambda x: np.nextafter(x, np.inf), F("any", 4)),
    C("heaviside", "np.heaviside", lambda x, h: np.heaviside(x, h), G([-1.0, 0.0, 2.0, 0.5]), F("any", 4), note="at 0"),
    C("heaviside_nan", "np.heaviside", lambda x: np.heaviside(x, 0.5), F("special", 10), grad=False, note="NaN"),
    C("predicates", "np.isnan np.isinf np.isfinite np.isposinf np.isneginf np.signbit np.isclose",
      lambda x: (np.isnan(x), np.isinf(x), np.isfinite(x), np.isposinf(x), np.isneginf(x), np.signbit(x),
                 np.isclose(x, 1.5), np.isclose(x, x, equal_nan=True)), F("special", 10), grad=False,
      note="±0, ±inf, NaN"),
    C("comparisons", "np.less np.less_equal np.greater np.greater_equal np.equal np.not_equal x<y x<=y x>y x>=y x==y x!=y",
      lambda x, y: (np.less(x, y), np.less_equal(x, y), np.greater(x, y), np.greater_equal(x, y), np.equal(x, y),
                    np.not_equal(x, y), x < y, x <= y, x > y, x >= y, x == y, x != y),
      F("any", 3, 4), G([0.5, -0.5, 0.0, 1.0]), grad=False),
    C("special_values", "np.exp np.log np.sqrt np.arctan2 np.hypot np.cbrt np.logaddexp np.fmax np.fmin np.maximum",
      lambda x: (np.exp(x), np.log(np.abs(x)), np.sqrt(x), np.arctan2(x, -x), np.hypot(x, 1.0), np.cbrt(x),
                 np.logaddexp(x, x), np.fmax(x, np.float32(1)), np.fmin(x, np.float32(1)), np.maximum(x, np.float32(1))),
      F("special", 10), grad=False, note="±0, ±inf, NaN"),
    C("nan_to_num", "np.nan_to_num", lambda x: (np.nan_to_num(x), np.nan_to_num(x, nan=-1.0, posinf=9.0)), F("special", 10),
      grad=False, note="NaN, ±inf"),
    C("nan_to_num_grad", "np.nan_to_num", np.nan_to_num, F("any", 3, 4)),
    C("complex_parts", "np.real np.imag np.conj np.conjugate np.angle x.real x.imag x.conj()",
      lambda x: (np.real(x), np.imag(x), np.conj(x), np.conjugate(x), np.angle(x), x.real, x.imag, x.conj()), F("nz", 3, 4)),
    C("where_clip", "np.where np.clip x.clip()", lambda x, y: (np.where(x > 0, x, y), np.clip(x, -0.5, 0.5),
                                                              x.clip(-1.0, None), np.where(y < 0.3, x * y, 0.0)),
      F("any", 3, 4), F("any", 4)),
    C("broadcast_0d", "np.add np.multiply", lambda x, y: (x + y, x * y), F("any"), F("any", 2, 3), note="0-d with 2-D"),
    C("empty_elementwise", "np.exp np.add", lambda x: np.exp(x) + x, F("any", 0, 3), note="empty"),
    C("scalar_0d", "np.sin np.tanh", lambda x: np.sin(x) * np.tanh(x), F("any"), note="0-d"),
    C("ufunc_outer", "np.multiply.outer np.subtract.outer", lambda x, y: (np.multiply.outer(x, y), np.subtract.outer(x, y)),
      F("any", 3), F("any", 2)),
    C("ufunc_dtype", "np.add", lambda x: np.add(x, 1, dtype=np.float64), F("any", 4)),
    C("astype", "np.astype x.astype()", lambda x: (np.astype(x, np.float64) * 2, x.astype(np.int32), np.astype(x > 0, np.int32)),
      F("any", 4)),
    C("astype_float32", "np.astype x.astype()", lambda x: x.astype(np.float32) * 2, F("any", 4), grad=False,
      note="float64 -> float32 (values only: finite differences would see its rounding)"),
])

INTEGER = _rows("integer", [
    C("int_arith", "np.add np.subtract np.multiply np.negative np.absolute np.sign np.maximum np.minimum np.power np.square",
      lambda a, b: (a + b, a - b, a * b, -a, np.abs(a), np.sign(a), np.maximum(a, b), np.minimum(a, b),
                    np.power(a, np.abs(b) % 4), np.square(a)), I(-9, 9, 3, 4), I(-9, 9, 4), grad=False, dtypes=INT_F),
    C("int_division", "np.floor_divide np.remainder np.mod np.fmod np.divmod x//y x%y",
      lambda a, b: (np.floor_divide(a, b), np.remainder(a, b), np.mod(a, b), np.fmod(a, b), *np.divmod(a, b), a // b, a % b),
      I(-20, 20, 3, 4), G(np.array([3, -3, 0, 7])), grad=False, dtypes=INT_F, note="negative and zero divisors"),
    C("true_divide_int", "np.true_divide", lambda a, b: a / b, I(-20, 20, 3, 4), G(np.array([3, -2, 5, 7])), grad=False,
      dtypes=INT_F, note="int / int is float64"),
    C("bitwise", "np.bitwise_and np.bitwise_or np.bitwise_xor np.bitwise_not np.invert x&y x|y x^y ~x",
      lambda a, b: (np.bitwise_and(a, b), np.bitwise_or(a, b), np.bitwise_xor(a, b), np.bitwise_not(a), np.invert(a),
                    a & b, a | b, a ^ b, ~a), I(-50, 50, 3, 4), I(-50, 50, 4), grad=False, dtypes=INT_F),
    C("shifts", "np.left_shift np.right_shift x<<y x>>y",
      lambda a, s: (np.left_shift(a, s), np.right_shift(a, s), a << 2, a >> 1),
      I(-50, 50, 4, 5), G(np.array([0, 3, 31, 63, 70])), grad=False, dtypes=INT_F, note="shift >= width"),
    C("int_aliases", "np.bitwise_invert np.bitwise_left_shift np.bitwise_right_shift",
      lambda a, b: (np.bitwise_invert(a), np.bitwise_left_shift(a, b % 8), np.bitwise_right_shift(a, b % 8)),
      I(-50, 50, 3, 4), I(0, 9, 4), grad=False, dtypes=INT_F),
    C("gcd_lcm", "np.gcd np.lcm", lambda a, b: (np.gcd(a, b), np.lcm(a, b)), I(-30, 30, 3, 4), I(-30, 30, 4),
      grad=False, dtypes=INT_F, note="zeros, negatives"),
    C("int_reductions", "np.sum np.prod np.max np.min np.mean np.cumsum np.argmax",
      lambda a: (np.sum(a, axis=0), np.prod(a % 3, axis=1), np.max(a), np.min(a, axis=-1), np.mean(a), np.cumsum(a, axis=1),
                 np.argmax(a, axis=0)), I(-9, 9, 3, 4), grad=False, dtypes=INT_F, note="int sums promote to int64"),
    C("int_accumulators", "np.sum np.prod np.cumsum np.cumprod np.add.accumulate np.multiply.accumulate np.maximum.accumulate",
      lambda a, p: (np.sum(a, dtype=np.int32), np.prod(a % 3, axis=1, dtype=np.int32), np.cumsum(a, axis=0, dtype=np.int32),
                    np.cumprod(a % 3, dtype=np.int32), np.add.accumulate(a, axis=1), np.multiply.accumulate(a % 3),
                    np.maximum.accumulate(a, axis=1), np.add.accumulate(p), np.multiply.accumulate(p)),
      I(-9, 9, 3, 4), B(4), grad=False, dtypes=INT_F,
      note="dtype= is the accumulator's; add and multiply .accumulate promote to int64, maximum's keeps the dtype"),
    C("int_initial", "np.sum np.max np.min",
      lambda a, p: (np.sum(a, axis=0, initial=2.5), np.max(a, axis=1, initial=np.float64(1.5)), np.min(p, initial=2),
                    np.max(p, where=p, initial=-1)),
      I(-9, 9, 3, 4), B(4), grad=False, dtypes=INT_F, note="initial= cast to the reduction's dtype (bool stays bool)"),
    C("int_matrix_power", "np.linalg.matrix_power", lambda a: (np.linalg.matrix_power(a, 3), np.linalg.matrix_power(a, 0),
                                                              np.linalg.matrix_power(a > 0, 2)),
      I(-3, 4, 3, 3), grad=False, dtypes=INT_F, note="integer matrices' powers stay integers"),
    C("int_order_statistics", "np.quantile np.nanquantile np.percentile np.insert",
      lambda a, p: (np.quantile(a, [0.2, 0.7], axis=1, method="lower"), np.nanquantile(a, 0.5, method="nearest"),
                    np.percentile(a, 40, axis=0, method="higher"), np.quantile(p, 0.5, method="lower"),
                    np.nanquantile(p, [0.3], method="higher"), np.insert(a, 1, 2.7, axis=1), np.insert(p, [0, 2], 7)),
      I(-9, 9, 3, 4), B(4), grad=False, dtypes=INT_F,
      note="quantiles without interpolation keep the dtype; np.insert casts the values to the array's"),
    C("int_round", "np.round np.around x.round()",
      lambda a: (np.round(a, -1), np.around(a, -2), a.round(-1), np.round(a, 0), np.round(a.astype(np.int32), -1)),
      G(np.array([15, 25, -15, -25, 149, 150, 5, -5, 250, -250])), grad=False, dtypes=("int64",),
      note="negative decimals: half to even in float64, cast back, as NumPy's"),
    C("int_integral", "np.floor np.ceil np.trunc np.fix np.fabs np.heaviside",
      lambda a, p: (np.floor(a), np.ceil(a), np.trunc(a), np.fix(a), np.fabs(a), np.heaviside(a, 0.5), np.heaviside(a, a),
                    np.floor(p), np.trunc(p)),
      I(-5, 5, 3, 4), B(4), grad=False, dtypes=INT_F,
      note="NumPy 2: integers are their own floor, ceil and trunc; fabs and heaviside give float64"),
    C("int_compare_wide", "np.less np.equal np.clip",
      lambda a: (a < 2**40, a == 2**70, np.less(-2**63 - 5, a), a >= 2**31, np.clip(a, -2**40, 2**40), np.clip(a, None, 2**63)),
      I(-9, 9, 3, 4), grad=False, dtypes=INT_F,
      note="a Python int beyond the dtype compares exactly; a clip bound beyond it binds nothing"),
    C("int_compare", "np.less np.equal np.clip np.where", lambda a, b: (a < b, a == b, np.clip(a, -2, 3), np.where(a > b, a, b)),
      I(-5, 5, 3, 4), I(-5, 5, 4), grad=False, dtypes=INT_F),
    C("bool_logic", "np.logical_and np.logical_or np.logical_not np.logical_xor np.bitwise_and np.bitwise_or np.bitwise_xor np.invert",
      lambda a, b: (np.logical_and(a, b), np.logical_or(a, b), np.logical_not(a), np.logical_xor(a, b), a & b, a | b,
                    a ^ b, ~a, np.invert(b)), B(3, 4), B(4), grad=False, dtypes=("bool",)),
    C("bool_reductions", "np.all np.any np.count_nonzero np.sum", lambda a: (np.all(a, axis=0), np.any(a, axis=1), np.all(a),
                                                                              np.count_nonzero(a), np.sum(a)),
      B(3, 4), grad=False, dtypes=("bool",)),
])

REDUCTIONS = _rows("reductions", [
    C("sum", "np.sum x.sum() np.add.reduce", lambda x: (np.sum(x), np.sum(x, axis=0), x.sum(axis=-1, keepdims=True),
                                                      np.add.reduce(x, axis=1), np.sum(x, axis=(0, 2))), F("any", 2, 3, 4),
      note="axis None, negative, tuple, keepdims"),
    C("prod", "np.prod x.prod()", lambda x: (np.prod(x, axis=1), x.prod()), F("zeros", 3, 4), note="zeros"),
    C("extrema", "np.max np.min np.amax np.amin x.max() x.min()",
      lambda x: (np.max(x, axis=0), np.min(x, axis=-1, keepdims=True), np.amax(x), np.amin(x, axis=1), x.max(1), x.min()),
      F("distinct", 3, 4)),
    C("extrema_initial", "np.max np.sum", lambda x: (np.max(x, axis=0, initial=0.5), np.sum(x, where=x > 0, axis=1),
                                                     np.max(x[:, :0], axis=1, initial=-2.0), x[:0].min(0, initial=3.0)),
      F("distinct", 3, 4), note="initial=, where=; initial= of an empty slice"),
    C("extrema_initial_empty", "np.max np.min", lambda x: (np.max(x[:0], axis=0, initial=0.5), np.max(x[:0], initial=2),
                                                           np.min(x[:, :0], axis=1, initial=-1, keepdims=True)),
      F("any", 3, 4), note="an empty slice is initial="),
    C("initial_dtype", "np.sum np.max np.var", lambda x: (np.sum(x, axis=0, initial=np.float64(0.5)), np.max(x, initial=np.array(0.25)),
                                                          np.var(x, axis=1, dtype=np.complex128)),
      F("distinct", 3, 4), grad=False, note="initial= takes the array's dtype; var(dtype=complex) is complex"),
    C("mean", "np.mean x.mean()", lambda x: (np.mean(x), np.mean(x, axis=(0, 1)), x.mean(axis=-1, keepdims=True)),
      F("any", 2, 3, 4)),
    C("var_std", "np.var np.std x.std()", lambda x: (np.var(x), np.var(x, axis=0, ddof=1), np.std(x, axis=-1, keepdims=True),
                                                    x.std(axis=1)), F("any", 3, 4)),
    C("std_equal_values", "np.std np.var np.nanstd np.nanvar x.std()",
      lambda x: (np.std(x[:1]), np.std(x[:1] * np.ones(3)), np.var(x[:1] * np.ones((2, 3)), axis=1, ddof=1), np.nanstd(x[:1]),
                 np.nanvar(x[:1] * np.ones(3), ddof=1), (x[:2, None] * np.ones((2, 3))).std(axis=-1, keepdims=True)),
      F("any", 4), note="one value, equal values (std's gradient 0)"),
    C("var_ddof", "np.var np.nanvar np.std np.nanstd", lambda x: (np.var(x, ddof=5), np.nanvar(x, ddof=4), np.std(x[:2], ddof=2),
                                                              np.nanstd(x, ddof=4.5), np.var(x, ddof=0.5)),
      F("any", 4), grad=False, note="ddof >= n: inf or NaN, as NumPy"),
    C("ptp", "np.ptp", lambda x: (np.ptp(x, axis=1), np.ptp(x)), F("distinct", 3, 4)),
    C("average", "np.average", lambda x, w: (np.average(x), np.average(x, axis=1, weights=w),
                                             np.average(x, axis=1, weights=w, returned=True)[1]), F("any", 3, 4), F("pos", 4)),
    C("average_weights_dtype", "np.average", lambda x, w: (np.average(x, axis=1, weights=w, returned=True),
                                                            np.average(x, weights=w, returned=True, keepdims=True)),
      F("any", 3, 4), I(0, 4, 3, 4), grad=False, note="integer weights: their sum in the result's dtype, as NumPy's"),
    C("nan_reductions", "np.nansum np.nanprod np.nanmax np.nanmin np.nanmean np.nanvar np.nanstd",
      lambda x: (np.nansum(x, axis=1), np.nanprod(x, axis=0), np.nanmax(x, axis=1), np.nanmin(x), np.nanmean(x, axis=0),
                 np.nanvar(x, axis=1), np.nanstd(x)), F("nan", 3, 4), note="NaN"),
    C("nan_all_nan", "np.nanmax np.nanmean", lambda x: (np.nanmax(x * np.nan, axis=0), np.nanmean(x * np.nan)),
      F("any", 4), grad=False, note="all-NaN slice"),
    C("arg_extrema", "np.argmax np.argmin x.argmax() x.argmin() np.nanargmax np.nanargmin",
      lambda x, y: (np.argmax(x), np.argmax(x, axis=0), np.argmin(x, axis=-1, keepdims=True), x.argmax(axis=1), x.argmin(),
                    np.nanargmax(y, axis=1), np.nanargmin(y)), F("distinct", 3, 4), F("nan", 3, 4), grad=False),
    C("argmax_ties_nan", "np.argmax np.argmin", lambda x: (np.argmax(x), np.argmin(x[:3])), G([1.0, 3.0, 3.0, np.nan, 2.0]),
      grad=False, note="ties: first; NaN wins"),
    C("logical_reductions", "np.all np.any np.count_nonzero x.all() x.any()",
      lambda x: (np.all(x > -1, axis=0), np.any(x > 1, axis=1), np.count_nonzero(x > 0, axis=0), (x > 0).all(), (x > 0).any(),
                 np.count_nonzero(x)), F("any", 3, 4), grad=False),
    C("empty_reductions", "np.sum np.prod np.all np.any", lambda x: (np.sum(x, axis=0), np.prod(x), np.all(x > 0), np.any(x > 0)),
      F("any", 0, 4), note="empty"),
    C("median", "np.median", lambda x: (np.median(x), np.median(x, axis=1), np.median(x[:, :3], axis=-1, keepdims=True)),
      F("distinct", 3, 4)),
    C("quantiles", "np.percentile np.quantile", lambda x: (np.percentile(x, 30), np.quantile(x, [0.1, 0.5, 0.9], axis=1),
                                                          np.quantile(x, 0.25, axis=0, method="lower"),
                                                          np.quantile(x, 0.6, method="midpoint"),
                                                          np.percentile(x, 40, axis=1, method="nearest", keepdims=True)),
      F("distinct", 3, 4)),
    C("quantiles_discrete", "np.quantile np.nanpercentile", lambda x: (
        np.quantile(x, [0.2, 0.8], axis=1, method="lower"), np.nanpercentile(x, [30.0], method="higher"),
        np.quantile(x, np.float32(0.5), axis=0, method="nearest")), F("distinct", 3, 4),
      note="lower, higher, nearest keep float32 (a list of quantiles too)"),
    C("quantile_positions", "np.quantile np.percentile np.nanquantile", lambda x: (
        np.quantile(x, 0.28, method="higher"), np.quantile(x, [0.56, 0.6], method="higher"), np.percentile(x, 28.0, method="nearest"),
        np.nanquantile(x, 0.28, method="higher"), np.quantile(x, [[0.1, 0.28]], method="midpoint"), np.quantile(x, 0.28)),
      F("distinct", 26), note="positions in q's dtype, float64 (float32's (n - 1) * q picks a neighbour); a 2-D q"),
    C("nan_quantiles", "np.nanmedian np.nanpercentile np.nanquantile",
      lambda x: (np.nanmedian(x, axis=1), np.nanpercentile(x, 50), np.nanquantile(x, [0.2, 0.7], axis=0)), F("nan", 3, 4),
      note="NaN"),
    C("median_nan", "np.median np.percentile", lambda x: (np.median(x), np.percentile(x, 10)), G([1.0, np.nan, 3.0, 0.5]),
      grad=False, note="NaN"),
    C("cov_corrcoef", "np.cov np.corrcoef", lambda x, y: (np.cov(x), np.cov(x, rowvar=False), np.cov(x[0], y), np.corrcoef(x),
                                                      np.cov(x, bias=True)),
      F("any", 3, 4), F("any", 4)),
    C("trace", "np.trace x.trace()", lambda x: (np.trace(x), np.trace(x, offset=1), x.trace(axis1=1, axis2=2)),
      F("any", 2, 3, 4)),
])

SCANS = _rows("scans", [
    C("cumsum", "np.cumsum x.cumsum() np.add.accumulate np.cumulative_sum",
      lambda x: (np.cumsum(x), np.cumsum(x, axis=0), x.cumsum(axis=-1), np.add.accumulate(x, axis=1),
                 np.cumulative_sum(x, axis=1, include_initial=True)), F("any", 3, 4)),
    C("cumprod", "np.cumprod x.cumprod() np.multiply.accumulate np.cumulative_prod",
      lambda x: (np.cumprod(x, axis=1), x.cumprod(), np.multiply.accumulate(x, axis=0), np.cumulative_prod(x, axis=0)),
      F("zeros", 3, 4), note="zeros"),
    C("cumulative_extrema", "np.maximum.accumulate np.minimum.accumulate",
      lambda x: (np.maximum.accumulate(x, axis=1), np.minimum.accumulate(x)), F("distinct", 3, 4)),
    C("nancumulative", "np.nancumsum np.nancumprod", lambda x: (np.nancumsum(x, axis=1), np.nancumprod(x)), F("nan", 3, 4),
      note="NaN"),
    C("cumsum_float32", "np.cumsum", lambda x: np.cumsum(x * 1000.0 + 0.1), F("any", 50), grad=False,
      note="float32 accumulates in float32, in order"),
    C("diff", "np.diff np.ediff1d", lambda x: (np.diff(x), np.diff(x, n=2, axis=0), np.diff(x, axis=0, prepend=0.0),
                                               np.diff(x, append=x[:, :1]), np.ediff1d(x), np.ediff1d(x[0], to_begin=[1.0])),
      F("any", 3, 4)),
    C("gradient", "np.gradient", lambda x, t: (np.gradient(x[0]), np.gradient(x, 0.5, axis=1), np.gradient(x, edge_order=2)[0],
                                               np.gradient(x[1], t)),
      F("any", 3, 4), F("sorted", 4)),
    C("trapezoid", "np.trapezoid", lambda y, x: (np.trapezoid(y), np.trapezoid(y, dx=0.5, axis=0), np.trapezoid(y, x)),
      F("any", 3, 4), F("sorted", 4)),
    C("trapezoid_dx", "np.trapezoid", lambda y, d: (np.trapezoid(y, dx=d), np.trapezoid(y, dx=d[:2, None], axis=0),
                                                    np.trapezoid(y, dx=np.array([[1.0], [2.0], [0.5]]))),
      F("any", 3, 4), F("pos", 3), note="an array dx weighs each interval"),
    C("convolve", "np.convolve np.correlate", lambda a, v: (np.convolve(a, v), np.convolve(a, v, "same"), np.convolve(a, v, "valid"),
                                                         np.correlate(a, v), np.correlate(a, v, "full"), np.convolve(v, a)),
      F("any", 4), F("any", 3)),
    C("interp", "np.interp", lambda x, fp: (np.interp(x, np.array([-1.0, 0.0, 0.5, 2.0]), fp),
                                           np.interp(x, np.array([-1.0, 0.0, 0.5, 2.0]), fp, left=-9.0, right=9.0)),
      G([-2.0, -0.7, 0.1, 0.3, 1.2, 3.0]), F("any", 4), note="outside the samples"),
    C("interp_x", "np.interp", lambda x, xp: np.interp(x, xp, np.array([1.0, -2.0, 0.5, 4.0, 0.0])),
      F("unit", 6), G(np.array([-1.0, -0.4, 0.1, 0.45, 1.0]))),
    C("interp_float32", "np.interp", lambda x, xp, fp: np.interp(x, xp, fp), F("unit", 6), G(np.array([-1.0, -0.4, 0.1, 0.45, 1.0])),
      F("any", 5), note="float32 samples give float64, as NumPy's"),
    C("interp_edges", "np.interp", lambda x: (np.interp(x, np.array([0.0, 1.0, 1.0, 2.0, 4.0]), np.array([0.0, np.inf, 3.0, -1.0, 2.0])),
                                             np.interp(x, np.array([0.0, 1.0, 2.0, 3.0]), np.array([np.inf, 0.0, -np.inf, -np.inf])),
                                             np.interp(x, np.array([1.0]), np.array([2.0]), left=-1.0)),
      G([-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, np.nan]), grad=False,
      note="knots and ties; infinite samples (fp at a knot, else from the other end); one sample, NaN x"),
    C("polyval_vander", "np.polyval np.vander", lambda p, x: (np.polyval(p, x), np.vander(x), np.vander(x, 3, increasing=True)),
      F("any", 4), F("any", 4)),
])

SHAPES = _rows("shapes", [
    C("reshape", "np.reshape x.reshape() np.ravel x.ravel() x.flatten()",
      lambda x: (np.reshape(x, (6, 4)), x.reshape(-1, 2), np.ravel(x), x.ravel(), x.flatten(), x.reshape(4, 6)[1:],
                 np.reshape(x, (4, -1), order="F"), x.reshape(6, 4, order="F"), np.ravel(x, "F"), x.flatten("F"),
                 x[:1, 1].ravel("A"), x[1, :, :1].flatten("K"), np.reshape(x[0, 0], (1, 4, 1), order="A")),
      F("any", 2, 3, 4), note="order='F'; 'A' and 'K' where C's and Fortran's readings agree"),
    C("transpose", "np.transpose x.T x.mT x.transpose() np.permute_dims np.matrix_transpose np.swapaxes np.moveaxis np.rollaxis",
      lambda x: (np.transpose(x), x.T, x.mT, x.transpose(1, 0, 2), np.permute_dims(x, (2, 0, 1)), np.matrix_transpose(x),
                 np.swapaxes(x, 0, -1), np.moveaxis(x, 0, -1), np.rollaxis(x, 2),
                 np.moveaxis(x, np.array([0, 1]), np.array([-1, 0]))), F("any", 2, 3, 4), note="NumPy arrays of axes"),
    C("broadcast", "np.broadcast_to np.broadcast_arrays np.expand_dims np.squeeze np.atleast_1d np.atleast_2d np.atleast_3d",
      lambda x, y: (np.broadcast_to(x, (2, 3, 4)), *np.broadcast_arrays(x, y), np.expand_dims(x, (0, 2)), np.squeeze(y),
                    np.squeeze(y, axis=-1), np.squeeze(x[0, 0], axis=0), np.atleast_1d(x[0, 0]), np.atleast_2d(y[:, 0]), np.atleast_3d(x)),
      F("any", 3, 4), F("any", 3, 1), note="squeeze(0-d, axis=0) is the 0-d array, as NumPy's"),
    C("concatenate", "np.concatenate np.concat np.stack np.append",
      lambda x, y: (np.concatenate([x, y], axis=0), np.concat((x, y[:, :4]), axis=None), np.stack([x, x * 2], axis=-1),
                    np.append(x, y), np.append(x, y, axis=0), np.concatenate([x, y[:0]]),
                    np.concatenate([x, y], casting="safe"), np.stack([x, x], casting="no")),
      F("any", 3, 4), F("any", 2, 4), note="empty piece; casting="),
    C("stack_family", "np.vstack np.hstack np.dstack np.column_stack np.block",
      lambda x, y: (np.vstack([x, y]), np.hstack([x, x]), np.hstack([y[0], y[1]]), np.dstack([x, x]),
                    np.column_stack([x[0], y[0]]), np.block([[x, x], [y, y]]), np.block([[x[:2]], [y[None]]])),
      F("any", 3, 4), F("any", 2, 4), note="np.block raises every array to the largest rank (nesting depth or array)"),
    C("row_stack", "np.row_stack", lambda x: np.row_stack([x, x]), F("any", 3, 4)),
    C("split", "np.split np.array_split np.hsplit np.vsplit np.dsplit np.unstack",
      lambda x: (np.split(x, 2), np.split(x, [1, 3], axis=1), np.array_split(x, 3, axis=1), np.hsplit(x, 2),
                 np.vsplit(x, [1]), np.dsplit(x[..., None].repeat(2, -1), 2), np.unstack(x, axis=1),
                 np.array_split(x, 3.0, axis=1), np.split(x, np.array(2)), np.array_split(x[0], 2.7)), F("any", 4, 4),
      note="sections: what has no len() is int()'d (3.0, a 0-d array), as NumPy's"),
    C("flip", "np.flip np.fliplr np.flipud np.rot90", lambda x: (np.flip(x), np.flip(x, 1), np.fliplr(x), np.flipud(x),
                                                                np.rot90(x), np.rot90(x, 2), np.rot90(x, -1, axes=(1, 0)),
                                                                np.flip(x, np.array([0, 1]))),
      F("any", 3, 4)),
    C("roll", "np.roll", lambda x: (np.roll(x, 2), np.roll(x, -1, axis=1), np.roll(x, (1, 2), axis=(0, 1)), np.roll(x, 7, axis=0),
                                    np.roll(x, np.array([1, -2]), axis=(0, 1)), np.roll(x, (1, 2), axis=1)),
      F("any", 3, 4), note="negative, several axes, more than the length; shift and axis broadcast (a NumPy array of shifts)"),
    C("tile_repeat", "np.tile np.repeat x.repeat() np.resize",
      lambda x: (np.tile(x, 2), np.tile(x, (2, 1, 2)), np.repeat(x, 2), np.repeat(x, 3, axis=0), x.repeat(2, axis=-1),
                 np.repeat(x, [1, 0, 2], axis=0), np.resize(x, (5, 3)), np.repeat(x, 0, axis=0), np.tile(x, (0, 2)),
                 np.repeat(x[:0], [], axis=0)),
      F("any", 3, 4), note="zero repeats: empty"),
    C("insert_delete", "np.insert np.delete", lambda x, v: (np.insert(x, 1, v, axis=1), np.insert(x, [0, 2], 5.0),
                                                        np.delete(x, 1, axis=0), np.delete(x, [0, 2])), F("any", 3, 4), F("any", 3)),
    C("pad", "np.pad", lambda x: (np.pad(x, 1), np.pad(x, ((1, 0), (2, 1)), constant_values=3.0), np.pad(x, 2, mode="edge"),
                                  np.pad(x, (2, 1), mode="reflect"), np.pad(x, 1, mode="symmetric"), np.pad(x, (3, 2), mode="wrap"),
                                  np.pad(x, ((4, 5), (2, 7)), mode="reflect", reflect_type="odd"),
                                  np.pad(x, ((1, 7), (5, 0)), mode="symmetric", reflect_type="odd")),
      F("any", 3, 4), note="every static mode; reflect_type='odd', wider than the array"),
    C("pad_computed", "np.pad",
      lambda x, c: (np.pad(x, ((2, 1), (3, 2)), mode="linear_ramp"), np.pad(x, 2, mode="linear_ramp", end_values=((1.0, 2.0), (c, 4.0))),
                    np.pad(x, ((1, 2), (2, 1)), mode="maximum"), np.pad(x, 2, mode="minimum", stat_length=((1, 2), (3, 1))),
                    np.pad(x, ((1, 2), (2, 0)), mode="mean", stat_length=2.6), np.pad(x, (2, 1), mode="median"),
                    np.pad(x, ((1, 2), (0, 3)), constant_values=((c, 2.0), (3.0, c * c)))),
      F("any", 3, 4), F("any"), note="linear_ramp, the statistics (stat_length per axis, rounded), a traced constant_values "
                                     "and end_values; each axis padded from the axes padded before it, as NumPy's"),
    C("diagonal", "np.diagonal x.diagonal() np.diag np.diagflat",
      lambda x, v: (np.diagonal(x), np.diagonal(x, 1), x.diagonal(-1), np.diag(x), np.diag(v), np.diag(v, k=-1), np.diagflat(x[:2, :2]),
                    np.diagonal(x[None].repeat(2, 0), axis1=1, axis2=2)), F("any", 3, 4), F("any", 4)),
    C("triangles", "np.tril np.triu", lambda x: (np.tril(x), np.triu(x, 1), np.tril(x, -1), np.triu(x[None].repeat(2, 0)),
                                                 np.tril(x[0], 1), np.triu(x[0])),
      F("any", 3, 4), note="a vector: NumPy's n x n"),
    C("meshgrid", "np.meshgrid", lambda x, y: (*np.meshgrid(x, y), *np.meshgrid(x, y, indexing="ij"),
                                               *np.meshgrid(x, y, sparse=True)), F("any", 4), F("any", 3)),
    C("copy", "np.copy", lambda x: np.copy(x.T), F("any", 3, 4)),
    C("shape_queries", "np.shape np.ndim np.size", lambda x: x * (np.shape(x)[0] + np.ndim(x) + np.size(x)), F("any", 3, 4)),
    C("indices_from", "np.tril_indices_from np.triu_indices_from np.diag_indices_from",
      lambda x: (x[np.tril_indices_from(x)], x[np.triu_indices_from(x, 1)], x[np.diag_indices_from(x)]), F("any", 3, 3)),
])

INDEXING = _rows("indexing", [
    C("basic", "x[i] x[a:b:c] x[...] x[None]", lambda x: (x[1], x[-1, 2], x[::-1, 1:3], x[..., 1], x[None, :, 2]), F("any", 3, 4)),
    C("int_array", "x[int_array]", lambda x, i: (x[i], x[:, i], x[[2, 0]], x[i, 1], x[np.array([[0, 1], [2, 0]])]),
      F("any", 3, 4), G(np.array([2, 0, -1, 0])), note="repeated, negative"),
    C("int_arrays", ("x[int_array, int_array]",), lambda x, i, j: (x[i, j], x[i[:, None], j], x[i, :, j[0]], x[1:, i, 1],
                                                               x[i, ..., j], x[None, i, ..., j]),
      F("any", 3, 4, 5), G(np.array([2, 0, 1])), G(np.array([1, 3, 0])), note="broadcast, not adjacent; with an Ellipsis"),
    C("ix_", "np.ix_", lambda x, i, j: (x[np.ix_(i, j)], x[np.ix_(i[:2], [True, False, True, True])], tk.at(x)[np.ix_(i, j)].add(1.0)),
      F("any", 3, 4), G(np.array([2, 0, 2])), G(np.array([1, 3])), ref=lambda x, i, j: (
          x[np.ix_(i, j)], x[np.ix_(i[:2], [True, False, True, True])], _at_add(x, np.ix_(i, j), 1.0)),
      note="traced index arrays (it raised NotImplementedError)"),
    C("mask", "x[bool_array]", lambda x: (x[np.array([True, False, True])], x[x.shape[0] * np.eye(3, 4, dtype=bool) > 0]),
      F("any", 3, 4), note="constant masks"),
    C("bool_scalar_index", "x[bool_array]", lambda x: (x[True], x[np.array(False)], x[1, True], x[True, [0, 2]],
                                                       x[..., np.True_], x[np.array(True), 1:3, np.array(False)]),
      F("any", 3, 4), note="0-d booleans: a new axis of length 1 or 0, as NumPy reads them (they raised)"),
    C("traced_indices", ("x[traced_int_array]",), lambda x, y: (x[np.argsort(y)], x[np.argmax(y)], x[:, np.argmin(y) % 4],
                                                                x[[np.argmax(y), 0]], x[..., (1, 3)], x[(2, 0), 1],
                                                                np.take(x, [np.argmin(y), -1], axis=1)),
      F("any", 3, 4), F("distinct", 3), note="a list of traced integers; a tuple inside the index"),
    C("take", "np.take x.take()", lambda x, i: (np.take(x, i), np.take(x, i, axis=1), x.take(i[:2], axis=0),
                                                np.take(x, [5, -7], axis=1, mode="wrap"), np.take(x, [9, -3], mode="clip"),
                                                np.take(x, np.array([True, False, True]), axis=1), np.take(x[0], i > 1)),
      F("any", 3, 4), G(np.array([2, 0, 2, 1])), note="boolean indices are 0 and 1, as NumPy's take casts them"),
    C("take_along_axis", "np.take_along_axis", lambda x, y: (np.take_along_axis(x, np.argsort(y, axis=1), axis=1),
                                                             np.take_along_axis(x, np.argmax(y, axis=0)[None], axis=0),
                                                             np.take_along_axis(x[:, 0], np.array([2, 2, 0]), axis=None)),
      F("any", 3, 4), F("distinct", 3, 4)),
    C("choose_select", "np.choose np.select np.piecewise",
      lambda x, y: (np.choose(np.array([0, 1, 2, 1]), [x[0], x[1], x[2]]), np.select([x > 0.5, x < -0.5], [x, y], 0.0),
                    np.piecewise(x, [x < 0, x >= 0], [lambda t: -t, lambda t: t * t]),
                    np.piecewise(x, [x < -0.2], [lambda t: t * 2, 1.0])),
      F("any", 3, 4), F("any", 3, 4)),
    C("select_dtype", "np.select", lambda x: (np.select([x > 0.5, x < -0.5], [np.float32(1), 2], 0),
                                              np.select([x > 0.5], [x], np.float32(0.5)), np.select([x > 0], [1], 2.5)),
      F("any", 3, 4), note="NumPy's dtype of the choices and the default, Python numbers weak"),
    C("piecewise_domains", "np.piecewise", lambda x: (np.piecewise(x, [x > 0], [np.sqrt, 0.0]),
                                                      np.piecewise(x, [x < -0.4, x > 0.4], [lambda t: np.log(-t), np.log, np.cos])),
      F("distinct", 8),
      note="a function outside its domain where its condition fails (its NaN derivative there was kept: 0 * NaN)"),
    C("piecewise_inf", "np.piecewise", lambda x: np.piecewise(x, [x < 0], [lambda t: -t]), G([np.inf, -1.0, np.nan, -np.inf]),
      grad=False, note="0 where no condition holds (x * 0 was NaN at inf)"),
    C("compress_extract", "np.compress np.extract", lambda x: (np.compress([True, False, True], x, axis=0),
                                                             np.extract(np.arange(12).reshape(3, 4) % 3 == 0, x)),
      F("any", 3, 4)),
    C("unravel", "np.unravel_index np.ravel_multi_index", lambda x, i: (x[np.unravel_index(i, (3, 4))],
                                                                       np.ravel_multi_index((i % 3, i % 4), (3, 4))),
      F("any", 3, 4), G(np.array([0, 5, 11, 7]))),
    C("at_add", "tk.at(x)[i].add np.add.at", lambda x, v: tk.at(x)[IDX].add(v), F("any", 4, 3), F("any", 4, 3),
      ref=lambda x, v: _at_add(x, IDX, v), note="repeated indices accumulate"),
    C("at_set", "tk.at(x)[i].set", lambda x, v: tk.at(x)[IDX].set(v), F("any", 4, 3), F("any", 4, 3),
      ref=lambda x, v: _at_set(x, IDX, v), note="repeated indices: the last wins"),
    C("at_multiply", "tk.at(x)[i].multiply np.multiply.at", lambda x, v: tk.at(x)[:, IDX].multiply(v), F("any", 3, 4),
      F("zeros", 3, 4), ref=lambda x, v: _at_ufunc(np.multiply)(x, (slice(None), IDX), v), note="zeros"),
    C("at_min_max", "tk.at(x)[i].min tk.at(x)[i].max np.minimum.at np.maximum.at",
      lambda x, v: (tk.at(x)[IDX].min(v), tk.at(x)[IDX].max(v)), F("distinct", 4), F("distinct", 4),
      ref=lambda x, v: (_at_ufunc(np.minimum)(x, IDX, v), _at_ufunc(np.maximum)(x, IDX, v))),
    C("at_basic", "tk.at(x)[i].set tk.at(x)[i].add tk.at(x)[i].get", lambda x, v: (
        tk.at(x)[1:, ::2].set(v), tk.at(x)[0].add(v[0, 0]), tk.at(x)[:, 1].get()), F("any", 3, 4), F("any", 2, 2),
      ref=lambda x, v: (_at_set(x, (slice(1, None), slice(None, None, 2)), v), _at_add(x, 0, v[0, 0]), x[:, 1]),
      note="slices, an integer"),
    C("at_reversed", "tk.at(x)[i].set tk.at(x)[i].add", lambda x, v: (tk.at(x)[::-1].set(v), tk.at(x)[::-1, ::-1].add(v),
                                                                      tk.at(x)[:, ::-1].set(v[0])),
      F("any", 3, 4), F("any", 3, 4),
      ref=lambda x, v: (_at_set(x, slice(None, None, -1), v), _at_add(x, (slice(None, None, -1),) * 2, v),
                        _at_set(x, (slice(None), slice(None, None, -1)), v[0])),
      note="a reversing slice of the whole axis"),
    C("at_general", "tk.at(x)[i].add", lambda x, v: tk.at(x)[np.array([0, 2, 0]), 1:3].add(v), F("any", 3, 4), F("any", 3, 2),
      ref=lambda x, v: _at_add(x, (np.array([0, 2, 0]), slice(1, 3)), v), note="an index array with a slice"),
    C("at_mask", "tk.at(x)[mask].set", lambda x: tk.at(x)[x > 0].set(0.0), F("nz", 3, 4),
      ref=lambda x: np.where(x > 0, 0.0, x), note="a traced mask"),
])

CONTRACTIONS = _rows("contractions", [
    C("matmul", "np.matmul x@y np.dot x.dot()", lambda a, b, v: (np.matmul(a, b), a @ b, np.dot(a, b), a.dot(b), v @ a, a[0] @ a[1]),
      F("any", 3, 4), F("any", 4, 2), F("any", 3)),
    C("dot_nd", "np.dot np.vdot np.inner np.outer", lambda a, b: (np.dot(a, b), np.vdot(a, a), np.inner(a, a[0, 0]),
                                                                  np.outer(a[0, 0], b[:, 0, 0]), np.inner(2.0, a)),
      F("any", 2, 3, 4), F("any", 2, 4, 3)),
    C("tensordot", "np.tensordot", lambda a, b: (np.tensordot(a, a), np.tensordot(a, b, axes=([0, 1], [1, 0])),
                                                 np.tensordot(a, b[0], axes=0), np.tensordot(a[0], 2.0, 0)),
      F("any", 3, 4), F("any", 4, 3), note="a Python number is a float64 array, as NumPy's asarray"),
    C("einsum", "np.einsum", lambda a, b, c: (np.einsum("ij,jk->ik", a, b), np.einsum("ij,ij->i", a, a), np.einsum("ii", a[:, :3]),
                                              np.einsum("ii->i", a[:, :3]), np.einsum("i,j->ij", a[0], b[0]),
                                              np.einsum("...j,jk->...k", a, b), np.einsum("ij,jk,kl->il", a, b, c),
                                              np.einsum("ij,jk,kl", a, b, c, optimize="optimal"), np.einsum("ji", a),
                                              np.einsum(a, [0, 1], b, [1, 2], [0, 2]), np.einsum("bij,bjk->bik", c[None], c[None]),
                                              np.einsum("i,", a[0], 2.0)),
      F("any", 3, 4), F("any", 4, 2), F("any", 2, 2),
      note="trace, diagonal, outer, ellipsis, 3 operands, implicit"),
    C("kron_cross", "np.kron np.cross", lambda a, b: (np.kron(a, b), np.kron(a[0], b), np.cross(a[:, :3], b[0]),
                                                      np.cross(a[:2, :2], b[:2, :3]), np.cross(a[:, :2], b[1, :2])),
      F("any", 2, 3), F("any", 2, 3)),
    C("vecdot", "np.vecdot np.matvec np.vecmat", lambda a, v: (np.vecdot(a, v), np.matvec(a, v), np.vecmat(v[:3], a[:, :, :3]),
                                                                   np.vecdot(a, a[::-1], axis=0)),
      F("any", 2, 3, 4), F("any", 4)),
    C("multi_dot", "np.linalg.multi_dot", lambda a, b, c: (np.linalg.multi_dot([a, b, c]), np.linalg.multi_dot([a[0], b, c[:, 0]])),
      F("any", 3, 4), F("any", 4, 3), F("any", 3, 2)),
    C("int_contractions", "np.einsum np.vecdot np.tensordot np.dot np.inner np.matmul",
      lambda a, p: (np.einsum("ij->", a), np.einsum("ij,ij->i", a, a), np.einsum("i,i", a[0], a[1]), np.vecdot(a, a),
                    np.tensordot(a, a), np.dot(a[0], a[1]), np.inner(a, a), a @ a.T, np.einsum("i,i->", p, p), np.vecdot(p, p)),
      I(-9, 9, 3, 4), B(4), grad=False, dtypes=INT_F, note="int32 contractions stay int32, bools give bools"),
])

SORTING = _rows("sorting", [
    C("sort", "np.sort np.argsort x.argsort()", lambda x: (np.sort(x), np.sort(x, axis=0), np.sort(x, axis=None), np.argsort(x),
                                                           np.argsort(x, axis=0), x.argsort(), np.sort(x[0]), np.argsort(x[0, 0])),
      F("distinct", 3, 4), note="argsort of a 0-d array: [0], as NumPy's"),
    C("sort_nan_ties", "np.sort np.argsort", lambda x: (np.sort(x), np.argsort(x, stable=True)),
      G([2.0, np.nan, -1.0, 2.0, -np.inf, 0.0, np.nan, -0.0]), grad=False, note="NaN last, stable ties"),
    C("partition", "np.partition np.argpartition", lambda x: (np.partition(x, 2, axis=1)[:, 2], np.sort(np.partition(x, 1)),
                                                             np.take_along_axis(x, np.argpartition(x, 3), -1)[:, 3]),
      F("distinct", 3, 4), note="the kth element"),
    C("searchsorted", "np.searchsorted np.digitize", lambda v, a: (np.searchsorted(a, v), np.searchsorted(a, v, side="right"),
                                                                  np.searchsorted(a, a), np.digitize(v, a), np.digitize(v, a, right=True),
                                                                  np.digitize(v, a[::-1]), np.digitize(v, a[::-1], right=True),
                                                                  np.digitize(a, [0.0, 0.0]), np.digitize(a, [0.0, 0.0], right=True),
                                                                  np.digitize(v, [1.0, 0.0, 0.0, -1.0])),
      F("any", 3, 4), F("sorted", 4), grad=False, note="decreasing bins (traced and constant); equal bins"),
    C("top_k", "tk.numpy.top_k", lambda x: tnp.top_k(x, 2), F("distinct", 3, 4),
      ref=lambda x: (-np.sort(-x, axis=-1)[:, :2], np.argsort(-x, axis=-1, kind="stable")[:, :2])),
])

LINALG = _rows("linalg", [
    C("solve", "np.linalg.solve", lambda a, b: (np.linalg.solve(a, b), np.linalg.solve(a, b[:, 0]), np.linalg.solve(a[None], b[None])),
      F("well", 3, 3), F("any", 3, 2), cuda=False, tol32=1e-4),
    C("inv_det", "np.linalg.inv np.linalg.det np.linalg.slogdet", lambda a: (np.linalg.inv(a), np.linalg.det(a),
                                                                            *np.linalg.slogdet(a), np.linalg.det(a[None])),
      F("well", 3, 3), cuda=False, tol32=1e-4),
    C("slogdet_result", "np.linalg.slogdet", lambda a: np.linalg.slogdet(a), F("well", 2, 3, 3), cuda=False, tol32=1e-4,
      note="NumPy's SlogdetResult, batched"),
    C("cholesky", "np.linalg.cholesky", lambda a: (np.linalg.cholesky(a), np.linalg.cholesky(a, upper=True)), F("spd", 3, 3),
      cuda=False, tol32=1e-4),
    C("qr", "np.linalg.qr", lambda a, w: (*np.linalg.qr(a), *np.linalg.qr(w), np.linalg.qr(a, mode="r"), *np.linalg.qr(w, "complete")),
      F("ranked", 4, 3), F("ranked", 2, 4), cuda=False, tol32=1e-4, note="tall and wide; NumPy's signs"),
    C("eigh", "np.linalg.eigh np.linalg.eigvalsh", lambda a: (*np.linalg.eigh(a), *np.linalg.eigh(a, UPLO="U"), np.linalg.eigvalsh(a),
                                                              np.linalg.eigvalsh(a, "U")),
      F("sym", 2, 3, 3), cuda=False, tol32=1e-4, note="NumPy's signs, batched"),
    C("eigh_triangle", "np.linalg.eigh np.linalg.eigvalsh", lambda a: (*np.linalg.eigh(a), *np.linalg.eigh(a, UPLO="U"),
                                                                       np.linalg.eigvalsh(a, UPLO="U")),
      F("any", 4, 4), cuda=False, tol32=1e-4, note="reads the lower triangle, or the upper (UPLO='U')"),
    C("svd", "np.linalg.svd np.linalg.svdvals", lambda a, w: (*np.linalg.svd(a, full_matrices=False), *np.linalg.svd(w, False),
                                                              np.linalg.svd(a, compute_uv=False), np.linalg.svdvals(w)),
      F("ranked", 2, 4, 3), F("ranked", 2, 4), cuda=False, tol32=1e-4, note="tall and wide; NumPy's signs"),
    C("svd_hermitian", "np.linalg.svd np.linalg.pinv np.linalg.eigh",
      lambda a: (*np.linalg.svd(a, hermitian=True), np.linalg.svd(a, compute_uv=False, hermitian=True),
                 np.linalg.pinv(a, hermitian=True), *np.linalg.eigh(a, UPLO="u")),
      F("sym", 2, 4, 4), cuda=False, tol32=1e-4, note="hermitian=True: eigh's signs, the lower triangle read; UPLO='u'"),
    C("norm", "np.linalg.norm np.linalg.vector_norm np.linalg.matrix_norm",
      lambda a, v: (np.linalg.norm(v), np.linalg.norm(v, 1), np.linalg.norm(v, np.inf), np.linalg.norm(v, 3), np.linalg.norm(a),
                    np.linalg.norm(a, "fro"), np.linalg.norm(a, 1), np.linalg.norm(a, -np.inf), np.linalg.norm(a, axis=1),
                    np.linalg.vector_norm(a, ord=1), np.linalg.matrix_norm(a[None], keepdims=True)),
      F("nz", 3, 4), F("nz", 4)),
    C("pinv_empty", "np.linalg.pinv", lambda a: (np.linalg.pinv(a[:, :0]), np.linalg.pinv(a[:0]), np.linalg.pinv(a[None, :0, :0])),
      F("any", 3, 2), grad=False, cuda=False, note="empty matrices (the largest singular value of none is 0, as NumPy's)"),
    C("norm_edges", "np.linalg.norm np.linalg.vector_norm np.linalg.matrix_norm",
      lambda v, a: (np.linalg.norm(v, 0), np.linalg.vector_norm(v, ord=0), np.linalg.norm(a, "f"), np.linalg.norm(a, "f", axis=(1, 0)),
                    np.linalg.norm(a[:0], 1), np.linalg.norm(a[:0], np.inf), np.linalg.norm(a[:0, 0], np.inf),
                    np.linalg.matrix_norm(a[:0], ord=1), np.linalg.vector_norm(a[:0], ord=np.inf, axis=0)),
      G([np.nan, 1.0, 0.0, -0.0, 2.0]), F("any", 3, 2), grad=False,
      note="ord=0 counts NaN; ord='f'; the largest of an empty set is 0"),
    C("norm_zero", "np.linalg.norm np.linalg.vector_norm np.linalg.matrix_norm",
      lambda v: (np.linalg.norm(v * 0), np.linalg.vector_norm(v * 0, ord=3), np.linalg.matrix_norm(v[:, None] * 0 * np.ones(2))),
      F("any", 4), note="zero vector (gradient 0)"),
    C("norm_spectral", "np.linalg.norm np.linalg.cond np.linalg.matrix_rank", lambda a: (
        np.linalg.norm(a, 2), np.linalg.norm(a, "nuc"), np.linalg.norm(a, -2), np.linalg.cond(a), np.linalg.cond(a[:3], "fro")),
      F("ranked", 4, 3), cuda=False, tol32=1e-4),
    C("cond_singular", "np.linalg.cond", lambda a: (np.linalg.cond(a, 1), np.linalg.cond(a, -np.inf), np.linalg.cond(a, "fro"),
                                                    np.linalg.cond(a * 0), np.linalg.cond(a[:2, :2] * 0, 1)),
      G([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]]), cuda=False, grad=False,
      note="a singular matrix's condition number is inf, as NumPy's (it raised LinAlgError)"),
    C("rank_cutoffs", "np.linalg.matrix_rank np.linalg.pinv",
      lambda a: (np.linalg.matrix_rank(a, rtol=np.array([0.1, 0.9])), np.linalg.matrix_rank(a, tol=np.array([0.1, 10.0])),
                 np.linalg.pinv(a, rcond=np.array([0.1, 0.9]))),
      F("ranked", 2, 3, 3), cuda=False, tol32=1e-4, note="a cutoff per matrix of a stack"),
    C("matrix_rank", "np.linalg.matrix_rank", lambda a: (np.linalg.matrix_rank(a), np.linalg.matrix_rank(a[:, :1] * np.ones(3))),
      F("ranked", 4, 3), cuda=False, grad=False),
    C("pinv_power", "np.linalg.pinv np.linalg.matrix_power", lambda a, s: (np.linalg.pinv(a), np.linalg.matrix_power(s, 3),
                                                                          np.linalg.matrix_power(s, 0), np.linalg.matrix_power(s, -2)),
      F("ranked", 4, 3), F("well", 3, 3), cuda=False, tol32=1e-4),
    C("array_api", "np.linalg.outer np.linalg.cross np.linalg.vecdot np.linalg.tensordot np.linalg.diagonal np.linalg.trace "
                   "np.linalg.matmul np.linalg.matrix_transpose",
      lambda a, b: (np.linalg.outer(a[0], b[0]), np.linalg.cross(a, b), np.linalg.vecdot(a, b), np.linalg.tensordot(a, b.T, axes=1),
                    np.linalg.diagonal(a[:, :2]), np.linalg.trace(a[:, :2]), np.linalg.matmul(a, b.T), np.linalg.matrix_transpose(a)),
      F("any", 2, 3), F("any", 2, 3)),
])

CREATION = _rows("creation", [
    C("constants", "np.zeros np.ones np.full np.empty np.eye np.identity np.tri np.arange",
      lambda x: (x + np.zeros(3), x * np.ones((2, 3)), x + np.full((3,), 2.5), x * np.eye(3)[0], x - np.identity(3)[1],
                 x * np.tri(3)[2], x * np.arange(3.0), x + np.empty((0, 3)).sum(0)), F("any", 3)),
    C("like", "np.zeros_like np.ones_like np.full_like np.empty_like", lambda x: (np.zeros_like(x) + x, np.ones_like(x) * x,
                                                                              np.full_like(x, 2.5) * x, x + np.empty_like(x)[:0].sum(),
                                                                              np.full_like(x, x[0, 0]),
                                                                              np.full_like(x, [1.0, 2.0, 3.0, 4.0]) * x),
      F("any", 3, 4), note="an array fill value broadcasts"),
    C("ranges", "np.linspace np.logspace np.geomspace", lambda a, b: (np.linspace(a, b, 5), np.linspace(a, b, 4, endpoint=False),
                                                                      np.linspace(0.0, b, 3), np.logspace(a, b, 4),
                                                                      np.geomspace(np.abs(a) + 1, np.abs(b) + 2, 4),
                                                                      np.linspace(a * np.ones(2), b, 3, axis=1)),
      F("any"), F("any"), note="traced start and stop"),
    C("one_point", "np.linspace", lambda a, b: (np.linspace(a, b, 1, retstep=True), np.linspace(a, b, 0, retstep=True),
                                                np.linspace(a, b, 1, endpoint=False, retstep=True)),
      F("any"), F("any"), grad=False, note="the step of 0 or 1 points is NumPy's Python float nan"),
    C("indices", "np.indices", lambda x: x * np.indices((3, 4))[1], F("any", 3, 4)),
])

def _eig_ref(a):
    """NumPy's eig as tracekern gives it: complex always (NumPy's is real when every eigenvalue is)."""
    c = np.result_type(a.dtype, np.complex64)
    w, v = np.linalg.eig(a)
    return w.astype(c), np.abs(v.astype(c)) ** 2, np.linalg.eigvals(a).astype(c)


C128 = ("complex128", "complex64")

COMPLEX = _rows("complex", [
    C("c_arith", "np.add np.subtract np.multiply np.divide np.negative np.power np.square np.reciprocal x+y x-y x*y x/y x**y",
      lambda z, w: (z + w, z - w, z * w, z / w, -z, z ** 2, z ** 3, w ** z, np.square(z), np.reciprocal(w), 2j * z + 1.5,
                    np.power(w, 0.5), np.add(z, 1), np.multiply(z, w[0]), np.divide(z, 2), np.negative(z), np.subtract(w, z)),
      F("c:any", 3, 4), F("c:nz", 4), dtypes=C128),
    C("c_dtype_queries", "np.iscomplexobj np.isrealobj np.iscomplex np.isreal np.result_type np.can_cast",
      lambda z, x: (z.real if np.iscomplexobj(z) else z, x * 2 if np.isrealobj(x) else x, np.iscomplex(z * (z.real > 0)),
                    np.isreal(z * (z.real > 0)), np.iscomplex(x), np.isreal(x), z.astype(np.result_type(z, x, 1.0)),
                    x + 1 if np.can_cast(x, z.dtype) and not np.can_cast(z, x.dtype) else x),
      F("c:any", 3, 4), F("any", 4), dtypes=C128, note="dtype queries answered while tracing (Python bools, dtypes)"),
    C("c_divide_zero", "np.divide np.reciprocal np.power x/y", lambda z: (z / (z * 0), 1 / (z * 0), (z * 0) ** -2,
                                                                            np.reciprocal(z * 0), z / (z.real * 0), z / z[0]),
      F("c:any", 3, 4), grad=False, dtypes=C128, note="a zero divisor: inf and NaN parts, as NumPy's"),
    C("c_exp_log", "np.exp np.log np.log1p np.expm1 np.sqrt np.log2 np.log10 np.exp2",
      lambda z: (np.exp(z), np.log(z), np.log1p(z), np.expm1(z), np.sqrt(z), np.log2(z), np.log10(z), np.exp2(z)),
      F("c:nz", 3, 4), dtypes=C128),
    C("c_trig", "np.sin np.cos np.tan np.arcsin np.arccos np.arctan np.sinh np.cosh np.tanh np.arcsinh np.arccosh np.arctanh",
      lambda z: (np.sin(z), np.cos(z), np.tan(z), np.arcsin(z), np.arccos(z), np.arctan(z), np.sinh(z), np.cosh(z),
                 np.tanh(z), np.arcsinh(z), np.arccosh(z), np.arctanh(z)), F("c:ball", 3, 4), dtypes=C128,
      note="away from the branch cuts"),
    C("c_parts", "np.real np.imag np.conj np.conjugate np.angle np.abs np.absolute np.sign x.real x.imag x.conj() abs()",
      lambda z: (np.real(z), np.imag(z), np.conj(z), np.conjugate(z), np.angle(z), np.angle(z, deg=True), np.abs(z),
                 np.absolute(z), np.sign(z), z.real, z.imag, z.conj(), abs(z), np.abs(z) ** 2),
      F("c:nz", 3, 4), dtypes=C128, note="|z| and angle are real"),
    C("c_build", "np.multiply np.add np.exp np.astype", lambda x, y: (x + 1j * y, (x * 1j) ** 2, np.exp(1j * x) * y,
                                                                      np.astype(x, np.complex128) * y),
      F("any", 3, 4), F("any", 4), note="real inputs, complex results"),
    C("c_reduce", "np.sum np.mean np.prod np.cumsum np.cumprod np.var np.std np.trace np.vdot np.dot np.matmul np.einsum x@y",
      lambda z, w: (np.sum(z, axis=0), np.mean(z), np.prod(z, axis=1), np.cumsum(z, axis=1), np.cumprod(z, axis=0), np.var(z),
                    np.std(z, axis=1), np.trace(z[:, :3]), np.vdot(z[:2], w), np.dot(z[0], w[0]), z @ w.T, np.matmul(z, w[0]),
                    np.einsum("ij,kj->ik", z, w)), F("c:nz", 3, 4), F("c:any", 2, 4), dtypes=C128,
      note="var and std are real"),
    C("c_conjugating", "np.vecdot np.vecmat np.matvec np.linalg.vecdot np.linalg.norm np.cov np.correlate",
      lambda z, v: (np.vecdot(z, v), np.vecmat(v[:3], z), np.matvec(z, v), np.linalg.vecdot(z, v), np.linalg.norm(z),
                    np.linalg.norm(z, axis=1), np.linalg.norm(v, 1), np.linalg.norm(z, "fro"), np.cov(z), np.correlate(v, v[:2], "full")),
      F("c:any", 3, 4), F("c:nz", 4), dtypes=C128, note="the functions that conjugate, and norms (real)"),
    C("c_shapes", "np.concatenate np.where np.flip np.roll x[...] x.T x.reshape() tk.at(x)[i].add",
      lambda z, w: (z.T, z.reshape(-1), np.concatenate([z, w]), z[1:, ::2], z[np.array([2, 0])], np.where(z.real > 0, z, w[0]),
                    np.flip(z), np.roll(z, 1), tk.at(z)[IDX[:2]].add(w[0])), F("c:any", 3, 4), F("c:any", 2, 4), dtypes=C128,
      ref=lambda z, w: (z.T, z.reshape(-1), np.concatenate([z, w]), z[1:, ::2], z[np.array([2, 0])], np.where(z.real > 0, z, w[0]),
                        np.flip(z), np.roll(z, 1), _at_add(z, IDX[:2], w[0]))),
    C("c_interp_sinc_corrcoef", "np.interp np.sinc np.corrcoef",
      lambda fp, z: (np.interp(np.array([-2.0, -0.7, 0.1, 0.5, 1.2, 3.0]), np.array([-1.0, 0.0, 0.5, 2.0]), fp),
                     np.interp(np.array([-2.0, 0.3, 3.0]), np.array([-1.0, 0.0, 0.5, 2.0]), fp, left=1j, right=-2.0),
                     np.sinc(z), np.sinc(z * 0), np.corrcoef(z), np.corrcoef(z[0], fp[:3])),
      F("c:any", 4), F("c:any", 2, 3), dtypes=C128, note="complex samples: each part; NumPy's clip of each part"),
    C("c_compare", "np.equal np.not_equal np.isnan np.isfinite np.isinf x==y x!=y",
      lambda z: (z == z[0], z != z[:, :1], np.equal(z, z), np.isnan(z), np.isfinite(z), np.isinf(z / np.abs(z.real))),
      F("c:any", 3, 4), dtypes=C128, grad=False),
    C("c_linalg", "np.linalg.solve np.linalg.inv np.linalg.eig np.linalg.eigvals",
      lambda a, b: (np.linalg.solve(a, b), np.linalg.inv(a), np.linalg.eig(a).eigenvalues, np.abs(np.linalg.eig(a).eigenvectors) ** 2,
                    np.linalg.eigvals(a)), F("c:well", 3, 3), F("c:any", 3, 2), dtypes=C128, cuda=False, tol32=1e-4,
      note="eigenvectors up to phase (a loss of |v|)"),
    C("eig_real", "np.linalg.eig np.linalg.eigvals", lambda a: (np.linalg.eig(a).eigenvalues, np.abs(np.linalg.eig(a).eigenvectors) ** 2,
                                                               np.linalg.eigvals(a)), F("any", 3, 3), ref=_eig_ref, cuda=False,
      tol32=1e-4, note="a real matrix's eigenvalues are complex128 always (NumPy's dtype depends on the values)"),
])

FFT = _rows("fft", [
    C("fft_c2c", "np.fft.fft np.fft.ifft np.fft.fft2 np.fft.ifft2 np.fft.fftn np.fft.ifftn",
      lambda z: (np.fft.fft(z), np.fft.ifft(z), np.fft.fft(z, n=6, axis=0), np.fft.ifft(z, n=3, norm="ortho"), np.fft.fft2(z),
                 np.fft.ifft2(z, s=(2, 5), norm="forward"), np.fft.fftn(z, axes=(0, 1)), np.fft.ifftn(z[None], axes=(2, 0))),
      F("c:any", 3, 4), dtypes=C128, cuda=False, note="n= and s= crop and pad; every norm="),
    C("fft_real", "np.fft.fft np.fft.rfft np.fft.irfft np.fft.rfft2 np.fft.irfft2 np.fft.rfftn np.fft.irfftn",
      lambda x, z: (np.fft.fft(x), np.fft.rfft(x), np.fft.rfft(x, n=7, axis=0, norm="ortho"), np.fft.irfft(z), np.fft.irfft(z, n=7),
                    np.fft.irfft(z, axis=0, norm="forward"), np.fft.rfft2(x), np.fft.irfft2(z), np.fft.rfftn(x, axes=(1, 0)),
                    np.fft.irfftn(z, s=(3, 5), axes=(0, 1))),
      F("any", 3, 4), F("c:any", 3, 3), cuda=False, note="float32 gives complex64; odd and even lengths"),
    C("fft_repeated_axes", "np.fft.fftn np.fft.ifftn np.fft.rfftn np.fft.irfftn np.fft.fft2",
      lambda x, z: (np.fft.fftn(z, s=(2, 4), axes=(0, 0)), np.fft.ifftn(z, axes=(1, -1), norm="ortho"), np.fft.rfftn(x, axes=(1, 1)),
                    np.fft.rfftn(x, s=(5, 3), axes=(0, 0)), np.fft.irfftn(z, axes=(0, 0)),
                    np.fft.irfftn(z, s=(4, 4), axes=(1, 1), norm="forward"), np.fft.fft2(z, s=(-1, 6))),
      F("any", 3, 4), F("c:any", 3, 3), cuda=False,
      note="a repeated axis transforms again, as NumPy's loop of 1-D transforms; s=-1 keeps an axis's length"),
    C("fft_hermitian", "np.fft.hfft np.fft.ihfft",
      lambda x, z: (np.fft.hfft(z), np.fft.hfft(z, n=5, axis=0, norm="ortho"), np.fft.hfft(z[0], 7, norm="forward"),
                    np.fft.ihfft(x), np.fft.ihfft(x, n=5, axis=0), np.fft.ihfft(x[1], norm="forward")),
      F("any", 3, 4), F("c:any", 3, 3), cuda=False, note="the opposite normalization of irfft and rfft"),
    C("fft_helpers", "np.fft.fftfreq np.fft.rfftfreq np.fft.fftshift np.fft.ifftshift",
      lambda x, d: (x * np.fft.fftfreq(4), x[0, :3] * np.fft.rfftfreq(5, 0.5), np.fft.fftfreq(4, d), np.fft.rfftfreq(5, d),
                    np.fft.fftshift(x), np.fft.ifftshift(x, axes=1), np.fft.fftshift(x[0])),
      F("any", 3, 4), F("pos"), cuda=False, note="a traced sample spacing"),
])

SPECIAL = _rows("special", [
    C("sp_gamma", "scipy.special.gammaln scipy.special.psi scipy.special.digamma tk.scipy.special.polygamma "
                  "scipy.special.betaln tk.scipy.special.multigammaln",
      lambda x, n: (sp.gammaln(x), sp.psi(x), sp.digamma(-0.45 * x), tk.scipy.special.polygamma(n, x), sp.betaln(x, x[0] + 1),
                    tk.scipy.special.multigammaln(x + 2, 3), sp.gammaln(-0.45 * x)),
      F("pos", 3, 4), G([1.0, 2.0, 3.0, 0.0]),
      ref=lambda x, n: (sp.gammaln(x), sp.psi(x), sp.digamma(-0.45 * x), sp.polygamma(n, x).astype(x.dtype), sp.betaln(x, x[0] + 1),
                        sp.multigammaln(x + 2, 3), sp.gammaln(-0.45 * x)),
      note="negative arguments"),
    C("sp_erf", "scipy.special.erf scipy.special.erfc scipy.special.erfinv scipy.special.ndtr scipy.special.log_ndtr "
                "scipy.special.expit scipy.special.logit",
      lambda u, p: (sp.erf(u * 3), sp.erfc(u * 3), sp.erfinv(u), sp.ndtr(u * 4), sp.log_ndtr(u * 30), sp.expit(u * 20), sp.logit(p)),
      F("ball", 3, 4), F("prob", 4), note="the tails: log_ndtr to -27, erfinv near 1"),
    C("sp_bessel", "scipy.special.i0 scipy.special.i0e scipy.special.i1 scipy.special.i1e np.i0",
      lambda x: (sp.i0(x * 8), sp.i0e(x * 30), sp.i1(x * 8), sp.i1e(x * 30), np.i0(x)), F("nz", 3, 4),
      note="both sides of |x| = 20"),
    C("sp_xlogy", "scipy.special.xlogy scipy.special.xlog1py", lambda x, y: (sp.xlogy(x, y), sp.xlog1py(x, y - 0.5)),
      G([0.0, 1.5, -2.0, 0.0]), F("pos", 3, 4), note="x = 0"),
    C("sp_logsumexp", "tk.scipy.special.logsumexp tk.scipy.special.softmax tk.scipy.special.log_softmax",
      lambda x, b: (tk.scipy.special.logsumexp(x), tk.scipy.special.logsumexp(x, axis=1, keepdims=True),
                    tk.scipy.special.logsumexp(x, axis=0, b=b, return_sign=True), tk.scipy.special.logsumexp(x * 100, b=b[0]),
                    tk.scipy.special.softmax(x), tk.scipy.special.softmax(x, axis=0), tk.scipy.special.log_softmax(x, axis=1),
                    tk.scipy.special.log_softmax(x)),
      F("any", 3, 4), F("nz", 3, 4),
      ref=lambda x, b: (sp.logsumexp(x), sp.logsumexp(x, axis=1, keepdims=True), sp.logsumexp(x, axis=0, b=b, return_sign=True),
                        sp.logsumexp(x * 100, b=b[0]), sp.softmax(x), sp.softmax(x, axis=0), sp.log_softmax(x, axis=1),
                        sp.log_softmax(x)),
      note="b= with negative weights, return_sign=, keepdims="),
    C("sp_python_numbers", "scipy.special.xlogy scipy.special.xlog1py scipy.special.betaln tk.scipy.special.logsumexp",
      lambda x: (sp.xlogy(2, x), sp.xlog1py(x, 1.5), sp.betaln(x, 3), tk.scipy.special.logsumexp(x, b=2)),
      F("pos", 3, 4), ref=lambda x: (sp.xlogy(2, x), sp.xlog1py(x, 1.5), sp.betaln(x, 3), sp.logsumexp(x, b=2)),
      grad=False, note="a Python number: the installed SciPy's dtype (float64 to 1.17's ufuncs, weak to 1.18's), logsumexp's b= is weak"),
    C("sp_logsumexp_empty", "tk.scipy.special.logsumexp",
      lambda x: (tk.scipy.special.logsumexp(x[:, :0], axis=1, return_sign=True), tk.scipy.special.logsumexp(x[0, :0])),
      F("any", 3, 4), ref=lambda x: (sp.logsumexp(x[:, :0], axis=1, return_sign=True), sp.logsumexp(x[0, :0])),
      grad=False, note="an empty sum is -inf"),
    C("sp_edges", "scipy.special.gammaln scipy.special.psi scipy.special.erfinv scipy.special.log_ndtr scipy.special.xlogy "
                  "scipy.special.i0 scipy.special.i1e",
      lambda x: (sp.gammaln(x), sp.psi(x), sp.erfinv(x / 3), sp.log_ndtr(x), sp.xlogy(x, x), sp.i0(x), sp.i1e(x)),
      G([0.0, -0.0, -1.0, 3.0, np.inf, -np.inf, np.nan, -3.0, 1e-300, 750.0]), grad=False,
      note="±0, poles, ±inf, NaN, overflow"),
])

FAMILIES = {"elementwise": ELEMENTWISE, "integer": INTEGER, "reductions": REDUCTIONS, "scans": SCANS, "shapes": SHAPES,
            "indexing": INDEXING, "contractions": CONTRACTIONS, "sorting": SORTING, "linalg": LINALG,
            "creation": CREATION, "complex": COMPLEX, "fft": FFT, "special": SPECIAL}
CASES = [c for cases in FAMILIES.values() for c in cases]
assert len({c.id for c in CASES}) == len(CASES), "case ids must be unique"

# NumPy 2's aliases: the same functions under array-API names (each traced by its own row in test_numpy.py)
ALIASES = {"np.acos": "np.arccos", "np.asin": "np.arcsin", "np.atan": "np.arctan", "np.atan2": "np.arctan2",
           "np.acosh": "np.arccosh", "np.asinh": "np.arcsinh", "np.atanh": "np.arctanh", "np.pow": "np.power",
           "np.bitwise_invert": "np.invert", "np.bitwise_left_shift": "np.left_shift",
           "np.bitwise_right_shift": "np.right_shift", "np.amax": "np.max", "np.amin": "np.min", "np.around": "np.round",
           "np.true_divide": "np.divide", "np.mod": "np.remainder", "np.concat": "np.concatenate",
           "np.permute_dims": "np.transpose", "np.row_stack": "np.vstack", "np.conjugate": "np.conj",
           "np.degrees": "np.rad2deg", "np.radians": "np.deg2rad", "np.abs": "np.absolute", "np.fix": "np.trunc",
           "np.bitwise_not": "np.invert"}


# ----------------------------------------------------------------------------- the README section

_TITLES = {"elementwise": "Elementwise (float)", "integer": "Integers and bools", "reductions": "Reductions and statistics",
           "scans": "Scans, differences, convolution, interpolation", "shapes": "Shape manipulation",
           "indexing": "Indexing, gathers and functional updates (scatter)", "contractions": "Contractions",
           "sorting": "Sorting and searching", "linalg": "Linear algebra (`np.linalg`)",
           "creation": "Creation inside traces", "complex": "Complex numbers (`complex64`, `complex128`)",
           "fft": "Fourier transforms (`np.fft`)", "special": "Special functions (`scipy.special`)"}


def numpy_names(cases=CASES) -> list[str]:
    """Every np.* (and np.linalg.*) name the table covers."""
    return sorted({n for c in cases for n in c.names if n.startswith("np.")})


def scipy_names(cases=CASES) -> list[str]:
    """Every scipy.special (and tk.scipy.special) name the table covers."""
    return sorted({n.removeprefix("tk.") for c in cases for n in c.names if n.startswith(("scipy.", "tk.scipy."))})


def family_names(family: str) -> tuple[list[str], set[str]]:
    cases = FAMILIES[family]
    names = sorted({n for c in cases for n in c.names})
    grad = {n for c in cases if c.grad for n in c.names}
    return names, grad


def readme_section() -> str:
    names = numpy_names()
    primary = [n for n in names if n not in ALIASES]
    lines = [
        "### What can be traced",
        "",
        f"**{len(names)} NumPy names** ({len(primary)} functions, and {len(names) - len(primary)} of NumPy's other names "
        f"for them, such as `np.abs` or `np.concat`), and {len(scipy_names())} of `scipy.special`'s, plus the operators "
        "and `ndarray` methods below, are traced and differentiated on every backend (but the `np.linalg` "
        "factorizations on `cuda`, and `np.fft` on the CUDA simulator, listed below). "
        "This section is generated from the test table `tests/numpy_cases.py` "
        "(`python -m tests.numpy_cases` rewrites it): each row there is checked on `interpret`, `cpu` and `cuda` "
        "(the simulator in CI) in float32 and float64 (int32/int64 or bool for integer functions, complex64 and "
        "complex128 for complex ones), its gradient against central finite differences of NumPy's (or SciPy's) own "
        "function (of the real and imaginary parts for complex inputs), and the compiled gradients against the "
        "interpreter's. "
        f"The table has {len(CASES)} rows; a name is in **bold** where its gradient is checked (the others are not "
        "differentiable, or their gradient is zero).",
        "",
        "| family | names | edge cases tested |",
        "|---|---|---|",
    ]
    for family in FAMILIES:
        fam_names, grad = family_names(family)
        shown = ", ".join(f"**`{n}`**" if n in grad else f"`{n}`" for n in fam_names)
        notes = sorted({c.note for c in FAMILIES[family] if c.note})
        lines.append(f"| {_TITLES[family]} | {shown} | {'; '.join(notes)} |")
    on_cuda = {n for c in CASES if c.cuda for n in c.names}
    no_cuda = sorted({n for c in CASES if not c.cuda for n in c.names} - on_cuda)
    partly = sorted({n for c in CASES if not c.cuda for n in c.names} & on_cuda)
    on_cufft = [n for n in no_cuda if n.startswith("np.fft.")]
    no_kernel = [n for n in no_cuda if n not in on_cufft]
    lines += [
        "",
        f"On the `cuda` backend, {', '.join(f'`{n}`' for n in no_kernel)} have no kernel (nor "
        f"{', '.join(f'`{n}`' for n in partly)} for the orders that need an SVD: 2, -2, 'nuc'): compiling them for "
        "`cuda` raises an error naming the function and the backends that run it (`cpu`, `interpret`), never a "
        f"silent copy to the host. {', '.join(f'`{n}`' for n in on_cufft)} run on cuFFT (nvmath-python) on a GPU; "
        "Numba's CUDA simulator cannot run cuFFT, so there they raise the same kind of error, and "
        "`tests/test_fft.py` checks the cuda backend's cuFFT calls against a stand-in that computes each plan's "
        "layout with NumPy.",
        "",
    ]
    return "\n".join(lines)


README = Path(__file__).resolve().parents[1] / "README.md"
_SECTION = re.compile(r"### What can be traced\n.*?(?=\n\*\*Beyond the table)", re.S)


def write_readme() -> bool:
    text = README.read_text()
    new = _SECTION.sub(lambda m: readme_section().rstrip("\n") + "\n", text, count=1)
    changed = new != text
    README.write_text(new)
    return changed


if __name__ == "__main__":
    print("README.md updated" if write_readme() else "README.md already current", file=sys.stderr)
