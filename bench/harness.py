"""What every benchmark in bench/ shares: timing with its spread, peak-memory sampling, a
measurement in a process of its own, the peers' availability notes, JSON, and the main job.

The main job (`python -m bench`) runs a list of sections (SECTIONS in bench/__main__.py). A
Section turns options into a result dict ({"rows": [...], "notes": [...], ...}), prints it as a
table, may plot it and compare two runs of it; the JSON holds one entry per section under
"sections". Adding a section to the main job is adding one Section to that list. Sections run one after another;
a section that measures nothing (Section.jobs) runs its processes beside the single-core timing of an earlier section
that hosts lanes (Section.hosts_lanes; two_lanes), on the core that timing leaves free."""
from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib.metadata
import json
import math
import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import tracekern as tk

# Benchmarks time compiled steps: every step compiles before its first call returns (issue 27's tiers
# would otherwise time the NumPy tier, or a switch mid-round). bench.compile turns them on where it
# measures them; TRACEKERN_TIERS, when set, wins.
if "TRACEKERN_TIERS" not in os.environ:
    tk.config.tiers = False

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")


# -- timing ---------------------------------------------------------------------------------------
@dataclass
class Timing:
    median: float
    low: float
    high: float
    runs: int

    def as_dict(self) -> dict:
        return {"time_s": self.median, "time_min_s": self.low, "time_max_s": self.high, "runs": self.runs}


def time_calls(fn: Callable, runs: int) -> list[float]:
    """Seconds of each of `runs` calls of fn (no warm-up)."""
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return times


def median_time(fn: Callable, runs: int) -> float:
    """The median of `runs` calls after one warm-up call (which compiles)."""
    fn()
    return float(np.median(time_calls(fn, runs)))


def interleaved(fns: dict[str, Callable], min_runs: int, min_seconds: float, rounds: int = 3,
                max_runs: int = 200) -> dict[str, Timing]:
    """Times several functions that are to be compared, in `rounds` interleaved rounds (a, b, c, a,
    b, c, ...), so that a change of the machine's load hits each alike. Each runs at least min_runs
    times and for at least min_seconds in all. Call each once before (compile, warm-up)."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    per_round = {}
    for k, fn in fns.items():
        estimate = min(time_calls(fn, 1)[0], 10.0)
        runs = max(min_runs, math.ceil(min_seconds / max(estimate, 1e-6)))
        per_round[k] = max(1, min(max_runs, runs) // rounds + (min(max_runs, runs) % rounds > 0))
    for _ in range(rounds):
        for k, fn in fns.items():
            times[k] += time_calls(fn, per_round[k])
    return {k: Timing(float(np.median(t)), min(t), max(t), len(t)) for k, t in times.items()}


def first_call(fn: Callable) -> tuple[float, float]:
    """(seconds of the first call, seconds of the second): the first traces and compiles."""
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    fn()
    return t1 - t0, time.perf_counter() - t1


# -- a busy machine ---------------------------------------------------------------------------------
# a busy process: spins on one core at normal priority (a browser, a second job, a CI neighbour),
# and stops by itself after its time even if nobody stops it
_SPIN = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


@contextlib.contextmanager
def load(n: int, seconds: float = 1800.0):
    """`n` busy processes beside the block (--load N): each spins on a core at the default priority
    for at most `seconds`, and all are stopped when the block ends."""
    procs = [subprocess.Popen([sys.executable, "-c", _SPIN, str(seconds)]) for _ in range(max(0, int(n)))]
    try:
        if procs:
            time.sleep(0.2)   # (running before the first measurement)
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


def add_load_option(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--load", nargs="+", type=int, default=[0], metavar="N",
                    help="busy processes started beside each measurement, one run per N given (0: none; "
                         "--load 0 1 measures every workload quiet and beside one busy process)")


# -- memory ---------------------------------------------------------------------------------------
class PeakSampler:
    """The peak resident memory of this process while the block runs, above the level before it.

    On Linux it resets the kernel's high-water mark (VmHWM, by writing 5 to /proc/self/clear_refs)
    and reads it at the end: exact, and independent of the GIL (a compiled step that holds the GIL
    would starve a sampling thread). Elsewhere, or where that is refused, a thread samples
    /proc/self/statm every 0.2 ms (it sees only what happens while it gets the GIL).

    Entering it also tells glibc to return freed blocks of 16 KiB or more to the system at once
    (mmap, no trimming threshold), so that resident memory follows the live arrays; this stays set
    for the rest of the process, so time calls before measuring memory (it made allocation-heavy
    steps, such as a scan's per-step buffers, up to 2.5x slower)."""

    def __init__(self):
        self.page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.ok = os.path.exists("/proc/self/statm")
        self.exact = False
        self.peak = 0
        self._stop = threading.Event()
        self._thread = None

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    @staticmethod
    def _high_water_mark() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

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
            try:
                with open("/proc/self/clear_refs", "w") as f:
                    f.write("5")
                self.exact = True
            except OSError:
                self.exact = False
            self.base = self.rss()
            self.peak = self.base
            if not self.exact:
                self._thread = threading.Thread(target=self._run, daemon=True)
                self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.0002)

    def __exit__(self, *exc):
        if self.ok:
            if self._thread is not None:
                self._stop.set()
                self._thread.join()
            self.peak = max(self.peak, self.rss(), self._high_water_mark() if self.exact else 0)

    @property
    def above_base(self):
        return self.peak - self.base if self.ok else None


