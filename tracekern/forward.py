"""Forward mode, Graph -> Graph: jvp(graph, active) is a joint graph that computes the outputs and
their tangents in one pass; split_linear(joint) splits it into tk.linearize's two graphs.

First-order primitives carry their JVP rule (Primitive.jvp, next to their VJP rule: an elementwise
primitive's is read from its gradient table, a `linear` primitive's is itself applied to the
tangents). The rules of the higher-order primitives are here, in RULES: each emits the primal
equation itself, since the JVP of a loop is one loop over (primal, tangent) carries. A tangent of
None is a zero that is never built: only values that depend on a tangent input get one.

tk.linearize is partial evaluation of the joint graph: the equations that read no tangent are the
primal graph, which runs once and saves the values the others read (residuals); the rest is the
linear graph, which maps tangents to tangents from the residuals. A loop or branch that mixes both
is split by its rule in PARTIAL_EVAL (a scan into a primal scan that stacks its residuals and a
tangent scan that reads them, a cond into two conds); a while loop's tangent loop runs the primal
loop again (its trip count is not known until it runs, so its residuals cannot be stacked), as
does a tk.recompute region's (it saves its inputs only)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import autodiff, passes
from .errors import IRError, TracekernError, with_location
from .ir import Aval, Eqn, Graph, Var, is_inexact, verify
from .primitives import annotations as A
from .primitives import control as C
from .primitives import ops
from .primitives.shape import full
from .trace import Builder, aval_of, build_graph

# ----------------------------------------------------------------------------- the forward pass


def emit_jvp(b: Builder, graph: Graph, primals: Sequence[Any], tangents: Sequence[Any]) -> tuple[list, list]:
    """Emit graph's equations on `primals` (values of `b`) with the tangents of their outputs (None =
    zero) from `tangents` (one per input, None = zero); returns (outputs, output tangents)."""
    env: dict[Var, Any] = dict(zip(graph.inputs, primals))
    tenv: dict[Var, Any] = {v: t for v, t in zip(graph.inputs, tangents) if t is not None}
    for e in graph.eqns:
        ins = [env[v] for v in e.inputs]
        tins = [tenv.get(v) for v in e.inputs]
        with b.at(e.source):
            if all(t is None for t in tins) or not e.primitive.differentiable(**e.params):
                outs, touts = _bind(b, e.primitive, ins, e.params), [None] * len(e.outputs)
            elif e.primitive in RULES:
                outs, touts = RULES[e.primitive](b, tins, ins, **e.params)
            else:
                outs = _bind(b, e.primitive, ins, e.params)
                touts = e.primitive.jvp(tins, ins, outs, **e.params)
        if len(touts) != len(e.outputs):
            raise IRError(f"JVP rule of {e.primitive.name} returned {len(touts)} tangents for {len(e.outputs)} outputs")
        env.update(zip(e.outputs, outs))
        for v, t in zip(e.outputs, touts):
            if t is None or not is_inexact(v.dtype):
                continue
            if aval_of(t) != v.aval:
                raise IRError(f"JVP rule of {e.primitive.name} gave a tangent {aval_of(t)} for an output {v.aval} "
                              f"(from {e.source})")
            tenv[v] = t
    return [env[v] for v in graph.outputs], [tenv.get(v) for v in graph.outputs]


def _bind(b: Builder, prim, ins: Sequence, params: dict) -> list:
    out = b.bind(prim, *ins, **params)
    return list(out) if prim.multiple_results else [out]


def zeros_for(x):
    """A zero tangent (of any dtype: a non-float output's tangent is zeros of its own dtype)."""
    return ops.full_like(x, np.asarray(0, x.dtype).item())


def tangent_outputs(graph: Graph, active: Sequence[bool]) -> list[bool]:
    """Which outputs of `graph` may get a tangent from tangents of the `active` inputs (float values
    that depend on them through differentiable equations; a rule may still give zero)."""
    tangent = autodiff.active_vars(graph, active)
    return [v in tangent for v in graph.outputs]


@dataclass(frozen=True)
class JointJVP:
    """A graph and its forward mode in one graph. Inputs: the graph's inputs, then a tangent for each
    input in `active`. Outputs: the graph's outputs, then the tangent of each output in `has_tangent`."""

    graph: Graph
    num_primals: int
    num_outputs: int
    active: tuple[bool, ...]
    has_tangent: tuple[bool, ...]

    @property
    def num_tangents(self) -> int:
        return sum(self.active)


def jvp(graph: Graph, active: Sequence[bool], zeros: bool = False) -> JointJVP:
    """The joint primal and tangent graph of `graph`, for tangents of the (float) inputs marked
    `active`. zeros=True gives every output a tangent (zeros where none flows, in the output's own
    dtype for a non-float one); otherwise only outputs a tangent reaches have one (has_tangent)."""
    active = tuple(bool(a) and is_inexact(v.dtype) for v, a in zip(graph.inputs, active)) + \
        (False,) * (len(graph.inputs) - len(active))
    b = Builder()
    primals = [b.new_input(v.aval) for v in graph.inputs]
    tangents = [b.new_input(v.aval) if a else None for v, a in zip(graph.inputs, active)]
    outs, touts = emit_jvp(b, graph, primals, tangents)
    if zeros:
        touts = [zeros_for(o) if t is None else t for t, o in zip(touts, outs)]
    joint, _ = b.finish(outs + [t for t in touts if t is not None])
    return JointJVP(joint, len(graph.inputs), len(graph.outputs), active, tuple(t is not None for t in touts))


def mark_tangents(joint: JointJVP, graph: Graph | None = None) -> Graph:
    """The joint graph (or `graph`, a simplified copy of it) with its tangent inputs and the
    equations that compute tangents marked, for make_ir's listing."""
    g = joint.graph if graph is None else graph
    tangent = set(g.inputs[joint.num_primals:])
    notes = []
    for e in g.eqns:
        is_tangent = any(v in tangent for v in e.inputs)
        if is_tangent:
            tangent.update(e.outputs)
        notes.append("tangent" if is_tangent and e.outputs else "")
    return Graph(g.inputs, g.eqns, g.outputs, input_notes=("",) * joint.num_primals + ("tangent",) * joint.num_tangents,
                 eqn_notes=tuple(notes))


def _instantiate(t, x):
    return zeros_for(x) if t is None else t


def _jvp_graph(graph: Graph, active: Sequence[bool], out_tangent: Sequence[bool], source: str | None) -> Graph:
    """graph's forward mode as a sub-graph: (inputs..., tangents of the active inputs...) ->
    (outputs..., tangents of the outputs marked out_tangent, zeros where none flows)."""
    n = len(graph.inputs)

    def fn(b, *a):
        it = iter(a[n:])
        outs, touts = emit_jvp(b, graph, a[:n], [next(it) if act else None for act in active])
        return outs + [_instantiate(t, o) for t, o, want in zip(touts, outs, out_tangent) if want]

    avals = [v.aval for v in graph.inputs] + [v.aval for v, act in zip(graph.inputs, active) if act]
    return build_graph(fn, avals, source=source)


def _present(tangents) -> list:
    return [t for t in tangents if t is not None]


def quiet(graph: Graph) -> Graph:
    """graph without its prints (recursively): a copy that runs again must not print again."""
    eqns, changed = [], False
    for e in graph.eqns:
        if e.primitive is A.print_:
            changed = True
            continue
        params = {k: quiet(p) if isinstance(p, Graph) else p for k, p in e.params.items()}
        if any(params[k] is not e.params[k] for k in params):
            e, changed = Eqn(e.primitive, e.inputs, e.outputs, params, e.source), True
        eqns.append(e)
    return Graph(graph.inputs, tuple(eqns), graph.outputs) if changed else graph


# ----------------------------------------------------------------------------- rules of higher-order primitives
# rule(b, tangents, ins, **params) -> (outputs, output tangents): each emits the primal equation too.


def _custom_jvp(b, tangents, ins, *, body, bwd, num_y, num_x, var_positions, fun_name):
    """tk.custom_gradient: the JVP is the transpose of grad_fn, which is linear in the cotangent:
    J u = d/d ct <grad_fn(ct), u>, reverse mode of grad_fn's ops at ct = 0. The residual outputs
    (what grad_fn reads) get the tangents of body's own ops, as they get its cotangents in grad
    of grad."""
    params = dict(body=body, bwd=bwd, num_y=num_y, num_x=num_x, var_positions=var_positions, fun_name=fun_name)
    outs = _bind(b, A.custom_vjp_call, ins, params)
    pos = autodiff.closure_feeding_outputs(body, num_y, num_x, var_positions, [t is not None for t in tangents])
    if pos is not None:
        raise TracekernError(with_location(
            f"{fun_name} (a tk.custom_gradient function) uses a traced value that has a tangent "
            f"({ins[pos].aval}) but is not one of its positional arguments (a closure over an enclosing "
            "function's value, or a keyword argument), and its grad_fn cannot return a gradient for it, from "
            "which forward mode derives the JVP. Pass that value to the function as a positional argument "
            "instead.", b.current_source()))
    ys, residuals = outs[:num_y], outs[num_y:]
    u = list(tangents[:num_x]) + [tangents[p] for p in var_positions]
    dys = [zeros_for(y) for y in ys]
    fp = autodiff.forward(b, bwd, dys + residuals, [is_inexact(y.dtype) for y in ys] + [False] * len(residuals))
    ty = fp.backward(u)[:num_y]
    tres = [None] * len(residuals)
    if any(is_inexact(r.dtype) for r in residuals):
        tres = emit_jvp(b, quiet(body), ins, tangents)[1][num_y:]   # (dead code unless grad_fn's ops are differentiated)
    return outs, list(ty) + list(tres)


def _recompute_jvp(b, tangents, ins, *, body, num_y):
    """tk.recompute: forward mode saves nothing, so the region is the region of its forward mode,
    (inputs, tangents) -> (outputs, their tangents, saved values, theirs): a gradient of the JVP still
    recomputes it, and tk.linearize keeps only its inputs for the tangent pass."""
    active = [t is not None for t in tangents]
    want = tangent_outputs(body, active)
    joint = _jvp_graph(body, active, want, b.source)
    n = len(body.outputs)
    ty = [i for i in range(num_y) if want[i]]
    ts = [i for i in range(num_y, n) if want[i]]
    t_at = {i: n + k for k, i in enumerate([i for i in range(n) if want[i]])}
    order = list(range(num_y)) + [t_at[i] for i in ty] + list(range(num_y, n)) + [t_at[i] for i in ts]
    region = Graph(joint.inputs, joint.eqns, tuple(joint.outputs[k] for k in order))
    res = _bind(b, A.recompute_call, list(ins) + _present(tangents), dict(body=region, num_y=num_y + len(ty)))
    outs = res[:num_y] + res[num_y + len(ty):n + len(ty)]
    touts = [None] * n
    for k, i in enumerate(ty + ts):
        touts[i] = res[num_y + k] if k < len(ty) else res[n + k]
    return outs, touts


def _reversible_jvp(b, tangents, ins, *, body, f, g, num_f):
    """tk.reversible: forward mode saves nothing anyway; the block is its forward's ops."""
    return emit_jvp(b, body, ins, tangents)


def _cond_jvp(b, tangents, ins, *, true, false):
    """One cond over the two branches' forward modes: the branch taken computes its tangents too."""
    operands, tops = list(ins[1:]), list(tangents[1:])
    active = [t is not None for t in tops]
    want = [x or y for x, y in zip(tangent_outputs(true, active), tangent_outputs(false, active))]
    branches = [_jvp_graph(g, active, want, b.source) for g in (true, false)]
    res = _bind(b, C.cond, [ins[0]] + operands + _present(tops), dict(true=branches[0], false=branches[1]))
    n = len(true.outputs)
    it = iter(res[n:])
    return res[:n], [next(it) if w else None for w in want]


def _carry_fixed_point(step: Callable[[list[bool]], list[bool]], start: Sequence[bool]) -> list[bool]:
    """The carries that have tangents: those that start with one, or that the body gives one (given
    which carries have them), until nothing changes."""
    flags = list(start)
    while True:
        new = [a or o for a, o in zip(flags, step(flags))]
        if new == flags:
            return flags
        flags = new


def _scan_jvp(b, tangents, ins, *, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
    """One scan over (primal, tangent) carries, its body the body's forward mode: consts, their
    tangents; carries, theirs; sequences, theirs (in each group, tangents of the active ones)."""
    nc, nk = num_consts, num_carry
    n_y = len(body.outputs) - nk
    layout = C.ScanLayout(nc, nk)
    tp = layout.split(tangents)
    tc, tk, tx = tp.consts, tp.carry, tp.xs
    ca, xa = [t is not None for t in tc], [t is not None for t in tx]
    ka = _carry_fixed_point(lambda k: tangent_outputs(body, ca + k + xa)[:nk], [t is not None for t in tk])
    want = tangent_outputs(body, ca + ka + xa)
    ya = want[nk:]
    n_ca, n_ka = sum(ca), sum(ka)
    parts = layout.split(ins)
    consts, init, xs = parts.consts, parts.carry, parts.xs
    paired = C.ScanLayout(nc + n_ca, nk + n_ka)   # (each group followed by its tangents)
    n_xs = len(xs)

    def step(bb, *a):
        g = paired.split(a)
        p_c, t_c = g.consts[:nc], g.consts[nc:]
        p_k, t_k = g.carry[:nk], g.carry[nk:]
        p_x, t_x = g.xs[:n_xs], g.xs[n_xs:]
        tans = _spread(t_c, ca) + _spread(t_k, ka) + _spread(t_x, xa)
        outs, touts = emit_jvp(bb, body, list(p_c) + list(p_k) + list(p_x), tans)
        carry, ys = outs[:nk], outs[nk:]
        return (carry + [_instantiate(touts[i], carry[i]) for i in range(nk) if ka[i]]
                + ys + [_instantiate(touts[nk + j], ys[j]) for j in range(n_y) if ya[j]])

    bi = layout.split([v.aval for v in body.inputs])
    avals = paired.join(consts=bi.consts + _pick(bi.consts, ca), carry=bi.carry + _pick(bi.carry, ka),
                        xs=bi.xs + _pick(bi.xs, xa))
    g = build_graph(step, avals, source=b.source)
    t_init = [_instantiate(t, x) for t, x, a in zip(tk, init, ka) if a]
    res = _bind(b, C.scan, paired.join(consts=consts + _present(tc), carry=init + t_init, xs=xs + _present(tx)),
                dict(body=g, num_consts=paired.num_consts, num_carry=paired.num_carry, length=length, reverse=reverse, record=record,
                     checkpoint=checkpoint))
    n_ya = sum(ya)
    carry, t_carry = res[:nk], res[nk:nk + n_ka]
    ys, t_ys = res[nk + n_ka:nk + n_ka + n_y], res[nk + n_ka + n_y:nk + n_ka + n_y + n_ya]
    outs, touts = carry + ys, _spread(t_carry, ka) + _spread(t_ys, ya)
    if record:   # the recorded carries (or the first sweep's slots), then with a checkpoint the last step's carry
        rest = res[nk + n_ka + n_y + n_ya:]
        for _ in range(1 if checkpoint is None else 2):
            outs, touts = outs + rest[:nk], touts + _spread(rest[nk:nk + n_ka], ka)
            rest = rest[nk + n_ka:]
    return outs, touts


def _pick(values, flags) -> list:
    """The `values` whose flag is set."""
    return [v for v, f in zip(values, flags) if f]


def _spread(values, flags) -> list:
    """One entry per flag: the next of `values` where it is set, None elsewhere."""
    it = iter(values)
    return [next(it) if f else None for f in flags]


def _with_unused(g: Graph, at: int, avals) -> Graph:
    """g with unused inputs of `avals` inserted before input `at`."""
    return Graph(g.inputs[:at] + tuple(Var(a) for a in avals) + g.inputs[at:], g.eqns, g.outputs)


def _while_jvp(b, tangents, ins, *, cond, body, num_consts, checkpoint=None):
    """One while loop over (primal, tangent) carries: no tape, whatever the trip count. The condition
    reads the primal carries only."""
    nc = num_consts
    layout = C.WhileLayout(nc)
    parts, tp = layout.split(ins), layout.split(tangents)
    nk = len(parts.carry)
    tc, tk = tp.consts, tp.carry
    ca = [t is not None for t in tc]
    ka = _carry_fixed_point(lambda k: tangent_outputs(body, ca + k), [t is not None for t in tk])
    n_ca, n_ka = sum(ca), sum(ka)

    paired = C.WhileLayout(nc + n_ca)   # (each group followed by its tangents)

    def step(bb, *a):
        g = paired.split(a)
        p_c, t_c = g.consts[:nc], g.consts[nc:]
        p_k, t_k = g.carry[:nk], g.carry[nk:]
        outs, touts = emit_jvp(bb, body, p_c + p_k, _spread(t_c, ca) + _spread(t_k, ka))
        return outs + [_instantiate(touts[i], outs[i]) for i in range(nk) if ka[i]]

    bi = layout.split([v.aval for v in body.inputs])
    avals = paired.join(consts=bi.consts + _pick(bi.consts, ca), carry=bi.carry + _pick(bi.carry, ka))
    g = build_graph(step, avals, source=b.source)
    ci = layout.split(cond.inputs)
    test = Graph(tuple(paired.join(consts=ci.consts + [Var(a) for a in _pick(bi.consts, ca)],
                                   carry=ci.carry + [Var(a) for a in _pick(bi.carry, ka)])), cond.eqns, cond.outputs)
    consts, init = parts.consts, parts.carry
    t_init = [_instantiate(t, x) for t, x, a in zip(tk, init, ka) if a]
    res = _bind(b, C.while_, paired.join(consts=consts + _present(tc), carry=init + t_init),
                dict(cond=verify(test), body=g, num_consts=paired.num_consts, checkpoint=checkpoint))
    return res[:nk] + [res[-1]], _spread(res[nk:nk + n_ka], ka) + [None]


def _revolve_jvp(b, tangents, ins, *, body, back, checkpoint, num_consts, num_carry, num_state, dx, length, reverse,
                 resume=False, num_ys=None):
    """The backward of a checkpointed scan or of a while loop (forward over reverse: Hessian-vector
    products through loops): the same schedule over (primal, tangent) carries and backward states,
    with the forward mode of the body and of the backward step. With `resume`, the carry operands
    are two groups (the first sweep's slots, the last step's carry), each followed by its tangents."""
    nc, nk, ns = num_consts, num_carry, num_state
    layout = C.RevolveLayout.of(dict(body=body, num_consts=nc, num_carry=nk, num_state=ns, length=length,
                                     resume=resume, num_ys=num_ys))
    n_y = layout.num_ys
    op, tp = layout.split(ins), layout.split(tangents)
    n_xs = len(op.xs)
    consts, xs, trip, state, ct_ys = op.consts, op.xs, op.trip, op.state, op.ct_ys
    inits = [op.snaps, op.carry] if resume else [op.carry]
    tc = tp.consts
    t_inits = [tp.snaps, tp.carry] if resume else [tp.carry]
    tk = [next((t[i] for t in t_inits if t[i] is not None), None) for i in range(nk)]
    tx, ts, tcy = tp.xs, tp.state, tp.ct_ys
    ca, ya = [t is not None for t in tc], [t is not None for t in tcy]
    xa, sa = [t is not None for t in tx], [t is not None for t in ts]
    while True:
        ka = _carry_fixed_point(lambda k: tangent_outputs(body, ca + k + xa)[:nk], [t is not None for t in tk])
        sa = _carry_fixed_point(lambda s: tangent_outputs(back, ca + s + ka + xa + ya)[:ns], sa)
        dxa = tangent_outputs(back, ca + sa + ka + xa + ya)[ns:]
        # a backward sequence output's tangent is stored like a sequence's: that sequence needs one
        grown = [a or any(d and j == i for d, j in zip(dxa, dx)) for i, a in enumerate(xa)]
        if grown == xa:
            break
        xa = grown
    n_ca, n_ka, n_xa, n_sa = sum(ca), sum(ka), sum(xa), sum(sa)

    def fwd_step(bb, *a):
        p_c, a = a[:nc], a[nc:]
        t_c, a = a[:n_ca], a[n_ca:]
        p_k, a = a[:nk], a[nk:]
        t_k, a = a[:n_ka], a[n_ka:]
        p_x, t_x = a[:n_xs], a[n_xs:]
        outs, touts = emit_jvp(bb, body, list(p_c) + list(p_k) + list(p_x), _spread(t_c, ca) + _spread(t_k, ka) + _spread(t_x, xa))
        carry = outs[:nk]   # (the re-runs need the carry only: the ys' cotangents are operands, num_ys of them)
        return carry + [_instantiate(touts[i], carry[i]) for i in range(nk) if ka[i]]

    def back_step(bb, *a):
        p_c, a = a[:nc], a[nc:]
        t_c, a = a[:n_ca], a[n_ca:]
        p_s, a = a[:ns], a[ns:]
        t_s, a = a[:n_sa], a[n_sa:]
        p_k, a = a[:nk], a[nk:]
        t_k, a = a[:n_ka], a[n_ka:]
        p_x, a = a[:n_xs], a[n_xs:]
        t_x, a = a[:n_xa], a[n_xa:]
        p_y, t_y = a[:n_y], a[n_y:]
        outs, touts = emit_jvp(bb, back, list(p_c) + list(p_s) + list(p_k) + list(p_x) + list(p_y),
                               _spread(t_c, ca) + _spread(t_s, sa) + _spread(t_k, ka) + _spread(t_x, xa) + _spread(t_y, ya))
        st, cx = outs[:ns], outs[ns:]
        return (st + [_instantiate(touts[i], st[i]) for i in range(ns) if sa[i]]
                + cx + [_instantiate(touts[ns + j], cx[j]) for j in range(len(dx)) if dxa[j]])

    sel = lambda vs, flags: [v.aval for v, f in zip(vs, flags) if f]   # noqa: E731
    bi = back.inputs
    body_in = C.ScanLayout(nc, nk).split(body.inputs)   # (the body reads a step as a scan's does)
    c_av, k_av = [v.aval for v in body_in.consts], [v.aval for v in body_in.carry]
    x_av = [v.aval for v in body_in.xs]
    fwd_g = build_graph(fwd_step, c_av + sel(body_in.consts, ca) + k_av + sel(body_in.carry, ka)
                        + x_av + sel(body_in.xs, xa), source=b.source)
    s_in, y_in = bi[nc:nc + ns], bi[nc + ns + nk + n_xs:]
    back_g = build_graph(back_step, c_av + sel(body_in.consts, ca) + [v.aval for v in s_in] + sel(s_in, sa) + k_av
                         + sel(body_in.carry, ka) + x_av + sel(body_in.xs, xa)
                         + [v.aval for v in y_in] + sel(y_in, ya), source=b.source)
    x_pos = {i: n_xs + k for k, i in enumerate(i for i in range(n_xs) if xa[i])}   # a sequence's tangent in xs'
    new_dx = tuple(dx) + tuple(x_pos[i] for i, d in zip(dx, dxa) if d)
    carries = [init + [_instantiate(t, v) for t, v, a in zip(t_init, init, ka) if a]
               for init, t_init in zip(inits, t_inits)]   # (each group followed by its tangents)
    t_xs = [_instantiate(t, x) for t, x, a in zip(tx, xs, xa) if a]
    t_state = [_instantiate(t, x) for t, x, a in zip(ts, state, sa) if a]
    paired = C.RevolveLayout(nc + n_ca, nk + n_ka, ns + n_sa, n_y + sum(ya), layout.while_loop, resume)
    res = _bind(b, C.scan_revolve, paired.join(consts=consts + _present(tc), snaps=carries[0] if resume else [],
                                               carry=carries[-1], trip=trip, xs=xs + t_xs, state=state + t_state,
                                               ct_ys=ct_ys + _present(tcy)),
                dict(body=fwd_g, back=back_g, checkpoint=checkpoint, num_consts=paired.num_consts,
                     num_carry=paired.num_carry, num_state=paired.num_state, dx=new_dx, length=length, reverse=reverse,
                     resume=resume, num_ys=paired.num_ys))
    outs = res[:ns] + res[ns + n_sa:ns + n_sa + len(dx)]
    touts = _spread(res[ns:ns + n_sa], sa) + _spread(res[ns + n_sa + len(dx):], dxa)
    return outs, touts


RULES: dict[Any, Callable] = {
    A.custom_vjp_call: _custom_jvp,
    A.recompute_call: _recompute_jvp,
    A.reversible_call: _reversible_jvp,
    C.cond: _cond_jvp,
    C.scan: _scan_jvp,
    C.while_: _while_jvp,
    C.scan_revolve: _revolve_jvp,
}


# ----------------------------------------------------------------------------- tk.linearize: partial evaluation


@dataclass(frozen=True)
class SplitJVP:
    """tk.linearize's two graphs. `primal`: the primal inputs -> the outputs, then the residuals;
    `linear`: the residuals (saved), then one tangent per active input -> one tangent per output.
    The linear graph reads no primal input: what it needs of the point is in the residuals."""

    primal: Graph
    linear: Graph
    num_outputs: int
    residuals: tuple[Var, ...]

    @property
    def residual_bytes(self) -> int:
        return int(sum(v.aval.nbytes for v in self.residuals))

    def __str__(self) -> str:
        return (f"primal:\n{self.primal}\n\nlinear (saved: {len(self.residuals)} residuals, {self.residual_bytes} bytes):\n"
                f"{self.linear}")


def split_linear(joint: JointJVP) -> SplitJVP:
    """The joint graph split by dependence on its tangent inputs (partial evaluation): the primal
    graph runs the equations that read no tangent, the linear graph the others."""
    g = passes.simplify(joint.graph)
    n_p, n_out = joint.num_primals, joint.num_outputs
    unknown_in = [False] * n_p + [True] * (len(g.inputs) - n_p)
    split = partial_eval(g, unknown_in, [False] * n_out + [True] * (len(g.outputs) - n_out))
    if any(split.out_unknown[:n_out]):
        raise IRError("tk.linearize: a primal output depends on a tangent (internal error)")
    primal = passes.simplify(Graph(g.inputs[:n_p], tuple(split.known), g.outputs[:n_out] + tuple(split.residuals)))
    linear = passes.simplify(Graph(tuple(split.residuals) + g.inputs[n_p:], tuple(split.unknown), g.outputs[n_out:],
                                   input_notes=("saved",) * len(split.residuals) + ("tangent",) * (len(g.inputs) - n_p)))
    return SplitJVP(verify(primal), verify(linear), n_out, tuple(split.residuals))


@dataclass
class _Split:
    """A graph's equations split by dependence on its `unknown` inputs: `known` reads none of them,
    `unknown` computes the outputs that depend on them (out_unknown) from them and the `residuals`,
    known values (inputs, or values the known equations make)."""

    known: list[Eqn]
    unknown: list[Eqn]
    out_unknown: list[bool]
    residuals: list[Var]


def partial_eval(graph: Graph, unknown_in: Sequence[bool], force: Sequence[bool] | None = None) -> _Split:
    """Split `graph` by dependence on the inputs marked unknown (tangents). Outputs marked in
    `force` are unknown even when they are known (a loop carry whose tangent changes): a residual
    passed through. A constant the unknown side reads is made again there rather than saved."""
    unknown = {v for v, u in zip(graph.inputs, unknown_in) if u}
    known_eqns: list[Eqn] = []
    unknown_eqns: list[Eqn] = []
    for e in graph.eqns:
        flags = [v in unknown for v in e.inputs]
        if not any(flags):
            known_eqns.append(e)
            continue
        k, u, out_u = PARTIAL_EVAL.get(e.primitive, _pe_whole)(e, flags)
        known_eqns += k
        unknown_eqns += u
        unknown.update(v for v, f in zip(e.outputs, out_u) if f)
    out_unknown = [v in unknown or bool(force and force[i]) for i, v in enumerate(graph.outputs)]
    defined = {v for v, u in zip(graph.inputs, unknown_in) if u} | {v for e in unknown_eqns for v in e.outputs}
    producer = {v: e for e in known_eqns for v in e.outputs}
    needed = [v for e in unknown_eqns for v in e.inputs] + [v for v, f in zip(graph.outputs, out_unknown) if f]
    residuals: list[Var] = []
    copied: list[Eqn] = []
    seen: set[Var] = set()
    for v in needed:
        if v in defined or v in seen:
            continue
        seen.add(v)
        p = producer.get(v)
        if p is not None and not p.inputs and not p.primitive.has_effects(**p.params):
            copied.append(p)
        else:
            residuals.append(v)
    return _Split(known_eqns, copied + unknown_eqns, out_unknown, residuals)


def _split_graphs(graph: Graph, split: _Split, unknown_in: Sequence[bool]) -> tuple[Graph, Graph]:
    """(known graph: known inputs -> known outputs, residuals; unknown graph: residuals, unknown
    inputs -> unknown outputs), both verified."""
    k_in = tuple(v for v, u in zip(graph.inputs, unknown_in) if not u)
    u_in = tuple(v for v, u in zip(graph.inputs, unknown_in) if u)
    k_out = tuple(v for v, f in zip(graph.outputs, split.out_unknown) if not f)
    u_out = tuple(v for v, f in zip(graph.outputs, split.out_unknown) if f)
    known = passes.dce(Graph(k_in, tuple(split.known), k_out + tuple(split.residuals)))
    unknown = passes.dce(Graph(tuple(split.residuals) + u_in, tuple(split.unknown), u_out))
    return verify(known), verify(unknown)


def _project(graph: Graph, unknown_in: Sequence[bool], keep: Sequence[bool]) -> Graph:
    """graph restricted to its known inputs and the outputs in `keep`, which must not depend on the
    unknown ones."""
    g = passes.dce(Graph(graph.inputs, graph.eqns, tuple(v for v, k in zip(graph.outputs, keep) if k)))
    return verify(Graph(tuple(v for v, u in zip(g.inputs, unknown_in) if not u), g.eqns, g.outputs))


def _zeros_eqn(aval: Aval) -> Eqn:
    return Eqn(full, (), (Var(aval),), dict(shape=aval.shape, dtype=aval.dtype, value=np.asarray(0, aval.dtype).item()))


def _quiet_eqn(e: Eqn) -> Eqn:
    params = {k: quiet(p) if isinstance(p, Graph) else p for k, p in e.params.items()}
    return e if all(params[k] is e.params[k] for k in params) else Eqn(e.primitive, e.inputs, e.outputs, params, e.source)


def _fresh(vs) -> tuple[Var, ...]:
    return tuple(Var(v.aval) for v in vs)


# -- which outputs of an equation depend on which inputs (data dependence, through sub-graphs)


def depends(graph: Graph, unknown_in: Sequence[bool]) -> list[bool]:
    """Which outputs of `graph` depend on its inputs marked unknown."""
    unknown = {v for v, u in zip(graph.inputs, unknown_in) if u}
    for e in graph.eqns:
        flags = [v in unknown for v in e.inputs]
        if any(flags):
            unknown.update(v for v, f in zip(e.outputs, _eqn_depends(e, flags)) if f)
    return [v in unknown for v in graph.outputs]


def _eqn_depends(e: Eqn, flags: Sequence[bool]) -> list[bool]:
    p, prim = e.params, e.primitive
    if isinstance(prim, A.Call):
        return depends(p["body"], flags)
    if prim is C.cond:
        if flags[0]:
            return [True] * len(e.outputs)
        return [a or b for a, b in zip(depends(p["true"], flags[1:]), depends(p["false"], flags[1:]))]
    if prim is C.scan:
        nk = p["num_carry"]
        f = C.ScanLayout.of(p).split(flags)
        cu, xu = f.consts, f.xs
        ku = _carry_fixed_point(lambda k: depends(p["body"], cu + k + xu)[:nk], f.carry)
        out = depends(p["body"], cu + ku + xu)
        return ku + out[nk:] + (ku * (1 if p.get("checkpoint") is None else 2) if p["record"] else [])
    if prim is C.while_:
        f = C.WhileLayout.of(p).split(flags)
        cu = f.consts
        ku = _carry_fixed_point(lambda k: depends(p["body"], cu + k), f.carry)
        if depends(p["cond"], cu + ku)[0]:
            return [True] * len(e.outputs)
        return ku + [False]
    if prim is C.scan_revolve:
        nk, ns = p["num_carry"], p["num_state"]
        body, back = p["body"], p["back"]
        layout = C.RevolveLayout.of(p)
        f = layout.split(flags)
        if any(f.trip):
            return [True] * len(e.outputs)
        cu, xu, yu = f.consts, f.xs, f.ct_ys
        k0 = [a or b for a, b in zip(f.carry, f.snaps)] if layout.resume else f.carry
        ku = _carry_fixed_point(lambda k: depends(body, cu + k + xu)[:nk], k0)
        su = _carry_fixed_point(lambda s: depends(back, cu + s + ku + xu + yu)[:ns], f.state)
        return su + depends(back, cu + su + ku + xu + yu)[ns:]
    return [True] * len(e.outputs)


# -- rules: rule(eqn, unknown flags of its inputs) -> (known equations, unknown equations, out_unknown)


def _pe_whole(e: Eqn, flags):
    """An equation that reads a tangent: the linear graph runs it. When some of its outputs do not
    depend on the tangents (a loop of primal and tangent carries without a rule of its own), or it
    holds prints of primal values, the primal graph runs it too, with zero tangents, for those (and
    the linear graph's copy prints nothing). A print of a tangent prints in the linear graph."""
    out_u = _eqn_depends(e, flags)
    known = []
    if not all(out_u) or (e.primitive.has_effects(**e.params) and e.primitive is not A.print_):
        zeros = [_zeros_eqn(v.aval) for v, f in zip(e.inputs, flags) if f]
        it = iter(z.outputs[0] for z in zeros)
        inputs = tuple(next(it) if f else v for v, f in zip(e.inputs, flags))
        outputs = tuple(Var(v.aval) if u else v for v, u in zip(e.outputs, out_u))
        known = zeros + [Eqn(e.primitive, inputs, outputs, e.params, e.source)]
    if not any(out_u):
        return known, [], out_u
    outputs = tuple(v if u else Var(v.aval) for v, u in zip(e.outputs, out_u))
    return known, [_quiet_eqn(Eqn(e.primitive, e.inputs, outputs, e.params, e.source))], out_u


def _pe_recompute(e: Eqn, flags):
    """A tk.recompute region: the primal graph runs the primal part; the linear graph runs the
    region again from its inputs (what the primal graph saves of it) for the tangents."""
    body, num_y = e.params["body"], e.params["num_y"]
    out_u = depends(body, flags)
    known = []
    if not all(out_u):
        keep = [not u for u in out_u]
        known = [Eqn(e.primitive, tuple(v for v, f in zip(e.inputs, flags) if not f),
                     tuple(v for v, k in zip(e.outputs, keep) if k),
                     dict(body=_project(body, flags, keep), num_y=sum(keep[:num_y])), e.source)]
    region = quiet(passes.dce(Graph(body.inputs, body.eqns, tuple(v for v, u in zip(body.outputs, out_u) if u))))
    unknown = [Eqn(e.primitive, e.inputs, tuple(v for v, u in zip(e.outputs, out_u) if u),
                   dict(body=region, num_y=sum(out_u[:num_y])), e.source)] if any(out_u) else []
    return known, unknown, out_u


def _pe_cond(e: Eqn, flags):
    """Each branch split alike; the primal cond also returns the residuals of the branch taken (zeros
    in the other branch's slots), the tangent cond reads them."""
    if flags[0]:
        return _pe_whole(e, flags)
    true, false = e.params["true"], e.params["false"]
    op_u = list(flags[1:])
    out_u = [a or b for a, b in zip(depends(true, op_u), depends(false, op_u))]
    splits = [partial_eval(g, op_u, out_u) for g in (true, false)]
    (kt, ut), (kf, uf) = [_split_graphs(g, s, op_u) for g, s in zip((true, false), splits)]
    res_t, res_f = splits[0].residuals, splits[1].residuals
    n_k = len(out_u) - sum(out_u)
    zt, zf = [_zeros_eqn(v.aval) for v in res_t], [_zeros_eqn(v.aval) for v in res_f]
    known_t = Graph(kt.inputs, kt.eqns + tuple(zf), kt.outputs + tuple(z.outputs[0] for z in zf))
    known_f = Graph(kf.inputs, kf.eqns + tuple(zt), kf.outputs[:n_k] + tuple(z.outputs[0] for z in zt) + kf.outputs[n_k:])
    unknown_t = Graph(ut.inputs[:len(res_t)] + _fresh(res_f) + ut.inputs[len(res_t):], ut.eqns, ut.outputs)
    unknown_f = Graph(_fresh(res_t) + uf.inputs, uf.eqns, uf.outputs)
    r_t, r_f = _fresh(res_t), _fresh(res_f)
    pred, ops_in = e.inputs[0], e.inputs[1:]
    known = Eqn(C.cond, (pred,) + tuple(v for v, u in zip(ops_in, op_u) if not u),
                tuple(v for v, u in zip(e.outputs, out_u) if not u) + r_t + r_f,
                dict(true=verify(known_t), false=verify(known_f)), e.source)
    unknown = Eqn(C.cond, (pred,) + r_t + r_f + tuple(v for v, u in zip(ops_in, op_u) if u),
                  tuple(v for v, u in zip(e.outputs, out_u) if u), dict(true=verify(unknown_t), false=verify(unknown_f)),
                  e.source)
    return [known], [unknown] if any(out_u) else [], out_u


def _pe_scan(e: Eqn, flags):
    """A primal scan that also stacks the residuals of each step, and a tangent scan over them (a
    residual that is a const of the body is passed as a const, a sequence as that sequence)."""
    p = e.params
    body, nc, nk, record = p["body"], p["num_consts"], p["num_carry"], p["record"]
    n_y = len(body.outputs) - nk
    layout = C.ScanLayout(nc, nk)
    f = layout.split(flags)
    cu, xu = f.consts, f.xs
    ku = _carry_fixed_point(lambda k: depends(body, cu + k + xu)[:nk], f.carry)
    body_u = layout.join(consts=cu, carry=ku, xs=xu)
    split = partial_eval(body, body_u, ku + [False] * n_y)
    known_body, unknown_body = _split_graphs(body, split, body_u)
    yu = split.out_unknown[nk:]
    res = split.residuals
    body_in = layout.split(body.inputs)
    const_at = {v: i for i, v in enumerate(body_in.consts)}
    x_at = {v: i for i, v in enumerate(body_in.xs)}
    res_const = [r for r in res if r in const_at]
    res_x = [r for r in res if r in x_at]
    res_stack = [r for r in res if r not in const_at and r not in x_at]
    n_kout = len(known_body.outputs) - len(res)
    by_res = dict(zip(res, known_body.outputs[n_kout:]))
    k_body = Graph(known_body.inputs, known_body.eqns, known_body.outputs[:n_kout] + tuple(by_res[r] for r in res_stack))
    length = p["length"]
    stacked = tuple(Var(Aval((length,) + r.aval.shape, r.aval.dtype)) for r in res_stack)
    ins = layout.split(e.inputs)
    consts, init, xs = tuple(ins.consts), tuple(ins.carry), tuple(ins.xs)
    carry_out, ys_out = e.outputs[:nk], e.outputs[nk:nk + n_y]
    recs = e.outputs[nk + n_y:]
    rku = ku * (1 if p.get("checkpoint") is None else 2)   # (the recorded slots, then the last step's carry)
    pick = lambda vs, flags, want: tuple(v for v, f in zip(vs, flags) if f == want)   # noqa: E731
    params = dict(length=length, reverse=p["reverse"], record=record, checkpoint=p.get("checkpoint"))
    known = [Eqn(C.scan, pick(consts, cu, False) + pick(init, ku, False) + pick(xs, xu, False),
                 pick(carry_out, ku, False) + pick(ys_out, yu, False) + stacked + (pick(recs, rku, False) if record else ()),
                 dict(params, body=verify(k_body), num_consts=cu.count(False), num_carry=ku.count(False)), e.source)]
    if not any(ku) and not any(yu):
        return known, [], [False] * len(e.outputs)
    u_body_in = unknown_body.inputs[len(res):]     # unknown consts, carries, sequences, in order
    n_uc, n_uk = sum(cu), sum(ku)
    u_inputs = (tuple(res_const) + u_body_in[:n_uc] + u_body_in[n_uc:n_uc + n_uk] + tuple(res_stack) + tuple(res_x)
                + u_body_in[n_uc + n_uk:])
    u_body = Graph(u_inputs, unknown_body.eqns, unknown_body.outputs)
    unknown = [Eqn(C.scan, tuple(consts[const_at[r]] for r in res_const) + pick(consts, cu, True) + pick(init, ku, True)
                   + stacked + tuple(xs[x_at[r]] for r in res_x) + pick(xs, xu, True),
                   pick(carry_out, ku, True) + pick(ys_out, yu, True) + (pick(recs, rku, True) if record else ()),
                   dict(params, body=verify(u_body), num_consts=len(res_const) + n_uc, num_carry=n_uk), e.source)]
    return known, unknown, ku + yu + (rku if record else [])


def _pe_while(e: Eqn, flags):
    """The primal graph runs the loop over the primal carries; the linear graph runs the whole loop
    again (a run-time trip count: the residuals of its steps cannot be stacked ahead of time)."""
    p = e.params
    f = C.WhileLayout.of(p).split(flags)
    cu = f.consts
    ku = _carry_fixed_point(lambda k: depends(p["body"], cu + k), f.carry)
    if depends(p["cond"], cu + ku)[0]:
        return _pe_whole(e, flags)
    u_in = cu + ku
    keep = [not u for u in ku]
    known = Eqn(C.while_, tuple(v for v, u in zip(e.inputs, u_in) if not u),
                tuple(v for v, k in zip(e.outputs[:-1], keep) if k) + (e.outputs[-1],),
                dict(cond=_project(p["cond"], u_in, [True]), body=_project(p["body"], u_in, keep), num_consts=cu.count(False),
                     checkpoint=p.get("checkpoint")), e.source)
    unknown = _quiet_eqn(Eqn(C.while_, e.inputs, tuple(v if u else Var(v.aval) for v, u in zip(e.outputs[:-1], ku))
                             + (Var(e.outputs[-1].aval),), p, e.source))
    return [known], [unknown] if any(ku) else [], ku + [False]


PARTIAL_EVAL: dict[Any, Callable] = {
    A.recompute_call: _pe_recompute,
    C.cond: _pe_cond,
    C.scan: _pe_scan,
    C.while_: _pe_while,
}
