"""tk.cond, tk.scan, tk.fori_loop and tk.while_loop: values and gradients against unrolled Python
and finite differences, on every backend; loops run inside the compiled step on cpu."""
import numpy as np
import pytest

import tracekern as tk
from tests.conftest import assert_tree_close, jit_on

W = np.array([0.9, 1.1, 0.7, 1.0, 1.2])


def on(backend, f):
    return jit_on(backend, f)


def ref(f):
    """References run on the interpreter (the oracle; and no compile)."""
    return tk.jit(f, backend="interpret")


def fd(backend, f, args, order=1):
    """Finite differences check the compiled backend once (check_grad compiles on the default)."""
    if backend == "cpu":
        tk.check_grad(f, args, order=order)


close = assert_tree_close


# ----------------------------------------------------------------------------- cond


def _branchy(x):
    return tk.cond(np.sum(x) > 0, lambda v: (np.sin(v) * 2, v.sum()), lambda v: (np.cos(v), v.max()), x)


def _branchy_python(x):
    return (np.sin(x) * 2, x.sum()) if np.sum(x) > 0 else (np.cos(x), x.max())


@pytest.mark.parametrize("shift", [0.3, -0.5])
def test_cond_values_and_gradients(backend, shift):
    x = np.linspace(-1, 1, 5) + shift
    close(on(backend, _branchy)(x), _branchy_python(x))
    loss = lambda x: np.sum(_branchy(x)[0] ** 2) + _branchy(x)[1]  # noqa: E731
    taken = (lambda v: (np.sin(v) * 2, v.sum())) if shift > 0 else (lambda v: (np.cos(v), v.max()))

    def plain(x):
        a, b = taken(x)
        return np.sum(a ** 2) + b
    close(on(backend, tk.grad(loss))(x), ref(tk.grad(plain))(x))
    fd(backend, loss, (x,), order=2)


def test_cond_with_closures_and_mismatched_branches():
    y = np.array([1.0, 2.0])
    f = lambda x, s: tk.cond(s > 0, lambda v: v * y, lambda v: v + s, x)  # noqa: E731
    np.testing.assert_allclose(tk.jit(f)(np.ones(2), np.float64(1.0)), [1.0, 2.0])
    np.testing.assert_allclose(tk.jit(f)(np.ones(2), np.float64(-1.0)), [0.0, 0.0])
    dx, ds = tk.grad(lambda x, s: np.sum(f(x, s)), argnums=(0, 1))(np.ones(2), np.float64(-1.0))
    np.testing.assert_allclose(dx, [1.0, 1.0])
    assert ds == 2.0
    with pytest.raises(TypeError, match="leaf .* is f64\\[2\\] in true_fn and f64\\[\\] in false_fn"):
        tk.jit(lambda x, s: tk.cond(s > 0, lambda v: v, lambda v: v.sum(), x))(np.ones(2), np.float64(1.0))


# ----------------------------------------------------------------------------- scan


def _scan_loss(x, xs):
    c, ys = tk.scan(lambda c, xi: (np.tanh(c * W + xi), (c.sum(), c * 2)), x, xs)
    return np.sum(c) + np.sum(ys[0] ** 2) + np.sum(ys[1] * xs)


def _scan_python(x, xs):
    c, y0, y1 = x, [], []
    for xi in xs:
        y0.append(c.sum())
        y1.append(c * 2)
        c = np.tanh(c * W + xi)
    return np.sum(c) + np.sum(np.stack(y0) ** 2) + np.sum(np.stack(y1) * xs)


def test_scan_values_gradients_and_grad_of_grad(backend):
    rng = np.random.default_rng(0)
    x, xs = rng.standard_normal(5), rng.standard_normal((4, 5))
    close(on(backend, _scan_loss)(x, xs), _scan_python(x, xs))
    close(on(backend, tk.grad(_scan_loss, argnums=(0, 1)))(x, xs), ref(tk.grad(_scan_python, argnums=(0, 1)))(x, xs))
    gg = on(backend, tk.grad(lambda x, xs: np.sum(tk.grad(_scan_loss)(x, xs) ** 2)))(x, xs)
    close(gg, ref(tk.grad(lambda x, xs: np.sum(tk.grad(_scan_python)(x, xs) ** 2)))(x, xs), 1e-9)
    fd(backend, _scan_loss, (x, xs), order=2)


