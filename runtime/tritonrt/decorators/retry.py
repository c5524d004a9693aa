"""@no_retry: tritonrt must not run this callable twice on one request (tritonrt's own; PyTriton has none).

When a callable raises for a batch of several requests, tritonrt runs each request of the batch alone once
more, so that only the requests that fail on their own fail, each with its own error (see
:mod:`tritonrt.proxy.isolation`). A callable with side effects that must happen once per request (it writes
to a database, sends a message, advances a sequence) opts out with ``@no_retry``: a failed batch then fails
every request in it, with a message that names no other request's data.

Example::

    @no_retry
    @batch
    def infer(x):
        journal.append(x)          # must run once per request
        return {"y": model(x)}

Put it anywhere among the decorators; ``no_retry(model.infer)`` marks a method or callable object too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["no_retry", "retries_allowed"]

_MARK = "tritonrt_no_retry"
_C = TypeVar("_C", bound=Callable[..., Any])


def no_retry(infer_callable: _C) -> _C:
    """Mark ``infer_callable``: the requests of a batch it failed are not run again one by one."""
    try:
        setattr(infer_callable, _MARK, True)
        return infer_callable
    except AttributeError:  # a bound method takes no attributes: mark a thin wrapper around it

        @functools.wraps(infer_callable)
        def marked(*args: Any, **kwargs: Any) -> Any:
            return infer_callable(*args, **kwargs)

        setattr(marked, _MARK, True)
        return marked  # type: ignore[return-value]


def retries_allowed(infer_callable: Callable[..., Any]) -> bool:
    """False for a callable marked with :func:`no_retry` (through decorators and bound methods too)."""
    return not getattr(infer_callable, _MARK, False)
