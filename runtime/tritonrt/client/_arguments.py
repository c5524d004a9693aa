"""Checks of what callers pass to ``infer_sample``/``infer_batch``, and mapping of inputs to model inputs.

Example::

    verify_inputs_args((a, b), {})                      # positional: fine
    call = InferCall((a, b), {}, None, None, sample=True)  # the same checks, and parameters/headers too
    named = map_inputs((a, b), {}, model_config)       # {"INPUT_1": a, "INPUT_2": b}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from tritonrt.client.exceptions import (
    PyTritonClientModelDoesntSupportBatchingError,
    PyTritonClientValueError,
)
from tritonrt.model_config.dtypes import is_bytes_dtype
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = [
    "InferCall",
    "add_batch_axis",
    "headers_as_strings",
    "map_inputs",
    "remove_batch_axis",
    "require_batching",
    "verify_inputs_args",
    "verify_parameters",
]


def verify_inputs_args(inputs: tuple[Any, ...], named_inputs: Mapping[str, Any]) -> None:
    """Raise PyTritonClientValueError when no inputs are given, or positional and named ones are mixed."""
    if not inputs and not named_inputs:
        raise PyTritonClientValueError(
            "No inputs given: pass numpy arrays positionally, in the order of the model inputs, "
            "or by input name, e.g. infer_sample(x) or infer_sample(INPUT=x)."
        )
    if inputs and named_inputs:
        raise PyTritonClientValueError(
            f"Mixed positional and named inputs ({len(inputs)} positional, named: "
            f"{', '.join(named_inputs)}): pass all inputs positionally or all by name, not both."
        )


def verify_parameters(values: Mapping[str, Any] | None, what: str) -> None:
    """Check ``parameters`` or ``headers``: a dict of str keys to str/int/bool (and float for parameters)."""
    if values is None:
        return
    if not isinstance(values, Mapping):
        raise PyTritonClientValueError(f"{what} must be a dict of names to values, got {type(values).__name__}.")
    allowed = (str, int, bool, float) if what == "parameters" else (str, int, bool)
    allowed_names = ", ".join(kind.__name__ for kind in allowed)
    for key, value in values.items():
        if not isinstance(key, str):
            raise PyTritonClientValueError(f"{what} names must be strings, got {key!r}.")
        if not isinstance(value, allowed):
            raise PyTritonClientValueError(
                f"{what}[{key!r}] is a {type(value).__name__}; values must be one of: {allowed_names}."
            )


@dataclasses.dataclass(frozen=True)
class InferCall:
    """The arguments of one ``infer_sample``/``infer_batch`` call, checked when it is made.

    Example::

        call = InferCall((a, b), {}, parameters=None, headers={"x-trace": "1"}, sample=True)
    """

    inputs: tuple[Any, ...]
    named_inputs: Mapping[str, Any]
    parameters: Mapping[str, Any] | None
    headers: Mapping[str, Any] | None
    sample: bool

    def __post_init__(self) -> None:
        verify_inputs_args(self.inputs, self.named_inputs)
        verify_parameters(self.parameters, "parameters")
        verify_parameters(self.headers, "headers")


def headers_as_strings(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """Header values as strings (booleans as ``true``/``false``), keys lower-cased as gRPC requires."""
    if not headers:
        return {}
    return {
        key.lower(): (str(value).lower() if isinstance(value, bool) else str(value)) for key, value in headers.items()
    }


def require_batching(model_config: TritonModelConfig) -> None:
    """Raise PyTritonClientModelDoesntSupportBatchingError for a model with ``max_batch_size`` 0."""
    if not model_config.batching:
        raise PyTritonClientModelDoesntSupportBatchingError(
            f"Model {model_config.model_name!r} doesn't support batching (its max_batch_size is 0): "
            "use infer_sample() and pass inputs without a batch axis."
        )


def map_inputs(
    inputs: tuple[Any, ...], named_inputs: Mapping[str, Any], model_config: TritonModelConfig
) -> dict[str, np.ndarray]:
    """Name the inputs after the model's inputs and check them against its config.

    Raises PyTritonClientValueError for too many positional inputs, unknown names, a missing required
    input, non-array values and dtypes that differ from the model's.
    """
    model = model_config.model_name
    specs = {spec.name: spec for spec in model_config.inputs}
    names = ", ".join(specs) or "(none)"
    if inputs:
        if len(inputs) > len(specs):
            raise PyTritonClientValueError(
                f"Model {model!r} has {len(specs)} inputs ({names}) but {len(inputs)} positional inputs were given."
            )
        named = dict(zip(specs, inputs, strict=False))
    else:
        named = dict(named_inputs)
    for name, value in named.items():
        if name not in specs:
            raise PyTritonClientValueError(f"Model {model!r} has no input {name!r}; its inputs are: {names}.")
        named[name] = _check_array(model, name, value, specs[name].dtype)
    missing = [spec.name for spec in model_config.inputs if spec.name not in named and not spec.optional]
    if missing:
        raise PyTritonClientValueError(
            f"Model {model!r} needs input(s) {', '.join(missing)} that were not given; its inputs are: {names}."
        )
    return named


def _check_array(model: str, name: str, value: Any, expected: type) -> np.ndarray:
    if not isinstance(value, np.ndarray):
        raise PyTritonClientValueError(
            f"Input {name!r} of model {model!r} is a {type(value).__name__}; pass a numpy array "
            "(e.g. np.asarray(value, dtype=...))."
        )
    expected_dtype: np.dtype = np.dtype(expected)
    if is_bytes_dtype(expected_dtype):
        if not is_bytes_dtype(value.dtype):
            raise PyTritonClientValueError(
                f"Input {name!r} of model {model!r} holds bytes but got dtype {value.dtype}; pass an array "
                "of bytes (np.bytes_ or object) or of str."
            )
        if value.dtype.kind == "U":
            return np.char.encode(value, "utf-8")
        return value
    if value.dtype != expected_dtype:
        raise PyTritonClientValueError(
            f"Input {name!r} of model {model!r} must have dtype {expected_dtype}, got {value.dtype}; "
            f"convert it with .astype(np.{expected_dtype})."
        )
    return value


def add_batch_axis(named: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One sample -> a batch of one."""
    return {name: value[np.newaxis, ...] for name, value in named.items()}


def remove_batch_axis(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A batch of one -> one sample."""
    return {name: value[0] for name, value in outputs.items()}
