"""Fixtures shared by all of tritonrt's tests.

- ``free_triton_config``: a factory of TritonConfig objects with free HTTP, gRPC and metrics ports.
- A session-wide check that the tests leave no tritonserver or tritonrt guard process and no socket folder
  of a tritonrt start behind. Only what *this* session started counts (other test runs may share the
  machine): processes are recognised by a marker variable every child inherits, folders are those that this
  session's starts made (tests starting servers in a subprocess add theirs).

Example::

    def test_something(free_triton_config):
        with Triton(config=free_triton_config(log_verbose=1)) as triton:
            ...
"""

from __future__ import annotations

import os
import pathlib
import sys
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from tritonrt.models.host import ModelHost
from tritonrt.ports import free_ports
from tritonrt.triton import TritonConfig

# Under CI a skip fails (.ci/strict_skips.py): the CI machine has every tool these tests need.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / ".ci"))
from strict_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402, F401 (hooks: pytest finds them by name)

from tests.crash_rerun import pytest_runtest_call  # noqa: E402, F401 (the rerun_on_tritonserver_crash marker's hook)

SESSION_MARKER = "TRITONRT_TEST_SESSION"
_SERVER_PROCESS_MARKS = ("tritonserver", "tritonrt.server.guard")
_LEFTOVER_WAIT_S = 30.0
# Small, so that stop() does not wait long for clients that keep connections open.
EXIT_TIMEOUT_SECS = 1


def make_free_triton_config(**overrides) -> TritonConfig:
    """A TritonConfig on free ports with a short exit timeout; ``overrides`` set any other field."""
    http_port, grpc_port, metrics_port = free_ports(3)
    values = {
        "http_port": http_port,
        "grpc_port": grpc_port,
        "metrics_port": metrics_port,
        "exit_timeout_secs": EXIT_TIMEOUT_SECS,
    }
    return TritonConfig(**{**values, **overrides})


@pytest.fixture(scope="session")
def free_triton_config() -> Callable[..., TritonConfig]:
    """Factory: ``free_triton_config(**overrides)`` -> TritonConfig with free ports."""
    return make_free_triton_config


def _session_processes(marker: str) -> list[str]:
    """``"pid cmdline"`` of the server-side processes carrying this session's marker."""
    entry_bytes = f"{SESSION_MARKER}={marker}".encode()
    found = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        if entry_bytes in environ and any(mark in cmdline for mark in _SERVER_PROCESS_MARKS):
            found.append(f"{entry.name} {cmdline[:200]}")
    return found


def _existing(folders: set[str]) -> list[str]:
    return sorted(folder for folder in folders if os.path.exists(folder))


def _wait_until_empty(probe: Callable[[], list[str]]) -> list[str]:
    """Poll ``probe`` until it finds nothing or the deadline passes; return the last finding."""
    deadline = time.monotonic() + _LEFTOVER_WAIT_S
    found = probe()
    while found and time.monotonic() < deadline:
        time.sleep(0.2)
        found = probe()
    return found


@pytest.fixture(scope="session")
def session_socket_dirs() -> set[str]:
    """The socket folders of every start this session makes (tests starting servers in a subprocess add
    theirs)."""
    return set()


@pytest.fixture(scope="session", autouse=True)
def no_leftovers(session_socket_dirs: set[str]) -> Iterator[None]:
    """Fail the session if its servers left processes or socket folders behind."""
    marker = uuid.uuid4().hex
    previous = os.environ.get(SESSION_MARKER)
    os.environ[SESSION_MARKER] = marker
    original_open = ModelHost._make_socket_dir

    def recording_open(self) -> None:  # every Triton / RemoteTriton makes its socket folder here
        original_open(self)
        session_socket_dirs.add(str(self._socket_dir))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ModelHost, "_make_socket_dir", recording_open)
        yield
    processes = _wait_until_empty(lambda: _session_processes(marker))
    folders = _wait_until_empty(lambda: _existing(session_socket_dirs))
    if previous is None:
        os.environ.pop(SESSION_MARKER, None)
    else:
        os.environ[SESSION_MARKER] = previous
    assert not processes, "The tests left server processes running:\n" + "\n".join(processes)
    assert not folders, "The tests left socket folders behind: " + ", ".join(folders)
