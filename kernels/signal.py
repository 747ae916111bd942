"""A learned FIR filter whose output features are fitted by ridge regression (float32): the filter
runs as an einsum over sliding windows (a constant gather), the running energy of each filtered
signal is a cumsum, its k largest samples are picked with argsort and take_along_axis, and the
features' ridge fit is np.linalg.solve. The loss is the fit's mean squared residual, differentiated
with respect to the filter taps (through the solve, the sort and the scan). It exists to exercise
NumPy's scan, contraction, gather, sort and linalg families in one program; it has one strategy."""
import numpy as np

NAME = "signal"
STRATEGIES = ("none",)
SIZES = {"full": (256, 4096, 32, 8), "quick": (128, 2048, 16, 8), "test": (8, 32, 4, 3)}   # batch, samples, taps, k
RIDGE = 0.1


def features(taps, x, k, xp=np):
    """(batch, 3 + k) features of the filtered signals: total and half-way energy, mean, top k samples.
    xp: the NumPy namespace (kernels/peers runs the same code with jax.numpy)."""
    n, t = x.shape[1], taps.shape[0]
    windows = x[:, np.arange(n - t + 1)[:, None] + np.arange(t)]       # (batch, m, taps), a gather
    y = xp.einsum("bmt,t->bm", windows, taps)                           # the filter
    energy = xp.cumsum(y * y, axis=1)                                   # running energy
    top = xp.take_along_axis(y, xp.argsort(y, axis=1)[:, -k:], axis=1)  # the k largest samples
    m = y.shape[1]
    return xp.concatenate([energy[:, -1:] / m, energy[:, m // 2 - 1:m // 2] / (m // 2), y.mean(1, keepdims=True), top],
                          axis=1)


def loss(taps, x, target, k, xp=np):
    f = features(taps, x, k, xp)
    gram = xp.einsum("bi,bj->ij", f, f) + np.float32(RIDGE) * np.eye(f.shape[1], dtype=np.float32)
    coef = xp.linalg.solve(gram, f.T @ target)
    return xp.mean((f @ coef - target) ** 2)


def inputs(batch: int, samples: int, taps: int, k: int):
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, samples, dtype=np.float32)
    freq = rng.uniform(2, 40, (batch, 1)).astype(np.float32)
    x = (np.sin(2 * np.pi * freq * t) + 0.3 * rng.standard_normal((batch, samples))).astype(np.float32)
    target = (freq[:, 0] / 40).astype(np.float32)
    w = (rng.standard_normal(taps) / np.sqrt(taps)).astype(np.float32)
    return w, x, target


def make(size: str, strategy: str):
    *shape, k = SIZES[size]
    return (lambda taps, x, target: loss(taps, x, target, k)), inputs(*shape, k)
