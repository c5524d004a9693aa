"""Triton and RemoteTriton: bind inference callables and serve them with Triton Inference Server.

Example::

    import numpy as np
    from tritonrt.decorators import batch
    from tritonrt.model_config import ModelConfig, Tensor
    from tritonrt.triton import Triton, TritonConfig

    @batch
    def double(x):
        return {"y": x * 2}

    with Triton(config=TritonConfig(http_port=8000)) as triton:
        triton.bind("double", double, inputs=[Tensor(name="x", dtype=np.float32, shape=(-1,))],
                    outputs=[Tensor(name="y", dtype=np.float32, shape=(-1,))], config=ModelConfig(max_batch_size=64))
        triton.serve()   # returns when the server stops; triton.failure says why if it died
"""

from __future__ import annotations

import atexit
import logging
import os
import pathlib
import secrets
import shutil
import tempfile

from tritonrt._access import GRPC_ACCESS_HEADER, TRITON_ACCESS_HEADER
from tritonrt.constants import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_TRITON_STARTUP_TIMEOUT_S,
    TRITON_LOCAL_IP,
)
from tritonrt.exceptions import PyTritonInvalidOperationError
from tritonrt.models import trace, triton_models
from tritonrt.models.bound import BoundModel
from tritonrt.models.host import MONITORING_PERIOD_S, HostState, ModelHost
from tritonrt.models.remote import RemoteModels
from tritonrt.models.workers import WorkerInfo, WorkerMode, WorkerOptions
from tritonrt.proxy import telemetry
from tritonrt.server import environment, python_env
from tritonrt.server.api import ServerApi
from tritonrt.server.command import SERVER_EXIT_TIMEOUT_S, server_command
from tritonrt.server.config import (
    DEFAULT_PROTECTED_ENDPOINTS,
    VALID_TRITON_ENDPOINTS,
    TritonConfig,
    TritonSecurityConfig,
    merge_with_environment,
)
from tritonrt.server.drain import drain_models
from tritonrt.server.install import find_or_install_server
from tritonrt.server.lifecycle import (
    DefaultTritonLifecyclePolicy,
    TritonLifecyclePolicy,
    VertextAILifecyclePolicy,
    choose_policy,
)
from tritonrt.server.process import TritonServerProcess, check_port_free
from tritonrt.server.supervisor import RecoveryPolicy

__all__ = [
    "DEFAULT_PROTECTED_ENDPOINTS",
    "GRPC_ACCESS_HEADER",
    "TRITON_ACCESS_HEADER",
    "MONITORING_PERIOD_S",
    "VALID_TRITON_ENDPOINTS",
    "DefaultTritonLifecyclePolicy",
    "RecoveryPolicy",
    "RemoteTriton",
    "Triton",
    "TritonConfig",
    "TritonLifecyclePolicy",
    "TritonSecurityConfig",
    "VertextAILifecyclePolicy",
    "WorkerInfo",
    "WorkerMode",
    "WorkerOptions",
]

LOGGER = logging.getLogger("tritonrt")
SHARED_MEMORY_DIR = pathlib.Path("/dev/shm")

DEFAULT_EXIT_TIMEOUT_S = 30
# How long tritonserver may take to exit beyond its own exit timeout before tritonrt kills it.
_SERVER_STOP_MARGIN_S = 10


def _start_callable_tracing(trace_config: list[str] | None) -> None:
    """With Triton's OpenTelemetry mode and no tracer set (tritonrt.proxy.telemetry.set_telemetry_tracer), trace
    the callables with a tracer exporting where Triton does; without OpenTelemetry installed, say how to get it and
    serve with Triton's spans only."""
    if telemetry.opentelemetry_url(trace_config) is None or telemetry.get_telemetry_tracer() is not None:
        return
    try:
        telemetry.set_telemetry_tracer(telemetry.build_tracer(trace_config or []))
    except ImportError as error:
        LOGGER.warning("%s The callables serve without spans of their own.", error)


def _startup_timeout_s() -> float:
    return float(os.environ.get("TRITONRT_STARTUP_TIMEOUT_S", DEFAULT_TRITON_STARTUP_TIMEOUT_S))


