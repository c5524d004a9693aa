"""Turn the model config a server returns (JSON, from HTTP or gRPC) into a ``TritonModelConfig``.

HTTP returns proto3 JSON with every field; gRPC ``as_json`` leaves out default values and writes
64-bit integers as strings. The parser accepts both.

Example::

    config = parse_model_config({"name": "add", "max_batch_size": 8, "input": [...], "output": [...]})
    config.batching, config.max_batch_size  # (True, 8)
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tritonclient.utils

from tritonrt.exceptions import PyTritonBadParameterError
from tritonrt.model_config.common import DeviceKind, DynamicBatcher, QueuePolicy, TimeoutAction
from tritonrt.model_config.dtypes import from_triton_config_type
from tritonrt.model_config.triton_model_config import ResponseCache, TensorSpec, TritonModelConfig

__all__ = ["parse_model_config"]


def parse_model_config(config: dict[str, Any], model_version: int | None = None) -> TritonModelConfig:
    """Build a ``TritonModelConfig`` from a server's JSON model config.

    ``model_version`` is recorded when given (the config itself does not say which version answered);
    otherwise the config's single specific version, else 1.
    """
    max_batch_size = int(config.get("max_batch_size", 0))
    batcher = config.get("dynamic_batching")
    return TritonModelConfig(
        model_name=config["name"],
        model_version=model_version if model_version is not None else _configured_version(config),
        batching=max_batch_size > 0,
        max_batch_size=max_batch_size,
        batcher=_parse_batcher(batcher) if batcher is not None else None,
        instance_group=_parse_instance_groups(config.get("instance_group", [])),
        inputs=[_parse_tensor(tensor) for tensor in config.get("input", [])],
        outputs=[_parse_tensor(tensor) for tensor in config.get("output", [])],
        response_cache=ResponseCache(enable=True) if config.get("response_cache", {}).get("enable") else None,
        decoupled=bool(config.get("model_transaction_policy", {}).get("decoupled", False)),
        backend_parameters={key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()},
    )


def _configured_version(config: dict[str, Any]) -> int:
    versions = config.get("version_policy", {}).get("specific", {}).get("versions", [])
    return int(versions[0]) if len(versions) == 1 else 1


def _numpy_type(data_type: str) -> type:
    try:
        return from_triton_config_type(data_type)
    except PyTritonBadParameterError:
        # Types numpy has no exact match for (e.g. TYPE_BF16): use what tritonclient decodes them to.
        decoded = tritonclient.utils.triton_to_np_dtype(data_type.removeprefix("TYPE_"))
        return np.dtype(decoded).type if decoded is not None else np.object_


def _parse_tensor(tensor: dict[str, Any]) -> TensorSpec:
    return TensorSpec(
        name=tensor["name"],
        shape=tuple(int(dim) for dim in tensor.get("dims", [])),
        dtype=_numpy_type(tensor.get("data_type", "TYPE_INVALID")),
        optional=bool(tensor.get("optional", False)),
    )


def _parse_queue_policy(policy: dict[str, Any]) -> QueuePolicy:
    return QueuePolicy(
        timeout_action=TimeoutAction(policy.get("timeout_action", "REJECT")),
        default_timeout_microseconds=int(policy.get("default_timeout_microseconds", 0)),
        allow_timeout_override=bool(policy.get("allow_timeout_override", False)),
        max_queue_size=int(policy.get("max_queue_size", 0)),
    )


def _parse_batcher(batcher: dict[str, Any]) -> DynamicBatcher:
    default_policy = batcher.get("default_queue_policy")
    priority_policies = batcher.get("priority_queue_policy") or {}
    return DynamicBatcher(
        max_queue_delay_microseconds=int(batcher.get("max_queue_delay_microseconds", 0)),
        preferred_batch_size=[int(size) for size in batcher.get("preferred_batch_size", [])] or None,
        preserve_ordering=bool(batcher.get("preserve_ordering", False)),
        priority_levels=int(batcher.get("priority_levels", 0)),
        default_priority_level=int(batcher.get("default_priority_level", 0)),
        default_queue_policy=_parse_queue_policy(default_policy) if default_policy else None,
        priority_queue_policy={int(level): _parse_queue_policy(policy) for level, policy in priority_policies.items()}
        or None,
    )


def _parse_instance_groups(groups: list[dict[str, Any]]) -> dict[DeviceKind, int | None]:
    counts: dict[DeviceKind, int | None] = {}
    for group in groups:
        kind = DeviceKind(group.get("kind", "KIND_AUTO"))
        counts[kind] = (counts.get(kind) or 0) + int(group.get("count", 1))
    return counts