def test_scan_reverse_length_pytrees_and_zero_steps(backend):
    def f(x):
        (a, b), ys = tk.scan(lambda c, _: ((c[0] * 0.5 + c[1], np.sin(c[0])), c[1] * 3), (x, x * 2), None, length=3,
                             reverse=True)
        return a + b, ys

    x = np.array([0.2, -0.4])
    a, b = x, x * 2
    ys = []
    for _ in range(3):
        ys.append(b * 3)
        a, b = a * 0.5 + b, np.sin(a)
    got = on(backend, f)(x)
    close(got[0], a + b)
    close(got[1], np.stack(ys[::-1]))           # reverse: ys[t] is written at step t, t = 2, 1, 0
    fd(backend, lambda x: np.sum(f(x)[0]) + np.sum(f(x)[1]), (x,))
    empty = on(backend, lambda x: tk.scan(lambda c, xi: (c + xi, c), x, np.ones((0, 2))))(x)
    close(empty[0], x)
    assert empty[1].shape == (0, 2)


def test_scan_and_fori_loop_accept_jax_unroll_with_the_same_results():
    """JAX code passes unroll= to lax.scan and lax.fori_loop (a hint; the results are the same):
    it raised TypeError, an unexpected keyword argument."""
    xs = np.array([0.3, -0.7, 1.1])
    f = lambda x, u: tk.scan(lambda c, x: (np.sin(c) + x, c * x), 0.5, x, unroll=u)  # noqa: E731
    want = ref(lambda x: f(x, 1))(xs)
    close(ref(lambda x: f(x, 2))(xs), want, 0)
    close(tk.grad(lambda x: np.sum(f(x, True)[1]))(xs), tk.grad(lambda x: np.sum(f(x, 1)[1]))(xs), 0)
    g = lambda x, n: tk.fori_loop(0, n, lambda i, v: v * 1.5 + i, x, unroll=3)  # noqa: E731
    close(ref(lambda x: g(x, 3))(xs), ((xs * 1.5) * 1.5 + 1) * 1.5 + 2, 1e-15)
    close(ref(g)(xs, np.int64(3)), ((xs * 1.5) * 1.5 + 1) * 1.5 + 2, 1e-15)
    for bad in (0, 1.5, "2"):
        with pytest.raises(ValueError, match="unroll must be an int >= 1 or a bool"):
            f(xs, bad)


def test_scan_carry_must_keep_its_shape():
    with pytest.raises(TypeError, match=r"the carry changed: leaf .* is f64\[2\] in init and f64\[\] in f's result"):
        tk.jit(lambda x: tk.scan(lambda c, xi: (c.sum(), xi), x, np.ones((3, 2))))(np.ones(2))


def test_a_plain_forward_scan_keeps_no_recorded_carries():
    g = tk.make_ir(lambda x: tk.scan(lambda c, xi: (c * xi, c), x, np.ones((3, 2)))[0])(np.ones(2))
    (e,) = [e for e in g.eqns if e.primitive.name == "scan"]
    assert e.params["record"] is False and len(e.outputs) == 2


def test_loops_run_inside_the_compiled_step():
    source = tk.jit(lambda x: tk.fori_loop(0, 5, lambda i, v: v * 2, x)).lower(np.ones(3)).source
    assert "for s in range(5):" in source and "def step" in source and "def loop0" in source   # compiled whole
    with tk.config.override(compiled_loops=False):                                             # driven by the step
        source = tk.jit(lambda x: tk.fori_loop(0, 5, lambda i, v: v * 2, x)).lower(np.ones(3)).source
    assert "for t in range(5):" in source and "def step" in source and "def sub0" in source


# ----------------------------------------------------------------------------- fori_loop and while_loop


def test_fori_loop_static_and_traced_bounds(backend):
    body = lambda i, v: v * 0.5 + np.sin(v) * i  # noqa: E731

    def python(x, n):
        for i in range(n):
            x = body(np.float64(i), x)
        return x

    x = np.linspace(-1, 1, 4)
    close(on(backend, lambda x: tk.fori_loop(0, 4, body, x))(x), python(x, 4))
    traced = lambda x, n: tk.fori_loop(0, n, body, x)  # noqa: E731
    for n in (0, 1, 4):
        close(on(backend, traced)(x, np.int64(n)), python(x, n))
        close(on(backend, tk.grad(lambda x, n: np.sum(traced(x, n) ** 2)))(x, np.int64(n)),
              ref(tk.grad(lambda x: np.sum(python(x, n) ** 2)))(x))
    fd(backend, lambda x: np.sum(tk.fori_loop(0, 3, body, x) ** 2), (x,), order=2)


