"""The user-process side of the proxy: one worker thread per inference callable (model instance).

Each worker owns a zmq ROUTER socket on an ipc address; exactly one proxy model instance (a stub
process) connects to it. The worker receives a batch of requests, calls the callable in its own thread
(no hop to another thread), and replies: one message, or a stream of them for decoupled models.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import zmq

from tritonrt.exceptions import PyTritonUnrecoverableError, PyTritonValidationError
from tritonrt.models.spec import TritonModelConfig
from tritonrt.proxy import protocol
from tritonrt.proxy.types import Request
from tritonrt.proxy.validation import validate_outputs

LOGGER = logging.getLogger("tritonrt.proxy")

_POLL_MS = 100


class CallableWorker(threading.Thread):
    """Serve one inference callable on ``address`` until :meth:`stop`.

    ``on_unrecoverable(message)`` is called (from this thread) when the callable raises
    ``PyTritonUnrecoverableError``.
    """

    def __init__(
        self,
        infer_callable: Callable,
        address: str,
        model_config: TritonModelConfig,
        *,
        strict: bool,
        context: zmq.Context,
        on_unrecoverable: Callable[[str], None],
    ):
        super().__init__(name=f"tritonrt-{model_config.model_name}-{address.rsplit('/', 1)[-1]}", daemon=True)
        self._callable = infer_callable
        self._config = model_config
        self._strict = strict
        self._on_unrecoverable = on_unrecoverable
        self._socket = context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(address)
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.failed: str | None = None

    def stop(self) -> None:
        """Ask the worker to finish; it exits within one poll period."""
        self._stopping.set()

    def run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                if not poller.poll(_POLL_MS):
                    continue
                identity, *frames = self._socket.recv_multipart(copy=False)
                self._serve(identity, frames)
        except Exception as error:  # a bug in tritonrt: make the model not alive rather than hang
            LOGGER.exception("tritonrt worker for %s failed", self._config.model_name)
            self.failed = str(error)
        finally:
            self._socket.close(linger=0)
            if self._loop is not None:
                self._loop.close()

    def _send(self, identity, frames: list) -> None:
        self._socket.send_multipart([identity, *frames], copy=False)

    def _serve(self, identity, frames: Sequence) -> None:
        try:
            requests = [
                Request(inputs, parameters, requested)
                for parameters, requested, inputs in protocol.decode_requests(frames)
            ]
            result = self._call(requests)
            if self._config.decoupled:
                for responses in self._iterate(result):
                    self._send(identity, protocol.encode_responses(protocol.PARTIAL, self._check(responses, requests)))
                self._send(identity, protocol.encode_final())
            else:
                if inspect.isgenerator(result) or inspect.isasyncgen(result):
                    raise PyTritonValidationError(
                        f"Model {self._config.model_name!r}: the inference callable returned a generator, but "
                        "the model is not decoupled. Return a list of dicts, or bind with "
                        "ModelConfig(decoupled=True) to stream responses."
                    )
                self._send(identity, protocol.encode_responses(protocol.OK, self._check(result, requests)))
        except PyTritonUnrecoverableError as error:
            message = f"Unrecoverable error in model {self._config.model_name!r}: {error}"
            self._send(identity, protocol.encode_error(message))
            self._on_unrecoverable(message)
        except Exception as error:
            LOGGER.debug("inference callable of %s raised", self._config.model_name, exc_info=True)
            self._send(identity, protocol.encode_error(_describe(error)))

    def _call(self, requests: list[Request]) -> Any:
        result = self._callable(requests)
        if inspect.isawaitable(result):
            result = self._event_loop().run_until_complete(result)
        return result

    def _iterate(self, result: Any):
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

    def _check(self, responses: Any, requests: list[Request]) -> list[dict[str, np.ndarray]]:
        name = self._config.model_name
        if isinstance(responses, dict):
            raise PyTritonValidationError(
                f"Model {name!r}: the inference callable returned a dict; it must return a list with one dict "
                "per request (decorate it with @batch to work on batched arrays)."
            )
        if not isinstance(responses, (list, tuple)) or len(responses) != len(requests):
            got = f"{type(responses).__name__} of length {len(responses)}" if hasattr(responses, "__len__") else (
                type(responses).__name__
            )
            raise PyTritonValidationError(
                f"Model {name!r}: the inference callable must return a list with one dict per request "
                f"({len(requests)} requests), got {got}."
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


def _describe(error: Exception) -> str:
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
