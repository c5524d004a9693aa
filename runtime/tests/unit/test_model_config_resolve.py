"""Unit tests of tritonrt.model_config.resolve: the model name rule, and bind-time resolution and validation
of model definitions (build_model_config).
"""

from __future__ import annotations

import numpy as np
import pytest

from tritonrt.exceptions import PyTritonBadParameterError, PyTritonValidationError
from tritonrt.model_config import DeviceKind, DynamicBatcher, ModelConfig, QueuePolicy, Tensor, TimeoutAction
from tritonrt.model_config.resolve import build_model_config, validate_model_name
from tritonrt.model_config.triton_model_config import ResponseCache, TensorSpec

# ------------------------------------------------------------------------------------------ model name


@pytest.mark.parametrize("name", ["m", "Model_1", "resnet-50.v2", "a.b-c_d", "123", "..a", "-"])
def test_valid_model_names_pass(name):
    validate_model_name(name)


@pytest.mark.parametrize("name", ["", " ", "my model", "a/b", "..", ".", "modèle", "a:b", None, 7])
def test_invalid_model_name_states_the_rule(name):
    with pytest.raises(PyTritonValidationError) as info:
        validate_model_name(name)
    assert repr(name) in info.value.message
    assert "alphanumeric characters, dots, underscores and dashes" in info.value.message


# ------------------------------------------------------------------------------- build_model_config


def _tensor(name=None, dtype=np.float32, shape=(-1,), optional=False):
    return Tensor(name=name, dtype=dtype, shape=shape, optional=optional)


def _build(inputs=None, outputs=None, config=None, **kwargs):
    kwargs.setdefault("model_name", "M")
    kwargs.setdefault("model_version", 1)
    return build_model_config(
        inputs=[_tensor()] if inputs is None else inputs,
        outputs=[_tensor()] if outputs is None else outputs,
        config=ModelConfig() if config is None else config,
        **kwargs,
    )


def test_unnamed_tensors_get_positional_names_counting_from_one():
    cfg = _build(
        inputs=[_tensor(), _tensor(name="mask"), _tensor()],
        outputs=[_tensor(dtype=np.int32), _tensor(name="score")],
    )
    assert [spec.name for spec in cfg.inputs] == ["INPUT_1", "mask", "INPUT_3"]
    assert [spec.name for spec in cfg.outputs] == ["OUTPUT_1", "score"]


def test_tensor_specs_are_normalised():
    cfg = _build(
        inputs=[
            Tensor(name="a", dtype=np.dtype("float16"), shape=[np.int64(3), 4]),
            Tensor(name="b", dtype=object, shape=(1,), optional=True),
            Tensor(name="c", dtype="int32", shape=(-1, 2)),
            Tensor(name="d", dtype=np.bytes_, shape=(1,), optional=None),
        ],
        outputs=[Tensor(name="e", dtype=bool, shape=(2,))],
    )
    assert cfg.inputs == [
        TensorSpec(name="a", shape=(3, 4), dtype=np.float16),
        TensorSpec(name="b", shape=(1,), dtype=np.object_, optional=True),
        TensorSpec(name="c", shape=(-1, 2), dtype=np.int32),
        TensorSpec(name="d", shape=(1,), dtype=np.bytes_),
    ]
    assert type(cfg.inputs[0].shape[0]) is int
    assert cfg.outputs == [TensorSpec(name="e", shape=(2,), dtype=np.bool_)]


def test_defaults_follow_pytriton():
    cfg = _build()
    assert cfg.model_name == "M" and cfg.model_version == 1
    assert cfg.batching is True and cfg.max_batch_size == 4
    assert cfg.batcher == DynamicBatcher()
    assert cfg.instance_group == {DeviceKind.KIND_CPU: 1}
    assert cfg.response_cache is None and cfg.decoupled is False  # PyTriton: None unless enabled
    assert cfg.backend_parameters == {} and cfg.model_warmup is None and cfg.backend == "python"


