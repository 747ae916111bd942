"""CPU backend benchmark: W1 (16-layer elementwise chain) and W2 (8 x 1024 MLP), value_and_grad.

    python -m bench.cpu [--quick] [--json PATH]

Prints a table of medians (>= 7 runs after warm-up) and ratios measured in this one run, and writes
JSON. Peers (JAX, PyTorch) run when importable and are skipped with a note otherwise."""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import timeit

import numpy as np

import tracekern as tk

LAYERS = 16


def median_time(fn, runs: int) -> float:
    fn()  # warm-up (compiles)
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


# -- W1: elementwise chain ----------------------------------------------------------------------
def w1_loss(x):
    for k in range(LAYERS):
        kind = k % 4
        if kind == 0:
            x = np.tanh(x)
        elif kind == 1:
            x = np.sin(x)
        elif kind == 2:
            x = x * 0.9 + 0.1
        else:
            x = np.exp(-x * x)
    return np.sum(x)


def w1_numpy(x):
    """Hand-written NumPy forward and backward (saves each layer's input)."""
    saved = []
    for k in range(LAYERS):
        saved.append(x)
        kind = k % 4
        x = np.tanh(x) if kind == 0 else np.sin(x) if kind == 1 else x * np.float32(0.9) + np.float32(0.1) if kind == 2 else np.exp(-x * x)
    loss = x.sum()
    g = np.ones_like(x)
    for k in reversed(range(LAYERS)):
        xi = saved[k]
        kind = k % 4
        if kind == 0:
            t = np.tanh(xi)
            g = g * (1 - t * t)
        elif kind == 1:
            g = g * np.cos(xi)
        elif kind == 2:
            g = g * np.float32(0.9)
        else:
            g = g * (np.float32(-2) * xi * np.exp(-xi * xi))
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
def w2_loss(ws, x, y):
    h = x
    for w in ws:
        h = np.tanh(h @ w)
    return np.mean((h - y) ** 2)


def w2_numpy(ws, x, y):
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
        g = g * (1 - hs[i + 1] * hs[i + 1])
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


def peers_w2(ws, x, y, runs):
    out, notes = {}, []
    try:
        import jax
        import jax.numpy as jnp

        def jl(ws, x, y):
            h = x
            for w in ws:
                h = jnp.tanh(h @ w)
            return jnp.mean((h - y) ** 2)
        f = jax.jit(jax.value_and_grad(jl))
        wj, xj, yj = [jnp.asarray(w) for w in ws], jnp.asarray(x), jnp.asarray(y)
        out["jax_jit"] = median_time(lambda: jax.block_until_ready(f(wj, xj, yj)), runs)
    except ImportError:
        notes.append("JAX not installed: W2 peer skipped")
    try:
        import torch

        wt = [torch.from_numpy(w) for w in ws]
        xt, yt = torch.from_numpy(x), torch.from_numpy(y)

        def eager():
            params = [w.clone().requires_grad_(True) for w in wt]
            h = xt
            for w in params:
                h = torch.tanh(h @ w)
            ((h - yt) ** 2).mean().backward()
        out["torch_eager"] = median_time(eager, runs)
    except ImportError:
        notes.append("PyTorch not installed: W2 peer skipped")
    return out, notes


def peers_w1(x, runs):
    out, notes = {}, []
    try:
        import jax
        import jax.numpy as jnp

        def jl(x):
            for k in range(LAYERS):
                x = [jnp.tanh, jnp.sin, lambda v: v * 0.9 + 0.1, lambda v: jnp.exp(-v * v)][k % 4](x)
            return jnp.sum(x)
        f = jax.jit(jax.value_and_grad(jl))
        xj = jnp.asarray(x)
        out["jax_jit"] = median_time(lambda: jax.block_until_ready(f(xj)), runs)
    except ImportError:
        notes.append("JAX not installed: skipped")
    try:
        import torch

        def tl(x):
            for k in range(LAYERS):
                x = [torch.tanh, torch.sin, lambda v: v * 0.9 + 0.1, lambda v: torch.exp(-v * v)][k % 4](x)
            return x.sum()
        xt = torch.from_numpy(x)

        def eager():
            xx = xt.clone().requires_grad_(True)
            tl(xx).backward()
        out["torch_eager"] = median_time(eager, runs)
        try:
            comp = torch.compile(tl)

            def compiled():
                xx = xt.clone().requires_grad_(True)
                comp(xx).backward()
            out["torch_compile"] = median_time(compiled, runs)
        except Exception as e:  # noqa: BLE001 (a missing C compiler etc.)
            notes.append(f"torch.compile failed: {type(e).__name__}")
    except ImportError:
        notes.append("PyTorch not installed: skipped")
    return out, notes


_NUMBA_PROBE = "from numba import njit\n\n\n@njit(cache=True)\ndef probe(a):\n    return a + 1\n"


