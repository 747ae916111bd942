"""Scalar functions the CPU renderer's generated code calls, one per math name and dtype.

Transcendentals are written in plain arithmetic (range reduction, then a polynomial) so that LLVM
vectorises the fused loops that call them; Numba's math.* would be scalar libm calls. Reductions add
with a `reassoc` flag (intrinsics below) so their loops vectorise too. Accuracy: see tests/test_cpu_math.py."""
from __future__ import annotations

import cmath  # noqa: F401  (generated modules may call cmath.*)
import math

import numpy as np
from numba import njit, types
from numba.extending import intrinsic, overload
from numba.np import linalg as numba_linalg
from numba.np.numpy_support import from_dtype

from ..primitives import random as random_primitives
from ..primitives.linalg import eig_numpy  # noqa: F401  (eig's kernel calls it in object mode)
from ..schedule import actions as schedule_actions  # noqa: F401  (for while loops' schedules, in objmode)
from ..schedule import slots as schedule_slots  # noqa: F401
from . import scalar_rules
from .render import CASTS  # noqa: F401
from .vmath import (  # noqa: F401  (re-exported to generated modules)
    INLINE,
    TRIG_LIMIT,
    _named,
    cos_exact_f32,
    cos_exact_f64,
    cos_f32,
    cos_f64,
    exp_f32,
    exp_f64,
    expm1_f32,
    expm1_f64,
    jit_named,
    log1p_f32,
    log1p_f64,
    log_f32,
    log_f64,
    pow_f32,
    pow_f64,
    sin_exact_f32,
    sin_exact_f64,
    sin_f32,
    sin_f64,
    tan_exact_f32,
    tan_exact_f64,
    tan_f32,
    tan_f64,
    tanh_f32,
    tanh_f64,
)

# (casts are named so that they cannot clash with generated names: buffers are b<id>, scalars s<id>)
f32, f64, i32, i64, boolean, U = np.float32, np.float64, np.int32, np.int64, np.bool_, np.uintp
c64, c128 = np.complex64, np.complex128
ACCUMULATOR = {"float32": "float64", "float64": "float64", "int32": "int64", "int64": "int64", "bool": "int64",
               "complex64": "complex128", "complex128": "complex128"}


def functions(dtype: np.dtype, exact: bool = False) -> dict[str, str]:
    """The names that Elementwise.scalar and Reduce.combine templates refer to, for one dtype;
    exact=True gives libm's sin/cos/tan (for arguments beyond vmath.TRIG_LIMIT)."""
    name = np.dtype(dtype).name
    if name in ("complex64", "complex128"):
        sfx = CASTS[name]
        return {**{f: f"{f}_{sfx}" for f in COMPLEX_FUNCTIONS}, "radd": "cadd", "rmul": "cmul", "div": f"div_{sfx}"}
    if name in ("float32", "float64"):
        sfx = "f32" if name == "float32" else "f64"
        fns = {f: f"{f}_{sfx}" for f in ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "pow")}
        if exact:
            fns.update({f: f"{f}_exact_{sfx}" for f in ("sin", "cos", "tan")})
        fns.update({f: f"{f}_{sfx}" for f in ("floor", "ceil", "rint")})
        fns.update({f: f"{f}_{sfx}" for f in LIBM})
        fns.update(sqrt=f"sqrt_{sfx}", abs="abs", sign=f"sign_{sfx}",
                   maximum="maximum_f", minimum="minimum_f", radd="radd", rmul="rmul", div="rdiv")
        fns.update({f: f"{f}_{sfx}" for f in FLOAT_FUNCTIONS})   # (issue 19)
        fns.update(to_int32=f"to_int32_{sfx}", to_int64=f"to_int64_{sfx}")
        return fns
    return {"pow": "pow_i", "abs": "abs", "sign": "sign_i", "maximum": "maximum_i", "minimum": "minimum_i",
            "radd": "radd", "rmul": "rmul", "random_bits": "random_bits", **integer_functions(name)}


