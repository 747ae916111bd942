"""User-facing transforms: jit, grad, value_and_grad, vjp, make_ir.

Every transform is an `emit` function that works inside the current trace; Staged wraps one so
that a call on concrete arrays traces it once per signature, compiles the graph and runs it."""
from __future__ import annotations

import functools
import inspect
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import autodiff
from .backends import default_backend, get_compiler
from .errors import TracekernError, TracerLeakError
from .ir import SUPPORTED_DTYPES, Aval, Graph, is_float
from .pytree import TreeDef, leaf_paths, tree_flatten, tree_unflatten
from .trace import Tracer, Variable, aval_of, current_builder, new_builder, trace_to_graph

# ----------------------------------------------------------------------------- arguments


def _arg_name(fun: Callable, i: int) -> str:
    try:
        params = list(inspect.signature(fun).parameters.values())
        if i < len(params) and params[i].kind in (params[i].POSITIONAL_ONLY, params[i].POSITIONAL_OR_KEYWORD):
            return f"argument {i} ('{params[i].name}')"
    except (TypeError, ValueError):
        pass
    return f"argument {i}"


def _fun_name(fun: Callable) -> str:
    return getattr(fun, "__qualname__", getattr(fun, "__name__", repr(fun)))


def _on_device(x: Any) -> bool:
    """A GPU array: a Numba device array (or its simulator's), or anything with
    __cuda_array_interface__ (CuPy, PyTorch)."""
    return hasattr(x, "__cuda_array_interface__") or (hasattr(x, "copy_to_host") and hasattr(x, "dtype"))


def _device_view(x: Any) -> Any:
    """A Numba device array viewing the same memory (no copy)."""
    if hasattr(x, "copy_to_host"):
        return x
    from numba import cuda

    return cuda.as_cuda_array(x)


def _leaf_to_array(fun: Callable, x: Any, where: str, device: bool = False) -> tuple[Any, bool]:
    """A concrete argument leaf as (array, weak): weak marks Python int/float (promote like scalars).
    GPU arrays stay on the device for a device backend (device=True), else are copied to the host."""
    if isinstance(x, np.ndarray):
        arr, weak = x, False
    elif _on_device(x):
        arr, weak = _device_view(x), False
        if not device:
            arr = arr.copy_to_host()
    elif isinstance(x, np.generic):
        arr, weak = np.asarray(x), False
    elif isinstance(x, bool):
        arr, weak = np.asarray(x), False
    elif isinstance(x, int):
        arr, weak = np.asarray(x, np.int64), True
    elif isinstance(x, float):
        arr, weak = np.asarray(x, np.float64), True
    elif isinstance(x, Tracer):
        raise TracerLeakError(f"{where} of {_fun_name(fun)} is a traced value from a trace that has ended "
                              "(a leaked tracer); return values from traced functions instead")
    else:
        raise TypeError(f"{where} of {_fun_name(fun)} is a {type(x).__name__} ({x!r:.60}), not an array: "
                        "traced functions take NumPy arrays, numbers, or tuples/lists/dicts of them. "
                        "Pass non-array values through static_argnums or a closure.")
    if arr.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{where} of {_fun_name(fun)} has dtype {arr.dtype}; supported dtypes are "
                        f"{', '.join(d.name for d in SUPPORTED_DTYPES)}. Convert it with .astype().")
    return arr, weak


def _describe_leaf(fun: Callable, args: tuple, leaf_index: int) -> str:
    count = 0
    for i, a in enumerate(args):
        _, td = tree_flatten(a)
        n = td.num_leaves
        if leaf_index < count + n:
            path = leaf_paths(td)[leaf_index - count]
            return _arg_name(fun, i) + (f" at {path}" if path else "")
        count += n
    return f"leaf {leaf_index}"


def _host(x: Any) -> np.ndarray:
    return _device_view(x).copy_to_host() if _on_device(x) else np.asarray(x)


