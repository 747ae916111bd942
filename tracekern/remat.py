"""What the forward pass saves for the backward pass and what the backward recomputes: the recompute
policies of tk.recompute, the split of a joint graph into tk.vjp's two halves, the residual choice,
and the planner that fits the residuals in a memory budget (memory_budget=, below).

Cheap values (elementwise, view and constant equations) are recomputed in the backward pass from the
values they are made of whenever saving those instead moves fewer bytes: for memory-bound code a
recompute inside the backward's fused loops is faster than a round trip through memory. Matmul and
reduction outputs are the expensive ones and stay saved. A tk.recompute region made only of cheap
equations is cheap too: its inputs need not be saved either when what they are made of is smaller.
(The recompute region's own rule, which re-emits it in the backward pass, is in tracekern.autodiff.)"""
from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from . import passes
from .errors import IRError, MemoryBudgetError
from .ir import Eqn, Graph, Var, verify
from .primitives.annotations import Call, recompute_call, remat_barrier
from .primitives.core import literal_value

# ----------------------------------------------------------------------------- policies

# tk.recompute(policy=...): which equations of a region may keep their outputs for the backward pass
POLICIES: dict[str, Callable[[Eqn], bool]] = {
    "nothing": lambda eqn: False,
    "dots": lambda eqn: eqn.primitive.name == "matmul",
}


def policy_function(policy: str | Callable[[Eqn], bool]) -> Callable[[Eqn], bool]:
    """The predicate of a policy: a name in POLICIES, or a callable(eqn) -> bool."""
    if callable(policy):
        return policy
    if policy in POLICIES:
        return POLICIES[policy]
    raise ValueError(f"tk.recompute: policy must be one of {sorted(POLICIES)} or a callable(eqn) -> bool, got {policy!r}")


def saved_by_policy(region: Graph, policy: Callable[[Eqn], bool]) -> tuple[Var, ...]:
    """The values of a recompute region that its forward keeps: outputs of the equations the policy
    accepts, other than the region's outputs."""
    outputs = set(region.outputs)
    return tuple(v for e in region.eqns if policy(e) for v in e.outputs if v not in outputs)


# ----------------------------------------------------------------------------- residual choice

_CHEAP = ("elementwise", "view", "fill", "const", "index")


def cheap(e: Eqn) -> bool:
    """Whether the backward pass may re-run `e` instead of the forward saving its outputs."""
    if e.primitive.has_effects(**e.params):
        return False
    if e.primitive is recompute_call:
        return all(cheap(b) for b in e.params["body"].eqns)
    return e.primitive.fusion in _CHEAP


def choose_residuals(fwd_eqns: Sequence[Eqn], residuals: Sequence[Var]) -> tuple[list[Var], list[Eqn]]:
    """(values to save, forward equations the backward re-runs, in forward order)."""
    producer = {v: e for e in fwd_eqns for v in e.outputs}

    def cheap_value(v: Var) -> bool:
        e = producer.get(v)
        return e is not None and cheap(e)

    candidates = [v for v in residuals if cheap_value(v)]
    if not candidates:
        return list(residuals), []
    recompute: set[Eqn] = set()
    leaves: list[Var] = []
    seen: set[Var] = set()
    stack = list(candidates)
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if cheap_value(v):
            e = producer[v]
            recompute.add(e)
            stack.extend(e.inputs)
        else:
            leaves.append(v)
    kept = [v for v in residuals if not cheap_value(v)]
    kept_set = set(kept)
    new = kept + [v for v in leaves if v not in kept_set]
    if sum(v.aval.nbytes for v in new) >= sum(v.aval.nbytes for v in residuals):
        return list(residuals), []
    return new, [e for e in fwd_eqns if e in recompute]


# ----------------------------------------------------------------------------- splitting


@dataclass(frozen=True)
class SplitVJP:
    """A joint graph split in two: forward (primals -> outputs + residuals) and backward
    (residuals + cotangents -> input cotangents). Residuals are what the forward saves.

    Under a memory budget (planned by plan_residuals) it also says what the planner chose:
    memory_budget (bytes), recompute_cost (estimated seconds of the backward's recomputation),
    solver ("milp" or "lagrangian"), smallest_budget (the fewest residual bytes any plan saves) and
    unconstrained_bytes (what the split saves without a budget, which a fractional budget scales)."""

    forward: Graph
    backward: Graph
    num_outputs: int
    residuals: tuple[Var, ...]
    memory_budget: int | None = None
    recompute_cost: float | None = None
    solver: str | None = None
    smallest_budget: int | None = None
    unconstrained_bytes: int | None = None

    @property
    def residual_bytes(self) -> int:
        return int(sum(v.aval.nbytes for v in self.residuals))

    @property
    def saved_bytes(self) -> int:
        """Residual bytes beyond the forward's own inputs (which the caller holds anyway)."""
        inputs = set(self.forward.inputs)
        return int(sum(v.aval.nbytes for v in self.residuals if v not in inputs))

    def __str__(self) -> str:
        plan = "" if self.solver is None else (f", planned by {self.solver} under a budget of {self.memory_budget} "
                                               f"bytes, recompute cost {self.recompute_cost:.3g} s")
        return (f"forward:\n{self.forward}\n\nbackward (saved: {len(self.residuals)} residuals, "
                f"{self.residual_bytes} bytes{plan}):\n{self.backward}")


