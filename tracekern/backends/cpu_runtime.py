"""The cpu step at run time (no rendering): loading its modules, compiling the kernels the disk cache lacks
(typed from the call's arguments: _arg_spec, _arg_type), calling the driver under the thread budget, the exact-trig
re-run, the optional compiled driver (tk.config.compiled_drivers: compile_driver) and the progress line of a long
compile (PROGRESS_AFTER_S)."""
from __future__ import annotations

import bisect
import os
import sys
import sysconfig
import threading
import types
import weakref
from collections.abc import Sequence

import numba.core
import numpy as np
from numba import typeof
from numba._dispatcher import compute_fingerprint
from numba.core.errors import NumbaError
from numba.np.ufunc.parallel import _launch_threads

from ..ir import Graph, Var
from ..primitives.control import RevolveLayout
from ..settings import config
from . import bundles, cache, fusion, threads, units, workers
from .units import Unit


def _has_objmode(graph: Graph) -> bool:
    """Whether running a graph enters Python (tk.print, a while loop's run-time schedule): such a
    function cannot be nogil."""
    todo = [graph]
    while todo:
        g = todo.pop()
        for e in g.eqns:
            if e.primitive.name == "print" or (e.primitive.name == "scan_revolve" and RevolveLayout.of(e.params).while_loop):
                return True
            todo += [p for p in e.params.values() if isinstance(p, Graph)]
    return False


