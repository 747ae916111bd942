"""Data-parallel forward and gradient over chunked data on Dask (the optional extra
`pip install tracekern[dask]`).

    value_and_grad_over(f, params, data, reduce="sum" | "mean") -> (value, grads)
    map_over(f, params, data) -> dask array (or a pytree of them)

`data` is a dask array, or a pytree of them, chunked along axis 0 (the batch axis); `f(params, chunk)`
is a traced function. Each chunk's compiled function runs as a Dask task wherever Dask places it
(with dask.distributed: on the worker that holds the chunk), and the per-chunk values and gradients
are combined by a tree reduction (dask.bag's fold). Compiled code reaches the workers as the
generated module's source (tk.Staged.export), compiled once per worker process and then loaded
from that worker's disk cache; Numba dispatchers are never pickled.

Any scheduler works: the default threaded one, a dask.distributed.LocalCluster (processes), or
any distributed.Client; pass `scheduler=` (a name or a Client) to pick one, else Dask's current
default (the active Client, if there is one) runs the tasks.

Trust: the same as Dask's own pickles between a client and its workers, which can run any code. A
worker executes the generated source that its client sent inside the task's pickle: it writes it to
its own disk cache, under the content hash of that source, in a directory checked like any
process's (tracekern.backends.cache: refused, with a warning, if another user could write to it),
and runs exactly that text. Connect only clients and workers you trust, as Dask asks anyway (and
use Dask's TLS security on a network others can reach)."""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .api import jit, value_and_grad
from .ir import Aval
from .pytree import tree_flatten, tree_map, tree_unflatten
from .staging import Exported

try:
    import dask
    import dask.array as da
    import dask.bag as db
except ImportError as err:  # pragma: no cover - the message is the point
    raise ImportError("tracekern.dask needs Dask: pip install 'tracekern[dask]' (dask[array,distributed])") from err

__all__ = ["map_over", "value_and_grad_over"]


def value_and_grad_over(f: Callable, params: Any, data: Any, reduce: str = "sum", *, split_every: int = 8,
                        scheduler: Any = None, compute: bool = True):
    """(value, grads) of the loss over all of `data`, where the loss of a chunk is f(params, chunk).

    reduce="sum": value = sum over chunks of f(params, chunk), the full-data loss when f sums over
    its rows. reduce="mean": value = sum over chunks of rows(chunk) * f(params, chunk) / rows(data),
    the full-data loss when f is a mean over its rows. grads has the structure of params and equals
    the gradient of value (to floating-point rounding: the chunks are added in a tree).

    split_every: how many partial results each reduction task adds. scheduler: passed to
    dask.compute (e.g. "threads", "processes", "synchronous" or a distributed.Client).
    compute=False returns a dask.delayed object computing (value, grads) instead."""
    if reduce not in ("sum", "mean"):
        raise ValueError(f"value_and_grad_over: reduce must be 'sum' or 'mean', got {reduce!r}")
    blocks, rows, sigs, data_td = _chunks(data, "value_and_grad_over")
    step = _staged(f, True)
    exported = {sig: dask.delayed(_export(step, params, data_td, sig), pure=True, traverse=False)
                for sig in dict.fromkeys(sigs)}
    p = dask.delayed(params, pure=True, traverse=False)
    total = sum(rows)
    weights = [n / total if reduce == "mean" else 1.0 for n in rows]
    parts = [dask.delayed(_chunk_value_and_grad, pure=True)(exported[sig], p, data_td, w, *bl)
             for sig, w, bl in zip(sigs, weights, blocks)]
    folded = db.from_delayed(parts).fold(_add, split_every=split_every)
    result = folded.to_delayed()
    if not compute:
        return result
    (value, grads), = dask.compute(result, scheduler=scheduler)
    return value, grads


def map_over(f: Callable, params: Any, data: Any) -> Any:
    """f(params, chunk) for every chunk of `data`, as a dask array (or a pytree of them, following
    f's output) whose axis 0 stacks the chunks' results. Each output leaf must keep the chunk's rows
    on axis 0. Lazy: call .compute() (or dask.compute) on the result."""
    blocks, rows, sigs, data_td = _chunks(data, "map_over")
    fwd = _staged(f, False)
    exports = {sig: _export(fwd, params, data_td, sig) for sig in dict.fromkeys(sigs)}
    delayed_exports = {sig: dask.delayed(e, pure=True, traverse=False) for sig, e in exports.items()}
    p = dask.delayed(params, pure=True, traverse=False)
    out_td = None
    per_leaf: list[list] = []
    for sig, n, bl in zip(sigs, rows, blocks):
        e = exports[sig]
        if out_td is None:
            out_td = e.out_treedef
            per_leaf = [[] for _ in e.out_avals]
        res = dask.delayed(_chunk_call, pure=True, nout=len(e.out_avals))(delayed_exports[sig], p, data_td, *bl)
        res = [res] if len(e.out_avals) == 1 else list(res)
        for j, (r, aval) in enumerate(zip(res, e.out_avals)):
            if not aval.shape or aval.shape[0] != n:
                raise ValueError(f"map_over: output leaf {j} of {_name(f)} has shape {aval.shape} for a chunk of {n} "
                                 "rows; each output must keep the chunk's rows on axis 0 (use value_and_grad_over "
                                 "for a reduction)")
            per_leaf[j].append(da.from_delayed(r, aval.shape, dtype=aval.dtype))
    return tree_unflatten(out_td, [da.concatenate(parts, axis=0) for parts in per_leaf])


