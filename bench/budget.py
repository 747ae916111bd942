"""The memory-budget benchmark (a section of the main job): for the mlp, the transformer and the chain
of kernels/, value_and_grad under memory_budget= swept from the unconstrained residuals down to the
smallest feasible budget, beside the hand-placed strategies (no annotation, tk.recompute per layer or
block, policy "dots") and the peers' (JAX's jax.checkpoint policies as single points; PyTorch's
activation_memory_budget swept the same way, when torch is importable).

    python -m bench.budget [--quick] [--only WORKLOAD ...] [--tools TOOL ...] [--json PATH] [--plot PATH]
    python -m bench --sections budget

For every point: the time of value_and_grad (median, min to max, in interleaved rounds with every
other point of the workload) and its CPU time (time.process_time, likewise, in rounds of a shuffled
order: what the targets compare, since another process's work stretches the wall time on a shared
machine but not the CPU time; two points compare by the median of their ratio round by round),
the residual bytes the step's plan keeps (a grad step's plan keeps only the forward's arrays:
remat.plan_residuals' arrays_only), the saved state measured (the resident memory that tk.vjp's
forward keeps for its pullback at the same budget, in this process with glibc returning freed
memory at once; tk.vjp's plan may also save elementwise values: its planned bytes are
"vjp_residual_bytes"), and the measured peak of the whole step. The budget bounds the residuals: the
saved state, not what the backward pass holds while it recomputes (the step's peak). The sweep
runs from the larger of the unconstrained residual bytes and the planner's own choice with no
budget at all, down to the smallest feasible budget, in POINTS steps (9; 6 with --quick).

Targets (issue 20): the curve is monotone (a smaller budget never keeps more, nor runs faster beyond
the noise); at every budget, tracekern's time is at most that of the best hand-placed strategy that
keeps no more memory, on every workload.

JSON: the section "budget" holds {"size", "notes", "rows": [{"workload", "tool", "kind" ("budget",
"hand-placed", "peer budget"), "label", "budget_bytes", "fraction", "residual_bytes",
"recompute_cost_s", "solver", "vjp_residual_bytes", "saved_state_bytes", "planned_peak_bytes", "peak_bytes", "time_s",
"time_min_s", "time_max_s", "runs", "cpu_s", "cpu_min_s", "cpu_max_s", "cpu_rounds"}], "workloads": {name: {"sizes", "unconstrained_bytes",
"smallest_bytes", "top_bytes"}}}."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

from bench.harness import (
    Job,
    Section,
    child_result,
    in_process,
    interleaved,
    load_average,
    main_job,
    mb,
    ms,
    peer_tools,
    sampled_peak,
    two_lanes,
)

WORKLOADS = ("mlp", "transformer", "chain")
# sizes with activations that outweigh the weights (the budget cannot touch the weights: the
# backward reads them), for kernels/<name>.inputs(*sizes)
SIZES = {"quick": {"mlp": (8, 256, 1024), "transformer": (4, 256, 128), "chain": (1 << 20,)},
         "full": {"mlp": (8, 512, 4096), "transformer": (4, 1024, 256), "chain": (1 << 22,)},
         "test": {"mlp": (3, 16, 32), "transformer": (2, 16, 8), "chain": (256,)}}
POINTS = {"quick": 6, "full": 9, "test": 9}   # budgets in a sweep, by size
RUNS = {"quick": (6, 0.3), "full": (8, 2.0), "test": (2, 0.0)}
# Every tool runs on one thread (BENCH_BUDGET_THREADS to change it): on this shared 2-core machine a
# parallel loop waits for its slowest thread, which another process's work preempts, and the same
# step then took anywhere from 200 to 800 ms (110 to 125 ms on one thread).
THREADS = os.environ.get("BENCH_BUDGET_THREADS", "1")
THREAD_ENV = {"NUMBA_NUM_THREADS": THREADS, "OPENBLAS_NUM_THREADS": THREADS, "OMP_NUM_THREADS": THREADS,
              "MKL_NUM_THREADS": THREADS,
              "XLA_FLAGS": f"--xla_cpu_multi_thread_eigen={'false' if THREADS == '1' else 'true'} "
                           f"intra_op_parallelism_threads={THREADS}"}
NOISE = 0.03     # times within 3% of each other are equal, for the targets (the runs' spread is in the table)
# CPU time per step (time.process_time, all of the process's threads), in interleaved rounds after the
# wall-clock timing: on this shared machine another process's work preempts a step and stretches
# its wall time (the same compiled step measured 32 and 40 ms medians in two runs), but not the CPU
# time it uses; with one thread per tool, that is what a step costs. The targets compare it. Quick: 10 rounds (16
# until 2026-11-27; the paired ratios' 90% intervals were then 1% wide or less against the targets' 3% margin).
CPU_RUNS = {"quick": 10, "full": 15, "test": 2}


# -- in the measuring processes --------------------------------------------------------------------
def cpu_times(fns: dict, runs: int) -> dict[str, dict]:
    """CPU seconds (time.process_time) of each function, `runs` calls each in interleaved rounds, in a
    shuffled order each round (seeded: the same order on every run): {label: {"cpu_s" (median),
    "cpu_min_s", "cpu_max_s", "cpu_rounds" (the seconds of each round, for paired comparisons)}}.
    Call each once before."""
    import numpy as np

    got: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    rng = np.random.default_rng(20)
    for _ in range(runs):
        rng.shuffle(order)
        for k in order:
            t = time.process_time()
            fns[k]()
            got[k].append(time.process_time() - t)
    return {k: {"cpu_s": float(np.median(t)), "cpu_min_s": min(t), "cpu_max_s": max(t), "cpu_rounds": t}
            for k, t in got.items()}


def paired_ratio(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """The median over rounds of a's time / b's time in the same round, and a 90% bootstrap interval
    of that median (1000 resamples of the rounds, seeded). Timed in the same round, a and b met the
    same load on the machine, so the ratio's spread is far smaller than that of either time."""
    import numpy as np

    r = np.asarray(a, float) / np.asarray(b, float)
    rng = np.random.default_rng(0)
    boots = np.median(r[rng.integers(0, len(r), (1000, len(r)))], axis=1)
    return float(np.median(r)), float(np.percentile(boots, 5)), float(np.percentile(boots, 95))


