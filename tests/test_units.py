"""Compile units (backends/units.py, cpu.py, cuda.py, workers.py): each kernel is a module of its own
with canonical source, shared by every layer, step and program that has it; the fusion choices that
keep kernels equal across depth (materialized shared values, reduction epilogues); parallel compile
workers; and several processes compiling into one cache directory."""
import gc
import json
import os
import re
import subprocess
import sys
import textwrap

import numba
import numpy as np
import pytest

import tracekern as tk
import tracekern.numpy as tnp
from tracekern.backends import cache, fusion, units, workers
from tracekern.backends import cpu_kernels as tkcpu
from tracekern.backends import cuda as tkcuda


def _step(fn, args):
    """The cpu backend's compiled step (not run) for value_and_grad(fn) on the tuple args."""
    f = tk.value_and_grad(fn)
    return f._entry(f._signature(args, {})).run


def _mlp(depth):
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((16, 16)) / 4 for _ in range(depth)]
    x = rng.standard_normal((8, 16))

    def loss(ws, x):
        h = x
        for w in ws:
            h = np.tanh(h @ w)
        return np.mean(h * h)
    return loss, (ws, x)


def _block(x, p):
    w1, w2, g = p
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    h = (x - mu) / np.sqrt(var + 1e-5) * g
    att = tnp.softmax(h @ w1, axis=-1)
    return x + tnp.gelu(att @ w2)


def _transformer(blocks):
    rng = np.random.default_rng(1)
    ps = [(rng.standard_normal((8, 8)) / 3, rng.standard_normal((8, 8)) / 3, np.ones(8)) for _ in range(blocks)]
    x = rng.standard_normal((6, 8))

    def loss(ps, x):
        for p in ps:
            x = _block(x, p)
        return np.mean(x * x)
    return loss, (ps, x)


# -- kernels shared by depth ----------------------------------------------------------------------

@pytest.mark.parametrize("make", [_mlp, _transformer])
def test_distinct_kernels_do_not_grow_with_depth(make):
    counts = {}
    for depth in (1, 2, 4, 8):
        step = _step(*make(depth))
        calls = step.driver.count("# kernel ")
        counts[depth] = (step.units, calls)
    # calls grow with depth; distinct kernels stop growing after the first layers (the first blocks
    # read the input, or a residual stream of two terms, which later ones read materialized)
    assert counts[8][1] > counts[4][1] > counts[2][1] > counts[1][1], counts
    assert counts[8][0] == counts[4][0] >= counts[2][0] >= counts[1][0], counts


