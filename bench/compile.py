"""Compile time against depth: tracekern's cold compile (a fresh process, an empty tracekern cache)
and warm start (a fresh process, the disk cache) of value_and_grad, beside JAX jit's compile of the
same function, on the MLP at 2, 8 and 32 layers (width 256, batch 64), the transformer of kernels/
at 1, 2, 4 and 8 blocks (sequence 128, width 128), and W1 (kernels/chain at full size).

    python -m bench.compile [--quick] [--json PATH]

Each figure is one process's first call minus its second (the step's own run time). Numba's own
start-up and tracekern's math library are warmed first in every tracekern process, and the warm
start is also given beyond Numba's start-up (a one-line cached njit function loaded first).
"kernels" is the number of distinct compile units (kernels) a step has and "calls" its kernel calls;
"compiled" counts what the cold process compiled, in it or in its compile workers. JAX's figure is
the same first-minus-second call of jax.jit(jax.value_and_grad(f)) after JAX has started.
Targets (issue 15): the 8-block transformer at most 4 s and at most 1.5x the 1-block time; MLP 32
layers at most 2 s; W1 under 2 s; warm start under 0.1 s beyond Numba's start-up."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from bench.harness import Section, in_process, load_average, main_job, peer_tools

CONFIGS = {   # (workload, its inputs' sizes, label)
    "full": [("mlp", (2, 256, 64), "MLP 2 layers"), ("mlp", (8, 256, 64), "MLP 8 layers"),
             ("mlp", (32, 256, 64), "MLP 32 layers"),
             ("transformer", (1, 128, 128), "transformer 1 block"), ("transformer", (2, 128, 128), "transformer 2 blocks"),
             ("transformer", (4, 128, 128), "transformer 4 blocks"), ("transformer", (8, 128, 128), "transformer 8 blocks"),
             ("chain", (1 << 22,), "W1 (chain, 2**22)")],
}
CONFIGS["quick"] = [c for c in CONFIGS["full"] if c[2] in ("MLP 2 layers", "MLP 32 layers", "transformer 1 block",
                                                          "transformer 4 blocks", "W1 (chain, 2**22)")]
_PROBE = "from numba import njit\n\n\n@njit(cache=True)\ndef probe(a):\n    return a + 1\n"


# -- in the measuring processes ----------------------------------------------------------------------
def _workload(name: str, sizes: tuple):
    import kernels

    module = kernels.MODULES[name]
    return module.loss, module.inputs(*sizes)


def child_tracekern(name: str, sizes: tuple, probe_dir: str | None) -> dict:
    import numpy as np

    import tracekern as tk
    from tracekern.backends import units

    t = time.perf_counter()
    if probe_dir:   # Numba's own start-up: its CPU target, by loading a cached one-line function
        sys.path.insert(0, probe_dir)
        from tk_probe import probe

        probe(1)
    numba_start = time.perf_counter() - t
    tk.value_and_grad(lambda x: np.sum(np.tanh(x)))(np.ones(8, np.float32))   # the math library, warm
    loss, args = _workload(name, sizes)
    f = tk.value_and_grad(loss)
    before = units.compiled()
    t0 = time.perf_counter()
    f(*args)
    t1 = time.perf_counter()
    f(*args)
    t2 = time.perf_counter()
    after = units.compiled()
    step = next(iter(f._cache.values())).run
    return {"first_s": t1 - t0, "second_s": t2 - t1, "numba_start_s": numba_start, "kernels": step.units,
            "calls": step.driver.count("# kernel "), "jitted_driver": step.jitted,
            "compiled": after["kernels"] - before["kernels"] + after["drivers"] - before["drivers"]}


def child_jax(name: str, sizes: tuple) -> dict:
    from kernels import peers

    peers.make("jax", "chain", "test", "none").run()      # JAX's runtime starts before the timing
    _, args = _workload(name, sizes)
    step = peers.make("jax", name, "test", "none", args=args)
    t0 = time.perf_counter()
    step.run()
    t1 = time.perf_counter()
    step.run()
    t2 = time.perf_counter()
    return {"first_s": t1 - t0, "second_s": t2 - t1}


# -- the section ----------------------------------------------------------------------------------------
def run(options) -> dict:
    size = "quick" if options.quick else "full"
    present, notes = peer_tools()
    use_jax = "jax" in present and (not getattr(options, "tools", None) or "jax" in options.tools)
    rows = []
    with tempfile.TemporaryDirectory() as probe_dir:
        with open(os.path.join(probe_dir, "tk_probe.py"), "w") as fh:
            fh.write(_PROBE)
        in_process("bench.compile", "--child", "tracekern", "chain", json.dumps([64]), probe_dir)   # caches the probe
        for name, sizes, label in CONFIGS[size]:
            print(f"{label} ...", end="", flush=True, file=sys.stderr)
            with tempfile.TemporaryDirectory() as cache:
                env = {"TRACEKERN_CACHE_DIR": cache}
                cold = in_process("bench.compile", "--child", "tracekern", name, json.dumps(sizes), "", env=env)
                warm = in_process("bench.compile", "--child", "tracekern", name, json.dumps(sizes), probe_dir, env=env)
            row = {"workload": name, "sizes": list(sizes), "label": label, "kernels": cold["kernels"],
                   "calls": cold["calls"], "jitted_driver": cold["jitted_driver"], "compiled": cold["compiled"],
                   "cold_s": max(cold["first_s"] - cold["second_s"], 0.0),
                   "warm_s": max(warm["first_s"] - warm["second_s"], 0.0), "numba_start_s": warm["numba_start_s"],
                   "step_s": cold["second_s"], "jax_s": None}
            if use_jax:
                got = in_process("bench.compile", "--child", "jax", name, json.dumps(sizes))
                row["jax_s"] = max(got["first_s"] - got["second_s"], 0.0)
            rows.append(row)
            print(f" {row['cold_s']:.2f} s", file=sys.stderr)
    notes = [n for n in notes if n.startswith("JAX")]
    by = {r["label"]: r for r in rows}
    one, eight = by.get("transformer 1 block"), by.get("transformer 8 blocks")
    if one and eight:
        notes.append(f"transformer: 8 blocks compile in {eight['cold_s']:.2f} s, {eight['cold_s'] / one['cold_s']:.2f}x "
                     "the 1-block time (targets: at most 4 s, at most 1.5x)")
    notes.append("warm start beyond Numba's start-up: the warm figure, taken after a cached one-line njit function was "
                 "loaded first (Numba's own start-up, given as 'numba start')")
    return {"rows": rows, "notes": notes, "load_average_end": load_average()}


def table(result: dict) -> str:
    lines = [f"{'program':24s} {'kernels':>7s} {'calls':>6s} {'driver':>6s} {'cold s':>7s} {'warm s':>7s} "
             f"{'numba start':>11s} {'JAX jit s':>9s} {'step ms':>8s}"]
    for r in result["rows"]:
        jax = "-" if r["jax_s"] is None else f"{r['jax_s']:.2f}"
        lines.append(f"{r['label']:24s} {r['kernels']:7d} {r['calls']:6d} {'njit' if r['jitted_driver'] else 'Python':>6s} "
                     f"{r['cold_s']:7.2f} {r['warm_s']:7.3f} {r['numba_start_s']:11.3f} {jax:>9s} {r['step_s'] * 1e3:8.1f}")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    lines = ["| program | distinct kernels | kernel calls | driver | cold compile s | warm start s | JAX jit s |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        jax = "-" if r["jax_s"] is None else f"{r['jax_s']:.2f}"
        lines.append(f"| {r['label']} | {r['kernels']} | {r['calls']} | {'njit' if r['jitted_driver'] else 'Python'} | "
                     f"{r['cold_s']:.2f} | {r['warm_s']:.3f} | {jax} |")
    return "\n".join(lines)


def compare(old: dict, new: dict) -> str:
    before = {r["label"]: r for r in old["rows"]}
    out = []
    for r in new["rows"]:
        o = before.get(r["label"])
        if o:
            out.append(f"{r['label']:24s} cold {o['cold_s']:.2f} -> {r['cold_s']:.2f} s ({r['cold_s'] / max(o['cold_s'], 1e-9):.2f}x)"
                       f", warm {o['warm_s']:.3f} -> {r['warm_s']:.3f} s")
    return "\n".join(out)


SECTION = Section("compile", run, table, compare=compare, markdown=markdown)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        kind, name, sizes = argv[1], argv[2], tuple(json.loads(argv[3]))
        result = child_tracekern(name, sizes, argv[4] or None) if kind == "tracekern" else child_jax(name, sizes)
        print(json.dumps(result))
        return None
    return main_job([SECTION], argv, prog="python -m bench.compile", doc=__doc__, name="compile")


if __name__ == "__main__":
    main()
