"""Tracing and binding: Builders record equations; Tracers stand for arrays while a user function runs.

trace_to_graph(fn, avals) runs fn on tracers and returns the Graph it built. Binding a primitive
happens here: `bind` stages it into the trace that is running (the ambient builder; NumPy when
nothing is traced), `Builder.bind` into a builder given explicitly, which is how transforms build
IR (through tracekern.primitives.ops on Values, never through Tracers and their operators)."""
from __future__ import annotations

import contextlib
import linecache
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import passes
from .errors import (
    ShapeError,
    TracerBoolError,
    TracerLeakError,
    describe_location,
    library_call,
    numpy_call,
    traced_fill_error,
    user_frame_location,
    with_location,
)
from .ir import MAX_RANK, SUPPORTED_DTYPES, Aval, Eqn, Graph, Var, rank_error, verify
from .primitives.core import eval_graph
from .primitives.shape import const
from .pytree import TreeDef, leaf_paths, tree_flatten, tree_unflatten

# ----------------------------------------------------------------------------- values


class Value:
    """A value of a graph being built: a Var of a Builder. Transform rules get these and build IR
    from them with tracekern.primitives.ops (no operators: see Tracer for the user-facing kind)."""

    __slots__ = ("builder", "ir_var")

    def __init__(self, builder: Builder, var: Var):
        self.builder = builder
        self.ir_var = var

    aval = property(lambda self: self.ir_var.aval)
    shape = property(lambda self: self.ir_var.aval.shape)
    dtype = property(lambda self: self.ir_var.aval.dtype)
    ndim = property(lambda self: len(self.ir_var.aval.shape))
    size = property(lambda self: self.ir_var.aval.size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}<{self.aval}>"


# ----------------------------------------------------------------------------- builders

_STACK: list[Builder] = []


class Builder:
    """Records the equations of one graph.

    A tracing builder (trace_to_graph) hands out Tracers and may nest: a tracer of an enclosing
    builder used inside an inner one is captured as an extra input of the inner graph (closure
    conversion), and so is a tk.Variable. A plain builder (Builder(), what transforms use) hands
    out Values and captures nothing. `source` is the user's line given to the equations emitted
    now (None: the innermost user frame at the time)."""

    def __init__(self, parent: Builder | None = None, tracing: bool = False, source: str | None = None) -> None:
        self.parent = parent
        self.tracing = tracing
        self.inputs: list[Var] = []
        self.eqns: list[Eqn] = []
        self.captured: dict[int, tuple[Any, Var]] = {}
        self.active = True
        self.source = source

    def new_input(self, aval: Aval, weak: bool = False) -> Value:
        v = Var(aval)
        self.inputs.append(v)
        return Tracer(self, v, weak) if self.tracing else Value(self, v)

    def _value(self, v: Var) -> Value:
        return Tracer(self, v) if self.tracing else Value(self, v)

    def _is_ancestor(self, other: Builder) -> bool:
        b = self.parent
        while b is not None:
            if b is other:
                return True
            b = b.parent
        return False

    def _capture(self, x: Any) -> Var:
        hit = self.captured.get(id(x))
        if hit is None:
            hit = (x, Var(x.aval))
            self.captured[id(x)] = hit
        return hit[1]

    def var_of(self, x: Any) -> Var:
        """The Var for an operand: this builder's value, a captured outer tracer or Variable, or a
        constant. A Variable is captured like an outer value at every level, so the outermost graph
        has it as an input and the caller passes its current value."""
        if isinstance(x, Variable) and self.tracing:
            return self._capture(x)
        if isinstance(x, Value):
            if x.builder is self:
                return x.ir_var
            if self.tracing and isinstance(x, Tracer) and x.builder.active and self._is_ancestor(x.builder):
                return self._capture(x)
            raise TracerLeakError(
                with_location(
                    f"a traced value ({x.aval}) was used outside the function that traced it "
                    "(it leaked out, e.g. through a global or a list). Return it from the traced "
                    "function instead.",
                    None,
                )
            )
        arr = snapshot(as_constant(x))
        return self.emit(const, [], {"value": arr}, self.current_source())[0].ir_var

    def current_source(self) -> str | None:
        return self.source if self.source is not None else user_frame_location()

    @contextlib.contextmanager
    def at(self, source: str | None):
        """Attribute the equations emitted inside to `source` (e.g. a VJP rule's, the forward line)."""
        previous, self.source = self.source, source
        try:
            yield
        finally:
            self.source = previous

    def emit(self, prim, in_vars: Sequence[Var], params: dict, source: str | None) -> list[Value]:
        avals = [v.aval for v in in_vars]
        try:
            out_avals = prim.abstract_eval(*avals, **params)
        except (ShapeError, TypeError, ValueError, IndexError) as e:
            raise type(e)(with_location(str(e), source)) from None
        for a in out_avals:
            if len(a.shape) > MAX_RANK:
                what = "a constant" if prim is const else f"the result of {prim.name}"
                raise ShapeError(with_location(rank_error(a.shape, f"{what} ({a.dtype})"), source))
        outs = [Var(a) for a in out_avals]
        self.eqns.append(Eqn(prim, tuple(in_vars), tuple(outs), params, source))
        return [self._value(v) for v in outs]

    def bind(self, prim, *args, **params):
        """Emit prim(*args, **params) here; its output (a tuple when it has several)."""
        source = self.current_source()
        in_vars = [self.var_of(a) for a in args]
        outs = self.emit(prim, in_vars, params, source)
        return tuple(outs) if prim.multiple_results else outs[0]

    def inline(self, graph: Graph, args: Sequence[Any] | None, given: dict[Var, Any] | None = None,
               order: Any = None, env: dict[Var, Any] | None = None, eqns: Sequence[Eqn] | None = None) -> dict:
        """Emit `graph`'s equations (or `eqns`, some of them) on `args`; returns the value of each of
        its Vars. An equation whose outputs are all in `given` is not emitted (its outputs take those
        values); `env` holds values already known. `order`, when given, becomes an extra operand of
        each output-less effect (a print), so that it runs after `order` is computed."""
        env = {} if env is None else env
        if args is not None:
            env.update(zip(graph.inputs, args))
        if given:
            env.update(given)
        for e in graph.eqns if eqns is None else eqns:
            if given and all(v in given for v in e.outputs) and e.outputs:
                continue
            operands = [env[v] for v in e.inputs]
            if order is not None and not e.outputs and e.primitive.has_effects(**e.params):
                operands.append(order)
            with self.at(e.source):
                outs = self.bind(e.primitive, *operands, **e.params)
            env.update(zip(e.outputs, outs if e.primitive.multiple_results else (outs,)))
        return env

    def finish(self, out_leaves: Sequence[Any]) -> tuple[Graph, list]:
        """The graph built, with `out_leaves` as outputs; and the captured outer values, whose
        inputs follow the builder's own."""
        out_vars = [self.var_of(x) for x in out_leaves]
        captured = list(self.captured.values())
        graph = Graph(tuple(self.inputs) + tuple(v for _, v in captured), tuple(self.eqns), tuple(out_vars))
        return graph, [t for t, _ in captured]


