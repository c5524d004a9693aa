"""The worker thread that serves an inference callable (tritonrt.proxy.worker), driven by a backend written in
Python (FakeBackend): per-request outcomes, the retained-region report, streams and their cancellation,
unrecoverable errors, peer loss and stop()."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.exceptions import PyTritonUnrecoverableError
from tritonrt.metrics import Counter, Histogram
from tritonrt.proxy import wire
from tritonrt.proxy.connection import WorkerSettings


def test_views_of_the_inputs_are_not_reported_retained_after_the_reply(harness):
    """Outputs that are inputs (views of the backend's region) go back by reference, and once answered the
    worker holds no view: the backend may reuse its region (a reply reported retained makes it start a new
    region for every batch)."""

    @batch
    def batched(x):
        return {"y": x}

    def identity(requests):
        return [{"y": request["x"]} for request in requests]

    for infer_callable, location in ((identity, wire.LOCATION_RECEIVER_REGION), (batched, None)):
        h = harness(infer_callable)
        h.backend.new_region(1 << 20)
        row = [1.0] * 512  # 2 KiB per request: above the inline threshold
        for announce in (True, False, False):
            seq = h.send([row, row], region=True, announce=announce)
            header, responses = h.reply()
            assert header.seq == seq and header.flags & wire.FLAG_FINAL
            assert not header.flags & wire.FLAG_RETAINED, "the worker kept a view of the backend's region"
            assert [r.status for r in responses] == [wire.STATUS_OUTPUTS] * 2
            assert location is None or responses[0].outputs[0].location == location
        h.close()


def test_inputs_kept_by_the_callable_are_reported_retained(harness):
    kept = []

    def keep(requests):
        kept.append(requests[0]["x"])
        return [{"y": r["x"] * 2} for r in requests]

    h = harness(keep)
    h.backend.new_region(1 << 20)
    h.send([[1.0] * 512], region=True, announce=True)
    header, _ = h.reply()
    assert header.flags & wire.FLAG_RETAINED


def test_a_callable_that_writes_into_a_large_input_fails_that_request_and_the_worker_serves_on(harness):
    """Inputs in the backend's region are read-only: writing one in place fails the request with numpy's error
    (copy it first: ``x = x.copy()``); the same callable works on small, inline inputs, and on copies."""

    def in_place(requests):
        for request in requests:
            x = request["x"]
            if request.parameters.get("copy"):
                x = x.copy()
            x *= 2
        return [{"y": r["x"] * 0 + 1} for r in requests]

    h = harness(in_place)
    h.backend.new_region(1 << 20)
    h.send([[1.0] * 512], region=True, announce=True)
    _, (response,) = h.reply()
    assert response.status == wire.STATUS_ERROR and "read-only" in response.message
    assert "copy one before changing it in place" in response.message  # the error says how to fix it
    h.send([[1.0] * 512], region=True, copy=True)
    _, (response,) = h.reply()
    assert response.status == wire.STATUS_OUTPUTS
    h.send([[1.0, 2.0]])
    _, (response,) = h.reply()
    assert response.status == wire.STATUS_OUTPUTS
    assert h.worker.is_alive() and not h.unrecoverable


def test_a_failed_batch_is_answered_request_by_request(harness):
    calls = []

    def picky(requests):
        calls.append(len(requests))
        if any(r["x"][0, 0] < 0 for r in requests):
            raise ValueError("x must be positive")
        return [{"y": r["x"] * 2} for r in requests]

    h = harness(picky)
    h.backend.new_region(1 << 20)
    h.send([[1.0] * 512, [-1.0] * 512, [3.0] * 512], region=True, announce=True)
    header, responses = h.reply()
    assert calls == [3, 1, 1, 1]
    assert [r.status for r in responses] == [wire.STATUS_OUTPUTS, wire.STATUS_ERROR, wire.STATUS_OUTPUTS]
    assert responses[1].message == "ValueError: x must be positive"
    assert not header.flags & wire.FLAG_RETAINED  # the failed batch's exception holds no input either
    reruns = [u for u in h.backend.metrics if u.name == "tritonrt_batch_reruns_total"]
    assert [(u.value, u.labels) for u in reruns] == [(1.0, (("model", "m"),))]


def test_metrics_updated_by_the_callable_go_with_its_answer(harness):
    served = Counter("app_served_total", "Rows served", ("model",))
    sizes = Histogram("app_batch_rows", "Rows per batch", buckets=(1, 2, 4))

    def counting(requests):
        if requests[0]["x"][0, 0] < 4:  # (x >= 4: a batch that updates nothing)
            served.labels(model="m").inc(len(requests))
            sizes.observe(len(requests))
        return [{"y": r["x"]} for r in requests]

    h = harness(counting)
    h.send([[1.0], [2.0]])
    header, _ = h.reply()  # (the METRICS message came first: the fake backend collected it)
    assert header.kind == wire.KIND_REPLY
    updates = {u.name: u for u in h.backend.metrics}
    assert updates["app_served_total"].value == 2.0 and updates["app_served_total"].labels == (("model", "m"),)
    assert updates["app_batch_rows"].op == wire.METRIC_OBSERVE and updates["app_batch_rows"].buckets == (1, 2, 4)
    # tritonrt's own counters of the model start at 0 with its first answer (a series from the start)
    assert updates["tritonrt_batch_reruns_total"].value == 0 and updates["tritonrt_worker_restarts_total"].value == 0
    h.backend.metrics.clear()
    h.send([[3.0]])
    h.reply()
    assert [(u.name, u.value) for u in h.backend.metrics] == [("app_served_total", 1.0), ("app_batch_rows", 1.0)]
    h.send([[4.0]])
    h.reply()  # nothing changed during this batch: no METRICS went before the reply
    assert len(h.backend.metrics) == 2


def test_strict_outputs_are_checked(harness):
    h = harness(lambda requests: [{"y": np.zeros((1, 2), np.int64)} for _ in requests], strict=True)
    h.send([[1.0, 2.0]])
    _, (response,) = h.reply()
    assert response.status == wire.STATUS_ERROR and "y" in response.message


def test_an_async_callable_is_awaited(harness):
    async def double(requests):
        return [{"y": r["x"] * 2} for r in requests]

    h = harness(double)
    h.send([[1.0, 2.0]])
    _, (response,) = h.reply()
    assert response.status == wire.STATUS_OUTPUTS


def test_an_unrecoverable_error_fails_the_batch_and_is_reported(harness):
    def broken(requests):
        raise PyTritonUnrecoverableError("the GPU is gone")

    h = harness(broken)
    h.send([[1.0], [2.0]])
    header, (code, message) = h.reply()
    assert header.kind == wire.KIND_BATCH_ERROR and "the GPU is gone" in message
    deadline = time.monotonic() + 5
    while not h.unrecoverable and time.monotonic() < deadline:  # reported right after the reply
        time.sleep(0.01)
    assert h.unrecoverable and "the GPU is gone" in h.unrecoverable[0]


@pytest.mark.parametrize("kind", ["generator", "async generator"])
def test_a_cancelled_stream_closes_the_generator(harness, kind):
    closed = threading.Event()
    started = threading.Event()

    def stream(requests):
        try:
            for step in range(1000):
                started.set()
                time.sleep(0.01)
                yield [{"y": r["x"] * step} for r in requests]
        finally:
            closed.set()

    async def astream(requests):
        try:
            for step in range(1000):
                started.set()
                time.sleep(0.01)
                yield [{"y": r["x"] * step} for r in requests]
        finally:
            closed.set()

    h = harness(stream if kind == "generator" else astream, decoupled=True)
    h.send([[1.0]])
    header, _ = h.reply()
    assert header.kind == wire.KIND_REPLY and not header.flags & wire.FLAG_FINAL
    h.backend.send_control(wire.KIND_CANCEL, 1, wire.encode_cancel([0]))
    while not header.flags & wire.FLAG_FINAL:
        header, _ = h.reply()
    assert closed.wait(5), "the generator was not closed"


def test_peer_loss_is_reported_and_the_next_instance_served(harness):
    h = harness(lambda requests: [{"y": r["x"]} for r in requests])
    h.backend.sock.close()
    assert h.lost.wait(5)
    h.backend = h.connect()
    h.send([[5.0]])
    _, (response,) = h.reply()
    assert response.status == wire.STATUS_OUTPUTS


def test_stop_wakes_a_worker_waiting_for_a_batch(harness):
    h = harness(lambda requests: [{"y": r["x"]} for r in requests])
    h.worker.stop()
    h.worker.join(5)
    assert not h.worker.is_alive() and not h.lost.is_set()
    assert not h.listener.path.exists()


def test_the_backend_polls_for_replies_briefly_by_default_and_the_worker_sleeps():
    assert (WorkerSettings().spin_us, WorkerSettings().worker_spin_us) == (50, 0)
    assert WorkerSettings.from_env({}) == WorkerSettings()
    settings = WorkerSettings.from_env({"TRITONRT_SPIN_US": "200", "TRITONRT_WORKER_SPIN_US": " 1000 "})
    assert (settings.spin_us, settings.worker_spin_us) == (200, 1000)
    with pytest.raises(ValueError, match="TRITONRT_SPIN_US='-1'"):
        WorkerSettings.from_env({"TRITONRT_SPIN_US": "-1"})