class Triton(ModelHost):
    """A Triton Inference Server started and owned by this process.

    Entering ``with Triton()`` starts the server (PyTriton 0.7) and models bound then load at once, unless the
    ``triton_lifecycle_policy`` says to wait for run()/serve() (see TritonLifecyclePolicy).

    ``models_dir`` (tritonrt's own) is a folder of Triton's own models (``<name>/config.pbtxt`` and version
    folders: ONNX, TensorRT plans, TorchScript, Python-backend ``model.py``) served by the same server, loaded at
    every start next to the bound models; so are the Triton models in ``config.model_repository`` (see
    ``tritonrt.models.triton_models``).
    """

    def __init__(
        self,
        *,
        config: TritonConfig | None = None,
        workspace: str | pathlib.Path | None = None,
        triton_lifecycle_policy: TritonLifecyclePolicy | None = None,
        security_config: TritonSecurityConfig | None = None,
        recovery: RecoveryPolicy | None = None,
        models_dir: str | os.PathLike[str] | None = None,
    ):
        vertex_ai = config is not None and bool(config.allow_vertex_ai)
        super().__init__(workspace, security_config, choose_policy(triton_lifecycle_policy, vertex_ai), recovery)
        self._config = merge_with_environment(config)
        _start_callable_tracing(self._config.trace_config)
        self._server: TritonServerProcess | None = None
        self._server_files: tuple[pathlib.Path, dict[str, str]] | None = None  # (server dir, environment)
        self._models_dir = None if models_dir is None else pathlib.Path(models_dir).absolute()
        self._regions_token = secrets.token_hex(4)  # names the Python backend's regions of this Triton's servers
        if self._models_dir is not None:
            triton_models.scan(self._models_dir, "models_dir")  # a missing folder is an error now, not at run()

    @property
    def config(self) -> TritonConfig:
        """The effective server configuration (explicit, environment and defaults merged)."""
        return self._config

    def run(self) -> None:
        """Start the server with the bound models and return once they are ready."""
        with self._lock:
            if self._state in (HostState.STARTING, HostState.SERVING):
                return
            server_dir = find_or_install_server()
            env = environment.server_environment(server_dir)
            self._check_ports()
            self._make_socket_dir()
            self.failure = None
            self._move(HostState.STARTING)
            self._server_files = server_dir, env
            try:
                self._start_with_models()
            except BaseException:
                self._move(HostState.STOPPING)
                self._shutdown()
                self._move(HostState.STOPPED)
                raise
            self._move(HostState.SERVING)
            self._start_supervisor(self._restart_server)
            atexit.register(self.stop)

    def connect(self) -> None:
        """Nothing to do once the server runs (run() and entering ``with`` connect); raises
        PyTritonInvalidOperationError when it does not."""
        if self._state is not HostState.SERVING:
            raise PyTritonInvalidOperationError(
                "This Triton's server is not running, so there is nothing to connect to: start it with run() or "
                "serve() (entering `with Triton()` does, unless the lifecycle policy says otherwise)."
            )

    def _start_with_models(self) -> None:
        assert self._server_files is not None  # set by run()
        self._generation += 1
        server_dir, env = self._server_files
        served = self._triton_models()
        for model in self._models.values():
            self._prepare(model)
        if any(model.runs_in_python_stub for model in served):
            env = python_env.stub_environment(env, server_dir)
        repositories = [] if self._models_dir is None else [f"--model-repository={self._models_dir}"]
        # Models bound before the start load during start-up, so the server is ready only once they are.
        names = [*(model.name for model in served), *self._models]
        flags = repositories + [f"--load-model={name}" for name in names]
        regions = None
        if any(model.backend == "python" for model in served):
            # The Python backend's shared-memory regions, named for this start: the guard removes what a server
            # that died (killed, crashed) leaves in /dev/shm, where Triton's own clean-up never ran.
            prefix = f"tritonrt-{self._regions_token}-{self._generation}-"
            flags.append(f"--backend-config=python,shm-region-prefix-name={prefix}")
            regions = SHARED_MEMORY_DIR / f"{prefix}*"
        self._start_server(server_dir, env, flags, regions)
        if served:
            listed = ", ".join(f"{model.name} ({model.backend or 'backend from its files'})" for model in served)
            LOGGER.info("Serving Triton's own models beside the bound ones: %s", listed)
        for model in self._models.values():
            trace.apply_trace_config(self._server_api(), model)

    def _triton_models(self) -> list[triton_models.TritonModel]:
        """The Triton models served beside the bound ones (``models_dir``, ``config.model_repository``), checked:
        each has a config.pbtxt, no name twice, none the name of a bound model."""
        groups = []
        if self._config.model_repository is not None:
            repository = self._model_repository()
            groups.append(
                (
                    "TritonConfig.model_repository",
                    triton_models.scan(repository, "TritonConfig.model_repository", skip_bound=True),
                )
            )
        if self._models_dir is not None and self._models_dir.resolve() != self._model_repository().resolve():
            groups.append(("models_dir", triton_models.scan(self._models_dir, "models_dir")))
        triton_models.check_unique(groups)
        served = [model for _, models in groups for model in models]
        for name in self._models:
            triton_models.check_bound_name(name, served)
        return served

    def _check_name(self, model_name: str) -> None:
        triton_models.check_bound_name(model_name, self._triton_models())

    def _restart_server(self) -> None:
        """Start tritonserver again with the bound models, after it exited unasked (the supervisor's call)."""
        with self._lock:
            if self._winding_down():
                return
            self._close_models()  # the exited server's guard removed their folders and regions
            self._api = None
            self._check_ports()
            self._make_socket_dir()
            self._start_with_models()

    def _model_repository(self) -> pathlib.Path:
        if self._config.model_repository is None:
            return super()._model_repository()
        path = pathlib.Path(self._config.model_repository)
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _check_ports(self) -> None:
        c = self._config
        if c.allow_http is not False:
            check_port_free(c.http_port or DEFAULT_HTTP_PORT, c.http_address or "0.0.0.0", "HTTP", "http_port")
        if c.allow_grpc is not False:
            check_port_free(c.grpc_port or DEFAULT_GRPC_PORT, c.grpc_address or "0.0.0.0", "gRPC", "grpc_port")
        if c.allow_metrics is not False:
            address = c.metrics_address or c.http_address or "0.0.0.0"
            check_port_free(c.metrics_port or DEFAULT_METRICS_PORT, address, "Metrics", "metrics_port")

    def _security_flags(self) -> list[str]:
        value = self._security.restriction_flag_value()
        flags = []
        if value and self._config.http_restricted_api is None:
            flags.append(f"--http-restricted-api={value}")
        if value and self._config.grpc_restricted_protocol is None:
            flags.append(f"--grpc-restricted-protocol={value}")
        return flags

    def _start_server(
        self, server_dir: pathlib.Path, env: dict[str, str], load_flags: list[str], regions: pathlib.Path | None
    ) -> None:
        extra_flags = self._security_flags() + load_flags
        command = server_command(server_dir, self._config, self._model_repository(), extra_flags)
        self._server = TritonServerProcess(
            command,
            env,
            cleanup=[
                self._socket_folder(),
                *([self._workspace] if self._own_workspace else []),
                *([regions] if regions is not None else []),
            ],
            verbose=bool(self._config.log_verbose),
            secrets=self._secrets(),
        )
        self._server.start()
        http = self._config.allow_http is not False
        host = _client_host(self._config.http_address if http else self._config.grpc_address)
        self._api = ServerApi(
            host=host,
            http_port=(self._config.http_port or DEFAULT_HTTP_PORT) if http else None,
            grpc_port=self._config.grpc_port or DEFAULT_GRPC_PORT,
            token=self._security.access_token,
        )
        self._server.wait_until_live(self._api.is_live, _startup_timeout_s())
        self._api.on_error_log = self._server.log_tail
        generation = self._generation
        self._server.register_on_exit(lambda code: self._on_server_exit(code, generation))

    def _secrets(self) -> list[str]:
        """The access tokens in the server's arguments, which the guard keeps off its command line."""
        flags = (self._config.http_restricted_api, self._config.grpc_restricted_protocol)
        token = self.get_access_token()
        return [*([token] if token else []), *(flag.rpartition("=")[2] for flag in flags if flag)]

    def _on_server_exit(self, code: int, generation: int) -> None:
        with self._cv:
            unasked = not self._winding_down() and generation == self._generation and self._supervisor is not None
            self._cv.notify_all()
        if unasked and self._supervisor is not None:
            self._supervisor.server_exited(code)

    def is_alive(self) -> bool:
        """True while the server and every bound model's workers run, or while they are being brought back."""
        if self._state is not HostState.SERVING or self.failure is not None:
            return False
        if self._recovering():
            return True
        return self._server is not None and self._server.is_alive() and self._models_alive()

    def stop(self) -> bool:
        """Stop the server: new requests are refused, in-flight ones finish (up to ``exit_timeout_secs``), open
        connections are closed (idle ones do not delay the stop), then clean up.

        Returns True when this call stopped a server, False when there was none to stop (as PyTriton 0.7).
        """
        with self._cv:
            if self._winding_down():
                return False
            was_running = self._move(HostState.STOPPING) is HostState.SERVING
        atexit.unregister(self.stop)
        self._stop_supervisor()
        stopped = was_running or self._server is not None
        try:  # a second Ctrl+C interrupts the drain (the server is then killed): clean up all the same
            if stopped:
                self._shutdown()
        finally:
            if self._own_workspace:
                shutil.rmtree(self._workspace, ignore_errors=True)
            self._move(HostState.STOPPED)
        return stopped

    def kill(self) -> None:
        """Stop at once: kill tritonserver without waiting for the requests in flight (they get no answer).

        For a second stop signal while ``stop()`` drains (``serve()`` does this on a second Ctrl+C); may be called
        from a signal handler or another thread. ``stop()`` still cleans up (the drain then ends at once).
        """
        server = self._server
        if server is not None:
            LOGGER.warning("Stopping at once: killing tritonserver; requests still in flight get no answer")
            server.kill(wait=False)  # (no wait: this may run in a signal handler; stop() waits for the exit)

    def _stop_at_once(self) -> None:
        self.kill()

    def _metrics_url(self) -> str | None:
        """Where the server publishes its metrics (None with metrics off)."""
        c = self._config
        if c.allow_metrics is False:
            return None
        host = _client_host(c.metrics_address or c.http_address)
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{c.metrics_port or DEFAULT_METRICS_PORT}/metrics"

    def _shutdown(self) -> None:
        """Drain the models (new requests refused, those in flight answered, up to ``exit_timeout_secs``; see
        tritonrt.server.drain), then stop tritonserver, which then has only its last answers to write."""
        try:
            server = self._server
            if server is not None:
                exit_timeout = self._config.exit_timeout_secs
                drain_s = DEFAULT_EXIT_TIMEOUT_S if exit_timeout is None else exit_timeout
                if self._api is not None and server.is_alive():
                    try:
                        drain_models(self._api, drain_s, server.is_alive, self._metrics_url())
                    except BaseException:  # e.g. a KeyboardInterrupt: no server outlives the drain
                        server.kill()
                        raise
                server.stop(SERVER_EXIT_TIMEOUT_S + _SERVER_STOP_MARGIN_S)
        finally:
            self._server = None
            self._close_models()
            self._api = None