def _to_user(x: np.ndarray) -> Any:
    if not isinstance(x, np.ndarray):
        return x   # a device array (the cuda backend's results stay on the device)
    if x.ndim == 0:
        return x[()]
    return x if x.flags.writeable else np.array(x)


# ----------------------------------------------------------------------------- staging


@dataclass
class _Compiled:
    graph: Graph
    out_treedef: TreeDef
    run: Callable
    variables: tuple = ()   # Variables the function reads: inputs after the arguments

    def __post_init__(self) -> None:
        self._var_avals = tuple(v.aval for v in self.variables)
        # outputs that are graph inputs are copied, so a result never aliases the caller's array
        inputs = set(self.graph.inputs)
        self._is_input = [v in inputs for v in self.graph.outputs]
        td = self.out_treedef
        # the common output structures, built without walking the tree: one array, a flat tuple
        self._shape = "leaf" if td.kind == "leaf" else (
            "tuple" if td.kind == "tuple" and all(c.kind == "leaf" for c in td.children) else "tree")

    @property
    def out_avals(self) -> tuple[Aval, ...]:
        return tuple(v.aval for v in self.graph.outputs) if self.graph is not None else self._out_avals

    def __getstate__(self) -> dict:
        """Pickled without the graph (an Exported in another process needs only the runner)."""
        state = dict(self.__dict__, graph=None, _out_avals=self.out_avals)
        return state

    def variables_match(self) -> bool:
        """Whether every Variable still has the shape and dtype this entry was traced for."""
        return all(v.aval == a for v, a in zip(self.variables, self._var_avals))

    def __call__(self, leaves: list) -> Any:
        if self.variables:
            leaves = list(leaves) + [v._value for v in self.variables]
        outs = [np.array(o) if copy and isinstance(o, np.ndarray) else _to_user(o) for o, copy in zip(self.run(leaves), self._is_input)]
        if self._shape == "leaf":
            return outs[0]
        if self._shape == "tuple":
            return tuple(outs)
        return tree_unflatten(self.out_treedef, outs)


