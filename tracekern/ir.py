"""The IR: variables with shape and dtype, equations, graphs; a printer and a verifier.

All of it is frozen data. Transforms build new graphs; nothing mutates one in place."""
from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .errors import IRError

SUPPORTED_DTYPES = tuple(np.dtype(d) for d in ("float32", "float64", "int32", "int64", "bool", "complex64", "complex128"))
FLOAT_DTYPES = (np.dtype("float32"), np.dtype("float64"))
COMPLEX_DTYPES = (np.dtype("complex64"), np.dtype("complex128"))
# The most dimensions an array may have: NumPy's ufuncs (and so the interpreter, and the gradients
# of the other backends) stop at 32, though an ndarray may have 64.
MAX_RANK = 32
_SHORT = {"float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "bool", "complex64": "c64",
          "complex128": "c128"}


def rank_error(shape: tuple, what: str) -> str | None:
    """The message for `what` (an argument, an operation's result) of `shape` when its rank passes
    MAX_RANK, else None."""
    if len(shape) <= MAX_RANK:
        return None
    return (f"{what} has rank {len(shape)} (shape {tuple(shape)}); tracekern supports arrays of at most {MAX_RANK} "
            f"dimensions (NumPy's ufuncs stop at {MAX_RANK}). Merge axes with a reshape before this, or keep "
            f"fewer dimensions of length 1.")


def is_float(dtype: np.dtype) -> bool:
    """A real floating-point dtype (float32, float64)."""
    return np.dtype(dtype) in FLOAT_DTYPES


def is_complex(dtype: np.dtype) -> bool:
    return np.dtype(dtype) in COMPLEX_DTYPES


def is_inexact(dtype: np.dtype) -> bool:
    """A dtype gradients flow through: float32, float64, complex64, complex128."""
    return np.dtype(dtype) in FLOAT_DTYPES or np.dtype(dtype) in COMPLEX_DTYPES


def real_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of a complex dtype's parts (complex64 -> float32); a real dtype itself."""
    dtype = np.dtype(dtype)
    return {"complex64": np.dtype("float32"), "complex128": np.dtype("float64")}.get(dtype.name, dtype)


def complex_dtype(dtype: np.dtype) -> np.dtype:
    """The complex dtype with parts of a float dtype (float32 -> complex64; integers -> complex128)."""
    dtype = np.dtype(dtype)
    return dtype if dtype in COMPLEX_DTYPES else np.dtype("complex64" if dtype == np.float32 else "complex128")


@dataclass(frozen=True)
class Aval:
    """Abstract value: what is known about an array while tracing."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __str__(self) -> str:
        text = _AVAL_TEXT.get(self)
        if text is None:   # (a warm start's plan key writes every value's: NumPy's dtype.name is slow)
            text = f"{_SHORT.get(self.dtype.name, self.dtype.name)}[{','.join(map(str, self.shape))}]"
            if len(_AVAL_TEXT) < 4096:
                _AVAL_TEXT[self] = text
        return text


_AVAL_TEXT: dict[Aval, str] = {}


_ids = itertools.count()


@dataclass(frozen=True, eq=False)
class Var:
    """A value in a graph. Identity is the variable: two Vars are equal only if they are the same."""

    aval: Aval
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def shape(self) -> tuple[int, ...]:
        return self.aval.shape

    @property
    def dtype(self) -> np.dtype:
        return self.aval.dtype

    @property
    def ndim(self) -> int:
        return self.aval.ndim

    @property
    def size(self) -> int:
        return self.aval.size

    def __repr__(self) -> str:
        return f"Var#{self.id}:{self.aval}"


@dataclass(frozen=True, eq=False)
class Eqn:
    """outputs = primitive(*inputs, **params); `source` is the user's 'file:line' that made it."""

    primitive: Any  # tracekern.primitives.Primitive (kept untyped to avoid an import cycle)
    inputs: tuple[Var, ...]
    outputs: tuple[Var, ...]
    params: dict
    source: str | None = None


@dataclass(frozen=True, eq=False)
class Graph:
    """A function from `inputs` to `outputs`. Sub-graphs of higher-order primitives live in params."""

    inputs: tuple[Var, ...]
    eqns: tuple[Eqn, ...]
    outputs: tuple[Var, ...]
    # Names shown by the printer next to inputs (e.g. "saved" for residuals of a backward pass),
    # and next to equations' outputs (e.g. "recomputed" for forward values a backward pass remakes).
    input_notes: tuple[str, ...] = ()
    eqn_notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return format_graph(self)

    def __repr__(self) -> str:
        return f"<Graph {len(self.inputs)} inputs, {len(self.eqns)} eqns, {len(self.outputs)} outputs>"

    @property
    def primitive_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for e in self.eqns:
            counts[e.primitive.name] = counts.get(e.primitive.name, 0) + 1
        return counts


# ----------------------------------------------------------------------------- printer


def _name_gen():
    for n in itertools.count():
        s = ""
        n += 1
        while n:
            n, r = divmod(n - 1, 26)
            s = chr(97 + r) + s
        yield s


