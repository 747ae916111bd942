"""Second derivatives (issue 25): every differentiable elementwise primitive of the table, enumerated from the
registry (a new one without a case here fails test_every_differentiable_elementwise_primitive_has_a_case), and
the composites and reductions whose special points issue 25 named, by tk.grad of tk.grad on interpret and cpu.

Each case is ONE jitted program per backend: its functions applied elementwise to vectors of points, and for
each function d2/dx2 (and, of two operands, d2/dxdy and d2/dy2) at every point at once (the Hessian of a sum of
elementwise terms is diagonal, so the gradient of the sum of the gradient is its diagonal). Every entry is
checked against central second differences of NumPy's own function in float64 (with a Richardson step, and a
check that the difference itself is reliable there), unless the point states a convention: where a function is
not twice differentiable (abs at 0, maximum at a tie, hypot and arctan2 at the origin, std of equal values), the
stated value, finite, the same on both backends."""
from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
import scipy.special as sp

import tracekern as tk
import tracekern.numpy as tnp
from tracekern.primitives import REGISTRY
from tracekern.primitives.elementwise import Elementwise

FD = "fd"           # checked against finite differences of NumPy's function (the function is smooth there)
FINITE = "finite"   # not twice differentiable, no convention to state: finite, and the same on both backends
BACKENDS = ("interpret", "cpu")


@dataclass(frozen=True)
class P:
    """A point (x, y; y unused by one-operand functions) and what each second derivative there must be: FD, FINITE
    or a stated value (the convention where the function is not twice differentiable). h: the difference step."""
    x: float
    y: float = 0.0
    xx: object = FD
    xy: object = FD
    yy: object = FD
    h: float = 1e-3


def kink(x, y=0.0, value=0.0):
    """A point where no second derivative exists: the convention `value` for all of them."""
    return P(x, y, value, value, value)


@dataclass
class Case:
    fns: dict[str, Callable]     # name -> function of nin float64 arrays, elementwise, written with NumPy
    nin: int
    points: list[P]
    note: str = ""               # the convention at the special points, where there is one
    uses: tuple[str, ...] = field(default=())   # primitives each function's forward contains one of (default: the name)


def one(fn, nin, points, note=""):
    return Case({"f": fn}, nin, points, note)


ANY = [P(x) for x in (-1.7, -0.6, 0.35, 1.2, 2.4)]
POS = [P(x) for x in (0.2, 0.7, 1.3, 2.6)]
UNIT = [P(x) for x in (-0.8, -0.3, 0.15, 0.6)]
GT1 = [P(x) for x in (1.3, 2.0, 3.7)]
PAIRS = [P(x, y) for x, y in ((-1.3, 0.7), (0.4, -2.1), (1.6, 1.1), (2.2, -0.5))]
POS_ANY = [P(x, y) for x, y in ((0.6, -1.2), (1.4, 0.3), (2.5, 1.7), (1.0, 0.0))]
DIVISION = [P(x, y) for x, y in ((2.3, 0.7), (-1.9, 0.8), (3.1, -1.3))]   # (x / y away from integers: smooth)
TIES = [kink(0.8, 0.8)]
ORIGIN = [kink(0.0, 0.0)]

def _polygamma(n):
    """scipy.special.polygamma(n, x) is Python code that cannot trace; tk.scipy.special's is the traced one."""
    return lambda x: sp.polygamma(n, x) if isinstance(x, np.ndarray) else tk.scipy.special.polygamma(n, x)