class Exported:
    """A tk.jit function compiled for one argument signature (Staged.export). Pickling keeps the
    generated source, its constants and the output structure, not the graph or machine code; the
    receiving process imports the source through its disk cache, so Numba compiles it there once
    and later processes load the cached machine code."""

    def __init__(self, name: str, treedef: TreeDef, signature: tuple, entry: _Compiled):
        self.name = name
        self._treedef = treedef              # of ((positional args), {}), as Staged._signature flattens
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
        leaves, treedef = tree_flatten((args, {}))
        if treedef != self._treedef:
            raise ValueError(f"{self.name} was exported for arguments of structure {self._treedef!r}, got {treedef!r}")
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
    compiled function (buffers alive at once, outputs included, the caller's inputs not)."""

    residual_bytes: int | None
    peak_bytes: dict[str, int]
    saved_bytes: int | None = None


@dataclass(frozen=True)
class Lowered:
    ir: Graph
    source: str | None
    memory: MemoryReport
    vjp: autodiff.SplitVJP | None = None

    def __str__(self) -> str:
        return f"{self.ir}\n\nmemory: {self.memory}"


class Staged:
    """A function that, called on arrays, traces `emit` per argument signature, compiles the graph
    on `backend` and runs it; called inside another trace, it emits into that trace (inlining)."""

    def __init__(self, fun: Callable, emit: Callable, *, backend: str | None = None,
                 static_argnums: Sequence[int] | int = ()):
        self.fun = fun
        self.emit = emit
        self.backend = backend
        self._device = (backend or default_backend()) == "cuda"
        self.static_argnums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)
        self._cache: dict[Any, _Compiled] = {}
        # positional plain ndarrays only: (shape, dtype) per argument -> entry, checked before the
        # general signature (pytree flattening, conversions), which costs several microseconds
        self._fast: dict[tuple, _Compiled] = {}
        self.trace_count = 0
        if not isinstance(fun, functools.partial):
            functools.update_wrapper(self, fun, updated=())

    def __repr__(self) -> str:
        return f"<tracekern {type(self).__name__} of {_fun_name(self.fun)}>"

    def __get__(self, instance, owner):
        """As a method decorator: one Staged per instance, with the instance bound (not traced)."""
        if instance is None:
            return self
        key = f"__tracekern_bound_{id(self)}"
        bound = getattr(instance, "__dict__", {}).get(key)
        if bound is None:
            bound = Staged(functools.partial(self.fun, instance), functools.partial(self.emit, instance),
                           backend=self.backend,
                           static_argnums=tuple(i - 1 for i in self.static_argnums if i > 0))
            if hasattr(instance, "__dict__"):
                instance.__dict__[key] = bound
        return bound

    def __call__(self, *args, **kwargs):
        if current_builder() is not None:
            return self.emit(*args, **kwargs)
        plain = not kwargs and not self.static_argnums and all(type(a) is np.ndarray for a in args)
        if plain:
            entry = self._fast.get(fast_key := tuple([(a.shape, a.dtype) for a in args]))
            if entry is not None and (not entry.variables or entry.variables_match()):
                return entry(args)
        key, leaves, make_graph = self._signature(args, kwargs)
        entry = self._cache.get(key)
        if entry is None or not entry.variables_match():   # a Variable's shape or dtype changed
            entry = self._compile(key, make_graph)
        if plain:
            self._fast[fast_key] = entry
        return entry(leaves)

    def _compile(self, key, make_graph) -> _Compiled:
        graph, out_td, variables = make_graph()
        entry = _Compiled(graph, out_td, get_compiler(self.backend or default_backend())(graph), variables)
        self._cache[key] = entry
        return entry

    def lower(self, *args, **kwargs) -> Lowered:
        """What a call on these arguments runs: .ir (the graph), .source (the generated Numba source;
        None on "interpret"), .memory (.peak_bytes of each compiled function; .residual_bytes saved
        between the two halves of tk.vjp(f) on these arguments)."""
        key, _, make_graph = self._signature(args, kwargs)
        entry = self._cache.get(key)
        if entry is None or not entry.variables_match():
            entry = self._compile(key, make_graph)
        peaks = {"step": entry.run.peak_bytes}
        residual, saved, split = None, None, None
        if not kwargs and not self.static_argnums and not isinstance(self.fun, functools.partial):
            try:
                split, _, meta = _vjp_split(self.fun, args, False, self.backend)
            except TracekernError:   # no reverse mode for this function (e.g. the grad of a checkpointed loop)
                split = None
            if split is not None:
                fwd_run, bwd_run = meta[3]
                residual, saved = split.residual_bytes, split.saved_bytes
                peaks.update(vjp_forward=fwd_run.peak_bytes, vjp_backward=bwd_run.peak_bytes)
        return Lowered(entry.graph, entry.run.source, MemoryReport(residual, peaks, saved), split)

    def export(self, *args) -> Exported:
        """This function compiled for the signature of `args` (arrays, or anything with .shape and
        .dtype), as an object that pickles to the generated module's source and runs in another
        process: there it is loaded through that process's disk cache (compiled once, then reused).
        Its machine code is never pickled. tracekern.dask ships these to Dask workers."""
        if self.static_argnums:
            raise ValueError(f"export of {_fun_name(self.fun)}: static_argnums are not supported; close over the "
                             "static values (functools.partial) instead")
        leaves, treedef = tree_flatten(args)
        examples = [np.empty(x.shape, x.dtype) if hasattr(x, "shape") and hasattr(x, "dtype") and not
                    isinstance(x, (np.ndarray, Tracer)) else x for x in leaves]
        key, _, make_graph = self._signature(tree_unflatten(treedef, examples), {})
        entry = self._cache.get(key)
        if entry is None or not entry.variables_match():
            entry = self._compile(key, make_graph)
        if entry.variables:
            raise ValueError(f"export of {_fun_name(self.fun)}: it reads tk.Variables ({len(entry.variables)}), whose "
                             "values live in this process; pass them as arguments instead")
        if not getattr(entry.run, "portable", False):
            raise ValueError(f"export of {_fun_name(self.fun)}: the {self.backend or default_backend()!r} backend's "
                             "compiled functions cannot run in another process; use backend='cpu'")
        return Exported(_fun_name(self.fun), key[0], key[1], entry)

    def _split_static(self, args: tuple) -> tuple[tuple, tuple]:
        statics = []
        for i in self.static_argnums:
            if not -len(args) <= i < len(args):
                raise ValueError(f"static_argnums={self.static_argnums} but {_fun_name(self.fun)} got {len(args)} arguments")
            v = args[i]
            try:
                hash(v)
            except TypeError:
                raise TypeError(f"static {_arg_name(self.fun, i % len(args))} of {_fun_name(self.fun)} must be "
                                f"hashable, got {type(v).__name__}") from None
            statics.append((i % len(args), v))
        static_pos = {i for i, _ in statics}
        dynamic = tuple(a for i, a in enumerate(args) if i not in static_pos)
        return tuple(statics), dynamic

    def _signature(self, args: tuple, kwargs: dict | None = None):
        """Cache key, argument arrays, and a function that traces the graph for this signature.
        Keyword arguments are traced inputs like positional ones (transforms never differentiate them)."""
        statics, dynamic = self._split_static(args)
        kwargs = kwargs or {}
        leaves, treedef = tree_flatten((dynamic, kwargs))
        arrays, weak = [], []
        for j, x in enumerate(leaves):
            try:
                a, w = _leaf_to_array(self.fun, x, "", self._device)
            except (TypeError, TracerLeakError):  # again, naming the argument
                if j >= tree_flatten(dynamic)[1].num_leaves:
                    raise TypeError(f"a keyword argument of {_fun_name(self.fun)} is a {type(x).__name__}, "
                                    "not an array or a number") from None
                a, w = _leaf_to_array(self.fun, x, _describe_leaf(self.fun, dynamic, j), self._device)
            arrays.append(a)
            weak.append(w)
        key = (treedef, tuple((tuple(a.shape), a.dtype.str) for a in arrays), tuple(weak), statics)

        def make_graph() -> tuple[Graph, TreeDef, tuple]:
            self.trace_count += 1
            avals = [Aval(tuple(a.shape), a.dtype) for a in arrays]   # (a device array's shape may be a tuple subclass)

            def flat(*tracers):
                dyn, kw = tree_unflatten(treedef, list(tracers))
                return self.emit(*_merge_static(dyn, statics), **kw)

            graph, out_td, captured = trace_to_graph(flat, avals, weak)
            assert all(isinstance(c, Variable) for c in captured), "top-level trace captured outer values"
            return graph, out_td, tuple(captured)

        return key, arrays, make_graph


