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
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

from tritonrt._access import GRPC_ACCESS_HEADER, TRITON_ACCESS_HEADER
from tritonrt.constants import (
    DEFAULT_GRPC_PORT,
    DEFAULT_HTTP_PORT,
    DEFAULT_METRICS_PORT,
    DEFAULT_TRITON_STARTUP_TIMEOUT_S,
    TRITON_LOCAL_IP,
)
from tritonrt.context import TritonContext, bind_triton_context
from tritonrt.exceptions import PyTritonInvalidOperationError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.models import repository, trace
from tritonrt.models.bound import BoundModel
from tritonrt.models.remote import RemoteModels
from tritonrt.models.warmup import warm_up
from tritonrt.server import environment
from tritonrt.server.api import ServerApi
from tritonrt.server.command import server_command
from tritonrt.server.config import (
    DEFAULT_PROTECTED_ENDPOINTS,
    VALID_TRITON_ENDPOINTS,
    TritonConfig,
    TritonSecurityConfig,
    merge_with_environment,
)
from tritonrt.server.guard import remove_shm
from tritonrt.server.install import find_or_install_server
from tritonrt.server.lifecycle import (
    DefaultTritonLifecyclePolicy,
    TritonLifecyclePolicy,
    VertextAILifecyclePolicy,
    choose_policy,
)
from tritonrt.server.process import TritonServerProcess, check_port_free
from tritonrt.server.supervisor import RecoveryPolicy, Supervisor

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
]

LOGGER = logging.getLogger("tritonrt")
_Host = TypeVar("_Host", bound="_ModelHost")

MONITORING_PERIOD_S = 10.0  # PyTriton 0.7's period of serve()'s liveness checks
DEFAULT_EXIT_TIMEOUT_S = 30
# Python backend shared memory per stub: start size and growth step (Triton's defaults are 1 MiB each).
PYTHON_BACKEND_SHM = {"shm-default-byte-size": str(4 << 20), "shm-growth-byte-size": str(4 << 20)}


def _startup_timeout_s() -> float:
    return float(os.environ.get("TRITONRT_STARTUP_TIMEOUT_S", DEFAULT_TRITON_STARTUP_TIMEOUT_S))


