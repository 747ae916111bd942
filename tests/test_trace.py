"""Tracing: pytrees, constants and dtype promotion, static args, caching, Tracer methods."""
import numpy as np
import pytest

import tracekern as tk
from tests.conftest import jit_on


def test_jit_matches_numpy_and_traces_once_per_signature(backend):
    calls = []

    def f(w, x):
        calls.append(1)
        h = np.tanh(x @ w)
        return np.sum(h * h)

    jf = jit_on(backend, f)
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((4, 3)), rng.standard_normal((5, 4))
    assert jf(w, x) == pytest.approx(f(w, x), rel=1e-14)
    calls.clear()
    for _ in range(3):
        jf(w + 1, x)
    assert jf.trace_count == 1 and not calls
    jf(w.astype(np.float32), x.astype(np.float32))  # new dtypes: traced once more
    jf(w[:3], x[:, :3])  # new shapes
    assert jf.trace_count == 3


def test_jit_decorator_forms():
    @tk.jit
    def a(x):
        return x * 2

    @tk.jit(backend="interpret")
    def b(x):
        return x * 3

    assert a(np.ones(2)).tolist() == [2, 2] and b(np.ones(2)).tolist() == [3, 3]
    assert a.__name__ == "a" and "tracekern" in repr(a)


def test_pytree_arguments_and_results():
    def f(params, batch):
        w, b = params["w"], params["b"]
        y = batch[0] @ w + b
        return {"y": y, "stats": (y.sum(), [y.max()])}

    params = {"w": np.ones((3, 2)), "b": np.array([0.5, -0.5])}
    batch = (np.arange(6.0).reshape(2, 3), None)
    got = tk.jit(f)(params, batch)
    expected = f(params, batch)
    assert set(got) == {"y", "stats"}
    np.testing.assert_allclose(got["y"], expected["y"])
    assert isinstance(got["stats"], tuple) and isinstance(got["stats"][1], list)
    assert got["stats"][0] == expected["stats"][0] and got["stats"][1][0] == expected["stats"][1][0]


def test_namedtuple_pytree():
    from collections import namedtuple

    P = namedtuple("P", "a b")
    out = tk.jit(lambda p: P(p.b, p.a * 2))(P(np.ones(2), np.zeros(3)))
    assert isinstance(out, P) and out.a.shape == (3,) and out.b.tolist() == [2, 2]


def test_python_scalars_do_not_promote_float32():
    x = np.ones(3, np.float32)
    f = tk.jit(lambda x: (x * 2.5 + 1) / 3.0 - x ** 2)
    assert f(x).dtype == np.float32
    assert tk.make_ir(lambda x: x * 2.5)(x).outputs[0].dtype == np.float32
    # a NumPy float64 scalar is not weak: NumPy promotes, so do we
    assert tk.jit(lambda x: x * np.float64(2.5))(x).dtype == np.float64
    # float32 and float64 arrays promote to float64 as in NumPy
    assert tk.jit(lambda x, y: x + y)(x, np.ones(3)).dtype == np.float64


def test_python_scalar_arguments_are_weak():
    x32 = np.ones(3, np.float32)
    assert tk.jit(lambda x, s: x * s)(x32, 2.0).dtype == np.float32
    assert tk.jit(lambda x, s: x * s)(x32, 2).dtype == np.float32
    assert tk.jit(lambda s: s * 2)(3) == 6
    assert tk.grad(lambda x, s: (x * s).sum(), argnums=1)(x32, 2.0) == pytest.approx(3.0)


def test_integer_and_bool_arrays():
    i = np.arange(6, dtype=np.int32).reshape(2, 3)
    f = tk.jit(lambda i: (i * 2 + 1, i / 2, i > 2, (i > 2).astype(np.float32)))
    a, b, c, d = f(i)
    assert a.dtype == np.int32 and b.dtype == np.float64 and c.dtype == np.bool_ and d.dtype == np.float32
    np.testing.assert_array_equal(b, i / 2)


def test_static_argnums():
    def f(x, n, mode):
        for _ in range(n):  # a static loop unrolls
            x = np.sin(x) if mode == "sin" else np.cos(x)
        return x

    jf = tk.jit(f, static_argnums=(1, 2))
    x = np.linspace(0, 1, 4)
    np.testing.assert_allclose(jf(x, 3, "sin"), f(x, 3, "sin"))
    np.testing.assert_allclose(jf(x, 2, "cos"), f(x, 2, "cos"))
    jf(x, 3, "sin")
    assert jf.trace_count == 2
    with pytest.raises(TypeError, match="hashable"):
        jf(x, [3], "sin")


def test_captured_numpy_constants():
    table = np.array([1.0, 2.0, 3.0])
    f = tk.jit(lambda x: x * table + np.float32(1))
    np.testing.assert_allclose(f(np.ones(3)), [2, 3, 4])


def test_tracer_attributes_and_methods():
    seen = {}

    def f(x):
        seen.update(shape=x.shape, dtype=x.dtype, ndim=x.ndim, size=x.size, len=len(x))
        return (x.T.sum(axis=0), x.mean(), x.max(axis=1, keepdims=True), x.min(), x.prod(axis=0),
                x.reshape(6), x.reshape(3, 2), x.astype(np.float32), x.clip(0, 2), x.transpose(), x.ravel(),
                x.dot(np.ones(3)), x.sum(keepdims=True), -x, +x, abs(x), 2 - x, 2 / (x + 1), 2 ** x, x @ np.ones((3, 1)))

    x = np.arange(6.0).reshape(2, 3)
    got = tk.jit(f)(x)
    expected = f(x)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e)
        assert np.asarray(g).dtype == np.asarray(e).dtype
    assert seen == dict(shape=(2, 3), dtype=np.float64, ndim=2, size=6, len=2)


