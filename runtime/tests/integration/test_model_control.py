"""Triton's model control: the repository index, loads and unloads, and a load with a config override that
names no backend (as NVIDIA's model-control examples send); test_reload.py has the overrides that change a
model while it serves."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.model_config import ModelConfig, Tensor

# tritonserver 2.51 crashes now and then when models are loaded and unloaded in quick succession (tests/crash_rerun.py)
pytestmark = [pytest.mark.integration, pytest.mark.rerun_on_tritonserver_crash]

X = Tensor(name="x", dtype=np.float32, shape=(-1,))


def echo(requests):
    return [{"x": request["x"]} for request in requests]


BOUND = {"backend": "tritonrt", "max_batch_size": 8, "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1]}],
         "output": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1]}], "dynamic_batching": {}}  # fmt: skip


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    server.triton.bind("controlled", echo, [X], [X], config=ModelConfig(max_batch_size=8))
    return server


def test_an_override_without_the_backend_is_served_with_the_bound_tensors(server):
    """Triton infers backend "python" from the model.py that tritonrt writes into the version folder, loads the
    libtriton_python.so beside it (tritonrt's backend), and the backend completes the inputs and outputs."""
    headers = {"triton-access-token": server.token}
    server.http.load_model("controlled", config=json.dumps({"max_batch_size": 32}), headers=headers)
    try:
        config = server.http.get_model_config("controlled")
        assert (config["backend"], config["max_batch_size"]) == ("python", 32)
        assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [("x", "TYPE_FP32", [-1])]
        assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [("x", "TYPE_FP32", [-1])]
        data = np.ones((32, 2), dtype=np.float32)
        assert server.infer("http", "controlled", {"x": data})["x"].tolist() == data.tolist()
    finally:
        server.http.load_model("controlled", config=json.dumps(BOUND), headers=headers)
    assert server.http.get_model_config("controlled")["backend"] == "tritonrt"


SIMPLE_INPUTS = [Tensor(name=f"INPUT{i}", dtype=np.int32, shape=(16,)) for i in range(2)]
SIMPLE_OUTPUTS = [Tensor(name=f"OUTPUT{i}", dtype=np.int32, shape=(16,)) for i in range(2)]


def add_sub(requests):
    return [{"OUTPUT0": r["INPUT0"] + r["INPUT1"], "OUTPUT1": r["INPUT0"] - r["INPUT1"]} for r in requests]


def model_control_example(client, grpc: bool, count: int, headers: dict[str, str]) -> None:
    """What NVIDIA's simple_http_model_control.py and simple_grpc_model_control.py do (the client repository's
    src/python/examples), step by step, with the same checks."""
    index = client.get_model_repository_index(headers=headers)
    assert len(index.models if grpc else index) == count
    client.load_model("simple", headers=headers)
    assert client.is_model_ready("simple")
    with pytest.raises(InferenceServerException, match="failed to load"):
        client.load_model("simple", config='"parameters": {"config": {{"max_batch_size": "16"}}}', headers=headers)
    client.load_model("simple", config='{"max_batch_size":"16"}', headers=headers)
    config = client.get_model_config("simple", headers=headers)
    assert (config.config.max_batch_size if grpc else config["max_batch_size"]) == 16
    client.unload_model("simple", headers=headers)
    assert not client.is_model_ready("simple")
    with pytest.raises(InferenceServerException, match="failed to load"):
        client.load_model("wrong_model_name", headers=headers)


def test_nvidias_model_control_examples_pass(start_triton):
    """The HTTP example expects 7 models in the repository, the gRPC one 8: an eighth is bound between them."""
    server = start_triton()
    server.triton.bind("simple", add_sub, SIMPLE_INPUTS, SIMPLE_OUTPUTS, config=ModelConfig(max_batch_size=8))
    for index in range(6):
        server.triton.bind(f"other_{index}", echo, [X], [X], config=ModelConfig(max_batch_size=8))
    model_control_example(server.http, False, 7, {"triton-access-token": server.token})
    server.triton.bind("other_6", echo, [X], [X], config=ModelConfig(max_batch_size=8))
    model_control_example(server.grpc, True, 8, {"triton-grpc-protocol-triton-access-token": server.token})
    server.http.load_model("simple", headers={"triton-access-token": server.token})  # as bound again
    data = np.arange(16, dtype=np.int32).reshape(1, 16)
    result = server.infer("grpc", "simple", {"INPUT0": data, "INPUT1": data})
    assert result["OUTPUT0"].tolist() == (2 * data).tolist() and result["OUTPUT1"].tolist() == [[0] * 16]


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