def test_two_programs_sharing_a_layer_shape_compile_its_kernels_once(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("TRACEKERN_COMPILE_WORKERS", "0")
    short, short_args = _mlp(2)
    deep, deep_args = _mlp(6)
    tk.value_and_grad(short)(*short_args)
    first = _step(short, short_args)
    second = _step(deep, deep_args)
    shared = set(first.modules[:-1]) & set(second.modules[:-1])
    assert len(shared) >= len(second.modules[:-1]) - 1, "the deep MLP's kernels are the short one's"

    def compiled(step):   # compilations (cache misses) of this step's kernels in this process
        total = 0
        for s in step.modules[:-1]:
            m = sys.modules.get(cache.module_name(cache.source_digest(s)))
            total += sum(m.kernel.stats.cache_misses.values()) if m is not None else 0
        return total

    before = compiled(second)
    v, g = tk.value_and_grad(deep)(*deep_args)
    new = compiled(second) - before
    assert new <= len(set(second.modules[:-1]) - shared), (new, len(shared))
    vi, gi = tk.jit(tk.value_and_grad(deep), backend="interpret")(*deep_args)
    np.testing.assert_allclose(v, vi, rtol=1e-12)
    for a, b in zip(tk.tree_flatten(g)[0], tk.tree_flatten(gi)[0]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_kernel_source_is_canonical():
    """Kernels name parameters and scalars by position, never by IR variable: the units of one
    layer shape are the same text in a 2-layer and a 5-layer program."""
    a = _step(*_mlp(2))
    b = _step(*_mlp(5))
    allowed = re.compile(r"^(p\d+|s\d+|e\d+_\d+|acc\d+|part\d+|mem\d+|stage\d+|big|bigc|lo|m0|c|cc|j0|bs|be|bj|[iqrsu]\d*|t)$")
    for source in a.modules[:-1] + b.modules[:-1]:
        body = source.split("def kernel", 1)[1]
        assert "Var#" not in body
        names = set(re.findall(r"^\s*([A-Za-z_]\w*)(?:\[.*\])? = ", body, re.M))
        names |= set(re.findall(r"def kernel\w*\((.*)\)", "def kernel" + body)[0].replace(" ", "").split(","))
        assert names and all(allowed.match(n) for n in names), sorted(n for n in names if not allowed.match(n))
    assert set(a.modules[:-1]) == set(b.modules[:-1])


# -- names never collide ----------------------------------------------------------------------------

def test_different_kernels_have_different_names_and_the_salt_covers_versions(monkeypatch):
    x = np.linspace(0.1, 1, 16)
    one = _step(lambda x: np.sum(np.tanh(x) * 2.0), (x,))
    two = _step(lambda x: np.sum(np.tanh(x) * 3.0), (x,))     # only a constant differs
    f32 = _step(lambda x: np.sum(np.tanh(x) * 2.0), (x.astype(np.float32),))
    names = [cache.module_path(s).name for s in one.modules[:-1] + two.modules[:-1] + f32.modules[:-1]]
    assert len(set(names)) == len(names)
    # the digest is of the whole text, and the text carries the salt: versions and math modules
    assert all(tkcpu._salt() in s for s in one.modules)
    base = units.salt(tkcpu.cpu_math)
    units.salt.cache_clear()
    monkeypatch.setattr(numba, "__version__", "0.0.0")
    try:
        assert units.salt(tkcpu.cpu_math) != base
    finally:
        monkeypatch.undo()
        units.salt.cache_clear()
        tkcpu._salt.cache_clear()
    assert units.salt(tkcpu.cpu_math) == base


def test_a_module_is_served_only_for_its_exact_text(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path))
    source = "VALUE = 1\n"
    mod = cache.load_module(source)
    assert mod.VALUE == 1
    digest = cache.source_digest(source)
    forged = cache._MODULES[digest]
    forged.__tk_source__ = "VALUE = 2\n"       # as if two texts had one digest
    try:
        with pytest.raises(RuntimeError, match="digest"):
            cache.load_module(source)
    finally:
        cache._MODULES.pop(digest)
    # on disk, a file whose text differs from its name's is rewritten before it is imported, with a warning
    cache.module_path(source).write_text("VALUE = 3\n")
    with pytest.warns(tk.CacheWarning, match="does not match its name"):
        assert cache.load_module(source).VALUE == 1
    assert cache.module_path(source).read_text() == source


# -- fusion that keeps kernels equal across depth -----------------------------------------------------

def test_a_reductions_epilogue_runs_in_its_loop():
    x = np.random.default_rng(0).standard_normal((6, 8))

    def layernorm(x):
        mu = np.mean(x, axis=-1, keepdims=True)
        var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5)

    low = tk.jit(layernorm).lower(x)
    plan = fusion.plan(low.ir)
    loops = [k for k in plan.kernels if isinstance(k, fusion.LoopKernel)]
    assert any(k.epilogue for k in loops)
    assert not any(k.domain == (6, 1) for k in loops), "mean's division is not a kernel of its own"
    np.testing.assert_allclose(tk.jit(layernorm)(x), layernorm(x), rtol=1e-12, atol=1e-12)
    g = tk.grad(lambda x: np.sum(layernorm(x) ** 3))(x)
    gi = tk.jit(tk.grad(lambda x: np.sum(layernorm(x) ** 3)), backend="interpret")(x)
    np.testing.assert_allclose(g, gi, rtol=1e-10, atol=1e-12)


