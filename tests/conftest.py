"""Shared fixtures: the backend every end-to-end test runs on, and input makers."""
import os

import numpy as np
import pytest
from hypothesis import settings

import tracekern as tk

# CI runs the same examples every time (no flaky red build); local runs explore new ones.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

# Every compiled backend joins this list as it lands; each is compared with "interpret".
BACKENDS = tk.available_backends()


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


def make_input(kind: str, shape, rng, dtype=np.float64):
    if kind == "any":
        x = rng.standard_normal(shape)
    elif kind == "pos":
        x = rng.uniform(0.5, 2.0, shape)
    elif kind == "unit":
        x = rng.uniform(-0.9, 0.9, shape)
    elif kind == "nz":
        x = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)
    else:
        raise ValueError(kind)
    return np.asarray(x, dtype)
