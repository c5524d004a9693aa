"""Integration: the PyTriton 0.7 arguments and helpers whose tritonrt behaviour goes beyond (or differs from)
what the compatibility programs check on both runtimes: a model's own trace settings, the monitoring period's
two names, connect() before a start, RemoteTriton's workspace and token, and ``tritonrt.client.utils``."""

from __future__ import annotations

import json
import threading
import time
import urllib.request

import numpy as np
import pytest

from tritonrt.client.exceptions import PyTritonClientTimeoutError
from tritonrt.client.utils import create_client_from_url, get_model_state, wait_for_model_ready, wait_for_server_ready
from tritonrt.exceptions import PyTritonInvalidOperationError, PyTritonRuntimeError
from tritonrt.model_config import Tensor
from tritonrt.triton import RemoteTriton, Triton

X = Tensor(name="x", dtype=np.float32, shape=(-1,))


def echo(requests):
    return [{"x": request["x"]} for request in requests]


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    server.triton.bind("echo", echo, [X], [X])
    return server


def _trace_settings(server, model: str) -> dict:
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/{model}/trace/setting", headers={"triton-access-token": server.token}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.loads(answer.read())


def test_bind_trace_config_sets_the_models_own_trace_settings(start_triton, tmp_path):
    trace_file = tmp_path / "trace.json"
    server = start_triton(trace_config=[f"triton,file={trace_file}"])  # Triton's tracing needs its file
    own_settings = ["level=TIMESTAMPS", "rate=1", "log-frequency=1", "mode=triton"]  # the mode: server-wide
    server.triton.bind("traced", echo, [X], [X], trace_config=own_settings)
    server.triton.bind("untraced", echo, [X], [X])
    settings = _trace_settings(server, "traced")
    assert (settings["trace_level"], settings["trace_rate"], settings["log_frequency"]) == (["TIMESTAMPS"], "1", "1")
    assert _trace_settings(server, "untraced")["trace_level"] == ["OFF"]
    server.infer("http", "traced", {"x": np.ones((1, 2), np.float32)})
    server.infer("http", "untraced", {"x": np.ones((1, 2), np.float32)})

    def traces() -> str:  # with a log frequency, Triton numbers its files: trace.json.0, ...
        return "".join(path.read_text() for path in tmp_path.glob("trace.json*")).replace(" ", "")

    deadline = time.monotonic() + 30
    while '"model_name":"traced"' not in traces() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert '"model_name":"traced"' in traces() and '"model_name":"untraced"' not in traces()


def test_trace_settings_the_server_refuses_leave_the_model_serving(server, caplog):
    server.triton.bind("refused_trace", echo, [X], [X], trace_config=["level=TIMESTAMPS"])  # no trace file
    assert "serves without its trace settings" in caplog.text and "triton,file=" in caplog.text
    assert server.infer("http", "refused_trace", {"x": np.ones((1, 2), np.float32)})["x"].tolist() == [[1, 1]]


@pytest.mark.parametrize("keyword", ["monitoring_period_s", "monitoring_period_sec"])
def test_serve_checks_liveness_every_monitoring_period(new_triton, keyword):
    triton = new_triton().triton
    triton.bind("echo", echo, [X], [X])
    checks = []
    is_alive = triton.is_alive

    def counting() -> bool:
        checks.append(time.monotonic())
        return is_alive()

    triton.is_alive = counting  # type: ignore[method-assign]
    serving = threading.Thread(target=triton.serve, kwargs={keyword: 0.1})
    serving.start()
    while not triton.is_connected():
        time.sleep(0.05)
    time.sleep(1.0)
    assert triton.stop() is True
    serving.join(30)
    assert not serving.is_alive()
    assert len(checks) >= 5  # about ten in the second it served; the default period would give one


def test_connect_before_the_server_runs_says_how_to_start_it(free_triton_config):
    triton = Triton(config=free_triton_config())
    with pytest.raises(PyTritonInvalidOperationError, match="start it with run\\(\\) or serve\\(\\)"):
        triton.connect()
    assert triton.is_connected() is False and triton.stop() is False


def test_remote_triton_puts_its_sockets_in_the_given_workspace(server, tmp_path):
    workspace = tmp_path / "shared"
    with RemoteTriton(f"http://{server.http_url}", workspace, server.token) as remote:
        remote.bind("in_workspace", echo, [X], [X])
        sockets = list(workspace.glob("tritonrt-*/*.sock"))
        assert len(sockets) == 1
        assert server.infer("grpc", "in_workspace", {"x": np.ones((1, 2), np.float32)})["x"].tolist() == [[1, 1]]
    assert workspace.is_dir() and not list(workspace.glob("tritonrt-*"))  # the user's folder stays, emptied


def test_remote_triton_with_a_wrong_token_names_the_refusal(server):
    with RemoteTriton(f"grpc://{server.grpc_url}", access_token="wrong") as remote:
        with pytest.raises(PyTritonRuntimeError, match="Could not load model 'refused'.*"):
            remote.bind("refused", echo, [X], [X])
    assert not server.http.is_model_ready("refused")


def test_client_utils_wait_for_what_comes_and_time_out_on_what_does_not(server, free_triton_config):
    nothing = create_client_from_url(f"127.0.0.1:{free_triton_config().http_port}", network_timeout_s=1)
    with pytest.raises(PyTritonClientTimeoutError, match="was not live within 0.5 s"):
        wait_for_server_ready(nothing, timeout_s=0.5)
    nothing.close()
    client = create_client_from_url(f"grpc://{server.grpc_url}")
    headers = {"triton-grpc-protocol-triton-access-token": server.token}
    with pytest.raises(PyTritonClientTimeoutError, match="'later'.*index does not list it.*echo 1"):
        wait_for_model_ready(client, "later", timeout_s=0.5, headers=headers)
    threading.Timer(0.5, lambda: server.triton.bind("later", echo, [X], [X])).start()
    wait_for_model_ready(client, "later", timeout_s=60, headers=headers)  # bound meanwhile: waited for
    assert get_model_state(client, "later", headers=headers).value == "READY"
    assert get_model_state(client, "later", "2", headers=headers).value == "UNAVAILABLE"
    client.close()
