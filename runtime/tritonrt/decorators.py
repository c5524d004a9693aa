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
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import wrapt

from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError, PyTritonValidationError
from tritonrt.memory import data_address
from tritonrt.model_config.checks import dtype_matches, shape_matches
from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.proxy.types import ModelConfigDict, TritonContext

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
    "batch",
    "bind_triton_context",
    "convert_output",
    "fill_optionals",
    "first_value",
    "get_inference_request_batch_size",
    "get_model_config",
    "get_triton_context",
    "group_by_keys",
    "group_by_values",
    "pad_batch",
    "sample",
    "triton_context",
]

InputNames = list[str]
InferenceRequest = Mapping[str, np.ndarray]
InferenceRequests = Sequence[InferenceRequest]
InferenceResult = dict[str, np.ndarray]
InferenceResults = Sequence[InferenceResult]

TRITON_CONTEXT_FIELD_NAME = "triton_context"
"""The keyword argument under which ``@triton_context`` passes the TritonContext."""

_CONTEXT_ATTRIBUTE = "__triton_context__"
_SPECIAL_KEYS = (TRITON_CONTEXT_FIELD_NAME,)
_END = object()  # marks an exhausted stream


# --- the Triton context and model config of a callable -------------------------------------------------


def bind_triton_context(infer_callable: Callable, context: TritonContext) -> None:
    """Attach ``context`` to an inference callable so its decorators can find it (used by ``Triton.bind``).

    The context goes on the object of a bound method, on a callable object itself, and on a function and
    every layer it wraps (``__wrapped__``). The caller registers the model config in
    ``context.model_configs[infer_callable]``.

    Example::

        context = TritonContext()
        bind_triton_context(infer, context)
        context.model_configs[infer] = triton_model_config
    """
    if inspect.ismethod(infer_callable):  # also true for a wrapt-decorated method
        targets = [infer_callable.__self__]
    else:
        targets, layer = [], infer_callable
        while layer is not None and all(layer is not target for target in targets):
            targets.append(layer)
            layer = getattr(layer, "__wrapped__", None)
    for target in targets:
        try:
            setattr(target, _CONTEXT_ATTRIBUTE, context)
        except (AttributeError, TypeError) as error:
            raise PyTritonBadParameterError(
                f"Cannot attach the Triton context to inference callable {infer_callable!r} ({error}). "
                "Bind a function, a bound method or an object that accepts new attributes (no __slots__)."
            ) from error


def get_triton_context(wrapped: Callable, instance: Any) -> TritonContext:
    """Return the TritonContext attached by ``Triton.bind`` to the callable (``instance`` for methods).

    Use it in custom ``wrapt`` decorators; ``@triton_context`` passes it to the callable instead.

    Example::

        @wrapt.decorator
        def log_model_name(wrapped, instance, args, kwargs):
            print(get_triton_context(wrapped, instance).model_configs[wrapped].model_name)
            return wrapped(*args, **kwargs)
    """
    owner = instance if instance is not None else wrapped
    context = getattr(owner, _CONTEXT_ATTRIBUTE, None)
    if context is None:
        raise PyTritonValidationError(
            f"Inference callable {wrapped!r} has no Triton context: a decorator that needs the model "
            "config (@triton_context, @fill_optionals, @first_value, @pad_batch, or list/tuple outputs) can "
            "only run after the callable was bound with Triton.bind(...). Bind it before calling it."
        )
    return context


def get_model_config(wrapped: Callable, instance: Any) -> TritonModelConfig:
    """Return the TritonModelConfig the callable was bound with, from inside any decorator layer.

    Example::

        @wrapt.decorator
        def check_batching(wrapped, instance, args, kwargs):
            assert get_model_config(wrapped, instance).batching
            return wrapped(*args, **kwargs)
    """
    model_configs = get_triton_context(wrapped, instance).model_configs
    for key in (wrapped, instance):  # a helper method of a bound object finds the object's config
        if key is not None and key in model_configs:
            return model_configs[key]
    raise PyTritonValidationError(
        f"No model config is registered for inference callable {wrapped!r}. Bind this callable (or the "
        "object it is a method of) with Triton.bind(...) before calling it."
    )


