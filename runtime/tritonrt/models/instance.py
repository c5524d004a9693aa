"""One model instance's worker, as its owner sees it, whether a thread here or a process of its own.

:class:`InstanceWorker` is what :class:`~tritonrt.models.bound.BoundModel` holds per instance;
:class:`ThreadInstance` runs the callable in a :class:`~tritonrt.proxy.worker.CallableWorker` thread of this
process, ``tritonrt.models.worker_process.ProcessInstance`` in a child process.

Both listen through a :class:`TrackedListener`: its connections write the batch being served into a
:class:`CallSlot` (its sequence number, since when it runs, whether the reply is being written), which the
execution timeout reads, and which says, after a worker process died, whether the batch it held can still be
failed with an error of tritonrt's own (:func:`batch_error`).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import mmap
import pathlib
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

from tritonrt.proxy import wire
from tritonrt.proxy.connection import InstanceIdentity, WorkerConnection, WorkerSettings
from tritonrt.proxy.listener import WorkerListener
from tritonrt.proxy.types import Request
from tritonrt.proxy.wire import KIND_BATCH_ERROR, Header
from tritonrt.proxy.worker import CallableWorker

__all__ = [
    "CallSlot",
    "CallState",
    "ExpirableConnection",
    "InstanceWorker",
    "RunningCall",
    "ThreadInstance",
    "TrackedConnection",
    "TrackedListener",
    "batch_error",
]

# The slot: a version (odd while being written), then state, batch flags, seq and since (CLOCK_MONOTONIC ns, the same
# in every process). The version lets a reader in another process tell a whole write from one half done (a seqlock).
_VERSION = struct.Struct("<Q")
_FIELDS = struct.Struct("<IIQQ")
_READ_TRIES = 100
_STATE_AT = _VERSION.size  # the state's low byte (the only one a state uses)


class CallState(enum.IntEnum):
    """What an instance's worker is doing with its connection."""

    IDLE = 0  # waiting for a batch
    CALLING = 1  # a batch was received and is in the callable (or between the steps of a stream)
    REPLYING = 2  # writing a reply: the stream must not be interrupted by another message


# The states as the hot path names them: reading a member off an Enum class runs Python code (0.4 us, Python 3.11).
_IDLE, _CALLING, _REPLYING = CallState.IDLE, CallState.CALLING, CallState.REPLYING


@dataclasses.dataclass(frozen=True, slots=True)
class RunningCall:
    """A batch being served: its sequence number, for how long it has run, the state it is in, and its BATCH's
    header flags (``FLAG_RERUN``: a request run again after its worker died)."""

    state: CallState
    seq: int
    elapsed_s: float
    flags: int = 0


class CallSlot:
    """The batch an instance's worker serves, in memory shared with the worker process (forks keep it). One process
    writes it at a time (the worker; its owner only before the worker starts or after it ended); any reads it."""

    def __init__(self) -> None:
        # anonymous and shared: a forked worker writes, the owner reads
        self._memory = mmap.mmap(-1, _VERSION.size + _FIELDS.size)
        self.reset()

    def set(self, state: CallState, seq: int, flags: int = 0) -> None:
        (version,) = _VERSION.unpack_from(self._memory, 0)
        version |= 1  # odd: a write is under way (already odd: a writer died mid-write)
        _VERSION.pack_into(self._memory, 0, version)
        _FIELDS.pack_into(self._memory, _VERSION.size, state, flags, seq, time.monotonic_ns())
        _VERSION.pack_into(self._memory, 0, version + 1)

    def mark(self, state: CallState) -> None:
        """Change the state alone, the batch and its start time kept (a reply under way, or sent): one byte stored,
        which a reader sees whole; with either state the slot is one that a write left, so no version is needed."""
        self._memory[_STATE_AT] = state

    def read(self) -> RunningCall:
        """The slot as one write left it. A reader that caught a write half done (a new state with the time of
        the last, once seen as a batch running for as long as the instance had been idle) reads again; while the
        writer stays interrupted mid-write, the slot reads as REPLYING, which nothing expires."""
        memory = self._memory
        for _ in range(_READ_TRIES):
            (before,) = _VERSION.unpack_from(memory, 0)
            state, flags, seq, since = _FIELDS.unpack_from(memory, _VERSION.size)
            (after,) = _VERSION.unpack_from(memory, 0)
            if before == after and not before & 1:
                return RunningCall(CallState(state), seq, (time.monotonic_ns() - since) / 1e9, flags)
        return RunningCall(CallState.REPLYING, 0, 0.0)

    def reset(self) -> None:
        self.set(CallState.IDLE, 0)


