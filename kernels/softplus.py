"""Logistic regression with log1pexp (softplus): loss = mean(log(1 + exp(-y * (X @ w)))). The
naive formula overflows for large margins and its gradient is NaN there; "custom" is the TensorFlow
seed's log1pexp with a custom gradient (stable value, gradient 1 - sigmoid computed as exp(-softplus))."""
import functools

import numpy as np

import tracekern as tk

NAME = "softplus"
STRATEGIES = ("none", "custom")
SIZES = {"full": (1 << 18, 256), "quick": (1 << 17, 256), "test": (16, 4)}   # samples, features


@tk.custom_gradient
def log1pexp(x):
    e = np.exp(-np.abs(x))
    value = np.maximum(x, 0) + np.log1p(e)

    def grad(upstream):
        return upstream * np.where(x >= 0, 1 / (1 + e), e / (1 + e))
    return value, grad


def naive_log1pexp(z):
    return np.log(1 + np.exp(z))


def loss(w, X, y, f=naive_log1pexp):
    return np.mean(f(-y * (X @ w)))


@functools.lru_cache(maxsize=2)
def inputs(n: int, d: int):
    """(w, X, y), the same arrays for every strategy in a process (drawing X takes 0.5 s at the quick size; nothing
    writes to them)."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((n, d), dtype=np.float32)   # (float32 drawn directly: 4x faster than a cast)
    y = np.sign(rng.standard_normal(n)).astype(np.float32)
    w = (rng.standard_normal(d) * 0.1).astype(np.float32)
    return w, X, y


def make(size: str, strategy: str):
    args = inputs(*SIZES[size])
    if strategy == "none":
        return loss, args
    return (lambda w, X, y: loss(w, X, y, log1pexp)), args
