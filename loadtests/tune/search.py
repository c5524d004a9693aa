"""Coordinate search over a ``Space``: walk one dimension at a time from the best setting so far.

Along a dimension the search steps to the neighbouring value, keeps walking while each step gains at
least ``min_gain`` (5 %: below that a difference is noise on a shared machine), and tries the other
direction when the first step did not gain. Passes over every dimension repeat until one changes nothing.
Each candidate is measured once; ``score`` raises to stop the search (budget spent, Ctrl+C), and the
measurements so far stay with the caller.

Instances and worker mode are also searched jointly, because neither may gain alone: for a CPU-bound
callable that holds the GIL, a second instance as a thread is no faster (one GIL), and one instance as a
worker process is no faster than one thread, yet two worker processes are nearly twice as fast. So the
walk over instances is followed at once by a joint step, which replaces a walk over worker modes: for
every other worker mode, the best setting switched to that mode is the start of a walk up and down the
instance counts, taken even though the switch alone gained nothing; the walk's end replaces the best
only when it beats it by ``min_gain``. It comes first in a pass, so that a short budget reaches it: for a
GIL-bound callable on a 2-core machine, the current setting, two threads, one process and two processes
are the first four candidates. Where only one mode is tried it measures nothing; otherwise it costs the
switched setting and its instance neighbours (memoised: nothing is measured twice).

Example::

    scores = {}
    best = coordinate_search(space, start, lambda c: scores.setdefault(c, measure(c)))
"""

from __future__ import annotations

from collections.abc import Callable

from loadtests.tune.space import DIMENSIONS, Candidate, Space

__all__ = ["MIN_GAIN", "MAX_PASSES", "better", "coordinate_search"]

MIN_GAIN = 0.05
MAX_PASSES = 3

Score = Callable[[Candidate], float | None]


def better(score: float | None, than: float | None, min_gain: float = MIN_GAIN) -> bool:
    """Whether ``score`` beats ``than`` by at least ``min_gain`` (a share); None (failed) beats nothing."""
    if score is None:
        return False
    if than is None:
        return True
    return score > than * (1 + min_gain) if than > 0 else score > 0


def coordinate_search(space: Space, start: Candidate, score: Score, *, min_gain: float = MIN_GAIN) -> Candidate:
    """The best candidate found from ``start``; ``score`` is called once per candidate (memoised here)."""
    seen: dict[Candidate, float | None] = {}

    def measured(candidate: Candidate) -> float | None:
        if candidate not in seen:
            seen[candidate] = score(candidate)
        return seen[candidate]

    best = start
    measured(best)
    for _ in range(MAX_PASSES):
        before = best
        for dimension in DIMENSIONS:
            if dimension == "instances":
                best = _joint_walk(space, _walk(space, best, dimension, measured, min_gain), measured, min_gain)
            elif dimension != "workers":  # walked within the joint step
                best = _walk(space, best, dimension, measured, min_gain)
        if best == before:
            break
    return best


def _joint_walk(space: Space, best: Candidate, measured: Score, min_gain: float) -> Candidate:
    """Instances and worker mode together: switch the mode, walk the instance counts from there, and keep
    the walk's end only where it beats ``best``."""
    for mode in space.values(best, "workers"):
        if mode == best.workers:
            continue
        switched = _walk(space, best.replace("workers", mode), "instances", measured, min_gain)
        if better(measured(switched), measured(best), min_gain):
            best = switched
    return best


def _walk(space: Space, best: Candidate, dimension: str, measured: Score, min_gain: float) -> Candidate:
    values = space.values(best, dimension)
    origin = values.index(getattr(best, dimension))
    for direction in (1, -1):
        moved = False
        index = origin + direction
        while 0 <= index < len(values):
            candidate = best.replace(dimension, values[index])
            if not better(measured(candidate), measured(best), min_gain):
                break
            best, moved = candidate, True
            index += direction
        if moved:
            break
    return best
