"""Reverse mode, Graph -> Graph: vjp(graph, active) is a joint graph that re-emits the forward and then
walks it backwards through each equation's VJP rule, accumulating cotangents.

First-order primitives carry their VJP rule (Primitive.vjp, written with tracekern.primitives.ops);
the rules of the higher-order primitives (custom_vjp_call, recompute_call, reversible_call, cond,
scan, while, scan_revolve) are here, in RULES, because they differentiate their sub-graphs with
this module. Every rule gets the builder it emits into with its values, and the rules of regions
that look at the reverse pass so far (recompute) get it as an argument (Reverse), so nothing here
reads an ambient trace. The backward pass is ordinary IR: it can be differentiated again."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import passes
from .errors import IRError, TracekernError, with_location
from .ir import Aval, Eqn, Graph, Var, is_inexact
from .primitives import annotations as A
from .primitives import control as C
from .primitives import ops
from .trace import Builder, Value, aval_of, build_graph

# ----------------------------------------------------------------------------- the reverse pass


def active_vars(graph: Graph, active_inputs: Sequence[bool]) -> set[Var]:
    """Float values that depend, through differentiable equations, on the active inputs."""
    active = {v for v, a in zip(graph.inputs, active_inputs) if a and is_inexact(v.dtype)}
    for e in graph.eqns:
        if any(v in active for v in e.inputs) and e.primitive.differentiable(**e.params):
            active.update(v for v in e.outputs if is_inexact(v.dtype))
    return active


class Reverse:
    """One reverse pass being emitted: its builder and the index of its first backward equation
    there. Rules of nested regions continue the same pass (a recompute region reuses the values
    that the backward equations emitted so far read)."""

    def __init__(self, builder: Builder):
        self.builder = builder
        self.start = len(builder.eqns)
        self._done = self.start
        self._used: set[Var] = set()

    def used(self) -> set[Var]:
        """Vars read by the backward equations emitted so far (kept up to date incrementally)."""
        for e in self.builder.eqns[self._done:]:
            self._used.update(e.inputs)
        self._done = len(self.builder.eqns)
        return self._used


@dataclass
class ForwardPass:
    """The forward equations of `graph` emitted on `builder` values; ready for backward."""

    builder: Builder
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

    def backward(self, out_cts: Sequence[Any], rev: Reverse | None = None) -> list[Any]:
        """Cotangents of the graph inputs (None where none flows) given one per output (None = 0).
        `rev`: the reverse pass this one belongs to (a region's rule); None starts a new one."""
        rev = rev or Reverse(self.builder)
        cts: dict[Var, Any] = {}
        for v, ct in zip(self.graph.outputs, out_cts):
            if ct is not None and v in self.active:
                _accumulate(cts, v, ct)
        for e in reversed(self.graph.eqns):
            self._backward_eqn(rev, e, cts)
        return [cts.get(v) for v in self.graph.inputs]

    def _backward_eqn(self, rev: Reverse, e: Eqn, cts: dict[Var, Any]) -> None:
        if not any(v in cts for v in e.outputs):
            return
        active_in = [v in self.active for v in e.inputs]
        if not any(active_in):
            return
        rule = RULES.get(e.primitive)
        with self.builder.at(e.source):
            outs = [self.value(v) for v in e.outputs]
            sparse = rule.sparse_cotangents if rule is not None else e.primitive.sparse_cotangents
            ct_out = [cts[v] if v in cts else (None if sparse else ops.zeros_like(o)) for v, o in zip(e.outputs, outs)]
            ins = [self.value(v) for v in e.inputs]
            if rule is None:
                ct_in = e.primitive.vjp(ct_out, ins, outs, active_in, **e.params)
            else:
                ct_in = rule.vjp(rev, ct_out, ins, outs, active_in, **e.params)
            if rule is not None and rule.reconstructs_inputs:
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
    cts[v] = ct if v not in cts else ops.add(cts[v], ct)


def prepare(graph: Graph) -> Graph:
    """The graph as reverse mode emits it (PREPARE: a scan records its carries again)."""
    eqns = tuple(PREPARE[e.primitive](e) if e.primitive in PREPARE else e for e in graph.eqns)
    if all(a is b for a, b in zip(eqns, graph.eqns)):
        return graph
    return Graph(graph.inputs, eqns, graph.outputs)


def forward(builder: Builder, graph: Graph, args: Sequence[Any], active_inputs: Sequence[bool]) -> ForwardPass:
    """Emit graph's equations on args (values of `builder`) and remember them for backward."""
    graph = prepare(graph)
    env = builder.inline(graph, args)
    return ForwardPass(builder, graph, env, active_vars(graph, active_inputs))


# ----------------------------------------------------------------------------- Graph -> Graph


@dataclass(frozen=True)
class JointVJP:
    """A graph and its reverse mode in one graph. Inputs: the graph's inputs, then a cotangent for
    each output in `seeded`. Outputs: the graph's outputs, then the cotangent of each input in
    `has_grad`. Its first `num_forward` equations are the forward pass (what the outputs need and
    what the backward reads); the rest are the backward pass."""

    graph: Graph
    num_forward: int
    num_outputs: int
    seeded: tuple[bool, ...]
    has_grad: tuple[bool, ...]

    @property
    def num_primals(self) -> int:
        return len(self.graph.inputs) - sum(self.seeded)


def vjp(graph: Graph, active: Sequence[bool], seeded: Sequence[bool] | None = None, zeros: bool = False) -> JointVJP:
    """The joint forward and backward graph of `graph`, differentiated with respect to the inputs
    marked `active`, from cotangents of the outputs marked `seeded` (default: all). zeros=True gives
    every active input a cotangent output (zeros where none flows); otherwise only those a cotangent
    reaches have one (has_grad). The joint graph is not simplified: inlined into a trace, it emits
    exactly what re-emitting the forward and running the VJP rules there would."""
    seeded = tuple(True for _ in graph.outputs) if seeded is None else tuple(bool(s) for s in seeded)
    b = Builder()
    primals = [b.new_input(v.aval) for v in graph.inputs]
    cts = [b.new_input(v.aval) if s else None for v, s in zip(graph.outputs, seeded)]
    fp = forward(b, graph, primals, active)
    num_forward = len(b.eqns)
    in_cts = fp.backward(cts)
    if zeros:
        grads = [ct if ct is not None else ops.zeros_like(p) for ct, p, a in zip(in_cts, primals, active) if a]
        has_grad = tuple(bool(a) for a in active) + (False,) * (len(primals) - len(active))
    else:
        grads = [ct for ct in in_cts if ct is not None]
        has_grad = tuple(ct is not None for ct in in_cts)
    joint, _ = b.finish(fp.outputs + grads)
    return JointVJP(joint, num_forward, len(graph.outputs), seeded, has_grad)


# ----------------------------------------------------------------------------- rules of higher-order primitives


@dataclass(frozen=True)
class Rule:
    """The VJP of a higher-order primitive: vjp(rev, cts, ins, outs, active, **params) -> one
    cotangent per input (None = zero). sparse_cotangents: it takes None for an output that gets no
    cotangent (instead of zeros). reconstructs_inputs: it returns (cotangents, rebuilt inputs), the
    inputs recomputed from the outputs (tk.reversible), which reverse mode then hands to the VJPs of
    the equations that made them."""

    vjp: Callable
    sparse_cotangents: bool = False
    reconstructs_inputs: bool = False


def _custom_vjp(rev, cts, ins, outs, active, body, bwd, num_y, num_x, var_positions, fun_name):
    """tk.custom_gradient: the backward runs bwd's ops (grad_fn's) instead of differentiating body's."""
    b = rev.builder
    dys = [ops.zeros_like(y) if ct is None else ct for ct, y in zip(cts[:num_y], outs[:num_y])]
    env = b.inline(bwd, dys + list(outs[num_y:]))
    grads = [env[v] for v in bwd.outputs]
    result = [None] * len(ins)
    result[:num_x] = grads[:num_x]
    for j, pos in enumerate(var_positions):
        result[pos] = grads[num_x + j]
    if any(ct is not None for ct in cts[num_y:]):
        # cotangents of residuals (grad of grad: grad_fn's ops used them) flow through body's
        # own ops: grad_fn's derivative is that of its ops, residuals included
        extra = forward(b, body, list(ins), active).backward([None] * num_y + list(cts[num_y:]), rev)
        result = [x if y is None else (y if x is None else ops.add(x, y)) for x, y in zip(result, extra)]
    pos = closure_feeding_outputs(body, num_y, num_x, var_positions, active)
    if pos is not None:
        raise TracekernError(with_location(
            f"{fun_name} (a tk.custom_gradient function) uses a traced value that is being differentiated "
            f"({ins[pos].aval}) but is not one of its positional arguments (a closure over an enclosing "
            "function's value, or a keyword argument), so its grad_fn cannot return a gradient for it. Pass "
            "that value to the function as a positional argument instead.", rev.builder.current_source()))
    return result


def closure_feeding_outputs(body: Graph, num_y: int, num_x: int, var_positions, flags) -> int | None:
    """The position of the first flagged input of a custom_vjp_call's body past its positional
    arguments (a closure or keyword argument, not a Variable grad_fn returns a gradient for) that
    its outputs y depend on: grad_fn cannot give its cotangent (or tangent). One that only grad_fn
    reads, a residual, gets none from this first-order rule, as TensorFlow gives it none."""
    for pos in range(num_x, len(body.inputs)):
        if flags[pos] and pos not in var_positions:
            reached = active_vars(body, [k == pos for k in range(len(body.inputs))])
            if any(v in reached for v in body.outputs[:num_y]):
                return pos
    return None


def _recompute_vjp(rev, cts, ins, outs, active, body, num_y):
    """tk.recompute: emit the region again on its inputs, behind a barrier that depends on the
    cotangent (so it runs in the backward pass and never merges with the forward's copy), using the
    values the policy saved instead of recomputing them, then differentiate it.

    An output of the region that the reverse pass already reads (typically the next region's input,
    which that region keeps) is used as it is rather than recomputed: it is kept anyway, so the
    recomputation that only remade it (an MLP layer's matmul, when tanh's derivative needs only its
    output) is dead code and disappears."""
    body = prepare(body)
    b = rev.builder
    kept = rev.used()
    reuse = {v: y for v, y in zip(body.outputs[:num_y], outs[:num_y])
             if isinstance(y, Value) and y.builder is b and y.ir_var in kept and v not in body.inputs}
    token = next(ct for ct in cts if ct is not None)
    xs = [ops.remat_barrier(x, token) for x in ins]
    given = dict(zip(body.outputs[num_y:], outs[num_y:]))
    # prints of the region run again here: one element of a barrier'd value orders them
    order = ops.first_element(xs[0]) if xs else None
    env = b.inline(body, xs, given=given, order=order)
    env.update(reuse)
    fp = ForwardPass(b, body, env, active_vars(body, active))
    return fp.backward(list(cts), rev)   # saved values get cotangents too in grad of grad


def _reversible_vjp(rev, cts, ins, outs, active, body, f, g, num_f):
    """tk.reversible: reconstruct x2 = y2 - g(y1) and x1 = y1 - f(x2) from the outputs, so the
    forward saves nothing for the block; the reconstructed inputs go to the VJP of whatever made
    them (a stack of blocks keeps only the last outputs)."""
    b = rev.builder
    (y1, y2), (dy1, dy2) = outs, cts
    cf, cg = list(ins[2:2 + num_f]), list(ins[2 + num_f:])
    x2 = ops.sub(y2, b.inline(g, [y1] + cg)[g.outputs[0]])
    x1 = ops.sub(y1, b.inline(f, [x2] + cf)[f.outputs[0]])
    g_cts = forward(b, g, [y1] + cg, [True] + list(active[2 + num_f:])).backward([dy2], rev)
    dy1_all = dy1 if g_cts[0] is None else ops.add(dy1, g_cts[0])
    f_cts = forward(b, f, [x2] + cf, [True] + list(active[2:2 + num_f])).backward([dy1_all], rev)
    dx2 = dy2 if f_cts[0] is None else ops.add(dy2, f_cts[0])
    return [dy1_all, dx2] + list(f_cts[1:]) + list(g_cts[1:]), [x1, x2] + [None] * (len(ins) - 2)


def _cond_vjp(rev, cts, ins, outs, active, true, false):
    """The VJP of the branch taken, as a cond over the two branches' VJP graphs."""
    operands, act = list(ins[1:]), list(active[1:])
    avals = [aval_of(x) for x in operands] + [aval_of(c) for c in cts]
    branches = [_branch_vjp(rev, g, len(operands), act, avals) for g in (true, false)]
    grads = iter(ops.cond(ins[0], *operands, *cts, true=branches[0], false=branches[1]))
    return [None] + [next(grads) if a else None for a in act]


def _branch_vjp(rev, g: Graph, n_in: int, active, avals) -> Graph:
    """(operands..., output cotangents...) -> cotangents of the active operands, zeros where none flows."""

    def back(b, *a):
        fp = forward(b, g, a[:n_in], active)
        cts = fp.backward(list(a[n_in:]))
        return [ops.zeros_like(x) if c is None else c for c, x, act in zip(cts, a[:n_in], active) if act]

    return build_graph(back, avals, source=rev.builder.source)


def _row(a: Aval) -> Aval:
    return Aval(a.shape[1:], a.dtype)


def _record_carries(eqn: Eqn) -> Eqn:
    """A scan as reverse mode emits it: recording the carry at the start of every step, which its
    backward differentiates the body at; a checkpointed scan records the snapshots of its schedule's
    first sweep instead (k slots and the carry at the start of the last step), so that its backward
    resumes the schedule rather than running that sweep again."""
    if eqn.params["record"]:
        return eqn
    carry = [v.aval for v in eqn.params["body"].outputs[:eqn.params["num_carry"]]]
    k = eqn.params.get("checkpoint")
    if k is None:
        recs = tuple(Var(Aval((eqn.params["length"],) + a.shape, a.dtype)) for a in carry)
    else:
        recs = tuple(Var(Aval((k,) + a.shape, a.dtype)) for a in carry) + tuple(Var(a) for a in carry)
    return Eqn(eqn.primitive, eqn.inputs, eqn.outputs + recs, dict(eqn.params, record=True), eqn.source)


def _scan_vjp(rev, cts, ins, outs, active, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
    """A reverse scan over the body's backward step, at the recorded carries; with checkpoint=k,
    scan_revolve instead (a schedule of re-runs from the initial carry with at most k stored)."""
    if checkpoint is not None:
        return _revolve_vjp(rev, cts, ins, outs, active, body, num_consts, num_carry, length, reverse, checkpoint,
                            record)
    if not record:
        raise TracekernError("scan: its recorded carries were dropped before differentiation (internal error)")
    nc, nk = num_consts, num_carry
    n_y = len(body.outputs) - nk
    layout = C.ScanLayout(nc, nk)
    parts = layout.split(ins)
    consts, xs = parts.consts, parts.xs
    recs = list(outs[nk + n_y:])
    ct_carry = [ops.zeros_like(o) if c is None else c for c, o in zip(cts[:nk], outs[:nk])]
    ct_ys = [ops.zeros_like(o) if c is None else c for c, o in zip(cts[nk:nk + n_y], outs[nk:nk + n_y])]
    # grad of grad: cotangents of the recorded carries join the carry's at the start of each step
    ct_recs = {i: c for i, c in enumerate(cts[nk + n_y:]) if c is not None and i in
               [j for j in range(nk) if is_inexact(body.outputs[j].dtype)]}
    act = layout.split(list(active))
    dc = [i for i, a in enumerate(act.consts) if a]             # consts that get cotangents
    fk = [i for i in range(nk) if is_inexact(body.outputs[i].dtype)]
    dx = [i for i, a in enumerate(act.xs) if a]
    # one backward step: (consts, ct_carry (float ones), acc, carry_t, x_t, ct_y_t) ->
    #                    (ct_carry_prev, acc + ct_consts, ct_x_t)
    step_active = layout.join(consts=act.consts, carry=[i in fk for i in range(nk)], xs=act.xs)
    avals = ([aval_of(c) for c in consts] + [aval_of(ct_carry[i]) for i in fk] + [aval_of(consts[i]) for i in dc]
             + [v.aval for v in body.outputs[:nk]] + [_row(aval_of(x)) for x in xs] + [_row(aval_of(c)) for c in ct_ys])
    rec_keys = sorted(ct_recs)
    avals += [v.aval for i in rec_keys for v in [body.outputs[i]]]
    back = _scan_step_vjp(rev, body, nc, nk, fk, dc, dx, len(xs), step_active, avals, rec_keys)
    acc0 = [ops.zeros_like(consts[i]) for i in dc]
    backward = C.ScanLayout(nc, len(fk) + len(dc))
    res = ops.scan(*backward.join(consts=consts, carry=[ct_carry[i] for i in fk] + acc0,
                                  xs=recs + xs + ct_ys + [ct_recs[i] for i in rec_keys]),
                   body=back, num_consts=backward.num_consts,
                   num_carry=backward.num_carry, length=length, reverse=not reverse, record=True)
    ct_init = dict(zip(fk, res[:len(fk)]))
    ct_consts = dict(zip(dc, res[len(fk):len(fk) + len(dc)]))
    ct_xs = dict(zip(dx, res[len(fk) + len(dc):len(fk) + len(dc) + len(dx)]))
    return layout.join(consts=[ct_consts.get(i) for i in range(nc)],
                       carry=[ct_init.get(i) if act.carry[i] else None for i in range(nk)],
                       xs=[ct_xs.get(i) for i in range(len(xs))])


def _revolve_vjp(rev, cts, ins, outs, active, body, nc, nk, length, reverse, k, record=False):
    """The backward of a checkpointed scan: scan_revolve runs the schedule of tracekern.schedule
    (at most k stored carries), interleaving forward and backward steps: from the snapshots of its
    first sweep that the forward recorded (`record`), else from the initial carry."""
    n_y = len(body.outputs) - nk
    layout = C.ScanLayout(nc, nk)
    parts = layout.split(ins)
    consts, init, xs = parts.consts, parts.carry, parts.xs
    ct_carry = [ops.zeros_like(o) if c is None else c for c, o in zip(cts[:nk], outs[:nk])]
    ct_ys = [ops.zeros_like(o) if c is None else c for c, o in zip(cts[nk:nk + n_y], outs[nk:nk + n_y])]
    act = layout.split(list(active))
    dc = [i for i, a in enumerate(act.consts) if a]
    fk = [i for i in range(nk) if is_inexact(body.outputs[i].dtype)]
    dx = [i for i, a in enumerate(act.xs) if a]
    step_active = layout.join(consts=act.consts, carry=[i in fk for i in range(nk)], xs=act.xs)
    avals = ([aval_of(c) for c in consts] + [aval_of(ct_carry[i]) for i in fk] + [aval_of(consts[i]) for i in dc]
             + [v.aval for v in body.outputs[:nk]] + [_row(aval_of(x)) for x in xs] + [_row(aval_of(c)) for c in ct_ys])
    back = _scan_step_vjp(rev, body, nc, nk, fk, dc, dx, len(xs), step_active, avals)
    acc0 = [ops.zeros_like(consts[i]) for i in dc]
    start = list(outs[nk + n_y:nk + n_y + 2 * nk]) if record else init   # (slots, then the last step's carry)
    # re-runs need only the carry: the body without its ys (a loss or a log-softmax a step, say)
    advance = passes.dce(Graph(body.inputs, body.eqns, body.outputs[:nk], body.input_notes))
    revolve = C.RevolveLayout(nc, nk, len(fk) + len(dc), n_y, resume=bool(record))
    snaps, carry = (start[:nk], start[nk:]) if record else ([], start)
    res = ops.scan_revolve(*revolve.join(consts=consts, snaps=snaps, carry=carry, xs=xs,
                                         state=[ct_carry[i] for i in fk] + acc0, ct_ys=ct_ys), body=advance, back=back,
                           checkpoint=k, num_consts=nc, num_carry=nk, num_state=revolve.num_state,
                           dx=tuple(dx), length=length, reverse=reverse, resume=revolve.resume, num_ys=n_y)
    ct_init = dict(zip(fk, res[:len(fk)]))
    ct_consts = dict(zip(dc, res[len(fk):len(fk) + len(dc)]))
    ct_xs = dict(zip(dx, res[len(fk) + len(dc):]))
    return layout.join(consts=[ct_consts.get(i) for i in range(nc)],
                       carry=[ct_init.get(i) if act.carry[i] else None for i in range(nk)],
                       xs=[ct_xs.get(i) for i in range(len(xs))])


def _scan_step_vjp(rev, body, nc, nk, fk, dc, dx, n_xs, step_active, avals, rec_keys=()) -> Graph:
    """The graph of one backward step of a loop body; see _scan_vjp for its operands."""
    n_fk, n_dc = len(fk), len(dc)
    n_y = len(body.outputs) - nk

    def step(b, *a):
        consts = list(a[:nc])
        ct_k = list(a[nc:nc + n_fk])
        acc = list(a[nc + n_fk:nc + n_fk + n_dc])
        rest = a[nc + n_fk + n_dc:]
        carry, x, ct_y = list(rest[:nk]), list(rest[nk:nk + n_xs]), list(rest[nk + n_xs:nk + n_xs + n_y])
        ct_rec = dict(zip(rec_keys, rest[nk + n_xs + n_y:]))
        fp = forward(b, body, consts + carry + x, step_active)
        ct_out = [None] * nk + ct_y
        for j, i in enumerate(fk):
            ct_out[i] = ct_k[j]
        g = fp.backward(ct_out)
        g_consts, g_carry, g_x = g[:nc], g[nc:nc + nk], g[nc + nk:]
        new_ct = [ops.zeros_like(carry[i]) if g_carry[i] is None else g_carry[i] for i in fk]
        new_ct = [ops.add(c, ct_rec[i]) if i in ct_rec else c for c, i in zip(new_ct, fk)]
        new_acc = [acc[j] if g_consts[i] is None else ops.add(acc[j], g_consts[i]) for j, i in enumerate(dc)]
        ct_x = [ops.zeros_like(x[i]) if g_x[i] is None else g_x[i] for i in dx]
        return new_ct + new_acc + ct_x

    return build_graph(step, avals, source=rev.builder.source)


def _revolve_grad(rev, cts, ins, outs, active, **params):
    """Reverse mode of a loop's scheduled backward (scan_revolve): refused, naming the loop the user
    wrote (a while loop, or a traced-bound fori_loop, has no length) and what works instead."""
    hessian = "forward over reverse (tk.jvp(tk.grad(f), ...) for Hessian-vector products, tk.hessian(f))"
    if params.get("length") is None:
        message = ("grad of grad through a tk.while_loop (or a tk.fori_loop with traced bounds) is not "
                   "supported: its backward re-runs the loop on a schedule made at run time, which is not "
                   f"differentiable again; use {hessian}, or a tk.fori_loop with static bounds")
    else:
        message = ("grad of grad through a checkpointed tk.scan (or static-bound tk.fori_loop) is not "
                   "supported; use checkpoint=None (its backward is an ordinary scan, differentiable "
                   f"again), or {hessian}")
    raise TracekernError(with_location(message, rev.builder.current_source()))


def _while_vjp(rev, cts, ins, outs, active, cond, body, num_consts, checkpoint=None):
    """Re-run the loop from its initial carry on a schedule made when the trip count is known:
    `checkpoint` slots, or one per iteration without checkpointing (scan_revolve, length=None)."""
    nc = num_consts
    parts = C.WhileLayout(nc).split(ins)
    consts, init = parts.consts, parts.carry
    nk = len(init)
    fk = [i for i in range(nk) if is_inexact(init[i].dtype)]
    dc = [i for i in range(nc) if active[i]]
    act = C.WhileLayout(nc).split(list(active))
    step_active = act.consts + [i in fk for i in range(nk)]
    avals = ([aval_of(c) for c in consts] + [aval_of(init[i]) for i in fk] + [aval_of(consts[i]) for i in dc]
             + [aval_of(c) for c in init] + [Aval((), np.dtype(np.int64))])
    # the scan backward step, with no sequences; the trip count rides along unused
    back = _scan_step_vjp(rev, body, nc, nk, fk, dc, [], 0, step_active, avals[:-1])
    ct_k = [ops.zeros_like(init[i]) if cts[i] is None else cts[i] for i in fk]
    revolve = C.RevolveLayout(nc, nk, len(fk) + len(dc), 0, while_loop=True)
    res = ops.scan_revolve(*revolve.join(consts=consts, carry=init, trip=[outs[-1]],
                                         state=ct_k + [ops.zeros_like(consts[i]) for i in dc]), body=body,
                           back=back, checkpoint=checkpoint, num_consts=nc, num_carry=nk, num_state=revolve.num_state,
                           dx=(), length=None, reverse=False)
    ct_init = dict(zip(fk, res[:len(fk)]))
    ct_consts = dict(zip(dc, res[len(fk):]))
    return [ct_consts.get(i) for i in range(nc)] + [ct_init.get(i) if act.carry[i] else None for i in range(nk)]


RULES: dict[Any, Rule] = {
    A.custom_vjp_call: Rule(_custom_vjp, sparse_cotangents=True),
    A.recompute_call: Rule(_recompute_vjp, sparse_cotangents=True),
    A.reversible_call: Rule(_reversible_vjp, reconstructs_inputs=True),
    C.cond: Rule(_cond_vjp),
    C.scan: Rule(_scan_vjp, sparse_cotangents=True),
    C.while_: Rule(_while_vjp),
    C.scan_revolve: Rule(_revolve_grad),
}
# how reverse mode emits an equation of these primitives in its forward pass
PREPARE: dict[Any, Callable[[Eqn], Eqn]] = {C.scan: _record_carries}
