"""The one walker over a plan, which every kernel renderer shares: the driver or host launcher skeleton,
control flow, the structure of a loop compiled whole, and the line buffer, scalar statements and literals.

ControlRenderer.function is a function of the graph's inputs that allocates by liveness, calls its kernels
in plan order, releases and returns; control flow (cond, scan, while and scan_revolve) runs as loops in the
generated step, calling a function per sub-graph (a loop body, a branch); CompiledLoop is a scan's steps
and a checkpoint schedule's actions inside one compiled function or kernel.

A backend is a Target (its tables: math and cast names, element indexing, its call or launch syntax and
its functions' leading parameters, whether its arrays live on a device, its whole-array kernels
registered per primitive) and a renderer of its own loop kernels. cpu renders control flow into its njit
step, cuda into its host launcher; each supplies the few statements that differ (its Idioms, and the
hooks: parameters, decorators, the trig flag's prologue and epilogue, the run-time schedule, a trip
count; a compiled loop's copies, steps and swaps)."""
from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .. import schedule
from ..ir import Graph, Var, format_graph
from ..primitives.control import RevolveLayout, ScanLayout, WhileLayout
from . import fusion

CONTROL = ("cond", "scan", "while", "scan_revolve")
# the names both math modules (cpu_math, cuda_math) give the casts to each dtype
CASTS = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "boolean", "complex64": "c64",
         "complex128": "c128"}


class Lines:
    """The line buffer of one generated function: its lines, and the equation each line comes from (by
    line number, from 1)."""

    def __init__(self):
        self.lines: list[str] = []
        self.line_eqn: dict[int, object] = {}

    def emit(self, depth: int, text: str, eqn=None) -> None:
        self.lines.append("    " * depth + text)
        if eqn is not None:
            self.line_eqn[len(self.lines)] = eqn


@dataclass(frozen=True)
class Idioms:
    """How the code a renderer writes outside its kernels (a driver, a host launcher, a compiled loop)
    allocates, copies and reads arrays: str.format templates, but `empty`, a function of (dims, dtype)."""
    empty: Callable[[Sequence, np.dtype], str]   # a new uninitialised array, dims given as ints or expressions
    copy: str          # {x}: a fresh copy of array x
    assign: str        # {dst}, {src}: the statement copying array src into the (same-shaped) view dst
    truth: str         # {x}: a 0-d bool array's value where the code runs
    contiguous: str    # {x}: x, C-contiguous


@dataclass(frozen=True)
class Target:
    """A backend's tables: what its renderer looks up rather than decides. Adding a backend is a Target,
    its registry entries (a kernel writer per primitive, the signature (renderer, call kernel, operand
    names, output names)), and a renderer of its loop skeleton (README: Adding a backend)."""
    name: str
    on_device: bool                                  # its arrays live on a device (its host code holds device arrays)
    functions: Callable[[np.dtype, bool], dict]      # the math names of the scalar templates, per dtype (exact: libm trig)
    casts: dict[str, str]                            # the cast function of each dtype
    index: Callable[[Sequence[str]], str]            # an element's index inside a loop kernel, from its loop variables
    kernels: dict[str, Callable]                     # whole-array kernels, registered per primitive
    loops: str                                       # its loop kernels' skeleton, in words (its renderer writes it)
    float_templates: dict[str, str] = field(default_factory=dict)   # scalar templates it writes otherwise for floats
    call: str = "{fn}({args})"                       # a kernel call in its driver or host launcher ({grid}, {block}: a launch's)
    leading: tuple[str, ...] = ()                    # parameters its driver functions take before the graph's inputs


def plain_index(idx: Sequence[str]) -> str:
    """`i, j`, or `()` for a 0-d array."""
    return ", ".join(idx) if idx else "()"


