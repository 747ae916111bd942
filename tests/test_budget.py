"""memory_budget= on tk.grad, tk.value_and_grad and tk.vjp: the planner's guarantees, each tested.

Planned residual bytes never exceed the budget; a smaller budget never plans more bytes; values and
gradients are those without a budget (bit for bit on a backend, and against finite differences);
an infeasible budget raises MemoryBudgetError naming the smallest feasible one (which then works);
the saved state tk.vjp holds, measured in a process of its own, is the planned figure within 5%;
hand-placed recompute regions stay recomputed and a custom_gradient's residuals stay saved; random
draws are recomputed bit-exactly; the exact MILP and the Lagrangian heuristic (above the size limit)
both keep these promises; random programs (Hypothesis) too."""
import functools
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekern as tk
from tests.conftest import assert_tree_close, jit_on, to_host
from tests.test_property import instantiate, on_interpret, programs
from tracekern import budget as budget_room
from tracekern import remat

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def mlp_loss(ws, x):
    h = x
    for w in ws:
        h = np.tanh(h @ w)
    return np.sum(h * h) + np.sum(np.exp(-h))


def mlp_args(depth=4, width=12, batch=6):
    rng = np.random.default_rng(0)
    return [rng.standard_normal((width, width)) / np.sqrt(width) for _ in range(depth)], rng.standard_normal((batch, width))


def chain_loss(x):
    for k in range(6):
        x = np.sin(x) * 1.1 if k % 2 else np.tanh(x @ np.full((x.shape[1], x.shape[1]), 0.2))
    return np.sum(x * x)


FRACTIONS = (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3)


def sweep(f, args, mode="vjp"):
    """(budget fraction, split or None when infeasible) for FRACTIONS."""
    out = []
    for b in FRACTIONS:
        try:
            out.append((b, tk.make_ir(f, mode="vjp", memory_budget=b)(*args)))
        except tk.MemoryBudgetError:
            out.append((b, None))
    return out


@pytest.mark.parametrize("f, args", [(mlp_loss, mlp_args()), (chain_loss, (np.linspace(-1, 1, 24).reshape(4, 6),))])
def test_planned_bytes_fit_and_shrink_with_the_budget(f, args):
    unconstrained = tk.make_ir(f, mode="vjp")(*args).residual_bytes
    plans = sweep(f, args)
    feasible = [(b, s) for b, s in plans if s is not None]
    assert len(feasible) >= 3, "too few budgets to say anything"
    prev_bytes, prev_cost = None, None
    for b, s in feasible:
        assert s.memory_budget == int(b * unconstrained) and s.unconstrained_bytes == unconstrained
        assert s.residual_bytes <= s.memory_budget and s.residual_bytes >= s.smallest_budget
        assert s.solver == "milp" and s.recompute_cost >= 0
        if prev_bytes is not None:
            assert s.residual_bytes <= prev_bytes and s.recompute_cost >= prev_cost - 1e-15
        prev_bytes, prev_cost = s.residual_bytes, s.recompute_cost
    smallest = feasible[0][1].smallest_budget
    assert feasible[-1][1].residual_bytes < feasible[0][1].residual_bytes   # the sweep did make choices
    for b, s in plans:
        assert (s is None) == (int(b * unconstrained) < smallest)
    exact = tk.make_ir(f, mode="vjp", memory_budget=smallest)(*args)      # the smallest budget is feasible
    assert exact.residual_bytes == smallest
    # integer budgets between the fractions' plans: never more bytes for fewer
    ints = sorted({s.residual_bytes for _, s in feasible} | {smallest + 7, unconstrained - 1})
    got = [tk.make_ir(f, mode="vjp", memory_budget=n)(*args).residual_bytes for n in ints]
    assert all(g <= n for g, n in zip(got, ints)) and got == sorted(got)


def test_values_and_gradients_are_the_unconstrained_ones(backend):
    ws, x = mlp_args()
    want = jit_on(backend, tk.value_and_grad(mlp_loss, argnums=(0, 1)))(ws, x)
    # (each transform's own smallest budget: a grad step keeps only arrays, tk.vjp may keep more kinds)
    smallest = tk.value_and_grad(mlp_loss, argnums=(0, 1), memory_budget=1.0).lower(ws, x).memory.smallest_budget
    smallest_grad = tk.grad(mlp_loss, memory_budget=1.0).lower(ws, x).memory.smallest_budget
    smallest_vjp = tk.make_ir(mlp_loss, mode="vjp", memory_budget=1.0)(ws, x).smallest_budget
    for budget, grad_budget, vjp_budget in ((1.0,) * 3, (0.8,) * 3, (smallest, smallest_grad, smallest_vjp)):
        got = jit_on(backend, tk.value_and_grad(mlp_loss, argnums=(0, 1), memory_budget=budget))(ws, x)
        assert_tree_close(got, want, tol=0)                                 # bit for bit
        g = jit_on(backend, tk.grad(mlp_loss, memory_budget=grad_budget))(ws, x)
        assert_tree_close(g, want[1][0], tol=0)
        if backend != "cuda":
            out, pull = tk.vjp(mlp_loss, ws, x, memory_budget=vjp_budget, backend=backend)
            assert_tree_close((out, pull(np.float64(1.0))), want, tol=0)
    if backend == "cpu":   # and against central finite differences, at the smallest budget
        fx = lambda x: mlp_loss(ws, x)  # noqa: E731
        g = tk.grad(fx, memory_budget=tk.grad(fx, memory_budget=1.0).lower(x).memory.smallest_budget)(x)
        eps, fd = 1e-6, np.zeros_like(x)
        for i in np.ndindex(x.shape):
            d = np.zeros_like(x)
            d[i] = eps
            fd[i] = (mlp_loss(ws, x + d) - mlp_loss(ws, x - d)) / (2 * eps)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-8)


