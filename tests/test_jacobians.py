"""tk.jacfwd, tk.jacrev, tk.hessian (issue 28): against JAX's, against central finite differences,
each other on random programs, pytrees and argnums as JAX's, one compiled program each, on
interpret, cpu and the cuda simulator."""
from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import tracekern as tk
from tests.test_property import instantiate, programs
from tracekern.backends import cpu

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")


@pytest.fixture(autouse=True)
def _jax_x64():
    """JAX in float64 for these comparisons only: a global switch would change other files' JAX peers."""
    was = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    yield
    jax.config.update("jax_enable_x64", was)

BACKENDS = ["interpret", "cpu"]
HERE = __file__.rsplit("/", 1)[-1]
RNG = np.random.default_rng(7)


def _leaves(tree):
    leaves, td = tk.tree_flatten(tree)
    return leaves, td


def _close_trees(got, want, rtol=1e-10, atol=1e-12):
    """Structures first (a tuple/dict layout as JAX's), then shapes, dtypes and values."""
    g, gt = _leaves(got)
    w = jax.tree_util.tree_leaves(want)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(want), (gt,)
    assert len(g) == len(w) > 0
    for a, b in zip(g, w):
        b = np.asarray(b)
        assert np.shape(a) == b.shape and np.asarray(a).dtype == b.dtype, (np.shape(a), b.shape)
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


# (tracekern function, the same in jax.numpy, arguments)
def _mix(x, w):
    return np.tanh(w @ x) * np.sum(x ** 2)


def _mix_j(x, w):
    return jnp.tanh(w @ x) * jnp.sum(x ** 2)


def _tree(p):
    return {"a": p["w"] @ p["b"], "s": np.sum(np.sin(p["w"]))}


def _tree_j(p):
    return {"a": p["w"] @ p["b"], "s": jnp.sum(jnp.sin(p["w"]))}


def _solve(a, b):
    return np.linalg.solve(a + 4 * np.eye(3), b) ** 2


def _solve_j(a, b):
    return jnp.linalg.solve(a + 4 * jnp.eye(3), b) ** 2


