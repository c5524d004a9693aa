"""The sequence batcher (a tritonrt extension of PyTriton's ModelConfig): stateful models, one sequence of requests
per correlation id, routed to the same model instance in order.

Example::

    ModelConfig(max_batch_size=8, batcher=SequenceBatcher(DirectStrategy(), max_sequence_idle_microseconds=5_000_000))

The callable reads each request's sequence id and start/end flags from the request (``request.sequence_id``,
``request.sequence_start``, ``request.sequence_end``), or per row under ``@batch`` with ``@sequence_inputs``.
The backend takes them from Triton's request, so no control input is declared: the model's own inputs are all
the client sends.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Sequence

from tritonrt.exceptions import PyTritonBadParameterError, PyTritonValidationError
from tritonrt.model_config.common import DynamicBatcher
from tritonrt.model_config.values import check_int

__all__ = [
    "DirectStrategy",
    "OldestStrategy",
    "SequenceBatcher",
    "check_sequence_batcher",
    "preferred_batch_sizes",
    "sequence_fields",
]

_UINT64_MAX = (1 << 64) - 1
_INT32_MAX = (1 << 31) - 1


@dataclasses.dataclass
class DirectStrategy:
    """Each sequence keeps one batch slot of one instance while it runs (Triton's ``direct``): the rows of a batch
    belong to different sequences, and a slot's row is always the same sequence until it ends.

    ``max_queue_delay_microseconds``: how long a batch may wait for more slots' requests;
    ``minimum_slot_utilization``: the share of slots (0 to 1) that must have a request before that wait ends.
    """

    max_queue_delay_microseconds: int = 0
    minimum_slot_utilization: float = 0.0


@dataclasses.dataclass
class OldestStrategy:
    """Batches are made of the oldest requests of up to ``max_candidate_sequences`` sequences (Triton's
    ``oldest``), dynamic-batcher style: a sequence's requests still run in order, one at a time."""

    max_candidate_sequences: int = 64
    preferred_batch_size: list[int] | None = None
    max_queue_delay_microseconds: int = 0
    preserve_ordering: bool = False


@dataclasses.dataclass
class SequenceBatcher:
    """Triton's sequence batcher. ``max_sequence_idle_microseconds``: a sequence that gets no request for this long
    is ended by Triton (its slot freed; its next request fails unless it starts a sequence again)."""

    strategy: DirectStrategy | OldestStrategy = dataclasses.field(default_factory=DirectStrategy)
    max_sequence_idle_microseconds: int = 1_000_000


def check_sequence_batcher(batcher: SequenceBatcher, max_batch_size: int, field: str) -> SequenceBatcher:
    """Check every value (each error names the field and its range); a copy of ``batcher``."""
    check_int(batcher.max_sequence_idle_microseconds, f"{field}.max_sequence_idle_microseconds", 1, _UINT64_MAX)
    strategy = batcher.strategy
    where = f"{field}.strategy"
    if isinstance(strategy, DirectStrategy):
        check_int(strategy.max_queue_delay_microseconds, f"{where}.max_queue_delay_microseconds", 0, _UINT64_MAX)
        utilization = strategy.minimum_slot_utilization
        if isinstance(utilization, bool) or not isinstance(utilization, numbers.Real) or not 0 <= utilization <= 1:
            raise PyTritonBadParameterError(
                f"{where}.minimum_slot_utilization must be a number from 0 to 1, got {utilization!r}."
            )
    elif isinstance(strategy, OldestStrategy):
        check_int(strategy.max_candidate_sequences, f"{where}.max_candidate_sequences", 1, _INT32_MAX)
        check_int(strategy.max_queue_delay_microseconds, f"{where}.max_queue_delay_microseconds", 0, _UINT64_MAX)
        preferred = strategy.preferred_batch_size
        if preferred is not None:
            if isinstance(preferred, (str, bytes)) or not isinstance(preferred, Sequence):
                raise PyTritonBadParameterError(
                    f"{where}.preferred_batch_size must be a list of ints, got {preferred!r}."
                )
            for size in preferred:
                check_int(size, f"{where}.preferred_batch_size entry", 1, max_batch_size,
                         f" (entries must be positive and <= config.max_batch_size={max_batch_size})")  # fmt: skip
        if not isinstance(strategy.preserve_ordering, bool):
            raise PyTritonBadParameterError(
                f"{where}.preserve_ordering must be True or False, got {strategy.preserve_ordering!r}."
            )
    else:
        raise PyTritonValidationError(
            f"{where} must be tritonrt.model_config.DirectStrategy() or OldestStrategy(...), "
            f"got {type(strategy).__name__}."
        )
    return dataclasses.replace(batcher, strategy=dataclasses.replace(strategy))


def sequence_fields(batcher: SequenceBatcher) -> tuple[list[str], str, list[str]]:
    """The ``sequence_batching`` block's own fields, its strategy's name and the strategy's fields (pbtxt text)."""
    own = [f"max_sequence_idle_microseconds: {batcher.max_sequence_idle_microseconds}"]
    strategy = batcher.strategy
    if isinstance(strategy, DirectStrategy):
        fields = [
            f"max_queue_delay_microseconds: {strategy.max_queue_delay_microseconds}",
            f"minimum_slot_utilization: {float(strategy.minimum_slot_utilization)}",
        ]
        return own, "direct", fields
    fields = [f"max_candidate_sequences: {strategy.max_candidate_sequences}"]
    if strategy.preferred_batch_size:
        fields.append(f"preferred_batch_size: [ {', '.join(str(size) for size in strategy.preferred_batch_size)} ]")
    fields.append(f"max_queue_delay_microseconds: {strategy.max_queue_delay_microseconds}")
    fields.append(f"preserve_ordering: {'true' if strategy.preserve_ordering else 'false'}")
    return own, "oldest", fields


def preferred_batch_sizes(batcher: DynamicBatcher | SequenceBatcher | None) -> list[int]:
    """The batch sizes a batcher prefers (none for the direct strategy, which batches by slots)."""
    if isinstance(batcher, DynamicBatcher):
        return list(batcher.preferred_batch_size or [])
    if isinstance(batcher, SequenceBatcher) and isinstance(batcher.strategy, OldestStrategy):
        return list(batcher.strategy.preferred_batch_size or [])
    return []
