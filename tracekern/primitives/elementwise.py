"""Elementwise primitives: arithmetic, transcendentals, comparisons, logic, select, convert.

Operands broadcast as in NumPy; every VJP is un-broadcast to its operand's shape in one place
(Elementwise.vjp), which also applies the complex convention: a gradient rule is written as the
derivative, ct * f'(x), and for complex operands the cotangent is ct * conj(f'(z)) (PyTorch's:
the README's "Complex numbers"); every JVP is read from the same gradient rules (Elementwise.jvp),
which need no conjugate (a tangent is multiplied by f'(z) itself). The table at the bottom is where
an elementwise primitive is defined: its NumPy ufunc (which also makes np.<ufunc> traceable), its
gradients, written with ops, and its scalar template, whose {math} names each backend's math module
resolves (cpu_math, cuda_math)."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import IRError, ShapeError
from ..ir import FLOAT_DTYPES, SUPPORTED_DTYPES, Aval, is_complex, is_inexact, real_dtype
from . import lanes, ops
from .core import Primitive


def broadcast_shapes(name: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    first = shapes[0] if shapes else ()
    if all(s == first for s in shapes):   # (most operations: NumPy's makes an array per shape, 5 us)
        return tuple(first)
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(
            f"{name}: operands could not be broadcast together: shapes {listed}. NumPy broadcasting "
            "aligns trailing dimensions, which must be equal or 1; reshape or np.expand_dims one "
            "operand to line its axes up."
        ) from None


class Elementwise(Primitive):
    """An elementwise primitive. Operands share one dtype (the API layer converts them first);
    `out_dtype` gives the result dtype (bool for comparisons). `grads[i](ct, *ins, out)` gives the
    cotangent of operand i before un-broadcasting; None marks an operand without a gradient.

    `scalar` is the expression kernel renderers emit for one element: Python syntax with {0}, {1}...
    for the operands and {name} for a math function that each renderer supplies per dtype
    (e.g. "{exp}({0})" becomes exp_f32(v3) on the CPU backend). `literal_scalars` maps
    (operand index, literal value) to a cheaper expression for that case."""

    fusion = "elementwise"

    def __init__(self, name: str, ufunc: Callable | None, grads: Sequence[Callable | None] | None,
                 out_bool: bool = False, nin: int | None = None, dtypes: str = "real", scalar: str = "",
                 literal_scalars: dict | None = None, conj_free: bool = False, numpy_impl: Callable | None = None):
        super().__init__(name)
        self.numpy_impl = numpy_impl   # the NumPy implementation when there is no NumPy ufunc (SciPy's)
        # True when every gradient rule commutes with conjugation (ct, -ct, a select of ct): the
        # complex convention needs no conjugates around it
        self.conj_free = conj_free
        self.scalar = scalar
        self.literal_scalars = literal_scalars or {}
        self.ufunc = ufunc
        self.grads = tuple(grads) if grads is not None else None
        self.out_bool = out_bool
        self.nin = nin if nin is not None else ufunc.nin
        # "real" (float, int or bool), "numeric" (any, complex included), "float" (float32, float64),
        # "inexact" (float or complex), "bool", "int" (int32, int64), "integer" (int or bool)
        self.dtypes = dtypes

    def batch(self, args, batched, **params):
        """Batched operands get size-1 axes after their batch axis up to the widest lane, so that
        NumPy's broadcasting (trailing axes first) lines the lanes up; unbatched ones broadcast as
        they are. One rule for the whole table (select and random_bits included)."""
        ndim = max(lanes.lane_ndim(a, b) for a, b in zip(args, batched))
        args = [lanes.with_lane_ndim(a, ndim) if b else a for a, b in zip(args, batched)]
        return [ops.emit(self, *args, **params)], [True]

    def abstract_eval(self, *avals: Aval, **params) -> tuple[Aval, ...]:
        if len(avals) != self.nin:
            raise TypeError(f"{self.name} takes {self.nin} operands, got {len(avals)}")
        dtype = avals[0].dtype
        if any(a.dtype != dtype for a in avals):
            raise TypeError(f"{self.name}: operand dtypes differ ({', '.join(a.dtype.name for a in avals)})")
        if self.dtypes == "float" and dtype not in FLOAT_DTYPES:
            raise TypeError(f"{self.name} needs float32 or float64 operands, got {dtype}")
        if self.dtypes == "inexact" and not is_inexact(dtype):
            raise TypeError(f"{self.name} needs float or complex operands, got {dtype}")
        if self.dtypes == "real" and is_complex(dtype):
            raise TypeError(f"{self.name} is not defined for complex operands ({dtype})")
        if self.dtypes == "bool" and dtype != np.bool_:
            raise TypeError(f"{self.name} needs bool operands, got {dtype}")
        if self.dtypes in ("int", "integer") and dtype.kind not in ("i" if self.dtypes == "int" else "ib"):
            raise TypeError(f"{self.name} needs {'integer' if self.dtypes == 'int' else 'integer or bool'} operands, got {dtype}")
        shape = broadcast_shapes(self.name, *[a.shape for a in avals])
        return (Aval(shape, np.dtype(bool) if self.out_bool else dtype),)

    def impl(self, *arrays, **params):
        if self.ufunc is None:
            return np.asarray(self.numpy_impl(*arrays)).astype(arrays[-1].dtype, copy=False)
        return self.ufunc(*arrays)

    def scalar_for(self, literals, **params) -> str:
        for (i, value), template in self.literal_scalars.items():
            if literals[i] == value:
                return template
        return self.scalar

    def differentiable(self, **params) -> bool:
        return self.grads is not None

    def vjp(self, cts, ins, outs, active, **params):
        (ct,) = cts
        result = []
        for i, (x, act) in enumerate(zip(ins, active)):
            rule = self.grads[i]
            if not act or rule is None:
                result.append(None)
                continue
            if is_complex(x.dtype) and not self.conj_free:   # ct * conj(f'(z)): the rule (ct * f'(z)) on conjugates
                raw = ops.conj(rule(ops.conj(ct), *ins, outs[0]))
            else:
                raw = rule(ct, *ins, outs[0])
            if tuple(raw.shape) != tuple(outs[0].shape) or raw.dtype != x.dtype:
                raise IRError(f"VJP rule of {self.name} gave a cotangent {raw.dtype}{list(raw.shape)} for operand {i}; "
                              f"expected {x.dtype}{list(outs[0].shape)} before un-broadcasting")
            result.append(ops.unbroadcast(raw, tuple(x.shape)))
        return result

    def jvp(self, tangents, ins, outs, **params):
        """The same table read forwards: each gradient rule is elementwise and linear in its
        cotangent, so it maps an operand's tangent (broadcast to the output's shape) to that
        operand's share of the output's tangent; the shares add up."""
        out, total = outs[0], None
        for rule, t in zip(self.grads, tangents):
            if t is None or rule is None:
                continue
            if tuple(t.shape) != tuple(out.shape):
                t = ops.broadcast_to(t, shape=tuple(out.shape))
            share = rule(t, *ins, out)
            total = share if total is None else ops.add(total, share)
        return [total]


def _safe_log(x):
    # log(x), with log(1) = 0 standing in where x == 0: pow's exponent gradient at a zero base
    return ops.log(ops.select(ops.eq(x, 0), ops.full_like(x, 1), x))


def _pow_base(ct, x, y, out):
    # y * x**(y - 1), and 0 where x == y == 0 (x**0 is constant; the formula is 0 * inf there). Only there: at
    # y == 0 and x != 0 it is 0 with the derivative 1 / x in y. The untaken branch is evaluated at x = 1 (a
    # "double where"): 0 * 0**-1's own derivative would make the second derivative NaN.
    both_zero = ops.logical_and(ops.eq(y, 0), ops.eq(x, 0))
    safe_x = ops.select(both_zero, ops.full_like(x, 1), x)
    return ops.mul(ct, ops.select(both_zero, ops.full_like(out, 0), ops.mul(y, ops.power(safe_x, ops.sub(y, 1)))))


def _share(ct, wins, ties):
    # the winning operand takes the cotangent; ties share it equally (as JAX does)
    zero = ops.full_like(ct, 0)
    return ops.add(ops.select(wins, ct, zero), ops.select(ties, ops.mul(ct, 0.5), zero))


def _sqrt_of_product(a, b):
    # sqrt(a * b), the form the inverse trig and hyperbolic gradients take (a product stays accurate near its zeros)
    return ops.sqrt(ops.mul(a, b))


def _arccosh_slope(x):
    # sqrt(x - 1) sqrt(x + 1): for complex x, not sqrt((x - 1)(x + 1)), whose sign differs where Re x < 0
    if is_complex(x.dtype):
        return ops.mul(ops.sqrt(ops.sub(x, 1)), ops.sqrt(ops.add(x, 1)))
    return _sqrt_of_product(ops.sub(x, 1), ops.add(x, 1))


# -- the table: name, NumPy ufunc, one gradient per operand (None: no gradient), scalar template ----
# A gradient is rule(ct, *operands, out) -> the cotangent of that operand before un-broadcasting.

# arithmetic
add = Elementwise("add", np.add, [lambda ct, x, y, out: ct, lambda ct, x, y, out: ct], dtypes="numeric", scalar="({0} + {1})",
                  conj_free=True)
sub = Elementwise("sub", np.subtract, [lambda ct, x, y, out: ct, lambda ct, x, y, out: ops.neg(ct)], dtypes="numeric",
                  scalar="({0} - {1})", conj_free=True)
mul = Elementwise("mul", np.multiply, [lambda ct, x, y, out: ops.mul(ct, y), lambda ct, x, y, out: ops.mul(ct, x)],
                  dtypes="numeric", scalar="({0} * {1})")
div = Elementwise("div", np.true_divide,
                  [lambda ct, x, y, out: ops.div(ct, y), lambda ct, x, y, out: ops.div(ops.neg(ops.mul(ct, out)), y)],
                  dtypes="inexact", scalar="{div}({0}, {1})")   # (complex: NumPy's, a zero divisor gives inf/NaN)
neg = Elementwise("neg", np.negative, [lambda ct, x, out: ops.neg(ct)], dtypes="numeric", scalar="(-{0})", conj_free=True)
# x ** k for a literal k: multiplications, as exact as NumPy (k = 1, 2) or within one rounding (k = 3, 4)
power = Elementwise("pow", np.power, [_pow_base, lambda ct, x, y, out: ops.mul(ops.mul(ct, _safe_log(x)), out)],
                    dtypes="numeric", scalar="{pow}({0}, {1})",
                    # (x ** 0.5 is NumPy's sqrt, for x ** 0.5 and np.power(x, 0.5) of floats alike: -0.0 at -0.0 and
                    # NaN at -inf, where C's pow gives +0.0 and +inf; of complex, x ** 0.5 (np.power's own differs))
                    literal_scalars={(1, 0.5): "{sqrt}({0})", (1, 1.0): "{0}", (1, 2.0): "({0} * {0})", (1, 3.0): "({0} * {0} * {0})",
                                     (1, 4.0): "(({0} * {0}) * ({0} * {0}))"})
absolute = Elementwise("abs", np.absolute, [lambda ct, x, out: ops.mul(ct, ops.sign(x))], scalar="{abs}({0})")
sign = Elementwise("sign", np.sign, None, scalar="{sign}({0})")
maximum = Elementwise("maximum", np.maximum,
                      [lambda ct, x, y, out: _share(ct, ops.gt(x, y), ops.eq(x, y)),
                       lambda ct, x, y, out: _share(ct, ops.gt(y, x), ops.eq(x, y))],
                      scalar="{maximum}({0}, {1})")
minimum = Elementwise("minimum", np.minimum,
                      [lambda ct, x, y, out: _share(ct, ops.lt(x, y), ops.eq(x, y)),
                       lambda ct, x, y, out: _share(ct, ops.lt(y, x), ops.eq(x, y))],
                      scalar="{minimum}({0}, {1})")

# rounding: piecewise constant, so a zero gradient (tk.grad_pass_through gives straight-through)
floor = Elementwise("floor", np.floor, None, dtypes="float", scalar="{floor}({0})")
ceil = Elementwise("ceil", np.ceil, None, dtypes="float", scalar="{ceil}({0})")
rint = Elementwise("rint", np.rint, None, dtypes="float", scalar="{rint}({0})")

# transcendentals (float only)
exp = Elementwise("exp", np.exp, [lambda ct, x, out: ops.mul(ct, out)], dtypes="inexact", scalar="{exp}({0})")
log = Elementwise("log", np.log, [lambda ct, x, out: ops.div(ct, x)], dtypes="inexact", scalar="{log}({0})")
log1p = Elementwise("log1p", np.log1p, [lambda ct, x, out: ops.div(ct, ops.add(x, 1))], dtypes="inexact",
                    scalar="{log1p}({0})")
expm1 = Elementwise("expm1", np.expm1, [lambda ct, x, out: ops.mul(ct, ops.add(out, 1))], dtypes="inexact",
                    scalar="{expm1}({0})")
sqrt = Elementwise("sqrt", np.sqrt, [lambda ct, x, out: ops.div(ops.mul(ct, 0.5), out)], dtypes="inexact",
                   scalar="{sqrt}({0})")
sin = Elementwise("sin", np.sin, [lambda ct, x, out: ops.mul(ct, ops.cos(x))], dtypes="inexact", scalar="{sin}({0})")
cos = Elementwise("cos", np.cos, [lambda ct, x, out: ops.neg(ops.mul(ct, ops.sin(x)))], dtypes="inexact",
                  scalar="{cos}({0})")
tan = Elementwise("tan", np.tan, [lambda ct, x, out: ops.mul(ct, ops.add(ops.mul(out, out), 1))], dtypes="inexact",
                  scalar="{tan}({0})")
tanh = Elementwise("tanh", np.tanh, [lambda ct, x, out: ops.mul(ct, ops.sub(1, ops.mul(out, out)))], dtypes="inexact",
                   scalar="{tanh}({0})")
arctan = Elementwise("arctan", np.arctan, [lambda ct, x, out: ops.div(ct, ops.add(ops.mul(x, x), 1))], dtypes="inexact",
                     scalar="{arctan}({0})")
sinh = Elementwise("sinh", np.sinh, [lambda ct, x, out: ops.mul(ct, ops.cosh(x))], dtypes="inexact", scalar="{sinh}({0})")
cosh = Elementwise("cosh", np.cosh, [lambda ct, x, out: ops.mul(ct, ops.sinh(x))], dtypes="inexact", scalar="{cosh}({0})")
arcsin = Elementwise("arcsin", np.arcsin, [lambda ct, x, out: ops.div(ct, _sqrt_of_product(ops.sub(1, x), ops.add(x, 1)))],
                     dtypes="inexact", scalar="{arcsin}({0})")
arccos = Elementwise("arccos", np.arccos,
                     [lambda ct, x, out: ops.neg(ops.div(ct, _sqrt_of_product(ops.sub(1, x), ops.add(x, 1))))],
                     dtypes="inexact", scalar="{arccos}({0})")
arcsinh = Elementwise("arcsinh", np.arcsinh, [lambda ct, x, out: ops.div(ct, ops.sqrt(ops.add(ops.mul(x, x), 1)))],
                      dtypes="inexact", scalar="{arcsinh}({0})")
arccosh = Elementwise("arccosh", np.arccosh, [lambda ct, x, out: ops.div(ct, _arccosh_slope(x))],
                      dtypes="inexact", scalar="{arccosh}({0})")
arctanh = Elementwise("arctanh", np.arctanh, [lambda ct, x, out: ops.div(ct, ops.mul(ops.sub(1, x), ops.add(x, 1)))],
                      dtypes="inexact", scalar="{arctanh}({0})")

# comparisons and logic: bool results, no gradient
lt = Elementwise("lt", np.less, None, out_bool=True, scalar="({0} < {1})")
le = Elementwise("le", np.less_equal, None, out_bool=True, scalar="({0} <= {1})")
gt = Elementwise("gt", np.greater, None, out_bool=True, scalar="({0} > {1})")
ge = Elementwise("ge", np.greater_equal, None, out_bool=True, scalar="({0} >= {1})")
eq = Elementwise("eq", np.equal, None, out_bool=True, dtypes="numeric", scalar="({0} == {1})")
ne = Elementwise("ne", np.not_equal, None, out_bool=True, dtypes="numeric", scalar="({0} != {1})")
logical_and = Elementwise("and", np.logical_and, None, out_bool=True, dtypes="bool", scalar="({0} & {1})")
logical_or = Elementwise("or", np.logical_or, None, out_bool=True, dtypes="bool", scalar="({0} | {1})")
logical_not = Elementwise("not", np.logical_not, None, out_bool=True, dtypes="bool", scalar="(not {0})")


class Select(Elementwise):
    """select(cond, a, b): a where cond else b (np.where). cond is bool; a and b share a dtype."""

    def __init__(self):
        super().__init__(
            "select", None,
            [None, lambda ct, c, a, b, out: ops.select(c, ct, ops.full_like(ct, 0)),
             lambda ct, c, a, b, out: ops.select(c, ops.full_like(ct, 0), ct)],
            nin=3, scalar="({1} if {0} else {2})", conj_free=True,
        )

    def abstract_eval(self, c: Aval, a: Aval, b: Aval, **params):
        if c.dtype != np.bool_:
            raise TypeError(f"select: condition must be bool, got {c.dtype}")
        if a.dtype != b.dtype:
            raise TypeError(f"select: the two value operands differ in dtype ({a.dtype}, {b.dtype})")
        return (Aval(broadcast_shapes("where", c.shape, a.shape, b.shape), a.dtype),)

    def impl(self, c, a, b, **params):
        return np.where(c, a, b)


select = Select()


class Convert(Primitive):
    """convert(x, dtype): x.astype(dtype). Differentiable between float dtypes only.
    Renderers cast every scalar result to its dtype, so the scalar expression is the operand."""

    fusion = "elementwise"
    scalar = "{0}"

    def batch(self, args, batched, *, dtype):
        return [ops.convert(args[0], dtype=dtype)], [True]

    def abstract_eval(self, x: Aval, *, dtype):
        if np.dtype(dtype) not in SUPPORTED_DTYPES:
            raise TypeError(f"astype: dtype {dtype} is not supported")
        if is_complex(x.dtype) and not is_complex(dtype):
            raise TypeError(f"convert: {x.dtype} to {np.dtype(dtype)} would drop the imaginary part; take real() first")
        return (Aval(x.shape, np.dtype(dtype)),)

    def impl(self, x, *, dtype):
        return np.asarray(x).astype(dtype)

    def scalar_for(self, literals, *, dtype):
        # (to an integer: the backends' to_int32 / to_int64, NumPy's x86 result for NaN, inf and values beyond the
        # range, where a plain conversion is undefined; "" for integer and bool operands, which convert plainly)
        name = np.dtype(dtype).name
        return f"{{to_{name}}}({{0}})" if name in ("int32", "int64") else self.scalar

    def vjp(self, cts, ins, outs, active, *, dtype):
        (ct,), (x,) = cts, ins
        if not (active[0] and is_inexact(x.dtype) and is_inexact(dtype)):
            return [None]
        if is_complex(ct.dtype) and not is_complex(x.dtype):   # real -> complex: the real part's cotangent
            ct = ops.real(ct)
        return [ops.convert(ct, dtype=x.dtype) if x.dtype != ct.dtype else ct]

    def jvp(self, tangents, ins, outs, *, dtype):
        (t,) = tangents
        if not is_inexact(dtype):
            return [None]
        return [ops.convert(t, dtype=np.dtype(dtype)) if t.dtype != np.dtype(dtype) else t]


convert = Convert("convert")


class StopGradient(Primitive):
    """Identity in the forward pass; no cotangent flows through it."""

    fusion = "elementwise"
    scalar = "{0}"

    def batch(self, args, batched):
        return [ops.stop_gradient(args[0])], [True]

    def abstract_eval(self, x: Aval):
        return (x,)

    def impl(self, x):
        return x

    def differentiable(self, **params) -> bool:
        return False


stop_gradient = StopGradient("stop_gradient")


class ComplexPart(Primitive):
    """real(z), imag(z) (complex -> its float dtype) and conj(z) (complex -> complex). Real inputs never
    reach them (tk.numpy returns x, zeros and x). Cotangents follow the complex convention: the real
    part's is ct, the imaginary part's i ct, the conjugate's conj(ct)."""

    fusion = "elementwise"
    linear = True   # (real-linear: forward mode may apply it to tangents)

    def __init__(self, name: str, scalar: str):
        super().__init__(name)
        self.scalar = scalar

    def batch(self, args, batched):
        return [ops.emit(self, args[0])], [True]

    def abstract_eval(self, z: Aval):
        if not is_complex(z.dtype):
            raise TypeError(f"{self.name} needs a complex operand, got {z.dtype}")
        return (Aval(z.shape, z.dtype if self.name == "conj" else real_dtype(z.dtype)),)

    def impl(self, z):
        return {"real": np.real, "imag": np.imag, "conj": np.conj}[self.name](z).copy()

    def vjp(self, cts, ins, outs, active, **params):
        (ct,), (z,) = cts, ins
        if not active[0]:
            return [None]
        if self.name == "conj":
            return [ops.conj(ct)]
        ct = ops.convert(ct, dtype=z.dtype)
        return [ct if self.name == "real" else ops.mul(ct, 1j)]


