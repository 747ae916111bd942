"""Elementwise chain: 16 layers of tanh, sin, an affine map and a Gaussian bump on float32 values,
summed. Memory-bound: recomputing a layer in the backward pass is cheaper than saving it."""
import numpy as np

import tracekern as tk

NAME = "chain"
STRATEGIES = ("none", "recompute")
LAYERS = 16
SIZES = {"full": 1 << 22, "quick": 1 << 18, "test": 64}


def layer(x, k: int):
    kind = k % 4
    if kind == 0:
        return np.tanh(x)
    if kind == 1:
        return np.sin(x)
    if kind == 2:
        return x * np.float32(0.9) + np.float32(0.1)
    return np.exp(-x * x)


def make(size: str, strategy: str):
    fns = [lambda x, k=k: layer(x, k) for k in range(LAYERS)]
    if strategy == "recompute":
        fns = [tk.recompute(f) for f in fns]

    def loss(x):
        for f in fns:
            x = f(x)
        return np.sum(x)

    x = np.random.default_rng(0).uniform(-1, 1, SIZES[size]).astype(np.float32)
    return loss, (x,)
