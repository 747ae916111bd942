"""The recompute-overhead benchmark: for every workload in kernels/ and every strategy it can be
built with, the time of value_and_grad, its ratio to no annotation, the residual bytes tk.vjp keeps
between forward and backward, and the measured peak memory of the step. Each configuration runs in
a process of its own, so one does not pollute the next one's memory.

    python -m bench [--quick] [--only NAME ...] [--json PATH] [--plot PATH]
    python -m bench --compare OLD.json NEW.json

JSON (bench/results/recompute.json): {"date", "machine", "cores", "size", "notes": [...],
"rows": [{"workload", "strategy", "time_s", "ratio", "residual_bytes", "peak_bytes",
"planned_peak_bytes", "runs", "peer": null | "jax"}]}. time_s is the median of `runs` calls after
a warm-up; ratio is time_s over the same workload's "none" row of the same tool, in this run;
peak_bytes is the highest resident memory sampled during those calls above the level before them
(None where /proc is missing)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class PeakSampler:
    """Samples this process's resident memory (Linux /proc/self/statm) every 0.2 ms in a thread."""

    def __init__(self):
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.ok = os.path.exists("/proc/self/statm")
        self.peak = 0
        self._stop = threading.Event()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def __enter__(self):
        if self.ok:
            self.base = self.rss()
            self.peak = self.base
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.0002)

    def __exit__(self, *exc):
        if self.ok:
            self._stop.set()
            self._thread.join()
            self.peak = max(self.peak, self.rss())

    @property
    def above_base(self):
        return self.peak - self.base if self.ok else None


def measure_one(name: str, strategy: str, size: str, runs: int) -> dict:
    """One configuration, in this process: median time, residual bytes, planned and measured peak."""
    import tracekern as tk
    from kernels import make

    w = make(name, size, strategy)
    step = tk.jit(tk.value_and_grad(w.loss))
    step(*w.args)                                     # compile and warm up
    lowered = tk.jit(w.loss).lower(*w.args)
    times = []
    with PeakSampler() as sampler:
        for _ in range(runs):
            t = time.perf_counter()
            step(*w.args)
            times.append(time.perf_counter() - t)
    planned = step.lower(*w.args).memory.peak_bytes["step"]
    return {"workload": name, "strategy": strategy, "time_s": float(np.median(times)), "runs": runs,
            "residual_bytes": lowered.memory.residual_bytes, "planned_peak_bytes": planned,
            "peak_bytes": sampler.above_base, "peer": None}


def measure_jax(name: str, strategy: str, size: str, runs: int) -> dict | None:
    """The same workload and strategy in JAX (jax.checkpoint with the matching policy), where a JAX
    version exists: chain and mlp."""
    import jax
    import jax.numpy as jnp

    from kernels import make

    w = make(name, size, "none")
    policy = {"recompute": jax.checkpoint_policies.nothing_saveable,
              "dots": jax.checkpoint_policies.dots_saveable}.get(strategy)
    if name == "chain":
        from kernels.chain import LAYERS

        def layer(x, k):
            return [jnp.tanh, jnp.sin, lambda v: v * 0.9 + 0.1, lambda v: jnp.exp(-v * v)][k % 4](x)
        layers = [lambda x, k=k: layer(x, k) for k in range(LAYERS)]

        def loss(x):
            for f in layers:
                x = (jax.checkpoint(f, policy=policy) if policy else f)(x)
            return jnp.sum(x)
        args = tuple(jnp.asarray(a) for a in w.args)
    elif name == "mlp":
        def layer(h, wt):
            return jnp.tanh(h @ wt)
        f = jax.checkpoint(layer, policy=policy) if policy else layer

        def loss(ws, x, y):
            h = x
            for wt in ws:
                h = f(h, wt)
            return jnp.mean((h - y) ** 2)
        ws, x, y = w.args
        args = ([jnp.asarray(a) for a in ws], jnp.asarray(x), jnp.asarray(y))
    else:
        return None
    step = jax.jit(jax.value_and_grad(loss))
    jax.block_until_ready(step(*args))
    times = []
    with PeakSampler() as sampler:
        for _ in range(runs):
            t = time.perf_counter()
            jax.block_until_ready(step(*args))
            times.append(time.perf_counter() - t)
    return {"workload": name, "strategy": strategy, "time_s": float(np.median(times)), "runs": runs,
            "residual_bytes": None, "planned_peak_bytes": None, "peak_bytes": sampler.above_base, "peer": "jax"}


