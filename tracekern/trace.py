"""Tracing: Tracer objects stand for arrays while a user function runs; Builders record equations.

trace_to_graph(fn, avals) runs fn on tracers and returns the Graph it built."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from . import passes
from .errors import (
    ShapeError,
    TracerBoolError,
    TracerLeakError,
    describe_location,
    user_frame_location,
    with_location,
)
from .ir import SUPPORTED_DTYPES, Aval, Eqn, Graph, Var, verify
from .pytree import tree_flatten

# ----------------------------------------------------------------------------- builders

_STACK: list[Builder] = []
_SOURCE_OVERRIDE: list[str | None] = []


class Builder:
    """Records the equations of one graph. Builders nest: a tracer of an enclosing builder used
    inside an inner one is captured as an extra input of the inner graph (closure conversion)."""

    def __init__(self) -> None:
        self.parent = _STACK[-1] if _STACK else None
        self.inputs: list[Var] = []
        self.eqns: list[Eqn] = []
        self.captured: dict[int, tuple[Tracer, Var]] = {}
        self.active = True
        # index of the first equation of the outermost reverse pass being emitted (None outside one)
        self.backward_from: int | None = None
        self._uses: tuple[int, int, set[Var]] = (0, 0, set())

    def used_since(self, start: int) -> set[Var]:
        """Vars read by the equations recorded from index `start` on (kept up to date incrementally)."""
        begin, done, used = self._uses
        if begin != start:
            begin, done, used = start, start, set()
        for e in self.eqns[done:]:
            used.update(e.inputs)
        self._uses = (begin, len(self.eqns), used)
        return used

    def new_input(self, aval: Aval, weak: bool = False) -> Tracer:
        v = Var(aval)
        self.inputs.append(v)
        return Tracer(self, v, weak)

    def _is_ancestor(self, other: Builder) -> bool:
        b = self.parent
        while b is not None:
            if b is other:
                return True
            b = b.parent
        return False

    def var_of(self, x: Any) -> Var:
        """The Var for an operand: this builder's tracer, a captured outer tracer or Variable, or a
        constant. A Variable is captured like an outer value at every level, so the outermost graph
        has it as an input and the caller passes its current value."""
        if isinstance(x, Variable):
            hit = self.captured.get(id(x))
            if hit is None:
                hit = (x, Var(x.aval))
                self.captured[id(x)] = hit
            return hit[1]
        if isinstance(x, Tracer):
            if x.builder is self:
                return x.var
            if x.builder.active and self._is_ancestor(x.builder):
                hit = self.captured.get(id(x))
                if hit is None:
                    hit = (x, Var(x.aval))
                    self.captured[id(x)] = hit
                return hit[1]
            raise TracerLeakError(
                with_location(
                    f"a traced value ({x.aval}) was used outside the function that traced it "
                    "(it leaked out, e.g. through a global or a list). Return it from the traced "
                    "function instead.",
                    None,
                )
            )
        arr = as_constant(x)
        from .primitives.shape import const

        return self.emit(const, [], {"value": arr}, current_source())[0].var

    def emit(self, prim, in_vars: Sequence[Var], params: dict, source: str | None) -> list[Tracer]:
        avals = [v.aval for v in in_vars]
        try:
            out_avals = prim.abstract_eval(*avals, **params)
        except (ShapeError, TypeError, ValueError, IndexError) as e:
            raise type(e)(with_location(str(e), source)) from None
        outs = [Var(a) for a in out_avals]
        self.eqns.append(Eqn(prim, tuple(in_vars), tuple(outs), params, source))
        return [Tracer(self, v) for v in outs]

    def finish(self, out_leaves: Sequence[Any]) -> tuple[Graph, list[Tracer]]:
        out_vars = [self.var_of(x) for x in out_leaves]
        captured = list(self.captured.values())
        graph = Graph(tuple(self.inputs) + tuple(v for _, v in captured), tuple(self.eqns), tuple(out_vars))
        return graph, [t for t, _ in captured]


def current_builder() -> Builder | None:
    return _STACK[-1] if _STACK else None


@contextlib.contextmanager
def new_builder():
    b = Builder()
    _STACK.append(b)
    try:
        yield b
    finally:
        _STACK.pop()
        b.active = False


@contextlib.contextmanager
def source_override(source: str | None):
    """Attribute equations emitted inside (e.g. by a VJP rule) to `source`, the forward line."""
    _SOURCE_OVERRIDE.append(source)
    try:
        yield
    finally:
        _SOURCE_OVERRIDE.pop()


def current_source() -> str | None:
    if _SOURCE_OVERRIDE and _SOURCE_OVERRIDE[-1] is not None:
        return _SOURCE_OVERRIDE[-1]
    return user_frame_location()


# ----------------------------------------------------------------------------- values


def as_constant(x: Any) -> np.ndarray:
    """A NumPy array for a constant operand, or TypeError for something that is not an array."""
    if isinstance(x, Variable):
        return x.value
    if isinstance(x, (np.ndarray, np.generic, bool, int, float)):
        arr = np.asarray(x)
        if arr.dtype not in SUPPORTED_DTYPES:
            raise TypeError(
                with_location(f"constant of dtype {arr.dtype} is not supported; tracekern supports "
                              f"{', '.join(d.name for d in SUPPORTED_DTYPES)}. Convert it with .astype().")
            )
        return arr
    raise TypeError(with_location(f"expected an array or a number, got {type(x).__name__}: {x!r:.60}"))


def aval_of(x: Any) -> Aval:
    if isinstance(x, (Tracer, Variable)):
        return x.aval
    a = np.asarray(x)
    return Aval(a.shape, a.dtype)


def bind(prim, args: Sequence[Any], params: dict):
    """Apply a primitive: staged into the current builder while tracing, evaluated with NumPy otherwise."""
    builder = current_builder()
    if builder is None:
        for a in args:
            if isinstance(a, Tracer):
                raise TracerLeakError(with_location(f"a traced value ({a.aval}) was used after its trace ended; "
                                                    "return it from the traced function instead."))
        arrays = [as_constant(a) for a in args]
        try:
            prim.abstract_eval(*[Aval(a.shape, a.dtype) for a in arrays], **params)
        except (ShapeError, TypeError, ValueError, IndexError) as e:
            raise type(e)(with_location(str(e))) from None
        out = prim.impl(*arrays, **params)
        return tuple(np.asarray(o) for o in out) if prim.multiple_results else np.asarray(out)
    source = current_source()
    in_vars = [builder.var_of(a) for a in args]
    outs = builder.emit(prim, in_vars, params, source)
    return tuple(outs) if prim.multiple_results else outs[0]


def inline_graph(graph: Graph, args: Sequence[Any]) -> list[Any]:
    """Emit `graph`'s equations on `args` into the current builder (or evaluate them eagerly)."""
    env = inline_env(graph, args)
    return [env[v] for v in graph.outputs]


