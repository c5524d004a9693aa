{%- set pytorch = cookiecutter.framework == "pytorch" -%}
"""Unit tests of where the model's instances run: the GPUs found without starting CUDA, the instance count,
and the worker options the service binds with."""

from __future__ import annotations

from pathlib import Path

from tritonrt.triton import WorkerMode

from {{ cookiecutter.package }}.service import instance_count, visible_gpus, worker_options
from {{ cookiecutter.package }}.settings import Settings


def test_gpus_come_from_cuda_visible_devices_else_from_the_device_files(tmp_path: Path) -> None:
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 3"}, str(tmp_path)) == [2, 3]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}, str(tmp_path)) == []  # none visible
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "GPU-8f2c"}, str(tmp_path)) == []  # UUIDs: not placed
    for name in ("nvidia1", "nvidia0", "nvidiactl", "nvidia-uvm"):
        (tmp_path / name).touch()
    assert visible_gpus({}, str(tmp_path)) == [0, 1]
    assert visible_gpus({}, str(tmp_path / "missing")) == []


def test_instances_zero_means_one_per_gpu_and_at_least_one() -> None:
    assert instance_count(Settings(instances=0), [0, 1, 2]) == 3
    assert instance_count(Settings(instances=0), []) == 1
    assert instance_count(Settings(instances=2), [0, 1, 2]) == 2


def test_the_worker_options_follow_the_settings() -> None:
    options = worker_options(Settings(workers="process", execution_timeout_s=60), [0, 1])
    assert options.mode is WorkerMode.PROCESS
    assert (tuple(options.devices), options.execution_timeout_s) == ((0, 1), 60)
    assert (options.setup is not None) is {{ "True" if pytorch else "False" }}  # {{ "each worker loads its own model" if pytorch else "the model is loaded before the fork" }}
    threads = worker_options(Settings(workers="thread", execution_timeout_s=0), [])
    assert (threads.mode, threads.setup, threads.execution_timeout_s) == (WorkerMode.THREAD, None, None)
