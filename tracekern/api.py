"""User-facing transforms: jit, grad, value_and_grad, vjp, jvp, linearize, make_ir, stop_gradient.

Every transform is an `emit` function that works inside the current trace: it traces the user's
function to a graph, hands it to a graph-to-graph transform (tracekern.autodiff) and inlines the
result. Staged (tracekern.staging) wraps one so that a call on concrete arrays traces it once per
signature, compiles the graph and runs it."""
from __future__ import annotations

import functools
import weakref
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import autodiff, backends, forward, passes, remat
from . import numpy as tnp
from .arguments import arg_name, device_view, differentiated, flatten_call, fun_name, host, on_device, output_location, to_user
from .budget import budgeted
from .errors import TracekernError, TracerLeakError, with_location
from .ir import Aval, Graph, is_complex, is_float, is_inexact
from .pytree import Static, TreeDef, leaf_paths, takes_static, tree_flatten, tree_map, tree_unflatten
from .staging import Staged, Transform, primal_trace, split_aux, stage_vjp, trace_call
from .trace import FlatArgs, Tracer, Variable, _read, aval_of, current_builder
from .vectorize import make_vmap_ir

# ----------------------------------------------------------------------------- jit


def jit(fun: Callable | None = None, *, backend: str | None = None, static_argnums: Sequence[int] | int = (),
        matmul_precision: str | None = None, tiers: bool | None = None):
    """Compile `fun` per argument signature (shapes, dtypes, pytree structure, static args).

    backend: "interpret" (NumPy), "cpu" or "cuda"; default tracekern.backends.default_backend().
    matmul_precision (backend="cuda" only): "highest" (the default: full float32) or "tf32" (float32
    matmuls may use TF32 tensor cores, with inputs rounded to 10-bit mantissas: about 1e-3 relative
    error instead of 1e-6, and several times faster on an A100 or H100).
    tiers (backend="cpu"; None: tk.config.tiers, True by default): a new signature's first calls run
    each kernel with NumPy while its compiled units are built in the background (the README's "Tiers");
    False: everything is compiled before the first call returns. f.compile(*args) (or
    f.lower(*args).compile()) compiles ahead of time and waits.
    Usable bare (@tk.jit) or with arguments (@tk.jit(backend="interpret"))."""
    if fun is None:
        return lambda f: jit(f, backend=backend, static_argnums=static_argnums, matmul_precision=matmul_precision,
                             tiers=tiers)
    if tiers is not None and not isinstance(tiers, bool):
        raise ValueError(f"tiers must be True, False or None (tk.config.tiers), got {tiers!r}")
    options = backends.check_options(backend or backends.default_backend(), {"matmul_precision": matmul_precision})
    if backend is not None or options:
        backends.get_compiler(backend or backends.default_backend(), **options)  # fail now, not at the first call
    if matmul_precision is not None and matmul_precision not in ("highest", "tf32"):
        raise ValueError(f"matmul_precision must be 'highest' or 'tf32', got {matmul_precision!r}")
    return Staged(fun, fun, backend=backend, static_argnums=static_argnums, options=options, tiers=tiers)


# ----------------------------------------------------------------------------- grad


def _argnums(argnums: int | Sequence[int], args: tuple, fun: Callable) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    nargs = len(args)
    for i in nums:
        if not -nargs <= i < nargs:
            raise ValueError(with_location(f"argnums={argnums} but {fun_name(fun)} was called with {nargs} positional "
                                           "arguments"))
        if type(args[i]) is Static:
            raise ValueError(with_location(f"argnums={argnums} names argument {i % nargs} of {fun_name(fun)}, which "
                                           "tk.jit's static_argnums makes static: a static argument has no gradient"))
    return tuple(i % nargs for i in nums)


def _check_wrt(fun: Callable, wrt) -> tuple | None:
    if wrt is None:
        return None
    items = (wrt,) if isinstance(wrt, Variable) else wrt
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, Variable) for v in items):
        raise TypeError(f"wrt= of a transform of {fun_name(fun)} must be a list of tk.Variable, got {wrt!r:.80}")
    for v in items:
        if not is_inexact(v.dtype):
            raise TypeError(f"cannot differentiate with respect to Variable {v.name or ''} of dtype {v.dtype}: "
                            "gradients are defined for float32/float64 and complex64/complex128 only")
    return tuple(items)


def _inline_joint(joint: autodiff.JointVJP, primals: list, cts: list) -> tuple[list, list]:
    """Emit a joint VJP graph into the trace that is running: (outputs, one cotangent per primal
    input, None where none flows)."""
    outs = _inline(joint.graph, primals + cts)
    values, grads = outs[:joint.num_outputs], iter(outs[joint.num_outputs:])
    return values, [next(grads) if has else None for has in joint.has_grad]


