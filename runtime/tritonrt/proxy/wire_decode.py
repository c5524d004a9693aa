"""Decoding the wire protocol's metadata (see :mod:`tritonrt.proxy.wire`), trusting nothing.

Every decoder takes the message's buffer, where its metadata starts and its :class:`Header`, checks every count,
length, type, name and inline offset, and raises :class:`WireError` (never another exception) for bad input.
Regional offsets are checked where the region is read.
"""

from __future__ import annotations

import struct
from functools import partial
from math import prod
from typing import Any

from tritonrt.proxy.wire import (
    CALL_DECOUPLED,
    CALL_LAYOUT,
    CONTROL_LAYOUT,
    CONTROL_LOAD,
    CONTROL_RESULT_LAYOUT,
    CONTROL_UNLOAD_DEPENDENTS,
    CORRELATION_NONE,
    CORRELATION_STRING,
    CORRELATION_UINT,
    DIMS_LAYOUTS,
    DTYPE_BYTES,
    ELEMENT_SIZES,
    ERROR_CANCELLED,
    HEADER_SIZE,
    HELLO_LAYOUT,
    KIND_ACK,
    KIND_BATCH,
    KIND_BATCH_ERROR,
    KIND_CANCEL,
    KIND_CONTROL,
    KIND_CONTROL_RESULT,
    KIND_HELLO,
    KIND_INFER,
    KIND_INFER_CANCEL,
    KIND_INFER_RESPONSE,
    KIND_METRICS,
    KIND_REFUSE,
    KIND_REPLY,
    KIND_WELCOME,
    LOCATION_INLINE,
    LOCATION_RECEIVER_REGION,
    LOCATION_SENDER_REGION,
    MAX_BUCKETS,
    MAX_COUNT,
    MAX_LABELS,
    MAX_NAME_BYTES,
    MAX_NDIM,
    MAX_TEXT_BYTES,
    METRIC_FIXED_SIZE,
    METRIC_LAYOUT,
    REQUEST_FIXED_SIZE,
    REQUEST_LAYOUT,
    RESPONSE_FIXED_SIZE,
    RESPONSE_LAYOUT,
    STATUS_ERROR,
    STATUS_NONE,
    STATUS_OUTPUTS,
    TENSOR_FIXED_SIZE,
    TENSOR_LAYOUT,
    WELCOME_LAYOUT,
    Buffer,
    Call,
    CallResponses,
    Control,
    ControlResult,
    Header,
    Hello,
    MetricUpdate,
    RequestMeta,
    ResponseMeta,
    TensorMeta,
    Welcome,
    WireError,
)

__all__ = ["decode_batch", "decode_body", "decode_infer_response", "decode_reply"]

_U8, _U32, _I64, _F64 = struct.Struct("<B"), struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<d")
_U64 = struct.Struct("<Q")
# NamedTuple's own constructor is Python code; tuple.__new__ builds the same object in C (the hot path).
_tensor_meta = partial(tuple.__new__, TensorMeta)
_request_meta = partial(tuple.__new__, RequestMeta)
_FILE_SPAN = struct.Struct("<QQ")
_PARAMETER_MIN = 9  # type byte, key length, one key byte, ... a bool's value


