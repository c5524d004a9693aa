"""Serve one candidate: ``python -m <package>`` on free ports with the candidate's tuning file, until stopped.

The service reads its tuning from ``<PREFIX>TUNING_FILE`` (see the generated ``tuning.py``) and the
worker mode from ``<PREFIX>WORKERS``; the process runs in a session of its own, so a Ctrl+C at the
terminal reaches the tuner alone, which then stops the service itself.

Example::

    server = ServiceProcess(service, candidate, workdir)
    server.start()
    try:
        server.wait_ready(timeout_s=120)
        server.model_config()["max_batch_size"]
    finally:
        server.stop()
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tritonrt.ports import free_ports

from loadtests.errors import LoadTestSetupError
from loadtests.tune.interrupts import deferred_interrupt, stop_child
from loadtests.tune.space import Candidate

__all__ = ["QueueCounters", "Service", "ServiceFailed", "ServiceProcess", "parse_queue_counters"]

POLL_S = 0.5
STOP_TIMEOUT_S = 30.0
LOG_TAIL_CHARS = 2000
# How long a service that met another server on its port has to exit (it refuses a taken port before it starts).
PORT_TAKEN_WAIT_S = 10.0
# How long a ready server may lack the model before the tuner says the model's name is wrong.
MODEL_WAIT_S = 30.0
# The service's own variables the tuner sets for every candidate (the prefix goes in front).
_OVERRIDDEN = (
    "INSTANCES", "MAX_QUEUE_DELAY_US", "WORKERS", "TUNING_FILE", "HTTP_PORT", "GRPC_PORT", "METRICS_PORT",
    "ACCESS_TOKEN",
)  # fmt: skip
# How long a model's load (a reload with a config override) may take before the tuner starts the service instead.
LOAD_TIMEOUT_S = 120.0


class ServiceFailed(Exception):
    """A candidate could not be served: it exited (``exited``), or was not ready in time, or serves another
    setting. The message holds the end of its log."""

    def __init__(self, message: str, *, exited: bool = False) -> None:
        super().__init__(message)
        self.exited = exited


@dataclasses.dataclass(frozen=True, slots=True)
class Service:
    """How to start the service: ``python -m <package>``, its variables' prefix, the model the tuner measures."""

    package: str
    model: str
    env_prefix: str
    cwd: Path = Path(".")
    python: str = sys.executable

    @classmethod
    def of(cls, package: str, model: str, cwd: Path = Path(".")) -> Service:
        """The service of ``package``; its variables are ``<LAST PART OF PACKAGE, UPPER>_*``."""
        return cls(package=package, model=model, env_prefix=package.rsplit(".", 1)[-1].upper() + "_", cwd=cwd)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueCounters:
    """Triton's cumulative counters for the model: time spent queued (µs) and requests served."""

    queue_us: float
    successes: float

    def mean_queue_ms(self, since: QueueCounters) -> float | None:
        """Mean queue time per request (ms) between ``since`` and these counters; None when none was served."""
        served = self.successes - since.successes
        return (self.queue_us - since.queue_us) / served / 1000.0 if served > 0 else None


def parse_queue_counters(text: str, model: str) -> QueueCounters:
    """The model's ``nv_inference_queue_duration_us`` and ``nv_inference_request_success`` in Prometheus text."""
    totals = {"nv_inference_queue_duration_us": 0.0, "nv_inference_request_success": 0.0}
    label = f'model="{model}"'
    for line in text.splitlines():
        name, _, rest = line.partition("{")
        if name in totals and label in rest:
            totals[name] += float(rest.rsplit(" ", 1)[-1])
    return QueueCounters(totals["nv_inference_queue_duration_us"], totals["nv_inference_request_success"])


