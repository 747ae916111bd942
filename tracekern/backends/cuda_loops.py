"""The cuda target's loops on the device (DeviceLoops, the methods the cuda renderer inherits): a scan or a
checkpoint schedule whose body is only loop kernels runs as ONE cooperative kernel (render.CompiledLoop).

Its body's kernels are phases separated by grid-wide barriers; other loops run on the host (render.py)."""
from __future__ import annotations

import re

import numpy as np

from .. import passes, schedule
from ..ir import Graph, Var
from ..primitives.control import RevolveLayout, ScanLayout
from ..settings import config
from . import cuda_calls, fusion
from .cuda_kernels import _index, _Kernel, _size, _unflatten
from .fusion import CallKernel, LoopKernel
from .render import CompiledLoop


class _Phases:
    """Where a device loop's body is written (_DeviceLoop.graph): each kernel launch becomes a phase (its
    lines and parameters, host expression -> name), and the host statements (the body's buffers) are
    made once before the loop (`host`)."""

    one_block_size = True    # every phase uses launch.threads a block

    def __init__(self):
        self.host: list[str] = []
        self.phases: list[_Kernel] = []

    def emit(self, depth: int, text: str, eqn=None) -> None:
        self.host.append(text)

    def launch(self, kn: _Kernel, comment: str, grid, block, eqn=None, depth: int = 1) -> None:
        self.phases.append(kn)