def build_graph(fn: Callable, avals: Sequence[Aval], source: str | None = None) -> Graph:
    """The graph of fn(builder, *values) -> list of values, built explicitly (a plain Builder, not
    the ambient trace), simplified and verified: how transforms make sub-graphs."""
    b = Builder(source=source)
    graph, captured = b.finish(fn(b, *[b.new_input(a) for a in avals]))
    assert not captured
    return verify(passes.simplify(graph))


# ----------------------------------------------------------------------------- the ambient trace


def current_builder() -> Builder | None:
    return _STACK[-1] if _STACK else None


@contextlib.contextmanager
def new_builder():
    """A tracing builder for the duration of the block, nested in the current one."""
    b = Builder(parent=current_builder(), tracing=True)
    _STACK.append(b)
    try:
        yield b
    finally:
        _STACK.pop()
        b.active = False


INT32_RANGE = (-2**31, 2**31 - 1)
WIDE = "wide"   # the weak flag of a Python int outside int32's range (see weak_flag)


def weak_flag(x: Any) -> bool | str:
    """How a Python number argument promotes: True (weak, as NumPy 2's Python scalars), WIDE for an
    int outside int32's range (combined with an int32 array, NumPy raises OverflowError, and so does
    tracing), False for anything else."""
    if not isinstance(x, (int, float, complex)) or isinstance(x, np.generic):
        return False
    if isinstance(x, int) and not INT32_RANGE[0] <= x <= INT32_RANGE[1]:
        return WIDE
    return True


def refuse_subclass(x: Any, where: str) -> None:
    """TypeError for an ndarray subclass whose meaning tracekern would drop: a masked array's mask,
    np.matrix's matrix product, or any subclass with NumPy protocols of its own (units, lazy arrays).
    Plain views that mean what their data say (np.memmap) pass."""
    if type(x) is np.ndarray or not isinstance(x, np.ndarray) or type(x) is np.memmap:
        return
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(with_location(
            f"{where} is a masked array (np.ma.MaskedArray{list(x.shape)}, {x.dtype}): tracekern computes on plain "
            "arrays and would drop its mask. Pass x.filled(value) (and, if the mask matters, np.ma.getmaskarray(x) "
            "as a second argument to use with np.where)"))
    if isinstance(x, np.matrix):
        raise TypeError(with_location(
            f"{where} is an np.matrix{list(x.shape)}: its * is a matrix product, tracekern's arrays multiply "
            "elementwise, as ndarrays do. Pass np.asarray(m) and write the matrix product as a @ b"))
    cls = type(x)
    if (cls.__array_ufunc__ is not np.ndarray.__array_ufunc__ or cls.__array_function__ is not np.ndarray.__array_function__
            or getattr(cls, "__array_finalize__", None) is not np.ndarray.__array_finalize__):
        raise TypeError(with_location(
            f"{where} is a {cls.__module__}.{cls.__name__}, a subclass of np.ndarray with behaviour of its own that "
            "tracekern would drop; pass np.asarray(x) (a plain ndarray of the same data)"))


def as_constant(x: Any) -> np.ndarray:
    """A NumPy array for a constant operand, or TypeError for something that is not an array."""
    if isinstance(x, Variable):
        return x.value
    if isinstance(x, (np.ndarray, np.generic, bool, int, float, complex)):
        refuse_subclass(x, "a constant")
        arr = np.asarray(x)
        if arr.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                with_location(f"constant of dtype {arr.dtype} is not supported; tracekern supports "
                              f"{', '.join(d.name for d in SUPPORTED_DTYPES)}. Convert it with .astype().")
            )
        return arr
    raise TypeError(with_location(f"expected an array or a number, got {type(x).__name__}: {x!r:.60}"))