def _inline(graph: Graph, args: list) -> list:
    env = current_builder().inline(graph, [_read(a) for a in args])
    return [env[v] for v in graph.outputs]


def _check_output(fun: Callable, graph: Graph, holomorphic: bool) -> None:
    """grad's output: a float scalar (a complex one with holomorphic=True), else an error saying what to do."""
    aval = graph.outputs[0].aval
    if holomorphic and aval.shape == () and is_complex(aval.dtype):
        return
    if holomorphic:
        raise TypeError(with_location(
            f"grad of {fun_name(fun)} with holomorphic=True: the output must be a complex scalar, got {aval}",
            output_location(fun, graph, 0)))
    if aval.shape == () and is_complex(aval.dtype):
        raise TypeError(with_location(
            f"grad of {fun_name(fun)}: the output is complex ({aval}), and a complex function has no gradient "
            "unless it is holomorphic. For a holomorphic function (z**2, np.exp(z), ...: complex-differentiable) pass "
            "holomorphic=True to get f'(z), as JAX's; otherwise reduce the output to a real loss (np.abs(out) ** 2, "
            "np.real(out)), whose gradient follows tracekern's convention (the README's \"Complex numbers\")",
            output_location(fun, graph, 0)))
    if aval.shape != () or not is_float(aval.dtype):
        raise (ValueError if is_float(aval.dtype) else TypeError)(with_location(
            f"grad of {fun_name(fun)}: the output must be a float scalar, got {aval}. Use "
            "tk.vjp(f, *args) with a cotangent of the output's shape for non-scalar outputs "
            "(or reduce the output, e.g. with .sum()).", output_location(fun, graph, 0)))


def _grad_emit(fun: Callable, argnums, has_aux: bool, unconnected: str, with_value: bool, wrt=None,
               memory_budget=None, holomorphic: bool = False) -> Transform:
    """The gradient transform: run(*args, **kwargs) emits it and returns (outputs, its memory plan under
    a budget, else None)."""
    if unconnected not in ("zero", "none"):
        raise ValueError(f"unconnected must be 'zero' or 'none', got {unconnected!r}")
    wrt = _check_wrt(fun, wrt)
    memory_budget = remat.check_budget(memory_budget)

    def run(*args, **kwargs):
        # keyword arguments are closed over: traced (captured) but never differentiated
        return emit_positional(_bind_keywords(fun, kwargs), args)

    def emit_positional(bound, args):
        # `bound` is traced; errors name the user's `fun`
        nums = _argnums(argnums, args, fun)
        flat = flatten_call(fun, args)
        active = differentiated(fun, flat, nums, check_float=True)
        graph, out_td, captured = primal_trace(bound, flat)
        value_td, aux_td = split_aux(fun, out_td, has_aux)
        if value_td.kind != "leaf":
            raise ValueError(with_location(
                f"grad of {fun_name(fun)}: the output must be a single scalar, got structure {value_td!r}. Use "
                "tk.vjp(f, *args) for several or non-scalar outputs.", output_location(fun, graph, 0)))
        out_var = graph.outputs[0]
        _check_output(fun, graph, holomorphic)
        if holomorphic:
            for j, (aval, act) in enumerate(zip(flat.avals, active)):
                if act and not is_complex(aval.dtype):
                    raise TypeError(with_location(
                        f"grad of {fun_name(fun)} with holomorphic=True: every differentiated input must be complex; "
                        f"{arg_name(fun, flat.owner[j])} is {aval} (pass z.astype(np.complex128))"))
        var_active = [any(c is v for v in wrt or ()) for c in captured]
        joint = autodiff.vjp(graph, active + var_active, seeded=[i == 0 for i in range(len(graph.outputs))])
        joint, plan = budgeted(fun, joint, memory_budget)   # (returned: lower() reports it)
        seed = np.ones((), out_var.aval.dtype)
        outs, cts = _inline_joint(joint, list(flat.leaves) + list(captured), [seed])
        if holomorphic:   # f'(z): the conjugate of the convention's cotangent for a seed of 1
            cts = [tnp.conj(c) if c is not None else None for c in cts]
        grads = _collect_grads(flat, nums, cts, active, unconnected)
        grads = grads[0] if isinstance(argnums, int) else tuple(grads)
        if wrt is not None:
            grads = (grads, tuple(_variable_grad(v, captured, cts[len(flat.leaves):], unconnected) for v in wrt))
        value = outs[0]
        if has_aux:
            aux = tree_unflatten(aux_td, outs[1:])
            return (((value, aux), grads) if with_value else (grads, aux)), plan
        return ((value, grads) if with_value else grads), plan

    # what this transform adds to the traced function, for staging's plan cache (None: not cached)
    key = None if wrt is not None or memory_budget is not None else (
        "grad", argnums if isinstance(argnums, int) else tuple(argnums), has_aux, unconnected, with_value, holomorphic)
    return Transform(run, plan_key=key, rebudget=lambda b: _grad_emit(fun, argnums, has_aux, unconnected, with_value,
                                                                      wrt, b, holomorphic))


