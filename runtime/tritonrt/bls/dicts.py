"""Calls with numpy dicts, in PyTriton's style: :func:`infer`, :func:`infer_async`, :func:`infer_stream`. See
:mod:`tritonrt.bls`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from tritonrt.bls.backend_api import InferenceRequest, InferenceResponse, ResponseIterator, Tensor
from tritonrt.proxy.calls import TritonModelException

__all__ = ["infer", "infer_async", "infer_stream"]


def _request(model_name: str, inputs: Mapping[str, Any] | None, named: dict[str, Any], outputs: Sequence[str] | None,
             timeout_s: float | None, parameters: Mapping[str, Any] | None) -> InferenceRequest:  # fmt: skip
    tensors = dict(inputs or {})
    tensors.update(named)
    timeout = 0 if timeout_s is None else max(1, round(timeout_s * 1e6))
    return InferenceRequest(model_name, list(outputs or ()), [Tensor(name, array) for name, array in tensors.items()],
                            timeout=timeout, parameters=parameters)  # fmt: skip


def _outputs(response: InferenceResponse) -> dict[str, np.ndarray]:
    error = response.error()
    if error is not None:
        raise TritonModelException(error.message())
    return {tensor.name(): tensor.as_numpy() for tensor in response.output_tensors()}


def infer(
    model_name: str,
    inputs: Mapping[str, Any] | None = None,
    /,
    *,
    outputs: Sequence[str] | None = None,
    timeout_s: float | None = None,
    parameters: Mapping[str, Any] | None = None,
    **named: Any,
) -> dict[str, np.ndarray]:
    """Call ``model_name`` with ``inputs`` (and/or inputs by keyword) and return its outputs by name (``outputs``:
    only these). TritonModelException with the callee's message when the call fails."""
    return _outputs(_request(model_name, inputs, named, outputs, timeout_s, parameters).exec())


async def infer_async(
    model_name: str,
    inputs: Mapping[str, Any] | None = None,
    /,
    *,
    outputs: Sequence[str] | None = None,
    timeout_s: float | None = None,
    parameters: Mapping[str, Any] | None = None,
    **named: Any,
) -> dict[str, np.ndarray]:
    """:func:`infer`, awaited (in an ``async`` callable)."""
    request = _request(model_name, inputs, named, outputs, timeout_s, parameters)
    return _outputs(await request.async_exec())


def infer_stream(
    model_name: str,
    inputs: Mapping[str, Any] | None = None,
    /,
    *,
    outputs: Sequence[str] | None = None,
    timeout_s: float | None = None,
    parameters: Mapping[str, Any] | None = None,
    **named: Any,
) -> Iterator[dict[str, np.ndarray]]:
    """Call a decoupled ``model_name``: its responses' outputs as they come (closing the iterator early cancels
    the call). TritonModelException when a response is an error."""
    responses: ResponseIterator = _request(model_name, inputs, named, outputs, timeout_s, parameters).exec(True)
    finished = False
    try:
        for response in responses:
            result = _outputs(response)
            if result:
                yield result
        finished = True
    finally:
        if not finished:
            responses.cancel()
