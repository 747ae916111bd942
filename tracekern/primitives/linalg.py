"""matmul: (..., m, k) @ (..., k, n) with equal batch dimensions.

tracekern.numpy reduces 1-D operands and batch broadcasting to this form."""
from __future__ import annotations

import numpy as np

from ..errors import ShapeError
from ..ir import Aval, complex_dtype, is_complex
from . import lanes, ops
from .core import Primitive

# A float product contracting at most this many entries is a loop of products and sums in the
# compiled backends, not a BLAS call (backends/fusion.py, small_products).
SMALL_CONTRACTION = 4


class Matmul(Primitive):
    fusion = "matmul"

    def batch(self, args, batched):
        """Both batched: a matmul over one more batch axis. One batched: its lanes side by side in
        one matrix (a's rows, or b's columns), one product with the other operand's matrices (one
        GEMM); but a short float contraction (SMALL_CONTRACTION, a loop in the compiled backends)
        multiplies lane by lane with the other operand broadcast (a view), so that its output is in
        the lanes' own layout, in one loop with the work around it, not in a stacked one that views
        must take apart."""
        (a, b), (a_b, b_b) = args, batched
        if a_b and b_b:
            return [ops.matmul(a, b)], [True]
        if a.shape[-1] <= SMALL_CONTRACTION and a.dtype.kind == "f":
            return [ops.matmul(*lanes.all_batched(args, batched))], [True]
        x = a if a_b else b
        n, nd = x.shape[0], len(x.shape)
        lead = tuple(x.shape[1:-2])
        if a_b:   # (n, ..., m, k) -> (..., n * m, k)
            stacked = ops.reshape(lanes.moveaxis(a, 0, nd - 3), new_shape=lead + (n * a.shape[-2], a.shape[-1]))
            out = ops.matmul(stacked, b)
            out = ops.reshape(out, new_shape=lead + (n, a.shape[-2], b.shape[-1]))
            return [lanes.moveaxis(out, nd - 3, 0)], [True]
        # (n, ..., k, p) -> (..., k, n * p)
        stacked = ops.reshape(lanes.moveaxis(b, 0, nd - 2), new_shape=lead + (b.shape[-2], n * b.shape[-1]))
        out = ops.matmul(a, stacked)
        out = ops.reshape(out, new_shape=lead + (a.shape[-2], n, b.shape[-1]))
        return [lanes.moveaxis(out, nd - 2, 0)], [True]

    def abstract_eval(self, a: Aval, b: Aval):
        if a.dtype != b.dtype:
            raise TypeError(f"matmul: operand dtypes differ ({a.dtype}, {b.dtype})")
        if a.ndim < 2 or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2] or a.shape[-1] != b.shape[-2]:
            raise ShapeError(f"matmul: shapes {a.shape} and {b.shape} do not fit (..., m, k) @ (..., k, n)")
        return (Aval(a.shape[:-1] + b.shape[-1:], a.dtype),)

    def impl(self, a, b):
        return np.matmul(_blas_operand(a), _blas_operand(b))

    def vjp(self, cts, ins, outs, active):
        # (complex: ct @ b^H and a^H @ ct, the complex convention)
        (ct,), (a, b) = cts, ins
        adjoint = (lambda m: ops.conj(ops.swap_last(m))) if a.dtype.kind == "c" else ops.swap_last
        return [ops.matmul(ct, adjoint(b)) if active[0] else None,
                ops.matmul(adjoint(a), ct) if active[1] else None]

    def jvp(self, tangents, ins, outs):
        (ta, tb), (a, b) = tangents, ins
        return [_total(None if ta is None else ops.matmul(ta, b), None if tb is None else ops.matmul(a, tb))]


def _blas_operand(a):
    """a, or a C-ordered copy of it where its matrices are not BLAS's (a unit stride along one of the last two axes):
    np.matmul of such an operand (a reversed or strided view, a broadcast) runs NumPy's loop without BLAS, which adds
    float32 products one by one in float32, where the np.dot or np.matmul that the user wrote, of the array the view
    was taken from, called BLAS (a float32 dot of 10**6 values: 1.5e-4 relative error against 2.5e-7)."""
    if a.ndim < 2 or a.size == 0 or a.dtype.kind not in "fc":   # (NumPy's integer matmul has no BLAS)
        return a
    item, (rows, cols), (s0, s1) = a.itemsize, a.shape[-2:], a.strides[-2:]
    if (s1 == item or cols == 1) and s0 % item == 0 and s0 >= cols * item:
        return a
    if (s0 == item or rows == 1) and s1 % item == 0 and s1 >= rows * item:
        return a
    return np.ascontiguousarray(a)