def _bind_keywords(fun: Callable, kwargs: dict) -> Callable:
    """fun with keyword arguments bound (closed over), still passing static arguments on if fun does."""
    if not kwargs:
        return fun
    bound = functools.partial(fun, **kwargs)
    bound.takes_static = takes_static(fun)
    return bound


def _variable_grad(v: Variable, captured: list, cts: list, unconnected: str):
    for c, ct in zip(captured, cts):
        if c is v and ct is not None:
            return ct
    return tnp.zeros_like(v.read()) if unconnected == "zero" else None


def _collect_grads(flat: FlatArgs, nums, cts, active, unconnected) -> list:
    per_arg = []
    for i in nums:
        vals = []
        for j, x in enumerate(flat.leaves):
            if flat.owner[j] != i:
                continue
            ct = cts[j] if active[j] else None
            if ct is None and unconnected == "zero" and active[j]:
                ct = tnp.zeros_like(x)
            vals.append(ct)
        per_arg.append(tree_unflatten(flat.treedefs[i], vals))
    return per_arg


def grad(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False, unconnected: str = "zero",
         wrt: Sequence[Variable] | None = None, memory_budget: int | float | None = None, holomorphic: bool = False):
    """Gradient of a scalar-valued `fun` with respect to the arguments in `argnums`.

    Gradients have the pytree structure of their arguments; with a tuple argnums, a tuple of them.
    With wrt=[v, ...] (tk.Variables), the result is (argnums gradients, (dv, ...)).
    unconnected="zero" gives zeros for arguments the output does not depend on; "none" gives None.
    memory_budget: the most bytes the forward pass may keep for the backward pass (an int), or a
    fraction in (0, 1] of what it keeps without a budget (a float); the planner recomputes the rest
    the cheapest way (tracekern.remat.plan_residuals).

    Complex inputs: the gradient of a real loss is dL/dx + i dL/dy (PyTorch's convention; z -= lr *
    grad descends). A complex output is an error unless holomorphic=True, which gives f'(z) (JAX's)."""
    return Staged(fun, _grad_emit(fun, argnums, has_aux, unconnected, with_value=False, wrt=wrt,
                                  memory_budget=memory_budget, holomorphic=holomorphic))


def value_and_grad(fun: Callable, argnums: int | Sequence[int] = 0, *, has_aux: bool = False,
                   unconnected: str = "zero", wrt: Sequence[Variable] | None = None,
                   memory_budget: int | float | None = None, holomorphic: bool = False):
    """(fun(*args), grad(fun)(*args)) from one joint pass (memory_budget, holomorphic: as for grad)."""
    return Staged(fun, _grad_emit(fun, argnums, has_aux, unconnected, with_value=True, wrt=wrt,
                                  memory_budget=memory_budget, holomorphic=holomorphic))


# ----------------------------------------------------------------------------- vjp


@dataclass(frozen=True)
class _ArgGroup:
    """One positional argument of the function tk.vjp differentiates: its structure, and per leaf
    (its index among all leaves, whether it gets a cotangent)."""

    treedef: TreeDef
    leaves: tuple[tuple[int, bool], ...]


class Pullback:
    """The backward half of tk.vjp: pullback(cotangent) returns one cotangent per positional argument."""

    def __init__(self, fun, out_treedef, out_avals, run_backward, arg_groups: list[_ArgGroup]):
        self._fun = fun
        self._out_treedef = out_treedef
        self._out_avals = out_avals
        self._run_backward = run_backward
        self._arg_groups = arg_groups

    def __call__(self, cotangent):
        leaves, td = tree_flatten(cotangent)
        if td != self._out_treedef:
            # None for an integer or bool output (a constant of differentiation, as tk.jvp's None tangent)
            holes = [None if not is_inexact(a.dtype) else 0 for a in self._out_avals]
            if td != tree_flatten(tree_unflatten(self._out_treedef, holes))[1]:
                raise ValueError(with_location(
                    f"pullback of {fun_name(self._fun)}: the cotangent has structure {td!r}, the output has "
                    f"{self._out_treedef!r}; give one cotangent per output leaf (None for an integer or bool output)"))
            given = iter(leaves)
            leaves = [next(given) if h is not None else np.zeros(a.shape, a.dtype) for h, a in zip(holes, self._out_avals)]
        cts = []
        for j, (x, aval) in enumerate(zip(leaves, self._out_avals)):
            if isinstance(x, Tracer):
                got = aval_of(x)
            elif on_device(x):
                x = device_view(x)
                got = Aval(tuple(x.shape), np.dtype(x.dtype))
            else:
                got = Aval(np.shape(x), np.asarray(x).dtype)
            if isinstance(x, (int, float, complex)) and not isinstance(x, bool) and got.shape == aval.shape:
                x = np.asarray(x, aval.dtype)
            elif got != aval:
                raise ValueError(with_location(f"pullback of {fun_name(self._fun)}: cotangent {j} is {got}, the output "
                                               f"is {aval}; a cotangent must have the output's shape and dtype"))
            cts.append(x)
        in_cts = self._run_backward(cts)
        return tuple(tree_unflatten(g.treedef, [in_cts[j] if act else None for j, act in g.leaves])
                     for g in self._arg_groups)


