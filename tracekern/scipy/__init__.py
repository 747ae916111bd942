"""tk.scipy: SciPy's functions on traced arrays, under SciPy's names (as jax.scipy); the implementations
live in tracekern.numpy (special: scipy.special)."""
from . import special

__all__ = ["special"]
