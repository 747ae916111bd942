"""W1's fused loop per element (issue 26's "W1 at small sizes"): value_and_grad of kernels/chain.py's
16-layer chain at 2**16, 2**20 and 2**22 float32 values, in ns per element, tracekern on 1 and 2
threads against JAX jit, in interleaved rounds (bench/harness.py), wall time and CPU time.

    python -m bench.w1_probe                             # this checkout
    python bench/w1_probe.py --against ../other-checkout  # A/B: this checkout and another, alternating

--against runs the probe in child processes, PYTHONPATH pointing at each tree in turn (ABAB...), and
prints each tree's rows and the ratio new / old of tracekern's times: on a shared machine only ratios
from one run mean anything, and CPU time (process time per call) is steadier than wall time when
other processes compete for the cores. Nothing here is a test."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

SIZES = (1 << 16, 1 << 20, 1 << 22)


def _timed(fn, runs: int) -> tuple[list[float], list[float]]:
    wall, cpu = [], []
    for _ in range(runs):
        c, t = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return wall, cpu


def measure(sizes, rounds: int, seconds: float, jax: bool) -> list[dict]:
    """Rows {n, tool, threads, ns_per_element (median wall), min, max, cpu_ns_per_element}."""
    import tracekern as tk
    from bench import harness  # noqa: F401  (compiles before the first call: tiers off)
    from kernels import chain, peers

    rows = []
    for n in sizes:
        (x,) = chain.inputs(n)
        vg = tk.value_and_grad(chain.loss)
        fns = {}
        for threads in (1, 2):
            def run(threads=threads):
                with tk.config.override(threads=threads):
                    return vg(x)
            fns[("tracekern", threads)] = run
        if jax and peers.available("jax"):
            fns[("jax_jit", None)] = peers.make("jax", "chain", "quick", "none", args=(x,)).run
        for fn in fns.values():
            fn()
            fn()
        per = {k: max(3, int(seconds / rounds / max(_timed(fn, 1)[0][0], 1e-6))) for k, fn in fns.items()}
        wall = {k: [] for k in fns}
        cpu = {k: [] for k in fns}
        for _ in range(rounds):
            for k, fn in fns.items():
                w, c = _timed(fn, per[k])
                wall[k] += w
                cpu[k] += c
        for (tool, threads), w in wall.items():
            rows.append({"n": n, "tool": tool, "threads": threads, "runs": len(w),
                         "ns_per_element": float(np.median(w)) / n * 1e9, "min": min(w) / n * 1e9,
                         "max": max(w) / n * 1e9, "cpu_ns_per_element": float(np.median(cpu[(tool, threads)])) / n * 1e9})
    return rows


def table(rows: list[dict], label: str = "") -> str:
    lines = [f"{label}{'n':>9s} {'tool':10s} {'threads':>7s} {'ns/elem':>8s} {'min-max':>13s} {'cpu ns/elem':>11s} "
             f"{'jax / this':>10s}"]
    for r in rows:
        jax = next((j for j in rows if j["n"] == r["n"] and j["tool"] == "jax_jit"), None)
        ratio = f"{jax['ns_per_element'] / r['ns_per_element']:.2f}x" if jax and r["tool"] == "tracekern" else ""
        lines.append(f"{label}{r['n']:9d} {r['tool']:10s} {str(r['threads'] or '-'):>7s} {r['ns_per_element']:8.1f} "
                     f"{r['min']:6.1f}-{r['max']:<6.1f} {r['cpu_ns_per_element']:11.1f} {ratio:>10s}")
    return "\n".join(lines)


def against(other: str, args) -> None:
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"new": here, "old": os.path.abspath(other)}
    runs: dict[str, list[list[dict]]] = {"new": [], "old": []}
    for _ in range(args.ab):
        for name, tree in trees.items():
            # (run as a script, so that sys.path starts with bench/, not a tree: tracekern comes from `tree`)
            env = dict(os.environ, PYTHONPATH=tree)
            cmd = [sys.executable, os.path.abspath(__file__), "--json", "--rounds", str(args.rounds), "--seconds",
                   str(args.seconds), "--sizes", *map(str, args.sizes)] + ([] if args.jax else ["--no-jax"])
            out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
            print(table(runs[name][-1], f"{name:4s}"), flush=True)
    print("\nnew / old, tracekern (median over the A/B runs of each run's median; wall and CPU time):")
    for n in args.sizes:
        for threads in (1, 2):
            def med(name, key):
                return float(np.median([r[key] for run in runs[name] for r in run
                                        if r["n"] == n and r["tool"] == "tracekern" and r["threads"] == threads]))
            print(f"  n={n:8d} threads={threads}: wall {med('new', 'ns_per_element'):6.1f} / "
                  f"{med('old', 'ns_per_element'):6.1f} ns = {med('new', 'ns_per_element') / med('old', 'ns_per_element'):.2f}x, "
                  f"cpu {med('new', 'cpu_ns_per_element'):6.1f} / {med('old', 'cpu_ns_per_element'):6.1f} ns = "
                  f"{med('new', 'cpu_ns_per_element') / med('old', 'cpu_ns_per_element'):.2f}x")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", nargs="+", type=int, default=list(SIZES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=1.5, help="per size and tool, all rounds together")
    ap.add_argument("--no-jax", dest="jax", action="store_false")
    ap.add_argument("--against", metavar="TREE", help="another checkout to compare with, run alternately")
    ap.add_argument("--ab", type=int, default=2, help="with --against: runs of each tree")
    ap.add_argument("--json", action="store_true", help="print the rows as one JSON line")
    args = ap.parse_args(argv)
    if args.against:
        against(args.against, args)
        return
    rows = measure(args.sizes, args.rounds, args.seconds, args.jax)
    print(json.dumps(rows) if args.json else table(rows))


if __name__ == "__main__":
    main()
