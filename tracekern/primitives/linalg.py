"""matmul: (..., m, k) @ (..., k, n) with equal batch dimensions.

tracekern.numpy reduces 1-D operands and batch broadcasting to this form."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval, complex_dtype, is_complex
from . import ops
from .core import Primitive


class Matmul(Primitive):
    fusion = "matmul"

    def abstract_eval(self, a: Aval, b: Aval):
        if a.dtype != b.dtype:
            raise TypeError(f"matmul: operand dtypes differ ({a.dtype}, {b.dtype})")
        if a.ndim < 2 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit (..., m, k) @ (..., k, n)")
        return (Aval(a.shape[:-1] + b.shape[-1:], a.dtype),)

    def impl(self, a, b):
        return np.matmul(a, b)

    def vjp(self, cts, ins, outs, active):
        # (complex: ct @ b^H and a^H @ ct, the complex convention)
        (ct,), (a, b) = cts, ins
        adjoint = (lambda m: ops.conj(ops.swap_last(m))) if a.dtype.kind == "c" else ops.swap_last
        return [ops.matmul(ct, adjoint(b)) if active[0] else None,
                ops.matmul(adjoint(a), ct) if active[1] else None]


matmul = Matmul("matmul")


# -- issue 19: np.linalg, with the standard reverse-mode rules --------------------------------------------
# Batched over leading axes; NumPy's impls (LAPACK); the cpu backend calls Numba's np.linalg (LAPACK
# through SciPy) per matrix. eigh and cholesky read the lower triangle only, as NumPy's do, so their
# gradients are lower-triangular (the gradient of what the function reads).


def _square(name: str, a: Aval, complex_ok: bool = False) -> None:
    if a.ndim < 2 or a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{name}: needs square matrices (..., n, n), got shape {a.shape}")
    if a.dtype.kind != "f" and not (complex_ok and a.dtype.kind == "c"):
        raise TypeError(f"{name}: needs float32 or float64 matrices{' (or complex)' if complex_ok else ''}, got {a.dtype}")


def _adjoint(x):
    """The conjugate transpose of the last two axes (the transpose for real x)."""
    return ops.conj(ops.swap_last(x)) if is_complex(x.dtype) else ops.swap_last(x)


def _eye(x, n: int):
    return ops.constant(x, np.eye(n, dtype=x.dtype))


def _mask(x, matrix: np.ndarray):
    """A bool mask of the last two axes, broadcast to x's shape."""
    return ops.broadcast_to(ops.constant(x, matrix), shape=tuple(x.shape))


def _tril(x, k: int = 0):
    n, m = x.shape[-2:]
    return ops.select(_mask(x, np.tri(n, m, k, dtype=bool)), x, ops.zeros_like(x))


def _lower_read(g):
    """The gradient of a function of a symmetric matrix that reads only its lower triangle, from the
    gradient g of its symmetric extension: g_ij + g_ji below the diagonal, g_ii on it, 0 above."""
    n = g.shape[-1]
    return ops.select(_mask(g, np.eye(n, dtype=bool)), g, _tril(ops.add(g, ops.swap_last(g)), -1))


def _diag_matrix(v):
    """(..., n) -> (..., n, n) with v on the diagonal."""
    n = v.shape[-1]
    shape = tuple(v.shape) + (n,)
    col = ops.broadcast_to(ops.reshape(v, new_shape=tuple(v.shape) + (1,)), shape=shape)
    return ops.select(_mask(col, np.eye(n, dtype=bool)), col, ops.zeros_like(col))


def _rows(v, shape):
    """(..., n) scaling the columns of a (..., m, n) matrix: broadcast as (..., 1, n)."""
    return ops.broadcast_to(ops.reshape(v, new_shape=tuple(v.shape[:-1]) + (1, v.shape[-1])), shape=tuple(shape))


def _cols(v, shape):
    """(..., m) scaling the rows of a (..., m, n) matrix: broadcast as (..., m, 1)."""
    return ops.broadcast_to(ops.reshape(v, new_shape=tuple(v.shape) + (1,)), shape=tuple(shape))


