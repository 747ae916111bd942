"""CPU backend benchmark: W1 (kernels/chain.py, a 16-layer elementwise chain), W2 (kernels/mlp.py,
an 8 x 1024 MLP) and the LSTM (kernels/lstm.py: 2 layers x 1024 characters, and at full size also
4 layers x 4096), value_and_grad, against hand-written NumPy (for the LSTM: NumPy's Python loop
computing the value alone), a naive hand-fused Numba kernel, JAX jit, PyTorch eager and
torch.compile, and a roofline.

    python -m bench.cpu [--quick] [--load N ...] [--json PATH]

Every time is a median of interleaved rounds (all tools of a workload take turns, so that the
machine's load hits each alike), printed with its min to max; every ratio is from this one run.
--load N measures every workload again beside N busy processes (bench.harness.load), once per N
given (--load 0 1: quiet, then beside one busy process).
Peers run when importable and are skipped with a note otherwise. The hand-written NumPy versions
are what a competent person writes: they keep the layer outputs the backward pass needs (W1's tanh
and Gaussian layers differentiate from their outputs; only sin's cos is computed in the backward)
and work in place where they can."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
import timeit

import numpy as np

import kernels
import tracekern as tk
from bench.harness import ROOT, Timing, add_load_option, interleaved, load, median_time, script
from kernels import chain, lstm, mlp, peers

LAYERS = chain.LAYERS
w1_loss = chain.loss       # the workloads themselves live in kernels/
w2_loss = mlp.loss


# -- W1: elementwise chain ----------------------------------------------------------------------
def w1_numpy(x):
    """Hand-written NumPy forward and backward. It keeps every layer's output (the next layer's
    input): tanh' = 1 - y², the Gaussian's derivative is -2 x y, so only sin's cos is computed in
    the backward pass; temporaries are reused in place."""
    f32 = np.float32
    outs = [x]
    for k in range(LAYERS):
        kind = k % 4
        if kind == 0:
            y = np.tanh(x)
        elif kind == 1:
            y = np.sin(x)
        elif kind == 2:
            y = x * f32(0.9)
            y += f32(0.1)
        else:
            y = np.square(x)
            np.negative(y, out=y)
            np.exp(y, out=y)
        outs.append(y)
        x = y
    loss = x.sum()
    g = np.ones_like(x)
    t = np.empty_like(x)
    for k in reversed(range(LAYERS)):
        xi, yi = outs[k], outs[k + 1]
        kind = k % 4
        if kind == 0:
            np.square(yi, out=t)
            np.subtract(f32(1), t, out=t)
            g *= t
        elif kind == 1:
            np.cos(xi, out=t)
            g *= t
        elif kind == 2:
            g *= f32(0.9)
        else:
            np.multiply(xi, yi, out=t)
            t *= f32(-2)
            g *= t
    return loss, g


def _naive_numba_kernel():
    """A hand-fused Numba kernel as a user would write it: one prange loop, math.* calls."""
    from numba import njit, prange

    fwd, bwd = [], []
    for k in range(LAYERS):
        kind = k % 4
        expr = ["math.tanh(v{k})", "math.sin(v{k})", "v{k} * np.float32(0.9) + np.float32(0.1)", "math.exp(-v{k} * v{k})"][kind]
        fwd.append(f"        v{k + 1} = np.float32({expr.format(k=k)})")
        der = ["(1 - math.tanh(v{k}) ** 2)", "math.cos(v{k})", "np.float32(0.9)", "(-2 * v{k} * math.exp(-v{k} * v{k}))"][kind]
        bwd.append(f"        g = np.float32(g * {der.format(k=k)})")
    src = ("def kernel(x, grad):\n    total = 0.0\n    for i in prange(x.shape[0]):\n        v0 = x[i]\n"
           + "\n".join(fwd) + f"\n        total += v{LAYERS}\n        g = np.float32(1.0)\n" + "\n".join(reversed(bwd))
           + "\n        grad[i] = g\n    return total\n")
    ns = {"np": np, "math": math, "prange": prange}
    exec(src, ns)
    return njit(parallel=True, fastmath=False)(ns["kernel"])


# -- W2: MLP ------------------------------------------------------------------------------------
def w2_numpy(ws, x, y):
    """Hand-written NumPy: keeps each layer's output; tanh' = 1 - h²."""
    hs = [x]
    h = x
    for w in ws:
        h = np.tanh(h @ w)
        hs.append(h)
    d = h - y
    loss = np.mean(d * d)
    g = (2.0 / d.size) * d
    grads = []
    for i in reversed(range(len(ws))):
        g *= 1 - hs[i + 1] * hs[i + 1]
        grads.append(hs[i].T @ g)
        g = g @ ws[i].T
    return loss, grads[::-1]


def w2_gemms(ws, x):
    """The GEMMs of W2's forward and backward alone, with their exact shapes and transposes, into
    preallocated outputs: what BLAS itself takes for this step (the sgemm roofline assumes the rate
    of the forward shape for all of them)."""
    batch, width = x.shape
    o = np.empty((batch, width), np.float32)
    big = np.empty((width, width), np.float32)
    for w in ws:
        np.dot(x, w, o)                # forward
    for w in ws[1:]:
        np.dot(x, w.T, o)              # cotangent of each layer's input
    for _ in ws:
        np.dot(x.T, x, big)            # weight gradients (K = batch)


def copy_bandwidth(nbytes: int) -> float:
    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    t = median_time(lambda: np.copyto(b, a), 9)
    return 2 * nbytes / t  # read + write


def sgemm_rate(n=1024, m=256) -> float:
    a = np.random.rand(m, n).astype(np.float32)
    b = np.random.rand(n, n).astype(np.float32)
    t = median_time(lambda: a @ b, 9)
    return 2 * m * n * n / t


def peer_steps(name: str, size: str) -> tuple[dict, list]:
    """The peers' value_and_grad of a workload (kernels/peers), as {label: run}, and notes."""
    out, notes = {}, []
    for tool, label, options in (("jax", "jax_jit", {}), ("torch", "torch_eager", {}),
                                 ("torch", "torch_compile", {"compiled": True})):
        if not peers.available(tool):
            if label != "torch_compile":
                notes.append(f"{peers.TOOLS[tool][1]} not installed: {label} skipped ({peers.TOOLS[tool][2]} adds it)")
            continue
        try:
            p = peers.make(tool, name, size, "none", **options)
            p.run()
            out[label] = p.run
        except Exception as e:  # noqa: BLE001 (torch.compile without a C compiler etc.)
            notes.append(f"{label} failed: {type(e).__name__}: {str(e)[:160]}")
    return out, notes


