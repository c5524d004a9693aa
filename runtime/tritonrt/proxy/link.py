"""Framed wire-protocol messages over a connected Unix stream socket, with file descriptors attached.

Each received message starts at offset 0 of the receive buffer, so that tensors built on its bytes are as
aligned as the protocol lays them out. Tensors may view the buffer: while any does (its reference count tells),
the next message is read into a new buffer instead of overwriting it.
"""

from __future__ import annotations

import array
import collections
import math
import os
import select
import socket
import time
from collections.abc import Sequence
from typing import Any

from tritonrt.proxy.regions import received_fds
from tritonrt.proxy.views import Held
from tritonrt.proxy.wire import FLAG_NEW_REGION, HEADER_SIZE, Header, WireError, decode_header

__all__ = ["Link", "PeerGone"]

_FLAGS = int(socket.MSG_CMSG_CLOEXEC)
_NOWAIT = int(socket.MSG_DONTWAIT)
_CTRUNC = int(socket.MSG_CTRUNC)  # a plain int: an IntFlag's ``&`` runs Python code on every message
_ANCILLARY = socket.CMSG_SPACE(4 * 4)
_PEEK = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)
_INITIAL = 1 << 16


class PeerGone(ConnectionError):
    """The other side closed the connection (its process stopped or died)."""


class Link:
    """One end of a connection. ``spin_s``: how long :meth:`receive` polls before it sleeps."""

    def __init__(self, sock: socket.socket, spin_s: float = 0.0):
        sock.setblocking(True)
        self.sock = sock
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._spin_s = spin_s
        self._buffer = Held(bytearray(_INITIAL))  # see tritonrt.proxy.views
        self._end = 0  # bytes held
        self._consumed = 0  # length of the message returned last
        self._fds: collections.deque[int] = collections.deque()

    def receive(self, timeout: float | None = None) -> tuple[Header, bytearray, int] | None:
        """The next message: its header, the buffer it starts at offset 0 of, and the descriptor it announced
        (-1 if none). None if nothing came within ``timeout`` seconds (None: wait). The buffer stays valid
        until the next call."""
        self._drop_consumed()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            need = HEADER_SIZE
            if self._end >= HEADER_SIZE:
                header = decode_header(self._buffer.value)
                need = header.total_length
                if self._end >= need:
                    self._consumed = need
                    fd = -1
                    if header.flags & FLAG_NEW_REGION:
                        if not self._fds:
                            raise WireError("a new region was announced without its descriptor", breaks_stream=True)
                        fd = self._fds.popleft()
                    return header, self._buffer.value, fd
            if need > len(self._buffer.value):
                grown = bytearray(need)
                grown[: self._end] = memoryview(self._buffer.value)[: self._end]
                self._buffer = Held(grown)
            if not self._read(deadline):
                return None

    def _drop_consumed(self) -> None:
        """Move what follows the last message to the buffer's start (into a new buffer while arrays view it)."""
        consumed, self._consumed = self._consumed, 0
        exported = self._buffer.viewed()
        if not exported:
            if consumed == self._end:  # the common case: the last message was all there was
                self._end = 0
                return
            if not consumed:
                return
        left = self._end - consumed
        rest = bytes(memoryview(self._buffer.value)[consumed : self._end]) if left else b""
        if exported:
            self._buffer = Held(bytearray(max(_INITIAL, left)))
        self._buffer.value[:left] = rest
        self._end = left

    def _read(self, deadline: float | None) -> bool:
        """Read what arrives before ``deadline`` (None: wait for it, inside the read); False when nothing came by
        then. With a deadline it sleeps in poll rather than in a failed read: a read that finds nothing costs an
        exception in Python."""
        while True:
            if not (self._spin_s and self._spin()):
                if deadline is None:
                    if self._read_now(0):  # wait in the read itself: one system call per message
                        return True
                    continue
                if not self._poll.poll(max(0, math.ceil((deadline - time.monotonic()) * 1000))):
                    return False
            if self._read_now():
                return True

    def _spin(self) -> bool:
        """Poll without sleeping for up to the spin time; True once data (or the close) arrived."""
        end = time.perf_counter() + self._spin_s
        while time.perf_counter() < end:
            try:
                self.sock.recv(1, _PEEK)
                return True
            except BlockingIOError:
                os.sched_yield()
        return False

    def _read_now(self, nowait: int = _NOWAIT) -> bool:
        """Read what has arrived (``nowait=0``: wait for something); False if nothing had."""
        view = memoryview(self._buffer.value)[self._end :]
        try:
            count, ancillary, flags, _ = self.sock.recvmsg_into([view], _ANCILLARY, _FLAGS | nowait)
        except BlockingIOError:
            return False
        finally:
            view.release()
        if ancillary or flags & _CTRUNC:
            self._take_fds(ancillary, flags)
        if count == 0:
            raise PeerGone("the peer closed the connection")
        self._end += count
        return True

    def _take_fds(self, ancillary: list[tuple[int, int, bytes]], flags: int) -> None:
        fds = received_fds(ancillary)
        if flags & _CTRUNC:
            for fd in fds:
                os.close(fd)
            raise WireError("the peer sent more file descriptors than allowed", breaks_stream=True)
        self._fds.extend(fds)
        if len(self._fds) > 2:
            raise WireError("the peer sent descriptors that no message announced", breaks_stream=True)

    def send(self, parts: Sequence[Any], fd: int = -1, total: int = -1) -> None:
        """Send ``parts`` (bytes-like objects) as one message of ``total`` bytes (-1: count them); ``fd`` goes
        with its first byte."""
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))] if fd >= 0 else []
        if total < 0:
            total = sum(memoryview(part).nbytes for part in parts)
        sent = self.sock.sendmsg(parts, ancillary)
        while sent < total:  # a message larger than the socket's buffer: finish it
            views = [memoryview(part).cast("B") for part in parts]
            skip = sent
            while views and skip >= views[0].nbytes:
                skip -= views[0].nbytes
                views.pop(0)
            views[0] = views[0][skip:]
            parts = views
            total -= sent
            sent = self.sock.sendmsg(parts)

    def close(self) -> None:
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()
        try:
            self.sock.close()
        except OSError:
            pass
