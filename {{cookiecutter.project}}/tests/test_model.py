{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""Unit tests of the model: ``predict`` and the inference callable called directly, without a server."""

from __future__ import annotations
{% if pytorch %}
import logging
{% endif %}
import numpy as np
import pytest
from conftest import assert_outputs_equal
from tritonrt.proxy.types import Request

{% if pytorch -%}
from {{ cookiecutter.package }} import model as model_module
{% endif -%}
from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.model import Model

BATCH_SIZE = {{ 2 if batching else None }}  # {{ "samples per batch in these tests" if batching else "batching is off: arrays hold one sample" }}


@pytest.fixture(scope="module")
def model() -> Model:
    return Model()


def filled(value: int, batch_size: int | None = BATCH_SIZE) -> dict[str, np.ndarray]:
    """Every input filled with ``value`` (0 or 1): numbers and bools equal to it, bytes that long."""
    inputs = {}
    for tensor in spec.INPUTS:
        shape = spec.example(tensor, batch_size).shape
        if tensor.dtype is np.bytes_:
            inputs[tensor.name] = np.full(shape, b"x" * value, dtype=object)
        else:
            inputs[tensor.name] = np.full(shape, value, dtype=tensor.dtype)
    return inputs


def expected(value: int, batch_size: int | None = BATCH_SIZE) -> dict[str, np.ndarray]:
    """The placeholder's answer when every input is ``value``: every output equal to it."""
    outputs = {}
    for tensor in spec.OUTPUTS:
        shape = tuple(1 if dim == -1 else dim for dim in tensor.shape)
        if batch_size is not None:
            shape = (batch_size, *shape)
        if tensor.dtype is np.bytes_:
            outputs[tensor.name] = np.full(shape, str(value).encode())
        else:
            outputs[tensor.name] = np.full(shape, value, dtype=tensor.dtype)
    return outputs


@pytest.mark.parametrize("value", [0, 1])
def test_every_output_is_the_mean_of_the_inputs(model: Model, value: int) -> None:
    assert_outputs_equal(model.predict(**filled(value)), expected(value))


def test_outputs_have_the_declared_dtypes_and_shapes(model: Model) -> None:
    outputs = model.predict(**spec.example_inputs({{ "BATCH_SIZE" if batching }}))
    for tensor in spec.OUTPUTS:
        output = outputs[tensor.name]
        declared = {{ "(BATCH_SIZE, *tensor.shape)" if batching else "tensor.shape" }}
        assert output.dtype.type is np.dtype(tensor.dtype).type, tensor.name
        assert len(output.shape) == len(declared), tensor.name
        assert all(want in (-1, got) for want, got in zip(declared, output.shape, strict=True)), tensor.name
{%- if batching %}


def test_each_sample_of_a_batch_is_computed_on_its_own(model: Model) -> None:
    zeros, ones = filled(0, 1), filled(1, 1)
    outputs = model.predict(**{name: np.concatenate([zeros[name], ones[name]]) for name in zeros})
    assert_outputs_equal({name: value[:1] for name, value in outputs.items()}, expected(0, 1))
    assert_outputs_equal({name: value[1:] for name, value in outputs.items()}, expected(1, 1))


def test_infer_answers_each_request_of_a_batch(model: Model) -> None:
    # Triton hands over several requests at once; @batch joins them and splits the outputs back.
    responses = model.infer([Request(filled(0, 1)), Request(filled(1, 2))])
    assert len(responses) == 2
    assert_outputs_equal(responses[0], expected(0, 1))
    assert_outputs_equal(responses[1], expected(1, 2))
{%- else %}


def test_infer_answers_each_request(model: Model) -> None:
    # Without batching Triton hands over one request at a time; @sample passes its inputs as arguments.
    responses = model.infer([Request(filled(0)), Request(filled(1))])
    assert len(responses) == 2
    assert_outputs_equal(responses[0], expected(0))
    assert_outputs_equal(responses[1], expected(1))
{%- endif %}
{%- if pytorch %}


def test_the_torch_module_runs_on_cuda_when_available(model: Model) -> None:
    torch = pytest.importorskip("torch", reason='torch is not installed: pip install -e ".[torch]"')
    assert model.module is not None
    assert model.device == ("cuda" if torch.cuda.is_available() else "cpu")


def test_without_torch_the_model_says_so_and_runs_on_numpy(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(model_module, "torch", None)
    with caplog.at_level(logging.WARNING, logger=model_module.__name__):
        fallback = Model()
    assert fallback.module is None
    assert 'pip install -e ".[torch]"' in caplog.text
    assert_outputs_equal(fallback.predict(**filled(1)), expected(1))
{%- endif %}
