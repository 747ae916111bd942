"""The cuda backend beyond the shared end-to-end tests (which run on it through the `backend`
fixture): reductions in every layout and chunking, determinism, device arrays in and out, vjp, print,
the disk cache, and the PTX check (every kernel compiles; no float64 instruction in float32 kernels).

CI has no GPU: these run on Numba's CUDA simulator (tests/conftest.py sets NUMBA_ENABLE_CUDASIM=1),
except the PTX check, which compiles in a second process without the simulator (no GPU needed)."""
import itertools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tracekern as tk
from tests.conftest import jit_on, to_host
from tests.test_property import instantiate, programs
from tracekern.backends import cuda as tkcuda

TOL = {np.float32: dict(rtol=2e-5, atol=1e-5), np.float64: dict(rtol=1e-11, atol=1e-12)}
SIMULATOR = tkcuda.launch_config().simulator
# a row long enough that a block folds it in several chunks on this device (the simulator's launch
# has 2 blocks of 32 threads; a GPU's 256 threads that fold at least 8 elements each)
_L = tkcuda.launch_config()
LONG_ROW = 2 * _L.threads * _L.min_chunk + 6


def both(fun, *args):
    return jit_on("cuda", fun)(*args), tk.jit(fun, backend="interpret")(*args)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
@pytest.mark.parametrize("op", ["sum", "max", "min", "prod"])
def test_reductions_over_every_axis_combination(op, dtype):
    """Shapes that fold by block (last axis reduced) and by thread, in one chunk and in several, on
    this device's launch sizes (LONG_ROW and 150 elements need chunks)."""
    rng = np.random.default_rng(0)
    for shape in ((3, 4, 5), (2, 5, LONG_ROW), (150, 2, 1)):
        if dtype == np.int64:
            x = rng.integers(-3, 4, shape).astype(dtype)
            fun_of = lambda axes: lambda a: getattr(np, op)(a * 2 - 1, axis=axes)  # noqa: E731
        else:
            x = rng.uniform(0.9, 1.1, shape).astype(dtype)
            fun_of = lambda axes: lambda a: getattr(np, op)(np.exp(a) * 0.5, axis=axes)  # noqa: E731
        for r in range(0, 4):
            for axes in itertools.combinations(range(3), r):
                got, want = both(fun_of(axes), x)
                assert np.asarray(got).dtype == np.asarray(want).dtype
                tol = TOL.get(dtype, dict(rtol=0, atol=0))
                np.testing.assert_allclose(got, want, **tol, err_msg=f"{op} axes={axes} shape={shape}")


def test_chunked_reductions_are_planned_with_several_partials():
    """The shapes above do reach the two-pass path (a fold kernel), in both layouts."""
    x = np.ones((2, 5, LONG_ROW))
    by_block = tk.jit(lambda a: a.sum(), backend="cuda").lower(x).source
    by_thread = tk.jit(lambda a: a.sum(axis=0), backend="cuda").lower(np.ones((150, 2, 1))).source
    for source in (by_block, by_thread):
        assert "partial results of reduce_sum" in source
    assert "cuda.shared.array" in by_block and "cuda.shared.array" not in by_thread


def test_reductions_are_deterministic_bit_for_bit():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((3, 300)).astype(np.float32)
    f = jit_on("cuda", lambda a: (np.sum(np.exp(a)), np.sum(a * a, axis=1), np.max(a, axis=0)))
    first = f(x)
    for _ in range(2):
        for a, b in zip(first, f(x)):
            assert np.array_equal(np.asarray(a).view(np.uint32), np.asarray(b).view(np.uint32))


def test_device_arrays_in_and_out():
    from numba import cuda

    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5))
    w = rng.standard_normal((5, 4))
    f = tk.jit(lambda x, w: np.tanh(x @ w).sum(axis=1), backend="cuda")
    out = f(cuda.to_device(x), w)                       # a device array and a NumPy array
    assert hasattr(out, "copy_to_host") and out.shape == (6,)
    np.testing.assert_allclose(out.copy_to_host(), np.tanh(x @ w).sum(axis=1), rtol=1e-12)
    again = f(cuda.to_device(x), cuda.to_device(w))
    np.testing.assert_allclose(again.copy_to_host(), out.copy_to_host(), rtol=0, atol=0)
    # a device result feeds the next call without a copy to the host; the cpu backend copies it
    g = tk.jit(lambda v: v * 2, backend="cuda")(out)
    np.testing.assert_allclose(g.copy_to_host(), 2 * out.copy_to_host())
    np.testing.assert_allclose(tk.jit(lambda v: v * 2, backend="cpu")(out), 2 * out.copy_to_host())


