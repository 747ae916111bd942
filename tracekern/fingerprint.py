"""The plan cache's fast key: a digest of a function's code and of every value its trace can read (its
closure, defaults and the globals its code names, through the functions they name), made without tracing it.

digest(fun) is None wherever that cannot be known from outside the function, and the caller then keys
the step by its traced graph instead (staging's plan cache). What the digest covers:

- a function: its code object (bytecode, constants, names, line table, file name and first line, nested
  code), its defaults, keyword defaults, attributes and closure cells, and each global its code loads;
  where it loads an attribute chain from a module of the user's (`mymodel.layer`), the value at its end;
- values by content: None, bools, numbers, strings, bytes, NumPy scalars and dtypes, arrays (their
  bytes), slices, ranges, and tuples, lists, dicts, sets of these; functools.partial of such functions;
- a tk.jit or transform object (Staged) by its function and its transform's plan_key;
- library code by name: modules, functions, classes and ufuncs of tracekern, NumPy, SciPy and the pure
  standard modules (math, cmath, operator, functools, itertools, builtins). The plan key's salt holds
  tracekern's own source and the Python and NumPy versions; SciPy's version is added here.

None (traced instead) for anything else: an object of another class (a tk.Variable, a model object,
a user's class, a transform under a memory budget), numpy.random and other modules with state, functions
that read or write files (np.load, np.loadtxt, np.fromfile, scipy.io, ...: _FILES), a module of the user's
used other than through attributes, impure builtins (print, open, eval, id, hash, getattr, ...), and code
that assigns or deletes a global."""
from __future__ import annotations

import builtins
import dis
import functools
import hashlib
import inspect
import sys
import types
from collections.abc import Callable

import numpy as np

# top-level packages whose code counts by name (their versions, or tracekern's source, are in the key's salt)
LIBRARIES = frozenset(("tracekern", "numpy", "scipy", "math", "cmath", "operator", "functools", "itertools",
                       "builtins"))
# modules of those with state that a trace could read (a draw from NumPy's global generator)
_STATEFUL = ("numpy.random", "scipy.io", "scipy.datasets", "scipy.stats", "scipy.sparse")
# library functions that read or write files: a trace calling one depends on what the file holds now
_FILES = frozenset(("load", "loadtxt", "genfromtxt", "fromfile", "fromregex", "memmap", "save", "savez",
                    "savez_compressed", "savetxt", "DataSource", "loadmat", "savemat", "open_memmap",
                    "load_npz", "save_npz"))
# attributes that reach a value by another road than a name the digest follows (a function's globals, an
# object's dict, a getattr in disguise): a trace may read anything through them
_INDIRECT = frozenset(("__globals__", "__dict__", "__closure__", "__defaults__", "__kwdefaults__", "__code__",
                       "__getattribute__", "__getattr__", "__builtins__", "attrgetter", "methodcaller"))
# builtins whose result or effect is not a function of their arguments' values
_IMPURE = frozenset(("print", "open", "input", "eval", "exec", "compile", "globals", "locals", "vars", "setattr",
                     "delattr", "__import__", "id", "hash", "breakpoint", "exit", "quit", "help", "memoryview",
                     "getattr"))
# attribute names that, read from a local or closure value the digest does not follow (a module imported in
# the function, a module in a closure cell), may reach state, files or another road: no code key
_SUSPECT = _IMPURE | _FILES | _INDIRECT | frozenset(s.rpartition(".")[2] for s in _STATEFUL)
_LOADS = frozenset(("LOAD_GLOBAL", "LOAD_NAME"))
_ATTRS = frozenset(("LOAD_ATTR", "LOAD_METHOD"))
_WRITES = frozenset(("STORE_GLOBAL", "DELETE_GLOBAL"))
_MISSING = object()
_PLAIN = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), slice, range)


class _Unknown(Exception):
    """A value whose effect on a trace the digest cannot know (the caller traces instead)."""


