"""Every decorator of tritonrt.decorators, through a real tritonserver, over HTTP and gRPC."""

from __future__ import annotations

import concurrent.futures

import numpy as np
import pytest

from tritonrt.decorators import (
    ConstantPadder,
    batch,
    fill_optionals,
    first_value,
    group_by_keys,
    group_by_values,
    pad_batch,
    sample,
    triton_context,
)
from tritonrt.model_config import DynamicBatcher, ModelConfig, Tensor

pytestmark = pytest.mark.integration
WORKER_MODES = ("thread", "process")  # every test runs with worker threads and with worker processes

F32 = np.float32


@batch
def double(x):
    return {"y": x * 2}


class Scaler:
    """@batch on a method: the bound method is the inference callable."""

    def __init__(self, factor: float):
        self.factor = factor

    @batch
    def infer(self, x):
        return {"y": x * self.factor}


@sample
def text_length(text):
    return {"length": np.array([len(text[0])], dtype=np.int64)}


@group_by_keys
@batch
def add_optional(x, bias=None):
    offset = 0 if bias is None else bias
    return {"y": x + offset, "has_bias": np.full((x.shape[0], 1), bias is not None)}


@batch
@group_by_values("width", pad_fn=ConstantPadder(0))
def widen(x, width):
    n = int(width[0][0])  # one value per call: rows are grouped by width
    return {"y": np.repeat(x, n, axis=1), "calls": np.full((x.shape[0], 1), n, dtype=np.int32)}


@fill_optionals(weight=np.array([2.0], dtype=F32))
@batch
def weighted(x, weight):
    return {"y": x * weight}


@batch
@first_value("temperature")
def temperature_scaled(x, temperature):
    return {
        "y": x * temperature,
        "was_scalar": np.full((x.shape[0], 1), np.ndim(temperature) == 0),
    }


@batch
@pad_batch
def padded(x):
    return {"y": x + 1, "seen_batch": np.full((x.shape[0], 1), x.shape[0], dtype=np.int32)}


@triton_context
@batch
def context_aware(x, triton_context):
    config = triton_context.model_configs[context_aware]
    return {"max_batch_size": np.full((x.shape[0], 1), config.max_batch_size, dtype=np.int32)}


def vec(name: str, dtype=F32, shape=(-1,), optional=False) -> Tensor:
    return Tensor(name=name, dtype=dtype, shape=shape, optional=optional)


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    bind = server.triton.bind
    bind("double", double, inputs=[vec("x")], outputs=[vec("y")], config=ModelConfig(max_batch_size=16))
    bind("scaler", Scaler(3.0).infer, inputs=[vec("x")], outputs=[vec("y")])
    bind(
        "text_length",
        text_length,
        inputs=[vec("text", np.bytes_, (1,))],
        outputs=[vec("length", np.int64, (1,))],
        config=ModelConfig(batching=False),
    )
    bind(
        "add_optional",
        add_optional,
        inputs=[vec("x"), vec("bias", optional=True)],
        outputs=[vec("y"), vec("has_bias", np.bool_, (1,))],
        config=ModelConfig(max_batch_size=16, batcher=DynamicBatcher(max_queue_delay_microseconds=20_000)),
    )
    bind(
        "widen",
        widen,
        inputs=[vec("x", shape=(1,)), vec("width", np.int32, (1,))],
        outputs=[vec("y"), vec("calls", np.int32, (1,))],
        config=ModelConfig(max_batch_size=16),
    )
    bind(
        "weighted",
        weighted,
        inputs=[vec("x"), vec("weight", shape=(1,), optional=True)],
        outputs=[vec("y")],
    )
    bind(
        "temperature_scaled",
        temperature_scaled,
        inputs=[vec("x"), vec("temperature", shape=(1,))],
        outputs=[vec("y"), vec("was_scalar", np.bool_, (1,))],
    )
    bind(
        "padded",
        padded,
        inputs=[vec("x")],
        outputs=[vec("y"), vec("seen_batch", np.int32, (1,))],
        config=ModelConfig(max_batch_size=8, batcher=DynamicBatcher(preferred_batch_size=[4])),
    )
    bind(
        "context_aware",
        context_aware,
        inputs=[vec("x")],
        outputs=[vec("max_batch_size", np.int32, (1,))],
        config=ModelConfig(max_batch_size=7),
    )
    return server