def _inverse_gaps(w, squared: bool = False):
    """F_ij = 1 / (w_j - w_i) off the diagonal (of squares when asked), 0 on it."""
    n = w.shape[-1]
    shape = tuple(w.shape) + (n,)
    v = ops.mul(w, w) if squared else w
    gaps = ops.sub(_rows(v, shape), _cols(v, shape))
    diag = _mask(gaps, np.eye(n, dtype=bool))
    return ops.select(diag, ops.zeros_like(gaps), ops.div(ops.full_like(gaps, 1), ops.select(diag, ops.full_like(gaps, 1), gaps)))


def _right_solve_t(x, r):
    """x @ inv(r).T, as solve(r, x.T).T."""
    return ops.swap_last(ops.solve(r, ops.swap_last(x)))


class Solve(Primitive):
    """solve(a, b): x with a @ x = b; a (..., n, n), b (..., n, k) with the same batch axes."""

    def abstract_eval(self, a: Aval, b: Aval):
        _square("solve", a, complex_ok=True)
        if b.ndim != a.ndim or b.shape[:-1] != a.shape[:-1] or b.dtype != a.dtype:
            raise ShapeError(f"solve: b {b} does not fit a {a}: expected (..., n, k) with a's batch axes and dtype")
        return (b,)

    def impl(self, a, b):
        return np.linalg.solve(a, b)

    def vjp(self, cts, ins, outs, active):
        (ct,), (a, _), (x,) = cts, ins, outs
        bbar = ops.solve(_adjoint(a), ct)
        return [ops.neg(ops.matmul(bbar, _adjoint(x))) if active[0] else None, bbar if active[1] else None]


class Inv(Primitive):
    def abstract_eval(self, a: Aval):
        _square("inv", a, complex_ok=True)
        return (a,)

    def impl(self, a):
        return np.linalg.inv(a)

    def vjp(self, cts, ins, outs, active):
        yt = _adjoint(outs[0])
        return [ops.neg(ops.matmul(ops.matmul(yt, cts[0]), yt))]


class Slogdet(Primitive):
    """(sign, log|det|) of each matrix (np.linalg.slogdet; np.linalg.det is sign * exp(logabsdet),
    which is how NumPy computes it too)."""

    multiple_results = True

    def abstract_eval(self, a: Aval):
        _square("slogdet", a)
        return (Aval(a.shape[:-2], a.dtype), Aval(a.shape[:-2], a.dtype))

    def impl(self, a):
        sign, logdet = np.linalg.slogdet(a)
        return np.asarray(sign, a.dtype), np.asarray(logdet, a.dtype)

    def vjp(self, cts, ins, outs, active):
        (a,) = ins
        ct = _cols(_cols(cts[1], a.shape[:-1]), a.shape)   # (...) -> (..., n, n)
        return [ops.mul(ct, ops.swap_last(ops.inv(a)))]


class Cholesky(Primitive):
    """The lower factor L of a = L @ L.T (reads a's lower triangle)."""

    def abstract_eval(self, a: Aval):
        _square("cholesky", a)
        return (a,)

    def impl(self, a):
        return np.linalg.cholesky(a)

    def vjp(self, cts, ins, outs, active):
        (ct,), (L,) = cts, outs
        n = L.shape[-1]
        phi = ops.mul(_tril(ops.matmul(ops.swap_last(L), ct)),
                      ops.broadcast_to(ops.constant(L, 1 - 0.5 * np.eye(n, dtype=L.dtype)), shape=tuple(L.shape)))
        lt = ops.swap_last(L)
        s = ops.swap_last(ops.solve(lt, ops.swap_last(ops.solve(lt, phi))))   # L^-T phi L^-1
        return [_lower_read(ops.mul(ops.add(s, ops.swap_last(s)), 0.5))]


