"""tk.vmap against a Python loop over the batch (np.stack of the function on each lane).

The coverage table (tests/numpy_cases.py) drives the primitives: each family runs as one batched
program per backend (interpret, cpu), with in_axes and out_axes of several kinds, against NumPy on
each lane; and its gradients as a vmap of tk.vjp (per-example gradients) against a loop of the
unbatched gradients. Then control flow with batched and unbatched predicates, annotations, nested
vmap, grad of vmap against finite differences, random draws, print, the errors, and the random
programs of tests/test_property.py."""
import functools
import warnings
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekern as tk
from tests.conftest import assert_tree_close, jit_on, to_host
from tests.numpy_cases import CASES, FAMILIES, case_inputs
from tests.test_property import instantiate, programs
from tracekern import autodiff, batching
from tracekern.primitives.core import REGISTRY, Primitive, eval_graph

LANES = 3


def _quiet(fn, *args):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args)


def _stack(trees, axis=0):
    """One tree of the lanes' trees, each leaf stacked along `axis` (the loop's answer)."""
    leaves = [tk.tree_flatten(t)[0] for t in trees]
    td = tk.tree_flatten(trees[0])[1]
    return tk.tree_unflatten(td, [np.stack([np.asarray(lv[k]) for lv in leaves], axis=axis) for k in range(len(leaves[0]))])


def _compare(got, want, tol, what):
    """Per case: the same structure, dtypes and shapes; values within tol (exact for integers and bools)."""
    bad = []
    for cid in want:
        g_leaves, g_td = tk.tree_flatten(to_host(got[cid]))
        w_leaves, w_td = tk.tree_flatten(want[cid])
        if g_td != w_td:
            bad.append(f"{cid}: structure {g_td!r} != {w_td!r}")
            continue
        for k, (g, w) in enumerate(zip(g_leaves, w_leaves)):
            g, w = np.asarray(g), np.asarray(w)
            if g.dtype != w.dtype or g.shape != w.shape:
                bad.append(f"{cid} leaf {k}: {g.dtype}{list(g.shape)} != {w.dtype}{list(w.shape)}")
            elif w.dtype.kind not in "fc":
                if not np.array_equal(g, w):
                    bad.append(f"{cid} leaf {k}: {g.ravel()[:8]} != {w.ravel()[:8]}")
            else:
                finite = np.abs(w[np.isfinite(w)])
                scale = 1.0 + (float(finite.max()) if finite.size else 0.0)
                try:
                    np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)
                except AssertionError as err:
                    bad.append(f"{cid} leaf {k} ({what}): {str(err).strip().splitlines()[-3:]}")
    assert not bad, f"{len(bad)} mismatches:\n" + "\n".join(bad)


# ----------------------------------------------------------------------------- the coverage table


SHARED = ("given",)   # inputs the first program shares between lanes (in_axes None); the others vary


def _split(case, args):
    xs = tuple(a for s, a in zip(case.inputs, args) if s.kind not in SHARED)
    cs = tuple(a for s, a in zip(case.inputs, args) if s.kind in SHARED)
    return xs, cs


def _merge(case, xs, cs):
    xs, cs = iter(xs), iter(cs)
    return [next(cs) if s.kind in SHARED else next(xs) for s in case.inputs]


def _dtypes(cases):
    """float64 for the float cases, complex128 for the complex ones; int64 and bool for the integer and bool ones;
    a row of none of these (float32 only), its own."""
    present = {d for c in cases for d in c.dtypes}
    return [d for d in ("float64", "complex128", "int64", "bool") if d in present] or sorted(present)   # (a float32-only row)


@functools.cache
def _lanes(ids: tuple, dtype: str):
    """(the cases in `dtype`, per lane: a dict of each case's varying inputs, a dict of its shared ones)."""
    cases = [c for c in CASES if c.id in ids and dtype in c.dtypes]
    lanes = []
    for lane in range(LANES):
        split = {c.id: _split(c, case_inputs(c, dtype, seed=lane)) for c in cases}
        lanes.append(({k: v[0] for k, v in split.items()}, {k: v[1] for k, v in split.items()}))
    return cases, lanes


def _reference(cases, xs, cs):
    return {c.id: _quiet(c.ref or c.fn, *_merge(c, xs[c.id], cs[c.id])) for c in cases}


def _table(cases):
    def table(xs, cs):
        return {c.id: c.fn(*_merge(c, xs[c.id], cs[c.id])) for c in cases}
    return table


def _values_program(cases, both: bool):
    """The varying inputs batched on axis 0 with the shared ones not batched (in_axes None); with
    `both`, in the same program (one compile), every input batched on its last axis, results too."""
    table = _table(cases)

    def program(xs_first, cs_shared, xs_last, cs_last):
        first = tk.vmap(table, in_axes=(0, None))(xs_first, cs_shared)
        return first, (tk.vmap(table, in_axes=(-1, -1), out_axes=-1)(xs_last, cs_last) if both else None)

    return program


def check_values(cases, backend):
    """The cases batched: values against NumPy on each lane, np.stack'ed. The interpreter also runs
    every input batched on its last axis (in_axes -1, out_axes -1): where the axes go is the same
    code on every backend."""
    both = backend == "interpret"
    for dtype in _dtypes(cases):
        cases_d, lanes = _lanes(tuple(c.id for c in cases), dtype)
        xs = [lane[0] for lane in lanes]
        cs = [lane[1] for lane in lanes]
        want_first = _stack([_reference(cases_d, x, cs[0]) for x in xs])
        with np.errstate(all="ignore"):
            first, last = jit_on(backend, _values_program(cases_d, both))(_stack(xs), cs[0], _stack(xs, -1), _stack(cs, -1))
        _compare(first, want_first, 1e-9, f"in_axes (0, None), {dtype}")
        if both:
            want_last = _stack([_reference(cases_d, x, c) for x, c in zip(xs, cs)], axis=-1)
            _compare(last, want_last, 1e-9, f"in_axes -1, out_axes -1, {dtype}")