# -- every differentiable elementwise primitive of the table, by its registered name --------------------------------
PRIMITIVES: dict[str, Case] = {
    "add": one(np.add, 2, PAIRS), "sub": one(np.subtract, 2, PAIRS), "mul": one(np.multiply, 2, PAIRS),
    "div": one(np.divide, 2, PAIRS + [P(0.0, 1.5)]),
    "neg": one(np.negative, 1, ANY),
    "pow": one(np.power, 2, POS_ANY + [
        P(0.0, 0.0, xx=FD, xy=FINITE, yy=FINITE),     # x**0 at 0: 0 (its first derivative is selected 0 there)
        P(0.0, 1.0, xx=FD, xy=FINITE, yy=FD),         # x**1 at 0: 0; 0**y near 1: 0
        P(0.0, 2.0, xx=FD, xy=FINITE, yy=FD),         # x**2 at 0: 2
        P(0.0, 2.5, xx=0.0, xy=FINITE, yy=FD)],       # x**2.5 at 0 (NaN below 0): its right-hand value, 0
        note="0**y: x**y's derivatives in y at x = 0 are those of 0 (log 0 taken as 0), finite"),
    "abs": one(np.abs, 1, ANY + [kink(0.0)], note="abs at 0: first derivative sign(0) = 0, second 0"),
    "maximum": one(np.maximum, 2, PAIRS + TIES, note="ties share the cotangent (1/2 each): second derivatives 0"),
    "minimum": one(np.minimum, 2, PAIRS + TIES, note="ties share the cotangent (1/2 each): second derivatives 0"),
    "exp": one(np.exp, 1, ANY + [P(0.0), P(-30.0), P(15.0)]),
    "log": one(np.log, 1, POS + [P(1e-3, h=1e-7)]),
    "log1p": one(np.log1p, 1, [P(x) for x in (-0.5, 0.0, 0.4, 3.0)] + [P(-0.999, h=1e-7)]),
    "expm1": one(np.expm1, 1, ANY + [P(0.0), P(1e-8)]),
    "sqrt": one(np.sqrt, 1, POS + [P(1e-4, h=1e-7)]),
    "sin": one(np.sin, 1, ANY + [P(0.0), P(40.0)]), "cos": one(np.cos, 1, ANY + [P(0.0), P(40.0)]),
    "tan": one(np.tan, 1, UNIT + [P(1.4, h=1e-4)]), "tanh": one(np.tanh, 1, ANY + [P(0.0), P(5.0)]),
    "arctan": one(np.arctan, 1, ANY), "sinh": one(np.sinh, 1, ANY), "cosh": one(np.cosh, 1, ANY),
    "arcsin": one(np.arcsin, 1, UNIT + [P(0.999, h=1e-6), P(-0.999, h=1e-6)]),
    "arccos": one(np.arccos, 1, UNIT + [P(0.999, h=1e-6), P(-0.999, h=1e-6)]),
    "arcsinh": one(np.arcsinh, 1, ANY), "arccosh": one(np.arccosh, 1, GT1 + [P(1.001, h=1e-6)]),
    "arctanh": one(np.arctanh, 1, UNIT + [P(0.999, h=1e-6)]),
    "select": one(lambda x, y: np.where(x > 0.5, x * 1.0, y), 2, [P(1.2, 0.3), P(-0.4, 2.0), P(0.5, 1.0, 0.0, 0.0, FD)],
                  note="np.where at the switch: second derivatives 0"),
    "cbrt": one(np.cbrt, 1, ANY + [P(1e-3, h=1e-7)]),
    "log2": one(np.log2, 1, POS), "log10": one(np.log10, 1, POS), "exp2": one(np.exp2, 1, ANY),
    "arctan2": one(np.arctan2, 2, PAIRS + [P(0.0, 1.0), P(3e-3, 4e-3, h=3e-7), P(-1e-3, 2e-3, h=3e-7)] + ORIGIN,
                   note="arctan2 at the origin: first derivatives 0 (a subgradient, as hypot's), second 0"),
    "hypot": one(np.hypot, 2, PAIRS + [P(0.0, 1.5), P(3e-3, 4e-3, h=1e-6)] + ORIGIN,
                 note="hypot at the origin: first derivatives 0, second 0"),
    "copysign": one(np.copysign, 2, [P(1.3, 0.7), P(-0.4, 2.0), P(2.2, -0.5), P(0.0, 1.2, xx=0.0), P(1.0, 0.0, FD, 0.0, 0.0)],
                    note="copysign at x = 0 or y = 0 (jumps): second derivatives 0"),
    "nextafter": one(np.nextafter, 2, [P(1.3, 5.0), P(-0.4, -3.0), P(2.2, 0.0)]),
    "remainder": one(np.remainder, 2, DIVISION), "fmod": one(np.fmod, 2, DIVISION),
    "logaddexp": one(np.logaddexp, 2, PAIRS + [P(1.0, 1.0), P(-2.5, -2.5), P(0.0, 0.0), P(30.0, -30.0),
                                               kink(-np.inf, -np.inf), kink(np.inf, np.inf), kink(np.inf, 1.0)],
                     note="ties are smooth: 1/4, -1/4, 1/4; infinite operands: 0"),
    "logaddexp2": one(np.logaddexp2, 2, PAIRS + [P(1.0, 1.0), P(-2.5, -2.5), P(0.0, 0.0), P(30.0, -30.0),
                                                 kink(-np.inf, -np.inf), kink(np.inf, np.inf), kink(np.inf, 1.0)],
                      note="ties are smooth: ln2/4, -ln2/4, ln2/4; infinite operands: 0"),
    # scipy.special (issue 30)
    "gammaln": one(sp.gammaln, 1, POS + [P(8.0), P(-0.5)]),
    "digamma": one(sp.psi, 1, POS[1:] + [P(0.2, h=1e-5), P(8.0), P(-0.45, h=1e-5)]),
    "polygamma": Case({f"polygamma({n})": _polygamma(n) for n in (0, 1, 2)}, 1, POS[1:] + [P(0.3, h=1e-5), P(6.0)],
                      uses=("polygamma", "digamma")),
    "erf": one(sp.erf, 1, ANY + [P(0.0)]), "erfc": one(sp.erfc, 1, ANY + [P(0.0)]),
    "erfinv": one(sp.erfinv, 1, UNIT + [P(0.0), P(0.99, h=1e-5)]),
    "log_ndtr": one(sp.log_ndtr, 1, ANY + [P(-12.0), P(6.0), P(-25.0, h=0.1), P(-1000.0, h=1.0)]),
    "i0": one(sp.i0, 1, ANY + [P(0.0)]), "i1": one(sp.i1, 1, ANY + [P(0.0)]),
    "i0e": one(sp.i0e, 1, ANY + [P(0.0, xx=FINITE)], note="i0e = exp(-|x|) i0(x) has a kink at 0: finite there"),
    "i1e": one(sp.i1e, 1, ANY + [P(0.0, xx=FINITE)], note="i1e's second derivative jumps at 0 (-1 to 1): finite there"),
    "xlogy": one(sp.xlogy, 2, [P(0.6, 1.2), P(-1.4, 0.3), P(2.5, 1.7), P(0.0, 1.5)],
                 note="x = 0: xlogy is 0 for every y, its y-derivatives 0"),
    "xlog1py": one(sp.xlog1py, 2, [P(0.6, 1.2), P(-1.4, -0.3), P(2.5, 0.7), P(0.0, 1.5)],
                   note="x = 0: xlog1py is 0 for every y, its y-derivatives 0"),
}


