"""One rule for a tensor against its declaration, shared by strict=True output checks and @fill_optionals."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrt.decorators import TritonContext, bind_triton_context, fill_optionals
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonValidationError
from tritonrt.model_config.checks import dtype_matches, shape_matches, validate_outputs
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig
from tritonrt.proxy.types import Request

# A tensor declared under one name as both an optional input and an output, so that each check sees it.
CONFIG = TritonModelConfig(
    model_name="m",
    inputs=[TensorSpec("x", (1,), np.float32), TensorSpec("tag", (-1,), np.object_, optional=True)],
    outputs=[TensorSpec("tag", (-1,), np.object_)],
)


def _fill(default: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Run @fill_optionals with ``default`` for the tag input on a request of two rows without it."""

    @fill_optionals(tag=default)
    def infer(requests):
        return [dict(request) for request in requests]

    context = TritonContext()
    bind_triton_context(infer, context)
    context.model_configs[infer] = CONFIG
    return infer([Request({"x": np.zeros((2, 1), np.float32)})])


def test_a_str_array_fits_a_bytes_tensor_in_both_checks():
    """The case the two copies disagreed on: str_ arrays travel as BYTES (UTF-8), so strict=True accepted one
    as an output while @fill_optionals refused it as a default (it allowed only bytes and object arrays)."""
    text = np.array(["hello", "world"])
    validate_outputs(CONFIG, [{"tag": text[np.newaxis]}])
    filled = _fill(text)
    assert filled[0]["tag"].tolist() == [["hello", "world"], ["hello", "world"]]


@pytest.mark.parametrize(
    "value",
    [np.array([1.0, 2.0], np.float64), np.array([1, 2], np.int32)],
    ids=["float64", "int32"],
)
def test_a_numeric_array_fits_a_bytes_tensor_in_neither(value: np.ndarray):
    with pytest.raises(PyTritonValidationError, match="output 'tag' has dtype"):
        validate_outputs(CONFIG, [{"tag": value[np.newaxis]}])
    with pytest.raises(PyTritonBadParameterError, match="do not match the input dtypes"):
        _fill(value)


@pytest.mark.parametrize(
    ("expected", "actual", "fits"),
    [
        (np.object_, np.dtype(object), True),
        (np.object_, np.dtype("S3"), True),
        (np.bytes_, np.dtype("U3"), True),
        (np.bytes_, np.dtype(np.uint8), False),
        (np.float32, np.dtype(np.float32), True),
        (np.float32, np.dtype(np.float64), False),
        (np.uint8, np.dtype("S1"), False),
    ],
)
def test_dtype_rule(expected: type, actual: np.dtype, fits: bool):
    assert dtype_matches(expected, actual) is fits


@pytest.mark.parametrize(
    ("expected", "actual", "fits"),
    [
        ((-1,), (7,), True),
        ((2, -1), (2, 5), True),
        ((2, -1), (3, 5), False),
        ((-1,), (1, 1), False),
        ((1,), (), False),
    ],
)
def test_shape_rule(expected: tuple[int, ...], actual: tuple[int, ...], fits: bool):
    assert shape_matches(expected, actual) is fits
