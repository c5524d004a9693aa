"""Free TCP ports for the servers a program starts itself: tests, benchmarks, ``make tune``.

A port that was free when asked for is bound by the server a moment later, and in between another program may take
it. The usual pick, ``bind(("", 0))``, draws from the kernel's ephemeral range, where every outgoing connection
and every other program's pick of port 0 draws too. ``free_ports`` picks below that range instead, from a block of
ports this process claims for its lifetime (an abstract Unix socket names the claim, so it ends with the process
and leaves no file behind): two processes calling it never get the same port, and no outgoing connection takes
one. Where that cannot be done (no abstract sockets outside Linux; an ephemeral range that starts too low) it
falls back to port 0's pick.

Example::

    from tritonrt.ports import free_ports
    from tritonrt.triton import Triton, TritonConfig

    http_port, grpc_port, metrics_port = free_ports(3)
    triton = Triton(config=TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port))
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import sys
import threading

__all__ = ["free_ports"]

_FIRST_PORT = 10240
"""The lowest port handed out; the ports below are left to services that listen on fixed ports."""
_BLOCK_SIZE = 128
"""Ports per claimed block: a port comes back to the same process after this many other picks."""
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


class _Block:
    """The block of ports this process has claimed, and where its next pick starts."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner_pid = 0
        self.claims: list[socket.socket] = []
        self.first = 0
        self.next = 0


_BLOCK = _Block()


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on every interface now, from this process's block (see the module)."""
    if count < 1:
        raise ValueError(f"free_ports(count={count}): ask for at least one port")
    with _BLOCK.lock:
        picked: list[int] = []
        for attempt in range(2):  # the block claimed last, then a fresh one (the old stays claimed) if it had too few
            if not _claimed(fresh=attempt > 0):
                break
            picked.extend(_pick_from_block(count - len(picked)))
            if len(picked) == count:
                return picked
        return picked + _kernel_picks(count - len(picked))


def _claimed(fresh: bool) -> bool:
    """Whether this process holds a block to pick from, claiming one if it has none or ``fresh`` asks for another
    (a forked child claims its own)."""
    if _BLOCK.owner_pid != os.getpid():
        _BLOCK.claims, _BLOCK.owner_pid = [], os.getpid()  # the parent's claims stay the parent's
    elif _BLOCK.claims and not fresh:
        return True
    limit = _ephemeral_low()
    if not sys.platform.startswith("linux") or limit - _FIRST_PORT < _BLOCK_SIZE:
        return False
    blocks = list(range(_FIRST_PORT, limit - _BLOCK_SIZE + 1, _BLOCK_SIZE))
    random.shuffle(blocks)
    for first in blocks:
        claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            claim.bind(f"\0tritonrt-ports-{first}")
        except OSError:
            claim.close()
            continue
        _BLOCK.claims.append(claim)
        _BLOCK.first, _BLOCK.next = first, 0
        return True
    return False


def _pick_from_block(count: int) -> list[int]:
    """Up to ``count`` ports of the block that bind now, taken round the block from where the last pick ended."""
    picked: list[int] = []
    for _ in range(_BLOCK_SIZE):
        port = _BLOCK.first + _BLOCK.next
        _BLOCK.next = (_BLOCK.next + 1) % _BLOCK_SIZE
        if _binds(port):
            picked.append(port)
            if len(picked) == count:
                break
    return picked


def _binds(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def _kernel_picks(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) for _ in range(count)]
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (32768 where it cannot be read)."""
    try:
        with open(_EPHEMERAL_RANGE, encoding="ascii") as range_file:
            return int(range_file.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
