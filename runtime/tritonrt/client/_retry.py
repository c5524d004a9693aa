"""A request that a stopping server refused is sent once more, on a fresh connection.

Behind a connection balancer (a Kubernetes Service: kube-proxy pins each TCP connection to one pod) a rolling
replacement takes the old pod out of the endpoints, so new connections go to a ready pod, but the connections
already open stay on the old one. Its tritonrt drain (``tritonrt.server.drain``) unloads the models, so every
request that still arrives there is refused (``unknown model ... has no available versions``); then the server
closes the connections (a reset, or gRPC UNAVAILABLE). None of these requests ran. So the clients send such a
request once more, over a connection (HTTP) or channel (gRPC) opened after the refusal, which the balancer
sends to a ready pod; the requests after it use the fresh connections too.

What is sent again: a request whose answer was one of those (:func:`refused_unrun`); not a sequence request
(its state lives on the server that refused it), not a decoupled stream once a response came, and never a
request that failed otherwise (a bad input, the model's own error, a timeout: it may have run). Each retry is
counted (``retried_requests`` of the clients) and logged on the ``tritonrt.client`` logger at DEBUG.

The fresh connections: ``reconnect`` of the transports (``tritonrt.client._slots`` for gRPC channels and
aiohttp sessions).

Example::

    generation = transport.generation
    try:
        outputs = transport.infer(request, timeout)
    except PyTritonClientError as error:
        if not retries.send_again(request, error, transport.url.with_scheme):
            raise
        transport.reconnect(generation)
        outputs = transport.infer(request, timeout)
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from tritonrt.client._transport import InferRequest, ServerUnreachableError
from tritonrt.client.exceptions import PyTritonClientInferenceServerError, PyTritonClientModelUnavailableError

__all__ = ["SEQUENCE_PARAMETERS", "RetryCount", "may_send_again", "refused_unrun"]

LOGGER = logging.getLogger("tritonrt.client")
SEQUENCE_PARAMETERS = frozenset({"sequence_id", "sequence_start", "sequence_end"})
"""Request parameters that make a request part of a sequence (Triton's sequence batcher): never sent again."""


def refused_unrun(error: BaseException) -> bool:
    """Whether ``error`` is an answer that a stopping server, or the way to it, gives a request it did not run:
    the model is unavailable (unloaded by the drain), the connection was refused, closed or reset before an
    answer, or gRPC said UNAVAILABLE or the server that it is stopping (``unavailable`` of the error)."""
    if isinstance(error, (ServerUnreachableError, PyTritonClientModelUnavailableError)):
        return True
    return isinstance(error, PyTritonClientInferenceServerError) and error.unavailable


def may_send_again(error: BaseException, parameters: Mapping[str, Any] | None) -> bool:
    """Whether a request with ``parameters`` that failed with ``error`` is sent again (see the module)."""
    return refused_unrun(error) and not (parameters and SEQUENCE_PARAMETERS.intersection(parameters))


class RetryCount:
    """How many requests a client sent again; each one logged at DEBUG."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value = 0

    def time_left(self, request: InferRequest, error: BaseException, url: str, timeout: float, started: float) -> float:
        """The time the second try of ``request`` gets, sent at ``started`` (``time.monotonic``) with ``timeout``
        and failed with ``error``: what is left of the timeout; 0 when it is not sent again (see the module: the
        time is up, or the error says it may have run)."""
        left = timeout - (time.monotonic() - started)
        return left if left > 0 and self.send_again(request, error, url) else 0.0

    def send_again(self, request: InferRequest, error: BaseException, url: str) -> bool:
        """Whether ``request``, failed with ``error``, is sent again (see the module); if so count and log it."""
        if not may_send_again(error, request.parameters):
            return False
        with self._lock:
            self.value += 1
        LOGGER.debug(
            "A request to model %r at %s was refused unanswered (%s: %s); retried once on a new connection",
            request.model_name,
            url,
            type(error).__name__,
            error,
        )
        return True
