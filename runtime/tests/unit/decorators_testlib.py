"""What the decorators' unit tests share: model configs, binding as Triton.bind does it, requests."""

from __future__ import annotations

import numpy as np

from tritonrt.decorators import TritonContext, bind_triton_context
from tritonrt.model_config.common import DynamicBatcher
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig
from tritonrt.proxy.types import Request


def make_config(inputs, outputs, *, batching=True, max_batch_size=8, preferred=None) -> TritonModelConfig:
    return TritonModelConfig(
        model_name="model",
        batching=batching,
        max_batch_size=max_batch_size if batching else 0,
        batcher=DynamicBatcher(preferred_batch_size=preferred) if batching else None,
        inputs=[TensorSpec(name, shape, dtype, optional) for name, shape, dtype, optional in inputs],
        outputs=[TensorSpec(name, shape, dtype) for name, shape, dtype in outputs],
    )


def bind(infer_callable, config: TritonModelConfig) -> TritonContext:
    """What Triton.bind does for the decorators: attach the context, register the config."""
    context = TritonContext()
    bind_triton_context(infer_callable, context)
    context.model_configs[infer_callable] = config
    return context


def req(**inputs) -> Request:
    return Request({name: np.asarray(value) for name, value in inputs.items()})


XY_CONFIG = make_config([("x", (-1,), np.float32, False)], [("y", (-1,), np.float32)])

OPTIONALS_CONFIG = make_config(
    [
        ("x", (-1,), np.float32, False),
        ("temperature", (1,), np.float32, True),
        ("tag", (1,), np.bytes_, True),
    ],
    [("y", (-1,), np.float32)],
)