real = ComplexPart("real", "{0}.real")
imag = ComplexPart("imag", "{0}.imag")
conj = ComplexPart("conj", "{0}.conjugate()")


# -- issue 19: the rest of NumPy's float ufuncs, integer division, bitwise logic -------------------------
# (a line each, as above; {name} math resolved by cpu_math / cuda_math)
_LN2, _LN10 = float(np.log(2.0)), float(np.log(10.0))


def _zero_where_out_is_zero(ct, v, out):
    # ct * v / out, with 0 where out == 0 (hypot at the origin: a subgradient, not 0 / 0)
    zero = ops.eq(out, 0)
    safe = ops.select(zero, ops.full_like(out, 1), out)
    return ops.select(zero, ops.full_like(ct, 0), ops.div(ops.mul(ct, v), safe))


def _over_squared_radius(ct, v, y, x):
    # ct * v / (x**2 + y**2) (arctan2's gradients), as (v / r) / r with r = hypot(x, y), whose square cannot
    # underflow; 0 at the origin (a subgradient, as hypot's), the untaken branch evaluated at r = 1 there
    r = ops.hypot(x, y)
    origin = ops.eq(r, 0)
    safe = ops.select(origin, ops.full_like(r, 1), r)
    return ops.select(origin, ops.full_like(ct, 0), ops.div(ops.div(ops.mul(ct, v), safe), safe))


