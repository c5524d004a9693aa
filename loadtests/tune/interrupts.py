"""Hold back Ctrl+C while a child process is being started, so that its handle is never lost.

Example::

    with deferred_interrupt():
        self.process = subprocess.Popen(command)   # a Ctrl+C here is raised after the assignment
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["deferred_interrupt"]


@contextlib.contextmanager
def deferred_interrupt() -> Iterator[None]:
    """Inside: SIGINT is noted, not raised; on leaving, KeyboardInterrupt is raised if one came.

    Only the main thread can set signal handlers; elsewhere this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def note(signum: int, _: FrameType | None) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if received:
            raise KeyboardInterrupt
