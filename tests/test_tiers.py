"""Tiered execution on cpu (tracekern/backends/tiers.py): a new step runs on NumPy while its kernels
compile in the background, and switches kernel by kernel; results agree in every tier.

Tolerance: the NumPy tier and the compiled kernels differ only by the order of floating-point sums
(chunked reductions, fused expressions): rtol 1e-12 in float64 here; random numbers bit for bit."""
import os
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest

import tracekern as tk
from tracekern import passes, staging
from tracekern.backends import cache, cpu, cpu_runtime, tiers, workers

RTOL = 1e-12


def _loss(w, x, key):
    """A few kernels: a matmul, fused elementwise loops, reductions, a random draw (dropout)."""
    h = np.tanh(x @ w)
    keep = tk.random.uniform(key, h.shape) < 0.8
    h = np.where(keep, h / 0.8, 0.0)
    return np.sum(h * h) + np.mean(np.exp(-x)), h


def _numpy_loss(w, x, keep):
    h = np.tanh(x @ w)
    h = np.where(keep, h / 0.8, 0.0)
    return np.sum(h * h) + np.mean(np.exp(-x))


def _args(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((8, 4)), rng.standard_normal((5, 8)), tk.random.key(seed)


def _step(f, *args):
    """The one cpu step f runs (a tk.jit function called once on these arguments)."""
    (entry,) = f._cache.values()
    return entry.run


def _check(out, ref):
    """Same structure; the random draw (h's zeros) bit-identical; values to RTOL."""
    (value, h), grads = out
    (rvalue, rh), rgrads = ref
    assert tk.tree_flatten(out)[1] == tk.tree_flatten(ref)[1]
    np.testing.assert_array_equal(h == 0, rh == 0)
    np.testing.assert_allclose(value, rvalue, rtol=RTOL)
    np.testing.assert_allclose(h, rh, rtol=RTOL, atol=1e-15)
    for g, r in zip(grads, rgrads):
        np.testing.assert_allclose(g, r, rtol=RTOL, atol=1e-15)


@pytest.fixture(autouse=True)
def no_plan_cache(monkeypatch):
    """Each test starts a new step (a plan cached by an earlier test or run would start it compiled)."""
    monkeypatch.setattr(staging, "_load_plan", lambda key, variables: None)


@pytest.fixture
def eager(monkeypatch):
    """Compiling starts on the first call (the rule's thresholds lowered)."""
    monkeypatch.setattr(tiers, "COMPILE_AFTER_CALLS", 1)


def _fresh():
    return tk.jit(tk.value_and_grad(_loss, argnums=(0, 1), has_aux=True), tiers=True)


def test_results_are_the_same_in_every_tier(eager):
    w, x, key = _args()
    ref = tk.jit(tk.value_and_grad(_loss, argnums=(0, 1), has_aux=True), backend="interpret")(w, x, key)
    f = _fresh()
    first = f(w, x, key)
    step = _step(f)
    assert step.tier in ("numpy", "mixed")
    _check(first, ref)
    assert tiers.wait(120)
    assert step.tier == "compiled" and step.per_kernel, step._errors
    assert isinstance(_step(f), cpu.CompiledStep)   # (the entry calls the compiled step itself now)
    _check(f(w, x, key), ref)
    # against plain NumPy: the value, and the gradient by central differences
    (value, h), (gw, _) = ref
    keep = h != 0
    np.testing.assert_allclose(value, _numpy_loss(w, x, keep), rtol=1e-12)
    eps, fd = 1e-6, np.zeros_like(w)
    for i in np.ndindex(w.shape):
        d = np.zeros_like(w)
        d[i] = eps
        fd[i] = (_numpy_loss(w + d, x, keep) - _numpy_loss(w - d, x, keep)) / (2 * eps)
    np.testing.assert_allclose(gw, fd, rtol=1e-6, atol=1e-8)


def test_a_switch_mid_run_changes_nothing_observable():
    """Kernels switched one at a time (each step of the way a mix of NumPy and compiled kernels):
    every call gives the same results as the first."""
    w, x, key = _args(1)
    f = _fresh()
    first = f(w, x, key)
    step = _step(f)
    assert step.tier == "numpy" and step._step is None   # (the interpreter: nothing planned yet)
    step.prepare()
    assert step.per_kernel
    _check(f(w, x, key), first)   # (the driver, every kernel evaluated with NumPy)
    jobs = step.kernel_jobs([w, x, key])
    assert len(jobs) >= 3
    modules = [cache.load_module(s) for s in step.modules[:-1]]
    for n, (i, sig) in enumerate(jobs):
        modules[i].kernel.compile(sig)
        setattr(step._slow, f"K{i}", modules[i].kernel)
        step._switched.add(i)
        assert step.tier == "mixed"
        _check(f(w, x, key), first)
        if n == 0:
            _check(f(w * 1, x * 1, key), first)   # (new arrays: nothing cached by identity)


def test_a_loop_step_switches_whole():
    """A step with control flow (a scan: an njit loop) runs the interpreter, then the compiled step."""
    def run(c, xs):
        return tk.scan(lambda c, x: (np.sin(c) * x + c, c * x), c, xs)

    c, xs = np.linspace(0.1, 1.0, 3), np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    ref = tk.jit(run, backend="interpret")(c, xs)
    f = tk.jit(run, tiers=True)
    first = f(c, xs)
    step = _step(f)
    f.compile(c, xs)
    assert step.tier == "compiled" and not step.per_kernel
    for out in (first, f(c, xs)):
        assert tk.tree_flatten(out)[1] == tk.tree_flatten(ref)[1]
        for a, b in zip(tk.tree_flatten(out)[0], tk.tree_flatten(ref)[0]):
            np.testing.assert_allclose(a, b, rtol=RTOL)


def test_the_numpy_tier_warns_no_more_than_compiled_code():
    """log(0), 0/0, overflow: inf and nan as compiled kernels give them, without NumPy's RuntimeWarnings."""
    def fn(x):
        return np.log(x) + x / x + np.exp(x * 1000.0)

    x = np.array([0.0, 1.0, 2.0])
    f = tk.jit(fn, tiers=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = f(x)
        assert _step(f).tier == "numpy"
        f.compile(x)
        np.testing.assert_array_equal(f(x), out)
    assert np.isnan(out[0]) and np.isinf(out[2])


def test_tiers_false_compiles_before_the_first_call_returns():
    w, x, key = _args(2)
    for f in (tk.jit(tk.value_and_grad(_loss, has_aux=True), tiers=False), None):
        if f is None:   # the global setting
            with tk.config.override(tiers=False):
                f = tk.jit(tk.value_and_grad(_loss, has_aux=True))
                f(w, x, key)
        else:
            f(w, x, key)
        step = _step(f)
        assert isinstance(step, cpu.CompiledStep) and step._module is not None
        modules = [cache.load_module(s) for s in step.modules[:-1]]
        assert modules and all(m.kernel.signatures for m in modules)


def test_compile_ahead_of_time_waits():
    w, x, key = _args(3)
    for how in ("compile", "lower"):
        f = _fresh()
        if how == "compile":
            assert f.compile(w, x, key) is f
        else:
            f.lower(w, x, key).compile()
        assert isinstance(_step(f), cpu.CompiledStep)   # (the entry calls the compiled step itself now)
        out = f(w, x, key)
        _check(out, tk.jit(tk.value_and_grad(_loss, argnums=(0, 1), has_aux=True), backend="interpret")(w, x, key))


def test_the_rule_compiles_nothing_for_a_program_called_once(monkeypatch):
    monkeypatch.setattr(tiers, "COMPILE_AFTER_SECONDS", 1e9)
    monkeypatch.setattr(tiers, "COMPILE_AFTER_CALLS", 2)
    w, x, key = _args(4)
    f = _fresh()
    f(w, x, key)
    step = _step(f)
    assert not step._started
    f(w, x, key)
    assert step._started


@pytest.mark.parametrize("loop", [False, True])
def test_a_failing_compile_is_reported_and_the_slow_tier_keeps_working(eager, monkeypatch, loop):
    def fail(self, *args, **kwargs):
        raise RuntimeError("LLVM ran out of patience")

    monkeypatch.setattr(tiers.TieredStep, "_compile_kernels", fail)
    monkeypatch.setattr(cpu.CompiledStep, "compile", fail)
    if loop:
        def fn(c, xs):
            return tk.scan(lambda c, x: (c * x + 1.0, c), c, xs)[0]
        args = (np.ones(3), np.full((4, 3), 0.5))
    else:
        def fn(a, b):
            return np.exp(a) @ b
        args = (np.full((2, 3), 0.25), np.ones((3, 2)))
    ref = tk.jit(fn, backend="interpret")(*args)
    f = tk.jit(fn, tiers=True)
    np.testing.assert_allclose(f(*args), ref, rtol=RTOL)
    assert tiers.wait(60)
    with pytest.warns(tk.CompileWarning, match="LLVM ran out of patience"):
        np.testing.assert_allclose(f(*args), ref, rtol=RTOL)
    assert _step(f).tier == "numpy"
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # (reported once)
        np.testing.assert_allclose(f(*args), ref, rtol=RTOL)


_SHARED = textwrap.dedent("""
    import sys, time
    import numpy as np
    import tracekern as tk
    from tracekern.backends import tiers
    tiers.COMPILE_AFTER_CALLS = 1

    def loss(w, x):
        h = np.tanh(x @ w)
        return np.sum(h * h) + np.max(np.abs(x), axis=0).sum()

    rng = np.random.default_rng(7)
    w, x = rng.standard_normal((8, 4)), rng.standard_normal((5, 8))
    ref = tk.jit(tk.value_and_grad(loss), backend="interpret")(w, x)
    from tracekern import staging
    traces, trace = [], staging.trace_to_graph
    staging.trace_to_graph = lambda *a, **k: traces.append(1) or trace(*a, **k)   # (the cpu step's traces)
    f = tk.jit(tk.value_and_grad(loss), tiers=True)
    seen, end = set(), time.monotonic() + 120
    while time.monotonic() < end:
        v, g = f(w, x)
        np.testing.assert_allclose(v, ref[0], rtol=1e-12)
        np.testing.assert_allclose(g, ref[1], rtol=1e-12, atol=1e-15)
        (entry,) = f._cache.values()
        tier = getattr(entry.run, "tier", "compiled")   # (the compiled step itself, once the tiers are done)
        seen.add(tier)
        if tier == "compiled":
            break
    assert "compiled" in seen, seen
    print("ok", sorted(seen), "traced" if f.trace_count or traces else "from the plan cache, not traced")
""")


def test_two_processes_sharing_one_cache_directory_stay_correct(tmp_path):
    script = tmp_path / "shared.py"
    script.write_text(_SHARED)
    root = os.path.dirname(os.path.dirname(os.path.abspath(tk.__file__)))
    env = dict(os.environ, TRACEKERN_CACHE_DIR=str(tmp_path / "cache"), TRACEKERN_TIERS="1", TRACEKERN_PLAN_CACHE="1",
               TRACEKERN_PLAN_CODE_KEY="1", PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, str(script)], env=env, cwd=root, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        assert out.startswith("ok"), out
    # a third process finds the finished step in the plan cache by its code's digest (tk.config.plan_code_key):
    # not even traced, compiled from its first call
    third = subprocess.run([sys.executable, str(script)], env=env, cwd=root, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0, third.stderr
    assert third.stdout.strip() == "ok ['compiled'] from the plan cache, not traced", third.stdout


@pytest.mark.parametrize("after, lines", [(0.0, 1), (30.0, 0)])
def test_a_compile_waited_for_says_so_on_stderr_once(monkeypatch, capfd, after, lines):
    """A compile the caller waits for that takes longer than cpu_runtime.PROGRESS_AFTER_S prints one line on
    stderr with the count of kernels (and nothing when it is quicker)."""
    slow = workers.compile_all

    def compile_all(jobs, here):
        time.sleep(0.3)
        return slow(jobs, here)

    monkeypatch.setattr(cpu_runtime, "PROGRESS_AFTER_S", after)
    monkeypatch.setattr(workers, "compile_all", compile_all)
    monkeypatch.setattr(cache, "on_disk", lambda source: False)   # (every kernel counts as missing)
    f = tk.jit(lambda x: np.sum(np.tanh(x) * 3.0), tiers=False)
    x = np.linspace(0.0, 1.0, 5)
    assert f(x) == pytest.approx(np.sum(np.tanh(x) * 3.0))
    time.sleep(0.1)
    err = capfd.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("tracekern: compiling")]
    assert len(said) == lines, err
    if lines:
        assert "kernel" in said[0] and "tiers" in said[0]


def test_the_numpy_tier_runs_large_elementwise_chains_in_blocks_on_threads(monkeypatch):
    """interpret._Run: the NumPy tier evaluates runs of elementwise equations over large arrays a block
    of rows at a time on threads (W1's first result). The same values as the oracle, whole-array NumPy
    (the interpreter unblocked) and central differences; a broadcast row and a scalar operand; the
    tier's silenced floating-point warnings reach the threads; nothing is compiled."""
    from tracekern.backends import interpret

    monkeypatch.setattr(tiers, "COMPILE_AFTER_SECONDS", 1e9)
    monkeypatch.setattr(tiers.threads, "available", lambda: 2)   # (two threads, however busy the machine)
    rows, cols = 600, 512                                     # 307,200 values: above interpret.BLOCKED_MIN
    rng = np.random.default_rng(5)
    x, b = rng.uniform(-1, 1, (rows, cols)), rng.uniform(-1, 1, cols)

    def fn(x, b):
        y = np.tanh(x * 0.9 + 0.1) * np.sin(x)
        return np.sum(np.exp(-y * y) + np.log(x + 1.0) * (y + b) / x)   # (log(0), x/0 nowhere: x != 0, -1)

    def terms(x, b):   # (each value's term of the sum, in plain NumPy)
        y = np.tanh(x * 0.9 + 0.1) * np.sin(x)
        return np.exp(-y * y) + np.log(x + 1.0) * (y + b) / x

    graph = passes.inline_calls(tk.make_ir(tk.value_and_grad(fn, argnums=(0, 1)))(x, b))
    f = tk.jit(tk.value_and_grad(fn, argnums=(0, 1)), tiers=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        x0 = x.copy()
        x0[0, :3] = (0.0, -1.0, 0.0)                          # 0/0, log(0): nan and inf, silently
        bad = f(x0, b)
        assert np.isnan(bad[0]) and _step(f).tier == "numpy"
        out = f(x, b)
    step = _step(f)
    assert step.tier == "numpy" and not step._started
    plan = [item for item, _ in step._interp.plan]
    blocked = [item for item in plan if isinstance(item, interpret._Run)]
    assert blocked and sum(len(r.eqns) for r in blocked) >= 10, "the chain runs in blocks"
    # (interpret._grouped: the forward, the backward and the constants between them ordered into one run)
    assert len(blocked) == 1 and {"tanh", "cos"} <= {e.primitive.name for e in blocked[0].eqns}, plan
    ref = tk.jit(tk.value_and_grad(fn, argnums=(0, 1)), backend="interpret")(x, b)
    assert tk.tree_flatten(out)[1] == tk.tree_flatten(ref)[1]
    for o, r in zip(tk.tree_flatten(out)[0], tk.tree_flatten(ref)[0]):
        np.testing.assert_allclose(o, r, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(out[0], np.sum(terms(x, b)), rtol=1e-12)
    eps = 1e-6   # central differences of plain NumPy, of the terms a value enters (the sum's rounding aside)
    for i in [(0, 0), (17, 3), (rows - 1, cols - 1)]:
        d = np.zeros_like(x)
        d[i] = eps
        np.testing.assert_allclose(out[1][0][i], (terms(x + d, b)[i] - terms(x - d, b)[i]) / (2 * eps), rtol=1e-6)
    d = np.zeros_like(b)
    d[7] = eps
    fd = (np.sum(terms(x, b + d)[:, 7]) - np.sum(terms(x, b - d)[:, 7])) / (2 * eps)
    np.testing.assert_allclose(out[1][1][7], fd, rtol=1e-6)
    for threads in (1, 3):                                    # (any thread count: the same values)
        again = interpret.compile_graph(graph, threads=lambda n=threads: n)([x, b])
        for o, r in zip(again, tk.tree_flatten(out)[0]):
            np.testing.assert_array_equal(o, r)
