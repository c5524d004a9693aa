"""The worker process's own side: what it serves (:class:`ChildSpec`), its main (:func:`child_main`), and the
control socket's messages, which both ends read and write here (:class:`Event`, :func:`send`, :func:`receive`).

:func:`child_main` runs in a fork of the owner (``tritonrt.models.worker_process.ProcessInstance``), so the
callable and everything loaded before (weights included, shared copy-on-write) is there. It first moves all it
inherited out of the garbage collector's reach (``gc.freeze()``): a full collection would otherwise write to every
tracked object's header and so copy each page of a model made of Python objects (vocabularies, trees, lists) into
the worker. Then ``setup(info)`` runs, after ``CUDA_VISIBLE_DEVICES`` was set to its device (load CUDA models
there), then the warm-up, and it serves the instance's socket (inherited from the owner) until told to stop.

It reports over the control socket: ready, or why its setup failed; each connection it accepts (with a copy of
the connection's descriptor, so that the owner can fail the batch it held if it dies); a lost peer; an
unrecoverable error. It stops when the owner says so or is gone (the control socket ends), and is killed when
the owner's forking thread ends (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import ctypes
import dataclasses
import enum
import gc
import json
import os
import signal
import socket
import stat
import sys
import threading
import traceback
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.models.instance import TrackedListener
from tritonrt.models.workers import WorkerInfo
from tritonrt.proxy.connection import WorkerConnection
from tritonrt.proxy.own_metrics import WORKER_RESTARTS
from tritonrt.proxy.worker import CallableWorker

__all__ = ["STOP", "ChildSpec", "Event", "Report", "child_main", "receive", "send"]

_PR_SET_PDEATHSIG = 1
_MESSAGE_BYTES = 1 << 16
STOP = b'{"event": "stop"}'  # the owner's one message to the worker


class Event(enum.Enum):
    """What a worker reports to its owner."""

    READY = "ready"
    FAILED = "failed"  # its setup failed; the text says why
    CONNECTED = "connected"  # it accepted a connection, whose descriptor comes along
    PEER_LOST = "peer_lost"
    UNRECOVERABLE = "unrecoverable"


class Report(NamedTuple):
    """A report as the owner receives it: the event, its text, and the descriptors that came along (owned by the
    receiver: closed unless used)."""

    event: Event
    text: str
    fds: list[int]


@dataclasses.dataclass(frozen=True, slots=True)
class ChildSpec:
    """What a worker process serves."""

    infer_callable: Callable[..., Any]
    config: TritonModelConfig
    strict: bool
    info: WorkerInfo
    setup: Callable[[WorkerInfo], None] | None
    warm_up: Callable[[], None] | None


def send(control: socket.socket, event: Event, text: str = "", fd: int | None = None) -> None:
    """Report ``event`` to the owner (``fd``: a descriptor to pass along); nothing when the owner is gone."""
    data = json.dumps({"event": event.value, "text": text}).encode()
    try:
        socket.send_fds(control, [data], [fd] if fd is not None else [])
    except OSError:
        pass  # the owner is gone: the worker stops by itself


def receive(control: socket.socket) -> Report | None:
    """The worker's next report, waiting for it; None once the worker's end is closed (it exited)."""
    try:
        data, fds, _, _ = socket.recv_fds(control, _MESSAGE_BYTES, 1)
    except OSError:
        return None
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    message = json.loads(data)
    return Report(Event(message["event"]), message.get("text", ""), fds)


def child_main(
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
            on_unrecoverable=lambda text: send(control, Event.UNRECOVERABLE, text),
            on_peer_lost=lambda: send(control, Event.PEER_LOST),
        )

        def connected(connection: WorkerConnection) -> None:
            send(control, Event.CONNECTED, fd=connection.link.sock.fileno())

        listener.on_accept = connected
        threading.Thread(target=_watch_owner, args=(control, listener, worker), daemon=True).start()
        send(control, Event.READY)
        worker.run()
        code = 0 if worker.failed is None else 1
    except BaseException as error:
        traceback.print_exc()
        send(control, Event.FAILED, f"{type(error).__name__}: {error}")
    for stream in (sys.stdout, sys.stderr):  # what the callable printed (os._exit flushes nothing)
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _watch_owner(control: socket.socket, listener: TrackedListener, worker: CallableWorker) -> None:
    """Stop the worker when the owner says so, or is gone (its end of the control socket closed)."""
    try:
        while control.recv(_MESSAGE_BYTES) not in (b"", STOP):
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
