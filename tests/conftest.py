"""Shared fixtures: the backend every end-to-end test runs on, and input makers."""
import os

# The cuda backend runs on Numba's CUDA simulator unless the caller chose (NUMBA_ENABLE_CUDASIM=0 on
# a machine with a GPU). Numba reads this once, when it is first imported: it must be set here.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# Under pytest-xdist every core already runs a test process: no extra compile workers on top
# (tests of the workers set their own count).
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("TRACEKERN_COMPILE_WORKERS", "0")
# Tests of the cpu backend test its compiled kernels: every step compiles before its first call returns,
# as for a user who needs compiled code (benchmarks, bit-exact reductions). Without this, a test calling
# a function once would compare the NumPy tier with the interpreter and could not catch a kernel's bug.
# tests/test_tiers.py turns the tiers on where it tests them (tk.jit(f, tiers=True)). The environment
# variable reaches the subprocesses tests start.
os.environ["TRACEKERN_TIERS"] = "0"
# Tests inspect the steps they make (plans, graphs, units): a step loaded from the plan cache (made by an
# earlier run in the same cache directory) has none of them. Its own tests turn it on (tests/test_cache.py).
os.environ["TRACEKERN_PLAN_CACHE"] = "0"

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import settings  # noqa: E402

import tracekern as tk  # noqa: E402

# CI runs the same examples every time (no flaky red build); local runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Every compiled backend joins this list as it lands; each is compared with "interpret".
BACKENDS = tk.available_backends()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


INPUT_KINDS = ("any", "pos", "unit", "nz", "gt1")   # (tests/numpy_cases.make adds its own kinds to these)


def stand_in_or_recorded(module, stand_in, recording, what: str):
    """The library object a cuda test gives `module` (tracekern.backends.cublas or cufft) through use_library: the
    stand-in on Numba's simulator (the NVIDIA library cannot run there), on a GPU the real library with its calls
    recorded (`recording(real)`), so that one test's assertions check either; the test is skipped on a GPU without
    nvmath-python. The caller puts use_library(None) back."""
    from tracekern.backends import cuda as tkcuda

    if tkcuda.launch_config().simulator:
        lib = stand_in()
    else:
        real = module.library()
        if real is None:
            pytest.skip(f"a GPU without nvmath-python: no {what} to record")
        lib = recording(real)
    module.use_library(lib)
    return lib


def make_input(kind: str, shape, rng, dtype=np.float64):
    if kind == "any":
        x = rng.standard_normal(shape)
    elif kind == "pos":
        x = rng.uniform(0.5, 2.0, shape)
    elif kind == "unit":
        x = rng.uniform(-0.9, 0.9, shape)
    elif kind == "nz":
        x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    elif kind == "gt1":
        x = rng.uniform(1.1, 3.0, shape)
    else:
        raise ValueError(kind)
    return np.asarray(x, dtype)


def to_host(tree):
    """Results as the cpu backend gives them: the cuda backend's device arrays copied to NumPy
    (0-d ones as NumPy scalars)."""
    def leaf(x):
        if hasattr(x, "copy_to_host"):
            x = x.copy_to_host()
            return x[()] if x.ndim == 0 else x
        return x
    leaves, td = tk.tree_flatten(tree)
    return tk.tree_unflatten(td, [leaf(x) for x in leaves])


def assert_tree_close(got, want, tol=1e-10):
    """got and want have the same pytree structure (compared first: a result with missing or extra
    leaves fails) and their leaves agree within tol; shapes must match exactly."""
    g_leaves, g_td = tk.tree_flatten(to_host(got))
    w_leaves, w_td = tk.tree_flatten(want)
    assert g_td == w_td, f"structures differ: got {g_td!r}, want {w_td!r}"
    assert len(g_leaves) == len(w_leaves)
    for k, (g, w) in enumerate(zip(g_leaves, w_leaves)):
        assert np.shape(g) == np.shape(w), f"leaf {k}: shape {np.shape(g)} != {np.shape(w)}"
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"leaf {k}")


class _OnHost:
    """A jitted function whose results come back on the host (attributes are the jitted function's)."""

    def __init__(self, jitted):
        self._jitted = jitted

    def __call__(self, *args, **kwargs):
        return to_host(self._jitted(*args, **kwargs))

    def __getattr__(self, name):
        return getattr(self._jitted, name)


def jit_on(backend, f, **kwargs):
    """tk.jit(f, backend=backend, ...), results on the host whatever the backend."""
    jitted = tk.jit(f, backend=backend, **kwargs)
    return _OnHost(jitted) if backend == "cuda" else jitted