def _cotangents(cases, xs, cs):
    """Per lane, a random weight per float output element (zeros for the others): the seed of the
    gradients, different in every lane."""
    rng = np.random.default_rng(7)
    out = []
    for x in xs:
        want = _reference(cases, x, cs)
        out.append({c.id: tk.tree_map(lambda leaf: (rng.uniform(0.5, 1.5, np.shape(leaf)) if np.asarray(leaf).dtype.kind == "f"
                                                    else np.zeros(np.shape(leaf))).astype(np.asarray(leaf).dtype), want[c.id])
                    for c in cases})
    return out


def _gradient_program(cases, both: bool):
    """Per-example gradients, vmap of tk.vjp (the lanes' backward passes batched); with `both`, in
    the same program, the gradient of the batched program, tk.vjp of vmap (the batched forward
    differentiated)."""
    table = _table(cases)

    def joint(xs, cs, ct):
        out, pullback = tk.vjp(lambda xs: table(xs, cs), xs)
        return out, pullback(ct)[0]

    def program(xs, cs, cts):
        per_example = tk.vmap(joint, in_axes=(0, None, 0))(xs, cs, cts)
        if not both:
            return per_example, None
        _, pullback = tk.vjp(lambda xs: tk.vmap(table, in_axes=(0, None))(xs, cs), xs)
        return per_example, pullback(cts)[0]

    return program, joint


def check_gradients(cases, backend):
    """vmap of the cases' tk.vjp (per-example gradients) and tk.vjp of their vmap (the gradient of
    the batched program, each lane seeded with its own cotangent) against a loop of the unbatched
    tk.vjp on the interpreter (whose gradients tests/test_numpy.py checks against finite differences).
    The compiled backend runs the first only: the second is the batched primitives' own VJP rules,
    and the tests of composition below run it compiled."""
    both = backend == "interpret"
    cases, lanes = _lanes(tuple(c.id for c in cases if c.grad), "float64")
    xs = [lane[0] for lane in lanes]
    cs = lanes[0][1]
    cts = _cotangents(cases, xs, cs)
    program, joint = _gradient_program(cases, both)
    loop = [jit_on("interpret", joint)(x, cs, ct) for x, ct in zip(xs, cts)]
    with np.errstate(all="ignore"):
        (out, per_example), of_batched = jit_on(backend, program)(_stack(xs), cs, _stack(cts))
    _compare(out, _stack([out for out, _ in loop]), 1e-9, "values")
    _compare(per_example, _stack([g for _, g in loop]), 1e-8, "vmap of vjp")
    if both:
        _compare(of_batched, _stack([g for _, g in loop]), 1e-8, "vjp of vmap")


TABLE_WARNINGS = [pytest.mark.filterwarnings("ignore:`row_stack` alias is deprecated:DeprecationWarning"),
                  pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
                  pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]


@pytest.mark.parametrize("family", list(FAMILIES))
@TABLE_WARNINGS[0]
@TABLE_WARNINGS[1]
@TABLE_WARNINGS[2]
def test_every_case_of_the_table_matches_a_loop(family):
    """On the interpreter, every case of the table: values (two kinds of in_axes), and gradients
    both ways (vmap of vjp, vjp of vmap)."""
    check_values(FAMILIES[family], "interpret")
    if any(c.grad for c in FAMILIES[family]):
        check_gradients(FAMILIES[family], "interpret")


def _primitives(graph, out):
    for e in graph.eqns:
        out.add(e.primitive.name)
        for p in e.params.values():
            if isinstance(p, tk.Graph):
                _primitives(p, out)
    return out


@functools.cache
def covering_cases(gradients: bool) -> tuple:
    """Cases of the table whose programs together hold every primitive the whole table's do (their
    gradients' too, with `gradients`), chosen greedily by new primitives per equation: what the
    compiled backend runs, batched, at a fraction of the compile time of every case."""
    found = {}
    for c in (c for cases in FAMILIES.values() for c in cases if c.grad or not gradients):
        dtype = _dtypes([c])[0]
        args = case_inputs(c, dtype)
        fn = lambda *a, c=c: c.fn(*a)  # noqa: E731
        if gradients:
            split = tk.make_ir(fn, mode="vjp")(*args)
            graphs = (split.forward, split.backward)
        else:
            graphs = (tk.make_ir(fn)(*args),)
        found[c.id] = (c, set().union(*[_primitives(g, set()) for g in graphs]), sum(len(g.eqns) for g in graphs))
    left, chosen = set().union(*[p for _, p, _ in found.values()]), []
    while left:
        best = max(found, key=lambda i: len(found[i][1] & left) / found[i][2])
        chosen.append(found[best][0])
        left -= found[best][1]
    return tuple(chosen)


@TABLE_WARNINGS[0]
@TABLE_WARNINGS[1]
@TABLE_WARNINGS[2]
def test_the_tables_primitives_batched_on_cpu():
    """The compiled backend, on cases that hold every primitive of the table, batched."""
    check_values(covering_cases(False), "cpu")


@TABLE_WARNINGS[0]
@TABLE_WARNINGS[1]
@TABLE_WARNINGS[2]
def test_the_tables_gradients_batched_on_cpu():
    """The compiled backend, on cases whose gradients hold every primitive of the table's gradients."""
    check_gradients(covering_cases(True), "cpu")


# ----------------------------------------------------------------------------- helpers for the rest

BACKENDS = ("interpret", "cpu")
RNG = np.random.default_rng(11)


def loop(f, *args, in_axes=0, out_axes=0):
    """The reference: f on each lane in a Python loop on the interpreter, results np.stack'ed."""
    axes = in_axes if isinstance(in_axes, tuple) else (in_axes,) * len(args)
    size = next(np.shape(a)[ax] for a, ax in zip(args, axes) if ax is not None)
    lanes = [jit_on("interpret", f)(*[a if ax is None else np.take(a, i, axis=ax) for a, ax in zip(args, axes)])
             for i in range(size)]
    return _stack(lanes, axis=out_axes)