class DeviceLoops:
    """A renderer's scan and scan_revolve on the device when their bodies allow it (else the host loops
    of render.ControlRenderer, next in the method order)."""

    # -- loops on the device -------------------------------------------------------------------------
    def control_scan(self, e, ops: list[str]) -> None:
        """A scan whose body is only loops (elementwise, reductions, copies) runs as ONE kernel whose
        threads loop over the steps, the body's kernels as phases separated by grid-wide barriers
        (a cooperative launch): no host work per step. Other scans loop on the host (render.py)."""
        p = e.params
        body = p["body"]
        plan = fusion.plan(passes.inline_calls(body))
        if not config.compiled_loops or not _device_loop_ok(body, plan) or p["length"] == 0:
            return super().control_scan(e, ops)   # (tk.config.compiled_loops=False: every loop on the host)
        nk, n = p["num_carry"], p["length"]
        n_y = len(body.outputs) - nk
        tag = self.tag()
        o = ScanLayout.of(p).split(ops)
        consts, init, xs = o.consts, o.carry, o.xs
        ys, recorded = e.outputs[nk:nk + n_y], e.outputs[nk + n_y:]
        carries = self._double_buffers(e, tag, "cb", init, body.outputs[:nk])
        for v in list(ys) + list(recorded):
            self._new(v)
        seqs = [self._contiguous_as(x, f"q{tag}_{i}") for i, x in enumerate(xs)]
        loop = _DeviceLoop(self, tag)
        snapshots = p["record"] and p.get("checkpoint") is not None   # (the first sweep's: Scan's docstring)
        if snapshots:
            slot_at = self.extra(np.ascontiguousarray(schedule.first_sweep(n, p["checkpoint"])[0]))
            self.module.on_device.add(len(self.module.extras) - 1)
            A = loop.param(slot_at, ("int64", 1))
        loop.steps["body"] = (body, plan, [(c, None) for c in consts] + [(c, "cur") for c in carries] + [(q, "t") for q in seqs],
                              [(c, "1 - cur") for c in carries] + [(self.names[v], "t") for v in ys])
        loop.begin = "cur = s % 2"   # (the current half of each carry)
        loop.scan_steps(n, p["reverse"], str(n - 1), [(c, "cur") for c in carries], [self.names[v] for v in recorded],
                        body.outputs[:nk], A if snapshots else None)
        loop.launch(e, f"{n} steps on the device")
        for i, v in enumerate(e.outputs[:nk]):
            self.emit(1, f"{self.fresh(v)} = {self.h_copy(f'{carries[i]}[{n % 2}:{n % 2 + 1}].reshape({tuple(v.shape)})')}")

    def control_scan_revolve(self, e, ops: list[str]) -> None:
        """A checkpointed scan's schedule (tracekern.schedule) run on the device when its body and
        its backward step are only loops: one cooperative kernel walks the actions (advance, store,
        restore, backward step), with the carries, the cotangent state and the k snapshots on the
        device. Else (and for a while loop's run-time schedule) on the host (render.py)."""
        p = e.params
        body, back, nk, ns, n = p["body"], p["back"], p["num_carry"], p["num_state"], p["length"]
        layout = RevolveLayout.of(p)
        plans = None
        if not layout.while_loop and n > 0:
            plans = (fusion.plan(passes.inline_calls(body)), fusion.plan(passes.inline_calls(back)))
        if not config.compiled_loops or plans is None or not _device_loop_ok(body, plans[0], outputs=nk) \
                or not _device_loop_ok(back, plans[1]):
            return super().control_scan_revolve(e, ops)
        resume, first = layout.resume, 0   # (from the snapshots of the first sweep: ScanRevolve's docstring)
        if resume:
            _, positions, first = schedule.first_sweep(n, p["checkpoint"])
        acts_host = np.ascontiguousarray(schedule.actions(n, p["checkpoint"])[first:], np.int64)
        k = max(1, int(p["checkpoint"]))
        tag = self.tag()
        o = layout.split(ops)
        snaps = o.snaps   # (then the carry it starts from: with `resume`, the last step's)
        consts, init, xs, state0, ct_ys = o.consts, o.carry, o.xs, o.state, o.ct_ys
        carries = self._double_buffers(e, tag, "cb", init, body.outputs[:nk])
        states = self._double_buffers(e, tag, "sb", state0, back.outputs[:ns])
        slots = [f"slot{tag}_{i}" for i in range(nk)]
        for i, (sl, v) in enumerate(zip(slots, body.outputs)):
            self.emit(1, f"{sl} = {self.h_copy(snaps[i]) if resume else self.h_empty([k, *v.shape], v.dtype)}")
        acts = self.extra(acts_host)
        self.module.on_device.add(len(self.module.extras) - 1)
        if resume:   # the steps the first sweep's slots hold
            held = self.extra(np.ascontiguousarray(positions))
            self.module.on_device.add(len(self.module.extras) - 1)
        grads = e.outputs[ns:]
        for v in grads:
            self._new(v)
        seqs = [self._contiguous_as(x, f"q{tag}_{i}") for i, x in enumerate(xs)]
        cseqs = [self._contiguous_as(x, f"cq{tag}_{i}") for i, x in enumerate(ct_ys)]
        scratch = []   # the body's outputs besides the carries: not kept here (the forward scan kept them)
        for j, v in enumerate(body.outputs[nk:]):
            scratch.append(f"ys{tag}_{j}")
            self.emit(1, f"ys{tag}_{j} = {self.h_empty(list(v.shape), v.dtype)}")
        tindex = f"{n - 1} - pos" if p["reverse"] else "pos"
        loop = _DeviceLoop(self, tag)
        A = loop.param(acts, ("int64", 2))
        loop.line(1, f"pos = {n - 1 if resume else 0}")
        loop.line(1, "cc = 0")
        loop.line(1, "sc = 0")
        loop.line(1, f"at = cuda.local.array({k}, np.int64)")
        if resume:
            H = loop.param(held, ("int64", 1))
            loop.line(1, f"for j in range({k}):")
            loop.line(2, f"at[j] = {H}[j]")
        loop.steps = {"body": (body, plans[0], [(c, None) for c in consts] + [(c, "cc") for c in carries] + [(q, "t") for q in seqs],
                               [(c, "1 - cc") for c in carries] + [(y, None) for y in scratch]),
                      "back": (back, plans[1], [(c, None) for c in consts] + [(st, "sc") for st in states]
                               + [(c, "cc") for c in carries] + [(q, "t") for q in seqs] + [(q, "t") for q in cseqs],
                               [(st, "1 - sc") for st in states] + [(self.names[v], "t") for v in grads])}
        loop.flips = {"carry": "cc = 1 - cc", "state": "sc = 1 - sc"}
        loop.revolve_actions(str(len(acts_host)), A, tindex, [(c, "cc") for c in carries], slots, body.outputs, "at")
        loop.launch(e, f"the checkpointed schedule of {n} steps on the device")
        for i, v in enumerate(e.outputs[:ns]):   # n backward steps: the state is in half n % 2
            self.emit(1, f"{self.fresh(v)} = {self.h_copy(f'{states[i]}[{n % 2}:{n % 2 + 1}].reshape({tuple(v.shape)})')}")

    def _double_buffers(self, e, tag: int, prefix: str, init: list[str], avals: list) -> list[str]:
        """Device arrays of two halves (2, *shape) per value, the first filled from `init`."""
        names = [f"{prefix}{tag}_{i}" for i in range(len(init))]
        for c, x, v in zip(names, init, avals):
            self.emit(1, f"{c} = {self.h_empty([2, *v.shape], v.dtype)}", eqn=e)
            self.emit(1, self.h_assign(f"{c}[0:1].reshape({tuple(v.shape)})", x))
        return names


def _device_loop_ok(body: Graph, plan: fusion.Plan, outputs: int | None = None) -> bool:
    """Whether a loop body can run as phases of one device-side loop: only loops and copies (no
    matmul, branch, nested loop or print), and each of its first `outputs` outputs (all by
    default) made by the body itself, once (not an input passed through, which needs a copy)."""
    for k in plan.kernels:
        if isinstance(k, CallKernel) and k.eqn.primitive.name not in cuda_calls.IN_DEVICE_LOOPS:
            return False
    made = {v for k in plan.kernels for v in (k.writes if isinstance(k, LoopKernel) else k.eqn.outputs)}
    outs = list(body.outputs)
    return all(v in made for v in outs[:outputs]) and len(set(outs)) == len(outs)


