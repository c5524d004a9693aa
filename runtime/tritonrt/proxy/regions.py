"""Shared memory regions of the wire protocol, on the Python side: anonymous sealed memfds passed as file
descriptors (no name anywhere, so nothing to squat or leak under /dev/shm).

A region is reserved when it is created (``posix_fallocate``: a memory limit fails there, with a clear error,
instead of with SIGBUS on first touch) and sealed against shrinking and growing; a peer's region is mapped only
after checking it is a regular file of the announced size with that seal.
"""

from __future__ import annotations

import array
import fcntl
import mmap
import os
import socket
import stat

import numpy as np

from tritonrt.memory import data_address
from tritonrt.proxy.views import Held
from tritonrt.proxy.wire import WireError, align

__all__ = ["OwnRegion", "PeerRegion", "RegionError", "default_region_limit", "received_fds", "size_for"]

_HEADROOM_LIMIT = 16 << 20
_GRANULE = 2 << 20
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class RegionError(RuntimeError):
    """A region could not be created: the message says why and what to do."""


def default_region_limit() -> int:
    """A quarter of the memory this process may use (its cgroup's limit or the machine's), at most 16 GiB."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        with open("/sys/fs/cgroup/memory.max") as limit:
            text = limit.read().strip()
        if text.isdigit():
            total = min(total, int(text))
    except OSError:
        pass
    return max(64 << 20, min(total // 4, 16 << 30))


def size_for(need: int, limit: int) -> int:
    """The size of a new region for ``need`` bytes (the rule of the wire protocol's specification)."""
    if need > limit:
        raise RegionError(
            f"the outputs of this batch need {need} bytes of shared memory, more than the region limit of {limit} "
            "bytes: return smaller outputs, or raise the limit"
        )
    wanted = need + min(need // 2, _HEADROOM_LIMIT)
    return max(need, min(align(wanted, _GRANULE), limit))


class OwnRegion:
    """This side's outgoing region, mapped read-write; ``base`` views it as uint8."""

    def __init__(self, region_id: int, size: int) -> None:
        fd = os.memfd_create("tritonrt", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(fd, size)
            os.posix_fallocate(fd, 0, size)
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
            self.map = mmap.mmap(fd, size)
        except OSError as error:
            os.close(fd)
            raise RegionError(
                f"cannot reserve {size} bytes of shared memory for outputs ({error.strerror}): the memory limit of "
                "this process's container or host is reached; return smaller outputs or give it more memory"
            ) from None
        self.fd = fd
        self.id, self.size = region_id, size
        self.base = np.frombuffer(self.map, np.uint8)
        self.start = data_address(self.base)
        self.top = 0  # space from here on is free
        self.announced = False  # its descriptor has been sent

    def close_fd(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PeerRegion:
    """This side's mapping of the peer's region, read-only (``PROT_READ``: this process cannot change the peer's
    memory, so arrays built on it are not writeable). ``base`` views it as uint8; numpy makes it the base of every
    array built on it, so :meth:`viewed` tells whether arrays still view the region (see
    :mod:`tritonrt.proxy.views`)."""

    def __init__(self, region_id: int, fd: int, size: int) -> None:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_size != size:
                raise WireError(f"the peer's region {region_id} is not a regular file of {size} bytes")
            if not fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK:
                raise WireError(f"the peer's region {region_id} is not sealed against shrinking")
            self.map = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        except OSError as error:
            raise WireError(f"the peer's region {region_id} cannot be mapped: {error}") from None
        finally:
            os.close(fd)
        self.id, self.size = region_id, size
        self._held: Held[np.ndarray] = Held(np.frombuffer(self.map, np.uint8))
        self.start = data_address(self._held.value)

    @property
    def base(self) -> np.ndarray:
        """The whole region as a read-only uint8 array (keep no reference to it: see :meth:`viewed`)."""
        return self._held.value

    def viewed(self) -> bool:
        """True while arrays built on the region (or views of them) are alive."""
        return self._held.viewed()


def received_fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The file descriptors in recvmsg's ancillary data."""
    fds: list[int] = []
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            numbers = array.array("i")
            numbers.frombytes(data[: len(data) - len(data) % numbers.itemsize])
            fds.extend(numbers)
    return fds
