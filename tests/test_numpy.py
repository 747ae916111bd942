"""tk.numpy against NumPy, driven by the coverage table (tests/numpy_cases.py).

Each family of cases runs as one traced program per backend and dtype: a dict of every case's
outputs (so a family compiles a few kernels, not one set per name). For each backend (interpret,
cpu, cuda on the simulator) it checks values against NumPy in float32 and float64 (integer and
bool cases in their own dtypes), results compared as pytrees (structure first, dtypes exactly);
and in float64 one value_and_grad program gives every differentiable case's gradient, checked
against central finite differences of NumPy's own function (interpret) and against the
interpreter's gradient (cpu, cuda)."""
import functools
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tracekern as tk
import tracekern.numpy as tnp
from tests.conftest import to_host
from tests.numpy_cases import ALIASES, CASES, FAMILIES, README, case_inputs, numpy_names, readme_section
from tracekern.errors import TracekernError

BACKENDS = ("interpret", "cpu", "cuda")
CONSTANT_KINDS = ("int", "bool", "given")


def _quiet(fn, *args):
    """NumPy's reference, without its warnings (NaN, division by zero, deprecations)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _split(case, args):
    xs = tuple(a for s, a in zip(case.inputs, args) if s.kind not in CONSTANT_KINDS)
    cs = tuple(a for s, a in zip(case.inputs, args) if s.kind in CONSTANT_KINDS)
    return xs, cs


def _merge(case, xs, cs):
    xs, cs = iter(xs), iter(cs)
    return [next(cs) if s.kind in CONSTANT_KINDS else next(xs) for s in case.inputs]


def _outputs(cases, xs, cs):
    return {c.id: c.fn(*_merge(c, xs[c.id], cs[c.id])) for c in cases}


def _float_leaves(tree):
    """The float and complex leaves (the differentiable ones)."""
    return [leaf for leaf in tk.tree_flatten(tree)[0]
            if (leaf.dtype if hasattr(leaf, "dtype") else np.asarray(leaf).dtype).kind in "fc"]


def _grad_dtype(case) -> str:
    """The dtype a case's gradient is checked in: float64, or complex128 for the complex rows."""
    return "float64" if "float64" in case.dtypes else "complex128"


def _weight(rng, leaf):
    """A fixed random weight for each element: w1 + i w2 for a complex leaf (the loss is Re(sum(conj(w) out)),
    so the weight is the output's cotangent under tracekern's convention)."""
    w = rng.uniform(0.5, 1.5, np.shape(leaf))
    return w + 1j * rng.uniform(-1.0, 1.0, np.shape(leaf)) if np.iscomplexobj(leaf) else w


@functools.cache
def _data(family: str, dtype: str):
    """(cases, float inputs, constant inputs, NumPy's results) of a family's cases in `dtype`."""
    cases = [c for c in FAMILIES[family] if dtype in c.dtypes]
    args = {c.id: case_inputs(c, dtype) for c in cases}
    xs = {c.id: _split(c, args[c.id])[0] for c in cases}
    cs = {c.id: _split(c, args[c.id])[1] for c in cases}
    want = {c.id: _quiet(c.ref or c.fn, *args[c.id]) for c in cases}
    return cases, xs, cs, want


@functools.cache
def _weights(family: str, dtype: str):
    """A fixed random weight per float output element of each differentiable case (the loss)."""
    cases, _, _, want = _data(family, dtype)
    rng = np.random.default_rng(5)
    return {c.id: [_weight(rng, leaf) for leaf in _float_leaves(want[c.id])] for c in cases if c.grad}


def _cotangent(cases, want, weights):
    """The weights as the cotangent of the outputs (zeros for integer and bool leaves)."""
    out = {}
    for c in cases:
        leaves, td = tk.tree_flatten(want[c.id])
        ws = iter(weights[c.id])
        out[c.id] = tk.tree_unflatten(td, [next(ws).astype(np.asarray(leaf).dtype) if np.asarray(leaf).dtype.kind in "fc"
                                           else np.zeros_like(leaf) for leaf in leaves])
    return out


@functools.cache
def _finite_differences(family: str, dtype: str):
    """d loss_c / d x for each differentiable case, by central differences of NumPy's function (for a
    complex x, of its real and imaginary parts: d/dx + i d/dy, tracekern's convention)."""
    cases, xs, cs, _ = _data(family, dtype)
    weights = _weights(family, dtype)
    result = {}
    for c in cases:
        if not c.grad:
            continue
        ref = c.ref or c.fn

        def loss(xv, c=c, ref=ref):
            out = _quiet(ref, *_merge(c, xv, cs[c.id]))
            return sum(float(np.sum(np.real(np.conj(w) * leaf))) for leaf, w in zip(_float_leaves(out), weights[c.id]))

        grads = []
        for k, x in enumerate(xs[c.id]):
            g = np.zeros_like(x)
            for i in np.ndindex(x.shape):
                eps = 1e-6 * max(1.0, abs(complex(x[i])))
                for unit in ((1, 1j) if np.iscomplexobj(x) else (1,)):
                    up, down = [list(xs[c.id]) for _ in range(2)]
                    up[k], down[k] = x.copy(), x.copy()
                    up[k][i] += eps * unit
                    down[k][i] -= eps * unit
                    g[i] += unit * (loss(up) - loss(down)) / (2 * eps)
            grads.append(g)
        result[c.id] = tuple(grads)
    return result


