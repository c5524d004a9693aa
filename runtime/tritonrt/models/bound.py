"""A model bound to Triton: its resolved config, its inference callables and their workers."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Sequence

from tritonrt.model_config.triton_model_config import TritonModelConfig
from tritonrt.proxy.worker import CallableWorker


class BoundModel:
    """The user-side half of one model: one :class:`CallableWorker` per inference callable.

    The proxy model instances find the workers through ``backend_parameters`` written into config.pbtxt.
    """

    def __init__(self, config: TritonModelConfig, callables: Sequence[Callable], strict: bool, key: str):
        self.config = config
        self.callables = list(callables)
        self.strict = strict
        self.key = key
        self._workers: list[CallableWorker] = []

    @property
    def name(self) -> str:
        return self.config.model_name

    def attach(self, socket_dir: pathlib.Path, owner_pid: int, shm_prefix: str) -> None:
        """Record where the proxy finds the workers (call before writing config.pbtxt)."""
        self.config.backend_parameters.update(
            tritonrt_shm_prefix=shm_prefix,
            tritonrt_socket_dir=str(socket_dir),
            tritonrt_model_key=self.key,
            tritonrt_instances=str(len(self.callables)),
            tritonrt_owner_pid=str(owner_pid),
        )

    def start(self, socket_dir: pathlib.Path, shm_prefix: str, on_unrecoverable: Callable[[str], None]) -> None:
        """Bind the workers' sockets and start their threads."""
        for index, infer_callable in enumerate(self.callables):
            # Streamed replies go inline: the stub may still read one while the next is written.
            region_prefix = None if self.config.decoupled else f"{shm_prefix}{self.key}_{index}_resp_"
            worker = CallableWorker(
                infer_callable,
                socket_dir / f"{self.key}.{index}.sock",
                self.config,
                strict=self.strict,
                region_prefix=region_prefix,
                on_unrecoverable=on_unrecoverable,
            )
            worker.start()
            self._workers.append(worker)

    def stop(self) -> None:
        """Stop and join the workers."""
        for worker in self._workers:
            worker.stop()
        for worker in self._workers:
            worker.join(timeout=5)
        self._workers = []

    def is_alive(self) -> bool:
        """True while every worker thread runs."""
        return bool(self._workers) and all(worker.is_alive() for worker in self._workers)
