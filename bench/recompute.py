"""The recompute-overhead benchmark: for every workload in kernels/ and every strategy it can be
built with, the time of value_and_grad, its ratio to no annotation, the residual bytes tk.vjp keeps
between forward and backward, and the measured peak memory of the step. Each configuration runs in
a process of its own, so one does not pollute the next one's memory.

    python -m bench [--quick] [--only NAME ...] [--json PATH] [--plot PATH]
    python -m bench --compare OLD.json NEW.json

JSON (bench/results/recompute.json): {"date", "machine", "cores", "size", "notes": [...],
"rows": [{"workload", "strategy", "time_s", "ratio", "vs_tracekern", "residual_bytes",
"saved_bytes", "peak_bytes", "planned_peak_bytes", "runs", "peer": null | "jax"}]}. time_s is the
median of `runs` calls after a warm-up; ratio is time_s over the same workload's "none" row of the
same tool, in this run; vs_tracekern (peers only) is time_s over tracekern's row of the same
workload and strategy; saved_bytes is the part of residual_bytes that is not the function's own
inputs; peak_bytes is the highest resident memory sampled during those calls above the level before
them (None where /proc is missing)."""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from bench.cpu import median_time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class PeakSampler:
    """Samples this process's resident memory (Linux /proc/self/statm) every 0.2 ms in a thread.

    Entering it tells glibc to return freed blocks of 16 KiB or more to the system at once (mmap,
    no trimming threshold), so that resident memory follows the live arrays; this stays set for
    the rest of the process, so time calls before sampling (it made allocation-heavy steps, such
    as a scan's per-step buffers, up to 2.5x slower)."""

    def __init__(self):
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.ok = os.path.exists("/proc/self/statm")
        self.peak = 0
        self._stop = threading.Event()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def __enter__(self):
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            libc.mallopt(-3, 16384)     # M_MMAP_THRESHOLD
            libc.mallopt(-1, 0)         # M_TRIM_THRESHOLD
            libc.malloc_trim(0)
        except (OSError, AttributeError):
            pass                         # not glibc: peaks may lag behind freed memory
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


def measure_one(name: str, strategy: str, size: str, runs: int) -> dict | None:
    """One configuration, in this process: median time, residual bytes, planned and measured peak."""
    import tracekern as tk
    from kernels import make

    w = make(name, size, strategy)
    step = tk.jit(tk.value_and_grad(w.loss))
    lowered = tk.jit(w.loss).lower(*w.args)
    if runs == 0:                                     # compile only (fills the disk cache)
        step(*w.args)
        return None
    seconds = median_time(lambda: step(*w.args), runs)   # (its first, untimed call compiles)
    with PeakSampler() as sampler:
        for _ in range(min(runs, 3)):
            step(*w.args)
    planned = step.lower(*w.args).memory.peak_bytes["step"]
    return {"workload": name, "strategy": strategy, "time_s": seconds, "runs": runs,
            "residual_bytes": lowered.memory.residual_bytes, "saved_bytes": lowered.memory.saved_bytes,
            "planned_peak_bytes": planned,
            "peak_bytes": sampler.above_base, "peer": None}


def measure_jax(name: str, strategy: str, size: str, runs: int) -> dict | None:
    """The same workload and strategy in JAX (jax.checkpoint with the matching policy), where a JAX
    version exists: chain, mlp and rnn."""
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
    elif name == "rnn":
        loss = _jax_rnn(strategy)
        args = tuple(jnp.asarray(a) for a in w.args)
    else:
        return None
    step = jax.jit(jax.value_and_grad(loss))
    seconds = median_time(lambda: jax.block_until_ready(step(*args)), runs)
    with PeakSampler() as sampler:
        for _ in range(min(runs, 3)):
            jax.block_until_ready(step(*args))
    return {"workload": name, "strategy": strategy, "time_s": seconds, "runs": runs,
            "residual_bytes": None, "saved_bytes": None, "planned_peak_bytes": None,
            "peak_bytes": sampler.above_base, "peer": "jax"}


