"""Waiting until the server is live and a model is ready, for sync and asyncio transports.

A model that is not ready yet may be loading, or missing, or broken. The model repository index tells
these apart; where the server restricts it (TritonSecurityConfig) the client reads it only with the
access token, and otherwise waits until the timeout.

A wait that does not end at its first probe says so on the ``tritonrt.client`` logger (INFO): what it waits
for and up to when, and again whenever that changes (nothing listens, the server does not answer yet, the
model is not ready yet). Nothing listening at all (every connection refused) is not a model still loading:
with ``unreachable_timeout_s`` the wait gives up once connections were refused for that long and no server
answered meanwhile (ServerUnreachableError); a server that answers is waited for until ``timeout_s``.

Example::

    wait_for_server_ready(transport, timeout_s=30.0)               # returns, or raises
    wait_for_model_ready(transport, "add", None, timeout_s=30.0, unreachable_timeout_s=5.0)
    await async_wait_for_model_ready(async_transport, "add", None, timeout_s=30.0)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterator
from typing import Any, Protocol

from tritonrt.client._transport import AsyncTransport, ServerUnreachableError, TritonUrl
from tritonrt.client.exceptions import (
    PyTritonClientInferenceServerError,
    PyTritonClientModelUnavailableError,
    PyTritonClientTimeoutError,
)

__all__ = ["Probe", "async_wait_for_model_ready", "wait_for_model_ready", "wait_for_server_ready"]

LOGGER = logging.getLogger("tritonrt.client")

_FIRST_INTERVAL_S = 0.05
_MAX_INTERVAL_S = 0.5
_MAX_PROBE_TIMEOUT_S = 10.0
_NOT_YET = (ServerUnreachableError, PyTritonClientTimeoutError)


class Probe(Protocol):
    """The calls the blocking waits make: a :class:`Transport` has them (``tritonrt.client.utils`` gives them to
    tritonclient's clients too)."""

    url: TritonUrl

    def is_server_live(self, timeout: float) -> bool: ...

    def is_server_ready(self, timeout: float) -> bool: ...

    def is_model_ready(self, model_name: str, model_version: str | None, timeout: float) -> bool: ...

    def repository_index(self, timeout: float) -> list[dict[str, Any]]: ...


class _Wait:
    """Deadline, poll interval and what was last seen; builds the messages of both wait loops."""

    def __init__(
        self,
        url: TritonUrl,
        model_name: str | None,
        model_version: str | None,
        timeout_s: float,
        unreachable_timeout_s: float | None = None,
    ):
        self.url = url
        self.model_name = model_name
        self.model_version = model_version
        self.timeout_s = timeout_s
        self.unreachable_timeout_s = unreachable_timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.interval = _FIRST_INTERVAL_S
        self.server_live = False
        self.index_readable = True
        self.not_listed: str | None = None  # the models the index lists, when it does not list this one
        self.answered = False  # a server answered a probe of this wait
        self.refused: ServerUnreachableError | None = None  # this round's refused connection, if it was refused
        self.refused_since: float | None = None  # since when every round was refused
        self.reported: str | None = None  # what the wait last said it waits for

    @property
    def label(self) -> str:
        return f"{self.model_name!r}" + (f" version {self.model_version}" if self.model_version else "")

    def probe_timeout(self) -> float:
        return min(max(self.deadline - time.monotonic(), 0.01), _MAX_PROBE_TIMEOUT_S)

    def next_sleep(self) -> float:
        """Seconds to sleep before the next probe; says what the wait waits for when that changed; raises the
        timeout error once the deadline passed, and ServerUnreachableError once nothing listened for
        ``unreachable_timeout_s``."""
        now = time.monotonic()
        remaining = self.deadline - now
        if remaining <= 0:
            raise self.timeout_error()
        if self.refused is None:
            self.refused_since = None
        elif self.refused_since is None:
            self.refused_since = now
        give_up = None
        if self.refused_since is not None and self.unreachable_timeout_s is not None and not self.answered:
            give_up = self.refused_since + self.unreachable_timeout_s
            if now >= give_up:
                raise self.unreachable_error()
        self._report(remaining, give_up)
        sleep = min(self.interval, remaining, (give_up - now) if give_up is not None else remaining)
        self.interval = min(self.interval * 2, _MAX_INTERVAL_S)
        return sleep

    def _report(self, remaining: float, give_up: float | None) -> None:
        """Log what the wait waits for, and until when, when that changed since it last said so."""
        url, target = self.url.with_scheme, f"model {self.label}" if self.model_name else "the server"
        if self.refused is not None:
            state = "refused"
            until = _seconds(give_up - time.monotonic() if give_up is not None else remaining)
            message = f"Nothing listens at {url} (connection refused): waiting up to {until} for a server there"
        elif not self.server_live:
            state = "silent"
            message = f"The server at {url} does not answer as live yet: waiting up to {_seconds(remaining)}"
        else:
            state = "loading"
            message = f"The server at {url} is live, {target} is not ready yet: waiting up to {_seconds(remaining)}"
        if state != self.reported:
            self.reported = state
            LOGGER.info("%s", message)

    def unreachable_error(self) -> ServerUnreachableError:
        return ServerUnreachableError(
            f"Cannot reach the Triton server at {self.url.with_scheme}: nothing listens there (connections "
            f"refused for {self.unreachable_timeout_s or 0.0:g} s). Check that the server runs and that the URL "
            f"names its {self.url.scheme.upper()} port (defaults: HTTP 8000, gRPC 8001); to wait for a server "
            "that is still starting, raise unreachable_timeout_s (None: wait up to init_timeout_s).",
            refused=True,
        )

    def timeout_error(self) -> PyTritonClientTimeoutError:
        if self.model_name is None and self.server_live:
            return PyTritonClientTimeoutError(
                f"The Triton server at {self.url.with_scheme} is live but was not ready within {self.timeout_s:g} "
                "s. With strict readiness a server is ready once the models it loads are: allow more time, or "
                "check its log for a model that failed to load."
            )
        if not self.server_live:
            return PyTritonClientTimeoutError(
                f"The Triton server at {self.url.with_scheme} was not live within {self.timeout_s:g} s. "
                "Check that it runs and that the URL names its port, or allow more time (init_timeout_s, "
                "timeout_s)."
            )
        if self.index_readable and self.not_listed is not None:
            return PyTritonClientTimeoutError(
                f"Model {self.label} on the server at {self.url.with_scheme} was not ready within "
                f"{self.timeout_s:g} s, and the server's model repository index does not list it (models there: "
                f"{self.not_listed}). Check the model name and version; a model still being bound needs more "
                "time (init_timeout_s, timeout_s): the index never lists models uploaded by a RemoteTriton."
            )
        hint = (
            ""
            if self.index_readable
            else " The client could not read the model repository index (the server restricts it: pass "
            "access_token), so it cannot tell a model still loading from a missing one: check the model name."
        )
        return PyTritonClientTimeoutError(
            f"Model {self.label} on the server at {self.url.with_scheme} was not ready within "
            f"{self.timeout_s:g} s. It may still be loading: allow more time (init_timeout_s, "
            f"timeout_s).{hint}"
        )

    @contextlib.contextmanager
    def probing(self) -> Iterator[None]:
        """One round of probes; a server not (yet) reachable or answering in time ends it early.

        The server counts as not live until this round's probe says so; a round ends refused when its
        connection was refused (nothing listens).
        """
        self.server_live = False
        self.refused = None
        try:
            yield
        except ServerUnreachableError as error:
            if error.refused:
                self.refused = error
        except PyTritonClientTimeoutError:
            pass

    def live(self, answer: bool) -> bool:
        """Record the liveness probe's answer (a server answered); return it."""
        self.answered = True
        self.server_live = answer
        return answer

    @contextlib.contextmanager
    def reading_index(self) -> Iterator[None]:
        """Reading the repository index: a refusal (restricted endpoint) marks it unreadable."""
        try:
            yield
        except _NOT_YET:
            raise
        except PyTritonClientInferenceServerError:
            self.index_readable = False

    def check_index(self, entries: list[dict[str, Any]]) -> None:
        """Raise PyTritonClientModelUnavailableError when the index shows the model failed (or was unloaded).

        A model the index does not list may still come (a model bound later, or uploaded: the index never
        lists those), so the wait goes on, as in PyTriton; the timeout's message then says what is listed.
        """
        mine = [entry for entry in entries if entry.get("name") == self.model_name]
        if self.model_version:
            mine = [entry for entry in mine if str(entry.get("version", "")) in ("", self.model_version)]
        if not mine:
            listed = sorted({f"{entry.get('name')} {entry.get('version', '')}".strip() for entry in entries})
            self.not_listed = ", ".join(listed) or "none"
            return
        self.not_listed = None
        versioned = [entry for entry in mine if str(entry.get("version", "")).isdigit()]
        entry = max(versioned, key=lambda item: int(item["version"])) if versioned else mine[0]
        if entry.get("state") == "UNAVAILABLE":
            reason = entry.get("reason") or "not loaded"
            raise PyTritonClientModelUnavailableError(
                f"Model {self.label} is unavailable on the server at {self.url.with_scheme}: {reason}. "
                "Load it (load_model()) or fix the error reported in the server log."
            )


def _seconds(value: float) -> str:
    """``"0.5 s"``, ``"60 s"``: a time left, to a tenth of a second."""
    return f"{round(max(value, 0.0), 1):g} s"


def wait_for_server_ready(transport: Probe, timeout_s: float, unreachable_timeout_s: float | None = None) -> None:
    """Block until the server is live and ready.

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``.
        ServerUnreachableError: with ``unreachable_timeout_s``, nothing listened for that long.
    """
    wait = _Wait(transport.url, None, None, timeout_s, unreachable_timeout_s)
    while True:
        with wait.probing():
            if wait.live(transport.is_server_live(wait.probe_timeout())) and transport.is_server_ready(
                wait.probe_timeout()
            ):
                return
        time.sleep(wait.next_sleep())


def wait_for_model_ready(
    transport: Probe,
    model_name: str,
    model_version: str | None,
    timeout_s: float,
    unreachable_timeout_s: float | None = None,
) -> None:
    """Block until the server is live and the model ready.

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``.
        PyTritonClientModelUnavailableError: the repository index shows the model missing or failed.
        ServerUnreachableError: with ``unreachable_timeout_s``, nothing listened for that long.
    """
    wait = _Wait(transport.url, model_name, model_version, timeout_s, unreachable_timeout_s)
    while True:
        with wait.probing():
            if wait.live(transport.is_server_live(wait.probe_timeout())):
                if transport.is_model_ready(model_name, model_version, wait.probe_timeout()):
                    return
                with wait.reading_index():
                    wait.check_index(transport.repository_index(wait.probe_timeout()))
        time.sleep(wait.next_sleep())


async def async_wait_for_model_ready(
    transport: AsyncTransport,
    model_name: str,
    model_version: str | None,
    timeout_s: float,
    unreachable_timeout_s: float | None = None,
) -> None:
    """The asyncio version of ``wait_for_model_ready``."""
    wait = _Wait(transport.url, model_name, model_version, timeout_s, unreachable_timeout_s)
    while True:
        with wait.probing():
            if wait.live(await transport.is_server_live(wait.probe_timeout())):
                if await transport.is_model_ready(model_name, model_version, wait.probe_timeout()):
                    return
                with wait.reading_index():
                    wait.check_index(await transport.repository_index(wait.probe_timeout()))
        await asyncio.sleep(wait.next_sleep())
