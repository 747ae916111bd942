"""FFTs on cuFFT, NVIDIA's FFT library, through nvmath-python's low-level bindings (the extra that brings
cuBLAS): the fft primitive's three kinds over the trailing axes of C-contiguous device arrays,
unnormalized, on the step's stream. Plans are made once per layout, device and thread.

c2c and r2c are one batched plan each. c2r follows NumPy's irfftn exactly: complex inverse transforms
over the leading axes (a strided plan, in place on a copy of the input), the imaginary parts of the
zero and n / 2 frequencies dropped (NumPy's c2r ignores them; cuFFT's is undefined for them), then a
batched 1-D c2r over the last axis (which overwrites its input: the copy). Numba's CUDA simulator
cannot run cuFFT (NVIDIA's compiled library): tests check the calls against a stand-in (use_library)."""
from __future__ import annotations

import functools
import math
import threading

import numpy as np
from numba import cuda

from ..errors import TracekernError

_LOCAL = threading.local()
_OVERRIDE: list = []   # tests: a stand-in for nvmath.bindings.cufft (use_library)

FORWARD, INVERSE = -1, 1   # cuFFT's directions
# (cuFFT's type and exec function per kind and operand dtype)
TYPES = {("c2c", "complex64"): ("C2C", "exec_c2c"), ("c2c", "complex128"): ("Z2Z", "exec_z2z"),
         ("r2c", "float32"): ("R2C", "exec_r2c"), ("r2c", "float64"): ("D2Z", "exec_d2z"),
         ("c2r", "complex64"): ("C2R", "exec_c2r"), ("c2r", "complex128"): ("Z2D", "exec_z2d")}

UNAVAILABLE = ("np.fft on the cuda backend runs on cuFFT through nvmath-python, which is not available here{why}. "
               "Install it on a machine with a GPU (pip install -e '.[cu13]', or '.[cu12]' by the driver's CUDA "
               "major version), or compile this function with tk.jit(f, backend='cpu') (FFTs in compiled code, "
               "rocket-fft) or 'interpret'.")


def use_library(lib) -> None:
    """Use `lib` (an object with nvmath.bindings.cufft's functions) instead of cuFFT: tests check the
    calls on Numba's CUDA simulator, where cuFFT cannot run. use_library(None) restores cuFFT."""
    _OVERRIDE[:] = [lib] if lib is not None else []
    _LOCAL.__dict__.clear()


@functools.cache
def _nvmath():
    from nvmath.bindings import cufft  # (optional: the cuda extras install it)

    return cufft


def library(simulator: bool = False):
    """nvmath.bindings.cufft (or the stand-in given to use_library), or None (not installed; always
    None on the simulator without a stand-in)."""
    if _OVERRIDE:
        return _OVERRIDE[0]
    if simulator:
        return None
    try:
        return _nvmath()
    except ImportError:
        return None


def _plan(lib, key: tuple, rank: int, n, inembed, istride: int, idist: int, onembed, ostride: int, odist: int,
          kind: str, dtype: str, batch: int):
    """A cached plan handle for this thread (cuFFT's plans are not to be shared between threads)."""
    plans = _LOCAL.__dict__.setdefault("plans", {})
    handle = plans.get(key)
    if handle is None:
        handle = lib.create()
        lib.make_plan_many64(handle, rank, list(n), list(inembed), istride, idist, list(onembed), ostride, odist,
                             int(getattr(lib.Type, TYPES[(kind, dtype)][0])), batch)
        plans[key] = handle
    return handle


@cuda.jit
def _edges(a, last):
    """a (rows, m): drop the imaginary parts of columns 0 and `last` (-1: none)."""
    i = cuda.grid(1)
    if i < a.shape[0]:
        a[i, 0] = a[i, 0].real
        if last >= 0:
            a[i, last] = a[i, last].real


def run(R, x, out, kind: str, inverse: bool, ndim: int, simulator: bool) -> None:
    """out = the unnormalized transform of x over its last `ndim` axes (R: the cuda Runtime)."""
    lib = library(simulator)
    if lib is None:
        raise TracekernError(UNAVAILABLE.format(why=" (Numba's CUDA simulator cannot run it)" if simulator else ""))
    if not R.dense(x):
        raise TracekernError("np.fft on the cuda backend needs C-contiguous operands; this one is a strided view: "
                             "pass a contiguous array (np.ascontiguousarray, cupy.ascontiguousarray)")
    if x.size == 0 or out.size == 0:
        return
    shape, out_shape = tuple(x.shape), tuple(out.shape)   # (the simulator's shapes index from the front only)
    dims = shape[len(shape) - ndim:]
    batch = math.prod(shape[:len(shape) - ndim])
    dtype = np.dtype(x.dtype).name
    exec_name = TYPES[(kind, dtype)][1]
    device = 0 if simulator else R.cuda.get_current_device().id
    stream = R.stream_handle()

    def execute(handle, src: int, dst: int, direction: int | None = None) -> None:
        lib.set_stream(handle, stream)
        fn = getattr(lib, exec_name if direction is None or kind == "c2c" else TYPES[("c2c", dtype)][1])
        fn(handle, src, dst, *(() if direction is None else (direction,)))

    if kind in ("c2c", "r2c"):
        odims = out_shape[len(out_shape) - ndim:]
        key = (device, kind, dtype, dims, batch)
        handle = _plan(lib, key, ndim, dims, dims, 1, math.prod(dims), odims, 1, math.prod(odims), kind, dtype, batch)
        execute(handle, R.pointer(x), R.pointer(out), (INVERSE if inverse else FORWARD) if kind == "c2c" else None)
        return
    # c2r: NumPy's order (complex inverse transforms over the leading axes, then the real one)
    tmp = R.copy(x)
    m, n_last = dims[-1], out_shape[-1]
    lead = dims[:-1]
    if lead:
        key = (device, "c2r-lead", dtype, lead, m)
        handle = _plan(lib, key, len(lead), lead, lead, m, 1, lead, m, 1, "c2c", dtype, m)
        step = math.prod(dims) * np.dtype(dtype).itemsize
        base = R.pointer(tmp)
        for b in range(batch):
            execute(handle, base + b * step, base + b * step, INVERSE)
    rows = batch * math.prod(lead)
    threads = min(256, rows)
    _edges[-(-rows // threads), threads, R.stream](tmp.reshape(rows, m), n_last // 2 if n_last % 2 == 0 else -1)
    key = (device, "c2r", dtype, n_last, rows)
    handle = _plan(lib, key, 1, (n_last,), (m,), 1, m, (n_last,), 1, n_last, "c2r", dtype, rows)
    execute(handle, R.pointer(tmp), R.pointer(out))
