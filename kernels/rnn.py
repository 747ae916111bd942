"""A diagonal recurrent network over 1000 steps with tk.scan: h <- tanh(a * h + x_t) on 2**16
float32 units, loss on the final state plus the mean of the outputs. Strategies: keep every step
(checkpoint=None) or keep at most k snapshots and recompute the rest (binomial checkpointing)."""
import numpy as np

import tracekern as tk

NAME = "rnn"
STRATEGIES = ("none", "checkpoint32", "checkpoint10")
SIZES = {"full": (1000, 1 << 16), "quick": (500, 1 << 14), "test": (12, 8)}   # steps, units


def checkpoints(strategy: str):
    """The k of "checkpointK" (None for "none")."""
    return None if strategy == "none" else int(strategy.removeprefix("checkpoint"))


def loss(a, xs, checkpoint=None):
    def step(h, x):
        h = np.tanh(a * h + x)
        return h, np.mean(h)
    h, ys = tk.scan(step, np.zeros_like(a), xs, checkpoint=checkpoint)
    return np.mean(h * h) + np.mean(ys)


def inputs(steps: int, units: int):
    rng = np.random.default_rng(0)
    a = rng.uniform(0.5, 0.95, units).astype(np.float32)
    xs = (rng.standard_normal((steps, units)) * 0.1).astype(np.float32)
    return a, xs


def kept_at_run_time(size: str, strategy: str) -> tuple[int | None, str | None]:
    """Carries the backward pass holds at run time beyond tk.vjp's residuals: none without
    checkpointing (the forward records every step's carry, and the residuals count them), at most k
    with checkpoint=k (the schedule's slots)."""
    steps, units = SIZES[size]
    k = checkpoints(strategy)
    if k is None:
        return None, None
    return k * units * 4, f"at most {k} carries of the {steps} steps (the schedule's slots)"


def make(size: str, strategy: str):
    k = checkpoints(strategy)
    return (lambda a, xs: loss(a, xs, k)), inputs(*SIZES[size])
