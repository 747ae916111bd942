"""Differentiable control flow (SPEC section 5): cond, scan, fori_loop and while_loop. Each traces
its functions into sub-graphs and binds one primitive of primitives/control.py; values the
functions read by closure become the primitive's `consts` operands."""
from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from . import numpy as tnp
from . import schedule
from .errors import with_location
from .ir import Aval, Graph, Var
from .primitives import control as C
from .primitives.shape import const
from .pytree import leaf_paths, tree_flatten, tree_unflatten
from .trace import Tracer, _read, aval_of, bind, current_builder, flatten_args, trace_to_graph, weak_flag


def _leaves(tree, what: str):
    """The leaves of one pytree (traced values, or constants as arrays), its structure, and which leaves are
    Python numbers (weak: a literal, or a weak traced value)."""
    def leaf(x, arg, path):
        x = _read(x)
        weak = x.weak if isinstance(x, Tracer) else weak_flag(x)
        if not isinstance(x, Tracer):
            try:
                x = np.asarray(x)
            except Exception:  # noqa: BLE001
                raise TypeError(with_location(f"{what}: {type(x).__name__} is not an array")) from None
        return x, aval_of(x), weak

    flat = flatten_args((tree,), leaf)
    return list(flat.leaves), flat.treedefs[0], list(flat.weak)


class _WeakCarry(Exception):   # noqa: N818 (not an error: the carry's dtypes to trace the body again with)
    def __init__(self, dtypes):
        super().__init__("a weak carry takes the body's dtype")
        self.dtypes = dtypes


def _weak_carry(weak, avals_in, avals_out) -> None:
    """JAX's rule for a loop carry that starts as a Python number (weak): where the body returns another dtype
    (of the same shape) for it, the carry starts as NumPy's promotion of the number and that dtype, and the body
    is traced again: a 0.0 summing float32 values is a float32 carry, as `c = 0.0; for v in x32: c = c + v` in
    NumPy, where it was float64 (raises _WeakCarry with the new dtypes)."""
    if len(avals_in) != len(avals_out):
        return
    dtypes = [np.result_type(a.dtype.type(0).item(), b.dtype) if w and a.shape == b.shape else a.dtype
              for w, a, b in zip(weak, avals_in, avals_out)]
    if any(d != a.dtype for d, a in zip(dtypes, avals_in)):
        raise _WeakCarry(dtypes)


def _promoted(leaves, weak, dtypes):
    """The carry's leaves cast to `dtypes` (those cast are no longer weak) and their weak flags."""
    out, flags = [], []
    for x, w, d in zip(leaves, weak, dtypes):
        same = aval_of(x).dtype == d
        out.append(x if same else (tnp.astype(x, d) if isinstance(x, Tracer) else np.asarray(x, d)))
        flags.append(w if same else False)
    return out, flags


def _mark_weak(outs, weak):
    """A loop's or cond's results that are Python numbers (weak) stay weak: `x32 * fori_loop(.., s)` is float32."""
    return [Tracer(o.builder, o.ir_var, w) if w and isinstance(o, Tracer) else o for o, w in zip(outs, weak)]


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}


def _unroll(unroll, what: str) -> None:
    """JAX's `unroll` (an int >= 1, or a bool) is a hint of how many steps one iteration of the
    compiled loop runs; it never changes the results, and tracekern's compiled loops take no such
    hint, so it is accepted as JAX code passes it and checked, nothing more."""
    if isinstance(unroll, (bool, np.bool_)):
        return
    if not isinstance(unroll, (int, np.integer)) or unroll < 1:
        raise ValueError(with_location(f"{what}: unroll must be an int >= 1 or a bool (as in JAX), "
                                       f"got {unroll!r}"))


def _checkpoint(checkpoint, carry_bytes: int, steps: int | None, what: str):
    """A loop's `checkpoint` as its primitive's param: None (keep every carry), k (k snapshots), or
    a memory budget, "auto" (about 2 sqrt(n) carries, tracekern.schedule.auto_carries) or a size
    such as "64MB" or "512KiB" (bytes for the carries the backward pass keeps). A scan (its steps
    known now) gets k or None, chosen within the budget (schedule.best_slots: the fewest slots that
    re-run as few steps as the whole budget allows; None where every carry fits); a while loop
    gets "auto" or ("within", carries), chosen when its trip count is known."""
    if checkpoint is None:
        return None
    if isinstance(checkpoint, str):
        text = checkpoint.strip().lower().replace(" ", "")
        if text == "auto":
            budget = "auto"
        else:
            m = re.fullmatch(r"(\d+(?:\.\d*)?)([kmg]i?b|b)", text)
            if m is None:
                raise ValueError(with_location(f"{what}: checkpoint must be None, a positive number of snapshots, "
                                               f"'auto' or a size such as '64MB' or '512KiB', got {checkpoint!r}"))
            nbytes = int(float(m.group(1)) * _UNITS[m.group(2)])
            carries = nbytes // max(carry_bytes, 1)
            if carries < 1:
                raise ValueError(with_location(f"{what}: checkpoint={checkpoint!r} ({nbytes} bytes) holds no carry: one "
                                               f"carry is {carry_bytes} bytes, so give at least '{carry_bytes}B'"))
            budget = ("within", carries)
        if steps is None:
            return budget
        k = schedule.slots(steps, budget)
        return None if k >= steps else k
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, (int, np.integer)) or int(checkpoint) < 1:
        raise ValueError(with_location(f"{what}: checkpoint must be None, a positive number of snapshots, 'auto' or "
                                       f"a size such as '64MB', got {checkpoint!r}"))
    k = int(checkpoint)
    return None if steps is not None and k >= steps else k