def convert_output(
    outputs: Mapping | list | tuple,
    wrapped: Callable | None = None,
    instance: Any = None,
    model_config: TritonModelConfig | None = None,
) -> dict[str, Any]:
    """Return outputs as a dict: a list or tuple is named by the model's outputs, in their order.

    Example::

        convert_output([probabilities, labels], model_config=config)  # {"probs": ..., "labels": ...}
    """
    if isinstance(outputs, Mapping):
        return dict(outputs)
    if not isinstance(outputs, (list, tuple)):
        raise PyTritonValidationError(
            f"Unsupported output type {type(outputs).__name__}: an inference callable must return a dict "
            "of output name to numpy array, or a list/tuple of arrays in the order of the model's outputs."
        )
    if model_config is None:
        model_config = get_model_config(wrapped, instance)
    names = [spec.name for spec in model_config.outputs]
    if len(outputs) != len(names):
        raise PyTritonValidationError(
            f"The inference callable returned {len(outputs)} outputs but model {model_config.model_name!r} "
            f"defines {len(names)} ({', '.join(names)}); return one array per output, in that order, "
            "or a dict of output name to array."
        )
    return dict(zip(names, outputs, strict=True))


def get_inference_request_batch_size(inference_request: InferenceRequest) -> int:
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
    return np.shape(first)[0]


# --- results of several calls: plain values, awaitables and streams ------------------------------------


def _combine(results: list, merge: Callable[[list], Any]) -> Any:
    """Merge the results of calls to one callable; awaitables and streams are merged as they resolve."""
    first = results[0]
    if inspect.isasyncgen(first):
        return _merge_async_streams(results, merge)
    if inspect.isgenerator(first):
        return _merge_streams(results, merge)
    if inspect.isawaitable(first):
        return _merge_awaitables(results, merge)
    return merge(results)


async def _merge_awaitables(awaitables: list, merge: Callable[[list], Any]) -> Any:
    values = [await awaitables[0]] if len(awaitables) == 1 else await asyncio.gather(*awaitables)
    return merge(list(values))


def _merge_streams(streams: list, merge: Callable[[list], Any]):
    while True:
        items = [next(stream, _END) for stream in streams]
        if _streams_ended(items):
            return
        yield merge(items)


async def _merge_async_streams(streams: list, merge: Callable[[list], Any]):
    while True:
        items = [await anext(stream, _END) for stream in streams]
        if _streams_ended(items):
            return
        yield merge(items)


def _streams_ended(items: list) -> bool:
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


def _requests_arg(args: tuple, kwargs: dict, decorator: str) -> tuple[Sequence[InferenceRequest], tuple]:
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


def _array_inputs(kwargs: dict, decorator: str, args: tuple = ()) -> dict[str, np.ndarray]:
    """The batched inputs among keyword arguments (numpy arrays other than the special keys)."""
    inputs = {k: v for k, v in kwargs.items() if isinstance(v, np.ndarray) and k not in _SPECIAL_KEYS}
    if args or not inputs:
        got = f"positional arguments {args!r}"[:200] if args else "no numpy array keyword arguments"
        raise PyTritonRuntimeError(
            f"{decorator} works on batched inputs passed as keyword arguments, but got {got}. "
            "Place it below @batch, which turns the list of requests into keyword inputs."
        )
    return inputs


def _where(where: str | int) -> str:
    """What an error names: ``where`` itself, or ``request <i>`` for a request's index."""
    return f"request {where}" if type(where) is int else where


def _batch_size(inputs: Mapping[str, np.ndarray], where: str | int) -> int:
    """The common first-axis size of the inputs; all inputs must agree. ``where`` names them in errors
    (an int: the index of their request)."""
    size = None
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
    base = first.base  # tritonrt's transport: a uint8 array over shared memory, or its receive buffer
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
    return np.ndarray((rows, *trailing), dtype, base, offset)


