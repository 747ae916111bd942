"""The README's first command: trace a small MLP loss, print its IR and its backward IR,
run the forward pass and the gradient, and check the gradient against finite differences."""
from __future__ import annotations

import time

import numpy as np

import tracekern as tk

__tracekern_user_code__ = True   # (errors and the IR name this file's lines: it is an example, not the library)


def mlp_loss(params, x, y):
    h = x
    for w, b in params[:-1]:
        h = np.tanh(h @ w + b)
    w, b = params[-1]
    return np.mean((h @ w + b - y) ** 2)


def main() -> None:
    rng = np.random.default_rng(0)
    sizes = [16, 32, 32, 4]
    params = [((rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32), np.zeros(b, np.float32))
              for a, b in zip(sizes[:-1], sizes[1:])]
    x = rng.standard_normal((64, 16)).astype(np.float32)
    y = rng.standard_normal((64, 4)).astype(np.float32)

    print("== forward IR of mlp_loss ==")
    print(tk.make_ir(mlp_loss)(params, x, y))
    split = tk.make_ir(mlp_loss, mode="vjp")(params, x, y)
    print("\n== vjp: forward (outputs + residuals) and backward IR ==")
    print(split)

    step = tk.jit(tk.value_and_grad(mlp_loss))
    t0 = time.perf_counter()
    loss, grads = step(params, x, y)
    t1 = time.perf_counter()
    for _ in range(10):
        step(params, x, y)
    t2 = time.perf_counter()
    print(f"\nbackend: {tk.default_backend()}")
    print(f"loss = {loss:.6f} ({np.asarray(loss).dtype}); plain NumPy gives {mlp_loss(params, x, y):.6f}")
    print("gradient shapes:", [(gw.shape, gb.shape) for gw, gb in grads])
    print(f"first call (trace + compile + run): {1e3 * (t1 - t0):.1f} ms; cached call: {1e3 * (t2 - t1) / 10:.2f} ms")

    p64 = [(w.astype(np.float64), b.astype(np.float64)) for w, b in params]
    small = (p64, x[:4].astype(np.float64), y[:4].astype(np.float64))
    tk.check_grad(mlp_loss, small, argnums=(0,))
    print("check_grad: reverse mode matches central finite differences (float64)")


if __name__ == "__main__":
    main()