def scalar_statement(target: Target, stmt, array: Callable, exact: bool = False,
                     constants: set | None = None) -> tuple[str, object]:
    """One statement of a fused loop's body (fusion.Read, Literal, Index or Compute) as a line, and the
    equation it comes from (a Compute's, else None). array(stmt): the array name a Read reads and the
    index it reads at (the renderer's parameters); exact: libm's sin/cos/tan (Target.functions).
    constants: the kernel's statements so far whose values are constants (this call adds to it): a
    Compute of constants keeps its plain template, which the compiler folds (Target.float_templates
    are calls it cannot fold)."""
    if isinstance(stmt, fusion.Read):
        name, index = array(stmt)
        return f"{stmt.name} = {name}[{target.index(index)}]", None
    if isinstance(stmt, fusion.Literal):
        if constants is not None:
            constants.add(stmt.name)
        return f"{stmt.name} = {literal(stmt.eqn.params['value'], stmt.eqn.outputs[0].dtype)}", None
    if isinstance(stmt, fusion.Index):
        return f"{stmt.name} = {stmt.expr}", None
    e = stmt.eqn
    dtype = e.inputs[0].dtype if e.inputs else e.outputs[0].dtype
    folded = constants is not None and bool(stmt.args) and all(a in constants for a in stmt.args)
    if folded:
        constants.add(stmt.name)
    template = stmt.template if folded or dtype.kind != "f" else target.float_templates.get(stmt.template, stmt.template)
    expr = template.format(*stmt.args, **target.functions(dtype, exact))
    out = e.outputs[0].dtype
    if not (out.kind == "f" and all(v.dtype == out for v in e.inputs)):
        # (float arithmetic on one dtype stays in it; ints widen to int64 in Numba; a cast per
        # statement also costs type-inference time)
        expr = f"{target.casts[out.name]}({expr})"
    return f"{stmt.name} = {expr}  # {e.primitive.name}", e


def kernel_registry() -> tuple[dict, Callable]:
    """A table of kernel writers by primitive name (backends' *_calls modules), and the decorator
    `@kernel("name", ...)` that fills it."""
    table: dict[str, Callable] = {}

    def kernel(*names: str):
        def register(fn):
            for name in names:
                table[name] = fn
            return fn
        return register
    return table, kernel


# A loop nest over more axes than this is rendered as one flat loop (CPython compiles at most 20
# statically nested blocks, and arrays have up to ir.MAX_RANK = 32 axes); fewer, one `for` per axis.
FLAT_ABOVE = 8


def loop_nest(t, depth: int, sizes: Sequence, names: Sequence[str], flat: str = "f") -> int:
    """Loops over `sizes` (ints, or expressions such as p0.shape[3]) with loop variables `names`,
    emitted into `t` at `depth`; the depth of their body. Up to FLAT_ABOVE axes, one `for` per axis;
    more, one flat loop (see flat_loop)."""
    if len(sizes) > FLAT_ABOVE:
        return flat_loop(t, depth, sizes, names, flat)
    for n, name in zip(sizes, names):
        t.emit(depth, f"for {name} in range({n}):")
        depth += 1
    return depth


def flat_loop(t, depth: int, sizes: Sequence, names: Sequence[str], flat: str) -> int:
    """One loop over the product of `sizes` (variable `flat`) whose body first computes each axis's
    variable of `names` from it, in row-major order (the order of the nest it replaces); the depth of
    the body. One size: a plain `for`."""
    if len(sizes) == 1:
        t.emit(depth, f"for {names[0]} in range({sizes[0]}):")
        return depth + 1
    t.emit(depth, f"for {flat} in range({' * '.join(f'({n})' if not isinstance(n, int) else str(n) for n in sizes)}):")
    rest = flat
    for k in reversed(range(len(sizes))):
        n, name = sizes[k], names[k]
        if n == 1:
            t.emit(depth + 1, f"{name} = 0")
        elif k == 0:
            t.emit(depth + 1, f"{name} = {rest}")
        else:
            t.emit(depth + 1, f"{name} = {rest} % {n if isinstance(n, int) else f'({n})'}")
            t.emit(depth + 1, f"{flat}r = {rest} // {n if isinstance(n, int) else f'({n})'}")
            rest = f"{flat}r"
    return depth + 1


