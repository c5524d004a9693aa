"""A worker process that dies during a batch fails only the request that caused it, against a real tritonserver:
the batch's requests run again one by one on the replacement worker, the request that crashes it again fails
alone (naming the model, how the worker died, and that it crashed the worker twice), nothing runs a third time,
@no_retry models fail the whole batch as before, and /metrics counts the reruns and the guilty requests.

Each model's callable logs every batch it gets (its values, one line per call) to a file, from the worker process:
the tests read the log to count what ran where."""

from __future__ import annotations

import concurrent.futures
import faulthandler
import json
import os
import pathlib
import re
import signal
import urllib.request

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.decorators import batch, no_retry
from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor
from tritonrt.triton import WorkerMode, WorkerOptions

pytestmark = pytest.mark.integration

BATCH = 4
LOGS: dict[str, pathlib.Path] = {}  # model name -> its calls' log (set before the workers fork)
SERIES = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$")


def crashing(name: str):
    """A doubling callable of model ``name`` that dies on a negative value: -1 by SIGSEGV, -2 by os._exit(7)."""

    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        values = [float(v) for v in x.ravel()]
        with LOGS[name].open("a") as log:
            log.write(json.dumps(values) + "\n")
        if -1.0 in values:
            faulthandler.disable()  # (pytest's, inherited: its dump of every thread is noise here)
            os.kill(os.getpid(), signal.SIGSEGV)
        if -2.0 in values:
            os._exit(7)
        return {"y": x * 2}

    return infer


@pytest.fixture(scope="module")
def server(start_triton, tmp_path_factory):
    server = start_triton()
    # One batch of BATCH requests: the batcher waits for all of them (it never has to wait this long).
    config = ModelConfig(
        max_batch_size=8,
        batcher=DynamicBatcher(max_queue_delay_microseconds=20_000_000, preferred_batch_size=[BATCH]),
    )
    tensors = ([Tensor(name="x", dtype=np.float32, shape=(1,))], [Tensor(name="y", dtype=np.float32, shape=(1,))])
    process = WorkerOptions(mode=WorkerMode.PROCESS)
    for name, marked in (("crashy", False), ("once", True)):
        LOGS[name] = tmp_path_factory.mktemp(name) / "calls.jsonl"
        infer = no_retry(crashing(name)) if marked else crashing(name)
        server.triton.bind(name, infer, *tensors, config=config, workers=process)
    return server


def calls(model: str) -> list[list[float]]:
    path = LOGS[model]
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def send_together(server, protocol: str, model: str, values: list[float]) -> list[float | str]:
    """Send one request per value at once (each from its own client); each one's answer or error message."""

    def one(value: float) -> float | str:
        client = server.http_client() if protocol == "http" else server.grpc_client()
        try:
            return float(
                server.infer(protocol, model, {"x": np.array([[value]], np.float32)}, client=client)["y"][0, 0]
            )
        except InferenceServerException as error:
            return error.message()
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(len(values)) as pool:
        return list(pool.map(one, values))


def metric(server, name: str, model: str) -> float:
    with urllib.request.urlopen(f"http://{server.metrics_url}/metrics", timeout=10) as response:
        text = response.read().decode()
    found = [
        float(match.group(3))
        for match in map(SERIES.match, text.splitlines())
        if match and match.group(1) == name and f'model="{model}"' in match.group(2)
    ]
    assert len(found) == 1, f"{name} for {model}: {found}"
    return found[0]


@pytest.mark.parametrize(
    "protocol, bad, how", [("http", -1.0, "was killed by SIGSEGV"), ("grpc", -2.0, "exited with code 7")]
)
def test_only_the_request_that_crashes_the_worker_again_fails(server, protocol, bad, how):
    reruns = metric(server, "tritonrt_crash_reruns_total", "crashy")
    guilty = metric(server, "tritonrt_crash_guilty_requests_total", "crashy")
    LOGS["crashy"].unlink(missing_ok=True)
    values = [1.0, 2.0, bad, 3.0]
    outcomes = send_together(server, protocol, "crashy", values)
    assert outcomes[0] == 2.0 and outcomes[1] == 4.0 and outcomes[3] == 6.0, outcomes
    error = outcomes[2]
    assert isinstance(error, str)
    assert "model 'crashy'" in error and how in error and "crashed the worker process twice" in error, error
    ran = calls("crashy")
    assert sorted(ran[0]) == sorted(values), f"the requests did not form one batch: {ran}"
    assert sorted(ran[1:]) == sorted([[v] for v in values]), f"each request ran once more, alone: {ran}"
    assert ran.count([bad]) == 1, "the guilty request ran twice in all: once in the batch, once alone"
    assert metric(server, "tritonrt_crash_reruns_total", "crashy") - reruns == BATCH
    assert metric(server, "tritonrt_crash_guilty_requests_total", "crashy") - guilty == 1
    # The model serves on after its worker died twice.
    assert send_together(server, protocol, "crashy", [5.0, 6.0, 7.0, 8.0]) == [10.0, 12.0, 14.0, 16.0]


def test_a_no_retry_model_fails_the_whole_batch_and_runs_nothing_again(server, protocol):
    LOGS["once"].unlink(missing_ok=True)
    outcomes = send_together(server, protocol, "once", [1.0, 2.0, -1.0, 3.0])
    for outcome in outcomes:
        assert isinstance(outcome, str) and "model 'once'" in outcome and "SIGSEGV" in outcome, outcomes
        assert "twice" not in outcome
    assert len(calls("once")) == 1, f"nothing ran again: {calls('once')}"
    assert metric(server, "tritonrt_crash_reruns_total", "once") == 0
    assert send_together(server, protocol, "once", [1.0, 2.0, 3.0, 4.0]) == [2.0, 4.0, 6.0, 8.0]