CASES = {
    "mix": (_mix, _mix_j, (RNG.normal(size=3), RNG.normal(size=(4, 3)))),
    "tree": (_tree, _tree_j, ({"w": RNG.normal(size=(2, 3)), "b": RNG.normal(size=3)},)),
    "solve": (_solve, _solve_j, (RNG.normal(size=(3, 3)), RNG.normal(size=(3, 2)))),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_jacobians_match_jax(backend, name):
    f, fj, args = CASES[name]
    for argnums in ([0] if len(args) == 1 else [0, 1, (0, 1)]):
        want = jax.jacrev(fj, argnums)(*args)
        for transform in (tk.jacfwd, tk.jacrev):
            got = tk.jit(transform(f, argnums), backend=backend)(*args)
            _close_trees(got, want)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hessian_matches_jax_and_finite_differences(backend):
    def f(x, y):
        return np.sum(np.sin(x) * x[::-1]) ** 2 + np.sum(x[:2] * y) ** 3

    def fj(x, y):
        return jnp.sum(jnp.sin(x) * x[::-1]) ** 2 + jnp.sum(x[:2] * y) ** 3

    x, y = RNG.normal(size=4), RNG.normal(size=2)
    for argnums in (0, (0, 1)):
        got = tk.jit(tk.hessian(f, argnums), backend=backend)(x, y)
        _close_trees(got, jax.hessian(fj, argnums)(x, y), rtol=1e-9)
    # against central differences of the gradient
    h = tk.jit(tk.hessian(f), backend=backend)(x, y)
    g = tk.jit(tk.grad(f), backend=backend)
    eps = 1e-6
    fd = np.stack([(g(x + eps * e, y) - g(x - eps * e, y)) / (2 * eps) for e in np.eye(4)], axis=1)
    np.testing.assert_allclose(h, fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h, h.T, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS)
def test_jacobian_against_finite_differences_float32(backend):
    def f(x):
        return np.stack([np.sum(np.exp(0.3 * x)), np.prod(1 + 0.1 * x), np.max(x)])

    x = np.array([0.1, -0.4, 0.7], np.float32)
    for transform in (tk.jacfwd, tk.jacrev):
        jac = tk.jit(transform(f), backend=backend)(x)
        assert jac.shape == (3, 3) and jac.dtype == np.float32
        x64 = x.astype(np.float64)
        eps = 1e-6
        fd = np.stack([(f(x64 + eps * e) - f(x64 - eps * e)) / (2 * eps) for e in np.eye(3)], axis=1)
        np.testing.assert_allclose(jac, fd, rtol=2e-5, atol=2e-6)


def test_has_aux_and_compositions():
    x = RNG.normal(size=3)

    def f(x):
        return x ** 2 * np.sum(x), {"norm": np.sqrt(np.sum(x * x))}

    for transform in (tk.jacfwd, tk.jacrev):
        jac, aux = transform(f, has_aux=True)(x)
        np.testing.assert_allclose(jac, jax.jacfwd(lambda x: x ** 2 * jnp.sum(x))(x), rtol=1e-12)
        assert set(aux) == {"norm"} and np.allclose(aux["norm"], np.linalg.norm(x))
    # per-example Jacobians: vmap of jacrev; grad of a function of a Jacobian
    xs = RNG.normal(size=(5, 3))
    per = tk.vmap(tk.jacrev(lambda x: np.sin(x) * x[0]))(xs)
    want = jax.vmap(jax.jacrev(lambda x: jnp.sin(x) * x[0]))(xs)
    np.testing.assert_allclose(per, want, rtol=1e-12)
    g = tk.grad(lambda x: np.sum(tk.jacfwd(lambda y: np.sin(y) * y)(x) ** 2))(x)
    gj = jax.grad(lambda x: jnp.sum(jax.jacfwd(lambda y: jnp.sin(y) * y)(x) ** 2))(x)
    np.testing.assert_allclose(g, gj, rtol=1e-10)
    # jacfwd of a jitted function, and static arguments through jit
    np.testing.assert_allclose(tk.jacfwd(tk.jit(lambda x: x * x))(x), np.diag(2 * x), rtol=1e-12)
    jac = tk.jit(tk.jacrev(lambda x, n: x ** n), static_argnums=1)(x, 3)
    np.testing.assert_allclose(jac, np.diag(3 * x ** 2), rtol=1e-12)


def test_one_compiled_program_per_signature():
    jf = tk.jacfwd(lambda x: np.tanh(x) * x.sum())
    x = RNG.normal(size=6)
    first = jf(x)
    again = jf(x + 1.0)
    assert jf.trace_count == 1
    np.testing.assert_allclose(again, jax.jacfwd(lambda x: jnp.tanh(x) * x.sum())(x + 1.0), rtol=1e-12)
    assert first.shape == (6, 6)
    low = jf.lower(x)
    assert "while" not in str(low.ir) and low.source   # a batched program, not a loop


@pytest.mark.parametrize("backend", ["interpret", "cpu"])
def test_empty_inputs_and_outputs_give_empty_jacobians_as_jax(backend):
    """A Jacobian with no input or no output entries is empty, as JAX's; it raised tk.vmap's
    'the batch axis has size 0' about jacfwd's internal function."""
    x, e = np.array([0.3, -0.7, 1.1]), np.zeros(0)
    cases = [(lambda a: a ** 2, lambda a: a ** 2, e),
             (lambda a: (np.sum(a) * x, a * 2), lambda a: (jnp.sum(a) * x, a * 2), e),
             (lambda a: (a[:0] * 2, np.sum(a ** 2)), lambda a: (a[:0] * 2, jnp.sum(a ** 2)), x)]
    for f, fj, arg in cases:
        for transform, reference in ((tk.jacfwd, jax.jacfwd), (tk.jacrev, jax.jacrev)):
            got, want = tk.jit(transform(f), backend=backend)(arg), reference(fj)(arg)
            got_leaves, got_td = jax.tree_util.tree_flatten(got)
            want_leaves, want_td = jax.tree_util.tree_flatten(want)
            assert got_td == want_td
            assert [(np.shape(g), np.asarray(g).dtype) for g in got_leaves] == \
                [(np.shape(w), np.asarray(w).dtype) for w in want_leaves]
            for g, w in zip(got_leaves, want_leaves):
                np.testing.assert_allclose(g, w, rtol=1e-12)
    assert tk.jit(tk.hessian(lambda a: np.sum(a ** 2)), backend=backend)(e).shape == (0, 0)
    jac, aux = tk.jit(tk.jacfwd(lambda a: (a * 2, np.sum(a) + 1.5), has_aux=True), backend=backend)(e)
    assert jac.shape == (0, 0) and aux == 1.5


def test_errors_name_the_users_line():
    with pytest.raises(TypeError, match="dtype int") as err:
        tk.jacfwd(lambda x: x * 2)(np.arange(3))
    assert HERE in str(err.value)
    # the integer argument named is the one argnums picks (it named argument 0, 'x', a float)
    for transform in (tk.jacfwd, tk.jacrev):
        with pytest.raises(TypeError, match=r"argument 1 \('n'\) has a leaf of dtype int64"):
            transform(lambda x, n: x * n, argnums=1)(np.ones(3), np.int64(2))
        with pytest.raises(TypeError, match=r"argument 2 \('m'\) has a leaf of dtype int64"):
            transform(lambda x, y, m: x * y * m, argnums=(0, 2))(np.ones(3), 2.0, np.int64(2))
    with pytest.raises(ValueError, match="argnums") as err:
        tk.jacrev(lambda x: x * 2, argnums=2)(np.ones(3))
    assert HERE in str(err.value)
    with pytest.raises(ValueError, match="static"):
        tk.jit(tk.jacfwd(lambda x, n: x * n, argnums=1), static_argnums=1)(np.ones(2), 2)
    with pytest.raises(TypeError, match="no derivative") as err:
        tk.jacrev(lambda x: (x > 0).astype(np.int32))(np.ones(3))
    assert HERE in str(err.value)


def test_complex_values_and_hessian_errors_say_what_to_do():
    """A complex input said "leave integer arguments out of argnums"; a complex output of jacrev
    pointed to jacfwd "which gives zeros" (it gives the derivative); tk.hessian's errors named jacfwd."""
    z = np.array([1 + 2j, 0.5 - 1j])
    for transform, name in ((tk.jacfwd, "tk.jacfwd"), (tk.jacrev, "tk.jacrev"), (tk.hessian, "tk.hessian")):
        with pytest.raises(TypeError, match=f"{name} of .*complex128.*no holomorphic=.*real and imaginary") as err:
            transform(lambda z: np.sum(z * z))(z)
        assert HERE in str(err.value)
    with pytest.raises(TypeError, match="tk.hessian of .*dtype int64") as err:
        tk.hessian(lambda x: np.sum(x * 2.0))(np.arange(3))
    with pytest.raises(TypeError, match="complex128; reverse-mode Jacobians are of float outputs only.*tk.jacfwd") as err:
        tk.jacrev(lambda x: np.exp(1j * x))(np.array([0.1, 0.2]))
    assert HERE in str(err.value)
    x = np.array([0.1, 0.2])     # what the message offers: jacfwd of a complex output of float inputs
    np.testing.assert_allclose(tk.jit(tk.jacfwd(lambda x: np.exp(1j * x)), backend="interpret")(x), np.diag(1j * np.exp(1j * x)),
                               rtol=1e-14)


def test_cuda_simulator():
    f, fj, args = CASES["mix"]
    want = jax.jacfwd(fj, (0, 1))(*args)
    for transform in (tk.jacfwd, tk.jacrev):
        got = tk.jit(transform(f, (0, 1)), backend="cuda")(*args)
        host = [g.copy_to_host() if hasattr(g, "copy_to_host") else np.asarray(g) for g in got]
        for a, b in zip(host, want):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_jacfwd_equals_jacrev(program):
    """On the random programs of tests/test_property.py (scalar outputs), the Jacobian by forward and by
    reverse mode agree, and equal tk.grad."""
    f, args = instantiate(program)
    argnums = tuple(range(len(args)))
    with mock.patch("tracekern.backends.default_backend", lambda: "interpret"):
        fwd = tk.jacfwd(f, argnums)(*args)
        rev = tk.jacrev(f, argnums)(*args)
        grads = tk.grad(f, argnums)(*args)
    for a, b, g in zip(fwd, rev, grads):
        scale = 1.0 + float(np.max(np.abs(g)))
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-11 * scale)
        np.testing.assert_allclose(a, g, rtol=1e-10, atol=1e-11 * scale)