def _reassoc(op: str):
    @intrinsic
    def fn(typingctx, a, b):
        if a != b:
            return None

        def codegen(context, builder, signature, args):
            if isinstance(a, types.Float):
                return getattr(builder, "f" + op)(args[0], args[1], flags=("reassoc",))
            return getattr(builder, op)(args[0], args[1])

        return a(a, b), codegen

    return fn


radd = _reassoc("add")  # a + b that LLVM may reorder: reductions vectorise
rmul = _reassoc("mul")


@intrinsic
def wide_vectors(typingctx):
    """Called in a function, lets LLVM vectorise its loops with the machine's widest vectors (512 bits with
    AVX-512) where it would prefer 256 (LLVM's default for such CPUs: wide vectors lower some chips' clock).
    For loops bound by the latency of vmath's polynomials, twice the lanes is twice the throughput (W1 of
    issue 26: 43 -> 25 ns per element on one core); on a machine without AVX-512 it changes nothing."""
    def codegen(context, builder, signature, args):
        # (llvmlite accepts only the attributes it knows by name; this one is a string attribute)
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return types.none(), codegen


def _empty(T):
    @jit_named(f"empty_{CASTS[np.dtype(T).name]}")
    def empty(shape):
        return np.empty(shape, T)

    return empty


empty_f32, empty_f64, empty_i32, empty_i64, empty_boolean, empty_c64, empty_c128 = (
    _empty(T) for T in (f32, f64, i32, i64, boolean, c64, c128))


def blas_operand(a):
    """a, or a C-ordered copy of it where it is neither C- nor F-contiguous (a strided view): BLAS
    reads whole rows or columns, and Numba's np.dot would copy such an operand too, with a
    NumbaPerformanceWarning about generated code that a user cannot act on."""
    return np.ascontiguousarray(a)


@overload(blas_operand)
def _blas_operand(a):
    if isinstance(a, types.Array) and a.layout in "CF":
        return lambda a: a
    return lambda a: np.ascontiguousarray(a)


@njit(**INLINE)
def gemm(a, b, c):
    """c = a @ b for 2-D float or complex operands, by BLAS (Numba's np.dot with an output). A matmul
    kernel calls this: compiled once per machine, dtype and layouts, and loaded from Numba's cache
    after, where np.dot written in the kernel was typed and lowered again in every kernel's compile
    (Numba's np.dot implementation: 0.15 to 0.25 s of a matmul kernel's 0.2 to 0.3 s of CPU)."""
    np.dot(blas_operand(a), blas_operand(b), c)


# What a loop compiled whole does with its arrays besides running kernels (cpu_loops.py, _LoopFunction).
# NumPy's versions of these (x.copy(), x[...] = y, a slice's reshape) are overloads that Numba
# compiles again in every process (x[...] = y alone took seconds: its broadcasting setitem); these
# are compiled once per machine and signature, and LLVM inlines them into the loop.
@njit(**INLINE)
def fresh_copy(x):
    """A new C-contiguous array holding x."""
    return x.copy()


@njit(**INLINE)
def assign(dst, src):
    """dst[...] = src for arrays of one shape, dst C-contiguous (a buffer, or a row of one)."""
    d = dst.reshape(dst.size)
    s = src.ravel()
    for i in range(d.size):
        d[i] = s[i]


def _copy_into(dst, src):
    """dst[...] = src (put's body, chosen by the arrays' layouts when put is compiled)."""


@overload(_copy_into)
def _copy_into_layouts(dst, src):
    if dst.layout == "C" and src.layout == "C":
        def flat(dst, src):
            d = dst.reshape(dst.size)
            s = src.reshape(src.size)
            for i in range(d.size):
                d[i] = s[i]
        return flat

    if dst.ndim == 1:
        def rows(dst, src):
            for i in range(dst.shape[0]):
                dst[i] = src[i]
        return rows
    if dst.ndim == 2:
        def matrix(dst, src):
            for i in range(dst.shape[0]):
                for j in range(dst.shape[1]):
                    dst[i, j] = src[i, j]
        return matrix
    if dst.ndim == 3:
        def cube(dst, src):
            for i in range(dst.shape[0]):
                for j in range(dst.shape[1]):
                    for k in range(dst.shape[2]):
                        dst[i, j, k] = src[i, j, k]
        return cube

    def strided(dst, src):
        for i in np.ndindex(dst.shape):
            dst[i] = src[i]
    return strided


