"""The callable's exception reaches the server's log at INFO with its traceback, once per distinct error: the
log a failed client request points to ("see the server log") has it. A real tritonserver, over HTTP and gRPC."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tritonrt.decorators import batch
from tritonrt.model_config import ModelConfig, Tensor

pytestmark = pytest.mark.integration

X = Tensor(name="x", dtype=np.float32, shape=(1,))
Y = Tensor(name="y", dtype=np.float32, shape=(1,))


def _check_positive(x: np.ndarray) -> None:
    if (x < 0).any():
        raise ValueError(f"x must be positive, got {float(x.min())}")


@batch
def _double(x: np.ndarray) -> dict[str, np.ndarray]:
    _check_positive(x)
    return {"y": x * 2}


@pytest.fixture(scope="module")
def server(start_triton):
    server = start_triton()
    server.triton.bind("double", _double, [X], [Y], config=ModelConfig(max_batch_size=4))
    return server


def _tracebacks(caplog, value: float) -> list[logging.LogRecord]:
    return [
        record
        for record in caplog.records
        if record.levelno == logging.INFO
        and "Traceback" in record.getMessage()
        and f"x must be positive, got {value}" in record.getMessage()
    ]


def test_the_callable_error_is_logged_once_with_its_traceback(server, protocol, caplog):
    caplog.set_level(logging.INFO, "tritonrt.proxy")
    value = -1.0 if protocol == "http" else -2.0  # distinct per protocol: the log remembers errors for a minute
    for _ in range(3):
        with pytest.raises(InferenceServerException, match=f"ValueError: x must be positive, got {value}"):
            server.infer(protocol, "double", {"x": np.array([[value]], np.float32)})
    [record] = _tracebacks(caplog, value)
    text = record.getMessage()
    assert "model 'double'" in text and "in _check_positive" in text
    # Another error (another message) gets its own traceback; the server keeps serving.
    with pytest.raises(InferenceServerException):
        server.infer(protocol, "double", {"x": np.array([[value - 10]], np.float32)})
    assert len(_tracebacks(caplog, value - 10)) == 1
    assert server.infer(protocol, "double", {"x": np.array([[3.0]], np.float32)})["y"][0, 0] == 6.0
