"""A model bound to Triton: its resolved config, its inference callables and their workers."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Callable, Sequence

from tritonrt.exceptions import PyTritonValidationError
from tritonrt.model_config import ModelConfig, Tensor
from tritonrt.model_config.common import ModelWarmup
from tritonrt.model_config.resolve import build_model_config, validate_model_name
from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.models import trace
from tritonrt.proxy import native_files
from tritonrt.proxy.connection import InstanceIdentity, WorkerListener, WorkerSettings
from tritonrt.proxy.worker import CallableWorker

__all__ = ["BoundModel"]


class BoundModel:
    """The user-side half of one model: one :class:`CallableWorker` per inference callable.

    The model's instances in tritonserver (tritonrt's native backend) find the workers through the model's
    connection file (:mod:`tritonrt.proxy.native_files`): ``sockets[i]`` serves instance ``i``; they present
    ``token``.
    """

    def __init__(
        self,
        config: TritonModelConfig,
        callables: Sequence[Callable],
        strict: bool,
        key: str,
        warmup: Sequence[ModelWarmup] | None = None,
        trace_config: Sequence[str] | None = None,
    ):
        self.config = config
        self.callables = list(callables)
        self.strict = strict
        self.key = key
        self.warmup = list(warmup or [])  # requests to call the callables with before the first load
        self.trace_config = list(trace_config or [])  # the model's own trace settings (bind(trace_config=))
        self._workers: list[CallableWorker] = []
        self.sockets: list[pathlib.Path] = []
        self.token = ""

    @classmethod
    def from_bind(
        cls,
        model_name: str,
        infer_func: Callable | Sequence[Callable],
        inputs: Sequence[Tensor],
        outputs: Sequence[Tensor],
        model_version: int,
        config: ModelConfig | None,
        strict: bool,
        trace_config: list[str] | None,
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
        config = config or ModelConfig()
        model_config = build_model_config(
            model_name, model_version, inputs, outputs, config, instance_count=len(callables)
        )
        return cls(model_config, callables, strict, f"m{uuid.uuid4().hex[:8]}", config.model_warmup, traces)

    @property
    def name(self) -> str:
        return self.config.model_name

    def attach(self, socket_dir: pathlib.Path) -> None:
        """Choose where the workers listen and the token the instances present (call before writing the model's
        files and before :meth:`start`; each server start attaches again)."""
        self.sockets = [socket_dir / f"{self.key}.{index}.sock" for index in range(len(self.callables))]
        self.token = native_files.new_token()

    def start(self, on_unrecoverable: Callable[[str], None], on_peer_lost: Callable[[], None] | None = None) -> None:
        """Listen on the workers' sockets (where :meth:`attach` said) and start their threads; ``on_peer_lost()``
        is called when an instance of the model goes away unasked (see :mod:`tritonrt.proxy.peer`)."""
        if not self.sockets:
            raise RuntimeError("BoundModel.start() before attach(): attach the model first")
        settings = WorkerSettings.from_env()
        max_batch_size = self.config.max_batch_size if self.config.batching else 0
        for index, (infer_callable, path) in enumerate(zip(self.callables, self.sockets, strict=True)):
            identity = InstanceIdentity(self.name, index, self.token, self.config.decoupled, max_batch_size)
            worker = CallableWorker(
                infer_callable,
                WorkerListener(path, identity, settings),
                self.config,
                strict=self.strict,
                on_unrecoverable=on_unrecoverable,
                on_peer_lost=on_peer_lost,
            )
            worker.start()
            self._workers.append(worker)

    def move_to_new_instances(self) -> None:
        """After the model was unloaded and loaded again: each worker leaves its old instance for the new one."""
        for worker in self._workers:
            worker.move_to_new_instance()

    def stop(self) -> None:
        """Stop and join the workers."""
        for worker in self._workers:
            worker.stop()
        for worker in self._workers:
            worker.join(timeout=5)
        self._workers = []

    def connected(self) -> bool:
        """True while every instance of the model is connected to its worker."""
        return bool(self._workers) and all(worker.connected for worker in self._workers)

    def is_alive(self) -> bool:
        """True while every worker thread runs."""
        return bool(self._workers) and all(worker.is_alive() for worker in self._workers)
