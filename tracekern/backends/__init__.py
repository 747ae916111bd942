"""Backends turn a Graph into a callable on NumPy arrays: compile(graph) -> run(list) -> list.

'interpret' is the NumPy oracle; 'cpu' (Numba njit) and 'cuda' (numba.cuda kernels, or Numba's CUDA
simulator under NUMBA_ENABLE_CUDASIM=1) are compiled."""
from __future__ import annotations

import importlib
from collections.abc import Callable

from .. import passes

_AVAILABLE = {"interpret": "tracekern.backends.interpret", "cpu": "tracekern.backends.cpu",
              "cuda": "tracekern.backends.cuda"}
_PLANNED: dict[str, str] = {}


def default_backend() -> str:
    """The backend tk.jit uses when none is named: 'cpu' once it exists, else 'interpret'."""
    return "cpu" if "cpu" in _AVAILABLE else "interpret"


def available_backends() -> list[str]:
    return sorted(_AVAILABLE)


def get_compiler(name: str) -> Callable:
    """compile(graph) -> run(list of arrays) -> list of arrays, for backend `name`. Higher-order
    equations (annotations) are inlined first: backends see plain primitives only."""
    if name in _AVAILABLE:
        compile_graph = importlib.import_module(_AVAILABLE[name]).compile_graph
        return lambda graph: compile_graph(passes.inline_calls(graph))
    if name in _PLANNED:
        raise ValueError(f"backend {name!r} is not available in this version of tracekern: "
                         f"{_PLANNED[name]} has not landed yet. Available: {available_backends()}")
    raise ValueError(f"unknown backend {name!r}; available: {available_backends()}")
