"""Whole-array kernels of the cuda backend, registered per primitive (KERNELS): matmul (cuBLAS, or
tiles in shared memory), concatenate, unslice, print (on the host), running scans, sort, argsort,
searchsorted, scatter and FFTs. cuda.py's renderer allocates the equation's outputs and calls
KERNELS[name](renderer, call_kernel, operand names, output names), the signature of cpu_calls' registries;
each renders its kernels through the renderer (its Kernel class, launch_kernel) and launches them in
order on the step's stream.

Everything is deterministic, the same bits on every run: a scan and a scatter run serially along
their axis, one thread per position of the other axes; sort ranks each element against its row
(O(n^2) work per row, all in parallel: meant for the rows of moderate length that traced programs
sort, not for sorting millions of keys). np.linalg has no CUDA kernels: it raises here, naming the
function and the backends that run it."""
from __future__ import annotations

import numpy as np

from ..errors import TracekernError
from . import cuda_math, cufft, fusion
from .render import CASTS, kernel_registry, literal, subscript

KERNELS, kernel = kernel_registry()
# the whole-array kernels a device loop's phases may run (cuda_loops.py's _device_loop_ok): plain copies
IN_DEVICE_LOOPS = {"concatenate", "unslice"}


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


def _index(idx) -> str:
    return ", ".join(idx) if idx else "()"


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



def copy_into(r, out, v, op: str, where, e) -> None:
    size = _size(v.shape)
    if size == 0:
        return
    kn, T = r.Kernel(), min(r.launch.threads, size)
    idx = fusion.identity_index(v.shape)
    src, dst = kn.param(op, v), kn.param(r.names[out], out)
    kn.emit(1, f"for f in range(cuda.grid(1), {size}, cuda.gridsize(1)):")
    r.unflatten(kn, "f", v.shape, idx, 2)
    kn.emit(2, f"{dst}[{_index(where(list(idx)))}] = {src}[{_index(idx)}]")
    r.launch_kernel(kn, f"{e.primitive.name}: copy {v.aval} into {out.aval}", r.blocks(size, T), T, eqn=e)


def fill(r, out, value: str, e) -> None:
    size = _size(out.shape)
    if size == 0:
        return
    kn, T = r.Kernel(), min(r.launch.threads, size)
    idx = fusion.identity_index(out.shape)
    dst = kn.param(r.names[out], out)
    kn.emit(1, f"for f in range(cuda.grid(1), {size}, cuda.gridsize(1)):")
    r.unflatten(kn, "f", out.shape, idx, 2)
    kn.emit(2, f"{dst}[{_index(idx)}] = {value}")
    r.launch_kernel(kn, f"fill {out.aval}", r.blocks(size, T), T, eqn=e)


@kernel("matmul")
def _matmul(r, k, ops, dsts) -> None:
    """C = A @ B: on cuBLAS for floats on a GPU (backends/cublas.py), else in t x t tiles through
    shared memory. A transposed operand (the plan passes the value whose last-two-axes transpose
    it is) is a cuBLAS operation, or in the tiled kernel loaded with its rows along threadIdx.x,
    so neighbouring threads read neighbouring addresses either way (_load_tile)."""
    e = k.eqn
    out = e.outputs[0]
    (a_var, a_t), (b_var, b_t) = k.operands
    batch = out.shape[:-2]
    m, n = out.shape[-2:]
    K = e.inputs[0].shape[-1]
    nb = _size(batch)
    if m * n * nb == 0:
        return
    depth = 1
    if r.launch.cublas and out.dtype.kind in "fc" and K > 0:
        A, B, C = r.names[a_var], r.names[b_var], r.names[out]
        call = f"R.gemm({A}, {a_t}, {B}, {b_t}, {C}, {r.module.tf32})"
        strided = [x for v, x in ((a_var, A), (b_var, B)) if v in r.graph.inputs]
        if not strided:   # (buffers made here are C-contiguous)
            r.emit(1, f"{call}  # matmul -> {out.aval} on cuBLAS", eqn=e)
            return
        r.emit(1, f"if R.dense({', '.join(strided)}):", eqn=e)
        r.emit(2, f"{call}  # matmul -> {out.aval} on cuBLAS", eqn=e)
        r.emit(1, "else:   # a strided input: the tiled kernel")
        depth = 2
    _tiled_matmul(r, k, out, depth)


