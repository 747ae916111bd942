"""tk.numpy.linalg: np.linalg on traced arrays. solve, inv, slogdet, det, cholesky, qr, eigh, svd and eig are
primitives (LAPACK on cpu, the standard reverse-mode rules); norm, pinv, matrix_power,
multi_dot, matrix_rank, cond and the array-API names are built from them. Results are NumPy's
own named tuples (EighResult, SVDResult, ...). Stacks of matrices (..., m, n) work throughout."""
from __future__ import annotations

import math
import operator

import numpy as np

from ..ir import is_complex
from ..primitives import annotations as A
from ..trace import aval_of, current_builder, trace_to_graph
from ._core import P, ShapeError, Tracer, _array, _axes, _cast, _dtype, _inexact, _promote, _shape, bind, with_location
from .contractions import cross as _cross
from .contractions import matmul
from .contractions import outer as _outer
from .contractions import tensordot as _tensordot
from .contractions import vecdot as _vecdot
from .indexing import take_along_axis
from .reductions import _sqrt_or_zero
from .reductions import any as _any
from .reductions import max as _max
from .reductions import min as _min
from .reductions import sum as _sum
from .shapes import broadcast_to, flip, matrix_transpose, moveaxis, reshape, squeeze, tril
from .shapes import diagonal as _diagonal
from .sorting import argsort
from .ufuncs import (
    absolute,
    add,
    copysign,
    divide,
    equal,
    greater,
    imag,
    isnan,
    logical_and,
    logical_not,
    multiply,
    negative,
    not_equal,
    power,
    real,
    stop_gradient,
    subtract,
    where,
    zeros_like_of,
)

EighResult = type(np.linalg.eigh(np.eye(1)))
SVDResult = type(np.linalg.svd(np.eye(1)))
QRResult = type(np.linalg.qr(np.eye(1)))
SlogdetResult = type(np.linalg.slogdet(np.eye(1)))
EigResult = type(np.linalg.eig(np.eye(1)))

__all__ = ["cholesky", "cond", "cross", "det", "diagonal", "eig", "eigh", "eigvals", "eigvalsh", "inv", "matmul", "matrix_norm",
           "matrix_power", "matrix_rank", "matrix_transpose", "multi_dot", "norm", "outer", "pinv", "qr", "slogdet",
           "solve", "svd", "svdvals", "tensordot", "trace", "vecdot", "vector_norm"]


def _matrices(a, fname: str, square: bool = True, inexact: bool = True):
    a = _array(a, fname)
    a = _inexact(a, fname) if inexact else a
    s = _shape(a)
    if len(s) < 2 or (square and s[-1] != s[-2]):
        raise ShapeError(with_location(f"np.linalg.{fname}: needs {'square ' if square else ''}matrices (..., m, n), "
                                       f"got shape {s}"))
    return a


_HERMITIAN = ("a Hermitian a = x + 1j*y has the eigenvalues of the real symmetric np.block([[x, -y], [y, x]]), each twice, "
              "and any complex a the singular values of that real matrix, each twice")
_COMPLEX_ADVICE = {
    "det": "np.prod(np.linalg.eigvals(a), axis=-1) is det(a) (its gradient needs distinct eigenvalues)",
    "slogdet": "np.sum(np.log(np.linalg.eigvals(a)), axis=-1) is log det(a) up to 2 pi i (its gradient needs distinct "
               "eigenvalues)",
    "eigh": _HERMITIAN, "eigvalsh": _HERMITIAN, "svd": _HERMITIAN, "svdvals": _HERMITIAN, "pinv": _HERMITIAN,
    "matrix_rank": _HERMITIAN, "cond": _HERMITIAN, "norm": _HERMITIAN, "matrix_norm": _HERMITIAN,
}


def _real_only(a, fname: str):
    """A TypeError naming the function as the user called it, for the factorizations traced for real matrices only."""
    if is_complex(_dtype(a)):
        advice = _COMPLEX_ADVICE.get(fname.split("(")[0])
        raise TypeError(with_location(
            f"np.linalg.{fname} of complex matrices ({_dtype(a).name}, shape {_shape(a)}) is not traced: tracekern's "
            f"np.linalg takes complex matrices in solve, inv, eig, eigvals, matrix_power and the norms that need no SVD "
            f"('fro', 1, -1, inf, -inf){'; ' + advice if advice else ''}"))
    return a


