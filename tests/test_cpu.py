"""The cpu backend beyond the shared end-to-end tests: fusion, non-contiguous inputs, reductions over
every axis, parallel chunks, compile errors, and lower(). The disk cache: tests/test_cache.py."""
import itertools

import numba
import numpy as np
import pytest

import tracekern as tk
from tracekern.backends import cpu_math

TOL = {np.float32: dict(rtol=2e-5, atol=1e-5), np.float64: dict(rtol=1e-11, atol=1e-12)}


def both(fun, *args, **jit_kwargs):
    got = tk.jit(fun, backend="cpu", **jit_kwargs)(*args)
    want = tk.jit(fun, backend="interpret", **jit_kwargs)(*args)
    return got, want


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reductions_over_every_axis_combination(op, dtype):
    rng = np.random.default_rng(0)
    x = rng.uniform(0.9, 1.1, (3, 4, 5)).astype(dtype)
    big = rng.uniform(0.99, 1.01, (40, 30, 60)).astype(dtype)  # parallel loops: chunked over axis 0
    for arr in (x, big):
        for r in range(0, 4):
            for axes in itertools.combinations(range(3), r):
                fun = lambda a, axes=axes: getattr(np, op)(np.exp(a) * 0.5, axis=axes)
                got, want = both(fun, arr)
                np.testing.assert_allclose(got, want, **TOL[dtype], err_msg=f"{op} axes={axes} shape={arr.shape}")


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_non_contiguous_inputs(dtype):
    rng = np.random.default_rng(1)
    base = rng.standard_normal((12, 10)).astype(dtype)
    views = {"transposed": base.T, "strided": base[::2, 1::3], "reversed": base[::-1], "column": base[:, 3]}
    w = rng.standard_normal((10, 12)).astype(dtype)
    for name, v in views.items():
        got, want = both(lambda a: np.tanh(a) * 2 + a.sum(axis=0), v)
        np.testing.assert_allclose(got, want, **TOL[dtype], err_msg=name)
    got, want = both(lambda a, b: a @ b, base.T, base[:, :10])        # matmul on a transposed view
    np.testing.assert_allclose(got, want, **TOL[dtype])
    loss = lambda a, b: np.sum(np.tanh(a @ b))  # noqa: E731
    g = tk.grad(loss, argnums=(0, 1))(base[::-1], w[:, ::-1])
    want = tk.jit(tk.grad(loss, argnums=(0, 1)), backend="interpret")(np.ascontiguousarray(base[::-1]),
                                                                      np.ascontiguousarray(w[:, ::-1]))
    assert g[0].shape == (12, 10) and g[1].shape == (10, 12)
    for got_i, want_i in zip(g, want):
        np.testing.assert_allclose(got_i, want_i, **TOL[dtype])
    # check_grad raises GradientCheckError on a mismatch (it returns None)
    tk.check_grad(loss, (base[::-1].astype(np.float64), w[:, ::-1].astype(np.float64)))


def test_views_inside_fused_loops():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 8))
    y = rng.standard_normal(8)
    funs = [
        lambda a, b: np.exp(a.T)[::2, 1:] * 3 + b[:4, None],
        lambda a, b: np.tanh(a).reshape(4, 12).T + 1,
        lambda a, b: (np.sin(a)[:, ::-1] - b).reshape(48)[7:40:3],
        lambda a, b: np.concatenate([np.exp(a), a * b], axis=1).sum(axis=1),
        lambda a, b: np.stack([a[0], b, np.cos(b)]).max(axis=0),
    ]
    for k, f in enumerate(funs):
        got, want = both(f, x, y)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"function {k}")


def test_an_elementwise_chain_and_its_reduction_fuse_into_one_loop():
    def chain(x):
        for _ in range(4):
            x = np.tanh(x) * 1.5 + np.sin(x)
        return np.sum(x * x)

    x = np.linspace(-1, 1, 1000, dtype=np.float32)
    def kernels(source):  # in `step` (`step_exact`, the libm variant, has the same kernels)
        return source.split("def step_exact")[0].count("# kernel")

    assert kernels(tk.jit(chain).lower(x).source) == 1
    assert kernels(tk.value_and_grad(chain).lower(x).source) == 1         # forward, reduction and backward: one pass over x
    np.testing.assert_allclose(tk.value_and_grad(chain)(x)[1],
                               tk.jit(tk.grad(chain), backend="interpret")(x), rtol=2e-5, atol=1e-5)


def test_vjp_recomputes_cheap_residuals_instead_of_saving_them():
    def chain(x):
        for _ in range(8):
            x = np.tanh(x) * 1.5 + np.exp(-x * x)
        return x

    x = np.linspace(-1, 1, 4096)
    low = tk.jit(chain).lower(x)
    assert low.memory.residual_bytes == x.nbytes   # only the input is saved
    out, pull = tk.vjp(chain, x)
    ct = np.cos(x)
    (got,) = pull(ct)
    (want,) = tk.jit(lambda x, c: tk.vjp(chain, x)[1](c), backend="interpret")(x, ct)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert low.memory.peak_bytes["vjp_backward"] > 0


def test_parallel_results_do_not_depend_on_the_number_of_threads():
    x = np.random.default_rng(3).standard_normal(1 << 18).astype(np.float32)
    f = tk.value_and_grad(lambda x: np.sum(np.exp(np.sin(x)) * x))
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        v1, g1 = f(x)
        numba.set_num_threads(max(before, 2) if numba.config.NUMBA_NUM_THREADS > 1 else 1)
        v2, g2 = f(x)
    finally:
        numba.set_num_threads(before)
    assert v1 == v2
    np.testing.assert_array_equal(g1, g2)
    assert "prange" in f.lower(x).source


