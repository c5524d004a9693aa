"""TritonServerProcess kills a server that printed a crash but hangs, so that the supervisor can restart it."""

from __future__ import annotations

import sys
import threading

from tritonrt.server import process as process_module
from tritonrt.server.process import TritonServerProcess

# Far longer than the patched CRASH_EXIT_S, and than any normal wait here.
EXIT_WAIT_S = 60.0


def _server(script: str) -> TritonServerProcess:
    return TritonServerProcess([sys.executable, "-c", script], {}, cleanup=[], verbose=False)


def _exit_code(server: TritonServerProcess) -> int | None:
    exited = threading.Event()
    codes: list[int] = []
    server.register_on_exit(lambda code: (codes.append(code), exited.set()))
    server.start()
    try:
        exited.wait(EXIT_WAIT_S)
    finally:
        server.kill()
    return codes[0] if codes else None


def test_a_server_hung_after_printing_a_crash_is_killed(monkeypatch, caplog):
    monkeypatch.setattr(process_module, "CRASH_EXIT_S", 0.5)
    hung = "import time; print('double free or corruption (out)', flush=True); time.sleep(600)"
    assert _exit_code(_server(hung)) == -9
    assert any("crashed" in record.getMessage() and "killing it" in record.getMessage() for record in caplog.records)


def test_a_server_that_prints_no_crash_is_left_alone(monkeypatch):
    monkeypatch.setattr(process_module, "CRASH_EXIT_S", 0.5)
    exits = "import time; print('Signal (2) received.', flush=True); time.sleep(2); raise SystemExit(3)"  # a stop
    assert _exit_code(_server(exits)) == 3