def solve(a, b):
    """x with a @ x = b. b is a vector (n,) or a stack of matrices (..., n, k) (NumPy 2's rule)."""
    a = _matrices(a, "solve")
    b = _inexact(_array(b, "solve"), "solve")
    a, b = _promote("solve", a, b)
    n = _shape(a)[-1]
    vector = len(_shape(b)) == 1
    b2 = reshape(b, (n, 1)) if vector else b
    if _shape(b2)[-2] != n:
        raise ShapeError(with_location(f"np.linalg.solve: b of shape {_shape(b)} does not fit a of shape {_shape(a)}"))
    batch = tuple(np.broadcast_shapes(_shape(a)[:-2], _shape(b2)[:-2]))
    x = bind(P.solve, broadcast_to(a, batch + (n, n)), broadcast_to(b2, batch + _shape(b2)[-2:]))
    return reshape(x, batch + (n,)) if vector else x


def inv(a):
    return bind(P.inv, _matrices(a, "inv"))


def slogdet(a):
    sign, logabsdet = bind(P.slogdet, _real_only(_matrices(a, "slogdet"), "slogdet"))
    return SlogdetResult(sign, logabsdet)


def det(a):
    """sign * exp(log|det|), as NumPy computes it; its gradient at a singular matrix is the cofactor matrix."""
    return bind(P.det, _real_only(_matrices(a, "det"), "det"))


def cholesky(a, /, *, upper=False):
    a = _real_only(_matrices(a, "cholesky"), "cholesky")
    if upper:   # (from the upper triangle: the lower of the transpose)
        return matrix_transpose(bind(P.cholesky, matrix_transpose(a)))
    return bind(P.cholesky, a)


def qr(a, mode="reduced"):
    a = _real_only(_matrices(a, "qr", square=False), "qr")
    m, n = _shape(a)[-2:]
    if mode == "complete" and m > n:
        raise NotImplementedError(with_location("np.linalg.qr(mode='complete') of a tall matrix is not supported while "
                                                "tracing; use mode='reduced'"))
    if mode not in ("reduced", "complete", "r"):
        raise NotImplementedError(with_location(f"np.linalg.qr: mode {mode!r} is not supported while tracing"))
    q, r = bind(P.qr, a)
    return r if mode == "r" else QRResult(q, r)


def eigh(a, UPLO="L"):   # noqa: N803 (NumPy's name)
    a = _real_only(_matrices(a, "eigh"), "eigh")
    UPLO = str(UPLO).upper()   # noqa: N806 (NumPy takes "l" and "u" too)
    if UPLO not in ("L", "U"):
        raise ValueError(with_location("np.linalg.eigh: UPLO must be 'L' or 'U'"))
    w, v = bind(P.eigh, a, uplo=UPLO)
    return EighResult(w, v)


def eigvalsh(a, UPLO="L"):   # noqa: N803
    return eigh(_real_only(_array(a, "eigvalsh"), "eigvalsh"), UPLO).eigenvalues


def eig(a):
    """Eigenvalues and right eigenvectors of general matrices, NumPy's (LAPACK's geev), always complex:
    NumPy's are real when every eigenvalue of a real matrix is real, a dtype that depends on the values."""
    w, v = bind(P.eig, _matrices(a, "eig"), vectors=True)
    return EigResult(w, v)


def eigvals(a):
    (w,) = bind(P.eig, _matrices(a, "eigvals"), vectors=False)
    return w


def svd(a, full_matrices=True, compute_uv=True, hermitian=False):
    _real_only(_array(a, "svd"), "svd")
    if hermitian:
        return _hermitian_svd(a, compute_uv)
    a = _matrices(a, "svd", square=False)
    m, n = _shape(a)[-2:]
    full = bool(full_matrices) and compute_uv and m != n
    u, s, vh = bind(P.svd, a, full_matrices=full)
    return SVDResult(u, s, vh) if compute_uv else s


