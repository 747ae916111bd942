"""The disk cache of generated modules: each rendered source is written once to a content-hashed
file under the cache directory and imported from there, so Numba's cache=True keeps its machine code.

Directory: $TRACEKERN_CACHE_DIR, else the user's cache directory ($XDG_CACHE_HOME/tracekern,
~/Library/Caches/tracekern, %LOCALAPPDATA%/tracekern). Deleting it is always safe."""
from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from ..errors import TracekernError

_MODULES: dict[str, ModuleType] = {}


def cache_dir() -> Path:
    env = os.environ.get("TRACEKERN_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA", Path.home() / "AppData" / "Local"))
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return base / "tracekern"


def clear_cache() -> None:
    """Delete every generated module and Numba cache file (the next calls compile again)."""
    shutil.rmtree(cache_dir(), ignore_errors=True)
    _MODULES.clear()


def source_digest(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:32]


def module_path(source: str) -> Path:
    return cache_dir() / f"tk_{source_digest(source)}.py"


def load_module(source: str) -> ModuleType:
    """Import the module with this exact source, writing it first if needed. A file whose content
    does not match its name (corrupted, truncated) is rewritten; an import failure is retried once
    from a fresh file with the module's Numba cache files removed."""
    digest = source_digest(source)
    mod = _MODULES.get(digest)
    if mod is not None:
        return mod
    path = module_path(source)
    try:
        mod = _import(_ensure_file(path, source), digest)
    except Exception:
        discard(path)
        mod = _import(_ensure_file(path, source), digest)
    _MODULES[digest] = mod
    return mod


def discard(path: Path) -> None:
    """Remove a generated module and the Numba cache entries (index and data) made from it."""
    _MODULES.pop(path.stem[3:], None)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    pycache = path.parent / "__pycache__"
    if pycache.is_dir():
        for f in pycache.glob(f"{path.stem}.*"):
            try:
                f.unlink()
            except FileNotFoundError:
                pass


def _ensure_file(path: Path, source: str) -> Path:
    try:
        if path.read_text() == source:
            return path  # never rewritten when intact: Numba keys its cache on the file's mtime and size
    except (FileNotFoundError, UnicodeDecodeError, OSError):
        pass
    if path.exists():
        discard(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp_", suffix=".py")
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp, path)  # atomic: a concurrent process sees the old file or the whole new one
    return path


def _import(path: Path, digest: str) -> ModuleType:
    name = f"tracekern_generated_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # Numba's cache finds the function's module by name when it loads
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


def portable_lines(lines: dict) -> dict[int, tuple[str, str | None]]:
    """`lines` without the equations (which hold the graph): what pickles with a compiled step."""
    return {n: e if isinstance(e, tuple) else (e.primitive.name, e.source)
            for n, e in lines.items()}


def located_error(backend: str, err: Exception, lines: dict, source: str) -> Exception:
    """A compile error of a generated module, naming the equation (and the user's line) that the
    failing generated line came from; `lines` maps generated line numbers to equations (or to
    (primitive name, source) pairs: portable_lines)."""
    text = str(err)
    where = ""
    for m in re.finditer(r"tk_[0-9a-f]+\.py\", line (\d+)", text):
        hit = lines.get(int(m.group(1)))
        if hit is not None:
            name, src = hit if isinstance(hit, tuple) else (hit.primitive.name, hit.source)
            where = f" while compiling {name} (from {src or 'unknown source'})"
    head = text.strip().splitlines()[:6]
    return TracekernError(f"the {backend} backend failed{where}: Numba reported:\n  " + "\n  ".join(head)
                          + f"\nThe generated source is in {module_path(source)} "
                          "(also jitted.lower(*args).source). Try backend='interpret' meanwhile.")