def digest(fun: Callable, *extra) -> str | None:
    """A SHA-256 of fun and of what its trace can read, and of `extra` values (static arguments),
    or None when some of it cannot be known without tracing (the module docstring)."""
    walker = _Walker()
    try:
        walker.value(fun)
        for x in extra:
            walker.value(x)
    except Exception:   # (_Unknown, a RecursionError, or whatever an odd object raised: traced instead)
        return None
    return walker.hash.hexdigest()[:40]


def _resolves(x) -> bool:
    """Whether x is what its module and qualified name name (a library's own function, not a user's
    function wrapped with functools.wraps to look like one)."""
    obj = sys.modules.get(getattr(x, "__module__", None) or "")
    for part in getattr(x, "__qualname__", "").split("."):
        obj = getattr(obj, part, None)
    return obj is x


def _library_name(name: str | None) -> bool:
    if not isinstance(name, str):
        return False
    if name.partition(".")[0] not in LIBRARIES:
        return False
    return not any(name == s or name.startswith(s + ".") for s in _STATEFUL)


@functools.lru_cache(maxsize=4096)
def _reads(code: types.CodeType) -> tuple:
    """The globals a code object (and the code nested in it) loads, each with the attribute chain
    read from it right after: ((name, (attr, ...)), ...); _Unknown if it assigns a global."""
    out = []
    todo = [code]
    while todo:
        c = todo.pop()
        chain: list | None = None
        for ins in dis.get_instructions(c):
            op = ins.opname
            if op in _WRITES:
                raise _Unknown(f"assigns the global {ins.argval}")
            if (op in _ATTRS or op in _LOADS or op == "LOAD_DEREF") and ins.argval in _INDIRECT:
                raise _Unknown(f"reads {ins.argval}")
            if op in _LOADS:
                if chain is not None:
                    out.append((chain[0], tuple(chain[1:])))
                chain = [ins.argval]
                continue
            if op in _ATTRS and chain is not None:
                chain.append(ins.argval)
                continue
            if op == "EXTENDED_ARG":
                continue
            if op in _ATTRS and ins.argval in _SUSPECT and not chain:
                raise _Unknown(f"an attribute {ins.argval!r} of a local or closure value (a module's?)")
            if op == "IMPORT_NAME" and not _library_name(ins.argval):
                raise _Unknown(f"imports {ins.argval}")
            if op == "IMPORT_FROM" and (ins.argval == "random" or ins.argval in _FILES or ins.argval in _IMPURE
                                        or ins.argval in _INDIRECT):
                raise _Unknown(f"imports {ins.argval}")
            if chain is not None:
                out.append((chain[0], tuple(chain[1:])))
                chain = None
        if chain is not None:
            out.append((chain[0], tuple(chain[1:])))
        todo += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return tuple(out)


