"""Whole-array kernels of the cpu backend, registered per primitive (KERNELS): matmul, concatenate,
unslice, running scans, sort, argsort, searchsorted, scatter, FFTs and np.linalg; and the statements
written into the step itself (STEP: print). cpu_kernels.py renders each KERNELS equation as a compile unit
`kernel(operands..., outputs...)` and calls KERNELS[name](text, call_kernel, operands, outputs) for its
body; a STEP entry is called the same way with the step's renderer (outputs: its output buffers).
The cuda backend's registries (cuda_calls) take the same signature.

Sizes are read from the arrays (p0.shape[d]), so one kernel serves every shape of a dtype and rank.
Sorting and linear algebra call Numba's np.sort / np.argsort / np.linalg (LAPACK through SciPy), and eigh
LAPACK's ?syevd on the triangle asked for (cpu_math.eigh_*), as NumPy."""
from __future__ import annotations

from . import cpu_math
from .render import kernel_registry, literal, loop_nest, subscript

KERNELS, kernel = kernel_registry()
# statements of the step (driver) itself, not compile units: run as Python, in program order
STEP, step_statement = kernel_registry()
OBJECT_MODE = {"eig"}   # kernels that call NumPy in an objmode block (they hold the GIL: no nogil flag)


def _loops(t, array: str, dims: list[int], depth: int = 1) -> tuple[list[str], int]:
    """Nested loops over the given axes of `array`: (the loop variable of each axis, the body's depth)."""
    names = [f"q{d}" for d in dims]
    return names, loop_nest(t, depth, [f"{array}.shape[{d}]" for d in dims], names, "fq")


@kernel("matmul")
def _matmul(t, k, ops, dsts) -> None:
    """C = A @ B over the batch axes (operands have the output's batch shape), BLAS for floats."""
    e = k.eqn
    out, C0 = e.outputs[0], dsts[0]
    batch = out.shape[:-2]
    k_dim = e.inputs[0].shape[-1]
    depth = loop_nest(t, 1, [f"{C0}.shape[{d}]" for d in range(len(batch))], [f"q{d}" for d in range(len(batch))])
    sub = "".join(f"q{d}, " for d in range(len(batch)))
    A, B, C = (f"{x}[{sub[:-2]}]" if batch else x for x in (*ops, C0))
    if out.dtype.kind in "fc" and k_dim > 0 and out.size > 0:
        t.emit(depth, f"gemm({A}, {B}, {C})", eqn=e)   # (cpu_math.gemm: np.dot, cached once per machine)
        return
    # integer and bool matmul (no BLAS), and empty products
    acc_dtype = cpu_math.ACCUMULATOR[out.dtype.name] if out.dtype.kind != "f" else out.dtype.name
    n_out = len(out.shape)
    t.emit(depth, f"for r in range({C0}.shape[{n_out - 2}]):")
    t.emit(depth + 1, f"for s in range({C0}.shape[{n_out - 1}]):")
    t.emit(depth + 2, f"t = np.{acc_dtype}(0)")
    t.emit(depth + 2, f"for u in range({k_dim}):")
    t.emit(depth + 3, f"t += {A}[r, u] * {B}[u, s]")
    t.emit(depth + 2, f"{C}[r, s] = {cpu_math.CASTS[out.dtype.name]}(t)", eqn=e)


def _copy_loops(t, shape: tuple, statement: str, e) -> None:
    """`statement` inside a loop nest over `shape` (loop variables i0, i1, ...)."""
    depth = loop_nest(t, 1, shape, [f"i{a}" for a in range(len(shape))])
    t.emit(depth, statement, eqn=e)


@kernel("concatenate")
def _concatenate(t, k, ops, dsts) -> None:
    """Explicit loops, not slice assignment: Numba's generic setitem took 3x as long (8.3 against 2.5 us
    for 16k float32 values), and a loop over contiguous memory vectorises."""
    e = k.eqn
    out, dst = e.outputs[0], dsts[0]
    axis, offset = e.params["axis"], 0
    for op, v in zip(ops, e.inputs):
        at = [f"{offset} + i{a}" if a == axis and offset else f"i{a}" for a in range(len(out.shape))]
        _copy_loops(t, v.shape, f"{dst}[{', '.join(at) or '()'}] = {op}[{', '.join(f'i{a}' for a in range(len(v.shape))) or '()'}]", e)
        offset += v.shape[axis]


