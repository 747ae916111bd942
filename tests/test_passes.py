"""tracekern.passes: constant folding, common-subexpression elimination, dead-code elimination
(simplify = all three) and the inlining of annotation calls that backends get."""
import numpy as np

import tracekern as tk
from tracekern import passes
from tracekern import primitives as P
from tracekern.backends.interpret import compile_graph
from tracekern.ir import Aval, Eqn, Graph, Var, verify

F64 = np.dtype("float64")


def _v(*shape):
    return Var(Aval(tuple(shape), F64))


def test_dce_removes_unused_work_but_keeps_effects():
    def f(x):
        unused = np.exp(x) * 3  # noqa: F841
        tk.print("kept", x)
        return np.sin(x)

    g = tk.make_ir(f)(np.ones(3))
    assert g.primitive_counts == {"print": 1, "sin": 1}


def test_cse_merges_repeated_expressions_and_constants():
    g = tk.make_ir(lambda x: np.sin(x) * np.sin(x) + np.sin(x))(np.ones(3))
    assert g.primitive_counts["sin"] == 1
    g = tk.make_ir(lambda x: x * 2.0 + x * 2.0)(np.ones(3))
    assert g.primitive_counts.get("const", 0) == 1 and g.primitive_counts["mul"] == 1
    g = tk.make_ir(lambda x: np.sum(np.tanh(x) ** 2), mode="grad")(np.ones(3))
    assert g.primitive_counts["tanh"] == 1            # the backward's tanh merged with the forward's


def test_cse_never_merges_effects_and_keeps_negative_zero_apart():
    g = tk.make_ir(lambda x: (tk.print("a", x), tk.print("a", x), x)[2])(np.ones(2))
    assert g.primitive_counts["print"] == 2
    g = tk.make_ir(lambda x: (np.full_like(x, -0.0), np.full_like(x, 0.0)))(np.ones(2))
    assert g.primitive_counts["full"] == 2
    a, b = tk.jit(lambda x: (x * 0 + np.full_like(x, -0.0), x * 0 + np.full_like(x, 0.0)))(np.ones(2))
    assert np.all(np.signbit(tk.jit(lambda x: np.full_like(x, -0.0))(np.ones(2))))
    assert not np.any(np.signbit(b))


def test_constant_folding_turns_scalar_arithmetic_into_literals():
    c1, c2, s, x, y = _v(), _v(), _v(), _v(3), _v(3)
    g = Graph((x,), (Eqn(P.const, (), (c1,), {"value": np.float64(2.0)}), Eqn(P.const, (), (c2,), {"value": np.float64(1.0)}),
                     Eqn(P.sub, (c1, c2), (s,), {}), Eqn(P.mul, (x, s), (y,), {})), (y,))
    folded = passes.simplify(g)
    assert folded.primitive_counts == {"const": 1, "mul": 1}
    assert [e.params["value"] for e in folded.eqns if e.primitive is P.const] == [1.0]


def test_simplify_preserves_values_and_is_idempotent():
    a, b, c, d, e = _v(3), _v(3), _v(3), _v(3), _v(3)
    g = Graph((a,), (Eqn(P.sin, (a,), (b,), {}), Eqn(P.sin, (a,), (c,), {}), Eqn(P.add, (b, c), (d,), {}),
                     Eqn(P.exp, (a,), (e,), {})), (d,))
    s = passes.simplify(g)
    verify(s)
    assert len(s.eqns) == 2 and passes.simplify(s) is s
    x = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(compile_graph(s)([x])[0], 2 * np.sin(x))


def test_inline_calls_replaces_annotation_calls_recursively():
    inner = tk.recompute(lambda v: np.sin(v) * 2)

    @tk.custom_gradient
    def outer(v):
        return inner(v) + 1, lambda d: d

    g = tk.make_ir(lambda x: outer(x) * x)(np.ones(3))
    assert g.primitive_counts["custom_vjp_call"] == 1
    flat = passes.inline_calls(g)
    verify(flat)
    assert set(flat.primitive_counts) == {"sin", "mul", "add", "const"}
    x = np.linspace(0, 1, 3)
    np.testing.assert_allclose(compile_graph(flat)([x])[0], (np.sin(x) * 2 + 1) * x)
    assert passes.inline_calls(flat) is flat
