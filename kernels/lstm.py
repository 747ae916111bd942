"""A character-level LSTM: a stack of LSTM cells run over a text by tk.scan, one character a step
(one-hot, batch 1), its loss the mean negative log-likelihood of the next character under a
log-softmax of the top layer's output. A loop whose body is small (hidden size 14: every array of a
step has at most 4 * 14 values): the cost of a step is its kernel calls, not its arithmetic.
Strategies: keep every step's carry (checkpoint=None), or give the loop a memory budget and let it
choose its snapshots (checkpoint="auto")."""
import math

import numpy as np

import tracekern as tk

NAME = "lstm"
STRATEGIES = ("none", "auto")
# layers, steps (characters), hidden size, vocabulary
SIZES = {"full": (4, 4096, 14, 32), "quick": (2, 1024, 14, 32), "test": (2, 7, 3, 5)}


def cell(x, h, c, wx, wh, b, xp=np):
    """One LSTM cell (gates i, f, g, o in that order: PyTorch's nn.LSTM layout, transposed). xp: the
    array module (NumPy, traced by tracekern; jax.numpy for the JAX peer)."""
    n = h.shape[0]
    z = x @ wx + h @ wh + b
    sigmoid = lambda v: 1 / (1 + xp.exp(-v))   # noqa: E731
    i, f, g, o = sigmoid(z[:n]), sigmoid(z[n:2 * n]), xp.tanh(z[2 * n:3 * n]), sigmoid(z[3 * n:])
    c = f * c + i * g
    return o * xp.tanh(c), c


def step(params, carry, inputs, xp=np):
    """One character: (hs, cs) -> new (hs, cs), and the negative log-likelihood of the next one."""
    layers, (wout, bout) = params
    (hs, cs), (x, target) = carry, inputs
    new_h, new_c = [], []
    for (wx, wh, b), h, c in zip(layers, hs, cs):
        x, c = cell(x, h, c, wx, wh, b, xp)
        new_h.append(x)
        new_c.append(c)
    logits = x @ wout + bout
    top = xp.max(logits)
    logp = logits - (top + xp.log(xp.sum(xp.exp(logits - top))))
    return (tuple(new_h), tuple(new_c)), -xp.sum(target * logp)


def initial(params, xp=np):
    wh = params[0][0][1]
    zeros = tuple(xp.zeros(wh.shape[0], wh.dtype) for _ in params[0])
    return zeros, zeros


def segments(steps: int) -> int:
    """The peers' two-level checkpointing of the same memory as checkpoint="auto" (about 2 sqrt(n)
    carries): this many segments (the largest divisor of the step count at most ceil(sqrt(n))),
    each re-run with its carries kept in the backward pass."""
    return max(d for d in range(1, math.isqrt(steps - 1) + 2 if steps > 1 else 2) if steps % d == 0)


def loss(params, xs, targets, checkpoint=None):
    _, nll = tk.scan(lambda carry, inp: step(params, carry, inp), initial(params), (xs, targets),
                     checkpoint=checkpoint)
    return np.mean(nll)


def numpy_value(params, xs, targets) -> np.float32:
    """The value alone, as plain NumPy runs it: a Python loop over the characters (the same step)."""
    carry, total = initial(params), np.float32(0)
    for t in range(xs.shape[0]):
        carry, nll = step(params, carry, (xs[t], targets[t]))
        total += nll
    return total / np.float32(xs.shape[0])


def text(steps: int, vocab: int, seed: int = 0) -> np.ndarray:
    """steps + 1 characters from a fixed random Markov chain (each character prefers a few successors)."""
    rng = np.random.default_rng(seed)
    likes = rng.dirichlet(np.full(vocab, 0.3), size=vocab)
    out = np.empty(steps + 1, np.int64)
    out[0] = 0
    draws = rng.random(steps)
    cumulative = np.cumsum(likes, axis=1)
    for t in range(steps):
        out[t + 1] = min(int(np.searchsorted(cumulative[out[t]], draws[t])), vocab - 1)
    return out


def inputs(layers: int, steps: int, hidden: int, vocab: int):
    rng = np.random.default_rng(0)
    params = []
    for k in range(layers):
        width = vocab if k == 0 else hidden
        scale = 1 / np.sqrt(width + hidden)
        params.append(((rng.standard_normal((width, 4 * hidden)) * scale).astype(np.float32),
                       (rng.standard_normal((hidden, 4 * hidden)) * scale).astype(np.float32),
                       (rng.standard_normal(4 * hidden) * 0.1).astype(np.float32)))
    head = ((rng.standard_normal((hidden, vocab)) / np.sqrt(hidden)).astype(np.float32),
            np.zeros(vocab, np.float32))
    chars = text(steps, vocab)
    onehot = np.eye(vocab, dtype=np.float32)
    return (params, head), onehot[chars[:-1]], onehot[chars[1:]]


def make(size: str, strategy: str):
    checkpoint = None if strategy == "none" else "auto"
    return (lambda params, xs, targets: loss(params, xs, targets, checkpoint)), inputs(*SIZES[size])
