"""Hypothesis: random compositions of primitives, differentiated (reverse and forward mode) and checked
against finite differences and each other."""
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tracekern as tk
import tracekern.numpy as tnp

# Smooth unary steps (safe on all reals) and binary steps (safe for all operand values).
UNARY = {
    "sin": np.sin, "cos": np.cos, "tanh": np.tanh, "arctan": np.arctan,
    "exp_tanh": lambda x: np.exp(np.tanh(x)), "log1p_sq": lambda x: np.log1p(x * x),
    "sqrt_1p": lambda x: np.sqrt(x * x + 1.0), "square": lambda x: x * x, "neg": lambda x: -x,
    "sigmoid": tnp.sigmoid, "softplus": tnp.softplus, "cube": lambda x: x ** 3,
    "affine": lambda x: 0.7 * x - 0.2, "expm1_tanh": lambda x: np.expm1(np.tanh(x)),
}
BINARY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "div": lambda a, b: a / (1.5 + np.sin(b)), "hypot": lambda a, b: np.sqrt(a * a + b * b + 0.1),
    "where": lambda a, b: np.where(a > b, a * b, a - b),
}
RESHAPE = {
    "sum0": lambda x: x.sum(axis=0, keepdims=True), "mean1": lambda x: np.mean(x, axis=1, keepdims=True),
    "max1": lambda x: np.max(x, axis=1, keepdims=True), "T_T": lambda x: x.T.T, "slice": lambda x: x[:, ::-1],
    "matmul": lambda x: x @ (np.arange(16.0).reshape(4, 4) / 16.0),
    "logsumexp": lambda x: tnp.logsumexp(x, axis=0, keepdims=True),
}
SHAPES = [(3, 4), (1, 4), (3, 1), (4,), ()]


@st.composite
def programs(draw):
    n_inputs = draw(st.integers(1, 3))
    shapes = [draw(st.sampled_from(SHAPES)) for _ in range(n_inputs)]
    steps = []
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["unary", "binary", "reshape"]))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(sorted(UNARY)))))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(sorted(BINARY))), draw(st.integers(0, 10))))
        else:
            steps.append(("reshape", draw(st.sampled_from(sorted(RESHAPE)))))
    return shapes, steps, draw(st.integers(0, 2**31 - 1))


def build(steps):
    def f(*xs):
        vals = list(xs)
        cur = vals[0]
        for step in steps:
            if step[0] == "unary":
                cur = UNARY[step[1]](cur)
            elif step[0] == "binary":
                cur = BINARY[step[1]](cur, vals[step[2] % len(vals)])
            else:
                shape = np.shape(cur)
                if len(shape) == 2 and (step[1] != "matmul" or shape[1] == 4):
                    cur = RESHAPE[step[1]](cur)
            vals.append(cur)
        return np.sum(cur * cur) + 0.1 * np.sum(vals[-1])

    return f


def instantiate(program):
    shapes, steps, seed = program
    rng = np.random.default_rng(seed)
    return build(steps), tuple(rng.uniform(-1.5, 1.5, s) for s in shapes)


def on_interpret():
    """Many random programs: run them on the NumPy oracle (a compile per program would take minutes);
    test_random_programs_cpu_equals_interpret covers the compiled backend."""
    return mock.patch("tracekern.backends.default_backend", lambda: "interpret")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_gradients_match_finite_differences(program):
    with on_interpret():
        check_program(program)


def check_program(program):
    f, args = instantiate(program)
    # the traced value equals plain NumPy
    assert tk.jit(f)(*args) == pytest.approx(f(*args), rel=1e-12, abs=1e-12)
    # away from the kinks of where / max, reverse mode equals central differences
    tk.check_grad(f, args, rtol=1e-4)


@settings(max_examples=25, deadline=None)
@given(programs())
def test_random_programs_vjp_split_equals_joint_gradient(program):
    with on_interpret():
        check_split(program)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_cpu_equals_interpret(program):
    f, args = instantiate(program)
    argnums = tuple(range(len(args)))
    value, grads = tk.value_and_grad(f, argnums=argnums)(*args)      # the default backend: cpu
    with on_interpret():
        want_value, want_grads = tk.value_and_grad(f, argnums=argnums)(*args)
    assert value == pytest.approx(want_value, rel=1e-12, abs=1e-12)
    split = tk.vjp(f, *args)[1](1.0)
    for a, b, c in zip(grads, want_grads, split):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(c, b, rtol=1e-10, atol=1e-12)


def check_split(program):
    f, args = instantiate(program)
    argnums = tuple(range(len(args)))
    joint = tk.grad(f, argnums=argnums)(*args)
    out, pullback = tk.vjp(f, *args)
    split = pullback(1.0)
    assert out == pytest.approx(f(*args), rel=1e-12, abs=1e-12)
    for a, b in zip(joint, split):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_jvp_matches_vjp(program):
    """Forward mode against reverse mode on random programs: the tangent of the scalar output along a
    random direction u (tk.jvp) is <grad, u> (tk.vjp's pullback of 1), and tk.linearize's f_jvp
    gives the same tangent."""
    with on_interpret():
        f, args = instantiate(program)
        rng = np.random.default_rng(program[2] + 1)
        us = tuple(rng.standard_normal(np.shape(a)) for a in args)
        out, tangent = tk.jvp(f, args, us)
        value, pullback = tk.vjp(f, *args)
        grads = pullback(1.0)
        assert out == pytest.approx(value, rel=1e-14, abs=1e-14)
        want = sum(float(np.sum(g * u)) for g, u in zip(grads, us))
        scale = 1.0 + sum(float(np.sum(np.abs(g * u))) for g, u in zip(grads, us))
        assert abs(tangent - want) <= 1e-11 * scale, (tangent, want)
        _, f_jvp = tk.linearize(f, *args)
        assert f_jvp(*us) == pytest.approx(tangent, rel=1e-12, abs=1e-12 * scale)
