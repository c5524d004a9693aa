"""The drain before tritonserver stops: new requests are refused, the ones in flight finish, idle connections
do not count.

tritonserver's own drain (SIGINT) first waits for its HTTP connections to close, up to
``--exit-timeout-secs``, and only then for in-flight inferences: a client that merely keeps an idle keep-alive
connection open (a notebook's client, a connection pool) holds every stop for the whole timeout (30 s by
default, Kubernetes' whole grace period). So tritonrt drains the models itself, then signals the server with a
short exit timeout (``tritonrt.server.command.SERVER_EXIT_TIMEOUT_S``):

1. it unloads every model through Triton's repository API. From then on Triton refuses new requests for
   them (the model is not ready; ``/v2/health/ready`` says not ready), while the requests it has, queued or
   executing, finish: a model being unloaded lives until its last request is answered. A model that others
   call (BLS) goes after its callers, so that their requests in flight can still call it;
2. it waits until each model is unloaded (Triton's repository index), up to ``exit_timeout_secs``;
3. it gives the last answers a moment (:data:`ANSWER_SETTLE_S`) to be written out, and signals tritonserver,
   which then has nothing left to wait for.

This is Kubernetes' graceful shutdown: stop taking work, finish what is in flight, close what is idle.

Example::

    drain_models(api, timeout_s=30, server_alive=process.is_alive)
    process.stop(10)
"""

from __future__ import annotations

import logging
import re
import time
import urllib.request
from collections.abc import Callable

from tritonrt.exceptions import PyTritonRuntimeError
from tritonrt.server.api import ServerApi

__all__ = ["ANSWER_SETTLE_S", "bls_calls", "drain_models"]

LOGGER = logging.getLogger("tritonrt.server")

_UNLOADED = "UNAVAILABLE"
_POLL_S = 0.05
_CALLS = re.compile(r"^tritonrt_bls_calls_total\{([^}]*)\}\s+(\S+)", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
ANSWER_SETTLE_S = 0.2
"""After the last model is unloaded, the time its last answers get to leave Triton's HTTP and gRPC threads
before tritonserver is signalled (Triton releases a request once answered, before the answer is written out)."""


def drain_models(
    api: ServerApi, timeout_s: float, server_alive: Callable[[], bool], metrics_url: str | None = None
) -> list[str]:
    """Unload every model ``api``'s server serves and wait, up to ``timeout_s``, for their requests in flight;
    return the models still busy when the wait ended (none: every request was answered).

    Callers go before their callees: a model that another model still loaded has called (BLS; the
    ``tritonrt_bls_calls_total`` series on ``metrics_url``) is unloaded only once its callers are, so the
    requests in flight can still make their calls. The wait ends early when ``server_alive()`` turns false (the
    server was killed: a second Ctrl+C). A server whose repository index cannot be read (another access token
    restricts it) is not drained: say so.
    """
    try:
        busy = _busy(api)
    except PyTritonRuntimeError as error:
        LOGGER.warning("Stopping without a drain (%s): requests in flight may get no answer", error)
        return []
    if not busy:
        return []
    LOGGER.info(
        "Stopping: unloading the models; new requests are refused, requests in flight finish (up to %g s)",
        timeout_s,
    )
    calls = bls_calls(metrics_url) if metrics_url else set()
    deadline = time.monotonic() + timeout_s
    loaded, refused = set(busy), set()  # loaded: not asked to unload yet
    while server_alive():
        for name in sorted(_next_wave(loaded, set(busy), calls)):
            loaded.discard(name)
            try:
                api.unload_model(name, timeout_s=max(timeout_s, 1.0))
            except (PyTritonRuntimeError, OSError) as error:
                refused.add(name)
                LOGGER.warning(
                    "Could not unload model %r before stopping (%s): its requests in flight may be cut", name, error
                )
        try:
            busy = [name for name in _busy(api) if name not in refused]
        except PyTritonRuntimeError as error:
            LOGGER.debug("The drain ends: %s", error)
            return []
        if not busy:
            time.sleep(ANSWER_SETTLE_S)  # the last answers leave Triton's HTTP and gRPC threads
            return []
        if time.monotonic() >= deadline:
            LOGGER.warning(
                "Model(s) %s still had requests in flight after %g s (exit_timeout_secs): stopping anyway; "
                "those requests get no answer",
                ", ".join(map(repr, busy)),
                timeout_s,
            )
            return busy
        time.sleep(_POLL_S)
    return busy


def _next_wave(loaded: set[str], busy: set[str], calls: set[tuple[str, str]]) -> set[str]:
    """The loaded models to unload now: those no other busy model has called. Where every one of them has a
    busy caller and none is unloading meanwhile (callers that call each other), all of them."""
    wave = {name for name in loaded if not any(callee == name and caller in busy - {name} for caller, callee in calls)}
    return wave if wave or busy - loaded else set(loaded)


def bls_calls(metrics_url: str) -> set[tuple[str, str]]:
    """The (caller, callee) pairs of the BLS calls the server's models made (``tritonrt_bls_calls_total`` on
    Triton's metrics); none when the metrics cannot be read."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=5) as response:
            text = response.read().decode("utf-8", "replace")
    except (OSError, ValueError) as error:
        LOGGER.debug("No BLS calls known to order the drain by: %s", error)
        return set()
    pairs = set()
    for labels, value in _CALLS.findall(text):
        found = dict(_LABEL.findall(labels))
        if "model" in found and "callee" in found and float(value) > 0:
            pairs.add((found["model"], found["callee"]))
    return pairs


def _busy(api: ServerApi) -> list[str]:
    """The models that are loaded, loading or still unloading (their requests in flight)."""
    return sorted(name for name, state in api.model_states().items() if state != _UNLOADED)