@njit(**INLINE)
def put(dst, src):
    """dst[...] = src for arrays of one shape and any layouts, element by element (a flat loop where
    both are C-contiguous). Numba's slice assignment of an array checks the shapes and formats its
    error message with Numba's string code, which it compiled again in every process that compiled
    such a kernel (5 to 7 s of a spectral or signal program's first call, per rank of the arrays)."""
    _copy_into(dst, src)


# NumPy's library calls inside kernels, compiled once per machine and signature and cached with the math
# library: written in a kernel, Numba typed and lowered their implementations again in every kernel's
# compile (np.linalg.solve alone: 4.6 s of a first call)
def _gesv(a, ipiv, b):
    """LAPACK's ?gesv on column-major storage: a (n x n) and b (n x nrhs) given as C-ordered arrays of their
    transposes; the solution replaces b. Its info (0, or > 0 where the matrix is singular)."""


def _lapack(routine: str, dtype, purpose: str):
    """Numba's binding of a LAPACK routine for this dtype (numba_linalg._LAPACK().<routine>), and the kind
    character its calls take first."""
    numba_linalg.ensure_lapack()
    return getattr(numba_linalg._LAPACK(), routine)(dtype), ord(numba_linalg.get_blas_kind(dtype, purpose))


@overload(_gesv)
def _gesv_lapack(a, ipiv, b):
    xgesv, kind = _lapack("numba_xgesv", a.dtype, "solve")

    def impl(a, ipiv, b):
        n = a.shape[0]
        return xgesv(kind, n, b.shape[0], a.ctypes, n, ipiv.ctypes, b.ctypes, n)
    return impl


@njit(**INLINE)
def np_solve(a, b):
    """np.linalg.solve of one square matrix a and b (n,) or (n, k), both C-contiguous, by LAPACK's ?gesv, as NumPy:
    non-finite entries are LAPACK's to propagate (Numba's np.linalg.solve raised on them), a singular matrix
    raises LinAlgError("Singular matrix"). Written out rather than Numba's np.linalg.solve, whose checks, copies
    and error messages took 3.9 s to compile, the largest of the math library's helpers (now about 0.5 s)."""
    n = a.shape[0]
    nrhs = 1 if b.ndim == 1 else b.shape[b.ndim - 1]
    at = a.T.copy()                         # a's column-major storage (the C-ordered array of its transpose)
    bt = b.reshape(n, nrhs).T.copy()        # b's
    if n > 0:
        ipiv = np.empty(n, numba_linalg.F_INT_nptype)
        if _gesv(at, ipiv, bt) > 0:
            raise np.linalg.LinAlgError("Singular matrix")
    return bt.T.copy().reshape(b.shape)


def _getrf(a, ipiv):
    """LAPACK's ?getrf on column-major storage: a (n x n) given as the C-ordered array of its transpose; its LU
    factors replace it. Its info (0, or > 0 where a pivot is exactly zero)."""


@overload(_getrf)
def _getrf_lapack(a, ipiv):
    xgetrf, kind = _lapack("numba_xxgetrf", a.dtype, "slogdet")

    def impl(a, ipiv):
        n = a.shape[0]
        return xgetrf(kind, n, n, a.ctypes, n, ipiv.ctypes)
    return impl


@njit(**INLINE)
def np_inv(a):
    """np.linalg.inv of one square matrix (C-contiguous) as NumPy computes it: LAPACK's ?gesv against the identity.
    Non-finite entries are LAPACK's to propagate (Numba's np.linalg.inv raised "Array must not contain infs or
    NaNs" on them, and used ?getrf and ?getri); a singular matrix raises LinAlgError("Singular matrix")."""
    n = a.shape[0]
    at = a.T.copy()                         # a's column-major storage
    x = np.eye(n, dtype=a.dtype)            # the identity, whose storage is its own; the inverse's transpose after
    if n > 0:
        ipiv = np.empty(n, numba_linalg.F_INT_nptype)
        if _gesv(at, ipiv, x) > 0:
            raise np.linalg.LinAlgError("Singular matrix")
    return x.T.copy()


