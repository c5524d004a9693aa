"""Stateful models: a sequence batcher routes each sequence's requests in order, and the callable sees each
request's sequence id and start/end flags (as Request attributes, or per row with @sequence_inputs under @batch).

The flows are those of Triton's sequence client examples: two sequences interleaved, ids as ints and as strings,
over HTTP, gRPC and a gRPC stream, with an accumulator keyed by sequence id."""

from __future__ import annotations

import asyncio
import queue
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient

from tests.integration.conftest import grpc_inputs, http_inputs
from tritonrt.decorators import batch, sequence_inputs
from tritonrt.model_config import DirectStrategy, ModelConfig, OldestStrategy, SequenceBatcher, Tensor

pytestmark = pytest.mark.integration
WORKER_MODES = ("thread", "process")

VALUE = Tensor(name="INPUT", dtype=np.int32, shape=(1,))
TOTAL = Tensor(name="OUTPUT", dtype=np.int32, shape=(1,))
STEP_S = 60
IDLE_US = 10_000_000


class Accumulator:
    """The running sum of each sequence's inputs; a sequence's state is made at its start and dropped at its end.
    ``open`` counts the live sequences (what a leak would grow)."""

    def __init__(self) -> None:
        self.sums: dict[int | str, int] = {}
        self.lock = threading.Lock()

    def __call__(self, requests):
        responses = []
        with self.lock:
            for request in requests:
                key = request.sequence_id
                if request.sequence_start:
                    self.sums[key] = 0
                if key not in self.sums:
                    raise ValueError(f"sequence {key!r} was not started: send sequence_start=True first")
                self.sums[key] += int(request["INPUT"][0, 0])
                total = self.sums.pop(key) if request.sequence_end else self.sums[key]
                responses.append({"OUTPUT": np.array([[total]], dtype=np.int32)})
        return responses


def rows_accumulator():
    sums: dict[int, int] = {}

    @sequence_inputs()
    @batch
    def infer(INPUT, sequence_id, sequence_start, sequence_end):
        out = np.empty_like(INPUT)
        for row in range(INPUT.shape[0]):
            key = int(sequence_id[row, 0])
            if sequence_start[row, 0]:
                sums[key] = 0
            sums[key] += int(INPUT[row, 0])
            out[row, 0] = sums.pop(key) if sequence_end[row, 0] else sums[key]
        return {"OUTPUT": out}

    return infer


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    direct = SequenceBatcher(DirectStrategy(), max_sequence_idle_microseconds=IDLE_US)
    oldest = SequenceBatcher(OldestStrategy(max_candidate_sequences=4), max_sequence_idle_microseconds=IDLE_US)
    server.triton.bind("direct", Accumulator(), [VALUE], [TOTAL], config=ModelConfig(max_batch_size=4, batcher=direct))
    server.triton.bind("oldest", Accumulator(), [VALUE], [TOTAL], config=ModelConfig(max_batch_size=4, batcher=oldest))
    server.triton.bind(
        "rows", rows_accumulator(), [VALUE], [TOTAL], config=ModelConfig(max_batch_size=4, batcher=direct)
    )
    return server


def send(server, protocol: str, model: str, value: int, sequence_id, start: bool = False, end: bool = False) -> int:
    array = np.array([[value]], dtype=np.int32)
    flags = {"sequence_id": sequence_id, "sequence_start": start, "sequence_end": end}
    if protocol == "http":
        result = server.http.infer(model, http_inputs({"INPUT": array}), **flags)
    else:
        result = server.grpc.infer(model, grpc_inputs({"INPUT": array}), client_timeout=STEP_S, **flags)
    return int(result.as_numpy("OUTPUT")[0, 0])


def interleaved(send_one, first, second) -> tuple[list[int], list[int]]:
    """Two sequences, sent turn by turn: 0..4 to the first, 100..104 negated to the second."""
    sums_a, sums_b = [], []
    for step in range(5):
        start, end = step == 0, step == 4
        sums_a.append(send_one(step, first, start, end))
        sums_b.append(send_one(-(100 + step), second, start, end))
    return sums_a, sums_b


