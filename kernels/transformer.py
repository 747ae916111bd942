"""Transformer-style blocks: layernorm, single-head self-attention with softmax, a residual, then
layernorm and a GELU MLP (4x wider) with a residual; 4 blocks on a sequence of float32 vectors.
Strategies: recompute per block (policy "nothing" or "dots"); "dropout": the same blocks with
dropout (rate 0.1 on the attention weights and on both residual branches, masks from tk.random),
each block under tk.recompute, whose backward pass draws the same masks again (its value and
gradient are those of the dropout model without recompute: reference("dropout"))."""
import numpy as np

import tracekern as tk
import tracekern.numpy as tnp

NAME = "transformer"
STRATEGIES = ("none", "recompute", "dots", "dropout")
RATE = 0.1      # dropout's
SEED = 0        # the dropout masks' key: tk.random.key(SEED), split into one key per block
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


def dropout(key, x, rate=RATE):
    """Inverted dropout: each element is zeroed with probability `rate` and the rest scaled by
    1 / (1 - rate); the mask is a pure function of the key and the element's position."""
    keep = tk.random.bernoulli(key, 1.0 - rate, x.shape)
    return np.where(keep, x / np.float32(1.0 - rate), np.float32(0.0))


def dropout_block(x, p, key):
    """block() with dropout on the attention weights and on both residual branches."""
    wq, wk, wv, wo, w1, w2, g1, b1, g2, b2 = p
    k_att, k_mix, k_mlp = tk.random.split(key, 3)
    h = layernorm(x, g1, b1)
    q, k, v = h @ wq, h @ wk, h @ wv
    att = dropout(k_att, tnp.softmax(q @ k.T * np.float32(1 / np.sqrt(q.shape[-1])), axis=-1))
    x = x + dropout(k_mix, (att @ v) @ wo)
    h = layernorm(x, g2, b2)
    return x + dropout(k_mlp, tnp.gelu(h @ w1) @ w2)


def dropout_loss(params, x, block=dropout_block):
    """The stack with dropout, one key per block; `block` may be an annotated dropout_block."""
    keys = tk.random.split(tk.random.key(SEED), len(params))
    for i, p in enumerate(params):
        x = block(x, p, keys[i])
    return np.mean(x * x)


def reference(strategy: str):
    """The loss a strategy's value and gradient must equal: the dropout model's for "dropout",
    the unannotated stack's for the others."""
    return dropout_loss if strategy == "dropout" else loss


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
    if strategy == "dropout":
        recomputed = tk.recompute(dropout_block)
        return (lambda params, x: dropout_loss(params, x, recomputed)), args
    annotated = tk.recompute(block, policy="dots" if strategy == "dots" else "nothing")
    return (lambda params, x: loss(params, x, annotated)), args
