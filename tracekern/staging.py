"""Staging: a function called on arrays is traced once per argument signature, compiled on a backend
and run (Staged, with its signature cache); tk.vjp's two compiled halves are cached the same way
(stage_vjp). Also what a call runs (Lowered, MemoryReport) and its export to another process
(Exported)."""
from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from . import autodiff, backends, passes, remat
from .arguments import arg_name, flatten_call, fun_location, fun_name, to_user
from .backends import fusion
from .errors import MemoryBudgetError, TracekernError, with_location
from .ir import Aval, Graph, is_inexact
from .pytree import Static, TreeDef, call_static, takes_static, tree_flatten, tree_unflatten
from .trace import FlatArgs, Tracer, Variable, current_builder, trace_to_graph

# ----------------------------------------------------------------------------- compiled entries


@dataclass(eq=False)
class CompiledEntry:
    """A graph compiled for one signature: call it with the argument leaves, get the result tree."""

    graph: Graph | None
    out_treedef: TreeDef
    run: Callable
    variables: tuple = ()   # Variables the function reads: inputs after the arguments
    plan: remat.SplitVJP | None = None   # a gradient transform's memory plan (under memory_budget)
    _var_avals: tuple = field(init=False, repr=False)
    _is_input: list = field(init=False, repr=False)
    _out_shape: str = field(init=False, repr=False)
    _out_avals: tuple = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._var_avals = tuple(v.aval for v in self.variables)
        # outputs that are graph inputs are copied, so a result never aliases the caller's array
        inputs = set(self.graph.inputs)
        self._is_input = [v in inputs for v in self.graph.outputs]
        self._out_avals = tuple(v.aval for v in self.graph.outputs)
        td = self.out_treedef
        # the common output structures, built without walking the tree: one array, a flat tuple
        self._out_shape = "leaf" if td.kind == "leaf" else (
            "tuple" if td.kind == "tuple" and all(c.kind == "leaf" for c in td.children) else "tree")

    @property
    def out_avals(self) -> tuple[Aval, ...]:
        return self._out_avals

    def __getstate__(self) -> dict:
        """Pickled without the graph (an Exported in another process needs only the runner)."""
        return dict(self.__dict__, graph=None)

    def variables_match(self) -> bool:
        """Whether every Variable still has the shape and dtype this entry was traced for."""
        return all(v.aval == a for v, a in zip(self.variables, self._var_avals))

    def __call__(self, leaves: Sequence) -> Any:
        if self.variables:
            leaves = list(leaves) + [v._value for v in self.variables]
        outs = [to_user(np.array(o)) if copy and isinstance(o, np.ndarray) else to_user(o)
                for o, copy in zip(self.run(leaves), self._is_input)]
        if self._out_shape == "leaf":
            return outs[0]
        if self._out_shape == "tuple":
            return tuple(outs)
        return tree_unflatten(self.out_treedef, outs)


@dataclass(frozen=True)
class Signature:
    """What a call is specialised on, and its argument leaves as arrays."""

    key: tuple          # (treedefs of the dynamic arguments and keywords, (shape, dtype) per leaf, weak flags, statics)
    arrays: tuple
    make_graph: Callable[[], tuple[Graph, TreeDef, tuple]]


class Exported:
    """A tk.jit function compiled for one argument signature (Staged.export). Pickling keeps the
    generated source, its constants and the output structure, not the graph or machine code; the
    receiving process imports the source through its disk cache, so Numba compiles it there once
    and later processes load the cached machine code."""

    def __init__(self, name: str, treedefs: tuple, signature: tuple, entry: CompiledEntry):
        self.name = name
        self._treedefs = treedefs            # of the positional arguments, then of {} (no keywords)
        self._signature = signature          # ((shape, dtype.str), ...) per leaf
        self._entry = entry

    @property
    def out_avals(self) -> list[Aval]:
        """Shape and dtype of each output leaf (in tree_flatten order)."""
        return list(self._entry.out_avals)

    @property
    def out_treedef(self) -> TreeDef:
        return self._entry.out_treedef

    def __call__(self, *args) -> Any:
        treedefs = tuple(tree_flatten(a)[1] for a in args + ({},))
        if treedefs != self._treedefs:
            raise ValueError(f"{self.name} was exported for arguments of structure {self._treedefs[:-1]!r}, "
                             f"got {treedefs[:-1]!r}")
        leaves = tree_flatten(args)[0]
        arrays = []
        for j, (x, (shape, dtype)) in enumerate(zip(leaves, self._signature)):
            a = np.asarray(x)
            if a.shape != shape or a.dtype.str != dtype:
                raise ValueError(f"{self.name} was exported for leaf {j} of shape {shape} and dtype "
                                 f"{np.dtype(dtype)}, got {a.shape} {a.dtype}; export it again for these arguments")
            arrays.append(a)
        return self._entry(arrays)


