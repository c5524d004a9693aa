{%- set streaming = cookiecutter.streaming == "yes" -%}
"""Serve the model with Triton Inference Server: ``python -m {{ cookiecutter.package }}``.

Reads the settings from the environment (``settings.py``), loads the model once, binds it with tritonrt
and serves until SIGTERM or SIGINT; then lets in-flight requests finish and exits 0. Exits 1 if Triton
fails to start or dies, and 2 if a setting is invalid.

Example::

    {{ cookiecutter.package | upper }}_HTTP_PORT=9000 python -m {{ cookiecutter.package }}
"""

from __future__ import annotations

import logging
import signal
import sys
import time

from tritonrt.exceptions import PyTritonError
from tritonrt.model_config import DynamicBatcher, ModelConfig
from tritonrt.triton import Triton, TritonConfig, TritonLifecyclePolicy, TritonSecurityConfig

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.model import Model
from {{ cookiecutter.package }}.settings import Settings, SettingsError

LOGGER = logging.getLogger(__name__)
POLL_S = 0.2  # how often the main thread checks for a stop signal or a dead server
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def triton_config(settings: Settings) -> TritonConfig:
    """The server's configuration: ports, drain time and log verbosity from ``settings``."""
    return TritonConfig(
        http_port=settings.http_port,
        grpc_port=settings.grpc_port,
        metrics_port=settings.metrics_port,
        exit_timeout_secs=settings.exit_timeout_s,
        log_verbose=1 if settings.log_level == "DEBUG" else 0,
    )


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
    """Serve until SIGTERM/SIGINT (return 0 after draining) or until Triton dies (return 1)."""
    model = Model()
    received: list[int] = []
    handlers = {sig: signal.signal(sig, lambda signum, _: received.append(signum)) for sig in _STOP_SIGNALS}
    try:
        security = TritonSecurityConfig(access_token=settings.access_token)
        # Start the server in run(), with the model loading during its start-up: /v2/health/ready then says
        # ready only once the model can serve (entering `with` would start an empty server first).
        policy = TritonLifecyclePolicy(launch_triton_on_startup=False)
        config = triton_config(settings)
        with Triton(config=config, security_config=security, triton_lifecycle_policy=policy) as triton:
            bind(triton, model, settings)
            triton.run()
            LOGGER.info(
                "Serving model %r: HTTP on port %d, gRPC on port %d, metrics on port %d",
                spec.MODEL_NAME,
                settings.http_port,
                settings.grpc_port,
                settings.metrics_port,
            )
            while not received and triton.is_alive():
                time.sleep(POLL_S)
            if not received:
                LOGGER.error("Triton stopped serving: %s", triton.failure or "the server is no longer alive")
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
        return serve(settings)
    except PyTritonError as error:
        LOGGER.error("Cannot serve the model: %s", error)
        return 1
