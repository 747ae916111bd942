"""Reverse mode: grad / value_and_grad / vjp, argnums, pytrees, unconnected inputs,
stop_gradient, grad of grad against closed forms, composition with jit, check_grad itself."""
import numpy as np
import pytest

import tracekern as tk
import tracekern.numpy as tnp
from tests.conftest import jit_on
from tracekern.demo import mlp_loss


def mlp_setup(dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    sizes = [5, 8, 8, 2]
    params = [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(dtype), (rng.standard_normal(b) * 0.1).astype(dtype))
              for a, b in zip(sizes[:-1], sizes[1:])]
    return params, rng.standard_normal((7, 5)).astype(dtype), rng.standard_normal((7, 2)).astype(dtype)


def test_mlp_gradient_matches_finite_differences(backend):
    params, x, y = mlp_setup()
    tk.check_grad(mlp_loss, (params, x, y), argnums=(0,))
    value, grads = jit_on(backend, tk.value_and_grad(mlp_loss))(params, x, y)
    assert value == pytest.approx(mlp_loss(params, x, y), rel=1e-13)
    assert isinstance(grads, list) and all(isinstance(g, tuple) and len(g) == 2 for g in grads)
    for (w, b), (gw, gb) in zip(params, grads):
        assert gw.shape == w.shape and gb.shape == b.shape


def test_mlp_float32_gradients_stay_float32_and_match_float64():
    params, x, y = mlp_setup(np.float32)
    grads32 = tk.grad(mlp_loss)(params, x, y)
    p64 = [(w.astype(np.float64), b.astype(np.float64)) for w, b in params]
    grads64 = tk.grad(mlp_loss)(p64, x.astype(np.float64), y.astype(np.float64))
    for (gw, gb), (hw, hb) in zip(grads32, grads64):
        assert gw.dtype == np.float32 and gb.dtype == np.float32
        np.testing.assert_allclose(gw, hw, rtol=2e-4, atol=1e-6)
        np.testing.assert_allclose(gb, hb, rtol=2e-4, atol=1e-6)


def test_argnums_tuple_and_int():
    f = lambda x, y, z: np.sum(x * y ** 2 + z)  # noqa: E731
    x, y, z = np.array([1.0, 2.0]), np.array([3.0, 4.0]), np.array([5.0, 6.0])
    gx = tk.grad(f)(x, y, z)
    np.testing.assert_allclose(gx, y ** 2)
    gy, gx2 = tk.grad(f, argnums=(1, 0))(x, y, z)
    np.testing.assert_allclose(gy, 2 * x * y)
    np.testing.assert_allclose(gx2, y ** 2)
    (gz,) = tk.grad(f, argnums=(-1,))(x, y, z)
    np.testing.assert_allclose(gz, [1.0, 1.0])


def test_unconnected_zero_and_none():
    f = lambda x, y: np.sum(x * 2)  # noqa: E731
    x, y = np.ones(2), np.ones((3, 3), np.float32)
    gx, gy = tk.grad(f, argnums=(0, 1))(x, y)
    assert gy.shape == (3, 3) and gy.dtype == np.float32 and not gy.any()
    gx, gy = tk.grad(f, argnums=(0, 1), unconnected="none")(x, y)
    assert gy is None and gx.tolist() == [2, 2]
    with pytest.raises(ValueError, match="unconnected"):
        tk.grad(f, unconnected="zeros")


def test_stop_gradient():
    f = lambda x: np.sum(x * tk.stop_gradient(x))  # noqa: E731
    x = np.array([1.0, -3.0])
    np.testing.assert_allclose(tk.grad(f)(x), x)
    assert tk.jit(f)(x) == 10.0
    # everything behind a stop_gradient is unconnected
    assert tk.grad(lambda x: tk.stop_gradient(x * 2).sum(), unconnected="none")(x) is None


