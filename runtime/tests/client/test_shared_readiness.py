"""Concurrent callers of one client share one readiness wait: all fail by the one deadline, not one after another.

Against a real closed port (no server) and a real tritonserver whose model is not there, over HTTP and gRPC,
through ModelClient, AsyncioModelClient and FuturesModelClient. Before the shared wait, 8 callers with
``init_timeout_s=2`` failed at 2, 4, ... 16 s; the bound asserted here is twice the deadline.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

from tritonrt.client import AsyncioModelClient, FuturesModelClient, ModelClient
from tritonrt.client.exceptions import PyTritonClientModelUnavailableError, PyTritonClientTimeoutError

pytestmark = pytest.mark.integration

CALLERS = 8
DEADLINE_S = 2.0
X = np.array([1.0, 2.0], np.float32)


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("identity", "reloadable")


@pytest.fixture(params=["closed port", "model not ready"])
def target(request, protocol, closed_port) -> tuple[str, str, str | None]:
    """(url, model name, access token): nothing listening, or a real server that does not (yet) have the model."""
    if request.param == "closed port":
        return f"{protocol}://127.0.0.1:{closed_port}", "identity", None
    server = request.getfixturevalue("server")
    return server.url(protocol), "absent", server.token


def _errors_of_threads(call: Callable[[], object]) -> tuple[list[BaseException | None], float]:
    """Run ``call`` in CALLERS threads started together: what each raised (None: it returned), and the seconds
    until the last one finished."""
    errors: list[BaseException | None] = [None] * CALLERS
    start = threading.Barrier(CALLERS + 1)

    def one(index: int) -> None:
        start.wait()
        try:
            call()
        except BaseException as error:
            errors[index] = error

    threads = [threading.Thread(target=one, args=(index,)) for index in range(CALLERS)]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.monotonic()
    for thread in threads:
        thread.join()
    return errors, time.monotonic() - began


def _assert_all_timed_out(errors: list[BaseException | None], elapsed_s: float) -> None:
    assert all(isinstance(error, PyTritonClientTimeoutError) for error in errors), errors
    assert len({str(error) for error in errors}) == 1, "every caller gets the one wait's message"
    assert elapsed_s < 2 * DEADLINE_S, f"{CALLERS} callers took {elapsed_s:.1f} s with a {DEADLINE_S:g} s deadline"


def test_model_client_callers_fail_by_one_deadline(target):
    url, model, token = target
    with ModelClient(url, model, init_timeout_s=DEADLINE_S, access_token=token) as client:
        errors, elapsed_s = _errors_of_threads(lambda: client.infer_batch(X[None]))
    _assert_all_timed_out(errors, elapsed_s)


def test_futures_client_callers_fail_by_one_deadline(target):
    url, model, token = target
    with FuturesModelClient(url, model, init_timeout_s=DEADLINE_S, access_token=token, max_workers=CALLERS) as client:
        began = time.monotonic()
        futures = [client.infer_batch(X[None]) for _ in range(CALLERS)]
        errors = [future.exception() for future in futures]
        elapsed_s = time.monotonic() - began
    _assert_all_timed_out(errors, elapsed_s)


async def test_asyncio_client_callers_fail_by_one_deadline(target):
    url, model, token = target
    async with AsyncioModelClient(url, model, init_timeout_s=DEADLINE_S, access_token=token) as client:
        began = time.monotonic()
        outcomes = await asyncio.gather(*(client.infer_batch(X[None]) for _ in range(CALLERS)), return_exceptions=True)
        elapsed_s = time.monotonic() - began
    _assert_all_timed_out(list(outcomes), elapsed_s)


async def test_a_cancelled_asyncio_caller_leaves_the_others_waiting(server, protocol):
    async with AsyncioModelClient(
        server.url(protocol), "absent", init_timeout_s=DEADLINE_S, access_token=server.token
    ) as client:
        first = asyncio.ensure_future(client.infer_batch(X[None]))
        second = asyncio.ensure_future(client.infer_batch(X[None]))
        await asyncio.sleep(0.2)
        first.cancel()
        with pytest.raises(PyTritonClientTimeoutError, match="was not ready within"):
            await second
        assert first.cancelled()


def test_a_wait_after_a_failed_one_starts_afresh(server, protocol):
    """The failure is shared only with the callers of that wait: once the model is there, the next call works."""
    url, token = server.url(protocol), server.token
    with ModelClient(url, "reloadable", init_timeout_s=DEADLINE_S, access_token=token) as client:
        client.unload_model()
        try:
            errors, _ = _errors_of_threads(lambda: client.infer_batch(X[None]))
            assert all(isinstance(error, PyTritonClientModelUnavailableError) for error in errors), errors
        finally:
            client.load_model()
        np.testing.assert_array_equal(client.infer_batch(X[None])["y"], X[None])


def test_callers_after_readiness_all_succeed(server, protocol):
    with ModelClient(server.url(protocol), "identity", init_timeout_s=30) as client:
        errors, _ = _errors_of_threads(lambda: client.infer_batch(X[None]))
    assert errors == [None] * CALLERS
