"""scipy.special (issue 30): the scalar routines of both backends against SciPy at hundreds of points over
each function's domain (cpu: the compiled functions, float64 and the float32 ones that round it; cuda:
scalar_rules.special_functions in float64 and in float32, run here on NumPy's real functions as the
simulator runs them), and the behaviour at the edges: gradients at x = 0 and in the tails, SciPy's
dtypes, and the errors. tests/numpy_cases.py's "special" family checks every traced name's values and
gradients on every backend. The README's "scipy.special" section quotes these tolerances."""
import os

import numpy as np
import pytest
import scipy.special as sp

import tracekern as tk
from tracekern.backends import cpu_math, cuda_math, scalar_rules

RNG = np.random.default_rng(30)


def _log_uniform(lo, hi, n):
    return 10.0 ** RNG.uniform(np.log10(lo), np.log10(hi), n)


_NEG = -RNG.uniform(0.0, 30.0, 200)
_NEG = _NEG[np.abs(_NEG - np.round(_NEG)) > 1e-3]   # (not at a pole)
DOMAINS = {
    "gammaln": np.concatenate([_log_uniform(1e-8, 1e4, 250), _NEG]),
    "digamma": np.concatenate([_log_uniform(1e-8, 1e4, 250), _NEG]),
    "erfinv": np.concatenate([RNG.uniform(-1, 1, 200), 1 - _log_uniform(1e-15, 1e-1, 60), -(1 - _log_uniform(1e-15, 1e-1, 60)),
                              _log_uniform(1e-300, 1e-3, 30)]),
    "log_ndtr": np.concatenate([RNG.uniform(-40, 40, 250), -_log_uniform(40, 1e5, 30), _log_uniform(1, 38, 30)]),
    "i0": np.concatenate([RNG.uniform(-700, 700, 150), RNG.uniform(-25, 25, 150)]),
    "i1": np.concatenate([RNG.uniform(-700, 700, 150), RNG.uniform(-25, 25, 150)]),
    "i0e": np.concatenate([RNG.uniform(-1e4, 1e4, 150), RNG.uniform(-25, 25, 150)]),
    "i1e": np.concatenate([RNG.uniform(-1e4, 1e4, 150), RNG.uniform(-25, 25, 150)]),
    "polygamma": np.concatenate([_log_uniform(1e-3, 1e3, 250), _NEG]),
}
REFERENCE = {"gammaln": sp.gammaln, "digamma": sp.psi, "erfinv": sp.erfinv, "log_ndtr": sp.log_ndtr, "i0": sp.i0, "i1": sp.i1,
             "i0e": sp.i0e, "i1e": sp.i1e}
# (relative tolerance, absolute tolerance) against SciPy: float64, then float32. digamma and polygamma have
# zeros (digamma's at 1.4616; polygamma's for negative x), where only an absolute error is meaningful
TOLERANCE = {"float64": {"gammaln": (1e-14, 0), "digamma": (2e-14, 1e-14), "erfinv": (2e-15, 0), "log_ndtr": (1e-12, 1e-300),
                         "i0": (1e-14, 0), "i1": (1e-14, 0), "i0e": (1e-14, 0), "i1e": (1e-14, 0), "polygamma": (1e-14, 1e-14)},
             "float32": {"gammaln": (1e-6, 1e-7), "digamma": (5e-6, 1e-6), "erfinv": (1e-6, 0), "log_ndtr": (1e-5, 1e-37),
                         "i0": (2e-6, 0), "i1": (2e-6, 0), "i0e": (2e-6, 0), "i1e": (2e-6, 0), "polygamma": (1e-5, 1e-5)}}


def _check(name, got, want, dtype):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isfinite(got), np.isfinite(want), err_msg=name)
    rtol, atol = TOLERANCE[np.dtype(dtype).name][name]
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol, err_msg=f"{name} {np.dtype(dtype).name}")


