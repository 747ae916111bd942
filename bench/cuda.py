"""CUDA backend benchmark on a real GPU, value_and_grad with the inputs already on the device:
W1 (the 16-layer elementwise chain, 2**26 float32), W2 (the 8 x 1024 MLP, batch 4096), the
4-block transformer of kernels/ (sequence 256, width 256) and the 1000-step RNN of kernels/ (2**16
units; every step kept, and checkpoint=32).

    python -m bench.cuda [--quick] [--json PATH] [--only W1 W2 transformer rnn]

Matmuls in float32 ("highest") and with TF32 tensor cores allowed ("tf32") are separate rows, for
every tool that has the switch: tracekern's matmul_precision, PyTorch's
torch.backends.cuda.matmul.allow_tf32, JAX's default_matmul_precision. Peers when importable with
a GPU: PyTorch eager and torch.compile, JAX jit. W1's roofline is a device-to-device copy of its
input. tracekern's cold compile on the GPU (a fresh process, an empty cache) is measured for each
workload. Targets (issue 16, on an H100): W2 at most 1.1x PyTorch eager in float32 and at most 1.1x
JAX with TF32; W1 and the transformer no slower than torch.compile; the RNN within 1.5x of JAX.
Times are medians of interleaved rounds with their min-max, every ratio from this one run. Under
NUMBA_ENABLE_CUDASIM=1 it runs with --quick, but its times mean nothing. Each row goes to stderr as
soon as it is measured, and the JSON is rewritten after each group of rows with "partial": true until the end
(a run cut by a time limit keeps what it measured)."""
from __future__ import annotations

import contextlib
import json
import sys
import tempfile

import numpy as np

import kernels
import tracekern as tk
from bench.harness import child_result, in_process, interleaved, machine, save, script

WORKLOADS = {   # name -> (kernels module, inputs at full size, at quick size, whether it has matmuls)
    "W1": ("chain", (1 << 26,), (1 << 10,), False),
    "W2": ("mlp", (8, 1024, 4096), (2, 16, 8), True),
    "transformer": ("transformer", (4, 256, 256), (1, 4, 8), True),
    "rnn": ("rnn", (1000, 1 << 16), (6, 64), False),
}
LABEL_TOOL = {"tracekern": "tracekern cuda", "torch_eager": "torch eager", "torch_compile": "torch.compile",
              "jax_jit": "JAX jit"}


def _sync():
    from numba import cuda

    cuda.synchronize()


def _device(tree):
    from numba import cuda

    if isinstance(tree, (list, tuple)):
        return type(tree)(_device(t) for t in tree)
    return cuda.to_device(np.ascontiguousarray(tree))


def _inputs(name: str, sizes: tuple) -> tuple:
    return kernels.MODULES[name].inputs(*sizes)


def _losses(name: str) -> dict:
    """strategy -> the tracekern loss (the rnn's two strategies; the others have no annotation here)."""
    module = kernels.MODULES[name]
    if name != "rnn":
        return {"none": module.loss}
    return {s: (lambda a, xs, k=k: module.loss(a, xs, checkpoint=k)) for s, k in (("none", None), ("checkpoint32", 32))}


def _on_gpu(tool: str) -> bool:
    if tool == "torch":
        import torch

        return torch.cuda.is_available()
    import jax

    return jax.default_backend() == "gpu"


@contextlib.contextmanager
def _precision(tool: str, precision: str):
    """The peer's own switch for TF32 matmuls, set for the block (traced and run inside it)."""
    if tool == "torch":
        import torch

        before = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        try:
            yield
        finally:
            torch.backends.cuda.matmul.allow_tf32 = before
    else:
        import jax

        with jax.default_matmul_precision("tensorfloat32" if precision == "tf32" else "float32"):
            yield


def _peer_steps(name: str, strategy: str, args, precision: str, notes: list) -> dict:
    from kernels import peers

    steps = {}
    for tool, label, options in (("torch", "torch_eager", {"device": "cuda"}),
                                 ("torch", "torch_compile", {"device": "cuda", "compiled": True}), ("jax", "jax_jit", {})):
        if not peers.available(tool) or not _on_gpu(tool):
            notes.append(f"{LABEL_TOOL[label]}: {peers.TOOLS[tool][1]} with a GPU is not installed: skipped")
            continue
        try:
            step = peers.make(tool, name, "full", strategy, args=args, **options)

            def run(step=step, tool=tool):
                with _precision(tool, precision):
                    out = step.run()
                if tool == "jax":
                    import jax

                    jax.block_until_ready(out)
            run()
            steps[label] = run
        except Exception as e:  # noqa: BLE001 (no Triton, no compiler: a note, not a failure)
            notes.append(f"{LABEL_TOOL[label]} ({name}/{strategy}) failed: {type(e).__name__}: {str(e)[:120]}")
    return steps