def test_fori_loop_index_promotes_as_jaxs():
    """The index of Python-int bounds is weak (JAX's): a float32 or int32 carry plus i keeps its dtype (it became
    float64 / int64, and the loop raised 'the carry changed'); int32 traced bounds give an int32 index."""
    x32 = np.array([0.3, -1.2], np.float32)
    f32 = ref(lambda x: tk.fori_loop(0, 3, lambda i, c: c * 0.5 + i, x))(x32)
    assert f32.dtype == np.float32
    close(f32, np.float32(((x32 * 0.5 + 0) * 0.5 + 1) * 0.5 + 2))
    assert ref(lambda x: tk.fori_loop(0, 3, lambda i, c: c + i, x))(np.int32(1)) == np.int32(4)
    assert ref(lambda n: tk.fori_loop(0, n, lambda i, c: c + i, np.int32(1)))(np.int32(4)).dtype == np.int32
    assert ref(lambda x, n: tk.fori_loop(0, n, lambda i, c: c + i, x))(x32, 4).dtype == np.float32   # (a Python int n)
    assert ref(tk.vmap(lambda x: tk.fori_loop(1, 3, lambda i, c: c * i, x)))(x32).dtype == np.float32



def _python_number_carries(x, s):
    c, ys = tk.scan(lambda c, xi: (c * s + xi * xi, c), 0.0, x)
    w = tk.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, c[1] * s + x[c[0]]), (0, 1.0))
    k = tk.fori_loop(0, 3, lambda i, c: c + x[i] * i, 0)
    q = tk.cond(s > 0, lambda: s * 2, lambda: s + 1)
    return c, ys, w, k, x * q


def _python_number_carries_numpy(x, s):
    c, ys = 0.0, []
    for xi in x:
        ys.append(c)
        c = c * s + xi * xi
    i, w = 0, 1.0
    while i < 3:
        i, w = i + 1, w * s + x[i]
    k = 0
    for j in range(3):
        k = k + x[j] * j
    return c, np.array(ys, x.dtype), (i, w), k, x * (s * 2 if s > 0 else s + 1)   # (ys: the carry's dtype, as JAX's)


def test_carries_and_branches_of_python_numbers_are_weak_as_jaxs(backend):
    """A scan, while or fori carry that starts as a Python number takes the body's dtype (JAX's weak carry; a
    NumPy loop's `c = 0.0; c = c + x32[i]` is float32): it was float64. A cond whose branches both return Python
    numbers returns one (weak): `x32 * cond(p, lambda: s * 2, ...)` was float64. Gradients unchanged."""
    x = np.linspace(0.5, 2.0, 3).astype(np.float32)
    got, want = on(backend, _python_number_carries)(x, 0.5), _python_number_carries_numpy(x, 0.5)
    assert tk.tree_flatten(got)[1] == tk.tree_flatten(want)[1]
    for g, w in zip(tk.tree_flatten(got)[0], tk.tree_flatten(want)[0]):
        assert np.asarray(g).dtype == np.asarray(w).dtype, (g, w)
        close(g, w, tol=1e-6)

    def loss(x, s):
        c, ys, w, k, q = _python_number_carries(x, s)
        return c + np.sum(ys) + w[1] + k + np.sum(q)

    def loss_numpy(x, s):
        c, ys, w, k, q = _python_number_carries_numpy(x, s)
        return c + np.sum(ys) + w[1] + k + np.sum(q)

    gx, gs = on(backend, tk.grad(loss, argnums=(0, 1)))(x, 0.5)
    assert gx.dtype == np.float32 and np.asarray(gs).dtype == np.float64
    x64, h = x.astype(np.float64), 1e-6
    close(gx, np.array([(loss_numpy(x64 + h * e, 0.5) - loss_numpy(x64 - h * e, 0.5)) / (2 * h) for e in np.eye(3)]), tol=1e-5)
    close(gs, (loss_numpy(x64, 0.5 + h) - loss_numpy(x64, 0.5 - h)) / (2 * h), tol=1e-5)

def _simulate(x, v):
    """A falling mass with drag, integrated until it reaches the ground: a data-dependent trip count."""
    def step(s):
        pos, vel, t = s
        return pos + 0.05 * vel, vel * 0.98 - 0.05 * 9.81, t + 1

    pos, vel, t = tk.while_loop(lambda s: np.min(s[0]) > 0.0, step, (x, v, np.int64(0)))
    return np.sum(pos ** 2) + np.sum(vel), t


