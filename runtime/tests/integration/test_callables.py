"""Inference callables: async ones, ones that raise, strict output checks, unrecoverable errors."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.exceptions import PyTritonUnrecoverableError
from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration
WORKER_MODES = ("thread", "process")  # every test runs with worker threads and with worker processes

F32 = np.float32
X = Tensor(name="x", dtype=F32, shape=(-1,))
Y = Tensor(name="y", dtype=F32, shape=(-1,))
SERVE_JOIN_S = 60


async def async_plain(requests):
    await asyncio.sleep(0.01)
    return [{"y": request["x"] + 1} for request in requests]


@batch
async def async_batched(x):
    await asyncio.sleep(0)
    return {"y": x * 10}


@batch
def fails_on_negative(x):
    if (x < 0).any():
        raise ValueError(f"negative input {x.min()} is not allowed")
    return {"y": x}


def wrong_output(requests):
    """Breaks the output contract in the way the request's first value asks for."""
    responses = []
    for request in requests:
        x = request["x"]
        mode = int(x.flat[0])
        if mode == 0:
            responses.append({"y": x})
        elif mode == 1:
            responses.append({"y": x.astype(np.int64)})
        elif mode == 2:
            responses.append({"y": x.reshape(x.shape + (1,))})
        else:
            responses.append({"surprise": x})
    return responses


def returns_a_dict(requests):
    return {"y": requests[0]["x"]}


def returns_a_generator(requests):
    yield [{"y": request["x"]} for request in requests]


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    bind = server.triton.bind
    bind("async_plain", async_plain, [X], [Y])
    bind("async_batched", async_batched, [X], [Y])
    bind("fails_on_negative", fails_on_negative, [X], [Y])
    bind("strict", wrong_output, [X], [Y], strict=True)
    bind("lenient", wrong_output, [X], [Y])
    bind("returns_a_dict", returns_a_dict, [X], [Y], config=ModelConfig(batching=False))
    bind("returns_a_generator", returns_a_generator, [X], [Y])
    return server


def test_async_callable(server, protocol):
    x = np.array([[1.0, 2.0]], dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "async_plain", {"x": x})["y"], x + 1)


def test_async_callable_under_batch(server, protocol):
    x = np.array([[1.0], [2.0]], dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "async_batched", {"x": x})["y"], x * 10)


def test_exception_fails_only_that_request(server, protocol):
    message = server.infer_error(protocol, "fails_on_negative", {"x": np.array([[-3.0]], dtype=F32)})
    assert "ValueError" in message and "negative input -3.0 is not allowed" in message
    x = np.array([[3.0]], dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "fails_on_negative", {"x": x})["y"], x)
    assert server.triton.is_alive()


def test_strict_accepts_matching_outputs(server, protocol):
    x = np.zeros((1, 2), dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "strict", {"x": x})["y"], x)


@pytest.mark.parametrize(
    "mode, expected, got",
    [(1, "float32", "int64"), (2, "(-1,)", "(2, 1)"), (3, "y", "surprise")],
    ids=["dtype", "shape", "name"],
)
def test_strict_names_model_output_expected_and_got(server, protocol, mode, expected, got):
    x = np.full((1, 2), mode, dtype=F32)
    message = server.infer_error(protocol, "strict", {"x": x})
    assert "'strict'" in message
    assert expected in message and got in message
    if mode != 3:
        assert "'y'" in message
    # the server goes on serving
    np.testing.assert_array_equal(server.infer(protocol, "strict", {"x": np.zeros((1, 2), F32)})["y"], 0)


def test_without_strict_a_wrong_dtype_is_passed_on(server, protocol):
    x = np.full((1, 2), 1, dtype=F32)
    result = server.infer(protocol, "lenient", {"x": x})
    assert result["y"].tolist() == [[1, 1]]


def test_returning_a_dict_instead_of_a_list_is_explained(server, protocol):
    message = server.infer_error(protocol, "returns_a_dict", {"x": np.ones(2, dtype=F32)})
    assert "'returns_a_dict'" in message and "list" in message


def test_returning_a_generator_from_a_non_decoupled_model_is_explained(server, protocol):
    message = server.infer_error(protocol, "returns_a_generator", {"x": np.ones((1, 2), dtype=F32)})
    assert "generator" in message and "decoupled" in message


def test_unrecoverable_error_stops_serve(new_triton):
    @batch
    def give_up(x):
        raise PyTritonUnrecoverableError("the GPU fell off the bus")

    server = new_triton()
    server.triton.bind("give_up", give_up, [X], [Y])
    server.triton.run()
    serving = threading.Thread(target=server.triton.serve, kwargs={"monitoring_period_sec": 0.5}, daemon=True)
    serving.start()
    message = server.infer_error("http", "give_up", {"x": np.ones((1, 1), dtype=F32)})
    assert "the GPU fell off the bus" in message
    server.close_clients()
    serving.join(SERVE_JOIN_S)
    assert not serving.is_alive(), "serve() did not return after PyTritonUnrecoverableError"
    assert "the GPU fell off the bus" in server.triton.failure
    assert not server.triton.is_alive()