def test_batching_off_gives_zero_max_batch_size_and_no_batcher():
    cfg = _build(config=ModelConfig(batching=False, max_batch_size=16, batcher=DynamicBatcher(priority_levels=2)))
    assert cfg.batching is False
    assert cfg.max_batch_size == 0
    assert cfg.batcher is None


def test_batching_on_without_batcher_keeps_none():
    assert _build(config=ModelConfig(batcher=None)).batcher is None


def test_instance_count_response_cache_decoupled_and_version_are_carried():
    cfg = _build(config=ModelConfig(max_batch_size=32, response_cache=True), instance_count=3, model_version=7)
    assert cfg.instance_group == {DeviceKind.KIND_CPU: 3}
    assert cfg.response_cache == ResponseCache(enable=True)
    assert cfg.model_version == 7
    assert cfg.max_batch_size == 32
    assert _build(config=ModelConfig(decoupled=True)).decoupled is True


def test_full_batcher_is_kept_and_copied():
    policy = QueuePolicy(timeout_action=TimeoutAction.DELAY, default_timeout_microseconds=50, max_queue_size=9)
    batcher = DynamicBatcher(
        max_queue_delay_microseconds=250,
        preferred_batch_size=[2, np.int32(8)],
        preserve_ordering=False,
        priority_levels=3,
        default_priority_level=2,
        default_queue_policy=QueuePolicy(allow_timeout_override=True),
        priority_queue_policy={1: policy, 3: QueuePolicy()},
    )
    config = ModelConfig(max_batch_size=8, batcher=batcher)
    cfg = _build(config=config)
    assert cfg.batcher == DynamicBatcher(
        max_queue_delay_microseconds=250,
        preferred_batch_size=[2, 8],
        preserve_ordering=False,
        priority_levels=3,
        default_priority_level=2,
        default_queue_policy=QueuePolicy(allow_timeout_override=True),
        priority_queue_policy={1: policy, 3: QueuePolicy()},
    )
    assert all(type(size) is int for size in cfg.batcher.preferred_batch_size)
    batcher.preferred_batch_size.append(4)
    policy.max_queue_size = 100
    assert cfg.batcher.preferred_batch_size == [2, 8]
    assert cfg.batcher.priority_queue_policy[1].max_queue_size == 9


def test_preserve_ordering_with_one_priority_level_and_reject_is_accepted():
    batcher = DynamicBatcher(
        preserve_ordering=True,
        priority_levels=1,
        default_priority_level=1,
        default_queue_policy=QueuePolicy(timeout_action=TimeoutAction.DELAY, default_timeout_microseconds=0),
    )
    assert _build(config=ModelConfig(batcher=batcher)).batcher.preserve_ordering is True


# ------------------------------------------------------------------------------------ validation errors


def _expect(error_type, *fragments, **build_kwargs):
    with pytest.raises(error_type) as info:
        _build(**build_kwargs)
    for fragment in fragments:
        assert fragment in info.value.message, f"{fragment!r} not in {info.value.message!r}"
    return info.value.message


def test_invalid_model_name_is_rejected_at_build():
    _expect(PyTritonValidationError, "'bad name'", "alphanumeric", model_name="bad name")


@pytest.mark.parametrize("version", [-1, 1.0, "1", True, None])
def test_bad_model_version(version):
    _expect(PyTritonBadParameterError, "Model 'M'", "model_version", repr(version), model_version=version)


@pytest.mark.parametrize("count", [0, -2, 1.5, None, True])
def test_bad_instance_count(count):
    _expect(PyTritonBadParameterError, "Model 'M'", "instance_count", instance_count=count)


def test_config_must_be_model_config():
    _expect(PyTritonValidationError, "Model 'M'", "config must be", "dict", config={"max_batch_size": 4})


@pytest.mark.parametrize("flag", ["batching", "response_cache", "decoupled"])
def test_config_flags_must_be_bool(flag):
    _expect(PyTritonBadParameterError, f"config.{flag}", "'yes'", config=ModelConfig(**{flag: "yes"}))


def test_duplicate_input_names():
    _expect(
        PyTritonValidationError,
        "Model 'M'",
        "inputs",
        "['x']",
        inputs=[_tensor(name="x"), _tensor(name="y"), _tensor(name="x")],
    )


