"""Whether the Python backend stub can run on this interpreter: the checks and their messages.

Most of these are unit-level (a monkeypatched sysconfig, a fake stub file) and run without a server; the
ones marked ``integration`` use the installed server. Triton.run() must fail with these messages before
starting anything.
"""

from __future__ import annotations

import os
import pathlib
import sys
import sysconfig

import numpy as np
import psutil
import pytest

from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.model_config import Tensor
from tritonrt.server import environment
from tritonrt.triton import Triton

RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"
OTHER = "3.8" if RUNNING != "3.8" else "3.9"
X = Tensor(name="x", dtype=np.float32, shape=(-1,))


def fake_server(root: pathlib.Path, stub_bytes: bytes | None) -> pathlib.Path:
    """A directory that looks like a server: an executable bin/tritonserver and backends/python."""
    (root / "bin").mkdir(parents=True)
    binary = root / "bin" / "tritonserver"
    binary.write_text("#!/bin/sh\nexit 1\n")
    binary.chmod(0o755)
    (root / "backends" / "python").mkdir(parents=True)
    if stub_bytes is not None:
        (root / "backends" / "python" / "triton_python_backend_stub").write_bytes(stub_bytes)
    return root


def stub_linking(version: str) -> bytes:
    return b"\x7fELF\x00junk\x00libpython" + version.encode() + b".so.1.0\x00more\x00"


def patch_config_vars(monkeypatch, **overrides) -> None:
    original = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: overrides.get(name, original(name)))


def test_python_library_dir_of_this_interpreter():
    libdir = environment.python_library_dir()
    assert (libdir / f"libpython{RUNNING}.so.1.0").exists()


def test_python_without_shared_libpython_is_explained(monkeypatch):
    patch_config_vars(monkeypatch, Py_ENABLE_SHARED=0)
    with pytest.raises(PyTritonRuntimeError) as caught:
        environment.python_library_dir()
    message = str(caught.value)
    assert sys.executable in message and "no shared libpython" in message and "--enable-shared" in message


def test_missing_libpython_file_is_named(monkeypatch, tmp_path):
    patch_config_vars(monkeypatch, Py_ENABLE_SHARED=1, LIBDIR=str(tmp_path))
    with pytest.raises(PyTritonRuntimeError) as caught:
        environment.python_library_dir()
    assert str(tmp_path / f"libpython{RUNNING}.so.1.0") in str(caught.value)


def test_stub_version_is_read_from_the_binary(tmp_path):
    stub = tmp_path / "stub"
    stub.write_bytes(stub_linking("3.10"))
    assert environment.stub_python_version(stub) == "3.10"


def test_stub_for_another_python_is_explained(tmp_path):
    server = fake_server(tmp_path / "server", stub_linking(OTHER))
    with pytest.raises(PyTritonRuntimeError) as caught:
        environment.check_stub(server)
    message = str(caught.value)
    assert f"built for Python {OTHER}" in message and f"runs on Python {RUNNING}" in message
    assert "install-server" in message and "TRITONRT_SERVER_DIR" in message


def test_missing_stub_is_explained(tmp_path):
    server = fake_server(tmp_path / "server", None)
    with pytest.raises(PyTritonRuntimeError) as caught:
        environment.check_stub(server)
    message = str(caught.value)
    assert "triton_python_backend_stub is missing" in message and "install-server --force" in message


@pytest.mark.integration
def test_the_installed_stub_matches_this_python(server_dir):
    stub = server_dir / "backends" / "python" / "triton_python_backend_stub"
    assert environment.stub_python_version(stub) == RUNNING
    environment.check_stub(server_dir)


def started_processes() -> list[psutil.Process]:
    return psutil.Process(os.getpid()).children(recursive=True)


def test_run_with_a_stub_for_another_python_fails_before_starting(tmp_path, monkeypatch, free_triton_config):
    monkeypatch.setenv("TRITONRT_SERVER_DIR", str(fake_server(tmp_path / "server", stub_linking(OTHER))))
    before = {process.pid for process in started_processes()}
    triton = Triton(config=free_triton_config())  # no `with`: entering it would start the server already
    triton.bind("echo", lambda requests: requests, [X], [X])
    with pytest.raises(PyTritonRuntimeError, match=f"built for Python {OTHER}"):
        triton.run()
    assert {process.pid for process in started_processes()} == before
    assert not triton.is_alive()
    triton.stop()
    with pytest.raises(PyTritonRuntimeError, match=f"built for Python {OTHER}"), Triton(config=free_triton_config()):
        pass  # entering `with` starts the server, so the check fails there


@pytest.mark.integration
def test_run_without_shared_libpython_fails_before_starting(server_dir, monkeypatch, free_triton_config):
    patch_config_vars(monkeypatch, Py_ENABLE_SHARED=0)
    before = {process.pid for process in started_processes()}
    triton = Triton(config=free_triton_config())
    triton.bind("echo", lambda requests: requests, [X], [X])
    with pytest.raises(PyTritonRuntimeError, match="--enable-shared"):
        triton.run()
    assert {process.pid for process in started_processes()} == before
    triton.stop()
