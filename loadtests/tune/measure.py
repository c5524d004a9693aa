"""One candidate's measurement: load steps at rising user counts until the SLO breaks or throughput stops rising.

Example::

    steps: list[Step] = []
    climb(run_step, Slo(p95_ms=100), steps, start_users=1, max_users=64)
    Measurement(candidate, tuple(steps)).score   # the highest throughput of a step that met the SLO
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from loadtests.tune.space import Candidate

__all__ = ["PLATEAU_GAIN", "PLATEAU_STEPS", "Measurement", "Slo", "Step", "climb"]

# Doubling the users must raise throughput by this share, else the candidate is saturated and the climb stops.
PLATEAU_GAIN = 0.03
# Doublings in a row without that gain that end a climb (one alone is noise on a busy machine, or a batching
# model at too few users to fill its batches).
PLATEAU_STEPS = 2


@dataclasses.dataclass(frozen=True, slots=True)
class Slo:
    """What a load step must meet: ``deploy/k8s/base/slo.env``'s p95 latency and the allowed failure share."""

    p95_ms: float
    max_failure_ratio: float = 0.0


@dataclasses.dataclass(frozen=True, slots=True)
class Step:
    """One load step: ``users`` concurrent users for a few seconds, and what it measured.

    ``queue_ms``: mean time a request waited in Triton's queue during the step (from its metrics), None
    when the metrics could not be read.
    """

    users: int
    requests: int
    rps: float
    p95_ms: float
    failure_ratio: float
    queue_ms: float | None = None

    def meets(self, slo: Slo) -> bool:
        return self.requests > 0 and self.p95_ms <= slo.p95_ms and self.failure_ratio <= slo.max_failure_ratio


@dataclasses.dataclass(frozen=True, slots=True)
class Measurement:
    """A measured candidate: its steps, and ``error`` when it could not be served (it then scores None).

    ``complete`` is False when the budget or Ctrl+C cut the climb short: the score is a lower bound.
    ``served_by``: how the candidate came to be served, ``start`` (the service started with it), ``reload``
    (the running service's model reloaded with its config) or ``-`` (it never was); ``ready_s``: how long that
    took (a start: from the old service's stop).
    """

    candidate: Candidate
    steps: tuple[Step, ...]
    slo: Slo
    error: str | None = None
    complete: bool = True
    seconds: float = 0.0
    served_by: str = "start"
    ready_s: float = 0.0

    @property
    def sustained(self) -> Step | None:
        """The step with the highest throughput that met the SLO."""
        passing = [step for step in self.steps if step.meets(self.slo)]
        return max(passing, key=lambda step: step.rps) if passing else None

    @property
    def score(self) -> float | None:
        """Throughput sustained under the SLO (req/s); 0 when no step met it; None when the service failed."""
        if self.error is not None and not self.steps:
            return None
        sustained = self.sustained
        return sustained.rps if sustained is not None else 0.0


def climb(
    run_step: Callable[[int], Step],
    slo: Slo,
    steps: list[Step],
    *,
    start_users: int = 1,
    max_users: int = 64,
    floor_users: int | None = None,
) -> None:
    """Run steps at ``start_users``, doubling, into ``steps``; stop at the first step that misses the SLO,
    when doubling the users gained less than ``PLATEAU_GAIN`` throughput ``PLATEAU_STEPS`` times in a row, or
    past ``max_users``.

    ``floor_users`` (default ``start_users``): a climb may start above it, where earlier candidates peaked, to
    skip the light steps that tell nothing about throughput. When that first step already misses the SLO, the
    users are halved, down to ``floor_users``, until a step meets it; that step ends the climb (more users
    missed).

    ``steps`` is the caller's list, so the steps so far stay when ``run_step`` raises (budget, Ctrl+C).
    """
    floor = start_users if floor_users is None else min(floor_users, start_users)
    users = start_users
    step = run_step(users)
    steps.append(step)
    while not step.meets(slo):
        if users <= floor:
            return
        users = max(floor, users // 2)
        step = run_step(users)
        steps.append(step)
        if step.meets(slo):
            return
    best = step
    flat = 0  # doublings in a row that gained too little: one is noise or a model that batches only later
    users *= 2
    while users <= max_users:
        step = run_step(users)
        steps.append(step)
        if not step.meets(slo):
            return
        if step.rps < best.rps * (1 + PLATEAU_GAIN):
            flat += 1
            if flat == PLATEAU_STEPS:
                return
        else:
            flat = 0
        if step.rps > best.rps:
            best = step
        users *= 2
