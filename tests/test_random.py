"""tk.random: Threefry-2x32 known answers, jax.random's bits, the same bits on every backend, draws as
pure functions of key and position (so recompute regions and checkpointed loops replay them), use
inside scan, while_loop and custom_gradient, statistics, and the errors."""
import numpy as np
import pytest

import tracekern as tk
from tests.conftest import assert_tree_close, jit_on, to_host
from tracekern.backends import cpu_math
from tracekern.primitives.random import threefry_bits

M = 0xFFFFFFFF


def _word(k0, k1):
    return np.array([(k0 << 32) | k1], np.uint64).view(np.int64)[0]


# Random123's known answers for threefry2x32_20 (also jax.random's own test vectors):
# (key words, counter words) -> output words
KAT = [((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
       ((M, M), (M, M), (0x1CB996FC, 0xBB002BE7)),
       ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0))]


@pytest.mark.parametrize("key, counter, want", KAT)
def test_threefry_known_answers_numpy_and_compiled(key, counter, want):
    k, c = _word(*key), _word(*counter)
    expect = np.array([(want[0] << 32) | want[1]], np.uint64).view(np.int64)[0]
    assert threefry_bits(np.asarray(k), np.asarray(c), 64) == expect          # the NumPy impl's code
    assert cpu_math.random_bits(k, c, 64) == expect                            # compiled (njit)
    assert cpu_math.random_bits(k, c, 32) == want[0] ^ want[1]
    assert cpu_math.random_bits(k, c, 52) == ((want[0] << 32) | want[1]) >> 12
    assert threefry_bits(np.asarray(k), np.asarray(c), 1) == (want[0] ^ want[1]) >> 31


def test_the_bits_are_jax_randoms():
    """Values jax.random (0.10, threefry partitionable; float64 and normal with x64) gave for these
    calls: uniform, bernoulli and split are bit for bit its; normal agrees to a few ulp."""
    u = tk.random.uniform(tk.random.key(0), (4,))
    assert u.dtype == np.float32 and u.view(np.uint32).tolist() == [1064475214, 1064993846, 1051337244, 1055913296]
    u64 = tk.random.uniform(tk.random.key(7), (3,), np.float64)
    assert u64.view(np.uint64).tolist() == [4605778258991943880, 4586705464282333344, 4597273945702010840]
    words = tk.random.split(tk.random.key(42), 3).view(np.uint64)
    assert [[int(w) >> 32, int(w) & M] for w in words] == [[1832780943, 270669613], [64467757, 2916123636],
                                                          [2465931498, 255383827]]
    for same in (tk.random.split(tk.random.key(42), n=3), tk.random.split(tk.random.key(42), num=3)):   # SPEC's n, JAX's num
        assert np.array_equal(same.view(np.uint64), words)
    assert tk.random.bernoulli(tk.random.key(3), 0.25, (16,)).astype(int).tolist() == \
        [1, 0, 0, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1]
    np.testing.assert_allclose(tk.random.normal(tk.random.key(1), (4,), np.float64),
                               [-1.184284421837855, -0.11617040844628398, 0.17269028009903425, 0.9573071790540392],
                               rtol=1e-14)
    np.testing.assert_allclose(tk.random.normal(tk.random.key(1), (4,)),
                               [-0.15443718433380127, 0.08470727503299713, -0.135980486869812, -0.15503625571727753],
                               rtol=3e-7)


def test_against_jax_when_installed():
    jax = pytest.importorskip("jax")
    jnp = pytest.importorskip("jax.numpy")
    x64 = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)     # (float64 draws and int64 seeds, as tracekern's)
    try:
        for seed in (0, 42, 2 ** 40 + 7, -1):
            k, t = jax.random.key(seed), tk.random.key(seed)
            for shape, dtype in (((7, 3), np.float32), ((5,), np.float64), ((), np.float32)):
                assert np.array_equal(jax.random.uniform(k, shape, dtype), tk.random.uniform(t, shape, dtype))
            got = tk.random.split(t, 4).view(np.uint64)
            data = np.asarray(jax.random.key_data(jax.random.split(k, 4))).astype(np.uint64)
            assert np.array_equal(got, (data[:, 0] << np.uint64(32)) | data[:, 1])
            np.testing.assert_allclose(jax.random.normal(k, (1000,), jnp.float64), tk.random.normal(t, (1000,), np.float64),
                                       rtol=1e-13, atol=1e-13)
            assert np.array_equal(jax.random.bernoulli(k, np.float32(0.3), (50,)), tk.random.bernoulli(t, np.float32(0.3), (50,)))
    finally:
        jax.config.update("jax_enable_x64", x64)


