"""Variables, custom_gradient (with the variables= contract), recompute with policies,
grad_pass_through, reversible blocks and tk.print, on every backend, under grad, value_and_grad, vjp
and grad of grad. The seed documents' examples are tests here."""
import numpy as np
import pytest

import tracekern as tk
from tests.conftest import assert_tree_close, jit_on
from tracekern.errors import TracekernError


def on(backend, transform):
    return jit_on(backend, transform)


assert_same = assert_tree_close


# ----------------------------------------------------------------------------- Variables


def test_variable_is_an_input_assign_does_not_retrace_and_a_new_shape_does(backend):
    w = tk.Variable(np.array([1.0, 2.0]), name="w")
    f = on(backend, lambda x: np.sum(np.sin(x * w) + w ** 2))
    x = np.array([0.5, 1.5])
    assert np.isclose(f(x), np.sum(np.sin(x * [1, 2]) + np.array([1, 2]) ** 2))
    w.assign(np.array([3.0, 4.0]))
    assert np.isclose(f(x), np.sum(np.sin(x * [3, 4]) + np.array([3, 4]) ** 2))
    assert f.trace_count == 1
    w.assign(np.array([[1.0, 2.0]]))
    assert np.isclose(f(x), np.sum(np.sin(x * [1, 2]) + np.array([1, 2]) ** 2))
    assert f.trace_count == 2


def test_wrt_variables_come_after_the_argnum_gradients(backend):
    w = tk.Variable(np.array([1.0, 2.0]), name="w")
    b = tk.Variable(np.float64(0.5), name="b")
    unused = tk.Variable(np.ones(3), name="unused")

    def f(x):
        return np.sum(np.tanh(x * w + b))

    x = np.array([0.3, -0.7])
    value, (dx, (dw, db, du)) = on(backend, tk.value_and_grad(f, wrt=[w, b, unused]))(x)
    t = 1 - np.tanh(x * w.value + b.value) ** 2
    np.testing.assert_allclose(dx, t * w.value)
    np.testing.assert_allclose(dw, t * x)
    np.testing.assert_allclose(db, t.sum())
    np.testing.assert_array_equal(du, 0.0)
    assert on(backend, tk.grad(f, wrt=[unused], unconnected="none"))(x)[1] == (None,)
    # the same gradient as when the value is an explicit argument (and that one is FD-checked)
    g = lambda x, wv: np.sum(np.tanh(x * wv + 0.5))  # noqa: E731
    tk.check_grad(g, (x, w.value))
    np.testing.assert_allclose(dw, tk.grad(g, argnums=1)(x, w.value))
    (dx2, dy2), (dw2,) = on(backend, tk.grad(lambda x, y: f(x) * y, argnums=(0, 1), wrt=[w]))(x, np.float64(2.0))
    np.testing.assert_allclose(dw2, 2 * dw)


def test_variables_under_vjp_and_outside_traces():
    w = tk.Variable(np.array([1.0, 2.0]))
    out, pull = tk.vjp(lambda x: x * w, np.array([3.0, 4.0]))
    np.testing.assert_allclose(out, [3.0, 8.0])
    np.testing.assert_allclose(pull(np.ones(2))[0], [1.0, 2.0])
    np.testing.assert_allclose(w + 1, [2.0, 3.0])          # eager: behaves like its array
    np.testing.assert_allclose(np.sin(w), np.sin([1.0, 2.0]))
    assert w.shape == (2,) and w.dtype == np.float64


def test_a_variables_value_is_read_only_and_np_array_copies_it():
    """v.value (and np.asarray(v)) is a read-only view: `p = v.value; p *= 0.9` changed the Variable behind
    assign's back (TensorFlow's v.numpy() is a copy). np.array(v) is a writable copy, as NumPy's np.array."""
    v = tk.Variable(np.ones(3))
    for view in (v.value, np.asarray(v)):
        with pytest.raises(ValueError, match="read-only"):
            view *= 0.9
    copy = np.array(v)
    copy[0] = 5.0
    assert copy.flags.writeable and np.array_equal(v.value, np.ones(3))
    v.assign(v.value * 0.5)
    assert np.array_equal(v.value, np.full(3, 0.5))
    v.assign([1.0, 2.0, 3.0])                         # (a list, as np.array and TensorFlow's assign take it)
    assert np.array_equal(v.value, [1.0, 2.0, 3.0]) and tk.Variable([[1, 2]]).value.dtype == np.int64
    v.assign(np.full(3, 0.5))
    assert tk.jit(lambda x: np.sum(x * v))(np.ones(3)) == 1.5


