"""The vectorised transcendentals of the cpu backend against NumPy: ulp error over wide ranges,
special values, and the libm variant of a step for large sin/cos/tan arguments."""
import warnings

import numpy as np
import pytest
from numba import njit

import tracekern as tk
from tracekern.backends import vmath

RANGES = {
    "exp": [(-750, 750), (-1, 1), (-90, 90)],
    "log": [(0, 1e-300), (0, 10), (0, 1e300)],
    "log1p": [(-1, 1), (-1e-6, 1e-6), (0, 1e30)],
    "expm1": [(-1, 1), (-1e-6, 1e-6), (-50, 50), (-750, 710)],
    "tanh": [(-1, 1), (-0.5, 0.5), (-20, 20)],
    "sin": [(-10, 10), (-4e5, 4e5)],
    "cos": [(-10, 10), (-4e5, 4e5)],
    "tan": [(-10, 10), (-4e5, 4e5)],
}
SPECIALS = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1.0, -1.0, 1e-310, 5e-324, 1e308, -1e308, 700, 710, -745, 89, -104, 1e-7]
MAX_ULP = 5

_RUNNERS = {}


def _runner(fn):
    if fn not in _RUNNERS:
        @njit(error_model="numpy")
        def run(x, out):
            for i in range(x.shape[0]):
                out[i] = fn(x[i])
        _RUNNERS[fn] = run
    return _RUNNERS[fn]


def ulp_error(got, ref):
    dtype = ref.dtype
    got64, ref64 = got.astype(np.float64), ref.astype(np.float64)
    same = (got64 == ref64) | (np.isnan(got64) & np.isnan(ref64))
    spacing = np.spacing(np.abs(ref).astype(dtype)).astype(np.float64)
    with np.errstate(invalid="ignore"):
        return np.where(same, 0.0, np.abs(got64 - ref64) / spacing)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(RANGES))
def test_ulp_error_against_numpy(name, dtype):
    fn = getattr(vmath, f"{name}_{'f32' if dtype == 'float32' else 'f64'}")
    run = _runner(fn)
    rng = np.random.default_rng(0)
    for lo, hi in RANGES[name]:
        x = rng.uniform(lo, hi, 20000).astype(dtype)
        out = np.empty_like(x)
        run(x, out)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref = getattr(np, name)(x)
        err = ulp_error(out, ref)
        assert err.max() <= MAX_ULP, (name, dtype, (lo, hi), x[err.argmax()], out[err.argmax()], ref[err.argmax()])
    assert run.nopython_signatures[0].args[0].dtype.name == dtype


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["exp", "log", "log1p", "expm1", "tanh"])
def test_special_values(name, dtype):
    fn = getattr(vmath, f"{name}_{'f32' if dtype == 'float32' else 'f64'}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = np.array(SPECIALS, dtype)
        ref = getattr(np, name)(x)
    out = np.empty_like(x)
    _runner(fn)(x, out)
    err = ulp_error(out, ref)
    assert err.max() <= MAX_ULP, list(zip(x[err > MAX_ULP], out[err > MAX_ULP], ref[err > MAX_ULP]))
    # the sign of zero survives where NumPy keeps it
    np.testing.assert_array_equal(np.signbit(out[ref == 0]), np.signbit(ref[ref == 0]))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["sin", "cos", "tan"])
def test_trig_beyond_the_vectorised_range_reruns_with_libm(name, dtype):
    x = np.random.default_rng(1).uniform(-10, 10, 100_000).astype(dtype)
    fn = getattr(np, name)
    f = tk.jit(lambda v: fn(v) * 2 + fn(v).sum(), backend="cpu")
    f(x)
    module = next(iter(f._cache.values())).run._module
    # each kernel's libm variant (`kernel_exact`, imported by the driver as K<n>x) is compiled lazily
    exacts = [getattr(module, n) for n in dir(module) if n.startswith("K") and n.endswith("x")]
    assert exacts and hasattr(module, "step_exact")
    assert not any(e.signatures for e in exacts)      # not compiled while every argument is small
    x[[5, 70_000]] = [1e7, -3e12]
    x[9] = np.inf
    got = f(x)
    assert any(e.signatures for e in exacts)          # the libm variant ran
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fn(x) * 2 + fn(x).astype(np.float64).sum()
    np.testing.assert_allclose(got, want.astype(dtype), rtol=2e-5 if dtype == np.float32 else 1e-12, atol=1e-3)
    assert np.isnan(got[9])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pow_special_cases(dtype):
    xs = np.array([0.0, -0.0, 2.0, -2.0, -8.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, 3.0], dtype)
    ys = np.array([-1.0, -3.0, 0.0, 3.0, 1 / 3, np.nan, np.inf, 0.5, 2.0, 0.0, -np.inf, 2.5], dtype)
    got = tk.jit(np.power, backend="cpu")(xs[:, None], ys[None, :])
    with np.errstate(all="ignore"):
        want = np.power(xs[:, None], ys[None, :])
    np.testing.assert_allclose(got, want, rtol=1e-6)
    ok = ~np.isnan(want)  # (the sign of a NaN means nothing)
    np.testing.assert_array_equal(np.signbit(got[ok]), np.signbit(want[ok]))


def test_every_compiled_math_function_has_its_own_qualified_name():
    """Numba names cache files and machine-code symbols by qualified name (plus a per-process
    counter): two factory-made functions sharing one could be linked in place of each other when
    one comes from the disk cache and the other was compiled fresh."""
    from numba.core.registry import CPUDispatcher

    from tracekern.backends import cpu_math

    fns = [f for f in vars(vmath).values() if isinstance(f, CPUDispatcher)]
    fns += [f for f in vars(cpu_math).values() if isinstance(f, CPUDispatcher) and f not in fns]
    names = [f.py_func.__qualname__ for f in fns]
    assert len(fns) > 40 and len(set(names)) == len(names)


def test_math_functions_load_from_the_disk_cache_in_a_new_process(tmp_path):
    import os
    import subprocess
    import sys

    code = ("import numpy as np\nfrom tracekern.backends import vmath\n"
            "vmath.tanh_f32(np.float32(0.5)); vmath.sin_f64(1.0)\n"
            "print(sum(vmath.tanh_f32.stats.cache_hits.values()) + sum(vmath.sin_f64.stats.cache_hits.values()))")
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
            for _ in range(2)]
    assert [r.stdout.strip() for r in runs] == ["0", "2"], [r.stderr[-500:] for r in runs]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sign_is_numpys_and_its_loop_vectorizes(dtype):
    # np.sign's scalar function (the name the cpu backend's templates use for this dtype) is NumPy's at the zeros,
    # NaN and the infinities, and a loop of it vectorizes: a call to tanh at +-inf in its body kept the loop
    # scalar (np.sign of 2**22 float32 took 5.5x as long as before that branch was added)
    from tracekern.backends import cpu_math
    fn = getattr(cpu_math, cpu_math.functions(np.dtype(dtype))["sign"])

    @njit(error_model="numpy")
    def loop(a, out):
        for i in range(a.size):
            out[i] = fn(a[i])

    a = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 5e-324, -5e-324, -3.0, 2.0] * 8, dtype)
    out = np.empty_like(a)
    loop(a, out)
    expected = np.sign(a)
    assert out.dtype == expected.dtype and np.array_equal(out, expected, equal_nan=True)
    assert np.array_equal(np.signbit(out), np.signbit(expected))
    lanes = "float" if dtype == np.float32 else "double"
    assert any(f"<{n} x {lanes}>" in ir for ir in loop.inspect_llvm().values() for n in (2, 4, 8, 16))
