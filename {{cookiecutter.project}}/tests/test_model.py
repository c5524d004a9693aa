{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
"""Unit tests of the model's contract: ``predict`` and the inference callable called directly, no server.

They hold for any model that keeps the contract of ``model.py`` (outputs of the declared dtypes and shapes,
each sample computed on its own), whatever it computes: they stay when you swap in your model.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_outputs_close
from tritonrt.proxy.types import Request

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.model import Model

__all__: list[str] = []

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


def test_outputs_have_the_declared_dtypes_and_shapes(model: Model) -> None:
    outputs = model.predict(**spec.example_inputs({{ "BATCH_SIZE" if batching }}))
    assert sorted(outputs) == sorted(tensor.name for tensor in spec.OUTPUTS)
    for tensor in spec.OUTPUTS:
        output = outputs[tensor.name]
        declared = {{ "(BATCH_SIZE, *tensor.shape)" if batching else "tensor.shape" }}
        assert output.dtype.type is np.dtype(tensor.dtype).type, tensor.name
        assert len(output.shape) == len(declared), tensor.name
        assert all(want in (-1, got) for want, got in zip(declared, output.shape, strict=True)), tensor.name
{%- if batching %}


def test_each_sample_of_a_batch_is_computed_on_its_own(model: Model) -> None:
    # Triton's dynamic batcher joins requests: a sample's outputs must not depend on its neighbours.
    zeros, ones = filled(0, 1), filled(1, 1)
    outputs = model.predict(**{name: np.concatenate([zeros[name], ones[name]]) for name in zeros})
    assert_outputs_close({name: value[:1] for name, value in outputs.items()}, model.predict(**zeros))
    assert_outputs_close({name: value[1:] for name, value in outputs.items()}, model.predict(**ones))


def test_infer_answers_each_request_of_a_batch(model: Model) -> None:
    # Triton hands over several requests at once; @batch joins them and splits the outputs back.
    responses = model.infer([Request(filled(0, 1)), Request(filled(1, 2))])
    assert len(responses) == 2
    assert_outputs_close(responses[0], model.predict(**filled(0, 1)))
    assert_outputs_close(responses[1], model.predict(**filled(1, 2)))
{%- else %}


def test_infer_answers_each_request(model: Model) -> None:
    # Without batching Triton hands over one request at a time; @sample passes its inputs as arguments.
    responses = model.infer([Request(filled(0)), Request(filled(1))])
    assert len(responses) == 2
    assert_outputs_close(responses[0], model.predict(**filled(0)))
    assert_outputs_close(responses[1], model.predict(**filled(1)))
{%- endif %}
