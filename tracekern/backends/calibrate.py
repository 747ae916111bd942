"""The memory planner's cost figures for this machine (remat.CostModel's fields), measured once with
the cpu backend's own kernels and kept in the cache directory as calibration-<digest>.json.

Measured, each as the best of several runs, with the loop kernels the cpu backend generates (called
directly, compiled in parallel like a step's): the time per element of each transcendental and of
the random bits beyond a plain copy (serial loops, divided by Numba's threads: large loops run in
parallel); the same for plain arithmetic (a chain of adds and multiplies); per byte of a saved
value (a parallel step that reads an array and writes a new one moves its bytes twice, as saving
does: written in the forward, read back in the backward); and per matmul flop (the cpu backend's
BLAS matmul). libm's scalar functions are timed once (arctan) for all of them. The digest covers
the math modules, the versions and the machine: a change of any of them measures again (about
5 s). TRACEKERN_CALIBRATE=0 skips the measurement: the model's defaults are used."""
from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import time
import uuid

import numba
import numpy as np

from ..ir import Aval, Eqn, Graph, Var
from ..primitives import REGISTRY
from . import cache, cpu, cpu_kernels, cpu_math, cpu_runtime, fusion, render, scalar_rules, units, vmath, workers

VECTORISED = ("exp", "log", "log1p", "expm1", "tanh", "sin", "cos", "tan", "sqrt")
LIBM = tuple(cpu_math.LIBM)             # timed once, as arctan
BINARY = ("div", "pow")
ELEMENTS = 1 << 15                      # per-element loops: serial, in cache
SAVED_BYTES = 32 << 20
MATMUL = 384
CHAIN = 16


def _digest() -> str:
    machine = f"{platform.machine()} {platform.processor()} {os.cpu_count()} {numba.config.NUMBA_NUM_THREADS}"
    salt = units.salt(cpu_math, vmath, scalar_rules, render, cpu_math.random_primitives)
    return cache.source_digest(f"{salt} {machine} {ELEMENTS} {SAVED_BYTES} {MATMUL} {CHAIN}")[:24]


@functools.cache
def cost_table() -> dict:
    """remat.CostModel's fields: read from the cache directory, or measured now and written there.
    One table per cache directory and digest, whoever measures it: processes that start together on
    an empty cache measure one at a time (a lock file beside it: the others wait, then read the
    first one's table), and a table is never replaced (written only where none exists), since the
    planner's choices, and so the kernels of every plan, follow from it: two tables would make two
    sets of kernels for one program (every process after the second writer compiling again)."""
    if os.environ.get("TRACEKERN_CALIBRATE", "1") == "0":
        return {"origin": "defaults (TRACEKERN_CALIBRATE=0)"}
    path = cache.cache_dir() / f"calibration-{_digest()}.json"
    table = _read(path)
    if table is not None:
        return table
    with _locked(path.with_name(path.name + ".lock")):
        table = _read(path)   # (measured by the process that held the lock before)
        if table is not None:
            return table
        table = measure()
        tmp = path.with_name(f".tmp_{uuid.uuid4().hex[:16]}.json")
        try:
            with os.fdopen(cache.new_file(tmp), "w") as f:
                json.dump(table, f, indent=1)
            try:
                os.link(tmp, path)   # (never over another table: without a lock, another process may have written one)
            except FileExistsError:
                table = _read(path) or table
            except OSError:   # (no hard links here: a rename)
                os.replace(tmp, path)
        except OSError:
            pass   # (not cached: the next process measures again)
        finally:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return table


_FIELDS = ("per_element", "arithmetic", "per_byte", "per_flop", "origin")


def _read(path) -> dict | None:
    try:
        table = json.loads(path.read_text())
        return {k: table[k] for k in _FIELDS}
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def _locked(path):
    """An exclusive lock on the file `path` (made if needed) while the block runs, where the system has
    POSIX file locks (fcntl); no lock otherwise: where the file cannot be made or the file system
    refuses locks (some network file systems), each process measures as before the lock existed."""
    try:
        import fcntl
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    except (ImportError, OSError):
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass   # (no lock here: the table is still written only where none exists)
        yield
    finally:
        os.close(fd)   # (releases the lock)


def _var(shape, dtype=np.float32) -> Var:
    return Var(Aval(tuple(shape), np.dtype(dtype)))


