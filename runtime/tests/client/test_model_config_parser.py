"""Unit tests of parsing the model configs servers return (HTTP JSON and gRPC proto3 JSON)."""

import numpy as np
import tritonclient.utils

from tritonrt.model_config import DeviceKind, DynamicBatcher, QueuePolicy, TimeoutAction
from tritonrt.model_config.parser import parse_model_config
from tritonrt.model_config.triton_model_config import ResponseCache

# As GET /v2/models/<name>/config returns it over HTTP (every field present).
HTTP_CONFIG = {
    "name": "identity",
    "backend": "python",
    "version_policy": {"latest": {"num_versions": 1}},
    "max_batch_size": 8,
    "input": [
        {"name": "INPUT", "data_type": "TYPE_FP32", "dims": [-1], "optional": False},
        {"name": "MASK", "data_type": "TYPE_BOOL", "dims": [2, 3], "optional": True},
    ],
    "output": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}],
    "dynamic_batching": {
        "preferred_batch_size": [4, 8],
        "max_queue_delay_microseconds": 100,
        "preserve_ordering": True,
        "priority_levels": 2,
        "default_priority_level": 1,
        "default_queue_policy": {
            "timeout_action": "DELAY",
            "default_timeout_microseconds": 5,
            "allow_timeout_override": True,
            "max_queue_size": 10,
        },
        "priority_queue_policy": {"2": {"timeout_action": "REJECT", "max_queue_size": 3}},
    },
    "instance_group": [{"kind": "KIND_CPU", "count": 2}, {"kind": "KIND_CPU", "count": 1}],
    "parameters": {"shared-memory-socket": {"string_value": "ipc:///tmp/x"}},
    "response_cache": {"enable": True},
}

# As tritonclient.grpc get_model_config(as_json=True) returns it: defaults left out, int64 as strings.
GRPC_CONFIG = {
    "name": "stream",
    "input": [{"name": "N", "data_type": "TYPE_INT32", "dims": ["1"]}],
    "output": [{"name": "I", "data_type": "TYPE_BF16", "dims": ["1"]}],
    "instance_group": [{"name": "stream", "count": 1, "kind": "KIND_GPU"}],
    "model_transaction_policy": {"decoupled": True},
    "dynamic_batching": {"max_queue_delay_microseconds": "250"},
    "version_policy": {"specific": {"versions": ["3"]}},
}


def test_http_config_is_parsed_completely():
    config = parse_model_config(HTTP_CONFIG)
    assert (config.model_name, config.model_version, config.batching, config.max_batch_size) == (
        "identity",
        1,
        True,
        8,
    )
    assert [(t.name, t.shape, t.dtype, t.optional) for t in config.inputs] == [
        ("INPUT", (-1,), np.float32, False),
        ("MASK", (2, 3), np.bool_, True),
    ]
    assert [(t.name, t.shape, t.dtype) for t in config.outputs] == [("TEXT", (1,), np.object_)]
    assert config.batcher == DynamicBatcher(
        max_queue_delay_microseconds=100,
        preferred_batch_size=[4, 8],
        preserve_ordering=True,
        priority_levels=2,
        default_priority_level=1,
        default_queue_policy=QueuePolicy(TimeoutAction.DELAY, 5, True, 10),
        priority_queue_policy={2: QueuePolicy(TimeoutAction.REJECT, 0, False, 3)},
    )
    assert config.instance_group == {DeviceKind.KIND_CPU: 3}
    assert config.backend_parameters == {"shared-memory-socket": "ipc:///tmp/x"}
    assert config.response_cache == ResponseCache(enable=True)
    assert config.decoupled is False


def test_grpc_config_with_defaults_left_out_is_parsed():
    config = parse_model_config(GRPC_CONFIG)
    assert (config.batching, config.max_batch_size, config.decoupled) == (False, 0, True)
    assert config.model_version == 3  # the single specific version
    assert config.inputs[0].shape == (1,) and config.inputs[0].dtype == np.int32
    # numpy has no BF16: the parser uses the type tritonclient decodes it to
    assert config.outputs[0].dtype == np.dtype(tritonclient.utils.triton_to_np_dtype("BF16")).type
    assert config.batcher == DynamicBatcher(max_queue_delay_microseconds=250)
    assert config.instance_group == {DeviceKind.KIND_GPU: 1}
    assert config.response_cache is None


def test_requested_version_is_recorded_and_no_batcher_means_none():
    config = parse_model_config({"name": "m", "max_batch_size": 2}, model_version=7)
    assert config.model_version == 7
    assert config.batcher is None
    assert config.inputs == [] and config.outputs == []
