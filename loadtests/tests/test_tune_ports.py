"""A candidate whose ports another server took between picking and binding: the tuner hears that server answer,
sees its own service exit, and says so as an exit (the tuner then tries once more on other ports). And the wait
for a service is a wait for its model: a server answers ready before its models are loaded."""

from __future__ import annotations

import http.server
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadtests.errors import LoadTestSetupError
from loadtests.tune import service_process
from loadtests.tune.service_process import Service, ServiceFailed, ServiceProcess


class _NotFound(http.server.BaseHTTPRequestHandler):
    """A server that is ready (``/v2/health/ready``) and has no model."""

    def do_GET(self) -> None:
        if self.path == "/v2/health/ready":
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def other_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _service_process(tmp_path: Path, port: int, script: str) -> ServiceProcess:
    process = ServiceProcess(Service.of("demo", "tuned"), None, tmp_path)
    process.http_port = port
    process._process = subprocess.Popen([sys.executable, "-c", script])
    return process


def test_another_server_on_the_port_and_an_exited_service_is_an_exit(tmp_path: Path, other_server: int) -> None:
    process = _service_process(tmp_path, other_server, "raise SystemExit(2)")
    with pytest.raises(ServiceFailed, match="another server answered") as failed:
        process.model_config()
    assert failed.value.exited


def test_a_running_service_without_the_model_is_a_setup_error(tmp_path: Path, other_server: int) -> None:
    process = _service_process(tmp_path, other_server, "import time; time.sleep(60)")
    try:
        with pytest.raises(LoadTestSetupError, match="pass the model's name with --model"):
            process.model_config()
    finally:
        process.stop()


def test_a_ready_server_without_the_model_is_waited_for_then_named(
    tmp_path: Path, other_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_process, "MODEL_WAIT_S", 0.5)
    process = _service_process(tmp_path, other_server, "import time; time.sleep(60)")
    try:
        with pytest.raises(LoadTestSetupError, match="is ready but model 'tuned' is not"):
            process.wait_ready(30)
    finally:
        process.stop()


def test_a_second_ctrl_c_while_a_service_stops_kills_it_at_once(tmp_path: Path) -> None:
    # A service that ignores SIGTERM (in a session of its own, as the tuner starts it): the wait for it to stop is
    # cut by a KeyboardInterrupt, as a second Ctrl+C cuts it, and the service is killed then, not left behind.
    process = ServiceProcess(Service.of("demo", "tuned"), None, tmp_path)
    ignores = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    child = process._process = subprocess.Popen(
        [sys.executable, "-c", ignores], stdout=subprocess.PIPE, start_new_session=True
    )
    assert child.stdout is not None and child.stdout.readline() == b"\n"  # its handler is set
    timer = threading.Timer(0.5, signal.raise_signal, (signal.SIGINT,))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            process.stop()
        stopped = child.poll()  # stop() reaped it: no wait here
    finally:
        timer.cancel()
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    assert stopped == -signal.SIGKILL
    assert process._process is None
