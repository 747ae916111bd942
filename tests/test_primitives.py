"""Every primitive and NumPy function on each compiled backend (cpu; cuda on the simulator): values
against NumPy (float32 and float64, dtype kept), gradients against central finite differences (cpu)
and the interpreter (cuda) in float64, broadcasting included."""
import warnings
import zlib

import numpy as np
import pytest

import tracekern as tk
import tracekern.numpy as tnp
from tests import numpy_cases
from tests.conftest import jit_on, make_input, to_host

# (id, function written with plain NumPy, input kinds, shapes)
BCAST = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (3,))]
UNARY = [
    ("neg", lambda x: -x, "any"), ("abs", np.abs, "nz"), ("sign", np.sign, "nz"),
    ("exp", np.exp, "any"), ("log", np.log, "pos"), ("log1p", np.log1p, "pos"),
    ("expm1", np.expm1, "any"), ("sqrt", np.sqrt, "pos"), ("sin", np.sin, "any"),
    ("cos", np.cos, "any"), ("tan", np.tan, "unit"), ("tanh", np.tanh, "any"),
    ("arctan", np.arctan, "any"), ("sinh", np.sinh, "any"), ("cosh", np.cosh, "any"), ("arcsin", np.arcsin, "unit"),
    ("arccos", np.arccos, "unit"), ("arcsinh", np.arcsinh, "any"), ("arccosh", np.arccosh, "gt1"),
    ("arctanh", np.arctanh, "unit"), ("square", np.square, "any"), ("reciprocal", np.reciprocal, "nz"),
    ("pow_const", lambda x: x ** 3, "any"), ("rpow", lambda x: 2.0 ** x, "any"),
    ("clip", lambda x: np.clip(x, -0.5, 0.5), "any"), ("clip_method", lambda x: x.clip(-1.0, None), "any"),
    ("positive", np.positive, "any"),
    ("floor", np.floor, "any"), ("ceil", np.ceil, "any"), ("rint", np.rint, "any"), ("round", np.round, "any"),
]
BINARY = [
    ("add", np.add, "any", "any"), ("sub", np.subtract, "any", "any"), ("mul", np.multiply, "any", "any"),
    ("div", np.divide, "any", "nz"), ("pow", np.power, "pos", "any"), ("maximum", np.maximum, "any", "any"),
    ("minimum", np.minimum, "any", "any"), ("logaddexp", lambda a, b: np.logaddexp(a, b) * np.logaddexp2(b, a), "any", "any"),
    ("where", lambda a, b: np.where(a > 0, a, b), "any", "any"),
    ("where_scalar", lambda a, b: np.where(b < 0.3, a * b, 0.0), "any", "any"),
]
UNARY_SHAPES = [(), (5,), (3, 4), (2, 3, 4)]


