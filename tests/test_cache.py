"""The disk cache (backends/cache.py): modules and Numba's machine code shared across processes, damaged
files rebuilt, and its safety: a directory that another user could write or replace is refused with
one tk.CacheWarning (the call compiles into a private temporary directory and stays correct), a
pickle planted in Numba's index or data files never runs (in a refused directory, or as a file of
another user or writable by others in your own), what the cache creates is 0o700 (directories) and
0o600 (files), Numba's files included, and a call never enters cache.py."""
import hashlib
import importlib.util
import json
import marshal
import os
import pickle
import shutil
import stat
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest

import tracekern as tk
from tracekern.backends import bundles, cache

posix_only = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners and modes")

_PROGRAM = """
    import json, sys, numpy as np, tracekern as tk
    from tracekern.backends import cache, units
    f = tk.value_and_grad(lambda x: np.sum(np.tanh(x) ** 2))
    v, g = f(np.linspace(0, 1, 64))
    step = next(iter(f._cache.values())).run
    kernels = [sys.modules[cache.module_name(cache.source_digest(s))].kernel for s in step.modules[:-1]]
    print(json.dumps(dict(hits=sum(sum(k.stats.cache_hits.values()) for k in kernels), compiled=units.compiled()["kernels"],
                          value=float(v), grad=g.tolist(), file=step._module.__file__)))
"""


def _loss(x):
    return np.sum(np.tanh(x) ** 2)


def _start(cache_dir, **extra):
    env = dict(os.environ)
    env.pop("TRACEKERN_CACHE_SHARED", None)
    env.update(TRACEKERN_CACHE_DIR=str(cache_dir), **extra)
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(_PROGRAM)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(proc) -> tuple[dict, str]:
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


def _run(cache_dir, **env) -> tuple[dict, str]:
    return _finish(_start(cache_dir, **env))


def _assert_correct(result: dict):
    """The value and gradient a process printed, against the interpreter and central differences."""
    x = np.linspace(0, 1, 64)
    want_v, want_g = tk.jit(tk.value_and_grad(_loss), backend="interpret")(x)
    assert np.asarray(result["grad"]).shape == want_g.shape
    np.testing.assert_allclose(result["value"], want_v, rtol=1e-12)
    np.testing.assert_allclose(result["grad"], want_g, rtol=1e-10, atol=1e-12)
    eps = 1e-6
    fd = [(_loss(x + eps * e) - _loss(x - eps * e)) / (2 * eps) for e in np.eye(64)]
    np.testing.assert_allclose(result["grad"], fd, rtol=1e-6, atol=1e-8)


def _modes(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


# ----------------------------------------------------------------------------- across processes


@posix_only
def test_processes_share_a_fresh_private_cache(tmp_path):
    """Three processes compile into one fresh directory at once; all is 0o700 and 0o600, Numba's
    files included, and a fourth process loads the machine code, even with NUMBA_CACHE_DIR set
    elsewhere (Numba's files of generated modules stay in the checked directory)."""
    root = tmp_path.resolve() / "new" / "cache"   # neither exists yet
    results = [_finish(p)[0] for p in [_start(root) for _ in range(3)]]
    for r in results:
        _assert_correct(r)
        assert r["value"] == results[0]["value"] and r["grad"] == results[0]["grad"]
        assert Path(r["file"]).parent == root
    modes = _modes(root.parent)
    assert list(root.glob("tk_*.py")) and list(root.glob("__pycache__/*.nbi")) and list(root.glob("__pycache__/*.nbc"))
    for name, mode in modes.items():
        path = root.parent / name
        assert mode == (0o700 if path.is_dir() else 0o600), (name, oct(mode))
    assert not [p for p in root.rglob("*") if ".tmp" in p.name]        # no temporary file left behind

    numba_dir = tmp_path / "numba"
    again, _ = _run(root, NUMBA_CACHE_DIR=str(numba_dir))
    assert again["hits"] >= 1 and again["compiled"] == 0      # loaded, not compiled
    assert again["value"] == results[0]["value"] and again["grad"] == results[0]["grad"]
    assert not list(numba_dir.rglob("tk_*"))


def test_corrupted_cache_files_are_rebuilt(tmp_path, monkeypatch):
    first, _ = _run(tmp_path)
    for f in tmp_path.glob("tk_*.py"):
        f.write_text("this is not python (")
    for f in (tmp_path / "__pycache__").glob("*.nb*"):
        f.write_bytes(b"\x00garbage")
    second, _ = _run(tmp_path)
    third, _ = _run(tmp_path)
    _assert_correct(second)
    assert second["value"] == first["value"] == third["value"]
    assert third["hits"] >= 1 and third["compiled"] == 0
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path))
    assert cache.cache_dir() == tmp_path.resolve()
    cache.clear_cache()
    assert not tmp_path.exists()


def _damage(kind: str, pycache: Path) -> Path:
    """Damage the one Numba cache entry of _PROGRAM's kernel (its driver is plain Python) as a
    crash, a full disk or a stray write would: returns the file damaged."""
    (index,), (data,) = pycache.glob("*.nbi"), pycache.glob("*.nbc")
    if kind == "truncated .nbc":
        data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
        return data
    if kind == "garbled .nbc":     # in its machine code: unpickles, and LLVM crashed on it or ran it
        blob = bytearray(data.read_bytes())
        blob[2000:2064] = b"\xab" * 64
        data.write_bytes(bytes(blob))
        return data
    if kind == "garbage .nbi":
        index.write_bytes(b"garbage, not a pickle")
        return index
    assert kind == "truncated .nbi"
    index.write_bytes(index.read_bytes()[:10])
    return index


def _rebuilt(err: str) -> list[str]:
    return [line for line in err.splitlines() if "CacheWarning: tracekern discarded the damaged cache file" in line]


@posix_only
def test_damaged_numba_files_heal_with_one_warning(tmp_path):
    """A truncated or garbled Numba index or data file: the next process (two at once, for one kind)
    gets the right result and warns once, naming the file; the entry is deleted and written anew,
    private, so the process after it loads the machine code without a warning."""
    genuine = tmp_path / "genuine"
    first, _ = _run(genuine)
    kinds = ["truncated .nbc", "garbled .nbc", "garbage .nbi", "truncated .nbi"]
    damaged = {}
    for kind in kinds:
        shutil.copytree(genuine, tmp_path / kind)
        damaged[kind] = _damage(kind, tmp_path / kind / "__pycache__")
    procs = {kind: [_start(tmp_path / kind)] for kind in kinds}
    procs[kinds[0]].append(_start(tmp_path / kinds[0]))    # two processes sharing the cache, one or both heal
    for kind in kinds:
        runs = [_finish(p) for p in procs[kind]]
        for result, err in runs:
            _assert_correct(result)
            assert result["value"] == first["value"] and result["grad"] == first["grad"]
            assert len(_rebuilt(err)) <= 1, err
        warned = [w for _, err in runs for w in _rebuilt(err)]
        assert warned and all(str(damaged[kind]) in w and "It was rebuilt" in w for w in warned), (kind, warned)
    for kind in kinds:
        third, err = _run(tmp_path / kind)
        _assert_correct(third)
        assert "CacheWarning" not in err and third["hits"] >= 1 and third["compiled"] == 0, (kind, err)
        for name, mode in _modes(tmp_path / kind).items():
            assert mode == (0o700 if (tmp_path / kind / name).is_dir() else 0o600), (kind, name, oct(mode))


@posix_only
def test_machine_code_for_another_signature_is_not_served(fresh):
    """An index that names another signature's data file (two entries swapped, as concurrent writers
    numbering their entries alike could leave them): the entry is rebuilt with one warning, and each
    call gets its own signature's code (else an int64 call ran the float64 code and returned a float)."""
    path, caught = fresh
    source = "from numba import njit\n\n\n@njit(cache=True)\ndef kernel(x):\n    return x * 2  # swapped\n"
    module = cache.load_module(source)
    assert module.kernel(3) == 6 and module.kernel(2.5) == 5.0
    first, second = sorted((path / "__pycache__").glob("*.nbc"))
    a, b = first.read_bytes(), second.read_bytes()
    first.write_bytes(b)
    second.write_bytes(a)
    cache._MODULES.pop(cache.source_digest(source))        # (a fresh process's view: loaded from disk)
    again = cache.load_module(source)
    assert again is not module
    got = [again.kernel(3), again.kernel(2.5)]
    assert got == [6, 5.0] and type(got[0]) is int and type(got[1]) is float, got
    (warning,) = _cache_warnings(caught)
    assert "It was rebuilt" in warning and str(path / "__pycache__") in warning