def _hermitian_svd(a, compute_uv):
    """NumPy's svd(a, hermitian=True): from eigh of the lower triangle, |w| in descending order (the
    reversed stable order), u the eigenvectors in that order and vh = (u * sign(w)).T, its signs."""
    w, u = eigh(a)
    s = absolute(w)
    order = flip(argsort(s, axis=-1), axis=-1)
    s = take_along_axis(s, order, axis=-1)
    if not compute_uv:
        return s
    sgn = take_along_axis(copysign(1.0, w), order, axis=-1)
    u = take_along_axis(u, broadcast_to(reshape(order, _shape(order)[:-1] + (1, _shape(order)[-1])), _shape(u)), axis=-1)
    return SVDResult(u, s, matrix_transpose(multiply(u, reshape(sgn, _shape(sgn)[:-1] + (1, _shape(sgn)[-1])))))


def svdvals(x, /):
    return svd(_real_only(_array(x, "svdvals"), "svdvals"), compute_uv=False)


def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    x = _inexact(_array(x, "vector_norm"), "vector_norm")
    ax = _axes(axis, len(_shape(x)), "vector_norm")
    if axis is None:
        y = _vector_norm(reshape(x, (-1,)), (0,), ord, False)
        return reshape(y, (1,) * len(_shape(x))) if keepdims else y
    return _vector_norm(x, ax, ord, keepdims)


def _abs2(x):
    """|x|^2 elementwise, real (for complex x: the sum of its parts' squares)."""
    if is_complex(_dtype(x)):
        re, im = real(x), imag(x)
        return add(multiply(re, re), multiply(im, im))
    return multiply(x, x)


def _vector_norm(x, axes, ord, keepdims):
    a = absolute(x)
    if ord is None or ord == 2:
        return _sqrt_or_zero(_sum(_abs2(x), axis=axes, keepdims=keepdims))
    if ord == np.inf:
        return _max(a, axis=axes, keepdims=keepdims, initial=0)
    if ord == -np.inf:
        return _min(a, axis=axes, keepdims=keepdims)
    if ord == 0:   # (the count of x != 0: NaN counts, as NumPy's)
        return _cast(_sum(_cast(not_equal(x, 0), _dtype(a)), axis=axes, keepdims=keepdims), _dtype(a))
    if ord == 1:
        return _sum(a, axis=axes, keepdims=keepdims)
    if isinstance(ord, str):
        raise ValueError(with_location(f"norm: invalid norm order {ord!r} for vectors"))
    total = _sum(power(a, float(ord)), axis=axes, keepdims=keepdims)
    if float(ord) < 0:
        return power(total, 1.0 / float(ord))
    zero = equal(total, 0)   # (the zero vector: the subgradient 0, as _sqrt_or_zero)
    return where(zero, 0, power(where(zero, 1, total), 1.0 / float(ord)))


def matrix_norm(x, /, *, keepdims=False, ord="fro"):
    x = _matrices(x, "matrix_norm", square=False)
    nd = len(_shape(x))
    return _matrix_norm(x, (nd - 2, nd - 1), ord, keepdims)


def _matrix_norm(x, axes, ord, keepdims):
    r, c = axes
    nd = len(_shape(x))
    if ord in (None, "fro", "f"):
        return _sqrt_or_zero(_sum(_abs2(x), axis=axes, keepdims=keepdims))
    a = absolute(x)
    # (the largest of an empty set is 0, NumPy's initial=0; the smallest raises, as NumPy's)
    if ord in (1, -1):
        col = _sum(a, axis=r, keepdims=True)
        y = _max(col, axis=c, keepdims=True, initial=0) if ord == 1 else _min(col, axis=c, keepdims=True)
    elif ord in (np.inf, -np.inf):
        row = _sum(a, axis=c, keepdims=True)
        y = _max(row, axis=r, keepdims=True, initial=0) if ord == np.inf else _min(row, axis=r, keepdims=True)
    elif ord in (2, -2, "nuc"):
        _real_only(x, f"norm(ord={ord!r})")
        moved = moveaxis(x, (r, c), (nd - 2, nd - 1))
        s = svd(moved, compute_uv=False)
        y = _sum(s, axis=-1) if ord == "nuc" else _max(s, axis=-1, initial=0) if ord == 2 else _min(s, axis=-1)
        y = reshape(y, tuple(1 if i in axes else sz for i, sz in enumerate(_shape(x))))
    else:
        raise ValueError(with_location(f"norm: invalid norm order {ord!r} for matrices"))
    return y if keepdims else squeeze(y, axis=axes)