def subscript(array: str, idx: Sequence[str]) -> str:
    """`array[i, j]`, or `array[()]` for a 0-d array."""
    return f"{array}[{', '.join(idx)}]" if idx else f"{array}[()]"


def _float_text(f: float) -> str:
    return "np.nan" if f != f else ("np.inf" if f == np.inf else ("-np.inf" if f == -np.inf else repr(f)))


def literal(value, dtype: np.dtype) -> str:
    cast = CASTS[dtype.name]
    v = np.asarray(value).astype(dtype)[()]
    if dtype.kind == "f":
        text = _float_text(float(v))
    elif dtype.kind == "c":
        text = f"complex({_float_text(float(v.real))}, {_float_text(float(v.imag))})"
    elif dtype.kind == "b":
        text = repr(bool(v))
    else:
        text = repr(int(v))
    return f"{cast}({text})"


def identity_literal(identity: str, dtype: np.dtype) -> str:
    if identity in ("0", "1"):
        return literal(int(identity), dtype)
    low = identity == "-inf"
    if dtype.kind == "f":
        return literal(-np.inf if low else np.inf, dtype)
    if dtype.kind == "b":
        return literal(not low, dtype)
    info = np.iinfo(dtype)
    return literal(info.min if low else info.max, dtype)


class ControlRenderer(ABC):
    """Base of the kernel renderers: the state they share (names, the pool of dead buffers), buffer
    allocation by the plan's liveness, and control flow. A renderer defines emit(depth, text,
    eqn) and the hooks below."""

    target: Target   # (the backend's tables)

    def __init__(self, plan, module, sub: bool = False):
        self.module = module
        self.sub = sub
        self.plan = plan
        self.graph = plan.graph
        self.items: Sequence = plan.kernels          # what walk() renders: the plan's kernels, or what the renderer makes of them
        self.lines: list[str] = []
        self.line_eqn: dict[int, object] = {}
        self.names: dict[Var, str] = {}
        self.pool: dict[tuple, list[str]] = {}   # dead buffers by (shape, dtype), ready for reuse
        self.serial = itertools.count()          # numbers of the function's buffers and loops, in order of first use
        self.prefix = ""                         # of those names: graphs written into one function each have their own

    @abstractmethod
    def emit(self, depth: int, text: str, eqn=None) -> None:
        """Append a line of the function being rendered (eqn: the equation it comes from)."""

    # -- hooks ------------------------------------------------------------------------
    @abstractmethod
    def subcall(self, graph: Graph, args: list[str]) -> str:
        """Call of the sub-graph's function: returns a tuple of arrays."""

    @property
    @abstractmethod
    def idioms(self) -> Idioms:
        """How the function being rendered allocates, copies and reads arrays."""

    def h_empty(self, dims: list, dtype: np.dtype) -> str:
        return self.idioms.empty(dims, dtype)

    def h_buffer(self, v: Var) -> str:
        """A new buffer for v, made where the function binds it (alloc): an empty array by default."""
        return self.h_empty(list(v.shape), v.dtype)

    def h_copy(self, x: str) -> str:
        return self.idioms.copy.format(x=x)

    def h_assign(self, dst: str, src: str) -> str:
        return self.idioms.assign.format(dst=dst, src=src)

    def h_truth(self, x: str) -> str:
        return self.idioms.truth.format(x=x)

    def h_contiguous(self, x: str) -> str:
        return self.idioms.contiguous.format(x=x)

    def h_schedule(self, acts: str, k: str, n: str, checkpoint: str, depth: int) -> None:
        """Statements binding `k` to schedule.slots(n, checkpoint) and `acts` to schedule.actions(n, k)
        (an int64 array (steps, 2)); `checkpoint` is the param's repr. Host code calls them directly
        (a target whose driver is compiled wraps them: cpu's njit driver, in objmode)."""
        self.emit(depth, f"{k} = schedule_slots({n}, {checkpoint})")
        self.emit(depth, f"{acts} = schedule_actions({n}, {k})")

    @abstractmethod
    def h_trip(self, name: str, n: str) -> None:
        """Statements binding `name` to a 0-d int64 array holding n."""

    @abstractmethod
    def kernel(self, item, pos: int) -> None:
        """Render kernel `pos` of the plan (a loop kernel, a whole-array kernel, control flow)."""

    def h_parameters(self, bound: list[int]) -> list[str]:
        """The function's parameters after the graph's inputs and constants (bound: the X indices of a
        sub-graph's constants, bind_arguments)."""
        return []

    def h_decorators(self) -> list[str]:
        return []

    def h_prologue(self) -> None:
        """Statements before the function's kernels (none by default)."""
        return None

    def h_epilogue(self) -> list[str]:
        """Statements after the function's kernels; the values it returns before the graph's outputs."""
        return []

    def h_returned(self, v: Var) -> str:
        """How the function returns output v: a copy of a constant (never the constant itself)."""
        return self.h_copy(self.names[v]) if v in self.plan.consts else self.names[v]

    # -- shared ----------------------------------------------------------------------------
    def function(self, name: str) -> None:
        """The driver (cpu) or host launcher (cuda) skeleton, and a sub-graph's function: a function of the
        graph's inputs and constants (Target.leading first, then the hooks' parameters) that allocates its
        buffers by liveness, calls its kernels in plan order (walk: Target.call), releases them, and
        returns the graph's outputs; the hooks add what a target does besides (decorators, a prologue, an
        epilogue, the values it returns first)."""
        self.start_function()
        args = list(self.target.leading)
        args += self.h_parameters(self.bind_arguments(args))
        for line in self.h_decorators():
            self.emit(0, line)
        self.emit(0, f"def {name}({', '.join(args)}):")
        self.h_prologue()
        self.walk(self.items)
        outs = self.h_epilogue() + [self.h_returned(v) for v in self.graph.outputs]
        self.emit(1, f"return ({', '.join(outs)},)" if outs else "return ()")

    def walk(self, items: Sequence) -> None:
        """The plan's kernels in order (items: the plan's kernels, or what the renderer made of them),
        each buffer returned to the pool when it dies."""
        for pos, item in enumerate(items):
            self.kernel(item, pos)
            self.release(pos)

    def start_function(self) -> None:
        """Forget the previous function's names: each function numbers its buffers and loops from 0."""
        self.names, self.pool, self.serial = {}, {}, itertools.count()

    def fresh(self, v: Var) -> str:
        """A new buffer name for v: b0, b1, ... in order of first use in the function, never the IR's
        variable numbers, so that the same program renders the same text (and hits the same disk
        cache entry and compiled driver) however often it is traced."""
        name = self.names[v] = f"{self.prefix}b{next(self.serial)}"
        return name

    def tag(self) -> str:
        """A number for one control-flow construct's local names (its carries, results, sequences)."""
        return f"{self.prefix}{next(self.serial)}"

    def listing(self) -> str:
        """The graph as comments at the end of a driver: its values named by first use, without
        the user's source lines (a driver's text depends only on the program it runs)."""
        return "\n".join("# " + line for line in format_graph(self.graph, show_source=False).splitlines())

    def const_value(self, v: Var) -> np.ndarray:
        return np.ascontiguousarray(next(e for e in self.graph.eqns if v in e.outputs).params["value"])

    def alloc(self, v: Var) -> str:
        """Bind v to a buffer: a dead one of its shape and dtype if there is one, else a new one."""
        name = self.fresh(v)
        free = self.pool.get((v.shape, v.dtype.str))
        if free:
            self.emit(1, f"{name} = {free.pop()}  # reuses a dead buffer")
        else:
            self.emit(1, f"{name} = {self.h_buffer(v)}")
        return name

    def release(self, pos: int) -> None:
        """Return the buffers dead after kernel `pos` to the pool."""
        for v in self.plan.frees.get(pos, ()):
            self.pool.setdefault((v.shape, v.dtype.str), []).append(self.names[v])

    def bind_arguments(self, args: list[str]) -> list[int]:
        """Name the graph's inputs a0, a1, ... and its constants c0, c1, ..., appending them to the
        function's `args`; a sub-graph's constants travel in X instead: returns their X indices."""
        for k, v in enumerate(self.graph.inputs):
            self.names[v] = f"a{k}"
            args.append(f"a{k}")
        in_x = []
        for k, v in enumerate(self.plan.consts):
            if self.sub:
                self.names[v] = self.extra(self.const_value(v))
                in_x.append(len(self.module.extras) - 1)
            else:
                self.names[v] = f"c{k}"
                args.append(f"c{k}")
        return in_x

    def extra(self, value: np.ndarray) -> str:
        """A constant array every function of the module receives (in the tuple X)."""
        self.module.extras.append(value)
        return f"X[{len(self.module.extras) - 1}]"

    def _outputs(self, e, outputs, values: list[str], depth: int = 1) -> None:
        """Bind `outputs` (of equation e) to copies of `values` (fresh arrays: no aliasing of inputs)."""
        for v, val in zip(outputs, values):
            name = self.names.get(v) or self.fresh(v)    # (a cond's branches bind the same names)
            self.emit(depth, f"{name} = {self.h_copy(val)}", eqn=e)

    @staticmethod
    def _row(seq: str, shape: tuple) -> str:
        return f"{seq}[t:t + 1].reshape({shape})"

    def _new(self, v) -> str:
        name = self.fresh(v)
        self.emit(1, f"{name} = {self.h_empty(list(v.shape), v.dtype)}")
        return name

    def control_cond(self, e, ops: list[str]) -> None:
        p = e.params
        tag = self.tag()
        self.emit(1, f"if {self.h_truth(ops[0])}:", eqn=e)
        self.emit(2, f"rt{tag} = {self.subcall(p['true'], ops[1:])}", eqn=e)
        self._outputs(e, e.outputs, [f"rt{tag}[{i}]" for i in range(len(e.outputs))], 2)
        self.emit(1, "else:")
        self.emit(2, f"rf{tag} = {self.subcall(p['false'], ops[1:])}", eqn=e)
        self._outputs(e, e.outputs, [f"rf{tag}[{i}]" for i in range(len(e.outputs))], 2)

    def control_scan(self, e, ops: list[str]) -> None:
        p = e.params
        nk, n = p["num_carry"], p["length"]
        body = p["body"]
        tag = self.tag()
        layout = ScanLayout.of(p)
        o = layout.split(ops)
        consts, init, xs = o.consts, o.carry, o.xs
        carry = [f"k{tag}_{i}" for i in range(nk)]
        for c, x in zip(carry, init):
            self.emit(1, f"{c} = {self.h_copy(x)}", eqn=e)
        seqs = [f"q{tag}_{i}" for i in range(len(xs))]
        for q, x in zip(seqs, xs):
            self.emit(1, f"{q} = {self.h_contiguous(x)}")
        n_y = len(body.outputs) - nk
        stacked = e.outputs[nk:]   # ys, then the recorded carries
        for v in stacked:
            self._new(v)
        rng = f"range({n} - 1, -1, -1)" if p["reverse"] else f"range({n})"
        recorded = e.outputs[nk + n_y:]
        snapshots = p["record"] and p.get("checkpoint") is not None   # (the first sweep's: Scan's docstring)
        slot_at = self.extra(np.ascontiguousarray(schedule.first_sweep(n, p["checkpoint"])[0])) if snapshots else None
        self.emit(1, f"for t in {rng}:", eqn=e)
        if snapshots:
            pos = f"{n} - 1 - t" if p["reverse"] else "t"
            self.emit(2, f"if {slot_at}[{pos}] >= 0:")
            for c, v in zip(carry, recorded[:nk]):
                slot = f"{slot_at}[{pos}]"
                self.emit(3, self.h_assign(f"{self.names[v]}[{slot}:{slot} + 1].reshape({tuple(v.shape[1:])})", c))
            self.emit(2, f"if {pos} == {n} - 1:")
            for c, v in zip(carry, recorded[nk:]):
                self.emit(3, self.h_assign(self.names[v], c))
        else:
            for c, v in zip(carry, recorded):
                self.emit(2, self.h_assign(self._row(self.names[v], tuple(v.shape[1:])), c))
        rows = [self._row(q, tuple(x.shape[1:])) for q, x in zip(seqs, layout.split(e.inputs).xs)]
        self.emit(2, f"r{tag} = {self.subcall(body, consts + carry + rows)}", eqn=e)
        for i, c in enumerate(carry):
            self.emit(2, f"{c} = r{tag}[{i}]")
        for j, v in enumerate(e.outputs[nk:nk + n_y]):
            self.emit(2, self.h_assign(self._row(self.names[v], tuple(v.shape[1:])), f"r{tag}[{nk + j}]"))
        self._outputs(e, e.outputs[:nk], carry)

    def control_while(self, e, ops: list[str]) -> None:
        p = e.params
        tag = self.tag()
        o = WhileLayout.of(p).split(ops)
        consts, init = o.consts, o.carry
        carry = [f"k{tag}_{i}" for i in range(len(init))]
        for c, x in zip(carry, init):
            self.emit(1, f"{c} = {self.h_copy(x)}", eqn=e)
        self.emit(1, f"n{tag} = 0")
        self.emit(1, f"while {self.h_truth(self.subcall(p['cond'], consts + carry) + '[0]')}:", eqn=e)
        self.emit(2, f"r{tag} = {self.subcall(p['body'], consts + carry)}", eqn=e)
        for i, c in enumerate(carry):
            self.emit(2, f"{c} = r{tag}[{i}]")
        self.emit(2, f"n{tag} += 1")
        self.h_trip(self.fresh(e.outputs[-1]), f"n{tag}")
        self._outputs(e, e.outputs[:-1], carry)

    def control_scan_revolve(self, e, ops: list[str]) -> None:
        """Runs the checkpoint schedule (tracekern.schedule): a loop over its actions."""
        p = e.params
        body, nk, ns, n = p["body"], p["num_carry"], p["num_state"], p["length"]
        tag = self.tag()
        layout = RevolveLayout.of(p)
        o, ins = layout.split(ops), layout.split(e.inputs)
        if layout.while_loop:   # a while loop's: the schedule is made when the trip count is known
            (trip,) = o.trip
            n, acts, k = f"n{tag}", f"acts{tag}", f"slots{tag}"
            self.emit(1, f"{n} = {self.h_truth(trip)}", eqn=e)
            self.h_schedule(acts, k, n, repr(p["checkpoint"]), 1)
        resume = layout.resume   # (from the snapshots of the first sweep: ScanRevolve's docstring)
        if isinstance(n, int):   # a scan's: the schedule for its length and checkpoint, made now
            first = 0
            if resume:
                _, positions, first = schedule.first_sweep(n, p["checkpoint"])
            acts = self.extra(np.ascontiguousarray(schedule.actions(n, p["checkpoint"])[first:], np.int64))
            k = str(p["checkpoint"])
        snap_ops = o.snaps   # (then the carry it starts from: with `resume`, the last step's)
        consts, init, xs, state0, ct_ys = o.consts, o.carry, o.xs, o.state, o.ct_ys
        carry = [f"k{tag}_{i}" for i in range(nk)]
        slots = [f"slot{tag}_{i}" for i in range(nk)]
        for i, (c, x, sl, v) in enumerate(zip(carry, init, slots, body.outputs)):
            self.emit(1, f"{c} = {self.h_copy(x)}", eqn=e)
            self.emit(1, f"{sl} = {self.h_copy(snap_ops[i]) if resume else self.h_empty([k, *v.shape], v.dtype)}")
        self.emit(1, f"slotpos{tag} = {list(positions.tolist()) if resume else f'[0] * {k}'}")
        state = [f"s{tag}_{i}" for i in range(ns)]
        for st, x in zip(state, state0):
            self.emit(1, f"{st} = {self.h_copy(x)}")
        grads = e.outputs[ns:]
        for v in grads:
            self._new(v)
        xs = [self._contiguous_as(x, f"q{tag}_{i}") for i, x in enumerate(xs)]
        ct_ys = [self._contiguous_as(x, f"cq{tag}_{i}") for i, x in enumerate(ct_ys)]
        xs_rows = [self._row(q, tuple(x.shape[1:])) for q, x in zip(xs, ins.xs)]
        cy_rows = [self._row(q, tuple(x.shape[1:])) for q, x in zip(ct_ys, ins.ct_ys)]
        tindex = f"{n} - 1 - pos{tag}" if p["reverse"] else f"pos{tag}"
        self.emit(1, f"pos{tag} = {f'{n} - 1' if resume else 0}")
        self.emit(1, f"for a in range({acts}.shape[0]):", eqn=e)
        self.emit(2, f"op = {acts}[a, 0]")
        self.emit(2, f"arg = {acts}[a, 1]")
        self.emit(2, "if op == 0:   # advance")
        self.emit(3, "for _ in range(arg):")
        self.emit(4, f"t = {tindex}")
        self.emit(4, f"r{tag} = {self.subcall(body, consts + carry + xs_rows)}", eqn=e)
        for i, c in enumerate(carry):
            self.emit(4, f"{c} = r{tag}[{i}]")
        self.emit(4, f"pos{tag} += 1")
        self.emit(2, "elif op == 1:   # store")
        for c, sl, v in zip(carry, slots, body.outputs):
            self.emit(3, self.h_assign(f"{sl}[arg:arg + 1].reshape({tuple(v.shape)})", c))
        self.emit(3, f"slotpos{tag}[arg] = pos{tag}")
        self.emit(2, "elif op == 2:   # restore")
        for c, sl, v in zip(carry, slots, body.outputs):
            self.emit(3, f"{c} = {self.h_copy(f'{sl}[arg:arg + 1].reshape({tuple(v.shape)})')}")
        self.emit(3, f"pos{tag} = slotpos{tag}[arg]")
        self.emit(2, "else:   # the backward step at the current position")
        self.emit(3, f"t = {tindex}")
        self.emit(3, f"g{tag} = {self.subcall(p['back'], consts + state + carry + xs_rows + cy_rows)}", eqn=e)
        for i, st in enumerate(state):
            self.emit(3, f"{st} = g{tag}[{i}]")
        for j, v in enumerate(grads):
            self.emit(3, self.h_assign(self._row(self.names[v], tuple(v.shape[1:])), f"g{tag}[{ns + j}]"))
        for v, st in zip(e.outputs[:ns], state):
            self.emit(1, f"{self.fresh(v)} = {self.h_copy(st)}")

    def _contiguous_as(self, x: str, new: str) -> str:
        self.emit(1, f"{new} = {self.h_contiguous(x)}")
        return new


