"""kernels/ (the ready-made workloads), their peer versions (kernels/peers) and the benchmark's
harness (bench/harness.py, bench/recompute.py).

Every strategy of a workload is the same function: its value and gradient must equal the
unannotated version's (on the interpreter, and on cpu for the cheaper ones), and so must every
peer's version of it (JAX, TensorFlow, PyTorch: each where installed)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import kernels
import tracekern as tk
from bench import harness, recompute
from kernels import heat, peers

CONFIGS = [(name, s) for name, m in kernels.MODULES.items() for s in m.STRATEGIES]
CPU_TOO = {"chain", "mlp", "revnet", "softplus", "rnn", "heat", "signal", "spectral", "lstm"}   # (the transformer compiles for ~20 s)


def _value_and_grad(w, backend):
    return tk.jit(tk.value_and_grad(w.loss), backend=backend)(*w.args)


def _reference(name, strategy):
    """The workload a strategy must agree with: the unannotated one, or the module's reference(strategy)
    (the transformer's "dropout" strategy: the dropout model without recompute)."""
    w = kernels.make(name, "test", "none")
    reference = getattr(kernels.MODULES[name], "reference", None)
    return kernels.Workload(name, "none", reference(strategy), w.args) if reference else w


@pytest.mark.parametrize("name,strategy", CONFIGS, ids=[f"{n}-{s}" for n, s in CONFIGS])
def test_every_strategy_computes_the_same_value_and_gradient(name, strategy):
    want_v, want_g = _value_and_grad(_reference(name, strategy), "interpret")
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


def test_the_spectral_solver_fits_its_parameters_by_gradient_descent():
    """The barrier's height and half-width and the nonlinearity come back from the density they make."""
    from kernels import spectral

    params, losses = spectral.fit("test", 80, backend="interpret")
    np.testing.assert_allclose(params, spectral.TRUE, rtol=2e-2)
    assert losses[-1] < 1e-3 * losses[0]


def test_softplus_custom_gradient_is_finite_where_the_naive_one_is_not():
    from kernels.softplus import log1pexp

    x = np.array([-100.0, 0.0, 100.0], np.float32)
    g = tk.grad(lambda x: np.sum(log1pexp(x)))(x)
    np.testing.assert_allclose(g, [0.0, 0.5, 1.0], atol=1e-6)
    naive = tk.grad(lambda x: np.sum(np.log(1 + np.exp(x))))(x)
    assert not np.all(np.isfinite(naive))


# -- the peers (kernels/peers): the same function in JAX, TensorFlow and PyTorch ------------------------
# what each tool cannot express; any other strategy must run and agree with tracekern
UNSUPPORTED = {"jax": {("heat", "none"), ("heat", "checkpoint16")},
               "tensorflow": {("mlp", "dots"), ("transformer", "dots"), ("heat", "checkpoint16"), ("transformer", "dropout"),
                              ("spectral", "none"), ("spectral", "checkpoint8"), ("lstm", "none"), ("lstm", "auto")},
               "torch": {("heat", "checkpoint16"), ("transformer", "dropout"), ("spectral", "none"), ("spectral", "checkpoint8")}}


@pytest.mark.parametrize("tool", sorted(peers.TOOLS))
def test_every_peer_version_computes_tracekerns_value_and_gradient(tool):
    pytest.importorskip(peers.TOOLS[tool][0])
    unsupported = set()
    for name, strategy in CONFIGS:
        want_v, want_g = _value_and_grad(_reference(name, strategy), "interpret")
        try:
            p = peers.make(tool, name, "test", strategy)
        except peers.Unsupported as e:
            assert peers.TOOLS[tool][1] in str(e)          # the reason names the tool: it is printed as a result
            unsupported.add((name, strategy))
            continue
        v, g = p.to_numpy(p.run())
        want = tk.tree_flatten(want_g)[0]
        assert len(g) == len(want), (name, strategy)      # the same leaves, before their values
        assert v == pytest.approx(float(want_v), rel=1e-4, abs=1e-6), (name, strategy)
        for a, b in zip(g, want):
            assert a.shape == b.shape, (name, strategy)
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5, err_msg=f"{tool} {name} {strategy}")
        assert p.how
    assert unsupported == UNSUPPORTED[tool]


