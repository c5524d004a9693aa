"""Request.is_cancelled() reflects Triton's cancellation: a callable that polls it stops when its gRPC client
cancels the call (also under @batch, asking @cancellation's function); a streaming callable stops generating when
its client cancels the stream."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.integration.conftest import grpc_inputs
from tritonrt.decorators import batch, cancellation
from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration
WORKER_MODES = ("thread", "process")

TAG = Tensor(name="tag", dtype=np.int32, shape=(1,))
OUT = Tensor(name="out", dtype=np.int32, shape=(1,))
GIVE_UP_S = 30.0
WAIT_S = 30.0


def outcome_path(directory: Path, tag: int) -> Path:
    return directory / f"{tag}.json"


def write_outcome(directory: Path, tag: int, seen: dict) -> None:
    """Written whole or not at all: the test reads the file as soon as it exists."""
    partial = directory / f"{tag}.json.partial"
    partial.write_text(json.dumps(seen))
    partial.replace(outcome_path(directory, tag))


def long_call(directory: Path):
    """Works in small steps until its request is cancelled (or GIVE_UP_S passes); writes what it saw."""

    def infer(requests):
        (request,) = requests
        began, steps = time.monotonic(), 0
        while not request.is_cancelled() and time.monotonic() - began < GIVE_UP_S:
            time.sleep(0.01)
            steps += 1
        seen = {"cancelled": request.is_cancelled(), "seconds": time.monotonic() - began}
        write_outcome(directory, int(request["tag"][0]), seen)
        return [{"out": request["tag"]}]

    return infer


def batched_long_call(directory: Path):
    """The same under @batch, asking @cancellation's function about its whole batch."""

    @cancellation()
    @batch
    def infer(tag, is_cancelled):
        began = time.monotonic()
        while not is_cancelled() and time.monotonic() - began < GIVE_UP_S:
            time.sleep(0.01)
        seen = {"cancelled": is_cancelled(), "seconds": time.monotonic() - began}
        write_outcome(directory, int(tag[0, 0]), seen)
        return {"out": tag}

    return infer


def generator(directory: Path):
    """Streams up to 10,000 responses, 10 ms apart, until the client cancels; writes how many it made."""

    def infer(requests):
        (request,) = requests
        made = 0
        try:
            while made < 10_000 and not request.is_cancelled():
                made += 1
                yield [{"out": np.array([made], dtype=np.int32)}]
                time.sleep(0.01)
        finally:  # runs also when tritonrt closes the generator because its only request was cancelled
            result = {"made": made, "cancelled": request.is_cancelled()}
            write_outcome(directory, int(request["tag"][0]), result)

    return infer


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("outcomes")


@pytest.fixture(scope="module")
def server(start_triton, outcomes):
    server = start_triton()
    server.triton.bind("long", long_call(outcomes), [TAG], [OUT], config=ModelConfig(batching=False))
    server.triton.bind("batched_long", batched_long_call(outcomes), [TAG], [OUT], config=ModelConfig(max_batch_size=4))
    stream = ModelConfig(batching=False, decoupled=True)
    server.triton.bind("generator", generator(outcomes), [TAG], [OUT], config=stream)
    return server


def wait_for(path: Path) -> dict:
    deadline = time.monotonic() + WAIT_S
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), f"the callable wrote no outcome within {WAIT_S} s"
    return json.loads(path.read_text())


@pytest.mark.parametrize(("model", "tag"), [("long", 101), ("batched_long", 102)])
def test_a_cancelled_grpc_call_is_seen_by_the_callable(server, outcomes, model, tag):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        shape = (1,) if model == "long" else (1, 1)
        inputs = grpc_inputs({"tag": np.full(shape, tag, dtype=np.int32)})
        call = client.async_infer(model, inputs, callback=lambda result, error: None)
        time.sleep(0.5)  # the callable runs by now
        call.cancel()
        seen = wait_for(outcome_path(outcomes, tag))
    finally:
        client.close()
    assert seen["cancelled"] and seen["seconds"] < GIVE_UP_S / 2, seen


@pytest.mark.rerun_on_tritonserver_crash  # tritonserver 2.51's gRPC frontend (see tests/crash_rerun.py)
def test_a_cancelled_stream_stops_the_generator(server, outcomes):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    received: list[int] = []
    client.start_stream(callback=lambda result, error: received.append(0 if error else 1))
    try:
        client.async_stream_infer("generator", grpc_inputs({"tag": np.array([200], dtype=np.int32)}))
        deadline = time.monotonic() + WAIT_S
        while len(received) < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        client.stop_stream(cancel_requests=True)
        seen = wait_for(outcome_path(outcomes, 200))
    finally:
        client.close()
    assert len(received) >= 5
    assert seen["made"] < 1_000, seen  # stopped within a few responses of the cancel, not at 10,000
