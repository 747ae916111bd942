"""Render the cuda backend's kernels for a corpus of programs and compile each to PTX; prints a JSON
report. Run by tests/test_cuda.py without the simulator (NUMBA_ENABLE_CUDASIM=0): compile_ptx needs
no GPU, and unlike the simulator it types the kernels, so a kernel that would not compile fails here.

    python -m tests.ptx_corpus all       every primitive (float32 and float64, values and gradients),
                                         integer and bool programs, control flow, annotations, print,
                                         forward mode: the kernels that bring a new function call or
                                         statement form (_covering)
    python -m tests.ptx_corpus all-every the same, every distinct kernel
    python -m tests.ptx_corpus numpy     tk.numpy's coverage table (tests/numpy_cases.py) on cuda
    python -m tests.ptx_corpus numpy64   the same, and its float64 programs
    python -m tests.ptx_corpus planted   one kernel with a float64 constant in float32 (must be caught)
    python -m tests.ptx_corpus contraction  x * y + z and a scaled uniform draw: their PTX's fma and mul.rn

The corpus is lowered (rendered), never run: no GPU is needed."""
import json
import multiprocessing
import os
import re
import sys
import types

import numpy as np

import tracekern as tk
import tracekern.numpy as tnp
from tests.conftest import make_input
from tests.test_primitives import BCAST, BINARY, MATMUL, REDUCTIONS, SHAPE_OPS, UNARY
from tracekern.backends import cache, cuda_runtime, ptx_check
from tracekern.backends import cuda as tkcuda

GPU_LAUNCH = cuda_runtime.Launch(threads=256, max_blocks=132 * 8, tile=16, min_chunk=8, simulator=False)
CC = (8, 0)


def _without_a_gpu() -> None:
    """numba-cuda compiles a kernel's device functions for the current device's compute capability;
    with no GPU there is none, so name the one compile_ptx targets."""
    import numba.cuda.dispatcher as dispatcher

    dispatcher.get_current_device = lambda: types.SimpleNamespace(compute_capability=CC)


def _normalized(body: str) -> str:
    """A kernel's text with generated names numbered per kernel and numbers replaced: kernels that
    differ only in value ids, shapes or constants have the same types, so the same float64 or not."""
    names: dict[str, str] = {}
    body = re.sub(r"\b(s|acc|sh|pt)(\d+)(_\d+)?\b", lambda m: names.setdefault(m.group(0), f"{m.group(1)}_{len(names)}"), body)
    return re.sub(r"(?<![\w.])-?\d+(\.\d*)?(e[-+]?\d+)?\b", "N", body)