def split_joint(joint: Graph, num_primals: int, num_outputs: int, memory_budget: int | float | None = None,
                costs: CostModel | None = None, exact_limit: int | None = None, fused: bool = False,
                arrays_of: Callable[[Graph], Collection[Var]] | None = None, store: SolutionStore | None = None) -> SplitVJP:
    """Split `joint` (inputs: primals then cotangents; outputs: primal outputs then input cotangents)
    by dependence on the cotangent inputs. Constants the backward needs are re-made there, not saved.

    Without a budget, cheap values are recomputed when that saves bytes (choose_residuals). With
    `memory_budget` (bytes, or a fraction of what the split saves without one), plan_residuals
    chooses every residual, minimising the cost model's estimate (`costs`) within the budget, and
    the backward re-runs each recomputed equation just before its first use. `fused`: the plan runs
    as one fused step (rejoin, for tk.grad), where only the forward's arrays can be kept for the
    backward (see plan_residuals); `arrays_of(forward graph)`: the values the backend makes as arrays
    there beyond the structural rule (fusion materializes a value many loops read)."""
    ct_inputs = set(joint.inputs[num_primals:])
    depends_on_ct: set[Var] = set(ct_inputs)
    for e in joint.eqns:
        if any(v in depends_on_ct for v in e.inputs):
            depends_on_ct.update(e.outputs)
    # The forward keeps only what the primal outputs need; work done only for the backward
    # (e.g. transposes, 1 - tanh^2) moves there, so residuals are values the forward makes anyway.
    needed_by_fwd: set[Var] = set(joint.outputs[:num_outputs])
    in_fwd: set[int] = set()
    for i in reversed(range(len(joint.eqns))):
        e = joint.eqns[i]
        forward_effect = e.primitive.has_effects(**e.params) and not any(v in depends_on_ct for v in e.inputs)
        if forward_effect or (any(v in needed_by_fwd for v in e.outputs) and not any(v in depends_on_ct for v in e.outputs)):
            needed_by_fwd.update(e.inputs)
            in_fwd.add(i)
    fwd_eqns = [e for i, e in enumerate(joint.eqns) if i in in_fwd]
    bwd_eqns = [e for i, e in enumerate(joint.eqns) if i not in in_fwd]
    producer = {v: e for e in fwd_eqns for v in e.outputs}
    bwd_defined = set(ct_inputs) | {v for e in bwd_eqns for v in e.outputs}
    needed = [v for e in bwd_eqns for v in e.inputs] + list(joint.outputs[num_outputs:])
    residuals: list[Var] = []
    copied: list[Eqn] = []
    seen: set[Var] = set()
    for v in needed:
        if v in bwd_defined or v in seen:
            continue
        seen.add(v)
        e = producer.get(v)
        if e is not None and not e.inputs:  # a constant: cheaper to make again than to save
            if e not in copied:
                copied.append(e)
        else:
            residuals.append(v)
    primal_outs = joint.outputs[:num_outputs]
    for v in primal_outs:
        if v in depends_on_ct:
            raise IRError("a primal output depends on a cotangent input")
    chosen, recomputed = choose_residuals(fwd_eqns, residuals)
    plan = None
    if memory_budget is None:
        bwd_order = copied + [e for e in recomputed if e not in copied] + bwd_eqns   # constants first: no inputs
    else:
        # the forward's arrays: its outputs, a whole-array kernel's or a reduction's output (through
        # an inlined region, what its body makes), what the planner never re-runs (a loop, a
        # custom_gradient's forward), and what the forward's own whole-array kernels read
        materialized = (set(primal_outs) | backward_arrays(fwd_eqns, fwd_eqns)
                        | {v for e in fwd_eqns for i, v in enumerate(e.outputs) if array_anyway(e, i) or not recomputable(e)})
        if arrays_of is not None:
            materialized |= set(arrays_of(Graph(joint.inputs[:num_primals], tuple(fwd_eqns), primal_outs)))
        # (a fused step keeps, without a budget, the arrays behind what the split would save)
        kept = arrays_behind(chosen, producer, materialized) if fused else chosen
        unconstrained = int(sum(v.aval.nbytes for v in kept))
        plan = plan_residuals(fwd_eqns, joint.inputs[:num_primals], residuals, budget_bytes(memory_budget, unconstrained),
                              costs or CostModel(), materialized, EXACT_LIMIT if exact_limit is None else exact_limit,
                              arrays=backward_arrays(fwd_eqns, bwd_eqns), arrays_only=fused, store=store)
        chosen, recomputed = list(plan.saved), [e for e in plan.recomputed if e not in copied]
        bwd_order = copied + _just_in_time(recomputed, bwd_eqns, joint.outputs[num_outputs:])
    fwd = passes.simplify(Graph(joint.inputs[:num_primals], tuple(fwd_eqns), primal_outs + tuple(chosen)))
    res_in = tuple(Var(v.aval) for v in chosen)
    rename = dict(zip(chosen, res_in))
    bwd_body = tuple(_rename_eqn(e, rename) for e in bwd_order)
    bwd = Graph(res_in + joint.inputs[num_primals:], bwd_body,
                tuple(rename.get(v, v) for v in joint.outputs[num_outputs:]),
                input_notes=("saved",) * len(res_in) + ("cotangent",) * len(ct_inputs))
    bwd = mark_recomputed(passes.simplify(bwd), len(res_in))
    if plan is None:
        return SplitVJP(verify(fwd), verify(bwd), num_outputs, tuple(chosen))
    return SplitVJP(verify(fwd), verify(bwd), num_outputs, tuple(chosen), memory_budget=plan.budget,
                    recompute_cost=plan.recompute_cost, solver=plan.solver, smallest_budget=plan.smallest_bytes,
                    unconstrained_bytes=unconstrained)