def _arg_groups(flat: FlatArgs, active) -> list[_ArgGroup]:
    groups, j = [], 0
    for td in flat.treedefs:
        groups.append(_ArgGroup(td, tuple((j + k, active[j + k]) for k in range(td.num_leaves))))
        j += td.num_leaves
    return groups


def vjp(fun: Callable, *args, has_aux: bool = False, backend: str | None = None,
        memory_budget: int | float | None = None):
    """(out, pullback) = tk.vjp(f, *args): one compiled forward that also saves residuals, and
    pullback(cotangent), a second compiled function, returning one cotangent per positional argument
    (None for integer or bool leaves). With has_aux=True, returns (out, pullback, aux).
    backend: where both halves run; default: fun's if it is a tk.jit function, else the default.
    memory_budget: the most bytes of residuals the forward may save for pullback (an int), or a
    fraction in (0, 1] of what it saves without a budget; the rest is recomputed in pullback."""
    memory_budget = remat.check_budget(memory_budget)
    if current_builder() is not None:
        return _vjp_in_trace(fun, args, has_aux, memory_budget)
    options = {}
    if backend is None and isinstance(fun, Staged):
        backend, options = fun.backend, fun.options
    backend = backend or backends.default_backend()
    staged, flat = stage_vjp(fun, args, has_aux, backend, options, memory_budget)
    results = staged.forward(list(flat.leaves) + [v._value for v in staged.variables])
    n_out = staged.value_treedef.num_leaves
    n_all = staged.split.num_outputs
    residuals = results[n_all:]
    watched = _inputs_kept(fun, flat, residuals)
    outs = [to_user(o) for o in results[:n_out]]
    aux = [to_user(o) for o in results[n_out:n_all]]
    active_idx = [j for j, a in enumerate(staged.active) if a]
    device = backends.on_device(backend)

    def run_backward(cts):
        _check_unmodified(watched, "tk.vjp's pullback", "tk.vjp")
        if current_builder() is not None:
            # called inside a trace (tk.grad / tk.jit of a function that calls it): the backward graph is
            # emitted there, reading the residuals as constants, so the pullback is differentiable
            grads = _inline(staged.split.backward, [host(r) for r in residuals] + list(cts))
            full = [None] * len(staged.active)
            for j, g in zip(active_idx, grads):
                full[j] = g
            return full
        arrays = [c if device and on_device(c) else host(c) for c in cts]
        grads = staged.backward(list(residuals) + arrays)
        full = [None] * len(staged.active)
        for j, g in zip(active_idx, grads):
            full[j] = to_user(g)
        return full

    pull = Pullback(fun, staged.value_treedef, [v.aval for v in staged.split.forward.outputs[:n_out]], run_backward,
                    _arg_groups(flat, staged.active))
    out = tree_unflatten(staged.value_treedef, outs)
    if has_aux:
        return out, pull, tree_unflatten(staged.aux_treedef, aux)
    return out, pull


def _inputs_kept(fun: Callable, flat: FlatArgs, residuals) -> list[tuple[str, np.ndarray, int]]:
    """The caller's input arrays that tk.vjp's residuals are (compiled forwards return an input the
    pullback reads as it is, not a copy), each with its name and a checksum of its bytes now."""
    owner = []
    for i, td in enumerate(flat.treedefs):
        owner += [i] * td.num_leaves
    kept = []
    for j, leaf in enumerate(flat.leaves):
        if isinstance(leaf, np.ndarray) and leaf.size and any(
                isinstance(r, np.ndarray) and np.may_share_memory(r, leaf) for r in residuals):
            kept.append((arg_name(fun, owner[j]), leaf, _checksum(leaf)))
    return kept


