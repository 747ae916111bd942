"""Graph-to-graph passes run on every graph: constant folding of scalar constants, common-subexpression
elimination and dead-code elimination (simplify = all three). Each returns a new Graph."""
from __future__ import annotations

from typing import Any

import numpy as np

from .ir import Eqn, Graph, Var
from .primitives.annotations import Call
from .primitives.shape import const


def dce(graph: Graph) -> Graph:
    """Drop equations whose outputs are never used (effectful equations stay)."""
    live: set[Var] = set(graph.outputs)
    kept: list[Eqn] = []
    changed = False
    for e in reversed(graph.eqns):
        if e.primitive.has_effects(**e.params) or any(v in live for v in e.outputs):
            pruned = e.primitive.prune(e, live)
            changed |= pruned is not e
            kept.append(pruned)
            live.update(pruned.inputs)
    if len(kept) == len(graph.eqns) and not changed:
        return graph
    return Graph(graph.inputs, tuple(reversed(kept)), graph.outputs, graph.input_notes)


def _param_key(p: Any) -> Any:
    if isinstance(p, np.ndarray):
        return ("array", p.dtype.str, p.shape, p.tobytes())
    if isinstance(p, np.dtype):
        return ("dtype", p.str)
    if isinstance(p, (list, tuple)):
        return tuple(_param_key(x) for x in p)
    if isinstance(p, dict):
        return tuple(sorted((k, _param_key(v)) for k, v in p.items()))
    if isinstance(p, Graph):
        return ("graph", id(p))
    if isinstance(p, (float, np.floating)):  # by repr: -0.0 must not merge with 0.0, nan keys like nan
        return (type(p).__name__, repr(p))
    return (type(p).__name__, p)


def cse(graph: Graph) -> Graph:
    """Merge equations that apply the same primitive with the same params to the same inputs."""
    rename: dict[Var, Var] = {}
    seen: dict[Any, tuple[Var, ...]] = {}
    eqns: list[Eqn] = []
    changed = False
    for e in graph.eqns:
        inputs = tuple(rename.get(v, v) for v in e.inputs)
        if inputs != e.inputs:
            e = Eqn(e.primitive, inputs, e.outputs, e.params, e.source)
            changed = True
        if not e.primitive.has_effects(**e.params):
            try:
                key = (e.primitive.name, tuple(v.id for v in inputs), _param_key(e.params))
                hash(key)
            except TypeError:
                key = None
            if key is not None:
                if key in seen:
                    rename.update(zip(e.outputs, seen[key]))
                    changed = True
                    continue
                seen[key] = e.outputs
        eqns.append(e)
    if not changed:
        return graph
    outputs = tuple(rename.get(v, v) for v in graph.outputs)
    return Graph(graph.inputs, tuple(eqns), outputs, graph.input_notes)


def fold_constants(graph: Graph) -> Graph:
    """Evaluate elementwise equations on scalar constants now (e.g. the `y - 1` of pow's gradient
    when y is a literal), so kernels see literals."""
    values: dict[Var, np.ndarray] = {}
    eqns: list[Eqn] = []
    changed = False
    for e in graph.eqns:
        kind = e.primitive.fusion
        if kind == "const" and not e.outputs[0].shape:
            values[e.outputs[0]] = np.asarray(e.params["value"])
        elif kind == "elementwise" and e.inputs and all(v in values for v in e.inputs) and not e.outputs[0].shape:
            with np.errstate(all="ignore"):
                out = np.asarray(e.primitive.impl(*[values[v] for v in e.inputs], **e.params)).astype(e.outputs[0].dtype)
            values[e.outputs[0]] = out
            e = Eqn(const, (), e.outputs, {"value": out}, e.source)
            changed = True
        eqns.append(e)
    if not changed:
        return graph
    return Graph(graph.inputs, tuple(eqns), graph.outputs, graph.input_notes)