def test_variable_misuse_is_a_clear_error():
    w = tk.Variable(np.ones(2), name="w")

    def assigns(x):
        w.assign(x)
        return x

    with pytest.raises(TypeError, match="assign.*inside a traced function"):
        tk.jit(assigns)(np.ones(2))
    with pytest.raises(TypeError, match="wrt="):
        tk.grad(lambda x: x, wrt=[np.ones(2)])
    with pytest.raises(TypeError, match="float32/float64"):
        tk.grad(lambda x: x, wrt=[tk.Variable(np.ones(2, np.int64))])


# ----------------------------------------------------------------------------- custom_gradient


@tk.custom_gradient
def log1pexp(x):
    e = np.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))

    return np.log(1 + e), grad


def test_seed_log1pexp_at_100_in_float32(backend):
    x = np.float32(100.0)
    with np.errstate(all="ignore"):
        naive = on(backend, tk.grad(lambda x: np.log(1 + np.exp(x))))(x)
    assert np.isnan(naive)
    got = on(backend, tk.grad(lambda x: log1pexp(x)))(x)
    assert got == np.float32(1.0) and got.dtype == np.float32


def test_seed_bar_two_inputs(backend):
    @tk.custom_gradient
    def bar(x, y):
        def grad(upstream):
            return upstream * y, upstream * x
        return x * y, grad

    x, y = np.float32(2.0), np.float32(3.0)
    assert on(backend, bar)(x, y) == 6.0
    assert on(backend, tk.grad(bar, argnums=(0, 1)))(x, y) == (3.0, 2.0)


def test_seed_linear_poly_with_a_weights_variable(backend):
    weights = tk.Variable(np.ones(2, np.float32), name="weights")

    @tk.custom_gradient
    def linear_poly(x):
        poly = weights[1] * x + weights[0]

        def grad_fn(dpoly, variables):
            assert len(variables) == 1 and variables[0] is weights
            grad_xs = dpoly * weights[1]
            dy_dw = dpoly * np.stack([x ** 1, x ** 0])
            return grad_xs, [np.sum(np.reshape(dy_dw, (2, -1)), axis=1)]

        return poly, grad_fn

    x = np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_array_equal(on(backend, linear_poly)(x), [2.0, 3.0, 4.0])
    (dx, (dw,)) = on(backend, tk.grad(lambda x: np.sum(linear_poly(x)), wrt=[weights]))(x)
    np.testing.assert_array_equal(dx, [1.0, 1.0, 1.0])
    np.testing.assert_array_equal(dw, [6.0, 3.0])
    out, pull = tk.vjp(linear_poly, x)
    np.testing.assert_array_equal(pull(np.ones(3, np.float32))[0], [1.0, 1.0, 1.0])


def test_custom_gradient_contract_errors():
    v = tk.Variable(np.ones(3))

    @tk.custom_gradient
    def reads_variable(x):
        return x * v, lambda dy: dy * v

    with pytest.raises(TypeError, match="must accept the keyword argument `variables`"):
        tk.grad(lambda x: np.sum(reads_variable(x)))(np.ones(3))

    @tk.custom_gradient
    def too_many(x, y):
        return x * y, lambda dy: (dy, dy, dy)

    with pytest.raises(ValueError, match=r"too_many returned 3 cotangents; expected 2"):
        tk.grad(lambda x: too_many(x, x))(np.float64(1.0))

    @tk.custom_gradient
    def wrong_var_count(x):
        return x * v, lambda dy, variables: (dy * v, [])

    with pytest.raises(ValueError, match="returned 0 Variable gradients; expected 1"):
        tk.grad(lambda x: np.sum(wrong_var_count(x)))(np.ones(3))

    @tk.custom_gradient
    def wrong_shape(x):
        return x * 2, lambda dy: np.sum(dy)

    with pytest.raises(ValueError, match=r"shape \(\); the value it is for has shape \(3,\)"):
        tk.grad(lambda x: np.sum(wrong_shape(x)))(np.ones(3))

    @tk.custom_gradient
    def not_a_pair(x):
        return x

    with pytest.raises(TypeError, match=r"must return a pair \(y, grad_fn\)"):
        tk.jit(not_a_pair)(np.ones(3))


