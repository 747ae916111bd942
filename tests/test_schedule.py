"""Checkpoint schedules (tracekern/schedule.py): every step reversed once, in order, within k
stored carries, re-running exactly as many forward steps as Griewank and Walther's bound."""
import pytest

from tracekern import schedule


@pytest.mark.parametrize("n", list(range(0, 14)) + [40, 100])
def test_schedules_reverse_every_step_once_within_k_slots_at_the_optimum(n):
    for k in range(1, n + 2):
        acts = schedule.actions(n, k)
        done, advanced, slots = schedule.simulate(n, acts)
        assert done == list(reversed(range(n)))
        assert slots <= k
        assert advanced == schedule.reruns(n, k) == schedule.revolve_bound(n, min(k, n)), (n, k)


def test_the_bench_sizes():
    assert schedule.reruns(1000, 32) == schedule.revolve_bound(1000, 32) == 2405
    assert schedule.reruns(1000, 10) == schedule.revolve_bound(1000, 10) == 3636
