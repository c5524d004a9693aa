"""FuturesModelClient against a real tritonserver started by tritonrt, over HTTP and gRPC."""

from __future__ import annotations

import concurrent.futures
import threading

import numpy as np
import pytest

from tritonrt.client import FuturesModelClient
from tritonrt.client.exceptions import (
    PyTritonClientClosedError,
    PyTritonClientInferenceServerError,
    PyTritonClientQueueFullError,
    PyTritonClientTimeoutError,
    PyTritonClientValueError,
)
from tritonrt.model_config.triton_model_config import TritonModelConfig

pytestmark = pytest.mark.integration

X = np.array([1.0, 2.0], np.float32)


@pytest.fixture(scope="module")
def server(start_server):
    return start_server("identity", "sleepy", "failing", "reloadable")


def test_infer_sample_and_batch_return_futures(server, protocol):
    with FuturesModelClient(server.url(protocol), "identity") as client:
        sample = client.infer_sample(X)
        batch = client.infer_batch(x=np.stack([X, X * 2]))
        assert isinstance(sample, concurrent.futures.Future)
        np.testing.assert_array_equal(sample.result()["y"], X)
        np.testing.assert_array_equal(batch.result()["y"], np.stack([X, X * 2]))


def test_one_client_used_from_many_threads(server, protocol):
    threads, per_thread = 8, 10
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    with FuturesModelClient(server.url(protocol), "identity", max_workers=4) as client:

        def work(thread_index: int) -> None:
            try:
                futures = {
                    thread_index * per_thread + i: client.infer_sample(np.array([thread_index, i], np.float32))
                    for i in range(per_thread)
                }
                for key, future in futures.items():
                    results[key] = future.result()["y"]
            except BaseException as error:  # reported below, with the thread's result
                errors.append(error)

        workers = [threading.Thread(target=work, args=(index,)) for index in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    assert errors == []
    assert len(results) == threads * per_thread
    for key, value in results.items():
        np.testing.assert_array_equal(value, [key // per_thread, key % per_thread])


def test_model_config_and_wait_for_model_futures(server, protocol):
    with FuturesModelClient(server.url(protocol), "identity") as client:
        assert client.wait_for_model(10).result() is None
        config = client.model_config().result()
        assert isinstance(config, TritonModelConfig)
        assert (config.model_name, config.max_batch_size) == ("identity", 8)


def test_errors_come_out_of_the_future(server, protocol):
    with FuturesModelClient(server.url(protocol), "failing") as client:
        with pytest.raises(PyTritonClientInferenceServerError, match="deliberate failure"):
            client.infer_sample(X).result()
        with pytest.raises(PyTritonClientValueError, match="not both"):
            client.infer_sample(X, x=X).result()


def test_sub_second_timeout(server, protocol, sleep_s):
    with FuturesModelClient(server.url(protocol), "sleepy", inference_timeout_s=0.25) as client:
        future = client.infer_sample(X, parameters={"sleep_s": sleep_s})
        with pytest.raises(PyTritonClientTimeoutError, match="within 0.25 s"):
            future.result()


def test_full_queue_raises_when_non_blocking(server, protocol, sleep_s):
    with FuturesModelClient(
        server.url(protocol), "sleepy", max_workers=1, max_queue_size=1, non_blocking=True
    ) as client:
        running = client.infer_sample(X, parameters={"sleep_s": sleep_s / 3})
        queued = client.infer_sample(X, parameters={"sleep_s": 0})
        with pytest.raises(PyTritonClientQueueFullError, match="max_queue_size"):
            client.infer_sample(X)
        np.testing.assert_array_equal(running.result()["y"], X)
        np.testing.assert_array_equal(queued.result()["y"], X)
        np.testing.assert_array_equal(client.infer_sample(X).result()["y"], X)  # room again


def test_close_without_waiting_lets_pending_requests_finish(server, protocol):
    client = FuturesModelClient(server.url(protocol), "sleepy")
    pending = client.infer_sample(X, parameters={"sleep_s": 0.5})
    client.close(wait=False)
    with pytest.raises(PyTritonClientClosedError):
        client.infer_sample(X)
    np.testing.assert_array_equal(pending.result()["y"], X)


def test_unload_and_load_with_the_access_token(server, protocol):
    with FuturesModelClient(server.url(protocol), "reloadable", access_token=server.token) as client:
        assert client.unload_model().result() is None
        assert client.load_model().result() is None
        np.testing.assert_array_equal(client.infer_sample(X).result()["y"], X)