def _split_batch(outputs: dict[str, Any], sizes: list[int]) -> list[InferenceResult]:
    """Cut batched outputs into one response per request, by the requests' batch sizes."""
    total = sum(sizes)
    exact = True  # every output has exactly ``total`` rows
    for name, value in outputs.items():
        shape = value.shape if type(value) is np.ndarray else None
        if not shape or shape[0] < total:
            got = f"shape {value.shape}" if isinstance(value, np.ndarray) else type(value).__name__
            raise PyTritonValidationError(
                f"Output {name!r} must be a numpy array with at least {total} rows (one per input row of the "
                f"batch), got {got}. Return one row per input row."
            )
        if shape[0] != total:
            exact = False
    if exact and len(sizes) == 1:
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
def batch(wrapped, instance, args, kwargs):
    """Turn the list of requests into one batch: each input becomes a keyword argument.

    The requests' arrays are concatenated along the batch axis; the callable returns a dict (or a list or
    tuple in the order of the model's outputs) of batched arrays, which is cut back into one response per
    request. All requests must have the same inputs (use @group_by_keys or @fill_optionals before it).

    Example::

        @batch
        def infer(image: np.ndarray):
            return {"label": model(image)}
    """
    requests, rest = _requests_arg(args, kwargs, "@batch")
    if len(requests) == 1:  # one request: its arrays already are the batch (no copy)
        batched = dict(_request_inputs(requests[0]))
        sizes = [_batch_size(batched, 0)]
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
        sizes = [_batch_size(inputs, index) for index, inputs in enumerate(all_inputs)]
        batched = {name: _concatenate(name, [inputs[name] for inputs in all_inputs]) for name in names}
    result = wrapped(*rest, **{**kwargs, **batched}) if kwargs else wrapped(*rest, **batched)
    if type(result) is dict:  # the common case: no awaitable or stream to merge
        return _split_batch(result, sizes)
    return _combine([result], lambda results: _split_batch(convert_output(results[0], wrapped, instance), sizes))


@wrapt.decorator
def sample(wrapped, instance, args, kwargs):
    """Call the callable once per request, with the request's inputs as keyword arguments.

    Meant for models without batching. Each call returns a dict (or a list/tuple in the order of the
    model's outputs): the response to that request.

    Example::

        @sample
        def infer(text: np.ndarray):
            return {"length": np.array([len(text[0])])}
    """
    requests, rest = _requests_arg(args, kwargs, "@sample")
    results = [wrapped(*rest, **{**kwargs, **request}) for request in requests]
    return _combine(results, lambda outputs: [convert_output(each, wrapped, instance) for each in outputs])


# --- grouping --------------------------------------------------------------------------------------------


def _scatter_responses(groups: list[list[int]], count: int, results: list) -> list[InferenceResult]:
    responses: list = [None] * count
    for indices, result in zip(groups, results, strict=True):
        if not isinstance(result, (list, tuple)) or len(result) != len(indices):
            got = f"{len(result)} responses" if isinstance(result, (list, tuple)) else type(result).__name__
            raise PyTritonValidationError(
                f"The inference callable returned {got} for a group of {len(indices)} requests; "
                "return a list with exactly one response per request."
            )
        for index, response in zip(indices, result, strict=True):
            responses[index] = response
    return responses


@wrapt.decorator
def group_by_keys(wrapped, instance, args, kwargs):
    """Call the callable once per group of requests that have the same set of inputs.

    Place it above @batch when some inputs are optional: @batch needs every request to have the same
    inputs. Responses come back in the order of the requests.

    Example::

        @group_by_keys
        @batch
        def infer(text, temperature=None):
            ...
    """
    requests, rest = _requests_arg(args, kwargs, "@group_by_keys")
    groups: dict[tuple, list[int]] = {}
    for index, request in enumerate(requests):
        groups.setdefault(tuple(sorted(request.keys())), []).append(index)
    if len(groups) == 1:
        return wrapped(*args, **kwargs)
    indices = list(groups.values())
    results = [wrapped([requests[i] for i in group], *rest, **kwargs) for group in indices]
    return _combine(results, functools.partial(_scatter_responses, indices, len(requests)))


def _row_key(row: Any) -> tuple:
    """A hashable key equal for equal rows of an input."""
    row = np.asarray(row)
    if row.dtype == object:
        return row.shape, tuple(row.ravel().tolist())
    return row.shape, row.dtype.str, row.tobytes()