@njit(**INLINE)
def np_slogdet(a):
    """np.linalg.slogdet of one square matrix (C-contiguous) as NumPy computes it: LAPACK's ?getrf on its
    column-major copy, the sign from the pivots and the diagonal's signs (phases), the log of the product of the
    diagonal's magnitudes summed. Non-finite entries propagate as in NumPy (sign 1 and a NaN or inf logarithm
    where no pivot is negative; Numba's slogdet raised on them); an exactly zero pivot gives (0, -inf)."""
    n = a.shape[0]
    one = np.ones(1, a.dtype)[0]
    if n == 0:
        return one, 0.0
    at = a.T.copy()                         # a's column-major storage
    ipiv = np.empty(n, numba_linalg.F_INT_nptype)
    if _getrf(at, ipiv) > 0:
        return one * 0, -np.inf
    sign = one
    for k in range(n):
        if ipiv[k] != k + 1:
            sign = -sign
    logdet = 0.0
    for k in range(n):
        d = at[k, k]
        sign = sign * _phase(d)
        logdet += np.log(np.abs(d))
    return sign, logdet


def _phase(d):
    """A pivot's contribution to the determinant's sign, as NumPy's slogdet takes it: -1 where a real pivot is
    negative, else 1 (NaN included); a complex pivot's phase d / |d|."""


@overload(_phase)
def _phase_impl(d):
    if isinstance(d, types.Complex):
        return lambda d: d / np.abs(d)
    return lambda d: -1.0 if d < 0 else 1.0


@njit(**INLINE)
def np_det(a):   # (NumPy's det: sign * exp(log|det|))
    sign, logdet = np_slogdet(a)
    return sign * np.exp(logdet)


@njit(**INLINE)
def np_cholesky(a):
    return np.linalg.cholesky(a)


def _geqrf(q, tau):
    """LAPACK's ?geqrf on column-major storage: q (m x n) given as the C-ordered array of its transpose; R and the
    reflectors replace it, tau gets their scales. Its info."""


@overload(_geqrf)
def _geqrf_lapack(q, tau):
    xgeqrf, kind = _lapack("numba_ez_geqrf", q.dtype, "qr")

    def impl(q, tau):
        n, m = q.shape
        return xgeqrf(kind, m, n, q.ctypes, m, tau.ctypes)
    return impl


def _orgqr(q, tau):
    """LAPACK's ?orgqr (?ungqr): the first k = tau.size columns of Q from ?geqrf's reflectors in q (as _geqrf's)."""


@overload(_orgqr)
def _orgqr_lapack(q, tau):
    xgqr, kind = _lapack("numba_ez_xxgqr", q.dtype, "qr")

    def impl(q, tau):
        m = q.shape[1]
        k = tau.size
        return xgqr(kind, m, k, k, q.ctypes, m, tau.ctypes)
    return impl


@njit(**INLINE)
def np_qr(a):
    """np.linalg.qr (mode 'reduced') of one matrix (C-contiguous) as NumPy computes it: LAPACK's ?geqrf, then ?orgqr
    on the column-major copy. Non-finite entries are LAPACK's to propagate, as NumPy's (Numba's qr raised "Array
    must not contain infs or NaNs" on them, and on an empty matrix, where NumPy gives empty factors)."""
    m, n = a.shape
    k = min(m, n)
    if k == 0:
        return np.zeros((m, 0), a.dtype), np.zeros((0, n), a.dtype)
    q = a.T.copy()                          # a's column-major storage
    tau = np.empty(k, a.dtype)
    _geqrf(q, tau)
    r = np.triu(q.T[:k])                    # R: the upper triangle of the first k rows (before ?orgqr overwrites q)
    _orgqr(q, tau)
    return q[:k].T.copy(), r


def _gesdd(a, s, u, vt, full):
    """LAPACK's ?gesdd on column-major storage (each array the C-ordered array of its transpose: a m x n, u m x
    ucols, vt vrows x n); jobz 'A' where `full`, else 'S'. Its info (> 0: it did not converge; < 0: an argument
    LAPACK refused)."""