def _checksum(a: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(a).view(np.uint8).reshape(-1))


def _check_unmodified(kept: list[tuple[str, np.ndarray, int]], reader: str, transform: str) -> None:
    """A pullback (or linearize's linear function) reads the inputs its forward kept: one changed in
    place since would give a wrong derivative (PyTorch raises for a saved tensor modified in place)."""
    for name, leaf, crc in kept:
        if _checksum(leaf) != crc:
            raise TracekernError(with_location(
                f"{reader} reads {name} ({leaf.dtype}{list(leaf.shape)}) as the forward saw it, and it was "
                f"modified in place after {transform} returned: the derivative would be wrong. Pass a copy to "
                f"{transform} ({transform}(f, x.copy(), ...)), or call {transform} again after modifying it"))


def _vjp_in_trace(fun: Callable, args: tuple, has_aux: bool, memory_budget=None):
    """tk.vjp inside a trace: the forward is emitted now, the backward each time pullback is called."""
    flat = flatten_call(fun, args)
    active = differentiated(fun, flat, tuple(range(len(args))), check_float=False)
    graph, out_td, captured = trace_call(fun, flat)
    value_td, aux_td = split_aux(fun, out_td, has_aux)
    n_out = value_td.num_leaves
    builder = current_builder()
    joint = autodiff.vjp(graph, active + [False] * len(captured), seeded=[i < n_out for i in range(len(graph.outputs))])
    joint, _ = budgeted(fun, joint, memory_budget)
    jg = joint.graph
    primals = [_read(a) for a in list(flat.leaves) + list(captured)]
    env = builder.inline(jg, None, env=dict(zip(jg.inputs, primals)), eqns=jg.eqns[:joint.num_forward])
    outs = [env[v] for v in jg.outputs[:joint.num_outputs]]

    def run_backward(cts):
        here = current_builder()
        if not builder.active or here is None or not (here is builder or here._is_ancestor(builder)):
            raise TracerLeakError(with_location(
                f"the pullback of {fun_name(fun)} was called outside the trace that made it (after it ended, or in "
                "an unrelated one); call it inside the function that called tk.vjp, or return the values instead"))
        known = dict(env)
        known.update(zip(jg.inputs[len(primals):], cts))
        # (emitted where it is called: inside a nested trace, e.g. tk.grad of a function of the cotangent,
        # the forward's values are captured from the enclosing trace, so the pullback is differentiable)
        here.inline(jg, None, env=known, eqns=jg.eqns[joint.num_forward:])
        grads = iter(known[v] for v in jg.outputs[joint.num_outputs:])
        full = [next(grads) if has else None for has in joint.has_grad][:len(flat.leaves)]
        # a float input the output does not depend on gets zeros, as outside a trace (unconnected="zero")
        return [tnp.zeros_like(_read(x)) if g is None and act else g for g, x, act in zip(full, flat.leaves, active)]

    pull = Pullback(fun, value_td, [v.aval for v in graph.outputs[:n_out]], run_backward, _arg_groups(flat, active))
    out = tree_unflatten(value_td, outs[:n_out])
    if has_aux:
        return out, pull, tree_unflatten(aux_td, outs[n_out:])
    return out, pull


# ----------------------------------------------------------------------------- forward mode


def _positional(what: str, name: str, value) -> tuple:
    if not isinstance(value, (tuple, list)):
        raise TypeError(with_location(f"{what}: {name} must be a tuple (or list) of positional arguments, e.g. (x,) for "
                                      f"one argument; got {type(value).__name__}"))
    return tuple(value)


def _match_tree(td: TreeDef, t, where: str) -> list:
    """The leaves of tangent tree `t` laid out as the primal tree `td` (None stands for a subtree of
    zero tangents), or a ValueError naming where they differ."""
    if t is None:
        return [None] * td.num_leaves
    if td.kind == "leaf":
        return [t]
    kids = None
    if td.kind in ("tuple", "namedtuple") and isinstance(t, tuple) and len(t) == len(td.children):
        kids = [(f"[{i}]", c) for i, c in enumerate(t)]
    elif td.kind == "list" and isinstance(t, list) and len(t) == len(td.children):
        kids = [(f"[{i}]", c) for i, c in enumerate(t)]
    elif td.kind == "dict" and isinstance(t, dict) and tuple(sorted(t)) == td.meta:
        kids = [(f"[{k!r}]", t[k]) for k in td.meta]
    if kids is None:
        raise ValueError(with_location(f"{where}: the tangent has structure {tree_flatten(t)[1]!r}, its primal {td!r}; a "
                                       "tangent has its primal's pytree structure (None stands for zero tangents)"))
    return [leaf for (key, c), ctd in zip(kids, td.children) for leaf in _match_tree(ctd, c, where + key)]


