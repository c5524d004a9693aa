"""Unit tests of tritonrt.decorators with real Request objects and TritonModelConfig (no server)."""

from __future__ import annotations

import dataclasses
import functools
import inspect

import numpy as np
import pytest
import wrapt

from tritonrt.decorators import (
    ConstantPadder,
    ModelConfigDict,
    TritonContext,
    batch,
    bind_triton_context,
    convert_output,
    fill_optionals,
    first_value,
    get_inference_request_batch_size,
    get_model_config,
    get_triton_context,
    group_by_keys,
    group_by_values,
    pad_batch,
    sample,
    triton_context,
)
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError, PyTritonValidationError
from tritonrt.model_config.common import DynamicBatcher
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig
from tritonrt.proxy.types import Request


def make_config(inputs, outputs, *, batching=True, max_batch_size=8, preferred=None) -> TritonModelConfig:
    return TritonModelConfig(
        model_name="model",
        batching=batching,
        max_batch_size=max_batch_size if batching else 0,
        batcher=DynamicBatcher(preferred_batch_size=preferred) if batching else None,
        inputs=[TensorSpec(name, shape, dtype, optional) for name, shape, dtype, optional in inputs],
        outputs=[TensorSpec(name, shape, dtype) for name, shape, dtype in outputs],
    )


def bind(infer_callable, config: TritonModelConfig) -> TritonContext:
    """What Triton.bind does for the decorators: attach the context, register the config."""
    context = TritonContext()
    bind_triton_context(infer_callable, context)
    context.model_configs[infer_callable] = config
    return context


def req(**inputs) -> Request:
    return Request({name: np.asarray(value) for name, value in inputs.items()})


XY_CONFIG = make_config([("x", (-1,), np.float32, False)], [("y", (-1,), np.float32)])


@wrapt.decorator
def passthrough(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)


# --- ModelConfigDict and the binding contract -------------------------------------------------------------


class TestModelConfigDict:
    def test_function_wrapped_by_several_decorators_resolves_from_every_layer(self):
        def raw(requests):
            return requests

        decorated = passthrough(passthrough(raw))
        configs = ModelConfigDict()
        configs[decorated] = XY_CONFIG
        assert configs[raw] is XY_CONFIG
        assert configs[decorated.__wrapped__] is XY_CONFIG
        assert list(configs) == [decorated] and len(configs) == 1

    def test_functools_wraps_layer_resolves_to_the_inner_function(self):
        def raw(requests):
            return requests

        @functools.wraps(raw)
        def outer(requests):
            return raw(requests)

        configs = ModelConfigDict()
        configs[outer] = XY_CONFIG
        assert configs[raw] is XY_CONFIG

    def test_bound_methods_resolve_per_object(self):
        class Model:
            @passthrough
            @passthrough
            def infer(self, requests):
                return requests

        first, second = Model(), Model()
        configs = ModelConfigDict()
        other = dataclasses.replace(XY_CONFIG, model_name="other")
        configs[first.infer] = XY_CONFIG
        configs[second.infer] = other
        assert configs[first.infer] is XY_CONFIG
        assert configs[first.infer.__wrapped__] is XY_CONFIG  # an inner decorator layer
        assert configs[second.infer] is other
        with pytest.raises(KeyError):
            configs[Model().infer]

    def test_callable_object_resolves_as_object_and_as_its_call_method(self):
        @dataclasses.dataclass  # eq=True makes instances unhashable
        class Model:
            scale: float = 1.0

            @passthrough
            def __call__(self, requests):
                return requests

        model = Model()
        configs = ModelConfigDict()
        configs[model] = XY_CONFIG
        assert configs[model.__call__] is XY_CONFIG
        assert configs[model.__call__.__wrapped__] is XY_CONFIG
        with pytest.raises(KeyError):
            configs[Model()]

    def test_delete_and_replace(self):
        def infer(requests):
            return requests

        configs = ModelConfigDict()
        configs[infer] = XY_CONFIG
        configs[passthrough(infer)] = XY_CONFIG  # the same callable: replaces, no second entry
        assert len(configs) == 1 and len(list(configs)) == 1
        del configs[infer]
        assert len(configs) == 0 and list(configs) == []


class TestBinding:
    def test_context_on_function_method_and_object(self):
        @batch
        def function(x):
            return {"y": x}

        class Model:
            @batch
            def infer(self, x):
                return {"y": x}

            @batch
            def __call__(self, x):
                return {"y": x}

        method_owner, callable_object = Model(), Model()
        for infer_callable, holder in (
            (function, function),
            (method_owner.infer, method_owner),
            (callable_object, callable_object),
        ):
            context = bind(infer_callable, XY_CONFIG)
            assert holder.__triton_context__ is context

    def test_context_set_on_every_functools_wraps_layer(self):
        @batch
        def raw(x):
            return [x]

        @functools.wraps(raw)
        def outer(requests):
            return raw(requests)

        bind(outer, XY_CONFIG)
        responses = outer([req(x=[1.0, 2.0])])  # list output needs the model config from inside @batch
        np.testing.assert_array_equal(responses[0]["y"], [1.0, 2.0])

    def test_object_without_attribute_dict_is_rejected_with_advice(self):
        class Slotted:
            __slots__ = ()

            def __call__(self, requests):
                return requests

        with pytest.raises(PyTritonBadParameterError, match="no __slots__"):
            bind_triton_context(Slotted(), TritonContext())

    def test_missing_context_says_to_bind(self):
        @triton_context
        def infer(requests, triton_context):
            return requests

        with pytest.raises(PyTritonValidationError, match=r"Triton\.bind"):
            infer([req(x=[1.0])])

    def test_get_triton_context_and_get_model_config_from_a_custom_decorator(self):
        seen = []

        @wrapt.decorator
        def record(wrapped, instance, args, kwargs):
            seen.append((get_triton_context(wrapped, instance), get_model_config(wrapped, instance)))
            return wrapped(*args, **kwargs)

        class Model:
            @record
            @batch
            def infer(self, x):
                return {"y": x}

        model = Model()
        context = bind(model.infer, XY_CONFIG)
        model.infer([req(x=[1.0])])
        assert seen == [(context, XY_CONFIG)]

    def test_helper_method_of_a_bound_object_finds_the_objects_config(self):
        class Model:
            def __call__(self, requests):
                return self.infer(requests)

            @batch
            def infer(self, x):
                return [x * 2]

        model = Model()
        bind(model, XY_CONFIG)
        np.testing.assert_array_equal(model([req(x=[1.0])])[0]["y"], [2.0])

    def test_unregistered_callable_with_context_says_to_bind(self):
        @batch
        def infer(x):
            return [x]

        bind_triton_context(infer, TritonContext())  # context attached, but no config registered
        with pytest.raises(PyTritonValidationError, match="No model config is registered"):
            infer([req(x=[1.0])])


# --- helpers --------------------------------------------------------------------------------------------


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


# --- @batch and @sample ---------------------------------------------------------------------------------


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


# --- grouping -------------------------------------------------------------------------------------------


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


# --- decorators that read the model config ---------------------------------------------------------------

OPTIONALS_CONFIG = make_config(
    [
        ("x", (-1,), np.float32, False),
        ("temperature", (1,), np.float32, True),
        ("tag", (1,), np.bytes_, True),
    ],
    [("y", (-1,), np.float32)],
)


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


# --- stacks ---------------------------------------------------------------------------------------------


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
