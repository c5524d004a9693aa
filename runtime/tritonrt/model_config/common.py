"""Building blocks of a model configuration: batcher, queue policy, device kind."""

from __future__ import annotations

import dataclasses
import enum

__all__ = ["DeviceKind", "DynamicBatcher", "QueuePolicy", "TimeoutAction"]


class DeviceKind(enum.Enum):
    """Where Triton places the model instances."""

    KIND_AUTO = "KIND_AUTO"
    KIND_CPU = "KIND_CPU"
    KIND_GPU = "KIND_GPU"


class TimeoutAction(enum.Enum):
    """What the scheduler does with a request whose queue timeout expired."""

    REJECT = "REJECT"
    DELAY = "DELAY"


@dataclasses.dataclass
class QueuePolicy:
    """Queue policy of the dynamic batcher (Triton's ``ModelQueuePolicy``)."""

    timeout_action: TimeoutAction = TimeoutAction.REJECT
    default_timeout_microseconds: int = 0
    allow_timeout_override: bool = False
    max_queue_size: int = 0


@dataclasses.dataclass
class DynamicBatcher:
    """Dynamic batcher settings (Triton's ``ModelDynamicBatching``).

    Example::

        DynamicBatcher(max_queue_delay_microseconds=100, preferred_batch_size=[8, 16])
    """

    max_queue_delay_microseconds: int = 0
    preferred_batch_size: list | None = None
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] | None = None