def _compare(got, want, dtype: str, cases, what: str):
    """Per case: the same pytree structure, dtypes and shapes, values within the case's tolerance."""
    bad = []
    for c in cases:
        g_leaves, g_td = tk.tree_flatten(to_host(got[c.id]))
        w_leaves, w_td = tk.tree_flatten(want[c.id])
        if g_td != w_td:
            bad.append(f"{c.id}: structure {g_td!r} != NumPy's {w_td!r}")
            continue
        for k, (g, w) in enumerate(zip(g_leaves, w_leaves)):
            g, w = np.asarray(g), np.asarray(w)
            if g.dtype != w.dtype or g.shape != w.shape:
                bad.append(f"{c.id} leaf {k}: {g.dtype}{list(g.shape)} != NumPy's {w.dtype}{list(w.shape)}")
                continue
            if w.dtype.kind not in "fc":
                if not np.array_equal(g, w):
                    bad.append(f"{c.id} leaf {k}: {g.ravel()[:8]} != {w.ravel()[:8]}")
                continue
            tol = 1e-9 if dtype in ("float64", "complex128") else c.tol32   # (the inputs' precision)
            finite = np.abs(w[np.isfinite(w)])
            scale = 1.0 + (float(finite.max()) if finite.size else 0.0)
            try:
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)
            except AssertionError as err:
                bad.append(f"{c.id} leaf {k} ({what}, {dtype}): {str(err).strip().splitlines()[-3:]}")
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad)


def _run(cases, backend, xs, cs, cotangent=None):
    """The family's program on (xs, cs): its outputs, or with a cotangent (outputs, gradients of xs)
    by tk.vjp. On failure, the cases that fail on their own (a batched program hides which)."""
    def run(sub):
        f = lambda xs, cs: _outputs(sub, xs, cs)   # noqa: E731
        ids = [c.id for c in sub]
        args = ({i: xs[i] for i in ids}, {i: cs[i] for i in ids})
        if cotangent is None:
            return tk.jit(f, backend=backend)(*args)

        def joint(xs, cs, ct):   # (one step: forward and backward loops over a domain fuse)
            out, pullback = tk.vjp(lambda xs: f(xs, cs), xs)
            return out, pullback(ct)[0]
        return tk.jit(joint, backend=backend)(*args, {i: cotangent[i] for i in ids})

    try:
        with np.errstate(all="ignore"):   # (the interpreter is NumPy, which warns about the NaN it makes)
            return run(cases)
    except Exception as err:   # noqa: BLE001 (find the culprits, then fail)
        culprits = []
        for c in cases:
            try:
                with np.errstate(all="ignore"):
                    run([c])
            except Exception as e:   # noqa: BLE001
                culprits.append(f"{c.id}: {type(e).__name__}: {str(e)[:400]}")
        raise AssertionError(f"{type(err).__name__}: {str(err)[:600]}\nfailing cases:\n" + "\n".join(culprits)) from err


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.filterwarnings("ignore:`row_stack` alias is deprecated:DeprecationWarning")   # (its own row tests it)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # (NaN cases; the simulator is NumPy)
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")   # (the simulator: i0 of 750 is inf)
def test_family(family, backend):
    """Values in every dtype of the family; in float64, the differentiable cases' gradients (one
    tk.vjp, the weights as cotangent) against finite differences (interpret) or the interpreter."""
    dtypes = sorted({d for c in FAMILIES[family] for d in c.dtypes})
    for dtype in dtypes:
        cases, xs, cs, want = _data(family, dtype)
        cases = [c for c in cases if backend != "cuda" or c.cuda]
        differentiated = [c for c in cases if c.grad and _grad_dtype(c) == dtype]
        others = [c for c in cases if c not in differentiated]
        if others:
            _compare(_run(others, backend, xs, cs), want, dtype, others, "value")
        if not differentiated:
            continue
        got, grads = _run(differentiated, backend, xs, cs, _cotangent(differentiated, want, _weights(family, dtype)))
        _compare(got, want, dtype, differentiated, "value")
        grads = to_host(grads)
        if backend == "interpret":
            expected, what, rtol = _finite_differences(family, dtype), "finite differences", 1e-5
        else:
            expected, what, rtol = _interpreted_gradients(family, dtype, tuple(c.id for c in differentiated)), "the interpreter", 1e-8
        bad = []
        for c in differentiated:
            for k, (g, e) in enumerate(zip(grads[c.id], expected[c.id])):
                if g is None or e is None:   # unconnected (it reaches the output only through integers)
                    if not (g is None and (e is None or not np.any(e))):
                        bad.append(f"{c.id} input {k}: gradient {g!r} against {what}'s {e!r}")
                    continue
                scale = 1.0 + float(np.max(np.abs(e))) if np.size(e) else 1.0
                try:
                    np.testing.assert_allclose(g, e, rtol=rtol, atol=rtol * scale)
                except AssertionError as err:
                    bad.append(f"{c.id} input {k} against {what}: {str(err).strip().splitlines()[-3:]}")
        assert not bad, "gradients:\n" + "\n".join(bad)


@functools.cache
def _interpreted_gradients(family, dtype, ids):
    cases, xs, cs, want = _data(family, dtype)
    cases = [c for c in cases if c.id in ids]
    return _run(cases, "interpret", xs, cs, _cotangent(cases, want, _weights(family, dtype)))[1]


def test_interpreter_gradients_match_finite_differences_exactly_where_they_must():
    """check_grad's own tool agrees on a few rows (an independent path: tk.check_grad on cpu)."""
    for cid in ("cumprod", "solve", "take_along_axis", "at_set", "svd"):
        case = next(c for c in CASES if c.id == cid)
        args = case_inputs(case, "float64")
        xs, cs = _split(case, args)
        f = lambda *x, case=case, cs=cs: sum(np.sum(leaf) for leaf in _float_leaves(case.fn(*_merge(case, x, cs))))  # noqa: E731
        tk.check_grad(f, xs)


