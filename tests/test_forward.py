"""Forward mode: tk.jvp and tk.linearize.

Every JVP rule is checked through the coverage table (tests/numpy_cases.py): each family's
differentiable rows run as one program per backend and dtype, whose tangent is compared with
central finite differences of NumPy's own function along the same direction, and with reverse mode
through the identity <w, J u> = <J^T w, u> (tk.jvp and tk.vjp in one compiled step). Then every
control-flow construct and annotation, custom_gradient by linearity, linearize's reuse of the point,
the compositions with jit and grad, make_ir's listing and the errors."""
import functools

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import assert_tree_close, to_host
from tests.numpy_cases import FAMILIES
from tests.test_numpy import _cotangent, _data, _float_leaves, _merge, _outputs, _quiet, _weights
from tracekern import autodiff, forward
from tracekern.primitives import REGISTRY, Primitive

# ----------------------------------------------------------------------------- every primitive has a rule


def test_every_differentiable_primitive_has_a_jvp_rule():
    """A higher-order primitive has its rule in forward.RULES (the same ones as reverse mode); every
    other primitive with operands that tangents flow through has its own jvp, or is declared linear."""
    assert set(forward.RULES) == set(autodiff.RULES)
    first_order = [p for p in REGISTRY.values() if p not in forward.RULES and p.differentiable()
                   and p.fusion not in ("const", "fill")]
    assert [p.name for p in first_order if type(p).jvp is Primitive.jvp and not p.linear] == []


# ----------------------------------------------------------------------------- the table

GRAD_FAMILIES = [f for f, cases in FAMILIES.items() if any(c.grad for c in cases)]
# (family, dtype): the float64 rows, and the complex128 rows (a complex tangent is a real-linear direction)
GRAD_ROWS = [(f, d) for f in GRAD_FAMILIES for d in ("float64", "complex128") if any(c.grad and d in c.dtypes for c in FAMILIES[f])]
EPS = 1e-6


def _direction(cases, xs, seed=11):
    """A random direction per input: u1 + i u2 for a complex one."""
    rng = np.random.default_rng(seed)

    def one(x):
        dtype = np.asarray(x).dtype
        u = rng.uniform(-1.0, 1.0, np.shape(x))
        return (u + 1j * rng.uniform(-1.0, 1.0, np.shape(x)) if dtype.kind == "c" else u).astype(dtype)
    return {c.id: tuple(one(x) for x in xs[c.id]) for c in cases}


def _jvp_and_vjp(cases, backend, xs, cs, us, w=None):
    """(out, tangent, cotangent of xs) of the family's program: tk.jvp along us and tk.vjp of w, one
    compiled step (without w: (out, tangent, None), tk.jvp only)."""
    ids = [c.id for c in cases]

    def step(xs, cs, us, w):
        f = lambda xs: _outputs(cases, xs, cs)   # noqa: E731
        out, tangent = tk.jvp(f, (xs,), (us,))
        if w is None:
            return out, tangent, None
        _, pullback = tk.vjp(f, xs)
        return out, tangent, pullback(w)[0]

    pick = lambda d: {i: d[i] for i in ids}   # noqa: E731
    with np.errstate(all="ignore"):
        return to_host(tk.jit(step, backend=backend)(pick(xs), pick(cs), pick(us), None if w is None else pick(w)))


@functools.cache
def _reference(family: str, dtype: str):
    """The family's differentiable rows in `dtype` and their interpreted (out, tangent, cotangent),
    the tangent computed in float64 (at the same points and direction) for float32 rows."""
    cases, xs, cs, want = _data(family, dtype)
    cases = [c for c in cases if c.grad]
    us = _direction(cases, xs)
    wide = lambda v: np.asarray(v, np.complex128 if np.asarray(v).dtype.kind == "c" else np.float64)   # noqa: E731
    up = lambda d: {k: tuple(wide(v) for v in t) for k, t in d.items()}   # noqa: E731
    x64, u64 = (xs, us) if dtype != "float32" else (up(xs), up(us))
    ref = "float64" if dtype == "float32" else dtype
    w64 = _cotangent(cases, _data(family, ref)[3], _weights(family, ref))
    return cases, xs, cs, us, w64, _jvp_and_vjp(cases, "interpret", x64, cs, u64, w64)


def _scale(a) -> float:
    a = np.asarray(a, np.float64)
    finite = np.abs(a[np.isfinite(a)])
    return 1.0 + (float(finite.max()) if finite.size else 0.0)


