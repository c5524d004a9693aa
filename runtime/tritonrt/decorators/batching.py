"""Batching: the list of requests as one batch of keyword inputs (@batch), one call per request (@sample),
and a batch padded to a size the model prefers (@pad_batch)."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import Any

import numpy as np
import wrapt

from tritonrt.context import get_model_config
from tritonrt.decorators._common import (
    InferenceRequest,
    InferenceResult,
    array_inputs,
    combine_results,
    inputs_batch_size,
    requests_argument,
)
from tritonrt.decorators.outputs import convert_output
from tritonrt.exceptions import PyTritonValidationError
from tritonrt.memory import data_address
from tritonrt.model_config.sequence import preferred_batch_sizes

__all__ = ["batch", "pad_batch", "sample"]


# --- request <-> batch conversion ------------------------------------------------------------------------


def _concatenate(name: str, arrays: list[np.ndarray]) -> np.ndarray:
    joined = _join_adjacent(arrays)
    if joined is not None:
        return joined
    try:
        return np.concatenate(arrays)
    except ValueError as error:
        shapes = ", ".join(str(np.shape(array)) for array in arrays)
        raise PyTritonValidationError(
            f"Cannot batch input {name!r}: the requests' arrays have shapes {shapes}, which differ beyond "
            "the batch axis. Send equally shaped inputs, or group requests first (@group_by_values)."
        ) from error


_JOIN_MIN_BYTES = 64 << 10  # below this, copying is cheaper than checking whether arrays are adjacent


def _join_adjacent(arrays: list[np.ndarray]) -> np.ndarray | None:
    """One view spanning ``arrays`` when they lie back to back in one buffer (as tritonrt lays out the
    requests of a batch), so that batching large tensors copies nothing; None otherwise."""
    first = arrays[0]
    if type(first) is not np.ndarray or first.nbytes * len(arrays) < _JOIN_MIN_BYTES:
        return None
    base: Any = first.base  # tritonrt's transport: a uint8 array over shared memory, or its receive buffer
    if type(base) is np.ndarray:
        if base.ndim != 1 or not base.flags.c_contiguous:
            return None
    elif type(base) is not bytearray:
        return None
    dtype, trailing = first.dtype, first.shape[1:]
    start = address = data_address(first)
    rows = 0
    for array in arrays:
        if (
            type(array) is not np.ndarray
            or array.base is not base
            or array.dtype != dtype
            or array.shape[1:] != trailing
            or not array.flags.c_contiguous
            or data_address(array) != address
        ):
            return None
        address += array.nbytes
        rows += array.shape[0]
    offset = start - data_address(base)
    joined: np.ndarray = np.ndarray((rows, *trailing), dtype, base, offset)
    return joined


def _split_batch(outputs: dict[str, Any], sizes: list[int]) -> list[InferenceResult]:
    """Cut batched outputs into one response per request, by the requests' batch sizes.

    Raises ValueError (PyTriton 0.7's type) when an output's rows are not the batch's rows.
    """
    total = sum(sizes)
    wrong = {}
    for name, value in outputs.items():
        shape = value.shape if type(value) is np.ndarray else None
        if not shape:
            got = f"shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
            raise PyTritonValidationError(
                f"Output {name!r} must be a numpy array with one row per input row of the batch ({total}), got {got}."
            )
        if shape[0] != total:
            wrong[name] = shape
    if wrong:
        shapes = ", ".join(f"{name!r} has shape {shape}" for name, shape in wrong.items())
        raise ValueError(
            f"The outputs must have one row per input row of the batch ({total} rows), but {shapes}. "
            "Return exactly one row per input row."
        )
    if len(sizes) == 1:
        return [outputs]
    responses, start = [], 0
    for size in sizes:
        responses.append({name: value[start : start + size] for name, value in outputs.items()})
        start += size
    return responses


def _request_inputs(request: InferenceRequest) -> dict[str, np.ndarray]:
    data = getattr(request, "data", None)  # tritonrt's Request keeps its inputs in a dict
    return data if type(data) is dict else dict(request)


@wrapt.decorator
def batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Turn the list of requests into one batch: each input becomes a keyword argument.

    The requests' arrays are concatenated along the batch axis; the callable returns a dict (or a list or
    tuple in the order of the model's outputs) of batched arrays, which is cut back into one response per
    request. All requests must have the same inputs (use @group_by_keys or @fill_optionals before it).

    Example::

        @batch
        def infer(image: np.ndarray):
            return {"label": model(image)}
    """
    if len(args) == 1 and not kwargs and type(args[0]) is list and len(args[0]) == 1:  # (the common case)
        inputs = _request_inputs(args[0][0])  # one request: its arrays already are the batch (no copy)
        size = inputs_batch_size(inputs, 0)
        result = wrapped(**inputs)
        if type(result) is dict:
            return _split_batch(result, [size])
        return combine_results(
            [result], lambda results: _split_batch(convert_output(results[0], wrapped, instance), [size])
        )
    requests, rest = requests_argument(args, kwargs, "@batch")
    if len(requests) == 1:
        batched = dict(_request_inputs(requests[0]))
        sizes = [inputs_batch_size(batched, 0)]
    else:
        all_inputs = [_request_inputs(request) for request in requests]
        names = all_inputs[0].keys()
        for index, inputs in enumerate(all_inputs):
            if inputs.keys() != names:
                raise PyTritonValidationError(
                    f"Cannot batch requests with different inputs: request 0 has {sorted(names)}, request "
                    f"{index} has {sorted(inputs)}. Put @group_by_keys above @batch, or give defaults "
                    "for the optional inputs with @fill_optionals."
                )
        sizes = [inputs_batch_size(inputs, index) for index, inputs in enumerate(all_inputs)]
        batched = {name: _concatenate(name, [inputs[name] for inputs in all_inputs]) for name in names}
    result = wrapped(*rest, **{**kwargs, **batched}) if kwargs else wrapped(*rest, **batched)
    if type(result) is dict:  # the common case: no awaitable or stream to merge
        return _split_batch(result, sizes)
    return combine_results([result], lambda results: _split_batch(convert_output(results[0], wrapped, instance), sizes))


@wrapt.decorator
def sample(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call the callable once per request, with the request's inputs as keyword arguments.

    Meant for models without batching. Each call returns a dict (or a list/tuple in the order of the
    model's outputs): the response to that request.

    Example::

        @sample
        def infer(text: np.ndarray):
            return {"length": np.array([len(text[0])])}
    """
    requests, rest = requests_argument(args, kwargs, "@sample")
    results = [wrapped(*rest, **{**kwargs, **request}) for request in requests]
    return combine_results(results, lambda outputs: [convert_output(each, wrapped, instance) for each in outputs])


@wrapt.decorator
def pad_batch(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Pad the batch, repeating its last row, up to the nearest preferred batch size or max_batch_size.

    Use it below @batch, for models that run best (or only) at fixed batch sizes; the padded rows' outputs
    are dropped before they reach @batch. (PyTriton 0.7 passes them on, and its @batch rejects them.)

    Example::

        @batch
        @pad_batch
        def infer(image):
            return {"label": compiled_model(image)}
    """
    inputs = array_inputs(kwargs, "@pad_batch", args)
    config = get_model_config(wrapped, instance)
    if not config.batching:
        raise PyTritonValidationError(
            "@pad_batch needs a model with batching; bind it with ModelConfig(batching=True) or drop @pad_batch."
        )
    size = inputs_batch_size(inputs, "the batch")
    preferred = preferred_batch_sizes(config.batcher)
    sizes = sorted({*preferred, config.max_batch_size})
    if size > sizes[-1]:
        raise PyTritonValidationError(
            f"@pad_batch got a batch of {size} rows, more than the largest allowed size {sizes[-1]}; raise "
            "max_batch_size in the model's ModelConfig."
        )
    target = sizes[bisect.bisect_left(sizes, size)]
    if target == size:
        return wrapped(*args, **kwargs)
    kwargs = dict(kwargs)
    for name, value in inputs.items():
        kwargs[name] = np.concatenate([value, np.repeat(value[-1:], target - size, axis=0)])
    return combine_results([wrapped(*args, **kwargs)], lambda results: _unpadded(results[0], wrapped, instance, size))


def _unpadded(result: Any, wrapped: Callable[..., Any], instance: Any, size: int) -> dict[str, Any]:
    """The outputs of a padded call without the padded rows (outputs without a batch axis are left alone)."""
    outputs = convert_output(result, wrapped, instance)
    return {
        name: value[:size] if isinstance(value, np.ndarray) and value.ndim else value for name, value in outputs.items()
    }
