"""The recompute-overhead benchmark, the main job's first section: for every workload in kernels/
and every strategy it can be built with, the time of value_and_grad (median, and min to max), its
ratio to the same tool without annotation, the cold compile time, the residual bytes tk.vjp keeps
between forward and backward, what a loop's backward keeps at run time, and the measured peak
memory of the step; the same workloads in JAX, TensorFlow and PyTorch (kernels/peers) where they
are installed, side by side.

    python -m bench [--quick] [--only WORKLOAD ...] [--tools TOOL ...] [--load N ...] [--json PATH] [--plot PATH]
    python -m bench --compare OLD.json NEW.json

How it runs: tracekern's configurations are compiled first, by one process a core, each taking the next
configuration no other has taken (every workload's "none" first), compile workers off
(each configuration's first call minus a second is its cold compile time; the kernels land in the disk cache). Then,
workload by workload, one process per tool times all of that workload's strategies in interleaved
rounds (so that the machine's load hits each alike), and samples the peak memory of a few more
calls of each. A peer's compile time is its first call minus a later one, after its runtime has
started (a trivial function compiled first); tracekern's is the same, measured in the compile phase.
PyTorch runs twice where installed: eager, and under torch.compile (the peer at its best).
--load N runs every timing process beside N busy processes (harness.load), once per N given:
--load 0 1 gives every row quiet and beside one busy process ("load" in each row).

JSON: the section "recompute" holds {"size", "notes", "rows": [{"workload", "strategy", "tool",
"how", "time_s", "time_min_s", "time_max_s", "runs", "ratio", "vs_tracekern", "compile_s",
"compiled", "residual_bytes", "saved_bytes", "kept_at_run_time_bytes", "kept_at_run_time",
"planned_peak_bytes", "peak_bytes", "unsupported", "load"}]}. ratio is time_s over the same tool's "none"
row of the workload; vs_tracekern is time_s over tracekern's row of the same workload and strategy
(both at the same load);
compiled is false where tracekern's first call loaded the kernels from its disk cache instead of
compiling them (then compile_s is a load time); byte counts are null where a tool does not report
them; unsupported is the reason where a tool cannot run that strategy (its other fields are null)."""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from bench.harness import (
    RESULTS,
    Section,
    child_result,
    first_call,
    in_process,
    interleaved,
    load,
    main_job,
    mb,
    ms,
    peer_tools,
    sampled_peak,
)
from bench.plot import plot

TOOLS = ("tracekern", "jax", "tensorflow", "torch", "torch_compile")
LABELS = {"tracekern": "tracekern", "jax": "JAX", "tensorflow": "TensorFlow", "torch": "PyTorch",
          "torch_compile": "torch.compile"}
# runs of each strategy: at least this many, and at least this many seconds, in 3 interleaved rounds
RUNS = {"quick": (9, 0.3), "full": (10, 2.0), "test": (2, 0.0)}


# -- in the measuring processes --------------------------------------------------------------------
def _start_tracekern():
    """Numba's own start-up and tracekern's math library, before any compile is timed."""
    import numpy as np

    import tracekern as tk

    tk.value_and_grad(lambda x: np.sum(np.tanh(x)))(np.ones(8, np.float32))


def _compiled() -> int:
    """How many kernels and drivers this process compiled (in it or in its compile workers) rather
    than loaded from the disk cache."""
    from tracekern.backends import units

    return sum(units.compiled().values())


def compile_one(name: str, strategy: str, size: str) -> dict:
    """tracekern's first call of one configuration in a fresh process (its cold compile time when
    the disk cache does not have it), minus a second call."""
    import tracekern as tk
    from kernels import make

    _start_tracekern()
    before = _compiled()
    w = make(name, size, strategy)
    step = tk.jit(tk.value_and_grad(w.loss))
    first, second = first_call(lambda: step(*w.args))
    # the memory plans (tk.vjp's split and the step's), given to the row here: the timing process
    # need not trace and plan the configuration again (0.8 s a configuration)
    return {"compile_s": max(first - second, 0.0), "compiled": _compiled() > before,
            **_memory(tk.jit(w.loss).lower(*w.args).memory, step.lower(*w.args).memory)}


