"""Framed messages between the proxy model and the callable's process: a Unix socket plus shared memory.

A message is ``<inline length, header length>`` (16 bytes), the inline payload, then a pickled header of
plain values (so that the payload starts aligned without padding the header); one ``sendmsg`` sends it and
one read usually takes it. Tensors under ``SHM_THRESHOLD`` bytes travel inline and are read in place from a
reused receive buffer. Larger ones are copied once into the sender's shared memory region, which the
receiver maps once and reads in place; and an array that already lies in the receiver's region (an input
sent back as an output) goes back by reference, without a copy. The tensors of one name are laid out back
to back, request after request, so that ``@batch`` can join them without copying.

Space in a region is taken from its start onwards, and taken again from the start once the peer has answered
(the answer shows that it is done with what it was sent) and no array allocated there is left (see
:meth:`Channel.allocate`: the proxy model has numpy allocate large inputs in its region, which then go by
reference too). A region is replaced when a message does not fit, or when the receiver reports that it
still holds views into it (see :meth:`Channel.retained`). The receiver removes a region's name once it has
mapped it; the sender removes it too, at the latest when it closes, in case the receiver never did.

Header: ``(kind, extras, metas, region, note)``; ``metas[i]`` lists ``[name, dtype, shape, where, offset,
nbytes]`` for the tensors of group ``i`` (``where``: INLINE, from the message's start, or OWN or PEER
region); ``extras[i]`` is group-level data (request parameters, ...).
"""

from __future__ import annotations

import functools
import mmap
import os
import pathlib
import pickle
import select
import socket
import struct
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from tritonrt.memory import data_address
from tritonrt.model_config.dtypes import is_bytes_dtype
from tritonrt.proxy.protocol import BYTES, decode_bytes_array, encode_bytes_array

__all__ = ["SHM_THRESHOLD", "SPIN_S", "WORKER_SPIN_S", "Channel", "PeerGone"]

SHM_THRESHOLD = 64 << 10


def _seconds_from_us(variable: str, default: str) -> float:
    text = os.environ.get(variable, default)
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise ValueError(f"{variable}={text!r}: expected a number of microseconds >= 0 (0 turns polling off)")
    return value / 1e6


# The proxy model polls for up to this long for a reply before it sleeps, while its recent polls caught their
# reply. A reply caught so spares both sides a wake-up, which on a VM costs tens of microseconds (an IPI
# and an idle vCPU to rouse). A model slower than this is never polled for, except in one wait in 64, which
# notices when it gets fast again. TRITONRT_SPIN_US=0 turns polling off.
SPIN_S = _seconds_from_us("TRITONRT_SPIN_US", "200")
# The worker's wait for the next batch is the clients' round trip: long, so by default it sleeps. Polling
# there (TRITONRT_WORKER_SPIN_US=1000, say) spares a wake-up per batch, but keeps a core busy while requests
# come in: on 2 cores it raised 64 B x1 throughput by half and cost 14% at 16 connections.
WORKER_SPIN_S = _seconds_from_us("TRITONRT_WORKER_SPIN_US", "0")
_CHECK_EVERY = 64
_PREFIX = struct.Struct("<QQ")  # 16 bytes: the inline payload after it starts aligned
INLINE, OWN, PEER = 0, 1, 2  # where a tensor's bytes are: inline, in the sender's region, in the receiver's
_PEEK = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)  # an int: or-ing the flags each time costs an enum call
_DONTWAIT = int(socket.MSG_DONTWAIT)
_NEVER = 1 << 62
_ALIGN = 64
_PADDING = [bytes(size) for size in range(_ALIGN)]
_SHM_DIR = pathlib.Path("/dev/shm")


@functools.cache
def _dtype(code: str) -> np.dtype:
    return np.dtype(code)


_CODES: dict[np.dtype, str] = {}  # dtype -> its code on the wire; reading dtype.str builds a new string each time


