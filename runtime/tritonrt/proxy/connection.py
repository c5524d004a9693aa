"""The worker's end of the native backend's connection: listen, shake hands, receive batches as numpy arrays
built on the received bytes or the backend's region (no copy), send replies (outputs copied once into this
side's region, or inline when small, or by reference when they are views of an input's region).

:mod:`tritonrt.proxy.listener` listens and shakes hands: one listener per model instance (one inference
callable); the backend instance connects to it.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping
from functools import partial
from typing import Any, NamedTuple

import numpy as np

from tritonrt import metrics
from tritonrt.memory import data_address
from tritonrt.proxy import wire
from tritonrt.proxy.link import Link, PeerGone
from tritonrt.proxy.outgoing import (
    Answer,
    ErrorResponse,
    Outgoing,
    Record,
    as_sent,
    encode_records,
    lay_out_inline,
    metrics_messages,
)
from tritonrt.proxy.regions import OwnRegion, PeerRegion, RegionError, default_region_limit, size_for
from tritonrt.proxy.tensors import SENT_AS_IS, array_from
from tritonrt.proxy.types import Request
from tritonrt.proxy.wire import (
    FLAG_FINAL,
    FLAG_NEW_REGION,
    FLAG_RETAINED,
    HEADER_SIZE,
    KIND_ACK,
    KIND_BATCH,
    KIND_BATCH_ERROR,
    KIND_CANCEL,
    KIND_HELLO,
    KIND_METRICS,
    KIND_REFUSE,
    KIND_REPLY,
    KIND_WELCOME,
    LOCATION_INLINE,
    LOCATION_RECEIVER_REGION,
    LOCATION_SENDER_REGION,
    Header,
    RequestMeta,
    WireError,
    align,
)
from tritonrt.proxy.wire_decode import decode_batch, decode_body

__all__ = [
    "ErrorResponse",
    "InstanceIdentity",
    "PeerGone",
    "RegionError",
    "WorkerConnection",
    "WorkerSettings",
]

_NO_REGION = object()  # never any array's base
_NEVER_TO_THE_WORKER = frozenset((KIND_HELLO, KIND_WELCOME, KIND_REFUSE, KIND_REPLY, KIND_METRICS))  # after HELLO


@dataclasses.dataclass(frozen=True)
class WorkerSettings:
    """What the worker tells the backend in its WELCOME, and how it waits itself.

    ``from_env()`` reads ``TRITONRT_SPIN_US`` and ``TRITONRT_WORKER_SPIN_US`` (microseconds, 0: never poll).
    Polling spares a wake-up per message where a core is free, and costs one where none is. The backend polls
    for a reply (50 us by default), and only while replies keep coming within that time: for slower models it
    sleeps at once. The worker waits for the next batch asleep (its wait is the clients' think time).
    """

    inline_threshold: int = 64 << 10  # tensors of this many bytes or more travel through shared memory
    spin_us: int = 50  # the backend polls this long for a reply before it sleeps (0: never)
    region_limit: int = dataclasses.field(default_factory=default_region_limit)
    worker_spin_us: int = 0  # this side polls this long for the next batch before it sleeps

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> WorkerSettings:
        """The defaults, with ``TRITONRT_SPIN_US`` and ``TRITONRT_WORKER_SPIN_US`` when set."""
        environ = os.environ if environ is None else environ
        values = {}
        for field, variable in (("spin_us", "TRITONRT_SPIN_US"), ("worker_spin_us", "TRITONRT_WORKER_SPIN_US")):
            raw = environ.get(variable, "").strip()
            if raw:
                if not raw.isdigit():
                    raise ValueError(f"{variable}={raw!r}: use a whole number of microseconds >= 0 (0: no polling)")
                values[field] = int(raw)
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class InstanceIdentity:
    """What a backend instance must present to be served."""

    model_name: str
    instance_index: int
    token: str
    decoupled: bool = False
    max_batch_size: int = 0


class _MetaKey(NamedTuple):
    """What a batch's decoded metadata depends on (see WorkerConnection._decoded)."""

    meta: bytes
    records: int  # the header's count
    data_length: int
    in_region: bool
    in_peer_region: bool


# NamedTuple's own constructor is Python code; tuple.__new__ builds the same object in C (the hot path).
_meta_key = partial(tuple.__new__, _MetaKey)
_answer = partial(tuple.__new__, Answer)
_header = partial(tuple.__new__, Header)


class WorkerConnection:
    """A connected backend instance: :meth:`receive_batch`, then :meth:`reply` (or :meth:`fail`)."""

    def __init__(self, link: Link, identity: InstanceIdentity, settings: WorkerSettings):
        self.link, self.identity, self.settings = link, identity, settings
        self._peer: PeerRegion | None = None
        self._own: OwnRegion | None = None
        self._next_region_id = 1
        self._seq = 0
        self._used_peer_region = False  # the current batch has tensors in the backend's region
        self._replies = 0  # REPLY messages sent for the current batch
        self._region_reply = 0  # the last of them that used this side's region
        self.cancelled_requests: set[int] = set()  # requests of the current batch whose clients went away
        self._poll_lock = threading.Lock()  # Request.is_cancelled may be asked from the callable's own threads
        self._open = False  # a batch was received and its final answer not sent yet
        self.trace_contexts: list[str] = []  # Triton's trace context of each request of the current batch
        self._last_key: _MetaKey | None = None  # the last batch's metadata and header fields (see _decoded)
        self._last_decoded: list[RequestMeta] = []

    # -- receiving ---------------------------------------------------------------------------------------------

    def receive_batch(self) -> tuple[int, list[Request]]:
        """Wait for the next batch: ``(seq, requests)``. Raises PeerGone when the backend closed, WireError
        (after answering the batch with BATCH_ERROR) when the batch cannot be read."""
        while True:
            received = self._receive(None)
            if received is None:  # cannot happen: without a timeout, the link waits for a message or raises
                raise PeerGone("the backend's connection returned no message")
            header, buffer, fd = received
            if header.kind == KIND_BATCH:
                break
            self._control(header, buffer)
        self._seq, self._replies, self._region_reply, self._open = header.seq, 0, 0, True
        self.cancelled_requests = set()
        if self._own is not None:
            self._own.top = 0  # the backend copied every output of earlier batches before it sent this one
        try:
            return header.seq, self._requests(header, buffer, fd)
        except WireError as error:
            self.fail(header.seq, f"tritonrt: the batch cannot be read: {error}")
            raise

    def _receive(self, timeout: float | None) -> tuple[Header, bytearray, int] | None:
        received = self.link.receive(timeout)
        if received is not None and received[0].kind in _NEVER_TO_THE_WORKER:
            raise WireError(f"unexpected message of kind {received[0].kind}", breaks_stream=True)
        return received

    def _control(self, header: Header, buffer: bytearray) -> None:
        if header.kind == KIND_CANCEL and header.seq == self._seq:
            self.cancelled_requests.update(decode_body(header, buffer))
        elif header.kind == KIND_ACK and header.seq == self._seq and header.count >= self._region_reply:
            if self._own is not None:
                self._own.top = 0

    def cancelled_in(self, seq: int) -> set[int]:
        """The requests of batch ``seq`` cancelled so far (what ``Request.is_cancelled`` asks): the messages that
        arrived are read first, without waiting. Safe from any thread of the callable; a batch answered already
        reads nothing (the next batch's messages are not its own)."""
        with self._poll_lock:
            if not self._open or seq != self._seq:
                return set()
            return self.poll()

    def poll(self) -> set[int]:
        """Read the CANCEL and ACK messages that have arrived, without waiting; the cancelled requests. Where the
        callable's threads may ask :meth:`cancelled_in` meanwhile, hold ``_poll_lock`` (one reader at a time)."""
        while (received := self._receive(0)) is not None:
            header, buffer, fd = received
            if header.kind == KIND_BATCH:
                raise WireError("a new batch arrived before the last was answered", breaks_stream=True)
            self._control(header, buffer)
        return self.cancelled_requests

    def _requests(self, header: Header, buffer: bytearray, fd: int) -> list[Request]:
        if fd >= 0:
            self._peer = PeerRegion(header.region_id, fd, header.region_size)
        peer = self._peer
        if header.region_id and (peer is None or peer.id != header.region_id):
            raise WireError(f"the batch refers to region {header.region_id}, which is not mapped")
        self._used_peer_region = bool(header.region_id)
        data_start = header.data_start
        requests: list[Request] = []
        cancellation = _BatchCancellation(self, header.seq)
        decoded = self._decoded(header, buffer)
        self.trace_contexts = [meta.trace_context for meta in decoded]
        for meta in decoded:
            inputs: dict[str, np.ndarray] = {}
            for name, dtype, location, offset, byte_length, shape in meta.inputs:
                source: bytearray | np.ndarray
                if location == LOCATION_INLINE:
                    source, offset = buffer, data_start + offset
                else:
                    region = peer if location == LOCATION_SENDER_REGION else self._own
                    if region is None or offset + byte_length > region.size:
                        raise WireError(f"input {name!r} lies outside its region")
                    source = region.base
                inputs[name] = array_from(source, offset, dtype, shape, byte_length)
            parameters, requested = meta.parameters, meta.requested_outputs
            requests.append(
                Request(
                    inputs,
                    dict(parameters) if parameters else {},
                    None if requested is None else list(requested),
                    sequence_id=meta.correlation_id,
                    flags=meta.flags,
                    cancellation=cancellation,
                    index=len(requests),
                )
            )
        return requests

    def _decoded(self, header: Header, buffer: bytearray) -> list[RequestMeta]:
        """The batch's request records. Under steady traffic consecutive batches often carry the very same
        metadata (same inputs, shapes and offsets): it is decoded and checked once, then reused while its bytes
        and what its checks depended on (the header's count, data length and regions named) stay the same."""
        key = _meta_key(
            (
                bytes(memoryview(buffer)[HEADER_SIZE : HEADER_SIZE + header.meta_length]),
                header.count,
                header.data_length,
                header.region_id != 0,
                header.peer_region_id != 0,
            )
        )
        if key == self._last_key:
            return self._last_decoded
        decoded = decode_batch(header, buffer)
        self._last_key, self._last_decoded = key, decoded
        return decoded

    # -- sending -----------------------------------------------------------------------------------------------

    def reply(self, seq: int, responses: list[Any], *, final: bool = True) -> None:
        """Send one response per request of batch ``seq``, in order: a mapping of output name to array, an
        exception (the request fails with its message; ErrorResponse carries a code), or None (nothing this
        time, in a stream). The list is consumed. With ``final``, the answer to the batch is complete: the caller
        holds no reference to the batch's requests and inputs any more, so that this side can tell the backend
        whether the callable kept views of its region."""
        answer = self._sort(responses)  # (what it held of the callable's arrays is gone with its locals)
        parts, inline_end = lay_out_inline(answer.inline)
        region, announce = self._lay_out(answer.regional) if answer.regional else (None, False)
        meta = encode_records(answer.records)
        flags = (FLAG_FINAL if final else 0) | (FLAG_NEW_REGION if announce else 0)
        if final:
            with self._poll_lock:
                self._open = False
            if self._retained():
                flags |= FLAG_RETAINED
        self._replies += 1
        if region is not None and not final:
            self._region_reply = self._replies
        new_region = region if announce else None
        peer = self._peer
        header = _header((
            KIND_REPLY, flags, len(answer.records), seq, new_region.size if new_region is not None else 0,
            region.id if region is not None else 0, peer.id if peer is not None else 0, 0, 0,
        ))  # fmt: skip
        parts[0] = head = wire.encode_message(header, meta, inline_end)
        total = len(head) + inline_end
        if metrics.REGISTRY.pending:  # (the metrics' updates go first, in the same send)
            updates = metrics_messages(seq)
            parts.insert(0, updates)
            total += len(updates)
        self.link.send(parts, new_region.fd if new_region is not None else -1, total)
        if new_region is not None:
            new_region.close_fd()

    def _sort(self, responses: list[Any]) -> Answer:
        """Each response as a record, and the outputs that carry bytes by name and by where they go (consumes
        ``responses``). Outputs are grouped by name so that each output's tensors lie back to back."""
        threshold = self.settings.inline_threshold
        peer = self._peer
        # (Locals, gone when this returns: the reply asks whether the callable kept views of the region after.)
        peer_base: object = peer.base if peer is not None else _NO_REGION
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

    def _retained(self) -> bool:
        """True when arrays still view the backend's region used by this batch (see tritonrt.proxy.views)."""
        return self._used_peer_region and self._peer is not None and self._peer.viewed()

    def _lay_out(self, runs: dict[str, list[Outgoing]]) -> tuple[OwnRegion, bool]:
        """Copy the runs into this side's region (each run aligned), making a region when there is no room; the
        region, and whether it is new to the backend."""
        need = 0
        for run in runs.values():
            need = align(need) + sum(tensor.byte_length for tensor in run)
        own = self._own
        if own is not None and own.top and align(own.top) + need > own.size:
            with self._poll_lock:  # (cancelled_in may read the socket from the callable's threads meanwhile)
                self.poll()  # an ACK may have freed the region
        start = align(own.top) if own is not None else 0
        if own is None or start + need > own.size:
            own = self._own = OwnRegion(self._next_region_id, size_for(need, self.settings.region_limit))
            self._next_region_id += 1
            start = 0
        for run in runs.values():
            start = align(start)
            for tensor in run:
                array = tensor.payload  # (an array: large outputs are never turned into bytes)
                assert isinstance(array, np.ndarray)
                np.copyto(np.ndarray(array.shape, array.dtype, own.base, start), array)
                tensor.location, tensor.offset, tensor.payload = LOCATION_SENDER_REGION, start, None
                start += tensor.byte_length
        own.top = start
        announce = not own.announced
        own.announced = True
        return own, announce

    def fail(self, seq: int, message: str, code: int = wire.ERROR_INTERNAL) -> None:
        """Fail every request of batch ``seq`` that has no final response yet."""
        with self._poll_lock:
            self._open = False
        flags = FLAG_RETAINED if self._retained() else 0
        meta = wire.encode_batch_error(code, message)
        updates = metrics_messages(seq) if metrics.REGISTRY.pending else b""
        self.link.send([updates, wire.encode_message(Header(KIND_BATCH_ERROR, flags, 0, seq), meta)])

    def close(self) -> None:
        self.link.close()
        self._peer = self._own = None


class _BatchCancellation:
    """The requests of one batch ask their connection about that batch only."""

    __slots__ = ("_connection", "_seq")

    def __init__(self, connection: WorkerConnection, seq: int):
        self._connection, self._seq = connection, seq

    def cancelled(self) -> set[int]:
        return self._connection.cancelled_in(self._seq)