def test_outputs_never_alias_inputs_or_constants():
    from numba import cuda

    c = np.arange(3.0)
    f = tk.jit(lambda x: (x, c), backend="cuda")
    x = cuda.to_device(np.ones(3))
    a, b = f(x)
    a[0:1].copy_to_device(np.array([5.0]))
    b[0:1].copy_to_device(np.array([7.0]))
    assert x.copy_to_host()[0] == 1 and f(x)[1].copy_to_host()[0] == 0


def test_non_contiguous_and_integer_inputs():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((12, 10)).astype(np.float32)
    for v in (base.T, base[::2, 1::3], base[::-1]):
        got, want = both(lambda a: np.tanh(a) * 2 + a.sum(axis=0), v)
        np.testing.assert_allclose(got, want, **TOL[np.float32])
    got, want = both(lambda a, b: a @ b, base.T, base[:, :10])   # a transposed operand
    np.testing.assert_allclose(got, want, **TOL[np.float32])
    for dtype in (np.int32, np.int64):
        a = rng.integers(-5, 5, (4, 6)).astype(dtype)
        b = rng.integers(-5, 5, (6, 3)).astype(dtype)
        got, want = both(lambda a, b: (a @ b, np.abs(a) ** 2, a.sum(axis=1), a.max(), np.sign(a), a > 0, (a > 0) @ (b > 0)), a, b)
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
            assert np.asarray(g).dtype == w.dtype


def test_matmul_tiles_with_ragged_edges_and_batches():
    rng = np.random.default_rng(5)
    for shapes in (((9, 7), (7, 5)), ((3, 5, 6), (3, 6, 9)), ((1, 11), (11, 1)), ((2, 0), (0, 3))):
        a, b = (rng.standard_normal(s).astype(np.float32) for s in shapes)
        for fun in (lambda a, b: a @ b, lambda a, b: np.swapaxes(np.swapaxes(b, -1, -2) @ np.swapaxes(a, -1, -2), -1, -2),
                    lambda a, b: (np.swapaxes(a, -1, -2) * 1.0).swapaxes(-1, -2) @ b):
            got, want = both(fun, a, b)
            np.testing.assert_allclose(got, want, **TOL[np.float32], err_msg=str(shapes))


def test_vjp_runs_both_halves_on_the_device():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 3))
    f = lambda x: np.tanh(x) * x.sum(axis=0)  # noqa: E731
    out, pull = tk.vjp(f, x, backend="cuda")
    assert hasattr(out, "copy_to_host")
    ct = np.ones((4, 3)) * 0.5
    (g,) = pull(out)                                   # a device cotangent
    (want,) = tk.jit(lambda x, c: tk.vjp(f, x)[1](c), backend="interpret")(x, out.copy_to_host())
    np.testing.assert_allclose(to_host(g), want, rtol=1e-12)
    (g2,) = tk.vjp(tk.jit(f, backend="cuda"), x)[1](ct)   # the jitted function's backend
    assert hasattr(g2, "copy_to_host")


def test_print_runs_on_the_host_in_program_order(capfd):
    def f(x):
        tk.print("x is", x)
        y = x * 3 + 1
        tk.print("sum", y.sum())
        return y
    x = np.array([0.0, 1.0])
    jit_on("cuda", f)(x)
    cuda_out = capfd.readouterr().out
    tk.jit(f, backend="cpu")(x)
    assert cuda_out == capfd.readouterr().out
    assert cuda_out.splitlines()[0].startswith("x is [0. 1.]")


