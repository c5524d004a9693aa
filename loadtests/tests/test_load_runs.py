"""End-to-end: ``python -m loadtests`` against a real tritonserver (see conftest.py for the models).

The request-count tests use the generated project's locustfile, rendered as for ``model_name=identity``
with streaming on, so they also check what ``make loadtest`` runs in a new project.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.request

import jinja2
import matplotlib.image
import numpy as np
import pytest
from PIL import Image
from tritonrt.ports import free_ports

from loadtests.tests.conftest import REPO_ROOT

PROJECT_LOCUSTFILE = REPO_ROOT / "{{cookiecutter.project}}" / "loadtests" / "locustfile.py"

DURATION = "2s"

IDENTITY_USERS = """
from loadtests.http_user import KServeHttpUser


class IdentityHttp(KServeHttpUser):
    model_name = "identity"
    batch_size = 2
"""

BROKEN_USERS = """
from loadtests.grpc_users import TritonGrpcUser
from loadtests.http_user import KServeHttpUser


class BrokenHttp(KServeHttpUser):
    model_name = "broken"


class BrokenGrpc(TritonGrpcUser):
    model_name = "broken"
"""

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def project_users() -> str:
    """The generated project's locustfile for model ``identity`` with streaming."""
    environment = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    template = environment.from_string(PROJECT_LOCUSTFILE.read_text(encoding="utf-8"))
    return template.render(cookiecutter={"model_name": "identity", "streaming": "yes"})


def _url(triton, protocol: str) -> str:
    return triton.http_url if protocol == "http" else triton.grpc_url


@pytest.mark.parametrize(
    ("protocol", "flags", "request_type", "name"),
    [
        ("http", [], "POST", "/v2/models/identity/infer"),
        ("http", ["--json"], "POST", "/v2/models/identity/infer"),
        ("grpc", ["--protocol", "grpc"], "gRPC", "identity"),
    ],
    ids=["http-binary", "http-json", "grpc"],
)
def test_every_request_counted_once_and_none_fails(
    triton, loadtest, project_users, tmp_path, protocol, flags, request_type, name
):
    before = triton.success_count("identity")
    run = loadtest(
        tmp_path,
        project_users,
        "--url",
        _url(triton, protocol),
        "--users",
        "3",
        "--duration",
        DURATION,
        *flags,
    )

    assert run.returncode == 0, run.stdout + run.stderr
    row = run.stats()[(request_type, name)]
    assert int(row["Request Count"]) > 0
    assert int(row["Failure Count"]) == 0
    assert int(row["Request Count"]) == triton.success_count("identity") - before
    assert "all gates passed" in run.stdout


def test_stream_user_records_first_response_and_total(triton, loadtest, project_users, tmp_path):
    before = triton.success_count("identity_stream")
    run = loadtest(
        tmp_path, project_users, "--url", triton.grpc_url, "--stream", "--users", "2", "--duration", DURATION
    )

    assert run.returncode == 0, run.stdout + run.stderr
    stats = run.stats()
    total, first = stats[("gRPC stream", "identity_stream")], stats[("gRPC TTFR", "identity_stream")]
    assert int(total["Failure Count"]) == 0
    assert int(total["Request Count"]) == triton.success_count("identity_stream") - before > 0
    assert int(first["Request Count"]) == int(total["Request Count"])
    summary = json.loads((run.reports / "loadtest_summary.json").read_text())
    assert summary["figures"]["requests"] == int(total["Request Count"])  # gates count totals, not first responses


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_wrong_output_shape_is_a_failure(triton, loadtest, tmp_path, protocol):
    run = loadtest(
        tmp_path,
        BROKEN_USERS,
        "--url",
        _url(triton, protocol),
        "--protocol",
        protocol,
        "--duration",
        DURATION,
    )

    assert run.returncode == 1, run.stdout + run.stderr
    total = run.stats()[("", "Aggregated")]
    assert int(total["Request Count"]) > 0
    assert total["Failure Count"] == total["Request Count"]
    [failure] = run.failures()
    assert "output 'y' has shape [1, 5], expected [1, 4]" in failure["Error"]
    assert "failure ratio" in run.stdout and "FAIL" in run.stdout
    assert f"{failure['Occurrences']} x " in run.stdout  # the terminal says what failed, not only the CSV
    assert "output 'y' has shape [1, 5], expected [1, 4]" in run.stdout


def test_gate_that_cannot_be_met_fails_the_run(triton, loadtest, tmp_path):
    run = loadtest(tmp_path, IDENTITY_USERS, "--url", triton.http_url, "--duration", DURATION, "--min-rps", "1e9")

    assert run.returncode == 1
    [throughput] = [line for line in run.stdout.splitlines() if line.startswith("throughput")]
    assert ">= 1e+09 rps" in throughput and throughput.endswith("FAIL")
    assert "GATES MISSED" in run.stdout