def test_linalg_factorizations_are_numpys_own_results():
    """Issue 25: eigh(UPLO='U') gave eigenvectors of other signs than NumPy's (it was the lower triangle of the
    transpose, a different LAPACK computation), and float32 matrices differed (NumPy factorizes them in float64).
    Every factorization on cpu and interpret against NumPy's own results (signs of eigenvectors, singular vectors
    and q included, not only reconstructions), batched, non-symmetric input to eigh (one triangle read), both
    dtypes, exactly up to rounding."""
    rng = np.random.default_rng(25)

    def f(a, t, w):
        spd = a @ np.swapaxes(a, -1, -2) + 6 * np.eye(4)
        return {"eigh_L": np.linalg.eigh(a), "eigh_U": np.linalg.eigh(a, UPLO="U"),
                "eigvalsh_U": np.linalg.eigvalsh(a, UPLO="U"), "probe": np.linalg.eigh(a[0, 0], UPLO="U")[1][0, :].sum(),
                "svd": np.linalg.svd(t, full_matrices=False), "svd_wide": np.linalg.svd(w), "qr": np.linalg.qr(t),
                "qr_wide": np.linalg.qr(w, mode="complete"), "qr_r": np.linalg.qr(t, mode="r"),
                "cholesky": np.linalg.cholesky(spd), "cholesky_upper": np.linalg.cholesky(spd, upper=True),
                "slogdet": np.linalg.slogdet(a), "inv": np.linalg.inv(spd)}

    for dtype in (np.float64, np.float32):
        args = [rng.standard_normal(s).astype(dtype) for s in ((2, 3, 4, 4), (2, 5, 3), (3, 5))]
        want = f(*args)
        for backend in ("interpret", "cpu"):
            got = tk.jit(f, backend=backend)(*args)
            g_leaves, g_td = tk.tree_flatten(got)
            w_leaves, w_td = tk.tree_flatten(want)
            assert g_td == w_td, (backend, g_td, w_td)
            for k, (g, w) in enumerate(zip(g_leaves, w_leaves)):
                assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w), (backend, dtype, k)
                tol = 1e-12 if dtype == np.float64 else 1e-5
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{backend} {dtype.__name__} leaf {k}")


def test_eigenvalue_and_singular_value_gradients_are_finite_at_ties_and_zeros():
    """The gradient of a function of the eigenvalues alone (eigvalsh, eigh(a)[0]) at repeated eigenvalues, and of
    the singular values alone (their sum, the nuclear norm) at repeated or zero ones, was NaN: the eigenvector
    terms, 1 / (w_j - w_i) times an unused output's zero cotangent, were 0 * inf. Unused outputs now get no
    cotangent (a symbolic zero, as JAX's). np.linalg.svd(w)[1] of a non-square w (full_matrices=True, NumPy's
    default) raised NotImplementedError for its gradient though only s was used. Batched, on interpret and cpu,
    against the exact gradients (a symmetric matrix's eigenvalues' squares: 2a, read from the lower triangle;
    the nuclear norm: u vh; the singular values' sum: u[:, :k] vh[:k])."""
    tall = np.stack([np.eye(3, 2), np.zeros((3, 2))])        # s = (1, 1) and (0, 0)
    sym = np.stack([np.eye(3), np.zeros((3, 3))])             # w = (1, 1, 1) and (0, 0, 0)
    wide = np.random.default_rng(3).standard_normal((2, 3))

    def f(a, t, w):
        return (np.sum(np.linalg.eigvalsh(a) ** 2) + np.sum(np.linalg.eigh(a)[0]) + np.linalg.norm(t, "nuc", axis=(1, 2)).sum()
                + np.linalg.svd(t, compute_uv=False).sum() + np.linalg.svd(w)[1].sum())

    u, _, vh = np.linalg.svd(tall, full_matrices=False)
    uw, _, vhw = np.linalg.svd(wide, full_matrices=False)
    want = (np.tril(2 * sym + 2 * np.swapaxes(sym, 1, 2), -1) + 2 * sym * np.eye(3) + np.eye(3), 2 * u @ vh, uw @ vhw)
    for backend in ("interpret", "cpu"):
        got = tk.jit(tk.grad(f, argnums=(0, 1, 2)), backend=backend)(sym, tall, wide)
        for g, w in zip(got, want):
            assert np.shape(g) == np.shape(w)
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=backend)


def test_det_gradient_at_singular_matrices_is_the_cofactor_matrix():
    """The gradient of np.linalg.det at a singular matrix raised LinAlgError (det * inv(a).T, through slogdet); det
    is a polynomial, its gradient the cofactor matrix (JAX's). Batched (singular of rank n - 1 and n - 2, invertible
    with a negative determinant) on interpret and cpu, against the cofactors from the minors."""
    a = np.stack([np.outer([1.0, 2, 3], [1.0, 0, 1]) + np.diag([0.0, 0, 1]), np.outer([1.0, 2, 3], [2.0, 1, 1]),
                  np.array([[0.0, 1, 0], [1, 0, 0], [0, 0, 2]])])
    minors = lambda m, i, j: np.linalg.det(np.delete(np.delete(m, i, 0), j, 1))   # noqa: E731
    want = np.array([[[(-1) ** (i + j) * minors(m, i, j) for j in range(3)] for i in range(3)] for m in a])
    assert np.abs(want[0]).max() > 0.5 and np.linalg.det(a[0]) == 0   # (a nonzero cofactor matrix of a singular matrix)
    for backend in ("interpret", "cpu"):
        value, got = tk.jit(tk.value_and_grad(lambda m: np.linalg.det(m).sum()), backend=backend)(a)
        assert value == np.linalg.det(a).sum()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=backend)