def test_an_infeasible_budget_names_the_smallest_feasible_one():
    ws, x = mlp_args()
    of_vjp = tk.make_ir(mlp_loss, mode="vjp", memory_budget=1.0)(ws, x).smallest_budget
    # (grad differentiates ws alone, so its backward reads less than tk.vjp's, which differentiates x too)
    of_grad = tk.grad(mlp_loss, memory_budget=1.0).lower(ws, x).memory.smallest_budget
    for call, smallest in ((lambda b: tk.grad(mlp_loss, memory_budget=b)(ws, x), of_grad),
                           (lambda b: tk.value_and_grad(mlp_loss, memory_budget=b).lower(ws, x), of_grad),
                           (lambda b: tk.vjp(mlp_loss, ws, x, memory_budget=b), of_vjp)):
        call(smallest)
        with pytest.raises(tk.MemoryBudgetError, match=r"smallest feasible budget, \d+ bytes.*memory_budget=\d+ or more"
                                                        r"(.|\n)*test_budget.py") as err:
            call(smallest - 1)
        assert isinstance(err.value, ValueError) and err.value.requested == smallest - 1
        assert str(err.value.smallest) in str(err.value) and "mlp_loss" in str(err.value)
    # what the backward must read: every weight it multiplies a cotangent by, and x
    with pytest.raises(tk.MemoryBudgetError) as err:
        tk.vjp(mlp_loss, ws, x, memory_budget=1)
    assert str(err.value).count("function input") >= 4 and "f64[12,12]" in str(err.value)
    # the smallest feasible budget of tk.vjp is what the backward reads at the least: the inputs here
    assert tk.vjp(mlp_loss, ws, x, memory_budget=of_vjp)[0] == mlp_loss(ws, x)
    with pytest.raises(ValueError, match=r"a float is a fraction in \(0, 1\]"):
        tk.grad(mlp_loss, memory_budget=1.5)
    with pytest.raises(TypeError, match="memory_budget must be bytes"):
        tk.vjp(mlp_loss, ws, x, memory_budget="1MB")
    with pytest.raises(ValueError, match="bytes must be >= 0"):
        tk.value_and_grad(mlp_loss, memory_budget=-1)


def test_lower_reports_the_plan():
    ws, x = mlp_args()
    plain = tk.value_and_grad(mlp_loss).lower(ws, x).memory
    assert plain.solver is None and plain.recompute_cost is None and plain.memory_budget is None
    f = tk.value_and_grad(mlp_loss, memory_budget=0.8)
    m = f.lower(ws, x).memory
    assert m.solver == "milp" and m.recompute_cost > 0 and m.residual_bytes <= m.memory_budget
    assert m.smallest_budget <= m.residual_bytes
    assert f.lower(ws, x).vjp.residual_bytes == m.residual_bytes           # the split the step runs
    assert "planned by milp under a budget" in str(f.lower(ws, x).vjp)
    jitted = tk.jit(f, backend="interpret").lower(ws, x).memory                # tk.jit of it reports the same plan
    assert (jitted.residual_bytes, jitted.solver, jitted.memory_budget) == (m.residual_bytes, m.solver, m.memory_budget)