def _cases(dtype):
    for name, x in DOMAINS.items():
        x = x.astype(dtype)
        if name == "polygamma":
            for n in (1, 2, 4):
                yield name, (lambda f, v, n=n: f(dtype(n), v)), x, sp.polygamma(dtype(n), x)
        else:
            with np.errstate(all="ignore"):
                yield name, (lambda f, v: f(v)), x, REFERENCE[name](x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cpu_special_functions_match_scipy_over_their_domains(dtype):
    sfx = "f64" if dtype == np.float64 else "f32"
    for name, call, x, want in _cases(dtype):
        fn = getattr(cpu_math, f"{name}_{sfx}")
        _check(name, [call(fn, v) for v in x], want, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_digamma_just_below_zero_and_at_huge_negative_integers(dtype):
    """psi(x) = psi(1 - x) - pi / tan(pi x) reduces x by the nearest integer: x - floor(x) rounded to 1 for x in
    (-1e-16, 0) (psi(-1e-20) was 2.6e16, SciPy's 1e20), and floor(-1e300) overflowed Numba's int64 on cpu (psi
    was 692, SciPy's NaN at every negative integer)."""
    x = np.array([-1e-20, -1e-300, -1e-10, -3e-8, -1e300, -1e17, -2.0 ** 60, -0.25], dtype)
    with np.errstate(all="ignore"):
        want = sp.psi(x)
    simulated = scalar_rules.special_functions(cuda_math._SimulatedSpecial(), dtype)["digamma"]
    compiled = getattr(cpu_math, f"digamma_{'f64' if dtype == np.float64 else 'f32'}")
    for fn in (compiled, simulated):
        with np.errstate(all="ignore"):
            got = np.array([fn(v) for v in x], np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[~np.isnan(want)], want[~np.isnan(want)], rtol=2e-6 if dtype == np.float32 else 1e-14)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_cuda_special_functions_match_scipy_over_their_domains(dtype):
    """The cuda backend's formulas in the operand's precision (a float32 kernel computes in float32)."""
    fns = scalar_rules.special_functions(cuda_math._SimulatedSpecial(), dtype)
    for name, call, x, want in _cases(dtype):
        with np.errstate(all="ignore"):
            _check(name, [call(fns[name], v) for v in x], want, dtype)


def test_gradients_at_zero_and_in_the_tails():
    # xlogy's x-gradient at x = 0 is log(y) (central differences of x log y); its y-gradient there is 0
    gx, gy = tk.grad(lambda x, y: np.sum(sp.xlogy(x, y)), argnums=(0, 1))(np.array([0.0, 2.0]), np.array([3.0, 0.5]))
    np.testing.assert_allclose(gx, np.log([3.0, 0.5]))
    np.testing.assert_allclose(gy, [0.0, 4.0])
    # log_ndtr's gradient far in the lower tail is about -x (pdf / cdf), finite where ndtr underflows
    g = tk.grad(lambda x: np.sum(sp.log_ndtr(x)))(np.array([-40.0, -1e3, 0.0, 8.0]))
    np.testing.assert_allclose(g[:2], [40.0249688, 1000.001], rtol=1e-6)
    np.testing.assert_allclose(g[2], np.sqrt(2 / np.pi), rtol=1e-14)
    assert 0 < g[3] < 1e-14
    # i1 and i1e have slope 1/2 at 0; erfinv's slope at 0 is sqrt(pi)/2
    g = tk.grad(lambda x: sp.i1(x) + sp.i1e(x) + sp.erfinv(x))(0.0)
    np.testing.assert_allclose(g, 1.0 + np.sqrt(np.pi) / 2, rtol=1e-14)
    tk.check_grad(lambda x: np.sum(sp.gammaln(x) + sp.psi(x) + tk.scipy.special.polygamma(2, x)), (np.array([0.3, 2.5, -0.4]),))


def test_scipy_dtypes():
    x32 = np.linspace(0.5, 2.0, 4, dtype=np.float32)
    f = tk.jit(lambda x: (sp.gammaln(x), sp.expit(x), tk.scipy.special.polygamma(1, x), tk.scipy.special.multigammaln(x + 2, 2),
                          tk.scipy.special.logsumexp(x), sp.erf(np.arange(3))))
    got = f(x32)
    want = (sp.gammaln(x32), sp.expit(x32), sp.polygamma(1, x32), sp.multigammaln(x32 + 2, 2), sp.logsumexp(x32), sp.erf(np.arange(3)))
    assert [g.dtype for g in got] == [np.asarray(w).dtype for w in want] == [np.float32, np.float32, np.float64, np.float64,
                                                                            np.float32, np.float64]


def test_a_python_numbers_dtype_is_the_installed_scipys(monkeypatch):
    """SciPy 1.17's ufuncs make xlogy(2, float32) float64; SciPy 1.18's (the one on the GPU machine of 2026-11-27)
    float32, as NumPy's own ufuncs treat a Python number (weak): tracekern asks the SciPy installed."""
    from tracekern.numpy import special

    x32, i32 = np.linspace(0.5, 2.0, 4, dtype=np.float32), np.arange(1, 5, dtype=np.int32)

    def traced(x):
        return (sp.xlogy(2, x), sp.xlog1py(x, 1.5), sp.betaln(x, 3), sp.gammaln(x), sp.xlogy(True, x), sp.gammaln(i32), sp.expit(2.0))
    got = [g.dtype for g in tk.jit(traced, backend="interpret")(x32)]
    assert got == [np.asarray(w).dtype for w in traced(x32)]
    special._scipy_dtype.cache_clear()
    for name in ("xlogy", "xlog1py", "betaln"):   # (NumPy's own binary ufunc resolves as 1.18's special ones do)
        monkeypatch.setattr(sp, name, np.add)
    try:
        got = [g.dtype for g in tk.jit(lambda x: (tk.scipy.special.xlogy(2, x), tk.scipy.special.xlog1py(x, 1.5),
                                                  tk.scipy.special.betaln(x, 3), tk.scipy.special.xlogy(2, i32)), backend="interpret")(x32)]
        assert got == [np.float32, np.float32, np.float32, np.float64]
    finally:
        monkeypatch.undo()
        special._scipy_dtype.cache_clear()


def test_scipys_python_functions_point_to_tk_scipy_special():
    for fn, name in ((sp.logsumexp, "logsumexp"), (sp.softmax, "softmax"), (sp.log_softmax, "log_softmax"),
                     (lambda x: sp.polygamma(1, x), "polygamma"), (lambda x: sp.multigammaln(x, 2), "multigammaln")):
        with pytest.raises(TypeError, match=rf"scipy.special.{name} converts its arguments.*tk.scipy.special.{name}") as err:
            tk.jit(fn)(np.ones(3) * 2)
        assert __file__ in str(err.value)


def test_multigammaln_raises_for_a_constant_and_gives_nan_for_a_traced_argument_out_of_its_domain():
    with pytest.raises(ValueError, match="not met"):
        tk.jit(lambda x: x + tk.scipy.special.multigammaln(np.array([0.5, 3.0]), 3))(np.ones(2))
    got = tk.jit(lambda a: tk.scipy.special.multigammaln(a, 3))(np.array([0.5, 3.0]))
    assert np.isnan(got[0]) and got[1] == pytest.approx(sp.multigammaln(3.0, 3), rel=1e-14)


def test_complex_arguments_are_refused_naming_the_function():
    with pytest.raises(TypeError, match="scipy.special.gammaln of complex numbers"):
        tk.jit(lambda z: sp.gammaln(z))(np.ones(2) + 1j)


@pytest.mark.skipif(os.environ.get("NUMBA_ENABLE_CUDASIM") != "1", reason="(the simulator's shim)")
def test_the_simulator_runs_the_gpu_formulas():
    assert cuda_math.digamma_f32.py_func.__code__ is scalar_rules.special_functions(
        cuda_math._SimulatedSpecial(), np.float32)["digamma"].__code__


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_betaln_of_a_large_and_a_small_argument_is_scipys(backend):
    """gammaln(a) + gammaln(b) - gammaln(a + b) cancels where a >> b: betaln(1e12, 0.5) was 7e-5 off SciPy's,
    betaln(1e300, 2) was 0 (SciPy's -1381.55), and float32's betaln(1e6, 2) 2% off (float32 gammalns). Now
    SciPy's (Cephes' lbeta): its asymptotic form there, computed in float64 (float32 rounds it); the gradient
    is -b/a + ... in a, digamma(b) - log(a) + ... in b (the digammas' difference cancels too)."""
    a = np.array([1e4, 1e6, 1e9, 1e12, 1e15, 1e300, 2e6, 1e7, 50.0, 3.0, 1e7, 1e7])
    b = np.array([2.0, 2.0, 2.0, 0.5, 3.0, 2.0, 1.5, 9.0, 60.0, 4.0, 0.0, -2.5])
    f = tk.jit(lambda a, b: sp.betaln(a, b), backend=backend)
    np.testing.assert_allclose(f(a, b), sp.betaln(a, b), rtol=1e-12)
    np.testing.assert_allclose(f(b, a), sp.betaln(a, b), rtol=1e-12)
    a32, b32 = a[:5].astype(np.float32), b[:5].astype(np.float32)
    got = f(a32, b32)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, sp.betaln(a32, b32), rtol=2e-7)
    ga, gb = tk.jit(tk.grad(lambda a, b: np.sum(sp.betaln(a, b)), argnums=(0, 1)), backend=backend)(a[:6], b[:6])
    np.testing.assert_allclose(ga[:2], sp.psi(a[:2]) - sp.psi(a[:2] + b[:2]), rtol=1e-9)
    np.testing.assert_allclose(ga[2:], -b[2:6] / a[2:6], rtol=1e-8)
    np.testing.assert_allclose(gb[:2], sp.psi(b[:2]) - sp.psi(a[:2] + b[:2]), rtol=1e-12)
    np.testing.assert_allclose(gb[2:], sp.psi(b[2:6]) - np.log(a[2:6]), rtol=1e-9)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_betaln_at_nonpositive_integers_is_scipys(backend):
    """A nonpositive integer argument is a pole of gamma, where gammaln(a) + gammaln(b) - gammaln(a + b) was inf - inf
    = NaN: SciPy's lbeta reflects to log |B(1 - a - b, b)| where b is an integer and 1 - a - b > 0 (betaln(-5, 2) is
    log(1/20), betaln(-1e7, 2) finite), and is inf otherwise (a non-integer b, 1 - a - b <= 0, a = 0, and
    a <= -(2**31 - 1), where Cephes' int arithmetic overflows); gradients finite where the value is."""
    a = np.array([-5.0, -5.0, -1e7, -5.0, -5.0, 3.0, -5.0, -1e10, -2.0 ** 31, -2.0 ** 31 + 1, -2.0 ** 31 + 2, 0.0, 0.0,
                  -3.0, -3.0, -3.0, 2.0, -0.0, -2.5])
    b = np.array([2.0, 2.5, 2.0, 7.0, -2.0, -2.0, 0.0, 2.0, 2.0, 2.0, 2.0, 2.0, -1.0, 3.0, 4.0, 1.0, -3.0, 1.0, 3.0])
    want = sp.betaln(a, b)
    assert np.isfinite(want).sum() >= 6 and np.isinf(want).sum() >= 8
    f = tk.jit(lambda a, b: sp.betaln(a, b), backend=backend)
    np.testing.assert_allclose(f(a, b), want, rtol=1e-12)
    np.testing.assert_allclose(f(b, a), want, rtol=1e-12)
    ga, gb = tk.jit(tk.grad(lambda a, b: np.sum(sp.betaln(a, b)), argnums=(0, 1)), backend=backend)(a, b)
    assert np.all(np.isfinite(ga)) and np.all(np.isfinite(gb))
