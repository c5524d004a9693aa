"""Faults tritonrt recovers from, driven for real: a killed tritonserver, requests that crash it, and a model
instance that loses its worker (its connection ends while Triton serves the model). Each asserts the outcome
(recovered, or the owner stopped with a failure), that the server answers again afterwards and, for the
server's faults, that readiness never said ready while tritonrt was recovering. The session's fixtures check
that nothing is left behind (processes, socket folders)."""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import signal
import socket
import threading
import time

import numpy as np
import psutil
import pytest

from tritonrt.decorators import batch
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.server.supervisor import RECONNECT_GRACE_S
from tritonrt.triton import RecoveryPolicy

pytestmark = pytest.mark.integration

RECOVERY_WAIT_S = 120  # a guard against hanging, not a measurement
X = Tensor(name="x", dtype=np.float32, shape=(-1,))
Y = Tensor(name="y", dtype=np.float32, shape=(-1,))
INPUTS = {"x": np.array([[1.0, 2.0]], dtype=np.float32)}
FAST = {"backoff_s": 0.1, "max_backoff_s": 0.2}
# The two HTTP requests that crash tritonserver itself (Triton 2.51, upstream too).
ABORT = {"inputs": [{"name": "x", "shape": [1, 2**40], "datatype": "FP32", "data": [1, 2, 3, 4]}]}
DEPTH = 100_000
SEGFAULT = '{"inputs":[{"name":"x","shape":[1,2],"datatype":"FP32","data":' + "[" * DEPTH + "1" + "]" * DEPTH + "}]}"


@batch
def double(x):
    return {"y": x * 2}


def serving(new_triton, recovery: RecoveryPolicy, instances: int = 1):
    server = new_triton(recovery=recovery)
    config = ModelConfig(max_batch_size=8)
    server.triton.bind("double", [double] * instances, [X], [Y], config=config)
    server.triton.run()
    return server


def tritonserver_of(server) -> psutil.Process:
    port = f"--http-port={server.triton.config.http_port}"
    return next(p for p in psutil.Process().children(recursive=True) if port in " ".join(p.cmdline()))


def break_connection(server, model: str, index: int = 0) -> None:
    """End the connection between instance ``index`` of ``model`` and its worker, as a fault of the backend's
    end does (the instances live inside tritonserver, so the test closes the worker's end)."""
    worker = server.triton._models[model]._workers[index]
    deadline = time.monotonic() + RECOVERY_WAIT_S
    while not worker.connected:  # connected during the load; the worker thread records it a moment later
        assert time.monotonic() < deadline, "the instance never connected"
        time.sleep(0.01)
    worker.listener.current.link.sock.shutdown(socket.SHUT_RDWR)


def post(server, body: str | bytes) -> int | None:
    connection = http.client.HTTPConnection("127.0.0.1", server.triton.config.http_port, timeout=60)
    try:
        connection.request("POST", "/v2/models/double/infer", body=body)
        return connection.getresponse().status
    except OSError:
        return None  # the server died while answering
    finally:
        connection.close()


def assert_serves(server) -> None:
    for protocol in ("http", "grpc"):
        assert server.infer(protocol, "double", INPUTS)["y"].tolist() == [[2.0, 4.0]]


def assert_recovered(probe, recoveries, fault_text: str) -> None:
    """From tritonrt's fault report on, readiness never said ready (200) before an inference that then failed
    was sent; it said not ready at least once before the recovery report; and every inference sent after that
    report succeeded."""
    detected = recoveries.wait_fault(fault_text)
    recovered = recoveries.wait_recovered()
    probe.wait_for_inferences_after(recovered)
    last_failure = max((sent for sent, _, _ in probe.failed_inferences_after(detected)), default=detected)
    assert probe.ready_between(detected, last_failure) == [], "ready, then a request sent afterwards failed"
    assert probe.not_ready_between(detected, recovered) > 0, "no readiness probe fell into the outage"
    assert probe.failed_inferences_after(recovered) == []


def test_a_lost_instance_is_noticed_and_its_model_reloaded(new_triton, recoveries):
    server = serving(new_triton, RecoveryPolicy(**FAST))
    assert_serves(server)
    server.close_clients()  # no request reaches the instance: it does not connect again by itself
    break_connection(server, "double")
    recoveries.wait_recovered()
    assert recoveries.faults[0][1].startswith("model 'double' lost its connection")
    assert server.triton.is_alive() and server.triton.failure is None
    assert_serves(server)


def test_a_lost_connection_is_made_again_by_the_next_request(new_triton, recoveries):
    """The backend connects again for its next batch: a request right after the break is answered, and the
    model is not reloaded (a reload would make it unavailable meanwhile)."""
    server = serving(new_triton, RecoveryPolicy(**FAST))
    break_connection(server, "double")
    assert_serves(server)
    time.sleep(RECONNECT_GRACE_S + 0.5)
    assert recoveries.faults == [] and recoveries.recovered == []
    assert server.triton.is_alive() and server.triton.failure is None