def test_custom_gradient_takes_keyword_arguments():
    """As TensorFlow's eager custom_gradient: keyword arguments reach f and grad_fn's cotangents are for
    the positional ones. The wrapper took *args only: f(x, scale=3.0) raised "f() got an unexpected
    keyword argument 'scale'", misleading (f takes it)."""

    @tk.custom_gradient
    def scaled(x, scale=2.0):
        return x * scale, lambda dy: dy * scale * 10

    x = np.array([0.5, -1.0])
    np.testing.assert_array_equal(scaled(x, scale=3.0), x * 3)                       # outside a trace
    np.testing.assert_array_equal(tk.grad(lambda x: np.sum(scaled(x, scale=3.0)))(x), [30.0, 30.0])
    np.testing.assert_array_equal(tk.grad(lambda x, s: np.sum(scaled(x, scale=s)))(x, np.float64(4.0)), [40.0, 40.0])
    # a differentiated keyword argument cannot get a gradient from grad_fn: an error, not a silent zero
    with pytest.raises(TracekernError, match=r"scaled.*not one of its positional arguments.*keyword argument"):
        tk.grad(lambda x: np.sum(scaled(x, scale=x)))(x)


def test_custom_gradient_grad_fn_may_read_values_f_does_not():
    """A Variable or an enclosing value that only grad_fn reads does not feed f's outputs: it gets no
    gradient from this function (as in TensorFlow). It raised "uses a traced value from an enclosing
    function", without the user's line."""
    b = tk.Variable(np.float64(5.0), name="b")

    @tk.custom_gradient
    def f(x):
        return x * 1.0, lambda dy: dy * b

    x = np.array([0.5, 1.5])
    dx, (db,) = tk.grad(lambda x: np.sum(f(x)), wrt=[b])(x)
    np.testing.assert_array_equal(dx, [5.0, 5.0])
    assert db == 0.0

    def outer(x):
        c = x * 2

        @tk.custom_gradient
        def h(t):
            return t * 1.0, lambda dy: dy * c

        return np.sum(h(x))

    np.testing.assert_allclose(tk.grad(outer)(x), 2 * x)
    np.testing.assert_allclose(tk.jvp(outer, (x,), (np.ones(2),))[1], np.sum(2 * x))


def test_custom_gradient_closing_over_a_differentiated_value_is_an_error():
    def f(x):
        @tk.custom_gradient
        def g(y):
            return y * x, lambda dy: dy * x
        return np.sum(g(np.ones(3)))

    with pytest.raises(TracekernError, match="Pass that value to the function as a positional argument"):
        tk.grad(f)(np.float64(2.0))


def test_custom_gradient_multiple_outputs_and_grad_of_grad(backend):
    @tk.custom_gradient
    def polar(r, t):
        x, y = r * np.cos(t), r * np.sin(t)

        def grad(dx, dy):
            return dx * np.cos(t) + dy * np.sin(t), -dx * r * np.sin(t) + dy * r * np.cos(t)

        return (x, y), grad

    def loss(r, t):
        x, y = polar(r, t)
        return np.sum(x * x * y)

    def plain(r, t):
        x, y = r * np.cos(t), r * np.sin(t)
        return np.sum(x * x * y)

    r, t = np.array([1.0, 2.0]), np.array([0.3, -0.4])
    assert_same(on(backend, tk.grad(loss, argnums=(0, 1)))(r, t), on("interpret", tk.grad(plain, argnums=(0, 1)))(r, t))
    # grad of grad goes through grad_fn's ops (and through the residuals they use)
    gg = on(backend, tk.grad(lambda r, t: np.sum(tk.grad(loss)(r, t))))(r, t)
    np.testing.assert_allclose(gg, on("interpret", tk.grad(lambda r, t: np.sum(tk.grad(plain)(r, t))))(r, t), rtol=1e-10)