_NUMBA_PROBE = "from numba import njit\n\n\n@njit(cache=True)\ndef probe(a):\n    return a + 1\n"


def startup_times() -> dict:
    """Cold compile of W1's value_and_grad (fresh tracekern cache; tracekern's own math functions
    are cached by Numba after their first use on a machine, which first_use_compile_s includes) and
    warm start from the disk cache, each in a new process; all exclude importing numba and
    tracekern and the step's own run time. The warm start is also given beyond Numba's own
    start-up, measured by loading a one-line cached njit function first (Numba initialises its CPU
    target on the first call of any compiled function)."""
    prog = (
        "import sys, time, numpy as np\n"
        "import numba, tracekern as tk\n"
        "from kernels.chain import loss\n"
        "probe_first = len(sys.argv) > 1\n"
        "x = np.linspace(-1, 1, 1 << 22, dtype=np.float32)\n"
        "t = time.perf_counter()\n"
        "if probe_first:\n"
        "    sys.path.insert(0, sys.argv[1]); from tk_probe import probe; probe(1)\n"
        "t1 = time.perf_counter(); tk.value_and_grad(loss)(x); t2 = time.perf_counter()\n"
        "print(t1 - t, t2 - t1)\n"
    )
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TRACEKERN_CACHE_DIR=d, PYTHONPATH=ROOT)
        with open(os.path.join(d, "tk_probe.py"), "w") as fh:
            fh.write(_NUMBA_PROBE)

        def run(*extra):
            out = subprocess.run([sys.executable, "-c", prog, *extra], env=env, capture_output=True, text=True, cwd=ROOT)
            return [float(v) for v in out.stdout.strip().splitlines()[-1].split()]

        with tempfile.TemporaryDirectory() as numba_cache:
            env["NUMBA_CACHE_DIR"] = numba_cache   # nothing cached at all: a fresh install's first use
            first_use = run()[1]
            del env["NUMBA_CACHE_DIR"]
        env["TRACEKERN_CACHE_DIR"] = d = tempfile.mkdtemp(dir=d)
        with open(os.path.join(d, "tk_probe.py"), "w") as fh:
            fh.write(_NUMBA_PROBE)
        cold = run()[1]
        warm = run()[1]
        run(d)  # compiles and caches the probe
        probe, warm_after_probe = run(d)
    x = np.linspace(-1, 1, 1 << 22, dtype=np.float32)
    f = tk.value_and_grad(w1_loss)
    f(x)
    t0 = time.perf_counter()
    f(x)  # compiled: the step itself, subtracted from all
    step = time.perf_counter() - t0
    return {"cold_compile_s": cold - step, "first_use_compile_s": first_use - step,
            "warm_start_s": warm - step, "numba_startup_s": probe,
            "warm_start_beyond_numba_startup_s": warm_after_probe - step, "step_s": step}