def snapshot(arr: np.ndarray) -> np.ndarray:
    """A constant's value as it is now: an array the caller may still write to is copied, so a NumPy
    array captured by a traced function is read once, when it is traced, whatever its shape and
    whatever the backend (as JAX does; a value that changes between calls is an argument or a
    tk.Variable). Read-only arrays (NumPy's broadcast views made while tracing) are kept as they are;
    a broadcast view of a writable array copies its data, not the broadcast."""
    writable = arr.flags.writeable or (isinstance(arr.base, np.ndarray) and arr.base.flags.writeable)
    if not writable:
        return arr
    if arr.ndim and 0 in arr.strides and arr.size:
        data = arr[tuple(slice(0, 1) if st == 0 else slice(None) for st in arr.strides)]
        return np.broadcast_to(np.array(data), arr.shape)
    return np.array(arr)


def aval_of(x: Any) -> Aval:
    if isinstance(x, (Value, Variable)):
        return x.aval
    a = np.asarray(x)
    return Aval(a.shape, a.dtype)


def bind(prim, *args, **params):
    """Apply a primitive: staged into the trace that is running, evaluated with NumPy otherwise."""
    builder = current_builder()
    if builder is None:
        for a in args:
            if isinstance(a, Value):
                raise TracerLeakError(with_location(f"a traced value ({a.aval}) was used after its trace ended; "
                                                    "return it from the traced function instead."))
        arrays = [as_constant(a) for a in args]
        try:
            prim.abstract_eval(*[Aval(a.shape, a.dtype) for a in arrays], **params)
        except (ShapeError, TypeError, ValueError, IndexError) as e:
            raise type(e)(with_location(str(e))) from None
        out = prim.impl(*arrays, **params)
        return tuple(np.asarray(o) for o in out) if prim.multiple_results else np.asarray(out)
    return builder.bind(prim, *args, **params)


def _assigned_error(aval, location: str | None) -> TracerBoolError:
    err = TracerBoolError(with_location(
        f"a traced value ({aval}) was assigned into a NumPy array (z[i] = value): an array made with "
        "NumPy inside a traced function (np.zeros, np.ones, np.empty...) is a constant and cannot hold "
        "traced values. Write z = tk.at(z)[i].set(value), which returns the updated array (or build the "
        "array with np.stack([...]))", location))
    err.assigned = True
    return err


def inline_graph(graph: Graph, args: Sequence[Any]) -> list[Any]:
    """Emit `graph`'s equations on `args` into the trace that is running (or evaluate them)."""
    builder = current_builder()
    args = [_read(a) for a in args]   # (a Variable: its tracer)
    if builder is None:
        return eval_graph(graph, [as_constant(a) for a in args])
    env = builder.inline(graph, args)
    return [env[v] for v in graph.outputs]


def trace_to_graph(fn: Callable, avals: Sequence[Aval], weak: Sequence[bool] | None = None, name: str | None = None,
                   where: str | None = None, simplify: bool = True):
    """Run fn on fresh tracers. Returns (graph, out_treedef, captured_tracers).

    The graph's inputs are the tracers for `avals` followed by one input per captured outer tracer
    (or Variable); pass `captured_tracers` after the arguments when inlining it. `name` and `where`
    ('file:line' of its definition) name the user's function in errors about its outputs.
    simplify=False: the graph as traced, neither simplified nor verified (finish() it before use; the
    plan cache's key digests it, and a warm start that finds its plan uses nothing else of it)."""
    weak = weak or [False] * len(avals)
    with new_builder() as b:
        tracers = [b.new_input(a, w) for a, w in zip(avals, weak)]
        try:
            out = fn(*tracers)
        except ValueError as err:
            # (NumPy's z[i] = traced asks float(traced), and replaces the error it raises, ours, naming the line
            # and what to write, by "setting an array element with a sequence": ours is the one to raise)
            cause = err.__cause__
            if isinstance(cause, TracerBoolError) and "setting an array element" in str(err):
                if getattr(cause, "assigned", False):
                    raise cause.with_traceback(err.__traceback__) from None
                # (the line's text unknown, python -c: the assignment, known from NumPy's message)
                raise _assigned_error(getattr(cause, "aval", "a value"), getattr(cause, "location", None)) from None
            raise
        leaves, out_td = tree_flatten(out)
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf, (Tracer, Variable, np.ndarray, np.generic, bool, int, float, complex)):
                raise TypeError(with_location(
                    f"output {i} of {name or 'the traced function'} is a {type(leaf).__name__} ({leaf!r:.40}), not an "
                    "array; traced functions must return arrays, numbers, or tuples/lists/dicts of them (a generator: "
                    "return tuple(...) of it)", where))
        graph, captured = b.finish(leaves)
    return (finish(graph) if simplify else graph), out_td, captured


def finish(graph: Graph) -> Graph:
    """A traced graph simplified (passes.simplify) and verified: what trace_to_graph returns."""
    return verify(passes.simplify(graph))


# ----------------------------------------------------------------------------- arguments


@dataclass(frozen=True)
class FlatArgs:
    """Positional arguments flattened to leaves: each leaf's value, aval and weak flag (a Python
    number, which promotes like a scalar), one TreeDef per argument, and the argument each leaf
    belongs to."""

    leaves: tuple
    avals: tuple[Aval, ...]
    weak: tuple[bool, ...]
    treedefs: tuple[TreeDef, ...]
    owner: tuple[int, ...]

    def unflatten(self, flat: Sequence[Any]) -> list:
        """One value per argument, from one value per leaf."""
        out, i = [], 0
        for td in self.treedefs:
            out.append(tree_unflatten(td, list(flat[i:i + td.num_leaves])))
            i += td.num_leaves
        return out


def read_leaf(x: Any, arg: int, path: str) -> tuple[Any, Aval, bool]:
    """The default leaf conversion of flatten_args: Variables read as their value (traced inside a
    trace), traced values and constants kept as they are."""
    x = _read(x)
    return x, aval_of(x), (x.weak if isinstance(x, Tracer) else weak_flag(x))


