"""The Python backend's BLS names (``triton_python_backend_utils``): InferenceRequest, InferenceResponse, Tensor,
TritonError, the response iterator of a decoupled callee. See :mod:`tritonrt.bls`."""

from __future__ import annotations

import asyncio
import collections
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from tritonrt import metrics
from tritonrt.proxy import wire
from tritonrt.proxy.calls import (
    CallAnswer,
    CalleeResponse,
    CallRequest,
    Scope,
    TritonModelException,
    current,
)
from tritonrt.proxy.telemetry import get_telemetry_tracer
from tritonrt.proxy.tensors import wire_dtype

__all__ = [
    "TRITONSERVER_MEMORY_CPU",
    "TRITONSERVER_MEMORY_CPU_PINNED",
    "TRITONSERVER_MEMORY_GPU",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "InferenceRequest",
    "InferenceResponse",
    "PreferredMemory",
    "ResponseIterator",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "get_input_tensor_by_name",
    "get_output_tensor_by_name",
    "naming",
]

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_MEMORY_CPU, TRITONSERVER_MEMORY_CPU_PINNED, TRITONSERVER_MEMORY_GPU = 0, 1, 2

# Counted by the backend as each call ends (its last response), with these names, descriptions and buckets; the
# worker counts here only the calls that failed before they reached the backend.
_CALLS = metrics.Counter("tritonrt_bls_calls_total", "Calls of other models (BLS)", ("model", "callee"), _own=True)
_ERRORS = metrics.Counter(
    "tritonrt_bls_errors_total", "Calls of other models (BLS) that ended in an error", ("model", "callee"), _own=True
)
_SECONDS = metrics.Histogram(
    "tritonrt_bls_seconds", "Duration of calls of other models (BLS), to their last response", ("model", "callee"),
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0), _own=True,
)  # fmt: skip
_children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}


class TritonError:
    """An error of a response: its message and Triton's error code (the Python backend's ``TritonError``)."""

    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG = 0, 1, 2, 3
    UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = 4, 5, 6, 7

    def __init__(self, message: str, code: int = INTERNAL):
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, code={self._code})"


class PreferredMemory:
    """Where a call's outputs should land (accepted for the Python backend's API: tritonrt's are in CPU memory)."""

    def __init__(self, preferred_memory_type: int = TRITONSERVER_MEMORY_CPU, preferred_device_id: int = 0):
        self.preferred_memory_type, self.preferred_device_id = preferred_memory_type, preferred_device_id


class Tensor:
    """A named numpy array: a call's input, or a response's output."""

    def __init__(self, name: str, tensor: Any):
        if not isinstance(name, str) or not name or "\0" in name:
            raise TritonModelException(f"a tensor's name must be a non-empty string without NUL, not {name!r}")
        self._name = name
        self._array: np.ndarray = tensor if isinstance(tensor, np.ndarray) else np.asarray(tensor)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def is_cpu(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, dtype={self._array.dtype}, shape={self._array.shape})"


class InferenceResponse:
    """A callee's response: its outputs, or its error."""

    def __init__(self, output_tensors: Sequence[Tensor] = (), error: TritonError | None = None):
        self._outputs, self._error = list(output_tensors), error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def __repr__(self) -> str:
        inside = f"error={self._error!r}" if self._error is not None else f"outputs={self._outputs!r}"
        return f"InferenceResponse({inside})"


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    """The output ``name`` of ``response``; None if it has none."""
    return next((tensor for tensor in response.output_tensors() if tensor.name() == name), None)


def get_input_tensor_by_name(request: Any, name: str) -> Tensor | None:
    """The input ``name`` of an :class:`InferenceRequest`, or of a request a callable received; None if absent."""
    if isinstance(request, InferenceRequest):
        return next((tensor for tensor in request.inputs() if tensor.name() == name), None)
    array = request.get(name) if isinstance(request, Mapping) else None
    return None if array is None else Tensor(name, array)