class _Reader:
    """Checked reads from ``buffer[start:end]``."""

    __slots__ = ("buffer", "at", "end", "header")

    def __init__(self, buffer: Buffer, start: int, end: int, header: Header):
        self.buffer, self.at, self.end, self.header = buffer, start, end, header

    def take(self, count: int, what: str) -> int:
        at = self.at
        if count < 0 or at + count > self.end:
            raise WireError(f"{what} runs past the metadata's end")
        self.at = at + count
        return at

    def unpack(self, layout: struct.Struct, what: str) -> tuple[Any, ...]:
        return layout.unpack_from(self.buffer, self.take(layout.size, what))

    def text(self, length: int, limit: int, what: str) -> str:
        if length > limit:
            raise WireError(f"{what} has {length} bytes (limit {limit})")
        at = self.take(length, what)
        try:
            return str(self.buffer[at : at + length], "utf-8")
        except UnicodeDecodeError:
            raise WireError(f"{what} is not UTF-8") from None

    def string(self, limit: int, what: str) -> str:
        return self.text(self.unpack(_U32, what)[0], limit, what)

    def name(self, what: str, length: int | None = None) -> str:
        if length is None:
            length = self.unpack(_U32, what)[0]
        name = self.text(length, MAX_NAME_BYTES, what)
        if not name or "\0" in name:
            raise WireError(f"{what} {name!r} is empty or holds a NUL")
        return name

    def count(self, count: int, min_size: int, what: str) -> int:
        if count * min_size > self.end - self.at:
            raise WireError(f"{count} {what} cannot fit in the {self.end - self.at} bytes left")
        return count

    def tensor(self, what: str) -> TensorMeta:
        # The hot path of every batch: plain locals and C-level checks, one bounds check per record.
        buffer, at = self.buffer, self.at
        if at + TENSOR_FIXED_SIZE > self.end:
            raise WireError(f"{what} runs past the metadata's end")
        name_length, dtype, location, ndim, _, offset, byte_length = TENSOR_LAYOUT.unpack_from(buffer, at)
        at += TENSOR_FIXED_SIZE
        if ndim > MAX_NDIM:
            raise WireError(f"{what}: {ndim} dimensions (limit {MAX_NDIM})")
        name_start = at + 8 * ndim
        name_end = name_start + name_length
        if name_length > MAX_NAME_BYTES or name_end > self.end:
            raise WireError(f"{what}: its name ({name_length} bytes) runs past the metadata's end or its limit")
        shape = DIMS_LAYOUTS[ndim].unpack_from(buffer, at)
        self.at = name_end
        try:
            name = str(buffer[name_start:name_end], "utf-8")
        except UnicodeDecodeError:
            raise WireError(f"{what}: its name is not UTF-8") from None
        if not name or "\0" in name:
            raise WireError(f"{what} {name!r}: a name is empty or holds a NUL")
        size = ELEMENT_SIZES.get(dtype)
        if size is None:
            raise WireError(f"{what} {name!r}: unknown data type {dtype}")
        if ndim and min(shape) < 0:
            raise WireError(f"{what} {name!r}: shape {list(shape)} has a negative dimension")
        expected = prod(shape) * size
        if byte_length != expected and not (dtype == DTYPE_BYTES and byte_length > expected):
            raise WireError(f"{what} {name!r}: shape {list(shape)} needs {expected} bytes, not {byte_length}")
        if location == LOCATION_INLINE:
            if offset + byte_length > self.header.data_length:
                raise WireError(
                    f"{what} {name!r}: its bytes lie outside the {self.header.data_length}-byte data section"
                )
        elif location == LOCATION_SENDER_REGION:
            if not self.header.region_id:
                raise WireError(f"{what} {name!r} is in the sender's region, but the message names none")
        elif location == LOCATION_RECEIVER_REGION:
            if not self.header.peer_region_id:
                raise WireError(f"{what} {name!r} is in the receiver's region, but the message names none")
        else:
            raise WireError(f"{what} {name!r}: unknown location {location}")
        return _tensor_meta((name, dtype, location, offset, byte_length, shape))

    def request(self, index: int) -> RequestMeta:
        what = "request"
        at = self.at
        if at + REQUEST_FIXED_SIZE + 4 > self.end:
            raise WireError(f"request {index} runs past the metadata's end")
        input_count, output_count, parameter_count, flags, correlation_kind, correlation = REQUEST_LAYOUT.unpack_from(
            self.buffer, at
        )
        self.at = at + REQUEST_FIXED_SIZE
        if self.buffer[self.at : self.at + 4] == b"\0\0\0\0":  # no request id: the common case
            self.at += 4
            request_id = ""
        else:
            request_id = self.string(MAX_TEXT_BYTES, "a request id")
        if correlation_kind == CORRELATION_NONE:
            correlation = None
        elif correlation_kind == CORRELATION_STRING:
            correlation = self.string(MAX_TEXT_BYTES, f"request {index}: its correlation id")
        elif correlation_kind != CORRELATION_UINT:
            raise WireError(f"request {index}: unknown correlation id kind {correlation_kind}")
        parameters: dict[str, str | int | bool | float] = {}
        if parameter_count:
            what = f"request {index}"
            for _ in range(self.count(parameter_count, _PARAMETER_MIN - 3, f"parameters of {what}")):
                self.parameter(parameters, what)
        requested = None
        if output_count:
            count = self.count(output_count, 5, f"request {index}")
            requested = [self.name(f"request {index}: a requested output") for _ in range(count)]
        if input_count * TENSOR_FIXED_SIZE > self.end - self.at:
            raise WireError(f"request {index}: {input_count} inputs cannot fit in what is left")
        inputs = [self.tensor(what) for _ in range(input_count)]
        if self.buffer[self.at : self.at + 4] == b"\0\0\0\0":  # not traced: the common case
            self.at += 4
            trace_context = ""
        else:
            trace_context = self.string(MAX_TEXT_BYTES, f"request {index}: its trace context")
        return _request_meta((request_id, flags, correlation, parameters, requested, inputs, trace_context))

    def parameter(self, parameters: dict[str, str | int | bool | float], what: str) -> None:
        kind = self.unpack(_U8, what)[0]
        key = self.name(f"{what}: a parameter's key")
        if kind == 0:
            parameters[key] = self.string(MAX_TEXT_BYTES, f"{what}: parameter {key!r}")
        elif kind == 1:
            parameters[key] = self.unpack(_I64, what)[0]
        elif kind == 2:
            flag = self.unpack(_U8, what)[0]
            if flag > 1:
                raise WireError(f"{what}: parameter {key!r} is a bool of value {flag}")
            parameters[key] = bool(flag)
        elif kind == 3:
            parameters[key] = self.unpack(_F64, what)[0]
        else:
            raise WireError(f"{what}: parameter {key!r} has unknown type {kind}")

    def response(self, index: int) -> ResponseMeta:
        what = f"response {index}"
        status, code, _, n = self.unpack(RESPONSE_LAYOUT, what)
        if status == STATUS_OUTPUTS:
            outputs = [self.tensor(f"{what}: output") for _ in range(self.count(n, TENSOR_FIXED_SIZE, what))]
            return ResponseMeta(STATUS_OUTPUTS, outputs)
        if status == STATUS_ERROR:
            if code > ERROR_CANCELLED:
                raise WireError(f"{what}: unknown error code {code}")
            return ResponseMeta(STATUS_ERROR, [], code, self.text(n, MAX_TEXT_BYTES, f"{what}: its message"))
        if status == STATUS_NONE and n == 0:
            return ResponseMeta(STATUS_NONE, [])
        raise WireError(f"{what}: unknown status {status} (n = {n})")

    def metric(self, index: int) -> MetricUpdate:
        """A METRICS record, its layout checked (what a metric may hold is the backend's to check)."""
        what = f"metric update {index}"
        family_kind, op, label_count, bucket_count, value = self.unpack(METRIC_LAYOUT, what)
        if label_count > MAX_LABELS or bucket_count > MAX_BUCKETS:
            raise WireError(
                f"{what}: {label_count} labels, {bucket_count} buckets (limits {MAX_LABELS}, {MAX_BUCKETS})"
            )
        name = self.name(f"{what}: its name")
        description = self.string(MAX_TEXT_BYTES, f"{what}: its description")
        labels = tuple((self.name(f"{what}: a label"), self.string(MAX_TEXT_BYTES, f"{what}: a label value"))
                       for _ in range(label_count))  # fmt: skip
        buckets = struct.unpack_from(f"<{bucket_count}d", self.buffer, self.take(8 * bucket_count, what))
        return MetricUpdate(family_kind, op, value, name, description, labels, buckets)

    def call_id(self, what: str) -> int:
        call_id: int = self.unpack(_U64, what)[0]
        if not call_id:
            raise WireError(f"{what}: call id 0 (calls are numbered from 1)")
        return call_id

    def version(self, version: int, what: str) -> int:
        if version != -1 and version < 1:
            raise WireError(f"{what}: model version {version} (-1 for the latest, else 1 or more)")
        return version

    def call(self) -> Call:
        """An INFER's call record and its request."""
        call_id, flags, version, timeout_us = self.unpack(CALL_LAYOUT, "INFER: the call record")
        if not call_id:
            raise WireError("INFER: call id 0 (calls are numbered from 1)")
        if flags & ~CALL_DECOUPLED:
            raise WireError(f"INFER: unknown call flags {flags:#x}")
        self.version(version, "INFER")
        name = self.name("INFER: the callee's name")
        return Call(call_id, flags, version, timeout_us, name, self.request(0))

    def control(self) -> Control:
        call_id, op, version = self.unpack(CONTROL_LAYOUT, "CONTROL")
        if not call_id:
            raise WireError("CONTROL: call id 0 (calls are numbered from 1)")
        if op > CONTROL_UNLOAD_DEPENDENTS:
            raise WireError(f"CONTROL: unknown operation {op}")
        self.version(version, "CONTROL")
        name = self.name("CONTROL: the model's name")
        config = self.string(MAX_TEXT_BYTES, "CONTROL: the configuration")
        file_count = self.unpack(_U32, "CONTROL")[0]
        if file_count > MAX_COUNT or (op != CONTROL_LOAD and (file_count or config)):
            raise WireError(f"CONTROL: operation {op} with {file_count} files and {len(config)} bytes of configuration")
        files = []
        for _ in range(self.count(file_count, 21, "CONTROL's files")):
            path = self.name("CONTROL: a file's path")
            offset, length = self.unpack(_FILE_SPAN, f"CONTROL: file {path!r}")
            if offset + length > self.header.data_length:
                raise WireError(f"CONTROL: file {path!r} lies outside the {self.header.data_length}-byte data section")
            files.append((path, offset, length))
        return Control(call_id, op, version, name, config, tuple(files))

    def control_result(self) -> ControlResult:
        call_id, status, code, ready = self.unpack(CONTROL_RESULT_LAYOUT, "CONTROL_RESULT")
        if not call_id:
            raise WireError("CONTROL_RESULT: call id 0 (calls are numbered from 1)")
        if status not in (STATUS_OUTPUTS, STATUS_ERROR) or code > ERROR_CANCELLED or ready > 1:
            raise WireError(f"CONTROL_RESULT: status {status}, error code {code}, ready {ready}")
        if status == STATUS_OUTPUTS and code:
            raise WireError(f"CONTROL_RESULT: done, with error code {code}")
        return ControlResult(call_id, status, code, ready, self.string(MAX_TEXT_BYTES, "CONTROL_RESULT: the message"))

    def finish(self) -> None:
        if self.at != self.end:
            raise WireError(f"{self.end - self.at} bytes of metadata left over after the records")


