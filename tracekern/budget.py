"""Memory budgets on this machine: the memory planner (remat) given the machine's cost model and the
arrays a fused step makes; plan_split and budgeted, a joint graph split or rejoined under a budget.

It sits beside remat.py, not in it: the cost figures and the fused arrays come from the backends
(backends.cost_table, fusion.plan), which remat, a transform, never imports."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from . import autodiff, backends, passes, remat
from .arguments import fun_name
from .backends import fusion
from .errors import MemoryBudgetError, with_location
from .ir import Graph
from .settings import config


@functools.cache
def cost_model() -> remat.CostModel:
    """The memory planner's cost model for this machine (measured once: backends/calibrate.py)."""
    return remat.CostModel(**backends.cost_table())


def forward_arrays(graph: Graph) -> set:
    """The values fusion makes as arrays when it runs `graph` (buffers and constants), e.g. a
    transformer's residual stream, which many loops read: what a fused step can keep without
    keeping the arrays it is made of."""
    inlined, rename = passes.inline_calls_renamed(graph)
    plan = fusion.plan(inlined)
    made = set(plan.buffers) | set(plan.consts)
    return {v for e in graph.eqns for v in e.outputs if rename.get(v, v) in made}


class _DiskSolutions:
    """The planner's MILP solutions in the disk cache, beside the plan cache's finished steps (off with
    tk.config.plan_cache), by the problem's digest and the SciPy that solved it: a budget solved in one
    process is read, not solved, in the next. A file holds the solution's 0/1 entries, then whether HiGHS
    proved it optimal (always, as remat puts only those): bytes, no pickle; remat checks a solution against
    its problem's constraints before using it."""

    @staticmethod
    def _key(key: bytes) -> str:
        import scipy

        return f"milp-{key.hex()}-scipy{scipy.__version__}"

    def get(self, key: bytes, size: int) -> tuple[np.ndarray, bool] | None:
        if not config.plan_cache:
            return None
        data = backends.load_plan(self._key(key))
        if data is None or len(data) != size + 1 or not set(data) <= {0, 1}:
            return None
        return np.frombuffer(data[:size], np.uint8).astype(np.float64), bool(data[size])

    def put(self, key: bytes, x: np.ndarray, optimal: bool) -> None:
        if config.plan_cache and np.all((x == 0) | (x == 1)):
            backends.save_plan(self._key(key), x.astype(np.uint8).tobytes() + bytes([bool(optimal)]),
                               what="the memory plan's solution")


SOLUTIONS = _DiskSolutions()


def plan_split(fun: Callable, joint: Graph, num_primals: int, num_outputs: int,
               memory_budget: int | float | None, fused: bool = False) -> remat.SplitVJP:
    """remat.split_joint of a joint graph, planned under memory_budget when one is given (`fused`: for
    a step that runs both passes fused, remat.rejoin); an infeasible budget raises MemoryBudgetError
    naming the function, the smallest feasible budget and the user's line."""
    if memory_budget is None:
        return remat.split_joint(joint, num_primals, num_outputs)
    try:
        return remat.split_joint(joint, num_primals, num_outputs, memory_budget, cost_model(), fused=fused,
                                 arrays_of=forward_arrays if fused else None, store=SOLUTIONS)
    except MemoryBudgetError as err:
        asked = f"memory_budget={memory_budget!r}" + (f" ({err.requested} bytes)" if isinstance(memory_budget, float) else "")
        raise MemoryBudgetError(with_location(f"{fun_name(fun)}: {asked}: {err}"), err.smallest, err.requested) from None


def budgeted(fun: Callable, joint: autodiff.JointVJP,
             memory_budget: int | float | None) -> tuple[autodiff.JointVJP, remat.SplitVJP | None]:
    """The joint graph run as the planner's forward then backward (remat.rejoin) when there is a
    memory budget (the residuals the backward reads are the plan's), and the plan."""
    if memory_budget is None:
        return joint, None
    split = plan_split(fun, passes.simplify(joint.graph), joint.num_primals, joint.num_outputs, memory_budget,
                       fused=True)
    return dataclasses.replace(joint, graph=remat.rejoin(split), num_forward=len(split.forward.eqns)), split
