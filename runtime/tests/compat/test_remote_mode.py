"""Remote mode: one process starts Triton, two others bind models to it with ``RemoteTriton(url=...,
access_token=...)``, as in PyTriton 0.7's remote-mode example; each binder's Ctrl+C unloads only its model."""

from __future__ import annotations

import secrets
import urllib.error
import urllib.request

import numpy as np
import pytest

from tritonrt.client import ModelClient


def _ready(http_port: int, model: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/v2/models/{model}/ready", timeout=5) as answer:
            return answer.status == 200
    except urllib.error.HTTPError:
        return False


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_two_processes_bind_models_to_a_server_a_third_started(start, ports, scheme):
    http_port, grpc_port, _ = ports
    token = secrets.token_urlsafe(16)
    server = start("remote_server.py", *ports, token)
    server.wait_for("SERVING")
    url = f"http://127.0.0.1:{http_port}" if scheme == "http" else f"grpc://127.0.0.1:{grpc_port}"
    binders = {name: start("remote_model.py", url, token, name, factor) for name, factor in (("Mul2", 2), ("Mul3", 3))}
    for binder in binders.values():
        binder.wait_for("SERVING")
        assert "CREATED connected=False" in binder.output() and "ENTERED connected=True" in binder.output()
    for name, factor in (("Mul2", 2), ("Mul3", 3)):
        with ModelClient(f"127.0.0.1:{http_port}", name, init_timeout_s=60) as client:
            result = client.infer_batch(x=np.array([[1.0, 2.0]], np.float32))
            assert result["y"].tolist() == [[1.0 * factor, 2.0 * factor]]

    binders["Mul2"].interrupt()
    assert binders["Mul2"].wait() == 0, binders["Mul2"].output()
    assert "AFTER SERVE connected=False" in binders["Mul2"].output() and "REMOTE DONE" in binders["Mul2"].output()
    assert not _ready(http_port, "Mul2")  # unloaded with its process
    with ModelClient(f"grpc://127.0.0.1:{grpc_port}", "Mul3", init_timeout_s=60) as client:
        assert client.infer_sample(x=np.array([5.0, 6.0], np.float32))["y"].tolist() == [15.0, 18.0]

    binders["Mul3"].interrupt()
    assert binders["Mul3"].wait() == 0, binders["Mul3"].output()
    assert not _ready(http_port, "Mul3")
    server.interrupt()
    assert server.wait() == 0, server.output()
    assert "SERVER DONE" in server.output()
    for program in (server, *binders.values()):
        assert "Traceback" not in program.output()