def _check(fn, args, dtype=np.float64):
    """Value against NumPy (same dtype) on cpu and cuda; gradient against finite differences (cpu)
    and against the interpreter (cuda)."""
    expected = fn(*args)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for backend in ("cpu", "cuda"):
        got = to_host(tk.jit(fn, backend=backend)(*args))
        assert np.asarray(got).dtype == np.asarray(expected).dtype, backend
        np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=backend)
    if dtype == np.float64:
        tk.check_grad(fn, args)
        weights = np.random.default_rng(1).uniform(0.5, 1.5, np.shape(expected))
        loss = lambda *a: np.sum(fn(*a) * weights)  # noqa: E731
        nums = tuple(range(len(args)))
        want = tk.jit(tk.grad(loss, argnums=nums), backend="interpret")(*args)
        got = to_host(tk.jit(tk.grad(loss, argnums=nums), backend="cuda")(*args))
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-11, atol=1e-12, err_msg="cuda gradient")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", UNARY_SHAPES)
@pytest.mark.parametrize("name,fn,kind", UNARY, ids=[u[0] for u in UNARY])
def test_unary(name, fn, kind, shape, dtype):
    rng = np.random.default_rng(zlib.crc32(repr((name, shape)).encode()))   # (stable across processes)
    _check(fn, (make_input(kind, shape, rng, dtype),), dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes", BCAST, ids=[str(s) for s in BCAST])
@pytest.mark.parametrize("name,fn,ka,kb", BINARY, ids=[b[0] for b in BINARY])
def test_binary_broadcasting(name, fn, ka, kb, shapes, dtype):
    rng = np.random.default_rng(zlib.crc32(repr((name, shapes)).encode()))
    a = make_input(ka, shapes[0], rng, dtype)
    b = make_input(kb, shapes[1], rng, dtype)
    _check(fn, (a, b), dtype)


@pytest.mark.parametrize("op", [np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal])
def test_comparisons(op):
    a = np.array([[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    b = np.array([2.0, 2.0, 2.0])
    for backend in ("cpu", "cuda"):
        got = to_host(tk.jit(op, backend=backend)(a, b))
        assert got.dtype == np.bool_
        np.testing.assert_array_equal(got, op(a, b))


def test_logical_ops():
    a = np.array([True, False, True, False])
    b = np.array([True, True, False, False])
    for backend in ("cpu", "cuda"):
        f = tk.jit(lambda a, b: (a & b, a | b, ~a, np.logical_and(a, b), np.logical_or(a, 1.0 * b), np.logical_not(b)),
                   backend=backend)
        got = to_host(f(a, b))
        for g, e in zip(got, (a & b, a | b, ~a, a & b, a | b, ~b)):
            np.testing.assert_array_equal(g, e)


def test_maximum_ties_share_gradient():
    x = np.array([1.0, 2.0])
    g = tk.grad(lambda x: np.maximum(x, np.array([1.0, 0.0])).sum())(x)
    np.testing.assert_allclose(g, [0.5, 1.0])
    g = tk.grad(lambda x: np.maximum(x, x).sum())(x)  # max(x, x) = x
    np.testing.assert_allclose(g, [1.0, 1.0])


def test_pow_gradient_at_zero_base_and_zero_exponent():
    g = tk.grad(lambda x, y: (x ** y).sum(), argnums=(0, 1))
    gx, gy = g(np.array([0.0, 2.0]), np.array([2.0, 0.0]))
    np.testing.assert_allclose(gx, [0.0, 0.0])
    np.testing.assert_allclose(gy, [0.0, np.log(2.0)])
    assert np.all(np.isfinite(gy))


def test_logaddexp_matches_numpy_at_special_values_and_its_gradient_is_the_softmax_weight():
    """np.logaddexp and np.logaddexp2 (issue 25: primitives, NumPy's npy_logaddexp as one scalar rule) on every
    pair of special values, on every backend in both float dtypes; the gradient is exp(x - out) (0.5 at ties,
    infinities of one sign included, 1 and 0 against -inf), and at ties the second derivatives are 1/4, -1/4."""
    special = np.array([0.0, -0.0, 1.5, -2.5, np.inf, -np.inf, np.nan, 1e-300, 800.0, -800.0])
    x, y = np.repeat(special, special.size), np.tile(special, special.size)
    for dtype in (np.float64, np.float32):
        with np.errstate(all="ignore"):
            want = (np.logaddexp(x.astype(dtype), y.astype(dtype)), np.logaddexp2(x.astype(dtype), y.astype(dtype)))
        for backend in ("interpret", "cpu", "cuda"):
            got = to_host(tk.jit(lambda a, b: (np.logaddexp(a, b), np.logaddexp2(a, b)), backend=backend)(
                x.astype(dtype), y.astype(dtype)))
            for g, w in zip(got, want):
                assert g.dtype == w.dtype, backend
                np.testing.assert_allclose(g, w, rtol=1e-15 if dtype == np.float64 else 1e-6, err_msg=backend)
    a = np.array([1.0, -np.inf, np.inf, 3.0, -np.inf, 2.0, np.nan])
    b = np.array([1.0, -np.inf, np.inf, -np.inf, 0.5, np.inf, 1.0])
    for backend in ("interpret", "cpu", "cuda"):
        with np.errstate(all="ignore"):
            ga, gb = to_host(tk.jit(tk.grad(lambda a, b: np.sum(np.logaddexp(a, b)), argnums=(0, 1)), backend=backend)(a, b))
        np.testing.assert_array_equal(ga, [0.5, 0.5, 0.5, 1.0, 0.0, 0.0, np.nan], err_msg=backend)
        np.testing.assert_array_equal(gb, [0.5, 0.5, 0.5, 0.0, 1.0, 1.0, np.nan], err_msg=backend)
    d2 = tk.grad(lambda x, y: tk.grad(lambda x, y: np.logaddexp(x, y))(x, y), argnums=(0, 1))(2.0, 2.0)
    np.testing.assert_allclose(d2, [0.25, -0.25], rtol=1e-15)


def test_integer_to_a_negative_integer_power_raises_as_numpy():
    """NumPy raises ValueError for an integer array to a negative integer power: a constant exponent raises at
    trace time naming the line; a traced one raises from the compiled cpu kernel (also when the loop is large
    enough to run in parallel: such a loop runs serially, since Numba drops an exception in prange) and from
    the interpreter (NumPy's); a cuda kernel cannot raise and gives 0 (1 or -1 for a base of 1 or -1)."""
    x = np.arange(-2, 3)
    with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed") as info:
        tk.jit(lambda x: x ** -2)(x)   # the constant exponent
    assert f"{__file__}:" in str(info.value) and "int64" in str(info.value)
    with pytest.raises(ValueError, match="Integers to negative integer powers"):
        tk.jit(lambda x: np.power(x, np.array([1, 2, -1, 0, 3])))(x)
    np.testing.assert_array_equal(tk.jit(lambda x: x ** -2.0)(x + 3), (x + 3) ** -2.0)   # (a float exponent: floats)
    big = np.arange(200_000) % 5
    for n, base in ((5, x), (big.size, big)):
        y = np.full(n, 2)
        y[n // 2] = -1
        for backend in ("interpret", "cpu"):
            f = tk.jit(lambda a, b: np.sum(a ** b), backend=backend)
            assert f(base, np.full(n, 2)) == np.sum(base ** 2)
            with pytest.raises(ValueError, match="Integers to negative integer powers are not allowed"):
                f(base, y)
    got = to_host(tk.jit(lambda a, b: a ** b, backend="cuda")(np.array([1, -1, -1, 2, 0]), np.array([-3, -3, -2, -1, 2])))
    np.testing.assert_array_equal(got, [1, -1, 1, 0, 0])


REDUCTIONS = [
    ("sum", lambda x, ax, kd: np.sum(x, axis=ax, keepdims=kd)),
    ("mean", lambda x, ax, kd: np.mean(x, axis=ax, keepdims=kd)),
    ("max", lambda x, ax, kd: np.max(x, axis=ax, keepdims=kd)),
    ("min", lambda x, ax, kd: x.min(axis=ax, keepdims=kd)),
    ("prod", lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd)),
    ("add_reduce", lambda x, ax, kd: np.add.reduce(x, axis=ax, keepdims=kd)),
]
AXES = [None, 0, 1, -1, (0, 1), (0, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("name,fn", REDUCTIONS, ids=[r[0] for r in REDUCTIONS])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_reductions(name, fn, axis, keepdims, dtype):
    rng = np.random.default_rng(7)
    x = make_input("nz", (2, 3, 4), rng, dtype)
    _check(lambda x: fn(x, axis, keepdims), (x,), dtype)


def test_prod_gradient_with_zeros():
    f = lambda x: np.prod(x, axis=1).sum()  # noqa: E731
    x = np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 5.0], [1.0, 2.0, 4.0]])
    g = tk.grad(f)(x)
    np.testing.assert_allclose(g, [[6.0, 0.0, 0.0], [0.0, 0.0, 0.0], [8.0, 4.0, 2.0]])
    tk.check_grad(f, (x,))


def test_max_gradient_splits_ties():
    g = tk.grad(lambda x: np.max(x))(np.array([1.0, 3.0, 3.0]))
    np.testing.assert_allclose(g, [0.0, 0.5, 0.5])


def test_integer_reductions_follow_numpy_dtypes():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    for backend in ("cpu", "cuda"):
        for fn in (np.sum, np.prod, np.mean, np.max):
            got = to_host(tk.jit(lambda x: fn(x, axis=0), backend=backend)(x))
            assert got.dtype == fn(x, axis=0).dtype
            np.testing.assert_array_equal(got, fn(x, axis=0))
        assert to_host(tk.jit(np.sum, backend=backend)(x > 4)) == np.sum(x > 4)


SHAPE_OPS = [
    ("reshape", lambda x: x.reshape(6, 4), (2, 3, 4)),
    ("reshape_infer", lambda x: np.reshape(x, (-1, 2)), (2, 3, 4)),
    ("ravel", lambda x: np.ravel(x) * np.arange(24.0), (2, 3, 4)),
    ("transpose", lambda x: x.T, (2, 3, 4)),
    ("transpose_axes", lambda x: np.transpose(x, (1, 0, 2)), (2, 3, 4)),
    ("swapaxes", lambda x: np.swapaxes(x, 0, 2), (2, 3, 4)),
    ("moveaxis", lambda x: np.moveaxis(x, 0, -1), (2, 3, 4)),
    ("broadcast_to", lambda x: np.broadcast_to(x, (5, 3, 4)), (3, 1)),
    ("expand_dims", lambda x: np.expand_dims(x, (0, 2)), (3, 4)),
    ("squeeze", lambda x: np.squeeze(x), (3, 1, 4, 1)),
    ("squeeze_axis", lambda x: x.squeeze(axis=1), (3, 1, 4)),
    ("slice", lambda x: x[1:3, ::2], (4, 5)),
    ("slice_reverse", lambda x: x[::-1, 3:0:-2], (4, 5)),
    ("int_index", lambda x: x[1], (4, 5)),
    ("neg_index", lambda x: x[-1, 2], (4, 5)),
    ("ellipsis", lambda x: x[..., 1], (2, 3, 4)),
    ("newaxis", lambda x: x[None, :, 2, np.newaxis], (3, 4)),
    ("empty_slice", lambda x: x[3:1] + 1.0, (4, 5)),
    ("iterate", lambda x: sum(row * i for i, row in enumerate(x)), (3, 4)),
    ("concatenate", lambda x: np.concatenate([x, 2 * x, x[:1]], axis=0), (3, 4)),
    ("concatenate_axis1", lambda x: np.concatenate((x, x * x), axis=-1), (3, 4)),
    ("stack", lambda x: np.stack([x, -x], axis=1), (3, 4)),
    ("zeros_like", lambda x: np.zeros_like(x) + x, (3, 4)),
    ("ones_like", lambda x: np.ones_like(x) * x, (3, 4)),
    ("full_like", lambda x: np.full_like(x, 2.5) * x, (3, 4)),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("name,fn,shape", SHAPE_OPS, ids=[s[0] for s in SHAPE_OPS])
def test_shape_ops(name, fn, shape, dtype):
    rng = np.random.default_rng(3)
    _check(fn, (make_input("any", shape, rng, dtype),), dtype)


MATMUL = [((4,), (4,)), ((4,), (4, 3)), ((2, 4), (4,)), ((2, 4), (4, 3)), ((5, 2, 4), (5, 4, 3)),
          ((5, 2, 4), (4, 3)), ((2, 4), (5, 4, 3)), ((1, 2, 4), (5, 4, 3)), ((2, 1, 2, 4), (3, 4, 3))]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shapes", MATMUL, ids=str)
def test_matmul(shapes, dtype):
    rng = np.random.default_rng(5)
    a = make_input("any", shapes[0], rng, dtype)
    b = make_input("any", shapes[1], rng, dtype)
    _check(lambda a, b: a @ b, (a, b), dtype)
    _check(np.matmul, (a, b), dtype)
    if len(shapes[0]) <= 2 and len(shapes[1]) <= 2:
        _check(np.dot, (a, b), dtype)


EXTRAS = [
    ("sigmoid", tnp.sigmoid), ("softplus", tnp.softplus), ("gelu", tnp.gelu),
    ("relu", tnp.relu), ("logsumexp", tnp.logsumexp),
    ("logsumexp_axis", lambda x: tnp.logsumexp(x, axis=1)),
    ("softmax", tnp.softmax), ("log_softmax", lambda x: tnp.log_softmax(x, axis=0)),
]


def _reference_extra(name, x):
    if name == "sigmoid":
        return 1 / (1 + np.exp(-x))
    if name == "softplus":
        return np.log1p(np.exp(x))
    if name == "gelu":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    if name == "relu":
        return np.maximum(x, 0)
    if name == "logsumexp":
        return np.log(np.sum(np.exp(x)))
    if name == "logsumexp_axis":
        return np.log(np.sum(np.exp(x), axis=1))
    if name == "softmax":
        e = np.exp(x)
        return e / e.sum(axis=-1, keepdims=True)
    e = np.exp(x)
    return np.log(e / e.sum(axis=0, keepdims=True))


@pytest.mark.parametrize("name,fn", EXTRAS, ids=[e[0] for e in EXTRAS])
def test_numpy_extras(name, fn):
    rng = np.random.default_rng(11)
    x = make_input("nz", (3, 4), rng)
    np.testing.assert_allclose(tk.jit(fn)(x), _reference_extra(name, x), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fn(x), _reference_extra(name, x), rtol=1e-12, atol=1e-12)  # eager, no trace
    tk.check_grad(fn, (x,))


def test_extras_are_stable_at_extremes():
    x = np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0], np.float32)
    for fn in (tnp.sigmoid, tnp.softplus):
        val, g = tk.jit(tk.value_and_grad(lambda x: fn(x).sum()))(x)
        assert np.isfinite(val) and np.all(np.isfinite(g)), fn
    g = tk.grad(lambda x: tnp.sigmoid(x).sum())(x)
    np.testing.assert_allclose(g, [0.0, 9.357623e-14, 0.25, 9.357623e-14, 0.0], rtol=1e-5, atol=1e-30)
    np.testing.assert_allclose(tk.grad(lambda x: tnp.logsumexp(x))(x), [0, 0, 0, 0, 1])
    assert tk.grad(lambda x: tnp.relu(x).sum())(np.array([0.0]))[0] == 0.0


@pytest.mark.parametrize("fn,expected", [(tnp.sigmoid, 0.25), (tnp.softplus, 0.5), (tnp.gelu, 0.5)])
def test_extras_derivative_at_zero(fn, expected):
    assert tk.grad(fn)(0.0) == pytest.approx(expected, rel=1e-12)
    assert tk.grad(fn)(np.float32(0.0)) == pytest.approx(expected, rel=1e-6)


def test_astype_between_float_dtypes_is_differentiable_and_to_int_is_not():
    x = np.array([1.5, -2.5])
    g = tk.grad(lambda x: (x.astype(np.float32) * 3).astype(np.float64).sum())(x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, [3.0, 3.0])
    g = tk.grad(lambda x: (x.astype(np.int64) * x).sum())(x)  # int path is a constant
    np.testing.assert_allclose(g, [1.0, -2.0])


def test_every_primitive_is_exercised_by_this_file():
    """A new primitive must get a row in one of the tables above (names checked against the IR)."""
    seen: set[str] = set()
    rng = np.random.default_rng(0)
    cases = [(fn, (make_input(k, (3, 4), rng),)) for _, fn, k in UNARY]
    cases += [(fn, (make_input(ka, (3, 4), rng), make_input(kb, (4,), rng))) for _, fn, ka, kb in BINARY]
    cases += [(lambda x, fn=fn: fn(x, 1, False), (make_input("nz", (3, 4), rng),)) for _, fn in REDUCTIONS]
    cases += [(fn, (make_input("any", shape, rng),)) for _, fn, shape in SHAPE_OPS]
    cases += [(lambda a, b: a @ b, (np.ones((2, 3)), np.ones((3, 4)))), (lambda x: x < 1, (np.ones(3),))]
    cases += [(lambda a, b: (a < 0) & (b > 0) | ~(a > b), (np.ones(3), np.ones(3)))]
    cases += [(lambda x: tk.stop_gradient(x) * 2, (np.ones(3),)), (lambda x: x.astype(np.float32), (np.ones(3),))]
    # annotations (tests/test_annotations.py tests them; here they only have to appear)
    rev = tk.reversible(np.tanh, np.sin)
    cases += [(tk.recompute(lambda x: np.sin(x) * 2), (np.ones(3),)),
              (tk.grad_pass_through(np.round), (np.ones(3),)),
              (lambda x: rev(x, x * 2)[0], (np.ones(3),)),
              (lambda x: (tk.print("x is", x), x)[1], (np.ones(3),)),
              # control flow (tests/test_control.py)
              (lambda x: tk.cond(np.sum(x) > 0, np.sin, np.cos, x), (np.ones(3),)),
              (lambda x: tk.scan(lambda c, xi: (c * xi, c), x, np.ones((2, 3)))[0], (np.ones(3),)),
              (lambda x: tk.while_loop(lambda c: np.sum(c) < 10, lambda c: c * 2, x), (np.ones(3),)),
              (lambda x: tk.scan(lambda c, xi: (c * xi, c), x, np.ones((3, 3)), checkpoint=1)[0], (np.ones(3),)),
              # random numbers (tests/test_random.py)
              (lambda x: x * tk.random.uniform(tk.random.key(0), x.shape, x.dtype), (np.ones(3),))]
    for fn, args in cases:
        for mode in ("forward", "grad") if args[0].dtype.kind == "f" else ("forward",):
            f = fn if mode == "forward" else (lambda *a, fn=fn: np.sum(fn(*a) * 1.0))
            graph = tk.make_ir(f, mode=mode)(*args)   # every case traces (a failure is a failure)
            seen.update(graph.primitive_counts)
    for op in (np.less, np.less_equal, np.greater, np.greater_equal, np.equal, np.not_equal):
        seen.update(tk.make_ir(op)(np.ones(2), np.ones(2)).primitive_counts)
    # tk.numpy's coverage table (tests/numpy_cases.py, run by tests/test_numpy.py on every backend)
    # exercises the primitives issue 19 added: scans, sort, gathers and scatters, linalg, the rest of the ufuncs
    for case in numpy_cases.CASES:
        args = numpy_cases.case_inputs(case, case.dtypes[0])
        seen.update(tk.make_ir(lambda *a, case=case: case.fn(*a))(*args).primitive_counts)
        if case.grad and case.inputs[0].kind not in ("int", "bool", "given"):
            loss = lambda *a, case=case: sum(np.sum(np.real(leaf)) for leaf in tk.tree_flatten(case.fn(*a))[0]   # noqa: E731
                                             if leaf.dtype.kind in "fc")
            seen.update(tk.make_ir(loss, mode="grad")(*args).primitive_counts)
    from tracekern.primitives import REGISTRY

    missing = set(REGISTRY) - seen
    assert not missing, f"primitives without a test row: {sorted(missing)}"


# ----------------------------------------------------------------------------- inverse trig and hyperbolic functions


def test_inverse_and_hyperbolic_functions_at_their_domain_edges():
    """NaN outside the domain, infinities at arctanh's poles, exact values at the edges: as NumPy,
    on every backend and in both float dtypes (and NaN gradients where the value is NaN)."""
    x = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 0.999, 1.0, 2.0, 10.0])
    fns = (np.sinh, np.cosh, np.arcsin, np.arccos, np.arcsinh, np.arccosh, np.arctanh)

    def f(x):
        return tuple(fn(x) for fn in fns)

    for dtype in (np.float64, np.float32):
        xd = x.astype(dtype)
        with np.errstate(all="ignore"):
            want = f(xd)
        for backend in ("interpret", "cpu", "cuda"):
            with np.errstate(all="ignore"):   # (the interpreter is NumPy, which warns about its NaNs)
                got = to_host(tk.jit(f, backend=backend)(xd))
            for fn, g, w in zip(fns, got, want):
                assert g.dtype == w.dtype, (backend, fn.__name__)
                np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"{backend} {fn.__name__}")
                np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=f"{backend} {fn.__name__}")
                tol = 1e-12 if dtype == np.float64 else 2e-6
                np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"{backend} {fn.__name__}")
    grads = tk.grad(lambda x: np.sum(np.arccosh(x)) + np.sum(np.arctanh(x * 0.5)))(np.array([0.5, 1.5, 2.0]))
    assert np.isnan(grads[0]) and np.isfinite(grads[1]) and np.isinf(grads[2])   # 2 * 0.5 = 1: arctanh's pole
    np.testing.assert_allclose(tk.grad(lambda x: np.sum(np.arcsin(x) + np.arccos(x)))(np.array([-0.3, 0.7])), [0, 0],
                               atol=1e-15)   # arcsin + arccos = pi / 2