@dataclass(frozen=True)
class MemoryReport:
    """Bytes: residual_bytes saved between tk.vjp's forward and backward (None when the function is
    not a plain one of arrays), saved_bytes the part of them that is not the function's own inputs
    (the memory the forward keeps beyond what the caller holds anyway), and the planned peak of each
    compiled function (buffers alive at once, outputs included, the caller's inputs not).

    Under memory_budget=: memory_budget (bytes), recompute_cost (the planner's estimate of the
    backward's recomputation, seconds), solver ("milp" or "lagrangian") and smallest_budget (the
    fewest residual bytes any plan saves); None without a budget."""

    residual_bytes: int | None
    peak_bytes: dict[str, int]
    saved_bytes: int | None = None
    memory_budget: int | None = None
    recompute_cost: float | None = None
    solver: str | None = None
    smallest_budget: int | None = None


@dataclass(frozen=True)
class Lowered:
    ir: Graph
    source: str | None
    memory: MemoryReport
    vjp: remat.SplitVJP | None = None

    def __str__(self) -> str:
        return f"{self.ir}\n\nmemory: {self.memory}"


# ----------------------------------------------------------------------------- Staged


class Staged:
    """A function that, called on arrays, traces `emit` per argument signature, compiles the graph
    on `backend` and runs it; called inside another trace, it emits into that trace (inlining).
    Static arguments (static_argnums) reach `emit` as pytree.Static when it is a transform (which
    passes them on untraced), as their values otherwise."""

    takes_static = True

    def __init__(self, fun: Callable, emit: Callable, *, backend: str | None = None,
                 static_argnums: Sequence[int] | int = (), options: dict | None = None,
                 memory_budget: int | float | None = None, rebudget: Callable | None = None):
        self.fun = fun
        self.emit = emit
        # a gradient transform's emit for another memory budget (rebudget(b)): lower() reports what the
        # step keeps without a budget from rebudget(1.0)'s plan, the number a fractional budget scales
        self.rebudget = rebudget
        self.backend = backend
        self.options = dict(options or {})   # the backend's options (backends.OPTIONS)
        self.memory_budget = memory_budget   # (a gradient transform's: lower() reports its plan)
        self._device = (backend or backends.default_backend()) == "cuda"
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self._cache: dict[Any, CompiledEntry] = {}
        # positional plain ndarrays only: (shape, dtype) per argument -> entry, checked before the
        # general signature (pytree flattening, conversions), which costs several microseconds
        self._fast: dict[tuple, CompiledEntry] = {}
        self.trace_count = 0
        if not isinstance(fun, functools.partial):
            functools.update_wrapper(self, fun, updated=())

    def __repr__(self) -> str:
        return f"<tracekern {type(self).__name__} of {fun_name(self.fun)}>"

    def __get__(self, instance, owner):
        """As a method decorator: one Staged per instance, with the instance bound (not traced)."""
        if instance is None:
            return self
        key = f"__tracekern_bound_{id(self)}"
        bound = getattr(instance, "__dict__", {}).get(key)
        if bound is None:
            emit = functools.partial(self.emit, instance)
            emit.takes_static = takes_static(self.emit)
            bound = Staged(functools.partial(self.fun, instance), emit,
                           backend=self.backend, options=self.options,
                           static_argnums=tuple(i - 1 for i in self.static_argnums if i > 0),
                           memory_budget=self.memory_budget)
            if hasattr(instance, "__dict__"):
                instance.__dict__[key] = bound
        return bound

    def __call__(self, *args, **kwargs):
        if current_builder() is not None:
            return call_static(self.emit, args, kwargs)
        plain = not kwargs and not self.static_argnums and all(type(a) is np.ndarray for a in args)
        if plain:
            entry = self._fast.get(fast_key := tuple([(a.shape, a.dtype) for a in args]))
            if entry is not None and (not entry.variables or entry.variables_match()):
                return entry(args)
        sig = self._signature(args, kwargs)
        entry = self._entry(sig)
        if plain:
            self._fast[fast_key] = entry
        return entry(sig.arrays)

    def _entry(self, sig: Signature) -> CompiledEntry:
        """The compiled entry of a signature, traced and compiled if there is none yet (or a
        Variable's shape or dtype changed since)."""
        entry = self._cache.get(sig.key)
        if entry is None or not entry.variables_match():
            graph, out_td, variables = sig.make_graph()
            compile_graph = backends.get_compiler(self.backend or backends.default_backend(), **self.options)
            planned = self if self.memory_budget is not None else self.fun   # (tk.jit of a budgeted transform too)
            plan = getattr(planned.emit, "plan", None) if getattr(planned, "memory_budget", None) is not None else None
            entry = CompiledEntry(graph, out_td, compile_graph(graph), variables, plan)
            self._cache[sig.key] = entry
        return entry

    def lower(self, *args, **kwargs) -> Lowered:
        """What a call on these arguments runs: .ir (the graph), .source (the generated Numba source;
        None on "interpret"), .memory (.peak_bytes of each compiled function; .residual_bytes saved
        between the two halves of tk.vjp(f) on these arguments; for a gradient transform, the arrays its
        step keeps for its backward: as planned under a memory_budget, with recompute_cost and solver;
        without one, the number a fractional memory_budget of the same transform scales)."""
        entry = self._entry(self._signature(args, kwargs))
        peaks = {"step": entry.run.peak_bytes}
        residual, saved, split, plan_info = None, None, entry.plan, {}
        if split is not None:   # a gradient transform under a memory budget: the plan its step runs
            residual, saved = split.residual_bytes, split.saved_bytes
        elif (grad := self._gradient()) is not None:
            # a gradient transform without a budget: what its fused step keeps for its backward (the
            # arrays behind the residuals), the basis memory_budget=<fraction> scales: one number, not two
            probe = Staged(grad.fun, grad.rebudget(1.0), backend=self.backend, options=self.options,
                           static_argnums=self.static_argnums, memory_budget=1.0)
            probe._signature(args, kwargs).make_graph()   # (traced and planned, not compiled)
            basis = probe.emit.plan
            residual, saved = basis.unconstrained_bytes, basis.saved_bytes
            plan_info = dict(smallest_budget=basis.smallest_budget)
        elif not kwargs and not self.static_argnums and not isinstance(self.fun, functools.partial):
            try:
                staged = stage_vjp(self.fun, args, False, self.backend, self.options, self.memory_budget)[0]
            except MemoryBudgetError:
                raise
            except TracekernError:   # no reverse mode for this function (e.g. the grad of a checkpointed loop)
                staged = None
            if staged is not None:
                split = staged.split
                residual, saved = split.residual_bytes, split.saved_bytes
                peaks.update(vjp_forward=staged.forward.peak_bytes, vjp_backward=staged.backward.peak_bytes)
        plan = plan_info if split is None else dict(memory_budget=split.memory_budget, recompute_cost=split.recompute_cost,
                                                     solver=split.solver, smallest_budget=split.smallest_budget)
        return Lowered(entry.graph, entry.run.source, MemoryReport(residual, peaks, saved, **plan), split)

    def _gradient(self) -> Staged | None:
        """The gradient transform this function runs (itself, or the one tk.jit wraps), or None."""
        s = self
        while s.rebudget is None and isinstance(s.fun, Staged) and s.emit is s.fun:
            s = s.fun
        return s if s.rebudget is not None else None

    def export(self, *args) -> Exported:
        """This function compiled for the signature of `args` (arrays, or anything with .shape and
        .dtype), as an object that pickles to the generated module's source and runs in another
        process: there it is loaded through that process's disk cache (compiled once, then reused).
        Its machine code is never pickled. tracekern.dask ships these to Dask workers."""
        if self.static_argnums:
            raise ValueError(f"export of {fun_name(self.fun)}: static_argnums are not supported; close over the "
                             "static values (functools.partial) instead")
        leaves, treedef = tree_flatten(args)
        examples = [np.empty(x.shape, x.dtype) if hasattr(x, "shape") and hasattr(x, "dtype") and not
                    isinstance(x, (np.ndarray, Tracer)) else x for x in leaves]
        sig = self._signature(tree_unflatten(treedef, examples), {})
        entry = self._entry(sig)
        if entry.variables:
            raise ValueError(f"export of {fun_name(self.fun)}: it reads tk.Variables ({len(entry.variables)}), whose "
                             "values live in this process; pass them as arguments instead")
        if not getattr(entry.run, "portable", False):
            raise ValueError(f"export of {fun_name(self.fun)}: the {self.backend or backends.default_backend()!r} backend's "
                             "compiled functions cannot run in another process; use backend='cpu'")
        return Exported(fun_name(self.fun), sig.key[0], sig.key[1], entry)

    def _split_static(self, args: tuple) -> tuple[tuple, tuple]:
        statics = []
        for i in self.static_argnums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"static_argnums={self.static_argnums} but {fun_name(self.fun)} got {len(args)} arguments")
            v = args[i]
            try:
                hash(v)
            except TypeError:
                raise TypeError(f"static {arg_name(self.fun, i % len(args))} of {fun_name(self.fun)} must be "
                                f"hashable, got {type(v).__name__}") from None
            statics.append((i % len(args), v))
        static_pos = {i for i, _ in statics}
        dynamic = tuple(a for i, a in enumerate(args) if i not in static_pos)
        return tuple(statics), dynamic

    def _signature(self, args: tuple, kwargs: dict | None = None) -> Signature:
        """The cache key of a call, its argument arrays, and a function that traces the graph for
        this signature. Keyword arguments are traced inputs like positional ones (transforms never
        differentiate them)."""
        statics, dynamic = self._split_static(args)
        kwargs = kwargs or {}
        positions = [i for i in range(len(args)) if i not in {j for j, _ in statics}]
        names = lambda i: arg_name(self.fun, positions[i]) if i < len(dynamic) else "keyword argument"  # noqa: E731
        flat = flatten_call(self.fun, dynamic + (kwargs,), self._device, names)
        key = (flat.treedefs, tuple((a.shape, a.dtype.str) for a in flat.avals), flat.weak, statics)

        def make_graph() -> tuple[Graph, TreeDef, tuple]:
            self.trace_count += 1

            def traced(*tracers):
                *dyn, kw = flat.unflatten(tracers)
                return call_static(self.emit, _merge_static(tuple(dyn), statics), kw)

            graph, out_td, captured = trace_to_graph(traced, flat.avals, flat.weak, fun_name(self.fun), fun_location(self.fun))
            assert all(isinstance(c, Variable) for c in captured), "top-level trace captured outer values"
            return graph, out_td, tuple(captured)

        return Signature(key, flat.leaves, make_graph)