def inline_env(graph: Graph, args: Sequence[Any], given: dict[Var, Any] | None = None,
               order: Any = None) -> dict[Var, Any]:
    """Values of all of graph's Vars after emitting its equations on args; an equation whose outputs
    are all in `given` is not emitted (its outputs take those values). `order`, when given, becomes
    an extra operand of each output-less effect (a print), so it runs after `order` is computed."""
    env: dict[Var, Any] = dict(zip(graph.inputs, [_read(a) for a in args]))   # (a Variable: its tracer)
    if given:
        env.update(given)
    for e in graph.eqns:
        if given and all(v in given for v in e.outputs) and e.outputs:
            continue
        operands = [env[v] for v in e.inputs]
        if order is not None and not e.outputs and e.primitive.has_effects(**e.params):
            operands.append(order)
        with source_override(e.source):
            outs = bind(e.primitive, operands, e.params)
        outs = outs if e.primitive.multiple_results else (outs,)
        env.update(zip(e.outputs, outs))
    return env


def trace_to_graph(fn: Callable, avals: Sequence[Aval], weak: Sequence[bool] | None = None):
    """Run fn on fresh tracers. Returns (graph, out_treedef, captured_tracers, out_leaves_were_tracers).

    The graph's inputs are the tracers for `avals` followed by one input per captured outer tracer;
    pass `captured_tracers` after the arguments when inlining it."""
    weak = weak or [False] * len(avals)
    with new_builder() as b:
        tracers = [b.new_input(a, w) for a, w in zip(avals, weak)]
        out = fn(*tracers)
        leaves, out_td = tree_flatten(out)
        for i, leaf in enumerate(leaves):
            if not isinstance(leaf, (Tracer, Variable, np.ndarray, np.generic, bool, int, float)):
                raise TypeError(
                    f"output {i} of the traced function is a {type(leaf).__name__}, not an array; "
                    "traced functions must return arrays, numbers, or tuples/lists/dicts of them"
                )
        graph, captured = b.finish(leaves)
    graph = verify(passes.simplify(graph))
    return graph, out_td, captured