def sampled_peak(fn: Callable, calls: int = 3) -> int | None:
    """The highest resident memory during `calls` calls of fn, above the level before them. tracekern's
    steps keep no buffers meanwhile (tk.config.keep_buffers: a step's kept buffers would be in the level
    before, not in its peak); fn's first call drops those it kept."""
    import gc

    with tk.config.override(keep_buffers=False):
        fn()
        gc.collect()
        with PeakSampler() as sampler:
            for _ in range(calls):
                fn()
    return sampler.above_base


# -- processes, peers, machine ---------------------------------------------------------------------
# every process in_process ran in this one ({"args", "wall_s"}): the main job's JSON keeps them ("processes"),
# which says where its time went
PROCESSES: list[dict] = []


def in_process(module: str, *args: str, env: dict | None = None) -> object:
    """Runs `python -m module *args` from the repository root and returns the JSON of its last line
    of output (a measurement in a fresh process: no memory or cache of another one); the process
    gives it with child_result."""
    cmd = [sys.executable, "-m", module, *args]
    # the repository first; a PYTHONPATH already set (a peer installed by hand) stays after it
    path = os.pathsep.join([ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p != ROOT])
    env = {**os.environ, "PYTHONPATH": path, "TF_CPP_MIN_LOG_LEVEL": "2", **(env or {}), CHILD_ENV: "1"}   # (env= may set them too)
    start = time.perf_counter()
    out, cpu_s = _run(cmd, env)
    PROCESSES.append({"args": [module, *args], "wall_s": round(time.perf_counter() - start, 3), "cpu_s": cpu_s})
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[2:])} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


# set in the processes in_process starts: their one answer is the last line of their output (child_result);
# taken out of the environment when this module loads, so that the process's own children do not see it
CHILD_ENV = "TK_BENCH_CHILD"
_CHILD = os.environ.pop(CHILD_ENV, None) == "1"


