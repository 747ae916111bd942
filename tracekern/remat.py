"""What the forward pass saves for the backward pass and what the backward recomputes: the recompute
policies of tk.recompute, the split of a joint graph into tk.vjp's two halves, and the residual choice.

Cheap values (elementwise, view and constant equations) are recomputed in the backward pass from the
values they are made of whenever saving those instead moves fewer bytes: for memory-bound code a
recompute inside the backward's fused loops is faster than a round trip through memory. Matmul and
reduction outputs are the expensive ones and stay saved. A tk.recompute region made only of cheap
equations is cheap too: its inputs need not be saved either when what they are made of is smaller.
(The recompute region's own rule, which re-emits it in the backward pass, is in tracekern.autodiff.)"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import passes
from .errors import IRError
from .ir import Eqn, Graph, Var, verify
from .primitives.annotations import recompute_call, remat_barrier

# ----------------------------------------------------------------------------- policies

# tk.recompute(policy=...): which equations of a region may keep their outputs for the backward pass
POLICIES: dict[str, Callable[[Eqn], bool]] = {
    "nothing": lambda eqn: False,
    "dots": lambda eqn: eqn.primitive.name == "matmul",
}


def policy_function(policy: str | Callable[[Eqn], bool]) -> Callable[[Eqn], bool]:
    """The predicate of a policy: a name in POLICIES, or a callable(eqn) -> bool."""
    if callable(policy):
        return policy
    if policy in POLICIES:
        return POLICIES[policy]
    raise ValueError(f"tk.recompute: policy must be one of {sorted(POLICIES)} or a callable(eqn) -> bool, got {policy!r}")


def saved_by_policy(region: Graph, policy: Callable[[Eqn], bool]) -> tuple[Var, ...]:
    """The values of a recompute region that its forward keeps: outputs of the equations the policy
    accepts, other than the region's outputs."""
    outputs = set(region.outputs)
    return tuple(v for e in region.eqns if policy(e) for v in e.outputs if v not in outputs)


# ----------------------------------------------------------------------------- residual choice

_CHEAP = ("elementwise", "view", "fill", "const")


def cheap(e: Eqn) -> bool:
    """Whether the backward pass may re-run `e` instead of the forward saving its outputs."""
    if e.primitive.has_effects(**e.params):
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


# ----------------------------------------------------------------------------- splitting


@dataclass(frozen=True)
class SplitVJP:
    """A joint graph split in two: forward (primals -> outputs + residuals) and backward
    (residuals + cotangents -> input cotangents). Residuals are what the forward saves."""

    forward: Graph
    backward: Graph
    num_outputs: int
    residuals: tuple[Var, ...]

    @property
    def residual_bytes(self) -> int:
        return int(sum(v.aval.nbytes for v in self.residuals))

    @property
    def saved_bytes(self) -> int:
        """Residual bytes beyond the forward's own inputs (which the caller holds anyway)."""
        inputs = set(self.forward.inputs)
        return int(sum(v.aval.nbytes for v in self.residuals if v not in inputs))

    def __str__(self) -> str:
        return (f"forward:\n{self.forward}\n\nbackward (saved: {len(self.residuals)} residuals, "
                f"{self.residual_bytes} bytes):\n{self.backward}")


def split_joint(joint: Graph, num_primals: int, num_outputs: int) -> SplitVJP:
    """Split `joint` (inputs: primals then cotangents; outputs: primal outputs then input cotangents)
    by dependence on the cotangent inputs. Constants the backward needs are re-made there, not saved."""
    ct_inputs = set(joint.inputs[num_primals:])
    depends_on_ct: set[Var] = set(ct_inputs)
    for e in joint.eqns:
        if any(v in depends_on_ct for v in e.inputs):
            depends_on_ct.update(e.outputs)
    # The forward keeps only what the primal outputs need; work done only for the backward
    # (e.g. transposes, 1 - tanh^2) moves there, so residuals are values the forward makes anyway.
    needed_by_fwd: set[Var] = set(joint.outputs[:num_outputs])
    in_fwd: set[int] = set()
    for i in reversed(range(len(joint.eqns))):
        e = joint.eqns[i]
        forward_effect = e.primitive.has_effects(**e.params) and not any(v in depends_on_ct for v in e.inputs)
        if forward_effect or (any(v in needed_by_fwd for v in e.outputs) and not any(v in depends_on_ct for v in e.outputs)):
            needed_by_fwd.update(e.inputs)
            in_fwd.add(i)
    fwd_eqns = [e for i, e in enumerate(joint.eqns) if i in in_fwd]
    bwd_eqns = [e for i, e in enumerate(joint.eqns) if i not in in_fwd]
    producer = {v: e for e in fwd_eqns for v in e.outputs}
    bwd_defined = set(ct_inputs) | {v for e in bwd_eqns for v in e.outputs}
    needed = [v for e in bwd_eqns for v in e.inputs] + list(joint.outputs[num_outputs:])
    residuals: list[Var] = []
    copied: list[Eqn] = []
    seen: set[Var] = set()
    for v in needed:
        if v in bwd_defined or v in seen:
            continue
        seen.add(v)
        e = producer.get(v)
        if e is not None and not e.inputs:  # a constant: cheaper to make again than to save
            copied.append(e)
        else:
            residuals.append(v)
    residuals, recomputed = choose_residuals(fwd_eqns, residuals)
    copied = copied + [e for e in recomputed if e not in copied]  # constants first: they have no inputs
    primal_outs = joint.outputs[:num_outputs]
    for v in primal_outs:
        if v in depends_on_ct:
            raise IRError("a primal output depends on a cotangent input")
    fwd = passes.simplify(Graph(joint.inputs[:num_primals], tuple(fwd_eqns), primal_outs + tuple(residuals)))
    res_in = tuple(Var(v.aval) for v in residuals)
    rename = dict(zip(residuals, res_in))
    bwd_body = tuple(_rename_eqn(e, rename) for e in copied + bwd_eqns)
    bwd = Graph(res_in + joint.inputs[num_primals:], bwd_body,
                tuple(rename.get(v, v) for v in joint.outputs[num_outputs:]),
                input_notes=("saved",) * len(res_in) + ("cotangent",) * len(ct_inputs))
    bwd = mark_recomputed(passes.simplify(bwd), len(res_in))
    return SplitVJP(verify(fwd), verify(bwd), num_outputs, tuple(residuals))


def mark_recomputed(bwd: Graph, num_saved: int) -> Graph:
    """Note the backward's equations that remake forward values: those computed from saved values
    alone, not from a cotangent (a remat_barrier's token only orders the recomputation)."""
    from_ct = set(bwd.inputs[num_saved:])
    notes = []
    for e in bwd.eqns:
        ins = e.inputs[:1] if e.primitive is remat_barrier else e.inputs
        if any(v in from_ct for v in ins):
            from_ct.update(e.outputs)
            notes.append("")
        else:
            notes.append("recomputed" if e.inputs and e.outputs else "")
    return Graph(bwd.inputs, bwd.eqns, bwd.outputs, bwd.input_notes, tuple(notes))


def _rename_eqn(e: Eqn, rename: dict[Var, Var]) -> Eqn:
    if not any(v in rename for v in e.inputs):
        return e
    return Eqn(e.primitive, tuple(rename.get(v, v) for v in e.inputs), e.outputs, e.params, e.source)