def _code(dtype: np.dtype) -> str:
    code = _CODES[dtype] = BYTES if is_bytes_dtype(dtype) else dtype.str
    return code


def _bytes_view(data: Any) -> memoryview:
    return memoryview(data).cast("B") if not isinstance(data, bytes) else memoryview(data)


def _end_of(runs: dict[str, list], start: int) -> int:
    """Where runs of ``(meta, data)`` laid out from ``start``, each run aligned, end."""
    for run in runs.values():
        start = -(-start // _ALIGN) * _ALIGN + sum(meta[5] for meta, _ in run)
    return start


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
        self.name, self.size = name, size
        self.start = data_address(np.frombuffer(self.map, np.uint8))
        self.top = 0  # the space from here on is free
        self.held: dict[int, int] = {}  # address -> size of the blocks numpy holds (Channel.allocate)
        self.pending = False  # a message sent with data here has not been answered yet

    def offset_of(self, array: np.ndarray, nbytes: int) -> int | None:
        """The offset of ``array``'s data when it lies in this region."""
        offset = data_address(array) - self.start
        return offset if 0 <= offset and offset + nbytes <= self.size else None

    def free_up(self) -> None:
        """Take space from the start again once nothing that was placed in the region is in use."""
        if not self.held and not self.pending:
            self.top = 0


class Channel:
    """One end of a connected AF_UNIX stream socket.

    ``region_prefix`` names the shared memory this end creates for what it sends (None: inline only);
    ``spin_s`` is how long :meth:`recv` may poll before it sleeps (see ``SPIN_S``).
    """

    def __init__(self, sock: socket.socket, region_prefix: str | None, spin_s: float = 0.0):
        self._spin_s = spin_s
        self._ready = False  # the last poll saw the next message arrive: read it without waiting
        self._sock = sock
        self._readable = select.poll()
        self._readable.register(sock, select.POLLIN)
        self._region_prefix = region_prefix
        self._threshold = SHM_THRESHOLD if region_prefix is not None else _NEVER
        self._generation = 0
        self._out: _Region | None = None
        self._retired: list[str] = []  # names of outgoing regions the peer may not have mapped yet
        self._draining: list[_Region] = []  # replaced outgoing regions where numpy still holds blocks
        # numpy may free a block from any thread, or from a garbage collection run inside allocate
        self._space = threading.RLock()
        self._out_base: np.ndarray | None = None  # the outgoing region as uint8, the base of views into it
        self._in: _Region | None = None
        self._in_base: np.ndarray | None = None  # the same for the peer's region
        self._buffer = bytearray(1 << 16)
        self._carry = b""  # bytes read past the end of the last message
        self._last_used_region = False  # the last message received had tensors in the peer's region
        self._waits = 0
        self._catch_rate = 1.0  # recent share of polls that caught their message

    # -- sending ---------------------------------------------------------------------------------------------

    def send(
        self,
        kind: str,
        groups: list[tuple[Any, Mapping[str, Any]]] | None = None,
        note: Any = None,
        report_retained: bool = False,
    ) -> None:
        """Send ``groups`` of (extra, tensors) as one message; the list is consumed (emptied).

        With ``report_retained`` the note goes as ``(note, retained)``: whether this end still holds views of
        the peer's region (:meth:`retained`), checked once the references of this message are dropped.
        """
        # Declared with None: the references are dropped once laid out (see below).
        runs: dict[str, list] | None
        shm_runs: dict[str, list] | None
        placed: list | None
        array: np.ndarray | None
        data: Any  # a tensor's bytes: its array, or its encoded BYTES
        tensors: Mapping[str, Any] | None
        run: list | None
        extras, metas = [], []
        runs = {}  # name -> [(meta, data)]: a name's tensors are laid out back to back
        shm_runs = {}
        placed = []  # (name, meta, data) of arrays already in the outgoing region
        threshold = self._threshold
        for extra, tensors in groups or ():
            extras.append(extra)
            group = []
            for name, value in tensors.items():
                array = value if type(value) is np.ndarray else np.asarray(value)
                code = _CODES.get(array.dtype) or _code(array.dtype)
                if code is BYTES:
                    data = encode_bytes_array(array)
                    nbytes = len(data)
                else:
                    if not array.flags.c_contiguous:
                        array = np.ascontiguousarray(array)
                    data, nbytes = array, array.nbytes
                meta = [name, code, array.shape, INLINE, 0, nbytes]
                group.append(meta)
                if nbytes >= threshold:
                    meta[3] = OWN
                    if code is BYTES:
                        shm_runs.setdefault(name, []).append((meta, data))
                    elif (offset := self._peer_offset(array)) is not None:
                        meta[3], meta[4] = PEER, offset
                    elif self._out is not None and (offset := self._out.offset_of(array, nbytes)) is not None:
                        meta[4] = offset  # allocated there (see allocate): no copy
                        placed.append((name, meta, data))
                    else:
                        shm_runs.setdefault(name, []).append((meta, data))
                elif nbytes:
                    runs.setdefault(name, []).append((meta, data))
            metas.append(group)
        buffers: list = [b""]  # [prefix, inline tensor buffers (and alignment padding)..., header]
        inline_size = 0
        for run in runs.values():
            padding = -inline_size % _ALIGN  # each run starts aligned
            if padding:
                buffers.append(_PADDING[padding])
                inline_size += padding
            for meta, data in run:
                meta[4] = _PREFIX.size + inline_size  # inline offsets count from the message's start
                buffers.append(data)
                inline_size += meta[5]
        region = self._copy_to_region(shm_runs, placed) if shm_runs or placed else None
        runs = shm_runs = placed = None
        if groups:
            groups.clear()
        array = data = value = tensors = extra = run = None  # noqa: F841 - drop the last loop references
        if report_retained:
            note = (note, self.retained())
        header = pickle.dumps((kind, extras, metas, region, note), protocol=pickle.HIGHEST_PROTOCOL)
        buffers[0] = _PREFIX.pack(inline_size, len(header))
        buffers.append(header)
        sent = self._sock.sendmsg(buffers)
        if sent != _PREFIX.size + inline_size + len(header):
            self._send_rest(buffers, sent)

    def _copy_to_region(self, runs: dict[str, list], placed: list) -> str:
        """Copy the runs into free space of the outgoing region (each run starts aligned); its name.

        ``placed`` tensors already lie in the region; they are copied too if the message needs a new one.
        """
        with self._space:
            return self._lay_out(runs, placed)

    def _lay_out(self, runs: dict[str, list], placed: list) -> str:
        out = self._out
        start = out.top if out is not None else 0
        if out is None or _end_of(runs, start) > out.size:
            for name, meta, data in placed:
                runs.setdefault(name, []).append((meta, data))
            out, start = self._new_out_region(_end_of(runs, 0)), 0
        for run in runs.values():
            start = -(-start // _ALIGN) * _ALIGN
            for meta, data in run:
                meta[4] = start
                out.map[start : start + meta[5]] = _bytes_view(data)
                start += meta[5]
        out.top = max(out.top, start)
        out.pending = True
        return out.name

    def _peer_offset(self, array: np.ndarray) -> int | None:
        """The offset of ``array`` in the peer's region when it lies there (an input sent back): no copy."""
        if self._in is None or array.base is not self._in_base:  # numpy collapses views' bases
            return None
        return self._in.offset_of(array, array.nbytes)

    def _send_rest(self, buffers: list, sent: int) -> None:
        """Finish a partial ``sendmsg`` (the message was larger than the socket's buffer)."""
        views = [_bytes_view(b) for b in buffers]
        while views:
            while views and sent >= views[0].nbytes:
                sent -= views[0].nbytes
                views.pop(0)
            if sent:
                views[0] = views[0][sent:]
            if views:
                sent = self._sock.sendmsg(views)

    def _new_out_region(self, needed: int) -> _Region:
        self.retire_out_region()
        self._generation += 1
        size = max(needed, 1 << 20)
        size = 1 << (size - 1).bit_length()  # next power of two: few regrowths
        self._out = _Region(f"{self._region_prefix}{self._generation}", size, create=True)
        self._out_base = np.frombuffer(self._out.map, np.uint8)
        return self._out

    def retire_out_region(self) -> None:
        """Stop using the outgoing region (the peer still reads views of it); the next send makes a new one.

        Its name goes once the peer has answered: until then the peer may not have mapped it yet. Its mapping
        stays while numpy holds blocks of it.
        """
        with self._space:
            if self._out is not None:
                self._retired.append(self._out.name)
                if self._out.held:
                    self._draining.append(self._out)
                self._out = self._out_base = None

    # -- numpy's large arrays (the proxy model installs tritonrt.proxy.arena) ----------------------------------

    def allocate(self, size: int) -> int:
        """An address for a block of ``size`` bytes in the outgoing region, or 0 where it has no room.

        A region too small is replaced only while nothing is placed in it: the arrays of one message must share
        a region to go by reference.
        """
        with self._space:
            out = self._out
            if out is None or (out.size < size and not out.held and not out.pending):
                if self._region_prefix is None:
                    return 0
                out = self._new_out_region(size)
            offset = -(-out.top // _ALIGN) * _ALIGN
            if offset + size > out.size:
                return 0
            address = out.start + offset
            out.held[address] = size
            out.top = offset + size
            return address

    def held_size(self, address: int) -> int | None:
        """The size of the block at ``address`` from :meth:`allocate`; None for any other address."""
        for region in (self._out, *self._draining):
            if region is not None and address in region.held:
                return region.held[address]
        return None

    def release(self, address: int) -> bool:
        """Give back a block from :meth:`allocate`; False if ``address`` is not one."""
        with self._space:
            out = self._out
            if out is not None and out.held.pop(address, None) is not None:
                out.free_up()
                return True
            for region in self._draining:
                if region.held.pop(address, None) is not None:
                    if not region.held:
                        self._draining.remove(region)  # the mapping goes with the last view of it
                    return True
            return False

    def _unlink_retired(self) -> None:
        for name in self._retired:
            (_SHM_DIR / name).unlink(missing_ok=True)
        self._retired.clear()

    # -- receiving -------------------------------------------------------------------------------------------

    def _read(self, have: int) -> int:
        """Read what has arrived into the receive buffer at ``have``; sleep until something has, first."""
        view = memoryview(self._buffer)[have:] if have else self._buffer
        # Sleep in poll(POLLIN), not in a blocking recv. A blocking recv on an AF_UNIX stream socket is woken
        # whenever the peer reads what this end sent (the write-space wake-up, filtered by poll but not by
        # recv): one futile wake-up of each side per round trip. Polling first also spares the failed read
        # (and its exception) of a message that has not arrived yet.
        if not self._ready:
            self._readable.poll()
        self._ready = False
        while True:
            try:
                received = self._sock.recv_into(view, 0, _DONTWAIT)
                break
            except BlockingIOError:
                self._readable.poll()
        if received == 0:
            raise PeerGone("the peer closed the connection")
        return received

    def _poll(self) -> None:
        """Wait up to the spin time, without sleeping, for the next message, if recent polls caught theirs.

        The loop yields the CPU at each turn, so a thread that is ready to run on this CPU (the peer, say) is
        not held up by it.
        """
        self._waits += 1
        if self._catch_rate < 0.5 and self._waits % _CHECK_EVERY:
            return
        deadline = time.perf_counter() + self._spin_s
        peek, clock, yield_cpu = self._sock.recv, time.perf_counter, os.sched_yield
        caught = 0.0
        while clock() < deadline:
            try:
                peek(1, _PEEK)
                caught = 1.0  # data (or the peer closed): the read takes it from here, without sleeping
                self._ready = True
                break
            except BlockingIOError:
                yield_cpu()
        self._catch_rate += (caught - self._catch_rate) * 0.125

    def recv(self) -> tuple[str, list, list[dict[str, np.ndarray]], Any]:
        """Receive one message: ``(kind, extras, tensor dicts, note)``; numeric arrays are views, not copies.

        One read usually takes the whole message; bytes of the next message read with it (a stream of
        replies) are carried over to the next call.
        """
        if self._inline_exported():  # arrays of the last message still view the buffer: leave it to them
            self._buffer = bytearray(len(self._buffer))
        have = len(self._carry)
        if have:
            self._buffer[:have] = self._carry
            self._carry = b""
        elif self._spin_s:
            self._poll()
        while have < _PREFIX.size:
            have += self._read(have)
        inline_size, header_size = _PREFIX.unpack_from(self._buffer)
        header_start = _PREFIX.size + inline_size
        total = header_start + header_size
        if total > len(self._buffer):
            grown = bytearray(max(total, 2 * len(self._buffer)))
            grown[:have] = memoryview(self._buffer)[:have]
            self._buffer = grown
        while have < total:
            have += self._read(have)
        buffer = self._buffer
        if have > total:
            self._carry = bytes(memoryview(buffer)[total:have])
        kind, extras, metas, region, note = pickle.loads(buffer[header_start:total])  # a short copy: cheapest
        if self._out is not None:  # the peer has read every message sent before this answer
            with self._space:
                self._out.pending = False
                self._out.free_up()
        if self._retired:
            self._unlink_retired()
        # Tensors of the peer's region are views of one uint8 array, and numpy makes that array the base of
        # every view derived from them: while it lives, the callable still holds data of the region. Inline
        # tensors view the receive buffer itself, whose exports _inline_exported sees.
        sources = [buffer, self._in_region(region) if region else None, self._out_base]
        groups = []
        for group in metas:
            tensors = {}
            for name, dtype, shape, where, offset, nbytes in group:
                if dtype == BYTES:
                    tensors[name] = decode_bytes_array(memoryview(sources[where])[offset : offset + nbytes], shape)
                elif nbytes:
                    tensors[name] = np.ndarray(shape, _dtype(dtype), sources[where], offset)
                else:
                    tensors[name] = np.empty(shape, _dtype(dtype))
            groups.append(tensors)
        self._last_used_region = region is not None
        return kind, extras, groups, note

    def _inline_exported(self) -> bool:
        """True while arrays still view the receive buffer: each holds a reference to it (or to an array that
        does), as does any memoryview of it; besides those, only this end and getrefcount's argument do."""
        return sys.getrefcount(self._buffer) > 2

    def retained(self) -> bool:
        """True when arrays of the last message still view the peer's shared memory region.

        The peer must then stop reusing that region (``retire_out_region`` on its side).
        """
        # Every view into the region, however derived, holds a reference to its base array; this end holds
        # one more (self._in_base), and getrefcount's argument another.
        return self._last_used_region and sys.getrefcount(self._in_base) > 2

    def _in_region(self, name: str) -> np.ndarray | None:
        """The peer's region ``name`` as a uint8 array, mapped on first use (the type is the attribute's)."""
        if self._in is None or self._in.name != name:
            self._in = _Region(name, 0, create=False)
            (_SHM_DIR / name).unlink(missing_ok=True)  # mapped: the name is no longer needed
            self._in_base = np.frombuffer(self._in.map, np.uint8)
        return self._in_base

    def close(self) -> None:
        """Close the socket and remove the regions this end created (numpy's blocks stay until released)."""
        self._region_prefix = None  # allocate no more
        self.retire_out_region()
        self._unlink_retired()
        self._in = self._in_base = None
        try:
            self._sock.close()
        except OSError:
            pass
