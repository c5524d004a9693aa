"""Unit tests of the client's argument handling and command line, without a server."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import PACKAGE
from tritonrt.client.exceptions import PyTritonClientError
from tritonrt.ports import free_ports

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import UNREACHABLE_TIMEOUT_S, {{ "AsyncClient, " if cookiecutter.max_batch_size | int > 0 }}Client, Prediction

TENSOR = spec.INPUTS[0]
# A guard against a wait of init_timeout_s (60 s): far above UNREACHABLE_TIMEOUT_S, far below 60 s.
GAVE_UP_WITHIN_S = 45


def test_the_prediction_has_one_field_per_output() -> None:
    fields = [field.name for field in dataclasses.fields(Prediction)]
    assert fields == [tensor.name for tensor in spec.OUTPUTS]


@pytest.mark.parametrize("batched", [False, True])
def test_example_inputs_pass_the_checks(batched: bool) -> None:
    for tensor in spec.INPUTS:
        value = spec.example(tensor, 2 if batched else None)
        converted = spec.as_input(tensor, value.tolist(), batched=batched)
        assert converted.shape == value.shape
        if tensor.dtype is np.bytes_:
            assert converted.dtype.kind == "S"
        else:
            assert converted.dtype == np.dtype(tensor.dtype)


def test_str_values_of_bytes_inputs_are_sent_as_utf8() -> None:
    tensor = dataclasses.replace(TENSOR, dtype=np.bytes_, shape=(-1,))
    assert spec.as_input(tensor, ["añb"], batched=False).tolist() == ["añb".encode()]


def test_integers_convert_to_any_integer_dtype_they_fit_in() -> None:
    tensor = dataclasses.replace(TENSOR, dtype=np.uint8, shape=(-1,))
    assert spec.as_input(tensor, [0, 255], batched=False).dtype == np.uint8
    with pytest.raises(ValueError, match=r"uint8 values lie in \[0, 255\]"):
        spec.as_input(tensor, [-1, 256], batched=False)


def test_a_wrong_shape_is_refused_with_the_expected_shape() -> None:
    value = np.expand_dims(spec.example(TENSOR), 0)
    with pytest.raises(ValueError, match=f"{TENSOR.name}: expected shape") as error:
        spec.as_input(TENSOR, value, batched=False)
    assert spec.describe_shape(TENSOR) in str(error.value)


def test_values_that_do_not_convert_without_loss_are_refused() -> None:
    value = spec.example(TENSOR).shape
    with pytest.raises(ValueError, match=TENSOR.name):
        spec.as_input(TENSOR, np.ones(value, dtype=np.complex128), batched=False)


def test_the_command_line_names_what_an_input_file_lacks(tmp_path: Path) -> None:
    path = tmp_path / "inputs.npz"
    np.savez(path, unknown=np.zeros(3))
    result = subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.client", "--input", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert f"{path}: the model's inputs are" in result.stderr
    missing = ", ".join(sorted(tensor.name for tensor in spec.INPUTS))
    assert f"missing: {missing}; unknown: unknown" in result.stderr


def test_the_command_line_says_what_to_do_when_no_service_answers() -> None:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    result = subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.client", "--url", url, "--timeout-s", "0.5"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert f"The request to {url} failed" in result.stderr
    assert "make serve" in result.stderr


def test_the_command_line_says_what_it_waits_for_and_gives_up_when_nothing_listens() -> None:
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    result = subprocess.run(
        [sys.executable, "-m", f"{PACKAGE}.client", "--url", url],  # --timeout-s: the default, 60 s
        capture_output=True,
        text=True,
        timeout=GAVE_UP_WITHIN_S,
    )
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    # Its first words, printed as the wait begins: what it waits for, and for how long.
    waiting = f"waiting up to {UNREACHABLE_TIMEOUT_S:g} s for a server there"
    assert lines[0] == f"Nothing listens at {url} (connection refused): {waiting}", result.stderr
    gave_up = f"Cannot reach the Triton server at {url}: nothing listens there"
    assert f"The request to {url} failed: {gave_up}" in result.stderr
    assert "make serve" in result.stderr


def test_the_client_gives_up_when_nothing_listens(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="tritonrt.client")
    (port,) = free_ports(1)
    url = f"grpc://127.0.0.1:{port}"
    with Client(url, unreachable_timeout_s=0.5) as client:  # init_timeout_s: the default, 60 s
        with pytest.raises(PyTritonClientError, match="nothing listens there"):
            client.predict(**spec.example_inputs())
    assert f"Nothing listens at {url} (connection refused): waiting up to 0.5 s" in caplog.text
{%- if cookiecutter.max_batch_size | int > 0 %}


def test_an_empty_batch_is_refused_before_it_is_sent() -> None:
    # Nothing listens at the URL: a batch that was sent would fail as unreachable instead.
    (port,) = free_ports(1)
    empty = {name: value[:0] for name, value in spec.example_inputs(1).items()}
    with Client(f"http://127.0.0.1:{port}") as client:
        with pytest.raises(ValueError, match="predict_batch got 0 samples: give it at least one"):
            client.predict_batch(**empty)


async def test_an_empty_batch_is_refused_by_the_async_client_too() -> None:
    (port,) = free_ports(1)
    empty = {name: value[:0] for name, value in spec.example_inputs(1).items()}
    async with AsyncClient(f"http://127.0.0.1:{port}") as client:
        with pytest.raises(ValueError, match="predict_batch got 0 samples"):
            await client.predict_batch(**empty)
{%- endif %}