def test_stop_gradient_of_a_python_number_stays_weak():
    """stop_gradient(2.0) made a float64 constant, so float32 * stop_gradient(2.0) became float64 (JAX and
    TensorFlow: float32); a Python-number argument through it lost its weak type too."""
    x = np.ones(3, np.float32)
    assert tk.jit(lambda x: x * tk.stop_gradient(2.0), backend="interpret")(x).dtype == np.float32
    assert tk.jit(lambda x, s: x * tk.stop_gradient(s), backend="interpret")(x, 2.0).dtype == np.float32
    np.testing.assert_array_equal(tk.grad(lambda x: np.sum(x * tk.stop_gradient(2.0)))(x), [2.0, 2.0, 2.0])
    assert tk.stop_gradient(2.0) == 2.0


def test_stop_gradient_of_a_pytree():
    """jax.lax.stop_gradient takes a pytree; tk.stop_gradient raised TypeError on a tuple."""
    x = np.array([0.3, -0.7])

    def f(x):
        a, d, none = tk.stop_gradient((x ** 2, {"b": x * 3}, None))
        assert none is None
        return np.sum(x * a + x * d["b"] + x ** 2)

    np.testing.assert_allclose(tk.jit(tk.grad(f), backend="interpret")(x), x ** 2 + 3 * x + 2 * x)
    np.testing.assert_allclose(tk.grad(f)(x), x ** 2 + 3 * x + 2 * x)      # cpu
    out = tk.stop_gradient({"a": x, "b": [x, 2.0]})                         # outside a trace
    assert list(out) == ["a", "b"] and len(out["b"]) == 2
    np.testing.assert_array_equal(out["b"][0], x)


@pytest.mark.parametrize("fn,second,point", [
    (np.sin, lambda x: -np.sin(x), 0.7),
    (lambda x: x ** 3, lambda x: 6 * x, 1.3),
    (np.tanh, lambda x: -2 * np.tanh(x) * (1 - np.tanh(x) ** 2), 0.4),
    (np.exp, np.exp, -0.5),
    (lambda x: np.log(x), lambda x: -1 / x ** 2, 2.0),
    (tnp.sigmoid, lambda x: (s := 1 / (1 + np.exp(-x))) * (1 - s) * (1 - 2 * s), 0.3),
])
def test_grad_of_grad_closed_forms(fn, second, point, backend):
    d2 = jit_on(backend, tk.grad(tk.grad(fn)))
    assert d2(point) == pytest.approx(second(point), rel=1e-12)
    assert tk.grad(tk.grad(fn))(np.float64(point)) == pytest.approx(second(point), rel=1e-12)


def test_third_derivative():
    d3 = tk.grad(tk.grad(tk.grad(lambda x: x ** 4)))
    assert d3(2.0) == pytest.approx(24 * 2.0)
    assert tk.grad(tk.grad(tk.grad(np.sin)))(0.3) == pytest.approx(-np.cos(0.3))


def test_check_grad_second_order():
    params, x, y = mlp_setup()
    tk.check_grad(lambda x: mlp_loss(params, x, y), (x,), order=2)


def test_hessian_vector_product_via_grad_of_grad():
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    f = lambda x: 0.5 * x @ a @ x + np.sum(np.sin(x))  # noqa: E731
    v = np.array([0.3, -0.7])
    hvp = tk.grad(lambda x: tk.grad(f)(x) @ v)
    x = np.array([0.1, 0.2])
    np.testing.assert_allclose(hvp(x), a @ v - np.sin(x) * v, rtol=1e-13)


def test_closure_over_outer_tracer_in_nested_grad():
    # d/dx [ d/dy (x * y^2) at y = x ] = d/dx [2 x y]|_{y=x} = d/dx 2x^2 = 4x
    def outer(x):
        inner = tk.grad(lambda y: x * y ** 2)
        return inner(x)

    assert tk.grad(outer)(1.5) == pytest.approx(6.0)
    assert tk.jit(tk.grad(outer))(2.0) == pytest.approx(8.0)


def test_grad_inside_jit_and_jit_inside_grad():
    f = tk.jit(lambda x: np.sum(np.sin(x) * x))
    x = np.array([0.5, 1.5])
    expected = np.cos(x) * x + np.sin(x)
    np.testing.assert_allclose(tk.grad(f)(x), expected)
    np.testing.assert_allclose(tk.jit(tk.grad(f))(x), expected)
    np.testing.assert_allclose(tk.jit(tk.grad(lambda x: f(x)))(x), expected)


