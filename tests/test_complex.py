"""Complex numbers (issue 30): the gradient convention for real losses of complex inputs (PyTorch's:
dL/dx + i dL/dy), holomorphic=True, the error for a complex output, NumPy's dtypes, the ordering
functions refused with advice, and the complex functions of each backend against NumPy at hundreds of
points (tests/numpy_cases.py's "complex" family checks every traced name's values and gradients, and
tests/ptx_corpus.py compiles its complex64 and complex128 kernels to PTX: complex64 ones without float64)."""
import re
import warnings

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import jit_on, to_host
from tracekern.backends import cuda_math, scalar_rules

BACKENDS = ("interpret", "cpu", "cuda")


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_gradient_of_abs_squared_at_3_plus_4j_is_6_plus_8j(backend):
    """The issue's example: f(z) = |z|^2 at 3+4j. JAX gives 6-8j (df/dx - i df/dy), PyTorch 6+8j (df/dx + i
    df/dy); tracekern follows PyTorch, so z -= lr * grad descends (and check_grad's differences agree)."""
    z = np.complex128(3 + 4j)
    for f in (lambda z: np.abs(z) ** 2, lambda z: np.real(z * np.conj(z)), lambda z: z.real ** 2 + z.imag ** 2):
        g = to_host(tk.jit(tk.grad(f), backend=backend)(z))
        assert g.dtype == np.complex128
        np.testing.assert_allclose(g, 6 + 8j, rtol=1e-14)
    # gradient descent on the convention's gradient decreases the loss; on its conjugate it need not
    loss = lambda z: np.sum(np.abs(z - (1 - 2j)) ** 2)   # noqa: E731
    w = np.array([3 + 4j, -1 + 0.5j])
    step = jit_on(backend, tk.grad(loss))
    for _ in range(20):
        w = w - 0.1 * step(w)
    np.testing.assert_allclose(w, 1 - 2j, atol=1e-1)
    assert loss(w) < 0.05 * loss(np.array([3 + 4j, -1 + 0.5j]))


def test_check_grad_differences_complex_arguments_along_both_parts():
    z = np.array([3 + 4j, 1 - 2j, -0.5 + 0.25j])
    tk.check_grad(lambda z: np.sum(np.abs(np.exp(z)) ** 2) + np.real(np.sum(z ** 3)) + np.sum(np.angle(z)), (z,))
    with pytest.raises(tk.GradientCheckError):   # a wrong gradient (the stopped one) is caught
        tk.check_grad(lambda z: np.sum(np.abs(z)) + np.sum(np.abs(tk.stop_gradient(z)) ** 2), (z,))


@pytest.mark.parametrize("backend", ("interpret", "cpu"))
def test_holomorphic_grad_is_the_complex_derivative(backend):
    z = np.complex128(0.5 - 1.25j)
    f = lambda z: z ** 3 + np.exp(z) * np.sin(z)   # noqa: E731
    got = tk.jit(tk.grad(f, holomorphic=True), backend=backend)(z)
    np.testing.assert_allclose(got, 3 * z ** 2 + np.exp(z) * (np.sin(z) + np.cos(z)), rtol=1e-13)
    value, g = tk.jit(tk.value_and_grad(f, holomorphic=True), backend=backend)(z)
    np.testing.assert_allclose(value, f(z), rtol=1e-14)
    np.testing.assert_allclose(g, got, rtol=1e-14)


def test_grad_of_a_complex_output_says_what_to_do():
    with pytest.raises(TypeError, match=r"output is complex.*holomorphic=True.*real loss") as err:
        tk.grad(lambda z: z ** 2)(np.complex128(1 + 2j))
    assert __file__ in str(err.value)
    with pytest.raises(TypeError, match="holomorphic=True: every differentiated input must be complex"):
        tk.grad(lambda x: (x * 1j) ** 2, holomorphic=True)(1.5)
    with pytest.raises(TypeError, match="holomorphic=True: the output must be a complex scalar"):
        tk.grad(lambda z: np.abs(z), holomorphic=True)(np.complex128(1j))


def test_dtypes_follow_numpy():
    x32, z64 = np.ones(3, np.float32), np.ones(3, np.complex64)

    def f(x, z):
        return x * 1j, x + z, np.abs(z), np.angle(z), z.real, z * 2.5, z.astype(np.complex128), np.sum(z), np.var(z), z == z
    got = tk.jit(f)(x32, z64)
    want = f(x32, z64)
    assert [g.dtype for g in got] == [w.dtype for w in want]
    assert [g.dtype for g in got][:4] == [np.complex64, np.complex64, np.float32, np.float32]
    # a complex Python scalar argument is weak (as NumPy 2's): complex64 stays complex64
    assert tk.jit(lambda z, c: z * c)(z64, 2 + 1j).dtype == np.complex64


