{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
"""The model and the service give the answers recorded in ``tests/golden/samples.npz`` (``make golden``).

Skipped until the samples are recorded: record them once your model is in.
"""

from __future__ import annotations

import pytest
from conftest import Service, assert_outputs_close, outputs_of
from golden import GOLDEN, load

{% if batching -%}
from {{ cookiecutter.package }} import spec
{% endif -%}
from {{ cookiecutter.package }}.client import Client
from {{ cookiecutter.package }}.model import Model

__all__: list[str] = []

pytestmark = pytest.mark.skipif(not GOLDEN.exists(), reason="no golden samples: record them with make golden")


def test_the_model_gives_the_golden_answers() -> None:
    inputs, outputs = load()
    assert_outputs_close(Model().predict(**inputs), outputs)


@pytest.mark.integration
@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_the_service_gives_the_golden_answers(service: Service, scheme: str) -> None:
    inputs, outputs = load()
    with Client(service.http_url if scheme == "http" else service.grpc_url) as client:
{%- if batching %}
        count = len(next(iter(inputs.values())))
        for start in range(0, count, spec.MAX_BATCH_SIZE):
            part = {name: value[start : start + spec.MAX_BATCH_SIZE] for name, value in inputs.items()}
            expected = {name: value[start : start + spec.MAX_BATCH_SIZE] for name, value in outputs.items()}
            assert_outputs_close(outputs_of(client.predict_batch(**part)), expected)
{%- else %}
        assert_outputs_close(outputs_of(client.predict(**inputs)), outputs)
{%- endif %}