def test_epilogues_on_every_reduction_layout_and_backend():
    """A reduction's epilogue (the elementwise work after it) on every layout: per row, one value after
    several chunks, several axes kept, two epilogues; on cpu and cuda, against the interpreter."""
    rng = np.random.default_rng(2)
    big = rng.standard_normal((300, 260))          # cpu: a parallel loop (>= 2**16 elements), chunks of rows
    # cuda: the same layouts from 16 rows (per row: a block a row, one chunk; one value: several chunks
    # folded by a second kernel, with a GPU's launch sizes (more than 256 threads x 8 per chunk) and the
    # simulator's alike). 300 rows there took the simulator minutes (a Python thread per CUDA thread).
    big_cuda = big[:16]
    small = rng.standard_normal((3, 4, 5))
    programs = [
        (lambda a: np.sum(a, axis=1) / 7.0 + np.max(a, axis=1), big),      # per row
        (lambda a: np.sqrt(np.sum(a * a)) * 2.0, big),                      # one value, after the chunks
        (lambda a: np.exp(np.sum(a, axis=(1, 2), keepdims=True) / 20.0), small),
        (lambda a: np.sin(np.mean(a, axis=2)) * np.cos(np.max(a, axis=2)), small),
        # a second epilogue that would read the first one's store (found by test_property: it read
        # the buffer before the first epilogue had written it)
        (_two_epilogues, small[0]),
    ]
    for backend in ("cpu", "cuda"):
        for k, (f, a) in enumerate(programs):
            a = big_cuda if backend == "cuda" and a is big else a
            got = tk.jit(f, backend=backend)(a)
            got = got.copy_to_host() if hasattr(got, "copy_to_host") else got
            want = tk.jit(f, backend="interpret")(a)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=f"{backend} program {k}")
    # (the layouts the sizes are for: cpu's per-row loop in parallel chunks, cuda's one value from several chunks)
    assert "in prange(" in tk.jit(programs[0][0]).lower(big).source
    assert "partial results" in tk.jit(programs[1][0], backend="cuda").lower(big_cuda).source


def _two_epilogues(a):
    def f(a):
        n = np.tanh(np.arctan(np.mean(a, axis=1, keepdims=True) * 0.7 - 0.2))
        m = np.exp(n) * 0.7 - 0.2
        return np.sum(m * m) + 0.1 * np.sum(m)
    value, grad = tk.value_and_grad(f)(a)
    return grad * value


def test_a_residual_stream_is_stored_not_recomputed_in_every_reader():
    """x + f(x) + g(...) over depth: without materializing the sum, every loop reading the stream
    recomputes all its terms (work and kernel text growing with depth)."""
    step = _step(*_transformer(8))
    longest = max(len(s.splitlines()) for s in step.modules[:-1])
    step2 = _step(*_transformer(4))
    assert longest == max(len(s.splitlines()) for s in step2.modules[:-1])


# -- parallel compile and concurrency --------------------------------------------------------------