def batch_error(seq: int, message: str, code: int = wire.ERROR_UNAVAILABLE, flags: int = 0) -> bytes:
    """The message that fails every request of batch ``seq`` still unanswered (the worker's BATCH_ERROR);
    ``flags``: ``FLAG_RERUN`` lets the backend run them again, each alone (the worker process died)."""
    return wire.encode_message(Header(KIND_BATCH_ERROR, flags, 0, seq), wire.encode_batch_error(code, message))


class TrackedConnection(WorkerConnection):
    """A worker connection that keeps its :class:`CallSlot` up to date, for its owner to read (a worker process's:
    nothing in the worker process itself answers a batch in the worker's place)."""

    def __init__(self, connection: WorkerConnection, slot: CallSlot):
        super().__init__(connection.link, connection.identity, connection.settings)
        self.slot = slot

    def receive_batch(self) -> tuple[int, list[Request]]:
        seq, requests = super().receive_batch()
        self.slot.set(_CALLING, seq, self.batch_flags)
        return seq, requests

    def reply(self, seq: int, responses: list[Any], *, final: bool = True) -> None:
        self.slot.mark(_REPLYING)  # (the same batch: seq and flags stay)
        super().reply(seq, responses, final=final)
        if final:
            self.slot.mark(_IDLE)
        else:
            self.slot.set(_CALLING, seq)  # (a stream's next step: its time anew)

    def fail(self, seq: int, message: str, code: int = wire.ERROR_INTERNAL) -> None:
        self.slot.set(CallState.REPLYING, seq)
        super().fail(seq, message, code)
        self.slot.set(CallState.IDLE, seq)


class ExpirableConnection(TrackedConnection):
    """A tracked connection that the execution timeout can answer from another thread (a worker thread's):
    :meth:`expire` and the worker's answers take turns under a lock; once :meth:`expire` answered the batch, the
    worker's own late answer is dropped and the connection ends."""

    def __init__(self, connection: WorkerConnection, slot: CallSlot):
        super().__init__(connection, slot)
        self._lock = threading.Lock()
        self._expired = False

    def reply(self, seq: int, responses: list[Any], *, final: bool = True) -> None:
        with self._lock:
            self._check_open()
            super().reply(seq, responses, final=final)

    def fail(self, seq: int, message: str, code: int = wire.ERROR_INTERNAL) -> None:
        with self._lock:
            self._check_open()
            super().fail(seq, message, code)

    def expire(self, seq: int, message: str) -> bool:
        """Fail batch ``seq`` with ``message`` unless its answer is under way; end the connection. Whether it did."""
        with self._lock:
            running = self.slot.read()
            if self._expired or running.state is not CallState.CALLING or running.seq != seq:
                return False
            self._expired = True
            try:
                self.link.sock.sendall(batch_error(seq, message))
                self.link.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.slot.reset()
            return True

    def _check_open(self) -> None:
        if self._expired:
            raise OSError("the batch was answered by the execution timeout: the connection has ended")


