"""AsyncioModelClient against a real tritonserver started by tritonrt, over HTTP and gRPC."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from tritonrt.client import AsyncioModelClient, ModelClient
from tritonrt.client.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from tritonrt.model_config.triton_model_config import TritonModelConfig

pytestmark = pytest.mark.integration

X = np.array([1.0, 2.0], np.float32)


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("identity", "nobatch", "sleepy", "failing", "bytes", "echo_parameters", "reloadable")


async def test_infer_sample_and_batch(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "identity") as client:
        np.testing.assert_array_equal((await client.infer_sample(X))["y"], X)
        batch = np.stack([X, -X])
        np.testing.assert_array_equal((await client.infer_batch(x=batch))["y"], batch)


async def test_concurrent_requests_on_one_client(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "identity") as client:
        results = await asyncio.gather(*(client.infer_sample(np.array([i], np.float32)) for i in range(20)))
    assert [float(result["y"][0]) for result in results] == list(range(20))


async def test_model_config_and_batching_are_awaitable(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "nobatch", lazy_init=False) as client:
        config = await client.model_config
        assert isinstance(config, TritonModelConfig)
        assert (config.model_name, config.max_batch_size) == ("nobatch", 0)
        assert await client.is_batching_supported is False
        np.testing.assert_array_equal((await client.infer_sample(X))["y"], X)
        with pytest.raises(PyTritonClientModelDoesntSupportBatchingError, match="use infer_sample"):
            await client.infer_batch(X[np.newaxis])


async def test_wait_for_model(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "identity") as client:
        assert await client.wait_for_model(10) is None
    async with AsyncioModelClient(server.url(protocol), "absent", access_token=server.token) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="'absent'.*index does not list it"):
            await client.wait_for_model(2)  # not shorter: the probes must get an answer on a loaded machine


async def test_lazy_init_false_waits_when_entering(server, protocol):
    client = AsyncioModelClient(server.url(protocol), "absent", lazy_init=False, init_timeout_s=2)
    with pytest.raises(PyTritonClientTimeoutError, match="'absent'.*not ready within 2 s"):
        async with client:
            pass


async def test_argument_and_server_errors(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "failing") as client:
        with pytest.raises(PyTritonClientValueError, match="not both"):
            await client.infer_sample(X, x=X)
        with pytest.raises(PyTritonClientInferenceServerError, match="deliberate failure"):
            await client.infer_sample(X)


async def test_sub_second_timeout(server, protocol, sleep_s):
    async with AsyncioModelClient(server.url(protocol), "sleepy", inference_timeout_s=0.25) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="within 0.25 s"):
            await client.infer_sample(X, parameters={"sleep_s": sleep_s})


async def test_bytes_parameters_and_headers(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "bytes") as client:
        result = await client.infer_sample(np.array([b"abc", b"xy"], dtype=np.object_))
        assert result["reversed"].tolist() == [b"cba", b"yx"]
    async with AsyncioModelClient(server.url(protocol), "echo_parameters") as client:
        result = await client.infer_sample(X, parameters={"n": 2}, headers={"x-tenant": "acme"})
    received = json.loads(result["parameters"][0])
    assert (received["n"], received["x-tenant"]) == (2, "acme")


async def test_unload_and_load_with_the_access_token(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "reloadable", access_token=server.token) as client:
        await client.unload_model()
        with pytest.raises(PyTritonClientModelUnavailableError, match="is unavailable"):
            await client.infer_sample(X)
        await client.load_model()
        np.testing.assert_array_equal((await client.infer_sample(X))["y"], X)


async def test_from_existing_client_keeps_the_access_token(server, protocol):
    # PyTriton 0.7 loses the token here; tritonrt keeps it.
    with ModelClient(server.url(protocol), "reloadable", access_token=server.token) as sync_client:
        sync_client.wait_for_model(10)
        async with AsyncioModelClient.from_existing_client(sync_client) as client:
            await client.load_model()
            np.testing.assert_array_equal((await client.infer_sample(X))["y"], X)