@overload(_gesdd)
def _gesdd_lapack(a, s, u, vt, full):
    xgesdd, kind = _lapack("numba_ez_gesdd", a.dtype, "svd")
    all_, some = ord("A"), ord("S")

    def impl(a, s, u, vt, full):
        n, m = a.shape
        return xgesdd(kind, all_ if full else some, m, n, a.ctypes, m, s.ctypes, u.ctypes, m, vt.ctypes, vt.shape[1])
    return impl


@njit(**INLINE)
def _svd(a, full):
    """np.linalg.svd of one nonempty matrix (C-contiguous) as NumPy computes it: LAPACK's ?gesdd on the column-major
    copy; non-finite entries are LAPACK's (Numba's svd raised on them), and where it does not converge, NumPy's
    LinAlgError("SVD did not converge") (Numba's: a ValueError)."""
    m, n = a.shape
    k = min(m, n)
    at = a.T.copy()                         # a's column-major storage
    ucols = m if full else k
    vrows = n if full else k
    s = np.empty(k, np.float64)
    ut = np.empty((ucols, m), a.dtype)      # u's column-major storage
    v = np.empty((n, vrows), a.dtype)       # vt's
    if _gesdd(at, s, ut, v, full) != 0:   # (as NumPy: any failure, e.g. a NaN entry, which LAPACK's scaling refuses)
        raise np.linalg.LinAlgError("SVD did not converge")
    return ut.T.copy(), s, v.T.copy()


@njit(**INLINE)
def np_svd_full(a):   # (an empty matrix: NumPy's identities)
    if a.size == 0:
        return np.eye(a.shape[0]), np.zeros(0), np.eye(a.shape[1])
    return _svd(a, True)


@njit(**INLINE)
def np_svd_reduced(a):
    if a.size == 0:
        k = min(a.shape[0], a.shape[1])
        return np.zeros((a.shape[0], k)), np.zeros(k), np.zeros((k, a.shape[1]))
    return _svd(a, False)


@njit(**INLINE)
def np_sort(x):
    return np.sort(x)


@njit(**INLINE)
def np_argsort_stable(x):
    return np.argsort(x, kind="mergesort")


# FFTs (rocket-fft: pocketfft, NumPy's own C++ code), unnormalized in both directions
@njit(**INLINE)
def np_fftn(x, axes):
    return np.fft.fftn(x, axes=axes, norm="backward")


@njit(**INLINE)
def np_ifftn(x, axes):
    return np.fft.ifftn(x, axes=axes, norm="forward")


@njit(**INLINE)
def np_rfftn(x, axes):
    return np.fft.rfftn(x, axes=axes, norm="backward")


@njit(**INLINE)
def np_irfftn(x, s, axes):
    return np.fft.irfftn(x, s=s, axes=axes, norm="forward")


@njit(**INLINE)
def row(seq, t):
    """seq[t] as an array (0-d for a 1-d seq): a view of the row, seq C-contiguous."""
    return seq[t:t + 1].reshape(seq.shape[1:])


@njit(**INLINE)
def contiguous(x):
    return np.ascontiguousarray(x)


def _rounded(fn, T):
    @jit_named(f"{fn.__name__}_{CASTS[np.dtype(T).name]}")
    def rounded(x):
        return T(fn(x))   # NumPy's scalar floor/ceil/rint give float64 in Numba

    return rounded


floor_f32, ceil_f32, rint_f32 = (_rounded(fn, f32) for fn in (np.floor, np.ceil, np.rint))
floor_f64, ceil_f64, rint_f64 = (_rounded(fn, f64) for fn in (np.floor, np.ceil, np.rint))


@njit(**INLINE)
def sqrt_f32(x):
    return np.sqrt(x)


@njit(**INLINE)
def sqrt_f64(x):
    return np.sqrt(x)


# libm's scalar functions, by the name templates give them ({arctan}, ...): not vectorised, exact
# to libm's accuracy. Numba's math.* computes float32 in float64; the result is rounded back.
LIBM = {"arctan": math.atan, "sinh": math.sinh, "cosh": math.cosh, "arcsin": math.asin, "arccos": math.acos,
        "arcsinh": math.asinh, "arccosh": math.acosh, "arctanh": math.atanh}


