"""The ``rerun_on_tritonserver_crash`` marker (a hook imported by tests/conftest.py): a test that failed while
tritonserver 2.51 crashed (see the hook's notes) runs once more, after the supervisor brought the server back. The
test's ``server`` fixture must have a ``triton`` attribute (the started Triton), as tests/client's and
tests/integration's have, or the test starts its own server with ``start_triton`` (it starts a new one when it runs
again)."""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Iterator

import pytest
import tritonclient.grpc
from tritonclient.utils import InferenceServerException

from tritonrt.triton import Triton

__all__ = ["pytest_runtest_call"]

# How long the supervisor may take to report that tritonserver died, and to bring it back.
CRASH_NOTICE_S = 15.0  # the guard reports an exit at once; a crashed server that hangs is killed after 10 s
RESTART_WAIT_S = 120.0
_SERVER_LOGGER = "tritonrt.server"


class _CrashRecords(logging.Handler):
    """Collects the supervisor's records that tritonserver died."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.crashes: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "tritonserver exited unexpectedly" in record.getMessage():
            self.crashes.append(record.getMessage())

    def wait(self) -> bool:
        deadline = time.monotonic() + CRASH_NOTICE_S
        while not self.crashes and time.monotonic() < deadline:
            time.sleep(0.1)
        return bool(self.crashes)


def _wait_until_ready(triton: Triton) -> None:
    headers = {"triton-grpc-protocol-triton-access-token": triton.get_access_token()}
    deadline = time.monotonic() + RESTART_WAIT_S
    with tritonclient.grpc.InferenceServerClient(f"127.0.0.1:{triton.config.grpc_port}") as client:
        while time.monotonic() < deadline:
            try:
                if client.is_server_ready(headers=headers, client_timeout=5):
                    return
            except InferenceServerException:
                pass
            time.sleep(0.1)
    raise AssertionError(f"tritonserver did not come back within {RESTART_WAIT_S:g} s after it crashed")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Tests marked ``rerun_on_tritonserver_crash`` run once more when they failed and tritonserver crashed meanwhile.

    tritonserver 2.51 (the one PyTriton 0.7.0 ships) sometimes crashes (SIGSEGV, or SIGABRT on heap corruption) when
    a client cancels a decoupled gRPC stream while responses are still coming: a race in its gRPC frontend
    (``ModelStreamInferHandler::Process``), about once in 200 to 500 cancelled streams under load, with NVIDIA's Python
    backend and plain tritonclient too, so not tritonrt's doing. The supervisor restarts it, but the test under way
    (the one that cancelled, or the next: the crash can come a moment after the stream ended) sees the server gone.

    It also crashes (SIGSEGV) now and then when models are loaded and unloaded in quick succession, as NVIDIA's
    model-control examples do: the thread that deletes an unloaded model dies in
    ``TritonModelInstance::TritonBackendThread::StopBackendThread`` (``RateLimiter::EnqueuePayload`` finds no
    queue for the instance), often in two or three such threads at once; about once in 400 to 1,500
    cycles of load with an override, unload, load on this 2-core machine, whether or not the override names a
    backend (``test_model_control.py``), and with a model of a six-function C++ backend that only answers errors in
    tritonrt's place: Triton's own race, not tritonrt's.

    Only a failure with such a crash (the supervisor's ERROR record) reruns, once, after the server is back; any
    other failure fails as it is.
    """
    if item.get_closest_marker("rerun_on_tritonserver_crash") is None:
        return (yield)
    records = _CrashRecords()
    logger = logging.getLogger(_SERVER_LOGGER)
    logger.addHandler(records)
    try:
        try:
            return (yield)
        except Exception:
            if not records.wait():
                raise
        funcargs = item.funcargs  # type: ignore[attr-defined]
        triton = getattr(funcargs.get("server"), "triton", None)
        assert isinstance(triton, Triton) or "start_triton" in funcargs, (
            "a test marked rerun_on_tritonserver_crash needs a `server` fixture, or starts its own server with "
            "`start_triton`"
        )
        crash = records.crashes[0]
        warnings.warn(f"tritonserver crashed during the test ({crash}): running it once more", stacklevel=1)
        if isinstance(triton, Triton):
            _wait_until_ready(triton)  # a test that starts its own server starts a new one when it runs again
        item.runtest()
        return None
    finally:
        logger.removeHandler(records)
