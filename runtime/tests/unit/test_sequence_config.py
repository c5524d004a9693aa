"""The sequence batcher in a model's config (rendered as Triton's protobuf text, checked with its schema), its
validation, and @sequence_inputs' per-row arrays."""

from __future__ import annotations

import numpy as np
import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from tritonrt.constants import SEQUENCE_END, SEQUENCE_START
from tritonrt.decorators import batch, sequence_inputs
from tritonrt.exceptions import PyTritonBadParameterError, PyTritonValidationError
from tritonrt.model_config import DirectStrategy, ModelConfig, OldestStrategy, SequenceBatcher, Tensor
from tritonrt.model_config.pbtxt import render_pbtxt
from tritonrt.model_config.resolve import build_model_config
from tritonrt.proxy.types import Request

X = [Tensor(name="x", dtype=np.float32, shape=(1,))]


def rendered(config: ModelConfig) -> model_config_pb2.ModelConfig:
    text = render_pbtxt(build_model_config("m", 1, X, X, config))
    return text_format.Parse(text, model_config_pb2.ModelConfig())


def test_direct_is_written_with_its_fields_and_no_dynamic_batcher():
    batcher = SequenceBatcher(DirectStrategy(100, 0.5), max_sequence_idle_microseconds=7_000_000)
    parsed = rendered(ModelConfig(max_batch_size=8, batcher=batcher))
    assert parsed.max_batch_size == 8 and not parsed.HasField("dynamic_batching")
    assert parsed.sequence_batching.max_sequence_idle_microseconds == 7_000_000
    assert parsed.sequence_batching.direct.max_queue_delay_microseconds == 100
    assert parsed.sequence_batching.direct.minimum_slot_utilization == pytest.approx(0.5)
    assert not parsed.sequence_batching.control_input  # the backend reads ids and flags from the request


def test_oldest_is_written_with_its_fields():
    strategy = OldestStrategy(max_candidate_sequences=16, preferred_batch_size=[4, 8], preserve_ordering=True)
    parsed = rendered(ModelConfig(max_batch_size=8, batcher=SequenceBatcher(strategy)))
    oldest = parsed.sequence_batching.oldest
    assert oldest.max_candidate_sequences == 16 and list(oldest.preferred_batch_size) == [4, 8]
    assert oldest.preserve_ordering


def test_a_model_without_batching_keeps_its_sequence_batcher():
    parsed = rendered(ModelConfig(batching=False, batcher=SequenceBatcher()))
    assert parsed.max_batch_size == 0 and parsed.sequence_batching.HasField("direct")


@pytest.mark.parametrize(
    ("batcher", "message"),
    [
        (SequenceBatcher(max_sequence_idle_microseconds=0), r"max_sequence_idle_microseconds must be an integer"),
        (SequenceBatcher(DirectStrategy(minimum_slot_utilization=2)), r"minimum_slot_utilization must be a number"),
        (SequenceBatcher(OldestStrategy(max_candidate_sequences=0)), r"max_candidate_sequences must be an integer"),
        (SequenceBatcher(OldestStrategy(preferred_batch_size=[16])), r"<= config.max_batch_size=8"),
    ],
)
def test_bad_values_are_named(batcher, message):
    with pytest.raises(PyTritonBadParameterError, match=message):
        build_model_config("m", 1, X, X, ModelConfig(max_batch_size=8, batcher=batcher))


def test_a_strategy_of_another_type_is_refused():
    with pytest.raises(PyTritonValidationError, match="DirectStrategy.. or OldestStrategy"):
        build_model_config("m", 1, X, X, ModelConfig(batcher=SequenceBatcher(strategy="direct")))  # type: ignore[arg-type]


def test_request_flags_read_as_start_and_end():
    request = Request({}, sequence_id="s", flags=SEQUENCE_START | SEQUENCE_END)
    assert request.sequence_start and request.sequence_end and request.sequence_id == "s"
    assert not Request({}).sequence_start and Request({}).sequence_id is None
    assert not Request({}).is_cancelled()


def test_sequence_inputs_give_each_row_its_requests_id_and_flags():
    seen = {}

    @sequence_inputs()
    @batch
    def infer(x, sequence_id, sequence_start, sequence_end):
        seen.update(sequence_id=sequence_id, start=sequence_start, end=sequence_end)
        return {"x": x}

    first = Request({"x": np.zeros((2, 1), np.float32)}, sequence_id=5, flags=SEQUENCE_START)
    second = Request({"x": np.zeros((1, 1), np.float32)}, sequence_id=9, flags=SEQUENCE_END)
    infer([first, second])
    assert seen["sequence_id"].tolist() == [[5], [5], [9]] and seen["sequence_id"].dtype == np.uint64
    assert seen["start"].tolist() == [[True], [True], [False]]
    assert seen["end"].tolist() == [[False], [False], [True]]
    assert "sequence_id" not in first  # the requests themselves are left as they are


def test_string_ids_make_an_object_array_and_a_taken_name_is_refused():
    seen = {}

    @sequence_inputs(id_name="sid")
    @batch
    def infer(x, sid, sequence_start, sequence_end):
        seen["sid"] = sid
        return {"x": x}

    infer([Request({"x": np.zeros((1, 1))}, sequence_id="a"), Request({"x": np.zeros((1, 1))}, sequence_id=3)])
    assert seen["sid"].tolist() == [["a"], ["3"]]
    with pytest.raises(ValueError, match="has an input named 'sid' already"):
        infer([Request({"x": np.zeros((1, 1)), "sid": np.zeros((1, 1))})])