def _single(reduce):
    """A reduction of one element: each point reduced on its own (x[:, None] along axis 1)."""
    return lambda x: reduce(x[:, None], axis=1)


def _pair(reduce, **kw):
    """A reduction of two values (x and y) along the axis that holds them."""
    return lambda x, y: reduce(np.stack([x, y]), axis=0, **kw)


def _logsumexp(a, axis):
    return np.log(np.sum(np.exp(a), axis=axis)) if isinstance(a, np.ndarray) else tnp.logsumexp(a, axis=axis)


# -- composites and reductions at the points issue 25 named -------------------------------------------------------
EXTRAS: dict[str, Case] = {
    "fmax_fmin": Case({"fmax": np.fmax, "fmin": np.fmin}, 2, PAIRS + TIES, "ties: second derivatives 0", ("maximum", "minimum")),
    "sinc": Case({"sinc": np.sinc}, 1, ANY + [P(0.0), P(-0.0), P(1e-3), P(0.0299), P(0.0301)],
                 "smooth at 0: -pi**2 / 3 there", ("sin",)),
    "sign": Case({"sign": np.sign}, 1, ANY + [kink(0.0)], "sign has no gradient: 0 everywhere", ("sign",)),
    "literal_powers": Case({"x**0": lambda x: x ** 0.0, "x**1": lambda x: x ** 1.0, "x**2": lambda x: x ** 2.0,
                            "x**3": lambda x: x ** 3, "np.power(x, 0)": lambda x: np.power(x, 0)},
                           1, ANY + [P(0.0), P(-0.0)], uses=("pow",)),
    "even_powers_of_abs": Case({"|x|**2": lambda x: np.abs(x) ** 2, "square(|x|)": lambda x: np.square(np.abs(x)),
                                "|x|*|x|": lambda x: np.abs(x) * np.abs(x), "|x|**4": lambda x: np.abs(x) ** 4},
                               1, ANY + [P(0.0), P(-0.0)],
                               "smooth at 0 (x**2, x**4) though abs is not: 2 and 0 there (passes.even_powers_of_abs)",
                               ("abs", "pow", "mul")),
    "even_powers_at_apexes": Case(
        {"norm**2": lambda x, y: _pair(np.linalg.norm)(x, y) ** 2,
         "norm*norm": lambda x, y: _pair(np.linalg.norm)(x, y) * _pair(np.linalg.norm)(x, y),
         "square(vector_norm)": lambda x, y: np.square(_pair(np.linalg.vector_norm)(x, y)),
         "std**2": lambda x, y: _pair(np.std)(x, y) ** 2, "std(ddof=1)**2": lambda x, y: _pair(np.std, ddof=1)(x, y) ** 2,
         "hypot**2": lambda x, y: np.hypot(x, y) ** 2, "|x+iy|**2": lambda x, y: np.abs(x + 1j * y) ** 2,
         "|x+iy|*|x+iy|": lambda x, y: np.abs(x + 1j * y) * np.abs(x + 1j * y), "hypot**4": lambda x, y: np.hypot(x, y) ** 4,
         "norm**4": lambda x, y: _pair(np.linalg.norm)(x, y) ** 4},
        2, PAIRS + [P(0.0, 0.0), P(0.8, 0.8), P(-0.0, 0.0)],
        "smooth at the origin (and std at equal values) though the norm is not: x*x + y*y's 2 there, not the 0 the "
        "product rule through the norm's convention gave (passes.even_powers_at_apexes)", ("sqrt", "hypot")),
    "single_element_reductions": Case(
        {"sum": _single(np.sum), "mean": _single(np.mean), "var": _single(np.var), "std": _single(np.std),
         "prod": _single(np.prod), "max": _single(np.max), "min": _single(np.min), "logsumexp": _single(_logsumexp),
         "nanvar": _single(np.nanvar), "nanstd": _single(np.nanstd), "ptp": _single(np.ptp)},
        1, ANY + [P(0.0)], "one element: sum, mean, prod, max, min, logsumexp are x; var, std, ptp are 0",
        ("reduce_sum", "reduce_prod", "reduce_max", "reduce_min")),
    "std_of_equal_values": Case(
        {"std": _pair(np.std), "nanstd": _pair(np.nanstd), "std_ddof1": _pair(np.std, ddof=1)},
        2, PAIRS + [kink(1.0, 1.0), kink(-0.3, -0.3)], "std where the values are equal: 0 (and first derivatives 0)",
        ("reduce_sum", "sqrt")),
    "norm_of_zero": Case(
        {"norm": _pair(np.linalg.norm), "vector_norm3": _pair(np.linalg.vector_norm, ord=3),
         "norm1": _pair(np.linalg.norm, ord=1)},
        2, PAIRS + ORIGIN, "the zero vector: first and second derivatives 0", ("reduce_sum",)),
}
CASES = {**PRIMITIVES, **EXTRAS}