class QR(Primitive):
    """The reduced QR factorization: q (..., m, k), r (..., k, n), k = min(m, n)."""

    multiple_results = True

    def abstract_eval(self, a: Aval):
        if a.ndim < 2 or a.dtype.kind != "f":
            raise ShapeError(f"qr: needs float matrices (..., m, n), got {a}")
        m, n = a.shape[-2:]
        k = min(m, n)
        return (Aval(a.shape[:-2] + (m, k), a.dtype), Aval(a.shape[:-2] + (k, n), a.dtype))

    def impl(self, a):
        q, r = np.linalg.qr(a, mode="reduced")
        return q, r

    def vjp(self, cts, ins, outs, active):
        (qbar, rbar), (a,), (q, r) = cts, ins, outs
        m, n = a.shape[-2:]
        if m >= n:
            return [_qr_square_vjp(q, r, qbar, rbar)]
        # wide: a = [x | y], r = [u | v], x = q u, v = q.T y
        lead = tuple((0, s, 1) for s in a.shape[:-2])
        cols = lambda v, lo, hi: ops.slice_(v, index=lead + ((0, v.shape[-2], 1), (lo, hi, 1)))   # noqa: E731
        u, vbar = cols(r, 0, m), cols(rbar, m, n)
        y = cols(a, m, n)
        xbar = _qr_square_vjp(q, u, ops.add(qbar, ops.matmul(y, ops.swap_last(vbar))), cols(rbar, 0, m))
        return [ops.concatenate(xbar, ops.matmul(q, vbar), axis=a.ndim - 1)]


def _qr_square_vjp(q, r, qbar, rbar):
    """m >= n: abar = (qbar + q copyltu(M)) r^-T, M = r rbar^T - qbar^T q, copyltu(M) the symmetric
    matrix with M's lower triangle (Liao et al. 2019, "Differentiable programming tensor networks")."""
    mm = ops.sub(ops.matmul(r, ops.swap_last(rbar)), ops.matmul(ops.swap_last(qbar), q))
    lower = _tril(mm, -1)
    n = mm.shape[-1]
    copyltu = ops.add(ops.add(lower, ops.swap_last(lower)), ops.select(_mask(mm, np.eye(n, dtype=bool)), mm, ops.zeros_like(mm)))
    return _right_solve_t(ops.add(qbar, ops.matmul(q, copyltu)), r)


