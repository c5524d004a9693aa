"""Building blocks of a model configuration: batcher, queue policy, device kind, warm-up."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import Any

__all__ = ["DeviceKind", "DynamicBatcher", "ModelWarmup", "QueuePolicy", "TimeoutAction", "WarmupInput"]


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
    preferred_batch_size: list[int] | None = None
    preserve_ordering: bool = False
    priority_levels: int = 0
    default_priority_level: int = 0
    default_queue_policy: QueuePolicy | None = None
    priority_queue_policy: dict[int, QueuePolicy] | None = None


@dataclasses.dataclass
class WarmupInput:
    """How to make one input of the warm-up requests: zeros, random values, or a ``.npy`` file's array.

    ``shape`` excludes the batch axis. The first of ``input_data_file``, ``zero_data`` and ``random_data``
    that is set decides.

    Example::

        WarmupInput(dtype=np.float32, shape=(3, 224, 224), random_data=True)
    """

    dtype: Any
    shape: Sequence[int]
    zero_data: bool | None = False
    random_data: bool | None = False
    input_data_file: str | None = None


@dataclasses.dataclass
class ModelWarmup:
    """Requests to call the inference callables with before the model is loaded (``ModelConfig.model_warmup``).

    ``count`` requests of ``batch_size`` rows each, with inputs made as ``inputs`` says. tritonrt calls each
    of the model's callables with them directly, as PyTriton 0.7 does; a failing warm-up is logged and the
    model loads anyway.

    Example::

        ModelWarmup(name="zeros", batch_size=4, inputs={"x": WarmupInput(np.float32, (16,), zero_data=True)}, count=2)
    """

    name: str
    batch_size: int
    inputs: dict[str, WarmupInput]
    count: int
