"""A failed batch answered request by request (proxy/isolation.py) and the @no_retry switch; through a real
server with concurrent clients in tests/integration/test_isolation.py."""

from __future__ import annotations

import numpy as np
import pytest

from tritonrt.decorators import batch, no_retry
from tritonrt.decorators.retry import retries_allowed
from tritonrt.exceptions import PyTritonUnrecoverableError
from tritonrt.proxy.isolation import RequestError, answer_each, describe


def requests_of(*values: float) -> list[dict[str, np.ndarray]]:
    return [{"x": np.array([[value]], dtype=np.float32)} for value in values]


class Counting:
    """A @batch-style callable over ``requests`` that raises for negative values, naming them; counts calls."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def __call__(self, requests: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
        self.calls.append(len(requests))
        bad = [float(request["x"][0, 0]) for request in requests if request["x"][0, 0] < 0]
        if bad:
            raise ValueError(f"negative input(s) {bad}")
        return [{"y": request["x"] * 2} for request in requests]


def test_a_good_batch_runs_once():
    run = Counting()
    outcomes = answer_each(run, requests_of(1, 2, 3), retry=True, model="m")
    assert run.calls == [3]
    assert [float(outcome["y"][0, 0]) for outcome in outcomes] == [2, 4, 6]


def test_a_failed_batch_fails_only_its_bad_requests_each_with_its_own_error():
    run = Counting()
    outcomes = answer_each(run, requests_of(1, -2, 3, -4), retry=True, model="m")
    assert run.calls == [4, 1, 1, 1, 1]
    assert float(outcomes[0]["y"][0, 0]) == 2 and float(outcomes[2]["y"][0, 0]) == 6
    assert [str(outcomes[i]) for i in (1, 3)] == [
        "ValueError: negative input(s) [-2.0]",
        "ValueError: negative input(s) [-4.0]",
    ]
    assert all(isinstance(outcomes[i], RequestError) for i in (1, 3))


def test_a_single_request_is_not_run_again():
    run = Counting()
    assert [str(outcome) for outcome in answer_each(run, requests_of(-1), retry=True, model="m")] == [
        "ValueError: negative input(s) [-1.0]"
    ]
    assert run.calls == [1]


def test_without_retries_every_request_fails_with_a_message_that_names_no_data():
    run = Counting()
    outcomes = answer_each(run, requests_of(1, -2, 3), retry=False, model="m")
    assert run.calls == [3]
    assert len({str(outcome) for outcome in outcomes}) == 1
    message = str(outcomes[0])
    assert "-2" not in message and "negative" not in message
    assert "model 'm'" in message and "@no_retry" in message and "3 requests" in message


def test_an_unrecoverable_error_is_never_retried():
    def run(requests):
        raise PyTritonUnrecoverableError("the GPU is gone")

    with pytest.raises(PyTritonUnrecoverableError):
        answer_each(run, requests_of(1, 2), retry=True, model="m")


def test_an_unrecoverable_error_in_a_retry_stops_too():
    def run(requests):
        if len(requests) > 1:
            raise ValueError("batch")
        raise PyTritonUnrecoverableError("the GPU is gone")

    with pytest.raises(PyTritonUnrecoverableError):
        answer_each(run, requests_of(1, 2), retry=True, model="m")


def test_describe_names_the_type_and_the_text():
    assert describe(KeyError("x")) == "KeyError: 'x'"
    assert describe(RuntimeError()) == "RuntimeError"


def test_no_retry_marks_functions_decorated_callables_methods_and_objects():
    @batch
    def plain(x):
        return {"y": x}

    @no_retry
    @batch
    def outer(x):
        return {"y": x}

    @batch
    @no_retry
    def inner(x):
        return {"y": x}

    class Model:
        def infer(self, requests):
            return requests

    class Callable_:
        def __call__(self, requests):
            return requests

    model = Model()
    assert retries_allowed(plain) and retries_allowed(model.infer)
    assert not retries_allowed(outer) and not retries_allowed(inner)
    marked = no_retry(model.infer)  # a bound method takes no attributes: a marked wrapper
    assert not retries_allowed(marked) and marked([1]) == [1]
    assert not retries_allowed(no_retry(Callable_()))