def _merge_static(dynamic: tuple, statics: tuple) -> tuple:
    args = list(dynamic)
    for i, v in statics:
        args.insert(i, v)
    return tuple(args)


def jit(fun: Callable | None = None, *, backend: str | None = None, static_argnums: Sequence[int] | int = ()):
    """Compile `fun` per argument signature (shapes, dtypes, pytree structure, static args).

    backend: "interpret" (NumPy), "cpu" / "cuda" when available; default tracekern.backends.default_backend().
    Usable bare (@tk.jit) or with arguments (@tk.jit(backend="interpret"))."""
    if fun is None:
        return lambda f: jit(f, backend=backend, static_argnums=static_argnums)
    if backend is not None:
        get_compiler(backend)  # fail now, not at the first call
    return Staged(fun, fun, backend=backend, static_argnums=static_argnums)


# ----------------------------------------------------------------------------- reverse mode


def _argnums(argnums: int | Sequence[int], nargs: int, fun: Callable) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for i in nums:
        if not -nargs <= i < nargs:
            raise ValueError(f"argnums={argnums} but {_fun_name(fun)} was called with {nargs} positional arguments")
    return tuple(i % nargs for i in nums)


def _flat_args(fun: Callable, args: tuple, diff_argnums: tuple[int, ...], check_float: bool, device: bool = False):
    """Leaves of args (traced values kept, concrete ones as arrays), their avals and weak flags,
    which leaves are differentiated, and the positional argument each leaf belongs to."""
    leaves, avals, weak, active, owner = [], [], [], [], []
    for i, a in enumerate(args):
        ls, td = tree_flatten(a)
        paths = leaf_paths(td)
        for x, path in zip(ls, paths):
            where = _arg_name(fun, i) + (f" at {path}" if path else "")
            if isinstance(x, Tracer):
                aval, w = x.aval, x.weak
            else:
                x, w = _leaf_to_array(fun, x, where, device)
                aval = Aval(tuple(x.shape), np.dtype(x.dtype))
            is_diff = i in diff_argnums
            if is_diff and check_float and not is_float(aval.dtype):
                raise TypeError(f"cannot differentiate with respect to {where} of {_fun_name(fun)}: its dtype is "
                                f"{aval.dtype}. Gradients are defined for float32/float64 only; integer and bool "
                                "values are constants of differentiation (leave them out of argnums, or .astype(float)).")
            leaves.append(x)
            avals.append(aval)
            weak.append(w)
            active.append(is_diff and is_float(aval.dtype))
            owner.append(i)
    return leaves, avals, weak, active, owner