def _jax_rnn(strategy: str):
    """kernels/rnn.py in JAX. checkpointK: JAX has no binomial checkpointing, so the usual two-level
    scheme: an outer lax.scan over s segments (s the largest divisor of the step count <= K, so at
    most K snapshots), each segment an inner lax.scan under jax.checkpoint."""
    import jax
    import jax.numpy as jnp

    k = None if strategy == "none" else int(strategy.removeprefix("checkpoint"))

    def loss(a, xs):
        def step(h, x):
            h = jnp.tanh(a * h + x)
            return h, jnp.mean(h)
        h0 = jnp.zeros_like(a)
        if k is None:
            h, ys = jax.lax.scan(step, h0, xs)
        else:
            steps = xs.shape[0]
            outer = max(d for d in range(1, min(k, steps) + 1) if steps % d == 0)

            @jax.checkpoint
            def segment(h, xseg):
                return jax.lax.scan(step, h, xseg)
            h, ys = jax.lax.scan(segment, h0, xs.reshape(outer, steps // outer, -1))
        return jnp.mean(h * h) + jnp.mean(ys)
    return loss


def _in_process(name, strategy, size, runs, peer) -> dict | None:
    cmd = [sys.executable, "-m", "bench.recompute", "--one", name, strategy, size, str(runs)] + (["--peer", peer] if peer else [])
    env = dict(os.environ, PYTHONPATH=ROOT)
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{name}/{strategy} ({peer or 'tracekern'}) failed:\n{out.stderr[-2000:]}")
    line = out.stdout.strip().splitlines()[-1]
    return None if line == "null" else json.loads(line)


def _have(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


JAX_PEERS = ("chain", "mlp", "rnn")


def run(quick: bool, only: list[str] | None = None) -> dict:
    from kernels import MODULES

    size, runs = ("quick", 20) if quick else ("full", 5)
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
    configs += [(name, s, p) for p in peers for name, s, _ in list(configs) if name in JAX_PEERS]
    rows = []
    start = time.perf_counter()
    # compile every tracekern configuration first, a process per core: the kernels land in the disk
    # cache, and the timed processes below (one at a time) load them
    ours = [(name, s) for name, s, peer in configs if peer is None]
    workers = max(1, min(os.cpu_count() or 1, len(ours)))
    print(f"compiling {len(ours)} configurations on {workers} processes (cached after the first run) ...",
          end="", flush=True, file=sys.stderr)
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda c: _in_process(c[0], c[1], size, 0, None), ours))
    print(f" {time.perf_counter() - start:.0f} s", file=sys.stderr)
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
        ours = next((r for r in rows if r["workload"] == row["workload"] and r["peer"] is None
                     and r["strategy"] == row["strategy"]), None)
        row["vs_tracekern"] = row["time_s"] / ours["time_s"] if row["peer"] and ours else None
    return {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "size": size, "notes": notes, "rows": rows}


def _mb(b) -> str:
    return "-" if b is None else f"{b / 2**20:.1f}"


def table(result: dict) -> str:
    lines = [f"{'workload':12s} {'strategy':13s} {'tool':9s} {'time ms':>9s} {'ratio':>6s} {'/ tk':>6s} {'residual MB':>12s} "
             f"{'beyond in MB':>12s} {'peak MB':>8s} {'planned MB':>10s}"]
    for r in result["rows"]:
        vs = "-" if r.get("vs_tracekern") is None else f"{r['vs_tracekern']:.2f}"
        lines.append(f"{r['workload']:12s} {r['strategy']:13s} {r['peer'] or 'tracekern':9s} {r['time_s'] * 1e3:9.1f} "
                     f"{r['ratio']:6.2f} {vs:>6s} {_mb(r['residual_bytes']):>12s} {_mb(r.get('saved_bytes')):>12s} "
                     f"{_mb(r['peak_bytes']):>8s} {_mb(r['planned_peak_bytes']):>10s}")
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
    cols = min(4, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.2 * rows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
        for r in (r for r in result["rows"] if r["workload"] == name):
            label = r["strategy"] + (f" ({r['peer']})" if r["peer"] else "")
            ax.scatter((r["peak_bytes"] or 0) / 2**20, r["ratio"], marker="s" if r["peer"] else "o")
            ax.annotate(label, ((r["peak_bytes"] or 0) / 2**20, r["ratio"]), fontsize=7)
        ax.set_title(name)
        ax.set_xlabel("peak MB")
    for row in axes:
        row[0].set_ylabel("time / no annotation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main(argv=None) -> dict | None:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, 20 runs each (about a minute)")
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
