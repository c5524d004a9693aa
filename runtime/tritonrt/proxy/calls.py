"""Calls of other models of the server from an inference callable (Business Logic Scripting, BLS), on the worker's
side: the scope in which a callable may call, the answers of the calls in flight on one connection, and the
arrays of a call's responses.

The worker runs the callable inside a *scope* (a context variable set around the call, see :func:`enter`): the
connection of the model instance and the batch being executed. A call made in that scope goes over the same
connection as the batch (an ``INFER`` of the batch's ``seq``, see ``runtime/docs/wire-protocol.md``); the backend
runs it on the server and answers with ``INFER_RESPONSE`` messages. Whichever thread waits for an answer reads
the connection (one at a time, the others wait for it) and files what it reads by call id in the connection's
:class:`CallTable`. asyncio tasks inherit the scope; threads that the callable starts do not: run their function
in the request's context (``executor.submit(contextvars.copy_context().run, function)``).
"""

from __future__ import annotations

import collections
import contextvars
import struct
from collections.abc import Mapping, Sequence
from functools import partial
from typing import NamedTuple, Protocol, TypeAlias

import numpy as np

from tritonrt.proxy import wire
from tritonrt.proxy.outgoing import Outgoing
from tritonrt.proxy.regions import PeerRegion
from tritonrt.proxy.tensors import array_from
from tritonrt.proxy.wire import (
    CALL_DECOUPLED,
    CALL_LAYOUT,
    CORRELATION_NONE,
    ERROR_CANCELLED,
    LOCATION_INLINE,
    LOCATION_SENDER_REGION,
    MAX_DATA_BYTES,
    REQUEST_LAYOUT,
    STATUS_ERROR,
    STATUS_OUTPUTS,
    CallResponses,
    ControlResult,
    RequestMeta,
    TensorMeta,
    WireError,
)

__all__ = [
    "OUTSIDE",
    "Answer",
    "CallAnswer",
    "CallRequest",
    "CallSite",
    "CallTable",
    "CalleeResponse",
    "Closed",
    "Files",
    "Scope",
    "TritonModelException",
    "callee_responses",
    "current",
    "encode_call",
    "enter",
    "file_spans",
    "leave",
]

OUTSIDE = (
    "BLS works only while a request is being executed: call other models from inside the inference callable "
    "(not at import, in setup code or after the callable answered). From a thread that the callable starts, run "
    "the thread's function in the callable's context: executor.submit(contextvars.copy_context().run, function)"
)


class TritonModelException(Exception):
    """A call of another model failed where the Python backend raises (``pb_utils.TritonModelException``)."""


class CalleeResponse(NamedTuple):
    """One response of a callee: its outputs, or its error (``message`` is not None)."""

    outputs: dict[str, np.ndarray]
    code: int = 0
    message: str | None = None


class CallAnswer(NamedTuple):
    """An INFER_RESPONSE as the caller sees it: the responses it carried (0 or 1), and whether it was the last."""

    responses: list[CalleeResponse]
    final: bool


class Closed(NamedTuple):
    """What a call still waiting gets when it cannot be answered any more (the batch was answered, the connection
    ended): why, and Triton's error code."""

    message: str
    code: int = ERROR_CANCELLED


Answer: TypeAlias = "CallAnswer | ControlResult | Closed"
TIMED_OUT = Closed(
    "it did not answer within the call's timeout: the call was cancelled (a call of the caller's own model waits for "
    "a free instance of it: give the model more instances)",
    wire.ERROR_UNAVAILABLE,
)
_OUTSIDE = Closed(OUTSIDE)


class CallSite(Protocol):
    """Where a scope's calls go: the instance's connection (:class:`tritonrt.proxy.connection.WorkerConnection`)."""

    def call(self, seq: int, call: CallRequest, inputs: Mapping[str, np.ndarray]) -> int: ...

    def next_answer(self, seq: int, call_id: int, deadline: float | None = None) -> Answer: ...

    def cancel_call(self, seq: int, call_id: int) -> None: ...

    def control(self, seq: int, op: int, model_name: str, version: int, config: str, files: Files) -> Answer: ...