def _tangent_leaves(fun: Callable, treedefs, avals, tangents: tuple, what: str) -> list:
    """One tangent per primal leaf (None: zero), checked against the primals' structure, shapes and
    dtypes. An integer or bool primal has no tangent: None or zeros stand for it (as None)."""
    if len(tangents) != len(treedefs):
        raise ValueError(with_location(f"{what} of {fun_name(fun)}: {len(tangents)} tangents for {len(treedefs)} primals; "
                                       "pass one tangent per positional argument, of the same structure"))
    out = []
    for i, (td, t) in enumerate(zip(treedefs, tangents)):
        leaves = _match_tree(td, t, f"{what} of {fun_name(fun)}: {arg_name(fun, i)}")
        paths = leaf_paths(td)
        for path, x in zip(paths, leaves):
            aval = avals[len(out)]
            where = f"{what} of {fun_name(fun)}: the tangent of {arg_name(fun, i)}{' at ' + path if path else ''}"
            out.append(_tangent_leaf(x, aval, where))
    return out


def _tangent_leaf(t, aval: Aval, where: str):
    if t is None:
        return None
    t = _read(t)
    if isinstance(t, Tracer):
        got = aval_of(t)
    elif on_device(t):
        t = device_view(t)
        got = Aval(tuple(t.shape), np.dtype(t.dtype))
    elif isinstance(t, (int, float, complex)) and not isinstance(t, bool) and aval.shape == () and is_inexact(aval.dtype):
        t = np.asarray(t, aval.dtype)
        got = aval
    else:
        t = np.asarray(t)
        got = Aval(t.shape, t.dtype)
    if not is_inexact(aval.dtype):
        if isinstance(t, Tracer) or got.shape != aval.shape or np.any(host(t) != 0):
            raise TypeError(with_location(
                f"{where}: its primal is {aval}, an integer or bool value, which has no tangent (integers are constants "
                f"of differentiation); pass None for it (zeros of its shape are accepted too and ignored), got {got}"))
        return None
    if got != aval:
        raise (ValueError if got.dtype == aval.dtype else TypeError)(with_location(
            f"{where} is {got}, the primal is {aval}: a tangent has its primal's shape and dtype"))
    return t


def _jvp_emit(fun: Callable, has_aux: bool) -> Callable:
    """tk.jvp inside the current trace: emit(primals, active tangents, active) -> (out, tangent_out[, aux])."""

    def emit(primals, tans, active):
        flat = flatten_call(fun, primals)
        graph, out_td, captured = trace_call(fun, flat)
        value_td, aux_td = split_aux(fun, out_td, has_aux)
        n_out = value_td.num_leaves
        joint = forward.jvp(graph, list(active) + [False] * len(captured))
        outs = _inline(joint.graph, list(flat.leaves) + list(captured) + list(tans))
        values, touts = outs[:joint.num_outputs], iter(outs[joint.num_outputs:])
        touts = [next(touts) if has else None for has in joint.has_tangent]
        # an output no tangent reaches (an integer one among them) has zeros of its own dtype
        tangent = [tnp.zeros_like(v) if t is None else t for t, v in zip(touts[:n_out], values[:n_out])]
        out = (tree_unflatten(value_td, values[:n_out]), tree_unflatten(value_td, tangent))
        return out + (tree_unflatten(aux_td, values[n_out:]),) if has_aux else out

    return emit


_JVP_STAGED: weakref.WeakKeyDictionary[Callable, dict] = weakref.WeakKeyDictionary()


def jvp(fun: Callable, primals, tangents, *, has_aux: bool = False, backend: str | None = None):
    """(out, tangent_out) = tk.jvp(f, primals, tangents): f(*primals) and its directional derivative
    along `tangents`, in one compiled pass (forward mode). primals and tangents are tuples of
    positional arguments; each tangent has its primal's structure, shapes and dtypes, or is None
    (zero). Integer and bool primals have no tangent: pass None (or zeros). tangent_out has out's
    structure; an output no tangent reaches (an integer one) gets zeros of its own dtype.
    has_aux=True: f returns (out, aux) and tk.jvp (out, tangent_out, aux). backend: as for tk.vjp."""
    primals = _positional("tk.jvp", "primals", primals)
    tangents = _positional("tk.jvp", "tangents", tangents)
    flat = flatten_call(fun, primals)
    tans = _tangent_leaves(fun, flat.treedefs, flat.avals, tangents, "tk.jvp")
    active = tuple(t is not None for t in tans)
    present = tuple(t for t in tans if t is not None)
    if current_builder() is not None:
        return _jvp_emit(fun, has_aux)(primals, present, active)
    options = {}
    if backend is None and isinstance(fun, Staged):
        backend, options = fun.backend, fun.options
    key = (has_aux, backend, tuple(sorted(options.items())))
    try:
        per_fun = _JVP_STAGED.setdefault(fun, {})
    except TypeError:   # not weak-referenceable: no caching
        per_fun = {}
    staged = per_fun.get(key)
    if staged is None:
        staged = per_fun[key] = Staged(fun, _jvp_emit(fun, has_aux), backend=backend, static_argnums=(2,),
                                       options=options)
    return staged(primals, present, active)