def _merge_static(dynamic: tuple, statics: tuple) -> tuple:
    """The positional arguments, the static ones back in their places (as pytree.Static)."""
    args = list(dynamic)
    for i, v in statics:
        args.insert(i, Static(v))
    return tuple(args)


# ----------------------------------------------------------------------------- tk.vjp's two halves


def split_aux(fun: Callable, out_td: TreeDef, has_aux: bool) -> tuple[TreeDef, TreeDef | None]:
    """(structure of the differentiated output, of the aux output) of a function's result."""
    if not has_aux:
        return out_td, None
    if out_td.kind not in ("tuple", "list") or len(out_td.children) != 2:
        raise TypeError(f"{fun_name(fun)} was transformed with has_aux=True, so it must return a pair "
                        f"(output, aux); it returned structure {out_td!r}")
    return out_td.children[0], out_td.children[1]


def trace_call(fun: Callable, flat: FlatArgs):
    """trace_to_graph of fun on flattened arguments: (graph, out treedef, captured values)."""
    return trace_to_graph(lambda *leaves: call_static(fun, tuple(flat.unflatten(leaves))), flat.avals, flat.weak,
                          fun_name(fun), fun_location(fun))


@dataclass(frozen=True)
class StagedVJP:
    """tk.vjp of a function for one signature: the split graphs and their compiled halves."""

    split: remat.SplitVJP
    value_treedef: TreeDef
    aux_treedef: TreeDef | None
    active: tuple[bool, ...]             # per argument leaf: differentiated (a float leaf)
    forward: Callable                    # compiled split.forward: outputs, then residuals
    backward: Callable                   # compiled split.backward: residuals and cotangents -> gradients
    variables: tuple                     # Variables the function reads: inputs after the arguments
    variable_avals: tuple

    def variables_match(self) -> bool:
        return all(v.aval == a for v, a in zip(self.variables, self.variable_avals))


