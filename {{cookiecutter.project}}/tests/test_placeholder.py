{%- set batching = cookiecutter.max_batch_size | int > 0 -%}
{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""The placeholder model's own arithmetic: DELETE (or rewrite for your model) this test with placeholder.py.

Every other test compares the service with the model run in process, so it stays when you replace the
placeholder; this one checks what the placeholder computes and fails for any other model.
"""

from __future__ import annotations

{% if pytorch -%}
import logging
{% endif -%}
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_outputs_close
from test_model import BATCH_SIZE, filled

from {{ cookiecutter.package }} import model as model_module
from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.model import Model
from {{ cookiecutter.package }}.model_files import MODEL_DIR_VARIABLE

__all__: list[str] = []


def expected(value: float, batch_size: int | None = BATCH_SIZE) -> dict[str, np.ndarray]:
    """The placeholder's answer when every input is ``value`` and its scale 1: every output equal to it."""
    outputs = {}
    for tensor in spec.OUTPUTS:
        shape = tuple(1 if dim == -1 else dim for dim in tensor.shape)
        if batch_size is not None:
            shape = (batch_size, *shape)
        if tensor.dtype is np.bytes_:
            outputs[tensor.name] = np.full(shape, b"%g" % value)
        else:
            outputs[tensor.name] = np.full(shape, value, dtype=tensor.dtype)
    return outputs


@pytest.mark.parametrize("value", [0, 1])
def test_every_output_is_the_mean_of_the_inputs(value: int) -> None:
    assert_outputs_close(Model().predict(**filled(value)), expected(value))


def test_the_scale_comes_from_the_weights_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "placeholder.json").write_text('{"scale": 0.0}')
    monkeypatch.setenv(MODEL_DIR_VARIABLE, str(tmp_path))
    assert_outputs_close(Model().predict(**filled(1)), expected(0))
{%- if pytorch %}


def test_the_torch_module_runs_on_cuda_when_available() -> None:
    torch = pytest.importorskip("torch", reason='torch is not installed: pip install -e ".[torch]"')
    model = Model()
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
    assert_outputs_close(fallback.predict(**filled(1)), expected(1))
{%- else %}


def test_the_model_says_where_its_weights_come_from(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger=model_module.__name__):
        Model()
    assert str(Path(model_module.__file__).parent / "weights") in caplog.text
{%- endif %}
