"""Gradient annotations (SPEC sections 4 and 6): custom_gradient, recompute, grad_pass_through,
reversible, and the runtime print. Each traces the user's functions into sub-graphs and binds one
higher-order primitive (primitives/annotations.py), whose VJP rule carries the annotation."""
from __future__ import annotations

import builtins
import functools
import inspect
from collections.abc import Callable

import numpy as np

from . import numpy as tnp
from . import remat
from .errors import with_location
from .ir import Aval, Graph, is_inexact
from .primitives import annotations as A
from .primitives.shape import full
from .pytree import Static, call_static, tree_flatten, tree_unflatten
from .trace import Tracer, Variable, _read, aval_of, bind, current_builder, flatten_args, inline_graph, trace_to_graph


def _name(f) -> str:
    return getattr(f, "__qualname__", getattr(f, "__name__", repr(f)))


# ----------------------------------------------------------------------------- custom_gradient


def _accepts_variables(fn: Callable) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "variables" or p.kind is p.VAR_KEYWORD for p in params)


def custom_gradient(f: Callable | None = None):
    """`f(*x)` returns `(y, grad_fn)`; the gradient of the decorated function is `grad_fn`'s.

    grad_fn(*dys) returns one cotangent per input of f (a single value for one input). If f reads
    tk.Variables, grad_fn must accept `variables=` (those Variables) and return (grad_xs, grad_vars).
    Both f and grad_fn are traced; grad_fn's ops are ordinary IR, so grad of grad goes through them."""
    if f is None:
        return custom_gradient

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        if current_builder() is None:   # nothing is being traced or differentiated
            y, _ = _split_result(f, call_static(f, args, kwargs))
            return y
        return _custom_gradient_traced(f, args, kwargs)

    wrapper.takes_static = True   # (tk.jit's static arguments reach f untraced)
    return wrapper


def _split_result(f, out):
    if not (isinstance(out, tuple) and len(out) == 2 and callable(out[1])):
        raise TypeError(with_location(f"{_name(f)} is a tk.custom_gradient function, so it must return a pair "
                                      f"(y, grad_fn); it returned {type(out).__name__}"))
    return out


def _custom_gradient_traced(f, args, kwargs=None):
    """Keyword arguments reach f as they are (as TensorFlow's eager custom_gradient passes them): they
    are not inputs of grad_fn's cotangents, so a traced one being differentiated is an error (autodiff)."""
    flat = flatten_args(args)
    statics = (len(args), tuple(i for i, a in enumerate(args) if type(a) is Static))
    leaves = list(flat.leaves)
    state = {}

    def fwd(*xs):
        y, grad_fn = _split_result(f, call_static(f, tuple(flat.unflatten(xs)), kwargs))
        y_leaves, y_td = tree_flatten(y)
        builder = current_builder()
        variables = [c for c, _ in builder.captured.values() if isinstance(c, Variable)]
        if variables and not _accepts_variables(grad_fn):
            names = ", ".join(v.name or "unnamed" for v in variables)
            raise TypeError(with_location(
                f"{_name(f)} reads tk.Variables ({names}), so its grad_fn must accept the keyword argument "
                "`variables` and return (grad_xs, grad_vars) with one gradient per Variable"))
        y_avals = [aval_of(v) for v in y_leaves]
        G, _, g_captured = trace_to_graph(
            lambda *dys: _run_grad_fn(f, grad_fn, dys, xs, variables, statics), y_avals)
        state.update(y_td=y_td, num_y=len(y_leaves), G=G, variables=variables)
        return list(y_leaves) + list(g_captured)

    F, _, f_captured = trace_to_graph(fwd, flat.avals, flat.weak)
    variables = state["variables"]
    var_positions = tuple(len(leaves) + next(i for i, c in enumerate(f_captured) if c is v) for v in variables)
    outs = bind(A.custom_vjp_call, *leaves, *f_captured, body=F, bwd=state["G"], num_y=state["num_y"],
                num_x=len(leaves), var_positions=var_positions, fun_name=_name(f))
    return tree_unflatten(state["y_td"], list(outs[:state["num_y"]]))


