"""Client construction, settings and lifecycle; no server needed (clients connect lazily)."""

import logging
import time

import numpy as np
import pytest

from tritonrt.client import (
    AsyncioDecoupledModelClient,
    AsyncioModelClient,
    DecoupledModelClient,
    FuturesModelClient,
    ModelClient,
)
from tritonrt.client._core import ClientSettings
from tritonrt.client._transport import ServerUnreachableError
from tritonrt.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientInvalidUrlError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig

ALL_CLIENTS = [ModelClient, FuturesModelClient, AsyncioModelClient, DecoupledModelClient, AsyncioDecoupledModelClient]
X = np.array([1.0], np.float32)


@pytest.mark.parametrize("client_class", ALL_CLIENTS)
def test_every_client_rejects_an_invalid_url(client_class):
    with pytest.raises(PyTritonClientInvalidUrlError, match="scheme 'https' is not supported"):
        client_class("https://localhost", "model")


@pytest.mark.parametrize(
    ("arguments", "match"),
    [
        ({"model_name": ""}, "model_name must be a non-empty string"),
        ({"model_version": "latest"}, "model_version must be a version number"),
        ({"init_timeout_s": 0}, "init_timeout_s must be a positive number"),
        ({"inference_timeout_s": -1.0}, "inference_timeout_s must be a positive number"),
        ({"inference_timeout_s": True}, "inference_timeout_s must be a positive number"),
        ({"access_token": ""}, "access_token must be a non-empty string"),
        ({"unreachable_timeout_s": 0}, "unreachable_timeout_s must be a positive number"),
    ],
)
def test_bad_arguments_are_rejected(arguments, match):
    values = {
        "model_name": "m",
        "model_version": None,
        "init_timeout_s": None,
        "inference_timeout_s": None,
        "access_token": None,
    } | arguments
    with pytest.raises(PyTritonClientValueError, match=match):
        ClientSettings.create("localhost", **values)


def test_defaults_and_version_normalisation():
    settings = ClientSettings.create("localhost", "m", 2, None, 0.5, None)
    assert (settings.model_version, settings.version_number) == ("2", 2)
    assert (settings.init_timeout_s, settings.inference_timeout_s) == (300.0, 0.5)


def test_access_token_header_follows_the_protocol():
    assert ClientSettings.create("localhost", "m", None, None, None, "t").auth_headers == {"triton-access-token": "t"}
    assert ClientSettings.create("grpc://localhost", "m", None, None, None, "t").auth_headers == {
        "triton-grpc-protocol-triton-access-token": "t"
    }
    assert ClientSettings.create("localhost", "m", None, None, None, None).auth_headers == {}


@pytest.mark.parametrize("client_class", [DecoupledModelClient, AsyncioDecoupledModelClient])
def test_decoupled_clients_need_grpc(client_class):
    with pytest.raises(PyTritonClientValueError, match="needs gRPC.*grpc://localhost:8001"):
        client_class("http://localhost:8000", "stream")


@pytest.mark.parametrize("value", [0, -2, 1.5])
def test_futures_client_rejects_bad_pool_sizes(value):
    with pytest.raises(PyTritonClientValueError, match="max_workers must be a positive integer"):
        FuturesModelClient("localhost", "m", max_workers=value)
    with pytest.raises(PyTritonClientValueError, match="max_queue_size must be a positive integer"):
        FuturesModelClient("localhost", "m", max_queue_size=value)


@pytest.mark.parametrize("source_class", [ModelClient, AsyncioModelClient, FuturesModelClient])
@pytest.mark.parametrize("target_class", [ModelClient, AsyncioModelClient, FuturesModelClient, DecoupledModelClient])
def test_from_existing_client_keeps_settings_and_access_token(source_class, target_class):
    source = source_class(
        "grpc://server:9001", "m", 3, init_timeout_s=7, inference_timeout_s=0.5, access_token="tok",
        unreachable_timeout_s=2,
    )  # fmt: skip
    target = target_class.from_existing_client(source)
    assert type(target) is target_class
    assert target._settings == source._settings and target._settings.unreachable_timeout_s == 2
    for client in (source, target):  # the asyncio ones made no connection yet
        if not isinstance(client, AsyncioModelClient):
            client.close()


def test_from_existing_client_reuses_a_known_model_config():
    config = TritonModelConfig(model_name="m", inputs=[TensorSpec("x", (-1,))], outputs=[TensorSpec("y", (-1,))])
    source = ModelClient("localhost", "m", model_config=config, ensure_model_is_ready=False)
    target = AsyncioModelClient.from_existing_client(source)
    assert target._model_config is config and target._model_ready
    source.close()


