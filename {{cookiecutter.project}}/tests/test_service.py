{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
{%- set streaming = cookiecutter.streaming == "yes" -%}
"""Integration tests: the service on a local tritonserver, called through the client over HTTP and gRPC."""

from __future__ import annotations

import ipaddress
import json
import os
import re
{%- if batching %}
import signal
{%- endif %}
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
{%- if batching %}
from concurrent.futures import ThreadPoolExecutor
{%- endif %}
from pathlib import Path

import numpy as np
import psutil
import pytest
from conftest import (
    ACCESS_TOKEN,
    MODEL_NAMES,
    PACKAGE,
    PROJECT_DIR,
    Service,
    assert_outputs_close,
    expected_outputs,
    free_ports,
    model_ready,
    outputs_of,
    start_service,
)
from tritonrt.client.exceptions import PyTritonClientError

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import AsyncClient, Client{{ ", Prediction" if batching }}
from {{ cookiecutter.package }}.settings import PREFIX

pytestmark = pytest.mark.integration
PROTOCOLS = ["http", "grpc"]
WAIT_S = 120  # a guard against hanging, not a measurement


def url(service: Service, protocol: str) -> str:
    return service.http_url if protocol == "http" else service.grpc_url


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_predict(service: Service, protocol: str) -> None:
    with Client(url(service, protocol)) as client:
        prediction = client.predict(**spec.example_inputs())
    assert_outputs_close(outputs_of(prediction), expected_outputs())
{%- if batching %}


@pytest.mark.parametrize("count", [3, 2 * spec.MAX_BATCH_SIZE + 3])  # more than MAX_BATCH_SIZE: in batches
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_predict_batch(service: Service, protocol: str, count: int) -> None:
    with Client(url(service, protocol)) as client:
        prediction = client.predict_batch(**spec.example_inputs(count))
    assert_outputs_close(outputs_of(prediction), expected_outputs(count))
{%- endif %}


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_async_client(service: Service, protocol: str) -> None:
    async with AsyncClient(url(service, protocol)) as client:
        prediction = await client.predict(**spec.example_inputs())
{%- if batching %}
        batch = await client.predict_batch(**spec.example_inputs(2 * spec.MAX_BATCH_SIZE + 3))
{%- endif %}
    assert_outputs_close(outputs_of(prediction), expected_outputs())
{%- if batching %}
    assert_outputs_close(outputs_of(batch), expected_outputs(2 * spec.MAX_BATCH_SIZE + 3))
{%- endif %}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_command_line_prints_every_output(service: Service, protocol: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.client", "--url", url(service, protocol)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    printed = [line.split(":")[0] for line in result.stdout.splitlines()]
    assert printed == [tensor.name for tensor in spec.OUTPUTS]


{%- if batching %}


def test_the_command_line_sends_a_batch(service: Service) -> None:
    command = [sys.executable, "-m", f"{PACKAGE}.client", "--url", service.grpc_url, "--batch-size", "2"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    shapes = [line.split(" ")[2] for line in result.stdout.splitlines()]
    assert shapes and all(shape.startswith("(2,") for shape in shapes)
{%- endif %}


@pytest.mark.parametrize("suffix", [".npz", ".json"] + ([".npy"] if len(spec.INPUTS) == 1 else []))
def test_the_command_line_sends_the_inputs_of_a_file(service: Service, suffix: str, tmp_path: Path) -> None:
    inputs = spec.example_inputs({{ "3" if batching }})
    path = tmp_path / f"inputs{suffix}"
    if suffix == ".npz":
        np.savez(path, **inputs)
    elif suffix == ".npy":
        np.save(path, next(iter(inputs.values())))
    else:  # JSON: bytes values as strings
        plain = {
            name: np.char.decode(value) if value.dtype.kind == "S" else value
            for name, value in inputs.items()
        }
        path.write_text(json.dumps({name: value.tolist() for name, value in plain.items()}))
    command = [sys.executable, "-m", f"{PACKAGE}.client", "--url", service.http_url, "--input", str(path)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    printed = [re.match(r"(\w+): \w+ (\([^)]*\))", line) for line in result.stdout.splitlines()]
    shapes = {match.group(1): match.group(2) for match in printed if match}
    assert shapes == {name: str(value.shape) for name, value in expected_outputs({{ "3" if batching }}).items()}


def test_the_access_token_unlocks_the_restricted_endpoints(service: Service) -> None:
    index = urllib.request.Request(f"{service.http_url}/v2/repository/index", data=b"{}", method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(index, timeout=30)
    assert refused.value.code == 403
    index.add_header("triton-access-token", ACCESS_TOKEN)
    with urllib.request.urlopen(index, timeout=30) as response:
        assert spec.MODEL_NAME in response.read().decode()


def short_load_test(
    service: Service, protocol: str, reports: Path, *options: str, duration: str = "3s"
) -> subprocess.CompletedProcess[str]:
    """``python -m loadtests``: 2 users for ``duration``, with its gates (under make: slo.env's p95)."""
    url = service.http_url if protocol == "http" else service.grpc_url
    command = [sys.executable, "-m", "loadtests", "--url", url, "--users", "2", "--duration", duration]
    command += {"http": [], "grpc": ["--protocol", "grpc"], "stream": ["--stream"]}[protocol]
    command += ["--reports", str(reports), *options]
    return subprocess.run(command, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=300)


def missed_gates(result: subprocess.CompletedProcess[str]) -> str:
    """A failed load test's output, and where its latency objective is set and how to meet it."""
    return (
        f"{result.stdout}\n{result.stderr}\nThe short load test missed a gate (above). A p95 latency over "
        "the objective: it is LOADTEST_P95_MS in deploy/k8s/base/slo.env (a slower model sets its own there, "
        "then runs `make slo`); `make tune` finds the batching, instances and workers that meet it; the "
        f"model's math libraries start {PREFIX}THREADS threads per instance (1 unless set; README, Settings)."
    )


@pytest.mark.parametrize("protocol", PROTOCOLS{{ ' + ["stream"]' if streaming }})
def test_a_short_load_test_meets_its_gates(service: Service, protocol: str, tmp_path: Path) -> None:
    result = short_load_test(service, protocol, tmp_path)
    assert result.returncode == 0 and "all gates passed" in result.stdout, missed_gates(result)


def test_a_missed_latency_gate_says_where_the_objective_is_set(service: Service, tmp_path: Path) -> None:
    result = short_load_test(service, "http", tmp_path, "--p95-ms", "0.001", duration="1s")
    assert result.returncode != 0, result.stdout + result.stderr
    message = missed_gates(result)
    assert all(part in message for part in ("deploy/k8s/base/slo.env", "make slo", "make tune")), message


def test_a_busy_port_is_named_by_the_services_variable() -> None:
    http_port, grpc_port, metrics_port = free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", grpc_port))
        taken.listen()
        env = {
            **os.environ,
            f"{PREFIX}HTTP_PORT": str(http_port),
            f"{PREFIX}GRPC_PORT": str(grpc_port),
            f"{PREFIX}METRICS_PORT": str(metrics_port),
        }
        result = subprocess.run(
            [sys.executable, "-m", PACKAGE], env=env, capture_output=True, text=True, timeout=WAIT_S
        )
    assert result.returncode == 1
    assert f"gRPC port {grpc_port} on 127.0.0.1 is already in use" in result.stderr
    assert f"{PREFIX}GRPC_PORT=<port>" in result.stderr
    assert "PYTRITON_TRITON_CONFIG" not in result.stderr


def test_sigterm_stops_the_service_and_its_tritonserver(tmp_path: Path) -> None:
    service = start_service(tmp_path / "service.log")
    try:
        children = psutil.Process(service.process.pid).children(recursive=True)
        assert any(child.name() == "tritonserver" for child in children)
        with Client(service.http_url) as client:
            client.predict(**spec.example_inputs())
        assert service.stop() == 0, service.output()
        _, alive = psutil.wait_procs(children, timeout=60)
        assert alive == []
        assert "finishing in-flight requests" in service.output()
    finally:
        service.stop()


{%- if batching %}


def test_sigterm_lets_in_flight_requests_finish(tmp_path: Path) -> None:
    # A long batching delay keeps the requests in Triton's queue: they are in flight at SIGTERM.
    service = start_service(tmp_path / "service.log", MAX_QUEUE_DELAY_US="3000000")
    try:
        with ThreadPoolExecutor(3) as pool:
            futures = [pool.submit(predict_once, service.http_url) for _ in range(3)]
            deadline = time.monotonic() + WAIT_S
            while pending_requests(service) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            service.process.send_signal(signal.SIGTERM)
            predictions = [future.result() for future in futures]
        for prediction in predictions:
            assert_outputs_close(outputs_of(prediction), expected_outputs())
        # It may still be draining: wait (a second SIGTERM, as service.stop() sends, would stop it at once).
        assert service.process.wait(timeout=WAIT_S) == 0, service.output()
    finally:
        service.stop()


def predict_once(url: str) -> Prediction:
    with Client(url) as client:
        return client.predict(**spec.example_inputs())


def pending_requests(service: Service) -> int:
    """Requests Triton holds for the model, from its Prometheus metrics."""
    address = f"http://127.0.0.1:{service.metrics_port}/metrics"
    with urllib.request.urlopen(address, timeout=5) as response:
        metrics = response.read().decode()
    name = re.escape(spec.MODEL_NAME)
    pattern = r"^nv_inference_pending_request_count\{model=\"" + name + r"\",.*\} (\d+)$"
    return sum(int(count) for count in re.findall(pattern, metrics, flags=re.MULTILINE))
{%- endif %}


def tritonserver_of(service: Service) -> psutil.Process:
    children = psutil.Process(service.process.pid).children(recursive=True)
    return next(child for child in children if child.name() == "tritonserver")


def test_a_dead_tritonserver_is_restarted_and_serves_again(tmp_path: Path) -> None:
    service = start_service(tmp_path / "service.log")
    try:
        dead = tritonserver_of(service)
        dead.kill()
        deadline = time.monotonic() + WAIT_S
        while "tritonserver restarted" not in service.output():
            assert service.process.poll() is None, service.output()
            assert time.monotonic() < deadline, service.output()
            time.sleep(0.2)
        assert all(model_ready(service, name) for name in MODEL_NAMES)
        with Client(service.http_url) as client:
            assert_outputs_close(outputs_of(client.predict(**spec.example_inputs())), expected_outputs())
        assert tritonserver_of(service).pid != dead.pid
        assert "SIGKILL" in service.output()
        assert service.stop() == 0, service.output()
    finally:
        service.stop()


def test_the_service_exits_non_zero_when_tritonserver_dies_and_restarts_are_off(tmp_path: Path) -> None:
    service = start_service(tmp_path / "service.log", RESTARTS="0")
    try:
        tritonserver_of(service).kill()
        assert service.process.wait(timeout=WAIT_S) == 1, service.output()
        assert "Triton stopped serving" in service.output()
        assert f"{PREFIX}RESTARTS=0" in service.output()
    finally:
        service.stop()


def test_requiring_the_token_closes_every_endpoint_but_health(tmp_path: Path) -> None:
    service = start_service(tmp_path / "service.log", ACCESS_TOKEN=ACCESS_TOKEN, REQUIRE_TOKEN="true")
    try:
        with urllib.request.urlopen(f"{service.http_url}/v2/health/ready", timeout=30) as response:
            assert response.status == 200
        for protocol in PROTOCOLS:
            with pytest.raises(PyTritonClientError, match="access"):
                with Client(url(service, protocol), init_timeout_s=30) as client:
                    client.predict(**spec.example_inputs())
            with Client(url(service, protocol), access_token=ACCESS_TOKEN) as client:
                prediction = client.predict(**spec.example_inputs())
            assert_outputs_close(outputs_of(prediction), expected_outputs())
        command = [sys.executable, "-m", f"{PACKAGE}.client", "--url", service.grpc_url, "--timeout-s", "30"]
        refused = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert refused.returncode == 1
        environment = {**os.environ, f"{PREFIX}ACCESS_TOKEN": ACCESS_TOKEN}
        sent = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
        assert sent.returncode == 0, sent.stderr
    finally:
        service.stop()


def loopback(ip: str) -> bool:
    """127.0.0.1, or its IPv6 form ::ffff:127.0.0.1 (gRPC listens on an IPv6 socket)."""
    address = ipaddress.ip_address(ip)
    mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
    return (mapped or address).is_loopback


def test_outside_the_image_it_listens_on_loopback_and_no_command_line_shows_the_token(
    service: Service,
) -> None:
    ports = {service.http_port, service.grpc_port, service.metrics_port}
    listening = [
        connection.laddr
        for connection in tritonserver_of(service).net_connections(kind="inet")
        if connection.status == psutil.CONN_LISTEN and connection.laddr.port in ports
    ]
    assert sorted(address.port for address in listening) == sorted(ports)
    assert all(loopback(address.ip) for address in listening), listening
    shown = []
    for entry in Path("/proc").iterdir():
        try:
            shown.append((entry / "cmdline").read_bytes())
        except OSError:
            continue  # not a process, or gone meanwhile
    assert not any(ACCESS_TOKEN.encode() in arguments for arguments in shown)
