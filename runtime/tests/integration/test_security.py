"""Restricted endpoints need the access token (HTTP header / gRPC metadata); the rest stays open; the token
shows on no process's command line."""

from __future__ import annotations

import http.client
import json
import os
import pathlib
import stat

import numpy as np
import psutil
import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.model_config import Tensor
from tritonrt.server.hidden_args import HIDDEN_VARIABLE_PREFIX
from tritonrt.triton import (
    DEFAULT_PROTECTED_ENDPOINTS,
    GRPC_ACCESS_HEADER,
    TRITON_ACCESS_HEADER,
    Triton,
    TritonSecurityConfig,
)

pytestmark = pytest.mark.integration

X = Tensor(name="x", dtype=np.float32, shape=(-1,))
ONES = {"x": np.ones((1, 2), dtype=np.float32)}


def echo(requests):
    return [{"x": request["x"]} for request in requests]


def http_call(server, method: str, path: str, token: str | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection("127.0.0.1", server.triton.config.http_port, timeout=60)
    try:
        headers = {TRITON_ACCESS_HEADER: token} if token else {}
        connection.request(method, path, body=b"" if method == "POST" else None, headers=headers)
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


@pytest.fixture(scope="module")
def default_server(start_triton):
    server = start_triton()
    server.triton.bind("echo", echo, [X], [X])
    return server


@pytest.fixture(scope="module")
def inference_protected(start_triton):
    security = TritonSecurityConfig(
        access_token="custom-token-123", restricted_endpoints=[*DEFAULT_PROTECTED_ENDPOINTS, "inference"]
    )
    server = start_triton(security_config=security)
    server.triton.bind("echo", echo, [X], [X])
    return server


@pytest.fixture(scope="module")
def open_server(start_triton):
    server = start_triton(security_config=TritonSecurityConfig(restricted_endpoints=[]))
    server.triton.bind("echo", echo, [X], [X])
    return server


@pytest.mark.parametrize(
    "method, path",
    [("POST", "/v2/repository/index"), ("GET", "/v2/models/stats"), ("POST", "/v2/repository/models/echo/load")],
    ids=["repository-index", "statistics", "model-load"],
)
def test_http_restricted_endpoints_need_the_token(default_server, method, path):
    status, body = http_call(default_server, method, path)
    assert status == 403 and TRITON_ACCESS_HEADER in body
    assert http_call(default_server, method, path, token="wrong")[0] == 403
    assert http_call(default_server, method, path, token=default_server.token)[0] == 200


def test_http_repository_index_with_the_token_lists_the_model(default_server):
    status, body = http_call(default_server, "POST", "/v2/repository/index", token=default_server.token)
    assert status == 200
    assert [(model["name"], model["state"]) for model in json.loads(body)] == [("echo", "READY")]


def test_grpc_restricted_endpoints_need_the_token(default_server):
    client = default_server.grpc
    with pytest.raises(InferenceServerException) as caught:
        client.get_model_repository_index()
    assert "restricted" in caught.value.message().lower() or "access" in caught.value.message().lower()
    with pytest.raises(InferenceServerException):
        client.load_model("echo")
    headers = {GRPC_ACCESS_HEADER: default_server.token}
    assert [model.name for model in client.get_model_repository_index(headers=headers).models] == ["echo"]
    client.load_model("echo", headers=headers)
    assert client.is_model_ready("echo")


def test_inference_health_and_metadata_stay_open(default_server, protocol):
    assert default_server.infer(protocol, "echo", ONES)["x"].tolist() == [[1, 1]]
    client = default_server.http if protocol == "http" else default_server.grpc
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("echo")
    assert client.get_model_metadata("echo")
    assert http_call(default_server, "GET", "/v2/models/echo/config")[0] == 200


def test_each_start_gets_its_own_token(server_dir):
    first, second = Triton(), Triton()
    try:
        assert first.get_access_token() != second.get_access_token()
        assert len(first.get_access_token()) >= 32
    finally:
        first.stop()
        second.stop()


def test_protected_inference_needs_the_token(inference_protected, protocol):
    message = inference_protected.infer_error(protocol, "echo", ONES)
    assert "access" in message.lower() or "restricted" in message.lower()
    header = TRITON_ACCESS_HEADER if protocol == "http" else GRPC_ACCESS_HEADER
    result = inference_protected.infer(protocol, "echo", ONES, headers={header: "custom-token-123"})
    assert result["x"].tolist() == [[1, 1]]
    assert inference_protected.token == "custom-token-123"


def test_no_restricted_endpoints_opens_everything(open_server):
    status, body = http_call(open_server, "POST", "/v2/repository/index")
    assert status == 200 and json.loads(body)[0]["name"] == "echo"
    assert [model.name for model in open_server.grpc.get_model_repository_index().models] == ["echo"]


def command_lines() -> dict[int, bytes]:
    """Every process's arguments, as ``ps`` shows them to any local user."""
    found = {}
    for entry in pathlib.Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = (entry / "cmdline").read_bytes()
            except OSError:
                continue  # gone meanwhile
    return found


@pytest.mark.parametrize("fixture", ["default_server", "inference_protected"])
def test_the_access_token_is_on_no_command_line(fixture, request):
    server = request.getfixturevalue(fixture)
    token = server.token.encode()
    tritonserver = next(
        process
        for process in psutil.Process().children(recursive=True)
        if f"--http-port={server.triton.config.http_port}" in " ".join(process.cmdline())
    )
    guard = tritonserver.parent()
    shown = command_lines()
    assert [pid for pid, arguments in shown.items() if token in arguments] == []
    assert guard.cmdline()[1:] == ["-m", "tritonrt.server.guard"]
    assert "--http-restricted-api=(hidden by tritonrt)" in tritonserver.cmdline()
    assert "--grpc-restricted-protocol=(hidden by tritonrt)" in tritonserver.cmdline()
    # The hidden flags took effect: the restricted endpoint opens with the token and only with it.
    assert http_call(server, "POST", "/v2/repository/index")[0] == 403
    assert http_call(server, "POST", "/v2/repository/index", token=server.token)[0] == 200
    # The server's environment (where the flags were passed) is readable by its owner only, and any child it
    # starts does not inherit them (tritonrt's backend runs inside the server: it starts none).
    assert stat.S_IMODE(os.stat(f"/proc/{tritonserver.pid}/environ").st_mode) == 0o400
    for child in tritonserver.children():
        assert not any(name.startswith(HIDDEN_VARIABLE_PREFIX) for name in child.environ()), child.cmdline()
