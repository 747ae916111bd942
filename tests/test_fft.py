"""np.fft (issue 30): the cuda backend's FFTs on cuFFT (backends/cufft.py), checked on Numba's CUDA
simulator against a stand-in for nvmath.bindings.cufft that computes each transform from the plan's
layout (n, embeddings, strides, distances, batch) exactly as cuFFT defines them, and that overwrites a
c2r input as cuFFT may (so a wrong layout or a missing copy gives a wrong result); the simulator's error
without it; NumPy's errors. Values, dtypes and gradients of every np.fft function on interpret and cpu
are tests/numpy_cases.py's "fft" family."""
import ctypes
import os
import subprocess
import sys
import threading
import warnings

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import stand_in_or_recorded, to_host
from tracekern.backends import cuda as tkcuda
from tracekern.backends import cufft
from tracekern.errors import TracekernError


class FakeCufft:
    """nvmath.bindings.cufft's functions as tracekern calls them, computed with NumPy on host memory."""

    class Type:
        R2C, C2R, C2C, D2Z, Z2D, Z2Z = 0x2A, 0x2C, 0x29, 0x6A, 0x6C, 0x69

    _IN = {0x2A: np.float32, 0x2C: np.complex64, 0x29: np.complex64, 0x6A: np.float64, 0x6C: np.complex128, 0x69: np.complex128}
    _OUT = {0x2A: np.complex64, 0x2C: np.float32, 0x29: np.complex64, 0x6A: np.complex128, 0x6C: np.float64, 0x69: np.complex128}

    def __init__(self):
        self.calls: list = []
        self.plans: dict = {}
        self.lock = threading.Lock()

    def create(self):
        with self.lock:
            self.plans[len(self.plans) + 1] = None
            return len(self.plans)

    def make_plan_many64(self, h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch):
        assert len(n) == rank and len(inembed) == rank and len(onembed) == rank
        self.plans[h] = (rank, tuple(n), tuple(inembed), istride, idist, tuple(onembed), ostride, odist, typ, batch)
        self.calls.append(("plan", rank, tuple(n), istride, idist, ostride, odist, typ, batch))
        return 0

    def set_stream(self, h, stream):
        self.calls.append(("stream", h))

    @staticmethod
    def _view(addr, dtype, embed, stride, dist, batch, shape):
        """Element (b, i...) of a batch at b * dist + stride * (i's row-major offset in embed)."""
        itemsize = np.dtype(dtype).itemsize
        steps = [stride * int(np.prod(embed[j + 1:])) for j in range(len(embed))]
        extent = (batch - 1) * dist + sum((s - 1) * st for s, st in zip(shape, steps)) + 1
        flat = np.frombuffer((ctypes.c_char * (extent * itemsize)).from_address(addr), dtype)
        return np.lib.stride_tricks.as_strided(flat, (batch,) + tuple(shape), tuple(x * itemsize for x in [dist] + steps))

    def _exec(self, h, i, o, direction, name):
        rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch = self.plans[h]
        self.calls.append((name, h, direction))
        axes = tuple(range(1, rank + 1))
        if typ in (0x29, 0x69):
            x = self._view(i, self._IN[typ], inembed, istride, idist, batch, n).copy()
            y = np.fft.ifftn(x, axes=axes, norm="forward") if direction == 1 else np.fft.fftn(x, axes=axes)
            out_shape = n
        elif typ in (0x2A, 0x6A):
            x = self._view(i, self._IN[typ], inembed, istride, idist, batch, n).copy()
            y, out_shape = np.fft.rfftn(x, axes=axes), n[:-1] + (n[-1] // 2 + 1,)
        else:
            half = n[:-1] + (n[-1] // 2 + 1,)
            x = self._view(i, self._IN[typ], inembed, istride, idist, batch, half)
            y, out_shape = np.fft.irfftn(x.copy(), s=n, axes=axes, norm="forward"), n
            x[...] = np.nan   # (cuFFT's c2r may overwrite its input)
        self._view(o, self._OUT[typ], onembed, ostride, odist, batch, out_shape)[...] = y

    def exec_c2c(self, h, i, o, d):
        self._exec(h, i, o, d, "exec_c2c")

    def exec_z2z(self, h, i, o, d):
        self._exec(h, i, o, d, "exec_z2z")

    def exec_r2c(self, h, i, o):
        self._exec(h, i, o, None, "exec_r2c")

    def exec_d2z(self, h, i, o):
        self._exec(h, i, o, None, "exec_d2z")

    def exec_c2r(self, h, i, o):
        self._exec(h, i, o, None, "exec_c2r")

    def exec_z2d(self, h, i, o):
        self._exec(h, i, o, None, "exec_z2d")


class RecordingCufft(FakeCufft):
    """On a GPU: the real nvmath.bindings.cufft, each call recorded as FakeCufft records it (the stand-in reads
    host memory: on a GPU its pointers are device pointers, and reading them there is a segfault)."""

    def __init__(self, real):
        super().__init__()
        self.real, self.Type = real, real.Type

    def create(self):
        return self.real.create()

    def make_plan_many64(self, h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch):
        self.calls.append(("plan", rank, tuple(n), istride, idist, ostride, odist, typ, batch))
        return self.real.make_plan_many64(h, rank, n, inembed, istride, idist, onembed, ostride, odist, typ, batch)

    def set_stream(self, h, stream):
        self.calls.append(("stream", h))
        return self.real.set_stream(h, stream)

    def _exec(self, h, i, o, direction, name):
        self.calls.append((name, h, direction))
        return getattr(self.real, name)(h, i, o, *(() if direction is None else (direction,)))


def _on_simulator() -> bool:
    return tkcuda.launch_config().simulator


@pytest.fixture
def fake():
    """cuFFT's calls on the stand-in (on the simulator: cuFFT cannot run there), or on a GPU on the real
    cuFFT with its calls recorded."""
    lib = stand_in_or_recorded(cufft, FakeCufft, RecordingCufft, "cuFFT")
    yield lib
    cufft.use_library(None)


def _program(x, z):
    return (np.fft.fft(z), np.fft.ifft(z, n=5, axis=0), np.fft.fft(x, axis=0, norm="ortho"), np.fft.rfft(x),
            np.fft.irfft(z, n=7), np.fft.fft2(z, s=(4, 6)), np.fft.irfftn(z), np.fft.rfft2(x[None], axes=(0, 2)),
            np.fft.irfft2(z[:, :3], s=(3, 4)), np.fft.irfft(z, axis=0, norm="forward"), np.fft.ifftn(z[None], axes=(2, 0)))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_kind_and_layout_on_cufft_equals_numpy(fake, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 8)).astype(dtype)
    z = (x + 1j * rng.standard_normal((3, 8))).astype(np.result_type(dtype, np.complex64))
    got = to_host(tk.jit(_program, backend="cuda")(x, z))
    want = _program(x, z)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-12 if dtype == np.float64 else 2e-5, atol=1e-12 if dtype == np.float64 else 2e-5)
    names = {c[0] for c in fake.calls}
    single = dtype == np.float32
    assert names >= ({"exec_c2c", "exec_r2c", "exec_c2r"} if single else {"exec_z2z", "exec_d2z", "exec_z2d"})
    # irfftn's complex transforms over the leading axis: a strided plan (stride m, distance 1, a batch of m)
    assert any(c[0] == "plan" and c[3] > 1 and c[4] == 1 for c in fake.calls)