def test_value_and_grad_and_has_aux():
    f = lambda x: (np.sum(x ** 2), {"mean": x.mean()})  # noqa: E731
    x = np.array([1.0, 2.0, 3.0])
    (value, aux), g = tk.value_and_grad(f, has_aux=True)(x)
    assert value == 14.0 and aux["mean"] == 2.0
    np.testing.assert_allclose(g, 2 * x)
    g2, aux2 = tk.grad(f, has_aux=True)(x)
    np.testing.assert_allclose(g2, 2 * x)
    with pytest.raises(TypeError, match="has_aux"):
        tk.grad(lambda x: x.sum(), has_aux=True)(x)


def test_vjp_pullback_pytrees_and_cotangent_seeding(backend):
    def f(p, x):
        return {"a": np.tanh(x @ p["w"]), "b": p["w"].sum() * 2}

    rng = np.random.default_rng(1)
    p = {"w": rng.standard_normal((3, 2))}
    x = rng.standard_normal((4, 3))
    out, pullback = tk.vjp(f, p, x)
    ct = {"a": rng.standard_normal((4, 2)), "b": 0.5}
    gp, gx = pullback(ct)
    # reference: grad of <f, ct>
    ref = tk.grad(lambda p, x: np.sum(f(p, x)["a"] * ct["a"]) + f(p, x)["b"] * ct["b"], argnums=(0, 1))(p, x)
    np.testing.assert_allclose(gp["w"], ref[0]["w"], rtol=1e-13)
    np.testing.assert_allclose(gx, ref[1], rtol=1e-13)
    np.testing.assert_allclose(out["a"], np.tanh(x @ p["w"]))
    # the pullback can be called again with another cotangent
    gp2, _ = pullback({"a": np.zeros((4, 2)), "b": 1.0})
    np.testing.assert_allclose(gp2["w"], 2 * np.ones((3, 2)))


def test_vjp_bad_cotangents():
    out, pullback = tk.vjp(lambda x: x * 2, np.ones(3))
    with pytest.raises(ValueError, match="f64\\[4\\]"):
        pullback(np.ones(4))
    with pytest.raises(ValueError, match="structure"):
        pullback((np.ones(3),))


def test_vjp_integer_arguments_get_none():
    out, pullback = tk.vjp(lambda x, n: x * n, np.ones(3), np.arange(3))
    gx, gn = pullback(np.ones(3))
    np.testing.assert_allclose(gx, [0, 1, 2])
    assert gn is None


def test_vjp_cotangent_of_an_integer_output_may_be_none():
    """An integer or bool output is a constant of differentiation: its cotangent may be None, as an
    integer primal's tangent in tk.jvp (it raised "the cotangent has structure (*, None)", with no hint)."""
    x = np.array([1.0, 3.0, 2.0])
    f = lambda a: {"i": np.argmax(a), "f": np.sin(a), "b": a > 0}   # noqa: E731
    _, pullback = tk.vjp(f, x, backend="interpret")
    (g,) = pullback({"i": None, "f": x, "b": None})
    np.testing.assert_allclose(g, np.cos(x) * x)
    np.testing.assert_array_equal(pullback({"i": np.int64(0), "f": x, "b": np.zeros(3, bool)})[0], g)
    with pytest.raises(ValueError, match="None for an integer or bool output"):
        pullback({"i": None, "f": None, "b": None})        # a float output's cotangent is not optional
    inside = lambda a: tk.vjp(f, a)[1]({"i": None, "f": a, "b": None})[0]   # noqa: E731
    np.testing.assert_allclose(tk.jit(inside, backend="interpret")(x), g)


