"""Grouping: one call per group of requests with the same inputs (@group_by_keys), or per group of rows with
equal values (@group_by_values), and padding the groups' outputs to one shape (ConstantPadder)."""

from __future__ import annotations

import functools
import itertools
import struct
from collections.abc import Callable
from typing import Any

import numpy as np
import wrapt

from tritonrt.decorators._common import (
    InferenceResult,
    InferenceResults,
    array_inputs,
    combine_results,
    inputs_batch_size,
    requests_argument,
)
from tritonrt.decorators.outputs import convert_output
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError, PyTritonValidationError

__all__ = ["ConstantPadder", "group_by_keys", "group_by_values"]

_LENGTH = struct.Struct("<I")


def _scatter_responses(groups: list[list[int]], count: int, results: list[Any]) -> list[InferenceResult]:
    responses: list[Any] = [None] * count
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
def group_by_keys(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Call the callable once per group of requests that have the same set of inputs.

    Place it above @batch when some inputs are optional: @batch needs every request to have the same
    inputs. Responses come back in the order of the requests.

    Example::

        @group_by_keys
        @batch
        def infer(text, temperature=None):
            ...
    """
    requests, rest = requests_argument(args, kwargs, "@group_by_keys")
    groups: dict[tuple[str, ...], list[int]] = {}
    for index, request in enumerate(requests):
        groups.setdefault(tuple(sorted(request.keys())), []).append(index)
    if len(groups) == 1:
        return wrapped(*args, **kwargs)
    indices = list(groups.values())
    results = [wrapped([requests[i] for i in group], *rest, **kwargs) for group in indices]
    return combine_results(results, functools.partial(_scatter_responses, indices, len(requests)))


def _order_key(column: np.ndarray, row: int) -> Any:
    """What orders and groups row ``row`` of a key input, as PyTriton 0.7 orders them.

    A one-dimensional input gives scalars, compared by value. Rows with more axes compare by their bytes:
    numbers by their memory (so not numerically: 2 before -3), BYTES rows as Triton serializes them (a
    length before each item, so shorter items first).
    """
    value = column[row]
    if not isinstance(value, np.ndarray):
        return value
    if value.dtype == object or value.dtype.type == np.bytes_:
        if value.size == 0:
            return b""
        items = [item if isinstance(item, bytes) else str(item).encode("utf-8") for item in value.ravel().tolist()]
        body = b"".join(_LENGTH.pack(len(item)) + item for item in items)
        return _LENGTH.pack(len(body)) + body
    return value.tobytes()


def _groups_by_value(inputs: dict[str, np.ndarray], keys: tuple[str, ...], batch_size: int) -> list[list[int]]:
    """Row indices grouped by equal values on ``keys``; groups in the order of their values (PyTriton's)."""
    row_keys = [tuple(_order_key(inputs[key], row) for key in keys) for row in range(batch_size)]
    ordered = sorted(range(batch_size), key=row_keys.__getitem__)
    return [list(rows) for _, rows in itertools.groupby(ordered, key=row_keys.__getitem__)]


def _merge_rows(groups: list[np.ndarray], batch_size: int, results: list[dict[str, Any]]) -> dict[str, np.ndarray]:
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


def group_by_values(
    *keys: str, pad_fn: Callable[[InferenceResults], InferenceResults] | None = None
) -> Callable[[Callable[..., Any]], Any]:
    """Split a batch into sub-batches with equal values on ``keys``; call the callable once per sub-batch.

    Use it below @batch, for inputs that act as parameters (e.g. a temperature per row). The calls come in
    the order of the key values, as in PyTriton 0.7 (see ``_order_key``). The sub-batches' outputs are put
    back in row order; ``pad_fn`` (e.g. ``ConstantPadder(0)``) first brings outputs of
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
    def _group_by_values(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        inputs = array_inputs(kwargs, "@group_by_values", args)
        missing = [key for key in keys if key not in inputs]
        if missing:
            raise PyTritonValidationError(
                f"@group_by_values cannot group by {', '.join(map(repr, missing))}: no such batched input "
                f"(inputs: {', '.join(inputs)}). Give defaults for optional inputs with @fill_optionals."
            )
        batch_size = inputs_batch_size(inputs, "the batch")
        row_groups = _groups_by_value(inputs, keys, batch_size)
        if len(row_groups) == 1:
            return wrapped(*args, **kwargs)
        groups = [np.array(rows) for rows in row_groups]
        others = {k: v for k, v in kwargs.items() if k not in inputs}
        results = [wrapped(**others, **{name: value[rows] for name, value in inputs.items()}) for rows in groups]

        def merge(group_results: list[Any]) -> dict[str, np.ndarray]:
            outputs = [convert_output(result, wrapped, instance) for result in group_results]
            if pad_fn is not None:
                outputs = list(pad_fn(outputs))
            return _merge_rows(groups, batch_size, outputs)

        return combine_results(results, merge)

    return _group_by_values


class ConstantPadder:
    """Pad arrays of the same name to one shape (beyond the batch axis) with a constant value.

    Bytes and string arrays are padded with empty strings and get the longest item size.

    Example::

        padded = ConstantPadder(0)([{"y": np.ones((1, 2))}, {"y": np.ones((2, 3))}])
        # padded[0]["y"].shape == (1, 3), padded[1]["y"].shape == (2, 3)
    """

    def __init__(self, pad_value: Any = 0) -> None:
        self.pad_value = pad_value

    def __call__(self, batches_list: InferenceResults) -> InferenceResults:
        """Return the batches with every array padded to the largest shape among arrays of its name."""
        names = list(dict.fromkeys(name for batch_ in batches_list for name in batch_))
        padded: list[InferenceResult] = [{} for _ in batches_list]
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