@dataclass(frozen=True)
class _StagedLinearize:
    """tk.linearize of a function for one signature: the split graphs and their compiled halves."""

    split: forward.SplitJVP
    value_treedef: TreeDef
    aux_treedef: TreeDef | None
    primal: Callable                     # compiled split.primal: outputs, then residuals
    linear: Callable                     # compiled split.linear: residuals and tangents -> output tangents
    variables: tuple
    variable_avals: tuple

    def variables_match(self) -> bool:
        return all(v.aval == a for v, a in zip(self.variables, self.variable_avals))


_LINEARIZE_CACHE: weakref.WeakKeyDictionary[Callable, dict] = weakref.WeakKeyDictionary()


class LinearizedJVP:
    """The tangent half of tk.linearize: f_jvp(*tangents) is the JVP of f at the point it was
    linearized at, from the residuals saved then (the primal computation does not run again).
    Tangents as for tk.jvp: one per positional argument, None for zeros."""

    def __init__(self, fun, treedefs, avals, out_treedef, run_linear):
        self._fun = fun
        self._treedefs = treedefs
        self._avals = avals
        self._out_treedef = out_treedef
        self._run_linear = run_linear

    def __call__(self, *tangents):
        tans = _tangent_leaves(self._fun, self._treedefs, self._avals, tangents, "f_jvp of tk.linearize")
        leaves = [np.zeros(a.shape, a.dtype) if t is None else t for t, a in zip(tans, self._avals) if is_inexact(a.dtype)]
        return tree_unflatten(self._out_treedef, self._run_linear(leaves)[:self._out_treedef.num_leaves])


def linearize(fun: Callable, *primals, has_aux: bool = False, backend: str | None = None):
    """(out, f_jvp) = tk.linearize(f, *primals): f(*primals), and f_jvp(*tangents), its JVP at that
    point. The primal computation runs once, now, and saves what the JVP needs (residuals);
    f_jvp runs only the tangent computation on them. With has_aux=True, (out, f_jvp, aux).
    backend: where both halves run; default: fun's if it is a tk.jit function, else the default."""
    if current_builder() is not None:
        return _linearize_in_trace(fun, primals, has_aux)
    options = {}
    if backend is None and isinstance(fun, Staged):
        backend, options = fun.backend, fun.options
    backend = backend or backends.default_backend()
    flat = flatten_call(fun, primals, device=backends.on_device(backend))
    key = (flat.treedefs, flat.avals, flat.weak, has_aux, backend, tuple(sorted(options.items())))
    try:
        per_fun = _LINEARIZE_CACHE.setdefault(fun, {})
    except TypeError:
        per_fun = {}
    staged = per_fun.get(key)
    if staged is None or not staged.variables_match():
        graph, out_td, captured = trace_call(fun, flat)
        variables = tuple(captured)
        value_td, aux_td = split_aux(fun, out_td, has_aux)
        active = [is_inexact(a.dtype) for a in flat.avals] + [False] * len(variables)
        split = forward.split_linear(forward.jvp(graph, active, zeros=True))
        compiler = backends.get_compiler(backend, **options)
        staged = per_fun[key] = _StagedLinearize(split, value_td, aux_td, compiler(split.primal), compiler(split.linear),
                                                 variables, tuple(v.aval for v in variables))
    results = staged.primal(list(flat.leaves) + [v._value for v in staged.variables])
    n_out, n_all = staged.value_treedef.num_leaves, staged.split.num_outputs
    residuals = list(results[n_all:])
    watched = _inputs_kept(fun, flat, residuals)
    device = backends.on_device(backend)

    def run_linear(tangents):
        _check_unmodified(watched, "tk.linearize's linear function", "tk.linearize")
        if current_builder() is not None:
            # called inside a trace (tk.vmap / tk.jit / tk.grad of a function that calls it): the linear
            # graph is emitted there, reading the residuals as constants, as tk.vjp's pullback does
            return _inline(staged.split.linear, [host(r) for r in residuals] + list(tangents))
        arrays = [t if device and on_device(t) else host(t) for t in tangents]
        return [to_user(t) for t in staged.linear(residuals + arrays)]

    f_jvp = LinearizedJVP(fun, flat.treedefs, flat.avals, staged.value_treedef, run_linear)
    out = tree_unflatten(staged.value_treedef, [to_user(o) for o in results[:n_out]])
    if has_aux:
        return out, f_jvp, tree_unflatten(staged.aux_treedef, [to_user(o) for o in results[n_out:n_all]])
    return out, f_jvp


