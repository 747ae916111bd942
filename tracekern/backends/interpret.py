"""The NumPy reference interpreter: runs a Graph equation by equation with each primitive's impl.

It is the oracle every compiled backend is tested against, so it checks every result's shape and
dtype against the IR and frees each intermediate after its last use."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..errors import IRError
from ..ir import Graph, Var


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