def test_fold_in_of_negative_32_bit_data_is_jaxs():
    """JAX folds in uint32(data): a negative int32 counter wraps (-1 is 2**32 - 1). It was taken as a
    64-bit counter, another key than JAX's. Eagerly, traced int32 and traced int64 alike."""
    k = tk.random.key(3)
    data = [-1, -2, -2 ** 31, 0, 5, 2 ** 31 - 1]
    assert tk.random.fold_in(k, -1) == tk.random.fold_in(k, 2 ** 32 - 1)
    traced32 = tk.jit(tk.vmap(lambda d: tk.random.fold_in(k, d)), backend="interpret")(np.array(data, np.int32))
    traced64 = tk.jit(tk.vmap(lambda d: tk.random.fold_in(k, d)), backend="interpret")(np.array(data, np.int64))
    eager = np.array([tk.random.fold_in(k, d) for d in data])
    assert np.array_equal(traced32, eager) and np.array_equal(traced64, eager)
    assert tk.random.fold_in(k, 2 ** 32) != tk.random.fold_in(k, 0)      # beyond 32 bits: a 64-bit counter
    jax = pytest.importorskip("jax")
    want = np.asarray(jax.random.key_data(jax.vmap(lambda d: jax.random.fold_in(jax.random.key(3), d))(
        np.array(data, np.int32)))).astype(np.uint64)
    assert np.array_equal(eager.view(np.uint64), (want[:, 0] << np.uint64(32)) | want[:, 1])


# ----------------------------------------------------------------------------- every backend, every re-run


def _draws(k, x):
    """Draws of every kind, read through views (a transpose, a broadcast) inside fused loops."""
    sub = tk.random.split(k, 3)
    return (tk.random.uniform(sub[0], (4, 3)).T * x,
            tk.random.uniform(sub[1], (2, 5), np.float64, minval=-2.0, maxval=np.arange(5.0)),
            tk.random.bernoulli(k, np.full(3, 0.3, np.float32), (4, 3)) & (x > 0).T,
            tk.random.split(sub[2], (2, 2)),
            tk.random.fold_in(k, np.int64(7)),
            tk.random.uniform(tk.random.fold_in(k, 2), (3,))[:, None] + np.zeros((3, 4), np.float32))


def test_the_same_bits_on_every_backend(backend):
    k, x = tk.random.key(5), np.linspace(-1, 1, 12).astype(np.float32).reshape(3, 4)
    got, want = jit_on(backend, _draws)(k, x), tk.jit(_draws, backend="interpret")(k, x)
    assert_tree_close(got, want, tol=0)
    for g, w in zip(tk.tree_flatten(to_host(got))[0], tk.tree_flatten(want)[0]):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    assert np.array_equal(want[0], _draws(k, x)[0])           # and eagerly, outside any trace


def test_normal_on_every_backend(backend):
    f = lambda k: (tk.random.normal(k, (64,)), tk.random.normal(k, (2, 32), np.float64))  # noqa: E731
    got, want = jit_on(backend, f)(tk.random.key(9)), tk.jit(f, backend="interpret")(tk.random.key(9))
    assert_tree_close(got, want, tol=1e-6)      # (each backend's log1p: a few ulp)


def test_draws_are_functions_of_position_and_key():
    k = tk.random.key(11)
    assert np.array_equal(tk.random.uniform(k, (2, 3)), tk.random.uniform(k, (6,)).reshape(2, 3))
    assert np.array_equal(tk.random.uniform(k, (6,))[:4], tk.random.uniform(k, (4,)))
    a, b = tk.random.split(k)
    assert a != b and not np.array_equal(tk.random.uniform(a, (8,)), tk.random.uniform(b, (8,)))
    assert tk.random.fold_in(k, 1) != tk.random.fold_in(k, 2)
    assert tk.random.key(3) == np.int64(3) and tk.random.key(2 ** 64 - 1) == np.int64(-1)