def _merge_rows(groups: list[np.ndarray], batch_size: int, results: list[dict]) -> dict[str, np.ndarray]:
    names = list(results[0])
    for result in results[1:]:
        if set(result) != set(names):
            raise PyTritonValidationError(
                f"Grouped calls returned different outputs ({sorted(names)} and {sorted(result)}); "
                "return the same outputs for every group."
            )
    merged = {}
    for name in names:
        parts = [result[name] for result in results]
        for rows, part in zip(groups, parts, strict=True):
            if not isinstance(part, np.ndarray) or part.ndim == 0 or part.shape[0] != len(rows):
                got = f"shape {part.shape}" if isinstance(part, np.ndarray) else type(part).__name__
                raise PyTritonValidationError(
                    f"Output {name!r} of a group of {len(rows)} rows must be a numpy array with {len(rows)} "
                    f"rows, got {got}."
                )
        tails = {part.shape[1:] for part in parts}
        if len(tails) > 1:
            raise PyTritonValidationError(
                f"Output {name!r} has different shapes in different groups ({sorted(tails)}); pad them to "
                "one shape, e.g. @group_by_values(..., pad_fn=ConstantPadder(0))."
            )
        merged[name] = np.empty((batch_size, *parts[0].shape[1:]), dtype=np.result_type(*parts))
        for rows, part in zip(groups, parts, strict=True):
            merged[name][rows] = part
    return merged


def group_by_values(*keys: str, pad_fn: Callable[[InferenceResults], InferenceResults] | None = None):
    """Split a batch into sub-batches with equal values on ``keys``; call the callable once per sub-batch.

    Use it below @batch, for inputs that act as parameters (e.g. a temperature per row). The sub-batches'
    outputs are put back in row order; ``pad_fn`` (e.g. ``ConstantPadder(0)``) first brings outputs of
    different shapes to one shape.

    Example::

        @batch
        @group_by_values("temperature")
        def infer(prompts, temperature):
            return {"text": generate(prompts, temperature[0])}
    """
    for key in keys:
        if not isinstance(key, str):
            raise PyTritonBadParameterError(f"@group_by_values keys must be input names (str), got {key!r}.")
    if pad_fn is not None and not callable(pad_fn):
        raise PyTritonBadParameterError(
            f"pad_fn of @group_by_values must be callable, e.g. ConstantPadder(0), got {pad_fn!r}."
        )

    @wrapt.decorator
    def _group_by_values(wrapped, instance, args, kwargs):
        inputs = _array_inputs(kwargs, "@group_by_values", args)
        missing = [key for key in keys if key not in inputs]
        if missing:
            raise PyTritonValidationError(
                f"@group_by_values cannot group by {', '.join(map(repr, missing))}: no such batched input "
                f"(inputs: {', '.join(inputs)}). Give defaults for optional inputs with @fill_optionals."
            )
        batch_size = _batch_size(inputs, "the batch")
        rows_by_key: dict[tuple, list[int]] = {}
        for row in range(batch_size):
            rows_by_key.setdefault(tuple(_row_key(inputs[key][row]) for key in keys), []).append(row)
        if len(rows_by_key) == 1:
            return wrapped(*args, **kwargs)
        groups = [np.array(rows) for rows in rows_by_key.values()]
        others = {k: v for k, v in kwargs.items() if k not in inputs}
        results = [wrapped(**others, **{name: value[rows] for name, value in inputs.items()}) for rows in groups]

        def merge(group_results: list) -> dict[str, np.ndarray]:
            outputs = [convert_output(result, wrapped, instance) for result in group_results]
            if pad_fn is not None:
                outputs = list(pad_fn(outputs))
            return _merge_rows(groups, batch_size, outputs)

        return _combine(results, merge)

    return _group_by_values


