"""Which values the forward pass saves for the backward pass, and which the backward recomputes.

Cheap elementwise values (elementwise, view and constant equations) are recomputed in the backward
pass from the values they are made of whenever saving those instead moves fewer bytes: for
memory-bound code a recompute inside the backward's fused loops is faster than a round trip
through memory. Matmul and reduction outputs are the expensive ones and stay saved. A tk.recompute
region made only of cheap equations is cheap too: its inputs need not be saved either when what
they are made of is smaller."""
from __future__ import annotations

from collections.abc import Sequence

from .ir import Eqn, Var

_CHEAP = ("elementwise", "view", "fill", "const")


def cheap(e: Eqn) -> bool:
    """Whether the backward pass may re-run `e` instead of the forward saving its outputs."""
    from .primitives.annotations import recompute_call

    if e.primitive.effectful:
        return False
    if e.primitive is recompute_call:
        return all(cheap(b) for b in e.params["body"].eqns)
    return e.primitive.fusion in _CHEAP


def choose_residuals(fwd_eqns: Sequence[Eqn], residuals: Sequence[Var]) -> tuple[list[Var], list[Eqn]]:
    """(values to save, forward equations the backward re-runs, in forward order)."""
    producer = {v: e for e in fwd_eqns for v in e.outputs}

    def cheap_value(v: Var) -> bool:
        e = producer.get(v)
        return e is not None and cheap(e)

    candidates = [v for v in residuals if cheap_value(v)]
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
        if cheap_value(v):
            e = producer[v]
            recompute.add(e)
            stack.extend(e.inputs)
        else:
            leaves.append(v)
    kept = [v for v in residuals if not cheap_value(v)]
    kept_set = set(kept)
    new = kept + [v for v in leaves if v not in kept_set]
    if sum(v.aval.nbytes for v in new) >= sum(v.aval.nbytes for v in residuals):
        return list(residuals), []
    return new, [e for e in fwd_eqns if e in recompute]
