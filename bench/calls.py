"""Kernel calls per step, before and after issue 26 (a section of the main job): for every workload and
strategy of kernels/, tracekern's value_and_grad step, counted (no timing):

- kernels: its distinct compile units;
- invocations: the kernel calls one step makes, loop steps included (counted with every driver and
  loop body run as Python, so that each call passes a counter);
- from Python, before: the calls from Python into compiled code one step makes with its loops
  driven from the step (tk.config.compiled_loops=False: the code of before this issue), each
  costing a Python call, argument checks and, for a parallel kernel, a fork of the thread pool;
- from Python, now: the same with the defaults (small loops compiled whole).

    python -m bench.calls [--quick] [--only WORKLOAD ...] [--against CHECKOUT] [--json PATH]
    python -m bench --sections calls

--against CHECKOUT (a checkout of tracekern before issue 26, e.g. `git worktree add /tmp/old
a740d5b`) counts the same workloads with that tracekern as well (kernels/ and bench/ from this
tree): its kernels and kernel calls a step (its fusion) and its calls from Python, the "before"
of the whole issue rather than of the loops alone. A strategy the old code cannot run (a
checkpoint budget) is null there.

JSON: the section "calls" holds {"size", "notes", "rows": [{"workload", "strategy", "kernels",
"invocations", "python_calls_before", "python_calls_now", and with --against "old_kernels",
"old_invocations", "old_python_calls"}]}."""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

from bench.harness import ROOT, Job, Section, child_result, in_process, main_job, two_lanes


def _count(staged, args) -> tuple[int, int, int]:
    """(distinct kernels, calls from Python to compiled code of one step, of those to kernels), by
    wrapping every compiled function the step's driver module names with a counter."""
    from numba.core.dispatcher import Dispatcher

    from tracekern.backends import cpu_runtime

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
    bound, keys = step._bound, cpu_runtime.BOUND_KEYS
    # (the driver's own names, counted: no entry points bound past them, cpu_runtime._entry_points)
    step._bound, cpu_runtime.BOUND_KEYS = {}, 0
    try:
        staged(*args)
    finally:
        for name, fn in originals.items():
            setattr(module, name, fn)
        step._bound, cpu_runtime.BOUND_KEYS = bound, keys
    return step.units, counts["all"], counts["kernels"]


def count_workload(name: str, size: str) -> list[dict]:
    """The counts of every strategy of one workload (it changes the cpu backend's thresholds to run every
    driver and loop body as Python, and restores them)."""
    import kernels
    import tracekern as tk
    from tracekern.backends import cpu

    if not hasattr(tk, "config"):    # (a tracekern from before issue 26: --against)
        return _count_old(name, size)
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


def _count_old(name: str, size: str) -> list[dict]:
    """count_workload with a tracekern from before issue 26 (no tk.config)."""
    import kernels
    import tracekern as tk
    from tracekern.backends import cpu

    rows = []
    for strategy in kernels.MODULES[name].STRATEGIES:
        row = {"workload": name, "strategy": strategy, "old_kernels": None, "old_invocations": None, "old_python_calls": None}
        try:
            w = kernels.make(name, size, strategy)
            units, calls, _ = _count(tk.jit(tk.value_and_grad(w.loss)), w.args)
            saved = cpu.NJIT_DRIVER_CALLS
            cpu.NJIT_DRIVER_CALLS = -1
            try:
                _, _, invocations = _count(tk.jit(tk.value_and_grad(w.loss)), w.args)
            finally:
                cpu.NJIT_DRIVER_CALLS = saved
            row.update(old_kernels=units, old_invocations=invocations, old_python_calls=calls)
        except Exception:  # noqa: BLE001 (a strategy the old code cannot run)
            pass
        rows.append(row)
    return rows


def _old_tracekern(checkout: str) -> dict:
    """The environment of a process that imports tracekern from `checkout` and kernels/, bench/ from here."""
    shim = tempfile.mkdtemp(prefix="tk-old-")
    os.symlink(os.path.join(os.path.abspath(checkout), "tracekern"), os.path.join(shim, "tracekern"))
    return {"PYTHONPATH": os.pathsep.join([shim, ROOT])}


