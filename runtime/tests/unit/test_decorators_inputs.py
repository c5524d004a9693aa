"""Unit tests of tritonrt.decorators.inputs: @fill_optionals, @first_value and @triton_context, which read the
model config.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from decorators_testlib import OPTIONALS_CONFIG, XY_CONFIG, bind, req

from tritonrt.decorators import (
    batch,
    fill_optionals,
    first_value,
    triton_context,
)
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError, PyTritonValidationError
from tritonrt.proxy.types import Request


class TestFillOptionals:
    def test_fills_missing_inputs_repeated_to_the_batch_size(self):
        @fill_optionals(temperature=np.array([0.5], np.float32), tag=np.array([b"t"], dtype=object))
        def infer(requests):
            return requests

        bind(infer, OPTIONALS_CONFIG)
        given = np.array([[2.0]], np.float32)
        filled = infer([req(x=[[1.0], [1.0], [1.0]]), req(x=[[1.0]], temperature=given)])
        np.testing.assert_array_equal(filled[0]["temperature"], [[0.5], [0.5], [0.5]])
        assert filled[0]["tag"].tolist() == [[b"t"]] * 3
        assert filled[1]["temperature"] is given

    def test_without_batching_the_default_is_used_as_is(self):
        config = dataclasses.replace(OPTIONALS_CONFIG, batching=False, max_batch_size=0, batcher=None)
        default = np.array([0.5], np.float32)

        @fill_optionals(temperature=default)
        def infer(requests):
            return requests

        bind(infer, config)
        filled = infer([req(x=[1.0, 2.0])])[0]["temperature"]
        np.testing.assert_array_equal(filled, [0.5])
        assert filled is not default

    def test_default_for_unknown_input_is_rejected(self):
        @fill_optionals(temp=np.array([0.5], np.float32))
        def infer(requests):
            return requests

        bind(infer, OPTIONALS_CONFIG)
        with pytest.raises(PyTritonBadParameterError, match=r"defaults for temp, which model 'model' has no"):
            infer([req(x=[1.0])])

    def test_default_with_wrong_dtype_is_rejected(self):
        @fill_optionals(temperature=np.array([0.5], np.float64))
        def infer(requests):
            return requests

        bind(infer, OPTIONALS_CONFIG)
        with pytest.raises(PyTritonBadParameterError, match="temperature: dtype=float64 expected_dtype=float32"):
            infer([req(x=[1.0])])

    def test_default_with_wrong_shape_is_rejected(self):
        @fill_optionals(temperature=np.array([[0.5]], np.float32))
        def infer(requests):
            return requests

        bind(infer, OPTIONALS_CONFIG)
        with pytest.raises(PyTritonBadParameterError, match=r"shape=\(1, 1\) expected_shape=\(1,\)"):
            infer([req(x=[1.0])])

    def test_non_numpy_default_is_rejected_at_decoration(self):
        with pytest.raises(PyTritonBadParameterError, match="must be numpy arrays, got temperature=0.5"):
            fill_optionals(temperature=0.5)

    def test_below_batch_is_rejected(self):
        @batch
        @fill_optionals(temperature=np.array([0.5], np.float32))
        def infer(x):
            return {"y": x}

        bind(infer, OPTIONALS_CONFIG)
        with pytest.raises(PyTritonValidationError, match="Place @fill_optionals above @batch"):
            infer([req(x=[1.0])])

    def test_request_without_inputs_is_rejected(self):
        @fill_optionals(temperature=np.array([0.5], np.float32))
        def infer(requests):
            return requests

        bind(infer, OPTIONALS_CONFIG)
        with pytest.raises(PyTritonValidationError, match="send at least one input"):
            infer([Request({})])


class TestFirstValue:
    def test_below_batch_replaces_inputs_with_scalars(self):
        received = {}

        @batch
        @first_value("temperature", "absent")
        def infer(x, temperature):
            received["temperature"] = temperature
            return {"y": x * temperature}

        bind(infer, OPTIONALS_CONFIG)
        responses = infer([req(x=[1.0, 2.0], temperature=np.array([[0.5], [0.5]], np.float32))])
        assert received["temperature"] == np.float32(0.5) and np.ndim(received["temperature"]) == 0
        assert responses[0]["y"].tolist() == [0.5, 1.0]

    def test_on_requests_without_squeezing(self):
        @first_value("temperature", squeeze_single_values=False)
        def infer(requests):
            return requests

        bind(infer, OPTIONALS_CONFIG)
        result = infer([req(x=[1.0, 2.0], temperature=[[0.5], [0.5]]), req(x=[3.0])])
        assert result[0]["temperature"].tolist() == [0.5]
        assert "temperature" not in result[1]

    def test_strict_rejects_unequal_values(self):
        @batch
        @first_value("temperature")
        def infer(x, temperature):
            return {"y": x}

        bind(infer, OPTIONALS_CONFIG)
        with pytest.raises(PyTritonRuntimeError, match="values on the 'temperature' input are not equal"):
            infer([req(x=[1.0, 2.0], temperature=np.array([[0.5], [0.7]], np.float32))])

    def test_not_strict_takes_the_first_value(self):
        @batch
        @first_value("tag", strict=False)
        def infer(x, tag):
            return {"y": np.full(len(x), len(tag))}

        bind(infer, OPTIONALS_CONFIG)
        responses = infer([req(x=[1.0, 2.0], tag=np.array([[b"abc"], [b"d"]], dtype=object))])
        assert responses[0]["y"].tolist() == [3, 3]

    def test_model_without_batching_is_rejected(self):
        config = dataclasses.replace(OPTIONALS_CONFIG, batching=False, max_batch_size=0, batcher=None)

        @first_value("temperature")
        def infer(requests):
            return requests

        bind(infer, config)
        with pytest.raises(PyTritonRuntimeError, match="only be used with models that support batching"):
            infer([req(x=[1.0])])

    def test_special_key_is_rejected_at_decoration(self):
        with pytest.raises(PyTritonBadParameterError, match="triton_context are not allowed"):
            first_value("triton_context")


class TestTritonContext:
    def test_passes_the_context_with_the_model_config(self):
        seen = []

        class Model:
            @triton_context
            @batch
            def __call__(self, x, triton_context):
                seen.append(triton_context.model_configs[self])
                return {"y": x}

        model = Model()
        context = bind(model, XY_CONFIG)
        model([req(x=[1.0])])
        assert seen == [XY_CONFIG] and model.__triton_context__ is context