def _logaddexp_weight(x, y, scale: float):
    """d logaddexp(x, y) / dx = exp(x - out) = sigmoid(scale * (x - y)) (scale ln 2 for logaddexp2): 1/2 at a tie,
    with derivatives of its own there (second derivatives 1/4 and -1/4), 1 or 0 against a finite operand when x
    is infinite, 1/2 at a tie of infinities (whose difference is NaN: 0 is used instead), NaN for NaN.
    Computed from x - y, not from the rounded out, and with exp of a non-positive number only; each branch of
    each select is evaluated at a safe point where it is not taken (a "double where": no 0 * inf in the
    derivatives)."""
    inf_tie = ops.logical_and(ops.eq(x, y), ops.eq(ops.abs(x), np.inf))
    zero = ops.full_like(x, 0)
    d = ops.select(inf_tie, zero, ops.sub(x, y))
    if scale != 1.0:
        d = ops.mul(d, scale)
    up = ops.ge(d, 0)
    e_up = ops.exp(ops.neg(ops.select(up, d, zero)))     # exp(-d), d >= 0
    e_down = ops.exp(ops.select(up, zero, d))            # exp(d), d < 0
    return ops.select(up, ops.div(1, ops.add(e_up, 1)), ops.div(e_down, ops.add(e_down, 1)))


