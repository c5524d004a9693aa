"""Shared test helpers: the service started on free ports, and the outputs to expect from it."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import NamedTuple, NoReturn

import numpy as np
import pytest
from tritonrt.ports import free_ports
from tritonrt.server.install import find_server_dir

from {{ cookiecutter.package }} import spec
from {{ cookiecutter.package }}.client import Prediction
from {{ cookiecutter.package }}.model import Model
from {{ cookiecutter.package }}.settings import PREFIX

PACKAGE = "{{ cookiecutter.package }}"
PROJECT_DIR = Path(__file__).resolve().parents[1]
# Guards against hanging, not measurements: the first start may install tritonserver.
STARTUP_TIMEOUT_S = 600
STOP_TIMEOUT_S = 120
ACCESS_TOKEN = "test-token_0123456789abcdef"  # the shared service's; unlocks its restricted endpoints
MODEL_NAMES = [spec.MODEL_NAME{{ ", spec.STREAM_MODEL_NAME" if cookiecutter.streaming == "yes" }}]


@dataclasses.dataclass
class Service:
    """A running ``python -m {{ cookiecutter.package }}`` process and where to reach it."""

    process: subprocess.Popen
    log: Path
    http_port: int
    grpc_port: int
    metrics_port: int

    @property
    def http_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"grpc://127.0.0.1:{self.grpc_port}"

    def output(self) -> str:
        """What the service printed so far."""
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        """SIGTERM, then wait for the exit status (killed if it does not stop)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"The service ignored SIGTERM for {STOP_TIMEOUT_S} s; its output:\n{self.output()}")


def skip_or_fail_under_ci(reason: str) -> NoReturn:
    """Skip the test for a missing tool, saying ``reason``; under CI (``CI`` set) fail instead: a CI machine
    has every tool the tests need, and a skip there would hide a regression."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI={os.environ['CI']}: CI runs every test; install the tool in the CI job)")
    pytest.skip(reason)


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(
    collector: pytest.Collector,
) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
    """A module that skips as it is collected (``pytest.importorskip`` at its top) fails under CI (``CI``
    set), as ``skip_or_fail_under_ci`` does: a collection error, which stops the run before any test."""
    report = yield
    if report.skipped and os.environ.get("CI"):
        longrepr = report.longrepr
        reason = str(longrepr[2] if isinstance(longrepr, tuple) else longrepr).removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = (
            f"skipped under CI={os.environ['CI']}: {reason}\n"
            "CI runs every test: install what the module needs in the CI job, or run outside CI (CI unset)."
        )
    return report


def require_tritonserver() -> None:
    """Skip when there is no tritonserver and tritonrt may not install one."""
    no_download = os.environ.get("TRITONRT_NO_DOWNLOAD", "").strip().lower() in {"1", "true", "yes"}
    if no_download and find_server_dir() is None:
        skip_or_fail_under_ci("no tritonserver found and TRITONRT_NO_DOWNLOAD=1: run tritonrt install-server")


def start_service(log: Path, command: list[str] | None = None, **settings: str) -> Service:
    """Start the service on free ports, ``settings`` (names without the prefix) added; wait until ready.

    ``command``: what to run instead of the service's own command (e.g. a wrapper of the service)."""
    require_tritonserver()
    http_port, grpc_port, metrics_port = free_ports(3)
    env = {
        **os.environ,
        f"{PREFIX}HTTP_PORT": str(http_port),
        f"{PREFIX}GRPC_PORT": str(grpc_port),
        f"{PREFIX}METRICS_PORT": str(metrics_port),
        **{PREFIX + name: value for name, value in settings.items()},
    }
    with log.open("wb") as sink:
        process = subprocess.Popen(
            command or [sys.executable, "-m", PACKAGE], env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    service = Service(process, log, http_port, grpc_port, metrics_port)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    # Started: the service says so (after tritonrt's run() returned) and every model answers as ready.
    while "Serving model" not in service.output() or not all(model_ready(service, n) for n in MODEL_NAMES):
        if process.poll() is not None:
            pytest.fail(f"The service exited with {process.returncode} while starting:\n{service.output()}")
        if time.monotonic() > deadline:
            service.stop()
            pytest.fail(f"The service was not ready after {STARTUP_TIMEOUT_S} s:\n{service.output()}")
        time.sleep(0.2)
    return service


def model_ready(service: Service, model_name: str) -> bool:
    """True when the service answers that ``model_name`` is ready."""
    address = f"{service.http_url}/v2/models/{model_name}/ready"
    try:
        with urllib.request.urlopen(address, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError):
        return False


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """The service, shared by the tests of one module; stopped at the end."""
    running = start_service(tmp_path_factory.mktemp("service") / "service.log", ACCESS_TOKEN=ACCESS_TOKEN)
    try:
        yield running
    finally:
        running.stop()


def expected_outputs(batch_size: int | None = None) -> dict[str, np.ndarray]:
    """What the model answers to ``spec.example_inputs(batch_size)``, computed here without a server."""
{%- if cookiecutter.max_batch_size | int > 0 %}
    outputs = Model().predict(**spec.example_inputs(batch_size or 1))
    return outputs if batch_size else {name: value[0] for name, value in outputs.items()}
{%- else %}
    assert batch_size is None, "batching is off: the model takes one sample"
    return Model().predict(**spec.example_inputs())
{%- endif %}


def outputs_of(prediction: Prediction) -> dict[str, np.ndarray]:
    """A prediction's fields as a dict, output name -> array."""
    return {tensor.name: getattr(prediction, tensor.name) for tensor in spec.OUTPUTS}


class Tolerance(NamedTuple):
    """How far a float may be from the expected value: ``|actual - expected| <= atol + rtol * |expected|``."""

    rtol: float
    atol: float


# Per float dtype: room for a batched, reordered or GPU computation of the same model (Triton batches the
# requests; sums then run in another order). Integers, booleans and bytes must match exactly. Tighten or
# loosen them for your model here.
TOLERANCES = {
    np.dtype(np.float16): Tolerance(rtol=1e-2, atol=1e-3),
    np.dtype(np.float32): Tolerance(rtol=1e-4, atol=1e-6),
    np.dtype(np.float64): Tolerance(rtol=1e-7, atol=1e-12),
}


def assert_outputs_close(actual: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """Same output names, shapes and dtypes; values exact for integers, booleans and bytes, and within
    ``TOLERANCES`` for floats (bytes outputs may come back as object arrays)."""
    assert sorted(actual) == sorted(expected)
    for name, value in expected.items():
        assert actual[name].shape == value.shape, name
        if value.dtype.kind != "S":
            assert actual[name].dtype == value.dtype, name
        tolerance = TOLERANCES.get(value.dtype)
        if tolerance is None:
            np.testing.assert_array_equal(actual[name], value, err_msg=name)
        else:
            np.testing.assert_allclose(
                actual[name], value, rtol=tolerance.rtol, atol=tolerance.atol, err_msg=name
            )
