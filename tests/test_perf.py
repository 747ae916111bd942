"""Issue 26: the thread budget (tk.config.threads, backends/threads.py), loops compiled whole
(tk.config.compiled_loops), checkpointed scans that resume from their forward's snapshots, and
checkpoint="auto" or a size in bytes. Never a time: results, structure and what the code runs."""
import os
import subprocess
import sys

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import assert_tree_close
from tracekern import schedule
from tracekern.backends import threads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _same(a, b):
    """Bit for bit, leaf by leaf (structure first)."""
    la, lb = tk.tree_flatten(a), tk.tree_flatten(b)
    assert la[1] == lb[1]
    for x, y in zip(la[0], lb[0]):
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


# -- tk.config and the thread budget ------------------------------------------------------------------
def test_config_checks_its_settings_and_override_puts_them_back():
    before = (tk.config.threads, tk.config.compiled_loops)
    with tk.config.override(threads=2, compiled_loops=False):
        assert tk.config.threads == 2 and tk.config.compiled_loops is False
    assert (tk.config.threads, tk.config.compiled_loops) == before
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="threads"):
            tk.config.threads = bad
    with pytest.raises(ValueError, match="compiled_loops"):
        tk.config.compiled_loops = 1
    with pytest.raises(AttributeError, match="no setting 'thread'"):
        tk.config.thread = 1
    assert "threads=" in repr(tk.config)


def test_the_environment_sets_the_defaults():
    code = "import tracekern as tk; print(tk.config.threads, tk.config.compiled_loops)"
    env = dict(os.environ, TRACEKERN_NUM_THREADS="1", TRACEKERN_COMPILED_LOOPS="0", PYTHONPATH=ROOT)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.split() == ["1", "False"], out.stderr
    env["TRACEKERN_NUM_THREADS"] = "many"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode != 0 and "TRACEKERN_NUM_THREADS must be a positive integer or 'auto'" in out.stderr


def test_the_budget_is_at_most_the_setting_and_the_cores_and_shared_by_steps_in_flight():
    with tk.config.override(threads=1):
        assert threads.available() == 1
    assert 1 <= threads.available() <= threads.cores()
    assert threads._LOAD.busy_cores() >= 0.0
    threads._IN_FLIGHT[0] += 1000        # (many steps at once: one thread each)
    try:
        assert threads.available() == 1
    finally:
        threads._IN_FLIGHT[0] -= 1000


def _heavy(w, x):
    """A GEMM large enough for the BLAS pool, and elementwise loops and a sum over 2**17 values (prange)."""
    h = np.tanh(x @ w)
    return np.sum(h * h) + np.sum(np.sin(np.linspace(0, 1, 1 << 17, dtype=x.dtype) * np.sum(h)))


def test_results_are_identical_whatever_the_thread_count():
    rng = np.random.default_rng(0)
    w, x = rng.standard_normal((128, 128)), rng.standard_normal((64, 128))
    results = []
    for n in (1, 2, None):
        with tk.config.override(threads=n):
            f = tk.jit(tk.value_and_grad(_heavy, argnums=(0, 1)))
            results.append(f(w, x))
            if n == 1:
                assert threads.numba_threads() == 1      # the budget reached Numba's pool
    step = next(iter(f._cache.values())).run
    assert step._parallel and step._blas                 # (both pools are in play)
    for r in results[1:]:
        _same(results[0], r)
    want = tk.jit(tk.value_and_grad(_heavy, argnums=(0, 1)), backend="interpret")(w, x)
    np.testing.assert_allclose(results[0][0], want[0], rtol=1e-9)