class InferenceRequest:
    """A request to another model of the server, sent by :meth:`exec` or :meth:`async_exec`.

    ``timeout`` in microseconds (0: none; Triton ends the call with an error when it passes); ``correlation_id``
    an int or a str (0 or "": none) with ``flags`` (``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START`` / ``_END``) for
    a stateful callee; ``parameters`` a dict (or its JSON) of str, int, bool or float values; ``model_version``
    -1 for the server's choice. An empty ``requested_output_names`` asks for every output.
    """

    def __init__(
        self,
        model_name: str,
        requested_output_names: Sequence[str],
        inputs: Sequence[Tensor],
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: PreferredMemory | None = None,
        trace: Any = None,
        parameters: Mapping[str, Any] | str | None = None,
    ):
        if not isinstance(model_name, str) or not model_name or "\0" in model_name:
            raise TritonModelException(f"a model's name must be a non-empty string without NUL, not {model_name!r}")
        self._model_name = model_name
        self._outputs = [str(name) for name in requested_output_names]
        self._inputs = list(inputs)
        for tensor in self._inputs:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"the inputs of a call of {model_name!r} must be bls.Tensor objects, not {type(tensor).__name__}"
                )
        self._request_id, self._flags, self._preferred_memory = str(request_id), int(flags), preferred_memory
        if isinstance(correlation_id, bool) or not isinstance(correlation_id, (int, str)):
            raise TritonModelException(f"correlation_id must be an int or a str, not {correlation_id!r}")
        if isinstance(correlation_id, int) and not 0 <= correlation_id < 1 << 64:
            raise TritonModelException(f"correlation_id {correlation_id} is not an unsigned 64-bit integer")
        self._correlation_id = correlation_id
        if model_version != -1 and model_version < 1:
            raise TritonModelException(f"model_version {model_version}: use -1 (the server's choice) or 1 or more")
        self._model_version = int(model_version)
        if not 0 <= timeout < 1 << 64:
            raise TritonModelException(f"timeout {timeout}: microseconds, 0 for none")
        self._timeout = int(timeout)
        self._parameters = _parameters(parameters, model_name)

    def model_name(self) -> str:
        return self._model_name

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def requested_output_names(self) -> list[str]:
        return self._outputs

    def request_id(self) -> str:
        return self._request_id

    def correlation_id(self) -> int | str:
        return self._correlation_id

    def flags(self) -> int:
        return self._flags

    def timeout(self) -> int:
        return self._timeout

    def model_version(self) -> int:
        return self._model_version

    def parameters(self) -> str:
        """The parameters as JSON (as the Python backend returns them)."""
        return json.dumps(self._parameters)

    def exec(self, decoupled: bool = False) -> Any:
        """Send the request and wait: its response (an error response when the call failed), or with
        ``decoupled`` an iterator of the callee's responses (:class:`ResponseIterator`)."""
        call = _Call(current(), self, decoupled)
        if decoupled:
            return ResponseIterator(call)
        answer = call.next_answer()
        if type(answer) is CallAnswer and answer.final and answer.responses and call.span is None:
            return call.response(answer.responses[0])  # (the common case: one final answer, no span to end)
        return call.single(_then(answer, call))

    async def async_exec(self, decoupled: bool = False) -> Any:
        """As :meth:`exec`, awaited: other tasks run meanwhile (``asyncio.gather`` several calls)."""
        call = _Call(current(), self, decoupled)
        if decoupled:
            return ResponseIterator(call)
        loop, answers = asyncio.get_running_loop(), []
        while True:  # (each wait in a thread of the loop's executor: the loop runs other tasks meanwhile)
            answer = await loop.run_in_executor(None, call.next_answer)
            answers.append(answer)
            if type(answer) is not CallAnswer or answer.final:
                return call.single(answers)