def test_duplicate_output_names():
    _expect(PyTritonValidationError, "outputs", "['y']", outputs=[_tensor(name="y"), _tensor(name="y")])


def test_explicit_name_clashing_with_automatic_name_is_a_duplicate():
    message = _expect(PyTritonValidationError, "['INPUT_2']", inputs=[_tensor(name="INPUT_2"), _tensor()])
    assert "INPUT_1, INPUT_2" in message


def test_same_name_for_an_input_and_an_output_is_allowed():
    cfg = _build(inputs=[_tensor(name="x")], outputs=[_tensor(name="x")])
    assert cfg.inputs[0].name == cfg.outputs[0].name == "x"


@pytest.mark.parametrize("name", ["", 5])
def test_bad_tensor_name(name):
    _expect(PyTritonBadParameterError, "inputs[1].name", repr(name), inputs=[_tensor(), _tensor(name=name)])


def test_unsupported_dtype_names_model_tensor_and_dtype():
    _expect(
        PyTritonBadParameterError,
        "Model 'M'",
        "output 'z' (outputs[0])",
        "complex128",
        "float32",
        outputs=[_tensor(name="z", dtype=np.complex128)],
    )


@pytest.mark.parametrize("shape", [(0,), (3, -2), (2.0,), ("3",), (True,), (None,)])
def test_bad_shape_dimension(shape):
    _expect(
        PyTritonBadParameterError,
        "Model 'M'",
        "input 'img' (inputs[0])",
        "shape",
        ">= 1, or -1",
        inputs=[_tensor(name="img", shape=shape)],
    )


@pytest.mark.parametrize("shape", [3, "3", None])
def test_shape_must_be_a_sequence(shape):
    _expect(PyTritonBadParameterError, "INPUT_1", "shape must be a tuple of ints", inputs=[_tensor(shape=shape)])


def test_empty_shape_suggests_one_element():
    _expect(PyTritonValidationError, "OUTPUT_1", "shape ()", "(1,)", outputs=[_tensor(shape=())])


def test_optional_output_is_rejected():
    _expect(PyTritonValidationError, "output 'o'", "optional", outputs=[_tensor(name="o", optional=True)])


@pytest.mark.parametrize("tensors", [_tensor(), "x", 42, {"x": _tensor()}])
def test_inputs_must_be_a_list(tensors):
    _expect(PyTritonValidationError, "inputs must be a list", inputs=tensors)


def test_tensor_items_must_be_tensors():
    _expect(PyTritonValidationError, "outputs[1]", "dict", outputs=[_tensor(), {"name": "x"}])


@pytest.mark.parametrize("size", [-1, 0, 2.5])
def test_bad_max_batch_size_with_batching(size):
    _expect(
        PyTritonBadParameterError,
        "Model 'M'",
        "config.max_batch_size",
        "batching=False",
        config=ModelConfig(max_batch_size=size),
    )


def test_negative_max_batch_size_without_batching():
    _expect(
        PyTritonBadParameterError,
        "config.max_batch_size",
        "-1",
        config=ModelConfig(batching=False, max_batch_size=-1),
    )


def test_decoupled_with_response_cache_is_refused():
    _expect(
        PyTritonValidationError,
        "Model 'M'",
        "decoupled",
        "response_cache",
        config=ModelConfig(decoupled=True, response_cache=True),
    )


def _batcher_error(error_type, *fragments, max_batch_size=8, **batcher_fields):
    config = ModelConfig(max_batch_size=max_batch_size, batcher=DynamicBatcher(**batcher_fields))
    return _expect(error_type, "Model 'M'", *fragments, config=config)


def test_batcher_must_be_dynamic_batcher():
    _expect(PyTritonValidationError, "config.batcher", "dict", config=ModelConfig(batcher={}))


def test_negative_queue_delay():
    _batcher_error(PyTritonBadParameterError, "max_queue_delay_microseconds", "-5", max_queue_delay_microseconds=-5)