def test_nested_custom_gradients(backend):
    @tk.custom_gradient
    def sigmoid(x):
        s = 1 / (1 + np.exp(-x))
        return s, lambda ds: ds * s * (1 - s)

    @tk.custom_gradient
    def softplus(x):
        return np.log1p(np.exp(x)), lambda dy: dy * sigmoid(x)   # grad_fn uses a custom gradient

    x = np.linspace(-2, 2, 5)
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(on(backend, tk.grad(lambda x: np.sum(softplus(x))))(x), s, rtol=1e-12)
    second = on(backend, tk.grad(lambda x: np.sum(tk.grad(lambda v: np.sum(softplus(v)))(x))))(x)
    np.testing.assert_allclose(second, s * (1 - s), rtol=1e-12)


# ----------------------------------------------------------------------------- recompute


def _mlp(params, x, layer):
    h = x
    for w1, w2 in params:
        h = layer(h, w1, w2)
    return np.mean(h ** 2)


def _layer(h, w1, w2):
    return np.tanh(np.tanh(h @ w1) @ w2) + h


def _params(rng, n=4, width=16):
    return [(rng.standard_normal((width, width)) / 4, rng.standard_normal((width, width)) / 4) for _ in range(n)]


@pytest.mark.parametrize("policy", ["nothing", "dots", "tanh"])
def test_recompute_gives_the_same_values_and_gradients(backend, policy):
    rng = np.random.default_rng(0)
    params, x = _params(rng), rng.standard_normal((8, 16))
    pol = (lambda eqn: eqn.primitive.name == "tanh") if policy == "tanh" else policy
    layer = tk.recompute(_layer, policy=pol)
    want = tk.jit(tk.value_and_grad(lambda p, x: _mlp(p, x, _layer)), backend="interpret")(params, x)
    got = on(backend, tk.value_and_grad(lambda p, x: _mlp(p, x, layer)))(params, x)
    assert_same(got, want, 1e-12)
    if backend == "cpu":
        tk.check_grad(lambda p, x: _mlp(p, x, layer), (params[:2], x))


def test_recompute_cuts_the_residual_bytes_of_vjp_and_the_dots_policy_keeps_matmul_outputs():
    rng = np.random.default_rng(0)
    params, x = _params(rng), rng.standard_normal((64, 16))

    def residual(layer):
        split = tk.make_ir(lambda p, x: _mlp(p, x, layer), mode="vjp")(params, x)
        lowered = tk.jit(lambda p, x: _mlp(p, x, layer)).lower(params, x)
        assert lowered.memory.residual_bytes == split.residual_bytes
        return split.residual_bytes

    plain = residual(_layer)
    nothing = residual(tk.recompute(_layer))
    dots = residual(tk.recompute(_layer, policy="dots"))
    weights = sum(w.nbytes for pair in params for w in pair)
    assert nothing == 5 * x.nbytes + weights  # each layer's input, the output for the loss, the weights
    assert nothing < plain
    assert dots == nothing + 8 * x.nbytes     # plus the 2 matmul outputs of each of the 4 layers
    # values and gradients through the split (two compiled calls) equal the joint ones
    out, pull = tk.vjp(lambda p, x: _mlp(p, x, tk.recompute(_layer)), params, x)
    assert_same(pull(np.float64(1.0))[0], tk.grad(lambda p, x: _mlp(p, x, _layer))(params, x), 1e-12)


def test_the_backward_listing_marks_saved_and_recomputed_values():
    layer = tk.recompute(lambda h: np.sin(np.tanh(h) * 2))
    text = str(tk.make_ir(lambda x: np.sum(layer(layer(x))), mode="vjp")(np.ones(4)))
    backward = text.split("backward")[1]
    assert "(saved)" in backward and "(recomputed) = tanh" in backward and "remat_barrier" in backward


