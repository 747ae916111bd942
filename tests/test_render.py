"""backends/render.py, what the cpu and cuda renderers share: typed literals, reduction identities,
and control flow written once (checked through the source each renderer makes; no compile)."""
import numpy as np
import pytest

import tracekern as tk
from tracekern import schedule
from tracekern.backends.render import CONTROL, identity_literal, literal

F32, F64, I32, B = (np.dtype(t) for t in ("float32", "float64", "int32", "bool"))


def test_literals_are_typed_to_their_dtype():
    assert literal(0.5, F32) == "f32(0.5)"
    assert literal(np.nan, F64) == "f64(np.nan)"
    assert literal(-np.inf, F32) == "f32(-np.inf)"
    assert literal(np.inf, F64) == "f64(np.inf)"
    assert literal(-0.0, F64) == "f64(-0.0)"
    assert literal(3.7, I32) == "i32(3)"
    assert literal(1, B) == "boolean(True)"


@pytest.mark.parametrize("identity,dtype,text", [
    ("0", F32, "f32(0.0)"), ("1", I32, "i32(1)"), ("-inf", F64, "f64(-np.inf)"), ("+inf", F32, "f32(np.inf)"),
    ("-inf", I32, "i32(-2147483648)"), ("+inf", I32, "i32(2147483647)"), ("-inf", B, "boolean(False)"),
])
def test_reduction_identities(identity, dtype, text):
    assert identity_literal(identity, dtype) == text


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_checkpointed_scan_renders_its_schedule_from_the_checkpoint_param(backend):
    def loss(x, xs):
        return np.sum(tk.scan(lambda c, r: (np.sin(c) * r + c, c.sum()), x, xs, checkpoint=3)[0])

    x, xs = np.ones(4), np.ones((10, 4))
    ir = tk.make_ir(loss, mode="grad")(x, xs)
    (eqn,) = [e for e in ir.eqns if e.primitive.name == "scan_revolve"]
    assert eqn.params["checkpoint"] == 3 and eqn.params["length"] == 10 and "actions" not in eqn.params
    source = tk.jit(tk.grad(loss), backend=backend).lower(x, xs).source
    if backend == "cpu":   # the 3 slots the forward filled in its first sweep, resumed at the last step
        assert "slot0 = fresh_copy(a" in source and "pos = 10 - 1" in source and "slotpos = fresh_copy(X[" in source
    else:                                                        # the schedule runs on the device
        assert "R.empty((3, 4, )" in source and "checkpointed schedule of 10 steps on the device" in source
    assert schedule.actions(10, 3).shape[0] > 0 and set(CONTROL) == {"cond", "scan", "while", "scan_revolve"}


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_a_while_loop_makes_its_schedule_when_it_runs(backend):
    def loss(x):
        return np.sum(tk.while_loop(lambda c: c.sum() < 10, lambda c: c * 1.5 + 1, x, checkpoint=2))

    source = tk.jit(tk.grad(loss), backend=backend).lower(np.ones(3)).source
    assert "schedule_actions(n" in source and ", 2)" in source