def _trace(fn: Callable, avals, what: str, weak=None):
    """fn traced on avals (weak: which are Python numbers); returns (graph with non-scalar constants lifted to
    inputs, out treedef, extra operands: the captured values and the lifted constants)."""
    graph, out_td, captured = trace_to_graph(fn, avals, weak)
    return _lift_consts(graph, list(captured)) + (out_td,)


def _lift_consts(graph: Graph, captured: list):
    """Array constants inside a loop body become operands (kernels pass arrays, not literals)."""
    lifted, eqns, new_inputs = [], [], []
    for e in graph.eqns:
        if e.primitive is const and e.outputs[0].shape:
            new_inputs.append(e.outputs[0])
            lifted.append(np.asarray(e.params["value"]))
        else:
            eqns.append(e)
    if not lifted:
        return graph, captured
    return Graph(graph.inputs + tuple(new_inputs), tuple(eqns), graph.outputs), captured + lifted


def _check_same(what: str, td_a, td_b, avals_a, avals_b, names=("expected", "got")) -> None:
    if td_a != td_b:
        raise TypeError(with_location(f"{what}: structures differ: {names[0]} {td_a!r}, {names[1]} {td_b!r}"))
    paths = leaf_paths(td_a)
    for p, a, b in zip(paths, avals_a, avals_b):
        if a != b:
            raise TypeError(with_location(f"{what}: leaf {p or '(the value)'} is {a} in {names[0]} and {b} in {names[1]}"))


# ----------------------------------------------------------------------------- cond


def cond(pred, true_fn: Callable, false_fn: Callable, *operands):
    """true_fn(*operands) if pred else false_fn(*operands); differentiable; both branches must
    return the same structure of shapes and dtypes."""
    pred = _read(pred)
    if not isinstance(pred, Tracer):   # known now: no need for a run-time choice
        return (true_fn if bool(np.asarray(pred)) else false_fn)(*operands)
    if pred.dtype != np.bool_:
        pred = pred != 0
    if pred.shape != ():
        raise TypeError(with_location(f"tk.cond: the predicate must be a scalar, got shape {pred.shape}"))
    leaves, in_td, in_weak = _leaves(list(operands), "tk.cond operands")
    avals = [aval_of(x) for x in leaves]
    out_weak = {}

    def branch(fn, name):
        def traced(*xs):
            out_leaves, out_td, out_weak[name] = _leaves(fn(*tree_unflatten(in_td, list(xs))), "tk.cond result")
            return tree_unflatten(out_td, out_leaves)
        return traced

    gt, ct, td_t = _trace(branch(true_fn, "true"), avals, "tk.cond", in_weak)
    gf, cf, td_f = _trace(branch(false_fn, "false"), avals, "tk.cond", in_weak)
    _check_same("tk.cond: the branches return different results", td_t, td_f,
                [v.aval for v in gt.outputs], [v.aval for v in gf.outputs], ("true_fn", "false_fn"))
    # each branch gets both branches' extra operands (its own first), so the two graphs match
    gt = _extend(gt, len(leaves) + len(ct), [aval_of(c) for c in cf], after=True)
    gf = _extend(gf, len(leaves), [aval_of(c) for c in ct], after=False)
    outs = bind(C.cond, pred, *leaves, *ct, *cf, true=gt, false=gf)
    # (a result that is a Python number in both branches is one: weak, as in `x32 * (s if p else s + 1)`)
    return tree_unflatten(td_t, _mark_weak(outs, [bool(a and b) for a, b in zip(out_weak["true"], out_weak["false"])]))


def _extend(g: Graph, at: int, avals, after: bool) -> Graph:
    """g with unused inputs of `avals` inserted at position `at` (after=True) or after the
    operands (before its own extra inputs)."""
    new = tuple(Var(a) for a in avals)
    if after:
        inputs = g.inputs + new
    else:
        inputs = g.inputs[:at] + new + g.inputs[at:]
    return Graph(inputs, g.eqns, g.outputs)