def test_a_budget_planned_again_reuses_its_solutions(monkeypatch):
    """Tracing the same function under the same budget again (tk.vjp in a loop, a step's lower() then its call)
    asks the MILP solver nothing new: the plans are the same, from remembered solutions; another budget solves."""
    from scipy import optimize

    calls = []
    real = optimize.milp
    monkeypatch.setattr(optimize, "milp", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(remat, "_SOLVED", {})
    ws, x = mlp_args(depth=5, width=10)
    probe = tk.make_ir(mlp_loss, mode="vjp", memory_budget=1.0)(ws, x)
    top, low = probe.unconstrained_bytes, probe.smallest_budget
    assert low < top
    first = tk.make_ir(mlp_loss, mode="vjp", memory_budget=(top + low) // 2)(ws, x)
    solved = len(calls)
    assert solved >= 2
    again = tk.make_ir(mlp_loss, mode="vjp", memory_budget=(top + low) // 2)(ws, x)
    assert len(calls) == solved
    assert (again.residual_bytes, again.solver, [str(v.aval) for v in again.residuals]) == \
        (first.residual_bytes, first.solver, [str(v.aval) for v in first.residuals])
    other = tk.make_ir(mlp_loss, mode="vjp", memory_budget=low)(ws, x)
    assert len(calls) > solved and other.residual_bytes <= again.residual_bytes
    # (the oldest solutions go first beyond remat._SOLVED_MAX)
    monkeypatch.setattr(remat, "_SOLVED_MAX", 2)
    tk.make_ir(mlp_loss, mode="vjp", memory_budget=(top + 3 * low) // 4)(ws, x)
    assert len(remat._SOLVED) <= 2


def test_a_budget_solved_in_another_process_is_read_from_the_disk_cache(monkeypatch, tmp_path):
    """With the plan cache on, each proven-optimal MILP solution is also kept in the disk cache by the problem's
    digest (budget.SOLUTIONS): a new process (its in-process memo empty) planning the same budget reads it and asks
    HiGHS nothing, with the same plan; a file that fails its seal, or holds a solution that breaks its problem's
    constraints, is solved again and written anew; with the plan cache off, nothing is read or written."""
    from scipy import optimize

    from tracekern import backends, budget

    plans = tmp_path / "cache" / "plans"
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path / "cache"))
    calls, read = [], []
    real, load = optimize.milp, backends.load_plan
    monkeypatch.setattr(optimize, "milp", lambda *a, **k: calls.append(1) or real(*a, **k))
    monkeypatch.setattr(backends, "load_plan", lambda key: read.append(key) or load(key))
    monkeypatch.setattr(remat, "_SOLVED", {})
    ws, x = mlp_args(depth=5, width=10)

    def planned(budget):   # (a new function each time: nothing kept of an earlier trace)
        got = tk.make_ir(lambda ws, x: mlp_loss(ws, x), mode="vjp", memory_budget=budget)(ws, x)
        return got.residual_bytes, got.solver, [str(v.aval) for v in got.residuals]

    def new_process():
        monkeypatch.setattr(remat, "_SOLVED", {})
        read.clear()
        return len(calls)

    with tk.config.override(plan_cache=True):
        probe = tk.make_ir(mlp_loss, mode="vjp", memory_budget=1.0)(ws, x)
        target = (probe.unconstrained_bytes + probe.smallest_budget) // 2
        first = planned(target)
        files = sorted(plans.glob("milp-*"))
        assert calls and len(files) >= 2, (calls, files)
        solved = new_process()
        assert planned(target) == first and len(calls) == solved
        used = list(read)
        assert used and all(load(k) is not None for k in used)
        for f in files:   # (damaged: solved again, each file it needs written anew)
            f.write_bytes(f.read_bytes()[:-1])
        solved = new_process()
        assert planned(target) == first and len(calls) > solved
        assert all(load(k) is not None for k in used)
        size = len(load(used[0])) - 1   # (a planted solution, sealed but all zeros: it breaks the needed values' bounds)
        backends.save_plan(used[0], bytes(size + 1), what="a test's solution")
        solved = new_process()
        assert planned(target) == first and len(calls) > solved and load(used[0]) != bytes(size + 1)
    for f in plans.glob("milp-*"):
        f.unlink()
    solved = new_process()
    assert planned(target) == first and len(calls) > solved and not read and not list(plans.glob("milp-*"))
    assert budget.SOLUTIONS.get(b"x", 3) is None


def test_a_solution_cut_short_by_the_time_limit_is_kept_in_this_process_only(monkeypatch, tmp_path):
    """A MILP answer HiGHS did not prove optimal (its time limit) stays in the process's memo, never on disk: a
    slow moment must not fix a worse plan for every later process."""
    from scipy import optimize

    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path / "cache"))
    real = optimize.milp

    def cut_short(*a, **k):
        res = real(*a, **k)
        res.status = 1   # (HiGHS's "time limit reached", with its best answer so far)
        return res
    monkeypatch.setattr(optimize, "milp", cut_short)
    monkeypatch.setattr(remat, "_SOLVED", {})
    ws, x = mlp_args(depth=5, width=10)
    with tk.config.override(plan_cache=True):
        probe = tk.make_ir(lambda ws, x: mlp_loss(ws, x), mode="vjp", memory_budget=1.0)(ws, x)   # (a new function:
        got = tk.make_ir(lambda ws, x: mlp_loss(ws, x), mode="vjp",                            # nothing kept of
                         memory_budget=(probe.unconstrained_bytes + probe.smallest_budget) // 2)(ws, x)   # earlier traces)
    assert "time limit" in got.solver and remat._SOLVED
    assert not list((tmp_path / "cache" / "plans").glob("milp-*"))


def test_a_budgeted_grad_step_runs_the_plan():
    """The grad step under a budget is the plan's forward, then its backward: the equations it
    re-runs read saved values through barriers (so CSE cannot merge them back into the forward)."""
    ws, x = mlp_args()
    smallest = tk.grad(mlp_loss, memory_budget=1.0).lower(ws, x).memory.smallest_budget
    plan = tk.grad(mlp_loss, memory_budget=smallest).lower(ws, x).vjp
    assert plan.recompute_cost > 0 and plan.residual_bytes <= plan.memory_budget
    graph = tk.make_ir(mlp_loss, mode="value_and_grad", memory_budget=smallest)(ws, x)
    counts = graph.primitive_counts
    plain = tk.make_ir(mlp_loss, mode="value_and_grad")(ws, x).primitive_counts
    assert counts["remat_barrier"] >= 1 and "remat_barrier" not in plain
    assert counts["matmul"] > plain["matmul"]                                # re-run matmuls
    # each barrier comes just before the re-run that reads it, not at the start of the backward:
    # fusion places no work reading a barrier before it, and a re-run's array then lives only from
    # where the backward needs it (with all barriers first, the transformer's step peak rose 29%
    # above the unconstrained one at middle budgets, and its time with it)
    eqns = graph.eqns
    for i, e in enumerate(eqns):
        if e.primitive.name == "remat_barrier":
            j = i
            while eqns[j].primitive.name == "remat_barrier":
                j += 1
            assert any(v in eqns[j].inputs for b in eqns[i:j] for v in b.outputs), (i, j)


def test_a_fused_grad_step_keeps_only_the_forwards_arrays(monkeypatch):
    """tk.grad runs its plan as one fused step, where the loops that read an elementwise value
    compute it from the arrays it is made of: its plan saves only what the forward makes as arrays
    (inputs, matmul and reduction outputs, matmul operands), so its bytes are what the step keeps.
    tk.vjp's two halves are separate functions: its plan may save an elementwise value, at the same
    budget. Both fit the budget, and the values are those without one. (The cost model is pinned,
    with sin and tanh dearer to re-run than their bytes are to keep: the machine's own calibration
    decides that otherwise, and a fast vectorised sin, or a calibration taken on a busy machine,
    makes re-running every value the cheaper plan.)"""
    monkeypatch.setattr(budget_room, "cost_model",
                        lambda: remat.CostModel(per_element={"sin": 2e-8, "tanh": 2e-8}, origin="test"))
    def chain(x):
        for _ in range(6):
            x = np.sin(np.tanh(x)) * np.float32(1.5)
        return np.sum(x)

    x = np.linspace(-1, 1, 4096, dtype=np.float32)
    budget = 64 * x.nbytes
    step = tk.grad(chain, memory_budget=budget)
    fused = step.lower(x).vjp
    assert fused.residual_bytes == x.nbytes and fused.residuals == tuple(fused.forward.inputs)
    split = tk.make_ir(chain, mode="vjp", memory_budget=budget)(x)
    assert x.nbytes < split.residual_bytes <= budget, "tk.vjp saves elementwise values when the budget allows"
    np.testing.assert_array_equal(step(x), tk.grad(chain)(x))

    ws, xm = mlp_args()
    top = tk.value_and_grad(mlp_loss, memory_budget=1.0).lower(ws, xm).memory
    for budget in (1.0, (top.residual_bytes + top.smallest_budget) // 2, top.smallest_budget):
        plan = tk.value_and_grad(mlp_loss, memory_budget=budget).lower(ws, xm).vjp
        producer = {v: e for e in plan.forward.eqns for v in e.outputs}
        arrays = remat.backward_arrays(plan.forward.eqns, plan.forward.eqns)
        for v in plan.residuals:
            e = producer.get(v)
            assert e is None or e.primitive.fusion not in ("elementwise", "view") or v in arrays, (budget, e)


def test_a_rerun_keeps_its_literal_operands():
    """A re-run in a budgeted grad step reads forward values through barriers, but not constants:
    (h - mean) ** 2 re-run in the backward still renders as a product, not as pow (through a
    barrier the exponent was no literal, and the layernorm re-runs of a transformer took 5 times as
    long). Both the barrier and the renderer see through to the literal."""
    rng = np.random.default_rng(3)
    w1, w2, x = rng.standard_normal((16, 16)), rng.standard_normal((16, 16)), rng.standard_normal((32, 16))

    def f(w1, w2, x):
        h = x @ w1
        c = h - np.mean(h, axis=1, keepdims=True)
        v = np.mean(c ** 2, axis=1, keepdims=True)
        return np.sum(np.tanh(c / np.sqrt(v + 1e-5)) @ w2)

    smallest = tk.grad(f, memory_budget=1.0).lower(w1, w2, x).memory.smallest_budget
    step = tk.jit(tk.grad(f, argnums=(0, 1, 2), memory_budget=smallest))
    low = step.lower(w1, w2, x)
    assert low.ir.primitive_counts["pow"] >= 2                     # the forward's and the re-run
    assert "pow_f64" not in low.source
    assert_tree_close(step(w1, w2, x), tk.grad(f, argnums=(0, 1, 2))(w1, w2, x), tol=0)


def test_hand_placed_annotations_are_respected():
    ws, x = mlp_args()
    layer = tk.recompute(lambda h, w: np.tanh(h @ w))

    def regions(ws, x):
        h = x
        for w in ws:
            h = layer(h, w)
        return np.sum(h * h)

    @tk.custom_gradient
    def scaled_exp(x):
        e = np.exp(x)
        return e * 2.0, lambda dy: dy * e * 2.0

    def custom(ws, x):
        return np.sum(scaled_exp(mlp_loss(ws, x) * 0.01 + x))

    smallest = tk.make_ir(regions, mode="vjp", memory_budget=1.0)(ws, x).smallest_budget
    for budget in (1.0, smallest):
        split = tk.make_ir(regions, mode="vjp", memory_budget=budget)(ws, x)
        barriers = [e for e in split.backward.eqns if e.primitive.name == "remat_barrier"]
        assert len(barriers) >= len(ws)                                       # each region still re-runs
        producers = {v: e for e in split.forward.eqns for v in e.outputs}
        assert all(producers[v].primitive.name == "recompute_call" for v in split.residuals if v in producers)
    smallest = tk.grad(regions, memory_budget=1.0).lower(ws, x).memory.smallest_budget
    assert_tree_close(tk.grad(regions, memory_budget=smallest)(ws, x), tk.grad(regions)(ws, x), tol=0)
    split = tk.make_ir(custom, mode="vjp", memory_budget=1.0)(ws, x)
    producers = {v: e for e in split.forward.eqns for v in e.outputs}
    residual = [v for v in split.residuals if v in producers and producers[v].primitive.name == "custom_vjp_call"]
    assert residual, "the custom_gradient's residual (e) is saved"
    with pytest.raises(tk.MemoryBudgetError, match=r"custom_vjp_call output f64\[6,12\] \(not re-run by the planner\)"):
        tk.make_ir(custom, mode="vjp", memory_budget=1)(ws, x)
    assert_tree_close(tk.grad(custom, memory_budget=1.0)(ws, x), tk.grad(custom)(ws, x), tol=0)


def test_random_draws_are_recomputed_bit_exactly(backend):
    ws, x = mlp_args()
    k = tk.random.key(2)

    def dropped(ws, x):
        h = x
        for i, w in enumerate(ws):
            keep = tk.random.bernoulli(tk.random.fold_in(k, i), 0.7, (x.shape[0], w.shape[1]))
            h = np.where(keep, np.tanh(h @ w) / 0.7, 0.0)
        return np.sum(h * h)

    want = jit_on(backend, tk.value_and_grad(dropped))(ws, x)
    smallest = tk.value_and_grad(dropped, memory_budget=1.0).lower(ws, x).memory.smallest_budget
    got = jit_on(backend, tk.value_and_grad(dropped, memory_budget=smallest))(ws, x)
    assert_tree_close(got, want, tol=0)
    assert "random_bits" in tk.value_and_grad(dropped, memory_budget=smallest).lower(ws, x).vjp.backward.primitive_counts
    smallest = tk.make_ir(dropped, mode="vjp", memory_budget=1.0)(ws, x).smallest_budget
    split = tk.make_ir(dropped, mode="vjp", memory_budget=smallest)(ws, x)
    assert "random_bits" in split.backward.primitive_counts               # the masks are drawn again


def test_the_lagrangian_heuristic_above_the_size_limit(monkeypatch):
    ws, x = mlp_args()
    exact = sweep(mlp_loss, (ws, x))
    monkeypatch.setattr(remat, "EXACT_LIMIT", 0)
    heuristic = sweep(lambda ws, x: mlp_loss(ws, x), (ws, x))     # (a new function: nothing cached)
    prev = None
    for (_, e), (_, h) in zip(exact, heuristic):
        assert (e is None) == (h is None)
        if h is None:
            continue
        assert h.solver == "lagrangian" and h.residual_bytes <= h.memory_budget
        assert h.recompute_cost + 1e-15 >= e.recompute_cost or h.residual_bytes < e.residual_bytes
        if prev is not None:
            assert h.residual_bytes <= prev
        prev = h.residual_bytes
    f = tk.grad(lambda ws, x: mlp_loss(ws, x), memory_budget=0.8)
    assert_tree_close(f(ws, x), tk.grad(mlp_loss)(ws, x), tol=0)
    assert f.lower(ws, x).memory.solver == "lagrangian"


@st.composite
def graphs(draw):
    """A small random forward graph (elementwise, matmul and reduction equations on two inputs), the
    values its backward reads, a budget, a cost model, and the values a whole-array kernel of the
    backward reads (which pay a kernel boundary when they are recomputed)."""
    from tracekern.ir import Aval, Eqn, Var
    from tracekern.primitives import REGISTRY
    n = draw(st.sampled_from([4, 8]))
    F64 = np.dtype("float64")
    inputs = [Var(Aval((n, n), F64)), Var(Aval((n,), F64))]
    pool, eqns = list(inputs), []
    for _ in range(draw(st.integers(2, 7))):
        op = draw(st.sampled_from(["exp", "sin", "mul", "matmul", "reduce_sum", "add"]))
        a = draw(st.sampled_from(pool))
        if op in ("exp", "sin"):
            out = Var(a.aval)
            eqns.append(Eqn(REGISTRY[op], (a,), (out,), {}))
        elif op in ("mul", "add"):
            b = draw(st.sampled_from([v for v in pool if v.shape in (a.shape, (n,))]))
            out = Var(Aval(np.broadcast_shapes(a.shape, b.shape), F64))
            eqns.append(Eqn(REGISTRY[op], (a, b), (out,), {}))
        elif op == "matmul" and a.shape == (n, n):
            b = draw(st.sampled_from([v for v in pool if v.shape == (n, n)]))
            out = Var(Aval((n, n), F64))
            eqns.append(Eqn(REGISTRY[op], (a, b), (out,), {}))
        elif op == "reduce_sum" and a.shape == (n, n):
            out = Var(Aval((n,), F64))
            eqns.append(Eqn(REGISTRY[op], (a,), (out,), {"axes": (1,)}))
        else:
            continue
        pool.append(out)
    needed = draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4, unique_by=id))
    model = remat.CostModel(per_element={"exp": draw(st.sampled_from([1e-10, 1e-8])), "sin": 3e-9},
                            arithmetic=draw(st.sampled_from([1e-11, 1e-9])), per_byte=draw(st.sampled_from([1e-11, 1e-9])),
                            per_flop=1e-10)
    materialized = {v for e in eqns if e.primitive.name in ("matmul", "reduce_sum") for v in e.outputs}
    arrays = set(draw(st.lists(st.sampled_from(pool), max_size=3, unique_by=id)))
    return eqns, inputs, needed, model, materialized, arrays, draw(st.integers(0, 2000))


