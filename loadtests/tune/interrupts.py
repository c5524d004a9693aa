"""Child processes through Ctrl+C: hold it back while a child is being started, so that its handle is never
lost; and when a child is being stopped, a Ctrl+C that cuts the wait kills it at once.

Example::

    with deferred_interrupt():
        self.process = subprocess.Popen(command, start_new_session=True)  # a Ctrl+C here comes after
    ...
    stop_child(self.process, signal.SIGTERM, timeout_s=30)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["deferred_interrupt", "stop_child"]


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


def stop_child(process: subprocess.Popen[bytes], first: signal.Signals, timeout_s: float) -> None:
    """Send ``first`` to ``process`` (the leader of its own session) and wait ``timeout_s`` for it to exit; then,
    or at once if the wait is cut short (a second Ctrl+C), SIGKILL its whole process group. Returns once it is
    reaped."""
    try:
        if process.poll() is None:
            process.send_signal(first)
            process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        pass
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
