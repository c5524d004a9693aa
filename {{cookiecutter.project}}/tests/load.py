"""A bounded closed-loop load for the k8s tests: ``users`` threads, each with its own client, predicting.

Every request is recorded (when it started and ended, and what went wrong if it failed), so a test can ask
what happened to the requests in flight at a given moment.

Example::

    with Load("http://127.0.0.1:8000", users=8) as load:
        time.sleep(5)
    load.failures()  # [] when every request was answered with the expected outputs
"""

from __future__ import annotations

import dataclasses
import threading
import time

from conftest import assert_outputs_close, expected_outputs, outputs_of

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Client

__all__ = ["Load", "Request"]


@dataclasses.dataclass(frozen=True)
class Request:
    """One request: monotonic start and end, and the error (None when the outputs were right)."""

    started: float
    ended: float
    error: str | None


class Load:
    """``users`` threads sending the example request back to back until ``stop()`` (or the ``with`` ends)."""

    def __init__(self, url: str, users: int, timeout_s: float = 120.0) -> None:
        self.requests: list[Request] = []
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._clients = [Client(url, inference_timeout_s=timeout_s) for _ in range(users)]
        self._threads = [
            threading.Thread(target=self._run, args=(client,), daemon=True) for client in self._clients
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def halt(self) -> None:
        """Send no new request (the ones in flight go on)."""
        self._stopping.set()

    def stop(self) -> None:
        """Send no new request; wait for the ones in flight; close the clients."""
        self.halt()
        for thread in self._threads:
            thread.join()
        for client in self._clients:
            client.close()

    def failures(self) -> list[Request]:
        with self._lock:
            return [request for request in self.requests if request.error is not None]

    def _run(self, client: Client) -> None:
        inputs, expected = spec.example_inputs(), expected_outputs()
        while not self._stopping.is_set():
            started, error = time.monotonic(), None
            try:
                assert_outputs_close(outputs_of(client.predict(**inputs)), expected)
            except Exception as failure:  # wrong outputs included: recorded, not raised in this thread
                error = repr(failure)[:1000]
            with self._lock:
                self.requests.append(Request(started, time.monotonic(), error))
