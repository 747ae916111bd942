"""The Primitive base class: one object holds all of a primitive's rules.

Rules: abstract evaluation (shape, dtype), a NumPy implementation, and a VJP built from primitives."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..ir import Aval

REGISTRY: dict[str, Primitive] = {}


class Primitive:
    """A primitive operation of the IR.

    Subclasses (or instances configured with functions) provide:
      abstract_eval(*avals, **params) -> tuple[Aval, ...]
      impl(*arrays, **params) -> array (or tuple of arrays when multiple_results)
      vjp(cts, ins, outs, active, **params) -> list of cotangents (None = zero) per input
    `ins`, `outs` and `cts` are traced values in the backward pass, so a VJP rule is ordinary
    array code (operators, tracekern.numpy functions) and is itself differentiable.
    """

    multiple_results = False
    effectful = False  # effectful equations survive dead-code elimination and are never merged
    # True when vjp() returns (cotangents, reconstructed inputs): the inputs recomputed from the
    # outputs (tk.reversible), which autodiff then hands to the VJPs of the equations that made them
    reconstructs_inputs = False
    # True when vjp() takes None for an output that receives no cotangent (instead of zeros)
    sparse_cotangents = False
    # How kernel renderers treat it (backends/fusion.py): "elementwise" (a scalar expression in a
    # fused loop), "view" (an index mapping onto its operand), "reduce", or "call" (its own kernel).
    fusion = "call"
    # True for a "view" whose output is its first input unchanged (remat_barrier): a kernel that
    # takes whole buffers (matmul, call) is handed that input's buffer, not a copy
    aliases_input = False
    scalar = ""  # elementwise primitives: the scalar expression renderers emit (see Elementwise)

    def __init__(self, name: str):
        if name in REGISTRY:
            raise ValueError(f"primitive {name!r} defined twice")
        self.name = name
        REGISTRY[name] = self

    def __repr__(self) -> str:
        return f"<primitive {self.name}>"

    # -- rules -------------------------------------------------------------------
    def abstract_eval(self, *avals: Aval, **params) -> tuple[Aval, ...]:
        raise NotImplementedError(f"{self.name}: abstract_eval")

    def impl(self, *arrays: np.ndarray, **params) -> Any:
        raise NotImplementedError(f"{self.name}: impl")

    def vjp(self, cts: Sequence, ins: Sequence, outs: Sequence, active: Sequence[bool], **params) -> list:
        raise NotImplementedError(f"{self.name} is not differentiable")

    def scalar_for(self, literals: Sequence) -> str:
        """The scalar expression, given the literal value of each operand (None where not literal)."""
        return self.scalar

    def has_effects(self, **params) -> bool:
        """Whether an equation must run even when its outputs are unused (a print, or a sub-graph
        that prints): dead-code elimination keeps it and CSE never merges it."""
        return self.effectful

    def prune(self, eqn, live):
        """This equation without outputs nothing reads (`live`: the Vars still needed), if the
        primitive can drop them (dead-code elimination calls it); else the equation itself."""
        return eqn

    def for_vjp(self, eqn):
        """The equation as reverse mode re-emits it (a scan records its carries again; see prune)."""
        return eqn

    def differentiable(self, **params) -> bool:
        """Whether cotangents flow through this equation at all (False: stop_gradient, comparisons...)."""
        return True

    # -- use ---------------------------------------------------------------------
    def bind(self, *args, **params):
        from ..trace import bind

        return bind(self, args, params)

    __call__ = bind