# ----------------------------------------------------------------------------- NumPy's own roundings (issue s8g)


def test_float32_angle_conversions_are_numpys_bit_for_bit():
    """np.rad2deg of float32 multiplies by NumPy's float32 factor 180.0f / NPY_PIf (57.295776), not by 180 / pi
    rounded (57.29578): 80% of the values were 1 to 2 ulp off NumPy's, which fails assert_allclose's default
    rtol=1e-7. deg2rad and float64 too, every backend."""
    x = np.random.default_rng(0).uniform(-7, 7, 64)
    for dtype in (np.float32, np.float64):
        xd = x.astype(dtype)
        for backend in ("interpret", "cpu"):
            got = tk.jit(lambda v: (np.rad2deg(v), np.deg2rad(v), np.degrees(v)), backend=backend)(xd)
            for g, w in zip(got, (np.rad2deg(xd), np.deg2rad(xd), np.degrees(xd))):
                assert g.dtype == w.dtype == dtype
                np.testing.assert_array_equal(g, w, err_msg=backend)


def test_float32_dot_of_a_reversed_view_is_as_accurate_as_numpys():
    """np.dot(x, x[::-1]) traces to a matmul of a reversed view; NumPy's matmul of such an operand skips BLAS and adds
    float32 products one by one (1e-5 relative error at this size), where the user's np.dot calls BLAS. The
    interpreter (the cpu backend's first tier) gives BLAS an operand it takes; the cpu backend does too."""
    x = np.random.default_rng(1).uniform(0, 1, 2**17).astype(np.float32)
    want = np.dot(x, x[::-1])
    exact = np.dot(x.astype(np.float64), x[::-1].astype(np.float64))
    assert abs(want - exact) / exact < 1e-6
    for backend in ("interpret", "cpu"):
        got = tk.jit(lambda v: (np.dot(v, v[::-1]), v[None, ::2] @ v[::-2, None]), backend=backend)(x)
        assert got[0].dtype == np.float32 and got[1].shape == (1, 1)
        np.testing.assert_allclose(got[0], want, rtol=1e-6, err_msg=backend)
        np.testing.assert_allclose(got[1][0, 0], np.dot(x[::2], x[::-2]), rtol=1e-6, err_msg=backend)