def brute_force(eqns, inputs, needed, model, materialized, arrays, budget, arrays_only=False):
    """(objective, bytes) of the best plan by enumeration: every set of saved values, the needed
    values not saved recomputed from their operands (when they can be), lexicographic min."""
    import itertools
    producer = {v: e for e in eqns for v in e.outputs}
    values = list(inputs) + [v for e in eqns for v in e.outputs]
    best = None
    for r in range(len(values) + 1):
        for saved in itertools.combinations(values, r):
            saved = set(saved)
            if arrays_only and any(v in producer and v not in materialized for v in saved):
                continue      # (a fused step keeps only the forward's arrays)
            rerun, ok, stack = set(), True, list(needed)
            while stack and ok:
                v = stack.pop()
                if v in saved:
                    continue
                e = producer.get(v)
                if e is None:
                    ok = False
                elif e not in rerun:
                    rerun.add(e)
                    stack.extend(e.inputs)
            size = sum(v.aval.nbytes for v in saved)
            if not ok or size > budget:
                continue
            cost = sum(model.eqn_cost(e, arrays, producer) for e in rerun) + sum(
                0.0 if v in inputs else model.save_cost(v, v in materialized) for v in saved)
            key = (round(cost * 1e12), size)
            best = key if best is None or key < best else best
    return best