def norm(x, ord=None, axis=None, keepdims=False):
    x = _inexact(_array(x, "norm"), "norm")
    nd = len(_shape(x))
    if axis is None:
        if ord is None or (ord in ("f", "fro") and nd == 2) or (ord == 2 and nd == 1):
            y = _sqrt_or_zero(_sum(_abs2(x)))
            return reshape(y, (1,) * nd) if keepdims else y
        axis = tuple(range(nd))
    if not isinstance(axis, tuple):
        try:
            axis = (operator.index(axis),)
        except TypeError:
            raise TypeError(with_location(f"norm: 'axis' must be None, an integer or a tuple of integers, got {axis!r}")) from None
    axes = tuple(_axes(a, nd, "norm")[0] for a in axis)
    if len(axes) == 2 and axes[0] == axes[1]:
        raise ValueError(with_location("norm: duplicate axes given"))
    if len(axes) == 1:
        return _vector_norm(x, axes, ord, keepdims)
    if len(axes) == 2:
        return _matrix_norm(x, axes, ord, keepdims)
    raise ValueError(with_location("norm: improper number of dimensions to norm"))


def pinv(a, rcond=None, hermitian=False, *, rtol=np._NoValue):
    """The pseudo-inverse from the SVD, singular values below rcond * max(s) dropped (NumPy's rule)."""
    a = _real_only(_matrices(a, "pinv", square=False), "pinv")
    if rcond is None:
        rcond = 1e-15 if rtol is np._NoValue else (max(_shape(a)[-2:]) * np.finfo(_dtype(a)).eps if rtol is None else rtol)
    elif rtol is not np._NoValue:
        raise ValueError(with_location("pinv: `rtol` and `rcond` can't be both set"))
    if isinstance(rcond, Tracer) or not np.all(np.asarray(rcond) <= np.sqrt(np.finfo(_dtype(a)).eps)):
        return _pinv_of_svd(a, rcond, hermitian)   # (a cutoff that may drop large singular values: see _pinv)
    if hermitian:   # (svd(hermitian=True) reads the lower triangle: the gradient goes through that symmetric matrix)
        low = tril(a, -1)
        diag = _diagonal(a, axis1=-2, axis2=-1)
        a = add(add(low, matrix_transpose(low)),
                multiply(reshape(diag, _shape(diag) + (1,)), np.eye(_shape(a)[-1], dtype=_dtype(a))))
    return _pinv(a, rcond, hermitian)


def _pinv_of_svd(a, rcond, hermitian):
    u, s, vh = svd(a, full_matrices=False, hermitian=hermitian)
    cutoff = multiply(_max(s, axis=-1, keepdims=True, initial=0), _column(rcond))   # (NumPy's initial=0: empty matrices)
    large = greater(s, cutoff)
    inv_s = where(large, divide(1, where(large, s, 1)), 0)
    return matmul(matrix_transpose(vh), multiply(reshape(inv_s, _shape(inv_s) + (1,)), matrix_transpose(u)))


def _pinv(a, rcond, hermitian):
    """pinv with its own gradient, Golub and Pereyra's (JAX's and PyTorch's): -p^H g p^H + (I - a p) g^H p p^H
    + p^H p g^H (I - p a) for the cotangent g of p = pinv(a). Through the SVD's gradient it was NaN wherever
    singular values repeat (the identity, an orthogonal matrix, the zero matrix). The formula is exact where the
    dropped singular values are 0; a dropped s_j > 0 adds terms of relative order s_j / s_i <= rcond, which only
    the SVD's gradient has: so pinv takes this one for a constant rcond <= sqrt(eps) (the defaults, 1e-15 and
    max(m, n) * eps), the SVD's otherwise. The gradient reads p through a value whose own gradient is the same
    formula (p itself gets none): second derivatives do not go through the SVD either."""
    def pinv_(a):
        p = _pinv_of_svd(a, rcond, hermitian)

        def value(a, p):   # (p, with pinv's derivative in a)
            return multiply(p, 1), lambda g: [_pinv_cotangent(a, p, g), None]
        return p, lambda g: [_pinv_cotangent(a, _with_gradient(value, a, stop_gradient(p)), g)]

    return _with_gradient(pinv_, a)