def test_a_deliberate_unload_and_load_is_no_fault(new_triton, recoveries):
    server = serving(new_triton, RecoveryPolicy(**FAST))
    api = server.triton._server_api()
    for _ in range(3):
        api.unload_model("double")
        api.load_model("double")
        assert_serves(server)
    time.sleep(1.0)  # a reload would start at once (FAST): give it time to show
    assert recoveries.faults == [] and recoveries.recovered == []
    api.unload_model("double")  # and left unloaded, it stays unloaded
    time.sleep(1.0)
    assert recoveries.faults == [] and not api.is_model_ready("double")
    assert server.triton.is_alive()


class Instance:
    """One instance's callable: doubles, slowly enough that concurrent requests spread over the instances;
    counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, requests):
        self.calls += 1
        time.sleep(0.005)
        return [{"y": request["x"] * 2} for request in requests]


def test_every_instance_of_a_model_serves_again(new_triton, recoveries):
    server = new_triton(recovery=RecoveryPolicy(**FAST))
    instances = [Instance(), Instance()]
    server.triton.bind("double", instances, [X], [Y], config=ModelConfig(max_batch_size=8))
    server.triton.run()
    break_connection(server, "double")
    recoveries.wait_recovered()
    assert recoveries.faults[0][1].startswith("model 'double' lost its connection")
    # Each worker serves its new instance, so requests to either are answered.
    for instance in instances:
        instance.calls = 0
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: server.infer("grpc", "double", INPUTS)["y"].tolist(), range(32)))
    assert results == [[[2.0, 4.0]]] * 32
    assert all(instance.calls for instance in instances), [instance.calls for instance in instances]
    assert server.triton.is_alive()


def test_a_model_that_keeps_losing_its_instance_stops_the_server_with_a_failure(new_triton, recoveries):
    server = serving(new_triton, RecoveryPolicy(model_reloads=1, **FAST))
    serve = threading.Thread(target=server.triton.serve, kwargs={"monitoring_period_sec": 0.2}, daemon=True)
    serve.start()
    break_connection(server, "double")
    recoveries.wait_recovered()
    break_connection(server, "double")
    serve.join(RECOVERY_WAIT_S)
    assert not serve.is_alive(), "serve() did not return after the model could not be recovered"
    assert not server.triton.is_alive()
    assert "model 'double'" in server.triton.failure and "model_reloads=1" in server.triton.failure


def test_a_killed_tritonserver_is_restarted_with_its_models(new_triton, recoveries, probes):
    server = serving(new_triton, RecoveryPolicy(**FAST))
    old = tritonserver_of(server)
    with probes(server, "double", INPUTS) as probe:
        old.send_signal(signal.SIGKILL)
        assert_recovered(probe, recoveries, "exited unexpectedly")
    assert "SIGKILL" in recoveries.faults[0][1]
    assert tritonserver_of(server).pid != old.pid and not psutil.pid_exists(old.pid)
    assert server.triton.is_alive() and server.triton.failure is None
    assert_serves(server)


@pytest.mark.parametrize(
    "body, signal_name",
    [(json.dumps(ABORT), "SIGABRT"), (SEGFAULT, "SIGSEGV")],
    ids=["shape-2^40-aborts", "nested-brackets-segfault"],
)
def test_a_request_that_crashes_tritonserver_is_survived(new_triton, body, signal_name, recoveries, probes):
    server = serving(new_triton, RecoveryPolicy(**FAST))
    with probes(server, "double", INPUTS) as probe:
        assert post(server, body) is None, "the request was expected to crash tritonserver"
        assert_recovered(probe, recoveries, "exited unexpectedly")
    assert signal_name in recoveries.faults[0][1]
    assert_serves(server)


def test_restarts_past_the_budget_end_serve_with_a_failure(new_triton, recoveries):
    server = serving(new_triton, RecoveryPolicy(server_restarts=1, **FAST))
    serve = threading.Thread(target=server.triton.serve, kwargs={"monitoring_period_sec": 0.2}, daemon=True)
    serve.start()
    tritonserver_of(server).send_signal(signal.SIGKILL)
    recoveries.wait_recovered()
    assert_serves(server)
    server.close_clients()
    os.kill(tritonserver_of(server).pid, signal.SIGKILL)
    serve.join(RECOVERY_WAIT_S)
    assert not serve.is_alive(), "serve() did not return after the restarts were used up"
    assert "server_restarts=1" in server.triton.failure and "SIGKILL" in server.triton.failure
    assert not server.triton.is_alive()


def test_a_server_that_served_healthily_is_restarted_at_once_uncounted(new_triton, recoveries):
    """One crashing request after another healthy run each (healthy_s=0: every run counts as healthy, as a crash
    a minute does with the default 30 s): with server_restarts=1, the third crash is restarted too."""
    server = serving(new_triton, RecoveryPolicy(server_restarts=1, healthy_s=0, **FAST))
    serve = threading.Thread(target=server.triton.serve, kwargs={"monitoring_period_sec": 0.2}, daemon=True)
    serve.start()
    for count in (1, 2, 3):
        assert post(server, json.dumps(ABORT)) is None, "the request was expected to crash tritonserver"
        recoveries.wait_recovered(count)
        assert_serves(server)
        server.close_clients()
    assert server.triton.is_alive() and server.triton.failure is None
    assert sum("restarting tritonserver at once (it served" in message for _, message in recoveries.faults) == 3
    server.triton.stop()
    serve.join(RECOVERY_WAIT_S)
