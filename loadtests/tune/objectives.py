"""The autoscaler's queue-time target, derived from the winner's measured queue time at the load it sustains.

The HorizontalPodAutoscaler adds pods when the mean queue time per request passes ``QUEUE_TARGET_MS``
(slo.env), and TritonQueueTimeHigh fires above the same figure. A pod at the highest load that still met
the SLO had requests waiting ``q`` ms on average; scaling out must start before a pod gets there, so the
target is ``HEADROOM`` × ``q``, and at least ``DELAY_FACTOR`` × the batcher's queue delay (a wait every
batched request may have at any load). ``LOADTEST_P95_MS`` stays as it is: it is the objective the tuning met.

Example::

    derived = derive_queue_target(winner_measurement)
    print("\\n".join(derived.reasoning))
    derived.queue_target_ms  # 3.2
"""

from __future__ import annotations

import dataclasses

from loadtests.tune.measure import Measurement

__all__ = ["DELAY_FACTOR", "HEADROOM", "MIN_TARGET_MS", "DerivedObjectives", "derive_queue_target"]

HEADROOM = 0.8
MIN_TARGET_MS = 0.1
# The target stays this many times above the dynamic batcher's queue delay, which every batched request may wait.
DELAY_FACTOR = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class DerivedObjectives:
    """The new ``QUEUE_TARGET_MS`` (None: nothing measured to derive it from) and why."""

    queue_target_ms: float | None
    reasoning: tuple[str, ...]


def derive_queue_target(winner: Measurement) -> DerivedObjectives:
    """``HEADROOM`` × the winner's mean queue time at its sustained step, at least ``DELAY_FACTOR`` × its queue
    delay and ``MIN_TARGET_MS``."""
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
    target = max(round(HEADROOM * sustained.queue_ms, 1), MIN_TARGET_MS)
    reasoning = [
        f"{load} and requests waited {sustained.queue_ms:.2f} ms in Triton's queue on average.",
        f"Pods should be added before one reaches that load: QUEUE_TARGET_MS = {HEADROOM:g} x "
        f"{sustained.queue_ms:.2f} ms = {target:g} ms (the autoscaler's target; TritonQueueTimeHigh fires above it).",
    ]
    delay_ms = winner.candidate.max_queue_delay_us / 1000.0 if winner.candidate.batching else 0.0
    raised = target < DELAY_FACTOR * delay_ms
    if raised:
        target = round(DELAY_FACTOR * delay_ms, 1)
        reasoning.append(
            f"The batcher's own wait ({delay_ms:g} ms) is queue time too: the target is raised to {DELAY_FACTOR:g} x "
            f"it, {target:g} ms, lest the autoscaler add pods at any load; it then reacts late: a shorter queue "
            "delay, or more replicas at the start (hpa.yaml minReplicas), make up for it."
        )
    if not raised and sustained.p95_ms < winner.slo.p95_ms / 2:
        reasoning.append(
            "p95 was under half the objective at that load: the queue time at which the SLO would break lies "
            "higher, so this target is cautious (pods are added early)."
        )
    if not raised and sustained.queue_ms < 1.0:
        reasoning.append(
            "The queue stays under 1 ms even at that load: queue time rises late, so the autoscaler reacts "
            "late; consider more replicas at the start (hpa.yaml minReplicas)."
        )
    reasoning.append(f"LOADTEST_P95_MS stays {winner.slo.p95_ms:g} ms: it is the objective the tuning met.")
    return DerivedObjectives(target, tuple(reasoning))
