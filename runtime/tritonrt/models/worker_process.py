"""An instance served by a worker process: forked from this process after bind, watched, stopped, replaced.

How the callable gets in: the worker is a fork of this process, so the callable and everything loaded before
(weights included, shared copy-on-write) is there. The worker first moves all it inherited out of the garbage
collector's reach (``gc.freeze()``): a full collection would otherwise write to every tracked object's header
and so copy each page of a model made of Python objects (vocabularies, trees, lists) into the worker. Then
``setup(info)`` runs inside it, after
``CUDA_VISIBLE_DEVICES`` was set to its device (load CUDA models there), then the warm-up. A fork after CUDA
was initialised here is refused (:func:`~tritonrt.models.workers.check_fork_allowed`).

The socket the model's instance connects to is made and kept by this process; each worker process inherits
it. A worker that dies leaves it listening: the instance's next connection waits there for the replacement.
The worker reports over a control socket (ready, connected, peer lost, unrecoverable error) and hands this
process a copy of each connection it accepts: when it dies inside a call, this process fails the batch it
held with an error that names the model, the instance and the signal, then closes the copy.

No worker outlives this process: each has ``PR_SET_PDEATHSIG`` (SIGKILL) set on the thread that forks (one
long-lived daemon thread, :class:`_Forker`), and it stops once its control socket ends.
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import gc
import json
import logging
import os
import queue
import re
import signal
import socket
import stat
import sys
import threading
import traceback
import warnings
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, NoReturn

from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.models.instance import (
    CallState,
    InstanceWorker,
    RunningCall,
    TrackedListener,
    batch_error,
)
from tritonrt.models.workers import WorkerInfo
from tritonrt.proxy.connection import WorkerConnection
from tritonrt.proxy.own_metrics import WORKER_RESTARTS
from tritonrt.proxy.wire import HEADER_SIZE, KIND_BATCH, WireError, decode_header
from tritonrt.proxy.worker import CallableWorker
from tritonrt.server.supervisor import describe_status

__all__ = ["ChildSpec", "ProcessHooks", "ProcessInstance", "ProcessState", "WorkerExit"]

LOGGER = logging.getLogger("tritonrt")

_PR_SET_PDEATHSIG = 1
_MESSAGE_BYTES = 1 << 16
_STOP = b'{"event": "stop"}'


class ProcessState(enum.Enum):
    """The lifecycle of an instance's worker process, held by its :class:`ProcessInstance` alone."""

    NEW = "new"
    STARTING = "starting"
    SERVING = "serving"
    EXITED = "exited"  # died unasked; the supervisor starts it again (or gives up)
    STOPPING = "stopping"
    STOPPED = "stopped"