@pytest.mark.parametrize("family, dtype", GRAD_ROWS)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore:`row_stack` alias is deprecated:DeprecationWarning")
def test_jvp_of_every_table_row_against_finite_differences_and_reverse_mode(family, dtype):
    """float64 and complex128, interpret: the tangent of every differentiable row against central
    finite differences of NumPy's function along the same direction, and <w, J u> against <J^T w, u>
    (real inner products Re(sum(conj(a) b)): a complex cotangent is d/dx + i d/dy, as PyTorch's)."""
    cases, xs, cs, us, w, (out, tangent, cot) = _reference(family, dtype)
    assert cases
    bad = []
    for c in cases:
        ref = c.ref or c.fn
        plus = _quiet(ref, *_merge(c, [x + EPS * u for x, u in zip(xs[c.id], us[c.id])], cs[c.id]))
        minus = _quiet(ref, *_merge(c, [x - EPS * u for x, u in zip(xs[c.id], us[c.id])], cs[c.id]))
        got = _float_leaves(tangent[c.id])
        want = [(p - m) / (2 * EPS) for p, m in zip(_float_leaves(plus), _float_leaves(minus))]
        # (structure first: the tangent is a tree like the output, its float leaves as many)
        assert tk.tree_flatten(tangent[c.id])[1] == tk.tree_flatten(out[c.id])[1], c.id
        assert len(got) == len(want) > 0, c.id
        for k, (g, fd) in enumerate(zip(got, want)):
            try:
                np.testing.assert_allclose(g, fd, rtol=1e-5, atol=1e-5 * _scale(fd))
            except AssertionError as err:
                bad.append(f"{c.id} leaf {k} against finite differences: {str(err).strip().splitlines()[-3:]}")
        # the identity <w, J u> = <J^T w, u>, which ties every JVP rule to its VJP rule
        inner = lambda a, b: float(np.sum(np.real(np.nan_to_num(np.conj(a) * b))))   # noqa: E731
        lhs = sum(inner(b, a) for a, b in zip(_float_leaves(tangent[c.id]), _weights(family, dtype)[c.id]))
        rhs = sum(inner(g, u) for g, u in zip(cot[c.id], us[c.id]) if g is not None)
        size = sum(float(np.sum(np.abs(np.nan_to_num(a)))) for a in _float_leaves(tangent[c.id])) + abs(rhs) + 1.0
        if abs(lhs - rhs) > 1e-9 * size:
            bad.append(f"{c.id}: <w, J u> = {lhs!r} but <J^T w, u> = {rhs!r}")
    assert not bad, "\n".join(bad)


def _compare_float32(family: str, backend: str, rows=None):
    """The float32 rows' tangents on `backend` (those in `rows`, if given) keep the output's dtype
    (float32, but where NumPy gives float64) and agree with the float64 tangent at the same points."""
    cases, xs, cs, us, _, (_, tangent64, _) = _reference(family, "float32")
    cases = [c for c in cases if rows is None or c.id in rows]
    assert cases
    out32, t32, _ = _jvp_and_vjp(cases, backend, xs, cs, us)
    bad = []
    for c in cases:
        tol = max(50 * c.tol32, 1e-4)
        leaves = zip(tk.tree_flatten(t32[c.id])[0], tk.tree_flatten(out32[c.id])[0], tk.tree_flatten(tangent64[c.id])[0])
        assert tk.tree_flatten(t32[c.id])[1] == tk.tree_flatten(tangent64[c.id])[1], c.id
        for k, (g, o, e) in enumerate(leaves):
            g = np.asarray(g)
            if np.asarray(e).dtype.kind not in "fc":
                continue
            if g.dtype != np.asarray(o).dtype:
                bad.append(f"{c.id} leaf {k}: a {g.dtype} tangent of a {np.asarray(o).dtype} output")
                continue
            try:
                np.testing.assert_allclose(g, e, rtol=tol, atol=tol * _scale(e))
            except AssertionError as err:
                bad.append(f"{c.id} leaf {k} ({backend}, float32): {str(err).strip().splitlines()[-3:]}")
    assert not bad, "\n".join(bad)


# the primitives the table's programs do not use, each with tests of its own below
OWN_TESTS = {"cond", "scan", "while", "scan_revolve", "recompute_call", "reversible_call", "remat_barrier"}   # (pinv: custom_vjp_call)


@pytest.mark.filterwarnings("ignore:`row_stack` alias is deprecated:DeprecationWarning")
def test_the_table_runs_every_other_jvp_rule():
    """Every differentiable primitive's JVP rule runs in the table's programs (a new primitive needs a
    row in tests/numpy_cases.py), but those of OWN_TESTS, which run in this file's own tests."""
    used = set()
    for family, dtype in GRAD_ROWS:
        cases, xs, cs, _, _, _ = _reference(family, dtype)
        with np.errstate(all="ignore"):
            graph = tk.make_ir(lambda x, k: _outputs(cases, x, k))(xs, cs)
        used |= {e.primitive.name for e in _equations(graph)}
    differentiable = {p.name for p in REGISTRY.values() if p.differentiable() and p.fusion not in ("const", "fill")}
    assert differentiable - used == OWN_TESTS


@pytest.mark.parametrize("family", [f for f in GRAD_FAMILIES if any(c.grad and "float32" in c.dtypes for c in FAMILIES[f])])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore:`row_stack` alias is deprecated:DeprecationWarning")
def test_jvp_of_every_table_row_in_float32(family):
    """On the interpreter, every family (no compile); on cpu, below, the elementwise family."""
    _compare_float32(family, "interpret")


def _equations(graph) -> list:
    """Every equation of graph, those of its sub-graphs included."""
    return [x for e in graph.eqns for x in [e] + [y for p in e.params.values() if isinstance(p, tk.Graph)
                                                  for y in _equations(p)]]


@functools.cache
def _covering_rows(family: str, dtype: str) -> tuple[str, ...]:
    """Rows of the family whose forward-mode graphs hold every kind of equation (a primitive and
    its str and bool params) that the family's rows do: a greedy cover, by tracing alone, that
    prefers rows of few equations (the compile cost). What cpu compiles: every rule, fewer kernels."""
    cases, xs, cs, _, _, _ = _reference(family, dtype)
    kinds, cost = {}, {}
    for c in cases:
        with np.errstate(all="ignore"):
            eqns = _equations(tk.make_ir(lambda x, k, c=c: _outputs([c], {c.id: x}, {c.id: k}), mode="jvp")(xs[c.id], cs[c.id]))
        kinds[c.id] = {(e.primitive.name,) + tuple(sorted((k, v) for k, v in e.params.items() if isinstance(v, (str, bool))))
                       for e in eqns}
        cost[c.id] = len(eqns)
    every, covered, chosen = set().union(*kinds.values()), set(), []
    while covered != every:
        best = max((i for i in kinds if kinds[i] - covered), key=lambda i: len(kinds[i] - covered) / cost[i])
        chosen.append(best)
        covered |= kinds[best]
    return tuple(chosen)