class CompiledStep:
    """A compiled graph: call it with a list of arrays, get a list of arrays."""

    def __init__(self, graph: Graph, plan: fusion.Plan, driver: str, deps: list[Unit], consts: list[np.ndarray],
                 lines: dict, flagged: bool = False, parallel: bool = False, jitted: bool = True,
                 calls: list | None = None, compiled_driver: str | None = None, arena: list | None = None):
        self.graph = graph
        self.plan = plan
        self.driver = driver
        self.modules = [u.source for u in deps] + [driver]   # in import order: kernels, then the driver
        self.peak_bytes = plan.peak_bytes
        self.units = len(deps)
        self.jitted = jitted      # the driver is an njit function (else plain Python calling the kernels)
        self._consts = consts
        self._lines = lines
        self._flagged = flagged   # step returns "redo with libm trig" first
        self._parallel = parallel
        self._calls = calls or []   # the step's own kernel calls: (module index, argument specs)
        self._module = None
        self._bundled = False   # the step's bundle was read, or written, in this process (backends/bundles.py)
        # an njit driver of the same calls (cpu._compiled_driver_pays), and its module once compiled: calls use it
        # from then on; `background_driver`: compiled in the background (tiers), not before the first call
        self.compiled_driver = compiled_driver
        self.background_driver = False
        self._fast = None
        # a plain-Python driver's buffers (cpu._Renderer.arena: (shape, dtype) of W[k]), kept between calls in
        # Workspaces; None: the driver is an njit function and allocates its own
        self.arena = arena
        self._arena_bytes = sum(int(np.prod(s)) * np.dtype(d).itemsize for s, d in arena or ())
        self._spare: list[Workspace] = []
        self._escaping: set[int] = set()   # slots whose buffer a call returned (made anew for every call)
        self._bound: dict[tuple, object] = {}   # (driver module, argument fingerprints) -> _entry_points' step
        self.straight = False   # the driver is plain Python calling every kernel itself (cpu.compile_graph)
        # unit index -> (values it reads, values it writes), where the tiers may run units one by one
        self.unit_kernels: dict[int, tuple] | None = None
        # the thread budget (backends/threads.py): only a step with prange loops or large GEMMs needs one
        self._blas = _gemm_macs(graph) >= threads.BLAS_MIN_MACS
        self._budgeted = parallel or self._blas

    @property
    def source(self) -> str:
        """The driver, then each kernel module it imports."""
        parts = [self.driver] + [f"# ---- {cache.module_path(s).name} ----\n{s}" for s in self.modules[:-1]]
        return "\n\n".join(parts)

    # pickles (tk.Staged.export) to its sources and constants: another process loads the modules
    # through its own disk cache, compiling what it lacks once
    portable = True

    def __setstate__(self, state: dict) -> None:
        # (a step pickled by an older tracekern lacks the attributes added since: their defaults)
        self.__dict__.update(dict(straight=False, arena=None, _arena_bytes=0, _spare=[], _escaping=set(), _bound={}),
                             **state)
        self._bundled = False

    def __getstate__(self) -> dict:
        return dict(self.__dict__, graph=None, plan=None, _module=None, _fast=None, unit_kernels=None, _spare=[], _bound={},
                    _lines=cache.portable_lines(self._lines))

    def compiled_on_disk(self) -> bool:
        """Whether the disk cache has the machine code of every kernel (and of an njit driver)."""
        return all(map(cache.on_disk, self._compiled_modules()))

    def _compiled_modules(self) -> list[str]:
        return self.modules[:-1] + (self.modules[-1:] if self.jitted else []) + [self.compiled_driver] * bool(self.compiled_driver)

    def _load(self, args: Sequence | None = None):
        if self._parallel:
            _launch_threads()   # (a driver loaded from the cache does not start Numba's threads itself)
        modules = bundles.load(self.modules, self._compiled_modules()) if not self._bundled else None
        self._bundled = modules is not None
        if modules is None:
            modules = [cache.load_module(s) for s in self.modules]
        if args is not None:
            self._precompile(modules, args)
        self._module = modules[-1]
        if args is not None and self.compiled_driver is not None and (
                not self.background_driver or cache.on_disk(self.compiled_driver)):
            self.compile_driver(args)
            return self._fast
        return self._module

    def compile_driver(self, args: Sequence) -> None:
        """Compile the step's compiled driver (if it has one) for these arguments' types, once its kernels are
        compiled (it links them), and run it from now on."""
        if self.compiled_driver is None or self._fast is not None:
            return
        on_disk = cache.on_disk(self.compiled_driver)
        module = cache.load_module(self.compiled_driver)
        module.step.compile(tuple(typeof(a) for a in list(args) + list(self._consts)))
        if not on_disk:
            units.count_compiled(drivers=1)
        self._fast = module

    def _entry_points(self, module, args: Sequence):
        """The driver's step (and step_exact) calling each kernel's compiled code for this call's argument
        types directly, past Numba's dispatcher (which types every argument of every call again: a
        tenth of a small step's time), where the driver is straight-line Python (every kernel call is
        in `step`). The first call with new argument types runs a version that records the types each
        kernel is called with (_Recorder); later calls with the same types, the kernels called with one
        signature through its entry point, the others through their dispatchers."""
        try:   # (and the strides of each array: a pinned view of a strided input, x[5:6], is C-contiguous or
            # not by them, not by the input's type)
            key = (module, tuple(map(compute_fingerprint, args)),
                   tuple(a.strides if isinstance(a, np.ndarray) else None for a in args))
        except Exception:   # (an argument the dispatchers type their own way: they do)
            return module
        bound = self._bound.get(key)
        if bound is None:
            if len(self._bound) >= BOUND_KEYS:   # (inputs of ever new strides: the dispatchers)
                return module
            bound = self._bound[key] = _Recorder(module)
        elif type(bound) is _Recorder and bound.done:
            bound = self._bound[key] = bound.bind()
        return bound

    def kernel_jobs(self, args: Sequence) -> list[tuple[int, tuple]]:
        """(unit index, Numba signature) of each distinct kernel call of the step, for the argument
        types this call passes."""
        jobs, seen = [], set()
        for index, specs in self._calls:
            try:
                sig = tuple(_arg_type(spec, args, self._consts) for spec in specs)
            except (ValueError, TypeError):   # (an argument Numba cannot type: the call will say so)
                continue
            if (index, sig) not in seen:
                seen.add((index, sig))
                jobs.append((index, sig))
        return jobs

    def compile(self, args: Sequence, warm: bool = False) -> None:
        """Compile everything the step runs now, for these arguments' types (tk.jit(f).compile(*args),
        the tiers' background compile): its kernels, then an njit driver. warm=True (a step whose graph
        prints nothing): also run it once on copies of args, which compiles what only a call reveals
        the types of (the functions of loops compiled whole, of branches)."""
        module = self._module or self._load(args)
        if warm and not _has_objmode(self.graph):
            self._run_step(module, [np.array(a) if isinstance(a, np.ndarray) else a for a in args])
        elif self.jitted:
            module.step.compile(tuple(typeof(a) for a in list(args) + list(self._consts)))
        if not self.background_driver:
            self.compile_driver(args)

    def _precompile(self, modules: list, args: Sequence) -> None:
        """Compile the kernels that the disk cache lacks before the first run, in parallel when
        there are many (backends/workers.py), for the argument types this call will pass."""
        missing = {i for i, s in enumerate(self.modules[:-1]) if not cache.on_disk(s)}
        # (typing every call's arguments costs about 50 us a call: a warm start, every kernel on disk, skips it)
        jobs = [(index, sig) for index, sig in self.kernel_jobs(args) if index in missing] if missing else []
        if jobs:
            timer = _progress_line(len(jobs))
            try:
                workers.compile_all([([self.modules[i]], "kernel", [sig]) for i, sig in jobs],
                                    lambda j: modules[jobs[j][0]].kernel.compile(jobs[j][1]))
            finally:
                if timer is not None:
                    timer.cancel()
            units.count_compiled(kernels=len(jobs))
        if self.jitted and not cache.on_disk(self.driver):
            units.count_compiled(drivers=1)

    def __call__(self, args: Sequence[np.ndarray]) -> list:
        try:
            module = self._fast or self._module or self._load(args)
            if module is self._module and self.straight:
                module = self._entry_points(module, args)
            out = self._run(module, args)
            if not self._bundled:   # (once a process: every function the step ran is compiled by now)
                self._bundled = True
                bundles.save(self.modules)
            return out
        except NumbaError as err:
            raise cache.located_error("cpu", err, self._lines, self.driver) from None
        except (ValueError, OSError, EOFError, AttributeError, ImportError) as err:
            if not _while_loading(err):
                raise   # (the step's own error: np.linalg.LinAlgError is a ValueError)
            # a damaged Numba cache entry fails while loading: discard it, compile once more
            for s in self.modules + [self.compiled_driver] * bool(self.compiled_driver):
                cache.discard(cache.module_path(s))
            try:
                return self._run(self._load(), args)
            except NumbaError as err2:
                raise cache.located_error("cpu", err2, self._lines, self.driver) from None

    def _run(self, module, args) -> list:
        if self._budgeted:
            with threads.Budget(self._parallel, self._blas):
                return self._run_step(module, args)
        return self._run_step(module, args)

    def _run_step(self, module, args) -> list:
        new = False
        if self.arena is None or module is self._fast:
            extra = ()
            if self._spare:   # (the compiled driver allocates its own: the Python driver's go)
                self._spare.clear()
        else:
            try:
                ws = self._spare.pop()
            except IndexError:   # (the first call, or another thread's call running with the spare)
                ws, new = Workspace(self), True
            ws.fresh(self)
            extra = (ws.arrays,)
        out = module.step(*args, *self._consts, *extra)
        if self._flagged:
            # (out[0]: a sin/cos/tan argument beyond the vectorised range: the libm variant)
            out = module.step_exact(*args, *self._consts, *extra) if out[0] else out[1:]
        if type(module) is _Recorder:
            # (a whole call recorded: every call site's types. Not before it returns: a call that raised
            # midway, or one another thread is still running, has not seen the sites after it, where a
            # kernel may be called with other types, and an entry point called with types it was not
            # compiled for computes garbage)
            module.done = True
        if extra and not config.keep_buffers:
            self._spare.clear()
        elif extra and self._arena_bytes <= WORKSPACE_KEEP_BYTES and len(self._spare) < 2:
            ws.returned(self, out)
            for k in self._escaping:   # (the caller's results: not kept alive here)
                ws.arrays[k] = None
            self._spare.append(ws)
            if new:
                _kept(self)
        return list(out)