def flatten_args(args: Sequence[Any], leaf: Callable[[Any, int, str], tuple[Any, Aval, bool]] = read_leaf) -> FlatArgs:
    """Flatten positional arguments (pytrees) to leaves. leaf(x, argument index, path in the
    argument) -> (value, aval, weak) converts each leaf (tracekern.staging names the argument in
    its errors; control flow makes constants arrays)."""
    leaves, avals, weak, treedefs, owner = [], [], [], [], []
    for i, a in enumerate(args):
        ls, td = tree_flatten(a)
        treedefs.append(td)
        for x, path in zip(ls, leaf_paths(td)):
            value, aval, w = leaf(x, i, path)
            leaves.append(value)
            avals.append(aval)
            weak.append(w)
            owner.append(i)
    return FlatArgs(tuple(leaves), tuple(avals), tuple(weak), tuple(treedefs), tuple(owner))


# ----------------------------------------------------------------------------- Tracer


def _read_only(a: np.ndarray) -> np.ndarray:
    view = a.view()
    view.flags.writeable = False
    return view


def _python_number(o) -> bool:
    """A Python number as tracing sees one: a literal, or a weak 0-d traced value (a Python-number argument,
    a loop index over Python-int bounds, or Python arithmetic of them)."""
    return (isinstance(o, Tracer) and bool(o.weak) and not o.aval.shape) or type(o) in (bool, int, float, complex)


def _weak(out):
    """out (a traced value, or a tuple of them) marked weak: it stands for a Python number."""
    if isinstance(out, tuple):
        return tuple(map(_weak, out))
    return Tracer(out.builder, out.ir_var, True) if isinstance(out, Tracer) and not out.weak else out


def _as_int(o):
    """Python's arithmetic reads a bool as an int (True + True is 2, -True is -1), NumPy's bool + bool is True."""
    if type(o) is bool:
        return int(o)
    if isinstance(o, Tracer) and o.dtype == np.bool_:
        return ArrayOps.numpy.astype(o, np.int64)
    return o


def _scalar_op(fn, *operands, bools_as_ints: bool = True):
    """An operator of traced values: a result of Python numbers only (weak traced ones, the scalar arguments,
    and literals) is a Python number too, weak, with Python's rules for bools, as in NumPy, where `s + 1` of a
    Python float s is a Python float, so `x32 * (1 - s)` stays float32, and `b + b` of a Python bool is 2;
    NumPy's functions (np.add(s, 1)) give a strong float64, as NumPy's do. `bools_as_ints=False` for the
    comparisons and &, |, ^, where Python's bools stay bools."""
    if any(isinstance(o, Tracer) for o in operands) and all(map(_python_number, operands)):
        if bools_as_ints:
            operands = tuple(map(_as_int, operands))
        return _weak(fn(*operands))
    return fn(*map(_read, operands))


def _python_rounding(x, how: str, ndigits=None):
    """round(s), math.trunc/floor/ceil(s) of a Python-number argument s: Python's (an int, weak; round(s, n) a
    float). NumPy's arrays define none of them but floor and ceil of a 0-d array (through float())."""
    if not _python_number(x):
        if how in ("floor", "ceil") and not x.aval.shape:
            x.__float__()    # (raises: the value is not known while tracing)
        raise TypeError(with_location(
            f"{how}() of a traced array ({x.aval}): NumPy's arrays do not define it (only Python numbers do); "
            f"use np.{'round' if how == 'round' else how}(x)"))
    if x.dtype.kind == "c":
        raise TypeError(with_location(f"{how}() of a complex number is not defined (Python raises too)"))
    tnp = ArrayOps.numpy
    if how == "round" and ndigits is not None:
        return _weak(tnp.round(_as_int(x), ndigits))
    if x.dtype.kind in "biu":
        return _weak(_as_int(x))
    y = {"round": tnp.rint, "trunc": tnp.trunc, "floor": tnp.floor, "ceil": tnp.ceil}[how](x)
    return _weak(tnp.astype(y, np.int64))


def _read(x):
    """Operands as tracing sees them: a Variable reads as its value (traced inside a trace)."""
    if isinstance(x, Variable):
        return x.read()
    if isinstance(x, (list, tuple)) and any(isinstance(i, Variable) for i in x):
        return type(x)(_read(i) for i in x)
    return x


