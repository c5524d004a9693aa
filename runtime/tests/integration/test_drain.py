"""What callers see while stop() drains the server (tritonrt.server.drain), as runtime/README.md describes it.

stop() first unloads the models: from then on new requests are refused (``Request for unknown model: ... has
no available versions``), on connections opened before and after alike, and the server reports not ready,
while the requests in flight are answered. Then it signals tritonserver with no exit timeout of its own, so
connections that clients merely keep open (an idle HTTP keep-alive connection, a gRPC channel) no longer hold
the stop for ``exit_timeout_secs`` (tritonserver 2.51 waited for them: 30 s by default). A model that others
call (BLS) is unloaded after its callers, so their requests in flight can still call it. A real tritonserver.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import logging
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tritonrt import bls
from tritonrt.client import ModelClient
from tritonrt.client.exceptions import PyTritonClientModelUnavailableError
from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration

WAIT_S = 60.0  # a guard against hanging, not a measurement
# Far above the stop's own time (about 1 s) and far below the 30 s that an idle connection held it before.
STOP_BOUND_S = 10.0
X = np.array([0.0], np.float32)
TENSORS = ([Tensor(name="x", dtype=np.float32, shape=(1,))], [Tensor(name="y", dtype=np.float32, shape=(1,))])


def _serve(new_triton, infer, exit_timeout_secs: int):
    server = new_triton(exit_timeout_secs=exit_timeout_secs)
    server.triton.bind("model", infer, *TENSORS, config=ModelConfig(batching=False))
    server.triton.run()
    config = server.triton.config
    return server, f"http://127.0.0.1:{config.http_port}", f"grpc://127.0.0.1:{config.grpc_port}"


def _echo(requests):
    return [{"y": request["x"]} for request in requests]


def test_connections_kept_open_do_not_hold_the_stop(new_triton, caplog):
    caplog.set_level(logging.DEBUG, logger="tritonrt.server.tritonserver")
    server, http_url, grpc_url = _serve(new_triton, _echo, exit_timeout_secs=30)
    host, port = http_url.removeprefix("http://").split(":")
    keep_alive = http.client.HTTPConnection(host, int(port), timeout=WAIT_S)
    channel = grpcclient.InferenceServerClient(grpc_url.removeprefix("grpc://"))
    try:
        keep_alive.request("GET", "/v2/health/ready")  # HTTP/1.1: the connection stays open, idle
        assert keep_alive.getresponse().read() == b""
        assert channel.is_server_ready()
        started = time.monotonic()
        assert server.triton.stop()
        took = time.monotonic() - started
    finally:
        keep_alive.close()
        channel.close()
    assert took < STOP_BOUND_S, f"stop() took {took:.1f} s with idle connections open"
    assert "service connections" not in caplog.text, "tritonserver waited for the open connections"
    assert "Exit timeout expired" not in caplog.text


def test_requests_in_flight_are_answered_while_new_ones_are_refused(new_triton):
    entered, release = threading.Semaphore(0), threading.Event()

    def held(requests):
        if float(requests[0]["x"][0]):
            entered.release()
            release.wait(WAIT_S)
        return _echo(requests)

    server, http_url, grpc_url = _serve(new_triton, [held, held], exit_timeout_secs=int(WAIT_S))
    probe = grpcclient.InferenceServerClient(grpc_url.removeprefix("grpc://"))
    with (
        ModelClient(http_url, "model", inference_timeout_s=WAIT_S) as in_flight_http,
        ModelClient(grpc_url, "model", inference_timeout_s=WAIT_S) as in_flight_grpc,
        ModelClient(http_url, "model") as kept_http,
        ModelClient(grpc_url, "model") as kept_grpc,
        concurrent.futures.ThreadPoolExecutor(3) as pool,
    ):
        for client in (in_flight_http, in_flight_grpc, kept_http, kept_grpc):
            client.infer_sample(X)  # ready, configured and connected before the stop
        config = kept_http.model_config
        one = np.array([1.0], np.float32)
        in_flight = [pool.submit(client.infer_sample, one) for client in (in_flight_http, in_flight_grpc)]
        assert entered.acquire(timeout=WAIT_S) and entered.acquire(timeout=WAIT_S)  # both in the model
        stopping = pool.submit(server.triton.stop)
        deadline = time.monotonic() + WAIT_S
        while probe.is_model_ready("model"):  # the drain began: the model is being unloaded
            assert time.monotonic() < deadline, "the model stayed ready after stop()"
            time.sleep(0.05)
        probe.close()
        refusals = []
        for client in (kept_http, kept_grpc):
            with pytest.raises(PyTritonClientModelUnavailableError) as refused:
                client.infer_sample(X)
            refusals.append(str(refused.value))
        with ModelClient(http_url, "model", model_config=config, ensure_model_is_ready=False) as new_http:
            with pytest.raises(PyTritonClientModelUnavailableError) as refused:
                new_http.infer_sample(X)
            refusals.append(str(refused.value))
        assert not stopping.done(), "stop() returned while requests were in flight"
        release.set()
        assert [future.result(WAIT_S)["y"].tolist() for future in in_flight] == [[1.0], [1.0]]
        assert stopping.result(WAIT_S)
    assert all("has no available versions" in message and "stopping" in message for message in refusals), refusals


def test_a_call_of_another_model_made_during_the_drain_is_answered(new_triton):
    # The caller is unloaded first, its callee once the caller's requests are answered (BLS calls it made are
    # on /metrics): the request in flight still makes its call after stop() began.
    entered, release = threading.Event(), threading.Event()

    def caller(requests):
        x = requests[0]["x"]
        if float(x[0]):
            entered.set()
            release.wait(WAIT_S)
        return [{"y": bls.infer("callee", x=x)["y"]}]

    server, http_url, _ = _serve(new_triton, caller, exit_timeout_secs=int(WAIT_S))
    server.triton.bind("callee", lambda requests: [{"y": r["x"] * 2} for r in requests], *TENSORS,
                       config=ModelConfig(batching=False))  # fmt: skip
    probe = grpcclient.InferenceServerClient(server.grpc_url)
    with (
        ModelClient(http_url, "model", inference_timeout_s=WAIT_S) as client,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        assert client.infer_sample(X)["y"].tolist() == [0.0]  # a call before the stop: the drain knows of it
        in_flight = pool.submit(client.infer_sample, np.array([1.0], np.float32))
        assert entered.wait(WAIT_S)
        stopping = pool.submit(server.triton.stop)
        deadline = time.monotonic() + WAIT_S
        while probe.is_model_ready("model"):  # the caller is being unloaded; the callee is not yet
            assert time.monotonic() < deadline, "the model stayed ready after stop()"
            time.sleep(0.05)
        assert probe.is_model_ready("callee")
        probe.close()
        release.set()
        assert in_flight.result(WAIT_S)["y"].tolist() == [2.0]
        assert stopping.result(WAIT_S)