def jobs(options: argparse.Namespace) -> tuple[list, object]:
    """The section's work as harness Jobs (counting processes: nothing is timed) and the function that turns their
    results into the section's result. Each process counts every other workload (a process's start-up, about a
    second, is paid twice, not once a workload); compile workers off: a process uses one core."""
    import kernels

    size = "quick" if options.quick else "full"
    names = [n for n in kernels.MODULES if not getattr(options, "only", None) or n in options.only]
    against = getattr(options, "against", None)
    halves = [h for h in (names[0::2], names[1::2]) if h]
    env = {"TRACEKERN_COMPILE_WORKERS": "0"}

    def count(half, old=False):
        return lambda: in_process("bench.calls", "--count", size, *half, env=dict(env, **(_old_tracekern(against) if old else {})))

    work = [Job(f"calls {k}", count(h), timing=False) for k, h in enumerate(halves)]
    work += [Job(f"calls old {k}", count(h, old=True), timing=False) for k, h in enumerate(halves) if against]

    def finish(results: dict) -> dict:
        by_name = {n: rows for k, h in enumerate(halves) for n, rows in zip(h, results[f"calls {k}"])}
        old_by_name = {n: rows for k, h in enumerate(halves) if against for n, rows in zip(h, results[f"calls old {k}"])}
        rows = []
        for n in names:
            got = by_name[n]
            for r, o in zip(got, old_by_name.get(n) or []):
                r.update({k: v for k, v in o.items() if k.startswith("old_")})
            rows += got
        notes = ["kernel calls: a step's kernel calls, loop steps included; from Python: calls from the interpreter into "
                 "compiled code a step, with loops driven from the step (before) and compiled whole (now)"]
        if against:
            notes.append(f"old: the tracekern of {against} (kernels/ and bench/ of this tree); '-': it cannot run that strategy")
        return {"size": size, "notes": notes, "rows": rows, "against": against}

    return work, finish


def run(options: argparse.Namespace) -> dict:
    """The counts, two processes at once (one per core); in the main job these processes run beside the budget
    section's single-core timing instead (harness.Section.jobs)."""
    start = time.perf_counter()
    work, finish = jobs(options)
    print(f"counting in {len(work)} processes, two at a time ...", end="", flush=True, file=sys.stderr)
    result = finish(two_lanes(work))
    print(f" ({time.perf_counter() - start:.0f} s)", file=sys.stderr)
    return result


def _n(v) -> str:
    return "-" if v is None else str(v)


def table(result: dict) -> str:
    old = any("old_kernels" in r for r in result["rows"])
    lines = [f"{'workload':12s} {'strategy':13s} {'kernels':>9s} {'kernel calls':>15s} {'Python before':>13s} {'Python now':>10s}"
             + (f" {'Python old':>10s}" if old else "")]
    for r in result["rows"]:
        kernels = f"{_n(r.get('old_kernels'))}>{r['kernels']}" if old else str(r["kernels"])
        calls = f"{_n(r.get('old_invocations'))}>{r['invocations']}" if old else str(r["invocations"])
        lines.append(f"{r['workload']:12s} {r['strategy']:13s} {kernels:>9s} {calls:>15s} "
                     f"{r['python_calls_before']:13d} {r['python_calls_now']:10d}"
                     + (f" {_n(r.get('old_python_calls')):>10s}" if old else ""))
    return "\n".join(lines)


def markdown(result: dict) -> str:
    old = any("old_kernels" in r for r in result["rows"])
    if old:
        lines = ["| workload | strategy | distinct kernels, old / now | kernel calls a step, old / now | "
                 "from Python a step: old code / loops from the step / now |", "|---|---|---|---|---|"]
        for r in result["rows"]:
            lines.append(f"| {r['workload']} | {r['strategy']} | {_n(r.get('old_kernels'))} / {r['kernels']} | "
                         f"{_n(r.get('old_invocations'))} / {r['invocations']} | {_n(r.get('old_python_calls'))} / "
                         f"{r['python_calls_before']} / {r['python_calls_now']} |")
        return "\n".join(lines)
    lines = ["| workload | strategy | distinct kernels | kernel calls a step | from Python, before | from Python, now |",
             "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['workload']} | {r['strategy']} | {r['kernels']} | {r['invocations']} | "
                     f"{r['python_calls_before']} | {r['python_calls_now']} |")
    return "\n".join(lines)


SECTION = Section("calls", run, table, markdown=markdown, jobs=jobs)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--count"]:     # --count SIZE WORKLOAD ...: a list of each workload's rows
        child_result([count_workload(name, argv[1]) for name in argv[2:]])
        return None
    return main_job([SECTION], argv, prog="python -m bench.calls", doc=__doc__, name="calls",
                    options=lambda ap: ap.add_argument("--against", metavar="CHECKOUT",
                                                       help="a checkout of tracekern before issue 26, counted too"))


if __name__ == "__main__":
    main()
