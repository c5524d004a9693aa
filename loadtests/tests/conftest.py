"""Fixtures for the load-test library's tests.

- ``triton``: one real tritonserver (started by tritonrt on free ports) serving the models the tests
  load: ``identity`` (dynamic batching, a float and a bytes input), ``identity_stream`` (decoupled, three
  responses per request) and ``broken`` (declares outputs of shape [4], returns [5]). Its names match the
  generated project's locustfile rendered with ``model_name=identity`` and streaming on.
- ``loadtest``: runs ``python -m loadtests`` in a subprocess (Locust's gevent patching stays out of the
  test process) and returns a ``LoadRun`` to inspect its exit status, output and reports.

Example::

    def test_http(triton, loadtest, tmp_path):
        run = loadtest(tmp_path, LOCUSTFILE, "--url", triton.http_url)
        assert run.returncode == 0
"""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from tritonrt.ports import free_ports

# Under CI a skip fails (.ci/strict_skips.py): the CI machine has every tool these tests need.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / ".ci"))
from strict_skips import pytest_make_collect_report, pytest_runtest_makereport  # noqa: E402, F401 (hooks: pytest finds them by name)

REPO_ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 180


@dataclasses.dataclass(frozen=True)
class Server:
    http_port: int
    grpc_port: int
    access_token: str

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.grpc_port}"

    def success_count(self, model: str) -> int:
        """Requests the server finished successfully for ``model`` (Triton's statistics extension)."""
        request = urllib.request.Request(
            f"{self.http_url}/v2/models/{model}/stats", headers={"triton-access-token": self.access_token}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            stats = json.load(response)
        return int(stats["model_stats"][0]["inference_stats"]["success"]["count"])


def _bind_models(triton) -> None:
    from tritonrt.decorators import batch
    from tritonrt.model_config import ModelConfig, Tensor

    @batch
    def identity(x: np.ndarray, tag: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x, "tag_out": tag}

    def stream(requests):
        for token in range(3):
            yield [{"token": np.array([token], dtype=np.int32)} for _ in requests]

    @batch
    def broken(x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": np.zeros((x.shape[0], x.shape[1] + 1), dtype=np.float32)}

    triton.bind(
        "identity",
        identity,
        inputs=[
            Tensor(name="x", dtype=np.float32, shape=(-1,)),
            Tensor(name="tag", dtype=np.bytes_, shape=(1,)),
        ],
        outputs=[
            Tensor(name="y", dtype=np.float32, shape=(-1,)),
            Tensor(name="tag_out", dtype=np.bytes_, shape=(1,)),
        ],
        config=ModelConfig(max_batch_size=16),
    )
    triton.bind(
        "identity_stream",
        stream,
        inputs=[Tensor(name="n", dtype=np.int32, shape=(1,))],
        outputs=[Tensor(name="token", dtype=np.int32, shape=(1,))],
        config=ModelConfig(batching=False, decoupled=True),
    )
    triton.bind(
        "broken",
        broken,
        inputs=[Tensor(name="x", dtype=np.float32, shape=(4,))],
        outputs=[Tensor(name="y", dtype=np.float32, shape=(4,))],
        config=ModelConfig(max_batch_size=8),
    )


@pytest.fixture(scope="session")
def triton() -> Iterator[Server]:
    """A running tritonserver with the test models; skips when no tritonserver can be found or installed."""
    from tritonrt.exceptions import PyTritonRuntimeError
    from tritonrt.server.install import find_or_install_server
    from tritonrt.triton import Triton, TritonConfig, TritonSecurityConfig

    try:
        find_or_install_server()
    except PyTritonRuntimeError as error:
        pytest.skip(f"no tritonserver available: {error}")
    http_port, grpc_port, metrics_port = free_ports(3)
    config = TritonConfig(http_port=http_port, grpc_port=grpc_port, metrics_port=metrics_port, exit_timeout_secs=1)
    security = TritonSecurityConfig()
    with Triton(config=config, security_config=security) as server:
        _bind_models(server)
        server.run()
        yield Server(http_port, grpc_port, str(security.access_token))


@dataclasses.dataclass(frozen=True)
class LoadRun:
    """A finished ``python -m loadtests`` run and the folder it wrote its reports to."""

    returncode: int
    stdout: str
    stderr: str
    reports: Path

    def stats(self) -> dict[tuple[str, str], dict[str, str]]:
        """Rows of loadtest_stats.csv keyed by (Type, Name); the total is ("", "Aggregated")."""
        with open(self.reports / "loadtest_stats.csv", newline="") as handle:
            return {(row["Type"], row["Name"]): row for row in csv.DictReader(handle)}

    def failures(self) -> list[dict[str, str]]:
        with open(self.reports / "loadtest_failures.csv", newline="") as handle:
            return list(csv.DictReader(handle))


@pytest.fixture
def loadtest() -> Callable[..., LoadRun]:
    """``loadtest(workdir, locustfile_source, *args, env=None, cwd=None)``: write the locustfile, run the CLI
    (from ``cwd``, a project's root, else the repository's)."""

    def run(
        workdir: Path, locustfile: str, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> LoadRun:
        path = workdir / "locustfile.py"
        path.write_text(locustfile, encoding="utf-8")
        reports = workdir / "reports"
        command = [
            sys.executable,
            "-m",
            "loadtests",
            "--locustfile",
            str(path),
            "--reports",
            str(reports),
            *args,
        ]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("LOADTEST_")} | (env or {})
        if cwd is not None:  # (the library as a project vendors it: importable from there)
            environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), environ.get("PYTHONPATH")]))
        result = subprocess.run(
            command, cwd=cwd or REPO_ROOT, env=environ, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
        )
        return LoadRun(result.returncode, result.stdout, result.stderr, reports)

    return run