@pytest.fixture
def numba_only_here(monkeypatch):
    """No compile workers: what is deleted while this process compiles is seen here."""
    monkeypatch.setenv("TRACEKERN_COMPILE_WORKERS", "0")


def _scaled_loss(scale: float):
    """A loss whose value_and_grad has several kernels (matmuls, loops); `scale` makes their text new
    to this process, so that they are written, imported and compiled here, not found loaded."""
    def loss(x, w):
        return np.sum(np.tanh(x @ w) * scale)
    return loss


def _check_loss(loss, v, g):
    """value_and_grad of `loss` at _loss_args(): against the interpreter and central differences of NumPy."""
    x, w = _loss_args()
    vi, gi = tk.jit(tk.value_and_grad(loss, argnums=(0, 1)), backend="interpret")(x, w)
    np.testing.assert_allclose(v, vi, rtol=1e-12)
    eps = 1e-6
    for a, (got, want) in enumerate(zip(g, gi)):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
        args = [x, w]
        fd = np.zeros_like(args[a])
        for i in np.ndindex(*args[a].shape):
            up = [t.copy() for t in args]
            down = [t.copy() for t in args]
            up[a][i] += eps
            down[a][i] -= eps
            fd[i] = (loss(*up) - loss(*down)) / (2 * eps)
        np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-8)


def _loss_args():
    # (every product contracts more than fusion.SMALL_CONTRACTION entries: matmul kernels, not loops)
    rng = np.random.default_rng(3)
    return rng.standard_normal((6, 7)), rng.standard_normal((7, 5))


@posix_only
def test_a_cache_deleted_between_the_write_and_the_import_is_written_again(fresh, numba_only_here, monkeypatch):
    """Another process clears the cache directory after a module is written and before it is imported
    (a hook in between), twice in a row: the module is written again and imported, without an error
    or a warning."""
    path, caught = fresh
    cleared = []
    real_import = cache._import

    def import_after_a_clear(file, source, digest, *code):
        if len(cleared) < 2:
            cleared.append(file)
            shutil.rmtree(path, ignore_errors=True)
        return real_import(file, source, digest, *code)

    monkeypatch.setattr(cache, "_import", import_after_a_clear)
    loss = _scaled_loss(1.109375)
    v, g = tk.value_and_grad(loss, argnums=(0, 1))(*_loss_args())
    assert len(cleared) == 2 and not _cache_warnings(caught)
    _check_loss(loss, v, g)
    assert list(path.glob("tk_*.py")) and list(path.glob("__pycache__/*.nbi"))
    for name, mode in _modes(path).items():
        assert mode == (0o700 if (path / name).is_dir() else 0o600), (name, oct(mode))


@posix_only
def test_a_cache_cleared_in_the_middle_of_a_compile_is_made_again(fresh, numba_only_here, monkeypatch):
    """The cache directory is deleted after the first of a step's kernels is compiled (as another
    process's clear_cache would): the others compile and are written into it made again, private,
    and the step's result is right. Nothing is taken for damaged (discarded and compiled again)."""
    from tracekern.backends import units, workers
    path, caught = fresh
    cleared, discarded = [], []
    real_compile_all, real_discard = workers.compile_all, cache.discard
    monkeypatch.setattr(cache, "discard", lambda p: discarded.append(p) or real_discard(p))

    def compile_all(jobs, compile_here):
        def then_clear(i):
            compile_here(i)
            if not cleared:
                cleared.append(i)
                shutil.rmtree(path)
        return real_compile_all(jobs, then_clear)

    monkeypatch.setattr(workers, "compile_all", compile_all)
    loss = _scaled_loss(0.890625)
    before = units.compiled()["kernels"]
    v, g = tk.value_and_grad(loss, argnums=(0, 1))(*_loss_args())
    assert cleared and units.compiled()["kernels"] - before >= 2, "kernels compiled after the clear"
    assert not _cache_warnings(caught) and not discarded, discarded
    _check_loss(loss, v, g)
    assert list(path.glob("__pycache__/*.nbi")), "the kernels compiled after the clear are cached"
    for name, mode in _modes(path).items():
        assert mode == (0o700 if (path / name).is_dir() else 0o600), (name, oct(mode))