def arrays_behind(values: Sequence[Var], producer: Mapping[Var, Eqn], materialized: Collection[Var]) -> list[Var]:
    """The arrays a fused step keeps to have `values` in its backward: each value that is an array
    (`materialized`, an input, or the output of an equation the planner never re-runs) as it is,
    and for fused elementwise work, the arrays it is computed from (constants are remade)."""
    out: list[Var] = []
    seen: set[Var] = set()
    stack = list(reversed(values))
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        e = producer.get(v)
        if e is not None and not e.inputs:
            continue
        if e is None or v in materialized or not recomputable(e):
            out.append(v)
        else:
            stack.extend(reversed(e.inputs))
    return out


def _just_in_time(recomputed: Sequence[Eqn], bwd_eqns: Sequence[Eqn], outputs: Sequence[Var]) -> list[Eqn]:
    """The backward's equations with each recomputed forward equation placed right before the first
    one that reads its outputs (directly or through other recomputed ones), so that recomputed values
    are alive only from where the backward needs them."""
    producer = {v: e for e in recomputed for v in e.outputs}
    placed: set[Eqn] = set()
    order: list[Eqn] = []

    def need(v: Var) -> None:   # (post-order, without recursion: chains can be long)
        e = producer.get(v)
        if e is None or e in placed:
            return
        placed.add(e)
        stack = [(e, iter(e.inputs))]
        while stack:
            cur, pending = stack[-1]
            for u in pending:
                p = producer.get(u)
                if p is not None and p not in placed:
                    placed.add(p)
                    stack.append((p, iter(p.inputs)))
                    break
            else:
                stack.pop()
                order.append(cur)

    for b in bwd_eqns:
        for u in b.inputs:
            need(u)
        order.append(b)
    for v in outputs:
        need(v)
    return order


def rejoin(split: SplitVJP) -> Graph:
    """One graph that runs `split`'s forward and then its backward, which reads the values the
    forward made (inputs: primals then cotangents, outputs: primal outputs then input cotangents, as
    the joint graph split came from). tk.grad runs this under a memory budget.

    A forward equation the plan re-runs in the backward is re-run here only where that frees
    memory in one fused step: when it is not cheap (a matmul, a reduction) or when a whole-array
    kernel (a matmul) reads its result, directly or through views, which must then be an array
    (backward_arrays: the values the planner's cost model charges as arrays). It reads the saved values
    through a remat_barrier whose token is the first cotangent, so that common-subexpression
    elimination cannot merge it back into the forward, placed right before the re-run in the graph:
    fusion places no work that reads through a barrier in a kernel before it (backends/fusion.py),
    so a re-run runs, and its array lives, only from where the backward needs it (the backward's
    order puts each re-run just before its first use: _just_in_time). A cheap elementwise re-run of values the forward already has is
    left out: the backward reads the forward's value, and the fused loops recompute it from their
    arrays anyway (re-running it next to the forward's would only do the work twice)."""
    fwd, bwd = split.forward, split.backward
    n_res = len(split.residuals)
    res_in, cts = bwd.inputs[:n_res], bwd.inputs[n_res:]
    value = dict(zip(res_in, fwd.outputs[split.num_outputs:]))    # backward Var -> the Var it reads here
    defined = set(fwd.inputs) | {v for e in fwd.eqns for v in e.outputs}
    as_arrays = backward_arrays(fwd.eqns, bwd.eqns)
    made_by = {v: e for e in fwd.eqns for v in e.outputs}
    barrier: dict[Var, Var] = {}
    eqns: list[Eqn] = []
    for e in bwd.eqns:
        remakes = bool(e.outputs) and all(v in defined for v in e.outputs)   # a forward equation, re-run
        if not remakes:
            eqns.append(_rename_eqn(e, value))
            continue
        if cheap(e) and not any(v in as_arrays for v in e.outputs) and all(value.get(v, v) in defined for v in e.inputs):
            value.update((v, v) for v in e.outputs)    # the forward's own value
            continue
        ins = []
        for v in e.inputs:
            u = value.get(v, v)
            made = made_by.get(u)
            # (a constant is read as it is: through a barrier it would no longer be a literal, and
            # x ** 2 would be rendered as pow instead of x * x)
            if u in defined and cts and not (made is not None and not made.inputs):
                if u not in barrier:
                    barrier[u] = Var(u.aval)
                    eqns.append(Eqn(remat_barrier, (u, cts[0]), (barrier[u],), {}, e.source))
                u = barrier[u]
            ins.append(u)
        outs = tuple(Var(v.aval) for v in e.outputs)
        value.update(zip(e.outputs, outs))
        eqns.append(Eqn(e.primitive, tuple(ins), outs, e.params, e.source))
    outputs = fwd.outputs[:split.num_outputs] + tuple(value.get(v, v) for v in bwd.outputs)
    return verify(passes.dce(Graph(fwd.inputs + cts, fwd.eqns + tuple(eqns), outputs)))


