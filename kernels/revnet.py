"""Reversible residual network: blocks (y1, y2) = (x1 + f(x2), x2 + g(y1)) with f, g = tanh(. @ w).
Strategy "reversible" uses tk.reversible: the backward pass reconstructs each block's inputs from
its outputs, so no activation is saved; "none" is the same network without the annotation."""
import numpy as np

import tracekern as tk

NAME = "revnet"
STRATEGIES = ("none", "reversible")
SIZES = {"full": (16, 512, 256), "quick": (8, 256, 192), "test": (3, 8, 4)}   # blocks, width, batch


def block(a, b, wf, wg):
    y1 = a + np.tanh(b @ wf)
    return y1, b + np.tanh(y1 @ wg)


def reversible_block(a, b, wf, wg):
    return tk.reversible(lambda v: np.tanh(v @ wf), lambda v: np.tanh(v @ wg))(a, b)


def loss(ws, x1, x2, block=block):
    a, b = x1, x2
    for wf, wg in ws:
        a, b = block(a, b, wf, wg)
    return np.mean(a * a) + np.mean(b * b)


def inputs(depth: int, width: int, batch: int):
    rng = np.random.default_rng(0)
    ws = [((rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32),
           (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)) for _ in range(depth)]
    x1, x2 = (rng.standard_normal((batch, width)).astype(np.float32) for _ in range(2))
    return ws, x1, x2


def make(size: str, strategy: str):
    args = inputs(*SIZES[size])
    if strategy == "none":
        return loss, args
    return (lambda ws, x1, x2: loss(ws, x1, x2, reversible_block)), args
