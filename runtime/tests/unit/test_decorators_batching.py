"""Unit tests of tritonrt.decorators.batching: @batch, @sample and @pad_batch."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest
from decorators_testlib import XY_CONFIG, bind, make_config, req

from tritonrt.decorators import (
    batch,
    pad_batch,
    sample,
)
from tritonrt.exceptions import PyTritonRuntimeError, PyTritonValidationError
from tritonrt.model_config.common import DynamicBatcher


class TestBatch:
    def test_concatenates_and_splits_by_request_sizes(self):
        calls = []

        @batch
        def infer(x, z):
            calls.append((x.copy(), z.copy()))
            return {"y": x + z}

        responses = infer([req(x=[[1.0], [2.0]], z=[[10.0], [20.0]]), req(x=[[3.0]], z=[[30.0]])])
        np.testing.assert_array_equal(calls[0][0], [[1.0], [2.0], [3.0]])
        assert len(responses) == 2
        np.testing.assert_array_equal(responses[0]["y"], [[11.0], [22.0]])
        np.testing.assert_array_equal(responses[1]["y"], [[33.0]])

    def test_list_outputs_are_named_by_the_model_config(self):
        @batch
        def infer(x):
            return (x * 2,)

        bind(infer, XY_CONFIG)
        assert list(infer([req(x=[1.0])])[0]) == ["y"]

    def test_method_and_callable_object(self):
        class Model:
            def __init__(self, factor):
                self.factor = factor

            @batch
            def infer(self, x):
                return [x * self.factor]

            @batch
            def __call__(self, x):
                return [x + self.factor]

        method_model, object_model = Model(3.0), Model(5.0)
        bind(method_model.infer, XY_CONFIG)
        bind(object_model, XY_CONFIG)
        np.testing.assert_array_equal(method_model.infer([req(x=[2.0])])[0]["y"], [6.0])
        np.testing.assert_array_equal(object_model([req(x=[2.0])])[0]["y"], [7.0])

    def test_keeps_extra_keyword_arguments(self):
        @batch
        def infer(x, scale):
            return {"y": x * scale}

        np.testing.assert_array_equal(infer([req(x=[2.0])], scale=4.0)[0]["y"], [8.0])

    def test_requests_with_different_inputs_are_rejected(self):
        @batch
        def infer(**inputs):
            return inputs

        with pytest.raises(PyTritonValidationError, match="Put @group_by_keys above @batch"):
            infer([req(x=[1.0]), req(x=[1.0], z=[2.0])])

    def test_inconsistent_batch_sizes_in_one_request_are_rejected(self):
        @batch
        def infer(**inputs):
            return inputs

        with pytest.raises(PyTritonValidationError, match="x has 2, z has 1 rows"):
            infer([req(x=[1.0, 2.0], z=[3.0])])

    def test_inputs_of_different_sample_shapes_are_rejected(self):
        @batch
        def infer(**inputs):
            return inputs

        with pytest.raises(PyTritonValidationError, match=r"Cannot batch input 'x'.*\(1, 2\), \(1, 3\)"):
            infer([req(x=[[1.0, 2.0]]), req(x=[[1.0, 2.0, 3.0]])])

    @pytest.mark.parametrize("rows", [1, 4])
    def test_output_with_other_rows_than_the_batch_is_a_value_error(self, rows):
        @batch
        def infer(x):
            return {"y": np.resize(x, rows), "z": x}

        with pytest.raises(ValueError, match=rf"batch \(3 rows\), but 'y' has shape \({rows},\)"):  # as PyTriton 0.7
            infer([req(x=[1.0, 2.0]), req(x=[3.0])])

    def test_output_without_batch_axis_is_rejected(self):
        @batch
        def infer(x):
            return {"y": np.float32(1.0)}

        with pytest.raises(PyTritonValidationError, match="'y' must be a numpy array with one row per input row"):
            infer([req(x=[1.0, 2.0])])

    def test_applied_twice_is_rejected_with_placement_advice(self):
        @batch
        @batch
        def infer(x):
            return {"y": x}

        with pytest.raises(PyTritonValidationError, match=r"got keyword inputs \(x\).*at most once"):
            infer([req(x=[1.0])])

    def test_empty_request_list_is_rejected(self):
        with pytest.raises(PyTritonValidationError, match="empty list of requests"):
            batch(lambda **inputs: inputs)([])

    async def test_async_callable_returns_awaitable_of_split_responses(self):
        @batch
        async def infer(x):
            return {"y": x * 2}

        assert inspect.iscoroutinefunction(infer)
        pending = infer([req(x=[1.0]), req(x=[2.0, 3.0])])
        assert inspect.isawaitable(pending)
        responses = await pending
        np.testing.assert_array_equal(responses[1]["y"], [4.0, 6.0])

    def test_generator_yields_split_responses_per_step(self):
        @batch
        def infer(x):
            for step in range(3):
                yield {"y": x + step}

        assert inspect.isgeneratorfunction(infer)
        steps = list(infer([req(x=[0.0]), req(x=[10.0])]))
        assert len(steps) == 3
        assert [[r["y"].tolist() for r in step] for step in steps] == [
            [[0.0], [10.0]],
            [[1.0], [11.0]],
            [[2.0], [12.0]],
        ]

    async def test_async_generator_yields_split_responses_per_step(self):
        @batch
        async def infer(x):
            yield [x]
            yield [x * 10]

        assert inspect.isasyncgenfunction(infer)
        bind(infer, XY_CONFIG)
        steps = [step async for step in infer([req(x=[1.0]), req(x=[2.0])])]
        assert [[r["y"].tolist() for r in step] for step in steps] == [[[1.0], [2.0]], [[10.0], [20.0]]]


class TestSample:
    def test_calls_once_per_request_with_keyword_inputs(self):
        calls = []

        @sample
        def infer(x):
            calls.append(x.tolist())
            return [x * 2]

        bind(infer, make_config([("x", (-1,), np.float32, False)], [("y", (-1,), np.float32)], batching=False))
        responses = infer([req(x=[1.0, 2.0]), req(x=[3.0])])
        assert calls == [[1.0, 2.0], [3.0]]
        assert [r["y"].tolist() for r in responses] == [[2.0, 4.0], [6.0]]

    async def test_async(self):
        @sample
        async def infer(x):
            return {"y": x + 1}

        responses = await infer([req(x=[1.0])])
        assert responses[0]["y"].tolist() == [2.0]

    def test_generator_streams_of_different_lengths_are_rejected(self):
        @sample
        def infer(x):
            for _ in range(int(x[0])):
                yield {"y": x}

        stream = infer([req(x=[1.0]), req(x=[2.0])])
        assert len(next(stream)) == 2
        with pytest.raises(PyTritonValidationError, match="yielded different numbers of results"):
            next(stream)

    def test_below_batch_is_rejected(self):
        @batch
        @sample
        def infer(x):
            return {"y": x}

        with pytest.raises(PyTritonValidationError, match="Place @sample above @batch"):
            infer([req(x=[1.0])])


class TestPadBatch:
    @pytest.mark.parametrize(("rows", "padded_to"), [(2, 4), (4, 4), (5, 8), (8, 8)])
    def test_pads_to_the_next_preferred_or_max_batch_size(self, rows, padded_to):
        seen = []

        @batch
        @pad_batch
        def infer(x):
            seen.append(x.tolist())
            return {"y": x * 2}

        bind(infer, dataclasses.replace(XY_CONFIG, batcher=DynamicBatcher(preferred_batch_size=[4])))
        responses = infer([req(x=list(range(rows)))])
        assert seen[0] == list(range(rows)) + [rows - 1] * (padded_to - rows)
        assert responses[0]["y"].tolist() == [2 * i for i in range(rows)]  # padded rows are dropped

    def test_batch_above_max_batch_size_is_rejected(self):
        @batch
        @pad_batch
        def infer(x):
            return {"y": x}

        bind(infer, XY_CONFIG)
        with pytest.raises(PyTritonValidationError, match="9 rows, more than the largest allowed size 8"):
            infer([req(x=list(range(9)))])

    def test_above_batch_is_rejected(self):
        @pad_batch
        @batch
        def infer(x):
            return {"y": x}

        bind(infer, XY_CONFIG)
        with pytest.raises(PyTritonRuntimeError, match="Place it below @batch"):
            infer([req(x=[1.0])])
