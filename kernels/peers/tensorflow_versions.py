"""The workloads in TensorFlow 2 (tf.function of a GradientTape step, its default graph mode), with
the contracts tracekern implements: tf.recompute_grad per layer or block (it has no policy, so no
"dots"), tf.custom_gradient for the custom softplus and for the reversible stack, tf.scan for the
RNN (checkpointed: segments under tf.recompute_grad) and tf.while_loop for the heat equation, whose
gradient keeps every iteration (tf.while_loop has no checkpointing)."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from kernels import chain, heat, rnn, signal
from kernels.peers import Unsupported

NO_POLICY = "TensorFlow: tf.recompute_grad has no policy (it keeps only the region's inputs), so there is no 'dots' version"


def _annotated(f, strategy, where):
    if strategy == "none":
        return f, "no annotation"
    if strategy == "dots":
        raise Unsupported(NO_POLICY)
    return tf.recompute_grad(f), f"tf.recompute_grad {where}"


def _step(loss, args):
    targs = tf.nest.map_structure(tf.constant, args)

    @tf.function
    def value_and_grad(*targs):
        wrt = tf.nest.flatten(targs[0])
        with tf.GradientTape() as tape:
            tape.watch(wrt)
            value = loss(*targs)
        return value, tape.gradient(value, wrt)
    return lambda: value_and_grad(*targs)


def _to_numpy(out):
    value, grads = out
    return float(value), [g.numpy() for g in grads]


def _chain_layer(x, k):
    return [tf.tanh, tf.sin, lambda v: v * 0.9 + 0.1, lambda v: tf.exp(-v * v)][k % 4](x)


def chain_version(args, strategy, size, **options):
    layers = [_annotated(lambda x, k=k: _chain_layer(x, k), strategy, "per layer") for k in range(chain.LAYERS)]

    def loss(x):
        for f, _ in layers:
            x = f(x)
        return tf.reduce_sum(x)
    return layers[0][1], _step(loss, args), _to_numpy


def mlp_version(args, strategy, size, **options):
    layer, how = _annotated(lambda h, w: tf.tanh(h @ w), strategy, "per layer")

    def loss(ws, x, y):
        h = x
        for w in ws:
            h = layer(h, w)
        return tf.reduce_mean((h - y) ** 2)
    return how, _step(loss, args), _to_numpy


def _layernorm(x, gain, bias):
    mu = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / tf.sqrt(var + 1e-5) * gain + bias


def _block(x, *p):
    wq, wk, wv, wo, w1, w2, g1, b1, g2, b2 = p
    h = _layernorm(x, g1, b1)
    q, k, v = h @ wq, h @ wk, h @ wv
    att = tf.nn.softmax(q @ tf.transpose(k) * (1 / np.sqrt(q.shape[-1])), axis=-1)
    x = x + (att @ v) @ wo
    h = _layernorm(x, g2, b2)
    return x + tf.nn.gelu(h @ w1, approximate=True) @ w2


def transformer_version(args, strategy, size, **options):
    if strategy == "dropout":
        raise Unsupported("TensorFlow's random numbers are not Threefry's: its dropout masks would not be tracekern's "
                          "(JAX's are), so its values would differ")
    block, how = _annotated(_block, strategy, "per block")

    def loss(params, x):
        for p in params:
            x = block(x, *p)
        return tf.reduce_mean(x * x)
    return how, _step(loss, args), _to_numpy


def _residual(v, w):
    return tf.tanh(v @ w)


def _residual_vjp(v, w, out, d):
    """Cotangents of tanh(v @ w) for v and w, from its output."""
    dz = d * (1 - out * out)
    return dz @ tf.transpose(w), tf.transpose(v) @ dz


def _plain_stack(a, b, ws):
    for wf, wg in ws:
        a = a + _residual(b, wf)
        b = b + _residual(a, wg)
    return a, b


@tf.custom_gradient
def reversible_stack(a, b, *flat_ws):
    """Reversible blocks whose gradient rebuilds each block's inputs from its outputs."""
    ws = list(zip(flat_ws[0::2], flat_ws[1::2]))
    y1, y2 = _plain_stack(a, b, ws)

    def grad(d1, d2):
        x1, x2, grads = y1, y2, []
        for wf, wg in reversed(ws):
            g_out = _residual(x1, wg)
            dy1, dwg = _residual_vjp(x1, wg, g_out, d2)
            x2 = x2 - g_out
            d1 = d1 + dy1
            f_out = _residual(x2, wf)
            dx2, dwf = _residual_vjp(x2, wf, f_out, d1)
            x1 = x1 - f_out
            d2 = d2 + dx2
            grads += [dwg, dwf]
        return [d1, d2] + grads[::-1]
    return (y1, y2), grad