class _Walker:
    def __init__(self):
        self.hash = hashlib.sha256()
        self.seen: dict[int, int] = {}   # id of a function or container being walked -> its number (cycles)
        self.keep: list = []             # (what `seen` names stays alive while walking)

    def put(self, *tokens) -> None:
        for t in tokens:
            self.hash.update(t.encode() if isinstance(t, str) else t)
            self.hash.update(b"\0")

    def value(self, x) -> None:
        t = type(x)
        if t in _PLAIN:
            self.put(t.__name__, repr(x))
            return
        if t is np.ndarray:   # (a subclass, np.matrix say, is an object of another class)
            if x.dtype.hasobject:
                raise _Unknown("an object array")
            self.put("array", x.dtype.str, repr(x.dtype.descr) if x.dtype.fields else "", repr(x.shape),
                     hashlib.sha256(np.ascontiguousarray(x).tobytes()).digest())
            return
        if isinstance(x, np.generic):
            if x.dtype.hasobject:
                raise _Unknown("an object scalar")
            self.put("scalar", x.dtype.str, x.tobytes())
            return
        if isinstance(x, np.dtype):
            self.put("dtype", x.str, repr(x.descr) if x.fields else "")
            return
        if isinstance(x, np.ufunc):   # (NumPy's or SciPy's own, found by name: a user's ufunc is code of theirs)
            special = sys.modules.get("scipy.special")
            for owner in (np, special):
                if owner is not None and getattr(owner, x.__name__, None) is x:
                    self.put("ufunc", owner.__name__, x.__name__)
                    return
            raise _Unknown(f"the ufunc {x.__name__} (not NumPy's or scipy.special's own)")
        if id(x) in self.seen:
            self.put("ref", str(self.seen[id(x)]))
            return
        if t in (tuple, list, set, frozenset, dict):
            self.enter(x)
            if t is dict:
                self.put("dict", str(len(x)))
                for k, v in x.items():
                    self.value(k)
                    self.value(v)
            elif t in (set, frozenset):   # (an order of iteration that does not depend on the process)
                self.put(t.__name__, str(len(x)))
                for token in sorted(digest_of(v) for v in x):
                    self.put(token)
            else:
                self.put(t.__name__, str(len(x)))
                for v in x:
                    self.value(v)
            return
        if isinstance(x, types.ModuleType):
            if not _library_name(x.__name__):
                raise _Unknown(f"the module {x.__name__} as a value")
            self.module(x)
            return
        if isinstance(x, type):
            if not _library_name(getattr(x, "__module__", None)):
                raise _Unknown(f"the class {x!r}")
            self.put("class", x.__module__, x.__qualname__)
            return
        if isinstance(x, types.FunctionType):
            self.function(x)
            return
        if t is inspect.Signature:   # (a __signature__ that inspect.signature cached, copied by functools.wraps)
            self.put("signature", str(len(x.parameters)), repr(x.return_annotation))
            for p in x.parameters.values():
                self.put(p.name, str(p.kind), repr(p.annotation))
                self.value(None if p.default is p.empty else p.default)
            return
        if isinstance(x, functools.partial):
            self.enter(x)
            self.put("partial")
            self.value(x.func)
            self.value(x.args)
            self.value(x.keywords)
            return
        if isinstance(x, types.BuiltinFunctionType):   # (builtins, math's, NumPy's C functions)
            owner = x.__self__
            if owner is not None and not (isinstance(owner, types.ModuleType) and _library_name(owner.__name__)):
                raise _Unknown(f"a method of {type(owner).__name__}")
            module = getattr(x, "__module__", None) or getattr(owner, "__name__", None)
            if not _library_name(module) or (module == "builtins" and x.__name__ in _IMPURE):
                raise _Unknown(f"the builtin {x.__name__}")
            self.put("builtin", module, x.__qualname__)
            return
        if t.__name__ == "Staged" and t.__module__ == f"{__package__}.staging":   # (tk.jit, tk.grad, ... of a function)
            self.staged(x)
            return
        module = getattr(t, "__module__", "")
        if _library_name(module) and module.startswith("numpy") and callable(x) and hasattr(x, "__qualname__") \
                and _library_name(getattr(x, "__module__", None)) and _resolves(x):   # (NumPy's dispatched functions: np.sum)
            if getattr(x, "__name__", "") in _FILES:
                raise _Unknown(f"the file function {x.__module__}.{x.__qualname__}")
            self.put("numpy", x.__module__, x.__qualname__)
            return
        raise _Unknown(f"an object of {t.__module__}.{t.__qualname__}")

    def staged(self, x) -> None:
        """A tk.jit or transform object: in a trace it emits its function (tk.jit) or its transform of
        it, which a transform's plan_key describes (None: _Unknown, as for its own plan)."""
        self.enter(x)
        if x.emit is x.fun:
            self.put("jit", repr(x.static_argnums))
        else:
            key = getattr(x.emit, "plan_key", None)
            if key is None:
                raise _Unknown("a transform without a plan key")
            self.put("transform")
            self.value(key)
        self.value(x.fun)

    def enter(self, x) -> None:
        self.seen[id(x)] = len(self.seen)
        self.keep.append(x)

    def module(self, m: types.ModuleType) -> None:
        self.put("module", m.__name__)
        if m.__name__.partition(".")[0] == "scipy":
            self.put(getattr(sys.modules.get("scipy"), "__version__", "?"))

    def function(self, f: types.FunctionType) -> None:
        module = getattr(f, "__module__", None)
        if _library_name(module) and f.__closure__ is None and "<locals>" not in f.__qualname__ and _resolves(f):
            if f.__name__ in _FILES:
                raise _Unknown(f"the file function {module}.{f.__qualname__}")
            self.put("libfunction", module, f.__qualname__)   # (library code: by name)
            return
        self.enter(f)
        code = f.__code__
        self.code(code)
        self.put("defaults")
        self.value(f.__defaults__)
        self.value(f.__kwdefaults__)
        self.put("attributes")
        self.value({k: v for k, v in vars(f).items() if k != "__wrapped__"})
        if "__wrapped__" in vars(f):
            self.value(f.__wrapped__)
        self.put("closure")
        for cell in f.__closure__ or ():
            try:
                contents = cell.cell_contents
            except ValueError:   # (an empty cell: a name assigned later)
                self.put("empty")
                continue
            self.value(contents)
        self.put("globals")
        namespace = f.__globals__
        builtin = namespace.get("__builtins__", builtins)
        builtin = vars(builtin) if isinstance(builtin, types.ModuleType) else builtin
        for name, attrs in _reads(code):
            self.put(name, *attrs)
            if name in namespace:
                self.global_value(namespace[name], attrs)
            elif name in builtin:
                if name in _IMPURE:
                    raise _Unknown(f"the builtin {name}")
                self.value(builtin[name])
            else:
                self.put("missing")

    def global_value(self, x, attrs: tuple) -> None:
        """A global and the attribute chain read from it. From a module of the user's, the chain is
        followed through modules to the value at its end, which is walked; a library module's
        attribute counts by name (a stateful module reached on the way: _Unknown)."""
        if not isinstance(x, types.ModuleType):
            self.value(x)
            return
        for a in attrs:
            nxt = getattr(x, a, _MISSING)
            if nxt is _MISSING:
                self.put("missing")
                return
            if isinstance(nxt, types.ModuleType):
                if _library_name(x.__name__) and not _library_name(nxt.__name__):
                    raise _Unknown(f"the module {nxt.__name__}")
                x = nxt
                continue
            if _library_name(x.__name__):
                if a in _FILES or a in _INDIRECT or (x.__name__ == "builtins" and a in _IMPURE):
                    raise _Unknown(f"the file function {x.__name__}.{a}")
                self.put("library", x.__name__, a)
            else:
                self.value(nxt)
            return
        self.value(x)   # (a module as a value: a library's by name, a user's _Unknown)

    def code(self, code: types.CodeType) -> None:
        self.put("code", code.co_filename, code.co_name, getattr(code, "co_qualname", ""), str(code.co_firstlineno),
                 str(code.co_flags), str(code.co_argcount), str(code.co_posonlyargcount), str(code.co_kwonlyargcount),
                 code.co_code, code.co_linetable, getattr(code, "co_exceptiontable", b""),
                 repr(code.co_names), repr(code.co_varnames), repr(code.co_freevars), repr(code.co_cellvars))
        for k in code.co_consts:
            if isinstance(k, types.CodeType):
                self.code(k)
            else:
                self.value(k)


def digest_of(x) -> str:
    """One value's digest (a set's members are put in the order of theirs)."""
    walker = _Walker()
    walker.value(x)
    return walker.hash.hexdigest()