def test_generated_modules_are_written_once(tmp_path):
    """A second process finds the module it would generate and loads it without rewriting it
    (numba-cuda keys its cache on the file's modification time and size)."""
    code = ("import numpy as np, tracekern as tk\n"
            "print(tk.jit(lambda x: np.sin(x).sum(), backend='cuda')(np.linspace(0, 1, 5)).copy_to_host())")
    env = dict(os.environ, TRACEKERN_CACHE_DIR=str(tmp_path), NUMBA_ENABLE_CUDASIM="1")
    run = lambda: subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)  # noqa: E731
    first = run()
    assert first.returncode == 0, first.stderr
    paths = sorted(tmp_path.glob("tk_*.py"))
    assert len(paths) >= 2   # a kernel module and the host launcher
    stamps = [p.stat().st_mtime_ns for p in paths]
    second = run()
    assert second.stdout == first.stdout
    assert sorted(tmp_path.glob("tk_*.py")) == paths and [p.stat().st_mtime_ns for p in paths] == stamps


# -- loops on the device -------------------------------------------------------------------------------

def _scans():
    rng = np.random.default_rng(7)
    a, xs = rng.uniform(0.5, 0.9, 8), rng.standard_normal((6, 8)) * 0.3
    w = rng.standard_normal((8, 8)) / 3

    def rnn(a, xs):                       # the RNN of kernels/: a vector carry, a 0-d output per step
        h, ys = tk.scan(lambda h, x: (np.tanh(a * h + x), np.mean(np.tanh(a * h + x))), np.zeros_like(a), xs)
        return np.mean(h * h) + np.mean(ys)

    def two_carries(a, xs):               # a 0-d carry beside a vector one, reversed, a closed-over constant
        c = np.arange(8.0) / 8
        (h, s), ys = tk.scan(lambda cr, x: ((np.sin(cr[0] * x) + c, cr[1] + np.sum(x * cr[0])), cr[0] * cr[1]),
                             (a, np.float64(0.5)), xs, reverse=True)
        return np.sum(h) + s + np.sum(ys)

    def with_matmul(a, xs):               # a body with a matmul: the loop stays on the host
        h, _ = tk.scan(lambda h, x: (np.tanh(h @ w + x), None), a, xs)
        return np.sum(h * h)
    return [(rnn, (a, xs), True), (two_carries, (a, xs), True), (with_matmul, (a, xs), False)]


@pytest.mark.parametrize("case", [0, 1, 2])
def test_scans_whose_body_is_only_loops_run_on_the_device(case):
    """One cooperative kernel runs every step (the body's kernels are its phases); forward and
    backward scans alike, with values and gradients equal to the interpreter's."""
    f, args, on_device = _scans()[case]
    vg = tk.jit(tk.value_and_grad(f, argnums=(0, 1)), backend="cuda")
    launches = vg.lower(*args).source.count("R.cooperative(")
    assert (launches >= 2) == on_device, launches      # the forward scan and the backward scan
    v, g = to_host(vg(*args))
    vi, gi = tk.jit(tk.value_and_grad(f, argnums=(0, 1)), backend="interpret")(*args)
    assert v == pytest.approx(vi, rel=1e-12)
    for a, b in zip(g, gi):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("k", [1, 2, 6])
def test_checkpointed_scans_run_their_schedule_on_the_device(k):
    """The binomial schedule's actions (advance, store, restore, backward step) walked by one
    cooperative kernel, with k snapshots on the device: gradients equal the interpreter's for
    every k (1: one snapshot; 6: one per step)."""
    f, args, _ = _scans()[0]
    a, xs = args

    def checkpointed(a, xs):
        h, ys = tk.scan(lambda h, x: (np.tanh(a * h + x), np.mean(h)), np.zeros_like(a), xs, checkpoint=k)
        return np.mean(h * h) + np.mean(ys)
    vg = tk.jit(tk.value_and_grad(checkpointed), backend="cuda")
    source = vg.lower(a, xs).source
    assert ("checkpointed schedule" in source) == (k < len(xs)) and "R.cooperative(" in source   # (k >= n: a plain scan)
    v, g = to_host(vg(a, xs))
    vi, gi = tk.jit(tk.value_and_grad(checkpointed), backend="interpret")(a, xs)
    assert v == pytest.approx(vi, rel=1e-12)
    np.testing.assert_allclose(g, gi, rtol=1e-10, atol=1e-12)


