"""tracekern: trace NumPy functions into an IR, differentiate them, compile them.

Public names only; everything is defined in the rooms the README's design notes list."""
import os as _os

# Numba's OpenMP worker threads spin-wait after each parallel loop and starve BLAS's threads, which
# made a matmul-heavy step (bench W2) 2x slower. Sleeping workers cost nothing measurable in the
# elementwise benchmark. Set before Numba loads its threading layer; a user's own setting wins.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from . import numpy, random, scipy
from .annotations import checkpoint, custom_gradient, grad_pass_through, recompute, recompute_grad, reversible
from .annotations import print_ as print  # noqa: A004 (tk.print, SPEC section 6)
from .api import grad, jit, jvp, linearize, make_ir, stop_gradient, value_and_grad, vjp
from .backends import available_backends, default_backend
from .check import check_grad
from .control import cond, fori_loop, scan, while_loop
from .errors import (
    CacheWarning,
    GradientCheckError,
    IRError,
    MemoryBudgetError,
    ShapeError,
    TracekernError,
    TracerBoolError,
    TracerLeakError,
)
from .ir import Aval, Eqn, Graph, Var, verify
from .jacobians import hessian, jacfwd, jacrev
from .numpy import at, where
from .pytree import tree_flatten, tree_map, tree_unflatten
from .remat import SplitVJP
from .settings import config
from .staging import Staged
from .trace import Variable
from .vectorize import vmap

__version__ = "0.1.0"

__all__ = [
    "Aval", "CacheWarning", "at", "Eqn", "Graph", "GradientCheckError", "IRError", "MemoryBudgetError",
    "ShapeError", "SplitVJP", "Staged", "TracekernError", "TracerBoolError", "TracerLeakError", "Var", "Variable",
    "available_backends", "check_grad", "checkpoint", "cond", "config", "custom_gradient", "default_backend",
    "fori_loop", "grad", "grad_pass_through", "jit", "jvp", "linearize", "make_ir", "numpy", "print", "random",
    "recompute", "scipy", "recompute_grad", "reversible", "scan", "stop_gradient", "tree_flatten", "tree_map",
    "tree_unflatten", "value_and_grad", "verify", "vjp", "where", "while_loop", "vmap", "jacfwd", "jacrev",
    "hessian",
]