def _trace_flat(fun: Callable, args: tuple, avals, weak):
    treedefs = [tree_flatten(a)[1] for a in args]

    def flat(*leaves):
        it, rebuilt = 0, []
        for td in treedefs:
            n = td.num_leaves
            rebuilt.append(tree_unflatten(td, list(leaves[it:it + n])))
            it += n
        return fun(*rebuilt)

    return trace_to_graph(flat, avals, weak)


def _split_aux(fun: Callable, out_td: TreeDef, has_aux: bool) -> tuple[TreeDef, TreeDef | None]:
    if not has_aux:
        return out_td, None
    if out_td.kind not in ("tuple", "list") or len(out_td.children) != 2:
        raise TypeError(f"{_fun_name(fun)} was transformed with has_aux=True, so it must return a pair "
                        f"(output, aux); it returned structure {out_td!r}")
    return out_td.children[0], out_td.children[1]


def _check_wrt(fun: Callable, wrt) -> tuple | None:
    if wrt is None:
        return None
    items = (wrt,) if isinstance(wrt, Variable) else wrt
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, Variable) for v in items):
        raise TypeError(f"wrt= of a transform of {_fun_name(fun)} must be a list of tk.Variable, got {wrt!r:.80}")
    for v in items:
        if not is_float(v.dtype):
            raise TypeError(f"cannot differentiate with respect to Variable {v.name or ''} of dtype {v.dtype}: "
                            "gradients are defined for float32/float64 only")
    return tuple(items)


