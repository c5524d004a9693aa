"""second_ctrl_c: within the block a SIGINT calls stop_at_once (once) instead of raising; outside, as before."""

from __future__ import annotations

import os
import signal
import threading
import time

from tritonrt.models.second_interrupt import second_ctrl_c


def _sigint_and_wait(calls: list[int], count: int) -> None:
    os.kill(os.getpid(), signal.SIGINT)
    deadline = time.monotonic() + 10
    while len(calls) < count and time.monotonic() < deadline:
        time.sleep(0.01)  # the handler runs in the main thread between bytecodes


def test_sigint_in_the_block_calls_stop_at_once_once_and_raises_nothing():
    calls: list[int] = []
    before = signal.getsignal(signal.SIGINT)
    with second_ctrl_c(lambda: calls.append(1)) as pressed_again:
        assert not pressed_again()
        _sigint_and_wait(calls, 1)
        os.kill(os.getpid(), signal.SIGINT)  # a third Ctrl+C: nothing more to do, nothing raised
        time.sleep(0.2)
    assert pressed_again() and calls == [1]
    assert signal.getsignal(signal.SIGINT) is before


def test_outside_the_main_thread_sigint_is_left_alone():
    outcome: list[object] = []

    def run() -> None:
        with second_ctrl_c(lambda: None) as pressed_again:
            outcome.append(signal.getsignal(signal.SIGINT))
            outcome.append(pressed_again())

    before = signal.getsignal(signal.SIGINT)
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert outcome == [before, False]