@pytest.mark.parametrize("family, dtype", GRAD_ROWS)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.filterwarnings("ignore:`row_stack` alias is deprecated:DeprecationWarning")
def test_jvp_of_every_table_rule_on_cpu(family, dtype):
    """cpu's tangents against the interpreter's (which are checked against finite differences and
    reverse mode above), float64, for the rows that hold every kind of equation the family's rows
    do (_covering_rows: every JVP rule the family uses compiles, in fewer kernels than every row);
    and, for the elementwise family (the float32 math functions), float32 against float64. (Reverse
    mode on cpu is test_numpy's.)"""
    cases, xs, cs, us, _, (out, tangent, _) = _reference(family, dtype)
    rows = _covering_rows(family, dtype)
    cases = [c for c in cases if c.id in rows]
    got_out, got_tangent, _ = _jvp_and_vjp(cases, "cpu", xs, cs, us)
    assert_tree_close(got_out, {i: out[i] for i in rows}, tol=1e-9)
    assert_tree_close(got_tangent, {i: tangent[i] for i in rows}, tol=1e-8)
    if family == "elementwise" and dtype == "float64":
        _compare_float32(family, "cpu", rows)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_jvp_of_the_elementwise_and_reduction_rows_on_cuda():
    """The cuda backend (the simulator in CI) against the interpreter, float64."""
    for family in ("elementwise", "reductions"):
        cases, xs, cs, us, _, (out, tangent, _) = _reference(family, "float64")
        cases = [c for c in cases if c.cuda]
        got_out, got_tangent, _ = _jvp_and_vjp(cases, "cuda", xs, cs, us)
        assert_tree_close(got_tangent, {c.id: tangent[c.id] for c in cases}, tol=1e-8)


# ----------------------------------------------------------------------------- one function at a time


def _random_like(tree, rng):
    leaves, td = tk.tree_flatten(tree)
    return tk.tree_unflatten(td, [rng.standard_normal(np.shape(x)).astype(np.asarray(x).dtype)
                                  if np.asarray(x).dtype.kind == "f" else None for x in leaves])


def _flatten_with_none(tree) -> list:
    """Leaves in tree_flatten's order, with None kept as a leaf (a zero tangent or cotangent)."""
    if tree is None:
        return [None]
    if isinstance(tree, (tuple, list)):
        return [x for t in tree for x in _flatten_with_none(t)]
    if isinstance(tree, dict):
        return [x for k in sorted(tree) for x in _flatten_with_none(tree[k])]
    return [tree]


def _inner(a, b) -> float:
    return sum(float(np.sum(np.asarray(x, np.float64) * y)) for x, y in zip(_flatten_with_none(a), _flatten_with_none(b))
               if x is not None and y is not None and np.asarray(x).dtype.kind == "f")


def _shift(args, us, eps):
    """args moved by eps along us (None: not moved)."""
    out = []
    for a, u in zip(args, us):
        leaves, td = tk.tree_flatten(a)
        out.append(tk.tree_unflatten(td, [x if d is None else x + eps * d for x, d in zip(leaves, _flatten_with_none(u))]))
    return tuple(out)


def check_jvp(f, args, backend, seed=0, tol=1e-6, linearize=True):
    """tk.jvp of f on `backend` against central differences of f run as plain NumPy; with tk.vjp in
    the same compiled step, <w, J u> = <J^T w, u>; and tk.linearize's f_jvp gives the same tangent.
    Returns (out, tangent)."""
    rng = np.random.default_rng(seed)
    us = tuple(_random_like(a, rng) for a in args)
    out_np = f(*args)
    w = _random_like(out_np, rng)

    def step(args, us, w):
        out, tangent = tk.jvp(f, args, us)
        _, pullback = tk.vjp(f, *args)
        w = tk.tree_unflatten(tk.tree_flatten(out)[1], [tk.numpy.zeros_like(o) if x is None else x for x, o in
                                                         zip(_flatten_with_none(w), tk.tree_flatten(out)[0])])
        return out, tangent, pullback(w)

    out, tangent, cot = to_host(tk.jit(step, backend=backend)(args, us, w))
    assert tk.tree_flatten(tangent)[1] == tk.tree_flatten(out_np)[1]
    eps = 1e-6
    plus, minus = f(*_shift(args, us, eps)), f(*_shift(args, us, -eps))
    fd = tk.tree_unflatten(tk.tree_flatten(out_np)[1], [
        (np.asarray(p, np.float64) - m) / (2 * eps) if np.asarray(p).dtype.kind == "f" else np.zeros_like(p)
        for p, m in zip(tk.tree_flatten(plus)[0], tk.tree_flatten(minus)[0])])
    assert_tree_close(out, out_np, tol=1e-12)
    for g, e, o in zip(tk.tree_flatten(tangent)[0], tk.tree_flatten(fd)[0], tk.tree_flatten(out_np)[0]):
        assert np.asarray(g).dtype == np.asarray(o).dtype   # (an integer output's tangent: zeros of its dtype)
        np.testing.assert_allclose(g, e, rtol=tol, atol=tol * _scale(e))
    lhs = _inner(tangent, w)
    rhs = sum(_inner(c, u) for c, u in zip(cot, us))
    assert abs(lhs - rhs) <= 1e-10 * (1 + abs(lhs)), (lhs, rhs)
    if linearize:
        out2, f_jvp = tk.linearize(f, *args, backend=backend)
        assert_tree_close(out2, out_np, tol=1e-12)
        assert_tree_close(f_jvp(*us), tangent, tol=1e-12)
    return out, tangent