def _grad_emit(fun: Callable, argnums, has_aux: bool, unconnected: str, with_value: bool, wrt=None) -> Callable:
    if unconnected not in ("zero", "none"):
        raise ValueError(f"unconnected must be 'zero' or 'none', got {unconnected!r}")
    wrt = _check_wrt(fun, wrt)

    def emit(*args, **kwargs):
        # keyword arguments are closed over: traced (captured) but never differentiated
        return emit_positional(functools.partial(fun, **kwargs) if kwargs else fun, args)

    def emit_positional(bound, args):
        # `bound` is traced; errors name the user's `fun`
        nums = _argnums(argnums, len(args), fun)
        leaves, avals, weak, active, owner = _flat_args(fun, args, nums, check_float=True)
        graph, out_td, captured = _trace_flat(bound, args, avals, weak)
        value_td, aux_td = _split_aux(fun, out_td, has_aux)
        if value_td.kind != "leaf":
            raise ValueError(f"grad of {_fun_name(fun)}: the output must be a single scalar, got structure "
                             f"{value_td!r}. Use tk.vjp(f, *args) for several or non-scalar outputs.")
        out_var = graph.outputs[0]
        if out_var.aval.shape != () or not is_float(out_var.aval.dtype):
            raise (ValueError if is_float(out_var.aval.dtype) else TypeError)(
                f"grad of {_fun_name(fun)}: the output must be a float scalar, got {out_var.aval}. Use "
                "tk.vjp(f, *args) with a cotangent of the output's shape for non-scalar outputs "
                "(or reduce the output, e.g. with .sum()).")
        var_active = [any(c is v for v in wrt or ()) for c in captured]
        fp = autodiff.forward(graph, list(leaves) + list(captured), active + var_active)
        outs = fp.outputs
        seed = np.ones((), out_var.aval.dtype)
        cts = fp.backward([seed] + [None] * (len(outs) - 1))
        grads = _collect_grads(args, nums, leaves, cts, active, owner, unconnected)
        grads = grads[0] if isinstance(argnums, int) else tuple(grads)
        if wrt is not None:
            grads = (grads, tuple(_variable_grad(v, captured, cts[len(leaves):], unconnected) for v in wrt))
        value = outs[0]
        if has_aux:
            aux = tree_unflatten(aux_td, outs[1:])
            return ((value, aux), grads) if with_value else (grads, aux)
        return (value, grads) if with_value else grads

    return emit


def _variable_grad(v: Variable, captured: list, cts: list, unconnected: str):
    from .numpy import zeros_like

    for c, ct in zip(captured, cts):
        if c is v and ct is not None:
            return ct
    return zeros_like(v.read()) if unconnected == "zero" else None


def _collect_grads(args, nums, leaves, cts, active, owner, unconnected) -> list:
    from .numpy import zeros_like

    per_arg = []
    for i in nums:
        _, td = tree_flatten(args[i])
        vals = []
        for j, x in enumerate(leaves):
            if owner[j] != i:
                continue
            ct = cts[j] if active[j] else None
            if ct is None and unconnected == "zero" and active[j]:
                ct = zeros_like(x)
            vals.append(ct)
        per_arg.append(tree_unflatten(td, vals))
    return per_arg


def grad(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False, unconnected: str = "zero",
         wrt: Sequence[Variable] | None = None):
    """Gradient of a scalar-valued `fun` with respect to the arguments in `argnums`.

    Gradients have the pytree structure of their arguments; with a tuple argnums, a tuple of them.
    With wrt=[v, ...] (tk.Variables), the result is (argnums gradients, (dv, ...)).
    unconnected="zero" gives zeros for arguments the output does not depend on; "none" gives None."""
    return Staged(fun, _grad_emit(fun, argnums, has_aux, unconnected, with_value=False, wrt=wrt))


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False,
                   unconnected: str = "zero", wrt: Sequence[Variable] | None = None):
    """(fun(*args), grad(fun)(*args)) from one joint pass."""
    return Staged(fun, _grad_emit(fun, argnums, has_aux, unconnected, with_value=True, wrt=wrt))


# ----------------------------------------------------------------------------- vjp


