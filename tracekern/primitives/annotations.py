"""Higher-order primitives behind the gradient annotations (custom_gradient, recompute, reversible),
the barrier that keeps a recomputation from merging with the forward, and the runtime print.

Each higher-order primitive keeps its forward as a `body` Graph in params (inputs and outputs match
the equation's); backends run the body inlined (passes.inline_calls). What makes each an annotation
is its transform rule, in tracekern.autodiff. The user-facing functions are in tracekern/annotations.py."""
from __future__ import annotations

from collections.abc import Sequence

from ..ir import Aval, Graph
from . import ops
from .core import Primitive, eval_graph


def _body_avals(name: str, avals: Sequence[Aval], body: Graph) -> tuple[Aval, ...]:
    got = tuple(avals)
    want = tuple(v.aval for v in body.inputs)
    if got != want:
        raise TypeError(f"{name}: operands {[str(a) for a in got]} do not match its body's inputs "
                        f"{[str(a) for a in want]}")
    return tuple(v.aval for v in body.outputs)


class Call(Primitive):
    """A primitive whose forward is a sub-graph: outputs = body(*inputs)."""

    multiple_results = True

    def abstract_eval(self, *avals, body: Graph, **params):
        return _body_avals(self.name, avals, body)

    def impl(self, *arrays, body: Graph, **params):
        return tuple(eval_graph(body, arrays))

    def has_effects(self, body: Graph, **params) -> bool:
        return any(e.primitive.has_effects(**e.params) for e in body.eqns)


# tk.custom_gradient: body computes (y..., residuals...) from (x..., captured...); `bwd` maps
# (cotangents of y..., residuals...) to (cotangents of x..., of the Variables...).
custom_vjp_call = Call("custom_vjp_call")
# tk.recompute: body computes (y..., saved...) from (x..., captured...), where `saved` are the values
# the policy lets the forward keep (tracekern.remat.POLICIES).
recompute_call = Call("recompute_call")
# tk.reversible: (x1, x2) -> (y1, y2) = (x1 + f(x2), x2 + g(y1)); `f` and `g` are graphs of
# (x2, f's captures...) and (y1, g's captures...).
reversible_call = Call("reversible_call")


class RematBarrier(Primitive):
    """remat_barrier(x, token) is x. The token (a cotangent) makes everything computed from the
    result depend on the backward pass: it is not merged with the forward's identical values (CSE),
    and tk.vjp's split puts it in the backward. Kernels read x directly (a view)."""

    fusion = "view"
    aliases_input = True
    barrier = True

    def batch(self, args, batched):
        return [ops.remat_barrier(*args)], [batched[0]]

    def abstract_eval(self, x: Aval, token: Aval):
        return (x,)

    def impl(self, x, token):
        return x

    def view_index(self, idx, in_shape):
        return idx

    def vjp(self, cts, ins, outs, active):
        return [cts[0], None]

    def jvp(self, tangents, ins, outs):
        """The tangent behind the same barrier (the token orders it as it orders the value)."""
        return [None if tangents[0] is None else ops.remat_barrier(tangents[0], ins[1])]


class Print(Primitive):
    """tk.print: prints when the compiled code runs. `parts` is the printed sequence: ("text", str)
    for values known while tracing, ("value", k) for the k-th operand. Operands no part refers to
    only order the print (after them)."""

    multiple_results = True
    effectful = True

    def batch(self, args, batched, *, parts, sep):
        """One print of the batched values (each the stack of its lanes, batch axis first), not one
        per lane: a run of the batched program prints once, as one run of the program did."""
        ops.print_(*args, parts=parts, sep=sep)
        return [], []

    def abstract_eval(self, *avals, parts, sep):
        return ()

    def impl(self, *arrays, parts, sep):
        print(*format_parts(parts, arrays), sep=sep, flush=True)
        return ()

    def differentiable(self, **params) -> bool:
        return False


def format_parts(parts, values) -> list:
    return [p[1] if p[0] == "text" else values[p[1]] for p in parts]


remat_barrier = RematBarrier("remat_barrier")
print_ = Print("print")
