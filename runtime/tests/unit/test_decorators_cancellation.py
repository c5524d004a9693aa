"""@cancellation and all_cancelled: a callable under @batch asks whether its whole batch was cancelled."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrt.decorators import all_cancelled, batch, cancellation, sequence_inputs
from tritonrt.proxy.types import Request


class Cancelled:
    """The indices of the batch's requests cancelled so far; a test adds to it as Triton would."""

    def __init__(self) -> None:
        self.indices: set[int] = set()

    def cancelled(self) -> set[int]:
        return self.indices


def requests(cancelled: Cancelled, count: int = 2) -> list[Request]:
    return [Request({"x": np.array([[index]])}, cancellation=cancelled, index=index) for index in range(count)]


def test_a_batch_is_cancelled_once_all_its_requests_are():
    cancelled = Cancelled()
    batch_requests = requests(cancelled)
    assert not all_cancelled(batch_requests)
    cancelled.indices.add(0)
    assert not all_cancelled(batch_requests)
    cancelled.indices.add(1)
    assert all_cancelled(batch_requests)


def test_plain_mappings_and_an_empty_list_are_never_cancelled():
    assert not all_cancelled([{"x": np.zeros((1, 1))}])
    assert not all_cancelled([])


def test_the_callable_under_batch_asks_live():
    cancelled = Cancelled()
    seen: list[bool] = []

    @cancellation()
    @batch
    def infer(x, is_cancelled):
        seen.append(is_cancelled())
        cancelled.indices.update({0, 1})  # the clients cancel while the callable works
        seen.append(is_cancelled())
        return {"y": x}

    result = infer(requests(cancelled))
    assert seen == [False, True]
    assert [int(each["y"][0, 0]) for each in result] == [0, 1]


def test_above_sequence_inputs_it_still_sees_the_requests():
    cancelled = Cancelled()
    cancelled.indices.add(0)

    @cancellation(name="stop")
    @sequence_inputs()
    @batch
    def infer(x, sequence_id, sequence_start, sequence_end, stop):
        return {"y": np.full_like(x, stop())}

    assert [int(each["y"][0, 0]) for each in infer(requests(cancelled, count=1))] == [1]


def test_a_name_taken_by_an_input_is_refused():
    @cancellation(name="x")
    @batch
    def infer(x):
        return {"y": x}

    with pytest.raises(ValueError, match="has an input named 'x' already; choose another name"):
        infer(requests(Cancelled()))


def test_a_name_that_is_no_identifier_is_refused():
    with pytest.raises(TypeError, match="must be a Python identifier"):
        cancellation(name="is cancelled")