def test_peer_options_are_checked():
    with pytest.raises(ValueError, match="strategies"):
        peers.make("jax", "mlp", "test", "reversible")
    with pytest.raises(TypeError, match="torch only"):
        peers.make("jax", "mlp", "test", "none", compiled=True)


def test_the_heat_trip_count_and_what_its_backward_keeps():
    """kept_at_run_time counts one carry per iteration of the loop tracekern runs."""
    w = kernels.make("heat", "test", "none")
    cells, threshold = heat.SIZES["test"]

    def counted(u0):
        return tk.while_loop(lambda s: np.max(s[0]) > threshold, lambda s: (heat.step(s[0]), s[1] + 1), (u0, np.int64(0)))[1]
    trips = int(tk.jit(counted, backend="interpret")(*w.args))
    assert trips == heat.trip_count("test") > 1
    assert heat.kept_at_run_time("test", "none")[0] == trips * cells * 4
    assert heat.kept_at_run_time("test", "checkpoint16")[0] == min(16, trips) * cells * 4


# -- the bench harness --------------------------------------------------------------------------------
def test_bench_imports_its_workloads_from_kernels():
    from bench import cpu, dask

    assert cpu.w1_loss is kernels.chain.loss and cpu.w2_loss is kernels.mlp.loss
    assert "mlp" in dask.mlp_loss.__code__.co_names           # a chunk's loss is kernels/mlp.py's
    ws, x, y = kernels.mlp.inputs(2, 4, 3)
    assert dask.mlp_loss(ws, (x, y)) == kernels.mlp.loss(ws, x, y)


def test_hand_written_numpy_baselines_are_right():
    from bench import cpu

    (x,) = kernels.chain.inputs(1000)
    v, g = tk.jit(tk.value_and_grad(kernels.chain.loss), backend="interpret")(x)
    nv, ng = cpu.w1_numpy(x)
    assert nv == pytest.approx(float(v), rel=1e-5)
    np.testing.assert_allclose(ng, g, rtol=1e-4, atol=1e-6)
    args = kernels.mlp.inputs(3, 8, 4)
    v, g = tk.jit(tk.value_and_grad(kernels.mlp.loss), backend="interpret")(*args)
    nv, ng = cpu.w2_numpy(*args)
    assert nv == pytest.approx(float(v), rel=1e-5) and len(ng) == len(g) == 3
    for a, b in zip(ng, g):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-7)


def test_time_tracekern_reports_time_spread_residuals_and_peak():
    rows = recompute.time_tracekern("chain", "test")
    assert [r["strategy"] for r in rows] == list(kernels.chain.STRATEGIES)
    for r in rows:
        assert r["tool"] == "tracekern" and r["runs"] >= 2 and r["unsupported"] is None
        assert 0 < r["time_min_s"] <= r["time_s"] <= r["time_max_s"]
        assert r["residual_bytes"] == 64 * 4            # the chain saves only x (recomputed backward)
        assert r["planned_peak_bytes"] >= 64 * 4


def test_time_peer_reports_unsupported_strategies_as_rows():
    pytest.importorskip("jax")
    rows = recompute.time_peer("jax", "heat", "test")
    assert [r["strategy"] for r in rows] == ["none", "checkpoint16"]
    assert all(r["time_s"] is None and "while_loop" in r["unsupported"] for r in rows)


def test_compile_one_reports_a_compile_time_and_the_memory_plans_the_timing_rows_would():
    """The compile phase gives each row its memory plans (the timing process then skips them): the
    same figures as the timing process's own."""
    r = recompute.compile_one("softplus", "custom", "test")
    assert r["compile_s"] >= 0 and isinstance(r["compiled"], bool)
    (timed,) = [t for t in recompute.time_tracekern("softplus", "test") if t["strategy"] == "custom"]
    fields = ("residual_bytes", "saved_bytes", "planned_peak_bytes")
    assert {k: r[k] for k in fields} == {k: timed[k] for k in fields} and r["residual_bytes"] > 0
    (skipped,) = [t for t in recompute.time_tracekern("softplus", "test", memory=False) if t["strategy"] == "custom"]
    assert all(skipped[k] is None for k in fields) and skipped["time_s"] > 0


