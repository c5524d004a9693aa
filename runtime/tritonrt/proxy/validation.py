"""``strict=True`` output checks: names, dtypes and shapes against the model config."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.models.spec import TritonModelConfig


def _dtype_matches(expected: type, actual: np.dtype) -> bool:
    if np.dtype(expected).kind in "OSU":
        return actual.kind in "OSU"
    return np.dtype(expected) == actual


def _shape_matches(expected: Sequence[int], actual: Sequence[int]) -> bool:
    return len(expected) == len(actual) and all(e == -1 or e == a for e, a in zip(expected, actual, strict=True))


def validate_outputs(config: TritonModelConfig, responses: Sequence[dict]) -> None:
    """Raise PyTritonValidationError naming the model, the output, what was expected and what came."""
    specs = {spec.name: spec for spec in config.outputs}
    for response in responses:
        for name, value in response.items():
            spec = specs.get(name)
            if spec is None:
                raise PyTritonValidationError(
                    f"Model {config.model_name!r}: output {name!r} is not declared; declared outputs: "
                    f"{', '.join(sorted(specs)) or 'none'}."
                )
            if not isinstance(value, np.ndarray):
                raise PyTritonValidationError(
                    f"Model {config.model_name!r}: output {name!r} must be a numpy array, got {type(value).__name__}."
                )
            if not _dtype_matches(spec.dtype, value.dtype):
                raise PyTritonValidationError(
                    f"Model {config.model_name!r}: output {name!r} has dtype {value.dtype}, expected "
                    f"{np.dtype(spec.dtype)}."
                )
            shape = value.shape[1:] if config.batching else value.shape
            if not _shape_matches(spec.shape, shape):
                axis = " (after the batch axis)" if config.batching else ""
                raise PyTritonValidationError(
                    f"Model {config.model_name!r}: output {name!r} has shape {tuple(shape)}{axis}, expected "
                    f"{tuple(spec.shape)} (-1 = any size)."
                )