_VJP_CACHE: weakref.WeakKeyDictionary[Callable, dict] = weakref.WeakKeyDictionary()


def stage_vjp(fun: Callable, args: tuple, has_aux: bool, backend: str | None = None,
              options: dict | None = None, memory_budget: int | float | None = None) -> tuple[StagedVJP, FlatArgs]:
    """The tk.vjp of fun for the signature of args (traced, split and compiled once per signature),
    and args flattened (leaves as arrays). With memory_budget, the residuals are planned to fit it."""
    backend = backend or backends.default_backend()
    flat = flatten_call(fun, args, device=backend == "cuda")
    options = dict(options or {})
    # (1 and 1.0 are equal keys, but one byte and the whole budget: the type is part of the key)
    key = (flat.treedefs, flat.avals, flat.weak, has_aux, backend, tuple(sorted(options.items())),
           type(memory_budget).__name__, memory_budget)
    try:
        per_fun = _VJP_CACHE.setdefault(fun, {})
    except TypeError:  # not weak-referenceable: no caching
        per_fun = {}
    staged = per_fun.get(key)
    if staged is None or not staged.variables_match():   # (new, or a Variable's shape or dtype changed)
        graph, out_td, captured = trace_call(fun, flat)
        assert all(isinstance(c, Variable) for c in captured), "top-level trace captured outer values"
        variables = tuple(captured)
        value_td, aux_td = split_aux(fun, out_td, has_aux)
        n_out = value_td.num_leaves
        active = tuple(is_inexact(aval.dtype) for aval in flat.avals)
        joint = autodiff.vjp(graph, active + (False,) * len(variables),
                             seeded=[i < n_out for i in range(len(graph.outputs))], zeros=True)
        split = plan_split(fun, passes.simplify(joint.graph), joint.num_primals, len(graph.outputs), memory_budget)
        compiler = backends.get_compiler(backend, **options)
        staged = StagedVJP(split, value_td, aux_td, active, compiler(split.forward), compiler(split.backward),
                           variables, tuple(v.aval for v in variables))
        per_fun[key] = staged
    return staged, flat


