"""Tell a model's owner when a worker loses its peer, tritonserver's instance of the model, unasked.

A worker serves one connection at a time, from the model instance that tritonserver runs (today a Python
backend stub process). The connection ends in three ordinary ways and one fault:

- the worker was asked to stop (the owner stops serving): nothing to report;
- Triton reloads the model: it starts the new instance, which connects and waits in the worker's listen
  queue, before it lets the old one go: nothing to report;
- the owner unloads or reloads the model itself, or tritonserver exits: the owner knows, and ignores what
  is reported meanwhile;
- the instance died (a crashed or killed stub, a dropped connection of a native backend) while Triton
  still counts the model as ready and routes requests to it: report it, so the owner reloads the model.

Any worker calls :func:`peer_closed` once its connection has ended.

Example::

    finally:
        channel.close()
    peer_closed(self._listener, self._stopping, self._on_peer_lost)
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable

__all__ = ["peer_closed"]


def peer_closed(listener: socket.socket, stopping: threading.Event, on_lost: Callable[[], None] | None) -> bool:
    """After a connection to ``listener``'s worker ended: call ``on_lost()`` unless the worker is stopping or a
    replacement instance already waits to be accepted. Return whether it was called."""
    if on_lost is None or stopping.is_set():
        return False
    try:
        waiting, _, _ = select.select([listener], [], [], 0)
    except (OSError, ValueError):  # the listener is closed: the worker is going away
        return False
    if waiting:
        return False
    on_lost()
    return True
