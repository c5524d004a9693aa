"""Tensors checked against a model's configuration: one rule for dtypes and one for shapes.

Both ``strict=True`` output validation (run on every response by the callable's worker) and ``@fill_optionals``
(checking its defaults against the inputs) use these, so a tensor that one accepts the other accepts too.

- dtype: equal numpy dtypes; a BYTES tensor (declared ``np.bytes_`` or ``object``) takes any bytes, object
  or str array (:func:`~tritonrt.model_config.dtypes.is_bytes_dtype`).
- shape: as many axes as declared, each of the declared size, or any size where ``-1`` is declared.

Example::

    dtype_matches(np.object_, np.array(["text"]).dtype)  # True: a str array carries BYTES
    shape_matches((-1, 3), (5, 3))                       # True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.model_config.dtypes import is_bytes_dtype
from tritonrt.model_config.triton_model_config import TritonModelConfig

__all__ = ["dtype_matches", "shape_matches", "validate_outputs"]


def dtype_matches(expected: Any, actual: np.dtype) -> bool:
    """True when an array of dtype ``actual`` fits a tensor declared with dtype ``expected``."""
    expected_dtype = np.dtype(expected)
    if is_bytes_dtype(expected_dtype):
        return is_bytes_dtype(actual)
    return bool(expected_dtype == actual)


def shape_matches(expected: Sequence[int], actual: Sequence[int]) -> bool:
    """True when ``actual`` has the declared number of axes, each of the declared size (``-1``: any)."""
    return len(expected) == len(actual) and all(e == -1 or e == a for e, a in zip(expected, actual, strict=True))


def validate_outputs(config: TritonModelConfig, responses: Sequence[Mapping[str, Any]]) -> None:
    """The ``strict=True`` check of a callable's responses: every output declared, a numpy array of the
    declared dtype and shape (after the batch axis when the model batches).

    Raises PyTritonValidationError naming the model, the output, what was expected and what came.
    """
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
            if not dtype_matches(spec.dtype, value.dtype):
                raise PyTritonValidationError(
                    f"Model {config.model_name!r}: output {name!r} has dtype {value.dtype}, expected "
                    f"{np.dtype(spec.dtype)}."
                )
            shape = value.shape[1:] if config.batching else value.shape
            if not shape_matches(spec.shape, shape):
                axis = " (after the batch axis)" if config.batching else ""
                raise PyTritonValidationError(
                    f"Model {config.model_name!r}: output {name!r} has shape {tuple(shape)}{axis}, expected "
                    f"{tuple(spec.shape)} (-1 = any size)."
                )
