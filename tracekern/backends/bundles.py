"""One file per step (issue 27's "one library per step"): the machine code of every njit function of a
cpu step's generated modules, with the modules' code objects, read from one sealed file at the step's
first call in a process, where Numba reads two files a function (its index and its data) and tracekern
two a module (the source, checked against its name, and its code object). A warm start of the 8-block
transformer loaded 27 functions' code so: 34 ms through Numba's dispatchers and cache, 16 ms of it
rebuilding the functions, the rest finding and reading their files and typing the call's arguments.

The bundle is written once, after the first call of a step in a process that found none (its functions
compiled or loaded by then: it copies their entries from Numba's cache, not a compile of its own), under
`steps/` of the cache directory, named by a SHA-256 of the step's module digests, the directory, and
what makes machine code valid (Python, Numba, llvmlite, the CPU's triple, name and features, tracekern's
library format): other machine code is never read from it, nor a function's whose index Numba's cache no
longer has (then the bundle is not read at all: the step loads, or compiles, through Numba). It is
sealed and checked like Numba's files here (cache.refused_file, its checksum); one that fails to load in
any way is deleted, warned about once, and the step loads through Numba's cache as before (and writes
the bundle again); one refused (another user's, or writable by others) is not read, and is replaced. It
only adds overloads to the step's dispatchers: a call with argument types the bundle lacks (another
layout) compiles or loads that overload through Numba as before."""
from __future__ import annotations

import hashlib
import marshal
import os
import pickle
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import llvmlite
import numba
from numba.core.compiler_lock import global_compiler_lock
from numba.core.dispatcher import Dispatcher
from numba.core.registry import cpu_target

from . import cache

FORMAT = 2   # (2: the names of the njit functions it holds, checked against Numba's index files)
_SALT: dict[str, str] = {}   # cache directory -> what the bundle's name holds besides the modules


def path(sources: Sequence[str]) -> Path:
    """The bundle file of the step whose generated modules have these sources."""
    directory = cache.cache_dir()
    salt = _SALT.get(str(directory))
    if salt is None:
        magic = cpu_target.target_context.codegen().magic_tuple()
        salt = _SALT[str(directory)] = repr((FORMAT, str(directory), sys.version, numba.__version__,
                                             llvmlite.__version__, magic, cache.LIBRARY_FORMAT))
    h = hashlib.sha256(salt.encode())
    for s in sources:
        h.update(cache.source_digest(s).encode())
    return directory / "steps" / f"{h.hexdigest()[:40]}.tkb"


def load(sources: Sequence[str], compiled: Sequence[str]) -> list[ModuleType] | None:
    """The step's modules, every njit function given the overloads its bundle holds; None when there is
    no bundle (or a damaged one: deleted, one CacheWarning), or when Numba's cache lacks the machine code
    of a module of `compiled` or of a function the bundle holds (its index file: the bundle copies Numba's
    entries, and serves only what Numba would)."""
    where = path(sources)
    try:
        with open(where, "rb") as f:
            blob = f.read()
    except OSError:
        return None
    if cache.refused_file(str(where)):
        return None
    try:
        data = cache._unsealed(blob)
        if data is None:
            raise ValueError("its content does not match its checksum (truncated or overwritten)")
        saved = pickle.loads(data)
        if saved["format"] != FORMAT or len(saved["code"]) != len(sources):
            raise ValueError("it was written for another step")
        modules = [cache.load_module(s, marshal.loads(c)) for s, c in zip(sources, saved["code"])]
        # (after the imports: a module file found damaged is written again, and its Numba entries deleted)
        if not all(map(cache.on_disk, compiled)) or \
                not all(cache.functions_on_disk(sources[index], names) for index, names in saved["functions"]):
            return None
        context = cpu_target.target_context
        with global_compiler_lock, cache.quiet_llvm():
            cache.refreshed(context)
            # (unpickled after the modules are imported: a function's environment names its module)
            wanted = [(getattr(modules[index], name), args, payload)
                      for index, name, args, payload in pickle.loads(saved["overloads"])]
            wanted = [w for w in wanted if w[1] not in w[0].overloads]
            codegen, libraries = context.codegen(), {}
            try:
                with cache.deferred_finalize():   # (every library added to LLVM's engine, then finalized at once)
                    for _, _, payload in wanted:
                        libraries[id(payload[0])] = codegen.unserialize_library(payload[0])
            finally:   # (after a failure too, the libraries made alive: a module left unfinalized in the engine
                # would be finalized by the next compile, after its library is gone, and Numba's object-cache
                # hooks raise on it: "Exception ignored ... ReferenceError")
                codegen._engine.finalize_object()
            codegen.unserialize_library = lambda libdata: libraries.pop(id(libdata))   # (for Numba's rebuild below)
            try:
                rebuilt = [(function, args, function._cache._impl.rebuild(context, payload))
                           for function, args, payload in wanted]
            finally:
                del codegen.unserialize_library
            for function, args, result in rebuilt:
                if not result.objectmode:   # (what Dispatcher.compile does with a cache hit)
                    context.insert_user_function(result.entry_point, result.fndesc, [result.library])
                function.add_overload(result)
                function._cache_hits[args] += 1   # (a hit of the disk cache, as Numba counts its own)
    except Exception as err:   # (garbled, or code LLVM or Numba refuses: the step loads through Numba's cache)
        cache._unlink(where)
        cache._warn_rebuilt(str(where), f"it failed to load ({type(err).__name__}: {err})")
        return None
    return modules


def save(sources: Sequence[str]) -> None:
    """Write the bundle of a step whose modules are loaded in this process: the code objects of its
    modules and the cache entry of each overload its njit functions have (those Numba saved)."""
    where = path(sources)
    if os.path.exists(where) and not cache.refused_file(str(where)):   # (a refused one is replaced, as Numba's are)
        return
    overloads, codes, functions = [], [], {}
    try:
        for index, source in enumerate(sources):
            module = cache.load_module(source)
            codes.append(marshal.dumps(cache._code(cache.module_path(source), source)))
            for name, function in vars(module).items():
                # (the module's own: a driver names its kernels' dispatchers too)
                if not isinstance(function, Dispatcher) or not function.overloads or \
                        function.py_func.__globals__ is not vars(module):
                    continue
                disk = getattr(function._cache, "_cache_file", None)
                if disk is None:
                    continue
                entries, codegen = disk._load_index(), function.targetctx.codegen()
                for args in list(function.overloads):
                    entry = entries.get(function._cache._index_key(args, codegen))
                    if entry is not None:   # (less its type annotation: text for inspect_types, 20 kB)
                        payload = disk._load_data(entry)
                        overloads.append((index, name, args, payload[:6] + ("",) + payload[7:]))
                        functions.setdefault(index, {})[name] = None
        data = pickle.dumps({"format": FORMAT, "code": codes, "functions": [(i, list(f)) for i, f in functions.items()],
                             "overloads": pickle.dumps(overloads, protocol=5)}, protocol=5)
    except Exception:   # (an entry gone or damaged meanwhile: no bundle; the next process tries again)
        return
    private = cache.in_use(str(cache.cache_dir())) is not False
    try:
        cache._make_dirs(where.parent, not private)
        cache._write_file(str(where), data + cache._SEAL + hashlib.sha256(data).digest(), private)
    except OSError as err:
        cache._warn_unsaved(str(where), err)
