"""Run tritonserver under the guard: start, forward its log, wait for it, watch it, stop it."""

from __future__ import annotations

import collections
import logging
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError
from tritonrt.server.guard import guard_spec
from tritonrt.server.output import ServerOutput

__all__ = ["TritonServerProcess", "check_port_free"]

LOGGER = logging.getLogger("tritonrt.server")
SERVER_LOGGER = logging.getLogger("tritonrt.server.tritonserver")

_LOG_TAIL = 80
# How long tritonserver may take to exit once it printed a crash (its handler prints the stack, then exits).
CRASH_EXIT_S = 10.0


def _start_guard(env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start the guard (tritonrt.server.guard), which starts the server, with its input and output piped.

    It gets a process group of its own in the owner's session: a terminal's Ctrl+C reaches the owner, which
    stops the server in order.
    """
    command = [sys.executable, "-m", "tritonrt.server.guard"]
    pipe, to_stdout = subprocess.PIPE, subprocess.STDOUT
    if sys.version_info >= (3, 11):
        return subprocess.Popen(command, env=env, stdin=pipe, stdout=pipe, stderr=to_stdout, process_group=0)
    # Python 3.10 has no process_group=, and preexec_fn=os.setpgrp would make subprocess fork() where it otherwise
    # vforks: fork() runs the gRPC library's fork handlers, whose poller thread in the child aborts it once the
    # child closes its inherited descriptors (2 starts in 400 died so, with tritonclient's gRPC busy in this
    # process). The guard makes its process group itself, first thing.
    return subprocess.Popen(command, env=env, stdin=pipe, stdout=pipe, stderr=to_stdout)


def check_port_free(port: int, address: str, what: str, setting: str) -> None:
    """Raise a clear error when ``port`` is taken, instead of a server that never becomes ready."""
    host = "" if address in ("0.0.0.0", "") else address
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            raise PyTritonBadParameterError(
                f"{what} port {port} is already in use ({error.strerror}). Stop whatever listens there, or "
                f"choose another port with TritonConfig({setting}=...) or "
                f"PYTRITON_TRITON_CONFIG_{setting.upper()}=<port>."
            ) from None


class TritonServerProcess:
    """One tritonserver process (under :mod:`tritonrt.server.guard`).

    Arguments holding one of ``secrets`` stay off every command line (see :mod:`tritonrt.server.hidden_args`).

    Example::

        server = TritonServerProcess(command, env, cleanup=[socket_dir], verbose=False, secrets=[token])
        server.start(); server.wait_until_live(probe=api.is_live, timeout_s=60); ...; server.stop(30)
    """

    def __init__(
        self,
        command: list[str],
        env: dict[str, str],
        *,
        cleanup: list[pathlib.Path],
        verbose: bool,
        secrets: Sequence[str] = (),
    ):
        hidden = {i: arg for i, arg in enumerate(command) if i and any(secret in arg for secret in secrets if secret)}
        self._guard_input = guard_spec(command, hidden, cleanup)
        self._env = env
        self._verbose = verbose
        self._process: subprocess.Popen[bytes] | None = None
        self._tail: collections.deque[str] = collections.deque(maxlen=_LOG_TAIL)
        self._on_exit: list[Callable[[int], None]] = []
        self._exit_lock = threading.Lock()
        self._exit_code: int | None = None
        self._started = threading.Event()
        self._exited = threading.Event()
        self._start_error: BaseException | None = None
        self._crash_timer_armed = False

    def register_on_exit(self, callback: Callable[[int], None]) -> None:
        """Call ``callback(returncode)`` when the server exits, for whatever reason (at once if it has)."""
        with self._exit_lock:
            if self._exit_code is None:
                self._on_exit.append(callback)
                return
        callback(self._exit_code)

    def start(self) -> None:
        """Start the server from a watcher thread that lives as long as the server."""
        threading.Thread(target=self._watch, name="tritonrt-server-watch", daemon=True).start()
        self._started.wait()
        if self._start_error is not None:
            raise PyTritonRuntimeError(f"Could not start tritonserver: {self._start_error}") from self._start_error

    def _watch(self) -> None:
        try:
            self._process = self._start_guard_with_spec()
        except Exception as error:  # whatever it is, start() must hear of it
            self._start_error = error
            self._exited.set()
            self._started.set()
            return
        self._started.set()
        assert self._process.stdout is not None  # stdout=PIPE
        output = ServerOutput(verbose=self._verbose)
        for raw in self._process.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            self._tail.append(line)
            SERVER_LOGGER.log(output.level(line), "%s", line)
            if output.crashed and not self._crash_timer_armed:
                self._crash_timer_armed = True
                timer = threading.Timer(CRASH_EXIT_S, self._kill_if_hung, args=(line,))
                timer.daemon = True
                timer.start()
        code = self._process.wait()
        LOGGER.debug("tritonserver exited with %s", code)
        with self._exit_lock:
            self._exit_code = code
            callbacks = list(self._on_exit)
        for callback in callbacks:  # before is_alive() turns false: a restart can be under way by then
            try:
                callback(code)
            except Exception:
                LOGGER.exception("on-exit callback failed")
        self._exited.set()

    def _start_guard_with_spec(self) -> subprocess.Popen[bytes]:
        """Start the guard and hand it what to run. A guard that ends before it read that (something outside
        killed it as it started) is started once more, with a warning that says how it ended."""
        for attempt in (1, 2):
            process = _start_guard(self._env)
            assert process.stdin is not None  # stdin=PIPE
            try:
                with process.stdin as spec:
                    spec.write(self._guard_input)
                return process
            except BrokenPipeError:
                ended = _ended_guard(process)
                if attempt == 2:
                    raise OSError(f"the guard process (python -m tritonrt.server.guard) {ended}") from None
                LOGGER.warning("the guard process %s: starting it once more", ended)
        raise AssertionError("unreachable")

    def is_alive(self) -> bool:
        return self._process is not None and not self._exited.is_set()

    def _kill_if_hung(self, crash: str) -> None:
        """Kill a server that printed a crash but did not exit: its signal handler can deadlock (a backtrace after
        heap corruption waits on malloc's lock), and a hung server is never restarted."""
        if self.is_alive():
            LOGGER.error(
                "tritonserver crashed (%r) and did not exit within %.0f s: killing it, so that it can be restarted",
                crash,
                CRASH_EXIT_S,
            )
            self.kill()

    def log_tail(self, lines: int = 25) -> str:
        """The last lines tritonserver printed (for error messages)."""
        return "\n".join(list(self._tail)[-lines:])

    def wait_until_live(self, probe: Callable[[], bool], timeout_s: float) -> None:
        """Block until ``probe()`` says the server is live; raise with its log if it dies or times out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_alive():
                raise PyTritonRuntimeError(
                    f"tritonserver exited during start-up. Its last lines:\n{self.log_tail()}"
                    + _port_hint(self.log_tail())
                )
            if probe():
                return
            time.sleep(0.05)
        raise PyTritonRuntimeError(
            f"tritonserver did not become live within {timeout_s:.0f} s. Its last lines:\n{self.log_tail()}"
        )

    def stop(self, timeout_s: float) -> int | None:
        """SIGINT (Triton drains in-flight requests), wait up to ``timeout_s``, then SIGKILL.

        An exception that interrupts the wait (a second Ctrl+C: KeyboardInterrupt) kills the server at once,
        then propagates.
        """
        if self._process is None:
            return None
        if self.is_alive():
            try:
                self._process.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass
            try:
                drained = self._exited.wait(timeout_s)
            except BaseException:  # e.g. a KeyboardInterrupt: no server outlives the wait
                self.kill()
                raise
            if not drained:
                LOGGER.warning("tritonserver did not stop within %.0f s: killing it", timeout_s)
                self.kill()
        return self._process.returncode

    def kill(self, *, wait: bool = True) -> None:
        """SIGKILL the server's process group (the guard and tritonserver); with ``wait``, wait briefly for it to
        exit. From a signal handler pass ``wait=False``: the handler may have interrupted this thread inside
        ``self._exited``'s own lock (an Event's lock is not reentrant), where waiting again would never return;
        the wait the handler interrupted sees the exit instead."""
        if self._process is None or self._process.returncode is not None:
            return  # reaped already: its process group's id may belong to another process by now
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:  # no such group: on Python 3.10, a guard that has not made it yet (nor started
            self._process.kill()  # the server, which it does after)
        if wait:
            self._exited.wait(10)


def _ended_guard(process: subprocess.Popen[bytes]) -> str:
    """How a guard that stopped reading its input ended: its exit status and what it printed."""
    process.stdin = None  # closed already (its close failed on the broken pipe): communicate must not flush it
    try:
        output, _ = process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        output, _ = process.communicate()
    code = process.returncode
    how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
    printed = output.decode("utf-8", "replace").strip()[-2000:] if output else ""
    return f"{how} before it read what to run" + (f"; it printed:\n{printed}" if printed else "")


def _port_hint(log: str) -> str:
    if "address already in use" in log.lower() or "failed to start" in log.lower():
        return (
            "\nA port is probably in use: choose free ones with "
            "TritonConfig(http_port=..., grpc_port=..., metrics_port=...)."
        )
    return ""
