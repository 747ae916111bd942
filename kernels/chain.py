"""Elementwise chain: 16 layers of tanh, sin, an affine map and a Gaussian bump on float32 values,
summed. Memory-bound: recomputing a layer in the backward pass is cheaper than saving it."""
import numpy as np

import tracekern as tk

NAME = "chain"
STRATEGIES = ("none", "recompute")
LAYERS = 16
SIZES = {"full": 1 << 22, "quick": 1 << 20, "test": 64}


def layer(x, k: int):
    """Layer k: tanh, sin, x * 0.9 + 0.1 or exp(-x * x), in turn."""
    kind = k % 4
    if kind == 0:
        return np.tanh(x)
    if kind == 1:
        return np.sin(x)
    if kind == 2:
        return x * np.float32(0.9) + np.float32(0.1)
    return np.exp(-x * x)


def loss(x):
    """The unannotated chain (bench.cpu's W1)."""
    for k in range(LAYERS):
        x = layer(x, k)
    return np.sum(x)


def inputs(n: int):
    return (np.random.default_rng(0).uniform(-1, 1, n).astype(np.float32),)


def make(size: str, strategy: str):
    if strategy == "none":
        return loss, inputs(SIZES[size])
    fns = [tk.recompute(lambda x, k=k: layer(x, k)) for k in range(LAYERS)]

    def recomputed(x):
        for f in fns:
            x = f(x)
        return np.sum(x)
    return recomputed, inputs(SIZES[size])
