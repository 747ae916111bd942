"""The Primitive base class and the registry: a primitive is data, the rules of one operation.

Rules: abstract evaluation (shape, dtype), a NumPy implementation, kernel templates for the
renderers, and (first-order primitives) a VJP rule and a JVP rule written with tracekern.primitives.ops."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Aval, Graph, is_inexact

REGISTRY: dict[str, Primitive] = {}


class Primitive:
    """A primitive operation of the IR.

    Subclasses (or instances configured with functions) provide:
      abstract_eval(*avals, **params) -> tuple[Aval, ...]
      impl(*arrays, **params) -> array (or tuple of arrays when multiple_results)
      vjp(cts, ins, outs, active, **params) -> list of cotangents (None = zero) per input
      jvp(tangents, ins, outs, **params) -> list of tangents (None = zero) per output
    A VJP or JVP rule builds IR with tracekern.primitives.ops on the values it is given (they belong to
    the builder reverse mode emits into), so the backward pass is ordinary IR, differentiable again.
    Higher-order primitives (a sub-graph in their params) have their transform rules in
    tracekern.autodiff and tracekern.forward instead. Binding a primitive is tracekern.trace's (and
    ops') job.
    """

    multiple_results = False
    effectful = False  # effectful equations survive dead-code elimination and are never merged
    # How kernel renderers treat it (backends/fusion.py): "elementwise" (a scalar expression in a
    # fused loop), "view" (an index mapping onto its operand), "reduce", "matmul", "const", "fill",
    # "index" (a scalar made from the loop indices: index_scalar(idx, **params)), or "call" (its own kernel).
    fusion = "call"
    # True for a "view" whose output is its first input unchanged (remat_barrier): a kernel that
    # takes whole buffers (matmul, call) is handed that input's buffer, not a copy
    aliases_input = False
    # True for a "view" that marks the start of a recomputation (remat_barrier): work that reads
    # through it is never planned into a kernel that runs before it (backends/fusion.py)
    barrier = False
    scalar = ""  # elementwise primitives: the scalar expression renderers emit (see Elementwise)
    # True for a primitive that is linear in its float operands (reshape, slice, sum...): forward mode
    # applies it to the tangents (Primitive.jvp); its other operands (indices) are taken as they are
    linear = False
    # True for a multiple-result primitive whose vjp takes None for an output that gets no cotangent (a
    # symbolic zero, as JAX's), instead of an array of zeros: an unused output's term is left out, not
    # multiplied by a zero (eigh's and svd's eigenvectors at a tie: 0 * inf, NaN)
    sparse_cotangents = False

    def __init__(self, name: str):
        if name in REGISTRY:
            raise ValueError(f"primitive {name!r} defined twice")
        self.name = name
        REGISTRY[name] = self

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"

    # -- rules -------------------------------------------------------------------
    def batch(self, args: Sequence, batched: Sequence[bool], **params) -> tuple[list, list[bool]]:
        """The rule of tk.vmap: the equation on operands of which those marked `batched` have a
        batch axis first (tracekern.primitives.lanes); returns (outputs, whether each is batched).
        tracekern.batching calls it only when some operand is batched."""
        raise NotImplementedError(f"{self.name}: no batching rule")

    def abstract_eval(self, *avals: Aval, **params) -> tuple[Aval, ...]:
        raise NotImplementedError(f"{self.name}: abstract_eval")

    def impl(self, *arrays: np.ndarray, **params) -> Any:
        raise NotImplementedError(f"{self.name}: impl")

    def vjp(self, cts: Sequence, ins: Sequence, outs: Sequence, active: Sequence[bool], **params) -> list:
        raise NotImplementedError(f"{self.name} is not differentiable")

    def jvp(self, tangents: Sequence, ins: Sequence, outs: Sequence, **params) -> list:
        """The tangent of each output (None = zero) from one tangent per input (None = zero); `ins`
        and `outs` are the primal values, in the builder forward mode emits into. A primitive
        declared `linear` has this one: itself applied to the tangents."""
        if not self.linear:
            raise NotImplementedError(f"{self.name} has no forward-mode (JVP) rule")
        return linear_jvp(self, tangents, ins, **params)

    def scalar_for(self, literals: Sequence, **params) -> str:
        """The scalar expression, given the literal value of each operand (None where not literal)
        and the equation's params."""
        return self.scalar

    def has_effects(self, **params) -> bool:
        """Whether an equation must run even when its outputs are unused (a print, or a sub-graph
        that prints): dead-code elimination keeps it and CSE never merges it."""
        return self.effectful

    def prune(self, eqn, live):
        """This equation without outputs nothing reads (`live`: the Vars still needed), if the
        primitive can drop them (dead-code elimination calls it); else the equation itself."""
        return eqn

    def differentiable(self, **params) -> bool:
        """Whether cotangents flow through this equation at all (False: stop_gradient, comparisons...)."""
        return True


def linear_jvp(prim: Primitive, tangents: Sequence, ins: Sequence, **params) -> list:
    """The JVP of a primitive linear in its float operands: the primitive applied to their tangents
    (zeros where an operand has none), its other operands (indices) as they are."""
    b = next(t.builder for t in tangents if t is not None)
    args = [t if t is not None else (b.bind(REGISTRY["full"], shape=tuple(x.shape), dtype=x.dtype, value=x.dtype.type(0).item())
                                     if is_inexact(x.dtype) else x) for t, x in zip(tangents, ins)]
    out = b.bind(prim, *args, **params)
    return list(out) if prim.multiple_results else [out]


def no_operands(self, args, batched, **params):
    """The batching rule of a primitive without operands (const, full, iota): it never has a
    batched one, so tracekern.batching re-emits it as it is and this is never called."""
    raise AssertionError(f"{self.name} has no operands to batch")


def literal_value(v, producer) -> float | complex | None:
    """The value of a one-element constant or fill operand `v` (`producer`: Var -> its Eqn), else
    None: what Primitive.scalar_for receives as a literal (fusion renders it, the memory planner's
    cost model prices what fusion renders)."""
    p = producer.get(v)
    while p is not None and p.primitive.aliases_input:     # (through a remat_barrier: the same value)
        v = p.inputs[0]
        p = producer.get(v)
    if p is not None and p.primitive.fusion in ("fill", "const") and int(np.prod(v.shape)) == 1:
        value = np.asarray(p.params["value"]).reshape(-1)[0]
        return complex(value) if np.iscomplexobj(value) else float(value)
    return None


def eval_graph(graph: Graph, args: Sequence[Any]) -> list[np.ndarray]:
    """Run `graph` on NumPy arrays, equation by equation with each primitive's impl (the NumPy
    implementation of higher-order primitives: the sub-graphs of calls, branches and loops)."""
    env: dict = dict(zip(graph.inputs, args))
    for e in graph.eqns:
        out = e.primitive.impl(*[env[v] for v in e.inputs], **e.params)
        outs = out if e.primitive.multiple_results else (out,)
        env.update(zip(e.outputs, (np.asarray(o) for o in outs)))
    return [env[v] for v in graph.outputs]
