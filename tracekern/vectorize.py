"""tk.vmap (SPEC section 10): in_axes and out_axes read against the arguments' and results' pytrees,
the batch size, and the errors that name the user's line; the batched graph is tracekern.batching's.

A vmapped function called on arrays compiles like tk.jit: one program runs the whole batch (the
function traced once, on one lane's shapes, then batched). Called inside another trace (jit, grad,
another vmap), it emits its batched graph there."""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

from . import batching
from .arguments import arg_name, flatten_call, fun_name
from .errors import with_location
from .ir import Aval, Graph
from .primitives import lanes
from .pytree import TreeDef, leaf_paths, tree_flatten, tree_unflatten
from .staging import Staged
from .trace import Tracer, Value, _read, current_builder, trace_to_graph


def vmap(fun: Callable, in_axes: Any = 0, out_axes: Any = 0) -> Staged:
    """The function mapped over an axis of its arguments, as one program (not a loop).

    in_axes: an int (the axis of every argument leaf that carries the batch), None (not batched), or
    a tuple/list with one entry per positional argument, each an int, None or a pytree prefix of that
    argument (tuples, lists and dicts of ints and Nones). Keyword arguments are batched along axis 0.
    out_axes: likewise for the result: where each output leaf gets the batch axis (None: the output
    must not depend on the batch, and is returned once). Negative axes count from the end."""
    _check_spec(fun, in_axes, "in_axes")
    _check_spec(fun, out_axes, "out_axes")

    def emit(*args, **kwargs):
        return _emit(fun, in_axes, out_axes, args, kwargs)

    @functools.wraps(fun)
    def batched(*args, **kwargs):   # (what the transforms of the vmapped function trace)
        return emit(*args, **kwargs)

    return Staged(batched, emit)


def make_vmap_ir(fun: Callable, in_axes: Any, out_axes: Any, args: tuple) -> Graph:
    """The graph tk.vmap(fun, in_axes, out_axes) runs on `args`, its inputs noted with their batch axis."""
    graph = vmap(fun, in_axes, out_axes)._signature(args).make_graph()[0]
    flat = flatten_call(fun, args)
    axes = [ax for td, spec in zip(flat.treedefs, _per_argument(fun, in_axes, len(args)))
            for ax in _leaf_axes(fun_name(fun), spec, td, "in_axes")]
    notes = [f"batch axis {ax % len(a.shape)}" if ax is not None else "" for ax, a in zip(axes, flat.avals)]
    return dataclasses.replace(graph, input_notes=tuple(notes + [""] * (len(graph.inputs) - len(notes))))


# ----------------------------------------------------------------------------- axes against pytrees


def _check_spec(fun: Callable, spec: Any, what: str) -> None:
    if spec is None or (isinstance(spec, int) and not isinstance(spec, bool)):
        return
    if isinstance(spec, (tuple, list)):
        for s in spec:
            _check_spec(fun, s, what)
        return
    if isinstance(spec, dict):
        for s in spec.values():
            _check_spec(fun, s, what)
        return
    raise TypeError(with_location(f"tk.vmap of {fun_name(fun)}: {what} must be an int, None, or tuples, lists and dicts "
                                  f"of them (a pytree prefix), got {type(spec).__name__} {spec!r:.60}"))


def _per_argument(fun: Callable, in_axes: Any, nargs: int) -> list:
    """One in_axes entry per positional argument."""
    if isinstance(in_axes, (tuple, list)):
        if len(in_axes) != nargs:
            raise ValueError(with_location(
                f"tk.vmap of {fun_name(fun)}: in_axes {in_axes!r} has {len(in_axes)} entries, but the function was called "
                f"with {nargs} positional arguments; a tuple in_axes has one entry per argument (an int, None, or a "
                "pytree prefix of that argument)"))
        return list(in_axes)
    if isinstance(in_axes, dict):
        raise TypeError(with_location(f"tk.vmap of {fun_name(fun)}: in_axes is a dict; at the top level it must be an int, "
                                      "None, or a tuple with one entry per positional argument"))
    return [in_axes] * nargs


def _leaf_axes(name: str, spec: Any, td: TreeDef, what: str, where: str = "the value", path: str = "") -> list:
    """The axis (or None) of each leaf of a pytree of structure `td`, from its prefix `spec`."""
    if spec is None or isinstance(spec, int):
        return [spec] * td.num_leaves
    if td.kind in ("tuple", "list", "namedtuple") and isinstance(spec, (tuple, list)) and len(spec) == len(td.children):
        return [a for i, (s, c) in enumerate(zip(spec, td.children))
                for a in _leaf_axes(name, s, c, what, where, f"{path}[{i}]")]
    if td.kind == "dict" and isinstance(spec, dict) and set(spec) == set(td.meta):
        return [a for k, c in zip(td.meta, td.children) for a in _leaf_axes(name, spec[k], c, what, where, f"{path}[{k!r}]")]
    raise ValueError(with_location(
        f"tk.vmap of {name}: {what}{path} is {spec!r}, which does not match the structure of {where}{path}, {td!r}: "
        f"a container in {what} must have the same kind and length (or keys) as the value it describes, or be "
        "replaced by one int or None for all of it"))


# ----------------------------------------------------------------------------- the emit