def test_pinv_gradient_at_repeated_singular_values_is_finite_and_exact():
    """np.linalg.pinv's gradient went through the SVD's, NaN wherever singular values repeat: at a rotation, at
    c * I (hermitian=True too), at a wide matrix of orthonormal rows, at the zero matrix. It is now Golub and
    Pereyra's formula (JAX's): at an invertible matrix inv's gradient -p^T W p^T (and inv's Hessian, by forward over
    reverse), at a wide matrix of full row rank -p^T W p^T + p^T p W^T (I - p a), at the zero matrix 0 (JAX's)."""
    rot = np.array([[0.6, -0.8], [0.8, 0.6]])
    wide = np.concatenate([rot, np.zeros((2, 1))], axis=1)
    w2, w3 = np.array([[1.0, -2.0], [0.5, 3.0]]), np.array([[1.0, -2.0], [0.5, 3.0], [2.0, 1.0]])

    def grads(r, c, v, z):
        loss = lambda m, w, **kw: np.sum(np.linalg.pinv(m, **kw) * w)   # noqa: E731
        return (tk.grad(loss)(r, w2), tk.grad(lambda m: loss(m, w2, hermitian=True))(c), tk.grad(loss)(v, w3),
                tk.grad(loss)(z, w2), tk.hessian(loss)(r, w2), tk.hessian(lambda m: np.sum(np.linalg.inv(m) * w2))(r))

    p, pw = rot.T, np.linalg.pinv(wide)
    c = 1.2 * np.eye(2)
    want = (-p.T @ w2 @ p.T, np.tril(-(w2 + w2.T) / 1.44, -1) + np.diag(np.diag(-w2 / 1.44)),
            -pw.T @ w3 @ pw.T + pw.T @ pw @ w3.T @ (np.eye(3) - pw @ wide), np.zeros((2, 2)))
    for backend in ("interpret", "cpu"):
        got = tk.jit(grads, backend=backend)(rot, c, wide, np.zeros((2, 2)))
        for k, (g, e) in enumerate(zip(got, want)):
            assert np.shape(g) == np.shape(e), (backend, k)
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=f"{backend} {k}")
        np.testing.assert_allclose(got[4], got[5], rtol=1e-12, atol=1e-12, err_msg=f"{backend} Hessian")


def test_integer_dtype_statistics_are_numpys():
    """np.mean/var(dtype=<an integer dtype>) truncate as NumPy does (they were float64); np.std of one is an integer
    when its result is 0-d and raises otherwise (NumPy's sqrt cannot cast back); nanmean/nanvar of integer arrays are
    np.mean/np.var, dtype= included (nanvar(ddof >= n) was NaN, NumPy's var: inf); a float array's nanmean with an
    integer dtype raises as NumPy's. Not table rows: their float64 division is right in an integer kernel, which
    tests/ptx_corpus.py would flag."""
    def f(a):
        return {"mean": np.mean(a, axis=1, dtype=np.int32), "fmean": np.mean(a * 1.5, dtype=np.int64),
                "var": np.var(a, axis=0, dtype=np.int64), "std": np.std(a * 0.7, dtype=np.int32),
                "nanmean": np.nanmean(a, axis=0, dtype=np.int64), "nanvar": np.nanvar(a, axis=1, dtype=np.float64, ddof=5)}

    a = np.array([[3, -7, 2, 8], [1, 1, -4, 6], [-9, 5, 0, 2]], np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = f(a)
        for backend in ("interpret", "cpu"):
            got = tk.jit(f, backend=backend)(a)
            assert sorted(got) == sorted(want)
            for k in want:
                assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, (backend, k, got[k].dtype)
                np.testing.assert_array_equal(got[k], want[k], err_msg=f"{backend} {k}")
    for fn in (lambda a: np.std(a, axis=0, dtype=np.int64), lambda a: np.nanmean(a * 1.0, dtype=np.int64)):
        with pytest.raises(TypeError):
            fn(a)   # (NumPy's own)
        with pytest.raises(TypeError, match="test_numpy.py"):
            tk.jit(fn, backend="interpret")(a)


def test_inplace_operators_keep_the_arrays_dtype_and_shape():
    """x op= y writes into x in NumPy: a float32 x += a float64 array stays float32, an int32 x *= an int64 stays
    int32 (they became float64 and int64, silently); where NumPy cannot write the result into x (int32 x /= 2, or a
    result that broadcasts to a larger shape) tracing raises as NumPy does. Against NumPy on interpret and cpu."""
    def f(x, a):
        y, n = x.astype(np.float32), a * 1
        y += x
        y *= 2.5
        y **= 2
        y //= np.float64(0.75)
        z = x.copy()
        z -= y
        z /= a
        n *= a.astype(np.int64)
        n += True
        n //= 2
        n <<= 1
        n |= a
        m = (x * 1).reshape(2, 2)   # (not a view of x: NumPy would write into the argument)
        m @= np.ones((2, 2))
        return {"y": y, "z": z, "n": n, "m": m}

    x, a = np.array([0.5, -1.5, 2.25, 4.0]), np.array([3, -2, 5, 7], np.int32)
    want = f(x, a)
    for backend in ("interpret", "cpu"):
        got = tk.jit(f, backend=backend)(x, a)
        assert sorted(got) == sorted(want)
        for k in want:
            assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape, (backend, k, got[k].dtype, want[k].dtype)
            np.testing.assert_allclose(got[k], want[k], rtol=1e-6, err_msg=f"{backend} {k}")

    def divide_ints(a):
        a /= 2
        return a

    def grow(x):
        x += np.ones((2, 4))
        return x

    for fn, arg, err in ((divide_ints, a, TypeError), (grow, x, ValueError)):
        with pytest.raises(err):
            fn(arg.copy())   # (NumPy's own)
        with pytest.raises(err, match="x .?= ") as info:
            tk.jit(fn, backend="interpret")(arg)
        assert "test_numpy.py" in str(info.value)


def test_array_methods_take_numpys_arguments():
    """ndarray's methods on traced arrays take the arguments NumPy's do, in NumPy's order (x.max(initial=),
    x.take(i, mode=), x.std(0, None, None, 1), x.astype(t, copy=False) raised TypeError, or read out= as ddof)."""
    def f(x):
        return (x.sum(0, None, None, True), x.mean(1, keepdims=True), x.max(0, None, True), x.max(initial=10.0),
                x.min(axis=1, initial=-5.0), x.prod(0, np.float32), x.std(0, None, None, 1), x.std(ddof=1, keepdims=True),
                x.all(0, keepdims=True), x.any(axis=None, keepdims=True), x.argmax(1, None, keepdims=True), x.argmin(axis=0),
                x.cumsum(1, np.float32), x.argsort(0, stable=True), x.repeat(2, 1), x.take([0, 2], 1, mode="clip"),
                x.take([5], mode="wrap"), x.round(1), x.diagonal(1), x.trace(0, 0, 1, np.float32), x.clip(min=0),
                x.ravel("C"), x.astype(np.float32, copy=False), x.copy(), x.reshape(3, 2, order="C"),
                x.sum(where=x > 0), x.mean(where=x > 0),
                np.sort(x[0]).searchsorted(x, "right"), np.take_along_axis(x, x.argpartition(1, axis=1), 1)[:, 1],
                x.compress([False, True], axis=0), (x[0] > 0).astype(np.int64).choose([x[0], x[1]]),
                x * (x.itemsize + x.astype(np.float32).nbytes))

    x = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    want = f(x)
    for backend in ("interpret", "cpu"):
        got = tk.jit(f, backend=backend)(x)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w), (backend, k)
            np.testing.assert_allclose(g, w, rtol=1e-6, err_msg=f"{backend} result {k}")
    with pytest.raises(TypeError, match="same_kind"):
        tk.jit(lambda x: x.astype(np.int32, casting="same_kind"), backend="interpret")(x)
    # (x.searchsorted, .argpartition, .compress, .choose, .itemsize, .nbytes raised AttributeError; the in-place
    # methods and those that need values raise errors that say what to write, naming the line)
    for method, args, what in [("partition", (1,), "np.partition"), ("resize", ((6,),), "np.resize"),
                               ("fill", (0.0,), "np.full_like"), ("put", ([0], [1.0]), "tk.at"),
                               ("item", (), "not known while tracing"), ("tolist", (), "not known while tracing")]:
        with pytest.raises(TypeError, match=what) as err:
            tk.jit(lambda x: getattr(x, method)(*args), backend="interpret")(x)
        assert "test_numpy.py" in str(err.value), (method, err.value)