def _programs():
    """(function, args, with_gradient) triples: each is lowered for its value and, if asked, for its
    gradient. Everything in float32 (where float64 must not appear); in float64, the primitives'
    values (those kernels must compile too)."""
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float64):
        grad = dtype == np.float32
        for _, fn, kind in UNARY:
            yield fn, (make_input(kind, (3, 4), rng, dtype),), grad
        for _, fn, ka, kb in BINARY:
            for sa, sb in BCAST[1:3]:
                yield fn, (make_input(ka, sa, rng, dtype), make_input(kb, sb, rng, dtype)), grad
        for _, fn in REDUCTIONS:
            for axis in (None, 0, 2, (0, 2)):
                yield (lambda x, fn=fn, axis=axis: fn(x, axis, False)), (make_input("nz", (64, 3, 3000), rng, dtype),), grad
        for sa, sb in MATMUL[3:5]:
            yield (lambda a, b: a @ b), (make_input("any", sa, rng, dtype), make_input("any", sb, rng, dtype)), grad
        if dtype == np.float64:
            break
        for _, fn in REDUCTIONS:
            for axis in (None, 0, 2, (0, 2)):
                yield (lambda x, fn=fn, axis=axis: fn(x, axis, False)), (make_input("nz", (2, 3, 4), rng, dtype),), grad
        for _, fn, shape in SHAPE_OPS:
            yield fn, (make_input("any", shape, rng, dtype),), grad
        for sa, sb in MATMUL:
            yield (lambda a, b: a @ b), (make_input("any", sa, rng, dtype), make_input("any", sb, rng, dtype)), grad
        yield (lambda a, b: a.T @ b.T), (make_input("any", (5, 3), rng, dtype), make_input("any", (4, 5), rng, dtype)), grad
        for fn in (tnp.softmax, tnp.logsumexp, tnp.gelu, tnp.sigmoid, tnp.softplus):
            yield fn, (make_input("any", (3, 4), rng, dtype),), grad
        x = make_input("any", (4,), rng, dtype)
        yield (lambda x: tk.scan(lambda c, r: (np.tanh(c * r), c.sum()), x, np.stack([x, x]))[0].sum()), (x,), grad
        # a device loop (the body is only loops) with two carries, one 0-d, and 0-d and vector outputs
        def two_carries(x):
            (h, s), ys = tk.scan(lambda c, r: ((np.sin(c[0] * r), c[1] + r.sum()), (c[1], c[0] * 2)), (x, x.sum()),
                                 np.stack([x, x, x]), reverse=True)
            return np.sum(h) + s + np.sum(ys[0]) + np.sum(ys[1])
        yield two_carries, (x,), grad
        yield (lambda x: tk.fori_loop(0, 5, lambda i, c: np.sin(c) * 0.9, x, checkpoint=2).sum()), (x,), grad
        yield (lambda x: tk.while_loop(lambda c: c.sum() < 10, lambda c: c * 1.5 + 1, x, checkpoint=2).sum()), (x,), grad
        yield (lambda x: tk.cond(x.sum() > 0, lambda v: np.exp(v), lambda v: -v, x).sum()), (x,), grad
        yield (lambda x: tk.recompute(lambda v: np.tanh(np.tanh(v)))(x).sum()), (x,), grad

        def printed(v):
            tk.print("v", v.sum())
            return (v * v).sum()
        yield printed, (x,), grad
        # forward mode (tk.jvp, tk.linearize): loops over (primal, tangent) carries, a tangent scan over
        # stacked residuals, a custom_gradient's JVP by linearity, jvp of grad through a while loop
        def tangents(x, u):
            def f(v):
                h, ys = tk.scan(lambda c, r: (np.tanh(c * r + 0.5), c.sum()), v, np.stack([v, v]))
                w = tk.while_loop(lambda c: c.sum() < 10, lambda c: c * 1.5 + np.sin(c), h)
                return tk.cond(w.sum() > 0, lambda a: np.exp(a * 0.1), lambda a: -a, w), ys
            out, t = tk.jvp(f, (x,), (u,))
            _, f_jvp = tk.linearize(f, x)
            return out, t, f_jvp(u), tk.jvp(tk.grad(lambda v: f(v)[0].sum()), (x,), (u,))[1]
        yield tangents, (x, x * 0.5), False
        yield (lambda x, u: tk.jvp(_softplus_with_a_custom_gradient, (x,), (u,))), (x, x * 0.5), False
        # float64 the program asks for: betaln of float32 computes in float64 and rounds, as SciPy's float32 loop
        # (SciPy 1.18 found it: its ufuncs take betaln(x, 3) of float32 as float32; 1.17's as float64)
        yield (lambda x: tk.scipy.special.betaln(x, np.float32(3)) * 2), (np.abs(x) + 0.5,), grad
        # random numbers: Threefry on int64 words, mantissas converted to float32 (no float64 anywhere)
        yield (lambda x: x * tk.random.uniform(tk.random.key(3), (4,)) + tk.random.normal(tk.random.fold_in(
            tk.random.key(1), 2), (4,)) * np.where(tk.random.bernoulli(tk.random.key(2), 0.5, (4,)), x, 0)), (x,), grad
    for dtype in (np.int32, np.int64):
        a = rng.integers(-5, 5, (4, 6)).astype(dtype)
        b = rng.integers(-5, 5, (6, 3)).astype(dtype)
        yield (lambda a, b: (a @ b, np.abs(a) ** 2, a.sum(axis=1), a.max(axis=0), np.sign(a), (a > 0) @ (b > 0),
                             np.prod(a, axis=0), np.mean(a), a.astype(np.float32) * 0.5)), (a, b), False


@tk.custom_gradient
def _softplus_with_a_custom_gradient(x):
    def grad_fn(dy):
        return dy * tnp.sigmoid(x)
    return np.log1p(np.exp(x)), grad_fn


def vjp_program(grads: list, args: dict):
    """One program of the table's differentiable cases (numpy_cases): tk.vjp of the sum of each case's
    float outputs (halved) at its float inputs, with a cotangent of ones; and those inputs by case id."""
    floats = {c.id: tuple(a for s, a in zip(c.inputs, args[c.id]) if s.kind not in ("int", "bool", "given"))
              for c in grads}

    def differentiated(xs):
        def f(xs):
            out = {}
            for c in grads:
                it = iter(xs[c.id])
                full = [a if s.kind in ("int", "bool", "given") else next(it) for s, a in zip(c.inputs, args[c.id])]
                leaves = [leaf for leaf in tk.tree_flatten(c.fn(*full))[0] if leaf.dtype.kind in "fc"]
                out[c.id] = sum(np.sum(np.real(leaf) * 0.5) for leaf in leaves)
            return out
        out, pullback = tk.vjp(f, xs)
        return out, pullback({k: np.ones_like(v) for k, v in out.items()})[0]
    return differentiated, floats