def _workload(name: str, size: str):
    import kernels

    module = kernels.MODULES[name]
    return module, module.inputs(*SIZES[size][name])


def _hand_placed(module, strategy: str):
    """The workload's loss with a hand-placed strategy (kernels/<name>.make's; its inputs are ours)."""
    return module.loss if strategy == "none" else module.make("test", strategy)[0]


def plan(name: str, size: str) -> dict:
    """The budgets of the sweep: POINTS of them from the top (the unconstrained residuals, or the
    planner's own choice with no limit if larger) down to the smallest feasible budget, for the
    value_and_grad step's own plans."""
    import tracekern as tk

    module, args = _workload(name, size)
    planned = tk.value_and_grad(module.loss, memory_budget=1.0).lower(*args).vjp      # (the step's own plans)
    free = tk.value_and_grad(module.loss, memory_budget=2 ** 62).lower(*args).vjp
    top, low = max(planned.unconstrained_bytes, free.residual_bytes), planned.smallest_budget
    # (where the step has one plan only, top == low, e.g. an elementwise chain, whose fused step
    # keeps just its input: one point)
    points = POINTS[size]
    budgets = sorted({int(round(low + (top - low) * k / (points - 1))) for k in range(points)}, reverse=True)
    return {"sizes": list(SIZES[size][name]), "unconstrained_bytes": planned.unconstrained_bytes,
            "smallest_bytes": low, "top_bytes": top, "budgets": budgets}


def _size(nbytes: int) -> str:
    return f"{nbytes / 2 ** 20:.2f} MB" if nbytes >= 2 ** 20 else f"{nbytes / 2 ** 10:.1f} KB"


