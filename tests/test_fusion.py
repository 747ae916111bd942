"""backends/fusion.py on its own: how a graph's equations group into loop and call kernels, which
values become buffers, and how long each lives (no compile: plans only)."""
import numpy as np

import tracekern as tk
from tracekern import passes
from tracekern.backends import fusion
from tracekern.backends.fusion import CallKernel, Compute, Literal, LoopKernel, Read


def plan_of(f, *args):
    return fusion.plan(passes.inline_calls(tk.make_ir(f)(*args)))


def test_an_elementwise_chain_and_its_reduction_are_one_loop():
    p = plan_of(lambda x: np.sum(np.tanh(x) * 2 + np.sin(x)), np.ones((8, 4)))
    (k,) = p.kernels
    assert isinstance(k, LoopKernel) and k.domain == (8, 4) and not k.stores
    assert [e.primitive.name for e in k.reductions] == ["reduce_sum"]
    assert [s.eqn.primitive.name for s in k.body if isinstance(s, Compute)] == ["tanh", "mul", "sin", "add"]
    assert [type(s) for s in k.body].count(Read) == 1 and any(isinstance(s, Literal) for s in k.body)
    assert p.peak_bytes == 8 + 8   # the scalar result and its one partial sum (intermediates never become arrays)


def test_views_are_index_arithmetic_and_a_value_two_loops_need_is_recomputed_in_each():
    p = plan_of(lambda x: (np.exp(x).T * 2, np.sum(np.exp(x), axis=0)), np.ones((3, 5)))
    loops = [k for k in p.kernels if isinstance(k, LoopKernel)]
    assert all(not isinstance(k, CallKernel) for k in p.kernels)
    exps = [s for k in loops for s in k.body if isinstance(s, Compute) and s.eqn.primitive.name == "exp"]
    assert len(exps) == len(loops) == 2       # exp(x) recomputed in each loop, never stored
    transposed = next(k for k in loops if k.stores)
    assert transposed.domain == (5, 3)
    read = next(s for s in transposed.body if isinstance(s, Read))
    assert read.index == ("i1", "i0")


def test_matmul_is_a_call_kernel_with_a_transposed_operand_passed_as_a_view():
    k = fusion.SMALL_CONTRACTION + 1       # (a shorter contraction is a loop: see the next test)
    p = plan_of(lambda a, b: np.tanh(a.T @ b), np.ones((k, 3)), np.ones((k, 2)))
    call = next(k for k in p.kernels if isinstance(k, CallKernel))
    assert call.eqn.primitive.name == "matmul"
    assert [t for _, t in call.operands] == [True, False]
    assert call.operands[0][0] is p.graph.inputs[0]     # the argument itself, read transposed


def test_a_small_contraction_is_a_loop_of_products_and_sums_not_a_blas_call():
    """A float matmul over k <= SMALL_CONTRACTION is k products added in a loop (no call kernel):
    its output and its computed operands stored as the GEMM's were, an operand that is a view of
    an argument read in place, and the constant column k read at k, not passed as a view of its own."""
    p = plan_of(lambda a, b: np.tanh(np.exp(a) @ b.T), np.ones((5, 3)), np.ones((4, 3)))
    assert all(isinstance(k, LoopKernel) for k in p.kernels)
    mats = [s for k in p.kernels for s in k.body if isinstance(s, Compute) and s.eqn.primitive.name in ("mul", "add")]
    assert len(mats) == 3 + 2                          # a0 b0 + a1 b1 + a2 b2
    stored = {v for k in p.kernels for v in k.writes}
    exp_out = next(e.outputs[0] for e in p.graph.eqns if e.primitive.name == "exp")
    assert exp_out in stored and p.graph.inputs[1] not in stored
    for k in p.kernels:
        assert all(pins == () for _, pins in k.operands)
    big = plan_of(lambda a, b: a @ b, np.ones((5, 9)), np.ones((9, 4)))
    assert [type(k) for k in big.kernels] == [CallKernel]