def test_astype_to_real_takes_the_real_part_and_warns_as_numpy():
    z = np.array([1.5 + 2j, -3 - 1j])
    with pytest.warns(np.exceptions.ComplexWarning):
        got = tk.jit(lambda z: z.astype(np.float64))(z)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(got, z.astype(np.float64))
    np.testing.assert_array_equal(tk.jit(lambda z: z.astype(bool))(np.array([0j, 1j])), [False, True])
    with pytest.raises(TypeError, match="imaginary part would be lost"):
        tk.jit(lambda z: np.deg2rad(z))(z)


@pytest.mark.parametrize("fn", [lambda z: np.maximum(z, z), lambda z: np.sort(z), lambda z: np.max(z), lambda z: z < 1,
                                lambda z: np.argmax(z), lambda z: np.clip(z, 0, 1), lambda z: tk.at(z)[0].max(z[1])],
                         ids=["maximum", "sort", "max", "less", "argmax", "clip", "at_max"])
def test_ordering_of_complex_numbers_is_refused_with_advice(fn):
    with pytest.raises(TypeError, match=r"complex.*(order|lexicographic)|(order|lexicographic).*complex") as err:
        tk.jit(fn)(np.array([1 + 1j, 2 - 1j]))
    assert "np.abs" in str(err.value) or "np.real" in str(err.value) or "z.real" in str(err.value)


def _points(n: int = 600) -> np.ndarray:
    """Complex points over the plane: magnitudes from 1e-4 to 1e3, every direction, and the axes."""
    rng = np.random.default_rng(30)
    r = 10.0 ** rng.uniform(-4, 3, n)
    z = r * np.exp(1j * rng.uniform(-np.pi, np.pi, n))
    return np.concatenate([z, [0.5, -0.5, 2.0, -2.0, 0.5j, -2j, 1 + 1e-9j, 0.25 + 0.75j]])


NAMES = ("exp", "log", "log1p", "expm1", "sqrt", "sin", "cos", "tan", "tanh", "arctan", "sinh", "cosh", "arcsin", "arccos",
         "arcsinh", "arccosh", "arctanh", "log2", "log10", "exp2")


def _relative_error(got, want):
    with np.errstate(all="ignore"):
        scale = np.maximum(np.abs(want), np.finfo(want.real.dtype).tiny)
        return np.where(np.isfinite(want), np.abs(got - want) / scale, 0.0)


@pytest.mark.parametrize("dtype,tol", [(np.complex128, 4e-14), (np.complex64, 3e-6)])
def test_cuda_complex_functions_match_numpy_at_hundreds_of_points(dtype, tol):
    """The cuda backend's complex functions (scalar_rules.complex_functions: the same formulas on a GPU,
    with libdevice's real functions) run here in plain Python on NumPy's real functions (as the
    simulator runs them), against NumPy's complex ones; |z| overflowing parts (cosh of 1e3) aside."""
    fns = scalar_rules.complex_functions(cuda_math._SimulatedMath(), dtype, np.dtype(dtype).type(0).real.dtype.type)
    z = _points().astype(dtype)
    z = z[np.abs(z) < 80]   # (sinh, cosh and exp overflow beyond; NumPy's infinities are compared below)
    for name in NAMES:
        with np.errstate(all="ignore"):
            want = getattr(np, name)(z)
        got = np.array([fns[name](v) for v in z], dtype)
        err = _relative_error(got, want)
        assert err.max() < tol * (4 if name in ("pow", "tan", "tanh", "arctanh", "arctan") else 1), (name, z[np.argmax(err)],
                                                                                                     err.max())
    w = z[::-1]
    with np.errstate(all="ignore"):
        want = np.power(z, w)
    got = np.array([fns["pow"](a, b) for a, b in zip(z, w)], dtype)
    finite = np.isfinite(want) & (np.abs(want) < 1e30)
    assert _relative_error(got[finite], want[finite]).max() < (1e-12 if dtype == np.complex128 else 2e-4)


