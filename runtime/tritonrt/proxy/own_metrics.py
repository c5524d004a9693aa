"""tritonrt's own metrics that the worker side counts (the backend counts the rest: reconnects, instance busy
time, cancelled requests), published on tritonserver's ``/metrics`` like the callable's (see
:mod:`tritonrt.metrics`), each labelled with its model."""

from __future__ import annotations

from tritonrt.metrics import Counter

__all__ = ["BATCH_RERUNS", "WORKER_RESTARTS", "zero_own_metrics"]

BATCH_RERUNS = Counter(
    "tritonrt_batch_reruns_total",
    "Batches whose inference callable raised and whose requests were then run again one by one",
    ("model",),
    _own=True,
)
WORKER_RESTARTS = Counter(
    "tritonrt_worker_restarts_total",
    "Worker processes started again after the one serving a model instance ended (crash, kill, timeout)",
    ("model",),
    _own=True,
)


def zero_own_metrics(model: str) -> None:
    """Publish the model's counters at 0 before anything happens (sent with the first answer), so that rates
    and dashboards have a series from the start rather than from the first event."""
    for counter in (BATCH_RERUNS, WORKER_RESTARTS):
        counter.labels(model).inc(0)
