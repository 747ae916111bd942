"""Kernel calls per step, before and after issue 26 (a section of the main job): for every workload and
strategy of kernels/, tracekern's value_and_grad step, counted (no timing):

- kernels: its distinct compile units;
- invocations: the kernel calls one step makes, loop steps included (counted with every driver and
  loop body run as Python, so that each call passes a counter);
- from Python, before: the calls from Python into compiled code one step makes with its loops
  driven from the step (tk.config.compiled_loops=False: the code of before this issue), each
  costing a Python call, argument checks and, for a parallel kernel, a fork of the thread pool;
- from Python, now: the same with the defaults (small loops compiled whole).

    python -m bench.calls [--quick] [--only WORKLOAD ...] [--json PATH]
    python -m bench --sections calls

JSON: the section "calls" holds {"size", "notes", "rows": [{"workload", "strategy", "kernels",
"invocations", "python_calls_before", "python_calls_now"}]}."""
from __future__ import annotations

import argparse
import json
import sys
import time

from bench.harness import Section, in_process, main_job


def _count(staged, args) -> tuple[int, int, int]:
    """(distinct kernels, calls from Python to compiled code of one step, of those to kernels), by
    wrapping every compiled function the step's driver module names with a counter."""
    from numba.core.dispatcher import Dispatcher

    staged(*args)   # (compiles: counting starts with the second call)
    step = next(iter(staged._cache.values())).run
    module = step._module
    counts = {"all": 0, "kernels": 0}

    def counted(name, fn):
        def call(*a):
            counts["all"] += 1
            counts["kernels"] += name.startswith("K")
            return fn(*a)
        return call
    originals = {k: v for k, v in vars(module).items() if isinstance(v, Dispatcher)}
    for name, fn in originals.items():
        setattr(module, name, counted(name, fn))
    try:
        staged(*args)
    finally:
        for name, fn in originals.items():
            setattr(module, name, fn)
    return step.units, counts["all"], counts["kernels"]


def count_workload(name: str, size: str) -> list[dict]:
    """The counts of every strategy of one workload (in a process of its own: it changes the cpu
    backend's thresholds to run every driver and loop body as Python)."""
    import kernels
    import tracekern as tk
    from tracekern.backends import cpu

    rows = []
    for strategy in kernels.MODULES[name].STRATEGIES:
        w = kernels.make(name, size, strategy)
        with tk.config.override(compiled_loops=True):
            units, now, _ = _count(tk.jit(tk.value_and_grad(w.loss)), w.args)
        with tk.config.override(compiled_loops=False):
            _, before, _ = _count(tk.jit(tk.value_and_grad(w.loss)), w.args)
            saved = cpu.NJIT_DRIVER_CALLS
            cpu.NJIT_DRIVER_CALLS = -1          # every driver and body Python: each kernel call is counted
            try:
                _, _, invocations = _count(tk.jit(tk.value_and_grad(w.loss)), w.args)
            finally:
                cpu.NJIT_DRIVER_CALLS = saved
        rows.append({"workload": name, "strategy": strategy, "kernels": units, "invocations": invocations,
                     "python_calls_before": before, "python_calls_now": now})
    return rows


def run(options: argparse.Namespace) -> dict:
    import kernels

    size = "quick" if options.quick else "full"
    names = [n for n in kernels.MODULES if not getattr(options, "only", None) or n in options.only]
    rows, start = [], time.perf_counter()
    for name in names:
        print(f"counting {name} ...", end="", flush=True, file=sys.stderr)
        rows += in_process("bench.calls", "--count", name, size)
        print(f" ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    notes = ["invocations: kernel calls per step, loop steps included; from Python: calls from the interpreter into "
             "compiled code per step, with loops driven from the step (before) and compiled whole (now)"]
    return {"size": size, "notes": notes, "rows": rows}


def table(result: dict) -> str:
    lines = [f"{'workload':12s} {'strategy':13s} {'kernels':>7s} {'invocations':>11s} {'Python before':>13s} {'Python now':>10s}"]
    for r in result["rows"]:
        lines.append(f"{r['workload']:12s} {r['strategy']:13s} {r['kernels']:7d} {r['invocations']:11d} "
                     f"{r['python_calls_before']:13d} {r['python_calls_now']:10d}")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    lines = ["| workload | strategy | distinct kernels | kernel calls a step | from Python, before | from Python, now |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['workload']} | {r['strategy']} | {r['kernels']} | {r['invocations']} | "
                     f"{r['python_calls_before']} | {r['python_calls_now']} |")
    return "\n".join(lines)


SECTION = Section("calls", run, table, markdown=markdown)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--count"]:
        print(json.dumps(count_workload(argv[1], argv[2])))
        return None
    return main_job([SECTION], argv, prog="python -m bench.calls", doc=__doc__, name="calls")


if __name__ == "__main__":
    main()
