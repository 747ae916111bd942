"""The NumPy reference interpreter: runs a Graph equation by equation with each primitive's impl.

It is the oracle every compiled backend is tested against, so it checks every result's shape and
dtype against the IR and frees each intermediate after its last use. It is also the first tier of a
new cpu step (backends/tiers.py): kernel_function evaluates one fused kernel's equations with NumPy."""
from __future__ import annotations

import heapq
import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import IRError
from ..ir import Eqn, Graph, Var
from ..primitives.elementwise import Elementwise


def compile_graph(graph: Graph, threads: Callable[[], int] | None = None) -> Callable[[Sequence[np.ndarray]], list]:
    """run(arrays) -> arrays: the graph, equation by equation. With `threads` (the cpu tiers' NumPy
    tier; never the oracle), each run of elementwise equations over large arrays is evaluated a
    block of rows at a time, on up to threads() threads (_Run)."""
    eqns = graph.eqns if threads is None else _grouped(graph.eqns)
    last_use: dict[Var, int] = {}
    for i, e in enumerate(eqns):
        for v in e.inputs:
            last_use[v] = i
    keep = set(graph.outputs)
    frees = [[] for _ in eqns]
    for v, i in last_use.items():
        if v not in keep:
            frees[i].append(v)
    plan = [(e, tuple(f)) for e, f in zip(eqns, frees)]
    live = peak = 0
    for e, free in plan:  # bytes of intermediates and outputs alive at once (inputs are the caller's)
        live += sum(v.aval.nbytes for v in e.outputs)
        peak = max(peak, live)
        live -= sum(v.aval.nbytes for v in free if v not in graph.inputs)
    if threads is not None:
        plan = _blocked(plan, keep, last_use, threads)

    def run(args: Sequence[np.ndarray]) -> list:
        env: dict[Var, np.ndarray] = dict(zip(graph.inputs, args))
        for e, free in plan:
            if type(e) is _Run:
                e(env)
                for v in free:
                    del env[v]
                continue
            out = e.primitive.impl(*[env[v] for v in e.inputs], **e.params)
            outs = out if e.primitive.multiple_results else (out,)
            for v, o in zip(e.outputs, outs):
                o = np.asarray(o)
                if o.shape != v.aval.shape or o.dtype != v.aval.dtype:
                    raise IRError(f"interpret: {e.primitive.name} produced {o.dtype}{list(o.shape)}, "
                                  f"the IR says {v.aval} (from {e.source})")
                env[v] = o
            for v in free:
                del env[v]
        # results never share memory with the caller's arguments or the graph's constants (a view such
        # as x[1:] or x.T, or an input returned as it is): copied, as the compiled backends' are
        return [o if o.flags.owndata and not any(o is a for a in args) and id(o) not in const_ids else np.array(o)
                for o in (env[v] for v in graph.outputs)]

    const_ids = {id(e.params["value"]) for e in graph.eqns if e.primitive.fusion == "const"}
    run.source = None  # nothing is generated: the IR itself is what runs
    run.peak_bytes = peak
    run.plan = plan    # (equations and their frees; with threads, the blocked runs among them)
    return run


# -- blocked runs (the NumPy tier) -----------------------------------------------------------------------

# an elementwise equation whose output has at least this many values is evaluated in blocks of about
# BLOCK values (rows of its first axis): unblocked, each equation is a pass over memory (74 passes over
# 16 MB for W1's value and gradient); in blocks, a run's temporaries stay in the CPU's cache
BLOCKED_MIN = 1 << 18
BLOCK = 1 << 15
_POOL: list[ThreadPoolExecutor] = []   # the blocked runs' threads, one a core (a run submits threads() tasks)


def _blockable(e: Eqn) -> bool:
    """A NumPy ufunc of its operands alone (no position, no parameters) with a large output, whose
    operands are arrays of the output's shape, or scalars or rows broadcast to it (_whole_or_row)."""
    p = e.primitive
    if type(p).impl is not Elementwise.impl or p.ufunc is None or p.numpy_impl is not None or len(e.outputs) != 1:
        return False
    shape = e.outputs[0].aval.shape
    return e.outputs[0].aval.size >= BLOCKED_MIN and all(_whole_or_row(v.aval.shape, shape) for v in e.inputs)