def _cond_fn(x, y):
    return tk.cond(np.sum(x) > 0, lambda a, b: np.sin(a) * b + y[0], lambda a, b: a * 2 + np.exp(b), x, y)


def _scan_fn(h, xs, w):
    def step(h, x):
        h = np.tanh(h @ w + x)
        return h, np.sum(h * x)
    h, ys = tk.scan(step, h, xs)
    hr, ysr = tk.scan(lambda c, x: (c * 0.5 + np.sin(x), c[0]), h, xs, reverse=True)
    return h, ys, hr, ysr


def _while_fn(x, v):
    def step(s):
        pos, vel, n = s
        return pos + 0.05 * vel, vel * 0.98 - 0.05 * np.sin(pos), n + 1
    pos, vel, n = tk.while_loop(lambda s: np.min(s[0]) > -0.3, step, (x, v, np.int64(0)))
    return pos, vel, n


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_cond_takes_each_branch_with_its_tangent(backend):
    rng = np.random.default_rng(1)
    x, y = rng.uniform(0.2, 1.0, 3), rng.standard_normal(3)
    check_jvp(_cond_fn, (x, y), backend)
    check_jvp(_cond_fn, (-x, y), backend)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_scan_forward_and_reverse_with_a_closed_over_weight(backend):
    rng = np.random.default_rng(2)
    args = (rng.standard_normal(3), rng.standard_normal((5, 3)), rng.standard_normal((3, 3)) * 0.5)
    check_jvp(_scan_fn, args, backend)


def test_scan_with_a_tangent_in_the_weight_only_and_a_checkpointed_scan():
    """A carry gets a tangent from the body (not its initial value); checkpoint=k changes nothing."""
    rng = np.random.default_rng(3)
    h, xs, w = rng.standard_normal(3), rng.standard_normal((6, 3)), rng.standard_normal((3, 3)) * 0.5

    def f(w):
        return tk.scan(lambda c, x: (np.tanh(c @ w + x), c * 2), h, xs)

    def g(w):
        return tk.scan(lambda c, x: (np.tanh(c @ w + x), c * 2), h, xs, checkpoint=2)

    _, t = check_jvp(f, (w,), "interpret")
    _, t2 = check_jvp(g, (w,), "interpret")
    assert_tree_close(t2, t, tol=1e-15)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_fori_loop_with_static_and_traced_bounds(backend):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(3)

    def f(x, n):
        static = tk.fori_loop(0, 4, lambda i, c: np.sin(c) * 1.1 + x, x)
        traced = tk.fori_loop(0, n, lambda i, c: np.cos(c) * x, x)
        return static, traced

    check_jvp(f, (x, np.int64(3)), backend, linearize=backend == "interpret")   # (cpu: scan's and while's own tests)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_while_loop_is_one_loop_over_primal_and_tangent_carries(backend):
    """A trip count known only at run time, and no tape: the JVP is one while loop (no scan, no
    stored carries); the trip count (an integer output) has a zero tangent of its own dtype."""
    rng = np.random.default_rng(5)
    x, v = rng.uniform(0.5, 1.0, 2), rng.standard_normal(2) * 0.1
    _, (_, _, tn) = check_jvp(_while_fn, (x, v), backend)
    assert tn == 0 and np.asarray(tn).dtype == np.int64
    counts = tk.make_ir(_while_fn, mode="jvp")(x, v).primitive_counts
    assert counts.get("while") == 1 and "scan" not in counts and "scan_revolve" not in counts


def test_while_loop_linearize_runs_the_loop_again_and_saves_only_its_inputs():
    rng = np.random.default_rng(6)
    x, v = rng.uniform(0.5, 1.0, 2), rng.standard_normal(2) * 0.1
    split = tk.make_ir(_while_fn, mode="linearize")(x, v)
    assert split.linear.primitive_counts.get("while") == 1 and split.primal.primitive_counts.get("while") == 1
    assert split.residual_bytes <= 2 * (x.nbytes + v.nbytes) + 16


# ----------------------------------------------------------------------------- annotations


def _mlp_recompute(x, w1, w2, policy="nothing"):
    @tk.recompute(policy=policy)
    def block(h):
        return np.tanh(np.tanh(h @ w1) @ w2) + h

    return np.sum(block(block(x)) ** 2)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_recompute_is_a_no_op_for_forward_mode(backend):
    rng = np.random.default_rng(7)
    args = (rng.standard_normal((4, 3)), rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3)) * 0.5)
    _, t = check_jvp(_mlp_recompute, args, backend, linearize=backend == "interpret")
    plain = tk.jvp(lambda x, a, b: np.sum((np.tanh(np.tanh((np.tanh(np.tanh(x @ a) @ b) + x) @ a) @ b)
                                           + np.tanh(np.tanh(x @ a) @ b) + x) ** 2), args, (args[0], args[1], args[2]))
    assert np.allclose(tk.jvp(_mlp_recompute, args, (args[0], args[1], args[2]))[1], plain[1], rtol=1e-12)
    check_jvp(functools.partial(_mlp_recompute, policy="dots"), args, "interpret")