def _total(*terms):
    """The sum of the terms that are not None (zero tangents), None if all are."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    out = present[0]
    for t in present[1:]:
        out = ops.add(out, t)
    return out


matmul = Matmul("matmul")


# -- issue 19: np.linalg, with the standard reverse-mode rules --------------------------------------------
# Batched over leading axes; NumPy's impls (LAPACK); the cpu backend calls Numba's np.linalg (LAPACK
# through SciPy) per matrix, or the LAPACK routine NumPy calls where Numba's differs (eigh of the upper
# triangle). eigh and cholesky read one triangle only, as NumPy's do, so their gradients are triangular
# (the gradient of what the function reads).


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


def _triangle_read(g, uplo: str):
    """_lower_read, or its transpose for a function that reads the upper triangle (uplo "U")."""
    lower = _lower_read(g)
    return lower if uplo == "L" else ops.swap_last(lower)


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


def _stack_of_matrices(self, args, batched, **params):
    """The batching rule of a factorization of one matrix operand: it takes stacks (..., m, n), so
    the batch axis is one more stack axis, and so is every output's."""
    outs = ops.emit(self, args[0], **params)
    outs = list(outs) if self.multiple_results else [outs]
    return outs, [True] * len(outs)


def _right_solve_t(x, r):
    """x @ inv(r).T, as solve(r, x.T).T."""
    return ops.swap_last(ops.solve(r, ops.swap_last(x)))


def _right_solve(x, r):
    """x @ inv(r), as solve(r.T, x.T).T."""
    return ops.swap_last(ops.solve(ops.swap_last(r), ops.swap_last(x)))


def _diagonal(m):
    """(..., n, n) -> (..., n): the diagonal."""
    n = m.shape[-1]
    return ops.reduce_sum(ops.select(_mask(m, np.eye(n, dtype=bool)), m, ops.zeros_like(m)), axes=(m.ndim - 2,))


def _symmetric_from_lower(t):
    """The symmetric matrix whose lower triangle is t's (what eigh and cholesky read): the tangent
    of that reading; _lower_read is its transpose."""
    return ops.add(_tril(t), ops.swap_last(_tril(t, -1)))


class Solve(Primitive):
    """solve(a, b): x with a @ x = b; a (..., n, n), b (..., n, k) with the same batch axes."""

    def batch(self, args, batched):
        """b batched alone: its lanes side by side as columns, one solve per matrix of a; else
        a solve over one more batch axis."""
        (a, b), a_b = args, batched[0]
        if a_b:
            return [ops.solve(*lanes.all_batched(args, batched))], [True]
        n, nd = b.shape[0], len(b.shape)
        lead = tuple(b.shape[1:-2])
        stacked = ops.reshape(lanes.moveaxis(b, 0, nd - 2), new_shape=lead + (b.shape[-2], n * b.shape[-1]))
        out = ops.reshape(ops.solve(a, stacked), new_shape=lead + (b.shape[-2], n, b.shape[-1]))
        return [lanes.moveaxis(out, nd - 2, 0)], [True]

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

    def jvp(self, tangents, ins, outs):
        """d x = solve(a, d b - d a @ x)."""
        (ta, tb), (a, _), (x,) = tangents, ins, outs
        return [ops.solve(a, _total(tb, None if ta is None else ops.neg(ops.matmul(ta, x))))]


class Inv(Primitive):
    batch = _stack_of_matrices

    def abstract_eval(self, a: Aval):
        _square("inv", a, complex_ok=True)
        return (a,)

    def impl(self, a):
        return np.linalg.inv(a)

    def vjp(self, cts, ins, outs, active):
        yt = _adjoint(outs[0])
        return [ops.neg(ops.matmul(ops.matmul(yt, cts[0]), yt))]

    def jvp(self, tangents, ins, outs):
        y = outs[0]
        return [ops.neg(ops.matmul(ops.matmul(y, tangents[0]), y))]


class Slogdet(Primitive):
    """(sign, log|det|) of each matrix (np.linalg.slogdet; np.linalg.det is sign * exp(logabsdet),
    which is how NumPy computes it too)."""

    multiple_results = True

    batch = _stack_of_matrices

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

    def jvp(self, tangents, ins, outs):
        """The sign is locally constant; d log|det a| = trace(inv(a) @ d a)."""
        (t,), (a,) = tangents, ins
        return [None, ops.reduce_sum(ops.mul(ops.swap_last(ops.inv(a)), t), axes=(a.ndim - 2, a.ndim - 1))]


