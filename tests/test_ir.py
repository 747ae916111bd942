"""tracekern.ir: the IR is frozen data, its printer, and the verifier (the passes: tests/test_passes.py)."""
import dataclasses

import numpy as np
import pytest

import tracekern as tk
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