def _numpy_programs(with_float64: bool = False):
    """tk.numpy's coverage table (tests/numpy_cases.py): each family's cuda cases as one program, in
    float32 (the non-differentiable cases' values; the others' value and gradient, tk.vjp: forward
    and backward in one step) and in the integer and bool dtypes. float64 kernels are the same
    text with other types; `python -m tests.ptx_corpus numpy64` adds them (about 1600 kernels
    in all, 0 problems when last run, 5 min of CPU). Rendered by _lower_all with .compile(): the
    second-order kernels .lower() added (tk.vjp of a vjp program) were 435 of 1164, and no program runs them."""
    from tests import numpy_cases

    for cases in numpy_cases.FAMILIES.values():
        for dtype in sorted({d for c in cases for d in c.dtypes}):
            if dtype == "float64" and not with_float64:
                continue
            picked = [c for c in cases if c.cuda and dtype in c.dtypes]
            args = {c.id: numpy_cases.case_inputs(c, dtype) for c in picked}
            grads = [c for c in picked if c.grad] if dtype in ("float32", "complex64") else []
            values = {c.id: args[c.id] for c in picked if c not in grads}

            def program(args, picked=tuple(c for c in picked if c not in grads)):
                return {c.id: c.fn(*args[c.id]) for c in picked}
            if values:
                yield program, (values,), False
            if not grads:
                continue
            differentiated, floats = vjp_program(grads, args)
            yield differentiated, (floats,), False


def _lower_all(corpus: str = "all") -> list:
    steps = []
    compile_graph = tkcuda.compile_graph

    def recording(graph):
        step = compile_graph(graph)
        steps.append(step)
        return step

    tkcuda.launch_config = lambda: GPU_LAUNCH    # render as for a GPU (none is needed to render)
    tkcuda.compile_graph = recording
    table = corpus.startswith("numpy")
    programs = _numpy_programs(corpus == "numpy64") if table else _programs()
    for fn, args, grad in programs:
        # .compile() traces, plans and renders the program's step (on cuda it loads no kernel: no GPU needed).
        # .lower() also renders tk.vjp's two halves of it, for its memory report: kept where no gradient
        # program follows (float64 values, integers: the only gradient kernels of those). Elsewhere that
        # was 2/3 of the time and no new typing question (in float32: value_and_grad's step asks them all;
        # of the table's vjp programs: second-order kernels no program runs).
        jitted = tk.jit(fn, backend="cuda")
        jitted.compile(*args) if grad or table else jitted.lower(*args)
        if grad:
            def loss(*a, fn=fn):
                out = fn(*a)
                return sum(np.sum(o * 0.5) for o in (out if isinstance(out, tuple) else (out,)))
            tk.jit(tk.value_and_grad(loss, argnums=tuple(range(len(args)))), backend="cuda").compile(*args)
    return steps


_JOBS: list = []


def _check(i: int) -> str:
    body, py_func, params, name = _JOBS[i]
    try:
        bad = ptx_check.ptx_float64(py_func, list(params), CC)
    except Exception as err:   # a typing error the simulator cannot see
        return f"does not compile: {type(err).__name__}: {str(err)[:400]}\n{body}"
    if bad and ptx_check.asks_for_float64(body):
        # (the program's own float64: betaln of float32 in float64, rounded, as SciPy's float32 loop. The whole
        # kernel is passed, so which kernels are is reported: the tests accept betaln's only)
        return "exempt: " + " ".join(sorted(set(re.findall(r"\b\w+_f64(?=\()", body))))
    return f"float64 in a float32 kernel: {bad[:3]}\n{body}" if bad else ""


