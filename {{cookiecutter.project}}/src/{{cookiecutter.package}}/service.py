{%- set streaming = cookiecutter.streaming == "yes" -%}
"""Serve the model with Triton Inference Server: ``python -m {{ cookiecutter.package }}``.

Reads the settings from the environment (``settings.py``), loads the model once, binds it with tritonrt
and serves until SIGTERM or SIGINT; then lets in-flight requests finish and exits 0. If tritonserver dies
(killed, or crashed by a request) it is restarted, and a model whose instance died is reloaded, up to
``RESTARTS`` times in 10 minutes each (readiness is false meanwhile); past that, or if Triton fails to
start, it exits 1, for Docker or Kubernetes to replace the container. Exits 2 if a setting is invalid.

Example::

    {{ cookiecutter.package | upper }}_HTTP_PORT=9000 python -m {{ cookiecutter.package }}
"""

from __future__ import annotations

import logging
import signal
import sys
import time

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
)

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.model import Model
from {{ cookiecutter.package }}.settings import PREFIX, Settings, SettingsError

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
    )


def security_config(settings: Settings) -> TritonSecurityConfig:
    """What needs the access token: the admin endpoints, or (``REQUIRE_TOKEN``) all but health."""
    if settings.require_token:
        endpoints = [endpoint for endpoint in VALID_TRITON_ENDPOINTS if endpoint != "health"]
    else:
        endpoints = list(DEFAULT_PROTECTED_ENDPOINTS)
    return TritonSecurityConfig(access_token=settings.access_token, restricted_endpoints=endpoints)


def recovery_policy(settings: Settings) -> RecoveryPolicy:
    """How often a dead tritonserver is restarted, or a model reloaded, before the service exits 1."""
    return RecoveryPolicy(server_restarts=settings.restarts, model_reloads=settings.restarts)


def model_config(settings: Settings, *, decoupled: bool = False) -> ModelConfig:
    """How Triton runs the model: batching from ``spec``, queue delay from ``settings``."""
    if not spec.BATCHING:
        return ModelConfig(batching=False, decoupled=decoupled)
    batcher = DynamicBatcher(max_queue_delay_microseconds=settings.max_queue_delay_us)
    return ModelConfig(max_batch_size=spec.MAX_BATCH_SIZE, batcher=batcher, decoupled=decoupled)


def bind(triton: Triton, model: Model, settings: Settings) -> None:
    """Bind the model's inference callables, one per instance; the instances share the loaded model."""
    triton.bind(
        model_name=spec.MODEL_NAME,
        infer_func=[model.infer] * settings.instances,
        inputs=spec.INPUTS,
        outputs=spec.OUTPUTS,
        config=model_config(settings),
        strict=True,
    )
{%- if streaming %}
    triton.bind(
        model_name=spec.STREAM_MODEL_NAME,
        infer_func=[model.infer_stream] * settings.instances,
        inputs=spec.INPUTS,
        outputs=spec.OUTPUTS,
        config=model_config(settings, decoupled=True),
        strict=True,
    )
{%- endif %}


def serve(settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT (return 0 after draining) or until Triton fails for good (return 1)."""
    model = Model()
    received: list[int] = []
    handlers = {sig: signal.signal(sig, lambda signum, _: received.append(signum)) for sig in _STOP_SIGNALS}
    try:
        # Start the server in run(), with the model loading during its start-up: /v2/health/ready then says
        # ready only once the model can serve (entering `with` would start an empty server first).
        triton = Triton(
            config=triton_config(settings),
            security_config=security_config(settings),
            recovery=recovery_policy(settings),
            triton_lifecycle_policy=TritonLifecyclePolicy(launch_triton_on_startup=False),
        )
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
                "Received %s: finishing in-flight requests (up to %d s), then stopping",
                signal.Signals(received[0]).name,
                settings.exit_timeout_s,
            )
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
