"""The worker's end of the native backend's connection, driven by a backend written in Python (FakeBackend)."""

from __future__ import annotations

import concurrent.futures
import gc
import os
import stat
import struct

import numpy as np
import pytest
from native_testlib import FakeBackend

from tritonrt.decorators.batching import _join_adjacent
from tritonrt.proxy import wire
from tritonrt.proxy.connection import (
    ErrorResponse,
    InstanceIdentity,
    PeerGone,
    RegionError,
    WorkerSettings,
)
from tritonrt.proxy.listener import WorkerListener
from tritonrt.proxy.regions import PeerRegion
from tritonrt.proxy.wire import RequestMeta, TensorMeta, WireError
from tritonrt.proxy.wire_decode import decode_body

TOKEN = "0123456789abcdef" * 4
IDENTITY = InstanceIdentity("m", 0, TOKEN, False, 8)
THRESHOLD = 1024


def hello(**changes) -> wire.Hello:
    return wire.Hello(0, 8, 1, 19, "m", TOKEN, "test")._replace(**changes)


@pytest.fixture
def listener(tmp_path):
    settings = WorkerSettings(inline_threshold=THRESHOLD, region_limit=8 << 20)
    listener = WorkerListener(tmp_path / "w.sock", IDENTITY, settings)
    yield listener
    listener.close()


