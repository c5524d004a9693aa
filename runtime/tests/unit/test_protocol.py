"""The proxy's connection names: what tritonrt writes into config.pbtxt is what the proxy model reads back."""

from __future__ import annotations

import os
import pathlib

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from tritonrt.model_config.pbtxt import render_pbtxt
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig
from tritonrt.proxy.protocol import ModelConnection

CONNECTION = ModelConnection(pathlib.Path("/tmp/tritonrt-abc"), "m0123abcd", 3, os.getpid(), "tritonrt_5e1f_")


def test_the_connection_survives_config_pbtxt():
    """Through config.pbtxt and the JSON model config that Triton hands the proxy model's ``initialize``."""
    config = TritonModelConfig(model_name="m", inputs=[TensorSpec("x", (-1,))], outputs=[TensorSpec("y", (-1,))])
    config.backend_parameters.update(CONNECTION.backend_parameters())
    proto = text_format.Parse(render_pbtxt(config), model_config_pb2.ModelConfig())
    as_json = json_format.MessageToDict(proto, preserving_proto_field_name=True)
    parameters = {key: value["string_value"] for key, value in as_json["parameters"].items()}
    assert ModelConnection.from_backend_parameters(parameters) == CONNECTION
    assert all(key.startswith("tritonrt_") for key in parameters)


def test_names_of_one_instance_are_its_own():
    assert CONNECTION.socket_path(2) == pathlib.Path("/tmp/tritonrt-abc/m0123abcd.2.sock")
    assert CONNECTION.request_region_prefix(2) == "tritonrt_5e1f_m0123abcd_2_req_"
    assert CONNECTION.reply_region_prefix(2) == "tritonrt_5e1f_m0123abcd_2_resp_"
    prefixes = {CONNECTION.request_region_prefix(i) for i in range(3)} | {
        CONNECTION.reply_region_prefix(i) for i in range(3)
    }
    assert len(prefixes) == 6 and all(prefix.startswith(CONNECTION.shm_prefix) for prefix in prefixes)
