"""A model bound to Triton: its resolved config, its inference callables and their workers (threads of this
process or worker processes, see :mod:`tritonrt.models.workers`)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.model_config.common import ModelWarmup
from tritonrt.model_config.resolve import build_model_config, validate_model_name
from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.models import trace
from tritonrt.models.instance import CallSlot, InstanceWorker, ThreadInstance, TrackedListener
from tritonrt.models.watchdog import Watchdog
from tritonrt.models.worker_process import ChildSpec, ProcessHooks, ProcessInstance, WorkerExit
from tritonrt.models.workers import WorkerInfo, WorkerMode, WorkerOptions, check_fork_allowed
from tritonrt.proxy import native_files
from tritonrt.proxy.connection import InstanceIdentity, WorkerSettings
from tritonrt.proxy.worker import CallableWorker

__all__ = ["BoundModel", "ModelHooks"]


@dataclasses.dataclass(frozen=True, slots=True)
class ModelHooks:
    """The owner's callbacks for a model's workers: ``on_unrecoverable(message)`` (stop the service),
    ``on_peer_lost()`` (an instance went away unasked), ``on_worker_exit(exit)`` (a worker process died)."""

    on_unrecoverable: Callable[[str], None]
    on_peer_lost: Callable[[], None] | None = None
    on_worker_exit: Callable[[WorkerExit], None] | None = None


class BoundModel:
    """The user-side half of one model: one :class:`CallableWorker` per inference callable.

    The model's instances in tritonserver (tritonrt's native backend) find the workers through the model's
    connection file (:mod:`tritonrt.proxy.native_files`): ``sockets[i]`` serves instance ``i``; they present
    ``token``.
    """

    def __init__(
        self,
        config: TritonModelConfig,
        callables: Sequence[Callable[..., Any]],
        strict: bool,
        key: str,
        warmup: Sequence[ModelWarmup] | None = None,
        trace_config: Sequence[str] | None = None,
        workers: WorkerOptions | None = None,
    ):
        self.config = config
        self.callables = list(callables)
        self.strict = strict
        self.key = key
        self.warmup = list(warmup or [])  # requests to call the callables with before the first load
        self.trace_config = list(trace_config or [])  # the model's own trace settings (bind(trace_config=))
        self.workers = workers or WorkerOptions()
        self.mode = self.workers.resolved_mode()
        self.timeout_s = self.workers.resolved_timeout_s()
        self._workers: list[InstanceWorker] = []
        self._watchdog: Watchdog | None = None
        self._set_up = False
        self.sockets: list[pathlib.Path] = []
        self.token = ""

    @classmethod
    def from_bind(
        cls,
        model_name: str,
        infer_func: Callable[..., Any] | Sequence[Callable[..., Any]],
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        model_version: int,
        config: ModelConfig | None,
        strict: bool,
        trace_config: list[str] | None,
        workers: WorkerOptions | None = None,
    ) -> BoundModel:
        """The model that ``Triton.bind`` describes, validated (errors say what to fix); not yet attached."""
        validate_model_name(model_name)
        traces = trace.validate_trace_config(model_name, trace_config)
        if traces:
            trace.model_trace_settings(traces, model_name)  # bad entries raise now, not at load
        candidates: list[object] = list(infer_func) if isinstance(infer_func, (list, tuple)) else [infer_func]
        callables = [candidate for candidate in candidates if callable(candidate)]
        if not callables or len(callables) != len(candidates):
            raise PyTritonValidationError(
                f"Model {model_name!r}: infer_func must be a callable or a non-empty list of callables "
                "(one per model instance)."
            )
        if (workers or WorkerOptions()).resolved_mode() is WorkerMode.PROCESS:
            check_fork_allowed(model_name)  # at once, as well as at each start
        config = config or ModelConfig()
        model_config = build_model_config(
            model_name, model_version, inputs, outputs, config, instance_count=len(callables)
        )
        key = f"m{uuid.uuid4().hex[:8]}"
        return cls(model_config, callables, strict, key, config.model_warmup, traces, workers)

    @property
    def name(self) -> str:
        return self.config.model_name

    def attach(self, socket_dir: pathlib.Path) -> None:
        """Choose where the workers listen and the token the instances present (call before writing the model's
        files and before :meth:`start`; each server start attaches again)."""
        self.sockets = [socket_dir / f"{self.key}.{index}.sock" for index in range(len(self.callables))]
        self.token = native_files.new_token()

    def info(self, index: int) -> WorkerInfo:
        """What instance ``index``'s setup hook is told."""
        return WorkerInfo.for_instance(self.name, index, self.workers.devices, self.mode)

    def set_up_here(self) -> None:
        """Thread mode: run the setup hook once per instance in this process (before the warm-up and the first
        start); worker processes run it themselves."""
        if self.mode is WorkerMode.THREAD and self.workers.setup is not None and not self._set_up:
            for index in range(len(self.callables)):
                self.workers.setup(self.info(index))
            self._set_up = True

    def start(self, hooks: ModelHooks, warm_up: Callable[[int], None] | None = None) -> None:
        """Listen on the workers' sockets (where :meth:`attach` said) and start the workers; ``warm_up(index)``
        is run by each worker process after its setup (thread mode warms up before). Raises when a worker
        process could not start (its setup failed), or when CUDA was initialised before the fork."""
        if not self.sockets:
            raise RuntimeError("BoundModel.start() before attach(): attach the model first")
        if self.mode is WorkerMode.PROCESS:
            check_fork_allowed(self.name)
        settings = WorkerSettings.from_env()
        max_batch_size = self.config.max_batch_size if self.config.batching else 0
        try:
            for index, (infer_callable, path) in enumerate(zip(self.callables, self.sockets, strict=True)):
                identity = InstanceIdentity(self.name, index, self.token, self.config.decoupled, max_batch_size)
                # Worker processes are always tracked (the batch a dead one held is failed); threads only for a timeout.
                track = self.mode is WorkerMode.PROCESS or self.timeout_s is not None
                expirable = self.mode is not WorkerMode.PROCESS  # (a worker process is killed instead)
                listener = TrackedListener(path, identity, settings, CallSlot(), track=track, expirable=expirable)
                worker = self._instance(index, infer_callable, listener, hooks, warm_up)
                self._workers.append(worker)
                worker.start()
        except BaseException:
            self.stop()
            raise
        if self.timeout_s is not None:
            self._watchdog = Watchdog(self.name, self._workers, self.timeout_s)

    def _instance(
        self,
        index: int,
        infer_callable: Callable[..., object],
        listener: TrackedListener,
        hooks: ModelHooks,
        warm_up: Callable[[int], None] | None,
    ) -> InstanceWorker:
        if self.mode is WorkerMode.PROCESS:
            spec = ChildSpec(
                infer_callable,
                self.config,
                self.strict,
                self.info(index),
                self.workers.setup,
                None if warm_up is None or not self.warmup else lambda: warm_up(index),
            )
            on_exit = hooks.on_worker_exit or (lambda exit: hooks.on_unrecoverable(exit.describe()))
            return ProcessInstance(listener, spec, ProcessHooks(hooks.on_unrecoverable, hooks.on_peer_lost, on_exit))

        def make_worker(tracked: TrackedListener) -> CallableWorker:
            return CallableWorker(
                infer_callable,
                tracked,
                self.config,
                strict=self.strict,
                on_unrecoverable=hooks.on_unrecoverable,
                on_peer_lost=hooks.on_peer_lost,
            )

        return ThreadInstance(listener, index, make_worker, hooks.on_unrecoverable, self.name)

    def worker_pids(self) -> list[int]:
        """The process id of each instance's worker (this process's for worker threads)."""
        return [worker.pid if isinstance(worker, ProcessInstance) else os.getpid() for worker in self._workers]

    def restart_worker(self, index: int) -> None:
        """Start instance ``index``'s worker process again after it died (the supervisor's call)."""
        worker = self._workers[index] if index < len(self._workers) else None
        if isinstance(worker, ProcessInstance):
            worker.start()

    def move_to_new_instances(self) -> None:
        """After the model was unloaded and loaded again: each worker leaves its old instance for the new one."""
        for worker in self._workers:
            worker.move_to_new_instance()

    def stop(self) -> None:
        """Stop and join the workers (a worker process that does not end within 5 s is killed)."""
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None
        for worker in self._workers:
            worker.stop()
        for worker in self._workers:
            worker.join(timeout=5)
        self._workers = []

    def connected(self, instances: int | None = None) -> bool:
        """True while every instance of the model (the first ``instances`` of them: a config changed by a load
        with an override may ask for fewer) is connected to its worker."""
        workers = self._workers[:instances] if instances else self._workers
        return bool(workers) and all(worker.connected for worker in workers)

    def is_alive(self) -> bool:
        """True while every worker runs (or a worker process that died is being started again)."""
        return bool(self._workers) and all(worker.is_alive() for worker in self._workers)