# ----------------------------------------------------------------------------- scan


def scan(f: Callable, init, xs=None, length: int | None = None, *, reverse: bool = False,
         checkpoint: int | str | None = None, unroll: int | bool = 1):
    """(carry, ys) = scan(f, init, xs): carry, y = f(carry, x) for each x along axis 0 of xs (a
    pytree of arrays, or None with `length`); ys stacks the ys. Differentiable (grad of grad too).

    checkpoint=None keeps every step's carry for the backward pass. checkpoint=k keeps none: the
    backward runs a binomial schedule from the initial carry with at most k carries stored
    (tracekern.schedule), re-running the fewest forward steps that allows. checkpoint="auto" or a
    size ("64MB") is a memory budget for those carries: the loop takes the snapshots that run
    fastest within it (see _checkpoint). unroll: JAX's, accepted and checked, with no effect on the
    results (a compiled loop runs whole in one function; see _unroll)."""
    _unroll(unroll, "tk.scan")
    if checkpoint is not None and not isinstance(checkpoint, str):
        _checkpoint(checkpoint, 1, None, "tk.scan")   # (checks it before tracing)
    init_leaves, carry_td, carry_weak = _leaves(init, "tk.scan init")
    x_leaves, x_td, _ = _leaves(xs, "tk.scan xs") if xs is not None else ([], tree_flatten(None)[1], [])
    lengths = {int(aval_of(x).shape[0]) if aval_of(x).shape else -1 for x in x_leaves}
    if -1 in lengths:
        raise TypeError(with_location("tk.scan: every leaf of xs needs an axis 0 to scan over"))
    if length is not None:
        lengths.add(int(length))
    if len(lengths) != 1:
        raise ValueError(with_location(f"tk.scan: lengths disagree: {sorted(lengths)} (xs leaves and length=)"))
    n = lengths.pop()
    carry_avals = [aval_of(x) for x in init_leaves]
    x_avals = [Aval(aval_of(x).shape[1:], aval_of(x).dtype) for x in x_leaves]
    out_td_box = {}

    def body(*a):
        carry = tree_unflatten(carry_td, list(a[:len(init_leaves)]))
        x = tree_unflatten(x_td, list(a[len(init_leaves):])) if xs is not None else None
        out = f(carry, x)
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError(with_location(f"tk.scan: {getattr(f, '__name__', 'f')} must return (carry, y)"))
        new_carry, y = out
        c_leaves, c_td, out_td_box["weak"] = _leaves(new_carry, "tk.scan carry")
        if c_td == carry_td:
            _weak_carry(carry_weak, carry_avals, [aval_of(c) for c in c_leaves])
        _check_same("tk.scan: the carry changed", carry_td, c_td, carry_avals, [aval_of(c) for c in c_leaves],
                    ("init", "f's result"))
        y_leaves, y_td, _ = _leaves(y, "tk.scan y")
        out_td_box["y"] = y_td
        return c_leaves + y_leaves

    try:
        g, extra, _ = _trace(body, carry_avals + x_avals, "tk.scan", carry_weak + [False] * len(x_avals))
    except _WeakCarry as e:
        init_leaves, carry_weak = _promoted(init_leaves, carry_weak, e.dtypes)
        carry_avals = [aval_of(x) for x in init_leaves]
        g, extra, _ = _trace(body, carry_avals + x_avals, "tk.scan", carry_weak + [False] * len(x_avals))
    g = _consts_first(g, len(extra))
    # (k >= n stores every carry: the plain backward does that without re-running steps). The
    # forward records no carries: reverse mode makes the scan record them when it needs them
    ck = _checkpoint(checkpoint, sum(a.nbytes for a in carry_avals), n, "tk.scan")
    outs = bind(C.scan, *extra, *init_leaves, *x_leaves, body=g, num_consts=len(extra), num_carry=len(init_leaves),
                length=n, reverse=bool(reverse), record=False, checkpoint=ck)
    nk = len(init_leaves)
    n_y = len(g.outputs) - nk
    carry = _mark_weak(outs[:nk], [bool(a and b) for a, b in zip(carry_weak, out_td_box["weak"])])
    return tree_unflatten(carry_td, carry), tree_unflatten(out_td_box["y"], list(outs[nk:nk + n_y]))


def _consts_first(g: Graph, n_extra: int) -> Graph:
    """Move the trailing extra inputs (captures, lifted constants) to the front: primitives take
    consts first."""
    if not n_extra:
        return g
    k = len(g.inputs) - n_extra
    return Graph(g.inputs[k:] + g.inputs[:k], g.eqns, g.outputs)


# ----------------------------------------------------------------------------- loops


