"""The worker's listening socket: one per model instance, where the backend instance connects, shakes hands
(its token, model, instance and config checked against this process's) and gets a :class:`WorkerConnection`.

Example::

    listener = WorkerListener(folder / "instance-0.sock", identity)
    connection = listener.accept()  # blocks until the backend connects and passes the handshake
"""

from __future__ import annotations

import hmac
import os
import pathlib
import socket

from tritonrt.proxy import wire
from tritonrt.proxy.connection import InstanceIdentity, WorkerConnection, WorkerSettings
from tritonrt.proxy.link import Link, PeerGone
from tritonrt.proxy.wire import FLAG_DECOUPLED, KIND_HELLO, KIND_REFUSE, KIND_WELCOME, Header, WireError
from tritonrt.proxy.wire_decode import decode_body

__all__ = ["VERSION_TEXT", "WorkerListener"]

VERSION_TEXT = "tritonrt-worker 0.1.0"
_HANDSHAKE_TIMEOUT_S = 10.0


class WorkerListener:
    """Listen on the Unix socket ``path`` (created mode 0600) for the backend instance ``identity``."""

    def __init__(self, path: pathlib.Path, identity: InstanceIdentity, settings: WorkerSettings | None = None):
        self.path, self.identity = path, identity
        self.settings = settings or WorkerSettings()
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # for tritonrt.proxy.peer's checks
        self.socket.bind(str(path))
        os.chmod(path, 0o600)
        self.socket.listen(1)
        self.refusals: list[str] = []  # why connections were refused, latest last

    def accept(self) -> WorkerConnection:
        """The next backend connection that passes the handshake (others are refused with a reason and
        closed). Raises OSError once the listener is closed."""
        while True:
            sock, _ = self.socket.accept()
            link = Link(sock, self.settings.worker_spin_us / 1e6)
            try:
                reason = self._handshake(link)
            except (WireError, PeerGone, OSError) as error:
                reason = str(error)
                self._refuse(link, reason)
            if reason is None:
                return WorkerConnection(link, self.identity, self.settings)
            self.refusals.append(reason)
            link.close()

    def _handshake(self, link: Link) -> str | None:
        received = link.receive(_HANDSHAKE_TIMEOUT_S)
        if received is None:
            return "no HELLO within the handshake's time"
        header, buffer, _ = received
        if header.kind != KIND_HELLO:
            return self._refuse(link, f"expected HELLO, got a message of kind {header.kind}")
        hello = decode_body(header, buffer)
        me = self.identity
        problems = []
        if not hmac.compare_digest(hello.token.encode(), me.token.encode()):
            problems.append("its token does not match this model's connection file (a stale model repository?)")
        if hello.model_name != me.model_name:
            problems.append(f"it serves model {hello.model_name!r}, this process model {me.model_name!r}")
        if hello.instance_index != me.instance_index:
            problems.append(f"it is instance {hello.instance_index}, this socket serves instance {me.instance_index}")
        if bool(header.flags & FLAG_DECOUPLED) != me.decoupled:
            problems.append(f"decoupled is {bool(header.flags & FLAG_DECOUPLED)} in its config, {me.decoupled} here")
        if (hello.max_batch_size > 0) != (me.max_batch_size > 0):  # another size above 0: a reload's new config
            problems.append(f"max_batch_size is {hello.max_batch_size} in its config, {me.max_batch_size} here")
        if problems:
            return self._refuse(link, "; ".join(problems))
        s = self.settings
        welcome = wire.Welcome(os.getpid(), s.inline_threshold, s.spin_us, s.region_limit, VERSION_TEXT)
        link.send([wire.encode_message(Header(KIND_WELCOME), wire.encode_welcome(welcome))])
        return None

    def serving(self, connection: WorkerConnection) -> None:
        """The worker starts serving ``connection`` (accepted meanwhile, perhaps while it served another one: a
        model reloaded by Triton connects its new instance before the old one goes)."""

    @staticmethod
    def _refuse(link: Link, reason: str) -> str:
        try:
            link.send([wire.encode_message(Header(KIND_REFUSE), wire.encode_text(reason))])
        except OSError:
            pass
        return reason

    def close(self) -> None:
        """Stop listening (wakes a blocked accept) and remove the socket's path."""
        try:
            self.socket.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.socket.close()
        self.path.unlink(missing_ok=True)
