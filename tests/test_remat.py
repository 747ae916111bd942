"""tracekern.remat: recompute policies, which values tk.vjp's forward saves and which its backward
recomputes, and the split of a joint graph into the two halves."""
import numpy as np
import pytest

import tracekern as tk
from tracekern import remat
from tracekern.ir import Aval, Eqn, Graph, Var
from tracekern.primitives import exp, matmul, mul, reduce_sum, tanh

F64 = np.dtype("float64")


def _var(*shape):
    return Var(Aval(tuple(shape), F64))


def test_policies_by_name_or_callable():
    a, b, c, d = _var(2, 2), _var(2, 2), _var(2, 2), _var(2, 2)
    region = Graph((a, b), (Eqn(matmul, (a, b), (c,), {}), Eqn(tanh, (c,), (d,), {})), (d,))
    assert remat.saved_by_policy(region, remat.policy_function("nothing")) == ()
    assert remat.saved_by_policy(region, remat.policy_function("dots")) == (c,)
    assert remat.saved_by_policy(region, remat.policy_function(lambda e: e.primitive.name == "tanh")) == ()   # an output
    assert sorted(remat.POLICIES) == ["dots", "nothing"]
    with pytest.raises(ValueError, match="policy must be one of"):
        remat.policy_function("everything")
    with pytest.raises(ValueError, match="policy must be one of"):
        tk.recompute(np.sin, policy="everything")


def test_cheap_equations_are_recomputed_when_that_saves_bytes():
    x, y, z, s = _var(1000), _var(1000), _var(1000), _var()
    e1, e2, e3 = Eqn(exp, (x,), (y,), {}), Eqn(mul, (y, y), (z,), {}), Eqn(reduce_sum, (z,), (s,), {"axes": (0,)})
    assert remat.cheap(e1) and remat.cheap(e2) and not remat.cheap(e3)
    saved, recomputed = remat.choose_residuals([e1, e2, e3], [y, z])
    assert saved == [x] and recomputed == [e1, e2]      # x alone instead of y and z
    saved, recomputed = remat.choose_residuals([e1, e2, e3], [s])
    assert saved == [s] and recomputed == []            # a reduction's output stays saved


def test_split_joint_saves_what_the_forward_makes_anyway():
    split = tk.make_ir(lambda x, w: np.sum(np.tanh(x @ w)), mode="vjp")(np.ones((4, 3)), np.ones((3, 2)))
    assert isinstance(split, remat.SplitVJP) and split.num_outputs == 1
    fwd, bwd = split.forward, split.backward
    assert len(fwd.outputs) == 1 + len(split.residuals)
    assert [v.aval for v in bwd.inputs[:len(split.residuals)]] == [v.aval for v in split.residuals]
    assert bwd.input_notes == ("saved",) * len(split.residuals) + ("cotangent",)
    assert [v.aval.shape for v in bwd.outputs] == [(4, 3), (3, 2)]
    # saved: tanh's output (its derivative needs only that; the matmul before it stays in the forward)
    # and the two arguments the gradient matmuls read; 1 - tanh^2 and the transposes move to the backward
    assert [v.aval.shape for v in split.residuals] == [(4, 2), (3, 2), (4, 3)]
    assert fwd.outputs[1] is fwd.eqns[1].outputs[0] and fwd.eqns[1].primitive.name == "tanh"
    assert split.residual_bytes == (8 + 6 + 12) * 8 and split.saved_bytes == 8 * 8
    assert bwd.primitive_counts["matmul"] == 2 and "tanh" not in bwd.primitive_counts
    notes = dict(zip((e.primitive.name for e in bwd.eqns), bwd.eqn_notes))
    assert notes["sub"] == notes["transpose"] == "recomputed" and notes["matmul"] == ""


def test_recomputed_values_are_marked_and_a_barrier_token_only_orders():
    layer = tk.recompute(lambda h, w: np.tanh(h @ w))
    split = tk.make_ir(lambda x, w: np.sum(layer(layer(x, w), w)), mode="vjp")(np.ones((4, 3)), np.ones((3, 3)))
    bwd = split.backward
    notes = {e.primitive.name: [] for e in bwd.eqns}
    for e, note in zip(bwd.eqns, bwd.eqn_notes):
        notes[e.primitive.name].append(note)
    # the region again, behind a barrier whose token (a cotangent) only orders it: it remakes forward values
    assert set(notes["remat_barrier"]) == {"recomputed"}
    assert "recomputed" in notes["matmul"] and "" in notes["matmul"]   # the remade layer, and the gradient matmuls
    assert remat.mark_recomputed(bwd, len(split.residuals)).eqn_notes == bwd.eqn_notes
    # each region keeps its input (and the weights), not its tanh or matmul: residuals are arguments or region outputs
    assert all(v.aval.shape in ((4, 3), (3, 3)) for v in split.residuals)