_NUMBA_CORE = os.path.dirname(numba.core.__file__) + os.sep


def _while_loading(err: BaseException) -> bool:
    """Whether `err` was raised while the step's code was loaded (a generated module imported, Numba's
    cache read: its traceback passes through CompiledStep._load, backends/cache.py, numba.core or
    importlib), not by the step's run, whose compiled code leaves no frame of those."""
    tb = err.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if (code is CompiledStep._load.__code__ or code.co_filename == cache.__file__
                or code.co_filename.startswith(_NUMBA_CORE) or "importlib" in code.co_filename):
            return True
        tb = tb.tb_next
    return False


_TYPES: dict = {}   # Numba's type fingerprint of a value -> its Numba type (what the dispatchers' own cache does)


def _typeof(x):
    """numba.typeof(x), from its fingerprint where one was seen before (5x faster for an array)."""
    try:
        fp = compute_fingerprint(x)
    except Exception:   # (a value without a fingerprint: typed in full)
        return typeof(x)
    t = _TYPES.get(fp)
    if t is None:
        t = _TYPES[fp] = typeof(x)
    return t


class _Recorder:
    """A straight-line driver's step and step_exact run with each kernel K<i> (and K<i>x) wrapped to record
    the Numba types of its arguments (as its dispatcher types them); bind() then makes the namespace whose
    step calls the compiled entry point of each kernel that had one signature."""

    def __init__(self, module):
        self.module = module
        self.types: dict[str, set] = {}
        self.done = False
        names = dict(vars(module))
        for name, fn in vars(module).items():
            if name[:1] == "K" and hasattr(fn, "overloads"):
                names[name] = self._recording(name, fn)
        self.__dict__.update(vars(_with_names(module, names)))

    def _recording(self, name: str, fn):
        seen = self.types.setdefault(name, set())

        def call(*args):
            seen.add(tuple(map(_typeof, args)))
            return fn(*args)
        return call

    def bind(self) -> types.SimpleNamespace:
        module = self.module
        names = dict(vars(module))
        for name, seen in self.types.items():
            compiled = getattr(module, name).overloads.get(next(iter(seen))) if len(seen) == 1 else None
            if compiled is not None:
                names[name] = compiled.entry_point
        return _with_names(module, names)