def _emit(fun: Callable, in_axes: Any, out_axes: Any, args: tuple, kwargs: dict):
    name = fun_name(fun)
    specs = _per_argument(fun, in_axes, len(args))
    # arguments not batched at all reach the function as they are (traced values as closures,
    # constants as constants, static Python values as themselves)
    mapped = [i for i, s in enumerate(specs) if any(a is not None for a in tree_flatten(s)[0])]
    dyn = tuple(args[i] for i in mapped) + ((kwargs,) if kwargs else ())
    dyn_specs = [specs[i] for i in mapped] + ([0] if kwargs else [])
    names = [arg_name(fun, i) for i in mapped] + ["keyword arguments"]
    flat = flatten_call(fun, dyn, names=lambda k: names[k])
    axes, where = [], []
    for k, (td, spec) in enumerate(zip(flat.treedefs, dyn_specs)):
        what = ("in_axes" + (f"[{mapped[k]}]" if isinstance(in_axes, (tuple, list)) else "") if k < len(mapped)
                else "the in_axes of keyword arguments")
        axes += _leaf_axes(name, spec, td, what, names[k])
        where += [names[k] + (f" at {p}" if p else "") for p in leaf_paths(td)]
    size, lane_avals = _batch_size(name, flat.avals, axes, where)
    axes = [None if ax is None else ax % len(a.shape) for ax, a in zip(axes, flat.avals)]

    def lane(*leaves):
        vals = flat.unflatten(leaves)
        full = list(args)
        for i, v in zip(mapped, vals):
            full[i] = v
        return fun(*full, **(vals[-1] if kwargs else {}))

    graph, out_td, captured = trace_to_graph(lane, lane_avals, flat.weak)
    builder = current_builder()
    ins = [_value(builder, x) for x in list(flat.leaves) + list(captured)]
    ins = [lanes.moveaxis(x, ax, 0) if ax else x for x, ax in zip(ins, axes + [None] * len(captured))]
    flags = [ax is not None for ax in axes] + [False] * len(captured)
    outs, out_flags = batching.batch_into(builder, graph, ins, flags)
    return tree_unflatten(out_td, _place_outputs(name, graph, out_td, out_axes, outs, out_flags, size))


def _value(builder, x) -> Value:
    """An operand as a value of the trace that is running (constants become its constants)."""
    x = _read(x)
    if isinstance(x, Tracer) and x.builder is builder:
        return x
    return builder._value(builder.var_of(x))


def _batch_size(name: str, avals: Sequence[Aval], axes: Sequence, where: Sequence[str]) -> tuple[int, list[Aval]]:
    """The batch size every batched leaf agrees on, and each leaf's aval in one lane."""
    sizes, lane_avals = {}, []
    for aval, ax, w in zip(avals, axes, where):
        if ax is None:
            lane_avals.append(aval)
            continue
        if not aval.shape:
            raise ValueError(with_location(
                f"tk.vmap of {name}: {w} is 0-d ({aval}), so it has no axis {ax} to map over; give it in_axes None "
                "(the same value in every lane) or pass an array with a batch axis"))
        if not -len(aval.shape) <= ax < len(aval.shape):
            raise ValueError(with_location(
                f"tk.vmap of {name}: in_axes {ax} for {w}, which has shape {aval.shape}: there is no axis {ax} in "
                f"{len(aval.shape)} dimensions (axes go from {-len(aval.shape)} to {len(aval.shape) - 1})"))
        a = ax % len(aval.shape)
        sizes.setdefault(aval.shape[a], []).append(f"{w} (shape {aval.shape}, axis {ax})")
        lane_avals.append(Aval(aval.shape[:a] + aval.shape[a + 1:], aval.dtype))
    if not sizes:
        raise ValueError(with_location(
            f"tk.vmap of {name}: in_axes map over no argument (every leaf is None), so there is no batch; give at "
            "least one argument an axis"))
    if len(sizes) > 1:
        listed = "; ".join(f"size {s}: " + ", ".join(ws) for s, ws in sizes.items())
        raise ValueError(with_location(
            f"tk.vmap of {name}: the batched arguments disagree on the batch size ({listed}); every batched leaf "
            "needs the same size along its in_axes axis"))
    size = next(iter(sizes))
    if size == 0:
        raise ValueError(with_location(f"tk.vmap of {name}: the batch axis has size 0 ({next(iter(sizes.values()))[0]}); "
                                       "tk.vmap needs at least one lane"))
    return size, lane_avals


def _place_outputs(name: str, graph: Graph, out_td: TreeDef, out_axes: Any, outs: list, flags: list, size: int) -> list:
    """Each output with its batch axis where out_axes puts it (an unbatched one broadcast), or
    without one for out_axes None."""
    specs = _leaf_axes(name, out_axes, out_td, "out_axes", "the result")
    made = {v: e.source for e in graph.eqns for v in e.outputs}
    result = []
    for x, b, ax, v, path in zip(outs, flags, specs, graph.outputs, leaf_paths(out_td)):
        where = f"output {path}" if path else "the output"
        if ax is None:
            if b:
                src = made.get(v)
                raise ValueError(with_location(
                    f"tk.vmap of {name}: out_axes is None for {where} ({v.aval} per lane), but it depends on the "
                    f"batched arguments, so it differs between lanes"
                    + (f" (it is made at {src})" if src else "")
                    + "; give it an out_axes (e.g. 0) to get every lane's value, or compute it outside the mapped "
                    "function"))
            result.append(x)
            continue
        nd = len(v.aval.shape) + 1
        if not -nd <= ax < nd:
            raise ValueError(with_location(
                f"tk.vmap of {name}: out_axes {ax} for {where}, which is {v.aval} per lane and so has {nd} dimensions "
                f"with the batch axis: axes go from {-nd} to {nd - 1}"))
        x = x if b else lanes.broadcast(x, size)
        result.append(lanes.moveaxis(x, 0, ax % nd))
    return result