def _covering(jobs: list, statements: bool = False) -> list:
    """The kernels that each call a function (a device function, a cuda.* intrinsic, a cast) or read
    a parameter type that no kernel before them did with the same parameter dtypes: every typing
    question the corpus asks: 89 of its 851 kernels when written (the rest differ in index arithmetic
    and statement order only). statements=True: also every statement form (a line with its names as
    V and its numbers as N: `V = V * N`) that no kernel before did with the same parameter dtypes, so
    that each way a literal or an operator meets the kernel's dtypes, where a float64 could slip into a
    float32 kernel, is compiled once: 214 of the "all" corpus's 603 kernels when written."""
    covered: set = set()
    kept = []
    for job in jobs:
        body, _, params, _ = job
        dtypes = tuple(sorted({str(d) for d, _ in params}))
        features = {(f, dtypes) for f in re.findall(r"([A-Za-z_][\w.]*)\s*\(", body)}
        features |= {(f"param {d} {n}", dtypes) for d, n in params}
        if statements:
            features |= {(re.sub(r"\b[a-z_]+_?\d*\b(?!\s*\()", "V", line.strip()), dtypes) for line in body.splitlines()}
        if features - covered:
            if not ptx_check.asks_for_float64(body):   # (a kernel with float64 of its own covers nothing for others)
                covered |= features
            kept.append(job)
    return kept


def _contraction() -> dict:
    """The PTX of x * y + z (float32, float64) and of uniform draws in [minval, maxval): how many fma
    and mul.rn instructions each kernel has (NumPy rounds the product first: no fma may appear)."""
    from numba import cuda

    tkcuda.launch_config = lambda: GPU_LAUNCH
    report = {}
    for dtype in (np.float32, np.float64):
        x = np.linspace(0.0, 1.0, 8).astype(dtype)
        programs = {"fmadd": (lambda x, y, z: x * y + z, (x, x, x)),
                    "uniform": (lambda k, lo: tk.random.uniform(k, (8,), dtype, minval=lo, maxval=np.arange(8.0)),
                                (tk.random.key(0), x - 2))}
        for name, (fn, args) in programs.items():
            steps = []
            compile_graph = tkcuda.compile_graph
            tkcuda.compile_graph = lambda graph: steps.append(compile_graph(graph)) or steps[-1]
            try:
                tk.jit(fn, backend="cuda").lower(*args)
            finally:
                tkcuda.compile_graph = compile_graph
            for source, params in [kp for step in steps for kp in step.kernels]:
                py_func = cache.load_module(source).kernel.py_func
                ptx, _ = cuda.compile_ptx(py_func, ptx_check._kernel_signature(params), cc=CC)
                got = report.setdefault(f"{name} {np.dtype(dtype).name}", {"fma": 0, "mul.rn": 0})
                got["fma"] += len(re.findall(r"\bfma\.rn\.f(32|64)", ptx))
                got["mul.rn"] += len(re.findall(r"\bmul\.rn\.f(32|64)", ptx))
    return report


def main(which: str) -> dict:
    if which == "contraction":
        _without_a_gpu()
        return _contraction()
    if which == "planted":
        source = ("from numba import cuda\n"
                  "def k0(p0, p1):\n"
                  "    for f in range(cuda.grid(1), 8, cuda.gridsize(1)):\n"
                  "        p1[f] = p0[f] * 0.1\n")
        _without_a_gpu()
        return {"kernels": 1, "float32_kernels": 1,
                "problems": ptx_check.module_ptx_float64(source, [("k0", [("float32", 1), ("float32", 1)])])}
    _without_a_gpu()
    seen: dict = {}
    for step in _lower_all(which):
        for source, params in step.kernels:
            body = _normalized(source.split("\n", 1)[1])   # (the whole module: a device loop's phases too)
            key = (body, tuple(params))
            if key not in seen:
                seen[key] = (cache.load_module(source).kernel.py_func, params, "kernel")
    global _JOBS
    _JOBS = [(body, *seen[(body, params)]) for body, params in seen]
    distinct = len(_JOBS)
    if which in ("numpy", "all"):   # (CI: the kernels that bring something new, see _covering; all-every: all of them)
        _JOBS = _covering(_JOBS, statements=which == "all")
    workers = max(1, min(4, os.cpu_count() or 1))
    with multiprocessing.get_context("fork").Pool(workers) as pool:   # (compiling is CPU-bound)
        found = [p for p in pool.map(_check, range(len(_JOBS)), chunksize=8) if p]
    problems = [p for p in found if not p.startswith("exempt: ")]
    exempt = [p[len("exempt: "):] for p in found if p.startswith("exempt: ")]
    float32 = sum(not any(d in ("float64", "complex128") for d, _ in params) for _, _, params, _ in _JOBS)
    return {"distinct": distinct, "kernels": len(_JOBS), "float32_kernels": float32, "problems": problems,
            "exempt": exempt}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
