"""Whole-array kernels of the cpu backend, registered per primitive (KERNELS): running scans, sort,
argsort, searchsorted, scatter and np.linalg. cpu.py renders each such equation as a compile unit
`kernel(operands..., outputs...)` and calls KERNELS[name](text, operands, outputs, eqn) for its body.

Sizes are read from the arrays (p0.shape[d]), so one kernel serves every shape of a dtype and rank.
Sorting and linear algebra call Numba's np.sort / np.argsort / np.linalg (LAPACK through SciPy), and eigh
LAPACK's ?syevd on the triangle asked for (cpu_math.eigh_*), as NumPy."""
from __future__ import annotations

from . import cpu_math
from .render import kernel_registry, loop_nest, subscript

KERNELS, kernel = kernel_registry()
OBJECT_MODE = {"eig"}   # kernels that call NumPy in an objmode block (they hold the GIL: no nogil flag)


def _loops(t, array: str, dims: list[int], depth: int = 1) -> tuple[list[str], int]:
    """Nested loops over the given axes of `array`: (the loop variable of each axis, the body's depth)."""
    names = [f"q{d}" for d in dims]
    return names, loop_nest(t, depth, [f"{array}.shape[{d}]" for d in dims], names, "fq")


@kernel("cumsum", "cumprod", "cummax", "cummin")
def _cumulative(t, ops, dsts, e) -> None:
    """A serial running value along the axis, for every position of the other axes."""
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
def _sort(t, ops, dsts, e) -> None:
    """Each row (the last axis) sorted by Numba's np.sort (NaN last), or stably argsorted."""
    (x,), (out,) = ops, dsts
    names, depth = _loops(t, x, list(range(e.inputs[0].ndim - 1)))
    row = f"{x}[{', '.join(names)}]" if names else x
    call = f"np.sort({row})" if e.primitive.name == "sort" else f"np.argsort({row}, kind='mergesort')"
    t.emit(depth, f"{out}[{', '.join(names + [':'])}] = {call}", eqn=e)


@kernel("searchsorted")
def _searchsorted(t, ops, dsts, e) -> None:
    (a, v), (out,) = ops, dsts
    side = e.params["side"]
    names, depth = _loops(t, v, list(range(e.inputs[1].ndim)))
    t.emit(depth, f"{subscript(out, names)} = np.searchsorted({a}, {subscript(v, names)}, side={side!r})", eqn=e)


@kernel("scatter")
def _scatter(t, ops, dsts, e) -> None:
    """A copy of the base, then every update combined in, in C order (the last "set" wins)."""
    (base, idx, upd), (out,) = ops, dsts
    axis, mode = e.params["axis"], e.params["mode"]
    t.emit(1, f"{out}[...] = {base}")
    names, depth = _loops(t, idx, list(range(e.inputs[1].ndim)))
    t.emit(depth, f"j = take_index({subscript(idx, names)}, {base}.shape[{axis}])")
    cell = subscript(out, names[:axis] + ["j"] + names[axis + 1:])
    u = subscript(upd, names)
    fns = cpu_math.functions(e.inputs[0].dtype)
    value = {"set": u, "add": f"{cell} + {u}", "mul": f"{cell} * {u}",
             "min": f"{fns.get('minimum')}({cell}, {u})", "max": f"{fns.get('maximum')}({cell}, {u})"}[mode]
    t.emit(depth, f"{cell} = {value}", eqn=e)


@kernel("fft")
def _fft(t, ops, dsts, e) -> None:
    """NumPy's FFTs inside compiled code: rocket-fft (pocketfft, the C++ code NumPy itself runs), unnormalized."""
    p = e.params
    nd = e.inputs[0].ndim
    axes = tuple(range(nd - p["ndim"], nd))
    x = ops[0]
    if p["kind"] == "c2c":
        call = f"np.fft.{'ifftn' if p['inverse'] else 'fftn'}({x}, axes={axes}, norm={'forward' if p['inverse'] else 'backward'!r})"
    elif p["kind"] == "r2c":
        call = f"np.fft.rfftn({x}, axes={axes}, norm='backward')"
    else:
        call = f"np.fft.irfftn({x}, s={tuple(e.outputs[0].shape[nd - p['ndim']:])}, axes={axes}, norm='forward')"
    t.emit(1, f"{dsts[0]}[...] = {call}", eqn=e)


@kernel("eig")
def _eig(t, ops, dsts, e) -> None:
    """NumPy's eig on each matrix (in object mode: Numba's refuses a real matrix with complex eigenvalues)."""
    names, depth = _loops(t, ops[0], list(range(e.inputs[0].ndim - 2)))
    pre = ", ".join(names)
    c = e.outputs[0].dtype.name
    results = [f"r{j}" for j in range(len(dsts))]
    types = ", ".join(f"{r}='{c}[{', '.join([':'] * (v.ndim - len(names) - 1) + ['::1'])}]'" for r, v in zip(results, e.outputs))
    t.emit(depth, f"m = np.ascontiguousarray({ops[0]}[{pre}])" if names else f"m = np.ascontiguousarray({ops[0]})")
    t.emit(depth, f"with objmode({types}):", eqn=e)
    t.emit(depth + 1, f"{', '.join(results)}{',' if len(results) == 1 else ''} = eig_numpy(m, {e.params['vectors']})", eqn=e)
    for r, dst in zip(results, dsts):
        t.emit(depth, f"{dst}[{pre}] = {r}" if names else f"{dst}[...] = {r}")


# The call on one float64 matrix of the batch, per primitive ({0}, {1}: the operands; then the params): Numba's
# np.linalg, or cpu_math's eigh_f64, which calls LAPACK on the triangle asked for, as NumPy does
LINALG_CALLS = {"solve": "np.linalg.solve({0}, {1})", "inv": "np.linalg.inv({0})", "slogdet": "np.linalg.slogdet({0})",
                "cholesky": "np.linalg.cholesky({0})", "qr": "np.linalg.qr({0})",
                "eigh": "eigh_f64({0}, {upper})", "svd": "np.linalg.svd({0}, full_matrices={full_matrices})"}


@kernel(*LINALG_CALLS)
def _linalg(t, ops, dsts, e) -> None:
    """Numba's np.linalg on each matrix of the batch (LAPACK through SciPy), or eigh as NumPy computes it. Like
    NumPy, float32 matrices are factorized in float64 and the results rounded to float32 (LAPACK's float32
    routines are a different computation: other signs of eigenvectors and singular vectors)."""
    names, depth = _loops(t, ops[0], list(range(e.inputs[0].ndim - 2)))
    pre = ", ".join(names)
    widen = {"float32": ".astype(np.float64)", "complex64": ".astype(np.complex128)"}.get(e.inputs[0].dtype.name, "")
    mats = [f"np.ascontiguousarray({op}[{pre}]){widen}" if names else f"np.ascontiguousarray({op}){widen}" for op in ops]
    params = dict(e.params, upper=e.params.get("uplo") == "U")
    results = [f"r{j}" for j in range(len(dsts))]
    t.emit(depth, f"{', '.join(results)} = {LINALG_CALLS[e.primitive.name].format(*mats, **params)}", eqn=e)
    for r, dst, v in zip(results, dsts, e.outputs):
        target = f"{dst}[{pre}]" if names else dst
        if len(v.shape) > len(names):
            t.emit(depth, f"{target}[...] = {r}")
        else:
            t.emit(depth, f"{dst}[{pre if names else '()'}] = {r}")