def fork_threshold() -> list[dict]:
    """The size from which a prange loop pays for its fork and join: one fused elementwise loop
    (tanh, a multiply-add) on n float32 values, compiled serial and compiled parallel, the parallel
    one run on every core (the thread budget's load reading set aside), for n from 2**10 to 2**20:
    the best of interleaved rounds of each, in microseconds. tracekern runs loops of at least
    fusion.PARALLEL_MIN_ELEMENTS values in parallel."""
    from tracekern.backends import fusion, threads

    rows, saved = [], (fusion.PARALLEL_MIN_ELEMENTS, threads._LOAD.ok)
    try:
        threads._LOAD.ok = False                 # (every core, as on a quiet machine)
        for p in range(10, 21, 2):
            x = np.linspace(-1, 1, 1 << p, dtype=np.float32)
            steps = {}
            for kind, threshold in (("serial", 1 << 62), ("parallel", 1)):
                fusion.PARALLEL_MIN_ELEMENTS = threshold
                f = tk.jit(lambda x: np.tanh(x) * np.float32(2) + np.float32(1))
                f(x)
                steps[kind] = lambda f=f: f(x)
            n = max(20, min(2000, (1 << 22) >> p))
            best = {k: min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6 for k, fn in steps.items()}
            rows.append({"elements": 1 << p, "serial_us": best["serial"], "parallel_us": best["parallel"]})
    finally:
        fusion.PARALLEL_MIN_ELEMENTS, threads._LOAD.ok = saved
    return rows


def per_call_overhead() -> dict:
    x = np.linspace(0, 1, 8)
    f = tk.jit(lambda x: np.tanh(x) * 2 + 1)
    f(x)
    g = tk.value_and_grad(lambda x: np.sum(np.tanh(x)))
    g(x)
    n = 20000
    res = {"jit_us": min(timeit.repeat(lambda: f(x), number=n, repeat=5)) / n * 1e6,
           "value_and_grad_us": min(timeit.repeat(lambda: g(x), number=n, repeat=5)) / n * 1e6,
           "numpy_us": min(timeit.repeat(lambda: np.tanh(x) * 2 + 1, number=n, repeat=5)) / n * 1e6}
    if peers.available("jax"):
        import jax
        import jax.numpy as jnp

        jf = jax.jit(lambda x: jnp.tanh(x) * 2 + 1)
        xj = jnp.asarray(x)
        jax.block_until_ready(jf(xj))
        res["jax_jit_us"] = min(timeit.repeat(lambda: jax.block_until_ready(jf(xj)), number=n, repeat=5)) / n * 1e6
    return res


def lstm_sizes(quick: bool) -> list[str]:
    """The LSTM's sizes: 2 layers x 1024 characters ("quick"), and at full size also 4 x 4096."""
    return ["quick"] if quick else ["quick", "full"]


def lstm_label(size: str) -> str:
    layers, steps, _, _ = lstm.SIZES[size]
    return f"LSTM {layers}x{steps}"


def run(args) -> dict:
    loads = list(getattr(args, "load", None) or [0])
    result: dict = {"quick": args.quick, "notes": [], "loads": loads, "by_load": {}}
    workloads = build(args, result["notes"])       # (every step built and run once, before any timing)
    min_runs, min_seconds = (7, 0.5) if args.quick else (15, 3.0)
    for busy in loads:
        with load(busy):
            part = {name: {k: t.as_dict() for k, t in interleaved(fns, min_runs, min_seconds).items()}
                    for name, (fns, _) in workloads.items()}
        for name, (_, extra) in workloads.items():
            part[name].update({k: t.as_dict() for k, t in extra().items()})
        part["workloads"] = list(workloads)
        result["by_load"][str(busy)] = part
    result.update(result["by_load"][str(loads[0])])   # (W1, W2, ...: the first load's, as before --load)
    result["startup"] = startup_times() if not args.quick else {}
    result["overhead"] = per_call_overhead()
    result["fork_threshold"] = fork_threshold()
    return result