class TrackedListener(WorkerListener):
    """A :class:`WorkerListener` whose connections are :class:`ExpirableConnection` s, or with ``expirable`` False
    :class:`TrackedConnection` s (a worker process's: its owner kills it past the timeout), or with ``track``
    False plain ones (worker threads without an execution timeout pay nothing per batch). ``on_accept(connection)`` is
    called when the worker starts serving one; ``current`` is that one (during a reload the worker may already
    hold the next). While ``keep_open`` is True, :meth:`close` only closes this process's descriptor: the socket
    stays bound and listening for the owner (a worker process that ends must not close it for the next)."""

    def __init__(
        self,
        path: pathlib.Path,
        identity: InstanceIdentity,
        settings: WorkerSettings,
        slot: CallSlot,
        *,
        track: bool = True,
        expirable: bool = True,
    ):
        super().__init__(path, identity, settings)
        self.slot = slot
        self.track = track
        self.expirable = expirable
        self.keep_open = False
        self.on_accept: Callable[[WorkerConnection], None] | None = None
        self.current: WorkerConnection | None = None

    def accept(self) -> WorkerConnection:
        connection = super().accept()
        if not self.track:
            return connection
        kind = ExpirableConnection if self.expirable else TrackedConnection
        return kind(connection, self.slot)

    def serving(self, connection: WorkerConnection) -> None:
        self.slot.reset()
        self.current = connection
        if self.on_accept is not None:
            self.on_accept(connection)

    def close(self) -> None:
        if self.keep_open:
            self.socket.close()
        else:
            super().close()


class InstanceWorker(abc.ABC):
    """The worker of one model instance, started, watched and stopped by its :class:`BoundModel`."""

    def __init__(self, listener: TrackedListener, instance_index: int):
        self.listener = listener
        self.instance_index = instance_index

    @property
    def slot(self) -> CallSlot:
        return self.listener.slot

    @abc.abstractmethod
    def start(self) -> None:
        """Start serving (returns once the worker is ready; raises when its setup failed)."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Ask the worker to finish: a running call completes first."""

    @abc.abstractmethod
    def join(self, timeout: float) -> None:
        """Wait until the worker ended (a process that does not end in time is killed)."""

    @property
    @abc.abstractmethod
    def connected(self) -> bool:
        """True while the model's instance is connected to the worker."""

    @abc.abstractmethod
    def is_alive(self) -> bool:
        """True while the worker serves, or is being started again after it died."""

    @abc.abstractmethod
    def move_to_new_instance(self) -> None:
        """After the model was reloaded: leave the old instance for the new one."""

    @abc.abstractmethod
    def expire(self, running: RunningCall, timeout_s: float) -> None:
        """The batch ``running`` ran past ``timeout_s``: fail it and deal with the stuck worker."""


class ThreadInstance(InstanceWorker):
    """An instance served by a worker thread of this process. A thread cannot be killed: past the execution
    timeout its batch fails, and ``on_stuck(message)`` is told (the owner stops the service)."""

    def __init__(
        self,
        listener: TrackedListener,
        instance_index: int,
        make_worker: Callable[[TrackedListener], CallableWorker],
        on_stuck: Callable[[str], None],
        model_name: str,
    ):
        super().__init__(listener, instance_index)
        self._worker = make_worker(listener)
        self._on_stuck = on_stuck
        self._model_name = model_name
        self._abandoned = False  # its call ran past the execution timeout: stopping does not wait for it

    def start(self) -> None:
        self._worker.start()

    def stop(self) -> None:
        self._worker.stop()

    def join(self, timeout: float) -> None:
        if not self._abandoned:
            self._worker.join(timeout)

    @property
    def connected(self) -> bool:
        return self._worker.connected

    def is_alive(self) -> bool:
        return self._worker.is_alive()

    def move_to_new_instance(self) -> None:
        self._worker.move_to_new_instance()

    def expire(self, running: RunningCall, timeout_s: float) -> None:
        connection = self.listener.current
        if not isinstance(connection, ExpirableConnection):
            return  # not tracked: the model has no execution timeout
        message = (
            f"tritonrt: model {self._model_name!r} instance {self.instance_index}: the inference callable ran "
            f"longer than the execution timeout ({timeout_s:g} s) and was abandoned"
        )
        if not connection.expire(running.seq, message):
            return
        self._abandoned = True
        self._on_stuck(
            f"{message}; a worker thread cannot be stopped, so the service stops once the other requests in "
            "flight are answered (use worker processes, TRITONRT_WORKERS=process, to replace a stuck worker alone)"
        )
