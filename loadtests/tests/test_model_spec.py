"""ModelSpec.from_config: Triton's JSON model configuration, as HTTP and gRPC (MessageToJson) return it."""

from __future__ import annotations

import pytest

from loadtests.errors import LoadTestSetupError
from loadtests.model_spec import ModelSpec, TensorSpec

HTTP_CONFIG = {
    "name": "identity",
    "max_batch_size": 16,
    "input": [
        {"name": "x", "data_type": "TYPE_FP32", "dims": [-1], "optional": False},
        {"name": "tag", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
    ],
    "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1]}],
}

# gRPC's MessageToJson: int64 as strings, default values (max_batch_size 0, optional False) left out.
GRPC_CONFIG = {
    "name": "tokens",
    "input": [{"name": "n", "data_type": "TYPE_INT32", "dims": ["1"]}],
    "output": [{"name": "token", "data_type": "TYPE_INT64", "dims": ["2", "-1"]}],
    "model_transaction_policy": {"decoupled": True},
}


def test_http_config():
    spec = ModelSpec.from_config(HTTP_CONFIG)

    assert spec == ModelSpec(
        name="identity",
        inputs=(TensorSpec("x", "FP32", (-1,)), TensorSpec("tag", "BYTES", (1,), optional=True)),
        outputs=(TensorSpec("y", "FP32", (-1,)),),
        max_batch_size=16,
        decoupled=False,
    )
    assert spec.batched


def test_grpc_config_with_string_dims_and_defaults_left_out():
    spec = ModelSpec.from_config(GRPC_CONFIG)

    assert spec.max_batch_size == 0 and not spec.batched
    assert spec.decoupled
    assert spec.inputs == (TensorSpec("n", "INT32", (1,)),)
    assert spec.outputs == (TensorSpec("token", "INT64", (2, -1)),)


def test_unsupported_data_type_is_named():
    config = {**HTTP_CONFIG, "input": [{"name": "x", "data_type": "TYPE_COMPLEX", "dims": [1]}]}

    with pytest.raises(LoadTestSetupError, match=r"input 'x' has data type COMPLEX.*supported: BOOL"):
        ModelSpec.from_config(config)


def test_model_without_inputs_is_rejected():
    with pytest.raises(LoadTestSetupError, match="model 'identity' declares no inputs"):
        ModelSpec.from_config({**HTTP_CONFIG, "input": []})