def test_batch(server, protocol):
    x = np.arange(6, dtype=F32).reshape(2, 3)
    result = server.infer(protocol, "double", {"x": x})
    np.testing.assert_array_equal(result["y"], x * 2)
    assert result["y"].dtype == F32


def test_batch_splits_concurrent_requests_back(server):
    """Requests that may share one batch each get back exactly their own rows."""

    def one(index: int) -> bool:
        x = np.full((index % 3 + 1, 2), index, dtype=F32)
        with server.http_client() as client:
            y = server.infer("http", "double", {"x": x}, client=client)["y"]
        return y.shape == x.shape and bool(np.all(y == 2 * index))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(16)))


def test_batch_on_a_method(server, protocol):
    x = np.array([[1.0, 2.0]], dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "scaler", {"x": x})["y"], x * 3)


def test_sample(server, protocol):
    text = np.array([b"hello\x00"], dtype=object)
    assert server.infer(protocol, "text_length", {"text": text})["length"].tolist() == [6]


def test_group_by_keys_with_and_without_the_optional_input(server):
    """Concurrent requests, some with the optional input, may arrive in one batch: each gets its answer."""

    def one(index: int) -> bool:
        x = np.full((1, 2), index, dtype=F32)
        inputs = {"x": x, "bias": np.full((1, 2), 100, dtype=F32)} if index % 2 else {"x": x}
        with server.grpc_client() as client:
            result = server.infer("grpc", "add_optional", inputs, client=client)
        expected = x + (100 if index % 2 else 0)
        return bool(np.all(result["y"] == expected)) and result["has_bias"].tolist() == [[bool(index % 2)]]

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert all(pool.map(one, range(16)))


def test_group_by_values_calls_once_per_value_and_pads(server, protocol):
    x = np.array([[1.0], [2.0], [3.0]], dtype=F32)
    width = np.array([[1], [3], [1]], dtype=np.int32)
    result = server.infer(protocol, "widen", {"x": x, "width": width})
    np.testing.assert_array_equal(result["y"], [[1, 0, 0], [2, 2, 2], [3, 0, 0]])
    assert result["calls"].ravel().tolist() == [1, 3, 1]


def test_fill_optionals_uses_the_default_when_absent(server, protocol):
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "weighted", {"x": x})["y"], x * 2)
    weight = np.array([[5.0], [10.0]], dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "weighted", {"x": x, "weight": weight})["y"], x * weight)


def test_first_value_passes_a_scalar(server, protocol):
    x = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=F32)
    temperature = np.array([[0.5], [0.5]], dtype=F32)
    result = server.infer(protocol, "temperature_scaled", {"x": x, "temperature": temperature})
    np.testing.assert_array_equal(result["y"], x * 0.5)
    assert result["was_scalar"].all()


def test_first_value_rejects_different_values(server, protocol):
    x = np.ones((2, 1), dtype=F32)
    temperature = np.array([[0.5], [0.7]], dtype=F32)
    message = server.infer_error(protocol, "temperature_scaled", {"x": x, "temperature": temperature})
    assert "not equal" in message and "temperature" in message


def test_pad_batch_pads_to_the_preferred_size(server, protocol):
    x = np.array([[1.0], [2.0], [3.0]], dtype=F32)
    result = server.infer(protocol, "padded", {"x": x})
    np.testing.assert_array_equal(result["y"], x + 1)
    assert result["seen_batch"].ravel().tolist() == [4, 4, 4]


def test_triton_context_gives_the_model_config(server, protocol):
    result = server.infer(protocol, "context_aware", {"x": np.ones((2, 1), dtype=F32)})
    assert result["max_batch_size"].ravel().tolist() == [7, 7]
