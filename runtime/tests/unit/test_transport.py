"""The proxy transport between two real channels over a Unix socket pair (no tritonserver needed)."""

from __future__ import annotations

import contextvars
import os
import socket
import threading
import time
import uuid

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.memory import data_address
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig
from tritonrt.proxy import arena, protocol, transport
from tritonrt.proxy.transport import SHM_THRESHOLD, Channel, PeerGone
from tritonrt.proxy.worker import CallableWorker

LARGE = SHM_THRESHOLD // 4  # float32 elements: one tensor of exactly the shared-memory threshold


@pytest.fixture
def pair():
    """(stub end, worker end): both may create shared memory, as in tritonrt."""
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    prefix = f"tritonrt_test_{uuid.uuid4().hex[:8]}_"
    stub, worker = Channel(a, prefix + "stub_"), Channel(b, prefix + "worker_")
    yield stub, worker
    stub.close()
    worker.close()
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


def round_trip(stub: Channel, worker: Channel, requests: list[dict], callable_) -> tuple[list[dict], bool]:
    """Send requests like the proxy model, answer them with ``callable_`` like the worker; (outputs, retire)."""
    stub.send(protocol.INFER, [((None, None), tensors) for tensors in requests])
    _, _, inputs, _ = worker.recv()
    groups = [(None, response) for response in callable_(inputs)]
    inputs = None
    worker.send(protocol.OK, groups, report_retained=True)
    kind, _, outputs, (_, retire) = stub.recv()
    assert kind == protocol.OK
    return outputs, retire


def test_small_and_large_tensors_of_every_kind_arrive_intact(pair):
    stub, worker = pair
    tensors = {
        "small": np.arange(6, dtype=np.int16).reshape(2, 3),
        "large": np.random.default_rng(0).random((1, LARGE), dtype=np.float32),
        "strided": np.arange(40, dtype=np.float64).reshape(4, 10)[:, ::3],
        "scalar": np.array(7.5),
        "empty": np.zeros((0, 4), dtype=np.uint8),
        "flags": np.array([[True, False]]),
        "text": np.array([["é", "b"]], dtype=object),
        "blob": np.array([b"\x00\x01", b""], dtype=np.bytes_),
    }
    outputs, _ = round_trip(stub, worker, [tensors], lambda requests: [dict(r) for r in requests])
    for name, sent in tensors.items():
        got = outputs[0][name]
        assert got.shape == sent.shape, name
        if sent.dtype.kind in "OSU":
            assert got.ravel().tolist() == [v.encode() if isinstance(v, str) else bytes(v) for v in sent.ravel()]
        else:
            assert got.dtype == sent.dtype and np.array_equal(got, sent), name


def test_a_batch_of_large_inputs_is_joined_without_a_copy(pair):
    stub, worker = pair
    requests = [{"x": np.full((1, LARGE), i, dtype=np.float32), "y": np.full((1, 3), i)} for i in range(4)]
    seen = {}

    @batch
    def infer(x, y):
        seen["x_owns_data"] = x.flags.owndata or x.base is None
        seen["y_rows"] = y.shape[0]
        return {"out": x * 2}

    outputs, _ = round_trip(stub, worker, requests, infer)
    assert seen == {"x_owns_data": False, "y_rows": 4}  # x is a view of the message, y was concatenated
    assert [float(o["out"][0, 0]) for o in outputs] == [0.0, 2.0, 4.0, 6.0]


def test_a_batch_of_inline_inputs_is_joined_without_a_copy(pair):
    stub, worker = pair
    rows = SHM_THRESHOLD // 16  # float32 elements: a quarter of the threshold, so each tensor travels inline
    requests = [{"x": np.full((1, rows), i, dtype=np.float32)} for i in range(4)]
    seen = {}

    @batch
    def infer(x):
        seen["x_owns_data"] = x.flags.owndata or x.base is None
        return {"out": x[:, :2] + 1}

    outputs, _ = round_trip(stub, worker, requests, infer)
    assert seen == {"x_owns_data": False}  # one view of the receive buffer spans the four requests
    assert [o["out"].tolist() for o in outputs] == [[[1.0, 1.0]], [[2.0, 2.0]], [[3.0, 3.0]], [[4.0, 4.0]]]


