"""The 1-D heat equation, explicit scheme, run by tk.while_loop until the peak temperature falls
below a threshold (a data-dependent number of steps), differentiated with respect to the initial
temperature profile. Strategies: keep every step, or checkpoint=k."""
import numpy as np

import tracekern as tk

NAME = "heat"
STRATEGIES = ("none", "checkpoint16")
SIZES = {"full": (1 << 16, 0.5), "quick": (1 << 14, 0.5), "test": (32, 0.9)}   # cells, stop threshold
WIDTH = 8.0   # of each initial bump, in cells: about 380 steps until the peaks halve
RATE = 0.25   # dt * alpha / dx**2 (stable below 0.5)


def checkpoints(strategy: str):
    return None if strategy == "none" else int(strategy.removeprefix("checkpoint"))


def laplacian(u):
    """Fixed (zero) boundaries: u[i-1] - 2 u[i] + u[i+1]."""
    zero = np.zeros(1, u.dtype)
    return np.concatenate([zero, u[:-1]]) - 2 * u + np.concatenate([u[1:], zero])


def step(u):
    return u + np.float32(RATE) * laplacian(u)


def inputs(cells: int):
    period = min(256, cells)
    offset = (np.arange(cells) % period - period // 2).astype(np.float32)   # a bump every 256 cells
    u0 = np.exp(-offset * offset / np.float32(2 * WIDTH * WIDTH)).astype(np.float32)
    return (u0,)


def weights(cells: int):
    """The loss's weights: sum(u * u * weights) at the end."""
    return np.linspace(-1, 1, cells, dtype=np.float32)


def loss(u0, threshold, checkpoint=None):
    grid = weights(u0.shape[0])
    u = tk.while_loop(lambda u: np.max(u) > threshold, step, u0, checkpoint=checkpoint)
    return np.sum(u * u * grid)


def trip_count(size: str) -> int:
    """How many steps the loop runs on this size's input (plain NumPy, the same arithmetic)."""
    (u,), threshold = inputs(SIZES[size][0]), SIZES[size][1]
    n = 0
    while np.max(u) > threshold:
        u, n = step(u), n + 1
    return n


def kept_at_run_time(size: str, strategy: str) -> tuple[int, str]:
    """Carries the backward pass holds at run time: one per iteration without checkpointing (the
    trip count is known only when the loop has run), at most k with checkpoint=k."""
    cells = SIZES[size][0]
    trips = trip_count(size)
    k = checkpoints(strategy)
    if k is None:
        return trips * cells * 4, (f"{trips} carries, one per iteration: the number depends on the trip count, "
                                    "known only when the loop has run")
    return min(k, trips) * cells * 4, f"at most {k} carries of the {trips} iterations"


def make(size: str, strategy: str):
    cells, threshold = SIZES[size]
    k = checkpoints(strategy)
    return (lambda u0: loss(u0, threshold, k)), inputs(cells)