trunc = Elementwise("trunc", np.trunc, None, dtypes="float", scalar="{trunc}({0})")
cbrt = Elementwise("cbrt", np.cbrt, [lambda ct, x, out: ops.div(ct, ops.mul(ops.mul(out, out), 3))], dtypes="float",
                   scalar="{cbrt}({0})")
log2 = Elementwise("log2", np.log2, [lambda ct, x, out: ops.div(ct, ops.mul(x, _LN2))], dtypes="inexact", scalar="{log2}({0})")
log10 = Elementwise("log10", np.log10, [lambda ct, x, out: ops.div(ct, ops.mul(x, _LN10))], dtypes="inexact",
                    scalar="{log10}({0})")
exp2 = Elementwise("exp2", np.exp2, [lambda ct, x, out: ops.mul(ct, ops.mul(out, _LN2))], dtypes="inexact", scalar="{exp2}({0})")
arctan2 = Elementwise("arctan2", np.arctan2,
                      [lambda ct, y, x, out: _over_squared_radius(ct, x, y, x),
                       lambda ct, y, x, out: ops.neg(_over_squared_radius(ct, y, y, x))],
                      dtypes="float", scalar="{arctan2}({0}, {1})")
hypot = Elementwise("hypot", np.hypot, [lambda ct, x, y, out: _zero_where_out_is_zero(ct, x, out),
                                        lambda ct, x, y, out: _zero_where_out_is_zero(ct, y, out)],
                    dtypes="float", scalar="{hypot}({0}, {1})")