def _simulate_python(x, v):
    pos, vel, t = x, v, 0
    while np.min(pos) > 0.0:
        pos, vel, t = pos + 0.05 * vel, vel * 0.98 - 0.05 * 9.81, t + 1
    return np.sum(pos ** 2) + np.sum(vel), t


def test_while_loop_with_a_run_time_trip_count(backend):
    x, v = np.array([1.0, 1.5]), np.array([0.3, -0.2])
    value, trips = on(backend, _simulate)(x, v)
    want, want_trips = _simulate_python(x, v)
    assert trips == want_trips and trips > 10
    close(value, want)
    g = on(backend, tk.grad(lambda x, v: _simulate(x, v)[0], argnums=(0, 1)))(x, v)

    def unrolled(x, v):   # the same number of steps, as straight-line code
        pos, vel = x, v
        for _ in range(int(trips)):
            pos, vel = pos + 0.05 * vel, vel * 0.98 - 0.05 * 9.81
        return np.sum(pos ** 2) + np.sum(vel)

    close(g, ref(tk.grad(unrolled, argnums=(0, 1)))(x, v))
    # against finite differences (the trip count is locally constant around this point)
    fd(backend, lambda x, v: _simulate(x, v)[0], (x, v))
    out, pull = tk.vjp(lambda x: _simulate(x, v)[0], x)
    close(pull(np.float64(1.0))[0], g[0])


def test_while_loop_zero_iterations_and_errors():
    f = lambda x: tk.while_loop(lambda s: np.sum(s) > 10, lambda s: s * 2, x)  # noqa: E731
    close(tk.jit(f)(np.ones(2)), np.ones(2))
    close(tk.grad(lambda x: np.sum(f(x)))(np.ones(2)), np.ones(2))
    with pytest.raises(TypeError, match="the carry changed"):
        tk.jit(lambda x: tk.while_loop(lambda s: np.sum(s) < 3, lambda s: s.sum(), x))(np.ones(2))


def test_recompute_and_custom_gradient_inside_loops(backend):
    @tk.custom_gradient
    def softplus(x):
        e = np.exp(x)
        return np.log1p(e), lambda dy: dy * (1 - 1 / (1 + e))

    layer = tk.recompute(lambda c: np.tanh(c * W) + softplus(c) * 0.1)
    plain = lambda c: np.tanh(c * W) + np.log1p(np.exp(c)) * 0.1  # noqa: E731
    loss = lambda x, f: np.sum(tk.fori_loop(0, 3, lambda i, c: f(c), x) ** 2)  # noqa: E731
    x = np.linspace(-1, 1, 5)
    close(on(backend, tk.grad(lambda x: loss(x, layer)))(x), ref(tk.grad(lambda x: loss(x, plain)))(x))
    br = lambda x: np.sum(tk.cond(np.sum(x) > 0, layer, plain, x))  # noqa: E731
    close(on(backend, tk.grad(br))(x + 0.1), ref(tk.grad(lambda x: np.sum(plain(x))))(x + 0.1))


# ----------------------------------------------------------------------------- checkpointed scans


@pytest.mark.parametrize("n", [0, 1, 2, 7, 12])
def test_checkpointed_scan_gradients_are_identical_for_every_k(n):
    rng = np.random.default_rng(n)
    w = rng.standard_normal(4) * 0.5

    def loss(x0, xs, k):
        c, ys = tk.scan(lambda c, x: (np.tanh(c * w + x) + c * 0.1, np.sum(c * x)), x0, xs, checkpoint=k)
        return np.sum(c ** 2) + np.sum(ys)

    x0, xs = rng.standard_normal(4), rng.standard_normal((n, 4))
    want = tk.jit(tk.value_and_grad(lambda a, b: loss(a, b, None), argnums=(0, 1)), backend="interpret")(x0, xs)
    base = tk.make_ir(lambda a, b: loss(a, b, 1), mode="vjp")(x0, xs).residual_bytes
    for k in range(1, n + 2):
        got = tk.jit(tk.value_and_grad(lambda a, b: loss(a, b, k), argnums=(0, 1)), backend="interpret")(x0, xs)
        close(got, want, 1e-13)
        saved = tk.make_ir(lambda a, b: loss(a, b, k), mode="vjp")(x0, xs).residual_bytes
        assert saved - base <= (k - 1) * x0.nbytes        # at most k carry snapshots
    got = tk.value_and_grad(lambda a, b: loss(a, b, 3), argnums=(0, 1))(x0, xs)   # cpu
    close(got, want, 1e-12)


