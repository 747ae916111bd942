"""The backend registry: a backend turns a Graph into a callable on arrays, compile(graph) -> run(list) -> list.

'interpret' is the NumPy oracle; 'cpu' (Numba njit) and 'cuda' (numba.cuda kernels, or Numba's CUDA
simulator under NUMBA_ENABLE_CUDASIM=1) are compiled. A backend's module is imported when it is
first used, so that importing tracekern loads neither Numba nor numba.cuda."""
from __future__ import annotations

import importlib
from collections.abc import Callable

from .. import passes

# name -> module with compile_graph(graph); each imports only ir, primitives, passes and its own room
MODULES = {"interpret": "tracekern.backends.interpret", "cpu": "tracekern.backends.cpu",
           "cuda": "tracekern.backends.cuda"}


def default_backend() -> str:
    """The backend tk.jit and the transforms use when none is named."""
    return "cpu"


def available_backends() -> list[str]:
    return sorted(MODULES)


def cost_table() -> dict:
    """The memory planner's cost figures for this machine (remat.CostModel's fields), measured once
    with the cpu backend's kernels and cached on disk (backends/calibrate.py)."""
    return importlib.import_module("tracekern.backends.calibrate").cost_table()


def get_compiler(name: str) -> Callable:
    """compile(graph) -> run(list of arrays) -> list of arrays, for backend `name`. Higher-order
    equations (annotations) are inlined first: backends see plain primitives only."""
    if name not in MODULES:
        raise ValueError(f"unknown backend {name!r}; available: {available_backends()}")
    compile_graph = importlib.import_module(MODULES[name]).compile_graph
    return lambda graph: compile_graph(passes.inline_calls(graph))