def test_cpu_complex_functions_match_numpy_at_hundreds_of_points():
    """The cpu backend's complex functions (Numba's, ported from NumPy's loops) in one compiled program."""
    z = _points()
    got = tk.jit(lambda z: tuple(getattr(np, name)(z) for name in NAMES) + (z ** z[::-1],))(z)
    for name, g in zip(NAMES + ("power",), got):
        with np.errstate(all="ignore"):
            want = getattr(np, name)(z) if name != "power" else z ** z[::-1]
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isfinite(g), finite, err_msg=name)
        assert _relative_error(g[finite], want[finite]).max() < 1e-13, name


def test_zero_to_a_complex_power_is_numpys():
    """0 ** w is 0 where Re w > 0 (NumPy 2's npy_cpow, whatever Im w), NaN where Re w <= 0 but w != 0, and 1 at w = 0:
    the cpu and cuda formulas gave NaN for 0 ** (0.5 + 1j)."""
    z = np.zeros(7, np.complex128)
    w = np.array([0.5 + 1j, 2 + 3j, 1e-3 - 5j, 2 + 0j, 1j, -1 + 1j, 0j])
    with np.errstate(all="ignore"):
        want = np.power(z, w)
    np.testing.assert_array_equal(tk.jit(np.power, backend="cpu")(z, w), want)
    for dtype in (np.complex128, np.complex64):
        fns = scalar_rules.complex_functions(cuda_math._SimulatedMath(), dtype, np.dtype(dtype).type(0).real.dtype.type)
        with np.errstate(all="ignore"):
            got = np.array([fns["pow"](a, b) for a, b in zip(z.astype(dtype), w.astype(dtype))], dtype)
        np.testing.assert_array_equal(got, want.astype(dtype))


def test_functions_whose_result_depends_on_the_values_say_what_to_write():
    z = np.array([1 + 0j, 2 - 1e-20j])
    with pytest.raises(NotImplementedError, match=r"np.real_if_close .*np.real\(z\)"):
        tk.jit(lambda z: np.real_if_close(z))(z)
    with pytest.raises(NotImplementedError, match="np.sort_complex .*lexicographic.*np.abs"):
        tk.jit(lambda z: np.sort_complex(z))(z)


@pytest.mark.parametrize("name,fn", [
    ("det", lambda a: np.linalg.det(a)), ("slogdet", lambda a: np.linalg.slogdet(a)), ("eigh", lambda a: np.linalg.eigh(a)),
    ("eigvalsh", lambda a: np.linalg.eigvalsh(a)), ("svd", lambda a: np.linalg.svd(a, hermitian=True)),
    ("svdvals", lambda a: np.linalg.svdvals(a)), ("qr", lambda a: np.linalg.qr(a)), ("cholesky", lambda a: np.linalg.cholesky(a)),
    ("pinv", lambda a: np.linalg.pinv(a)), ("norm(ord='nuc')", lambda a: np.linalg.norm(a, "nuc")),
    ("cond", lambda a: np.linalg.cond(a)), ("matrix_rank", lambda a: np.linalg.matrix_rank(a))])
def test_linalg_factorizations_of_complex_matrices_are_refused_by_the_name_called(name, fn):
    """They raised the primitive's error ('svd: needs float matrices (..., m, n), got c128[2,2]', a ShapeError, for
    pinv, norm, cond, matrix_rank): now a TypeError naming what the user called, the complex functions that are
    traced, and a real formulation where there is one."""
    a = np.array([[2 + 1j, 1], [0.5j, 3]])
    with pytest.raises(TypeError, match=rf"^np\.linalg\.{re.escape(name)} of complex matrices \(complex128, shape \(2, 2\)\)") as err:
        tk.jit(fn, backend="interpret")(a)
    assert "test_complex.py" in str(err.value)
    np.testing.assert_allclose(tk.jit(lambda a: np.linalg.norm(a, 1) + np.linalg.norm(a), backend="interpret")(a),
                               np.linalg.norm(a, 1) + np.linalg.norm(a))