copysign = Elementwise("copysign", np.copysign,
                       [lambda ct, x, y, out: ops.mul(ct, ops.mul(ops.copysign(ops.full_like(x, 1), x),
                                                                  ops.copysign(ops.full_like(y, 1), y))), None],
                       dtypes="float", scalar="{copysign}({0}, {1})")
nextafter = Elementwise("nextafter", np.nextafter, [lambda ct, x, y, out: ct, None], dtypes="float",
                        scalar="{nextafter}({0}, {1})")
# issue 25: log(exp(x) + exp(y)) and log2(2**x + 2**y) as NumPy computes them (scalar_rules.logaddexp), with the
# softmax weights as gradients (smooth at ties, so second derivatives there are right)
logaddexp = Elementwise("logaddexp", np.logaddexp,
                        [lambda ct, x, y, out: ops.mul(ct, _logaddexp_weight(x, y, 1.0)),
                         lambda ct, x, y, out: ops.mul(ct, _logaddexp_weight(y, x, 1.0))],
                        dtypes="float", scalar="{logaddexp}({0}, {1})")
logaddexp2 = Elementwise("logaddexp2", np.logaddexp2,
                         [lambda ct, x, y, out: ops.mul(ct, _logaddexp_weight(x, y, _LN2)),
                          lambda ct, x, y, out: ops.mul(ct, _logaddexp_weight(y, x, _LN2))],
                         dtypes="float", scalar="{logaddexp2}({0}, {1})")