def test_an_input_returned_as_output_comes_back_by_reference(pair):
    stub, worker = pair
    x = np.random.default_rng(1).random((3, LARGE), dtype=np.float32)
    outputs, retire = round_trip(
        stub, worker, [{"x": x}], lambda requests: [{"same": r["x"], "part": r["x"][1:]} for r in requests]
    )
    assert np.array_equal(outputs[0]["same"], x) and np.array_equal(outputs[0]["part"], x[1:])
    assert not retire
    # The reply carried references into the stub's own request region: nothing was copied into the worker's.
    assert worker._out is None


@pytest.mark.parametrize("keep", ["array", "derived view", "nothing"])
def test_inputs_kept_by_the_callable_retire_the_region(pair, keep):
    stub, worker = pair
    kept = []

    def infer(requests):
        x = requests[0]["x"]
        if keep == "array":
            kept.append(x)
        elif keep == "derived view":
            kept.append(x.reshape(-1)[10:20].T)
        return [{"n": np.array([x.size])}]

    first = np.full((1, LARGE), 1.0, dtype=np.float32)
    _, retire = round_trip(stub, worker, [{"x": first}], infer)
    assert retire is (keep != "nothing")
    if retire:
        stub.retire_out_region()
    round_trip(stub, worker, [{"x": np.full((1, LARGE), 2.0, dtype=np.float32)}], infer)
    for array in kept[:1]:
        assert set(np.unique(array).tolist()) == {1.0}  # not overwritten by the second request


def test_small_inputs_kept_by_the_callable_are_not_overwritten(pair):
    stub, worker = pair
    kept = []

    def infer(requests):
        kept.append(requests[0]["x"])
        return [{"n": np.array([1])}]

    for fill in range(3):
        round_trip(stub, worker, [{"x": np.full(4, fill)}], infer)
    assert [array.tolist() for array in kept] == [[0] * 4, [1] * 4, [2] * 4]


