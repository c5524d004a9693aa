"""Model configuration API (PyTriton-compatible)."""

from tritonrt.model_config.common import DeviceKind, DynamicBatcher, QueuePolicy, TimeoutAction
from tritonrt.model_config.model_config import ModelConfig
from tritonrt.model_config.sequence import DirectStrategy, OldestStrategy, SequenceBatcher
from tritonrt.model_config.tensor import Tensor

__all__ = [
    "DeviceKind",
    "DirectStrategy",
    "DynamicBatcher",
    "ModelConfig",
    "OldestStrategy",
    "QueuePolicy",
    "SequenceBatcher",
    "Tensor",
    "TimeoutAction",
]
