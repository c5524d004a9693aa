"""The wire protocol, version 4, between tritonrt's Triton backend and the process that serves the callables.

Defined in ``runtime/docs/wire-protocol.md``: this module's constants and layouts are checked against that page
and against the Rust backend (golden messages in ``runtime/native/tests/golden/``). This module holds the
constants, the header and the encoders; :mod:`tritonrt.proxy.wire_decode` the decoders. Pure: no sockets, no
numpy.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple, TypeAlias

from tritonrt.metrics import MetricUpdate

# What a message is read from: the bytes received (a bytearray being filled, or a view of one).
Buffer: TypeAlias = "bytes | bytearray | memoryview"

__all__ = [
    "BATCH_ERROR_LAYOUT",
    "CALL_LAYOUT",
    "CONTROL_LAYOUT",
    "CONTROL_RESULT_LAYOUT",
    "Buffer",
    "Call",
    "CallResponses",
    "Control",
    "ControlResult",
    "CONSTANTS",
    "DIMS_LAYOUTS",
    "ELEMENT_SIZES",
    "HEADER_LAYOUT",
    "HELLO_LAYOUT",
    "METRIC_LAYOUT",
    "REQUEST_LAYOUT",
    "RESPONSE_LAYOUT",
    "TENSOR_LAYOUT",
    "WELCOME_LAYOUT",
    "HEADER_SIZE",
    "Header",
    "Hello",
    "MetricUpdate",
    "RequestMeta",
    "ResponseMeta",
    "TensorMeta",
    "Welcome",
    "WireError",
    "align",
    "decode_header",
    "encode_batch",
    "encode_batch_error",
    "encode_cancel",
    "encode_control",
    "encode_control_result",
    "encode_hello",
    "encode_infer",
    "encode_infer_cancel",
    "encode_infer_response",
    "encode_message",
    "encode_metrics",
    "encode_reply",
    "encode_text",
    "encode_welcome",
    "expected_bytes",
    "pack_tensor",
]

MAGIC = 0x57545254
VERSION = 4
HEADER_SIZE = 64
DATA_ALIGN = 64
KIND_HELLO, KIND_WELCOME, KIND_REFUSE, KIND_BATCH, KIND_REPLY, KIND_BATCH_ERROR, KIND_CANCEL, KIND_ACK = range(1, 9)
KIND_METRICS = 9
KIND_INFER, KIND_INFER_RESPONSE, KIND_INFER_CANCEL, KIND_CONTROL, KIND_CONTROL_RESULT = 10, 11, 12, 13, 14
FLAG_FINAL, FLAG_RETAINED, FLAG_NEW_REGION, FLAG_DECOUPLED, FLAG_RERUN = 1, 2, 4, 8, 16
LOCATION_INLINE, LOCATION_SENDER_REGION, LOCATION_RECEIVER_REGION = 0, 1, 2
STATUS_OUTPUTS, STATUS_ERROR, STATUS_NONE = 0, 1, 2
PARAMETER_STRING, PARAMETER_INT, PARAMETER_BOOL, PARAMETER_DOUBLE = 0, 1, 2, 3
CORRELATION_NONE, CORRELATION_UINT, CORRELATION_STRING = 0, 1, 2
DTYPE_BOOL, DTYPE_UINT8, DTYPE_UINT16, DTYPE_UINT32, DTYPE_UINT64 = 1, 2, 3, 4, 5
DTYPE_INT8, DTYPE_INT16, DTYPE_INT32, DTYPE_INT64 = 6, 7, 8, 9
DTYPE_FP16, DTYPE_FP32, DTYPE_FP64, DTYPE_BYTES, DTYPE_BF16 = 10, 11, 12, 13, 14
ERROR_UNKNOWN, ERROR_INTERNAL, ERROR_NOT_FOUND, ERROR_INVALID_ARG = 0, 1, 2, 3
ERROR_UNAVAILABLE, ERROR_UNSUPPORTED, ERROR_ALREADY_EXISTS, ERROR_CANCELLED = 4, 5, 6, 7
MAX_META_BYTES = 16 << 20
MAX_DATA_BYTES = 256 << 20
MAX_COUNT = 1 << 16
MAX_NDIM = 32
MAX_NAME_BYTES = 4096
MAX_TEXT_BYTES = 1 << 20
MAX_REGION_BYTES = 1 << 40
TENSOR_FIXED_SIZE = 24
REQUEST_FIXED_SIZE = 32
RESPONSE_FIXED_SIZE = 8
METRIC_FIXED_SIZE = 16
METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM = 0, 1, 2
METRIC_ADD, METRIC_SET, METRIC_OBSERVE = 0, 1, 2
MAX_LABELS = 64
MAX_BUCKETS = 256
CALL_FIXED_SIZE = 32
CALL_DECOUPLED = 1
CONTROL_FIXED_SIZE = 24
CONTROL_RESULT_FIXED_SIZE = 16
CONTROL_IS_READY, CONTROL_LOAD, CONTROL_UNLOAD, CONTROL_UNLOAD_DEPENDENTS = 0, 1, 2, 3
MAX_CALLS = 1024
# Every constant of the specification's constants block, by name (the module's upper-case integers).
CONSTANTS: dict[str, int] = {name: value for name, value in globals().items() if name.isupper() and type(value) is int}

# The records of the specification, as struct layouts.
HEADER_LAYOUT = struct.Struct("<IHHIIQQIIIIQQ")
TENSOR_LAYOUT = struct.Struct("<IBBBBQQ")
REQUEST_LAYOUT = struct.Struct("<IIIIB7xQ")
RESPONSE_LAYOUT = struct.Struct("<BBHI")
_U8, _U32, _I64, _F64 = struct.Struct("<B"), struct.Struct("<I"), struct.Struct("<q"), struct.Struct("<d")
_U64 = struct.Struct("<Q")
HELLO_LAYOUT = struct.Struct("<IIII")
WELCOME_LAYOUT = struct.Struct("<IIIIQ")
BATCH_ERROR_LAYOUT = struct.Struct("<B3x")
METRIC_LAYOUT = struct.Struct("<BBHId")
CALL_LAYOUT = struct.Struct("<QI4xqQ")
CONTROL_LAYOUT = struct.Struct("<QB7xq")
CONTROL_RESULT_LAYOUT = struct.Struct("<QBBB5x")
DIMS_LAYOUTS = [struct.Struct(f"<{n}q") for n in range(33)]
ELEMENT_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 1, 7: 2, 8: 4, 9: 8, 10: 2, 11: 4, 12: 8, 13: 4, 14: 2}
_PADDING = bytes(64)


class WireError(ValueError):
    """A message that cannot be used. ``breaks_stream``: the stream is out of step (close the connection)."""

    def __init__(self, message: str, *, breaks_stream: bool = False):
        super().__init__(message)
        self.breaks_stream = breaks_stream


class Header(NamedTuple):
    kind: int
    flags: int = 0
    count: int = 0  # type: ignore[assignment]  # the protocol's name for it; shadows tuple.count
    seq: int = 0
    region_size: int = 0
    region_id: int = 0
    peer_region_id: int = 0
    meta_length: int = 0
    data_length: int = 0

    @property
    def data_start(self) -> int:
        return align(HEADER_SIZE + self.meta_length)

    @property
    def total_length(self) -> int:
        return self.data_start + self.data_length


class TensorMeta(NamedTuple):
    name: str
    dtype: int
    location: int
    offset: int
    byte_length: int
    shape: tuple[int, ...]


class RequestMeta(NamedTuple):
    id: str
    flags: int
    correlation_id: int | str | None
    parameters: dict[str, str | int | bool | float]
    requested_outputs: list[str] | None  # None: every output
    inputs: list[TensorMeta]
    trace_context: str = ""  # Triton's (OpenTelemetry: JSON of W3C headers); empty when not traced


class ResponseMeta(NamedTuple):
    status: int
    outputs: list[TensorMeta]  # STATUS_OUTPUTS
    error_code: int = 0  # STATUS_ERROR
    message: str = ""  # STATUS_ERROR


class Call(NamedTuple):
    """An INFER: a call of another model of the server (BLS) and its request."""

    call_id: int
    call_flags: int  # CALL_DECOUPLED: any number of responses expected
    model_version: int  # -1: the server's choice
    timeout_us: int  # 0: none
    model_name: str
    request: RequestMeta


class CallResponses(NamedTuple):
    """An INFER_RESPONSE: the call it answers and its responses (0 or 1)."""

    call_id: int
    responses: list[ResponseMeta]


class Control(NamedTuple):
    """A CONTROL: an operation of Triton's model repository (CONTROL_*)."""

    call_id: int
    op: int
    model_version: int  # CONTROL_IS_READY: -1 for the latest
    model_name: str
    config: str = ""  # CONTROL_LOAD: JSON, may be empty
    files: tuple[tuple[str, int, int], ...] = ()  # CONTROL_LOAD: (path in the model's folder, offset, length)


