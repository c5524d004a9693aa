"""The level at which each line tritonserver prints reaches Python logging, and its GPU noise on a CPU-only host.

tritonserver's glog lines start with their severity (``E1126 14:34:27 ... server.cc:241] "..."``): errors and
warnings keep theirs, the rest is DEBUG (INFO when verbose). On a host without a GPU, tritonserver reports the
missing GPU as errors and warnings at every start (``CudaDriverHelper has not been initialized``, ``Failed to
initialize NVML``, no pinned memory, no DCGM). There they are expected, so they go to DEBUG, and one INFO line of
ours says what they mean: no GPU found, serving on CPU. Where the host has a GPU device they keep their level (a
driver problem to fix), and a WARNING of ours says so.

A crash prints no severity letter: ``Signal (11) received.`` (a fatal signal: a stop's SIGINT prints ``Signal (2)
received.``, which stays DEBUG), then its stack (`` 0# 0x... in .../tritonserver``), or
glibc's ``double free or corruption (out)`` before the abort. Those lines are ERRORs, so that a crash shows in the
log at the default level along with the supervisor's restart.

A load with a config override that names no backend (``load_model("m", config='{"max_batch_size": 16}')``: the
override replaces the whole configuration) makes tritonserver log ``Could not determine backend for model 'm'``;
an ERROR of ours comes with it, saying what such an override lacks and how a tritonrt model's config changes.

Example::

    output = ServerOutput(verbose=False)
    output.level('E1126 14:34:27.202789 22066 server.cc:241] "CudaDriverHelper has not been initialized."')
    # logging.DEBUG on a CPU-only host; logs "No GPU found ..." once, at INFO
"""

from __future__ import annotations

import glob
import logging
import os
import re

__all__ = ["GPU_ABSENT_MARKERS", "ServerOutput", "gpu_device_present"]

LOGGER = logging.getLogger("tritonrt.server")
_LEVELS = {"E": logging.ERROR, "W": logging.WARNING}
# What tritonserver prints when it finds no usable GPU.
GPU_ABSENT_MARKERS = (
    "CudaDriverHelper has not been initialized",
    "Failed to initialize NVML",
    "Unable to allocate pinned system memory",
    "DCGM unable to start",
)
_HIDDEN_DEVICES = ("", "-1", "none", "NoDevFiles")
# What tritonserver's handler of fatal signals (SIGILL, SIGABRT, SIGBUS, SIGFPE, SIGSEGV; not the SIGINT or SIGTERM
# of a stop, which print the same words) and glibc print when the process crashes; then the stack lines.
_CRASH = re.compile(
    r"^(Signal \((4|6|7|8|11)\) received\.|double free|free\(\): |malloc\(\): |corrupted |terminate called)"
)
_STACK_FRAME = re.compile(r"^\s*\d+# ")
_NO_BACKEND = re.compile(r"Could not determine backend for model '([^']*)'")


def gpu_device_present() -> bool:
    """Whether this host shows tritonserver an NVIDIA GPU: a device file, and not hidden by CUDA_VISIBLE_DEVICES."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", "0").strip() in _HIDDEN_DEVICES:
        return False
    return bool(glob.glob("/dev/nvidia[0-9]*"))


class ServerOutput:
    """Gives each line of one tritonserver run its logging level; explains a missing GPU once per run."""

    def __init__(self, *, verbose: bool, gpu_present: bool | None = None) -> None:
        self._plain = logging.INFO if verbose else logging.DEBUG
        self._gpu_present = gpu_device_present() if gpu_present is None else gpu_present
        self._explained = False
        self._crashed = False

    @property
    def crashed(self) -> bool:
        """Whether tritonserver printed that it crashed (a fatal signal, or glibc's heap corruption abort)."""
        return self._crashed

    def level(self, line: str) -> int:
        """The level to log ``line`` at."""
        if _CRASH.match(line):
            self._crashed = True
            return logging.ERROR
        if self._crashed and _STACK_FRAME.match(line):
            return logging.ERROR
        if no_backend := _NO_BACKEND.search(line):
            _explain_override(no_backend.group(1))
        level = _LEVELS.get(line[:1], self._plain)
        if level == self._plain or not any(marker in line for marker in GPU_ABSENT_MARKERS):
            return level
        if not self._explained:
            self._explained = True
            self._explain()
        return level if self._gpu_present else logging.DEBUG

    def _explain(self) -> None:
        if self._gpu_present:
            LOGGER.warning(
                "This host has an NVIDIA GPU device, but tritonserver could not use it (see its CUDA/NVML errors "
                "here): check the driver with nvidia-smi, and that the container runs with the GPU (--gpus all)."
            )
        else:
            LOGGER.info(
                "No GPU found: serving on CPU. tritonserver's CUDA, NVML, DCGM and pinned-memory messages about "
                "the missing GPU are expected here and logged at DEBUG."
            )


def _explain_override(model: str) -> None:
    LOGGER.error(
        "Model %r was loaded with a config override that names no backend, and Triton could not infer one from "
        'the model\'s files: give the backend in the override ("backend": "tritonrt" for a bound model). '
        "tritonrt writes a model.py into a bound model's version folder from which Triton infers it; a folder "
        "written by an older tritonrt has none (restart to rewrite it). The model keeps serving as it was "
        "(runtime README, Model control).",
        model,
    )
