"""Model configuration API (PyTriton-compatible)."""

from tritonrt.model_config.common import DeviceKind, DynamicBatcher, QueuePolicy, TimeoutAction
from tritonrt.model_config.model_config import ModelConfig
from tritonrt.model_config.tensor import Tensor

__all__ = ["DeviceKind", "DynamicBatcher", "ModelConfig", "QueuePolicy", "Tensor", "TimeoutAction"]
