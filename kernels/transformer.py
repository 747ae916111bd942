"""Transformer-style blocks: layernorm, single-head self-attention with softmax, a residual, then
layernorm and a GELU MLP (4x wider) with a residual; 4 blocks on a sequence of float32 vectors.
Strategies: recompute per block (policy "nothing" or "dots")."""
import numpy as np

import tracekern as tk
import tracekern.numpy as tnp

NAME = "transformer"
STRATEGIES = ("none", "recompute", "dots")
SIZES = {"full": (4, 256, 256), "quick": (4, 32, 384), "test": (2, 4, 8)}   # blocks, sequence, width


def layernorm(x, gain, bias):
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / np.sqrt(var + np.float32(1e-5)) * gain + bias


def block(x, p):
    wq, wk, wv, wo, w1, w2, g1, b1, g2, b2 = p
    h = layernorm(x, g1, b1)
    q, k, v = h @ wq, h @ wk, h @ wv
    att = tnp.softmax(q @ k.T * np.float32(1 / np.sqrt(q.shape[-1])), axis=-1)
    x = x + (att @ v) @ wo
    h = layernorm(x, g2, b2)
    return x + tnp.gelu(h @ w1) @ w2


def loss(params, x, block=block):
    """The unannotated stack; `block` may be an annotated version of `block`."""
    for p in params:
        x = block(x, p)
    return np.mean(x * x)


def inputs(blocks: int, seq: int, width: int):
    rng = np.random.default_rng(0)

    def mat(a, b):
        return (rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32)
    one, zero = np.ones(width, np.float32), np.zeros(width, np.float32)
    params = [(mat(width, width), mat(width, width), mat(width, width), mat(width, width),
               mat(width, 4 * width), mat(4 * width, width), one, zero, one, zero) for _ in range(blocks)]
    x = rng.standard_normal((seq, width)).astype(np.float32)
    return params, x


def make(size: str, strategy: str):
    args = inputs(*SIZES[size])
    if strategy == "none":
        return loss, args
    annotated = tk.recompute(block, policy="dots" if strategy == "dots" else "nothing")
    return (lambda params, x: loss(params, x, annotated)), args
