"""The backend registry: a backend turns a Graph into a callable on arrays, compile(graph) -> run(list) -> list.

'interpret' is the NumPy oracle; 'cpu' (Numba njit) and 'cuda' (numba.cuda kernels, or Numba's CUDA
simulator under NUMBA_ENABLE_CUDASIM=1) are compiled. A backend's module is imported when it is
first used, so that importing tracekern loads neither Numba nor numba.cuda."""
from __future__ import annotations

import importlib
from collections.abc import Callable

from .. import passes
from ..settings import config

# name -> module with compile_graph(graph); each imports only ir, primitives, passes and its own room
MODULES = {"interpret": "tracekern.backends.interpret", "cpu": "tracekern.backends.cpu",
           "cuda": "tracekern.backends.cuda"}


def on_device(name: str) -> bool:
    """Whether backend `name` keeps its arrays on a device (a GPU): it takes device arrays as they
    are, and its results stay there. Its Target says (render.Target.on_device: the module's TARGET,
    imported here if it was not yet); a backend without one (interpret), or an unknown name (which
    get_compiler refuses), keeps its arrays on the host."""
    if name not in MODULES:
        return False
    target = getattr(importlib.import_module(MODULES[name]), "TARGET", None)
    return bool(target is not None and target.on_device)


def default_backend() -> str:
    """The backend tk.jit and the transforms use when none is named."""
    return "cpu"


def available_backends() -> list[str]:
    return sorted(MODULES)


def cost_table() -> dict:
    """The memory planner's cost figures for this machine (remat.CostModel's fields), measured once
    with the cpu backend's kernels and cached on disk (backends/calibrate.py)."""
    return importlib.import_module("tracekern.backends.calibrate").cost_table()


# options a backend takes (tk.jit's keywords that name a backend's choice), with who takes them
OPTIONS = {"matmul_precision": ("cuda",)}


def check_options(name: str, options: dict) -> dict:
    """The options given for backend `name` (None values dropped), or a ValueError naming those it
    does not take."""
    options = {k: v for k, v in options.items() if v is not None}
    for key in options:
        if name not in OPTIONS.get(key, ()):
            raise ValueError(f"{key}= applies to backend {' or '.join(repr(b) for b in OPTIONS.get(key, ()))}, not "
                             f"{name!r} (on the CPU, BLAS has no reduced-precision mode: float32 is float32)")
    return options


def get_compiler(name: str, *, tiers: bool | None = None, **options) -> Callable:
    """compile(graph) -> run(list of arrays) -> list of arrays, for backend `name` with its options
    (check_options). Higher-order equations (annotations) are inlined first: backends see plain
    primitives only. tiers (None: tk.config.tiers, read when a graph is compiled): a backend with a
    compile_tiered (cpu) runs a new step on NumPy while it compiles (backends/tiers.py); the others
    ignore it."""
    if name not in MODULES:
        raise ValueError(f"unknown backend {name!r}; available: {available_backends()}")
    options = check_options(name, options)
    module = importlib.import_module(MODULES[name])
    compile_graph, compile_tiered = module.compile_graph, getattr(module, "compile_tiered", None)

    def compile_(graph):
        inlined = passes.inline_calls(graph)
        if compile_tiered is not None and (config.tiers if tiers is None else tiers):
            return compile_tiered(inlined, **options)
        return compile_graph(inlined, **options)

    return compile_


def save_plan(key: str, data: bytes, what: str | None = None) -> None:
    """Save a finished step's pickle under its plan key, in the disk cache (backends/cache.py); `what`:
    other bytes kept there (the warning, should the write fail, names them)."""
    importlib.import_module("tracekern.backends.cache").save_plan(key, data, what)


def load_plan(key: str) -> bytes | None:
    return importlib.import_module("tracekern.backends.cache").load_plan(key)


def compiled_on_disk(run) -> bool:
    """Whether a step loaded from the plan cache runs only compiled code the disk cache holds (a
    step that would compile on its first call is planned and tiered again instead)."""
    check = getattr(run, "compiled_on_disk", None)
    return bool(check and check())


def plans_cached(name: str) -> bool:
    """Whether backend `name`'s steps go to the plan cache (their compiled code is on disk: cpu)."""
    return name in MODULES and getattr(importlib.import_module(MODULES[name]), "PLAN_CACHE", False)