def mark_recomputed(bwd: Graph, num_saved: int) -> Graph:
    """Note the backward's equations that remake forward values: those computed from saved values
    alone, not from a cotangent (a remat_barrier's token only orders the recomputation)."""
    from_ct = set(bwd.inputs[num_saved:])
    notes = []
    for e in bwd.eqns:
        ins = e.inputs[:1] if e.primitive is remat_barrier else e.inputs
        if any(v in from_ct for v in ins):
            from_ct.update(e.outputs)
            notes.append("")
        else:
            notes.append("recomputed" if e.inputs and e.outputs else "")
    return Graph(bwd.inputs, bwd.eqns, bwd.outputs, bwd.input_notes, tuple(notes))


def _rename_eqn(e: Eqn, rename: dict[Var, Var]) -> Eqn:
    if not any(v in rename for v in e.inputs):
        return e
    return Eqn(e.primitive, tuple(rename.get(v, v) for v in e.inputs), e.outputs, e.params, e.source)


# ----------------------------------------------------------------------------- the planner (memory_budget=)

# Above this many variables (values and equations) the exact MILP gives way to the Lagrangian heuristic.
EXACT_LIMIT = 3000
MILP_TIME_LIMIT = 60.0     # seconds; a plan cut short by it says so in its solver name
_SCALE = 1e12              # costs go to the solver as integer picoseconds (exact comparisons)
# Solutions by a digest of the problem's arrays (the objective, bounds, constraint rows and the solver's time
# limit): a budget is planned again for every trace of the same function (tk.vjp(f, x, memory_budget=b) in a
# loop, a step's lower() and its call, each point of a sweep shares the smallest-bytes problem), and one MILP
# takes 10 to 100 ms. The oldest of _SOLVED_MAX entries goes first.
_SOLVED: dict[bytes, tuple] = {}
_SOLVED_MAX = 256
_SOLVER_FORMAT = 1   # (in the digest: a change to how a problem is posed or solved makes new keys)


def _remember(key: bytes, x: np.ndarray | None, optimal: bool) -> None:
    while _SOLVED and len(_SOLVED) >= _SOLVED_MAX:
        _SOLVED.pop(next(iter(_SOLVED), None), None)   # (another thread may have taken the oldest first)
    _SOLVED[key] = (None if x is None else x.copy(), optimal)


class SolutionStore(Protocol):
    """Where solutions outlive the process (budget.py's, in the disk cache): get(key, size) -> (x, proven
    optimal) or None; put(key, x, optimal). The planner checks what get() gives against the problem's
    constraints before it uses it, and puts only proven-optimal solutions."""

    def get(self, key: bytes, size: int) -> tuple[np.ndarray, bool] | None: ...

    def put(self, key: bytes, x: np.ndarray, optimal: bool) -> None: ...


def _digest(*arrays: np.ndarray) -> bytes:
    h = hashlib.blake2b(digest_size=20)
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    return h.digest()


