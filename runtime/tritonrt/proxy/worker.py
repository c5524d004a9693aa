"""The user-process side of the proxy: one worker thread per inference callable (model instance).

Each worker listens on a Unix socket; exactly one proxy model instance (a stub process) connects. The
worker receives a batch of requests, calls the callable in its own thread (no hop to another thread) and
replies: one message, or a stream of them for decoupled models.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import pathlib
import socket
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tritonrt.decorators.retry import retries_allowed
from tritonrt.exceptions import PyTritonUnrecoverableError, PyTritonValidationError
from tritonrt.model_config.checks import validate_outputs
from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.proxy import protocol
from tritonrt.proxy.isolation import answer_each, describe
from tritonrt.proxy.peer import move_to_waiting, peer_closed
from tritonrt.proxy.transport import WORKER_SPIN_S, Channel, PeerGone
from tritonrt.proxy.types import Request

__all__ = ["CallableWorker"]

LOGGER = logging.getLogger("tritonrt.proxy")


class CallableWorker(threading.Thread):
    """Serve one inference callable on the Unix socket ``path`` until :meth:`stop`.

    ``region_prefix`` names the shared memory for large outputs; ``on_unrecoverable(message)`` is called
    (from this thread) when the callable raises ``PyTritonUnrecoverableError``, ``on_peer_lost()`` when the
    model's instance went away unasked (see :mod:`tritonrt.proxy.peer`). A failed batch is run again one
    request at a time (see :mod:`tritonrt.proxy.isolation`).
    """

    def __init__(
        self,
        infer_callable: Callable,
        path: pathlib.Path,
        model_config: TritonModelConfig,
        *,
        strict: bool,
        region_prefix: str | None,
        on_unrecoverable: Callable[[str], None],
        on_peer_lost: Callable[[], None] | None = None,
    ):
        super().__init__(name=f"tritonrt-{model_config.model_name}-{path.stem}", daemon=True)
        self._callable = infer_callable
        self._config = model_config
        self._strict = strict
        self._region_prefix = region_prefix
        self._on_unrecoverable = on_unrecoverable
        self._on_peer_lost = on_peer_lost
        self._retry = retries_allowed(infer_callable)
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        path.chmod(0o600)
        self._listener.listen(1)
        self._channel: Channel | None = None
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.failed: str | None = None

    def stop(self) -> None:
        """Ask the worker to finish: wakes it from accept/recv; a running call completes first."""
        self._stopping.set()
        for sock in (self._listener, self._channel._sock if self._channel else None):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def move_to_new_instance(self) -> None:
        """After the owner reloaded the model: leave the old instance for a new one waiting (see proxy/peer.py)."""
        channel = self._channel
        move_to_waiting(self._listener, channel._sock if channel is not None else None)

    def run(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    connection, _ = self._listener.accept()
                except OSError:
                    break
                channel = self._channel = Channel(connection, self._region_prefix, WORKER_SPIN_S)
                try:
                    while not self._stopping.is_set():
                        self._serve_next(channel)
                except (PeerGone, OSError):
                    pass  # the stub went away (unload, restart or shutdown): wait for the next one
                finally:
                    channel.close()
                peer_closed(self._listener, self._stopping, self._on_peer_lost)
        except Exception as error:  # a bug in tritonrt: make the model not alive rather than hang
            LOGGER.exception("tritonrt worker for %s failed", self._config.model_name)
            self.failed = str(error)
        finally:
            self._listener.close()
            if self._loop is not None:
                self._loop.close()

    def _serve_next(self, channel: Channel) -> None:
        """Receive a batch, call the callable, reply. Holds the only reference to the requests: once they
        are dropped, the stub may reuse its shared memory unless the callable kept views of it. The last
        reply of a call tells the stub whether it did (see ``Channel.send``)."""
        extras: list[Any] | None
        groups: Any  # the received tensors, then the reply's groups
        _, extras, groups, _ = channel.recv()
        requests: list[Request] | None
        requests = [
            Request(inputs, parameters, requested)
            for (parameters, requested), inputs in zip(extras, groups, strict=True)
        ]
        extras = groups = None
        count = len(requests)
        try:
            if not self._config.decoupled:
                # One outcome per request; a failed request's group carries its error as the group's extra.
                groups = answer_each(self._run, requests, retry=self._retry, model=self._config.model_name)
                groups = [outcome if type(outcome) is tuple else (str(outcome), {}) for outcome in groups]
                requests = None
                channel.send(protocol.OK, groups, report_retained=True)
                return
            result = self._resolve(self._callable(requests))
            for responses in self._iterate(result):
                channel.send(protocol.PARTIAL, self._groups(responses, count))
            result = requests = responses = None
            channel.send(protocol.FINAL, report_retained=True)
            return
        except PyTritonUnrecoverableError as error:
            message = f"Unrecoverable error in model {self._config.model_name!r}: {error}"
            unrecoverable = True
        except (PeerGone, OSError):
            raise
        except Exception as error:
            LOGGER.debug("inference callable of %s raised", self._config.model_name, exc_info=True)
            message, unrecoverable = describe(error), False
        # Outside the handler: the exception and its traceback (which may hold the inputs) are gone.
        result = requests = responses = None
        channel.send(protocol.ERROR, note=message, report_retained=True)
        if unrecoverable:
            self._on_unrecoverable(message)

    def _run(self, requests: list[Request]) -> list[tuple[Any, Mapping[str, Any]]]:
        """Call the callable on ``requests``; return their checked responses as message groups."""
        result = self._callable(requests)
        if type(result) is not list:  # anything but the common case: a plain list of responses
            result = self._resolve(result)
        return self._groups(result, len(requests))

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

    def _iterate(self, result: Any) -> Iterator[Any]:
        if inspect.isasyncgen(result):
            loop = self._event_loop()
            iterator = result.__aiter__()
            while True:
                try:
                    yield loop.run_until_complete(iterator.__anext__())
                except StopAsyncIteration:
                    return
        elif inspect.isgenerator(result):
            yield from result
        else:
            yield result

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        return self._loop

    def _groups(self, responses: Any, count: int) -> list[tuple[Any, Mapping[str, Any]]]:
        """Check the callable's responses and return them as message groups."""
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
        groups: list[tuple[Any, Mapping[str, Any]]] = []
        for response in responses:
            if not isinstance(response, dict):
                raise PyTritonValidationError(
                    f"Model {name!r}: each response must be a dict of output name to numpy array, got "
                    f"{type(response).__name__}."
                )
            groups.append((None, response))
        if self._strict:
            validate_outputs(self._config, responses)
        return groups
