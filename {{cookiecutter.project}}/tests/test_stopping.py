"""Stopping the service: a second SIGTERM or SIGINT during the drain stops it at once, with a non-zero exit.

A real service (``tests/slow_service.py``: every batch sleeps) on a local tritonserver.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import PROJECT_DIR, start_service
from tritonrt.client.exceptions import PyTritonClientError

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Client

pytestmark = pytest.mark.integration
WAIT_S = 120  # a guard against hanging, not a measurement
BATCH_S = 300  # each batch's sleep: a drain would wait for it (up to EXIT_TIMEOUT_S)


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