class Eigh(Primitive):
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices, from the lower triangle."""

    multiple_results = True

    def abstract_eval(self, a: Aval):
        _square("eigh", a)
        return (Aval(a.shape[:-1], a.dtype), a)

    def impl(self, a):
        w, v = np.linalg.eigh(a)
        return w, v

    def vjp(self, cts, ins, outs, active):
        (wbar, vbar), (w, v) = cts, outs
        vt = ops.swap_last(v)
        inner = ops.add(_diag_matrix(wbar), ops.mul(_inverse_gaps(w), ops.matmul(vt, vbar)))
        return [_lower_read(ops.matmul(ops.matmul(v, inner), vt))]


class SVD(Primitive):
    """The singular value decomposition: u (..., m, k), s (..., k) descending, vh (..., k, n), with
    k = min(m, n) (full_matrices=False); full_matrices=True gives square u and vh (no gradient)."""

    multiple_results = True

    def abstract_eval(self, a: Aval, *, full_matrices: bool):
        if a.ndim < 2 or a.dtype.kind != "f":
            raise ShapeError(f"svd: needs float matrices (..., m, n), got {a}")
        m, n = a.shape[-2:]
        k = min(m, n)
        um, vn = (m, n) if full_matrices else (k, k)
        return (Aval(a.shape[:-2] + (m, um), a.dtype), Aval(a.shape[:-2] + (k,), a.dtype),
                Aval(a.shape[:-2] + (vn, n), a.dtype))

    def impl(self, a, *, full_matrices):
        u, s, vh = np.linalg.svd(a, full_matrices=full_matrices)
        return u, s, vh

    def vjp(self, cts, ins, outs, active, *, full_matrices):
        """Townsend (2016), "Differentiating the singular value decomposition": exact for distinct,
        nonzero singular values."""
        if full_matrices and ins[0].shape[-1] != ins[0].shape[-2]:
            raise NotImplementedError("the gradient of np.linalg.svd(a, full_matrices=True) of a non-square matrix is "
                                      "not defined (the extra singular vectors are arbitrary); use full_matrices=False")
        (ubar, sbar, vhbar), (a,), (u, s, vh) = cts, ins, outs
        m, n = a.shape[-2:]
        v, vbar = ops.swap_last(vh), ops.swap_last(vhbar)
        ut, vt = ops.swap_last(u), vh
        f = _inverse_gaps(s, squared=True)
        j = ops.mul(f, ops.sub(ops.matmul(ut, ubar), ops.matmul(ops.swap_last(ubar), u)))
        k = ops.mul(f, ops.sub(ops.matmul(vt, vbar), ops.matmul(ops.swap_last(vbar), v)))
        core = ops.add(ops.add(ops.mul(j, _rows(s, j.shape)), _diag_matrix(sbar)), ops.mul(_cols(s, k.shape), k))
        grad = ops.matmul(ops.matmul(u, core), vt)
        inv_s = ops.div(ops.full_like(s, 1), s)
        if m > n:   # (I - u u^T) ubar s^-1 v^T
            left = ops.sub(ubar, ops.matmul(u, ops.matmul(ut, ubar)))
            grad = ops.add(grad, ops.matmul(ops.mul(left, _rows(inv_s, left.shape)), vt))
        if n > m:   # u s^-1 vbar^T (I - v v^T)
            right = ops.sub(ops.swap_last(vbar), ops.matmul(ops.matmul(ops.swap_last(vbar), v), vt))
            grad = ops.add(grad, ops.matmul(u, ops.mul(_cols(inv_s, right.shape), right)))
        return [grad]


solve = Solve("solve")
inv = Inv("inv")
slogdet = Slogdet("slogdet")
cholesky = Cholesky("cholesky")
qr = QR("qr")
eigh = Eigh("eigh")
svd = SVD("svd")


# -- issue 30: eig and eigvals (general matrices; complex results) -------------------------------------------


def eig_numpy(a: np.ndarray, vectors: bool) -> tuple:
    """NumPy's eig (or eigvals) of a stack of matrices, as complex arrays (contiguous): what every
    backend runs. NumPy's own result is real when every eigenvalue of a real matrix is: its dtype
    depends on the values, which tracing cannot know, so tracekern's is complex always (as JAX's)."""
    c = complex_dtype(a.dtype)
    if vectors:
        w, v = np.linalg.eig(a)
        return np.ascontiguousarray(w, c), np.ascontiguousarray(v, c)
    return (np.ascontiguousarray(np.linalg.eigvals(a), c),)


def _diagonal(m):
    """(..., n, n) -> (..., n)."""
    n = m.shape[-1]
    return ops.reduce_sum(ops.select(_mask(m, np.eye(n, dtype=bool)), m, ops.zeros_like(m)), axes=(m.ndim - 2,))


class Eig(Primitive):
    """Eigenvalues and (vectors=True) right eigenvectors of general square matrices: LAPACK's geev,
    through NumPy on every backend that runs it (its order; unit eigenvectors whose largest component
    is real). Outputs are complex; a real input's gradient is the real part of the complex one."""

    multiple_results = True

    def abstract_eval(self, a: Aval, *, vectors: bool):
        _square("eig", a, complex_ok=True)
        c = complex_dtype(a.dtype)
        w = Aval(a.shape[:-1], c)
        return (w, Aval(a.shape, c)) if vectors else (w,)

    def impl(self, a, *, vectors):
        return eig_numpy(a, vectors)

    def vjp(self, cts, ins, outs, active, *, vectors):
        """gA = V^-H (diag(gw) + conj(F) o (V^H gV - V^H V diag(Re diag(V^H gV)))) V^H, F_ij = 1 / (w_j - w_i)
        (the second term keeps the eigenvectors' unit norm; the loss must not depend on their phase,
        which LAPACK fixes by convention, as for PyTorch's linalg.eig)."""
        (a,) = ins
        w, v = outs if vectors else ops.eig(a, vectors=True)
        gw, gv = (cts[0], cts[1]) if vectors else (cts[0], None)
        vh = _adjoint(v)
        inner = _diag_matrix(gw if gw is not None else ops.zeros_like(w))
        if gv is not None:
            g = ops.matmul(vh, gv)
            norm = ops.matmul(vh, ops.mul(v, _rows(ops.convert(ops.real(_diagonal(g)), dtype=v.dtype), tuple(v.shape))))
            inner = ops.add(inner, ops.mul(_inverse_gaps(ops.conj(w)), ops.sub(g, norm)))
        ga = ops.solve(vh, ops.matmul(inner, vh))
        if not is_complex(a.dtype):
            ga = ops.convert(ops.real(ga), dtype=a.dtype)
        return [ga]


eig = Eig("eig")
