"""The user-process side of the proxy: one worker thread per inference callable (model instance).

Each worker listens on a Unix socket (:class:`~tritonrt.proxy.listener.WorkerListener`); the model's
instance inside tritonserver (tritonrt's native backend) connects to it. The worker receives a batch of
requests, calls the callable in its own thread (no hop to another thread) and replies: one message with a
status per request, or a stream of them for decoupled models.

An acceptor thread takes the connections and queues them: when Triton reloads the model (a load with a config
override), the new instance connects and completes its handshake while the old one is still served, and the
worker serves the new one once the old one has gone (one connection at a time: the callable is never called
from two threads).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import socket
import threading
from collections.abc import Callable, Generator
from typing import Any, NamedTuple

from tritonrt.decorators.retry import retries_allowed
from tritonrt.exceptions import PyTritonUnrecoverableError, PyTritonValidationError
from tritonrt.model_config.checks import validate_outputs
from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.proxy import calls
from tritonrt.proxy.connection import (
    PeerGone,
    RegionError,
    WorkerConnection,
)
from tritonrt.proxy.error_log import CALLABLE_ERRORS, describe
from tritonrt.proxy.isolation import answer_each
from tritonrt.proxy.listener import WorkerListener
from tritonrt.proxy.own_metrics import zero_own_metrics
from tritonrt.proxy.peer import move_to_waiting, peer_closed
from tritonrt.proxy.telemetry import flush_spans, request_spans
from tritonrt.proxy.types import Request
from tritonrt.proxy.wire import WireError

__all__ = ["CallableWorker"]

LOGGER = logging.getLogger("tritonrt.proxy")


class _Failure(NamedTuple):
    """A batch that failed as a whole: the message its requests get, and whether the server must stop."""

    message: str
    unrecoverable: bool


class CallableWorker(threading.Thread):
    """Serve one inference callable on ``listener`` until :meth:`stop`.

    ``on_unrecoverable(message)`` is called (from this thread) when the callable raises
    ``PyTritonUnrecoverableError``, ``on_peer_lost()`` when the model's instance went away unasked (see
    :mod:`tritonrt.proxy.peer`). A failed batch is run again one request at a time (see
    :mod:`tritonrt.proxy.isolation`).
    """

    def __init__(
        self,
        infer_callable: Callable[..., Any],
        listener: WorkerListener,
        model_config: TritonModelConfig,
        *,
        strict: bool,
        on_unrecoverable: Callable[[str], None],
        on_peer_lost: Callable[[], None] | None = None,
    ):
        super().__init__(name=f"tritonrt-{model_config.model_name}-{listener.path.stem}", daemon=True)
        self._callable = infer_callable
        self._config = model_config
        self._strict = strict
        self._on_unrecoverable = on_unrecoverable
        self._on_peer_lost = on_peer_lost
        self._retry = retries_allowed(infer_callable)
        self._listener = listener
        self._connection: WorkerConnection | None = None
        self._queued: collections.deque[WorkerConnection] = collections.deque()  # accepted, not yet served
        self._arrived = threading.Condition()  # a connection was queued, or the acceptor ended
        self._accepting = False
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.failed: str | None = None

    @property
    def connected(self) -> bool:
        """True while an instance of the model is connected."""
        return self._connection is not None

    def stop(self) -> None:
        """Ask the worker to finish: wakes it from accept/receive; a running call completes first."""
        self._stopping.set()
        with self._arrived:
            self._arrived.notify_all()
        self._listener.close()
        connection = self._connection
        if connection is not None:
            try:
                connection.link.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def move_to_new_instance(self) -> None:
        """After the owner reloaded the model: leave the old instance for a new one waiting (see proxy/peer.py)."""
        connection = self._connection
        current = connection.link.sock if connection is not None else None
        move_to_waiting(self._listener.socket, current, queued=bool(self._queued))

    def _accept(self) -> None:
        """The acceptor thread: accept and queue connections until the listener closes."""
        try:
            while not self._stopping.is_set():
                connection = self._listener.accept()
                with self._arrived:
                    self._queued.append(connection)
                    self._arrived.notify()
        except OSError:
            pass  # closed: the worker stops
        finally:
            with self._arrived:
                self._accepting = False
                self._arrived.notify()

    def _next_connection(self) -> WorkerConnection | None:
        """The next connection to serve; None once the worker stops or nothing more can come."""
        with self._arrived:
            while not self._queued and self._accepting and not self._stopping.is_set():
                self._arrived.wait()
            return self._queued.popleft() if self._queued and not self._stopping.is_set() else None

    def run(self) -> None:
        self._accepting = True
        name = f"{self.name}-accept"
        threading.Thread(target=self._accept, name=name, daemon=True).start()
        try:
            while (connection := self._next_connection()) is not None:
                self._listener.serving(connection)
                self._connection = connection
                zero_own_metrics(self._config.model_name)
                try:
                    while not self._stopping.is_set():
                        self._serve_next(connection)
                except (PeerGone, WireError, OSError):
                    pass  # the instance went away (unload, reload, restart or shutdown), or broke the stream
                finally:
                    self._connection = None
                    connection.close()
                peer_closed(self._listener.socket, self._stopping, self._on_peer_lost, queued=bool(self._queued))
        except Exception as error:  # a bug in tritonrt: make the model not alive rather than hang
            LOGGER.exception("tritonrt worker for %s failed", self._config.model_name)
            self.failed = str(error)
        finally:
            self._listener.close()
            with self._arrived:
                while self._queued:
                    self._queued.popleft().close()
            if self._loop is not None:
                self._loop.close()
            flush_spans()

    def _serve_next(self, connection: WorkerConnection) -> None:
        """Receive a batch, call the callable, reply: the batch path, or the stream path of a decoupled model.

        Each path receives the batch inside a call that returns the answer but not the requests: once it
        returns, nothing of this worker refers to the requests or their inputs any more, so the final reply can
        tell the backend whether the callable kept views of its region (see tritonrt.proxy.views)."""
        if self._config.decoupled:
            seq, failure = self._stream(connection, *connection.receive_batch())
            if failure is None:
                self._send(connection, seq, [], final=True)
        else:
            seq, answer = self._answer(connection, *connection.receive_batch())
            if isinstance(answer, _Failure):
                failure = answer
            else:
                self._send(connection, seq, answer, final=True)  # (reply() empties the list: no output outlives it)
                return
        if failure is not None:
            connection.fail(seq, failure.message)
            if failure.unrecoverable:
                self._on_unrecoverable(failure.message)

    def _answer(
        self, connection: WorkerConnection, seq: int, requests: list[Request]
    ) -> tuple[int, list[Any] | _Failure]:
        """The batch path: one outcome per request (a response, or a RequestError sent as it is), or the failure
        of the whole batch. Traced requests run in their spans (see tritonrt.proxy.telemetry)."""
        name = self._config.model_name
        with request_spans(requests, connection.trace_contexts, name) as spans:
            scope = calls.enter(connection, seq, name)  # (the callable may call other models: tritonrt.bls)
            try:
                return seq, answer_each(self._run, requests, retry=self._retry, model=name)
            except (PeerGone, WireError, OSError):
                raise
            except Exception as error:
                failure = self._failure(error)
                spans.fail(failure.message)
                return seq, failure
            finally:
                calls.leave(scope)

    def _stream(self, connection: WorkerConnection, seq: int, requests: list[Request]) -> tuple[int, _Failure | None]:
        """The stream path: one reply per step of the (async) generator, the requests cancelled by their clients
        answered with nothing; once every request of the batch was cancelled, the generator is closed (its
        finally blocks run). The failure of the stream, if it failed."""
        with request_spans(requests, connection.trace_contexts, self._config.model_name) as spans:
            scope = calls.enter(connection, seq, self._config.model_name)
            try:
                seq, failure = self._stream_steps(connection, seq, requests)
            finally:
                calls.leave(scope)
            if failure is not None:
                spans.fail(failure.message)
        return seq, failure

    def _stream_steps(
        self, connection: WorkerConnection, seq: int, requests: list[Request]
    ) -> tuple[int, _Failure | None]:
        count = len(requests)
        try:
            steps = self._iterate(self._resolve(self._callable(requests)))
            try:
                for responses in steps:
                    cancelled = connection.cancelled_in(seq)
                    if len(cancelled) >= count:
                        break
                    checked = self._checked(responses, count)
                    for index in cancelled:
                        checked[index] = None
                    self._send(connection, seq, checked, final=False)
            finally:
                steps.close()
        except (PeerGone, WireError, OSError):
            raise
        except Exception as error:
            return seq, self._failure(error)
        return seq, None

    def _failure(self, error: Exception) -> _Failure:
        """What the batch's requests are told when the callable raised; the error itself is not kept."""
        if isinstance(error, PyTritonUnrecoverableError):
            return _Failure(f"Unrecoverable error in model {self._config.model_name!r}: {error}", True)
        CALLABLE_ERRORS.record(self._config.model_name, error)
        return _Failure(describe(error), False)

    def _send(self, connection: WorkerConnection, seq: int, responses: list[Any], *, final: bool) -> None:
        try:
            connection.reply(seq, responses, final=final)
        except RegionError as error:  # no memory for the outputs: those requests fail, the worker serves on
            connection.fail(seq, str(error))

    def _run(self, requests: list[Request]) -> list[Any]:
        """Call the callable on ``requests``; return their checked responses."""
        result = self._callable(requests)
        if type(result) is not list:  # anything but the common case: a plain list of responses
            result = self._resolve(result)
        return self._checked(result, len(requests))

    def _resolve(self, result: Any) -> Any:
        """Await a coroutine's result; refuse a stream from a model that is not decoupled."""
        if inspect.isawaitable(result):
            result = self._event_loop().run_until_complete(result)
        if not self._config.decoupled and (inspect.isgenerator(result) or inspect.isasyncgen(result)):
            raise PyTritonValidationError(
                f"Model {self._config.model_name!r}: the inference callable returned a generator, but "
                "the model is not decoupled. Return a list of dicts, or bind with "
                "ModelConfig(decoupled=True) to stream responses."
            )
        return result

    def _iterate(self, result: Any) -> Generator[Any, None, None]:
        if inspect.isasyncgen(result):
            loop = self._event_loop()
            iterator = result.__aiter__()
            try:
                while True:
                    try:
                        yield loop.run_until_complete(iterator.__anext__())
                    except StopAsyncIteration:
                        return
            finally:
                loop.run_until_complete(result.aclose())
        elif inspect.isgenerator(result):
            try:
                yield from result
            finally:
                result.close()
        else:
            yield result

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _checked(self, responses: Any, count: int) -> list[Any]:
        """The callable's responses, checked: a list of ``count`` dicts (a new list, which reply consumes)."""
        name = self._config.model_name
        if isinstance(responses, dict):
            raise PyTritonValidationError(
                f"Model {name!r}: the inference callable returned a dict; it must return a list with one dict "
                "per request (decorate it with @batch to work on batched arrays)."
            )
        if not isinstance(responses, (list, tuple)) or len(responses) != count:
            size = f" of length {len(responses)}" if hasattr(responses, "__len__") else ""
            raise PyTritonValidationError(
                f"Model {name!r}: the inference callable must return a list with one dict per request "
                f"({count} requests), got {type(responses).__name__}{size}."
            )
        for response in responses:
            if not isinstance(response, dict):
                raise PyTritonValidationError(
                    f"Model {name!r}: each response must be a dict of output name to numpy array, got "
                    f"{type(response).__name__}."
                )
        if self._strict:
            validate_outputs(self._config, responses)
        return list(responses)
