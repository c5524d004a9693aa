"""Unit tests of the checks of infer_* arguments and the mapping of inputs to model inputs."""

import numpy as np
import pytest

from tritonrt.client._arguments import (
    add_batch_axis,
    headers_as_strings,
    map_inputs,
    remove_batch_axis,
    require_batching,
    verify_inputs_args,
    verify_parameters,
)
from tritonrt.client.exceptions import (
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientValueError,
)
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig

CONFIG = TritonModelConfig(
    model_name="adder",
    max_batch_size=4,
    inputs=[
        TensorSpec("a", (-1,), np.float32),
        TensorSpec("b", (-1,), np.float32),
        TensorSpec("bias", (1,), np.float32, optional=True),
    ],
    outputs=[TensorSpec("sum", (-1,), np.float32)],
)
TEXT_CONFIG = TritonModelConfig(
    model_name="text", inputs=[TensorSpec("text", (-1,), np.object_)], outputs=[TensorSpec("n", (1,), np.int64)]
)
A = np.array([1.0, 2.0], np.float32)


def test_no_inputs_is_rejected():
    with pytest.raises(PyTritonClientValueError, match="No inputs given"):
        verify_inputs_args((), {})


def test_mixed_positional_and_named_inputs_are_rejected():
    with pytest.raises(PyTritonClientValueError, match="Mixed positional and named inputs.*not both"):
        verify_inputs_args((A,), {"b": A})


def test_positional_or_named_inputs_pass():
    verify_inputs_args((A, A), {})
    verify_inputs_args((), {"a": A})


@pytest.mark.parametrize(
    ("values", "what", "match"),
    [
        ([("a", 1)], "parameters", "must be a dict"),
        ({1: "x"}, "headers", "names must be strings"),
        ({"a": [1, 2]}, "parameters", r"parameters\['a'\] is a list"),
        ({"a": None}, "headers", r"headers\['a'\] is a NoneType"),
        ({"a": 1.5}, "headers", r"headers\['a'\] is a float"),
    ],
)
def test_bad_parameters_and_headers_are_rejected(values, what, match):
    with pytest.raises(PyTritonClientValueError, match=match):
        verify_parameters(values, what)


def test_good_parameters_and_headers_pass():
    verify_parameters(None, "parameters")
    verify_parameters({"s": "x", "i": 1, "b": True, "f": 0.5}, "parameters")
    verify_parameters({"s": "x", "i": 1, "b": False}, "headers")


def test_headers_become_lower_case_strings():
    assert headers_as_strings({"X-Trace": 7, "X-Flag": True, "x-name": "n"}) == {
        "x-trace": "7",
        "x-flag": "true",
        "x-name": "n",
    }
    assert headers_as_strings(None) == {}


def test_positional_inputs_take_the_model_input_names_in_order():
    b = np.array([3.0, 4.0], np.float32)
    named = map_inputs((A, b), {}, CONFIG)
    assert list(named) == ["a", "b"]
    assert named["b"] is b


def test_named_inputs_may_leave_out_optional_ones():
    assert set(map_inputs((), {"a": A, "b": A}, CONFIG)) == {"a", "b"}


def test_too_many_positional_inputs_are_rejected():
    with pytest.raises(PyTritonClientValueError, match=r"has 3 inputs \(a, b, bias\) but 4 positional"):
        map_inputs((A, A, A, A), {}, CONFIG)


def test_unknown_input_name_lists_the_model_inputs():
    with pytest.raises(PyTritonClientValueError, match="has no input 'c'; its inputs are: a, b, bias"):
        map_inputs((), {"a": A, "c": A}, CONFIG)


def test_missing_required_input_is_named():
    with pytest.raises(PyTritonClientValueError, match="needs input.s. b that were not given"):
        map_inputs((A,), {}, CONFIG)


def test_non_array_input_is_rejected_with_a_hint():
    with pytest.raises(PyTritonClientValueError, match="'a' of model 'adder' is a list; pass a numpy array"):
        map_inputs((), {"a": [1.0], "b": A}, CONFIG)


def test_wrong_dtype_names_the_expected_one():
    with pytest.raises(PyTritonClientValueError, match=r"must have dtype float32, got float64.*astype"):
        map_inputs((A.astype(np.float64), A), {}, CONFIG)


@pytest.mark.parametrize("array", [np.array([b"ab"]), np.array([b"ab"], dtype=object)])
def test_bytes_inputs_accept_bytes_and_object_arrays(array):
    assert map_inputs((array,), {}, TEXT_CONFIG)["text"] is array


def test_str_arrays_are_encoded_to_utf8_bytes():
    named = map_inputs((np.array(["zé"]),), {}, TEXT_CONFIG)
    assert named["text"].tolist() == ["zé".encode()]


def test_bytes_inputs_reject_numbers():
    with pytest.raises(PyTritonClientValueError, match="holds bytes but got dtype float32"):
        map_inputs((A,), {}, TEXT_CONFIG)


def test_batch_axis_is_added_and_removed():
    batched = add_batch_axis({"a": A})
    assert batched["a"].shape == (1, 2)
    assert remove_batch_axis(batched)["a"].shape == (2,)


def test_batching_is_required_for_batches():
    require_batching(CONFIG)
    with pytest.raises(PyTritonClientModelDoesntSupportBatchingError, match="use infer_sample"):
        require_batching(TritonModelConfig(model_name="single", batching=False, max_batch_size=0))
