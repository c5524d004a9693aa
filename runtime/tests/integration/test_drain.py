"""What callers see while tritonserver drains after stop() (SIGINT), as runtime/README.md describes it.

tritonserver (2.51) first closes its HTTP service: new HTTP connections are closed without an answer, while
connections already open are still served, and it waits (up to ``exit_timeout_secs``) for them to close. Then
it stops its core: in-flight inferences finish, new gRPC calls get ``UNAVAILABLE: Server is stopping``, or, once
it has begun to unload the models, ``Request for unknown model: ... has no available versions``. A real tritonserver.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import numpy as np
import pytest

from tritonrt.client import ModelClient
from tritonrt.client._transport import ServerUnreachableError
from tritonrt.client.exceptions import PyTritonClientError
from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration

SLEEP_S = 4.0  # the in-flight request's time in the model: the drain lasts that long
WAIT_S = 60.0  # a guard against hanging, not a measurement
X = np.array([0.0], np.float32)
started = threading.Event()


def _sleepy(requests):
    if float(requests[0]["x"][0]):
        started.set()
    time.sleep(float(requests[0]["x"][0]))
    return [{"y": request["x"]} for request in requests]


def _serve_sleepy(new_triton, exit_timeout_secs: int):
    server = new_triton(exit_timeout_secs=exit_timeout_secs)
    tensors = ([Tensor(name="x", dtype=np.float32, shape=(1,))], [Tensor(name="y", dtype=np.float32, shape=(1,))])
    server.triton.bind("sleepy", _sleepy, *tensors, config=ModelConfig(batching=False))
    server.triton.run()
    started.clear()
    config = server.triton._config
    return server, f"http://127.0.0.1:{config.http_port}", f"grpc://127.0.0.1:{config.grpc_port}"


def test_new_calls_during_the_drain_are_refused_as_stopping(new_triton):
    server, http_url, grpc_url = _serve_sleepy(new_triton, exit_timeout_secs=30)
    with (
        ModelClient(grpc_url, "sleepy", inference_timeout_s=WAIT_S) as in_flight_client,
        ModelClient(grpc_url, "sleepy") as grpc_client,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        grpc_client.infer_sample(X)  # ready and configured before the drain
        config = grpc_client.model_config
        in_flight = pool.submit(in_flight_client.infer_sample, np.array([SLEEP_S], np.float32))
        assert started.wait(WAIT_S)
        stopping = pool.submit(server.triton.stop)
        time.sleep(1.0)  # SIGINT reached tritonserver; no HTTP connection is open: its core is stopping
        with pytest.raises(PyTritonClientError) as refused:  # the core refuses it, or has unloaded the model
            grpc_client.infer_sample(X)
        with ModelClient(http_url, "sleepy", model_config=config, ensure_model_is_ready=False) as new_http:
            with pytest.raises(ServerUnreachableError) as unreachable:
                new_http.infer_sample(X)
        assert in_flight.result(WAIT_S)["y"].tolist() == [SLEEP_S], "the in-flight request is answered"
        stopping.result(WAIT_S)
    assert "is stopping" in str(refused.value) or "has no available versions" in str(refused.value)
    # Refused (listener closed) or dropped (accepted, closed without an answer): both are "unreachable".
    message = str(unreachable.value)
    assert "Check that the server runs" in message or "closed the connection" in message


def test_an_http_connection_opened_before_the_drain_is_still_served(new_triton):
    server, http_url, grpc_url = _serve_sleepy(new_triton, exit_timeout_secs=5)
    with (
        ModelClient(grpc_url, "sleepy", inference_timeout_s=WAIT_S) as in_flight_client,
        ModelClient(http_url, "sleepy") as kept_http,
        concurrent.futures.ThreadPoolExecutor(2) as pool,
    ):
        kept_http.infer_sample(X)  # ready, configured and connected before the drain
        in_flight = pool.submit(in_flight_client.infer_sample, np.array([SLEEP_S], np.float32))
        assert started.wait(WAIT_S)
        stopping = pool.submit(server.triton.stop)
        time.sleep(1.0)
        assert kept_http.infer_sample(X)["y"].tolist() == [0.0]
        assert in_flight.result(WAIT_S)["y"].tolist() == [SLEEP_S]
        kept_http.close()
        stopping.result(WAIT_S)