def _linearize_in_trace(fun: Callable, primals: tuple, has_aux: bool):
    """tk.linearize inside a trace: the primal graph is emitted now, the linear graph each time
    f_jvp is called."""
    flat = flatten_call(fun, primals)
    graph, out_td, captured = trace_call(fun, flat)
    value_td, aux_td = split_aux(fun, out_td, has_aux)
    n_out = value_td.num_leaves
    active = [is_inexact(a.dtype) for a in flat.avals] + [False] * len(captured)
    split = forward.split_linear(forward.jvp(graph, active, zeros=True))
    builder = current_builder()
    results = _inline(split.primal, list(flat.leaves) + list(captured))
    outs, residuals = results[:split.num_outputs], results[split.num_outputs:]

    def run_linear(tangents):
        if not builder.active:
            raise TracerLeakError(f"the f_jvp of tk.linearize({fun_name(fun)}) was called after the trace that made it ended")
        return _inline(split.linear, list(residuals) + list(tangents))

    f_jvp = LinearizedJVP(fun, flat.treedefs, flat.avals, value_td, run_linear)
    out = tree_unflatten(value_td, outs[:n_out])
    if has_aux:
        return out, f_jvp, tree_unflatten(aux_td, outs[n_out:])
    return out, f_jvp


# ----------------------------------------------------------------------------- introspection


def make_ir(fun: Callable, *, mode: str = "forward", argnums: int | Sequence[int] = 0,
            static_argnums: Sequence[int] | int = (), has_aux: bool = False,
            memory_budget: int | float | None = None, in_axes: Any = 0, out_axes: Any = 0):
    """make_ir(f, mode=...)(*args) returns the IR that tracekern runs for these arguments.

    mode="forward": the Graph of f. "grad" / "value_and_grad": the joint Graph of that transform.
    "vjp": a SplitVJP with .forward (outputs + residuals) and .backward (residuals marked saved).
    "jvp": the joint Graph of forward mode (tangents of every float argument), its tangent inputs
    and the equations that compute tangents marked (tangent). "linearize": a SplitJVP with .primal
    (outputs + residuals) and .linear (residuals marked saved, tangents marked tangent).
    "vmap": the Graph of tk.vmap(f, in_axes, out_axes), each input noted with its batch axis.
    memory_budget: as for the transforms (the vjp split is then the planner's)."""
    modes = ("forward", "grad", "value_and_grad", "vjp", "jvp", "linearize", "vmap")
    if mode not in modes:
        raise ValueError(f"make_ir: mode must be one of {modes}, got {mode!r}")
    memory_budget = remat.check_budget(memory_budget)

    def build(*args) -> Any:
        if mode == "vmap":
            if static_argnums not in ((), None):
                raise ValueError("make_ir(mode='vmap') takes no static_argnums; tk.jit(tk.vmap(f, in_axes=...), "
                                 "static_argnums=...).lower(*args).ir is that graph")
            return make_vmap_ir(fun, in_axes, out_axes, args)
        if mode == "vjp":
            return stage_vjp(fun, args, has_aux, memory_budget=memory_budget)[0].split
        if mode in ("jvp", "linearize"):
            sig = Staged(fun, fun, static_argnums=static_argnums)._signature(args)
            graph = sig.make_graph()[0]
            n = len(sig.arrays)
            joint = forward.jvp(graph, [is_inexact(v.dtype) for v in graph.inputs[:n]] + [False] * (len(graph.inputs) - n))
            return forward.mark_tangents(joint, passes.simplify(joint.graph)) if mode == "jvp" else forward.split_linear(joint)
        if mode == "forward":
            staged = Staged(fun, fun, static_argnums=static_argnums)
        else:
            emit = _grad_emit(fun, argnums, has_aux, "zero", with_value=(mode == "value_and_grad"),
                              memory_budget=memory_budget)
            staged = Staged(fun, emit, static_argnums=static_argnums)
        return staged._signature(args).make_graph()[0]

    return build


def stop_gradient(x):
    """Identity in the forward pass; no gradient flows through x, an array or a pytree of them
    (tuples, lists, dicts), as jax.lax.stop_gradient takes."""
    return tree_map(tnp.stop_gradient, x)
