"""Integration test: a Triton model placed in models/ (here a Python-backend ``model.py``) is served by the
service's tritonserver beside the bound model, both answering on the same ports."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from conftest import assert_outputs_close, expected_outputs, outputs_of, start_service

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Client

pytestmark = pytest.mark.integration

CONFIG = """\
name: "add_one"
backend: "python"
max_batch_size: 8
input [{ name: "x" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "y" data_type: TYPE_FP32 dims: [-1] }]
"""
MODEL = """\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", x + 1)]))
        return responses
"""


def add_one(http_url: str, values: list[float]) -> list[float]:
    """``add_one``'s answer to ``values`` over KServe v2 HTTP (JSON)."""
    body = {"inputs": [{"name": "x", "shape": [1, len(values)], "datatype": "FP32", "data": values}]}
    request = urllib.request.Request(f"{http_url}/v2/models/add_one/infer", data=json.dumps(body).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        outputs = json.load(response)["outputs"]
    return [float(value) for value in outputs[0]["data"]]


def test_a_python_backend_model_in_models_is_served_beside_the_bound_model(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "add_one" / "1").mkdir(parents=True)
    (models / "add_one" / "config.pbtxt").write_text(CONFIG)
    (models / "add_one" / "1" / "model.py").write_text(MODEL)
    service = start_service(tmp_path / "service.log", TRITON_MODELS_DIR=str(models))
    try:
        assert add_one(service.http_url, [1.0, 2.0]) == [2.0, 3.0]
        with Client(service.http_url) as client:
            prediction = client.predict(**spec.example_inputs())
        assert_outputs_close(outputs_of(prediction), expected_outputs())
    finally:
        assert service.stop() == 0, service.output()