class _DeviceLoop(CompiledLoop):
    """One cooperative kernel being written: its parameters (host expressions of the enclosing
    host function), phase device functions, and the loop code that calls them, each phase
    followed by a grid-wide barrier. A phase argument given with a row index (an expression of
    the loop's variables) receives the whole array and the index, and its indexing gains the row
    first, so one phase serves every step."""

    def __init__(self, renderer, tag: int):
        self.r = renderer
        self.tag = tag
        self.params: dict[str, str] = {}
        self.avals: dict[str, tuple] = {}
        self.functions: list[str] = []
        self.lines = ["    g = cuda.cg.this_grid()"]
        # render.CompiledLoop's hooks: the steps of "body" and "back" (graph, plan, inputs, outputs: see graph()),
        # the statement starting a scan's step, and those swapping the halves after a step ("carry", "state")
        self.steps: dict[str, tuple] = {}
        self.begin: str | None = None
        self.flips: dict[str, str] = {}

    def param(self, host: str, aval: tuple | None = None) -> str:
        if aval is not None:
            self.avals.setdefault(host, aval)
        return self.params.setdefault(host, f"p{len(self.params)}")

    def line(self, depth: int, text: str) -> None:
        self.lines.append("    " * depth + text)

    def copy_value(self, depth: int, src: tuple, dst: tuple, aval) -> None:
        self.copy(depth, src, dst, tuple(aval.shape), aval.dtype)

    def step(self, depth: int, which: str) -> None:
        self.graph(depth, *self.steps[which])

    def begin_step(self, depth: int) -> None:
        if self.begin:
            self.line(depth, self.begin)

    def end_step(self, depth: int, which: str) -> None:
        if which in self.flips:
            self.line(depth, self.flips[which])

    def phase(self, depth: int, body_lines: list[str], args: list[tuple[str, str | None]]) -> None:
        j = len(self.functions)
        names, call = [], []
        text = "\n".join(body_lines)
        for i, (base, index) in enumerate(args):
            names.append(f"p{i}")
            call.append(base)
            if index is not None:
                names.append(f"p{i}_i")
                call.append(index)
                text = re.sub(rf"\bp{i}\[\(\)\]", f"p{i}[p{i}_i]", text)
                text = re.sub(rf"\bp{i}\[(?!p{i}_i\])", f"p{i}[p{i}_i, ", text)
        self.functions.append("\n".join(["@cuda.jit(device=True)", f"def phase{j}({', '.join(names)}):", text, "", ""]))
        self.line(depth, f"phase{j}({', '.join(call)})")
        self.line(depth, "g.sync()")

    def copy(self, depth: int, src: tuple[str, str | None], dst: tuple[str, str | None], shape: tuple, dtype) -> None:
        """A phase copying a row (of `shape` and `dtype`) of one array into a row of another (an
        index None: the whole array)."""
        if not _size(shape):
            return
        kn = _Kernel()
        idx = [f"i{a}" for a in range(len(shape))]
        kn.emit(1, f"for f in range(cuda.grid(1), {_size(shape)}, cuda.gridsize(1)):")
        _unflatten(kn, "f", shape, idx, 2)
        kn.emit(2, f"p1[{_index(idx)}] = p0[{_index(idx)}]")
        aval = lambda row: (np.dtype(dtype).name, len(shape) + (row is not None))   # noqa: E731
        self.phase(depth, kn.lines, [(self.param(src[0], aval(src[1])), src[1]), (self.param(dst[0], aval(dst[1])), dst[1])])

    def graph(self, depth: int, graph: Graph, plan: fusion.Plan, inputs: list, outputs: list) -> None:
        """Phases running one step of `graph` (its plan): input k is inputs[k], output k written to
        outputs[k], each (host array, row index or None). Its other buffers are made on the host once."""
        body = type(self.r)(plan, self.r.module, sub=True, out=_Phases(),
                         outputs=[f"o{self.tag}_{k}" for k in range(len(graph.outputs))])
        body.serial = self.r.serial   # (the enclosing function's: the body's buffers are made in it)
        self.r.module.on_device.update(body.bind_arguments([]))
        body.walk(plan.kernels)
        for text in body.out.host:
            self.r.emit(1, text)
        where = {f"a{k}": x for k, x in enumerate(inputs)}
        for k, v in enumerate(graph.outputs):
            if v in body.names:
                where[body.names[v]] = outputs[k]
        for kn in body.out.phases:
            args = []
            for host, (_, what) in kn.params.items():
                base, index = where.get(host, (host, None))
                aval = (what.dtype.name, len(what.shape)) if isinstance(what, Var) else what
                args.append((self.param(base, (aval[0], aval[1] + (index is not None))), index))
            self.phase(depth, kn.lines, args)

    def launch(self, e, comment: str) -> None:
        text = "\n".join(self.functions + ["@cuda.jit(cache=True)", f"def kernel({', '.join(self.params.values())}):"]
                         + self.lines)
        sig = [self.avals.get(h, ("int64", 2)) for h in self.params]
        name = self.r.module.loop_kernel(text, sig)
        self.r.emit(1, f"R.cooperative({name}, {self.r.launch.threads}, {', '.join(self.params)})  # {comment}", eqn=e)
