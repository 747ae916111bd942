"""The CUDA runtime the generated host code calls (no rendering): the device's launch sizes, one stream,
allocation, copies and host reads on it, cooperative launches, and the cuBLAS and cuFFT handles."""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import TracekernError
from . import cublas, cuda_math, cufft


@dataclass(frozen=True)
class Launch:
    """Launch sizes, baked into the generated source (shared arrays need them at compile time)."""
    threads: int       # threads per block of the 1-D kernels: a power of two
    max_blocks: int    # grid-stride loops cover the rest
    tile: int          # matmul tiles are tile x tile
    min_chunk: int     # elements a thread folds at least before a reduction splits into partials
    simulator: bool
    cublas: bool = False   # float matmuls on cuBLAS (nvmath-python installed; never on the simulator)


@functools.cache
def launch_config() -> Launch:
    if cuda_math.SIMULATOR:   # each simulated thread is a Python thread: keep launches small
        return Launch(threads=32, max_blocks=2, tile=4, min_chunk=1, simulator=True)
    from numba import cuda

    if not cuda.is_available():
        raise TracekernError("backend='cuda' found no usable CUDA GPU (numba.cuda.is_available() is False). "
                             "On a machine without one, set NUMBA_ENABLE_CUDASIM=1 before numba is imported to "
                             "run on Numba's CUDA simulator (slow; for tests), or use backend='cpu'.")
    dev = cuda.get_current_device()
    return Launch(threads=256, max_blocks=dev.MULTIPROCESSOR_COUNT * 8, tile=16, min_chunk=8, simulator=False,
                  cublas=cublas.library() is not None)


class Runtime:
    """What the generated host code calls: allocation, copies and host reads on one stream."""

    def __init__(self):
        from numba import cuda

        self.cuda = cuda
        self.stream = cuda.default_stream()
        self._grids: dict = {}

    def empty(self, shape, dtype):
        return self.cuda.device_array(tuple(int(s) for s in shape), np.dtype(dtype), stream=self.stream)

    def upload(self, x):
        x = np.asarray(x)   # (not np.ascontiguousarray: it makes 0-d arrays 1-d)
        return self.cuda.to_device(x if x.flags.c_contiguous else x.copy(), stream=self.stream)

    def input(self, x):
        """A device view of an argument: device arrays as they are, __cuda_array_interface__ objects
        without a copy, anything else copied to the device once."""
        if hasattr(x, "copy_to_host"):
            return x
        if hasattr(x, "__cuda_array_interface__"):
            return self.cuda.as_cuda_array(x)
        return self.upload(x)

    def copy(self, x):
        out = self.empty(x.shape, x.dtype)
        out.copy_to_device(x, stream=self.stream)
        return out

    def assign(self, dst, src) -> None:
        dst.copy_to_device(src, stream=self.stream)

    def host(self, x):
        out = x.copy_to_host(stream=self.stream)
        self.stream.synchronize()
        return out

    def scalar(self, x):
        return self.host(x)[()]

    def print(self, items: list, sep: str) -> None:
        print(*[self.host(x) if hasattr(x, "copy_to_host") else x for x in items], sep=sep, flush=True)

    # -- cuBLAS (backends/cublas.py) ----------------------------------------------------------
    def pointer(self, x) -> int:
        """A device array's address (on the simulator: its host memory's, for a cuBLAS stand-in)."""
        return x.ctypes.data if cuda_math.SIMULATOR else x.device_ctypes_pointer.value

    def stream_handle(self) -> int:
        h = getattr(self.stream, "handle", None)
        if h is None:
            return 0
        try:
            return int(h)
        except TypeError:
            return int(getattr(h, "value", 0) or 0)

    def workspace(self, nbytes: int):
        buf = self.empty((nbytes,), np.uint8)
        return _Memory(buf, self.pointer(buf), nbytes)

    def cooperative(self, kernel, block: int, *args) -> None:
        """Launch a kernel that synchronises its whole grid (a device loop): as many blocks as can be
        resident at once on this GPU (one block on the simulator, which runs blocks one by one)."""
        if cuda_math.SIMULATOR:
            kernel[1, block, self.stream](*args)
            return
        key = (id(kernel), tuple(kernel.typeof_pyval(a) for a in args))
        grid = self._grids.get(key)
        if grid is None:
            compiled = kernel.compile(key[1])
            grid = self._grids[key] = max(1, compiled.max_cooperative_grid_blocks(block))
        kernel[grid, block, self.stream](*args)

    @staticmethod
    def dense(*arrays) -> bool:
        """Whether every array is C-contiguous (cuBLAS needs a leading dimension; an input on the
        device may be any strided view, which the tiled kernel takes instead)."""
        return all(a.flags["C_CONTIGUOUS"] if hasattr(a, "flags") else a.is_c_contiguous() for a in arrays)

    def gemm(self, a, a_t: bool, b, b_t: bool, c, tf32: bool) -> None:
        """c = op(a) @ op(b) on cuBLAS, on this stream (asynchronous)."""
        plan = _gemm_plan(tuple(a.shape), a_t, tuple(b.shape), b_t)
        device = 0 if cuda_math.SIMULATOR else self.cuda.get_current_device().id
        cublas.blas(device, self.workspace).gemm(self.stream_handle(), np.dtype(c.dtype), plan, self.pointer(a),
                                                 self.pointer(b), self.pointer(c), tf32)


    # -- cuFFT (backends/cufft.py) ------------------------------------------------------------
    def fft(self, x, out, kind: str, inverse: bool, ndim: int) -> None:
        """out = the unnormalized transform of x over its last ndim axes, on cuFFT (asynchronous)."""
        cufft.run(self, x, out, kind, inverse, ndim, cuda_math.SIMULATOR)


@dataclass(frozen=True)
class _Memory:
    array: object
    pointer: int
    nbytes: int


@functools.lru_cache(maxsize=1024)
def _gemm_plan(a_shape, a_t, b_shape, b_t):
    return cublas.gemm_plan(a_shape, a_t, b_shape, b_t)


@functools.cache
def runtime() -> Runtime:
    return Runtime()
