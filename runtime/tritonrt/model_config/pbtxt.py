"""Render a TritonModelConfig as config.pbtxt (protobuf text format of Triton's ``ModelConfig``).

Example::

    cfg = build_model_config("Add", 1, inputs, outputs, ModelConfig(max_batch_size=8))
    cfg.backend_parameters["key"] = "value"  # each entry becomes a `parameters` entry
    (model_dir / "config.pbtxt").write_text(render_pbtxt(cfg, backend="tritonrt"))
"""

from __future__ import annotations

from collections.abc import Iterable

from tritonrt.model_config.common import DeviceKind, DynamicBatcher, QueuePolicy
from tritonrt.model_config.dtypes import to_triton_config_type
from tritonrt.model_config.sequence import SequenceBatcher, sequence_fields
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig

__all__ = ["quote", "render_pbtxt"]

_INDENT = "  "
_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t"}


def render_pbtxt(cfg: TritonModelConfig, *, backend: str | None = None) -> str:
    """Return the config.pbtxt text for ``cfg`` with every field tritonrt sets; ``backend`` replaces
    ``cfg.backend`` (PyTriton's "python", kept in the config for compatibility; tritonrt serves "tritonrt").

    The dynamic batcher is written only when batching is on; ``max_batch_size`` is 0 when it is off.
    Instance groups of kind KIND_AUTO are written without ``kind`` (Triton then picks it).
    Each ``cfg.backend_parameters`` entry becomes a ``parameters`` map entry with a ``string_value``.

    Example::

        text = render_pbtxt(TritonModelConfig(model_name="m", inputs=[TensorSpec("x", (-1,))]))
        assert text.startswith('name: "m"')
    """
    lines = [
        f"name: {quote(cfg.model_name)}",
        f"backend: {quote(backend or cfg.backend)}",
        f"max_batch_size: {cfg.max_batch_size if cfg.batching else 0}",
    ]
    for spec in cfg.inputs:
        lines += _block("input", _tensor_fields(spec, is_input=True))
    for spec in cfg.outputs:
        lines += _block("output", _tensor_fields(spec, is_input=False))
    if isinstance(cfg.batcher, SequenceBatcher):  # a sequence model may have no batch axis
        own, strategy, strategy_fields = sequence_fields(cfg.batcher)
        lines += _block("sequence_batching", [*own, *_block(strategy, strategy_fields)])
    elif cfg.batching and cfg.batcher is not None:
        lines += _block("dynamic_batching", _batcher_fields(cfg.batcher))
    for kind, count in cfg.instance_group.items():
        fields = [] if count is None else [f"count: {count}"]
        if kind is not DeviceKind.KIND_AUTO:
            fields.append(f"kind: {kind.value}")
        lines += _block("instance_group", fields)
    if cfg.response_cache_enabled:
        lines += _block("response_cache", ["enable: true"])
    if cfg.decoupled:
        lines += _block("model_transaction_policy", ["decoupled: true"])
    for key, value in cfg.backend_parameters.items():
        value_block = _block("value", [f"string_value: {quote(value)}"])
        lines += _block("parameters", [f"key: {quote(key)}", *value_block])
    return "\n".join(lines) + "\n"


def quote(text: str) -> str:
    """Return ``text`` as a protobuf text-format string literal: UTF-8, non-printable bytes as octal escapes.

    Example::

        quote('say "hi"')  # the 14 characters "say \\"hi\\""
    """
    escaped = []
    for byte in text.encode("utf-8"):
        if byte in _ESCAPES:
            escaped.append(_ESCAPES[byte])
        elif 0x20 <= byte < 0x7F:
            escaped.append(chr(byte))
        else:
            escaped.append(f"\\{byte:03o}")
    return '"' + "".join(escaped) + '"'


def _block(name: str, fields: list[str]) -> list[str]:
    return [f"{name} {{", *(_INDENT + field for field in fields), "}"]


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _list(values: Iterable[int]) -> str:
    return f"[ {', '.join(str(value) for value in values)} ]"


def _tensor_fields(spec: TensorSpec, is_input: bool) -> list[str]:
    fields = [
        f"name: {quote(spec.name)}",
        f"data_type: {to_triton_config_type(spec.dtype, spec.name)}",
        f"dims: {_list(spec.shape)}",
    ]
    if is_input and spec.optional:
        fields.append("optional: true")
    return fields


def _batcher_fields(batcher: DynamicBatcher) -> list[str]:
    fields = [f"max_queue_delay_microseconds: {batcher.max_queue_delay_microseconds}"]
    if batcher.preferred_batch_size:
        fields.append(f"preferred_batch_size: {_list(batcher.preferred_batch_size)}")
    fields += [
        f"preserve_ordering: {_bool(batcher.preserve_ordering)}",
        f"priority_levels: {batcher.priority_levels}",
        f"default_priority_level: {batcher.default_priority_level}",
    ]
    if batcher.default_queue_policy is not None:
        fields += _block("default_queue_policy", _queue_policy_fields(batcher.default_queue_policy))
    for level, policy in sorted((batcher.priority_queue_policy or {}).items()):
        value_block = _block("value", _queue_policy_fields(policy))
        fields += _block("priority_queue_policy", [f"key: {level}", *value_block])
    return fields


def _queue_policy_fields(policy: QueuePolicy) -> list[str]:
    return [
        f"timeout_action: {policy.timeout_action.value}",
        f"default_timeout_microseconds: {policy.default_timeout_microseconds}",
        f"allow_timeout_override: {_bool(policy.allow_timeout_override)}",
        f"max_queue_size: {policy.max_queue_size}",
    ]
