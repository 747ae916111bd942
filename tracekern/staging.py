"""Staging: a function called on arrays is traced once per argument signature, compiled on a backend
and run (Staged, with its signature cache); tk.vjp's two compiled halves are cached the same way
(stage_vjp). Also what a call runs (Lowered, MemoryReport) and its export to another process
(Exported). A transform's memory plan travels as a value: Transform.run returns it beside the
outputs, the trace (Traced) and the compiled entry carry it, lower() reports it."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import pickle
import sys
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from . import autodiff, backends, fingerprint, passes, remat
from .arguments import arg_name, copied, flatten_call, fun_location, fun_name, to_user
from .budget import plan_split
from .errors import MemoryBudgetError, TracekernError
from .ir import Aval, Graph, graph_digest, is_inexact
from .pytree import Static, TreeDef, call_static, takes_static, tree_flatten, tree_unflatten
from .settings import config
from .trace import FlatArgs, Tracer, Variable, current_builder, finish, trace_to_graph

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
        # outputs that are graph inputs are copied, so a result never aliases the caller's array; and an output
        # that is an earlier one's value (f returning (np.zeros_like(a), np.zeros_like(a)): one value once traced)
        # is copied, so results NumPy makes apart are apart (m += 1 must not change v)
        inputs, seen = set(self.graph.inputs), set()
        self._is_input = []
        for v in self.graph.outputs:
            self._is_input.append(v in inputs or v in seen)
            seen.add(v)
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
        outs = [to_user(copied(o)) if copy else to_user(o) for o, copy in zip(self.run(leaves), self._is_input)]
        if self._out_shape == "leaf":
            return outs[0]
        if self._out_shape == "tuple":
            return tuple(outs)
        return tree_unflatten(self.out_treedef, outs)


@dataclass(frozen=True)
class Transform:
    """A transform as Staged runs it: run(*args, **kwargs) emits it into the running trace and returns
    (its outputs, its memory plan: a remat.SplitVJP under a memory_budget, else None); called, it
    returns the outputs alone. plan_key: what it adds to the traced function, for the plan cache
    (None: a step of it is not cached). rebudget(b): a gradient transform, the same transform under
    memory budget b (lower() reports what the step keeps without a budget from rebudget(1.0)'s plan,
    the number a fractional budget scales)."""

    run: Callable[..., tuple[Any, remat.SplitVJP | None]]
    plan_key: tuple | None = None
    rebudget: Callable[[int | float], Transform] | None = None
    takes_static = True   # (static arguments pass through to the function untraced)

    def __call__(self, *args, **kwargs):
        return self.run(*args, **kwargs)[0]


class Traced(NamedTuple):
    """A function traced for one signature: its graph, its output structure, the Variables it reads
    (inputs after the arguments) and the memory plan of the transform traced (None without one)."""

    graph: Graph
    out_treedef: TreeDef
    variables: tuple
    plan: remat.SplitVJP | None = None


@dataclass(frozen=True)
class Signature:
    """What a call is specialised on, and its argument leaves as arrays."""

    key: tuple          # (treedefs of the dynamic arguments and keywords, (shape, dtype) per leaf, weak flags, statics)
    arrays: tuple
    make_graph: Callable[[], Traced]
    flat: FlatArgs | None = None
    statics: tuple = ()


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
    _compile: Callable | None = field(default=None, repr=False, compare=False)

    def compile(self) -> Callable:
        """Compile what a call on these arguments runs, now, and wait (ahead of time: the next call
        runs compiled code, not the NumPy tier); returns the tk.jit function."""
        return self._compile()

    def __str__(self) -> str:
        return f"{self.ir}\n\nmemory: {self.memory}"


# ----------------------------------------------------------------------------- Staged


class Staged:
    """A function that, called on arrays, traces `emit` per argument signature, compiles the graph
    on `backend` and runs it; called inside another trace, it emits into that trace (inlining).
    Static arguments (static_argnums) reach `emit` as pytree.Static when it is a transform (which
    passes them on untraced), as their values otherwise. A gradient transform's emit is a Transform,
    whose memory plan the trace returns (Traced.plan) and the compiled entry keeps."""

    takes_static = True

    def __init__(self, fun: Callable, emit: Callable, *, backend: str | None = None,
                 static_argnums: Sequence[int] | int = (), options: dict | None = None,
                 tiers: bool | None = None):
        self.fun = fun
        self.tiers = tiers   # (None: tk.config.tiers when a signature is compiled)
        self.emit = emit
        self.backend = backend
        self.options = dict(options or {})   # the backend's options (backends.OPTIONS)
        self._device = backends.on_device(backend or backends.default_backend())
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
                           backend=self.backend, options=self.options, tiers=self.tiers,
                           static_argnums=tuple(i - 1 for i in self.static_argnums if i > 0))
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
        if plain and all(s is a for s, a in zip(sig.arrays, args)):   # (not a converted one: a big-endian array)
            self._fast[fast_key] = entry
        return entry(sig.arrays)

    def _entry(self, sig: Signature) -> CompiledEntry:
        """The compiled entry of a signature, traced and compiled if there is none yet (or a
        Variable's shape or dtype changed since). The plan cache first: a step finished by an earlier
        process for the same function and transforms, whose kernels are compiled on disk, found by the
        digest of the function's code and what it reads (no trace), else by its traced graph."""
        entry = self._cache.get(sig.key)
        if entry is None or not entry.variables_match():
            fast = self._fast_key(sig)
            entry = _load_plan(fast, ()) if fast is not None else None
            if entry is not None:
                self._cache[sig.key] = entry
                return entry
            key = self._plan_key(sig)
            entry = _load_plan(key[0], key[1]) if key is not None else None
            if entry is not None:
                if fast is not None and not entry.variables:   # (the next process finds it without a trace)
                    _save_plan([fast], entry)
                self._cache[sig.key] = entry
                return entry
            if key is not None and key[2] is not None:   # (no transform: the key's trace is the graph)
                self.trace_count += 1
                traced = key[2]._replace(graph=finish(key[2].graph))
            else:
                with _primal_hint(key[3] if key is not None else None):
                    traced = sig.make_graph()
            compile_graph = backends.get_compiler(self.backend or backends.default_backend(), tiers=self.tiers,
                                                  **self.options)
            graph, plan = traced.graph, traced.plan
            entry = CompiledEntry(graph, traced.out_treedef, compile_graph(graph), traced.variables, plan)
            self._cache[sig.key] = entry
            # (the fast key only for a function that reads no Variable: it does not know their order)
            saved = [k for k in (key[0] if key is not None else None, fast if not traced.variables else None)
                     if k is not None] if plan is None else []
            if hasattr(entry.run, "on_compiled"):   # (tiers: once compiled, the step itself; then saved)
                entry.run.on_compiled = functools.partial(_promote, entry, saved)
            elif saved:
                _save_plan(saved, entry)
        return entry

    def _plan_root(self) -> tuple[list, Staged] | None:
        """(the keys of the transforms applied, the Staged whose .fun they apply to), or None when a
        step of this function is not cached (a transform without a plan_key, a Staged under one)."""
        chain, s = [], self
        while True:
            if s.emit is s.fun and isinstance(s.fun, Staged) and not s.fun.static_argnums:
                s = s.fun   # (tk.jit of a transform: the same graph)
            elif s.emit is s.fun:
                return chain, s
            elif isinstance(s.emit, Transform) and s.emit.plan_key is not None and not isinstance(s.fun, Staged):
                chain.append(s.emit.plan_key)
                return chain, s
            else:
                return None

    def _fast_key(self, sig: Signature) -> str | None:
        """The plan cache's key of this signature without a trace (the README's "The plan cache"), or
        None: a digest of the code of the function the transforms apply to and of every value it can read
        (tracekern.fingerprint: its closure, defaults, the globals it names, through the functions they
        name; static arguments), with the transforms' keys, the signature, the backend and its options,
        the settings that shape a plan, and tracekern's own source. Where fingerprint cannot know what a
        trace would read, None, and the step is keyed by its traced graph (_plan_key)."""
        found = self._cached_root() if config.plan_code_key else None
        if found is None:
            return None
        backend, chain, root = found
        code = fingerprint.digest(root.fun, tuple(v for _, v in sig.statics))
        return None if code is None else self._key(("code", code), chain, backend, sig)

    def _cached_root(self) -> tuple[str, list, Staged] | None:
        """(the backend, the transforms' keys, the Staged whose .fun they apply to) where the plan cache
        keeps this function's steps, else None."""
        backend = self.backend or backends.default_backend()
        if not config.plan_cache or not backends.plans_cached(backend):
            return None
        found = self._plan_root()
        return None if found is None else (backend, *found)

    def _key(self, head: tuple, chain: list, backend: str, sig: Signature) -> str:
        """A plan key: `head` (the code's or the graph's digest) with the transforms' keys, the backend and
        its options, the signature, the settings that shape a plan, and tracekern's own source."""
        text = repr((*head, chain, backend, sorted(self.options.items()), sig.key, config.compiled_loops,
                     config.compiled_drivers, _tracekern_salt()))
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def _plan_key(self, sig: Signature) -> tuple[str, tuple, tuple | None, tuple | None] | None:
        """(the plan cache's key of this signature, the Variables the function reads, the trace when it
        is the step's graph), or None when it has none: a digest of the graph of the function the
        transforms apply to (traced: cheap; a function under a transform is traced once more), the
        transforms' own keys (an emit's plan_key), the backend and its options, the settings that
        shape a plan, and tracekern's own source."""
        found = self._cached_root()
        if found is None:
            return None
        backend, chain, s = found
        root = s.fun
        # (traced as it runs, not simplified: a warm start that finds its plan needs only the digest, and a
        # miss simplifies it where it is used: _entry, primal_trace)
        if chain:
            try:
                traced = _trace_emit(root, root, sig.flat, sig.statics, simplify=False)
            except Exception:   # (the full trace raises it again, with its context)
                return None
        else:
            traced = _trace_emit(self.emit, self.fun, sig.flat, sig.statics, simplify=False)
        digest = graph_digest(traced.graph)
        if digest is None:
            return None
        hint = (root, sig.flat.avals, sig.flat.weak, traced[:3]) if chain and not sig.statics and not sig.key[0][-1].children \
            else None
        # (the output structure too: a graph does not hold it, and f returning a, (a, None) or {"k": a} is one graph)
        key = self._key((digest, traced.out_treedef.key_text()), chain, backend, sig)
        return key, traced.variables, None if chain else traced, hint

    def compile(self, *args, **kwargs) -> Staged:
        """Trace and compile for the signature of these arguments now, and wait: every kernel is
        compiled before this returns (ahead of time), whatever the tiers say; returns self."""
        sig = self._signature(args, kwargs)
        entry = self._entry(sig)
        compile_step = getattr(entry.run, "compile", None)
        if compile_step is not None:
            compile_step(list(sig.arrays) + [v._value for v in entry.variables])
        return self

    def lower(self, *args, **kwargs) -> Lowered:
        """What a call on these arguments runs: .ir (the graph), .source (the generated Numba source;
        None on "interpret"), .memory (.peak_bytes of each compiled function; .residual_bytes saved
        between the two halves of tk.vjp(f) on these arguments; for a gradient transform, the arrays its
        step keeps for its backward: as planned under a memory_budget, with recompute_cost and solver;
        without one, the number a fractional memory_budget of the same transform scales)."""
        sig = self._signature(args, kwargs)
        entry = self._entry(sig)
        ir = entry.graph if entry.graph is not None else sig.make_graph()[0]   # (a step from the plan cache)
        peaks = {"step": entry.run.peak_bytes}
        residual, saved, split, plan_info = None, None, entry.plan, {}
        if split is not None:   # a gradient transform under a memory budget: the plan its step runs
            residual, saved = split.residual_bytes, split.saved_bytes
        elif (grad := self._gradient()) is not None:
            # a gradient transform without a budget: what its fused step keeps for its backward (the
            # arrays behind the residuals), the basis memory_budget=<fraction> scales: one number, not two
            probe = Staged(grad.fun, grad.emit.rebudget(1.0), backend=self.backend, options=self.options,
                           static_argnums=self.static_argnums)
            basis = probe._signature(args, kwargs).make_graph().plan   # (traced and planned, not compiled)
            residual, saved = basis.unconstrained_bytes, basis.saved_bytes
            plan_info = dict(smallest_budget=basis.smallest_budget)
        elif not kwargs and not self.static_argnums and not isinstance(self.fun, functools.partial):
            try:
                staged = stage_vjp(self.fun, args, False, self.backend, self.options)[0]
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
        return Lowered(ir, entry.run.source, MemoryReport(residual, peaks, saved, **plan), split,
                       functools.partial(self.compile, *args, **kwargs))

    def _gradient(self) -> Staged | None:
        """The gradient transform this function runs (itself, or the one tk.jit wraps), or None."""
        s = self
        while isinstance(s.emit, Staged):   # (tk.jit of a transform)
            s = s.emit
        return s if isinstance(s.emit, Transform) and s.emit.rebudget is not None else None

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

    def _statics_by_keyword(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """A static argument passed by keyword (f(x, n=2) with static_argnums=1) moved to its position, as JAX
        does, with the keyword arguments before it that fill the positions up to it; one left out, its default."""
        need = max((i + 1 for i in self.static_argnums if i >= 0), default=0)
        if len(args) >= need:
            return args, kwargs
        try:
            params = list(inspect.signature(self.fun).parameters.values())
        except (TypeError, ValueError):
            return args, kwargs
        args, kwargs = list(args), dict(kwargs)
        while len(args) < need and len(args) < len(params):
            p = params[len(args)]
            if p.kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD or (p.name not in kwargs and p.default is p.empty):
                break
            args.append(kwargs.pop(p.name) if p.name in kwargs else p.default)   # (left out: its default, static)
        return tuple(args), kwargs

    def _split_static(self, args: tuple) -> tuple[tuple, tuple]:
        statics = []
        for i in self.static_argnums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"static_argnums={self.static_argnums} but {fun_name(self.fun)} got {len(args)} "
                                 "positional arguments (a static argument is passed by position, or by keyword where "
                                 "it is a parameter the positions before it fill)")
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
        args, kwargs = self._statics_by_keyword(args, kwargs or {})
        statics, dynamic = self._split_static(args)
        positions = [i for i in range(len(args)) if i not in {j for j, _ in statics}]
        names = lambda i: arg_name(self.fun, positions[i]) if i < len(dynamic) else "keyword argument"  # noqa: E731
        flat = flatten_call(self.fun, dynamic + (kwargs,), self._device, names)
        key = (flat.treedefs, tuple((a.shape, a.dtype.str) for a in flat.avals), flat.weak, statics)

        def make_graph() -> Traced:
            self.trace_count += 1
            return _trace_emit(self.emit, self.fun, flat, statics)

        return Signature(key, flat.leaves, make_graph, flat, statics)


_HINT: list = []   # the primal trace _plan_key made, for the transform's own trace of the same function


@contextlib.contextmanager
def _primal_hint(hint: tuple | None):
    _HINT.append(hint)
    try:
        yield
    finally:
        _HINT.pop()


def primal_trace(fun: Callable, flat: FlatArgs) -> tuple[Graph, TreeDef, tuple]:
    """trace_call(fun, flat), or the trace the plan cache's key was computed from, when it is this
    very function on these arguments (a transform's primal: traced once, not twice)."""
    hint = _HINT[-1] if _HINT else None
    if hint is not None and hint[0] is fun and hint[1] == flat.avals and hint[2] == flat.weak:
        _HINT[-1] = None   # (once: a nested transform of the same function traces its own)
        graph, out_td, captured = hint[3]
        return finish(graph), out_td, captured
    return trace_call(fun, flat)


def _trace_emit(emit: Callable, fun: Callable, flat: FlatArgs, statics: tuple, simplify: bool = True) -> Traced:
    """emit traced on flattened arguments (static ones put back), with the memory plan it returns
    (simplify=False: trace_to_graph's)."""
    plans = []

    def traced(*tracers):
        *dyn, kw = flat.unflatten(tracers)
        outs, plan = _run_planned(emit, _merge_static(tuple(dyn), statics), kw)
        plans.append(plan)
        return outs

    graph, out_td, captured = trace_to_graph(traced, flat.avals, flat.weak, fun_name(fun), fun_location(fun),
                                             simplify=simplify)
    assert all(isinstance(c, Variable) for c in captured), "top-level trace captured outer values"
    return Traced(graph, out_td, tuple(captured), plans[-1])


def _run_planned(emit: Callable, args: tuple, kwargs: dict) -> tuple[Any, remat.SplitVJP | None]:
    """emit run in the trace: (its outputs, the memory plan of the Transform it is, or that tk.jit wraps)."""
    if isinstance(emit, Staged):   # (tk.jit of a transform: the transform's plan; in a trace a Staged runs its emit)
        return _run_planned(emit.emit, args, kwargs)
    if isinstance(emit, Transform):   # (it passes static arguments on)
        return emit.run(*args, **kwargs)
    return call_static(emit, args, kwargs), None


@functools.cache
def _tracekern_salt() -> str:
    """A digest of tracekern's own source and the versions it runs with: a plan made by other code is never served."""
    h = hashlib.sha256(f"{sys.version} numpy {np.__version__}".encode())
    root = Path(__file__).resolve().parent
    for path in sorted(root.rglob("*.py")):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _promote(entry: CompiledEntry, keys: list[str]) -> None:
    """A tiered step is compiled: the entry calls the compiled step itself from now on (nothing
    checks the tier on the call path), and the plan cache keeps it under `keys`: saved first, so that a
    caller that sees the compiled step (and may exit at once: the compile thread does not hold the process
    up) finds the plan saved."""
    step = entry.run.step
    try:
        if keys:
            _save_plan(keys, entry, step)
    finally:
        entry.run = step


def _save_plan(keys: list[str], entry: CompiledEntry, run=None) -> None:
    """Save a finished step (`run`, else the entry's) under its plan keys (its graph, Variables and NumPy
    tier stay here)."""
    try:
        data = pickle.dumps(_portable(entry, entry.run if run is None else run), protocol=5)
    except Exception:   # (something in it does not pickle: not cached)
        return
    for key in keys:
        backends.save_plan(key, data)


def _portable(entry: CompiledEntry, run) -> dict:
    return dict(out_treedef=entry.out_treedef, run=run, var_avals=entry._var_avals, is_input=entry._is_input,
                out_avals=entry._out_avals)


def _load_plan(key: str, variables: tuple) -> CompiledEntry | None:
    """The entry saved under key, for these Variables, if every compiled unit it runs is on disk; else None."""
    data = backends.load_plan(key)
    if data is None:
        return None
    try:
        saved = pickle.loads(data)
    except Exception:
        return None
    if tuple(v.aval for v in variables) != saved["var_avals"] or not backends.compiled_on_disk(saved["run"]):
        return None
    entry = object.__new__(CompiledEntry)
    entry.__dict__.update(graph=None, out_treedef=saved["out_treedef"], run=saved["run"], variables=variables, plan=None,
                          _var_avals=saved["var_avals"], _is_input=saved["is_input"], _out_avals=saved["out_avals"])
    td = entry.out_treedef
    entry._out_shape = "leaf" if td.kind == "leaf" else (
        "tuple" if td.kind == "tuple" and all(c.kind == "leaf" for c in td.children) else "tree")
    return entry


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
    flat = flatten_call(fun, args, device=backends.on_device(backend))
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
