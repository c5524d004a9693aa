"""Serving a candidate by reloading the running service's model with a config override (Triton's model control)
instead of starting the service again: the service, its loaded model and its workers stay; Triton makes the
model anew with the candidate's batching, and its new instances connect to the same workers.

A reload changes the batching alone (``max_batch_size``, the queue delay, the preferred batch sizes; not to or
from ``max_batch_size`` 0, a batch axis the model was bound with or without). The instances and the worker mode
are what the service bound when it started (its callables, its worker processes), so a candidate that changes
either is served by a start.

Example::

    if reloadable(served, candidate):
        server.load_model(override(server.model_config(), candidate))
"""

from __future__ import annotations

import copy
from typing import Any

from loadtests.tune.space import Candidate

__all__ = ["override", "reloadable"]


def reloadable(served: Candidate, candidate: Candidate) -> bool:
    """Whether a reload of the model serving ``served`` can serve ``candidate``: both batch, with the same
    instances and worker mode (a model that does not batch has nothing a reload could change)."""
    same_workers = (served.instances, served.workers) == (candidate.instances, candidate.workers)
    return served.batching and candidate.batching and same_workers


def override(config: dict[str, Any], candidate: Candidate) -> dict[str, Any]:
    """The model's served configuration (``GET /v2/models/<model>/config``) with ``candidate``'s batching: the
    config to load it with. Its other settings (tensors, instance group, backend, parameters) stay."""
    changed = copy.deepcopy(config)
    changed["max_batch_size"] = candidate.max_batch_size
    batcher = dict(changed.get("dynamic_batching") or {})
    batcher["max_queue_delay_microseconds"] = candidate.max_queue_delay_us
    # Without preferred sizes Triton forms the largest batch it can (and reports [max_batch_size]): the
    # served ones, made for the old max_batch_size, must go.
    batcher.pop("preferred_batch_size", None)
    if candidate.preferred_batch_sizes:
        batcher["preferred_batch_size"] = candidate.preferred_batch_sizes
    changed["dynamic_batching"] = batcher
    return changed
