"""MLP: 8 tanh layers of width 1024 on a batch of 256 (float32), mean squared error. Matmul-bound:
recompute per layer re-runs the layer's matmul; policy "dots" saves matmul outputs and recomputes
only the tanh."""
import numpy as np

import tracekern as tk

NAME = "mlp"
STRATEGIES = ("none", "recompute", "dots")
SIZES = {"full": (8, 1024, 256), "quick": (8, 512, 256), "test": (3, 8, 4)}   # depth, width, batch


def layer(h, w):
    return np.tanh(h @ w)


def loss(ws, x, y, layer=layer):
    """The unannotated MLP (bench.cpu's W2); `layer` may be an annotated version of `layer`."""
    h = x
    for w in ws:
        h = layer(h, w)
    return np.mean((h - y) ** 2)


def inputs(depth: int, width: int, batch: int):
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(depth)]
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = rng.standard_normal((batch, width)).astype(np.float32)
    return ws, x, y


def make(size: str, strategy: str):
    args = inputs(*SIZES[size])
    if strategy == "none":
        return loss, args
    annotated = tk.recompute(layer, policy="dots" if strategy == "dots" else "nothing")
    return (lambda ws, x, y: loss(ws, x, y, annotated)), args