def format_param(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= 6:
            return np.array2string(value, separator=",").replace("\n", "")
        return f"<array {value.dtype.name}{list(value.shape)}>"
    if isinstance(value, np.dtype):
        return value.name
    if isinstance(value, Graph):
        return f"<graph {len(value.eqns)} eqns>"
    return repr(value)


def format_graph(graph: Graph, indent: str = "", show_source: bool = True) -> str:
    names: dict[Var, str] = {}
    gen = _name_gen()

    def name(v: Var) -> str:
        if v not in names:
            names[v] = next(gen)
        return names[v]

    notes = graph.input_notes or ("",) * len(graph.inputs)
    ins = ", ".join(f"{name(v)}:{v.aval}" + (f" ({n})" if n else "") for v, n in zip(graph.inputs, notes))
    lines = [f"{indent}{{ lambda {ins} ."]
    body = []
    eqn_notes = graph.eqn_notes or ("",) * len(graph.eqns)
    for e, note in zip(graph.eqns, eqn_notes):
        outs = " ".join(f"{name(v)}:{v.aval}" for v in e.outputs) + (f" ({note})" if note else "")
        params = ", ".join(f"{k}={format_param(p)}" for k, p in e.params.items())
        args = " ".join(name(v) for v in e.inputs)
        text = f"{outs} = {e.primitive.name}" + (f"[{params}]" if params else "") + (f" {args}" if args else "")
        body.append((text, e.source))
    width = min(max((len(t) for t, _ in body), default=0), 72)
    for text, src in body:
        if show_source and src:
            short = src.rsplit("/", 1)[-1]
            lines.append(f"{indent}    {text.ljust(width)}  # {short}")
        else:
            lines.append(f"{indent}    {text}")
    outs = ", ".join(name(v) for v in graph.outputs)
    lines.append(f"{indent}  in ({outs}) }}")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- digest

_PLAIN = (bool, int, float, complex, str, bytes, type(None), np.generic, slice)


def graph_digest(graph: Graph) -> str | None:
    """A SHA-256 of everything a graph computes (primitives, params, constants' bytes, shapes, dtypes,
    structure, the users' source lines its errors name), or None when a param is a value whose
    meaning its text may not carry (a function, an object): such a graph is never keyed."""
    h = hashlib.sha256()
    names: dict[Var, str] = {}

    def name(v: Var) -> str:
        text = names.get(v)
        if text is None:   # (formatted once a Var: a warm start's key digests the whole trace)
            text = names[v] = f"v{len(names)}:{v.aval}"
        return text

    def param(p) -> str | None:
        if isinstance(p, _PLAIN):
            return repr(p)
        if isinstance(p, np.dtype):
            return f"dtype({p.str})"
        if isinstance(p, np.ndarray):
            return f"array({p.dtype.str},{p.shape},{hashlib.sha256(np.ascontiguousarray(p).tobytes()).hexdigest()})"
        if isinstance(p, Graph):
            return walk(p)
        if isinstance(p, (tuple, list)):
            parts = [param(q) for q in p]
            return None if None in parts else f"{type(p).__name__}({','.join(parts)})"
        if isinstance(p, dict):
            pairs = [(param(k), param(q)) for k, q in sorted(p.items(), key=lambda kv: repr(kv[0]))]
            return None if any(a is None or b is None for a, b in pairs) else "{" + ",".join(f"{a}:{b}" for a, b in pairs) + "}"
        return None

    def walk(g: Graph) -> str | None:
        parts = ["(" + ",".join(name(v) for v in g.inputs) + ")"]
        for e in g.eqns:
            params = [(k, param(p)) for k, p in e.params.items()]
            if any(p is None for _, p in params):
                return None
            parts.append(f"{','.join(name(v) for v in e.outputs)}={e.primitive.name}[{params}]"
                         f"({','.join(name(v) for v in e.inputs)})@{e.source}")
        parts.append("->(" + ",".join(name(v) for v in g.outputs) + ")")
        return "{" + ";".join(parts) + "}"

    text = walk(graph)
    if text is None:
        return None
    h.update(text.encode())
    return h.hexdigest()[:40]


# ----------------------------------------------------------------------------- verifier


def verify(graph: Graph) -> Graph:
    """Check that `graph` is well formed; raise IRError naming the first fault. Returns the graph."""
    defined: set[Var] = set()
    for v in graph.inputs:
        if not isinstance(v, Var):
            raise IRError(f"graph input {v!r} is not a Var")
        if v in defined:
            raise IRError(f"graph input {v!r} appears twice")
        if v.aval.dtype not in SUPPORTED_DTYPES:
            raise IRError(f"graph input {v!r} has unsupported dtype {v.aval.dtype}")
        defined.add(v)
    if graph.input_notes and len(graph.input_notes) != len(graph.inputs):
        raise IRError("input_notes must have one entry per input")
    if graph.eqn_notes and len(graph.eqn_notes) != len(graph.eqns):
        raise IRError("eqn_notes must have one entry per equation")
    for i, e in enumerate(graph.eqns):
        where = f"equation {i} ({e.primitive.name})"
        for v in e.inputs:
            if v not in defined:
                raise IRError(f"{where} uses {v!r} before it is defined")
        expected = e.primitive.abstract_eval(*[v.aval for v in e.inputs], **e.params)
        if len(expected) != len(e.outputs):
            raise IRError(f"{where} has {len(e.outputs)} outputs, its primitive gives {len(expected)}")
        for v, a in zip(e.outputs, expected):
            if v in defined:
                raise IRError(f"{where} redefines {v!r}")
            if v.aval != a:
                raise IRError(f"{where} output {v!r} should be {a}")
            defined.add(v)
        for p in e.params.values():
            if isinstance(p, Graph):
                verify(p)
    for v in graph.outputs:
        if v not in defined:
            raise IRError(f"graph output {v!r} is never defined")
    return graph