@settings(max_examples=80, deadline=None)
@given(graphs(), st.booleans())
def test_the_milp_finds_the_best_plan(graph, arrays_only):
    """On small random graphs the MILP's plan is the enumeration's best (cheapest, then fewest bytes);
    the Lagrangian heuristic's fits the budget and costs no less; an infeasible budget says so. Also
    for a fused step's plan (arrays_only: only the forward's arrays are saved)."""
    eqns, inputs, needed, model, materialized, arrays, budget = graph
    want = brute_force(eqns, inputs, needed, model, materialized, arrays, budget, arrays_only)
    plan_residuals = functools.partial(remat.plan_residuals, arrays_only=arrays_only)

    def objective(plan):
        return round((plan.recompute_cost + sum(0.0 if v in inputs else model.save_cost(v, v in materialized)
                                                for v in plan.saved)) * 1e12)
    if want is None:
        with pytest.raises(tk.MemoryBudgetError) as err:
            plan_residuals(eqns, inputs, needed, budget, model, materialized, arrays=arrays)
        assert err.value.smallest > budget
        assert brute_force(eqns, inputs, needed, model, materialized, arrays, err.value.smallest, arrays_only) is not None
        return
    plan = plan_residuals(eqns, inputs, needed, budget, model, materialized, arrays=arrays)
    assert plan.solver == "milp" and plan.residual_bytes <= budget
    assert abs(objective(plan) - want[0]) <= 2 and plan.residual_bytes == want[1]
    heuristic = plan_residuals(eqns, inputs, needed, budget, model, materialized, exact_limit=0, arrays=arrays)
    assert heuristic.solver == "lagrangian" and heuristic.residual_bytes <= budget
    assert objective(heuristic) >= want[0] - 2


