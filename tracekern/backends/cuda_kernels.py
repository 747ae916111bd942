"""The cuda target's tables (TARGET) and loop kernels: grid-stride loops, epilogues and deterministic
reductions, as LoopKernels, the methods the cuda renderer (cuda._Renderer) inherits.

A reduction folds each output element from fixed chunks (a tree in shared memory, or one thread), and a
second kernel folds the chunks' partial results in order: the same bits on every run."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ir import Var
from . import cuda_calls, cuda_math, fusion
from .fusion import LoopKernel
from .render import CASTS, Lines, Target, identity_literal, plain_index, scalar_statement


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64)) if len(shape) else 1


_index = plain_index
TARGET = Target("cuda", on_device=True, functions=lambda dtype, exact=False: cuda_math.functions(dtype), casts=CASTS,
                index=plain_index, kernels=cuda_calls.KERNELS, loops="grid-stride loops, a kernel launch each",
                float_templates=cuda_math.UNCONTRACTED, call="{fn}[{grid}, {block}, R.stream]({args})", leading=("R",))


class _Kernel(Lines):
    """The lines of one kernel being rendered, and its parameters (host expression -> name)."""

    def __init__(self):
        super().__init__()
        self.params: dict[str, tuple[str, Var | tuple]] = {}
        self.constants: set[str] = set()   # its statements whose values are constants (render.scalar_statement)

    def param(self, host: str, what: Var | tuple) -> str:
        if host not in self.params:
            self.params[host] = (f"p{len(self.params)}", what)
        return self.params[host][0]


def _unflatten(kn: _Kernel, flat: str, dims: Sequence[int], names: Sequence[str], depth: int) -> None:
    """Statements splitting the row-major flat index `flat` over `dims` into `names`."""
    if not dims:
        return
    rest = flat
    for a in range(len(dims) - 1, 0, -1):
        kn.emit(depth, f"{names[a]} = {rest} % {dims[a]}")
        kn.emit(depth, f"u{a} = {rest} // {dims[a]}")
        rest = f"u{a}"
    kn.emit(depth, f"{names[0]} = {rest}")


class LoopKernels:
    """A renderer's loop kernels, each launched through its launch_kernel (a host launch, or a phase of a
    device loop: cuda_loops)."""

    def blocks(self, work: int, per_block: int) -> int:
        return max(1, min(self.launch.max_blocks, -(-work // per_block)))

    # -- loop kernels ---------------------------------------------------------------------------
    def scalar(self, kn: _Kernel, stmt, depth: int) -> None:
        kn.emit(depth, *scalar_statement(TARGET, stmt, lambda r: (kn.param(self.names[r.var], r.var), r.index),
                                         constants=kn.constants))

    def body(self, kn: _Kernel, k: LoopKernel, depth: int, stores: bool) -> None:
        for stmt in k.body:
            self.scalar(kn, stmt, depth)
        if stores:
            idx = fusion.identity_index(k.domain)
            for v in k.stores:
                kn.emit(depth, f"{kn.param(self.names[v], v)}[{_index(idx)}] = {k.results[v]}")

    def loop(self, k: LoopKernel, pos: int) -> None:
        for v in k.stores:
            self.alloc(v)
        for e in k.reductions:
            self.alloc(e.outputs[0])
        for v in k.epilogue:
            self.alloc(v)
        groups: dict[tuple, list] = {}
        for e in k.reductions:
            groups.setdefault(tuple(e.params["axes"]), []).append(e)
        what = ", ".join([f"store {self.names[v]}" for v in k.stores]
                         + [f"{e.primitive.name} -> {e.outputs[0].aval}" for e in k.reductions])
        comment = f"kernel {pos}: loop over {list(k.domain)}: {what}"
        if not groups:
            self.elementwise(k, comment)
        for j, (axes, reds) in enumerate(groups.items()):
            self.reduction(k, axes, reds, stores=j == 0, comment=comment)
        if k.epilogue:
            self.epilogue(k, f"kernel {pos}, then: " + ", ".join(f"store {self.names[v]}" for v in k.epilogue))

    def epilogue(self, k: LoopKernel, comment: str) -> None:
        """A loop's epilogue (backends/fusion.py) as a kernel over the reductions' kept index, launched
        after them: the whole grid must see every result (a block cannot wait for another block)."""
        kept = k.domain[:k.epilogue_first]
        size = _size(kept)
        if size == 0:
            return
        kn, T = _Kernel(), min(self.launch.threads, size)
        names = [f"i{a}" for a in range(len(kept))]
        kn.emit(1, f"for f in range(cuda.grid(1), {size}, cuda.gridsize(1)):")
        _unflatten(kn, "f", kept, names, 2)
        for stmt in k.epilogue_body:
            self.scalar(kn, stmt, 2)
        for v in k.epilogue:
            kn.emit(2, f"{kn.param(self.names[v], v)}[{_index(k.epilogue_index(v))}] = {k.epilogue_results[v]}")
        self.launch_kernel(kn, comment, self.blocks(size, T), T)

    def elementwise(self, k: LoopKernel, comment: str) -> None:
        size = _size(k.domain)
        if size == 0:
            return
        kn, T = _Kernel(), min(self.launch.threads, size)
        if k.domain:
            kn.emit(1, f"for f in range(cuda.grid(1), {size}, cuda.gridsize(1)):")
            _unflatten(kn, "f", k.domain, fusion.identity_index(k.domain), 2)
            self.body(kn, k, 2, stores=True)
        else:
            kn.emit(1, "if cuda.grid(1) == 0:")
            self.body(kn, k, 2, stores=True)
        self.launch_kernel(kn, comment, self.blocks(size, T), T)

    def reduction(self, k: LoopKernel, axes: tuple, reds: list, stores: bool, comment: str) -> None:
        """One kernel folding the reductions over `axes` (and, if `stores`, writing the loop's
        stores), plus a kernel per reduction folding the chunks' partial results when there are
        several chunks. Each output element m is folded from P chunks of its R reduced elements:
        by one block (threads stride over the chunk, then a tree in shared memory) when the last
        axis is reduced (neighbouring threads read neighbouring elements), else by one thread
        (neighbouring threads fold neighbouring output elements)."""
        D, L = k.domain, self.launch
        kept = [a for a in range(len(D)) if a not in axes]
        M, R = _size([D[a] for a in kept]), _size([D[a] for a in axes])
        if M == 0:
            return
        idx = fusion.identity_index(D)
        by_block = len(D) - 1 in axes
        T = L.threads
        while T > 1 and T // 2 >= R and not self.out.one_block_size:   # (small reductions: fewer threads; a power of two)
            T //= 2
        if by_block:
            P = max(1, min(-(-L.max_blocks // M), -(-R // (T * L.min_chunk))))
        else:
            P = max(1, min(-(-(L.max_blocks * T) // M), -(-R // (16 * L.min_chunk))))
        chunk = max(1, -(-R // P))
        P = max(1, -(-R // chunk))
        kn = _Kernel()
        accs = []
        for e in reds:
            out = e.outputs[0]
            acc_dtype = np.dtype(cuda_math.ACCUMULATOR[out.dtype.name] if e.primitive.identity in ("0", "1") else out.dtype.name)
            fns = cuda_math.functions(acc_dtype)
            target = self.names[out]
            if P > 1:
                target = f"pt{self.tag()}"
                self.emit(1, f"{target} = {self.h_empty([P, M], acc_dtype)}")
            accs.append(dict(e=e, out=out, j=len(accs), acc=f"acc{len(accs)}", ident=identity_literal(e.primitive.identity, acc_dtype),
                             dtype=acc_dtype, fns=fns, target=target,
                             combine=lambda a, x, e=e, fns=fns: e.primitive.combine.format(acc=a, x=x, **fns)))
        for a in accs:   # (params in a fixed order: outputs after the reads the body names)
            a["param"] = kn.param(a["target"], (a["dtype"].name, 2) if P > 1 else a["out"])
        red_names = [idx[a] for a in axes]
        kept_names = [idx[a] for a in kept]
        if by_block:
            kn.emit(1, "tid = cuda.threadIdx.x")
            for a in accs:
                self.shared(kn, f"sh{a['j']}", str(T), CASTS[a["dtype"].name])
            kn.emit(1, f"for bm in range(cuda.blockIdx.x, {M * P}, cuda.gridDim.x):")
            kn.emit(2, f"m = bm // {P}")
            kn.emit(2, f"p = bm - m * {P}")
            start, step = f"p * {chunk} + tid", T
        else:
            kn.emit(1, f"for f in range(cuda.grid(1), {M * P}, cuda.gridsize(1)):")
            kn.emit(2, f"p = f // {M}")
            kn.emit(2, f"m = f - p * {M}")
            start, step = f"p * {chunk}", 1
        _unflatten(kn, "m", [D[a] for a in kept], kept_names, 2)
        for a in accs:
            kn.emit(2, f"{a['acc']} = {a['ident']}")
        kn.emit(2, f"for r in range({start}, min(p * {chunk} + {chunk}, {R}), {step}):")
        _unflatten(kn, "r", [D[a] for a in axes], red_names, 3)
        self.body(kn, k, 3, stores=stores)
        for a in accs:
            x = f"{CASTS[a['dtype'].name]}({k.results[a['e']]})"
            kn.emit(3, f"{a['acc']} = {a['combine'](a['acc'], x)}")
        out_index = _index(kept_names)
        if by_block:
            for a in accs:
                kn.emit(2, f"sh{a['j']}[tid] = {a['acc']}")
            kn.emit(2, "cuda.syncthreads()")
            s = T // 2
            while s >= 1:   # a tree in shared memory, in a fixed order
                kn.emit(2, f"if tid < {s}:")
                for a in accs:
                    sh = f"sh{a['j']}"
                    kn.emit(3, f"{sh}[tid] = {a['combine'](f'{sh}[tid]', f'{sh}[tid + {s}]')}")
                kn.emit(2, "cuda.syncthreads()")
                s //= 2
            kn.emit(2, "if tid == 0:")
            for a in accs:
                self._result(kn, a, f"sh{a['j']}[0]", P, out_index, 3)
            kn.emit(2, "cuda.syncthreads()   # (the next output element reuses the shared arrays)")
            self.launch_kernel(kn, comment, self.blocks(M * P, 1), T)
        else:
            for a in accs:
                self._result(kn, a, a["acc"], P, out_index, 2)
            self.launch_kernel(kn, comment, self.blocks(M * P, T), min(T, M * P))
        if P > 1:
            for a in accs:
                self.fold_partials(a, P, M, [D[i] for i in kept])

    def shared(self, kn: _Kernel, name: str, shape: str, dtype: str) -> None:
        """A block's shared array. The simulator creates one on the first thread's call, keyed by
        source line, and two threads can both find none and each make its own (a race in
        numba-cuda's simulator): there, the allocation holds a lock."""
        if self.launch.simulator:
            kn.emit(1, "with SIMULATOR_LOCK:")
            kn.emit(2, f"{name} = cuda.shared.array({shape}, {dtype})")
        else:
            kn.emit(1, f"{name} = cuda.shared.array({shape}, {dtype})")

    def _result(self, kn: _Kernel, a: dict, value: str, P: int, out_index: str, depth: int) -> None:
        if P > 1:
            kn.emit(depth, f"{a['param']}[p, m] = {value}")
        else:
            kn.emit(depth, f"{a['param']}[{out_index}] = {CASTS[a['out'].dtype.name]}({value})")

    def fold_partials(self, a: dict, P: int, M: int, dims: list[int]) -> None:
        kn, T = _Kernel(), min(self.launch.threads, M)
        part = kn.param(a["target"], (a["dtype"].name, 2))
        out = kn.param(self.names[a["out"]], a["out"])
        q = [f"q{i}" for i in range(len(dims))]
        kn.emit(1, f"for m in range(cuda.grid(1), {M}, cuda.gridsize(1)):")
        _unflatten(kn, "m", dims, q, 2)
        kn.emit(2, f"acc = {part}[0, m]")
        kn.emit(2, f"for p in range(1, {P}):")
        kn.emit(3, f"acc = {a['combine']('acc', f'{part}[p, m]')}")
        kn.emit(2, f"{out}[{_index(q)}] = {CASTS[a['out'].dtype.name]}(acc)")
        self.launch_kernel(kn, f"fold the {P} partial results of {a['e'].primitive.name} -> {a['out'].aval}",
                           self.blocks(M, T), T)
