"""A toy third backend, kept as a test fixture: it renders a fusion plan as ONE plain Python function of
nested loops (no Numba), following the README's "Adding a backend" recipe: a render.Target (its tables),
its whole-array kernels registered per primitive with the registries' one signature, and a renderer of
its loop skeleton on render.ControlRenderer (the walk over the plan, buffers by liveness, control flow).

tests/test_render.py registers it as backend "toy" (backends.MODULES) and compares it with "interpret".
It runs float64 elementwise math, reductions (with their epilogues), matmul, concatenate, cond, scan and
while loops: what its tests need, slowly (a Python loop per element)."""
from __future__ import annotations

import numpy as np

from tracekern import passes
from tracekern.backends import fusion, render
from tracekern.backends.fusion import LoopKernel
from tracekern.backends.render import CONTROL, ControlRenderer, Idioms, Target, loop_nest, subscript
from tracekern.errors import TracekernError

KERNELS, kernel = render.kernel_registry()
_MATH = ("exp", "log", "log1p", "expm1", "sin", "cos", "tan", "tanh", "sqrt", "arctan")


def _functions(dtype: np.dtype, exact: bool = False) -> dict[str, str]:
    """The scalar templates' math names: NumPy's ufuncs on scalars, and scalar_rules' helpers."""
    return {**{f: f"np.{f}" for f in _MATH}, "pow": "np.power", "abs": "abs", "sign": "np.sign",
            "maximum": "maximum_f", "minimum": "minimum_f", "radd": "radd", "rmul": "rmul", "div": "rdiv"}


TARGET = Target("toy", on_device=False, functions=_functions, casts=render.CASTS, index=render.plain_index,
                kernels=KERNELS, loops="one Python for loop per axis")
IDIOMS = Idioms(empty=lambda dims, dtype: f"np.empty(({''.join(f'{d}, ' for d in dims)}), np.{np.dtype(dtype).name})",
                copy="{x}.copy()", assign="{dst}[...] = {src}", truth="{x}[()]", contiguous="np.ascontiguousarray({x})")
_HEADER = """import numpy as np
from tracekern.backends.scalar_rules import maximum_f, minimum_f
from tracekern.schedule import actions as schedule_actions, slots as schedule_slots
f32, f64, i32, i64, boolean = np.float32, np.float64, np.int32, np.int64, np.bool_
c64, c128 = np.complex64, np.complex128


def radd(a, b):
    return a + b


def rmul(a, b):
    return a * b


def rdiv(a, b):
    return a / b
"""


@kernel("matmul")
def _matmul(r, k, ops, dsts) -> None:
    r.emit(1, f"np.matmul({ops[0]}, {ops[1]}, out={dsts[0]})", eqn=k.eqn)


@kernel("concatenate")
def _concatenate(r, k, ops, dsts) -> None:
    r.emit(1, f"{dsts[0]}[...] = np.concatenate([{', '.join(ops)}], axis={k.eqn.params['axis']})", eqn=k.eqn)


class _Module:
    """The generated module: a function per control-flow sub-graph, then `step`; the constants sub-graphs
    read travel in X."""

    def __init__(self):
        self.lines: list[str] = []
        self.subs: dict[int, str] = {}
        self.extras: list[np.ndarray] = []

    def sub(self, graph) -> str:
        if id(graph) not in self.subs:
            name = self.subs[id(graph)] = f"sub{len(self.subs)}"
            r = _Renderer(fusion.plan(passes.inline_calls(graph)), self, sub=True)
            r.function(name)
            self.lines += r.lines + ["", ""]
        return self.subs[id(graph)]


class _Renderer(ControlRenderer):
    """Its functions are the base class's skeleton (render.ControlRenderer.function), with X last and every
    output returned as a copy."""
    target = TARGET
    idioms = IDIOMS

    def emit(self, depth: int, text: str, eqn=None) -> None:
        self.lines.append("    " * depth + text)

    def h_parameters(self, bound: list[int]) -> list[str]:
        return ["X"]

    def h_returned(self, v) -> str:
        return self.h_copy(self.names[v])

    def kernel(self, k, pos: int) -> None:
        if isinstance(k, LoopKernel):
            self.loop(k)
            return
        e = k.eqn
        ops = [self.names[v] + (".T" if t else "") for v, t in k.operands]
        if e.primitive.name in CONTROL:
            getattr(self, "control_" + e.primitive.name)(e, ops)
            return
        if e.primitive.name not in TARGET.kernels:
            raise TracekernError(f"the toy backend has no kernel for {e.primitive.name}")
        TARGET.kernels[e.primitive.name](self, k, ops, [self.alloc(v) for v in e.outputs])

    def loop(self, k: LoopKernel) -> None:
        """One loop nest over the domain: the body, stores, and each reduction folded into its output
        (filled with the identity first); the epilogue in a nest of its own over the kept axes."""
        for v in k.writes:
            self.alloc(v)
        n = len(k.domain)
        for e in k.reductions:
            self.emit(1, f"{self.names[e.outputs[0]]}[...] = {render.identity_literal(e.primitive.identity, e.outputs[0].dtype)}")
        idx = fusion.identity_index(k.domain)
        depth = loop_nest(self, 1, k.domain, idx)
        self.statements(k.body, depth)
        for v in k.stores:
            self.emit(depth, f"{subscript(self.names[v], idx)} = {k.results[v]}")
        for e in k.reductions:
            cell = subscript(self.names[e.outputs[0]], [idx[a] for a in range(n) if a not in e.params["axes"]])
            fns = TARGET.functions(e.outputs[0].dtype, False)
            self.emit(depth, f"{cell} = " + e.primitive.combine.format(acc=cell, x=k.results[e], **fns), eqn=e)
        if k.epilogue:
            depth = loop_nest(self, 1, k.domain[:k.epilogue_first], idx)
            self.statements(k.epilogue_body, depth)
            for v in k.epilogue:
                self.emit(depth, f"{subscript(self.names[v], k.epilogue_index(v))} = {k.epilogue_results[v]}")

    def statements(self, body: list, depth: int) -> None:
        for stmt in body:
            self.emit(depth, *render.scalar_statement(TARGET, stmt, lambda s: (self.names[s.var], s.index)))

    # -- control flow (render.ControlRenderer) -----------------------------------------------------
    def subcall(self, graph, args: list[str]) -> str:
        return f"{self.module.sub(graph)}({', '.join(args + ['X'])})"

    def h_trip(self, name: str, n: str) -> None:
        self.emit(1, f"{name} = np.array({n}, np.int64)")


class Step:
    """The compiled graph: the generated module's `step`, called on a list of arrays."""

    def __init__(self, plan: fusion.Plan, source: str, consts: list, extras: list):
        self.plan, self.source, self.peak_bytes = plan, source, plan.peak_bytes
        namespace: dict = {}
        exec(compile(source, "<toy backend>", "exec"), namespace)
        self._step, self._consts, self._extras = namespace["step"], consts, tuple(extras)

    def __call__(self, args) -> list:
        return list(self._step(*[np.asarray(a) for a in args], *self._consts, self._extras))


def compile_graph(graph) -> Step:
    plan = fusion.plan(graph)
    module = _Module()
    r = _Renderer(plan, module)
    r.function("step")
    source = _HEADER + "\n\n" + "\n".join(module.lines + r.lines) + "\n"
    return Step(plan, source, [r.const_value(v) for v in plan.consts], module.extras)
