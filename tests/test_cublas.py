"""Matmul on cuBLAS (backends/cublas.py): the column-major plan for every transpose and batch case,
and the cuda backend's calls, checked on Numba's CUDA simulator against a stand-in for
nvmath.bindings.cublas that computes each GEMM from the pointers, leading dimensions, operations
and strides it is given, exactly as cuBLAS defines them (so a wrong argument gives a wrong result).
On a GPU with nvmath-python, the same cuda tests run on the real cuBLAS (test_cuda.py)."""
import ctypes
import threading

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import stand_in_or_recorded, to_host
from tracekern.backends import cublas
from tracekern.backends import cuda as tkcuda


def _column_major(addr: int, dtype, rows: int, cols: int, ld: int) -> np.ndarray:
    """The (rows x cols) column-major matrix at addr with leading dimension ld, as a writable view."""
    assert ld >= max(1, rows)
    n = ld * (cols - 1) + rows if cols else 0
    flat = _at(addr, dtype, max(n, 1))[:n]
    return np.lib.stride_tricks.as_strided(flat, (rows, cols), (flat.itemsize, flat.itemsize * ld))


def _at(addr: int, dtype, n: int) -> np.ndarray:
    """n values of dtype at addr, as a writable view (complex ones too: ctypes has no complex type)."""
    dtype = np.dtype(dtype)
    return np.frombuffer((ctypes.c_char * (n * dtype.itemsize)).from_address(addr), dtype)


