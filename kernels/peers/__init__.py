"""The workloads of kernels/ written in the systems people use today: JAX, TensorFlow and PyTorch,
each with its own way to express the same strategy (jax.checkpoint and jax.custom_vjp,
tf.recompute_grad and tf.custom_gradient, torch.utils.checkpoint and torch.autograd.Function).

kernels/ stays importable without any of them: a tool's module is imported only by make(). Each
version runs value_and_grad of the workload on the same inputs as tracekern's (kernels.make(name,
size, "none").args), differentiated with respect to the first argument, as that tool's users write
it. A strategy a tool cannot express raises Unsupported, whose message is the result to report."""
from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# tool -> (module to import, the name people know, how to add it)
TOOLS = {
    "jax": ("jax", "JAX", 'pip install -e ".[bench]"'),
    "tensorflow": ("tensorflow", "TensorFlow", 'pip install -e ".[tensorflow]"'),
    "torch": ("torch", "PyTorch", "pip install torch (a CPU-only wheel: add --index-url https://download.pytorch.org/whl/cpu)"),
}


class Unsupported(Exception):
    """The tool cannot run this workload with this strategy; the message says why (it is a result)."""


@dataclass
class PeerStep:
    tool: str
    name: str
    strategy: str
    how: str                                  # what the tool runs for the strategy, in its own words
    run: Callable[[], Any]                    # one value_and_grad step, finished when it returns
    to_numpy: Callable[[Any], tuple]          # run()'s result -> (value: float, [gradient leaves])


def available(tool: str) -> bool:
    return importlib.util.find_spec(TOOLS[tool][0]) is not None


def make(tool: str, name: str, size: str, strategy: str, args: tuple | None = None, **options) -> PeerStep:
    """`tool`'s version of workload `name` at `size` with `strategy` (Unsupported if it has none),
    on `args` if given (NumPy inputs of other sizes) instead of the size's inputs. options, PyTorch
    only: compiled=True runs the loss under torch.compile, device="cuda" puts the inputs there (JAX
    uses its default device)."""
    import kernels

    if options and tool != "torch":
        raise TypeError(f"options {sorted(options)} are for torch only")
    versions = importlib.import_module(f"kernels.peers.{tool}_versions")
    if strategy not in kernels.MODULES[name].STRATEGIES:
        raise ValueError(f"workload {name!r} has strategies {kernels.MODULES[name].STRATEGIES}, not {strategy!r}")
    build = versions.VERSIONS.get(name)
    if build is None:
        raise Unsupported(f"no {TOOLS[tool][1]} version of {name}")
    args = kernels.make(name, size, "none").args if args is None else args
    how, run, to_numpy = build(args, strategy, size, **options)
    return PeerStep(tool, name, strategy, how, run, to_numpy)