def test_flat_reads_the_raveled_array():
    """x.flat[idx] of a traced array is NumPy's flat iterator read (it raised AttributeError): integers, slices (the
    x.flat[::n + 1] diagonal), index and boolean arrays, iteration, len; gradients flow; writing through it raises."""
    def f(x):
        return (x.flat[::4], x.flat[-1], x.flat[[[1, 2], [3, 5]]], x.T.flat[np.array([True, False, True, False, True, True])],
                x.flat[...], np.stack(list(x.flat)), x.flat[np.array(2)] * len(x.flat))

    x = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    want = f(x)
    for backend in ("interpret", "cpu"):
        got = tk.jit(f, backend=backend)(x)
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w), (backend, k)
            np.testing.assert_array_equal(g, w, err_msg=f"{backend} result {k}")
    np.testing.assert_array_equal(tk.grad(lambda x: np.sum(x.T.flat[1::2] * np.arange(1.0, 4.0)))(x),
                                  [[0.0, 0.0, 0.0], [1.0, 2.0, 3.0]])
    with pytest.raises(IndexError, match="too many indices for flat iterator"):
        tk.jit(lambda x: x.flat[0, 1], backend="interpret")(x)

    def write(x):
        x.flat[0] = 1.0
        return x
    with pytest.raises(TypeError, match=r"tk.at\(x.ravel\(\)\)") as err:
        tk.jit(write, backend="interpret")(x)
    assert "test_numpy.py" in str(err.value)