def test_blas_is_put_back_after_a_step_and_small_steps_leave_the_pools_alone():
    controllers = threads._BLAS.find()
    if not controllers:
        pytest.skip("threadpoolctl found no BLAS library here")
    before = [c.get_num_threads() for c in controllers]
    rng = np.random.default_rng(1)
    with tk.config.override(threads=1):
        tk.jit(_heavy)(rng.standard_normal((128, 128)), rng.standard_normal((64, 128)))
    assert [c.get_num_threads() for c in controllers] == before
    small = tk.jit(lambda x: np.tanh(x) * 2)
    small(np.ones(8))
    assert not next(iter(small._cache.values())).run._budgeted


# -- loops compiled whole: bit for bit the loops driven from the step ---------------------------------
def _programs():
    def scanned(x, xs, ck):
        def step(h, r):
            h = np.tanh(h * 0.9 + r) * np.cos(h)
            return h, np.sum(h * r)
        h, ys = tk.scan(step, x, xs, checkpoint=ck)
        return np.sum(h * h) + np.sum(ys)

    def whiled(x, ck):   # a trip count known only at run time
        return np.sum(tk.while_loop(lambda c: np.sum(c) < 40.0, lambda c: c * 1.3 + np.sin(c) * 0.1, x, checkpoint=ck) ** 2)

    def nested(x, xs):
        def outer(i, c):
            return tk.while_loop(lambda s: np.sum(s) < 3.0 * (i + 1), lambda s: s * 1.1 + 0.05, c)
        return np.sum(tk.fori_loop(0, 3, outer, x) ** 2) + scanned(x, xs, None)

    x, xs = np.linspace(0.1, 0.6, 5), np.sin(np.arange(40.0)).reshape(8, 5) * 0.3
    return [("scan", lambda a, b: scanned(a, b, None), (x, xs)), ("scan k=3", lambda a, b: scanned(a, b, 3), (x, xs)),
            ("scan auto", lambda a, b: scanned(a, b, "auto"), (x, xs)), ("while", lambda a: whiled(a, None), (x,)),
            ("while k=2", lambda a: whiled(a, 2), (x,)), ("while 100B", lambda a: whiled(a, "100B"), (x,)),
            ("nested", nested, (x, xs))]


@pytest.mark.parametrize("backend", ["interpret", "cpu", "cuda"])
def test_compiled_loops_are_bit_identical_to_loops_driven_from_the_step(backend):
    for name, f, args in _programs():
        got = {}
        for compiled in (True, False):
            with tk.config.override(compiled_loops=compiled):
                value = tk.jit(f, backend=backend)(*args)
                vg = tk.jit(tk.value_and_grad(f), backend=backend)(*args)
            got[compiled] = (np.asarray(value), tuple(np.asarray(v) for v in vg))
        _same(got[True], got[False])
        assert np.isfinite(got[True][0]) and np.any(got[True][1][1] != 0), name   # (not an empty result)
    if backend == "cpu":   # and compiled whole they are: one njit function a loop
        with tk.config.override(compiled_loops=True):
            source = tk.jit(tk.grad(_programs()[1][1])).lower(*_programs()[1][2]).source
        assert "def loop0(" in source and "for a in range(acts.shape[0]):" in source


def test_checkpointed_gradients_equal_the_unchecked_ones_and_match_finite_differences():
    progs = {name: (f, args) for name, f, args in _programs()}
    for plain, checked in (("scan", ("scan k=3", "scan auto")), ("while", ("while k=2", "while 100B"))):
        f, args = progs[plain]
        want = tk.jit(tk.grad(f))(*args)
        for name in checked:
            _same(tk.jit(tk.grad(progs[name][0]))(*args), want)
        tk.check_grad(f, args, argnums=(0,))


