"""One wait at a time, its outcome shared: concurrent callers of a client join the wait already under way.

A client waits for readiness (and reads the model config) before its first request. Callers that arrive
while that wait runs do not queue behind it to start waits of their own, one deadline after another: they
join it and get its outcome, the config or the same error, when it ends. The next caller after a failed
wait starts a new one (the server may have come up since).

Example::

    shared = SharedWait()                          # one per client
    config = shared.run(lambda: read_when_ready())  # from any thread; one call of the function runs at a time

    shared = AsyncSharedWait()
    config = await shared.run(read_when_ready_async)  # a coroutine function
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Generic, TypeVar

__all__ = ["AsyncSharedWait", "SharedWait"]

_T = TypeVar("_T")


@dataclasses.dataclass(slots=True)
class _Attempt(Generic[_T]):
    """One run of the wait: done once it returned or raised; ``result`` or ``error`` then holds the outcome."""

    done: threading.Event = dataclasses.field(default_factory=threading.Event)
    result: _T | None = None
    error: BaseException | None = None


def _own_copy(error: BaseException) -> BaseException:
    """A copy of the leader's error for one joined caller: threads must not raise one object at once (each raise
    writes its own traceback into it). The copy keeps type, message and attributes."""
    try:
        duplicate = copy.copy(error)
    except Exception:  # an exception class whose constructor does not take its args back
        return error
    return duplicate.with_traceback(None)


class SharedWait(Generic[_T]):
    """Runs a blocking function for the first caller; callers arriving meanwhile wait for it and share its outcome."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._attempt: _Attempt[_T] | None = None

    def run(self, function: Callable[[], _T]) -> _T:
        """``function()``'s result, or its error; run by this caller, or by the caller whose run is under way.

        A run that ended by KeyboardInterrupt or SystemExit in its own thread is not shared: a caller that joined
        it runs again.
        """
        while True:
            with self._lock:
                attempt = self._attempt
                leader = attempt is None
                if attempt is None:
                    attempt = self._attempt = _Attempt()
            if leader:
                try:
                    attempt.result = function()
                    return attempt.result
                except BaseException as error:
                    attempt.error = error
                    raise
                finally:
                    with self._lock:
                        self._attempt = None
                    attempt.done.set()
            attempt.done.wait()
            if attempt.error is None:
                return attempt.result  # type: ignore[return-value]  # set when error is None
            if isinstance(attempt.error, Exception):
                raise _own_copy(attempt.error)


class AsyncSharedWait(Generic[_T]):
    """The asyncio version: the wait runs as a task of its own, so a caller cancelled while waiting cancels only
    its own wait, not the others'. ``cancel()`` (on close) stops a wait under way."""

    def __init__(self) -> None:
        self._task: asyncio.Task[_T] | None = None

    async def run(self, function: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
        """``await function()``'s result, or its error, shared by every caller awaiting it meanwhile."""
        task = self._task
        if task is None or task.done():
            task = self._task = asyncio.create_task(function())
            task.add_done_callback(self._forget)
        return await asyncio.shield(task)

    def _forget(self, task: asyncio.Task[_T]) -> None:
        if self._task is task:
            self._task = None
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" warning when every caller left

    def cancel(self) -> None:
        """Cancel the wait under way, if any (callers awaiting it get CancelledError)."""
        if self._task is not None:
            self._task.cancel()
