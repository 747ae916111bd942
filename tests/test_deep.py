"""Long programs: 10,000 chained operations trace, differentiate, plan and compile under Python's
default recursion limit (no stage of the pipeline recurses over a program's length), equal the
interpreter and finite differences of plain NumPy, and compile once per distinct loop text; random
deep chains (a property test); and long chains of views, whose index arithmetic nests."""
import sys

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import assert_tree_close
from tests.test_property import BINARY, RESHAPE, UNARY
from tracekern.primitives.core import eval_graph

OPS = 10_000


@pytest.fixture(autouse=True)
def default_recursion_limit():
    """Every test here runs with Python's default limit: nothing may pass by raising it."""
    assert sys.getrecursionlimit() <= 1000, sys.getrecursionlimit()


# -- the programs: each about 10,000 chained operations --------------------------------------------

def residual_chain(x, w):
    """2,500 layers of 4 elementwise operations (the probe's tanh chain, as a residual network so
    that neither the value nor the gradient vanishes with depth)."""
    for _ in range(OPS // 4):
        x = x + 1e-3 * np.tanh(x * w)
    return np.sum(x * x)


def horner(x, c):
    """A polynomial of 5,000 coefficients by Horner's rule: p = p * x + c[i], each c[i] a constant
    element of an argument."""
    p = c[0] * np.ones_like(x)
    for i in range(1, c.shape[0]):
        p = p * x + c[i]
    return np.sum(p)


def mixed(x, w):
    """A chain through matmuls and reductions: 1,666 layers of a matmul, a mean over rows and 4
    elementwise operations."""
    for _ in range(OPS // 6):
        h = x @ w
        x = x + 0.01 * np.tanh(h - np.mean(h, axis=1, keepdims=True))
    return np.sum(x * x)


def _sigmoid(z):
    return 1 / (1 + np.exp(-z))


def lstm(params, xs):
    """An LSTM unrolled over 400 steps as ADBench writes it (a Python loop over the time steps,
    small matmuls, sigmoid and tanh gates): about 25 operations a step."""
    wx, wh, b = params
    h = np.zeros((1, 4))
    c = np.zeros((1, 4))
    for t in range(xs.shape[0]):
        z = xs[t] @ wx + h @ wh + b
        i, f, o, g = z[:, 0:4], z[:, 4:8], z[:, 8:12], z[:, 12:16]
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
    return np.sum(h * h)


def _programs():
    rng = np.random.default_rng(0)
    return {
        "chain": (residual_chain, (np.linspace(-1, 1, 14), np.linspace(0.5, 1.0, 14))),
        "horner": (horner, (np.linspace(-0.9, 0.9, 14), rng.uniform(-0.5, 0.5, OPS // 2))),
        "mixed": (mixed, (rng.standard_normal((4, 3)), 0.5 * rng.standard_normal((3, 3)))),
        "lstm": (lstm, ((0.3 * rng.standard_normal((3, 16)), 0.3 * rng.standard_normal((4, 16)), np.zeros(16)),
                        rng.standard_normal((OPS // 25, 1, 3)))),
    }


# distinct loop kernels of each program's value_and_grad step: a repeated layer's loops share their
# text (fusion's bands, pinned views), so the count does not follow the depth
# ("mixed": 32 since its 3 x 3 and 4 x 3 products are loops rather than BLAS calls (fusion.small_products);
# 100 and 300 of its layers give 8 and 25 units, as before that change)
DISTINCT = {"chain": 10, "horner": 8, "mixed": 34, "lstm": 80}


def _central_differences(f, args, which, entries, eps=1e-6):
    """d f / d args[which].flat[k] for k in entries, by central differences of plain NumPy."""
    out = []
    for k in entries:
        plus, minus = [list(args), list(args)]
        for sign, a in ((1, plus), (-1, minus)):
            x = np.array(args[which], dtype=np.float64)
            x.flat[k] += sign * eps
            a[which] = x
        out.append((f(*plus) - f(*minus)) / (2 * eps))
    return np.array(out)


def _compiled_and_interpreted(fun, args):
    """fun(*args) on cpu (its public path: trace, differentiate, plan, compile) and the interpreter's
    run of the very graph cpu compiled (primitives.core.eval_graph, equation by equation with NumPy:
    what backend="interpret" runs, without tracing the program a second time); and the cpu entry."""
    got = fun(*args)
    entry = next(iter(fun._cache.values()))
    leaves = tk.tree_flatten(args)[0]
    want = tk.tree_unflatten(entry.out_treedef, eval_graph(entry.graph, [np.asarray(x) for x in leaves]))
    return got, want, entry


@pytest.mark.parametrize("name", list(_programs()))
def test_ten_thousand_chained_operations_on_interpret_and_cpu(name):
    f, args = _programs()[name]
    argnums = {"chain": (0, 1), "mixed": (0, 1)}.get(name, (0,))
    got, want, entry = _compiled_and_interpreted(tk.value_and_grad(f, argnums=argnums), args)
    assert len(entry.graph.eqns) >= 2 * OPS    # (the program is as long as it says: forward and backward)
    assert_tree_close(got, want, tol=1e-9)
    value, grads = want
    assert value == pytest.approx(f(*args), rel=1e-12)                          # plain NumPy
    for which in argnums:
        g = tk.tree_flatten(grads[which])[0][0]
        arg = tk.tree_flatten(args[which])[0][0]
        assert np.max(np.abs(g)) > 1e-3, "a gradient that vanished would compare equal to anything"
        entries = sorted({0, g.size // 2, g.size - 1})

        def along(x, which=which):   # (f of a new value of the first leaf of argument `which`)
            a = list(args)
            leaves, td = tk.tree_flatten(args[which])
            a[which] = tk.tree_unflatten(td, [x] + leaves[1:])
            return f(*a)
        fd = _central_differences(along, [arg], 0, entries)
        np.testing.assert_allclose(g.flat[entries], fd, rtol=1e-6, atol=1e-8)
    step = entry.run
    assert step.units <= DISTINCT[name], step.units
    assert step.driver.count("# kernel ") > 10 * DISTINCT[name] or name == "lstm"


def test_grad_of_grad_of_a_deep_chain():
    f, (x, w) = residual_chain, (np.linspace(-1, 1, 14), np.linspace(0.5, 1.0, 14))

    def short(x, w):
        for _ in range(250):
            x = x + 1e-3 * np.tanh(x * w)
        return np.sum(x * x)

    gg = tk.grad(lambda x, w: np.sum(tk.grad(short)(x, w) ** 2), argnums=(0, 1))
    got = tk.jit(gg)(x, w)
    want = tk.jit(gg, backend="interpret")(x, w)
    assert_tree_close(got, want, tol=1e-9)
    assert np.max(np.abs(want[1])) > 1e-3
    del f


@pytest.mark.parametrize("kind", ["roll", "flip", "reshape"])
def test_a_long_chain_of_views(kind):
    """Each view wraps the index of the one it reads: 400 rolls or reversing slices nested past
    Python's 200 parentheses, reshapes doubled the index's length each time."""
    def f(x):
        for _ in range(400 if kind != "reshape" else 60):
            if kind == "roll":
                x = np.roll(x, 1)
            elif kind == "flip":
                x = x[::-1]
            else:
                x = x.reshape(2, 7).T.reshape(14)
        return np.sum(x * np.arange(14.0) ** 2)

    x = np.linspace(-1, 1, 14)
    vag = tk.value_and_grad(f)
    assert_tree_close(tk.jit(vag)(x), tk.jit(vag, backend="interpret")(x), tol=1e-12)
    assert tk.jit(vag, backend="interpret")(x)[0] == pytest.approx(f(x), rel=1e-12)


# -- random deep chains ---------------------------------------------------------------------------

SHAPES = {"main": (3, 4), "row": (1, 4), "col": (3, 1), "vec": (4,)}


def _random_deep_program(seed: int, ops: int):
    """A random chain of about `ops` operations from tests/test_property.py's tables (elementwise
    unary and binary steps, broadcasting against the other inputs, reductions, a small matmul,
    slices): a random head, then a random layer repeated (as deep models are), each step a
    residual update x + eps * step(x), so that values and gradients stay of order one at any depth.
    (A head of many random steps would compile a kernel for each: the cost of the test, not of
    its depth.)"""
    rng = np.random.default_rng(seed)
    names = list(SHAPES)
    inputs = ["main"] + list(rng.choice(names, size=2))
    def draw():
        kind = rng.choice(["unary", "binary", "reshape"], p=[0.45, 0.35, 0.2])
        if kind == "unary":
            return ("unary", str(rng.choice(sorted(UNARY))))
        if kind == "binary":
            return ("binary", str(rng.choice(sorted(BINARY))), int(rng.integers(0, 3)))
        return ("reshape", str(rng.choice(sorted(RESHAPE))))
    head = [draw() for _ in range(int(rng.integers(1, 4)))]
    layer = [draw() for _ in range(int(rng.integers(2, 6)))]

    def step(cur, vals, s):
        if s[0] == "unary":
            return UNARY[s[1]](cur)
        if s[0] == "binary":
            return BINARY[s[1]](cur, vals[s[2]])
        return RESHAPE[s[1]](cur)

    def f(*xs):
        cur = xs[0]
        for s in head:
            cur = cur + 0.05 * step(cur, xs, s)
        for _ in range(repeats):
            for s in layer:
                cur = cur + eps * step(cur, xs, s)
        return np.sum(cur * cur) + 0.1 * np.sum(cur)

    args = tuple(rng.uniform(-1.0, 1.0, SHAPES[n]) for n in inputs)
    per_layer = len(tk.make_ir(lambda *xs: [step(xs[0], xs, s) for s in layer])(*args).eqns) + 2 * len(layer)
    repeats = max(1, ops // per_layer)
    eps = 1.0 / (repeats * len(layer))
    return f, args


@pytest.mark.parametrize("seed,ops", [(0, 1_000), (3, 10_000)])
def test_random_deep_chains_compile_and_equal_the_interpreter(seed, ops):
    f, args = _random_deep_program(seed, ops)
    n = len(tk.make_ir(f)(*args).eqns)
    assert ops * 0.8 <= n <= ops * 1.6, n
    argnums = tuple(range(len(args)))
    got, want, _ = _compiled_and_interpreted(tk.value_and_grad(f, argnums=argnums), args)
    assert_tree_close(got, want, tol=1e-9 * (1 + ops / 1000))
    assert want[0] == pytest.approx(f(*args), rel=1e-12)
    assert max(np.max(np.abs(g)) for g in want[1]) > 1e-3