def startup_times() -> dict:
    """Cold compile of W1's value_and_grad (fresh tracekern cache; tracekern's own math functions
    are cached by Numba after their first use on a machine, which first_use_compile_s includes) and
    warm start from the disk cache, each in a new process; all exclude importing numba and
    tracekern and the step's own run time. The warm
    start is also given beyond Numba's own start-up, measured by loading a one-line cached njit
    function first (Numba initialises its CPU target on the first call of any compiled function)."""
    prog = (
        "import sys, time, numpy as np\n"
        "import numba, tracekern as tk\n"
        "from bench.cpu import w1_loss\n"
        "probe_first = len(sys.argv) > 1\n"
        "x = np.linspace(-1, 1, 1 << 22, dtype=np.float32)\n"
        "t = time.perf_counter()\n"
        "if probe_first:\n"
        "    sys.path.insert(0, sys.argv[1]); from tk_probe import probe; probe(1)\n"
        "t1 = time.perf_counter(); tk.value_and_grad(w1_loss)(x); t2 = time.perf_counter()\n"
        "print(t1 - t, t2 - t1)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        env = dict(os.environ, TRACEKERN_CACHE_DIR=d)
        with open(os.path.join(d, "tk_probe.py"), "w") as fh:
            fh.write(_NUMBA_PROBE)

        def run(*extra):
            out = subprocess.run([sys.executable, "-c", prog, *extra], env=env, capture_output=True, text=True, cwd=root)
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
    try:
        import jax
        import jax.numpy as jnp

        jf = jax.jit(lambda x: jnp.tanh(x) * 2 + 1)
        xj = jnp.asarray(x)
        jax.block_until_ready(jf(xj))
        res["jax_jit_us"] = min(timeit.repeat(lambda: jax.block_until_ready(jf(xj)), number=n, repeat=5)) / n * 1e6
    except ImportError:
        pass
    return res


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smaller inputs, fewer runs")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "cpu.json"))
    args = ap.parse_args(argv)
    runs = 7
    n = 1 << (20 if args.quick else 22)
    rng = np.random.default_rng(0)
    result: dict = {"machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "date": time.strftime("%Y-%m-%d"), "quick": args.quick, "notes": []}

    # W1
    x = rng.uniform(-1, 1, n).astype(np.float32)
    vg = tk.value_and_grad(w1_loss)
    naive = _naive_numba_kernel()
    grad_buf = np.empty_like(x)
    w1 = {"tracekern_cpu": median_time(lambda: vg(x), runs),
          "numpy": median_time(lambda: w1_numpy(x), runs),
          "naive_numba": median_time(lambda: naive(x, grad_buf), runs)}
    peer, notes = peers_w1(x, runs)
    w1.update(peer)
    result["notes"] += notes
    w1["roofline"] = 2 * x.nbytes / copy_bandwidth(x.nbytes)
    v, g = vg(x)
    lv, lg = w1_numpy(x)
    assert np.allclose(g, lg, rtol=1e-3, atol=1e-4), "W1 gradients differ from the NumPy reference"
    result["W1"] = w1

    # W2
    width, depth, batch = (512, 8, 128) if args.quick else (1024, 8, 256)
    ws = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(depth)]
    xb = rng.standard_normal((batch, width)).astype(np.float32)
    yb = rng.standard_normal((batch, width)).astype(np.float32)
    vg2 = tk.value_and_grad(w2_loss)
    w2 = {"tracekern_cpu": median_time(lambda: vg2(ws, xb, yb), runs),
          "numpy": median_time(lambda: w2_numpy(ws, xb, yb), runs),
          "gemms_only": median_time(lambda: w2_gemms(ws, xb), runs)}
    flops = depth * 3 * 2 * batch * width * width
    # the best of 3: right after other threaded work the first measurement can run at half speed
    w2["roofline"] = flops / max(sgemm_rate(width, batch) for _ in range(3))
    peer2, notes2 = peers_w2(ws, xb, yb, runs)
    w2.update(peer2)
    result["notes"] += notes2
    g2 = vg2(ws, xb, yb)[1]
    assert all(np.allclose(a, b, rtol=1e-3, atol=1e-5) for a, b in zip(g2, w2_numpy(ws, xb, yb)[1]))
    result["W2"] = w2

    result["startup"] = startup_times() if not args.quick else {}
    result["overhead"] = per_call_overhead()
    report(result)
    save(result, args.json)
    return result


def save(result: dict, path: str) -> None:
    """Write a benchmark's figures as JSON (what a later run compares with)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nwrote {path}")


def report(r: dict) -> None:
    for w in ("W1", "W2"):
        base = r[w]["tracekern_cpu"]
        print(f"\n{w}: value_and_grad, median ms (ratio = time / tracekern)")
        for k, t in r[w].items():
            print(f"  {k:16s} {t * 1e3:9.2f} ms  {t / base:6.2f}x")
    if r.get("startup"):
        s = r["startup"]
        print(f"\ncold compile (W1 value_and_grad): {s['cold_compile_s']:.2f} s "
              f"({s['first_use_compile_s']:.2f} s on first use after install); warm start from disk cache: "
              f"{s['warm_start_s']:.3f} s, of which Numba's own start-up {s['numba_startup_s']:.3f} s "
              f"and tracekern {s['warm_start_beyond_numba_startup_s']:.3f} s")
    o = r["overhead"]
    print(f"per-call overhead, 8 elements: jit {o['jit_us']:.1f} us, value_and_grad {o['value_and_grad_us']:.1f} us "
          f"(plain NumPy {o['numpy_us']:.1f} us" + (f", JAX jit {o['jax_jit_us']:.1f} us" if "jax_jit_us" in o else "") + ")")
    for note in r["notes"]:
        print("note:", note)


if __name__ == "__main__":
    main()
