"""The Numba CPU backend: renders a fusion plan (backends/fusion.py) to compile units and a driver.

Each kernel of the plan (a fused loop nest, a matmul, a copy) is a compile unit (cpu_kernels.py). A
step's driver calls its kernels in order and runs its loops and branches (loops compiled whole:
cpu_loops.py). A small driver is itself an njit function (Python is entered once a call); a large one
is plain Python, since Numba's compile time for a function grows with its calls and it re-optimises
every kernel it links (tk.config.compiled_drivers asks for an njit one as well, for a straight-line
step of many small kernels: COMPILED_DRIVER_CALLS). The step at run time is cpu_runtime.py's CompiledStep."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import passes
from ..ir import Graph, Var
from ..primitives.control import RevolveLayout
from ..settings import config
from . import cache, cpu_calls, fusion, threads, tiers
from .cpu_kernels import EXACT, FAST, PLAIN, TARGET, Variant, _call_unit, _empty, _header, _LoopUnit, _raises, view
from .cpu_loops import _LoopFunction, _subgraphs
from .cpu_runtime import CompiledStep, _arg_spec, _gemm_macs
from .fusion import CallKernel, LoopKernel
from .render import CONTROL, ControlRenderer, Idioms
from .units import Unit

# staging's plan cache keeps this backend's finished steps: their compiled units are on disk
PLAN_CACHE = True
# how a driver allocates and copies: plain Python (NumPy), an njit driver, a loop compiled whole (its workspace)
PYTHON = Idioms(empty=lambda dims, dtype: f"np.empty(({''.join(f'{d}, ' for d in dims)}), np.{np.dtype(dtype).name})",
                copy="{x}.copy()", assign="{dst}[...] = {src}", truth="{x}[()]", contiguous="np.ascontiguousarray({x})")
NJIT = Idioms(empty=lambda dims, dtype: _empty(dims, dtype), copy="{x}.copy()", assign="put({dst}, {src})",
              truth="{x}[()]", contiguous="np.ascontiguousarray({x})")
INLINED = Idioms(empty=lambda dims, dtype: _empty(dims, dtype), copy="fresh_copy({x})", assign="assign({dst}, {src})",
                 truth="{x}[()]", contiguous="contiguous({x})")

# ----------------------------------------------------------------------------- steps

# A driver is plain Python, where a kernel call costs about half a microsecond, except where its
# loops would run in Python: a loop's body (a control-flow sub-graph) with at most this many kernel
# calls is an njit function, and so is a step whose loops' bodies all are, with at most this many
# calls itself. An njit driver's compile time grows by about 10 ms a call, and Numba optimises
# every kernel it links once more; for a straight-line step it buys nothing measurable (a step of
# one kernel on 8 elements: 3.3 us a call either way). See the README's design notes.
NJIT_DRIVER_CALLS = 8
# A loop whose body (and condition, and backward step) has no array of more than this many values runs
# all its steps inside one compiled function, whatever its number of kernel calls: at this size a
# kernel's work is a few microseconds, and a call from Python (about 1 us, with its allocations)
# would be a large part of it (the LSTM of kernels/: hidden size 14, 16 kernel calls a step forward).
SMALL_BODY_ELEMENTS = 1 << 14
_LOOPS = ("scan", "while", "scan_revolve")


def _largest(graph: Graph) -> int:
    """The most values of any array a graph (or a sub-graph of it) reads or makes."""
    most, todo = 0, [graph]
    while todo:
        g = todo.pop()
        for e in g.eqns:
            most = max([most] + [v.aval.size for v in list(e.inputs) + list(e.outputs)])
            todo += [p for p in e.params.values() if isinstance(p, Graph)]
    return most


def _kernel_calls(plan: fusion.Plan) -> int:
    return sum(1 for k in plan.kernels if isinstance(k, LoopKernel) or k.eqn.primitive.name not in CONTROL + ("print",))


@dataclass
class _Call:
    """One kernel of the plan as a call of its unit: args are (value, view) in parameter order (view:
    True for a transposed operand, pins, or nothing: see view()); `writes` are the buffers it fills
    (allocated by the caller)."""
    pos: int
    unit: Unit
    args: list[tuple[Var, bool | tuple]]
    writes: list[Var]


def _calls(plan: fusion.Plan) -> list:
    """The plan's kernels as _Call (compile units) or, for control flow and prints, the kernel itself."""
    out: list = []
    for pos, k in enumerate(plan.kernels):
        if isinstance(k, LoopKernel):
            lu = _LoopUnit(k)
            out.append(_Call(pos, lu.unit(), list(lu.params), k.writes))
        elif k.eqn.primitive.name in CONTROL or k.eqn.primitive.name in cpu_calls.STEP:
            out.append(k)
        else:
            out.append(_Call(pos, _call_unit(k), list(k.operands) + [(v, False) for v in k.eqn.outputs], list(k.eqn.outputs)))
    return out


