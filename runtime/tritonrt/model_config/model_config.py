"""ModelConfig: how Triton should run a bound model."""

from __future__ import annotations

import dataclasses

from tritonrt.model_config.common import DynamicBatcher, ModelWarmup
from tritonrt.model_config.sequence import SequenceBatcher

__all__ = ["ModelConfig"]


@dataclasses.dataclass
class ModelConfig:
    """Serving options of a bound model.

    Example::

        ModelConfig(max_batch_size=64, batcher=DynamicBatcher(max_queue_delay_microseconds=200))

    ``model_warmup``: requests the callables are called with before the model loads (see ModelWarmup).
    """

    batching: bool = True
    max_batch_size: int = 4
    batcher: DynamicBatcher | SequenceBatcher = dataclasses.field(default_factory=DynamicBatcher)
    response_cache: bool = False
    decoupled: bool = False
    model_warmup: list[ModelWarmup] | None = None