def _with_names(module, names: dict) -> types.SimpleNamespace:
    """The driver module's step (and step_exact) reading their globals from `names` instead."""
    return types.SimpleNamespace(**{f: types.FunctionType(getattr(module, f).__code__, names, f)
                                    for f in ("step", "step_exact") if hasattr(module, f)})


def _kept(step: CompiledStep) -> None:
    """A step has kept a new workspace: drop those of the steps that kept theirs longest ago while all the
    kept workspaces hold more than KEPT_TOTAL_BYTES (a step that loses its own allocates a new one on its
    next call, and keeps it: the order is that of the workspaces' making)."""
    _KEPT.pop(id(step), None)
    _KEPT[id(step)] = weakref.ref(step)
    live = [(k, r()) for k, r in list(_KEPT.items())]
    total = sum(_held_bytes(s) for _, s in live if s is not None)
    for k, s in live:
        if total <= KEPT_TOTAL_BYTES or s is step:
            break
        _KEPT.pop(k, None)
        if s is not None:
            total -= _held_bytes(s)
            s._spare.clear()


def _held_bytes(step: CompiledStep) -> int:
    """What a step's kept workspaces may hold: each its buffers and up to POOL_DEPTH of its results' buffers."""
    results = sum(int(np.prod(step.arena[k][0])) * np.dtype(step.arena[k][1]).itemsize for k in step._escaping)
    return (step._arena_bytes + POOL_DEPTH * results) * len(step._spare)


# the steps holding kept workspaces (id -> weak reference), the one that made its workspace longest ago first
_KEPT: dict[int, weakref.ref] = {}
# all steps' kept workspaces together hold at most this many bytes (one function called on many shapes is a
# step per shape, each keeping up to WORKSPACE_KEEP_BYTES)
KEPT_TOTAL_BYTES = 1 << 28


