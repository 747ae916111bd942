"""Compiling units in parallel: a cold step with many kernels that are not yet in the disk cache
compiles them in this process and in worker processes at once; each compiled unit lands in the
disk cache, and this process loads it from there. Numba compiles under a global lock, so threads
would not help; processes use every core.

A worker is a plain subprocess, `python -I -c _BOOT <this tracekern's package directory>`, started
once per process on the first step that has enough to compile, and fed one job at a time over a
pipe (pickles of sources and Numba signatures; it answers "done" or the error). Isolated (-I): it
imports nothing from its working directory (a private one: the cache directory) nor from
PYTHONPATH or the user's site-packages, so a numpy.py planted where the user runs Python never
runs in it; it loads tracekern from the very directory this process did (a checkout, an editable
or a regular install alike). Not multiprocessing's spawn, which would import the user's main
script again in the worker. TRACEKERN_COMPILE_WORKERS sets how many workers (0: none); by
default one fewer than the cores, at most 4."""
from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

from . import cache

# Fewer uncached units than this compile in this process only: a worker's start-up (about half a
# second: Python, NumPy, Numba) would cost more than it saves.
MIN_UNITS = 6

_WORKERS: list[_Worker] = []
_LOCK = threading.Lock()

# What a worker runs first: tracekern's package from the directory given (argv[1]) and nothing else
# from outside the interpreter's own paths; then the loop of _serve().
_BOOT = """
import importlib.util, os, sys
package = sys.argv[1]
spec = importlib.util.spec_from_file_location("tracekern", os.path.join(package, "__init__.py"),
                                              submodule_search_locations=[package])
module = sys.modules["tracekern"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
from tracekern.backends.workers import _serve
_serve()
"""


def worker_count() -> int:
    env = os.environ.get("TRACEKERN_COMPILE_WORKERS")
    if env is not None:
        try:
            return max(0, int(env))
        except ValueError:
            raise ValueError(f"TRACEKERN_COMPILE_WORKERS must be an integer, got {env!r}") from None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(4, cores - 1))


class _Worker:
    """One worker process and its pipes."""

    def __init__(self):
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, TRACEKERN_COMPILE_WORKERS="0")   # (-I: Python ignores its PYTHON* variables)
        self.proc = subprocess.Popen([sys.executable, "-I", "-c", _BOOT, package], env=env, cwd=cache.cache_dir(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)

    def run(self, job: tuple) -> str | None:
        """Send one job and wait for its answer: None when done, else the error's text."""
        try:
            pickle.dump((str(cache.cache_dir()), *job), self.proc.stdin)
            self.proc.stdin.flush()
            return pickle.load(self.proc.stdout)
        except (OSError, EOFError, pickle.UnpicklingError) as err:
            return f"worker lost: {err!r}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()


def _workers(n: int) -> list[_Worker]:
    with _LOCK:
        _WORKERS[:] = [w for w in _WORKERS if w.alive()]
        while len(_WORKERS) < n:
            try:
                _WORKERS.append(_Worker())
            except OSError:
                break
            if len(_WORKERS) == 1:
                atexit.register(_close_all)
        return list(_WORKERS[:n])


def _close_all() -> None:
    for w in _WORKERS:
        w.close()
    _WORKERS.clear()


def compile_all(jobs: list[tuple[Sequence[str], str, list]], compile_here: Callable[[int], None]) -> None:
    """Compile every job: (sources to import in order, function name, signatures). Workers take jobs
    from the front, this process from the back, until they meet; returns when all are compiled. A job
    a worker failed is compiled here again, so that its error, if any, is raised here with context."""
    n = worker_count()
    pool = _workers(n) if n and len(jobs) >= MIN_UNITS else []
    if not pool:
        for i in range(len(jobs)):
            compile_here(i)
        return
    lock = threading.Lock()
    ends = [0, len(jobs) - 1]   # next job from the front, from the back
    failed: list[int] = []

    def feed(worker: _Worker) -> None:
        while True:
            with lock:
                if ends[0] > ends[1]:
                    return
                i = ends[0]
                ends[0] += 1
            if worker.run(jobs[i]) is not None:
                failed.append(i)

    threads = [threading.Thread(target=feed, args=(w,), daemon=True) for w in pool]
    for t in threads:
        t.start()
    try:
        while True:
            with lock:
                if ends[1] < ends[0]:
                    break
                i = ends[1]
                ends[1] -= 1
            compile_here(i)
    finally:
        for t in threads:
            t.join()
    for i in failed:
        compile_here(i)


def _serve() -> None:
    """The worker's loop: read a job, compile it into the disk cache, answer None or the error."""
    stdin = sys.stdin.buffer
    stdout = os.fdopen(os.dup(1), "wb")   # the answers' pipe; anything printed goes to stderr
    os.dup2(2, 1)
    while True:
        try:
            cache_dir, sources, name, signatures = pickle.load(stdin)
        except EOFError:
            return
        try:
            os.environ["TRACEKERN_CACHE_DIR"] = cache_dir
            for s in sources:
                module = cache.load_module(s)
            for sig in signatures:
                getattr(module, name).compile(sig)
            answer = None
        except Exception as err:   # (reported; the parent compiles it again and raises it there)
            answer = f"{type(err).__name__}: {err}"
        pickle.dump(answer, stdout)
        stdout.flush()


if __name__ == "__main__":
    _serve()