class Pullback:
    """The backward half of tk.vjp: pullback(cotangent) returns one cotangent per positional argument."""

    def __init__(self, fun, out_treedef, out_avals, run_backward, arg_structure):
        self._fun = fun
        self._out_treedef = out_treedef
        self._out_avals = out_avals
        self._run_backward = run_backward
        self._arg_structure = arg_structure  # per positional argument: (treedef, [(leaf_index, active)])

    def __call__(self, cotangent):
        leaves, td = tree_flatten(cotangent)
        if td != self._out_treedef:
            raise ValueError(f"pullback of {_fun_name(self._fun)}: the cotangent has structure {td!r}, "
                             f"the output has {self._out_treedef!r}")
        cts = []
        for j, (x, aval) in enumerate(zip(leaves, self._out_avals)):
            if isinstance(x, Tracer):
                got = aval_of(x)
            elif _on_device(x):
                x = _device_view(x)
                got = Aval(tuple(x.shape), np.dtype(x.dtype))
            else:
                got = Aval(np.shape(x), np.asarray(x).dtype)
            if isinstance(x, (int, float)) and not isinstance(x, bool) and got.shape == aval.shape:
                x = np.asarray(x, aval.dtype)
            elif got != aval:
                raise ValueError(f"pullback of {_fun_name(self._fun)}: cotangent {j} is {got}, the output is {aval}; "
                                 "a cotangent must have the output's shape and dtype")
            cts.append(x)
        in_cts = self._run_backward(cts)
        out = []
        for td_i, members in self._arg_structure:
            out.append(tree_unflatten(td_i, [in_cts[j] if act else None for j, act in members]))
        return tuple(out)


def _arg_structure(args, active):
    structure, j = [], 0
    for a in args:
        _, td = tree_flatten(a)
        members = [(j + k, active[j + k]) for k in range(td.num_leaves)]
        structure.append((td, members))
        j += td.num_leaves
    return structure


def vjp(fun: Callable, *args, has_aux: bool = False, backend: str | None = None):
    """(out, pullback) = tk.vjp(f, *args): one compiled forward that also saves residuals, and
    pullback(cotangent), a second compiled function, returning one cotangent per positional argument
    (None for integer or bool leaves). With has_aux=True, returns (out, pullback, aux).
    backend: where both halves run; default: fun's if it is a tk.jit function, else the default."""
    if current_builder() is not None:
        return _vjp_in_trace(fun, args, has_aux)
    if backend is None:
        backend = getattr(fun, "backend", None) if isinstance(fun, Staged) else None
    backend = backend or default_backend()
    split, leaves, meta = _vjp_split(fun, args, has_aux, backend)
    out_td, aux_td, active, compiled, variables = meta
    leaves = list(leaves) + [v._value for v in variables]
    fwd_run, bwd_run = compiled
    results = fwd_run(leaves)
    n_out = out_td.num_leaves
    n_all = split.num_outputs
    residuals = results[n_all:]
    outs = [_to_user(o) for o in results[:n_out]]
    aux = [_to_user(o) for o in results[n_out:n_all]]
    active_idx = [j for j, a in enumerate(active) if a]
    device = backend == "cuda"

    def run_backward(cts):
        arrays = [c if device and _on_device(c) else _host(c) for c in cts]
        grads = bwd_run(list(residuals) + arrays)
        full = [None] * len(active)
        for j, g in zip(active_idx, grads):
            full[j] = _to_user(g)
        return full

    pull = Pullback(fun, out_td, [v.aval for v in split.forward.outputs[:n_out]], run_backward,
                    _arg_structure(args, active))
    out = tree_unflatten(out_td, outs)
    if has_aux:
        return out, pull, tree_unflatten(aux_td, aux)
    return out, pull


_VJP_CACHE: weakref.WeakKeyDictionary[Callable, dict] = weakref.WeakKeyDictionary()


