"""The workloads in JAX (jit of value_and_grad, CPU): jax.checkpoint with the matching policy for
recompute, jax.custom_vjp for custom gradients and for the reversible stack (JAX has no reversible
blocks), lax.scan for the RNN (checkpointed: the usual two-level scan, JAX has no binomial
checkpointing) and lax.while_loop for the heat equation, which JAX cannot differentiate in reverse."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from kernels import chain, heat, lstm, rnn, signal, spectral, transformer
from kernels.peers import Unsupported

POLICIES = {"recompute": "nothing_saveable", "dots": "dots_saveable"}


def _annotated(f, strategy, where):
    """f under jax.checkpoint with the strategy's policy, and the words for it."""
    if strategy == "none":
        return f, "no annotation"
    policy = POLICIES[strategy]
    return jax.checkpoint(f, policy=getattr(jax.checkpoint_policies, policy)), f"jax.checkpoint(policy={policy}) {where}"


def _step(loss, args):
    f = jax.jit(jax.value_and_grad(loss))
    on_device = jax.tree.map(jnp.asarray, args)
    return lambda: jax.block_until_ready(f(*on_device))


def _to_numpy(out):
    value, grads = out
    return float(value), [np.asarray(g) for g in jax.tree.leaves(grads)]


def _chain_layer(x, k):
    return [jnp.tanh, jnp.sin, lambda v: v * 0.9 + 0.1, lambda v: jnp.exp(-v * v)][k % 4](x)


def chain_version(args, strategy, size, **options):
    layers = [_annotated(lambda x, k=k: _chain_layer(x, k), strategy, "per layer") for k in range(chain.LAYERS)]

    def loss(x):
        for f, _ in layers:
            x = f(x)
        return jnp.sum(x)
    return layers[0][1], _step(loss, args), _to_numpy


def mlp_version(args, strategy, size, **options):
    layer, how = _annotated(lambda h, w: jnp.tanh(h @ w), strategy, "per layer")

    def loss(ws, x, y):
        h = x
        for w in ws:
            h = layer(h, w)
        return jnp.mean((h - y) ** 2)
    return how, _step(loss, args), _to_numpy


def _layernorm(x, gain, bias):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * gain + bias


def _block(x, p):
    wq, wk, wv, wo, w1, w2, g1, b1, g2, b2 = p
    h = _layernorm(x, g1, b1)
    q, k, v = h @ wq, h @ wk, h @ wv
    att = jax.nn.softmax(q @ k.T * (1 / np.sqrt(q.shape[-1])), axis=-1)
    x = x + (att @ v) @ wo
    h = _layernorm(x, g2, b2)
    return x + jax.nn.gelu(h @ w1, approximate=True) @ w2


def _dropout(key, x, rate=transformer.RATE):
    # p as float32: with jax_enable_x64 a Python float would draw float64 uniforms, other masks
    keep = jax.random.bernoulli(key, np.float32(1.0 - rate), x.shape)
    return jnp.where(keep, x / np.float32(1.0 - rate), np.float32(0.0))


def _dropout_block(x, p, key):
    wq, wk, wv, wo, w1, w2, g1, b1, g2, b2 = p
    k_att, k_mix, k_mlp = jax.random.split(key, 3)
    h = _layernorm(x, g1, b1)
    q, k, v = h @ wq, h @ wk, h @ wv
    att = _dropout(k_att, jax.nn.softmax(q @ k.T * (1 / np.sqrt(q.shape[-1])), axis=-1))
    x = x + _dropout(k_mix, (att @ v) @ wo)
    h = _layernorm(x, g2, b2)
    return x + _dropout(k_mlp, jax.nn.gelu(h @ w1, approximate=True) @ w2)


