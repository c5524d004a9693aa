"""What the decorators share: the types of requests and results, checks of the arguments a decorated
callable gets, batch sizes, and merging the results of several calls (plain values, awaitables, streams)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from tritonrt.context import TRITON_CONTEXT_ATTRIBUTE, TRITON_CONTEXT_FIELD_NAME
from tritonrt.exceptions import PyTritonRuntimeError, PyTritonValidationError

__all__ = [
    "SPECIAL_KEYS",
    "InferenceRequest",
    "InferenceRequests",
    "InferenceResult",
    "InferenceResults",
    "InputNames",
    "array_inputs",
    "combine_results",
    "get_inference_request_batch_size",
    "inputs_batch_size",
    "requests_argument",
]

InputNames = list[str]
InferenceRequest = MutableMapping[str, np.ndarray]
InferenceRequests = Sequence[InferenceRequest]
InferenceResult = dict[str, np.ndarray]
InferenceResults = Sequence[InferenceResult]

SPECIAL_KEYS = (TRITON_CONTEXT_ATTRIBUTE, TRITON_CONTEXT_FIELD_NAME)
"""Names that are never inputs: PyTriton 0.7's special key and the keyword ``@triton_context`` passes."""
_END = object()  # marks an exhausted stream


def get_inference_request_batch_size(inference_request: Mapping[str, np.ndarray]) -> int:
    """Return the batch size of a request: the first axis of its first input.

    Example::

        get_inference_request_batch_size({"x": np.zeros((3, 2))})  # 3
    """
    first = next(iter(inference_request.values()), None)
    if first is None:
        raise PyTritonValidationError(
            "Cannot tell the batch size of a request without inputs; send at least one input, "
            "or give defaults for the missing optional inputs with @fill_optionals."
        )
    if np.ndim(first) == 0:
        raise PyTritonValidationError(
            "Cannot tell the batch size of a request whose inputs have no batch axis (0-dimensional "
            "arrays); batching decorators need a model bound with batching enabled (max_batch_size > 0)."
        )
    size: int = np.shape(first)[0]
    return size


# --- results of several calls: plain values, awaitables and streams ------------------------------------


def combine_results(results: list[Any], merge: Callable[[list[Any]], Any]) -> Any:
    """Merge the results of calls to one callable; awaitables and streams are merged as they resolve."""
    first = results[0]
    if inspect.isasyncgen(first):
        return _merge_async_streams(results, merge)
    if inspect.isgenerator(first):
        return _merge_streams(results, merge)
    if inspect.isawaitable(first):
        return _merge_awaitables(results, merge)
    return merge(results)


async def _merge_awaitables(awaitables: list[Any], merge: Callable[[list[Any]], Any]) -> Any:
    values = [await awaitables[0]] if len(awaitables) == 1 else await asyncio.gather(*awaitables)
    return merge(list(values))


def _merge_streams(streams: list[Any], merge: Callable[[list[Any]], Any]) -> Iterator[Any]:
    while True:
        items = [next(stream, _END) for stream in streams]
        if _streams_ended(items):
            return
        yield merge(items)


async def _merge_async_streams(streams: list[Any], merge: Callable[[list[Any]], Any]) -> AsyncIterator[Any]:
    while True:
        items = [await anext(stream, _END) for stream in streams]
        if _streams_ended(items):
            return
        yield merge(items)


def _streams_ended(items: list[Any]) -> bool:
    ended = [item is _END for item in items]
    if any(ended) and not all(ended):
        raise PyTritonValidationError(
            "The separate calls of a streaming (generator) inference callable yielded different numbers of "
            "results. Each yielded result must hold responses for every request, so all calls must yield "
            "the same number of times. Do not split streaming requests into separate calls (@group_by_keys, "
            "@group_by_values, @sample with several requests) if their streams can differ in length."
        )
    return all(ended)


# --- argument helpers ------------------------------------------------------------------------------------


def requests_argument(
    args: tuple[Any, ...], kwargs: dict[str, Any], decorator: str
) -> tuple[Sequence[InferenceRequest], tuple[Any, ...]]:
    """Split the call arguments of a decorator that works on requests into (requests, other args)."""
    if not args or not isinstance(args[0], (list, tuple)):
        got = f"keyword inputs ({', '.join(kwargs)})" if kwargs else f"arguments {args!r}"
        raise PyTritonValidationError(
            f"{decorator} works on the list of requests and must get it as the first argument, "
            f"but got {got}. Place {decorator} above @batch and @sample (they turn requests into keyword "
            "inputs) and apply each of those at most once."
        )
    if not args[0]:
        raise PyTritonValidationError(f"{decorator} got an empty list of requests; pass one or more.")
    return args[0], args[1:]


def array_inputs(kwargs: dict[str, Any], decorator: str, args: tuple[Any, ...] = ()) -> dict[str, np.ndarray]:
    """The batched inputs among keyword arguments (numpy arrays other than the special keys)."""
    inputs = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray) and k not in SPECIAL_KEYS}
    if args or not inputs:
        got = f"positional arguments {args!r}"[:200] if args else "no numpy array keyword arguments"
        raise PyTritonRuntimeError(
            f"{decorator} works on batched inputs passed as keyword arguments, but got {got}. "
            "Place it below @batch, which turns the list of requests into keyword inputs."
        )
    return inputs


def _where(where: str | int) -> str:
    """What an error names: ``where`` itself, or ``request <i>`` for a request's index."""
    return f"request {where}" if isinstance(where, int) else where


def inputs_batch_size(inputs: Mapping[str, np.ndarray], where: str | int) -> int:
    """The common first-axis size of the inputs; all inputs must agree. ``where`` names them in errors
    (an int: the index of their request)."""
    size: int | None = None
    for name, value in inputs.items():
        shape = value.shape if type(value) is np.ndarray else np.shape(value)
        if not shape:
            raise PyTritonValidationError(
                f"Input {name!r} of {_where(where)} has no batch axis (0-dimensional). Batching decorators need "
                "inputs whose first axis is the batch: bind the model with batching (max_batch_size > 0)."
            )
        if size is None:
            size = shape[0]
        elif shape[0] != size:
            listed = ", ".join(f"{key} has {np.shape(array)[0]}" for key, array in inputs.items())
            raise PyTritonValidationError(
                f"Inputs of {_where(where)} have different batch sizes ({listed} rows); every input of a request "
                "must have the same size of its first (batch) axis."
            )
    if size is None:
        return get_inference_request_batch_size(inputs)  # raises its error for a request without inputs
    return size
