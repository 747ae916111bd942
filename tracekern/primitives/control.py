"""Control-flow primitives holding sub-graphs: cond, scan, while, and scan_revolve (the backward
of a checkpointed scan and of every while loop: a checkpoint schedule run from the initial carry).
User-facing functions: tracekern/control.py; their transform rules: tracekern/autodiff.py.

Layout of operands: a loop's `consts` (values every iteration reads: closures, lifted constants)
come first, then the carry, then (scan) the sliced sequences; each loop declares its layout once,
here (ScanLayout, WhileLayout, RevolveLayout), and every room reads operands through it.
Checkpointing has one representation, the `checkpoint` param (None, or the number of stored carries
k), from the user's call to the renderer: scan and while carry it, scan_revolve runs
tracekern.schedule.actions(trip count, k)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from .. import schedule
from ..ir import Aval, Eqn, Graph
from .core import Primitive, eval_graph


def _avals(g: Graph, which: str) -> tuple[Aval, ...]:
    return tuple(v.aval for v in getattr(g, which))


def _run(graph: Graph, args) -> list:
    return eval_graph(graph, list(args))


def _graph_effects(*graphs: Graph) -> bool:
    return any(e.primitive.has_effects(**e.params) for g in graphs for e in g.eqns)


@dataclass(frozen=True)
class _Layout:
    """The named groups of a loop's operands, in order: (name, size) with at most one size None
    (that group takes what the others leave). A layout splits any list in operand order (operands,
    their avals, flags, rendered names) and joins named groups back into one."""

    def groups(self) -> tuple[tuple[str, int | None], ...]:
        raise NotImplementedError

    def _sizes(self, total: int) -> list[tuple[str, int]]:
        groups = self.groups()
        known = sum(n for _, n in groups if n is not None)
        if known > total or (known < total and all(n is not None for _, n in groups)):
            raise TypeError(f"{type(self).__name__}: {total} operands do not fit {groups}")
        return [(name, total - known if n is None else n) for name, n in groups]

    def split(self, operands: Sequence) -> SimpleNamespace:
        """The groups of a list in operand order, as lists: parts.consts, parts.carry, ..."""
        out, at = {}, 0
        for name, n in self._sizes(len(operands)):
            out[name] = list(operands[at:at + n])
            at += n
        return SimpleNamespace(**out)

    def join(self, **groups: Sequence) -> list:
        """One list of the named groups in operand order; a group left out must be empty here."""
        unknown = set(groups) - {name for name, _ in self.groups()}
        if unknown:
            raise TypeError(f"{type(self).__name__}: no group {sorted(unknown)}")
        out = []
        for name, n in self.groups():
            part = list(groups.get(name, ()))
            if n is not None and len(part) != n:
                raise TypeError(f"{type(self).__name__}: group {name} has {len(part)} operands, not {n}")
            out += part
        return out


@dataclass(frozen=True)
class ScanLayout(_Layout):
    """scan's operands: consts, carry, xs (the sequences, sliced along axis 0)."""
    num_consts: int
    num_carry: int

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> ScanLayout:
        return cls(params["num_consts"], params["num_carry"])

    def groups(self):
        return (("consts", self.num_consts), ("carry", self.num_carry), ("xs", None))


@dataclass(frozen=True)
class WhileLayout(_Layout):
    """while's operands: consts, carry."""
    num_consts: int

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> WhileLayout:
        return cls(params["num_consts"])

    def groups(self):
        return (("consts", self.num_consts), ("carry", None))


@dataclass(frozen=True)
class RevolveLayout(_Layout):
    """scan_revolve's operands: consts; with `resume`, snaps (the first sweep's k slots, stacked),
    then carry (the carry it starts from); trip (a while loop's, length=None: its trip count, one
    operand; else none); xs (the sequences; none in a while loop's); state (the backward state);
    ct_ys (the ys' cotangents, num_ys of them)."""
    num_consts: int
    num_carry: int
    num_state: int
    num_ys: int
    while_loop: bool = False
    resume: bool = False

    @classmethod
    def of(cls, params: Mapping[str, Any]) -> RevolveLayout:
        nk = params["num_carry"]
        return cls(params["num_consts"], nk, params["num_state"],
                   _num_ys(params["body"], nk, params.get("num_ys")), params["length"] is None,
                   bool(params.get("resume", False)))

    def groups(self):
        return (("consts", self.num_consts), ("snaps", self.num_carry if self.resume else 0),
                ("carry", self.num_carry), ("trip", 1 if self.while_loop else 0),
                ("xs", 0 if self.while_loop else None), ("state", self.num_state), ("ct_ys", self.num_ys))


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


