"""check_outputs: a response's output names, datatypes and shapes against the model's declaration."""

from __future__ import annotations

import numpy as np
import pytest

from loadtests.model_spec import ModelSpec, TensorSpec
from loadtests.validation import check_outputs

SPEC = ModelSpec(
    name="m",
    inputs=(TensorSpec("x", "FP32", (-1,)),),
    outputs=(TensorSpec("y", "FP32", (-1, 4)), TensorSpec("label", "BYTES", (1,))),
    max_batch_size=8,
)


def _decode(arrays):
    return lambda name: arrays[name]


GOOD = {"y": ("FP32", [2, 7, 4]), "label": ("BYTES", [2, 1])}
ARRAYS = {"y": np.zeros((2, 7, 4), np.float32), "label": np.array([[b"a"], [b"b"]], dtype=object)}


def test_matching_response_passes():
    assert check_outputs(SPEC, 2, GOOD, _decode(ARRAYS)) is None


@pytest.mark.parametrize(
    ("reported", "message"),
    [
        ({"y": GOOD["y"]}, "response lacks output(s) label"),
        ({**GOOD, "z": ("FP32", [2])}, "response has undeclared output(s) z"),
        ({**GOOD, "y": ("FP64", [2, 7, 4])}, "output 'y' has datatype FP64, expected FP32"),
        ({**GOOD, "y": ("FP32", [2, 7, 5])}, "output 'y' has shape [2, 7, 5], expected [2, -1, 4]"),
        ({**GOOD, "y": ("FP32", [3, 7, 4])}, "output 'y' has shape [3, 7, 4], expected [2, -1, 4]"),
        ({**GOOD, "y": ("FP32", [2, 28])}, "output 'y' has shape [2, 28], expected [2, -1, 4]"),
    ],
    ids=["missing", "undeclared", "datatype", "fixed-dim", "batch", "rank"],
)
def test_mismatches_are_described(reported, message):
    assert check_outputs(SPEC, 2, reported, _decode(ARRAYS)) == message


def test_undecodable_data_is_a_failure():
    def decode(name):
        raise ValueError("cannot reshape array of size 0 into shape (2,7,4)")

    problem = check_outputs(SPEC, 2, GOOD, decode)

    assert problem == "output 'y' could not be decoded: cannot reshape array of size 0 into shape (2,7,4)"


def test_data_must_match_the_declared_shape():
    arrays = {**ARRAYS, "label": np.array([[b"a"]], dtype=object)}

    problem = check_outputs(SPEC, 2, GOOD, _decode(arrays))

    assert problem == "output 'label' declares shape [2, 1] but its data decodes to [1, 1]"


def test_unbatched_model_has_no_batch_axis():
    spec = ModelSpec(name="u", inputs=SPEC.inputs, outputs=(TensorSpec("y", "INT32", (1,)),))

    assert check_outputs(spec, None, {"y": ("INT32", [1])}, lambda _: np.zeros(1, np.int32)) is None
    assert check_outputs(spec, None, {"y": ("INT32", [1, 1])}, lambda _: None) == (
        "output 'y' has shape [1, 1], expected [1]"
    )
