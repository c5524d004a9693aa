"""The worker's end of the native backend's connection: listen, shake hands, receive batches as numpy arrays
built on the received bytes or the backend's region (no copy), send replies (outputs copied once into this
side's region, or inline when small, or by reference when they are views of an input's region).

:mod:`tritonrt.proxy.listener` listens and shakes hands: one listener per model instance (one inference
callable); the backend instance connects to it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np

from tritonrt import metrics
from tritonrt.proxy import wire
from tritonrt.proxy.calls import (
    OUTSIDE,
    TIMED_OUT,
    Answer,
    CallAnswer,
    CallRequest,
    CallTable,
    Closed,
    Files,
    TritonModelException,
    callee_responses,
    encode_call,
    file_spans,
)
from tritonrt.proxy.link import Link, PeerGone
from tritonrt.proxy.outgoing import (
    ErrorResponse,
    Outgoing,
    encode_records,
    inline_answer,
    lay_out_inline,
    metrics_messages,
    sort_outgoing,
)
from tritonrt.proxy.regions import OwnRegion, PeerRegion, RegionError, size_for
from tritonrt.proxy.settings import InstanceIdentity, WorkerSettings
from tritonrt.proxy.tensors import array_from
from tritonrt.proxy.types import BatchCancellation, Request
from tritonrt.proxy.wire import (
    FLAG_FINAL,
    FLAG_NEW_REGION,
    FLAG_RETAINED,
    HEADER_SIZE,
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
    LOCATION_SENDER_REGION,
    Header,
    RequestMeta,
    WireError,
    align,
)
from tritonrt.proxy.wire_decode import decode_batch, decode_body, decode_infer_response

__all__ = [
    "ErrorResponse",
    "InstanceIdentity",
    "PeerGone",
    "RegionError",
    "WorkerConnection",
    "WorkerSettings",
]

# (after HELLO)
_NEVER_TO_THE_WORKER = frozenset(
    (KIND_HELLO, KIND_WELCOME, KIND_REFUSE, KIND_REPLY, KIND_METRICS, KIND_INFER, KIND_INFER_CANCEL, KIND_CONTROL)
)
_ANSWERED = Closed("the request that made this call was answered before the call ended: its answer is dropped")
_GONE = Closed("the connection to tritonserver's backend closed before the call ended", wire.ERROR_UNAVAILABLE)


# NamedTuple's own constructor is Python code; tuple.__new__ builds the same object in C (the hot path).
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
        self._last_meta = b""  # the last batch's metadata, and the header fields its checks depended on (_decoded)
        self._last_fields: tuple[int, int, int, bool, bool] | None = None
        self._last_decoded: list[RequestMeta] = []
        self._last_traces: list[str] = []  # their trace contexts
        # Calls (BLS, see tritonrt.proxy.calls): the callable's threads send under _send_lock (after the batch's
        # state under _poll_lock, never the other way round), and read under _turn (one thread at a time).
        self.calls = CallTable()  # (guarded by _poll_lock)
        self._send_lock = threading.Lock()
        self._turn = threading.Condition(self._poll_lock)
        self._reading = False  # a thread reads the socket outside the lock (it files what it reads)
        self._pending: tuple[Header, bytearray, int] | None = None  # a BATCH that a call's reader read
        self._region_call = False  # a call of the current batch has inputs in this side's region
        self._batch_size = 0
        self.batch_flags = 0  # the current batch's header flags (FLAG_RERUN: run again after its worker died)
        self._cancelled_calls: set[int] = set()  # calls told INFER_CANCEL because every request was cancelled

    # -- receiving ---------------------------------------------------------------------------------------------

    def receive_batch(self) -> tuple[int, list[Request]]:
        """Wait for the next batch: ``(seq, requests)``. Raises PeerGone when the backend closed, WireError
        (after answering the batch with BATCH_ERROR) when the batch cannot be read."""
        while True:
            received = self._pending_or_next() if self._reading or self._pending is not None else self._receive(None)
            if received is None:  # cannot happen: without a timeout, the link waits for a message or raises
                raise PeerGone("the backend's connection returned no message")
            header, buffer, fd = received
            if header.kind == KIND_BATCH:
                break
            with self._poll_lock:
                self._dispatch(header, buffer, fd)
        self._seq, self._replies, self._region_reply, self._open = header.seq, 0, 0, True
        self.batch_flags = header.flags
        self.cancelled_requests = set()
        if self._region_call or self._cancelled_calls:
            self._region_call = False
            self._cancelled_calls = set()
        self._batch_size = header.count
        self.calls.reopen()
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

    def _pending_or_next(self) -> tuple[Header, bytearray, int] | None:
        """The next message, where a call's reader may read it (a thread of the last batch's callable still
        waiting): wait for it to finish, and take the batch it read if it did."""
        with self._turn:
            while self._reading and self._pending is None:
                self._turn.wait()
            pending, self._pending = self._pending, None
        return pending if pending is not None else self._receive(None)

    def _dispatch(self, header: Header, buffer: bytearray, fd: int) -> None:
        """File a message that is not the batch awaited (hold _poll_lock): CANCEL, ACK, the answers of calls, and
        (read by a call's reader) the next batch."""
        kind = header.kind
        if kind == KIND_INFER_RESPONSE:
            if fd >= 0:
                self._peer = PeerRegion(header.region_id, fd, header.region_size)
            answer = decode_infer_response(header, buffer)
            if answer.call_id in self.calls:
                peer = self._peer
                if header.region_id and (peer is None or peer.id != header.region_id):
                    raise WireError(f"a call's answer refers to region {header.region_id}, which is not mapped")
                responses, in_region = callee_responses(answer, buffer, header.data_start, peer)
                self._used_peer_region |= in_region
                self.calls.deliver(answer.call_id, CallAnswer(responses, bool(header.flags & FLAG_FINAL)))
        elif kind == KIND_CONTROL_RESULT:
            result = decode_body(header, buffer)
            self.calls.deliver(result.call_id, result)
        elif kind == KIND_BATCH:
            if self._open:
                raise WireError("a new batch arrived before the last was answered", breaks_stream=True)
            self._pending = (header, buffer, fd)
        elif kind == KIND_CANCEL and header.seq == self._seq:
            self.cancelled_requests.update(decode_body(header, buffer))
        elif kind == KIND_ACK and header.seq == self._seq and header.count >= self._region_reply:
            if self._own is not None and not self._region_call:  # (a call's inputs stay until the next batch)
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
        """Read the messages that have arrived, without waiting (none while a call's reader reads); the cancelled
        requests. Hold ``_poll_lock`` (the callable's threads may ask :meth:`cancelled_in` meanwhile)."""
        while not self._reading and (received := self._receive(0)) is not None:
            header, buffer, fd = received
            if header.kind == KIND_BATCH:
                raise WireError("a new batch arrived before the last was answered", breaks_stream=True)
            self._dispatch(header, buffer, fd)
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
        cancellation = BatchCancellation(self.cancelled_in, header.seq)
        decoded = self._decoded(header, buffer)
        self.trace_contexts = self._last_traces
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
        end = HEADER_SIZE + header.meta_length
        fields = (end, header.count, header.data_length, header.region_id != 0, header.peer_region_id != 0)
        if fields == self._last_fields and buffer.startswith(self._last_meta, HEADER_SIZE):  # (compares in place)
            return self._last_decoded
        decoded = decode_batch(header, buffer)
        self._last_meta, self._last_fields, self._last_decoded = bytes(buffer[HEADER_SIZE:end]), fields, decoded
        self._last_traces = [meta.trace_context for meta in decoded]
        return decoded

    # -- sending -----------------------------------------------------------------------------------------------

    def reply(self, seq: int, responses: list[Any], *, final: bool = True) -> None:
        """Send one response per request of batch ``seq``, in order: a mapping of output name to array, an
        exception (the request fails with its message; ErrorResponse carries a code), or None (nothing this
        time, in a stream). The list is consumed. With ``final``, the answer to the batch is complete: the caller
        holds no reference to the batch's requests and inputs any more, so that this side can tell the backend
        whether the callable kept views of its region."""
        # (What sort_outgoing and inline_answer held of the callable's arrays is gone with their locals.)
        simple = inline_answer(responses, self.settings.inline_threshold, self._peer)
        answer = None
        if simple is None:
            answer = sort_outgoing(responses, self.settings.inline_threshold, self._peer)
            parts, inline_end = lay_out_inline(answer.inline)
            count = len(answer.records)
        else:
            meta, parts, inline_end = simple
            count = 1
        with self._send_lock:  # (the callable's threads may send calls meanwhile, into the same region)
            region, announce = None, False
            if answer is not None:
                if answer.regional:
                    region, announce = self._lay_out(answer.regional)
                meta = encode_records(answer.records)
            flags = (FLAG_FINAL if final else 0) | (FLAG_NEW_REGION if announce else 0)
            if final:
                self._close_batch()
                if self._retained():
                    flags |= FLAG_RETAINED
            self._replies += 1
            if region is not None and not final:
                self._region_reply = self._replies
            new_region = region if announce else None
            peer = self._peer
            header = _header((
                KIND_REPLY, flags, count, seq, new_region.size if new_region is not None else 0,
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
        meta = wire.encode_batch_error(code, message)
        with self._send_lock:
            self._close_batch()
            flags = FLAG_RETAINED if self._retained() else 0
            updates = metrics_messages(seq) if metrics.REGISTRY.pending else b""
            self.link.send([updates, wire.encode_message(Header(KIND_BATCH_ERROR, flags, 0, seq), meta)])

    def _close_batch(self, why: Closed = _ANSWERED) -> None:
        """The batch is answered (or the connection ends): no more calls; those in flight end with ``why``."""
        with self._poll_lock:  # (_turn's lock: a plain lock's with costs no Python call, a Condition's two)
            self._open = False
            busy = len(self.calls)
            self.calls.close(why)
            if busy:
                self._turn.notify_all()

    def close(self) -> None:
        self._close_batch(_GONE)
        self.link.close()
        self._peer = self._own = None

    # -- calls (BLS: see tritonrt.proxy.calls) -----------------------------------------------------------------

    def call(self, seq: int, call: CallRequest, inputs: Mapping[str, np.ndarray]) -> int:
        """Send an INFER of batch ``seq`` (its inputs inline or in this side's region); the call's id.
        TritonModelException when batch ``seq`` is not executing any more."""
        # (By copy: the protocol lets a call's inputs lie inline or in this side's region only.)
        record = sort_outgoing([inputs], self.settings.inline_threshold, self._peer, by_reference=False)
        tensors = record.records[0]
        if not isinstance(tensors, list):
            raise TritonModelException(f"the inputs of a call of {call.model_name!r}: {tensors}")
        with self._send_lock:
            with self._poll_lock:
                if not self._open or seq != self._seq:
                    raise TritonModelException(OUTSIDE)
                self._region_call |= bool(record.regional)
            parts, inline_end = lay_out_inline(record.inline)
            try:
                region, announce = self._lay_out(record.regional) if record.regional else (None, False)
            except RegionError as error:
                raise TritonModelException(f"the inputs of a call of {call.model_name!r}: {error}") from None
            with self._poll_lock:
                call_id = self.calls.open()
            meta = encode_call(call_id, call, tensors)
            new_region = region if announce else None
            peer = self._peer
            header = _header((
                KIND_INFER, FLAG_NEW_REGION if announce else 0, 1, seq, new_region.size if new_region else 0,
                region.id if region is not None else 0, peer.id if peer is not None else 0, 0, 0,
            ))  # fmt: skip
            parts[0] = head = wire.encode_message(header, meta, inline_end)
            self.link.send(parts, new_region.fd if new_region is not None else -1, len(head) + inline_end)
        if new_region is not None:
            new_region.close_fd()
        return call_id

    def next_answer(self, seq: int, call_id: int, deadline: float | None = None) -> Answer:
        """The next answer of call ``call_id`` (read here unless another thread reads); cancelled (INFER_CANCEL)
        once every request of the batch was cancelled or ``deadline`` (``time.monotonic()``) passed."""
        with self._turn:
            while (answer := self.calls.take(call_id)) is None:
                expired = deadline is not None and time.monotonic() >= deadline
                if expired or (self._batch_size and len(self.cancelled_requests) >= self._batch_size):
                    if call_id not in self._cancelled_calls:
                        self._cancelled_calls.add(call_id)
                        self._turn.release()
                        try:
                            self.cancel_call(seq, call_id)
                        finally:
                            self._turn.acquire()
                    if expired:  # (the callee may wait for this very instance: its answer is not awaited)
                        self.calls.abandon(call_id)
                        return TIMED_OUT
                    if (answer := self.calls.take(call_id)) is not None:
                        break
                wait = None if deadline is None else max(0.0, deadline - time.monotonic())
                if self._reading:
                    self._turn.wait(wait)
                    continue
                self._read_for_calls(wait)
        return answer

    def _read_for_calls(self, timeout: float | None) -> None:
        """Read a message (at most ``timeout`` s) outside the lock, held on entry and exit; file it, or on a
        broken connection end every call."""
        self._reading = True
        self._turn.release()
        gone: BaseException | None = None
        try:
            received = self._receive(timeout)
        except (PeerGone, WireError, OSError) as error:
            received, gone = None, error
        finally:
            self._turn.acquire()
            self._reading = False
            self._turn.notify_all()
        try:
            if received is not None:
                self._dispatch(*received)
                return
        except WireError as error:
            gone = error
        if gone is not None:  # (else nothing came within the timeout)
            self._break(f"the connection to tritonserver's backend broke: {gone}")

    def _break(self, message: str) -> None:
        """End every call and the connection (hold the lock): the worker sees it closed and waits for another."""
        self.calls.close(Closed(message, wire.ERROR_UNAVAILABLE))
        self._open = False
        try:
            self.link.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def cancel_call(self, seq: int, call_id: int) -> None:
        """Ask the backend to cancel a call in flight (INFER_CANCEL); nothing once it ended."""
        with self._send_lock:
            with self._poll_lock:
                if not self._open or seq != self._seq or call_id not in self.calls:
                    return
            header = _header((KIND_INFER_CANCEL, 0, 0, seq, 0, 0, 0, 0, 0))
            self.link.send([wire.encode_message(header, wire.encode_infer_cancel(call_id))])

    def control(self, seq: int, op: int, model_name: str, version: int, config: str, files: Files) -> Answer:
        """Send a CONTROL of batch ``seq`` (the files' bytes in its data section) and wait for its result."""
        spans, end = file_spans(model_name, files)
        with self._send_lock:
            with self._poll_lock:
                if not self._open or seq != self._seq:
                    raise TritonModelException(OUTSIDE)
                call_id = self.calls.open()
            meta = wire.encode_control(wire.Control(call_id, op, version, model_name, config, tuple(spans)))
            head = wire.encode_message(_header((KIND_CONTROL, 0, 0, seq, 0, 0, 0, 0, 0)), meta, end)
            self.link.send([head, *(content for _, content in files)])
        return self.next_answer(seq, call_id)