def _euler(xp, a, b, c):
    ca, sa, cb, sb, cc, sc = xp.cos(a), xp.sin(a), xp.cos(b), xp.sin(b), xp.cos(c), xp.sin(c)
    return xp.stack([xp.stack([cc * cb, cc * sb * sa - sc * ca, cc * sb * ca + sc * sa]),
                     xp.stack([sc * cb, sc * sb * sa + cc * ca, sc * sb * ca - cc * sa]),
                     xp.stack([-sb, cb * sa, cb * ca])])


BONE = np.array([[0, 1], [2, 1], [1, 1], [2, 0], [0, 2]])
LOCAL = RNG.normal(size=(5, 2, 3))


def _bones(xp, theta):
    """A chain of three bones (Euler angles, 3 x 3 rotations and offsets), five points skinned to
    two bones each: 3 x 3 products (k = 3), a batched (5, 2) product with a vector, and
    concatenations gathered per point (the hand-tracking benchmark's shapes, small)."""
    rot, pos = [_euler(xp, theta[0], theta[1], theta[2])], [theta[3:6]]
    for j in range(2):
        pos.append(pos[-1] + rot[-1] @ np.array([0.0, 1.0, 0.5 * j]))
        rot.append(rot[-1] @ _euler(xp, theta[6 + j], theta[0] * 0.0, theta[7 - j]))
    R, T = xp.stack(rot), xp.stack(pos)
    world = xp.einsum("vkij,vkj->vki", R[BONE], LOCAL) + T[BONE]
    return xp.sum(world * np.array([0.7, 0.3])[:, None], axis=1).reshape(-1)