def _vjp_split(fun: Callable, args: tuple, has_aux: bool, backend: str | None = None):
    backend = backend or default_backend()
    arrays, avals, weak, active, owner = _flat_args(fun, args, tuple(range(len(args))), check_float=False,
                                                    device=backend == "cuda")
    key = (tuple(tree_flatten(a)[1] for a in args), tuple(avals), tuple(weak), has_aux, backend)
    try:
        per_fun = _VJP_CACHE.setdefault(fun, {})
    except TypeError:  # not weak-referenceable: no caching
        per_fun = {}
    hit = per_fun.get(key)
    if hit is not None and not all(v.aval == a for v, a in zip(hit[1][4], hit[2])):
        hit = None   # a Variable's shape or dtype changed
    if hit is None:
        graph, out_td, captured = _trace_flat(fun, args, avals, weak)
        assert all(isinstance(c, Variable) for c in captured), "top-level trace captured outer values"
        variables = tuple(captured)
        value_td, aux_td = _split_aux(fun, out_td, has_aux)
        n_out = value_td.num_leaves
        out_avals = [v.aval for v in graph.outputs[:n_out]]
        with new_builder() as b:
            primals = [b.new_input(a, w) for a, w in zip(avals, weak)] + [b.new_input(v.aval) for v in variables]
            cts = [b.new_input(a) for a in out_avals]
            fp = autodiff.forward(graph, primals, active + [False] * len(variables))
            in_cts = fp.backward(list(cts) + [None] * (len(graph.outputs) - n_out))
            from .numpy import zeros_like

            grads = [ct if ct is not None else zeros_like(p) for ct, p, a in zip(in_cts, primals, active) if a]
            joint, _ = b.finish(fp.outputs + grads)
        joint = autodiff.passes.simplify(joint)
        split = autodiff.split_joint(joint, len(primals), len(graph.outputs))
        compiler = get_compiler(backend)
        hit = (split, (value_td, aux_td, active, (compiler(split.forward), compiler(split.backward)), variables),
               tuple(v.aval for v in variables))
        per_fun[key] = hit
    split, meta, _ = hit
    return split, arrays, meta


def _vjp_in_trace(fun: Callable, args: tuple, has_aux: bool):
    leaves, avals, weak, active, owner = _flat_args(fun, args, tuple(range(len(args))), check_float=False)
    graph, out_td, captured = _trace_flat(fun, args, avals, weak)
    value_td, aux_td = _split_aux(fun, out_td, has_aux)
    n_out = value_td.num_leaves
    builder = current_builder()
    fp = autodiff.forward(graph, list(leaves) + list(captured), active + [False] * len(captured))
    outs = fp.outputs

    def run_backward(cts):
        if not builder.active:
            raise TracerLeakError(f"the pullback of {_fun_name(fun)} was called after the trace that made it ended")
        return fp.backward(list(cts) + [None] * (len(outs) - n_out))[: len(leaves)]

    pull = Pullback(fun, value_td, [v.aval for v in graph.outputs[:n_out]], run_backward, _arg_structure(args, active))
    out = tree_unflatten(value_td, outs[:n_out])
    if has_aux:
        return out, pull, tree_unflatten(aux_td, outs[n_out:])
    return out, pull


# ----------------------------------------------------------------------------- introspection


def make_ir(fun: Callable, *, mode: str = "forward", argnums: int | Sequence[int] = 0,
            static_argnums: Sequence[int] | int = (), has_aux: bool = False):
    """make_ir(f, mode=...)(*args) returns the IR that tracekern runs for these arguments.

    mode="forward": the Graph of f. "grad" / "value_and_grad": the joint Graph of that transform.
    "vjp": a SplitVJP with .forward (outputs + residuals) and .backward (residuals marked saved)."""
    modes = ("forward", "grad", "value_and_grad", "vjp")
    if mode not in modes:
        raise ValueError(f"make_ir: mode must be one of {modes}, got {mode!r}")

    def build(*args):
        if mode == "vjp":
            return _vjp_split(fun, args, has_aux)[0]
        if mode == "forward":
            staged = Staged(fun, fun, static_argnums=static_argnums)
        else:
            emit = _grad_emit(fun, argnums, has_aux, "zero", with_value=(mode == "value_and_grad"))
            staged = Staged(fun, emit, static_argnums=static_argnums)
        _, _, make_graph = staged._signature(args)
        return make_graph()[0]

    return build


def stop_gradient(x):
    """Identity in the forward pass; no gradient flows through x."""
    from .numpy import stop_gradient as sg

    return sg(x)
