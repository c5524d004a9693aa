"""Unit tests: config.pbtxt rendering, checked as text and by parsing it with Triton's ModelConfig proto."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonrt.model_config import DeviceKind, DynamicBatcher, ModelConfig, QueuePolicy, Tensor, TimeoutAction
from tritonrt.model_config.pbtxt import quote, render_pbtxt
from tritonrt.model_config.resolve import build_model_config
from tritonrt.model_config.triton_model_config import TensorSpec, TritonModelConfig


def parse(text: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_golden_minimal_config():
    cfg = build_model_config(
        "Identity",
        1,
        inputs=[Tensor(dtype=np.float32, shape=(-1,))],
        outputs=[Tensor(name="out", dtype=np.float32, shape=(-1, 3))],
        config=ModelConfig(max_batch_size=8),
    )
    assert render_pbtxt(cfg) == (
        'name: "Identity"\n'
        'backend: "python"\n'
        "max_batch_size: 8\n"
        "input {\n"
        '  name: "INPUT_1"\n'
        "  data_type: TYPE_FP32\n"
        "  dims: [ -1 ]\n"
        "}\n"
        "output {\n"
        '  name: "out"\n'
        "  data_type: TYPE_FP32\n"
        "  dims: [ -1, 3 ]\n"
        "}\n"
        "dynamic_batching {\n"
        "  max_queue_delay_microseconds: 0\n"
        "  preserve_ordering: false\n"
        "  priority_levels: 0\n"
        "  default_priority_level: 0\n"
        "}\n"
        "instance_group {\n"
        "  count: 1\n"
        "  kind: KIND_CPU\n"
        "}\n"
    )


def test_tensors_parse_with_types_dims_and_optional():
    cfg = build_model_config(
        "m",
        1,
        inputs=[
            Tensor(name="img", dtype=np.uint8, shape=(224, 224, 3)),
            Tensor(name="text", dtype=np.bytes_, shape=(-1,), optional=True),
            Tensor(name="raw", dtype=object, shape=(1,)),
            Tensor(name="flag", dtype=np.bool_, shape=(1,)),
        ],
        outputs=[
            Tensor(name="p", dtype=np.float16, shape=(1000,)),
            Tensor(name="ids", dtype=np.int64, shape=(-1, 2)),
        ],
        config=ModelConfig(max_batch_size=16),
    )
    parsed = parse(render_pbtxt(cfg))
    assert parsed.name == "m"
    assert parsed.backend == "python"
    assert parsed.max_batch_size == 16
    assert [(t.name, t.data_type, list(t.dims), t.optional) for t in parsed.input] == [
        ("img", model_config_pb2.TYPE_UINT8, [224, 224, 3], False),
        ("text", model_config_pb2.TYPE_STRING, [-1], True),
        ("raw", model_config_pb2.TYPE_STRING, [1], False),
        ("flag", model_config_pb2.TYPE_BOOL, [1], False),
    ]
    assert [(t.name, t.data_type, list(t.dims)) for t in parsed.output] == [
        ("p", model_config_pb2.TYPE_FP16, [1000]),
        ("ids", model_config_pb2.TYPE_INT64, [-1, 2]),
    ]


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (np.int8, "TYPE_INT8"),
        (np.int16, "TYPE_INT16"),
        (np.int32, "TYPE_INT32"),
        (np.uint16, "TYPE_UINT16"),
        (np.uint32, "TYPE_UINT32"),
        (np.uint64, "TYPE_UINT64"),
        (np.float64, "TYPE_FP64"),
    ],
)
def test_every_numeric_type_is_a_valid_proto_enum(dtype, expected):
    cfg = TritonModelConfig(model_name="m", inputs=[TensorSpec("x", (1,), dtype)])
    assert parse(render_pbtxt(cfg)).input[0].data_type == model_config_pb2.DataType.Value(expected)


def test_every_dynamic_batcher_field_is_rendered():
    delayed = QueuePolicy(
        timeout_action=TimeoutAction.DELAY,
        default_timeout_microseconds=1500,
        allow_timeout_override=True,
        max_queue_size=7,
    )
    cfg = build_model_config(
        "batched",
        1,
        inputs=[Tensor(dtype=np.float32, shape=(4,))],
        outputs=[Tensor(dtype=np.float32, shape=(4,))],
        config=ModelConfig(
            max_batch_size=64,
            batcher=DynamicBatcher(
                max_queue_delay_microseconds=300,
                preferred_batch_size=[16, 32],
                preserve_ordering=False,
                priority_levels=3,
                default_priority_level=2,
                default_queue_policy=QueuePolicy(max_queue_size=100),
                priority_queue_policy={3: QueuePolicy(), 1: delayed},
            ),
        ),
    )
    text = render_pbtxt(cfg)
    assert "priority_queue_policy {\n    key: 1\n    value {\n" in text
    batching = parse(text).dynamic_batching
    assert batching.max_queue_delay_microseconds == 300
    assert list(batching.preferred_batch_size) == [16, 32]
    assert batching.preserve_ordering is False
    assert batching.priority_levels == 3
    assert batching.default_priority_level == 2
    assert batching.default_queue_policy.max_queue_size == 100
    assert batching.default_queue_policy.timeout_action == model_config_pb2.ModelQueuePolicy.REJECT
    assert set(batching.priority_queue_policy) == {1, 3}
    level_one = batching.priority_queue_policy[1]
    assert level_one.timeout_action == model_config_pb2.ModelQueuePolicy.DELAY
    assert level_one.default_timeout_microseconds == 1500
    assert level_one.allow_timeout_override is True
    assert level_one.max_queue_size == 7
    assert batching.priority_queue_policy[3] == model_config_pb2.ModelQueuePolicy()


def test_preserve_ordering_true_is_rendered():
    cfg = TritonModelConfig(model_name="m", batcher=DynamicBatcher(preserve_ordering=True))
    assert parse(render_pbtxt(cfg)).dynamic_batching.preserve_ordering is True


def test_no_batching_means_zero_max_batch_size_and_no_dynamic_batching():
    built = build_model_config(
        "nobatch",
        1,
        inputs=[Tensor(dtype=np.float32, shape=(2, 2))],
        outputs=[Tensor(dtype=np.float32, shape=(2, 2))],
        config=ModelConfig(batching=False),
    )
    # Even a hand-made config that still carries a batcher renders without one once batching is off.
    handmade = TritonModelConfig(model_name="nobatch", batching=False, max_batch_size=8, batcher=DynamicBatcher())
    for cfg in (built, handmade):
        text = render_pbtxt(cfg)
        assert "dynamic_batching" not in text
        parsed = parse(text)
        assert parsed.max_batch_size == 0
        assert not parsed.HasField("dynamic_batching")


def test_batching_without_batcher_renders_no_dynamic_batching():
    parsed = parse(render_pbtxt(TritonModelConfig(model_name="m", max_batch_size=4, batcher=None)))
    assert parsed.max_batch_size == 4
    assert not parsed.HasField("dynamic_batching")


def test_instance_groups_kinds_and_counts():
    cfg = TritonModelConfig(
        model_name="m",
        instance_group={DeviceKind.KIND_CPU: 2, DeviceKind.KIND_GPU: 1, DeviceKind.KIND_AUTO: None},
    )
    text = render_pbtxt(cfg)
    assert "KIND_AUTO" not in text
    groups = parse(text).instance_group
    assert [(g.count, g.kind) for g in groups] == [
        (2, model_config_pb2.ModelInstanceGroup.KIND_CPU),
        (1, model_config_pb2.ModelInstanceGroup.KIND_GPU),
        (0, model_config_pb2.ModelInstanceGroup.KIND_AUTO),
    ]
    assert text.endswith("instance_group {\n}\n")  # no count: Triton's default; no kind: Triton picks


def test_built_config_runs_instance_count_cpu_instances():
    cfg = build_model_config(
        "m", 1, [Tensor(dtype=np.int32, shape=(1,))], [Tensor(dtype=np.int32, shape=(1,))], ModelConfig(), 3
    )
    (group,) = parse(render_pbtxt(cfg)).instance_group
    assert (group.count, group.kind) == (3, model_config_pb2.ModelInstanceGroup.KIND_CPU)


def test_response_cache_and_decoupled_only_when_on():
    off = parse(render_pbtxt(TritonModelConfig(model_name="m")))
    assert not off.HasField("response_cache")
    assert not off.HasField("model_transaction_policy")
    cached = parse(render_pbtxt(TritonModelConfig(model_name="m", response_cache=True)))
    assert cached.response_cache.enable is True
    decoupled = parse(render_pbtxt(TritonModelConfig(model_name="m", decoupled=True)))
    assert decoupled.model_transaction_policy.decoupled is True
    assert not decoupled.HasField("response_cache")


def test_the_served_backend_replaces_the_configs_own():
    cfg = TritonModelConfig(model_name="m")
    assert parse(render_pbtxt(cfg, backend="tritonrt")).backend == "tritonrt"
    assert cfg.backend == "python"  # PyTriton's value, kept for compatibility


def test_backend_parameters_become_string_parameters():
    cfg = TritonModelConfig(
        model_name="m",
        backend_parameters={"address": "ipc:///tmp/tritonrt/m.sock", "prefix": "/tritonrt-1"},
    )
    text = render_pbtxt(cfg)
    assert 'parameters {\n  key: "address"\n  value {\n    string_value: "ipc:///tmp/tritonrt/m.sock"\n' in text
    parameters = parse(text).parameters
    assert {key: value.string_value for key, value in parameters.items()} == cfg.backend_parameters


TRICKY_STRINGS = [
    'say "hi"',
    "back\\slash",
    "new\nline\r\ttab",
    "it's",
    "ünïcödé ✓ 模型",
    "control\x01\x7f",
    "",
]


@pytest.mark.parametrize("value", TRICKY_STRINGS)
def test_strings_are_escaped_and_round_trip(value):
    cfg = TritonModelConfig(
        model_name="m",
        inputs=[TensorSpec(name=value or "x", shape=(1,))],
        backend_parameters={value: value},
    )
    text = render_pbtxt(cfg)
    parsed = parse(text)
    assert parsed.input[0].name == (value or "x")
    assert parsed.parameters[value].string_value == value


def test_quote_output_is_printable_ascii_on_one_line():
    for value in TRICKY_STRINGS:
        quoted = quote(value)
        assert quoted.startswith('"') and quoted.endswith('"')
        assert "\n" not in quoted
        assert all(0x20 <= ord(char) < 0x7F for char in quoted)
    assert quote('a"b\\c\n') == '"a\\"b\\\\c\\n"'
    assert quote("é") == '"\\303\\251"'


def test_rendered_text_ends_with_newline_and_has_no_tabs():
    text = render_pbtxt(TritonModelConfig(model_name="m", inputs=[TensorSpec("x", (1,))]))
    assert text.endswith("}\n")
    assert "\t" not in text
