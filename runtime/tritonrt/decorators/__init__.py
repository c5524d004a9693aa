"""Decorators that adapt an inference callable to the shape of data it wants (PyTriton 0.7 compatible).

An inference callable bound with ``Triton.bind`` receives a list of requests (each a mapping of input
name to numpy array) and returns one response dict per request. The decorators convert between that and
more convenient forms, e.g. one batch of keyword arguments::

    import numpy as np
    from tritonrt.decorators import batch, first_value

    @batch
    @first_value("temperature")
    def infer(prompts: np.ndarray, temperature: np.float32):
        return {"text": generate(prompts, temperature)}

They wrap functions, methods and callable objects alike (built on ``wrapt``), and pass ``async def``
callables, generators and async generators (decoupled streaming models) through: the result of a
decorated callable is then an awaitable, a generator or an async generator of converted results.

The package is split by topic: :mod:`~tritonrt.decorators.batching` (@batch, @sample, @pad_batch),
:mod:`~tritonrt.decorators.grouping` (@group_by_keys, @group_by_values, ConstantPadder),
:mod:`~tritonrt.decorators.inputs` (@fill_optionals, @first_value, @triton_context),
:mod:`~tritonrt.decorators.outputs` (convert_output), :mod:`~tritonrt.decorators.sequences` (@sequence_inputs),
:mod:`~tritonrt.decorators.cancellation` (@cancellation, all_cancelled) and
:mod:`~tritonrt.decorators.retry` (@no_retry, tritonrt's own); the callable's context lives in :mod:`tritonrt.context`.
Import everything from here, as from ``pytriton.decorators``.
"""

from tritonrt.context import (
    TRITON_CONTEXT_FIELD_NAME,
    ModelConfigDict,
    TritonContext,
    bind_triton_context,
    get_model_config,
    get_triton_context,
)
from tritonrt.decorators._common import (
    InferenceRequest,
    InferenceRequests,
    InferenceResult,
    InferenceResults,
    InputNames,
    get_inference_request_batch_size,
)
from tritonrt.decorators.batching import batch, pad_batch, sample
from tritonrt.decorators.cancellation import all_cancelled, cancellation
from tritonrt.decorators.grouping import ConstantPadder, group_by_keys, group_by_values
from tritonrt.decorators.inputs import fill_optionals, first_value, triton_context
from tritonrt.decorators.outputs import convert_output
from tritonrt.decorators.retry import no_retry
from tritonrt.decorators.sequences import sequence_inputs

__all__ = [
    "ConstantPadder",
    "InferenceRequest",
    "InferenceRequests",
    "InferenceResult",
    "InferenceResults",
    "InputNames",
    "ModelConfigDict",
    "TRITON_CONTEXT_FIELD_NAME",
    "TritonContext",
    "all_cancelled",
    "batch",
    "cancellation",
    "bind_triton_context",
    "convert_output",
    "fill_optionals",
    "first_value",
    "get_inference_request_batch_size",
    "get_model_config",
    "get_triton_context",
    "group_by_keys",
    "group_by_values",
    "no_retry",
    "pad_batch",
    "sample",
    "sequence_inputs",
    "triton_context",
]
