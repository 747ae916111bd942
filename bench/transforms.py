"""Transforms benchmark (issue 28): dense Jacobians, per-example gradients and a full Hessian,
tracekern against JAX (jit of jacfwd / jacrev / vmap(grad) / hessian) and a hand-batched version.

    python -m bench.transforms [--quick] [--json PATH]

(a) hand: the Jacobian of 300 residuals in 26 parameters of a hand-tracking model (a global pose
    and 5 fingers of Euler-angle bone chains, 100 vertices skinned to two bones each), the
    ADBench-style objective whose Jacobian one pullback per row made 12.8x slower than JAX; also
    with tk.config.compiled_drivers (row tracekern_compiled_driver);
(b) per-example gradients of an MLP's loss over a batch of 256 (vmap of grad), against JAX and
    against the same gradients written batched by hand (einsum over the batch, in tracekern);
(c) the full Hessian of a 100-parameter function (hessian = jacfwd of jacrev).

Every time is the median of interleaved rounds (the tools of a row take turns), with its min-max;
ratios are tool / tracekern from this one run. tracekern runs on the cpu backend, compiled; JAX on
its CPU backend with float64 enabled (the workloads are float64), in this process."""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

import tracekern as tk
from bench.harness import RESULTS, first_call, interleaved

# -- (a) a hand-tracking model ------------------------------------------------------------------------
FINGERS, JOINTS = 5, 3
BONES = 1 + FINGERS * JOINTS            # the palm, then three bones a finger
PARAMS = 6 + FINGERS * 4                # translation, global Euler angles, 4 angles a finger
VERTICES = 100                          # 300 residuals


