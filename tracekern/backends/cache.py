"""The disk cache of generated modules: each rendered source is written once to a content-hashed
file under the cache directory and imported from there, so Numba's cache=True keeps its machine code.

Directory: $TRACEKERN_CACHE_DIR, else the user's cache directory ($XDG_CACHE_HOME/tracekern,
~/Library/Caches/tracekern, %LOCALAPPDATA%/tracekern). Deleting it is always safe.

Safety: loading a Numba cache file runs a pickle, so nothing is loaded from a directory that
another user could write. cache_dir() is the directory in use: the configured one
(configured_dir()) once it passes check_dir(), else a private temporary directory of this process
(with one tk.CacheWarning). The decision is made once per process and directory, before anything
is read from it. Directories this module creates are 0o700 and its files 0o600, Numba's included:
Numba's cache files of the generated modules are kept in the checked directory's __pycache__
(whatever NUMBA_CACHE_DIR says) and created 0o600 (_guard_numba). TRACEKERN_CACHE_SHARED=1
declares a shared cache: everyone who can write to it is trusted, and only a directory that
everyone can write is refused.

Healing: Numba's files of generated modules end with a SHA-256 of their content (_SEAL), checked
before Numba reads them; an entry that fails to load in any way is deleted, warned about once
(tk.CacheWarning naming the file) and compiled again. Files or directories deleted while a module
is written, imported or its machine code saved (another process clearing the cache) are made
again and the step goes on."""
from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import hashlib
import importlib
import importlib.util
import io
import marshal
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import uuid
import warnings
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

from ..errors import CacheWarning, TracekernError, _is_internal, user_stacklevel

_MODULES: dict[str, ModuleType] = {}
_IN_USE: dict[tuple[str, bool], Path] = {}   # (configured directory, shared) -> the directory in use
_TRUSTED: dict[str, bool] = {}               # directory in use -> private (files 0o600) or shared
_LOCK = threading.Lock()
_TEMP: list[Path] = []                       # this process's private fallback directory, once made
_WARNED: set[str] = set()                    # cache files refused (refused_file), warned about once


def configured_dir() -> Path:
    """The directory the user asked for (not yet checked: use cache_dir() to read or write)."""
    env = os.environ.get("TRACEKERN_CACHE_DIR")
    return Path(env).expanduser() if env else default_dir()


def default_dir() -> Path:
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"    # the XDG spec ignores a relative one
    return base / "tracekern"


def shared_cache() -> bool:
    """TRACEKERN_CACHE_SHARED=1: the cache directory is shared, and all who can write to it are trusted."""
    return os.environ.get("TRACEKERN_CACHE_SHARED", "").strip().lower() not in ("", "0", "false", "no")


def cache_dir() -> Path:
    """The directory generated modules and Numba's cache files are read from and written to: the
    configured directory (symlinks resolved) when check_dir() accepts it, else a private temporary
    directory of this process, with one CacheWarning naming the reason and the fix. Decided once
    per process per directory; the call never fails because of the cache."""
    environ = os.environ.get
    # (the variables the configured directory is made from: a warm start asks for the directory about a
    # hundred times, and making its Path each time was 30 us)
    raw = (environ("TRACEKERN_CACHE_DIR"), environ("XDG_CACHE_HOME"), environ("HOME"), environ("LOCALAPPDATA"),
           environ("TRACEKERN_CACHE_SHARED"))
    path = _BY_ENVIRONMENT.get(raw)
    if path is not None:
        return path
    key = (str(configured_dir()), shared_cache())
    path = _IN_USE.get(key)
    if path is None:
        with _LOCK:
            path = _IN_USE.get(key) or _decide(Path(key[0]), key[1])
            _IN_USE[key] = path
    _BY_ENVIRONMENT[raw] = path
    return path


_BY_ENVIRONMENT: dict[tuple, Path] = {}


def in_use(directory: str) -> bool | None:
    """For a directory in use (cache_dir()) or one a few levels below it: True if it is private,
    False if shared; None if it is not tracekern's."""
    for _ in range(4):
        private = _TRUSTED.get(directory)
        if private is not None:
            return private
        directory, tail = os.path.split(directory)
        if not tail:
            break
    return None


class Refusal(NamedTuple):
    reason: str     # what is wrong, naming the path
    fix: str        # what to do about it