def test_the_cost_model_prices_a_kernel_boundary():
    """A recomputed elementwise value that a backward matmul reads (here through a transpose) must
    become an array there: re-running it costs a write and a read of its bytes more; a matmul's
    output is an array anyway; a re-run reduction reads its input."""
    from tracekern.ir import Aval, Eqn, Var
    from tracekern.primitives import REGISTRY
    F32 = np.dtype("float32")
    x, w, dy = (Var(Aval((8, 8), F32)) for _ in range(3))
    h, z, hT, dw, s, t = (Var(Aval((8, 8), F32)) for _ in range(6))
    r = Var(Aval((8,), F32))
    tanh = Eqn(REGISTRY["tanh"], (x,), (h,), {})
    mm = Eqn(REGISTRY["matmul"], (h, w), (z,), {})
    red = Eqn(REGISTRY["reduce_sum"], (z,), (r,), {"axes": (1,)})
    exp = Eqn(REGISTRY["exp"], (x,), (s,), {})
    back = [Eqn(REGISTRY["transpose"], (h,), (hT,), {"perm": (1, 0)}), Eqn(REGISTRY["matmul"], (hT, dy), (dw,), {}),
            Eqn(REGISTRY["mul"], (s, dy), (t,), {})]
    arrays = remat.backward_arrays([tanh, mm, red, exp], back)
    assert h in arrays and s not in arrays and z not in arrays
    model = remat.CostModel(per_element={"tanh": 1e-9}, arithmetic=1e-10, per_byte=1e-11, per_flop=1e-12)
    assert model.eqn_cost(tanh, arrays) == pytest.approx(model.eqn_cost(tanh) + 2 * h.aval.nbytes * 1e-11)
    assert model.eqn_cost(exp, arrays) == model.eqn_cost(exp)
    assert model.eqn_cost(mm, {z}) == model.eqn_cost(mm)
    assert model.eqn_cost(red) == pytest.approx(64 * 1e-10 + (z.aval.nbytes + r.aval.nbytes) * 1e-11)


def test_the_cost_model_prices_what_fusion_renders():
    """x ** 2 with a literal exponent renders as x * x: priced as arithmetic, not as libm's pow (which
    made a layernorm's variance the dearest thing to recompute in a transformer); a literal
    exponent without a cheaper expression, or an array exponent, is pow; x ** 2 inside a recompute
    region's body is arithmetic too."""
    from tracekern.ir import Aval, Eqn, Graph, Var
    from tracekern.primitives import REGISTRY
    F32 = np.dtype("float32")
    x, y, c, d, e_ = (Var(Aval((4, 4), F32)) for _ in range(5))
    two, half = Var(Aval((), F32)), Var(Aval((), F32))
    k2 = Eqn(REGISTRY["const"], (), (two,), {"value": np.float32(2.0)})
    k5 = Eqn(REGISTRY["const"], (), (half,), {"value": np.float32(2.5)})
    sq = Eqn(REGISTRY["pow"], (x, two), (c,), {})
    odd = Eqn(REGISTRY["pow"], (x, half), (d,), {})
    arr = Eqn(REGISTRY["pow"], (x, y), (e_,), {})
    producer = {two: k2, half: k5}
    model = remat.CostModel(per_element={"pow": 2e-8}, arithmetic=1e-10, per_byte=0.0, per_flop=0.0)
    assert model.eqn_cost(sq, (), producer) == pytest.approx(16 * 1e-10)
    assert model.eqn_cost(odd, (), producer) == pytest.approx(16 * 2e-8)
    assert model.eqn_cost(arr, (), producer) == pytest.approx(16 * 2e-8)
    assert model.eqn_cost(sq) == pytest.approx(16 * 2e-8)     # (no producers given: the literal is unknown)
    region = Eqn(REGISTRY["recompute_call"], (x,), (c,), {"body": Graph((x,), (k2, sq), (c,))})
    assert model.eqn_cost(region) == pytest.approx(16 * 1e-10)


def test_measured_saved_state_of_vjp_matches_the_plan():
    """In a process of its own (glibc returning freed memory at once): the resident memory that
    tk.vjp's saved state holds is the planned saved_bytes within 5%, at several budgets."""
    script = textwrap.dedent("""
        import ctypes, gc, json, os, sys
        import numpy as np
        import tracekern as tk
        tk.config.keep_buffers = False   # (a step's kept buffers and its results' memory would be resident before)
        libc = ctypes.CDLL("libc.so.6")
        libc.mallopt(-3, 16384); libc.mallopt(-1, 0)
        page = os.sysconf("SC_PAGE_SIZE")
        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * page
        def loss(x, w):
            h = x
            for _ in range(4):
                h = np.tanh(h @ w) + h
            return np.sum(np.sin(h) * h)
        x = np.random.default_rng(0).standard_normal((1024, 512)).astype(np.float32)
        w = (np.random.default_rng(1).standard_normal((512, 512)) / 23).astype(np.float32)
        out = []
        for budget in (1.0, 0.75, 0.5, 0.3):
            split = tk.make_ir(loss, mode="vjp", memory_budget=budget)(x, w)
            for _ in range(2):   # compile, and warm up the allocator (and what a step sets up on its first calls)
                held = tk.vjp(loss, x, w, memory_budget=budget)
                del held
            gc.collect(); libc.malloc_trim(0)
            before = rss()
            held = tk.vjp(loss, x, w, memory_budget=budget)
            gc.collect()
            out.append((budget, split.saved_bytes, rss() - before))
            del held
        print(json.dumps(out))
    """)
    # (one thread: the thread budget follows the machine's load, and a BLAS thread's first GEMM allocates
    # its own buffers, which a busy neighbour made show up in the measured call)
    env = dict(os.environ, PYTHONPATH=ROOT, TRACEKERN_NUM_THREADS="1")
    res = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    rows = json.loads(res.stdout.strip().splitlines()[-1])
    assert len({planned for _, planned, _ in rows if planned > 1 << 20}) >= 3, rows   # different plans, MBs each
    for budget, planned, measured in rows:
        assert abs(measured - planned) <= 0.05 * max(planned, 1 << 20), (budget, planned, measured)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.lists(st.floats(0.05, 1.0), min_size=3, max_size=5))
