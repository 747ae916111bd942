"""The CUDA runtime the generated host code calls (no rendering): the device's launch sizes, one stream,
allocation, copies and host reads on it, cooperative launches, the cuBLAS and cuFFT handles, and
CompiledStep (a step's host module loaded and called)."""
from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numba.core.errors import NumbaError

from ..errors import TracekernError
from ..ir import Graph
from . import cache, cublas, cuda_math, cufft, fusion


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


class CompiledStep:
    """A compiled graph: call it with a list of arrays (NumPy or on the device), get device arrays."""

    def __init__(self, graph: Graph, plan: fusion.Plan, host: str, consts: list[np.ndarray], module,
                 lines: dict):
        self._simulated = module.launch.simulator
        self.graph = graph
        self.plan = plan
        self.host = host
        self.modules = [u.source for u in module.units.values()] + [host]   # kernels, then the host module
        self.peak_bytes = plan.peak_bytes
        # (kernel module source, [(dtype, ndim) of each parameter]) of each launch, for compile_ptx
        self.kernels = module.kernels
        self._consts = consts
        self._extras = module.extras
        self._on_device = module.on_device
        self._lines = lines
        self._module = None
        self._device_consts = None

    def __call__(self, args: Sequence) -> list:
        R = runtime()
        module = self._module or self._load()
        if self._device_consts is None:
            X = tuple(R.upload(v) if i in self._on_device else v for i, v in enumerate(self._extras))
            self._device_consts = [R.upload(c) for c in self._consts] + [X]
        simulated = self._simulated
        if simulated:   # the simulator's threads wait for each other at every syncthreads; a short
            switch = sys.getswitchinterval()   # GIL switch interval makes that 10x faster
            sys.setswitchinterval(5e-5)
        try:
            return list(module.step(R, *[R.input(a) for a in args], *self._device_consts))
        except NumbaError as err:
            raise cache.located_error("cuda", err, self._lines, self.host) from None
        finally:
            if simulated:
                sys.setswitchinterval(switch)

    @property
    def source(self) -> str:
        """The host module, then each kernel module it imports."""
        parts = [self.host] + [f"# ---- {cache.module_path(s).name} ----\n{s}" for s in self.modules[:-1]]
        return "\n\n".join(parts)

    def _load(self):
        for s in self.modules:
            self._module = cache.load_module(s)
        return self._module