# A plain-Python driver's buffers (at most this many bytes in all) stay allocated between its calls: a small
# step's np.empty calls were a fifth of its time (the hand model's jacfwd: 154 a call, 0.37 -> 0.29 ms), and
# a mid-sized step's fresh pages fault on first write (its jacrev, 15 MiB of buffers: 7.3 -> 4.2 ms). Larger
# steps allocate them anew every call, as their arithmetic dwarfs it (README "Jacobians").
WORKSPACE_KEEP_BYTES = 1 << 25
# a straight-line step binds entry points (_entry_points) for at most this many argument types and strides;
# further ones (a strided input of ever new strides) call the kernels through their dispatchers
BOUND_KEYS = 32


_LEARNING = threading.Lock()   # Workspace.returned's update of a step's escaping slots


def _refs(pool: list, i: int) -> int:
    return sys.getrefcount(pool[i])


# a buffer that nothing but its pool holds: _refs of it, measured on every call beside the pools' (not assumed:
# the interpreter's own references while it evaluates are its business, and may change as it specialises)
_SENTINEL = [np.empty(0)]
_UNHELD = _refs(_SENTINEL, 0)
# a free-threaded interpreter's reference counts are not exact: no pools there
_POOLS = not sysconfig.get_config_var("Py_GIL_DISABLED") and getattr(sys, "_is_gil_enabled", lambda: True)()
# results' buffers a slot keeps for reuse: two, as a loop `loss, grads = step(params, x)` still holds the last
# call's results while it makes the next call
POOL_DEPTH = 2


class Workspace:
    """One call's buffers of a plain-Python driver (W: CompiledStep.arena), kept for its next call. A slot
    whose buffer a call returns (an output, or a view of one) is never used again while anything holds it:
    the slot is learned, emptied when the call returns (the caller's result is not kept alive by the
    workspace) and, before every later call, given a buffer nothing else references: one of the last
    POOL_DEPTH it handed out, if the caller has dropped every array that uses it (the others it dropped are
    freed then: a slot holds at most one buffer beyond those the caller holds), or a new one. The caller
    gets a view of the pooled buffer (its own object, which it alone holds: a weak reference to a result
    dies with it), so no result a caller holds, or any view of one, is ever overwritten. Reusing the
    memory spares each call glibc's fresh pages (a result of some MiB: mmap, page faults, munmap, or a
    heap trimmed and grown again every call): the 4-block transformer's quick step 20 -> 14 ms."""

    __slots__ = ("arrays", "_bounds", "_known", "_kept_ids", "_pools", "_pooled")

    def __init__(self, step: CompiledStep):
        escaping = step._escaping   # (their buffers come from fresh(), before every call)
        self.arrays = [None if k in escaping else np.empty(shape, dtype) for k, (shape, dtype) in enumerate(step.arena)]
        self._bounds: list[tuple[int, int, int]] = []
        self._known = None
        self._kept_ids: set[int] = set()
        self._pools: dict[int, list] = {}
        self._pooled: set[int] = set()   # ids of the pools' buffers (a result that is a view of one overlaps no kept buffer)

    def fresh(self, step: CompiledStep) -> None:
        """Buffers nothing references in the slots the step's calls return."""
        unheld = _refs(_SENTINEL, 0)
        for k in step._escaping:
            self.arrays[k] = self._unheld(k, step.arena[k], unheld)

    def _unheld(self, k: int, spec: tuple, unheld: int):
        pool = self._pools.get(k)
        if pool is None:
            pool = self._pools[k] = []
        free = [i for i in range(len(pool)) if _refs(pool, i) == unheld]
        if free:
            buf = pool[free[0]]
            for i in reversed(free[1:]):
                self._pooled.discard(id(pool.pop(i)))   # (at most one buffer nothing holds stays beyond those the caller holds: freed)
            return buf.view()
        buf = np.empty(*spec)
        if not _POOLS:
            return buf
        pool.append(buf)
        self._pooled.add(id(buf))
        if len(pool) > POOL_DEPTH:
            self._pooled.discard(id(pool.pop(0)))   # (the oldest: a caller still holds it, and keeps it alive alone)
        return buf.view()

    def returned(self, step: CompiledStep, outs) -> None:
        """Learn the slots whose memory these outputs use (an output's data pointer inside a buffer)."""
        if self._known is not step._escaping:
            self._known = step._escaping
            at = [a.__array_interface__["data"][0] for a in self.arrays]
            self._bounds = sorted((at[k], at[k] + a.nbytes, k) for k, a in enumerate(self.arrays)
                                  if k not in step._escaping and a.nbytes)
            self._kept_ids = {id(self.arrays[k]) for _, _, k in self._bounds}
        found = set()
        for o in outs:
            if not isinstance(o, np.ndarray) or not o.size or not self._bounds:
                continue
            base = o.base
            if id(o) not in self._kept_ids if base is None else id(base) in self._pooled:
                continue   # (an array of its own that is no kept buffer, or a view of a pooled one: it overlaps none)
            at = o.__array_interface__["data"][0]
            j = bisect.bisect_right(self._bounds, (at, float("inf"), 0)) - 1
            if j >= 0 and self._bounds[j][0] <= at < self._bounds[j][1]:
                k = self._bounds.pop(j)[2]   # (learned: another output in the same buffer needs no search)
                self._kept_ids.discard(id(self.arrays[k]))
                found.add(k)
        if found:   # (a new set: the step's other Workspaces see the change and learn their bounds again)
            with _LEARNING:   # (two threads learning at once: neither's slots lost)
                step._escaping = self._known = step._escaping | found