def test_grad_of_jvp_still_recomputes_and_linearize_keeps_only_the_region_inputs():
    rng = np.random.default_rng(8)
    x, w1, w2 = rng.standard_normal((4, 3)), rng.standard_normal((3, 3)) * 0.5, rng.standard_normal((3, 3)) * 0.5
    u = rng.standard_normal((4, 3))

    def hvp_like(x):
        return tk.jvp(lambda x: _mlp_recompute(x, w1, w2), (x,), (u,))[1]

    ir = tk.make_ir(hvp_like, mode="grad")(x)
    assert ir.primitive_counts.get("recompute_call", 0) >= 2   # (the forward's, re-run by the backward)
    assert "remat_barrier" in str(ir)
    g = tk.grad(hvp_like)(x)
    eps = 1e-6
    fd = np.array([(hvp_like(x + eps * e) - hvp_like(x - eps * e)) / (2 * eps)
                   for e in np.eye(x.size).reshape((x.size,) + x.shape)]).reshape(x.shape)
    np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)
    split = tk.make_ir(lambda x: _mlp_recompute(x, w1, w2), mode="linearize")(x)
    assert split.linear.primitive_counts.get("recompute_call") == 2   # the tangent pass re-runs each region
    # forward over reverse through the regions' re-runs (remat_barrier's rule)
    g = tk.grad(lambda x: _mlp_recompute(x, w1, w2))
    assert "remat_barrier" in str(tk.make_ir(g)(x))
    _, hv = tk.jvp(g, (x,), (u,))
    np.testing.assert_allclose(hv, (g(x + eps * u) - g(x - eps * u)) / (2 * eps), rtol=1e-6, atol=1e-7)


def test_reversible_block():
    rng = np.random.default_rng(9)
    block = tk.reversible(lambda v: np.sin(v) * 0.5, lambda v: np.tanh(v))

    def f(x1, x2):
        y1, y2 = block(x1, x2)
        return block(y1, y2)

    check_jvp(f, (rng.standard_normal(4), rng.standard_normal(4)), "interpret")


def test_random_draws_have_no_tangent_and_the_same_bits():
    rng = np.random.default_rng(10)
    x = rng.standard_normal(6)
    key = tk.random.key(3)

    def dropout(x, key):
        keep = tk.random.bernoulli(key, 0.6, x.shape)
        return np.where(keep, x / 0.6, 0.0) + tk.random.normal(key, x.shape, dtype=x.dtype)

    out, t = check_jvp(dropout, (x, key), "interpret")
    keep = tk.random.bernoulli(key, 0.6, x.shape)
    u = np.random.default_rng(0).standard_normal(6)
    out, t = tk.jvp(dropout, (x, key), (u, None))
    np.testing.assert_allclose(t, np.where(keep, u / 0.6, 0.0), rtol=1e-15)


def test_stop_gradient_gives_a_zero_tangent_and_grad_pass_through_the_identity():
    x = np.array([0.3, -1.7, 2.2])
    u = np.array([1.0, 2.0, -3.0])
    _, t = tk.jvp(lambda x: tk.stop_gradient(x) * x + tk.stop_gradient(np.sin(x)), (x,), (u,))
    np.testing.assert_allclose(t, x * u)
    _, t = tk.jvp(tk.grad_pass_through(np.round), (x,), (u,))
    np.testing.assert_array_equal(t, u)
    _, t = tk.jvp(np.round, (x,), (u,))
    np.testing.assert_array_equal(t, 0 * u)


def test_print_runs_once_per_call_with_primal_values_and_never_in_f_jvp(capfd):
    x = np.array([0.5, 1.5])

    def f(x):
        tk.print("x is", x)
        h, _ = tk.scan(lambda c, z: (np.tanh(c + z), ()), np.sin(x), np.ones((3, 2)))
        tk.print("h is", h)
        return h * 2

    tk.jvp(f, (x,), (np.ones(2),))
    first = capfd.readouterr().out
    assert first.count("x is") == 1 and first.count("h is") == 1 and "[0.5 1.5]" in first
    out, f_jvp = tk.linearize(f, x)
    assert capfd.readouterr().out == first
    t1, t2 = f_jvp(np.ones(2)), f_jvp(np.zeros(2))
    assert capfd.readouterr().out == ""
    assert not np.any(t2) and np.all(t1 > 0)


# ----------------------------------------------------------------------------- custom_gradient by linearity


@tk.custom_gradient
def _log1pexp(x):
    e = np.exp(x)

    def grad(up):
        return up * (1 - 1 / (1 + e))

    return np.log(1 + e), grad


@tk.custom_gradient
def _cube_with_a_made_up_gradient(x, y):
    """x**3 * y, whose grad_fn says d/dx = 2 x y and d/dy = x: forward mode must follow grad_fn."""

    def grad(dz):
        return dz * 2 * x * y, dz * x

    return x ** 3 * y, grad


