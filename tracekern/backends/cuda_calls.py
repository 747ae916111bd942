"""Whole-array kernels of the cuda backend, registered per primitive (KERNELS): running scans, sort,
argsort, searchsorted and scatter. cuda.py's renderer calls KERNELS[name](renderer, call_kernel,
operand names) for such an equation; each renders its kernels through the renderer (its Kernel
class, launch_kernel, alloc) and launches them in order on the step's stream.

Everything is deterministic, the same bits on every run: a scan and a scatter run serially along
their axis, one thread per position of the other axes; sort ranks each element against its row
(O(n^2) work per row, all in parallel: meant for the rows of moderate length that traced programs
sort, not for sorting millions of keys). np.linalg has no CUDA kernels: it raises here, naming the
function and the backends that run it."""
from __future__ import annotations

import numpy as np

from ..errors import TracekernError
from . import cuda_math, cufft
from .render import kernel_registry, subscript

KERNELS, kernel = kernel_registry()


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _per_row(r, kn, dims: list[int], names: list[str]) -> int:
    """A grid-stride loop over the positions of `dims` (one thread each), unflattened into `names`;
    returns the number of positions."""
    m = _size(dims)
    kn.emit(1, f"for f in range(cuda.grid(1), {m}, cuda.gridsize(1)):")
    r.unflatten(kn, "f", dims, names, 2)
    return m


def _launch(r, kn, comment: str, work: int, eqn) -> None:
    threads = max(1, min(r.launch.threads, work))
    r.launch_kernel(kn, comment, r.blocks(work, threads), threads, eqn=eqn)


@kernel("cumsum", "cumprod", "cummax", "cummin")
def _cumulative(r, k, ops) -> None:
    e = k.eqn
    x_var, out = e.inputs[0], e.outputs[0]
    r.alloc(out)
    axis, reverse = e.params["axis"], e.params["reverse"]
    shape = x_var.shape
    n = shape[axis]
    others = [d for d in range(len(shape)) if d != axis]
    if _size(shape) == 0:
        return
    kn = r.Kernel()
    x, y = kn.param(ops[0], x_var), kn.param(r.names[out], out)
    names = [f"q{d}" for d in others]
    m = _per_row(r, kn, [shape[d] for d in others], names)
    idx = lambda j: names[:axis] + [j] + names[axis:]   # noqa: E731
    first = str(n - 1) if reverse else "0"
    kn.emit(2, f"acc = {subscript(x, idx(first))}")
    kn.emit(2, f"{subscript(y, idx(first))} = acc")
    # The trip count is read from the array, not written as a literal: on an H100 (CUDA 13, numba-cuda
    # 0.30) a constant-trip loop carrying a complex product lost its last store (cumprod along a
    # 3-row axis ended in zeros); a run-time bound compiles correctly.
    kn.emit(2, f"for j in range(1, {x}.shape[{axis}]):")
    kn.emit(3, f"jj = {f'{n - 1} - j' if reverse else 'j'}")
    combine = e.primitive.combine.format(acc="acc", x=subscript(x, idx("jj")), **cuda_math.functions(x_var.dtype))
    kn.emit(3, f"acc = {combine}", eqn=e)
    kn.emit(3, f"{subscript(y, idx('jj'))} = acc")
    _launch(r, kn, f"{e.primitive.name} along axis {axis} -> {out.aval}", m, e)


# NumPy's order: NaN after everything (and equal to NaN)
_LESS = "(({a} < {b}) or ({b} != {b} and {a} == {a}))"
_SAME = "(({a} == {b}) or ({a} != {a} and {b} != {b}))"


@kernel("sort", "argsort")
def _sort(r, k, ops) -> None:
    """Each element's rank in its row (the elements before it in NumPy's order, and the equal ones
    before it in the row: a stable sort) is where it goes."""
    e = k.eqn
    x_var, out = e.inputs[0], e.outputs[0]
    r.alloc(out)
    shape = x_var.shape
    size = _size(shape)
    if size == 0:
        return
    n = shape[-1]
    kn = r.Kernel()
    x, y = kn.param(ops[0], x_var), kn.param(r.names[out], out)
    names = [f"q{d}" for d in range(len(shape))]
    _per_row(r, kn, list(shape), names)
    row = names[:-1]
    kn.emit(2, f"v = {subscript(x, names)}")
    kn.emit(2, "rank = 0")
    kn.emit(2, f"for j in range({n}):")
    kn.emit(3, f"w = {subscript(x, row + ['j'])}")
    before = _LESS.format(a="w", b="v")
    tie = _SAME.format(a="w", b="v")
    kn.emit(3, f"if {before} or ({tie} and j < {names[-1]}):")
    kn.emit(4, "rank += 1")
    value = "v" if e.primitive.name == "sort" else names[-1]
    kn.emit(2, f"{subscript(y, row + ['rank'])} = {value}", eqn=e)
    _launch(r, kn, f"{e.primitive.name} rows of {n} -> {out.aval}", size, e)