def test_while_loops_and_checkpointed_loops_with_matmuls_stay_on_the_host():
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal(8), rng.standard_normal((8, 8)) / 3

    def f(x):
        h = tk.while_loop(lambda h: np.sum(h * h) < 50.0, lambda h: h * 1.3 + 0.1, x)
        g, _ = tk.scan(lambda c, r: (np.tanh(c @ w + r), None), h, np.stack([x, x, x]), checkpoint=2)
        return np.sum(g * g)
    vg = tk.jit(tk.value_and_grad(f), backend="cuda")
    assert "R.cooperative(" not in vg.lower(x).source
    v, g = to_host(vg(x))
    vi, gi = tk.jit(tk.value_and_grad(f), backend="interpret")(x)
    assert v == pytest.approx(vi, rel=1e-12)
    np.testing.assert_allclose(g, gi, rtol=1e-10, atol=1e-12)


def test_lower_shows_the_kernels_and_the_launcher():
    low = tk.jit(lambda x: np.exp(x).sum(), backend="cuda").lower(np.ones(8))
    assert "@cuda.jit" in low.source and "def step(R" in low.source
    assert low.memory.peak_bytes["step"] >= 8


def test_without_a_gpu_or_the_simulator_the_error_says_what_to_do():
    code = "import numpy as np, tracekern as tk\ntk.jit(lambda x: x + 1, backend='cuda')(np.ones(2))"
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    if out.returncode == 0:
        pytest.skip("this machine has a GPU")
    assert "NUMBA_ENABLE_CUDASIM=1" in out.stderr and "backend='cpu'" in out.stderr


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_cuda_equals_interpret(program):
    f, args = instantiate(program)
    argnums = tuple(range(len(args)))
    value, grads = jit_on("cuda", tk.value_and_grad(f, argnums=argnums))(*args)
    want_value, want_grads = tk.jit(tk.value_and_grad(f, argnums=argnums), backend="interpret")(*args)
    assert value == pytest.approx(want_value, rel=1e-12, abs=1e-12)
    for a, b in zip(grads, want_grads):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# -- PTX: compiled in another process, without the simulator (compile_ptx needs no GPU) ----------------

def _ptx_report(corpus: str) -> dict:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    out = subprocess.run([sys.executable, "-m", "tests.ptx_corpus", corpus], env=env, capture_output=True,
                         text=True, timeout=900, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_every_kernel_compiles_to_ptx_without_float64_in_float32_kernels():
    """The corpus's kernels that bring a new function call or statement form in their dtypes (tests/ptx_corpus.py
    _covering: about a third of them; `python -m tests.ptx_corpus all-every` compiles every one)."""
    report = _ptx_report("all")
    assert report["distinct"] >= 500, report         # the corpus reaches every renderer path
    assert report["kernels"] >= 180 and report["float32_kernels"] >= 100, report
    assert report["problems"] == [], "\n".join(report["problems"])
    # float32 kernels whose float64 is the program's own (a convert to float64 in their source): betaln's only
    assert report["exempt"] and all("gammaln_f64" in e.split() for e in report["exempt"]), report["exempt"]


def test_float_products_are_not_contracted_into_fma_on_a_gpu():
    """A GPU's compiler fuses x * y + z into one fma (one rounding) unless the product is mul.rn:
    NumPy rounds twice. Found on an H100: uniform draws in [minval, maxval) differed from the
    interpreter's in the last bit. The kernels' PTX has mul.rn and no fma."""
    report = _ptx_report("contraction")
    assert sorted(report) == ["fmadd float32", "fmadd float64", "uniform float32", "uniform float64"], report
    for name, counts in report.items():
        assert counts["fma"] == 0 and counts["mul.rn"] >= 1, (name, counts)


def test_running_scans_read_their_trip_count_from_the_array():
    """On an H100 a constant-trip loop carrying a complex product lost its last store (cumprod of
    complex128 along a 3-row axis ended in a row of zeros; the simulator cannot show it): the scan
    kernels' loops take their bound from the array's shape."""
    z = (np.arange(12.0) + 1j).reshape(3, 4)
    for axis in (0, 1):
        lowered = tk.jit(lambda z: np.cumprod(z, axis=axis), backend="cuda").lower(z)
        assert f".shape[{axis}]):" in lowered.source and "for j in range(1, " in lowered.source
        np.testing.assert_allclose(to_host(tk.jit(lambda z: np.cumprod(z, axis=axis), backend="cuda")(z)),
                                   np.cumprod(z, axis=axis), rtol=1e-14)


def test_the_ptx_check_catches_a_float64_constant():
    report = _ptx_report("planted")
    assert len(report["problems"]) == 1 and "f64" in report["problems"][0], report