def test_a_small_loop_is_never_driven_from_python():
    """A scan of 20 steps whose body makes 10 kernel calls: from Python into compiled code, one step
    makes a few calls compiled whole, and at least 20 x 10 driven from the step."""
    from bench import calls

    def f(ws, h):
        def body(h, _):
            for w in ws:
                h = np.tanh(h @ w)
            return h, np.sum(h)
        h, ys = tk.scan(body, h, None, length=20)
        return np.sum(h) + np.sum(ys)

    rng = np.random.default_rng(2)
    args = ([rng.standard_normal((4, 4)) * 0.5 for _ in range(5)], rng.standard_normal(4))
    counts = {}
    for compiled in (True, False):
        with tk.config.override(compiled_loops=compiled):
            counts[compiled] = calls._count(tk.jit(tk.value_and_grad(f)), args)[1]
    assert counts[True] < 20 <= 20 * 10 <= counts[False]


# -- checkpoint budgets ----------------------------------------------------------------------------------
def test_a_budget_chooses_the_fewest_slots_that_rerun_the_least_it_allows():
    for n in (2, 3, 10, 30, 100, 1000):
        for carries in (1, 2, 3, 7, 31, 64, 5000):
            k = schedule.best_slots(n, carries)
            assert 1 <= k <= max(min(carries, n), 1)
            if carries < n:
                assert schedule.revolve_bound(n, k) == schedule.revolve_bound(n, carries)
                assert k == 1 or schedule.revolve_bound(n, k - 1) > schedule.revolve_bound(n, k)
                done, advanced, used = schedule.simulate(n, schedule.actions(n, k))
                assert done == list(reversed(range(n))) and used <= k
    assert schedule.slots(100, "auto") == schedule.best_slots(100, 20) and schedule.auto_carries(100) == 20
    assert schedule.slots(50, ("within", 7)) == schedule.best_slots(50, 7) and schedule.slots(5, None) == 5


def test_the_first_sweep_is_the_schedule_up_to_its_first_backward_step():
    for n, k in ((2, 1), (10, 3), (37, 5), (100, 9)):
        slot_at, positions, first = schedule.first_sweep(n, k)
        acts = schedule.actions(n, k)
        assert acts[first, 0] == schedule.REVERSE and schedule.REVERSE not in acts[:first, 0]
        _, advanced, _ = schedule.simulate(n, acts[:first])
        assert advanced == n - 1                                   # the forward pass runs those steps anyway
        stores = {int(arg) for op, arg in acts[:first] if op == schedule.STORE}
        assert {int(s) for s in slot_at if s >= 0} == stores and slot_at[n - 1] == -1
        assert all(positions[slot_at[p]] == p for p in range(n) if slot_at[p] >= 0)