def _saved_state(vjp_call) -> int:
    """Resident memory that tk.vjp's forward result (outputs and the pullback's residuals) keeps."""
    import ctypes
    import gc

    from bench.harness import PeakSampler

    libc = ctypes.CDLL("libc.so.6")
    held = vjp_call()                     # (compiled, and the allocator warmed)
    del held
    gc.collect()
    libc.malloc_trim(0)
    sampler = PeakSampler()
    before = sampler.rss()
    held = vjp_call()
    gc.collect()
    after = sampler.rss()
    del held
    return after - before


def _settle() -> None:
    """Collect, then exempt what lives now from the cyclic collector (gc.freeze): the memory figures
    collect before they measure, and with 12 steps' graphs and plans alive each collect took 0.24 s
    (a sixth of the process's time)."""
    import gc

    gc.collect()
    gc.freeze()


def _configs(module, budgets: list[int]) -> dict:
    """label -> (kind, loss, budget) of a workload's tracekern points: its hand-placed strategies, then the budgets."""
    configs = {}
    for strategy in module.STRATEGIES:
        if strategy in ("none", "recompute", "dots"):
            configs[strategy] = ("hand-placed", _hand_placed(module, strategy), None)
    for b in budgets:
        configs[f"budget {b}"] = ("budget", module.loss, b)
    return configs


def warm(name: str, size: str, budgets: list[int], part: int, parts: int) -> dict:
    """Compile every `parts`-th point of a workload (from the `part`-th) into the disk cache: its step and
    tk.vjp's halves at its budget (on one core, beside another workload's timing process: the timing process
    then loads them; compiling them there, one after another, was half its time)."""
    import numpy as np

    import tracekern as tk

    tk.value_and_grad(lambda x: np.sum(np.tanh(x)))(np.ones(8, np.float32))
    module, args = _workload(name, size)
    configs = list(_configs(module, budgets).values())[part::parts]
    for _, loss, budget in configs:
        tk.jit(tk.value_and_grad(loss, memory_budget=budget))(*args)
        tk.vjp(loss, *args, memory_budget=budget)
    return {"points": len(configs)}


def time_tracekern(name: str, size: str, budgets: list[int]) -> list[dict]:
    import numpy as np

    import tracekern as tk

    tk.value_and_grad(lambda x: np.sum(np.tanh(x)))(np.ones(8, np.float32))   # Numba and the math library
    module, args = _workload(name, size)
    configs = _configs(module, budgets)
    steps, lowered, step_plan = {}, {}, {}
    for label, (_, loss, budget) in configs.items():
        step = tk.jit(tk.value_and_grad(loss, memory_budget=budget))
        steps[label] = (lambda step=step: step(*args))
        steps[label]()                                            # compile (or load from the disk cache)
        low = step.lower(*args)
        # (a hand-placed strategy: what its step keeps, the fused step's unconstrained residuals)
        step_plan[label] = low.vjp if budget is not None else \
            tk.value_and_grad(loss, memory_budget=1.0).lower(*args).vjp
        lowered[label] = (low.memory, tk.make_ir(loss, mode="vjp", memory_budget=budget)(*args))
    _settle()
    timings = interleaved(steps, *RUNS[size])
    cpu = cpu_times(steps, CPU_RUNS[size])
    rows = []
    for label, (kind, loss, budget) in configs.items():
        memory, split = lowered[label]
        saved = _saved_state(lambda loss=loss, budget=budget: tk.vjp(loss, *args, memory_budget=budget))
        plan = step_plan[label]       # the residuals the step keeps, as planned
        rows.append({"workload": name, "tool": "tracekern", "kind": kind, "label": label if kind == "hand-placed" else
                     f"budget {_size(budget)}", "budget_bytes": budget,
                     "fraction": None if budget is None else budget / plan.unconstrained_bytes,
                     # (a hand-placed strategy's step keeps the arrays behind its unplanned residuals)
                     "residual_bytes": plan.unconstrained_bytes if budget is None else plan.residual_bytes,
                     "recompute_cost_s": None if budget is None else plan.recompute_cost,
                     "solver": None if budget is None else plan.solver, "vjp_residual_bytes": split.residual_bytes,
                     "saved_state_bytes": saved,
                     "planned_peak_bytes": memory.peak_bytes["step"],
                     "peak_bytes": sampled_peak(steps[label]), **timings[label].as_dict(), **cpu[label]})
    return rows