def _every_method(client: ModelClient | AsyncioModelClient) -> tuple:
    """Calls of each public method and property of a ModelClient or AsyncioModelClient."""
    return (
        lambda: client.infer_sample(X),
        lambda: client.infer_batch(X),
        lambda: client.model_config,
        lambda: client.is_batching_supported,
        lambda: client.wait_for_model(1.0),
        client.load_model,
        client.unload_model,
    )


def test_sync_client_close_is_idempotent_and_closes_every_method():
    client = ModelClient("localhost", "m")
    client.close()
    client.close()
    for call in _every_method(client):
        with pytest.raises(PyTritonClientClosedError, match="ModelClient for model 'm' is closed"):
            call()


async def test_asyncio_client_close_is_idempotent_and_closes_every_method():
    client = AsyncioModelClient("grpc://localhost", "m")
    await client.close()
    await client.close()
    for call in _every_method(client):
        with pytest.raises(PyTritonClientClosedError, match="AsyncioModelClient for model 'm' is closed"):
            await call()


def test_futures_client_close_is_idempotent_and_refuses_new_work():
    client = FuturesModelClient("localhost", "m")
    client.close()
    client.close(wait=False)
    with pytest.raises(PyTritonClientClosedError, match="is closed"):
        client.infer_sample(X)
    with pytest.raises(PyTritonClientClosedError, match="is closed"):
        client.model_config()


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_no_server_gives_a_timeout_naming_the_url(scheme, closed_port):
    port = closed_port
    with ModelClient(f"{scheme}://127.0.0.1:{port}", "m", init_timeout_s=0.3) as client:
        with pytest.raises(PyTritonClientTimeoutError, match=f"{scheme}://127.0.0.1:{port} was not live within 0.3 s"):
            client.infer_sample(X)


async def test_no_server_gives_a_timeout_for_asyncio_clients(closed_port):
    async with AsyncioModelClient(f"http://127.0.0.1:{closed_port}", "m", init_timeout_s=0.3) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="was not live within 0.3 s"):
            await client.wait_for_model(0.3)


def test_lazy_init_false_waits_at_construction(closed_port):
    with pytest.raises(PyTritonClientTimeoutError, match="was not live"):
        ModelClient(f"grpc://127.0.0.1:{closed_port}", "m", lazy_init=False, init_timeout_s=0.3)


# A guard against a wait of init_timeout_s: far above unreachable_timeout_s, far below init_timeout_s.
GAVE_UP_WITHIN_S = 30


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_nothing_listening_gives_up_after_unreachable_timeout_s(scheme, closed_port, caplog):
    caplog.set_level(logging.INFO, logger="tritonrt.client")
    url = f"{scheme}://127.0.0.1:{closed_port}"
    started = time.monotonic()
    with ModelClient(url, "m", init_timeout_s=120, unreachable_timeout_s=0.5) as client:
        with pytest.raises(ServerUnreachableError) as caught:
            client.infer_sample(X)
    assert time.monotonic() - started < GAVE_UP_WITHIN_S
    assert caught.value.refused
    assert f"Cannot reach the Triton server at {url}: nothing listens there (connections refused for 0.5 s" in str(
        caught.value
    )
    assert "raise unreachable_timeout_s" in str(caught.value)
    said = [record.getMessage() for record in caplog.records if record.name == "tritonrt.client"]
    assert said == [f"Nothing listens at {url} (connection refused): waiting up to 0.5 s for a server there"]


async def test_nothing_listening_gives_up_for_asyncio_clients(closed_port):
    url = f"http://127.0.0.1:{closed_port}"
    async with AsyncioModelClient(url, "m", init_timeout_s=120, unreachable_timeout_s=0.5) as client:
        with pytest.raises(ServerUnreachableError, match="nothing listens there"):
            await client.infer_sample(X)


def test_a_wait_says_what_it_waits_for_at_once(closed_port, caplog):
    # Without unreachable_timeout_s (PyTriton's way) the client waits init_timeout_s, and says so.
    caplog.set_level(logging.INFO, logger="tritonrt.client")
    url = f"http://127.0.0.1:{closed_port}"
    with ModelClient(url, "m", init_timeout_s=2) as client:
        with pytest.raises(PyTritonClientTimeoutError, match="was not live within 2 s"):
            client.wait_for_model(2)
    said = [record.getMessage() for record in caplog.records if record.name == "tritonrt.client"]
    assert said == [f"Nothing listens at {url} (connection refused): waiting up to 2 s for a server there"]
