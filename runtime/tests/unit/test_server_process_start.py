"""TritonServerProcess starts its guard once more when the first ends before it read what to run, and says
how the guard ended when the second does too; its kill reaches a guard that has no process group of its own yet."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.server import process as process_module
from tritonrt.server.process import TritonServerProcess

# What a guard killed as it started looks like: it ends before reading its input.
_DIES_AT_ONCE = "import os, signal; print('dying', flush=True); os.kill(os.getpid(), signal.SIGKILL)"


def _ended_guard(env: dict[str, str]) -> subprocess.Popen[bytes]:
    pipe = subprocess.PIPE
    process = subprocess.Popen([sys.executable, "-c", _DIES_AT_ONCE], stdin=pipe, stdout=pipe, stderr=subprocess.STDOUT)
    process.wait()  # its end of the pipe is closed before the owner writes
    return process


def _server() -> TritonServerProcess:
    return TritonServerProcess([sys.executable, "-c", "pass"], {}, cleanup=[], verbose=False)


def test_a_guard_killed_as_it_starts_is_started_once_more(monkeypatch, caplog):
    real = process_module._start_guard
    starts: list[str] = []

    def first_dies(env: dict[str, str]) -> subprocess.Popen[bytes]:
        starts.append("start")
        return _ended_guard(env) if len(starts) == 1 else real(env)

    monkeypatch.setattr(process_module, "_start_guard", first_dies)
    server = _server()
    exited = threading.Event()
    codes: list[int] = []
    server.register_on_exit(lambda code: (codes.append(code), exited.set()))
    server.start()
    exited.wait(60)
    assert len(starts) == 2 and codes == [0]  # the second guard ran the server to its end
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any(
        "was killed by signal 9 before it read what to run" in message and "dying" in message for message in warnings
    )


def test_a_guard_that_ends_twice_fails_the_start_with_how_it_ended(monkeypatch):
    monkeypatch.setattr(process_module, "_start_guard", _ended_guard)
    server = _server()
    with pytest.raises(PyTritonRuntimeError, match="killed by signal 9 before it read what to run; it printed:\ndying"):
        server.start()
    assert not server.is_alive()
    assert server.stop(30) is None  # nothing to stop, and no wait for it


def test_a_kill_from_a_signal_handler_does_not_wait_on_the_lock_it_may_have_interrupted():
    """A second Ctrl+C's handler kills the server; the main thread it interrupted may hold the lock of the Event
    that a waiting kill would wait on (not reentrant). kill(wait=False) kills and returns; the exit is seen."""
    server = TritonServerProcess([sys.executable, "-c", "import time; time.sleep(600)"], {}, cleanup=[], verbose=False)
    server.start()
    try:
        with server._exited._cond:  # where the handler may land: inside the interrupted wait's own lock
            done = threading.Event()
            threading.Thread(target=lambda: (server.kill(wait=False), done.set()), daemon=True).start()
            assert done.wait(5), "kill(wait=False) waited"
        assert server._exited.wait(10) and not server.is_alive()
    finally:
        server.kill()


def _guard_in_our_group(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A guard as Python 3.10 starts it, before its first line made its own process group: still in ours."""
    pipe = subprocess.PIPE
    script = "import sys, time; sys.stdin.buffer.read(); time.sleep(120)"
    return subprocess.Popen([sys.executable, "-c", script], stdin=pipe, stdout=pipe, stderr=subprocess.STDOUT)


def test_kill_reaches_a_guard_that_has_no_process_group_of_its_own_yet(monkeypatch):
    monkeypatch.setattr(process_module, "_start_guard", _guard_in_our_group)
    server = _server()
    server.start()
    assert server.is_alive()
    server.kill()  # killpg finds no group of the guard's pid: the guard itself is killed
    assert not server.is_alive()
