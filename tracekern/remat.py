"""Which values the forward pass saves for the backward pass, and which the backward recomputes.

Cheap elementwise values (elementwise, view and constant equations) are recomputed in the backward
pass from the values they are made of whenever saving those instead moves fewer bytes: for
memory-bound code a recompute inside the backward's fused loops is faster than a round trip
through memory. Matmul and reduction outputs are the expensive ones and stay saved."""
from __future__ import annotations

from collections.abc import Sequence

from .ir import Eqn, Var

_CHEAP = ("elementwise", "view", "fill", "const")


def choose_residuals(fwd_eqns: Sequence[Eqn], residuals: Sequence[Var]) -> tuple[list[Var], list[Eqn]]:
    """(values to save, forward equations the backward re-runs, in forward order)."""
    producer = {v: e for e in fwd_eqns for v in e.outputs}

    def cheap(v: Var) -> bool:
        e = producer.get(v)
        return e is not None and e.primitive.fusion in _CHEAP and not e.primitive.effectful

    candidates = [v for v in residuals if cheap(v)]
    if not candidates:
        return list(residuals), []
    recompute: set[Eqn] = set()
    leaves: list[Var] = []
    seen: set[Var] = set()
    stack = list(candidates)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if cheap(v):
            e = producer[v]
            recompute.add(e)
            stack.extend(e.inputs)
        else:
            leaves.append(v)
    kept = [v for v in residuals if not cheap(v)]
    kept_set = set(kept)
    new = kept + [v for v in leaves if v not in kept_set]
    if sum(v.aval.nbytes for v in new) >= sum(v.aval.nbytes for v in residuals):
        return list(residuals), []
    return new, [e for e in fwd_eqns if e in recompute]
