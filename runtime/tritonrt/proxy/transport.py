"""Framed messages between the proxy model and the callable's process: a Unix socket plus shared memory.

Each message is ``<header length, inline length>`` (12 bytes), a pickled header of plain values, then the
inline payload. Small tensors travel inline (one ``sendmsg`` of the numpy buffers, read with ``recv_into``
a reused buffer); tensors of ``SHM_THRESHOLD`` bytes or more are copied once into the sender's shared memory
region, which the receiver maps once and reads in place. A region is replaced only when a message does not
fit, or when the receiver reports that it still holds views into it (see :meth:`Channel.retained`).

Header: ``(kind, extras, metas, region, note)``; ``metas[i]`` lists ``(name, dtype, shape, in_shm, offset,
nbytes)`` for the tensors of group ``i``; ``extras[i]`` is group-level data (request parameters, ...).
"""

from __future__ import annotations

import mmap
import os
import pathlib
import pickle
import socket
import struct
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tritonrt.proxy.protocol import BYTES, decode_bytes_array, encode_bytes_array, is_bytes_dtype

SHM_THRESHOLD = 64 << 10
# Before blocking on a read, poll for up to this long when the last message was small: small requests are
# latency-bound, and a reply or next request that comes within it saves a sleep and a wake-up of this process
# (expensive on VMs). Large messages are CPU-bound, so no polling there. TRITONRT_SPIN_US=0 turns it off.
SPIN_S = float(os.environ.get("TRITONRT_SPIN_US", "300")) / 1e6
_PREFIX = struct.Struct("<IQ")
_ALIGN = 64
_SHM_DIR = pathlib.Path("/dev/shm")


class PeerGone(ConnectionError):
    """The other side closed the connection (its process stopped or died)."""


class _Region:
    """A shared memory segment under /dev/shm, mapped read-write."""

    def __init__(self, name: str, size: int, create: bool):
        path = _SHM_DIR / name
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            else:
                size = os.fstat(fd).st_size
            self.map = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        self.name, self.size, self.owned = name, size, create

    def unlink(self) -> None:
        if self.owned:
            (_SHM_DIR / self.name).unlink(missing_ok=True)