# tk.config.compiled_drivers: a straight-line step of COMPILED_DRIVER_CALLS to COMPILED_DRIVER_MAX_CALLS small
# kernel calls (at most COMPILED_DRIVER_VALUES values a call on average) also gets an njit driver making the same
# calls in the same order (same bits), compiled after its kernels (README "Jacobians": the hand model's jacfwd
# 0.34 -> 0.12 ms a call; 0.2-0.5 s of compile a kernel call, hence off by default and the cap).
COMPILED_DRIVER_CALLS = 16
COMPILED_DRIVER_MAX_CALLS = 64
COMPILED_DRIVER_VALUES = 1 << 14


def _compiled_driver_pays(items: list) -> bool:
    """Whether a step's driver (its _calls) is worth compiling as well (tk.config.compiled_drivers)."""
    calls = [c for c in items if isinstance(c, _Call)]
    if not config.compiled_drivers or not COMPILED_DRIVER_CALLS <= len(calls) <= COMPILED_DRIVER_MAX_CALLS \
            or len(calls) != len(items):
        return False   # (few or too many calls, or control flow and prints: the driver as it is)
    return sum(v.aval.size for c in calls for v, _ in c.args) <= COMPILED_DRIVER_VALUES * len(calls)


def _compiled_driver(plan: fusion.Plan) -> tuple[str, dict]:
    """The njit driver of a straight-line plan (the one the Python driver is rendered from): its source and
    line -> equation map."""
    renderer = _Renderer(plan, _Module())
    renderer.jitted = True
    return renderer.render(), renderer.line_eqn


def compile_tiered(graph: Graph) -> tiers.TieredStep:
    """compile_graph's step on the tiers (backends/tiers.py): NumPy at once, compiled in the background."""
    return tiers.TieredStep(graph, lambda: compile_graph(graph, background_driver=True),
                            blas=_gemm_macs(graph) >= threads.BLAS_MIN_MACS)


def compile_graph(graph: Graph, background_driver: bool = False) -> CompiledStep:
    plan = fusion.plan(graph)
    module = _Module()
    renderer = _Renderer(plan, module)
    driver = renderer.render()
    fast, fast_lines = _compiled_driver(plan) if not renderer.jitted and _compiled_driver_pays(renderer.items) else (None, {})
    consts = [renderer.const_value(v) for v in plan.consts]
    if module.used:
        consts.append(tuple(module.extras))
    lines = {u.digest: u.lines for u in module.deps}
    lines[cache.source_digest(driver)] = renderer.line_eqn
    if fast is not None:
        lines[cache.source_digest(fast)] = fast_lines
    index = {u.digest: i for i, u in enumerate(module.deps)}
    inputs = {v: i for i, v in enumerate(graph.inputs)}
    const_of = {v: i for i, v in enumerate(plan.consts)}
    calls = [(index[c.unit.digest], [_arg_spec(v, t, inputs, const_of) for v, t in c.args])
             for c in renderer.items if isinstance(c, _Call)]
    step = CompiledStep(graph, plan, driver, module.deps, consts, lines, flagged=renderer.flag_needed(),
                        parallel=any(u.parallel for u in module.deps), jitted=renderer.jitted, calls=calls,
                        compiled_driver=fast, arena=None if renderer.jitted else renderer.arena)
    step.background_driver = background_driver
    # each unit's (values read, values written), from a kernel that renders it, where the driver is plain
    # Python that calls every unit itself (no loop, branch or njit function): the tiers' NumPy evaluation
    if not module.used and "@njit" not in driver:
        step.straight = True
        step.unit_kernels = {}
        for c in renderer.items:
            if isinstance(c, _Call) and index[c.unit.digest] not in step.unit_kernels:
                k = plan.kernels[c.pos]
                step.unit_kernels[index[c.unit.digest]] = ((k.reads, k.writes) if isinstance(k, LoopKernel)
                                                           else (list(k.eqn.inputs), list(k.eqn.outputs)))
    return step


