"""A diagonal recurrent network over 1000 steps with tk.scan: h <- tanh(a * h + x_t) on 2**16
float32 units, loss on the final state plus the mean of the outputs. Strategies: keep every step
(checkpoint=None) or keep at most k snapshots and recompute the rest (binomial checkpointing)."""
import numpy as np

import tracekern as tk

NAME = "rnn"
STRATEGIES = ("none", "checkpoint32", "checkpoint10")
SIZES = {"full": (1000, 1 << 16), "quick": (200, 1 << 12), "test": (12, 8)}   # steps, units


def make(size: str, strategy: str):
    steps, units = SIZES[size]
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 0.95, units).astype(np.float32)
    xs = (rng.standard_normal((steps, units)) * 0.1).astype(np.float32)
    k = None if strategy == "none" else int(strategy.removeprefix("checkpoint"))

    def loss(a, xs):
        def step(h, x):
            h = np.tanh(a * h + x)
            return h, np.mean(h)
        h, ys = tk.scan(step, np.zeros_like(a), xs, checkpoint=k)
        return np.mean(h * h) + np.mean(ys)
    return loss, (a, xs)