@kernel("unslice")
def _unslice(t, k, ops, dsts) -> None:
    """Zeros, then the operand copied into its strided place."""
    e = k.eqn
    out, dst = e.outputs[0], dsts[0]
    zero = literal(0, out.dtype)
    _copy_loops(t, out.shape, f"{dst}[{', '.join(f'i{a}' for a in range(len(out.shape))) or '()'}] = {zero}", e)
    src = e.inputs[0]
    at = [f"{a} + i{d} * {c}" if c != 1 else (f"{a} + i{d}" if a else f"i{d}")
          for d, (a, _, c) in enumerate(e.params["index"])]
    whole = ", ".join(f"i{d}" for d in range(len(src.shape))) or "()"
    _copy_loops(t, src.shape, f"{dst}[{', '.join(at) or '()'}] = {ops[0]}[{whole}]", e)


@step_statement("print")
def _print(r, k, ops, dsts) -> None:
    """tk.print: Python's print in an objmode block, in program order (kernels are sequential)."""
    e = k.eqn
    items = [repr(p[1]) if p[0] == "text" else ops[p[1]] for p in e.params["parts"]]
    r.emit(1, "with objmode():", eqn=e)
    sep = repr(e.params["sep"])
    r.emit(2, f"print({', '.join(items + [f'sep={sep}', 'flush=True'])})", eqn=e)


@kernel("cumsum", "cumprod", "cummax", "cummin")
def _cumulative(t, k, ops, dsts) -> None:
    """A serial running value along the axis, for every position of the other axes."""
    e = k.eqn
    (x,), (out,) = ops, dsts
    axis, reverse = e.params["axis"], e.params["reverse"]
    nd = e.inputs[0].ndim
    names, depth = _loops(t, x, [d for d in range(nd) if d != axis])
    idx = lambda j: names[:axis] + [j] + names[axis:]   # noqa: E731
    t.emit(depth, f"n = {x}.shape[{axis}]")
    t.emit(depth, "if n > 0:")
    first = "n - 1" if reverse else "0"
    t.emit(depth + 1, f"acc = {subscript(x, idx(first))}")
    t.emit(depth + 1, f"{subscript(out, idx(first))} = acc")
    t.emit(depth + 1, "for j in range(1, n):")
    t.emit(depth + 2, f"jj = {'n - 1 - j' if reverse else 'j'}")
    combine = e.primitive.combine.format(acc="acc", x=subscript(x, idx("jj")), **cpu_math.functions(e.inputs[0].dtype))
    t.emit(depth + 2, f"acc = {combine}", eqn=e)
    t.emit(depth + 2, f"{subscript(out, idx('jj'))} = acc")


@kernel("sort", "argsort")
def _sort(t, k, ops, dsts) -> None:
    """Each row (the last axis) sorted by Numba's np.sort (NaN last), or stably argsorted."""
    e = k.eqn
    (x,), (out,) = ops, dsts
    names, depth = _loops(t, x, list(range(e.inputs[0].ndim - 1)))
    row = f"{x}[{', '.join(names)}]" if names else x
    call = f"np_sort({row})" if e.primitive.name == "sort" else f"np_argsort_stable({row})"
    t.emit(depth, f"put({out}[{', '.join(names)}], {call})" if names else f"put({out}, {call})", eqn=e)


@kernel("searchsorted")
def _searchsorted(t, k, ops, dsts) -> None:
    e = k.eqn
    (a, v), (out,) = ops, dsts
    side = e.params["side"]
    names, depth = _loops(t, v, list(range(e.inputs[1].ndim)))
    t.emit(depth, f"{subscript(out, names)} = np.searchsorted({a}, {subscript(v, names)}, side={side!r})", eqn=e)


@kernel("scatter")
def _scatter(t, k, ops, dsts) -> None:
    """A copy of the base, then every update combined in, in C order (the last "set" wins)."""
    e = k.eqn
    (base, idx, upd), (out,) = ops, dsts
    axis, mode = e.params["axis"], e.params["mode"]
    t.emit(1, f"put({out}, {base})")
    names, depth = _loops(t, idx, list(range(e.inputs[1].ndim)))
    t.emit(depth, f"j = take_index({subscript(idx, names)}, {base}.shape[{axis}])")
    cell = subscript(out, names[:axis] + ["j"] + names[axis + 1:])
    u = subscript(upd, names)
    fns = cpu_math.functions(e.inputs[0].dtype)
    value = {"set": u, "add": f"{cell} + {u}", "mul": f"{cell} * {u}",
             "min": f"{fns.get('minimum')}({cell}, {u})", "max": f"{fns.get('maximum')}({cell}, {u})"}[mode]
    t.emit(depth, f"{cell} = {value}", eqn=e)