def test_workers_compile_what_the_cache_lacks(tmp_path):
    """A fresh process with a compile worker: every kernel ends up compiled once, in one of the two
    processes, and the result is the interpreter's."""
    code = textwrap.dedent("""
        import sys, numpy as np, tracekern as tk
        sys.path.insert(0, sys.argv[1])
        from test_units import _transformer
        from tracekern.backends import cache
        loss, args = _transformer(2)
        v, g = tk.value_and_grad(loss)(*args)
        vi, gi = tk.jit(tk.value_and_grad(loss), backend="interpret")(*args)
        ok = abs(v - vi) <= 1e-12 * abs(vi) and all(np.allclose(a, b, rtol=1e-10, atol=1e-12)
               for a, b in zip(tk.tree_flatten(g)[0], tk.tree_flatten(gi)[0]))
        step = next(iter(tk.value_and_grad(loss)._cache.values()), None)
        f = tk.value_and_grad(loss); f(*args); step = next(iter(f._cache.values())).run
        here = 0
        for s in step.modules[:-1]:
            m = sys.modules[cache.module_name(cache.source_digest(s))]
            here += sum(m.kernel.stats.cache_misses.values())
        print(ok, len(step.modules) - 1, here, sum(map(cache.on_disk, step.modules[:-1])))
    """)
    env = dict(os.environ, TRACEKERN_CACHE_DIR=str(tmp_path), TRACEKERN_COMPILE_WORKERS="1")
    out = subprocess.run([sys.executable, "-c", code, os.path.dirname(__file__)], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    ok, n_units, here, stems = out.stdout.split()
    assert ok == "True"
    assert int(here) < int(n_units), "the worker compiled some kernels"
    assert int(stems) == int(n_units), "every kernel has machine code in the cache"


_PLANTED_RUN = """
import json, numba, numpy as np, tracekern as tk
from tracekern.backends import workers
workers.MIN_UNITS = 1    # (a worker for this small step)
v, g = tk.value_and_grad(lambda x: np.sum(np.tanh(x) ** 2 * 0.953125))(np.linspace(0, 1, 16))
# a job that only this process's tracekern compiles: the worker found it, not another copy
job = ("import tracekern\\nassert tracekern.__file__ == %r\\nfrom numba import njit\\n"
       "@njit(cache=True)\\ndef kernel(x):\\n    return x + 1\\n" % tk.__file__)
answer = workers._workers(1)[0].run(([job], "kernel", [(numba.int64,)]))
print(json.dumps(dict(value=float(v), grad=g.tolist(), answer=answer, workers=len(workers._WORKERS))))
"""


def test_a_worker_imports_nothing_from_the_working_directory(tmp_path):
    """A program run from a directory holding a planted numpy.py and tracekern.py (as another local
    user could leave in /tmp), with a compile worker and a cold cache: neither planted module runs
    (no marker file), the worker compiles with this very tracekern, and the result is right."""
    planted = tmp_path / "cwd"
    planted.mkdir()
    markers = [tmp_path / f"ran-{name}" for name in ("numpy", "tracekern")]
    for marker in markers:
        (planted / f"{marker.name[4:]}.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    script = tmp_path / "program" / "run.py"
    script.parent.mkdir()
    script.write_text(_PLANTED_RUN)
    env = dict(os.environ, TRACEKERN_CACHE_DIR=str(tmp_path / "cache"), TRACEKERN_COMPILE_WORKERS="1",
               PYTHONPATH=os.path.dirname(os.path.dirname(tk.__file__)))   # (this process's tracekern)
    out = subprocess.run([sys.executable, str(script)], cwd=planted, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert not [m for m in markers if m.exists()], "a planted module ran"
    assert result["workers"] == 1 and result["answer"] is None, result["answer"]
    loss = lambda x: np.sum(np.tanh(x) ** 2 * 0.953125)   # noqa: E731
    x = np.linspace(0, 1, 16)
    vi, gi = tk.jit(tk.value_and_grad(loss), backend="interpret")(x)
    assert np.shape(result["grad"]) == gi.shape
    np.testing.assert_allclose(result["value"], vi, rtol=1e-12)
    np.testing.assert_allclose(result["grad"], gi, rtol=1e-10, atol=1e-12)
    eps = 1e-6
    fd = [(loss(x + eps * e) - loss(x - eps * e)) / (2 * eps) for e in np.eye(16)]
    np.testing.assert_allclose(result["grad"], fd, rtol=1e-6, atol=1e-8)


def test_a_failing_worker_job_is_compiled_here(monkeypatch):
    monkeypatch.setattr(workers, "worker_count", lambda: 1)
    monkeypatch.setattr(workers, "MIN_UNITS", 1)
    done = []
    jobs = [(["def broken(:\n"], "kernel", [()])] * 3   # the worker reports a SyntaxError
    workers.compile_all(jobs, done.append)
    assert sorted(done) == [0, 1, 2]


def test_processes_compiling_into_one_cache_at_once_all_get_right_results(tmp_path):
    code = textwrap.dedent("""
        import sys, numpy as np, tracekern as tk
        sys.path.insert(0, sys.argv[1])
        from test_units import _transformer
        loss, args = _transformer(3)
        v, g = tk.value_and_grad(loss)(*args)
        print(repr(float(v)), repr(float(sum(np.sum(a) for a in tk.tree_flatten(g)[0]))))
    """)
    env = dict(os.environ, TRACEKERN_CACHE_DIR=str(tmp_path / "shared"))
    procs = [subprocess.Popen([sys.executable, "-c", code, os.path.dirname(__file__)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=900) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    loss, args = _transformer(3)
    vi, gi = tk.jit(tk.value_and_grad(loss), backend="interpret")(*args)
    want = (float(vi), float(sum(np.sum(a) for a in tk.tree_flatten(gi)[0])))
    for stdout, _ in outs:
        v, gsum = (float(t) for t in stdout.split())
        assert v == pytest.approx(want[0], rel=1e-12) and gsum == pytest.approx(want[1], rel=1e-10)


# -- drivers ------------------------------------------------------------------------------------------

def _library_program(a, b, x, u):
    s = np.linalg.solve(a, b) + np.linalg.inv(a) @ b
    q, r = np.linalg.qr(a)
    w, v = np.linalg.eigh(a @ a.T)
    sign, logdet = np.linalg.slogdet(a)
    y = np.fft.ifft(np.fft.fft(x * u[0])).real + np.fft.irfft(np.fft.rfft(x), n=x.shape[-1])
    top = np.take_along_axis(y, np.argsort(y, axis=-1)[:, -2:], axis=-1)
    z = np.sort(x * u[1], axis=-1)
    return (np.sum(s * s) + np.sum(q[:, 0] * r[0]) + np.sum(w) + logdet + np.sum(top * top) + np.sum(z[:, :2])
            + np.sum(np.cumsum(y, axis=-1) * 0.01))


def test_library_calls_in_kernels_are_helpers_compiled_once_per_machine(tmp_path, monkeypatch):
    """np.linalg, np.fft, np.sort/argsort and whole-array copies in a kernel call cpu_math's helpers (cached
    with the math library: compiled once per machine and signature), never Numba's implementations or its
    slice assignment written in the kernel: those were typed and lowered again in every process and
    program (a slice assignment's shape-mismatch message compiled Numba's string code, 5 to 7 s; solve 4.6 s)."""
    from numba.core import event

    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    args = (a, rng.standard_normal(4), rng.standard_normal((3, 8)), np.array([0.7, 1.3]))
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path / "first"))
    monkeypatch.setenv("TRACEKERN_COMPILE_WORKERS", "0")     # (compiled here, where the listener below sees it)
    step = _step(_library_program, args)
    text = "\n".join(step.modules)
    for helper in ("put(", "np_solve(", "np_inv(", "np_qr(", "np_slogdet(", "np_fftn(", "np_ifftn(", "np_rfftn(",
                   "np_irfftn(", "np_sort(", "np_argsort_stable("):
        assert helper in text, helper
    for written in ("[...] =", "np.linalg.", "np.fft.", "np.sort(", "np.argsort("):
        assert written not in text, written
    got = tk.value_and_grad(_library_program)(*args)     # (compiles the helpers where this machine lacks them)
    want = tk.jit(tk.value_and_grad(_library_program), backend="interpret")(*args)
    assert len(got[1]) == len(want[1])
    np.testing.assert_allclose(got[0], want[0], rtol=1e-10)
    for g, w in zip(got[1], want[1]):
        np.testing.assert_allclose(g, w, rtol=1e-8, atol=1e-10)
    # another program of the same calls, other shapes, a new cache: its kernels compile, Numba's library code does not
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path / "second"))
    names = []

    class Seen(event.Listener):
        def on_start(self, ev):
            names.append(getattr(ev.data["dispatcher"], "py_func", ev.data["dispatcher"]).__qualname__)

        def on_end(self, ev):
            pass
    a5 = rng.standard_normal((5, 5)) + 5 * np.eye(5)
    more = (a5, rng.standard_normal(5), rng.standard_normal((2, 6)), np.array([0.4, 0.9]))
    with tk.config.override(tiers=False), event.install_listener("numba:compile", Seen()):
        tk.value_and_grad(_library_program)(*more)
    assert sum(n == "kernel" for n in names) >= 5, ("the kernels were compiled here", names)
    library = [n for n in names if "raise_with_shape_context" in n or "solve_impl" in n or "unicode" in n]
    assert not library, library


def test_drivers_are_njit_only_where_loops_would_otherwise_run_in_python():
    x = np.linspace(0, 1, 8)
    straight = _step(lambda x: np.sum(np.tanh(x)), (x,))
    assert not straight.jitted and "@njit" not in straight.driver.split("def step")[0].splitlines()[-1]
    looped = _step(lambda x: np.sum(tk.fori_loop(0, 50, lambda i, v: np.sin(v) * 0.9, x)), (x,))
    assert looped.jitted and "@njit" in looped.driver.split("def step")[0].splitlines()[-1]
    # (a small loop runs whole in one njit function, loopN: issue 26's compiled loops)
    assert "def loop0(" in looped.driver and "def sub0(" not in looped.driver
    body = looped.driver.split("def loop0(")[0].splitlines()[-1]
    assert "@njit" in body, "a small loop is compiled whole: the loop does not run in Python"
    # (a body with an array over 2**14 values is driven from the step: its kernels are worth a call each)
    big_body = _step(lambda x: np.sum(tk.fori_loop(0, 3, lambda i, v: _transformer_body(v), x)), (np.ones((2100, 8)),))
    assert not big_body.jitted
    for f, args in ((lambda x: np.sum(np.tanh(x)), (x,)),
                    (lambda x: np.sum(tk.fori_loop(0, 50, lambda i, v: np.sin(v) * 0.9, x)), (x,))):
        v, g = tk.value_and_grad(f)(*args)
        vi, gi = tk.jit(tk.value_and_grad(f), backend="interpret")(*args)
        np.testing.assert_allclose(v, vi, rtol=1e-12)
        np.testing.assert_allclose(g, gi, rtol=1e-10, atol=1e-12)


def _rss() -> int | None:
    """This process's resident memory in bytes (Linux), else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None


def _generated() -> int:
    return sum(name.startswith("tracekern_generated_") for name in sys.modules)


def test_retracing_one_program_keeps_one_driver(tmp_path, monkeypatch):
    """2,000 traces of one program (new lambdas and new closures, each a new tk.jit, each numbering
    its variables anew) render one driver text: the cache files, the generated modules and the
    process's memory do not grow with the count (before: one file and module more a trace, 11 MB)."""
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path))
    x = np.linspace(-1, 1, 4)

    def closure():
        def f(x):
            return np.tanh(x) * 2.0625
        return f

    def run(i):
        return (tk.jit(lambda x: np.tanh(x) * 2.0625) if i % 2 else tk.jit(closure()))(x)

    for i in range(20):
        run(i)
    gc.collect()
    files, modules, generated, rss = sorted(tmp_path.glob("tk_*.py")), len(cache._MODULES), _generated(), _rss()
    for i in range(2000):
        out = run(i)
    gc.collect()
    assert len(files) == 2, "one kernel and one driver"
    assert sorted(tmp_path.glob("tk_*.py")) == files
    assert len(cache._MODULES) == modules and _generated() == generated
    if rss is not None:
        assert _rss() - rss < 4 * 2**20, f"grew by {(_rss() - rss) / 2**20:.1f} MB"
    want = tk.jit(lambda x: np.tanh(x) * 2.0625, backend="interpret")(x)
    assert out.shape == want.shape and out.dtype == want.dtype
    np.testing.assert_allclose(out, want, rtol=1e-15)
    np.testing.assert_allclose(out, np.tanh(x) * 2.0625, rtol=1e-15)


