"""A list of callables gives one model instance each, and they serve requests in parallel."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest

from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration

INSTANCES = 3
# Only a deadlock guard: a barrier that is never completed fails the requests instead of hanging the test.
BARRIER_TIMEOUT_S = 60


class Instance:
    """Waits until every instance is inside a call at the same time, then answers with its index."""

    def __init__(self, index: int, barrier: threading.Barrier):
        self.index = index
        self.barrier = barrier
        self.threads: set[str] = set()

    def __call__(self, requests):
        self.threads.add(threading.current_thread().name)
        self.barrier.wait(BARRIER_TIMEOUT_S)
        return [{"instance": np.array([self.index], dtype=np.int32)} for _ in requests]


@pytest.fixture(scope="module")
def instances():
    barrier = threading.Barrier(INSTANCES)
    return [Instance(index, barrier) for index in range(INSTANCES)]


@pytest.fixture(scope="module")
def server(start_triton, instances):
    server = start_triton()
    server.triton.bind(
        "parallel",
        instances,
        inputs=[Tensor(name="x", dtype=np.float32, shape=(1,))],
        outputs=[Tensor(name="instance", dtype=np.int32, shape=(1,))],
        config=ModelConfig(batching=False),
    )
    return server


def infer_concurrently(server, protocol: str) -> list[int]:
    def one(_) -> int:
        client = server.http_client() if protocol == "http" else server.grpc_client()
        with client:
            x = {"x": np.ones(1, dtype=np.float32)}
            return int(server.infer(protocol, "parallel", x, client=client)["instance"][0])

    with concurrent.futures.ThreadPoolExecutor(INSTANCES) as pool:
        return list(pool.map(one, range(INSTANCES)))


def test_concurrent_requests_run_in_parallel_on_different_callables(server, instances, protocol):
    # Each callable blocks until all three are called at once: this only completes if they run in parallel.
    assert sorted(infer_concurrently(server, protocol)) == list(range(INSTANCES))
    # each callable runs in its own worker thread
    threads = [instance.threads for instance in instances]
    assert all(len(names) == 1 for names in threads)
    assert len(set.union(*threads)) == INSTANCES


def test_after_a_reload_each_instance_still_has_its_own_callable(server, instances):
    """Triton starts the new instances before it stops the old ones; they must find their callables."""
    server.http.load_model("parallel", headers={"triton-access-token": server.token})
    assert server.http.is_model_ready("parallel")
    assert sorted(infer_concurrently(server, "grpc")) == list(range(INSTANCES))
