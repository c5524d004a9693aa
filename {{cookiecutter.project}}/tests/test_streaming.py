{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
"""Streaming: the decoupled model sends several responses per request, over gRPC only."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import PACKAGE, Service, assert_outputs_close, expected_outputs, outputs_of
from tritonrt.client.exceptions import PyTritonClientValueError
from tritonrt.proxy.types import Request

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import AsyncClient, Client
from {{ cookiecutter.package }}.model import STREAM_CHUNKS, Model


def test_infer_stream_yields_every_chunk_for_each_request() -> None:
    chunks = list(Model().infer_stream([Request(spec.example_inputs({{ "1" if batching }}))]))
    assert len(chunks) == STREAM_CHUNKS
    for responses in chunks:
        (outputs,) = responses
{%- if batching %}
        outputs = {name: value[0] for name, value in outputs.items()}  # the request's one sample
{%- endif %}
        assert_outputs_close(outputs, expected_outputs())


def test_streaming_over_http_is_refused_with_the_fix() -> None:
    with Client("http://127.0.0.1:8000") as client, pytest.raises(PyTritonClientValueError, match="grpc://"):
        client.stream(**spec.example_inputs())


def test_the_command_line_refuses_to_stream_over_http() -> None:
    command = [sys.executable, "-m", f"{PACKAGE}.client", "--url", "http://127.0.0.1:8000", "--stream"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "--stream needs gRPC: give --url grpc://" in result.stderr
    assert "make serve" not in result.stderr


@pytest.mark.integration
def test_stream_over_grpc(service: Service) -> None:
    with Client(service.grpc_url) as client:
        predictions = list(client.stream(**spec.example_inputs()))
    assert len(predictions) == STREAM_CHUNKS
    for prediction in predictions:
        assert_outputs_close(outputs_of(prediction), expected_outputs())


@pytest.mark.integration
async def test_async_stream_over_grpc(service: Service) -> None:
    async with AsyncClient(service.grpc_url) as client:
        predictions = [prediction async for prediction in client.stream(**spec.example_inputs())]
    assert len(predictions) == STREAM_CHUNKS
    for prediction in predictions:
        assert_outputs_close(outputs_of(prediction), expected_outputs())


@pytest.mark.integration
def test_the_command_line_streams(service: Service) -> None:
    command = [sys.executable, "-m", f"{PACKAGE}.client", "--url", service.grpc_url, "--stream"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    headers = [line for line in result.stdout.splitlines() if line.startswith("response ")]
    assert headers == [f"response {number}:" for number in range(1, STREAM_CHUNKS + 1)]
