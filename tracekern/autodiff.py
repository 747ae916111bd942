"""Reverse mode: re-emit a graph's forward equations, then walk them backwards applying each
primitive's VJP rule, accumulating cotangents; and split a joint graph into forward and backward.

Cotangents are built by tracing, so the backward pass is ordinary IR (and can be differentiated)."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import passes, remat
from .errors import IRError
from .ir import Eqn, Graph, Var, is_float, verify
from .trace import aval_of, current_builder, inline_env, source_override


def active_vars(graph: Graph, active_inputs: Sequence[bool]) -> set[Var]:
    """Float values that depend, through differentiable equations, on the active inputs."""
    active = {v for v, a in zip(graph.inputs, active_inputs) if a and is_float(v.dtype)}
    for e in graph.eqns:
        if any(v in active for v in e.inputs) and e.primitive.differentiable(**e.params):
            active.update(v for v in e.outputs if is_float(v.dtype))
    return active


@dataclass
class ForwardPass:
    """The forward equations of `graph` emitted on concrete or traced `args`; ready for backward."""

    graph: Graph
    env: dict[Var, Any]
    active: set[Var]
    # values rebuilt by a later equation's VJP (tk.reversible): used instead of the forward's
    recon: dict[Var, Any] = field(default_factory=dict)

    def value(self, v: Var) -> Any:
        return self.recon[v] if v in self.recon else self.env[v]

    @property
    def outputs(self) -> list[Any]:
        return [self.env[v] for v in self.graph.outputs]

    def backward(self, out_cts: Sequence[Any]) -> list[Any]:
        """Cotangents of the graph inputs (None where none flows) given one per output (None = 0)."""
        builder = current_builder()
        outermost = builder is not None and builder.backward_from is None
        if outermost:
            builder.backward_from = len(builder.eqns)
        try:
            return self._backward(out_cts)
        finally:
            if outermost:
                builder.backward_from = None

    def _backward(self, out_cts: Sequence[Any]) -> list[Any]:
        cts: dict[Var, Any] = {}
        for v, ct in zip(self.graph.outputs, out_cts):
            if ct is not None and v in self.active:
                _accumulate(cts, v, ct)
        for e in reversed(self.graph.eqns):
            self._backward_eqn(e, cts)
        return [cts.get(v) for v in self.graph.inputs]

    def _backward_eqn(self, e: Eqn, cts: dict[Var, Any]) -> None:
        if not any(v in cts for v in e.outputs):
            return
        active_in = [v in self.active for v in e.inputs]
        if not any(active_in):
            return
        from .numpy import zeros_like

        with source_override(e.source):
            outs = [self.value(v) for v in e.outputs]
            ct_out = [cts[v] if v in cts else (None if e.primitive.sparse_cotangents else zeros_like(o))
                      for v, o in zip(e.outputs, outs)]
            ct_in = e.primitive.vjp(ct_out, [self.value(v) for v in e.inputs], outs, active_in, **e.params)
            if e.primitive.reconstructs_inputs:
                ct_in, rebuilt = ct_in
                self.recon.update((v, r) for v, r in zip(e.inputs, rebuilt) if r is not None and v not in self.recon)
            if len(ct_in) != len(e.inputs):
                raise IRError(f"VJP rule of {e.primitive.name} returned {len(ct_in)} cotangents for "
                              f"{len(e.inputs)} inputs")
            for v, act, ct in zip(e.inputs, active_in, ct_in):
                if act and ct is not None:
                    got = aval_of(ct)
                    if got != v.aval:
                        raise IRError(f"VJP rule of {e.primitive.name} gave a cotangent {got} for an input "
                                      f"{v.aval} (from {e.source})")
                    _accumulate(cts, v, ct)


def _accumulate(cts: dict[Var, Any], v: Var, ct: Any) -> None:
    from .numpy import add

    cts[v] = ct if v not in cts else add(cts[v], ct)


def for_vjp(graph: Graph) -> Graph:
    """The graph as reverse mode emits it (Primitive.for_vjp: a scan records its carries again)."""
    eqns = tuple(e.primitive.for_vjp(e) for e in graph.eqns)
    if all(a is b for a, b in zip(eqns, graph.eqns)):
        return graph
    return Graph(graph.inputs, eqns, graph.outputs)


def forward(graph: Graph, args: Sequence[Any], active_inputs: Sequence[bool]) -> ForwardPass:
    """Emit graph's equations on args into the current builder and remember them for backward."""
    graph = for_vjp(graph)
    env = inline_env(graph, args)
    return ForwardPass(graph, env, active_vars(graph, active_inputs))


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
    residuals, recomputed = remat.choose_residuals(fwd_eqns, residuals)
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
    bwd = _mark_recomputed(passes.simplify(bwd), len(res_in))
    return SplitVJP(verify(fwd), verify(bwd), num_outputs, tuple(residuals))


def _mark_recomputed(bwd: Graph, num_saved: int) -> Graph:
    """Note the backward's equations that remake forward values: those computed from saved values
    alone, not from a cotangent (a remat_barrier's token only orders the recomputation)."""
    from .primitives.annotations import remat_barrier

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