def test_recompute_aliases_nesting_and_grad_of_grad(backend):
    assert tk.recompute_grad is tk.recompute and tk.checkpoint is tk.recompute
    inner = tk.checkpoint(lambda h: np.sin(h) * 2)
    outer = tk.recompute_grad(lambda h: inner(np.tanh(h)) + h)
    plain = lambda h: np.sin(np.tanh(h)) * 2 + h  # noqa: E731
    x = np.linspace(-1, 1, 6)
    assert_same(on(backend, tk.grad(lambda x: np.sum(outer(x) ** 2)))(x), tk.grad(lambda x: np.sum(plain(x) ** 2))(x))
    gg = on(backend, tk.grad(lambda x: np.sum(tk.grad(lambda v: np.sum(outer(v) ** 3))(x))))(x)
    np.testing.assert_allclose(gg, tk.grad(lambda x: np.sum(tk.grad(lambda v: np.sum(plain(v) ** 3))(x)))(x), rtol=1e-10)
    # recompute around a custom gradient, and a custom gradient whose f recomputes
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(on(backend, tk.grad(lambda x: np.sum(tk.recompute(log1pexp)(x))))(x), s, rtol=1e-12)


def test_seed_recompute_prints_again_in_the_backward_pass(backend, capfd):
    y = tk.Variable(np.float64(1.0), name="y")

    def my_function(x):
        tk.print("running")
        return x * y

    def loss(fn):
        def run(r):
            for _ in range(4):
                r = fn(r)
            return r
        return run

    g = on(backend, tk.grad(loss(tk.recompute(my_function)), wrt=[y]))
    capfd.readouterr()
    assert g(np.float64(1.0)) == (1.0, (4.0,))
    assert capfd.readouterr().out.split("\n").count("running") == 8   # 4 forward, 4 recomputed
    g2 = on(backend, tk.grad(loss(my_function), wrt=[y]))
    assert g2(np.float64(1.0)) == (1.0, (4.0,))
    assert capfd.readouterr().out.split("\n").count("running") == 4
    out, pull = tk.vjp(loss(tk.recompute(my_function)), np.float64(1.0))
    assert capfd.readouterr().out.count("running") == 4    # the forward call
    pull(np.float64(1.0))
    assert capfd.readouterr().out.count("running") == 4    # the backward call


# ----------------------------------------------------------------------------- print


def test_print_runs_at_execution_in_program_order(backend, capfd):
    def f(x):
        tk.print("first", x, sep=" | ")
        y = x * 2
        tk.print("second", y.sum())
        return y

    fn = on(backend, f)
    x = np.array([1.0, 2.0])
    capfd.readouterr()
    fn(x)
    fn(x)
    assert capfd.readouterr().out == "first | [1. 2.]\nsecond 6.0\n" * 2
    tk.print("eager", np.array([1, 2]))
    assert capfd.readouterr().out == "eager [1 2]\n"


# ----------------------------------------------------------------------------- grad_pass_through


