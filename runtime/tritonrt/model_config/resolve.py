"""Resolve a bind() call (name, version, tensors, ModelConfig) into a validated TritonModelConfig.

Two kinds of error, both raised at bind time and naming the model and the field:

- PyTritonValidationError: the definition's structure is wrong: a bad model name, an argument of the
  wrong kind, clashing tensor names, an empty shape, an optional output, or options Triton refuses
  together (decoupled with response cache, preserve_ordering with several priority levels or DELAY).
- PyTritonBadParameterError: one value is out of range or of the wrong type: a dtype, a dimension,
  a version, a batch size, a queue delay or size, a priority level.

Example::

    cfg = build_model_config(
        "Add", 1, inputs=[Tensor(dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name="sum", dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=8),
    )
    cfg.inputs[0].name  # "INPUT_1"
"""

from __future__ import annotations

import copy
import numbers
import re
from collections.abc import Sequence
from typing import Any

from tritonrt.exceptions import PyTritonBadParameterError, PyTritonValidationError
from tritonrt.model_config.common import DeviceKind, DynamicBatcher, ModelWarmup, QueuePolicy, TimeoutAction
from tritonrt.model_config.dtypes import normalize_dtype
from tritonrt.model_config.model_config import ModelConfig
from tritonrt.model_config.sequence import SequenceBatcher, check_sequence_batcher
from tritonrt.model_config.tensor import Tensor
from tritonrt.model_config.triton_model_config import ResponseCache, TensorSpec, TritonModelConfig
from tritonrt.model_config.values import check_int

__all__ = ["INSTANCE_KIND", "build_model_config", "validate_model_name"]

_MODEL_NAME_PATTERN = re.compile(r"[A-Za-z0-9._-]+")
_INT32_MAX = 2**31 - 1
_UINT64_MAX = 2**64 - 1
# The instance kind of the model in Triton: its backend only forwards requests, the callable runs elsewhere.
INSTANCE_KIND = DeviceKind.KIND_CPU


def validate_model_name(name: Any) -> None:
    """Check a model name: non-empty, only letters, digits, dots, underscores and dashes, not "." or "..".

    Raises PyTritonValidationError stating the rule.

    Example::

        validate_model_name("resnet-50_v1.2")  # passes
        validate_model_name("my model")        # raises PyTritonValidationError
    """
    if not isinstance(name, str) or not _MODEL_NAME_PATTERN.fullmatch(name) or name in (".", ".."):
        raise PyTritonValidationError(
            f"Invalid model name {name!r}: a model name must be a non-empty string of only alphanumeric "
            "characters, dots, underscores and dashes (and not '.' or '..'), e.g. 'my_model-v1.2'."
        )


def build_model_config(
    model_name: str,
    model_version: int,
    inputs: Sequence[Tensor],
    outputs: Sequence[Tensor],
    config: ModelConfig,
    instance_count: int = 1,
) -> TritonModelConfig:
    """Validate a model definition and resolve it into a TritonModelConfig, applying PyTriton's semantics.

    Unnamed tensors become ``INPUT_<n>`` / ``OUTPUT_<n>`` (n counts from 1 within inputs or outputs);
    dtypes become canonical numpy types (``object`` -> ``np.object_``, any ``S`` dtype -> ``np.bytes_``,
    both Triton BYTES); shapes become tuples of ints; ``batching=False`` gives ``max_batch_size=0`` and no
    batcher; the model runs ``instance_count`` proxy instances of kind KIND_CPU. ``config`` is copied, so
    later changes to it do not leak into the result.

    Raises PyTritonValidationError (structure) or PyTritonBadParameterError (a value), see the module doc.

    Example::

        cfg = build_model_config("Echo", 1, [Tensor(name="x", dtype=np.bytes_, shape=(1,))],
                                 [Tensor(name="y", dtype=np.bytes_, shape=(1,))], ModelConfig(batching=False))
        assert cfg.max_batch_size == 0 and cfg.batcher is None
    """
    validate_model_name(model_name)
    where = f"Model {model_name!r}"
    check_int(model_version, f"{where}: model_version", minimum=0, maximum=_UINT64_MAX)
    check_int(instance_count, f"{where}: instance_count", minimum=1, maximum=_INT32_MAX)
    if not isinstance(config, ModelConfig):
        raise PyTritonValidationError(
            f"{where}: config must be a tritonrt.model_config.ModelConfig, got {type(config).__name__}."
        )
    for flag in ("batching", "response_cache", "decoupled"):
        if not isinstance(getattr(config, flag), bool):
            raise PyTritonBadParameterError(
                f"{where}: config.{flag} must be True or False, got {getattr(config, flag)!r}."
            )
    warmup = config.model_warmup
    if warmup is not None and (
        not isinstance(warmup, (list, tuple)) or not all(isinstance(item, ModelWarmup) for item in warmup)
    ):
        raise PyTritonBadParameterError(
            f"{where}: config.model_warmup must be a list of tritonrt.model_config.common.ModelWarmup (or None), "
            f"got {warmup!r}."
        )
    if config.decoupled and config.response_cache:
        raise PyTritonValidationError(
            f"{where}: config.decoupled=True cannot be combined with config.response_cache=True "
            "(Triton does not cache responses of decoupled models); disable one of them."
        )

    max_batch_size = 0
    batcher: DynamicBatcher | SequenceBatcher | None = None
    if config.batching:
        max_batch_size = check_int(
            config.max_batch_size,
            f"{where}: config.max_batch_size",
            minimum=1,
            maximum=_INT32_MAX,
            hint=" (set batching=False to serve the model without a batch axis)",
        )
        if isinstance(config.batcher, SequenceBatcher):
            batcher = check_sequence_batcher(config.batcher, max_batch_size, f"{where}: config.batcher")
        elif config.batcher is not None:
            batcher = _resolve_batcher(config.batcher, max_batch_size, where)
    else:
        check_int(config.max_batch_size, f"{where}: config.max_batch_size", minimum=0, maximum=_INT32_MAX)
        if isinstance(config.batcher, SequenceBatcher):  # sequences without a batch axis: one request at a time
            batcher = check_sequence_batcher(config.batcher, 0, f"{where}: config.batcher")

    return TritonModelConfig(
        model_name=model_name,
        model_version=int(model_version),
        batching=config.batching,
        max_batch_size=max_batch_size,
        batcher=batcher,
        instance_group={INSTANCE_KIND: int(instance_count)},
        inputs=_resolve_tensors(inputs, "input", where),
        outputs=_resolve_tensors(outputs, "output", where),
        response_cache=ResponseCache(enable=True) if config.response_cache else None,
        decoupled=config.decoupled,
    )


