"""The resolved, validated description of one bound model (what config.pbtxt is written from), with the fields
of PyTriton 0.7's ``TritonModelConfig`` in its order; clients return it as a served model's config.

Example::

    from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig

    config = TritonModelConfig(
        model_name="add", inputs=[TensorSpec("a", (1,), np.float32)], outputs=[TensorSpec("sum", (1,), np.float32)]
    )
    ModelClient("localhost", "add", model_config=config)   # skips reading the config from the server
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tritonrt.model_config.common import DeviceKind, DynamicBatcher, ModelWarmup
from tritonrt.model_config.sequence import SequenceBatcher

__all__ = ["DeviceKind", "DynamicBatcher", "ModelWarmup", "ResponseCache", "TensorSpec", "TritonModelConfig"]

BACKEND = "python"
"""PyTriton's backend name, kept in the config for compatibility; tritonrt's config.pbtxt names its own native
backend instead (``render_pbtxt(cfg, backend="tritonrt")``, see tritonrt.models.repository)."""


@dataclasses.dataclass
class ResponseCache:
    """The model's response cache (Triton's ``ModelResponseCache``); the server needs a cache configured
    (``TritonConfig(cache_config=[...])``) for it to take effect."""

    enable: bool


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A named tensor of a model; ``shape`` excludes the batch axis; ``dtype`` is a numpy type."""

    name: str
    shape: tuple[int, ...]
    dtype: type = np.float32
    optional: bool | None = False


@dataclasses.dataclass
class TritonModelConfig:
    """Everything tritonrt knows about a bound model, after defaults and validation.

    Decorators read it (``get_model_config``) to learn the inputs, outputs and batching. ``inputs`` and
    ``outputs`` are lists (None given becomes an empty list); ``response_cache`` is a :class:`ResponseCache`
    or None (True/False given become ``ResponseCache(True)``/None). ``model_warmup`` stays None for bound
    models: warm-up requests are the user process's business and never reach Triton's config.
    """

    model_name: str
    model_version: int = 1
    max_batch_size: int = 4
    batching: bool = True
    batcher: DynamicBatcher | SequenceBatcher | None = None
    instance_group: dict[DeviceKind, int | None] = dataclasses.field(default_factory=dict)
    decoupled: bool = False
    backend_parameters: dict[str, str] = dataclasses.field(default_factory=dict)
    inputs: list[TensorSpec] = dataclasses.field(default_factory=list)
    outputs: list[TensorSpec] = dataclasses.field(default_factory=list)
    response_cache: ResponseCache | None = None
    model_warmup: list[ModelWarmup] | None = None

    def __post_init__(self) -> None:
        self.inputs = list(self.inputs or [])
        self.outputs = list(self.outputs or [])
        if isinstance(self.response_cache, bool):
            self.response_cache = ResponseCache(enable=True) if self.response_cache else None

    @property
    def backend(self) -> str:
        """The Triton backend that serves the model."""
        return BACKEND

    @property
    def response_cache_enabled(self) -> bool:
        """True when the model's responses are cached."""
        return self.response_cache is not None and bool(self.response_cache.enable)