def _differentiable_elementwise() -> set[str]:
    return {name for name, p in REGISTRY.items() if isinstance(p, Elementwise) and p.grads is not None}


def test_every_differentiable_elementwise_primitive_has_a_case():
    """A new differentiable elementwise primitive fails here until it has a case in PRIMITIVES; and each case's
    functions do contain the primitives it is for."""
    missing = _differentiable_elementwise() - set(PRIMITIVES)
    assert not missing, f"differentiable elementwise primitives without a second-order case: {sorted(missing)}"
    assert set(PRIMITIVES) <= _differentiable_elementwise(), sorted(set(PRIMITIVES) - _differentiable_elementwise())
    for name, case in CASES.items():
        args = _points(case)
        for fname, fn in case.fns.items():
            seen = tk.make_ir(fn)(*args).primitive_counts
            uses = case.uses or (name,)
            assert any(prim in seen for prim in uses), f"{name}/{fname}: none of {uses} in {sorted(seen)}"


def _points(case: Case) -> tuple[np.ndarray, ...]:
    xs = np.array([p.x for p in case.points])
    return (xs,) if case.nin == 1 else (xs, np.array([p.y for p in case.points]))


def _second_derivatives(case: Case) -> Callable:
    """One program: for each function, (d2/dx2,) or (d2/dx2, d2/dxdy, d2/dy2, d2/dydx) at every point (d2/dxdy: the
    y-derivative of the x-gradient; d2/dydx: the x-derivative of the y-gradient)."""
    def run(*args):
        out = {}
        for fname, fn in case.fns.items():
            total = lambda *a, fn=fn: np.sum(fn(*a))   # noqa: E731
            if case.nin == 1:
                out[fname] = (tk.grad(lambda x, t=total: np.sum(tk.grad(t)(x)))(*args),)
            else:
                gx = lambda x, y, t=total: np.sum(tk.grad(t, argnums=0)(x, y))   # noqa: E731
                gy = lambda x, y, t=total: np.sum(tk.grad(t, argnums=1)(x, y))   # noqa: E731
                hxx, hxy = tk.grad(gx, argnums=(0, 1))(*args)
                hyx, hyy = tk.grad(gy, argnums=(0, 1))(*args)
                out[fname] = (hxx, hxy, hyy, hyx)   # (the mixed derivative in both orders: the same where smooth)
        return out
    return run


