{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""The service's settings, read from environment variables and validated.

Every variable is optional; its full name starts with ``{{ cookiecutter.package | upper }}_``
(e.g. ``{{ cookiecutter.package | upper }}_HTTP_PORT``). Unset or empty means the default.

- ``HTTP_PORT`` (8000), ``GRPC_PORT`` (8001), ``METRICS_PORT`` (8002): the ports of Triton's HTTP and
  gRPC endpoints (KServe v2) and of its Prometheus metrics.
- ``LOG_LEVEL`` (INFO): DEBUG, INFO, WARNING, ERROR or CRITICAL; DEBUG also turns on Triton's verbose log.
- ``INSTANCES`` ({{ 0 if pytorch else 1 }}): model instances, i.e. batches served in parallel; 0: one per visible GPU
  (at least one).
- ``WORKERS`` ({{ "process" if pytorch else "thread" }}): where each instance runs: ``thread`` (threads of the service's
  process, sharing one GIL) or ``process`` (a worker process per instance: Python work on several cores, each
  instance on its own GPU, a crashed or stuck instance replaced alone).
- ``EXECUTION_TIMEOUT_S`` (60): a batch that runs longer fails with a timeout error; with worker processes the
  stuck worker is killed and replaced, with threads the service stops (exit 1) for its orchestrator to replace
  it. 0 turns it off.
- ``MAX_QUEUE_DELAY_US`` (100): how long a request may wait for others to form a batch.
- ``TUNING_FILE`` (``tuning.json`` in the package): the tuned settings (``tuning.py``); its ``instances`` and
  ``max_queue_delay_us`` and ``workers`` replace the defaults above (``make tune APPLY=1`` writes it).
- ``TRITON_MODELS_DIR`` (``models``): the folder of Triton's own models (ONNX, TensorRT, TorchScript,
  Python-backend ``model.py``; see models/README.md) served beside this model by the same server. The
  default, ``models`` in the working directory, is the project's ``models/`` when run from its root
  (``make serve``) and the image's copy, and is served when it exists; a folder named here must exist.
- ``ACCESS_TOKEN`` (random): the token that unlocks the restricted endpoints (model control, shared
  memory, statistics, trace, logging), sent as the ``triton-access-token`` header.
- ``REQUIRE_TOKEN`` (false): true makes every endpoint but health (inference, metadata and model
  config too) need ``ACCESS_TOKEN``, which must then be set; clients send it (``Client(access_token=...)``;
  the command line reads it from ``{{ cookiecutter.package | upper }}_ACCESS_TOKEN``).
- ``BIND_ADDRESS`` (127.0.0.1): the address the HTTP, gRPC and metrics endpoints listen on: this machine
  only, unless told otherwise. The image sets 0.0.0.0 (every interface of the container). The metrics
  endpoint cannot require a token (Triton has no such option): bind it where only your scraper reaches.
- ``RESTARTS`` (3): how many times in 10 minutes a tritonserver that died is restarted, and a model whose
  instance died is reloaded, before the service exits 1 for Docker or Kubernetes to replace it; 0 exits
  at the first such fault.
- ``EXIT_TIMEOUT_S`` (30): on SIGTERM/SIGINT, how long in-flight requests get to finish.
- ``TRACE_RATE`` (1): with tracing on, Triton traces one request in ``TRACE_RATE``.
- ``THREADS`` (1): the threads each instance's math libraries may start (OpenMP, MKL, OpenBLAS: it sets
  ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and ``OPENBLAS_NUM_THREADS`` where they are unset; ``threads.py``).

