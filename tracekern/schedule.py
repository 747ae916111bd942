"""Checkpoint schedules for reversing a loop of n steps with at most k stored carries (binomial
checkpointing, after Griewank and Walther's Revolve): which steps the backward pass runs again.

A schedule is a list of actions on a machine holding one current carry and k slots:
ADVANCE j (run j forward steps), STORE s (copy the current carry to slot s), RESTORE s (copy
slot s to the current carry), REVERSE (the backward step at the current position). The carry at
step 0 is stored in slot 0 first. The split points minimise the forward steps re-run (dynamic
programming over (steps, free slots)); the count equals Revolve's bound for this setting."""
from __future__ import annotations

import functools
import math

import numpy as np

ADVANCE, STORE, RESTORE, REVERSE = 0, 1, 2, 3


@functools.lru_cache(maxsize=64)
def _tables(n: int, free: int) -> tuple[np.ndarray, np.ndarray]:
    """cost[s, l]: fewest forward steps to reverse l steps given the carry at their start (stored)
    and s more free slots; split[s, l]: the steps to advance before storing the next carry."""
    cost = np.zeros((free + 1, n + 1), np.int64)
    split = np.zeros((free + 1, n + 1), np.int64)
    ls = np.arange(n + 1)
    cost[0] = ls * (ls - 1) // 2          # no free slot: restart from the start for each step
    cost[0, 0] = 0
    for s in range(1, free + 1):
        for length in range(2, n + 1):
            j = np.arange(1, length)
            total = j + cost[s - 1, length - j] + cost[s, j]
            best = int(np.argmin(total))
            cost[s, length] = total[best]
            split[s, length] = best + 1
    return cost, split


def reruns(n: int, k: int) -> int:
    """Forward steps the backward pass runs again to reverse n steps with k slots."""
    if n <= 1:
        return 0
    if k >= n:
        return n - 1
    return int(_tables(n, k - 1)[0][k - 1, n])


def revolve_bound(n: int, s: int) -> int:
    """Griewank and Walther's closed form: the fewest forward steps (the first sweep included) to
    reverse n steps with s stored states. `reruns` must equal it (tests/test_schedule.py)."""
    if n <= 1:
        return 0
    if s >= n:
        return n - 1
    r = 1
    while math.comb(s + r, s) < n:
        r += 1
    return r * n - math.comb(s + r, s + 1)


def auto_carries(n: int) -> int:
    """The carries checkpoint="auto" may keep for n steps: ceil(2 sqrt(n)) (two-level checkpointing
    keeps about sqrt(n) segment starts and one segment's sqrt(n) carries)."""
    return max(1, math.ceil(2 * math.sqrt(max(n, 1))))


def best_slots(n: int, carries: int) -> int:
    """The fewest slots, at most `carries`, whose schedule re-runs no more forward steps than one
    with all of them (n or more: a slot per step, nothing re-run)."""
    if carries >= n:
        return max(n, 1)
    target = revolve_bound(n, carries)
    lo, hi = 1, carries          # revolve_bound falls as slots grow: the first k that reaches target
    while lo < hi:
        mid = (lo + hi) // 2
        if revolve_bound(n, mid) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo


def slots(n: int, checkpoint) -> int:
    """The slots a loop of n steps keeps for its `checkpoint` (see the module docstring)."""
    if checkpoint is None:
        return max(n, 1)
    if checkpoint == "auto":
        return best_slots(n, auto_carries(n))
    if isinstance(checkpoint, tuple) and checkpoint[0] == "within":
        return best_slots(n, int(checkpoint[1]))
    return int(checkpoint)


def schedule_for(n: int, checkpoint) -> np.ndarray:
    """actions(n, slots(n, checkpoint)): a while loop's schedule, made when its trip count is known."""
    return actions(n, slots(n, checkpoint))


@functools.lru_cache(maxsize=64)
def actions(n: int, k: int) -> np.ndarray:
    """The schedule as an int64 array of (action, argument) rows."""
    if k < 1:
        raise ValueError(f"a checkpoint schedule needs at least one slot, got {k}")
    out: list[tuple[int, int]] = [(STORE, 0)] if n else []
    if k >= n:   # a slot per step: one sweep storing every carry, then reverse (no table needed)
        for t in range(1, n):
            out += [(ADVANCE, 1), (STORE, t)]
        for t in reversed(range(n)):
            out += [(RESTORE, t), (REVERSE, 0)]
        arr = np.asarray(out, np.int64).reshape(-1, 2)
        arr.setflags(write=False)
        return arr
    free = k - 1
    split = _tables(n, free)[1]

    def reverse(start: int, length: int, slot: int, s: int) -> None:
        # precondition: the current carry is the one at `start`, also in `slot`
        if length == 0:
            return
        if length == 1:
            out.append((REVERSE, 0))
            return
        if s == 0:
            for t in reversed(range(length)):
                if t:
                    out.append((ADVANCE, t))
                out.append((REVERSE, 0))
                if t:
                    out.append((RESTORE, slot))
            return
        j = int(split[s, length])
        out.append((ADVANCE, j))
        out.append((STORE, slot + 1))
        reverse(start + j, length - j, slot + 1, s - 1)
        out.append((RESTORE, slot))
        reverse(start, j, slot, s)

    reverse(0, n, 0, free)
    arr = np.asarray(out, np.int64).reshape(-1, 2)
    arr.setflags(write=False)
    return arr


@functools.lru_cache(maxsize=64)
def first_sweep(n: int, k: int) -> tuple[np.ndarray, np.ndarray, int]:
    """What actions(n, k) does before its first backward step, for a forward pass to do instead:
    it runs steps 0 .. n-2, storing the carry at the start of some of them. Returns (slot_at: the
    slot the carry at the start of step p goes to, or -1, for each p < n; positions: the step each
    slot then holds, 0 if none; the index of the first REVERSE). From there the schedule resumes
    with the carry at the start of step n - 1 as its current one: the forward pass keeps k + 1
    carries, and the backward re-runs revolve_bound(n, k) - (n - 1) steps, not revolve_bound(n, k)."""
    acts = actions(n, k)
    first = next(i for i, (op, _) in enumerate(acts) if op == REVERSE)
    slot_at, positions, pos = np.full(n, -1, np.int64), np.zeros(k, np.int64), 0
    for op, arg in acts[:first]:
        if op == ADVANCE:
            pos += int(arg)
        else:   # (only advances and stores come before the first backward step, each slot stored once)
            slot_at[pos], positions[int(arg)] = int(arg), pos
    for a in (slot_at, positions):
        a.setflags(write=False)
    return slot_at, positions, first


def simulate(n: int, acts: np.ndarray) -> tuple[list[int], int, int]:
    """(steps reversed in order, forward steps run, slots used): for tests and the benchmark."""
    pos, slots, done, advanced = 0, {}, [], 0
    for op, arg in acts:
        if op == ADVANCE:
            pos += int(arg)
            advanced += int(arg)
        elif op == STORE:
            slots[int(arg)] = pos
        elif op == RESTORE:
            pos = slots[int(arg)]
        else:
            done.append(pos)
    return done, advanced, len(slots)
