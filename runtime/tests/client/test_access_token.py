"""Every client class sends the access token, against a server that restricts inference and model configs too."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrt.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
)
from tritonrt.client.exceptions import PyTritonClientInferenceServerError
from tritonrt.triton import DEFAULT_PROTECTED_ENDPOINTS, TritonSecurityConfig

pytestmark = pytest.mark.integration

X = np.array([1.0, 2.0], np.float32)
COUNT = np.array([2], np.int32)


@pytest.fixture(scope="module")
def server(start_server):
    restricted = (*DEFAULT_PROTECTED_ENDPOINTS, "inference", "model-config")
    return start_server("identity", "count", security_config=TritonSecurityConfig(restricted_endpoints=restricted))


def test_without_the_token_the_refusal_says_to_pass_it(server, protocol):
    with ModelClient(server.url(protocol), "identity", init_timeout_s=10) as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="pass access_token"):
            client.infer_sample(X)


def test_model_client_sends_the_token(server, protocol):
    with ModelClient(server.url(protocol), "identity", access_token=server.token) as client:
        np.testing.assert_array_equal(client.infer_sample(X)["y"], X)


def test_futures_client_sends_the_token(server, protocol):
    with FuturesModelClient(server.url(protocol), "identity", access_token=server.token) as client:
        np.testing.assert_array_equal(client.infer_sample(X).result()["y"], X)


async def test_asyncio_client_sends_the_token(server, protocol):
    async with AsyncioModelClient(server.url(protocol), "identity", access_token=server.token) as client:
        np.testing.assert_array_equal((await client.infer_sample(X))["y"], X)


def test_decoupled_client_sends_the_token(server):
    with DecoupledModelClient(server.url("grpc"), "count", access_token=server.token) as client:
        assert len(list(client.infer_sample(COUNT))) == 2


async def test_asyncio_decoupled_client_sends_the_token(server):
    async with AsyncioDecoupledModelClient(server.url("grpc"), "count", access_token=server.token) as client:
        assert len([response async for response in client.infer_sample(COUNT)]) == 2