def child_result(result) -> None:
    """A measuring process's answer to in_process: `result` as JSON on the last line of its output. A process
    in_process started then ends at once: its exit handlers run (a step's compile workers are closed and waited
    for, as at a normal exit) but not the interpreter's teardown of its modules, which frees what Numba, LLVM and
    JAX made one object at a time: 0.13-0.26 s a process, measured (against 0.02), paid by about 60 processes one
    after another in the main job, after their measurements. First, as at a normal exit, its non-daemon threads
    are joined. Elsewhere (run by hand), it only prints."""
    print(json.dumps(result), flush=True)
    if not _CHILD:
        return
    getattr(threading, "_shutdown", lambda: None)()   # (what a normal exit does first: its non-daemon threads joined)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _run(cmd: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float]:
    """subprocess.run(cmd) capturing its output, and the CPU seconds (user and system) of the process and of
    the processes it waited for (its compile workers): os.wait4's account of it."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=env)
    got = {}
    readers = [threading.Thread(target=lambda k=k, f=f: got.__setitem__(k, f.read())) for k, f in
               (("out", proc.stdout), ("err", proc.stderr))]
    for r in readers:
        r.start()
    for r in readers:
        r.join()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    proc.stderr.close()
    return (subprocess.CompletedProcess(cmd, proc.returncode, got["out"], got["err"]),
            round(usage.ru_utime + usage.ru_stime, 3))


@dataclass
class Job:
    """A piece of a section's work for two_lanes: fn() runs one process and returns its result. `timing`: it measures
    time (never beside another timing job); otherwise it measures nothing (compiles into the disk cache, counts), runs
    on one core, and may run beside a timing job whose process uses one core. `after`: names of jobs that end first."""
    name: str
    fn: Callable[[], object]
    timing: bool
    after: tuple[str, ...] = ()


def two_lanes(jobs: list[Job], lanes: int = 2, progress: Callable[[str], None] | None = None) -> dict[str, object]:
    """Runs the jobs on `lanes` threads (each job a process on one core): whenever a lane is free it takes the first job,
    in list order, whose `after` jobs have ended, a timing job only while no other timing job runs. {name: result}; the
    first job that raised raises again once every job has ended (a job after it runs all the same)."""
    names = {j.name for j in jobs}
    missing = {a for j in jobs for a in j.after} - names
    if missing or len(names) != len(jobs):
        raise ValueError(f"two_lanes: jobs named twice, or after unknown jobs: {sorted(missing)}")
    ordered, left = set(), {j.name: set(j.after) for j in jobs}
    while left:     # (a job after itself, or a cycle, would leave both lanes waiting for ever)
        free = [n for n, a in left.items() if a <= ordered]
        if not free:
            raise ValueError(f"two_lanes: jobs that wait for each other: {sorted(left)}")
        ordered.update(free)
        for n in free:
            del left[n]
    done: dict[str, object] = {}
    errors: list[BaseException] = []
    pending = list(jobs)
    state = {"timing": False}
    cond = threading.Condition()

    def ready(j: Job) -> bool:
        return all(a in done for a in j.after) and not (j.timing and state["timing"])

    def lane() -> None:
        while True:
            with cond:
                while pending and not any(ready(j) for j in pending):
                    cond.wait()
                if not pending:
                    return
                job = next(j for j in pending if ready(j))
                pending.remove(job)
                state["timing"] |= job.timing
            try:
                result = job.fn()
            except BaseException as err:   # noqa: BLE001 (raised again below, after the other lanes end)
                result = None
                errors.append(err)
            with cond:
                done[job.name] = result
                if job.timing:
                    state["timing"] = False
                cond.notify_all()
            try:
                if progress:
                    progress(job.name)
            except Exception as err:   # noqa: BLE001 (likewise: the lane goes on with the other jobs)
                errors.append(err)

    threads = [threading.Thread(target=lane) for _ in range(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return done


def peer_tools() -> tuple[list[str], list[str]]:
    """(the peer tools importable here, a note for each absent one saying how to add it)."""
    from kernels import peers

    present, notes = [], []
    for tool, (_, label, install) in peers.TOOLS.items():
        if peers.available(tool):
            present.append(tool)
        else:
            notes.append(f"{label} not installed: its rows are skipped ({install} adds them)")
    return present, notes


def versions() -> dict:
    out = {}
    for dist in ("tracekern", "numpy", "numba", "jax", "tensorflow-cpu", "tensorflow", "torch", "matplotlib"):
        try:
            out[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def load_average() -> list | None:
    """The machine's 1, 5 and 15-minute load averages: on a shared machine, what the times shared it with."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except (OSError, AttributeError):
        return None


def machine() -> dict:
    return {"date": time.strftime("%Y-%m-%d"), "machine": platform.processor() or platform.machine(),
            "cores": os.cpu_count(), "python": platform.python_version(), "versions": versions(),
            "load_average": load_average()}


def save(result: dict, path: str) -> None:
    """Write a benchmark's figures as JSON (what a later run compares with)."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {path}")


def ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def mb(nbytes) -> str:
    return "-" if nbytes is None else f"{nbytes / 2**20:.1f}"


# -- scripts and the main job ---------------------------------------------------------------------
def script(prog: str, doc: str, run: Callable[[argparse.Namespace], dict], report: Callable[[dict], str],
           json_name: str, argv=None, options: Callable[[argparse.ArgumentParser], None] | None = None) -> dict:
    """The main of a single benchmark (python -m bench.cpu, .loops, .dask, .cuda): --quick and
    --json, run, print the report and the notes, write the JSON."""
    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes, few runs")
    ap.add_argument("--json", default=os.path.join(RESULTS, json_name))
    if options:
        options(ap)
    args = ap.parse_args(argv)
    result = dict(machine(), **run(args))
    result["load_average_end"] = load_average()
    print(report(result))
    print(f"load average {result['load_average']} at the start, {result['load_average_end']} at the end, "
          f"on {result['cores']} cores")
    for note in result.get("notes", []):
        print("note:", note)
    save(result, args.json)
    return result


@dataclass
class Section:
    """One part of the main job. run(options) -> {"rows": [...], "notes": [...], ...};
    table(result) -> text; plot(result, path) -> the path written, or None; compare(old, new) -> text;
    markdown(result) -> the table in Markdown (for the README)."""
    name: str
    run: Callable[[argparse.Namespace], dict]
    table: Callable[[dict], str]
    plot: Callable[[dict, str], str | None] | None = None
    compare: Callable[[dict, dict], str] | None = None
    markdown: Callable[[dict], str] | None = None
    # A section that measures nothing (counts, say): jobs(options) -> (its Jobs, none of them timing; finish, which
    # turns {job name: result} into the section's result). run(options) runs them on both cores; the main job gives
    # them instead to a section that hosts lanes (below), which runs them beside its own single-core timing.
    jobs: Callable[[argparse.Namespace], tuple[list[Job], Callable[[dict], dict]]] | None = None
    # A section whose timing processes use one core each (bench.budget: one thread per tool, CPU time compared): its
    # run takes options.lane_jobs (Jobs of later sections that measure nothing) into its own two_lanes, and puts their
    # results in options.lane_results.
    hosts_lanes: bool = False


def _sections_of(result: dict, first: str) -> dict:
    """A result file's sections; a file from before sections were named is the first section alone."""
    return result["sections"] if "sections" in result else {first: result}


