"""CUDA backend benchmark on a real GPU: W1 (16-layer elementwise chain, 2**26 float32) and W2
(8 x 1024 MLP, batch 4096), value_and_grad, with inputs already on the device.

    python -m bench.cuda [--quick] [--json PATH]

Peers when importable: PyTorch eager and torch.compile, JAX jit (on the GPU). Roofline: W1 moves
its input in and its gradient out, so the device-to-device copy of one array is its floor; W2's
target is PyTorch's cuBLAS-backed step. Targets (issue 6): W1 within 1.5x of the roofline and no
slower than torch.compile; W2 within 1.3x of PyTorch. Medians of 7 after warm-up, every ratio from
this one run. Under NUMBA_ENABLE_CUDASIM=1 it runs (use --quick) but its times mean nothing."""
from __future__ import annotations

import numpy as np

import tracekern as tk
from bench.harness import median_time, script
from kernels import chain, mlp
from kernels.chain import loss as w1_loss
from kernels.mlp import loss as w2_loss


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
    """kernels/peers' W1 (chain) and W2 (mlp) on the GPU: PyTorch eager and torch.compile, JAX jit."""
    from kernels import peers as versions

    w1, w2, notes = {}, {}, []
    for tool, label, options in (("torch", "torch_eager", {"device": "cuda"}),
                                 ("torch", "torch_compile", {"device": "cuda", "compiled": True}), ("jax", "jax_jit", {})):
        if not versions.available(tool) or not _on_gpu(tool):
            notes.append(f"{label}: {versions.TOOLS[tool][1]} with a GPU is not installed: skipped")
            continue
        try:
            for out, name, args in ((w1, "chain", (x,)), (w2, "mlp", (ws, xb, yb))):
                out[label] = median_time(versions.make(tool, name, "full", "none", args=args, **options).run, runs)
        except Exception as e:  # noqa: BLE001 (no Triton, no compiler)
            notes.append(f"{label} failed: {type(e).__name__}: {str(e)[:120]}")
    return w1, w2, notes


def _on_gpu(tool: str) -> bool:
    if tool == "torch":
        import torch

        return torch.cuda.is_available()
    import jax

    return jax.default_backend() == "gpu"


def run(args) -> dict:
    from numba import cuda

    from tracekern.backends.cuda import launch_config

    launch = launch_config()
    runs = 3 if args.quick else 7
    n = 1 << (10 if args.quick else 26)
    width, depth, batch = (16, 2, 8) if args.quick else (1024, 8, 4096)
    gpu = "Numba CUDA simulator" if launch.simulator else cuda.get_current_device().name
    gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
    result: dict = {"device": gpu, "quick": args.quick, "launch": str(launch), "notes": []}
    if launch.simulator:
        result["notes"].append("simulator: the times below measure Python threads, not a GPU")

    (x,) = chain.inputs(n)
    ws, xb, yb = mlp.inputs(depth, width, batch)
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
    return result


def report(r: dict) -> str:
    lines = [f"device: {r['device']} ({r['launch']})"]
    for w in ("W1", "W2"):
        base = r[w]["tracekern_cuda"]
        lines.append(f"\n{w}: value_and_grad on the device, median ms (ratio = other / tracekern)")
        for k, t in r[w].items():
            lines.append(f"  {k:16s} {t * 1e3:9.3f} ms  {t / base:6.2f}x")
    w1, w2 = r["W1"], r["W2"]
    lines.append(f"\nW1 / roofline: {w1['tracekern_cuda'] / w1['roofline_copy']:.2f}x (target <= 1.5x)"
                 + (f"; / torch.compile: {w1['tracekern_cuda'] / w1['torch_compile']:.2f}x (target <= 1x)"
                    if "torch_compile" in w1 else ""))
    if "torch_eager" in w2:
        lines.append(f"W2 / PyTorch (cuBLAS): {w2['tracekern_cuda'] / w2['torch_eager']:.2f}x (target <= 1.3x)")
    return "\n".join(lines)


def main(argv=None) -> dict:
    return script("python -m bench.cuda", __doc__, run, report, "cuda.json", argv)


if __name__ == "__main__":
    main()