def test_vjp_splits_forward_and_backward():
    def f(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
    split = tk.make_ir(f, mode="vjp")(w, x)
    assert isinstance(split, tk.SplitVJP)
    fwd_prims = split.forward.primitive_counts
    # the forward does exactly the work of the plain forward: no transposes, no derivative terms
    assert fwd_prims == tk.make_ir(f)(w, x).primitive_counts
    assert "saved" in str(split) and "cotangent" in str(split.backward)
    assert split.residual_bytes == sum(v.aval.nbytes for v in split.residuals) > 0
    # the backward never recomputes a matmul of the forward
    assert split.backward.primitive_counts["matmul"] == 2


def test_vjp_inside_jit():
    def f(x):
        y, pull = tk.vjp(np.sin, x)
        (g,) = pull(np.ones_like(x))
        return y, g

    x = np.array([0.1, 0.2])
    y, g = tk.jit(f)(x)
    np.testing.assert_allclose(y, np.sin(x))
    np.testing.assert_allclose(g, np.cos(x))


def test_check_grad_detects_a_wrong_rule(monkeypatch):
    from tracekern.primitives import ops, tanh

    good = tanh.grads
    monkeypatch.setattr(tanh, "grads", (lambda ct, x, out: ops.mul(ct, ops.add(1, ops.mul(out, out))),))
    with pytest.raises(tk.GradientCheckError, match="disagree"):
        tk.check_grad(lambda x: np.tanh(x).sum(), (np.array([0.3, -0.8]),))
    monkeypatch.setattr(tanh, "grads", good)
    tk.check_grad(lambda x: np.tanh(x).sum(), (np.array([0.3, -0.8]),))


def test_check_grad_projects_non_scalar_outputs():
    tk.check_grad(lambda x: np.sin(x) * x, (np.linspace(-1, 1, 5),))


def test_wrong_vjp_rule_shape_is_an_ir_error(monkeypatch):
    from tracekern.primitives import exp, ops

    monkeypatch.setattr(exp, "grads", (lambda ct, x, out: ops.reduce_sum(ops.mul(ct, out), axes=(0,)),))
    with pytest.raises(tk.IRError, match="VJP rule of exp"):
        tk.grad(lambda x: np.exp(x).sum())(np.ones(3))


# ----------------------------------------------------------------------------- reverse mode as a graph transform


def test_vjp_is_a_graph_to_graph_function_that_never_touches_the_ambient_trace():
    from tracekern import autodiff
    from tracekern.trace import new_builder

    g = tk.make_ir(lambda x, y: (np.sum(np.sin(x) * y), x * 2))(np.ones(3), np.ones(3))
    with new_builder() as ambient:
        joint = autodiff.vjp(g, [True, False], seeded=[True, False])
    assert ambient.eqns == []
    tk.verify(joint.graph)
    assert joint.num_outputs == 2 and joint.num_primals == 2 and joint.has_grad == (True, False)
    assert [v.aval.shape for v in joint.graph.inputs] == [(3,), (3,), ()]     # primals, then the seed's cotangent
    assert [v.aval.shape for v in joint.graph.outputs] == [(), (3,), (3,)]    # outputs, then dx
    forward = [e.primitive.name for e in joint.graph.eqns[:joint.num_forward]]
    assert forward == [e.primitive.name for e in g.eqns]
    x, y = np.array([0.1, 0.2, 0.3]), np.array([1.0, -2.0, 0.5])
    from tracekern.backends.interpret import compile_graph

    value, twice, dx = compile_graph(joint.graph)([x, y, np.float64(1.0)])
    np.testing.assert_allclose(dx, np.cos(x) * y)
    assert value == np.sum(np.sin(x) * y)
    zeros = autodiff.vjp(g, [True, True], seeded=[True, False], zeros=True)
    assert zeros.has_grad == (True, True) and len(zeros.graph.outputs) == 4


def test_every_higher_order_primitive_has_its_rule_in_autodiff():
    from tracekern import autodiff
    from tracekern.primitives import REGISTRY, Primitive

    higher = {p for p in REGISTRY.values() if any(n in p.name for n in ("call", "cond", "scan", "while"))}
    assert higher == set(autodiff.RULES)
    # every other primitive with operands that cotangents flow through carries its own VJP rule
    first_order = [p for p in REGISTRY.values() if p not in autodiff.RULES and p.differentiable()
                   and p.fusion not in ("const", "fill")]
    assert [p.name for p in first_order if type(p).vjp is Primitive.vjp] == []