# ----------------------------------------------------------------------------- integer and float edge semantics (s9d)

def _same_bits(got, want, err_msg=""):
    """Equal values, dtypes, NaN where NumPy's and signs of zero (and of NaN) as NumPy's."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{err_msg}: {got.dtype} != NumPy's {want.dtype}"
    np.testing.assert_array_equal(got, want, err_msg=err_msg)
    if want.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{err_msg} (signs)")


def test_sign_of_infinities_and_zeros_is_numpys():
    """np.sign(±inf) is ±1 and np.sign(-0.0) is +0.0 in NumPy; the compiled backends' x / |x| gave NaN at ±inf and
    kept -0.0."""
    x = np.array([np.inf, -np.inf, 0.0, -0.0, np.nan, 2.5, -3e38, 1e-310])
    for dtype in (np.float64, np.float32):
        xd = x.astype(dtype)
        for backend in ("interpret", "cpu", "cuda"):
            got = jit_on(backend, lambda v: (np.sign(v), np.sign(v) * v))(xd)
            for g, w in zip(got, (np.sign(xd), np.sign(xd) * xd)):
                _same_bits(g, w, f"{backend} {dtype.__name__}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (the simulator is NumPy, which warns of inf and NaN)
def test_ldexp_frexp_and_modf_are_numpys_bit_for_bit():
    """ldexp of exponents beyond the normal range was x * exp2(n): 0 * inf = NaN, 2**-1000 * 2**1500 = inf; frexp of
    the largest floats divided by 2**1024 (inf) and gave a mantissa 0; modf(-2.0)'s fraction was +0.0. Random bit
    patterns, powers of two and their neighbours, on every backend."""
    rng = np.random.default_rng(0)
    for dtype, bits in ((np.float64, np.uint64), (np.float32, np.uint32)):
        info = np.finfo(dtype)
        p2 = np.ldexp(dtype(1), np.arange(info.minexp - info.nmant, info.maxexp).astype(np.int32))
        x = np.concatenate([rng.integers(0, np.iinfo(bits).max, 3000, dtype=bits).view(dtype), p2, -np.nextafter(p2, 0),
                            np.nextafter(p2, np.inf), [0.0, -0.0, np.inf, -np.inf, np.nan]]).astype(dtype)
        span = info.maxexp - info.minexp + info.nmant
        n = rng.integers(-2 * span, 2 * span, x.size)
        n[:200] = rng.integers(info.minexp - info.nmant - 30, info.minexp + 30, 200)   # (results near the subnormals)
        with np.errstate(all="ignore"):
            want = (np.ldexp(x, n), *np.frexp(x), *np.modf(x))
        for backend in ("interpret", "cpu", "cuda"):
            got = jit_on(backend, lambda v, k: (np.ldexp(v, k), *np.frexp(v), *np.modf(v)))(x, n)
            for name, g, w in zip(("ldexp", "frexp mantissa", "frexp exponent", "modf fraction", "modf whole"), got, want):
                _same_bits(g, w, f"{name}, {backend} {dtype.__name__}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_float_to_int_casts_of_nan_inf_and_out_of_range_values_give_the_lowest_integer():
    """NumPy's cast (x86's cvttsd2si) gives the dtype's lowest value for NaN, ±inf and values beyond the range.
    Compiled, such a conversion is undefined: (x * nan).astype(np.int64) gave arbitrary integers, (x * inf) 0."""
    x = np.array([1.0, -2.0, 3.5])
    lo32, lo64 = np.iinfo(np.int32).min, np.iinfo(np.int64).min
    f = lambda v: ((v * np.nan).astype(np.int64), (v * np.inf).astype(np.int32), (v / 0.0 * 0.0).astype(np.int32),  # noqa: E731
                   (v * 1e30).astype(np.int64), (v * 3e9).astype(np.int32), (v * 2.0).astype(np.int64), (v * np.nan).astype(bool))
    want = ([lo64] * 3, [lo32] * 3, [lo32] * 3, [lo64] * 3, [lo32] * 3, [2, -4, 7], [True] * 3)
    for dtype in (np.float64, np.float32):
        for backend in ("interpret", "cpu", "cuda"):
            with np.errstate(all="ignore"):
                got = jit_on(backend, f)(x.astype(dtype))
            for k, (g, w) in enumerate(zip(got, want)):
                np.testing.assert_array_equal(g, w, err_msg=f"{backend} {dtype.__name__} output {k}")


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_round_is_numpys_for_integers_bools_and_many_decimals():
    """np.round of integers to negative decimals (NumPy: half to even in float64, cast back; it raised
    NotImplementedError), NumPy's own powers of ten (1e9 times 10 repeatedly: 10.0 ** 30 differs in the last bit),
    decimals past 308 (inf: NaN results, where 10.0 ** 400 raised OverflowError), and a bool array (NumPy's float16:
    a TypeError, where the bool came back unchanged)."""
    ints = np.array([15, 25, -15, -25, 149, 150, 5, -5, 2**62 + 1])
    x = np.random.default_rng(2).standard_normal(500) * 10.0 ** np.random.default_rng(3).integers(-40, 40, 500)
    f = lambda a, v: (np.round(a, -1), np.round(a, -2), np.round(a.astype(np.int32) % 1000, -1), np.round(a, -18),  # noqa: E731
                      *(np.round(v, d) for d in (0, 3, 23, 25, 30, 37, -5, -30, 400)), np.round(v.astype(np.float32), 30))
    with np.errstate(all="ignore"):
        want = f(ints, x)
    for backend in ("interpret", "cpu", "cuda"):
        with np.errstate(all="ignore"):
            got = jit_on(backend, f)(ints, x)
        for k, (g, w) in enumerate(zip(got, want)):
            _same_bits(g, w, f"{backend} output {k}")
    with pytest.raises(TypeError, match="float16"):
        tk.jit(lambda b: np.round(b), backend="interpret")(np.array([True, False]))


def test_integer_floor_ceil_trunc_fabs_and_heaviside_are_numpys():
    """NumPy 2: an integer array is its own floor, ceil, trunc and fix (same dtype); fabs and heaviside of integers
    are float64. tracekern raised 'floor needs float32 or float64 operands' and 'np.fabs is defined for floats
    only', and heaviside kept the integer dtype."""
    a = np.array([-3, 0, 4], np.int32)
    f = lambda a, b: (np.floor(a), np.ceil(a), np.trunc(a), np.fix(a), np.floor(b), np.fabs(a), np.heaviside(a, 1),  # noqa: E731
                      np.heaviside(a, 0.5), np.heaviside(a.astype(np.int64), a))
    want = f(a, a > 0)
    for backend in ("interpret", "cpu", "cuda"):
        got = jit_on(backend, f)(a, a > 0)
        for k, (g, w) in enumerate(zip(got, want)):
            _same_bits(g, w, f"{backend} output {k}")


