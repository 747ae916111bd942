"""The float64-in-float32-kernel check: a generated cuda kernel compiled to PTX (no GPU needed), and
the float64 instructions found in a kernel whose arrays are all float32 or integer."""
from __future__ import annotations

import re

import numpy as np


def _kernel_signature(params: list[tuple[str, int]]):
    from numba import types
    from numba.np.numpy_support import from_dtype

    return types.void(*[types.Array(from_dtype(np.dtype(d)), nd, "C") for d, nd in params])


# libdevice's sinf/cosf/tanf reduce arguments beyond about 1e5 (Payne-Hanek) with one float64
# multiply: this sequence is allowed in float32 kernels, nothing else in float64 is.
_F64 = re.compile(r"\.f64\b|%fd\d")   # a float64 instruction or register (not %f64: float32 register 64)
_LIBDEVICE_F64 = re.compile(r"^\s*(\.reg \.f64\s|cvt\.rn\.f64\.s64\s|mul\.f64\s+%fd\d+, %fd\d+, 0d3BF921FB54442D19;|cvt\.rn\.f32\.f64\s)")


_EXPLICIT_F64 = re.compile(r"= f64\((s|acc|pt)_?\d+(_\d+)?\)\s*# convert\b")   # s_7 = f64(s_3)  # convert


def asks_for_float64(source: str) -> bool:
    """Whether a kernel's source converts a value to float64 (a `convert` equation of the program's own:
    betaln of float32 computes in float64 and rounds, as SciPy's float32 loop does): its float64
    instructions are the program's, not an accident (a constant, an accumulator, a promoting function)."""
    return bool(_EXPLICIT_F64.search(source))


def ptx_float64(py_func, params: list[tuple[str, int]], cc=(8, 0)) -> list[str]:
    """Compile one generated kernel to PTX (no GPU needed; a typing error raises) and return its
    float64 instructions if its arrays are float32 (or complex64), with integers or not (an accidental
    double: a constant, an accumulator, a math function that promotes); kernels of float64 arrays
    return [], and so do kernels of integer arrays only, whose float arithmetic is NumPy's float64 (an
    integer's np.round to negative decimals)."""
    from numba import cuda

    ptx, _ = cuda.compile_ptx(py_func, _kernel_signature(params), cc=cc)
    dtypes = {np.dtype(d) for d, _ in params}
    if dtypes & {np.dtype(np.float64), np.dtype(np.complex128)} or not dtypes & {np.dtype(np.float32), np.dtype(np.complex64)}:
        return []
    return [line.strip() for line in ptx.splitlines() if _F64.search(line) and not _LIBDEVICE_F64.match(line)]


def module_ptx_float64(module_source: str, kernels: list, cc=(8, 0)) -> list[str]:
    """ptx_float64 for every kernel of a generated module: "name: instructions" per offending kernel."""
    namespace: dict = {}
    exec(compile(module_source, "<tracekern cuda module>", "exec"), namespace)
    found = []
    for name, params in kernels:
        fn = namespace[name]
        bad = ptx_float64(getattr(fn, "py_func", fn), params, cc)
        if bad:
            found.append(f"{name}: {bad[:3]}")
    return found


def lines_of(source: str, name: str) -> list[str]:
    """The source lines of kernel `name` in a generated module (for error messages and tests)."""
    m = re.search(rf"^def {name}\(.*?(?=^\S)", source + "\n#", re.S | re.M)
    return m.group(0).splitlines() if m else []