@dataclass(frozen=True)
class CostModel:
    """The planner's estimate of what the backward pass's extra work costs, in seconds.

    Recomputing an equation costs: elementwise, its output's elements times a time per element
    (`per_element` by primitive name: measured for the transcendentals and the random bits;
    `arithmetic` for the rest); a reduction, its input's elements times `arithmetic` plus reading
    its input and writing its output (a re-run reduction is a kernel of its own, a pass over its
    input: rejoin runs it after a remat_barrier); a matmul, its 2mnk flops times `per_flop` plus
    writing its output; another whole-array kernel (concatenate, unslice), its output's bytes
    written and read; a recompute region, the sum of its equations; views, fills, constants and
    positions nothing (they are index arithmetic).

    The kernel boundary: a value that is otherwise computed inside the fused loops that read it
    (elementwise work, a view, a recompute region) but that the backward must hold as an array,
    because a whole-array kernel (a matmul, a call kernel) reads it there (`arrays`, from
    backward_arrays), costs one write and one read of its bytes more when it is recomputed:
    backends/fusion.py materializes a whole-array kernel's operands.

    Saving a value costs its bytes times `per_byte`: once when the forward makes it as
    an array anyway (a matmul's or a reduction's output, an output of the function), twice when it
    would otherwise stay inside a fused loop (a write, then a read back); saving the caller's own
    inputs costs nothing. backends/calibrate.py measures these figures once per machine."""

    per_element: Mapping[str, float] = field(default_factory=dict)
    arithmetic: float = 5e-10
    per_byte: float = 2.5e-10
    per_flop: float = 3e-11
    origin: str = "defaults"

    def eqn_cost(self, e: Eqn, arrays: Collection[Var] = (), producer: Mapping[Var, Eqn] | None = None) -> float:
        """What re-running `e` in the backward costs; `arrays`: the values the backward must hold
        as arrays (backward_arrays); `producer`: the equation of each value, to see the literal
        operands that make fusion render a cheaper expression (x ** 2 is x * x, not pow)."""
        boundary = sum(v.aval.nbytes for i, v in enumerate(e.outputs) if v in arrays and not array_anyway(e, i))
        return 2.0 * self.per_byte * boundary + self._work(e, producer or {})

    def _work(self, e: Eqn, producer: Mapping[Var, Eqn]) -> float:
        kind = e.primitive.fusion
        if e.primitive is recompute_call:
            body = e.params["body"].eqns
            inner = {v: b for b in body for v in b.outputs}
            return sum(self._work(b, inner) for b in body)
        if not e.outputs or kind in ("view", "fill", "const", "index"):
            return 0.0
        out = e.outputs[0].aval
        if kind == "elementwise":
            return out.size * self.element_cost(e, producer)
        if kind == "reduce":
            src = e.inputs[0].aval
            return src.size * self.arithmetic + (src.nbytes + out.nbytes) * self.per_byte
        if kind == "matmul":
            return 2.0 * out.size * e.inputs[0].aval.shape[-1] * self.per_flop + out.nbytes * self.per_byte
        return 2.0 * sum(v.aval.nbytes for v in e.outputs) * self.per_byte

    def element_cost(self, e: Eqn, producer: Mapping[Var, Eqn]) -> float:
        """Seconds per element of elementwise `e` as fusion renders it: the primitive's own figure,
        or, where a literal operand gives a cheaper expression (Primitive.scalar_for: pow with a
        literal exponent 2 is a product), the figures of the functions that expression calls
        (arithmetic where it calls none)."""
        literals = [literal_value(a, producer) for a in e.inputs]
        if any(x is not None for x in literals):
            expr = e.primitive.scalar_for(literals, **e.params)
            if expr != getattr(e.primitive, "scalar", expr):
                called = re.findall(r"\{([a-z_][a-z0-9_]*)\}", expr)
                return sum(self.per_element.get(f, self.arithmetic) for f in called) or self.arithmetic
        return self.per_element.get(e.primitive.name, self.arithmetic)

    def save_cost(self, v: Var, materialized: bool) -> float:
        return v.aval.nbytes * self.per_byte * (1.0 if materialized else 2.0)


def whole_array(e: Eqn) -> bool:
    """Whether the kernels run `e` as a kernel of its own that reads and writes whole arrays (a
    matmul, a call kernel), not inside fused loops; a higher-order equation with a body (recompute,
    custom_gradient) is inlined, not a kernel (passes.inline_calls)."""
    return e.primitive.fusion in ("matmul", "call") and not isinstance(e.primitive, Call)


def array_anyway(e: Eqn, i: int) -> bool:
    """Whether e's output i is an array wherever it is computed (backends/fusion.py): a whole-array
    kernel's or a reduction's output; for an inlined region, what its body's equation makes."""
    if isinstance(e.primitive, Call):
        body = e.params.get("body")
        if body is None:     # (a reversible block: f and g, inlined; its outputs are sums)
            return False
        inner = {v: b for b in body.eqns for v in b.outputs}.get(body.outputs[i])
        return inner is not None and array_anyway(inner, inner.outputs.index(body.outputs[i]))
    return whole_array(e) or e.primitive.fusion == "reduce"