def test_python_ints_beyond_the_dtype_compare_exactly_and_bind_no_clip():
    """NumPy 2 compares an integer array with any Python int exactly (NEP 50's exception: only arithmetic raises
    OverflowError), and np.clip drops a Python int bound beyond the dtype; tracekern raised OverflowError for both.
    A Python int argument beyond int32 (traced as a wide int64) compares with an int32 array too."""
    a = np.array([-2**31, -1, 0, 7, 2**31 - 1], np.int32)
    f = lambda a, n: (a < 2**40, a == 2**70, 2**40 > a, a >= -2**31 - 1, a != 2**31, np.less(a.astype(np.int64), 2**64),  # noqa: E731
                      a.astype(np.int64) == -2**63, np.clip(a, -2**40, 2**40), np.clip(a, None, 5), a < n, n != a)
    want = f(a, 2**40)
    for backend in ("interpret", "cpu", "cuda"):
        got = jit_on(backend, f)(a, 2**40)
        for k, (g, w) in enumerate(zip(got, want)):
            _same_bits(g, w, f"{backend} output {k}")
    with pytest.raises(OverflowError):   # (arithmetic still raises, as NumPy 2's)
        tk.jit(lambda a: a + 2**40, backend="interpret")(a)
    with pytest.raises(OverflowError):   # (a bound that binds, as NumPy's)
        tk.jit(lambda a: np.clip(a, 2**40, None), backend="interpret")(a)