def fori_loop(lower, upper, body_fn: Callable, init, *, checkpoint: int | str | None = None,
              unroll: int | bool = 1):
    """for i in range(lower, upper): val = body_fn(i, val). Static integer bounds run as tk.scan
    (checkpoint= and unroll= as there); traced bounds as tk.while_loop."""
    _unroll(unroll, "tk.fori_loop")
    lo, hi = _read(lower), _read(upper)
    if not isinstance(lo, Tracer) and not isinstance(hi, Tracer):
        lo, hi = int(lo), int(hi)
        if current_builder() is None:
            val = init
            for i in range(lo, hi):
                val = body_fn(np.int64(i), val)
            return val
        steps = max(hi - lo, 0)
        idx = np.arange(lo, lo + steps, dtype=np.int64)
        carry, _ = scan(lambda c, i: (body_fn(_weak(i), c), ()), init, idx, length=steps, checkpoint=checkpoint)
        return carry
    # the index's dtype is the bounds' (NumPy's promotion; Python ints are weak), as JAX's
    strong = [np.dtype(x.dtype) for x in (lo, hi)
              if (isinstance(x, Tracer) and not x.weak) or isinstance(x, (np.ndarray, np.generic))]
    dtype = np.result_type(*strong) if strong and all(d.kind in "iu" for d in strong) else np.dtype(np.int64)
    lo = tnp.astype(lo, dtype) if isinstance(lo, Tracer) else dtype.type(lo)
    hi = tnp.astype(hi, dtype) if isinstance(hi, Tracer) else dtype.type(hi)
    index = (lambda i: i) if strong else _weak
    _, val = while_loop(lambda s: s[0] < hi, lambda s: (s[0] + 1, body_fn(index(s[0]), s[1])), (lo, init),
                        checkpoint=checkpoint)
    return val


def _weak(i):
    """A loop index that promotes like a Python int (JAX's fori_loop index over Python-int bounds is
    weakly typed): a float32 or int32 carry plus i keeps its dtype."""
    return Tracer(i.builder, i.ir_var, True) if isinstance(i, Tracer) else i


def while_loop(cond_fn: Callable, body_fn: Callable, init, *, checkpoint: int | str | None = None):
    """while cond_fn(val): val = body_fn(val). Reverse-differentiable with a trip count known only
    at run time: the backward re-runs the loop from its initial value, keeping every iteration's
    carry (checkpoint=None) or k snapshots and one segment at a time (checkpoint=k), then runs the
    body's backward in reverse. checkpoint="auto" or a size ("64MB"): a memory budget, the number
    of snapshots chosen within it when the trip count is known."""
    if checkpoint is not None and not isinstance(checkpoint, str):
        _checkpoint(checkpoint, 1, None, "tk.while_loop")
    if current_builder() is None and not any(isinstance(_read(x), Tracer) for x in tree_flatten(init)[0]):
        val = init
        while bool(np.asarray(cond_fn(val))):
            val = body_fn(val)
        return val
    leaves, td, weak = _leaves(init, "tk.while_loop init")
    avals = [aval_of(x) for x in leaves]
    out_weak = {}

    def body(*a):
        out = body_fn(tree_unflatten(td, list(a)))
        o_leaves, o_td, out_weak["body"] = _leaves(out, "tk.while_loop body result")
        if o_td == td:
            _weak_carry(weak, avals, [aval_of(x) for x in o_leaves])
        _check_same("tk.while_loop: the carry changed", td, o_td, avals, [aval_of(x) for x in o_leaves],
                    ("init", "body_fn's result"))
        return o_leaves

    def test(*a):
        c = cond_fn(tree_unflatten(td, list(a)))
        c = _read(c)
        if aval_of(c).shape != ():
            raise TypeError(with_location(f"tk.while_loop: cond_fn must return a scalar, got shape {aval_of(c).shape}"))
        return tnp.astype(c, np.bool_) if aval_of(c).dtype != np.bool_ else c

    try:
        gb, eb, _ = _trace(body, avals, "tk.while_loop", weak)
    except _WeakCarry as e:
        leaves, weak = _promoted(leaves, weak, e.dtypes)
        avals = [aval_of(x) for x in leaves]
        gb, eb, _ = _trace(body, avals, "tk.while_loop", weak)
    gc, ec, _ = _trace(test, avals, "tk.while_loop", weak)
    extra = eb + ec
    gb = _consts_first(_extend(gb, len(avals) + len(eb), [aval_of(c) for c in ec], after=True), len(extra))
    gc = _consts_first(_extend(gc, len(avals), [aval_of(c) for c in eb], after=False), len(extra))
    outs = bind(C.while_, *extra, *leaves, cond=gc, body=gb, num_consts=len(extra),
                checkpoint=_checkpoint(checkpoint, sum(a.nbytes for a in avals), None, "tk.while_loop"))
    return tree_unflatten(td, _mark_weak(outs[:-1], [bool(a and b) for a, b in zip(weak, out_weak["body"])]))
