"""Unit tests of full decorator stacks: on a method in plain, async and streaming flavours, and under
@triton_context on a function.
"""

from __future__ import annotations

import inspect

import numpy as np
from decorators_testlib import OPTIONALS_CONFIG, XY_CONFIG, bind, req

from tritonrt.decorators import batch, fill_optionals, first_value, group_by_keys, group_by_values, triton_context


class Generator:
    """A model with a full stack on a method, in plain, async and streaming flavours."""

    def __init__(self):
        self.calls = []

    @fill_optionals(temperature=np.array([1.0], np.float32))
    @group_by_keys
    @batch
    @group_by_values("temperature")
    @first_value("temperature")
    def infer(self, x, temperature, tag=None):
        self.calls.append((x.ravel().tolist(), float(temperature), tag is not None))
        return {"y": x * temperature}

    @fill_optionals(temperature=np.array([1.0], np.float32))
    @group_by_keys
    @batch
    @group_by_values("temperature")
    @first_value("temperature")
    async def ainfer(self, x, temperature, tag=None):
        return {"y": x * temperature}

    @fill_optionals(temperature=np.array([1.0], np.float32))
    @group_by_keys
    @batch
    @group_by_values("temperature")
    @first_value("temperature")
    def stream(self, x, temperature, tag=None):
        for step in range(2):
            yield [x * temperature + step]


STACK_REQUESTS = [
    ({"x": [[1.0]], "temperature": np.array([[2.0]], np.float32)}, [2.0]),
    ({"x": [[1.0], [3.0]]}, [1.0, 3.0]),  # temperature filled with 1.0
    ({"x": [[5.0]], "temperature": np.array([[2.0]], np.float32), "tag": np.array([[b"a"]])}, [10.0]),
    ({"x": [[4.0]], "temperature": np.array([[3.0]], np.float32)}, [12.0]),
]


def stack_requests():
    return [req(**inputs) for inputs, _ in STACK_REQUESTS]


class TestStacks:
    def test_full_stack_on_a_method(self):
        model = Generator()
        bind(model.infer, OPTIONALS_CONFIG)
        responses = model.infer(stack_requests())
        assert [r["y"].ravel().tolist() for r in responses] == [expected for _, expected in STACK_REQUESTS]
        # requests without "tag" first (one batch, split by temperature in PyTriton's byte order of the
        # float32 values: 2.0, 3.0, 1.0), then the one with "tag"
        assert model.calls == [
            ([1.0], 2.0, False),
            ([4.0], 3.0, False),
            ([1.0, 3.0], 1.0, False),
            ([5.0], 2.0, True),
        ]

    async def test_full_stack_on_an_async_method(self):
        model = Generator()
        bind(model.ainfer, OPTIONALS_CONFIG)
        assert inspect.iscoroutinefunction(model.ainfer) and model.ainfer.__name__ == "ainfer"
        responses = await model.ainfer(stack_requests())
        assert [r["y"].ravel().tolist() for r in responses] == [expected for _, expected in STACK_REQUESTS]

    def test_full_stack_on_a_streaming_method(self):
        model = Generator()
        bind(model.stream, OPTIONALS_CONFIG)
        assert inspect.isgeneratorfunction(model.stream)
        steps = list(model.stream(stack_requests()))
        assert len(steps) == 2
        for step, offset in zip(steps, (0.0, 1.0), strict=True):
            expected = [[value + offset for value in values] for _, values in STACK_REQUESTS]
            assert [r["y"].ravel().tolist() for r in step] == expected

    def test_triton_context_on_top_of_a_stack_of_a_function(self):
        @triton_context
        @group_by_keys
        @batch
        def infer(x, triton_context, z=None):
            return [x * len(triton_context.model_configs[infer].outputs)]

        bind(infer, XY_CONFIG)
        responses = infer([req(x=[1.0]), req(x=[2.0], z=[0.0])])
        assert [r["y"].tolist() for r in responses] == [[1.0], [2.0]]
