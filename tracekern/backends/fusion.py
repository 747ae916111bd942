"""Fusion planning, shared by the kernel renderers: group a Graph's equations into kernels and plan
their buffers by liveness.

A *loop kernel* runs one loop nest over a domain (a shape). Its body evaluates elementwise values as
scalars; it stores some of them as arrays ("stores") and accumulates reductions of others. Values
used only inside loops never become arrays: a value needed by several loops is recomputed in each
(for memory-bound code a recompute is cheaper than a round trip through memory), unless it is
broadcast into a larger domain, where it is materialized once. View primitives (reshape, transpose,
broadcast_to, slice, roll) are index arithmetic on their operand, and a gather reads its operand at
an index that is data. A *call kernel* is one equation that needs whole arrays: matmul, concatenate,
unslice, and the primitives the backends' call-kernel registries render (sort, scans, scatter, linalg)."""
from __future__ import annotations

import bisect
import re
from dataclasses import dataclass, field

import numpy as np

from ..errors import IRError
from ..ir import Aval, Eqn, Graph, Var
from ..primitives.core import literal_value
from ..primitives.elementwise import add, mul
from ..primitives.linalg import SMALL_CONTRACTION
from ..primitives.shape import broadcast_index, broadcast_to, const, slice_

# Loops over at least this many elements run in parallel (prange), in chunks of about CHUNK
# elements split along axis 0. Both depend only on shapes, so results do not depend on threads.
PARALLEL_MIN_ELEMENTS = 1 << 16
CHUNK_ELEMENTS = 1 << 15
# The most scalar statements one loop body holds. Numba's compile time grows with a function's
# statements (about 10 ms each), so a program of 10,000 chained operations is split into loops of
# at most this many, storing the value at each cut; a repeated layer then gives a few loops of
# equal text, compiled once. The largest body of the main job's workloads is 200: none is split.
MAX_BODY = 256
# The statements of one band of a chain deeper than MAX_BODY (see _bands): 24 is a multiple of the
# layer lengths 1, 2, 3, 4, 6, 8 and 12, so the bands of such a repeated layer have equal text. (60 made
# Numba compile bodies 2.5 times longer: the 10,000-op tests' LSTM took 51 s to compile, against 30.)
MAX_DEPTH = 24
# The deepest an index expression nests, and the longest it grows, before it is computed by a
# statement of its own (Python's parser stops at 200 nested parentheses in a line).
MAX_NESTING = 24
MAX_INDEX = 160
# The most copies one loop makes (stores that compute nothing: a matmul operand read through a view,
# such as x[t] of an unrolled loop over t). Each is two parameters, and Numba's compile time grows
# faster than a function's parameters (about 1.3 s for 60, 11 s for 240): the 1,024 copies of an
# unrolled LSTM merged into a few loops took minutes to compile.
MAX_COPIES = 32
# A 0-d value computed from arrays by at most this many statements (elementwise ones and views, a
# scalar chain such as a rotation's sines and cosines and their products) is recomputed in each
# loop over a larger domain that reads it, not stored: the cpu backend computes it once before the
# loop (LoopKernel.invariant), where a 0-d array costs the driver an allocation and every kernel
# reading it a parameter, about as much as the loop's own work in a small program (a forward-mode
# Jacobian's primal scalars feed every tangent loop).
SCALAR_CHAIN = 32


@dataclass
class Read:
    name: str
    var: Var          # a materialized value (a buffer, an argument or a constant)
    index: tuple[str, ...]


@dataclass
class Compute:
    name: str
    eqn: Eqn          # an elementwise equation applied to scalars
    args: tuple[str, ...]
    template: str     # the primitive's scalar expression for these operands (Primitive.scalar_for)


@dataclass
class Literal:
    name: str
    eqn: Eqn          # a `full` or a scalar `const`: the same value at every index


@dataclass
class Index:
    name: str
    expr: str         # integer index arithmetic, named so that a chain of views does not nest it deeper