def close(got, want, tol=1e-10):
    assert_tree_close(got, want, tol)


def check_grad_interpreted(f, args):
    """tk.check_grad (central differences) on the interpreter: it compiles on the default backend."""
    with mock.patch("tracekern.backends.default_backend", lambda: "interpret"):
        tk.check_grad(f, args)


def vm(backend, f, **kw):
    return jit_on(backend, tk.vmap(f, **kw))


def counts(f, *args, **kw) -> dict:
    """How often each primitive occurs in the batched graph, sub-graphs (loop bodies, branches) included."""
    out: dict = {}

    def walk(g):
        for e in g.eqns:
            out[e.primitive.name] = out.get(e.primitive.name, 0) + 1
            for p in e.params.values():
                if isinstance(p, tk.Graph):
                    walk(p)
    walk(tk.make_ir(f, mode="vmap", **kw)(*args))
    return out


# ----------------------------------------------------------------------------- in_axes and out_axes


def _affine(w, x, b):
    return np.tanh(x @ w + b), np.sum(w)


@pytest.mark.parametrize("backend", BACKENDS)
def test_in_axes_out_axes_of_every_kind(backend):
    w, x, b = RNG.standard_normal((4, 3)), RNG.standard_normal((5, 2, 4)), RNG.standard_normal(3)
    # a weight shared by the lanes, x batched on axis 0, b shared: the second output does not depend on the batch
    got = vm(backend, _affine, in_axes=(None, 0, None), out_axes=(0, None))(w, x, b)
    close(got, (loop(lambda x: _affine(w, x, b)[0], x), np.sum(w)))
    # batched on a middle and on the last axis, the result's batch axis last (negative) and second
    xm = np.moveaxis(x, 0, 1)
    ws = RNG.standard_normal((4, 3, 5))
    got = vm(backend, _affine, in_axes=(-1, 1, None), out_axes=(1, -1))(ws, xm, b)
    want0 = np.stack([_affine(ws[..., i], x[i], b)[0] for i in range(5)], axis=1)
    want1 = np.stack([np.sum(ws[..., i]) for i in range(5)])
    close(got, (want0, want1))
    # an output that does not depend on the batch, with an int out_axes: every lane gets it
    got = vm(backend, _affine, in_axes=(None, 0, None), out_axes=0)(w, x, b)
    close(got[1], np.full(5, np.sum(w)))


def test_in_axes_pytree_prefixes_dicts_and_keyword_arguments():
    params = {"w": RNG.standard_normal((4, 3)), "b": RNG.standard_normal((6, 3))}
    xs = (RNG.standard_normal((6, 2, 4)), RNG.standard_normal((2, 6)))

    def f(p, xs, scale=1.0):
        return {"y": np.tanh(xs[0] @ p["w"] + p["b"]) * scale, "z": xs[1] * 2}

    g = tk.vmap(f, in_axes=({"w": None, "b": 0}, (0, 1)))
    got = g(params, xs)
    want = [f({"w": params["w"], "b": params["b"][i]}, (xs[0][i], xs[1][:, i])) for i in range(6)]
    close(got, _stack(want))
    # keyword arguments are batched along axis 0, as in JAX
    scale = np.arange(1.0, 7.0)
    got = g(params, xs, scale=scale)
    want = [f({"w": params["w"], "b": params["b"][i]}, (xs[0][i], xs[1][:, i]), scale=scale[i]) for i in range(6)]
    close(got, _stack(want))
    # an argument not batched at all reaches the function as it is (a Python value stays one)
    h = tk.vmap(lambda x, n: np.sum(x[:n]), in_axes=(0, None))
    close(tk.jit(h, static_argnums=1)(np.ones((3, 5)), 2), np.full(3, 2.0))


def test_the_listing_shows_the_batch_axis():
    ir = tk.make_ir(_affine, mode="vmap", in_axes=(None, 1, None))(np.ones((4, 3)), np.ones((2, 5, 4)), np.ones(3))
    text = str(ir)
    assert "a:f64[4,3], b:f64[2,5,4] (batch axis 1), c:f64[3]" in text, text
    assert "f64[5,2,3]" in text and "matmul" in text, text


# ----------------------------------------------------------------------------- composition


