"""Stopping the service: SIGTERM lets the requests in flight finish and does not wait for connections that
clients merely keep open; a second SIGTERM or SIGINT during the drain stops it at once, with a non-zero exit.

A real service (``tests/slow_service.py``: every batch sleeps) on a local tritonserver.
"""

from __future__ import annotations

import concurrent.futures
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import PROJECT_DIR, assert_outputs_close, expected_outputs, outputs_of, start_service
from tritonrt.client.exceptions import PyTritonClientError

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Client

pytestmark = pytest.mark.integration
WAIT_S = 120  # a guard against hanging, not a measurement
BATCH_S = 300  # each batch's sleep: a drain would wait for it (up to EXIT_TIMEOUT_S)
# Far above a drain of one short batch plus a stop (about 2 s) and far below the 30 s (EXIT_TIMEOUT_S) that an
# idle keep-alive connection held every stop for before: tritonserver waited for the connection to close.
STOP_BOUND_S = 10


def test_sigterm_answers_the_request_in_flight_and_does_not_wait_for_idle_connections(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marks = tmp_path / "batches"
    marks.touch()
    monkeypatch.setenv("SLOW_SERVICE_BATCH_S", "1")
    monkeypatch.setenv("SLOW_SERVICE_MARKS", str(marks))
    command = [sys.executable, str(PROJECT_DIR / "tests" / "slow_service.py")]
    service = start_service(tmp_path / "service.log", command=command)  # EXIT_TIMEOUT_S: the default, 30 s
    try:
        with (
            Client(service.http_url) as idle_http,
            Client(service.grpc_url) as idle_grpc,
            Client(service.http_url, inference_timeout_s=WAIT_S) as client,
            concurrent.futures.ThreadPoolExecutor(1) as pool,
        ):
            for connected in (idle_http, idle_grpc, client):  # their connections stay open, idle
                connected.predict(**spec.example_inputs())
            before = marks.read_text().count("batch")
            in_flight = pool.submit(client.predict, **spec.example_inputs())
            deadline = time.monotonic() + WAIT_S
            while marks.read_text().count("batch") == before:  # the request reached the model
                assert time.monotonic() < deadline and not in_flight.done(), service.output()
                time.sleep(0.05)
            started = time.monotonic()
            service.process.send_signal(signal.SIGTERM)
            assert_outputs_close(outputs_of(in_flight.result(WAIT_S)), expected_outputs())
            code = service.process.wait(timeout=WAIT_S)
            took = time.monotonic() - started
        assert code == 0, service.output()
        assert took < STOP_BOUND_S, (
            f"the stop took {took:.1f} s with idle connections open:\n{service.output()}"
        )
    finally:
        service.stop()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_second_signal_during_the_drain_stops_at_once(
    tmp_path: Path, stop_signal: signal.Signals, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_SERVICE_BATCH_S", str(BATCH_S))
    command = [sys.executable, str(PROJECT_DIR / "tests" / "slow_service.py")]
    service = start_service(tmp_path / "service.log", command=command, EXIT_TIMEOUT_S="300")
    try:
        children = psutil.Process(service.process.pid).children(recursive=True)
        outcome: list[BaseException | None] = []

        def predict() -> None:
            try:
                with Client(service.http_url) as client:
                    client.predict(**spec.example_inputs())
                outcome.append(None)
            except PyTritonClientError as error:
                outcome.append(error)

        caller = threading.Thread(target=predict, daemon=True)
        caller.start()
        time.sleep(2)  # the request reaches the model, which sleeps in it
        service.process.send_signal(stop_signal)
        deadline = time.monotonic() + WAIT_S
        while "send it again to stop at once" not in service.output():
            assert time.monotonic() < deadline and service.process.poll() is None, service.output()
            time.sleep(0.1)
        service.process.send_signal(stop_signal)
        assert service.process.wait(timeout=WAIT_S) == 128 + stop_signal, service.output()
        assert "again: stopped at once" in service.output()
        _, alive = psutil.wait_procs(children, timeout=60)
        assert alive == [], "tritonserver or its guard outlived the service"
        caller.join(WAIT_S)
        assert outcome and outcome[0] is not None, "the request was answered: no drain was cut short"
    finally:
        service.stop()
