"""Checkpoint schedules (tracekern/schedule.py): every step reversed once, in order, within k
stored carries, re-running exactly as many forward steps as Griewank and Walther's bound."""
import math

import pytest

from tracekern import schedule


def revolve_bound(n: int, s: int) -> int:
    """The fewest forward steps to reverse n steps with s stored states (the first sweep included)."""
    if n <= 1:
        return 0
    if s >= n:
        return n - 1
    r = 1
    while math.comb(s + r, s) < n:
        r += 1
    return r * n - math.comb(s + r, s + 1)


@pytest.mark.parametrize("n", list(range(0, 14)) + [40, 100])
def test_schedules_reverse_every_step_once_within_k_slots_at_the_optimum(n):
    for k in range(1, n + 2):
        acts = schedule.actions(n, k)
        done, advanced, slots = schedule.simulate(n, acts)
        assert done == list(reversed(range(n)))
        assert slots <= k
        assert advanced == schedule.reruns(n, k) == revolve_bound(n, min(k, n)), (n, k)


def test_the_bench_sizes():
    assert schedule.reruns(1000, 32) == revolve_bound(1000, 32) == 2405
    assert schedule.reruns(1000, 10) == revolve_bound(1000, 10) == 3636