def _looped():
    """A new closure with a fori_loop and a scan (its step's driver is an njit function)."""
    def loss(x):
        y = tk.fori_loop(0, 4, lambda i, c: np.sin(c) * 0.875 + x, x)
        c, ys = tk.scan(lambda c, r: (c * 0.5 + r, np.tanh(c)), x[:4], x.reshape(2, 4))
        return np.sum(y * y) + np.sum(ys) + np.sum(c)
    return loss


def _fori():
    """A new closure whose step is a loop (an njit driver calling the body's function)."""
    return lambda x: np.sum(tk.fori_loop(0, 4, lambda i, c: np.sin(c) * 0.875 + x, x))


def _fori_numpy(x):
    y = x
    for _ in range(4):
        y = np.sin(y) * 0.875 + x
    return np.sum(y)


def _straight():
    return lambda x: np.cos(x) * 1.125


def _loop_step(fn, x):
    """The cpu backend's compiled step (not run) of tk.jit(fn) at x."""
    f = tk.jit(fn)
    return f._entry(f._signature((x,), {})).run


def test_a_loop_step_traced_again_in_another_order_is_not_compiled_again(tmp_path, monkeypatch):
    """A loop program and another traced, compiled and run, then traced again in the other order
    (every variable numbered differently): the same driver text, the same loaded module, no driver
    compiled again (before: a new driver module, and its compile, for each trace)."""
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path))
    x = np.linspace(0.1, 1.2, 8)
    first = {}
    start = units.compiled()["drivers"]
    for make in (_fori, _straight):
        first[make] = _loop_step(make(), x)
        tk.jit(make())(x)
    compiled = units.compiled()["drivers"]
    assert compiled == start + 1 and first[_fori].jitted, "the loop's driver is an njit function, compiled once"
    for make in (_straight, _fori):
        again = _loop_step(make(), x)
        assert again.driver == first[make].driver
        assert cache.load_module(again.driver) is cache.load_module(first[make].driver)
        got = tk.jit(make())(x)
        want = tk.jit(make(), backend="interpret")(x)
        assert np.shape(got) == np.shape(want) and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12)
    assert units.compiled()["drivers"] == compiled, "a driver was compiled again"
    np.testing.assert_allclose(tk.jit(_fori())(x), _fori_numpy(x), rtol=1e-12)