# NumPy's integer and float division rules: floor division and a remainder with the divisor's sign (a
# zero divisor gives 0 for integers, inf/nan for floats); fmod keeps the dividend's sign (C's)
floor_divide = Elementwise("floor_divide", np.floor_divide, None, scalar="{floordiv}({0}, {1})")
remainder = Elementwise("remainder", np.remainder,
                        [lambda ct, x, y, out: ct,
                         lambda ct, x, y, out: ops.neg(ops.mul(ct, ops.floor_divide(x, y)))],
                        scalar="{remainder}({0}, {1})")
fmod = Elementwise("fmod", np.fmod,
                   [lambda ct, x, y, out: ct, lambda ct, x, y, out: ops.neg(ops.mul(ct, ops.trunc(ops.div(x, y))))],
                   scalar="{fmod}({0}, {1})")
# bitwise logic (integers; bools for and/or/xor), shifts as NumPy's (a shift past the width gives 0, or -1)
bitwise_and = Elementwise("bitwise_and", np.bitwise_and, None, dtypes="integer", scalar="({0} & {1})")
bitwise_or = Elementwise("bitwise_or", np.bitwise_or, None, dtypes="integer", scalar="({0} | {1})")
bitwise_xor = Elementwise("bitwise_xor", np.bitwise_xor, None, dtypes="integer", scalar="({0} ^ {1})")
invert = Elementwise("invert", np.invert, None, dtypes="int", scalar="(~{0})")
left_shift = Elementwise("left_shift", np.left_shift, None, dtypes="int", scalar="{left_shift}({0}, {1})")
right_shift = Elementwise("right_shift", np.right_shift, None, dtypes="int", scalar="{right_shift}({0}, {1})")
gcd = Elementwise("gcd", np.gcd, None, dtypes="int", scalar="{gcd}({0}, {1})")
lcm = Elementwise("lcm", np.lcm, None, dtypes="int", scalar="{lcm}({0}, {1})")