class Scan(Primitive):
    """scan(*consts, *init, *xs; body, num_consts, num_carry, length, reverse, record, checkpoint):
    runs body(consts, carry, x[t]) -> (carry, y) for t in order (reversed if `reverse`), returning
    the final carry, the stacked ys and, when `record`, what the backward needs of the carries
    (reverse mode turns it on, and a plain forward drops it again, passes.dce): without a
    checkpoint, the carry at the start of every step; with checkpoint=k, the snapshots of the
    checkpoint schedule's first sweep (schedule.first_sweep: k slots, then the carry at the start
    of the last step), from which scan_revolve resumes the schedule instead of running it again."""

    multiple_results = True

    def abstract_eval(self, *avals, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
        nk = num_carry
        parts = ScanLayout(num_consts, num_carry).split(avals)
        carry = _avals(body, "outputs")[:nk]
        if tuple(parts.carry) != carry:
            raise TypeError(f"scan: carry {[str(a) for a in parts.carry]} does not match the body's "
                            f"{[str(a) for a in carry]}")
        for a in parts.xs:
            if not a.shape or a.shape[0] != length:
                raise TypeError(f"scan: a sequence {a} does not have length {length} on axis 0")
        ys = tuple(Aval((length,) + a.shape, a.dtype) for a in _avals(body, "outputs")[nk:])
        if not record:
            return carry + ys
        if checkpoint is None:
            return carry + ys + tuple(Aval((length,) + a.shape, a.dtype) for a in carry)
        return carry + ys + tuple(Aval((checkpoint,) + a.shape, a.dtype) for a in carry) + carry

    def impl(self, *arrays, body, num_consts, num_carry, length, reverse, record, checkpoint=None):
        nk = num_carry
        parts = ScanLayout(num_consts, num_carry).split(arrays)
        consts, carry, xs = parts.consts, parts.carry, parts.xs
        outs = [v.aval for v in body.outputs]
        ys = [np.empty((length,) + a.shape, a.dtype) for a in outs[nk:]]
        recs = [np.empty((length if checkpoint is None else checkpoint,) + a.shape, a.dtype) for a in outs[:nk]] if record else []
        last = [np.empty(a.shape, a.dtype) for a in outs[:nk]] if record and checkpoint is not None else []
        slot_at = schedule.first_sweep(length, checkpoint)[0] if last else None
        for s in range(length):
            t = length - 1 - s if reverse else s
            if slot_at is None:
                for r, c in zip(recs, carry):
                    r[t] = c
            elif slot_at[s] >= 0:
                for r, c in zip(recs, carry):
                    r[slot_at[s]] = c
            if last and s == length - 1:
                for r, c in zip(last, carry):
                    r[...] = c
            res = [np.asarray(v) for v in _run(body, consts + carry + [x[t] for x in xs])]
            carry = res[:nk]
            for y, v in zip(ys, res[nk:]):
                y[t] = v
        return tuple(np.array(c) for c in carry) + tuple(ys) + tuple(recs) + tuple(last)

    def has_effects(self, body, **params) -> bool:
        return _graph_effects(body)

    def prune(self, eqn, live):
        """Without its recorded carries when nothing uses them (a plain forward)."""
        p = eqn.params
        recorded = p["num_carry"] * (1 if p.get("checkpoint") is None else 2)
        if not p["record"] or any(v in live for v in eqn.outputs[len(eqn.outputs) - recorded:]):
            return eqn
        return Eqn(self, eqn.inputs, eqn.outputs[:len(eqn.outputs) - recorded], dict(p, record=False), eqn.source)


class ScanRevolve(Primitive):
    """The backward of a checkpointed scan, and of a while loop. Operands: consts, the initial
    carry, the sequences, the backward state (carry cotangents, then const-cotangent sums), the
    ys' cotangents. It runs tracekern.schedule.actions(length, checkpoint), storing at most
    `checkpoint` carries; outputs the final backward state and the stacked cotangents of the
    sequences in `dx`. With `resume` (a scan whose forward recorded the schedule's first sweep:
    Scan's `record`), the carry operands are those snapshots, the k slots and then the carry at the
    start of the last step, and the schedule resumes from its first backward step. A while loop's
    (length=None) has the trip count after the carry and no sequences; its schedule is made at run
    time, with `checkpoint` slots (or as many as its budget, "auto" or ("within", carries), gives:
    schedule.slots) or, without one (checkpoint=None), a slot per iteration. `body` re-runs the
    forward steps: reverse mode gives it only what the carry needs (the ys are pruned: their values
    are not needed again, only their cotangents, num_ys of them)."""

    multiple_results = True

    def abstract_eval(self, *avals, body, back, checkpoint, num_consts, num_carry, num_state, dx, length, reverse,
                      resume=False, num_ys=None):
        parts = RevolveLayout(num_consts, num_carry, num_state, _num_ys(body, num_carry, num_ys), length is None,
                              resume).split(avals)
        return tuple(parts.state) + tuple(parts.xs[i] for i in dx)

    def impl(self, *arrays, body, back, checkpoint, num_consts, num_carry, num_state, dx, length, reverse,
             resume=False, num_ys=None):
        nk, ns = num_carry, num_state
        parts = RevolveLayout(num_consts, nk, ns, _num_ys(body, nk, num_ys), length is None, resume).split(arrays)
        if length is None:   # a while loop: its schedule is made now that the trip count is known
            length = int(parts.trip[0])
        actions = schedule.schedule_for(length, checkpoint)
        pos, slots = 0, {}
        if resume:   # the forward pass ran the first sweep: its slots, and the carry at the last step
            _, positions, first = schedule.first_sweep(length, checkpoint)
            slots = {j: ([np.array(a[j]) for a in parts.snaps], int(positions[j])) for j in range(checkpoint)}
            actions, pos = actions[first:], length - 1
        consts, cur, xs, state, ct_ys = parts.consts, parts.carry, parts.xs, parts.state, parts.ct_ys
        ct_xs = [np.zeros_like(xs[i]) for i in dx]
        for op, arg in actions:
            if op == schedule.ADVANCE:
                for _ in range(int(arg)):
                    t = length - 1 - pos if reverse else pos
                    cur = [np.asarray(v) for v in _run(body, consts + cur + [x[t] for x in xs])[:nk]]
                    pos += 1
            elif op == schedule.STORE:
                slots[int(arg)] = (cur, pos)
            elif op == schedule.RESTORE:
                cur, pos = slots[int(arg)]
            else:
                t = length - 1 - pos if reverse else pos
                g = [np.asarray(v) for v in _run(back, consts + state + cur + [x[t] for x in xs] + [c[t] for c in ct_ys])]
                state = g[:ns]
                for j in range(len(dx)):
                    ct_xs[j][t] = g[ns + j]
        return tuple(state) + tuple(ct_xs)


def _num_ys(body: Graph, num_carry: int, num_ys) -> int:
    """The ys a scan_revolve's operands carry cotangents of: num_ys, or (a body that still returns its
    ys) the body's outputs beyond the carry."""
    return len(body.outputs) - num_carry if num_ys is None else num_ys


class While(Primitive):
    """while(*consts, *init; cond, body, num_consts): iterate body while cond(consts, carry);
    outputs the final carry and the trip count (int64, 0-d)."""

    multiple_results = True

    def abstract_eval(self, *avals, cond, body, num_consts, checkpoint=None):
        carry = tuple(WhileLayout(num_consts).split(avals).carry)
        if _avals(body, "outputs") != carry:
            raise TypeError(f"while_loop: the body returns {[str(a) for a in _avals(body, 'outputs')]}, the carry is "
                            f"{[str(a) for a in carry]}")
        return carry + (Aval((), np.dtype(np.int64)),)

    def impl(self, *arrays, cond, body, num_consts, checkpoint=None):
        parts = WhileLayout(num_consts).split(arrays)
        consts, carry = parts.consts, parts.carry
        n = 0
        while bool(_run(cond, consts + carry)[0]):
            carry = [np.asarray(v) for v in _run(body, consts + carry)]
            n += 1
        return tuple(np.array(c) for c in carry) + (np.asarray(n, np.int64),)

    def has_effects(self, cond, body, **params) -> bool:
        return _graph_effects(cond, body)


cond = Cond("cond")
scan = Scan("scan")
while_ = While("while")
scan_revolve = ScanRevolve("scan_revolve")