def transformer_version(args, strategy, size, **options):
    if strategy == "dropout":   # jax.random's Threefry bits are tk.random's: the very same masks
        block = jax.checkpoint(_dropout_block, policy=jax.checkpoint_policies.nothing_saveable)

        def loss(params, x):
            keys = jax.random.split(jax.random.key(transformer.SEED), len(params))
            for p, key in zip(params, keys):
                x = block(x, p, key)
            return jnp.mean(x * x)
        return "jax.random dropout (the same keys and masks), jax.checkpoint per block", _step(loss, args), _to_numpy
    block, how = _annotated(_block, strategy, "per block")

    def loss(params, x):
        for p in params:
            x = block(x, p)
        return jnp.mean(x * x)
    return how, _step(loss, args), _to_numpy


def _residual(v, w):
    return jnp.tanh(v @ w)


def _plain_stack(ws, a, b):
    for wf, wg in ws:
        a = a + _residual(b, wf)
        b = b + _residual(a, wg)
    return a, b


@jax.custom_vjp
def reversible_stack(ws, a, b):
    """The stack of reversible blocks, whose backward pass rebuilds each block's inputs from its
    outputs (y1 = x1 + f(x2), y2 = x2 + g(y1)), so that only the last outputs are kept."""
    return _plain_stack(ws, a, b)


def _reversible_fwd(ws, a, b):
    out = _plain_stack(ws, a, b)
    return out, (ws, out)


def _reversible_bwd(saved, cotangents):
    ws, (y1, y2) = saved
    d1, d2 = cotangents
    grads = []
    for wf, wg in reversed(ws):
        g_out, g_vjp = jax.vjp(_residual, y1, wg)
        x2 = y2 - g_out
        dy1, dwg = g_vjp(d2)
        d1 = d1 + dy1
        f_out, f_vjp = jax.vjp(_residual, x2, wf)
        x1 = y1 - f_out
        dx2, dwf = f_vjp(d1)
        d2 = d2 + dx2
        grads.append((dwf, dwg))
        y1, y2 = x1, x2
    return grads[::-1], d1, d2


reversible_stack.defvjp(_reversible_fwd, _reversible_bwd)


def revnet_version(args, strategy, size, **options):
    stack = reversible_stack if strategy == "reversible" else _plain_stack

    def loss(ws, x1, x2):
        a, b = stack(ws, x1, x2)
        return jnp.mean(a * a) + jnp.mean(b * b)
    how = "jax.custom_vjp over the stack, rebuilding inputs from outputs" if strategy == "reversible" else "no annotation"
    return how, _step(loss, args), _to_numpy


@jax.custom_vjp
def log1pexp(x):
    return jnp.maximum(x, 0) + jnp.log1p(jnp.exp(-jnp.abs(x)))


def _log1pexp_fwd(x):
    e = jnp.exp(-jnp.abs(x))
    return jnp.maximum(x, 0) + jnp.log1p(e), (x, e)


def _log1pexp_bwd(saved, g):
    x, e = saved
    return (g * jnp.where(x >= 0, 1 / (1 + e), e / (1 + e)),)


log1pexp.defvjp(_log1pexp_fwd, _log1pexp_bwd)


def softplus_version(args, strategy, size, **options):
    f = log1pexp if strategy == "custom" else (lambda z: jnp.log(1 + jnp.exp(z)))

    def loss(w, X, y):
        return jnp.mean(f(-y * (X @ w)))
    return ("jax.custom_vjp" if strategy == "custom" else "naive formula"), _step(loss, args), _to_numpy


def _segments(steps: int, k: int) -> int:
    """The number of outer segments of a two-level checkpointed scan: the largest divisor of the step
    count that is at most k (so at most k carries are kept)."""
    return max(d for d in range(1, min(k, steps) + 1) if steps % d == 0)