@pytest.mark.parametrize("backend", BACKENDS + ["cuda"])
def test_bone_chain_small_products_against_finite_differences(backend):
    """Small products (k <= fusion.SMALL_CONTRACTION) are loops of products and sums in the compiled
    backends, and gathered concatenations stored once: the Jacobian of a bone chain by jacfwd and
    jacrev against central differences of plain NumPy, and the compiled against the interpreter."""
    theta = RNG.normal(0.0, 0.4, size=8)
    eps = 1e-6
    fd = np.stack([(_bones(np, theta + eps * e) - _bones(np, theta - eps * e)) / (2 * eps) for e in np.eye(8)], axis=1)
    want = tk.jit(tk.jacfwd(lambda t: _bones(np, t)), backend="interpret")(theta)
    assert want.shape == fd.shape == (15, 8) and np.max(np.abs(fd)) > 0.1
    np.testing.assert_allclose(want, fd, rtol=1e-6, atol=1e-7)
    for transform in (tk.jacfwd, tk.jacrev):
        got = tk.jit(transform(lambda t: _bones(np, t)), backend=backend)(theta)
        got = got.copy_to_host() if hasattr(got, "copy_to_host") else np.asarray(got)
        assert got.shape == want.shape and got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_matmuls_compiled_equal_numpy_and_their_jacobians_finite_differences(dtype):
    """a @ b for every contraction length around SMALL_CONTRACTION (1 to 5: products and sums, then
    BLAS), batched and not, with a transposed operand: values against NumPy, the Jacobian in the
    first operand against central differences (float64) and the interpreter's."""
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    for k in ((1, 4, 5) if dtype == np.float64 else (4,)):
        a = RNG.normal(size=(2, 3, k)).astype(dtype)
        b = RNG.normal(size=(2, 4, k)).astype(dtype)

        def f(a, b):
            return np.tanh(a @ np.swapaxes(b, 1, 2))

        got = tk.jit(f, backend="cpu")(a, b)
        assert got.dtype == dtype and got.shape == (2, 3, 4)
        np.testing.assert_allclose(got, np.tanh(a.astype(np.float64) @ np.swapaxes(b, 1, 2)), rtol=rtol, atol=rtol)
        jac = tk.jit(tk.jacfwd(f), backend="cpu")(a, b)
        np.testing.assert_allclose(jac, tk.jit(tk.jacfwd(f), backend="interpret")(a, b), rtol=rtol, atol=rtol)
        if dtype == np.float64:
            eps = 1e-6
            cols = [(f(a + eps * e.reshape(a.shape), b) - f(a - eps * e.reshape(a.shape), b)) / (2 * eps)
                    for e in np.eye(a.size)]
            np.testing.assert_allclose(jac.reshape(24, a.size), np.stack(cols, axis=-1).reshape(24, a.size),
                                       rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_scalar_chains_recomputed_in_loops_equal_numpy_and_finite_differences(backend):
    """0-d values of a few statements are recomputed in the loops that read them (the cpu backend
    computes them before the loop, and takes libm's sin/cos there when an angle is beyond the
    vectorised range): values against NumPy for a small and a huge angle, the Jacobian against
    central differences."""
    def f(x, t):
        return np.sin(t[0]) * np.cos(t[1]) * x + np.cos(t[0] * t[1]) * x ** 2

    x = RNG.normal(size=(3, 4))
    run = tk.jit(f, backend=backend)
    for t in (np.array([0.3, -1.2]), np.array([3.0e15, 0.7])):
        got = run(x, t)
        got = got.copy_to_host() if hasattr(got, "copy_to_host") else np.asarray(got)
        np.testing.assert_allclose(got, f(x, t), rtol=1e-12, atol=1e-12)
    t = np.array([0.3, -1.2])
    jac = tk.jit(tk.jacfwd(f, argnums=1), backend=backend)(x, t)
    jac = jac.copy_to_host() if hasattr(jac, "copy_to_host") else np.asarray(jac)
    eps = 1e-6
    fd = np.stack([(f(x, t + eps * e) - f(x, t - eps * e)) / (2 * eps) for e in np.eye(2)], axis=-1)
    assert jac.shape == (3, 4, 2) and np.max(np.abs(fd)) > 0.1
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)


