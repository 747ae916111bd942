"""Compiling units in parallel: a cold step with many kernels that are not yet in the disk cache
compiles them in this process and in worker processes at once; each compiled unit lands in the
disk cache, and this process loads it from there. Numba compiles under a global lock, so threads
would not help; processes use every core.

Workers are spawned (never forked: the parent may run OpenMP and BLAS threads), once per process,
on the first step that has enough to compile. TRACEKERN_COMPILE_WORKERS sets how many (0: none);
by default one fewer than the cores, at most 4."""
from __future__ import annotations

import atexit
import functools
import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from . import cache

# Fewer uncached units than this compile in this process only: a worker's start-up (about half a
# second: Python, NumPy, Numba) would cost more than it saves.
MIN_UNITS = 6


def worker_count() -> int:
    env = os.environ.get("TRACEKERN_COMPILE_WORKERS")
    if env is not None:
        try:
            return max(0, int(env))
        except ValueError:
            raise ValueError(f"TRACEKERN_COMPILE_WORKERS must be an integer, got {env!r}") from None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(0, min(4, cores - 1))


@functools.cache
def _pool(workers: int) -> ProcessPoolExecutor:
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_init_worker)
    atexit.register(pool.shutdown, wait=False, cancel_futures=True)
    return pool


def _init_worker() -> None:
    os.environ["TRACEKERN_COMPILE_WORKERS"] = "0"


def _compile_in_worker(cache_dir: str, sources: Sequence[str], name: str, signatures: list) -> None:
    """In a worker: import the unit (and the modules it needs, in order) from the parent's cache
    directory and compile `name` for each signature; Numba writes the machine code beside it."""
    os.environ["TRACEKERN_CACHE_DIR"] = cache_dir
    for s in sources:
        module = cache.load_module(s)
    fn = getattr(module, name)
    for sig in signatures:
        fn.compile(sig)


def compile_all(jobs: list[tuple[Sequence[str], str, list]], compile_here: Callable[[int], None]) -> None:
    """Compile every job: (sources to import in order, function name, signatures). Workers take jobs
    from the front; this process takes them from the back, calling compile_here(index), until the
    two meet. Returns when all are compiled (a job a worker failed is compiled here, so that its
    error, if any, is raised here with its context)."""
    workers = worker_count()
    if workers == 0 or len(jobs) < MIN_UNITS:
        for i in range(len(jobs)):
            compile_here(i)
        return
    try:
        pool = _pool(workers)
        where = str(cache.cache_dir())
        futures: list[Future] = [pool.submit(_compile_in_worker, where, *job) for job in jobs]
    except (OSError, RuntimeError):   # (no processes here: compile in this process)
        for i in range(len(jobs)):
            compile_here(i)
        return
    for i in reversed(range(len(jobs))):
        if futures[i].cancel():
            compile_here(i)
    for i, f in enumerate(futures):
        if not f.cancelled() and f.exception() is not None:
            compile_here(i)
