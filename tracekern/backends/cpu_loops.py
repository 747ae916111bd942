"""The cpu target's loops compiled whole: a scan, a while loop or a checkpoint schedule (scan_revolve) as one
njit function of the step's driver module, its body written into it (double-buffered carries, a workspace)."""
from __future__ import annotations

import numpy as np

from .. import schedule
from ..ir import Graph
from ..primitives.control import RevolveLayout, ScanLayout, WhileLayout
from .cpu_kernels import Variant, _empty
from .cpu_runtime import _has_objmode
from .render import CompiledLoop, Lines


def _subgraphs(e) -> list[Graph]:
    return [e.params[k] for k in ("cond", "body", "back") if k in e.params]


class _LoopFunction(CompiledLoop):
    """Writes one loop compiled whole: `loopN(operands..., X[, F])`, an njit function that runs every
    step of a scan, a while loop or a checkpoint schedule (scan_revolve) and returns the loop's
    outputs. Its body (and condition, and backward step) is written into it (_Renderer.inline), not
    called: the carries (and the backward state) are double-buffered, each step reading one half
    and writing the other; ys and the cotangents of the sequences are written straight into their
    rows; the body's intermediate arrays are a workspace allocated once, before the first step.
    Nothing is allocated per step, and Python is never entered (but for tk.print). One function,
    not a function per body: Numba optimises again, with LLVM, all the code a function links, so
    every level of calls would cost that once more at compile time."""

    def __init__(self, module, e, name: str, variant: Variant):
        self.m, self.e, self.name, self.variant = module, e, name, variant
        self.t = Lines()
        self.args = [f"a{i}" for i in range(len(e.inputs))]
        self.work: list[str] = []
        self.steps: dict[str, tuple] = {}       # "body", "back": (rows bound at t: (names, sequences), its code)
        self.halves_of: dict[str, tuple] = {}   # "carry", "state": (current, next) arrays

    def emit(self, depth: int, text: str) -> None:
        self.t.emit(depth, text, eqn=self.e)

    # -- the hooks of render.CompiledLoop: arrays named as they are, rows as row() views ---------------
    line = emit

    def copy_value(self, depth: int, src: tuple, dst: tuple, aval) -> None:
        ref = lambda r: r[0] if r[1] is None else f"row({r[0]}, {r[1]})"   # noqa: E731
        self.emit(depth, f"assign({ref(dst)}, {ref(src)})")

    def step(self, depth: int, which: str) -> None:
        binds, code = self.steps[which]
        for names, seqs in binds:
            self.rows(depth, names, seqs, "t")
        self.lines(code)

    def end_step(self, depth: int, which: str) -> None:
        self.swap(depth, *self.halves_of[which])

    def render(self) -> Lines:
        e = self.e
        objmode = e.primitive.name == "scan_revolve" and RevolveLayout.of(e.params).while_loop   # (its schedule)
        nogil = "" if objmode or any(_has_objmode(g) for g in _subgraphs(e)) else ", nogil=True"
        self.t.emit(0, f"@njit(cache=True, error_model='numpy', no_cfunc_wrapper=True{nogil})")
        self.t.emit(0, f"def {self.name}({', '.join(self.args + self.variant.extra)}):")
        if self.variant.flags:
            self.emit(1, "any_big = False  # a sin/cos/tan argument >= TRIG_LIMIT somewhere")
        out = getattr(self, "while_" if e.primitive.name == "while" else e.primitive.name)()
        if self.variant.flags:
            self.emit(1, "if any_big:")
            self.emit(2, "F[0] = True")
        self.emit(1, f"return ({', '.join(out)},)")
        return self.t

    def graph(self, graph: Graph, ins: list[str], outs: list[str], depth: int, prefix: str) -> list[str]:
        """The statements of a sub-graph at this depth (its workspace declared by declare())."""
        r = self.m.renderer(self.m.plan(graph), self.m, sub=True, inlined=True)
        r.prepare()
        for i, (shape, dtype) in enumerate(r.inline(ins, outs, prefix, depth, self.variant)):
            self.work.append(f"{prefix}w{i} = {_empty(list(shape), dtype)}")
        return r.lines

    def declare(self) -> None:
        for line in self.work:
            self.emit(1, line)

    def lines(self, lines: list[str]) -> None:
        for line in lines:
            self.t.emit(0, line)

    def halves(self, prefix: str, init: list[str], avals: list) -> tuple[list[str], list[str]]:
        """Two arrays per value: the current one (a copy of init) and the next."""
        cur, nxt = [f"{prefix}{i}" for i in range(len(init))], [f"{prefix}{i}n" for i in range(len(init))]
        for c, n, x, v in zip(cur, nxt, init, avals):
            self.emit(1, f"{c} = fresh_copy({x})")
            self.emit(1, f"{n} = {_empty(list(v.shape), v.dtype)}")
        return cur, nxt

    def swap(self, depth: int, cur: list[str], nxt: list[str]) -> None:
        for c, n in zip(cur, nxt):
            self.emit(depth, f"{c}, {n} = {n}, {c}")

    def rows(self, depth: int, names: list[str], seqs: list[str], index: str) -> list[str]:
        """Bind names to the rows `index` of the sequences (views: no copy)."""
        for name, q in zip(names, seqs):
            self.emit(depth, f"{name} = row({q}, {index})")
        return names

    def seqs(self, names: list[str], prefix: str) -> list[str]:
        out = []
        for i, x in enumerate(names):
            self.emit(1, f"{prefix}{i} = contiguous({x})")
            out.append(f"{prefix}{i}")
        return out

    def allocate(self, names: list[str], avals: list) -> list[str]:
        for name, v in zip(names, avals):
            self.emit(1, f"{name} = {_empty(list(v.shape), v.dtype)}")
        return names

    def scan(self) -> list[str]:
        e, p = self.e, self.e.params
        nk, n, body = p["num_carry"], p["length"], p["body"]
        a = ScanLayout.of(p).split(self.args)
        consts, init, xs = a.consts, a.carry, a.xs
        n_y = len(body.outputs) - nk
        xin, yout = [f"x{i}" for i in range(len(xs))], [f"yt{j}" for j in range(n_y)]
        cur, nxt = self.halves("k", init, body.outputs[:nk])
        seqs = self.seqs(xs, "q")
        ys = self.allocate([f"y{j}" for j in range(n_y)], e.outputs[nk:nk + n_y])
        recs = self.allocate([f"rec{i}" for i in range(len(e.outputs) - nk - n_y)], e.outputs[nk + n_y:])
        code = self.graph(body, consts + cur + xin, nxt + yout, 2, "B")
        self.declare()
        snapshots = p["record"] and p.get("checkpoint") is not None   # (the first sweep's: Scan's docstring)
        if snapshots:
            self.m.extras.append(np.ascontiguousarray(schedule.first_sweep(n, p["checkpoint"])[0]))
            self.emit(1, f"slot_at = X[{len(self.m.extras) - 1}]")
        self.steps = {"body": ([(xin, seqs), (yout, ys)], code)}
        self.halves_of = {"carry": (cur, nxt)}
        self.scan_steps(n, p["reverse"], f"{n} - 1", [(c, None) for c in cur], recs, body.outputs[:nk],
                        "slot_at" if snapshots else None)
        return cur + ys + recs

    def while_(self) -> list[str]:
        p = self.e.params
        body, cond = p["body"], p["cond"]
        a = WhileLayout.of(p).split(self.args)
        consts, init = a.consts, a.carry
        cur, nxt = self.halves("k", init, body.outputs)
        self.emit(1, f"pred = {_empty([], np.dtype(bool))}")
        test = self.graph(cond, consts + cur, ["pred"], 2, "C")
        step = self.graph(body, consts + cur, nxt, 2, "B")
        self.declare()
        self.emit(1, "n = 0")
        self.emit(1, "while True:")
        self.lines(test)
        self.emit(2, "if not pred[()]:")
        self.emit(3, "break")
        self.lines(step)
        self.swap(2, cur, nxt)
        self.emit(2, "n += 1")
        self.emit(1, f"trips = {_empty([], np.dtype(np.int64))}")
        self.emit(1, "trips[()] = n")
        return cur + ["trips"]

    def scan_revolve(self) -> list[str]:
        """The checkpoint schedule (tracekern.schedule), its actions walked here: advance, store,
        restore, the backward step."""
        e, p = self.e, self.e.params
        body, back, nk, ns, n = p["body"], p["back"], p["num_carry"], p["num_state"], p["length"]
        layout = RevolveLayout.of(p)
        o = layout.split(self.args)
        if layout.while_loop:   # a while loop's: the schedule is made when the trip count is known
            (trip,) = o.trip
            n, k = "n", "k"
            self.emit(1, f"n = {trip}[()]")
            self.emit(1, "with objmode(acts='int64[:, ::1]', k='int64'):")
            self.emit(2, f"k = schedule_slots(n, {p['checkpoint']!r})")
            self.emit(2, "acts = schedule_actions(n, k).copy()")
        resume = layout.resume   # (from the snapshots of the first sweep: ScanRevolve's docstring)
        if n != "n":
            k, first = str(p["checkpoint"]), 0
            if resume:
                _, positions, first = schedule.first_sweep(n, p["checkpoint"])
            self.m.extras.append(np.ascontiguousarray(schedule.actions(n, p["checkpoint"])[first:], np.int64))
            self.emit(1, f"acts = X[{len(self.m.extras) - 1}]")
        snaps = o.snaps   # (then the carry it starts from: with `resume`, the last step's)
        consts, init, xs, state0, ct_ys = o.consts, o.carry, o.xs, o.state, o.ct_ys
        cur, nxt = self.halves("k", init, body.outputs[:nk])
        scur, snxt = self.halves("s", state0, back.outputs[:ns])
        slots = [f"slot{i}" for i in range(nk)]
        for i, (sl, v) in enumerate(zip(slots, body.outputs)):
            self.emit(1, f"{sl} = {f'fresh_copy({snaps[i]})' if resume else _empty([k, *v.shape], v.dtype)}")
        if resume:
            self.m.extras.append(np.ascontiguousarray(positions))
            self.emit(1, f"slotpos = fresh_copy(X[{len(self.m.extras) - 1}])")
        else:
            self.emit(1, f"slotpos = {_empty([k], np.dtype(np.int64))}")
        scratch = self.allocate([f"yt{j}" for j in range(len(body.outputs) - nk)], body.outputs[nk:])   # (ys unused)
        grads = self.allocate([f"g{j}" for j in range(len(e.outputs) - ns)], e.outputs[ns:])
        seqs, cseqs = self.seqs(xs, "q"), self.seqs(ct_ys, "cq")
        xin, cin = [f"x{i}" for i in range(len(xs))], [f"cy{i}" for i in range(len(ct_ys))]
        gout = [f"gt{j}" for j in range(len(grads))]
        advance = self.graph(body, consts + cur + xin, nxt + scratch, 4, "B")
        reverse = self.graph(back, consts + scur + cur + xin + cin, snxt + gout, 3, "K")
        self.declare()
        tindex = f"{n} - 1 - pos" if p["reverse"] else "pos"
        self.emit(1, f"pos = {n} - 1" if resume else "pos = 0")
        self.steps = {"body": ([(xin, seqs)], advance), "back": ([(xin, seqs), (cin, cseqs), (gout, grads)], reverse)}
        self.halves_of = {"carry": (cur, nxt), "state": (scur, snxt)}
        self.revolve_actions("acts.shape[0]", "acts", tindex, [(c, None) for c in cur], slots, body.outputs, "slotpos")
        return scur + grads
