"""tracekern: trace NumPy functions into an IR, differentiate them, compile them.

Public names only; everything is defined in the rooms listed in ARCHITECTURE.md."""
from . import numpy
from .api import Staged, grad, jit, make_ir, stop_gradient, value_and_grad, vjp
from .autodiff import SplitVJP
from .backends import available_backends, default_backend
from .check import check_grad
from .errors import (
    GradientCheckError,
    IRError,
    ShapeError,
    TracekernError,
    TracerBoolError,
    TracerLeakError,
)
from .ir import Aval, Eqn, Graph, Var, verify
from .numpy import where
from .pytree import tree_flatten, tree_map, tree_unflatten

__version__ = "0.1.0"

__all__ = [
    "Aval", "Eqn", "Graph", "GradientCheckError", "IRError", "ShapeError", "SplitVJP", "Staged",
    "TracekernError", "TracerBoolError", "TracerLeakError", "Var", "available_backends",
    "check_grad", "default_backend", "grad", "jit", "make_ir", "numpy", "stop_gradient",
    "tree_flatten", "tree_map", "tree_unflatten", "value_and_grad", "verify", "vjp", "where",
]