def _mlp_loss(w, x, y):
    return np.sum((np.tanh(x @ w) - y) ** 2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_vmap_of_grad_gives_per_example_gradients_and_grad_of_vmap_sums_them(backend):
    w, xs, ys = RNG.standard_normal((3, 2)), RNG.standard_normal((4, 5, 3)), RNG.standard_normal((4, 5, 2))
    per_example = vm(backend, tk.grad(_mlp_loss), in_axes=(None, 0, 0))(w, xs, ys)
    want = loop(tk.grad(_mlp_loss), w, xs, ys, in_axes=(None, 0, 0))
    close(per_example, want)
    total = lambda w, xs, ys: np.sum(tk.vmap(_mlp_loss, in_axes=(None, 0, 0))(w, xs, ys))  # noqa: E731
    close(jit_on(backend, tk.grad(total))(w, xs, ys), want.sum(axis=0))
    if backend == "interpret":
        check_grad_interpreted(total, (w, xs, ys))          # grad of vmap against central differences
    # grad of grad through a vmap, and a vmap of it
    hvp = lambda w, xs, ys: tk.grad(lambda w: np.sum(tk.grad(total)(w, xs, ys) ** 2))(w)  # noqa: E731
    close(jit_on(backend, hvp)(w, xs, ys), jit_on("interpret", hvp)(w, xs, ys))


@pytest.mark.parametrize("backend", BACKENDS)
def test_nested_vmap_jit_inside_and_variables_by_closure(backend):
    v = tk.Variable(np.array([0.5, -1.0, 2.0]), name="v")
    inner = tk.jit(lambda a, b: np.sum(a * b * v) + np.max(a))
    pairwise = tk.vmap(tk.vmap(inner, in_axes=(None, 0)), in_axes=(0, None))
    a, b = RNG.standard_normal((4, 3)), RNG.standard_normal((5, 3))
    got = jit_on(backend, pairwise)(a, b)
    want = np.array([[np.sum(a[i] * b[j] * v.value) + np.max(a[i]) for j in range(5)] for i in range(4)])
    close(got, want)
    # the Variable is an input of the compiled code, not a constant: assign reuses it
    v.assign(np.array([1.0, 1.0, 1.0]))
    close(jit_on(backend, pairwise)(a, b), np.array([[np.sum(a[i] * b[j]) + np.max(a[i]) for j in range(5)] for i in range(4)]))
    # per-example gradients with respect to the Variable (vmap of grad wrt=[v])
    g = tk.vmap(tk.grad(lambda a: np.sum(np.tanh(a * v)), wrt=[v]))(a)
    want = np.stack([(1 - np.tanh(a[i] * v.value) ** 2) * a[i] for i in range(4)])
    close(g[1][0], want)


# ----------------------------------------------------------------------------- control flow


def _branch(p, x):
    return tk.cond(p > 0, lambda a: (np.sin(a) * 2, np.sum(a)), lambda a: (-a, np.max(a)), x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cond_with_unbatched_predicate_stays_a_cond_and_batched_becomes_a_select(backend):
    ps, xs = np.array([1.0, -1.0, 2.0, -0.5]), RNG.standard_normal((4, 3))
    close(vm(backend, _branch)(ps, xs), loop(_branch, ps, xs))
    assert "cond" not in counts(_branch, ps, xs) and counts(_branch, ps, xs)["select"] >= 2
    for p in (np.float64(1.0), np.float64(-1.0)):
        close(vm(backend, _branch, in_axes=(None, 0))(p, xs), loop(_branch, p, xs, in_axes=(None, 0)))
        assert counts(_branch, p, xs, in_axes=(None, 0))["cond"] == 1
    # gradients: per lane the taken branch's
    loss = lambda p, x: np.sum(_branch(p, x)[0] ** 2) + _branch(p, x)[1]  # noqa: E731
    close(vm(backend, tk.grad(loss, argnums=1))(ps, xs), loop(tk.grad(loss, argnums=1), ps, xs))
    total = lambda ps, xs: np.sum(tk.vmap(loss)(ps, xs))  # noqa: E731
    close(jit_on(backend, tk.grad(total, argnums=1))(ps, xs), loop(tk.grad(loss, argnums=1), ps, xs))


def _halvings(x, limit):
    """Halve x until its largest entry is below the limit: a trip count per lane."""
    def body(s):
        v, n = s
        return v * 0.5 + 0.01 * np.sin(v), n + 1
    v, n = tk.while_loop(lambda s: np.max(s[0]) > limit, body, (x, np.int64(0)))
    return v, n


@pytest.mark.parametrize("backend", BACKENDS)
def test_while_with_a_batched_predicate_runs_until_every_lane_is_done(backend):
    xs = np.array([[1.0, 3.0], [40.0, 2.0], [0.1, 0.2], [9.0, 9.5]])
    limits = np.array([0.5, 1.0, 1.0, 0.05])
    v, n = vm(backend, _halvings)(xs, limits)
    want_v, want_n = loop(_halvings, xs, limits)
    assert list(n) == list(want_n) and len(set(want_n.tolist())) == 4     # (four different trip counts, one 0)
    close(v, want_v)
    # an unbatched predicate (a counter) with a batched carry stays a plain loop
    f = lambda x: tk.while_loop(lambda s: s[1] < 3, lambda s: (np.sin(s[0]) + s[0], s[1] + 1), (x, np.int64(0)))  # noqa: E731
    close(vm(backend, f)(xs), loop(f, xs))
    c_batched, c_plain = counts(_halvings, xs, limits), counts(f, xs)
    assert c_batched["while"] == c_plain["while"] == 1 and c_batched["select"] >= 2 and "select" not in c_plain


def _while_loss(checkpoint):
    def loss(x, limit):
        def body(s):
            v, n = s
            return np.tanh(v) * 1.5 + v * 0.3, n + 1
        v, _ = tk.while_loop(lambda s: np.sum(s[0]) < limit, body, (x, np.int64(0)), checkpoint=checkpoint)
        return np.sum(v ** 2)
    return loss


WHILE_ARGS = (np.array([[0.1, 0.2], [0.5, 0.4], [2.0, 3.0]]), np.array([3.0, 1.5, 1.0]))   # trip counts 3, 1, 0


@pytest.mark.parametrize("backend, checkpoint", [("interpret", None), ("interpret", 2), ("cpu", None)])
def test_gradients_through_a_batched_while_loop(backend, checkpoint):
    """(A while loop's backward is a scan_revolve with or without checkpoints: the cpu backend runs
    the batched one, with per-lane trip counts, once.)"""
    loss = _while_loss(checkpoint)
    xs, limits = WHILE_ARGS
    trips = vm("interpret", lambda x, limit: tk.while_loop(lambda s: np.sum(s[0]) < limit, lambda s: (
        np.tanh(s[0]) * 1.5 + s[0] * 0.3, s[1] + 1), (x, np.int64(0)))[1])(xs, limits)
    assert len(set(trips.tolist())) == 3 and trips[-1] == 0, trips     # (each lane its own trip count)
    per_example = vm(backend, tk.grad(loss))(xs, limits)
    close(per_example, loop(tk.grad(loss), xs, limits))
    total = lambda xs, limits: np.sum(tk.vmap(loss)(xs, limits))  # noqa: E731
    close(jit_on(backend, tk.grad(total))(xs, limits), per_example)
    if backend == "interpret":
        check_grad_interpreted(total, (xs, limits))


def _rnn(h, xs, w):
    def step(c, x):
        c = np.tanh(c * w + x)
        return c, np.sum(c)
    return tk.scan(step, h, xs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_scan_batches_carries_sequences_and_closures(backend):
    h, xs, w = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 5, 2)), RNG.standard_normal((3, 2))
    close(vm(backend, _rnn)(h, xs, w), loop(_rnn, h, xs, w))
    # an unbatched initial carry made batched by the sequence; a closure (w) batched, xs shared
    for axes in ((None, 0, None), (None, None, 0)):
        close(vm(backend, _rnn, in_axes=axes)(h[0] if axes[0] is None else h, xs[0] if axes[1] is None else xs,
                                               w[0] if axes[2] is None else w),
              loop(_rnn, h[0] if axes[0] is None else h, xs[0] if axes[1] is None else xs, w[0] if axes[2] is None else w,
                   in_axes=axes))
    # reverse, fori_loop with static and traced bounds (a batched bound: a while loop with a batched predicate)
    rev = lambda h, xs: tk.scan(lambda c, x: (c * 0.9 + x, c), h, xs, reverse=True)  # noqa: E731
    close(vm(backend, rev)(h, xs), loop(rev, h, xs))
    steps = lambda x, n: tk.fori_loop(0, n, lambda i, v: v * 1.1 + i, x)  # noqa: E731
    ns = np.array([0, 3, 1], np.int64)
    close(vm(backend, steps)(h, ns), loop(steps, h, ns))
    close(vm(backend, lambda x: steps(x, 4))(h), loop(lambda x: steps(x, 4), h))


def _scan_loss(checkpoint):
    def loss(h, xs, w):
        c, ys = tk.scan(lambda c, x: (np.tanh(c * w + x), np.sum(c * c)), h, xs, checkpoint=checkpoint)
        return np.sum(c) + np.sum(ys)
    return loss


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("checkpoint", [None, 2])
def test_gradients_through_a_batched_scan(backend, checkpoint):
    loss = _scan_loss(checkpoint)
    h, xs, w = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 5, 2)), RNG.standard_normal(2)
    g = tk.grad(loss, argnums=(0, 1, 2))
    close(vm(backend, g, in_axes=(0, 0, None))(h, xs, w), loop(g, h, xs, w, in_axes=(0, 0, None)))
    total = lambda h, xs, w: np.sum(tk.vmap(loss, in_axes=(0, 0, None))(h, xs, w))  # noqa: E731
    got = jit_on(backend, tk.grad(total, argnums=(0, 1, 2)))(h, xs, w)
    want = loop(g, h, xs, w, in_axes=(0, 0, None))
    close(got, (want[0], want[1], want[2].sum(axis=0)))


