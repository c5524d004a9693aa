"""Tell a model's owner when a worker loses its peer, tritonserver's instance of the model, unasked.

A worker serves one connection at a time, from the model instance that tritonserver runs (in tritonrt's native
backend, inside tritonserver). The connection ends in three ordinary ways and one fault:

- the worker was asked to stop (the owner stops serving): nothing to report;
- Triton reloads the model (a load with a config override, say): it starts the new instance, which connects
  (the worker accepts it while it serves the old one, and serves it once the old one goes) before it lets the
  old one go: nothing to report;
- the owner unloads or reloads the model itself, or tritonserver exits: the owner knows, and ignores what
  is reported meanwhile;
- the instance lost its connection (the backend dropped one it could not read, or it broke) while Triton
  still counts the model as ready and routes requests to it: report it, so the owner reloads the model
  unless the instance connected again meanwhile (the backend connects again for its next batch).

Any worker calls :func:`peer_closed` once its connection has ended, saying whether it holds the next one
(``queued``).

The converse: when the owner reloads a model after such a fault, Triton unloads the old model only once each
old instance has been finalized, and with one of them dead that can take tens of seconds; meanwhile the new
instance waits in the listen queue of a worker still held by the old one's connection. Since the old model
takes no more requests once unloaded, the owner then calls :func:`move_to_waiting` for each worker: the
worker finishes what it is answering, stops reading from the old connection and accepts the new one.

Example::

    finally:
        connection.close()
    peer_closed(self._listener.socket, self._stopping, self._on_peer_lost)
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable

__all__ = ["move_to_waiting", "peer_closed"]


def _waiting(listener: socket.socket) -> bool:
    """True when a connection waits to be accepted (False for a closed listener)."""
    try:
        return bool(select.select([listener], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def move_to_waiting(listener: socket.socket, current: socket.socket | None, *, queued: bool = False) -> bool:
    """If a new instance waits on ``listener`` (or was accepted and waits in the worker: ``queued``), end the
    reading side of ``current`` (the old instance's connection): a worker waiting for its next request sees the
    connection end and serves the new one; one answering a request sends its answer first. Return whether it
    did."""
    if current is None or not (queued or _waiting(listener)):
        return False
    try:
        current.shutdown(socket.SHUT_RD)
    except OSError:  # closed meanwhile: the worker has moved on by itself
        return False
    return True


def peer_closed(
    listener: socket.socket, stopping: threading.Event, on_lost: Callable[[], None] | None, *, queued: bool = False
) -> bool:
    """After a connection to ``listener``'s worker ended: call ``on_lost()`` unless the worker is stopping or a
    replacement instance already waits (to be accepted, or accepted: ``queued``). Return whether it was called."""
    if on_lost is None or stopping.is_set() or queued or listener.fileno() < 0 or _waiting(listener):
        return False
    on_lost()
    return True
