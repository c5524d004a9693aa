"""When a worker reports a lost peer, and when it moves to a new instance (proxy/peer.py): with real Unix sockets."""

from __future__ import annotations

import pathlib
import socket
import threading

import pytest

from tritonrt.proxy.peer import move_to_waiting, peer_closed


@pytest.fixture
def listener(tmp_path: pathlib.Path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(tmp_path / "w.sock"))
    sock.listen(1)
    yield sock
    sock.close()


def test_a_peer_gone_with_no_replacement_is_reported(listener):
    reports: list[str] = []
    assert peer_closed(listener, threading.Event(), lambda: reports.append("lost"))
    assert reports == ["lost"]


def test_a_replacement_waiting_in_the_listen_queue_means_a_reload(listener):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as replacement:
        replacement.connect(listener.getsockname())
        reports: list[str] = []
        assert not peer_closed(listener, threading.Event(), lambda: reports.append("lost"))
        assert reports == []


def test_a_stopping_worker_reports_nothing(listener):
    stopping = threading.Event()
    stopping.set()
    assert not peer_closed(listener, stopping, lambda: pytest.fail("reported while stopping"))


def test_a_closed_listener_or_no_hook_reports_nothing(listener):
    assert not peer_closed(listener, threading.Event(), None)
    listener.close()
    assert not peer_closed(listener, threading.Event(), lambda: pytest.fail("reported with a closed listener"))


def test_a_worker_moves_to_a_new_instance_that_waits_and_answers_the_old_one_first(listener):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as old_instance:
        old_instance.connect(listener.getsockname())
        current, _ = listener.accept()
        with current:
            assert not move_to_waiting(listener, current), "nothing waits: the worker stays"
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as new_instance:
                new_instance.connect(listener.getsockname())
                assert move_to_waiting(listener, current)
                assert current.recv(16) == b"", "the worker's next read ends the old connection"
                current.sendall(b"answer")  # what it was answering still goes out
                assert old_instance.recv(16) == b"answer"


def test_moving_from_a_closed_connection_does_nothing(listener):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as waiting:
        waiting.connect(listener.getsockname())
        closed = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        closed.close()
        assert not move_to_waiting(listener, closed)
        assert not move_to_waiting(listener, None)