class ServiceProcess:
    """One running candidate; ``candidate=None`` serves the project's current tuning (the baseline)."""

    def __init__(self, service: Service, candidate: Candidate | None, workdir: Path, workers: str = "thread") -> None:
        self.service = service
        self.candidate = candidate
        self.http_port, self.grpc_port, self.metrics_port = free_ports(3)
        name = "baseline" if candidate is None else candidate.label.replace(" ", "_")
        workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / f"{name}.log"
        self.tuning_path = workdir / f"{name}.tuning.json"
        self.workers = candidate.workers if candidate is not None else workers
        # The token of the service's model control (its restricted endpoints), for reloads with another config.
        self.token = secrets.token_urlsafe(24)
        self.serving: Candidate | None = None  # what it serves, once the tuner checked it (see tuner._check_served)
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    def environment(self) -> dict[str, str]:
        """The service's environment: ours, with ports, tuning file and worker mode set for this candidate."""
        prefix = self.service.env_prefix
        environ = {key: value for key, value in os.environ.items() if key not in {prefix + n for n in _OVERRIDDEN}}
        environ.update(
            {
                prefix + "HTTP_PORT": str(self.http_port),
                prefix + "GRPC_PORT": str(self.grpc_port),
                prefix + "METRICS_PORT": str(self.metrics_port),
                prefix + "BIND_ADDRESS": "127.0.0.1",
                prefix + "REQUIRE_TOKEN": "false",
                prefix + "RESTARTS": "0",
                prefix + "ACCESS_TOKEN": self.token,
                prefix + "EXIT_TIMEOUT_S": "5",
                prefix + "WORKERS": self.workers,
            }
        )
        if self.candidate is not None:
            self.tuning_path.write_text(json.dumps(self.candidate.tuning(), indent=2) + "\n", encoding="utf-8")
            environ[prefix + "TUNING_FILE"] = str(self.tuning_path.resolve())
        return environ

    def start(self) -> None:
        with open(self.log_path, "wb") as log, deferred_interrupt():
            self._process = subprocess.Popen(
                [self.service.python, "-m", self.service.package],
                cwd=self.service.cwd,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout_s: float) -> None:
        """Return once the model answers ready (``/v2/models/<model>/ready``: the server answers ready before
        its models are loaded); raise ServiceFailed if the service exits or is late, LoadTestSetupError if the
        server has been ready for ``MODEL_WAIT_S`` without the model."""
        deadline = time.monotonic() + timeout_s
        server_ready_since: float | None = None
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                code = None if self._process is None else self._process.returncode
                raise ServiceFailed(
                    f"the service exited with status {code} before it was ready:\n{self.log_tail()}", exited=True
                )
            if self._answers(f"/v2/models/{self.service.model}/ready"):
                return
            if server_ready_since is None and self._answers("/v2/health/ready"):
                server_ready_since = time.monotonic()
            if server_ready_since is not None and time.monotonic() - server_ready_since > MODEL_WAIT_S:
                raise LoadTestSetupError(
                    f"the service at {self.url} is ready but model '{self.service.model}' is not, "
                    f"{MODEL_WAIT_S:.0f} s on; pass the model's name with --model:\n{self.log_tail()}"
                )
            time.sleep(POLL_S)
        raise ServiceFailed(f"the service was not ready within {timeout_s:.0f} s:\n{self.log_tail()}")

    def _answers(self, path: str) -> bool:
        """Whether ``GET path`` answers 200."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=2) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def model_config(self) -> dict[str, Any]:
        """The model's configuration as the server holds it (``GET /v2/models/<model>/config``)."""
        address = f"{self.url}/v2/models/{self.service.model}/config"
        try:
            with urllib.request.urlopen(address, timeout=10) as response:
                config: dict[str, Any] = json.load(response)
        except urllib.error.HTTPError as error:
            if self._exits_within(PORT_TAKEN_WAIT_S):  # another server answered on a port taken since it was picked
                raise ServiceFailed(
                    f"another server answered at {address} (HTTP {error.code}) and the service exited:\n"
                    f"{self.log_tail()}",
                    exited=True,
                ) from None
            raise LoadTestSetupError(
                f"the service does not serve model '{self.service.model}' ({address}: HTTP {error.code}); "
                "pass the model's name with --model"
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as error:  # (gone, or an answer that is not JSON)
            raise ServiceFailed(
                f"the service did not answer {address}: {error}:\n{self.log_tail()}", exited=not self.alive()
            ) from None
        return config

    def alive(self) -> bool:
        """Whether the service process runs."""
        return self._process is not None and self._process.poll() is None

    def load_model(self, config: dict[str, Any]) -> None:
        """Load the model again with ``config`` (``POST /v2/repository/models/<model>/load``, the config as an
        override); ServiceFailed with the server's answer when it refuses or does not answer in time."""
        model = self.service.model
        body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode("utf-8")
        request = urllib.request.Request(
            f"{self.url}/v2/repository/models/{model}/load",
            data=body,
            headers={"Content-Type": "application/json", "triton-access-token": self.token},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=LOAD_TIMEOUT_S):
                return
        except urllib.error.HTTPError as error:
            answer = error.read().decode("utf-8", "replace")[:LOG_TAIL_CHARS]
            raise ServiceFailed(f"the server refused to load model '{model}' (HTTP {error.code}): {answer}") from None
        except (urllib.error.URLError, OSError) as error:
            raise ServiceFailed(f"the load of model '{model}' did not answer: {error}") from None

    def _exits_within(self, timeout_s: float) -> bool:
        """Whether the service has exited, or exits within ``timeout_s``."""
        if self._process is None:
            return True
        try:
            self._process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return False
        return True

    def queue_counters(self) -> QueueCounters | None:
        """The model's queue counters from the metrics endpoint; None when it cannot be read."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as response:
                return parse_queue_counters(response.read().decode("utf-8", "replace"), self.service.model)
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def log_tail(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-LOG_TAIL_CHARS:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """SIGTERM, then SIGKILL to the service's whole process group if it outlives ``STOP_TIMEOUT_S``, or at once
        if the wait is cut short (a second Ctrl+C): the service is never left running unwatched."""
        if self._process is not None:
            try:
                stop_child(self._process, signal.SIGTERM, STOP_TIMEOUT_S)
            finally:
                self._process = None
