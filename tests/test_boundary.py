"""NumPy's semantics at the API boundary (issue 25): what arguments and constants mean, what results
alias, static arguments through transforms, pullbacks as differentiable functions, one basis for
fractional memory budgets, and errors that name the user's file and line and the function called."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import scipy.special

import tracekern as tk

BACKENDS = ["interpret", "cpu"]
pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
HERE = __file__.rsplit("/", 1)[-1]


def _here(err) -> str:
    """The text of an error and of its cause (NumPy raises its own error from ours on z[0] = traced)."""
    return str(err.value) + "\n" + str(err.value.__cause__ or "")


# ----------------------------------------------------------------------------- arguments


@pytest.mark.parametrize("backend", BACKENDS + ["cuda"])
def test_masked_array_and_matrix_arguments_are_refused(backend):
    f = tk.jit(lambda x: x * x, backend=backend)
    masked = np.ma.array([1.0, 2.0, 100.0], mask=[0, 0, 1])
    with pytest.raises(TypeError, match=r"masked array.*x\.filled") as err:
        f(masked)
    assert HERE in str(err.value)
    with pytest.raises(TypeError, match=r"np\.matrix.*np\.asarray\(m\).*@"):
        f(np.matrix([[1.0, 2.0], [3.0, 4.0]]))


@pytest.mark.parametrize("backend", BACKENDS)
def test_masked_and_matrix_constants_are_refused(backend):
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]])
    masked = np.ma.array([1.0, 2.0], mask=[0, 1])
    with pytest.raises(TypeError, match=r"np\.matrix"):
        tk.jit(lambda x: x * m, backend=backend)(np.ones((2, 2)))
    with pytest.raises(TypeError, match=r"masked array"):
        tk.jit(lambda x: x + masked, backend=backend)(np.ones(2))


def test_plain_subclasses_pass_and_unit_like_ones_are_refused(tmp_path):
    mm = np.memmap(tmp_path / "a.dat", dtype=np.float64, mode="w+", shape=(3,))
    mm[:] = [1.0, 2.0, 3.0]
    assert np.array_equal(tk.jit(lambda x: x * 2)(mm), [2.0, 4.0, 6.0])

    class Quantity(np.ndarray):   # a subclass with NumPy protocols of its own (units, say)
        def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
            return NotImplemented

    q = np.arange(3.0).view(Quantity)
    with pytest.raises(TypeError, match=r"subclass of np\.ndarray.*np\.asarray"):
        tk.jit(lambda x: x * 2)(q)


@pytest.mark.parametrize("backend", BACKENDS + ["cuda"])
def test_python_int_argument_out_of_int32_range(backend):
    f = tk.jit(lambda x, y: x + y, backend=backend)
    x = np.arange(3, dtype=np.int32)
    for big in (2**40, 2**31, -2**31 - 1):
        with pytest.raises(OverflowError):
            x + big   # NumPy 2
        with pytest.raises(OverflowError, match="int32") as err:
            f(x, big)
        assert HERE in str(err.value)
    for fits in (2**31 - 1, -2**31, 7):
        got = f(x, fits)
        got = got.copy_to_host() if hasattr(got, "copy_to_host") else got
        want = x + fits
        assert got.dtype == want.dtype and np.array_equal(got, want)
    # an int64 array takes it, as in NumPy
    got = f(np.arange(3, dtype=np.int64), 2**40)
    got = got.copy_to_host() if hasattr(got, "copy_to_host") else got
    assert got.dtype == np.int64 and np.array_equal(got, np.arange(3) + 2**40)
    with pytest.raises(OverflowError, match="int64"):
        f(x, 2**70)


def test_python_scalars_alone_promote_as_numpy():
    assert tk.jit(lambda n: n > 0)(1) == True   # noqa: E712 (a NumPy bool)
    assert tk.jit(lambda n, m: n + m)(1, 2) == 3
    assert tk.jit(lambda n, m: n * m)(1.5, 2) == 3.0


# ----------------------------------------------------------------------------- captured arrays


@pytest.mark.parametrize("backend", BACKENDS + ["cuda"])
def test_captured_arrays_are_read_when_traced(backend):
    """One rule for every shape and backend: a NumPy array a traced function captures is a constant,
    read when the function is traced (JAX's rule); later writes to it change nothing."""
    for shape in [(), (3,), (2, 3)]:
        c = np.full(shape, 1.0)
        f = tk.jit(lambda x: x + c, backend=backend)
        first = f(np.zeros(shape))
        c[...] = 5.0
        again = f(np.zeros(shape))
        host = lambda a: a.copy_to_host() if hasattr(a, "copy_to_host") else np.asarray(a)   # noqa: E731
        assert np.array_equal(host(first), np.full(shape, 1.0))
        assert np.array_equal(host(again), np.full(shape, 1.0)), (shape, backend)
        # a new trace (a new signature) reads it again
        assert np.array_equal(host(f(np.zeros(shape, np.float32))), np.full(shape, 5.0))


def test_captured_broadcast_view_keeps_its_strides_small():
    base = np.arange(4.0)
    c = np.broadcast_to(base, (1000, 4))
    f = tk.jit(lambda x: x + c, backend="interpret")
    assert np.array_equal(f(np.zeros((1000, 4))), np.broadcast_to(base, (1000, 4)))
    base[:] = 0.0
    assert np.array_equal(f(np.zeros((1000, 4))), np.broadcast_to(np.arange(4.0), (1000, 4)))


# ----------------------------------------------------------------------------- results do not alias


@pytest.mark.parametrize("backend", BACKENDS)
def test_results_never_share_memory_with_arguments_or_constants(backend):
    x = np.arange(6.0).reshape(2, 3)
    c = np.arange(3.0)
    cases = {
        "identity": lambda x: x,
        "slice": lambda x: x[1:],
        "transpose": lambda x: x.T,
        "reshape": lambda x: x.reshape(3, 2),
        "pair": lambda x: (x, x[0]),
        "constant": lambda x: c,
    }
    for name, fn in cases.items():
        out = tk.jit(fn, backend=backend)(x)
        outs = out if isinstance(out, tuple) else (out,)
        want = fn(x)
        wants = want if isinstance(want, tuple) else (want,)
        for o, w in zip(outs, wants):
            assert np.array_equal(o, w), name
            assert not np.shares_memory(o, x) and not np.shares_memory(o, c), (name, backend)
        outs[0][...] = -1.0   # writing into a result leaves the arguments and the constant alone
        assert np.array_equal(x, np.arange(6.0).reshape(2, 3)) and np.array_equal(c, np.arange(3.0))


# ----------------------------------------------------------------------------- NumPy functions


@pytest.mark.parametrize("backend", BACKENDS)
def test_column_stack_of_one_array(backend):
    x = np.arange(3.0)
    for fn in (lambda x: np.column_stack(x), lambda x: np.column_stack([x]), lambda x: np.column_stack((x, 2 * x)),
               lambda x: np.column_stack([x[0], x[1]])):
        got = tk.jit(fn, backend=backend)(x)
        want = fn(x)
        assert got.shape == want.shape and np.array_equal(got, want)
    g = tk.jit(tk.grad(lambda x: (np.column_stack([x]) ** 2).sum()), backend=backend)(x)
    assert np.allclose(g, 2 * x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_einsum_with_zero_size_axes(backend):
    cases = [("bij,bjk->bik", (0, 2, 3), (0, 3, 4)), ("ij,jk->ik", (2, 0), (0, 4)), ("ij,j->i", (0, 3), (3,)),
             ("ij,jk->ik", (2, 1), (3, 4)), ("ij,ij->ij", (2, 1), (2, 4))]
    for spec, sa, sb in cases:
        a, b = np.ones(sa), np.ones(sb)
        got = tk.jit(lambda a, b, spec=spec: np.einsum(spec, a, b), backend=backend)(a, b)
        want = np.einsum(spec, a, b)
        assert got.shape == want.shape and np.array_equal(got, want), spec
        ga, gb = tk.jit(tk.grad(lambda a, b, spec=spec: np.einsum(spec, a, b).sum(), (0, 1)), backend=backend)(a, b)
        assert ga.shape == sa and gb.shape == sb
    with pytest.raises(ValueError, match="disagree"):
        tk.jit(lambda a, b: np.einsum("ij,jk->ik", a, b))(np.ones((2, 3)), np.ones((2, 4)))


# ----------------------------------------------------------------------------- tk.vjp and pullbacks


@pytest.mark.parametrize("backend", BACKENDS)
def test_vjp_inside_a_trace_gives_zeros_for_an_unconnected_input(backend):
    f = lambda a, b, n: a * 2.0   # noqa: E731  (b does not reach the output; n is an integer)

    def inside(x, y, n):
        return tk.vjp(f, x, y, n)[1](np.ones(3))

    got = tk.jit(inside, backend=backend)(np.ones(3), np.ones(3), np.arange(3))
    outside = tk.vjp(tk.jit(f, backend=backend), np.ones(3), np.ones(3), np.arange(3))[1](np.ones(3))
    for g, o in zip(got, outside):
        assert (g is None) == (o is None)
        if g is not None:
            assert np.array_equal(g, o)
    assert np.array_equal(got[1], np.zeros(3)) and got[2] is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_pullback_made_outside_a_trace_is_differentiable(backend):
    f = lambda x: np.sin(x) * x   # noqa: E731
    x = np.linspace(0.1, 1.0, 3)
    _, pb = tk.vjp(tk.jit(f, backend=backend), x)
    J = np.diag(np.cos(x) * x + np.sin(x))
    loss = lambda c: (pb(c)[0] ** 2).sum()   # noqa: E731  (|J^T c|^2)
    c = np.array([1.0, -2.0, 0.5])
    assert np.allclose(tk.jit(loss, backend=backend)(c), ((J.T @ c) ** 2).sum())
    assert np.allclose(tk.jit(tk.grad(loss), backend=backend)(c), 2 * J @ (J.T @ c))
    tk.check_grad(loss, (c,))
    # tk.vjp of the pullback: the pullback is linear, its own transpose is J
    (back,) = tk.vjp(lambda c: pb(c)[0], c)[1](np.ones(3))
    assert np.allclose(back, J @ np.ones(3))


@pytest.mark.parametrize("backend", BACKENDS)
def test_pullback_made_inside_a_trace_is_differentiable_in_a_nested_one(backend):
    f = lambda x: np.sin(x) * x   # noqa: E731
    x = np.linspace(0.1, 1.0, 3)

    def h(x, c):
        _, pb = tk.vjp(f, x)
        return tk.grad(lambda c: (pb(c)[0] ** 2).sum())(c)

    J = np.diag(np.cos(x) * x + np.sin(x))
    c = np.array([1.0, -2.0, 0.5])
    assert np.allclose(tk.jit(h, backend=backend)(x, c), 2 * J @ (J.T @ c))


def test_pullback_called_after_its_trace_raises():
    kept = []

    def g(x):
        _, pb = tk.vjp(lambda x: x * 2.0, x)
        kept.append(pb)
        return x

    tk.jit(g)(np.ones(2))
    with pytest.raises(tk.TracerLeakError, match="outside the trace"):
        tk.jit(lambda c: kept[0](c)[0])(np.ones(2))


# ----------------------------------------------------------------------------- static arguments


def _static_fn(x, n):
    return x ** 2 if n > 0 else x * 3.0


@pytest.mark.parametrize("backend", BACKENDS)
def test_static_argnums_reach_the_function_through_transforms(backend):
    vg = tk.jit(tk.value_and_grad(_static_fn), static_argnums=1, backend=backend)
    assert vg(2.0, 1) == (4.0, 4.0) and vg(2.0, 0) == (6.0, 3.0)
    assert tk.jit(tk.grad(tk.grad(_static_fn)), static_argnums=(1,), backend=backend)(2.0, 1) == 2.0
    assert tk.jit(tk.jit(_static_fn), static_argnums=1, backend=backend)(2.0, 1) == 4.0
    for annotate in (tk.recompute, tk.grad_pass_through):
        g = tk.jit(tk.grad(annotate(_static_fn)), static_argnums=1, backend=backend)
        assert g(2.0, 1) == (4.0 if annotate is tk.recompute else 1.0)

    @tk.custom_gradient
    def scaled(x, n):
        return (x * n if n > 1 else x), (lambda dy: (dy * 10.0, None))

    assert tk.jit(tk.grad(scaled), static_argnums=1, backend=backend)(2.0, 3) == 10.0
    assert tk.jit(scaled, static_argnums=1, backend=backend)(2.0, 3) == 6.0
    with pytest.raises(ValueError, match="static") as err:
        tk.jit(tk.grad(_static_fn, argnums=1), static_argnums=1)(2.0, 1)
    assert HERE in str(err.value)


# ----------------------------------------------------------------------------- memory budgets: one basis


def _mlp_loss(ws, x):
    h = x
    for w in ws:
        h = np.tanh(h @ w)
    return np.sum(h * h)


@pytest.mark.parametrize("transform", ["value_and_grad", "grad"])
def test_fraction_budget_is_a_fraction_of_the_reported_bytes(transform):
    rng = np.random.default_rng(0)
    ws = [rng.normal(size=(16, 16)) * 0.3 for _ in range(6)]
    x = rng.normal(size=(8, 16))
    T = getattr(tk, transform)
    report = T(_mlp_loss).lower(ws, x).memory
    assert tk.jit(T(_mlp_loss)).lower(ws, x).memory.residual_bytes == report.residual_bytes
    full = T(_mlp_loss, memory_budget=1.0).lower(ws, x).memory
    assert full.memory_budget == report.residual_bytes and full.residual_bytes <= report.residual_bytes
    assert report.smallest_budget == full.smallest_budget
    for frac in (0.95, 0.9, 0.8):
        want = int(frac * report.residual_bytes)
        if want < report.smallest_budget:
            with pytest.raises(tk.MemoryBudgetError) as err:
                T(_mlp_loss, memory_budget=frac).lower(ws, x)
            assert err.value.smallest == report.smallest_budget
            continue
        by_fraction = T(_mlp_loss, memory_budget=frac).lower(ws, x).memory
        by_bytes = T(_mlp_loss, memory_budget=want).lower(ws, x).memory
        assert by_fraction.memory_budget == by_bytes.memory_budget == want
        assert by_fraction.residual_bytes == by_bytes.residual_bytes <= want


# ----------------------------------------------------------------------------- errors name file:line


def test_output_errors_name_the_users_line():
    def vector(x):
        return x * 2

    def integer(x):
        return (x * 2).astype(np.int32).sum()

    def text(x):
        return "abc"

    def generator(x):
        return (v for v in x)

    for fn, call, match in [(vector, tk.grad, "float scalar"), (integer, tk.grad, "float scalar"),
                            (text, tk.jit, "is a str"), (generator, tk.jit, "is a generator"),
                            (generator, tk.grad, "is a generator")]:
        with pytest.raises((TypeError, ValueError), match=match) as err:
            call(fn)(np.ones(3))
        assert f"{HERE}:" in str(err.value), (fn.__name__, str(err.value))


def test_unsupported_functions_are_named_as_the_user_called_them():
    cases = [(lambda x: np.linalg.tensorinv(x, ind=1), "np.linalg.tensorinv"), (lambda x: scipy.special.gamma(x), "scipy.special.gamma"),
             (lambda x: np.linalg.lstsq(x, x), "np.linalg.lstsq"), (lambda x: np.unique(x), "np.unique"),
             (lambda x: scipy.special.logsumexp(x), "scipy.special.logsumexp")]
    for fn, name in cases:
        with pytest.raises((NotImplementedError, TypeError)) as err:
            tk.jit(fn)(np.ones((3, 3)))
        text = str(err.value)
        assert text.startswith(name) and "np.diff" not in text and "np.psi" not in text, text
        assert f"{HERE}:" in text


def test_item_assignment_into_a_numpy_array_points_to_tk_at():
    def scalar(a):
        z = np.zeros(3)
        z[0] = a[0]
        return z

    def row(a):
        z = np.zeros((2, 3))
        z[0] = a
        return z

    # (NumPy replaces the error of z[0] = traced by "setting an array element with a sequence", a ValueError:
    # tracing raises ours, the TypeError naming the line and tk.at, also where the line's text is unknown)
    namespace = {"np": np}
    exec(compile("def unread(a):\n    z = np.zeros(3)\n    z[0] = a[0]\n    return z\n", "<string>", "exec"), namespace)
    for fn in (scalar, row, namespace["unread"]):
        for transform in (tk.jit, tk.grad):
            with pytest.raises(TypeError) as err:
                transform(lambda a: np.sum(fn(a)) if transform is tk.grad else fn(a))(np.ones(3))
            text = str(err.value)
            assert "assigned into a NumPy array" in text and "tk.at(z)[i].set(value)" in text, text
            assert (f"{HERE}:" if fn is not namespace["unread"] else "<string>:3") in text, text

    def fixed(a):
        return tk.at(np.zeros(3))[0].set(a[0])

    assert np.array_equal(tk.jit(fixed)(np.full(3, 2.0)), [2.0, 0.0, 0.0])


def test_functools_partial_of_a_jitted_function_keeps_working():
    f = tk.jit(lambda x, scale: x * scale)
    g = functools.partial(f, scale=3.0)
    assert np.array_equal(g(np.ones(2)), [3.0, 3.0])


@pytest.mark.parametrize("budget", [None, 1.0, 0.5, 0])
def test_budget_of_a_step_that_keeps_nothing(budget):
    """A linear loss: the backward reads no forward value, so every budget fits (the planner has
    nothing to choose; SciPy's milp refuses an empty problem)."""
    f = tk.value_and_grad(lambda x: (x * 2.0).sum(), memory_budget=budget)
    value, grad = f(np.ones(3))
    assert value == 6.0 and np.array_equal(grad, [2.0, 2.0, 2.0])
    report = f.lower(np.ones(3)).memory
    assert report.residual_bytes == 0 and report.smallest_budget == 0


def test_arithmetic_of_python_number_arguments_stays_weak():
    """A Python number argument is weak (NumPy 2's NEP 50), and so is arithmetic of Python numbers only:
    `x32 * (1 - s)` is float32 in NumPy (s + 1 is a Python float), and was float64 here (the operator's
    result was a strong float64). NumPy's own functions of Python numbers give strong float64, as NumPy's."""
    def f(x, s, n, xi):
        return (x * (s + 1), x * (-s), x * (s * s), (1 - s) * x, x * s ** 2, x / (s / 2), x * abs(s), x * (s // 1),
                x * (s % 0.3), x * np.add(s, 1), xi * (n + 1), xi * (-n), xi // (n * 2), x * (s * n))

    x, xi = np.linspace(0.5, 2.0, 3).astype(np.float32), np.arange(1, 4, dtype=np.int32)
    want = f(x, 0.5, 3, xi)
    assert [w.dtype for w in want] == [np.float32] * 9 + [np.float64] + [np.int32] * 3 + [np.float32]
    for backend in ("interpret", "cpu"):
        got = tk.jit(f, backend=backend)(x, 0.5, 3, xi)
        assert tk.tree_flatten(got)[1] == tk.tree_flatten(want)[1]
        for g, w in zip(got, want):
            assert g.dtype == w.dtype and g.shape == w.shape, (backend, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_python_number_arguments_follow_pythons_own_rules():
    """A Python bool, int, float or complex argument stands for a Python number through every Python operator
    and attribute: `b + b` of a Python bool is 2 (it was True, NumPy's bool + bool, so x * (b + b) was x),
    `(n > 0) + 1`, `n << 1`, `n & 1`, `~n`, `divmod(s, .2)`, `z.real`, `b * 2.5` stay weak (they were strong
    int64/float64, widening int32 and float32 arrays), `-b` is -1 (it raised NumPy's bool negative error),
    round/math.trunc/floor/ceil of s are Python's (round raised "Tracer doesn't define __round__"), and
    np.dot(x32, s) reads s as a float64 array, as NumPy's dot does (it stayed float32)."""
    def f(x, xi, s, n, b, z):
        return (x * (b + b), xi * (b + 1), xi * -b, x * (b * 2.5), xi * ((n > 0) + 1), xi * (n << 1),
                xi * (n & 1), xi * (n | 4), xi * (n ^ 4), xi * ~n, x * divmod(s, 0.2)[1], x * round(s), x * round(s, 1),
                x * math.trunc(-s), x * math.floor(-s), x * math.ceil(s), x * z.real, x * z.imag, x * z.conjugate(),
                np.dot(x, s))

    x, xi = np.linspace(0.5, 2.0, 3).astype(np.float32), np.arange(1, 4, dtype=np.int32)
    args = (x, xi, 1.56, 3, True, 1 + 2j)
    want = f(*args)
    assert [w.dtype for w in want] == [np.float32] + [np.int32] * 2 + [np.float32] + [np.int32] * 6 + \
        [np.float32] * 8 + [np.complex64, np.float64]
    for backend in ("interpret", "cpu"):
        got = tk.jit(f, backend=backend)(*args)
        assert tk.tree_flatten(got)[1] == tk.tree_flatten(want)[1]
        for i, (g, w) in enumerate(zip(got, want)):
            assert g.dtype == w.dtype and g.shape == w.shape, (backend, i, g.dtype, w.dtype)
            np.testing.assert_allclose(g, w, rtol=1e-6)
    with pytest.raises(TypeError, match=r"round\(\) of a traced array \(f32\[3\]\).*np.round\(x"):
        tk.jit(lambda x: round(x), backend="interpret")(x)


# ----------------------------------------------------------------------------- signed zeros


@pytest.mark.parametrize("backend", BACKENDS + ["cuda"])
def test_maximum_and_minimum_of_equal_operands_give_the_second_as_numpy(backend):
    """np.maximum(0.0, -0.0) is -0.0 and np.maximum(-0.0, 0.0) is 0.0 (NumPy gives the second of equal operands,
    whatever the length or layout); the cpu kernels gave the first. A reduction's accumulator is the first operand:
    np.max([0.0, -0.0]) is -0.0, np.max([-0.0, 0.0]) 0.0. Found by a user's test against NumPy."""
    def f(x, y):
        return np.maximum(x, y), np.minimum(x, y), np.maximum(x, 0.0), np.minimum(y, -0.0)

    for dtype in (np.float64, np.float32):
        x = np.array([0.0, -0.0, 0.0, -0.0, 1.0, np.nan], dtype)
        y = np.array([-0.0, 0.0, 0.0, -0.0, np.nan, 1.0], dtype)
        got, want = tk.jit(f, backend=backend)(x, y), f(x, y)
        assert tk.tree_flatten(got)[1] == tk.tree_flatten(want)[1]
        for g, w in zip(got, want):
            g = g.copy_to_host() if hasattr(g, "copy_to_host") else g
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(np.signbit(g), np.signbit(w))
    if backend == "cuda":
        return   # (its reductions combine partials in a tree: which zero is last differs)
    g = tk.jit(lambda v: (np.max(v), np.min(v), np.max(v.reshape(2, -1), axis=1)), backend=backend)
    for v in (np.array([0.0, -0.0]), np.array([-0.0, 0.0]), np.array([0.0] + [-0.0] * 39), np.array([-0.0] * 17 + [0.0] * 3)):
        for a, b in zip(g(v), (np.max(v), np.min(v), np.max(v.reshape(2, -1), axis=1))):
            np.testing.assert_array_equal(np.signbit(a), np.signbit(b))