def check_dir(path: Path, shared: bool = False) -> Refusal | None:
    """Why no code may be loaded from the existing directory `path` (symlinks resolved), or None.

    Private (the default): the directory and its __pycache__ must be owned by you and writable by
    nobody else, and each parent up to / must be owned by you or root and writable by nobody else,
    or be sticky like /tmp (others cannot rename what they do not own), so that nobody can replace
    the directory. Group write is allowed for your private group (named like you, no other
    members). Shared: only write access for everyone is refused (except on a sticky parent). On
    Windows, which has no POSIX owners and modes, nothing is refused."""
    if not hasattr(os, "geteuid"):
        return None
    me = os.geteuid()
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return Refusal(f"{path} is not a directory", "point TRACEKERN_CACHE_DIR at a directory")
    elsewhere = ("point TRACEKERN_CACHE_DIR at a directory of your own" if str(path) == os.path.realpath(default_dir())
                 else f"use a directory of your own (unset TRACEKERN_CACHE_DIR for {default_dir()})")
    trust = "if it is a cache shared with people you trust, who alone can write to it, set TRACEKERN_CACHE_SHARED=1"
    for d in (path, path / "__pycache__"):
        s = st if d == path else _stat(d)
        if s is None:
            continue
        if not shared and s.st_uid != me:
            return Refusal(f"{d} is owned by {_user(s.st_uid)}, not by you ({_user(me)})",
                           f"delete it (it is only a cache: rm -rf {d}, with sudo if root owns it), and tracekern makes "
                           f"it again, yours and private; or {elsewhere}; {trust}")
        who = _other_writers(s, me, shared)
        if who == "everyone":
            return Refusal(f"{d} is writable by everyone (mode {stat.filemode(s.st_mode)})",
                           f"chmod o-w {d} and delete the files in it that you did not write, or {elsewhere}; to share "
                           f"a cache, make it writable by a group you trust only (chgrp GROUP {d}; chmod 2770 {d}) and "
                           "set TRACEKERN_CACHE_SHARED=1")
        if who:
            return Refusal(f"{d} is writable by {who} (mode {stat.filemode(s.st_mode)})",
                           f"chmod g-w {d} and delete the files in it that you did not write, or {elsewhere}; {trust}")
    if not os.access(path, os.W_OK | os.X_OK):
        return Refusal(f"{path} is not writable by you", f"chmod u+rwx {path}, or {elsewhere}")
    child = st
    for parent in path.parents:
        s = os.stat(parent)
        if not shared and s.st_uid not in (0, me):
            return Refusal(f"its parent {parent} is owned by {_user(s.st_uid)}, who could replace it",
                           f"{elsewhere}, under directories that only you or root can write; {trust}")
        # sticky, like /tmp: only an entry's owner can rename or delete it
        sticky = bool(s.st_mode & stat.S_ISVTX) and (shared or child.st_uid in (0, me))
        who = _other_writers(s, me, shared)
        if who and not sticky:
            return Refusal(f"its parent {parent} is writable by {who} (mode {stat.filemode(s.st_mode)}), who could "
                           "replace it", f"chmod {'o' if who == 'everyone' else 'g'}-w {parent}, or {elsewhere}, under "
                           "directories that only you or root can write" + ("" if who == "everyone" else f"; {trust}"))
        child = s
    return None


def _decide(want: Path, shared: bool) -> Path:
    try:
        path = prepare_dir(want, shared)
        refusal = check_dir(path, shared)
        if refusal is None:
            _make_dir(path / "__pycache__", shared)     # Numba's, made now: private whatever the umask
    except OSError as err:
        refusal = Refusal(f"{want} cannot be used ({err.strerror or err})",
                          "point TRACEKERN_CACHE_DIR at a directory you can write")
    if refusal is None:
        _TRUSTED[str(path)] = not shared
        return path
    tmp = _private_temp_dir()
    warnings.warn(CacheWarning(
        f"tracekern does not load compiled code from the cache directory {want}: {refusal.reason}, so code "
        f"planted there would run as you. This process compiles into a private temporary directory instead "
        f"({tmp}, removed at exit; nothing is cached across processes). Fix: {refusal.fix}."),
        stacklevel=user_stacklevel())
    return tmp


def prepare_dir(path: Path, shared: bool = False) -> Path:
    """Create `path` where missing (each new directory 0o700; in a shared cache with the umask's
    mode) and return it with symlinks resolved: everything after the check uses this real path, so
    a link cannot be pointed elsewhere later. Nothing is written into a directory that exists."""
    path = Path(os.path.realpath(path))     # what exists, resolved; the rest is made below it
    _make_dirs(path, shared)
    return Path(os.path.realpath(path))


def _make_dirs(path: Path, shared: bool) -> None:
    for p in [*reversed(path.parents), path]:
        _make_dir(p, shared)


def _make_dir(p: Path, shared: bool) -> None:
    if os.path.isdir(p):
        return
    try:
        os.mkdir(p, 0o777 if shared else 0o700)
    except FileExistsError:
        return
    if not shared:
        os.chmod(p, 0o700)     # exactly, whatever the umask


def _private_temp_dir() -> Path:
    if not _TEMP:
        tmp = Path(os.path.realpath(tempfile.mkdtemp(prefix="tracekern-cache-")))   # 0o700, new, ours
        _make_dir(tmp / "__pycache__", False)
        _TRUSTED[str(tmp)] = True
        atexit.register(_remove_temp, tmp, os.getpid())
        _TEMP.append(tmp)
    return _TEMP[0]


def _remove_temp(tmp: Path, pid: int) -> None:
    if os.getpid() == pid:     # not from a forked child
        shutil.rmtree(tmp, ignore_errors=True)