def _tiled_matmul(r, k, out, depth: int) -> None:
    e = k.eqn
    t = r.launch.tile
    (a_var, a_t), (b_var, b_t) = k.operands
    batch = out.shape[:-2]
    m, n = out.shape[-2:]
    K = e.inputs[0].shape[-1]
    nb = _size(batch)
    acc_dtype = np.dtype(out.dtype.name if out.dtype.kind in "fc" else cuda_math.ACCUMULATOR[out.dtype.name])
    acc = CASTS[acc_dtype.name]
    kn = r.Kernel()
    A, B, C = kn.param(r.names[a_var], a_var), kn.param(r.names[b_var], b_var), kn.param(r.names[out], out)
    q = [f"q{d}" for d in range(len(batch))]
    pre = "".join(f"{x}, " for x in q)
    r.shared(kn, "sa", f"({t}, {t})", acc)
    r.shared(kn, "sb", f"({t}, {t})", acc)
    kn.emit(1, "tx = cuda.threadIdx.x")
    kn.emit(1, "ty = cuda.threadIdx.y")
    kn.emit(1, f"for bq in range(cuda.blockIdx.z, {nb}, cuda.gridDim.z):")
    r.unflatten(kn, "bq", batch, q, 2)
    kn.emit(2, f"for rb in range(cuda.blockIdx.y, {-(-m // t)}, cuda.gridDim.y):")
    kn.emit(3, f"for cb in range(cuda.blockIdx.x, {-(-n // t)}, cuda.gridDim.x):")
    kn.emit(4, f"row = rb * {t} + ty")
    kn.emit(4, f"col = cb * {t} + tx")
    kn.emit(4, f"acc = {acc}(0)")
    kn.emit(4, f"for kt in range({-(-K // t)}):")
    d = 5
    _load_tile(kn, d, "sa", A, pre, f"rb * {t}", f"kt * {t}", m, K, a_t, acc)
    _load_tile(kn, d, "sb", B, pre, f"kt * {t}", f"cb * {t}", K, n, b_t, acc)
    kn.emit(d, "cuda.syncthreads()")
    kn.emit(d, f"for u in range({t}):")
    kn.emit(d + 1, "acc += sa[ty, u] * sb[u, tx]")
    kn.emit(d, "cuda.syncthreads()")
    kn.emit(4, f"if row < {m} and col < {n}:")
    kn.emit(5, f"{C}[{pre}row, col] = {CASTS[out.dtype.name]}(acc)")
    cap = r.launch.max_blocks if r.launch.simulator else 65535 ** 3   # (grid-stride loops cover the rest)
    gx = min(-(-n // t), 65535, cap)
    gy = min(-(-m // t), 65535, max(1, cap // gx))
    grid = (gx, gy, min(nb, 65535, max(1, cap // (gx * gy))))
    r.launch_kernel(kn, f"matmul -> {out.aval}", grid, (t, t), eqn=e, depth=depth)


def _load_tile(kn, d: int, tile: str, src: str, pre: str, row0: str, col0: str, rows: int, cols: int,
               transposed: bool, acc: str) -> None:
    """Each thread loads one element of a tile of the logical (rows x cols) operand into
    tile[r, c]. A transposed operand is stored (cols x rows): its threads swap roles, so that
    neighbouring threads (threadIdx.x) read neighbouring addresses either way."""
    r, c = ("tx", "ty") if transposed else ("ty", "tx")
    kn.emit(d, f"r = {row0} + {r}")
    kn.emit(d, f"c = {col0} + {c}")
    at = f"{src}[{pre}c, r]" if transposed else f"{src}[{pre}r, c]"
    kn.emit(d, f"{tile}[{r}, {c}] = {acc}({at}) if r < {rows} and c < {cols} else {acc}(0)")


@kernel("concatenate")
def _concatenate(r, k, ops, dsts) -> None:
    e = k.eqn
    out = e.outputs[0]
    axis, offset = e.params["axis"], 0
    for v, op in zip(e.inputs, ops):
        copy_into(r, out, v, op, lambda idx, o=offset: [f"{i} + {o}" if a == axis else i for a, i in enumerate(idx)], e)
        offset += v.shape[axis]


@kernel("unslice")
def _unslice(r, k, ops, dsts) -> None:
    e = k.eqn
    out = e.outputs[0]
    fill(r, out, literal(0, out.dtype), e)
    index = e.params["index"]
    copy_into(r, out, e.inputs[0], ops[0], lambda idx: [f"{a} + {c} * {i}" for i, (a, _, c) in zip(idx, index)], e)


@kernel("print")
def _print(r, k, ops, dsts) -> None:
    """On the host, in program order (a host read waits for the stream)."""
    e = k.eqn
    items = [repr(p[1]) if p[0] == "text" else ops[p[1]] for p in e.params["parts"]]
    r.emit(1, f"R.print([{', '.join(items)}], {e.params['sep']!r})", eqn=e)


@kernel("cumsum", "cumprod", "cummax", "cummin")
def _cumulative(r, k, ops, dsts) -> None:
    e = k.eqn
    x_var, out = e.inputs[0], e.outputs[0]
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
def _sort(r, k, ops, dsts) -> None:
    """Each element's rank in its row (the elements before it in NumPy's order, and the equal ones
    before it in the row: a stable sort) is where it goes."""
    e = k.eqn
    x_var, out = e.inputs[0], e.outputs[0]
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
def _searchsorted(r, k, ops, dsts) -> None:
    """A binary search per element: the first position whose value is not before it (side "left")
    or is after it (side "right"), in NumPy's order."""
    e = k.eqn
    a_var, v_var = e.inputs
    out = e.outputs[0]
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
def _scatter(r, k, ops, dsts) -> None:
    """A copy of the base, then one thread per position off the axis combining its updates in order."""
    e = k.eqn
    base_var, idx_var, upd_var = e.inputs
    out = e.outputs[0]
    axis, mode = e.params["axis"], e.params["mode"]
    copy_into(r, out, base_var, ops[0], lambda idx: idx, e)
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
def _fft(r, k, ops, dsts) -> None:
    """On cuFFT (backends/cufft.py): a host call on the step's stream. Where nvmath-python is missing
    (and always on the simulator, but for a test's stand-in) this raises, naming what runs it."""
    e = k.eqn
    out = e.outputs[0]
    if cufft.library(cuda_math.SIMULATOR) is None:
        why = " (Numba's CUDA simulator cannot run it)" if cuda_math.SIMULATOR else ""
        raise TracekernError(cufft.UNAVAILABLE.format(why=why) + f"\n  (from {e.source})")
    p = e.params
    r.emit(1, f"R.fft({ops[0]}, {r.names[out]}, {p['kind']!r}, {p['inverse']}, {p['ndim']})  # fft ({p['kind']}) -> "
              f"{out.aval} on cuFFT", eqn=e)


LINALG = {"solve": "np.linalg.solve", "inv": "np.linalg.inv", "slogdet": "np.linalg.slogdet", "det": "np.linalg.det",
          "cholesky": "np.linalg.cholesky", "qr": "np.linalg.qr", "eigh": "np.linalg.eigh / eigvalsh",
          "svd": "np.linalg.svd / norm(ord=2, 'nuc') / pinv", "eig": "np.linalg.eig / eigvals"}


@kernel(*LINALG)
def _no_linalg(r, k, ops, dsts) -> None:
    e = k.eqn
    raise TracekernError(
        f"{LINALG[e.primitive.name]} (the primitive {e.primitive.name}) has no kernel on the cuda backend; it runs "
        f"on the 'cpu' and 'interpret' backends. Compile this function with tk.jit(f, backend='cpu'), or keep the "
        f"linear algebra in a cpu-compiled step of its own.\n  (from {e.source})")