class _Planted:
    """Unpickled, runs `code` (creating a marker file) and returns what it evaluates to."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return eval, (self.code,)


def _plant(genuine: Path, dest: Path, markers: dict, index: bool = True, data: bool = True) -> dict[str, list[Path]]:
    """A copy of a genuine cache whose Numba index and/or data files (every one: a step's driver and
    its kernels each have theirs) hold a pickle that creates a marker file when loaded (the index's
    still names Numba's version, so the data is read next). Each ends with its checksum, as the
    cache writes them: the checksum finds damage, it is no defence (whoever can write a file can
    compute it)."""
    shutil.copytree(genuine, dest)
    nbis = sorted((dest / "__pycache__").glob("*.nbi"))
    nbcs = sorted((dest / "__pycache__").glob("*.nbc"))
    assert nbis and nbcs
    for nbi in nbis if index else ():
        with open(nbi, "rb") as f:
            pickle.load(f)                       # Numba's version: checked before the rest is unpickled
            rest = f.read()
        _write_sealed(nbi, pickle.dumps(_Planted(f"open({str(markers['nbi'])!r}, 'w').close() or {numba.__version__!r}"))
                      + rest[:-len(cache._SEAL) - 32])
    for nbc in nbcs if data else ():
        _write_sealed(nbc, pickle.dumps(_Planted(f"open({str(markers['nbc'])!r}, 'w').close()")))
    return {"nbi": nbis, "nbc": nbcs}


def _write_sealed(path: Path, payload: bytes) -> None:
    path.write_bytes(payload + cache._SEAL + hashlib.sha256(payload).digest())


@posix_only
def test_planted_pickles_are_never_loaded(tmp_path):
    """A pickle planted in Numba's index (.nbi) or data (.nbc) file never runs: not in a
    world-writable directory (refused: the process warns, compiles privately and is right), and not
    in your private directory when the file itself is writable by others or not yours (ignored
    with a warning, compiled again and replaced). The same files in a trusted shared directory do
    run: the plant is live, and the test can fail."""
    tmp_path = tmp_path.resolve()
    genuine = tmp_path / "genuine"
    _run(genuine)
    markers = {kind: tmp_path / f"ran-{kind}" for kind in ("nbi", "nbc")}

    open_dir = tmp_path / "open"
    _plant(genuine, open_dir, markers)
    os.chmod(open_dir, 0o777)
    before = {p: p.read_bytes() for p in open_dir.rglob("*") if p.is_file()}
    result, err = _run(open_dir)
    _assert_correct(result)
    assert "CacheWarning" in err and f"{open_dir} is writable by everyone" in err and "chmod o-w" in err
    assert Path(result["file"]).parent != open_dir
    assert not any(m.exists() for m in markers.values())
    assert {p: p.read_bytes() for p in open_dir.rglob("*") if p.is_file()} == before     # nothing read or written

    # in a private directory: an index anyone can write, then a data file of another user
    # (or, without root to give it away, one anyone can write)
    for kind in ("nbi", "nbc"):
        mine = tmp_path / f"mine-{kind}"
        files = _plant(genuine, mine, markers, index=kind == "nbi", data=kind == "nbc")[kind]
        for file in files:
            if kind == "nbc" and os.geteuid() == 0:
                os.chown(file, 65534, 65534)
                why = "owned by"
            else:
                os.chmod(file, 0o666)
                why = "writable by everyone"
        result, err = _run(mine)
        _assert_correct(result)
        assert f"ignores the cache file {files[0]}: it is {why}" in err and Path(result["file"]).parent == mine
        assert not markers[kind].exists()
        for file in files:
            assert file.stat().st_uid == os.geteuid() and stat.S_IMODE(file.stat().st_mode) == 0o600   # replaced

    # the control: a shared cache trusts whoever can write to it, and then the planted pickles run
    shared = tmp_path / "shared"
    _plant(genuine, shared, markers)
    os.chmod(shared, 0o770)
    result, err = _run(shared, TRACEKERN_CACHE_SHARED="1")
    _assert_correct(result)
    assert "CacheWarning" not in err and Path(result["file"]).parent == shared
    assert all(m.exists() for m in markers.values())


# ----------------------------------------------------------------------------- the checks, in this process


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """TRACEKERN_CACHE_DIR set to a new path (not created), warnings always shown."""
    monkeypatch.delenv("TRACEKERN_CACHE_SHARED", raising=False)
    path = tmp_path.resolve() / "c"
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield path, caught


def _cache_warnings(caught) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, tk.CacheWarning)]


@posix_only
def test_a_fresh_directory_and_its_files_are_private(fresh):
    path, caught = fresh
    assert cache.cache_dir() == path and not _cache_warnings(caught)
    mod = cache.load_module("VALUE = 'fresh'\n")
    assert mod.VALUE == "fresh" and Path(mod.__file__).parent == path
    code = f"__pycache__/{Path(mod.__file__).stem}.{sys.implementation.cache_tag}.tkc"   # (its code object)
    assert _modes(path) == {".": 0o700, "__pycache__": 0o700, Path(mod.__file__).name: 0o600, code: 0o600}
    # the hooks on Numba's files know the directory, and subdirectories a layout might add
    assert cache.in_use(str(path)) is True and cache.in_use(str(path / "sub" / "dir")) is True
    assert cache.in_use(str(path.parent)) is None
    cache.clear_cache()                          # deleted while the process runs: made again, private
    mod = cache.load_module("VALUE = 'again'\n")
    assert _modes(path) == {".": 0o700, Path(mod.__file__).name: 0o600}


@posix_only
def test_a_world_writable_directory_is_refused_once_with_the_fix(fresh):
    path, caught = fresh
    path.mkdir(mode=0o700)
    os.chmod(path, 0o777)
    got = cache.cache_dir()
    assert got != path and got == cache.cache_dir()          # decided once per process and directory
    (warning,) = [w for w in caught if issubclass(w.category, tk.CacheWarning)]
    message = str(warning.message)
    assert f"{path} is writable by everyone" in message and "private temporary directory" in message
    assert f"chmod o-w {path}" in message and warning.filename == __file__      # names the user's line
    assert _modes(got)["."] == 0o700
    assert list(path.iterdir()) == []                        # nothing written into the refused directory
    mod = cache.load_module("VALUE = 'elsewhere'\n")
    assert Path(mod.__file__).parent == got and mod.VALUE == "elsewhere"


@posix_only
def test_threads_making_their_first_call_at_once_warn_once(fresh):
    path, caught = fresh
    path.mkdir()
    os.chmod(path, 0o777)
    seen, barrier = [], threading.Barrier(8)

    def first_call():
        barrier.wait()
        seen.append(cache.cache_dir())

    threads = [threading.Thread(target=first_call) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 8 and len(set(seen)) == 1 and seen[0] != path
    assert len(_cache_warnings(caught)) == 1


@posix_only
@pytest.mark.parametrize("case", ["owner", "group", "pycache", "parent", "parent-group", "parent-owner", "file",
                                  "uncreatable"])
def test_what_is_refused(case, fresh, monkeypatch):
    path, caught = fresh
    parent = path.parent
    path.mkdir(mode=0o700)
    me = os.geteuid()
    if case == "owner":
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)
        want = f"{path} is owned by"
    elif case == "group":
        os.chmod(path, 0o770)
        monkeypatch.setattr(cache, "_private_group", lambda gid, uid: False)
        want = f"{path} is writable by group"
    elif case == "pycache":
        (path / "__pycache__").mkdir()
        os.chmod(path / "__pycache__", 0o777)
        want = f"{path / '__pycache__'} is writable by everyone"
    elif case == "parent":
        os.chmod(parent, 0o777)
        want = f"its parent {parent} is writable by everyone"
    elif case == "parent-group":
        os.chmod(parent, 0o770)
        monkeypatch.setattr(cache, "_private_group", lambda gid, uid: False)
        want = f"its parent {parent} is writable by group"
    elif case == "parent-owner":
        monkeypatch.setattr(os, "stat", _stat_with_owner(parent, os.stat(parent).st_uid + 1))
        want = f"its parent {parent} is owned by"
    elif case == "file":
        path.rmdir()
        path.write_text("")
        want = f"{path} is not a directory"
    else:
        path.rmdir()
        path.write_text("")
        monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(path / "below-a-file"))
        want = "cannot be used"
    got = cache.cache_dir()
    monkeypatch.undo()
    os.chmod(parent, 0o700)
    (message,) = _cache_warnings(caught)
    assert want in message and got != path and got.is_dir(), message
    assert cache.check_dir(got) is None


def _stat_with_owner(target: Path, uid: int):
    real_stat = os.stat

    def fake(p, *args, **kwargs):
        s = real_stat(p, *args, **kwargs)
        if os.fspath(p) == os.fspath(target):
            fields = list(s)
            fields[stat.ST_UID] = uid
            return os.stat_result(fields)
        return s
    return fake


@posix_only
def test_what_is_accepted(tmp_path, monkeypatch):
    open_dir = tmp_path / "tmp"                  # like /tmp: world-writable but sticky
    open_dir.mkdir()
    os.chmod(open_dir, 0o1777)
    ok = cache.prepare_dir(open_dir / "mine" / "cache")
    assert cache.check_dir(ok) is None
    assert stat.S_IMODE(os.stat(open_dir / "mine").st_mode) == 0o700
    link = tmp_path / "link"                     # a link: resolved once, the real path is used
    link.symlink_to(ok)
    assert cache.prepare_dir(link) == ok
    own_group = tmp_path / "group"               # writable by your private group only
    own_group.mkdir()
    os.chmod(own_group, 0o770)
    monkeypatch.setattr(cache, "_private_group", lambda gid, uid: True)
    assert cache.check_dir(own_group) is None


@posix_only
def test_a_shared_cache_trusts_its_writers_but_not_everyone(tmp_path, monkeypatch):
    group = tmp_path / "group"
    group.mkdir()
    os.chmod(group, 0o2770)
    monkeypatch.setattr(cache, "_private_group", lambda gid, uid: False)
    assert cache.check_dir(group) is not None                # refused unless shared
    assert cache.check_dir(group, shared=True) is None
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(group).st_uid + 1)
    assert cache.check_dir(group, shared=True) is None       # another member's directory
    monkeypatch.undo()
    os.chmod(group, 0o777)
    refusal = cache.check_dir(group, shared=True)
    assert refusal is not None and "writable by everyone" in refusal.reason and "chmod 2770" in refusal.fix
    # files of a shared cache are readable by the group (the umask decides), not 0o600
    monkeypatch.setenv("TRACEKERN_CACHE_DIR", str(tmp_path / "shared"))
    monkeypatch.setenv("TRACEKERN_CACHE_SHARED", "1")
    old = os.umask(0o007)
    try:
        mod = cache.load_module("VALUE = 'shared'\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(mod.__file__).st_mode) == 0o660


def test_a_planted_pyc_beside_the_module_is_not_run(fresh):
    """The module runs the source checked against its name, never a .pyc that claims to match it."""
    path, _ = fresh
    source, other = "VALUE = 'genuine'\n", "VALUE = 'planted'\n"
    assert len(source) == len(other)
    target = cache.module_path(source)
    target.write_text(source)
    st = target.stat()
    code = compile(other, str(target), "exec")
    pyc = Path(importlib.util.cache_from_source(str(target)))
    pyc.parent.mkdir(exist_ok=True)
    from importlib._bootstrap_external import _code_to_timestamp_pyc
    pyc.write_bytes(_code_to_timestamp_pyc(code, int(st.st_mtime), st.st_size))
    assert cache.load_module(source).VALUE == "genuine"


@posix_only
@pytest.mark.parametrize("caching", ["numba.core.caching", "numba.cuda.core.caching"])
def test_numba_cache_files_of_a_generated_module_stay_in_it_and_are_private(caching, fresh, monkeypatch, tmp_path):
    """Numba's and numba-cuda's cache machinery (each has its own copy) put a generated module's
    index and data files in the checked __pycache__, 0o600, even with NUMBA_CACHE_DIR set; the
    cuda one is checked here without a GPU, on its classes."""
    caching = pytest.importorskip(caching)
    path, caught = fresh
    monkeypatch.setattr(caching.config, "CACHE_DIR", str(tmp_path / "numba"))     # NUMBA_CACHE_DIR
    mod = cache.load_module(f"def f(x):\n    return x  # {caching.__name__}\n")   # guards what is loaded

    class Impl(caching.CacheImpl):
        def reduce(self, data):
            return data

        def rebuild(self, target_context, payload):
            return payload

        def check_cachable(self, data):
            return True

    impl = Impl(mod.f)
    assert impl.locator.get_cache_path() == str(path / "__pycache__")
    files = caching.IndexDataCacheFile(impl.locator.get_cache_path(), impl.filename_base, impl.locator.get_source_stamp())
    files.save(("sig",), b"machine code")
    assert files.load(("sig",)) == b"machine code"
    written = sorted(p.name for p in (path / "__pycache__").iterdir() if not p.name.endswith(".tkc"))   # (Numba's)
    assert len(written) == 2 and written[0].endswith(".1.nbc") and written[1].endswith(".nbi")
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in (path / "__pycache__").iterdir()} == dict.fromkeys(
        written + [f"{Path(mod.__file__).stem}.{sys.implementation.cache_tag}.tkc"], 0o600)
    assert not (tmp_path / "numba").exists()
    # a file others can write is not read (nor one of another user, tested across processes above)
    for suffix in (".nbi", ".1.nbc"):
        (target,) = [p for p in (path / "__pycache__").iterdir() if p.name.endswith(suffix)]
        os.chmod(target, 0o646)
        assert files.load(("sig",)) is None
        assert any(f"ignores the cache file {target}: it is writable by everyone" in m for m in _cache_warnings(caught))
        files.save(("sig",), b"machine code")                # written afresh, private again
        assert stat.S_IMODE(target.stat().st_mode) == 0o600 and files.load(("sig",)) == b"machine code"
    # another directory's functions keep Numba's own locators
    assert type(Impl(_loss).locator).__name__ != "TracekernLocator"


def test_an_unknown_numba_cache_module_warns_instead_of_failing(fresh):
    """Numba's cache classes are private: if a new version renames them, tracekern warns, never raises."""
    import types

    stub = types.ModuleType("numba.core.caching_of_another_version")
    stub.CacheImpl = type("CacheImpl", (), {})
    _, caught = fresh
    cache._guard_caching_module(stub)
    (message,) = _cache_warnings(caught)
    assert "does not know this version's numba.core.caching_of_another_version" in message
    assert "CacheImpl._locator_classes" in message and "still checked" in message


def test_a_call_never_enters_the_cache_module():
    """The checks cost nothing per call: once compiled, a call runs no code of cache.py (nor of the
    hooks it puts on Numba's classes, which are defined there)."""
    f = tk.jit(lambda x: np.tanh(x) * 2 + 1)
    x = np.linspace(0, 1, 8)
    f(x)
    entered, seen = [], []

    def profile(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_filename)
            if frame.f_code.co_filename == cache.__file__:
                entered.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        for _ in range(100):
            f(x)
    finally:
        sys.setprofile(None)
    assert seen and not entered, entered


@posix_only
def test_the_default_directory_of_another_user_says_to_delete_it(tmp_path, monkeypatch):
    """E.g. made by a run under sudo that kept HOME: the fix names the directory to delete."""
    monkeypatch.setattr(cache, "default_dir", lambda: tmp_path.resolve() / "tracekern")
    path = cache.prepare_dir(cache.default_dir())
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(path).st_uid + 1)
    refusal = cache.check_dir(path)
    assert f"{path} is owned by" in refusal.reason
    assert f"rm -rf {path}" in refusal.fix and "point TRACEKERN_CACHE_DIR at a directory of your own" in refusal.fix


