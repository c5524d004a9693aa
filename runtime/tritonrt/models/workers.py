"""Where a model's instances run: worker threads in this process (the default) or worker processes.

``bind(..., workers=WorkerOptions(...))`` chooses per model; ``TRITONRT_WORKERS=process`` (or ``thread``)
chooses for every model that does not say. ``TRITONRT_EXECUTION_TIMEOUT_S`` sets the execution timeout of
every model that does not set its own (unset or 0: none, as in PyTriton).

Example::

    def setup(worker: WorkerInfo) -> None:   # runs inside each worker, after CUDA_VISIBLE_DEVICES is set
        global MODEL
        MODEL = torch.load("model.pt").to("cuda")

    triton.bind("classify", [infer] * 2, inputs=..., outputs=...,
                workers=WorkerOptions(mode=WorkerMode.PROCESS, setup=setup, devices=(0, 1), execution_timeout_s=60))
"""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence

from tritonrt.exceptions import PyTritonValidationError

__all__ = [
    "EXECUTION_TIMEOUT_VARIABLE",
    "WORKERS_VARIABLE",
    "WorkerInfo",
    "WorkerMode",
    "WorkerOptions",
    "check_fork_allowed",
    "device_for",
]

WORKERS_VARIABLE = "TRITONRT_WORKERS"
EXECUTION_TIMEOUT_VARIABLE = "TRITONRT_EXECUTION_TIMEOUT_S"


class WorkerMode(enum.Enum):
    """Where an instance's callable runs: a thread of this process, or a child process of its own."""

    THREAD = "thread"
    PROCESS = "process"


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerInfo:
    """What a ``setup`` hook is told about the worker it runs in. ``device``: the GPU id it was given, None when
    the model has no ``devices``; ``torch_device``: how to name it in this worker (``"cuda:0"`` in a worker
    process, which sees that GPU alone; ``"cuda:<device>"`` in a worker thread; ``"cpu"`` without a device)."""

    model_name: str
    instance_index: int
    device: int | None
    torch_device: str

    @classmethod
    def for_instance(cls, model_name: str, instance_index: int, devices: Sequence[int], mode: WorkerMode) -> WorkerInfo:
        """Instance ``instance_index``'s worker: its device by :func:`device_for`."""
        device = device_for(instance_index, devices)
        if device is None:
            torch_device = "cpu"
        else:
            torch_device = "cuda:0" if mode is WorkerMode.PROCESS else f"cuda:{device}"
        return cls(model_name, instance_index, device, torch_device)


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerOptions:
    """A model's workers.

    ``mode``: ``WorkerMode.PROCESS`` runs each instance in a worker process forked from this one after bind
    (weights loaded before are shared copy-on-write); None reads ``TRITONRT_WORKERS`` (default: threads).
    ``setup(info)``: called once in each worker before it serves (in process mode inside the child, after
    ``CUDA_VISIBLE_DEVICES`` was set to its device): load CUDA models here, never before the fork.
    ``devices``: GPU ids; instance ``i`` gets ``devices[i % len(devices)]``.
    ``execution_timeout_s``: a batch that runs longer fails with a timeout error; None reads
    ``TRITONRT_EXECUTION_TIMEOUT_S`` (unset or 0: no timeout).
    """

    mode: WorkerMode | None = None
    setup: Callable[[WorkerInfo], None] | None = None
    devices: Sequence[int] = ()
    execution_timeout_s: float | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and not isinstance(self.mode, WorkerMode):
            raise PyTritonValidationError(
                f"WorkerOptions(mode={self.mode!r}): use WorkerMode.THREAD or WorkerMode.PROCESS."
            )
        if self.setup is not None and not callable(self.setup):
            raise PyTritonValidationError("WorkerOptions(setup=...) must be a callable taking a WorkerInfo.")
        for device in self.devices:
            if not isinstance(device, int) or isinstance(device, bool) or device < 0:
                raise PyTritonValidationError(
                    f"WorkerOptions(devices={list(self.devices)!r}): each device is a GPU id, a whole number >= 0."
                )
        timeout = self.execution_timeout_s
        if timeout is not None and not _valid_timeout(timeout):
            raise PyTritonValidationError(
                f"WorkerOptions(execution_timeout_s={timeout!r}): use a number of seconds > 0, or None for "
                f"{EXECUTION_TIMEOUT_VARIABLE} (unset: no timeout)."
            )

    def resolved_mode(self, environ: Mapping[str, str] | None = None) -> WorkerMode:
        """``mode``, else ``TRITONRT_WORKERS``, else threads."""
        if self.mode is not None:
            return self.mode
        raw = (os.environ if environ is None else environ).get(WORKERS_VARIABLE, "").strip().lower()
        if not raw:
            return WorkerMode.THREAD
        try:
            return WorkerMode(raw)
        except ValueError:
            raise PyTritonValidationError(
                f"{WORKERS_VARIABLE}={raw!r}: use 'thread' (the default) or 'process'."
            ) from None

    def resolved_timeout_s(self, environ: Mapping[str, str] | None = None) -> float | None:
        """``execution_timeout_s``, else ``TRITONRT_EXECUTION_TIMEOUT_S``; None: no timeout."""
        if self.execution_timeout_s is not None:
            return float(self.execution_timeout_s)
        raw = (os.environ if environ is None else environ).get(EXECUTION_TIMEOUT_VARIABLE, "").strip()
        if not raw:
            return None
        try:
            value = float(raw)
        except ValueError:
            value = math.nan
        if value == 0:
            return None
        if not _valid_timeout(value):
            raise PyTritonValidationError(
                f"{EXECUTION_TIMEOUT_VARIABLE}={raw!r}: use a number of seconds > 0 (0 or unset: no timeout)."
            )
        return value


def _valid_timeout(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def device_for(instance_index: int, devices: Sequence[int]) -> int | None:
    """The GPU of instance ``instance_index``: the devices taken in turn; None without devices."""
    return devices[instance_index % len(devices)] if devices else None


def check_fork_allowed(model_name: str) -> None:
    """Refuse to fork worker processes once CUDA was initialised in this process (a forked child cannot use
    it: its first CUDA call fails or hangs). Checked through torch when torch is imported."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    is_initialized = getattr(cuda, "is_initialized", None)
    if callable(is_initialized) and is_initialized():
        raise PyTritonValidationError(
            f"Model {model_name!r}: CUDA was initialised in this process before its worker processes were "
            "forked, and a forked process cannot use CUDA. Load the model inside each worker instead: move the "
            "code that touches the GPU into a setup hook, bind(..., workers=WorkerOptions(mode=WorkerMode.PROCESS, "
            "setup=load)), and keep CUDA out of this process until then; or serve it with worker threads "
            f"({WORKERS_VARIABLE}=thread)."
        )