class ArrayOps:
    """Operators, NumPy protocols and array methods, for anything with an `aval` that tracing reads
    through `_read`: Tracer, and Variable (whose value is an input of the compiled code). They
    dispatch to tracekern.numpy, which registers itself here (`ArrayOps.numpy`) when it is imported:
    the module that defines the traced NumPy functions sits above this one."""

    __slots__ = ()
    numpy: Any = None   # the tracekern.numpy module

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: len(self.aval.shape))
    size = property(lambda self: self.aval.size)
    T = property(lambda self: ArrayOps.numpy.transpose(_read(self)))

    # -- NumPy protocols ----------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(_read(i) for i in inputs)
        if not isinstance(self, Tracer) and current_builder() is None:  # a Variable, eagerly
            return getattr(ufunc, method)(*inputs, **kwargs)
        return ArrayOps.numpy.apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        args = tuple(_read(a) for a in args)
        kwargs = {k: _read(v) for k, v in kwargs.items()}
        if not isinstance(self, Tracer) and current_builder() is None:
            return func(*args, **kwargs)
        return ArrayOps.numpy.apply_array_function(func, args, kwargs)

    # -- operators ----------------------------------------------------------------
    def __add__(self, o): return _scalar_op(ArrayOps.numpy.add, self, o)
    def __radd__(self, o): return _scalar_op(ArrayOps.numpy.add, o, self)
    def __sub__(self, o): return _scalar_op(ArrayOps.numpy.subtract, self, o)
    def __rsub__(self, o): return _scalar_op(ArrayOps.numpy.subtract, o, self)
    def __mul__(self, o): return _scalar_op(ArrayOps.numpy.multiply, self, o)
    def __rmul__(self, o): return _scalar_op(ArrayOps.numpy.multiply, o, self)
    def __truediv__(self, o): return _scalar_op(ArrayOps.numpy.divide, self, o)
    def __rtruediv__(self, o): return _scalar_op(ArrayOps.numpy.divide, o, self)
    def __pow__(self, o): return _scalar_op(ArrayOps.numpy.power, self, o)
    def __rpow__(self, o): return _scalar_op(ArrayOps.numpy.power, o, self)
    def __matmul__(self, o): return ArrayOps.numpy.matmul(_read(self), _read(o))
    def __rmatmul__(self, o): return ArrayOps.numpy.matmul(_read(o), _read(self))
    def __neg__(self): return _scalar_op(ArrayOps.numpy.negative, self)
    def __pos__(self): return _scalar_op(_read, self)   # (+True is 1)
    def __abs__(self): return _scalar_op(ArrayOps.numpy.absolute, self)
    def __lt__(self, o): return _scalar_op(ArrayOps.numpy.less, self, o, bools_as_ints=False)
    def __le__(self, o): return _scalar_op(ArrayOps.numpy.less_equal, self, o, bools_as_ints=False)
    def __gt__(self, o): return _scalar_op(ArrayOps.numpy.greater, self, o, bools_as_ints=False)
    def __ge__(self, o): return _scalar_op(ArrayOps.numpy.greater_equal, self, o, bools_as_ints=False)
    def __eq__(self, o): return _scalar_op(ArrayOps.numpy.equal, self, o, bools_as_ints=False)  # noqa: E704
    def __ne__(self, o): return _scalar_op(ArrayOps.numpy.not_equal, self, o, bools_as_ints=False)
    def __and__(self, o): return _scalar_op(ArrayOps.numpy.bitwise_and, self, o, bools_as_ints=False)
    def __rand__(self, o): return _scalar_op(ArrayOps.numpy.bitwise_and, o, self, bools_as_ints=False)
    def __or__(self, o): return _scalar_op(ArrayOps.numpy.bitwise_or, self, o, bools_as_ints=False)
    def __ror__(self, o): return _scalar_op(ArrayOps.numpy.bitwise_or, o, self, bools_as_ints=False)
    def __xor__(self, o): return _scalar_op(ArrayOps.numpy.bitwise_xor, self, o, bools_as_ints=False)
    def __rxor__(self, o): return _scalar_op(ArrayOps.numpy.bitwise_xor, o, self, bools_as_ints=False)
    def __invert__(self): return _scalar_op(ArrayOps.numpy.invert, self)
    def __floordiv__(self, o): return _scalar_op(ArrayOps.numpy.floor_divide, self, o)
    def __rfloordiv__(self, o): return _scalar_op(ArrayOps.numpy.floor_divide, o, self)
    def __mod__(self, o): return _scalar_op(ArrayOps.numpy.remainder, self, o)
    def __rmod__(self, o): return _scalar_op(ArrayOps.numpy.remainder, o, self)
    def __divmod__(self, o): return _scalar_op(ArrayOps.numpy.divmod, self, o)
    def __rdivmod__(self, o): return _scalar_op(ArrayOps.numpy.divmod, o, self)
    def __lshift__(self, o): return _scalar_op(ArrayOps.numpy.left_shift, self, o)
    def __rlshift__(self, o): return _scalar_op(ArrayOps.numpy.left_shift, o, self)
    def __rshift__(self, o): return _scalar_op(ArrayOps.numpy.right_shift, self, o)
    def __rrshift__(self, o): return _scalar_op(ArrayOps.numpy.right_shift, o, self)
    def __getitem__(self, idx): return ArrayOps.numpy.getitem(_read(self), _read(idx))

    # in place (x += y): NumPy writes into x, so the result keeps x's shape and dtype (the name is rebound: a traced
    # array is a value, and another name for the same array does not see the change, as it would in NumPy)
    def _inplace(self, fn, o, name):
        x = _read(self)
        return ArrayOps.numpy.inplace_result(x, fn(x, _read(o)), name)

    def __iadd__(self, o): return self._inplace(ArrayOps.numpy.add, o, "+")
    def __isub__(self, o): return self._inplace(ArrayOps.numpy.subtract, o, "-")
    def __imul__(self, o): return self._inplace(ArrayOps.numpy.multiply, o, "*")
    def __itruediv__(self, o): return self._inplace(ArrayOps.numpy.divide, o, "/")
    def __ifloordiv__(self, o): return self._inplace(ArrayOps.numpy.floor_divide, o, "//")
    def __imod__(self, o): return self._inplace(ArrayOps.numpy.remainder, o, "%")
    def __ipow__(self, o): return self._inplace(ArrayOps.numpy.power, o, "**")
    def __imatmul__(self, o): return self._inplace(ArrayOps.numpy.matmul, o, "@")
    def __iand__(self, o): return self._inplace(ArrayOps.numpy.bitwise_and, o, "&")
    def __ior__(self, o): return self._inplace(ArrayOps.numpy.bitwise_or, o, "|")
    def __ixor__(self, o): return self._inplace(ArrayOps.numpy.bitwise_xor, o, "^")
    def __ilshift__(self, o): return self._inplace(ArrayOps.numpy.left_shift, o, "<<")
    def __irshift__(self, o): return self._inplace(ArrayOps.numpy.right_shift, o, ">>")

    def __setitem__(self, idx, value):
        location = user_frame_location()
        op = _ITEM_ASSIGNMENT.match(_source_line(location))
        if op and op.group(1):   # x[idx] += v: NumPy reads x[idx], adds, writes back: a repeated index adds once
            raise TypeError(with_location(
                f"traced arrays cannot be assigned to in place (x[idx] {op.group(1)}= v): they are values. NumPy's "
                f"x[idx] {op.group(1)}= v is x = tk.at(x)[idx].set(x[idx] {op.group(1)} v), where a repeated index "
                "takes one update (the last); tk.at(x)[idx].add(v) (or .multiply, .min, .max) accumulates repeated "
                "indices, as np.add.at", location))
        raise TypeError(with_location(
            "traced arrays cannot be assigned to in place (x[idx] = v): they are values. Use "
            "x = tk.at(x)[idx].set(v) (or .add, .multiply, .min, .max), which returns the updated array", location))

    # -- methods ------------------------------------------------------------------
    # (ndarray's methods take NumPy's function's arguments after the array, in the same order: passed on as given)
    def sum(self, *args, **kw): return ArrayOps.numpy.sum(_read(self), *args, **kw)
    def mean(self, *args, **kw): return ArrayOps.numpy.mean(_read(self), *args, **kw)
    def max(self, *args, **kw): return ArrayOps.numpy.max(_read(self), *args, **kw)
    def min(self, *args, **kw): return ArrayOps.numpy.min(_read(self), *args, **kw)
    def prod(self, *args, **kw): return ArrayOps.numpy.prod(_read(self), *args, **kw)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if casting != "unsafe" and not np.can_cast(self.dtype, dtype, casting):
            raise TypeError(with_location(f"Cannot cast array data from {self.dtype!r} to {np.dtype(dtype)!r} according "
                                          f"to the rule {casting!r}"))
        return ArrayOps.numpy.astype(_read(self), dtype)

    def copy(self, order="C"): return ArrayOps.numpy.copy(_read(self))
    def clip(self, *args, **kw): return ArrayOps.numpy.clip(_read(self), *args, **kw)
    def dot(self, *args, **kw): return ArrayOps.numpy.dot(_read(self), *map(_read, args), **kw)
    def squeeze(self, *args, **kw): return ArrayOps.numpy.squeeze(_read(self), *args, **kw)
    def ravel(self, *args, **kw): return ArrayOps.numpy.ravel(_read(self), *args, **kw)
    def flatten(self, *args, **kw): return ArrayOps.numpy.ravel(_read(self), *args, **kw)
    def swapaxes(self, a, b): return ArrayOps.numpy.swapaxes(_read(self), a, b)

    def reshape(self, *shape, order="C"):
        return ArrayOps.numpy.reshape(_read(self), shape[0] if len(shape) == 1 else shape, order)

    # (issue 19: the rest of ndarray's methods that return values)
    mT = property(lambda self: ArrayOps.numpy.matrix_transpose(_read(self)))
    real = property(lambda self: _scalar_op(ArrayOps.numpy.real, self))   # (of a Python number: a Python number)
    imag = property(lambda self: _scalar_op(ArrayOps.numpy.imag, self))
    def argmax(self, *args, **kw): return ArrayOps.numpy.argmax(_read(self), *args, **kw)
    def argmin(self, *args, **kw): return ArrayOps.numpy.argmin(_read(self), *args, **kw)
    def cumsum(self, *args, **kw): return ArrayOps.numpy.cumsum(_read(self), *args, **kw)
    def cumprod(self, *args, **kw): return ArrayOps.numpy.cumprod(_read(self), *args, **kw)
    def all(self, *args, **kw): return ArrayOps.numpy.all(_read(self), *args, **kw)
    def any(self, *args, **kw): return ArrayOps.numpy.any(_read(self), *args, **kw)
    def argsort(self, *args, **kw): return ArrayOps.numpy.argsort(_read(self), *args, **kw)
    def repeat(self, *args, **kw): return ArrayOps.numpy.repeat(_read(self), *args, **kw)
    def take(self, indices, *args, **kw): return ArrayOps.numpy.take(_read(self), _read(indices), *args, **kw)
    def round(self, *args, **kw): return ArrayOps.numpy.round(_read(self), *args, **kw)
    def conj(self): return ArrayOps.numpy.conj(_read(self))
    def conjugate(self): return _scalar_op(ArrayOps.numpy.conj, self)
    def std(self, *args, **kw): return ArrayOps.numpy.std(_read(self), *args, **kw)
    def var(self, *args, **kw): return ArrayOps.numpy.var(_read(self), *args, **kw)
    def diagonal(self, *args, **kw): return ArrayOps.numpy.diagonal(_read(self), *args, **kw)
    def trace(self, *args, **kw): return ArrayOps.numpy.trace(_read(self), *args, **kw)

    def searchsorted(self, *args, **kw): return ArrayOps.numpy.searchsorted(_read(self), *args, **kw)
    def argpartition(self, *args, **kw): return ArrayOps.numpy.argpartition(_read(self), *args, **kw)
    def compress(self, condition, *args, **kw): return ArrayOps.numpy.compress(condition, _read(self), *args, **kw)
    def choose(self, choices, *args, **kw): return ArrayOps.numpy.choose(_read(self), choices, *args, **kw)
    def nonzero(self): return np.nonzero(self)   # (NumPy's function: its error names the data-dependent shape)
    itemsize = property(lambda self: self.aval.dtype.itemsize)
    nbytes = property(lambda self: self.aval.dtype.itemsize * self.aval.size)

    def sort(self, axis=-1, kind=None):
        raise TypeError(with_location("x.sort() sorts in place, and traced arrays are values: use x = np.sort(x)"))

    def _in_place(self, method: str, instead: str):
        raise TypeError(with_location(f"x.{method}() writes into x in place, and traced arrays are values: use {instead}"))

    def partition(self, *args, **kw): self._in_place("partition", "x = np.partition(x, kth)")
    def resize(self, *args, **kw): self._in_place("resize", "x = np.resize(x, shape)")
    def fill(self, *args, **kw): self._in_place("fill", "x = np.full_like(x, value)")
    def put(self, *args, **kw): self._in_place("put", "x = tk.at(x)[idx].set(v) (on x.ravel() for flat positions)")

    @property
    def flat(self):
        """x.flat: NumPy's flat iterator, read-only: x.flat[idx] is x.ravel()[idx]."""
        return _FlatIter(self)

    def transpose(self, *axes):
        return ArrayOps.numpy.transpose(_read(self), axes[0] if len(axes) == 1 else (axes or None))