class RemoteTriton(ModelHost):
    """Bind models to a Triton server started elsewhere on this host (e.g. by another process's ``Triton()``).

    Models are uploaded through the server's repository API (PyTriton 0.7's way; ``access_token`` opens it);
    the model's instances in the server reach this process through Unix sockets in ``workspace`` (default: a
    temporary folder).
    See ``tritonrt.models.remote`` for ``model_repository``, a shared folder to write the models into instead.

    Example::

        with RemoteTriton("http://localhost:8000", access_token=token) as triton:
            triton.bind("double", double, inputs=..., outputs=...)
            triton.serve()
    """

    def __init__(
        self,
        url: str,
        workspace: str | pathlib.Path | None = None,
        access_token: str | None = None,
        *,
        model_repository: str | pathlib.Path | None = None,
        recovery: RecoveryPolicy | None = None,
    ):
        security = TritonSecurityConfig(access_token=access_token, restricted_endpoints=[])  # only holds the token
        # Nothing of a RemoteTriton's lives in its workspace but the socket folder: without one, the temp folder.
        base = workspace if workspace is not None else tempfile.gettempdir()
        super().__init__(base, security, TritonLifecyclePolicy(launch_triton_on_startup=True), recovery)
        self._socket_parent = None if workspace is None else self._workspace
        self._api = ServerApi.from_url(url, token=access_token)
        self._remote = RemoteModels(self._api, access_token, model_repository)

    def _publish(self, model: BoundModel) -> None:
        self._remote.publish(model)

    def _load(self, model: BoundModel) -> None:
        self._remote.load(model)

    def connect(self) -> None:
        """Wait for the remote server to be ready (up to 120 s; else TimeoutError), then load the bound models."""
        with self._lock:
            if self._state in (HostState.STARTING, HostState.SERVING):
                return
            self._move(HostState.STARTING)
            try:
                self._remote.wait_until_ready(DEFAULT_TRITON_STARTUP_TIMEOUT_S)
            except BaseException:
                self._move(HostState.STOPPING)
                self._move(HostState.STOPPED)
                raise
            self._make_socket_dir()
            self.failure = None
            self._move(HostState.SERVING)  # from here on, stop() unloads what loaded and stops the workers
            try:
                for model in self._models.values():
                    self._deploy(model)
            except BaseException:
                self.stop()
                raise
            self._start_supervisor(None)  # the server is not ours to restart: its models are reloaded
            atexit.register(self.stop)

    run = connect

    def _stop_at_once(self) -> None:
        """Nothing to kill: the server belongs to another process; stop() unloads this process's models."""

    def is_alive(self) -> bool:
        """True while the remote server is live and the bound models' workers run."""
        return self._state is HostState.SERVING and self._models_alive() and self._server_api().is_live()

    def stop(self) -> bool:
        """Unload the models from the remote server and stop their workers; the server keeps running.

        Returns True when this call stopped serving, False when it was not serving (as PyTriton 0.7).
        """
        with self._cv:
            if self._state is not HostState.SERVING:
                return False
            self._move(HostState.STOPPING)
        atexit.unregister(self.stop)
        self._stop_supervisor()
        for model in self._models.values():
            self._remote.unload(model)
        self._close_models()
        self._move(HostState.STOPPED)
        return True


def _client_host(address: str | None) -> str:
    return TRITON_LOCAL_IP if address in (None, "", "0.0.0.0", "::") else address
