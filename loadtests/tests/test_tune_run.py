"""End-to-end: ``python -m loadtests tune`` against a real service on a real tritonserver.

The service (``loadtests.tests.tune_service``) pays a fixed cost per batch plus a cost per row, and starts
with max_batch_size 1: batching must win. The tuner runs in a subprocess with a marker in its environment;
every process it started inherits the marker, so the test can see that none is left behind.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from loadtests.tests.conftest import REPO_ROOT
from loadtests.tune.load_step import StepOptions
from loadtests.tune.measure import Measurement, Slo, Step
from loadtests.tune.service_process import Service
from loadtests.tune.space import Candidate, Space
from loadtests.tune.tuner import TuneOptions, _Run

LOCUSTFILE = """
from loadtests.http_user import KServeHttpUser


class TunedHttp(KServeHttpUser):
    model_name = "tuned"
"""
RUN_TIMEOUT_S = 240
MARKER = "LOADTESTS_TUNE_TEST_RUN"


@pytest.fixture(scope="module", autouse=True)
def _tritonserver() -> None:
    from tritonrt.exceptions import PyTritonRuntimeError
    from tritonrt.server.install import find_or_install_server

    try:
        find_or_install_server()
    except PyTritonRuntimeError as error:
        pytest.skip(f"no tritonserver available: {error}")


def _project(tmp_path: Path) -> Path:
    (tmp_path / "locustfile.py").write_text(LOCUSTFILE, encoding="utf-8")
    (tmp_path / "slo.env").write_text("LOADTEST_P95_MS=1000\nQUEUE_TARGET_MS=20\n", encoding="utf-8")
    return tmp_path


def _command(project: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "loadtests", "tune",
        "--package", "loadtests.tests.tune_service", "--model", "tuned",
        "--tuning-file", str(project / "tuning.json"), "--slo-env", str(project / "slo.env"),
        "--locustfile", str(project / "locustfile.py"), "--reports", str(project / "reports"),
        "--max-batch-sizes", "8", "--queue-delays-us", "0", "--preferred", "off", "--instances", "1",
        "--modes", "thread", "--step-s", "2", "--max-users", "16", "--budget-min", "3", *extra,
    ]  # fmt: skip


def _environment(marker: str) -> dict[str, str]:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("LOADTEST_")}
    return environ | {MARKER: marker}


def _left_behind(marker: str) -> list[str]:
    """Processes that still carry the run's marker (the tuner's services, tritonservers, load steps)."""
    left = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            if process.environ().get(MARKER) == marker:
                left.append(f"{process.info['pid']} {process.info['name']}")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return left


def _wait_gone(marker: str, timeout_s: float = 30.0) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while (left := _left_behind(marker)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def test_tuning_picks_batching_and_applies_it(tmp_path: Path) -> None:
    project = _project(tmp_path)
    marker = uuid.uuid4().hex
    result = subprocess.run(
        _command(project, "--apply"),
        cwd=REPO_ROOT,
        env=_environment(marker),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    report = json.loads((project / "reports" / "tune.json").read_text())
    assert report["baseline"]["max_batch_size"] == 1
    assert report["winner"]["max_batch_size"] == 8, result.stdout
    scores = {m["label"]: m["score_rps"] for m in report["measurements"]}
    assert scores["bs8 q0us 1i thread"] > 2 * scores["bs1 q0us 1i thread"], scores
    # The batching candidate was served by a reload of the running service's model: no second service started
    # (unless tritonserver 2.51's known crash after a load took the service: then it is measured on a new one).
    served = {m["label"]: m["served_by"] for m in report["measurements"]}
    if "the service exited after the reload" not in result.stderr:
        assert served == {"bs1 q0us 1i thread": "start", "bs8 q0us 1i thread": "reload"}, result.stderr[-3000:]
        assert [path.name for path in (project / "reports" / "tune" / "services").glob("*.log")] == ["baseline.log"]
        assert any(note.startswith("candidates served: 1 started the service") for note in report["notes"])
    assert json.loads((project / "tuning.json").read_text())["max_batch_size"] == 8
    assert '+  "max_batch_size": 8,' in result.stdout and "wrote" in result.stdout
    slo = (project / "slo.env").read_text()
    assert "LOADTEST_P95_MS=1000\n" in slo and "QUEUE_TARGET_MS=20\n" not in slo
    assert "QUEUE_TARGET_MS = " in result.stdout and "the queue time of one pod at its capacity" in result.stdout
    assert (project / "reports" / "tune.png").read_bytes().startswith(b"\x89PNG")
    assert "[2]" in result.stderr and "req/s within the SLO" in result.stderr  # a progress line per candidate
    assert _wait_gone(marker) == []


def test_a_gil_bound_callable_is_tuned_to_worker_processes(tmp_path: Path) -> None:
    """4 ms of Python per row: two worker processes serve about twice what one instance does (a thread or a
    process), two threads no more (one GIL). The tuner must move instances and worker mode together."""
    project = _project(tmp_path)
    marker = uuid.uuid4().hex
    command = _command(
        project, "--max-batch-sizes", "1", "--instances", "1,2", "--modes", "thread,process", "--max-users", "8"
    )  # the current settings (bs1 q0us 1i thread) and three candidates
    result = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=_environment(marker) | {"TUNE_SERVICE_CPU_MS_PER_ROW": "4"},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    report = json.loads((project / "reports" / "tune.json").read_text())
    scores = {m["label"]: m["score_rps"] for m in report["measurements"]}
    assert (report["winner"]["instances"], report["winner"]["workers"]) == (2, "process"), scores
    baseline = report["measurements"][0]  # the current settings, measured first
    assert (report["baseline"]["instances"], report["baseline"]["workers"]) == (1, "thread")
    assert {m["served_by"] for m in report["measurements"]} == {"start"}  # instances and modes: bound at start
    assert scores["bs1 q0us 2i process"] > 1.25 * baseline["score_rps"], scores
    assert _wait_gone(marker) == []


def test_the_winner_is_measured_at_the_lighter_loads_its_climb_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A candidate's climb starts where earlier ones peaked; before the queue target is derived, the winner is
    served again at the loads it skipped (their queue time may be the highest within the SLO)."""
    project = _project(tmp_path)
    marker = uuid.uuid4().hex
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setenv(MARKER, marker)
    for variable in [name for name in os.environ if name.startswith("LOADTEST_")]:
        monkeypatch.delenv(variable)
    options = TuneOptions(
        service=Service.of("loadtests.tests.tune_service", "tuned"),
        space=Space(),
        slo=Slo(p95_ms=1000.0),
        step=StepOptions(locustfile=project / "locustfile.py", duration_s=2.0),
        budget_s=0.0,  # spent: the lighter loads are measured all the same
        tuning_file=project / "tuning.json",
        slo_env=project / "slo.env",
        reports=project / "reports",
        start_users=1,
    )
    with _Run(options) as run:
        winner = Measurement(Candidate(8, 0, False, 1, "thread"), (Step(4, 400, 80.0, 50.0, 0.0, 1.0),), options.slo)
        run.measurements.append(winner)
        measured = run.measure_lighter(winner)

    assert [step.users for step in measured.steps] == [1, 2, 4]
    assert all(step.requests > 0 and step.queue_ms is not None for step in measured.steps[:2]), measured.steps
    assert run.measurements == [measured]
    assert _wait_gone(marker) == []


