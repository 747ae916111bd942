"""tk.config: the settings a user may change while the process runs (how many threads tracekern's
kernels and BLAS may use, whether small loops run whole in compiled code, whether a step of many small
kernels gets a compiled driver, whether a new program runs on the NumPy tier while it compiles), and
their environment variables. No tracekern imports: every
room may read it.

    tk.config.threads = 1                 # at most one thread (None: decided per call, the default)
    with tk.config.override(compiled_loops=False):
        ...                               # steps compiled in here drive their loops from the host

`threads` and `keep_buffers` are read on every call of a compiled step; `compiled_loops`, `compiled_drivers`, `tiers`,
`plan_cache` and `plan_code_key` when a step is compiled (a tk.jit object keeps the steps it compiled).
TRACEKERN_NUM_THREADS, TRACEKERN_COMPILED_LOOPS, TRACEKERN_COMPILED_DRIVERS, TRACEKERN_TIERS,
TRACEKERN_PLAN_CACHE, TRACEKERN_PLAN_CODE_KEY and TRACEKERN_KEEP_BUFFERS set the defaults when tracekern is imported."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


def _threads_from_env() -> int | None:
    text = os.environ.get("TRACEKERN_NUM_THREADS", "").strip()
    if text in ("", "auto"):
        return None
    try:
        return _check_threads(int(text))
    except (ValueError, TypeError):
        raise ValueError(f"TRACEKERN_NUM_THREADS must be a positive integer or 'auto', got {text!r}") from None


def _check_threads(value) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"tk.config.threads must be None (decided per call) or a positive int, got {value!r}")
    return value


def _flag_from_env(name: str, default: bool) -> bool:
    text = os.environ.get(name, "").strip().lower()
    if text == "":
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be 0 or 1, got {text!r}")


class Config:
    """The settings (see the module docstring). Assigning an attribute checks its value."""

    _FIELDS = ("threads", "compiled_loops", "compiled_drivers", "tiers", "plan_cache", "plan_code_key", "keep_buffers")

    def __init__(self):
        # the most threads a compiled step uses, for its parallel loops and for BLAS together;
        # None: the cores this process may run on, less those other processes keep busy, per call
        self.threads: int | None = _threads_from_env()
        # loops whose bodies are small run all their steps inside one compiled function (False: the
        # loop is driven step by step as before this setting existed; tests compare the two)
        self.compiled_loops: bool = _flag_from_env("TRACEKERN_COMPILED_LOOPS", True)
        # a straight-line cpu step of many small kernels is also driven by one njit function that calls
        # them all (backends/cpu.py, COMPILED_DRIVER_CALLS), compiled after its kernels: 2-4x faster a
        # call for a Jacobian program, but its compile costs 0.2-0.5 s a kernel call, so it is asked for
        # (False, the default: the driver is plain Python, as before this setting existed)
        self.compiled_drivers: bool = _flag_from_env("TRACEKERN_COMPILED_DRIVERS", False)
        # a new cpu step runs its kernels with NumPy until their compiled units are ready, compiled in
        # the background (backends/tiers.py); False: every kernel is compiled before the first call
        # returns (tk.jit(f, tiers=...) decides for one function)
        self.tiers: bool = _flag_from_env("TRACEKERN_TIERS", True)
        # a cpu step whose kernels are compiled on disk is found by the digest of the traced function
        # and its transform, without differentiating or planning it again (staging's plan cache); and
        # the memory planner's MILP solutions are kept there too (budget.py), read when a budget is planned
        self.plan_cache: bool = _flag_from_env("TRACEKERN_PLAN_CACHE", True)
        # the plan cache also keys a step by a digest of the function's code and what it reads, found
        # without tracing (tracekern/fingerprint.py): a faster warm start, but a hit does not run the
        # function's Python, and the digest cannot see every way a trace can depend on the process
        # (a Python side effect at trace time), so it is asked for (False, the default: the key is the
        # traced graph's digest)
        self.plan_code_key: bool = _flag_from_env("TRACEKERN_PLAN_CODE_KEY", False)
        # a cpu step whose driver is plain Python keeps its intermediate buffers between calls when they
        # hold at most 32 MiB in all (backends/cpu_runtime.py, WORKSPACE_KEEP_BYTES), and the memory of its
        # last two calls' results for reuse once the caller drops them: no allocation and no fresh pages a
        # call; False: they are allocated every call and freed when it returns (the least
        # memory held between calls; a call's own peak is the same either way)
        self.keep_buffers: bool = _flag_from_env("TRACEKERN_KEEP_BUFFERS", True)

    def __setattr__(self, name, value):
        if name not in self._FIELDS:
            raise AttributeError(f"tk.config has no setting {name!r}; the settings are {', '.join(self._FIELDS)}")
        if name == "threads":
            value = _check_threads(value)
        elif not isinstance(value, bool):
            raise ValueError(f"tk.config.{name} must be True or False, got {value!r}")
        object.__setattr__(self, name, value)

    @contextlib.contextmanager
    def override(self, **settings) -> Iterator[Config]:
        """Change settings inside a with block, and put the old values back after it."""
        old = {name: getattr(self, name) for name in settings}
        try:
            for name, value in settings.items():
                setattr(self, name, value)
            yield self
        finally:
            for name, value in old.items():
                object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        return "tk.config(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in self._FIELDS) + ")"


config = Config()