def test_gradients_through_cufft_equal_the_interpreter(fake):
    rng = np.random.default_rng(1)
    x, z = rng.standard_normal((3, 8)), rng.standard_normal((3, 8)) + 1j * rng.standard_normal((3, 8))

    def loss(x, z):
        return sum(np.sum(np.abs(o) ** 2 * (k + 1)) for k, o in enumerate(_program(x, z)))
    got = to_host(tk.jit(tk.grad(loss, argnums=(0, 1)), backend="cuda")(x, z))
    want = tk.jit(tk.grad(loss, argnums=(0, 1)), backend="interpret")(x, z)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10)


def test_the_recording_wrapper_passes_every_call_to_the_library():
    """RecordingCufft, the fixture's library on a GPU, run here around the stand-in as its library: NumPy's values,
    and every call recorded as the stand-in records it (the arguments reach the library as given)."""
    if not _on_simulator():
        pytest.skip("the stand-in reads host memory: on a GPU the fixture's tests run RecordingCufft on cuFFT")
    inner = FakeCufft()
    lib = RecordingCufft(inner)
    cufft.use_library(lib)
    try:
        rng = np.random.default_rng(2)
        x = rng.standard_normal((3, 8))
        z = x + 1j * rng.standard_normal((3, 8))
        for g, w in zip(to_host(tk.jit(_program, backend="cuda")(x, z)), _program(x, z)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    finally:
        cufft.use_library(None)
    assert lib.calls == inner.calls
    assert {c[0] for c in lib.calls} >= {"plan", "stream", "exec_z2z", "exec_d2z", "exec_z2d"}


def test_plans_are_made_once_per_layout_and_thread(fake):
    f = tk.jit(lambda z: np.fft.fft(z) * 2, backend="cuda")
    z = np.ones((4, 8), np.complex128)
    f(z)
    f(z)
    assert len([c for c in fake.calls if c[0] == "plan"]) == 1
    t = threading.Thread(target=f, args=(z,))
    t.start()
    t.join()
    assert len([c for c in fake.calls if c[0] == "plan"]) == 2


def test_the_simulator_refuses_cufft_naming_what_runs_it():
    if not _on_simulator():
        pytest.skip("a GPU runs cuFFT: the simulator's refusal is checked where the simulator runs")
    with pytest.raises(TracekernError, match=r"cuFFT through nvmath-python.*simulator cannot run it.*backend='cpu'") as err:
        tk.jit(lambda x: np.fft.rfft(x), backend="cuda")(np.ones(8))
    assert __file__ in str(err.value)


def test_numpys_errors():
    x = np.ones(8)
    with pytest.raises(ValueError, match="Invalid number of FFT data points|invalid number of FFT data points"):
        tk.jit(lambda x: np.fft.fft(x, n=0))(x)
    with pytest.raises(TypeError, match="np.fft.rfft takes real input"):
        tk.jit(lambda z: np.fft.rfft(z))(x + 1j)
    with pytest.raises(ValueError, match="norm must be"):
        tk.jit(lambda x: np.fft.fft(x, norm="none"))(x)
    with pytest.raises(TypeError, match="np.fft.ihfft takes real input"):
        tk.jit(lambda z: np.fft.ihfft(z))(x + 1j)
    with pytest.raises(ValueError, match="norm must be"):
        tk.jit(lambda z: np.fft.hfft(z, norm="none"))(x + 1j)


def test_s_without_axes_names_the_last_axes_as_numpy():
    """s= without axes= transforms the last len(s) axes, with NumPy 2's DeprecationWarning; an s longer than the
    array's rank is NumPy's AxisError (it wrapped around: fftn(x, s=(2, 4)) of a 1-D x returned a length-2 result)."""
    x = np.arange(5.0)
    with pytest.raises(ValueError, match="axis -2 is out of bounds for an array of dimension 1"), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        tk.jit(lambda x: np.fft.fftn(x, s=(2, 4)), backend="interpret")(x)
    a = np.arange(12.0).reshape(3, 4)
    with pytest.warns(DeprecationWarning, match="axes") as caught:
        got = tk.jit(lambda a: np.fft.ifftn(a, s=(6,)), backend="interpret")(a)
    assert caught[0].filename == __file__, caught[0].filename    # (the warning names the user's line)
    with pytest.warns(DeprecationWarning):
        want = np.fft.ifftn(a, s=(6,))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_the_hermitian_edges_kernel_compiles_to_ptx():
    """cufft.py's own kernel (the imaginary parts of the zero and n/2 frequencies dropped before a c2r) types
    for complex64 and complex128 without the simulator, complex64 with no float64 instruction."""
    code = ("from numba import cuda, types\n"
            "from tracekern.backends import cufft, ptx_check as C\n"
            "for c in (types.complex64, types.complex128):\n"
            "    ptx, _ = cuda.compile_ptx(cufft._edges.py_func, types.void(types.Array(c, 2, 'C'), types.int64), cc=(8, 0))\n"
            "    assert c == types.complex128 or not [l for l in ptx.splitlines() if C._F64.search(l)], ptx\n"
            "print('ok')\n")
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0 and "ok" in out.stdout, out.stderr[-3000:]