def test_ctrl_c_keeps_the_best_so_far_and_leaves_nothing_running(tmp_path: Path) -> None:
    project = _project(tmp_path)
    marker = uuid.uuid4().hex
    tuner = subprocess.Popen(
        # More candidates than the search needs to end, so that the run outlasts a test slow to send its Ctrl+C
        # on a loaded machine (2 candidates took 24 s, and the run ended before the signal came).
        _command(project, "--max-batch-sizes", "4,8,16", "--instances", "1,2"),
        cwd=REPO_ROOT,
        env=_environment(marker),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert tuner.stderr is not None
        seen: list[str] = []
        for line in tuner.stderr:  # the second candidate starts once the first is measured
            seen.append(line)
            if line.startswith("[2]"):
                break
        assert seen and seen[-1].startswith("[2]"), "".join(seen)[-3000:]  # it ended before a second candidate
        tuner.send_signal(signal.SIGINT)
        stdout, stderr = tuner.communicate(timeout=120)
    finally:
        if tuner.poll() is None:
            tuner.kill()
    assert tuner.returncode == 0, stdout + stderr
    report = json.loads((project / "reports" / "tune.json").read_text())
    assert any("Ctrl+C" in note for note in report["notes"]), (report["notes"], stderr[-3000:])
    assert report["winner"] is not None and report["measurements"][0]["score_rps"] > 0
    assert not (project / "tuning.json").exists()  # no --apply: nothing written
    assert _wait_gone(marker) == []