def test_a_concatenation_gathered_into_a_larger_loop_is_materialized_once():
    """A concatenation read at a gathered index by a larger loop is stored once (each read of it
    in the loop would evaluate all its pieces to select one)."""
    idx = np.array([3, 0, 2, 1, 3, 3, 0, 1, 2, 2])
    p = plan_of(lambda a, b: np.concatenate([np.sin(a), np.cos(b)])[idx][:, None] * np.ones((10, 6)),
                np.ones(2), np.ones(2))
    cat = next(e.outputs[0] for e in p.graph.eqns if e.primitive.name == "concatenate")
    assert any(cat in k.writes for k in p.kernels)
    big = next(k for k in p.kernels if isinstance(k, LoopKernel) and k.domain == (10, 6))
    assert not any(isinstance(s, Compute) and s.eqn.primitive.name == "concatenate" for s in big.body)


def test_a_short_scalar_chain_is_recomputed_where_it_is_read_not_stored():
    """A 0-d value that a few statements compute (SCALAR_CHAIN) is computed in each loop that reads it
    (the cpu backend once before the loop: LoopKernel.invariant), not stored as a 0-d array; a
    longer chain is stored once."""
    p = plan_of(lambda x, t: np.sin(t[0]) * np.cos(t[1]) * x + np.cos(t[0]) * x ** 2, np.ones((4, 5)), np.ones(2))
    (k,) = p.kernels
    assert isinstance(k, LoopKernel) and k.domain == (4, 5) and not any(v.shape == () for v in k.writes)
    trig = {s.name for s in k.body if isinstance(s, Compute) and s.eqn.primitive.name in ("sin", "cos")}
    assert len(trig) == 3 and trig <= k.invariant()
    assert not any(isinstance(s, Read) and s.var is p.graph.inputs[0] and s.name in k.invariant() for s in k.body)

    def deep(x, t):
        s = t[0]
        for _ in range(fusion.SCALAR_CHAIN + 1):
            s = s * 1.1 + 0.5
        return s * x

    p = plan_of(deep, np.ones((4, 5)), np.ones(2))
    assert any(v.shape == () for k in p.kernels for v in k.writes)


def test_a_vmapped_short_product_stays_in_the_lanes_layout():
    """vmap of a @ b with one side batched and a short contraction multiplies lane by lane with the
    other side broadcast (one loop over (lanes, m, n)), not through a stacked (lanes * m, k) matrix."""
    ir = tk.make_ir(lambda a, b: np.tanh(a @ b), mode="vmap", in_axes=(0, None))(np.ones((6, 2, 3)), np.ones((3, 4)))
    (mm,) = [e for e in ir.eqns if e.primitive.name == "matmul"]
    assert [tuple(v.shape) for v in mm.inputs] == [(6, 2, 3), (6, 3, 4)]
    p = fusion.plan(passes.inline_calls(ir))
    assert all(isinstance(k, LoopKernel) for k in p.kernels) and (6, 2, 4) in [k.domain for k in p.kernels]
    ir = tk.make_ir(lambda a, b: a @ b, mode="vmap", in_axes=(0, None))(np.ones((6, 2, 5)), np.ones((5, 4)))
    (mm,) = [e for e in ir.eqns if e.primitive.name == "matmul"]
    assert [tuple(v.shape) for v in mm.inputs] == [(12, 5), (5, 4)]     # one GEMM, lanes stacked as rows


def test_a_value_broadcast_into_a_larger_loop_is_materialized_once():
    p = plan_of(lambda x, y: np.exp(x)[:, None] * y, np.ones(6), np.ones((6, 7)))
    loops = [k for k in p.kernels if isinstance(k, LoopKernel)]
    assert [k.domain for k in loops] == [(6,), (6, 7)]
    assert len(loops[0].stores) == 1 and loops[0].stores[0] in p.buffers


