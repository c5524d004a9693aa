"""A model's tensors as the load test needs them, read from Triton's model configuration.

Example::

    spec = ModelSpec.from_config({"name": "m", "max_batch_size": 8,
                                  "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1]}],
                                  "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1]}]})
    spec.inputs[0].datatype  # "FP32"
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from loadtests.errors import LoadTestSetupError

# KServe v2 datatype -> the numpy dtype tritonclient uses for it (BF16 travels as float32 arrays).
NUMPY_DTYPES: dict[str, np.dtype] = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BF16": np.dtype(np.float32),
    "BYTES": np.dtype(object),
}


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """One input or output: KServe v2 ``datatype`` (``"FP32"``, ``"BYTES"``...) and ``dims`` without the batch axis."""

    name: str
    datatype: str
    dims: tuple[int, ...]
    optional: bool = False

    @property
    def numpy_dtype(self) -> np.dtype:
        return NUMPY_DTYPES[self.datatype]


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """What a load test must know about a model: its tensors, whether it batches, whether it streams."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int = 0
    decoupled: bool = False

    @property
    def batched(self) -> bool:
        return self.max_batch_size > 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> ModelSpec:
        """Read Triton's JSON model configuration (HTTP ``/v2/models/<m>/config`` or gRPC ``as_json``)."""
        name = str(config.get("name", ""))
        policy = config.get("model_transaction_policy") or {}
        spec = cls(
            name=name,
            inputs=tuple(_tensor(name, "input", t) for t in config.get("input", [])),
            outputs=tuple(_tensor(name, "output", t) for t in config.get("output", [])),
            max_batch_size=int(config.get("max_batch_size", 0)),
            decoupled=bool(policy.get("decoupled", False)),
        )
        if not spec.inputs:
            raise LoadTestSetupError(f"model '{name}' declares no inputs; a load test has nothing to send")
        return spec


def _tensor(model: str, kind: str, entry: Mapping[str, Any]) -> TensorSpec:
    data_type = str(entry.get("data_type", "TYPE_INVALID")).removeprefix("TYPE_")
    datatype = "BYTES" if data_type == "STRING" else data_type
    if datatype not in NUMPY_DTYPES:
        raise LoadTestSetupError(
            f"model '{model}' {kind} '{entry.get('name')}' has data type {data_type}, which the load test "
            f"cannot generate; supported: {', '.join(NUMPY_DTYPES)}"
        )
    dims: Sequence[Any] = entry.get("dims", [])
    return TensorSpec(
        name=str(entry["name"]),
        datatype=datatype,
        dims=tuple(int(d) for d in dims),
        optional=bool(entry.get("optional", False)),
    )
