"""What Triton and RemoteTriton share: the bound models, their workers (listening in a socket folder made for
each server start), publishing and loading them, and the supervisor's hooks (a lost instance, a model reload).

:mod:`tritonrt.triton` builds the public classes on :class:`ModelHost`: a ``Triton`` starts its own server,
a ``RemoteTriton`` uploads its models into one started elsewhere.
"""

from __future__ import annotations

import abc
import enum
import logging
import os
import pathlib
import shutil
import tempfile
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tritonrt.context import TritonContext, bind_triton_context
from tritonrt.exceptions import PyTritonInvalidOperationError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.models import repository, trace
from tritonrt.models.bound import BoundModel, ModelHooks
from tritonrt.models.second_interrupt import second_ctrl_c
from tritonrt.models.warmup import warm_up
from tritonrt.models.worker_process import WorkerExit
from tritonrt.models.workers import WorkerMode, WorkerOptions
from tritonrt.server.api import ServerApi
from tritonrt.server.config import TritonSecurityConfig
from tritonrt.server.lifecycle import TritonLifecyclePolicy
from tritonrt.server.supervisor import RecoveryPolicy, Supervisor, WorkerExited

__all__ = ["MONITORING_PERIOD_S", "HostState", "ModelHost"]

LOGGER = logging.getLogger("tritonrt")
_Host = TypeVar("_Host", bound="ModelHost")

MONITORING_PERIOD_S = 10.0  # PyTriton 0.7's period of serve()'s liveness checks


class HostState(enum.Enum):
    r"""The lifecycle of a Triton or RemoteTriton, held by the object alone (``ModelHost._state``)::

    NEW --run()--> STARTING --started--> SERVING --stop()--> STOPPING --> STOPPED --run()--> STARTING
                       \--failed--> STOPPING
    """

    NEW = "new"
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"
    STOPPED = "stopped"


_MOVES = {
    HostState.NEW: {HostState.STARTING, HostState.STOPPING},
    HostState.STARTING: {HostState.SERVING, HostState.STOPPING},
    HostState.SERVING: {HostState.STOPPING},
    HostState.STOPPING: {HostState.STOPPED},
    HostState.STOPPED: {HostState.STARTING, HostState.STOPPING},
}