@pytest.mark.parametrize("sizes", [[4, 16], [0], [-2], [2, 2.5]])
def test_bad_preferred_batch_size(sizes):
    _batcher_error(PyTritonBadParameterError, "preferred_batch_size", "max_batch_size=8", preferred_batch_size=sizes)


def test_preferred_batch_size_must_be_a_list():
    _batcher_error(PyTritonBadParameterError, "preferred_batch_size", "list", preferred_batch_size=4)


def test_negative_priority_levels():
    _batcher_error(PyTritonBadParameterError, "priority_levels", "-1", priority_levels=-1)


def test_default_priority_level_above_priority_levels():
    _batcher_error(
        PyTritonBadParameterError,
        "default_priority_level",
        "priority_levels=2",
        priority_levels=2,
        default_priority_level=3,
    )


def test_default_priority_level_zero_with_priorities_is_refused_like_triton():
    _batcher_error(
        PyTritonBadParameterError,
        "default_priority_level",
        "[1, 2]",
        priority_levels=2,
        default_priority_level=0,
    )


def test_default_priority_level_without_priority_levels():
    _batcher_error(PyTritonBadParameterError, "default_priority_level", "priority_levels", default_priority_level=1)


@pytest.mark.parametrize("key", [0, 3, -1, "1"])
def test_priority_queue_policy_key_outside_levels(key):
    _batcher_error(
        PyTritonBadParameterError,
        "priority_queue_policy key",
        repr(key),
        "priority_levels=2",
        priority_levels=2,
        default_priority_level=1,
        priority_queue_policy={key: QueuePolicy()},
    )


def test_priority_queue_policy_without_priority_levels():
    _batcher_error(
        PyTritonBadParameterError,
        "priority_queue_policy key",
        "priority_levels=0",
        priority_queue_policy={1: QueuePolicy()},
    )


def test_priority_queue_policy_must_be_a_dict():
    _batcher_error(PyTritonBadParameterError, "priority_queue_policy", "dict", priority_queue_policy=[QueuePolicy()])


@pytest.mark.parametrize(
    ("policy", "error_type", "field"),
    [
        (
            QueuePolicy(default_timeout_microseconds=-1),
            PyTritonBadParameterError,
            "default_timeout_microseconds",
        ),
        (QueuePolicy(max_queue_size=-3), PyTritonBadParameterError, "max_queue_size"),
        (QueuePolicy(timeout_action="REJECT"), PyTritonBadParameterError, "timeout_action"),
        (QueuePolicy(allow_timeout_override=1), PyTritonBadParameterError, "allow_timeout_override"),
        ({"max_queue_size": 1}, PyTritonValidationError, "must be a tritonrt.model_config.QueuePolicy"),
    ],
)
def test_bad_queue_policy_values(policy, error_type, field):
    _batcher_error(error_type, "default_queue_policy", field, default_queue_policy=policy)
    _batcher_error(
        error_type,
        "priority_queue_policy[1]",
        field,
        priority_levels=1,
        default_priority_level=1,
        priority_queue_policy={1: policy},
    )


def test_preserve_ordering_must_be_bool():
    _batcher_error(PyTritonBadParameterError, "preserve_ordering", preserve_ordering="no")


def test_preserve_ordering_with_several_priority_levels_is_refused():
    _batcher_error(
        PyTritonValidationError,
        "preserve_ordering",
        "priority_levels=2",
        preserve_ordering=True,
        priority_levels=2,
        default_priority_level=1,
    )


def test_preserve_ordering_with_delay_timeout_is_refused():
    delay = QueuePolicy(timeout_action=TimeoutAction.DELAY, default_timeout_microseconds=10)
    _batcher_error(
        PyTritonValidationError,
        "default_queue_policy",
        "DELAY",
        "preserve_ordering",
        preserve_ordering=True,
        default_queue_policy=delay,
    )
    _batcher_error(
        PyTritonValidationError,
        "priority_queue_policy[1]",
        "DELAY",
        preserve_ordering=True,
        priority_levels=1,
        default_priority_level=1,
        priority_queue_policy={1: delay},
    )