def hand_data(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    bone = rng.integers(0, BONES, size=(VERTICES, 2))
    bone[:, 1] = np.where(bone[:, 0] % JOINTS == 0, bone[:, 0], bone[:, 0] - 1)     # a vertex near a joint
    return {
        "offsets": rng.normal(0.0, 0.3, size=(BONES, 3)) + np.array([0.0, 1.0, 0.0]),  # bone origin in its parent
        "local": rng.normal(0.0, 0.2, size=(VERTICES, 2, 3)),                          # vertex in each bone's frame
        "bone": bone,
        "weight": np.stack([np.full(VERTICES, 0.7), np.full(VERTICES, 0.3)], axis=1),
        "target": rng.normal(0.0, 1.0, size=(VERTICES, 3)),
    }


def _euler(xp, a, b, c):
    """The rotation R_z(c) R_y(b) R_x(a) from three angles."""
    ca, sa, cb, sb, cc, sc = xp.cos(a), xp.sin(a), xp.cos(b), xp.sin(b), xp.cos(c), xp.sin(c)
    return xp.stack([
        xp.stack([cc * cb, cc * sb * sa - sc * ca, cc * sb * ca + sc * sa]),
        xp.stack([sc * cb, sc * sb * sa + cc * ca, sc * sb * ca - cc * sa]),
        xp.stack([-sb, cb * sa, cb * ca]),
    ])


def hand_residuals(xp, theta, data):
    """300 residuals: skinned vertices (linear blend of two bones' transforms) minus their targets.
    The palm takes the global pose; each finger is a chain of three bones: the first with flexion
    and abduction, the other two with flexion only."""
    zero = theta[0] * 0.0
    rot = [_euler(xp, theta[3], theta[4], theta[5])]
    pos = [theta[0:3]]
    for f in range(FINGERS):
        a = 6 + 4 * f
        R, t = rot[0], pos[0]
        for j in range(JOINTS):
            b = 1 + f * JOINTS + j
            flex = theta[a + 1 + j]
            local = _euler(xp, flex, theta[a] if j == 0 else zero, zero)
            t = t + R @ data["offsets"][b]
            R = R @ local
            rot.append(R)
            pos.append(t)
    R = xp.stack(rot)                              # (BONES, 3, 3)
    T = xp.stack(pos)                              # (BONES, 3)
    idx = data["bone"]
    Rv = R[idx]                                    # (VERTICES, 2, 3, 3)
    world = xp.einsum("vkij,vkj->vki", Rv, data["local"]) + T[idx]
    skinned = xp.sum(world * data["weight"][..., None], axis=1)
    return (skinned - data["target"]).reshape(-1)


# -- (b) per-example gradients of an MLP -------------------------------------------------------------
def mlp_params(seed: int = 0, sizes=(64, 128, 128, 10)) -> list:
    rng = np.random.default_rng(seed)
    return [(rng.normal(0, 1 / np.sqrt(m), size=(m, n)), np.zeros(n)) for m, n in zip(sizes[:-1], sizes[1:])]


def mlp_loss(xp, params, x, y):
    """Softmax cross-entropy of one example (x: (64,), y: one-hot (10,))."""
    h = x
    for k, (w, b) in enumerate(params):
        h = h @ w + b
        if k < len(params) - 1:
            h = xp.tanh(h)
    m = xp.max(h)
    return -xp.sum(y * (h - m - xp.log(xp.sum(xp.exp(h - m)))))


def mlp_per_example_by_hand(params, xs, ys):
    """The per-example gradients written batched (what a competent user writes without vmap): the
    forward over the batch keeping activations, the backward with einsum outer products per example."""
    acts, h = [xs], xs
    for k, (w, b) in enumerate(params):
        h = h @ w + b
        if k < len(params) - 1:
            h = np.tanh(h)
        acts.append(h)
    z = acts[-1]
    p = np.exp(z - np.max(z, axis=1, keepdims=True))
    p = p / np.sum(p, axis=1, keepdims=True)
    g = p * np.sum(ys, axis=1, keepdims=True) - ys               # d loss / d logits, per example
    grads = []
    for k in reversed(range(len(params))):
        w, _ = params[k]
        grads.append((np.einsum("bi,bj->bij", acts[k], g), g))
        if k:
            g = (g @ w.T) * (1 - acts[k] ** 2)
    return grads[::-1]


# -- (c) a 100-parameter function --------------------------------------------------------------------
def hess_fn(xp, x):
    """A smooth scalar of 100 parameters with a dense Hessian: a quadratic form, couplings of
    neighbours and a log-sum-exp."""
    A = np.cos(np.arange(100)[:, None] * np.arange(100)[None, :] * 0.01)
    q = x @ (A @ x) * 0.01
    return q + xp.sum(xp.sin(x[1:] * x[:-1])) + xp.log(xp.sum(xp.exp(x * 0.5)))


# -- the runs ------------------------------------------------------------------------------------------
def _jax():
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None, None
    jax.config.update("jax_enable_x64", True)
    return jax, jnp


def _row(name: str, fns: dict, first: dict, check: dict, quick: bool) -> dict:
    """Times the functions of one row interleaved (`first`: each one's first call, which traces and
    compiles, timed before anything else ran it)."""
    timing = interleaved(fns, min_runs=5 if quick else 20, min_seconds=0.5 if quick else 3.0, rounds=3 if quick else 5)
    base = timing["tracekern"].median if "tracekern" in timing else None
    return {"workload": name, "check": check,
            "tools": {k: dict(t.as_dict(), first_call_s=first[k], ratio=(t.median / base if base else None))
                      for k, t in timing.items()}}


def run(quick: bool = False) -> dict:
    jax, jnp = _jax()
    rows, notes = [], []
    if jax is None:
        notes.append("JAX not installed: its columns are missing")

    # (a)
    data = hand_data()
    theta = np.random.default_rng(1).normal(0.0, 0.3, size=PARAMS)
    res = lambda t: hand_residuals(np, t, data)   # noqa: E731
    fwd, rev = tk.jacfwd(res), tk.jacrev(res)
    fns = {"tracekern": lambda: fwd(theta), "tracekern_jacrev": lambda: rev(theta)}
    first = {k: first_call(f)[0] for k, f in fns.items()}
    # the same jacfwd with the cpu backend's compiled driver (tk.config.compiled_drivers, read when its step
    # compiles, on its first call: that first call is the driver's compile, the kernels being compiled)
    fwd_driver = tk.jacfwd(res)
    with tk.config.override(compiled_drivers=True):
        first["tracekern_compiled_driver"] = first_call(lambda: fwd_driver(theta))[0]
    fns["tracekern_compiled_driver"] = lambda: fwd_driver(theta)
    J = fwd(theta)
    check = {"shape": list(J.shape), "jacfwd_vs_jacrev": float(np.max(np.abs(J - rev(theta)))),
             "compiled_driver_bits_equal": bool(np.array_equal(J, fwd_driver(theta)))}
    if jax is not None:
        jdata = {k: jnp.asarray(v) for k, v in data.items()}
        jres = lambda t: hand_residuals(jnp, t, jdata)   # noqa: E731
        jf, jr = jax.jit(jax.jacfwd(jres)), jax.jit(jax.jacrev(jres))
        tj = jnp.asarray(theta)
        fns["jax_jacfwd"] = lambda: jf(tj).block_until_ready()
        fns["jax_jacrev"] = lambda: jr(tj).block_until_ready()
        first.update({k: first_call(fns[k])[0] for k in ("jax_jacfwd", "jax_jacrev")})
        check["vs_jax"] = float(np.max(np.abs(J - np.asarray(jf(tj)))))
    rows.append(_row("hand jacobian 300x26", fns, first, check, quick))

    # (b)
    params = mlp_params()
    rng = np.random.default_rng(2)
    xs = rng.normal(size=(256, 64))
    ys = np.eye(10)[rng.integers(0, 10, 256)]
    per_example = tk.vmap(tk.grad(lambda p, x, y: mlp_loss(np, p, x, y)), in_axes=(None, 0, 0))
    by_hand = tk.jit(mlp_per_example_by_hand)
    fns = {"tracekern": lambda: per_example(params, xs, ys), "tracekern_by_hand": lambda: by_hand(params, xs, ys)}
    first = {k: first_call(f)[0] for k, f in fns.items()}
    got, hand = per_example(params, xs, ys), by_hand(params, xs, ys)
    check = {"vs_hand": max(float(np.max(np.abs(a - b))) for ga, gb in zip(got, hand) for a, b in zip(ga, gb))}
    if jax is not None:
        jp = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]
        jx, jy = jnp.asarray(xs), jnp.asarray(ys)
        jper = jax.jit(jax.vmap(jax.grad(lambda p, x, y: mlp_loss(jnp, p, x, y)), in_axes=(None, 0, 0)))
        fns["jax_vmap_grad"] = lambda: jax.block_until_ready(jper(jp, jx, jy))
        first["jax_vmap_grad"] = first_call(fns["jax_vmap_grad"])[0]
        check["vs_jax"] = max(float(np.max(np.abs(a - np.asarray(b)))) for ga, gb in zip(got, jper(jp, jx, jy))
                              for a, b in zip(ga, gb))
    rows.append(_row("per-example gradients, MLP 64-128-128-10, batch 256", fns, first, check, quick))

    # (c)
    x = np.random.default_rng(3).normal(0.0, 0.5, size=100)
    hess = tk.hessian(lambda x: hess_fn(np, x))
    fns = {"tracekern": lambda: hess(x)}
    first = {"tracekern": first_call(fns["tracekern"])[0]}
    H = hess(x)
    check = {"shape": list(H.shape), "asymmetry": float(np.max(np.abs(H - H.T)))}
    if jax is not None:
        jh = jax.jit(jax.hessian(lambda x: hess_fn(jnp, x)))
        xj = jnp.asarray(x)
        fns["jax_hessian"] = lambda: jh(xj).block_until_ready()
        first["jax_hessian"] = first_call(fns["jax_hessian"])[0]
        check["vs_jax"] = float(np.max(np.abs(H - np.asarray(jh(xj)))))
    rows.append(_row("hessian of a 100-parameter function", fns, first, check, quick))
    return {"rows": rows, "notes": notes}


