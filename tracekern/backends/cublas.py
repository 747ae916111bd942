"""Matmul on cuBLAS, NVIDIA's BLAS, through nvmath-python's low-level bindings: float32, float64,
complex64 and complex128 GEMM (sgemm, dgemm, cgemm, zgemm), batched by strides, on the step's stream.
A transposed operand is a cuBLAS operation, never a copy. One handle and one workspace per device and
thread, made on first use.

cuBLAS is column-major and tracekern's arrays are row-major. A row-major (r x c) array is a
column-major (c x r) matrix, so C = op(A) @ op(B) is computed as C^T = op(B)^T op(A)^T
(gemm_plan). matmul_precision="tf32" lets float32 GEMMs use TF32 tensor cores (inputs rounded to
10-bit mantissas, products accumulated in float32); "highest" (the default) is full float32."""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np

PRECISIONS = ("highest", "tf32")
PREFIX = {"float32": "s", "float64": "d", "complex64": "c", "complex128": "z"}   # cuBLAS's name per dtype
WORKSPACE_BYTES = 32 << 20   # what NVIDIA recommends for Hopper; smaller GPUs use part of it

_LOCAL = threading.local()
_OVERRIDE: list = []   # tests: a stand-in for nvmath.bindings.cublas (use_library)


@dataclass(frozen=True)
class Gemm:
    """One cuBLAS (strided batched) GEMM call, in cuBLAS's column-major terms."""
    op_a: int            # the operation on cuBLAS's first operand (tracekern's B): 0 N, 1 T
    op_b: int            # on the second (tracekern's A)
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int


def gemm_plan(a_shape: tuple, a_transposed: bool, b_shape: tuple, b_transposed: bool) -> Gemm:
    """C[..., m, n] = op(A)[..., m, k] @ op(B)[..., k, n] for C-contiguous buffers A and B, where op
    is the identity or (when the operand is passed transposed: the buffer holds its last-two-axes
    transpose) a transpose. As cuBLAS computes it: C^T = op(B)^T @ op(A)^T, column-major."""
    *batch_a, ra, ca = a_shape
    *batch_b, rb, cb = b_shape
    m, k = (ca, ra) if a_transposed else (ra, ca)
    k2, n = (cb, rb) if b_transposed else (rb, cb)
    if k != k2 or list(batch_a) != list(batch_b):
        raise ValueError(f"gemm_plan: operands {a_shape}{'^T' if a_transposed else ''} and "
                         f"{b_shape}{'^T' if b_transposed else ''} do not multiply")
    batch = int(np.prod(batch_a, dtype=np.int64)) if batch_a else 1
    # B's buffer, read column-major, is B^T (n x k, ld n) untransposed; its transpose Y^T = B (k x n)
    # needs op T with ld k. Likewise A.
    return Gemm(op_a=1 if b_transposed else 0, op_b=1 if a_transposed else 0, m=n, n=m, k=k,
                lda=cb, ldb=ca, ldc=n, stride_a=rb * cb, stride_b=ra * ca, stride_c=m * n, batch=batch)


def use_library(lib) -> None:
    """Use `lib` (an object with nvmath.bindings.cublas's functions) instead of cuBLAS: tests check the
    calls on Numba's CUDA simulator, where cuBLAS cannot run. use_library(None) restores cuBLAS."""
    _OVERRIDE[:] = [lib] if lib is not None else []
    _LOCAL.__dict__.clear()


@functools.cache
def _nvmath():
    from nvmath.bindings import cublas  # (optional: the cuda extras install it)

    return cublas


def library():
    """nvmath.bindings.cublas (or the stand-in given to use_library), or None if not installed."""
    if _OVERRIDE:
        return _OVERRIDE[0]
    try:
        return _nvmath()
    except ImportError:
        return None


class Blas:
    """A cuBLAS handle and its workspace, for one device and thread."""

    def __init__(self, lib, workspace):
        self.lib = lib
        self.handle = lib.create()
        self.workspace = workspace   # kept alive while the handle uses it
        lib.set_workspace(self.handle, workspace.pointer, workspace.nbytes)
        self.stream = None
        self.tf32 = False
        self._scalars = {np.dtype(t): (np.ones(1, t), np.zeros(1, t))
                         for t in (np.float32, np.float64, np.complex64, np.complex128)}

    def gemm(self, stream: int, dtype: np.dtype, plan: Gemm, a: int, b: int, c: int, tf32: bool) -> None:
        """C = A @ B as planned (a, b, c: device pointers; stream: a CUDA stream handle). Asynchronous:
        nothing waits for the GPU."""
        lib = self.lib
        if stream != self.stream:
            lib.set_stream(self.handle, stream)
            self.stream = stream
        tf32 = tf32 and dtype == np.float32
        if tf32 != self.tf32:
            lib.set_math_mode(self.handle, lib.Math.TF32_TENSOR_OP_MATH if tf32 else lib.Math.DEFAULT_MATH)
            self.tf32 = tf32
        one, zero = self._scalars[np.dtype(dtype)]
        p = plan
        # cuBLAS's first operand is tracekern's B, its second A (C^T = B^T A^T)
        kind = PREFIX[np.dtype(dtype).name]
        if p.batch == 1:
            fn = getattr(lib, f"{kind}gemm")
            fn(self.handle, p.op_a, p.op_b, p.m, p.n, p.k, one.ctypes.data, b, p.lda, a, p.ldb,
               zero.ctypes.data, c, p.ldc)
        else:
            fn = getattr(lib, f"{kind}gemm_strided_batched")
            fn(self.handle, p.op_a, p.op_b, p.m, p.n, p.k, one.ctypes.data, b, p.lda, p.stride_a, a, p.ldb,
               p.stride_b, zero.ctypes.data, c, p.ldc, p.stride_c, p.batch)


def blas(device_id: int, make_workspace) -> Blas:
    """This thread's Blas for the device (made on first use; make_workspace(nbytes) gives device
    memory with .pointer and .nbytes)."""
    handles = _LOCAL.__dict__.setdefault("handles", {})
    b = handles.get(device_id)
    if b is None:
        lib = library()
        if lib is None:
            raise ImportError("cuBLAS through nvmath-python is not installed: pip install -e '.[cu13]' (or "
                              "'.[cu12]', by your driver's CUDA major version)")
        b = handles[device_id] = Blas(lib, make_workspace(WORKSPACE_BYTES))
    return b
