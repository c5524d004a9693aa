"""The inference callable's errors in the server's log: each distinct one with its traceback, once per window.

A client whose request failed reads "see the server log"; this is what it finds there, at INFO. An error is
distinct by model, type and message and the place that raised it (file and line of the innermost frame). The first
one logs its traceback; repeats within the window (60 s) are only counted, and the count is logged, as one
line, with the first error after the window ends. The traceback is formatted at once and the exception is not
kept: its frames may hold the request's inputs.

Example::

    CALLABLE_ERRORS.record("double", error)
    # INFO The inference callable of model 'double' raised ValueError: x must be positive
    #      (logged once per 60 s; repeats are counted)
    #      Traceback (most recent call last): ...
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import traceback
from collections.abc import Callable

__all__ = ["CALLABLE_ERRORS", "WINDOW_S", "CallableErrorLog", "ErrorKey", "describe"]

LOGGER = logging.getLogger("tritonrt.proxy")
WINDOW_S = 60.0
_MAX_KEYS = 1024  # distinct errors remembered at once; the oldest is forgotten (and logged again if it recurs)


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorKey:
    """What makes two errors the same: the model, the error's type and message, and where it was raised."""

    model: str
    described: str  # "ValueError: x must be positive"
    location: str

    @classmethod
    def of(cls, model: str, error: BaseException) -> ErrorKey:
        frame = error.__traceback__
        while frame is not None and frame.tb_next is not None:
            frame = frame.tb_next
        location = f"{frame.tb_frame.f_code.co_filename}:{frame.tb_lineno}" if frame is not None else "?"
        return cls(model, describe(error), location)


_READ_ONLY_HINT = (
    " (inputs of 64 KiB or more are read-only views of Triton's memory: copy one before changing it in place, "
    "e.g. x = x.copy())"
)


def describe(error: BaseException) -> str:
    """``"ValueError: x must be positive"``: the error's type, and its text when it has one.

    numpy's error for a write into a read-only array gets a hint: large inputs are read-only views.
    """
    text = str(error)
    if isinstance(error, ValueError) and "read-only" in text:
        text += _READ_ONLY_HINT
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@dataclasses.dataclass(slots=True)
class _Seen:
    """A distinct error logged at ``since``, and how often it recurred after."""

    since: float
    repeats: int = 0


class CallableErrorLog:
    """Logs each distinct error of an inference callable once per ``window_s``, counting the repeats."""

    def __init__(
        self, logger: logging.Logger, window_s: float = WINDOW_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._logger = logger
        self._window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._seen: dict[ErrorKey, _Seen] = {}

    def record(self, model: str, error: BaseException) -> None:
        """Log ``error`` (raised by ``model``'s callable) with its traceback, unless it was logged in the window."""
        key, now = ErrorKey.of(model, error), self._clock()
        with self._lock:
            ended = self._end_windows(now)
            seen = self._seen.get(key)
            if seen is None:
                if len(self._seen) >= _MAX_KEYS:
                    ended.append((oldest := next(iter(self._seen)), self._seen.pop(oldest)))
                self._seen[key] = _Seen(now)
            else:
                seen.repeats += 1
        for old, record in ended:
            if record.repeats:
                self._logger.info(
                    "The inference callable of model %r raised %s %d more time(s) in the %.0f s after its traceback "
                    "was logged",
                    old.model,
                    old.described,
                    record.repeats,
                    min(now - record.since, self._window_s),
                )
        if seen is None:
            self._logger.info(
                "The inference callable of model %r raised %s (logged once per %.0f s; repeats are counted)\n%s",
                model,
                key.described,
                self._window_s,
                "".join(traceback.format_exception(type(error), error, error.__traceback__)).rstrip(),
            )

    def _end_windows(self, now: float) -> list[tuple[ErrorKey, _Seen]]:
        """Forget the errors whose window ended (a recurrence logs its traceback again); return them."""
        ended = [(key, seen) for key, seen in self._seen.items() if now - seen.since >= self._window_s]
        for key, _ in ended:
            del self._seen[key]
        return ended


CALLABLE_ERRORS = CallableErrorLog(LOGGER)
