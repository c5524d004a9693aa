"""A real load balancer in front of the service's containers for the rollout tests: HAProxy, from Debian.

HAProxy plays a Kubernetes Service's endpoints: each pod is a slot (a server of the HTTP backend and one of
the gRPC backend, at the host ports its container publishes); a slot takes requests only while its
container passes the Deployment's readiness probe (HAProxy's health check: the probe's path, period,
timeout and thresholds), and ``remove`` takes a slot out of rotation at once, as the endpoints controller
does with a pod being deleted (HAProxy's runtime API: maintenance). A slot's gRPC server follows its HTTP
server's state: readiness belongs to the pod, not to a port. HTTP and gRPC are both balanced request by
request (``mode http``; gRPC as h2c on both sides), as an ingress controller or a mesh does. HAProxy never
retries nor redispatches a request (``retries 0``): a request that reaches a pod that cannot serve it fails,
as it would through kube-proxy.

Example::

    with Balancer(tmp_path, slots, readiness_probe) as balancer:
        balancer.wait_state(0, "UP")
        Client(balancer.http_url).predict(...)
        balancer.remove(0)
"""

from __future__ import annotations

import csv
import dataclasses
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from conftest import skip_or_fail_under_ci

__all__ = ["Balancer", "Slot", "haproxy_binary"]

READY_TIMEOUT_S = 120  # guards against hanging, not measurements
STOP_TIMEOUT_S = 10


@dataclasses.dataclass(frozen=True)
class Slot:
    """Where one pod's container publishes its HTTP and gRPC ports on the host (127.0.0.1)."""

    http_port: int
    grpc_port: int


def haproxy_binary() -> str:
    """HAProxy's path (Debian's is in /usr/sbin, off a user's PATH); skips without it (fails under CI)."""
    found = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin:/usr/local/sbin")
    if found is None:
        skip_or_fail_under_ci(
            "haproxy not found: the rollout tests put it in front of the containers "
            "(sudo apt-get install haproxy; the template's make test-setup installs it as root)"
        )
    return found


class Balancer:
    """HAProxy on two free loopback ports (HTTP, gRPC) in front of ``slots``, stopped by ``close``."""

    def __init__(
        self, folder: Path, slots: list[Slot], probe: dict[str, Any], ports: tuple[int, int]
    ) -> None:
        self.http_url = f"http://127.0.0.1:{ports[0]}"
        self.grpc_url = f"grpc://127.0.0.1:{ports[1]}"
        self._socket = folder / "admin.sock"
        self._log = folder / "haproxy.log"
        config = folder / "haproxy.cfg"
        config.write_text(_config(self._socket, slots, probe, ports))
        binary = haproxy_binary()
        check = subprocess.run([binary, "-c", "-f", str(config)], capture_output=True, text=True)
        assert check.returncode == 0, f"HAProxy refused its configuration:\n{check.stdout}{check.stderr}"
        with self._log.open("wb") as sink:  # -db: in the foreground, its log on stderr
            self._process = subprocess.Popen([binary, "-db", "-f", str(config)], stdout=sink, stderr=sink)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._socket.exists():
            assert self._process.poll() is None, f"HAProxy exited at its start:\n{self.log()}"
            assert time.monotonic() < deadline, f"HAProxy opened no admin socket:\n{self.log()}"
            time.sleep(0.05)

    def __enter__(self) -> Balancer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        if self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()

    def log(self) -> str:
        return self._log.read_text(errors="replace")[-4000:]

    def command(self, line: str) -> str:
        """One command of HAProxy's runtime API; its answer."""
        with socket.socket(socket.AF_UNIX) as admin:
            admin.settimeout(10)
            admin.connect(str(self._socket))
            admin.sendall(line.encode() + b"\n")
            answer = b""
            while chunk := admin.recv(65536):
                answer += chunk
        return answer.decode()

    def stats(self) -> dict[tuple[str, str], dict[str, str]]:
        """HAProxy's ``show stat``: (backend, server) -> its fields (status, hrsp_2xx, ...)."""
        text = self.command("show stat").lstrip("# ")
        return {(row["pxname"], row["svname"]): row for row in csv.DictReader(text.splitlines())}

    def state(self, slot: int) -> str:
        """The slot's state as the balancer sees it: UP, DOWN, MAINT (``UP 1/2``: going down, still UP)."""
        return self.stats()[("pods_http", f"pod{slot}")]["status"]

    def wait_state(self, slot: int, wanted: str, alive: Callable[[], None] | None = None) -> None:
        """Wait until the slot is in state ``wanted`` (UP, DOWN); ``alive()`` (if given) raises if waiting is
        pointless (the container exited)."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while (state := self.state(slot)) != wanted:
            assert self._process.poll() is None, f"HAProxy exited:\n{self.log()}"
            if alive is not None:
                alive()
            assert time.monotonic() < deadline, f"slot {slot} still {state}, not {wanted}:\n{self.log()}"
            time.sleep(0.1)

    def served(self, slot: int) -> dict[str, int]:
        """Requests the slot's pod answered with a 2xx status, per protocol (gRPC's answers are all 200)."""
        stats = self.stats()
        return {protocol: int(stats[(f"pods_{protocol}", f"pod{slot}")]["hrsp_2xx"] or 0)
                for protocol in ("http", "grpc")}  # fmt: skip

    def remove(self, slot: int) -> None:
        """Take the slot out of rotation now (its gRPC server follows): new requests go to the others,
        requests it is answering go on."""
        answer = self.command(f"set server pods_http/pod{slot} state maint")
        assert answer.strip() == "", f"HAProxy refused to take pod{slot} out: {answer}"


def _config(admin: Path, slots: list[Slot], probe: dict[str, Any], ports: tuple[int, int]) -> str:
    """HAProxy's configuration: the readiness probe as the health check of every slot."""
    get = probe["httpGet"]
    assert get["port"] in ("http", 8000), (
        f"the readiness probe checks port {get['port']}, not http: adapt this"
    )
    check = (
        f"inter {probe.get('periodSeconds', 10)}s fall {probe.get('failureThreshold', 3)} "
        f"rise {probe.get('successThreshold', 1)}"
    )
    lines = [
        "global",
        f"    stats socket {admin} mode 600 level admin",
        "defaults",
        "    mode http",
        "    timeout connect 5s",
        "    timeout client 120s",
        "    timeout server 120s",
        f"    timeout check {probe.get('timeoutSeconds', 1)}s",
        "    retries 0",
        "frontend http",
        f"    bind 127.0.0.1:{ports[0]}",
        "    default_backend pods_http",
        "frontend grpc",
        f"    bind 127.0.0.1:{ports[1]} proto h2",
        "    default_backend pods_grpc",
        "backend pods_http",
        "    balance roundrobin",
        f"    option httpchk GET {get['path']}",
        "    http-check expect status 200-399",  # what the kubelet counts as a success
        *(f"    server pod{i} 127.0.0.1:{slot.http_port} check {check}" for i, slot in enumerate(slots)),
        "backend pods_grpc",
        "    balance roundrobin",
        *(
            f"    server pod{i} 127.0.0.1:{slot.grpc_port} proto h2 track pods_http/pod{i}"
            for i, slot in enumerate(slots)
        ),
    ]
    return "\n".join(lines) + "\n"