class _Module:
    """What one driver module holds besides `step`: the kernel units it imports (`deps`), a function
    per control-flow sub-graph (a loop body, a branch), and the constant arrays those read, passed to
    every function as one tuple `X` (so a sub-graph's constants need no argument of their own)."""

    def __init__(self):
        self.lines: list[str] = []
        self.subs: dict[tuple, str] = {}
        self.sub_jitted: dict[int, bool] = {}
        self.extras: list[np.ndarray] = []
        self.used = False
        self.kernels: dict[str, Unit] = {}
        self.aliases: dict[str, str] = {}
        # loops compiled whole (tk.config.compiled_loops, read when the step is compiled): the
        # functions of their bodies (in workspace form) and of the loops themselves
        self.compiled_loops = config.compiled_loops
        self.loops: dict[tuple, str] = {}
        self._plans: dict[int, fusion.Plan] = {}
        self.renderer = _Renderer   # (what a loop compiled whole writes its body with: cpu_loops)

    def plan(self, graph: Graph) -> fusion.Plan:
        """The fusion plan of a sub-graph (made once per module)."""
        if id(graph) not in self._plans:
            self._plans[id(graph)] = fusion.plan(passes.inline_calls(graph))
        return self._plans[id(graph)]

    def compiles_whole(self, e) -> bool:
        """Whether loop `e` runs all its steps inside one compiled function (loop_function): loops
        whose bodies are small (every array of a step at most SMALL_BODY_ELEMENTS values, where a
        kernel call's overhead is a large part of its work) or few kernel calls. Other loops (large
        bodies of many kernels: Python's half a microsecond a call is nothing beside their work, and
        an njit body would cost ~10 ms of compile time a call) are driven from the step (render.py)."""
        if not self.compiled_loops or e.primitive.name not in _LOOPS:
            return False
        return all(_largest(g) <= SMALL_BODY_ELEMENTS or _kernel_calls(self.plan(g)) <= NJIT_DRIVER_CALLS
                   for g in _subgraphs(e))

    def loop_function(self, e, variant: Variant) -> str:
        """The njit function running loop `e` whole: `loopN(operands..., X[, F])` returns its outputs
        (rendered FAST and EXACT: `loopN_x`)."""
        key = (id(e), variant)
        if key not in self.loops:
            n = len(self.loops) // 2
            for v in (FAST, EXACT):   # (both names taken first: rendering may name loops nested in it)
                self.loops[(id(e), v)] = v.name(f"loop{n}")
            for v in (FAST, EXACT):
                text = _LoopFunction(self, e, self.loops[(id(e), v)], v).render()
                self.lines += text.lines + ["", ""]
        return self.loops[key]

    @property
    def deps(self) -> list[Unit]:
        return list(self.kernels.values())

    def alias(self, u: Unit) -> str:
        if u.digest not in self.aliases:
            self.kernels[u.digest] = u
            self.aliases[u.digest] = f"K{len(self.kernels) - 1}"
        return self.aliases[u.digest]

    def imports(self) -> list[str]:
        return [f"from {u.module_name} import kernel as {self.aliases[d]}"
                + (f", kernel_exact as {EXACT.name(self.aliases[d], 'x')}" if u.flagged else "")
                for d, u in self.kernels.items()]

    def sub(self, graph: Graph, variant: Variant) -> str:
        """The function of a sub-graph: `subN` uses vectorised sin/cos/tan and sets F[0] when an
        argument is beyond their range (the step then runs `step_exact`, which calls `subN_x`,
        the same with libm's)."""
        key = (id(graph), variant)
        if key not in self.subs:
            n = len(self.subs) // 2
            for v in (FAST, EXACT):
                self.subs[(id(graph), v)] = v.name(f"sub{n}")
            plan = fusion.plan(passes.inline_calls(graph))
            r = _Renderer(plan, self, sub=True)
            r.prepare()
            self.sub_jitted[id(graph)] = r.jitted
            for v in (FAST, EXACT):
                r.function(self.subs[(id(graph), v)], v)
                self.lines += r.lines + ["", ""]
                r.lines = []
        return self.subs[key]