def test_custom_gradient_jvp_is_the_transpose_of_its_grad_fn():
    x32 = np.float32(100.0)
    _, t = tk.jvp(_log1pexp, (x32,), (np.float32(2.0),))
    assert t == 2.0 and t.dtype == np.float32         # the plain derivative is nan here
    x, y = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.3, -0.7])
    u, v = np.array([1.0, 2.0, 0.5]), np.array([-1.0, 0.25, 3.0])
    for backend in ("interpret", "cpu"):
        _, t = tk.jvp(tk.jit(_cube_with_a_made_up_gradient, backend=backend), (x, y), (u, v))
        np.testing.assert_allclose(t, 2 * x * y * u + x * v, rtol=1e-14)
        # and against its VJP: <w, J u> = <J^T w, u>
        w = np.array([0.3, -2.0, 1.1])
        _, pullback = tk.vjp(tk.jit(_cube_with_a_made_up_gradient, backend=backend), x, y)
        gx, gy = pullback(w)
        assert np.isclose(np.sum(w * t), np.sum(gx * u) + np.sum(gy * v), rtol=1e-14)


def test_custom_gradient_with_variables_inside_a_scan_and_under_jvp_of_grad():
    weights = tk.Variable(np.array([0.5, 2.0]), name="weights")

    @tk.custom_gradient
    def poly(x):
        def grad_fn(d, variables):
            return d * weights[1] * 3, [np.stack([np.sum(d), np.sum(d * x)])]   # (3x the true d/dx)
        return weights[1] * x + weights[0], grad_fn

    x, u = np.array([1.0, 2.0, 3.0]), np.array([0.5, -1.0, 2.0])
    _, t = tk.jvp(poly, (x,), (u,))
    np.testing.assert_allclose(t, 3 * 2.0 * u)
    _, t = tk.jvp(lambda x: tk.scan(lambda c, z: (poly(c) * 0.5, ()), x, np.zeros(2))[0], (x,), (u,))
    np.testing.assert_allclose(t, (3 * 2.0 * 0.5) ** 2 * u)
    # forward over reverse through grad_fn's own ops
    g = tk.grad(lambda x: np.sum(np.sin(_log1pexp(x))))
    _, hv = tk.jvp(g, (x,), (u,))
    eps = 1e-6
    np.testing.assert_allclose(hv, (g(x + eps * u) - g(x - eps * u)) / (2 * eps), rtol=1e-6)


def test_custom_gradient_that_closes_over_a_value_with_a_tangent_raises():
    def outer(x):
        @tk.custom_gradient
        def inner(y):
            return y * x, lambda dy: dy * x
        return inner(x * 2)

    x = np.array([1.0, 2.0])
    with pytest.raises(tk.TracekernError, match="inner.*custom_gradient.*enclosing function.*argument"):
        tk.jvp(outer, (x,), (x,))
    with pytest.raises(tk.TracekernError, match="inner.*custom_gradient.*enclosing function.*argument"):
        tk.grad(lambda x: np.sum(outer(x)))(x)


# ----------------------------------------------------------------------------- linearize reuses the point


def test_linearize_computes_the_point_once_and_f_jvp_only_the_tangents():
    """The linear graph holds no equation of the primal computation (no tanh, no sin: their
    derivatives are residuals), even through a scan and a cond; calling f_jvp many times gives
    tk.jvp's tangent each time."""
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((3, 3)) * 0.5

    def f(x, w):
        h = np.tanh(x @ w)
        h, ys = tk.scan(lambda c, r: (np.tanh(c * r + 0.5), np.sin(c)), h[0], h)
        return tk.cond(np.sum(h) > 0, lambda a: np.sin(a) * 2, lambda a: np.exp(a), h), ys

    split = tk.make_ir(f, mode="linearize")(x, w)

    def primitives(g):
        names = set(g.primitive_counts)
        for e in g.eqns:
            for p in e.params.values():
                if isinstance(p, tk.Graph):
                    names |= primitives(p)
        return names

    assert not primitives(split.linear) & {"tanh", "sin", "exp", "cos"}, str(split.linear)
    assert {"scan", "cond"} <= primitives(split.linear)
    assert "(saved)" in str(split.linear) and "(tangent)" in str(split.linear)
    for backend in ("interpret", "cpu"):
        out, f_jvp = tk.linearize(f, x, w, backend=backend)
        for seed in range(2):
            us = _random_like((x, w), np.random.default_rng(seed))
            assert_tree_close(f_jvp(*us), tk.jvp(f, (x, w), us)[1], tol=1e-13)
        assert_tree_close(f_jvp(None, None), tk.tree_map(np.zeros_like, out), tol=0)


def test_f_jvp_made_outside_a_trace_is_called_inside_one():
    """tk.vmap / tk.jit / tk.grad of a function calling the f_jvp of a tk.linearize made outside them
    (JAX's vmap of a linearized function): the linear graph is emitted there, reading the residuals.
    It raised "a traced array cannot be converted to a NumPy array", a call the user never made."""
    x = np.array([0.1, 0.2, 0.3])
    f = lambda a: (np.sin(a) * np.sum(a), np.tanh(a) @ a)        # noqa: E731
    _, f_jvp = tk.linearize(f, x, backend="interpret")
    jac = [np.diag(np.cos(x) * x.sum()) + np.sin(x)[:, None], (1 - np.tanh(x) ** 2) * x + np.tanh(x)]
    cols = tk.jit(tk.vmap(f_jvp, 1, (1, 0)), backend="interpret")(np.eye(3))      # the Jacobian's columns
    np.testing.assert_allclose(cols[0], jac[0], rtol=1e-14)
    np.testing.assert_allclose(cols[1], jac[1], rtol=1e-14)
    np.testing.assert_allclose(tk.jit(tk.grad(lambda t: 3.0 * f_jvp(t)[1]), backend="interpret")(x), 3.0 * jac[1],
                               rtol=1e-14)
    np.testing.assert_allclose(f_jvp(x)[1], jac[1] @ x, rtol=1e-14)      # and still called directly


