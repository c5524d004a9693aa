"""Unit tests of the callable's context (tritonrt.context): ModelConfigDict and the binding contract that the
decorators rely on.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import wrapt
from decorators_testlib import XY_CONFIG, bind, req

from tritonrt.decorators import (
    ModelConfigDict,
    TritonContext,
    batch,
    bind_triton_context,
    get_model_config,
    get_triton_context,
    triton_context,
)
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonValidationError


@wrapt.decorator
def passthrough(wrapped, instance, args, kwargs):
    return wrapped(*args, **kwargs)


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
