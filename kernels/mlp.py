"""MLP: 8 tanh layers of width 1024 on a batch of 256 (float32), mean squared error. Matmul-bound:
recompute per layer re-runs the layer's matmul; policy "dots" saves matmul outputs and recomputes
only the tanh."""
import numpy as np

import tracekern as tk

NAME = "mlp"
STRATEGIES = ("none", "recompute", "dots")
SIZES = {"full": (8, 1024, 256), "quick": (8, 256, 64), "test": (3, 8, 4)}


def make(size: str, strategy: str):
    depth, width, batch = SIZES[size]
    rng = np.random.default_rng(0)
    ws = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32) for _ in range(depth)]
    x = rng.standard_normal((batch, width)).astype(np.float32)
    y = rng.standard_normal((batch, width)).astype(np.float32)

    def layer(h, w):
        return np.tanh(h @ w)
    if strategy != "none":
        layer = tk.recompute(layer, policy="dots" if strategy == "dots" else "nothing")

    def loss(ws, x, y):
        h = x
        for w in ws:
            h = layer(h, w)
        return np.mean((h - y) ** 2)
    return loss, (ws, x, y)
