"""IR data, printer, verifier, and the dce / cse passes."""
import dataclasses

import numpy as np
import pytest

import tracekern as tk
from tracekern import passes
from tracekern import primitives as P
from tracekern.ir import Aval, Eqn, Graph, Var, verify


def test_ir_is_frozen():
    g = tk.make_ir(lambda x: x + 1)(np.ones(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.eqns = ()
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.eqns[0].params = {}


def test_printer_lists_one_equation_a_line_with_shapes_and_dtypes():
    def f(w, x):
        return np.sum(np.tanh(x @ w))

    text = str(tk.make_ir(f)(np.ones((4, 3), np.float32), np.ones((5, 4), np.float32)))
    lines = text.splitlines()
    assert lines[0] == "{ lambda a:f32[4,3], b:f32[5,4] ."
    assert "c:f32[5,3] = matmul b a" in lines[1] and "test_ir.py" in lines[1]
    assert "d:f32[5,3] = tanh c" in lines[2]
    assert "e:f32[] = reduce_sum[axes=(0, 1)] d" in lines[3]
    assert lines[-1].strip() == "in (e) }"


def test_backward_listing_marks_saved_values():
    split = tk.make_ir(lambda x: np.sum(np.sin(x) * np.cos(x)), mode="vjp")(np.ones(3))
    first = str(split.backward).splitlines()[0]
    assert "(saved)" in first and "(cotangent)" in first
    assert str(split).startswith("forward:")


def test_verifier_accepts_traced_graphs_and_rejects_malformed_ones():
    g = tk.make_ir(lambda x: np.exp(x) * 2)(np.ones(3))
    assert verify(g) is g
    a = Var(Aval((3,), np.dtype("float64")))
    b = Var(Aval((3,), np.dtype("float64")))
    c = Var(Aval((3,), np.dtype("float64")))
    ok = Graph((a,), (Eqn(P.exp, (a,), (b,), {}),), (b,))
    verify(ok)
    with pytest.raises(tk.IRError, match="before it is defined"):
        verify(Graph((a,), (Eqn(P.exp, (c,), (b,), {}),), (b,)))
    with pytest.raises(tk.IRError, match="never defined"):
        verify(Graph((a,), (), (b,)))
    with pytest.raises(tk.IRError, match="redefines"):
        verify(Graph((a,), (Eqn(P.exp, (a,), (b,), {}), Eqn(P.exp, (a,), (b,), {})), (b,)))
    wrong = Var(Aval((4,), np.dtype("float64")))
    with pytest.raises(tk.IRError, match="should be f64\\[3\\]"):
        verify(Graph((a,), (Eqn(P.exp, (a,), (wrong,), {}),), (wrong,)))
    with pytest.raises(tk.IRError, match="appears twice"):
        verify(Graph((a, a), (), (a,)))


def test_dce_removes_unused_work():
    def f(x):
        unused = np.exp(x) * 3  # noqa: F841
        return np.sin(x)

    g = tk.make_ir(f)(np.ones(3))
    assert g.primitive_counts == {"sin": 1}


def test_cse_merges_repeated_expressions():
    def f(x):
        return np.sin(x) * np.sin(x) + np.sin(x)

    g = tk.make_ir(f)(np.ones(3))
    assert g.primitive_counts["sin"] == 1
    # the same constant written twice is one equation
    g = tk.make_ir(lambda x: x * 2.0 + x * 2.0)(np.ones(3))
    assert g.primitive_counts.get("const", 0) == 1 and g.primitive_counts["mul"] == 1


def test_cse_and_dce_apply_to_backward_graphs():
    g = tk.make_ir(lambda x: np.sum(np.tanh(x) ** 2), mode="grad")(np.ones(3))
    assert g.primitive_counts["tanh"] == 1


def test_passes_preserve_values():
    a = Var(Aval((3,), np.dtype("float64")))
    b, c, d, e = (Var(Aval((3,), np.dtype("float64"))) for _ in range(4))
    g = Graph((a,), (Eqn(P.sin, (a,), (b,), {}), Eqn(P.sin, (a,), (c,), {}), Eqn(P.add, (b, c), (d,), {}),
                     Eqn(P.exp, (a,), (e,), {})), (d,))
    s = passes.simplify(g)
    verify(s)
    assert len(s.eqns) == 2
    from tracekern.backends.interpret import compile_graph

    x = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(compile_graph(s)([x])[0], 2 * np.sin(x))


def test_interpreter_checks_impl_results_against_the_ir(monkeypatch):
    from tracekern.primitives import sin

    monkeypatch.setattr(type(sin), "impl", lambda self, x: np.sin(x).astype(np.float32))
    with pytest.raises(tk.IRError, match="sin produced float32"):
        tk.jit(np.sin, backend="interpret")(np.ones(3))


def test_cse_keeps_negative_zero_apart_from_zero():
    f = lambda x: (x * 0 + np.full_like(x, -0.0), x * 0 + np.full_like(x, 0.0))  # noqa: E731
    a, b = tk.jit(f)(np.ones(2))
    assert np.all(np.signbit(tk.jit(lambda x: np.full_like(x, -0.0))(np.ones(2))))
    assert not np.any(np.signbit(b))
    g = tk.make_ir(lambda x: (np.full_like(x, -0.0), np.full_like(x, 0.0)))(np.ones(2))
    assert g.primitive_counts["full"] == 2