def _libm(name: str, fn, T):
    @jit_named(f"{name}_{CASTS[np.dtype(T).name]}")
    def scalar(x):
        return T(fn(x))

    return scalar


for _name, _fn in LIBM.items():   # arctan_f32, arctan_f64, sinh_f32, ... (generated modules import *)
    for _T in (f32, f64):
        globals()[f"{_name}_{CASTS[np.dtype(_T).name]}"] = _libm(_name, _fn, _T)


# the scalar rules shared with the CUDA backend (backends/scalar_rules.py)
sign_i, maximum_f, minimum_f, maximum_i, minimum_i, pow_unchecked = (njit(**INLINE)(fn) for fn in scalar_rules.ALL)
# (NumPy's ValueError for an integer to a negative power; the dispatcher named, for Numba's cache of the closure)
pow_i = jit_named("pow_i_checked")(scalar_rules.raising_negative_powers(_named(pow_unchecked, "pow_unchecked")))
RAISING = ("pow_i",)   # the functions above that raise (backends/cpu.py runs a loop that calls one serially)


# counter-based random numbers: Threefry-2x32 on int64 words, written once in primitives/random.py
random_bits = njit(**INLINE)(random_primitives.threefry_bits)


# -- issue 19: the rest of NumPy's float ufuncs, integer division and shifts, gather indices ---------------
# (unary and binary libm functions by template name; float division as NumPy's npy_divmod)
LIBM_UNARY = {"log2": math.log2, "log10": math.log10, "exp2": math.exp2, "cbrt": np.cbrt, "trunc": np.trunc}
LIBM_BINARY = {"arctan2": math.atan2, "hypot": math.hypot, "copysign": math.copysign, "nextafter": np.nextafter,
               "fmod": np.fmod}
FLOAT_FUNCTIONS = (*LIBM_UNARY, *LIBM_BINARY, "floordiv", "remainder", "logaddexp", "logaddexp2")


def _libm2(name: str, fn, T):
    @jit_named(f"{name}_{CASTS[np.dtype(T).name]}")
    def scalar(x, y):
        return T(fn(x, y))

    return scalar


for _name, _fn in LIBM_UNARY.items():
    for _T in (f32, f64):
        globals()[f"{_name}_{CASTS[np.dtype(_T).name]}"] = _libm(_name, _fn, _T)
for _name, _fn in LIBM_BINARY.items():
    for _T in (f32, f64):
        globals()[f"{_name}_{CASTS[np.dtype(_T).name]}"] = _libm2(_name, _fn, _T)
for _T, _sfx in ((f32, "f32"), (f64, "f64")):
    _floordiv, _remainder = scalar_rules.float_division(globals()[f"fmod_{_sfx}"], globals()[f"floor_{_sfx}"],
                                                        globals()[f"copysign_{_sfx}"], _T)
    globals()[f"floordiv_{_sfx}"] = jit_named(f"floordiv_{_sfx}")(_floordiv)
    globals()[f"remainder_{_sfx}"] = jit_named(f"remainder_{_sfx}")(_remainder)
    # (issue 25: logaddexp and logaddexp2 from the vectorised exp and log1p, and libm's exp2)
    _exp, _log1p = globals()[f"exp_{_sfx}"], globals()[f"log1p_{_sfx}"]
    globals()[f"logaddexp_{_sfx}"] = jit_named(f"logaddexp_{_sfx}")(scalar_rules.logaddexp(_exp, _log1p, _T))
    globals()[f"logaddexp2_{_sfx}"] = jit_named(f"logaddexp2_{_sfx}")(
        scalar_rules.logaddexp(globals()[f"exp2_{_sfx}"], _log1p, _T, base2=True))

for _T, _sfx in ((f32, "f32"), (f64, "f64")):   # (sign_f32, sign_f64: np.sign as selects, which vectorize)
    globals()[f"sign_{_sfx}"] = jit_named(f"sign_{_sfx}")(scalar_rules.sign_float(_T))

