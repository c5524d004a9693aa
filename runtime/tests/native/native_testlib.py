"""What the native backend's tests share (importable from them: conftest puts this directory on sys.path)."""

from __future__ import annotations

import array
import os
import pathlib
import socket

__all__ = ["GOLDEN_DIR", "NATIVE_DIR", "SPEC", "FakeBackend", "spec_constants"]

NATIVE_DIR = pathlib.Path(__file__).resolve().parents[2] / "native"
SPEC = pathlib.Path(__file__).resolve().parents[2] / "docs" / "wire-protocol.md"
GOLDEN_DIR = NATIVE_DIR / "tests" / "golden"


def spec_constants() -> dict[str, int]:
    """The constants block of the wire protocol's specification."""
    text = SPEC.read_text()
    block = text.split("```constants\n", 1)[1].split("```", 1)[0]
    constants = {}
    for line in block.splitlines():
        name, _, value = line.partition(" = ")
        constants[name.strip()] = int(value, 0)
    return constants


class FakeBackend:
    """The backend's end of a connection, in Python, for tests of the worker side: connect, say HELLO, send
    batches (inline data, or in a region of its own passed by descriptor), read replies."""

    def __init__(self, path: pathlib.Path, hello, decoupled: bool = False):
        from tritonrt.proxy import wire

        self.wire = wire
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(str(path))
        self.sock.settimeout(10)
        self._buffer = b""
        self.fds: list[int] = []
        header = wire.Header(wire.KIND_HELLO, wire.FLAG_DECOUPLED if decoupled else 0)
        self.sock.sendall(wire.encode_message(header, wire.encode_hello(hello)))
        self.seq = 0
        self.region = None

    def read(self):
        """(header, whole message bytes); the descriptors that came with it go to self.fds."""
        wire = self.wire
        while True:
            if len(self._buffer) >= wire.HEADER_SIZE:
                header = wire.decode_header(self._buffer)
                if len(self._buffer) >= header.total_length:
                    message, self._buffer = self._buffer[: header.total_length], self._buffer[header.total_length :]
                    return header, message
            data, ancillary, _, _ = self.sock.recvmsg(1 << 20, socket.CMSG_SPACE(16))
            if not data:
                raise ConnectionError("the worker closed the connection")
            from tritonrt.proxy.regions import received_fds

            self.fds.extend(received_fds(ancillary))
            self._buffer += data

    def new_region(self, size: int):
        from tritonrt.proxy.regions import OwnRegion

        self.region = OwnRegion(1 if self.region is None else self.region.id + 1, size)
        return self.region

    def send_batch(self, requests, data: bytes = b"", *, region: bool = False, announce: bool = False) -> int:
        wire = self.wire
        self.seq += 1
        flags = wire.FLAG_NEW_REGION if announce else 0
        region_id = self.region.id if region else 0
        size = self.region.size if announce else 0
        header = wire.Header(wire.KIND_BATCH, flags, len(requests), self.seq, size, region_id)
        message = wire.encode_message(header, wire.encode_batch(requests), len(data)) + data
        ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [self.region.fd]))] if announce else []
        self.sock.sendmsg([message], ancillary)
        return self.seq

    def send_control(self, kind: int, count: int = 0, meta: bytes = b"") -> None:
        wire = self.wire
        self.sock.sendall(wire.encode_message(wire.Header(kind, 0, count, self.seq), meta))

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.sock.close()
