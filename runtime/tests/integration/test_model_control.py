"""Triton's model control with a config override (the README's "Model control" says what works): a refused or
failed load leaves the model serving with its config as bound."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration

X = Tensor(name="x", dtype=np.float32, shape=(-1,))


def echo(requests):
    return [{"x": request["x"]} for request in requests]


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    server.triton.bind("controlled", echo, [X], [X], config=ModelConfig(max_batch_size=8))
    return server


def test_an_override_that_changes_the_config_fails_and_the_model_serves_on(server):
    """A changed config makes Triton create the model's instances anew while the old ones serve; a tritonrt
    instance's worker takes one backend connection at a time, so the new instance's handshake times out."""
    headers = {"triton-access-token": server.token}
    config = server.http.get_model_config("controlled")
    config["max_batch_size"] = 16
    with pytest.raises(InferenceServerException, match="did not answer the handshake"):
        server.http.load_model("controlled", config=json.dumps(config), headers=headers)
    data = np.arange(3, dtype=np.float32).reshape(1, 3)
    assert server.infer("http", "controlled", {"x": data})["x"].tolist() == data.tolist()
    assert server.http.get_model_config("controlled")["max_batch_size"] == 8


def test_an_override_without_the_backend_is_refused_and_the_model_serves_on(server, caplog):
    headers = {"triton-access-token": server.token}
    with pytest.raises(InferenceServerException, match="failed to load 'controlled'"):
        server.http.load_model("controlled", config=json.dumps({"max_batch_size": 32}), headers=headers)
    reason = "Could not determine backend for model 'controlled'"
    deadline = time.monotonic() + 10
    while reason not in caplog.text and time.monotonic() < deadline:  # the server's log, forwarded by a thread
        time.sleep(0.05)
    assert reason in caplog.text
    assert '"backend": "tritonrt" included' in caplog.text  # tritonrt's explanation follows Triton's line
    data = np.ones((1, 2), dtype=np.float32)
    assert server.infer("http", "controlled", {"x": data})["x"].tolist() == data.tolist()  # still served


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_the_model_control_flow_of_tritons_examples(server, protocol):
    """As simple_http_model_control and simple_grpc_model_control do before their override: the index lists the
    model ready; an unload makes it unready, a load serves it again."""
    client = server.http if protocol == "http" else server.grpc
    key = "triton-access-token" if protocol == "http" else "triton-grpc-protocol-triton-access-token"
    headers = {key: server.token}
    index = client.get_model_repository_index(headers=headers)
    models = index if protocol == "http" else [{"name": model.name, "state": model.state} for model in index.models]
    assert ("controlled", "READY") in [(model["name"], model.get("state")) for model in models]
    client.unload_model("controlled", headers=headers)
    deadline = time.monotonic() + 30
    while client.is_model_ready("controlled") and time.monotonic() < deadline:  # an unload returns before it ends
        time.sleep(0.05)
    assert not client.is_model_ready("controlled")
    client.load_model("controlled", headers=headers)
    assert client.is_model_ready("controlled")
    data = np.full((1, 2), 7, dtype=np.float32)
    assert server.infer(protocol, "controlled", {"x": data})["x"].tolist() == data.tolist()
