{%- set streaming = cookiecutter.streaming == "yes" -%}
{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""Serve the model with Triton Inference Server: ``python -m {{ cookiecutter.package }}``.

Reads the settings from the environment (``settings.py``), loads the model once, binds it with tritonrt
and serves until SIGTERM or SIGINT; then lets in-flight requests finish and exits 0 (a second signal meanwhile
stops at once: exit status 128 + the signal's number). If tritonserver dies
(killed, or crashed by a request) it is restarted, and a model whose instance died is reloaded, up to
``RESTARTS`` times in 10 minutes each (readiness is false meanwhile); past that, or if Triton fails to
start, it exits 1, for Docker or Kubernetes to replace the container. Exits 2 if a setting is invalid.
Triton's own models in ``models/`` (``TRITON_MODELS_DIR``; see models/README.md) load with it, in the same
server.

Each instance runs in a worker process (``WORKERS=process``{{ ", the default" if pytorch }}) or a thread of
this process (``WORKERS=thread``{{ ", the default" if not pytorch }}).
{%- if pytorch %}
With processes each worker loads the model itself, in its setup, on its own GPU (one instance per visible
GPU by default): CUDA never starts in this process, so the fork is safe.
{%- else %}
With processes the model is loaded here first and the workers are forked from this process: its weights
are shared copy on write.
{%- endif %}
A worker that dies is started again (``RESTARTS``); a batch past ``EXECUTION_TIMEOUT_S`` fails, and its
worker process is replaced (a stuck thread stops the service instead: exit 1).

Example::

    {{ cookiecutter.package | upper }}_HTTP_PORT=9000 python -m {{ cookiecutter.package }}
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
{%- if pytorch and streaming %}
from collections.abc import Iterator
{%- endif %}
from typing import Any

from tritonrt.exceptions import PyTritonBadParameterError, PyTritonError
from tritonrt.model_config import DynamicBatcher, ModelConfig
from tritonrt.server.process import check_port_free
from tritonrt.triton import (
    DEFAULT_PROTECTED_ENDPOINTS,
    VALID_TRITON_ENDPOINTS,
    RecoveryPolicy,
    Triton,
    TritonConfig,
    TritonLifecyclePolicy,
    TritonSecurityConfig,
{%- if pytorch %}
    WorkerInfo,
{%- endif %}
    WorkerMode,
    WorkerOptions,
)

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.model import Model
from {{ cookiecutter.package }}.settings import PREFIX, Settings, SettingsError, triton_models_dir

LOGGER = logging.getLogger(__name__)
POLL_S = 0.2  # how often the main thread checks for a stop signal or a dead server
# Each endpoint: what it serves, and the setting (its variable without the prefix) that holds its port.
_PORTS = (("HTTP", "HTTP_PORT"), ("gRPC", "GRPC_PORT"), ("metrics", "METRICS_PORT"))
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def check_ports(settings: Settings) -> None:
    """Raise PyTritonBadParameterError naming this service's variable when one of its ports is taken."""
    for what, setting in _PORTS:
        port = getattr(settings, setting.lower())
        try:
            check_port_free(port, settings.bind_address, what, setting.lower())
        except PyTritonBadParameterError:
            raise PyTritonBadParameterError(
                f"The {what} port {port} on {settings.bind_address} is already in use: stop whatever listens "
                f"there, or choose another port with {PREFIX}{setting}=<port>."
            ) from None


def triton_config(settings: Settings) -> TritonConfig:
    """The server's configuration: address, ports, drain time and log verbosity from ``settings``."""
    return TritonConfig(
        http_address=settings.bind_address,
        http_port=settings.http_port,
        grpc_address=settings.bind_address,
        grpc_port=settings.grpc_port,
        metrics_address=settings.bind_address,
        metrics_port=settings.metrics_port,
        exit_timeout_secs=settings.exit_timeout_s,
        log_verbose=1 if settings.log_level == "DEBUG" else 0,
        trace_config=trace_config(settings),
    )


def trace_config(settings: Settings) -> list[str] | None:
    """Triton's OpenTelemetry trace settings when tracing is on (see settings.py), else None."""
    if settings.traces_endpoint is None:
        return None
    return [
        "mode=opentelemetry",
        f"opentelemetry,url={settings.traces_endpoint}",
        f"opentelemetry,resource=service.name={settings.trace_service_name}",
        f"rate={settings.trace_rate}",
        "level=TIMESTAMPS",
    ]


def security_config(settings: Settings) -> TritonSecurityConfig:
    """What needs the access token: the admin endpoints, or (``REQUIRE_TOKEN``) all but health."""
    if settings.require_token:
        endpoints = [endpoint for endpoint in VALID_TRITON_ENDPOINTS if endpoint != "health"]
    else:
        endpoints = list(DEFAULT_PROTECTED_ENDPOINTS)
    return TritonSecurityConfig(access_token=settings.access_token, restricted_endpoints=endpoints)


def recovery_policy(settings: Settings) -> RecoveryPolicy:
    """How often a dead tritonserver is restarted, or a model reloaded, before the service exits 1."""
    return RecoveryPolicy(
        server_restarts=settings.restarts, model_reloads=settings.restarts, worker_restarts=settings.restarts
    )


def visible_gpus(environ: dict[str, str] | None = None, dev: str = "/dev") -> list[int]:
    """The GPUs this process may use, found without starting CUDA (a fork after that is refused):
    ``CUDA_VISIBLE_DEVICES`` when it lists GPU numbers, else the ``/dev/nvidia<N>`` devices."""
    environ = dict(os.environ) if environ is None else environ
    listed = environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        entries = [entry.strip() for entry in listed.split(",") if entry.strip()]
        return [int(entry) for entry in entries] if all(entry.isdigit() for entry in entries) else []
    try:
        names = os.listdir(dev)
    except OSError:
        return []
    return sorted(int(name[6:]) for name in names if re.fullmatch(r"nvidia[0-9]+", name))


def instance_count(settings: Settings, gpus: list[int]) -> int:
    """``INSTANCES``, or with 0 one instance per visible GPU (at least one)."""
    return settings.instances or max(1, len(gpus))


def worker_options(settings: Settings, gpus: list[int]) -> WorkerOptions:
    """Where the instances run (``WORKERS``), their GPUs and the execution timeout."""
    mode = WorkerMode(settings.workers)
    timeout = settings.execution_timeout_s or None
{%- if pytorch %}
    setup = load_in_worker if mode is WorkerMode.PROCESS else None
    return WorkerOptions(mode=mode, setup=setup, devices=tuple(gpus), execution_timeout_s=timeout)
{%- else %}
    return WorkerOptions(mode=mode, devices=tuple(gpus), execution_timeout_s=timeout)
{%- endif %}
{%- if pytorch %}


_WORKER_MODEL: list[Model] = []  # the model of this worker process (loaded by load_in_worker)


def load_in_worker(info: WorkerInfo) -> None:
    """A worker process's setup: load the model on the worker's GPU (the only one it sees)."""
    _WORKER_MODEL.append(Model(device=info.torch_device if info.device is not None else None))


def infer_in_worker(requests: list[Any]) -> Any:
    """The inference callable bound with worker processes: the worker's own model answers."""
    infer: Any = _WORKER_MODEL[-1].infer  # wrapped by @batch or @sample: it takes Triton's requests
    return infer(requests)
{%- if streaming %}


def infer_stream_in_worker(requests: list[Any]) -> Iterator[Any]:
    """The streaming callable bound with worker processes."""
    infer_stream: Any = _WORKER_MODEL[-1].infer_stream
    yield from infer_stream(requests)
{%- endif %}
{%- endif %}


def model_config(settings: Settings, *, decoupled: bool = False) -> ModelConfig:
    """How Triton runs the model: batching from ``spec`` (and tuning.json), queue delay from ``settings``."""
    if not spec.BATCHING:
        return ModelConfig(batching=False, decoupled=decoupled)
    batcher = DynamicBatcher(
        max_queue_delay_microseconds=settings.max_queue_delay_us,
        preferred_batch_size=spec.PREFERRED_BATCH_SIZES or None,
    )
    return ModelConfig(max_batch_size=spec.MAX_BATCH_SIZE, batcher=batcher, decoupled=decoupled)


def loads_in_workers(settings: Settings) -> bool:
    """True when each worker process loads the model itself (then this process must not)."""
    return {{ "settings.workers == WorkerMode.PROCESS.value" if pytorch else "False" }}


def bind(triton: Triton, model: Model | None, settings: Settings) -> None:
    """Bind the model's inference callables, one per instance: ``model``'s, which the instances share (or,
    with ``model`` None, each worker process's own)."""
    gpus = visible_gpus()
    count = instance_count(settings, gpus)
    workers = worker_options(settings, gpus)
{%- if pytorch %}
    infer: Any = model.infer if model is not None else infer_in_worker
{%- if streaming %}
    infer_stream: Any = model.infer_stream if model is not None else infer_stream_in_worker
{%- endif %}
{%- else %}
    assert model is not None, "the numpy model is loaded before the workers are forked"
    infer: Any = model.infer
{%- if streaming %}
    infer_stream: Any = model.infer_stream
{%- endif %}
{%- endif %}
    triton.bind(
        model_name=spec.MODEL_NAME,
        infer_func=[infer] * count,
        inputs=spec.INPUTS,
        outputs=spec.OUTPUTS,
        config=model_config(settings),
        strict=True,
        workers=workers,
    )
{%- if streaming %}
    triton.bind(
        model_name=spec.STREAM_MODEL_NAME,
        infer_func=[infer_stream] * count,
        inputs=spec.INPUTS,
        outputs=spec.OUTPUTS,
        config=model_config(settings, decoupled=True),
        strict=True,
        workers=workers,
    )
{%- endif %}


def serve(settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT (return 0 after draining; 128 + the signal's number if a second one cut the
    drain short) or until Triton fails for good (return 1)."""
    model = None if loads_in_workers(settings) else Model()
    # Start the server in run(), with the model loading during its start-up: /v2/health/ready then says
    # ready only once the model can serve (entering `with` would start an empty server first).
    triton = Triton(
        config=triton_config(settings),
        security_config=security_config(settings),
        recovery=recovery_policy(settings),
        triton_lifecycle_policy=TritonLifecyclePolicy(launch_triton_on_startup=False),
        models_dir=triton_models_dir(settings),  # Triton's own models, beside this one (TRITON_MODELS_DIR)
    )
    received: list[int] = []

    def on_signal(signum: int, _: object) -> None:
        received.append(signum)
        if len(received) == 2:  # the second one, during the drain: kill tritonserver, do not wait for it
            triton.kill()

    handlers = {sig: signal.signal(sig, on_signal) for sig in _STOP_SIGNALS}
    try:
        with triton:
            bind(triton, model, settings)
            triton.run()
            LOGGER.info(
                "Serving model %r on %s: HTTP on port %d, gRPC on port %d, metrics on port %d%s",
                spec.MODEL_NAME,
                settings.bind_address,
                settings.http_port,
                settings.grpc_port,
                settings.metrics_port,
                "; every endpoint but health needs the access token" if settings.require_token else "",
            )
            while not received and triton.is_alive():  # alive while a restart or reload is under way too
                time.sleep(POLL_S)
            if not received:
                LOGGER.error(
                    "Triton stopped serving: %s (%sRESTARTS=%d: the restarts and reloads allowed in 10 min)",
                    triton.failure or "the server is no longer alive",
                    PREFIX,
                    settings.restarts,
                )
                return 1
            LOGGER.info(
                "Received %s: finishing in-flight requests (up to %d s), then stopping; "
                "send it again to stop at once",
                signal.Signals(received[0]).name,
                settings.exit_timeout_s,
            )
        if len(received) > 1:
            LOGGER.warning(
                "Received %s again: stopped at once; the requests still in flight got no answer",
                signal.Signals(received[1]).name,
            )
            return 128 + received[1]
        LOGGER.info("Stopped")
        return 0
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def main() -> int:
    """The entry point: exit status 0 after a requested stop, 1 on a server failure, 2 on bad settings."""
    try:
        settings = Settings.from_env()
    except SettingsError as error:
        print(f"Invalid setting: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(level=settings.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        check_ports(settings)
        return serve(settings)
    except PyTritonError as error:
        LOGGER.error("Cannot serve the model: %s", error)
        return 1
