"""The NumPy reference interpreter: runs a Graph equation by equation with each primitive's impl.

It is the oracle every compiled backend is tested against, so it checks every result's shape and
dtype against the IR and frees each intermediate after its last use. It is also the first tier of a
new cpu step (backends/tiers.py): kernel_function evaluates one fused kernel's equations with NumPy."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import IRError
from ..ir import Eqn, Graph, Var


def compile_graph(graph: Graph) -> Callable[[Sequence[np.ndarray]], list]:
    last_use: dict[Var, int] = {}
    for i, e in enumerate(graph.eqns):
        for v in e.inputs:
            last_use[v] = i
    keep = set(graph.outputs)
    frees = [[] for _ in graph.eqns]
    for v, i in last_use.items():
        if v not in keep:
            frees[i].append(v)
    plan = [(e, tuple(f)) for e, f in zip(graph.eqns, frees)]
    live = peak = 0
    for e, free in plan:  # bytes of intermediates and outputs alive at once (inputs are the caller's)
        live += sum(v.aval.nbytes for v in e.outputs)
        peak = max(peak, live)
        live -= sum(v.aval.nbytes for v in free if v not in graph.inputs)

    def run(args: Sequence[np.ndarray]) -> list:
        env: dict[Var, np.ndarray] = dict(zip(graph.inputs, args))
        for e, free in plan:
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
    return run


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