def backward_arrays(fwd_eqns: Sequence[Eqn], bwd_eqns: Sequence[Eqn]) -> set[Var]:
    """The forward values that the backward must hold as arrays if it recomputes them: those a
    whole-array kernel of the backward (a matmul, a call kernel) reads, directly or through views
    (a transpose, a reshape: the value under the views is what gets written), also inside an
    inlined region (a recompute or custom_gradient body: its operands that its kernels read)."""
    producer = {v: e for e in (*fwd_eqns, *bwd_eqns) for v in e.outputs}
    arrays: set[Var] = set()
    for e in bwd_eqns:
        if whole_array(e):
            read = list(e.inputs)
        elif isinstance(e.primitive, Call) and "body" in e.params:   # an inlined region: the operands its body's kernels read
            body = e.params["body"]
            inner = backward_arrays((), body.eqns)
            read = [v for v, b in zip(e.inputs, body.inputs) if b in inner]
        else:
            continue
        for v in read:
            p = producer.get(v)
            while p is not None and p.primitive.fusion == "view" and p.inputs:
                v = p.inputs[0]
                p = producer.get(v)
            arrays.add(v)
    return arrays


@dataclass(frozen=True)
class Plan:
    """What plan_residuals chose: the values the forward saves, the forward equations the backward
    re-runs (in forward order), their bytes and estimated cost, the solver, the budget it met and the
    smallest budget any plan meets."""

    saved: tuple[Var, ...]
    recomputed: tuple[Eqn, ...]
    residual_bytes: int
    recompute_cost: float
    solver: str
    budget: int
    smallest_bytes: int


def check_budget(memory_budget) -> int | float | None:
    """memory_budget as the transforms take it: None, bytes (an int >= 0), or a fraction in (0, 1]
    of what the function saves without a budget (a float)."""
    if memory_budget is None:
        return None
    if isinstance(memory_budget, (bool, np.bool_)) or not isinstance(memory_budget, (int, float, np.integer, np.floating)):
        raise TypeError(f"memory_budget must be bytes (an int) or a fraction of the unconstrained residual bytes "
                        f"(a float in (0, 1]), got {type(memory_budget).__name__} {memory_budget!r:.40}")
    if isinstance(memory_budget, (float, np.floating)):
        if not 0.0 < float(memory_budget) <= 1.0:
            raise ValueError(f"memory_budget={memory_budget!r}: a float is a fraction in (0, 1] of the residual bytes "
                             "saved without a budget; pass bytes as an int (e.g. memory_budget=64 << 20)")
        return float(memory_budget)
    if memory_budget < 0:
        raise ValueError(f"memory_budget={memory_budget}: bytes must be >= 0")
    return int(memory_budget)


def budget_bytes(memory_budget: int | float, unconstrained: int) -> int:
    """The budget in bytes: an int as it is, a fraction of `unconstrained` rounded down."""
    memory_budget = check_budget(memory_budget)
    return int(math.floor(memory_budget * unconstrained)) if isinstance(memory_budget, float) else memory_budget


def recomputable(e: Eqn) -> bool:
    """Whether the planner may re-run `e` in the backward pass: any pure equation with operands, but
    not a custom_gradient's forward (its residuals are its own), a loop or a branch (loops bound
    their memory with checkpoint=), nor anything that prints."""
    if not e.inputs or e.primitive.has_effects(**e.params):
        return False
    return e.primitive is recompute_call or not any(isinstance(p, Graph) for p in e.params.values())