def test_statistics():
    k = tk.random.key(0)
    u = tk.random.uniform(k, (1 << 16,))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 0.01 and abs(u.var() - 1 / 12) < 0.003
    n = tk.random.normal(k, (1 << 16,), np.float64)
    assert abs(n.mean()) < 0.02 and abs(n.std() - 1) < 0.02 and np.isfinite(n).all()
    assert abs(np.mean(np.abs(n) > 1.96) - 0.05) < 0.005
    assert abs(tk.random.bernoulli(k, 0.3, (1 << 16,)).mean() - 0.3) < 0.01
    lo = tk.random.uniform(k, (1000,), minval=-3.0, maxval=-2.0)
    assert lo.min() >= -3 and lo.max() < -2


# ----------------------------------------------------------------------------- under transforms


def dropout(k, x, rate=0.5):
    keep = tk.random.bernoulli(k, 1 - rate, x.shape)
    return np.where(keep, x / np.float64(1 - rate), 0.0)


def test_dropout_under_recompute_replays_the_same_mask(backend):
    """The backward pass of a recompute region draws its dropout mask again: the same mask, so the
    gradient is the unannotated one, and it is zero exactly where the forward dropped."""
    x, w = np.linspace(-1, 1, 24).reshape(4, 6), np.linspace(0.5, 1.5, 36).reshape(6, 6)
    k = tk.random.key(3)
    layer = lambda x, w, k: dropout(k, np.tanh(x @ w))  # noqa: E731

    def loss(x, w, k, region):
        h = region(x, w, k)
        return np.sum(h * h)
    plain = lambda x, w, k: loss(x, w, k, layer)                       # noqa: E731
    recomputed = lambda x, w, k: loss(x, w, k, tk.recompute(layer))    # noqa: E731
    want = tk.jit(tk.grad(plain, argnums=(0, 1)), backend="interpret")(x, w, k)
    got = jit_on(backend, tk.grad(recomputed, argnums=(0, 1)))(x, w, k)
    assert_tree_close(got, want, tol=1e-12)
    split = tk.make_ir(recomputed, mode="vjp")(x, w, k)
    notes = [n for e, n in zip(split.backward.eqns, split.backward.eqn_notes) if e.primitive.name == "random_bits"]
    assert notes == ["recomputed"]                                     # the mask is drawn again, not saved
    dropped = tk.jit(layer, backend=backend)(x, w, k)
    dh = tk.grad(lambda h: np.sum(tk.recompute(lambda h: dropout(k, h))(h)))(np.tanh(x @ w))
    assert np.array_equal(dh != 0, to_host(dropped) != 0)              # the backward's mask is the forward's


def _rnn(h, w, key, checkpoint):
    def body(carry, _):
        h, k = carry
        k, sub = tk.random.split(k)
        return (np.tanh(dropout(sub, h, 0.25) @ w), k), np.sum(h)
    (h, _), ys = tk.scan(body, (h, key), None, length=6, checkpoint=checkpoint)
    return np.sum(h * h) + np.sum(ys)


def test_a_checkpointed_scan_replays_its_draws(backend):
    h, w, k = np.linspace(-1, 1, 5), np.linspace(0.2, 1.2, 25).reshape(5, 5) / 3, tk.random.key(1)
    want = tk.jit(tk.value_and_grad(lambda h, w: _rnn(h, w, k, None), argnums=(0, 1)), backend="interpret")(h, w)
    for c in (None, 2):
        got = jit_on(backend, tk.value_and_grad(lambda h, w, c=c: _rnn(h, w, k, c), argnums=(0, 1)))(h, w)
        assert_tree_close(got, want, tol=1e-12)
    if backend == "cpu":
        tk.check_grad(lambda h, w: _rnn(h, w, k, 2), (h, w))