def refused_file(path: str) -> bool:
    """Whether the Numba cache file `path` of a directory in use must not be read: another user
    owns it (in a private cache) or could write to it (a file planted while the directory was
    open, or left writable by a umask of 0). Warns once per file; Numba then compiles and writes
    the entry afresh, replacing the file. One lstat, when a module's cache is loaded."""
    private = in_use(os.path.dirname(os.path.dirname(path)))
    if private is None:
        return False      # not a tracekern directory: Numba's own rules
    try:
        s = os.lstat(path)
    except FileNotFoundError:
        return False
    me = os.geteuid() if hasattr(os, "geteuid") else None
    if me is None:
        return False
    if stat.S_ISLNK(s.st_mode) or not stat.S_ISREG(s.st_mode):
        why = "not a regular file"
    elif private and s.st_uid not in (0, me):
        why = f"owned by {_user(s.st_uid)}"
    else:
        who = _other_writers(s, me, not private)
        if not who:
            return False
        why = f"writable by {who} (mode {stat.filemode(s.st_mode)})"
    if path not in _WARNED:
        _WARNED.add(path)
        warnings.warn(CacheWarning(f"tracekern ignores the cache file {path}: it is {why}, so it may hold code that is "
                                   "not yours. It is compiled again and replaced; delete the files in that directory "
                                   "that you did not write (deleting the whole cache is always safe)."),
                      stacklevel=user_stacklevel())
    return True


def _stat(p: Path) -> os.stat_result | None:
    try:
        return os.stat(p)
    except FileNotFoundError:
        return None


def _other_writers(s: os.stat_result, me: int, shared: bool) -> str:
    """Who besides the owner can write to a directory: '' (nobody), 'everyone' or 'group NAME'."""
    if s.st_mode & stat.S_IWOTH:
        return "everyone"
    if s.st_mode & stat.S_IWGRP and not shared and not _private_group(s.st_gid, me):
        return f"group {_group(s.st_gid)}"
    return ""


@functools.cache
def _private_group(gid: int, uid: int) -> bool:
    """A user private group (the user's own group, no other members), as Debian and Red Hat make."""
    try:
        import grp
        import pwd

        g, name = grp.getgrgid(gid), pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return False
    return g.gr_name == name and set(g.gr_mem) <= {name}


def _user(uid: int) -> str:
    try:
        import pwd

        return f"user {pwd.getpwuid(uid).pw_name}"
    except (ImportError, KeyError):
        return f"uid {uid}"


def _group(gid: int) -> str:
    try:
        import grp

        return grp.getgrgid(gid).gr_name
    except (ImportError, KeyError):
        return str(gid)




def clear_cache() -> None:
    """Delete every generated module and Numba cache file (the next calls compile again)."""
    shutil.rmtree(cache_dir(), ignore_errors=True)
    _MODULES.clear()


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:32]


def module_path(source: str) -> Path:
    return cache_dir() / f"tk_{source_digest(source)}.py"


# An njit function of a generated module: its decorators (Numba names its cache files by the line of
# the first one, co_firstlineno) and its name.
_JITTED = re.compile(r"^(@(?:njit|jit)\b.*\n(?:@.*\n)*)def (\w+)\(", re.M)


_INDEX_NAMES: dict[str, dict[str, str]] = {}   # source digest -> _index_names (small: no source is kept alive)


def _index_names(source: str) -> dict[str, str]:
    """The file names of Numba's cache indexes (.nbi) of the njit functions of a generated module, by
    function name."""
    digest = source_digest(source)
    names = _INDEX_NAMES.get(digest)
    if names is None:
        tag = f"py{sys.version_info[0]}{sys.version_info[1]}{getattr(sys, 'abiflags', '')}"
        names = _INDEX_NAMES[digest] = {
            m.group(2): f"tk_{digest}.{m.group(2)}-{source.count(chr(10), 0, m.start()) + 1}.{tag}.nbi"
            for m in _JITTED.finditer(source)}
    return names


def on_disk(source: str) -> bool:
    """Whether Numba has machine code for the generated module of this source in the cache directory
    (an index of one of its njit functions). A stat a function: listing the directory instead cost time in
    proportion to everything the cache holds (0.2-0.7 s a warm start with 200,000 files)."""
    where = cache_dir() / "__pycache__"
    return any(os.path.exists(where / name) for name in _index_names(source).values())


def functions_on_disk(source: str, functions) -> bool:
    """Whether Numba has an index (machine code) for each of these njit functions (names) of the
    generated module of this source: one stat a function (on_disk asks for any one of them)."""
    where, names = cache_dir() / "__pycache__", _index_names(source)
    return all(name in names and os.path.exists(where / names[name]) for name in functions)


def module_name(digest: str) -> str:
    """The name a generated module is imported under (sys.modules), so other generated modules can
    import it: a step's driver imports its kernels."""
    return f"tracekern_generated_{digest}"


# How often a write, import or save is tried when another process deletes the cache directory
# (or files in it) meanwhile: each try makes the directories and the file again.
_ATTEMPTS = 4