@kernel("searchsorted")
def _searchsorted(r, k, ops) -> None:
    """A binary search per element: the first position whose value is not before it (side "left")
    or is after it (side "right"), in NumPy's order."""
    e = k.eqn
    a_var, v_var = e.inputs
    out = e.outputs[0]
    r.alloc(out)
    size = _size(v_var.shape)
    if size == 0:
        return
    kn = r.Kernel()
    a, v, y = kn.param(ops[0], a_var), kn.param(ops[1], v_var), kn.param(r.names[out], out)
    names = [f"q{d}" for d in range(len(v_var.shape))]
    _per_row(r, kn, list(v_var.shape), names)
    kn.emit(2, f"key = {subscript(v, names)}")
    kn.emit(2, "lo = 0")
    kn.emit(2, f"hi = {a_var.shape[0]}")
    kn.emit(2, "while lo < hi:")
    kn.emit(3, "mid = (lo + hi) // 2")
    kn.emit(3, f"w = {a}[mid]")
    go_right = (_LESS.format(a="w", b="key") if e.params["side"] == "left"
                else f"not {_LESS.format(a='key', b='w')}")
    kn.emit(3, f"if {go_right}:")
    kn.emit(4, "lo = mid + 1")
    kn.emit(3, "else:")
    kn.emit(4, "hi = mid")
    kn.emit(2, f"{subscript(y, names)} = lo", eqn=e)
    _launch(r, kn, f"searchsorted -> {out.aval}", size, e)


@kernel("scatter")
def _scatter(r, k, ops) -> None:
    """A copy of the base, then one thread per position off the axis combining its updates in order."""
    e = k.eqn
    base_var, idx_var, upd_var = e.inputs
    out = e.outputs[0]
    r.alloc(out)
    axis, mode = e.params["axis"], e.params["mode"]
    r.copy_into(out, base_var, ops[0], lambda idx: idx, e)
    shape = idx_var.shape
    if _size(shape) == 0:
        return
    kn = r.Kernel()
    idx, upd, y = kn.param(ops[1], idx_var), kn.param(ops[2], upd_var), kn.param(r.names[out], out)
    others = [d for d in range(len(shape)) if d != axis]
    names = [f"q{d}" for d in others]
    m = _per_row(r, kn, [shape[d] for d in others], names)
    at = lambda j: names[:axis] + [j] + names[axis:]   # noqa: E731
    kn.emit(2, f"for j in range({shape[axis]}):")
    kn.emit(3, f"t = take_index({subscript(idx, at('j'))}, {base_var.shape[axis]})")
    cell, u = subscript(y, at("t")), subscript(upd, at("j"))
    fns = cuda_math.functions(base_var.dtype)
    value = {"set": u, "add": f"{cell} + {u}", "mul": f"{cell} * {u}",
             "min": f"{fns.get('minimum')}({cell}, {u})", "max": f"{fns.get('maximum')}({cell}, {u})"}[mode]
    kn.emit(3, f"{cell} = {value}", eqn=e)
    _launch(r, kn, f"scatter ({mode}) along axis {axis} -> {out.aval}", m, e)


@kernel("fft")
def _fft(r, k, ops) -> None:
    """On cuFFT (backends/cufft.py): a host call on the step's stream. Where nvmath-python is missing
    (and always on the simulator, but for a test's stand-in) this raises, naming what runs it."""
    e = k.eqn
    out = e.outputs[0]
    if cufft.library(cuda_math.SIMULATOR) is None:
        why = " (Numba's CUDA simulator cannot run it)" if cuda_math.SIMULATOR else ""
        raise TracekernError(cufft.UNAVAILABLE.format(why=why) + f"\n  (from {e.source})")
    r.alloc(out)
    p = e.params
    r.emit(1, f"R.fft({ops[0]}, {r.names[out]}, {p['kind']!r}, {p['inverse']}, {p['ndim']})  # fft ({p['kind']}) -> "
              f"{out.aval} on cuFFT", eqn=e)


LINALG = {"solve": "np.linalg.solve", "inv": "np.linalg.inv", "slogdet": "np.linalg.slogdet / det",
          "cholesky": "np.linalg.cholesky", "qr": "np.linalg.qr", "eigh": "np.linalg.eigh / eigvalsh",
          "svd": "np.linalg.svd / norm(ord=2, 'nuc') / pinv", "eig": "np.linalg.eig / eigvals"}


@kernel(*LINALG)
def _no_linalg(r, k, ops) -> None:
    e = k.eqn
    raise TracekernError(
        f"{LINALG[e.primitive.name]} (the primitive {e.primitive.name}) has no kernel on the cuda backend; it runs "
        f"on the 'cpu' and 'interpret' backends. Compile this function with tk.jit(f, backend='cpu'), or keep the "
        f"linear algebra in a cpu-compiled step of its own.\n  (from {e.source})")