def rnn_version(args, strategy, size, **options):
    k = rnn.checkpoints(strategy)

    def loss(a, xs):
        def step(h, x):
            h = jnp.tanh(a * h + x)
            return h, jnp.mean(h)
        h0 = jnp.zeros_like(a)
        if k is None:
            h, ys = lax.scan(step, h0, xs)
        else:
            outer = _segments(xs.shape[0], k)

            @jax.checkpoint
            def segment(h, xseg):
                return lax.scan(step, h, xseg)
            h, ys = lax.scan(segment, h0, xs.reshape(outer, xs.shape[0] // outer, -1))
        return jnp.mean(h * h) + jnp.mean(ys)
    how = ("lax.scan" if k is None else f"lax.scan over {_segments(args[1].shape[0], k)} segments, each a "
           "jax.checkpoint'ed inner scan (two levels: JAX has no binomial schedule)")
    return how, _step(loss, args), _to_numpy


def heat_version(args, strategy, size, **options):
    cells, threshold = heat.SIZES[size]
    grid = heat.weights(cells)

    def step(u):
        zero = jnp.zeros(1, u.dtype)
        return u + heat.RATE * (jnp.concatenate([zero, u[:-1]]) - 2 * u + jnp.concatenate([u[1:], zero]))

    def loss(u0):
        u = lax.while_loop(lambda u: jnp.max(u) > threshold, step, u0)
        return jnp.sum(u * u * grid)
    try:
        jax.eval_shape(jax.value_and_grad(loss), *args)
    except ValueError as e:
        raise Unsupported(f"JAX: {str(e).splitlines()[0]}") from None
    return "lax.while_loop", _step(loss, args), _to_numpy


def lstm_version(args, strategy, size, **options):
    steps = args[1].shape[0]

    def loss(params, xs, targets):
        step = lambda carry, inputs: lstm.step(params, carry, inputs, jnp)   # noqa: E731
        init = lstm.initial(params, jnp)
        if strategy == "none":
            _, nll = lax.scan(step, init, (xs, targets))
        else:
            outer = lstm.segments(steps)
            segment = jax.checkpoint(lambda carry, inputs: lax.scan(step, carry, inputs))
            _, nll = lax.scan(segment, init, (xs.reshape(outer, steps // outer, -1), targets.reshape(outer, steps // outer, -1)))
        return jnp.mean(nll)
    how = ("lax.scan" if strategy == "none" else f"lax.scan over {lstm.segments(steps)} segments, each a jax.checkpoint'ed "
           "inner scan (two levels, about 2 sqrt(n) carries: the memory of checkpoint='auto')")
    return how, _step(loss, args), _to_numpy


def signal_version(args, strategy, size, **options):
    k = signal.SIZES[size][-1]
    return "jax.numpy (the same code)", _step(lambda taps, x, target: signal.loss(taps, x, target, k, jnp), args), _to_numpy


def spectral_version(args, strategy, size, **options):
    """The same code with jax.numpy, jax.numpy.fft, jax.scipy.special.erf and lax.scan (checkpointed: two
    levels of scans, the outer one over jax.checkpoint'ed segments)."""
    from jax.scipy.special import erf

    steps, k = spectral.SIZES[size][2], spectral.checkpoints(strategy)

    def scan(step, psi, steps, checkpoint):
        body = lambda p, _: (step(p), None)   # noqa: E731
        if checkpoint is None:
            return lax.scan(body, psi, None, length=steps)[0]
        outer = _segments(steps, checkpoint)

        @jax.checkpoint
        def segment(p, _):
            return lax.scan(body, p, None, length=steps // outer)[0], None
        return lax.scan(segment, psi, None, length=outer)[0]

    def loss(params, psi0, x, target):
        return spectral.loss(params, psi0, x, target, steps, k, xp=jnp, erf=erf, scan=scan)
    how = ("lax.scan" if k is None else f"lax.scan over {_segments(steps, k)} jax.checkpoint'ed segments of an inner scan "
           "(two levels: JAX has no binomial schedule)")
    return how, _step(loss, args), _to_numpy


VERSIONS = {"chain": chain_version, "mlp": mlp_version, "transformer": transformer_version, "revnet": revnet_version,
            "softplus": softplus_version, "rnn": rnn_version, "heat": heat_version, "signal": signal_version,
            "spectral": spectral_version, "lstm": lstm_version}
