"""A bad row in a dynamic batch fails only its own request, under concurrency, over HTTP and gRPC: with 10% bad
inputs from several client threads, every good request succeeds, every bad one gets its own error text and
none gets another's. With @no_retry the callable runs once per request and a failed batch fails as a whole,
with a message that names no request's data."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.decorators import batch, no_retry
from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor

pytestmark = pytest.mark.integration

X = Tensor(name="x", dtype=np.float32, shape=(1,))
Y = Tensor(name="y", dtype=np.float32, shape=(1,))
CLIENTS = 8  # threads per protocol
REQUESTS = 40  # per thread
BAD_EVERY = 10  # one request in ten is bad, at a different place in each client's sequence
# Requests wait up to 20 ms for others, so batches mix clients (the test checks that they did).
CONFIG = ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=20_000))


class Model:
    """@batch callable: doubles ``x``; raises for a batch with bad rows (negative ids), naming them all, as
    a model's validation would. Records every batch's ids."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []
        self._lock = threading.Lock()

    def __call__(self, x: np.ndarray) -> dict[str, np.ndarray]:
        ids = [int(value) for value in x[:, 0]]
        with self._lock:
            self.batches.append(ids)
        bad = [-i for i in ids if i < 0]
        if bad:
            raise ValueError(f"bad request id(s) {bad}")
        return {"y": x * 2}

    def mixed_batches(self) -> int:
        """Batches that held a bad row and a good one."""
        return sum(1 for ids in self.batches if any(i < 0 for i in ids) and any(i > 0 for i in ids))


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    isolating, once = Model(), Model()
    server.triton.bind("isolating", batch(isolating), [X], [Y], config=CONFIG)
    server.triton.bind("once", no_retry(batch(once)), [X], [Y], config=CONFIG)
    return server, isolating, once


def request_id(protocol: str, client: int, number: int) -> int:
    """Seven digits (exact in float32, and no other number in a message contains one)."""
    return (1 if protocol == "http" else 2) * 1_000_000 + client * 1000 + number + 1


def is_bad(request: int) -> bool:
    """Whether ``request`` (an id from :func:`request_id`) is a bad one: clients meet their bad requests at
    different times, so that batches mix bad requests with good ones."""
    protocol, rest = divmod(request, 1_000_000)
    client, number = divmod(rest, 1000)
    return (number + 3 * client + 5 * protocol) % BAD_EVERY == 0


def send_all(server, model: str) -> dict[int, str | float]:
    """Every client thread sends REQUESTS requests (a bad one's value is its id negated); returns request id ->
    its output or its error text."""

    def client(protocol: str, index: int) -> dict[int, str | float]:
        connection = server.http_client() if protocol == "http" else server.grpc_client()
        outcomes: dict[int, str | float] = {}
        try:
            for number in range(REQUESTS):
                request = request_id(protocol, index, number)
                value = -request if is_bad(request) else request
                try:
                    y = server.infer(protocol, model, {"x": np.array([[value]], np.float32)}, client=connection)
                    outcomes[request] = float(y["y"][0, 0])
                except InferenceServerException as error:
                    outcomes[request] = error.message()
        finally:
            connection.close()
        return outcomes

    jobs = [(protocol, index) for protocol in ("http", "grpc") for index in range(CLIENTS)]
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        results = list(pool.map(lambda job: client(*job), jobs))
    return {request: outcome for result in results for request, outcome in result.items()}


def test_only_bad_requests_fail_each_with_its_own_error(server):
    server, model, _ = server
    outcomes = send_all(server, "isolating")
    assert len(outcomes) == 2 * CLIENTS * REQUESTS
    good = {request: outcome for request, outcome in outcomes.items() if not is_bad(request)}
    bad = {request: outcome for request, outcome in outcomes.items() if is_bad(request)}
    assert len(bad) == len(outcomes) // BAD_EVERY
    assert {request: outcome for request, outcome in good.items() if outcome != 2.0 * request} == {}
    for request, outcome in bad.items():
        assert outcome == f"ValueError: bad request id(s) [{request}]", (request, outcome)
    assert model.mixed_batches() > 0, "no batch mixed bad and good requests: the test proved nothing"


def test_no_retry_runs_each_request_once_and_leaks_no_data(server):
    server, _, model = server
    outcomes = send_all(server, "once")
    ran = sorted(abs(i) for ids in model.batches for i in ids)
    assert ran == sorted(outcomes), "a request ran more than once, or not at all"
    assert model.mixed_batches() > 0, "no batch mixed bad and good requests: the test proved nothing"
    failed_batches = [ids for ids in model.batches if any(i < 0 for i in ids)]
    for ids in failed_batches:
        for request in map(abs, ids):
            message = outcomes[request]
            assert isinstance(message, str), (request, message)
            if len(ids) == 1:
                assert message == f"ValueError: bad request id(s) [{request}]"
            else:
                assert "marked @no_retry" in message and str(request) not in message
                assert not any(str(abs(other)) in message for other in ids), message
    for ids in model.batches:
        if not any(i < 0 for i in ids):
            assert all(outcomes[i] == 2.0 * i for i in ids)