def test_tk_at_with_traced_index_arrays_holds_no_constant_of_xs_size():
    """tk.at(x)[i, j] with traced i, j (the general scatter path) found the flat positions by indexing a constant
    np.arange of x's size: a 300 x 300 x embedded 720 kB of int64 in the program (72 MB at 3000 x 3000, and the
    value grad and vjp ran alike). It indexes iota now, which kernels compute from their loop indices."""
    x, i, j = np.zeros((300, 300)), np.array([1, 2, 1]), np.array([4, 5, 4])

    def f(x, i, j):
        return tk.at(x)[i, 1:4].add(1.0), tk.at(x)[i, j].set(np.arange(3.0))

    for mode in ("forward", "grad"):
        graph = tk.make_ir(lambda x, i, j: sum(np.sum(y * y) for y in f(x, i, j)), mode=mode)(x, i, j)
        big = [e for e in graph.eqns if e.primitive.name == "const" and np.size(e.params["value"]) >= x.size // 2]
        assert not big, (mode, big)
    want = (x.copy(), x.copy())
    np.add.at(want[0], (i, slice(1, 4)), 1.0)
    want[1][i, j] = np.arange(3.0)
    for backend in ("interpret", "cpu"):
        for g, w in zip(tk.jit(f, backend=backend)(x, i, j), want, strict=True):
            np.testing.assert_array_equal(g, w)


def test_var_is_a_method_of_traced_arrays_as_of_ndarrays():
    """x.var() as NumPy's (its name was the traced value's IR variable: 'Var' object is not callable), with
    NumPy's arguments, and its gradient against central differences."""
    def f(x):
        return x.var(), x.var(0), x.var(axis=1, ddof=1, keepdims=True), x.var(None, np.float64, None, 1)

    x = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    want = f(x)
    for backend in ("interpret", "cpu"):
        got = tk.jit(f, backend=backend)(x)
        assert len(got) == len(want)
        for g, w in zip(got, want):
            assert np.asarray(g).dtype == np.asarray(w).dtype and np.shape(g) == np.shape(w)
            np.testing.assert_allclose(g, w, rtol=1e-12)
    loss = lambda x: x.var(axis=1, ddof=1).sum()   # noqa: E731
    g = tk.grad(loss)(x)
    eps, fd = 1e-6, np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        fd[i] = (np.var(x + d, axis=1, ddof=1).sum() - np.var(x - d, axis=1, ddof=1).sum()) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_linalg_rejects_what_numpy_rejects():
    """np.linalg.norm(m, axis=5) of a matrix took the axis modulo the rank (axis 1), a list of axes was accepted,
    matrix_power(a, 1.5) was matrix_power(a, 1), and pinv and matrix_rank took both cutoffs: NumPy raises for each
    (and for a repeated pair of axes), so does tracekern, naming the line."""
    m = np.eye(2) * 2.0
    calls = [(lambda m, axis=axis: np.linalg.norm(m, axis=axis), err)
             for axis, err in ((5, ValueError), (-3, ValueError), ([0, 1], TypeError), ((1, -1), ValueError))]
    calls += [(lambda m: np.linalg.matrix_power(m, 1.5), TypeError), (lambda m: np.linalg.pinv(m, 0.1, rtol=0.1), ValueError),
              (lambda m: np.linalg.matrix_rank(m, tol=0.1, rtol=0.1), ValueError)]
    for fn, err in calls:
        with pytest.raises(err):
            fn(m)
        with pytest.raises(err, match="test_numpy.py"):
            tk.jit(fn, backend="interpret")(m)


@pytest.mark.parametrize("fn", [lambda y, i: np.insert(y, i, 1.0), lambda y, i: np.insert(y, [i, 0], 1.0),
                                lambda y, i: np.delete(y, i), lambda y, i: np.delete(y, [0, i])],
                         ids=["insert", "insert_list", "delete", "delete_list"])
def test_insert_and_delete_at_traced_positions_name_the_line(fn):
    """np.insert at a traced position recursed until RecursionError (NumPy's own insert, called on the element numbers,
    dispatched back to tracekern's); a clear TypeError now, as np.delete's."""
    with pytest.raises(TypeError, match=r"positions \(obj\) must be static(.|\n)*test_numpy.py"):
        tk.jit(fn, backend="interpret")(np.arange(4.0), np.int64(1))


# ----------------------------------------------------------------------------- the table itself


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_solve_propagates_non_finite_entries_and_raises_on_a_singular_matrix_as_numpy_does(backend):
    """np.linalg.solve: NaN or inf in a matrix or right-hand side gives LAPACK's result, as NumPy's (the cpu kernel
    raised "Array must not contain infs or NaNs", Numba's check, until 2026-11-27), the other matrices of a batch
    their exact solutions; a singular matrix raises NumPy's LinAlgError("Singular matrix")."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 4, 4)) + 4 * np.eye(4)
    b = rng.standard_normal((3, 4, 2))
    a[1, 2, 2], b[2, 0, 1] = np.nan, np.inf
    want = np.linalg.solve(a, b)
    got = tk.jit(np.linalg.solve, backend=backend)(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=1e-12)
    vector = tk.jit(lambda a, v: np.linalg.solve(a, v), backend=backend)
    np.testing.assert_allclose(vector(a[0], b[0, :, 0]), np.linalg.solve(a[0], b[0, :, 0]), rtol=1e-13)
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        vector(np.ones((3, 3)), np.ones(3))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_inv_det_and_slogdet_propagate_non_finite_entries_and_treat_a_singular_matrix_as_numpy_does(backend):
    """np.linalg.inv, det and slogdet: NaN or inf entries give LAPACK's results, as NumPy's (inv by ?gesv against the
    identity, det and slogdet from ?getrf; the cpu kernels raised "Array must not contain infs or NaNs", Numba's
    check, until 2026-11-27), the other matrices of a batch theirs; a singular matrix: inv raises NumPy's
    LinAlgError("Singular matrix"), det is 0 and slogdet (0, -inf); a 0 x 0 matrix: det 1, slogdet (1, 0)."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((4, 3, 3)) + 3 * np.eye(3)
    a[1, 0, 0], a[2, 1, 2] = np.nan, np.inf
    a[3] = [[-1.0, 2.0, 0.5], [np.inf, 1.0, 0.0], [0.0, 0.0, -2.0]]

    def same(got, want):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12)

    with np.errstate(invalid="ignore"):   # (NumPy's own warning on NaN in det and slogdet: the interpreter's too)
        same(tk.jit(np.linalg.inv, backend=backend)(a), np.linalg.inv(a))
        same(tk.jit(np.linalg.det, backend=backend)(a), np.linalg.det(a))
        for got, want in zip(tk.jit(lambda m: tuple(np.linalg.slogdet(m)), backend=backend)(a), np.linalg.slogdet(a)):
            same(got, want)
    singular = np.ones((3, 3))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        tk.jit(np.linalg.inv, backend=backend)(singular)
    assert tk.jit(np.linalg.det, backend=backend)(singular) == 0.0
    assert tuple(tk.jit(lambda m: tuple(np.linalg.slogdet(m)), backend=backend)(singular)) == (0.0, -np.inf)
    empty = np.zeros((0, 0))
    assert tk.jit(np.linalg.det, backend=backend)(empty) == 1.0
    assert tuple(tk.jit(lambda m: tuple(np.linalg.slogdet(m)), backend=backend)(empty)) == (1.0, 0.0)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_qr_and_svd_treat_non_finite_entries_as_numpy_does(backend):
    """np.linalg.qr and svd (and pinv, matrix_rank, norm(ord=2) through it): NaN or inf entries give LAPACK's results
    as NumPy's (?geqrf and ?orgqr; ?gesdd), and a NaN that LAPACK's SVD refuses raises NumPy's LinAlgError("SVD did
    not converge"), where the cpu kernels raised Numba's "Array must not contain infs or NaNs" until 2026-11-27;
    finite and empty matrices as before."""
    rng = np.random.default_rng(11)
    nan = np.array([[np.nan, 1.0], [1.0, 2.0]])
    inf = np.array([[np.inf, 1.0], [1.0, 2.0]])

    def same(got, want):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        finite = np.isfinite(want)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-12, atol=1e-14)

    qr = tk.jit(lambda m: tuple(np.linalg.qr(m)), backend=backend)
    with np.errstate(invalid="ignore"):
        for m in (nan, inf, rng.standard_normal((5, 3)), rng.standard_normal((3, 5)), np.zeros((3, 0))):
            for got, want in zip(qr(m), np.linalg.qr(m)):
                same(got, want)
        for f in (lambda m: tuple(np.linalg.svd(m)), lambda m: tuple(np.linalg.svd(m, full_matrices=False)),
                  np.linalg.pinv, np.linalg.matrix_rank, lambda m: np.linalg.norm(m, 2)):
            with pytest.raises(np.linalg.LinAlgError, match="SVD did not converge"):
                tk.jit(f, backend=backend)(nan)
            for m in (inf, rng.standard_normal((4, 3))):
                got, want = tk.jit(f, backend=backend)(m), f(m)
                for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                    same(np.asarray(g), np.asarray(w))


