"""Graph-to-graph passes run on every graph: constant folding of scalar constants, common-subexpression
elimination and dead-code elimination (simplify = all three). Each returns a new Graph."""
from __future__ import annotations

from typing import Any

import numpy as np

from .ir import Aval, Eqn, Graph, Var
from .primitives import elementwise as el
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


def _rewrite(graph: Graph, rewrite) -> Graph:
    """The graph with each equation e replaced by rewrite(e, made, emit) where that is not None: `made` maps each
    variable made so far to its equation, and emit(prim, inputs, aval, params, source) appends an equation before
    the replacement and returns its output. The graph itself where nothing was replaced."""
    made: dict[Var, Eqn] = {}
    eqns: list[Eqn] = []
    changed = False

    def emit(prim, inputs, aval, params=None, source=None) -> Var:
        out = Var(aval)
        eqns.append(Eqn(prim, tuple(inputs), (out,), params or {}, source))
        made[out] = eqns[-1]
        return out

    for e in graph.eqns:
        new = rewrite(e, made, emit)
        if new is not None:
            e, changed = new, True
        for v in e.outputs:
            made[v] = e
        eqns.append(e)
    if not changed:
        return graph
    return Graph(graph.inputs, tuple(eqns), graph.outputs, graph.input_notes)


def even_powers_of_abs(graph: Graph) -> Graph:
    """|x| * |x| and |x| ** k for a constant even integer k, of a real x, as x * x and x ** k: the same
    bits (a product's sign, pow of an even power), and the same first derivative, but a second
    derivative that is right at x = 0, where |x|'s derivative is 0 by convention (np.abs(x) ** 2's
    Hessian at 0 was 0; it is 2)."""
    def rewrite(e: Eqn, made: dict[Var, Eqn], emit) -> Eqn | None:
        name = e.primitive.name
        if name not in ("mul", "pow") or len(e.inputs) != 2:
            return None
        base = made.get(e.inputs[0])
        if base is None or base.primitive.name != "abs" or base.inputs[0].dtype != e.outputs[0].dtype \
                or base.inputs[0].dtype.kind not in "fiu":
            return None
        x = base.inputs[0]
        other = made.get(e.inputs[1])
        if name == "mul" and (e.inputs[1] is e.inputs[0] or (
                other is not None and other.primitive.name == "abs" and other.inputs[0] is x)):
            return Eqn(e.primitive, (x, x), e.outputs, e.params, e.source)
        if name == "pow" and _even_integer(other) and x.shape == e.inputs[0].shape:
            return Eqn(e.primitive, (x, e.inputs[1]), e.outputs, e.params, e.source)
        return None
    return _rewrite(graph, rewrite)


def even_powers_at_apexes(graph: Graph) -> Graph:
    """r * r and r ** k (a constant even integer k) of an r that is 0 at a cone's apex, where its gradient is 0 by
    convention: the 2-norm and std (`where(s == 0, 0, sqrt(where(s == 0, 1, s)))`, reductions._sqrt_or_zero) and
    hypot(a, b) (complex abs). r ** 2 is smooth there (it is s, or a*a + b*b), but the product rule through r's
    convention gave it the second derivative 0 (np.linalg.norm(x) ** 2 at x = 0: its Hessian is 2I, JAX's NaN).
    Each such power becomes `where(at the apex, s ** (k / 2), r ** k)`: the same bits (both are 0 at the apex,
    r ** k elsewhere) and, at the apex, the smooth form's derivatives."""
    def rewrite(e: Eqn, made: dict[Var, Eqn], emit) -> Eqn | None:
        apex = _apex_power(e, made)
        if apex is None:
            return None
        kind, args, k = apex
        out = e.outputs[0]
        scalar = Aval((), out.dtype)
        if kind == "sqrt":   # r = sqrt_or_zero(s), at_apex = (s == 0)
            at_apex, s = args
        else:   # r = hypot(a, b), of r's shape (the smooth form a*a + b*b broadcasts as hypot did)
            a, b = args
            zero = emit(const, (), scalar, {"value": np.zeros((), out.dtype)}, e.source)
            at_apex = emit(el.eq, (e.inputs[0], zero), Aval(out.shape, np.dtype(np.bool_)), source=e.source)
            s = emit(el.add, (emit(el.mul, (a, a), a.aval, source=e.source),
                              emit(el.mul, (b, b), b.aval, source=e.source)), out.aval, source=e.source)
        if k != 2:
            half = emit(const, (), scalar, {"value": np.asarray(k // 2, out.dtype)}, e.source)
            s = emit(el.power, (s, half), out.aval, source=e.source)
        kept = emit(e.primitive, e.inputs, out.aval, e.params, e.source)
        return Eqn(el.select, (at_apex, s, kept), e.outputs, {}, e.source)
    return _rewrite(graph, rewrite)


def _apex_power(e: Eqn, made: dict[Var, Eqn]):
    """("sqrt", (at_apex, s), k) or ("hypot", (a, b), k) when e is r * r (k = 2) or r ** k, k a constant even
    integer, of a float r made by _sqrt_or_zero or hypot, of the power's own shape."""
    if e.primitive.name not in ("mul", "pow") or len(e.inputs) != 2:
        return None
    r, out = e.inputs[0], e.outputs[0]
    if out.dtype.kind != "f" or r.shape != out.shape or r.dtype != out.dtype:
        return None
    if e.primitive.name == "mul":
        if e.inputs[1] is not r:
            return None
        k = 2
    else:
        c = made.get(e.inputs[1])
        if not _even_integer(c):
            return None
        k = int(np.asarray(c.params["value"]).flat[0])
        if k <= 0:
            return None
    base = made.get(r)
    if base is None:
        return None
    if base.primitive.name == "hypot":
        a, b = base.inputs
        return ("hypot", (a, b), k) if a.shape == b.shape == r.shape else None
    if base.primitive.name != "select":   # where(at_apex, 0, sqrt(where(at_apex, 1, s))), at_apex = (s == 0)
        return None
    at_apex, zero, root = base.inputs
    sq = made.get(root)
    if not (_is_value(made.get(zero), 0) and sq is not None and sq.primitive.name == "sqrt"):
        return None
    inner = made.get(sq.inputs[0])
    if inner is None or inner.primitive.name != "select" or inner.inputs[0] is not at_apex \
            or not _is_value(made.get(inner.inputs[1]), 1):
        return None
    s = inner.inputs[2]
    test = made.get(at_apex)
    if test is None or test.primitive.name != "eq" or test.inputs[0] is not s \
            or not _is_value(made.get(test.inputs[1]), 0) or s.shape != r.shape or s.dtype != r.dtype:
        return None
    return "sqrt", (at_apex, s), k


def _is_value(e: Eqn | None, value: float) -> bool:
    """Whether an equation is a constant whose every value is `value`."""
    if e is None or e.primitive is not const:
        return False
    v = np.asarray(e.params["value"])
    return v.size > 0 and bool(np.all(v == value))


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
    graph = cse(even_powers_of_abs(fold_constants(graph)))
    squared = even_powers_at_apexes(graph)   # (after cse: norm(x) * norm(x) is one norm times itself)
    return dce(graph if squared is graph else cse(squared))


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