# ----------------------------------------------------------------------------- Tracer


def _tnp():
    from . import numpy as tnp

    return tnp


def _read(x):
    """Operands as tracing sees them: a Variable reads as its value (traced inside a trace)."""
    if isinstance(x, Variable):
        return x.read()
    if isinstance(x, (list, tuple)) and any(isinstance(i, Variable) for i in x):
        return type(x)(_read(i) for i in x)
    return x


class ArrayOps:
    """Operators, NumPy protocols and array methods, for anything with an `aval` that tracing reads
    through `_read`: Tracer, and Variable (whose value is an input of the compiled code)."""

    __slots__ = ()

    shape = property(lambda self: self.aval.shape)
    dtype = property(lambda self: self.aval.dtype)
    ndim = property(lambda self: len(self.aval.shape))
    size = property(lambda self: self.aval.size)
    T = property(lambda self: _tnp().transpose(_read(self)))

    # -- NumPy protocols ----------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        inputs = tuple(_read(i) for i in inputs)
        if not isinstance(self, Tracer) and current_builder() is None:  # a Variable, eagerly
            return getattr(ufunc, method)(*inputs, **kwargs)
        return _tnp().apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        args = tuple(_read(a) for a in args)
        kwargs = {k: _read(v) for k, v in kwargs.items()}
        if not isinstance(self, Tracer) and current_builder() is None:
            return func(*args, **kwargs)
        return _tnp().apply_array_function(func, args, kwargs)

    # -- operators ----------------------------------------------------------------
    def __add__(self, o): return _tnp().add(_read(self), _read(o))
    def __radd__(self, o): return _tnp().add(_read(o), _read(self))
    def __sub__(self, o): return _tnp().subtract(_read(self), _read(o))
    def __rsub__(self, o): return _tnp().subtract(_read(o), _read(self))
    def __mul__(self, o): return _tnp().multiply(_read(self), _read(o))
    def __rmul__(self, o): return _tnp().multiply(_read(o), _read(self))
    def __truediv__(self, o): return _tnp().divide(_read(self), _read(o))
    def __rtruediv__(self, o): return _tnp().divide(_read(o), _read(self))
    def __pow__(self, o): return _tnp().power(_read(self), _read(o))
    def __rpow__(self, o): return _tnp().power(_read(o), _read(self))
    def __matmul__(self, o): return _tnp().matmul(_read(self), _read(o))
    def __rmatmul__(self, o): return _tnp().matmul(_read(o), _read(self))
    def __neg__(self): return _tnp().negative(_read(self))
    def __pos__(self): return _read(self)
    def __abs__(self): return _tnp().absolute(_read(self))
    def __lt__(self, o): return _tnp().less(_read(self), _read(o))
    def __le__(self, o): return _tnp().less_equal(_read(self), _read(o))
    def __gt__(self, o): return _tnp().greater(_read(self), _read(o))
    def __ge__(self, o): return _tnp().greater_equal(_read(self), _read(o))
    def __eq__(self, o): return _tnp().equal(_read(self), _read(o))  # noqa: E704
    def __ne__(self, o): return _tnp().not_equal(_read(self), _read(o))
    def __and__(self, o): return _tnp().logical_and(_read(self), _read(o))
    def __rand__(self, o): return _tnp().logical_and(_read(o), _read(self))
    def __or__(self, o): return _tnp().logical_or(_read(self), _read(o))
    def __ror__(self, o): return _tnp().logical_or(_read(o), _read(self))
    def __invert__(self): return _tnp().logical_not(_read(self))
    def __getitem__(self, idx): return _tnp().getitem(_read(self), idx)

    # -- methods ------------------------------------------------------------------
    def sum(self, axis=None, dtype=None, keepdims=False): return _tnp().sum(_read(self), axis, dtype, keepdims=keepdims)
    def mean(self, axis=None, dtype=None, keepdims=False): return _tnp().mean(_read(self), axis, dtype, keepdims=keepdims)
    def max(self, axis=None, keepdims=False): return _tnp().max(_read(self), axis, keepdims=keepdims)
    def min(self, axis=None, keepdims=False): return _tnp().min(_read(self), axis, keepdims=keepdims)
    def prod(self, axis=None, dtype=None, keepdims=False): return _tnp().prod(_read(self), axis, dtype, keepdims=keepdims)
    def astype(self, dtype): return _tnp().astype(_read(self), dtype)
    def clip(self, a_min=None, a_max=None): return _tnp().clip(_read(self), a_min, a_max)
    def dot(self, o): return _tnp().dot(_read(self), _read(o))
    def squeeze(self, axis=None): return _tnp().squeeze(_read(self), axis)
    def ravel(self): return _tnp().ravel(_read(self))
    def flatten(self): return _tnp().ravel(_read(self))
    def swapaxes(self, a, b): return _tnp().swapaxes(_read(self), a, b)

    def reshape(self, *shape):
        return _tnp().reshape(_read(self), shape[0] if len(shape) == 1 else shape)

    def transpose(self, *axes):
        return _tnp().transpose(_read(self), axes[0] if len(axes) == 1 else (axes or None))


