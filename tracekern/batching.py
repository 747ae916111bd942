"""Batching, Graph -> Graph (tk.vmap's transform): batch_graph(graph, batched, size) is `size` runs
of `graph` at once, the inputs marked batched carrying one more axis, first, with one lane per run.

Each equation with a batched operand goes through its primitive's batching rule (Primitive.batch,
with the helpers of primitives/lanes.py); one without keeps its form and stays unbatched, so work
that does not depend on the batch is done once. The rules of the higher-order primitives (cond,
scan, while, scan_revolve, and the annotations' calls) are here, in RULES, because they batch
their sub-graphs with this module: a cond with a batched predicate becomes a select of both
branches, a while loop with one runs until every lane is done with the finished lanes masked (both
differentiate as each lane's taken branch: select_branches)."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import autodiff
from .errors import IRError
from .ir import Aval, Graph, is_inexact
from .primitives import annotations as A
from .primitives import control as C
from .primitives import lanes, ops
from .trace import Builder, aval_of, build_graph

# ----------------------------------------------------------------------------- the transform


def rule_for(prim) -> Callable:
    """The batching rule of a primitive: RULES' for a higher-order one, else its own `batch`."""
    return RULES.get(prim, prim.batch)


def batched_aval(aval: Aval, size: int) -> Aval:
    return Aval((size,) + tuple(aval.shape), aval.dtype)


def batch_into(builder: Builder, graph: Graph, args: Sequence[Any], batched: Sequence[bool]) -> tuple[list, list[bool]]:
    """Emit `graph`, batched, into `builder` on `args` (its values; those marked batched have the
    batch axis first). Returns its outputs and whether each is batched."""
    env: dict = {v: (x, bool(b)) for v, x, b in zip(graph.inputs, args, batched)}
    for e in graph.eqns:
        vals = [env[v][0] for v in e.inputs]
        flags = [env[v][1] for v in e.inputs]
        with builder.at(e.source):
            if any(flags):
                outs, out_flags = rule_for(e.primitive)(vals, flags, **e.params)
                _check_rule(e, outs, out_flags, lanes.size_of(vals, flags))
            else:
                outs = builder.bind(e.primitive, *vals, **e.params)
                outs = list(outs) if e.primitive.multiple_results else [outs]
                out_flags = [False] * len(outs)
        env.update((v, (x, b)) for v, x, b in zip(e.outputs, outs, out_flags))
    return [env[v][0] for v in graph.outputs], [env[v][1] for v in graph.outputs]


def _check_rule(e, outs, flags, size: int) -> None:
    """A rule's outputs are its equation's, with a batch axis where it says so (or an internal error)."""
    if len(outs) != len(e.outputs) or len(flags) != len(e.outputs):
        raise IRError(f"the batching rule of {e.primitive.name} gave {len(outs)} outputs for {len(e.outputs)}")
    for v, x, b in zip(e.outputs, outs, flags):
        want = batched_aval(v.aval, size) if b else v.aval
        if aval_of(x) != want:
            raise IRError(f"the batching rule of {e.primitive.name} gave {aval_of(x)} for an output of {v.aval} "
                          f"{'batched' if b else 'unbatched'} (from {e.source})")


def batch_graph(graph: Graph, batched: Sequence[bool], size: int,
                out_batched: Sequence[bool | None] | None = None) -> tuple[Graph, list[bool]]:
    """The graph of `size` lanes of `graph`, whose inputs marked `batched` have the batch axis first;
    and which of its outputs are batched. out_batched[i]: True makes output i batched (an unbatched
    one broadcast to every lane), False makes it unbatched by summing its lanes (the cotangent of
    an unbatched value), None leaves it as it comes."""
    flags_out: list[bool] = []

    def batched_fn(b, *vals):
        outs, flags = batch_into(b, graph, vals, batched)
        if out_batched is not None:
            for i, want in enumerate(out_batched):
                if want and not flags[i]:
                    outs[i], flags[i] = lanes.broadcast(outs[i], size), True
                elif want is False and flags[i]:
                    outs[i], flags[i] = ops.reduce_sum(outs[i], axes=(0,)), False
        flags_out.extend(flags)
        return outs

    avals = [batched_aval(v.aval, size) if b else v.aval for v, b in zip(graph.inputs, batched)]
    return build_graph(batched_fn, avals), flags_out