class _Problem:
    """The residual choice as a 0-1 program. For each value v the backward may need, x_v: it is
    available in the backward pass; for each recomputable equation e, y_e: the backward re-runs it;
    for each value of such an equation, z_v: it is available because e is re-run. v is saved when
    x_v - z_v = 1. Constraints: x_v = 1 for the values the backward reads; y_e <= x_u for every
    operand u of e (a re-run needs its operands); z_v <= y_e and z_v <= x_v. Constants, fills and
    positions are always available (the backward makes them again). Without the budget row, every
    constraint has one +1 and one -1: the matrix is totally unimodular (a closure problem, as min-cut),
    so its linear relaxation is integral; the budget row is what makes the exact problem a MILP.
    With `arrays_only`, a value the forward does not make as an array (fused elementwise work) is
    never saved, x_v <= z_v: one more row of the same kind."""

    def __init__(self, fwd_eqns: Sequence[Eqn], inputs: Sequence[Var], needed: Sequence[Var], model: CostModel,
                 materialized: set[Var], arrays: Collection[Var] = (), arrays_only: bool = False):
        self.store: SolutionStore | None = None   # (plan_residuals': where solutions outlive the process)
        self.producer = {v: e for e in fwd_eqns for v in e.outputs}
        self.position = {e: i for i, e in enumerate(fwd_eqns)}
        self.input_index = {v: i for i, v in enumerate(inputs)}
        self.needed = list(dict.fromkeys(needed))
        values: dict[Var, int] = {}
        eqns: dict[Eqn, int] = {}
        stack = list(reversed(self.needed))
        while stack:
            v = stack.pop()
            if v in values or self.free(v):
                continue
            values[v] = len(values)
            e = self.producer.get(v)
            if e is not None and e not in eqns and recomputable(e):
                eqns[e] = len(eqns)
                stack.extend(reversed(e.inputs))
        self.values, self.eqns = values, eqns
        self.z = [v for v in values if self.producer.get(v) in eqns]
        nx, ny = len(values), len(eqns)
        self.size = nx + ny + len(self.z)
        self.bytes = np.zeros(self.size)
        self.save = np.zeros(self.size)
        self.cost = np.zeros(self.size)
        for v, i in values.items():
            self.bytes[i] = v.aval.nbytes
            self.save[i] = 0.0 if v in self.input_index else model.save_cost(v, v in materialized)
        for e, j in eqns.items():
            self.cost[nx + j] = model.eqn_cost(e, arrays, self.producer)
        for k, v in enumerate(self.z):
            self.bytes[nx + ny + k] = -v.aval.nbytes
            self.save[nx + ny + k] = -self.save[values[v]]
        rows, cols, data = [], [], []

        def row(plus: int, minus: int) -> None:
            r = len(rows) // 2
            rows.extend((r, r))
            cols.extend((plus, minus))
            data.extend((1.0, -1.0))

        for e, j in eqns.items():
            for u in dict.fromkeys(e.inputs):
                if u in values:
                    row(nx + j, values[u])
        for k, v in enumerate(self.z):
            row(nx + ny + k, nx + eqns[self.producer[v]])
            row(nx + ny + k, values[v])
            if arrays_only and v not in materialized:   # not an array in the forward: never saved (x_v <= z_v)
                row(values[v], nx + ny + k)
        self.closure = (np.array(rows, int), np.array(cols, int), np.array(data), len(rows) // 2)
        self.lower = np.zeros(self.size)
        for v in self.needed:
            if v in values:
                self.lower[values[v]] = 1.0
        self.model, self.arrays = model, arrays

    def free(self, v: Var) -> bool:
        e = self.producer.get(v)
        return e is not None and not e.inputs

    def objective(self, per_byte_penalty: float = 0.0) -> np.ndarray:
        """Integer picoseconds: recompute cost + save cost (+ a Lagrange multiplier on the bytes)."""
        return np.round((self.cost + self.save + per_byte_penalty * self.bytes) * _SCALE)

    def solve(self, c: np.ndarray, extra: Sequence[tuple[np.ndarray, float]] = ()) -> tuple[np.ndarray, bool]:
        """argmin c.x over the closure constraints and the rows `extra` (a.x <= b); (x, proven optimal)."""
        from scipy import optimize, sparse  # (SciPy's optimizer loads only when a budget is planned)

        if not self.size:   # (nothing to choose: the backward reads no forward value)
            return np.zeros(0), True
        r, k, d, n = self.closure
        key = _digest(c, self.lower, r, k, d, np.array([n, MILP_TIME_LIMIT, _SOLVER_FORMAT]),
                      *(x for a, b in extra for x in (a, np.array([b]))))
        if key in _SOLVED:
            x, optimal = _SOLVED[key]
            return (None if x is None else x.copy()), optimal
        got = None if self.store is None else self.store.get(key, self.size)
        if got is not None and self.satisfies(got[0], extra):
            _remember(key, *got)
            return got[0].copy(), got[1]
        constraints = []
        if n:
            constraints.append(optimize.LinearConstraint(sparse.csr_array((d, (r, k)), shape=(n, self.size)), -np.inf, 0.0))
        for a, b in extra:
            constraints.append(optimize.LinearConstraint(a.reshape(1, -1), -np.inf, b))
        res = optimize.milp(c, integrality=np.ones(self.size), bounds=optimize.Bounds(self.lower, np.ones(self.size)),
                            constraints=constraints, options={"time_limit": MILP_TIME_LIMIT, "mip_rel_gap": 0.0})
        x, optimal = (None, False) if res.x is None else (np.round(res.x), res.status == 0)
        _remember(key, x, optimal)
        if self.store is not None and x is not None and optimal:   # (one cut short by the time limit: this process only)
            self.store.put(key, x, optimal)
        return x, optimal

    def satisfies(self, x: np.ndarray, extra: Sequence[tuple[np.ndarray, float]] = ()) -> bool:
        """Whether x (0/1, of this problem's size) meets its bounds, its closure rows and the rows `extra`."""
        r, k, d, n = self.closure
        if x.shape != (self.size,) or np.any(x < self.lower):
            return False
        rows = np.zeros(n)
        np.add.at(rows, r, d * x[k])
        return not np.any(rows > 1e-9) and all(float(a @ x) <= b + 1e-9 * max(1.0, abs(b)) for a, b in extra)

    def used_bytes(self, x: np.ndarray) -> int:
        return int(round(float(self.bytes @ x)))

    def plan(self, x: np.ndarray, solver: str, budget: int, smallest: int) -> Plan:
        """The plan a solution stands for, keeping only what the needed values reach: a needed
        value whose equation is re-run is recomputed (its operands needed in turn), else saved."""
        nx = len(self.values)
        rerun = {e for e, j in self.eqns.items() if x[nx + j] > 0.5}
        saved: list[Var] = []
        recomputed: set[Eqn] = set()
        seen: set[Var] = set()
        stack = list(self.needed)
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            e = self.producer.get(v)
            if self.free(v):      # a constant a re-run equation reads: made again, for nothing
                recomputed.add(e)
            elif e in rerun:
                if e not in recomputed:
                    recomputed.add(e)
                    stack.extend(e.inputs)
            else:
                saved.append(v)
        saved.sort(key=lambda v: (0, self.input_index[v]) if v in self.input_index else
                   (1, self.position[self.producer[v]], self.producer[v].outputs.index(v)))
        order = sorted(recomputed, key=self.position.__getitem__)
        return Plan(tuple(saved), tuple(order), int(sum(v.aval.nbytes for v in saved)),
                    float(sum(self.model.eqn_cost(e, self.arrays, self.producer) for e in order)), solver, budget, smallest)

    def describe(self, plan: Plan) -> str:
        parts = []
        for v in plan.saved[:6]:
            if v in self.input_index:
                parts.append(f"function input {self.input_index[v]} {v.aval}")
            else:
                e = self.producer[v]
                why = "" if recomputable(e) else " (not re-run by the planner)"
                parts.append(f"{e.primitive.name} output {v.aval}{why}")
        more = f", and {len(plan.saved) - 6} more" if len(plan.saved) > 6 else ""
        return ", ".join(parts) + more


def plan_residuals(fwd_eqns: Sequence[Eqn], inputs: Sequence[Var], needed: Sequence[Var], budget: int,
                   model: CostModel, materialized: set[Var], exact_limit: int = EXACT_LIMIT,
                   arrays: Collection[Var] = (), arrays_only: bool = False, store: SolutionStore | None = None) -> Plan:
    """Choose, for every value the backward pass reads, whether the forward saves it or the backward
    recomputes it from saved values, minimising the model's estimated cost with residual bytes <=
    `budget`; among the cheapest plans, the one with the fewest bytes (so a smaller budget never
    plans more bytes). Exact (scipy.optimize.milp, HiGHS) up to `exact_limit` variables; above it,
    the Lagrangian heuristic: the closure problem with the bytes priced at each of a fixed ladder of
    multipliers (each an integral linear program), and the cheapest-priced plan that fits.
    MemoryBudgetError when no plan fits.

    `arrays_only` (for a step that runs the forward and the backward fused, tk.grad): only the
    forward's arrays (`materialized`) are saved; elementwise values are remade from them. In a fused
    step, the loops that read an elementwise value compute it from the arrays it is made of, so
    "saving" it would keep those arrays alive and still do the work: the plan's bytes would not be
    what the step keeps, and its cost not what the step pays."""
    problem = _Problem(fwd_eqns, inputs, needed, model, materialized, arrays, arrays_only)
    problem.store = store
    cost = problem.objective()
    # the fewest bytes any plan saves (and the cheapest such plan)
    x_min, _ = problem.solve(problem.bytes)
    smallest = problem.used_bytes(x_min)
    if budget < smallest:
        x_small, _ = problem.solve(cost, [(problem.bytes, smallest)])
        least = problem.plan(x_small, "milp", smallest, smallest)
        raise MemoryBudgetError(
            f"{budget} bytes is below the smallest feasible budget, {smallest} bytes: the fewest "
            f"residual bytes any plan saves, since the backward must read {problem.describe(least)}. "
            f"Pass memory_budget={smallest} or more.", smallest, budget)
    if problem.size <= exact_limit:
        x, optimal = problem.solve(cost, [(problem.bytes, budget)])
        best = float(cost @ x)
        x2, optimal2 = problem.solve(problem.bytes, [(problem.bytes, budget), (cost, best + 0.5)])
        if x2 is not None:
            x, optimal = x2, optimal and optimal2
        plan = problem.plan(x, "milp" if optimal else "milp (time limit)", budget, smallest)
        if plan.residual_bytes <= budget:
            return plan
        # (HiGHS's answer, rounded, over the budget: never seen; the fewest-bytes plan always fits)
        return problem.plan(x_min, "milp (fewest bytes)", budget, smallest)
    ladder = [model.per_byte * 10.0 ** k for k in np.linspace(-3.0, 6.0, 28)]
    for penalty in ladder:   # the smallest multiplier whose plan fits: a fixed ladder, so smaller budgets never plan more bytes
        x, _ = problem.solve(problem.objective(penalty))
        if problem.used_bytes(x) <= budget:
            return problem.plan(x, "lagrangian", budget, smallest)
    x, _ = problem.solve(cost, [(problem.bytes, smallest)])
    return problem.plan(x, "lagrangian", budget, smallest)