EXPECTED = ([0, 1, 3, 6, 10], [-100, -201, -303, -406, -510])


@pytest.mark.parametrize("model", ["direct", "oldest", "rows"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_interleaved_sequences_with_int_ids(server, protocol, model):
    ids = (1000 + len(protocol), 2000 + len(model))
    assert interleaved(lambda v, s, start, end: send(server, protocol, model, v, s, start, end), *ids) == EXPECTED


@pytest.mark.parametrize("model", ["direct", "oldest"])
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_interleaved_sequences_with_string_ids(server, protocol, model):
    ids = (f"user-a-{protocol}", f"user-b-{model}")
    assert interleaved(lambda v, s, start, end: send(server, protocol, model, v, s, start, end), *ids) == EXPECTED


def test_sequences_over_one_grpc_stream(server):
    results: queue.Queue = queue.Queue()
    client = grpcclient.InferenceServerClient(server.grpc_url)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        sent = 0
        for step in range(5):
            for sequence_id, value in ((11, step), ("s-22", -(100 + step))):
                array = np.array([[value]], dtype=np.int32)
                client.async_stream_infer(
                    "oldest", grpc_inputs({"INPUT": array}), request_id=f"{sequence_id}:{step}",
                    sequence_id=sequence_id, sequence_start=step == 0, sequence_end=step == 4,
                )  # fmt: skip
                sent += 1
        answers: dict[str, list[int]] = {"11": [], "s-22": []}
        for _ in range(sent):
            result, error = results.get(timeout=STEP_S)
            assert error is None, error
            key, step = result.get_response().id.split(":")
            answers[key].append((int(step), int(result.as_numpy("OUTPUT")[0, 0])))
    finally:
        client.stop_stream()
        client.close()
    assert [total for _, total in sorted(answers["11"])] == EXPECTED[0]
    assert [total for _, total in sorted(answers["s-22"])] == EXPECTED[1]


async def aio_stream_sums(url: str) -> dict[str, list[int]]:
    """Two interleaved sequences over one asyncio gRPC stream (as simple_grpc_aio_sequence_stream_infer_client)."""

    async def requests():
        for step in range(5):
            for sequence_id, value in ((31, step), ("s-32", -(100 + step))):
                yield {
                    "model_name": "direct",
                    "inputs": grpc_inputs({"INPUT": np.array([[value]], dtype=np.int32)}),
                    "request_id": f"{sequence_id}:{step}",
                    "sequence_id": sequence_id,
                    "sequence_start": step == 0,
                    "sequence_end": step == 4,
                }

    answers: dict[str, list[tuple[int, int]]] = {"31": [], "s-32": []}
    async with aioclient.InferenceServerClient(url) as client:
        async for result, error in client.stream_infer(requests(), stream_timeout=STEP_S):
            assert error is None, error
            key, step = result.get_response().id.split(":")
            answers[key].append((int(step), int(result.as_numpy("OUTPUT")[0, 0])))
            if sum(len(sums) for sums in answers.values()) == 10:
                break
    return {key: [total for _, total in sorted(sums)] for key, sums in answers.items()}


def test_sequences_over_one_asyncio_grpc_stream(server):
    sums = asyncio.run(aio_stream_sums(server.grpc_url))
    assert (sums["31"], sums["s-32"]) == EXPECTED


def test_a_request_outside_a_sequence_is_refused_and_the_model_serves_on(server):
    with pytest.raises(Exception, match="must specify the START flag on the first request of the sequence"):
        send(server, "http", "direct", 5, 4242)
    assert send(server, "http", "direct", 5, 4243, start=True, end=True) == 5


def test_the_config_declares_the_sequence_batcher(server):
    config = server.http.get_model_config("oldest")
    batching = config["sequence_batching"]
    assert batching["max_sequence_idle_microseconds"] == IDLE_US
    assert batching["oldest"]["max_candidate_sequences"] == 4
    assert "dynamic_batching" not in config
    assert "direct" in server.http.get_model_config("direct")["sequence_batching"]