# a line that assigns to an item or slice: name[...] = ... (not ==)
_ITEM_ASSIGNMENT = re.compile(r"^\s*[\w.]+\s*\[.*\]\s*(\+|-|\*|/|//|%|\*\*|@|&|\||\^)?=(?!=)")


def _source_line(location: str | None) -> str:
    if not location:
        return ""
    filename, _, lineno = location.rpartition(":")
    return linecache.getline(filename, int(lineno)) if lineno.isdigit() else ""


class Tracer(ArrayOps, Value):
    """Stands for an array while a user function is traced. Supports NumPy's protocols and operators."""

    __slots__ = ("weak",)
    __array_priority__ = 1000
    __hash__ = object.__hash__

    def __init__(self, builder: Builder, var: Var, weak: bool | str = False):
        self.builder = builder
        self.ir_var = var
        self.weak = weak  # a Python scalar argument: promotes like a Python scalar, not an array (weak_flag)

    aval = property(lambda self: self.ir_var.aval)

    def __repr__(self) -> str:
        return f"Tracer<{self.aval}>"

    # -- concrete values are not known while tracing ------------------------------
    def _concrete_error(self, what: str):
        location = user_frame_location()
        if _ITEM_ASSIGNMENT.match(_source_line(location)):   # (NumPy's z[i] = traced asks for float(traced))
            return _assigned_error(self.aval, location)
        err = TracerBoolError(
            f"{what} of a traced array ({self.aval}) is not known while tracing: it depends on "
            "the input values.\n"
            f"{describe_location(location)}\n"
            "Use np.where(cond, a, b) (tk.where) to choose between values, tk.cond / tk.while_loop / "
            "tk.fori_loop / tk.scan for control flow, or static_argnums=... for values that are fixed "
            "per call, instead of Python control flow (if / while / bool / int / float) on traced values."
        )
        err.aval, err.location = self.aval, location
        return err

    def __bool__(self):
        raise self._concrete_error("the truth value")

    def __int__(self):
        raise self._concrete_error("the integer value")

    def __float__(self):
        raise self._concrete_error("the float value")

    def __complex__(self):
        raise self._concrete_error("the complex value")

    def __index__(self):
        raise self._concrete_error("the index value")

    def __round__(self, ndigits=None):
        if _python_number(self):   # (Python's, for a Python-number argument: round(s) an int, round(s, 2) a float)
            return _python_rounding(self, "round", ndigits)
        # round(x, n) of a NumPy scalar (what indexing a 0-d element gives) is np.round(x, n); round(x) is a Python
        # int (its value); NumPy's arrays of any other rank have no __round__
        if self.shape:
            raise TypeError(with_location(
                f"round() of a traced array ({self.aval}): NumPy arrays have no __round__ (type numpy.ndarray doesn't "
                "define __round__ method); use np.round(x, decimals)"))
        if ndigits is None:
            raise self._concrete_error("the integer value (round(x))")
        return ArrayOps.numpy.round(self, ndigits)

    def __trunc__(self): return _python_rounding(self, "trunc")
    def __floor__(self): return _python_rounding(self, "floor")
    def __ceil__(self): return _python_rounding(self, "ceil")

    def item(self, *args):
        raise self._concrete_error("the Python value (x.item())")

    def tolist(self):
        raise self._concrete_error("the Python value (x.tolist())")

    def __array__(self, dtype=None, copy=None):
        location = user_frame_location()
        library = library_call()
        name = library.rpartition(".")[2] if library else ""
        if library and library.startswith("scipy.special.") and name in getattr(ArrayOps.numpy, "SCIPY_FUNCTIONS", ()):
            raise TypeError(with_location(
                f"{library} converts its arguments to NumPy arrays with np.asarray, which a traced array ({self.aval}) "
                f"cannot honour (it has no values while tracing). Call tk.scipy.special.{name} instead: the same "
                "signature and results, traced and differentiated (SciPy's ufuncs, such as scipy.special.gammaln, "
                "trace as they are)", location))
        if library is not None:
            raise TypeError(with_location(
                f"{library} converts its arguments to NumPy arrays, which needs their values: a traced array "
                f"({self.aval}) has none while tracing, so {library} cannot be traced. Write it with NumPy "
                "functions on the arrays (tk.numpy has logsumexp, softmax, log_softmax, sigmoid), or call it "
                "outside the traced function and pass its result in", location))
        caller = numpy_call()
        if caller == "full":
            raise traced_fill_error(self.aval)
        if caller and not caller.startswith("_"):
            if hasattr(getattr(np, caller, None), "_implementation"):   # (a function NumPy dispatches)
                raise TypeError(with_location(
                    f"np.{caller} converts a traced array ({self.aval}) to a NumPy array, which needs its values: "
                    "NumPy hands a call to tracekern only when a traced array is passed to it directly, not inside "
                    f"a list or tuple (np.{caller}([a, b]), a nested list) or through an argument it converts first. "
                    f"Pass one array: np.{caller}(np.stack([a, b]), ...)", location))
            raise TypeError(with_location(
                f"np.{caller} converts its arguments to NumPy arrays without handing the call to tracekern (NumPy "
                f"does not dispatch it), and a traced array ({self.aval}) has no values while tracing. A traced "
                "value is already an array with no memory layout: drop the call, or write x.astype(dtype) for a "
                "dtype", location))
        if _ITEM_ASSIGNMENT.match(_source_line(location)):
            raise TypeError(with_location(
                f"a traced value ({self.aval}) was assigned into a NumPy array (z[i] = value): an array made with "
                "NumPy inside a traced function (np.zeros, np.ones, np.empty...) is a constant and cannot hold "
                "traced values. Write z = tk.at(z)[i].set(value), which returns the updated array (or build the "
                "array with np.stack([...]))", location))
        raise TypeError(with_location(
            f"a traced array ({self.aval}) cannot be converted to a NumPy array while tracing "
            "(np.asarray / np.array / float() on a traced value). Keep it as an array expression; "
            "to build an array from traced values use np.stack([...]) or np.concatenate([...]), to write "
            "into one, tk.at(z)[i].set(value), and to change its dtype (np.float32(x), np.asarray(x, dtype)), "
            "x.astype(dtype).", location))

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(with_location("len() of a 0-d traced array"))
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError(with_location("iteration over a 0-d traced array"))
        return (self[i] for i in range(self.shape[0]))