class Det(Primitive):
    """The determinant of each matrix, NumPy's: sign * exp(log|det|) of an LU factorization. Its own primitive,
    not slogdet's composition, for the gradient at a singular matrix: the cofactor matrix (finite; JAX's),
    where det * inv(a).T raised LinAlgError."""

    batch = _stack_of_matrices

    def abstract_eval(self, a: Aval):
        _square("det", a)
        return (Aval(a.shape[:-2], a.dtype),)

    def impl(self, a):
        return np.asarray(np.linalg.det(a), a.dtype)

    def vjp(self, cts, ins, outs, active):
        (a,) = ins
        return [ops.mul(_cols(_cols(cts[0], a.shape[:-1]), a.shape), _cofactors(a, outs[0]))]

    def jvp(self, tangents, ins, outs):
        """d det a = sum(cofactors(a) * d a)."""
        (t,), (a,) = tangents, ins
        return [ops.reduce_sum(ops.mul(_cofactors(a, outs[0]), t), axes=(a.ndim - 2, a.ndim - 1))]


def _cofactors(a, det):
    """The gradient of det: det * inv(a).T where a is invertible; where it is singular (slogdet's sign 0),
    det(u) det(vh) u diag(g) vh from the SVD a = u diag(s) vh, g_i the product of the other singular values
    (the transposed adjugate: 0 for a rank below n - 1). Each branch sees a stand-in where the other is taken
    (the identity, diag(1..n): invertible, distinct singular values), so neither raises nor gives NaN."""
    n = a.shape[-1]
    shape = tuple(a.shape)
    sign, _ = ops.slogdet(a)
    singular = _cols(_cols(ops.eq(sign, ops.zeros_like(sign)), shape[:-1]), shape)
    safe = ops.select(singular, ops.broadcast_to(_eye(a, n), shape=shape), a)
    invertible = ops.mul(_cols(_cols(det, shape[:-1]), shape), ops.swap_last(ops.inv(safe)))
    stand_in = ops.broadcast_to(ops.constant(a, np.diag(np.arange(1, n + 1)).astype(a.dtype)), shape=shape)
    u, s, vh = ops.svd(ops.select(singular, a, stand_in), full_matrices=False)
    others = ops.select(_mask(a, np.eye(n, dtype=bool)), ops.full_like(a, 1), _rows(s, shape))
    g = ops.reduce_prod(others, axes=(a.ndim - 1,))
    orient = ops.mul(ops.slogdet(u)[0], ops.slogdet(vh)[0])
    adj_t = ops.mul(_cols(_cols(orient, shape[:-1]), shape), ops.matmul(ops.mul(u, _rows(g, shape)), vh))
    return ops.select(singular, adj_t, invertible)


class Cholesky(Primitive):
    """The lower factor L of a = L @ L.T (reads a's lower triangle)."""

    batch = _stack_of_matrices

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

    def jvp(self, tangents, ins, outs):
        """d L = L phi(L^-1 dA L^-T), phi: the lower triangle with the diagonal halved."""
        (t,), (L,) = tangents, outs
        n = L.shape[-1]
        p = ops.solve(L, _symmetric_from_lower(t))                       # L^-1 dA
        x = ops.swap_last(ops.solve(L, ops.swap_last(p)))                # L^-1 dA L^-T
        half = ops.broadcast_to(ops.constant(L, 1 - 0.5 * np.eye(n, dtype=L.dtype)), shape=tuple(L.shape))
        return [ops.matmul(L, ops.mul(_tril(x), half))]


class QR(Primitive):
    """The reduced QR factorization: q (..., m, k), r (..., k, n), k = min(m, n)."""

    multiple_results = True

    batch = _stack_of_matrices

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

    def jvp(self, tangents, ins, outs):
        (t,), (a,), (q, r) = tangents, ins, outs
        m, n = a.shape[-2:]
        if m >= n:
            return list(_qr_square_jvp(q, r, t))
        # wide: a = [x | y], r = [u | v], x = q u, v = q.T y
        lead = tuple((0, s, 1) for s in a.shape[:-2])
        cols = lambda v, lo, hi: ops.slice_(v, index=lead + ((0, v.shape[-2], 1), (lo, hi, 1)))   # noqa: E731
        dq, du = _qr_square_jvp(q, cols(r, 0, m), cols(t, 0, m))
        dv = ops.add(ops.matmul(ops.swap_last(dq), cols(a, m, n)), ops.matmul(ops.swap_last(q), cols(t, m, n)))
        return [dq, ops.concatenate(du, dv, axis=a.ndim - 1)]