def test_scalar_outputs_are_numpy_scalars_and_arrays_are_writeable():
    out = tk.jit(lambda x: (x.sum(), np.broadcast_to(x, (2, 3))))(np.ones(3))
    assert isinstance(out[0], np.float64)
    assert out[1].flags.writeable


def test_nested_jit_inlines():
    inner = tk.jit(lambda x: np.exp(x) * 2)
    outer = tk.jit(lambda x: inner(x) + inner(x * 2))
    x = np.array([0.0, 1.0])
    np.testing.assert_allclose(outer(x), 2 * np.exp(x) + 2 * np.exp(2 * x))
    assert inner.trace_count == 0  # inlined into outer's trace, never staged on its own


def test_jit_as_method_decorator():
    class Model:
        scale = 3.0

        @tk.jit
        def __call__(self, x):
            return x * self.scale

    np.testing.assert_allclose(Model()(np.ones(2)), [3, 3])


def test_eager_tk_numpy_on_arrays():
    import tracekern.numpy as tnp

    np.testing.assert_allclose(tnp.sum(np.ones((2, 3)), axis=0), [2, 2, 2])
    np.testing.assert_allclose(tnp.matmul(np.ones((2, 3)), np.ones(3)), [3, 3])


def test_outputs_never_alias_inputs():
    x = np.ones(3)
    y, s = tk.jit(lambda x: (x, x.sum()))(x)
    assert y is not x and not np.shares_memory(x, y)
    y[0] = 5
    assert x[0] == 1


def test_keyword_arguments_are_traced_inputs():
    def f(x, *, scale, offset=0.0):
        return np.sum(x * scale) + offset

    jf = tk.jit(f)
    x = np.arange(3.0)
    assert jf(x, scale=2.0) == 6.0
    assert jf(x, scale=3.0, offset=1.0) == 10.0
    assert jf.trace_count == 2  # a new keyword set is a new signature; a new value is not
    jf(x, scale=5.0)
    assert jf.trace_count == 2
    np.testing.assert_allclose(tk.grad(f)(x, scale=np.array([1.0, 2.0, 3.0])), [1, 2, 3])
    value, g = tk.jit(tk.value_and_grad(f))(x, scale=2.0, offset=1.0)
    assert value == 7.0 and g.tolist() == [2, 2, 2]
    with pytest.raises(TypeError, match="keyword argument"):
        jf(x, scale="big")


def test_np_array_of_tracers_suggests_stack():
    with pytest.raises(TypeError, match="np.stack"):
        tk.jit(lambda a, b: np.array([a, b]))(np.ones(2), np.ones(2))


# ----------------------------------------------------------------------------- binding and builders (the trace room)


def test_flatten_args_is_the_one_flattening_of_positional_arguments():
    from tracekern.trace import flatten_args

    v = tk.Variable(np.ones(2))
    flat = flatten_args(({"b": 2.0, "a": np.ones(3)}, [v, 1], True))
    assert flat.owner == (0, 0, 1, 1, 2)
    assert [a.shape for a in flat.avals] == [(3,), (), (2,), (), ()]
    assert flat.weak == (False, True, False, True, True)   # Python numbers (bools too: True + True is 2) are weak
    assert flat.leaves[2] is v._value                          # a Variable reads as its value outside a trace
    back = flat.unflatten(list(flat.leaves))
    assert set(back[0]) == {"a", "b"} and back[1][1] == 1 and back[2] is True
    with pytest.raises(TypeError, match="not an array"):
        tk.jit(lambda x: x)([object()])


def test_bind_stages_into_the_running_trace_and_evaluates_outside_one():
    from tracekern import primitives as P
    from tracekern.trace import Builder, Tracer, Value, bind, build_graph, new_builder

    assert bind(P.exp, np.zeros(2)).tolist() == [1.0, 1.0]            # no trace: NumPy
    with new_builder() as b:
        x = b.new_input(tk.Aval((2,), np.dtype("float64")))
        y = bind(P.exp, x)
        assert isinstance(y, Tracer) and b.eqns[-1].primitive is P.exp
    plain = Builder()
    v = plain.new_input(tk.Aval((2,), np.dtype("float64")))
    assert type(v) is Value and type(plain.bind(P.exp, v)) is Value    # transforms' builders hand out Values
    g = build_graph(lambda b, a: [b.bind(P.add, b.bind(P.sin, a), b.bind(P.sin, a))],
                    [tk.Aval((3,), np.dtype("float64"))])
    assert g.primitive_counts == {"sin": 1, "add": 1}                  # simplified (CSE) and verified


def test_inline_skips_given_values_and_orders_effects():
    from tracekern.trace import Builder

    g = tk.make_ir(lambda x: (tk.print("x", x), np.sin(x) * 2)[1])(np.ones(2))
    b = Builder()
    x = b.new_input(tk.Aval((2,), np.dtype("float64")))
    sin_out = next(e.outputs[0] for e in g.eqns if e.primitive.name == "sin")
    known = b.new_input(sin_out.aval)
    token = b.new_input(tk.Aval((1,), np.dtype("float64")))
    env = b.inline(g, [x], given={sin_out: known}, order=token)
    assert [e.primitive.name for e in b.eqns] == ["print", "const", "mul"]   # sin is given, not emitted
    assert b.eqns[0].inputs[-1] is token.ir_var                           # the print runs after `order`
    assert env[g.outputs[0]].builder is b
