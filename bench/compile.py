"""Compile time against depth: tracekern's cold compile (a fresh process, an empty tracekern cache)
and warm start (a fresh process, the disk cache) of value_and_grad, beside JAX jit's compile of the
same function, on the MLP at 2, 8 and 32 layers (width 256, batch 64), the transformer of kernels/
at 1, 2, 4 and 8 blocks (sequence 128, width 128), and W1 (kernels/chain at full size).

    python -m bench.compile [--quick] [--json PATH]

Each figure is one process's first call minus its second (the step's own run time). Numba's own
start-up and tracekern's math library are warmed first in every tracekern process, and the warm
start is also given beyond Numba's start-up (a one-line cached njit function loaded first, and
Numba's thread pool started, as any Numba program with a prange loop starts it once).
"kernels" is the number of distinct compile units (kernels) a step has and "calls" its kernel calls;
"compiled" counts what the cold process compiled, in it or in its compile workers. JAX's figure is
the same first-minus-second call of jax.jit(jax.value_and_grad(f)) after JAX has started.
Targets (issue 15): the 8-block transformer at most 4 s and at most 1.5x the 1-block time; MLP 32
layers at most 2 s; W1 under 2 s; warm start under 0.1 s beyond Numba's start-up.

Tiers (issue 27), per program, each in a fresh process on an empty cache: "first (tiers)", the first
call's time with tiers on (the NumPy tier: tracing, planning, no compile), "first (no tiers)" with
tiers=False (everything compiled before it returns), "compiled at", with tiers on, the time from the
first call to the end of the first call that ran fully compiled (the program called in a loop under
the default rule), and JAX jit's first call (its compile and one run). The warm start runs on the
plan cache (a finished step found by the digest of the traced function: no differentiation, no plan).

With --stages [LABEL ...] (e.g. --stages "MLP 2 layers"): each kernel's cold compile by stage instead
(child_stages), one fresh process a program; nothing else runs.

Section "programs": N small distinct differentiated programs in the style of a unit-test suite
(elementwise expressions, reductions, small matmuls, grads of grads; 200, 40 with --quick), each
traced and called once, in one fresh process per mode on an empty cache: the total on interpret,
on cpu with tiers, on cpu without."""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time

from bench.harness import Section, child_result, in_process, load_average, main_job, peer_tools

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