class _FlatIter:
    """x.flat of a traced array: indexing reads x.ravel() (one index: an integer, a slice, an Ellipsis, an
    integer or boolean array); assigning raises, as every in-place write of a traced array does."""

    def __init__(self, x):
        self._x = x

    def __getitem__(self, idx):
        if isinstance(idx, tuple) and len(idx) != 1:
            raise IndexError(with_location(f"too many indices for flat iterator: flat iterator is 1-dimensional, but "
                                           f"{len(idx)} were indexed"))
        if idx is None or isinstance(idx, tuple) and idx[0] is None:
            raise IndexError(with_location("only integers, slices (`:`), ellipsis (`...`) and integer or boolean "
                                           "arrays are valid indices"))
        return ArrayOps.numpy.ravel(_read(self._x))[idx]

    def __setitem__(self, idx, value):
        raise TypeError(with_location(
            "x.flat[idx] = v writes into x in place, and traced arrays are values: use "
            "x = tk.at(x.ravel())[idx].set(v).reshape(x.shape)"))

    def __len__(self) -> int:
        return int(np.prod(self._x.shape))

    def __iter__(self):
        flat = ArrayOps.numpy.ravel(_read(self._x))
        return (flat[i] for i in range(len(self)))


class Variable(ArrayOps):
    """A named, mutable array that traced functions read by closure (SPEC section 3).

    Reading it inside a trace makes its value an input of the compiled code, so v.assign() of a new
    value with the same shape and dtype reuses the compiled code; a new shape or dtype retraces.
    Outside a trace it behaves like its array. Transforms take wrt=[v, ...] for its gradient."""

    __array_priority__ = 1001   # ahead of Tracer, so mixed operations read the Variable first

    def __init__(self, value, name: str | None = None):
        self.name = name
        self._value = self._check(value)

    def _check(self, value) -> np.ndarray:
        if isinstance(value, Value):
            raise TypeError(with_location(
                f"Variable {self.name or ''}: cannot hold a traced value. Assign concrete arrays, outside "
                "traced functions (return the new value from the traced function, then assign it)."))
        if isinstance(value, (list, tuple)):   # (nested lists of numbers, as np.array and TensorFlow take them)
            value = np.asarray(value)
        arr = np.array(as_constant(value))   # a copy: later changes to the caller's array do not leak in
        return arr

    @property
    def aval(self) -> Aval:
        return Aval(self._value.shape, self._value.dtype)

    @property
    def value(self):
        """The current array, read-only (change it with assign(): `p = v.value; p *= 0.9` would have changed
        the Variable behind its back, and TensorFlow's v.numpy() is a copy); inside a traced function, the
        traced value (an input of the graph)."""
        return _read_only(self._value) if current_builder() is None else self.read()

    def read(self):
        b = current_builder()
        if b is None:
            return self._value
        return Tracer(b, b.var_of(self))

    def assign(self, value) -> Variable:
        if current_builder() is not None:
            raise TypeError(with_location(
                f"Variable {self.name or ''}.assign() inside a traced function is not supported: assign "
                "outside, with the value the traced function returns."))
        self._value = self._check(value)
        return self

    def __array__(self, dtype=None, copy=None):
        if current_builder() is not None:
            return self.read().__array__(dtype)   # the tracer's clear error
        if copy:   # (np.array(v): NumPy 2 asks for a copy, and trusts it made)
            return self._value.astype(dtype or self._value.dtype, copy=True)
        return _read_only(self._value) if dtype is None else self._value.astype(dtype)

    def __repr__(self) -> str:
        return f"Variable({self.name + ', ' if self.name else ''}{self._value!r})"

    __hash__ = object.__hash__

    def __len__(self) -> int:
        return len(self._value)