class FakeCublas:
    """nvmath.bindings.cublas's functions as tracekern calls them, computed with NumPy on the
    simulator's (host) memory."""

    class Math:
        DEFAULT_MATH = 0
        TF32_TENSOR_OP_MATH = 3

    def __init__(self):
        self.calls: list = []
        self.handles: list = []
        self.lock = threading.Lock()

    def create(self):
        with self.lock:
            self.handles.append(threading.get_ident())
            return len(self.handles)

    def set_workspace(self, handle, pointer, nbytes):
        self.calls.append(("workspace", handle, nbytes))

    def set_stream(self, handle, stream):
        self.calls.append(("stream", handle, stream))

    def set_math_mode(self, handle, mode):
        self.calls.append(("math", handle, mode))

    def _gemm(self, dtype, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count):
        self.calls.append(("gemm", np.dtype(dtype).name, opa, opb, m, n, k, count))
        size = np.dtype(dtype).itemsize
        al, be = _at(alpha, dtype, 1)[0], _at(beta, dtype, 1)[0]
        for i in range(count):
            P = _column_major(a + i * sa * size, dtype, *((m, k) if opa == 0 else (k, m)), lda)
            Q = _column_major(b + i * sb * size, dtype, *((k, n) if opb == 0 else (n, k)), ldb)
            C = _column_major(c + i * sc * size, dtype, m, n, ldc)
            C[...] = al * ((P if opa == 0 else P.T) @ (Q if opb == 0 else Q.T)) + (be * C if be else 0)

    def sgemm(self, h, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._gemm(np.float32, opa, opb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)

    def dgemm(self, h, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._gemm(np.float64, opa, opb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)

    def sgemm_strided_batched(self, h, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count):
        self._gemm(np.float32, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count)

    def dgemm_strided_batched(self, h, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count):
        self._gemm(np.float64, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count)

    def cgemm(self, h, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._gemm(np.complex64, opa, opb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)

    def zgemm(self, h, opa, opb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc):
        self._gemm(np.complex128, opa, opb, m, n, k, alpha, a, lda, 0, b, ldb, 0, beta, c, ldc, 0, 1)

    def cgemm_strided_batched(self, h, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count):
        self._gemm(np.complex64, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count)

    def zgemm_strided_batched(self, h, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count):
        self._gemm(np.complex128, opa, opb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count)


class RecordingCublas(FakeCublas):
    """On a GPU: the real nvmath.bindings.cublas, each call recorded as FakeCublas records it (the
    stand-in reads host memory: on a GPU its pointers are device pointers)."""

    _TYPES = {"s": "float32", "d": "float64", "c": "complex64", "z": "complex128"}

    def __init__(self, real):
        super().__init__()
        self.real, self.Math = real, real.Math

    def create(self):
        with self.lock:
            self.handles.append(threading.get_ident())
        return self.real.create()

    def set_workspace(self, handle, pointer, nbytes):
        super().set_workspace(handle, pointer, nbytes)
        return self.real.set_workspace(handle, pointer, nbytes)

    def set_stream(self, handle, stream):
        super().set_stream(handle, stream)
        return self.real.set_stream(handle, stream)

    def set_math_mode(self, handle, mode):
        super().set_math_mode(handle, mode)
        return self.real.set_math_mode(handle, mode)

    def _gemm(self, *args):
        raise AssertionError("on a GPU every gemm goes to cuBLAS")

    def __getattribute__(self, name):
        if name[:1] in "sdcz" and name[1:5] == "gemm":
            real = getattr(object.__getattribute__(self, "real"), name)
            calls, kind = object.__getattribute__(self, "calls"), RecordingCublas._TYPES[name[0]]

            def call(h, opa, opb, m, n, k, *rest):
                calls.append(("gemm", kind, opa, opb, m, n, k, rest[-1] if name.endswith("batched") else 1))
                return real(h, opa, opb, m, n, k, *rest)
            return call
        return object.__getattribute__(self, name)


@pytest.fixture
def fake(monkeypatch):
    """The cuda backend with matmuls on the stand-in (on the simulator: cuBLAS cannot run there), or
    on a GPU on the real cuBLAS with its calls recorded."""
    lib = stand_in_or_recorded(cublas, FakeCublas, RecordingCublas, "cuBLAS")
    launch = tkcuda.launch_config()
    monkeypatch.setattr(tkcuda, "launch_config", lambda: tkcuda.Launch(**{**launch.__dict__, "cublas": True}))
    yield lib
    cublas.use_library(None)


@pytest.mark.parametrize("a_t", [False, True])
@pytest.mark.parametrize("b_t", [False, True])
@pytest.mark.parametrize("batch", [(), (3,), (2, 2)])
def test_the_column_major_plan_is_the_row_major_product(a_t, b_t, batch):
    """gemm_plan's arguments, run by the stand-in on host buffers, give op(A) @ op(B)."""
    rng = np.random.default_rng(0)
    m, k, n = 5, 3, 4
    A = rng.standard_normal(batch + ((k, m) if a_t else (m, k)))
    B = rng.standard_normal(batch + ((n, k) if b_t else (k, n)))
    C = np.full(batch + (m, n), np.nan)
    p = cublas.gemm_plan(A.shape, a_t, B.shape, b_t)
    one, zero = np.ones(1), np.zeros(1)
    FakeCublas()._gemm(np.float64, p.op_a, p.op_b, p.m, p.n, p.k, one.ctypes.data, B.ctypes.data, p.lda, p.stride_a,
                       A.ctypes.data, p.ldb, p.stride_b, zero.ctypes.data, C.ctypes.data, p.ldc, p.stride_c, p.batch)
    opA = np.swapaxes(A, -1, -2) if a_t else A
    opB = np.swapaxes(B, -1, -2) if b_t else B
    np.testing.assert_allclose(C, opA @ opB, rtol=1e-12)
    with pytest.raises(ValueError, match="do not multiply"):
        cublas.gemm_plan(A.shape, not a_t, B.shape, b_t)


def test_matmuls_of_every_transpose_and_batch_go_to_cublas(fake):
    rng = np.random.default_rng(1)
    # (every product contracts more than linalg.SMALL_CONTRACTION entries: smaller ones are loops)
    a, b = rng.standard_normal((5, 6)).astype(np.float32), rng.standard_normal((6, 5)).astype(np.float32)
    c3 = rng.standard_normal((2, 5, 6))
    programs = [
        (lambda a, b: a @ b, (a, b)),
        (lambda a, b: (a.T @ a) @ (b @ b.T), (a, b)),
        (lambda x: x @ np.swapaxes(x, 1, 2), (c3,)),
        (lambda a, b: a.astype(np.float64) @ b.astype(np.float64), (a, b)),
    ]
    for f, args in programs:
        before = len([c for c in fake.calls if c[0] == "gemm"])
        got = to_host(tk.jit(f, backend="cuda")(*args))
        want = tk.jit(f, backend="interpret")(*args)
        np.testing.assert_allclose(got, want, rtol=2e-5 if want.dtype == np.float32 else 1e-12, atol=1e-6)
        assert len([c for c in fake.calls if c[0] == "gemm"]) > before
    kinds = {(c[1], c[7] > 1) for c in fake.calls if c[0] == "gemm"}
    assert ("float32", False) in kinds and ("float64", True) in kinds and ("float64", False) in kinds


def test_value_and_grad_of_an_mlp_on_cublas_equals_the_interpreter(fake):
    rng = np.random.default_rng(2)
    ws = [rng.standard_normal((6, 6)) / 3 for _ in range(3)]
    x = rng.standard_normal((4, 6))

    def loss(ws, x):
        for w in ws:
            x = np.tanh(x @ w)
        return np.mean(x * x)
    v, g = to_host(tk.jit(tk.value_and_grad(loss), backend="cuda")(ws, x))
    vi, gi = tk.jit(tk.value_and_grad(loss), backend="interpret")(ws, x)
    np.testing.assert_allclose(v, vi, rtol=1e-12)
    for a, b in zip(g, gi):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    ops = {(c[2], c[3]) for c in fake.calls if c[0] == "gemm"}
    assert len(ops) >= 2, "the backward passes transposed operands as cuBLAS operations"
    assert tk.jit(tk.value_and_grad(loss), backend="cuda").lower(ws, x).source.count("R.gemm(") >= 5


def test_tf32_is_asked_for_float32_only_and_only_when_chosen(fake):
    a = np.ones((8, 8), np.float32)
    tk.jit(lambda a: a @ a, backend="cuda")(a)
    assert not [c for c in fake.calls if c[0] == "math"], "the default is full float32"
    tk.jit(lambda a: a @ a, backend="cuda", matmul_precision="tf32")(a)
    assert [c for c in fake.calls if c[0] == "math"][-1][2] == fake.Math.TF32_TENSOR_OP_MATH
    tk.jit(lambda a: a @ a, backend="cuda", matmul_precision="tf32")(a.astype(np.float64))
    tk.jit(lambda a: a @ a, backend="cuda")(a)
    assert [c for c in fake.calls if c[0] == "math"][-1][2] == fake.Math.DEFAULT_MATH
    with pytest.raises(ValueError, match="applies to backend 'cuda'"):
        tk.jit(lambda a: a @ a, matmul_precision="tf32")
    with pytest.raises(ValueError, match="'highest' or 'tf32'"):
        tk.jit(lambda a: a @ a, backend="cuda", matmul_precision="bf16")


def test_one_handle_and_workspace_per_thread(fake):
    a = np.ones((8, 8), np.float32)
    f = tk.jit(lambda a: (a @ a) @ a, backend="cuda")
    f(a)
    f(a)
    assert len(fake.handles) == 1 and len([c for c in fake.calls if c[0] == "workspace"]) == 1
    t = threading.Thread(target=f, args=(a,))
    t.start()
    t.join()
    assert len(fake.handles) == 2 and len(set(fake.handles)) == 2


def test_a_strided_device_input_takes_the_tiled_kernel(fake):
    from numba import cuda

    base = np.arange(96, dtype=np.float32).reshape(6, 16)
    strided = cuda.to_device(base)[:, ::2]           # not C-contiguous: no leading dimension for cuBLAS
    w = np.ones((8, 3), np.float32)
    f = tk.jit(lambda x, w: x @ w, backend="cuda")
    before = len([c for c in fake.calls if c[0] == "gemm"])
    np.testing.assert_allclose(to_host(f(strided, w)), base[:, ::2] @ w)
    assert len([c for c in fake.calls if c[0] == "gemm"]) == before
    np.testing.assert_allclose(to_host(f(np.ascontiguousarray(base[:, ::2]), w)), base[:, ::2] @ w)
    assert len([c for c in fake.calls if c[0] == "gemm"]) == before + 1


def test_integer_matmul_stays_on_the_tiled_kernel(fake):
    a = np.arange(12, dtype=np.int64).reshape(3, 4)
    got = to_host(tk.jit(lambda a: a @ a.T, backend="cuda")(a))
    np.testing.assert_array_equal(got, a @ a.T)
    assert not [c for c in fake.calls if c[0] == "gemm"]


def test_complex_matmuls_and_their_gradients_go_to_cgemm_and_zgemm(fake):
    """complex64 and complex128 products on cuBLAS (cgemm, zgemm; batched by strides), with the adjoint
    products of the complex convention in the backward pass, equal to the interpreter's."""
    rng = np.random.default_rng(4)
    for dtype in (np.complex64, np.complex128):
        a = (rng.standard_normal((2, 5, 3)) + 1j * rng.standard_normal((2, 5, 3))).astype(dtype)
        b = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(dtype)

        def loss(a, b):
            return np.sum(np.abs(np.tanh(a @ b)) ** 2)
        v, g = to_host(tk.jit(tk.value_and_grad(loss, argnums=(0, 1)), backend="cuda")(a, b))
        vi, gi = tk.jit(tk.value_and_grad(loss, argnums=(0, 1)), backend="interpret")(a, b)
        tol = 1e-11 if dtype == np.complex128 else 2e-4
        np.testing.assert_allclose(v, vi, rtol=tol)
        for x, y in zip(g, gi):
            assert x.dtype == dtype
            np.testing.assert_allclose(x, y, rtol=tol, atol=tol)
    assert {c[1] for c in fake.calls if c[0] == "gemm"} >= {"complex64", "complex128"}