for _T, _sfx in ((f32, "f32"), (f64, "f64")):   # (to_int32_f32, ...: Convert's float -> integer)
    for _bits in (32, 64):
        globals()[f"to_int{_bits}_{_sfx}"] = jit_named(f"to_int{_bits}_{_sfx}")(scalar_rules.float_to_int(_T(-2.0 ** (_bits - 1))))

floordiv_i, remainder_i, fmod_i, gcd_i, lcm_i, take_index = (njit(**INLINE)(fn) for fn in (
    scalar_rules.floordiv_i, scalar_rules.remainder_i, scalar_rules.fmod_i, scalar_rules.gcd_i, scalar_rules.lcm_i,
    scalar_rules.take_index))
left_shift_32, right_shift_32 = (jit_named(f"{fn.__name__}_32")(fn) for fn in scalar_rules.shifts(32))
left_shift_64, right_shift_64 = (jit_named(f"{fn.__name__}_64")(fn) for fn in scalar_rules.shifts(64))


# -- issue 25: np.linalg.eigh as NumPy computes it: LAPACK's ?syevd on the triangle asked for, of a Fortran-order
# copy (Numba's np.linalg.eigh reads the lower triangle only; a transpose's lower triangle is a different computation,
# whose eigenvectors may have other signs). numba_ez_xxxevd is Numba's C wrapper of scipy.linalg.cython_lapack's
# ?syevd (the one its np.linalg.eigh calls, with "L"), resolved by name: the kernels stay cacheable. As NumPy, a NaN in
# the triangle read raises LinAlgError (LAPACK's failure), one in the other triangle is never read.
def _eigh(T, kind: str):
    evd = types.ExternalFunction("numba_ez_xxxevd", types.intc(
        types.char, types.char, types.char, types.intp, types.CPointer(from_dtype(T)), types.intp,
        types.CPointer(from_dtype(T))))
    kind_code, vectors, lower, upper = ord(kind), ord("V"), ord("L"), ord("U")

    def eigh(a, upper_triangle):
        n = a.shape[-1]
        v = a.T.copy().T   # (a Fortran-order copy, which LAPACK overwrites with the eigenvectors)
        w = np.empty(n, T)
        if n == 0:
            return w, v
        r = evd(kind_code, vectors, upper if upper_triangle else lower, n, v.ctypes, n, w.ctypes)
        if r != 0:
            raise np.linalg.LinAlgError("Eigenvalues did not converge")
        return w, v

    return eigh


eigh_f64 = jit_named("eigh_f64")(_eigh(f64, "d"))   # (float32 matrices are computed in float64, as NumPy)


def integer_functions(dtype_name: str) -> dict[str, str]:
    """The issue-19 template names for an integer or bool dtype."""
    bits = "32" if dtype_name == "int32" else "64"
    return {"floordiv": "floordiv_i", "remainder": "remainder_i", "fmod": "fmod_i", "gcd": "gcd_i", "lcm": "lcm_i",
            "left_shift": f"left_shift_{bits}", "right_shift": f"right_shift_{bits}", "to_int32": "", "to_int64": ""}


# -- issue 30: complex64 and complex128 --------------------------------------------------------------------
# NumPy's complex functions as Numba implements them (its ufunc loops, ported from NumPy's: within an ulp or
# two of NumPy's; tests/test_complex.py), and plain adds and multiplies for reductions (no reassoc flag: a
# complex number is a pair, which LLVM does not reorder)
COMPLEX_FUNCTIONS = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "arctan", "sinh", "cosh",
                     "arcsin", "arccos", "arcsinh", "arccosh", "arctanh", "log2", "log10", "exp2", "pow")


