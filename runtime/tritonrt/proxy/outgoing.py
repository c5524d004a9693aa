"""What the worker sends: outputs (a reply's) and inputs (a call's) sorted into tensor records and the bytes still
to place, laid out inline, and the metadata of a REPLY; the METRICS messages that go with an answer.
See :mod:`tritonrt.proxy.connection`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple, TypeAlias

import numpy as np

from tritonrt import metrics
from tritonrt.memory import data_address
from tritonrt.proxy import wire
from tritonrt.proxy.error_log import describe
from tritonrt.proxy.regions import PeerRegion
from tritonrt.proxy.tensors import SENT_AS_IS, encode_bytes, wire_dtype
from tritonrt.proxy.wire import (
    DATA_ALIGN,
    DTYPE_BYTES,
    KIND_METRICS,
    LOCATION_INLINE,
    LOCATION_RECEIVER_REGION,
    MAX_COUNT,
    RESPONSE_LAYOUT,
    STATUS_ERROR,
    STATUS_NONE,
    STATUS_OUTPUTS,
    Header,
    align,
)

__all__ = [
    "Answer",
    "ErrorResponse",
    "Outgoing",
    "Record",
    "as_sent",
    "encode_records",
    "inline_answer",
    "lay_out_inline",
    "metrics_messages",
    "sort_outgoing",
]

_PADDING = bytes(DATA_ALIGN)
_NO_OUTPUTS = RESPONSE_LAYOUT.pack(STATUS_NONE, 0, 0, 0)
_NO_REGION = object()  # never any array's base


class ErrorResponse(Exception):
    """A per-request error to send back (``code``: Triton's error code, e.g. wire.ERROR_INVALID_ARG)."""

    def __init__(self, message: str, code: int = wire.ERROR_INTERNAL):
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(slots=True)
class Outgoing:
    """An output on its way out: the wire's tensor record (named as native/src/wire/records.rs names it), and
    ``payload``, the data still to place: the little-endian array, or its bytes (a small output that views the
    backend's region or is not contiguous); None once copied into this side's region, when sent by reference,
    or when empty."""

    name: bytes  # UTF-8
    dtype: int
    location: int
    offset: int
    byte_length: int
    shape: tuple[int, ...]
    payload: bytes | np.ndarray | None


# One response of a reply: its outputs, its error, or nothing (a stream's step without output for that request).
Record: TypeAlias = "list[Outgoing] | BaseException | None"


class Answer(NamedTuple):
    """A reply's responses sorted for sending: one record each, and the outputs with bytes to place, by name."""

    records: list[Record]
    inline: dict[str, list[Outgoing]]
    regional: dict[str, list[Outgoing]]


# NamedTuple's own constructor is Python code; tuple.__new__ builds the same object in C (the hot path).
_answer = partial(tuple.__new__, Answer)


def sort_outgoing(
    responses: list[Any], threshold: int, peer: PeerRegion | None, *, by_reference: bool = True
) -> Answer:
    """Each response (a reply's, or a call's inputs) as a record, and the tensors that carry bytes by name and by
    where they go (consumes ``responses``): tensors of ``threshold`` bytes or more to this side's region, or by
    reference when they view the ``peer``'s region (the backend's) and ``by_reference``; smaller ones inline.
    Tensors are grouped by name so that each name's tensors lie back to back."""
    # (Locals, gone when this returns: the reply asks whether the callable kept views of the region after.)
    peer_base: object = peer.base if peer is not None and by_reference else _NO_REGION
    peer_start = peer.start if peer is not None else 0
    records: list[Record] = []
    inline: dict[str, list[Outgoing]] = {}
    regional: dict[str, list[Outgoing]] = {}
    for response in responses:
        if type(response) is not dict:  # (a dict is the common case: skip the checks below)
            if response is None or isinstance(response, BaseException):
                records.append(response)
                continue
            if not isinstance(response, Mapping):
                kind = type(response).__name__
                records.append(ErrorResponse(f"a response must be a dict of arrays, not {kind}"))
                continue
        outputs = []
        for name, value in response.items():
            array: np.ndarray = value if type(value) is np.ndarray else np.asarray(value)
            shape, code = array.shape, SENT_AS_IS.get(array.dtype)
            if code is None:  # (rare: bytes objects, or a big-endian array)
                array, code = as_sent(array)
            size = array.nbytes
            tensor = Outgoing(name.encode(), code, LOCATION_INLINE, 0, size, shape, array)
            if size >= threshold:
                if array.base is peer_base and array.flags.c_contiguous:  # an input, or part of one
                    tensor.location, tensor.offset = LOCATION_RECEIVER_REGION, data_address(array) - peer_start
                    tensor.payload = None
                else:
                    regional.setdefault(name, []).append(tensor)
            elif size:
                if array.base is peer_base or not array.flags.c_contiguous:
                    tensor.payload = array.tobytes()  # no view of the region outlives the reply; contiguous
                inline.setdefault(name, []).append(tensor)
            else:
                tensor.payload = None
            outputs.append(tensor)
        records.append(outputs)
    responses.clear()
    return _answer((records, inline, regional))


def inline_answer(
    responses: list[Any], threshold: int, peer: PeerRegion | None
) -> tuple[bytearray, list[bytes | np.ndarray | None], int] | None:
    """The common reply in one pass: a single response, a dict of arrays that all travel inline as they are
    (numeric little-endian, contiguous, under ``threshold`` bytes, no view of the ``peer``'s region): its
    metadata, the message's parts after its head (as :func:`lay_out_inline` makes them) and the inline data's
    length, the same bytes as :func:`sort_outgoing`, :func:`lay_out_inline` and :func:`encode_records` make.
    None, with ``responses`` untouched, for any other reply; else consumes ``responses``."""
    if len(responses) != 1 or type(response := responses[0]) is not dict:
        return None
    peer_base: object = peer.base if peer is not None else _NO_REGION
    meta = bytearray(RESPONSE_LAYOUT.pack(STATUS_OUTPUTS, 0, 0, len(response)))
    parts: list[bytes | np.ndarray | None] = [b""]
    end = 0
    for name, array in response.items():
        if type(array) is not np.ndarray or type(name) is not str:
            return None
        code, size = SENT_AS_IS.get(array.dtype), array.nbytes
        if code is None or size >= threshold or array.base is peer_base or not array.flags.c_contiguous:
            return None
        offset = 0
        if size:
            offset = -(-end // DATA_ALIGN) * DATA_ALIGN  # (align(), inline: each output's run starts aligned)
            if offset > end:
                parts.append(_PADDING[: offset - end])
            parts.append(array)
            end = offset + size
        wire.pack_tensor(meta, name.encode(), code, LOCATION_INLINE, offset, size, array.shape)
    responses.clear()
    return meta, parts, end


def as_sent(array: np.ndarray) -> tuple[np.ndarray, int]:
    """An array that does not travel as it is, and its wire code: a BYTES array's serialization (as uint8), or a
    big-endian array as little-endian; ValueError naming the dtype when it has no Triton type."""
    code = wire_dtype(array.dtype)
    if code == DTYPE_BYTES:
        return (np.frombuffer(encode_bytes(array), np.uint8) if array.size else np.empty(0, np.uint8)), code
    return array.astype(array.dtype.newbyteorder("<")), code


def lay_out_inline(runs: dict[str, list[Outgoing]]) -> tuple[list[bytes | np.ndarray | None], int]:
    """The parts of a message after its head (``parts[0]``, filled in later): each run of inline tensors aligned,
    each tensor's offset set; and the inline data's length."""
    parts: list[bytes | np.ndarray | None] = [b""]  # (inline tensors always carry their bytes)
    end = 0
    for run in runs.values():
        start = align(end)
        if start > end:
            parts.append(_PADDING[: start - end])
            end = start
        for tensor in run:
            tensor.offset = end
            parts.append(tensor.payload)
            end += tensor.byte_length
    return parts, end


def metrics_messages(seq: int) -> bytes:
    """The METRICS messages (MAX_COUNT updates each) of what this process's metrics changed since the last."""
    updates = metrics.REGISTRY.drain()
    return b"".join(
        wire.encode_message(Header(KIND_METRICS, 0, len(chunk), seq), wire.encode_metrics(chunk))
        for chunk in (updates[start : start + MAX_COUNT] for start in range(0, len(updates), MAX_COUNT))
    )


def encode_records(records: list[Record]) -> bytearray:
    """A REPLY's metadata: one response record per request, after its outputs were placed."""
    meta = bytearray()
    pack_tensor = wire.pack_tensor
    for record in records:
        if record is None:
            meta += _NO_OUTPUTS
        elif isinstance(record, BaseException):
            message = str(record) if isinstance(record, ErrorResponse) else describe(record)
            encoded = message.encode()[: wire.MAX_TEXT_BYTES]
            code = record.code if isinstance(record, ErrorResponse) else wire.ERROR_INTERNAL
            meta += RESPONSE_LAYOUT.pack(STATUS_ERROR, code, 0, len(encoded))
            meta += encoded
        else:
            meta += RESPONSE_LAYOUT.pack(STATUS_OUTPUTS, 0, 0, len(record))
            for t in record:
                pack_tensor(meta, t.name, t.dtype, t.location, t.offset, t.byte_length, t.shape)
    return meta
