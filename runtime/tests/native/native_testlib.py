"""What the native backend's tests share (importable from them: conftest puts this directory on sys.path)."""

from __future__ import annotations

import array
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from tritonrt.ports import free_ports

__all__ = ["GOLDEN_DIR", "NATIVE_DIR", "PEER", "SPEC", "FakeBackend", "Stack", "spec_constants"]

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
    batches (inline data, or in a region of its own passed by descriptor), read replies. METRICS messages are
    collected in ``metrics`` (decoded), not returned by ``read``, as the backend applies them and reads on."""

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
        self.metrics: list = []

    def read(self):
        """(header, whole message bytes); the descriptors that came with it go to self.fds."""
        wire = self.wire
        while True:
            if len(self._buffer) >= wire.HEADER_SIZE:
                header = wire.decode_header(self._buffer)
                if len(self._buffer) >= header.total_length:
                    message, self._buffer = self._buffer[: header.total_length], self._buffer[header.total_length :]
                    if header.kind != wire.KIND_METRICS:
                        return header, message
                    from tritonrt.proxy.wire_decode import decode_body

                    self.metrics += decode_body(header, message)
                    continue
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


PEER = pathlib.Path(__file__).resolve().parent / "peer.py"


class Stack:
    """tritonserver (free loopback ports) with a model repository of backend "tritonrt" served by peer.py in a
    subprocess: models ``identity`` and ``stream`` (see peer.py)."""

    def __init__(self, root: pathlib.Path, *, region_limit: int | None = None, token: str | None = None):
        from tritonrt.proxy import native_files

        self.root = root
        self.repo, self.sockets, self.stats = root / "repo", root / "s", root / "stats"
        self.repo.mkdir(parents=True, exist_ok=True)
        self.sockets.mkdir(mode=0o700, exist_ok=True)
        self.token = token or native_files.new_token()
        self.region_limit = region_limit
        self.http, self.grpc, self.metrics = free_ports(3)
        self.peer: subprocess.Popen | None = None
        self.server: subprocess.Popen | None = None

    def __enter__(self) -> Stack:
        try:
            self.start_peer()
            self.start_server()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *_) -> None:
        self.stop()

    def start_peer(self) -> None:
        command = [sys.executable, str(PEER), "--repo", str(self.repo), "--sockets", str(self.sockets)]
        command += ["--token", self.token, "--stats", str(self.stats)]
        if self.region_limit is not None:
            command += ["--region-limit", str(self.region_limit)]
        self.peer = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        line = self.peer.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"the peer did not start: {line!r}")

    def start_server(self) -> None:
        from tritonrt.server import environment
        from tritonrt.server.install import find_or_install_server

        server_dir = find_or_install_server()
        command = [
            str(server_dir / "bin" / "tritonserver"), f"--model-repository={self.repo}",
            f"--backend-directory={server_dir / 'backends'}", f"--http-port={self.http}", f"--grpc-port={self.grpc}",
            f"--metrics-port={self.metrics}", "--http-address=127.0.0.1", "--grpc-address=127.0.0.1",
            "--exit-timeout-secs=1", "--metrics-interval-ms=100",
        ]  # fmt: skip
        log = open(self.root / "server.log", "w")  # noqa: SIM115 - handed to the process
        self.server = subprocess.Popen(command, env=environment.server_environment(server_dir), stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while not all(self.ready(model) for model in ("identity", "stream")):
            if self.server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"tritonserver did not get ready:\n{self.log()[-3000:]}")
            time.sleep(0.1)

    def ready(self, model: str) -> bool:
        try:
            url = f"http://127.0.0.1:{self.http}/v2/models/{model}/ready"
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def live(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.http}/v2/health/live", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics}/metrics", timeout=5) as response:
            return response.read().decode()

    def log(self) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill_peer(self) -> None:
        if self.peer is not None and self.peer.poll() is None:
            self.peer.kill()
            self.peer.wait(10)

    def stop(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.send_signal(signal.SIGINT)
            try:
                self.server.wait(30)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(10)
        if self.peer is not None and self.peer.poll() is None:
            self.peer.terminate()
            try:
                self.peer.wait(10)
            except subprocess.TimeoutExpired:
                self.kill_peer()
        if self.peer is not None and self.peer.stdout is not None:
            self.peer.stdout.close()