def main_job(sections: list[Section], argv=None, prog: str = "python -m bench", doc: str | None = None,
             name: str = "recompute", options: Callable[[argparse.ArgumentParser], None] | None = None) -> dict | None:
    ap = argparse.ArgumentParser(prog=prog, description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="quick sizes (each step >= ~20 ms); results go to NAME-quick.json "
                    "and .png unless --json/--plot say otherwise (the README's 'How long' gives the time)")
    ap.add_argument("--only", nargs="+", metavar="WORKLOAD", help="workloads to run (default: all)")
    ap.add_argument("--tools", nargs="+", metavar="TOOL", help="tracekern and the peers to run (default: all installed)")
    ap.add_argument("--sections", nargs="+", choices=[s.name for s in sections], help="sections to run (default: all)")
    ap.add_argument("--json", default=None, help=f"default: bench/results/{name}.json ({name}-quick.json with --quick)")
    ap.add_argument("--plot", default=None, help=f"default: bench/results/{name}.png ({name}-quick.png with --quick)")
    add_load_option(ap)
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="new/old of every row two result files share")
    ap.add_argument("--markdown", metavar="RESULT", help="print a result file's tables and notes as Markdown")
    if options:
        options(ap)
    args = ap.parse_args(argv)
    # (a quick run never overwrites the full run's results)
    stem = os.path.join(RESULTS, f"{name}-quick" if args.quick else name)
    args.json = args.json or stem + ".json"
    args.plot = args.plot or stem + ".png"
    chosen = [s for s in sections if not args.sections or s.name in args.sections]
    if args.markdown:
        saved = json.load(open(args.markdown))
        parts = _sections_of(saved, sections[0].name)
        for s in chosen:
            if s.markdown and s.name in parts:
                print(s.markdown(parts[s.name]) + "\n")
                print("\n".join(f"- {note}" for note in parts[s.name].get("notes", [])) + "\n")
        return None
    if args.compare:
        old, new = (_sections_of(json.load(open(p)), sections[0].name) for p in args.compare)
        for s in chosen:
            if s.compare and s.name in old and s.name in new:
                print(f"== {s.name}\n{s.compare(old[s.name], new[s.name])}")
        return None
    result = dict(machine(), size="quick" if args.quick else "full", sections={})
    start = time.perf_counter()
    # sections that measure nothing, after one that hosts lanes: their jobs run there, beside its timing
    host = next((s for s in chosen if s.hosts_lanes), None)
    laned = {s.name: s.jobs(args) for s in chosen[chosen.index(host) + 1:] if s.jobs} if host else {}
    args.lane_jobs = [j for jobs, _ in laned.values() for j in jobs]
    args.lane_results = {}
    for s in chosen:
        part = laned[s.name][1](args.lane_results) if s.name in laned else s.run(args)
        result["sections"][s.name] = part
        print(f"== {s.name}\n{s.table(part)}")
        for note in part.get("notes", []):
            print("note:", note)
    result["wall_s"] = time.perf_counter() - start
    result["load_average_end"] = load_average()
    result["processes"] = PROCESSES
    save(result, args.json)
    for s in chosen:
        if s.plot:
            path = s.plot(result["sections"][s.name], args.plot)
            print(f"wrote {path}" if path else "note: matplotlib not installed (pip install -e '.[bench]'): no plot")
    print(f"({result['wall_s']:.0f} s; load average {result['load_average']} at the start, "
          f"{result['load_average_end']} at the end, on {result['cores']} cores)")
    return result