def _cold_compile(name: str, sizes: tuple, strategy: str, precision: str) -> float | None:
    """tracekern's cold compile of the workload on the GPU: a fresh process with an empty cache."""
    with tempfile.TemporaryDirectory() as cache:
        try:
            got = in_process("bench.cuda", "--compile", name, json.dumps(list(sizes)), strategy, precision,
                             env={"TRACEKERN_CACHE_DIR": cache})
        except RuntimeError:
            return None
    return got["compile_s"]


def compile_child(name: str, sizes: tuple, strategy: str, precision: str) -> dict:
    import time

    args = _device(_inputs(name, sizes))
    tk.jit(lambda x: x + 1, backend="cuda")(np.ones(2, np.float32))   # the CUDA context and the math library
    _sync()
    f = tk.jit(tk.value_and_grad(_losses(name)[strategy]), backend="cuda", matmul_precision=precision)
    t0 = time.perf_counter()
    f(*args)
    _sync()
    t1 = time.perf_counter()
    f(*args)
    _sync()
    t2 = time.perf_counter()
    return {"compile_s": max((t1 - t0) - (t2 - t1), 0.0)}


def run(args) -> dict:
    from numba import cuda

    from tracekern.backends.cuda import launch_config

    launch = launch_config()
    quick = args.quick
    gpu = "Numba CUDA simulator" if launch.simulator else cuda.get_current_device().name
    gpu = gpu.decode() if isinstance(gpu, bytes) else gpu
    notes = []
    if launch.simulator:
        notes.append("simulator: the times below measure Python threads, not a GPU; peers and compile times skipped")
    if not launch.cublas:
        notes.append("cuBLAS (nvmath-python) is not installed or not usable here: matmuls run on the tiled kernel")
    rows = []
    for label, (name, full, small, matmuls) in WORKLOADS.items():
        if args.only and label not in args.only:
            continue
        sizes = small if quick else full
        host = _inputs(name, sizes)
        dev = _device(host)
        for strategy, loss in _losses(name).items():
            want = tk.value_and_grad(loss)(*host) if quick else None    # correct before fast (on the CPU)
            for precision in (("highest", "tf32") if matmuls else ("highest",)):
                f = tk.jit(tk.value_and_grad(loss), backend="cuda", matmul_precision=precision)
                value, _ = f(*dev)
                if want is not None:
                    assert np.allclose(value.copy_to_host(), want[0], rtol=1e-3), f"{label} differs from the cpu backend"

                def ours(f=f):
                    f(*dev)
                    _sync()
                steps = {"tracekern": ours}
                if not launch.simulator:
                    steps.update(_peer_steps(name, strategy, host, precision, notes))
                if label == "W1" and precision == "highest":
                    copy = cuda.device_array_like(dev[0])
                    steps["roofline_copy"] = lambda copy=copy: (copy.copy_to_device(dev[0]), _sync())
                timings = interleaved(steps, *((3, 0.0) if quick else (10, 1.0)))
                base = timings["tracekern"].median
                compile_s = None if launch.simulator or quick else _cold_compile(name, sizes, strategy, precision)
                for tool, t in timings.items():
                    rows.append({"workload": label, "strategy": strategy, "precision": precision, "tool": tool,
                                 **t.as_dict(), "ratio_to_tracekern": t.median / base,
                                 "compile_s": compile_s if tool == "tracekern" else None})
                    print(_line(rows[-1]), file=sys.stderr, flush=True)
                save(dict(machine(), device=gpu, quick=quick, launch=str(launch), rows=rows, notes=notes, partial=True),
                     args.json)
    return {"device": gpu, "quick": quick, "launch": str(launch), "rows": rows, "notes": notes, "partial": False}


def _line(x: dict) -> str:
    spread = f"{x['time_min_s'] * 1e3:.3f}-{x['time_max_s'] * 1e3:.3f}"
    comp = "-" if x["compile_s"] is None else f"{x['compile_s']:.1f}"
    return (f"{x['workload']:12s} {x['strategy']:13s} {x['precision']:8s} {LABEL_TOOL.get(x['tool'], x['tool']):16s} "
            f"{x['time_s'] * 1e3:10.3f} {spread:>17s} {x['ratio_to_tracekern']:11.2f} {comp:>9s}")


def report(r: dict) -> str:
    lines = [f"device: {r['device']} ({r['launch']})",
             f"{'workload':12s} {'strategy':13s} {'matmul':8s} {'tool':16s} {'median ms':>10s} {'min-max ms':>17s} "
             f"{'/ tracekern':>11s} {'compile s':>9s}"]
    lines += [_line(x) for x in r["rows"]]
    return "\n".join(lines)


def main(argv=None) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--compile"]:
        child_result(compile_child(argv[1], tuple(json.loads(argv[2])), argv[3], argv[4]))
        return None
    return script("python -m bench.cuda", __doc__, run, report, "cuda.json", argv,
                  options=lambda ap: ap.add_argument("--only", nargs="+", choices=list(WORKLOADS), metavar="NAME",
                                                     help="workloads to run, in the order W1 W2 transformer rnn "
                                                          "(default: all)"))


if __name__ == "__main__":
    main()
