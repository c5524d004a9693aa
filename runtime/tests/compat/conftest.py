"""The compatibility suite: PyTriton 0.7 programs (``programs/``, written with ``pytriton`` imports) run as a
user runs them, in their own process against a real tritonserver, and checked for PyTriton 0.7's outcomes.

Each program runs on tritonrt with ``pytriton`` aliased to ``tritonrt`` (``programs/_run.py --alias``:
nothing in the program changes). Set ``TRITONRT_COMPAT_PYTRITON_PYTHON`` to a Python that has
``nvidia-pytriton==0.7.0`` (e.g. ``bench/.venv-pytriton/bin/python``) to run the same programs on PyTriton
0.7 itself too: the same assertions then hold there, which is how the expected outcomes were established.

Example::

    def test_something(start, ports):
        program = start("serve_ctrl_c.py", *ports)
        program.wait_for("SERVING")
        program.interrupt()
        assert program.wait() == 0
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.server.install import find_or_install_server

PROGRAMS = pathlib.Path(__file__).parent / "programs"
RUNNER = PROGRAMS / "_run.py"
PYTRITON_PYTHON_VARIABLE = "TRITONRT_COMPAT_PYTRITON_PYTHON"
_SHM = pathlib.Path("/dev/shm")
START_TIMEOUT_S = 180.0
_SOCKET_DIR_MARK = "TRITONRT_SOCKET_DIR="
_RUN_MARK = "TRITONRT_COMPAT_RUN"  # tags the processes of PyTriton runs, to remove what PyTriton leaves


@dataclasses.dataclass(frozen=True)
class Runtime:
    """How to run a program: with tritonrt (aliased) or with PyTriton 0.7 itself."""

    name: str
    command: tuple[str, ...]
    env: dict[str, str]
    record_socket_dir: Callable[[str], None]

    def start(self, program: str, *args: object) -> Program:
        """Start ``programs/<program>`` with ``args`` in its own process group."""
        return Program([*self.command, str(PROGRAMS / program), *map(str, args)], self.env, self.record_socket_dir)


class Program:
    """A running program: its output as it comes, Ctrl+C, its exit code; killed if a test leaves it running."""

    def __init__(self, argv: list[str], env: dict[str, str], record_socket_dir: Callable[[str], None]):
        self._process = subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a program started from a shell prompt
        )
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._record = record_socket_dir
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        for raw in self._process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if line.startswith(_SOCKET_DIR_MARK):
                self._record(line[len(_SOCKET_DIR_MARK) :])
            with self._changed:
                self._lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def pid(self) -> int:
        return self._process.pid

    def output(self) -> str:
        with self._changed:
            return "\n".join(self._lines)

    def wait_for(self, marker: str, timeout_s: float = START_TIMEOUT_S) -> str:
        """The first output line containing ``marker``; fails with the output if the program ends first."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = next((line for line in self._lines if marker in line), None)
                if found is not None:
                    return found
                ended = self._process.poll() is not None and not self._reader.is_alive()
                if ended or time.monotonic() > deadline:
                    pytest.fail(
                        f"no {marker!r} in the program's output (exit code {self._process.poll()}):\n"
                        + "\n".join(self._lines[-60:])
                    )
                self._changed.wait(0.2)

    def interrupt(self, whole_group: bool = False) -> None:
        """Ctrl+C: SIGINT to the program, or to its whole process group as a terminal sends it."""
        if whole_group:
            os.killpg(self._process.pid, signal.SIGINT)
        else:
            self._process.send_signal(signal.SIGINT)

    def wait(self, timeout_s: float = 90.0) -> int:
        code = self._process.wait(timeout_s)
        self._reader.join(10)
        return code

    def kill(self) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(30)


@pytest.fixture(scope="session")
def server_available() -> None:
    try:
        find_or_install_server()
    except PyTritonRuntimeError as error:
        pytest.skip(f"no tritonserver available for the compatibility tests: {error}")


