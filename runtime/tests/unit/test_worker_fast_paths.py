"""The worker's common-case paths (issue 39) give what the general paths give: the one-pass reply encoder, the call
slot's state marks, and @batch's call with a single request."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tritonrt.decorators import batch
from tritonrt.models.instance import CallSlot, CallState
from tritonrt.proxy.outgoing import encode_records, inline_answer, lay_out_inline, sort_outgoing
from tritonrt.proxy.types import Request

THRESHOLD = 64 << 10


def _general(response: dict[str, Any]) -> tuple[bytes, list[bytes], int]:
    answer = sort_outgoing([dict(response)], THRESHOLD, None)
    parts, end = lay_out_inline(answer.inline)
    return bytes(encode_records(answer.records)), [bytes(part) for part in parts if part is not None], end


@pytest.mark.parametrize(
    "response",
    [
        {"OUTPUT": np.arange(16, dtype=np.float32).reshape(1, 16)},
        {
            "A": np.arange(3, dtype=np.int8),
            "EMPTY": np.zeros((0, 4), np.float32),
            "B": np.ones((2, 3), np.float64),
            "C": np.array([True]),
        },
    ],
    ids=["one-output", "several-aligned-and-empty"],
)
def test_the_one_pass_reply_is_byte_for_byte_the_general_one(response: dict[str, Any]) -> None:
    responses = [dict(response)]
    encoded = inline_answer(responses, THRESHOLD, None)
    assert encoded is not None
    meta, parts, end = encoded
    assert (bytes(meta), [bytes(part) for part in parts if part is not None], end) == _general(response)
    assert responses == []  # consumed, as sort_outgoing consumes it


@pytest.mark.parametrize(
    "responses",
    [
        [{"A": np.arange(100, dtype=np.int16)[::2]}],  # not contiguous: sent as a copy of its bytes
        [{"A": np.arange(4, dtype=">i4")}],  # big-endian: converted
        [{"A": np.zeros(THRESHOLD, np.uint8)}],  # large: through the region
        [{"A": [1, 2]}],  # not an array
        [{"A": np.zeros(2)}, {"A": np.zeros(2)}],  # two responses: laid out by name
        [ValueError("failed")],
        [None],
    ],
    ids=["strided", "big-endian", "large", "list", "two-responses", "error", "none"],
)
def test_any_other_reply_is_left_to_the_general_path_untouched(responses: list[Any]) -> None:
    before = list(responses)
    assert inline_answer(responses, THRESHOLD, None) is None
    assert all(a is b for a, b in zip(responses, before, strict=True))  # (strict: none taken)


def test_marking_the_slot_changes_its_state_and_keeps_its_batch() -> None:
    slot = CallSlot()
    slot.set(CallState.CALLING, 7, 16)
    slot.mark(CallState.REPLYING)
    replying = slot.read()
    assert (replying.state, replying.seq, replying.flags) == (CallState.REPLYING, 7, 16)
    slot.mark(CallState.IDLE)
    idle = slot.read()
    assert (idle.state, idle.seq, idle.flags) == (CallState.IDLE, 7, 16)
    assert idle.elapsed_s >= replying.elapsed_s  # the batch's start time is kept


def test_batch_of_one_request_gets_its_arrays_and_answers_it() -> None:
    seen: dict[str, Any] = {}

    @batch
    def infer(**inputs: np.ndarray) -> dict[str, np.ndarray]:
        seen.update(inputs)
        return {"y": inputs["x"] * 2}

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    request = Request({"x": x})
    (response,) = infer([request])
    assert seen["x"] is x  # no copy: the request's own array
    np.testing.assert_array_equal(response["y"], x * 2)


def test_batch_of_one_request_still_checks_the_outputs_rows() -> None:
    @batch
    def infer(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": np.zeros((x.shape[0] + 1, 1))}

    with pytest.raises(ValueError, match="one row per input row"):
        infer([Request({"x": np.zeros((2, 1))})])
