"""The 1-D heat equation, explicit scheme, run by tk.while_loop until the peak temperature falls
below a threshold (a data-dependent number of steps), differentiated with respect to the initial
temperature profile. Strategies: keep every step, or checkpoint=k."""
import numpy as np

import tracekern as tk

NAME = "heat"
STRATEGIES = ("none", "checkpoint16")
SIZES = {"full": (1 << 16, 0.5), "quick": (1 << 12, 0.5), "test": (32, 0.9)}   # cells, stop threshold
WIDTH = 8.0   # of each initial bump, in cells: about 380 steps until the peaks halve
RATE = 0.25   # dt * alpha / dx**2 (stable below 0.5)


def laplacian(u):
    """Fixed (zero) boundaries: u[i-1] - 2 u[i] + u[i+1]."""
    zero = np.zeros(1, u.dtype)
    return np.concatenate([zero, u[:-1]]) - 2 * u + np.concatenate([u[1:], zero])


def make(size: str, strategy: str):
    cells, threshold = SIZES[size]
    grid = np.linspace(-1, 1, cells, dtype=np.float32)
    period = min(256, cells)
    offset = (np.arange(cells) % period - period // 2).astype(np.float32)   # a bump every 256 cells
    u0 = np.exp(-offset * offset / np.float32(2 * WIDTH * WIDTH)).astype(np.float32)
    k = None if strategy == "none" else int(strategy.removeprefix("checkpoint"))

    def loss(u0):
        u = tk.while_loop(lambda u: np.max(u) > threshold, lambda u: u + np.float32(RATE) * laplacian(u), u0,
                          checkpoint=k)
        return np.sum(u * u * grid)
    return loss, (u0,)
