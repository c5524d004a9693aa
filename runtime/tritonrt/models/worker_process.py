"""An instance served by a worker process, as its owner sees it: forked from this process after bind, watched,
stopped, replaced. The worker's own side (its main, the control socket's messages) is
:mod:`tritonrt.models.worker_child`.

The socket the model's instance connects to is made and kept by this process; each worker process inherits
it. A worker that dies leaves it listening: the instance's next connection waits there for the replacement.
The worker reports over a control socket (ready, connected, peer lost, unrecoverable error) and hands this
process a copy of each connection it accepts: when it dies inside a call, this process fails the batch it
held with an error that names the model, the instance and the signal, then closes the copy. That error lets the
backend run the batch's requests again, each alone, on the replacement (``FLAG_RERUN``), unless the callable is
marked ``@no_retry``, the model is decoupled or a sequence model, the worker was killed past the execution timeout
(a hang: a rerun would cost another timeout), or the service is stopping. A worker that dies running such a rerun
was crashed by that request: its error says the request crashed the worker twice, and its restart is reported as
``guilty`` (not a crash of the worker's own). A fork after CUDA was initialised here is refused
(:func:`~tritonrt.models.workers.check_fork_allowed`).

Each :class:`ProcessInstance` holds its state under one lock (``_lock``): the caller's thread starts, stops and
expires the worker; one watcher thread per worker process reads its reports and reaps it.

No worker outlives this process: each has ``PR_SET_PDEATHSIG`` (SIGKILL) set on the thread that forks (one
long-lived daemon thread, :class:`_Forker`), and it stops once its control socket ends.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import os
import queue
import re
import signal
import socket
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import Future

from tritonrt.decorators.retry import retries_allowed
from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.model_config.sequence import SequenceBatcher
from tritonrt.models.instance import (
    CallState,
    InstanceWorker,
    RunningCall,
    TrackedListener,
    batch_error,
)
from tritonrt.models.worker_child import STOP, ChildSpec, Event, Report, child_main, receive
from tritonrt.proxy.wire import (
    ERROR_INTERNAL,
    ERROR_UNAVAILABLE,
    FLAG_RERUN,
    HEADER_SIZE,
    KIND_BATCH,
    WireError,
    decode_header,
)
from tritonrt.server.supervisor import describe_status

__all__ = ["ChildSpec", "ProcessHooks", "ProcessInstance", "ProcessState", "WorkerExit"]

LOGGER = logging.getLogger("tritonrt")


class ProcessState(enum.Enum):
    """The lifecycle of an instance's worker process, held by its :class:`ProcessInstance` alone."""

    NEW = "new"
    STARTING = "starting"
    SERVING = "serving"
    EXITED = "exited"  # died unasked; the supervisor starts it again (or gives up)
    STOPPING = "stopping"
    STOPPED = "stopped"


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerExit:
    """A worker process that ended unasked: whose, which process, and how (``status``: ``os.waitstatus_to_exitcode``,
    negative for a signal). ``guilty``: it died running a request that had crashed a worker before (run again
    alone after that crash), so that request failed, and the crash says nothing more about the worker."""

    model_name: str
    instance_index: int
    pid: int
    status: int
    timed_out: bool = False
    guilty: bool = False

    def how(self) -> str:
        """How it ended, e.g. "its worker process (pid 1234) was killed by SIGKILL"."""
        ended = "was killed past the execution timeout" if self.timed_out else describe_status(self.status)
        return f"its worker process (pid {self.pid}) {ended}"

    def describe(self) -> str:
        return f"model {self.model_name!r} instance {self.instance_index}: {self.how()}"


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
    """An instance served by a worker process; see the module's docstring. Every attribute that changes after
    ``__init__`` changes under ``_lock``."""

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
        config = spec.config  # may a request of a batch its worker died holding run again (alone)?
        self._rerun = retries_allowed(spec.infer_callable) and not config.decoupled
        self._rerun = self._rerun and not isinstance(config.batcher, SequenceBatcher)

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
            before = self._state
            self._state = ProcessState.STARTING
            self._timed_out = self._connected = False
        self.slot.reset()
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent, restart = os.getpid(), before is ProcessState.EXITED
        try:
            pid = _Forker.fork(lambda: child_main(self._spec, self.listener, theirs, parent, restart))
        except BaseException:
            mine.close()
            with self._lock:
                if self._state is ProcessState.STARTING:
                    self._state = before
            raise
        finally:
            theirs.close()
        ready: Future[str | None] = Future()  # None once the worker serves, else why it could not start
        name = f"tritonrt-{self._spec.info.model_name}-{self.instance_index}-watch"
        watcher = threading.Thread(target=self._watch, args=(pid, mine, ready), name=name, daemon=True)
        with self._lock:
            self._pid, self._control, self._reaped, self._watcher = pid, mine, False, watcher
            stopping = self._state is not ProcessState.STARTING  # stop() came during the fork
        watcher.start()
        if stopping:
            _tell_stop(mine)
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
            _tell_stop(control)

    def join(self, timeout: float) -> None:
        with self._lock:
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
        with self._lock:
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
            pid = self._pid
        LOGGER.error(
            "Model %r instance %d: batch %d ran longer than the execution timeout (%g s): killing its worker process "
            "(pid %d) to replace it",
            self._spec.info.model_name, self.instance_index, running.seq, timeout_s, pid,
        )  # fmt: skip
        self._kill()

    def _kill(self) -> None:
        with self._lock:  # the watcher reaps under this lock: a pid signalled here is still this worker's
            if self._pid and not self._reaped:
                try:
                    os.kill(self._pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # -- the watcher thread: one per worker process ----------------------------------------------------------------

    def _watch(self, pid: int, control: socket.socket, ready: Future[str | None]) -> None:
        """Read the worker's reports until its control socket ends (it exited), then reap and report it."""
        try:
            while (report := receive(control)) is not None:
                self._report(report, ready)
        finally:
            control.close()
            os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)  # it has exited; its pid stays ours until reaped
            with self._lock:
                self._reaped = True
                _, status = os.waitpid(pid, 0)
                timed_out = self._timed_out
            code = os.waitstatus_to_exitcode(status)
            self._exited(WorkerExit(self._spec.info.model_name, self.instance_index, pid, code, timed_out), ready)

    def _report(self, report: Report, ready: Future[str | None]) -> None:
        event = report.event
        if event is Event.CONNECTED:
            connection = socket.socket(fileno=report.fds[0]) if report.fds else None
            with self._lock:
                previous, self._connection = self._connection, connection
                self._connected = True
            if previous is not None:
                previous.close()
            return
        for fd in report.fds:  # (only a connection comes with one)
            os.close(fd)
        if event is Event.READY:
            with self._lock:
                if self._state is ProcessState.STARTING:
                    self._state = ProcessState.SERVING
            _settle(ready, None)
        elif event is Event.FAILED:
            _settle(ready, report.text or "its setup failed")
        elif event is Event.PEER_LOST:
            with self._lock:
                self._connected = False
            if self._hooks.on_peer_lost is not None:
                self._hooks.on_peer_lost()
        elif event is Event.UNRECOVERABLE:
            self._hooks.on_unrecoverable(report.text or "unrecoverable error")

    def _exited(self, exit: WorkerExit, ready: Future[str | None]) -> None:
        with self._lock:
            connection, self._connection = self._connection, None
            stopping = self._state is ProcessState.STOPPING
        running = self.slot.read()
        rerun = False
        if connection is not None:
            try:  # from here a batch the backend sends fails to go (EPIPE) and goes again to the next worker
                connection.shutdown(socket.SHUT_RD)
            except OSError:
                pass
            held = running.state is CallState.CALLING
            seq = running.seq if held else _unread_batch(connection)
            if held and running.flags & FLAG_RERUN:
                exit = dataclasses.replace(exit, guilty=True)
            rerun = self._rerun and not exit.timed_out and not stopping
            if seq is not None:  # a batch the worker held, or one sent to it after it died: fail it (or rerun it)
                message, code = self._crash_message(exit, stopping)
                flags = FLAG_RERUN if rerun else 0
                try:
                    connection.sendall(batch_error(seq, message, code, flags))
                except OSError:
                    pass
            connection.close()
        self.slot.reset()
        _settle(ready, f"it {describe_status(exit.status)} during its setup (see its output above)")
        with self._lock:
            unasked = self._state in (ProcessState.STARTING, ProcessState.SERVING)
            if unasked:
                self._state = ProcessState.EXITED
            self._connected = False
            self._lock.notify_all()
        if unasked and ready.result() is None:  # a start that failed is reported by start() itself
            LOGGER.error("%s; %s", exit.describe(), _what_becomes(running.seq != 0, rerun, exit.guilty))
            self._hooks.on_exit(exit)

    def _crash_message(self, exit: WorkerExit, stopping: bool) -> tuple[str, int]:
        """The error of the batch that worker process held when it died, and its code."""
        after = "the service is stopping" if stopping else "it is started again"
        if not exit.guilty:
            return f"tritonrt: {exit.describe()} while it ran this request; {after}", ERROR_UNAVAILABLE
        return (
            f"tritonrt: model {exit.model_name!r} instance {exit.instance_index}: this request crashed the worker "
            f"process twice (run alone after its batch's worker died, its worker process (pid {exit.pid}) "
            f"{describe_status(exit.status)}), so it is not run again; the worker process {after}",
            ERROR_INTERNAL,
        )


def _what_becomes(held: bool, rerun: bool, guilty: bool) -> str:
    """What happens to the batch a worker process held when it died, for the log."""
    if guilty:
        return "the request it ran had crashed a worker before: failing it alone"
    if held:
        return "its batch's requests run again, each alone" if rerun else "failing the batch it held"
    return "no batch held"


def _settle(ready: Future[str | None], failure: str | None) -> None:
    """Say once how the worker's start ended (None: it serves); later reports do not change it."""
    if not ready.done():
        ready.set_result(failure)


def _tell_stop(control: socket.socket) -> None:
    try:
        control.send(STOP)
    except OSError:
        pass  # the worker is gone already


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