@pytest.fixture
def pair(listener):
    """(worker connection, fake backend) after a successful handshake."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        accepted = pool.submit(listener.accept)
        backend = FakeBackend(listener.path, hello())
        header, _ = backend.read()
        assert header.kind == wire.KIND_WELCOME
        connection = accepted.result(10)
    yield connection, backend
    connection.close()
    backend.close()


def fp32(values) -> bytes:
    return np.asarray(values, np.float32).tobytes()


def tensor(name, dtype, location, offset, data_or_length, shape) -> TensorMeta:
    length = data_or_length if isinstance(data_or_length, int) else len(data_or_length)
    return TensorMeta(name, dtype, location, offset, length, tuple(shape))


def request(*inputs, parameters=None, requested=None) -> RequestMeta:
    return RequestMeta("", 0, None, parameters or {}, requested, list(inputs))


def reply_of(backend: FakeBackend):
    header, message = backend.read()
    return header, message, decode_body(header, message)


def test_the_socket_is_private(listener):
    assert stat.S_IMODE(os.stat(listener.path).st_mode) == 0o600


def test_the_right_instance_is_welcomed_with_the_settings(listener):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        accepted = pool.submit(listener.accept)
        backend = FakeBackend(listener.path, hello())
        header, message = backend.read()
        accepted.result(10).close()
    welcome = decode_body(header, message)
    assert (welcome.worker_pid, welcome.inline_threshold, welcome.region_limit) == (os.getpid(), THRESHOLD, 8 << 20)
    backend.close()


@pytest.mark.parametrize(
    ("changes", "decoupled", "reason"),
    [
        ({"token": "f" * 64}, False, "token"),
        ({"model_name": "other"}, False, "serves model 'other'"),
        ({"instance_index": 3}, False, "instance 3"),
        ({}, True, "decoupled"),
        ({"max_batch_size": 0}, False, "max_batch_size"),
    ],
)
def test_a_mismatched_instance_is_refused_with_the_reason(listener, changes, decoupled, reason):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        accepted = pool.submit(listener.accept)
        backend = FakeBackend(listener.path, hello(**changes), decoupled=decoupled)
        header, message = backend.read()
        assert header.kind == wire.KIND_REFUSE and reason in decode_body(header, message)
        with pytest.raises(ConnectionError):
            backend.read()  # the worker closed it
        backend.close()
        good = FakeBackend(listener.path, hello())  # the listener goes on
        assert good.read()[0].kind == wire.KIND_WELCOME
        accepted.result(10).close()
        good.close()
    assert reason in listener.refusals[0]


def test_another_protocol_version_is_refused_in_this_one(listener):
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(listener.accept)
        import socket

        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(listener.path))
        header = bytearray(wire.encode_message(wire.Header(wire.KIND_HELLO), wire.encode_hello(hello())))
        header[4:6] = struct.pack("<H", wire.VERSION + 1)
        sock.sendall(header)
        answer = sock.recv(4096)
        refused = wire.decode_header(answer)
        assert refused.kind == wire.KIND_REFUSE
        assert f"version {wire.VERSION + 1}" in decode_body(refused, answer)
        sock.close()
        listener.close()


def test_inline_inputs_are_views_of_the_received_bytes(pair):
    connection, backend = pair
    data = fp32([1, 2, 3, 4]) + fp32([5, 6, 7, 8]) + b"\x01\x00\x01"
    requests = [
        request(tensor("X", wire.DTYPE_FP32, 0, 0, 16, (1, 4))),
        request(tensor("X", wire.DTYPE_FP32, 0, 16, 16, (1, 4)), tensor("M", wire.DTYPE_BOOL, 0, 32, 3, (3,))),
    ]
    seq = backend.send_batch(requests, data)
    got_seq, received = connection.receive_batch()
    assert got_seq == seq
    first, second = received[0]["X"], received[1]["X"]
    np.testing.assert_array_equal(first, [[1, 2, 3, 4]])
    np.testing.assert_array_equal(received[1]["M"], [True, False, True])
    assert type(first.base) is bytearray and first.base is second.base  # no copy
    assert received[0].requested_output_names is None and received[0].parameters == {}


def test_regional_inputs_are_views_of_the_backends_region_and_batch_without_a_copy(pair):
    connection, backend = pair
    region = backend.new_region(1 << 20)
    rows = [np.full((1, 8192), i, np.float32) for i in range(3)]  # 32 KiB each, back to back
    for index, row in enumerate(rows):
        region.map[index * row.nbytes : (index + 1) * row.nbytes] = row.tobytes()
    size = rows[0].nbytes
    requests = [request(tensor("X", wire.DTYPE_FP32, 1, i * size, size, (1, 8192))) for i in range(3)]
    backend.send_batch(requests, region=True, announce=True)
    _, received = connection.receive_batch()
    arrays = [r["X"] for r in received]
    joined = _join_adjacent(arrays)  # what @batch does with them
    assert joined is not None and joined.shape == (3, 8192)
    np.testing.assert_array_equal(joined[:, 0], [0, 1, 2])
    region.base[0:4] = np.frombuffer(np.float32(42).tobytes(), np.uint8)  # the backend's memory, seen in place
    assert arrays[0][0, 0] == 42 and joined[0, 0] == 42


def test_the_backends_region_is_mapped_read_only(pair):
    """The worker cannot change the backend's memory: its mapping is PROT_READ, so the arrays built on it are not
    writeable (inline inputs, views of this process's own receive buffer, stay writeable)."""
    connection, backend = pair
    region = backend.new_region(1 << 20)
    region.map[0:4096] = np.arange(1024, dtype=np.float32).tobytes()
    inputs = [tensor("X", wire.DTYPE_FP32, 1, 0, 4096, (1, 1024)), tensor("S", wire.DTYPE_FP32, 0, 0, 8, (2,))]
    backend.send_batch([request(*inputs)], fp32([1, 2]), region=True, announce=True)
    _, (received,) = connection.receive_batch()
    x = received["X"]
    assert not x.flags.writeable and not x.base.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        x[0, 0] = 5
    with pytest.raises(TypeError, match="readonly"):
        connection._peer.map[0:1] = b"\x01"
    assert region.map[0:4] == np.float32(0).tobytes()  # unchanged
    assert received["S"].flags.writeable


def test_outputs_go_inline_through_the_region_or_back_by_reference(pair):
    connection, backend = pair
    region = backend.new_region(1 << 20)
    region.map[0:8192] = np.arange(2048, dtype=np.float32).tobytes()
    seq = backend.send_batch([request(tensor("X", wire.DTYPE_FP32, 1, 0, 8192, (1, 2048)))], region=True, announce=True)
    _, received = connection.receive_batch()
    x = received[0]["X"]
    outputs = {
        "same": x[:, 1024:],  # a view of the input: by reference
        "computed": x * 2,  # large and new: through the worker's region
        "small": np.array([[1.5, 2.5]], np.float32),
        "flags": np.array([True, False]),
        "half": np.array([1, 2], np.float16),
        "text": np.array([b"ab", "é", b""], dtype=object),
        "long_text": np.array([[b"x" * 2000]], dtype=object),  # serialized over the threshold: the region
        "empty": np.zeros((1, 0), np.int64),
        "strided": np.arange(12, dtype=np.int32).reshape(3, 4).T,
        "big_endian": np.array([1, 258], dtype=">i4"),
        "scalar": np.array(7, np.int8),
    }
    expected = {name: np.array(array, order="C") for name, array in outputs.items() if "text" not in name}  # copies
    responses = [outputs]
    received = x = outputs = None  # the callable keeps nothing: the reply is not "retained"
    connection.reply(seq, responses)
    header, message, (response,) = reply_of(backend)
    assert header.flags == wire.FLAG_FINAL | wire.FLAG_NEW_REGION  # and not retained
    peer = PeerRegion(header.region_id, backend.fds.pop(0), header.region_size)
    found = {}
    for name, dtype, location, offset, length, shape in response.outputs:
        if location == wire.LOCATION_INLINE:
            raw = message[header.data_start + offset : header.data_start + offset + length]
        elif location == wire.LOCATION_SENDER_REGION:
            raw = peer.map[offset : offset + length]
        else:
            assert name == "same" and offset == 4096 and header.peer_region_id == region.id
            raw = region.map[offset : offset + length]
        found[name] = (dtype, shape, raw, location)
    for name, array in expected.items():
        dtype, shape, raw, _ = found[name]
        assert shape == array.shape and raw == array.astype(array.dtype.newbyteorder("<")).tobytes(), name
    assert found["computed"][3] == wire.LOCATION_SENDER_REGION
    assert found["text"][0] == wire.DTYPE_BYTES and found["text"][2] == b"\x02\0\0\0ab\x02\0\0\0\xc3\xa9\0\0\0\0"
    dtype, shape, raw, location = found["long_text"]
    assert (dtype, shape, location) == (wire.DTYPE_BYTES, (1, 1), wire.LOCATION_SENDER_REGION)
    assert raw == struct.pack("<I", 2000) + b"x" * 2000


def test_views_kept_by_the_callable_are_reported_retained(pair):
    connection, backend = pair
    backend.new_region(1 << 20)
    for announce in (True, False):
        inputs = [request(tensor("X", wire.DTYPE_FP32, 1, 0, 4096, (1, 1024)))]
        seq = backend.send_batch(inputs, region=True, announce=announce)
        _, received = connection.receive_batch()
        kept = received[0]["X"][:, :2] if announce else None  # the first call keeps a view
        received = None
        connection.reply(seq, [{}])
        header, _, _ = reply_of(backend)
        assert bool(header.flags & wire.FLAG_RETAINED) == announce
        del kept
        gc.collect()


def test_errors_and_empty_answers_per_request(pair):
    connection, backend = pair
    seq = backend.send_batch([request(), request(), request()])
    connection.receive_batch()
    connection.reply(seq, [ErrorResponse("row is bad", wire.ERROR_INVALID_ARG), ValueError("boom"), None])
    _, _, responses = reply_of(backend)
    assert responses[0] == wire.ResponseMeta(wire.STATUS_ERROR, [], wire.ERROR_INVALID_ARG, "row is bad")
    assert responses[1] == wire.ResponseMeta(wire.STATUS_ERROR, [], wire.ERROR_INTERNAL, "ValueError: boom")
    assert responses[2].status == wire.STATUS_NONE


def test_outputs_over_the_region_limit_fail_the_batch_clearly(pair):
    connection, backend = pair
    seq = backend.send_batch([request()])
    connection.receive_batch()
    with pytest.raises(RegionError, match="more than the region limit"):
        connection.reply(seq, [{"huge": np.zeros(9 << 20, np.uint8)}])
    connection.fail(seq, "too big", wire.ERROR_UNAVAILABLE)
    header, message, body = reply_of(backend)
    assert header.kind == wire.KIND_BATCH_ERROR and body == (wire.ERROR_UNAVAILABLE, "too big")


def test_stream_cancellation_and_region_reuse_after_an_ack(pair):
    connection, backend = pair
    seq = backend.send_batch([request(), request()])
    connection.receive_batch()
    big = np.ones(THRESHOLD, np.uint8)
    connection.reply(seq, [{"y": big}, None], final=False)
    first, _, _ = reply_of(backend)
    backend.send_control(wire.KIND_ACK, 1)
    backend.send_control(wire.KIND_CANCEL, 1, wire.encode_cancel([1]))
    assert _poll_until(connection, lambda cancelled: cancelled == {1}) == {1}
    connection.reply(seq, [{"y": big}, None], final=False)
    second, _, _ = reply_of(backend)
    assert second.region_id == first.region_id and not second.flags & wire.FLAG_NEW_REGION  # space reused
    connection.reply(seq, [], final=True)
    assert reply_of(backend)[0].flags & wire.FLAG_FINAL


def test_a_reply_that_waits_for_room_reads_the_socket_under_the_poll_lock(pair):
    """reply() reads the ACKs that arrived when its region is full (_lay_out -> poll): it holds the lock that
    cancelled_in() holds, so that a callable's thread asking Request.is_cancelled never reads the socket at the
    same time (two readers would split a message between them)."""
    connection, backend = pair
    seq = backend.send_batch([request(), request()])
    connection.receive_batch()
    big = np.ones(THRESHOLD, np.uint8)
    connection.reply(seq, [{"y": big}, None], final=False)
    reply_of(backend)
    held_while_reading: list[bool] = []
    receive = connection.link.receive

    def recording_receive(timeout):
        held_while_reading.append(connection._poll_lock.locked())
        return receive(timeout)

    connection.link.receive = recording_receive
    full = connection._own.size  # more than the room left: the reply polls for an ACK first
    connection.reply(seq, [{"y": np.ones(full, np.uint8)}, None], final=False)
    reply_of(backend)
    assert held_while_reading and all(held_while_reading), held_while_reading
    connection.reply(seq, [], final=True)
    reply_of(backend)


def _poll_until(connection, done, attempts: int = 200):
    import time

    for _ in range(attempts):
        cancelled = connection.poll()
        if done(cancelled):
            return cancelled
        time.sleep(0.01)
    return connection.cancelled


@pytest.mark.parametrize(
    ("inputs", "data", "reason"),
    [
        ([tensor("X", wire.DTYPE_FP32, 0, 8, 16, (1, 4))], fp32([1, 2, 3, 4]), "outside"),
        ([tensor("X", wire.DTYPE_FP32, 1, 0, 16, (1, 4))], b"", "names none"),
        ([tensor("S", wire.DTYPE_BYTES, 0, 0, 5, (1,))], b"\x09\0\0\0x", "runs past"),
        ([tensor("B", wire.DTYPE_BF16, 0, 0, 2, (1,))], b"\0\0", "bfloat16"),
    ],
)
def test_a_batch_that_cannot_be_read_is_answered_with_an_error(pair, inputs, data, reason):
    connection, backend = pair
    backend.send_batch([request(*inputs)], data)
    with pytest.raises(WireError, match=reason):
        connection.receive_batch()
    header, _, (code, message) = reply_of(backend)
    assert header.kind == wire.KIND_BATCH_ERROR and reason in message


def test_repeated_metadata_is_checked_against_each_batchs_data_and_gives_each_request_its_own_parameters(pair):
    """Steady traffic repeats a batch's metadata, whose decoding the connection reuses: each batch must still get
    its own data, fresh parameters and requested outputs, and the checks that depend on the header."""
    connection, backend = pair
    x = request(tensor("X", wire.DTYPE_FP32, 0, 0, 16, (1, 4)), parameters={"k": 1}, requested=["Y"])
    for values in ([1, 2, 3, 4], [5, 6, 7, 8]):
        backend.send_batch([x], fp32(values))
        seq, (received,) = connection.receive_batch()
        np.testing.assert_array_equal(received["X"], [values])
        assert received.parameters == {"k": 1} and received.requested_output_names == ["Y"]
        received.parameters["k"] = 2  # a callable may change what it was given
        received.requested_output_names.append("Z")
        connection.reply(seq, [{"Y": received["X"] * 2}])
        received = None
        header, message, (response,) = reply_of(backend)
        (output,) = response.outputs
        data = message[header.data_start + output.offset :][: output.byte_length]
        np.testing.assert_array_equal(np.frombuffer(data, np.float32), np.asarray(values, np.float32) * 2)
    backend.send_batch([x], fp32([1, 2]))  # the same metadata, but the data section is too short for it
    with pytest.raises(WireError, match="outside"):
        connection.receive_batch()
    assert reply_of(backend)[0].kind == wire.KIND_BATCH_ERROR


def test_the_backend_closing_ends_the_connection(pair):
    connection, backend = pair
    backend.sock.close()
    with pytest.raises(PeerGone):
        connection.receive_batch()
