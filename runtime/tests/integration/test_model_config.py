"""Every ModelConfig / Tensor field, read back from the running server (``GET /v2/models/<m>/config``)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.model_config import DynamicBatcher, ModelConfig, QueuePolicy, Tensor, TimeoutAction

pytestmark = pytest.mark.integration

F32 = np.float32
X = Tensor(name="x", dtype=F32, shape=(-1,))
Y = Tensor(name="y", dtype=F32, shape=(-1,))


@batch
def identity(**inputs):
    return {"y": next(iter(inputs.values()))}


def echo_all(requests):
    """Output i is input i (by position), for models with unnamed tensors."""
    return [{f"OUTPUT_{i}": value for i, value in enumerate(request.values(), start=1)} for request in requests]


class CountingIdentity:
    def __init__(self):
        self.calls = 0
        self.lock = threading.Lock()

    def __call__(self, requests):
        with self.lock:
            self.calls += 1
        return [{"y": request["x"]} for request in requests]


FULL_BATCHER = DynamicBatcher(
    max_queue_delay_microseconds=500,
    preferred_batch_size=[4, 8],
    priority_levels=3,
    default_priority_level=2,
    default_queue_policy=QueuePolicy(
        timeout_action=TimeoutAction.DELAY,
        default_timeout_microseconds=1000,
        allow_timeout_override=True,
        max_queue_size=10,
    ),
    priority_queue_policy={
        1: QueuePolicy(
            timeout_action=TimeoutAction.REJECT,
            default_timeout_microseconds=2000,
            allow_timeout_override=False,
            max_queue_size=5,
        )
    },
)


@pytest.fixture(scope="module")
def counter():
    return CountingIdentity()


@pytest.fixture(scope="module")
def server(start_triton, counter):
    server = start_triton(cache_config=["local,size=1048576"])
    bind = server.triton.bind
    bind("full", identity, [X], [Y], config=ModelConfig(max_batch_size=16, batcher=FULL_BATCHER))
    bind("ordered", identity, [X], [Y], config=ModelConfig(batcher=DynamicBatcher(preserve_ordering=True)))
    bind("plain", identity, [X], [Y], config=ModelConfig(batching=False))
    bind("cached", counter, [X], [Y], config=ModelConfig(batching=False, response_cache=True))
    bind("streaming", lambda requests: iter([]), [X], [Y], config=ModelConfig(decoupled=True))
    bind(
        "optional",
        identity,
        [Tensor(name="x", dtype=F32, shape=(-1,), optional=True)],
        [Y],
    )
    bind(
        "unnamed",
        echo_all,
        [Tensor(dtype=F32, shape=(-1,)), Tensor(dtype=np.int32, shape=(2,))],
        [Tensor(dtype=F32, shape=(-1,)), Tensor(dtype=np.int32, shape=(2,))],
    )
    bind(
        "strings",
        identity,
        [Tensor(name="x", dtype=np.bytes_, shape=(1,))],
        [Tensor(name="y", dtype=object, shape=(1,))],
    )
    bind("multi", [identity, identity, identity], [X], [Y])
    return server


def test_max_batch_size_and_default_batcher(server):
    config = server.model_config("ordered")
    assert config["max_batch_size"] == 4  # ModelConfig's default
    batcher = config["dynamic_batching"]
    assert batcher["preserve_ordering"] is True
    assert batcher["max_queue_delay_microseconds"] in (0, "0")


def test_batching_off_gives_max_batch_size_0_and_no_batcher(server):
    config = server.model_config("plain")
    assert config["max_batch_size"] == 0
    assert "dynamic_batching" not in config


def test_every_dynamic_batcher_and_queue_policy_field(server):
    config = server.model_config("full")
    assert config["max_batch_size"] == 16
    batcher = config["dynamic_batching"]
    assert int(batcher["max_queue_delay_microseconds"]) == 500
    assert batcher["preferred_batch_size"] == [4, 8]
    assert batcher["preserve_ordering"] is False
    assert int(batcher["priority_levels"]) == 3
    assert int(batcher["default_priority_level"]) == 2
    default_policy = batcher["default_queue_policy"]
    assert default_policy["timeout_action"] == "DELAY"
    assert int(default_policy["default_timeout_microseconds"]) == 1000
    assert default_policy["allow_timeout_override"] is True
    assert default_policy["max_queue_size"] == 10
    assert set(batcher["priority_queue_policy"]) == {"1"}
    level_1 = batcher["priority_queue_policy"]["1"]
    assert level_1["timeout_action"] == "REJECT"
    assert int(level_1["default_timeout_microseconds"]) == 2000
    assert level_1.get("allow_timeout_override", False) is False
    assert level_1["max_queue_size"] == 5


def test_the_model_with_every_batcher_field_serves(server, protocol):
    x = np.array([[1.0, 2.0]], dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "full", {"x": x})["y"], x)


def test_response_cache_is_enabled_and_serves_repeats_from_the_cache(server, counter, protocol):
    assert server.model_config("cached")["response_cache"]["enable"] is True
    x = np.array([1.0, 2.0, 3.0], dtype=F32) + (10 if protocol == "grpc" else 0)
    calls_before = counter.calls
    first = server.infer(protocol, "cached", {"x": x})["y"]
    second = server.infer(protocol, "cached", {"x": x})["y"]
    np.testing.assert_array_equal(first, x)
    np.testing.assert_array_equal(second, x)
    assert counter.calls == calls_before + 1  # the repeat came from the cache


def test_decoupled_policy(server):
    assert server.model_config("streaming")["model_transaction_policy"]["decoupled"] is True
    assert server.model_config("full").get("model_transaction_policy", {}).get("decoupled", False) is False


def test_optional_input(server, protocol):
    config = server.model_config("optional")
    assert config["input"][0]["optional"] is True
    assert server.model_config("full")["input"][0]["optional"] is False
    x = np.ones((1, 2), dtype=F32)
    np.testing.assert_array_equal(server.infer(protocol, "optional", {"x": x})["y"], x)


def test_unnamed_tensors_are_input_n_and_output_n(server, protocol):
    config = server.model_config("unnamed")
    assert [spec["name"] for spec in config["input"]] == ["INPUT_1", "INPUT_2"]
    assert [spec["name"] for spec in config["output"]] == ["OUTPUT_1", "OUTPUT_2"]
    assert [spec["data_type"] for spec in config["input"]] == ["TYPE_FP32", "TYPE_INT32"]
    assert [spec["dims"] for spec in config["input"]] == [[-1], [2]]
    inputs = {"INPUT_1": np.ones((1, 3), dtype=F32), "INPUT_2": np.array([[7, 8]], dtype=np.int32)}
    result = server.infer(protocol, "unnamed", inputs)
    np.testing.assert_array_equal(result["OUTPUT_1"], inputs["INPUT_1"])
    np.testing.assert_array_equal(result["OUTPUT_2"], inputs["INPUT_2"])


def test_bytes_and_object_are_type_string(server):
    config = server.model_config("strings")
    assert config["input"][0]["data_type"] == "TYPE_STRING"
    assert config["output"][0]["data_type"] == "TYPE_STRING"


def test_a_list_of_callables_gives_one_instance_each(server):
    groups = server.model_config("multi")["instance_group"]
    assert [(group["count"], group["kind"]) for group in groups] == [(3, "KIND_CPU")]
    assert server.model_config("full")["instance_group"][0]["count"] == 1
