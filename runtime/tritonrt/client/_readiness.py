"""Waiting until the server is live and a model is ready, for sync and asyncio transports.

A model that is not ready yet may be loading, or missing, or broken. The model repository index tells
these apart; where the server restricts it (TritonSecurityConfig) the client reads it only with the
access token, and otherwise waits until the timeout.

Example::

    wait_for_server_ready(transport, timeout_s=30.0)               # returns, or raises
    wait_for_model_ready(transport, "add", None, timeout_s=30.0)
    await async_wait_for_model_ready(async_transport, "add", None, timeout_s=30.0)
"""

from __future__ import annotations

import asyncio
import contextlib
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

    def __init__(self, url: TritonUrl, model_name: str | None, model_version: str | None, timeout_s: float):
        self.url = url
        self.model_name = model_name
        self.model_version = model_version
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.interval = _FIRST_INTERVAL_S
        self.server_live = False
        self.index_readable = True
        self.not_listed: str | None = None  # the models the index lists, when it does not list this one

    @property
    def label(self) -> str:
        return f"{self.model_name!r}" + (f" version {self.model_version}" if self.model_version else "")

    def probe_timeout(self) -> float:
        return min(max(self.deadline - time.monotonic(), 0.01), _MAX_PROBE_TIMEOUT_S)

    def next_sleep(self) -> float:
        """Seconds to sleep before the next probe; raises the timeout error once the deadline passed."""
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self.timeout_error()
        sleep, self.interval = min(self.interval, remaining), min(self.interval * 2, _MAX_INTERVAL_S)
        return sleep

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

        The server counts as not live until this round's probe says so.
        """
        self.server_live = False
        with contextlib.suppress(*_NOT_YET):
            yield

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


def wait_for_server_ready(transport: Probe, timeout_s: float) -> None:
    """Block until the server is live and ready.

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``.
    """
    wait = _Wait(transport.url, None, None, timeout_s)
    while True:
        with wait.probing():
            wait.server_live = transport.is_server_live(wait.probe_timeout())
            if wait.server_live and transport.is_server_ready(wait.probe_timeout()):
                return
        time.sleep(wait.next_sleep())


def wait_for_model_ready(transport: Probe, model_name: str, model_version: str | None, timeout_s: float) -> None:
    """Block until the server is live and the model ready.

    Raises:
        PyTritonClientTimeoutError: not ready within ``timeout_s``.
        PyTritonClientModelUnavailableError: the repository index shows the model missing or failed.
    """
    wait = _Wait(transport.url, model_name, model_version, timeout_s)
    while True:
        with wait.probing():
            wait.server_live = transport.is_server_live(wait.probe_timeout())
            if wait.server_live:
                if transport.is_model_ready(model_name, model_version, wait.probe_timeout()):
                    return
                with wait.reading_index():
                    wait.check_index(transport.repository_index(wait.probe_timeout()))
        time.sleep(wait.next_sleep())


async def async_wait_for_model_ready(
    transport: AsyncTransport, model_name: str, model_version: str | None, timeout_s: float
) -> None:
    """The asyncio version of ``wait_for_model_ready``."""
    wait = _Wait(transport.url, model_name, model_version, timeout_s)
    while True:
        with wait.probing():
            wait.server_live = await transport.is_server_live(wait.probe_timeout())
            if wait.server_live:
                if await transport.is_model_ready(model_name, model_version, wait.probe_timeout()):
                    return
                with wait.reading_index():
                    wait.check_index(await transport.repository_index(wait.probe_timeout()))
        await asyncio.sleep(wait.next_sleep())
