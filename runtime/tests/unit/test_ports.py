"""tritonrt.ports: free ports below the ephemeral range, never the same in two processes, never a busy one."""

from __future__ import annotations

import multiprocessing
import socket
import subprocess
import sys

import pytest

from tritonrt import ports
from tritonrt.ports import free_ports

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the port blocks are claimed on Linux")

OTHER_PROCESS = "from tritonrt.ports import free_ports; print(*free_ports(100))"


def _binds(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def test_ports_are_distinct_free_and_below_the_ephemeral_range():
    picked = free_ports(10)
    assert len(set(picked)) == 10
    assert all(ports._FIRST_PORT <= port < ports._ephemeral_low() for port in picked)
    assert all(_binds(port) for port in picked)


def test_two_processes_never_get_the_same_port():
    mine = set(free_ports(100))
    other = subprocess.run([sys.executable, "-c", OTHER_PROCESS], capture_output=True, text=True, check=True)
    theirs = {int(port) for port in other.stdout.split()}
    assert len(theirs) == 100
    assert not mine & theirs


def _child_ports(queue) -> None:
    queue.put(free_ports(100))


def test_a_forked_child_claims_its_own_block():
    mine = set(free_ports(100))
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_ports, args=(queue,))
    child.start()
    theirs = set(queue.get(timeout=30))
    child.join(timeout=30)
    assert child.exitcode == 0
    assert not mine & theirs
    assert len(set(free_ports(100))) == 100  # the parent's block is still its own


def test_a_bound_port_is_passed_over():
    with socket.socket() as busy:
        busy.bind(("", free_ports(1)[0]))
        busy.listen()
        taken = busy.getsockname()[1]
        assert taken not in {free_ports(1)[0] for _ in range(2 * ports._BLOCK_SIZE)}


def test_a_block_without_enough_free_ports_leads_to_a_fresh_one(monkeypatch):
    monkeypatch.setattr(ports, "_binds", lambda port: port % 2 == 0)  # half of every block busy
    picked = free_ports(ports._BLOCK_SIZE)
    assert len(set(picked)) == ports._BLOCK_SIZE
    assert all(port % 2 == 0 and port < ports._ephemeral_low() for port in picked)


def test_an_ephemeral_range_that_starts_low_falls_back_to_the_kernels_pick(monkeypatch):
    monkeypatch.setattr(ports, "_BLOCK", ports._Block())
    monkeypatch.setattr(ports, "_ephemeral_low", lambda: ports._FIRST_PORT + 10)
    picked = free_ports(3)
    assert len(set(picked)) == 3
    assert all(_binds(port) for port in picked)
    assert ports._BLOCK.claims == []  # no block claimed: the kernel picked them


def test_asking_for_no_port_is_an_error():
    with pytest.raises(ValueError, match="at least one port"):
        free_ports(0)
