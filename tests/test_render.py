"""backends/render.py, what the cpu and cuda renderers share: typed literals, reduction identities,
and control flow written once (checked through the source each renderer makes; no compile)."""
import dataclasses

import numpy as np
import pytest

import tracekern as tk
from tests import toy_target
from tracekern import backends, schedule
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


# -- a third target (tests/toy_target.py): adding a backend is a Target, registry entries and a renderer of its
# loop skeleton (README: Adding a backend); it runs plain Python loops, compared with the NumPy oracle


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(backends.MODULES, "toy", "tests.toy_target")
    return "toy"


def _toy_programs():
    rng = np.random.default_rng(0)
    x, w, v = rng.normal(size=(3, 6)), rng.normal(size=(6, 2)), rng.normal(size=(4,))   # (x @ w contracts 6: a matmul, not a loop)

    def mlp(x, w):
        h = np.tanh(x @ w)
        return np.sum(tk.numpy.softmax(h, axis=-1) * h) + np.max(np.sin(x), axis=0).sum()

    def control(v):
        c, ys = tk.scan(lambda c, r: (np.tanh(c * r + 0.5), c.sum()), v, np.stack([v, v * 0.5, v]))
        c = tk.while_loop(lambda c: c.sum() < 5, lambda c: c * 1.5 + 1, c)
        c = tk.cond(c.sum() > 0, lambda a: np.exp(a * 0.1), lambda a: -a, c)
        return np.sum(np.concatenate([c, ys])) + np.mean(c * c)

    return [("mlp", mlp, (x, w)), ("control", control, (v,))]


@pytest.mark.parametrize("name", ["mlp", "control"])
def test_a_toy_third_target_runs_programs_and_their_gradients_as_interpret_does(toy, name):
    _, fn, args = next(p for p in _toy_programs() if p[0] == name)
    argnums = tuple(range(len(args)))
    for f in (fn, tk.value_and_grad(fn, argnums=argnums)):
        want = tk.jit(f, backend="interpret")(*args)
        got = tk.jit(f, backend=toy)(*args)
        want_leaves, want_tree = tk.tree_flatten(want)
        got_leaves, got_tree = tk.tree_flatten(got)
        assert got_tree == want_tree and len(got_leaves) == len(want_leaves) > 0
        for g, w in zip(got_leaves, want_leaves):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    source = tk.jit(fn, backend=toy).lower(*args).source   # (plain loops; matmul from the toy's registry)
    assert "for i0 in range(" in source and ("np.matmul(" in source) == (name == "mlp")


def test_on_device_reads_the_backends_target(toy, monkeypatch):
    """backends.on_device(name) is the backend's Target.on_device (no list of names): cuda's arrays live on
    the device, cpu's and the toy's on the host, interpret (no Target) and an unknown name on the host; a
    toy Target that says otherwise is believed."""
    assert [backends.on_device(n) for n in ("cuda", "cpu", "interpret", toy, "no-such")] == [True, False, False, False, False]
    monkeypatch.setattr(toy_target, "TARGET", dataclasses.replace(toy_target.TARGET, on_device=True))
    assert backends.on_device(toy)