def test_checkpoint_budgets_are_parsed_and_checked():
    x, xs = np.ones(4), np.ones((30, 4))
    f = lambda ck: (lambda a, b: np.sum(tk.scan(lambda c, r: (c * 0.5 + r, ()), a, b, checkpoint=ck)[0]))  # noqa: E731
    def k_of(ck):
        ir = tk.make_ir(f(ck), mode="grad")(x, xs)
        return [e.params["checkpoint"] for e in ir.eqns if e.primitive.name == "scan_revolve"]
    assert k_of("auto") == [schedule.slots(30, "auto")] == [11]
    assert k_of("3.2 KiB") == []                                   # every carry fits: no checkpointing
    assert k_of("200B") == [schedule.best_slots(30, 200 // 32)]
    with pytest.raises(ValueError, match="holds no carry: one carry is 32 bytes, so give at least '32B'"):
        k_of("31B")
    for bad in ("lots", "12 parsecs", 0, -2, 2.5):
        with pytest.raises(ValueError, match="checkpoint must be"):
            k_of(bad)
    ir = tk.make_ir(lambda a: np.sum(tk.while_loop(lambda c: c.sum() < 9, lambda c: c * 2, a, checkpoint="64B")),
                    mode="grad")(x)
    assert [e.params["checkpoint"] for e in ir.eqns if e.primitive.name in ("while", "scan_revolve")] == [("within", 2)] * 2


# -- a plain-Python driver's kept buffers (cpu_runtime.Workspace) and direct kernel entry points ------------------
def _cpu_step(f, *args, jf=None):
    """The compiled step of tk.jit(f, tiers=False) (or of jf) for these arguments, after one call: the
    one its own signature cache holds (not found among all live steps: another test's step of the same
    shapes may be alive in this process)."""
    from tracekern.backends.cpu_runtime import CompiledStep
    jf = jf or tk.jit(f, backend="cpu", tiers=False)
    jf(*args)
    want = tuple((np.shape(a), np.asarray(a).dtype) for a in args)
    steps = [e.run for e in jf._cache.values() if type(e.run) is CompiledStep
             and tuple((v.shape, v.dtype) for v in e.graph.inputs) == want]
    assert len(steps) == 1, steps
    return jf, steps[0]


def test_results_a_caller_holds_are_never_overwritten_by_later_calls():
    """Outputs, views of outputs and an output computed twice: each call's results stay as they were
    when later calls reuse the step's buffers (cpu), in every way an output can reach a kept buffer."""
    def f(x):
        h = np.tanh(x) * 2.0
        g = np.sin(h) + x
        return {"g": g, "gt": g.T, "row": g[1], "flat": (h * h).reshape(-1), "s": np.sum(g * h)}

    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(3, 4)) for _ in range(4)]
    jf, step = _cpu_step(f, xs[0])
    assert step.straight and step.arena   # (the case this test is about: a kept workspace)
    held = [jf(x) for x in xs]
    for x, out in zip(xs, held):
        ref = f(x)
        assert tk.tree_flatten(out)[1] == tk.tree_flatten(ref)[1]
        for k in ref:
            np.testing.assert_allclose(out[k], ref[k], rtol=1e-12, atol=1e-12)
    assert not np.shares_memory(held[0]["g"], held[1]["g"])
    import weakref
    out = jf(xs[0])["g"]
    gone = weakref.ref(out)
    del out
    assert gone() is None   # (a result the caller dropped is not kept alive by the step's buffers)
    assert step._spare
    with tk.config.override(keep_buffers=False):   # (nothing kept between calls: the spare goes)
        np.testing.assert_allclose(jf(xs[1])["g"], f(xs[1])["g"], rtol=1e-12, atol=1e-12)
        assert not step._spare