def load_module(source: str, code=None) -> ModuleType:
    """Import the module with this exact source, writing it first if needed (`code`: its code object,
    compiled from this source at its path, when the caller has it: a step's bundle). A file whose content
    does not match its name (corrupted, truncated) is rewritten, with one CacheWarning; a file or
    directory deleted meanwhile (another process clearing the cache) is written again; any other
    import failure is retried from a fresh file with the module's Numba cache files removed, and
    warned about once if that heals it (else the error is raised)."""
    digest = source_digest(source)
    mod = _MODULES.get(digest)
    if mod is None:
        with _LOADING:   # (one thread imports a module at a time: another would see it half made)
            mod = _MODULES.get(digest) or _load_new(source, digest, code)
    if mod.__tk_source__ != source:   # (128 bits of SHA-256: never seen; never served silently)
        raise RuntimeError(f"two different generated modules have the digest {digest}")
    return mod


_LOADING = threading.RLock()


def _load_new(source: str, digest: str, code=None) -> ModuleType:
    _guard_numba()
    path = module_path(source)
    failed: Exception | None = None
    for attempt in range(_ATTEMPTS):
        try:
            mod = _import(_ensure_file(path, source), source, digest, None if failed else code)
            break
        except FileNotFoundError:   # deleted between the write and the import: write it again
            if attempt == _ATTEMPTS - 1:
                raise
        except Exception as err:
            if failed is not None or attempt == _ATTEMPTS - 1:
                raise
            failed = err
            discard(path)
    if failed is not None:
        _warn_rebuilt(str(path), f"it failed to import ({type(failed).__name__}: {failed})")
    mod.__tk_source__ = source
    _MODULES[digest] = mod
    return mod


def _warn_rebuilt(path: str, why: str) -> None:
    """One CacheWarning per file and process: a damaged cache file was discarded and rebuilt."""
    if path in _WARNED:
        return
    _WARNED.add(path)
    warnings.warn(CacheWarning(f"tracekern discarded the damaged cache file {path}: {why}. It was rebuilt (compiled "
                               "again and written anew); the result is not affected, and nothing needs to be done."),
                  stacklevel=_stacklevel())


def _stacklevel() -> int:
    """user_stacklevel() for a warning from inside Numba (a cache file is loaded in a step's first
    call): the innermost frame outside tracekern, NumPy, Numba and the generated modules."""
    numba_dirs = tuple(os.path.dirname(m.__file__) + os.sep for m in map(sys.modules.get, ("numba", "numba.cuda"))
                       if getattr(m, "__file__", None))
    frame, level = sys._getframe(1), 1
    while frame is not None and (_is_internal(frame) or frame.f_code.co_filename.startswith(numba_dirs)
                                 or in_use(os.path.dirname(frame.f_code.co_filename)) is not None):
        frame, level = frame.f_back, level + 1
    return level if frame is not None else 1


def discard(path: Path) -> None:
    """Remove a generated module and the Numba cache entries (index and data) made from it."""
    _MODULES.pop(path.stem[3:], None)
    _unlink(path)
    pycache = path.parent / "__pycache__"
    if pycache.is_dir():
        for f in pycache.glob(f"{path.stem}.*"):
            _unlink(f)


