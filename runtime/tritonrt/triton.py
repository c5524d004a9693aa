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
from tritonrt.context import TritonContext, bind_triton_context
from tritonrt.exceptions import PyTritonInvalidOperationError, PyTritonValidationError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.model_config.resolve import build_model_config, validate_model_name
from tritonrt.models import repository
from tritonrt.models.bound import BoundModel
from tritonrt.server import environment
from tritonrt.server.api import ServerApi
from tritonrt.server.command import server_command
from tritonrt.server.config import (
    DEFAULT_PROTECTED_ENDPOINTS,
    VALID_TRITON_ENDPOINTS,
    TritonConfig,
    TritonSecurityConfig,
)
from tritonrt.server.guard import remove_shm
from tritonrt.server.install import find_or_install_server
from tritonrt.server.process import TritonServerProcess, check_port_free
from tritonrt.server.supervisor import RecoveryPolicy, Supervisor

__all__ = [
    "DEFAULT_PROTECTED_ENDPOINTS",
    "GRPC_ACCESS_HEADER",
    "TRITON_ACCESS_HEADER",
    "VALID_TRITON_ENDPOINTS",
    "RecoveryPolicy",
    "RemoteTriton",
    "Triton",
    "TritonConfig",
    "TritonSecurityConfig",
]

LOGGER = logging.getLogger("tritonrt")
_Host = TypeVar("_Host", bound="_ModelHost")

MONITORING_PERIOD_SEC = 5.0
DEFAULT_HTTP_PORT, DEFAULT_GRPC_PORT, DEFAULT_METRICS_PORT = 8000, 8001, 8002
DEFAULT_EXIT_TIMEOUT_S = 30
# Python backend shared memory per stub: start size and growth step (Triton's defaults are 1 MiB each).
PYTHON_BACKEND_SHM = {"shm-default-byte-size": str(4 << 20), "shm-growth-byte-size": str(4 << 20)}


def _startup_timeout_s() -> float:
    return float(os.environ.get("TRITONRT_STARTUP_TIMEOUT_S", "120"))


def _merged_config(config: TritonConfig | None) -> TritonConfig:
    """Explicit values over ``PYTRITON_TRITON_CONFIG_*`` variables over defaults (PyTriton's precedence)."""
    merged = {k: v for k, v in TritonConfig.from_env().to_dict().items() if v is not None}
    if config is not None:
        merged.update({k: v for k, v in config.to_dict().items() if v is not None})
    return TritonConfig(**merged)