@dataclass
class LoopKernel:
    domain: tuple[int, ...]
    stores: list[Var] = field(default_factory=list)
    reductions: list[Eqn] = field(default_factory=list)
    body: list = field(default_factory=list)          # Read | Compute | Literal | Index, in order
    results: dict = field(default_factory=dict)       # store Var or reduce Eqn -> scalar name
    parallel: bool = False
    # an epilogue: elementwise stores over the reductions' kept index, computed once each reduction
    # result there is final (mean = sum / n, a layernorm's 1 / sqrt(var + eps)). The reductions
    # reduce the axes from `epilogue_first` on; the epilogue's statements read them back at the
    # kept index (epilogue_index names the loop variable of each axis of its domain, or "0").
    epilogue: list[Var] = field(default_factory=list)
    epilogue_body: list = field(default_factory=list)
    epilogue_results: dict = field(default_factory=dict)
    epilogue_first: int = 0
    epilogue_domain: tuple[int, ...] = ()
    # (planning only: the (value, index) pairs the stores placed so far compute, to keep the body
    # within MAX_BODY)
    computes: set = field(default_factory=set, repr=False)
    band: int | None = field(default=None, repr=False)   # (planning only: see _bands)
    # (planning only: the body and result of the one store or reduction placed so far, as _place's
    # walk found them, which _fill_body then need not walk again)
    walked: tuple | None = field(default=None, repr=False)
    copies: int = field(default=0, repr=False)   # (planning only: its stores that compute nothing)

    @property
    def writes(self) -> list[Var]:
        """The buffers this loop fills: stores, reduction outputs, epilogue stores."""
        return list(self.stores) + [e.outputs[0] for e in self.reductions] + list(self.epilogue)

    @property
    def reads(self) -> list[Var]:
        """The materialized values this loop reads, in order of first read."""
        out: list[Var] = []
        writes = set(self.writes)
        for s in list(self.body) + list(self.epilogue_body):
            if isinstance(s, Read) and s.var not in out and s.var not in writes:
                out.append(s.var)
        return out

    @property
    def operands(self) -> list[tuple[Var, tuple]]:
        """The reads as a kernel's parameters: (value, pins) in order of first read (see pinned), a
        value read at several pinned elements once for each."""
        out: list[tuple[Var, tuple]] = []
        writes = set(self.writes)
        for s in list(self.body) + list(self.epilogue_body):
            if isinstance(s, Read) and s.var not in writes:
                key = (s.var, pinned(s.index, s.var.shape)[0])
                if key not in out:
                    out.append(key)
        return out

    def invariant(self) -> set[str]:
        """The names of the body's statements that do not depend on the loop's position: reads at a
        constant index, literals, and elementwise values computed from those only (none where the
        domain is empty: nothing of the body runs there)."""
        if 0 in self.domain or not self.domain:
            return set()
        out: set[str] = set()
        for s in self.body:
            if isinstance(s, Literal) or (isinstance(s, Read) and all(_CONSTANT.fullmatch(i) for i in s.index)) or (
                    isinstance(s, Compute) and s.eqn.primitive.fusion == "elementwise" and all(a in out for a in s.args)):
                out.add(s.name)
        return out

    def epilogue_index(self, v: Var) -> tuple[str, ...]:
        """Where the epilogue stores v: the kept loop variable of each axis of v, or "0"."""
        names = iter(f"i{a}" for a in range(self.epilogue_first) if self.domain[a] != 1)
        return tuple("0" if s == 1 else next(names) for s in v.shape)

    @property
    def chunk_rows(self) -> int:
        """Rows of axis 0 per chunk (the whole axis when serial)."""
        if not self.domain:
            return 1
        inner = 1
        for s in self.domain[1:]:
            inner *= s
        rows = max(1, CHUNK_ELEMENTS // max(inner, 1))
        return min(rows, max(self.domain[0], 1)) if self.parallel else max(self.domain[0], 1)

    @property
    def num_chunks(self) -> int:
        if not self.domain:
            return 1
        rows = self.chunk_rows
        return max(1, -(-self.domain[0] // rows))


@dataclass
class CallKernel:
    eqn: Eqn
    operands: list[tuple[Var, bool]]  # (materialized value, transposed: pass its last-two-axes transpose)


@dataclass
class Plan:
    graph: Graph
    kernels: list                      # LoopKernel | CallKernel, in execution order
    consts: list[Var]                  # non-scalar constants, passed to the compiled step as arguments
    buffers: dict[Var, int]            # value -> index of the kernel that allocates it
    frees: dict[int, list[Var]]        # kernel index -> buffers dead after it
    peak_bytes: int                    # the most bytes of buffers (outputs included) alive at once


class _NeedMaterialize(Exception):
    def __init__(self, needs: set[Var]):
        self.needs = needs


_CONSTANT = re.compile(r"[0-9 ()+*/%-]+")
_SIMPLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|-?[0-9]+")   # (a loop variable, a name, a number)


def pinned(index: tuple[str, ...], shape: tuple[int, ...] | None = None) -> tuple[tuple, tuple[str, ...]]:
    """(pins, index) of a read: each component of its index that is a constant other than 0 (one
    element along that axis: x[t] in an unrolled loop over t, c[i] in a Horner polynomial) becomes a
    pin, and 0 in the index; pins is () when there is none. A kernel is passed its operand's pinned
    view (x[t:t + 1]) and reads it at the same index whatever the constant, so the steps of an
    unrolled loop have equal text, compiled once. A constant into an axis (of `shape`, the operand's)
    of at most SMALL_CONTRACTION entries stays in the index: the column k of a small product, the
    x, y, z of a point are a few texts at most, where each pin costs the driver a view and the
    kernel a parameter at every call."""
    pins, out = [], []
    for a, i in enumerate(index):
        short = shape is not None and shape[a] <= SMALL_CONTRACTION
        constant = i != "0" and not short and _CONSTANT.fullmatch(i)
        c = int(eval(i, {"__builtins__": {}})) if constant else None   # (digits and operators only)
        pins.append(c if c else None)
        out.append("0" if c else i)
    return (tuple(pins), tuple(out)) if any(c is not None for c in pins) else ((), tuple(index))


def identity_index(shape: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(f"i{k}" for k in range(len(shape)))


class _Walker:
    """Turns the values a loop needs into scalar statements: computes elementwise values from their
    equations, follows views down to materialized values, and reads those."""

    def __init__(self, domain, producer, materialized, here=(), prefix="s", floors=None):
        self.prefix = prefix
        self.floors = floors or {}
        self.floor = 0                 # the first kernel the work read so far may run in (see _place)
        self.domain = tuple(domain)
        self.identity = identity_index(self.domain)
        self.size = _size(domain)
        self.producer = producer
        self.materialized = materialized
        self.here = set(here)         # materialized values this loop computes (at the identity index)
        self.memo: dict = {}
        self.body: list = []
        self.keys: list = []          # the (value, index) each statement of body computes
        self.reads: set[tuple[Var, bool]] = set()
        self.needs: set[Var] = set()    # values to materialize (broadcast into a larger domain)

    def _name(self, v: Var) -> str:
        return f"{self.prefix}{len(self.body)}"   # (by position: kernels of equal content render to equal text)

    def value(self, v: Var, idx: tuple[str, ...], root: bool = False) -> str:
        """The scalar name of v at index idx, adding the statements that compute it (operands first,
        left to right). Iterative, with a stack of its own: a chain of 10,000 elementwise operations
        is as deep as the program, and Python's stack is not."""
        memo = self.memo
        stack: list = []    # frames [value, index, eqn, operands to name (value, index), their names]
        name = self._start(v, idx, root, stack)
        while stack:
            frame = stack[-1]
            todo, names = frame[3], frame[4]
            if len(names) < len(todo):
                a, at = todo[len(names)]
                got = memo.get((a, at))
                if got is None:
                    got = self._start(a, at, False, stack)
                if got is not None:
                    names.append(got)
                continue
            e = frame[2]
            if e.primitive.fusion == "gather" and len(todo) == 1:   # (the operand, read where the indices say)
                x = e.inputs[0]
                todo.append((x, self._named(e.primitive.gather_index(list(frame[1]), names[0], x.shape, **e.params))))
                continue
            stack.pop()
            name = self._finish(frame)
            if stack:
                stack[-1][4].append(name)
        return name

    def _start(self, v: Var, idx: tuple[str, ...], root: bool, stack: list) -> str | None:
        """v at idx: its name where it is known, read, or a literal (or index arithmetic); else a frame
        pushed on `stack` for its operands (None)."""
        key = (v, idx)
        if key in self.memo:
            return self.memo[key]
        e = self.producer.get(v)
        kind = e.primitive.fusion if e is not None else None
        if not root:
            stored = v in self.materialized
            if not stored and kind in _STATEMENTS and _size(v.aval.shape) < self.size and not (
                    kind == "elementwise" and _scalar_chain(v, self.producer, self.materialized)):
                stored = True            # (broadcast or gathered: computed once, not at every index it is read)
                self.needs.add(v)
            if stored:
                identity = idx == self.identity and v.aval.shape == self.domain
                if not (identity and v in self.here):
                    self.reads.add((v, identity))
                    return self._add(key, Read(self._name(v), v, idx))
        if e is None:
            raise IRError(f"fusion: {v} is neither materialized nor produced by an equation")
        if kind == "fill" or (kind == "const" and not v.shape):
            return self._add(key, Literal(self._name(v), e))
        if kind == "index":   # a value made from its own position (iota): index arithmetic
            return self._add(key, Compute(self._name(v), e, (), e.primitive.index_scalar(idx, **e.params)))
        if kind == "view":
            if e.primitive.barrier:
                self.floor = max(self.floor, self.floors.get(v, 0))
            todo = [(e.inputs[0], self._named(e.primitive.view_index(list(idx), e.inputs[0].shape, **e.params)))]
        elif kind == "gather":   # the operand read at an index that is data (its own scalar): indices first
            todo = [(e.inputs[1], idx)]
        elif kind == "pieces":   # unslice, concatenate: the piece the index falls in (or zero)
            todo, conds = [], []   # (its conditions repeat the index: an expression is named first)
            at = [i if _SIMPLE.fullmatch(i) else self._index(i) for i in idx]
            for cond, k, src in e.primitive.pieces(at, [tuple(a.shape) for a in e.inputs], **e.params):
                todo.append(self._zero(v) if k is None else (e.inputs[k], self._named(list(src))))
                conds.append(cond)
            stack.append([v, idx, e, todo, [], conds])
            return None
        elif kind == "elementwise":
            todo = [(a, idx if a.shape == v.shape and 1 not in a.shape else tuple(broadcast_index(list(idx), a.shape, v.shape)))
                    for a in e.inputs]
        else:
            raise IRError(f"fusion: {e.primitive.name} output {v} should have been materialized")
        stack.append([v, idx, e, todo, []])
        return None

    def _finish(self, frame: list) -> str:
        """The name of a frame's value once its operands are named."""
        v, idx, e, _, names = frame[:5]
        if e.primitive.fusion == "pieces":
            template = f"{{{len(names) - 1}}}"
            for j in reversed(range(len(names) - 1)):
                template = f"({{{j}}} if {frame[5][j]} else {template})"
            return self._add((v, idx), Compute(self._name(v), e, tuple(names), template))
        if e.primitive.fusion != "elementwise":   # a view or a gather: the operand's element itself
            self.memo[(v, idx)] = names[-1]
            return names[-1]
        templates = getattr(self.producer, "templates", {})
        template = templates.get(e)
        if template is None:
            template = templates[e] = e.primitive.scalar_for([_literal(a, self.producer) for a in e.inputs], **e.params)
        return self._add((v, idx), Compute(self._name(v), e, tuple(names), template))

    def _named(self, idx: list[str]) -> tuple[str, ...]:
        """idx, each component longer than MAX_INDEX characters or nested deeper than MAX_NESTING
        parentheses named by a statement of its own: each view of a chain (a roll, a reshape, a
        reversing slice) wraps the index of the one it reads, 400 of them passed Python's limit of
        200 nested parentheses, and a chain of reshapes doubles its length with each."""
        out = []
        for i in idx:
            if len(i) > MAX_INDEX or (i.count("(") > MAX_NESTING and _nesting(i) > MAX_NESTING):
                i = self._index(i)
            out.append(i)
        return tuple(out)

    def _index(self, expr: str) -> str:
        """The name of a statement of its own computing index expression `expr`."""
        name = self._name(None)
        self.body.append(Index(name, expr))
        self.keys.append(("index", expr))
        return name

    def _zero(self, v: Var) -> tuple[str, str]:
        """A zero of v's dtype, as a literal statement (one per dtype and loop): the key it is known by."""
        key = ("zero", v.dtype.str)
        if key not in self.memo:
            zero = Var(Aval((), v.dtype))
            self._add(key, Literal(self._name(zero), Eqn(const, (), (zero,), {"value": np.zeros((), v.dtype)})))
        return key

    def _add(self, key: tuple, stmt) -> str:
        self.body.append(stmt)
        self.keys.append(key)
        self.memo[key] = stmt.name
        return stmt.name


def _scalar_chain(v: Var, producer, materialized: set[Var]) -> bool:
    """Whether v is a 0-d value that at most SCALAR_CHAIN elementwise statements compute from
    materialized values (through views), literals and iotas: recomputed where it is read (see
    SCALAR_CHAIN)."""
    if v.aval.shape:
        return False
    known = getattr(producer, "chains", {})   # (memo: a chain only shortens as values are materialized)
    if v in known:
        return known[v]
    known[v] = _walk_scalar_chain(v, producer, materialized)
    return known[v]


def _walk_scalar_chain(v: Var, producer, materialized: set[Var]) -> bool:
    seen: set[Var] = set()
    todo, statements = [v], 0
    while todo:
        u = todo.pop()
        if u in seen or u in materialized:
            continue
        seen.add(u)
        e = producer.get(u)
        kind = e.primitive.fusion if e is not None else None
        if kind == "elementwise":
            statements += 1
            if statements > SCALAR_CHAIN:
                return False
            todo.extend(e.inputs)
        elif kind == "view":
            todo.append(e.inputs[0])
        elif kind not in ("fill", "const", "index"):
            return False
    return True


def _nesting(text: str) -> int:
    """How deeply parentheses nest in text."""
    depth = deepest = 0
    for ch in text:
        if ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    return deepest


def _literal(v: Var, producer) -> float | None:
    """literal_value(v), quickly where v is plainly none (most operands)."""
    p = producer.get(v)
    if p is None or p.primitive.fusion not in ("fill", "const", "view"):
        return None
    return literal_value(v, producer)


class _Producers(dict):
    """The equation that makes each value of a graph being planned, and the scalar template of each
    elementwise equation once it is known (it depends only on which operands are literals: the
    same in every loop and every round of planning)."""

    def __init__(self, *args):
        super().__init__(*args)
        self.templates: dict[Eqn, str] = {}
        self.chains: dict[Var, bool] = {}   # (see _scalar_chain)


def _size(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def small_products(graph: Graph) -> tuple[Graph, set[Var]]:
    """The graph with every float matmul that contracts an axis of at most SMALL_CONTRACTION entries
    written as what it is, a sum of that many outer products: out = a[..., :, 0:1] * b[..., 0:1, :]
    + a[..., :, 1:2] * b[..., 1:2, :] + ..., each term an elementwise mul of the operands' slices
    broadcast to the output's shape, added left to right (as a naive loop over k does); and the
    values to materialize for them. A product over k = 1 is exactly the GEMM's one multiply: it fuses
    into the loop that reads it instead of being a BLAS call and an array of its own (a weight
    gradient of a batch of one, accumulated in a loop's carry). A longer one (the 3 x 3 rotations
    of a bone chain, the (n * 3, 3) @ (3, 3) products of a batched JVP, where a BLAS call costs
    more than its work) becomes a loop that joins the other loops of its domain, its output and the
    operands that compute something stored as the GEMM's were: chains stay cut where the matmuls
    cut them (a program's loops, their bodies and their planning stay as they were), and an operand
    that is a view or a gather of an array is read in place."""
    eqns: list[Eqn] = []
    cut: set[Var] = set()
    producer = {v: e for e in graph.eqns for v in e.outputs}
    for e in graph.eqns:
        a = e.inputs[0] if e.primitive.name == "matmul" else None
        if a is None or not 1 <= a.shape[-1] <= SMALL_CONTRACTION or a.dtype.kind != "f":
            eqns.append(e)
            continue
        b, out = e.inputs[1], e.outputs[0]
        k_dim, nd, shape = a.shape[-1], len(a.shape), tuple(out.shape)
        if k_dim > 1:
            cut.add(out)
            cut.update(x for x in (a, b) if _computes(x, producer))
        total = None
        for k in range(k_dim):
            left, right = Var(out.aval), Var(out.aval)
            for x, axis, dst in ((a, nd - 1, left), (b, nd - 2, right)):
                if k_dim > 1:
                    index = tuple((k, k + 1, 1) if i == axis else (0, n, 1) for i, n in enumerate(x.shape))
                    piece = Var(Aval(tuple(1 if i == axis else n for i, n in enumerate(x.shape)), x.dtype))
                    eqns.append(Eqn(slice_, (x,), (piece,), {"index": index}, e.source))
                    x = piece
                eqns.append(Eqn(broadcast_to, (x,), (dst,), {"shape": shape}, e.source))
            term = out if k_dim == 1 else Var(out.aval)
            eqns.append(Eqn(mul, (left, right), (term,), {}, e.source))
            if total is not None:
                summed = out if k == k_dim - 1 else Var(out.aval)
                eqns.append(Eqn(add, (total, term), (summed,), {}, e.source))
                term = summed
            total = term
    if len(eqns) == len(graph.eqns):
        return graph, cut
    return Graph(graph.inputs, tuple(eqns), graph.outputs, graph.input_notes), cut


def _computes(v: Var, producer) -> bool:
    """Whether reading v computes something (an elementwise value or a concatenation under its
    views), rather than reading an array through index arithmetic (a view, a gather: what it
    gathers from is stored where the loop reading it is larger, see _broadcast)."""
    while True:
        e = producer.get(v)
        if e is None or e.primitive.fusion not in ("view", "elementwise", "pieces"):
            return False
        if e.primitive.fusion in _STATEMENTS:
            return True
        v = e.inputs[0]


def plan(graph: Graph) -> Plan:
    """Group the equations of `graph` into kernels; see the module docstring."""
    graph, cut = small_products(graph)
    producer = _Producers((v, e) for e in graph.eqns for v in e.outputs)
    materialized = _initial_materialized(graph, producer) | cut
    cuts, bands = _bands(graph, producer, materialized)
    materialized |= cuts
    materialized |= _broadcast(graph, producer, materialized)
    while True:
        try:
            p = _plan_with(graph, producer, materialized, bands)
        except _NeedMaterialize as need:
            materialized |= need.needs
            continue
        shared = _worth_materializing(p, producer, materialized)
        if not shared:
            return p
        materialized |= shared


# what recomputing an elementwise value costs, in units of one array read: a transcendental ~ 2
_COSTLY = ("{exp}", "{log}", "{log1p}", "{expm1}", "{sin}", "{cos}", "{tan}", "{tanh}", "{pow}", "{arctan}")


def _worth_materializing(p: Plan, producer, materialized: set[Var]) -> set[Var]:
    """Elementwise values that loops recompute so often that storing them once is cheaper. A value
    computed by C loops from R materialized arrays (and T transcendentals) costs C * (R + 2T) reads
    (and their math) recomputed, against R + 2T + 1 + C stored and read back. Without this, a chain
    such as a transformer's residual stream x + f(x) + g(...) would be recomputed from all its
    terms in every loop that reads it: work and kernel text growing with depth."""
    count: dict[Var, int] = {}
    for k in p.kernels:
        if isinstance(k, LoopKernel):
            for s in k.body:
                if isinstance(s, Compute):
                    v = s.eqn.outputs[0]
                    count[v] = count.get(v, 0) + 1
    memo: dict[Var, tuple[frozenset, int]] = {}

    def leaves(v: Var) -> tuple[frozenset, int]:
        """(materialized values v is computed from, transcendentals on the way); a post-order walk
        with a stack of its own (a chain of 10,000 operations is deeper than Python's)."""
        stack = [v]
        while stack:
            u = stack[-1]
            if u in memo:
                stack.pop()
                continue
            e = producer.get(u)
            if u in materialized or e is None or e.primitive.fusion not in ("elementwise", "view", "gather", "pieces"):
                memo[u] = (frozenset([u]) if (u in materialized or e is None) else frozenset(), 0)
                stack.pop()
                continue
            missing = [a for a in e.inputs if a not in memo]
            if missing:
                stack.extend(missing)
                continue
            reads, costly = frozenset(), int(e.primitive.fusion == "elementwise"
                                             and any(f in (e.primitive.scalar or "") for f in _COSTLY))
            for a in e.inputs:
                r, c = memo[a]
                reads, costly = reads | r, costly + c
            memo[u] = (reads, costly)
            stack.pop()
        return memo[v]

    chosen = set()
    for v, c in count.items():
        if c < 2 or v in materialized or _scalar_chain(v, producer, materialized):
            continue
        e = producer[v]
        reads, costly = frozenset(), int(any(f in (e.primitive.scalar or "") for f in _COSTLY))
        for a in e.inputs:
            r, t = leaves(a)
            reads, costly = reads | r, costly + t
        weight = len(reads) + 2 * costly
        if c * weight > weight + 1 + c:
            chosen.add(v)
    return chosen


def _bands(graph: Graph, producer, materialized: set[Var]) -> tuple[set[Var], dict[Var, int]]:
    """How a deep program is cut into loops: (values to store, the band of each value on a deep chain).

    A value's depth is the longest chain of elementwise statements between it and the arrays it is
    computed from; a chain is deep when it goes on past MAX_BODY statements. The values of a deep
    chain fall into bands of MAX_DEPTH levels, each band is its own loops (_place) and the values a
    later band reads are stored. A value's level is the latest it can have, just below its first
    reader (its depth where nothing reads it in a loop): a value made early and read late (the
    powers x ** k of a polynomial's gradient, read by its accumulation) is computed in its reader's
    band, not stored from an early one. A repeated layer whose length divides MAX_DEPTH then
    gives loops of equal text, compiled once, and each band's loop is planned in one round (a chain of
    10,000 operations is never walked whole, once for each store placed on it). Values on chains
    no deeper than MAX_BODY have no band: such programs are planned as before."""
    depth: dict[Var, int] = {}     # (statements to compute the value, from the arrays it reads)
    seen: dict[Var, int] = {}      # (what a reader counts on top: 0 for an array)
    for e in graph.eqns:
        kind = e.primitive.fusion
        if kind in _CHAINS:
            d = max([seen.get(a, 0) for a in e.inputs], default=0) + (kind in _STATEMENTS)
        else:
            d = int(kind in ("fill", "const", "index"))
        for v in e.outputs:
            depth[v] = d
            seen[v] = 0 if v in materialized else d
    if max(depth.values(), default=0) <= MAX_BODY:
        return set(), {}
    reach = dict(depth)          # the deepest value a chain through v goes on to (v's own included)
    late: dict[Var, int] = {}    # the latest level v can be computed at: just before its first reader
    for e in reversed(graph.eqns):
        for v in e.outputs:
            late[v] = late.get(v, depth[v])
        if e.primitive.fusion in _CHAINS:
            r = max(reach[v] for v in e.outputs)
            at = min(late[v] for v in e.outputs) - (e.primitive.fusion in _STATEMENTS)
            for a in e.inputs:
                if a not in materialized:
                    reach[a] = max(reach.get(a, 0), r)
                    late[a] = min(late.get(a, at), at)
    band = {v: late[v] // MAX_DEPTH for v, r in reach.items() if r > MAX_BODY}
    cuts: set[Var] = set()
    for e in graph.eqns:
        if e.primitive.fusion not in _CHAINS or e.outputs[0] not in band:
            continue
        b = band[e.outputs[0]]
        for a in e.inputs:
            u = _under_views(a, producer, materialized)
            if u is not None and u in band and band[u] < b:
                cuts.add(u)
    return cuts, band


_CHAINS = ("elementwise", "view", "gather", "pieces")   # what a loop computes from its operands' statements
_STATEMENTS = ("elementwise", "pieces")                 # (those of them that are a statement of their own)


def _under_views(v: Var, producer, materialized: set[Var]) -> Var | None:
    """The elementwise value that a loop reading v computes (v itself, or the value under v's views),
    or None where it reads an array."""
    while v not in materialized:
        e = producer.get(v)
        if e is None:
            return None
        if e.primitive.fusion in _STATEMENTS:
            return v
        if e.primitive.fusion != "view":
            return None
        v = e.inputs[0]
    return None


def _broadcast(graph: Graph, producer, materialized: set[Var]) -> set[Var]:
    """The elementwise (and concatenated) values a loop over a larger domain would read (a (rows, 1)
    value broadcast into (rows, cols), a (bones, 3, 3) concatenation gathered per vertex): each is
    materialized once, not computed at every index it is read (a concatenation of n pieces reads
    all n at every index, to select one). The
    walker finds each such value too (_NeedMaterialize); found here in one pass, backwards, they cost
    no planning round. A value's domain is the largest loop that computes it: its own shape where it
    is stored, else the largest domain of the loops computing its readers."""
    domain: dict[Var, int] = {}
    needs: set[Var] = set()
    for e in reversed(graph.eqns):
        kind = e.primitive.fusion
        if kind == "reduce":
            a = e.inputs[0]
            domain[a] = max(domain.get(a, 0), a.aval.size)
        if kind not in _CHAINS:
            continue
        for v in e.outputs:
            if v in materialized:
                domain[v] = v.aval.size
            elif kind in _STATEMENTS and domain.get(v, 0) > v.aval.size and not (
                    kind == "elementwise" and _scalar_chain(v, producer, materialized)):
                needs.add(v)
                domain[v] = v.aval.size
        reach = max(domain.get(v, 0) for v in e.outputs)
        if reach:
            for a in e.inputs[:1] if kind == "view" else e.inputs:   # (a view reads its first operand only)
                if a not in materialized:
                    domain[a] = max(domain.get(a, 0), reach)
    return needs


def _initial_materialized(graph: Graph, producer) -> set[Var]:
    m: set[Var] = set(graph.inputs) | set(graph.outputs)
    for e in graph.eqns:
        kind = e.primitive.fusion
        if kind in ("call", "matmul", "reduce") or (kind == "const" and e.outputs[0].shape):
            m.update(e.outputs)
        if kind in ("call", "matmul"):
            for v in e.inputs:
                m.add(_operand(v, producer, kind == "matmul")[0])
    return m


def _unalias(v: Var, producer) -> Var:
    e = producer.get(v)
    while e is not None and e.primitive.aliases_input:
        v = e.inputs[0]
        e = producer.get(v)
    return v


def _operand(v: Var, producer, matmul: bool) -> tuple[Var, bool]:
    """(the buffer a whole-buffer kernel reads for operand v, whether it reads its transpose): an
    alias (remat_barrier) passes its input's buffer; a matmul operand that is the transpose of a
    2-D value is passed as that value's transpose."""
    v = _unalias(v, producer)
    e = producer.get(v)
    if matmul and e is not None and e.primitive.name == "transpose" and len(v.shape) == 2 \
            and tuple(e.params["perm"]) == (1, 0):
        return _unalias(e.inputs[0], producer), True
    return v, False


def _plan_with(graph: Graph, producer, materialized: set[Var], bands: dict | None = None) -> Plan:
    bands = bands or {}
    loops: dict = {}
    kernels: list = []
    kernel_of: dict[Var, int] = {}  # materialized value -> index of the kernel that makes it
    consts: list[Var] = []
    needs: set[Var] = set()
    # a barrier (the start of a recomputation) -> the kernels planned before it in graph order
    floors: dict[Var, int] = {}
    outputs = set(graph.outputs)
    for e in graph.eqns:
        kind = e.primitive.fusion
        if e.primitive.barrier:
            floors[e.outputs[0]] = len(kernels)
        if kind in ("call", "matmul"):
            operands = [_operand(v, producer, kind == "matmul") for v in e.inputs]
            kernels.append(CallKernel(e, operands))
            kernel_of.update((v, len(kernels) - 1) for v in e.outputs)
        elif kind == "const" and e.outputs[0].shape:
            consts.append(e.outputs[0])
        elif kind == "reduce":
            needs |= _place(kernels, kernel_of, e.inputs[0].shape, None, e, producer, materialized, floors, outputs,
                            bands.get(e.inputs[0]), loops)
        elif e.outputs[0] in materialized:
            needs |= _place(kernels, kernel_of, e.outputs[0].shape, e.outputs[0], None, producer, materialized,
                            floors, outputs, bands.get(e.outputs[0]), loops)
    if needs:
        raise _NeedMaterialize(needs)
    for k in kernels:
        if isinstance(k, LoopKernel):
            _fill_body(k, producer, materialized)
    kernels = _fuse_epilogues(kernels, kernel_of, producer, materialized)
    kernel_of = {}
    for pos, k in enumerate(kernels):
        kernel_of.update((v, pos) for v in (k.writes if isinstance(k, LoopKernel) else k.eqn.outputs))
    return _plan_buffers(graph, kernels, consts, kernel_of)


def _drop_ones(shape) -> tuple:
    return tuple(s for s in shape if s != 1)


def _fuse_epilogues(kernels: list, kernel_of: dict[Var, int], producer, materialized) -> list:
    """Merge each loop of only stores whose domain is the kept shape of an earlier loop's reductions,
    and which reads those reductions at its own index and otherwise only values made before that
    loop, into that loop as its epilogue: one kernel instead of two (a reduction followed by a
    [rows, 1] loop that only divides, say)."""
    merged: set[int] = set()
    where = dict(kernel_of)
    for pos, k in enumerate(kernels):
        if not isinstance(k, LoopKernel) or k.reductions or not k.stores:
            continue
        reads = {s.var for s in k.body if isinstance(s, Read)}
        target = max((where.get(v, -1) for v in reads), default=-1)
        r = kernels[target] if target >= 0 else None
        if not isinstance(r, LoopKernel) or not r.reductions or target in merged:
            continue
        firsts = {reduction_layout(r, e) for e in r.reductions}
        if len(firsts) != 1:
            continue
        layout, first = firsts.pop()
        kept = r.domain[:first]
        if layout != "suffix" or _drop_ones(k.domain) != _drop_ones(kept) or (r.epilogue and r.epilogue_first != first):
            continue
        # the epilogue's index: the kept loop variable of each of its axes (size-1 axes: "0")
        names = iter(f"i{a}" for a in range(first) if kept[a] != 1)
        idx = tuple("0" if s == 1 else next(names) for s in k.domain)
        # (only the reductions: an earlier epilogue's stores are written after every epilogue statement)
        finals = {e.outputs[0] for e in r.reductions}
        walker = _Walker(k.domain, producer, materialized, prefix=f"e{len(r.epilogue_body)}_")
        results = {v: walker.value(v, idx, root=True) for v in k.stores}
        kept_index = tuple(f"i{a}" for a in range(first))
        ok = not walker.needs and all(
            where.get(s.var, -1) < target or (s.var in finals and all(
                i == j or (n == 1 and i == "0") for i, j, n in zip(s.index, kept_index, s.var.shape)))
            for s in walker.body if isinstance(s, Read))
        if not ok:
            continue
        r.epilogue += k.stores
        r.epilogue_body += walker.body
        r.epilogue_results.update(results)
        r.epilogue_first = first
        r.epilogue_domain = tuple(kept)
        for v in k.stores:
            where[v] = target
        merged.add(pos)
    return [k for pos, k in enumerate(kernels) if pos not in merged]


def _place(kernels, kernel_of, domain, store: Var | None, reduction: Eqn | None, producer, materialized,
           floors, outputs, band: int | None, loops: dict) -> set[Var]:
    """Put one store or reduction into the first loop over `domain` that may run it: every value it
    reads comes from an earlier kernel, or is a store of that loop read at the same index; and, when
    it reads through a remat_barrier, a loop planned after that barrier, unless its result is an
    output of the graph anyway (a recomputation merged into a forward loop would keep its result
    alive from the forward to the backward: the memory the recomputation was to save); and a loop of
    its band of a deep chain (_bands), or of no band (`loops`: the positions of the loops over each
    domain and band). Returns the values it found that must be materialized first."""
    walker = _Walker(domain, producer, materialized, floors=floors)
    if store is not None:
        name = walker.value(store, identity_index(domain), root=True)
    else:
        name = walker.value(reduction.inputs[0], identity_index(domain))
    cuts = _cuts(walker) if len(walker.body) > MAX_BODY else set()
    if cuts:
        return walker.needs | cuts
    start = max([kernel_of.get(v, -1) for v, _ in walker.reads], default=-1)
    if (store if store is not None else reduction.outputs[0]) not in outputs:
        start = max(start, walker.floor)
    computes = set(walker.keys)
    copy = not any(isinstance(s, Compute) for s in walker.body)
    target = None
    candidates = loops.setdefault((tuple(domain), band), [])    # (positions, in order)
    for pos in candidates[bisect.bisect_left(candidates, start):]:
        k = kernels[pos]
        if len(k.computes) + len(computes - k.computes) > MAX_BODY:   # (full: the store starts a loop of its own)
            continue
        if copy and k.copies >= MAX_COPIES:
            continue
        if all(kernel_of.get(v, -1) < pos or (kernel_of.get(v) == pos and ident and v in k.stores)
               for v, ident in walker.reads):
            target = pos
            break
    if target is None:
        kernels.append(LoopKernel(tuple(domain), parallel=_size(domain) >= PARALLEL_MIN_ELEMENTS and domain[0] > 1,
                                  band=band, walked=(walker.body, name)))
        target = len(kernels) - 1
        candidates.append(target)
    else:
        kernels[target].walked = None
    k = kernels[target]
    k.computes |= computes
    k.copies += copy
    if store is not None:
        k.stores.append(store)
        kernel_of[store] = target
    else:
        k.reductions.append(reduction)
        kernel_of[reduction.outputs[0]] = target
    return walker.needs


def _cuts(walker: _Walker) -> set[Var]:
    """Values to store so that a store or reduction whose computation takes more than MAX_BODY
    statements is split into loops of at most about that many: every MAX_BODY / 2-th elementwise
    value of its body (in the order computed, each before what reads it) that has the loop's shape."""
    cuts, since = set(), 0
    for stmt, (v, idx) in list(zip(walker.body, walker.keys))[:-1]:   # (not the store itself)
        since += 1
        if since >= MAX_BODY // 2 and isinstance(stmt, Compute) and v.shape == walker.domain \
                and idx == identity_index(walker.domain) and stmt.eqn.primitive.fusion in _STATEMENTS \
                and v not in walker.materialized:
            cuts.add(v)
            since = 0
    return cuts


def _fill_body(k: LoopKernel, producer, materialized) -> None:
    if k.walked is not None:    # (one store or reduction: the walk that placed it)
        k.body, name = k.walked
        k.results[k.stores[0] if k.stores else k.reductions[0]] = name
        return
    walker = _Walker(k.domain, producer, materialized, here=k.stores)
    idx = identity_index(k.domain)
    for v in k.stores:
        k.results[v] = walker.value(v, idx, root=True)
    for e in k.reductions:
        k.results[e] = walker.value(e.inputs[0], idx)
    k.body = walker.body


def _plan_buffers(graph: Graph, kernels: list, consts: list[Var], kernel_of: dict[Var, int]) -> Plan:
    """Each buffer lives from the kernel that makes it to the last kernel that reads it."""
    last_use: dict[Var, int] = {}
    for pos, k in enumerate(kernels):
        if isinstance(k, LoopKernel):
            used = k.reads
        else:
            used = [v for v, _ in k.operands]
        for v in used:
            last_use[v] = pos
    outputs = set(graph.outputs)
    buffers = {v: pos for v, pos in kernel_of.items()}
    frees: dict[int, list[Var]] = {}
    for v, pos in buffers.items():
        if v not in outputs:
            frees.setdefault(max(last_use.get(v, pos), pos), []).append(v)
    made: dict[int, int] = {}
    for v, pos in buffers.items():
        made[pos] = made.get(pos, 0) + v.aval.nbytes
    live, peak = 0, 0
    for pos, k in enumerate(kernels):
        live += made.get(pos, 0)
        live += _scratch_bytes(k)
        peak = max(peak, live)
        live -= _scratch_bytes(k)
        live -= sum(v.aval.nbytes for v in frees.get(pos, ()))
    return Plan(graph, kernels, consts, buffers, frees, peak)


def reduction_layout(k: LoopKernel, e: Eqn) -> tuple[str, int]:
    """How a loop accumulates reduction `e`: ("suffix", first reduced axis) when the reduced axes are
    the innermost ones (a scalar accumulator per output element; axis 0 included means one partial
    result per chunk), ("partial", 0) when axis 0 is reduced among others (a partial array per
    chunk), ("memory", 0) otherwise (accumulate in an array of the output's shape)."""
    axes = tuple(e.params["axes"])
    n = len(k.domain)
    if axes == tuple(range(n - len(axes), n)):
        return "suffix", n - len(axes)
    return ("partial", 0) if 0 in axes else ("memory", 0)


def _scratch_bytes(k) -> int:
    if not isinstance(k, LoopKernel):
        return 0
    total = 0
    for e in k.reductions:
        layout, first = reduction_layout(k, e)
        out = e.outputs[0]
        acc = 8  # accumulators are 64-bit
        if layout == "partial" or (layout == "suffix" and first == 0):
            total += k.num_chunks * out.aval.size * acc
        elif layout == "memory":
            total += out.aval.size * acc
    return total