class ResponseIterator:
    """The responses of a decoupled callee, in order (sync or async iteration); the last may have no outputs.
    :meth:`cancel` asks the callee to stop; the responses already on their way still arrive."""

    def __init__(self, call: _Call):
        self._call = call
        self._ready: collections.deque[InferenceResponse] = collections.deque()
        self._done = False

    def __iter__(self) -> ResponseIterator:
        return self

    def __next__(self) -> InferenceResponse:
        while not self._ready:
            if self._done:
                raise StopIteration
            call = self._call
            self._take(call.next_answer())
        return self._ready.popleft()

    def __aiter__(self) -> ResponseIterator:
        return self

    async def __anext__(self) -> InferenceResponse:
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            call = self._call
            loop = asyncio.get_running_loop()
            self._take(await loop.run_in_executor(None, call.next_answer))
        return self._ready.popleft()

    def _take(self, answer: Any) -> None:
        call = self._call
        if type(answer) is not CallAnswer:
            self._ready.append(call.response(CalleeResponse({}, answer.code, answer.message)))
            self._done = True
        else:
            self._ready.extend(call.response(response) for response in answer.responses)
            if answer.final:
                if not answer.responses:
                    self._ready.append(InferenceResponse())
                self._done = True
        if self._done:
            call.end()

    def cancel(self) -> None:
        """Ask the callee to stop its stream (Triton cancels the call); iterate on for what still arrives."""
        if not self._done:
            self._call.scope.site.cancel_call(self._call.scope.seq, self._call.id)


def _then(first: Any, call: _Call) -> Iterator[Any]:
    """``first``, then the call's further answers as they come (the caller stops at the last)."""
    yield first
    while True:
        yield call.next_answer()


class _Call:
    """One call in flight: sent when made; its span ends with its last response (the backend counts its metrics,
    see ``_CALLS``)."""

    __slots__ = ("scope", "callee", "span", "error", "deadline", "id")
    span: Any  # (an OpenTelemetry span while the call is traced and in flight)

    def __init__(self, scope: Scope, request: InferenceRequest, decoupled: bool):
        callee = request._model_name
        self.scope, self.callee = scope, callee
        inputs: dict[str, np.ndarray] = {}
        for tensor in request._inputs:
            name, array = tensor._name, tensor._array
            inputs[name] = array if array.dtype in _PLAIN else _checked(name, array, callee)
        self.span, trace_context = _start_span(callee) if get_telemetry_tracer() is not None else (None, "")
        self.error = False
        # The worker stops waiting at the timeout even where Triton does not enforce it (a queue without
        # allow_timeout_override, a callee that waits for the caller's own instance).
        timeout = request._timeout
        self.deadline = time.monotonic() + timeout / 1e6 if timeout else None
        call = _call_request((callee, request._outputs or None, request._request_id, request._correlation_id or None,
                              request._model_version, request._flags, timeout, request._parameters, decoupled,
                              trace_context))  # fmt: skip
        start = time.perf_counter()
        try:
            self.id = scope.site.call(scope.seq, call, inputs)
        except BaseException as error:  # (not sent: the backend never sees it, so it is counted here)
            calls, errors, seconds = _metrics(scope.model_name, callee)
            calls.inc()
            errors.inc()
            seconds.observe(time.perf_counter() - start)
            self.error = True
            self.end(str(error))
            raise

    def response(self, response: CalleeResponse) -> InferenceResponse:
        if response.message is None:
            return InferenceResponse([Tensor(name, array) for name, array in response.outputs.items()])
        self.error = True
        return InferenceResponse(error=TritonError(naming(self.callee, response.message), response.code))

    def next_answer(self) -> Any:
        """The call's next answer (a Closed one, TIMED_OUT, once its timeout passed)."""
        return self.scope.site.next_answer(self.scope.seq, self.id, self.deadline)

    def single(self, answers: Iterable[Any]) -> InferenceResponse:
        """The one response of a call that is not decoupled (an error when it sent none)."""
        result: InferenceResponse | None = None
        for answer in answers:
            if type(answer) is not CallAnswer:
                result = self.response(CalleeResponse({}, answer.code, answer.message))
                break
            if result is None and answer.responses:
                result = self.response(answer.responses[0])
            if answer.final:
                break
        if result is None:
            result = self.response(CalleeResponse({}, wire.ERROR_INTERNAL, "the model sent no response"))
        error = result.error()
        self.end(None if error is None else error.message())
        return result

    def end(self, error: str | None = None) -> None:
        """End the call's span (the backend counted the call when its last response arrived)."""
        span = self.span
        if span is not None:
            from opentelemetry.trace import Status, StatusCode

            span.set_status(Status(StatusCode.ERROR, error) if self.error else Status(StatusCode.OK))
            span.end()
            self.span = None