def _pytriton_env(python: str) -> dict[str, str]:
    """PyTriton's stub needs this Python's libpython before any other one on the library path."""
    libdir = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_config_var('LIBDIR'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    library_path = os.pathsep.join(filter(None, [libdir, os.environ.get("LD_LIBRARY_PATH")]))
    return {**os.environ, "LD_LIBRARY_PATH": library_path, _RUN_MARK: uuid.uuid4().hex}


@pytest.fixture(params=["tritonrt", "pytriton-0.7"], scope="session")
def runtime(request: pytest.FixtureRequest, server_available: None, session_socket_dirs: set[str]) -> Runtime:
    """Each program runs on tritonrt, and on PyTriton 0.7 when ``TRITONRT_COMPAT_PYTRITON_PYTHON`` names one."""
    if request.param == "tritonrt":
        return Runtime("tritonrt", (sys.executable, str(RUNNER), "--alias"), dict(os.environ), session_socket_dirs.add)
    python = os.environ.get(PYTRITON_PYTHON_VARIABLE)
    if not python:
        pytest.skip(f"set {PYTRITON_PYTHON_VARIABLE} to a Python with nvidia-pytriton==0.7.0 to run on PyTriton too")
    return Runtime("pytriton-0.7", (python, str(RUNNER)), _pytriton_env(python), lambda _: None)


@pytest.fixture
def start(runtime: Runtime) -> Iterator[Callable[..., Program]]:
    """``start(program, *args)``: start a program on the runtime; any still running at the test's end is killed
    (with its process group)."""
    started: list[Program] = []
    segments_before = set(_SHM.glob("psm_*"))

    def _start(program: str, *args: object) -> Program:
        started.append(runtime.start(program, *args))
        return started[-1]

    yield _start
    for program in started:
        program.kill()
    if runtime.name != "tritonrt":
        _remove_pytriton_leftovers(runtime.env[_RUN_MARK], [program.pid for program in started])
        _remove_unmapped(set(_SHM.glob("psm_*")) - segments_before)


def _remove_pytriton_leftovers(run: str, pids: list[int]) -> None:
    """PyTriton 0.7 itself leaves Python backend stubs running after a remote mode over gRPC, and its shared
    memory segments (``pytrtion<pid>-*``): remove what the programs of this test left."""
    time.sleep(2)  # orphaned stubs notice their server is gone within a second or so
    mark = f"{_RUN_MARK}={run}".encode()
    for entry in pathlib.Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and mark in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)
        except (OSError, ProcessLookupError):
            continue
    for pid in pids:
        for segment in _SHM.glob(f"pytrtion{pid}-*"):
            segment.unlink(missing_ok=True)


def _remove_unmapped(segments: set[pathlib.Path]) -> None:
    """PyTriton's proxy also leaves ``psm_*`` segments (multiprocessing.shared_memory) of killed programs: remove
    those this test made that no running process still maps (tritonrt makes none: it uses memfds)."""
    time.sleep(0.5)  # the processes just killed release their mappings as they die
    mapped: set[str] = set()
    for maps in pathlib.Path("/proc").glob("[0-9]*/maps"):
        try:
            mapped.update(line.rsplit("/", 1)[-1] for line in maps.read_text().splitlines() if "/dev/shm/" in line)
        except OSError:
            continue
    for segment in segments:
        if segment.name not in mapped:
            segment.unlink(missing_ok=True)


@pytest.fixture
def observe(start: Callable[..., Program]) -> Callable[..., dict]:
    """``observe(program, *args)``: run a program to its end (it must exit 0); the JSON it printed."""

    def _observe(program: str, *args: object) -> dict:
        process = start(program, *args)
        code = process.wait(START_TIMEOUT_S)
        assert code == 0, f"{program} exited {code}:\n{process.output()}"
        line = process.wait_for("OBSERVED ", timeout_s=1)
        return json.loads(line.split("OBSERVED ", 1)[1])

    return _observe


@pytest.fixture
def ports(free_triton_config: Callable) -> tuple[int, int, int]:
    """Free HTTP, gRPC and metrics ports."""
    config = free_triton_config()
    return config.http_port, config.grpc_port, config.metrics_port