class Channel:
    """One end of a connected AF_UNIX stream socket.

    ``region_prefix`` names the shared memory this end creates for what it sends (None: inline only).
    """

    def __init__(self, sock: socket.socket, region_prefix: str | None):
        self._sock = sock
        self._region_prefix = region_prefix
        self._generation = 0
        self._out: _Region | None = None
        self._in: _Region | None = None
        self._buffer = bytearray(1 << 16)
        self._prefix = bytearray(_PREFIX.size)
        self._views: list[weakref.ref] = []
        self._last_small = True  # was the last message sent or received small (no shared memory)?

    # -- sending ---------------------------------------------------------------------------------------------

    def send(
        self,
        kind: str,
        groups: list[tuple[Any, Mapping[str, Any]]] | None = None,
        note: Any = None,
        finish: Callable[[], Any] | None = None,
    ) -> None:
        """Send ``groups`` of (extra, tensors) as one message; the list is consumed (emptied).

        ``finish()``, when given, runs after large tensors are copied out and the references to them dropped;
        its result becomes the message's note.
        """
        groups = groups if groups is not None else []
        inline: list = []
        inline_size = 0
        to_shm: list[tuple[memoryview, int]] = []
        shm_size = 0
        extras, metas = [], []
        for extra, tensors in groups:
            extras.append(extra)
            group = []
            for name, value in tensors.items():
                array = value if isinstance(value, np.ndarray) else np.asarray(value)
                if is_bytes_dtype(array.dtype):
                    data, dtype = memoryview(encode_bytes_array(array)), BYTES
                else:
                    if not array.flags.c_contiguous:
                        array = np.ascontiguousarray(array)
                    data, dtype = memoryview(array.reshape(-1).view(np.uint8)), array.dtype.str
                nbytes = data.nbytes
                if self._region_prefix is not None and nbytes >= SHM_THRESHOLD:
                    group.append((name, dtype, array.shape, True, shm_size, nbytes))
                    to_shm.append((data, shm_size))
                    shm_size += -(-nbytes // _ALIGN) * _ALIGN
                else:
                    group.append((name, dtype, array.shape, False, inline_size, nbytes))
                    inline.append(data)
                    inline_size += nbytes
            metas.append(group)
        self._last_small = not to_shm and inline_size < SHM_THRESHOLD
        region = None
        if to_shm:
            out = self._out_region(shm_size)
            for data, offset in to_shm:
                out.map[offset : offset + data.nbytes] = data
            region = out.name
        groups.clear()
        to_shm.clear()
        array = data = value = tensors = extra = None  # noqa: F841 - drop the last loop references
        if finish is not None:
            note = finish()
        header = pickle.dumps((kind, extras, metas, region, note), protocol=pickle.HIGHEST_PROTOCOL)
        self._sendall([_PREFIX.pack(len(header), inline_size), header, *inline])

    def _sendall(self, buffers: list) -> None:
        views = [memoryview(b).cast("B") for b in buffers if len(b)]
        while views:
            sent = self._sock.sendmsg(views)
            while views and sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            if sent:
                views[0] = views[0][sent:]

    def _out_region(self, needed: int) -> _Region:
        if self._out is not None and self._out.size >= needed:
            return self._out
        self.retire_out_region()
        self._generation += 1
        size = max(needed, 1 << 20)
        size = 1 << (size - 1).bit_length()  # next power of two: few regrowths
        self._out = _Region(f"{self._region_prefix}{self._generation}", size, create=True)
        return self._out

    def retire_out_region(self) -> None:
        """Stop reusing the outgoing region (the peer still reads views of it); the next send makes a new one."""
        if self._out is not None:
            self._out.unlink()
            self._out = None

    # -- receiving -------------------------------------------------------------------------------------------

    def _recv_exact(self, view: memoryview) -> None:
        while view.nbytes:
            received = self._sock.recv_into(view)
            if received == 0:
                raise PeerGone("the peer closed the connection")
            view = view[received:]

    def _poll(self) -> None:
        """Wait up to SPIN_S without sleeping for the next message to arrive."""
        deadline = time.perf_counter() + SPIN_S
        while time.perf_counter() < deadline:
            try:
                self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)
                return  # data (or the peer closed): the blocking read takes it from here
            except BlockingIOError:
                continue

    def recv(self) -> tuple[str, list, list[dict[str, np.ndarray]], Any]:
        """Receive one message: ``(kind, extras, tensor dicts, note)``; numeric arrays are views, not copies."""
        if SPIN_S and self._last_small:
            self._poll()
        self._recv_exact(memoryview(self._prefix))
        header_size, inline_size = _PREFIX.unpack(self._prefix)
        total = header_size + inline_size
        if len(self._buffer) < total or self._inline_exported():
            self._buffer = bytearray(max(total, len(self._buffer)))
        buffer = memoryview(self._buffer)
        self._recv_exact(buffer[:total])
        kind, extras, metas, region, note = pickle.loads(buffer[:header_size])
        self._last_small = region is None and inline_size < SHM_THRESHOLD
        inline = buffer[header_size:total]
        shm = self._in_region(region).map if region else None
        groups, views = [], []
        self._views = []
        for group in metas:
            tensors = {}
            for name, dtype, shape, in_shm, offset, nbytes in group:
                source = shm if in_shm else inline
                if dtype == BYTES:
                    tensors[name] = decode_bytes_array(memoryview(source)[offset : offset + nbytes], shape)
                else:
                    dt = np.dtype(dtype)
                    array = np.frombuffer(source, dtype=dt, count=nbytes // dt.itemsize, offset=offset).reshape(shape)
                    tensors[name] = array
                    if in_shm:
                        views.append(weakref.ref(array))
            groups.append(tensors)
        self._views = views
        return kind, extras, groups, note

    def _inline_exported(self) -> bool:
        """True while arrays still view the receive buffer (a bytearray with exports cannot change size)."""
        try:
            self._buffer.append(0)
        except BufferError:
            return True
        del self._buffer[-1]
        return False

    def retained(self) -> bool:
        """True when arrays of the last message still view the peer's shared memory region.

        The peer must then stop reusing that region (``retire_out_region`` on its side).
        """
        return any(ref() is not None for ref in self._views)

    def _in_region(self, name: str) -> _Region:
        if self._in is None or self._in.name != name:
            self._in = _Region(name, 0, create=False)
        return self._in

    def close(self) -> None:
        """Close the socket and remove the region this end created."""
        self.retire_out_region()
        self._in = None
        try:
            self._sock.close()
        except OSError:
            pass