# ----------------------------------------------------------------------------- annotations


@tk.custom_gradient
def _log1pexp(x):
    e = np.exp(x)

    def grad(upstream):
        return upstream * (1 - 1 / (1 + e))
    return np.log(1 + e), grad


_weights = tk.Variable(np.array([0.5, 2.0]), name="weights")


@tk.custom_gradient
def _linear_poly(x):
    poly = _weights[1] * x + _weights[0]

    def grad_fn(dpoly, variables):
        return dpoly * _weights[1], [np.stack([np.sum(dpoly), np.sum(dpoly * x)])]
    return poly, grad_fn


@pytest.mark.parametrize("backend", BACKENDS)
def test_custom_gradient_keeps_its_backward_under_vmap(backend):
    xs = np.array([[100.0, 1.0], [-3.0, 50.0], [0.5, 700.0]])
    loss = lambda x: np.sum(_log1pexp(x))  # noqa: E731
    per_example = vm(backend, tk.grad(loss))(xs)
    close(per_example, 1 / (1 + np.exp(-xs)))           # the custom gradient (the plain one is nan at 700)
    total = lambda xs: np.sum(tk.vmap(loss)(xs))  # noqa: E731
    close(jit_on(backend, tk.grad(total))(xs), per_example)
    # a Variable read by a custom gradient: its gradient per lane (vmap of grad), summed (grad of vmap)
    f = lambda x: np.sum(_linear_poly(x) ** 2)  # noqa: E731
    dx, (dw,) = vm(backend, tk.grad(f, wrt=[_weights]))(xs)
    want = loop(tk.grad(f, wrt=[_weights]), xs)
    close((dx, dw), (want[0], want[1][0]))
    _, (dw_total,) = jit_on(backend, tk.grad(lambda xs: np.sum(tk.vmap(f)(xs)), wrt=[_weights]))(xs)
    close(dw_total, want[1][0].sum(axis=0))


def _annotated_loss(annotated=True):
    def layer(h, w):
        return np.tanh(h @ w)

    f, g = (lambda x: np.tanh(x) * 0.5), np.sin
    layer = tk.recompute(layer) if annotated else layer
    block = tk.reversible(f, g) if annotated else lambda x1, x2: (x1 + f(x2), x2 + g(x1 + f(x2)))
    st_round = tk.grad_pass_through(np.round)

    def loss(x, w):
        h = layer(layer(x, w), w)
        y1, y2 = block(h, x * 2)
        return np.sum(y1 * y2) + np.sum(st_round(x * 3)) + np.sum(tk.stop_gradient(h) * x)
    return loss


@pytest.mark.parametrize("backend", BACKENDS)
def test_recompute_reversible_pass_through_and_stop_gradient_keep_their_meaning(backend):
    loss = _annotated_loss()
    xs, w = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 3))
    g = tk.grad(loss, argnums=(0, 1))
    close(vm(backend, g, in_axes=(0, None))(xs, w), loop(g, xs, w, in_axes=(0, None)))
    total = lambda xs, w: np.sum(tk.vmap(loss, in_axes=(0, None))(xs, w))  # noqa: E731
    want = loop(g, xs, w, in_axes=(0, None))
    close(jit_on(backend, tk.grad(total, argnums=(0, 1)))(xs, w), (want[0], want[1].sum(axis=0)))
    # the batched program recomputes and reconstructs as each lane does: tk.vjp of it saves the shared
    # weight once and, per lane, what one lane's tk.vjp saves besides it
    lane = tk.make_ir(loss, mode="vjp")(xs[0], w).residual_bytes
    batched = tk.make_ir(tk.vmap(loss, in_axes=(0, None)), mode="vjp")(xs, w).residual_bytes
    assert batched == w.nbytes + len(xs) * (lane - w.nbytes), (lane, batched)