def time_jax(name: str, size: str) -> list[dict]:
    from kernels import peers

    _, args = _workload(name, size)
    peers.make("jax", "chain", "test", "none").run()
    built = {}
    for strategy in ("none", "recompute", "dots"):
        try:
            built[strategy] = peers.make("jax", name, size, strategy, args=args)
        except (peers.Unsupported, ValueError):
            continue
    for p in built.values():
        p.run()
    timings = interleaved({s: p.run for s, p in built.items()}, *RUNS[size])
    cpu = cpu_times({s: p.run for s, p in built.items()}, CPU_RUNS[size])
    return [{"workload": name, "tool": "jax", "kind": "hand-placed", "label": s, "how": p.how,
             "peak_bytes": sampled_peak(p.run), **timings[s].as_dict(), **cpu[s]} for s, p in built.items()]


def time_torch(name: str, size: str) -> list[dict]:
    """torch.compile's min-cut partitioner under torch._functorch.config.activation_memory_budget,
    swept from 1.0 down (a fresh compile per budget)."""
    import torch
    import torch._functorch.config as functorch_config

    torch.set_num_threads(int(THREADS))
    from kernels import peers

    _, args = _workload(name, size)
    built = {}
    for fraction in (1.0, 0.8, 0.6, 0.4, 0.2, 0.0):
        functorch_config.activation_memory_budget = fraction
        import torch._dynamo

        torch._dynamo.reset()
        p = peers.make("torch", name, size, "none", args=args, compiled=True)
        p.run()
        built[fraction] = p
    timings = interleaved({f: p.run for f, p in built.items()}, *RUNS[size])
    cpu = cpu_times({f: p.run for f, p in built.items()}, CPU_RUNS[size])
    return [{"workload": name, "tool": "torch", "kind": "peer budget", "label": f"budget {f}", "fraction": f,
             "how": "torch.compile, activation_memory_budget", "peak_bytes": sampled_peak(p.run), **timings[f].as_dict(), **cpu[f]}
            for f, p in built.items()]