def naming(model_name: str, message: str) -> str:
    """``message``, prefixed with the model's name unless it names it already (quoted, as tritonrt and Triton do)."""
    if f"'{model_name}'" in message or f'"{model_name}"' in message:
        return message
    return f"model {model_name!r}: {message}"


def _metrics(model: str, callee: str) -> tuple[Any, Any, Any]:
    children = _children.get((model, callee))
    if children is None:
        children = _children[model, callee] = (
            _CALLS.labels(model, callee), _ERRORS.labels(model, callee), _SECONDS.labels(model, callee)
        )  # fmt: skip
    return children


def _start_span(callee: str) -> tuple[Any, str]:
    """A span for the call under the current one (the request's, or the callable's own) and its W3C headers as
    the call's trace context; (None, "") when not traced."""
    tracer = get_telemetry_tracer()
    if tracer is None:
        return None, ""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    if not trace.get_current_span().get_span_context().is_valid:
        return None, ""
    span = tracer.start_span("tritonrt_bls", attributes={"triton.model_name": callee})
    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, context=trace.set_span_in_context(span))
    return span, json.dumps(carrier, separators=(",", ":"))


_call_request = partial(tuple.__new__, CallRequest)  # (the C constructor: one per call)
# The dtypes that travel as they are, with no check (the others: _checked).
_PLAIN = frozenset(np.dtype(code) for code in "?bBhHiIlLqQefd")


def _checked(name: str, array: np.ndarray, callee: str) -> np.ndarray:
    """An input as it can travel; TritonModelException naming it when it cannot."""
    try:
        code = wire_dtype(array.dtype)
    except ValueError as error:
        raise TritonModelException(f"input {name!r} of the call of model {callee!r}: {error}") from None
    if code == wire.DTYPE_BYTES and array.dtype.kind == "O":
        for item in array.reshape(-1).tolist():
            if not isinstance(item, (bytes, str)):
                raise TritonModelException(
                    f"input {name!r} of the call of model {callee!r}: an object array must hold bytes or str, "
                    f"not {type(item).__name__}"
                )
    return array


def _parameters(parameters: Mapping[str, Any] | str | None, callee: str) -> dict[str, str | int | bool | float]:
    if parameters is None:
        return {}
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters) if parameters.strip() else {}
        except ValueError as error:
            raise TritonModelException(f"the parameters of a call of {callee!r} are not JSON: {error}") from None
    if not isinstance(parameters, Mapping):
        raise TritonModelException(f"the parameters of a call of {callee!r} must be a dict, not {parameters!r}")
    checked: dict[str, str | int | bool | float] = {}
    for key, value in parameters.items():
        if not isinstance(key, str) or not key or "\0" in key:
            raise TritonModelException(f"parameter key {key!r} of a call of {callee!r}: a non-empty str")
        if not isinstance(value, (str, int, bool, float)) or (type(value) is int and not -(1 << 63) <= value < 1 << 63):
            raise TritonModelException(
                f"parameter {key!r} of a call of {callee!r}: a str, bool, float or 64-bit int, not {value!r}"
            )
        checked[key] = value
    return checked