# -- issue 30: scipy.special's functions ({name} math: backends/scalar_rules.special_functions, libm's erf
# and erfc). No NumPy ufunc: SciPy's is the NumPy implementation, found when first run (tracekern.numpy's
# special module makes scipy.special.<ufunc> traceable)
_TWO_OVER_SQRT_PI, _SQRT_PI_OVER_2 = 2 / np.sqrt(np.pi), np.sqrt(np.pi) / 2
_INV_SQRT_2PI = 1 / np.sqrt(2 * np.pi)


def _scipy(name: str) -> Callable:
    def run(*arrays):
        import scipy.special  # (a dependency; loaded when the interpreter first runs one)

        with np.errstate(all="ignore"):
            return getattr(scipy.special, name)(*arrays)
    run.__name__ = name
    return run


def _gauss(x):
    return ops.exp(ops.neg(ops.mul(x, x)))


def _safe(x):
    # x, with 1 standing in where x == 0 (the Bessel functions' x -> 0 limits are selected separately)
    return ops.select(ops.eq(x, 0), ops.full_like(x, 1), x)


def _at_zero(x, value, other):
    return ops.select(ops.eq(x, 0), ops.full_like(x, value), other)


gammaln = Elementwise("gammaln", None, [lambda ct, x, out: ops.mul(ct, ops.digamma(x))], nin=1, dtypes="float",
                      scalar="{gammaln}({0})", numpy_impl=_scipy("gammaln"))
digamma = Elementwise("digamma", None, [lambda ct, x, out: ops.mul(ct, ops.polygamma(ops.full_like(x, 1), x))], nin=1,
                      dtypes="float", scalar="{digamma}({0})", numpy_impl=_scipy("psi"))
polygamma = Elementwise("polygamma", None, [None, lambda ct, n, x, out: ops.mul(ct, ops.polygamma(ops.add(n, 1), x))],
                        nin=2, dtypes="float", scalar="{polygamma}({0}, {1})", numpy_impl=_scipy("polygamma"))
erf = Elementwise("erf", None, [lambda ct, x, out: ops.mul(ct, ops.mul(_gauss(x), _TWO_OVER_SQRT_PI))], nin=1,
                  dtypes="float", scalar="{erf}({0})", numpy_impl=_scipy("erf"))
erfc = Elementwise("erfc", None, [lambda ct, x, out: ops.mul(ct, ops.mul(_gauss(x), -_TWO_OVER_SQRT_PI))], nin=1,
                   dtypes="float", scalar="{erfc}({0})", numpy_impl=_scipy("erfc"))
erfinv = Elementwise("erfinv", None, [lambda ct, x, out: ops.mul(ct, ops.mul(ops.exp(ops.mul(out, out)), _SQRT_PI_OVER_2))],
                     nin=1, dtypes="float", scalar="{erfinv}({0})", numpy_impl=_scipy("erfinv"))