def _resolve_tensors(tensors: Sequence[Tensor], kind: str, where: str) -> list[TensorSpec]:
    group = f"{kind}s"
    if isinstance(tensors, (str, bytes, Tensor)) or not isinstance(tensors, Sequence):
        raise PyTritonValidationError(
            f"{where}: {group} must be a list of tritonrt.model_config.Tensor, got {type(tensors).__name__}."
        )
    specs: list[TensorSpec] = []
    for index, tensor in enumerate(tensors):
        if not isinstance(tensor, Tensor):
            raise PyTritonValidationError(
                f"{where}: {group}[{index}] must be a tritonrt.model_config.Tensor, got {type(tensor).__name__}."
            )
        if tensor.name is not None and (not isinstance(tensor.name, str) or not tensor.name):
            raise PyTritonBadParameterError(
                f"{where}: {group}[{index}].name must be a non-empty string or None (auto-named "
                f"{kind.upper()}_{index + 1}), got {tensor.name!r}."
            )
        name = tensor.name or f"{kind.upper()}_{index + 1}"
        field = f"{where}: {kind} {name!r} ({group}[{index}])"
        if kind == "output" and tensor.optional:
            raise PyTritonValidationError(f"{field}: outputs cannot be optional; remove optional=True.")
        specs.append(
            TensorSpec(
                name=name,
                shape=_resolve_shape(tensor.shape, field),
                dtype=_resolve_dtype(tensor.dtype, name, field),
                optional=bool(tensor.optional),
            )
        )
    names = [spec.name for spec in specs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PyTritonValidationError(
            f"{where}: {group} have duplicate names {duplicates}; every {kind} needs a unique name "
            f"(unnamed {group} are named {kind.upper()}_1, {kind.upper()}_2, ... by position)."
        )
    return specs


def _resolve_shape(shape: Any, field: str) -> tuple[int, ...]:
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
        raise PyTritonBadParameterError(f"{field}: shape must be a tuple of ints, e.g. (3,), got {shape!r}.")
    if len(shape) == 0:
        raise PyTritonValidationError(
            f"{field}: shape () is empty; Triton needs at least one dimension, use (1,) for a scalar."
        )
    for dim in shape:
        if isinstance(dim, bool) or not isinstance(dim, numbers.Integral) or (dim < 1 and dim != -1):
            raise PyTritonBadParameterError(
                f"{field}: shape {tuple(shape)!r} has invalid dimension {dim!r}; each dimension must be an "
                "integer >= 1, or -1 for a dimension of variable size."
            )
    return tuple(int(dim) for dim in shape)


def _resolve_dtype(dtype: Any, name: str, field: str) -> type:
    try:
        return normalize_dtype(dtype, tensor_name=name)
    except PyTritonBadParameterError as error:
        raise PyTritonBadParameterError(f"{field}: {error.message}") from None


def _resolve_batcher(batcher: Any, max_batch_size: int, where: str) -> DynamicBatcher:
    field = f"{where}: config.batcher"
    if not isinstance(batcher, DynamicBatcher):
        raise PyTritonValidationError(
            f"{field} must be a tritonrt.model_config.DynamicBatcher, a SequenceBatcher or None, "
            f"got {type(batcher).__name__}."
        )
    check_int(batcher.max_queue_delay_microseconds, f"{field}.max_queue_delay_microseconds", 0, _UINT64_MAX)
    preferred = batcher.preferred_batch_size
    if preferred is not None:
        if isinstance(preferred, (str, bytes)) or not isinstance(preferred, Sequence):
            raise PyTritonBadParameterError(f"{field}.preferred_batch_size must be a list of ints, got {preferred!r}.")
        for size in preferred:
            check_int(
                size,
                f"{field}.preferred_batch_size entry",
                minimum=1,
                maximum=max_batch_size,
                hint=f" (entries must be positive and <= config.max_batch_size={max_batch_size})",
            )
    if not isinstance(batcher.preserve_ordering, bool):
        raise PyTritonBadParameterError(
            f"{field}.preserve_ordering must be True or False, got {batcher.preserve_ordering!r}."
        )
    levels = check_int(batcher.priority_levels, f"{field}.priority_levels", 0, _UINT64_MAX)
    if levels == 0:
        check_int(
            batcher.default_priority_level,
            f"{field}.default_priority_level",
            0,
            0,
            hint=" (set priority_levels first to use priorities)",
        )
    else:
        check_int(
            batcher.default_priority_level,
            f"{field}.default_priority_level",
            1,
            levels,
            hint=f" (priority levels run from 1 to priority_levels={levels})",
        )
    if batcher.default_queue_policy is not None:
        _check_queue_policy(batcher.default_queue_policy, f"{field}.default_queue_policy")
    policies = batcher.priority_queue_policy or {}
    if not isinstance(policies, dict):
        raise PyTritonBadParameterError(
            f"{field}.priority_queue_policy must be a dict of priority level to QueuePolicy, got {policies!r}."
        )
    for level, policy in policies.items():
        check_int(
            level,
            f"{field}.priority_queue_policy key",
            minimum=1,
            maximum=levels,
            hint=f" (keys are priority levels, 1 to priority_levels={levels})",
        )
        _check_queue_policy(policy, f"{field}.priority_queue_policy[{level}]")
    if batcher.preserve_ordering:
        _check_preserve_ordering(batcher, levels, field)
    resolved = copy.deepcopy(batcher)
    if preferred is not None:
        resolved.preferred_batch_size = [int(size) for size in preferred]
    if resolved.priority_queue_policy is not None:
        resolved.priority_queue_policy = {
            int(level): policy for level, policy in resolved.priority_queue_policy.items()
        }
    return resolved


def _check_queue_policy(policy: Any, field: str) -> None:
    if not isinstance(policy, QueuePolicy):
        raise PyTritonValidationError(
            f"{field} must be a tritonrt.model_config.QueuePolicy, got {type(policy).__name__}."
        )
    if not isinstance(policy.timeout_action, TimeoutAction):
        raise PyTritonBadParameterError(
            f"{field}.timeout_action must be TimeoutAction.REJECT or TimeoutAction.DELAY, "
            f"got {policy.timeout_action!r}."
        )
    check_int(policy.default_timeout_microseconds, f"{field}.default_timeout_microseconds", 0, _UINT64_MAX)
    if not isinstance(policy.allow_timeout_override, bool):
        raise PyTritonBadParameterError(
            f"{field}.allow_timeout_override must be True or False, got {policy.allow_timeout_override!r}."
        )
    check_int(policy.max_queue_size, f"{field}.max_queue_size", 0, _INT32_MAX, hint=" (0 means unlimited)")


def _check_preserve_ordering(batcher: DynamicBatcher, levels: int, field: str) -> None:
    """Triton refuses preserve_ordering with several priority levels or with a DELAY timeout action."""
    if levels > 1:
        raise PyTritonValidationError(
            f"{field}: preserve_ordering=True allows at most one priority level, "
            f"got priority_levels={levels}; disable preserve_ordering or use a single level."
        )
    policies = [("default_queue_policy", batcher.default_queue_policy)] + [
        (f"priority_queue_policy[{level}]", policy) for level, policy in (batcher.priority_queue_policy or {}).items()
    ]
    for name, policy in policies:
        if policy is not None and policy.timeout_action is TimeoutAction.DELAY and policy.default_timeout_microseconds:
            raise PyTritonValidationError(
                f"{field}.{name}: timeout_action=DELAY with a timeout cannot be combined with "
                "preserve_ordering=True; use TimeoutAction.REJECT or disable preserve_ordering."
            )