# ----------------------------------------------------------------------------- memory budgets


@functools.cache
def cost_model() -> remat.CostModel:
    """The memory planner's cost model for this machine (measured once: backends/calibrate.py)."""
    return remat.CostModel(**backends.cost_table())


def forward_arrays(graph: Graph) -> set:
    """The values fusion makes as arrays when it runs `graph` (buffers and constants), e.g. a
    transformer's residual stream, which many loops read: what a fused step can keep without
    keeping the arrays it is made of."""
    inlined, rename = passes.inline_calls_renamed(graph)
    plan = fusion.plan(inlined)
    made = set(plan.buffers) | set(plan.consts)
    return {v for e in graph.eqns for v in e.outputs if rename.get(v, v) in made}


def plan_split(fun: Callable, joint: Graph, num_primals: int, num_outputs: int,
               memory_budget: int | float | None, fused: bool = False) -> remat.SplitVJP:
    """remat.split_joint of a joint graph, planned under memory_budget when one is given (`fused`: for
    a step that runs both passes fused, remat.rejoin); an infeasible budget raises MemoryBudgetError
    naming the function, the smallest feasible budget and the user's line."""
    if memory_budget is None:
        return remat.split_joint(joint, num_primals, num_outputs)
    try:
        return remat.split_joint(joint, num_primals, num_outputs, memory_budget, cost_model(), fused=fused,
                                 arrays_of=forward_arrays if fused else None)
    except MemoryBudgetError as err:
        asked = f"memory_budget={memory_budget!r}" + (f" ({err.requested} bytes)" if isinstance(memory_budget, float) else "")
        raise MemoryBudgetError(with_location(f"{fun_name(fun)}: {asked}: {err}"), err.smallest, err.requested) from None
