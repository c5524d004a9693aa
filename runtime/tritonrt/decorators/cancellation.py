"""@cancellation: a callable that gets keyword inputs (under @batch or @sample) asks whether Triton cancelled its
whole batch, as ``Request.is_cancelled()`` says for one request; ``all_cancelled`` asks it of a list of requests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import wrapt

from tritonrt.decorators._common import InferenceRequest, requests_argument

__all__ = ["all_cancelled", "cancellation"]


def all_cancelled(requests: Sequence[InferenceRequest]) -> bool:
    """True once Triton cancelled every request of ``requests`` (their clients cancelled or went away): the work on
    them can stop, what is returned for them is dropped. A mapping that is not a tritonrt request (e.g. one made
    by @sequence_inputs, or in a test) is never cancelled; an empty list is not either."""
    return bool(requests) and all(_cancelled(request) for request in requests)


def _cancelled(request: InferenceRequest) -> bool:
    ask = getattr(request, "is_cancelled", None)
    return bool(ask()) if callable(ask) else False


def cancellation(name: str = "is_cancelled") -> Callable[..., Any]:
    """Pass the keyword argument ``name``: a function of no arguments, true once every request of the batch was
    cancelled. It reads the cancellations that arrived without waiting; ask it between steps of a long
    computation or between the responses of a generator. Place it above @batch (and above @sequence_inputs).

    Example::

        @cancellation()
        @batch
        def infer(x, is_cancelled):
            for step in range(1000):
                if is_cancelled():
                    break
                ...
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"@cancellation: the argument name must be a Python identifier, got {name!r}.")

    @wrapt.decorator
    def pass_cancellation(
        wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        requests, _ = requests_argument(args, kwargs, "@cancellation")
        for index, request in enumerate(requests):
            if name in request:
                raise ValueError(
                    f"@cancellation: request {index} has an input named {name!r} already; choose another name, "
                    f"e.g. @cancellation(name='batch_cancelled')."
                )
        if name in kwargs:
            raise ValueError(f"@cancellation: the callable gets {name!r} already; choose another name.")
        batch = list(requests)
        return wrapped(*args, **{**kwargs, name: lambda: all_cancelled(batch)})

    return pass_cancellation
