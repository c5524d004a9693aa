"""The resolved, validated description of one bound model (what config.pbtxt is written from)."""

from __future__ import annotations

import dataclasses

import numpy as np

from tritonrt.model_config.common import DeviceKind, DynamicBatcher

__all__ = ["TensorSpec", "TritonModelConfig"]


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A named tensor of a model; ``shape`` excludes the batch axis; ``dtype`` is a numpy type."""

    name: str
    shape: tuple[int, ...]
    dtype: type = np.float32
    optional: bool = False


@dataclasses.dataclass
class TritonModelConfig:
    """Everything tritonrt knows about a bound model, after defaults and validation.

    Decorators read it (``get_model_config``) to learn the inputs, outputs and batching.
    """

    model_name: str
    model_version: int = 1
    batching: bool = True
    max_batch_size: int = 4
    batcher: DynamicBatcher | None = dataclasses.field(default_factory=DynamicBatcher)
    instance_group: dict[DeviceKind, int | None] = dataclasses.field(default_factory=dict)
    inputs: list[TensorSpec] = dataclasses.field(default_factory=list)
    outputs: list[TensorSpec] = dataclasses.field(default_factory=list)
    response_cache: bool = False
    decoupled: bool = False
    backend_parameters: dict[str, str] = dataclasses.field(default_factory=dict)
