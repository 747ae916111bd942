"""The process's thread budget: how many threads a compiled step's parallel loops and BLAS may use on
this call, and the BLAS pool set to it through threadpoolctl.

One budget for both pools. A step runs its kernels one after another, so its prange loops and its
BLAS calls never run at once; the budget makes them the same size, and that size is what the
machine can give now: at most tk.config.threads (or TRACEKERN_NUM_THREADS), at most the cores this
process may run on, less the cores other processes keep busy (read from /proc/stat at most every
SAMPLE_S: their user, system and stolen time, not time at a lower priority than ours, which yields to
us), shared among the steps running at once in this process. Threads that wait for a thread the
machine does not run are what made a loaded machine slow: OpenBLAS with 2 threads beside one busy
process took 15x as long for the same GEMMs as with 1 (README, "Threads").

Small work runs on one thread without any of this: a step with no parallel loop and no GEMM of at
least BLAS_MIN_MACS multiply-adds never touches either pool. Results do not depend on the count:
parallel loops are chunked by shape and combine their chunks in a fixed order, and a GEMM computes
each output element's sum in the same order on any number of threads."""
from __future__ import annotations

import functools
import os
import threading
import time

import numba
from numba.np.ufunc import parallel as _numba_parallel

from ..settings import config

try:
    import threadpoolctl
    from threadpoolctl import ThreadpoolController
except ImportError:    # (a dependency: without it the BLAS pool keeps its own size)
    threadpoolctl = ThreadpoolController = None

# OpenBLAS runs a GEMM of fewer multiply-adds than this on one thread by itself (its
# SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD): below it the BLAS pool is left alone
BLAS_MIN_MACS = 65536 * 4
# how often other processes' load is read (a read of /proc/stat costs about 10 us)
SAMPLE_S = 0.1


@functools.cache
def cores() -> int:
    """The cores this process may run on, at most Numba's pool size."""
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(n, numba.config.NUMBA_NUM_THREADS))


class _Load:
    """The cores other processes keep busy, from /proc/stat's totals and this process's CPU time,
    smoothed over the last few samples. Where /proc/stat is missing (not Linux) it is 0."""

    def __init__(self):
        self.busy = 0.0
        self.last = None          # (wall, other processes' busy seconds)
        self.ok = os.path.exists("/proc/stat")
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        try:
            self.niced = os.getpriority(os.PRIO_PROCESS, 0) > 0   # we run niced: niced work competes with us
        except (AttributeError, OSError):
            self.niced = False

    def _others(self) -> float:
        """Seconds of CPU that processes other than this one have used since boot (at our priority or above)."""
        with open("/proc/stat", "rb") as f:
            fields = f.readline().split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[:8])
        busy = user + system + irq + softirq + steal + (nice if self.niced else 0)
        return busy / self.tick - time.process_time()

    def busy_cores(self) -> float:
        if not self.ok:
            return 0.0
        now = time.monotonic()
        if self.last is not None and now - self.last[0] < SAMPLE_S:
            return self.busy
        try:
            others = self._others()
        except (OSError, ValueError):
            self.ok = False
            return 0.0
        if self.last is not None:
            busy = max(0.0, (others - self.last[1]) / (now - self.last[0]))
            # (smoothed: a jiffy is 10 ms, so one window of 0.1 s on 2 cores sees 20 of them)
            self.busy = 0.5 * self.busy + 0.5 * busy
        self.last = (now, others)
        return self.busy


_LOAD = _Load()
_LOAD.busy_cores()   # (the first reading: a step's first run, after its compile, then sees a window)
_IN_FLIGHT = [0]
_LOCK = threading.Lock()
_LOCAL = threading.local()     # the count this thread last gave Numba's pool (its setting is per thread)


def available() -> int:
    """The threads a step may use now (see the module docstring)."""
    limit = config.threads or cores()
    if limit == 1:
        return 1
    free = cores() - _LOAD.busy_cores()
    return max(1, min(limit, int(free + 0.5) // max(1, _IN_FLIGHT[0])))


class _Blas:
    """The BLAS library Numba's np.dot calls (SciPy's, through scipy.linalg.cython_blas), or with
    numpy=True NumPy's own (np.matmul: the NumPy tier, backends/tiers.py), as threadpoolctl's
    controllers: found once, after the first step that calls it has loaded it."""

    def __init__(self, numpy: bool = False):
        self.controllers = None
        self.numpy = numpy

    def find(self) -> list:
        if self.controllers is None:
            if ThreadpoolController is None:
                self.controllers = []
                return self.controllers
            import scipy.linalg.cython_blas  # noqa: F401 (loads the library, if no step has yet)
            blas = _blas_controller().select(user_api="blas").lib_controllers
            if self.numpy:
                self.controllers = [c for c in blas if "numpy" in c.filepath]
                return self.controllers
            scipy = [c for c in blas if "scipy" in os.path.basename(os.path.dirname(c.filepath))
                     and "numpy" not in c.filepath]
            self.controllers = scipy or blas
        return self.controllers


def _blas_controller():
    """threadpoolctl's controller of the BLAS libraries loaded, made without a controller of every
    other library: its scan of all of them (OpenMP's too) was 5 to 30 ms of a warm start's first call."""
    prefixes = tuple(p for c in getattr(threadpoolctl, "_ALL_CONTROLLERS", ()) if getattr(c, "user_api", None) == "blas"
                     for p in getattr(c, "filename_prefixes", ()))
    if not prefixes or not hasattr(ThreadpoolController, "_make_controller_from_path"):
        return ThreadpoolController()

    class BlasOnly(ThreadpoolController):
        def _make_controller_from_path(self, filepath):
            if os.path.basename(filepath).startswith(prefixes):
                super()._make_controller_from_path(filepath)

        def _warn_if_incompatible_openmp(self):   # (its OpenMP libraries are not looked at)
            pass

    return BlasOnly()


_BLAS = _Blas()
_NUMPY_BLAS = _Blas(numpy=True)


def _set_numba(n: int) -> None:
    if getattr(_LOCAL, "numba", None) != n:
        _numba_parallel._launch_threads()
        _numba_parallel._set_num_threads(n)   # (numba.set_num_threads, without its checks: n is in range)
        _LOCAL.numba = n


class Budget:
    """Entered around one call of a compiled step: sets Numba's pool (for this thread) and, for a
    step with large GEMMs, the BLAS pool to the threads available now, and puts BLAS back after."""

    __slots__ = ("parallel", "blas", "restore", "threads", "numpy")

    def __init__(self, parallel: bool, blas: bool, numpy: bool = False):
        self.parallel = parallel      # the step runs prange loops
        self.blas = blas              # it runs a GEMM of at least BLAS_MIN_MACS
        self.numpy = numpy            # ... with NumPy's BLAS too (the NumPy tier)
        self.restore: list = []
        self.threads = 1

    def __enter__(self) -> Budget:
        with _LOCK:
            _IN_FLIGHT[0] += 1
        n = self.threads = available()
        if self.parallel:
            _set_numba(n)
        if self.blas:
            self.restore = []
            for c in _BLAS.find() + (_NUMPY_BLAS.find() if self.numpy else []):
                old = c.get_num_threads()
                if old != n:
                    c.set_num_threads(n)
                    self.restore.append((c, old))
        return self

    def __exit__(self, *exc) -> None:
        for c, old in self.restore:
            c.set_num_threads(old)
        self.restore = []
        with _LOCK:
            _IN_FLIGHT[0] -= 1


def numba_threads() -> int:
    """The thread count this thread last gave Numba's pool through a Budget (None before any)."""
    return getattr(_LOCAL, "numba", None)