def test_checkpointed_fori_loop_saves_fewer_bytes():
    f = lambda x, k: np.sum(tk.fori_loop(0, 40, lambda i, v: np.sin(v) * 1.01 + 0.01, x, checkpoint=k))  # noqa: E731
    x = np.linspace(-1, 1, 64)
    saved = {k: tk.make_ir(lambda x: f(x, k), mode="vjp")(x).residual_bytes for k in (None, 4)}
    assert saved[4] < saved[None] / 5
    close(tk.grad(lambda x: f(x, 4))(x), tk.grad(lambda x: f(x, None))(x), 1e-12)


def test_grad_of_grad_through_a_while_loop_names_the_while_loop_and_what_works():
    """The refusal named a checkpointed tk.scan and said to use checkpoint=None, which a while loop
    already had; it names the while loop, the user's line, and forward over reverse, which works."""
    def f(x):
        return np.sum(tk.while_loop(lambda c: c[1] < 3, lambda c: (np.sin(c[0]) * 1.5, c[1] + 1),
                                    (x, np.int64(0)))[0])

    x = np.array([0.3, -0.7])
    with pytest.raises(tk.TracekernError, match=r"(?s)tk\.while_loop.*tk\.jvp\(tk\.grad\(f\).*test_control\.py:"):
        tk.grad(lambda x: np.sum(tk.grad(f)(x) ** 2))(x)
    g = lambda x: np.sum(tk.scan(lambda c, _: (np.sin(c), c), x, None, length=3, checkpoint=1)[0])  # noqa: E731
    with pytest.raises(tk.TracekernError, match=r"checkpointed tk\.scan.*checkpoint=None"):
        tk.grad(lambda x: np.sum(tk.grad(g)(x) ** 2))(x)
    # what the message offers: forward over reverse, against central differences of the gradient
    hv = tk.jvp(tk.grad(f), (x,), (np.array([1.0, 0.0]),), backend="interpret")[1]
    e = 1e-6
    fd = (tk.grad(f)(x + [e, 0.0]) - tk.grad(f)(x - [e, 0.0])) / (2 * e)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("start,trips", [(np.array([-1.0, 1.0]), 0), (np.array([0.01, 0.02]), 1),
                                         (np.array([1.0, 1.5]), None)])
def test_checkpointed_while_loop_gives_identical_gradients_for_every_k(backend, start, trips):
    v = np.array([-0.3, -0.2])
    n = int(on(backend, _simulate)(start, v)[1])
    assert trips is None or n == trips

    def loss(k):
        def f(x, v):
            def step(s):
                pos, vel, t = s
                return pos + 0.05 * vel + np.sin(vel) * 0.01, vel * 0.98 - 0.05 * 9.81, t + 1
            pos, vel, _ = tk.while_loop(lambda s: np.min(s[0]) > 0.0, step, (x, v, np.int64(0)), checkpoint=k)
            return np.sum(pos ** 2) + np.sum(vel)
        return f

    want = tk.jit(tk.grad(loss(None), argnums=(0, 1)), backend="interpret")(start, v)
    for k in sorted({1, 2, 3, max(n, 1), n + 1}):
        close(on(backend, tk.grad(loss(k), argnums=(0, 1)))(start, v), want, 1e-13)


def test_sin_beyond_the_vectorised_range_inside_a_loop_body_is_exact():
    x = np.array([0.5, 3e7, -2e9])
    f = lambda x: tk.fori_loop(0, 3, lambda i, v: np.sin(v) * 1e7 + v, x)  # noqa: E731
    want = x
    for _ in range(3):
        want = np.sin(want) * 1e7 + want
    np.testing.assert_allclose(tk.jit(f)(x), want, rtol=1e-12)
    np.testing.assert_allclose(tk.jit(f)(np.array([0.5, 0.1, 0.2])), f(np.array([0.5, 0.1, 0.2])), rtol=1e-12)


def test_print_in_a_loop_body_and_cond_inside_scan(backend, capfd):
    def f(x):
        def body(c, xi):
            tk.print("step", xi)
            return tk.cond(xi > 0, lambda v: v * 2, lambda v: v, c + xi), c
        return tk.scan(body, x, np.arange(3.0))

    capfd.readouterr()
    carry, ys = on(backend, f)(np.float64(1.0))
    assert capfd.readouterr().out == "step 0.0\nstep 1.0\nstep 2.0\n"
    assert carry == 12.0 and ys.tolist() == [1.0, 1.0, 4.0]
    assert on(backend, tk.grad(lambda x: f(x)[0]))(np.float64(1.0)) == 4.0