class _ModelHost:
    """What Triton and RemoteTriton share: bound models, their workers, loading them into a server."""

    def __init__(
        self,
        workspace: str | pathlib.Path | None,
        security_config: TritonSecurityConfig | None,
        lifecycle_policy: TritonLifecyclePolicy,
        recovery: RecoveryPolicy | None = None,
    ):
        self._security = security_config or TritonSecurityConfig()
        self._policy = lifecycle_policy
        self._recovery = recovery or RecoveryPolicy.from_env()
        self._supervisor: Supervisor | None = None
        self._generation = 0  # counts server starts: a report from an earlier one's workers is stale
        self._own_workspace = workspace is None
        self._workspace = pathlib.Path(workspace or tempfile.mkdtemp(prefix="tritonrt-workspace-"))
        self._workspace.mkdir(parents=True, exist_ok=True)
        self._models: dict[str, BoundModel] = {}
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._running = False
        self._stopping = False
        self._socket_dir: pathlib.Path | None = None
        self._socket_parent: pathlib.Path | None = None  # where the socket folder is made (None: the temp folder)
        self._shm_prefix = ""
        self._api: ServerApi | None = None
        self.failure: str | None = None
        self.triton_context = TritonContext()

    # -- binding ---------------------------------------------------------------------------------------------

    def bind(
        self,
        model_name: str,
        infer_func: Callable | Sequence[Callable],
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        model_version: int = 1,
        config: ModelConfig | None = None,
        strict: bool = False,
        trace_config: list[str] | None = None,
    ) -> None:
        """Bind an inference callable (or one per instance, as a list) to a model named ``model_name``.

        The callable receives a list of requests (dicts of numpy arrays) and returns a list of dicts.
        When the server is running the model is loaded at once. ``trace_config`` gives the model its own
        trace settings (``["level=TIMESTAMPS", "rate=1"]``, see ``tritonrt.models.trace``).
        """
        model = BoundModel.from_bind(
            model_name, infer_func, inputs, outputs, model_version, config, strict, trace_config
        )
        with self._lock:
            if model_name in self._models:
                raise PyTritonInvalidOperationError(
                    f"A model named {model_name!r} is already bound; choose another name."
                )
            for infer_callable in model.callables:
                bind_triton_context(infer_callable, self.triton_context)
                self.triton_context.model_configs[infer_callable] = model.config
            self._models[model_name] = model
            if self._running:
                self._deploy(model)

    def get_access_token(self) -> str | None:
        """The token that opens the restricted endpoints (``triton-access-token`` header); None when nothing is
        restricted (``TritonSecurityConfig(restricted_endpoints=[])``) and no token was given."""
        return self._security.access_token

    def connect(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def is_connected(self) -> bool:
        """True while the bound models are served (after run(), serve() or connect(), until stop())."""
        return self._running

    # -- lifecycle helpers -----------------------------------------------------------------------------------

    def _open_transport(self) -> None:
        self._socket_dir = pathlib.Path(tempfile.mkdtemp(prefix="tritonrt-", dir=self._socket_parent))
        self._socket_dir.chmod(0o700)
        self._shm_prefix = f"tritonrt_{uuid.uuid4().hex[:12]}_"
        self._import_paths = environment.import_paths()  # once per start: the shim of every model uses them

    def _model_repository(self) -> pathlib.Path:
        path = self._workspace / "model-repository"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _open_socket_dir(self) -> pathlib.Path:
        """The workers' socket folder of this start (made by ``_open_transport``)."""
        if self._socket_dir is None:
            raise PyTritonInvalidOperationError("The models' transport is not open: start the server with run().")
        return self._socket_dir

    def _server_api(self) -> ServerApi:
        if self._api is None:
            raise PyTritonInvalidOperationError("The server is not running: start it with run() first.")
        return self._api

    def _prepare(self, model: BoundModel) -> None:
        model.attach(self._open_socket_dir(), os.getpid(), self._shm_prefix)
        warm_up(model)  # before the model loads, as in PyTriton 0.7
        self._publish(model)
        generation = self._generation
        model.start(self._on_unrecoverable, lambda: self._on_peer_lost(model.name, generation))

    def _publish(self, model: BoundModel) -> None:
        """Make the model's files available to the server (here: its repository folder)."""
        repository.write_model(self._model_repository(), model.config, *self._import_paths)

    def _load(self, model: BoundModel) -> None:
        self._server_api().load_model(model.name)

    def _deploy(self, model: BoundModel) -> None:
        self._prepare(model)
        self._load(model)
        trace.apply_trace_config(self._server_api(), model)

    def _on_unrecoverable(self, message: str) -> None:
        LOGGER.error("%s: stopping the server", message)
        with self._cv:
            self.failure = self.failure or message
            self._cv.notify_all()
        threading.Thread(target=self.stop, name="tritonrt-unrecoverable-stop", daemon=True).start()

    def _on_peer_lost(self, name: str, generation: int) -> None:
        """A worker of ``name`` lost its instance unasked: have the supervisor reload the model."""
        supervisor = self._supervisor  # read without the lock: a restart may hold it while it stops this worker
        if self._stopping or not self._running or generation != self._generation or supervisor is None:
            return
        supervisor.model_lost(name)

    def _reload_model(self, name: str) -> None:
        """Unload, then load ``name``: Triton reports it not ready from the unload on, until it is loaded."""
        api = self._server_api()
        api.unload_model(name)
        api.load_model(name)
        self._models[name].move_to_new_instances()  # an old instance may linger while Triton unloads it

    def _server_live(self) -> bool:
        return self._api is not None and self._api.is_live()

    def _start_supervisor(self, restart_server: Callable[[], None] | None) -> None:
        self._supervisor = Supervisor(
            self._recovery,
            restart_server=restart_server,
            reload_model=self._reload_model,
            server_live=self._server_live,
            model_ready=lambda name: self._api is not None and self._api.is_model_ready(name),
            give_up=self._on_unrecoverable,
        )

    def _stop_supervisor(self) -> None:
        if self._supervisor is not None:
            self._supervisor.close()
            self._supervisor = None

    def _recovering(self) -> bool:
        supervisor = self._supervisor
        return supervisor is not None and supervisor.busy

    def _close_models(self) -> None:
        for model in self._models.values():
            model.stop()
        remove_shm(self._shm_prefix)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def _models_alive(self) -> bool:
        if self.failure is not None:
            return False
        return self._recovering() or all(model.is_alive() for model in self._models.values())

    def serve(self, monitoring_period_s: float | None = None, *, monitoring_period_sec: float | None = None) -> None:
        """Run, then block until Ctrl+C (SIGINT), ``stop()`` (e.g. from a signal handler) or a failure; then stop
        and return. Every ``monitoring_period_s`` (default 10 s; ``monitoring_period_sec``: the reference's name)
        it checks that the server and the models' workers live."""
        period = next((p for p in (monitoring_period_s, monitoring_period_sec) if p is not None), MONITORING_PERIOD_S)
        self.run()
        LOGGER.info("Serving (press Ctrl+C or use `kill -SIGINT %d` to stop)", os.getpid())
        try:
            with self._cv:
                while self.is_alive():
                    self._cv.wait(timeout=period)
        except KeyboardInterrupt:
            LOGGER.info("SIGINT received, exiting.")
        finally:
            self.stop()

    def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def is_alive(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self: _Host) -> _Host:
        """Start serving (``run()``) unless the lifecycle policy says to wait for run()/serve()."""
        if self._policy.launch_triton_on_startup:
            try:
                self.run()
            except BaseException:
                self.stop()
                raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError


class Triton(_ModelHost):
    """A Triton Inference Server started and owned by this process.

    Entering ``with Triton()`` starts the server (PyTriton 0.7) and models bound then load at once, unless the
    ``triton_lifecycle_policy`` says to wait for run()/serve() (see TritonLifecyclePolicy).
    """

    def __init__(
        self,
        *,
        config: TritonConfig | None = None,
        workspace: str | pathlib.Path | None = None,
        triton_lifecycle_policy: TritonLifecyclePolicy | None = None,
        security_config: TritonSecurityConfig | None = None,
        recovery: RecoveryPolicy | None = None,
    ):
        vertex_ai = config is not None and bool(config.allow_vertex_ai)
        super().__init__(workspace, security_config, choose_policy(triton_lifecycle_policy, vertex_ai), recovery)
        self._config = merge_with_environment(config)
        self._server: TritonServerProcess | None = None
        self._server_files: tuple[pathlib.Path, dict[str, str]] | None = None  # (server dir, environment)

    @property
    def config(self) -> TritonConfig:
        """The effective server configuration (explicit, environment and defaults merged)."""
        return self._config

    def run(self) -> None:
        """Start the server with the bound models and return once they are ready."""
        with self._lock:
            if self._running:
                return
            server_dir = find_or_install_server()
            environment.check_stub(server_dir)
            env = environment.server_environment(server_dir)
            self._check_ports()
            self._open_transport()
            self.failure = None
            self._stopping = False
            self._server_files = server_dir, env
            try:
                self._start_with_models()
            except BaseException:
                self._stopping = True
                self._shutdown()
                raise
            self._running = True
            self._start_supervisor(self._restart_server)
            atexit.register(self.stop)

    def connect(self) -> None:
        """Nothing to do once the server runs (run() and entering ``with`` connect); raises
        PyTritonInvalidOperationError when it does not."""
        if not self._running:
            raise PyTritonInvalidOperationError(
                "This Triton's server is not running, so there is nothing to connect to: start it with run() or "
                "serve() (entering `with Triton()` does, unless the lifecycle policy says otherwise)."
            )

    def _start_with_models(self) -> None:
        assert self._server_files is not None  # set by run()
        self._generation += 1
        for model in self._models.values():
            self._prepare(model)
        # Models bound before the start load during start-up, so the server is ready only once they are.
        self._start_server(*self._server_files, [f"--load-model={name}" for name in self._models])
        for model in self._models.values():
            trace.apply_trace_config(self._server_api(), model)

    def _restart_server(self) -> None:
        """Start tritonserver again with the bound models, after it exited unasked (the supervisor's call)."""
        with self._lock:
            if self._stopping:
                return
            self._close_models()  # the exited server's guard removed their folders and regions
            self._api = None
            self._check_ports()
            self._open_transport()
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

    def _start_server(self, server_dir: pathlib.Path, env: dict[str, str], load_flags: list[str]) -> None:
        shm_prefix = self._shm_prefix
        repository_path = self._model_repository()
        backend_config = {**PYTHON_BACKEND_SHM, "shm-region-prefix-name": shm_prefix}
        extra_flags = self._security_flags() + load_flags
        command = server_command(server_dir, self._config, repository_path, backend_config, extra_flags)
        self._server = TritonServerProcess(
            command,
            env,
            shm_prefix=shm_prefix,
            cleanup=[self._open_socket_dir(), *([self._workspace] if self._own_workspace else [])],
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
            unasked = not self._stopping and generation == self._generation and self._supervisor is not None
            self._cv.notify_all()
        if unasked and self._supervisor is not None:
            self._supervisor.server_exited(code)

    def is_alive(self) -> bool:
        """True while the server and every bound model's workers run, or while they are being brought back."""
        if not self._running or self.failure is not None:
            return False
        if self._recovering():
            return True
        return self._server is not None and self._server.is_alive() and self._models_alive()

    def stop(self) -> bool:
        """Stop the server: in-flight requests finish (up to ``exit_timeout_secs``), then clean up.

        Returns True when this call stopped a server, False when there was none to stop (as PyTriton 0.7).
        """
        with self._cv:
            if self._stopping and not self._running:
                return False
            self._stopping = True
            was_running = self._running
            self._running = False
        atexit.unregister(self.stop)
        self._stop_supervisor()
        stopped = was_running or self._server is not None
        if stopped:
            self._shutdown()
        if self._own_workspace:
            shutil.rmtree(self._workspace, ignore_errors=True)
        with self._cv:
            self._cv.notify_all()
        return stopped

    def _shutdown(self) -> None:
        if self._server is not None:
            exit_timeout = self._config.exit_timeout_secs
            self._server.stop((DEFAULT_EXIT_TIMEOUT_S if exit_timeout is None else exit_timeout) + 5)
            self._server = None
        self._close_models()
        self._api = None


class RemoteTriton(_ModelHost):
    """Bind models to a Triton server started elsewhere on this host (e.g. by another process's ``Triton()``).

    Models are uploaded through the server's repository API (PyTriton 0.7's way; ``access_token`` opens it);
    the server's stubs reach this process through Unix sockets in ``workspace`` (default: a temporary folder).
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
        self._remote.publish(model, *self._import_paths)

    def _load(self, model: BoundModel) -> None:
        self._remote.load(model, *self._import_paths)

    def connect(self) -> None:
        """Wait for the remote server to be ready (up to 120 s; else TimeoutError), then load the bound models."""
        with self._lock:
            if self._running:
                return
            self._remote.wait_until_ready(DEFAULT_TRITON_STARTUP_TIMEOUT_S)
            self._open_transport()
            self.failure = None
            self._stopping = False
            self._running = True  # from here on, stop() unloads what loaded and closes the transport
            try:
                for model in self._models.values():
                    self._deploy(model)
            except BaseException:
                self.stop()
                raise
            self._start_supervisor(None)  # the server is not ours to restart: its models are reloaded
            atexit.register(self.stop)

    run = connect

    def is_alive(self) -> bool:
        """True while the remote server is live and the bound models' workers run."""
        return self._running and self._models_alive() and self._server_api().is_live()

    def stop(self) -> bool:
        """Unload the models from the remote server and stop their workers; the server keeps running.

        Returns True when this call stopped serving, False when it was not serving (as PyTriton 0.7).
        """
        with self._cv:
            if not self._running:
                return False
            self._running = False
            self._stopping = True
        atexit.unregister(self.stop)
        self._stop_supervisor()
        for model in self._models.values():
            self._remote.unload(model)
        self._close_models()
        with self._cv:
            self._cv.notify_all()
        return True


def _client_host(address: str | None) -> str:
    return TRITON_LOCAL_IP if address in (None, "", "0.0.0.0", "::") else address
