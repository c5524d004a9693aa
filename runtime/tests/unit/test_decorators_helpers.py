"""Unit tests of the decorators' exported helpers: convert_output (decorators.outputs) and
get_inference_request_batch_size (decorators._common).
"""

from __future__ import annotations

import numpy as np
import pytest
from decorators_testlib import make_config, req

from tritonrt.decorators import (
    convert_output,
    get_inference_request_batch_size,
)
from tritonrt.exceptions import PyTritonValidationError
from tritonrt.proxy.types import Request


class TestHelpers:
    def test_convert_output(self):
        config = make_config([("x", (-1,), np.float32, False)], [("a", (-1,), np.float32), ("b", (-1,), np.int32)])
        a, b = np.zeros(1), np.ones(1)
        assert convert_output({"a": a}) == {"a": a}
        assert convert_output((a, b), model_config=config) == {"a": a, "b": b}
        with pytest.raises(PyTritonValidationError, match=r"returned 1 outputs but model 'model' defines 2"):
            convert_output([a], model_config=config)
        with pytest.raises(PyTritonValidationError, match="Unsupported output type ndarray"):
            convert_output(a, model_config=config)

    def test_get_inference_request_batch_size(self):
        assert get_inference_request_batch_size(req(x=np.zeros((3, 2)))) == 3
        with pytest.raises(PyTritonValidationError, match="without inputs"):
            get_inference_request_batch_size(Request({}))
        with pytest.raises(PyTritonValidationError, match="no batch axis"):
            get_inference_request_batch_size(req(x=np.float32(1.0)))
