"""CUDA backend benchmark on a real GPU: W1 (16-layer elementwise chain, 2**26 float32) and W2
(8 x 1024 MLP, batch 4096), value_and_grad, with inputs already on the device.

    python -m bench.cuda [--quick] [--json PATH]

Peers when importable: PyTorch eager and torch.compile, JAX jit (on the GPU). Roofline: W1 moves
its input in and its gradient out, so the device-to-device copy of one array is its floor; W2's
target is PyTorch's cuBLAS-backed step. Targets (issue 6): W1 within 1.5x of the roofline and no
slower than torch.compile; W2 within 1.3x of PyTorch. Medians of 7 after warm-up, every ratio from
this one run. Under NUMBA_ENABLE_CUDASIM=1 it runs (use --quick) but its times mean nothing."""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

import tracekern as tk
from bench.cpu import LAYERS, median_time, save, w1_loss, w2_loss


def _sync():
    from numba import cuda

    cuda.synchronize()


def timed(fn, runs: int) -> float:
    def call():
        fn()
        _sync()
    return median_time(call, runs)


def copy_time(nbytes: int, runs: int) -> float:
    from numba import cuda

    a = cuda.to_device(np.ones(nbytes // 4, np.float32))
    b = cuda.device_array_like(a)
    return timed(lambda: b.copy_to_device(a), runs)


def peers(x, ws, xb, yb, runs) -> tuple[dict, dict, list]:
    w1, w2, notes = {}, {}, []
    try:
        import torch

        if not torch.cuda.is_available():
            raise ImportError
        dev = torch.device("cuda")
        xt = torch.from_numpy(x).to(dev)
        wt = [torch.from_numpy(w).to(dev) for w in ws]
        xbt, ybt = torch.from_numpy(xb).to(dev), torch.from_numpy(yb).to(dev)

        def t1(v):
            for k in range(LAYERS):
                v = [torch.tanh, torch.sin, lambda u: u * 0.9 + 0.1, lambda u: torch.exp(-u * u)][k % 4](v)
            return v.sum()

        def t2(params):
            h = xbt
            for w in params:
                h = torch.tanh(h @ w)
            return ((h - ybt) ** 2).mean()

        def run1(f):
            v = xt.clone().requires_grad_(True)
            f(v).backward()
            torch.cuda.synchronize()

        def run2(f):
            params = [w.clone().requires_grad_(True) for w in wt]
            f(params).backward()
            torch.cuda.synchronize()
        w1["torch_eager"] = median_time(lambda: run1(t1), runs)
        w2["torch_eager"] = median_time(lambda: run2(t2), runs)
        try:
            c1, c2 = torch.compile(t1), torch.compile(t2)
            w1["torch_compile"] = median_time(lambda: run1(c1), runs)
            w2["torch_compile"] = median_time(lambda: run2(c2), runs)
        except Exception as e:  # noqa: BLE001 (no Triton, no compiler)
            notes.append(f"torch.compile failed: {type(e).__name__}: {str(e)[:120]}")
    except ImportError:
        notes.append("PyTorch with CUDA not installed: its columns are skipped")
    try:
        import jax
        import jax.numpy as jnp

        if jax.default_backend() != "gpu":
            raise ImportError

        def j1(v):
            for k in range(LAYERS):
                v = [jnp.tanh, jnp.sin, lambda u: u * 0.9 + 0.1, lambda u: jnp.exp(-u * u)][k % 4](v)
            return jnp.sum(v)

        def j2(params, xv, yv):
            h = xv
            for w in params:
                h = jnp.tanh(h @ w)
            return jnp.mean((h - yv) ** 2)
        f1, f2 = jax.jit(jax.value_and_grad(j1)), jax.jit(jax.value_and_grad(j2))
        xj, wj, xbj, ybj = jnp.asarray(x), [jnp.asarray(w) for w in ws], jnp.asarray(xb), jnp.asarray(yb)
        w1["jax_jit"] = median_time(lambda: jax.block_until_ready(f1(xj)), runs)
        w2["jax_jit"] = median_time(lambda: jax.block_until_ready(f2(wj, xbj, ybj)), runs)
    except ImportError:
        notes.append("JAX with a GPU backend not installed: its columns are skipped")
    return w1, w2, notes


def main(argv=None) -> dict:
    from numba import cuda

    from tracekern.backends.cuda import launch_config

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny inputs, 3 runs (a smoke test; also on the simulator)")
    ap.add_argument("--json", default=os.path.join(os.path.dirname(__file__), "results", "cuda.json"))
    args = ap.parse_args(argv)
    launch = launch_config()
    runs = 3 if args.quick else 7
    n = 1 << (10 if args.quick else 26)
    width, depth, batch = (16, 2, 8) if args.quick else (1024, 8, 4096)
    rng = np.random.default_rng(0)
    gpu = "Numba CUDA simulator" if launch.simulator else cuda.get_current_device().name
    gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
    result: dict = {"device": gpu, "date": time.strftime("%Y-%m-%d"), "quick": args.quick, "launch": str(launch), "notes": []}
    if launch.simulator:
        result["notes"].append("simulator: the times below measure Python threads, not a GPU")

    x = rng.uniform(-1, 1, n).astype(np.float32)
    ws = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(depth)]
    xb = rng.standard_normal((batch, width)).astype(np.float32)
    yb = rng.standard_normal((batch, width)).astype(np.float32)
    xd, wd, xbd, ybd = cuda.to_device(x), [cuda.to_device(w) for w in ws], cuda.to_device(xb), cuda.to_device(yb)

    vg1 = tk.jit(tk.value_and_grad(w1_loss), backend="cuda")
    vg2 = tk.jit(tk.value_and_grad(w2_loss), backend="cuda")
    # correct before fast: against the cpu backend
    v1, g1 = vg1(xd)
    c1, cg1 = tk.value_and_grad(w1_loss)(x)
    assert np.allclose(g1.copy_to_host(), cg1, rtol=1e-3, atol=1e-4), "W1 gradients differ from the cpu backend"
    v2, g2 = vg2(wd, xbd, ybd)
    _, cg2 = tk.value_and_grad(w2_loss)(ws, xb, yb)
    assert all(np.allclose(a.copy_to_host(), b, rtol=1e-3, atol=1e-5) for a, b in zip(g2, cg2)), "W2 gradients differ"

    w1 = {"tracekern_cuda": timed(lambda: vg1(xd), runs)}
    w2 = {"tracekern_cuda": timed(lambda: vg2(wd, xbd, ybd), runs)}
    p1, p2, notes = peers(x, ws, xb, yb, runs) if not launch.simulator else ({}, {}, ["peers skipped on the simulator"])
    w1.update(p1)
    w2.update(p2)
    w1["roofline_copy"] = copy_time(x.nbytes, runs)
    result.update(W1=w1, W2=w2)
    result["notes"] += notes
    report(result)
    save(result, args.json)
    return result


def report(r: dict) -> None:
    print(f"device: {r['device']} ({r['launch']})")
    for w in ("W1", "W2"):
        base = r[w]["tracekern_cuda"]
        print(f"\n{w}: value_and_grad on the device, median ms (ratio = other / tracekern)")
        for k, t in r[w].items():
            print(f"  {k:16s} {t * 1e3:9.3f} ms  {t / base:6.2f}x")
    w1, w2 = r["W1"], r["W2"]
    print(f"\nW1 / roofline: {w1['tracekern_cuda'] / w1['roofline_copy']:.2f}x (target <= 1.5x)"
          + (f"; / torch.compile: {w1['tracekern_cuda'] / w1['torch_compile']:.2f}x (target <= 1x)" if "torch_compile" in w1 else ""))
    if "torch_eager" in w2:
        print(f"W2 / PyTorch (cuBLAS): {w2['tracekern_cuda'] / w2['torch_eager']:.2f}x (target <= 1.3x)")
    for note in r["notes"]:
        print("note:", note)


if __name__ == "__main__":
    main()
