"""Control-flow primitives holding sub-graphs: cond, scan, while, and scan_revolve (the backward
of a checkpointed scan and of every while loop: a checkpoint schedule run from the initial carry).
User-facing functions: tracekern/control.py.

Layout of operands: a loop's `consts` (values every iteration reads: closures, lifted constants)
come first, then the carry, then (scan) the sliced sequences."""
from __future__ import annotations

import numpy as np

from ..errors import TracekernError
from ..ir import Aval, Graph, is_float
from .core import Primitive


def _avals(g: Graph, which: str) -> tuple[Aval, ...]:
    return tuple(v.aval for v in getattr(g, which))


def _run(graph: Graph, args) -> list:
    from ..trace import inline_graph

    return inline_graph(graph, list(args))


def _graph_effects(*graphs: Graph) -> bool:
    return any(e.primitive.has_effects(**e.params) for g in graphs for e in g.eqns)


class Cond(Primitive):
    """cond(pred, *operands; true, false): the branch graph chosen by the 0-d bool `pred`."""

    multiple_results = True

    def abstract_eval(self, pred: Aval, *ops: Aval, true: Graph, false: Graph):
        if pred.shape != () or pred.dtype != np.bool_:
            raise TypeError(f"cond: the predicate must be a 0-d bool, got {pred}")
        return _avals(true, "outputs")

    def impl(self, pred, *ops, true, false):
        return tuple(_run(true if bool(pred) else false, ops))

    def has_effects(self, true, false) -> bool:
        return _graph_effects(true, false)

    def vjp(self, cts, ins, outs, active, true, false):
        from ..trace import aval_of

        ops, act = list(ins[1:]), list(active[1:])
        avals = [aval_of(x) for x in ops] + [aval_of(c) for c in cts]
        branches = [_vjp_graph(g, len(ops), act, avals) for g in (true, false)]
        grads = iter(cond(ins[0], *ops, *cts, true=branches[0], false=branches[1]))
        return [None] + [next(grads) if a else None for a in act]


def _vjp_graph(g: Graph, n_in: int, active, avals) -> Graph:
    """(operands..., output cotangents...) -> cotangents of the active operands, zeros where none flows."""
    from ..autodiff import forward
    from ..numpy import zeros_like
    from ..trace import trace_to_graph

    def back(*a):
        fp = forward(g, a[:n_in], active)
        cts = fp.backward(list(a[n_in:]))
        return [zeros_like(x) if c is None else c for c, x, act in zip(cts, a[:n_in], active) if act]

    graph, _, captured = trace_to_graph(back, avals)
    assert not captured
    return graph