def _log_ndtr_slope(x, out):
    """d/dx log ndtr(x) = pdf(x) / ndtr(x): exp(-x^2/2 - log_ndtr(x)) / sqrt(2 pi), but in the lower tail (below -20;
    float32: -10) -x / S(x), S = 1 - 1/x^2 + 3/x^4 - 15/x^6 + ... the asymptotic series of the Mills ratio (the
    exponential form's argument carries the rounding of x^2/2, which the second derivative, slope * (-x - slope),
    amplifies by x^2: log_ndtr''(-1e4) was -1.54 where it is -1.0000)."""
    tail = -10.0 if np.dtype(x.dtype) == np.float32 else -20.0
    in_tail = ops.lt(x, tail)
    xs = ops.select(in_tail, x, ops.full_like(x, tail))   # (the tail form's operand where it is used, a constant elsewhere)
    z = ops.div(ops.full_like(x, 1), ops.mul(xs, xs))
    series = ops.full_like(x, 1)
    for k in range(12, 0, -1):   # (Horner: 1 - z (1 - 3z (1 - 5z (...))); the 13th term is below 1e-18 at x = -20)
        series = ops.sub(ops.full_like(x, 1), ops.mul(ops.mul(z, series), float(2 * k - 1)))
    exponent = ops.select(in_tail, ops.zeros_like(x), ops.sub(ops.mul(ops.mul(x, x), -0.5), out))
    return ops.select(in_tail, ops.div(ops.neg(xs), series), ops.mul(ops.exp(exponent), _INV_SQRT_2PI))


log_ndtr = Elementwise("log_ndtr", None, [lambda ct, x, out: ops.mul(ct, _log_ndtr_slope(x, out))],
                       nin=1, dtypes="float", scalar="{log_ndtr}({0})", numpy_impl=_scipy("log_ndtr"))
i0 = Elementwise("i0", None, [lambda ct, x, out: ops.mul(ct, ops.i1(x))], nin=1, dtypes="float", scalar="{i0}({0})",
                 numpy_impl=_scipy("i0"))
i0e = Elementwise("i0e", None, [lambda ct, x, out: ops.mul(ct, ops.sub(ops.i1e(x), ops.mul(ops.sign(x), out)))], nin=1,
                  dtypes="float", scalar="{i0e}({0})", numpy_impl=_scipy("i0e"))
# i1' = i0 - i1 / x, i1e' = i0e - i1e (sign(x) + 1 / x): 1/2 at 0
i1 = Elementwise("i1", None, [lambda ct, x, out: ops.mul(ct, _at_zero(x, 0.5, ops.sub(ops.i0(x), ops.div(out, _safe(x)))))],
                 nin=1, dtypes="float", scalar="{i1}({0})", numpy_impl=_scipy("i1"))
i1e = Elementwise("i1e", None, [lambda ct, x, out: ops.mul(ct, _at_zero(x, 0.5, ops.sub(ops.i0e(x), ops.mul(out, ops.add(
    ops.sign(x), ops.div(ops.full_like(x, 1), _safe(x)))))))], nin=1, dtypes="float", scalar="{i1e}({0})",
    numpy_impl=_scipy("i1e"))


def _x_over(ct, x, d):
    """ct x / d, the y-gradient of x log(y) (d = y) and of x log1p(y) (d = 1 + y): 0 where x == 0 (also where
    d == 0, which stands in 1 there), and its x-derivative ct / d (1 / y, the mixed second derivative; a rule
    selecting a constant 0 at x == 0 had the x-derivative 0 there)."""
    return ops.div(ops.mul(ct, x), ops.select(ops.logical_and(ops.eq(x, 0), ops.eq(d, 0)), ops.full_like(d, 1), d))


# x log(y) and x log1p(y), 0 where x == 0 (unless y is NaN); the y-gradient is 0 there too
xlogy = Elementwise("xlogy", None, [lambda ct, x, y, out: ops.mul(ct, ops.log(y)),
                                    lambda ct, x, y, out: _x_over(ct, x, y)],
                    nin=2, dtypes="float", scalar="{xlogy}({0}, {1})", numpy_impl=_scipy("xlogy"))
xlog1py = Elementwise("xlog1py", None, [lambda ct, x, y, out: ops.mul(ct, ops.log1p(y)),
                                        lambda ct, x, y, out: _x_over(ct, x, ops.add(y, 1))],
                      nin=2, dtypes="float", scalar="{xlog1py}({0}, {1})", numpy_impl=_scipy("xlog1py"))