def _run_grad_fn(f, grad_fn, dys, xs, variables, statics=(0, ())) -> list:
    """grad_fn's cotangents as one value per input leaf of f (`statics`: f's number of positional
    arguments and those that are static, whose cotangents, one per argument, are dropped)."""
    if variables:
        res = grad_fn(*dys, variables=list(variables))
        if not (isinstance(res, (tuple, list)) and len(res) == 2):
            raise TypeError(with_location(f"the grad_fn of {_name(f)} gets variables=, so it must return "
                                          "(grad_xs, grad_vars)"))
        grad_xs, grad_vars = res
        grad_vars = list(grad_vars)
        if len(grad_vars) != len(variables):
            raise ValueError(with_location(f"the grad_fn of {_name(f)} returned {len(grad_vars)} Variable "
                                           f"gradients; expected {len(variables)}, one per Variable it reads"))
    else:
        grad_xs, grad_vars = grad_fn(*dys), []
    n_args, static = statics
    if static and isinstance(grad_xs, (tuple, list)) and len(grad_xs) == n_args:   # (None for each static argument)
        grad_xs = [g for i, g in enumerate(grad_xs) if i not in static]
        grad_xs = grad_xs[0] if len(grad_xs) == 1 and len(xs) == 1 else grad_xs
    flat = [grad_xs] if len(xs) == 1 and not isinstance(grad_xs, (tuple, list)) else _leaves_and_nones(grad_xs)
    if len(flat) != len(xs):
        raise ValueError(with_location(f"the grad_fn of {_name(f)} returned {len(flat)} cotangents; expected "
                                       f"{len(xs)}, one per input of {_name(f)}"))
    targets = [aval_of(x) for x in xs] + [v.aval for v in variables]
    out = []
    for k, (g, want) in enumerate(zip(flat + grad_vars, targets)):
        if g is None or not is_inexact(want.dtype):
            out.append(bind(full, shape=tuple(want.shape), dtype=want.dtype, value=want.dtype.type(0).item()))
            continue
        g = _read(g)
        got = aval_of(g)
        what = f"cotangent {k}" if k < len(xs) else f"the gradient of Variable {variables[k - len(xs)].name or ''}"
        if got.shape != want.shape:
            raise ValueError(with_location(f"the grad_fn of {_name(f)} returned {what} of shape {got.shape}; the "
                                           f"value it is for has shape {want.shape}"))
        out.append(tnp.astype(g, want.dtype) if got.dtype != want.dtype else g)
    return out


def _leaves_and_nones(tree) -> list:
    """Leaves in pytree order, with None kept as a leaf (a zero cotangent)."""
    if tree is None:
        return [None]
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _leaves_and_nones(t)]
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _leaves_and_nones(tree[k])]
    return [tree]


# ----------------------------------------------------------------------------- recompute

def recompute(f: Callable | None = None, *, policy="nothing"):
    """Values are f's; the backward pass recomputes f's forward from its inputs instead of keeping
    its intermediates. policy: "nothing" (save nothing inside), "dots" (matmul outputs may be saved),
    or a callable(eqn) -> bool choosing the equations whose outputs may be saved (remat.POLICIES)."""
    if f is None:
        return lambda fn: recompute(fn, policy=policy)
    saveable = remat.policy_function(policy)

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        if current_builder() is None:
            return call_static(f, args, kwargs)
        flat = flatten_args(args)
        R, out_td, captured = trace_to_graph(lambda *xs: call_static(f, tuple(flat.unflatten(xs)), kwargs), flat.avals,
                                             flat.weak)
        body = Graph(R.inputs, R.eqns, R.outputs + remat.saved_by_policy(R, saveable))
        outs = bind(A.recompute_call, *flat.leaves, *captured, body=body, num_y=len(R.outputs))
        return tree_unflatten(out_td, list(outs[:len(R.outputs)]))

    wrapper.takes_static = True   # (tk.jit's static arguments reach f untraced)
    return wrapper


recompute_grad = checkpoint = recompute


# ----------------------------------------------------------------------------- grad_pass_through


