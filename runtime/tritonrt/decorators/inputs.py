"""Inputs: defaults for missing optional inputs (@fill_optionals), per-batch parameters taken from their first
row (@first_value), and the callable's context as a keyword argument (@triton_context)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import wrapt

from tritonrt.context import TRITON_CONTEXT_FIELD_NAME, get_model_config, get_triton_context
from tritonrt.decorators._common import SPECIAL_KEYS, InferenceRequest, inputs_batch_size, requests_argument
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonRuntimeError, PyTritonValidationError
from tritonrt.model_config.checks import dtype_matches, shape_matches
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = ["fill_optionals", "first_value", "triton_context"]


def _check_defaults(defaults: dict[str, np.ndarray], model_config: TritonModelConfig) -> None:
    specs = {spec.name: spec for spec in model_config.inputs}
    unknown = sorted(set(defaults) - set(specs))
    if unknown:
        raise PyTritonBadParameterError(
            f"@fill_optionals has defaults for {', '.join(unknown)}, which model {model_config.model_name!r} "
            f"has no input named so (inputs: {', '.join(specs)}). Use the input names given to Triton.bind."
        )
    wrong_dtypes = [
        f"{name}: dtype={value.dtype} expected_dtype={np.dtype(specs[name].dtype)}"
        for name, value in defaults.items()
        if not dtype_matches(specs[name].dtype, value.dtype)
    ]
    if wrong_dtypes:
        raise PyTritonBadParameterError(
            f"@fill_optionals defaults do not match the input dtypes ({'; '.join(wrong_dtypes)}); "
            "create them with the input's dtype, e.g. np.array([0.7], dtype=np.float32)."
        )
    wrong_shapes = [
        f"{name}: shape={value.shape} expected_shape={specs[name].shape}"
        for name, value in defaults.items()
        if not shape_matches(specs[name].shape, value.shape)
    ]
    if wrong_shapes:
        raise PyTritonBadParameterError(
            f"@fill_optionals defaults do not match the input shapes ({'; '.join(wrong_shapes)}); give "
            "each default the shape of one sample, without the batch axis."
        )


def fill_optionals(**defaults: np.ndarray) -> Callable[[Callable[..., Any]], Any]:
    """Fill inputs missing from a request with default values (numpy arrays without the batch axis).

    With batching, a default is repeated to the request's batch size. Place it at the top of the stack,
    so @group_by_keys / @batch see complete requests. Defaults must match the bound inputs' dtype and
    shape (checked on each call, against the model config).

    Example::

        @fill_optionals(temperature=np.array([0.7], dtype=np.float32))
        @batch
        def infer(prompts, temperature):
            ...
    """
    not_arrays = [f"{name}={value!r}" for name, value in defaults.items() if not isinstance(value, np.ndarray)]
    if not_arrays:
        raise PyTritonBadParameterError(
            f"@fill_optionals defaults must be numpy arrays, got {', '.join(not_arrays)}; "
            "wrap them, e.g. np.array([0.7], dtype=np.float32)."
        )

    @wrapt.decorator
    def _fill_optionals(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        requests, _ = requests_argument(args, kwargs, "@fill_optionals")
        model_config = get_model_config(wrapped, instance)
        _check_defaults(defaults, model_config)
        for index, request in enumerate(requests):
            missing = [name for name in defaults if name not in request]
            if not missing:
                continue
            size = inputs_batch_size(request, index) if model_config.batching else None
            for name in missing:
                default = defaults[name]
                request[name] = default.copy() if size is None else np.repeat(default[np.newaxis], size, axis=0)
        return wrapped(*args, **kwargs)

    return _fill_optionals


def first_value(
    *keys: str, squeeze_single_values: bool = True, strict: bool = True
) -> Callable[[Callable[..., Any]], Any]:
    """Replace the selected batched inputs with their first row (for per-batch parameters).

    Below @batch it works on the keyword inputs; without @batch, on each request. Single-element rows
    become scalars unless ``squeeze_single_values=False``. With ``strict`` (default) all rows must be equal,
    otherwise PyTritonRuntimeError. Only for models with batching.

    Example::

        @batch
        @first_value("temperature")
        def infer(prompts, temperature):  # temperature is a scalar np.float32
            ...
    """
    not_allowed = [key for key in keys if key in SPECIAL_KEYS]
    if not_allowed:
        raise PyTritonBadParameterError(
            f"The keys {', '.join(not_allowed)} are not allowed as keys for @first_value wrapper. "
            f"The set of not allowed keys are {', '.join(SPECIAL_KEYS)}."
        )
    not_names = [key for key in keys if not isinstance(key, str)]
    if not_names:
        raise PyTritonBadParameterError(f"@first_value keys must be input names (str), got {not_names!r}.")

    def _first_values(inputs: dict[str, Any] | InferenceRequest) -> None:
        for name in keys:
            if name not in inputs:
                continue
            values = inputs[name]
            if np.ndim(values) == 0:
                raise PyTritonValidationError(f"@first_value input {name!r} has no batch axis to take from.")
            if strict and not np.all(values == values[0]):
                raise PyTritonRuntimeError(
                    f"The values on the {name!r} input are not equal. To proceed, either disable strict mode "
                    "in @first_value wrapper or ensure that the values always are consistent. "
                    f"The current values of {name!r} are {values!r}."
                )
            first = values[0]
            if squeeze_single_values and not np.isscalar(first) and all(dim == 1 for dim in first.shape):
                first = np.squeeze(first)[()]
            inputs[name] = first

    @wrapt.decorator
    def _first_value(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if not get_model_config(wrapped, instance).batching:
            raise PyTritonRuntimeError(
                "The @first_value decorator can only be used with models that support batching; "
                "bind the model with ModelConfig(batching=True) or drop @first_value."
            )
        if any(isinstance(value, np.ndarray) for value in kwargs.values()):
            kwargs = dict(kwargs)
            _first_values(kwargs)
            return wrapped(*args, **kwargs)
        requests, _ = requests_argument(args, kwargs, "@first_value")
        for request in requests:
            _first_values(request)
        return wrapped(*args, **kwargs)

    return _first_value


@wrapt.decorator
def triton_context(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Pass the TritonContext as the ``triton_context`` keyword argument.

    Its ``model_configs`` maps the bound callable to its model config.

    Example::

        @triton_context
        @batch
        def infer(triton_context, **inputs):
            config = triton_context.model_configs[infer]
            ...
    """
    kwargs[TRITON_CONTEXT_FIELD_NAME] = get_triton_context(wrapped, instance)
    return wrapped(*args, **kwargs)