# -- the section -----------------------------------------------------------------------------------
def run(options: argparse.Namespace) -> dict:
    size = "test" if getattr(options, "test", False) else ("quick" if options.quick else "full")
    present, notes = peer_tools()
    tools = [t for t in ("tracekern", "jax", "torch") if (t == "tracekern" or t in present)
             and (not options.tools or t in options.tools)]
    names = [n for n in WORKLOADS if not options.only or n in options.only]
    start = time.perf_counter()
    workloads: dict = {}
    # Two lanes (harness.two_lanes): every timing process runs alone, one thread per tool, and what measures nothing
    # (each workload's plan, its points compiled into the disk cache by two processes, and the jobs of later sections
    # that measure nothing: options.lane_jobs, the calls table's counts) runs beside it on the other core. A timing
    # process uses one core; the targets compare CPU time per step in paired rounds. Beside a compiling process, the
    # mlp's nine points measured within 1% of the same points quiet, in wall and in CPU time (README "Memory budgets").
    def plan_all():     # (one process plans every workload: a process's start-up is about half a second)
        workloads.update(in_process("bench.budget", "--plan", ",".join(names), size, env=THREAD_ENV))

    def warm_job(name, part):
        def fn():   # (two processes compile a workload's points, each every other one; one where it has one budget)
            parts = 1 if len(workloads[name]["budgets"]) == 1 else 2
            if part < parts:
                return in_process("bench.budget", "--warm", name, size, json.dumps(workloads[name]["budgets"]), str(part),
                                  str(parts), env=dict(THREAD_ENV, TRACEKERN_COMPILE_WORKERS="0"))
        return Job(f"compile {name} {part}", fn, timing=False, after=("plan",))

    def time_job(name, tool, after):
        def fn():
            args = [json.dumps(workloads[name]["budgets"])] if tool == "tracekern" else []
            try:
                return in_process("bench.budget", "--time", tool, name, size, *args, env=THREAD_ENV)
            except RuntimeError as err:     # a peer that fails is a result, not a crash of the job
                notes.append(f"{name} ({tool}): failed: {str(err).splitlines()[-1][:200]}")
                return []
        return Job(f"time {name} {tool}", fn, timing=True, after=after)

    timing, work = [], [Job("plan", plan_all, timing=False)] if names else []
    for name in names:
        compiles = [warm_job(name, k) for k in range(2)] if "tracekern" in tools else []
        work += compiles
        timing += [time_job(name, tool, tuple(c.name for c in compiles) if tool == "tracekern" else ())
                   for tool in tools]
    lane_jobs = list(getattr(options, "lane_jobs", None) or [])
    print(f"budget: {len(timing)} timing processes, one at a time, beside the plans and {len(work) - 1} compiling jobs"
          + (f" and {len(lane_jobs)} of later sections" if lane_jobs else "") + " ...", file=sys.stderr)
    # (timing jobs first: one starts whenever it can; the lane beside takes the work in order)
    done = two_lanes(timing + work + lane_jobs, progress=lambda job: print(
        f"budget: {job} ({time.perf_counter() - start:.0f} s)", file=sys.stderr))
    if hasattr(options, "lane_results"):
        options.lane_results.update({j.name: done[j.name] for j in lane_jobs})
    rows = [r for name in names for tool in tools for r in done[f"time {name} {tool}"]]
    for name in names:
        if len(workloads[name]["budgets"]) == 1:
            notes.append(f"{name}: one point: its value_and_grad step has one plan whatever the budget "
                         f"({_size(workloads[name]['budgets'][0])}, the smallest feasible): a fused step remakes "
                         "elementwise values from the forward's arrays, and this one makes no others (tk.vjp, whose "
                         "halves are separate functions, can save more)")
    notes += _targets(rows, names)
    if "torch" not in tools:
        notes.append("PyTorch's activation_memory_budget (torch.compile's min-cut partitioner) is not shown: torch is "
                     "not installed here")
    return {"size": size, "notes": notes, "rows": rows, "workloads": workloads, "wall_s": time.perf_counter() - start,
            "load_average_end": load_average()}


def _clock(rows: list[dict]) -> tuple[str, str]:
    """The time the targets and the plot use: CPU time per step where every row has it, else wall."""
    return ("cpu_s", "CPU") if rows and all(r.get("cpu_s") for r in rows) else ("time_s", "wall")


def _ratio(a: dict, b: dict, key: str) -> tuple[float, str]:
    """a's time over b's: the paired median over their interleaved rounds with its 90% interval
    where both rows have the rounds of the same process, else the ratio of the medians."""
    ra, rb = a.get("cpu_rounds"), b.get("cpu_rounds")
    if key == "cpu_s" and ra and rb and len(ra) == len(rb) and len(ra) >= 3:
        mid, lo, hi = paired_ratio(ra, rb)
        return mid, f"{mid:.2f}x [{lo:.2f}-{hi:.2f}]"
    return a[key] / b[key], f"{a[key] / b[key]:.2f}x"