def test_linalg_factorizations_raise_on_cuda_naming_the_function():
    a = np.eye(3) * 2.0
    for fn, name in ((np.linalg.solve, "np.linalg.solve"), (np.linalg.inv, "np.linalg.inv"),
                     (np.linalg.det, "np.linalg.det"), (np.linalg.cholesky, "np.linalg.cholesky"),
                     (np.linalg.qr, "np.linalg.qr"), (np.linalg.eigh, "np.linalg.eigh"), (np.linalg.svd, "np.linalg.svd")):
        args = (a, a) if fn is np.linalg.solve else (a,)
        with pytest.raises(TracekernError, match=rf"{name}.*no kernel on the cuda backend.*'cpu' and 'interpret'"):
            tk.jit(fn, backend="cuda")(*args)


def _resolve(name: str):
    obj = np
    for part in name[3:].split("."):
        obj = getattr(obj, part)
    return obj


def test_every_supported_numpy_function_has_a_row():
    """A function added to tk.numpy's dispatch tables without a row in the table fails here."""
    covered = {id(_resolve(n)) for n in numpy_names()}
    missing = sorted({getattr(f, "__name__", str(f)) for f in list(tnp.FUNCTIONS) + list(tnp.UFUNCS) if id(f) not in covered})
    assert not missing, f"supported but not in tests/numpy_cases.py: {missing}"


def test_aliases_are_the_functions_they_name():
    supported = lambda f: f in tnp.FUNCTIONS or f in tnp.UFUNCS   # noqa: E731
    for alias, target in ALIASES.items():
        a, t = _resolve(alias), _resolve(target)
        assert supported(a) and supported(t), alias
        assert a is t or (getattr(a, "__name__", "") != "" and np.allclose(a(np.arange(1.0, 4.0)), t(np.arange(1.0, 4.0)))
                          if alias not in ("np.concat", "np.permute_dims", "np.row_stack", "np.bitwise_left_shift",
                                           "np.bitwise_right_shift", "np.atan2", "np.pow") else True), alias


def test_at_least_200_numpy_names():
    assert len(numpy_names()) >= 200, len(numpy_names())


def test_readme_section_is_generated_from_the_table():
    assert readme_section() in README.read_text(), "README.md is stale: run python -m tests.numpy_cases"


def test_the_tables_cuda_kernels_compile_to_ptx():
    """The simulator does no typing: every cuda kernel the table's programs render (the call kernels
    of scans, sort and scatter included) is compiled to PTX in a process without it, float32
    kernels with no float64 instruction (tests/ptx_corpus.py, corpus "numpy": the kernels that ask a
    typing question no earlier one did)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    out = subprocess.run([sys.executable, "-m", "tests.ptx_corpus", "numpy"], env=env, capture_output=True, text=True,
                         timeout=900, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["kernels"] >= 60 and report["float32_kernels"] >= 30, report
    assert report["problems"] == [], "\n".join(report["problems"])
    # (betaln of float32 computes in float64, as SciPy's float32 loop: SciPy 1.18 types betaln(x, 3) float32)
    assert all("gammaln_f64" in e.split() for e in report["exempt"]), report["exempt"]


@pytest.mark.parametrize("fn", [
    lambda x: np.digitize(x, [1.0, 3.0, 2.0]),   # bins neither increasing nor decreasing
    lambda x: np.partition(x, 5),                # kth out of bounds (it was ignored: a full sort)
    lambda x: np.argpartition(x, (1, -6)),
    lambda x: np.partition(x, 2.0),              # kth not an integer
    lambda x: np.einsum("...j->", x[None]),      # the ellipsis's dimensions dropped from an explicit output
    lambda x: np.einsum("i,i", x, x, dtype=np.float32),   # float64 to float32 is not a 'safe' cast
    lambda x: np.einsum("i,i", x, x.astype(np.float32), casting="no"),
    lambda x: np.einsum("ii->i", x[None]),        # a repeated label over axes of sizes 1 and 5
    lambda x: np.ediff1d(x > 1),                 # NumPy cannot subtract bools (it gave their !=)
    lambda x: np.ediff1d(x.astype(np.int64), to_begin=2.5),   # not same_kind (it was cast to 2)
    lambda x: np.max(x.astype(np.int32), initial=-np.inf),    # inf into int32 (it gave a float64 result)
    lambda x: np.vsplit(x, 5),                   # a 1-D array (it was split along axis 0)
    lambda x: np.reshape(x, 5, order="K"),       # 'K' is ravel's order, not reshape's (it was read as 'C')
    lambda x: np.concatenate([x, x], dtype=np.int32),   # float64 to int32 is not 'same_kind' (it was cast)
    lambda x: np.hstack([x, x], dtype=np.float32, casting="no"),   # (casting= was ignored)
    lambda x: np.concatenate([x, x.astype(np.int32)], casting="equiv"),   # int32 to float64 is not 'equiv'
    lambda x: np.block([[x], x]),                # list depths mismatched (it concatenated them)
    lambda x: np.squeeze(x[None], [0]),          # a list of axes (NumPy: an int or a tuple; it was accepted)
    lambda x: x[np.array([True, False])],        # a mask shorter than its axis (it selected by np.nonzero's positions)
    lambda x: x[None][:, np.ones(6, bool)],      # a longer one (it raised an IndexError about an index 5)
    lambda x: x[:, None][[0, 1, 2], [0, 0]],     # index arrays that do not broadcast (it raised ValueError)
    lambda x: x[[[0, 5]]],                       # a nested list's index out of bounds (it was clamped: x[4])
    lambda x: np.take(x, [[1], [-6]]),           # (it was counted from the end and clamped)
    lambda x: np.choose([0, 2, 0, 0, 0], [x, x]),   # mode="raise" (it raised IndexError)
    lambda x: np.choose([-1, 0, 0, 0, 0], [x, x]),   # no negative choice with mode='raise' (it was counted from the end)
    lambda x: np.select([x.astype(np.int64)], [x]),  # conditions must be booleans (it read x != 0)
    lambda x: np.take(x, [1], mode="foo"),       # an unknown mode (it was read as 'raise')
    lambda x: np.choose([0, 1, 0, 1, 0], [x, x], mode="wrapped"),
    lambda x: np.take(x, [1], axis=0.0),         # a float axis (it was int(axis))
    lambda x: np.sum(x, axis=0.0),
    lambda x: x[1.0],                            # a float index (it raised TypeError)
    lambda x: x[:, None][np.array([0]), np.float64(0)],
    lambda x: np.compress(np.eye(2, dtype=bool), x),   # a 2-D condition (its row numbers were taken)
], ids=["digitize_unordered_bins", "partition_kth_out_of_bounds", "argpartition_negative_kth", "partition_float_kth",
        "einsum_ellipsis_not_in_output", "einsum_unsafe_dtype", "einsum_casting_no",
        "einsum_repeated_label_of_two_sizes", "ediff1d_of_bools", "ediff1d_to_begin_not_same_kind",
        "max_initial_inf_of_ints", "vsplit_of_1d", "reshape_order_k",
        "concatenate_dtype_not_same_kind", "hstack_casting_no", "concatenate_casting_equiv",
        "block_depths_mismatched", "squeeze_axis_list",
        "mask_shorter_than_its_axis", "mask_longer_than_its_axis",
        "index_arrays_not_broadcasting", "nested_list_index_out_of_bounds", "take_nested_list_out_of_bounds",
        "choose_out_of_range", "choose_negative", "select_integer_condition", "take_unknown_mode", "choose_unknown_mode",
        "take_float_axis", "sum_float_axis", "float_index", "float_index_beside_an_array",
        "compress_2d_condition"])
def test_calls_numpy_rejects_raise_its_error(fn):
    """A call NumPy rejects raises its error class while tracing (it was silently accepted), naming the user's line."""
    x = np.linspace(0.0, 4.0, 5)
    with pytest.raises(Exception) as want:
        fn(x)
    with pytest.raises(want.type) as got:
        tk.jit(fn, backend="interpret")(x)
    assert "test_numpy.py" in str(got.value), got.value


