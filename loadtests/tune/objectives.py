"""The autoscaler's queue-time target, derived from the queue time the winner had at the load one pod serves within
the SLO.

The HorizontalPodAutoscaler adds pods when the pods' mean queue time per request passes ``QUEUE_TARGET_MS``
(slo.env; it wants ``ceil(pods x queue time / target)`` pods, within a 10 % tolerance), and TritonQueueTimeHigh
fires above the same figure. So the target must be what separates the loads one pod can serve from those it
cannot:

- the load one pod serves within the SLO is the winner's sustained step (the most requests per second with the
  p95 within the objective); the queue time measured there, ``q``, is where a pod stands at its capacity: the
  target is ``q``. Past that load the p95 breaks, requests pile up in the queue, and pods are added;
- queue time need not rise with the load below it: at light load a request can wait as long or longer (for the
  one instance busy with another user's request, or for the batcher to fill a batch), so every lighter load that
  met the SLO must stay under the target too, else the autoscaler adds pods at light load: the target is the
  highest queue time measured at any load up to the sustained one;
- and at least ``DELAY_FACTOR`` x the batcher's queue delay, a wait every batched request may have at any load.

It is rounded up to 0.1 ms, never below a measured figure. ``LOADTEST_P95_MS`` stays as it is: it is the
objective the tuning met.

Example::

    derived = derive_queue_target(winner_measurement)
    print("\\n".join(derived.reasoning))
    derived.queue_target_ms  # 4.3
"""

from __future__ import annotations

import dataclasses
import math

from loadtests.tune.measure import Measurement, Step

__all__ = [
    "DELAY_FACTOR",
    "FLAT",
    "MIN_TARGET_MS",
    "DerivedObjectives",
    "derive_queue_target",
    "lighter_loads_unmeasured",
]

MIN_TARGET_MS = 0.1
# The target stays this many times above the dynamic batcher's queue delay, which every batched request may wait.
DELAY_FACTOR = 2.0
# A lighter load that waited this share of the sustained load's queue time or more: queue time hardly tells load.
FLAT = 0.8


@dataclasses.dataclass(frozen=True, slots=True)
class DerivedObjectives:
    """The new ``QUEUE_TARGET_MS`` (None: nothing measured to derive it from) and why."""

    queue_target_ms: float | None
    reasoning: tuple[str, ...]


def lighter_loads_unmeasured(winner: Measurement, start_users: int) -> list[int]:
    """The user counts from ``start_users`` (doubling) below the winner's lightest step: loads whose queue time
    the derivation needs and the climb skipped (it starts where earlier candidates peaked)."""
    if winner.sustained is None or not winner.steps:
        return []
    lightest = min(step.users for step in winner.steps)
    missing, users = [], start_users
    while users < lightest:
        missing.append(users)
        users *= 2
    return missing


def derive_queue_target(winner: Measurement, start_users: int = 1) -> DerivedObjectives:
    """The highest mean queue time the winner had at a load within the SLO up to its sustained step (the load
    one pod serves), at least ``DELAY_FACTOR`` x its queue delay and ``MIN_TARGET_MS``, rounded up to 0.1 ms.
    ``start_users``: the lightest load of a climb; lighter loads the winner was not measured at are named."""
    sustained = winner.sustained
    if sustained is None:
        return DerivedObjectives(None, ("no load step met the SLO: QUEUE_TARGET_MS is left as it is.",))
    load = (
        f"At {sustained.rps:.1f} req/s ({sustained.users} users), the most that {winner.candidate.label} "
        f"served within the SLO, p95 was {sustained.p95_ms:g} ms (objective {winner.slo.p95_ms:g} ms)"
    )
    if sustained.queue_ms is None:
        return DerivedObjectives(
            None, (load + ".", "Triton's queue metrics could not be read: QUEUE_TARGET_MS is left as it is.")
        )
    reasoning = [
        f"{load} and requests waited {sustained.queue_ms:.2f} ms in Triton's queue on average: the queue time "
        "of one pod at its capacity. The autoscaler adds pods above QUEUE_TARGET_MS (TritonQueueTimeHigh fires "
        "above it), so the target is that queue time: below that load one pod is enough."
    ]
    highest = sustained.queue_ms
    lighter = [
        step
        for step in winner.steps
        if step.users < sustained.users and step.meets(winner.slo) and step.queue_ms is not None
    ]
    worst = max(lighter, key=lambda step: step.queue_ms or 0.0, default=None)
    if worst is not None and worst.queue_ms is not None and worst.queue_ms > highest:
        highest = worst.queue_ms
        reasoning.append(
            f"At a lighter load, {worst.users} users ({worst.rps:.1f} req/s), requests waited longer: "
            f"{worst.queue_ms:.2f} ms (queue time need not rise with the load: a request waits for the instance "
            "busy with another's, or for a batch to fill). A target below it would add pods at that light load: "
            "the target is raised to it."
        )
    elif lighter:
        loads = ", ".join(f"{step.users} users {step.queue_ms:.2f} ms" for step in sorted(lighter, key=_by_users))
        reasoning.append(f"Every lighter load measured waited less ({loads}): none of them adds pods.")
    if worst is not None and worst.queue_ms is not None and worst.queue_ms >= FLAT * sustained.queue_ms:
        reasoning.append(
            f"Queue time hardly rises with the load for this setting ({worst.users} users already waited "
            f"{worst.queue_ms:.2f} ms): the autoscaler sees a pod's load only once it is past it, so it adds pods "
            "late; more replicas at the start (hpa.yaml minReplicas) make up for it."
        )
    unmeasured = lighter_loads_unmeasured(winner, start_users)
    if unmeasured:
        reasoning.append(
            f"Loads of {', '.join(map(str, unmeasured))} users were not measured for this setting (its climb started "
            f"at {min(step.users for step in winner.steps)}): their queue time may be higher than the target, "
            "and would then add pods at light load."
        )
    target = max(math.ceil(highest * 10 - 1e-9) / 10, MIN_TARGET_MS)
    delay_ms = winner.candidate.max_queue_delay_us / 1000.0 if winner.candidate.batching else 0.0
    raised = target < DELAY_FACTOR * delay_ms
    if raised:
        target = math.ceil(DELAY_FACTOR * delay_ms * 10 - 1e-9) / 10
        reasoning.append(
            f"The batcher's own wait ({delay_ms:g} ms) is queue time too, at any load: the target is raised to "
            f"{DELAY_FACTOR:g} x it, {target:g} ms, lest the autoscaler add pods at light load; it then reacts "
            "late: a shorter queue delay, or more replicas at the start (hpa.yaml minReplicas), make up for it."
        )
    reasoning.append(f"QUEUE_TARGET_MS = {target:g} ms (the highest queue time within the SLO, rounded up).")
    if not raised and highest < 1.0:
        reasoning.append(
            "The queue stays under 1 ms even at that load: queue time rises late, so the autoscaler reacts "
            "late; consider more replicas at the start (hpa.yaml minReplicas)."
        )
    reasoning.append(f"LOADTEST_P95_MS stays {winner.slo.p95_ms:g} ms: it is the objective the tuning met.")
    return DerivedObjectives(target, tuple(reasoning))


def _by_users(step: Step) -> int:
    return step.users