def build(args, notes: list) -> dict:
    """Every workload's steps, {name: ({tool: run}, extra)}, each run once (compiled) and checked
    against NumPy; extra() gives the rows that are not timed in rounds (rooflines)."""
    size = "quick" if args.quick else "full"
    out: dict = {}

    def peers_of(name, wsize):
        peer, more = peer_steps(name, wsize)
        notes.extend(n for n in more if n not in notes)
        return peer

    # W1
    w = kernels.make("chain", size, "none")
    (x,) = w.args
    vg = tk.value_and_grad(w1_loss)
    naive = _naive_numba_kernel()
    grad_buf = np.empty_like(x)
    fns = {"tracekern_cpu": lambda: vg(x), "numpy": lambda: w1_numpy(x), "naive_numba": lambda: naive(x, grad_buf)}
    fns.update(peers_of("chain", size))
    for fn in fns.values():
        fn()
    _, g = vg(x)
    _, lg = w1_numpy(x)
    assert np.allclose(g, lg, rtol=1e-3, atol=1e-4), "W1 gradients differ from the NumPy reference"
    out["W1"] = (fns, lambda: {"roofline": Timing(*(2 * x.nbytes / copy_bandwidth(x.nbytes),) * 3, 9)})

    # W2
    w = kernels.make("mlp", size, "none")
    ws, xb, yb = w.args
    depth, width, batch = mlp.SIZES[size]
    vg2 = tk.value_and_grad(w2_loss)
    fns = {"tracekern_cpu": lambda: vg2(ws, xb, yb), "numpy": lambda: w2_numpy(ws, xb, yb),
           "gemms_only": lambda: w2_gemms(ws, xb)}
    fns.update(peers_of("mlp", size))
    for fn in fns.values():
        fn()
    g2 = vg2(ws, xb, yb)[1]
    assert all(np.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(g2, w2_numpy(ws, xb, yb)[1]))
    flops = depth * 3 * 2 * batch * width * width
    # the best of 3: right after other threaded work the first measurement can run at half speed
    out["W2"] = (fns, lambda: {"roofline": Timing(*(flops / max(sgemm_rate(width, batch) for _ in range(3)),) * 3, 9)})

    # the LSTM: a loop with a small body (kernels/lstm.py); NumPy computes the value alone
    for lsize in lstm_sizes(args.quick):
        w = kernels.make("lstm", lsize, "none")
        vg3 = tk.value_and_grad(w.loss)
        fns = {"tracekern_cpu": lambda vg3=vg3, w=w: vg3(*w.args),
               "numpy_value_only": lambda w=w: lstm.numpy_value(*w.args)}
        fns.update(peers_of("lstm", lsize))
        for fn in fns.values():
            fn()
        value = float(vg3(*w.args)[0])
        assert abs(float(lstm.numpy_value(*w.args)) - value) <= 1e-4 * abs(value), "the LSTM's value differs from NumPy's"
        out[lstm_label(lsize)] = (fns, dict)
    return out


WHAT = {"W1": "16-layer elementwise chain", "W2": "8-layer MLP"}


def report(r: dict) -> str:
    lines = []
    for busy, part in r.get("by_load", {"0": r}).items():
        for w in part.get("workloads", ["W1", "W2"]):
            base = part[w]["tracekern_cpu"]["time_s"]
            what = WHAT.get(w, "tk.scan, hidden 14")
            lines.append(f"\n{w} ({what}){f', beside {busy} busy processes' if busy != '0' else ''}: value_and_grad, "
                         "median ms (min-max), ratio = time / tracekern")
            for k, t in part[w].items():
                spread = "" if k == "roofline" else f"({t['time_min_s'] * 1e3:.1f}-{t['time_max_s'] * 1e3:.1f}, {t['runs']} runs)"
                lines.append(f"  {k:16s} {t['time_s'] * 1e3:9.2f} ms {spread:26s} {t['time_s'] / base:6.2f}x")
    if r.get("startup"):
        s = r["startup"]
        lines.append(f"\ncold compile (W1 value_and_grad): {s['cold_compile_s']:.2f} s "
                     f"({s['first_use_compile_s']:.2f} s on first use after install); warm start from disk cache: "
                     f"{s['warm_start_s']:.3f} s, of which Numba's own start-up {s['numba_startup_s']:.3f} s "
                     f"and tracekern {s['warm_start_beyond_numba_startup_s']:.3f} s")
    if r.get("fork_threshold"):
        lines.append("\nprange against a serial loop (tanh, multiply-add; float32; every core): elements, serial us, "
                     "parallel us, parallel / serial")
        for row in r["fork_threshold"]:
            lines.append(f"  {row['elements']:9d} {row['serial_us']:10.1f} {row['parallel_us']:10.1f} "
                         f"{row['parallel_us'] / row['serial_us']:8.2f}")
    o = r["overhead"]
    lines.append(f"per-call overhead, 8 elements: jit {o['jit_us']:.1f} us, value_and_grad {o['value_and_grad_us']:.1f} us "
                 f"(plain NumPy {o['numpy_us']:.1f} us" + (f", JAX jit {o['jax_jit_us']:.1f} us" if "jax_jit_us" in o else "") + ")")
    return "\n".join(lines)


def main(argv=None) -> dict:
    return script("python -m bench.cpu", __doc__, run, report, "cpu.json", argv, options=add_load_option)


if __name__ == "__main__":
    main()