class Scan(Primitive):
    """scan(*consts, *init, *xs; body, num_consts, num_carry, length, reverse, record): runs
    body(consts, carry, x[t]) -> (carry, y) for t in order (reversed if `reverse`), returning the
    final carry, the stacked ys and, when `record`, the carry at the start of every step (what
    the VJP differentiates the body at; a plain forward drops them, passes.dce)."""

    multiple_results = True
    sparse_cotangents = True

    def abstract_eval(self, *avals, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
        nc, nk = num_consts, num_carry
        carry = _avals(body, "outputs")[:nk]
        if tuple(avals[nc:nc + nk]) != carry:
            raise TypeError(f"scan: carry {[str(a) for a in avals[nc:nc + nk]]} does not match the body's "
                            f"{[str(a) for a in carry]}")
        for a in avals[nc + nk:]:
            if not a.shape or a.shape[0] != length:
                raise TypeError(f"scan: a sequence {a} does not have length {length} on axis 0")
        ys = tuple(Aval((length,) + a.shape, a.dtype) for a in _avals(body, "outputs")[nk:])
        recs = tuple(Aval((length,) + a.shape, a.dtype) for a in carry) if record else ()
        return carry + ys + recs

    def impl(self, *arrays, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
        nc, nk = num_consts, num_carry
        consts, carry, xs = arrays[:nc], list(arrays[nc:nc + nk]), arrays[nc + nk:]
        outs = [v.aval for v in body.outputs]
        ys = [np.empty((length,) + a.shape, a.dtype) for a in outs[nk:]]
        recs = [np.empty((length,) + a.shape, a.dtype) for a in outs[:nk]] if record else []
        for t in (reversed(range(length)) if reverse else range(length)):
            for r, c in zip(recs, carry):
                r[t] = c
            res = [np.asarray(v) for v in _run(body, list(consts) + carry + [x[t] for x in xs])]
            carry = res[:nk]
            for y, v in zip(ys, res[nk:]):
                y[t] = v
        return tuple(np.array(c) for c in carry) + tuple(ys) + tuple(recs)

    def has_effects(self, body, **params) -> bool:
        return _graph_effects(body)

    def prune(self, eqn, live):
        """Without its recorded carries when nothing uses them (a plain forward)."""
        p = eqn.params
        if not p["record"] or any(v in live for v in eqn.outputs[len(eqn.outputs) - p["num_carry"]:]):
            return eqn
        from ..ir import Eqn

        return Eqn(self, eqn.inputs, eqn.outputs[:len(eqn.outputs) - p["num_carry"]], dict(p, record=False), eqn.source)

    def for_vjp(self, eqn):
        if eqn.params["record"] or eqn.params.get("checkpoint") is not None:
            return eqn   # (a checkpointed scan's backward re-runs steps instead)
        from ..ir import Eqn, Var

        recs = tuple(Var(Aval((eqn.params["length"],) + v.aval.shape, v.aval.dtype))
                     for v in eqn.params["body"].outputs[:eqn.params["num_carry"]])
        return Eqn(self, eqn.inputs, eqn.outputs + recs, dict(eqn.params, record=True), eqn.source)

    def vjp(self, cts, ins, outs, active, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
        from ..numpy import zeros_like
        from ..trace import aval_of

        if checkpoint is not None:
            return _revolve_vjp(cts, ins, outs, active, body, num_consts, num_carry, length, reverse, checkpoint)
        if not record:
            raise TracekernError("scan: its recorded carries were dropped before differentiation (internal error)")
        nc, nk = num_consts, num_carry
        n_y = len(body.outputs) - nk
        consts, xs = list(ins[:nc]), list(ins[nc + nk:])
        recs = list(outs[nk + n_y:])
        ct_carry = [zeros_like(o) if c is None else c for c, o in zip(cts[:nk], outs[:nk])]
        ct_ys = [zeros_like(o) if c is None else c for c, o in zip(cts[nk:nk + n_y], outs[nk:nk + n_y])]
        # grad of grad: cotangents of the recorded carries join the carry's at the start of each step
        ct_recs = {i: c for i, c in enumerate(cts[nk + n_y:]) if c is not None and i in
                   [j for j in range(nk) if is_float(body.outputs[j].dtype)]}
        act = list(active)
        dc = [i for i in range(nc) if act[i]]                       # consts that get cotangents
        fk = [i for i in range(nk) if is_float(body.outputs[i].dtype)]
        dx = [i for i in range(len(xs)) if act[nc + nk + i]]
        # one backward step: (consts, ct_carry (float ones), acc, carry_t, x_t, ct_y_t) ->
        #                    (ct_carry_prev, acc + ct_consts, ct_x_t)
        step_active = act[:nc] + [i in fk for i in range(nk)] + act[nc + nk:]
        avals = ([aval_of(c) for c in consts] + [aval_of(ct_carry[i]) for i in fk] + [aval_of(consts[i]) for i in dc]
                 + [v.aval for v in body.outputs[:nk]] + [_row(aval_of(x)) for x in xs] + [_row(aval_of(c)) for c in ct_ys])
        rec_keys = sorted(ct_recs)
        avals += [v.aval for i in rec_keys for v in [body.outputs[i]]]
        back = _scan_step_vjp(body, nc, nk, fk, dc, dx, len(xs), step_active, avals, rec_keys)
        acc0 = [zeros_like(consts[i]) for i in dc]
        res = scan(*consts, *[ct_carry[i] for i in fk], *acc0, *recs, *xs, *ct_ys, *[ct_recs[i] for i in rec_keys],
                   body=back, num_consts=nc,
                   num_carry=len(fk) + len(dc), length=length, reverse=not reverse, record=True)
        ct_init = dict(zip(fk, res[:len(fk)]))
        ct_consts = dict(zip(dc, res[len(fk):len(fk) + len(dc)]))
        ct_xs = dict(zip(dx, res[len(fk) + len(dc):len(fk) + len(dc) + len(dx)]))
        return ([ct_consts.get(i) for i in range(nc)] + [ct_init.get(i) if act[nc + i] else None for i in range(nk)]
                + [ct_xs.get(i) for i in range(len(xs))])


def _revolve_vjp(cts, ins, outs, active, body, nc, nk, length, reverse, k):
    """The backward of a checkpointed scan: scan_revolve runs the schedule of tracekern.schedule
    (at most k stored carries) from the initial carry, interleaving forward and backward steps."""
    from ..numpy import zeros_like
    from ..schedule import actions
    from ..trace import aval_of

    n_y = len(body.outputs) - nk
    consts, init, xs = list(ins[:nc]), list(ins[nc:nc + nk]), list(ins[nc + nk:])
    ct_carry = [zeros_like(o) if c is None else c for c, o in zip(cts[:nk], outs[:nk])]
    ct_ys = [zeros_like(o) if c is None else c for c, o in zip(cts[nk:nk + n_y], outs[nk:nk + n_y])]
    act = list(active)
    dc = [i for i in range(nc) if act[i]]
    fk = [i for i in range(nk) if is_float(body.outputs[i].dtype)]
    dx = [i for i in range(len(xs)) if act[nc + nk + i]]
    step_active = act[:nc] + [i in fk for i in range(nk)] + act[nc + nk:]
    avals = ([aval_of(c) for c in consts] + [aval_of(ct_carry[i]) for i in fk] + [aval_of(consts[i]) for i in dc]
             + [v.aval for v in body.outputs[:nk]] + [_row(aval_of(x)) for x in xs] + [_row(aval_of(c)) for c in ct_ys])
    back = _scan_step_vjp(body, nc, nk, fk, dc, dx, len(xs), step_active, avals)
    acc0 = [zeros_like(consts[i]) for i in dc]
    res = scan_revolve(*consts, *init, *xs, *[ct_carry[i] for i in fk], *acc0, *ct_ys, body=body, back=back,
                       actions=actions(length, k), num_consts=nc, num_carry=nk, num_state=len(fk) + len(dc),
                       dx=tuple(dx), length=length, reverse=reverse)
    ct_init = dict(zip(fk, res[:len(fk)]))
    ct_consts = dict(zip(dc, res[len(fk):len(fk) + len(dc)]))
    ct_xs = dict(zip(dx, res[len(fk) + len(dc):]))
    return ([ct_consts.get(i) for i in range(nc)] + [ct_init.get(i) if act[nc + i] else None for i in range(nk)]
            + [ct_xs.get(i) for i in range(len(xs))])


class ScanRevolve(Primitive):
    """The backward of a checkpointed scan, and of a while loop. Operands: consts, the initial
    carry, the sequences, the backward state (carry cotangents, then const-cotangent sums), the
    ys' cotangents. It runs `actions` (tracekern.schedule) with at most k stored carries; outputs
    the final backward state and the stacked cotangents of the sequences in `dx`. A while loop's
    (length=None) has the trip count after the carry and no sequences; its schedule is made at
    run time, with `checkpoint` slots or, without one, a slot per iteration."""

    multiple_results = True

    def abstract_eval(self, *avals, body, back, actions, num_consts, num_carry, num_state, dx, length, reverse,
                      checkpoint=None):
        if length is None:   # a while loop's: the trip count is an operand, after the carry
            start = num_consts + num_carry + 1
            return tuple(avals[start:start + num_state])
        n_xs = len(avals) - num_consts - num_carry - num_state - (len(body.outputs) - num_carry)
        start = num_consts + num_carry + n_xs
        xs = avals[num_consts + num_carry:start]
        return tuple(avals[start:start + num_state]) + tuple(xs[i] for i in dx)

    def impl(self, *arrays, body, back, actions, num_consts, num_carry, num_state, dx, length, reverse,
             checkpoint=None):
        from ..schedule import ADVANCE, RESTORE, STORE
        from ..schedule import actions as make_actions

        nc, nk, ns = num_consts, num_carry, num_state
        if length is None:   # a while loop: its schedule is made now that the trip count is known
            length = int(arrays[nc + nk])
            actions = make_actions(length, max(length, 1) if checkpoint is None else checkpoint)
            arrays = arrays[:nc + nk] + arrays[nc + nk + 1:]
        n_y = len(body.outputs) - nk
        n_xs = len(arrays) - nc - nk - ns - n_y
        consts = list(arrays[:nc])
        cur = list(arrays[nc:nc + nk])
        xs = arrays[nc + nk:nc + nk + n_xs]
        state = list(arrays[nc + nk + n_xs:nc + nk + n_xs + ns])
        ct_ys = arrays[nc + nk + n_xs + ns:]
        ct_xs = [np.zeros_like(xs[i]) for i in dx]
        pos, slots = 0, {}
        for op, arg in actions:
            if op == ADVANCE:
                for _ in range(int(arg)):
                    t = length - 1 - pos if reverse else pos
                    cur = [np.asarray(v) for v in _run(body, consts + cur + [x[t] for x in xs])[:nk]]
                    pos += 1
            elif op == STORE:
                slots[int(arg)] = (cur, pos)
            elif op == RESTORE:
                cur, pos = slots[int(arg)]
            else:
                t = length - 1 - pos if reverse else pos
                g = [np.asarray(v) for v in _run(back, consts + state + cur + [x[t] for x in xs] + [c[t] for c in ct_ys])]
                state = g[:ns]
                for j in range(len(dx)):
                    ct_xs[j][t] = g[ns + j]
        return tuple(state) + tuple(ct_xs)

    def vjp(self, cts, ins, outs, active, **params):
        raise TracekernError("grad of grad through a checkpointed tk.scan is not supported; use checkpoint=None "
                             "(its backward is an ordinary scan, differentiable again)")


def _row(a: Aval) -> Aval:
    return Aval(a.shape[1:], a.dtype)


def _scan_step_vjp(body, nc, nk, fk, dc, dx, n_xs, step_active, avals, rec_keys=()) -> Graph:
    from ..autodiff import forward
    from ..numpy import zeros_like
    from ..trace import trace_to_graph

    n_fk, n_dc = len(fk), len(dc)
    n_y = len(body.outputs) - nk

    def step(*a):
        consts = list(a[:nc])
        ct_k = list(a[nc:nc + n_fk])
        acc = list(a[nc + n_fk:nc + n_fk + n_dc])
        rest = a[nc + n_fk + n_dc:]
        carry, x, ct_y = list(rest[:nk]), list(rest[nk:nk + n_xs]), list(rest[nk + n_xs:nk + n_xs + n_y])
        ct_rec = dict(zip(rec_keys, rest[nk + n_xs + n_y:]))
        fp = forward(body, consts + carry + x, step_active)
        ct_out = [None] * nk + ct_y
        for j, i in enumerate(fk):
            ct_out[i] = ct_k[j]
        g = fp.backward(ct_out)
        g_consts, g_carry, g_x = g[:nc], g[nc:nc + nk], g[nc + nk:]
        new_ct = [zeros_like(carry[i]) if g_carry[i] is None else g_carry[i] for i in fk]
        new_ct = [c + ct_rec[i] if i in ct_rec else c for c, i in zip(new_ct, fk)]
        new_acc = [acc[j] if g_consts[i] is None else acc[j] + g_consts[i] for j, i in enumerate(dc)]
        ct_x = [zeros_like(x[i]) if g_x[i] is None else g_x[i] for i in dx]
        return new_ct + new_acc + ct_x

    graph, _, captured = trace_to_graph(step, avals)
    assert not captured
    return graph


class While(Primitive):
    """while(*consts, *init; cond, body, num_consts): iterate body while cond(consts, carry);
    outputs the final carry and the trip count (int64, 0-d)."""

    multiple_results = True

    def abstract_eval(self, *avals, cond, body, num_consts, checkpoint=None):
        carry = tuple(avals[num_consts:])
        if _avals(body, "outputs") != carry:
            raise TypeError(f"while_loop: the body returns {[str(a) for a in _avals(body, 'outputs')]}, the carry is "
                            f"{[str(a) for a in carry]}")
        return carry + (Aval((), np.dtype(np.int64)),)

    def impl(self, *arrays, cond, body, num_consts, checkpoint=None):
        consts, carry = list(arrays[:num_consts]), list(arrays[num_consts:])
        n = 0
        while bool(_run(cond, consts + carry)[0]):
            carry = [np.asarray(v) for v in _run(body, consts + carry)]
            n += 1
        return tuple(np.array(c) for c in carry) + (np.asarray(n, np.int64),)

    def has_effects(self, cond, body, **params) -> bool:
        return _graph_effects(cond, body)

    def vjp(self, cts, ins, outs, active, cond, body, num_consts, checkpoint=None):
        from ..numpy import zeros_like
        from ..trace import aval_of

        nc = num_consts
        consts, init = list(ins[:nc]), list(ins[nc:])
        nk = len(init)
        fk = [i for i in range(nk) if is_float(init[i].dtype)]
        dc = [i for i in range(nc) if active[i]]
        step_active = list(active[:nc]) + [i in fk for i in range(nk)]
        avals = ([aval_of(c) for c in consts] + [aval_of(init[i]) for i in fk] + [aval_of(consts[i]) for i in dc]
                 + [aval_of(c) for c in init] + [Aval((), np.dtype(np.int64))])
        # the scan backward step, with no sequences; the trip count rides along unused
        back = _scan_step_vjp(body, nc, nk, fk, dc, [], 0, step_active, avals[:-1])
        ct_k = [zeros_like(init[i]) if cts[i] is None else cts[i] for i in fk]
        # re-run from the initial carry on a schedule made when the trip count is known: k slots,
        # or one per iteration without checkpointing
        res = scan_revolve(*consts, *init, outs[-1], *ct_k, *[zeros_like(consts[i]) for i in dc], body=body,
                           back=back, actions=None, num_consts=nc, num_carry=nk, num_state=len(fk) + len(dc),
                           dx=(), length=None, reverse=False, checkpoint=checkpoint)
        ct_init = dict(zip(fk, res[:len(fk)]))
        ct_consts = dict(zip(dc, res[len(fk):]))
        return [ct_consts.get(i) for i in range(nc)] + [ct_init.get(i) if active[nc + i] else None for i in range(nk)]


cond = Cond("cond")
scan = Scan("scan")
while_ = While("while")
scan_revolve = ScanRevolve("scan_revolve")