def test_a_message_larger_than_the_socket_buffer_is_sent_whole(pair):
    stub, worker = pair
    stub._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    parts = {f"t{i}": np.full(SHM_THRESHOLD // 8 - 1, i, dtype=np.int64) for i in range(6)}  # inline, 384 KiB
    received = {}
    reader = threading.Thread(target=lambda: received.update(worker.recv()[2][0]))
    reader.start()
    stub.send(protocol.INFER, [((None, None), parts)])
    reader.join(10)
    assert sorted(received) == sorted(parts)
    assert all(np.array_equal(received[name], value) for name, value in parts.items())


def stream_then_read(worker: Channel, stub: Channel, replies: list[dict]) -> list[dict]:
    """Send every reply of a stream (then FINAL) before the stub reads any; the tensors the stub received."""
    for tensors in replies:
        worker.send(protocol.PARTIAL, [(None, tensors)])
    worker.send(protocol.FINAL)
    received = []
    while True:
        kind, _, groups, _ = stub.recv()
        if kind == protocol.FINAL:
            return received
        received.append(groups[0])


def test_several_messages_in_flight_arrive_in_order(pair):
    stub, worker = pair
    received = stream_then_read(worker, stub, [{"i": np.array([index])} for index in range(5)])
    assert [int(tensors["i"][0]) for tensors in received] == [0, 1, 2, 3, 4]


def test_a_stream_of_large_messages_read_late_arrives_intact(pair):
    """A decoupled model streams replies without waiting for the stub: each must keep its own data, even when
    the stub reads them only after the worker has sent the next ones."""
    stub, worker = pair
    x = np.random.default_rng(2).random(LARGE, dtype=np.float32)
    received = stream_then_read(worker, stub, [{"y": x * factor} for factor in range(1, 4)])
    assert len(received) == 3
    for factor, tensors in enumerate(received, start=1):
        np.testing.assert_array_equal(tensors["y"], x * factor, err_msg=f"reply {factor}")
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(worker._region_prefix)]  # all mapped
    # The stub's next request answers the stream: the worker's next reply takes its region from the start.
    stub.send(protocol.INFER, [((None, None), {"x": x})])
    worker.recv()
    worker.send(protocol.OK, [(None, {"y": x * 4})])
    np.testing.assert_array_equal(stub.recv()[2][0]["y"], x * 4)
    assert worker._out.top == x.nbytes


def test_a_stream_larger_than_the_region_moves_on_to_new_regions(pair):
    stub, worker = pair
    x = np.random.default_rng(3).random(1 << 18, dtype=np.float32)  # 1 MiB: one per region
    for factor in range(1, 4):
        worker.send(protocol.PARTIAL, [(None, {"y": x * factor})])
    assert worker._generation == 3
    for factor in range(1, 4):
        np.testing.assert_array_equal(stub.recv()[2][0]["y"], x * factor, err_msg=f"reply {factor}")


def test_a_closed_peer_is_reported(pair):
    stub, worker = pair
    worker.close()
    with pytest.raises(PeerGone):
        stub.recv()


@pytest.mark.parametrize("keeps_input", [False, True])
def test_the_worker_asks_to_retire_the_region_only_when_the_callable_keeps_inputs(tmp_path, keeps_input):
    kept = []

    @batch
    def infer(x):
        if keeps_input:
            kept.append(x[:, :8])
        return {"y": x}

    config = TritonModelConfig(
        model_name="m",
        max_batch_size=8,
        inputs=[TensorSpec(name="x", dtype=np.float32, shape=(-1,))],
        outputs=[TensorSpec(name="y", dtype=np.float32, shape=(-1,))],
    )
    prefix = f"tritonrt_test_{uuid.uuid4().hex[:8]}_"
    worker = CallableWorker(
        infer, tmp_path / "w.sock", config, strict=True, region_prefix=prefix + "w_", on_unrecoverable=print
    )
    worker.start()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(tmp_path / "w.sock"))
    stub = Channel(sock, prefix + "stub_")
    try:
        retire_flags = []
        for fill in range(3):
            stub.send(protocol.INFER, [((None, None), {"x": np.full((1, LARGE), fill, dtype=np.float32)})])
            kind, _, outputs, (_, retire) = stub.recv()
            assert kind == protocol.OK and float(outputs[0]["y"][0, 0]) == fill
            retire_flags.append(retire)
            if retire:
                stub.retire_out_region()
        assert retire_flags == [keeps_input] * 3
        assert [float(array[0, 0]) for array in kept] == ([0.0, 1.0, 2.0] if keeps_input else [])
    finally:
        stub.close()
        worker.stop()
        worker.join(10)
    assert not [name for name in os.listdir("/dev/shm") if name.startswith(prefix)]


def _voluntary_switches(native_id: int) -> int:
    with open(f"/proc/self/task/{native_id}/status") as status:
        for line in status:
            if line.startswith("voluntary_ctxt_switches"):
                return int(line.split()[1])
    raise AssertionError("no voluntary_ctxt_switches line")


@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="needs Linux /proc to count context switches")
def test_a_waiting_end_is_not_woken_when_the_peer_reads_what_it_sent(pair):
    """A plain blocking recv would be woken (and sleep again) when the peer consumes its request."""
    stub, worker = pair
    waiting, done, replies = threading.Event(), threading.Event(), []
    native_id = []

    def call():
        native_id.append(threading.get_native_id())
        stub.send(protocol.INFER, [((None, None), {"x": np.ones(4, np.float32)})])
        waiting.set()
        replies.append(stub.recv())
        done.set()

    thread = threading.Thread(target=call)
    thread.start()
    waiting.wait(5)
    time.sleep(0.05)  # the stub's thread is now asleep in its read
    before = _voluntary_switches(native_id[0])
    _, _, inputs, _ = worker.recv()  # consumes the request: the write-space wake-up of the stub's socket
    time.sleep(0.05)
    assert _voluntary_switches(native_id[0]) == before
    assert not done.is_set()
    worker.send(protocol.OK, [(None, {"y": inputs[0]["x"] * 2})])
    thread.join(5)
    np.testing.assert_array_equal(replies[0][2][0]["y"], np.full(4, 2, np.float32))