class ControlResult(NamedTuple):
    """A CONTROL_RESULT: STATUS_OUTPUTS (done) or STATUS_ERROR with its code and message."""

    call_id: int
    status: int
    error_code: int = 0
    ready: int = 0  # CONTROL_IS_READY's answer
    message: str = ""


class Hello(NamedTuple):
    instance_index: int
    max_batch_size: int
    api_major: int
    api_minor: int
    model_name: str
    token: str
    backend_version: str


class Welcome(NamedTuple):
    worker_pid: int
    inline_threshold: int
    spin_us: int
    region_limit: int
    worker_version: str


# NamedTuple's own constructor is Python code; tuple.__new__ builds the same object in C (every message has one).
_new_header = partial(tuple.__new__, Header)


def align(value: int, alignment: int = DATA_ALIGN) -> int:
    """``value`` rounded up to a multiple of ``alignment`` (DATA_ALIGN unless told)."""
    return -(-value // alignment) * alignment


def expected_bytes(dtype: int, shape: Sequence[int]) -> int:
    """The byte length a tensor must have (BYTES: the least, 4 per element); WireError naming the problem."""
    count = 1
    for dim in shape:
        if dim < 0:
            raise WireError(f"shape {list(shape)} has a negative dimension")
        count *= dim
    size = count * ELEMENT_SIZES[dtype]
    if size >= 1 << 64:
        raise WireError(f"shape {list(shape)} needs more than 2^64 bytes")
    return size


# --- header ------------------------------------------------------------------------------------------------


def decode_header(buffer: Buffer, offset: int = 0) -> Header:
    """Read and check the 64-byte header at ``offset``."""
    if len(buffer) - offset < HEADER_SIZE:
        raise WireError(f"a message header needs {HEADER_SIZE} bytes, {len(buffer) - offset} are there")
    magic, version, kind, flags, count, seq, region_size, region_id, peer_region_id, meta_length, _, data_length, _ = (
        HEADER_LAYOUT.unpack_from(buffer, offset)
    )
    if magic != MAGIC:
        raise WireError(f"not a tritonrt message (magic {magic:#010x})", breaks_stream=True)
    if version != VERSION:
        raise WireError(
            f"the peer speaks tritonrt wire protocol version {version}, this process version {VERSION}: install "
            "the tritonrt runtime and its backend library from the same release",
            breaks_stream=True,
        )
    header = _new_header((kind, flags, count, seq, region_size, region_id, peer_region_id, meta_length, data_length))
    if not KIND_HELLO <= kind <= KIND_CONTROL_RESULT:
        raise WireError(f"unknown message kind {kind}", breaks_stream=True)
    if meta_length > MAX_META_BYTES or data_length > MAX_DATA_BYTES:
        raise WireError(f"message of {meta_length} + {data_length} bytes is over the limits", breaks_stream=True)
    if kind != KIND_ACK and count > MAX_COUNT:
        raise WireError(f"{count} records (limit {MAX_COUNT})", breaks_stream=True)
    if flags & FLAG_NEW_REGION and not (0 < region_size <= MAX_REGION_BYTES and region_id > 0):
        raise WireError(f"new region {region_id} of {region_size} bytes", breaks_stream=True)
    return header


def encode_message(header: Header, meta: bytes | bytearray = b"", data_length: int = 0) -> bytes:
    """Header (with meta_length and data_length filled in), metadata and padding; the data follows."""
    meta_length = len(meta)
    padding = -(HEADER_SIZE + meta_length) % DATA_ALIGN
    h = header
    head = HEADER_LAYOUT.pack(
        MAGIC, VERSION, h.kind, h.flags, h.count, h.seq, h.region_size, h.region_id, h.peer_region_id, meta_length,
        0, data_length, 0,
    )  # fmt: skip
    return b"".join((head, meta, _PADDING[:padding]))


# --- records -----------------------------------------------------------------------------------------------


def _pack_str(out: bytearray, text: str) -> None:
    data = text.encode()
    out += _U32.pack(len(data))
    out += data


def pack_tensor(
    out: bytearray, name: bytes, dtype: int, location: int, offset: int, byte_length: int, shape: Sequence[int]
) -> None:
    """Append a tensor record (``name`` already UTF-8)."""
    out += TENSOR_LAYOUT.pack(len(name), dtype, location, len(shape), 0, offset, byte_length)
    out += DIMS_LAYOUTS[len(shape)].pack(*shape)
    out += name


def _pack_tensor(out: bytearray, t: TensorMeta) -> None:
    pack_tensor(out, t.name.encode(), t.dtype, t.location, t.offset, t.byte_length, t.shape)


def encode_batch(requests: Sequence[RequestMeta]) -> bytearray:
    """The metadata of a BATCH."""
    out = bytearray()
    for request in requests:
        correlation = request.correlation_id
        kind = 0 if correlation is None else 2 if isinstance(correlation, str) else 1
        params = request.parameters
        requested = request.requested_outputs or []
        number = correlation if kind == 1 else 0
        out += REQUEST_LAYOUT.pack(len(request.inputs), len(requested), len(params), request.flags, kind, number)
        _pack_str(out, request.id)
        if isinstance(correlation, str):
            _pack_str(out, correlation)
        for key, value in params.items():
            if isinstance(value, bool):
                out += b"\x02"
                _pack_str(out, key)
                out += _U8.pack(value)
            elif isinstance(value, int):
                out += b"\x01"
                _pack_str(out, key)
                out += _I64.pack(value)
            elif isinstance(value, float):
                out += b"\x03"
                _pack_str(out, key)
                out += _F64.pack(value)
            else:
                out += b"\x00"
                _pack_str(out, key)
                _pack_str(out, str(value))
        for name in requested:
            _pack_str(out, name)
        for tensor in request.inputs:
            _pack_tensor(out, tensor)
        _pack_str(out, request.trace_context)
    return out


def encode_reply(responses: Sequence[ResponseMeta]) -> bytearray:
    """The metadata of a REPLY."""
    out = bytearray()
    for response in responses:
        if response.status == STATUS_OUTPUTS:
            out += RESPONSE_LAYOUT.pack(STATUS_OUTPUTS, 0, 0, len(response.outputs))
            for tensor in response.outputs:
                _pack_tensor(out, tensor)
        elif response.status == STATUS_ERROR:
            message = response.message.encode()[:MAX_TEXT_BYTES]
            out += RESPONSE_LAYOUT.pack(STATUS_ERROR, response.error_code, 0, len(message))
            out += message
        else:
            out += RESPONSE_LAYOUT.pack(STATUS_NONE, 0, 0, 0)
    return out


def encode_hello(hello: Hello) -> bytearray:
    out = bytearray(HELLO_LAYOUT.pack(hello.instance_index, hello.max_batch_size, hello.api_major, hello.api_minor))
    for text in (hello.model_name, hello.token, hello.backend_version):
        _pack_str(out, text)
    return out


def encode_welcome(welcome: Welcome) -> bytearray:
    w = welcome
    out = bytearray(WELCOME_LAYOUT.pack(w.worker_pid, w.inline_threshold, w.spin_us, 0, w.region_limit))
    _pack_str(out, w.worker_version)
    return out


def encode_text(text: str) -> bytearray:
    """The metadata of a REFUSE."""
    out = bytearray()
    _pack_str(out, text.encode()[:MAX_TEXT_BYTES].decode(errors="ignore"))
    return out


def encode_batch_error(code: int, message: str) -> bytearray:
    out = bytearray(BATCH_ERROR_LAYOUT.pack(code))
    _pack_str(out, message.encode()[:MAX_TEXT_BYTES].decode(errors="ignore"))
    return out


def encode_cancel(indices: Sequence[int]) -> bytes:
    return struct.pack(f"<{len(indices)}I", *indices)


def encode_metrics(updates: Sequence[MetricUpdate]) -> bytearray:
    """The metadata of a METRICS message (the caller checked names, labels, values and buckets)."""
    out = bytearray()
    for update in updates:
        buckets = update.buckets
        out += METRIC_LAYOUT.pack(update.family_kind, update.op, len(update.labels), len(buckets), update.value)
        _pack_str(out, update.name)
        _pack_str(out, update.description)
        for key, value in update.labels:
            _pack_str(out, key)
            _pack_str(out, value)
        if buckets:
            out += struct.pack(f"<{len(buckets)}d", *buckets)
    return out


def encode_infer(call: Call) -> bytearray:
    """The metadata of an INFER (count 1): the call record, then its request record."""
    out = bytearray(CALL_LAYOUT.pack(call.call_id, call.call_flags, call.model_version, call.timeout_us))
    _pack_str(out, call.model_name)
    out += encode_batch([call.request])
    return out


def encode_infer_response(answer: CallResponses) -> bytearray:
    """The metadata of an INFER_RESPONSE (count: the number of responses, 0 or 1)."""
    out = bytearray(_U64.pack(answer.call_id))
    out += encode_reply(answer.responses)
    return out


def encode_infer_cancel(call_id: int) -> bytes:
    return _U64.pack(call_id)


def encode_control(control: Control) -> bytearray:
    """The metadata of a CONTROL (the files' bytes go in the data section at the offsets given)."""
    out = bytearray(CONTROL_LAYOUT.pack(control.call_id, control.op, control.model_version))
    _pack_str(out, control.model_name)
    _pack_str(out, control.config)
    out += _U32.pack(len(control.files))
    for path, offset, length in control.files:
        _pack_str(out, path)
        out += _U64.pack(offset)
        out += _U64.pack(length)
    return out


def encode_control_result(result: ControlResult) -> bytearray:
    out = bytearray(CONTROL_RESULT_LAYOUT.pack(result.call_id, result.status, result.error_code, result.ready))
    _pack_str(out, result.message.encode()[:MAX_TEXT_BYTES].decode(errors="ignore"))
    return out