def test_interleaved_timing_runs_each_function_enough():
    calls = {"a": 0, "b": 0}

    def bump(k):
        calls[k] += 1
    t = harness.interleaved({k: (lambda k=k: bump(k)) for k in calls}, min_runs=7, min_seconds=0.0)
    assert all(t[k].runs >= 7 and calls[k] == t[k].runs + 1 for k in calls)   # + the estimate
    assert all(t[k].low <= t[k].median <= t[k].high for k in calls)


def test_the_peak_sampler_sees_a_large_allocation():
    with harness.PeakSampler() as s:
        a = np.ones(50 * 2**20 // 8)
        a += 1
        del a
    if s.above_base is None:
        pytest.skip("no /proc/self/statm here")
    assert s.above_base >= 40 * 2**20


def test_the_peak_sampler_sees_memory_a_step_that_holds_the_gil_frees_again():
    """A compiled step holds the GIL: the peak must come from the kernel, not from a Python thread."""
    step = tk.jit(lambda x: np.sum(np.sort(x) * 2.0))   # (a sort's result is an array of its own; a concatenate fuses)
    x = np.ones(2**22)
    with tk.config.override(keep_buffers=False):   # (a step's kept buffers would be in the base)
        step(x)
        with harness.PeakSampler() as s:
            step(x)
    if s.above_base is None or not s.exact:
        pytest.skip("no /proc/self/clear_refs here")
    assert s.above_base >= 2**22 * 8    # the sorted intermediate (32 MiB), freed before returning


def _rows():
    def row(strategy, tool, t, **kw):
        return dict(recompute._row("mlp", strategy, tool, "how"), time_s=t, time_min_s=t and t * 0.9,
                    time_max_s=t and t * 1.2, runs=3, residual_bytes=100, peak_bytes=2**20, planned_peak_bytes=2**20,
                    ratio=t and t / 0.01, vs_tracekern=None, compile_s=1.5, compiled=True, **kw)
    return [row("none", "tracekern", 0.01), row("dots", "tracekern", 0.0105),
            row("none", "tensorflow", 0.02), row("dots", "tensorflow", None, **{"unsupported": "no dots"})]


def test_table_compare_json_and_plot(tmp_path):
    rows = _rows()
    rows[1]["unsupported"] = None
    old = {"rows": rows, "notes": []}
    text = recompute.table(old)
    assert "dots" in text and "1.05" in text and "unsupported" in text and "9.0-12.0" in text
    md = recompute.markdown(old)
    assert "| mlp | dots | tracekern | 10.5 | 9.4-12.6 | 1.05 |" in md and "| mlp | dots | TensorFlow | unsupported" in md
    new = {"rows": [dict(r, time_s=r["time_s"] and r["time_s"] * 2, peak_bytes=2**19) for r in rows]}
    text = recompute.compare(old, new)
    assert text.count("2.00") == 3 and text.count("0.50") == 3      # the unsupported row has no ratio
    # a result file from before sections (rows at the top, "peer" instead of "tool") still compares
    legacy = {"rows": [dict(workload="mlp", strategy="none", peer=None, time_s=0.005, peak_bytes=2**20)]}
    (tmp_path / "old.json").write_text(json.dumps(legacy))
    (tmp_path / "new.json").write_text(json.dumps({"sections": {"recompute": new}}))
    harness.main_job([recompute.SECTION], ["--compare", str(tmp_path / "old.json"), str(tmp_path / "new.json")])
    pytest.importorskip("matplotlib")
    from bench.plot import plot

    path = plot(dict(old, size="test"), str(tmp_path / "p.png"))
    assert path and (tmp_path / "p.png").stat().st_size > 10_000


def test_the_main_job_keeps_each_process_it_ran_and_its_time(tmp_path):
    """The main job's JSON lists every measuring process (its arguments, its wall time): where the run's time went."""
    probe = tmp_path / "probe.json"
    probe.write_text('{"a": 1}')
    section = harness.Section("probe", lambda options: {"rows": [harness.in_process("json.tool", "--compact", str(probe))],
                                                        "notes": []}, lambda result: "a table")
    harness.main_job([section], ["--json", str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")])
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["sections"]["probe"]["rows"] == [{"a": 1}]
    ran = [p for p in saved["processes"] if p["args"] == ["json.tool", "--compact", str(probe)]]
    assert len(ran) == 1 and ran[0]["wall_s"] > 0 and ran[0]["cpu_s"] >= 0, saved["processes"]


def test_a_measuring_process_s_cpu_time_counts_the_processes_it_waited_for(tmp_path):
    """in_process gives each process's CPU seconds with those of the children it waited for (a step's compile
    workers): a process that spins 0.3 s of CPU itself and 0.3 s in a child it waits for counts about 0.6 s."""
    (tmp_path / "tk_burn.py").write_text(
        "import json, subprocess, sys, time\n"
        "def spin(s):\n"
        "    end = time.process_time() + s\n"
        "    while time.process_time() < end:\n"
        "        pass\n"
        "if sys.argv[1:] == ['child']:\n"
        "    spin(0.3)\n"
        "else:\n"
        "    subprocess.run([sys.executable, __file__, 'child'], check=True)\n"
        "    spin(0.3)\n"
        "    print(json.dumps({'ok': True}))\n")
    before = len(harness.PROCESSES)
    got = harness.in_process("tk_burn", env={"PYTHONPATH": os.pathsep.join([str(tmp_path), harness.ROOT])})
    assert got == {"ok": True}
    ran = harness.PROCESSES[before:]
    assert [p["args"] for p in ran] == [["tk_burn"]]
    assert 0.55 <= ran[0]["cpu_s"] < ran[0]["wall_s"] + 5, ran
    with pytest.raises(RuntimeError, match="tk_burn"):   # (a failing process still raises with its output)
        harness.in_process("tk_burn", "x", "y", env={"PYTHONPATH": "/nonexistent"})


def test_a_measuring_process_answers_then_ends_without_the_interpreter_s_teardown(tmp_path):
    """harness.child_result in a process in_process started: its JSON is the answer, its exit handlers run (compile
    workers are closed as at a normal exit), then it ends at once: neither the code after it nor the interpreter's
    teardown of its modules runs (its non-daemon threads are joined first, as at a normal exit); the variable that
    marks it is not passed on to its own children. Run by hand (no in_process), it only prints and the program goes
    on."""
    (tmp_path / "tk_quick.py").write_text(
        "import atexit, os, sys, threading, time\n"
        "from bench.harness import child_result\n"
        "open(sys.argv[1] + '/env', 'w').write(repr(os.environ.get('TK_BENCH_CHILD')))\n"
        "atexit.register(lambda: open(sys.argv[1] + '/atexit', 'w').close())\n"
        "threading.Thread(target=lambda: time.sleep(0.2) or open(sys.argv[1] + '/thread', 'w').close()).start()\n"
        "class Late:\n"
        "    def __del__(self):\n"
        "        open(sys.argv[1] + '/teardown', 'w').close()\n"
        "late = Late()\n"
        "child_result({'ok': True})\n"
        "print('after')\n")
    path = os.pathsep.join([str(tmp_path), harness.ROOT])
    assert harness.in_process("tk_quick", str(tmp_path), env={"PYTHONPATH": path}) == {"ok": True}
    assert (tmp_path / "atexit").exists() and (tmp_path / "thread").exists() and not (tmp_path / "teardown").exists()
    assert (tmp_path / "env").read_text() == "None"
    (tmp_path / "atexit").unlink()
    env = {k: v for k, v in os.environ.items() if k != harness.CHILD_ENV}
    out = subprocess.run([sys.executable, "-m", "tk_quick", str(tmp_path)], env=dict(env, PYTHONPATH=path), cwd=tmp_path,
                         capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ['{"ok": true}', "after"] and (tmp_path / "atexit").exists()


def test_two_lanes_never_runs_two_timing_jobs_at_once_and_keeps_each_job_after_its_own():
    """harness.two_lanes: a timing job runs alone or beside work (never beside another timing job), a job starts
    only after those it names, a free lane takes the first ready job in list order, and a job that raised raises
    again once every job has ended (the jobs after it ran all the same)."""
    import threading
    import time

    running, log, lock = set(), [], threading.Lock()

    def job(name, seconds):
        def fn():
            with lock:
                log.append(("start", name, frozenset(running)))
                running.add(name)
            time.sleep(seconds)
            with lock:
                running.discard(name)
                log.append(("end", name, None))
            return name.upper()
        return fn

    J = harness.Job
    jobs = [J("time a", job("time a", 0.1), True, after=("compile a",)), J("time b", job("time b", 0.1), True),
            J("time c", job("time c", 0.1), True), J("compile a", job("compile a", 0.15), False),
            J("count", job("count", 0.02), False)]
    done = harness.two_lanes(jobs)
    assert done == {j.name: j.name.upper() for j in jobs}
    starts = {name: beside for kind, name, beside in log if kind == "start"}
    order = [name for kind, name, _ in log if kind == "end"]
    assert all(not any(b.startswith("time") for b in beside) for name, beside in starts.items() if name.startswith("time"))
    assert order.index("compile a") < [n for k, n, _ in log if k == "start"].index("time a")
    # the lanes take "time b" (time a waits for its compile) and "compile a" at once: they run side by side
    assert "compile a" in starts["time b"] or "time b" in starts["compile a"], log

    def boom():
        raise RuntimeError("the compile failed")
    after = []
    with pytest.raises(RuntimeError, match="the compile failed"):
        harness.two_lanes([J("compile", boom, False), J("time", lambda: after.append(1), True, after=("compile",))])
    assert after == [1]
    with pytest.raises(ValueError, match="unknown"):
        harness.two_lanes([J("time", lambda: None, True, after=("nothing",))])
    with pytest.raises(ValueError, match="wait for each other"):
        harness.two_lanes([J("a", lambda: None, False, after=("b",)), J("b", lambda: None, False, after=("a",))])
    # a progress callback that fails loses no job: every job runs, and its error is raised at the end
    ran = []
    with pytest.raises(RuntimeError, match="progress"):
        harness.two_lanes([J(k, lambda k=k: ran.append(k), False) for k in "abc"],
                          progress=lambda name: (_ for _ in ()).throw(RuntimeError("progress")))
    assert sorted(ran) == ["a", "b", "c"]


def test_the_main_job_runs_the_jobs_of_a_section_that_measures_nothing_in_the_lanes_of_one_that_hosts_them(tmp_path):
    """A section with jobs (bench.calls) that comes after one that hosts lanes (bench.budget) is not run on its own:
    its jobs go to options.lane_jobs, the host runs them, and the section's result is made from their results."""
    seen = {}

    def host_run(options):
        seen["lane_jobs"] = [j.name for j in options.lane_jobs]
        options.lane_results.update(harness.two_lanes(list(options.lane_jobs)))
        return {"rows": [], "notes": []}

    def counting_jobs(options):
        jobs = [harness.Job(f"count {k}", lambda k=k: [k, k * 10], False) for k in range(2)]
        return jobs, lambda results: {"rows": [results["count 0"], results["count 1"]], "notes": []}

    def counting_run(options):
        jobs, finish = counting_jobs(options)
        seen["ran alone"] = True
        return finish(harness.two_lanes(jobs))

    host = harness.Section("host", host_run, lambda r: "host table", hosts_lanes=True)
    counting = harness.Section("counting", counting_run, lambda r: "counting table", jobs=counting_jobs)
    out = [str(tmp_path / "r.json"), "--plot", str(tmp_path / "r.png")]
    harness.main_job([host, counting], ["--json", *out])
    saved = json.loads((tmp_path / "r.json").read_text())
    assert seen == {"lane_jobs": ["count 0", "count 1"]}
    assert saved["sections"]["counting"]["rows"] == [[0, 0], [1, 10]]
    # alone (or before the host), it runs its own jobs
    harness.main_job([counting, host], ["--json", *out])
    assert seen["ran alone"] and seen["lane_jobs"] == []


def test_the_compile_phase_s_processes_take_each_configuration_once(tmp_path):
    """recompute.compile_queue: processes that share a queue directory take every configuration exactly once, in
    order (each workload's "none" first), whichever process takes it."""
    (tmp_path / "configs.json").write_text(json.dumps(["softplus:none", "chain:none", "softplus:custom"]))
    (tmp_path / "1").write_text("")      # (taken by another process)
    got = recompute.compile_queue("test", str(tmp_path))
    assert [c for c, _ in got] == ["softplus:none", "softplus:custom"]
    assert all(r["compile_s"] >= 0 and r["residual_bytes"] > 0 for _, r in got)
    assert recompute.compile_queue("test", str(tmp_path)) == []     # (all taken)
