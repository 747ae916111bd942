"""How the memory planner's plans compare with the hand-placed strategies as the transformer gets
deeper: kernels/transformer.py at 1, 2, 4 and 8 blocks (seq 256, width 128), value_and_grad on one
thread, with memory_budget= set to exactly what policy "dots" and per-block recompute keep, against
those strategies, by the median over 30 shuffled interleaved rounds of the ratio of CPU times in the
same round (90% bootstrap interval; bench/budget.py's measurement).

    NUMBA_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python -m bench.budget_depth"""
from __future__ import annotations

import numpy as np

import kernels.transformer as T
import tracekern as tk
from bench.budget import cpu_times, paired_ratio

BLOCKS = (1, 2, 4, 8)


def main() -> None:
    tk.value_and_grad(lambda x: np.sum(np.tanh(x)))(np.ones(8, np.float32))
    for blocks in BLOCKS:
        args = T.inputs(blocks, 256, 128)
        hand = {s: T.loss if s == "none" else T.make("test", s)[0] for s in ("none", "recompute", "dots")}
        kept = {s: tk.value_and_grad(f, memory_budget=1.0).lower(*args).vjp.unconstrained_bytes for s, f in hand.items()}
        steps = {s: tk.jit(tk.value_and_grad(f)) for s, f in hand.items()}
        for s in ("dots", "recompute"):
            steps[f"budget={s}"] = tk.jit(tk.value_and_grad(T.loss, memory_budget=kept[s]))
        fns = {k: (lambda step=step: step(*args)) for k, step in steps.items()}
        for f in fns.values():
            f()
        got = cpu_times(fns, 30)
        cols = []
        for s in ("dots", "recompute"):
            mid, lo, hi = paired_ratio(got[f"budget={s}"]["cpu_rounds"], got[s]["cpu_rounds"])
            cols.append(f"{s} {1e3 * got[s]['cpu_s']:.1f} ms at {kept[s] / 2 ** 20:.2f} MB, the budget there "
                        f"{mid:.2f}x [{lo:.2f}-{hi:.2f}]")
        print(f"blocks {blocks}: " + "; ".join(cols) + f"; none {1e3 * got['none']['cpu_s']:.1f} ms", flush=True)


if __name__ == "__main__":
    main()