def grad_pass_through(f: Callable):
    """Forward is f; backward is the identity: each output leaf's cotangent goes to the input leaf in
    the same position (pytrees flattened, as TensorFlow flattens them), which must have its shape,
    e.g. straight-through rounding. Keyword arguments reach f and get no gradient."""

    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        static = [type(a) is Static for a in args]   # (tk.jit's static arguments get no cotangent)
        name = f"tk.grad_pass_through({_name(f)})"

        def through(*xs):
            y = call_static(f, xs, kwargs)
            defs = [None if s else tree_flatten(x)[1] for x, s in zip(xs, static)]
            inputs = [aval_of(_read(v)) for x, s in zip(xs, static) if not s for v in tree_flatten(x)[0]]

            def identity(*dys, variables=None):
                if len(dys) != len(inputs):
                    raise ValueError(with_location(
                        f"{name}: {len(dys)} output arrays for {len(inputs)} input arrays; the identity backward "
                        "needs one output per input, in the same order and of the same shape"))
                for k, (dy, want) in enumerate(zip(dys, inputs)):
                    if aval_of(dy).shape != want.shape:
                        raise ValueError(with_location(
                            f"{name}: output {k} has shape {aval_of(dy).shape} but input {k} has shape {want.shape}; "
                            "the identity backward passes each output's cotangent to the input of the same shape"))
                it = iter(dys)
                grads = [None if td is None else tree_unflatten(td, [next(it) for _ in range(td.num_leaves)])
                         for td in defs]
                grads = grads[0] if len(grads) == 1 else grads
                return (grads, [None] * len(variables)) if variables else grads

            return y, identity

        through.__qualname__ = name
        return custom_gradient(through)(*args)

    wrapper.takes_static = True   # (tk.jit's static arguments reach f untraced)
    return wrapper


# ----------------------------------------------------------------------------- reversible


def reversible(f: Callable, g: Callable):
    """A reversible residual block: block(x1, x2) returns (y1, y2) = (x1 + f(x2), x2 + g(y1)). Its
    backward reconstructs x1 and x2 from y1 and y2, so a stack of blocks saves no activations but
    the last outputs (the reconstruction is exact up to rounding)."""

    def block(x1, x2):
        if current_builder() is None:
            y1 = x1 + f(x2)
            return y1, x2 + g(y1)
        x1, x2 = _read(x1), _read(x2)
        a1, a2 = aval_of(x1), aval_of(x2)
        F, _, cf = trace_to_graph(lambda v: _same(f, v, a1, "x1"), [a2])
        G, _, cg = trace_to_graph(lambda v: _same(g, v, a2, "x2"), [a1])

        def fwd(v1, v2, *caps):
            y1 = v1 + inline_graph(F, [v2] + list(caps[:len(cf)]))[0]
            return y1, v2 + inline_graph(G, [y1] + list(caps[len(cf):]))[0]

        body, _, _ = trace_to_graph(fwd, [a1, a2] + [aval_of(c) for c in cf + cg])
        y1, y2 = bind(A.reversible_call, x1, x2, *cf, *cg, body=body, f=F, g=G, num_f=len(cf))
        return y1, y2

    block.__name__ = f"reversible({_name(f)}, {_name(g)})"
    return block


def _same(fn, v, want: Aval, other: str):
    out = _read(fn(v))
    got = aval_of(out)
    if got != want:
        raise TypeError(with_location(f"tk.reversible: {_name(fn)} returned {got}; it must return the shape and "
                                      f"dtype of {other} ({want}), since its result is added to {other}"))
    return out


# ----------------------------------------------------------------------------- print


def print_(*values, sep: str = " ") -> None:
    """Print when the compiled code runs (not when it is traced): once per execution, in program
    order, and again each time a recomputation runs the code that contains it."""
    if current_builder() is None:
        builtins.print(*[np.asarray(v._value) if isinstance(v, Variable) else v for v in values], sep=sep, flush=True)
        return
    parts, operands = [], []
    for v in values:
        v = _read(v)
        if isinstance(v, Tracer):
            parts.append(("value", len(operands)))
            operands.append(v)
        else:
            parts.append(("text", str(v)))
    bind(A.print_, *operands, parts=tuple(parts), sep=str(sep))