def _whole_or_row(operand: tuple, shape: tuple) -> bool:
    """An operand a block of rows can read: of the output's shape (sliced), or broadcast to it
    without its first axis (a scalar, a row: read whole by every block)."""
    if operand in (shape, ()):
        return True
    if len(operand) > len(shape) or (len(operand) == len(shape) and operand[0] != 1):
        return False
    try:
        return np.broadcast_shapes(operand, shape) == shape
    except ValueError:
        return False


class _Run:
    """Consecutive blockable equations of one output shape, evaluated a block of rows at a time on up
    to threads() threads: the values read from before the run come in whole and are sliced, the
    values used after it (`outputs`) are written into whole arrays, the others live one block at a
    time. Each element is computed by the same ufunc from the same operands as unblocked (NumPy's
    SIMD loops may round an element at a block's edge as their scalar tail does: within an ulp)."""

    def __init__(self, eqns: list[Eqn], outputs: list[Var], threads: Callable[[], int]):
        self.eqns = eqns
        self.shape = eqns[0].outputs[0].aval.shape
        made = {e.outputs[0] for e in eqns}
        self.reads = list(dict.fromkeys(v for e in eqns for v in e.inputs if v not in made))
        self.outputs = outputs
        self.threads = threads
        self.rows = max(1, BLOCK // max(1, math.prod(self.shape[1:])))
        # a block's values made here are dropped after their last use in it: the next ones reuse their
        # memory, still in the CPU's cache (a run of 70 equations kept 70 blocks alive, beyond the cache)
        last = {v: k for k, e in enumerate(eqns) for v in e.inputs if v in made}
        self.drops = [tuple(dict.fromkeys(v for v in e.inputs if v in made and last[v] == k and v not in outputs))
                      for k, e in enumerate(eqns)]

    def __call__(self, env: dict) -> None:
        outs = {v: np.empty(self.shape, v.aval.dtype) for v in self.outputs}
        whole = [(v, env[v], env[v].shape == self.shape) for v in self.reads]
        eqns = [(e.primitive.ufunc, e.inputs, e.outputs[0], outs.get(e.outputs[0]), drop)
                for e, drop in zip(self.eqns, self.drops)]
        errors = np.geterr()   # (the caller's: NumPy keeps them per thread)
        starts = list(range(0, self.shape[0], self.rows))

        def blocks(mine: list[int]) -> None:
            with np.errstate(**errors):
                for lo in mine:
                    hi = min(lo + self.rows, self.shape[0])
                    local = {v: a[lo:hi] if sliced else a for v, a, sliced in whole}
                    for ufunc, ins, out, kept, drop in eqns:
                        args = [local[v] for v in ins]
                        local[out] = ufunc(*args) if kept is None else ufunc(*args, out=kept[lo:hi])
                        for v in drop:
                            del local[v]
                        del args

        n = min(self.threads(), len(starts))
        if n > 1:
            list(_pool().map(blocks, [starts[k::n] for k in range(n)]))
        else:
            blocks(starts)
        for v, a in outs.items():
            env[v] = a


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="tracekern-numpy"))
    return _POOL[0]


_POOL_LOCK = threading.Lock()