@pytest.mark.parametrize("fn, dtype_name", [
    (np.square, "int8"), (np.conj, "int8"), (np.deg2rad, "float16"), (np.rad2deg, "float16"), (np.spacing, "float16"),
    (lambda b: np.modf(b)[0], "float16"), (lambda b: np.frexp(b)[0], "float16"), (lambda b: np.ldexp(b, 2), "float16"),
    (np.fabs, "float16"), (lambda b: np.heaviside(b, b), "float16"), (np.sqrt, "float16"), (lambda b: b // b, "int8"),
])
def test_bool_operands_numpy_computes_in_an_unsupported_dtype_raise(fn, dtype_name):
    """NumPy computes these of a bool array in int8 or float16, dtypes tracekern has no kernels for: a TypeError
    naming the dtype (np.square, np.conj and np.deg2rad came back as bool or float64 arrays, silently)."""
    with pytest.raises(TypeError, match=dtype_name):
        tk.jit(fn, backend="interpret")(np.array([True, False]))


def test_positive_of_a_bool_array_raises_as_numpy():
    with pytest.raises(TypeError, match="positive"):
        tk.jit(np.positive, backend="interpret")(np.array([True, False]))
    assert tk.jit(np.positive, backend="interpret")(np.array([1, 2], np.int32)).dtype == np.int32


def test_isclose_modf_and_spacing_warn_no_more_than_numpy():
    """NumPy's isclose computes |a - b| under errstate(invalid='ignore'), and modf and spacing of ±inf warn of
    nothing; the interpreter warned 'invalid value encountered in subtract' (inf - inf) for each."""
    x = np.array([np.inf, -np.inf, 1.0, np.nan])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.isclose(x, x[::-1]), np.modf(x), np.spacing(x[:3])
        tk.jit(lambda v: (np.isclose(v, v[::-1]), np.modf(v), np.spacing(v[:3])), backend="interpret")(x)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")   # (the simulator's -INT_MIN)
def test_gcd_and_lcm_at_the_lowest_integer_and_on_overflow_are_numpys():
    """NumPy's gcd and lcm work on |a| and |b| unsigned: gcd(1, INT_MIN) is 1 (it was -1: Euclid on -INT_MIN, which
    wraps), and an lcm that overflows wraps from the unsigned product (tracekern took |the wrapped product|: a sign
    apart); random pairs of each dtype and the extreme values, on every backend."""
    rng = np.random.default_rng(5)
    for dtype in (np.int32, np.int64):
        info = np.iinfo(dtype)
        special = np.array([info.min, info.max, 0, 1, -1, 2, -6, 2 ** (info.bits // 2), 2 ** (info.bits - 2)], dtype)
        a = np.concatenate([rng.integers(info.min, info.max, 500, dtype=dtype), np.repeat(special, special.size)])
        b = np.concatenate([rng.integers(info.min, info.max, 500, dtype=dtype), np.tile(special, special.size)])
        want = (np.gcd(a, b), np.lcm(a, b))
        for backend in ("interpret", "cpu", "cuda"):
            got = jit_on(backend, lambda a, b: (np.gcd(a, b), np.lcm(a, b)))(a, b)
            for name, g, w in zip(("gcd", "lcm"), got, want):
                _same_bits(g, w, f"{name}, {backend} {dtype.__name__}")