def _fixpoint(step: Callable[[list], list], flags: list) -> list:
    """The least flags >= `flags` that step maps to themselves (a loop's carry: batched if its
    initial value is or if an iteration makes it so)."""
    while True:
        new = [a or b for a, b in zip(flags, step(flags))]
        if new == flags:
            return flags
        flags = new


def _as(args: Sequence, have: Sequence[bool], want: Sequence[bool], size: int) -> list:
    """Operands given batched as `have`, broadcast where `want` asks for a batch axis."""
    return [lanes.broadcast(x, size) if w and not h else x for x, h, w in zip(args, have, want)]


def _rows_to_front(xs: Sequence, flags: Sequence[bool]) -> list:
    """Stacked (length, batch, ...) results of a loop to batch-first (batch, length, ...)."""
    return [lanes.moveaxis(x, 1, 0) if b else x for x, b in zip(xs, flags)]


def _rows_inside(xs: Sequence, flags: Sequence[bool]) -> list:
    """Batched sequences a loop slices along axis 0: the batch axis second, so a slice is a batched row."""
    return [lanes.moveaxis(x, 0, 1) if b else x for x, b in zip(xs, flags)]


# ----------------------------------------------------------------------------- rules of higher-order primitives


def _recompute(args, batched, *, body, num_y):
    """tk.recompute: the region batched keeps its meaning (the backward recomputes the batched region)."""
    body_b, out = batch_graph(body, batched, lanes.size_of(args, batched))
    return list(ops.recompute_call(*args, body=body_b, num_y=num_y)), out


def _custom_vjp(args, batched, *, body, bwd, num_y, num_x, var_positions, fun_name):
    """tk.custom_gradient: the forward and grad_fn both batched. grad_fn's cotangents of an operand
    without a batch axis are summed over the lanes (that operand is shared by all of them), and those
    of a batched operand get one (a lane whose grad_fn gives no batched value shares it)."""
    size = lanes.size_of(args, batched)
    body_b, out = batch_graph(body, batched, size)
    targets = list(batched[:num_x]) + [batched[p] for p in var_positions]
    bwd_b, _ = batch_graph(bwd, out, size, out_batched=[bool(t) for t in targets])
    outs = ops.custom_vjp_call(*args, body=body_b, bwd=bwd_b, num_y=num_y, num_x=num_x,
                               var_positions=var_positions, fun_name=fun_name)
    return list(outs), out


def _reversible(args, batched, *, body, f, g, num_f):
    """tk.reversible: both halves batched; its inputs and outputs all get a batch axis, so that the
    backward's reconstruction of the inputs from the outputs has their shapes."""
    size = lanes.size_of(args, batched)
    flags = [True, True] + list(batched[2:])
    args = _as(args, batched, flags, size)
    cf, cg = flags[2:2 + num_f], flags[2 + num_f:]
    f_b, _ = batch_graph(f, [True] + cf, size, out_batched=[True])
    g_b, _ = batch_graph(g, [True] + cg, size, out_batched=[True])
    body_b, _ = batch_graph(body, flags, size, out_batched=[True, True])
    return list(ops.reversible_call(*args, body=body_b, f=f_b, g=g_b, num_f=num_f)), [True, True]


