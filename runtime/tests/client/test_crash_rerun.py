"""The ``rerun_on_tritonserver_crash`` marker (tests/crash_rerun.py): a test that failed because tritonserver
crashed meanwhile runs once more after the restart; a test that failed otherwise is not rerun.

The tests run in file order: the last one checks how often the first two ran.
"""

from __future__ import annotations

import os
import signal

import numpy as np
import psutil
import pytest

from tritonrt.client import DecoupledModelClient

pytestmark = [pytest.mark.integration, pytest.mark.rerun_on_tritonserver_crash]
# How long a crashed tritonserver may take to exit.
EXIT_WAIT_S = 30.0
RUNS: list[str] = []


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("count")


def test_a_failure_from_a_crash_reruns(server):
    RUNS.append("crash")
    with DecoupledModelClient(server.url("grpc"), "count") as client:
        assert len(list(client.infer_sample(np.array([2], np.int32)))) == 2
        if RUNS.count("crash") == 1:
            [triton] = [child for child in psutil.Process().children(recursive=True) if child.name() == "tritonserver"]
            os.kill(triton.pid, signal.SIGSEGV)
            triton.wait(EXIT_WAIT_S)
        assert len(list(client.infer_sample(np.array([2], np.int32)))) == 2  # fails at first: the server is gone


@pytest.mark.xfail(raises=ZeroDivisionError, strict=True, reason="a failure without a crash, not rerun")
def test_a_failure_without_a_crash_does_not_rerun(server):
    RUNS.append("plain")
    1 / 0  # noqa: B018


def test_the_crashed_test_ran_twice_the_other_once():
    assert RUNS == ["crash", "crash", "plain"]
