"""The ``rerun_on_tritonserver_crash`` marker (tests/crash_rerun.py) for a test that starts its own server with
``start_triton``: it runs once more, and starts a new server when it does. The tests run in file order: the last
one checks that the first ran twice, on two servers."""

from __future__ import annotations

import os
import signal

import numpy as np
import psutil
import pytest

from tritonrt.model_config import ModelConfig, Tensor

pytestmark = [pytest.mark.integration, pytest.mark.rerun_on_tritonserver_crash]
EXIT_WAIT_S = 30.0  # how long a crashed tritonserver may take to exit
X = Tensor(name="x", dtype=np.float32, shape=(-1,))
STARTED: list[object] = []


def echo(requests):
    return [{"x": request["x"]} for request in requests]


def test_a_test_that_starts_its_own_server_reruns_on_a_new_one(start_triton):
    server = start_triton()
    server.triton.bind("echo", echo, [X], [X], config=ModelConfig(max_batch_size=8))
    STARTED.append(server.triton)
    data = np.ones((1, 3), dtype=np.float32)
    if len(STARTED) == 1:
        [triton] = [child for child in psutil.Process().children(recursive=True) if child.name() == "tritonserver"]
        os.kill(triton.pid, signal.SIGSEGV)
        triton.wait(EXIT_WAIT_S)
    assert server.infer("http", "echo", {"x": data})["x"].tolist() == data.tolist()  # fails at first: it is gone


def test_the_first_test_ran_twice_on_two_servers():
    assert len(STARTED) == 2 and STARTED[0] is not STARTED[1]