def select_branches(live, branches: Sequence[Graph], operands: Sequence, flags: Sequence[bool], size: int,
                    what: str) -> list:
    """Per lane, the outputs of branches[0] where the (batch,) bool `live` is set and of branches[1]
    elsewhere: both graphs (of one lane, on the same operands, `flags` marking the batched ones) run
    batched on every lane and a select keeps one. Differentiated as each lane's taken branch is: the
    backward selects between the two branches' VJPs per lane (shared operands' cotangents are then
    summed over the lanes), rather than differentiating the select, whose zero cotangent times an inf
    or NaN derivative of the branch not taken would be NaN. A custom_vjp_call: the forward is the
    select, the backward its own graph; backends inline the forward."""
    every = [True] * len(branches[0].outputs)
    n_out = len(every)
    forward_graphs = [batch_graph(g, flags, size, out_batched=every)[0] for g in branches]
    # the backward runs the branches with every float operand batched: a cotangent per lane to select
    active = [is_inexact(x.dtype) for x in operands]
    wide = [f or a for f, a in zip(flags, active)]
    backward_graphs = [batch_graph(g, wide, size, out_batched=every)[0] for g in branches]

    def outputs(b, g, xs):
        env = b.inline(g, list(xs))
        return [env[v] for v in g.outputs]

    def forward(b, on, *xs):
        taken, other = (outputs(b, g, xs) for g in forward_graphs)
        return [lanes.select_lanes(on, t, f, True, True) for t, f in zip(taken, other)] + [on, *xs]

    def backward(b, *a):
        dys, on, xs = list(a[:n_out]), a[n_out], list(a[n_out + 1:])
        xs_wide = _as(xs, flags, wide, size)
        per_branch = []
        for g in backward_graphs:
            got = autodiff.forward(b, g, xs_wide, active).backward(dys)
            per_branch.append([ops.zeros_like(x) if c is None else c for c, x in zip(got, xs_wide)])
        cts = [ops.zeros_like(on)]
        for t, f, x, fl, act in zip(*per_branch, xs, flags, active):
            if not act:
                cts.append(ops.zeros_like(x))
                continue
            picked = lanes.select_lanes(on, t, f, True, True)
            cts.append(picked if fl else ops.reduce_sum(picked, axes=(0,)))
        return cts

    avals = [aval_of(live)] + [aval_of(x) for x in operands]
    body = build_graph(forward, avals)
    bwd = build_graph(backward, [v.aval for v in body.outputs[:n_out]] + avals)
    outs = ops.custom_vjp_call(live, *operands, body=body, bwd=bwd, num_y=n_out, num_x=1 + len(operands),
                               var_positions=(), fun_name=what)
    return list(outs[:n_out])


def _cond(args, batched, *, true, false):
    """An unbatched predicate: still a cond, of the batched branches. A batched one: both branches run
    on every lane and a select per lane keeps the taken branch's results (select_branches: its
    gradient is each lane's taken branch's)."""
    pred, operands = args[0], list(args[1:])
    size = lanes.size_of(args, batched)
    op_flags = list(batched[1:])
    if not batched[0]:
        out = [a or b for a, b in zip(batch_graph(true, op_flags, size)[1], batch_graph(false, op_flags, size)[1])]
        want = [True if b else None for b in out]
        true_b, _ = batch_graph(true, op_flags, size, out_batched=want)
        false_b, _ = batch_graph(false, op_flags, size, out_batched=want)
        return list(ops.cond(pred, *operands, true=true_b, false=false_b)), out
    outs = select_branches(pred, [true, false], operands, op_flags, size, "tk.cond with a batched predicate")
    return outs, [True] * len(outs)