def test_linearize_inside_jit_and_has_aux():
    rng = np.random.default_rng(13)
    x, u, v = rng.standard_normal(3), rng.standard_normal(3), rng.standard_normal(3)

    def f(x):
        return np.sin(x) * x, np.sum(x)

    @tk.jit
    def step(x, u, v):
        out, f_jvp, aux = tk.linearize(f, x, has_aux=True)
        return out, aux, f_jvp(u), f_jvp(v)

    out, aux, tu, tv = step(x, u, v)
    np.testing.assert_allclose(tu, (np.cos(x) * x + np.sin(x)) * u, rtol=1e-14)
    np.testing.assert_allclose(tv, (np.cos(x) * x + np.sin(x)) * v, rtol=1e-14)
    assert aux == pytest.approx(np.sum(x))
    o2, t2, a2 = tk.jvp(f, (x,), (u,), has_aux=True)
    np.testing.assert_allclose(t2, tu, rtol=1e-15)
    leaked = {}

    @tk.jit
    def leak(x):
        leaked["f"] = tk.linearize(np.sin, x)[1]
        return x

    leak(x)
    with pytest.raises(tk.TracerLeakError, match="f_jvp of tk.linearize"):
        leaked["f"](u)


# ----------------------------------------------------------------------------- compositions


def _mlp(params, x):
    for w, b in params:
        x = np.tanh(x @ w + b)
    return np.sum(x ** 2)


def _mlp_args(seed=14):
    rng = np.random.default_rng(seed)
    params = [(rng.standard_normal((3, 4)) * 0.5, rng.standard_normal(4) * 0.1),
              (rng.standard_normal((4, 2)) * 0.5, rng.standard_normal(2) * 0.1)]
    return params, rng.standard_normal((5, 3))


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_jvp_composes_with_jit_and_grad(backend):
    """jit of jvp, jvp of jit (its backend), jvp of grad (a Hessian-vector product) against central
    differences of the gradient, grad of jvp against the same (the Hessian is symmetric), and jvp of
    jvp against differences of jvp."""
    params, x = _mlp_args()
    rng = np.random.default_rng(15)
    up = _random_like(params, rng)
    out, t = tk.jvp(tk.jit(_mlp, backend=backend), (params, x), (up, None))
    out2, t2 = tk.jit(lambda p, x, u: tk.jvp(_mlp, (p, x), (u, None)), backend=backend)(params, x, up)
    assert out == pytest.approx(_mlp(params, x), rel=1e-13) and t == pytest.approx(t2, rel=1e-13)
    g = tk.grad(_mlp)
    _, hv = tk.jvp(tk.jit(g, backend=backend), (params, x), (up, None))
    eps = 1e-6
    moved = lambda s: [(w + s * dw, b + s * db) for (w, b), (dw, db) in zip(params, up)]   # noqa: E731
    fd = tk.tree_map(lambda a: a, [(((gw1 - gw2) / (2 * eps)), (gb1 - gb2) / (2 * eps))
                                   for (gw1, gb1), (gw2, gb2) in zip(g(moved(eps), x), g(moved(-eps), x))])
    assert_tree_close(hv, fd, tol=1e-6)
    gj = tk.jit(tk.grad(lambda p: tk.jvp(_mlp, (p, x), (up, None))[1]), backend=backend)(params)
    assert_tree_close(gj, hv, tol=1e-12)
    # second order forward: d^2/ds^2 f(p + s u) at s = 0
    jj = lambda p: tk.jvp(lambda q: tk.jvp(_mlp, (q, x), (up, None))[1], (p,), (up,))[1]   # noqa: E731
    first = lambda p: tk.jvp(_mlp, (p, x), (up, None))[1]   # noqa: E731
    assert jj(params) == pytest.approx((first(moved(eps)) - first(moved(-eps))) / (2 * eps), rel=1e-6)
    assert jj(params) == pytest.approx(_inner(hv, up), rel=1e-12)


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_hessian_vector_products_through_while_loops_and_checkpointed_scans(backend):
    """Forward over reverse through the backward of a while loop and of a checkpointed scan, which
    reverse over reverse cannot do, and of a scan that records its carries: against central
    differences of the gradient; linearize splits all of them."""
    rng = np.random.default_rng(16)
    x, v = rng.uniform(0.5, 1.0, 2), rng.standard_normal(2) * 0.1
    xs = rng.standard_normal((6, 2))

    def loss(x, v):
        pos, vel, _ = _while_fn(x, v)
        h, _ = tk.scan(lambda c, z: (np.tanh(c * 0.9 + z), ()), pos, xs, checkpoint=2)
        h, _ = tk.scan(lambda c, z: (np.sin(c) * z, ()), h, xs)   # (its carries recorded for the backward)
        return np.sum(np.sin(h) * vel)

    g = tk.grad(loss, argnums=(0, 1))
    u = (rng.standard_normal(2), rng.standard_normal(2))
    _, hv = tk.jvp(tk.jit(g, backend=backend), (x, v), u)
    eps = 1e-6
    plus, minus = g(x + eps * u[0], v + eps * u[1]), g(x - eps * u[0], v - eps * u[1])
    assert_tree_close(hv, tuple((p - m) / (2 * eps) for p, m in zip(plus, minus)), tol=1e-6)
    if backend == "interpret":   # (linearize runs each loop's backward again: the same kernels on cpu)
        _, f_jvp = tk.linearize(g, x, v, backend=backend)
        assert_tree_close(f_jvp(*u), hv, tol=1e-12)