Files: TypeAlias = "Sequence[tuple[str, bytes]]"


class CallRequest(NamedTuple):
    """What an INFER asks, besides its inputs (see the wire's Call and Request records)."""

    model_name: str
    requested_outputs: list[str] | None  # None: every output
    request_id: str = ""
    correlation_id: int | str | None = None
    model_version: int = -1
    flags: int = 0
    timeout_us: int = 0
    parameters: Mapping[str, str | int | bool | float] = {}  # (shared, never mutated)
    decoupled: bool = False
    trace_context: str = ""


class Scope(NamedTuple):
    """The batch that the current callable executes: its connection, its seq, and the model's name."""

    site: CallSite
    seq: int
    model_name: str


_scope = partial(tuple.__new__, Scope)  # (the C constructor: one per batch)
_CURRENT: contextvars.ContextVar[Scope | None] = contextvars.ContextVar("tritonrt_call_scope", default=None)


def enter(site: CallSite, seq: int, model_name: str) -> contextvars.Token[Scope | None]:
    """Open the scope of batch ``seq`` for the code that runs the callable (undo with :func:`leave`)."""
    return _CURRENT.set(_scope((site, seq, model_name)))


def leave(token: contextvars.Token[Scope | None]) -> None:
    _CURRENT.reset(token)


def current() -> Scope:
    """The scope of the running callable; TritonModelException (saying where calls work) outside one."""
    scope = _CURRENT.get()
    if scope is None:
        raise TritonModelException(OUTSIDE)
    return scope


class CallTable:
    """The calls in flight on one connection and their answers not yet taken, by call id. Not locked itself: the
    connection guards it with its lock."""

    def __init__(self) -> None:
        self._last = 0
        self._answers: dict[int, collections.deque[Answer]] = {}
        self._closed = _OUTSIDE

    def open(self) -> int:
        """A new call's id (unique on the connection, never 0)."""
        self._last += 1
        self._answers[self._last] = collections.deque()
        return self._last

    def __contains__(self, call_id: int) -> bool:
        return call_id in self._answers

    def __len__(self) -> int:
        return len(self._answers)

    def deliver(self, call_id: int, answer: Answer) -> None:
        """File ``answer`` for its call (dropped when the call has ended: the backend may still be answering)."""
        waiting = self._answers.get(call_id)
        if waiting is not None:
            waiting.append(answer)

    def take(self, call_id: int) -> Answer | None:
        """The call's next answer (the call ends with its last), None while there is none; a call that ended
        without one gets the reason (:class:`Closed`)."""
        waiting = self._answers.get(call_id)
        if waiting is None:
            return self._closed
        if not waiting:
            return None
        answer = waiting.popleft()
        if type(answer) is not CallAnswer or answer.final:
            del self._answers[call_id]
        return answer

    def abandon(self, call_id: int) -> None:
        """End a call whose caller stopped waiting: its later answers are dropped."""
        self._answers.pop(call_id, None)

    def close(self, why: Closed) -> None:
        """End every call: their waiters get ``why``; later answers are dropped."""
        self._answers.clear()
        self._closed = why

    def reopen(self) -> None:
        """A new batch: calls outside it get the message of a call made outside a request."""
        self._closed = _OUTSIDE