def _scan(args, batched, *, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
    """The body batched; the sequences sliced along axis 0 carry the batch axis second, so every
    row is batched; a carry is batched if its initial value is or an iteration makes it so."""
    nc, nk = num_consts, num_carry
    n_y = len(body.outputs) - nk
    size = lanes.size_of(args, batched)
    layout = C.ScanLayout(nc, nk)
    parts, flags = layout.split(args), layout.split(batched)
    cb, xb = flags.consts, flags.xs
    kb = _fixpoint(lambda k: batch_graph(body, cb + k + xb, size)[1][:nk], flags.carry)
    body_b, out = batch_graph(body, cb + kb + xb, size, out_batched=kb + [None] * n_y)
    yb = out[nk:]
    init = _as(parts.carry, flags.carry, kb, size)
    outs = list(ops.scan(*layout.join(consts=parts.consts, carry=init, xs=_rows_inside(parts.xs, xb)), body=body_b,
                         num_consts=nc, num_carry=nk, length=length, reverse=reverse, record=record, checkpoint=checkpoint))
    carry, ys, recs = outs[:nk], outs[nk:nk + n_y], outs[nk + n_y:nk + n_y + nk]
    recorded = kb if record else []
    last = outs[nk + n_y + nk:]   # (with a checkpoint: the carry at the start of the last step, as a carry)
    return (carry + _rows_to_front(ys, yb) + _rows_to_front(recs, recorded) + last,
            kb + yb + recorded + (kb if last else []))


def _while(args, batched, *, cond, body, num_consts, checkpoint=None):
    """An unbatched predicate: a while loop of the batched body. A batched one: the loop runs while
    any lane is live; each iteration updates the live lanes only (the carry of a finished lane stops
    changing) and counts each lane's iterations, its trip count."""
    nc = num_consts
    layout = C.WhileLayout(nc)
    parts, flags = layout.split(args), layout.split(batched)
    nk = len(parts.carry)
    size = lanes.size_of(args, batched)
    cb = flags.consts
    kb = _fixpoint(lambda k: batch_graph(body, cb + k, size)[1], flags.carry)
    consts = parts.consts
    cond_b, (pred_batched,) = batch_graph(cond, cb + kb, size)
    if not pred_batched:
        body_b, _ = batch_graph(body, cb + kb, size, out_batched=kb)
        init = _as(parts.carry, flags.carry, kb, size)
        outs = ops.while_(*consts, *init, cond=cond_b, body=body_b, num_consts=nc, checkpoint=checkpoint)
        return list(outs), kb + [False]
    every = [True] * nk
    cond_b, _ = batch_graph(cond, cb + every, size)
    init = _as(parts.carry, flags.carry, every, size)
    b = args[0].builder
    live0 = b.inline(cond_b, consts + init)[cond_b.outputs[0]]
    count0 = ops.full_like(live0, 0, dtype=np.int64)
    state = [aval_of(x) for x in consts + init] + [aval_of(live0), aval_of(count0)]

    def any_live(b, *a):
        live = a[nc + nk]
        return [ops.gt(ops.reduce_sum(ops.convert(live, dtype=np.int64), axes=(0,)), 0)]

    keep = Graph(body.inputs, (), body.inputs[nc:])    # (a lane that is done: its carry as it is)

    def step(b, *a):
        cs, carry, live, count = list(a[:nc]), list(a[nc:nc + nk]), a[nc + nk], a[nc + nk + 1]
        new = select_branches(live, [body, keep], cs + carry, cb + every, size, "tk.while_loop with a batched predicate")
        still = b.inline(cond_b, cs + new)[cond_b.outputs[0]]
        return new + [ops.logical_and(live, still), ops.add(count, ops.convert(live, dtype=np.int64))]

    outs = ops.while_(*consts, *init, live0, count0, cond=build_graph(any_live, state), body=build_graph(step, state),
                      num_consts=nc, checkpoint=checkpoint)
    return list(outs[:nk]) + [outs[nk + 1]], every + [True]


def _scan_revolve(args, batched, *, body, back, checkpoint, num_consts, num_carry, num_state, dx, length, reverse,
                  resume=False, num_ys=None):
    """A checkpointed scan's backward (and a while loop's, length=None): the forward body and the
    backward step batched, with batched flags of carry, state and sequences found together. A while
    loop's with a batched trip count runs to the largest and masks each lane's steps past its own.
    With `resume`, the carry operands are the first sweep's slots (stacked: batched inside, as
    sequences) and the last step's carry."""
    nc, nk, ns = num_consts, num_carry, num_state
    size = lanes.size_of(args, batched)
    layout = C.RevolveLayout.of(dict(body=body, num_consts=nc, num_carry=nk, num_state=ns, length=length,
                                     resume=resume, num_ys=num_ys))
    parts, flags = layout.split(args), layout.split(batched)
    if any(flags.trip):
        return _masked_revolve(parts, flags, body, back, checkpoint, nc, nk, ns, reverse, size)
    cb = flags.consts
    kb = [x or y for x, y in zip(flags.carry, flags.snaps)] if resume else flags.carry
    xb, sb, yb = flags.xs, flags.state, flags.ct_ys
    while True:
        kb2 = [a or b for a, b in zip(kb, batch_graph(body, cb + kb + xb, size)[1][:nk])]
        go = batch_graph(back, cb + sb + kb2 + xb + yb, size)[1]
        sb2 = [a or b for a, b in zip(sb, go[:ns])]
        xb2 = list(xb)
        for j, i in enumerate(dx):
            xb2[i] = xb2[i] or go[ns + j]
        if (kb2, sb2, xb2) == (kb, sb, xb):
            break
        kb, sb, xb = kb2, sb2, xb2
    body_b, _ = batch_graph(body, cb + kb + xb, size, out_batched=kb + [None] * (len(body.outputs) - nk))
    back_b, _ = batch_graph(back, cb + sb + kb + xb + yb, size,
                            out_batched=sb + [True if xb[i] else None for i in dx])
    # (with `resume`, the slots stacked along axis 0, the batch inside; then the last step's carry)
    snaps = _rows_inside(_as(parts.snaps, flags.snaps, kb, size), kb) if resume else []
    outs = list(ops.scan_revolve(*layout.join(consts=parts.consts, snaps=snaps, carry=_as(parts.carry, flags.carry, kb, size),
                                              trip=parts.trip, xs=_rows_inside(_as(parts.xs, flags.xs, xb, size), xb),
                                              state=_as(parts.state, flags.state, sb, size), ct_ys=_rows_inside(parts.ct_ys, yb)),
                                 body=body_b, back=back_b,
                                 checkpoint=checkpoint, num_consts=nc, num_carry=nk, num_state=ns, dx=dx,
                                 length=length, reverse=reverse, resume=resume, num_ys=num_ys))
    dx_flags = [xb[i] for i in dx]
    return outs[:ns] + _rows_to_front(outs[ns:], dx_flags), sb + dx_flags


def _masked_revolve(parts, flags, body, back, checkpoint, nc, nk, ns, reverse, size):
    """A while loop's backward whose lanes ran different trip counts: the schedule of the largest,
    with a step counter in the carry; a lane's steps from its own trip count on leave its carry and
    its backward state as they are (the batched forward loop left that lane's carry unchanged).
    `parts` and `flags`: its operands and their batched flags, split by its RevolveLayout."""
    consts, (trips,) = parts.consts, parts.trip
    cb = flags.consts
    every_k, every_s = [True] * nk, [True] * ns
    body_b, _ = batch_graph(body, cb + every_k, size, out_batched=every_k)
    back_b, _ = batch_graph(back, cb + every_s + every_k, size, out_batched=every_s)
    init = _as(parts.carry, flags.carry, every_k, size)
    state = _as(parts.state, flags.state, every_s, size)
    step0 = ops.full_like(trips, 0, shape=())
    longest = ops.reduce_max(trips, axes=(0,))
    c_avals = [aval_of(x) for x in consts] + [aval_of(trips)]
    k_avals = [aval_of(x) for x in init] + [aval_of(step0)]

    def masked_body(b, *a):
        cs, n, carry, t = list(a[:nc]), a[nc], list(a[nc + 1:nc + 1 + nk]), a[-1]
        env = b.inline(body_b, cs + carry)
        live = ops.lt(t, n)
        return [lanes.select_lanes(live, env[v], c, True, True) for v, c in zip(body_b.outputs, carry)] + [ops.add(t, 1)]

    def masked_back(b, *a):
        cs, n = list(a[:nc]), a[nc]
        st, carry, t = list(a[nc + 1:nc + 1 + ns]), list(a[nc + 1 + ns:nc + 1 + ns + nk]), a[-1]
        env = b.inline(back_b, cs + st + carry)
        live = ops.lt(t, n)
        return [lanes.select_lanes(live, env[v], s, True, True) for v, s in zip(back_b.outputs, st)]

    s_avals = [aval_of(x) for x in state]
    masked = C.RevolveLayout(nc + 1, nk + 1, ns, 0, while_loop=True)   # (the trip counts join the consts)
    outs = ops.scan_revolve(*masked.join(consts=consts + [trips], carry=init + [step0], trip=[longest], state=state),
                            body=build_graph(masked_body, c_avals + k_avals),
                            back=build_graph(masked_back, c_avals + s_avals + k_avals),
                            checkpoint=checkpoint, num_consts=masked.num_consts, num_carry=masked.num_carry,
                            num_state=masked.num_state, dx=(),
                            length=None, reverse=reverse)
    return list(outs), every_s


RULES: dict[Any, Callable] = {
    A.custom_vjp_call: _custom_vjp,
    A.recompute_call: _recompute,
    A.reversible_call: _reversible,
    C.cond: _cond,
    C.scan: _scan,
    C.while_: _while,
    C.scan_revolve: _scan_revolve,
}
