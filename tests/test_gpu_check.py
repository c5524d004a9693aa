"""The GPU check's service (bench/gpu_service.py) counts the samples where the pytorch service computes them: in its
worker processes, each of which loads its own model. No GPU here: its dry run (--allow-cpu, torch absent: the
placeholder on numpy) goes the same way, from the workers' models through Triton's /metrics to the verdict."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT, bake

SERVICE = REPO_ROOT / "bench" / "gpu_service.py"
LIBRARY = REPO_ROOT / "runtime" / "native" / "target" / "release" / "libtriton_tritonrt.so"


@pytest.fixture(scope="module")
def pytorch_project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return bake(tmp_path_factory.mktemp("gpu"), framework="pytorch")


def test_the_dry_run_counts_the_samples_in_the_worker_processes(pytorch_project: Path) -> None:
    # As `make gpu-check` runs it: the project's own runtime, with the backend library built here.
    path = os.pathsep.join(str(pytorch_project / part) for part in ("src", "runtime"))
    env = {**os.environ, "PYTHONPATH": path, "TRITONRT_NATIVE_LIBRARY": str(LIBRARY), "CUDA_VISIBLE_DEVICES": ""}
    command = [sys.executable, str(SERVICE), "--project", str(pytorch_project), "--seconds", "0.2", "--allow-cpu"]
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as check:
        output, _ = check.communicate(timeout=600)
    assert check.returncode == 0, output
    assert "GPU check: my-service (worker processes" in output, output
    assert "RESULT: DRY RUN on CPU" in output, output
    # numpy's placeholder without torch, torch's "cpu" with it
    counted = re.search(r"samples computed per device: \{'(?:numpy|cpu)': ([0-9.]+)\} \(in \d+ worker process\(es\), "
                        r"pid ([0-9, ]+)\)", output)  # fmt: skip
    assert counted is not None, output
    assert float(counted.group(1)) > 0
    workers = {int(pid) for pid in counted.group(2).split(", ")}
    assert check.pid not in workers  # computed in the workers, not in the process that bound the model
