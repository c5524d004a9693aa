"""CallableErrorLog: each distinct error of a callable logged with its traceback once per window, repeats counted."""

from __future__ import annotations

import logging

import pytest

from tritonrt.proxy.error_log import CallableErrorLog, ErrorKey

LOGGER_NAME = "tritonrt.test.error_log"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _raise(message: str) -> None:
    raise ValueError(message)


def _raise_elsewhere(message: str) -> None:
    raise ValueError(message)


def _caught(raiser, message: str) -> ValueError:
    try:
        raiser(message)
    except ValueError as error:
        return error
    raise AssertionError("did not raise")


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def errors(clock) -> CallableErrorLog:
    return CallableErrorLog(logging.getLogger(LOGGER_NAME), window_s=60.0, clock=clock)


def _messages(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == LOGGER_NAME]


def test_first_error_is_logged_at_info_with_its_traceback(errors, caplog):
    caplog.set_level(logging.INFO, LOGGER_NAME)
    errors.record("double", _caught(_raise, "x must be positive"))
    [record] = [record for record in caplog.records if record.name == LOGGER_NAME]
    assert record.levelno == logging.INFO
    text = record.getMessage()
    assert "model 'double' raised ValueError: x must be positive" in text
    assert "Traceback (most recent call last)" in text and "in _raise" in text


def test_repeats_in_the_window_are_counted_then_summarized(errors, clock, caplog):
    caplog.set_level(logging.INFO, LOGGER_NAME)
    for _ in range(5):
        errors.record("double", _caught(_raise, "x must be positive"))
        clock.now += 1
    assert len(_messages(caplog)) == 1
    clock.now += 60
    errors.record("double", _caught(_raise, "x must be positive"))
    summary, again = _messages(caplog)[1:]
    assert "raised ValueError: x must be positive 4 more time(s)" in summary
    assert "Traceback" in again, "after the window the error's traceback is logged again"


def test_distinct_errors_are_each_logged(errors, caplog):
    caplog.set_level(logging.INFO, LOGGER_NAME)
    errors.record("double", _caught(_raise, "x must be positive"))
    errors.record("double", _caught(_raise, "y must be positive"))  # another message
    errors.record("double", _caught(_raise_elsewhere, "x must be positive"))  # raised elsewhere
    errors.record("triple", _caught(_raise, "x must be positive"))  # another model
    errors.record("double", _caught(_raise, "x must be positive"))  # a repeat
    assert len(_messages(caplog)) == 4


def test_the_key_names_where_the_error_was_raised():
    key = ErrorKey.of("double", _caught(_raise, "boom"))
    assert key.described == "ValueError: boom"
    assert key.location.endswith(f"test_error_log.py:{_raise.__code__.co_firstlineno + 1}")


def test_the_log_keeps_no_exception(errors):
    error = _caught(_raise, "boom")
    errors.record("double", error)
    assert not any(isinstance(value, BaseException) for value in vars(errors).values())
    assert all(isinstance(key, ErrorKey) for key in errors._seen)