class _Renderer(ControlRenderer):
    """Renders a plan's driver function: allocations by liveness, kernel calls, and control flow
    (render.py). The driver is an njit function when it is small (NJIT_DRIVER_CALLS) and all the
    sub-graph functions it calls are, else plain Python."""

    target = TARGET

    def __init__(self, plan: fusion.Plan, module: _Module, sub: bool = False, inlined: bool = False):
        super().__init__(plan, module, sub)
        self.items = _calls(plan)
        for item in self.items:
            if isinstance(item, _Call):
                module.alias(item.unit)
        loops = any(isinstance(k, CallKernel) and k.eqn.primitive.name in CONTROL for k in plan.kernels)
        self.jitted = inlined or (sub or loops) and sum(isinstance(i, _Call) for i in self.items) <= NJIT_DRIVER_CALLS
        # written into a compiled loop's function (inline): outputs into arrays it is given,
        # intermediate arrays into a workspace the loop allocates once, before its first step
        self.inlined = inlined
        self.workspace: list[tuple] = []
        self.indent = 0
        self.variant = PLAIN   # (of the function being rendered: function(), inline())
        # a step's plain-Python driver takes its buffers from W, a list the runtime keeps between calls
        # (cpu_runtime.Workspace): `arena` is their (shape, dtype), slot k being W[k]; None elsewhere
        self.arena: list[tuple] | None = None
        self._slot = 0

    def flag_needed(self) -> bool:
        return self.has_trig() or self.module.used

    def has_trig(self) -> bool:
        return any(isinstance(i, _Call) and i.unit.flagged for i in self.items)

    def emit(self, depth: int, text: str, eqn=None) -> None:
        self.lines.append("    " * (depth + self.indent) + text)
        if eqn is not None:
            self.line_eqn[len(self.lines) + self._offset] = eqn

    _offset = 0

    def inline(self, ins: list[str], outs: list[str], prefix: str, indent: int, variant: Variant) -> list[tuple]:
        """The graph's statements for a compiled loop's function (self.lines): its inputs named `ins`,
        its outputs written into the arrays named `outs`, its intermediate arrays `<prefix>w0`, ...
        (the workspace: returns their (shape, dtype), for the loop to allocate once). Its other local
        names start with `prefix`, so that several graphs share one function. A FAST variant: the function
        has `any_big` (True when a sin/cos/tan argument needed libm) and F."""
        self.start_function()
        self.lines, self.prefix, self.indent = [], prefix, indent - 1
        for v, name in zip(self.graph.inputs, ins):
            self.names[v] = name
        for v in self.plan.consts:
            self.names[v] = self.extra(self.const_value(v))
        self.variant = variant
        self.workspace, self.out_names = [], list(outs)
        self.walk(self.items)
        # outputs a kernel did not write in place (inputs passed through, constants, a value returned
        # twice, results of control flow) are copied into their arrays
        for j, v in enumerate(self.graph.outputs):
            if self.names[v] != self.out_names[j]:
                self.emit(1, self.h_assign(self.out_names[j], self.names[v]))
        self.indent = 0
        return list(self.workspace)

    def render(self) -> str:
        """The driver module's source: `step` (PLAIN); or, where a kernel has sin/cos/tan in loops or the
        step calls sub-graph functions, `step` (FAST: it returns the flag first, and when it is True the
        caller runs `step_exact`, the EXACT variant: see Variant)."""
        self.prepare()
        trig = self.flag_needed()   # (a sub-graph may have sin/cos/tan)
        head = _header("the driver of one step") + "".join(line + "\n" for line in self.module.imports()) + "\n"
        subs = self.module.lines
        self._offset = head.count("\n") + len(subs)
        self.lines = []
        for j, variant in enumerate((FAST, EXACT) if trig else (PLAIN,)):
            if j:
                self.emit(0, "")
                self.emit(0, "")
            self.function(variant.name("step", "_exact"), variant)
        return head + "\n".join(subs + self.lines) + "\n\n" + self.listing() + "\n"

    def prepare(self) -> None:
        """Render the functions of the control-flow sub-graphs this plan calls; a driver calling a
        sub-graph function that is plain Python is plain Python too."""
        for k in self.plan.kernels:
            if isinstance(k, CallKernel) and k.eqn.primitive.name in CONTROL:
                self.module.used = True
                if self.module.compiles_whole(k.eqn):
                    self.module.loop_function(k.eqn, FAST)
                    continue
                for key in ("true", "false", "cond", "body", "back"):
                    if key in k.eqn.params:
                        self.module.sub(k.eqn.params[key], FAST)
                        self.jitted = self.jitted and self.module.sub_jitted[id(k.eqn.params[key])]

    def function(self, name: str, variant: Variant = PLAIN) -> None:
        """The driver's (or a sub-graph's) function in this variant (render.ControlRenderer.function)."""
        self.variant = variant
        if self._python_step():
            self.arena = [] if self.arena is None else self.arena   # (step_exact takes the same slots)
            self._slot = 0
        super().function(name)

    def _python_step(self) -> bool:
        return not (self.jitted or self.sub or self.inlined)

    def h_parameters(self, bound: list[int]) -> list[str]:
        # (F: a one-element bool array, set when an argument needed libm; W: a Python step's buffers)
        return ((["X"] if self.module.used else []) + (["F"] if self.sub and self.variant.flags else [])
                + (["W"] if self._python_step() else []))

    def h_buffer(self, v: Var) -> str:
        if not self._python_step():
            return super().h_buffer(v)
        k, self._slot = self._slot, self._slot + 1
        slot = (tuple(v.shape), v.dtype.str)
        if k == len(self.arena):
            self.arena.append(slot)
        elif self.arena[k] != slot:
            raise AssertionError(f"the step's variants allocate differently at buffer {k}")
        return f"W[{k}]"

    def h_decorators(self) -> list[str]:
        if not self.jitted:
            return []
        prints = any(isinstance(k, CallKernel) and (k.eqn.primitive.name == "print" or (
            k.eqn.primitive.name == "scan_revolve" and RevolveLayout.of(k.eqn.params).while_loop)) for k in self.plan.kernels)
        # (nogil: other threads may run meanwhile; not with an objmode block (tk.print, a while loop's
        # schedule), which holds it)
        return [f"@njit(cache=True, error_model='numpy', no_cfunc_wrapper=True{'' if prints else ', nogil=True'})"]

    def h_prologue(self) -> None:
        if self.variant.flags:
            self.emit(1, "any_big = False  # a sin/cos/tan argument >= TRIG_LIMIT somewhere")
            if self.module.used and not self.sub:
                self.emit(1, f"F = {self.h_empty([1], np.dtype(bool))}")
                self.emit(1, "F[0] = False")

    def h_epilogue(self) -> list[str]:
        if self.variant.flags and self.sub:
            self.emit(1, "if any_big:")
            self.emit(2, "F[0] = True")
        elif self.variant.flags:
            return ["any_big | F[0]" if self.module.used else "any_big"]
        return []

    def alloc(self, v: Var) -> str:
        """Bind v to a buffer; in the workspace form, an output to its output array (the first time it
        is written) and an intermediate to a workspace array (a dead one of its shape if there is one)."""
        if not self.inlined:
            return super().alloc(v)
        outputs = self.graph.outputs
        if v in outputs and self.out_names[outputs.index(v)] not in self.names.values():
            name = self.names[v] = self.out_names[outputs.index(v)]
            return name
        free = self.pool.get((v.shape, v.dtype.str))
        if free:
            name = self.names[v] = free.pop()
            return name
        name = self.names[v] = f"{self.prefix}w{len(self.workspace)}"
        self.workspace.append((tuple(v.shape), v.dtype))
        return name

    # -- kernel units -----------------------------------------------------------------------
    def kernel(self, item, pos: int) -> None:
        if isinstance(item, _Call):
            self.unit_call(item, self.variant)
        else:
            self.call(item)

    def unit_call(self, c: _Call, variant: Variant) -> None:
        k = self.plan.kernels[c.pos]
        for v in c.writes:
            self.alloc(v)
        self.emit(1, f"# kernel {c.pos}: {_describe(k, self.names)}")
        fn = self.module.aliases[c.unit.digest]
        args = ", ".join(self.names[v] + view(how) for v, how in c.args)
        eqn = k.eqn if isinstance(k, CallKernel) else None
        if c.unit.flagged and variant.exact:
            self.emit(1, TARGET.call.format(fn=variant.name(fn, 'x'), args=args), eqn=eqn)
        elif c.unit.flagged and variant.flags:
            self.emit(1, "any_big = any_big | " + TARGET.call.format(fn=fn, args=args), eqn=eqn)
        else:
            self.emit(1, TARGET.call.format(fn=fn, args=args), eqn=eqn)

    # -- control flow and prints (render.py): loops in the step, sub-graphs as functions --------
    def call(self, k: CallKernel) -> None:
        e = k.eqn
        ops = [self.names[v] + (".T" if t else "") for v, t in k.operands]
        self.emit(1, f"# {e.primitive.name} -> {', '.join(str(v.aval) for v in e.outputs)}", eqn=e)
        if e.primitive.name in CONTROL and self.module.compiles_whole(e):
            tag = self.tag()
            call = self.module.loop_function(e, self.variant)
            self.emit(1, f"r{tag} = {call}({', '.join(ops + self.variant.extra)})", eqn=e)
            for i, v in enumerate(e.outputs):   # (the loop's own arrays: no copy needed)
                self.emit(1, f"{self.names.get(v) or self.fresh(v)} = r{tag}[{i}]")
        elif e.primitive.name in CONTROL:
            getattr(self, "control_" + e.primitive.name)(e, ops)
        else:   # (statements of the step itself: cpu_calls.STEP; _calls() keeps no other CallKernel)
            cpu_calls.STEP[e.primitive.name](self, k, ops, [self.names.get(v) or self.fresh(v) for v in e.outputs])

    def subcall(self, graph: Graph, args: list[str]) -> str:
        return f"{self.module.sub(graph, self.variant)}({', '.join(args + self.variant.extra)})"

    @property
    def idioms(self) -> Idioms:
        return INLINED if self.inlined else (NJIT if self.jitted else PYTHON)

    def h_schedule(self, acts: str, k: str, n: str, checkpoint: str, depth: int) -> None:
        if not self.jitted:
            super().h_schedule(acts, k, n, checkpoint, depth)
            return
        self.emit(depth, f"with objmode({acts}='int64[:, ::1]', {k}='int64'):")
        self.emit(depth + 1, f"{k} = schedule_slots({n}, {checkpoint})")
        self.emit(depth + 1, f"{acts} = schedule_actions({n}, {k}).copy()")

    def h_trip(self, name: str, n: str) -> None:
        self.emit(1, f"{name} = {self.h_empty([], np.dtype(np.int64))}")
        self.emit(1, f"{name}[()] = {n}")


def _describe(k, names: dict) -> str:
    """A comment on a kernel call, naming its buffers as the driver does (never by the IR's numbers)."""
    if isinstance(k, LoopKernel):
        what = ", ".join([f"store {names[v]}" for v in k.stores] + [f"{e.primitive.name} -> {e.outputs[0].aval}" for e in k.reductions]
                         + [f"then store {names[v]}" for v in k.epilogue])
        return f"loop over {list(k.domain)}{' in parallel' if k.parallel and not _raises(k) else ''}: {what}"
    return f"{k.eqn.primitive.name} -> {', '.join(str(v.aval) for v in k.eqn.outputs)}"
