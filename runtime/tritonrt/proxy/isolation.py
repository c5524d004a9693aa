"""One outcome per request: when a batch fails, each of its requests runs alone once more.

Triton's dynamic batcher joins requests from different clients into one call of the inference callable. When
that call raises, tritonrt does not fail the whole batch with that error (which would fail good requests, and
show one client's error, often with its data in it, to every other client of the batch): it runs each request
alone, once, and answers each with its own outcome: its outputs, or its own error. Only requests that fail
on their own fail.

- A batch of one request is not run again: its error is its own.
- A callable marked ``@no_retry`` (:mod:`tritonrt.decorators.retry`) runs once: every request of a failed
  batch fails, with a message that names no request's data (the error itself goes to the server's log).
- Every error the callable raises goes to the server's log with its traceback, each distinct one once per
  minute (:mod:`tritonrt.proxy.error_log`).
- ``PyTritonUnrecoverableError`` is never retried: it stops the server.
- Decoupled (streaming) models are not retried either: their responses may have been sent already.

Any worker calls :func:`answer_each` with a function that runs the callable on a list of requests and returns
their checked responses; what it gets back goes to the client request by request.

Example::

    outcomes = answer_each(run, requests, retry=retries_allowed(infer_callable), model="double")
    # [{"y": array(...)}, RequestError("ValueError: x must be positive"), {"y": array(...)}]
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from tritonrt.exceptions import PyTritonUnrecoverableError
from tritonrt.proxy.connection import ErrorResponse
from tritonrt.proxy.error_log import CALLABLE_ERRORS, describe
from tritonrt.proxy.own_metrics import BATCH_RERUNS

__all__ = ["RequestError", "answer_each"]

LOGGER = logging.getLogger("tritonrt.proxy")
_R = TypeVar("_R")
_T = TypeVar("_T")


class RequestError(ErrorResponse):
    """One request's failure; ``str()`` is the whole message its client gets (no traceback is kept). A reply
    sends it as it is (an :class:`~tritonrt.proxy.connection.ErrorResponse`)."""


def answer_each(
    run: Callable[[list[_R]], Sequence[_T]], requests: list[_R], *, retry: bool, model: str
) -> list[_T | RequestError]:
    """Run ``requests`` as one batch; if that raises, run each alone (when ``retry``): one outcome each.

    ``run(batch)`` returns one response per request of ``batch`` or raises; ``model`` names the model in
    messages. ``PyTritonUnrecoverableError``
    propagates. The batch's own error is dropped (with its traceback) before any request runs again.
    """
    try:
        answered = run(requests)
        return answered if type(answered) is list else list(answered)
    except PyTritonUnrecoverableError:
        raise
    except Exception as error:
        message = describe(error)
        CALLABLE_ERRORS.record(model, error)
    count = len(requests)
    if count == 1:
        return [RequestError(message)]
    if not retry:
        LOGGER.warning("The inference callable of %r raised for a batch of %d requests: %s", model, count, message)
        shared = RequestError(
            f"The inference callable of model {model!r} raised for the batch of {count} requests this one was part of, "
            "and it is marked @no_retry, so every request of the batch fails; the error is in the server's log."
        )
        return [shared] * count
    BATCH_RERUNS.labels(model).inc()
    outcomes: list[_T | RequestError] = []
    for request in requests:
        try:
            outcomes.append(run([request])[0])
        except PyTritonUnrecoverableError:
            raise
        except Exception as error:
            CALLABLE_ERRORS.record(model, error)
            outcomes.append(RequestError(describe(error)))
    failed = sum(isinstance(outcome, RequestError) for outcome in outcomes)
    LOGGER.info(
        "The inference callable of %s raised for a batch of %d; run one by one, %d failed", model, count, failed
    )
    return outcomes