def test_variables_in_loop_bodies_and_nested_loops(backend):
    w = tk.Variable(np.array([0.5, 1.5]), name="w")
    x = np.array([0.3, -0.2])
    scanned = lambda x, wv: np.sum(tk.scan(lambda c, xi: (np.tanh(c * wv + xi), c), x, np.ones((4, 2)))[0])  # noqa: E731
    dx, (dw,) = on(backend, tk.grad(lambda x: scanned(x, w), wrt=[w]))(x)
    close((dx, dw), ref(tk.grad(scanned, argnums=(0, 1)))(x, w.value))
    looped = lambda x, wv: np.sum(tk.while_loop(lambda c: np.sum(c) < 5, lambda c: c * wv + 0.5, x, checkpoint=2))  # noqa: E731
    dx, (dw,) = on(backend, tk.grad(lambda x: looped(x, w), wrt=[w]))(x)
    close((dx, dw), ref(tk.grad(looped, argnums=(0, 1)))(x, w.value))

    def nested(x):
        def outer(i, c):
            inner = lambda s: tk.scan(lambda a, _: (a * 1.1 + 0.05, ()), s, None, length=2)[0]  # noqa: E731
            return tk.while_loop(lambda s: np.sum(s) < 3.0 * (i + 1), inner, c)
        return np.sum(tk.fori_loop(0, 3, outer, x) ** 2)

    close(on(backend, nested)(x), ref(nested)(x))
    close(on(backend, tk.grad(nested))(x), ref(tk.grad(nested))(x))
    fd(backend, nested, (x,))


# ----------------------------------------------------------------------------- operand layouts


def test_loop_layouts_split_and_join_operands_by_name():
    """Each loop primitive's operand layout (primitives/control.py) splits an operand list into its
    named groups and joins them back in the same order; a list that does not fit is an error."""
    from tracekern.ir import Aval, Graph, Var
    from tracekern.primitives.control import RevolveLayout, ScanLayout, WhileLayout

    scan = ScanLayout(num_consts=1, num_carry=2)
    ops = ["c", "k0", "k1", "x0", "x1"]
    parts = scan.split(ops)
    assert (parts.consts, parts.carry, parts.xs) == (["c"], ["k0", "k1"], ["x0", "x1"])
    assert scan.join(consts=parts.consts, carry=parts.carry, xs=parts.xs) == ops
    assert ScanLayout.of({"num_consts": 1, "num_carry": 2}) == scan
    with pytest.raises(TypeError, match="group carry has 1 operands, not 2"):
        scan.join(consts=["c"], carry=["k0"])
    with pytest.raises(TypeError, match="2 operands do not fit"):
        scan.split(["c", "k0"])
    assert WhileLayout(0).split(["k0", "k1"]).carry == ["k0", "k1"]

    # a checkpointed scan's backward resuming from its first sweep: snapshots, then the carry
    resumed = RevolveLayout(num_consts=1, num_carry=1, num_state=2, num_ys=1, resume=True)
    ops = ["c", "snap", "k", "x0", "x1", "s0", "s1", "cy"]
    parts = resumed.split(ops)
    assert (parts.consts, parts.snaps, parts.carry, parts.trip, parts.xs, parts.state, parts.ct_ys) == (
        ["c"], ["snap"], ["k"], [], ["x0", "x1"], ["s0", "s1"], ["cy"])
    assert resumed.join(consts=["c"], snaps=["snap"], carry=["k"], xs=["x0", "x1"], state=["s0", "s1"],
                        ct_ys=["cy"]) == ops
    # a while loop's (length=None): the trip count after the carry, no sequences, no ys
    v = Var(Aval((), np.dtype(np.float64)))
    params = dict(body=Graph((v,), (), (v,)), num_consts=0, num_carry=1, num_state=1, length=None)
    loop = RevolveLayout.of(params)
    assert loop.while_loop and not loop.resume and loop.num_ys == 0
    parts = loop.split(["k", "n", "s"])
    assert (parts.carry, parts.trip, parts.xs, parts.state, parts.ct_ys) == (["k"], ["n"], [], ["s"], [])
    with pytest.raises(TypeError, match="do not fit"):
        loop.split(["k", "n", "x", "s"])