def _with_gradient(fwd, *xs):
    """fwd(*xs) -> (y, grad_fn): y, one array, whose gradient is grad_fn's (one cotangent or None per x), bound as
    tk.custom_gradient's primitive (custom_vjp_call: grad of grad and forward mode go through grad_fn's ops)."""
    if current_builder() is None:
        return fwd(*xs)[0]
    state = {}

    def body(*inner):
        y, grad_fn = fwd(*inner)

        def backward(g):
            return [zeros_like_of(x) if c is None else c for x, c in zip(inner, grad_fn(g))]
        G, _, captured = trace_to_graph(backward, [aval_of(y)])
        state["G"] = G
        return [y, *captured]

    F, _, captured = trace_to_graph(body, [aval_of(x) for x in xs])
    return bind(A.custom_vjp_call, *xs, *captured, body=F, bwd=state["G"], num_y=1, num_x=len(xs), var_positions=(),
                fun_name="np.linalg.pinv")[0]


def _pinv_cotangent(a, p, g):
    """-p^T g p^T + (I - a p) g^T p p^T + p^T p g^T (I - p a), associated so that every product is at most
    min(m, n) wide on one side (no m x m product of a tall a, no n x n one of a wide a)."""
    ph, gh = matrix_transpose(p), matrix_transpose(g)   # (real matrices: pinv refuses complex ones, _real_only)
    m, n = _shape(a)[-2:]
    if m >= n:
        first = matmul(ph, matmul(g, ph))
        x = matmul(gh, matmul(p, ph))
        y = matmul(ph, matmul(p, gh))
        return add(negative(first), add(subtract(x, matmul(a, matmul(p, x))), subtract(y, matmul(y, matmul(p, a)))))
    first = matmul(matmul(ph, g), ph)
    x = matmul(matmul(gh, p), ph)
    y = matmul(matmul(ph, p), gh)
    return add(negative(first), add(subtract(x, matmul(matmul(a, p), x)), subtract(y, matmul(matmul(y, p), a))))


def matrix_power(a, n):
    a = _matrices(a, "matrix_power", inexact=False)   # (integer powers of integer matrices stay integers, as NumPy's)
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(with_location(f"np.linalg.matrix_power: exponent must be an integer, got {n!r}")) from None
    if n == 0:
        return broadcast_to(np.eye(_shape(a)[-1], dtype=_dtype(a)), _shape(a))
    if n < 0:
        a, n = inv(a), -n
    result, base = None, a
    while n:
        if n & 1:
            result = base if result is None else matmul(result, base)
        n >>= 1
        if n:
            base = matmul(base, base)
    return result


def multi_dot(arrays, *, out=None):
    """A chain of matmuls in the cheapest order (dynamic programming over the chain, as NumPy)."""
    arrays = [_array(x, "multi_dot") for x in arrays]
    if len(arrays) < 2:
        raise ValueError(with_location("multi_dot: expecting at least two arrays"))
    first_1d, last_1d = len(_shape(arrays[0])) == 1, len(_shape(arrays[-1])) == 1
    if first_1d:
        arrays[0] = reshape(arrays[0], (1, -1))
    if last_1d:
        arrays[-1] = reshape(arrays[-1], (-1, 1))
    dims = [_shape(arrays[0])[0]] + [_shape(x)[1] for x in arrays]
    n = len(arrays)
    cost = [[0] * n for _ in range(n)]
    split = [[0] * n for _ in range(n)]
    for length in range(1, n):
        for i in range(n - length):
            j = i + length
            cost[i][j] = math.inf
            for k in range(i, j):
                c = cost[i][k] + cost[k + 1][j] + dims[i] * dims[k + 1] * dims[j + 1]
                if c < cost[i][j]:
                    cost[i][j], split[i][j] = c, k

    def chain(i, j):
        return arrays[i] if i == j else matmul(chain(i, split[i][j]), chain(split[i][j] + 1, j))

    y = chain(0, n - 1)
    if first_1d and last_1d:
        return reshape(y, ())
    if first_1d:
        return reshape(y, (-1,))
    return reshape(y, (-1,)) if last_1d else y


