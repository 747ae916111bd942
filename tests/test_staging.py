"""tracekern.staging: the signature cache (a trace per signature, the fast path for plain arrays,
Variables), what a call runs (Lowered, MemoryReport), export to another process, and tk.vjp's
compiled halves cached per signature."""
import pickle

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import to_host
from tracekern import staging


def test_a_trace_per_signature_and_the_plain_array_fast_path():
    f = tk.jit(lambda x, y: x * y + 1, backend="interpret")
    a, b = np.ones(3), np.ones(3)
    f(a, b)
    f(a * 2, b)                                     # same shapes and dtypes: no new trace
    assert f.trace_count == 1 and len(f._fast) == 1
    f(a.astype(np.float32), b.astype(np.float32))   # a new dtype
    f((a,)[0], 2.0)                                 # a weak Python scalar is another signature
    assert f.trace_count == 3
    key = next(iter(f._cache))
    treedefs, leaves, weak, statics = key
    assert leaves == (((3,), "<f8"), ((3,), "<f8")) and weak == (False, False) and statics == ()


def test_static_arguments_are_part_of_the_key_and_must_be_hashable():
    f = tk.jit(lambda x, n: x * n, backend="interpret", static_argnums=1)
    assert f(np.ones(2), 3).tolist() == [3, 3] and f(np.ones(2), 4).tolist() == [4, 4]
    assert f.trace_count == 2
    with pytest.raises(TypeError, match=r"static argument 1 \('n'\).*hashable"):
        f(np.ones(2), [1])


def test_a_static_argument_passed_by_keyword_or_left_to_its_default():
    """f(x, n=2) with static_argnums=1 raised 'static_argnums=(1,) but f got 1 arguments' (JAX takes it); so did a
    static parameter left to its default. Both are static values now, through a transform too."""
    x = np.arange(12.0).reshape(3, 4)
    f = tk.jit(lambda a, n: a[:n] * 2, backend="interpret", static_argnums=1)
    assert f(x, n=2).shape == (2, 4) and f(x, 2).shape == (2, 4) and f.trace_count == 1
    g = tk.jit(lambda a, b, n=1: (a + b)[:n], backend="interpret", static_argnums=2)
    assert g(x, b=x, n=2).tolist() == (2 * x[:2]).tolist() and g(x, x).tolist() == (2 * x[:1]).tolist()
    v, d = tk.jit(tk.value_and_grad(lambda a, n: np.sum(a[:n] ** 2)), backend="interpret", static_argnums=1)(x, n=1)
    assert v == np.sum(x[0] ** 2) and d.tolist() == np.where(np.arange(3)[:, None] < 1, 2 * x, 0.0).tolist()
    with pytest.raises(ValueError, match="positional arguments"):
        tk.jit(lambda a, *, n: a[:n], backend="interpret", static_argnums=1)(x, n=2)


def test_a_variables_new_shape_retraces_and_results_never_alias_inputs():
    v = tk.Variable(np.ones(2))
    f = tk.jit(lambda x: x + v, backend="interpret")
    g = tk.jit(lambda x: x, backend="interpret")
    f(np.ones(2))
    v.assign(np.ones(2) * 3)
    assert f(np.ones(2)).tolist() == [4, 4] and f.trace_count == 1
    v.assign(np.ones(3))
    assert f(np.ones(3)).tolist() == [2, 2, 2] and f.trace_count == 2
    x = np.ones(2)
    y = g(x)
    y[0] = 5
    assert x[0] == 1


def test_results_numpy_makes_apart_do_not_share_memory():
    """Two outputs that tracing made one value (np.zeros_like twice, a * 2 twice) came back as one buffer:
    m, v = f(x); m += 1 changed v (an optimizer's state initialised so). Each is its own array now."""
    def init(a):
        return {"m": np.zeros_like(a), "v": np.zeros_like(a)}, a * 2, a * 2

    x = np.arange(6.0).reshape(2, 3)
    for backend in tk.available_backends():   # (cuda: one device array twice, the simulator's on a machine without GPU)
        (state, p, q) = tk.jit(init, backend=backend)(x)
        state["m"][0, 0] = 1.0
        p[0, 0] = -5.0
        np.testing.assert_array_equal(to_host(state["v"]), np.zeros_like(x))
        np.testing.assert_array_equal(to_host(q), x * 2)