def _step_of(f):
    run = next(iter(f._cache.values())).run
    return getattr(run, "step", run)


def test_a_jacobian_of_small_kernels_runs_one_compiled_driver_with_the_same_bits():
    """With tk.config.compiled_drivers, a straight-line step of many small kernels (cpu.COMPILED_DRIVER_CALLS)
    is driven by one njit function calling the same kernels in the same order: the bone chain's jacfwd takes
    that path (with the tiers off, before the first call returns; with them on, as the last tier) and gives the
    bits of the Python driver (the default), against central differences too, for angles inside and beyond the
    vectorised sine's range (the libm variant, step_exact); the cuda simulator runs the same program."""
    thetas = [RNG.normal(0.0, 0.4, size=8), np.concatenate([[3.0e6], RNG.normal(0.0, 0.4, size=7)])]
    eps = 1e-6
    fd = np.stack([(_bones(np, thetas[0] + eps * e) - _bones(np, thetas[0] - eps * e)) / (2 * eps) for e in np.eye(8)],
                  axis=1)
    plain = tk.jit(tk.jacfwd(lambda t: _bones(np, t)), backend="cpu")
    want = [plain(t) for t in thetas]
    with tk.config.override(compiled_drivers=True):
        fast = tk.jit(tk.jacfwd(lambda t: _bones(np, t)), backend="cpu")
        got = [fast(t) for t in thetas]
        tiered = tk.jit(tk.jacfwd(lambda t: _bones(np, t)), backend="cpu", tiers=True)
        first = tiered(thetas[0])                  # (the NumPy tier)
        tiered.compile(thetas[0])                  # kernels, then the compiled driver (the last tier)
    before, after = _step_of(plain), _step_of(fast)
    assert before.compiled_driver is None and before._fast is None and not before.jitted
    assert after.compiled_driver is not None and "@njit" in after.compiled_driver and after._fast is not None
    assert cpu.COMPILED_DRIVER_CALLS <= len(after._calls) <= cpu.COMPILED_DRIVER_MAX_CALLS
    assert after.driver == before.driver and len(after._calls) == len(before._calls)
    for g, w in zip(got, want):
        assert g.shape == w.shape == (15, 8) and g.dtype == w.dtype == np.float64
        np.testing.assert_array_equal(g, w)
    np.testing.assert_allclose(got[0], fd, rtol=1e-6, atol=1e-7)
    assert np.all(np.isfinite(got[1])) and np.max(np.abs(got[1])) > 0.1
    assert _step_of(tiered)._fast is not None
    np.testing.assert_array_equal(tiered(thetas[0]), want[0])
    np.testing.assert_allclose(first, want[0], rtol=1e-12, atol=1e-13)
    on_sim = tk.jit(tk.jacfwd(lambda t: _bones(np, t)), backend="cuda")(thetas[0])
    on_sim = on_sim.copy_to_host() if hasattr(on_sim, "copy_to_host") else np.asarray(on_sim)
    np.testing.assert_allclose(on_sim, want[0], rtol=1e-12, atol=1e-13)