def even_powers_of_abs(graph: Graph) -> Graph:
    """|x| * |x| and |x| ** k for a constant even integer k, of a real x, as x * x and x ** k: the same
    bits (a product's sign, pow of an even power), and the same first derivative, but a second
    derivative that is right at x = 0, where |x|'s derivative is 0 by convention (np.abs(x) ** 2's
    Hessian at 0 was 0; it is 2)."""
    made: dict[Var, Eqn] = {}
    eqns: list[Eqn] = []
    changed = False
    for e in graph.eqns:
        name = e.primitive.name
        if name in ("mul", "pow") and len(e.inputs) == 2:
            base = made.get(e.inputs[0])
            if base is not None and base.primitive.name == "abs" and base.inputs[0].dtype == e.outputs[0].dtype \
                    and base.inputs[0].dtype.kind in "fiu":
                x = base.inputs[0]
                other = made.get(e.inputs[1])
                if name == "mul" and (e.inputs[1] is e.inputs[0] or (
                        other is not None and other.primitive.name == "abs" and other.inputs[0] is x)):
                    e, changed = Eqn(e.primitive, (x, x), e.outputs, e.params, e.source), True
                elif name == "pow" and _even_integer(made.get(e.inputs[1])) and x.shape == e.inputs[0].shape:
                    e, changed = Eqn(e.primitive, (x, e.inputs[1]), e.outputs, e.params, e.source), True
        for v in e.outputs:
            made[v] = e
        eqns.append(e)
    if not changed:
        return graph
    return Graph(graph.inputs, tuple(eqns), graph.outputs, graph.input_notes)


def _even_integer(e: Eqn | None) -> bool:
    """Whether an equation is a constant whose every value is the same even integer."""
    if e is None or e.primitive is not const:
        return False
    value = np.asarray(e.params["value"])
    if value.size == 0 or value.dtype.kind not in "fiu":
        return False
    first = value.flat[0]
    return bool(np.all(value == first)) and np.isfinite(first) and float(first) % 2 == 0


def simplify(graph: Graph) -> Graph:
    return dce(cse(even_powers_of_abs(fold_constants(graph))))


def inline_calls(graph: Graph) -> Graph:
    """Replace each higher-order equation (one with a `body` graph: custom_gradient, recompute,
    reversible) by its body's equations, recursively, with fresh Vars: what backends run."""
    if not any(_is_call(e) for e in graph.eqns):
        return graph
    return simplify(inline_calls_renamed(graph)[0])


def inline_calls_renamed(graph: Graph) -> tuple[Graph, dict[Var, Var]]:
    """inline_calls without simplifying, and the Var that stands for each output of an inlined
    equation (the memory planner asks which of its values the backend makes as arrays)."""
    eqns: list[Eqn] = []
    rename: dict[Var, Var] = {}
    _inline_into(graph.eqns, rename, eqns)
    outputs = tuple(rename.get(v, v) for v in graph.outputs)
    return Graph(graph.inputs, tuple(eqns), outputs, graph.input_notes), rename


def _is_call(e: Eqn) -> bool:
    return isinstance(e.primitive, Call)


def _inline_into(body_eqns, rename: dict[Var, Var], out: list[Eqn]) -> None:
    for e in body_eqns:
        inputs = tuple(rename.get(v, v) for v in e.inputs)
        body = e.params["body"] if _is_call(e) else None
        if body is None:
            outputs = tuple(rename.get(v, v) for v in e.outputs)
            out.append(e if (inputs, outputs) == (e.inputs, e.outputs) else Eqn(e.primitive, inputs, outputs, e.params, e.source))
            continue
        inner = dict(zip(body.inputs, inputs))
        for b in body.eqns:
            for v in b.outputs:
                inner[v] = Var(v.aval)
        _inline_into(body.eqns, inner, out)
        for v, b in zip(e.outputs, body.outputs):
            rename[v] = inner.get(b, b)