TARGETS = {   # tool whose time tracekern must not exceed (ratio = tool / tracekern >= this)
    "hand jacobian 300x26": [("jax_jacfwd", 1.0)],
    "per-example gradients, MLP 64-128-128-10, batch 256": [("tracekern_by_hand", 1 / 1.2), ("jax_vmap_grad", 1.0)],
    "hessian of a 100-parameter function": [("jax_hessian", 1.0)],
}


def table(result: dict) -> str:
    lines = ["| workload | tool | median ms | min-max ms | first call s | tool / tracekern | target |",
             "|---|---|---|---|---|---|---|"]
    for row in result["rows"]:
        targets = dict(TARGETS.get(row["workload"], []))
        for tool, t in row["tools"].items():
            target = ""
            if tool in targets:
                target = ("met" if t["ratio"] >= targets[tool] else "missed") + f" (>= {targets[tool]:.2f})"
            lines.append(f"| {row['workload']} | {tool} | {t['time_s'] * 1e3:.2f} | {t['time_min_s'] * 1e3:.2f}-"
                         f"{t['time_max_s'] * 1e3:.2f} | {t['first_call_s']:.2f} | {t['ratio']:.2f} | {target} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer rounds")
    ap.add_argument("--json", default=os.path.join(RESULTS, "transforms.json"))
    args = ap.parse_args(argv)
    result = run(args.quick)
    print(table(result))
    for row in result["rows"]:
        print(f"{row['workload']}: {row['check']}")
    for n in result["notes"]:
        print("note:", n)
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