# ----------------------------------------------------------------------------- random numbers and print


def _draw(k, x):
    return tk.random.normal(k, (3,), np.float64) + tk.random.uniform(k, (3,), np.float64) * x


def test_random_draws_follow_jax_a_batched_key_draws_per_lane_an_unbatched_key_the_same():
    keys = tk.random.split(tk.random.key(0), 4)
    draw = _draw
    x = np.arange(3.0)
    got = tk.vmap(draw, in_axes=(0, None))(keys, x)         # (compiled on the default backend, cpu)
    close(got, np.stack([draw(k, x) for k in keys]), tol=1e-12)
    assert len({tuple(r) for r in np.round(got, 12)}) == 4
    same = vm("interpret", draw, in_axes=(None, 0))(keys[0], np.stack([x, x, x]))
    assert np.array_equal(same[0], same[1]) and np.array_equal(same[0], same[2])
    # split and fold_in of a batched key
    close(vm("interpret", lambda k: tk.random.split(k, 2))(keys), np.stack([tk.random.split(k, 2) for k in keys]), tol=0)
    close(vm("interpret", tk.random.fold_in, in_axes=(0, None))(keys, 3), np.stack([tk.random.fold_in(k, 3) for k in keys]),
          tol=0)


def _printing(x):
    tk.print("x:", x)
    return tk.cond(np.sum(x) > 0, lambda v: (tk.print("pos"), v)[1], lambda v: (tk.print("neg"), -v)[1], x)


@pytest.mark.parametrize("backend", BACKENDS)
def test_print_prints_once_per_run_with_the_stacked_lanes(backend, capfd):
    fn = vm(backend, _printing)
    capfd.readouterr()
    out = fn(np.array([[1.0, 2.0], [-3.0, 0.5]]))
    close(out, np.array([[1.0, 2.0], [3.0, -0.5]]))
    # one line with both lanes; a batched predicate runs both branches, so both branches' prints run
    assert capfd.readouterr().out.splitlines() == ["x: [[ 1.   2. ]", " [-3.   0.5]]", "pos", "neg"]


# ----------------------------------------------------------------------------- errors


def test_errors_name_the_users_line():
    f = lambda x, y: x + y  # noqa: E731
    here = "test_vmap.py:"
    with pytest.raises(ValueError, match=r"(?s)disagree on the batch size \(size 3: argument 0 \('x'\).*size 4: argument 1 "
                                         rf"\('y'\).*{here}"):
        tk.vmap(f)(np.ones(3), np.ones((4, 2)))
    with pytest.raises(ValueError, match=rf"(?s)in_axes 2 for argument 1 \('y'\), which has shape \(4, 2\).*{here}"):
        tk.vmap(f, in_axes=(0, 2))(np.ones(4), np.ones((4, 2)))
    with pytest.raises(ValueError, match=rf"(?s)argument 0 \('x'\) is 0-d .* no axis 0 to map over.*{here}"):
        tk.vmap(f)(np.float64(1.0), np.ones(3))
    with pytest.raises(ValueError, match=rf"(?s)in_axes\[1\] is \(0, 0\), which does not match the structure of argument 1 .*{here}"):
        tk.vmap(lambda x, t: x + t[0], in_axes=(0, (0, 0)))(np.ones(3), (np.ones(3),))
    with pytest.raises(ValueError, match=rf"(?s)has 3 entries, but the function was called with 2 positional arguments.*{here}"):
        tk.vmap(f, in_axes=(0, 0, 0))(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match=rf"(?s)out_axes is None for output \[1\] \(f64\[\] per lane\), but it depends on the "
                                         rf"batched arguments.*made at .*{here}.*{here}"):
        tk.vmap(lambda x: (x, np.sum(x)), out_axes=(0, None))(np.ones((3, 2)))
    with pytest.raises(ValueError, match=rf"(?s)out_axes 2 for the output, which is f64\[\] per lane.*{here}"):
        tk.vmap(np.sum, out_axes=2)(np.ones((3, 2)))
    with pytest.raises(ValueError, match=rf"(?s)map over no argument.*{here}"):
        tk.vmap(f, in_axes=None)(np.ones(3), np.ones(3))
    with pytest.raises(TypeError, match="in_axes must be an int, None, or tuples"):
        tk.vmap(f, in_axes="0")
    with pytest.raises(ValueError, match="takes no static_argnums"):
        tk.make_ir(f, mode="vmap", static_argnums=1)(np.ones(3), 2)
    # inside another trace too
    with pytest.raises(ValueError, match=rf"(?s)disagree on the batch size.*{here}"):
        tk.jit(lambda a, b: tk.vmap(f)(a, b))(np.ones(3), np.ones(2))


# ----------------------------------------------------------------------------- every primitive has a rule, and is batched