@kernel("fft")
def _fft(t, k, ops, dsts) -> None:
    """NumPy's FFTs inside compiled code: rocket-fft (pocketfft, the C++ code NumPy itself runs), unnormalized."""
    e = k.eqn
    p = e.params
    nd = e.inputs[0].ndim
    axes = tuple(range(nd - p["ndim"], nd))
    x = ops[0]
    if p["kind"] == "c2c":
        call = f"np_{'ifftn' if p['inverse'] else 'fftn'}({x}, {axes})"
    elif p["kind"] == "r2c":
        call = f"np_rfftn({x}, {axes})"
    else:
        call = f"np_irfftn({x}, {tuple(e.outputs[0].shape[nd - p['ndim']:])}, {axes})"
    t.emit(1, f"put({dsts[0]}, {call})", eqn=e)


@kernel("eig")
def _eig(t, k, ops, dsts) -> None:
    """NumPy's eig on each matrix (in object mode: Numba's refuses a real matrix with complex eigenvalues)."""
    e = k.eqn
    names, depth = _loops(t, ops[0], list(range(e.inputs[0].ndim - 2)))
    pre = ", ".join(names)
    c = e.outputs[0].dtype.name
    results = [f"r{j}" for j in range(len(dsts))]
    types = ", ".join(f"{r}='{c}[{', '.join([':'] * (v.ndim - len(names) - 1) + ['::1'])}]'" for r, v in zip(results, e.outputs))
    t.emit(depth, f"m = np.ascontiguousarray({ops[0]}[{pre}])" if names else f"m = np.ascontiguousarray({ops[0]})")
    t.emit(depth, f"with objmode({types}):", eqn=e)
    t.emit(depth + 1, f"{', '.join(results)}{',' if len(results) == 1 else ''} = eig_numpy(m, {e.params['vectors']})", eqn=e)
    for r, dst in zip(results, dsts):
        t.emit(depth, f"put({dst}[{pre}], {r})" if names else f"put({dst}, {r})")


# The call on one float64 matrix of the batch, per primitive ({0}, {1}: the operands; then the params): Numba's
# np.linalg, or cpu_math's eigh_f64, which calls LAPACK on the triangle asked for, as NumPy does
LINALG_CALLS = {"solve": "np_solve({0}, {1})", "inv": "np_inv({0})", "slogdet": "np_slogdet({0})", "det": "np_det({0})",
                "cholesky": "np_cholesky({0})", "qr": "np_qr({0})", "eigh": "eigh_f64({0}, {upper})",
                "svd": "np_svd_{svd}({0})"}


@kernel(*LINALG_CALLS)
def _linalg(t, k, ops, dsts) -> None:
    """Numba's np.linalg on each matrix of the batch (LAPACK through SciPy), or eigh as NumPy computes it. Like
    NumPy, float32 matrices are factorized in float64 and the results rounded to float32 (LAPACK's float32
    routines are a different computation: other signs of eigenvectors and singular vectors)."""
    e = k.eqn
    names, depth = _loops(t, ops[0], list(range(e.inputs[0].ndim - 2)))
    pre = ", ".join(names)
    widen = {"float32": ".astype(np.float64)", "complex64": ".astype(np.complex128)"}.get(e.inputs[0].dtype.name, "")
    mats = [f"np.ascontiguousarray({op}[{pre}]){widen}" if names else f"np.ascontiguousarray({op}){widen}" for op in ops]
    params = dict(e.params, upper=e.params.get("uplo") == "U", svd="full" if e.params.get("full_matrices") else "reduced")
    results = [f"r{j}" for j in range(len(dsts))]
    t.emit(depth, f"{', '.join(results)} = {LINALG_CALLS[e.primitive.name].format(*mats, **params)}", eqn=e)
    for r, dst, v in zip(results, dsts, e.outputs):
        target = f"{dst}[{pre}]" if names else dst
        if len(v.shape) > len(names):
            t.emit(depth, f"put({target}, {r})")
        else:
            t.emit(depth, f"{dst}[{pre if names else '()'}] = {r}")