@pytest.mark.parametrize("shape, axis", [((70_001,), None), ((1000,), None), ((3, 700), 1), ((5, 300), None)])
def test_a_float32_sum_staged_in_a_heavy_loop_still_accumulates_in_float64(shape, axis):
    """A loop that computes transcendentals stages its float32 sum STAGE values at a time and adds them in
    float64 (cpu_kernels._LoopUnit.staged): the sum is float64's, exactly, over partial blocks, uneven chunks and an
    inner axis. 2**24 then ones: a float32 accumulator (or NumPy's float32 sum) would drop the ones."""
    x = np.ones(shape, np.float32)
    x.flat[0] = 2.0 ** 24
    x.flat[-1] = 2.0 ** 24

    def f(x):
        return np.sum(x + 0 * np.tanh(x), axis=axis)   # (the tanh makes the loop heavy; its value is 0)

    source = tk.jit(f).lower(x).source
    assert "stage0" in source and "wide_vectors()" in source
    got = tk.jit(f)(x)
    want = np.sum(x.astype(np.float64), axis=axis).astype(np.float32)
    assert got.dtype == np.float32 and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
    # value and gradient of a heavy chain against the interpreter, and against central differences
    w = np.random.default_rng(5).uniform(-1, 1, shape).astype(np.float32)

    def chain(x):
        return np.sum(np.exp(-np.sin(np.tanh(x)) ** 2) * 0.5)

    assert "stage0" in tk.value_and_grad(chain).lower(w).source
    (v, g), (vi, gi) = tk.value_and_grad(chain)(w), tk.jit(tk.value_and_grad(chain), backend="interpret")(w)
    np.testing.assert_allclose(v, vi, rtol=2e-6)
    np.testing.assert_allclose(g, gi, **TOL[np.float32])
    w64, e = w.astype(np.float64), 1e-6
    fd = (np.exp(-np.sin(np.tanh(w64 + e)) ** 2) - np.exp(-np.sin(np.tanh(w64 - e)) ** 2)) * 0.5 / (2 * e)
    np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-5)


def test_heavy_loops_may_use_the_widest_vectors():
    """cpu_math.wide_vectors marks the function it is called in for LLVM's widest vectors (512 bits where
    the machine has AVX-512; nothing changes elsewhere); plain arithmetic loops are not marked."""
    @numba.njit
    def marked(x):
        cpu_math.wide_vectors()
        return x + 1

    @numba.njit
    def plain(x):
        return x + 1

    marked(1.0)
    plain(1.0)
    assert '"prefer-vector-width"="512"' in next(iter(marked.inspect_llvm().values()))
    assert "prefer-vector-width" not in next(iter(plain.inspect_llvm().values()))
    x = np.ones(1 << 17, np.float32)
    assert "wide_vectors()" not in tk.jit(lambda x: np.sum(x * 2 + 1)).lower(x).source
    assert "wide_vectors()" in tk.jit(lambda x: np.exp(x) * 2).lower(x).source


def test_compile_errors_name_the_primitive_and_the_users_line(monkeypatch):
    from tracekern.primitives import elementwise

    monkeypatch.setattr(elementwise.sin, "scalar", "{0}.no_such_attribute")

    def f(x):
        return np.sin(x) + 1  # the line to be named

    with pytest.raises(tk.TracekernError) as info:
        tk.jit(f, backend="cpu")(np.ones(3))
    msg = str(info.value)
    assert "sin" in msg and "test_cpu.py" in msg and "lower" in msg
    assert "Traceback" not in msg


def test_outputs_never_alias_inputs_or_constants():
    c = np.arange(3.0)
    f = tk.jit(lambda x: (x, c, x.T))
    x = np.ones((3, 3))
    a, b, t = f(x)
    a[0, 0] = 5
    b[0] = 7
    t[1, 1] = 9
    assert x[0, 0] == 1 and c[0] == 0 and x[1, 1] == 1
    assert f(x)[1][0] == 0


def test_integer_and_bool_programs():
    rng = np.random.default_rng(4)
    for dtype in (np.int32, np.int64):
        a = rng.integers(-5, 5, (4, 6)).astype(dtype)
        b = rng.integers(-5, 5, (6, 3)).astype(dtype)
        got, want = both(lambda a, b: (a @ b, np.abs(a) ** 2, a.sum(axis=1), a.max(), np.sign(a), a > 0), a, b)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype




def test_a_strided_matmul_operand_gives_no_numba_performance_warning():
    """cpu_math.gemm copies an operand that is neither C- nor F-contiguous itself (Numba's np.dot
    would copy it as well, with a NumbaPerformanceWarning about generated code a user cannot change).
    gemm's own body is compiled afresh here (gemm may be in Numba's cache, where no warning is given)."""
    import warnings

    from numba import njit
    from numba.core.errors import NumbaPerformanceWarning

    fresh = njit(cpu_math.gemm.py_func)
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((6, 8)), rng.standard_normal((8, 10))
    for x, y in ((a[::-1], b), (a, b[:, ::2]), (a[::2, 1::2], b[1::2, ::-1]), (a.T.T, b.T.copy().T)):
        c = np.empty((x.shape[0], y.shape[1]))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            fresh(x, y, c)
        assert not [w for w in seen if issubclass(w.category, NumbaPerformanceWarning)]
        np.testing.assert_allclose(c, x @ y, rtol=1e-12, atol=1e-12)