def test_every_primitive_has_a_batching_rule():
    missing = [n for n, p in REGISTRY.items() if p not in batching.RULES and type(p).batch is Primitive.batch]
    assert not missing, f"primitives without a batching rule: {missing}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_rules_with_one_operand_batched(backend):
    """matmul and solve with one batched operand put the lanes side by side in one matrix;
    searchsorted in a batched sorted array counts; gathers and scatters with a shared operand."""
    a, b = RNG.standard_normal((2, 3, 4)), RNG.standard_normal((2, 4, 5))
    stack_a, stack_b = RNG.standard_normal((6, 2, 3, 4)), RNG.standard_normal((6, 2, 4, 5))
    mats, vecs = RNG.standard_normal((6, 4)), RNG.standard_normal((6, 4, 4)) + 4 * np.eye(4)
    sq, rhs = RNG.standard_normal((3, 3)) + 3 * np.eye(3), RNG.standard_normal((6, 3, 2))
    srt = np.sort(RNG.standard_normal((6, 5)), axis=-1)
    srt[1, -1] = np.nan
    idx = np.array([[2, 0], [1, 1], [0, 2], [2, 2], [1, 0], [0, 1]])
    f = lambda a, b, m, v, s, r, x, i: (  # noqa: E731
        a @ b, m @ v, np.linalg.solve(s, r), np.linalg.solve(v, m), np.searchsorted(x, m), np.searchsorted(x, m, side="right"),
        np.take(m, i), tk.at(m)[i].add(x[:2]))
    cases = [((0, None, 0, None, None, 0, None, 0), (stack_a, b, mats, vecs[0], sq, rhs, srt[0], idx)),
             ((None, 0, None, 0, None, 0, 0, None), (a, stack_b, mats[0], vecs, sq, rhs, srt, idx[0]))]
    for axes, args in cases:
        close(vm(backend, f, in_axes=axes)(*args), loop(f, *args, in_axes=axes))


def _control_programs():
    """(function, arguments, in_axes) of the tests above that batch control flow and annotations."""
    xs, w = RNG.standard_normal((4, 3)), RNG.standard_normal((3, 3))
    h, seq = RNG.standard_normal((3, 2)), RNG.standard_normal((3, 5, 2))
    counter = lambda x: tk.while_loop(lambda s: s[1] < 3, lambda s: (np.sin(s[0]) + s[0], s[1] + 1), (x, np.int64(0)))  # noqa: E731
    return [
        (_branch, (np.ones(4), xs), 0), (_branch, (np.float64(1.0), xs), (None, 0)),
        (_halvings, WHILE_ARGS, 0), (counter, (xs,), 0),
        (tk.grad(_while_loss(None)), WHILE_ARGS, 0), (tk.grad(_while_loss(2)), WHILE_ARGS, 0),
        (tk.grad(lambda x: np.sum(counter(x)[0])), (xs,), 0),
        (tk.grad(_scan_loss(None)), (h, seq, h[0]), (0, 0, None)), (tk.grad(_scan_loss(2)), (h, seq, h[0]), (0, 0, None)),
        (tk.grad(_annotated_loss()), (xs, w), (0, None)), (tk.grad(lambda x: np.sum(_log1pexp(x))), (xs,), 0),
        (_printing, (xs,), 0), (_draw, (tk.random.split(tk.random.key(0), 4), np.ones(3)), (0, None)),
    ]


def test_every_primitive_is_batched_by_these_tests():
    """The table's programs (values, and gradients as vmap of vjp) and the control-flow programs
    above, traced batched: every primitive with operands goes through its batching rule in one of
    them (a new primitive without a row anywhere here fails)."""
    seen = set()
    real = batching.rule_for

    def recording(prim):
        seen.add(prim.name)
        return real(prim)

    with mock.patch.object(batching, "rule_for", recording), np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for cases in FAMILIES.values():
            for dtype in _dtypes(cases):
                cases_d, lanes = _lanes(tuple(c.id for c in cases), dtype)
                xs, cs = _stack([lane[0] for lane in lanes]), lanes[0][1]
                tk.make_ir(_values_program(cases_d, False))(xs, cs, None, None)
            graded = [c for c in cases if c.grad]
            if graded:
                cases_g, lanes = _lanes(tuple(c.id for c in graded), "float64")
                xs, cs = _stack([lane[0] for lane in lanes]), lanes[0][1]
                cts = _cotangents(cases_g, [lane[0] for lane in lanes], cs)
                tk.make_ir(_gradient_program(cases_g, False)[0])(xs, cs, _stack(cts))
        for f, args, in_axes in _control_programs():
            tk.make_ir(f, mode="vmap", in_axes=in_axes)(*args)
    nullary = {"const", "full", "iota"}   # (no operands: never batched)
    missing = sorted(set(REGISTRY) - nullary - seen)
    assert not missing, f"primitives no test batches: {missing}"