def _qr_square_vjp(q, r, qbar, rbar):
    """m >= n: abar = (qbar + q copyltu(M)) r^-T, M = r rbar^T - qbar^T q, copyltu(M) the symmetric
    matrix with M's lower triangle (Liao et al. 2019, "Differentiable programming tensor networks")."""
    mm = ops.sub(ops.matmul(r, ops.swap_last(rbar)), ops.matmul(ops.swap_last(qbar), q))
    lower = _tril(mm, -1)
    n = mm.shape[-1]
    copyltu = ops.add(ops.add(lower, ops.swap_last(lower)), ops.select(_mask(mm, np.eye(n, dtype=bool)), mm, ops.zeros_like(mm)))
    return _right_solve_t(ops.add(qbar, ops.matmul(q, copyltu)), r)


def _qr_square_jvp(q, r, t):
    """m >= n: with c = q^T dA r^-1 and w = tril(c, -1) - tril(c, -1)^T (skew-symmetric),
    dq = q (w - c) + dA r^-1 and dr = (c - w) r (JAX's rule)."""
    dx_rinv = _right_solve(t, r)
    c = ops.matmul(ops.swap_last(q), dx_rinv)
    lower = _tril(c, -1)
    w = ops.sub(lower, ops.swap_last(lower))
    return ops.add(ops.matmul(q, ops.sub(w, c)), dx_rinv), ops.matmul(ops.sub(c, w), r)


class Eigh(Primitive):
    """Eigenvalues (ascending) and eigenvectors of symmetric matrices, from the triangle `uplo` names: "L" (lower)
    or "U" (upper). Each is LAPACK's ?syevd on that triangle, as NumPy computes it: the two are different
    computations, whose eigenvectors may differ in sign (the transpose's lower triangle is not "U")."""

    multiple_results = True

    batch = _stack_of_matrices

    def abstract_eval(self, a: Aval, *, uplo: str):
        _square("eigh", a)
        if uplo not in ("L", "U"):
            raise ValueError(f"eigh: uplo must be 'L' or 'U', got {uplo!r}")
        return (Aval(a.shape[:-1], a.dtype), a)

    def impl(self, a, *, uplo):
        w, v = np.linalg.eigh(a, UPLO=uplo)
        return w, v

    sparse_cotangents = True

    def vjp(self, cts, ins, outs, active, *, uplo):
        """A(bar) = v (diag(wbar) + F o v^T vbar) v^T. Without vbar (eigenvalues only, a symbolic zero)
        its term is left out: finite at repeated eigenvalues (0 * inf there was NaN)."""
        (wbar, vbar), (w, v) = cts, outs
        vt = ops.swap_last(v)
        inner = _diag_matrix(wbar if wbar is not None else ops.zeros_like(w))
        if vbar is not None:
            inner = ops.add(inner, ops.mul(_inverse_gaps(w), ops.matmul(vt, vbar)))
        return [_triangle_read(ops.matmul(ops.matmul(v, inner), vt), uplo)]

    def jvp(self, tangents, ins, outs, *, uplo):
        """With m = v^T dA v (dA the symmetric matrix of the triangle read): dw = diag(m), dv = v (F * m),
        F_ij = 1 / (w_j - w_i) off the diagonal."""
        (t,), (w, v) = tangents, outs
        dA = _symmetric_from_lower(t if uplo == "L" else ops.swap_last(t))
        m = ops.matmul(ops.matmul(ops.swap_last(v), dA), v)
        return [_diagonal(m), ops.matmul(v, ops.mul(_inverse_gaps(w), m))]