def compile_queue(size: str, queue: str) -> list:
    """compile_one of every configuration of DIR/configs.json ("workload:strategy", in order) that this process
    takes: a configuration is taken by creating DIR/<its index> (O_EXCL: by one process only). [[config, row]]."""
    with open(os.path.join(queue, "configs.json")) as fh:
        configs = json.load(fh)
    got = []
    for k, config in enumerate(configs):
        try:
            os.close(os.open(os.path.join(queue, str(k)), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            continue
        got.append([config, compile_one(*config.split(":"), size)])
    return got


def _compile_hints(size: str) -> dict:
    """{(workload, strategy): tracekern's cold compile seconds} of the last run's results at this size, for the rows
    that compiled (not loaded from the disk cache); {} without them."""
    try:
        with open(os.path.join(RESULTS, "recompute-quick.json" if size == "quick" else "recompute.json")) as fh:
            saved = json.load(fh)
        rows = saved.get("sections", {}).get("recompute", saved)["rows"]
        return {(r["workload"], r["strategy"]): r["compile_s"] for r in rows
                if r.get("tool") == "tracekern" and r.get("compiled") and r.get("compile_s") is not None}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}


def _memory(plain, joint) -> dict:
    """A row's memory plan fields, from tk.jit(loss).lower(...).memory and the value_and_grad step's."""
    return {"residual_bytes": plain.residual_bytes, "saved_bytes": plain.saved_bytes,
            "planned_peak_bytes": joint.peak_bytes["step"]}


def _kept(name, size, strategy):
    import kernels

    fn = getattr(kernels.MODULES[name], "kept_at_run_time", None)
    return fn(size, strategy) if fn else (None, None)


def time_tracekern(name: str, size: str, memory: bool = True) -> list[dict]:
    """The timing rows of a workload's strategies; memory=False leaves the memory plans' fields to the
    compile phase (compile_one), which has them."""
    import kernels
    import tracekern as tk

    _start_tracekern()
    steps, lowered, rows = {}, {}, []
    for strategy in kernels.MODULES[name].STRATEGIES:
        w = kernels.make(name, size, strategy)
        step = tk.jit(tk.value_and_grad(w.loss))
        steps[strategy] = (lambda step=step, w=w: step(*w.args))
        steps[strategy]()                                   # loads from the disk cache
        lowered[strategy] = _memory(tk.jit(w.loss).lower(*w.args).memory, step.lower(*w.args).memory) if memory else {}
    timings = interleaved(steps, *RUNS[size])
    for strategy, fn in steps.items():
        kept, what = _kept(name, size, strategy)
        rows.append(dict(_row(name, strategy, "tracekern", "tk annotations" if strategy != "none" else "no annotation"),
                         **timings[strategy].as_dict(), **lowered[strategy], kept_at_run_time_bytes=kept,
                         kept_at_run_time=what, peak_bytes=sampled_peak(fn)))
    return rows


def _peer(tool: str, name: str, size: str, strategy: str):
    """A peer's step: torch_compile is PyTorch's version under torch.compile."""
    from kernels import peers

    if tool == "torch_compile":
        return peers.make("torch", name, size, strategy, compiled=True)
    return peers.make(tool, name, size, strategy)


def time_peer(tool: str, name: str, size: str) -> list[dict]:
    import kernels
    from kernels import peers

    _peer(tool, "chain", "test", "none").run()          # the tool's runtime starts before any timing
    built, rows, compile_s = {}, {}, {}
    for strategy in kernels.MODULES[name].STRATEGIES:
        try:
            built[strategy] = p = _peer(tool, name, size, strategy)
        except peers.Unsupported as e:
            rows[strategy] = dict(_row(name, strategy, tool, None), unsupported=str(e))
            continue
        first, second = first_call(p.run)
        compile_s[strategy] = max(first - second, 0.0)
    timings = interleaved({s: p.run for s, p in built.items()}, *RUNS[size])
    for strategy, p in built.items():
        # TensorFlow keeps freed memory in its own allocator: resident memory does not show its peak
        rows[strategy] = dict(_row(name, strategy, tool, p.how), **timings[strategy].as_dict(), compile_s=compile_s[strategy],
                              peak_bytes=None if tool == "tensorflow" else sampled_peak(p.run))
    return [rows[s] for s in kernels.MODULES[name].STRATEGIES]


def _row(name, strategy, tool, how) -> dict:
    return {"workload": name, "strategy": strategy, "tool": tool, "how": how, "time_s": None, "time_min_s": None,
            "time_max_s": None, "runs": 0, "compile_s": None, "compiled": None, "residual_bytes": None,
            "saved_bytes": None, "kept_at_run_time_bytes": None, "kept_at_run_time": None,
            "planned_peak_bytes": None, "peak_bytes": None, "unsupported": None, "load": 0}


# -- the section -----------------------------------------------------------------------------------
def run(options: argparse.Namespace) -> dict:
    import kernels

    size = "quick" if options.quick else "full"
    present, notes = peer_tools()
    present += ["torch_compile"] if "torch" in present else []
    tools = [t for t in ("tracekern", *present) if not options.tools or t in options.tools]
    loads = list(getattr(options, "load", None) or [0])
    names = [n for n in kernels.MODULES if not options.only or n in options.only]
    start = time.perf_counter()

    def progress(text, end="\n"):
        print(text, end=end, flush=True, file=sys.stderr)

    compiled = {}
    if "tracekern" in tools:
        # configurations of different workloads side by side, each workload's "none" first
        # (every strategy: one the compile phase left out would compile in its timing process, without a compile time)
        # (every workload's "none" first, then the rest; in each group the longest compiles first, by the compile
        # times of the last run's results where it compiled them, so that no core is left with a long one at the end)
        hints = _compile_hints(size)
        longest = lambda c: -hints.get(c, float("inf"))  # noqa: E731   (unknown: first)
        configs = sorted([(n, "none") for n in names], key=longest) + \
            sorted([(n, s) for n in names for s in kernels.MODULES[n].STRATEGIES if s != "none"], key=longest)
        workers = max(1, min(os.cpu_count() or 1, len(configs)))
        progress(f"compiling {len(configs)} tracekern configurations, {workers} processes at once ...", end="")
        # one process a core, each taking the next configuration not yet taken, in order, until none is left (a
        # process's start-up, about a second, is paid once a core, not once a configuration, and no core waits for
        # another's longer share); compile workers off: the processes already use every core
        with tempfile.TemporaryDirectory() as queue:
            with open(os.path.join(queue, "configs.json"), "w") as fh:
                json.dump([f"{n}:{s}" for n, s in configs], fh)
            with ThreadPoolExecutor(workers) as pool:
                for got in pool.map(lambda _: in_process("bench.recompute", "--compile-queue", size, queue,
                                                         env={"TRACEKERN_COMPILE_WORKERS": "0"}), range(workers)):
                    compiled.update({tuple(c.split(":")): r for c, r in got})
        progress(f" {time.perf_counter() - start:.0f} s")
    rows = []
    for busy in loads:
        for name in names:
            for tool in tools:
                progress(f"{name} ({LABELS[tool]}{f', load {busy}' if busy else ''}) ...", end="")
                # (tracekern's memory plans: from the compile phase where it ran)
                known = tool == "tracekern" and all((name, st) in compiled for st in kernels.MODULES[name].STRATEGIES)
                with load(busy):
                    got = in_process("bench.recompute", "--time", tool, name, size, *(["--memory-known"] * known))
                for r in got:
                    r.update(compiled.get((name, r["strategy"]), {}) if tool == "tracekern" else {})
                    r["load"] = busy
                rows += got
                progress(" " + ", ".join(f"{r['strategy']} {ms(r['time_s'])} ms" if r["time_s"] else f"{r['strategy']} -"
                                         for r in got) + f"  ({time.perf_counter() - start:.0f} s)")
    for row in rows:
        base = next((r for r in rows if r["workload"] == row["workload"] and r["tool"] == row["tool"]
                     and r["strategy"] == "none" and r["time_s"] and r.get("load", 0) == row.get("load", 0)), None)
        row["ratio"] = row["time_s"] / base["time_s"] if row["time_s"] and base else None
        ours = next((r for r in rows if r["workload"] == row["workload"] and r["tool"] == "tracekern"
                     and r["strategy"] == row["strategy"] and r["time_s"] and r.get("load", 0) == row.get("load", 0)), None)
        row["vs_tracekern"] = row["time_s"] / ours["time_s"] if row["tool"] != "tracekern" and row["time_s"] and ours else None
    if any(r["compiled"] is False for r in rows):
        notes.append("compile s in parentheses: loaded from tracekern's disk cache, not compiled; for cold figures, "
                     "run with TRACEKERN_CACHE_DIR set to an empty folder")
    for r in rows:
        if loads and r.get("load", 0) != loads[0]:
            continue    # (the same notes for every load: given once, from the first load's rows)
        if r["unsupported"]:
            notes.append(f"{r['workload']} / {r['strategy']} ({LABELS[r['tool']]}): no row, as a result: {r['unsupported']}")
        if r["kept_at_run_time"]:
            notes.append(f"{r['workload']} / {r['strategy']} (tracekern): at run time its backward keeps "
                         f"{r['kept_at_run_time']}: {mb(r['kept_at_run_time_bytes'])} MB beyond the residuals; "
                         f"measured peak {mb(r['peak_bytes'])} MB")
    if "tensorflow" in tools:
        notes.append("TensorFlow has no peak MB: it keeps freed memory in its own allocator, so resident memory "
                     "does not show its peak")
    if any(loads):
        notes.append("load N: the row was timed beside N busy processes (each spinning on a core at the default "
                     "priority); load 0: the machine as it was")
    return {"size": size, "notes": notes, "rows": rows, "wall_s": time.perf_counter() - start, "loads": loads}


def _compile_text(r) -> str:
    if r["compile_s"] is None:
        return "-"
    return f"{r['compile_s']:.2f}" if r["compiled"] is not False else f"({r['compile_s']:.2f})"


def table(result: dict) -> str:
    head = (f"{'workload':12s} {'strategy':13s} {'tool':10s} {'time ms':>8s} {'min-max ms':>13s} {'ratio':>6s} "
            f"{'/ tk':>5s} {'compile s':>9s} {'residual MB':>11s} {'beyond in':>9s} {'run-time':>8s} "
            f"{'peak MB':>8s} {'planned':>8s}")
    loaded = any(r.get("load") for r in result["rows"])
    lines = [head + (f" {'load':>4s}" if loaded else "")]
    for r in result["rows"]:
        label = LABELS[r["tool"]]
        busy = f" {r.get('load', 0):4d}" if loaded else ""
        if r["unsupported"]:
            lines.append(f"{r['workload']:12s} {r['strategy']:13s} {label:10s} {'unsupported (see the notes)':>28s}{busy}")
            continue
        spread = f"{ms(r['time_min_s'])}-{ms(r['time_max_s'])}"
        vs = "-" if r["vs_tracekern"] is None else f"{r['vs_tracekern']:.2f}"
        lines.append(f"{r['workload']:12s} {r['strategy']:13s} {label:10s} {ms(r['time_s']):>8s} {spread:>13s} "
                     f"{r['ratio']:6.2f} {vs:>5s} {_compile_text(r):>9s} {mb(r['residual_bytes']):>11s} "
                     f"{mb(r['saved_bytes']):>9s} {mb(r['kept_at_run_time_bytes']):>8s} {mb(r['peak_bytes']):>8s} "
                     f"{mb(r['planned_peak_bytes']):>8s}{busy}")
    hows: dict[tuple, list] = {}
    for r in result["rows"]:
        if r["tool"] != "tracekern" and r["how"] and r["strategy"] != "none":
            hows.setdefault((r["tool"], r["how"]), []).append(f"{r['workload']}/{r['strategy']}")
    if hows:
        lines.append("\nhow the peers run each strategy (\"none\": the same program without annotation):")
        lines += [f"  {LABELS[tool]:10s} {', '.join(which)}: {how}" for (tool, how), which in hows.items()]
    lines.append("\nresidual MB: what tk.vjp keeps between forward and backward; beyond in: the part that is not the "
                 "function's inputs; run-time: carries a loop's backward keeps at run time (not in the residuals); "
                 "peak MB: measured resident memory above the level before the calls; planned: tracekern's buffer plan")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    """The table as Markdown, for the README (python -m bench --markdown RESULT.json)."""
    loaded = any(r.get("load") for r in result["rows"])
    lines = ["| workload | strategy | tool | time ms | min-max ms | ratio | / tracekern | compile s | residual MB | "
             "beyond inputs MB | run-time MB | peak MB | planned MB |" + (" load |" if loaded else ""),
             "|" + "---|" * (14 if loaded else 13)]
    for r in result["rows"]:
        cells = [r["workload"], r["strategy"], LABELS[r["tool"]]]
        if r["unsupported"]:
            cells += ["unsupported (notes)"] + ["-"] * 9
        else:
            cells += [ms(r["time_s"]), f"{ms(r['time_min_s'])}-{ms(r['time_max_s'])}", f"{r['ratio']:.2f}",
                      "-" if r["vs_tracekern"] is None else f"{r['vs_tracekern']:.2f}", _compile_text(r),
                      mb(r["residual_bytes"]), mb(r["saved_bytes"]), mb(r["kept_at_run_time_bytes"]),
                      mb(r["peak_bytes"]), mb(r["planned_peak_bytes"])]
        lines.append("| " + " | ".join(cells + ([str(r.get("load", 0))] if loaded else [])) + " |")
    return "\n".join(lines)


def compare(old: dict, new: dict) -> str:
    """new / old for the time and peak memory of every row both runs have."""
    key = lambda r: (r["workload"], r["strategy"], r.get("tool") or r.get("peer") or "tracekern", r.get("load", 0))  # noqa: E731
    before = {key(r): r for r in old["rows"]}
    lines = [f"{'workload':12s} {'strategy':13s} {'tool':10s} {'time new/old':>12s} {'peak new/old':>12s}"]
    for r in new["rows"]:
        o = before.get(key(r))
        if o is None or not r.get("time_s") or not o.get("time_s"):
            continue
        peak = f"{r['peak_bytes'] / o['peak_bytes']:.2f}" if r.get("peak_bytes") and o.get("peak_bytes") else "-"
        lines.append(f"{r['workload']:12s} {r['strategy']:13s} {key(r)[2]:10s} {r['time_s'] / o['time_s']:12.2f} {peak:>12s}")
    return "\n".join(lines)


SECTION = Section("recompute", run, table, plot=plot, compare=compare, markdown=markdown)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--compile"]:
        child_result(compile_one(*argv[1:4]))
    elif argv[:1] == ["--compile-queue"]:    # --compile-queue SIZE DIR: compile_one of each configuration it takes
        child_result(compile_queue(argv[1], argv[2]))
    elif argv[:1] == ["--time"]:
        tool, name, size = argv[1:4]
        child_result(time_tracekern(name, size, memory="--memory-known" not in argv) if tool == "tracekern"
                         else time_peer(tool, name, size))
    else:
        return main_job([SECTION], argv, prog="python -m bench.recompute", doc=__doc__)


if __name__ == "__main__":
    main()
