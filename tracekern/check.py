"""tk.check_grad: reverse-mode gradients against central finite differences.

Non-scalar outputs are projected on a fixed random direction; order=2 checks the gradient of a
random projection of the gradient (Hessian-vector products), and so on."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .api import grad
from .errors import GradientCheckError
from .ir import is_complex, is_inexact, real_dtype
from .pytree import tree_flatten, tree_unflatten

_DEFAULTS = {np.dtype("float64"): (1e-6, 1e-5), np.dtype("float32"): (1e-2, 3e-2)}


def _scalarize(f: Callable, args: tuple, rng) -> Callable:
    out = np.asarray(f(*args))
    if out.shape == () and not is_complex(out.dtype):
        return f
    direction = rng.standard_normal(out.shape).astype(out.dtype)
    if is_complex(out.dtype):   # (a real loss of a complex output: Re(sum(out * direction)))
        return lambda *a: np.real((f(*a) * direction).sum())
    return lambda *a: (f(*a) * direction).sum()


def check_grad(f: Callable, args: Sequence[Any] | Any, *, order: int = 1, eps: float | None = None,
               rtol: float | None = None, atol: float | None = None, argnums: Sequence[int] | None = None,
               seed: int = 0) -> None:
    """Raise GradientCheckError naming the worst entry if tk.grad of f disagrees with central
    finite differences at args; return None when they agree.

    args: a tuple of positional arguments (a single array is taken as one argument). argnums:
    which arguments to check (default: every argument with a float or complex leaf). eps, rtol and atol
    default by dtype (float64: eps 1e-6, rtol 1e-5; float32: eps 1e-2, rtol 3e-2). A complex argument is
    differenced along its real and imaginary parts: its gradient is dL/dx + i dL/dy (tracekern's
    convention), and so is what it is compared with."""
    args = tuple(args) if isinstance(args, (tuple, list)) else (args,)
    if argnums is None:
        argnums = tuple(i for i, a in enumerate(args) if any(is_inexact(np.asarray(x).dtype) for x in tree_flatten(a)[0]))
    argnums = tuple(argnums)
    if not argnums:
        raise ValueError("check_grad: no float arguments to check")
    rng = np.random.default_rng(seed)
    fs = _scalarize(f, args, rng)
    if order > 1:
        g = grad(fs, argnums=argnums)
        directions = [[rng.standard_normal(np.shape(x)) for x in tree_flatten(args[i])[0]] for i in argnums]

        def projected(*a):
            total = 0.0
            for gi, di in zip(g(*a), directions):
                for leaf, d in zip(tree_flatten(gi)[0], di):
                    total = total + (leaf * d.astype(leaf.dtype)).sum()
            return total

        return check_grad(projected, args, order=order - 1, eps=eps, rtol=rtol, atol=atol, argnums=argnums, seed=seed + 1)

    analytic = grad(fs, argnums=argnums)(*args)
    worst = None
    for gi, i in zip(analytic, argnums):
        leaves, td = tree_flatten(args[i])
        g_leaves = tree_flatten(gi)[0]
        for k, (x, gk) in enumerate(zip(leaves, g_leaves)):
            x = np.asarray(x)
            if not is_inexact(x.dtype):
                continue
            d_eps, d_rtol = _DEFAULTS[real_dtype(x.dtype)]
            e = eps if eps is not None else d_eps
            r = rtol if rtol is not None else d_rtol
            numeric = np.zeros(x.shape, np.complex128 if is_complex(x.dtype) else np.float64)
            flat = x.reshape(-1)
            for idx in range(flat.size):
                for unit in ((1, 1j) if is_complex(x.dtype) else (1,)):
                    vals = []
                    for sign in (1, -1):
                        xp = flat.copy()
                        xp[idx] = xp[idx] + sign * e * unit
                        new_leaves = list(leaves)
                        new_leaves[k] = xp.reshape(x.shape)
                        new_args = list(args)
                        new_args[i] = tree_unflatten(td, new_leaves)
                        vals.append(float(np.asarray(fs(*new_args), np.float64)))
                    numeric.reshape(-1)[idx] += unit * (vals[0] - vals[1]) / (2 * e)
            a = np.asarray(gk, numeric.dtype)
            scale = max(1.0, float(np.max(np.abs(numeric))) if numeric.size else 1.0)
            tol = (atol if atol is not None else r * scale) + r * np.abs(numeric)
            excess = np.abs(a - numeric) - tol
            if excess.size and (not np.all(np.isfinite(a)) or np.max(excess) > 0):
                j = int(np.argmax(np.where(np.isfinite(a), excess, np.inf)))
                cand = (float(excess.reshape(-1)[j]), i, k, np.unravel_index(j, x.shape),
                        a.reshape(-1)[j], numeric.reshape(-1)[j])
                if worst is None or cand[0] > worst[0]:
                    worst = cand
    if worst is not None:
        _, i, k, pos, a, n = worst
        raise GradientCheckError(
            f"check_grad: reverse mode and finite differences disagree for argument {i} (leaf {k}) at index "
            f"{tuple(int(p) for p in pos)}: reverse mode {a!r}, finite differences {n!r} "
            f"(abs error {abs(a - n):.3g})")
