"""Tiered execution on cpu: a new step runs at once on NumPy (the interpreter, then each kernel's
NumPy evaluation) while its compile units compile in the background, each kernel switching when ready.

A cpu step (cpu_runtime.CompiledStep) is a plan, a driver and one compile unit per distinct kernel. A new
step's first calls run its graph on the interpreter: no planning, no rendering, nothing compiled.
When it starts compiling (the rule below), the background plans and renders it; where the driver is
plain Python with no control flow, the slow tier becomes that very driver, loaded with each kernel
name bound to the NumPy evaluation of its kernel, and each name is rebound to the compiled unit the
moment that unit is compiled (in a worker process, loaded from the disk cache here): the plan and
the driver are shared, so a step runs any mix of the two and nothing else changes. Other steps (an
njit driver, loops compiled whole, branches) stay on the interpreter until the compiled step is
ready, then switch at once. A step with a compiled driver as well (tk.config.compiled_drivers) then
compiles it, as the last tier: its Python driver runs until it is ready.

When compiling starts (measured: the README's "Tiers"): once a step has spent COMPILE_AFTER_SECONDS
in the slow tier, or has been called COMPILE_AFTER_CALLS times, whichever comes first. A cold compile
costs 0.3-1 s a kernel (several seconds for a small program's few kernels), and the NumPy tier is
within 1-3x of the compiled step wherever BLAS does the work (an MLP of 64-wide layers: the same
speed) and 20x slower only for tiny steps (200 us against 9 us a call), where the compile pays back
after tens of thousands of calls. So a program called a few times (a unit test) never compiles, and
one that runs long enough to matter starts compiling within 50 ms of slow-tier time or 50 calls.
A call never waits for a compile: one background thread takes the steps in order; a compile that
fails leaves the step on the slow tier and is reported (a tk.CompileWarning) on its next call."""
from __future__ import annotations

import atexit
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sequence
from types import ModuleType

import numpy as np

from ..errors import CompileWarning, user_stacklevel
from . import cache, interpret, threads, units, workers

COMPILE_AFTER_CALLS = 50
COMPILE_AFTER_SECONDS = 0.05


