"""Compile units, shared by the compiled backends: a kernel (or a segment of kernel calls) is rendered
as its own generated module with canonical source, so identical kernels have identical text and one
content hash, and each distinct one is compiled once per machine (backends/cache.py keys files by
that hash; Numba caches the machine code beside them).

Canonical means named by position, never by the IR's variable numbers: parameters p0, p1, ... in
order of first use, scalars s0, s1, ... in body order. The eight blocks of a transformer then share
their kernels, and so do two programs with a layer of the same shape."""
from __future__ import annotations

import functools
import inspect
import platform
import sys
from dataclasses import dataclass, field

import numba
import numpy as np

from . import cache


@dataclass
class Unit:
    """One generated module: its source, content digest, and what the step needs to call it."""
    source: str
    lines: dict = field(default_factory=dict)    # generated line -> equation (of the step that rendered it)
    flagged: bool = False                        # `kernel` returns a trig flag; the module has `kernel_exact`
    parallel: bool = False                       # it runs a prange loop

    @functools.cached_property
    def digest(self) -> str:
        return cache.source_digest(self.source)

    @property
    def module_name(self) -> str:
        return cache.module_name(self.digest)


@functools.cache
def salt(*modules) -> str:
    """A digest of everything a unit's meaning depends on besides its text: the versions of Python,
    NumPy and Numba, and the source of the modules the generated code calls (a change there must
    never serve stale machine code from the cache)."""
    text = "".join(inspect.getsource(m) for m in modules)
    versions = (f"{platform.python_version()} {sys.implementation.cache_tag} numpy {np.__version__} numba {numba.__version__}"
                f" {cache.LIBRARY_FORMAT}")
    return cache.source_digest(versions + "\n" + text)


# what this process compiled (not loaded from the disk cache): compile units, counted by the
# backends as they compile them (here or in a worker process) and read by benchmarks
_COMPILED = {"kernels": 0, "drivers": 0}


def count_compiled(kernels: int = 0, drivers: int = 0) -> None:
    _COMPILED["kernels"] += kernels
    _COMPILED["drivers"] += drivers


def compiled() -> dict[str, int]:
    """How many kernels and njit drivers this process has compiled so far (in it or in its compile
    workers), rather than loaded from the disk cache."""
    return dict(_COMPILED)