def _reader(header: Header, buffer: Buffer, start: int) -> _Reader:
    meta_start = start + HEADER_SIZE
    end = meta_start + header.meta_length
    if end > len(buffer):
        raise WireError("the metadata runs past the message's end")
    return _Reader(buffer, meta_start, end, header)


def decode_batch(header: Header, buffer: Buffer, start: int = 0) -> list[RequestMeta]:
    """The requests of a BATCH whose header is ``header``, in ``buffer`` from ``start``."""
    reader = _reader(header, buffer, start)
    try:
        requests = [reader.request(index) for index in range(reader.count(header.count, 32, "requests"))]
    except struct.error as error:  # defensive: every read is bounds-checked first
        raise WireError(str(error)) from None
    reader.finish()
    return requests


def decode_reply(header: Header, buffer: Buffer, start: int = 0) -> list[ResponseMeta]:
    """The responses of a REPLY."""
    reader = _reader(header, buffer, start)
    count = reader.count(header.count, RESPONSE_FIXED_SIZE, "responses")
    responses = [reader.response(index) for index in range(count)]
    reader.finish()
    return responses


def decode_infer_response(header: Header, buffer: Buffer, start: int = 0) -> CallResponses:
    """The call id and responses (0 or 1) of an INFER_RESPONSE."""
    reader = _reader(header, buffer, start)
    if header.count > 1:
        raise WireError(f"INFER_RESPONSE with {header.count} responses (0 or 1)")
    call_id = reader.call_id("INFER_RESPONSE")
    responses = [reader.response(0)] if header.count else []
    reader.finish()
    return CallResponses(call_id, responses)