def _unlink(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _ensure_file(path: Path, source: str) -> Path:
    try:
        if path.read_text() == source:
            return path  # never rewritten when intact: Numba keys its cache on the file's mtime and size
    except (FileNotFoundError, UnicodeDecodeError, OSError):
        pass
    if path.exists():
        _warn_rebuilt(str(path), "its content does not match its name (truncated or overwritten)")
        discard(path)
    private = in_use(str(path.parent)) is not False
    for attempt in range(_ATTEMPTS):
        _make_dirs(path.parent, not private)      # deleted while this process runs: made again, private
        tmp = path.with_name(f".tmp_{uuid.uuid4().hex[:16]}.py")
        try:
            with os.fdopen(new_file(tmp, private), "w") as f:
                f.write(source)
            os.replace(tmp, path)  # atomic: a concurrent process sees the old file or the whole new one
            return path
        except FileNotFoundError:   # the directory was deleted meanwhile: make it again
            _unlink(tmp)
            if attempt == _ATTEMPTS - 1:
                raise
    return path


def new_file(path: str | os.PathLike, private: bool = True) -> int:
    """A new file, open for writing: 0o600 in a private cache; in a shared one 0o666 less the
    umask, so that the group can read it. Fails if `path` exists (no link is followed)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    return os.open(path, flags, 0o600 if private else 0o666)


def _import(path: Path, source: str, digest: str, code=None) -> ModuleType:
    """Run `source` (the text just checked against the file, not the file again, nor a .pyc
    beside it; or `code`, compiled from it at this path) as the module of `path`: Numba's cache
    locates its functions by that file."""
    name = module_name(digest)
    spec = importlib.util.spec_from_loader(name, loader=None, origin=str(path))
    mod = importlib.util.module_from_spec(spec)
    mod.__file__ = str(path)
    sys.modules[name] = mod  # Numba's cache finds the function's module by name when it loads
    try:
        exec(code if code is not None and code.co_filename == str(path) else _code(path, source), mod.__dict__)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def _code(path: Path, source: str):
    """compile(source, path): from the code cache beside Numba's files when it holds the code of this
    very text at this very path (a large driver's compile was 20 to 60 ms of a warm start), else
    compiled and saved there. The file is sealed like Numba's and begins with the SHA-256 of the
    path and the text it was compiled from; it is checked by refused_file() before it is read."""
    code_path = path.parent / "__pycache__" / f"{path.stem}.{sys.implementation.cache_tag}.tkc"
    origin = hashlib.sha256(f"{path}\0{source}".encode()).digest()
    payload = None if refused_file(str(code_path)) else _read_sealed(str(code_path))
    if payload is not None and payload[:32] == origin:
        with contextlib.suppress(Exception):   # (anything else: compiled and written again)
            return marshal.loads(payload[32:])
    code = compile(source, str(path), "exec")
    data = origin + marshal.dumps(code)
    with contextlib.suppress(OSError):   # (not cached: compiled again next time)
        _write_file(str(code_path), data + _SEAL + hashlib.sha256(data).digest(), in_use(str(path.parent)) is not False)
    return code


def _read_sealed(path: str) -> bytes | None:
    """The content of a file written with _SEAL and its checksum, or None (missing, or not matching)."""
    try:
        with open(path, "rb") as f:
            return _unsealed(f.read())
    except OSError:
        return None


# ----------------------------------------------------------------------------- Numba's cache files

_GUARDED: set[str] = set()
_CACHING = ("numba.core.caching", "numba.cuda.core.caching")


def _guard_numba() -> None:
    """Keep Numba's cache files of the generated modules in the checked directory's __pycache__,
    create them 0o600 there and read none that another user wrote: a locator put first in Numba's
    list claims the functions of files in a directory in use (NUMBA_CACHE_DIR would send them
    elsewhere, unchecked), the index and data files are written with new_file() and a checksum,
    and each is checked by refused_file() and against its checksum before Numba unpickles it; an
    entry that fails to load is deleted and compiled again, and a save into a directory deleted
    meanwhile makes it again. Nothing changes for other functions' caches.
    Installed once per caching module: Numba's, and numba-cuda's once it is loaded (numba-cuda
    keeps its own copy). Not per call: only at a module's first load."""
    if len(_GUARDED) == len(_CACHING):
        return
    with _LOCK:
        for name in _CACHING:
            module = sys.modules.get(name)
            if module is None and name == _CACHING[0]:
                module = importlib.import_module(name)
            if module is not None and name not in _GUARDED:
                if _guard_caching_module(module) and name == _CACHING[0]:
                    _lazy_linking_modules()
                    _refresh_once(module)
                    _memoize_magic(importlib.import_module("numba.core.codegen"))
                _GUARDED.add(name)


_NUMBA_PARTS = ("CacheImpl._locator_classes", "IndexDataCacheFile._open_for_write", "IndexDataCacheFile._load_index",
                "IndexDataCacheFile._load_data", "IndexDataCacheFile._data_path", "Cache._load_overload",
                "Cache._save_overload", "Cache.load_overload", "Cache._guard_against_spurious_io_errors")


class _Damaged(Exception):
    """Numba's index or data file `path` of a generated module could not be read (`err`)."""

    def __init__(self, path: str, err: Exception):
        super().__init__(f"{path}: {type(err).__name__}: {err}")
        self.path, self.err = path, err


def _guard_caching_module(caching: ModuleType) -> bool:
    in_tree = getattr(caching, "InTreeCacheLocator", None) or getattr(caching, "_InTreeCacheLocator", None)
    missing = [p for p in _NUMBA_PARTS if not hasattr(getattr(caching, p.split(".")[0], None), p.split(".")[1])]
    if in_tree is None or missing:     # another Numba than the one this was written for: never fail the call
        warnings.warn(CacheWarning(
            f"tracekern does not know this version's {caching.__name__} (missing: {', '.join(missing) or 'a locator'}): "
            "Numba's cache files of generated modules follow Numba's own rules (NUMBA_CACHE_DIR, the umask) "
            "and are read without tracekern's per-file check. The cache directory itself is still checked."),
            stacklevel=user_stacklevel())
        return False

    class TracekernLocator(in_tree):
        """<directory in use>/__pycache__ for the functions of a generated module."""

        @classmethod
        def from_function(cls, py_func, py_file):
            if in_use(os.path.dirname(py_file)) is None:
                return None
            self = cls(py_func, py_file)
            # (never None for a generated module: Numba's next locator would take its cache files
            # elsewhere, unchecked; a directory that cannot be made now is made again when saving)
            with contextlib.suppress(OSError):
                self.ensure_cache_path()
            return self

        def ensure_cache_path(self):
            path, shared = Path(self.get_cache_path()), in_use(os.path.dirname(self._py_file)) is False
            try:
                _make_dir(path, shared)
            except FileNotFoundError:       # the cache directory itself was deleted meanwhile
                _make_dirs(path, shared)

    caching.CacheImpl._locator_classes.insert(0, TracekernLocator)   # in place: the subclasses share the list
    files = caching.IndexDataCacheFile
    numba_open = files._open_for_write

    @contextlib.contextmanager
    def open_for_write(self, filepath):
        where = in_use(os.path.dirname(os.path.dirname(filepath)))
        if where is None:      # not ours: Numba's own
            with numba_open(self, filepath) as f:
                yield f
            return
        buffer = io.BytesIO()
        yield buffer
        payload = buffer.getvalue()
        _write_file(filepath, payload + _SEAL + hashlib.sha256(payload).digest(), private=where)

    numba_load_index, numba_load_data = files._load_index, files._load_data

    def load_index(self):
        if in_use(os.path.dirname(self._index_path)) is None:
            return numba_load_index(self)
        if refused_file(self._index_path):
            return {}
        try:
            if not _sealed(self._index_path):
                return {}                      # (no index: Numba's answer)
            return numba_load_index(self)
        except Exception as err:     # truncated, garbled: a wrong checksum, or whatever unpickling raised
            raise _Damaged(self._index_path, err) from err

    def load_data(self, name):
        path = self._data_path(name)
        if in_use(os.path.dirname(path)) is None:
            return numba_load_data(self, name)
        if refused_file(path):
            raise FileNotFoundError(path)      # what Numba does with an entry whose file went away
        self._tk_data = path                   # (named if rebuilding the function from it fails)
        try:
            if not _sealed(path):
                raise FileNotFoundError(path)
            return numba_load_data(self, name)
        except OSError:
            raise                              # gone: a miss, as Numba has it
        except Exception as err:
            raise _Damaged(path, err) from err

    files._open_for_write = open_for_write
    files._load_index, files._load_data = load_index, load_data

    numba_load_overload, numba_save_overload = caching.Cache._load_overload, caching.Cache._save_overload

    def load_overload(self, sig, target_context):
        """Numba's, for a generated module's function: a cache entry that fails to load in any way
        (an index or data file truncated or garbled, machine code LLVM rejects, code for another
        signature) is deleted, warned about once, and compiled again (None: a miss)."""
        if in_use(self._cache_path) is None:
            return numba_load_overload(self, sig, target_context)
        cache_file = self._cache_file
        cache_file._tk_data = None
        try:
            data = numba_load_overload(self, sig, target_context)
            got, wanted = getattr(getattr(data, "signature", None), "args", None), _arg_types(sig)
            if data is not None and None not in (got, wanted) and tuple(got) != wanted:
                raise ValueError(f"it holds machine code for {tuple(got)}, not for {wanted}")
        except _Damaged as err:
            _heal(cache_file, err.path, err.err)
            return None
        except Exception as err:     # (rebuilding the function: LLVM, Numba's own checks)
            _heal(cache_file, cache_file._tk_data or cache_file._index_path, err)
            return None
        return data

    def save_overload(self, sig, data):
        """Numba's, for a generated module's function: the directory deleted meanwhile (another
        process clearing the cache) is made again and the entry written again; a damaged index
        is replaced; a cache that cannot be written does not fail the call (one CacheWarning)."""
        if in_use(self._cache_path) is None:
            return numba_save_overload(self, sig, data)
        for _ in range(_ATTEMPTS):
            try:
                with _saving_ours():
                    return numba_save_overload(self, sig, data)   # (its ensure_cache_path makes the directories)
            except FileNotFoundError:
                continue
            except _Damaged as err:
                _heal(self._cache_file, err.path, err.err)
            except OSError as err:
                _warn_unsaved(self._cache_file._index_path, err)
                return None
        _warn_unsaved(self._cache_file._index_path, FileNotFoundError("deleted again at each try"))
        return None

    caching.Cache._load_overload, caching.Cache._save_overload = load_overload, save_overload
    return True


# ----------------------------------------------------------------------------- the library format

# Numba caches a function's machine code with the LLVM bitcode of everything linked into it (the
# kernel and every math helper it calls), which it parses and walks on each load so that another
# function could link it in: 2.7 ms of a kernel's 5 ms load, the larger part of a warm start. Nothing
# links a kernel but an njit driver or loop function compiled later, so the machine code of the
# generated modules is saved in a format of its own (LIBRARY_FORMAT, part of every unit's salt) that
# also lists the symbols the bitcode defines: a load registers those names and keeps the bitcode as
# bytes, parsed only when something links the library. Other functions keep Numba's format.
LIBRARY_FORMAT = "tracekern-object-1"
_SAVING = threading.local()


@contextlib.contextmanager
def _saving_ours():
    """Numba saves a generated module's function inside: its library is serialized in LIBRARY_FORMAT."""
    _SAVING.ours = True
    try:
        yield
    finally:
        _SAVING.ours = False


def _lazy_linking_modules() -> None:
    """Install LIBRARY_FORMAT in Numba's CPU code libraries (once, with the cache guard)."""
    codegen = importlib.import_module("numba.core.codegen")   # (Numba is loaded: its caching module is)
    library, ll = codegen.CPUCodeLibrary, codegen.ll
    parts = ("serialize_using_object_code", "_unserialize", "_get_module_for_linking", "enable_object_caching",
             "_set_compiled_object", "_finalize_final_module")
    if not all(hasattr(library, p) for p in parts) or not hasattr(codegen.JitEngine(None), "_defined_symbols"):
        return     # (another Numba than the one this was written for: its own format, parsed at each load)
    numba_serialize, numba_unserialize = library.serialize_using_object_code, library._unserialize.__func__
    numba_linking = library._get_module_for_linking

    def serialize_using_object_code(self):
        if not getattr(_SAVING, "ours", False):
            return numba_serialize(self)
        name, kind, (obj, bitcode) = numba_serialize(self)
        shared = self._get_module_for_linking()
        symbols = tuple(sorted({g.name for gs in (shared.functions, shared.global_variables) for g in gs
                                if not g.is_declaration}))
        return name, LIBRARY_FORMAT, (obj, bitcode, symbols)

    def _unserialize(cls, codegen_, state):
        name, kind, data = state
        if kind != LIBRARY_FORMAT:
            return numba_unserialize(cls, codegen_, state)
        obj, bitcode, symbols = data
        self = codegen_.create_library(name)   # (what Numba does for its 'object' kind, less the parse)
        self.enable_object_caching()
        self._set_compiled_object(obj)
        self._tk_bitcode = bitcode
        self._finalize_final_module()
        codegen_._engine._defined_symbols.update(symbols)
        return self

    def _get_module_for_linking(self):
        bitcode = self.__dict__.pop("_tk_bitcode", None)
        if bitcode is not None and self._shared_module is None:
            self._shared_module = ll.parse_bitcode(bitcode)
        return numba_linking(self)

    jit_library = getattr(codegen, "JITCodeLibrary", None)
    numba_finalize = getattr(jit_library, "_finalize_specific", None)

    def _finalize_specific(self):
        if not getattr(_DEFERRED, "on", False):
            return numba_finalize(self)
        self._codegen._scan_and_fix_unresolved_refs(self._final_module)   # (the engine's finalize: the caller's)

    if numba_finalize is not None and hasattr(codegen.JITCPUCodegen, "_scan_and_fix_unresolved_refs"):
        jit_library._finalize_specific = _finalize_specific
    library.serialize_using_object_code = serialize_using_object_code
    library._unserialize = classmethod(_unserialize)
    library._get_module_for_linking = _get_module_for_linking


_REFRESHED: set[int] = set()   # id() of the target contexts refreshed for a generated module's load


def refreshed(target_context) -> None:
    """Refresh a target context before loading machine code into it, once per process (_refresh_once)."""
    if id(target_context) not in _REFRESHED:
        target_context.refresh()
        _REFRESHED.add(id(target_context))


_DEFERRED = threading.local()


@contextlib.contextmanager
def deferred_finalize():
    """Libraries made inside are added to LLVM's execution engine without finalizing it (relocations,
    memory protections): the caller finalizes the engine once for all of them (a bundle's load)."""
    _DEFERRED.on = True
    try:
        yield
    finally:
        _DEFERRED.on = False


def _refresh_once(caching: ModuleType) -> None:
    """Numba refreshes its target context's registries before every cache load (about 1 ms, 2.3 ms
    profiled, a kernel: most of a warm kernel load after LIBRARY_FORMAT). Loading machine code
    needs them installed, not re-read: a generated module's function refreshes the context at its
    first load in a process; compiling refreshes it anyway (Numba's compiler does, before typing)."""
    numba_load = caching.Cache.load_overload
    refreshed = _REFRESHED

    def load_overload(self, sig, target_context):
        if in_use(self._cache_path) is None or id(target_context) not in refreshed:
            data = numba_load(self, sig, target_context)
            if in_use(self._cache_path) is not None:
                refreshed.add(id(target_context))   # (Numba's target contexts live as long as the process)
            return data
        with self._guard_against_spurious_io_errors(), quiet_llvm():
            return self._load_overload(sig, target_context)

    caching.Cache.load_overload = load_overload


# Each call into LLVM (about 35 a kernel load) runs Numba's callbacks on llvmlite's lock, which
# broadcast a numba:llvm_lock start and end event to its listeners: only compile-time statistics (a
# load is no compile). They were about a fifth of a warm kernel load, profiled; a generated module's
# cache load runs without them (under Numba's compiler lock: no compile runs meanwhile).
@contextlib.contextmanager
def quiet_llvm():
    lock = getattr(getattr(sys.modules.get("llvmlite.binding.ffi"), "lib", None), "_lock", None)
    callbacks = getattr(lock, "_cblist", None)
    if not isinstance(callbacks, list):   # (another llvmlite: its callbacks run)
        yield
        return
    lock._cblist = []
    try:
        yield
    finally:
        lock._cblist = callbacks


def _memoize_magic(codegen_module: ModuleType) -> None:
    """Numba's cache key of every load and save holds its codegen's magic_tuple (the target triple,
    the host CPU's name and features), asked of LLVM each time: constant in a process, asked once."""
    cls = getattr(codegen_module, "CPUCodegen", None)
    numba_magic = getattr(cls, "magic_tuple", None)
    if numba_magic is None or getattr(numba_magic, "_tk_memoized", False):
        return

    def magic_tuple(self):
        magic = self.__dict__.get("_tk_magic")
        if magic is None:
            magic = self.__dict__["_tk_magic"] = numba_magic(self)
        return magic

    magic_tuple._tk_memoized = True
    cls.magic_tuple = magic_tuple


def _arg_types(sig) -> tuple | None:
    """The argument types of a signature Numba compiles for (a tuple of types, or a Signature)."""
    if isinstance(sig, tuple):
        return sig
    args = getattr(sig, "args", None)
    return tuple(args) if args is not None else None


def _heal(cache_file, path: str, err: Exception) -> None:
    """Delete one function's Numba cache entry (its index and data files): it failed to load."""
    index = cache_file._index_path
    base = os.path.basename(index)[:-len(".nbi")]
    _unlink(index)
    for f in Path(os.path.dirname(index)).glob(glob.escape(base) + ".*.nbc"):
        _unlink(f)
    _warn_rebuilt(path, f"Numba could not load it ({type(err).__name__}: {err})")


# Numba's index and data files of generated modules end with this and the SHA-256 of what comes
# before it (pickle ignores bytes after its end): machine code damaged anywhere, which LLVM would
# load as it is (and crash on, or run), is found before it is read.
_SEAL = b"\ntracekern-sha256:"


def _sealed(path: str) -> bool:
    """Whether the Numba cache file `path` exists; raises ValueError if it does not end with the
    checksum of its content (truncated, overwritten in part, or written without one)."""
    try:
        with open(path, "rb") as f:
            blob = f.read()
    except FileNotFoundError:
        return False
    if _unsealed(blob) is None:
        raise ValueError("its content does not match its checksum (truncated or overwritten)")
    return True


def _unsealed(blob: bytes) -> bytes | None:
    """A sealed blob's content (what came before _SEAL and its SHA-256), or None if it does not match."""
    n = len(_SEAL) + 32
    if len(blob) < n or blob[-n:-32] != _SEAL or hashlib.sha256(blob[:-n]).digest() != blob[-32:]:
        return None
    return blob[:-n]


def _write_file(path: str, data: bytes, private: bool) -> None:
    """Write `data` to `path` at once (a new file, 0o600 in a private cache, then renamed over it)."""
    tmp = f"{path}.tmp.{uuid.uuid4().hex[:16]}"
    try:
        with os.fdopen(new_file(tmp, private), "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        _unlink(tmp)
        raise


def plan_path(key: str) -> Path:
    return cache_dir() / "plans" / f"{key}.pkl"


def load_plan(key: str) -> bytes | None:
    """The bytes saved under `key` by save_plan (a finished step: staging's plan cache), or None
    when there are none or they fail their seal (such a file is deleted)."""
    path = plan_path(key)
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    n = len(_SEAL) + 32
    if len(blob) < n or blob[-n:-32] != _SEAL or hashlib.sha256(blob[:-n]).digest() != blob[-32:]:
        _unlink(path)
        return None
    return blob[:-n]


def save_plan(key: str, data: bytes, what: str | None = None) -> None:
    """Save `data` (a finished step's pickle, or the bytes `what` names) under `key`, sealed with its
    SHA-256 like Numba's files here. A failed write warns once per file, or with `what` once per
    directory (the planner's solutions: many small files)."""
    path = plan_path(key)
    private = in_use(str(cache_dir())) is not False
    try:
        _make_dirs(path.parent, not private)
        _write_file(str(path), data + _SEAL + hashlib.sha256(data).digest(), private)
    except OSError as err:
        if what is None:
            _warn_unsaved(str(path), err)
        else:
            _warn_unsaved(str(path), err, f"{what} is used in this process but not kept for others", str(path.parent))


def _warn_unsaved(path: str, err: Exception, what: str = "the compiled code is used in this process but not cached for others",
                  once: str | None = None) -> None:
    once = once or path
    if once in _WARNED:
        return
    _WARNED.add(once)
    warnings.warn(CacheWarning(f"tracekern could not write the cache file {path} ({type(err).__name__}: {err}): {what}."),
                  stacklevel=_stacklevel())


def portable_lines(lines: dict) -> dict[str, dict[int, tuple[str, str | None]]]:
    """`lines` without the equations (which hold the graph): what pickles with a compiled step."""
    return {d: {n: e if isinstance(e, tuple) else (e.primitive.name, e.source) for n, e in per.items()}
            for d, per in lines.items()}


def located_error(backend: str, err: Exception, lines: dict, source: str) -> Exception:
    """A compile error of a generated module, naming the equation (and the user's line) that the
    failing generated line came from; `lines` maps a module's digest to {generated line number:
    equation, or (primitive name, source) pair (portable_lines)}."""
    text = str(err)
    where, path = "", module_path(source)
    for m in re.finditer(r"tk_([0-9a-f]+)\.py\", line (\d+)", text):
        hit = lines.get(m.group(1), {}).get(int(m.group(2)))
        if hit is not None:
            name, src = hit if isinstance(hit, tuple) else (hit.primitive.name, hit.source)
            where = f" while compiling {name} (from {src or 'unknown source'})"
            path = cache_dir() / f"tk_{m.group(1)}.py"
    head = text.strip().splitlines()[:6]
    return TracekernError(f"the {backend} backend failed{where}: Numba reported:\n  " + "\n  ".join(head)
                          + f"\nThe generated source is in {path} "
                          "(also jitted.lower(*args).source). Try backend='interpret' meanwhile.")