# A compile the caller waits for (tiers=False, .compile(), a loop step's first call) that takes longer
# than this says so on stderr, once; a background compile (the tiers') never does.
PROGRESS_AFTER_S = 1.0


def _progress_line(kernels: int) -> threading.Timer | None:
    if threading.current_thread() is not threading.main_thread():
        return None
    message = (f"tracekern: compiling {kernels} kernel{'s' if kernels != 1 else ''} before this call returns "
               "(with tiers on, the default, a new program runs at once on NumPy while it compiles)")
    timer = threading.Timer(PROGRESS_AFTER_S, lambda: print(message, file=sys.stderr, flush=True))
    timer.daemon = True
    timer.start()
    return timer


def _gemm_macs(graph: Graph) -> int:
    """The multiply-adds of the largest float matmul in the graph and its sub-graphs (loop bodies, branches)."""
    most, todo = 0, [graph]
    while todo:
        g = todo.pop()
        for e in g.eqns:
            if e.primitive.name == "matmul" and e.outputs[0].dtype.kind == "f":
                most = max(most, e.outputs[0].aval.size * e.inputs[0].shape[-1])
            todo += [p for p in e.params.values() if isinstance(p, Graph)]
    return most


def _arg_spec(v: Var, how: bool | tuple, inputs: dict, consts: dict) -> tuple:
    """How a driver passes v to a kernel: an argument of the step, a constant, or a buffer it made
    (with the view it passes: see view())."""
    if v in inputs:
        return ("input", inputs[v], how)
    if v in consts:
        return ("const", consts[v], how)
    return ("buffer", v.dtype.str, tuple(v.shape), how)


def pinned_view(x: np.ndarray, pins: tuple) -> np.ndarray:
    """The view of x that cpu_kernels.view(pins) gives."""
    return x[tuple(slice(None) if c is None else slice(c, c + 1) for c in pins)] if pins else x


def _arg_type(spec: tuple, args: Sequence, consts: list):
    """The Numba type of a kernel argument, as the driver will pass it."""
    kind, what, how = spec[0], spec[1], spec[-1]
    if kind == "input":
        x = args[what]
    elif kind == "const":
        x = consts[what]
    else:   # (a C-contiguous buffer of that shape: its strides, without its memory)
        shape, dtype = spec[2], np.dtype(what)
        strides = [dtype.itemsize] * len(shape)
        for a in range(len(shape) - 2, -1, -1):
            strides[a] = strides[a + 1] * max(shape[a + 1], 1)
        x = np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape, strides)
    if how is True:   # .T of a 2-D array
        t = typeof(x)
        return t.copy(layout={"C": "F", "F": "C"}.get(t.layout, "A"))
    return typeof(pinned_view(x, how))
