"""Ready-made workloads written with tracekern: real numeric functions with their annotations, used
as examples and as the subjects of `python -m bench`.

Each module has NAME, a docstring, STRATEGIES (the annotation choices it can be built with; "none"
first) and make(size, strategy) -> Workload: a scalar loss and its arguments, differentiated with
respect to the first. Sizes: "full" (the benchmark's), "quick" (each step at least about 20 ms on
2 cores, with loops small enough to compile quickly), "test" (tiny). kernels/peers has the same
workloads in JAX, TensorFlow and PyTorch."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import chain, heat, lstm, mlp, revnet, rnn, signal, softplus, spectral, transformer


@dataclass
class Workload:
    name: str
    strategy: str
    loss: Callable       # loss(*args) -> scalar
    args: tuple          # NumPy arrays / pytrees of them; the gradient is taken w.r.t. args[0]


MODULES = {m.NAME: m for m in (chain, mlp, transformer, revnet, softplus, rnn, heat, signal, spectral, lstm)}


def make(name: str, size: str = "quick", strategy: str = "none") -> Workload:
    module = MODULES[name]
    if strategy not in module.STRATEGIES:
        raise ValueError(f"workload {name!r} has strategies {module.STRATEGIES}, not {strategy!r}")
    loss, args = module.make(size, strategy)
    return Workload(name, strategy, loss, args)