def _differences(fn, args, component: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Central second differences of NumPy's fn (component 0: xx, 1: xy, 2: yy) with steps h and h / 2, combined by
    Richardson's rule (the h**2 error term cancels); returns (the estimate, a bound on its error: the two steps'
    difference, plus the rounding of the function's values over the step squared)."""
    def d(step):
        x = args[0]
        if len(args) == 1:
            terms = [(1, fn(x + step)), (-2, fn(x)), (1, fn(x - step))]
            div = step ** 2
        elif component != 1:
            dx, dy = (step, 0) if component == 0 else (0, step)
            terms = [(1, fn(x + dx, args[1] + dy)), (-2, fn(x, args[1])), (1, fn(x - dx, args[1] - dy))]
            div = step ** 2
        else:
            y = args[1]
            terms = [(1, fn(x + step, y + step)), (-1, fn(x + step, y - step)), (-1, fn(x - step, y + step)),
                     (1, fn(x - step, y - step))]
            div = 4 * step ** 2
        value = sum(c * t for c, t in terms) / div
        return value, 16 * np.finfo(np.float64).eps * np.max([np.abs(t) for _, t in terms], axis=0) / div

    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (coarse, _), (fine, rounding) = d(h), d(h / 2)
        return (4 * fine - coarse) / 3, np.abs(fine - coarse) + rounding


@pytest.mark.parametrize("name", list(CASES))
def test_second_derivatives(name):
    case = CASES[name]
    args = _points(case)
    h = np.array([p.h for p in case.points])
    results = {b: tk.jit(_second_derivatives(case), backend=b)(*args) for b in BACKENDS}
    labels = ("xx", "xy", "yy", "yx")[: 1 if case.nin == 1 else 4]
    bad = []
    for fname, fn in case.fns.items():
        for c, label in enumerate(labels):
            got = {b: np.asarray(results[b][fname][c], np.float64) for b in BACKENDS}
            for b in BACKENDS:
                assert got[b].shape == args[0].shape, (name, fname, label, b, got[b].shape)
            want, err = _differences(fn, args, 1 if label == "yx" else c, h)
            for i, p in enumerate(case.points):
                rule = getattr(p, "xy" if label == "yx" else label)
                where = f"{fname} d2/d{label} at ({p.x}{'' if case.nin == 1 else f', {p.y}'})"
                values = [float(got[b][i]) for b in BACKENDS]
                if not all(math.isfinite(v) for v in values):
                    bad.append(f"{where}: not finite: {dict(zip(BACKENDS, values))}")
                    continue
                if not math.isclose(values[0], values[1], rel_tol=1e-9, abs_tol=1e-12):
                    bad.append(f"{where}: the backends differ: {dict(zip(BACKENDS, values))}")
                if rule == FD:
                    if not err[i] <= 1e-5 * (1 + abs(want[i])):
                        bad.append(f"{where}: finite differences are unreliable here ({want[i]:.6g} +- {err[i]:.2g}): "
                                   "not a smooth point, or the step is wrong")
                    elif not abs(values[0] - want[i]) <= 1e-6 * (1 + abs(want[i])) + 4 * err[i]:
                        bad.append(f"{where}: {values[0]!r}, finite differences give {want[i]!r} (+- {err[i]:.2g})")
                elif rule != FINITE and values[0] != rule:
                    bad.append(f"{where}: {values[0]!r}, the convention is {rule!r} ({case.note})")
    assert not bad, f"{name}:\n  " + "\n  ".join(bad)


def _exact_prod_hessian(x):
    """d2 prod(x) / dx_i dx_j: the product of the entries other than x_i and x_j (0 on the diagonal)."""
    n = len(x)
    return np.array([[0.0 if i == j else np.prod([x[k] for k in range(n) if k not in (i, j)]) for j in range(n)]
                     for i in range(n)])


def test_prod_and_cumprod_second_derivatives_at_zeros():
    """np.prod and np.cumprod are polynomials: their second derivatives at zeros are products of the other entries
    (reverse over reverse, forward over reverse, forward over forward, reverse over forward). The first-order rules
    once took the derivative of a zero entry's neighbours as a constant 0, so a Hessian there lost those terms."""
    w = np.array([1.0, 2.0, 3.0, 4.0])

    def cum(x):
        return np.sum(np.cumprod(x) * w)

    def hessians(x):
        return {"prod": (tk.hessian(np.prod)(x), tk.jacfwd(tk.jacfwd(np.prod))(x),
                         tk.grad(lambda x: tk.grad(np.prod)(x) @ w)(x), tk.grad(lambda x: tk.jvp(np.prod, (x,), (w,))[1])(x)),
                "cumprod": (tk.hessian(cum)(x), tk.jacrev(tk.jacrev(cum))(x), tk.jacfwd(tk.jacfwd(cum))(x),
                            tk.grad(lambda x: tk.jvp(cum, (x,), (w,))[1])(x))}

    bad = []
    for b in BACKENDS:
        run = tk.jit(hessians, backend=b, tiers=False)
        for x in ([2.0, 3.0, -1.0, 1.5], [2.0, 0.0, 3.0, 1.5], [1.0, 0.0, 2.0, 0.0], [0.0, 0.0, 0.0, 2.0]):
            x = np.array(x)
            h_prod = _exact_prod_hessian(x)
            h_cum = sum(w[j] * np.pad(_exact_prod_hessian(x[:j + 1]), (0, len(x) - j - 1)) for j in range(len(x)))
            got = run(x)
            want = {"prod": (h_prod, h_prod, h_prod @ w, h_prod @ w), "cumprod": (h_cum, h_cum, h_cum, h_cum @ w)}
            for name in want:
                for k, (g, e) in enumerate(zip(got[name], want[name])):
                    if np.shape(g) != e.shape or not np.allclose(g, e, rtol=1e-12, atol=1e-12):
                        bad.append(f"{b} {name}[{k}] at {x}: {np.asarray(g).tolist()} != {e.tolist()}")
    assert not bad, "\n".join(bad)


def test_scatter_multiply_second_derivatives_at_zeros():
    """tk.at(x)[i].multiply(u) with repeated indices is a product of the updates at each index: its Hessian in u is,
    between two updates at one index, the product of the others there (times x and the weight), also where some of
    them are 0. The rule's 'product of the other factors' took the derivative of a zero entry's neighbours as a
    constant 0, so the Hessian lost those terms (it was asymmetric: 0 on one side, the product on the other)."""
    idx = np.array([0, 0, 0, 1, 1, 2, 0, 1])
    x = np.array([2.0, -3.0, 5.0, 7.0])
    w = np.array([1.0, 10.0, 100.0, 1000.0])

    def f(u):
        return np.sum(tk.at(x)[idx].multiply(u) * w)

    def hessians(u):
        return (tk.hessian(f)(u), tk.jacfwd(tk.jacfwd(f))(u), tk.jacrev(tk.jacrev(f))(u),
                tk.grad(lambda u: tk.jvp(f, (u,), (np.ones(8),))[1])(u))

    def exact(u):
        n = len(u)
        return np.array([[0.0 if k == m or idx[k] != idx[m] else
                          w[idx[k]] * x[idx[k]] * np.prod([u[j] for j in range(n) if j not in (k, m) and idx[j] == idx[k]])
                          for m in range(n)] for k in range(n)])

    bad = []
    for b in BACKENDS:
        run = tk.jit(hessians, backend=b, tiers=False)
        for u in ([1.5, -2.0, 0.5, 3.0, 2.0, -1.0, 4.0, 0.5], [0.0, -2.0, 0.5, 3.0, 0.0, -1.0, 4.0, 0.5],
                  [0.0, 0.0, 0.5, 0.0, 0.0, -1.0, 4.0, 0.0], [0.0, 0.0, 0.0, 3.0, 2.0, 0.0, 0.0, 0.5]):
            u = np.array(u)
            want = exact(u)
            for k, (g, e) in enumerate(zip(run(u), (want, want, want, want @ np.ones(8)))):
                if np.shape(g) != e.shape or not np.allclose(g, e, rtol=1e-12, atol=1e-12):
                    bad.append(f"{b} [{k}] at {u}: {np.asarray(g).tolist()} != {e.tolist()}")
    assert not bad, "\n".join(bad)


def test_hessians_of_squared_norms_at_zero():
    """0.5 * ||x||**2 and a Gaussian kernel exp(-||x - y||**2) are smooth where the norm is 0 (x = 0, x = y): Hessians
    I and -2I there by every transform (the norm's gradient convention 0 at 0 made them 0); the values keep NumPy's
    bits (norm(x) ** 2 is still the square of NumPy's norm away from 0)."""
    def ridge(x):
        return 0.5 * np.linalg.norm(x) ** 2

    def rbf(x):
        return np.exp(-np.linalg.norm(x[:2] - x[2:], axis=-1) ** 2)

    def hessians(x, z):
        return {"ridge": (tk.hessian(ridge)(z), tk.jacrev(tk.grad(ridge))(z), tk.jacfwd(tk.jacfwd(ridge))(z)),
                "rbf": (tk.hessian(rbf)(x), tk.jacrev(tk.jacrev(rbf))(x),
                        tk.vmap(lambda v: tk.jvp(tk.grad(rbf), (x,), (v,))[1])(np.eye(4))),
                "value": ridge(x)}

    x, z = np.array([0.3, -1.2, 0.3, -1.2]), np.zeros(3)
    for b in BACKENDS:
        got = tk.jit(hessians, backend=b, tiers=False)(x, z)
        for h in got["ridge"]:
            np.testing.assert_array_equal(h, np.eye(3), err_msg=b)
        for h in got["rbf"]:
            np.testing.assert_allclose(h, -2 * np.block([[np.eye(2), -np.eye(2)], [-np.eye(2), np.eye(2)]]),
                                       rtol=0, atol=1e-15, err_msg=b)
        assert got["value"] == 0.5 * np.linalg.norm(x) ** 2, b