def child_tracekern(name: str, sizes: tuple, probe_dir: str | None, tiers: bool = False,
                    cache_probe: str | None = None) -> dict:
    import numpy as np

    import tracekern as tk
    from tracekern.backends import units

    tk.config.tiers = False   # (the warm-up below compiles the math library, outside the timing)

    t = time.perf_counter()
    threads_s = None
    if probe_dir:   # Numba's own start-up: its CPU target, by loading a cached one-line function, and its threads
        sys.path.insert(0, probe_dir)
        from tk_probe import probe

        probe(1)
        from numba.np.ufunc.parallel import _launch_threads

        t_threads = time.perf_counter()
        _launch_threads()   # (what any Numba program with a prange loop starts once; tracekern's step does it too)
        threads_s = time.perf_counter() - t_threads
    numba_start = time.perf_counter() - t
    tk.value_and_grad(lambda x: np.sum(np.tanh(x)))(np.ones(8, np.float32))   # the math library, warm
    loss, args = _workload(name, sizes)
    tk.config.tiers = tiers
    f = tk.value_and_grad(loss)
    before = units.compiled()
    t0 = time.perf_counter()
    f(*args)
    t1 = time.perf_counter()
    f(*args)
    t2 = time.perf_counter()
    step = next(iter(f._cache.values())).run
    compiled_at = None
    if tiers:   # called in a loop until a call runs fully compiled (the default rule starts the compile)
        while time.perf_counter() - t0 < 600:
            compiled = step.tier == "compiled"
            f(*args)
            if compiled:
                compiled_at = time.perf_counter() - t0
                break
    after = units.compiled()
    if cache_probe:   # (after the measurements: the probe compiled into its directory, for the warm processes)
        sys.path.insert(0, cache_probe)
        from tk_probe import probe

        probe(1)
    return {"first_s": t1 - t0, "second_s": t2 - t1, "numba_start_s": numba_start, "threads_s": threads_s, "kernels": step.units,
            "calls": step.driver.count("# kernel "), "jitted_driver": step.jitted, "compiled_at_s": compiled_at,
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
        for k, (name, sizes, label) in enumerate(CONFIGS[size]):
            print(f"{label} ...", end="", flush=True, file=sys.stderr)
            with tempfile.TemporaryDirectory() as cache:
                tiered = in_process("bench.compile", "--child", "tracekern", name, json.dumps(sizes), "", "tiers",
                                    env={"TRACEKERN_CACHE_DIR": cache})
            with tempfile.TemporaryDirectory() as cache:
                env = {"TRACEKERN_CACHE_DIR": cache}
                # (the first cold process also compiles the probe, after its measurements: the warm ones load it)
                cold = in_process("bench.compile", "--child", "tracekern", name, json.dumps(sizes), "",
                                  *([f"cache-probe={probe_dir}"] if k == 0 else []), env=env)
                warm = in_process("bench.compile", "--child", "tracekern", name, json.dumps(sizes), probe_dir, env=env)
            row = {"workload": name, "sizes": list(sizes), "label": label, "kernels": cold["kernels"],
                   "calls": cold["calls"], "jitted_driver": cold["jitted_driver"], "compiled": cold["compiled"],
                   "cold_s": max(cold["first_s"] - cold["second_s"], 0.0),
                   "warm_s": max(warm["first_s"] - warm["second_s"], 0.0), "numba_start_s": warm["numba_start_s"],
                   "threads_s": warm.get("threads_s"),
                   "step_s": cold["second_s"], "jax_s": None, "jax_first_s": None,
                   "first_tiers_s": tiered["first_s"], "first_compiled_s": cold["first_s"],
                   "compiled_at_s": tiered["compiled_at_s"]}
            if use_jax:
                got = in_process("bench.compile", "--child", "jax", name, json.dumps(sizes))
                row["jax_s"] = max(got["first_s"] - got["second_s"], 0.0)
                row["jax_first_s"] = got["first_s"]
            rows.append(row)
            print(f" {row['cold_s']:.2f} s", file=sys.stderr)
    notes = [n for n in notes if n.startswith("JAX")]
    by = {r["label"]: r for r in rows}
    one, eight = by.get("transformer 1 block"), by.get("transformer 8 blocks")
    if one and eight:
        notes.append(f"transformer: 8 blocks compile in {eight['cold_s']:.2f} s, {eight['cold_s'] / one['cold_s']:.2f}x "
                     "the 1-block time (targets: at most 4 s, at most 1.5x)")
    threads = [r["threads_s"] for r in rows if r.get("threads_s") is not None]
    notes.append("warm start beyond Numba's start-up: the warm figure, taken after a cached one-line njit function was "
                 "loaded and Numba's thread pool started (Numba's own start-up, given as 'numba start'"
                 + (f"; its thread pool {min(threads) * 1e3:.1f}-{max(threads) * 1e3:.1f} ms of it" if threads else "") + ")")
    return {"rows": rows, "notes": notes, "load_average_end": load_average()}


def _s(x, digits=2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def table(result: dict) -> str:
    lines = [f"{'program':24s} {'kernels':>7s} {'calls':>6s} {'driver':>6s} {'cold s':>7s} {'warm s':>7s} "
             f"{'numba start':>11s} {'JAX jit s':>9s} {'step ms':>8s} {'first tiers':>11s} {'first no-tiers':>14s} "
             f"{'compiled at':>11s} {'JAX first':>9s}"]
    for r in result["rows"]:
        lines.append(f"{r['label']:24s} {r['kernels']:7d} {r['calls']:6d} {'njit' if r['jitted_driver'] else 'Python':>6s} "
                     f"{r['cold_s']:7.2f} {r['warm_s']:7.3f} {r['numba_start_s']:11.3f} {_s(r['jax_s']):>9s} "
                     f"{r['step_s'] * 1e3:8.1f} {_s(r.get('first_tiers_s')):>11s} {_s(r.get('first_compiled_s')):>14s} "
                     f"{_s(r.get('compiled_at_s')):>11s} {_s(r.get('jax_first_s')):>9s}")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    lines = ["| program | distinct kernels | kernel calls | driver | first result, tiers s | first result, tiers=False s "
             "| first fully compiled call s | warm start s | JAX jit first call s | cold compile s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['label']} | {r['kernels']} | {r['calls']} | {'njit' if r['jitted_driver'] else 'Python'} | "
                     f"{_s(r.get('first_tiers_s'))} | {_s(r.get('first_compiled_s'))} | {_s(r.get('compiled_at_s'))} | "
                     f"{r['warm_s']:.3f} | {_s(r.get('jax_first_s'))} | {r['cold_s']:.2f} |")
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


# -- many small programs ---------------------------------------------------------------------------------
def _programs(n: int) -> list:
    """n distinct small programs, each (a scalar function, its arguments): five kinds in turn, with
    constants and shapes that make every one a new program (new kernels)."""
    import numpy as np

    import tracekern as tk

    out = []
    for i in range(n):
        c, m = 1.0 + i / 97.0, 3 + i % 5
        x = np.linspace(-1.0, 1.0, m) * (1.0 + i / 1000.0)
        kind = i % 5
        if kind == 0:     # an elementwise expression
            def f(x, c=c):
                return np.sum(np.sin(x) * c + x ** 2 * np.exp(-x * c))
        elif kind == 1:   # reductions
            def f(x, c=c):
                return np.log(np.sum(np.exp(c * x))) + np.max(x) - np.mean(x * x) * c
        elif kind == 2:   # small linear algebra
            a = np.cos(np.arange(m * m, dtype=float).reshape(m, m) * c)

            def f(x, a=a):
                y = np.tanh(a @ x)
                return np.dot(y, y) + np.sum(np.outer(x, y) @ x)
        elif kind == 3:   # a grad of a grad
            def f(x, c=c):
                g = tk.grad(lambda y: np.sum(np.sin(y * c) * y))(x)
                return np.sum(g * g)
        else:             # where, maximum, cumsum
            def f(x, c=c):
                return np.sum(np.where(x > 0, x, c * x) ** 2) + np.sum(np.cumsum(np.maximum(x, -0.5)) * c)
        out.append((f, (x,)))
    return out


def child_programs(n: int, mode: str) -> dict:
    import tracekern as tk

    backend, tiers = {"interpret": ("interpret", False), "tiers": ("cpu", True), "no-tiers": ("cpu", False)}[mode]
    tk.config.tiers = tiers
    import tracekern.backends.cpu  # noqa: F401  (Numba and the cpu backend imported before the timing)
    programs = _programs(n)
    t0 = time.perf_counter()
    for f, args in programs:
        tk.jit(tk.value_and_grad(f), backend=backend)(*args)
    return {"total_s": time.perf_counter() - t0}


def run_programs(options) -> dict:
    n = 40 if options.quick else 200
    rows = []
    for mode in ("interpret", "tiers", "no-tiers"):
        print(f"{n} programs, {mode} ...", end="", flush=True, file=sys.stderr)
        with tempfile.TemporaryDirectory() as cache:
            got = in_process("bench.compile", "--programs", str(n), mode, env={"TRACEKERN_CACHE_DIR": cache})
        rows.append({"mode": mode, "programs": n, "total_s": got["total_s"]})
        print(f" {got['total_s']:.1f} s", file=sys.stderr)
    by = {r["mode"]: r["total_s"] for r in rows}
    notes = [f"cpu with tiers: {by['tiers'] / by['interpret']:.2f}x interpret's total (target: at most 1.5x); "
             f"without: {by['no-tiers'] / by['interpret']:.1f}x"]
    return {"rows": rows, "notes": notes, "load_average_end": load_average()}


def table_programs(result: dict) -> str:
    lines = [f"{'mode':12s} {'programs':>8s} {'total s':>8s} {'per program ms':>14s}"]
    for r in result["rows"]:
        lines.append(f"{r['mode']:12s} {r['programs']:8d} {r['total_s']:8.2f} {r['total_s'] / r['programs'] * 1e3:14.1f}")
    return "\n".join(lines)


def markdown_programs(result: dict) -> str:
    lines = ["| mode | programs | total s | per program ms |", "|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['mode']} | {r['programs']} | {r['total_s']:.2f} | {r['total_s'] / r['programs'] * 1e3:.1f} |")
    return "\n".join(lines)


PROGRAMS = Section("programs", run_programs, table_programs, markdown=markdown_programs)


# -- one kernel's cold compile, by stages --------------------------------------------------------------
STAGES = ("type inference", "other passes", "lowering", "LLVM")


def child_stages(name: str, sizes: tuple) -> dict:
    """Each kernel signature of the program's value_and_grad step compiled here, one at a time (its
    cache empty, the math library warm), timed in thread CPU seconds by Numba's compiler events:
    type inference, its other passes, lowering to LLVM IR, and the time the LLVM lock is held
    (optimisation and code generation; it runs inside the lowering, which is given without it).
    A pass that compiles another function (an overload Numba implements) counts that compile too."""
    import collections

    import numpy as np
    from numba.core import event

    import tracekern as tk
    from tracekern import passes
    from tracekern.backends import cache, cpu

    tk.config.tiers = False
    tk.value_and_grad(lambda x: np.sum(np.tanh(x)))(np.ones(8, np.float32))   # the math library, warm
    loss, args = _workload(name, sizes)
    f = tk.jit(tk.value_and_grad(loss))
    sig = f._signature(args, {})
    step = cpu.compile_graph(passes.inline_calls(sig.make_graph()[0]))

    class Timer(event.Listener):
        def __init__(self):
            self.spent, self.open, self.locks = collections.Counter(), [], 0

        def on_start(self, ev):
            if ev.kind == "numba:llvm_lock":
                self.locks += 1
                if self.locks > 1:
                    return
            self.open.append(("LLVM" if ev.kind == "numba:llvm_lock" else ev.data["name"], time.thread_time()))

        def on_end(self, ev):
            if ev.kind == "numba:llvm_lock":
                self.locks -= 1
                if self.locks:
                    return
            what, t = self.open.pop()
            self.spent[what] += time.thread_time() - t

    rows = []
    for index, types in step.kernel_jobs(list(sig.arrays)):
        source = step.modules[index]
        module = cache.load_module(source)
        timer = Timer()
        t0, c0 = time.perf_counter(), time.thread_time()
        with event.install_listener("numba:run_pass", timer), event.install_listener("numba:llvm_lock", timer):
            module.kernel.compile(types)
        row = dict.fromkeys(STAGES, 0.0)
        for what, t in timer.spent.items():
            low = what.lower()
            stage = ("LLVM" if what == "LLVM" else "type inference" if "type_inference" in low
                     else "lowering" if "lowering" in low else "other passes")
            row[stage] += t
        row["lowering"] -= row["LLVM"]
        rows.append(dict(row, kernel=source.split("\n")[0].split(": ", 1)[1].split(";")[0], lines=source.count("\n"),
                         wall_s=time.perf_counter() - t0, cpu_s=time.thread_time() - c0))
    return {"rows": rows}


def run_stages(labels: list[str]) -> None:
    """python -m bench.compile --stages [LABEL ...]: each program (default MLP 2 layers and the
    1-block transformer) in a fresh process on an empty cache, its kernels' cold compiles by stage."""
    configs = {label: (name, sizes) for name, sizes, label in CONFIGS["full"]}
    for label in labels or ["MLP 2 layers", "transformer 1 block"]:
        name, sizes = configs[label]
        with tempfile.TemporaryDirectory() as cache:
            got = in_process("bench.compile", "--stages-child", name, json.dumps(sizes),
                             env={"TRACEKERN_CACHE_DIR": cache, "TRACEKERN_COMPILE_WORKERS": "0"})
        print(f"{label}: each kernel signature's cold compile, thread CPU s by stage (wall s beside)")
        print(f"  {'kernel':28s} {'lines':>5s} {'wall':>6s} {'CPU':>6s} " + " ".join(f"{k:>14s}" for k in STAGES))
        total = dict.fromkeys(("wall_s", "cpu_s", *STAGES), 0.0)
        for r in got["rows"]:
            print(f"  {r['kernel'][:28]:28s} {r['lines']:5d} {r['wall_s']:6.3f} {r['cpu_s']:6.3f} "
                  + " ".join(f"{r[k]:14.3f}" for k in STAGES))
            for k in total:
                total[k] += r[k]
        print(f"  {'total, ' + str(len(got['rows'])) + ' kernels':28s} {'':5s} {total['wall_s']:6.3f} {total['cpu_s']:6.3f} "
              + " ".join(f"{total[k]:14.3f}" for k in STAGES))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--stages-child"]:
        child_result(child_stages(argv[1], tuple(json.loads(argv[2]))))
        return None
    if argv[:1] == ["--stages"]:
        return run_stages(argv[1:])
    if argv[:1] == ["--child"]:
        kind, name, sizes = argv[1], argv[2], tuple(json.loads(argv[3]))
        flags = argv[5:]   # "tiers"; "cache-probe=DIR"
        probe = next((f.split("=", 1)[1] for f in flags if f.startswith("cache-probe=")), None)
        result = (child_tracekern(name, sizes, argv[4] or None, "tiers" in flags, probe) if kind == "tracekern"
                  else child_jax(name, sizes))
        child_result(result)
        return None
    if argv[:1] == ["--programs"]:
        child_result(child_programs(int(argv[1]), argv[2]))
        return None
    return main_job([SECTION, PROGRAMS], argv, prog="python -m bench.compile", doc=__doc__, name="compile")


if __name__ == "__main__":
    main()
