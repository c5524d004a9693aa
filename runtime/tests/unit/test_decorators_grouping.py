"""Unit tests of tritonrt.decorators.grouping: @group_by_keys, @group_by_values and ConstantPadder."""

from __future__ import annotations

import numpy as np
import pytest
from decorators_testlib import bind, make_config, req

from tritonrt.decorators import (
    ConstantPadder,
    batch,
    group_by_keys,
    group_by_values,
)
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError, PyTritonValidationError


class TestGroupByKeys:
    def test_groups_requests_by_input_names_and_restores_order(self):
        groups = []

        @group_by_keys
        @batch
        def infer(x, z=None):
            groups.append(sorted(["x"] + (["z"] if z is not None else [])))
            return {"y": x if z is None else x + z}

        responses = infer([req(x=[1.0]), req(x=[2.0], z=[10.0]), req(x=[3.0]), req(z=[30.0], x=[4.0])])
        assert groups == [["x"], ["x", "z"]]
        assert [r["y"].tolist() for r in responses] == [[1.0], [12.0], [3.0], [34.0]]

    def test_single_group_calls_once_with_the_original_list(self):
        received = []

        @group_by_keys
        def infer(requests):
            received.append(requests)
            return [{"y": r["x"]} for r in requests]

        requests = [req(x=[1.0]), req(x=[2.0])]
        infer(requests)
        assert received == [requests] and received[0] is requests

    def test_wrong_number_of_responses_is_rejected(self):
        @group_by_keys
        def infer(requests):
            return [{"y": requests[0]["x"]}]

        with pytest.raises(PyTritonValidationError, match="returned 1 responses for a group of 2"):
            infer([req(x=[1.0]), req(x=[2.0], z=[1.0]), req(x=[3.0])])

    async def test_async_groups_are_awaited_and_merged(self):
        @group_by_keys
        @batch
        async def infer(**inputs):
            return {"y": sum(inputs.values())}

        responses = await infer([req(x=[1.0]), req(x=[2.0], z=[5.0])])
        assert [r["y"].tolist() for r in responses] == [[1.0], [7.0]]

    async def test_async_generator_groups_are_merged_in_lockstep(self):
        @group_by_keys
        @batch
        async def infer(**inputs):
            for step in range(2):
                yield {"y": sum(inputs.values()) + step}

        steps = [step async for step in infer([req(x=[1.0]), req(x=[2.0], z=[5.0])])]
        assert [[r["y"].tolist() for r in step] for step in steps] == [[[1.0], [7.0]], [[2.0], [8.0]]]

    def test_generator_groups_are_merged_in_lockstep(self):
        @group_by_keys
        @batch
        def infer(**inputs):
            yield {"y": sum(inputs.values())}
            yield {"y": -sum(inputs.values())}

        steps = list(infer([req(x=[1.0]), req(x=[2.0], z=[5.0]), req(x=[3.0])]))
        assert [[r["y"].tolist() for r in step] for step in steps] == [
            [[1.0], [7.0], [3.0]],
            [[-1.0], [-7.0], [-3.0]],
        ]