def _targets(rows: list[dict], names: list[str]) -> list[str]:
    """The two targets, per workload, met or not, with the figures that say so: the CPU time per step
    (or the wall time where a row lacks it) of two points as the median of their ratio in the same
    round, with a 90% bootstrap interval (a ratio within NOISE of 1 counts as equal)."""
    key, clock = _clock(rows)
    paired = key == "cpu_s" and all(r.get("cpu_rounds") for r in rows)
    notes = [f"the targets compare the {clock} time per step: "
             + ("the median over interleaved rounds of the ratio of two points' times in the same round (in "
                "brackets, its 90% bootstrap interval)" if paired else "the ratio of the medians")
             + f"; within {NOISE:.0%} of 1 counts as equal"]
    for name in names:
        curve = [r for r in rows if r["workload"] == name and r["tool"] == "tracekern" and r["kind"] == "budget"]
        hand = [r for r in rows if r["workload"] == name and r["tool"] == "tracekern" and r["kind"] == "hand-placed"]
        if not curve:
            continue
        bad = []
        for a, b in zip(curve, curve[1:]):      # budgets in decreasing order
            if b["residual_bytes"] > a["residual_bytes"]:
                bad.append(f"{b['label']} plans more bytes than {a['label']}")
            ratio, text = _ratio(b, a, key)
            if ratio < 1 - NOISE:
                bad.append(f"{b['label']} runs faster than {a['label']} ({text})")
        notes.append(f"{name}: the curve is {'monotone' if not bad else 'not monotone: ' + '; '.join(bad)} "
                     f"({len(curve)} budgets, {mb(curve[0]['residual_bytes'])} to {mb(curve[-1]['residual_bytes'])} MB "
                     f"of residuals, {ms(curve[0][key])} to {ms(curve[-1][key])} ms)")
        misses, met = [], []
        for r in curve:     # (memory: the residuals, as planned; their measured saved state agrees within 5%)
            fits = [h for h in hand if h["residual_bytes"] <= r["residual_bytes"]]
            if not fits:
                continue
            best = max(fits, key=lambda h: _ratio(r, h, key)[0])     # the fastest, as r compares with it
            ratio, text = _ratio(r, best, key)
            (met if ratio <= 1 + NOISE else misses).append(f"{r['label']} {text} {best['label']}")
        compared = len(met) + len(misses)
        notes.append(f"{name}: at {len(met)} of the {compared} budgets where a hand-placed strategy keeps no more, "
                     f"tracekern's time is at most the best such strategy's (+{NOISE:.0%}): {', '.join(met) or '-'}"
                     + ("" if not misses else f"; not at: {', '.join(misses)}")
                     + f"; {len(curve) - compared} budgets keep less than any hand-placed strategy")
    return notes


def table(result: dict) -> str:
    lines = [f"{'workload':12s} {'tool':10s} {'point':22s} {'solver':10s} {'residual MB':>11s} {'saved MB':>8s} "
             f"{'peak MB':>8s} {'time ms':>8s} {'min-max ms':>14s} {'CPU ms':>7s} {'min-max ms':>12s} "
             f"{'est. recompute ms':>17s}"]
    for r in result["rows"]:
        cost = r.get("recompute_cost_s")
        lines.append(f"{r['workload']:12s} {r['tool']:10s} {r['label']:22s} {r.get('solver') or '-':10s} "
                     f"{mb(r.get('residual_bytes')):>11s} {mb(r.get('saved_state_bytes')):>8s} {mb(r['peak_bytes']):>8s} "
                     f"{ms(r['time_s']):>8s} {ms(r['time_min_s']) + '-' + ms(r['time_max_s']):>14s} "
                     f"{ms(r.get('cpu_s')):>7s} {ms(r.get('cpu_min_s')) + '-' + ms(r.get('cpu_max_s')):>12s} "
                     f"{'-' if cost is None else f'{cost * 1e3:.2f}':>17s}")
    return "\n".join(lines)


def markdown(result: dict) -> str:
    lines = ["| workload | tool | point | residual MB | saved state MB | step peak MB | time ms (min-max) | "
             "CPU ms (min-max) |", "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['workload']} | {r['tool']} | {r['label']} | {mb(r.get('residual_bytes'))} | "
                     f"{mb(r.get('saved_state_bytes'))} | {mb(r['peak_bytes'])} | {ms(r['time_s'])} "
                     f"({ms(r['time_min_s'])}-{ms(r['time_max_s'])}) | {ms(r.get('cpu_s'))} "
                     f"({ms(r.get('cpu_min_s'))}-{ms(r.get('cpu_max_s'))}) |")
    return "\n".join(lines)