def _in_process(name, strategy, size, runs, peer) -> dict | None:
    cmd = [sys.executable, "-m", "bench.recompute", "--one", name, strategy, size, str(runs)] + (["--peer", peer] if peer else [])
    # glibc returns freed blocks of 16 KiB or more to the system at once (mmap), so resident memory
    # follows the live arrays and the sampler sees each step's peak, not the heap's high-water mark
    env = dict(os.environ, PYTHONPATH=ROOT, MALLOC_MMAP_THRESHOLD_="16384", MALLOC_TRIM_THRESHOLD_="0")
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{name}/{strategy} ({peer or 'tracekern'}) failed:\n{out.stderr[-2000:]}")
    line = out.stdout.strip().splitlines()[-1]
    return None if line == "null" else json.loads(line)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def run(quick: bool, only: list[str] | None = None) -> dict:
    from kernels import MODULES

    size, runs = ("quick", 3) if quick else ("full", 5)
    notes = []
    peers = ["jax"] if _have("jax") else []
    if not peers:
        notes.append("JAX not installed: its rows are skipped")
    for mod, what in (("torch", "PyTorch (torch.utils.checkpoint)"), ("tensorflow", "TensorFlow (tf.recompute_grad)")):
        if not _have(mod):
            notes.append(f"{what} not installed: its rows are skipped")
        else:
            notes.append(f"{what} is installed but has no version of these workloads yet")
    configs = [(name, s, None) for name, m in MODULES.items() if not only or name in only for s in m.STRATEGIES]
    configs += [(name, s, p) for p in peers for name, s, _ in list(configs) if name in ("chain", "mlp")]
    rows = []
    start = time.perf_counter()
    for i, (name, strategy, peer) in enumerate(configs, 1):
        label = f"{name} / {strategy}" + (f" ({peer})" if peer else "")
        print(f"[{i}/{len(configs)}] {label} ...", end="", flush=True, file=sys.stderr)
        row = _in_process(name, strategy, size, runs, peer)
        if row is not None:
            rows.append(row)
            print(f" {row['time_s'] * 1e3:.1f} ms  ({time.perf_counter() - start:.0f} s so far)", file=sys.stderr)
        else:
            print(" (no version)", file=sys.stderr)
    for row in rows:
        base = next(r for r in rows if r["workload"] == row["workload"] and r["peer"] == row["peer"] and r["strategy"] == "none")
        row["ratio"] = row["time_s"] / base["time_s"]
    return {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "size": size, "notes": notes, "rows": rows}


def _mb(b) -> str:
    return "-" if b is None else f"{b / 2**20:.1f}"


def table(result: dict) -> str:
    lines = [f"{'workload':12s} {'strategy':13s} {'tool':9s} {'time ms':>9s} {'ratio':>6s} {'residual MB':>12s} "
             f"{'peak MB':>8s} {'planned MB':>10s}"]
    for r in result["rows"]:
        lines.append(f"{r['workload']:12s} {r['strategy']:13s} {r['peer'] or 'tracekern':9s} {r['time_s'] * 1e3:9.1f} "
                     f"{r['ratio']:6.2f} {_mb(r['residual_bytes']):>12s} {_mb(r['peak_bytes']):>8s} {_mb(r['planned_peak_bytes']):>10s}")
    return "\n".join(lines)


def compare(old_path: str, new_path: str) -> str:
    """new / old for the time and peak memory of every row both runs have."""
    old, new = (json.load(open(p)) for p in (old_path, new_path))
    key = lambda r: (r["workload"], r["strategy"], r["peer"])  # noqa: E731
    before = {key(r): r for r in old["rows"]}
    lines = [f"{'workload':12s} {'strategy':13s} {'tool':9s} {'time new/old':>12s} {'peak new/old':>12s}"]
    for r in new["rows"]:
        o = before.get(key(r))
        if o is None:
            continue
        peak = f"{r['peak_bytes'] / o['peak_bytes']:.2f}" if r["peak_bytes"] and o["peak_bytes"] else "-"
        lines.append(f"{r['workload']:12s} {r['strategy']:13s} {r['peer'] or 'tracekern':9s} "
                     f"{r['time_s'] / o['time_s']:12.2f} {peak:>12s}")
    return "\n".join(lines)


def plot(result: dict, path: str) -> str | None:
    """Time ratio against measured peak memory, a panel per workload; None if matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(dict.fromkeys(r["workload"] for r in result["rows"]))
    fig, axes = plt.subplots(1, len(names), figsize=(3.2 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        for r in (r for r in result["rows"] if r["workload"] == name):
            label = r["strategy"] + (f" ({r['peer']})" if r["peer"] else "")
            ax.scatter((r["peak_bytes"] or 0) / 2**20, r["ratio"], marker="s" if r["peer"] else "o")
            ax.annotate(label, ((r["peak_bytes"] or 0) / 2**20, r["ratio"]), fontsize=7)
        ax.set_title(name)
        ax.set_xlabel("peak MB")
    axes[0][0].set_ylabel("time / no annotation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, 3 runs (about a minute)")
    ap.add_argument("--only", nargs="+", help="workloads to run (default: all)")
    ap.add_argument("--json", default=os.path.join(HERE, "results", "recompute.json"))
    ap.add_argument("--plot", default=os.path.join(HERE, "results", "recompute.png"))
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    ap.add_argument("--peer", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.compare:
        print(compare(*args.compare))
        return None
    if args.one:
        name, strategy, size, runs = args.one
        row = (measure_jax if args.peer == "jax" else measure_one)(name, strategy, size, int(runs))
        print(json.dumps(row))
        return None
    result = run(args.quick, args.only)
    print(table(result))
    for note in result["notes"]:
        print("note:", note)
    from bench.cpu import save

    save(result, args.json)
    png = plot(result, args.plot)
    print(f"wrote {png}" if png else "note: matplotlib not installed (pip install -e '.[plot]'): no plot")
    return result


if __name__ == "__main__":
    main()