class TestGroupByValues:
    def test_splits_by_values_and_merges_rows_back_in_order(self):
        calls = []

        @batch
        @group_by_values("mode")
        def infer(x, mode):
            calls.append((x.ravel().tolist(), mode.ravel().tolist()))
            return {"y": x * mode}

        responses = infer([req(x=[[1.0], [2.0]], mode=[[1.0], [2.0]]), req(x=[[3.0], [4.0]], mode=[[1.0], [2.0]])])
        # PyTriton 0.7's order: rows compare by their bytes (float32 2.0 is 00 00 00 40, 1.0 is 00 00 80 3f)
        assert calls == [([2.0, 4.0], [2.0, 2.0]), ([1.0, 3.0], [1.0, 1.0])]
        assert [r["y"].ravel().tolist() for r in responses] == [[1.0, 4.0], [3.0, 8.0]]

    def test_groups_by_bytes_values(self):
        calls = []

        @batch
        @group_by_values("name")
        def infer(name):
            calls.append(name.tolist())
            return {"y": np.full(len(name), len(name[0][0]), dtype=np.int32)}

        names = np.array([[b"ab"], [b"c"], [b"ab"]], dtype=object)
        responses = infer([req(name=names)])
        assert calls == [[[b"c"]], [[b"ab"], [b"ab"]]]  # serialized with their lengths: shorter first
        assert responses[0]["y"].tolist() == [2, 1, 2]

    def test_by_several_keys_with_tuple_outputs(self):
        config = make_config([("a", (1,), np.int32, False), ("b", (1,), np.int32, False)], [("y", (1,), np.int32)])

        @batch
        @group_by_values("a", "b")
        def infer(a, b):
            return (a * 100 + b + len(a) * 1000,)

        bind(infer, config)
        responses = infer([req(a=[[1], [1], [2], [1]], b=[[1], [2], [1], [1]])])
        assert responses[0]["y"].ravel().tolist() == [2101, 1102, 1201, 2101]

    def test_outputs_of_different_shapes_need_pad_fn(self):
        def make(pad_fn):
            @batch
            @group_by_values("n", pad_fn=pad_fn)
            def infer(n):
                return {"y": np.ones((len(n), int(n[0][0])), dtype=np.float32)}

            return infer

        requests = [req(n=[[1], [3]])]
        with pytest.raises(PyTritonValidationError, match=r"pad_fn=ConstantPadder\(0\)"):
            make(None)(requests)
        padded = make(ConstantPadder(0))(requests)[0]["y"]
        np.testing.assert_array_equal(padded, [[1, 0, 0], [1, 1, 1]])

    def test_above_batch_is_rejected(self):
        @group_by_values("x")
        @batch
        def infer(x):
            return {"y": x}

        with pytest.raises(PyTritonRuntimeError, match="Place it below @batch"):
            infer([req(x=[1.0])])

    def test_unknown_key_is_rejected(self):
        @batch
        @group_by_values("temperature")
        def infer(x):
            return {"y": x}

        with pytest.raises(PyTritonValidationError, match=r"'temperature': no such batched input \(inputs: x\)"):
            infer([req(x=[1.0])])

    def test_bad_arguments_are_rejected_at_decoration(self):
        with pytest.raises(PyTritonBadParameterError, match="must be input names"):
            group_by_values(1)
        with pytest.raises(PyTritonBadParameterError, match="pad_fn .* must be callable"):
            group_by_values("x", pad_fn=0)

    async def test_async_groups_are_gathered(self):
        @batch
        @group_by_values("mode")
        async def infer(x, mode):
            return {"y": x + mode}

        responses = await infer([req(x=[[0.0], [0.0], [0.0]], mode=[[1.0], [2.0], [1.0]])])
        assert responses[0]["y"].ravel().tolist() == [1.0, 2.0, 1.0]

    def test_generator_groups_are_merged_in_lockstep(self):
        @batch
        @group_by_values("mode")
        def infer(x, mode):
            yield {"y": x + mode}
            yield {"y": x - mode}

        steps = list(infer([req(x=[[0.0], [0.0]], mode=[[1.0], [2.0]])]))
        assert [step[0]["y"].ravel().tolist() for step in steps] == [[1.0, 2.0], [-1.0, -2.0]]


class TestConstantPadder:
    def test_constant_padder_pads_numbers_and_bytes(self):
        padded = ConstantPadder(-1)(
            [
                {"y": np.ones((1, 2), np.float32), "s": np.array([[b"a"]], dtype=object)},
                {"y": np.ones((2, 3), np.float32), "s": np.array([[b"bb", b"c"]], dtype=object)},
                {"t": np.array([b"xyz"])},
            ]
        )
        np.testing.assert_array_equal(padded[0]["y"], [[1, 1, -1]])
        assert padded[1]["y"].shape == (2, 3)
        assert padded[0]["s"].tolist() == [[b"a", b""]]
        assert padded[2] == {"t": padded[2]["t"]} and padded[2]["t"].tolist() == [b"xyz"]

    def test_constant_padder_widens_bytes_dtype(self):
        padded = ConstantPadder()([{"s": np.array([b"a"])}, {"s": np.array([b"abc"])}])
        assert padded[0]["s"].dtype == np.dtype("S3") and padded[1]["s"].dtype == np.dtype("S3")

    def test_constant_padder_rejects_different_dtypes(self):
        with pytest.raises(PyTritonRuntimeError, match="same dtype"):
            ConstantPadder()([{"y": np.ones((1, 1), np.float32)}, {"y": np.ones((1, 1), np.int32)}])