class _Compiler:
    """The background thread: runs queued jobs (a step's compile) one at a time, in order."""

    def __init__(self):
        self._cv = threading.Condition()
        self._jobs: list[Callable[[], None]] = []
        self._busy = 0
        self._thread: threading.Thread | None = None
        self._stopped = False

    def submit(self, job: Callable[[], None]) -> None:
        with self._cv:
            if self._stopped:
                return
            self._jobs.append(job)
            self._busy += 1
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name="tracekern-tiers", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._jobs:
                    if self._stopped:
                        return
                    self._cv.wait()
                job = self._jobs.pop(0)
            try:
                job()   # (catches its own errors)
            finally:
                with self._cv:
                    self._busy -= 1
                    self._cv.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until every job submitted so far is done; False if `timeout` passed first."""
        end = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._busy:
                left = None if end is None else end - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def stop(self) -> None:
        """At exit: drop the jobs not started (the process is ending; nothing will call them)."""
        with self._cv:
            self._stopped = True
            self._busy -= len(self._jobs)
            self._jobs.clear()
            self._cv.notify_all()


_COMPILER = _Compiler()
atexit.register(_COMPILER.stop)   # (registered after workers': runs before the workers are closed)


def wait(timeout: float | None = None) -> bool:
    """Wait until the background compiles started so far have finished (tests, benchmarks); False
    if `timeout` seconds passed first."""
    return _COMPILER.wait(timeout)


def _compiled_step(step):
    """(unpickling a TieredStep: the receiving process gets the plain compiled step)"""
    return step


class TieredStep:
    """A cpu step that runs on the NumPy tier until its compile units are ready (see the module
    docstring). Call it with a list of arrays, get a list of arrays; every other attribute is the
    compiled step's (built on first use: planning and rendering are not done for a step that never
    compiles). `tier`: "numpy", "mixed" (some kernels compiled) or "compiled"."""

    def __init__(self, graph, build: Callable[[], object], blas: bool = False):
        self.graph = graph
        self._blas = blas   # it runs a large GEMM: the interpreter's calls take the thread budget (threads.py)
        self._build = build
        self._step = None
        self._lock = threading.RLock()
        self._calls = 0
        self._slow_seconds = 0.0
        self._started = False
        self._done = threading.Event()
        self._errors: list[str] = []
        self._switched: set[int] = set()
        # (the first calls: the graph on the interpreter, runs of elementwise equations over large arrays
        # in blocks on the threads the machine can give: interpret._Run)
        self._interp = interpret.compile_graph(graph, threads=threads.available)
        self._slow: ModuleType | None = None            # (then the driver, kernel by kernel)
        self.on_compiled: Callable[[], None] | None = None   # called once every unit is compiled

    def __reduce__(self):
        return (_compiled_step, (self.step,))

    def __getattr__(self, name):
        if name.startswith("__") or name in ("_step", "_build", "_lock"):
            raise AttributeError(name)
        return getattr(self.step, name)

    @property
    def step(self):
        """The compiled step (cpu_runtime.CompiledStep): its plan, driver and units, made on first use."""
        with self._lock:
            if self._step is None:
                self._step = self._build()
            return self._step

    @property
    def tier(self) -> str:
        if self._done.is_set():
            return "compiled"
        return "mixed" if self._switched else "numpy"

    @property
    def per_kernel(self) -> bool:
        """Whether kernels switch one by one (else the whole step switches when all are ready)."""
        return self._slow is not None

    def prepare(self) -> None:
        """Plan and render the step, and where its driver allows, run the driver from now on with each
        kernel's NumPy evaluation (what a background compile does first)."""
        step = self.step
        with self._lock:
            if self._slow is None and step.unit_kernels is not None:
                try:
                    self._slow = self._slow_module(step.unit_kernels)
                except Exception:   # (a kernel NumPy cannot evaluate alone: the interpreter until compiled)
                    self._slow = None

    def _slow_module(self, kernels: dict[int, tuple]) -> ModuleType:
        """The driver's source run as a private module, its kernel imports replaced by the NumPy
        evaluation of each kernel (names K0, K0x, ...: cpu._Module.imports)."""
        step = self.step
        n = len(step.modules) - 1
        if set(kernels) != set(range(n)):
            raise ValueError("a kernel of the step is called from a sub-graph")
        producer = {v: e for e in step.plan.graph.eqns for v in e.outputs}
        shims = {i: interpret.kernel_function(producer, reads, writes) for i, (reads, writes) in kernels.items()}
        lines = step.driver.split("\n")
        names = {}
        for j, line in enumerate(lines):
            if line.startswith("from tracekern_generated_") and " import kernel as K" in line:
                alias = line.split(" import kernel as ")[1].split(",")[0].strip()
                names[alias] = j
                lines[j] = ""   # (blank: line numbers stay those of the driver's file)
        module = ModuleType(f"tracekern_tier_{id(self)}")
        module.__file__ = str(cache.module_path(step.driver))
        exec(compile("\n".join(lines), module.__file__, "exec"), module.__dict__)
        for i in range(n):
            fn = shims[i]
            setattr(module, f"K{i}", fn)
            setattr(module, f"K{i}x", fn)
        if len(names) != n:
            raise ValueError("the driver's imports are not one per kernel")
        return module

    def __call__(self, args: Sequence[np.ndarray]) -> list:
        if self._done.is_set():
            return self._step(args)
        if self._errors:
            with self._lock:
                errors, self._errors = self._errors, []
            for text in errors:
                warnings.warn(text, CompileWarning, stacklevel=user_stacklevel())
        start = time.perf_counter()
        slow = self._slow
        # (NumPy's floating-point warnings off: compiled kernels give the same inf and nan silently)
        with np.errstate(all="ignore"):
            if self._blas:   # (NumPy's BLAS governed as the compiled step's is: threads.py)
                with threads.Budget(slow is not None and self._step._parallel, True, numpy=True):
                    out = self._interp(args) if slow is None else self._step._run_step(slow, args)
            else:
                out = self._interp(args) if slow is None else self._step._run(slow, args)
        self._calls += 1
        self._slow_seconds += time.perf_counter() - start
        if not self._started and (self._calls >= COMPILE_AFTER_CALLS or self._slow_seconds >= COMPILE_AFTER_SECONDS):
            self._started = True
            arrays = [np.array(a) if isinstance(a, np.ndarray) else a for a in args]
            _COMPILER.submit(lambda: self._compile(arrays, background=True))
        return out

    def compile(self, args: Sequence) -> None:
        """Compile every unit now and wait (tk.jit(f).compile(*args)): later calls run compiled."""
        if self._done.is_set():
            return
        with self._lock:
            started, self._started = self._started, True
        if started:
            _COMPILER.wait()
            if self._done.is_set():
                return
        self._compile(list(args), background=False)
        if not self._done.is_set():
            raise RuntimeError(f"tracekern: the step could not be compiled: {'; '.join(self._errors)}")

    def _compile(self, args: list, background: bool) -> None:
        try:
            self.prepare()
            if self._slow is not None:
                self._compile_kernels(args)
                self.step._module = cache.load_module(self.step.driver)
            else:
                self.step.compile(args, warm=background)
            try:   # (before the tier says "compiled": a process that stops then has saved its plan)
                if self.on_compiled is not None:
                    self.on_compiled()
            finally:
                self._done.set()
        except Exception as err:
            text = "".join(traceback.format_exception_only(type(err), err)).strip()
            with self._lock:
                self._errors.append(f"tracekern: compiling a step in the background failed; it keeps running on "
                                    f"the NumPy tier (results are the same, slower). {text}")
            if not background:
                raise
            return
        try:   # (the last tier, where the step has one: cpu.COMPILED_DRIVER_CALLS; the compiled step runs meanwhile)
            self.step.compile_driver(args)
        except Exception as err:   # (said at once: the step is compiled, so no later call reports errors)
            text = "".join(traceback.format_exception_only(type(err), err)).strip()
            warnings.warn(f"tracekern: compiling a step's compiled driver failed; the step keeps running with its "
                          f"Python driver (results are the same). {text}", CompileWarning, stacklevel=2)

    def _compile_kernels(self, args: list) -> None:
        """Compile each kernel (in a compile worker where there is one, loading its machine code
        from the disk cache here) and rebind its name in the slow driver as soon as it is ready."""
        step = self.step
        jobs = step.kernel_jobs(args)   # [(unit index, signature)]
        modules = [cache.load_module(s) for s in step.modules[:-1]]
        left = {i: sum(1 for j, _ in jobs if j == i) for i in range(len(modules))}
        pool = workers.pool() if len(jobs) > 1 else []
        lock = threading.Lock()
        queue = list(jobs)
        failures: list[str] = []

        def ready(i: int) -> None:
            with lock:
                left[i] -= 1
                done = left[i] == 0
            if done:
                setattr(self._slow, f"K{i}", modules[i].kernel)
                if hasattr(modules[i], "kernel_exact"):
                    setattr(self._slow, f"K{i}x", modules[i].kernel_exact)
                self._switched.add(i)

        def take():
            with lock:
                return queue.pop(0) if queue else None

        def feed(worker) -> None:
            while (job := take()) is not None:
                i, sig = job
                source = step.modules[i]
                if not cache.on_disk(source):
                    err = worker.run(([source], "kernel", [sig]))
                    if err is not None:
                        failures.append(err)
                        continue
                    units.count_compiled(kernels=1)
                modules[i].kernel.compile(sig)   # (from the disk cache)
                ready(i)

        def here() -> None:
            while (job := take()) is not None:
                i, sig = job
                if not cache.on_disk(step.modules[i]):
                    units.count_compiled(kernels=1)
                modules[i].kernel.compile(sig)
                ready(i)

        feeders = [threading.Thread(target=feed, args=(w,), daemon=True) for w in pool]
        for t in feeders:
            t.start()
        if not feeders:
            here()
        for t in feeders:
            t.join()
        for i in range(len(modules)):
            if left[i] > 0 and not failures:   # (a unit no call site could type: compiled on its first call)
                setattr(self._slow, f"K{i}", modules[i].kernel)
                setattr(self._slow, f"K{i}x", getattr(modules[i], "kernel_exact", modules[i].kernel))
        if failures:
            raise RuntimeError(failures[0])
