"""A worker process's owner (tritonrt.models.worker_process) changes its state under its lock only, and talks to the
worker (tritonrt.models.worker_child) through the control socket's messages, descriptors included."""

from __future__ import annotations

import ast
import os
import pathlib
import socket

from tritonrt.models import worker_process
from tritonrt.models.worker_child import STOP, Event, receive, send


def _assignments_outside_the_lock(source: str, class_name: str) -> list[str]:
    """``self.<name> = ...`` (plain, augmented or unpacked) in ``class_name``'s methods other than ``__init__``
    that no ``with self._lock:`` encloses, as ``method:line self.<name>``."""
    tree = ast.parse(source)
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name)
    found: list[str] = []

    def is_lock(item: ast.withitem) -> bool:
        expression = item.context_expr
        return (
            isinstance(expression, ast.Attribute)
            and expression.attr == "_lock"
            and isinstance(expression.value, ast.Name)
            and expression.value.id == "self"
        )

    def targets(node: ast.AST) -> list[ast.expr]:
        if isinstance(node, ast.Assign):
            return [leaf for target in node.targets for leaf in _leaves(target)]
        if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            return _leaves(node.target)
        return []

    def visit(node: ast.AST, method: str, locked: bool) -> None:
        for target in targets(node):
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
                if not locked:
                    found.append(f"{method}:{node.lineno} self.{target.attr}")  # type: ignore[attr-defined]
        if isinstance(node, ast.With):
            locked = locked or any(is_lock(item) for item in node.items)
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.Lambda)):  # (a nested function runs elsewhere)
                visit(child, method, locked)

    for method in cls.body:
        if isinstance(method, ast.FunctionDef) and method.name != "__init__":
            for statement in method.body:
                visit(statement, method.name, False)
    return found


def _leaves(target: ast.expr) -> list[ast.expr]:
    if isinstance(target, (ast.Tuple, ast.List)):
        return [leaf for element in target.elts for leaf in _leaves(element)]
    return [target]


def test_the_owner_changes_its_state_under_its_lock_only():
    source = pathlib.Path(worker_process.__file__).read_text()
    assert _assignments_outside_the_lock(source, "ProcessInstance") == []


def test_the_check_sees_a_change_outside_the_lock():
    source = """
class ProcessInstance:
    def __init__(self):
        self._state = 0
    def locked(self):
        with self._lock:
            self._state, self._pid = 1, 2
    def unlocked(self):
        previous, self._connection = self._connection, None
        with self._lock:
            pass
        self._connected += 1
"""
    assert _assignments_outside_the_lock(source, "ProcessInstance") == [
        "unlocked:9 self._connection",
        "unlocked:12 self._connected",
    ]


def test_reports_carry_their_text_and_a_connections_descriptor_until_the_worker_ends():
    owner, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    try:
        send(worker, Event.FAILED, "ValueError: no weights")
        send(worker, Event.CONNECTED, fd=write_end)
        failed = receive(owner)
        assert failed is not None and (failed.event, failed.text, failed.fds) == (
            Event.FAILED,
            "ValueError: no weights",
            [],
        )
        connected = receive(owner)
        assert connected is not None and connected.event is Event.CONNECTED and len(connected.fds) == 1
        os.write(connected.fds[0], b"x")  # a descriptor of its own, onto the worker's
        os.close(connected.fds[0])
        assert os.read(read_end, 1) == b"x"
        owner.send(STOP)
        assert worker.recv(1 << 16) == STOP
        worker.close()
        assert receive(owner) is None  # the worker ended
    finally:
        for fd in (read_end, write_end):
            os.close(fd)
        owner.close()
        worker.close()