def test_big_endian_arguments_are_their_values():
    """A big-endian array (read from a file written elsewhere) is its dtype in NumPy: '>f8' raised 'supported
    dtypes are ... float64'. It is read in native order, and a later native call finds the same step."""
    x = np.linspace(-1.0, 2.0, 6).reshape(2, 3)
    for backend in ("interpret", "cpu"):
        f = tk.jit(lambda a, b: (a * b + 1, np.sum(a ** 2)), backend=backend)
        for a, b in [(x.astype(">f8"), np.arange(3, dtype=">i4")), (x, np.arange(3, dtype=np.int32))] * 2:
            got = f(a, b)
            np.testing.assert_allclose(got[0], x * np.arange(3) + 1, rtol=1e-15)
            assert got[0].dtype == np.float64 and got[0].dtype.isnative
        assert f.trace_count == 1
        np.testing.assert_allclose(tk.jit(tk.grad(lambda a: np.sum(a ** 2)), backend=backend)(x.astype(">f8")), 2 * x)


def test_lower_reports_the_graph_source_and_memory():
    f = tk.jit(lambda x, w: np.sum(np.tanh(x @ w)))
    low = f.lower(np.ones((4, 3)), np.ones((3, 2)))
    assert isinstance(low, staging.Lowered) and isinstance(low.memory, staging.MemoryReport)
    assert low.ir.primitive_counts == {"matmul": 1, "tanh": 1, "reduce_sum": 1}
    assert "def step(" in low.source
    assert set(low.memory.peak_bytes) == {"step", "vjp_forward", "vjp_backward"}
    assert low.memory.residual_bytes == low.vjp.residual_bytes > 0
    assert tk.jit(np.sin, backend="interpret").lower(np.ones(2)).source is None


def test_export_pickles_to_source_and_checks_its_arguments():
    f = tk.jit(lambda p, x: {"y": np.tanh(x @ p["w"])})
    e = f.export({"w": np.ones((3, 2))}, np.ones((4, 3)))
    back = pickle.loads(pickle.dumps(e))
    out = back({"w": np.ones((3, 2))}, np.ones((4, 3)))
    np.testing.assert_allclose(out["y"], np.tanh(np.full((4, 2), 3.0)))
    assert [a.shape for a in back.out_avals] == [(4, 2)]
    with pytest.raises(ValueError, match="exported for arguments of structure"):
        back(np.ones((3, 2)), np.ones((4, 3)))
    with pytest.raises(ValueError, match=r"exported for leaf 1 of shape \(4, 3\)"):
        back({"w": np.ones((3, 2))}, np.ones((5, 3)))
    with pytest.raises(ValueError, match="backend's compiled functions cannot run in another process"):
        tk.jit(np.sin, backend="interpret").export(np.ones(2))
    with pytest.raises(ValueError, match="static_argnums"):
        tk.jit(lambda x, n: x, static_argnums=1).export(np.ones(2), 1)


def test_vjp_halves_are_staged_once_per_signature():
    def f(x):
        return np.sin(x) * x

    first, flat = staging.stage_vjp(f, (np.ones(3),), False, "interpret")
    again, _ = staging.stage_vjp(f, (np.ones(3) * 2,), False, "interpret")
    other, _ = staging.stage_vjp(f, (np.ones(4),), False, "interpret")
    assert first is again and first is not other
    assert first.active == (True,) and first.value_treedef == tk.tree_flatten(np.ones(3))[1]
    assert len(first.split.forward.outputs) == 1 + len(first.split.residuals)


def test_a_method_decorator_binds_the_instance():
    class Model:
        def __init__(self, k):
            self.k = k

        @tk.jit
        def __call__(self, x):
            return x * self.k

    a, b = Model(2.0), Model(3.0)
    assert a(np.ones(2)).tolist() == [2, 2] and b(np.ones(2)).tolist() == [3, 3]