def revnet_version(args, strategy, size, **options):
    def loss(ws, x1, x2):
        if strategy == "reversible":
            a, b = reversible_stack(x1, x2, *[w for pair in ws for w in pair])
        else:
            a, b = _plain_stack(x1, x2, ws)
        return tf.reduce_mean(a * a) + tf.reduce_mean(b * b)
    how = "tf.custom_gradient over the stack, rebuilding inputs from outputs" if strategy == "reversible" else "no annotation"
    return how, _step(loss, args), _to_numpy


@tf.custom_gradient
def log1pexp(x):
    e = tf.exp(-tf.abs(x))

    def grad(upstream):
        return upstream * tf.where(x >= 0, 1 / (1 + e), e / (1 + e))
    return tf.maximum(x, 0.0) + tf.math.log1p(e), grad


def softplus_version(args, strategy, size, **options):
    f = log1pexp if strategy == "custom" else (lambda z: tf.math.log(1 + tf.exp(z)))

    def loss(w, X, y):
        return tf.reduce_mean(f(-y * tf.linalg.matvec(X, w)))
    return ("tf.custom_gradient" if strategy == "custom" else "naive formula"), _step(loss, args), _to_numpy


def _segments(steps: int, k: int) -> int:
    return max(d for d in range(1, min(k, steps) + 1) if steps % d == 0)


def rnn_version(args, strategy, size, **options):
    k = rnn.checkpoints(strategy)
    steps = args[1].shape[0]

    def scan(a, h, xs):
        def step(carry, x):
            h = tf.tanh(a * carry[0] + x)
            return h, tf.reduce_mean(h)
        hs, ys = tf.scan(step, xs, initializer=(h, tf.constant(0.0)))
        return hs[-1], ys

    def loss(a, xs):
        h = tf.zeros_like(a)
        if k is None:
            h, ys = scan(a, h, xs)
        else:
            outer = _segments(steps, k)
            segment = tf.recompute_grad(scan)
            parts = []
            for xseg in tf.split(xs, outer):
                h, y = segment(a, h, xseg)
                parts.append(y)
            ys = tf.concat(parts, 0)
        return tf.reduce_mean(h * h) + tf.reduce_mean(ys)
    how = ("tf.scan" if k is None else f"{_segments(steps, k)} segments, each a tf.scan under tf.recompute_grad "
           "(two levels: TensorFlow has no binomial schedule)")
    return how, _step(loss, args), _to_numpy


def heat_version(args, strategy, size, **options):
    if strategy != "none":
        raise Unsupported("TensorFlow: tf.while_loop has no checkpointing; its gradient keeps every iteration's values")
    cells, threshold = heat.SIZES[size]
    grid = tf.constant(heat.weights(cells))

    def step(u):
        zero = tf.zeros(1, u.dtype)
        return (u + heat.RATE * (tf.concat([zero, u[:-1]], 0) - 2 * u + tf.concat([u[1:], zero], 0)),)

    def loss(u0):
        (u,) = tf.while_loop(lambda u: tf.reduce_max(u) > threshold, step, (u0,))
        return tf.reduce_sum(u * u * grid)
    return "tf.while_loop (its gradient keeps every iteration)", _step(loss, args), _to_numpy


def signal_version(args, strategy, size, **options):
    k = signal.SIZES[size][-1]

    def loss(taps, x, target):
        n, t = x.shape[1], taps.shape[0]
        y = tf.einsum("bmt,t->bm", tf.gather(x, np.arange(n - t + 1)[:, None] + np.arange(t), axis=1), taps)
        energy = tf.cumsum(y * y, axis=1)
        top = tf.gather(y, tf.argsort(y, axis=1)[:, -k:], axis=1, batch_dims=1)
        m = y.shape[1]
        f = tf.concat([energy[:, -1:] / m, energy[:, m // 2 - 1:m // 2] / (m // 2), tf.reduce_mean(y, 1, keepdims=True),
                       top], axis=1)
        gram = tf.einsum("bi,bj->ij", f, f) + signal.RIDGE * tf.eye(f.shape[1], dtype=f.dtype)
        coef = tf.linalg.solve(gram, tf.linalg.matvec(f, target, transpose_a=True)[:, None])[:, 0]
        return tf.reduce_mean((tf.linalg.matvec(f, coef) - target) ** 2)
    return "the same operations in TensorFlow", _step(loss, args), _to_numpy


VERSIONS = {"chain": chain_version, "mlp": mlp_version, "transformer": transformer_version, "revnet": revnet_version,
            "softplus": softplus_version, "rnn": rnn_version, "heat": heat_version, "signal": signal_version}
