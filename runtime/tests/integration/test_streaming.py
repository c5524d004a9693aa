"""Decoupled models stream every yielded response over gRPC and end with a final flag."""

from __future__ import annotations

import asyncio
import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonrt.decorators import batch
from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration
WORKER_MODES = ("thread", "process")  # every test runs with worker threads and with worker processes

COUNT = Tensor(name="count", dtype=np.int32, shape=(1,))
STEP = Tensor(name="step", dtype=np.int32, shape=(1,))
DECOUPLED = ModelConfig(decoupled=True)
STREAM_TIMEOUT_S = 60
STREAMED = 8  # responses of echo_scaled


@batch
def countdown(count):
    """Yield count[0] responses: step = count-1, ..., 0 (one row per request row)."""
    for step in range(int(count.max()) - 1, -1, -1):
        yield {"step": np.full_like(count, step)}


async def async_countdown(requests):
    count = int(requests[0]["count"].max())
    for step in range(count - 1, -1, -1):
        await asyncio.sleep(0)
        yield [{"step": np.full_like(request["count"], step)} for request in requests]


def countdown_each(requests):
    """Without batching every request is executed on its own, so each can stream its own count."""
    (request,) = requests
    for step in range(int(request["count"][0]) - 1, -1, -1):
        yield [{"step": np.array([step], dtype=np.int32)}]


def fails_midway(requests):
    yield [{"step": np.full_like(request["count"], 1)} for request in requests]
    raise RuntimeError("stream broke after the first response")


def echo_scaled(requests):
    """Large outputs, each different and ready at once: one overwritten by the next before the backend copied it
    would show."""
    streamed = [[{"y": request["x"] * factor} for request in requests] for factor in range(1, STREAMED + 1)]
    yield from streamed


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    server.triton.bind("countdown", countdown, [COUNT], [STEP], config=DECOUPLED)
    server.triton.bind("async_countdown", async_countdown, [COUNT], [STEP], config=DECOUPLED)
    server.triton.bind(
        "countdown_each", countdown_each, [COUNT], [STEP], config=ModelConfig(batching=False, decoupled=True)
    )
    server.triton.bind(
        "echo_scaled",
        echo_scaled,
        [Tensor(name="x", dtype=np.float32, shape=(-1,))],
        [Tensor(name="y", dtype=np.float32, shape=(-1,))],
        config=DECOUPLED,
    )
    server.triton.bind("fails_midway", fails_midway, [COUNT], [STEP], config=DECOUPLED)
    return server


def stream(server, model: str, requests: dict[str, int]) -> dict[str, list]:
    """Send one request per id on one stream; collect per id the steps, then ``"final"`` or the error."""
    events: queue.Queue = queue.Queue()
    collected: dict[str, list] = {request_id: [] for request_id in requests}
    open_ids = set(requests)
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        try:
            for request_id, count in requests.items():
                shape = [1] if model == "countdown_each" else [1, 1]
                tensor = grpcclient.InferInput("count", shape, "INT32")
                tensor.set_data_from_numpy(np.full(shape, count, dtype=np.int32))
                client.async_stream_infer(model, [tensor], request_id=request_id, enable_empty_final_response=True)
            while open_ids:
                result, error = events.get(timeout=STREAM_TIMEOUT_S)
                if error is not None:
                    # the error is not tied to an id on the client side; with one open request it is its own
                    assert len(open_ids) == 1, f"error while several requests were open: {error}"
                    collected[open_ids.pop()].append(error.message())
                    continue
                response = result.get_response()
                if response.outputs:
                    collected[response.id].append(int(result.as_numpy("step").ravel()[0]))
                if response.parameters["triton_final_response"].bool_param:
                    collected[response.id].append("final")
                    open_ids.discard(response.id)
        finally:
            client.stop_stream()
    return collected


def test_generator_streams_each_response_then_final(server):
    assert stream(server, "countdown", {"a": 3}) == {"a": [2, 1, 0, "final"]}


def test_async_generator_streams(server):
    assert stream(server, "async_countdown", {"a": 4}) == {"a": [3, 2, 1, 0, "final"]}


def test_requests_batched_together_stream_together(server):
    """A batched generator yields one response for every request of the batch at each step."""
    result = stream(server, "countdown", {"a": 2, "b": 2, "c": 2})
    assert result == {"a": [1, 0, "final"], "b": [1, 0, "final"], "c": [1, 0, "final"]}


def test_several_requests_on_one_stream(server):
    result = stream(server, "countdown_each", {"a": 2, "b": 3, "c": 1})
    assert result == {"a": [1, 0, "final"], "b": [2, 1, 0, "final"], "c": [0, "final"]}


def test_error_after_some_responses(server):
    (events,) = stream(server, "fails_midway", {"a": 1}).values()
    assert events[0] == 1
    assert "stream broke after the first response" in events[1]
    # and the model keeps serving
    assert stream(server, "countdown", {"b": 1}) == {"b": [0, "final"]}


def test_large_tensors_stream(server):
    x = np.random.default_rng(0).random((1, 1 << 20), dtype=np.float32)  # 4 MiB
    events: queue.Queue = queue.Queue()
    received = []
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        client.start_stream(callback=lambda result, error: events.put((result, error)))
        try:
            tensor = grpcclient.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            client.async_stream_infer("echo_scaled", [tensor], enable_empty_final_response=True)
            while True:
                result, error = events.get(timeout=STREAM_TIMEOUT_S)
                assert error is None, error
                if result.get_response().outputs:
                    received.append(result.as_numpy("y"))
                if result.get_response().parameters["triton_final_response"].bool_param:
                    break
        finally:
            client.stop_stream()
    assert len(received) == STREAMED
    for factor, y in enumerate(received, start=1):
        np.testing.assert_array_equal(y, x * factor, err_msg=f"response {factor} of the stream")
