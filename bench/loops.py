"""Loop benchmark: what checkpoint=k costs in time and saves in memory for a long scan and for a
while_loop that stops on a data-dependent condition; JAX side by side when importable.

    python -m bench.loops [--quick] [--json PATH]

Prints a table and writes JSON. `snapshots` is the carries the backward pass keeps: every step's
without checkpointing, the schedule's k slots with checkpoint=k. `vjp saves` is what tk.vjp saves between its two calls
(the scan's recorded carries, or only its inputs). `rerun` is the number of forward steps the
backward pass runs again; `revolve` is Griewank and Walther's bound for the same number of stored
carries (the first forward sweep included)."""
from __future__ import annotations

import numpy as np

import tracekern as tk
from bench.harness import median_time, script
from tracekern import schedule

DECAY = np.float32(0.999)


def step(c, x):
    return c * DECAY + np.sin(c) * np.float32(0.01) + x, ()


def scan_loss(x0, xs, k):
    c, _ = tk.scan(step, x0, xs, checkpoint=k)
    return np.sum(c * c)


def sim_loss(x0, k):
    def body(s):
        pos, vel, t = s
        return pos + np.float32(0.01) * vel, vel * np.float32(0.999) - np.float32(0.0981) + np.sin(pos) * np.float32(0.001), t + 1
    pos, vel, trips = tk.while_loop(lambda s: np.mean(s[0]) > 0.0, body, (x0, np.zeros_like(x0), np.int64(0)),
                                    checkpoint=k)
    return np.sum(pos * pos) + np.sum(vel), trips


def jax_scan(x0, xs, runs):
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return {}, ["JAX not installed: skipped"]

    def jstep(c, x):
        return c * 0.999 + jnp.sin(c) * 0.01 + x, None

    def plain(x0, xs):
        c, _ = jax.lax.scan(jstep, x0, xs)
        return jnp.sum(c * c)

    def ckpt(x0, xs):
        c, _ = jax.lax.scan(jax.checkpoint(jstep), x0, xs)
        return jnp.sum(c * c)

    out = {}
    xj, xsj = jnp.asarray(x0), jnp.asarray(xs)
    for name, f in (("jax_scan", plain), ("jax_scan_checkpoint_body", ckpt)):
        g = jax.jit(jax.value_and_grad(f))
        out[name] = median_time(lambda g=g: jax.block_until_ready(g(xj, xsj)), runs)
    return out, ["JAX cannot reverse-differentiate lax.while_loop: the while_loop case has no JAX column"]


def run(args) -> dict:
    n, size, runs = (200, 1 << 12, 3) if args.quick else (1000, 1 << 16, 5)
    rng = np.random.default_rng(0)
    x0 = rng.uniform(-1, 1, size).astype(np.float32)
    xs = (rng.standard_normal((n, size)) * 0.01).astype(np.float32)
    carry = x0.nbytes
    result: dict = {"steps": n, "values": size, "scan": {}, "while": {}, "notes": []}

    want = None
    for k in (None, 32, 10):
        f = tk.jit(tk.value_and_grad(lambda a, b, k=k: scan_loss(a, b, k)))
        v, g = f(x0, xs)
        want = g if want is None else want
        saved = tk.make_ir(lambda a, b, k=k: scan_loss(a, b, k), mode="vjp")(x0, xs).residual_bytes
        result["scan"][str(k)] = {
            "time_s": median_time(lambda f=f: f(x0, xs), runs), "saved_bytes": int(saved),
            # carries alive for the backward pass: every step's, or the schedule's k slots
            "snapshot_bytes": (n if k is None else k) * carry, "rerun": 0 if k is None else schedule.reruns(n, k),
            "revolve": 0 if k is None else schedule.revolve_bound(n, k), "max_grad_diff": float(np.abs(g - want).max())}
    peers, notes = jax_scan(x0, xs, runs)
    result["scan"].update({name: {"time_s": t} for name, t in peers.items()})
    result["notes"] += notes

    x_sim = rng.uniform(0.5, 1.0, size).astype(np.float32)
    for k in (None, 32, 10):
        f = tk.jit(tk.value_and_grad(lambda a, k=k: sim_loss(a, k), has_aux=True))
        (_, trips), _ = f(x_sim)
        trips = int(trips)
        stored = trips if k is None else min(k, trips)
        result["while"][str(k)] = {
            "time_s": median_time(lambda f=f: f(x_sim), runs), "trips": trips,
            "snapshot_bytes": int(2 * carry * stored),   # position and velocity per stored carry
            "rerun": schedule.reruns(trips, stored),
            "revolve": schedule.revolve_bound(trips, stored)}
    return result


def main(argv=None) -> dict:
    return script("python -m bench.loops", __doc__, run, report, "loops.json", argv)


def report(r: dict) -> str:
    lines = []
    lines.append(f"\nscan: {r['steps']} steps on {r['values']} float32 values, value_and_grad")
    base = r["scan"]["None"]["time_s"]
    lines.append(f"  {'checkpoint':26s} {'time':>10s} {'ratio':>7s} {'snapshots':>12s} {'vjp saves':>10s} {'rerun':>7s} {'revolve':>8s}")
    for k, row in r["scan"].items():
        extra = ("" if "snapshot_bytes" not in row else
                 f" {row['snapshot_bytes'] / 1e6:9.2f} MB {row['saved_bytes'] / 1e6:7.2f} MB {row['rerun']:7d} {row['revolve']:8d}")
        lines.append(f"  {k:26s} {row['time_s'] * 1e3:8.1f} ms {row['time_s'] / base:6.2f}x{extra}")
    lines.append(f"\nwhile_loop: a simulation that stops on a data-dependent condition, value_and_grad "
          f"({r['while']['None']['trips']} iterations)")
    base = r["while"]["None"]["time_s"]
    for k, row in r["while"].items():
        lines.append(f"  checkpoint={k:5s} {row['time_s'] * 1e3:8.1f} ms {row['time_s'] / base:6.2f}x "
              f"{row['snapshot_bytes'] / 1e6:9.2f} MB in the backward, rerun {row['rerun']}, "
              f"revolve bound {row['revolve']}")
    return "\n".join(lines)



if __name__ == "__main__":
    main()