# ----------------------------------------------------------------------------- random programs


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.lists(st.sampled_from([0, -1, None]), min_size=3, max_size=3))
def test_random_programs_batched_match_a_loop(program, axes):
    """The random programs of tests/test_property.py, vmapped with random in_axes (the first input
    always batched), against NumPy on each lane; and vmap of their gradient against a loop of it."""
    f, _ = instantiate(program)
    shapes, _, seed = program
    rng = np.random.default_rng(seed)
    axes = tuple([axes[0] if axes[0] is not None else 0] + axes[1:len(shapes)])
    lanes = [[rng.uniform(-1.5, 1.5, s) for s in shapes] for _ in range(LANES)]
    args = [lanes[0][k] if ax is None else np.stack([lane[k] for lane in lanes], axis=ax) for k, ax in enumerate(axes)]
    lane_args = [[lanes[0][k] if ax is None else lanes[i][k] for k, ax in enumerate(axes)] for i in range(LANES)]
    with mock.patch("tracekern.backends.default_backend", lambda: "interpret"):
        got = tk.vmap(f, in_axes=axes)(*args)
        np.testing.assert_allclose(got, [f(*a) for a in lane_args], rtol=1e-12, atol=1e-12)
        argnums = tuple(range(len(shapes)))
        grads = tk.vmap(tk.grad(f, argnums=argnums), in_axes=axes)(*args)
        want = [tk.grad(f, argnums=argnums)(*a) for a in lane_args]
        for k in argnums:
            np.testing.assert_allclose(grads[k], np.stack([w[k] for w in want]), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- cuda (the simulator in CI)


def _representative(w, x, limit, key):
    """Elementwise, a reduction, a matmul, a gather, a scan, a cond and a while loop with batched
    predicates, and a random draw: one program for the cuda backend."""
    h = np.tanh(x @ w) + tk.random.uniform(key, (2,), np.float64)
    picked = np.take(h, np.argsort(h))
    c, ys = tk.scan(lambda c, r: (c * 0.5 + r, np.sum(c)), np.zeros(2), np.stack([h, picked, h * 2]))
    s = tk.cond(np.sum(c) > 0, lambda v: v * 2, lambda v: -v, c)
    v, n = tk.while_loop(lambda t: np.max(np.abs(t[0])) > limit, lambda t: (t[0] * 0.5, t[1] + 1), (s, np.int64(0)))
    return v + ys[-1], n


def test_cuda_runs_a_batched_program_and_its_per_example_gradient():
    rng = np.random.default_rng(3)
    w, x = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    limits, keys = np.array([0.5, 2.0, 0.01, 1.0]), tk.random.split(tk.random.key(1), 4)
    f = tk.vmap(_representative, in_axes=(None, 0, 0, 0))
    got, want = jit_on("cuda", f)(w, x, limits, keys), tk.jit(f, backend="interpret")(w, x, limits, keys)
    close(got, want)
    assert len(set(want[1].tolist())) > 1          # lanes with different trip counts
    close(want, loop(_representative, w, x, limits, keys, in_axes=(None, 0, 0, 0)))
    g = tk.vmap(tk.grad(lambda w, x, limit, key: np.sum(_representative(w, x, limit, key)[0] ** 2)), in_axes=(None, 0, 0, 0))
    close(jit_on("cuda", g)(w, x, limits, keys), tk.jit(g, backend="interpret")(w, x, limits, keys))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")   # (the branch not taken, on
@pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")  # the interpreter: NumPy warns)
def test_the_branch_not_taken_never_reaches_a_gradient(backend):
    """A batched predicate runs both branches on every lane; the gradient of the batched program is
    still each lane's taken branch's, even where the other branch's derivative is inf or NaN (there,
    differentiating a select would give 0 * inf = NaN), for batched and shared operands alike."""
    branchy = lambda x, w: tk.cond(x > 0, lambda v, w: np.sqrt(v) * w, lambda v, w: v * w * 2.0, x, w)  # noqa: E731
    x, w = np.array([4.0, 0.0, -1.0]), np.float64(3.0)
    total = lambda x, w: np.sum(tk.vmap(branchy, in_axes=(0, None))(x, w))  # noqa: E731
    want = loop(tk.grad(branchy, argnums=(0, 1)), x, w, in_axes=(0, None))
    got = jit_on(backend, tk.grad(total, argnums=(0, 1)))(x, w)
    close(got, (want[0], want[1].sum()))
    assert np.all(np.isfinite(got[0]))
    # a while loop's finished lanes: the body on them (sqrt of a negative) is discarded in the gradient too
    steps = lambda x: tk.while_loop(lambda s: s > 0, lambda s: np.sqrt(s) - 1.0, x)  # noqa: E731
    xs = np.array([4.0, 9.0, -1.0])
    close(jit_on(backend, tk.grad(lambda x: np.sum(tk.vmap(steps)(x))))(xs), loop(tk.grad(steps), xs))


def test_a_vmapped_function_lowers_has_a_vjp_and_nests_with_loops():
    lane = lambda x, w: np.sum(np.tanh(x @ w))  # noqa: E731
    f = tk.vmap(lane, in_axes=(0, None))
    x, w = RNG.standard_normal((4, 3, 2)), RNG.standard_normal((2, 5))
    lowered = tk.jit(f, backend="interpret").lower(x, w)
    assert lowered.ir.outputs[0].aval.shape == (4,) and lowered.memory.residual_bytes > 0
    out, pullback = tk.vjp(tk.jit(f, backend="interpret"), x, w)
    dx, dw = pullback(np.arange(4.0))
    grads = loop(tk.grad(lane, argnums=(0, 1)), x, w, in_axes=(0, None))
    close((out, dx, dw), (loop(lane, x, w, in_axes=(0, None)), grads[0] * np.arange(4.0)[:, None, None],
                          np.tensordot(np.arange(4.0), grads[1], axes=1)))
    # a while loop with a batched predicate under two vmaps: each (outer, inner) lane its own trip count
    halve = lambda x, lim: tk.while_loop(lambda s: s[0] > lim, lambda s: (s[0] * 0.5, s[1] + 1), (x, 0))  # noqa: E731
    xs, lims = np.array([[1.0, 5.0, 9.0], [0.1, 30.0, 2.0]]), np.array([0.5, 1.0, 3.0])
    got = jit_on("interpret", tk.vmap(tk.vmap(halve), in_axes=(0, None)))(xs, lims)
    want = _stack([_stack([halve(xs[i, j], lims[j]) for j in range(3)]) for i in range(2)])
    close(got, want)
    # a Python number shared by the lanes keeps its weak type: float32 stays float32
    assert tk.vmap(lambda x, s: x * s, in_axes=(0, None))(np.ones((3, 2), np.float32), 2.0).dtype == np.float32


def test_batching_a_joint_vjp_graph_over_its_cotangent_gives_the_jacobian():
    """What jacrev will be (vmap of the pullback): the Graph -> Graph transforms compose, batching
    the joint graph of tk.vjp over its cotangent input, one row of the identity per lane."""
    f = lambda x: np.tanh(x) * np.sum(x ** 2)  # noqa: E731
    x = np.array([0.1, 0.5, -0.3])
    joint = autodiff.vjp(tk.make_ir(f)(x), [True], zeros=True)
    graph, flags = batching.batch_graph(joint.graph, [False, True], 3)
    value, jacobian = eval_graph(graph, [x, np.eye(3)])
    assert flags == [False, True]       # (the value does not depend on the cotangent: computed once)
    np.testing.assert_allclose(value, f(x), rtol=1e-15)
    eps = 1e-6
    want = np.stack([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(3)], axis=1)
    np.testing.assert_allclose(jacobian, want, rtol=1e-7, atol=1e-9)