class _Loop:
    """One graph's single loop kernel as a unit, and the arrays it is called with."""

    def __init__(self, inputs, eqns, outputs, args):
        plan = fusion.plan(Graph(tuple(inputs), tuple(eqns), tuple(outputs)))
        (kernel,) = plan.kernels
        self.unit = cpu_kernels._LoopUnit(kernel).unit()
        given = dict(zip(inputs, args))
        self.args = [cpu_runtime.pinned_view(given[v], pins) if v in given else np.empty(v.shape, v.dtype)
                     for v, pins in cpu_kernels.loop_params(kernel)]
        self.signature = tuple(numba.typeof(a) for a in self.args)

    def compile(self) -> None:
        cache.load_module(self.unit.source).kernel.compile(self.signature)

    def time(self, calls: int = 30) -> float:
        return _best(cache.load_module(self.unit.source).kernel, self.args, calls, star=True)


def _best(fn, args, calls: int = 15, star: bool = False) -> float:
    """The fastest of `calls` calls after a warm-up: on a shared machine, a slow call is another
    process's doing, not the kernel's."""
    fn(*args) if star else fn(args)
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn(*args) if star else fn(args)
        best = min(best, time.perf_counter() - t0)
    return best


def measure() -> dict:
    """Time the kernels (see the module docstring); seconds."""
    # matmul first: BLAS's threads run before any parallel loop has started Numba's
    k = MATMUL
    p, q, r = _var((k, k)), _var((k, k)), _var((k, k))
    mm = cpu.compile_graph(Graph((p, q), (Eqn(REGISTRY["matmul"], (p, q), (r,), {}),), (r,)))
    per_flop = _best(mm, [np.ones((k, k), np.float32)] * 2, calls=40) / (2.0 * k ** 3)

    n = ELEMENTS
    x, z = _var((n,)), _var((n,))
    inside = np.linspace(0.05, 0.95, n, dtype=np.float32)       # every function's domain but arccosh's
    above = (inside + 1.5).astype(np.float32)

    def unary(name, arg):
        y = _var((n,))
        return _Loop([x], [Eqn(REGISTRY[name], (x,), (y,), {})], [y], [arg])

    loops = {"copy": unary("neg", inside)}
    loops.update((name, unary(name, inside)) for name in VECTORISED + ("arctan",))
    for name in BINARY:
        y = _var((n,))
        loops[name] = _Loop([x, z], [Eqn(REGISTRY[name], (x, z), (y,), {})], [y], [inside, above])
    key, pos, bits = _var((), np.int64), _var((n,), np.int64), _var((n,), np.int64)
    loops["random_bits"] = _Loop([key], [Eqn(REGISTRY["iota"], (), (pos,), {"shape": (n,)}),
                                         Eqn(REGISTRY["random_bits"], (key, pos), (bits,), {"bits": 32})],
                                 [bits], [np.asarray(7, np.int64)])
    chain, v = [], x
    for j in range(CHAIN):
        w = _var((n,))
        chain.append(Eqn(REGISTRY["mul" if j % 2 else "add"], (v, z), (w,), {}))
        v = w
    loops["arithmetic"] = _Loop([x, z], chain, [v], [inside, inside])
    m = SAVED_BYTES // 4
    a, b = _var((m,)), _var((m,))
    loops["saved"] = _Loop([a], [Eqn(REGISTRY["neg"], (a,), (b,), {})], [b], [np.ones(m, np.float32)])
    jobs = list(loops.values())
    workers.compile_all([([j.unit.source], "kernel", [j.signature]) for j in jobs], lambda i: jobs[i].compile())

    threads = max(1, numba.config.NUMBA_NUM_THREADS)
    base = loops["copy"].time()

    def per_element(name: str, count: int = 1) -> float:
        return max(loops[name].time() - base, 0.0) / (n * count * threads)

    elements = {name: per_element(name) for name in VECTORISED + BINARY + ("random_bits",)}
    elements.update((name, per_element("arctan")) for name in LIBM)
    saved = loops["saved"].time(calls=8)
    return {"per_element": elements, "arithmetic": per_element("arithmetic", CHAIN),
            "per_byte": saved / (2.0 * SAVED_BYTES), "per_flop": per_flop,
            "origin": f"measured {time.strftime('%Y-%m-%d %H:%M')} on {platform.node() or 'this machine'}"}
