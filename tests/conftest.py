"""Shared fixtures: the backend every end-to-end test runs on, and input makers."""
import numpy as np
import pytest

import tracekern as tk

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