# ----------------------------------------------------------------------------- helpers

_STAGED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_EXPORTED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _staged(f: Callable, with_grad: bool):
    """The tk.jit function for f (value_and_grad or plain), kept while f lives: a second call with
    the same f and shapes neither traces nor compiles again."""
    try:
        per_f = _STAGED.setdefault(f, {})
    except TypeError:           # not weak-referenceable
        per_f = {}
    if with_grad not in per_f:
        per_f[with_grad] = jit(value_and_grad(f, argnums=0) if with_grad else f, backend="cpu")
    return per_f[with_grad]


def _export(staged, params, data_td, sig) -> Exported:
    leaves, td = tree_flatten(params)
    key = (td, tuple((np.shape(x), np.asarray(x).dtype.str) for x in leaves), data_td, sig)
    per = _EXPORTED.setdefault(staged, {})
    if key not in per:
        per[key] = staged.export(params, tree_unflatten(data_td, list(sig)))
    return per[key]


def _name(f: Callable) -> str:
    return getattr(f, "__qualname__", None) or repr(f)


def _chunks(data: Any, what: str):
    """Per chunk: its blocks (delayed, one per data leaf), rows, and signature (a tuple of
    Aval per leaf: hashable, and an argument example for export); and data's tree structure."""
    leaves, td = tree_flatten(data)
    if not leaves:
        raise ValueError(f"{what}: data has no arrays")
    for j, x in enumerate(leaves):
        if not isinstance(x, da.Array):
            raise TypeError(f"{what}: data leaf {j} is a {type(x).__name__}, not a dask array; wrap NumPy data with "
                            "dask.array.from_array(x, chunks=(rows_per_chunk, ...))")
        if x.ndim == 0:
            raise ValueError(f"{what}: data leaf {j} is a scalar; data must have a batch axis 0")
        if any(np.isnan(c) for c in x.chunks[0]):
            raise ValueError(f"{what}: data leaf {j} has unknown chunk sizes; call .compute_chunk_sizes() first")
    first = leaves[0]
    for j, x in enumerate(leaves[1:], 1):
        if x.shape[0] != first.shape[0]:
            raise ValueError(f"{what}: data leaf {j} has {x.shape[0]} rows, leaf 0 has {first.shape[0]}; every leaf "
                             "must have the same batch axis 0")
    chunks0 = first.chunks[0]
    # one block per chunk: every leaf chunked like leaf 0 on axis 0, whole on the other axes
    leaves = [x.rechunk((chunks0,) + tuple(-1 for _ in x.shape[1:])) for x in leaves]
    per_leaf = [x.to_delayed().ravel() for x in leaves]
    blocks = list(zip(*per_leaf))
    sigs = [tuple(Aval((int(n),) + tuple(x.shape[1:]), np.dtype(x.dtype)) for x in leaves) for n in chunks0]
    return blocks, list(chunks0), sigs, td


def _chunk_value_and_grad(exported: Exported, params, data_td, weight: float, *blocks) -> list:
    """A bag partition: [(value, grads)] of one chunk, scaled by its weight."""
    value, grads = exported(params, tree_unflatten(data_td, list(blocks)))
    if weight != 1.0:
        value = value * weight
        grads = _scale(grads, weight)
    return [(value, grads)]


def _chunk_call(exported: Exported, params, data_td, *blocks):
    out = exported(params, tree_unflatten(data_td, list(blocks)))
    leaves, _ = tree_flatten(out)
    return leaves[0] if len(leaves) == 1 else tuple(leaves)


def _scale(tree, w: float):
    return tree_map(lambda x: np.asarray(x * np.asarray(w, np.asarray(x).dtype)), tree)


def _add(a, b):
    (va, ga), (vb, gb) = a, b
    lb = iter(tree_flatten(gb)[0])
    return va + vb, tree_map(lambda x: x + next(lb), ga)