def test_random_programs_under_random_budgets(program, fractions):
    f, args = instantiate(program)
    argnums = tuple(range(len(args)))
    with on_interpret():
        want = tk.grad(f, argnums=argnums)(*args)
        assert tk.grad(f, argnums=argnums, memory_budget=1.0).lower(*args).memory.residual_bytes >= 0   # 1.0 fits
        prev = prev_step = None
        for b in sorted(fractions, reverse=True):
            try:
                split = tk.make_ir(f, mode="vjp", memory_budget=b)(*args)
            except tk.MemoryBudgetError as err:
                assert err.smallest > err.requested
            else:
                assert split.residual_bytes <= split.memory_budget
                if prev is not None:
                    assert split.residual_bytes <= prev
                prev = split.residual_bytes
            step = tk.grad(f, argnums=argnums, memory_budget=b)      # (its own plan: only arrays)
            try:
                plan = step.lower(*args).vjp
            except tk.MemoryBudgetError as err:
                assert err.smallest > err.requested
                continue
            assert plan.residual_bytes <= plan.memory_budget
            if prev_step is not None:
                assert plan.residual_bytes <= prev_step
            prev_step = plan.residual_bytes
            for g, w in zip(step(*args), want):
                np.testing.assert_array_equal(g, w)


# -- bench/budget.py (the main job's budget section) ----------------------------------------------------
def _row(label, kind, residual, time_s):
    return {"workload": "w", "tool": "tracekern", "kind": kind, "label": label, "residual_bytes": residual,
            "saved_state_bytes": residual, "peak_bytes": 2 * residual, "time_s": time_s, "time_min_s": time_s * 0.9,
            "time_max_s": time_s * 1.1, "cpu_s": time_s, "cpu_min_s": time_s, "cpu_max_s": time_s,
            "solver": "milp" if kind == "budget" else None, "recompute_cost_s": 0.0}