def matrix_rank(A, tol=None, hermitian=False, *, rtol=None):   # noqa: N803
    A = _real_only(_inexact(_array(A, "matrix_rank"), "matrix_rank"), "matrix_rank")
    if len(_shape(A)) < 2:
        return _cast(builtins_any_nonzero(A), np.int64)
    s = svd(A, compute_uv=False, hermitian=hermitian)
    if tol is None:
        r = max(_shape(A)[-2:]) * np.finfo(_dtype(A)).eps if rtol is None else _column(rtol)
        tol = multiply(_max(s, axis=-1, keepdims=True, initial=0), r)
    else:
        if rtol is not None:
            raise ValueError(with_location("matrix_rank: `tol` and `rtol` can't be both set"))
        tol = _column(tol)
    return _sum(greater(s, tol), axis=-1)


def builtins_any_nonzero(a):
    return greater(_sum(_cast(greater(absolute(a), 0), np.int64)), 0)


def cond(x, p=None):
    """NumPy's: the ratio of extreme singular values (p None, 2, -2), else norm(x) * norm(inv(x)); a singular
    matrix's is inf (NumPy inverts without raising: where LU finds a zero pivot, slogdet's sign is 0, the
    inverse NaN), and so is a NaN from a matrix without NaN (0 / 0 of a zero matrix)."""
    x = _real_only(_matrices(x, "cond", square=p not in (None, 2, -2)), "cond")
    if p in (None, 2, -2):
        s = svd(x, compute_uv=False)
        hi, lo = _max(s, axis=-1), _min(s, axis=-1)
        r = divide(hi, lo) if p in (None, 2) else divide(lo, hi)
    else:
        sign, _ = slogdet(x)
        singular = equal(sign, 0)
        n = _shape(x)[-1]
        safe = where(reshape(singular, _shape(singular) + (1, 1)), np.eye(n, dtype=_dtype(x)), x)   # (a double where)
        r = where(singular, np.inf, multiply(norm(x, p, axis=(-2, -1)), norm(inv(safe), p, axis=(-2, -1))))
    clean = logical_not(_any(isnan(x), axis=(-2, -1)))
    return where(logical_and(isnan(r), clean), np.inf, r)


def _column(r):
    """A cutoff (rcond, rtol, tol) as NumPy's asarray(r)[..., newaxis]: one per matrix of a stack."""
    if isinstance(r, Tracer):
        return reshape(r, _shape(r) + (1,))
    r = np.asarray(r)
    return r if r.ndim == 0 else r[..., None]


# the array-API names of np.linalg (NumPy 2): over the last axes


def outer(x1, x2, /):
    if len(_shape(x1)) != 1 or len(_shape(x2)) != 1:
        raise ValueError(with_location("np.linalg.outer: takes 1-D arrays"))
    return _outer(x1, x2)


def cross(x1, x2, /, *, axis=-1):
    if _shape(x1)[axis] != 3 or _shape(x2)[axis] != 3:
        raise ValueError(with_location("np.linalg.cross: both inputs must be 3-vectors along the axis"))
    return _cross(x1, x2, axis=axis)


def vecdot(x1, x2, /, *, axis=-1):
    return _vecdot(x1, x2, axis=axis)


def tensordot(x1, x2, /, *, axes=2):
    return _tensordot(x1, x2, axes)


def diagonal(x, /, *, offset=0):
    return _diagonal(x, offset, -2, -1)


def trace(x, /, *, offset=0, dtype=None):
    y = _sum(_diagonal(x, offset, -2, -1), axis=-1)
    return _cast(y, dtype) if dtype is not None else y