class ConstantPadder:
    """Pad arrays of the same name to one shape (beyond the batch axis) with a constant value.

    Bytes and string arrays are padded with empty strings and get the longest item size.

    Example::

        padded = ConstantPadder(0)([{"y": np.ones((1, 2))}, {"y": np.ones((2, 3))}])
        # padded[0]["y"].shape == (1, 3), padded[1]["y"].shape == (2, 3)
    """

    def __init__(self, pad_value=0):
        self.pad_value = pad_value

    def __call__(self, batches_list: InferenceResults) -> InferenceResults:
        """Return the batches with every array padded to the largest shape among arrays of its name."""
        names = list(dict.fromkeys(name for batch_ in batches_list for name in batch_))
        padded: list[dict] = [{} for _ in batches_list]
        for name in names:
            present = [(index, batch_[name]) for index, batch_ in enumerate(batches_list) if name in batch_]
            arrays = [array for _, array in present]
            dtype = self._common_dtype(name, arrays)
            if len({array.ndim for array in arrays}) > 1:
                raise PyTritonRuntimeError(f"All arrays for {name!r} must have the same number of axes.")
            shape = tuple(np.max([array.shape[1:] for array in arrays], axis=0).tolist())
            fill = {"S": b"", "O": b"", "U": ""}.get(dtype.kind, self.pad_value)
            for index, array in present:
                widths = [(0, 0)] + [(0, target - size) for size, target in zip(array.shape[1:], shape, strict=True)]
                array = np.pad(array, widths, mode="constant", constant_values=fill)
                padded[index][name] = array.astype(dtype)
        return padded

    @staticmethod
    def _common_dtype(name: str, arrays: list[np.ndarray]) -> np.dtype:
        dtypes = [array.dtype for array in arrays]
        if dtypes[0].kind in "SU" and all(dtype.kind == dtypes[0].kind for dtype in dtypes):
            return max(dtypes, key=lambda dtype: dtype.itemsize)
        if any(dtype != dtypes[0] for dtype in dtypes):
            raise PyTritonRuntimeError(
                f"All arrays for {name!r} must have the same dtype to be padded together, got "
                f"{', '.join(sorted({str(dtype) for dtype in dtypes}))}."
            )
        return dtypes[0]


# --- decorators that need the model config ---------------------------------------------------------------


def _check_defaults(defaults: dict[str, np.ndarray], model_config: TritonModelConfig) -> None:
    specs = {spec.name: spec for spec in model_config.inputs}
    unknown = sorted(set(defaults) - set(specs))
    if unknown:
        raise PyTritonBadParameterError(
            f"@fill_optionals has defaults for {', '.join(unknown)}, which model {model_config.model_name!r} "
            f"has no input named so (inputs: {', '.join(specs)}). Use the input names given to Triton.bind."
        )
    wrong_dtypes = [
        f"{name}: dtype={value.dtype} expected_dtype={np.dtype(specs[name].dtype)}"
        for name, value in defaults.items()
        if not dtype_matches(specs[name].dtype, value.dtype)
    ]
    if wrong_dtypes:
        raise PyTritonBadParameterError(
            f"@fill_optionals defaults do not match the input dtypes ({'; '.join(wrong_dtypes)}); "
            "create them with the input's dtype, e.g. np.array([0.7], dtype=np.float32)."
        )
    wrong_shapes = [
        f"{name}: shape={value.shape} expected_shape={specs[name].shape}"
        for name, value in defaults.items()
        if not shape_matches(specs[name].shape, value.shape)
    ]
    if wrong_shapes:
        raise PyTritonBadParameterError(
            f"@fill_optionals defaults do not match the input shapes ({'; '.join(wrong_shapes)}); give "
            "each default the shape of one sample, without the batch axis."
        )


def fill_optionals(**defaults):
    """Fill inputs missing from a request with default values (numpy arrays without the batch axis).

    With batching, a default is repeated to the request's batch size. Place it at the top of the stack,
    so @group_by_keys / @batch see complete requests. Defaults must match the bound inputs' dtype and
    shape (checked on each call, against the model config).

    Example::

        @fill_optionals(temperature=np.array([0.7], dtype=np.float32))
        @batch
        def infer(prompts, temperature):
            ...
    """
    not_arrays = [f"{name}={value!r}" for name, value in defaults.items() if not isinstance(value, np.ndarray)]
    if not_arrays:
        raise PyTritonBadParameterError(
            f"@fill_optionals defaults must be numpy arrays, got {', '.join(not_arrays)}; "
            "wrap them, e.g. np.array([0.7], dtype=np.float32)."
        )

    @wrapt.decorator
    def _fill_optionals(wrapped, instance, args, kwargs):
        requests, _ = _requests_arg(args, kwargs, "@fill_optionals")
        model_config = get_model_config(wrapped, instance)
        _check_defaults(defaults, model_config)
        for index, request in enumerate(requests):
            missing = [name for name in defaults if name not in request]
            if not missing:
                continue
            size = _batch_size(request, index) if model_config.batching else None
            for name in missing:
                default = defaults[name]
                request[name] = default.copy() if size is None else np.repeat(default[np.newaxis], size, axis=0)
        return wrapped(*args, **kwargs)

    return _fill_optionals