def test_buffers_live_from_their_kernel_to_their_last_reader_and_large_loops_run_in_parallel():
    n = fusion.PARALLEL_MIN_ELEMENTS
    p = plan_of(lambda a, b: (a @ b) @ b, np.ones((8, 8)), np.ones((8, 8)))
    first, second = p.kernels
    tmp = first.eqn.outputs[0]
    assert p.buffers[tmp] == 0 and p.frees[1] == [tmp]
    assert p.peak_bytes == 2 * 8 * 8 * 8
    big = plan_of(lambda x: np.exp(x) * 2, np.ones((n // 4, 4)))
    small = plan_of(lambda x: np.exp(x) * 2, np.ones((n // 8, 4)))
    assert big.kernels[0].parallel and big.kernels[0].num_chunks > 1 and not small.kernels[0].parallel


def test_reduction_layouts():
    def layout(axes):
        p = plan_of(lambda x: np.sum(np.exp(x), axis=axes), np.ones((4, 5, 6)))
        (k,) = p.kernels
        return fusion.reduction_layout(k, k.reductions[0])

    assert layout((1, 2)) == ("suffix", 1)
    assert layout((0, 1, 2)) == ("suffix", 0)
    assert layout((0, 1)) == ("partial", 0)
    assert layout((1,)) == ("memory", 0)


def test_reshape_index_expressions_without_divisions_where_radices_line_up():
    """Reshape's view_index simplifies (flat // stride) % size where the axes split or merge evenly
    (a vmapped program's reshapes are mostly such): checked by evaluating every index of 300 random
    reshapes against NumPy's own reshape, and counting the digits left without // or %."""
    import itertools

    from tracekern.primitives.core import REGISTRY

    reshape = REGISTRY["reshape"]
    rng = np.random.default_rng(0)

    def random_shape(size):
        dims = []
        while size > 1:
            d = int(rng.choice([f for f in range(2, size + 1) if size % f == 0])) if rng.random() < 0.8 else size
            dims.append(d)
            size //= d
        if rng.random() < 0.3:
            dims.insert(int(rng.integers(0, len(dims) + 1)), 1)
        return tuple(dims) or (1,)

    plain = total = 0
    for _ in range(300):
        size = int(rng.choice([1, 6, 12, 24, 36, 60, 72, 90, 120]))
        a, b = random_shape(size), random_shape(size)
        expr = reshape.view_index([f"i{k}" for k in range(len(b))], a, new_shape=b)
        src, out = np.arange(size).reshape(a), np.arange(size).reshape(b)
        for ii in itertools.product(*[range(s) for s in b]):
            env = {f"i{k}": v for k, v in enumerate(ii)}
            assert src[tuple(eval(e, {}, env) for e in expr)] == out[ii], (a, b, expr, ii)
        total += len(expr)
        plain += sum("//" not in e and "%" not in e for e in expr)
    assert plain > 0.3 * total, (plain, total)   # (random shapes of one size often split unevenly)
    merged = {((100, 2, 900, 1), (100, 2, 300, 3)): ["i0", "i1", "(i2 * 3 + i3)", "0"],
              ((6, 4), (2, 3, 4)): ["(i0 * 3 + i1)", "i2"],
              ((300, 3), (900,)): ["(i0 // 3)", "(i0 % 3)"],          # (a split: one operation a digit)
              ((2, 3, 4), (6, 4)): ["(i0 // 3)", "(i0 % 3)", "i1"]}
    for (a, b), want in merged.items():
        assert reshape.view_index([f"i{k}" for k in range(len(b))], a, new_shape=b) == want
    assert reshape.view_index(["i0", "i1", "i2"], (6, 10), new_shape=(3, 4, 5)) == ["(i0 * 2 + (i1 // 2))",
                                                                                   "((i1 % 2) * 5 + i2)"]


def test_unslice_pieces_equal_numpy_for_every_step_sign():
    """Unslice (a slice's gradient) fused as pieces: the operand where the index is one the slice
    takes, else zero, evaluated at every index against NumPy's own (x[::-1]'s window runs from its
    start down: a condition start <= i <= last took nothing, and its gradient was zero)."""
    from tracekern.primitives.core import REGISTRY

    unslice = REGISTRY["unslice"]
    for n, sl in [(14, slice(None, None, -1)), (14, slice(None, None, -3)), (14, slice(12, 2, -2)),
                  (14, slice(1, 11, 3)), (14, slice(3, None)), (5, slice(4, 0, -1))]:
        index = tuple((s.indices(n)) for s in (sl,))
        full = np.zeros(n)
        src = np.arange(1.0, 1 + len(range(*sl.indices(n))))
        full[sl] = src
        assert np.array_equal(unslice.impl(src, shape=(n,), index=index), full)
        pieces = unslice.pieces(["i0"], [src.shape], shape=(n,), index=index)
        for i in range(n):
            for cond, k, at in pieces:
                if cond is None or eval(cond, {}, {"i0": i}):
                    got = 0.0 if k is None else src[eval(at[0], {"min": min, "max": max}, {"i0": i})]
                    break
            assert got == full[i], (sl, i, pieces)