def test_polling_stops_for_a_slow_peer_and_resumes_when_it_is_fast_again():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    stub, worker = Channel(a, None, spin_s=0.001), Channel(b, None)
    try:

        def call(delay: float) -> None:
            stub.send(protocol.INFER, [((None, None), {"x": np.zeros(1)})])
            worker.recv()
            timer = threading.Timer(delay, worker.send, (protocol.OK, [(None, {"y": np.zeros(1)})]))
            timer.start()
            stub.recv()
            timer.join()

        for _ in range(8):
            call(0.01)  # ten times the spin time: the polls miss
        assert stub._catch_rate < 0.5
        for _ in range(8):
            call(0.0)
        assert stub._catch_rate < 0.5  # not yet re-checked: these waits did not poll
        for _ in range(4 * 64):
            call(0.0)
        assert stub._catch_rate > 0.5  # the one check in 64 caught fast replies and polling resumed
    finally:
        stub.close()
        worker.close()


def test_polling_limits_are_read_in_microseconds_and_bad_values_are_named(monkeypatch):
    monkeypatch.setenv("TRITONRT_SPIN_US", "250")
    assert transport._seconds_from_us("TRITONRT_SPIN_US", "200") == pytest.approx(250e-6)
    monkeypatch.delenv("TRITONRT_SPIN_US")
    assert transport._seconds_from_us("TRITONRT_SPIN_US", "200") == pytest.approx(200e-6)
    for bad in ("fast", "-5", "nan"):
        monkeypatch.setenv("TRITONRT_WORKER_SPIN_US", bad)
        with pytest.raises(ValueError, match=f"TRITONRT_WORKER_SPIN_US='{bad}'.*microseconds >= 0"):
            transport._seconds_from_us("TRITONRT_WORKER_SPIN_US", "0")


# -- large arrays that numpy allocates in the stub's outgoing region (tritonrt.proxy.arena) -------------------


@pytest.fixture
def stub_context(pair):
    """A context where numpy allocates in the stub channel's region, as in the stub's thread; the test's other
    code (the worker's side included) allocates as usual."""
    context = contextvars.copy_context()
    assert context.run(arena.install, pair[0])
    return context


def test_large_inputs_allocated_in_the_region_go_by_reference_and_join_for_batch(pair, stub_context):
    stub, worker = pair
    x = np.random.default_rng(4).random((3, 1, LARGE), dtype=np.float32)
    copies = stub_context.run(lambda: [row.copy() for row in x])  # as the stub copies each request's input
    small = stub_context.run(lambda: np.arange(4.0))
    assert [stub._out.offset_of(row, row.nbytes) for row in copies] == [0, x[0].nbytes, 2 * x[0].nbytes]
    assert stub._out.offset_of(small, small.nbytes) is None
    seen = {}

    @batch
    def infer(x):
        seen["joined_by_view"] = x.base is not None
        return {"y": x}

    outputs, _ = round_trip(stub, worker, [{"x": row} for row in copies], infer)
    assert seen == {"joined_by_view": True}
    assert stub._out.top == x.nbytes  # nothing was copied into the region
    for row, output in zip(x, outputs, strict=True):
        np.testing.assert_array_equal(output["y"], row)
    copies = outputs = None
    assert stub._out.held == {} and stub._out.top == 0  # freed: the next batch takes the region from its start


def test_an_array_moved_out_of_the_region_by_realloc_keeps_its_data(pair, stub_context):
    stub, _ = pair
    x = np.random.default_rng(5).random(LARGE, dtype=np.float32)
    copy = stub_context.run(x.copy)
    stub_context.run(lambda: copy.resize(2 * LARGE, refcheck=False))  # numpy reallocates in place
    assert stub._out.offset_of(copy, copy.nbytes) is None and stub._out.held == {}
    np.testing.assert_array_equal(copy[:LARGE], x)


def test_arrays_of_a_retired_region_stay_valid_until_freed(pair, stub_context):
    stub, worker = pair
    x = np.random.default_rng(6).random(LARGE, dtype=np.float32)
    kept = stub_context.run(x.copy)
    stub.retire_out_region()  # as when the worker reports that it kept views of the region
    newer = stub_context.run(lambda: np.full(LARGE, 7.0, dtype=np.float32))
    assert stub._out.offset_of(newer, newer.nbytes) == 0 and len(stub._draining) == 1
    np.testing.assert_array_equal(kept, x)
    kept = None
    assert stub._draining == []
    stub.close()
    later = stub_context.run(lambda: np.ones(LARGE, dtype=np.float32))  # after close: the C library's memory
    assert stub.held_size(data_address(later)) is None and later.sum() == LARGE