def first_value(*keys: str, squeeze_single_values=True, strict: bool = True):
    """Replace the selected batched inputs with their first row (for per-batch parameters).

    Below @batch it works on the keyword inputs; without @batch, on each request. Single-element rows
    become scalars unless ``squeeze_single_values=False``. With ``strict`` (default) all rows must be equal,
    otherwise PyTritonRuntimeError. Only for models with batching.

    Example::

        @batch
        @first_value("temperature")
        def infer(prompts, temperature):  # temperature is a scalar np.float32
            ...
    """
    not_allowed = [key for key in keys if key in _SPECIAL_KEYS]
    if not_allowed:
        raise PyTritonBadParameterError(
            f"The keys {', '.join(not_allowed)} are not allowed as keys for @first_value wrapper. "
            f"The set of not allowed keys are {', '.join(_SPECIAL_KEYS)}."
        )
    not_names = [key for key in keys if not isinstance(key, str)]
    if not_names:
        raise PyTritonBadParameterError(f"@first_value keys must be input names (str), got {not_names!r}.")

    def _first_values(inputs: dict | InferenceRequest) -> None:
        for name in keys:
            if name not in inputs:
                continue
            values = inputs[name]
            if np.ndim(values) == 0:
                raise PyTritonValidationError(f"@first_value input {name!r} has no batch axis to take from.")
            if strict and not np.all(values == values[0]):
                raise PyTritonRuntimeError(
                    f"The values on the {name!r} input are not equal. To proceed, either disable strict mode "
                    "in @first_value wrapper or ensure that the values always are consistent. "
                    f"The current values of {name!r} are {values!r}."
                )
            first = values[0]
            if squeeze_single_values and not np.isscalar(first) and all(dim == 1 for dim in first.shape):
                first = np.squeeze(first)[()]
            inputs[name] = first

    @wrapt.decorator
    def _first_value(wrapped, instance, args, kwargs):
        if not get_model_config(wrapped, instance).batching:
            raise PyTritonRuntimeError(
                "The @first_value decorator can only be used with models that support batching; "
                "bind the model with ModelConfig(batching=True) or drop @first_value."
            )
        if any(isinstance(value, np.ndarray) for value in kwargs.values()):
            kwargs = dict(kwargs)
            _first_values(kwargs)
            return wrapped(*args, **kwargs)
        requests, _ = _requests_arg(args, kwargs, "@first_value")
        for request in requests:
            _first_values(request)
        return wrapped(*args, **kwargs)

    return _first_value


@wrapt.decorator
def pad_batch(wrapped, instance, args, kwargs):
    """Pad the batch, repeating its last row, up to the nearest preferred batch size or max_batch_size.

    Use it below @batch, for models that run best (or only) at fixed batch sizes; the padded rows'
    outputs are dropped by @batch.

    Example::

        @batch
        @pad_batch
        def infer(image):
            return {"label": compiled_model(image)}
    """
    inputs = _array_inputs(kwargs, "@pad_batch", args)
    config = get_model_config(wrapped, instance)
    if not config.batching:
        raise PyTritonValidationError(
            "@pad_batch needs a model with batching; bind it with ModelConfig(batching=True) or drop @pad_batch."
        )
    size = _batch_size(inputs, "the batch")
    preferred = (config.batcher.preferred_batch_size or []) if config.batcher is not None else []
    sizes = sorted({*preferred, config.max_batch_size})
    if size > sizes[-1]:
        raise PyTritonValidationError(
            f"@pad_batch got a batch of {size} rows, more than the largest allowed size {sizes[-1]}; raise "
            "max_batch_size in the model's ModelConfig."
        )
    target = sizes[bisect.bisect_left(sizes, size)]
    if target > size:
        kwargs = dict(kwargs)
        for name, value in inputs.items():
            kwargs[name] = np.concatenate([value, np.repeat(value[-1:], target - size, axis=0)])
    return wrapped(*args, **kwargs)


@wrapt.decorator
def triton_context(wrapped, instance, args, kwargs):
    """Pass the TritonContext as the ``triton_context`` keyword argument.

    Its ``model_configs`` maps the bound callable to its model config.

    Example::

        @triton_context
        @batch
        def infer(triton_context, **inputs):
            config = triton_context.model_configs[infer]
            ...
    """
    kwargs[TRITON_CONTEXT_FIELD_NAME] = get_triton_context(wrapped, instance)
    return wrapped(*args, **kwargs)