def compare(old: dict, new: dict) -> str:
    before = {(r["workload"], r["tool"], r["label"]): r for r in old["rows"]}
    out = []
    for r in new["rows"]:
        o = before.get((r["workload"], r["tool"], r["label"]))
        if o and o["time_s"] and r["time_s"]:
            out.append(f"{r['workload']:12s} {r['tool']:10s} {r['label']:22s} time {r['time_s'] / o['time_s']:.2f}x")
    return "\n".join(out)


STYLE = {"tracekern": ("o", "#1f77b4"), "jax": ("s", "#ff7f0e"), "torch": ("D", "#d62728")}


def plot(result: dict, path: str) -> str | None:
    """bench/results/budget.png: per workload, time against the measured saved state (what the budget
    bounds) and against the measured peak of the step; the budget sweep as a line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    path = path.replace("recompute", "budget") if "recompute" in path else path
    names = list(dict.fromkeys(r["workload"] for r in result["rows"]))
    clock, clock_name = _clock(result["rows"])
    low, high = clock.replace("_s", "_min_s"), clock.replace("_s", "_max_s")
    fig, axes = plt.subplots(2, len(names), figsize=(5.2 * len(names), 8.4), squeeze=False)
    fig.suptitle(f"value_and_grad under memory_budget= ({result['size']} sizes; medians, bars min-max; "
                 "lower and further left is better)", fontsize=12)
    for col, name in enumerate(names):
        for row, (key, what) in enumerate((("saved_state_bytes", "measured saved state (what the budget bounds), MB"),
                                          ("peak_bytes", "measured peak of the whole step, MB"))):
            ax = axes[row][col]
            mine = [r for r in result["rows"] if r["workload"] == name and r.get(key) is not None and r[clock]]
            for tool in STYLE:
                marker, color = STYLE[tool]
                line = [r for r in mine if r["tool"] == tool and r["kind"] in ("budget", "peer budget")]
                if line:
                    xs, ys = [r[key] / 2 ** 20 for r in line], [r[clock] * 1e3 for r in line]
                    err = [[y - r[low] * 1e3 for y, r in zip(ys, line)],
                           [r[high] * 1e3 - y for y, r in zip(ys, line)]]
                    ax.errorbar(xs, ys, yerr=err, marker=marker, color=color, lw=1.2, ms=5, capsize=2,
                                label=f"{tool} memory_budget sweep" if tool == "tracekern" else
                                f"{tool} activation_memory_budget")
                for r in (r for r in mine if r["tool"] == tool and r["kind"] == "hand-placed"):
                    x, y = r[key] / 2 ** 20, r[clock] * 1e3
                    ax.scatter(x, y, marker=marker, facecolors="none", edgecolors=color, s=70, zorder=3)
                    ax.annotate(f"{tool} {r['label']}", (x, y), xytext=(4, 4), textcoords="offset points", fontsize=7,
                                color=color)
            ax.set_title(f"{name}", fontsize=10)
            ax.set_xlabel(what, fontsize=8)
            ax.set_ylabel(f"{clock_name} time per step, ms", fontsize=8)
            ax.tick_params(labelsize=7.5)
            ax.grid(alpha=0.3)
            if col == 0:
                ax.legend(fontsize=7, loc="best")
    fig.tight_layout(rect=(0, 0, 1, 0.96))
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


SECTION = Section("budget", run, table, plot, compare, markdown, hosts_lanes=True)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--plan"]:       # --plan WORKLOAD[,WORKLOAD...] SIZE: {workload: plan(workload, SIZE)}
        child_result({name: plan(name, argv[2]) for name in argv[1].split(",")})
    elif argv[:1] == ["--warm"]:
        child_result(warm(argv[1], argv[2], json.loads(argv[3]), int(argv[4]), int(argv[5])))
    elif argv[:1] == ["--time"]:
        tool, name, size = argv[1:4]
        if tool == "tracekern":
            out = time_tracekern(name, size, json.loads(argv[4]))
        else:
            out = {"jax": time_jax, "torch": time_torch}[tool](name, size)
        child_result(out)
    else:
        main_job([SECTION], argv, prog="python -m bench.budget", doc=__doc__, name="budget")


if __name__ == "__main__":
    main()
