"""Render a corpus of programs on the compiled backends and write the generated source of every step (its
driver or host launcher, and every kernel module it imports) to a directory, names normalised: the guard
rail of a restructuring of the backends (the source must stay the same, or differ only in names).

    NUMBA_ENABLE_CUDASIM=1 python -m tests.kernel_corpus OUT_DIR [--only cpu|cuda|cuda-gpu]

Programs: tests/ptx_corpus.py's (every primitive, values and gradients, control flow, print, forward mode,
random numbers, integer programs), tk.numpy's coverage table (tests/numpy_cases.py) a family and dtype at
a time, random compositions in the style of tests/test_property.py (fixed seeds), the workloads of
kernels/ at "test" size with each strategy, and the control-flow programs again with compiled_loops off.
Each runs on "cpu", "cuda" (the simulator's launch sizes) and "cuda-gpu" (a GPU's launch sizes: rendered,
never run). Programs are lowered (traced, planned, rendered), never run or compiled. A program a backend
refuses is recorded with its error's first line. Not a test: run it before and after a change, then
`diff -r BEFORE AFTER`."""
from __future__ import annotations

import os
import pathlib
import random
import re
import sys
import time

import numpy as np

import tracekern as tk
from tests import ptx_corpus
from tests.test_property import BINARY, RESHAPE, SHAPES, UNARY, build
from tracekern import backends
from tracekern.backends import cpu as tkcpu
from tracekern.backends import cuda as tkcuda
from tracekern.ir import Graph

_HASH = re.compile(r"(tk_|tracekern_generated_)[0-9a-f]{32}")
_SALT = re.compile(r"\[[0-9a-f]{32}( Launch\(.*?\))?\]")


def normalised(source: str) -> str:
    """Content-hashed module names and the salt of the generated headers replaced (they follow from
    the text, and from the source of the modules the kernels call)."""
    return _SALT.sub("[SALT]", _HASH.sub(lambda m: m.group(1) + "HASH", source))


def _property_programs(n: int = 40):
    """Random compositions of tests/test_property.py's steps, drawn as its strategy does, fixed seeds."""
    for seed in range(n):
        r = random.Random(seed)
        shapes = [r.choice(SHAPES) for _ in range(r.randint(1, 3))]
        steps = []
        for _ in range(r.randint(1, 7)):
            kind = r.choice(["unary", "binary", "reshape"])
            if kind == "unary":
                steps.append(("unary", r.choice(sorted(UNARY))))
            elif kind == "binary":
                steps.append(("binary", r.choice(sorted(BINARY)), r.randint(0, 10)))
            else:
                steps.append(("reshape", r.choice(sorted(RESHAPE))))
        rng = np.random.default_rng(seed)
        yield f"property{seed}", build(steps), tuple(rng.uniform(-1.5, 1.5, s) for s in shapes), True


def _numpy_programs(cuda: bool):
    """tk.numpy's coverage table: each family's cases as one program per dtype (values), and the
    differentiable ones' vjp (as tests/ptx_corpus.py's numpy corpus, on every case the backend runs)."""
    from tests import numpy_cases

    for family, cases in numpy_cases.FAMILIES.items():
        for dtype in sorted({d for c in cases for d in c.dtypes}):
            picked = [c for c in cases if (c.cuda or not cuda) and dtype in c.dtypes]
            if not picked:
                continue
            args = {c.id: numpy_cases.case_inputs(c, dtype) for c in picked}
            grads = [c for c in picked if c.grad] if dtype in ("float32", "complex64", "float64") else []

            def program(args, picked=tuple(picked)):
                return {c.id: c.fn(*args[c.id]) for c in picked}
            yield f"numpy-{family}-{dtype}", program, ({c.id: args[c.id] for c in picked},), False
            if not grads:
                continue
            differentiated, floats = ptx_corpus.vjp_program(grads, args)
            yield f"numpy-{family}-{dtype}-vjp", differentiated, (floats,), False


def _workloads():
    import kernels

    for name, module in kernels.MODULES.items():
        for strategy in module.STRATEGIES:
            w = kernels.make(name, "test", strategy)
            yield f"workload-{name}-{strategy}", w.loss, w.args, "first"