def test_a_result_s_memory_is_reused_once_the_caller_drops_it_and_never_while_anything_holds_it():
    """A slot whose buffer a call returns gets, on later calls, one of the last two buffers it handed out
    if nothing references it any more (no result, no view of one, no memoryview): no fresh pages a call.
    The caller gets its own view of the buffer, so a result it drops dies (a weak reference to it too)
    while the memory stays for reuse; whatever it still holds keeps its values."""
    import threading
    import weakref

    from tracekern.backends import cpu_runtime

    if not cpu_runtime._POOLS:
        pytest.skip("a free-threaded Python: no pools (its reference counts are not exact)")

    def f(x):
        h = np.tanh(x) * 2.0
        g = np.sin(h) + x
        return {"g": g, "gt": g.T, "row": g[1], "s": np.sum(g * h), "pos": g > 0, "at": np.argmax(g, axis=1)}

    rng = np.random.default_rng(3)
    xs = [rng.normal(size=(3, 4)) for _ in range(8)]
    jf, step = _cpu_step(f, xs[0])
    jf(xs[0])   # (the output slots are learned: from here on the results' buffers come from the pools)
    r = jf(xs[0])
    base = weakref.ref(r["g"].base)
    result = weakref.ref(r["g"])
    assert base() is not None and np.shares_memory(r["g"], base())
    del r
    assert result() is None and base() is not None   # (the caller's array dies, the step keeps the memory)
    r = jf(xs[1])
    assert r["g"].base is base()                     # (reused: nothing held it)
    np.testing.assert_allclose(r["g"], f(xs[1])["g"], rtol=1e-12, atol=1e-12)
    # a loop `r = jf(x)` holds the last result while it calls: two buffers take turns
    seen = set()
    for x in xs:
        r = jf(x)
        seen.add(id(r["g"].base))
        np.testing.assert_allclose(r["g"], f(x)["g"], rtol=1e-12, atol=1e-12)
    assert len(seen) == cpu_runtime.POOL_DEPTH, seen
    # a caller that drops its results before the next call: one buffer a slot, the other freed
    del r
    kept = jf(xs[1])
    (ws,) = step._spare
    assert ws._pools and max(len(pool) for pool in ws._pools.values()) == 1, ws._pools
    assert any(kept["g"].base is pool[0] for pool in ws._pools.values())
    # held in every way but the result itself: a view, a memoryview, a transposed output; never overwritten
    keep = []
    for i, x in enumerate(xs):
        out = jf(x)
        keep.append((i, out["g"][1:], memoryview(out["g"]), out["gt"], out["row"], out["pos"][:, 1:], out["at"].base))
        del out
    for i, tail, mv, gt, row, pos, at in keep:
        want = f(xs[i])
        np.testing.assert_allclose(tail, want["g"][1:], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(np.asarray(mv), want["g"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gt, want["gt"], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(row, want["row"], rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(pos, want["pos"][:, 1:])
        np.testing.assert_array_equal(at.reshape(-1)[:3], want["at"])   # (held by its pooled buffer alone)
    # tk.vjp's residuals, held by pullbacks across later calls
    def loss(v):
        return np.sum(np.sin(v) * np.tanh(v) ** 2)
    with tk.config.override(tiers=False):   # (compiled from the first call: the pools are the compiled steps')
        pulls = [(x, tk.vjp(loss, x)[1]) for x in xs]
    for x, pull in pulls:
        want = np.cos(x) * np.tanh(x) ** 2 + np.sin(x) * 2 * np.tanh(x) * (1 - np.tanh(x) ** 2)
        np.testing.assert_allclose(pull(1.0)[0], want, rtol=1e-10, atol=1e-12)
    # a result fed back as the next call's input
    h, want = xs[0], xs[0]
    for _ in range(6):
        h, want = jf(h)["g"], f(want)["g"]
    np.testing.assert_allclose(h, want, rtol=1e-10, atol=1e-12)
    # threads calling one step at once, each holding its results
    errors = []

    def run(seed):
        local = np.random.default_rng(seed)
        got = [(x, jf(x)) for x in (local.normal(size=(3, 4)) for _ in range(30))]
        for x, out in got:
            if not np.allclose(out["g"], f(x)["g"], rtol=1e-12, atol=1e-12):
                errors.append(seed)
    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_kernels_called_past_their_dispatchers_get_the_types_they_were_compiled_for():
    """The entry points are bound per argument types: a strided, a read-only and a float32 input after a
    contiguous float64 one each run their own kernels (results equal NumPy's), and the gradient's step
    agrees with the interpreter call after call."""
    def f(x):
        return np.exp(np.sin(x) * x) + np.cos(x) ** 2

    rng = np.random.default_rng(1)
    base = rng.normal(size=(8, 6))
    jf, step = _cpu_step(f, base[:4])
    ro = base[4:].copy()
    ro.flags.writeable = False
    for x in (base[:4], base[::2], ro, base[:4].astype(np.float32), base[:4]):
        for _ in range(3):   # (the first call with new types records them, the next ones bind)
            got = jf(x)
            assert got.dtype == f(x).dtype
            np.testing.assert_allclose(got, f(x), rtol=1e-5 if x.dtype == np.float32 else 1e-12)
    assert len(step._bound) == 3   # (contiguous, strided, read-only; float32 inputs make another step)
    # found by review: one fingerprint (2-D float64, layout A), but x[5:6] of every other row is C-contiguous
    # and of every other column is not: the binding is per strides too
    def pins(x):
        return x[5] * 2.0 + x[7]   # (the driver passes the kernel a0[5:6] and a0[7:8])

    rows = np.arange(16 * 8, dtype=np.float64).reshape(16, 8)[::2]
    cols = np.arange(8 * 16, dtype=np.float64).reshape(8, 16)[:, ::2]
    jp = tk.jit(pins, backend="cpu", tiers=False)
    for x in (rows, rows, rows, cols, cols, cols, rows):
        np.testing.assert_array_equal(jp(x), pins(x))
    assert any(type(b).__name__ == "SimpleNamespace" for b in step._bound.values())
    g = tk.grad(lambda x: np.sum(f(x)))
    x = base[:4]
    for _ in range(3):
        np.testing.assert_allclose(tk.jit(g, backend="cpu", tiers=False)(x), tk.jit(g, backend="interpret")(x),
                                   rtol=1e-12, atol=1e-12)


def test_threads_calling_one_step_each_get_their_own_buffers():
    """Two threads calling the same compiled step at once: each result is its own input's."""
    import threading

    def f(x):
        return np.sum(np.tanh(x) * x, axis=0) + np.max(x)

    rng = np.random.default_rng(2)
    xs = [rng.normal(size=(64, 32)) for _ in range(8)]
    jf, step = _cpu_step(f, xs[0])
    assert step.straight and step.arena
    results: dict = {}
    errors: list = []

    def work(i):
        try:
            for _ in range(50):
                out = jf(xs[i])
                np.testing.assert_allclose(out, f(xs[i]), rtol=1e-12, atol=1e-12)
            results[i] = out
        except Exception as err:   # (reported below, in the main thread)
            errors.append(err)

    threads_ = [threading.Thread(target=work, args=(i,)) for i in range(len(xs))]
    for t in threads_:
        t.start()
    for t in threads_:
        t.join()
    assert not errors and len(results) == len(xs)


def test_kept_buffers_stay_within_the_process_budget_and_old_pickles_load(monkeypatch):
    """All steps' kept workspaces hold at most cpu_runtime.KEPT_TOTAL_BYTES: a function called on many
    shapes (a step each) drops the workspaces made longest ago. A step pickled before the workspace
    existed (no such attributes) still runs."""
    import pickle

    from tracekern.backends import cpu_runtime

    def f(x):
        return np.sum(np.sort(x) * np.tanh(x))

    jf = tk.jit(f, backend="cpu", tiers=False)
    steps = [_cpu_step(f, np.ones((100 + k, 50)), jf=jf)[1] for k in range(4)]
    each = max(s._arena_bytes for s in steps)
    monkeypatch.setattr(cpu_runtime, "KEPT_TOTAL_BYTES", 2 * each)
    for s in steps:   # (made before the budget was lowered: each keeps a new workspace below)
        s._spare.clear()
    for k in range(4):
        for _ in range(2):
            np.testing.assert_allclose(jf(np.ones((100 + k, 50))), f(np.ones((100 + k, 50))), rtol=1e-12)
    kept = [s for s in steps if s._spare]
    assert kept and sum(s._arena_bytes * len(s._spare) for s in kept) <= 2 * each
    assert steps[-1]._spare   # (the latest kept its own)
    state = steps[0].__getstate__()
    for name in ("straight", "_arena_bytes", "_spare", "_escaping", "_bound"):   # (an old pickle's driver takes
        state.pop(name)                                                          # no W: its arena is None too)
    old = pickle.loads(pickle.dumps(steps[0]))
    old.__dict__.clear()
    old.__setstate__(state)
    x = np.ones((100, 50))
    np.testing.assert_allclose(old([x])[0], f(x), rtol=1e-12)


def test_the_calls_table_counts_the_kernel_calls_of_a_step_whose_kernels_are_called_directly():
    """bench.calls counts a straight-line step's kernel calls even once its kernels are called past
    their dispatchers (the entry points bound on the second call): one count per kernel call."""
    from bench import calls

    def f(x):
        return np.sum(np.sort(x, axis=1) * np.tanh(x)) + np.max(x @ x.T)

    jf = tk.jit(tk.value_and_grad(f), backend="cpu", tiers=False)
    x = np.random.default_rng(3).normal(size=(6, 5))
    _, step = _cpu_step(None, x, jf=jf)
    for _ in range(3):
        jf(x)
    assert step.straight and step._bound   # (bound: the calls below would skip the driver's names)
    want = step.driver.count("# kernel ")
    assert want >= 3
    units, every, kernels = calls._count(jf, (x,))
    assert (units, kernels) == (step.units, want) and every >= kernels
    assert step._bound   # (given back)


def test_entry_points_are_bound_only_after_a_whole_call_was_recorded(monkeypatch):
    """A first call with new argument types that stops midway (here a kernel raises) has not recorded the
    call sites after it: the next call records again instead of binding entry points from half a record
    (found by tests/test_dask.py: threads making their first calls at once bound one while another was
    recording, and a gradient came out wrong)."""
    from tracekern.backends import cpu_runtime

    def loss(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    rng = np.random.default_rng(4)
    w, x = rng.normal(size=(6, 5)), rng.normal(size=(8, 6))
    g = tk.jit(tk.grad(loss, argnums=(0, 1)), backend="cpu", tiers=False)
    _, step = _cpu_step(None, w, x, jf=g)
    module = step._module
    kernels = sorted(k for k, v in vars(module).items() if k[:1] == "K" and hasattr(v, "overloads"))
    assert step.straight and len(kernels) >= 2
    last, real = kernels[-1], getattr(module, kernels[-1])

    calls = []

    def fails_once(*a):
        calls.append(a)
        if len(calls) == 1:
            raise FloatingPointError("stopped midway")
        return real(*a)
    xf = np.asfortranarray(x)   # (new strides: a new record)
    monkeypatch.setattr(module, last, fails_once)
    with pytest.raises(FloatingPointError):
        g(w, xf)
    (recorder,) = [b for b in step._bound.values() if isinstance(b, cpu_runtime._Recorder) and not b.done]
    want = tk.jit(tk.grad(loss, argnums=(0, 1)), backend="interpret")(w, xf)
    for _ in range(3):
        assert_tree_close(g(w, xf), want)
    assert recorder.done


def test_first_calls_from_many_threads_at_once_give_the_right_results():
    """Threads making the first calls of new argument types at once (a dask scheduler of threads does):
    every result is the interpreter's, whichever call records the kernels' types and whichever binds."""
    import threading

    def loss(w1, w2, x):
        h = np.tanh(x @ w1)
        return np.sum((h @ w2.T) ** 2) + np.sum(h.T @ x)

    rng = np.random.default_rng(5)
    w1, w2, base = rng.normal(size=(6, 7)), rng.normal(size=(3, 7)), rng.normal(size=(16, 12))
    g = tk.jit(tk.value_and_grad(loss, argnums=(0, 1, 2)), backend="cpu", tiers=False)
    ref = tk.jit(tk.value_and_grad(loss, argnums=(0, 1, 2)), backend="interpret")
    g(w1, w2, np.ascontiguousarray(base[:8, :6]))
    errors = []
    for x in (base[::2, :6], base[:8, ::2], np.asfortranarray(base[:8, :6]), base[8:, 6:], base[::2, 6:]):
        want = ref(w1, w2, x)
        barrier = threading.Barrier(4)

        def work(x=x, want=want, barrier=barrier):
            try:
                barrier.wait()
                for _ in range(6):
                    assert_tree_close(g(w1, w2, x), want)
            except Exception as err:   # (reported below, in the main thread)
                errors.append(err)
        threads_ = [threading.Thread(target=work) for _ in range(4)]
        for t in threads_:
            t.start()
        for t in threads_:
            t.join()
    assert not errors, errors[0]