def test_cuda_host_launchers_are_canonical():
    """The cuda backend's host launcher of one program is the same text however its variables are
    numbered, device loops (a scan's body as phases) included; it runs right on the simulator."""
    tkcuda.launch_config()
    x = np.linspace(-1, 1, 8)
    hosts = []
    for _ in range(2):
        f = tk.jit(tk.value_and_grad(_looped()), backend="cuda")
        hosts.append(f._entry(f._signature((x,), {})).run.host)
        tk.jit(lambda a: np.cos(a) * 3.0, backend="interpret")(x)    # numbers variables in between
    assert hosts[0] == hosts[1] and "Var#" not in hosts[0]
    assert "R.cooperative(" in hosts[0], "the scan runs as a device loop"
    v, g = f(x)
    vi, gi = tk.jit(tk.value_and_grad(_looped()), backend="interpret")(x)
    np.testing.assert_allclose(np.asarray(v), vi, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(g), gi, rtol=1e-10, atol=1e-12)


def _transformer_body(v):
    rng = np.random.default_rng(1)
    p = (rng.standard_normal((8, 8)) / 3, rng.standard_normal((8, 8)) / 3, np.ones(8))
    for _ in range(3):
        v = _block(v, p)
    return v


def test_cuda_kernels_are_units_shared_across_depth():
    tkcuda.launch_config()   # (the simulator's launch sizes in CI; a GPU's on a GPU)
    counts = []
    for depth in (4, 8):
        loss, args = _transformer(depth)
        f = tk.jit(tk.value_and_grad(loss), backend="cuda")
        step = f._entry(f._signature(args, {})).run
        counts.append((len(step.modules) - 1, len(step.kernels)))
    assert counts[0][0] == counts[1][0] and counts[1][1] > counts[0][1], counts