class _Event(enum.Enum):
    READY = "ready"
    FAILED = "failed"
    CONNECTED = "connected"
    PEER_LOST = "peer_lost"
    UNRECOVERABLE = "unrecoverable"


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerExit:
    """A worker process that ended unasked: whose, which process, and how (``status``: ``os.waitstatus_to_exitcode``,
    negative for a signal)."""

    model_name: str
    instance_index: int
    pid: int
    status: int
    timed_out: bool = False

    def describe(self) -> str:
        return f"model {self.model_name!r} instance {self.instance_index}: its worker process (pid {self.pid}) " + (
            "was killed past the execution timeout" if self.timed_out else describe_status(self.status)
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ChildSpec:
    """What a worker process serves."""

    infer_callable: Callable[..., Any]
    config: TritonModelConfig
    strict: bool
    info: WorkerInfo
    setup: Callable[[WorkerInfo], None] | None
    warm_up: Callable[[], None] | None


@dataclasses.dataclass(frozen=True, slots=True)
class ProcessHooks:
    """The owner's callbacks (called from the instance's watcher thread)."""

    on_unrecoverable: Callable[[str], None]
    on_peer_lost: Callable[[], None] | None
    on_exit: Callable[[WorkerExit], None]


class _Forker:
    """One daemon thread that forks every worker process, so that their ``PR_SET_PDEATHSIG`` (which fires when
    the *thread* that forked ends) lasts as long as this process."""

    _lock = threading.Lock()
    _queue: queue.SimpleQueue[tuple[Callable[[], int], Future[int]]] | None = None

    @classmethod
    def fork(cls, child: Callable[[], int]) -> int:
        """Fork; the child runs ``child()`` and never returns here. The child's pid."""
        with cls._lock:
            if cls._queue is None:
                cls._queue = queue.SimpleQueue()
                threading.Thread(target=cls._serve, args=(cls._queue,), name="tritonrt-forker", daemon=True).start()
        done: Future[int] = Future()
        cls._queue.put((child, done))
        return done.result()

    @staticmethod
    def _serve(requests: queue.SimpleQueue[tuple[Callable[[], int], Future[int]]]) -> None:
        while True:
            child, done = requests.get()
            _allow_our_fork()  # each time: a caller may have reset the warning filters since (pytest does per test)
            try:
                pid = os.fork()
            except OSError as error:
                done.set_exception(error)
                continue
            if pid == 0:
                os._exit(child())
            done.set_result(pid)


def _allow_our_fork() -> None:
    """Silence Python 3.12+'s warning that this process forks with threads running, for this module's fork only.

    Forking with threads is this design (the forker is a thread itself): the child runs tritonrt's worker and the
    callable, never the other threads' code. What it inherits from them is what Python re-initialises at fork
    (its import lock, logging's locks) and memory. A library that holds a lock of its own in a thread at that
    moment is the known risk: such libraries (CUDA, thread pools started at import) belong in ``setup``, which
    runs in the worker after the fork; a fork after CUDA was initialised is refused outright.
    """
    warnings.filterwarnings(
        "ignore", message=r"This process .* is multi-threaded, use of fork\(\)", category=DeprecationWarning,
        module=re.escape(__name__),
    )  # fmt: skip


class ProcessInstance(InstanceWorker):
    """An instance served by a worker process; see the module's docstring."""

    def __init__(self, listener: TrackedListener, spec: ChildSpec, hooks: ProcessHooks):
        super().__init__(listener, spec.info.instance_index)
        self._spec = spec
        self._hooks = hooks
        self._lock = threading.Condition()
        self._state = ProcessState.NEW
        self._pid = 0
        self._reaped = False  # whether self._pid was reaped (then it may name another process: never signal it)
        self._control: socket.socket | None = None
        self._connection: socket.socket | None = None  # a copy of the worker's current connection
        self._connected = False
        self._timed_out = False
        self._watcher: threading.Thread | None = None
        self._ready: Future[str | None] = Future()  # None once the worker serves, else why it could not start

    @property
    def state(self) -> ProcessState:
        return self._state

    @property
    def pid(self) -> int:
        return self._pid

    def start(self) -> None:
        """Fork the worker and wait until it serves; raises PyTritonRuntimeError when its setup failed."""
        with self._lock:
            if self._state not in (ProcessState.NEW, ProcessState.EXITED):
                return  # serving already (a report about an earlier worker), or stopping
            restart = self._state == ProcessState.EXITED
            self._state = ProcessState.STARTING
            self._timed_out = self._connected = False
        self.slot.reset()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        try:
            pid = _Forker.fork(lambda: _child_main(self._spec, self.listener, theirs, parent, restart))
        finally:
            theirs.close()
        with self._lock:
            self._pid, self._control, self._reaped = pid, mine, False
        name = f"tritonrt-{self._spec.info.model_name}-{self.instance_index}-watch"
        self._watcher = threading.Thread(target=self._watch, args=(pid, mine), name=name, daemon=True)
        ready: Future[str | None] = Future()
        self._ready = ready
        self._watcher.start()
        failure = ready.result()
        if failure is not None:
            raise PyTritonRuntimeError(
                f"Model {self._spec.info.model_name!r} instance {self.instance_index}: its worker process could not "
                f"start: {failure}"
            )

    def stop(self) -> None:
        with self._lock:
            if self._state in (ProcessState.STOPPING, ProcessState.STOPPED):
                return
            self._state = ProcessState.STOPPING
            control = self._control
        if control is not None:
            try:
                control.send(_STOP)
            except OSError:
                pass

    def join(self, timeout: float) -> None:
        watcher = self._watcher
        if watcher is not None:
            watcher.join(timeout)
            if watcher.is_alive():  # it did not finish its call in time
                self._kill()
                watcher.join(timeout)
        with self._lock:
            self._state = ProcessState.STOPPED
        self.listener.keep_open = False
        self.listener.close()

    @property
    def connected(self) -> bool:
        return self._state is ProcessState.SERVING and self._connected

    def is_alive(self) -> bool:
        return self._state in (ProcessState.STARTING, ProcessState.SERVING, ProcessState.EXITED)

    def move_to_new_instance(self) -> None:
        pass  # the worker process moves by itself: a reload ends its old connection, and it accepts the next

    def expire(self, running: RunningCall, timeout_s: float) -> None:
        with self._lock:
            if self._state is not ProcessState.SERVING or self._timed_out:
                return
            self._timed_out = True
        LOGGER.error(
            "Model %r instance %d: batch %d ran longer than the execution timeout (%g s): killing its worker process "
            "(pid %d) to replace it",
            self._spec.info.model_name, self.instance_index, running.seq, timeout_s, self._pid,
        )  # fmt: skip
        self._kill()

    def _kill(self) -> None:
        with self._lock:  # the watcher reaps under this lock: a pid signalled here is still this worker's
            if self._pid and not self._reaped:
                try:
                    os.kill(self._pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # -- the watcher thread --------------------------------------------------------------------------------------

    def _watch(self, pid: int, control: socket.socket) -> None:
        """Read the worker's reports until its control socket ends (it exited), then reap and report it."""
        try:
            while True:
                try:
                    data, fds, _, _ = socket.recv_fds(control, _MESSAGE_BYTES, 1)
                except OSError:
                    break
                if not data:
                    break
                self._report(json.loads(data), fds)
        finally:
            control.close()
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # it has exited; its pid stays ours until reaped
            with self._lock:
                self._reaped = True
                _, status = os.waitpid(pid, 0)
            self._exited(WorkerExit(self._spec.info.model_name, self.instance_index, pid,
                                    os.waitstatus_to_exitcode(status), self._timed_out))  # fmt: skip

    def _report(self, message: dict[str, str], fds: list[int]) -> None:
        event = _Event(message["event"])
        if event is _Event.CONNECTED:
            self._adopt(socket.socket(fileno=fds[0]) if fds else None)
            self._connected = True
        elif event is _Event.READY:
            with self._lock:
                if self._state is ProcessState.STARTING:
                    self._state = ProcessState.SERVING
            self._ready.set_result(None)
        elif event is _Event.FAILED:
            self._ready.set_result(message.get("text", "its setup failed"))
        elif event is _Event.PEER_LOST:
            self._connected = False
            if self._hooks.on_peer_lost is not None:
                self._hooks.on_peer_lost()
        elif event is _Event.UNRECOVERABLE:
            self._hooks.on_unrecoverable(message.get("text", "unrecoverable error"))

    def _adopt(self, connection: socket.socket | None) -> None:
        previous, self._connection = self._connection, connection
        if previous is not None:
            previous.close()

    def _exited(self, exit: WorkerExit) -> None:
        connection, self._connection = self._connection, None
        running = self.slot.read()
        if connection is not None:
            try:  # from here a batch the backend sends fails to go (EPIPE) and goes again to the next worker
                connection.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            after = "the service is stopping" if self._state is ProcessState.STOPPING else "it is started again"
            message = f"tritonrt: {exit.describe()} while it ran this request; {after}"
            seq = running.seq if running.state is CallState.CALLING else _unread_batch(connection)
            if seq is not None:  # a batch the worker held, or one sent to it after it died: fail it
                try:
                    connection.sendall(batch_error(seq, message))
                except OSError:
                    pass
            connection.close()
        self.slot.reset()
        if not self._ready.done():
            self._ready.set_result(f"it {describe_status(exit.status)} during its setup (see its output above)")
        with self._lock:
            unasked = self._state in (ProcessState.STARTING, ProcessState.SERVING)
            if unasked:
                self._state = ProcessState.EXITED
            self._connected = False
            self._lock.notify_all()
        if unasked and self._ready.result() is None:  # a start that failed is reported by start() itself
            LOGGER.error("%s; %s", exit.describe(), "failing the batch it held" if running.seq else "no batch held")
            self._hooks.on_exit(exit)


def _unread_batch(connection: socket.socket) -> int | None:
    """The sequence number of a batch that waits unread on a dead worker's connection (the backend sent it after
    the worker died, before this process shut the connection for reading), else None. A reply half written
    (REPLYING) is never answered here: the backend fails that batch itself when the connection closes."""
    try:
        head = connection.recv(HEADER_SIZE, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return None
    if len(head) < HEADER_SIZE:
        return None
    try:
        header = decode_header(head)
    except WireError:
        return None
    return header.seq if header.kind == KIND_BATCH else None


# -- the worker process ----------------------------------------------------------------------------------------


def _child_main(
    spec: ChildSpec, listener: TrackedListener, control: socket.socket, parent: int, restart: bool
) -> NoReturn:
    """The worker process: set up, serve until told to stop (or until this process's parent is gone), exit.
    ``restart``: it replaces a worker process of this instance that ended (counted in tritonrt's metrics)."""
    gc.freeze()  # what this process inherited stays shared: see the module's docstring
    code = 1
    try:
        if restart:
            WORKER_RESTARTS.labels(spec.info.model_name).inc()
        _die_with_parent(parent)
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C reaches the whole group: the parent stops us
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        except ValueError:
            pass
        _drop_inherited_sockets(keep={listener.socket.fileno(), control.fileno()})
        listener.keep_open = True
        info = spec.info
        if info.device is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = str(info.device)
        if spec.setup is not None:
            spec.setup(info)
        if spec.warm_up is not None:
            spec.warm_up()
        worker = CallableWorker(
            spec.infer_callable,
            listener,
            spec.config,
            strict=spec.strict,
            on_unrecoverable=lambda text: _send(control, _Event.UNRECOVERABLE, text),
            on_peer_lost=lambda: _send(control, _Event.PEER_LOST),
        )

        def connected(connection: WorkerConnection) -> None:
            _send(control, _Event.CONNECTED, fd=connection.link.sock.fileno())

        listener.on_accept = connected
        threading.Thread(target=_watch_owner, args=(control, listener, worker), daemon=True).start()
        _send(control, _Event.READY)
        worker.run()
        code = 0 if worker.failed is None else 1
    except BaseException as error:
        traceback.print_exc()
        try:
            _send(control, _Event.FAILED, f"{type(error).__name__}: {error}")
        except OSError:
            pass
    for stream in (sys.stdout, sys.stderr):  # what the callable printed (os._exit flushes nothing)
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _send(control: socket.socket, event: _Event, text: str = "", fd: int | None = None) -> None:
    data = json.dumps({"event": event.value, "text": text}).encode()
    try:
        socket.send_fds(control, [data], [fd] if fd is not None else [])
    except OSError:
        pass  # the owner is gone: the worker stops by itself


def _watch_owner(control: socket.socket, listener: TrackedListener, worker: CallableWorker) -> None:
    """Stop the worker when the owner says so, or is gone (its end of the control socket closed)."""
    try:
        while control.recv(_MESSAGE_BYTES) not in (b"", _STOP):
            pass
    except OSError:
        pass
    listener.keep_open = False  # the owner closes the socket too: wake the accept
    worker.stop()


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when the thread that forked it ends (it lives as long as the parent process)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the prctl
        os._exit(1)


def _drop_inherited_sockets(keep: set[int]) -> None:
    """Point every inherited socket but ``keep`` at /dev/null: a worker must not hold other workers' connections
    or listeners open (the peer would never see them end). The numbers stay taken, so that an inherited socket
    object that is collected later closes /dev/null, not a socket of this worker's."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd in keep or fd == null:
                continue
            try:
                if stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.dup2(null, fd)
            except OSError:
                pass
    finally:
        os.close(null)