def test_dropout_recomputed_in_a_reversed_checkpointed_scan_under_a_budget(backend):
    """A recompute region drawing a dropout mask, inside the body of a reversed scan of prime length
    checkpointed with k=2, under memory_budget=: the value and gradient are the plain scan's, and the
    gradient is zero exactly where the mask dropped (the re-runs draw the same bits)."""
    h0, xs = np.linspace(-1, 1, 4), np.linspace(-2, 2, 28).reshape(7, 4)
    key = tk.random.key(5)

    def loss(h, checkpoint, annotate):
        def body(carry, x):
            h, k = carry
            k, sub = tk.random.split(k)
            h = annotate(lambda h, x: np.tanh(dropout(sub, h + x, 0.5)))(h, x)
            return (h, k), h[0]
        (h, _), ys = tk.scan(body, (h, key), xs, checkpoint=checkpoint, reverse=True)
        return np.sum(h * h) + np.sum(ys)

    want = tk.jit(tk.value_and_grad(lambda h: loss(h, None, lambda f: f)), backend="interpret")(h0)
    got = jit_on(backend, tk.value_and_grad(lambda h: loss(h, 2, tk.recompute), memory_budget=1.0))(h0)
    assert_tree_close(got, want, tol=1e-12)
    assert np.array_equal(to_host(got[1]) != 0, want[1] != 0) and 0 < np.count_nonzero(want[1]) < 4
    if backend == "cpu":   # and tk.vjp's pullback, called twice, under its smallest budget
        smallest = tk.make_ir(lambda h: loss(h, 2, tk.recompute), mode="vjp", memory_budget=1.0)(h0).smallest_budget
        out, pull = tk.vjp(lambda h: loss(h, 2, tk.recompute), h0, memory_budget=smallest)
        assert_tree_close((out, pull(1.0)[0]), want, tol=1e-12)
        assert_tree_close(pull(-2.0)[0], -2 * want[1], tol=1e-12)


def test_while_loop_and_custom_gradient_with_draws(backend):
    k = tk.random.key(4)

    def walk(x, checkpoint):
        def body(s):
            x, k, n = s
            k, sub = tk.random.split(k)
            return x * 0.9 + tk.random.normal(sub, x.shape, np.float64) * 0.1 * x, k, n + 1
        x, _, n = tk.while_loop(lambda s: s[2] < 5, body, (x, k, np.int64(0)), checkpoint=checkpoint)
        return np.sum(x * x)

    @tk.custom_gradient
    def noisy_scale(x, key):
        mask = tk.random.bernoulli(key, 0.5, x.shape)
        y = np.where(mask, x * 2.0, x)
        return y, lambda dy: (np.where(mask, dy * 2.0, dy), None)

    x = np.linspace(0.5, 1.5, 6)
    want = tk.jit(tk.grad(lambda x: walk(x, None)), backend="interpret")(x)
    for c in (None, 3):
        assert_tree_close(jit_on(backend, tk.grad(lambda x, c=c: walk(x, c)))(x), want, tol=1e-12)
    f = lambda x: np.sum(noisy_scale(x, k) ** 2)  # noqa: E731
    g = jit_on(backend, tk.grad(f))(x)
    mask = tk.random.bernoulli(k, 0.5, x.shape)
    np.testing.assert_allclose(g, np.where(mask, 8 * x, 2 * x), rtol=1e-12)


# ----------------------------------------------------------------------------- errors


def test_errors_name_the_mistake():
    k = tk.random.key(0)
    with pytest.raises(TypeError, match=r"tk.random.uniform\(tk.random.key\(0\)"):
        tk.random.uniform(0, (3,))
    with pytest.raises(TypeError, match=r"a batch of keys: pass one of them, keys\[i\]"):
        tk.random.normal(tk.random.split(k, 2), (3,))
    with pytest.raises(TypeError, match="0-d int64 array"):
        tk.random.uniform(np.zeros(2, np.uint32), (3,))
    with pytest.raises(TypeError, match="dtype must be float32 or float64"):
        tk.random.uniform(k, (3,), np.int32)
    with pytest.raises(tk.ShapeError, match=r"maxval of shape \(4,\) does not broadcast to the shape of the draw \(3,\)"):
        tk.random.uniform(k, (3,), maxval=np.ones(4))
    with pytest.raises(TypeError, match="the seed must be an integer"):
        tk.random.key(1.5)
    with pytest.raises(TypeError, match="p must be a float"):
        tk.random.bernoulli(k, np.ones(3, np.int64))
    with pytest.raises(TypeError, match="test_random.py"):   # errors name the user's line, also while tracing
        tk.jit(lambda x: tk.random.uniform(x, (2,)))(np.float32(1.0))