def decode_body(header: Header, buffer: Buffer, start: int = 0) -> Any:
    """Any message's metadata: Hello, Welcome, str (REFUSE), list (BATCH, REPLY), (code, message) (BATCH_ERROR),
    list[int] (CANCEL), int (ACK: replies processed; INFER_CANCEL: the call id), Call (INFER), CallResponses
    (INFER_RESPONSE), Control, ControlResult."""
    kind = header.kind
    if kind == KIND_BATCH:
        return decode_batch(header, buffer, start)
    if kind == KIND_REPLY:
        return decode_reply(header, buffer, start)
    if kind == KIND_INFER_RESPONSE:
        return decode_infer_response(header, buffer, start)
    reader = _reader(header, buffer, start)
    body: object
    if kind in (KIND_INFER, KIND_INFER_CANCEL, KIND_CONTROL, KIND_CONTROL_RESULT) and header.count != (
        kind == KIND_INFER
    ):
        raise WireError(f"a message of kind {kind} with count {header.count}")
    if kind == KIND_INFER:
        body = reader.call()
    elif kind == KIND_INFER_CANCEL:
        body = reader.call_id("INFER_CANCEL")
    elif kind == KIND_CONTROL:
        body = reader.control()
    elif kind == KIND_CONTROL_RESULT:
        body = reader.control_result()
    elif kind == KIND_HELLO:
        index, max_batch_size, api_major, api_minor = reader.unpack(HELLO_LAYOUT, "HELLO")
        name = reader.name("HELLO: the model name")
        token = reader.string(MAX_TEXT_BYTES, "HELLO: token")
        body = Hello(index, max_batch_size, api_major, api_minor, name, token, reader.string(MAX_TEXT_BYTES, "HELLO"))
    elif kind == KIND_WELCOME:
        pid, threshold, spin_us, _, limit = reader.unpack(WELCOME_LAYOUT, "WELCOME")
        body = Welcome(pid, threshold, spin_us, limit, reader.string(MAX_TEXT_BYTES, "WELCOME: the worker version"))
    elif kind == KIND_REFUSE:
        body = reader.string(MAX_TEXT_BYTES, "REFUSE: the message")
    elif kind == KIND_BATCH_ERROR:
        code = reader.unpack(_U8, "BATCH_ERROR")[0]
        reader.take(3, "BATCH_ERROR")
        if code > ERROR_CANCELLED:
            raise WireError(f"BATCH_ERROR: unknown error code {code}")
        body = (code, reader.string(MAX_TEXT_BYTES, "BATCH_ERROR: the message"))
    elif kind == KIND_CANCEL:
        count = reader.count(header.count, 4, "cancelled requests")
        body = list(struct.unpack_from(f"<{count}I", buffer, reader.take(4 * count, "CANCEL")))
    elif kind == KIND_ACK:
        body = header.count
    elif kind == KIND_METRICS:
        count = reader.count(header.count, METRIC_FIXED_SIZE + 8, "metric updates")
        body = [reader.metric(index) for index in range(count)]
    else:
        raise WireError(f"unknown message kind {kind}")
    reader.finish()
    return body