def test_a_zero_part_beside_an_overflowing_one_stays_zero_as_numpys():
    """exp, sinh and cosh of x + 0j and sin and cos of 0 + iy where the other part overflows (or is NaN): NumPy's
    zero part (C99's, signed), where the cpu backend (Numba's functions) and the cuda formulas made inf * 0 = NaN
    (np.cosh(800+0j) was inf+nanj, np.sin(1e10j) nan+infj)."""
    z = np.array([800 + 0j, -800 - 0j, 1e300 + 0j, complex(-1e300, -0.0), complex(np.nan, 0.0), complex(np.inf, -0.0)])
    w = np.array([1e10j, -1e10j, complex(-0.0, 1e300), complex(0.0, -1e300), complex(0.0, np.nan), complex(-0.0, np.nan), 2j])
    names = ("exp", "sinh", "cosh", "sin", "cos")
    with np.errstate(all="ignore"):
        want = [getattr(np, n)(z if n in ("exp", "sinh", "cosh") else w) for n in names]

    def same(got, ref, name, rtol=0.0):
        for part in ("real", "imag"):
            g, r = getattr(got, part), getattr(ref, part)
            np.testing.assert_allclose(g, r, rtol=rtol, err_msg=name)
            signed = ~np.isnan(r)   # (a NaN's sign means nothing)
            assert np.array_equal(np.signbit(g[signed]), np.signbit(r[signed])), (name, got, ref)

    got = tk.jit(lambda z, w: tuple(getattr(np, n)(z if n in ("exp", "sinh", "cosh") else w) for n in names),
                 backend="cpu")(z, w)
    for name, g, r in zip(names, got, want):
        same(g, r, name)
    fns = scalar_rules.complex_functions(cuda_math._SimulatedMath(), np.complex128, np.float64)
    for name, r in zip(names, want):
        with np.errstate(all="ignore"):
            same(np.array([fns[name](v) for v in (z if name in ("exp", "sinh", "cosh") else w)]), r, f"cuda {name}", 1e-15)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_sign_at_infinities_is_numpys(backend):
    """np.sign(inf) is 1 (the cpu and cuda sign was inf / inf = NaN), and a complex z with one infinite part has the
    sign of that part, +-1 or +-1j (x / |x| was NaN there); each part of a finite z is divided by |z|, as NumPy 2's
    (np.sign(1e-300j) was 0.9999999999999999j through complex division)."""
    x = np.array([np.inf, -np.inf, 2.0, -0.0, np.nan, 1e-300])
    z = np.array([complex(np.inf, 2), complex(-np.inf, 0), complex(3, -np.inf), complex(np.inf, np.inf), complex(np.nan, 1), 0j,
                  1e-300j, 3 + 4j, complex(-np.inf, np.nan)])
    for dtype in (np.float64, np.float32):
        np.testing.assert_array_equal(tk.jit(np.sign, backend=backend)(x.astype(dtype)), np.sign(x.astype(dtype)))
    for dtype in (np.complex128, np.complex64):
        with np.errstate(all="ignore"):
            want = np.sign(z.astype(dtype))
        got = tk.jit(np.sign, backend=backend)(z.astype(dtype))
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6 if dtype == np.complex64 else 0)
    for T in (np.float64, np.float32):   # (the rule both backends compile)
        sign = scalar_rules.sign_float(T)
        assert [sign(T(v)) for v in (np.inf, -np.inf, 2.5, -0.0)] == [1, -1, 1, 0] and np.isnan(sign(T(np.nan)))



@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_x_to_the_half_is_numpy_s_square_root(backend, dtype):
    """NumPy computes x ** 0.5 (and np.power(x, 0.5) of floats) as np.sqrt: -0.0 at -0.0 and NaN at -inf, where C's
    pow gives +0.0 and +inf. The compiled kernels called pow (found by a helper testing as a user); the literal
    exponent 0.5 is now sqrt there, as 1, 2, 3 and 4 are multiplications. Complex z ** 0.5 too (NumPy's operator)."""
    x = np.array([-0.0, -np.inf, 4.0, 2.0, 1e-310, np.nan, -1.0, np.inf, 0.0], dtype)
    with np.errstate(invalid="ignore"):
        want = x ** 0.5
        for g in tk.jit(lambda v: (v ** 0.5, np.power(v, 0.5)), backend=backend)(x):
            g = to_host(g)
            assert g.dtype == want.dtype
            np.testing.assert_array_equal(g, want)
            np.testing.assert_array_equal(np.signbit(g), np.signbit(want))
    if backend != "interpret":   # (the interpreter computes np.power(z, 0.5), which is not NumPy's z ** 0.5 in the last bits)
        z = np.array([4 + 0j, -1 + 0j, 1j, 3 - 4j, -0.0 + 0j], np.complex128)
        np.testing.assert_allclose(to_host(tk.jit(lambda v: v ** 0.5, backend=backend)(z)), z ** 0.5, rtol=1e-15, atol=0)