class SVD(Primitive):
    """The singular value decomposition: u (..., m, k), s (..., k) descending, vh (..., k, n), with
    k = min(m, n) (full_matrices=False); full_matrices=True gives square u and vh (no gradient)."""

    multiple_results = True

    batch = _stack_of_matrices

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

    sparse_cotangents = True

    def vjp(self, cts, ins, outs, active, *, full_matrices):
        """Townsend (2016), "Differentiating the singular value decomposition": exact for distinct,
        nonzero singular values; with u and vh unused (symbolic zeros), u diag(sbar) vh, exact at ties
        and zeros too."""
        (ubar, sbar, vhbar), (a,), (u, s, vh) = cts, ins, outs
        if ubar is None and vhbar is None:   # the singular values alone: u diag(sbar) vh, finite at ties and zeros
            m, n = a.shape[-2:]
            k, lead = min(m, n), tuple((0, d, 1) for d in a.shape[:-2])
            u = ops.slice_(u, index=lead + ((0, m, 1), (0, k, 1))) if u.shape[-1] != k else u
            vh = ops.slice_(vh, index=lead + ((0, k, 1), (0, n, 1))) if vh.shape[-2] != k else vh
            return [ops.matmul(ops.mul(u, _rows(sbar, u.shape)), vh)]
        if full_matrices and ins[0].shape[-1] != ins[0].shape[-2]:
            raise NotImplementedError("the gradient of np.linalg.svd(a, full_matrices=True) of a non-square matrix is "
                                      "not defined (the extra singular vectors are arbitrary); use full_matrices=False")
        ubar = ubar if ubar is not None else ops.zeros_like(u)
        sbar = sbar if sbar is not None else ops.zeros_like(s)
        m, n = a.shape[-2:]
        v, vbar = ops.swap_last(vh), ops.swap_last(vhbar if vhbar is not None else ops.zeros_like(vh))
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

    def jvp(self, tangents, ins, outs, *, full_matrices):
        """With ds = u^T dA v: d s = diag(ds); du and dv from F_ij = 1 / (s_j^2 - s_i^2) and, for a
        non-square matrix, the part of dA outside the span of u (tall) or v (wide) (JAX's rule)."""
        if full_matrices and ins[0].shape[-1] != ins[0].shape[-2]:
            raise NotImplementedError("the derivative of np.linalg.svd(a, full_matrices=True) of a non-square matrix is "
                                      "not defined (the extra singular vectors are arbitrary); use full_matrices=False")
        (t,), (a,), (u, s, vh) = tangents, ins, outs
        m, n = a.shape[-2:]
        v = ops.swap_last(vh)
        ds = ops.matmul(ops.matmul(ops.swap_last(u), t), v)
        f = _inverse_gaps(s, squared=True)
        dss = ops.mul(_rows(s, ds.shape), ds)     # ds @ diag(s)
        sds = ops.mul(_cols(s, ds.shape), ds)     # diag(s) @ ds
        du = ops.matmul(u, ops.mul(f, ops.add(dss, ops.swap_last(dss))))
        dv = ops.matmul(v, ops.mul(f, ops.add(sds, ops.swap_last(sds))))
        inv_s = ops.div(ops.full_like(s, 1), s)
        if m > n:
            dav = ops.matmul(t, v)
            rest = ops.sub(dav, ops.matmul(u, ops.matmul(ops.swap_last(u), dav)))
            du = ops.add(du, ops.mul(rest, _rows(inv_s, rest.shape)))
        if n > m:
            dau = ops.matmul(ops.swap_last(t), u)
            rest = ops.sub(dau, ops.matmul(v, ops.matmul(vh, dau)))
            dv = ops.add(dv, ops.mul(rest, _rows(inv_s, rest.shape)))
        return [du, _diagonal(ds), ops.swap_last(dv)]


solve = Solve("solve")
inv = Inv("inv")
slogdet = Slogdet("slogdet")
det = Det("det")
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

    batch = _stack_of_matrices

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

    def jvp(self, tangents, ins, outs, *, vectors):
        """With m = V^-1 dA V: dw = diag(m), dV = V (F o m), F_ij = 1 / (w_j - w_i) off the diagonal, less
        each column's real component along itself (the eigenvectors keep unit norm; their phase, which
        LAPACK fixes by convention, is left alone: the transpose of vjp's gauge)."""
        (t,), (a,) = tangents, ins
        w, v = outs if vectors else ops.eig(a, vectors=True)
        ta = t if is_complex(t.dtype) else ops.convert(t, dtype=v.dtype)
        m = ops.matmul(ops.solve(v, ta), v)
        dw = _diagonal(m)
        if not vectors:
            return [dw]
        dv = ops.matmul(v, ops.mul(_inverse_gaps(w), m))
        along = ops.convert(ops.real(_diagonal(ops.matmul(_adjoint(v), dv))), dtype=v.dtype)
        return [dw, ops.sub(dv, ops.mul(v, _rows(along, tuple(v.shape))))]


eig = Eig("eig")