def _grouped(eqns: Sequence[Eqn]) -> list[Eqn]:
    """The equations in an order that keeps runs of blockable equations of one shape together (each
    run is evaluated block by block, its temporaries never whole arrays): each equation after those it
    reads, and of those ready, first one that reads and makes only small values (a constant, a
    scalar's reshape, or a view of one: a broadcast), then a blockable one of the run being made, else
    the first in program order. W1's value and gradient was two runs, forward and backward, split by
    the forward's sum (which the backward does not read) and by its constants: 16 forward values went
    through memory whole. Without a large blockable equation, or with an effect, the program's order."""
    if not any(_blockable(e) for e in eqns) or any(e.primitive.has_effects(**e.params) for e in eqns):
        return list(eqns)   # (effects, a print, run in program order)
    made = {v: i for i, e in enumerate(eqns) for v in e.outputs}
    users: list[list[int]] = [[] for _ in eqns]
    waiting = [0] * len(eqns)
    for i, e in enumerate(eqns):
        for j in {made[v] for v in e.inputs if v in made}:
            users[j].append(i)
            waiting[i] += 1
    small = [not _blockable(e) and all(v.aval.size < BLOCKED_MIN for v in e.inputs)
             and (e.primitive.fusion == "view" or all(v.aval.size < BLOCKED_MIN for v in e.outputs)) for e in eqns]
    block = [_blockable(e) for e in eqns]
    ready: dict[str, list[int]] = {"small": [], "other": []}
    runs: dict[tuple, list[int]] = {}   # (shape) -> blockable equations ready

    def push(i: int) -> None:
        if small[i]:
            heapq.heappush(ready["small"], i)
        else:
            heapq.heappush(ready["other"], i)
            if block[i]:
                heapq.heappush(runs.setdefault(eqns[i].outputs[0].aval.shape, []), i)

    for i in range(len(eqns)):
        if not waiting[i]:
            push(i)
    order: list[Eqn] = []
    done = [False] * len(eqns)
    shape = None
    while len(order) < len(eqns):
        if ready["small"]:
            i = heapq.heappop(ready["small"])
        else:
            same = runs.get(shape, [])
            while same and done[same[0]]:
                heapq.heappop(same)
            other = ready["other"]
            while other and done[other[0]]:
                heapq.heappop(other)
            i = heapq.heappop(same) if same else heapq.heappop(other)
            shape = eqns[i].outputs[0].aval.shape if block[i] else None
        done[i] = True
        order.append(eqns[i])
        for j in users[i]:
            waiting[j] -= 1
            if not waiting[j]:
                push(j)
    return order


def _blocked(plan: list, keep: set, last_use: dict, threads: Callable[[], int]) -> list:
    """The interpreter's plan with each run of at least two blockable equations of one shape as a _Run."""
    out: list = []
    i = 0
    while i < len(plan):
        e, free = plan[i]
        j = i
        if _blockable(e):
            shape = e.outputs[0].aval.shape
            while j + 1 < len(plan) and _blockable(plan[j + 1][0]) and plan[j + 1][0].outputs[0].aval.shape == shape:
                j += 1
        if j == i:
            out.append((e, free))
            i += 1
            continue
        made = {plan[k][0].outputs[0] for k in range(i, j + 1)}
        # made here and needed after the run: by a later equation, or as the graph's output
        outputs = [v for v in made if v in keep or last_use.get(v, -1) > j]
        frees = tuple(v for k in range(i, j + 1) for v in plan[k][1] if v not in made)
        out.append((_Run([plan[k][0] for k in range(i, j + 1)], outputs, threads), frees))
        i = j + 1
    return out


def kernel_function(producer: dict[Var, Eqn], reads: Sequence[Var], writes: Sequence[Var]) -> Callable[..., bool]:
    """The NumPy evaluation of one kernel of a fusion plan, interchangeable with its compiled unit:
    fn(*read arrays, *write buffers) computes each written value from the values read (the equations
    between them, found through `producer`, each with its primitive's impl), fills the buffers and
    returns False (the unit's "a sin/cos/tan argument needed libm" flag: NumPy's are libm's)."""
    stop = set(reads)
    order: list[Eqn] = []
    seen: set[int] = set()
    todo: list[tuple[Var, bool]] = [(v, False) for v in reversed(writes)]
    while todo:   # post-order: each equation after those it reads
        v, expanded = todo.pop()
        if v in stop:
            continue
        e = producer.get(v)
        if e is None:
            raise IRError(f"interpret: a kernel writes {v.aval}, which depends on a value it does not read")
        if id(e) in seen:
            continue
        if expanded:
            seen.add(id(e))
            order.append(e)
            continue
        todo.append((v, True))
        todo += [(u, False) for u in reversed(e.inputs) if u not in stop and id(producer.get(u)) not in seen]
    n = len(reads)

    def run(*arrays) -> bool:
        env: dict[Var, np.ndarray] = dict(zip(reads, arrays[:n]))
        for e in order:
            out = e.primitive.impl(*[env[v] for v in e.inputs], **e.params)
            for v, o in zip(e.outputs, out if e.primitive.multiple_results else (out,)):
                env[v] = o
        for v, buf in zip(writes, arrays[n:]):
            buf[...] = env[v]
        return False

    return run
