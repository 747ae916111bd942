"""Rank: arrays of every rank up to ir.MAX_RANK = 32 trace, differentiate and compile on every
backend (the cpu backend renders a loop nest deeper than render.FLAT_ABOVE axes as flat loops), equal
NumPy and finite differences; a rank above 32 (an argument, or made by reshape, expand_dims,
indexing with None, broadcasting) is a clear error at trace time naming the user's line."""
import inspect

import numpy as np
import pytest

import tracekern as tk
from tests.conftest import BACKENDS, assert_tree_close, jit_on
from tracekern.errors import ShapeError

THIS_FILE = __file__


def _shape(rank: int) -> tuple[int, ...]:
    """A tiny array of that rank with three axes longer than 1 (first, middle, last): a flat loop's
    index arithmetic has digits of its own to get wrong."""
    if rank == 1:
        return (3,)
    shape = [1] * rank
    shape[0], shape[rank // 2], shape[-1] = 2, 2, 3
    return tuple(shape)


def model(x, v):
    """Elementwise with broadcasting, a reduction over a middle axis (keepdims), a running sum, a
    transposing view, a batched matmul, a max over the last axis."""
    r = x.ndim
    y = np.tanh(x * v[:, 0]) + x ** 2
    z = y - np.mean(y, axis=r // 2, keepdims=True)
    c = np.cumsum(z, axis=0)
    t = np.swapaxes(c, 0, -1)
    return np.sum(t * t) + np.sum(np.sin(x @ v)) + np.sum(np.max(x, axis=-1))


def _central_differences(f, x, v, eps=1e-6):
    g = np.zeros_like(x)
    for k in range(x.size):
        plus, minus = x.copy(), x.copy()
        plus.flat[k] += eps
        minus.flat[k] -= eps
        g.flat[k] = (f(plus, v) - f(minus, v)) / (2 * eps)
    return g


# (cpu compiles rank 20's flat loops as it does rank 32's, at 40 s of Numba's time: ranks 1, 8 and 32 there)
@pytest.mark.parametrize("rank, backend", [(r, b) for r in (1, 8, 20, 32) for b in BACKENDS if (r, b) != (20, "cpu")])
def test_every_rank_up_to_32(rank, backend):
    rng = np.random.default_rng(rank)
    x = rng.uniform(-1, 1, _shape(rank))
    v = rng.uniform(-1, 1, (3, 2))
    vag = jit_on(backend, tk.value_and_grad(model, argnums=(0, 1)))
    got = vag(x, v)
    want = tk.jit(tk.value_and_grad(model, argnums=(0, 1)), backend="interpret")(x, v)
    assert_tree_close(got, want, tol=1e-10)
    value, (gx, gv) = want
    assert gx.shape == x.shape and gv.shape == v.shape
    assert value == pytest.approx(model(x, v), rel=1e-12)                     # plain NumPy
    np.testing.assert_allclose(gx, _central_differences(model, x, v), rtol=1e-6, atol=1e-8)
    assert np.max(np.abs(gx)) > 1e-2


def test_a_deep_nest_is_flat_and_a_shallow_one_is_not():
    """Rank 8 renders one loop per axis (as before); rank 9 one flat loop for axes 1 to 8."""
    def f(x):
        return np.sin(x) * 2.0

    sources = {}
    for rank in (8, 9):
        fn = tk.jit(f)
        fn(np.ones((2,) + (1,) * (rank - 2) + (3,)))
        sources[rank] = next(iter(fn._cache.values())).run.source
    assert "for i7 in range(3)" in sources[8] and "for f1 in range" not in sources[8]
    assert "for f1 in range(" in sources[9] and "for i8 in range" not in sources[9]


def _line_of(text: str) -> int:
    lines, start = inspect.getsourcelines(test_ranks_above_32_are_a_clear_error_at_trace_time)
    return start + next(i for i, line in enumerate(lines) if text in line)


def test_ranks_above_32_are_a_clear_error_at_trace_time():
    for rank in (33, 40, 64):
        x = np.ones((1,) * rank)
        with pytest.raises(ShapeError) as info:
            tk.grad(lambda x: np.sum(x * x))(x)   # an argument of that rank
        msg = str(info.value)
        assert f"rank {rank}" in msg and "at most 32" in msg and str(x.shape) in msg and "reshape" in msg
        assert f"{THIS_FILE}:{_line_of('an argument of that rank')}" in msg
    x = np.ones((2,) + (1,) * 30 + (3,))          # rank 32: fine, one more axis is not
    for make, marker in [(lambda x: x.reshape((1,) * 31 + (2, 3)), "reshape((1,)"),
                         (lambda x: np.expand_dims(x, 1), "expand_dims(x, 1)"),
                         (lambda x: x[None], "x[None]"),
                         (lambda x: x * np.ones((1,) * 33), "np.ones((1,) * 33)")]:
        with pytest.raises(ShapeError) as info:
            tk.grad(lambda x: np.sum(make(x)))(x)
        msg = str(info.value)
        assert "rank 33" in msg and "at most 32" in msg and marker in msg, msg