Tracing (OpenTelemetry, off by default) reads OpenTelemetry's own variables, unprefixed:
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` (the OTLP/HTTP url spans go to, e.g. ``http://collector:4318/v1/traces``)
or ``OTEL_EXPORTER_OTLP_ENDPOINT`` (its base: ``/v1/traces`` is added) turns it on: Triton exports its spans
there and the model's callable runs in a child span of Triton's (a client's ``traceparent`` joins its trace).
``OTEL_SERVICE_NAME`` (the package's name) names the service in the spans.

Example::

    settings = Settings.from_env({"{{ cookiecutter.package | upper }}_HTTP_PORT": "9000"})
    settings.http_port  # 9000
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
from collections.abc import Callable, Mapping

from {{ cookiecutter.package }}.tuning import TuningError, load

PREFIX = "{{ cookiecutter.package | upper }}_"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
WORKER_MODES = ("thread", "process")
_TOKEN = re.compile(r"[A-Za-z0-9._~-]{16,256}")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable, its value and the rule."""


@dataclasses.dataclass(frozen=True)
class Settings:
    """The validated settings of one service process."""

    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    log_level: str = "INFO"
    instances: int = {{ 0 if pytorch else 1 }}  # 0: one per visible GPU
    max_queue_delay_us: int = 100
    access_token: str | None = None
    exit_timeout_s: int = 30
    require_token: bool = False
    bind_address: str = "127.0.0.1"
    restarts: int = 3
    workers: str = "{{ "process" if pytorch else "thread" }}"
    execution_timeout_s: int = 60
    traces_endpoint: str | None = None  # None: tracing off
    trace_service_name: str = "{{ cookiecutter.package }}"
    trace_rate: int = 1
    triton_models_dir: str = "models"  # relative: to the working directory (see triton_models_dir())
    threads: int = 1  # per instance, for OpenMP, MKL and OpenBLAS (threads.py)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from ``environ`` (default: ``os.environ``); raise SettingsError if one is bad."""
        environ = os.environ if environ is None else environ
        reader = _Reader(environ)
        try:
            tuned = load(environ)
        except TuningError as error:
            raise SettingsError(str(error)) from None
        settings = cls(
            http_port=reader.integer("HTTP_PORT", cls.http_port, 1, 65535),
            grpc_port=reader.integer("GRPC_PORT", cls.grpc_port, 1, 65535),
            metrics_port=reader.integer("METRICS_PORT", cls.metrics_port, 1, 65535),
            log_level=reader.choice("LOG_LEVEL", cls.log_level, LOG_LEVELS),
            instances=reader.integer("INSTANCES", _first(tuned.instances, cls.instances), 0, 64),
            max_queue_delay_us=reader.integer(
                "MAX_QUEUE_DELAY_US", _first(tuned.max_queue_delay_us, cls.max_queue_delay_us), 0, 10_000_000
            ),
            access_token=reader.token("ACCESS_TOKEN"),
            exit_timeout_s=reader.integer("EXIT_TIMEOUT_S", cls.exit_timeout_s, 0, 3600),
            require_token=reader.boolean("REQUIRE_TOKEN", cls.require_token),
            bind_address=reader.address("BIND_ADDRESS", cls.bind_address),
            restarts=reader.integer("RESTARTS", cls.restarts, 0, 100),
            workers=reader.choice("WORKERS", tuned.workers or cls.workers, WORKER_MODES, case=str.lower),
            execution_timeout_s=reader.integer("EXECUTION_TIMEOUT_S", cls.execution_timeout_s, 0, 86400),
            traces_endpoint=_traces_endpoint(environ),
            trace_service_name=environ.get("OTEL_SERVICE_NAME", "").strip() or cls.trace_service_name,
            trace_rate=reader.integer("TRACE_RATE", cls.trace_rate, 1, 1_000_000),
            triton_models_dir=_triton_models_dir(environ),
            threads=threads_of(environ),
        )
        if settings.require_token and settings.access_token is None:
            raise SettingsError(
                f"{PREFIX}REQUIRE_TOKEN=true needs {PREFIX}ACCESS_TOKEN: set the token the clients will send "
                "(python -c 'import secrets; print(secrets.token_urlsafe())' makes one)."
            )
        ports = {
            "HTTP_PORT": settings.http_port,
            "GRPC_PORT": settings.grpc_port,
            "METRICS_PORT": settings.metrics_port,
        }
        if len(set(ports.values())) < len(ports):
            listed = ", ".join(f"{PREFIX}{name}={port}" for name, port in ports.items())
            raise SettingsError(f"{listed}: the three ports must differ; give each its own port.")
        return settings


def threads_of(environ: Mapping[str, str]) -> int:
    """``THREADS``: the thread budget of each instance (default 1); SettingsError when it is no count."""
    return _Reader(environ).integer("THREADS", Settings.threads, 1, 1024)


def _triton_models_dir(environ: Mapping[str, str]) -> str:
    """``TRITON_MODELS_DIR`` (default ``models``); SettingsError when the folder it names is not there."""
    raw = _Reader(environ).text("TRITON_MODELS_DIR")
    if raw is None:
        return Settings.triton_models_dir
    if not os.path.isdir(raw):
        raise SettingsError(
            f"{PREFIX}TRITON_MODELS_DIR={raw!r}: no such folder. Name the folder of your Triton models (one "
            "folder per model, with its config.pbtxt: see models/README.md), or unset it to serve models/ of "
            "the working directory when there is one."
        )
    return raw


def triton_models_dir(settings: Settings) -> str | None:
    """The folder of Triton models to serve beside this model, absolute; None when the default is absent."""
    path = os.path.abspath(settings.triton_models_dir)
    return path if os.path.isdir(path) else None


def _traces_endpoint(environ: Mapping[str, str]) -> str | None:
    """The OTLP/HTTP traces url from OpenTelemetry's standard variables; None (tracing off) if unset."""
    name = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    url = environ.get(name, "").strip()
    if not url:
        name = "OTEL_EXPORTER_OTLP_ENDPOINT"
        url = environ.get(name, "").strip()
        url = url and url.rstrip("/") + "/v1/traces"
    if not url:
        return None
    if not re.fullmatch(r"https?://[^\s,]+", url):
        raise SettingsError(
            f"{name}={url!r}: must be an http:// or https:// url of an OTLP/HTTP receiver, e.g. "
            "http://collector:4318/v1/traces (unset: tracing off)."
        )
    return url


def _first(value: int | None, default: int) -> int:
    return default if value is None else value


@dataclasses.dataclass(frozen=True)
class _Reader:
    """Reads ``PREFIX``-ed variables; unset or empty variables give the default."""

    environ: Mapping[str, str]

    def _raw(self, name: str) -> str | None:
        value = self.environ.get(PREFIX + name, "").strip()
        return value or None

    def text(self, name: str) -> str | None:
        """The variable's value; None when unset or empty."""
        return self._raw(name)

    def integer(self, name: str, default: int, low: int, high: int) -> int:
        raw = self._raw(name)
        if raw is None:
            return default
        if not re.fullmatch(r"[0-9]+", raw) or not low <= int(raw) <= high:
            raise SettingsError(f"{PREFIX}{name}={raw!r}: must be a whole number from {low} to {high}.")
        return int(raw)

    def choice(
        self, name: str, default: str, options: tuple[str, ...], case: Callable[[str], str] = str.upper
    ) -> str:
        raw = self._raw(name)
        if raw is None:
            return default
        if case(raw) not in options:
            raise SettingsError(f"{PREFIX}{name}={raw!r}: must be one of {', '.join(options)}.")
        return case(raw)

    def boolean(self, name: str, default: bool) -> bool:
        raw = self._raw(name)
        if raw is None:
            return default
        if raw.lower() not in _TRUE + _FALSE:
            raise SettingsError(f"{PREFIX}{name}={raw!r}: must be true or false.")
        return raw.lower() in _TRUE

    def address(self, name: str, default: str) -> str:
        raw = self._raw(name)
        if raw is None:
            return default
        try:
            return str(ipaddress.ip_address(raw))
        except ValueError:
            raise SettingsError(
                f"{PREFIX}{name}={raw!r}: must be an IP address, e.g. 127.0.0.1 (this machine only) or "
                "0.0.0.0 (every interface)."
            ) from None

    def token(self, name: str) -> str | None:
        raw = self._raw(name)
        if raw is not None and not _TOKEN.fullmatch(raw):
            raise SettingsError(
                f"{PREFIX}{name}=<{len(raw)} characters, not shown>: must be 16 to 256 characters from "
                "A-Z a-z 0-9 . _ ~ -; python -c 'import secrets; print(secrets.token_urlsafe())' makes one."
            )
        return raw