def test_the_budget_benchmark_plans_its_sweep_and_checks_its_targets(tmp_path):
    from bench import budget

    with open(os.path.join(ROOT, "bench", "__main__.py")) as f:    # (importing it would run the main job)
        assert "budget.SECTION" in f.read(), "the main job runs the budget section"

    info = budget.plan("mlp", "test")        # (traces only)
    points = info["budgets"]
    assert len(points) == budget.POINTS["test"] == budget.POINTS["full"] >= 8 and points == sorted(points, reverse=True)
    assert 5 <= budget.POINTS["quick"] < budget.POINTS["full"]
    assert points[0] == info["top_bytes"] >= info["unconstrained_bytes"] and points[-1] == info["smallest_bytes"] > 0
    # the chain's fused step has one plan (it keeps its input: elementwise values are remade in the
    # loops): one point
    info = budget.plan("chain", "test")
    assert info["budgets"] == [info["smallest_bytes"]] == [info["top_bytes"]] == [256 * 4]
    # the points compiled ahead of the timing process, split between two processes: every point once
    configs = budget._configs(budget._workload("chain", "test")[0], info["budgets"])
    assert list(configs)[-1] == f"budget {256 * 4}" and len(configs) >= 2
    assert [budget.warm("chain", "test", info["budgets"], k, 2)["points"] for k in range(2)] == \
        [len(configs) - len(configs) // 2, len(configs) // 2]
    # the main job with --only naming none of the section's workloads: no rows, the lanes' jobs of later sections run
    from argparse import Namespace

    from bench.harness import Job
    lane = [Job("count", lambda: 7, timing=False)]
    options = Namespace(only=["rnn"], tools=["tracekern"], quick=False, test=True, lane_jobs=lane, lane_results={})
    result = budget.run(options)
    assert result["rows"] == [] and options.lane_results == {"count": 7}
    # the targets: a curve that keeps more at a smaller budget, or runs faster, is named; so is a budget
    # that is slower than a hand-placed strategy keeping no more memory
    good = [_row("none", "hand-placed", 100, 1.0), _row("b100", "budget", 100, 1.0), _row("b50", "budget", 50, 1.2)]
    notes = budget._targets(good, ["w"])
    assert notes[0].startswith("the targets compare the CPU time per step: the ratio of the medians")
    assert notes[1].startswith("w: the curve is monotone") and "at 1 of the 1 budgets" in notes[2]
    assert "not at" not in notes[2]
    bad = [_row("rec", "hand-placed", 40, 1.0), _row("b100", "budget", 100, 1.5), _row("b50", "budget", 60, 1.2),
           _row("b40", "budget", 40, 2.0)]
    notes = budget._targets(bad, ["w"])
    assert "not monotone" in notes[1] and "b50 runs faster" in notes[1]
    assert "at 0 of the 3 budgets" in notes[2] and "b40 2.00x rec" in notes[2]
    assert budget._targets([dict(r, cpu_s=None) for r in bad], ["w"])[0].startswith(
        "the targets compare the wall time per step")
    # with the rounds of one process, two points compare round by round: a load that slows one round
    # slows both, and the medians of their times alone would mislead
    load = [1.0, 3.0, 1.2, 2.5, 1.1, 2.8, 1.05, 2.9, 1.15]
    rounds = [_row("none", "hand-placed", 100, 1.0), _row("b100", "budget", 100, 1.0), _row("b90", "budget", 100, 1.0)]
    for r, times in zip(rounds, (load, [t * 1.01 for t in load], [t * 1.05 for t in load])):
        r["cpu_rounds"], r["cpu_s"] = times, float(np.median(times))
    notes = budget._targets(rounds, ["w"])
    assert "the ratio of two points' times in the same round" in notes[0]
    assert "b100 1.01x [1.01-1.01] none" in notes[2], notes[2]
    # b90 takes 5% longer than none in every round: a miss, and its 2% difference from b100's a tie
    assert "not at: b90 1.05x [1.05-1.05] none" in notes[2] and "monotone (" in notes[1], notes
    ratio, lo, hi = budget.paired_ratio([2.0, 4.0, 2.2], [1.0, 2.0, 1.0])
    assert ratio == 2.0 and lo <= ratio <= hi <= 2.2
    result = {"size": "test", "rows": bad, "notes": notes}
    assert "b40" in budget.table(result) and "| w | tracekern | b40 |" in budget.markdown(result)
    assert budget.cpu_times({"f": lambda: sum(range(1000))}, 3)["f"]["cpu_s"] >= 0
    try:
        import matplotlib  # noqa: F401
    except ImportError:                 # without matplotlib the section says so and draws nothing
        assert budget.plot(result, str(tmp_path / "budget.png")) is None and not (tmp_path / "budget.png").exists()
    else:
        assert budget.plot(result, str(tmp_path / "budget.png")) and (tmp_path / "budget.png").stat().st_size > 0


def test_processes_starting_together_share_one_calibration(tmp_path, monkeypatch):
    """Two processes (here threads, each with its own lock file handle) that find no calibration measure
    one at a time: the second reads the first one's table instead of measuring, and a table written is
    never replaced (the planner's choices, and so a plan's kernels, follow from it: two tables made two
    sets of kernels for one program, and the main job compiled the transformer twice)."""
    import threading
    import time

    from tracekern.backends import calibrate

    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACEKERN_CALIBRATE", raising=False)
    measured = []

    def measure():
        measured.append(threading.get_ident())
        time.sleep(0.3)
        return {"per_element": {}, "arithmetic": 1e-11 * len(measured), "per_byte": 1e-10, "per_flop": 1e-11,
                "origin": f"measurement {len(measured)}"}

    monkeypatch.setattr(calibrate, "measure", measure)
    got = []
    threads = [threading.Thread(target=lambda: got.append(calibrate.cost_table.__wrapped__())) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(measured) == 1 and len(got) == 2 and got[0] == got[1] == calibrate.cost_table.__wrapped__()
    assert got[0]["origin"] == "measurement 1"
    (written,) = (tmp_path / "cache").glob("calibration-*.json")
    assert json.loads(written.read_text())["origin"] == "measurement 1"


def test_a_file_system_that_refuses_locks_still_gets_a_calibration(tmp_path, monkeypatch):
    """Where flock fails (some network file systems), the calibration is measured and written without
    the lock instead of failing the planner."""
    import fcntl

    from tracekern.backends import calibrate

    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRACEKERN_CALIBRATE", raising=False)
    monkeypatch.setattr(calibrate, "measure", lambda: {"per_element": {}, "arithmetic": 1e-11, "per_byte": 1e-10,
                                                       "per_flop": 1e-11, "origin": "no lock"})

    def refuse(fd, op):
        raise OSError(37, "No locks available")
    monkeypatch.setattr(fcntl, "flock", refuse)
    assert calibrate.cost_table.__wrapped__()["origin"] == "no lock"
    (written,) = (tmp_path / "cache").glob("calibration-*.json")
    assert json.loads(written.read_text())["origin"] == "no lock"


def test_a_vjp_input_modified_in_place_before_the_pullback_is_an_error_not_a_wrong_gradient(backend):
    """A compiled forward keeps the caller's input arrays the pullback reads as they are (no copy); at
    the smallest budget the pullback recomputes from them. Modified in place between the two halves,
    they gave a silently wrong gradient on cpu (the interpreter's oracle, which copies, the right one).
    Now the pullback raises naming the argument, or (where no input is kept as it is) gives the
    gradient at the forward's inputs."""
    ws, x = mlp_args(depth=2, width=4, batch=3)
    f = lambda x, w: mlp_loss([w, w], x)  # noqa: E731
    w = ws[0]
    want = tk.jit(tk.value_and_grad(f, argnums=(0, 1)), backend="interpret")(x, w)
    smallest = tk.make_ir(f, mode="vjp", memory_budget=1.0)(x, w).smallest_budget
    for budget in (None, smallest):
        xc, wc = x.copy(), w.copy()
        out, pull = tk.vjp(f, xc, wc, memory_budget=budget, backend=backend)
        assert_tree_close(to_host((out, pull(np.float64(1.0)))), want, tol=1e-12)
        xc += 1.0
        try:
            got = pull(np.float64(1.0))
        except tk.TracekernError as err:
            assert "argument 0 ('x')" in str(err) and "modified in place" in str(err) and "test_budget.py" in str(err)
        else:   # (the interpreter and cuda keep their own copies: the host's arrays are not read again)
            assert backend != "cpu", "the compiled pullback read the modified input without an error"
            assert_tree_close(to_host(got), want[1], tol=1e-12)