class CompiledLoop(ABC):
    """The one structure of a loop compiled whole (cpu: one njit function, cpu_loops.py; cuda: one cooperative
    kernel, cuda_loops.py): a scan's steps, with the carries it records for its backward, and a checkpoint
    schedule's actions (advance, store, restore, the backward step: tracekern.schedule). A value the loop
    keeps is a ref, (array, row index or None for the whole array), of the target's making (a carry's two
    halves as two arrays, or one array of two rows); the target writes the rest through the hooks: `line`,
    `copy_value` (a value of the carry's aval into another), `step` (one step of the sub-graph "body" or
    "back", its inputs and outputs bound as the target keeps them) and the halves' swap before or after a
    step (`begin_step`, `end_step`)."""

    @abstractmethod
    def line(self, depth: int, text: str) -> None:
        """Append a line of the loop's code."""

    @abstractmethod
    def copy_value(self, depth: int, src: tuple, dst: tuple, aval) -> None:
        """Copy the value at ref src into ref dst (both of aval's shape and dtype)."""

    @abstractmethod
    def step(self, depth: int, which: str) -> None:
        """One step of sub-graph `which` ("body", "back") at row t of the sequences."""

    def begin_step(self, depth: int) -> None:
        """Statements starting a scan's step (after t is bound): none by default."""
        return None

    def end_step(self, depth: int, which: str) -> None:
        """Statements after a step of "body" (which: "carry") or "back" ("state"): none by default."""
        return None

    def scan_steps(self, n: int, reverse: bool, last: str, carries: list[tuple], recorded: list[str], avals: list,
                   slot_at: str | None = None) -> None:
        """A scan's n steps: carries (refs to their current values, of avals) recorded into the arrays
        `recorded` (a row per step; or, with slot_at (the name of the first sweep's slot of each step),
        the schedule's snapshots then the last step's carry), then a step of the body. last: n - 1 as
        the target writes it."""
        nk = len(carries)
        self.line(1, f"for s in range({n}):")
        self.line(2, f"t = {last} - s" if reverse else "t = s")
        self.begin_step(2)
        if slot_at is not None:   # the schedule's snapshots, for the backward to resume from
            self.line(2, f"if {slot_at}[s] >= 0:")
            for c, r, v in zip(carries, recorded[:nk], avals):
                self.copy_value(3, c, (r, f"{slot_at}[s]"), v)
            self.line(2, f"if s == {last}:")
            for c, r, v in zip(carries, recorded[nk:], avals):
                self.copy_value(3, c, (r, None), v)
        else:   # the carry each step starts from, for the backward
            for c, r, v in zip(carries, recorded, avals):
                self.copy_value(2, c, (r, "t"), v)
        self.step(2, "body")
        self.end_step(2, "carry")

    def revolve_actions(self, count: str, acts: str, tindex: str, carries: list[tuple], slots: list[str], avals: list,
                        positions: str) -> None:
        """A checkpoint schedule's `count` actions (rows (op, arg) of the array `acts`) from position
        `pos`: advance arg steps of the body, store the carries (refs, of avals) in slot arg (arrays
        `slots`, the position in `positions`), restore them from it, or run the backward step at row
        tindex (an expression of pos)."""
        self.line(1, f"for a in range({count}):")
        self.line(2, f"op = {acts}[a, 0]")
        self.line(2, f"arg = {acts}[a, 1]")
        self.line(2, "if op == 0:   # advance")
        self.line(3, "for _ in range(arg):")
        self.line(4, f"t = {tindex}")
        self.step(4, "body")
        self.end_step(4, "carry")
        self.line(4, "pos += 1")
        self.line(2, "elif op == 1:   # store")
        for c, sl, v in zip(carries, slots, avals):
            self.copy_value(3, c, (sl, "arg"), v)
        self.line(3, f"{positions}[arg] = pos")
        self.line(2, "elif op == 2:   # restore")
        for c, sl, v in zip(carries, slots, avals):
            self.copy_value(3, (sl, "arg"), c, v)
        self.line(3, f"pos = {positions}[arg]")
        self.line(2, "else:   # the backward step at the current position")
        self.line(3, f"t = {tindex}")
        self.step(3, "back")
        self.end_step(3, "state")