@pytest.mark.parametrize("fn", [
    lambda x: x.T.ravel("K"), lambda x: np.ravel(x.T, order="A"), lambda x: x.T.flatten("A"),
    lambda x: np.reshape(x.T, (4, 6), order="A"), lambda x: x.reshape(6, 4, order="A"),
], ids=["ravel_k", "ravel_a", "flatten_a", "reshape_a", "method_reshape_a"])
def test_memory_order_a_and_k_raise_where_the_layout_decides(fn):
    """order='A' and ravel's 'K' read an array in its memory order: NumPy's x.T.ravel('K') is x.ravel() (Fortran
    order of x.T). A traced value has no layout: it was read in C order (a silent x.T.ravel()); now a clear error
    naming the line and the orders to write. Where C's and Fortran's readings agree they are C's (the table)."""
    x = np.arange(24.0).reshape(2, 3, 4)
    with pytest.raises(NotImplementedError, match="order='C'.*order='F'") as got:
        tk.jit(fn, backend="interpret")(x)
    assert "test_numpy.py" in str(got.value) and "memory order" in str(got.value), got.value
    assert np.array_equal(tk.jit(lambda x: x[:, :1, :1].T.ravel("K"), backend="interpret")(x), x[:, :1, :1].T.ravel("K"))
    for shape in ((2, 3, 4), (1, 2, 3, 1, 4), (2, 1, 3, 4, 1)):   # (axes of length 1 only: every order agrees)
        assert np.array_equal(tk.jit(lambda x: x.reshape(shape, order="A"), backend="interpret")(x), x.reshape(shape))
    # tk.numpy called on NumPy arrays outside a trace knows their layout: NumPy's own reading
    for order in "AK":
        assert np.array_equal(tnp.ravel(x.T, order), np.ravel(x.T, order))
    assert np.array_equal(tnp.reshape(x.T, (4, 6), order="A"), np.reshape(x.T, (4, 6), order="A"))


@pytest.mark.parametrize("fn", [lambda x: np.tile(x, (2, -1)), lambda x: np.repeat(x, -1)], ids=["tile", "repeat"])
def test_negative_repeats_say_so(fn):
    """np.tile(x, (2, -1)) and np.repeat(x, -1) raised a reshape error about an internal shape (1, 2, 1, -1, 5) of
    size -10, which the user never wrote; NumPy's ValueError is about negative dimensions."""
    with pytest.raises(ValueError, match="negative") as got:
        tk.jit(fn, backend="interpret")(np.ones(5))
    assert "reshape" not in str(got.value) and "test_numpy.py" in str(got.value), got.value


def test_ufunc_loops_are_resolved_once_per_operand_dtypes_and_errors_every_time():
    # every traced operator resolves NumPy's loop (ufuncs._loop_dtypes, s9d); its answer is kept per (ufunc, operand
    # dtypes), as resolving it and formatting the dtype names of the messages on every call made a loop of 1,000
    # x[i] + s trace 20% slower. A failed resolution is not kept: the same error each time
    from tracekern.numpy import ufuncs
    tk.make_ir(lambda x: x * 2.0 + x)(np.ones(3, np.float32))
    assert ufuncs._LOOPS[(np.multiply, (np.dtype(np.float32), float))][-1] == np.float32
    assert ufuncs._LOOPS[(np.add, (np.dtype(np.float32), np.dtype(np.float32)))][-1] == np.float32
    for _ in range(2):
        with pytest.raises(TypeError, match="not defined for operands of dtype float64, float"):
            tk.make_ir(lambda x: np.bitwise_and(x, 1.5))(np.ones(3))
