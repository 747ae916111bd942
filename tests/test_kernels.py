"""kernels/ (the ready-made workloads) and the recompute benchmark's harness (bench/recompute.py).

Every strategy of a workload is the same function: its value and gradient must equal the
unannotated version's (on the interpreter, and on cpu for the cheaper ones)."""
import json

import numpy as np
import pytest

import kernels
import tracekern as tk
from bench import recompute

CONFIGS = [(name, s) for name, m in kernels.MODULES.items() for s in m.STRATEGIES]
CPU_TOO = {"chain", "mlp", "revnet", "softplus", "rnn", "heat"}   # (the transformer compiles for ~20 s)


def _value_and_grad(w, backend):
    return tk.jit(tk.value_and_grad(w.loss), backend=backend)(*w.args)


@pytest.mark.parametrize("name,strategy", CONFIGS, ids=[f"{n}-{s}" for n, s in CONFIGS])
def test_every_strategy_computes_the_same_value_and_gradient(name, strategy):
    want_v, want_g = _value_and_grad(kernels.make(name, "test", "none"), "interpret")
    w = kernels.make(name, "test", strategy)
    backends = ["interpret"] + (["cpu"] if name in CPU_TOO and strategy != "none" or name in CPU_TOO and
                                len(kernels.MODULES[name].STRATEGIES) == 1 else [])
    for backend in backends:
        v, g = _value_and_grad(w, backend)
        assert v == pytest.approx(want_v, rel=1e-5, abs=1e-6), backend
        for a, b in zip(tk.tree_flatten(g)[0], tk.tree_flatten(want_g)[0]):
            np.testing.assert_allclose(a, b, rtol=2e-4, atol=1e-6, err_msg=backend)
    assert abs(float(want_v)) > 1e-6   # a workload that computes nothing would pass the rest


def test_the_gradients_are_right():
    """Finite differences on the unannotated workloads, in float64."""
    for name in kernels.MODULES:
        w = kernels.make(name, "test", "none")
        args64 = tk.tree_map(lambda a: np.asarray(a, np.float64) if np.asarray(a).dtype == np.float32 else a, w.args)
        if name == "heat":   # the trip count must not change under the perturbation
            continue
        tk.check_grad(w.loss, args64, argnums=(0,), rtol=1e-4)


def test_the_heat_loop_runs_a_data_dependent_number_of_steps():
    w = kernels.make("heat", "test", "none")
    hot = kernels.make("heat", "test", "none")
    v_cold = tk.jit(w.loss, backend="interpret")(w.args[0] * 0.5)   # below the threshold: no step
    v_hot = tk.jit(hot.loss, backend="interpret")(hot.args[0])
    grid = np.linspace(-1, 1, w.args[0].size, dtype=np.float32)
    assert v_cold == pytest.approx(np.sum((w.args[0] * 0.5) ** 2 * grid), rel=1e-5)
    assert v_hot != pytest.approx(np.sum(hot.args[0] ** 2 * grid), rel=1e-3)


def test_softplus_custom_gradient_is_finite_where_the_naive_one_is_not():
    from kernels.softplus import log1pexp

    x = np.array([-100.0, 0.0, 100.0], np.float32)
    g = tk.grad(lambda x: np.sum(log1pexp(x)))(x)
    np.testing.assert_allclose(g, [0.0, 0.5, 1.0], atol=1e-6)
    naive = tk.grad(lambda x: np.sum(np.log(1 + np.exp(x))))(x)
    assert not np.all(np.isfinite(naive))


def test_measure_one_reports_time_residuals_and_peak():
    row = recompute.measure_one("chain", "none", "test", runs=3)
    assert row["time_s"] > 0 and row["runs"] == 3 and row["peer"] is None
    assert row["residual_bytes"] == 64 * 4            # the chain saves only x (recomputed backward)
    assert row["planned_peak_bytes"] >= 64 * 4


def test_the_peak_sampler_sees_a_large_allocation():
    with recompute.PeakSampler() as s:
        a = np.ones(50 * 2**20 // 8)
        a += 1
        del a
    if s.above_base is None:
        pytest.skip("no /proc/self/statm here")
    assert s.above_base >= 40 * 2**20


def test_table_compare_and_json(tmp_path):
    rows = [dict(workload="mlp", strategy=s, time_s=t, ratio=t / 0.01, residual_bytes=100, peak_bytes=2**20,
                 planned_peak_bytes=2**20, runs=3, peer=None) for s, t in (("none", 0.01), ("dots", 0.0105))]
    old = {"rows": rows}
    new = {"rows": [dict(r, time_s=r["time_s"] * 2, peak_bytes=2**19) for r in rows]}
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    text = recompute.compare(str(tmp_path / "old.json"), str(tmp_path / "new.json"))
    assert text.count("2.00") == 2 and text.count("0.50") == 2
    assert "dots" in recompute.table(dict(old, notes=[])) and "1.05" in recompute.table(dict(old, notes=[]))