_PLANNED = """
import json, sys
import numpy as np
import tracekern as tk
from tracekern import autodiff, staging
from tracekern.backends import fusion, units

counts = {"vjp": 0, "plan": 0, "trace": 0}
vjp, plan, trace = autodiff.vjp, fusion.plan, staging.trace_to_graph

def counted_vjp(*a, **k):
    counts["vjp"] += 1
    return vjp(*a, **k)

def counted_plan(*a, **k):
    counts["plan"] += 1
    return plan(*a, **k)

def counted_trace(*a, **k):
    counts["trace"] += 1
    return trace(*a, **k)

autodiff.vjp, fusion.plan, staging.trace_to_graph = counted_vjp, counted_plan, counted_trace
SCALE = np.linspace(0.5, 1.5, 18).reshape(6, 3) * float(sys.argv[2])   # (a global it reads: its value is in the key)

def loss(w, x):
    h = np.tanh(x @ (w * SCALE))
    return np.sum(h * h) + np.max(np.exp(-x), axis=1).sum()

rng = np.random.default_rng(3)
w, x = rng.standard_normal((6, 3)), rng.standard_normal((4, 6))
value, grad = tk.jit(tk.value_and_grad(loss))(w, x)
cpu = dict(counts)
ref = tk.jit(tk.value_and_grad(loss), backend="interpret")(w, x)
np.testing.assert_allclose(value, ref[0], rtol=1e-12)
np.testing.assert_allclose(grad, ref[1], rtol=1e-12, atol=1e-15)
h = np.tanh(x @ (w * SCALE))
np.testing.assert_allclose(value, np.sum(h * h) + np.max(np.exp(-x), axis=1).sum(), rtol=1e-12)
print(json.dumps(dict(cpu, compiled=units.compiled()["kernels"], value=float(value), grad=grad.tolist())))
"""