def _complex(name: str, T):
    fn = np.power if name == "pow" else getattr(np, name)
    if name == "pow":
        @jit_named(f"pow_{CASTS[np.dtype(T).name]}")
        def scalar2(x, y):
            return T(fn(x, y))
        return scalar2

    if name in ("exp", "sinh", "cosh", "sin", "cos"):
        # Numba's, but for the part that is a signed zero in NumPy's (C99's) where a zero meets an overflowing or
        # NaN other part, which Numba makes inf * 0 = NaN: exp(800+0j), sinh/cosh(800+0j), sin/cos(1e10j)
        # (tests/test_complex.py)
        R = np.float32 if T is c64 else np.float64
        imaginary_axis = name in ("sin", "cos")

        @jit_named(f"{name}_{CASTS[np.dtype(T).name]}")
        def guarded(z):
            w = T(fn(z))
            x, y = z.real, z.imag
            if imaginary_axis and x == 0:
                if name == "sin":   # sin(iy) = i sinh(y)
                    return T(complex(x, w.imag))
                return T(complex(w.real, -(x * np.copysign(R(1), y)) if y == y else x))   # cos(iy) = cosh(y)
            if not imaginary_axis and y == 0:
                return T(complex(w.real, np.copysign(R(1), x) * y if name == "cosh" else y))
            return w
        return guarded

    @jit_named(f"{name}_{CASTS[np.dtype(T).name]}")
    def scalar(x):
        return T(fn(x))

    return scalar


for _name in COMPLEX_FUNCTIONS:
    for _T in (c64, c128):
        globals()[f"{_name}_{CASTS[np.dtype(_T).name]}"] = _complex(_name, _T)
# log (and log2, log10), expm1, tanh, arccosh and pow from scalar_rules (the cuda backend's), where Numba's
# differ from NumPy's: its log takes log |z| as log(hypot), which loses the real part near |z| = 1
# (log(1 + 1e-9j) has real part 5e-19), its expm1 is exp(z) - 1, its tanh overflows for Re z > 355, its
# arccosh is 1e-12 off, and its power over- and underflows where NumPy's does not (tests/test_complex.py)
_LOGS = scalar_rules.complex_functions(math, c128, f64, lambda fn: jit_named(f"{fn.__name__}_c128")(fn))
for _name in ("log", "log2", "log10", "expm1", "tanh", "arccosh", "pow"):
    globals()[f"{_name}_c128"] = _LOGS[_name]
    globals()[f"{_name}_c64"] = jit_named(f"{_name}_c64")(scalar_rules.rounded(_LOGS[_name], c128, c64, 2 if _name == "pow" else 1))


# complex a / b as NumPy's: a zero divisor gives inf or NaN parts (Numba's raises ZeroDivisionError); real division
# is the operator (error_model='numpy')
for _T, _R in ((c64, f32), (c128, f64)):
    globals()[f"div_{CASTS[np.dtype(_T).name]}"] = scalar_rules.complex_division(
        _T, _R, jit_named(f"div_{CASTS[np.dtype(_T).name]}"))


@njit(**INLINE)
def rdiv(a, b):
    return a / b


@njit(**INLINE)
def cadd(a, b):
    return a + b


@njit(**INLINE)
def cmul(a, b):
    return a * b


# -- issue 30: scipy.special's functions (scalar_rules.special_functions), computed in float64; the float32
# ones round the float64 result (as the libm functions above)
SPECIAL_UNARY = ("gammaln", "digamma", "erfinv", "log_ndtr", "i0", "i0e", "i1", "i1e")
SPECIAL_BINARY = ("polygamma", "xlogy", "xlog1py")
LIBM_SPECIAL = {"erf": math.erf, "erfc": math.erfc}
_SPECIAL = scalar_rules.special_functions(math, f64, lambda fn: jit_named(f"{fn.__name__}_special")(fn))


for _name in (*SPECIAL_UNARY, *SPECIAL_BINARY):
    globals()[f"{_name}_f64"] = _SPECIAL[_name]
    globals()[f"{_name}_f32"] = jit_named(f"{_name}_f32")(
        scalar_rules.rounded(_SPECIAL[_name], f64, f32, 1 if _name in SPECIAL_UNARY else 2))
for _name, _fn in LIBM_SPECIAL.items():
    for _T in (f32, f64):
        globals()[f"{_name}_{CASTS[np.dtype(_T).name]}"] = _libm(_name, _fn, _T)
FLOAT_FUNCTIONS = (*FLOAT_FUNCTIONS, *SPECIAL_UNARY, *SPECIAL_BINARY, *LIBM_SPECIAL)