class Tracer(ArrayOps):
    """Stands for an array while a function is traced. Supports NumPy's protocols and operators."""

    __slots__ = ("builder", "var", "weak")
    __array_priority__ = 1000
    __hash__ = object.__hash__

    def __init__(self, builder: Builder, var: Var, weak: bool = False):
        self.builder = builder
        self.var = var
        self.weak = weak  # a Python scalar argument: promotes like a Python scalar, not an array

    aval = property(lambda self: self.var.aval)

    def __repr__(self) -> str:
        return f"Tracer<{self.aval}>"

    # -- concrete values are not known while tracing ------------------------------
    def _concrete_error(self, what: str):
        return TracerBoolError(
            f"{what} of a traced array ({self.aval}) is not known while tracing: it depends on "
            "the input values.\n"
            f"{describe_location(user_frame_location())}\n"
            "Use np.where(cond, a, b) (tk.where) to choose between values, tk.cond / tk.while_loop / "
            "tk.fori_loop / tk.scan for control flow, or static_argnums=... for values that are fixed "
            "per call, instead of Python control flow (if / while / bool / int / float) on traced values."
        )

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

    def __array__(self, dtype=None, copy=None):
        raise TypeError(
            with_location(
                f"a traced array ({self.aval}) cannot be converted to a NumPy array while tracing "
                "(np.asarray / np.array / float() on a traced value). Keep it as an array expression; "
                "to build an array from traced values use np.stack([...]) or np.concatenate([...])."
            )
        )

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError(with_location("len() of a 0-d traced array"))
        return self.shape[0]

    def __iter__(self):
        if not self.shape:
            raise TypeError(with_location("iteration over a 0-d traced array"))
        return (self[i] for i in range(self.shape[0]))


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
        if isinstance(value, Tracer):
            raise TypeError(with_location(
                f"Variable {self.name or ''}: cannot hold a traced value. Assign concrete arrays, outside "
                "traced functions (return the new value from the traced function, then assign it)."))
        arr = np.array(as_constant(value))   # a copy: later changes to the caller's array do not leak in
        return arr

    @property
    def aval(self) -> Aval:
        return Aval(self._value.shape, self._value.dtype)

    @property
    def value(self):
        """The current array; inside a traced function, the traced value (an input of the graph)."""
        return self.read()

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
        return self._value if dtype is None else self._value.astype(dtype)

    def __repr__(self) -> str:
        return f"Variable({self.name + ', ' if self.name else ''}{self._value!r})"

    __hash__ = object.__hash__

    def __len__(self) -> int:
        return len(self._value)