def _ptx_programs():
    for i, (fn, args, grad) in enumerate(ptx_corpus._programs()):
        yield f"ptx{i}", fn, args, grad


def programs(cuda: bool):
    yield from _ptx_programs()
    yield from _property_programs()
    yield from _numpy_programs(cuda)
    yield from _workloads()


def _loss(fn):
    def loss(*a):
        out = fn(*a)
        return sum(np.sum(o * 0.5) for o in (out if isinstance(out, tuple) else (out,)))
    return loss


def _lower(fn, args, grad, backend: str) -> None:
    tk.jit(fn, backend=backend).lower(*args)
    if grad == "first":
        tk.jit(tk.value_and_grad(fn), backend=backend).lower(*args)
    elif grad:
        tk.jit(tk.value_and_grad(_loss(fn), argnums=tuple(range(len(args)))), backend=backend).lower(*args)


def _dump(step, backend: str) -> str:
    """A step's source and its line -> equation maps (by module position and line), normalised."""
    modules = step.modules
    digests = [tkcpu.cache.source_digest(s) for s in modules]
    lines = []
    for d, table in sorted(step._lines.items(), key=lambda kv: digests.index(kv[0]) if kv[0] in digests else -1):
        where = digests.index(d) if d in digests else "?"
        lines.append(f"# lines of module {where}: " + ", ".join(f"{n}:{e.primitive.name}" for n, e in sorted(table.items())))
    extra = ""
    if backend != "cpu":
        extra = "\n# kernels: " + repr([params for _, params in step.kernels]) + f"\n# on_device: {sorted(step._on_device)}"
    return normalised(step.source) + "\n" + "\n".join(lines) + extra + "\n"


def _has_control(graph) -> bool:
    todo = [graph]
    while todo:
        g = todo.pop()
        for e in g.eqns:
            if e.primitive.name in ("cond", "scan", "while", "scan_revolve"):
                return True
            todo += [p for p in e.params.values() if isinstance(p, Graph)]
    return False


def run(out_dir: pathlib.Path, only: str | None = None) -> dict:
    backends.cost_table()   # (measured once per salt with cpu steps of its own: not the corpus's)
    steps: list = []
    originals = tkcpu.compile_graph, tkcuda.compile_graph

    def recording(compile_graph):
        def record(graph, **options):
            step = compile_graph(graph, **options)
            steps.append(step)
            return step
        return record

    tkcpu.compile_graph, tkcuda.compile_graph = recording(originals[0]), recording(originals[1])
    sim_launch = tkcuda.launch_config
    counts = {}
    try:
        for target in ("cpu", "cuda", "cuda-gpu"):
            if only and target != only:
                continue
            backend = "cpu" if target == "cpu" else "cuda"
            tkcuda.launch_config = (lambda: ptx_corpus.GPU_LAUNCH) if target == "cuda-gpu" else sim_launch
            d = out_dir / target
            d.mkdir(parents=True, exist_ok=True)
            n = 0
            for name, fn, args, grad in programs(backend == "cuda"):
                recorded: list = []
                for loops in (True, False):
                    if not loops and not any(_has_control(s.graph) for s in recorded):
                        break
                    steps.clear()
                    try:
                        with tk.config.override(tiers=False, plan_cache=False, compiled_loops=loops):
                            _lower(fn, args, grad, backend)
                        error = ""
                    except Exception as err:   # (a primitive the backend has no kernel for)
                        error = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                    recorded = list(steps)
                    text = "".join(f"######## step {j}\n{_dump(s, backend)}" for j, s in enumerate(steps))
                    if error:
                        text += f"######## error\n{normalised(error)}\n"
                    (d / f"{n:04d}-{name}{'' if loops else '-host-loops'}.txt").write_text(text)
                    n += 1
            counts[target] = n
    finally:
        tkcpu.compile_graph, tkcuda.compile_graph = originals
        tkcuda.launch_config = sim_launch
    return counts


if __name__ == "__main__":
    if os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
        sys.exit("run with NUMBA_ENABLE_CUDASIM=1")
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    t0 = time.time()
    print(run(pathlib.Path(sys.argv[1]), only), f"{time.time() - t0:.0f} s")