@pytest.mark.parametrize("backend", ["cuda"])
def test_jvp_and_linearize_on_cuda(backend):
    """A representative program (MLP, scan, cond, while) on the simulator against the interpreter."""
    rng = np.random.default_rng(17)
    params, x = _mlp_args()

    def f(params, x, v):
        h = _mlp(params, x)
        c, _ = tk.scan(lambda c, r: (np.tanh(c + r), ()), x[0], x)
        pos, vel, _ = _while_fn(np.abs(c) + 0.5, v)
        return tk.cond(h > 0, lambda a: np.sin(a), lambda a: a * 2, pos) + vel * h

    args = (params, x, rng.standard_normal(3) * 0.1)
    us = _random_like(args, rng)
    step = lambda backend: tk.jit(lambda a, u: tk.jvp(f, a, u), backend=backend)   # noqa: E731
    want = step("interpret")(args, us)
    assert_tree_close(step(backend)(args, us), want, tol=1e-12)
    out, f_jvp = tk.linearize(f, *args, backend=backend)
    assert_tree_close(f_jvp(*us), want[1], tol=1e-12)


# ----------------------------------------------------------------------------- make_ir and errors


def test_make_ir_marks_tangent_inputs_and_equations():
    x, w = np.ones((2, 3)), np.ones((3, 2))
    ir = tk.make_ir(lambda x, w: np.tanh(x @ w), mode="jvp")(x, w)
    text = str(ir)
    assert text.count(" (tangent) =") == list(ir.eqn_notes).count("tangent") == 4   # (two matmuls, add, mul)
    assert "c:f64[2,3] (tangent), d:f64[3,2] (tangent)" in text
    assert "= tanh" in text and not any(n == "tangent" for e, n in zip(ir.eqns, ir.eqn_notes) if e.primitive.name == "tanh")
    assert all(n == "tangent" for e, n in zip(ir.eqns, ir.eqn_notes) if e.primitive.name == "matmul" and
               any(v in ir.inputs[2:] for v in e.inputs))
    split = tk.make_ir(lambda x, w: np.tanh(x @ w), mode="linearize")(x, w)
    assert isinstance(split, forward.SplitJVP) and split.residual_bytes > 0
    assert split.linear.input_notes[-2:] == ("tangent", "tangent") and "saved" in split.linear.input_notes


def test_errors_name_the_callers_line_and_say_what_to_pass():
    x = np.ones((2, 3))
    f = lambda x, n: np.sum(x * n)   # noqa: E731
    here = "test_forward.py"
    with pytest.raises(ValueError, match=rf"tangent of argument 0 \('x'\) is f64\[3,2\], the primal is f64\[2,3\][\s\S]*{here}"):
        tk.jvp(f, (x, 2), (np.ones((3, 2)), None))
    with pytest.raises(TypeError, match=rf"is f32\[2,3\], the primal is f64\[2,3\][\s\S]*{here}"):
        tk.jvp(f, (x, 2), (np.ones((2, 3), np.float32), None))
    with pytest.raises(TypeError, match=rf"integer or bool value, which has no tangent.*pass None[\s\S]*{here}"):
        tk.jvp(f, (x, np.int64(2)), (x, np.int64(1)))
    with pytest.raises(ValueError, match=rf"2 tangents for 1 primals[\s\S]*{here}"):
        tk.jvp(np.sin, (x,), (x, x))
    with pytest.raises(ValueError, match=rf"has structure \{{'a': \*\}}, its primal \(\*, \*\)[\s\S]*{here}"):
        tk.jvp(lambda p: p[0] * p[1], ((x, x),), ({"a": x},))
    with pytest.raises(TypeError, match=rf"primals must be a tuple.*\(x,\)[\s\S]*{here}"):
        tk.jvp(np.sin, x, (x,))
    # integer primals take None or zeros; integer outputs get zeros of their own dtype
    out, t = tk.jvp(lambda x, n: (x * n, n * 2), (x, np.int64(2)), (x, np.int64(0)))
    assert t[1] == 0 and t[1].dtype == np.int64 and np.array_equal(t[0], 2 * x)
    _, f_jvp = tk.linearize(f, x, 2)
    with pytest.raises(ValueError, match=rf"f_jvp of tk.linearize.*is f64\[3\], the primal is f64\[2,3\][\s\S]*{here}"):
        f_jvp(np.ones(3), None)
    assert f_jvp(x, None) == pytest.approx(12.0)


def test_an_input_modified_in_place_before_linearize_s_linear_function_is_an_error(backend):
    """The compiled primal keeps the caller's input arrays its linear function reads, without a copy;
    modified in place in between, they gave a silently wrong JVP on cpu. Now: an error naming the
    argument, or (where no input is kept as it is) the JVP at the primal point."""
    f = lambda x: np.sin(x) * x  # noqa: E731
    x = np.linspace(0.0, 1.0, 4)
    want = np.cos(x) * x + np.sin(x)
    xc = x.copy()
    _, f_jvp = tk.linearize(f, xc, backend=backend)
    assert_tree_close(to_host(f_jvp(np.ones(4))), want, tol=1e-12)
    xc += 3.0
    try:
        got = f_jvp(np.ones(4))
    except tk.TracekernError as err:
        assert "argument 0 ('x')" in str(err) and "modified in place" in str(err) and "test_forward.py" in str(err)
    else:
        assert backend != "cpu", "the compiled linear function read the modified input without an error"
        assert_tree_close(to_host(got), want, tol=1e-12)
