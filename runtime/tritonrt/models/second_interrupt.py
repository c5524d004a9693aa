"""The second Ctrl+C: while ``serve()`` drains after the first, another SIGINT stops at once.

The first Ctrl+C ends ``serve()``'s wait as a KeyboardInterrupt; the drain that follows runs under this module's
SIGINT handler, which calls ``stop_at_once`` (tritonrt kills tritonserver) and returns, so the drain ends at
once and cleans up as it would anyway; no KeyboardInterrupt lands in the middle of it. The caller then learns
whether that happened and raises KeyboardInterrupt itself, for a non-zero exit.

Example::

    with second_ctrl_c(triton.kill) as pressed_again:
        triton.stop()
    if pressed_again():
        raise KeyboardInterrupt
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType

__all__ = ["second_ctrl_c"]


@contextlib.contextmanager
def second_ctrl_c(stop_at_once: Callable[[], None]) -> Iterator[Callable[[], bool]]:
    """Within the block, SIGINT calls ``stop_at_once()`` (once) instead of raising; yields "was it pressed?".

    Signal handlers belong to the main thread: elsewhere the block runs with SIGINT as it is.
    """
    pressed = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield pressed.is_set
        return

    def on_sigint(_signum: int, _frame: FrameType | None) -> None:
        if not pressed.is_set():
            pressed.set()
            stop_at_once()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield pressed.is_set
    finally:
        signal.signal(signal.SIGINT, previous)