class ModelHost(abc.ABC):
    """What Triton and RemoteTriton share: bound models, their workers, loading them into a server, and the
    supervisor's hooks. Subclasses implement ``run``/``connect``, ``is_alive`` and ``stop``."""

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
        self._state = HostState.NEW
        self._generation = 0  # counts server starts: a report from an earlier one's workers is stale
        self._own_workspace = workspace is None
        self._workspace = pathlib.Path(workspace or tempfile.mkdtemp(prefix="tritonrt-workspace-"))
        self._workspace.mkdir(parents=True, exist_ok=True)
        self._models: dict[str, BoundModel] = {}
        self._lock = threading.RLock()
        self._cv = threading.Condition(self._lock)
        self._socket_dir: pathlib.Path | None = None
        self._socket_parent: pathlib.Path | None = None  # where the socket folder is made (None: the temp folder)
        self._api: ServerApi | None = None
        self.failure: str | None = None
        self.triton_context = TritonContext()

    # -- binding ---------------------------------------------------------------------------------------------

    def bind(
        self,
        model_name: str,
        infer_func: Callable[..., Any] | Sequence[Callable[..., Any]],
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        model_version: int = 1,
        config: ModelConfig | None = None,
        strict: bool = False,
        trace_config: list[str] | None = None,
        *,
        workers: WorkerOptions | None = None,
    ) -> None:
        """Bind an inference callable (or one per instance, as a list) to a model named ``model_name``.

        The callable receives a list of requests (dicts of numpy arrays) and returns a list of dicts.
        When the server is running the model is loaded at once. ``trace_config`` gives the model its own
        trace settings (``["level=TIMESTAMPS", "rate=1"]``, see ``tritonrt.models.trace``). ``workers`` (tritonrt's
        own) says where the instances run: threads of this process (default) or worker processes, their setup
        hook, GPUs and execution timeout (see ``tritonrt.models.workers.WorkerOptions``).
        """
        model = BoundModel.from_bind(
            model_name, infer_func, inputs, outputs, model_version, config, strict, trace_config, workers
        )
        with self._lock:
            self._check_name(model_name)
            if model_name in self._models:
                raise PyTritonInvalidOperationError(
                    f"A model named {model_name!r} is already bound; choose another name."
                )
            for infer_callable in model.callables:
                bind_triton_context(infer_callable, self.triton_context)
                self.triton_context.model_configs[infer_callable] = model.config
            self._models[model_name] = model
            if self._state is HostState.SERVING:
                try:
                    self._deploy(model)
                except BaseException:  # not served: not bound (bind again once the cause is fixed)
                    del self._models[model_name]
                    model.stop()
                    raise

    def _check_name(self, model_name: str) -> None:
        """Raise when ``model_name`` cannot be bound here (a Triton model served beside the bound ones has it);
        any name can, unless a subclass says otherwise."""
        return None

    def get_access_token(self) -> str | None:
        """The token that opens the restricted endpoints (``triton-access-token`` header); None when nothing is
        restricted (``TritonSecurityConfig(restricted_endpoints=[])``) and no token was given."""
        return self._security.access_token

    @abc.abstractmethod
    def connect(self) -> None:
        """Serve the bound models (see the subclass)."""

    def is_connected(self) -> bool:
        """True while the bound models are served (after run(), serve() or connect(), until stop())."""
        return self._state is HostState.SERVING

    @property
    def state(self) -> HostState:
        """Where this host is in its lifecycle."""
        return self._state

    def _move(self, to: HostState) -> HostState:
        """Change the state (under the lock); the state it was in. A move the lifecycle does not have is a bug."""
        with self._cv:
            was = self._state
            if to not in _MOVES[was]:
                raise PyTritonInvalidOperationError(f"tritonrt: cannot go from {was.value} to {to.value}")
            self._state = to
            self._cv.notify_all()
            return was

    def _winding_down(self) -> bool:
        """True from stop() (or a failed start) on, until the next run()."""
        return self._state in (HostState.STOPPING, HostState.STOPPED)

    # -- lifecycle helpers -----------------------------------------------------------------------------------

    def _make_socket_dir(self) -> None:
        """A new 0700 folder for the workers' sockets of this start (removed by ``_close_models``)."""
        self._socket_dir = pathlib.Path(tempfile.mkdtemp(prefix="tritonrt-", dir=self._socket_parent))
        self._socket_dir.chmod(0o700)

    def _model_repository(self) -> pathlib.Path:
        path = self._workspace / "model-repository"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _socket_folder(self) -> pathlib.Path:
        """The workers' socket folder of this start (made by ``_make_socket_dir``)."""
        if self._socket_dir is None:
            raise PyTritonInvalidOperationError("No socket folder for the models yet: start the server with run().")
        return self._socket_dir

    def _server_api(self) -> ServerApi:
        if self._api is None:
            raise PyTritonInvalidOperationError("The server is not running: start it with run() first.")
        return self._api

    def _prepare(self, model: BoundModel) -> None:
        model.attach(self._socket_folder())
        model.set_up_here()
        if model.mode is WorkerMode.THREAD:
            warm_up(model)  # before the model loads, as in PyTriton 0.7 (a worker process warms itself up)
        self._publish(model)
        generation = self._generation
        hooks = ModelHooks(
            self._on_unrecoverable,
            lambda: self._on_peer_lost(model.name, generation),
            lambda exit: self._on_worker_exit(exit, generation),
        )
        model.start(hooks, lambda index: warm_up(model, only=index))

    def _publish(self, model: BoundModel) -> None:
        """Make the model's files available to the server (here: its repository folder)."""
        repository.write_model(self._model_repository(), model.config, model.sockets, model.token)

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
        if self._state is not HostState.SERVING or generation != self._generation or supervisor is None:
            return
        supervisor.model_lost(name)

    def _on_worker_exit(self, exit: WorkerExit, generation: int) -> None:
        """A worker process died unasked: have the supervisor start it again."""
        supervisor = self._supervisor
        if self._state is not HostState.SERVING or generation != self._generation or supervisor is None:
            return
        supervisor.worker_exited(WorkerExited(exit.model_name, exit.instance_index, exit.how(), exit.guilty))

    def _restart_worker(self, name: str, index: int) -> None:
        model = self._models.get(name)
        if model is not None and not self._winding_down():
            model.restart_worker(index)

    def _reload_model(self, name: str) -> None:
        """Unload, then load ``name``: Triton reports it not ready from the unload on, until it is loaded."""
        api = self._server_api()
        api.unload_model(name)
        api.load_model(name)
        self._models[name].move_to_new_instances()  # an old instance may linger while Triton unloads it

    def _model_connected(self, name: str) -> bool:
        """True while each instance that the model's config asks for is connected (a load with a config
        override may serve fewer instances than there are workers)."""
        model = self._models.get(name)
        if model is None:
            return False
        return model.connected(self._api.instance_count(name) if self._api is not None else None)

    def _server_live(self) -> bool:
        return self._api is not None and self._api.is_live()

    def _start_supervisor(self, restart_server: Callable[[], None] | None) -> None:
        self._supervisor = Supervisor(
            self._recovery,
            restart_server=restart_server,
            reload_model=self._reload_model,
            server_live=self._server_live,
            model_ready=lambda name: self._api is not None and self._api.is_model_ready(name),
            model_connected=self._model_connected,
            give_up=self._on_unrecoverable,
            restart_worker=self._restart_worker,
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
        try:  # a Ctrl+C as early as this log line is the first Ctrl+C too
            LOGGER.info("Serving (press Ctrl+C or use `kill -SIGINT %d` to stop)", os.getpid())
            with self._cv:
                while self.is_alive():
                    self._cv.wait(timeout=period)
        except KeyboardInterrupt:
            with second_ctrl_c(self._stop_at_once) as pressed_again:
                LOGGER.info(
                    "SIGINT received, exiting. Press Ctrl+C again to stop at once, without waiting for in-flight "
                    "requests."
                )
                self.stop()
            if pressed_again():  # the program exits non-zero unless it catches this
                LOGGER.warning("SIGINT received again: stopped at once.")
                raise KeyboardInterrupt from None
        finally:
            self.stop()

    @abc.abstractmethod
    def _stop_at_once(self) -> None:
        """The second Ctrl+C during ``serve()``'s drain (from a signal handler): end the drain now."""

    @abc.abstractmethod
    def run(self) -> None:
        """Start serving the bound models (see the subclass)."""

    @abc.abstractmethod
    def is_alive(self) -> bool:
        """True while the models are served or being brought back (see the subclass)."""

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

    @abc.abstractmethod
    def stop(self) -> bool:
        """Stop serving; True when this call stopped something (see the subclass)."""