def callee_responses(
    answer: CallResponses, buffer: bytearray, data_start: int, peer: PeerRegion | None
) -> tuple[list[CalleeResponse], bool]:
    """The responses of an INFER_RESPONSE with their outputs as arrays: copies of the message's bytes (inline,
    small: a view would make the link read its next message into a new buffer while the caller keeps it) or
    views of the backend's region; and whether any lies in that region."""
    responses: list[CalleeResponse] = []
    in_region = False
    for response in answer.responses:
        if response.status == STATUS_ERROR:
            responses.append(CalleeResponse({}, response.error_code, response.message))
            continue
        if response.status != STATUS_OUTPUTS:
            continue  # a stream's step without a response
        outputs: dict[str, np.ndarray] = {}
        for name, dtype, location, offset, byte_length, shape in response.outputs:
            if location == LOCATION_INLINE:
                array = array_from(buffer, data_start + offset, dtype, shape, byte_length)
                outputs[name] = array.copy() if array.base is not None else array
                continue
            if location == LOCATION_SENDER_REGION:
                if peer is None or offset + byte_length > peer.size:
                    raise WireError(f"output {name!r} of a call lies outside the backend's region", breaks_stream=True)
                in_region = True
            else:
                raise WireError(f"output {name!r} of a call lies in the worker's own region", breaks_stream=True)
            outputs[name] = array_from(peer.base, offset, dtype, shape, byte_length)
        responses.append(CalleeResponse(outputs))
    return responses, in_region


_U32 = struct.Struct("<I")
_EMPTY = _U32.pack(0)
# A call's metadata between its call record and its tensors when it has no request id, correlation id or
# parameters (the common case), by (callee, requested outputs, number of inputs, request flags).
_MIDDLES: dict[tuple[str, tuple[str, ...] | None, int, int], bytes] = {}


def encode_call(call_id: int, call: CallRequest, inputs: list[Outgoing]) -> bytearray:
    """The metadata of an INFER: the call, and its request with ``inputs`` (placed already). Byte for byte
    ``wire.encode_infer``'s; the common case packs only the call record and the tensors, the rest is kept per
    callee."""
    if call.request_id or call.correlation_id is not None or call.parameters:
        return _encode_call_general(call_id, call, inputs)
    requested = call.requested_outputs
    key = (call.model_name, tuple(requested) if requested is not None else None, len(inputs), call.flags)
    middle = _MIDDLES.get(key)
    if middle is None:
        if len(_MIDDLES) >= 256:  # (bounded: a callable that calls many callees differently)
            _MIDDLES.clear()
        name = call.model_name.encode()
        head = bytearray(_U32.pack(len(name)) + name)
        names = requested or []
        head += REQUEST_LAYOUT.pack(len(inputs), len(names), 0, call.flags, CORRELATION_NONE, 0)
        head += _EMPTY  # (the request id)
        for output in names:
            encoded = output.encode()
            head += _U32.pack(len(encoded))
            head += encoded
        middle = _MIDDLES[key] = bytes(head)
    out = bytearray(CALL_LAYOUT.pack(call_id, CALL_DECOUPLED if call.decoupled else 0, call.model_version,
                                     call.timeout_us))  # fmt: skip
    out += middle
    pack_tensor = wire.pack_tensor
    for t in inputs:
        pack_tensor(out, t.name, t.dtype, t.location, t.offset, t.byte_length, t.shape)
    trace = call.trace_context
    if trace:
        encoded = trace.encode()
        out += _U32.pack(len(encoded))
        out += encoded
    else:
        out += _EMPTY
    return out


def _encode_call_general(call_id: int, call: CallRequest, inputs: list[Outgoing]) -> bytearray:
    tensors = [TensorMeta(t.name.decode(), t.dtype, t.location, t.offset, t.byte_length, t.shape) for t in inputs]
    request = RequestMeta(call.request_id, call.flags, call.correlation_id, dict(call.parameters),
                          call.requested_outputs, tensors, call.trace_context)  # fmt: skip
    flags = CALL_DECOUPLED if call.decoupled else 0
    return wire.encode_infer(wire.Call(call_id, flags, call.model_version, call.timeout_us, call.model_name, request))


def file_spans(model_name: str, files: Files) -> tuple[list[tuple[str, int, int]], int]:
    """Where a CONTROL's files lie in its data section, back to back: (path, offset, length) each, and the end."""
    spans, end = [], 0
    for path, content in files:
        spans.append((path, end, len(content)))
        end += len(content)
    if end > MAX_DATA_BYTES:
        raise TritonModelException(
            f"the files to load model {model_name!r} hold {end} bytes, more than the {MAX_DATA_BYTES} bytes one "
            "message carries: put the model in the server's model repository and load it by name"
        )
    return spans, end
