"""Higher-order primitives behind the gradient annotations (custom_gradient, recompute, reversible),
the barrier that keeps a recomputation from merging with the forward, and the runtime print.

Each higher-order primitive keeps its forward as a `body` Graph in params (inputs and outputs match
the equation's); backends run the body inlined (passes.inline_calls). Its VJP rule is where the
annotation lives. The user-facing functions are in tracekern/annotations.py."""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import TracekernError
from ..ir import Aval, Graph
from .core import Primitive


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
        from ..trace import inline_graph

        return tuple(inline_graph(body, arrays))

    def has_effects(self, body: Graph, **params) -> bool:
        return any(e.primitive.has_effects(**e.params) for e in body.eqns)


class CustomVJPCall(Call):
    """tk.custom_gradient: body computes (y..., residuals...) from (x..., captured...); `bwd` maps
    (cotangents of y..., residuals...) to (cotangents of x..., of the Variables...). The backward
    pass runs bwd's ops instead of differentiating body's."""

    sparse_cotangents = True

    def vjp(self, cts, ins, outs, active, body, bwd, num_y, num_x, var_positions, fun_name):
        from ..autodiff import forward
        from ..numpy import zeros_like
        from ..trace import inline_graph

        dys = [zeros_like(y) if ct is None else ct for ct, y in zip(cts[:num_y], outs[:num_y])]
        grads = inline_graph(bwd, dys + list(outs[num_y:]))
        result = [None] * len(ins)
        result[:num_x] = grads[:num_x]
        for j, pos in enumerate(var_positions):
            result[pos] = grads[num_x + j]
        if any(ct is not None for ct in cts[num_y:]):
            # cotangents of residuals (grad of grad: grad_fn's ops used them) flow through body's
            # own ops: grad_fn's derivative is that of its ops, residuals included
            extra = forward(body, list(ins), active).backward([None] * num_y + list(cts[num_y:]))
            result = [a if b is None else (b if a is None else a + b) for a, b in zip(result, extra)]
        for pos in range(num_x, len(ins)):
            if active[pos] and pos not in var_positions:
                raise TracekernError(
                    f"{fun_name} (a tk.custom_gradient function) uses a traced value from an enclosing function "
                    f"({ins[pos].aval}) that is being differentiated, and its grad_fn cannot return a gradient for "
                    "it. Pass that value to the function as an argument instead.")
        return result


class RecomputeCall(Call):
    """tk.recompute: body computes (y..., saved...) from (x..., captured...), where `saved` are the
    values the policy lets the forward keep. The VJP emits body again on the inputs, behind a barrier
    that depends on the cotangent (so it runs in the backward pass and never merges with the
    forward's copy), using the saved values instead of recomputing them, then differentiates it.

    An output of the region that the reverse pass already reads (typically the next region's input,
    which that region keeps) is used as it is rather than recomputed: it is kept anyway, so the
    recomputation that only remade it (an MLP layer's matmul, when tanh's derivative needs only its
    output) is dead code and disappears."""

    sparse_cotangents = True

    def vjp(self, cts, ins, outs, active, body, num_y, policy):
        from ..autodiff import ForwardPass, active_vars, for_vjp
        from ..trace import Tracer, current_builder, inline_env

        body = for_vjp(body)
        b = current_builder()
        kept = b.used_since(b.backward_from) if b is not None and b.backward_from is not None else set()
        reuse = {v: y for v, y in zip(body.outputs[:num_y], outs[:num_y])
                 if isinstance(y, Tracer) and y.builder is b and y.var in kept and v not in body.inputs}
        token = next(ct for ct in cts if ct is not None)
        xs = [remat_barrier(x, token) for x in ins]
        given = dict(zip(body.outputs[num_y:], outs[num_y:]))
        # prints of the region run again here: one element of a barrier'd value orders them
        order = xs[0].ravel()[:1] if xs else None
        env = inline_env(body, xs, given=given, order=order)
        env.update(reuse)
        fp = ForwardPass(body, env, active_vars(body, active))
        return fp.backward(list(cts))   # saved values get cotangents too in grad of grad


class ReversibleCall(Call):
    """tk.reversible: (x1, x2) -> (y1, y2) = (x1 + f(x2), x2 + g(y1)); `f` and `g` are graphs of
    (x2, f's captures...) and (y1, g's captures...). Its VJP reconstructs x2 = y2 - g(y1) and
    x1 = y1 - f(x2) from the outputs, so the forward saves nothing for it; the reconstructed inputs
    are handed to the VJP of whatever made them (a stack of blocks keeps only the last outputs)."""

    reconstructs_inputs = True

    def vjp(self, cts, ins, outs, active, body, f, g, num_f):
        from ..autodiff import forward
        from ..trace import inline_graph

        (y1, y2), (dy1, dy2) = outs, cts
        cf, cg = list(ins[2:2 + num_f]), list(ins[2 + num_f:])
        x2 = y2 - inline_graph(g, [y1] + cg)[0]
        x1 = y1 - inline_graph(f, [x2] + cf)[0]
        g_cts = forward(g, [y1] + cg, [True] + list(active[2 + num_f:])).backward([dy2])
        dy1_all = dy1 if g_cts[0] is None else dy1 + g_cts[0]
        f_cts = forward(f, [x2] + cf, [True] + list(active[2:2 + num_f])).backward([dy1_all])
        dx2 = dy2 if f_cts[0] is None else dy2 + f_cts[0]
        return [dy1_all, dx2] + list(f_cts[1:]) + list(g_cts[1:]), [x1, x2] + [None] * (len(ins) - 2)


class RematBarrier(Primitive):
    """remat_barrier(x, token) is x. The token (a cotangent) makes everything computed from the
    result depend on the backward pass: it is not merged with the forward's identical values (CSE),
    and tk.vjp's split puts it in the backward. Kernels read x directly (a view)."""

    fusion = "view"
    aliases_input = True

    def abstract_eval(self, x: Aval, token: Aval):
        return (x,)

    def impl(self, x, token):
        return x

    def view_index(self, idx, in_shape):
        return idx

    def vjp(self, cts, ins, outs, active):
        return [cts[0], None]


class Print(Primitive):
    """tk.print: prints when the compiled code runs. `parts` is the printed sequence: ("text", str)
    for values known while tracing, ("value", k) for the k-th operand. Operands no part refers to
    only order the print (after them)."""

    multiple_results = True
    effectful = True

    def abstract_eval(self, *avals, parts, sep):
        return ()

    def impl(self, *arrays, parts, sep):
        print(*format_parts(parts, arrays), sep=sep, flush=True)
        return ()

    def differentiable(self, **params) -> bool:
        return False


def format_parts(parts, values) -> list:
    return [p[1] if p[0] == "text" else values[p[1]] for p in parts]


custom_vjp_call = CustomVJPCall("custom_vjp_call")
recompute_call = RecomputeCall("recompute_call")
reversible_call = ReversibleCall("reversible_call")
remat_barrier = RematBarrier("remat_barrier")
print_ = Print("print")