class _ModelHost:
    """What Triton and RemoteTriton share: bound models, their workers, loading them into a server."""

    def __init__(
        self,
        workspace: str | pathlib.Path | None,
        security_config: TritonSecurityConfig | None,
        recovery: RecoveryPolicy | None = None,
    ):
        self._security = security_config or TritonSecurityConfig()
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
    ) -> None:
        """Bind an inference callable (or one per instance, as a list) to a model named ``model_name``.

        The callable receives a list of requests (dicts of numpy arrays) and returns a list of dicts.
        When the server is running the model is loaded at once.
        """
        validate_model_name(model_name)
        candidates: list[object] = list(infer_func) if isinstance(infer_func, (list, tuple)) else [infer_func]
        callables = [candidate for candidate in candidates if callable(candidate)]
        if not callables or len(callables) != len(candidates):
            raise PyTritonValidationError(
                f"Model {model_name!r}: infer_func must be a callable or a non-empty list of callables "
                "(one per model instance)."
            )
        model_config = build_model_config(
            model_name, model_version, inputs, outputs, config or ModelConfig(), instance_count=len(callables)
        )
        with self._lock:
            if model_name in self._models:
                raise PyTritonInvalidOperationError(
                    f"A model named {model_name!r} is already bound; choose another name."
                )
            for infer_callable in callables:
                bind_triton_context(infer_callable, self.triton_context)
                self.triton_context.model_configs[infer_callable] = model_config
            model = BoundModel(model_config, callables, strict, key=f"m{uuid.uuid4().hex[:8]}")
            self._models[model_name] = model
            if self._running:
                self._deploy(model)

    def get_access_token(self) -> str:
        """The token that opens the restricted endpoints (``triton-access-token`` header)."""
        token = self._security.access_token
        assert token is not None  # TritonSecurityConfig makes one when none is given
        return token

    # -- lifecycle helpers -----------------------------------------------------------------------------------

    def _open_transport(self) -> None:
        self._socket_dir = pathlib.Path(tempfile.mkdtemp(prefix="tritonrt-"))
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
        repository.write_model(self._model_repository(), model.config, *self._import_paths)
        generation = self._generation
        model.start(self._on_unrecoverable, lambda: self._on_peer_lost(model.name, generation))

    def _deploy(self, model: BoundModel) -> None:
        self._prepare(model)
        self._server_api().load_model(model.name)

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

    def serve(self, monitoring_period_sec: float = MONITORING_PERIOD_SEC) -> None:
        """Run, then block until stopped: ``stop()`` (e.g. from a signal handler) or a failure.

        Every ``monitoring_period_sec`` it also checks that the server and the models' workers live.
        """
        self.run()
        try:
            with self._cv:
                while self.is_alive():
                    self._cv.wait(timeout=monitoring_period_sec)
        finally:
            self.stop()

    def run(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError

    def is_alive(self) -> bool:  # pragma: no cover - overridden
        raise NotImplementedError

    def __enter__(self: _Host) -> _Host:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> None:  # pragma: no cover - overridden
        raise NotImplementedError


class Triton(_ModelHost):
    """A Triton Inference Server started and owned by this process."""

    def __init__(
        self,
        *,
        config: TritonConfig | None = None,
        workspace: str | pathlib.Path | None = None,
        security_config: TritonSecurityConfig | None = None,
        recovery: RecoveryPolicy | None = None,
    ):
        super().__init__(workspace, security_config, recovery)
        self._config = _merged_config(config)
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

    def _start_with_models(self) -> None:
        assert self._server_files is not None  # set by run()
        self._generation += 1
        for model in self._models.values():
            self._prepare(model)
        # Models bound before the start load during start-up, so the server is ready only once they are.
        self._start_server(*self._server_files, [f"--load-model={name}" for name in self._models])

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
        return [self.get_access_token(), *(flag.rpartition("=")[2] for flag in flags if flag)]

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

    def stop(self) -> None:
        """Stop the server: in-flight requests finish (up to ``exit_timeout_secs``), then clean up."""
        with self._cv:
            if self._stopping and not self._running:
                return
            self._stopping = True
            was_running = self._running
            self._running = False
        atexit.unregister(self.stop)
        self._stop_supervisor()
        if was_running or self._server is not None:
            self._shutdown()
        if self._own_workspace:
            shutil.rmtree(self._workspace, ignore_errors=True)
        with self._cv:
            self._cv.notify_all()

    def _shutdown(self) -> None:
        if self._server is not None:
            exit_timeout = self._config.exit_timeout_secs
            self._server.stop((DEFAULT_EXIT_TIMEOUT_S if exit_timeout is None else exit_timeout) + 5)
            self._server = None
        self._close_models()
        self._api = None


class RemoteTriton(_ModelHost):
    """Bind models to a Triton server started elsewhere on this host.

    The server must run with ``--model-control-mode=explicit`` and read its models from ``model_repository``
    (a folder both processes see); tritonrt writes the bound models there and loads them through the
    server's repository API. ``access_token`` opens the server's restricted model-repository endpoint.

    Example::

        with RemoteTriton("http://localhost:8000", model_repository="/shared/models") as triton:
            triton.bind("double", double, inputs=..., outputs=...)
            triton.serve()
    """

    def __init__(
        self,
        url: str,
        *,
        model_repository: str | pathlib.Path,
        access_token: str | None = None,
        recovery: RecoveryPolicy | None = None,
    ):
        super().__init__(
            pathlib.Path(model_repository).parent, TritonSecurityConfig(access_token=access_token), recovery
        )
        self._own_workspace = False
        self._repository = pathlib.Path(model_repository)
        self._api = ServerApi.from_url(url, token=self._security.access_token)

    def _model_repository(self) -> pathlib.Path:
        self._repository.mkdir(parents=True, exist_ok=True)
        return self._repository

    def run(self) -> None:
        """Load the bound models into the remote server."""
        with self._lock:
            if self._running:
                return
            self._open_transport()
            self.failure = None
            self._stopping = False
            for model in self._models.values():
                self._deploy(model)
            self._running = True
            self._start_supervisor(None)  # the server is not ours to restart: its models are reloaded
            atexit.register(self.stop)

    def is_alive(self) -> bool:
        """True while the remote server is live and the bound models' workers run."""
        return self._running and self._models_alive() and self._server_api().is_live()

    def stop(self) -> None:
        """Unload the models from the remote server and stop their workers."""
        with self._cv:
            if not self._running:
                return
            self._running = False
            self._stopping = True
        atexit.unregister(self.stop)
        self._stop_supervisor()
        for model in self._models.values():
            try:
                self._server_api().unload_model(model.name)
            except Exception as error:  # the remote may be gone already
                LOGGER.warning("Could not unload %s: %s", model.name, error)
            repository.remove_model(self._repository, model.name)
        self._close_models()
        with self._cv:
            self._cv.notify_all()


def _client_host(address: str | None) -> str:
    return "127.0.0.1" if address in (None, "", "0.0.0.0", "::") else address