def test_grad_pass_through_straight_through_rounding(backend):
    st_round = tk.grad_pass_through(np.round)
    x = np.array([0.4, 1.6, -2.2])
    np.testing.assert_array_equal(on(backend, st_round)(x), np.round(x))
    np.testing.assert_array_equal(on(backend, tk.grad(lambda x: np.sum(st_round(x) * 3)))(x), [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(on(backend, tk.grad(lambda x: np.sum(np.round(x) * 3)))(x), 0.0)
    np.testing.assert_allclose(on(backend, tk.grad(lambda x: np.sum(st_round(x) * x)))(x), np.round(x) + x)


def test_grad_pass_through_with_a_variable():
    v = tk.Variable(np.float64(3.0), name="v")
    f = tk.grad_pass_through(lambda z: np.round(z * v))
    g = tk.grad(lambda z: f(z), wrt=[v])(np.float64(2.1))
    assert g == (1.0, (0.0,))   # the identity for z; no gradient for the Variable (as in the seed)


def test_grad_pass_through_of_pytrees_and_keyword_arguments():
    """Pytrees are flattened, as TensorFlow flattens them: each output leaf's cotangent goes to the
    input leaf in its position. A dict in and out raised "2 outputs for 1 inputs"; keyword arguments
    raised f's "unexpected keyword argument"."""
    x = np.array([0.3, -0.7, 1.6])
    st = tk.grad_pass_through(lambda p: {"a": np.round(p["a"]), "b": np.floor(p["b"])})
    g = tk.grad(lambda p: np.sum(st(p)["a"] * 3) + np.sum(st(p)["b"]))({"b": x, "a": 2 * x})
    assert sorted(g) == ["a", "b"]
    np.testing.assert_array_equal(g["a"], [3.0, 3.0, 3.0])
    np.testing.assert_array_equal(g["b"], [1.0, 1.0, 1.0])
    rounded = tk.grad_pass_through(lambda x, decimals=0: np.round(x, decimals))
    np.testing.assert_array_equal(tk.jit(lambda x: rounded(x, decimals=1), backend="interpret")(x), np.round(x, 1))
    np.testing.assert_array_equal(tk.grad(lambda x: np.sum(rounded(x, decimals=1) * x))(x), np.round(x, 1) + x)
    with pytest.raises(ValueError, match=r"grad_pass_through\(sum\): output 0 has shape \(\) but input 0 has "
                                         r"shape \(3,\)"):
        tk.grad(lambda x: tk.grad_pass_through(np.sum)(x))(x)


# ----------------------------------------------------------------------------- reversible


def _blocks(rng, n, width=8):
    ws = [rng.standard_normal((width, width)) / 3 for _ in range(2 * n)]
    blocks = [tk.reversible(lambda v, w=ws[2 * k]: np.tanh(v @ w), lambda v, w=ws[2 * k + 1]: np.sin(v @ w))
              for k in range(n)]

    def net(x1, x2):
        for b in blocks:
            x1, x2 = b(x1, x2)
        return np.sum(x1 * x2)

    def plain(x1, x2):
        for k in range(n):
            x1 = x1 + np.tanh(x2 @ ws[2 * k])
            x2 = x2 + np.sin(x1 @ ws[2 * k + 1])
        return np.sum(x1 * x2)

    return net, plain


def test_reversible_blocks_match_the_plain_network(backend):
    rng = np.random.default_rng(1)
    net, plain = _blocks(rng, 4)
    x1, x2 = rng.standard_normal((4, 8)), rng.standard_normal((4, 8))
    assert_same(on(backend, tk.value_and_grad(net, argnums=(0, 1)))(x1, x2),
                tk.jit(tk.value_and_grad(plain, argnums=(0, 1)), backend="interpret")(x1, x2), 1e-9)
    if backend == "cpu":   # (check_grad compiles on the default backend: once is enough)
        tk.check_grad(net, (x1, x2), order=2)
    gg = on(backend, tk.grad(lambda a, b: np.sum(tk.grad(net)(a, b) ** 2)))(x1, x2)
    want = on("interpret", tk.grad(lambda a, b: np.sum(tk.grad(plain)(a, b) ** 2)))(x1, x2)
    np.testing.assert_allclose(gg, want, rtol=1e-9, atol=1e-12)


def test_a_stack_of_reversible_blocks_saves_a_constant_number_of_activations():
    rng = np.random.default_rng(2)
    x1, x2 = rng.standard_normal((16, 8)), rng.standard_normal((16, 8))
    saved = {}
    for n in (1, 4, 12):
        net, plain = _blocks(rng, n)
        saved[n] = tk.make_ir(net, mode="vjp")(x1, x2).residual_bytes, tk.make_ir(plain, mode="vjp")(x1, x2).residual_bytes
    assert saved[1][0] == saved[4][0] == saved[12][0] == x1.nbytes + x2.nbytes   # the last outputs only
    assert saved[12][1] > saved[4][1] > saved[1][1]                              # the plain net grows with n


def test_reversible_shape_errors():
    block = tk.reversible(lambda v: np.sum(v), np.sin)
    with pytest.raises(TypeError, match="must return the shape and dtype of x1"):
        tk.jit(block)(np.ones(3), np.ones(3))


def _tanh_mlp(ws, x, layer):
    h = x
    for w in ws:
        h = layer(h, w)
    return np.mean(h ** 2)


def _count(graph, name):
    return sum(e.primitive.name == name for e in graph.eqns)


def test_recompute_reuses_region_outputs_the_backward_keeps_anyway():
    # tanh's derivative needs only its output, which is the next region's (kept) input, and the
    # loss's derivative keeps the last one: recompute per layer re-runs no matmul and "dots" no tanh
    rng = np.random.default_rng(1)
    ws = [rng.standard_normal((8, 8)) / 3 for _ in range(4)]
    x = rng.standard_normal((5, 8))
    plain = lambda h, w: np.tanh(h @ w)  # noqa: E731
    splits = {name: tk.make_ir(lambda ws, x, L=layer: _tanh_mlp(ws, x, L), mode="vjp")(ws, x)
              for name, layer in [("none", plain), ("nothing", tk.recompute(plain)),
                                  ("dots", tk.recompute(plain, policy="dots"))]}
    assert _count(splits["none"].backward, "matmul") == 8               # dh and dw of each layer
    assert _count(splits["nothing"].backward, "matmul") == 8
    assert _count(splits["dots"].backward, "matmul") == 8
    assert _count(splits["nothing"].backward, "tanh") == _count(splits["dots"].backward, "tanh") == 0
    want = tk.jit(tk.value_and_grad(lambda ws, x: _tanh_mlp(ws, x, plain)), backend="interpret")(ws, x)
    for layer in (tk.recompute(plain), tk.recompute(plain, policy="dots")):
        for backend in ("interpret", "cpu"):
            got = tk.jit(tk.value_and_grad(lambda ws, x, L=layer: _tanh_mlp(ws, x, L)), backend=backend)(ws, x)
            assert_same(got, want, 1e-12)
    # a region whose output nothing else keeps is recomputed in full
    single = tk.make_ir(lambda w, x: np.sum(tk.recompute(plain)(x, w)), mode="vjp")(ws[0], x)
    assert _count(single.backward, "matmul") == 3 and _count(single.backward, "tanh") == 1


def test_a_matmul_reads_a_recomputed_operand_in_place():
    from tracekern.backends import fusion
    from tracekern.backends.fusion import LoopKernel

    rng = np.random.default_rng(2)
    ws = [rng.standard_normal((8, 8)) for _ in range(3)]
    x = rng.standard_normal((5, 8))
    layer = tk.recompute(lambda h, w: np.tanh(h @ w))
    ir = tk.jit(tk.value_and_grad(lambda ws, x: _tanh_mlp(ws, x, layer))).lower(ws, x).ir
    barriers = {e.outputs[0] for e in ir.eqns if e.primitive.name == "remat_barrier"}
    assert barriers
    stored = {v for k in fusion.plan(ir).kernels if isinstance(k, LoopKernel) for v in k.stores}
    assert not stored & barriers          # no copy of a weight or an activation behind a barrier


def test_a_recompute_region_of_cheap_ops_saves_no_more_than_no_annotation():
    x = np.linspace(-1, 1, 64)
    layers = [lambda h: np.tanh(h), lambda h: np.sin(h) * 0.9 + 0.1, lambda h: np.exp(-h * h)] * 3

    def chain(x, wrap):
        for f in layers:
            x = wrap(f)(x)
        return np.sum(x)
    plain = tk.make_ir(lambda x: chain(x, lambda f: f), mode="vjp")(x)
    recomputed = tk.make_ir(lambda x: chain(x, tk.recompute), mode="vjp")(x)
    assert plain.residual_bytes == recomputed.residual_bytes == x.nbytes   # x alone: the rest is remade
    assert_same(tk.grad(lambda x: chain(x, tk.recompute))(x), tk.grad(lambda x: chain(x, lambda f: f))(x), 1e-12)
