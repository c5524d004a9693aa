"""DecoupledModelClient and AsyncioDecoupledModelClient streaming from real decoupled models (gRPC)."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrt.client import AsyncioDecoupledModelClient, DecoupledModelClient
from tritonrt.client.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)

# Stopping a stream early cancels it, which now and then crashes tritonserver 2.51 (see conftest.pytest_runtest_call).
pytestmark = [pytest.mark.integration, pytest.mark.rerun_on_tritonserver_crash]


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("count", "failing_stream", "slow_stream", "identity")


def _indices(responses) -> list[list[int]]:
    return [response["index"].tolist() for response in responses]


def test_streams_every_response_of_a_sample(server):
    with DecoupledModelClient(server.url("grpc"), "count") as client:
        assert client.model_config.decoupled is True
        assert _indices(client.infer_sample(np.array([3], np.int32))) == [[0], [1], [2]]


def test_streams_a_batch(server):
    with DecoupledModelClient(server.url("grpc"), "count") as client:
        responses = list(client.infer_batch(count=np.array([[2], [2]], np.int32)))
    assert _indices(responses) == [[[0], [0]], [[1], [1]]]


def test_stopping_early_leaves_the_client_usable(server):
    with DecoupledModelClient(server.url("grpc"), "count") as client:
        for response in client.infer_sample(np.array([50], np.int32)):
            assert response["index"].tolist() == [0]
            break
        assert len(list(client.infer_sample(np.array([2], np.int32)))) == 2


def test_failure_in_the_stream_raises_after_the_first_responses(server):
    with DecoupledModelClient(server.url("grpc"), "failing_stream") as client:
        responses = client.infer_sample(np.array([1], np.int32))
        assert next(responses)["index"].tolist() == [0]
        with pytest.raises(PyTritonClientInferenceServerError, match="deliberate failure in the middle"):
            next(responses)


def test_inference_timeout_bounds_the_wait_for_each_response(server):
    with DecoupledModelClient(server.url("grpc"), "slow_stream", inference_timeout_s=0.25) as client:
        responses = client.infer_sample(np.array([1], np.int32))
        assert next(responses)["index"].tolist() == [0]
        with pytest.raises(PyTritonClientTimeoutError, match="streamed response.*within 0.25 s"):
            next(responses)


def test_refuses_a_model_that_is_not_decoupled(server):
    with DecoupledModelClient(server.url("grpc"), "identity") as client:
        with pytest.raises(PyTritonClientValueError, match="'identity' is not decoupled.*ModelClient"):
            client.infer_sample(np.array([1.0], np.float32))


async def test_asyncio_streams_every_response(server):
    async with AsyncioDecoupledModelClient(server.url("grpc"), "count") as client:
        responses = [response async for response in client.infer_sample(np.array([3], np.int32))]
        assert _indices(responses) == [[0], [1], [2]]
        batch = [response async for response in client.infer_batch(np.array([[1], [1]], np.int32))]
        assert _indices(batch) == [[[0], [0]]]


async def test_asyncio_stops_early_and_reports_failures(server):
    async with AsyncioDecoupledModelClient(server.url("grpc"), "count") as client:
        async for response in client.infer_sample(np.array([50], np.int32)):
            assert response["index"].tolist() == [0]
            break
        assert len([r async for r in client.infer_sample(np.array([2], np.int32))]) == 2
    async with AsyncioDecoupledModelClient(server.url("grpc"), "failing_stream") as client:
        received = []
        with pytest.raises(PyTritonClientInferenceServerError, match="deliberate failure in the middle"):
            async for response in client.infer_sample(np.array([1], np.int32)):
                received.append(response)
        assert _indices(received) == [[0]]


async def test_asyncio_timeout_and_argument_errors(server):
    async with AsyncioDecoupledModelClient(server.url("grpc"), "slow_stream", inference_timeout_s=0.25) as client:
        received = []
        with pytest.raises(PyTritonClientTimeoutError, match="within 0.25 s"):
            async for response in client.infer_sample(np.array([1], np.int32)):
                received.append(response)
        assert _indices(received) == [[0]]
        with pytest.raises(PyTritonClientValueError, match="not both"):
            client.infer_sample(np.array([1], np.int32), count=np.array([1], np.int32))
    async with AsyncioDecoupledModelClient(server.url("grpc"), "identity") as client:
        with pytest.raises(PyTritonClientValueError, match="not decoupled"):
            async for _ in client.infer_sample(np.array([1.0], np.float32)):
                pass