def test_a_grpc_url_runs_the_grpc_users_gated_by_the_projects_slo_env(triton, loadtest, project_users, tmp_path):
    """What `make loadtest URL=grpc://...` runs, from a project's root: the gRPC users, without --protocol, and
    the gates of its deploy/k8s/base/slo.env, read by the library itself (no Makefile passes them)."""
    slo_env = tmp_path / "deploy" / "k8s" / "base" / "slo.env"
    slo_env.parent.mkdir(parents=True)
    slo_env.write_text("# objectives\nLOADTEST_P95_MS=60000\nQUEUE_TARGET_MS=20\nLOADTEST_MIN_RPS=1e9\n")
    url = f"grpc://{triton.grpc_url}"
    run = loadtest(tmp_path, project_users, "--url", url, "--users", "2", "--duration", DURATION, cwd=tmp_path)

    assert run.returncode == 1, run.stdout + run.stderr  # the throughput gate of slo.env cannot be met
    assert int(run.stats()[("gRPC", "identity")]["Request Count"]) > 0
    [p95] = [line for line in run.stdout.splitlines() if line.startswith("p95 latency")]
    assert "<= 60000.0 ms" in p95 and p95.endswith("PASS")
    [throughput] = [line for line in run.stdout.splitlines() if line.startswith("throughput")]
    assert ">= 1e+09 rps" in throughput and throughput.endswith("FAIL")
    assert "gate LOADTEST_P95_MS=60000 from deploy/k8s/base/slo.env" in run.stderr


def test_gates_are_read_from_environment_variables(triton, loadtest, tmp_path):
    run = loadtest(
        tmp_path,
        IDENTITY_USERS,
        "--url",
        triton.http_url,
        "--duration",
        DURATION,
        env={"LOADTEST_MIN_RPS": "1e9"},
    )

    assert run.returncode == 1
    summary = json.loads((run.reports / "loadtest_summary.json").read_text())
    assert summary["passed"] is False
    [throughput] = [c for c in summary["checks"] if c["name"] == "throughput"]
    assert throughput["passed"] is False


def test_generous_gates_pass_and_reports_are_written(triton, loadtest, tmp_path):
    run = loadtest(
        tmp_path,
        IDENTITY_USERS,
        "--url", triton.http_url, "--users", "2", "--duration", "3s",
        "--p50-ms", "60000", "--p95-ms", "60000", "--p99-ms", "60000", "--max-failure-ratio", "0", "--min-rps", "0.01",
    )  # fmt: skip

    assert run.returncode == 0, run.stdout + run.stderr
    assert sum(line.endswith("PASS") for line in run.stdout.splitlines()) == 7
    names = [
        "stats.csv",
        "failures.csv",
        "exceptions.csv",
        "report.html",
        "timeline.csv",
        "chart.png",
        "summary.json",
    ]
    for name in names:
        assert (run.reports / f"loadtest_{name}").stat().st_size > 0, name

    chart = run.reports / "loadtest_chart.png"
    assert chart.read_bytes()[:8] == PNG_SIGNATURE
    with Image.open(chart) as image:
        image.verify()
    pixels = matplotlib.image.imread(chart)
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100

    assert "<html" in (run.reports / "loadtest_report.html").read_text().lower()
    timeline = (run.reports / "loadtest_timeline.csv").read_text().splitlines()
    assert timeline[0].startswith("second,users,requests_per_s")
    counted = sum(int(line.split(",")[2]) for line in timeline[1:])
    assert 0 < counted <= int(run.stats()[("", "Aggregated")]["Request Count"])


def test_samples_folder_replaces_random_inputs(triton, loadtest, tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    np.savez(samples / "a.npz", x=np.arange(6, dtype=np.float32).reshape(2, 3), tag=np.array([[b"a"], [b"b"]]))
    np.savez(samples / "b.npz", x=np.ones(5, dtype=np.float32), tag=np.array([b"unbatched"]))

    run = loadtest(
        tmp_path, IDENTITY_USERS, "--url", triton.http_url, "--samples", str(samples), "--duration", DURATION
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert int(run.stats()[("", "Aggregated")]["Failure Count"]) == 0


def test_unknown_model_is_a_setup_error(triton, loadtest, tmp_path):
    source = IDENTITY_USERS.replace('model_name = "identity"\n    batch_size = 2', 'model_name = "no_such_model"')
    run = loadtest(tmp_path, source, "--url", triton.http_url, "--duration", DURATION)

    assert run.returncode == 2
    assert "/v2/models/no_such_model/config answered 404: Request for unknown model" in run.stderr
    assert "check model_name 'no_such_model' on IdentityHttp" in run.stderr
    assert not (run.reports / "loadtest_stats.csv").exists()


def test_ui_serves_locust_web_ui_until_interrupted(triton, tmp_path):
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(IDENTITY_USERS)
    [port] = free_ports(1)
    command = [sys.executable, "-m", "loadtests", "--url", triton.http_url, "--locustfile", str(locustfile)]
    process = subprocess.Popen(
        [*command, "--ui", "--ui-port", str(port)], cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True
    )
    try:
        assert "Locust web UI at http://127.0.0.1:" in process.stderr.readline() + process.stderr.readline()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=30) as response:
            assert response.status == 200
            assert "<html" in response.read().decode().lower()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()


def test_ui_port_in_use_is_a_setup_error(triton, tmp_path):
    locustfile = tmp_path / "locustfile.py"
    locustfile.write_text(IDENTITY_USERS)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        command = [sys.executable, "-m", "loadtests", "--url", triton.http_url, "--locustfile", str(locustfile)]
        result = subprocess.run(
            [*command, "--ui", "--ui-port", port], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
        )

    assert result.returncode == 2
    assert f"cannot serve the web UI on port {port}" in result.stderr and "--ui-port" in result.stderr