def test_a_warm_start_finds_its_plan_without_differentiating_or_planning(tmp_path):
    """The plan cache (staging._entry): a second process with the same cache directory loads the
    finished step (driver and kernels) by the digest of the function's code and of what it reads
    (tracekern.fingerprint): no trace, no differentiation, no fusion plan, nothing compiled, the same
    results. A third process whose function reads a global of another value (the same code) finds no
    stale step: it traces and plans again (its kernels are on disk) and gets its own results. The code's
    digest is asked for (tk.config.plan_code_key); by default a process traces for the graph's digest and
    finds the same step without differentiating, planning or compiling."""
    def run(scale, code_key="1"):
        env = dict(os.environ, TRACEKERN_CACHE_DIR=str(tmp_path / "cache"), TRACEKERN_PLAN_CACHE="1",
                   TRACEKERN_PLAN_CODE_KEY=code_key)
        env.pop("TRACEKERN_CACHE_SHARED", None)
        out = subprocess.run([sys.executable, "-c", _PLANNED, "run", str(scale)], env=env, capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    cold = run(1.0)
    assert cold["plan"] >= 1 and cold["compiled"] >= 1 and cold["vjp"] == 1 and cold["trace"] >= 1
    assert len(list((tmp_path / "cache" / "plans").iterdir())) == 2   # (by the code's digest and by the graph's)
    warm = run(1.0)
    assert (warm["trace"], warm["vjp"], warm["plan"], warm["compiled"]) == (0, 0, 0, 0), warm
    assert warm["value"] == cold["value"] and warm["grad"] == cold["grad"]
    changed = run(2.0)
    assert changed["trace"] >= 1 and changed["vjp"] == 1 and changed["plan"] >= 1 and changed["compiled"] == 0, changed
    assert changed["value"] != cold["value"]
    default = run(1.0, code_key="0")   # (the default: the trace's digest; no differentiation, plan or compile)
    assert default["trace"] >= 1 and (default["vjp"], default["plan"], default["compiled"]) == (0, 0, 0), default
    assert default["value"] == cold["value"] and default["grad"] == cold["grad"]


def test_the_plan_key_is_the_graphs_content():
    from tracekern.ir import graph_digest

    x = np.ones(3)

    def digest(fn):
        return graph_digest(tk.make_ir(fn)(x))

    assert digest(lambda x: x * 2.0) == digest(lambda x: x * 2.0)
    assert digest(lambda x: x * 2.0) != digest(lambda x: x * 3.0)
    assert digest(lambda x: x + np.arange(3.0)) != digest(lambda x: x + np.arange(3.0)[::-1])
    assert digest(lambda x: np.sum(x, axis=0)) != digest(lambda x: np.max(x, axis=0))


_CASE = """
import numpy as np

A = np.linspace(0.5, 1.5, 4)
B = np.linspace(2.0, -1.0, 4)


def helper(x):
    return np.tanh(x) * {name}


def loss(x, w):
    return np.sum(helper(x) * w)
"""


def _case_module(path: Path, name: str, version: int):
    """tests' stand-in for a user's file: `loss` reads `name` (A or B) through `helper`; each version is
    imported from the same path under a new module name, as a later process would import the edited file."""
    path.write_text(_CASE.format(name=name))
    # (Python's .pyc of the previous version is valid by its source's mtime in whole seconds and size: an edit of
    # the same length within the same second would import the old code; CI, which writes .pyc files, did that once)
    shutil.rmtree(path.parent / "__pycache__", ignore_errors=True)
    spec = importlib.util.spec_from_file_location(f"tk_plan_case_{os.getpid()}_{version}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _closure_loss(c):
    def loss(x, w):
        return np.sum(np.tanh(x) * c * w)
    return loss


def test_the_plan_cache_never_serves_a_step_of_other_code_values_or_arguments(fresh, monkeypatch, tmp_path):
    """The plan cache's key without a trace (tracekern.fingerprint): a new tk.jit of the same function
    finds its step with no trace at all; the function's source edited (the same file, another global
    read), a global it reads (through a function it calls) given another value, a closed-over value
    changed, and an argument of another shape or dtype each find no stale step: every result equals
    NumPy's (its value), the interpreter's and central differences (its gradient)."""
    from tracekern import staging

    monkeypatch.setattr(tk.config, "plan_cache", True)
    monkeypatch.setattr(tk.config, "plan_code_key", True)
    traces = []
    real = staging.trace_to_graph
    monkeypatch.setattr(staging, "trace_to_graph", lambda *a, **k: traces.append(1) or real(*a, **k))

    def check(loss, x, w) -> int:
        """value_and_grad of loss by a new tk.jit, checked; returns the traces it made."""
        before = len(traces)
        v, g = tk.jit(tk.value_and_grad(loss))(x, w)
        made = len(traces) - before
        vi, gi = tk.jit(tk.value_and_grad(loss), backend="interpret")(x, w)
        assert np.shape(g) == np.shape(gi) == x.shape and np.asarray(g).dtype == x.dtype
        np.testing.assert_allclose(v, loss(x, w), rtol=1e-6 if x.dtype == np.float32 else 1e-12)
        np.testing.assert_allclose(g, gi, rtol=1e-5 if x.dtype == np.float32 else 1e-12, atol=1e-7)
        x64, eps = x.astype(np.float64), 1e-6
        fd = np.array([(loss(x64 + eps * e.reshape(x.shape), w) - loss(x64 - eps * e.reshape(x.shape), w)) / (2 * eps)
                       for e in np.eye(x.size)]).reshape(x.shape)
        np.testing.assert_allclose(g, fd, rtol=1e-4 if x.dtype == np.float32 else 1e-7, atol=1e-6)
        return made

    x, w = np.linspace(-1.0, 1.0, 4), np.linspace(0.3, 0.9, 4)
    first = _case_module(tmp_path / "user_case.py", "A", 1)
    assert check(first.loss, x, w) >= 1
    assert check(first.loss, x, w) == 0                   # (found by the code's digest: not even traced)
    edited = _case_module(tmp_path / "user_case.py", "B", 2)   # helper reads B now
    assert check(edited.loss, x, w) >= 1
    edited.A, edited.B = edited.A, edited.B * 3.0          # a global read by the function it calls
    assert check(edited.loss, x, w) >= 1
    assert check(_closure_loss(np.full(4, 2.0)), x, w) >= 1
    assert check(_closure_loss(np.full(4, 2.0)), x, w) == 0   # (a new closure of equal values: found)
    assert check(_closure_loss(np.full(4, -1.0)), x, w) >= 1
    assert check(edited.loss, x.astype(np.float32), w.astype(np.float32)) >= 1   # another dtype
    assert check(edited.loss, np.stack([x, -x]), w) >= 1                         # another shape


def test_the_code_digest_covers_what_a_trace_reads_and_refuses_what_it_cannot_know():
    """tracekern.fingerprint without compiling: equal for equal code and values, different when code, a
    closure, a default, a global read through a called function or a user module's attribute changes;
    None for what a trace could read that the digest cannot know."""
    import types

    from tracekern import fingerprint

    def make(c, d=1.0):
        def f(x, k=d):
            return np.sum(np.tanh(x) * c) * k
        return f

    assert fingerprint.digest(make(np.ones(3))) == fingerprint.digest(make(np.ones(3)))
    assert fingerprint.digest(make(np.ones(3))) != fingerprint.digest(make(np.zeros(3)))
    assert fingerprint.digest(make(np.ones(3))) != fingerprint.digest(make(np.ones(3, np.float32)))
    assert fingerprint.digest(make(1.0, 2.0)) != fingerprint.digest(make(1.0, 3.0))
    assert fingerprint.digest(make(1.0)) != fingerprint.digest(make(1.0), (("static", 1),))
    user = types.ModuleType("tk_user_model")
    user.SCALE = np.ones(2)
    namespace = {"np": np, "model": user}
    exec("def helper(x):\n    return x * model.SCALE\n\ndef g(x):\n    return np.sum(helper(x))\n", namespace)
    before = fingerprint.digest(namespace["g"])
    user.SCALE = np.full(2, 2.0)                            # read by helper, which g calls
    assert before is not None and fingerprint.digest(namespace["g"]) != before
    namespace["helper"] = lambda x: x
    assert fingerprint.digest(namespace["g"]) not in (before, None)
    v = tk.Variable(np.ones(2))

    class Model:
        scale = 2.0

    model, name = Model(), "tanh"
    load = np.load   # (files: what a trace reads from one can change between processes)
    import scipy.io
    budgeted = tk.grad(lambda y: np.sum(np.sin(y)), memory_budget=0.5)
    unknown = [lambda x: x + np.random.rand(), lambda x: print(x) or x, lambda x: x * v, lambda x: x * model.scale,
               lambda x: getattr(np, name)(x), lambda x: budgeted(x),
               lambda x: x * np.load("w.npy"), lambda x: x * np.fromfile("w.bin"), lambda x: x * load("w.npy"),
               lambda x: x * np.loadtxt("w.txt"), lambda x: x * scipy.io.loadmat("w.mat")["w"]]
    assert [fingerprint.digest(f) for f in unknown] == [None] * len(unknown)

    def calls(inner):   # a tk.jit or transform object called: its function and the transform's options count
        return fingerprint.digest(lambda x: inner(x))

    def jitted(c):
        return tk.jit(lambda y: y * c)

    assert calls(jitted(2.0)) == calls(jitted(2.0)) != calls(jitted(3.0))
    assert calls(tk.grad(lambda y: np.sum(y * y))) not in (None, calls(tk.grad(lambda y: np.sum(y * y), argnums=(0,))))
    assert fingerprint.digest(lambda x: tk.print(x) or tk.random.normal(tk.random.key(0), x.shape) * x) is not None

    # found by review: roads around the names the digest follows, each refused or told apart
    import builtins
    import inspect
    import operator

    import scipy.special
    import scipy.stats

    def indirect(x):
        return x * indirect.__globals__["SCALE_IN_GLOBALS"]

    def imported(x):
        from numpy import load
        return x + load("w.npy")

    mine = np.frompyfunc(lambda t: t * 2, 1, 1)
    refused = [indirect, imported, lambda x: x + mine(x), lambda x: x + float(builtins.open("w").read()),
               lambda x: x + operator.attrgetter("random")(np).rand(3), lambda x: x + np.__dict__["random"].rand(3),
               lambda x: x + scipy.stats.norm.rvs(size=3), lambda x: x + np.lib.format.open_memmap("w.npy")]
    assert [fingerprint.digest(f) for f in refused] == [None] * len(refused)
    inspect.signature(np.tanh)   # (caches np.tanh.__signature__, which functools.wraps copies: found by CI)
    wrapped = "import functools\nimport numpy as np\n@functools.wraps(np.tanh)\ndef act(x):\n    return np.tanh(x) * {}\n"
    digests = []
    for c in ("2.0", "3.0"):   # (a user's function made to look like NumPy's is walked, not named)
        ns = {}
        exec(wrapped.format(c), ns)
        digests.append(fingerprint.digest(lambda x, act=ns["act"]: act(x)))
    assert None not in digests and digests[0] != digests[1]
    ab = np.zeros(2, dtype=[("a", "f8"), ("b", "f8")])
    ba = np.zeros(2, dtype=[("b", "f8"), ("a", "f8")])
    assert fingerprint.digest(lambda x: x + ab["a"]) != fingerprint.digest(lambda x: x + ba["a"])
    assert fingerprint.digest(lambda x: np.log1p(x)) != fingerprint.digest(lambda x: scipy.special.log1p(x))
    assert fingerprint.digest(lambda x: x * len(x) + scipy.special.erf(x)) is not None


def test_transforms_through_the_plan_cache_give_the_oracles_results(monkeypatch):
    """With the plan cache on (the users' default): gradient transforms (argnums, has_aux, a Variable
    read by closure, a keyword argument, grad of grad) trace their function once for the key and the
    transform reuses that trace; a second tk.jit of the same function finds the finished step."""
    from tracekern import staging

    monkeypatch.setattr(tk.config, "plan_cache", True)
    fresh = 1.0 + (os.getpid() * 7919 + time.time_ns()) % 1000003 * 1e-9   # (new programs each run: no plan from an earlier one)
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal(4)
    v = tk.Variable(rng.standard_normal(4))

    def loss(a, b, scale=1.0):
        y = np.tanh(a @ (b * v)) * scale
        return np.sum(y * y) * fresh, y

    def inner(b):
        return np.sum(np.sin(b) * b) * fresh

    cases = [(lambda: tk.value_and_grad(loss, argnums=(0, 1), has_aux=True), (a, b), {}),
             (lambda: tk.grad(lambda a, b: loss(a, b)[0], argnums=1), (a, b), {}),
             (lambda: tk.value_and_grad(loss, has_aux=True), (a, b), {"scale": 2.0}),
             (lambda: tk.grad(lambda b: np.sum(tk.grad(inner)(b) ** 2)), (b,), {})]
    loaded = []
    real = staging._load_plan
    monkeypatch.setattr(staging, "_load_plan", lambda key, variables: loaded.append(real(key, variables)) or loaded[-1])
    for make, args, kwargs in cases:
        ref = tk.jit(make(), backend="interpret")(*args, **kwargs)
        for _ in range(2):   # (the second: a new tk.jit, the plan found on disk)
            out = tk.jit(make())(*args, **kwargs)
            assert tk.tree_flatten(out)[1] == tk.tree_flatten(ref)[1]
            for o, r in zip(tk.tree_flatten(out)[0], tk.tree_flatten(ref)[0]):
                np.testing.assert_allclose(o, r, rtol=1e-12, atol=1e-14)
    assert sum(entry is not None for entry in loaded) == len(cases), loaded   # (every second jit: found)


def test_the_plan_cache_keys_the_output_structure(fresh, monkeypatch):
    """Functions of one graph that return it in other structures (a, (a, None, {...}), [a], {"z": a}; None and
    ()) are other steps: a new tk.jit of each found the step of the one before on disk and returned its structure
    (the identity returned a 3-tuple, [a] a tuple, () None)."""
    monkeypatch.setattr(tk.config, "plan_cache", True)
    x = np.arange(6.0).reshape(2, 3)
    for f in (lambda a: (a, None, {"k": None}), lambda a: a, lambda a: [a], lambda a: {"z": a}, lambda a: (a,),
              lambda a: None, lambda a: (), lambda a: []):
        got, want = tk.jit(f, tiers=False)(x), f(x)
        assert tk.tree_flatten(got)[1] == tk.tree_flatten(want)[1], (got, want)
        for g, w in zip(tk.tree_flatten(got)[0], tk.tree_flatten(want)[0]):
            np.testing.assert_array_equal(g, w)


@posix_only
def test_the_code_cache_serves_only_the_code_of_this_text_at_this_path(fresh, monkeypatch):
    """A module's code object is kept beside Numba's files (cache._code: a large driver's compile
    was 20-60 ms of a warm start) and used again only for the very text and path it was compiled
    from, only from a sealed file that passes refused_file(); anything else is compiled again."""
    path, caught = fresh
    source = "VALUE = 'genuine'\n"

    def reload():
        cache._MODULES.clear()
        sys.modules.pop(cache.module_name(cache.source_digest(source)), None)
        return cache.load_module(source)

    assert reload().VALUE == "genuine"
    (code_file,) = (path / "__pycache__").glob("*.tkc")
    genuine = code_file.read_bytes()
    with monkeypatch.context() as m:   # (a warm load compiles nothing)
        m.setattr(cache, "compile", lambda *a: pytest.fail("compiled, not loaded from the code cache"), raising=False)
        assert reload().VALUE == "genuine"

    planted = marshal.dumps(compile("VALUE = 'planted'\n", str(cache.module_path(source)), "exec"))

    def plant(header: bytes, body: bytes = planted, seal: bool = True) -> None:
        data = header + body
        code_file.write_bytes(data + (cache._SEAL + hashlib.sha256(data).digest() if seal else b""))

    origin = genuine[:32]
    other = hashlib.sha256(f"{cache.module_path(source)}\0VALUE = 'other'\n".encode()).digest()
    for header, seal in ((other, True), (origin, False)):   # another text's code; a file without its seal
        plant(header, seal=seal)
        assert reload().VALUE == "genuine"
        assert code_file.read_bytes() == genuine            # compiled and written again
    plant(origin)
    os.chmod(code_file, 0o666)                               # writable by everyone: ignored, with a warning
    assert reload().VALUE == "genuine"
    assert any(f"ignores the cache file {code_file}" in w for w in _cache_warnings(caught))
    plant(origin)                                            # the control: this plant is live
    assert reload().VALUE == "planted"


_LINKED = """
import json, sys, numpy as np, tracekern as tk
from tracekern.backends import cache, units
x = np.linspace(0.1, 1.2, 8)
straight = tk.jit(tk.value_and_grad(lambda x: np.sum(np.tanh(x) * np.cos(x))))                       # a Python driver
looped = tk.jit(tk.value_and_grad(lambda x: np.sum(tk.fori_loop(0, 5, lambda i, v: np.sin(v) * 0.9, x) * x)))  # njit
out, libraries = [], []
for f in (straight, looped):
    v, g = f(x)
    step = next(iter(f._cache.values())).run
    out.append([v.hex(), [float(a).hex() for a in g]])
    libraries.append([o.library for s in step.modules[:-1]
                      for o in sys.modules[cache.module_name(cache.source_digest(s))].kernel.overloads.values()])
print(json.dumps(dict(units.compiled(), out=out, jitted=[straight_step.jitted for straight_step in
                      (next(iter(f._cache.values())).run for f in (straight, looped))], driver=step._module.__file__,
                      libraries=[len(libs) for libs in libraries],
                      unparsed=[sum("_tk_bitcode" in vars(lib) for lib in libs) for libs in libraries])))
"""


def _program_in(cache_dir, program: str) -> dict:
    """The JSON on the last line a fresh process running `program` prints, with this private cache directory."""
    env = dict(os.environ, TRACEKERN_CACHE_DIR=str(cache_dir))
    env.pop("TRACEKERN_CACHE_SHARED", None)
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@posix_only
def test_kernels_load_without_their_bitcode_and_link_when_a_driver_needs_them(tmp_path):
    """cache.LIBRARY_FORMAT: a kernel's machine code loads without parsing the bitcode Numba keeps
    for linking, which is parsed when an njit driver compiled afterwards links the kernel. Cold, warm,
    and warm kernels linked into a driver compiled again: the same bits, nothing compiled but that driver."""
    def run():
        return _program_in(tmp_path, _LINKED)

    cold = run()
    assert cold["jitted"] == [False, True] and cold["kernels"] >= 2 and cold["drivers"] == 1
    x = np.linspace(0.1, 1.2, 8)
    assert float.fromhex(cold["out"][0][0]) == pytest.approx(np.sum(np.tanh(x) * np.cos(x)), rel=1e-12)
    assert float.fromhex(cold["out"][1][0]) == pytest.approx(np.sum(_fori_value(x) * x), rel=1e-12)
    warm = run()
    assert (warm["kernels"], warm["drivers"]) == (0, 0) and warm["out"] == cold["out"]
    assert warm["unparsed"][0] == warm["libraries"][0] >= 1       # (the Python driver's kernels: loaded unparsed)
    driver = Path(cold["driver"])
    for f in (tmp_path / "__pycache__").glob(f"{driver.stem}.*.nb*"):   # the njit driver's machine code only
        f.unlink()
    relinked = run()
    assert (relinked["kernels"], relinked["drivers"]) == (0, 1) and relinked["out"] == cold["out"]
    assert relinked["libraries"][1] >= 1 and relinked["unparsed"][1] == 0    # (linked into the driver: parsed)


def _fori_value(x):
    for _ in range(5):
        x = np.sin(x) * 0.9
    return x


def test_a_step_that_raises_a_value_error_is_not_taken_for_a_damaged_cache(monkeypatch):
    """np.linalg.LinAlgError is a ValueError: a step whose kernel raises it (a singular matrix) gives the
    error to the caller at once, every time; its cache files are not discarded nor compiled again (the
    damaged-cache path, for errors while loading, once did both before the error came out)."""
    import numpy as np

    import tracekern as tk
    from tracekern.backends import cache, cpu_runtime

    f = tk.jit(lambda a: np.linalg.inv(a) * 2.0, backend="cpu", tiers=False)
    np.testing.assert_allclose(f(np.eye(3) * 4.0), np.eye(3) * 0.5)
    discarded, loaded = [], []
    monkeypatch.setattr(cache, "discard", lambda path: discarded.append(path))
    real_load = cpu_runtime.CompiledStep._load
    monkeypatch.setattr(cpu_runtime.CompiledStep, "_load", lambda self, *a: loaded.append(self) or real_load(self, *a))
    for _ in range(2):
        with pytest.raises(np.linalg.LinAlgError):
            np.linalg.inv(np.zeros((3, 3)))           # (NumPy's own error, for the same input)
        with pytest.raises(np.linalg.LinAlgError):
            f(np.zeros((3, 3)))
        assert discarded == [] and loaded == []        # (nothing discarded, nothing loaded or compiled again)
    np.testing.assert_allclose(f(np.eye(3)), np.eye(3) * 2.0)


def test_what_is_on_disk_is_found_by_name_without_listing_the_cache(fresh, monkeypatch):
    """cache.on_disk(source) (a warm start's question for each kernel and driver) agrees with the files Numba
    wrote, for kernels, a loop compiled whole and an njit driver, and asks by name: a warm start never lists
    the cache directory, whose size is everything ever compiled on the machine (a listing of 200,000 files made
    a warm start 0.2-0.7 s)."""
    def loss(w, x):
        h = tk.fori_loop(0, 3, lambda i, h: np.tanh(h * w), x)
        return np.sum(h ** 2) + np.sum(np.cumsum(x) * w)

    args = (np.linspace(0.5, 1.5, 8), np.linspace(-1, 1, 8))
    f = tk.value_and_grad(loss)
    value, grad = f(*args)
    step = next(iter(f._cache.values())).run
    sources = step.modules + [step.compiled_driver] * bool(step.compiled_driver)
    names = os.listdir(cache.cache_dir() / "__pycache__")
    for source in sources:
        stem = cache.module_path(source).stem
        assert cache.on_disk(source) == any(n.startswith(stem + ".") and n.endswith(".nbi") for n in names), stem
    assert all(map(cache.on_disk, step.modules[:-1])) and len(step.modules) > 1
    assert not cache.on_disk(step.modules[0] + "\n# another module\n")

    listed = []
    for name in ("listdir", "scandir"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda path=".", real=real: listed.append(str(path)) or real(path))
    again = tk.value_and_grad(loss)(*args)   # (a new step of the same program: every kernel on disk)
    assert not [p for p in listed if "__pycache__" in p], listed
    assert tk.tree_flatten(again)[1] == tk.tree_flatten((value, grad))[1]
    want = tk.jit(tk.value_and_grad(loss), backend="interpret")(*args)
    for got, ref in zip(tk.tree_flatten(again)[0], tk.tree_flatten(want)[0]):
        np.testing.assert_allclose(got, ref, rtol=1e-12)


_BUNDLED = """
import json, sys, warnings
warnings.simplefilter("always")
import numpy as np, tracekern as tk
from numba.core import caching
from tracekern.backends import cache, units
cache._guard_numba()   # (tracekern's hooks on Numba's cache first: the count below wraps them)
numba_loads = []
real = caching.Cache._load_overload
caching.Cache._load_overload = lambda self, sig, ctx: numba_loads.append(self._cache_file._index_path) or real(self, sig, ctx)
x = np.linspace(0.1, 1.2, 8)
straight = tk.jit(tk.value_and_grad(lambda x: np.sum(np.tanh(x) * np.cos(x)) + np.max(np.exp(x) * x)))  # a Python driver
looped = tk.jit(tk.value_and_grad(lambda x: np.sum(tk.fori_loop(0, 5, lambda i, v: np.sin(v) * 0.9, x) * x)))   # njit
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = [[float(a).hex() for a in np.concatenate([np.ravel(v) for v in tk.tree_flatten(f(x))[0]])] for f in (straight, looped)]
steps = [next(iter(f._cache.values())).run for f in (straight, looped)]
hits = sum(sum(fn.stats.cache_hits.values()) for s in steps for src in s.modules
           for fn in vars(sys.modules[cache.module_name(cache.source_digest(src))]).values() if hasattr(fn, "stats"))
print(json.dumps(dict(units.compiled(), out=out, hits=hits, jitted=[s.jitted for s in steps],
                      numba_loads=[n for n in numba_loads if "tk_" in n],
                      warnings=[str(w.message) for w in caught if issubclass(w.category, tk.CacheWarning)])))
"""


@posix_only
def test_a_step_loads_its_machine_code_from_one_bundle(tmp_path):
    """backends/bundles.py: after a step's first call a process writes its bundle (steps/*.tkb, 0o600, sealed);
    a warm start reads every njit function of the step from it, Numba's cache files not at all (counted as
    cache hits, nothing compiled), with the same bits. A damaged bundle is deleted with one CacheWarning and
    written again; one writable by others is not read (one CacheWarning) and is replaced; where Numba's
    cache lacks a function's machine code the bundle is not used and that function is compiled again."""
    def run():
        return _program_in(tmp_path, _BUNDLED)

    cold = run()
    assert cold["jitted"] == [False, True] and cold["kernels"] >= 3 and not cold["warnings"]
    x = np.linspace(0.1, 1.2, 8)
    assert float.fromhex(cold["out"][0][0]) == pytest.approx(np.sum(np.tanh(x) * np.cos(x)) + np.max(np.exp(x) * x), rel=1e-12)
    assert float.fromhex(cold["out"][1][0]) == pytest.approx(np.sum(_fori_value(x) * x), rel=1e-12)
    bundles = sorted((tmp_path / "steps").glob("*.tkb"))
    assert len(bundles) == 2 and all(stat.S_IMODE(b.stat().st_mode) == 0o600 for b in bundles)
    assert all(cache._unsealed(b.read_bytes()) is not None for b in bundles)

    warm = run()
    assert warm["out"] == cold["out"] and (warm["kernels"], warm["drivers"]) == (0, 0) and not warm["warnings"]
    assert warm["numba_loads"] == [] and warm["hits"] >= cold["kernels"] + 1   # (the njit driver too)

    blob = bundles[0].read_bytes()
    bundles[0].write_bytes(blob[: len(blob) // 2])                          # truncated
    damaged = run()
    assert damaged["out"] == cold["out"] and damaged["kernels"] == 0 and damaged["numba_loads"]
    assert len(damaged["warnings"]) == 1 and bundles[0].name in damaged["warnings"][0]
    assert cache._unsealed(bundles[0].read_bytes()) is not None              # written again
    assert run()["numba_loads"] == []

    bundles[1].chmod(0o666)                                                  # writable by others
    refused = run()
    assert refused["out"] == cold["out"] and refused["numba_loads"]
    assert len(refused["warnings"]) == 1 and "writable by" in refused["warnings"][0]
    assert stat.S_IMODE(bundles[1].stat().st_mode) == 0o600                 # replaced, as Numba's files are
    again = run()
    assert again["numba_loads"] == [] and not again["warnings"]

    # one function's Numba entry gone: the njit driver's (its loops' entries remain, in the same module)
    index = next((tmp_path / "__pycache__").glob("*.step-*.nbi"))
    index.unlink()
    partial = run()
    assert partial["out"] == cold["out"] and not partial["warnings"]
    assert str(index) in partial["numba_loads"] and index.exists()          # (compiled and saved again)


def _two_functions(tag: str) -> str:
    """A generated-like module of two njit functions, g calling f (`tag`: a source of each test's own)."""
    return (f"# {tag}\nfrom numba import njit\n\n\n@njit(cache=True)\ndef f(x):\n    return x + 1.5\n\n\n"
            "@njit(cache=True)\ndef g(x):\n    return f(x) * 2.0\n")


def _imported_afresh(source: str):
    """The module of `source` as a new process first sees it: imported again, its dispatchers without overloads."""
    digest = cache.source_digest(source)
    cache._MODULES.pop(digest, None)
    sys.modules.pop(cache.module_name(digest), None)


def test_a_bundle_holds_every_signature_and_is_used_only_where_numba_has_each_function(fresh):
    """backends/bundles.py in one process (a module imported afresh is what a new process sees): a
    function called with two signatures gets both from the bundle (counted as cache hits, the same
    values; a new function compiled later links the bundled code); two threads loading it at once load
    each overload once; and where Numba's cache lacks one function's index (another of the module's
    remains), or where the module's file was found damaged (rewritten, its Numba entries deleted), the
    bundle is not used and the functions compile through Numba."""
    from numba import njit

    path, caught = fresh
    source = _two_functions("signatures")
    _imported_afresh(source)
    first = cache.load_module(source)
    want = [first.g(1.0), first.g(np.arange(3.0))]
    signatures = {name: set(getattr(first, name).overloads) for name in "fg"}
    assert all(len(s) == 2 for s in signatures.values())
    bundles.save([source])
    assert bundles.path([source]).exists()

    _imported_afresh(source)
    module = bundles.load([source], [source])[0]
    assert module is not first and {name: set(getattr(module, name).overloads) for name in "fg"} == signatures
    assert sum(module.g.stats.cache_hits.values()) == 2 and not module.g.stats.cache_misses
    assert module.g(1.0) == want[0] and np.array_equal(module.g(np.arange(3.0)), want[1])
    bundled_f = module.f
    assert njit(lambda x: bundled_f(x) - 1.0)(2.0) == 2.5   # (a compile that links a bundled library)

    _imported_afresh(source)
    barrier, got = threading.Barrier(2), []

    def load():
        barrier.wait()
        got.append(bundles.load([source], [source]))

    threads = [threading.Thread(target=load) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 2 and got[0] is not None and got[0][0] is got[1][0]
    assert sum(got[0][0].g.stats.cache_hits.values()) == 2 and len(got[0][0].g.overloads) == 2
    assert got[0][0].g(1.0) == want[0]

    index = next((path / "__pycache__").glob(f"tk_{cache.source_digest(source)}.g-*.nbi"))
    index.unlink()   # (f's index remains: cache.on_disk(source) still says yes)
    _imported_afresh(source)
    assert cache.on_disk(source) and bundles.load([source], [source]) is None
    again = cache.load_module(source)
    assert not again.g.overloads and again.g(1.0) == want[0] and index.exists()   # (compiled and saved again)
    assert bundles.path([source]).exists() and not _cache_warnings(caught)

    file = cache.module_path(source)   # (the module's file damaged: rewritten, its Numba entries deleted)
    file.write_text(source.replace("1.5", "2.5"))
    _imported_afresh(source)
    assert bundles.load([source], [source]) is None
    warned = _cache_warnings(caught)
    assert len(warned) == 1 and str(file) in warned[0] and file.read_text() == source
    assert cache.load_module(source).g(1.0) == want[0]


@pytest.mark.parametrize("failing", ["unserialize", "rebuild"])
def test_a_bundle_that_fails_midway_leaves_numba_and_llvm_as_they_were(fresh, monkeypatch, failing):
    """A bundle whose second function fails to load (LLVM's library, or Numba's rebuild of the function)
    is deleted with one CacheWarning; the codegen has no override left, finalization is not deferred, no
    module is left unfinalized in LLVM's engine (a later compile would trip over it: "Exception ignored
    ... ReferenceError"), and the functions load through Numba's cache with the same values."""
    import gc

    from numba import njit
    from numba.core import caching
    from numba.core import codegen as numba_codegen
    from numba.core.registry import cpu_target

    path, caught = fresh
    source = _two_functions(f"fails in {failing}")
    _imported_afresh(source)
    want = cache.load_module(source).g(np.arange(3.0))
    bundles.save([source])
    _imported_afresh(source)

    calls, failing_now = [], [True]
    if failing == "unserialize":
        real = numba_codegen.CPUCodeLibrary._unserialize.__func__

        def broken(cls, codegen, state):
            calls.append(state)
            if len(calls) == 2 and failing_now:
                raise RuntimeError("a library LLVM refuses")
            return real(cls, codegen, state)

        monkeypatch.setattr(numba_codegen.CPUCodeLibrary, "_unserialize", classmethod(broken))
    else:
        real = caching.CompileResultCacheImpl.rebuild

        def broken(self, context, payload):
            calls.append(payload)
            if len(calls) == 2 and failing_now:
                raise RuntimeError("a function Numba cannot rebuild")
            return real(self, context, payload)

        monkeypatch.setattr(caching.CompileResultCacheImpl, "rebuild", broken)
    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)

    assert bundles.load([source], [source]) is None and len(calls) == 2
    failing_now.clear()   # (LLVM and Numba as they are)
    codegen = cpu_target.target_context.codegen()
    assert "unserialize_library" not in vars(codegen) and not getattr(cache._DEFERRED, "on", False)
    warned = _cache_warnings(caught)
    assert len(warned) == 1 and "failed to load" in warned[0] and not bundles.path([source]).exists()
    gc.collect()   # (the libraries the failed load made are gone)
    module = cache.load_module(source)
    assert np.array_equal(module.g(np.arange(3.0)), want) and sum(module.g.stats.cache_hits.values()) == 1
    assert njit(lambda x: x * 3.0)(2.0) == 6.0   # (a compile: LLVM's engine finalizes whatever it holds)
    gc.collect()
    assert not unraisable, [str(u.exc_value) for u in unraisable]
